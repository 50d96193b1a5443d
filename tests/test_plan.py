"""planner/plan.py: the interleaved schedule's micro-batch rule per stack (stack_db runs.schedules
microbatches): Megatron-LM's multiple of pp, torch.distributed.pipelining's rounds (torchtitan),
Llama 3's any count."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.explain import evaluate
from planner.pipeline import microbatch_group
from planner.plan import interleaved_m_broken, resolve
from planner.schema import Job
from planner.catalog import load_stack
from planner.memory import STAGE_FIRST


def _torch_accepts(p: int, m: int) -> bool:
    """torch ScheduleInterleaved1F1B.__init__: number_of_rounds = max(1, m // pp), m % rounds == 0."""
    return m % max(1, m // p) == 0


def test_torch_rounds_group_is_microbatch_group():
    """For every count torch accepts (pp 2-64, m below 40 pp), the N contiguous micro-batches torch
    runs a virtual stage for, microbatches_per_round = m // rounds, is pipeline.microbatch_group's N
    (the smallest bubble-free group): the in-flight counts and the bubble the planner prices for
    Megatron's groups hold for torch's. And the rule refuses exactly the counts torch refuses."""
    torchtitan = load_stack("torchtitan")
    checked = refused = 0
    for p in range(2, 65):
        ms = list(range(1, 40 * p))
        broken = interleaved_m_broken(torchtitan, ms, p)
        for m, b in zip(ms, broken):
            assert bool(b) == (not _torch_accepts(p, m)), (p, m)
            if _torch_accepts(p, m):
                assert int(microbatch_group(p, m)) == m // max(1, m // p), (p, m)
                checked += 1
            else:
                refused += 1
    assert checked > 10_000 and refused > 10_000


def test_the_three_rules_by_hand():
    """pp 4: Megatron-LM takes 8 and 12 only; torch takes 3 (one round of 3), 6 (one round of 6),
    8, 10 (2 rounds of 5), 12, 15 (3 of 5), not 9 (2 rounds), 14 (3 rounds) or 18 (4 rounds);
    llama3-meta takes every count."""
    ms = [3, 6, 8, 9, 10, 12, 14, 15, 18]
    assert [bool(x) for x in interleaved_m_broken(load_stack("megatron"), ms, 4)] == [
        True, True, False, True, True, False, True, True, True]
    assert [bool(x) for x in interleaved_m_broken(load_stack("torchtitan"), ms, 4)] == [
        False, False, False, True, False, False, True, False, True]
    assert not any(interleaved_m_broken(load_stack("llama3-meta"), ms, 4))


JOB = dict(model="llama3-8b", gpus=32, tp=2, pp=4, vpp=2, micro_batch=1, seq_len=8192, sharding="fsdp")


def test_torchtitan_runs_ten_microbatches_on_four_stages_megatron_does_not():
    """Llama 3 8B on TP 2 x PP 4 x vpp 2 x DP 4: a global batch of 40 is m = 10 a pipeline. torchtitan
    (torch's 2 rounds of N = 5) runs it: stage 0 holds 2(p - 1) + (v - 1) N + 1 = 12 chunk-micro-
    batches, as at m = 6 (one round of 6, capped at m v = 12) and one more than m = 8 (N = 4: 11);
    36 (m = 9: 2 rounds, 9 % 2 = 1) is refused naming torch's rule; megatron refuses 40."""
    acts = {}
    for gbs in (32, 24, 40):
        s, p, _ = resolve(Job(**JOB, global_batch=gbs, stack="torchtitan"))
        m = int(p.microbatches)
        acts[m] = float(evaluate(s, p).stages[STAGE_FIRST]["layer_activations"])
    assert acts[6] == pytest.approx(acts[10], rel=1e-12)
    assert acts[10] / acts[8] == pytest.approx(12 / 11, rel=1e-12)
    with pytest.raises(PlannerError, match=r"splits 9 micro-batches per pipeline into max\(1, 9 // pp=4\) = 2 rounds, "
                                           r"and 9 is not a multiple of 2 \(torch.distributed.pipelining"):
        resolve(Job(**JOB, global_batch=36, stack="torchtitan"))
    with pytest.raises(PlannerError, match=r"divisible by pp=4 on stack megatron"):
        resolve(Job(**{**JOB, "sharding": "zero1"}, global_batch=40, stack="megatron"))
