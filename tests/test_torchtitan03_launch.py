"""torchtitan 0.3.0's launch line, read and exported (issue 22): planner/trainers/torchtitan03.py.

pytorch/torchtitan release/0.3 @4f9e9a47d is configured by `--module M --config F` (a config_registry function)
and `--section.key value` options (tyro). The expected jobs below are derived by hand from those files:

  run_train_8b.sh: llama3_8b (config_registry.py l. 184-216): local_batch_size 1, seq_len 8192, steps 1000,
    SelectiveAC; the options give tensor_parallel_degree 2 and local_batch_size 2; NGPU=8 and
    data_parallel_shard_degree -1 (configs.py l. 124) -> dp_shard = 8 / 2 = 4; global_batch_size -1 ->
    2 x 4 = 8; tokens = 1000 steps x 8 x 8192 = 65,536,000; compile off (CompileConfig.enable false, l. 292).
  torchrun_405b.sh: llama3_405b (l. 295-346): local_batch_size 2, seq_len 8192, steps 3000, tp 8, FullAC,
    compile on with async TP, Float8LinearConverter (recipe "rowwise", float8.py l. 58) with filter_fqns
    ["lm_head"]; shard 16 -> 8 x 16 = 128 GPUs = torchrun's 16 nodes x 8; global 2 x 16 = 32;
    tokens = 3000 x 32 x 8192 = 786,432,000.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import detect_format, load_trainer_config
from planner.trainers.export import export_plan
from planner.trainers.torchtitan03 import CLI_OPTIONS, CONFIG_FUNCTIONS, parse_launch
from planner.trainers.torchtitan_flavors import TORCHTITAN_03

from conftest import assert_one_error

DATA = Path(__file__).parent / "data" / "torchtitan03"


def _line(tmp_path, text: str, name: str = "run.sh") -> Path:
    p = tmp_path / name
    p.write_text("#!/usr/bin/bash\n" + text + "\n")
    return p


def test_the_frozen_options_are_torchtitans_list():
    """222 options (test_no_new_cli_options.py l. 20-241, one a line); the six that differ from main (ttreg03)."""
    assert len(CLI_OPTIONS) == 222
    for k in ("parallelism.enable_sequence_parallel", "parallelism.spmd_backend", "parallelism.enable_fsdp_symm_mem",
              "parallelism.context_parallel_ptrr_mask_key", "training.disable_cuda_graphs",
              "compile.enable_async_tensor_parallel"):
        assert k in CLI_OPTIONS
    for k in ("parallelism.context_parallel_rotate_method", "parallelism.disable_loss_parallel",
              "parallelism.enable_async_tensor_parallel", "parallelism.expert_parallel_comm_backend",
              "parallelism.expert_tensor_parallel_degree", "parallelism.pipeline_parallel_expert_parallel_overlap"):
        assert k not in CLI_OPTIONS


def test_config_functions_build_the_flavors_main_names():
    """Each bf16 config function's model is TORCHTITAN_03's flavor for it (one table of what 0.3.0 builds)."""
    for (module, name), cf in CONFIG_FUNCTIONS.items():
        if not cf.converter:
            assert TORCHTITAN_03[cf.flavor] == (module, name)


def test_detected():
    assert detect_format(DATA / "run_train_8b.sh") == "torchtitan-0.3"
    assert detect_format(DATA / "torchrun_405b.sh") == "torchtitan-0.3"


def test_main_era_run_train_is_not_a_launch_line(tmp_path):
    """main's run_train.sh took CONFIG_FILE (a TOML): no --module / --config, so not 0.3.0's line."""
    p = _line(tmp_path, "CONFIG_FILE=./llama3_8b.toml ./run_train.sh")
    assert detect_format(p) is None


def test_run_train_form_reads_by_hand():
    cfg = load_trainer_config(DATA / "run_train_8b.sh", hardware="h100-sxm")
    j = cfg.job
    assert cfg.fmt == "torchtitan-0.3" and j["stack"] == "torchtitan-0.3"
    assert (j["model"], j["gpus"], j["tp"], j["pp"], j["cp"]) == ("llama3-8b", 8, 2, 1, 1)
    assert (j["sharding"], j["sharding_mode"], j["micro_batch"], j["global_batch"]) == ("fsdp", "fsdp2", 2, 8)
    assert (j["seq_len"], j["tokens"], j["recompute"]) == (8192, 65_536_000.0, "selective")
    assert j["attention_kernel"] == "flex" and j["sequence_parallel"] is True and j["torch_compile"] is False
    assert "metrics.log_freq=10 (logging)" in cfg.ignored
    assert any(i.startswith("shell line 'set -ex'") for i in cfg.ignored)
    assert any("disable_cuda_graphs=false" in a and "trainer.py l. 613-614" in a for a in cfg.assumed)


def test_torchrun_form_reads_the_config_functions_fp8():
    cfg = load_trainer_config(DATA / "torchrun_405b.sh", hardware="h100-sxm")
    j = cfg.job
    assert (j["model"], j["gpus"], j["tp"], j["micro_batch"], j["global_batch"]) == ("llama3-405b", 128, 8, 2, 32)
    assert (j["tokens"], j["recompute"], j["seq_len"]) == (786_432_000.0, "full", 8192)
    assert (j["precision"], j["fp8_recipe"], j["filter_fqns"]) == ("fp8", "rowwise", ["output"])
    assert "fp8_output_layer" not in j  # lm_head filtered: kept bf16
    assert j["torch_compile"] is True and j["tp_comm_overlap"] is True


def test_tyro_booleans_and_lists(tmp_path):
    p = _line(tmp_path, "MODULE=llama3 CONFIG=llama3_405b NGPU=8 ./run_train.sh --parallelism.no-enable-sequence-parallel "
                        "--compile.no-enable-async-tensor-parallel --compile.components loss "
                        "--parallelism.data_parallel_shard_degree 1 --checkpoint.no-enable activation-checkpoint:none")
    cfg = load_trainer_config(p, hardware="h100-sxm")
    j = cfg.job
    assert "checkpoint.enable=false (checkpointing between steps)" in cfg.ignored
    assert j["sequence_parallel"] is False and j["tp_comm_overlap"] is False
    assert j["torch_compile"] is False  # enable on, but components ["loss"]: the model not compiled
    assert j["recompute"] == "none"
    assert j["sharding"] == "fsdp"  # tp 8 x shard 1: 0.3.0's FSDP over one rank (stack fsdp_one_rank)
    # a flag takes no value
    bad = _line(tmp_path, "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --compile.enable=true", "b.sh")
    with pytest.raises(PlannerError, match="is a flag in torchtitan 0.3.0"):
        load_trainer_config(bad)


def test_last_module_and_config_win(tmp_path):
    """run_train.sh puts --module ${MODULE} --config ${CONFIG} before "$@" (l. 50); _load_config keeps the last."""
    p = _line(tmp_path, "NGPU=8 ./run_train.sh --module llama3 --config llama3_70b")
    j = load_trainer_config(p).job
    assert (j["model"], j["tp"], j["recompute"], j["micro_batch"]) == ("llama3-70b", 8, "full", 8)


@pytest.mark.parametrize("option, words", [
    ("--parallelism.expert_tensor_parallel_degree 2", ("expert_tensor_parallel_degree", "no expert TP axis")),
    ("--parallelism.enable_async_tensor_parallel", ("--compile.enable_async_tensor_parallel",)),
    ("--parallelism.tensor_paralel_degree 2", ("tensor_paralel_degree", "did you mean --parallelism.tensor_parallel_degree")),
    ("--training.seq_len 8k", ("'8k' is not a whole number",)),
    ("activation-checkpoint:memory-budget", ("memory-budget",)),
    ("--training.seq_len $SEQ", ("shell expansion",)),
])
def test_bad_lines_exit_2_naming_file_and_key(cli, tmp_path, option, words):
    p = _line(tmp_path, f"MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh {option}")
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), str(p), *words)


def test_untranscribed_config_functions_are_refused(cli, tmp_path):
    p = _line(tmp_path, "MODULE=qwen3 CONFIG=qwen3_32b ./run_train.sh")
    assert_one_error(cli("explain", str(p)), "qwen3_32b", "not transcribed", "--module llama3 --config llama3_8b")
    # run_train.sh's defaults (l. 29-32): llama3_debugmodel; a bare ./run_train.sh is read when named a 0.3 line
    p = _line(tmp_path, "./run_train.sh", "d.sh")
    assert detect_format(p) is None
    assert_one_error(cli("explain", str(p), "--config-format", "torchtitan-0.3"), "llama3_debugmodel")


def test_gpu_count_must_match(tmp_path):
    p = _line(tmp_path, "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --parallelism.data_parallel_shard_degree 2")
    with pytest.raises(PlannerError, match="product .* is 2 GPUs, but NGPU starts 8"):
        load_trainer_config(p)


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(**kw))
    return to_json(settings, plan, evaluate(settings, plan))


T03 = dict(hardware="h100-sxm", stack="torchtitan-0.3")
ROUND_TRIPS = [
    (dict(model="llama3-8b", gpus=16, tp=2, pp=2, global_batch=64), "llama3_8b"),
    (dict(model="llama3-70b", gpus=64, tp=8, pp=1, global_batch=64, recompute="full", sequence_parallel=False), "llama3_70b"),
    (dict(model="llama3-405b", gpus=128, tp=8, pp=1, global_batch=32, precision="fp8", fp8_recipe="rowwise",
          torch_compile=True, tp_comm_overlap=True), "llama3_405b"),
    (dict(model="deepseek-v3", gpus=256, pp=8, ep=32, global_batch=256, precision="bf16", moe_aux_loss_coeff=0.0),
     "deepseek_v3_671b"),
]


@pytest.mark.parametrize("kw, config", ROUND_TRIPS, ids=[c for _, c in ROUND_TRIPS])
def test_export_reads_back_as_the_same_plan(tmp_path, kw, config):
    """export -> read back -> the same plan_signature and memory (check_readback, as fit --export runs it)."""
    row = _row(**T03, **kw)
    text, notes = export_plan(row["plan"], "torchtitan")
    assert f"--config {config}" in text
    check_readback(row, "torchtitan", text)
    p = tmp_path / "x.sh"
    p.write_text(text)
    back = parse_launch("", text)
    assert back.config == config and back.gpus == kw["gpus"]


def test_export_refuses_what_no_config_function_builds(cli):
    args = ["--gpus", "8", "--global-batch", "16", "--stack", "torchtitan-0.3", "--hardware", "h100-sxm"]
    assert_one_error(cli("export", "--format", "torchtitan", "--model", "llama3-8b", "--precision", "fp8", *args),
                     "llama3_8b (no fp8 converter (bf16)", "model_spec")
    assert_one_error(cli("export", "--format", "torchtitan", "--model", "mistral-7b", *args),
                     "no torchtitan release/0.3 @4f9e9a47d config function")


def test_fit_exports_and_reads_back(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--hardware", "h100-sxm", "--stack", "torchtitan-0.3",
            "--export", "torchtitan")
    assert r.exit_code == 0, r.stderr
    assert "-m torchtitan.train --module llama3 --config llama3_8b" in r.stdout
    assert "--nnodes=2 --nproc_per_node=8" in r.stdout


def test_deepseek_v3_671b_reads_by_hand(tmp_path):
    """deepseek_v3_671b (config_registry.py l. 206-242): local_batch_size 4, seq_len 4096, steps 10000,
    disable_cuda_graphs, Interleaved1F1B (pp 1 here: not read), ep 2, compile of the loss only, SelectiveAC, flex.
    NGPU 8, shard -1 -> 8; global 4 x 8 = 32; tokens 10000 x 32 x 4096 = 1,310,720,000."""
    p = _line(tmp_path, "MODULE=deepseek_v3 CONFIG=deepseek_v3_671b NGPU=8 ./run_train.sh")
    cfg = load_trainer_config(p, hardware="h100-sxm")
    j = cfg.job
    assert (j["model"], j["gpus"], j["ep"], j["etp"], j["micro_batch"], j["global_batch"]) == ("deepseek-v3", 8, 2, 1, 4, 32)
    assert (j["seq_len"], j["tokens"], j["recompute"], j["torch_compile"]) == (4096, 1_310_720_000.0, "selective", False)
    assert (j["attention_kernel"], j["moe_dispatcher"]) == ("flex", "alltoall")
    assert "training.disable_cuda_graphs=true (no CUDA graph: the step as the planner prices it)" in cfg.ignored
    assert any(a.startswith("moe_dispatcher=alltoall: deepseek_v3_671b keeps") for a in cfg.assumed)


def test_check_spells_its_fix_as_0_3_options(cli, tmp_path):
    """planner check's suggestion in the file's own spelling (spelling.py): 0.3.0's options, not TOML keys.
    llama3_8b at local batch 4 with no recompute on 8 x H100 does not fit; the TP / CP fixes keep the global batch
    (4 x 8 = 32) and name the leftover shard degree."""
    p = _line(tmp_path, "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --training.local_batch_size 4 "
                        "activation-checkpoint:none")
    r = cli("check", str(p), "--hardware", "h100-sxm")
    assert r.exit_code == 1, r.stderr
    assert "[torchtitan-0.3: --parallelism.tensor_parallel_degree 8; --parallelism.data_parallel_shard_degree -1 " \
           "(the leftover GPUs: 8 -> 1); --training.global_batch_size 32]" in r.stdout
    assert "[parallelism]" not in r.stdout
