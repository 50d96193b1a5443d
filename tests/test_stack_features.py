"""Issue 22: on the stack the user picks, fit never ranks a mode the stack lacks. The stack entries say what their
code has (stack_db runs.sequence_parallel, runs.recompute, runs.attention, runs.half_dtypes, each cited) and what a
job that says nothing runs (defaults.attention, defaults.fp16). megatron-deepspeed-2021 (Megatron-LM of April 2021
under DeepSpeed a12aaedc) has no sequence parallelism and no selective recompute (both Korthikanti et al. 2022,
arXiv:2205.05198, in Megatron-LM from 2022-04/05), no FlashAttention (2022: its core attention is baddbmm,
FusedScaleMaskSoftmax and bmm) and no bf16 (no bf16 anywhere in DeepSpeed a12aaedc deepspeed/; its engine halves the
model with fp16 or asserts fp32 parameters). Start-up rules STACK_SEQUENCE_PARALLEL (74) and STACK_RECOMPUTE (75)."""

import pytest
from pydantic import ValidationError

from conftest import assert_one_error
from planner.catalog import list_stacks, load_stack
from planner.errors import PlannerError
from planner.plan import default_sequence_parallel, resolve
from planner.schema import Job, Stack, StackRuns
from planner.search import explain_args, fit, row_job
from planner.startup import CODES

S21 = "megatron-deepspeed-2021"
GPT3 = dict(model="gpt3-175b", gpus=768, hardware="a100-sxm-80gb", stack=S21)
ROW = ["--model", "gpt3-175b", "--gpus", "768", "--hardware", "a100-sxm-80gb", "--stack", S21, "--tp", "8", "--pp", "6",
       "--micro-batch", "1", "--global-batch", "8192", "--sharding", "zero1"]

# what each shipped stack's code has, read by hand from the pinned sources (stack_db <stack> runs.* sources); None:
# the entry does not say
HAS = {
    "megatron": (True, ("none", "selective", "full"), ("flash", "eager"), ("bf16", "fp16")),
    "megatron-deepspeed": (True, ("none", "selective", "full"), ("flash", "eager"), ("bf16", "fp16")),
    S21: (False, ("none", "full"), ("eager",), ("fp16",)),
    "torchtitan": (True, ("none", "selective", "full"), None, ("bf16",)),
    "torchtitan-0.3": (True, ("none", "selective", "full"), None, ("bf16",)),
    "deepseek": (None, None, None, None),
    "litgpt-benchmark": (None, None, None, None),
    "llama3-meta": (None, None, None, None),
    "llm-foundry": (None, None, None, None),
}


def test_codes():
    assert CODES["STACK_SEQUENCE_PARALLEL"] == 74 and CODES["STACK_RECOMPUTE"] == 75 and max(CODES.values()) == 78  # then DEEPSPEED_PP_SPLIT_ENDS, DEEPSPEED_MOE, DEEPSPEED_MOE_SP


def test_each_stack_says_what_its_code_has():
    assert set(list_stacks()) == set(HAS)
    for name, (sp, rc, att, half) in HAS.items():
        runs = load_stack(name).runs
        got = (None if runs.sequence_parallel is None else runs.sequence_parallel.supported,
               None if runs.recompute is None else tuple(runs.recompute.granularities),
               None if runs.attention is None else tuple(runs.attention.cores),
               None if runs.half_dtypes is None else tuple(runs.half_dtypes.dtypes))
        assert got == (sp, rc, att, half), name
        for f in ("sequence_parallel", "recompute", "attention", "half_dtypes"):
            v = getattr(runs, f)
            assert v is None or (v.sources and all(s.strip() for s in v.sources)), (name, f)
    st = load_stack(S21)
    assert (st.defaults.attention, st.defaults.fp16) == ("eager", True)
    assert all((load_stack(n).defaults.attention, load_stack(n).defaults.fp16) == ("flash", False) for n in HAS if n != S21)


def test_fit_never_ranks_what_the_2021_code_lacked():
    """Before: row 1 was TP 4 PP 6 with SP on, flash attention, bf16 (62.5% MFU) and selective recompute row 2."""
    res = fit(Job(**GPT3), top=10)
    for row in res.rows:
        p = row["plan"]
        assert p["sequence_parallel"] is False and p["recompute"] in ("none", "full"), p
        assert p["attention"] == "eager" and p.get("fp16") is True, p
        assert p["sharding_mode"] != "bf16_optimizer"
    top = res.rows[0]["plan"]
    assert (top["tp"], top["pp"], top["dp"], top["micro_batch"], top["sharding"], top["recompute"]) == (8, 6, 16, 1, "zero1", "none")
    c = res.counts
    sp_line = next(v for k, v in c.reasons.items() if "STACK_SEQUENCE_PARALLEL" in k)
    rc_line = next(k for k in c.reasons if "STACK_RECOMPUTE" in k)
    assert sp_line > 0 and f"stack_db {S21} runs.recompute" in rc_line
    # every valid base candidate was crossed with none, selective and full; selective dropped and counted: the
    # candidates left (none and full, half each) are the feasible ones and those that did not fit
    assert 2 * c.reasons[rc_line] == c.feasible + c.did_not_fit
    assert c.considered == c.broke_constraint + c.feasible + c.did_not_fit == 32_799  # the space itself is unchanged
    # the row's explain command takes the stack's defaults: no SP, attention or fp16 flag
    args = explain_args(Job(**GPT3), res.rows[0])
    assert not {"--sequence-parallel", "--no-sequence-parallel", "--attention", "--fp16", "--no-fp16"} & set(args)
    settings, plan, _ = resolve(row_job(Job(**GPT3), res.rows[0]))
    assert int(plan.sp) == 0 and settings.attention == "eager" and settings.fp16


def test_explain_takes_the_stacks_defaults(cli):
    r = cli("explain", *ROW)
    assert r.exit_code == 0, r.stderr
    assert "SP off" in r.stdout and "bf16 (fp16, priced as bf16)" in r.stdout and "attention eager" in r.stdout
    inherited = next(ln for ln in r.stdout.splitlines() if "from the stack's defaults" in ln)
    for s in ("attention eager", "fp16 True", "sequence_parallel False"):
        assert s in inherited
    assert default_sequence_parallel(load_stack(S21), 8) is False
    assert default_sequence_parallel(load_stack("megatron-deepspeed"), 8) is True
    assert default_sequence_parallel(load_stack("megatron"), 1) is False


@pytest.mark.parametrize("flag,needles", [
    (["--sequence-parallel"], ["STACK_SEQUENCE_PARALLEL", S21, "runs.sequence_parallel", "supported false"]),
    (["--recompute", "selective"], ["STACK_RECOMPUTE", S21, "runs.recompute", "recompute none, full"]),
    (["--attention", "flash"], [S21, "runs.attention", "eager only"]),
    (["--no-fp16"], [S21, "runs.half_dtypes", "fp16 only"]),
])
def test_explain_refuses_a_feature_the_stack_lacks(cli, flag, needles):
    assert_one_error(cli("explain", *ROW, *flag), *needles)


@pytest.mark.parametrize("flag,needles", [
    (["--sequence-parallel"], [S21, "runs.sequence_parallel"]),
    (["--recompute", "none,selective"], ["--recompute selective", S21, "runs.recompute", "none, full"]),
    (["--attention", "flash"], [S21, "runs.attention"]),
])
def test_fit_refuses_a_pinned_feature_the_stack_lacks(cli, flag, needles):
    assert_one_error(cli("fit", "--model", "gpt3-175b", "--gpus", "768", "--hardware", "a100-sxm-80gb", "--stack", S21,
                         *flag), *needles)


def test_the_other_stacks_keep_sp_selective_flash_bf16():
    job = dict(model="gpt3-175b", gpus=768, hardware="a100-sxm-80gb", tp=8, pp=6, micro_batch=1, global_batch=8192,
               sharding="zero1", stack="megatron-deepspeed")
    settings, plan, _ = resolve(Job(**job))
    assert int(plan.sp) == 1 and settings.attention == "flash" and not settings.fp16
    settings, plan, _ = resolve(Job(**job, recompute="selective"))
    assert int(plan.recompute) == 1
    with pytest.raises(PlannerError, match="runs.half_dtypes"):  # torchtitan's mixed_precision_param: no float16
        resolve(Job(model="llama3-8b", gpus=8, stack="torchtitan", fp16=True))


def test_schema_refuses_unknown_or_contradicting_capabilities():
    runs = load_stack(S21).runs.model_dump()
    for field, bad in (("recompute", {"granularities": ["partial"], "sources": ["x"]}),
                       ("recompute", {"granularities": ["none", "none"], "sources": ["x"]}),
                       ("recompute", {"granularities": ["none"], "sources": []}),
                       ("sequence_parallel", {"supported": "maybe", "sources": ["x"]}),
                       ("sequence_parallel", {"supported": False}),
                       ("attention", {"cores": ["fused"], "sources": ["x"]}),
                       ("half_dtypes", {"dtypes": ["fp8"], "sources": ["x"]}),
                       ("half_dtypes", {"dtypes": ["fp16"], "sources": ["x"], "default": "fp16"})):
        with pytest.raises(ValidationError):
            StackRuns(**{**runs, field: bad})
    data = load_stack(S21).model_dump()
    with pytest.raises(ValidationError, match="defaults.attention flash is not among runs.attention"):
        Stack(**{**data, "defaults": {**data["defaults"], "attention": "flash"}})
    with pytest.raises(ValidationError, match="defaults.fp16 false"):
        Stack(**{**data, "defaults": {**data["defaults"], "fp16": False}})
    with pytest.raises(ValidationError, match="lacks none"):
        Stack(**{**data, "runs": {**runs, "recompute": {"granularities": ["full"], "sources": ["x"]}}})
    with pytest.raises(ValidationError, match="score_softmax"):
        Stack(**{**data, "kernels": {**data["kernels"], "score_softmax": None}})


def test_check_suggests_only_what_the_stack_has(cli, tmp_path):
    """TP 4 PP 3 at micro-batch 1 on the 2021 stack: the eager core keeps the [heads/tp, s, s] scores, 139.3 GiB; the
    changes `check` tries are resolved as the job's own fields plus the change (check.apply: no default made explicit,
    so the stack's eager core and fp16 stay), and selective recompute, which the stack lacks, is never suggested: full
    recompute passes (63.1 GiB, as `explain --recompute full` prices it)."""
    job = tmp_path / "job.yaml"
    job.write_text(f"model: gpt3-175b\ngpus: 768\nhardware: a100-sxm-80gb\nstack: {S21}\ntp: 4\npp: 3\nmicro_batch: 1\n"
                   "global_batch: 8192\nsharding: zero1\n")
    r = cli("check", job)
    assert r.exit_code == 1, r.stderr
    assert "recompute none -> full: 63.1 GiB" in r.stdout and "selective" not in r.stdout
    e = cli("explain", "--model", "gpt3-175b", "--gpus", "768", "--hardware", "a100-sxm-80gb", "--stack", S21, "--tp", "4",
            "--pp", "3", "--micro-batch", "1", "--global-batch", "8192", "--sharding", "zero1", "--recompute", "full")
    assert e.exit_code == 0 and "63.09" in e.stdout
