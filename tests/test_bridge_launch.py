"""Megatron-Bridge's run_recipe.py launch as a trainer format (planner/trainers/megatron_bridge.py, issue 22): fit
--export writes it and reads it back as the priced plan; the reader lays the overrides on the recipe's values
(NVIDIA-NeMo/Megatron-Bridge @dc805f5cf src/megatron/bridge/recipes/llama/llama3.py, recipes/common.py)."""

from __future__ import annotations

import json

import pytest

from planner.trainers import detect_format, load_trainer_config
from planner.trainers.export import plan_signature

from conftest import assert_one_error, fit_exports

H100 = ["--hardware", "h100-sxm", "--stack", "megatron-bridge"]
CASES = [
    # Llama 3 8B on 8 GPUs: the recipe's distributed optimizer; its recipe has no CommOverlapConfig, so no TP overlap
    ("llama3-8b-8", "llama3_8b_pretrain_config",
     ["--model", "llama3-8b", "--gpus", "8", "--sharding", "zero1", "--no-tp-comm-overlap"]),
    # its top row on 64 GPUs runs TP 2 with TP overlap: a CommOverlapConfig the recipe lacks, made by the override
    ("llama3-8b-64-tp-overlap", "llama3_8b_pretrain_config", ["--model", "llama3-8b", "--gpus", "64", "--sharding",
                                                              "zero1", "--tp-comm-overlap"]),
    # llama2.py's recipe: 4,096 tokens (recipes/common.py l. 95), a CommOverlapConfig without TP overlap (llama2.py l. 118)
    ("llama2-7b-8", "llama2_7b_pretrain_config", ["--model", "llama2-7b", "--gpus", "8", "--sharding", "zero1"]),
    ("llama3-70b-64", "llama3_70b_pretrain_config", ["--model", "llama3-70b", "--gpus", "64", "--sharding", "zero1"]),
    # the search's own top row for Llama 3 8B on 8 GPUs: torch FSDP2 (dist.use_torch_fsdp2, no distributed optimizer)
    ("llama3-8b-8-fsdp2", "llama3_8b_pretrain_config", ["--model", "llama3-8b", "--gpus", "8", "--sharding", "fsdp",
                                                        "--no-tp-comm-overlap"]),
    # NVIDIA's LLAMA31_405B_PRETRAIN_CONFIG_H100_BF16_V1 (scripts/performance/configs/llama/
    # llama31_workload_base_configs.py @dc805f5cf l. 192-200: 1,024 GPUs, TP 8, PP 8, CP 2, VP 8, global batch 512)
    # with the recipe's account_for_* (llama3.py l. 1132-1133), TP overlap and 8,192-token sequences
    ("llama3-405b-1024", "llama31_405b_pretrain_config",
     ["--model", "llama3-405b", "--gpus", "1024", "--tp", "8", "--pp", "8", "--cp", "2", "--vpp", "8",
      "--micro-batch", "1", "--global-batch", "512", "--seq-len", "8192", "--sharding", "zero1",
      "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "--tp-comm-overlap"]),
    # Megatron-FSDP optim_grads (ddp.data_parallel_sharding_strategy): Bridge turns the gradient-accumulation fusion off
    # under it (training/config.py l. 1554-1557), so a job keeping the fusion is planned without the zero2 mode
    ("llama3-8b-8-mfsdp-optim-grads", "llama3_8b_pretrain_config",
     ["--model", "llama3-8b", "--gpus", "8", "--sharding", "zero2", "--no-gradient-accumulation-fusion",
      "--no-tp-comm-overlap"]),
    # Megatron-FSDP optim_grads_params: at pp 2 the search's fsdp level is Megatron-FSDP (Megatron-LM asserts pp 1 for
    # torch FSDP2, stack_db megatron runs.sharding torch_fsdp2), its fusion off as Bridge runs it
    ("llama3-8b-16-mfsdp-pp2", "llama3_8b_pretrain_config",
     ["--model", "llama3-8b", "--gpus", "16", "--pp", "2", "--sharding", "fsdp", "--no-tp-comm-overlap"]),
    # Megatron-FSDP's HSDP: ddp.num_distributed_optimizer_instances = dp / shard group (mcore_fsdp_adapter.py @905c0e386
    # l. 228: enable_hsdp); the search's order is tp-cp-dp-pp (STACK_MODE_TP_PP_DP leaves the tp-pp-dp one out)
    ("llama3-70b-64-mfsdp-hsdp", "llama3_70b_pretrain_config", ["--model", "llama3-70b", "--gpus", "64", "--sharding", "hsdp"]),
    # Llama 3.2 (llama3.py l. 42-136, 139-217): the recipe's TP 1 / CP 1 layout on one node
    ("llama3.2-1b-8", "llama32_1b_pretrain_config", ["--model", "llama3.2-1b", "--gpus", "8", "--sharding", "zero1",
                                                     "--no-tp-comm-overlap"]),
    # tied embeddings under PP: the last stage's copy of the word embedding and its gradient all-reduce
    ("llama3.2-3b-16-pp2", "llama32_3b_pretrain_config",
     ["--model", "llama3.2-3b", "--gpus", "16", "--pp", "2", "--vpp", "1", "--seq-len", "8192", "--sharding", "zero1",
      "--no-tp-comm-overlap"]),
]


@pytest.fixture(scope="module")
def fit_export(tmp_path_factory):
    """conftest.fit_exports for megatron-bridge: each case's fit --export and its row 1 run once a module (the 405B
    preset, TP-overlap and pp 2 tests below export CASES[5], CASES[1] and CASES[-1] as the round trip does)."""
    return fit_exports(tmp_path_factory.mktemp("bridge-launch-exports"), "megatron-bridge")


@pytest.mark.parametrize("name,recipe,args", CASES, ids=[c[0] for c in CASES])
def test_fit_export_reads_back_as_the_priced_plan(cli, fit_export, name, recipe, args):
    r, out, row = fit_export(name, [*args, *H100])
    assert r.exit_code == 0, r.stderr  # fit --export read the file back: same plan, same memory
    text = out.read_text()
    assert f"scripts/training/run_recipe.py \\\n    --recipe {recipe} \\\n" in text
    assert detect_format(out) == "megatron-bridge"
    assert row is not None  # the row of `fit ARGS --top 1 --format json` (fit_export)
    back = json.loads(cli("explain", out, "--hardware", "h100-sxm", "--format", "json").stdout)
    assert plan_signature(back["plan"]) == plan_signature(row["plan"])
    assert back["memory"]["total_bytes"] == pytest.approx(row["memory"]["total_bytes"], rel=1e-9)
    checked = cli("check", out, "--hardware", "h100-sxm")  # the trainer's start-up rules and the memory gate
    assert checked.exit_code == 0 and checked.stdout.startswith(f"PASS {out}"), checked.stdout + checked.stderr
    p = row["plan"]
    dist = "true" if p["sharding_mode"] == "distributed_optimizer" or p["sharding_mode"].startswith("megatron_fsdp") else "false"
    fsdp2 = "true" if p["sharding_mode"] == "torch_fsdp2" else "false"
    for key, value in (("model.tensor_model_parallel_size", p["tp"]), ("model.pipeline_model_parallel_size", p["pp"]),
                       ("model.context_parallel_size", p["cp"]), ("train.global_batch_size", p["global_batch"]),
                       ("train.micro_batch_size", p["micro_batch"]), ("model.seq_length", p["seq_len"]),
                       ("dataset.sequence_length", p["seq_len"]), ("ddp.use_distributed_optimizer", dist),
                       ("optimizer.use_distributed_optimizer", dist), ("dist.use_torch_fsdp2", fsdp2)):
        assert f"    {key}={value} \\\n" in text


def test_the_405b_preset_is_written_as_nvidia_runs_it(fit_export):
    r, out, _ = fit_export(CASES[5][0], [*CASES[5][2], *H100])  # the round trip's export of the case
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    assert "torchrun --nproc_per_node 8 --nnodes 128 scripts/training/run_recipe.py" in text
    for line in ("model.virtual_pipeline_model_parallel_size=8", "model.sequence_parallel=true",
                 "model.account_for_embedding_in_pipeline_split=true", "model.account_for_loss_in_pipeline_split=true",
                 "comm_overlap.tp_comm_overlap=true", "mixed_precision.bf16=true", "mixed_precision.grad_reduce_in_fp32=true",
                 # the recipe's fused TE cross-entropy is not what the plan priced: written off explicitly
                 "model.cross_entropy_loss_fusion=false"):
        assert f"    {line}" in text


def test_refuses_what_bridge_cannot_run_as_priced(cli):
    # a model no transcribed recipe builds
    assert_one_error(cli("export", "--format", "megatron-bridge", "--model", "mpt-7b", "--gpus", "8", *H100),
                     "model mpt-7b is none of the transcribed recipes' models")
    # fp8 delayed scaling without the fp8 parameter gather on the recipe that holds its precision as a preset's name
    # (recipes/common.py l. 129): bf16_with_fp8_delayed_scaling_mixed gathers fp8 parameters (mixed_precision.py
    # l. 203-219), so no name says the plan
    assert_one_error(cli("export", "--format", "megatron-bridge", "--model", "llama3-8b", "--gpus", "8", "--tp", "2",
                         "--sharding", "zero1", "--precision", "fp8", "--fp8-recipe", "delayed", *H100),
                     "recipe llama3_8b_pretrain_config holds mixed_precision as a preset's name")
    # a plan priced on another stack
    assert_one_error(cli("export", "--format", "megatron-bridge", "--model", "llama3-8b", "--gpus", "8",
                         "--hardware", "h100-sxm"), "price it on --stack megatron-bridge")


def test_reader_lays_overrides_on_the_recipe(tmp_path):
    """llama3_70b_pretrain_config (llama3.py @dc805f5cf l. 658-745), by hand: TP 4, PP 4, VP 5, CP 2, SP on,
    8,192 tokens, micro-batch 1 of 512, train_iters 1,168,251, the distributed optimizer, fused TE cross-entropy,
    bf16_mixed() (grad_reduce_in_fp32), a CommOverlapConfig with tp_comm_overlap; its p2p overlap from the
    comm_overlap setup (vp 5 > 1: overlapped) and its data-parallel overlap (dp 2 > 1: on). The line overrides
    CP (1), the global batch (128) and the embedding's rows (128,512); a key the reader does not know is listed as not modelled, one without effect
    on a step as ignored, never dropped."""
    f = tmp_path / "launch.sh"
    f.write_text("#!/bin/bash\ntorchrun --nproc_per_node=8 --nnodes=4 scripts/training/run_recipe.py \\\n"
                 "  --recipe llama3_70b_pretrain_config model.context_parallel_size=1 train.global_batch_size=128 \\\n"
                 "  logger.log_interval=1 optimizer.lr=0.0001 model.cuda_graph_warmup_steps=2 model.vocab_size=128512\n")
    cfg = load_trainer_config(f, hardware="h100-sxm")
    assert cfg.fmt == "megatron-bridge"
    j = cfg.job
    assert (j["model"], j["gpus"], j["stack"]) == ("llama3-70b", 32, "megatron-bridge")
    assert (j["tp"], j["pp"], j["vpp"], j["cp"], j["schedule"]) == (4, 4, 5, 1, "interleaved")
    assert (j["sequence_parallel"], j["seq_len"], j["micro_batch"], j["global_batch"]) == (True, 8192, 1, 128)
    assert (j["sharding"], j["sharding_mode"], j["dp_comm_overlap"], j["tp_comm_overlap"]) == (
        "zero1", "distributed_optimizer", True, True)
    assert (j["cross_entropy_fusion"], j["cross_entropy_fusion_impl"], j["precision"]) == (True, "te", "bf16")
    assert "pp_p2p_overlap" not in j and "bytes_per_param" not in j  # overlapped p2p, fp32 gradients: the defaults
    assert j["tokens"] == 1168251 * 128 * 8192
    # model.vocab_size at least the tokenizer's is built unpadded (training/setup.py l. 467-498)
    assert j["padded_vocab_size"] == 128512
    assert any(n.startswith("logger.log_interval=1 (logging") for n in cfg.ignored)
    assert any(n.startswith("optimizer.lr=0.0001 (an Adam hyper-parameter") for n in cfg.ignored)
    # the recipe's CommOverlapConfig buckets 128 Mi parameters at dp 32 / (4 x 4 x 1) = 2 > 1 (comm_overlap.py
    # l. 560-580) where Megatron-Core's max(40e6, 1e6 x 2) = 40,000,000 is priced
    assert [n.split(" (")[0] for n in cfg.not_modelled] == ["model.cuda_graph_warmup_steps=2",
                                                            "DDP bucket 134,217,728 parameters"]


def test_reader_refuses_a_name_for_an_object_mixed_precision(tmp_path):
    from planner.errors import PlannerError

    f = tmp_path / "launch.sh"
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_70b_pretrain_config "
                 "mixed_precision=bf16_with_fp8_delayed_scaling_mixed\n")
    with pytest.raises(PlannerError, match="holds a MixedPrecisionConfig"):
        load_trainer_config(f, hardware="h100-sxm", gpus=8)
    # the 8B recipe holds the preset's name (recipes/common.py l. 129): a name it takes, with the preset's fields
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config "
                 "mixed_precision=bf16_with_fp8_current_scaling_mixed\n")
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["precision"], j["fp8_recipe"], j["fp8_param_gather"]) == ("fp8", "tensorwise", True)
    assert (j["bf16_layers_at_start"], j["bf16_layers_at_end"]) == (1, 1)


def test_reader_nvidia_405b_preset_file():
    """tests/data/trainer_configs/bridge_llama31_405b_h100.sh: llama31_405b_pretrain_config (llama3.py l. 1103-1195:
    TP 8, PP 8, SP, account_for_* true, micro-batch 1, the distributed optimizer, TP overlap, bf16_mixed()) with the
    preset's CP 2, VP 8, 8,192 tokens and global batch 512 (llama31_workload_base_configs.py l. 192-200); the
    comm_overlap setup's data-parallel overlap on at dp = 1,024 / (8 x 8 x 2) = 8 > 1."""
    from pathlib import Path

    path = Path(__file__).parent / "data" / "trainer_configs" / "bridge_llama31_405b_h100.sh"
    assert detect_format(path) == "megatron-bridge"
    j = load_trainer_config(path, hardware="h100-sxm").job
    assert (j["model"], j["gpus"]) == ("llama3-405b", 1024)
    assert (j["tp"], j["pp"], j["cp"], j["vpp"], j["sequence_parallel"]) == (8, 8, 2, 8, True)
    assert (j["seq_len"], j["micro_batch"], j["global_batch"], j["recompute"]) == (8192, 1, 512, "none")
    assert j["account_for_embedding_in_pipeline_split"] and j["account_for_loss_in_pipeline_split"]
    assert (j["tp_comm_overlap"], j["dp_comm_overlap"], j["sharding"]) == (True, True, "zero1")


def test_check_spells_fixes_as_the_launch_overrides(cli):
    """check on the 405B preset (no recompute: 77.8 GiB against 71.2 usable) suggests full recompute and a deeper
    pipeline in the launch's own ConfigContainer keys (trainers/spelling.py _bridge_knob)."""
    r = cli("check", "tests/data/trainer_configs/bridge_llama31_405b_h100.sh", "--hardware", "h100-sxm")
    assert r.exit_code == 1, r.stderr
    assert ("recompute none -> full [megatron-bridge: model.recompute_granularity=full; model.recompute_method=uniform; "
            "model.recompute_num_layers=1]") in r.stdout
    assert "PP 8 -> 16 (DP 8 -> 4) [megatron-bridge: model.pipeline_model_parallel_size=16; micro-batches per step " \
           "64 -> 128" in r.stdout


def test_reader_torch_fsdp2(tmp_path):
    """dist.use_torch_fsdp2 (training/config.py DistributedInitConfig l. 151): the stack's torch_fsdp2 mode, once the
    recipe's distributed optimizer (recipes/common.py l. 87, llama3.py l. 297; recipes/utils/optimizer_utils.py l. 135) is turned off."""
    from planner.errors import PlannerError

    f = tmp_path / "launch.sh"
    head = "torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config "
    f.write_text(head + "dist.use_torch_fsdp2=true\n")
    with pytest.raises(PlannerError, match="with the distributed optimizer"):
        load_trainer_config(f, hardware="h100-sxm")
    f.write_text(head + "dist.use_torch_fsdp2=true ddp.use_distributed_optimizer=false "
                 "optimizer.use_distributed_optimizer=false model.gradient_accumulation_fusion=false\n")
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["sharding"], j["sharding_mode"], j["gradient_accumulation_fusion"]) == ("fsdp", "torch_fsdp2", False)
    # the recipe's CP 2 (llama3.py l. 247) and global batch 512 (l. 252) stand
    assert (j["cp"], j["global_batch"], j["gpus"]) == (2, 512, 8)


def test_tp_overlap_on_a_recipe_without_comm_overlap(fit_export):
    """llama3_8b_pretrain_config keeps comm_overlap None (recipes/common.py l. 127): the launch makes one with a
    `_target_` dict (training/utils/omegaconf_utils.py l. 461-471), quoted for the shell, every overlap stated, and the
    DDP bucket priced, max(40e6, 1e6 x dp 32 x cp 1) = 40,000,000 (its own default would be 128 Mi at dp > 1)."""
    r, out, _ = fit_export(CASES[1][0], [*CASES[1][2], *H100])  # the round trip's export of the case
    assert r.exit_code == 0, r.stderr
    assert ("    comm_overlap='{_target_:megatron.bridge.training.comm_overlap.CommOverlapConfig,tp_comm_overlap:true,"
            "overlap_grad_reduce:true,overlap_param_gather:true,bucket_size:40000000}' \\\n") in out.read_text()
    j = load_trainer_config(out, hardware="h100-sxm").job
    assert (j["tp"], j["sequence_parallel"], j["tp_comm_overlap"], j["dp_comm_overlap"]) == (2, True, True, True)


def test_megatron_fsdp_reads_fp32_main_grads_and_agrees_with_megatron(cli, tmp_path):
    """Megatron-FSDP on Bridge @dc805f5cf: Megatron-Core 905c0e386's FullyShardedDataParallel builds its main gradients
    in fp32 whatever grad_reduce_in_fp32 says (mcore_fsdp_adapter.py l. 73-75, 92-97; Bridge passes no main_grads_dtype,
    models/common/unimodal.py l. 232-241), and Bridge turns the gradient-accumulation fusion off (training/config.py
    l. 1554-1557). Llama 3 70B (its recipe holds a MixedPrecisionConfig, whose grad_reduce_in_fp32 an override sets; 70,553,706,496
    parameters) on 8 GPUs at TP 1, optim_grads_params: 4 B x P / 8 = 35,276,853,248 B
    of gradients a GPU, where a Megatron-LM @d98e8a64 script without --megatron-fsdp-main-grads-dtype holds 2 B x P / 8
    (tests/test_megatron_fsdp_grads.py); with fp32 gradients and the fusion off the two stacks price one memory."""
    f = tmp_path / "launch.sh"
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_70b_pretrain_config "
                 "model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 "
                 "model.virtual_pipeline_model_parallel_size=null model.context_parallel_size=1 model.sequence_parallel=false "
                 "train.global_batch_size=64 model.cross_entropy_loss_fusion=false ddp.use_megatron_fsdp=true "
                 "ddp.data_parallel_sharding_strategy=optim_grads_params mixed_precision.grad_reduce_in_fp32=false\n")
    c = load_trainer_config(f, hardware="h100-sxm")
    j = c.job
    assert (j["sharding"], j["sharding_mode"], j["gradient_accumulation_fusion"]) == \
        ("fsdp", "megatron_fsdp_optim_grads_params", False)
    assert "bytes_per_param" not in j  # the recipe's preset: fp32 gradients, not the 2 B grad_reduce_in_fp32 false gives DDP
    assert any("main gradients fp32" in a for a in c.assumed)
    bridge = json.loads(cli("explain", f, "--hardware", "h100-sxm", "--format", "json").stdout)
    assert bridge["params"]["total"] == 70_553_706_496
    assert bridge["memory"]["gradients_bytes"] == 4 * 70_553_706_496 / 8 == 35_276_853_248
    p = bridge["plan"]
    args = ["--model", p["model"], "--gpus", "8", "--tp", str(p["tp"]), "--pp", str(p["pp"]), "--cp", "1",
            "--micro-batch", str(p["micro_batch"]), "--global-batch", "64", "--seq-len", str(p["seq_len"]),
            "--sharding", "fsdp", "--hardware", "h100-sxm", "--no-gradient-accumulation-fusion", "--format", "json"]
    for k in ("tp_comm_overlap", "dp_comm_overlap", "cross_entropy_fusion", "sequence_parallel"):
        args += [f"--{'' if p.get(k) else 'no-'}{k.replace('_', '-')}"]
    mega = json.loads(cli("explain", *args, "--stack", "megatron").stdout)
    same = {k: v for k, v in plan_signature(mega["plan"]).items() if k != "stack"}
    assert same == {k: v for k, v in plan_signature(p).items() if k != "stack"}  # one plan on the two stacks
    assert mega["plan"]["sharding_mode"] == "megatron_fsdp_optim_grads_params"
    assert mega["memory"]["gradients_bytes"] == bridge["memory"]["gradients_bytes"]
    assert mega["memory"]["total_bytes"] == pytest.approx(bridge["memory"]["total_bytes"], rel=1e-12)


def test_megatron_fsdp_refusals(cli, tmp_path):
    # 2-byte main gradients: not what Bridge's Megatron-FSDP builds (stack_db megatron-bridge runs.sharding
    # main_grads_bytes 4): a job naming the level is refused, the search plans a mixed16 job without the modes
    assert_one_error(cli("export", "--format", "megatron-bridge", "--model", "llama3-8b", "--gpus", "8", "--sharding",
                         "zero2", "--no-gradient-accumulation-fusion", "--bytes-per-param", "mixed16", *H100),
                     "stack megatron-bridge's trainer builds its main gradients in 4 bytes whatever the job says")
    modes = {r["plan"]["sharding_mode"] for r in json.loads(cli(
        "fit", "--model", "llama3-8b", "--gpus", "8", "--sharding", "fsdp", "--bytes-per-param", "mixed16", "--format",
        "json", *H100).stdout)}
    assert modes == {"torch_fsdp2"}
    modes = {r["plan"]["sharding_mode"] for r in json.loads(cli(
        "fit", "--model", "llama3-8b", "--gpus", "8", "--sharding", "fsdp", "--format", "json", *H100).stdout)}
    assert modes == {"torch_fsdp2", "megatron_fsdp_optim_grads_params"}  # with the recipes' fp32 gradients
    # the gradient-accumulation fusion left on: planned without the zero1 / zero2 Megatron-FSDP modes
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--sharding", "zero2", *H100),
                     "stack megatron-bridge's trainer runs the mode only with gradient_accumulation_fusion false")
    # the tp-pp-dp rank order under Megatron-FSDP: start-up rule STACK_MODE_TP_PP_DP (code 83) on megatron-bridge,
    # which Megatron-LM runs (the megatron stack's modes state tp_pp_dp_mapping true)
    plan = ["--model", "llama3-8b", "--gpus", "16", "--pp", "2", "--sharding", "fsdp", "--rank-order", "tp-cp-pp-dp",
            "--hardware", "h100-sxm"]
    assert_one_error(cli("explain", *plan, "--stack", "megatron-bridge"), "breaks start-up rule STACK_MODE_TP_PP_DP",
                     "sharding fsdp as megatron_fsdp_optim_grads_params, rank order tp-cp-pp-dp")
    assert cli("explain", *plan, "--stack", "megatron").exit_code == 0
    # the tp-pp-dp mapping: Bridge asserts it off under Megatron-FSDP
    f = tmp_path / "launch.sh"
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config "
                 "ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim dist.use_tp_pp_dp_mapping=true\n")
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="Bridge refuses the pair"):
        load_trainer_config(f, hardware="h100-sxm")


def test_check_suggests_megatron_fsdp_as_the_launch_runs_it(cli, tmp_path):
    """check on a Bridge launch that needs sharded weights suggests Megatron-FSDP (the stack's fsdp level at pp 1 with
    recompute) in the keys the export writes, and the launch with them passes at the figure check printed."""
    head = ("torchrun --nproc_per_node=8 --nnodes=8 scripts/training/run_recipe.py --recipe llama3_70b_pretrain_config "
            "model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 "
            "model.virtual_pipeline_model_parallel_size=null model.context_parallel_size=1 model.sequence_parallel=false "
            "train.global_batch_size=64 model.seq_length=4096 dataset.sequence_length=4096")
    f = tmp_path / "launch.sh"
    f.write_text(head + "\n")
    r = cli("check", f, "--hardware", "h100-sxm", "--format", "json")
    assert r.exit_code == 1
    fixes = json.loads(r.stdout)[0]["suggestions"]
    fsdp = next(x for x in fixes if x["plan"]["sharding_mode"] == "megatron_fsdp_optim_grads_params")
    got = {x["key"]: x["value"] for x in fsdp["trainer_settings"]}
    assert got == {**got, "ddp.use_megatron_fsdp": True, "dist.use_megatron_fsdp": True, "dist.use_torch_fsdp2": False,
                   "ddp.data_parallel_sharding_strategy": "optim_grads_params", "checkpoint.ckpt_format": "fsdp_dtensor",
                   "model.gradient_accumulation_fusion": False}
    assert not fsdp["trainer_unspellable"]
    from planner.trainers.spelling import hydra_value

    f.write_text(head + " " + " ".join(f"{k}={hydra_value(v)}" for k, v in got.items()) + "\n")
    back = json.loads(cli("explain", f, "--hardware", "h100-sxm", "--format", "json").stdout)
    assert back["plan"]["sharding_mode"] == "megatron_fsdp_optim_grads_params"
    assert back["memory"]["total_bytes"] == pytest.approx(fsdp["total_bytes"], rel=1e-9)
    assert cli("check", f, "--hardware", "h100-sxm").exit_code == 0


@pytest.mark.parametrize("stack,bpp,model,want", [
    # Bridge's Megatron-FSDP builds fp32 main gradients (runs.sharding main_grads_bytes 4): a mixed16 job's stack has
    # no other fsdp mode, so the hint offers the degrees and the levels the job can run, no Megatron-FSDP mode
    ("megatron-bridge", "mixed16", "llama3-8b",
     "use pp 1 and ep 1, or sharding none or zero1 (stack megatron-bridge runs no other fsdp mode for this job's settings)"),
    # with the recipes' fp32 gradients (the stack's bytes_per_param megatron) it runs optim_grads_params, and zero2 and
    # hsdp (the fusion off)
    ("megatron-bridge", None, "llama3-8b", "use sharding_mode megatron_fsdp_optim_grads_params (no such assert in "
     "validate_args), or pp 1 and ep 1, or sharding none or zero1 or zero2 or hsdp"),
    # Megatron-LM @d98e8a64's Megatron-FSDP holds the job's gradient dtype (no main_grads_bytes): offered to mixed16
    ("megatron", "mixed16", "llama3-8b", "use sharding_mode megatron_fsdp_optim_grads_params (no such assert in "
     "validate_args), or pp 1 and ep 1, or sharding none or zero1 or zero2 or hsdp"),
    # tied embeddings break the rule at pp 1 and ep 1 too: not offered
    ("megatron-bridge", "mixed16", "megatron-gpt-1.7b",
     "use sharding none or zero1 (stack megatron-bridge runs no other fsdp mode for this job's settings)"),
])
def test_torch_fsdp2_hint_names_only_modes_the_stack_runs_for_the_job(stack, bpp, model, want):
    """MEGATRON_TORCH_FSDP2 (Megatron-LM @d98e8a64 arguments.py l. 1031-1045: --use-torch-fsdp2 asserts pp 1, ep 1 and
    untied embeddings): its hint names the modes of the fsdp level that the job's stack runs for the job (the stack
    plan.stack_for_states leaves), so a mixed16 job on megatron-bridge is never pointed at a mode that refuses it."""
    from planner.errors import PlannerError
    from planner.plan import resolve
    from planner.schema import Job

    job = dict(model=model, gpus=16, pp=1 if model != "llama3-8b" else 2, sharding="fsdp", sharding_mode="torch_fsdp2",
               gradient_accumulation_fusion=False, hardware="h100-sxm", stack=stack)
    if bpp is not None:
        job["bytes_per_param"] = bpp
    with pytest.raises(PlannerError, match="breaks start-up rule MEGATRON_TORCH_FSDP2") as e:
        resolve(Job(**job))
    assert e.value.hint == want
    if bpp == "mixed16" and stack == "megatron-bridge":  # and a mode it names is one resolve runs for the job
        assert "megatron_fsdp" not in e.value.hint
        with pytest.raises(PlannerError, match="builds its main gradients in 4 bytes"):
            resolve(Job(**{**job, "sharding_mode": "megatron_fsdp_optim_grads_params"}))


def test_torch_fsdp2_hint_on_the_command_line(cli):
    """The case the hint was wrong for: explain --stack megatron-bridge --sharding fsdp --pp 2 with mixed16 runs
    torch_fsdp2 (the only fsdp mode left) and used to be told to use megatron_fsdp_optim_grads_params, which the stack
    refuses for 2-byte gradients."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "16", "--pp", "2", "--sharding", "fsdp", "--bytes-per-param",
            "mixed16", *H100)
    assert_one_error(r, "sharding fsdp as torch_fsdp2", "breaks start-up rule MEGATRON_TORCH_FSDP2",
                     "hint: use pp 1 and ep 1, or sharding none or zero1 (stack megatron-bridge runs no other fsdp mode")
    assert "megatron_fsdp" not in r.stderr


def test_check_tries_only_the_modes_the_stack_runs_for_a_mixed16_launch(cli, tmp_path):
    """A Bridge launch with 2-byte gradients (mixed_precision.grad_reduce_in_fp32=false under the distributed optimizer)
    and the fusion off: Bridge's Megatron-FSDP builds fp32 main gradients (main_grads_bytes 4), so the search plans it
    without the Megatron-FSDP modes, and check's sharding rungs come from the same test (plan.stack_for_job): zero1 ->
    fsdp (torch_fsdp2) only, where it used to try zero2 (megatron_fsdp_optim_grads, refused for the job) too; no
    suggestion names a mode the stack refuses for the job."""
    from planner.catalog import load_stack
    from planner.check import _stack_levels, evaluate_job, ladders
    from planner.schema import Job
    from planner.space import settings_for

    f = tmp_path / "launch.sh"
    f.write_text("torchrun --nproc_per_node=8 --nnodes=8 scripts/training/run_recipe.py --recipe llama3_70b_pretrain_config "
                 "model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 "
                 "model.virtual_pipeline_model_parallel_size=null model.context_parallel_size=1 model.sequence_parallel=false "
                 "train.global_batch_size=64 model.seq_length=4096 dataset.sequence_length=4096 "
                 "mixed_precision.grad_reduce_in_fp32=false model.gradient_accumulation_fusion=false\n")
    job = Job.model_validate(load_trainer_config(f, hardware="h100-sxm").job)
    assert (job.sharding_mode, job.bytes_per_param.gradients, job.gradient_accumulation_fusion) == \
        ("distributed_optimizer", 2.0, False)
    searched = settings_for(job.model_copy(update={"sharding_mode": None}))[0].stack.runs.sharding  # fit's modes for it
    assert [m.name for m in searched] == ["ddp", "distributed_optimizer", "torch_fsdp2"]
    assert _stack_levels(job) == ("none", "zero1", "fsdp") == tuple(dict.fromkeys(m.level for m in searched))
    assert [c.text for c in ladders(job, evaluate_job(job))["sharding"]] == ["sharding zero1 -> fsdp"]
    refused = {m.name for m in load_stack("megatron-bridge").runs.sharding
               if m.main_grads_bytes is not None and m.main_grads_bytes != job.bytes_per_param.gradients}
    assert refused == {"megatron_fsdp_optim", "megatron_fsdp_optim_grads", "megatron_fsdp_optim_grads_params",
                       "megatron_fsdp_hsdp"}
    r = cli("check", f, "--hardware", "h100-sxm", "--format", "json")
    assert r.exit_code == 1, r.stderr
    modes = [x["plan"]["sharding_mode"] for x in json.loads(r.stdout)[0]["suggestions"]]
    assert "torch_fsdp2" in modes and set(modes) <= {m.name for m in searched}  # (the fsdp rung is suggested)


@pytest.mark.parametrize("strategy,want", [
    # optim_grads_params: the TransformerLayers are the units (mcore_fsdp_adapter.py @905c0e386 l. 117-123), the bucket
    # cuts only what lies outside them (param_and_grad_buffer.py l. 1474-1486); priced per unit whatever the bucket
    ("optim_grads_params", "DDP bucket 134,217,728 parameters (the CommOverlapConfig's bucket_size; Megatron-FSDP "
     "optim_grads_params cuts by it only the parameters outside its FSDP units, the embedding, final norm and output "
     "layer, one collective a bucket: megatron_fsdp/param_and_grad_buffer.py @905c0e386 l. 1474-1486, megatron_fsdp.py "
     "l. 269-271, 355; priced one collective per FSDP unit, a layer, whatever the bucket)"),
    # optim_grads: no units at 905c0e386, every group cut by the bucket, the queue max(1e9, it); priced in
    # Megatron-Core DDP's buckets, max(40e6, 1e6 x dp 64 x cp 1) = 64,000,000
    ("optim_grads", "DDP bucket 134,217,728 parameters (the CommOverlapConfig's bucket_size; Megatron-FSDP optim_grads "
     "builds no FSDP units at 905c0e386 (mcore_fsdp_adapter.py l. 117-123) and cuts every parameter group by it, one "
     "reduce-scatter a bucket (megatron_fsdp/param_and_grad_buffer.py l. 1474-1486), its reduce-scatter queue max(1e9, "
     "it) (megatron_fsdp.py l. 384-407); priced at Megatron-Core DDP's 64,000,000: the data-parallel collectives' count)"),
    # without Megatron-FSDP: Megatron-Core DDP's bucket, as before
    (None, "DDP bucket 134,217,728 parameters (the CommOverlapConfig's bucket_size; priced at Megatron-Core's "
     "64,000,000: the data-parallel collectives' count)"),
])
def test_ddp_bucket_under_megatron_fsdp(tmp_path, strategy, want):
    """The CommOverlapConfig's 128 Mi bucket at dp > 1 (training/comm_overlap.py @dc805f5cf l. 572-573) under
    Megatron-FSDP: Megatron-Core 905c0e386's FullyShardedDataParallel reads ddp_config.bucket_size (mcore_fsdp_adapter.py
    l. 112-114, megatron_fsdp.py l. 269-271, 355), so the line says what it changes there, not that it has no effect."""
    f = tmp_path / "launch.sh"
    mfsdp = f" ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy={strategy}" if strategy else ""
    f.write_text("torchrun --nproc_per_node=8 --nnodes=8 scripts/training/run_recipe.py --recipe llama3_70b_pretrain_config "
                 "model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 "
                 "model.virtual_pipeline_model_parallel_size=null model.context_parallel_size=1 model.sequence_parallel=false "
                 f"model.gradient_accumulation_fusion=false{mfsdp}\n")
    c = load_trainer_config(f, hardware="h100-sxm")
    assert [n for n in c.not_modelled if n.startswith("DDP bucket")] == [want]


def test_ddp_bucket_size_flag_under_megatron_fsdp(tmp_path):
    """Megatron-LM @d98e8a64 hands --ddp-bucket-size to Megatron-FSDP as to DDP (training.py l. 2496-2502): listed as
    not modelled with what it changes there, where it used to be an unknown flag."""
    f = tmp_path / "pretrain.sh"
    f.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
                 "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --seq-length 4096 "
                 "--max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 64 --bf16 --use-megatron-fsdp "
                 "--data-parallel-sharding-strategy optim_grads_params --ckpt-format fsdp_dtensor --ddp-bucket-size "
                 "100000000 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 "
                 "--untie-embeddings-and-output-weights --disable-bias-linear --padded-vocab-size 128256 "
                 "--no-gradient-accumulation-fusion --use-distributed-optimizer\n")
    c = load_trainer_config(f, hardware="h100-sxm")
    line = next(n for n in c.not_modelled if n.startswith("--ddp-bucket-size"))
    assert line.startswith("--ddp-bucket-size=100000000 (the gradient buckets' size, one collective each, in place of "
                           "Megatron-Core's max(40e6, 1e6 x dp x cp)")
    assert ("under --use-megatron-fsdp it cuts only the parameters outside the FSDP units, the embedding, final norm and "
            "output layer (megatron_fsdp/param_and_grad_buffer.py l. 1858-1866") in line
    assert "unknown to the planner" not in line


# fuzz pass of 2026-12-05 (`scripts/fuzz.py --runs 1500 --seed 63 --kinds megatron-bridge`): override values of the
# wrong type reached comparisons and set lookups (TypeError, ValueError tracebacks); each is now exit 2 naming the key
L70 = "torchrun --nproc_per_node=8 --nnodes=8 scripts/training/run_recipe.py --recipe llama3_70b_pretrain_config "
L8 = "torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config "


@pytest.mark.parametrize("line, needles", [
    # a word as the virtual pipeline size of a recipe with a CommOverlapConfig: `'abc' > 1` in its p2p setup
    (L70 + "model.virtual_pipeline_model_parallel_size=abc",
     ["model.virtual_pipeline_model_parallel_size='abc': not a positive count"]),
    # '8' quoted for Hydra (inside the shell's quotes) is the string 8 for the reader: named quoted, not as the
    # count it looks like
    (L70 + "\"model.virtual_pipeline_model_parallel_size='8'\"",
     ["model.virtual_pipeline_model_parallel_size='8': not a positive count"]),
    # a dict (a `_target_` one) there: `dict > 1`
    (L70 + "'model.virtual_pipeline_model_parallel_size={_target_:nosuch.Class}'",
     ["model.virtual_pipeline_model_parallel_size={'_target_': 'nosuch.Class'}: not a positive count"]),
    # a word as the CommOverlapConfig's bucket: `{bucket:,}` on a string (ValueError)
    (L70 + "comm_overlap.bucket_size=uniform", ["comm_overlap.bucket_size='uniform': not a whole number >= 0 or null"]),
    # a dict as the 8B recipe's mixed-precision preset name: `dict in MP_PRESETS` (unhashable)
    (L8 + "'mixed_precision={}'", ["mixed_precision={}: not a preset the planner prices"]),
    # a list as Megatron-FSDP's sharding strategy: `list in MFSDP_MODES` (unhashable)
    (L70 + "ddp.use_megatron_fsdp=true 'ddp.data_parallel_sharding_strategy=[1,2]' model.gradient_accumulation_fusion=false",
     ["ddp.data_parallel_sharding_strategy=[1,2]: not read"]),
    # found while fixing those: a word as a mixed-precision flag was taken as true, a comm_overlap dict without the
    # tp_comm_overlap CommOverlapConfig requires (training/comm_overlap.py l. 382) as tp_comm_overlap false
    (L70 + "mixed_precision.fp8_param_gather=abc", ["mixed_precision.fp8_param_gather='abc': not true or false"]),
    (L70 + "comm_overlap.tp_comm_overlap=null", ["comm_overlap.tp_comm_overlap=null: not true or false"]),
    (L8 + "'comm_overlap={_target_:megatron.bridge.training.comm_overlap.CommOverlapConfig,bucket_size:1}'",
     ["no tp_comm_overlap, which CommOverlapConfig requires", "add tp_comm_overlap:true"]),
])
def test_override_values_of_the_wrong_type_are_refused(cli, tmp_path, line, needles):
    f = tmp_path / "launch.sh"
    f.write_text(line + "\n")
    for cmd in (("check", str(f), "--format", "json"), ("explain", str(f))):
        assert_one_error(cli(*cmd), str(f), *needles)


def test_an_override_given_twice_keeps_the_last_and_says_so(tmp_path):
    """Hydra applies the overrides in order (omegaconf_utils.py @dc805f5cf parse_hydra_overrides l. 157-181): the
    last of a key given twice stands; the reader said nothing of the first (fuzz pass of 2026-12-05), it now lists
    it among what it assumed."""
    f = tmp_path / "launch.sh"
    f.write_text(L8 + "train.global_batch_size=64 train.global_batch_size=128\n")
    c = load_trainer_config(f, hardware="h100-sxm")
    assert c.job["global_batch"] == 128
    assert ("train.global_batch_size given twice (64, then 128): the last stands, as Hydra applies the overrides "
            "in order") in c.assumed


def test_llama32_recipe_by_hand(tmp_path):
    """llama32_3b_pretrain_config (llama3.py @dc805f5cf l. 139-217), by hand: TP 1, PP 1, CP 1 (l. 156-163; the 8B
    recipe's values but CP), 8,192 tokens, micro-batch 1 of 512, 1,168,251 iterations, the distributed optimizer with
    both overlaps, fused TE cross-entropy, bf16_mixed as a name (recipes/common.py l. 129), comm_overlap None; its model
    (AutoBridge of meta-llama/Llama-3.2-3B) matched to the catalog by shape: llama3.2-3b, tied, llama3 scaling x32."""
    from planner.errors import PlannerError

    f = tmp_path / "launch.sh"
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama32_3b_pretrain_config\n")
    cfg = load_trainer_config(f, hardware="h100-sxm")
    j = cfg.job
    assert (j["model"], j["gpus"]) == ("llama3.2-3b", 8)
    assert (j["tp"], j["pp"], j["cp"], j["vpp"], j["sequence_parallel"]) == (1, 1, 1, 1, False)
    assert (j["seq_len"], j["micro_batch"], j["global_batch"], j["tokens"]) == (8192, 1, 512, 1168251 * 512 * 8192)
    assert (j["sharding_mode"], j["dp_comm_overlap"], j["tp_comm_overlap"], j["precision"]) == (
        "distributed_optimizer", True, False, "bf16")
    assert any("tied_embeddings=True, llama3_rope_scaling=(32.0, 1.0, 4.0, 8192)" in a for a in cfg.assumed)
    # the recipe holds mixed_precision as a name and comm_overlap None, as the 8B recipe does
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama32_1b_pretrain_config "
                 "comm_overlap.tp_comm_overlap=true\n")
    with pytest.raises(PlannerError, match="has comm_overlap None"):
        load_trainer_config(f, hardware="h100-sxm")
    # the model is the recipe's: another catalog model of another shape is refused
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama32_1b_pretrain_config\n")
    with pytest.raises(PlannerError):
        load_trainer_config(f, hardware="h100-sxm", model="llama3.2-3b")


def test_llama32_tied_embedding_under_pp(cli, fit_export):
    """Llama 3.2 3B at PP 2 (28 layers, 14 a stage), read back from its launch: Megatron's last stage holds its own copy
    of the tied word embedding (Narayanan et al. 2021 sec. 2.2; memory.py params_of [6]) and the first the embedding;
    by hand, a layer 3,072 x (3,072 + 2,048 + 3,072) attention + 3 x 3,072 x 8,192 MLP + 2 x 3,072 norms =
    100,669,440, the embedding 128,256 x 3,072 = 394,002,432: first 14 x 100,669,440 + 394,002,432 =
    1,803,374,592 parameters, last the same + the final norm 3,072 = 1,803,377,664 (bf16 weights, 2 B). At PP 1
    the model's 3,212,749,824 (the embedding once). The copy's gradient is all-reduced between the two ends once a
    step (finalize_model_grads _allreduce_word_embedding_grads, stack_db megatron pipeline_tied_grad_allreduce):
    V h fp32 main_grad elements over 2 ranks one pipeline stride apart, in pp_comm."""
    import numpy as np

    from planner import comm
    from planner.plan import resolve
    from planner.schema import Job
    from planner.step import Collectives, _compute_pass, step_time

    args = CASES[-1][2]
    r, out, _ = fit_export(CASES[-1][0], [*args, *H100])  # the round trip's export of the case
    assert r.exit_code == 0, r.stderr
    d = json.loads(cli("explain", out, "--hardware", "h100-sxm", "--format", "json").stdout)
    st = d["memory"]["stages"]
    first, last = 14 * 100_669_440 + 394_002_432, 14 * 100_669_440 + 394_002_432 + 3_072
    assert (st["first"]["weights_bytes"], st["last"]["weights_bytes"]) == (2 * first, 2 * last)
    cfg = load_trainer_config(out, hardware="h100-sxm")
    s, p, _ = resolve(Job(**cfg.job))
    tied = float(step_time(s, p)[1]["pp_tied_grads_s"])
    sc = _compute_pass(s, p)[0]
    coll = Collectives(sc)
    assert tied == float(coll(comm.ALL_REDUCE, 128256 * 3072 * 4.0, np.asarray(2), coll.strides["pp"])) > 0
    one = json.loads(cli("explain", "--model", "llama3.2-3b", "--gpus", "8", "--sharding", "zero1", *H100,
                         "--format", "json").stdout)
    assert one["memory"]["weights_bytes"] == 2 * 3_212_749_824


@pytest.mark.parametrize("base,recipe,head_dim", [("llama3-8b", "llama3_8b_pretrain_config", 64),
                                                  ("llama2-7b", "llama2_7b_pretrain_config", 64),
                                                  ("qwen3-30b-a3b", "qwen3_30b_a3b_pretrain_config", 64)])
def test_recipe_model_matched_on_head_width(tmp_path, base, recipe, head_dim):
    """A recipe's model is matched with its head width, Megatron's kv_channels: the Hugging Face config's head_dim where
    it gives one, else hidden / heads (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf models/conversion/model_bridge.py
    l. 258 ("head_dim", "kv_channels"); Megatron-Core 905c0e386 transformer_config.py l. 1031-1032): 4,096 / 32 = 128
    for Llama 3 8B and Llama 2 7B, Qwen3-30B-A3B's config head_dim 128 (2,048 / 32 would be 64). A model file that
    differs from the catalog entry only in an explicit head_dim of 64 is no recipe's model: the writer finds no recipe
    and the reader refuses it as --model, naming the field."""
    import yaml

    from planner.catalog import load_model
    from planner.errors import PlannerError
    from planner.trainers.megatron_bridge import recipe_for

    assert recipe_for(load_model(base)) == recipe
    data = yaml.safe_load(open(f"model_zoo/{base}.yaml"))
    data.update(name=f"{base}-hd{head_dim}", head_dim=head_dim)
    data.pop("training", None)
    m = tmp_path / f"{base}-hd{head_dim}.yaml"
    m.write_text(yaml.safe_dump(data))
    other = load_model(str(m))
    assert (other.dhead, other.hidden_size, other.num_attention_heads) == (head_dim, load_model(base).hidden_size,
                                                                           load_model(base).num_attention_heads)
    assert recipe_for(other) is None
    f = tmp_path / "launch.sh"
    f.write_text(f"torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe {recipe}\n")
    with pytest.raises(PlannerError, match=rf"\(dhead\) 128 contradicts --model .* \(dhead = {head_dim}\)"):
        load_trainer_config(f, hardware="h100-sxm", model=str(m))
    assert load_trainer_config(f, hardware="h100-sxm", model=base).job["model"] == base


def test_sequence_parallel_at_tp_1_is_refused_as_bridge_refuses_it(cli, tmp_path):
    """model.sequence_parallel=true at model.tensor_model_parallel_size=1: Megatron-LM's validate_args turns it off
    and starts (arguments.py @d98e8a64 l. 1433-1439), Bridge does not start: ConfigContainer.validate finalizes the
    model (training/config.py @dc805f5cf l. 1484-1485; models/transformer_config.py l. 83-92), which runs Megatron-Core
    905c0e386 ModelParallelConfig.__post_init__: 'Cannot use sequence parallelism without tensor parallelism' (a
    ValueError at tp <= 1, model_parallel_config.py l. 401-403). The reader refuses it in those words (before: the
    job's generic 'sequence_parallel needs tp > 1'), and so does load_job at a command-line --tp 1 over a launch that
    runs it at tp 2 (megatron_bridge.command_line_tp); at tp 2 it reads sequence parallelism on."""
    from planner.errors import PlannerError

    f = tmp_path / "launch.sh"
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama32_1b_pretrain_config "
                 "model.sequence_parallel=true\n")
    with pytest.raises(PlannerError, match="model_parallel_config.py l. 401-403 raises 'Cannot use sequence parallelism "
                                           "without tensor parallelism'"):
        load_trainer_config(f, hardware="h100-sxm")
    assert_one_error(cli("explain", f, "--hardware", "h100-sxm"),
                     "model.sequence_parallel=true with model.tensor_model_parallel_size=1: Bridge does not start",
                     "hint: give model.sequence_parallel=false, or model.tensor_model_parallel_size above 1")
    f.write_text("torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama32_1b_pretrain_config "
                 "model.sequence_parallel=true model.tensor_model_parallel_size=2\n")
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["tp"], j["sequence_parallel"]) == (2, True)
    # the command line's tp 1 over it (flags beat file values): Bridge refuses it so, unless --no-sequence-parallel
    assert_one_error(cli("explain", f, "--hardware", "h100-sxm", "--tp", 1),
                     "the launch's model.sequence_parallel=true at the command line's tp 1: Bridge does not start",
                     "model_parallel_config.py l. 401-403", "hint: pass --no-sequence-parallel with --tp 1")
    r = cli("explain", f, "--hardware", "h100-sxm", "--tp", 1, "--no-sequence-parallel", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert (json.loads(r.stdout)["plan"]["tp"], json.loads(r.stdout)["plan"]["sequence_parallel"]) == (1, False)
