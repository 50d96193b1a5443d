"""planner/trainers: torchtitan TOML, Megatron launch scripts / argument files and DeepSpeed
JSON read into planner job fields (fixtures in tests/data/trainer_configs/, cited in its
README), with their ignored and assumed lists and the contradictions that exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import detect_format, load_trainer_config


DATA = Path(__file__).parent / "data" / "trainer_configs"
TOML = DATA / "llama3_8b.toml"
# torchtitan before 1e8f9acd1, whose training takes context_parallel_rotate_method (planner/cp_rotate.py [4])
TT_ROTATE_TRAINS = str(Path(__file__).parent / "data" / "stacks" / "torchtitan-rotate-trains.yaml")
SH = DATA / "train_llama3_8b.sh"
DS = DATA / "ds_config_zero2.json"
DS3 = DATA / "ds_config_zero3.json"
GPT3_SH = DATA / "train_gpt3_175b_distributed.sh"  # NVIDIA's examples/gpt3 script (one node as written)
FP8_SH = DATA / "train_llama3_8b_h100_fp8.sh"  # NVIDIA's examples/llama fp8 script (8 H100s)


def _variant(tmp_path, src: Path, old: str, new: str, name: str | None = None) -> Path:
    text = src.read_text()
    assert old in text, old
    p = tmp_path / (name or src.name)
    p.write_text(text.replace(old, new))
    return p


# ------------------------------------------------------------------ detection
def test_detect_format(tmp_path):
    assert detect_format(TOML) == "torchtitan"
    assert detect_format(SH) == "megatron"
    assert detect_format(DS) == "deepspeed"
    args = tmp_path / "args.txt"
    args.write_text("--tensor-model-parallel-size 2\n")
    assert detect_format(args) == "megatron"
    hf = tmp_path / "config.json"
    hf.write_text('{"hidden_size": 4096}')
    assert detect_format(hf) is None
    assert detect_format(Path(__file__).parent / "data" / "tiny-fit.yaml") is None


# ------------------------------------------------------------------ torchtitan
def test_torchtitan_llama3_8b_preset():
    cfg = load_trainer_config(TOML, gpus=64)
    assert cfg.fmt == "torchtitan" and cfg.source == str(TOML)
    j = cfg.job
    # data_parallel_shard_degree -1 on 64 GPUs with everything else 1: FSDP over 64
    assert (j["model"], j["gpus"], j["tp"], j["pp"], j["cp"], j["sharding"]) == ("llama3-8b", 64, 1, 1, 1, "fsdp")
    # global_batch_size -1 = local_batch_size 1 x dp 64; pp 1: the local batch is the micro-batch
    assert (j["global_batch"], j["micro_batch"], j["seq_len"]) == (64, 1, 8192)
    assert j["recompute"] == "selective" and j["torch_compile"] is False and j["stack"] == "torchtitan"
    assert j["tokens"] == 1000 * 64 * 8192  # steps x global batch x seq_len
    # the optimizer's learning rate cannot change memory or time (ignored, with why); float8's
    # filter_fqns could (which linears run in fp8), but this file names no float8 converter, so
    # torchtitan reads no [float8] key (tests/test_reader_lists.py: with the converter)
    assert "optimizer.lr=0.0003 (optimizer hyper-parameters (Adam(W) priced))" in cfg.ignored
    assert "float8.filter_fqns=[\"output\"] (no float8 converter)" in cfg.ignored
    assert not any("filter_fqns" in n for n in cfg.not_modelled)
    assert any(a.startswith("data_parallel_shard_degree=64") for a in cfg.assumed)
    Job.model_validate(j)
    resolve(Job.model_validate(j))


def test_torchtitan_needs_gpus_for_leftover_shard():
    with pytest.raises(PlannerError, match="data_parallel_shard_degree = -1.*no --gpus"):
        load_trainer_config(TOML)


def test_torchtitan_explicit_degrees_give_gpus_and_contradict(tmp_path):
    p = _variant(tmp_path, TOML, "data_parallel_replicate_degree = 1\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 1",
                 "data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 8\ntensor_parallel_degree = 4")
    cfg = load_trainer_config(p)
    assert cfg.job["gpus"] == 64 and cfg.job["sharding"] == "hsdp" and cfg.job["shard_group"] == 8
    assert cfg.job["sequence_parallel"] is True  # torchtitan TP always shards the norms
    assert cfg.job["global_batch"] == 16  # local 1 x dp (2 x 8)
    with pytest.raises(PlannerError, match=r"replicate x shard x tp x pp x cp = 64 GPUs, but --gpus 32"):
        load_trainer_config(p, gpus=32)


def test_torchtitan_tp_not_dividing_heads_exits_2(tmp_path):
    p = _variant(tmp_path, TOML, "tensor_parallel_degree = 1", "tensor_parallel_degree = 3")
    cfg = load_trainer_config(p, gpus=48)
    with pytest.raises(PlannerError, match="tp does not divide|heads"):
        resolve(Job.model_validate(cfg.job))


def test_torchtitan_later_layout_compile_quantize_pp(tmp_path):
    """torchtitan's later layout (quantize converters, [compile] components, layers per stage)
    read back; the end stages' weights (pipeline_parallel_first/last_stage_less_layers) count in
    the stages: with torchtitan's default 1 and 1, 80 layers at 10 per stage are ceil(82 / 10) = 9
    stages on 4 ranks, which torchtitan itself refuses (distributed/pipeline_parallel.py
    @e347b1e5e: 'Number of virtual stages (9) must be divisible by ...'), and so does the reader;
    with weights 0 and 0 they are 8 stages, vpp 2."""
    p = tmp_path / "new.toml"
    p.write_text("""
[model]
name = "llama3"
flavor = "70B"
converters = ["quantize.linear.float8"]
[training]
local_batch_size = 8
global_batch_size = 256
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 8
tensor_parallel_degree = 8
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_layers_per_stage = 10
pipeline_parallel_microbatch_size = 2
enable_async_tensor_parallel = true
[compile]
enable = true
components = ["model", "loss"]
[quantize.linear.float8]
recipe_name = "rowwise"
[activation_checkpoint]
mode = "full"
""")
    with pytest.raises(PlannerError, match=r"pipeline_parallel_layers_per_stage 10 gives 9 stages for 80 layers, not a "
                                           r"multiple of pipeline_parallel_degree 4"):
        load_trainer_config(p)
    p.write_text(p.read_text().replace("pipeline_parallel_microbatch_size = 2\n", "pipeline_parallel_microbatch_size = 2\n"
                                       "pipeline_parallel_first_stage_less_layers = 0\n"
                                       "pipeline_parallel_last_stage_less_layers = 0\n"))
    j = load_trainer_config(p).job
    assert j["gpus"] == 8 * 8 * 4 and j["model"] == "llama3-70b"
    assert j["vpp"] == 2 and j["schedule"] == "interleaved"  # 80 layers / 10 per stage = 8 stages on 4 ranks
    assert j["micro_batch"] == 2 and j["global_batch"] == 256  # 256 = 8 local x 8 dp x 4 accumulation
    assert j["precision"] == "fp8" and j["fp8_recipe"] == "rowwise"
    assert j["torch_compile"] is True and j["tp_comm_overlap"] is True and j["recompute"] == "full"
    assert not j["account_for_embedding_in_pipeline_split"] and not j["account_for_loss_in_pipeline_split"]
    resolve(Job.model_validate(j))


def test_torchtitan_selective_every_nth_layer(tmp_path):
    p = _variant(tmp_path, TOML, 'selective_ac_option = "op"', 'selective_ac_option = "2"')
    j = load_trainer_config(p, gpus=64).job
    # every 2nd of 32 layers fully recomputed: ceil(32 / 1 / 2) = 16 (validate.py's rule 4b)
    assert j["recompute"] == "full" and j["recompute_layers"] == 16


def test_torchtitan_unknown_flavor_needs_model(tmp_path):
    """A flavor not in llama3's registry needs --model (then noted); the debugmodel flavor is torchtitan's, of no
    catalog model's shape (planner/trainers/torchtitan_flavors.py): read as itself, torchtitan:llama3/debugmodel
    (dim 256, 6 layers, vocab 2048), and not llama2-7b's."""
    p = _variant(tmp_path, TOML, 'flavor = "8B"', 'flavor = "custom"')
    with pytest.raises(PlannerError, match="flavor 'custom'.*no --model"):
        load_trainer_config(p, gpus=8)
    assert load_trainer_config(p, gpus=8, model="llama2-7b").job["model"] == "llama2-7b"
    p = _variant(tmp_path, TOML, 'flavor = "8B"', 'flavor = "debugmodel"')
    cfg = load_trainer_config(p, gpus=8)
    assert cfg.job["model"] == "torchtitan:llama3/debugmodel"
    from planner.catalog import load_model

    m = load_model(cfg.job["model"])
    assert (m.hidden_size, m.num_layers, m.vocab_size, m.ffn_hidden_size) == (256, 6, 2048, 768)  # 256 * ceil(682 / 256)
    with pytest.raises(PlannerError, match="contradicts --model llama2-7b"):
        load_trainer_config(p, gpus=8, model="llama2-7b")


def test_torchtitan_model_contradicts_flavor():
    with pytest.raises(PlannerError, match="contradicts --model llama3-70b"):
        load_trainer_config(TOML, gpus=64, model="llama3-70b")


# ------------------------------------------------------------------ Megatron
def test_megatron_launch_script():
    cfg = load_trainer_config(SH)
    j = cfg.job
    assert cfg.fmt == "megatron" and j["stack"] == "megatron"
    # torchrun --nproc_per_node 8 --nnodes 1; the shape flags match exactly one catalog model
    assert (j["gpus"], j["model"], j["tp"], j["pp"], j["cp"]) == (8, "llama3-8b", 2, 1, 1)
    assert (j["micro_batch"], j["global_batch"], j["seq_len"]) == (1, 128, 8192)
    assert j["sharding"] == "zero1" and j["sequence_parallel"] is True and j["dp_comm_overlap"] is True
    assert j["tp_comm_overlap"] is False and j["recompute"] == "none" and j["precision"] == "bf16"
    assert j["rank_order"] == "tp-cp-dp-pp"
    assert j["tokens"] == 1000 * 128 * 8192
    ig = "; ".join(cfg.ignored)
    assert "--lr=0.00015" in ig and "--split=99,1,0 (the data pipeline)" in ig
    # --rotary-base 500000 is read (issue 22): compared with llama3-8b's rope_theta 500,000 (Llama 3 Table 3), not ignored
    assert "rotary-base" not in ig and "rotary-base" not in "; ".join(cfg.not_modelled)
    # the fused cross-entropy is priced (stack_db megatron memory.fused_loss_extra_per_logit)
    assert j["cross_entropy_fusion"] is True
    resolve(Job.model_validate(j))


def test_megatron_gpus_flag_beats_the_script_and_tp3(tmp_path):
    # issue 22: a launch script's node count comes from the scheduler: --gpus replaces it, with a note
    cfg = load_trainer_config(SH, gpus=16)
    assert cfg.job["gpus"] == 16
    assert any(a == "gpus=16: --gpus replaces the file's torchrun --nproc_per_node x --nnodes = 8" for a in cfg.assumed)
    p = _variant(tmp_path, SH, "TP_SIZE=2", "TP_SIZE=3")
    with pytest.raises(PlannerError, match="--tensor-model-parallel-size 3 does not divide --num-attention-heads 32"):
        load_trainer_config(p)


def test_megatron_soft_default_node_count(tmp_path):
    p = _variant(tmp_path, SH, "NUM_NODES=1", "NUM_NODES=${NUM_NODES:-1}")
    cfg = load_trainer_config(p, gpus=64)
    assert cfg.job["gpus"] == 64 and any("--gpus replaces the file's" in a for a in cfg.assumed)


def test_megatron_block_method_covering_every_layer_keeps_recompute_layers(tmp_path):
    # --recompute-method block --recompute-num-layers 5 per chunk x 4 chunks = 20 = 80 / PP 4: every layer re-runs,
    # as under uniform, but the block method runs an MTP module without recompute (multi_token_prediction.py
    # @d98e8a64 l. 1630-1650), so the reader keeps the count (memory.py [dh] mtp_recomputed reads it)
    p = tmp_path / "args.txt"
    p.write_text("""--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4
--num-layers-per-virtual-pipeline-stage 5
--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64
--group-query-attention --num-query-groups 8 --vocab-size 128256 --seq-length 8192
--micro-batch-size 1 --global-batch-size 512 --recompute-granularity full --recompute-method block
--recompute-num-layers 5 --bf16
""")
    cfg = load_trainer_config(p, gpus=256)
    assert cfg.job["recompute"] == "full" and cfg.job["recompute_layers"] == 20
    assert any(a.startswith("recompute_layers=20: --recompute-num-layers 5 per model chunk x 4 chunks (every layer")
               for a in cfg.assumed)
    resolve(Job.model_validate(cfg.job))


def test_megatron_argument_file(tmp_path):
    p = tmp_path / "args.txt"
    p.write_text("""--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4
--num-layers-per-virtual-pipeline-stage 5   # 80 / (4 x 5) = 4 virtual stages
--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64
--group-query-attention --num-query-groups 8 --vocab-size 128256 --seq-length 8192
--swiglu --untie-embeddings-and-output-weights --disable-bias-linear
--micro-batch-size 1 --global-batch-size 512 --recompute-granularity full --recompute-method block
--recompute-num-layers 2 --fp8-format hybrid --fp8-recipe tensorwise --tp-comm-overlap --sequence-parallel
--exit-duration-in-mins 230
""")
    cfg = load_trainer_config(p, gpus=256)
    j = cfg.job
    assert (j["model"], j["tp"], j["pp"], j["vpp"], j["schedule"]) == ("llama3-70b", 8, 4, 4, "interleaved")
    assert j["recompute"] == "full" and j["recompute_layers"] == 8  # 2 per chunk x 4 chunks
    assert j["precision"] == "fp8" and j["fp8_recipe"] == "tensorwise" and j["tp_comm_overlap"] is True
    assert j["sharding"] == "none" and j["dp_comm_overlap"] is False
    ig = "; ".join(cfg.ignored)
    assert "--exit-duration-in-mins=230 (logging, evaluation and checkpointing (between steps))" in ig
    assert "--fp8-format" not in ig  # read: it turns fp8 on (tests/ignored_keys.py: removed, the plan is bf16)
    assert "precision=fp8: --fp8-format hybrid (e4m3 or hybrid: the same fp8 GEMMs)" in cfg.assumed
    assert any(a.startswith("dp_comm_overlap=false") for a in cfg.assumed)
    resolve(Job.model_validate(j))


def test_megatron_model_flag_beats_the_shape_flags(tmp_path):
    cfg = load_trainer_config(SH, model="llama3-70b")  # issue 22: the flag wins, with a note naming what it replaced
    assert cfg.job["model"] == "llama3-70b"
    assert any(a.startswith("model=llama3-70b: --model replaces the arguments' shape (--num-layers 32 contradicts") for a in cfg.assumed)


def test_megatron_vpp_flags_disagree(tmp_path):
    p = tmp_path / "args.txt"
    p.write_text("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
                 "--group-query-attention --num-query-groups 8 --pipeline-model-parallel-size 4 "
                 "--swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
                 "--num-layers-per-virtual-pipeline-stage 4 --num-virtual-stages-per-pipeline-rank 4\n")
    with pytest.raises(PlannerError, match="--num-virtual-stages-per-pipeline-rank 4 contradicts --num-layers-per-virtual-pipeline-stage 4"):
        load_trainer_config(p, gpus=8)


def test_megatron_no_command_line(tmp_path):
    p = tmp_path / "x.sh"
    p.write_text("#!/bin/bash\necho --tensor-model-parallel-size\n")
    with pytest.raises(PlannerError, match="no pretrain_gpt.py / torchrun line"):
        load_trainer_config(p, fmt="megatron")


# ------------------------------------------------------------------ DeepSpeed
def test_deepspeed_zero2():
    cfg = load_trainer_config(DS, gpus=8, model="llama3-8b")
    j = cfg.job
    assert j["stack"] == "megatron-deepspeed" and j["sharding"] == "zero2" and j["dp_comm_overlap"] is True
    assert (j["micro_batch"], j["global_batch"], j["gpus"], j["precision"]) == (4, 64, 8, "bf16")
    # the reduce bucket is ZeRO-2's IPG buffer (memory.py [zb]): read; the all-gather bucket is not modelled;
    # contiguous_gradients true is what the planner assumes (not listed); clipping cannot: ignored
    assert j["deepspeed_zero3"] == {"reduce_bucket_size": 500_000_000}
    assert not any(n.startswith(("zero_optimization.reduce_bucket_size", "zero_optimization.contiguous_gradients"))
                   for n in cfg.not_modelled)
    assert any(n.startswith("zero_optimization.allgather_bucket_size=500000000 (buckets") for n in cfg.not_modelled)
    assert "gradient_clipping=1.0 (a norm over the gradients once a step)" in cfg.ignored
    resolve(Job.model_validate(j))


def test_deepspeed_batch_contradiction_and_missing():
    with pytest.raises(PlannerError, match=r"train_batch_size 64 != .* x 16 GPUs = 128"):
        load_trainer_config(DS, gpus=16, model="llama3-8b")
    with pytest.raises(PlannerError, match="does not name the model"):
        load_trainer_config(DS, gpus=8)
    with pytest.raises(PlannerError, match="does not give the GPU count"):
        load_trainer_config(DS, model="llama3-8b")


def test_deepspeed_offload_listed_and_stage3(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text('{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto", "fp16": {"enabled": true},'
                 ' "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}')
    cfg = load_trainer_config(p, gpus=4, model="llama3-8b")
    assert cfg.job["sharding"] == "fsdp" and cfg.job["global_batch"] == 8
    # ZeRO-Offload is priced (planner/offload.py, tests/test_offload.py): the job's offload_optimizer; pin_memory left out,
    # DeepSpeed's default false (pageable buffers), is what stays not modelled
    assert cfg.job["offload_optimizer"] == "cpu" and "offload_param" not in cfg.job
    assert not any("offload not modelled" in i for i in cfg.not_modelled)
    assert any(i.startswith("zero_optimization.offload_optimizer.pin_memory absent") for i in cfg.not_modelled)
    assert any("fp16 priced as bf16" in a for a in cfg.assumed)


# ------------------------------------------------------------------ planner check gates them
def test_check_gates_torchtitan_toml(cli, tmp_path):
    r = cli("check", TOML, "--gpus", 64, "--hardware", "a100-sxm-80gb")
    assert r.exit_code == 0, r.stderr
    assert "PASS" in r.stdout
    # issue 24: the settings with no effect (the reader's documented list) are counted, not listed
    # 17: the 13 of before issue 22's lists, model.tokenizer_path (the tokenizer's files) and [float8]
    # enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp, filter_fqns (no float8
    # converter in this file: torchtitan reads none of them)
    assert "read as torchtitan; 17 setting(s) with no effect on memory or time not listed" in r.stderr
    assert "optimizer.lr=0.0003" not in r.stderr
    assert "not modelled" not in r.stderr
    # no activation checkpointing and 8 sequences of 8,192 tokens per GPU: the layer activations alone
    # exceed an 80 GB A100
    heavy = _variant(tmp_path, _variant(tmp_path, TOML, 'mode = "selective"', 'mode = "none"'),
                     "local_batch_size = 1", "local_batch_size = 8")
    r = cli("check", heavy, "--gpus", 64, "--hardware", "a100-sxm-80gb")
    assert r.exit_code == 1 and "FAIL" in r.stdout
    bad = _variant(tmp_path, TOML, "tensor_parallel_degree = 1", "tensor_parallel_degree = 3", name="tp3.toml")
    r = cli("check", bad, "--gpus", 48)
    assert r.exit_code == 2 and "tp3.toml" in r.stderr and "heads" in r.stderr


def test_check_gates_megatron_script(cli, tmp_path):
    r = cli("check", SH)
    assert r.exit_code == 0, r.stderr
    assert "read as megatron" in r.stderr and "--lr=0.00015" not in r.stderr
    heavy = _variant(tmp_path, SH, "MICRO_BATCH_SIZE=1", "MICRO_BATCH_SIZE=4")
    assert cli("check", heavy).exit_code == 1
    r = cli("check", SH, "--gpus", 16)  # issue 22: the flag beats the script's node count, with a note
    assert r.exit_code == 0 and "llama3-8b on 16 x h100-sxm" in r.stdout
    assert "gpus=16: --gpus replaces the file's torchrun --nproc_per_node x --nnodes = 8" in r.stderr
    tp3 = _variant(tmp_path, SH, "TP_SIZE=2", "TP_SIZE=3", name="tp3.sh")
    assert_one_error_lines(cli("check", tp3), "--tensor-model-parallel-size 3", "--num-attention-heads 32")


def test_check_gates_deepspeed_json(cli, tmp_path):
    # micro-batch 4 x 8,192 tokens without recompute on 8 H100s: does not fit (a DeepSpeed JSON
    # names no sequence length and takes no recipe: --seq-len gives Llama 3's 8,192, else 4,096)
    r = cli("check", DS, "--gpus", 8, "--model", "llama3-8b", "--seq-len", 8192)
    assert r.exit_code == 1 and "read as deepspeed" in r.stderr
    light, mid = tmp_path / "ds.json", tmp_path / "ds2.json"
    light.write_text(DS.read_text().replace('"train_batch_size": 64', '"train_batch_size": 16')
                     .replace('"train_micro_batch_size_per_gpu": 4', '"train_micro_batch_size_per_gpu": 1'))
    mid.write_text(DS.read_text().replace('"train_batch_size": 64', '"train_batch_size": 32')
                   .replace('"train_micro_batch_size_per_gpu": 4', '"train_micro_batch_size_per_gpu": 2'))
    # micro-batch 1: 70.9 GiB without NCCL's NVLS buffers, under the 71.2 GiB usable of the 79.09 GiB an H100
    # reports to CUDA (over the 67.1 GiB of the datasheet's 80e9 B, which refused it before issue 21's measured
    # HBM); with them (the DP group's 8 ranks a node: 258 MiB, memory.py [nv]) 71.2 GiB, 0.04 GiB over it
    light_run = cli("check", light, "--gpus", 8, "--model", "llama3-8b", "--seq-len", 8192)
    assert light_run.exit_code == 1 and "+ 1.3 GiB outside the allocator" in light_run.stdout
    assert cli("check", light, "--gpus", 8, "--model", "llama3-8b", "--seq-len", 8192,
               "--nccl-nvls-enable", 0).exit_code == 0
    # micro-batch 2: 109.0 GiB, over the H100's 71.2 GiB, under the H200's 0.9 x 139.80 = 125.8 GiB
    assert cli("check", mid, "--gpus", 8, "--model", "llama3-8b", "--seq-len", 8192).exit_code == 1
    assert cli("check", mid, "--gpus", 8, "--model", "llama3-8b", "--seq-len", 8192, "--hardware", "h200-sxm").exit_code == 0
    assert_one_error_lines(cli("check", DS, "--gpus", 16, "--model", "llama3-8b"), "train_batch_size 64")


def assert_one_error_lines(r, *needles):
    """check reports a bad file as error/hint lines on stderr (after the file's notes) and exits 2."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errs) == 1
    for n in needles:
        assert n in errs[0]


def test_explain_and_budget_read_trainer_configs(cli):
    r = cli("explain", TOML, "--gpus", 64, "--format", "json")
    assert r.exit_code == 0, r.stderr
    import json

    p = json.loads(r.stdout)["plan"]
    assert (p["stack"], p["sharding"], p["dp"], p["recompute"]) == ("torchtitan", "fsdp", 64, "selective")
    r = cli("budget", SH, "--format", "json")  # tokens from --train-iters x 128 x 8,192
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["gpus"] == 8
    # an explicit --config-format wins; a YAML read as a trainer config is an error
    r = cli("explain", SH, "--config-format", "torchtitan")
    assert r.exit_code == 2 and "invalid TOML" in r.stderr
    # a sweep keeps the file's global batch (64) and derives dp at each count
    r = cli("budget", DS, "--model", "llama3-8b", "--sweep-gpus", "8,16", "--tokens", "1e9", "--format", "json")
    assert r.exit_code == 1, r.stderr  # the file's ZeRO-2 plan fits at neither count: the rows printed, exit 1
    assert [row["dp"] for row in json.loads(r.stdout)] == [8, 16]


@pytest.mark.parametrize("config, args", [
    (TOML, ("--gpus", 64)),
    (SH, ()),
    (DS, ("--model", "llama3-8b", "--gpus", 8)),
    ("job", ()),  # a job YAML without a .yaml suffix: sniffed (read), then parsed from that text
])
def test_explain_reads_a_config_once(cli, tmp_path, monkeypatch, config, args):
    """`planner explain FILE` reads FILE once (planner/files.py read_bytes, the one reader):
    detecting the format and parsing share the text. Before, a script or JSON was read three
    times (the CLI's detection, load_trainer_config's, the reader's) and an extension-less job
    YAML twice; a .toml, told by its suffix, once."""
    from planner import files

    if config == "job":
        config = tmp_path / "job"
        config.write_text("model: llama3-8b\ngpus: 8\n")
    reads: list[Path] = []
    real = files.read_bytes
    monkeypatch.setattr(files, "read_bytes", lambda path, *a, **k: (reads.append(Path(path)), real(path, *a, **k))[1])
    r = cli("explain", config, *args)
    assert r.exit_code == 0, r.stderr
    assert reads.count(Path(config)) == 1, reads


# ------------------------------------------------------------------ export and the round trip
import json as _json  # noqa: E402
import tomllib  # noqa: E402

from planner.cli.export import resolved_plan  # noqa: E402
from planner.trainers.export import export_plan  # noqa: E402

PLAN_KEYS = ("model", "gpus", "tp", "cp", "pp", "vpp", "dp", "micro_batch", "global_batch", "seq_len", "sharding",
             "shard_group", "recompute", "recompute_layers", "sequence_parallel", "schedule", "precision", "fp8_recipe",
             "rank_order", "stack", "tp_comm_overlap", "dp_comm_overlap", "torch_compile", "tokens", "bytes_per_param", "ep")


def _round_trip(tmp_path, fmt: str, suffix: str, read_kw: dict, **job):
    plan = resolved_plan(Job(**job))
    text, notes = export_plan(plan, fmt)
    p = tmp_path / f"exported{suffix}"
    p.write_text(text)
    back = resolved_plan(Job.model_validate(load_trainer_config(p, **read_kw).job))
    _assert_same_plan(back, plan)
    return plan, text, notes


def _assert_same_plan(back: dict, plan: dict) -> None:
    """The PLAN_KEYS agree, the rank order up to where its size-1 axes sit: the trainer builds
    one order for both names (tp-cp-pp-dp and tp-cp-dp-pp are one order with pp 1), and names
    it by its own (stack_db runs.rank_orders; planner/startup.py built_order)."""
    from planner.catalog import load_stack
    from planner.startup import built_order

    assert {k: back[k] for k in PLAN_KEYS if k != "rank_order"} == {k: plan[k] for k in PLAN_KEYS if k != "rank_order"}
    stack = load_stack(plan["stack"])
    mesh = [plan[k] for k in ("tp", "cp", "pp", "dp")]
    assert built_order(stack, back["rank_order"], *mesh) == built_order(stack, plan["rank_order"], *mesh) is not None


@pytest.mark.parametrize("job", [
    dict(model="llama3-70b", gpus=512, tp=8, pp=4, vpp=2, sharding="fsdp", global_batch=1024, recompute="selective",
         rank_order="tp-cp-dp-pp", tokens=1024 * 8192 * 100),
    dict(model="llama3-8b", gpus=64, tp=2, sharding="hsdp", shard_group=8, micro_batch=2, global_batch=256,
         recompute="full", rank_order="tp-cp-dp-pp", precision="fp8", fp8_recipe="rowwise", torch_compile=True,
         tp_comm_overlap=True),
    dict(model="llama3-8b", gpus=32, cp=2, sharding="fsdp", micro_batch=1, global_batch=64, recompute="full",
         recompute_layers=16, rank_order="tp-cp-dp-pp"),
])
def test_round_trip_torchtitan(tmp_path, job):
    plan, text, notes = _round_trip(tmp_path, "torchtitan", ".toml", {}, stack="torchtitan", **job)
    data = tomllib.loads(text)  # the standard parser reads it
    par = data["parallelism"]
    assert par["tensor_parallel_degree"] == plan["tp"] and par["context_parallel_degree"] == plan["cp"]
    assert data["training"]["global_batch_size"] == plan["global_batch"] and data["training"]["seq_len"] == plan["seq_len"]
    if plan["sharding"] == "hsdp":
        assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (4, 8)
    # every setting expressible; the one note: llama3-8b / -70b (Llama 3, plain RoPE) on torchtitan's llama3 flavor,
    # which always applies Llama 3.1's RoPE scaling (models/llama3/model/args.py RoPEScalingArgs @e347b1e5e, no key)
    flavor = {"llama3-8b": "8B", "llama3-70b": "70B"}[plan["model"]]
    assert notes == [f"model {plan['model']}: rope_scaling none, but torchtitan's llama3 {flavor} flavor always applies "
                     "Llama 3.1's (factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings "
                     "8192; no setting turns it off): the run trains those rotary frequencies, at the same cost"]


@pytest.mark.parametrize("job", [
    dict(model="llama3-70b", gpus=512, tp=8, pp=4, vpp=2, sharding="zero1", global_batch=1024, recompute="full",
         recompute_layers=10, tokens=1024 * 8192 * 50),
    # pp 1: the order tp-cp-pp-dp is Megatron's default one (no --use-tp-pp-dp-mapping written or needed)
    dict(model="llama3-8b", gpus=16, tp=2, cp=2, micro_batch=1, global_batch=64, recompute="selective",
         precision="fp8", fp8_recipe="tensorwise", tp_comm_overlap=True, dp_comm_overlap=False, rank_order="tp-cp-pp-dp"),
    # --use-tp-pp-dp-mapping with pp > 1 (cp 1, so Megatron accepts it), and an uneven split written as
    # --decoder-first/last-pipeline-num-layers (80 layers on 6 stages: 12 + 4 x 14 + 12)
    dict(model="llama3-70b", gpus=96, tp=8, pp=6, sharding="zero1", global_batch=96, recompute="full",
         rank_order="tp-cp-pp-dp"),
    # 126 layers on 16 stages, one layer off each end: --account-for-embedding/loss-in-pipeline-split
    dict(model="llama3-405b", gpus=2048, tp=8, pp=16, vpp=8, sharding="zero1", global_batch=2048, recompute="full",
         account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True),
    # 61 layers on pp 4 x vpp 4 (NVIDIA's DeepSeek-V3 on GB200): --pipeline-model-parallel-layout
    dict(model="deepseek-v3", gpus=256, pp=4, vpp=4, ep=64, sharding="zero1", global_batch=2048, hardware="gb200-nvl72"),
    dict(model="gpt3-175b", gpus=1024, tp=8, pp=16, sharding="fsdp", global_batch=1536, recompute="full"),
    # Qwen3's per-head q/k norms: --qk-layernorm, read back as the same model
    dict(model="qwen3-30b-a3b", gpus=16, tp=2, ep=8, sharding="zero1", micro_batch=1, global_batch=64),
])
def test_round_trip_megatron(tmp_path, job):
    plan, text, notes = _round_trip(tmp_path, "megatron", ".sh", {}, stack="megatron", **job)
    assert f"--tensor-model-parallel-size {plan['tp']} " in text and f"--global-batch-size {plan['global_batch']} " in text
    # the plans price the rows Megatron builds (stack_db megatron vocab_padding: GPT-3's 50,257 tokens at tp 8, 51,200;
    # Qwen3's 151,936 at tp 2, 152,064), so the script writes Megatron's default padding: no --padded-vocab-size, no note
    assert [n for n in notes if not n.startswith("--fp8-format hybrid")] == []
    assert "--padded-vocab-size" not in text
    assert plan.get("vocab_rows") == {"gpt3-175b": 51200, "qwen3-30b-a3b": 152064}.get(plan["model"], plan.get("vocab_rows"))
    assert ("--use-tp-pp-dp-mapping" in text) == (plan["rank_order"] == "tp-cp-pp-dp" and plan["pp"] > 1)
    if plan["pp"] == 6:
        assert "--decoder-first-pipeline-num-layers 12 " in text and "--decoder-last-pipeline-num-layers 12 " in text
    if plan["model"] == "llama3-405b":  # Megatron-Bridge's own spelling for this split
        assert "--account-for-embedding-in-pipeline-split " in text and "--account-for-loss-in-pipeline-split " in text
        assert "--num-virtual-stages-per-pipeline-rank 8 " in text and "decoder-first" not in text
    if plan["model"] == "deepseek-v3":  # chunks of 4 layers, the first 2 and the last 3: 2 + 14 x 4 + 3 = 61
        assert "--pipeline-model-parallel-layout 'Et*2|" + "t*4|" * 14 + "t*3L' " in text
        assert "--num-virtual-stages-per-pipeline-rank" not in text  # Megatron takes vpp from the layout
    # --qk-layernorm: MLA's latent norms (gpt_layer_specs.py l. 240-251), Qwen3's per-head q/k norms (qk_norm)
    assert ("--qk-layernorm " in text) == (plan["model"] in ("deepseek-v3", "qwen3-30b-a3b"))


@pytest.mark.parametrize("job", [
    dict(model="llama3-8b", gpus=64, sharding="zero2", micro_batch=2, global_batch=256, dp_comm_overlap=True),
    dict(model="llama2-7b", gpus=8, sharding="fsdp", micro_batch=1, global_batch=8, dp_comm_overlap=False),
])
def test_round_trip_deepspeed(tmp_path, job):
    plan, text, notes = _round_trip(tmp_path, "deepspeed", ".json",
                                    dict(model=job["model"], gpus=job["gpus"]), stack="megatron-deepspeed", **job)
    cfg = _json.loads(text)
    assert cfg["train_batch_size"] == plan["global_batch"] and cfg["train_micro_batch_size_per_gpu"] == plan["micro_batch"]
    assert cfg["gradient_accumulation_steps"] == plan["global_batch"] // (plan["dp"] * plan["micro_batch"])
    assert cfg["zero_optimization"]["stage"] == {"zero2": 2, "fsdp": 3}[plan["sharding"]]


def test_export_refuses_what_the_format_cannot_express():
    """What the trainer's file cannot say is refused (exit 2, naming it), never dropped: a plan
    priced on another stack (its modes, kernels and rules are not the file's), TP / PP / EP in a
    DeepSpeed JSON, Megatron's 18-byte states in torchtitan; what the file leaves to the model
    code (recompute in a DeepSpeed JSON) is a note."""
    plan = resolved_plan(Job(model="llama3-8b", gpus=64, tp=2, cp=2, sharding="zero1", global_batch=256, recompute="full"))
    for fmt, stack in (("deepspeed", "megatron-deepspeed"), ("torchtitan", "torchtitan")):
        with pytest.raises(PlannerError, match=f"export {fmt}: the plan was priced on stack megatron, not {stack}") as e:
            export_plan(plan, fmt)
        assert f"--stack {stack}" in e.value.hint
    ds = dict(model="llama3-8b", gpus=64, sharding="zero1", global_batch=256, stack="megatron-deepspeed")
    for axis in ("tp", "pp"):
        with pytest.raises(PlannerError, match=f"export deepspeed: {axis} 2: a DeepSpeed JSON has no {axis.upper()}"):
            export_plan(resolved_plan(Job(**{**ds, axis: 2})), "deepspeed")
    _, notes = export_plan(resolved_plan(Job(**ds, recompute="full")), "deepspeed")
    assert any(n.startswith("recompute full: set in the model code") for n in notes)
    tt = resolved_plan(Job(model="llama3-8b", gpus=64, sharding="fsdp", global_batch=256, stack="torchtitan",
                           bytes_per_param="megatron"))
    with pytest.raises(PlannerError, match="export torchtitan: bytes_per_param megatron"):
        export_plan(tt, "torchtitan")
    # torchtitan 0.3.0's chunked loss is set in its Python configs, not in the TOML files exported
    ch = resolved_plan(Job(model="llama3-8b", gpus=64, sharding="fsdp", global_batch=256, stack="torchtitan",
                           chunked_loss=True))
    with pytest.raises(PlannerError, match="export torchtitan: chunked_loss"):
        export_plan(ch, "torchtitan")
    # HSDP on Megatron is Megatron-FSDP with optimizer instances (stack_db megatron runs.sharding)
    hsdp = resolved_plan(Job(model="llama3-8b", gpus=64, sharding="hsdp", shard_group=8, global_batch=256))
    text, notes = export_plan(hsdp, "megatron")
    assert hsdp["sharding_mode"] == "megatron_fsdp_hsdp" and notes == []
    assert "--use-megatron-fsdp " in text and "--num-distributed-optimizer-instances 8 " in text


def test_export_cli(cli, tmp_path):
    out = tmp_path / "run.toml"
    # a Megatron script exported to torchtitan: its plan was priced on megatron with the distributed
    # optimizer, which torchtitan does not have, so the export refuses and says how to re-price it
    r = cli("export", "--format", "torchtitan", SH, "--output", out)
    assert_one_error_lines(r, "export torchtitan: the plan was priced on stack megatron, not torchtitan")
    assert "hint: price it on that stack first (--stack torchtitan), then export" in r.stderr
    assert not out.exists()
    # flags beat the file's values: on torchtitan, with FSDP (the file's mode is not kept, noted)
    r = cli("export", "--format", "torchtitan", SH, "--output", out, "--stack", "torchtitan", "--sharding", "fsdp")
    assert r.exit_code == 0, r.stderr
    assert "stack=torchtitan: the command line replaces the file's megatron" in r.stderr
    assert "sharding_mode: the file's distributed_optimizer is not kept" in r.stderr
    data = tomllib.loads(out.read_text())
    assert data["parallelism"]["tensor_parallel_degree"] == 2 and data["training"]["global_batch_size"] == 128
    assert data["parallelism"]["data_parallel_shard_degree"] == 4 and data["parallelism"]["fsdp_reshard_after_forward"] == "default"
    assert _tt_export_warnings(r.stderr) == [ROPE_NOTE_8B]  # nothing inexpressible but the flavor's RoPE scaling
    r = cli("export", "--format", "tensorflow", "--model", "llama3-8b", "--gpus", 8)
    assert r.exit_code == 2 and "valid: torchtitan, megatron, deepspeed" in r.stderr


# the torchtitan export's one note on llama3-8b (Llama 3: plain RoPE): the 8B flavor scales RoPE as Llama 3.1
ROPE_NOTE_8B = ("model llama3-8b: rope_scaling none, but torchtitan's llama3 8B flavor always applies Llama 3.1's "
                "(factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192; no setting "
                "turns it off): the run trains those rotary frequencies, at the same cost")


def _tt_export_warnings(stderr: str) -> list[str]:
    """The export's notes on stderr ('warning: export torchtitan: ...' lines), each without its prefix."""
    return [line.split("export torchtitan: ", 1)[1] for line in stderr.splitlines() if "export torchtitan: " in line]


def test_fit_export_top_row(cli, tmp_path):
    args = ["fit", "--model", "llama3-8b", "--gpus", 8, "--stack", "torchtitan", "--tp", "1,2", "--pp", 1,
            "--sharding", "fsdp", "--rank-orders", "tp-cp-dp-pp"]
    top = _json.loads(cli(*args, "--format", "json").stdout)[0]["plan"]
    r = cli(*args, "--export", "torchtitan")
    assert r.exit_code == 0, r.stderr
    assert "exporting row 1" in r.stderr
    assert _tt_export_warnings(r.stderr) == [ROPE_NOTE_8B]  # nothing inexpressible but the flavor's RoPE scaling
    data = tomllib.loads(r.stdout)
    assert data["parallelism"]["tensor_parallel_degree"] == top["tp"]
    assert data["parallelism"]["data_parallel_shard_degree"] == top["dp"]
    assert data["training"]["local_batch_size"] == top["micro_batch"]
    assert data["activation_checkpoint"]["mode"] == top["recompute"]
    p = tmp_path / "top.toml"
    p.write_text(r.stdout)
    back = resolved_plan(Job.model_validate(load_trainer_config(p).job))
    assert {k: back[k] for k in PLAN_KEYS if k != "tokens"} == {k: top[k] for k in PLAN_KEYS if k != "tokens"}


def test_megatron_ffn_default_from_swiglu(tmp_path):
    # no --ffn-hidden-size: Megatron's default with --swiglu is int(8h/3 / 64) x 64; for h = 4096
    # that is 10,880, not Llama 3 8B's 14,336, so --model llama3-8b contradicts it
    p = tmp_path / "args.txt"
    p.write_text("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
                 "--num-query-groups 8 --swiglu --micro-batch-size 1\n")
    cfg = load_trainer_config(p, gpus=8, model="llama3-8b")  # --model wins, and the note names the contradiction
    assert any("--ffn-hidden-size (default from --hidden-size and --swiglu) 10,880 contradicts --model llama3-8b "
               "(ffn_hidden_size = 14,336)" in a for a in cfg.assumed)
    # without --model no catalog model has that shape, so the reader builds the model the flags
    # define (megatron_model.py), which needs the sequence length these flags leave out
    with pytest.raises(PlannerError, match=r"neither --max-position-embeddings nor --seq-length"):
        load_trainer_config(p, gpus=8)


def test_export_from_fit_row(cli, tmp_path):
    r = cli("fit", "--model", "llama3-8b", "--gpus", 16, "--pp", 1, "--sharding", "zero1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = _json.loads(r.stdout)
    saved = tmp_path / "fit.json"
    saved.write_text(r.stdout)
    r = cli("export", "--format", "megatron", "--from-fit", saved, "--row", 2)
    assert r.exit_code == 0, r.stderr
    p = rows[1]["plan"]
    assert f"--tensor-model-parallel-size {p['tp']} " in r.stdout and f"--micro-batch-size {p['micro_batch']} " in r.stdout
    assert "--use-distributed-optimizer" in r.stdout
    script = tmp_path / "row2.sh"
    script.write_text(r.stdout)
    back = resolved_plan(Job.model_validate(load_trainer_config(script).job))
    # pp 1: the row's order (named tp-cp-pp-dp, the lowest code of its class) is Megatron's default
    # one, so no --use-tp-pp-dp-mapping is written and the plan reads back with Megatron's name for it
    assert p["rank_order"] == "tp-cp-pp-dp" and "--use-tp-pp-dp-mapping" not in r.stdout
    assert back["rank_order"] == "tp-cp-dp-pp"
    _assert_same_plan(back, p)


# ------------------------------------------------------------------ expert parallelism (issue 15)
def test_round_trip_megatron_with_expert_parallelism(tmp_path):
    """Mixtral 8x7B with EP 8 on 64 GPUs: the Megatron export names the experts, top-k, expert
    width and --expert-model-parallel-size; read back without --model, the shape flags find
    the one catalog MoE model with 8 experts of that shape, and the plan (ep included) is the
    same."""
    plan, text, notes = _round_trip(tmp_path, "megatron", ".sh", {}, stack="megatron", model="mixtral-8x7b", gpus=64,
                                    tp=2, ep=8, sharding="zero1", global_batch=256, rank_order="tp-cp-dp-pp")
    assert plan["ep"] == 8
    assert "--expert-model-parallel-size 8 " in text and "--num-experts 8 " in text and "--moe-router-topk 2 " in text
    back = load_trainer_config(tmp_path / "exported.sh")
    assert back.job["model"] == "mixtral-8x7b" and back.job["ep"] == 8


def test_torchtitan_expert_parallel_degree_and_deepspeed_cannot_express_ep(tmp_path):
    # qwen3-30b-a3b with torchtitan's expert bias: the qwen3 30B-A3B flavor (mixtral has no torchtitan flavor)
    qwen = str(Path(__file__).parent / "data" / "torchtitan_flavors" / "qwen3-30b-a3b-torchtitan.yaml")
    plan = resolved_plan(Job(model=qwen, gpus=64, tp=2, ep=8, sharding="fsdp", global_batch=256,
                             stack="torchtitan", rank_order="tp-cp-dp-pp"))
    text, _ = export_plan(plan, "torchtitan")
    assert tomllib.loads(text)["parallelism"]["expert_parallel_degree"] == 8
    p = tmp_path / "moe.toml"
    p.write_text(text)
    assert load_trainer_config(p, model=qwen).job["ep"] == 8
    with pytest.raises(PlannerError, match="export deepspeed: the plan was priced on stack torchtitan"):
        export_plan(plan, "deepspeed")
    ds = resolved_plan(Job(model="mixtral-8x7b", gpus=64, ep=8, sharding="zero1", global_batch=256, stack="megatron-deepspeed"))
    with pytest.raises(PlannerError, match="export deepspeed: ep 8: a DeepSpeed JSON has no EP"):
        export_plan(ds, "deepspeed")


# ------------------------------------------------------------------ issue 22: NVIDIA's scripts, ZeRO-3 JSON
def test_check_nvidia_gpt3_175b_script_on_128_gpus(cli):
    """The script launches one node of 8 (its comments say so); --gpus 128 replaces that, with a
    note. Its quoted --step-batch-size-schedule is one value (not five stray words), read as the
    job's batch ramp (tests/test_batch_ramp.py), and the note says Megatron @d98e8a64 refuses it
    beside --global-batch-size, which equals its last batch."""
    r = cli("check", GPT3_SH, "--gpus", 128)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"PASS {GPT3_SH}: gpt3-175b on 128 x h100-sxm: ")
    assert "gpus=128: --gpus replaces the file's torchrun --nproc_per_node x --nnodes = 8" in r.stderr
    assert "not modelled" not in r.stderr  # (it was: '--step-batch-size-schedule=0:16 ... (a batch-size ramp ...')
    assert "a word that is no flag's value" not in r.stderr
    assert "global_batch=1536: --global-batch-size beside --step-batch-size-schedule" in r.stderr
    cfg = load_trainer_config(GPT3_SH, gpus=128)
    assert cfg.job["global_batch"] == 1536 and cfg.job["micro_batch"] == 1
    assert [p["global_batch"] for p in cfg.job["batch_size_schedule"]] == [16, 320, 624, 928, 1232, 1536]
    assert cfg.job["attention"] == "flash"  # --attention-backend auto: TE's fused attention (modelled)


def test_step_batch_size_schedule_gives_the_batch_without_global_batch_size(tmp_path):
    p = _variant(tmp_path, GPT3_SH, "    --global-batch-size 1536\n", "")
    cfg = load_trainer_config(p, gpus=128)
    assert cfg.job["global_batch"] == 1536
    assert "global_batch=1536: the last batch of --step-batch-size-schedule" in cfg.assumed


def test_nvidia_llama3_8b_fp8_script_lists_what_changes_cost_as_not_modelled(cli):
    """Flags that change memory or time are modelled or listed as not modelled (with what they
    change), never as ignored; ignored flags say why they cannot change the plan's cost."""
    cfg = load_trainer_config(FP8_SH)
    j = cfg.job
    # the script's --rotary-base 1000000 is not Llama 3's 500,000 (Llama 3 Table 3; issue 22): the flags' own model,
    # llama3-8b's shape at base 1e6 (the same cost: the rotary base is no priced term), the mismatch named
    assert (j["gpus"], j["precision"]) == (8, "fp8") and j["model"] != "llama3-8b"
    assert any("the one catalog model of its core shape, llama3-8b, differs (--rotary-base 1000000.0 contradicts "
               "--model llama3-8b (rope_theta = 500000.0))" in a for a in cfg.assumed)
    from planner.catalog import load_model

    flags_model, zoo = load_model(j["model"]).model_dump(exclude_none=True), load_model("llama3-8b")
    assert flags_model["rope_theta"] == 1e6
    assert {k: flags_model[k] for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                                         "num_kv_heads", "vocab_size")} == \
        dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8,
             vocab_size=128256)
    assert zoo.rope_theta == 5e5
    # --grad-reduce-in-bf16: a bf16 gradient buffer, 2 + 2 + 4 + 8 bytes a parameter (modelled)
    assert j["bytes_per_param"] == {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}
    assert j["attention"] == "flash"  # --attention-backend fused (modelled)
    nm, ig = "; ".join(cfg.not_modelled), "; ".join(cfg.ignored)
    assert "--manual-gc=true" in nm and "--manual-gc=true" not in ig
    # read into the job (no priced figure moves: memory.py [13]), neither listed
    assert j["empty_unused_memory_level"] == 1 and "--empty-unused-memory-level" not in nm + ig
    assert j["cross_entropy_fusion"] is True and "--cross-entropy-loss-fusion" not in nm + ig  # priced
    # fp8 weights are read and priced (memory.py [11]): 1-byte weight matrices beside their transposes
    assert j["fp8_param_gather"] is True and not any("--fp8-param-gather" in u for u in cfg.unmodelled)
    assert "--fp8-param-gather" not in ig + nm
    assert "--apply-layernorm-1p=true (the norm's weight read as 1 + w (zero-centred gamma): numerics only" in ig
    assert "rotary-base" not in ig  # read: the model's rope_theta (above)
    assert "--rotary-percent=1.0 (RoPE on every channel, as priced)" in ig
    assert "--lr=0.00015" in ig and "--lr=0.00015" not in nm
    r = cli("check", FP8_SH)
    assert r.stdout.startswith(f"{'PASS' if r.exit_code == 0 else 'FAIL'} {FP8_SH}: train_llama3_8b_h100_fp8.sh on 8 x h100-sxm: ")  # the flags' model (--rotary-base 1e6)
    assert "not modelled (they change memory or time; the plan is priced without them):" in r.stderr


def test_nvidia_llama3_8b_fp8_script_as_written_cp1_is_refused_on_8_h100(cli):
    """NVIDIA's script as written (CP_SIZE=1: TP 1 PP 1 CP 1 DP 8, seq 8192, MBS 1, no recompute) does not
    fit an 80 GB H100, and no term is over-counted (issue 21; docs/memory_mechanisms.md (ab), each term from
    Megatron-LM @d98e8a64 and Transformer Engine @4329ff84). Per GPU, h 4,096, KV width k d 1,024, f 14,336,
    V 128,256, T 8,192 tokens, 32 layers, P 8,030,261,248 (the linears' 6,979,321,856, the embedding and
    output layer 2 x 525,336,576, the norms 266,240):
    - weights: the linears' 1-byte Float8Tensor data (--fp8-param-gather: uint8 param buffer) + the rest in bf16;
    - their transposes, 1 B each: on sm 9.0 is_non_tn_fp8_gemm_supported() is False, so quantize_weight's
      update_usage(columnwise_usage=True) and post_all_gather_processing create Float8Tensor._transpose, which
      only FSDP2's clear_columnwise_cache frees: held all step;
    - bf16 gradient buffer (--grad-reduce-in-bf16), fp32 master + Adam m, v over DP 8 (distributed optimizer);
    - per layer and token 11 h + 4 k d + 5 f + 128 = 120,960 B: the two norm inputs TE's LayerNormLinear saves (2 h
      each), its fp8 norm outputs kept column-wise only (h each), q (2 h) and contiguous k, v (2 x 2 k d: v is
      a split view TE's get_qkv_layout copies), the fused attention's bf16 output (2 h) beside the projection's
      fp8 input (h), the SwiGLU's bf16 input (4 f), fc2's fp8 input (f); and the fused attention's fp32 softmax
      statistics, 4 B x 32 heads = 128 B (planner/layers/attention.py [ls]): 120,960 B;
    - the output layer: the final norm's input and its output (2 h + 2 h) and 10 B a logit (bf16 logits, the
      fp32 softmax, the compiled calculate_gradients' fp32 buffer: --cross-entropy-loss-fusion);
    - TE's cached dummy weight gradients (one bf16 tensor per weight shape, the output layer's included), the
      RoPE table (fp32 seq x 128), two torch cuBLAS workspaces and TE's (32 MiB, 32 MiB + 1 KiB), 1 GiB outside
      the allocator.
    Allocated alone, 88.11 GB = 82.06 GiB, exceeds the 79.09 GiB CUDA reports: it is refused at headroom 0
    too. NVIDIA's published run is CP 2 (the next test)."""
    h, kd, f, V, T, L, P = 4096, 1024, 14336, 128256, 8192, 32, 8_030_261_248
    linears = L * (6144 * h + h * h + 2 * f * h + h * f)
    assert linears == 6_979_321_856 and P - linears == 2 * V * h + (2 * L + 1) * h
    dummies = 2 * (6144 * h + h * h + 2 * f * h + h * f + V * h)
    hand = {"weights": linears + 2 * (P - linears), "quantized_weights": linears, "gradients": 2 * P,
            "master_weights": 4 * P // 8, "adam": 8 * P // 8,
            "layer_activations": L * T * (11 * h + 4 * kd + 5 * f + 4 * 32),
            "output_activations": T * (2 * h + 2 * h + (2 + 4 + 4) * V),
            "dummy_wgrads": dummies, "model_buffers": 4 * T * 128,
            "workspaces": 2 * 32 * 2**20 + 32 * 2**20 + 1024, "reserve": 2**30,
            # NCCL's NVLS buffers of the DP group (8 ranks in the node; memory.py [nv]): 16 x 2 x 1 MiB x 8 + 2 MiB
            "nvls_buffers": 258 * 2**20}
    assert 11 * h + 4 * kd + 5 * f + 4 * 32 == 120_960 and hand["layer_activations"] == 31_708_938_240
    assert hand["output_activations"] == 10_640_949_248 and dummies == 1_486_880_768
    out = _json.loads(cli("explain", FP8_SH, "--format", "json").stdout)
    mem, t = out["memory"], out["memory"]["terms"]
    assert {k: t[k] for k in hand} == hand
    assert all(v == 0 for k, v in t.items() if k not in hand)  # no other term (recompute buffer, pools, slack) priced
    assert mem["total_bytes"] == sum(hand.values()) == 89_181_805_568 + 258 * 2**20
    assert mem["allocated_bytes"] == mem["total_bytes"] - 2**30 - 258 * 2**20 == 88_108_063_744
    assert mem["capacity_bytes"] == pytest.approx(79.09 * 2**30, rel=1e-12)  # hardware_db hbm_visible_GiB
    assert mem["fits"] is False and mem["allocated_bytes"] > mem["capacity_bytes"]
    assert mem["usable_bytes"] == pytest.approx(0.9 * 79.09 * 2**30, rel=1e-12)
    r = cli("check", FP8_SH)
    assert r.exit_code == 1
    assert r.stdout.startswith(f"FAIL {FP8_SH}: ")  # the flags' model (--rotary-base 1000000: not llama3-8b)
    assert " on 8 x h100-sxm: 83.3 GiB of 71.2 GiB usable " in r.stdout.splitlines()[0]  # 83.1 before NVLS's 258 MiB
    assert "exceeds the usable 71.2 GiB by 12.1 GiB" in r.stdout
    r = cli("check", FP8_SH, "--headroom", 0)  # the whole HBM: still over, by 4.2 GiB (4.0 before NVLS's 258 MiB)
    assert r.exit_code == 1 and "exceeds the usable 79.1 GiB by 4.2 GiB" in r.stdout


def test_nvidia_llama3_8b_fp8_script_at_its_published_cp2_fits_on_8_h100(cli):
    """NVIDIA's examples/llama/README.md (Megatron-LM @d98e8a64) reports the 8B fp8 run on 8
    H100s at TP 1 PP 1 CP 2 (13,812 tokens/s/GPU; 'Default parallelism strategy: ... Context
    Parallel: 2'), while the script sets CP_SIZE=1. At CP 2 it passes: per GPU 1-byte weight
    matrices 6,979,321,856 B + 2-byte embedding, output layer and norms 2 x 1,050,939,392 B, their
    transposes 6,979,321,856 B, bf16 gradients 2 x 8,030,261,248 B, master and Adam 12 x
    8,030,261,248 / 8 B; the activations and logits of 4,096 tokens; and TE's cached dummy weight gradients
    (memory.py [dw], fused accumulation: Megatron's default), 2 B x (QKV 6,144 x 4,096 + 4,096^2 + 28,672 x 4,096
    + 4,096 x 14,336 + the output layer 128,256 x 4,096)."""
    import json as j

    r = cli("check", FP8_SH, "--cp", 2)
    assert r.exit_code == 0, r.stdout + r.stderr
    out = j.loads(cli("explain", FP8_SH, "--cp", 2, "--format", "json").stdout)
    t = out["memory"]["terms"]
    assert t["weights"] == 6_979_321_856 + 2 * 1_050_939_392
    assert t["quantized_weights"] == 6_979_321_856
    assert t["gradients"] == 2 * 8_030_261_248
    assert t["master_weights"] + t["adam"] == pytest.approx(12 * 8_030_261_248 / 8, rel=1e-12)
    assert t["dummy_wgrads"] == 2 * (6144 * 4096 + 4096**2 + 28672 * 4096 + 4096 * 14336 + 128256 * 4096) == 1_486_880_768
    assert 61 * 2**30 < out["memory"]["total_bytes"] - t["dummy_wgrads"] < 63 * 2**30


def test_check_offers_nvidia_cp2_for_the_fp8_script(cli):
    """Issue 22: the script as written (CP_SIZE=1) is refused at 83.0 GiB; NVIDIA's own remedy,
    their published CP 2 (examples/llama/README.md), is among the checked fixes, as `explain
    --cp 2` prices it (63.7 GiB with the dp x cp = 8 group's 258 MiB of NVLS buffers, 63.5 before them: the activations and logits of 4,096 tokens a GPU instead of
    8,192, the model states unchanged, the distributed optimizer sharding over dp x cp = 8 either
    way; the previous test derives its terms), dp 8 -> 4, spelled in Megatron's flag and ranked
    by step time between Megatron-FSDP's ZeRO-2 (9.25 s) and TP 2 with sequence parallelism (10.0 s)."""
    import json as j

    r = cli("check", FP8_SH, "--format", "json")
    assert r.exit_code == 1
    [res] = j.loads(r.stdout)
    sugg = res["suggestions"]
    [cp] = [s for s in sugg if s["changes"] == {"cp": 2}]
    assert cp["description"] == ("CP 1 -> 2 (DP 8 -> 4) [megatron: --context-parallel-size 2; num-microbatches 16 -> 32 "
                                 "(Megatron derives it: --global-batch-size / (--micro-batch-size x dp); no flag)]")
    at2 = j.loads(cli("explain", FP8_SH, "--cp", 2, "--format", "json").stdout)
    assert cp["total_bytes"] == at2["memory"]["total_bytes"] and cp["step_s"] == at2["time"]["step_s"]
    t1, t2 = res["memory"]["terms"], at2["memory"]["terms"]
    assert t2["layer_activations"] == t1["layer_activations"] / 2 and t2["output_activations"] == t1["output_activations"] / 2
    assert all(t2[k] == t1[k] for k in ("weights", "quantized_weights", "gradients", "master_weights", "adam"))
    # 10.04 s before delayed scaling's amax all-reduces over TP x DP x CP (step.py [34]: 32 micro-batches x 2 over 8 ranks)
    assert f"{cp['total_bytes'] / 2**30:.1f}" == "63.7" and f"{cp['step_s']:.2f}" == "10.05"
    order = [s["description"].split(" [")[0] for s in sugg]
    assert order.index("sharding zero1 -> Megatron-FSDP optim_grads") < order.index("CP 1 -> 2 (DP 8 -> 4)") < order.index("TP 1 -> 2 with sequence parallelism (DP 8 -> 4)")
    assert [s["step_s"] for s in sugg] == sorted(s["step_s"] for s in sugg)
    text = cli("check", FP8_SH).stdout
    assert ("CP 1 -> 2 (DP 8 -> 4) [megatron: --context-parallel-size 2; num-microbatches 16 -> 32 (Megatron derives it: "
            "--global-batch-size / (--micro-batch-size x dp); no flag)]: 63.7 GiB (81% of HBM), step 10 s, MFU 40.3%") in text


def test_check_tp_keeps_the_fp8_scripts_sequence_parallelism(cli):
    """The fp8 script states --sequence-parallel at TP_SIZE=1 ("Always enable sequence parallelism with
    TP_SIZE=2"); Megatron turns it off at tp 1 only (arguments.py @d98e8a64 l. 1433-1439), so at TP 2 the
    script runs it. The TP 1 -> 2 suggestion is checked with it on, as `explain --tp 2 --sequence-parallel`
    prices it, and its spelling keeps the flag (no setting: the script states it). With sequence
    parallelism the norms' and dropout's inputs are split over the 2 TP ranks, so TP 2 saves 3.0 GiB more
    (47.9 against 50.9 GiB without it, 47.7 and 50.7 before the DP group's 130 MiB of NVLS buffers) and its step is 10.04 s against 10.29 s. --no-sequence-parallel on
    the command line checks TP 2 without it and says to drop the flag."""
    import json as j

    [res] = j.loads(cli("check", FP8_SH, "--format", "json").stdout)
    assert res["plan"]["sequence_parallel"] is False  # the script at tp 1, as Megatron runs it
    [tp] = [s for s in res["suggestions"] if "tp" in s["changes"]]
    assert tp["changes"] == {"tp": 2, "sequence_parallel": True} and tp["plan"]["sequence_parallel"] is True
    sp = j.loads(cli("explain", FP8_SH, "--tp", 2, "--sequence-parallel", "--format", "json").stdout)
    assert tp["total_bytes"] == sp["memory"]["total_bytes"] and tp["step_s"] == sp["time"]["step_s"]
    no_sp = j.loads(cli("explain", FP8_SH, "--tp", 2, "--no-sequence-parallel", "--format", "json").stdout)
    assert no_sp["plan"]["sequence_parallel"] is False and sp["memory"]["total_bytes"] < no_sp["memory"]["total_bytes"]
    assert f"{tp['total_bytes'] / 2**30:.1f}" == "47.9" and f"{no_sp['memory']['total_bytes'] / 2**30:.1f}" == "50.9"
    assert tp["description"] == ("TP 1 -> 2 with sequence parallelism (DP 8 -> 4) [megatron: --tensor-model-parallel-size 2; "
                                 "--sequence-parallel stays (Megatron runs it at tp 2; off at tp 1 only: arguments.py); "
                                 "num-microbatches 16 -> 32 (Megatron derives it: --global-batch-size / (--micro-batch-size x dp); "
                                 "no flag)]")
    assert tp["trainer_settings"] == [{"key": "--tensor-model-parallel-size", "value": 2}]
    [off] = j.loads(cli("check", FP8_SH, "--no-sequence-parallel", "--format", "json").stdout)
    [tp_off] = [s for s in off["suggestions"] if "tp" in s["changes"]]
    assert tp_off["changes"] == {"tp": 2} and tp_off["plan"]["sequence_parallel"] is False
    assert tp_off["total_bytes"] == no_sp["memory"]["total_bytes"] and tp_off["step_s"] == no_sp["time"]["step_s"]
    assert {"key": "--sequence-parallel", "value": None} in tp_off["trainer_settings"]
    assert "drop --sequence-parallel (the plan checked runs TP without it)" in tp_off["description"]


def test_command_line_tp_runs_the_fp8_scripts_sequence_parallelism(cli):
    """`--tp 2` on the fp8 script (TP_SIZE=1 with --sequence-parallel): Megatron turns the flag off at tp 1
    only (arguments.py @d98e8a64 l. 1433-1439), so the script run at TP 2 runs SP, and explain prices it
    so, with a note naming the rule: equal to `--tp 2 --sequence-parallel` (47.9 GiB, 10.19 s: 10.18 s before the
    embedding's, output layer's and loss's TP collectives were priced, step.py [36]; 10.16 s before the
    backward's wgrad input re-gathers were priced, step.py [35], 10.34 s before its fp8 delayed TP all-gathers moved
    at 1 B an element, step.py [33]; without SP 50.9 GiB, 10.60 s, its all-reduces bf16: the previous test).
    --no-sequence-parallel on the command line wins."""
    import json as j

    def run(*args):
        r = cli("explain", FP8_SH, *args, "--format", "json")
        assert r.exit_code == 0, r.stderr
        return j.loads(r.stdout), r.stderr

    (tp2, err), (sp, _), (off, err_off) = run("--tp", 2), run("--tp", 2, "--sequence-parallel"), run("--tp", 2, "--no-sequence-parallel")
    assert tp2["plan"]["sequence_parallel"] is True and off["plan"]["sequence_parallel"] is False
    assert tp2["memory"] == sp["memory"] and tp2["time"] == sp["time"]
    assert f"{tp2['memory']['total_bytes'] / 2**30:.1f}" == "47.9" and f"{tp2['time']['step_s']:.2f}" == "10.19"
    assert f"{off['memory']['total_bytes'] / 2**30:.1f}" == "50.9" and f"{off['time']['step_s']:.2f}" == "10.60"
    assert ("sequence_parallel=true: the script's --sequence-parallel at the command line's tp 2 (Megatron keeps it as "
            "the script asks at tp > 1 and turns it off at tp 1 only: arguments.py @d98e8a64 l. 1433-1439") in err
    assert "--sequence-parallel with tp 1 (Megatron turns it off" not in err  # the reader's tp-1 note is replaced
    assert "sequence_parallel=true: the script's" not in err_off
    # check at --tp 2 with 16,384 tokens: without SP the job failed (and every suggestion said "drop
    # --sequence-parallel", TP 2 -> 4 "with sequence parallelism"); the script at TP 2 runs SP and fits
    tok = ("--tp", 2, "--seq-len", 16384)
    assert run(*tok, "--no-sequence-parallel")[0]["memory"]["fits"] is False
    [res] = j.loads(cli("check", FP8_SH, *tok, "--format", "json").stdout)
    at = run(*tok, "--sequence-parallel")[0]
    assert res["verdict"] == "pass" and res["plan"]["sequence_parallel"] is True
    assert res["memory"]["total_bytes"] == at["memory"]["total_bytes"] and res["time"]["step_s"] == at["time"]["step_s"]
    # with 8 GiB held back it fails at TP 2 with SP: the TP rung is 2 -> 4 with SP already on, nothing dropped
    [res] = j.loads(cli("check", FP8_SH, *tok, "--reserve-gib", 8, "--format", "json").stdout)
    assert res["verdict"] == "fail" and res["plan"]["sequence_parallel"] is True
    [tp] = [s for s in res["suggestions"] if "tp" in s["changes"]]
    assert tp["changes"] == {"tp": 4} and tp["description"].startswith("TP 2 -> 4 (DP 4 -> 2) [megatron: --tensor-model-parallel-size 4;")
    assert all(s["plan"]["sequence_parallel"] is True and "sequence" not in s["description"] for s in res["suggestions"])


def test_command_line_tp_1_turns_a_scripts_sequence_parallelism_off(cli):
    """train_llama3_8b.sh (TP 2, --sequence-parallel) at `--tp 1`: Megatron turns SP off at tp 1
    (arguments.py @d98e8a64 l. 1433-1439) and starts; the planner prices it so, with a note, as
    `--tp 1 --no-sequence-parallel` (before: refused, 'sequence_parallel needs tp > 1')."""
    import json as j

    r = cli("explain", SH, "--tp", 1, "--format", "json")
    assert r.exit_code == 0, r.stderr
    no = j.loads(cli("explain", SH, "--tp", 1, "--no-sequence-parallel", "--format", "json").stdout)
    d = j.loads(r.stdout)
    assert d["plan"]["sequence_parallel"] is False and d["memory"] == no["memory"] and d["time"] == no["time"]
    assert ("sequence_parallel=false: the script's --sequence-parallel at the command line's tp 1 (Megatron turns it off "
            "at tp 1: arguments.py @d98e8a64 l. 1433-1439)") in r.stderr



def test_reader_turns_sequence_parallelism_off_at_tp_1_as_megatron_does():
    """The fp8 script states --sequence-parallel at TP_SIZE=1: Megatron-LM's validate_args turns it off there with a
    warning and starts ('Disabling sequence parallelism because tensor model parallelism is disabled', arguments.py
    @d98e8a64 l. 1433-1439), so the reader reads it off with a note naming that rule (Megatron-Bridge refuses the
    same pair instead: tests/test_bridge_launch.py)."""
    from planner.trainers.megatron import SP_OFF_AT_TP1

    cfg = load_trainer_config(FP8_SH)
    assert (cfg.job["tp"], cfg.job["sequence_parallel"]) == (1, False)
    assert "--sequence-parallel" in cfg.stated  # the script asks for it
    assert SP_OFF_AT_TP1 in cfg.assumed
    assert SP_OFF_AT_TP1 == ("sequence_parallel=false: --sequence-parallel with tp 1 (Megatron turns it off: "
                             "validate_args, arguments.py @d98e8a64 l. 1433-1439)")

TPO_SH = DATA / "train_llama3_8b_tp1_tp_comm_overlap.sh"  # train_llama3_8b.sh at TP_SIZE=1 with --tp-comm-overlap


def test_tp_comm_overlap_at_tp_1_is_refused_as_megatron_asserts(cli):
    """--tp-comm-overlap at TP 1 (with --sequence-parallel): Megatron's validate_args turns SP off at tp 1
    (arguments.py @d98e8a64 l. 1433-1439), then asserts it under --tp-comm-overlap (l. 1441-1442), so the
    script does not start: refused in Megatron's words (before: resolve's 'tp_comm_overlap needs sequence
    parallelism with tp > 1', in the job's). At `--tp 2` the script runs SP and the overlap: the same plan
    as train_llama3_8b.sh (TP 2, SP) with --tp-comm-overlap; `--no-tp-comm-overlap` prices TP 1 without
    it; at --tp 2 --no-sequence-parallel Megatron asserts too."""
    import json as j
    from conftest import assert_one_error

    assert_one_error(cli("explain", TPO_SH), "--tp-comm-overlap at tp 1", "turns --sequence-parallel off at tp 1 "
                     "(l. 1433-1439)", "arguments.py @d98e8a64 l. 1441-1442", "drop --tp-comm-overlap")
    assert_one_error(cli("check", TPO_SH), "--tp-comm-overlap at tp 1")
    assert_one_error(cli("explain", TPO_SH, "--tp", 2, "--no-sequence-parallel"), "--tp-comm-overlap at tp 2",
                     "without --sequence-parallel", "l. 1441-1442")
    at2 = j.loads(cli("explain", TPO_SH, "--tp", 2, "--format", "json").stdout)
    ref = j.loads(cli("explain", SH, "--tp-comm-overlap", "--format", "json").stdout)
    assert at2["plan"]["sequence_parallel"] is True and at2["plan"]["tp_comm_overlap"] is True
    assert at2["memory"] == ref["memory"] and at2["time"] == ref["time"]
    r = cli("explain", TPO_SH, "--no-tp-comm-overlap", "--format", "json")
    assert r.exit_code == 0, r.stderr
    one = j.loads(r.stdout)
    ref1 = j.loads(cli("explain", SH, "--tp", 1, "--format", "json").stdout)
    assert one["plan"]["tp"] == 1 and one["plan"]["tp_comm_overlap"] is False and one["plan"]["sequence_parallel"] is False
    assert one["memory"] == ref1["memory"] and one["time"] == ref1["time"]


def test_check_cp_under_use_tp_pp_dp_mapping_names_the_rank_order(cli, tmp_path):
    """The fp8 script with --use-tp-pp-dp-mapping at PP 2 and 16,384 tokens (86.7 GiB): Megatron
    asserts equal attention and expert dp under the flag with pp > 1 (MEGATRON_TP_PP_DP_MAPPING),
    so CP 2 (dp 2) is refused and not offered; CP 4 leaves dp 1, the default order up to size-1
    axes, and the suggestion says to drop the flag in Megatron's words."""
    p = _variant(tmp_path, FP8_SH, "    --disable-bias-linear \n", "    --disable-bias-linear \n    --use-tp-pp-dp-mapping\n")
    assert load_trainer_config(p).job["rank_order"] == "tp-cp-pp-dp"
    text = cli("check", p, "--pp", 2, "--seq-len", 16384).stdout
    assert ("CP 1 -> 4 (DP 4 -> 1) (rank order tp-cp-pp-dp -> tp-cp-dp-pp) [megatron: --context-parallel-size 4; "
            "rank order tp-cp-dp-pp (default: parallel_state order tp-cp-ep-dp-pp) instead of --use-tp-pp-dp-mapping "
            "(order tp-cp-ep-pp-dp); num-microbatches 32 -> 128 (Megatron derives it: --global-batch-size / "
            "(--micro-batch-size x dp); no flag)]") in text
    assert "CP 1 -> 2" not in text


def test_check_cp_in_torchtitans_keys(cli):
    """torchtitan's Llama 3 8B TOML on 8 H100s at 32,768 tokens (136.2 GiB): CP 4 passes (CP 2 does
    not), checked as `explain --cp 4 --global-batch 8` prices it and spelled as torchtitan's
    [parallelism] context_parallel_degree (job_config.py @e347b1e5e l. 428). check keeps the global batch
    (its suggestion writes global_batch_size = 8); `explain --cp 4` alone runs the file as torchtitan would
    at cp 4, its global_batch_size -1 = local 1 x dp 2 = 2 (torchtitan.read_sections), a quarter of the
    batch: 7.69 s -> 1.93 s per step at the same memory."""
    import json as j

    [res] = j.loads(cli("check", TOML, "--gpus", 8, "--seq-len", 32768, "--format", "json").stdout)
    [cp] = [s for s in res["suggestions"] if "cp" in s["changes"]]
    assert cp["changes"] == {"cp": 4}
    # the preset's global_batch_size -1 is local 1 x dp: at dp 2 it would be 2, so the kept 8 is spelled (spelling.py)
    assert cp["description"] == ("CP 1 -> 4 (DP 8 -> 2) [torchtitan: [parallelism] context_parallel_degree = 4; [parallelism] "
                                 "data_parallel_shard_degree = -1 (the leftover GPUs: 8 -> 2); [training] global_batch_size = 8]")
    at4 = j.loads(cli("explain", TOML, "--gpus", 8, "--seq-len", 32768, "--cp", 4, "--global-batch", 8,
                      "--format", "json").stdout)
    assert cp["total_bytes"] == at4["memory"]["total_bytes"] and cp["step_s"] == at4["time"]["step_s"]
    own = j.loads(cli("explain", TOML, "--gpus", 8, "--seq-len", 32768, "--cp", 4, "--format", "json").stdout)
    assert own["plan"]["global_batch"] == 2 and own["memory"]["total_bytes"] == at4["memory"]["total_bytes"]
    at2 = j.loads(cli("explain", TOML, "--gpus", 8, "--seq-len", 32768, "--cp", 2, "--format", "json").stdout)
    assert at2["memory"]["fits"] is False
    # torchtitan's TP always runs sequence parallelism (TORCHTITAN_SP): the reader leaves it unset at tp 1,
    # resolve's default turns it on at the TP rung, and the change names no sequence_parallel of its own
    assert res["plan"]["sequence_parallel"] is False
    [tp] = [s for s in res["suggestions"] if "tp" in s["changes"]]
    assert tp["changes"] == {"tp": 4} and tp["plan"]["sequence_parallel"] is True
    assert tp["description"].startswith("TP 1 -> 4 (DP 8 -> 2) [torchtitan: [parallelism] tensor_parallel_degree = 4;")


def test_check_deepspeed_zero3_json_with_model_and_seq_len(cli):
    """A ZeRO-3 JSON (no model, GPU count or sequence in it): with --model, --gpus and --seq-len the
    verdict names the model and the GPUs; Llama 3 8B at 8k tokens fits on 8 H100s, at 32k it does
    not and the fixes are spelled for DeepSpeed; Llama 3 70B does not fit on 8."""
    r = cli("check", DS3, "--model", "llama3-8b", "--gpus", 8, "--seq-len", 8192)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"PASS {DS3}: llama3-8b on 8 x h100-sxm: ")
    assert "read as deepspeed" in r.stderr and "stage3_gather_16bit_weights_on_model_save" in r.stderr
    # ZeRO-3's gathering and bucket keys are read (memory.py [z3]), not listed as not modelled
    assert "stage3_prefetch_bucket_size" not in r.stderr and "contiguous_gradients" not in r.stderr
    r = cli("check", DS3, "--model", "llama3-8b", "--gpus", 8, "--seq-len", 8192, "--format", "json")
    out = _json.loads(r.stdout)
    plan = (out[0] if isinstance(out, list) else out)["plan"]
    assert (plan["sharding"], plan["sharding_mode"], plan["seq_len"], plan["micro_batch"]) == ("fsdp", "zero3", 8192, 1)
    # the resolved plan keeps the two that differ from DeepSpeed's defaults (the stack's fsdp.zero3_modules)
    assert plan["deepspeed_zero3"] == {"stage3_prefetch_bucket_size": 500_000_000,
                                       "stage3_param_persistence_threshold": 1_000_000}
    r = cli("check", DS3, "--model", "llama3-8b", "--gpus", 8, "--seq-len", 32768)
    assert r.exit_code == 1 and r.stdout.startswith(f"FAIL {DS3}: llama3-8b on 8 x h100-sxm: ")
    assert ("[deepspeed: cannot be written in a DeepSpeed JSON: it has no key for activation checkpointing (set in the model "
            "code)]") in r.stdout
    r = cli("check", DS3, "--model", "llama3-70b", "--gpus", 8, "--seq-len", 4096)
    assert r.exit_code == 1 and r.stdout.startswith(f"FAIL {DS3}: llama3-70b on 8 x h100-sxm: ")




def test_deepspeed_zero3_keys(tmp_path):
    """The stage-3 keys as DeepSpeed's pp_int reads them (an integer or a whole float, "auto" absent) into
    the job's deepspeed_zero3; the ones absent listed as assumed; a fraction refused (exit 2 from the CLI)."""
    from planner.trainers import deepspeed

    f = tmp_path / "ds.json"
    f.write_text(_json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "reduce_bucket_size": 5e7, "stage3_max_live_parameters": "auto", "stage3_max_reuse_distance": 0,
        "sub_group_size": 1e8}}))
    cfg = deepspeed.read(f, model="gpt3-175b", gpus=8)
    assert cfg.job["deepspeed_zero3"] == {"reduce_bucket_size": 50_000_000, "stage3_max_reuse_distance": 0,
                                          "sub_group_size": 100_000_000}
    assert any(a.startswith("zero_optimization stage3_prefetch_bucket_size, stage3_max_live_parameters, "
                            "stage3_param_persistence_threshold, contiguous_gradients: absent") for a in cfg.assumed)
    f.write_text(_json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "reduce_bucket_size": 0.5}}))
    with pytest.raises(PlannerError, match="reduce_bucket_size = 0.5 is not a whole number"):
        deepspeed.read(f, model="gpt3-175b", gpus=8)


# ------------------------------------------------------------------ a model the Megatron flags define (issue 21)
SMALL_GPT = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
             "--micro-batch-size 4 --global-batch-size 32 --bf16 --vocab-file ${DATA_PATH}/bpe/vocab.json "
             "--merge-file ${DATA_PATH}/bpe/merges.txt")


def _args(tmp_path, text: str, name: str = "run.args") -> Path:
    p = tmp_path / name
    p.write_text(text + "\n")
    return p


def test_megatron_flags_define_the_model(tmp_path):
    """No catalog model has the shape: the flags define it, with Megatron's defaults (4h GeLU
    MLP, LayerNorm, learned positions, biases, dropout 0.1, tied embeddings) and the GPT-2
    vocabulary padded to 128 x tp, written as a content-addressed model YAML."""
    from planner.catalog import load_model
    from planner.params import count_params

    cfg = load_trainer_config(_args(tmp_path, SMALL_GPT + " --tensor-model-parallel-size 2"), gpus=8)
    m = load_model(cfg.job["model"])
    assert Path(cfg.job["model"]).is_file() and Path(cfg.job["model"]).name.startswith("megatron-flags-")
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.kv_heads) == (12, 512, 2048, 8, 8)
    assert m.vocab_size == 50432  # ceil(50257 / 256) x 256 at tp 2
    assert (m.gated_mlp, m.norm, m.position_embedding, m.linear_bias, m.dropout, m.tied_embeddings) == (
        False, "layernorm", "learned", True, True, True)
    assert m.max_seq_len == 1024
    assert count_params(m).total == 50432 * 512 + 1024 * 512 + 12 * (12 * 512 * 512 + 13 * 512) + 2 * 512
    assert any(a.startswith("model=") and "from the Megatron flags (no catalog model has their shape)" in a for a in cfg.assumed)
    assert any("padded to a multiple of 128 (Megatron's default) x tp 2 = 256" in a for a in cfg.assumed)
    assert any(a.startswith("Megatron defaults for what the flags leave out: ffn_hidden_size 2,048 (4h), LayerNorm, "
                            "learned_absolute positions, linear biases, dropout 0.1") for a in cfg.assumed)
    assert not any(i.startswith("--max-position-embeddings") for i in cfg.ignored)  # read: the position table
    again = load_trainer_config(_args(tmp_path, SMALL_GPT + " --tensor-model-parallel-size 2", "copy.args"), gpus=8)
    assert load_model(again.job["model"]).model_dump(exclude={"name", "description", "sources"}) == \
        m.model_dump(exclude={"name", "description", "sources"})
    resolve(Job.model_validate(cfg.job))


def test_megatron_flags_model_vocabulary_rules(tmp_path):
    def vocab(extra, tp=1):
        cfg = load_trainer_config(_args(tmp_path, SMALL_GPT + f" --tensor-model-parallel-size {tp} " + extra), gpus=8)
        from planner.catalog import load_model

        return load_model(cfg.job["model"]).vocab_size, cfg

    assert vocab("")[0] == 50304
    assert vocab("--make-vocab-size-divisible-by 3232")[0] == 51712  # 16 x 3232
    assert vocab("--tokenizer-type NullTokenizer --vocab-size 131073")[0] == 131200
    assert vocab("--tokenizer-type NullTokenizer --vocab-size 131073 --no-pad-vocab-size")[0] == 131073
    assert vocab("--padded-vocab-size 50000")[0] == 50000
    v, cfg = vocab("--tokenizer-type HuggingFaceTokenizer --vocab-size 128256", tp=8)
    assert v == 129024 and any("taken as the size of HuggingFaceTokenizer" in a for a in cfg.assumed)
    with pytest.raises(PlannerError, match="--tokenizer-type HuggingFaceTokenizer: its vocabulary size is in its files") as e:
        vocab("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-8B")
    assert "--vocab-size" in e.value.hint


def test_megatron_flags_model_moe_mla_mtp(tmp_path):
    from planner.catalog import load_model

    base = SMALL_GPT + " --disable-bias-linear --swiglu --normalization RMSNorm --position-embedding-type rope " \
                       "--untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0 "
    moe = ("--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 704 --moe-shared-expert-intermediate-size 1408 "
           "--moe-router-score-function sigmoid --moe-router-enable-expert-bias --expert-model-parallel-size 4 ")
    cfg = load_trainer_config(_args(tmp_path, base + moe + '--moe-layer-freq "([0]*3+[1]*9)" --multi-latent-attention '
                                    "--kv-lora-rank 64 --qk-head-dim 32 --qk-pos-emb-head-dim 16 --v-head-dim 32 --mtp-num-layers 1"),
                              gpus=8)
    m = load_model(cfg.job["model"])
    assert m.ffn_hidden_size == 1344  # int(8h/3 / 64) x 64 with --swiglu
    assert (m.gated_mlp, m.norm, m.position_embedding, m.linear_bias, m.dropout, m.tied_embeddings) == (
        True, "rmsnorm", "rope", False, False, False)
    assert m.moe.model_dump(exclude_defaults=True) == dict(
        num_experts=8, top_k=2, expert_ffn_hidden_size=704, num_shared_experts=1, shared_expert_ffn_hidden_size=1408,
        first_k_dense=3, router="sigmoid", expert_score_bias=True)
    assert m.mla.model_dump() == dict(q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32)
    assert m.mtp_layers == 1 and cfg.job["ep"] == 4
    # an irregular pattern becomes layer kinds
    cfg = load_trainer_config(_args(tmp_path, base + moe + '--moe-layer-freq "[1,0,0]*4"', "b.args"), gpus=8)
    m = load_model(cfg.job["model"])
    assert m.moe.layer_freq == 3 and m.layer_pattern is None  # i % 3 == 0
    cfg = load_trainer_config(_args(tmp_path, base + moe + '--moe-layer-freq "[1,1,0]*4"', "c.args"), gpus=8)
    m = load_model(cfg.job["model"])
    assert m.layer_pattern == ["moe", "moe", "dense"] * 4 and set(m.layer_kinds) == {"dense", "moe"}
    resolve(Job.model_validate(cfg.job))
    with pytest.raises(PlannerError, match=r"--moe-layer-freq lists 8 layers, --num-layers is 12"):
        load_trainer_config(_args(tmp_path, base + moe + '--moe-layer-freq "[1]*8"', "d.args"), gpus=8)
    with pytest.raises(PlannerError, match="not a list expression"):
        load_trainer_config(_args(tmp_path, base + moe + "--moe-layer-freq \"[__import__('os')]\"", "e.args"), gpus=8)


def test_megatron_flags_the_planner_does_not_build_or_price(tmp_path, cli):
    # a hybrid stack's DeepSeek sparse-attention symbol is refused naming it (tests/test_megatron_hybrid.py: the rest;
    # G, Gated DeltaNet, is read there)
    with pytest.raises(PlannerError, match=r"--hybrid-layer-pattern 'MDM-': 'D' is a DeepSeek sparse-attention layer"):
        load_trainer_config(_args(tmp_path, SMALL_GPT + ' --hybrid-layer-pattern "MDM-"'), gpus=8)
    with pytest.raises(PlannerError, match="an encoder-decoder model"):
        load_trainer_config(_args(tmp_path, SMALL_GPT.replace("--num-layers 12", "--encoder-num-layers 12 --decoder-num-layers 12 --tensor-model-parallel-size 1")),
                            gpus=8)
    cfg = load_trainer_config(_args(tmp_path, SMALL_GPT.replace("--bf16", "--fp16") + " --optimizer lion"), gpus=8)
    assert cfg.job["bytes_per_param"] == {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}
    assert any(u.startswith("--optimizer lion") for u in cfg.unmodelled)  # (muon is priced: tests/test_muon.py)
    r = cli("explain", _args(tmp_path, SMALL_GPT.replace("--bf16", "") + " --attention-backend unfused", "fp32.args"), "--gpus", 8)
    assert r.exit_code == 0, r.stderr
    assert "not modelled, priced otherwise: fp32 parameters (neither --bf16 nor --fp16)" in r.stderr
    assert "attention=eager: --attention-backend unfused" in r.stderr and "from the Megatron flags" in r.stderr


def test_megatron_flags_model_explain_and_export_round_trip(tmp_path, cli):
    """explain names the generated model file; export writes its shape as Megatron flags, and
    reading the export back defines the same model and plan."""
    # --expert-tensor-parallel-size 1: Megatron's linear biases (on by default) put biases on the experts, which
    # Megatron-Core runs with expert TP 1 only (startup MEGATRON_MOE_BIAS_ETP)
    p = _args(tmp_path, SMALL_GPT + " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel "
                                    "--use-distributed-optimizer --attention-backend unfused --num-experts 4 --moe-router-topk 2 "
                                    "--moe-shared-expert-intermediate-size 1024 --moe-layer-freq 2 "
                                    "--expert-tensor-parallel-size 1")
    r = cli("explain", p, "--gpus", 8, "--format", "json")
    assert r.exit_code == 0, r.stderr
    plan = _json.loads(r.stdout)["plan"]
    assert Path(plan["model_file"]).name.startswith("megatron-flags-") and plan["attention"] == "eager"
    r = cli("export", "--format", "megatron", p, "--gpus", 8)
    assert r.exit_code == 0, r.stderr
    assert "--moe-shared-expert-intermediate-size 1024 " in r.stdout and "--moe-layer-freq 2 " in r.stdout
    assert "--attention-backend unfused" in r.stdout and "--vocab-size 50432 " in r.stdout
    back = tmp_path / "back.sh"
    back.write_text(r.stdout)
    from planner.catalog import load_model

    a, b = load_model(plan["model_file"]), load_model(load_trainer_config(back).job["model"])
    assert a.model_dump(exclude={"name", "description", "sources"}) == b.model_dump(exclude={"name", "description", "sources"})
    again = resolved_plan(Job.model_validate(load_trainer_config(back).job))
    same = [k for k in PLAN_KEYS if k not in ("tokens", "model")]  # model: the name of the file read
    assert {k: again[k] for k in same} == {k: plan[k] for k in same} and again["model"] == "back.sh"


# ------------------------------------------------------------------ sliding-window layers in Megatron's flags
@pytest.mark.parametrize("model, window_args", [
    # Mistral 7B: every layer slides over 4,096 keys (TE's left 4,095 + the query's own)
    ("mistral-7b", "--window-size 4095,0 "),
    # Gemma 3 27B: layer i (0-based) full iff (i + 1) % 6 == 0 = Megatron's skip frequency 6
    ("gemma3-27b", "--window-size 1023,0 --window-attn-skip-freq 6 "),
    # gpt-oss: the even layers slide over 128, the odd ones are full: skip frequency 2
    ("gpt-oss-20b", "--window-size 127,0 --window-attn-skip-freq 2 "),
])
def test_round_trip_megatron_window_layers(tmp_path, model, window_args):
    """Models of sliding-window and full attention layers export as --window-size /
    --window-attn-skip-freq and read back as the same catalog model and plan."""
    # gpt-oss's experts carry biases: Megatron-Core runs them with expert TP 1 (startup MEGATRON_MOE_BIAS_ETP)
    extra = dict(ep=8, etp=1) if model == "gpt-oss-20b" else {}
    read_kw: dict = {}
    if model == "gemma3-27b":  # Megatron-LM's arguments cannot say Gemma's post-norms (the export refuses them,
        import yaml            # tests/test_norms.py) nor its linear rope scaling of the global layers only (refused,
        # tests/test_export_rope_scalings.py): its windows round-trip on the model without them, given with --model
        from planner.catalog import load_model

        data = load_model(model).model_dump(mode="json", exclude_none=True) | {"post_norms": False}
        data.pop("rope_scaling")
        path = tmp_path / "gemma3-27b-without-post-norms.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        model, read_kw = str(path), {"model": str(path)}
    plan, text, _ = _round_trip(tmp_path, "megatron", ".sh", read_kw, stack="megatron", model=model, gpus=64, tp=2,
                                sharding="zero1", global_batch=256, rank_order="tp-cp-dp-pp", **extra)
    flat = " ".join(text.replace("\\\n", " ").split()) + " "
    assert window_args in flat
    assert load_trainer_config(tmp_path / "exported.sh", **read_kw).job["model"] == model


def test_megatron_window_flags_define_layer_kinds(tmp_path):
    """A shape no catalog model has, with --window-size 511,0 --window-attn-skip-freq 3: layers
    1, 2 (1-indexed) slide over 512 keys, layer 3 is full, repeating: kinds swa / full and the
    3-layer period; a non-causal window and a list of the wrong length are refused."""
    from planner.catalog import load_model
    from planner.errors import PlannerError

    base = ("--num-layers 12 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
            "--micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 ")
    p = tmp_path / "w.args"
    p.write_text(base + "--window-size 511,0 --window-attn-skip-freq 3")
    m = load_model(load_trainer_config(p, gpus=8).job["model"])
    assert m.layer_pattern == ["swa", "swa", "full"]
    assert m.layer_kinds["swa"].mixer.window == 512 and m.layer_kinds["full"].mixer.kind == "global"
    assert m.layer_windows == (512, 512, 0) * 4
    p.write_text(base + "--window-size 511,0 --window-attn-skip-freq \"([1]*3+[0]*1)*3\"")
    assert load_model(load_trainer_config(p, gpus=8).job["model"]).layer_windows == (512, 512, 512, 0) * 3
    for extra, msg in (("--window-size 511,511", "not causal"), ("--window-size 511,0 --window-attn-skip-freq \"[1,0]*3\"",
                                                                 "lists 6 layers"), ("--window-size 5x,0", "pair of whole")):
        p.write_text(base + extra)
        with pytest.raises(PlannerError, match=msg):
            load_trainer_config(p, gpus=8)


def test_torchtitan_cp_rotate_method(tmp_path):
    """[parallelism] context_parallel_rotate_method (torchtitan job_config.py @e347b1e5e l. 446:
    Literal["allgather", "alltoall"], default allgather) never reaches training at @e347b1e5e: train.py
    does not call set_rotate_method, only components/validate.py l. 204-214 does (planner/cp_rotate.py [4];
    stack_db torchtitan runs.cp_rotate_method_trains false). So the catalog stack lists it as ignored
    (validation off) or not modelled (validation on: the validator sets torch's global for the steps after
    it) and prices torch's default allgather; a stack whose training takes it (torchtitan before 1e8f9acd1,
    tests/data/stacks/torchtitan-rotate-trains.yaml) reads it as the job field cp_rotate_method. Any other
    value is refused as torchtitan refuses it; without CP it is listed as ignored."""
    p = _variant(tmp_path, TOML, "context_parallel_degree = 1",
                 'context_parallel_degree = 2\ncontext_parallel_rotate_method = "alltoall"')
    cfg = load_trainer_config(p, gpus=64)
    assert cfg.job["cp"] == 2 and "cp_rotate_method" not in cfg.job
    line = [i for i in cfg.ignored if i.startswith("parallelism.context_parallel_rotate_method=alltoall")]
    assert len(line) == 1 and "components/validate.py l. 204-214" in line[0] and "allgather" in line[0]
    assert not any("rotate" in n for n in cfg.not_modelled)
    settings, _, _ = resolve(Job.model_validate(cfg.job))
    assert settings.stack.memory.cp_ring_backward == "allgather"
    assert (settings.stack.context_parallel.fwd_kv, settings.stack.context_parallel.bwd_kv) != ("ring", "ring")
    # with validation on, training switches after the first validation pass: not modelled, priced as allgather
    val = tmp_path / "val.toml"
    val.write_text(p.read_text() + "\n[validation]\nenable = true\n")
    cfg = load_trainer_config(val, gpus=64)
    assert "cp_rotate_method" not in cfg.job and not any("rotate" in i for i in cfg.ignored)
    assert [n for n in cfg.not_modelled if "rotate" in n][0].startswith("parallelism.context_parallel_rotate_method=alltoall")
    # a stack whose training takes it: the job field, the ring priced
    cfg = load_trainer_config(p, gpus=64, stack=TT_ROTATE_TRAINS)
    assert cfg.job["cp_rotate_method"] == "alltoall"
    settings, _, _ = resolve(Job.model_validate({**cfg.job, "stack": TT_ROTATE_TRAINS}))
    assert settings.stack.memory.cp_ring_backward == "alltoall"
    assert (settings.stack.context_parallel.fwd_kv, settings.stack.context_parallel.bwd_kv) == ("ring", "ring")
    bad = _variant(tmp_path, TOML, "context_parallel_degree = 1",
                   'context_parallel_degree = 2\ncontext_parallel_rotate_method = "ring"', name="bad.toml")
    with pytest.raises(PlannerError, match=r"context_parallel_rotate_method 'ring' is not one torchtitan accepts") as e:
        load_trainer_config(bad, gpus=64)
    assert "allgather, alltoall" in e.value.hint
    one = _variant(tmp_path, TOML, "context_parallel_degree = 1",
                   'context_parallel_degree = 1\ncontext_parallel_rotate_method = "alltoall"', name="one.toml")
    cfg = load_trainer_config(one, gpus=64)
    assert "cp_rotate_method" not in cfg.job
    assert any(i.startswith("parallelism.context_parallel_rotate_method=alltoall") for i in cfg.ignored)
    # a stack whose CP is not torch's ring attention has no rotate method
    with pytest.raises(PlannerError, match="cp_rotate_method is set but stack megatron"):
        resolve(Job(model="llama3-8b", gpus=8, cp=2, cp_rotate_method="alltoall", stack="megatron"))


def test_torchtitan_early_step_in_backward_is_not_ignored(tmp_path):
    """[optimizer] early_step_in_backward = true steps the optimizer inside the backward and frees
    each gradient there (torchtitan job_config.py @e347b1e5e): it changes memory, so it is read into
    the job field early_step_in_backward (priced: memory.py [es]), never listed as an ignored
    hyper-parameter; false (the default) changes nothing."""
    for value in ("true", "false"):
        p = _variant(tmp_path, TOML, "[optimizer]", f"[optimizer]\nearly_step_in_backward = {value}", name=f"{value}.toml")
        cfg = load_trainer_config(p, gpus=64)
        assert not [n for n in cfg.ignored + cfg.not_modelled if n.startswith("optimizer.early_step_in_backward")]
        assert cfg.job.get("early_step_in_backward", False) is (value == "true")

def test_megatron_microbatch_group_read_overridden_and_round_tripped(tmp_path, cli):
    """--microbatch-group-size-per-virtual-pipeline-stage is the job's microbatch_group. Megatron-LM's
    CI tunable_overlap case (12 layers, pp 4 with 1 layer a virtual stage: vpp 3, 8 GPUs: dp 2,
    global batch 40 of micro-batch 4: m 5) runs N 5: read, it resolves (N = pp refused m 5).
    The export writes the flag, the file reads back as the same plan (plan_signature) with the
    same memory, and a command-line --microbatch-group replaces the file's, with a note."""
    from planner.explain import evaluate
    from planner.trainers.export import plan_signature

    ci = Path(__file__).parent / "data" / "megatron_ci" / "args" / \
        "gpt__gpt3_mcore_te_tp1_pp4_vp1_tunable_overlap__dev_dgx_h100.args"
    cfg = load_trainer_config(ci, fmt="megatron", gpus=8)
    assert (cfg.job["microbatch_group"], cfg.job["vpp"], cfg.job["pp"]) == (5, 3, 4)
    assert not any("microbatch-group" in x for x in cfg.not_modelled + cfg.ignored)
    _, p, _ = resolve(Job.model_validate(cfg.job))
    assert (int(p.microbatches), int(p.mbg)) == (5, 5)
    with pytest.raises(PlannerError, match="divisible by pp=4"):
        resolve(Job.model_validate({**cfg.job, "microbatch_group": None}))

    job = Job(model="llama3-8b", gpus=16, pp=4, vpp=2, micro_batch=1, global_batch=48, sharding="zero1",
              microbatch_group=6, stack="megatron")
    plan = resolved_plan(job)
    text, notes = export_plan(plan, "megatron")
    assert "--microbatch-group-size-per-virtual-pipeline-stage 6 " in text
    f = tmp_path / "exported.sh"
    f.write_text(text)
    back_job = Job.model_validate(load_trainer_config(f).job)
    assert back_job.microbatch_group == 6
    assert plan_signature(resolved_plan(back_job)) == plan_signature(plan)
    mem = [float(evaluate(*resolve(j)[:2]).memory.total) for j in (job, back_job)]
    assert mem[0] == mem[1]
    r = cli("explain", f, "--microbatch-group", "4", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert _json.loads(r.stdout)["plan"]["microbatch_group"] == 4
    assert "microbatch_group=4: the command line replaces the file's 6" in r.stderr
    # a command-line stack without the setting drops the file's (schema STACK_ONLY), with a note
    r = cli("explain", f, "--stack", "torchtitan", "--sharding", "fsdp", "--format", "json")
    assert "microbatch_group: the file's 6 is not kept: the command line's stack torchtitan chooses its own" in r.stderr


# ------------------------------------------------------------------ DeepSpeed's gradient path (issue 21, dsgrad)
@pytest.mark.parametrize("stage, model, accum, offload, path, acc", [
    # microsoft/DeepSpeed @38327e07 engine.py get_data_types l. 1010-1025 and _do_optimizer_sanity_check l. 1300-1350,
    # read by hand: bf16 without ZeRO accumulates in fp32 by default -> BF16_Optimizer (BLOOM's tr11 ds_config)
    (0, "bf16", None, False, "bf16_optimizer", "fp32"),
    # under ZeRO the default accumulation is the model dtype -> the ZeRO optimizer
    (1, "bf16", None, False, "zero", "bf16"),
    # bf16 + fp32 accumulation at stage 1 (no CPU offload) -> BF16_Optimizer; with offload, or at stage 2, ZeRO's
    (1, "bf16", "fp32", False, "bf16_optimizer", "fp32"),
    (1, "bf16", "fp32", True, "zero", "fp32"),
    (2, "bf16", "fp32", False, "zero", "fp32"),
    (3, "fp16", None, False, "zero", "fp16"),
    (0, "fp16", None, False, "fp16_optimizer", "fp16"),
    (0, "fp16", "fp32", False, "unsupported", "fp32"),  # "unsupported mix" NotImplementedError, l. 1349-1350
])
def test_deepspeed_gradient_path(stage, model, accum, offload, path, acc):
    from planner.trainers import deepspeed

    assert deepspeed.gradient_path(stage, model, accum, offload) == (path, acc)


def test_megatron_deepspeed_reduces_in_the_model_dtype():
    """Every DeepSpeed path casts the reduced gradients to communication_data_type, the model dtype unless set
    (engine.py @38327e07 l. 938-950; allreduce_bucket l. 2491-2497; stage_1_and_2.py l. 984-991; stage3.py
    l. 1333-1334): 2 B an element in fp16 / bf16, at every stage; the stack does not take the job's gradient
    bytes instead (ddp_reduces_grad_buffer false), so ZeRO-0's and the BF16_Optimizer's all-reduce is 2 B too."""
    from planner.catalog import load_stack

    fs = load_stack("megatron-deepspeed").fsdp
    assert fs.grad_reduce_bytes == 2 and fs.ddp_reduces_grad_buffer is False


def test_deepspeed_gradient_path_read(tmp_path):
    """BLOOM's tr11-176B-ml ds_config (bigscience train/tr11-176B-ml/tr11-176B-ml.slurm: stage 0, bf16): the
    BF16_Optimizer, read as sharding zero1, the megatron-deepspeed mode bf16_optimizer (issue 21: it was listed not
    modelled and priced as stage 0's DDP), as is bf16 at stage 1 with grad_accum_dtype fp32; accumulating in bf16 at
    stage 0 read as the mode too, its bf16 buffer priced at the mode's 4 B (listed: zero0 is fp16's FP16_Optimizer,
    issue 22); bf16 read as the job's fp16 false; the reduce dtype assumed from the absent communication_data_type; fp32
    on the wire listed; a bad dtype and DeepSpeed's refused mix refused."""
    from planner.trainers import deepspeed

    f = tmp_path / "ds.json"
    bloom = {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2048, "gradient_clipping": 1.0,
             "zero_optimization": {"stage": 0}, "bf16": {"enabled": True}, "steps_per_print": 2000}
    f.write_text(_json.dumps(bloom))
    cfg = deepspeed.read(f, model="llama3-8b", gpus=384, parallel={"tp": 4, "pp": 12})
    assert (cfg.job["sharding"], cfg.job["sharding_mode"], cfg.job["fp16"]) == ("zero1", "bf16_optimizer", False)
    assert any(a.startswith("communication_data_type absent: the model dtype bf16") for a in cfg.assumed)
    assert [a for a in cfg.assumed if a.startswith("sharding=zero1 as bf16_optimizer: DeepSpeed's BF16_Optimizer (bf16 at "
                                                   "ZeRO stage 0, data_types.grad_accum_dtype absent: fp32")]
    assert not any(n.startswith("BF16_Optimizer") for n in cfg.not_modelled)
    assert not any(a.startswith("sharding=none") for a in cfg.assumed)
    assert (cfg.stated["communication_data_type"], cfg.stated["data_types.grad_accum_dtype"]) == (None, None)
    # ZeRO-1 with the default accumulation: the ZeRO optimizer, nothing listed; fp32 communication listed
    f.write_text(_json.dumps({**bloom, "zero_optimization": {"stage": 1}, "communication_data_type": "FP32"}))
    cfg = deepspeed.read(f, model="llama3-8b", gpus=384, parallel={"tp": 4, "pp": 12})
    assert not any(n.startswith("BF16_Optimizer") for n in cfg.not_modelled)
    assert any(n.startswith("communication_data_type='fp32' (the gradients cast to fp32") for n in cfg.not_modelled)
    assert not any(a.startswith("communication_data_type") for a in cfg.assumed)
    # ZeRO-1 with fp32 accumulation: BLOOM's path under ZeRO (stage 1)
    f.write_text(_json.dumps({**bloom, "zero_optimization": {"stage": 1}, "data_types": {"grad_accum_dtype": "fp32"}}))
    cfg = deepspeed.read(f, model="llama3-8b", gpus=384, parallel={"tp": 4, "pp": 12})
    assert (cfg.job["sharding"], cfg.job["sharding_mode"]) == ("zero1", "bf16_optimizer")
    assert any(a.startswith("sharding=zero1 as bf16_optimizer: DeepSpeed's BF16_Optimizer (bf16 at ZeRO stage 1, "
                            "data_types.grad_accum_dtype fp32") for a in cfg.assumed)
    # stage 0 accumulating in bf16: still the BF16_Optimizer (under the pipeline engine, engine.py l. 1333-1343),
    # priced as the mode with its 4 B buffer, the 2 B one it holds listed (zero0 runs fp16 only: no bf16 spelling)
    f.write_text(_json.dumps({**bloom, "data_types": {"grad_accum_dtype": "bf16"}}))
    cfg = deepspeed.read(f, model="llama3-8b", gpus=384, parallel={"tp": 4, "pp": 12})
    assert (cfg.job["sharding"], cfg.job["sharding_mode"]) == ("zero1", "bf16_optimizer")
    assert any(n.startswith("BF16_Optimizer (bf16 at ZeRO stage 0, data_types.grad_accum_dtype bf16") and
               "accumulating in bf16" in n and "at the mode's fp32 4 B a parameter, 2 B more than it holds" in n
               for n in cfg.not_modelled)
    assert not any(a.startswith("sharding=none") for a in cfg.assumed)
    # ZeRO-2 with fp32 accumulation: the partition accumulated in fp32, listed
    f.write_text(_json.dumps({**bloom, "zero_optimization": {"stage": 2}, "data_types": {"grad_accum_dtype": "float32"}}))
    cfg = deepspeed.read(f, model="llama3-8b", gpus=384, parallel={"tp": 4, "pp": 12})
    assert any(n.startswith("data_types.grad_accum_dtype fp32: ZeRO stage 2 accumulates") for n in cfg.not_modelled)
    f.write_text(_json.dumps({**bloom, "communication_data_type": "int8"}))
    with pytest.raises(PlannerError, match="communication_data_type = 'int8' is not a DeepSpeed communication dtype"):
        deepspeed.read(f, model="llama3-8b", gpus=384, parallel={"tp": 4, "pp": 12})
    f.write_text(_json.dumps({**bloom, "bf16": {"enabled": False}, "fp16": {"enabled": True},
                              "data_types": {"grad_accum_dtype": "fp32"}}))
    with pytest.raises(PlannerError, match="fp16 weights with data_types.grad_accum_dtype fp32 at ZeRO stage 0"):
        deepspeed.read(f, model="llama3-8b", gpus=384, parallel={"tp": 4, "pp": 12})


def test_both_megatron_readers_split_a_script_with_one_function(tmp_path):
    """The Megatron-LM and Megatron-Bridge readers read and split a script with megatron.read_script_words: an
    unclosed quote (shlex's 'No closing quotation', in a file of arguments, which command_words splits a line at
    a time: megatron._quoted_words) is the same bad input in both, naming the line, and a missing file keeps each
    reader's own hint."""
    from planner.trainers import megatron, megatron_bridge

    for mod, text in ((megatron, '--tensor-model-parallel-size "2\n'), (megatron_bridge, '--recipe "llama32_1b\n')):
        with pytest.raises(PlannerError) as e:
            mod.read(Path("x.sh"), text)
        assert str(e.value) == (f"x.sh: line 1: cannot split {text.strip()!r}: No closing quotation (a quote opened on "
                                "the line is not closed on it)")
        assert e.value.hint.startswith("close the quote on the same line")
    for mod, hint in ((megatron, "give a launch script or a file of Megatron arguments"),
                      (megatron_bridge, "give a launch script of run_recipe.py")):
        with pytest.raises(PlannerError) as e:
            mod.read(tmp_path / "none.sh")
        assert e.value.hint == hint
    w = megatron.read_script_words(Path("x.sh"), "torchrun --nproc_per_node=8 pretrain_gpt.py --tensor-model-parallel-size 2\n",
                                   "x.sh: ", "")
    assert (w.launch[-1], w.words, w.soft, w.heredocs) == ("--nproc_per_node=8", ["--tensor-model-parallel-size", "2"], False, {})
