"""torchtitan without FSDP and with TP or PP trains in fp32 (issue 22), as pytorch/torchtitan @e347b1e5e
(the stack's pinned, TOML-configured commit) runs it:

- distributed/utils.py maybe_enable_amp l. 243-263: FSDP enabled -> mixed precision by fully_shard's
  MixedPrecisionPolicy(param_dtype=mixed_precision_param); else with TP or PP -> 'Mixed precision training
  is disabled' (nullcontext, no autocast); else (DDP, one device) torch.autocast(mixed_precision_param);
- distributed/parallel_dims.py l. 334-335: fsdp_enabled = dp_shard > 1 or cp > 1 (CP counts);
- train.py l. 147-151: the model is built under set_default_dtype(training.dtype), float32 by default
  (config/job_config.py l. 275): with mixed precision off its weights, gradients, activations and matmuls
  are fp32; with training.dtype bfloat16 (the planner's bytes_per_param pure-bf16) they are bf16.

The planner has no fp32 precision (precisions.PRECISIONS), so such a plan is refused (start-up rule
TORCHTITAN_FP32, code 62), not priced. Before, llama3-8b TP 8 on 8 GPUs (sharding none) was priced as
bf16 training and fit ranked it third of 829 rows on 8 H100s (118 such rows: sharding none, cp 1,
tp x pp > 1); now 711 rows, none of them (with --bytes-per-param pure-bf16: 933 rows, 130 of them, as
before).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import BytesPerParam, Job
from planner.stacks import load_stack
from planner.startup import BY_CODE, CODES, cluster_of, rules_for
from planner.trainers.export import export_plan
from planner.explain import evaluate, to_json

from conftest import assert_one_error

RULE = "TORCHTITAN_FP32"


def _job(**kw):
    job = dict(model="llama3-8b", gpus=8, stack="torchtitan", hardware="h100-sxm", tp=8, pp=1, sharding="none",
               global_batch=8, seq_len=8192, micro_batch=1)
    job.update(kw)
    return Job(**job)


def _broken_keys(job: Job) -> list[str]:
    """The start-up rules the job's resolved plan breaks, every one (not only the first)."""
    try:
        settings, plan, _ = resolve(job)
    except PlannerError as e:
        return [k for k in CODES if f"start-up rule {k} " in e.message]
    cluster = cluster_of(settings.hardware, settings.gpus)  # (the rules that read the hardware: rulectx's)
    return [r.key for _, r in rules_for(settings.stack) if bool(np.any(r.check(settings.model, settings.stack, plan, cluster)))]


def test_code_and_place():
    # appended to LATER_RULES after TORCHTITAN_EP_FSDP (54): 48 + 7
    assert CODES[RULE] == 62 and BY_CODE[62].key == RULE and BY_CODE[62].trainer == "torchtitan"
    assert RULE in [r.key for _, r in rules_for(load_stack("torchtitan"))]
    assert RULE not in [r.key for _, r in rules_for(load_stack("megatron"))]


def test_tp8_without_fsdp_is_refused_naming_the_rule():
    with pytest.raises(PlannerError) as e:
        resolve(_job())
    assert f"breaks start-up rule {RULE} of torchtitan" in e.value.message
    assert "trains this plan in fp32" in e.value.message
    assert "@e347b1e5e torchtitan/distributed/utils.py maybe_enable_amp l. 243-263" in e.value.message
    assert "parallel_dims.py l. 334-335" in e.value.message
    assert "sharding fsdp or hsdp" in e.value.hint and "pure-bf16" in e.value.hint


@pytest.mark.parametrize("kw,broken", [
    # dp_shard x cp = 1 with TP or PP: no FSDP, no autocast, fp32
    (dict(tp=8), True),
    (dict(tp=1, pp=8), True),
    (dict(tp=4, pp=2), True),
    (dict(tp=2, pp=2, gpus=4), True),
    # no TP and no PP: DDP under torch.autocast(bf16), or one device
    (dict(tp=1, gpus=1), False),
    (dict(tp=1, gpus=8), False),
    # FSDP over dp_shard x cp > 1 ranks: fully_shard's MixedPrecisionPolicy (bf16 params)
    (dict(tp=4, sharding="fsdp"), False),  # dp_shard 2
    (dict(tp=4, cp=2, dp=1, sharding="fsdp"), False),  # dp_shard 1, cp 2: fsdp_enabled through CP
    (dict(tp=2, pp=2, sharding="hsdp", shard_group=2), False),  # dp 2 = 1 replica x shard 2
    # training.dtype bfloat16: the model is bf16, trained in bf16 without autocast
    (dict(tp=8, bytes_per_param="pure-bf16"), False),
    (dict(tp=4, pp=2, bytes_per_param="pure-bf16"), False),
    (dict(tp=8, bytes_per_param=BytesPerParam(weights=2, gradients=2, master=0, optimizer=4)), False),
    # fp32 master beside 2 B weights (mixed16's own numbers, as a custom spec): still training.dtype float32
    (dict(tp=8, bytes_per_param=BytesPerParam(weights=2, gradients=2, master=4, optimizer=8)), True),
])
def test_which_plans_break_it(kw, broken):
    assert (RULE in _broken_keys(_job(**kw))) is broken


def test_with_replicas_ddp_1d_answers_first():
    """llama3 at dp 2 x tp 4, sharding none: TORCHTITAN_DDP_1D (code 29, llama3's RuntimeError) is named,
    and this rule is broken too (with training.dtype float32 the models whose DDP check never fires,
    qwen3 / deepseek_v3 / gpt_oss, would train it in fp32)."""
    with pytest.raises(PlannerError, match="TORCHTITAN_DDP_1D"):
        resolve(_job(tp=4, dp=2))
    stack = load_stack("torchtitan")
    assert stack.runs.sharding[0].name == "ddp"
    ddp = SimpleNamespace(smode=np.int64(0), shard=np.int64(2), dp=np.int64(2), cp=np.int64(1), tp=np.int64(4),
                          pp=np.int64(1))
    assert bool(BY_CODE[62].broken(None, stack, ddp))


def test_vectorized_over_candidates():
    """One call over many candidates, each by hand: smode indexes stack_db torchtitan runs.sharding
    (0 ddp, 1 fsdp2, ..., 4 hsdp), dp_shard = 1 (ddp) / shard group (hsdp) / dp (fsdp modes)."""
    stack = load_stack("torchtitan")
    names = [m.name for m in stack.runs.sharding]
    assert names[0] == "ddp" and names[1] == "fsdp2" and names[4] == "hsdp"
    #         ddp tp8  ddp pp2  ddp dp8  fsdp dp1 cp2 tp4  hsdp shard1 tp2  hsdp shard2 tp2  fsdp dp2 tp4  ddp 1 GPU
    p = SimpleNamespace(
        smode=np.array([0, 0, 0, 1, 4, 4, 1, 0]),
        dp=np.array([1, 1, 8, 1, 4, 4, 2, 1]),
        shard=np.array([1, 1, 8, 1, 1, 2, 2, 1]),
        cp=np.array([1, 1, 1, 2, 1, 1, 1, 1]),
        tp=np.array([8, 1, 1, 4, 2, 2, 4, 1]),
        pp=np.array([1, 2, 1, 1, 1, 1, 1, 1]))
    want = np.array([True, True, False, False, True, False, False, False])
    assert (BY_CODE[62].broken(None, stack, p) == want).all()
    pure = stack.model_copy(update={"defaults": stack.defaults.model_copy(update={"bytes_per_param": "pure-bf16"})})
    assert not BY_CODE[62].broken(None, pure, p).any()


def test_explain_and_check_exit_2(cli, tmp_path):
    args = ["--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--hardware", "h100-sxm", "--tp", "8",
            "--sharding", "none", "--global-batch", "8", "--seq-len", "8192"]
    assert_one_error(cli("explain", *args), RULE)
    r = cli("explain", *args, "--bytes-per-param", "pure-bf16")
    assert r.exit_code == 0, r.stderr
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\nstack: torchtitan\nhardware: h100-sxm\ntp: 8\nsharding: none\n"
                   "global_batch: 8\nseq_len: 8192\n")
    r = cli("check", str(job))
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert RULE in r.stdout + r.stderr


def test_fit_never_ranks_it():
    from planner.search import fit

    res = fit(Job(model="llama3-8b", gpus=8, stack="torchtitan", hardware="h100-sxm"), top=100000)
    rows = [r["plan"] for r in res.rows]
    assert any(p["tp"] * p["pp"] > 1 and p["sharding"] == "fsdp" for p in rows)  # TP / PP beside FSDP still rank
    assert not [p for p in rows if p["sharding"] == "none" and p["cp"] == 1 and p["tp"] * p["pp"] > 1]
    res = fit(Job(model="llama3-8b", gpus=8, stack="torchtitan", hardware="h100-sxm", bytes_per_param="pure-bf16"),
              top=100000)
    assert [p for p in (r["plan"] for r in res.rows) if p["sharding"] == "none" and p["tp"] == 8]


TOML = ('[model]\nname = "llama3"\nflavor = "8B"\n[training]\n{dtype}local_batch_size = 1\nglobal_batch_size = 8\n'
        'seq_len = 8192\n[parallelism]\ndata_parallel_replicate_degree = 1\ndata_parallel_shard_degree = {shard}\n'
        'tensor_parallel_degree = 8\n')


def test_a_toml_with_tp_and_no_dp_shard_is_refused(cli, tmp_path):
    toml = tmp_path / "tt.toml"
    for shard in ("1", "-1"):  # -1: the leftover ranks, 8 / 8 = 1
        toml.write_text(TOML.format(dtype="", shard=shard))
        assert_one_error(cli("explain", str(toml), "--gpus", "8", "--hardware", "h100-sxm"), RULE)
    toml.write_text(TOML.format(dtype='dtype = "float32"\n', shard="1"))
    assert_one_error(cli("explain", str(toml), "--gpus", "8", "--hardware", "h100-sxm"), RULE)
    toml.write_text(TOML.format(dtype='dtype = "bfloat16"\n', shard="1"))  # a bf16 model: runs as priced
    r = cli("explain", str(toml), "--gpus", "8", "--hardware", "h100-sxm")
    assert r.exit_code == 0, r.stderr


def test_export_writes_the_pure_bf16_plan_and_refuses_the_fp32_one():
    from planner.cli.export import check_readback

    settings, plan, _ = resolve(_job(bytes_per_param="pure-bf16"))
    js = to_json(settings, plan, evaluate(settings, plan))
    text, _ = export_plan(js["plan"], "torchtitan")
    check_readback(js, "torchtitan", text)
    assert 'dtype = "bfloat16"\n' in text and "tensor_parallel_degree = 8\n" in text
    with pytest.raises(PlannerError, match=RULE):
        export_plan({**js["plan"], "bytes_per_param": "mixed16"}, "torchtitan")
