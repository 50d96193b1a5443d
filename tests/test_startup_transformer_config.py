"""Megatron-Core's model-config checks against the plan (issue 22): TransformerConfig.__post_init__
and ModelParallelConfig.__post_init__ at NVIDIA/Megatron-LM @d98e8a64 (megatron/core/transformer/
transformer_config.py, megatron/core/model_parallel_config.py), audited in
docs/megatron_validate_args.md ("Megatron-Core's model-config checks"). Each rule the audit marks
new refuses a job that breaks it (exit 2, error naming the check, hint), fit never ranks a plan
that breaks it, and a neighbouring job passes; `--fp16 --use-torch-fsdp2` is refused at job level
(validate_args l. 1046-1047) as the sharding mode's job setting. The audit table's places are
checked in tests/test_megatron_validate_args.py."""

from __future__ import annotations

import re

import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan
from planner.trainers.rules import megatron_errors, megatron_script_errors

GPT_OSS = dict(model="gpt-oss-20b", gpus=16, tp=2, ep=8, sharding="zero1", global_batch=64, seq_len=4096)
QWEN_NEXT = dict(model="qwen3-next-80b-a3b", gpus=64, tp=2, ep=8, sharding="zero1", global_batch=64, seq_len=65536)
FSDP2 = dict(model="llama3-8b", gpus=16, stack="megatron", sharding_mode="torch_fsdp2", global_batch=64, seq_len=4096)


# ---- MEGATRON_MOE_BIAS_ETP: transformer_config.py l. 2612-2615


def test_moe_with_linear_biases_and_expert_tp_is_refused(cli):
    """gpt-oss (linear_bias: Megatron's default, no --disable-bias-linear, puts biases on the experts too) at tp 2
    inherits expert TP 2, which Megatron-Core asserts against ('Bias in Moe is only supported when
    ETP==1'): explain refuses it naming the rule; etp 1 on the same mesh is accepted; torchtitan,
    which has no such check, takes etp 2."""
    r = cli("explain", "--model", "gpt-oss-20b", "--gpus", "16", "--tp", "2", "--ep", "8", "--sharding", "zero1",
            "--global-batch", "64", "--seq-len", "4096")
    assert r.exit_code == 2 and "breaks start-up rule MEGATRON_MOE_BIAS_ETP of megatron" in r.stderr
    assert "transformer_config.py TransformerConfig.__post_init__ l. 2612-2615" in r.stderr
    assert "\nhint: set etp 1" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(PlannerError, match="MEGATRON_MOE_BIAS_ETP"):
        resolve(Job(**GPT_OSS))
    plan = resolved_plan(Job(**GPT_OSS, etp=1))
    assert (plan["tp"], plan["etp"], plan["ep"]) == (2, 1, 8)
    resolve(Job(**{**GPT_OSS, "stack": "torchtitan", "sharding": "fsdp"}, etp=2))


def test_fit_never_ranks_expert_tp_for_a_model_with_linear_biases():
    """Searching tp 2 for gpt-oss-20b, every ranked plan splits the experts over ep only (etp 1);
    mixtral (no biases) still gets expert TP 2 plans on the same search."""
    rows = fit(Job(model="gpt-oss-20b", gpus=16, global_batch=64, seq_len=4096),
               opts=SpaceOptions(tp=(2,), pp=(1,)), top=30).rows
    assert rows and {r["plan"]["etp"] for r in rows} == {1}
    rows = fit(Job(model="mixtral-8x7b", gpus=16, global_batch=64, seq_len=4096),
               opts=SpaceOptions(tp=(2,), pp=(1,)), top=30).rows
    assert 2 in {r["plan"]["etp"] for r in rows}


def test_moe_bias_etp_on_arguments():
    """rules.py MOE_BIAS_ETP: --num-experts with linear biases (Megatron's default: no --disable-bias-linear) fires at
    the default expert TP (= tp 2) and passes with --expert-tensor-parallel-size 1; with --disable-bias-linear it
    passes (before 2026-12-07 the rule read --add-bias-linear, a flag Megatron-LM never defined, and passed base)."""
    base = {"--num-layers": "24", "--hidden-size": "2880", "--num-attention-heads": "64", "--seq-length": "4096",
            "--max-position-embeddings": "4096", "--micro-batch-size": "1", "--global-batch-size": "64",
            "--tensor-model-parallel-size": "2", "--sequence-parallel": True, "--num-experts": "32",
            "--kv-channels": "64"}
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    keys = lambda f: [k for k, _ in megatron_errors(f, 16, env)]  # noqa: E731
    assert keys(base) == ["MOE_BIAS_ETP"]
    assert keys({**base, "--expert-tensor-parallel-size": "1"}) == []
    assert keys({**base, "--disable-bias-linear": True}) == []


def test_the_exported_gpt_oss_script_passes_megatrons_checks():
    """The etp 1 plan exports its linear biases (no --disable-bias-linear) with --expert-tensor-parallel-size 1, which
    the transcribed checks accept."""
    text, _ = export_plan(resolved_plan(Job(**GPT_OSS, etp=1)), "megatron")
    assert "-bias-linear" not in text and re.search(r"--expert-tensor-parallel-size 1\b", text)
    assert "MOE_BIAS_ETP" not in [k for k, _ in megatron_script_errors(text)]


# ---- MEGATRON_GDN_HEADS: transformer_config.py l. 1500-1508


def test_gated_deltanet_heads_must_divide_by_tp_times_cp(cli):
    """qwen3-next-80b-a3b's Gated DeltaNet has 16 key and 32 value heads: tp 2 x cp 16 = 32 does not
    divide 16, which Megatron-Core asserts; tp 2 x cp 8 = 16 divides both and is accepted; fit
    never ranks a tp x cp above 16 for it."""
    with pytest.raises(PlannerError, match=r"MEGATRON_GDN_HEADS .*linear_num_key_heads % \(tp \* cp\)"):
        resolve(Job(**QWEN_NEXT, cp=16))
    r = cli("explain", "--model", "qwen3-next-80b-a3b", "--gpus", "64", "--tp", "2", "--cp", "16", "--ep", "8",
            "--sharding", "zero1", "--global-batch", "64", "--seq-len", "65536")
    assert r.exit_code == 2 and "MEGATRON_GDN_HEADS" in r.stderr and "\nhint: choose tp x cp" in r.stderr
    plan = resolved_plan(Job(**QWEN_NEXT, cp=8))
    assert (plan["tp"], plan["cp"]) == (2, 8)
    rows = fit(Job(model="qwen3-next-80b-a3b", gpus=64, global_batch=64, seq_len=65536),
               opts=SpaceOptions(tp=(2,), pp=(1,)), top=60).rows
    assert rows and max(r["plan"]["tp"] * r["plan"]["cp"] for r in rows) <= 16


# ---- job-level checks: transformer_config.py l. 1527-1530, 1836-1860, 3016-3019, 3043-3046


def test_bf16_layers_are_refused_with_delayed_scaling():
    """l. 1527-1530 ('Delayed scaling does not support first / last layer in BF16.'): the megatron
    stack's default fp8 recipe is delayed, so bf16 layers need another recipe; tensorwise passes."""
    job = dict(model="llama3-8b", gpus=8, sharding="zero1", global_batch=64, seq_len=4096, precision="fp8",
               bf16_layers_at_start=1)
    with pytest.raises(PlannerError, match=r"with fp8 recipe delayed: Megatron-Core refuses it .*l\. 1527-1530"):
        resolve(Job(**job))
    with pytest.raises(PlannerError, match="fp8 recipe delayed"):
        fit(Job(**job), opts=SpaceOptions(tp=(1,), pp=(1,)), top=1)
    plan = resolved_plan(Job(**job, fp8_recipe="tensorwise"))
    assert plan["bf16_layers_at_start"] == 1


# ---- MEGATRON_BF16_LAYERS_STAGE: transformer_config.py l. 1532-1555


def test_bf16_layers_above_a_stages_layers_are_refused(cli):
    """l. 1532-1555: under fp8, num_layers_at_start_in_bf16 and num_layers_at_end_in_bf16 at most
    num_layers // pp. Llama 3 8B has 32 layers: at pp 4 a stage's share is 32 // 4 = 8, so 8 bf16 layers at
    the start pass and 9 are refused (rule MEGATRON_BF16_LAYERS_STAGE, exit 2 with its hint); at pp 2 (16) 9
    pass. The end is checked alike (9 at the end, pp 4). nvfp4 has no such check (the fp4 block, l. 1578-1590)."""
    from planner.startup import CODES

    job = dict(model="llama3-8b", gpus=8, sharding="zero1", global_batch=64, seq_len=4096, precision="fp8",
               fp8_recipe="tensorwise")
    assert resolved_plan(Job(**job, pp=4, bf16_layers_at_start=8))["bf16_layers_at_start"] == 8
    for n in ({"bf16_layers_at_start": 9}, {"bf16_layers_at_end": 9}):
        with pytest.raises(PlannerError, match="MEGATRON_BF16_LAYERS_STAGE") as e:
            resolve(Job(**job, pp=4, **n))
        assert "l. 1532-1555" in e.value.message and "num_layers // pp" in e.value.hint
    assert resolved_plan(Job(**job, pp=2, bf16_layers_at_start=9))["pp"] == 2
    nv = {**job, "precision": "nvfp4", "fp8_recipe": None, "hardware": "b200"}
    assert resolved_plan(Job(**nv, pp=4, bf16_layers_at_start=9))["bf16_layers_at_start"] == 9
    # fit never ranks a pp above 32 // 9 = 3 (pp 4, 8) with 9 bf16 layers, and ranks pp 1 and 2 with them
    rows = fit(Job(**job, bf16_layers_at_start=9), opts=SpaceOptions(tp=(1,), pp=(1, 2, 4, 8)), top=50).rows
    assert rows and {r["plan"]["pp"] for r in rows} <= {1, 2} and max(r["plan"]["pp"] for r in rows) == 2
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--pp", "4", "--precision", "fp8", "--fp8-recipe",
            "tensorwise", "--bf16-layers-at-end", "9", "--global-batch", "64", "--seq-len", "4096")
    assert r.exit_code == 2 and "MEGATRON_BF16_LAYERS_STAGE" in r.stderr and "hint:" in r.stderr
    assert CODES["MEGATRON_BF16_LAYERS_STAGE"] == 96  # FIXED_CODE_RULES (fuzz99)


def test_capacity_factor_is_refused_with_sinkhorn_balancing():
    """l. 1836-1860: --moe-expert-capacity-factor only with aux_loss, seq_aux_loss, global_aux_loss or
    none balancing; sinkhorn with a capacity factor is refused, aux_loss with it passes, sinkhorn
    dropless passes."""
    job = dict(model="mixtral-8x7b", gpus=16, tp=2, ep=8, sharding="zero1", global_batch=64, seq_len=4096)
    with pytest.raises(PlannerError, match=r"moe_capacity_factor with moe_load_balancing sinkhorn.*l\. 1836-1860"):
        resolve(Job(**job, moe_capacity_factor=1.25, moe_load_balancing="sinkhorn"))
    resolve(Job(**job, moe_capacity_factor=1.25, moe_load_balancing="aux_loss"))
    resolve(Job(**job, moe_load_balancing="sinkhorn"))


def test_ep_comm_overlap_needs_a_flex_or_alltoall_dispatcher_and_one_mtp_layer():
    """l. 3016-3019 (alltoall or flex dispatcher) and l. 3043-3046 (at most one MTP layer) with
    --overlap-moe-expert-parallel-comm."""
    job = dict(model="mixtral-8x7b", gpus=16, tp=2, ep=8, sharding="zero1", global_batch=64, seq_len=4096,
               ep_comm_overlap=True)
    with pytest.raises(PlannerError, match=r"ep_comm_overlap with moe_dispatcher allgather.*l\. 3016-3019"):
        resolve(Job(**job, moe_dispatcher="allgather"))
    with pytest.raises(PlannerError, match=r"ep_comm_overlap with 2 multi-token prediction layers.*l\. 3043-3046"):
        resolve(Job(**job, mtp_layers=2))
    settings, _, _ = resolve(Job(**job, mtp_layers=1))
    assert settings.ep_comm_overlap


def test_fit_leaves_the_ep_overlap_off_with_two_mtp_layers():
    """fit turns the EP overlap on by default for an MoE model (space.py: a plan without it is
    dominated), but not where Megatron-Core refuses it: with 2 MTP layers (transformer_config.py
    @d98e8a64 l. 3043-3046) `fit --model mixtral-8x7b --gpus 16 --mtp-layers 2` ranked nothing
    and exited 2 naming ep_comm_overlap, a setting the user never gave (fuzz seed 92,
    newest-fields kind: Megatron-LM's Nemotron 3 argument file, --mtp-num-layers 2). Now every
    row runs without it; with 1 MTP layer the EP rows keep it; pinned on with 2 the job is still
    refused (the user's own setting)."""
    job = dict(model="mixtral-8x7b", gpus=16, global_batch=64, seq_len=4096)
    pin = SpaceOptions(tp=(2,), pp=(1,), ep=(8,))
    rows = fit(Job(**job, mtp_layers=2), opts=pin, top=3).rows
    assert rows and {r["plan"]["ep_comm_overlap"] for r in rows} == {False}
    rows = fit(Job(**job, mtp_layers=1), opts=pin, top=3).rows
    assert rows and {r["plan"]["ep_comm_overlap"] for r in rows} == {True}
    with pytest.raises(PlannerError, match=r"ep_comm_overlap with 2 multi-token prediction layers"):
        fit(Job(**job, mtp_layers=2, ep_comm_overlap=True), opts=pin, top=1)


# ---- --fp16 with --use-torch-fsdp2: validate_args l. 1046-1047, at job level (explain / check refuse it:
# tests/test_mode_settings.py)


def test_fit_never_ranks_torch_fsdp2_for_an_fp16_job():
    """Pinned to torch_fsdp2, an fp16 job is refused naming the check; searching every mode, no row
    is torch_fsdp2, the mode left out with its refusal cited; without fp16 the pinned search ranks it."""
    job = {k: v for k, v in FSDP2.items() if k != "sharding_mode"}
    pin = SpaceOptions(tp=(1,), cp=(1,), pp=(1,), sharding=("torch_fsdp2",))
    assert {r["plan"]["sharding_mode"] for r in fit(Job(**job), opts=pin, top=5).rows} == {"torch_fsdp2"}
    with pytest.raises(PlannerError, match="sharding mode torch_fsdp2 with fp16 true"):
        fit(Job(**job, fp16=True), opts=pin, top=5)
    rows = fit(Job(**job, fp16=True), opts=SpaceOptions(tp=(1,), cp=(1,), pp=(1,)), top=200).rows
    assert rows and "torch_fsdp2" not in {r["plan"]["sharding_mode"] for r in rows}
    assert all(r["plan"].get("fp16") for r in rows)


def test_fp16_is_priced_as_bf16_and_exported_as_megatrons_fp16(explain, tmp_path):
    """fp16 moves no figure (same width and peak); the megatron export writes --fp16 (not --bf16)
    with --accumulate-allreduce-grads-in-fp32, which keeps the fp32 gradient buffer priced (--fp16
    alone keeps it fp16, validate_args l. 1195-1217); the script reads back as the same plan and
    passes the transcribed checks; a script with --use-torch-fsdp2 and --fp16 is refused by
    `check` naming the check; torchtitan (no float16) refuses fp16."""
    job = dict(model="llama3-8b", gpus=16, sharding="zero1", global_batch=64, seq_len=4096)
    _, _, _, bf = explain(**job)
    _, _, _, fp = explain(**job, fp16=True)
    assert fp["plan"]["fp16"] is True and "fp16" not in bf["plan"]
    assert fp["memory"] == bf["memory"] and fp["time"] == bf["time"]
    plan = resolved_plan(Job(**job, fp16=True))
    text, _ = export_plan(plan, "megatron")
    assert "--fp16" in text and "--bf16" not in text and text.count("--accumulate-allreduce-grads-in-fp32") == 1
    assert megatron_script_errors(text) == []
    p = tmp_path / "fp16.sh"
    p.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(p)
    assert cfg.job["fp16"] is True and "bytes_per_param" not in cfg.job
    mixed = export_plan(resolved_plan(Job(**job, fp16=True, bytes_per_param="mixed16")), "megatron")[0]
    assert "--fp16" in mixed and "--accumulate-allreduce-grads-in-fp32" not in mixed and "--grad-reduce-in-bf16" not in mixed
    fsdp2, _ = export_plan(resolved_plan(Job(**FSDP2)), "megatron")
    bad = tmp_path / "fsdp2_fp16.sh"
    bad.write_text(fsdp2.replace("--bf16", "--fp16"), encoding="utf-8")
    assert [k for k, _ in megatron_script_errors(bad.read_text())] == ["TORCH_FSDP2"]
    from planner.trainers import load_trainer_config as load

    with pytest.raises(PlannerError, match="sharding mode torch_fsdp2 with fp16 true"):
        resolve(Job(**{**load(bad).job, "model": "llama3-8b"}))
    # torchtitan has no float16 (stack_db torchtitan runs.half_dtypes: mixed_precision_param bfloat16 | float32): the
    # job is refused before its export (issue 22; the export's own refusal stays for a stack file that does not say)
    with pytest.raises(PlannerError, match="fp16 true \\(fp16\\) on stack torchtitan.*runs.half_dtypes"):
        resolved_plan(Job(**{**job, "stack": "torchtitan", "sharding": "fsdp"}, fp16=True))


def test_moe_act_and_layernorm_recompute_are_refused_with_delayed_scaling():
    """l. 2000-2005 ('Delayed scaling does not support moe_act and layernorm recompute for fp8.'):
    refused under the megatron stack's default delayed recipe, accepted with tensorwise, and
    core_attn alone is accepted with delayed."""
    job = dict(model="mixtral-8x7b", gpus=16, tp=2, ep=8, sharding="zero1", global_batch=64, seq_len=4096,
               precision="fp8", recompute="selective")
    with pytest.raises(PlannerError, match=r"recompute_modules layernorm moe_act with fp8 recipe delayed.*l\. 2000-2005"):
        resolve(Job(**job, recompute_modules=["moe_act", "layernorm"], moe_grouped_gemm=True))
    resolve(Job(**job, recompute_modules=["moe_act", "layernorm"], moe_grouped_gemm=True, fp8_recipe="tensorwise"))
    resolve(Job(**job, recompute_modules=["core_attn"]))


# ---- MEGATRON_MOE_ACT_GROUPED_GEMM: transformer_config.py l. 1964-1967

MOE_ACT = dict(model="mixtral-8x7b", gpus=16, tp=2, ep=8, sharding="zero1", global_batch=64, seq_len=4096,
               recompute_modules=["layernorm", "moe_act"])


def test_moe_act_without_grouped_gemm_is_refused(cli, tmp_path):
    """'moe_act in recompute_modules is only supported with moe_grouped_gemm.': explain refuses the
    selective job naming the rule (exit 2, hint); with moe_grouped_gemm, or at recompute full
    (Megatron reads the modules under selective only), the neighbour passes; the export of a plan
    that breaks it is refused."""
    import json

    p = tmp_path / "job.yaml"
    p.write_text(json.dumps({**MOE_ACT, "recompute": "selective"}))
    r = cli("explain", str(p))
    assert r.exit_code == 2 and "breaks start-up rule MEGATRON_MOE_ACT_GROUPED_GEMM of megatron" in r.stderr
    assert "transformer_config.py TransformerConfig.__post_init__ l. 1964-1967" in r.stderr
    assert "\nhint: set moe_grouped_gemm" in r.stderr and "Traceback" not in r.stderr
    resolve(Job(**MOE_ACT, recompute="selective", moe_grouped_gemm=True))
    resolve(Job(**MOE_ACT, recompute="full"))
    plan = resolved_plan(Job(**MOE_ACT, recompute="selective", moe_grouped_gemm=True))
    export_plan(plan, "megatron")
    with pytest.raises(PlannerError, match="MEGATRON_MOE_ACT_GROUPED_GEMM"):
        export_plan({**plan, "moe_grouped_gemm": False}, "megatron")


def test_fit_never_ranks_selective_moe_act_without_grouped_gemm():
    """The search drops recompute selective for such a job (counted under the rule) and ranks the
    other modes; with moe_grouped_gemm selective plans are ranked again."""
    pin = SpaceOptions(tp=(2,), pp=(1,), ep=(8,))
    res = fit(Job(**{k: v for k, v in MOE_ACT.items() if k not in ("tp", "ep")}), opts=pin, top=200)
    assert res.rows and "selective" not in {r["plan"]["recompute"] for r in res.rows}
    c = res.counts
    assert sum(n for text, n in c.reasons.items() if "MEGATRON_MOE_ACT_GROUPED_GEMM" in text) > 0
    assert c.considered == c.broke_constraint + c.did_not_fit + c.feasible
    res = fit(Job(**{k: v for k, v in MOE_ACT.items() if k not in ("tp", "ep")}, moe_grouped_gemm=True), opts=pin, top=200)
    assert "selective" in {r["plan"]["recompute"] for r in res.rows}


def test_graphed_attention_recompute_with_dropout_is_refused():
    """l. 2870-2884: a model with attention dropout (megatron-gpt-1.7b, exported --attention-dropout
    0.1) under selective recompute (Megatron's default module core_attn) with the whole layer graphed
    is refused; graphing only the mlp, or a model without dropout, is accepted."""
    job = dict(model="megatron-gpt-1.7b", gpus=8, sharding="zero1", global_batch=64, seq_len=2048, recompute="selective",
               cuda_graph_impl="transformer_engine")
    with pytest.raises(PlannerError, match="attention dropout is not supported with graphed attention recomputation"):
        resolve(Job(**job))
    with pytest.raises(PlannerError, match="attention dropout"):
        resolve(Job(**job, cuda_graph_scope=["attn"]))
    resolve(Job(**job, cuda_graph_scope=["mlp"]))
    resolve(Job(**{**job, "model": "llama3-8b", "seq_len": 4096}))


def test_ep_overlap_with_transformer_engine_graphs_of_the_experts_is_refused():
    """l. 3063-3072: --overlap-moe-expert-parallel-comm with transformer_engine graphs of the moe or
    mlp scope is refused; the router scopes (graphed before the dispatch) are accepted."""
    job = dict(model="mixtral-8x7b", gpus=16, tp=2, ep=8, sharding="zero1", global_batch=64, seq_len=4096,
               ep_comm_overlap=True, cuda_graph_impl="transformer_engine", moe_capacity_factor=1.0,
               moe_pad_to_capacity=True)
    with pytest.raises(PlannerError, match="not graphed by transformer_engine with ep_comm_overlap"):
        resolve(Job(**job, cuda_graph_scope=["moe"]))
    resolve(Job(**job, cuda_graph_scope=["attn", "moe_router", "moe_preprocess"]))
    resolve(Job(**{**job, "ep_comm_overlap": False}, cuda_graph_scope=["moe"]))


def test_moe_act_and_expert_bias_on_arguments():
    """rules.py MOE_ACT_GROUPED (l. 1964-1967) and EXPERT_BIAS (l. 2617-2625) on arguments: each
    fires on its broken flags and passes on the neighbour; the exported gpt-oss script (a softmax
    router with a linear bias, moe_act with the grouped GEMM) passes both."""
    base = {"--num-layers": "24", "--hidden-size": "2880", "--num-attention-heads": "64", "--seq-length": "4096",
            "--max-position-embeddings": "4096", "--micro-batch-size": "1", "--global-batch-size": "64",
            "--num-experts": "32", "--kv-channels": "64"}
    keys = lambda f: [k for k, _ in megatron_errors(f, 16, {})]  # noqa: E731
    sel = {**base, "--recompute-granularity": "selective", "--recompute-modules": "layernorm moe_act"}
    assert keys(sel) == ["MOE_ACT_GROUPED"]
    assert keys({**sel, "--moe-grouped-gemm": True}) == []
    assert keys({**base, "--recompute-modules": "moe_act"}) == []  # no selective granularity: not read
    assert keys({**base, "--moe-router-enable-expert-bias": True}) == ["EXPERT_BIAS"]
    assert keys({**base, "--moe-router-enable-expert-bias": True, "--moe-router-score-function": "sigmoid"}) == []
    job = Job(model="gpt-oss-20b", gpus=16, ep=8, sharding="zero1", global_batch=64, seq_len=4096,
              recompute="selective", recompute_modules=["layernorm", "moe_act"], moe_grouped_gemm=True)
    text, _ = export_plan(resolved_plan(job), "megatron")
    assert "--moe-router-enable-expert-bias" not in text and "--moe-grouped-gemm" in text
    assert not {"MOE_ACT_GROUPED", "EXPERT_BIAS"} & {k for k, _ in megatron_script_errors(text)}


# ---- top-1 softmax routing needs pre-softmax: transformer_config.py l. 2661-2669


def _variant(tmp_path, base: str, name: str, edit) -> str:
    import yaml

    from planner.catalog import model_source

    m = yaml.safe_load(model_source(base).read_text(encoding="utf-8"))
    m["name"] = name
    m.pop("training", None)
    edit(m)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(m), encoding="utf-8")
    return str(p)


def test_top1_softmax_router_takes_pre_softmax(tmp_path, cli):
    """Mixtral with top-1 routing (softmax score): Megatron-Core raises without --moe-router-pre-softmax
    (sinkhorn aside). A job saying nothing runs it on (inherited) and the export writes the flag; a job
    saying false is refused (exit 2); sinkhorn balancing, top-2 and torchtitan keep Megatron's default off."""
    top1 = _variant(tmp_path, "mixtral-8x7b", "mixtral-top1", lambda m: m["moe"].update(top_k=1))
    job = dict(model=top1, gpus=64, tp=1, pp=1, ep=8, sharding="zero1", global_batch=64, seq_len=4096)
    settings, _, _ = resolve(Job(**job))
    assert settings.moe_router_pre_softmax is True and ("moe_router_pre_softmax", True) in settings.inherited
    text, _ = export_plan(resolved_plan(Job(**job)), "megatron")
    assert "--moe-router-pre-softmax" in text and not megatron_script_errors(text)
    assert [k for k, _ in megatron_script_errors(text.replace("--moe-router-pre-softmax", ""))] == ["TOP1_PRE_SOFTMAX"]
    with pytest.raises(PlannerError, match="Please use --moe-router-pre-softmax when topk is 1"):
        resolve(Job(**job, moe_router_pre_softmax=False))
    r = cli("explain", "--model", top1, "--gpus", "64", "--tp", "1", "--pp", "1", "--ep", "8", "--sharding", "zero1",
            "--global-batch", "64", "--seq-len", "4096", "--no-moe-router-pre-softmax")
    assert r.exit_code == 2 and "l. 2661-2669" in r.stderr and "\nhint: set moe_router_pre_softmax true" in r.stderr
    assert resolve(Job(**job, moe_router_pre_softmax=False, moe_load_balancing="sinkhorn"))[0].moe_router_pre_softmax is False
    assert resolve(Job(**{**job, "model": "mixtral-8x7b"}))[0].moe_router_pre_softmax is False
    tt = dict(job, stack="torchtitan", sharding="fsdp")
    assert resolve(Job(**tt, moe_router_pre_softmax=False))[0].moe_router_pre_softmax is False


# ---- bias-activation fusion of a plain MLP needs linear biases: transformer_config.py l. 2420-2437


def test_plain_mlp_without_biases_runs_the_fusion_off(tmp_path, cli):
    """GPT-3 175B without linear biases: Megatron-LM turns --bias-gelu-fusion off without
    --add-bias-linear (validate_args l. 1604-1606) and Megatron-Core raises with it on: a job saying
    nothing runs it off (inherited; the export writes --no-bias-gelu-fusion and reads back the same),
    one saying true is refused; with biases (the zoo's GPT-3) the fusion stays on."""
    nob = _variant(tmp_path, "gpt3-175b", "gpt3-nobias", lambda m: m.update(linear_bias=False))
    job = dict(model=nob, gpus=64, tp=8, pp=1, sharding="zero1", global_batch=64, seq_len=2048)
    settings, _, _ = resolve(Job(**job))
    assert settings.bias_activation_fusion is False and ("bias_activation_fusion", False) in settings.inherited
    plan = resolved_plan(Job(**job))
    text, _ = export_plan(plan, "megatron")
    assert "--no-bias-gelu-fusion" in text and "--disable-bias-linear" in text
    p = tmp_path / "run.sh"
    p.write_text(text)
    assert load_trainer_config(p, model=nob).job["bias_activation_fusion"] is False
    with pytest.raises(PlannerError, match="add_bias_linear must also be True"):
        resolve(Job(**job, bias_activation_fusion=True))
    assert resolve(Job(**{**job, "model": "gpt3-175b"}))[0].bias_activation_fusion is True


# ---- MLA's rope fusion needs YaRN: transformer_config.py l. 3345-3346


def test_mla_without_yarn_runs_the_rope_fusion_off(tmp_path):
    """DeepSeek-V3 (rope_scaling yarn, config.json) keeps Megatron's fused RoPE and no --rope-type;
    the same MLA model with plain RoPE runs it off (inherited) and exports --rope-type rope
    --no-rope-fusion (Megatron's MLA default is yarn); a job asking for the fusion is refused."""
    from planner.catalog import load_model

    assert load_model("deepseek-v3").rope_scaling == "yarn" and load_model("kimi-k2").rope_scaling == "yarn"
    plain = _variant(tmp_path, "deepseek-v3", "mla-rope", lambda m: (m.pop("rope_scaling"), m.pop("rope_yarn_params")))
    job = dict(gpus=256, tp=1, pp=8, ep=32, sharding="zero1", global_batch=512, seq_len=4096, moe_dispatcher="alltoall")
    settings, _, _ = resolve(Job(model=plain, **job))
    assert settings.apply_rope_fusion is False and ("apply_rope_fusion", False) in settings.inherited
    text, _ = export_plan(resolved_plan(Job(model=plain, **job)), "megatron")
    assert "--rope-type rope" in text and "--no-rope-fusion" in text and not megatron_script_errors(text)
    assert [k for k, _ in megatron_script_errors(text.replace("--no-rope-fusion", ""))] == ["MLA_ROPE_FUSION"]
    with pytest.raises(PlannerError, match="only works with YARN RoPE"):
        resolve(Job(model=plain, apply_rope_fusion=True, **job))
    settings, _, _ = resolve(Job(model="deepseek-v3", **job))
    assert settings.apply_rope_fusion is True
    text, _ = export_plan(resolved_plan(Job(model="deepseek-v3", **job)), "megatron")
    assert "--rope-type" not in text and "--no-rope-fusion" not in text


def test_hf_config_rope_scaling_type(tmp_path):
    """rope_scaling's type (or rope_type) is read into ModelSpec.rope_scaling; 'default' or none: null."""
    from planner.hf_config import read

    base = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=512, intermediate_size=1024,
                num_attention_heads=8, num_key_value_heads=8, num_hidden_layers=2, vocab_size=1000,
                max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                hidden_act="silu")
    for rs, want in (({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}, "llama3"), ({"type": "yarn", "factor": 4.0}, "yarn"),
                     (None, None)):
        data, _ = read({**base, **({"rope_scaling": rs} if rs else {})}, "config.json")
        assert data.get("rope_scaling") == want


@pytest.mark.parametrize("arch, zoo, want", [("kimi-k2-instruct", "kimi-k2", "yarn"), ("gpt-oss-20b", "gpt-oss-20b", "yarn"),
                                             ("gpt-oss-120b", "gpt-oss-120b", "yarn"),
                                             ("llama-4-scout-17b-16e-instruct", "llama4-scout", "llama3"),
                                             ("llama-4-maverick-17b-128e-instruct", "llama4-maverick", None),
                                             ("gemma-3-27b-it", "gemma3-27b", "linear")])
def test_stored_hf_configs_and_zoo_agree_on_rope_scaling(arch, zoo, want):
    """tests/data/arch's config.json files ('type' in Kimi K2's, 'rope_type' in the later ones) and the
    zoo entries that state rope_scaling."""
    import json as _json
    from pathlib import Path

    from planner.catalog import load_model
    from planner.hf_config import read

    cfg = _json.loads((Path(__file__).parent / "data" / "arch" / arch / "config.json").read_text())
    data, _ = read(cfg, "config.json")
    assert data.get("rope_scaling") == want
    assert load_model(zoo).rope_scaling == want
