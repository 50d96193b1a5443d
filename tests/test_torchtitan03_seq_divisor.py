"""Start-up rule TORCHTITAN_SEQ_SP_CP (code 85, issue 22 rule85): torchtitan 0.3.0's sequence-length check.

pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/trainer.py Trainer.__init__ l. 306-315:

    seq_len_divisor = (parallel_dims.tp if config.parallelism.enable_sequence_parallel else 1) * (
        2 * parallel_dims.cp if parallel_dims.cp > 1 else 1)
    if config.training.seq_len % seq_len_divisor != 0: raise ValueError(...)

and no model's parallelize asserts parallel_dims.seq_len_divisor at that commit (only experiments/ read it). main
@e347b1e5e asserts seq_len % (tp x cp x 2) in each model's parallelize (models/llama3/infra/parallelize.py l. 69-74,
distributed/parallel_dims.py l. 364-372), whatever SP and cp are: rule TORCHTITAN_SEQ_DIVISOR (28). Each stack lists the
other's rule absent (stack_db runs.startup_rules_absent).

Hand cases (llama3-8b, 8 GPUs):
  tp 4, SP off, seq 2050:  0.3 divisor 1 x 1 = 1 -> runs;           main 4 x 2 = 8, 2050 % 8 = 2 -> refused
  tp 4, SP on,  seq 2050:  0.3 divisor 4 x 1 = 4, 2050 % 4 = 2 -> refused
  tp 1, cp 1,   seq 4095:  0.3 divisor 1 -> runs;                   main 1 x 2 = 2, 4095 odd -> refused
  cp 2, tp 1,   seq 4098:  0.3 divisor 1 x 4 = 4, 4098 % 4 = 2 -> refused (main likewise, 4)
  cp 2, tp 1,   seq 4100:  4100 % 4 = 0 -> runs on both"""

from __future__ import annotations

import pytest

from planner.catalog import load_stack
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, rules_for

from conftest import resolve_verdict

BASE = dict(model="llama3-8b", gpus=8, global_batch=8, sharding="fsdp")
SRC = "release/0.3 @4f9e9a47d torchtitan/trainer.py Trainer.__init__ l. 306-315"


def test_code_and_rule_sets():
    assert CODES["TORCHTITAN_SEQ_SP_CP"] == 85
    keys = {n: {r.key for _, r in rules_for(load_stack(n))} for n in ("torchtitan", "torchtitan-0.3")}
    assert "TORCHTITAN_SEQ_SP_CP" in keys["torchtitan-0.3"] and "TORCHTITAN_SEQ_DIVISOR" not in keys["torchtitan-0.3"]
    assert "TORCHTITAN_SEQ_DIVISOR" in keys["torchtitan"] and "TORCHTITAN_SEQ_SP_CP" not in keys["torchtitan"]


def _verdict(stack, **job):
    return resolve_verdict(**BASE, stack=stack, **job)


@pytest.mark.parametrize("job, on_03, on_main", [
    (dict(tp=4, sequence_parallel=False, seq_len=2050), None, "TORCHTITAN_SEQ_DIVISOR"),
    (dict(tp=4, seq_len=2050), "TORCHTITAN_SEQ_SP_CP", "TORCHTITAN_SEQ_DIVISOR"),
    (dict(tp=1, seq_len=4095), None, "TORCHTITAN_SEQ_DIVISOR"),
    (dict(cp=2, seq_len=4098), "TORCHTITAN_SEQ_SP_CP", "TORCHTITAN_SEQ_DIVISOR"),
    (dict(cp=2, seq_len=4100), None, None),
])
def test_hand_cases(job, on_03, on_main):
    for stack, rule in (("torchtitan-0.3", on_03), ("torchtitan", on_main)):
        m = _verdict(stack, **job)
        if rule is None:
            assert m is None, (stack, job, m)
        else:
            assert m is not None and f"breaks start-up rule {rule} of torchtitan" in m, (stack, job, m)
    if on_03:
        assert SRC in _verdict("torchtitan-0.3", **job)


def test_fit_ranks_tp4_only_without_sp_at_seq_2050():
    """seq 2050 on 0.3: tp 1 (divisor 1) and tp 2 (2 under SP, 1 without) both ways, tp 4 only without SP (4 under SP:
    2050 % 4 = 2, refused and counted); main ranks tp 1 only (tp 2: 2050 % 4, tp 4: 2050 % 8)."""
    opts = SpaceOptions(tp=(1, 2, 4), pp=(1,), cp=(1,))
    res = fit(Job(**BASE, seq_len=2050, stack="torchtitan-0.3"), opts=opts, top=500)
    seen = {(r["plan"]["tp"], r["plan"]["sequence_parallel"]) for r in res.rows}
    assert (4, False) in seen and (4, True) not in seen and (2, True) in seen and (2, False) in seen
    assert any("TORCHTITAN_SEQ_SP_CP" in x and SRC in x for x in res.counts.reasons)
    res = fit(Job(**BASE, seq_len=2050, stack="torchtitan"), opts=opts, top=500)
    assert res.rows and {r["plan"]["tp"] for r in res.rows} == {1}
