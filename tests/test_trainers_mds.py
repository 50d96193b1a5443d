"""A Megatron-DeepSpeed launch script read as the job it launches (planner/trainers/megatron_deepspeed.py;
fixture tests/data/trainer_configs/run_deepspeed_example.sh, microsoft/Megatron-DeepSpeed
examples_deepspeed/run_deepspeed_example.sh @f4157bea as published: TP 1, PP 1, 24 layers of hidden 512,
16 heads, seq 256, --micro-batch-size 4, --global-batch-size 1024, --fp16, --checkpoint-activations,
--no-pipeline-parallel, and a heredoc ds_config.json with train_batch_size 64, micro 4, ZeRO stage 2, fp16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.check import evaluate_job, step_seconds
from planner.errors import PlannerError
from planner.schema import Job
from planner.trainers import load_trainer_config

DATA = Path(__file__).parent / "data" / "trainer_configs"
MDS = DATA / "run_deepspeed_example.sh"


def _variant(tmp_path, old: str, new: str, name: str = "run.sh") -> Path:
    text = MDS.read_text()
    assert old in text, old
    p = tmp_path / name
    p.write_text(text.replace(old, new))
    return p


def test_reads_as_the_megatron_deepspeed_job():
    cfg = load_trainer_config(MDS, gpus=8)
    j = cfg.job
    assert cfg.fmt == "megatron-deepspeed"
    assert j["stack"] == "megatron-deepspeed"
    # the heredoc's "stage": $ZERO_STAGE with ZERO_STAGE=2 -> ZeRO-2 (the stack's zero2 mode)
    assert (j["sharding"], j["sharding_mode"]) == ("zero2", "zero2")
    # --micro-batch-size 4 = the JSON's 4; Megatron's --global-batch-size 1024 wins over train_batch_size 64
    # (training.py l. 1253-1258), a multiple of 4 x dp 8 = 32
    assert (j["micro_batch"], j["global_batch"], j["gpus"], j["tp"], j["pp"]) == (4, 1024, 8, 1, 1)
    assert any(a.startswith("global_batch=1024: Megatron's, not the JSON's train_batch_size 64") for a in cfg.assumed)
    assert j["recompute"] == "full"  # --checkpoint-activations, chunks of --checkpoint-num-layers 1
    assert j["attention"] == "eager"  # no --use-flash-attn*: Megatron-DeepSpeed's CoreAttention
    assert j["fp16"] is True and j["precision"] == "bf16"  # the JSON's fp16.enabled, priced as bf16 width
    assert j["dp_comm_overlap"] is False  # the JSON has no overlap_comm (DeepSpeed's default at stage 2: false)
    assert "bytes_per_param" not in j  # Megatron-LM's DDP buffer rule is not read under DeepSpeed
    # no DeepSpeed flag is listed as not modelled or unknown
    listed = " ".join(cfg.not_modelled + cfg.unmodelled)
    for flag in ("--deepspeed", "--zero-stage", "--deepspeed_config", "--checkpoint-activations",
                 "--deepspeed-activation-checkpointing", "--no-pipeline-parallel"):
        assert flag not in listed, flag
    assert cfg.stated["zero_optimization.stage"] == 2 and cfg.stated["--zero-stage"] == 2


def test_memory_and_time_equal_the_equivalent_job():
    """check's verdict and every memory term equal explain's on the job written out by hand: the model the flags
    define, stack megatron-deepspeed, zero2, micro 4 x global 1024 x seq 256 on 8 GPUs, recompute full, eager
    attention, fp16."""
    cfg = load_trainer_config(MDS, gpus=8, hardware="h100-sxm")
    hand = Job.model_validate(dict(model=cfg.job["model"], gpus=8, hardware="h100-sxm", stack="megatron-deepspeed",
                                   tp=1, pp=1, cp=1, sharding="zero2", micro_batch=4, global_batch=1024, seq_len=256,
                                   recompute="full", attention="eager", fp16=True, precision="bf16",
                                   sequence_parallel=False, dp_comm_overlap=False, tp_comm_overlap=False))
    read = Job.model_validate(cfg.job)
    a, b = evaluate_job(read), evaluate_job(hand)
    assert a["plan"]["sharding_mode"] == b["plan"]["sharding_mode"] == "zero2"
    ma, mb = a["memory"], b["memory"]
    assert set(ma) == set(mb)
    for k in ma:
        assert ma[k] == mb[k], k
    assert a["time"] == b["time"]
    assert step_seconds(a) == step_seconds(b) > 0


def test_contradictions_refused(tmp_path):
    # the micro-batch: Megatron's data loader vs DeepSpeed's engine
    p = _variant(tmp_path, "--micro-batch-size 4", "--micro-batch-size 2")
    with pytest.raises(PlannerError, match=r"--micro-batch-size 2 but .*train_micro_batch_size_per_gpu 4"):
        load_trainer_config(p, gpus=8)
    # --zero-stage 3 against the JSON's stage 2: zero.Init builds partitioned parameters the engine never gathers
    p = _variant(tmp_path, 'ds_args=" --zero-stage=$ZERO_STAGE ${ds_args}"', 'ds_args=" --zero-stage=3 ${ds_args}"')
    with pytest.raises(PlannerError, match=r"--zero-stage 3 but .*zero_optimization.stage 2"):
        load_trainer_config(p, gpus=8)
    # --no-pipeline-parallel with PP 2 (arguments.py l. 94-96)
    p = _variant(tmp_path, "PP=1", "PP=2")
    with pytest.raises(PlannerError, match=r"--no-pipeline-parallel with --pipeline-model-parallel-size 2"):
        load_trainer_config(p, gpus=8)
    # the global batch not a multiple of micro x dp (set_train_batch_size raises)
    p = _variant(tmp_path, "--global-batch-size 1024", "--global-batch-size 1000")
    with pytest.raises(PlannerError, match=r"global batch 1000 is not a multiple of micro-batch 4 x 8"):
        load_trainer_config(p, gpus=8)


def test_zero_stage_one_vs_two_the_json_wins(tmp_path):
    p = _variant(tmp_path, 'ds_args=" --zero-stage=$ZERO_STAGE ${ds_args}"', 'ds_args=" --zero-stage=1 ${ds_args}"')
    cfg = load_trainer_config(p, gpus=8)
    assert cfg.job["sharding"] == "zero2"
    assert any("the JSON's zero_optimization.stage 2 runs" in a for a in cfg.assumed)


def test_config_file_beside_the_script_and_missing(tmp_path):
    text = MDS.read_text()
    start, end = text.index("cat <<EOT"), text.index("EOT\n", text.index("cat <<EOT") + 10) + 4
    p = tmp_path / "run.sh"
    p.write_text(text[:start] + text[end:])
    with pytest.raises(PlannerError, match=r"--deepspeed_config ds_config.json: no such file"):
        load_trainer_config(p, gpus=8)
    (tmp_path / "ds_config.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 4,
                                                         "gradient_accumulation_steps": 32,
                                                         "zero_optimization": {"stage": 1}, "fp16": {"enabled": True}}))
    cfg = load_trainer_config(p, gpus=8)
    assert (cfg.job["sharding"], cfg.job["micro_batch"], cfg.job["global_batch"]) == ("zero1", 4, 1024)


def test_heredoc_with_an_unset_variable_refused(tmp_path):
    p = _variant(tmp_path, '"stage": $ZERO_STAGE', '"stage": $UNSET_STAGE')
    with pytest.raises(PlannerError, match=r"uses \$UNSET_STAGE, which the script does not set"):
        load_trainer_config(p, gpus=8)


def test_stack_flag_beats_the_file(cli):
    r = cli("check", str(MDS), "--gpus", "8", "--hardware", "h100-sxm")
    assert r.exit_code == 0 and "PASS" in r.stdout
    assert "read as megatron-deepspeed" in r.stderr


LLAMA2 = DATA / "pretrain_llama2_distributed.sh"


def test_llama2_example_with_its_shape_spellings(tmp_path):
    """Megatron-DeepSpeed's examples_deepspeed/pretrain_llama2_distributed.sh @f4157bea: as published its
    GPTSentencePieceTokenizer names no vocabulary size (refused, exit 2); with --vocab-size 32000 it is
    TP 2 x PP 2 x DP 2 on torchrun's 8 x 1 GPUs, the heredoc's ZeRO stage 0 ($ZERO_STAGE=0), micro 4 and
    train_batch_size 32 (= 4 x accumulation 4 x dp 2), bf16, no recompute (its activation_checkpoint="false"
    if-block evaluated), and Megatron-DeepSpeed's --num-key-value-heads 4 and --normalization rmsnorm read as
    GQA with 4 groups and RMSNorm; DS_CONFIG=${BASE_PATH}/deepspeed.json is an assignment, not a launch."""
    with pytest.raises(PlannerError, match=r"GPTSentencePieceTokenizer: its vocabulary size is in its files"):
        load_trainer_config(LLAMA2)
    p = tmp_path / "llama2.sh"
    text = LLAMA2.read_text()
    p.write_text(text.replace("--tokenizer-type GPTSentencePieceTokenizer",
                              "--tokenizer-type GPTSentencePieceTokenizer --vocab-size 32000"))
    cfg = load_trainer_config(p)
    j = cfg.job
    assert (j["tp"], j["pp"], j["gpus"], j["sharding"], j["micro_batch"], j["global_batch"]) == (2, 2, 8, "zero1", 4, 32)
    assert j["sharding_mode"] == "bf16_optimizer"
    assert (j["recompute"], j["attention"], j["precision"], j["stack"]) == ("none", "eager", "bf16", "megatron-deepspeed")
    from planner.catalog import load_model

    spec = load_model(j["model"])
    assert (spec.num_layers, spec.hidden_size, spec.ffn_hidden_size, spec.num_attention_heads, spec.kv_heads,
            spec.norm, spec.gated_mlp) == (24, 2048, 5504, 16, 4, "rmsnorm", True)
    # ZERO_STAGE=0 with bf16 enabled: DeepSpeed builds the BF16_Optimizer (engine.py @38327e07 get_data_types
    # l. 1017-1019: fp32 accumulation without ZeRO; _do_optimizer_sanity_check l. 1347-1348): read as sharding zero1,
    # the stack's mode bf16_optimizer (issue 21; it was the one not-modelled entry), nothing left not modelled
    assert any("sharding=zero1 as bf16_optimizer: DeepSpeed's BF16_Optimizer (bf16 at ZeRO stage 0" in a for a in cfg.assumed)
    assert not cfg.not_modelled
    assert not cfg.unmodelled


def test_deepspeed_launcher_gpus_precision_and_partitioned_activations(tmp_path):
    # deepspeed --num_gpus 4 (deepspeed/launcher/runner.py): 4 GPUs without --gpus; train_batch_size 64 = 4 x 4 x dp 4
    p = _variant(tmp_path, "deepspeed pretrain_gpt.py", "deepspeed --num_gpus 4 pretrain_gpt.py")
    assert load_trainer_config(p).job["gpus"] == 4
    # --bf16 against the JSON's fp16.enabled true
    p = _variant(tmp_path, "    --fp16 \\", "    --bf16 \\")
    with pytest.raises(PlannerError, match=r"--bf16 but .*fp16.enabled on \(as DeepSpeed reads it\)"):
        load_trainer_config(p, gpus=8)
    # --partition-activations at TP 1 has no effect (listed as ignored); at TP 2 it is priced
    # (test_partition_activations_priced)
    p = _variant(tmp_path, 'ds_args=" --deepspeed-activation-checkpointing ${ds_args}"',
                 'ds_args=" --deepspeed-activation-checkpointing --partition-activations ${ds_args}"')
    cfg = load_trainer_config(p, gpus=8)
    assert any(x.startswith("--partition-activations (tensor-parallel size 1") for x in cfg.ignored)
    assert "partition_activations" not in cfg.job


def _partitioned(tmp_path) -> Path:
    p = _variant(tmp_path, 'ds_args=" --deepspeed-activation-checkpointing ${ds_args}"',
                 'ds_args=" --deepspeed-activation-checkpointing --partition-activations ${ds_args}"')
    p2 = tmp_path / "tp2.sh"
    p2.write_text(p.read_text().replace("TP=1", "TP=2"))
    return p2


def test_partition_activations_priced(tmp_path):
    """issue 21: --partition-activations with --deepspeed-activation-checkpointing, --checkpoint-activations (full
    recompute) at TP 2: DeepSpeed keeps each checkpointed layer input's 1/tp slice per TP rank and all-gathers it
    before the re-run (memory.py [pa]). By hand: a layer's input is 2 h bytes a token (bf16), 2 h / t partitioned:
    h = 512, t = 2: 1,024 -> 512 bytes a token a layer. micro-batch 4 x seq 256 = 1,024 tokens, 24 layers, one
    micro-batch held (PP 1): layer_activations 24 x 1,024 x 1,024 = 25,165,824 -> 12,582,912 B. The layer under
    re-run holds its gathered input: the recompute buffer grows by the slice no longer kept, 1,024 x (1,024 - 512)
    = 524,288 B. The re-run's all-gathers add TP communication time."""
    cfg = load_trainer_config(_partitioned(tmp_path), gpus=8, hardware="h100-sxm")
    assert cfg.job["partition_activations"] is True and cfg.job["tp"] == 2 and cfg.job["recompute"] == "full"
    assert any(a.startswith("partition_activations=true: --partition-activations") for a in cfg.assumed)
    plain = {k: v for k, v in cfg.job.items() if k != "partition_activations"}
    a, b = evaluate_job(Job.model_validate(cfg.job)), evaluate_job(Job.model_validate(plain))
    assert a["plan"]["partition_activations"] is True and "partition_activations" not in b["plan"]
    ta, tb = a["memory"]["terms"], b["memory"]["terms"]
    tokens, h, t, layers = 4 * 256, 512, 2, 24
    assert tb["layer_activations"] == layers * tokens * 2 * h == 25_165_824
    assert ta["layer_activations"] == layers * tokens * 2 * h / t == 12_582_912
    assert ta["recompute_buffer"] - tb["recompute_buffer"] == tokens * (2 * h - 2 * h / t) == 524_288
    for k in ta:  # nothing else moves
        if k not in ("layer_activations", "recompute_buffer"):
            assert ta[k] == tb[k], k
    assert a["time"]["tp_comm_s"] > b["time"]["tp_comm_s"]
    assert a["time"]["compute_s"] == b["time"]["compute_s"]
    assert step_seconds(a) > step_seconds(b)


def test_partition_activations_refused_where_not_priced(tmp_path):
    # under selective recompute: DeepSpeed's checkpoint of the attention core would split its inputs, not priced
    p = _partitioned(tmp_path)
    p2 = tmp_path / "sel.sh"
    p2.write_text(p.read_text().replace("--checkpoint-activations", "--recompute-granularity selective"))
    with pytest.raises(PlannerError, match=r"--partition-activations: the kept layer inputs split over the TP ranks "
                                           r"under selective recompute"):
        load_trainer_config(p2, gpus=8)
    # a job without full recompute: nothing kept to split (none), or inputs the planner does not split (selective)
    for rc, why in (("none", r"with recompute none there are none \(no effect\)"), ("selective", "under recompute selective")):
        with pytest.raises(PlannerError, match=rf"partition_activations splits the layer inputs full recompute keeps: {why}"):
            evaluate_job(Job.model_validate(dict(model="llama3-8b", gpus=8, tp=2, stack="megatron-deepspeed",
                                                 recompute=rc, partition_activations=True)))
    # a job on a stack without DeepSpeed's checkpointing
    with pytest.raises(PlannerError, match=r"partition_activations is set but stack megatron does not split"):
        evaluate_job(Job.model_validate(dict(model="llama3-8b", gpus=8, tp=2, recompute="full",
                                             partition_activations=True)))


def test_command_line_stack_replaces_the_files(cli):
    r = cli("check", str(MDS), "--gpus", "8", "--hardware", "h100-sxm", "--stack", "megatron")
    assert r.exit_code == 0
    assert "stack=megatron: the command line replaces the file's megatron-deepspeed" in r.stderr


def test_overlap_comm_off_under_the_pipeline_model(tmp_path):
    """ZeRO-1 with overlap_comm: without --no-pipeline-parallel Megatron-DeepSpeed builds GPTModelPipe, a PipelineModule,
    for which DeepSpeed's engine turns overlap_comm off (microsoft/DeepSpeed @38327e07 deepspeed/runtime/engine.py
    l. 1639-1642): dp_comm_overlap false, the JSON's key listed as ignored; with the flag (GPTModel) it stays on."""
    stage1 = _variant(tmp_path, '"stage": $ZERO_STAGE', '"stage": $ZERO_STAGE, "overlap_comm": true', "s1.sh")
    text = stage1.read_text().replace("ZERO_STAGE=2", "ZERO_STAGE=1")
    assert "ZERO_STAGE=1" in text
    stage1.write_text(text)
    cfg = load_trainer_config(stage1, gpus=8)
    assert cfg.job["sharding"] == "zero1" and cfg.job["dp_comm_overlap"] is True  # GPTModel (--no-pipeline-parallel)
    pipe = tmp_path / "pipe.sh"
    pipe.write_text(text.replace('ds_args=" --no-pipeline-parallel ${ds_args}"', ""))
    cfg = load_trainer_config(pipe, gpus=8)
    assert cfg.job["sharding"] == "zero1" and cfg.job["dp_comm_overlap"] is False
    assert any("zero_optimization.overlap_comm true (DeepSpeed's engine turns it off for a PipelineModule" in x
               for x in cfg.ignored)


def test_distributed_optimizer_flag_said_not_dropped(tmp_path):
    """issue 21: --use-distributed-optimizer under --deepspeed. Megatron-DeepSpeed @f4157bea's get_megatron_optimizer
    returns the bare optimizer before its distributed-optimizer branch (megatron/optimizer/__init__.py l. 115-116) and
    get_model returns the model unwrapped (training.py l. 406-407): the flag has no effect, DeepSpeed's engine shards
    by the JSON's stage (2 here). It is listed as ignored, naming what runs instead; with --DDP-impl torch
    validate_args's assertion (arguments.py l. 213-215) stops the job before DeepSpeed starts: refused."""
    p = _variant(tmp_path, "    --fp16 \\", "    --fp16 --use-distributed-optimizer \\")
    cfg = load_trainer_config(p, gpus=8)
    assert (cfg.job["sharding"], cfg.job["sharding_mode"]) == ("zero2", "zero2")
    said = [x for x in cfg.ignored if x.startswith("--use-distributed-optimizer (")]
    assert len(said) == 1 and "zero_optimization.stage 2 instead: sharding=zero2" in said[0]
    p2 = tmp_path / "ddp.sh"
    p2.write_text(p.read_text().replace("--use-distributed-optimizer", "--use-distributed-optimizer --DDP-impl torch"))
    with pytest.raises(PlannerError, match=r"--use-distributed-optimizer with --DDP-impl torch"):
        load_trainer_config(p2, gpus=8)


@pytest.mark.parametrize("section, outcome", [
    ({"autotp_size": 0}, "ignored"), ({"autotp_size": 1}, "ignored"), ({}, "ignored"),
    ({"autotp_size": 4}, r"tensor_parallel.autotp_size = 4: DeepSpeed's AutoTP training .* is not modelled"),
    # pydantic's lax int, as DeepSpeed reads TPTrainingConfig.autotp_size (deepspeed_types.coerce): "4" is 4, AutoTP
    # on, refused as not modelled; true is 1, off (both refused as not whole numbers before issue readers2)
    ({"autotp_size": "4"}, r"tensor_parallel.autotp_size = 4: DeepSpeed's AutoTP training .* is not modelled"),
    ({"autotp_size": True}, "ignored"),
    ({"autotp_size": 1.5}, r"tensor_parallel.autotp_size = 1.5 is not a whole number"),
    ({"autotp_size": "x"}, r"tensor_parallel.autotp_size = 'x' is not a whole number"),
])
def test_autotp_size(tmp_path, section, outcome):
    """DeepSpeed's tensor_parallel.autotp_size (DeepSpeed @38327e07 runtime/tensor_parallel/config.py l. 45, default 0:
    off; the engine splits the model only where > 1, engine.py l. 250-251): off, the section is listed as ignored
    (no effect, nothing not modelled); on, refused with the hint to price Megatron's TP at that degree."""
    ds = json.loads((DATA / "ds_config_zero2.json").read_text())
    ds["tensor_parallel"] = section
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(ds))
    if outcome == "ignored":
        cfg = load_trainer_config(p, gpus=8, model="llama3-8b")
        assert any(x.startswith("tensor_parallel=") and "AutoTP training off" in x for x in cfg.ignored)
        assert not any("tensor_parallel" in x for x in cfg.not_modelled)
        return
    with pytest.raises(PlannerError, match=outcome) as e:
        load_trainer_config(p, gpus=8, model="llama3-8b")
    if "AutoTP" in outcome:
        assert "--tp 4" in e.value.hint


# ---------------------------------------------------------------- DeepSpeed-MoE (issue 22, mdsexport2)
HEADS = "    --num-attention-heads 16 \\\n"


def _moe(tmp_path, flags: str, old: str = HEADS) -> Path:
    return _variant(tmp_path, old, old + "".join(f"    {f} \\\n" for f in flags.split(" | ")), name="moe.sh")


def test_deepspeed_moe_flags_read_as_the_forks_layers(tmp_path):
    """--num-experts 4 with the fork's defaults: --expert-interval 2 (layer i, 1-based, MoE iff i % 2 == 0:
    transformer.py l. 1650-1660, so the 0-based odd layers), --topk 1, capacity factor 1.0 with every expert padded
    (sharded_moe.py _capacity, MOELayer's einsum), MOELayer's all-to-all; ZeRO-2 with --create-moe-param-group."""
    from planner.catalog import load_model

    cfg = load_trainer_config(_moe(tmp_path, "--num-experts 4 | --create-moe-param-group"), gpus=8)
    j, m = cfg.job, load_model(cfg.job["model"])
    assert (m.moe.num_experts, m.moe.top_k, m.num_layers) == (4, 1, 24)
    assert m.layer_pattern == ["dense", "moe"]  # the period, repeated from layer 0 over the 24 layers
    assert m.layer_kinds["dense"].mlp.kind == "dense" and m.layer_kinds["moe"].mlp.kind == "moe"
    assert (j["moe_capacity_factor"], j["moe_pad_to_capacity"], j["moe_dispatcher"]) == (1.0, True, "alltoall")
    assert any(a.startswith("DeepSpeed-MoE") and "--expert-interval 2, the fork's default" in a for a in cfg.assumed)
    # one count per MoE layer (24 // 2 = 12), all equal: the same model
    cfg2 = load_trainer_config(_moe(tmp_path, "--num-experts " + " ".join(["4"] * 12) + " | --create-moe-param-group"),
                               gpus=8)
    assert cfg2.job["model"] == cfg.job["model"]
    # every layer, top-2, EP 4, capacity 1.5, the loss coefficient
    cfg = load_trainer_config(_moe(tmp_path, "--num-experts 8 | --topk 2 | --expert-interval 1 | --moe-expert-parallel-size 4"
                                             " | --moe-train-capacity-factor 1.5 | --moe-loss-coeff 0.01 | "
                                             "--create-moe-param-group"), gpus=8)
    m = load_model(cfg.job["model"])
    assert (m.moe.num_experts, m.moe.top_k, m.layer_pattern, m.moe.layer_freq) == (8, 2, None, 1)
    assert (cfg.job["ep"], cfg.job["moe_capacity_factor"], cfg.job["moe_aux_loss_coeff"]) == (4, 1.5, 0.01)
    # --num-experts 1 (the fork's default): a dense model, the MoE flags listed as having no effect
    cfg = load_trainer_config(_moe(tmp_path, "--num-experts 1 | --topk 2"), gpus=8)
    assert load_model(cfg.job["model"]).moe is None
    assert any("--topk" in x and "a dense model" in x for x in cfg.ignored)


@pytest.mark.parametrize("flags, match", [
    ("--num-experts 4", "without --create-moe-param-group"),  # ZeRO-2 asserts the MoE groups
    ("--num-experts 4 8 4 4 4 4 4 4 4 4 4 4 | --create-moe-param-group", "different expert counts"),
    ("--num-experts 4 4 4 | --create-moe-param-group", "lists 3 counts for 24 // 2 = 12 MoE layers"),
    ("--num-experts 4 | --mlp-type residual | --create-moe-param-group", "Residual MoE"),
    ("--num-experts 4 | --disable-moe-token-dropping | --create-moe-param-group", "busiest expert's count"),
    ("--num-experts 4 | --use-tutel | --create-moe-param-group", "Tutel"),
])
def test_deepspeed_moe_refusals(tmp_path, flags, match):
    with pytest.raises(PlannerError, match=match):
        load_trainer_config(_moe(tmp_path, flags), gpus=8)


def test_deepspeed_moe_pipeline_partitioning_needs_the_json(tmp_path):
    """An MoE model at pp 2 x tp 2: GPTModelPipe's two inter-stage tensors and DeepSpeed's default partitioned pipe
    tensors (config.py l. 467-468) do not run together (gpt_model.py l. 376-384): refused unless the JSON turns both
    off; ZeRO-1 (the pipeline engine's) here."""
    text = MDS.read_text().replace("TP=1", "TP=2").replace("PP=1", "PP=2").replace("ZERO_STAGE=2", "ZERO_STAGE=1")
    text = text.replace('ds_args=" --no-pipeline-parallel ${ds_args}" ', "")
    text = text.replace(HEADS, HEADS + "    --num-experts 4 \\\n    --create-moe-param-group \\\n")
    p = tmp_path / "pp.sh"
    p.write_text(text)
    with pytest.raises(PlannerError, match="pipeline.pipe_partitioned and grad_partitioned true"):
        load_trainer_config(p, gpus=8)
    p.write_text(text.replace('"wall_clock_breakdown" : true',
                              '"wall_clock_breakdown" : true,\n  "pipeline": {"pipe_partitioned": false, "grad_partitioned": false}'))
    cfg = load_trainer_config(p, gpus=8)
    assert (cfg.job["tp"], cfg.job["pp"], cfg.job["etp"]) == (2, 2, 1)
    # read as priced (the whole output sent, no TP all-gather: what step.py pp_comm prices), not as not modelled
    assert any('pipeline={"pipe_partitioned":false,"grad_partitioned":false}: read, priced' in a for a in cfg.assumed)
    assert not any("pipeline=" in x for x in cfg.not_modelled)


def test_deepspeed_moe_under_sequence_parallelism_is_refused(tmp_path):
    """--num-experts with --sequence-parallel at TP 2: the fork hands DeepSpeed-MoE the rank's sequence shard
    (transformer.py l. 1429-1432) and MOELayer's drop_tokens / gather_tokens assume duplicate tokens over TP: start-up
    rule 78 DEEPSPEED_MOE_SP refuses the job; without --sequence-parallel it resolves."""
    from planner.plan import resolve
    from planner.schema import Job

    text = MDS.read_text().replace("TP=1", "TP=2")
    text = text.replace(HEADS, HEADS + "    --num-experts 4 \\\n    --create-moe-param-group \\\n")
    text = text.replace(HEADS, HEADS + "    --disable-bias-linear \\\n")  # DeepSpeed's gate has no bias (l. 481)
    p = tmp_path / "sp.sh"
    p.write_text(text.replace(HEADS, HEADS + "    --sequence-parallel \\\n"))
    job = load_trainer_config(p, gpus=8).job
    assert (job["tp"], job["sequence_parallel"]) == (2, True)
    with pytest.raises(PlannerError, match="DEEPSPEED_MOE_SP"):
        resolve(Job(**job))
    p.write_text(text)
    job = load_trainer_config(p, gpus=8).job
    assert int(resolve(Job(**job))[1].sp) == 0


def test_deepspeed_moe_interval_read_as_its_period_at_any_depth(tmp_path):
    """--expert-interval N is the period [dense] * (N - 1) + [moe], repeated from the first layer: 0-based layer i MoE
    iff i % N == N - 1, the fork's 1-based i % N == 0 (transformer.py get_num_experts_per_layer l. 1650-1660), so the
    fuzz reproducers' 2^31 - 1 layers read as 3 pattern entries, with no per-layer list (before: refused above 100,000
    layers). 2^20 and 2^31 - 1 layers at --expert-interval 3: L mod 3 = 1 and 1, the last layer dense either way."""
    from planner.catalog import load_model

    for L in (2**20, 2**31 - 1):
        text = MDS.read_text().replace("NLAYERS=24", f"NLAYERS={L}")
        p = tmp_path / f"deep{L}.sh"
        p.write_text(text.replace(HEADS, HEADS + "    --num-experts 4 \\\n    --expert-interval 3 \\\n"
                                               "    --create-moe-param-group \\\n"))
        m = load_model(load_trainer_config(p, gpus=8).job["model"])
        assert (m.num_layers, m.layer_pattern) == (L, ["dense", "dense", "moe"])
    # a period above schema.MAX_LAYER_PERIOD (65,536) is refused naming it, not built
    text = MDS.read_text().replace("NLAYERS=24", "NLAYERS=2147483647")
    p = tmp_path / "wide.sh"
    p.write_text(text.replace(HEADS, HEADS + "    --num-experts 4 \\\n    --expert-interval 65537 \\\n"
                                           "    --create-moe-param-group \\\n"))
    with pytest.raises(PlannerError, match="--expert-interval 65,537: the MoE layers repeat every 65,537 layers"):
        load_trainer_config(p, gpus=8)
