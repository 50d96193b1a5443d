"""torchtitan's PTRR CP load balancer needs FlexAttention's BlockMask (issue 22, ttchecks): start-up rule 90
TORCHTITAN_CP_PTRR_MASK and the job field cp_load_balancer.

Sources:
  main @e347b1e5e torchtitan/distributed/context_parallel.py cp_shard l. 186-206: load_balancer_type "headtail" builds
      _HeadTailLoadBalancer ("For SDPA"), "ptrr" _PTRRLoadBalancer ("For FlexAttention"), which first raises ValueError
      where attention_masks is None or a dict (l. 196-200) or no BlockMask (l. 201-205). torchtitan/train.py
      post_dataloading_process l. 457-466: attention masks are built only for attn_type flex / varlen (SDPA: none), and
      cp_shard runs where cp is enabled (prepare_context_parallel_input, l. 468-476).
  0.3.0 release/0.3 @4f9e9a47d torchtitan/distributed/context_parallel/api.py cp_shard l. 225-259: the same (None
      refused l. 232-236; a mask that is no BlockMask l. 254-258); its language models build FlexAttention (the default)
      or varlen, and varlen is refused under CP before (rule 86 TORCHTITAN_VARLEN_CP).
Hand cases (llama3-8b, 8 H100, seq 8192, FSDP): main's default attn_type sdpa, cp 2, ptrr -> refused (no mask); with
attention_backend flex -> runs; cp 1 -> never sharded, runs (ptrr listed as ignored at cp 1); headtail -> runs. 0.3 at
cp 2 with ptrr -> runs (flex); with varlen -> refused, by rule 86 (the lower code reports first). Both balancers
split the causal work evenly: a ptrr plan is priced as the headtail one (the same step and memory).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_one_error, resolve_verdict
from planner.catalog import load_stack
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, rules_for
from planner.trainers import load_trainer_config

RULE = "TORCHTITAN_CP_PTRR_MASK"
SRC = "torchtitan/distributed/context_parallel.py cp_shard l. 191-206"
BASE = dict(model="llama3-8b", gpus=8, global_batch=8, seq_len=8192, sharding="fsdp", stack="torchtitan",
            hardware="h100-sxm")


def _verdict(**job):
    return resolve_verdict(**{**BASE, **job})


def test_code_and_the_stacks_that_list_it():
    """Code 90, the first of ttchecks' two; a check of the option runs.cp_load_balancers (StartupRule.option): listed on
    both torchtitan stacks, which name headtail and ptrr, never on Megatron-LM's (no such option)."""
    assert CODES[RULE] == 90
    for st in ("torchtitan", "torchtitan-0.3"):
        assert load_stack(st).runs.cp_load_balancers == ["headtail", "ptrr"]
        assert RULE in {r.key for _, r in rules_for(load_stack(st))}
    assert load_stack("megatron").runs.cp_load_balancers is None
    assert RULE not in {r.key for _, r in rules_for(load_stack("megatron"))}


@pytest.mark.parametrize("job, refused", [
    (dict(cp=2, cp_load_balancer="ptrr"), RULE),                              # sdpa: attention_masks None
    (dict(cp=2, cp_load_balancer="ptrr", attention_backend="flex"), None),    # one BlockMask
    (dict(cp=1, cp_load_balancer="ptrr"), None),                              # cp_shard never runs
    (dict(cp=2, cp_load_balancer="headtail"), None),
    (dict(cp=2), None),
    (dict(cp=2, cp_load_balancer="ptrr", stack="torchtitan-0.3"), None),      # 0.3's default backend: flex
    (dict(cp=2, cp_load_balancer="ptrr", stack="torchtitan-0.3", attention_backend="varlen"), "TORCHTITAN_VARLEN_CP"),
])
def test_hand_cases(job, refused):
    m = _verdict(**job)
    if refused is None:
        assert m is None, m
    else:
        assert m is not None and f"breaks start-up rule {refused} of torchtitan" in m
        if refused == RULE:
            assert SRC in m and "cp 2" in m and "BlockMask" in m


def test_priced_as_the_balanced_split():
    """ptrr and headtail both balance the causal work: the same memory and step (flex, cp 2); at cp 1 it is said."""
    def priced(**job):
        settings, plan, warnings = resolve(Job(**{**BASE, "attention_backend": "flex", **job}))
        est = evaluate(settings, plan)
        return float(est.memory.total), float(est.step_s), warnings

    on, off = priced(cp=2, cp_load_balancer="ptrr"), priced(cp=2)
    assert on[:2] == off[:2]
    assert any(w == "cp_load_balancer ptrr ignored at cp 1 (no sequence split: nothing to balance)"
               for w in priced(cp=1, cp_load_balancer="ptrr")[2])


def test_refused_where_the_stack_has_no_option_or_none_is_asked_too():
    m = _verdict(stack="megatron", sharding="zero1", cp=2, cp_load_balancer="ptrr")
    assert m is not None and "cp_load_balancer ptrr is set but stack megatron has no option" in m
    m = _verdict(cp=2, cp_load_balancer="ptrr", attention_backend="flex", cp_load_balance=False)
    assert m is not None and "cp_load_balancer ptrr with cp_load_balance false" in m


def test_fit_never_ranks_a_cp_row_without_flex():
    """fit with ptrr on main: SDPA's cp 2 rows break the rule (counted under it), cp 1 rows rank; with flex, cp 2 rows
    rank and carry the balancer."""
    opts = SpaceOptions(tp=(1,), pp=(1,), cp=(1, 2))
    res = fit(Job(**{**BASE, "cp_load_balancer": "ptrr"}), opts=opts, top=200)
    assert res.rows and {r["plan"]["cp"] for r in res.rows} == {1}
    assert RULE in " ".join(res.counts.reasons)
    res = fit(Job(**{**BASE, "cp_load_balancer": "ptrr", "attention_backend": "flex"}), opts=opts, top=200)
    cp2 = [r for r in res.rows if r["plan"]["cp"] == 2]
    assert cp2 and all(r["plan"]["cp_load_balancer"] == "ptrr" for r in cp2)


def _toml(tmp_path, cp: int, flavor: str = "8B", balancer: str = "ptrr"):
    p = tmp_path / f"tt-{cp}-{flavor}.toml"
    p.write_text('[model]\nname = "llama3"\n' f'flavor = "{flavor}"\n'
                 "[training]\nlocal_batch_size = 1\nseq_len = 8192\n"
                 f'[parallelism]\ncontext_parallel_degree = {cp}\ncontext_parallel_load_balancer = "{balancer}"\n')
    return p


def test_main_toml_reads_ptrr_into_the_job(cli, tmp_path):
    """A main TOML saying ptrr at cp 2: the job field cp_load_balancer ptrr. The 8B flavor (attn_type sdpa) is refused
    by the rule; 8B_flex (models/llama3/__init__.py: attn_type flex) runs. At the file's cp 1 with --cp 2 the key is
    read at the command line's cp (torchtitan run with --parallelism.context_parallel_degree 2 shards with ptrr):
    refused alike (before: listed as ignored at the file's cp 1, the sdpa plan priced). At the file's cp 1 alone the job
    holds ptrr too (resolve says it is ignored at cp 1), so fit's CP rows are checked by the rule as explain of their
    reproduce lines is (fuzz13: fit ranked the sdpa flavor's cp 2 rows, whose lines exit 2)."""
    cfg = load_trainer_config(_toml(tmp_path, 2), gpus=8, hardware="h100-sxm")
    assert cfg.job["cp_load_balancer"] == "ptrr"
    assert_one_error(cli("explain", str(_toml(tmp_path, 2)), "--gpus", "8", "--hardware", "h100-sxm"),
                     f"breaks start-up rule {RULE}", SRC)
    r = cli("explain", str(_toml(tmp_path, 2, "8B_flex")), "--gpus", "8", "--hardware", "h100-sxm", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["cp_load_balancer"] == "ptrr"
    assert_one_error(cli("explain", str(_toml(tmp_path, 1)), "--gpus", "8", "--hardware", "h100-sxm", "--cp", "2"),
                     f"breaks start-up rule {RULE}")
    cfg = load_trainer_config(_toml(tmp_path, 1), gpus=8, hardware="h100-sxm")
    assert cfg.job["cp_load_balancer"] == "ptrr" and cfg.job["cp"] == 1
    assert any(a.startswith("cp_load_balancer=ptrr") and "where CP runs" in a for a in cfg.assumed)
    assert not any("context_parallel_load_balancer" in x for x in cfg.ignored)
    r = cli("explain", str(_toml(tmp_path, 1)), "--gpus", "8", "--hardware", "h100-sxm")
    assert r.exit_code == 0, r.stderr
    assert "cp_load_balancer ptrr ignored at cp 1 (no sequence split: nothing to balance)" in r.stderr
    r = cli("fit", str(_toml(tmp_path, 1)), "--gpus", "8", "--hardware", "h100-sxm", "--top", "100", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert {row["plan"]["cp"] for row in json.loads(r.stdout)["rows"]} == {1}  # sdpa: no CP row under ptrr


def test_flag_over_the_files_ptrr(cli, tmp_path):
    """--no-cp-load-balance over the file's ptrr: the command line's None replaces the named balancer, noted; the plan
    runs unbalanced (no ptrr, so no mask needed: the sdpa flavor runs)."""
    r = cli("explain", str(_toml(tmp_path, 2)), "--gpus", "8", "--hardware", "h100-sxm", "--no-cp-load-balance",
            "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert "cp_load_balance=False: the command line replaces the file's load balancer ptrr (no load balancing)" in r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["cp_load_balance"] is False and "cp_load_balancer" not in plan


@pytest.mark.parametrize("stack, spelled", [
    ("torchtitan", 'context_parallel_load_balancer = "ptrr"'),
    ("torchtitan-0.3", "--parallelism.context_parallel_load_balancer ptrr"),
])
def test_export_writes_it_and_reads_back(cli, tmp_path, stack, spelled):
    """The export carries the balancer in the trainer's spelling (main: [parallelism] context_parallel_load_balancer,
    job_config.py l. 431; 0.3: the launch line's option, configs.py l. 235), and the file reads back as the same plan
    (fit --export / export's read-back compares plan_signature, which holds cp_load_balancer)."""
    out = tmp_path / ("job.toml" if stack == "torchtitan" else "run.sh")
    args = ["export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8",
            "--stack", stack, "--cp", "2", "--hardware", "h100-sxm", "--seq-len", "8192", "--sharding", "fsdp",
            "--cp-load-balancer", "ptrr", "-o", str(out)]
    if stack == "torchtitan":
        args += ["--attention-backend", "flex"]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert spelled in out.read_text()
    cfg = load_trainer_config(out, gpus=8, hardware="h100-sxm")
    assert cfg.job["cp_load_balancer"] == "ptrr"
    np.testing.assert_equal(cfg.job["cp"], 2)
