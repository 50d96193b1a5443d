"""Issue 22 (mdsexport): a plan priced on stack megatron-deepspeed is exported as the microsoft/Megatron-DeepSpeed
@f4157bea launch script it is (export.py _megatron_deepspeed): the fork's Megatron flags, `--deepspeed
--deepspeed_config $DS_CONFIG --zero-stage N` and the ds_config JSON (the DeepSpeed writer's, export.deepspeed_config)
written by a heredoc. Each case is read back by the Megatron reader (megatron_deepspeed.py) as the same plan and memory
(cli/export.py check_readback raises otherwise), and its file spells what the fork runs it with."""

from __future__ import annotations

import json
import re

import pytest

from conftest import assert_one_error
from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers.export import deepspeed_config, export_plan


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(stack="megatron-deepspeed", **kw))
    return to_json(settings, plan, evaluate(settings, plan))


def _round_trip(**kw) -> tuple[str, dict]:
    row = _row(**kw)
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    check_readback(row, "megatron-deepspeed", text)  # PlannerError if the script reads back as another plan or memory
    return text, row["plan"]


def _json(text: str) -> dict:
    """The ds_config the script's heredoc writes."""
    return json.loads(re.search(r"cat <<EOT > \$DS_CONFIG\n(.*?)\nEOT\n", text, re.S).group(1))


def _flags(text: str) -> list[str]:
    return re.findall(r"^    (--\S+)", text, re.M)


def test_tp4_pp8_zero1_the_plan_fit_ranks_first():
    """Llama 3 70B on 64 H100, tp 4 pp 8 dp 2 ZeRO-1: the fork's GPTModelPipe under the PipelineEngine (no
    --no-pipeline-parallel), GQA as --num-key-value-heads 8, RMSNorm as rmsnorm, RoPE as --use-rotary-position-
    embeddings with theta 500000, the batch as 2048 = 2 dp x 1 micro x 1024 accumulation steps. (fit ranked it first
    while the stack ran SP by default; since mdscheck SP is refused here, start-up rule STACK_SP_NORM_GRADS, and fit
    ranks tp 1 dp 64 FSDP first: test_fit_exports_megatron_deepspeed_end_to_end.)"""
    text, plan = _round_trip(model="llama3-70b", gpus=64, tp=4, pp=8, sharding="zero1", global_batch=2048, micro_batch=1,
                             seq_len=8192)
    f = _flags(text)
    for want in ("--num-key-value-heads", "--use-rotary-position-embeddings", "--deepspeed", "--deepspeed_config"):
        assert want in f
    assert "    --normalization rmsnorm \\\n" in text and "    --rotary-position-embeddings-theta 500000 \\\n" in text
    assert "    --tensor-model-parallel-size 4 \\\n" in text and "    --pipeline-model-parallel-size 8 \\\n" in text
    assert text.rstrip().endswith("--zero-stage 1")
    assert "--no-pipeline-parallel" not in f
    # Megatron-LM @d98e8a64's spellings the fork lacks
    for gone in ("--group-query-attention", "--num-query-groups", "--position-embedding-type", "--rotary-base",
                 "--context-parallel-size", "--attention-backend", "--recompute-granularity"):
        assert gone not in f
    # no sequence parallelism (the stack's default since mdscheck: STACK_SP_NORM_GRADS), so the engine's partitioned
    # pipe tensors run, the stack's default, and the JSON has no pipeline section
    assert not plan["sequence_parallel"] and "--sequence-parallel" not in f and "CUDA_DEVICE_MAX_CONNECTIONS" not in text
    assert _json(text) == {"train_batch_size": 2048, "train_micro_batch_size_per_gpu": 1,
                           "gradient_accumulation_steps": 1024, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 1, "overlap_comm": False}}
    # one JSON writer, the pipeline section the script's own (export._mds_pipe_section)
    assert {k: v for k, v in _json(text).items() if k != "pipeline"} == deepspeed_config(plan, "megatron-deepspeed")


def test_sequence_parallel_at_pp_and_tp_needs_the_unpartitioned_pipe(tmp_path, cli):
    """DeepSpeed's PipelineEngine partitions each TP rank's stage output over the stage's TP ranks, sends the rank's
    own 1 / tp part and all-gathers the parts on arrival (deepspeed/runtime/pipe/engine.py @38327e07 l. 719-761; the
    gradient l. 826-851; topology.py l. 355-364), on by default (runtime/config.py l. 467-468): under SP each TP rank
    holds its own sequence shard, so the rebuilt input mixes ranks' shards (microsoft/DeepSpeed#4196,
    microsoft/Megatron-DeepSpeed#227). A script with --sequence-parallel at tp 4 pp 8 (the tp 4 pp 8 export with the
    flag added) is refused by the reader without the JSON's pipeline section, or with one key left true, naming the
    keys; with both false the reader reads it, and the plan is then refused for SP itself (start-up rule
    STACK_SP_NORM_GRADS, mdscheck: under --deepspeed nothing sums the norms' SP-partial gradients over TP). Without
    SP, at tp 1 or pp 1, the export writes no section."""
    from planner.trainers import load_trainer_config

    text, plan = _round_trip(model="llama3-70b", gpus=64, tp=4, pp=8, sharding="zero1", global_batch=2048, micro_batch=1,
                             seq_len=8192, sequence_parallel=False)
    body = json.dumps(_json(text), indent=2)
    sp = text.replace("    --tensor-model-parallel-size 4 \\\n", "    --tensor-model-parallel-size 4 \\\n    --sequence-parallel \\\n")
    assert sp != text
    section = dict(_json(text), pipeline={"pipe_partitioned": False, "grad_partitioned": False})
    p = tmp_path / "run.sh"
    p.write_text(sp.replace(body, json.dumps(section, indent=2)))
    cfg = load_trainer_config(p, gpus=64)
    assert cfg.job["sequence_parallel"] is True
    assert any("pipeline" in a and "read, priced" in a for a in cfg.assumed)
    assert_one_error(cli("explain", str(p), "--gpus", "64"), "STACK_SP_NORM_GRADS", "norm_grads_reduced false")
    for cut, named in ((_json(text), "pipeline.pipe_partitioned and grad_partitioned true"),
                       (dict(section, pipeline={"pipe_partitioned": False, "grad_partitioned": True}),
                        "pipeline.grad_partitioned true")):
        p.write_text(sp.replace(body, json.dumps(cut, indent=2)))
        with pytest.raises(PlannerError, match=f"--sequence-parallel at pp 8 and tp 4 with .*{named}") as e:
            load_trainer_config(p, gpus=64)
        assert '"pipe_partitioned": false, "grad_partitioned": false' in e.value.hint
    for kw in (dict(tp=4, pp=8, sequence_parallel=False), dict(tp=1, pp=8), dict(tp=4, pp=1)):
        text, plan = _round_trip(**{**dict(model="llama3-70b", gpus=64, sharding="zero1", global_batch=2048,
                                           micro_batch=1, seq_len=8192), **kw})
        assert "pipeline" not in _json(text), kw


def test_sequence_parallel_is_refused_and_not_written():
    """--sequence-parallel is opt-in at f4157bea (arguments.py l. 972, store_true): a job that leaves SP out runs it
    off and its script has no flag and no CUDA_DEVICE_MAX_CONNECTIONS; one that asks for it at tp > 1 is refused
    (start-up rule STACK_SP_NORM_GRADS: training.py l. 730-732 sums the norms' SP-partial gradients over TP only
    'if not args.deepspeed')."""
    kw = dict(model="llama3-8b", gpus=16, tp=2, pp=2, sharding="zero1", global_batch=64, micro_batch=1, seq_len=4096)
    for extra in ({}, dict(sequence_parallel=False)):
        text, plan = _round_trip(**kw, **extra)
        assert not plan["sequence_parallel"]
        assert "--sequence-parallel" not in _flags(text) and "CUDA_DEVICE_MAX_CONNECTIONS" not in text
    with pytest.raises(PlannerError, match="STACK_SP_NORM_GRADS"):
        _row(**kw, sequence_parallel=True)


def test_zero2_at_pp1_runs_megatrons_gpt_model():
    """ZeRO-2 at pp 1: the PipelineEngine refuses stages 2-3 (pipe/engine.py @38327e07 l. 77-78), so the script says
    --no-pipeline-parallel (Megatron's GPTModel)."""
    text, plan = _round_trip(model="llama3-8b", gpus=8, tp=1, pp=1, sharding="zero2", global_batch=64, micro_batch=2,
                             seq_len=4096)
    assert "--no-pipeline-parallel" in _flags(text)
    assert _json(text)["zero_optimization"]["stage"] == 2 and _json(text)["gradient_accumulation_steps"] == 4
    assert text.rstrip().endswith("--zero-stage 2")


def test_zero3_at_tp2():
    text, plan = _round_trip(model="llama3-8b", gpus=16, tp=2, pp=1, sharding="fsdp", global_batch=64, micro_batch=1,
                             seq_len=4096)
    assert plan["sharding_mode"] == "zero3"
    assert _json(text)["zero_optimization"]["stage"] == 3 and "--no-pipeline-parallel" in _flags(text)
    assert "    --tensor-model-parallel-size 2 \\\n" in text and text.rstrip().endswith("--zero-stage 3")


def test_bf16_optimizer_is_bf16_at_stage_0():
    text, plan = _round_trip(model="llama3-8b", gpus=8, tp=2, pp=2, sharding="zero1", sharding_mode="bf16_optimizer",
                             global_batch=32, micro_batch=1, seq_len=4096)
    assert plan["sharding_mode"] == "bf16_optimizer"
    assert _json(text)["zero_optimization"]["stage"] == 0 and _json(text)["bf16"] == {"enabled": True}
    assert "--bf16" in _flags(text) and text.rstrip().endswith("--zero-stage 0")


def test_partition_activations_with_full_recompute():
    """Full recompute of every layer as --checkpoint-activations (arguments.py l. 864), partitioned over the TP ranks
    by --deepspeed-activation-checkpointing --partition-activations (l. 1524-1526)."""
    text, plan = _round_trip(model="llama3-8b", gpus=16, tp=4, pp=2, sharding="zero1", recompute="full",
                             partition_activations=True, global_batch=64, micro_batch=1, seq_len=8192)
    f = _flags(text)
    assert plan["partition_activations"] and plan["recompute"] == "full"
    for want in ("--checkpoint-activations", "--deepspeed-activation-checkpointing", "--partition-activations"):
        assert want in f
    assert "--recompute-granularity" not in f and "--recompute-method" not in f


def test_refused_what_the_fork_cannot_run():
    row = _row(model="llama3-8b", gpus=16, tp=2, pp=2, sharding="zero1", global_batch=64, micro_batch=1, seq_len=4096)
    # the TP sync is BigScience's fork's option (stack megatron-deepspeed-bigscience), not microsoft's: the plan breaks
    # the megatron-deepspeed stack's rule before the writer sees it
    with pytest.raises(PlannerError, match="sync_tp_duplicated_parameters is set but stack megatron-deepspeed does not"):
        export_plan({**row["plan"], "sync_tp_duplicated_parameters": True}, "megatron-deepspeed")
    # a plan priced on BigScience's fork is written in that fork's flags (mdsexport, tests/test_export_forks.py), and
    # Llama 3's shape is refused there: the fork builds none of RMSNorm, GQA, an untied output layer or bias-free
    # linears (start-up rule STACK_LAYER_KIND, stack_db runs.layer_kinds global not_built; mdsfork2)
    with pytest.raises(PlannerError, match=r"breaks a rule of stack megatron-deepspeed-bigscience") as e:
        export_plan({**row["plan"], "stack": "megatron-deepspeed-bigscience", "fp16": True}, "megatron-deepspeed")
    for form in ("(rmsnorm)", "(grouped_query)", "(untied_embeddings)", "(no_linear_bias)"):
        assert form in e.value.message, form
    # its DeepSpeed JSON alone is another release's file: refused, pointing at the fork's launch script
    with pytest.raises(PlannerError, match="another release of the trainer") as e:
        export_plan({**row["plan"], "stack": "megatron-deepspeed-bigscience", "tp": 1, "pp": 1, "dp": 16}, "deepspeed")
    assert "--format megatron-deepspeed" in e.value.hint
    with pytest.raises(PlannerError, match="not megatron-deepspeed"):  # a Megatron-LM plan
        export_plan(to_json(*_resolve_eval(Job(model="llama3-8b", gpus=8)))["plan"], "megatron-deepspeed")


def _resolve_eval(job):
    settings, plan, _ = resolve(job)
    return settings, plan, evaluate(settings, plan)


def test_fit_exports_megatron_deepspeed_end_to_end(cli):
    """The issue's command: fit's first row written as its script (fit --export reads it back). Before mdscheck fit
    ranked tp 4 pp 8 zero1 with SP first (65.3 GiB, 257 s, 50.3% MFU); with SP refused on the stack
    (STACK_SP_NORM_GRADS) tp 1 dp 64 ZeRO-3 (fsdp), micro-batch 2, full recompute (58.3 GiB, 279 s, 46.3%)."""
    r = cli("fit", "--model", "llama3-70b", "--gpus", "64", "--stack", "megatron-deepspeed", "--top", "1", "--export",
            "megatron-deepspeed")
    assert r.exit_code == 0, r.stderr
    assert "    --tensor-model-parallel-size 1 \\\n" in r.stdout and "    --pipeline-model-parallel-size 1 \\\n" in r.stdout
    assert r.stdout.rstrip().endswith("--zero-stage 3") and "--sequence-parallel" not in r.stdout
    r = cli("fit", "--model", "llama3-70b", "--gpus", "64", "--stack", "megatron-deepspeed", "--top", "1", "--export",
            "megatron")
    assert r.exit_code == 2 and "--stack megatron" in r.stderr


def test_config_format_megatron_deepspeed_reads_the_script_and_refuses_a_megatron_lm_one(tmp_path):
    from planner.trainers import load_trainer_config

    text, plan = _round_trip(model="llama3-8b", gpus=16, tp=2, pp=2, sharding="zero1", global_batch=64, micro_batch=1,
                             seq_len=4096)
    p = tmp_path / "mds.sh"
    p.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(p, fmt="megatron-deepspeed", model="llama3-8b", hardware="h100-sxm")
    assert cfg.fmt == "megatron-deepspeed" and cfg.job["stack"] == "megatron-deepspeed"
    assert (cfg.job["tp"], cfg.job["pp"], cfg.job["sharding"]) == (2, 2, "zero1")
    lm = tmp_path / "lm.sh"
    lm.write_text(export_plan(to_json(*_resolve_eval(Job(model="llama3-8b", gpus=8)))["plan"], "megatron")[0],
                  encoding="utf-8")
    with pytest.raises(PlannerError, match="none of Megatron-DeepSpeed's flags"):
        load_trainer_config(lm, fmt="megatron-deepspeed", model="llama3-8b", hardware="h100-sxm")


def test_a_deepspeed_json_of_a_tp_plan_points_at_the_script():
    row = _row(model="llama3-8b", gpus=16, tp=2, pp=2, sharding="zero1", global_batch=64, micro_batch=1, seq_len=4096)
    with pytest.raises(PlannerError, match="a DeepSpeed JSON has no TP") as e:
        export_plan(row["plan"], "deepspeed")
    assert "--format megatron-deepspeed" in e.value.hint


# ---------------------------------------------------------------- DeepSpeed-MoE (issue 22, mdsexport2)
MIXTRAL = dict(model="mixtral-8x7b", gpus=64, global_batch=256, micro_batch=1, seq_len=4096)


def test_an_moe_plan_round_trips_in_deepspeed_moes_flags():
    """Mixtral 8x7B at ZeRO-2, EP 8: the fork's DeepSpeed-MoE flags (arguments.py l. 608-614, 913-921, 1159): 8 experts,
    --topk 2, --expert-interval 1 (every layer; the fork's default 2 would be every second one), the stack's capacity
    default 1.0 (DeepSpeed's, padded: no flag for the padding, its dispatch always pads), EP 8, the MoE parameter groups
    ZeRO-2 asserts; no Megatron-Core MoE spelling. Reads back as the same plan and memory."""
    text, plan = _round_trip(**MIXTRAL, tp=1, pp=1, ep=8, sharding="zero2")
    assert (plan["moe_capacity_factor"], plan["moe_pad_to_capacity"], plan["moe_dispatcher"]) == (1.0, True, "alltoall")
    for want in ("    --num-experts 8 \\\n", "    --topk 2 \\\n", "    --expert-interval 1 \\\n",
                 "    --moe-train-capacity-factor 1.0 \\\n", "    --moe-expert-parallel-size 8 \\\n",
                 "    --create-moe-param-group \\\n"):
        assert want in text, want
    f = _flags(text)
    for gone in ("--moe-router-topk", "--expert-model-parallel-size", "--moe-expert-capacity-factor",
                 "--moe-pad-expert-input-to-capacity", "--moe-token-dispatcher-type", "--expert-tensor-parallel-size",
                 "--enable-expert-tensor-parallelism"):
        assert gone not in f, gone


def test_moe_expert_tp_and_pipeline_round_trip():
    """Expert TP = TP 2 is --enable-expert-tensor-parallelism (DeepSpeed's expert-data-and-model groups), expert TP 1 at
    TP 2 no flag (DeepSpeed's default, the experts whole on each TP rank); at tp 1 a pp 4
    plan (GPTModelPipe with the MoE loss spec) reads back too; capacity 1.25 as --moe-train-capacity-factor 1.25."""
    text, plan = _round_trip(**MIXTRAL, tp=2, pp=1, ep=8, sharding="zero1", moe_capacity_factor=1.25)
    assert plan["etp"] == 2 and "--enable-expert-tensor-parallelism" in _flags(text)
    assert "    --moe-train-capacity-factor 1.25 \\\n" in text
    text, plan = _round_trip(**MIXTRAL, tp=2, pp=1, ep=8, etp=1, sharding="zero1")  # DeepSpeed's default: whole experts
    assert plan["etp"] == 1 and "--enable-expert-tensor-parallelism" not in _flags(text)
    text, plan = _round_trip(**MIXTRAL, tp=1, pp=4, ep=4, sharding="zero1")
    assert "    --pipeline-model-parallel-size 4 \\\n" in text and "--no-pipeline-parallel" not in _flags(text)


def test_moe_refusals(cli, tmp_path):
    """What DeepSpeed-MoE cannot say, each refused (exit 2) naming it: ZeRO-3 and expert TP other than 1 or tp
    (start-up rule 77 DEEPSPEED_MOE, engine.py l. 1675, moe/layer.py l. 89-103), sequence parallelism at tp > 1
    (rule 78 DEEPSPEED_MOE_SP), an unpadded capacity, a dropless plan, MoE layers placed other than every
    --expert-interval-th."""
    from planner.startup import CODES

    assert CODES["DEEPSPEED_MOE"] == 77
    r = cli("explain", "--model", "mixtral-8x7b", "--gpus", "64", "--stack", "megatron-deepspeed", "--sharding", "fsdp",
            "--ep", "8", "--seq-len", "4096")
    assert r.exit_code == 2 and "DEEPSPEED_MOE" in r.stderr and "MoE not supported with Stage 3" in r.stderr
    with pytest.raises(PlannerError, match="moe_pad_to_capacity false on stack megatron-deepspeed"):  # at start-up
        _row(**MIXTRAL, tp=1, pp=1, ep=8, sharding="zero2", moe_pad_to_capacity=False)
    row = _row(**MIXTRAL, tp=1, pp=1, ep=8, sharding="zero2")
    with pytest.raises(PlannerError, match="moe_pad_to_capacity false on stack"):  # a plan dict from elsewhere: export too
        export_plan({**row["plan"], "moe_pad_to_capacity": False}, "megatron-deepspeed")
    with pytest.raises(PlannerError, match="dropless"):
        export_plan({**row["plan"], "moe_capacity_factor": None, "moe_pad_to_capacity": None}, "megatron-deepspeed")
    with pytest.raises(PlannerError, match="DEEPSPEED_MOE"):  # expert TP 1 or tp only (moe/layer.py l. 89-103)
        _row(**MIXTRAL, tp=4, pp=1, ep=2, etp=2, sharding="zero1")
    row = _row(**MIXTRAL, tp=4, pp=1, ep=2, sharding="zero1")
    with pytest.raises(PlannerError, match="DEEPSPEED_MOE"):  # a plan dict from elsewhere: export checks the rules too
        export_plan({**row["plan"], "etp": 2}, "megatron-deepspeed")
    with pytest.raises(PlannerError, match="DEEPSPEED_MOE_SP"):  # rule 78: MOELayer's TP drop / gather under SP
        _row(**MIXTRAL, tp=2, pp=1, ep=8, sharding="zero1", sequence_parallel=True)
    row = _row(**MIXTRAL, tp=2, pp=1, ep=8, sharding="zero1")
    with pytest.raises(PlannerError, match="DEEPSPEED_MOE_SP"):  # a plan dict from elsewhere: export checks it too
        export_plan({**row["plan"], "sequence_parallel": True}, "megatron-deepspeed")
    src = open("model_zoo/mixtral-8x7b.yaml", encoding="utf-8").read().replace("  router: softmax ", "  layer_freq: 2\n  router: softmax ")
    y = tmp_path / "mixtral-every-2nd.yaml"
    y.write_text(src, encoding="utf-8")
    row = _row(**{**MIXTRAL, "model": str(y)}, tp=1, pp=1, ep=8, sharding="zero2")
    with pytest.raises(PlannerError, match="i % --expert-interval == 0"):
        export_plan(row["plan"], "megatron-deepspeed")


def _mixtral_pattern(tmp_path, pattern: list[str]) -> str:
    """Mixtral 8x7B with a layer pattern of dense and MoE kinds (the dense MLP at --ffn-hidden-size)."""
    src = open("model_zoo/mixtral-8x7b.yaml", encoding="utf-8").read()
    kinds = "layer_kinds:\n  dense: {mlp: {kind: dense}}\n  moe: {mlp: {kind: moe}}\nlayer_pattern: [" + ", ".join(pattern) + "]\n"
    y = tmp_path / ("mixtral-" + "-".join(pattern) + ".yaml")
    y.write_text(src.replace("moe:\n", kinds + "moe:\n", 1), encoding="utf-8")
    return str(y)


def test_an_every_second_layer_moe_round_trips_as_expert_interval_2(tmp_path):
    """The fork's default placement, --expert-interval 2 (1-based layers 2, 4, ...: transformer.py l. 1650-1660), is a
    layer pattern [dense, moe]: written as --expert-interval 2, read back (the reader's --moe-layer-freq list) as the
    same plan and memory. [moe, dense] (the first layer MoE) is no interval of the fork's: refused, named."""
    from planner.trainers.export import mds_moe_interval
    from planner.catalog import load_model

    y = _mixtral_pattern(tmp_path, ["dense", "moe"])
    assert mds_moe_interval(load_model(y)) == 2 and mds_moe_interval(load_model("mixtral-8x7b")) == 1
    assert mds_moe_interval(load_model(_mixtral_pattern(tmp_path, ["dense", "dense", "moe", "dense"]))) is None
    text, plan = _round_trip(**{**MIXTRAL, "model": y}, tp=1, pp=2, ep=8, sharding="zero1")
    assert "    --expert-interval 2 \\\n" in text and "--window-size" not in text
    row = _row(**{**MIXTRAL, "model": _mixtral_pattern(tmp_path, ["moe", "dense"])}, tp=1, pp=1, ep=8, sharding="zero2")
    with pytest.raises(PlannerError, match="i % --expert-interval == 0"):
        export_plan(row["plan"], "megatron-deepspeed")


def test_fit_exports_an_moe_plan_that_check_passes(cli, tmp_path):
    """The issue's loop on Mixtral: fit ranks ZeRO-1/2 (ZeRO-3 is refused by rule 77) with SP off at tp > 1 (rule 78),
    exports it (fit --export reads it back as the same plan and memory) and `planner check` passes the script. At
    pp 1 and 32,768 tokens fit's fastest plan is tp 2, EP 4, ZeRO-2, full recompute; at EP 1 it does not fit (every
    expert on every GPU: 102.3 GiB), and check's fix is spelled in the fork's flag."""
    r = cli("fit", "--model", "mixtral-8x7b", "--gpus", "64", "--stack", "megatron-deepspeed", "--pp", "1", "--top", "1",
            "--export", "megatron-deepspeed")
    assert r.exit_code == 0, r.stderr
    assert "    --num-experts 8 \\\n" in r.stdout and "--zero-stage 3" not in r.stdout
    assert "    --tensor-model-parallel-size 2 \\\n" in r.stdout and "--sequence-parallel" not in r.stdout
    p = tmp_path / "mixtral.sh"
    p.write_text(r.stdout, encoding="utf-8")
    r = cli("check", str(p), "--hardware", "h100-sxm")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "DeepSpeed-MoE" in r.stderr
    p.write_text(p.read_text().replace("--moe-expert-parallel-size 4", "--moe-expert-parallel-size 1"), encoding="utf-8")
    r = cli("check", str(p), "--hardware", "h100-sxm")
    assert r.exit_code == 1 and "EP 1 -> 4 [megatron-deepspeed: --moe-expert-parallel-size 4]" in r.stdout


def test_moe_pipeline_over_tp_writes_the_unpartitioned_pipe(cli, tmp_path):
    """Issue 22 (mdsmoefit): an MoE plan at pp > 1 and tp > 1 runs on Megatron-DeepSpeed only with DeepSpeed's
    partitioned pipe tensors off: GPTModelPipe passes the hidden states and the aggregated MoE loss, both needing
    gradients, and asserts pipe_partitioned / grad_partitioned are not enabled (@f4157bea gpt_model.py l. 376-384),
    which DeepSpeed's config turns on by default (config.py @38327e07 l. 467-468). The export writes both false; the
    p2p priced (T h x 2 B a micro-batch each way, no TP all-gather) is what they run. fit --export reads the script
    back as the same plan and memory, and check passes it reading the section as priced. At tp 1 or pp 1 no section."""
    r = cli("fit", "--model", "mixtral-8x7b", "--gpus", "64", "--stack", "megatron-deepspeed", "--tp", "2", "--pp", "2",
            "--seq-len", "4096", "--global-batch", "256", "--top", "1", "--export", "megatron-deepspeed")
    assert r.exit_code == 0, r.stderr
    assert _json(r.stdout)["pipeline"] == {"pipe_partitioned": False, "grad_partitioned": False}
    assert "    --pipeline-model-parallel-size 2 \\\n" in r.stdout and "--sequence-parallel" not in r.stdout
    p = tmp_path / "mixtral-pp.sh"
    p.write_text(r.stdout, encoding="utf-8")
    r = cli("check", str(p), "--hardware", "h100-sxm")
    assert r.exit_code == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    assert 'pipeline={"pipe_partitioned":false,"grad_partitioned":false}: read, priced' in r.stderr
    assert "not modelled" not in r.stderr or "pipeline=" not in r.stderr.split("not modelled", 1)[1]
    # the same with the JSON's section removed: the fork's own check passes (it reads a missing key as false) but
    # DeepSpeed partitions and asserts; the reader refuses it, naming the keys
    p.write_text(re.sub(r',\n  "pipeline": \{[^}]*\}', "", p.read_text()), encoding="utf-8")
    r = cli("check", str(p), "--hardware", "h100-sxm")
    assert r.exit_code == 2 and "pipeline.pipe_partitioned and grad_partitioned true" in r.stderr
    # the p2p priced: one send of T h bf16 a micro-batch each way (4,096 x 4,096 x 2 B = 32 MiB), not a 1 / tp slice
    from planner import comm
    from planner.step import Collectives, _context

    settings, plan, _ = resolve(Job(stack="megatron-deepspeed", **MIXTRAL, tp=2, pp=2, ep=8, sharding="zero1"))
    coll = Collectives(_context(settings, plan))
    send = float(coll(comm.SEND_RECV, 4096 * 4096 * 2.0, plan.pp, coll.strides["pp"]))
    m = 256 // (1 * 16)
    assert _row(**MIXTRAL, tp=2, pp=2, ep=8, sharding="zero1")["time"]["pp_comm_s"] == pytest.approx(2 * m * send,
                                                                                                       rel=1e-9)
    for tp, pp in ((1, 2), (2, 1)):
        text, _ = export_plan(_row(**MIXTRAL, tp=tp, pp=pp, ep=8, sharding="zero1")["plan"], "megatron-deepspeed")
        assert "pipeline" not in _json(text)


# ---------------------------------------------------------------- uneven pipeline splits (issue 22, mdsexport2)
def _partition_uniform(num_items, num_parts):
    """microsoft/DeepSpeed @38327e07 deepspeed/runtime/utils.py partition_uniform l. 562-580, copied."""
    parts = [0] * (num_parts + 1)
    if num_items <= num_parts:
        for p in range(num_parts + 1):
            parts[p] = min(p, num_items)
        return parts
    chunksize = num_items // num_parts
    residual = num_items - (chunksize * num_parts)
    parts = list(range(0, (num_parts + 1) * chunksize, chunksize))
    for i in range(residual):
        parts[i + 1:] = [x + 1 for x in parts[i + 1:]]
    return parts


def _partition_balanced(weights, num_parts):
    """microsoft/DeepSpeed @38327e07 deepspeed/runtime/utils.py partition_balanced l. 583-621, copied (numpy's inf
    arrays as lists): the linear partition by dynamic programming, ties (dp_cost >= cost) to the largest cut."""
    inf = float("inf")
    n, m = len(weights), num_parts
    if n <= m:
        return _partition_uniform(n, m)
    dp_max = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_min = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_cost = [[inf] * (m + 1) for _ in range(n + 1)]
    position = [[0] * (m + 1) for _ in range(n + 1)]
    prefix = [0] * (n + 1)
    for i, w in enumerate(weights):
        prefix[i + 1] = prefix[i] + w
    dp_max[0][0] = 0
    dp_cost[0][0] = 0
    for i in range(1, n + 1):
        for j in range(1, min(i, m) + 1):
            for k in range(i):
                max_sum = max(dp_max[k][j - 1], prefix[i] - prefix[k])
                min_sum = min(dp_min[k][j - 1], prefix[i] - prefix[k])
                cost = max_sum - min_sum
                if dp_cost[i][j] >= cost:
                    dp_cost[i][j], dp_max[i][j], dp_min[i][j], position[i][j] = cost, max_sum, min_sum, k
    parts = [n]
    for i in reversed(range(1, m + 1)):
        parts.append(position[parts[-1]][i])
    parts.reverse()
    return parts


def _gpt_model_pipe_split(L: int, pp: int, moe: bool = False) -> list[int]:
    """The transformer layers of each stage as Megatron-DeepSpeed @f4157bea's GPTModelPipe has DeepSpeed place them:
    its specs (gpt_model.py l. 349-439: _to_float16, the embedding, L ParallelTransformerLayerPipe, _calculate_moe_loss
    for an MoE model, the final norm, the output layer, float16_to_fp32) weighed 1 where the class name matches
    'transformer' (partition_method='type:transformer', l. 463; pipe/module.py _partition_layers l. 409-414)."""
    w = [0, 0] + [1] * L + [0] * (4 if moe else 3)
    parts = _partition_balanced(w, pp)
    return [sum(w[parts[s]:parts[s + 1]]) for s in range(pp)]


def test_deepspeeds_split_is_the_front_rule():
    """By hand, 32 layers on 3 stages: partition_balanced's least max - min is 1 (11, 11, 10 or a permutation), and its
    ties go to the largest cut of each prefix, so the short stage is the last: 11, 11, 10. The planner's front rule
    (stack_db megatron-deepspeed pipeline_split front; pipeline.chunk_layers / stage_layers split_front) is the same
    placement for every L from pp to 5 pp + 2 and pp 2-8, MoE's extra spec included."""
    from planner.pipeline import chunk_layers, stage_layers

    assert _gpt_model_pipe_split(32, 3) == [11, 11, 10] == chunk_layers(32, 3, 1, front=1)
    assert _gpt_model_pipe_split(30, 4) == [8, 8, 7, 7]
    for pp in range(2, 9):
        for L in range(pp, 5 * pp + 3):
            want = _gpt_model_pipe_split(L, pp)
            assert want == chunk_layers(L, pp, 1, front=1) == _gpt_model_pipe_split(L, pp, moe=True), (L, pp)
            first, mid, last = stage_layers(L, pp, 1, 0, 0, 1)
            assert (int(first), int(mid), int(last)) == (want[0], want[1], want[-1])
    _, plan, _ = resolve(Job(stack="megatron-deepspeed", model="llama3-8b", gpus=24, pp=3, sharding="zero1"))
    assert int(plan.split_front) == 1


def test_an_uneven_split_round_trips_with_no_split_flag():
    """Llama 3 8B's 32 layers on pp 3 (11, 11, 10): the script says only --pipeline-model-parallel-size 3, since
    the fork's GPTModelPipe places that split itself, and reads back as the same plan and memory; the note says so."""
    row = _row(model="llama3-8b", gpus=24, tp=1, pp=3, sharding="zero1", global_batch=64, micro_batch=1, seq_len=4096)
    text, notes = export_plan(row["plan"], "megatron-deepspeed")
    check_readback(row, "megatron-deepspeed", text)
    f = _flags(text)
    assert "    --pipeline-model-parallel-size 3 \\\n" in text and "    --num-layers 32 \\\n" in text
    assert not [x for x in f if "pipeline-split" in x or "pipeline-num-layers" in x or "layout" in x]
    assert any("first 2 stage(s) 11 and the other 1 10" in n for n in notes)
    # the first stage holds 11 layers and the embedding, the last 10 and the output layer: the first is heaviest
    st = row["memory"]["stages"]
    assert st["first"]["total_bytes"] > st["last"]["total_bytes"]


def test_fit_exports_an_uneven_split_end_to_end(cli):
    """fit on 24 GPUs ranks pp 3 first for Llama 3 8B; its export runs (fit --export reads the script back)."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "24", "--stack", "megatron-deepspeed", "--top", "1", "--export",
            "megatron-deepspeed")
    assert r.exit_code == 0, r.stderr
    assert "    --pipeline-model-parallel-size 3 \\\n" in r.stdout and "pipeline-split" not in r.stdout


def test_split_ends_refused(cli):
    """Both ends counted: BigScience's --pp-partition-method, which microsoft's fork lacks: the export refuses (exit 2).
    One end alone: no fork's partition_method, start-up rule DEEPSPEED_PP_SPLIT_ENDS (code 76) refuses the plan; and
    both with pp 17 on 32 + 2 units leave the last stage the output layer alone (34 // 17 = 2 units: 1 layer, passes;
    pp 18 is 34 // 18 = 1: none, refused)."""
    base = ["--model", "llama3-8b", "--stack", "megatron-deepspeed", "--sharding", "zero1"]
    r = cli("export", *base, "--gpus", "24", "--pp", "3", "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split", "--format", "megatron-deepspeed")
    assert r.exit_code == 2 and "partition_method='type:transformer'" in r.stderr and "Traceback" not in r.stderr
    r = cli("explain", *base, "--gpus", "24", "--pp", "3", "--account-for-embedding-in-pipeline-split")
    assert r.exit_code == 2 and "DEEPSPEED_PP_SPLIT_ENDS" in r.stderr
    from planner.startup import CODES, _deepspeed_split_ends
    from planner.catalog import load_model

    assert CODES["DEEPSPEED_PP_SPLIT_ENDS"] == 76
    m = load_model("llama3-8b")
    from types import SimpleNamespace as NS
    import numpy as np

    # the plan fields the rule reads (a PlanArrays in the planner): megatron-deepspeed's front split (code 1), vpp 1
    p = NS(pp=np.array([17, 18, 3, 3, 3, 1]), split_emb=np.array([1, 1, 1, 0, 0, 1]), split_loss=np.array([1, 1, 0, 1, 0, 0]),
           split_front=np.ones(6, dtype=np.int64), vpp=np.ones(6, dtype=np.int64))
    assert _deepspeed_split_ends(m, p).tolist() == [False, True, True, True, False, False]


def test_moe_min_capacity_read_priced_exported_and_read_back(tmp_path):
    """moe_min_capacity (Megatron-DeepSpeed --moe-min-capacity, arguments.py l. 917, default 4; DeepSpeed _capacity
    l. 161-170): Mixtral, sequence 4,096, micro-batch 1, top-2, 8 experts, cf 1.0: C = max(ceil(4,096 x 2 x 1.0 / 8),
    floor) = 1,024 at the stack's floor 4, 2,048 at a floor of 2,048, so the dispatch mask (2 B x S x E C) doubles,
    8 x 4,096 x 2,048 x 2 B = 134,217,728 B. The floor 4 is the fork's default (no flag written); 2,048 is written as
    --moe-min-capacity 2048 and reads back as the same plan (moe_min_capacity in plan_signature) and memory."""
    text, plan = _round_trip(**MIXTRAL, tp=1, pp=1, ep=8, sharding="zero2")
    assert plan["moe_min_capacity"] == 4 and "--moe-min-capacity" not in text
    row = _row(**MIXTRAL, tp=1, pp=1, ep=8, sharding="zero2", moe_min_capacity=2048)
    g = row["moe"]["dense_gating"]
    assert (g["tokens"], g["capacity"]) == (4096, 2048)
    assert g["saved_bytes"]["moe_dispatch_mask"] == 2 * 4096 * 8 * 2048 == 134_217_728
    text, plan = _round_trip(**MIXTRAL, tp=1, pp=1, ep=8, sharding="zero2", moe_min_capacity=2048)
    assert plan["moe_min_capacity"] == 2048 and "    --moe-min-capacity 2048 \\\n" in text
    p = tmp_path / "run.sh"
    p.write_text(text)
    from planner.trainers import load_trainer_config

    cfg = load_trainer_config(p, gpus=64)
    assert cfg.job["moe_min_capacity"] == 2048
    assert not any("--moe-min-capacity" in x for x in cfg.ignored)
    # the megatron stack has no capacity floor: refused, named
    with pytest.raises(PlannerError, match="moe_min_capacity 8 set but stack megatron has no capacity floor"):
        resolve(Job(stack="megatron", **MIXTRAL, tp=1, pp=1, ep=8, moe_min_capacity=8))


def test_dense_pipeline_over_tp_prices_the_partitioned_sends():
    """Issue 22 (ppart): a dense plan at pp > 1 x tp > 1 without SP runs DeepSpeed's partitioned pipe tensors (the
    stack's pipeline_send_partitioned_default; config.py @38327e07 l. 467-468, engine.py l. 719-761, 826-851:
    step.py [25]). Llama 3 8B, tp 2, pp 2, dp 2 on h100-sxm, seq 4,096, micro-batch 1, global batch 64: m = 32.
    T h = 4,096 x 4,096 x 2 B = 33,554,432 B. Whole send (pipe_partitioned false): 33,554,432 / 370 GB/s (NVLink,
    hardware_db h100-sxm achievable) + 3.4 us = 94.088 us, each way: 32 x 2 x 94.088 us = 6.0216 ms.
    Partitioned: the 1 / 2 part, 16,777,216 B: 45.344 + 3.4 = 48.744 us, plus the critical stage's own all-gathers
    of 33,554,432 B over the 2 TP ranks, each receiving 16,777,216 B: 48.744 us. The critical stage is the last (its
    16 layers and the 128,256-word output layer and loss, against the first's 16 layers and one all-gather more),
    and the last stage runs one a micro-batch, its received input's (engine.py l. 719-733; the first stage's two,
    the backward's output rebuild and received gradient, are the first stage's time: issue 22 critstage2, where the
    busiest stage's two rode on every stage's sends before, 6.2392 ms): 32 x (2 x 48.744 + 48.744) us = 4.6794 ms."""
    kw = dict(model="llama3-8b", hardware="h100-sxm", gpus=8, tp=2, pp=2, seq_len=4096, micro_batch=1,
              global_batch=64, sequence_parallel=False)
    on, off = _row(**kw), _row(pipe_partitioned=False, **kw)
    send_half, send_whole = 16_777_216 / 370e9 + 3.4e-6, 33_554_432 / 370e9 + 3.4e-6
    gather = (2 - 1) / 2 * 33_554_432 / 370e9 + 3.4e-6
    assert off["time"]["pp_comm_s"] == pytest.approx(32 * 2 * send_whole, rel=1e-9)
    assert on["time"]["pp_comm_s"] == pytest.approx(32 * (2 * send_half + gather), rel=1e-9)
    assert on["time"]["pp_comm_s"] == pytest.approx(4.6794e-3, rel=1e-4)
    assert on["time"]["critical_stage"]["stage"] == "last"
    assert off["plan"]["pipe_partitioned"] is False and "pipe_partitioned" not in on["plan"]
    # SP: refused on this stack (STACK_SP_NORM_GRADS, mdscheck), so no whole-send SP plan to price here
    with pytest.raises(PlannerError, match="STACK_SP_NORM_GRADS"):
        _row(**{**kw, "sequence_parallel": True})


def test_dense_pipeline_over_tp_round_trip():
    """Issue 22 (ppart): the export writes the pipeline section only where the job turned the partitioned sends off;
    the reader reads it back as pipe_partitioned false (check_readback: same plan and memory), and without the
    section as the stack's default (partitioned)."""
    kw = dict(model="llama3-8b", hardware="h100-sxm", gpus=8, tp=2, pp=2, seq_len=4096, micro_batch=1,
              global_batch=64, sequence_parallel=False)
    text, plan = _round_trip(**kw)
    assert "pipeline" not in _json(text) and "pipe_partitioned" not in plan
    text, plan = _round_trip(pipe_partitioned=False, **kw)
    assert _json(text)["pipeline"] == {"pipe_partitioned": False, "grad_partitioned": False}
    assert plan["pipe_partitioned"] is False


def test_pipe_partitioned_refused_off_deepspeed():
    with pytest.raises(PlannerError, match="pipe_partitioned is set but stack megatron"):
        resolve(Job(stack="megatron", model="llama3-8b", hardware="h100-sxm", gpus=8, tp=2, pp=2, pipe_partitioned=True))
    # SP itself is refused first on this stack (STACK_SP_NORM_GRADS, mdscheck), pipe_partitioned or not
    with pytest.raises(PlannerError, match="STACK_SP_NORM_GRADS"):
        resolve(Job(stack="megatron-deepspeed", model="llama3-8b", hardware="h100-sxm", gpus=8, tp=2, pp=2,
                    sequence_parallel=True, pipe_partitioned=True))
    with pytest.raises(PlannerError, match="pipe_partitioned at pp 2 and tp 2 with an MoE model"):
        resolve(Job(stack="megatron-deepspeed", model="mixtral-8x7b", hardware="h100-sxm", gpus=16, tp=2, pp=2,
                    pipe_partitioned=True))
    # true where the plan runs it is the default, accepted
    resolve(Job(stack="megatron-deepspeed", model="llama3-8b", hardware="h100-sxm", gpus=8, tp=2, pp=2,
                sequence_parallel=False, pipe_partitioned=True))


@pytest.mark.parametrize("fmt", ["megatron-deepspeed", "deepspeed"])
def test_zero3_knobs_on_a_zero1_plan_are_no_setting_of_the_file_read_back(fmt):
    """Fuzz job-fields seed 81 chunk 2 input 21 (megatron-gpt-1.7b, 8 GPUs, zero1, deepspeed_zero3
    {stage3_param_persistence_threshold: 0, sub_group_size: 1e9}): DeepSpeed reads the stage-3 knobs in its stage-3
    engine only and the readers ignore them below stage 3, so the zero1 plan's file reads back without them. They
    priced nothing there (memory.py [z3] gathers at fsdp / hsdp only), so the read-back is the same plan: before
    export.plan_signature dropped them outside fsdp / hsdp, check_readback refused it ("deepspeed_zero3:
    {'stage3_param_persistence_threshold': 0} priced, None read back")."""
    row = _row(model="megatron-gpt-1.7b", gpus=8, sharding="zero1", global_batch=16, seq_len=2048,
               deepspeed_zero3={"stage3_param_persistence_threshold": 0, "sub_group_size": 1_000_000_000})
    assert row["plan"]["deepspeed_zero3"] == {"stage3_param_persistence_threshold": 0}  # the job's change, kept
    text, _ = export_plan(row["plan"], fmt)
    check_readback(row, fmt, text)  # raised PlannerError before the fix
    # and the job is told, not silently dropped: a warning names the knobs and the zero1 they price nothing at
    job = dict(model="megatron-gpt-1.7b", gpus=8, sharding="zero1", global_batch=16, seq_len=2048, stack="megatron-deepspeed",
               deepspeed_zero3={"stage3_param_persistence_threshold": 0})
    assert [w for w in resolve(Job(**job))[2] if w.startswith("deepspeed_zero3 {'stage3_param_persistence_threshold': 0} "
                                                               "at sharding zero1: ") and "price nothing here" in w]
    assert not [w for w in resolve(Job(**{**job, "sharding": "fsdp"}))[2] if w.startswith("deepspeed_zero3")]
