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
MDS = "megatron-deepspeed"
GPT3 = dict(model="gpt3-175b", gpus=768, hardware="a100-sxm-80gb", stack=S21)
ROW = ["--model", "gpt3-175b", "--gpus", "768", "--hardware", "a100-sxm-80gb", "--stack", S21, "--tp", "8", "--pp", "6",
       "--micro-batch", "1", "--global-batch", "8192", "--sharding", "zero1"]

# what each shipped stack's code has, read by hand from the pinned sources (stack_db <stack> runs.* sources); None:
# the entry does not say
HAS = {
    "megatron": (True, ("none", "selective", "full"), ("flash", "eager"), ("bf16", "fp16")),
    "megatron-bridge": (True, ("none", "selective", "full"), ("flash", "eager"), ("bf16", "fp16")),  # megatron's (extends)
    "megatron-deepspeed": (True, ("none", "selective", "full"), ("flash", "eager"), ("bf16", "fp16")),
    S21: (False, ("none", "full"), ("eager",), ("fp16",)),
    # BigScience's fork @497aa1bf: no --sequence-parallel, --checkpoint-activations only, no flash flag, --fp16/--bf16
    "megatron-deepspeed-bigscience": (False, ("none", "full"), ("eager",), ("bf16", "fp16")),
    "torchtitan": (True, ("none", "selective", "full"), None, ("bf16",)),
    "torchtitan-0.3": (True, ("none", "selective", "full"), None, ("bf16",)),
    # DeepSeek-V3 (arXiv:2412.19437): the selective policy of sec. 3.2.3 only, bf16 (sec. 3.3); SP and the attention
    # kernel not said (no TP in training, no kernel named)
    "deepseek": (None, ("none", "selective"), None, ("bf16",)),
    # benchmark_litgpt.py @69ee6a218: no TP, --checkpoint_activations whole Blocks, litgpt's SDPA, model.to(bfloat16)
    "litgpt-benchmark": (False, ("none", "full"), ("flash",), ("bf16",)),
    # the Llama 3 paper (arXiv:2407.21783 sec. 3.3.2): bf16 only named; SP, recompute granularity, kernel not said
    "llama3-meta": (None, None, None, ("bf16",)),
    # llm-foundry 5e85bd62d: no TP, activation_checkpointing of whole MPTBlocks, attn_impl flash / triton (torch not
    # priced), Composer amp_bf16 / amp_fp16
    "llm-foundry": (False, ("none", "full"), ("flash",), ("bf16", "fp16")),
}

# the words of each filled field's sources that name what it was read from (a commit, a file, a section)
CITED = {
    ("llm-foundry", "sequence_parallel"): ("5e85bd62d", "max_tp 1"),
    ("llm-foundry", "recompute"): ("5e85bd62d", "train.py l. 96", "activation_checkpointing_fn l. 840-874", "MPTBlock"),
    ("llm-foundry", "attention"): ("5e85bd62d", "attention.py", "l. 577-584", "attn_impl", "blocks.py l. 23"),
    ("llm-foundry", "half_dtypes"): ("5e85bd62d", "train.py l. 304", "amp_fp16", "submit_benchmarks.py l. 59-65"),
    ("litgpt-benchmark", "sequence_parallel"): ("@69ee6a218", "max_tp 1"),
    ("litgpt-benchmark", "recompute"): ("@69ee6a218", "l. 228", "setup_activation_checkpointing l. 534-547", "Block"),
    ("litgpt-benchmark", "attention"): ("litgpt v0.4.11", "l. 294-316", "scaled_dot_product_attention"),
    ("litgpt-benchmark", "half_dtypes"): ("@69ee6a218", "init_model l. 406-412", "torch.bfloat16"),
    ("deepseek", "recompute"): ("arXiv:2412.19437 sec. 3.2.3", "Recomputation of RMSNorm and MLA Up-Projection"),
    ("deepseek", "half_dtypes"): ("arXiv:2412.19437 sec. 3.3", "BF16"),
    ("llama3-meta", "half_dtypes"): ("arXiv:2407.21783 sec. 3.3.2", "BF16 MFU"),
}


def test_codes():
    assert CODES["STACK_SEQUENCE_PARALLEL"] == 74 and CODES["STACK_RECOMPUTE"] == 75  # the newest code: tests/test_startup_codes.py; detmode: 91-93, fuzz99: 96, 97: TORCHTITAN03_STAGE_LISTS (FIXED_CODE_RULES)  # (87-89: rule87; 90: ttchecks; 94, 95: muonleft, FIXED_CODE_RULES) then DEEPSPEED_PP_SPLIT_ENDS, DEEPSPEED_MOE, DEEPSPEED_MOE_SP, TORCHTITAN_MTP_PP_CP, STACK_SP_NORM_GRADS, BRIDGE_CHUNK_CP, TORCHTITAN_HYBRIDEP, STACK_MODE_TP_PP_DP, PRECISION_AWARE_MFSDP, TORCHTITAN_SEQ_SP_CP


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
    # Megatron-DeepSpeed @f4157bea runs CoreAttention unless a --use-flash-attn* flag is given (transformer.py l. 606-611)
    assert (load_stack(MDS).defaults.attention, load_stack(MDS).defaults.fp16) == ("eager", False)
    # BigScience's fork has the eager core only (no flash flag at @497aa1bf): eager, bf16 by default
    assert (load_stack("megatron-deepspeed-bigscience").defaults.attention,
            load_stack("megatron-deepspeed-bigscience").defaults.fp16) == ("eager", False)
    assert all((load_stack(n).defaults.attention, load_stack(n).defaults.fp16) == ("flash", False)
               for n in HAS if n not in (S21, MDS, "megatron-deepspeed-bigscience"))


def test_each_filled_field_names_its_source():
    """Every field filled by issue 22's second pass cites what it was read from; the fields the sources do not give
    stay unset and the entry's `uncertain` says so."""
    for (name, field), needles in CITED.items():
        text = " ".join(getattr(load_stack(name).runs, field).sources)
        for n in needles:
            assert n in text, (name, field, n)
    for name, fields in (("llama3-meta", ("sequence_parallel", "recompute", "attention")),
                         ("deepseek", ("sequence_parallel", "attention"))):
        st = load_stack(name)
        assert all(getattr(st.runs, f) is None for f in fields)
        said = next(u for u in st.uncertain if u.startswith("runs (issue 22)"))
        assert all(f in said for f in fields), (name, said)


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
    assert default_sequence_parallel(load_stack("megatron-deepspeed"), 8) is False  # STACK_SP_NORM_GRADS (mdscheck)
    assert default_sequence_parallel(load_stack("megatron"), 8) is True
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
    settings, plan, _ = resolve(Job(**job))  # (the eager core: Megatron-DeepSpeed's without --use-flash-attn*)
    # SP off: the stack has it, but under --deepspeed nothing sums the norms' SP-partial gradients (STACK_SP_NORM_GRADS)
    assert int(plan.sp) == 0 and settings.attention == "eager" and not settings.fp16
    settings, plan, _ = resolve(Job(**{**job, "stack": "megatron"}))
    assert int(plan.sp) == 1
    settings, _, _ = resolve(Job(**job, attention="flash"))
    assert settings.attention == "flash"
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
    for field, bad, message in (("recompute", {"granularities": ["none", "full", "none"], "sources": ["x"]},
                                 r"recompute granularities repeat: \['none', 'full', 'none'\]"),
                                ("attention", {"cores": ["eager", "eager"], "sources": ["x"]},
                                 r"attention cores repeat: \['eager', 'eager'\]"),
                                ("half_dtypes", {"dtypes": ["fp16", "bf16", "fp16"], "sources": ["x"]},
                                 r"16-bit dtypes repeat: \['fp16', 'bf16', 'fp16'\]")):
        with pytest.raises(ValidationError, match=message):
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


def test_the_newly_filled_stacks_refuse_what_their_code_lacks(cli):
    """llm-foundry (5e85bd62d) re-runs whole MPTBlocks only: selective recompute is refused naming runs.recompute, and
    fit never ranks it; litgpt-benchmark trains in bf16 only (model.to(torch.bfloat16)): fp16 is refused; llm-foundry
    takes Composer's amp_fp16."""
    mpt = ["--model", "mpt-7b", "--gpus", "8", "--hardware", "a100-sxm-80gb", "--stack", "llm-foundry",
           "--global-batch", "64", "--seq-len", "2048"]
    assert_one_error(cli("explain", *mpt, "--micro-batch", "8", "--sharding", "full_shard", "--recompute", "selective"),
                     "STACK_RECOMPUTE", "llm-foundry", "runs.recompute", "recompute none, full")
    assert cli("explain", *mpt, "--micro-batch", "8", "--sharding", "full_shard", "--recompute", "full",
               "--fp16").exit_code == 0
    res = fit(Job(model="mpt-7b", gpus=8, hardware="a100-sxm-80gb", stack="llm-foundry", global_batch=64, seq_len=2048),
              top=50)
    assert res.rows and all(r["plan"]["recompute"] in ("none", "full") for r in res.rows)
    assert any("STACK_RECOMPUTE" in k for k in res.counts.reasons)
    with pytest.raises(PlannerError, match="runs.half_dtypes"):
        resolve(Job(model="llama3-8b", gpus=8, stack="litgpt-benchmark", fp16=True))
    with pytest.raises(PlannerError, match="runs.half_dtypes"):
        resolve(Job(model="llama3-8b", gpus=8, stack="llama3-meta", fp16=True))


LLAMA = dict(model="llama3-8b", gpus=64, stack=MDS)


def test_fit_plans_the_fastest_core_explain_the_codes_default(cli, tmp_path):
    """Megatron-DeepSpeed runs CoreAttention (the eager core) unless --use-flash-attn* is given: a job that says nothing
    about attention is priced eager by explain (listed under the stack's defaults), while fit plans runs.attention's
    first core, flash; its row's explain command names --attention flash and its export writes --use-flash-attn-v2,
    which the script reader reads back as flash. Before: fit's row 1 was the same plan (TP 1, DP 64, zero2, 617,143
    tokens/s) but priced under defaults.attention flash, and explain without --attention priced flash too."""
    res = fit(Job(**LLAMA), top=3)
    top = res.rows[0]
    assert top["plan"]["attention"] == "flash"
    assert (top["plan"]["tp"], top["plan"]["pp"], top["plan"]["dp"], top["plan"]["sharding"]) == (1, 1, 64, "zero2")
    args = explain_args(Job(**LLAMA), top)
    assert args[args.index("--attention") + 1] == "flash"
    settings, _, _ = resolve(row_job(Job(**LLAMA), top))
    assert settings.attention == "flash"
    # the same plan with nothing said about attention: the code's default, the eager core
    plain = [a for i, a in enumerate(args) if a != "--attention" and (i == 0 or args[i - 1] != "--attention")]
    r = cli("explain", *plain)
    assert r.exit_code == 0, r.stderr
    inherited = next(ln for ln in r.stdout.splitlines() if "from the stack's defaults" in ln)
    assert "attention eager" in inherited and "attention eager" in r.stdout
    f = cli("explain", *args)
    assert f.exit_code == 0 and "attention flash2" in f.stdout
    out = tmp_path / "run.sh"
    e = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--stack", MDS, "--export", "megatron-deepspeed", "-o", out)
    assert e.exit_code == 0, e.stderr
    assert "--use-flash-attn-v2" in out.read_text()
    back = cli("explain", out)
    assert back.exit_code == 0 and "attention flash2" in back.stdout, back.stderr
    # pinned, fit plans what it is told
    assert all(r["plan"]["attention"] == "eager" for r in fit(Job(**LLAMA, attention="eager"), top=3).rows)


@pytest.mark.parametrize("stack", ["megatron", "torchtitan"])
def test_fit_and_explain_keep_flash_where_it_is_the_default(stack):
    """Megatron-LM (TE's fused attention) and torchtitan (SDPA) run a fused core by default: fit and explain agree on
    flash and the row's explain command names no --attention."""
    job = Job(model="llama3-8b", gpus=8, stack=stack)
    row = fit(job, top=1).rows[0]
    assert row["plan"]["attention"] == "flash" and "--attention" not in explain_args(job, row)


def test_megatron_deepspeed_refuses_sp_its_deepspeed_path_never_reduces(cli):
    """mdscheck (issue 22, microsoft/Megatron-DeepSpeed#170): under SP each TP rank runs the norms on its own 1 / tp of
    the sequence, so their weights' (and the row-parallel biases') gradients are partial per rank. Megatron-DeepSpeed
    @f4157bea sums them over TP in optimizer.py allreduce_layernorm_grads (l. 257-277), called by reduce_model_grads
    only 'if not args.deepspeed' (training.py l. 730-732); DeepSpeed @38327e07 reduces over DP alone (engine.py
    l. 2048-2063, 2567-2574). Megatron-LM @d98e8a64 sums them in finalize_model_grads.py
    _allreduce_non_tensor_model_parallel_grads (l. 416-474, called l. 661): SP stays on the megatron stack."""
    sp = load_stack(MDS).runs.sequence_parallel
    assert sp.supported and sp.norm_grads_reduced is False
    said = " ".join(sp.sources)
    for cite in ("@f4157bea", "training.py train_step l. 730-732", "'if not args.deepspeed'", "allreduce_layernorm_grads "
                 "l. 257-277", "@38327e07", "allreduce_gradients l. 2048-2063", "Megatron-DeepSpeed#170"):
        assert cite in said, cite
    assert CODES["STACK_SP_NORM_GRADS"] == 80
    job = ["--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--sharding", "zero1", "--stack", MDS]
    assert_one_error(cli("explain", *job, "--sequence-parallel"), "STACK_SP_NORM_GRADS", "norm_grads_reduced false",
                     "--no-sequence-parallel")
    r = cli("explain", *job)  # left out: off, as the stack's default (Megatron-DeepSpeed's own: store_true)
    assert r.exit_code == 0, r.stderr
    assert "sequence_parallel False" in next(ln for ln in r.stdout.splitlines() if "from the stack's defaults" in ln)
    r = cli("explain", *job[:-1], "megatron", "--sequence-parallel")
    assert r.exit_code == 0, r.stderr
    # fit ranks no SP row on the stack and counts the SP candidates under the rule (before: TP 4 PP 8 DP 32, micro-batch
    # 2, SP on first, 92.5 s; now micro-batch 1, SP off, 98.4 s); pinned SP: no plan (exit 1), the rule named
    res = fit(Job(model="gpt3-175b", gpus=1024, hardware="a100-sxm-80gb", stack=MDS), top=10)
    assert all(row["plan"]["sequence_parallel"] is False for row in res.rows)
    assert next(v for k, v in res.counts.reasons.items() if "STACK_SP_NORM_GRADS" in k) > 0
    top = res.rows[0]["plan"]
    assert (top["tp"], top["pp"], top["dp"], top["micro_batch"], top["sharding"]) == (4, 8, 32, 1, "zero1")
    r = cli("fit", "--model", "gpt3-175b", "--gpus", "1024", "--hardware", "a100-sxm-80gb", "--stack", MDS,
            "--sequence-parallel")
    assert r.exit_code == 1 and "STACK_SP_NORM_GRADS" in r.stderr and "Traceback" not in r.stderr
    # every other shipped stack: the schema's default (true), the rule never breaks
    for name in list_stacks():
        if name != MDS:
            st = load_stack(name)
            assert st.runs is None or st.runs.sequence_parallel is None or st.runs.sequence_parallel.norm_grads_reduced
