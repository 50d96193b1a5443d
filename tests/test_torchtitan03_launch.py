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
    """Each config function's model is a flavor TORCHTITAN_03 names, mapped to a function that builds it (one table
    of what 0.3.0 builds; several functions of one model: the table names the bf16 one with the chunked loss)."""
    for (module, name), cf in CONFIG_FUNCTIONS.items():
        first = CONFIG_FUNCTIONS[TORCHTITAN_03[cf.flavor]]
        assert first.flavor == cf.flavor and first.module == module
        assert first.chunked_loss and (not first.converter or first.name == "llama3_405b")  # 405B: float8 only
        assert not first.mtp_layers  # the table's function builds no MTP module (deepseek_v3_debugmodel, not _mtp)
    assert set(TORCHTITAN_03.values()) <= set(CONFIG_FUNCTIONS)


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


@pytest.mark.parametrize("text, gpus", [
    ("NGPU=4; MODULE=llama3; CONFIG=llama3_8b\nexport NGPU MODULE CONFIG\n./run_train.sh --training.local_batch_size 2\n", 4),
    ("NGPU=4;MODULE=llama3\nCONFIG=llama3_8b ./run_train.sh --training.local_batch_size 2\n", 4),
    ("cd /work; MODULE=llama3 CONFIG=llama3_8b NGPU=2 ./run_train.sh --training.local_batch_size 2\n", 2),
    ("export NGPU='4;' ; MODULE=llama3 CONFIG=llama3_8b ./run_train.sh --training.local_batch_size 2\n", None),
])
def test_a_semicolon_list_runs_its_commands_in_turn(tmp_path, text, gpus):
    """`NGPU=4; MODULE=llama3; CONFIG=llama3_8b` sets the three, as bash runs a ; list's commands in turn: the reader
    kept the ';' in each value (NGPU '8;' is not a GPU count, exit 2 on a script bash runs; fuzz13, by hand). A
    quoted ';' stays in its value (NGPU '4;' still refused); a `cd ...;` before the launch is a command not read."""
    p = tmp_path / "run.sh"
    p.write_text("#!/usr/bin/bash\n" + text)
    if gpus is None:
        with pytest.raises(PlannerError, match="NGPU"):
            load_trainer_config(p)
        return
    j = load_trainer_config(p).job
    assert (j["model"], j["gpus"], j["micro_batch"]) == ("llama3-8b", gpus, 2)


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
    # the NVFP4 converter (fqns the first 85% of layers): not transcribed
    p = _line(tmp_path, "MODULE=qwen3 CONFIG=qwen3_8b_first_85_pct_layers_nvfp4 ./run_train.sh")
    assert_one_error(cli("explain", str(p)), "qwen3_8b_first_85_pct_layers_nvfp4", "not transcribed",
                     "--module llama3 --config llama3_8b", "--module qwen3 --config qwen3_30b_a3b")
    # gpt_oss's debug model differs from main's flavor in a priced field: refused naming it
    p = _line(tmp_path, "MODULE=gpt_oss CONFIG=gpt_oss_debugmodel ./run_train.sh", "g.sh")
    assert_one_error(cli("explain", str(p)), "gpt_oss_debugmodel", "vocab_size 2048", "201088")
    # run_train.sh's defaults (l. 29-32): llama3_debugmodel; a bare ./run_train.sh is read when named a 0.3 line
    p = _line(tmp_path, "./run_train.sh", "d.sh")
    assert detect_format(p) is None
    r = cli("explain", str(p), "--config-format", "torchtitan-0.3", "--hardware", "h100-sxm")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("torchtitan:llama3/debugmodel_flex_attn on 8 x h100-sxm")


# the config functions that build another token dispatcher (models/common/config_utils.py
# make_token_dispatcher_config l. 360-425) that the planner does not price: refused, each naming what 0.3 runs
# (HybridEP's are priced: tests/test_torchtitan03_hybridep.py)
@pytest.mark.parametrize("module, config, words", [
    # expert_parallel_degree 1 with MinimalAsyncEP: token_dispatcher.py l. 1238-1242 raises at start-up
    ("deepseek_v3", "deepseek_v3_debugmodel_minimal_async_ep", ("l. 119-135", "expert_parallel_degree 1",
                                                                "symmetric-memory", "all_to_all_single")),
    ("deepseek_v3", "deepseek_v3_16b_minimal_async_ep", ("l. 185-203", "requires expert parallelism",
                                                         "does not provide microbatch communication overlap",
                                                         "ep x n x min(k, E / ep) rows")),
    # DeepEP v2 (ElasticBuffer), not the v1 Buffer the planner's deepep prices: the compact path's transfer is
    # deepep's, the buffer's size is DeepEP's C++ (calculate_elastic_buffer_size) and 0.3 pins no v2 commit
    ("qwen3", "qwen3_moe_deepep", ("l. 406-446", "ElasticBuffer", "DeepEP v1's Buffer", "compact path",
                                   "get_buffer_size_hint", "@dd758caf", "pins no DeepEP v2 commit")),
])
def test_other_token_dispatchers_refused_naming_why(cli, tmp_path, module, config, words):
    p = _line(tmp_path, f"MODULE={module} CONFIG={config} NGPU=8 ./run_train.sh")
    assert_one_error(cli("explain", str(p)), config, "not transcribed", "lists alltoall and hybridep, not deepep"
                     if "minimal" not in config else "no planner dispatcher prices", *words)


@pytest.mark.parametrize("module, config, words", [
    # flex_flash: FlexAttention with kernel_options BACKEND FLASH (config_utils.py l. 85-94), no rate of its own
    ("qwen3", "qwen3_debugmodel_flex_flash", ("'BACKEND': 'FLASH'", "l. 85-94", "no rate of its own",
                                              "lists flex only")),
    # NVFP4: torchao's NVFP4Linear, TE's numerics, not the stack's recipes nor its costs
    ("llama3", "llama3_8b_first_85_pct_layers_nvfp4", ("NVFP4LinearConverter l. 264-315", "ceil(0.15 x layers)",
                                                       "NVFP4BlockScaling", "@36027d82d", "lists no nvfp4 recipe",
                                                       "re-quantizes the bf16 weight at every GEMM")),
    ("qwen3", "qwen3_debugmodel_nvfp4", ("nvfp4_mm_triton l. 140-240", "fp8_recipes rowwise, mxfp8")),
])
def test_flex_flash_and_nvfp4_refused_naming_what_is_missing(cli, tmp_path, module, config, words):
    p = _line(tmp_path, f"MODULE={module} CONFIG={config} NGPU=8 ./run_train.sh")
    assert_one_error(cli("explain", str(p)), config, "not transcribed", *words)


def test_gpu_count_must_match(tmp_path):
    p = _line(tmp_path, "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --parallelism.data_parallel_shard_degree 2")
    with pytest.raises(PlannerError, match="product .* is 2 GPUs, but NGPU starts 8"):
        load_trainer_config(p)


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(**kw))
    return to_json(settings, plan, evaluate(settings, plan))


# every 0.3.0 config function's loss is ChunkedLossWrapper (torchtitan03.LOSS_CHUNKS): the plans price it
T03 = dict(hardware="h100-sxm", stack="torchtitan-0.3", chunked_loss=True)
ROUND_TRIPS = [
    (dict(model="llama3-8b", gpus=16, tp=2, pp=2, global_batch=64), "llama3_8b"),
    (dict(model="torchtitan:qwen3/30B-A3B", gpus=16, ep=8, global_batch=32, recompute="full"), "qwen3_30b_a3b"),
    (dict(model="torchtitan:qwen3/14B", gpus=16, tp=2, global_batch=32, recompute="full"), "qwen3_14b"),
    (dict(model="torchtitan:qwen3/8B", gpus=8, global_batch=16, seq_len=2048), "sft_qwen3_8b_math"),
    (dict(model="torchtitan:llama3/debugmodel_flex_attn", gpus=8, global_batch=64, seq_len=2048), "llama3_debugmodel"),
    (dict(model="torchtitan:llama3/debugmodel_flex_attn", gpus=8, global_batch=64, seq_len=2048, chunked_loss=False),
     "llama3_debugmodel_ce_loss"),
    (dict(model="torchtitan:qwen3/debugmodel_moe", gpus=8, ep=4, global_batch=32), "qwen3_moe_debug"),
    (dict(model="torchtitan:gpt_oss/20b", gpus=16, ep=4, global_batch=16, recompute="full"), "gpt_oss_20b"),
    (dict(model="torchtitan:gpt_oss/120b", gpus=32, pp=2, ep=8, global_batch=64, recompute="full"), "gpt_oss_120b"),
    (dict(model="torchtitan:deepseek_v3/16B", gpus=16, pp=2, ep=8, global_batch=64, moe_aux_loss_coeff=0.0),
     "deepseek_v3_16b"),
    (dict(model="llama3-8b", gpus=8, hardware="b200", precision="fp8", fp8_recipe="mxfp8", fp8_output_layer=True,
          torch_compile=True, global_batch=8), "llama3_8b_mxfp8"),
    (dict(model="llama3-70b", gpus=64, tp=8, pp=1, global_batch=64, recompute="full", sequence_parallel=False), "llama3_70b"),
    # the job field spmd_backend (configs.py l. 163-165): written as --parallelism.spmd-backend, read back (memory.py [sb])
    (dict(model="llama3-70b", gpus=64, tp=8, pp=1, global_batch=64, recompute="selective", spmd_backend="partial_dtensor"),
     "llama3_70b"),
    (dict(model="llama3-405b", gpus=128, tp=8, pp=1, global_batch=32, precision="fp8", fp8_recipe="rowwise",
          torch_compile=True, tp_comm_overlap=True), "llama3_405b"),
    (dict(model="deepseek-v3", gpus=256, pp=8, ep=32, global_batch=256, precision="bf16", moe_aux_loss_coeff=0.0),
     "deepseek_v3_671b"),
    # one MTP module and MTPLoss (the plain cross-entropy): deepseek_v3_debugmodel_mtp (tt03disp)
    (dict(model="torchtitan:deepseek_v3/debugmodel_flex_attn", gpus=8, global_batch=64, seq_len=2048, mtp_layers=1,
          chunked_loss=False, recompute="selective"), "deepseek_v3_debugmodel_mtp"),
]


@pytest.mark.parametrize("kw, config", ROUND_TRIPS, ids=[c for _, c in ROUND_TRIPS])
def test_export_reads_back_as_the_same_plan(tmp_path, kw, config):
    """export -> read back -> the same plan_signature and memory (check_readback, as fit --export runs it)."""
    row = _row(**{**T03, **kw})
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
            "--export", "torchtitan")  # the chunked loss: the stack's default (torchtitan-0.3.yaml defaults)
    assert r.exit_code == 0, r.stderr
    assert "-m torchtitan.train --module llama3 --config llama3_8b" in r.stdout
    assert "--nnodes=2 --nproc_per_node=8" in r.stdout


def test_export_refuses_the_plain_loss(cli):
    """Every 0.3.0 config function but llama3_debugmodel_ce_loss wraps its loss in ChunkedLossWrapper and no option
    removes the wrapper: the stack's default is the chunked loss (stack_db torchtitan-0.3.yaml defaults.chunked_loss,
    so a plain export writes llama3_8b), and a plan priced with --no-chunked-loss is refused, naming the function
    and the fix."""
    args = ["--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--stack", "torchtitan-0.3", "--hardware",
            "h100-sxm"]
    r = cli("export", "--format", "torchtitan", *args)
    assert r.exit_code == 0, r.stderr
    assert "--module llama3 --config llama3_8b" in r.stdout
    assert_one_error(cli("export", "--format", "torchtitan", *args, "--no-chunked-loss"),
                     "plain cross-entropy", "llama3_8b l. 184-216", "ChunkedLossWrapper", "--chunked-loss")


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


# ------------------------------------------------------------------ the config functions added in tt03more
def _read(tmp_path, line: str, hardware: str = "h100-sxm"):
    return load_trainer_config(_line(tmp_path, line), hardware=hardware)


def test_qwen3_30b_a3b_reads_by_hand(tmp_path):
    """qwen3_30b_a3b (qwen3/config_registry.py l. 295-327): model_registry('30B-A3B'), local_batch_size 2, seq_len
    4096, steps 3000, shard -1, tp / cp / pp 1, FullAC, flex. NGPU 16 with --parallelism.expert_parallel_degree 8:
    shard 16, global 2 x 16 = 32, tokens 3000 x 32 x 4096 = 393,216,000; EP borrows 8 of the 16 shard ranks (with
    --training.disable_cuda_graphs: EP under the standard all-to-all and CUDA graphs stops at start-up, trainer.py
    l. 189-210)."""
    cfg = _read(tmp_path, "MODULE=qwen3 CONFIG=qwen3_30b_a3b NGPU=16 ./run_train.sh --parallelism.expert_parallel_degree 8 "
                          "--training.disable_cuda_graphs")
    j = cfg.job
    assert (j["model"], j["gpus"], j["tp"], j["pp"], j["ep"]) == ("torchtitan:qwen3/30B-A3B", 16, 1, 1, 8)
    assert (j["micro_batch"], j["global_batch"], j["seq_len"], j["tokens"]) == (2, 32, 4096, 393_216_000.0)
    assert (j["recompute"], j["attention_kernel"], j["chunked_loss"], j["moe_dispatcher"]) == ("full", "flex", True,
                                                                                                "alltoall")
    assert any(a.startswith("qwen3 30B-A3B: rope max_seq_len 40960") and "262144" in a for a in cfg.assumed)
    assert any("qwen3/__init__.py l. 613-621" in a for a in cfg.assumed if a.startswith("moe_dispatcher"))
    # said in 0.3.0's terms, not the TOML's [model] table
    assert not any("[model] name" in a for a in cfg.assumed)
    assert any(a.startswith("model=torchtitan:qwen3/30B-A3B: --module qwen3 --config qwen3_30b_a3b: "
                            "model_registry('30B-A3B')") for a in cfg.assumed)


def test_qwen3_dense_functions_read_by_hand(tmp_path):
    """qwen3_0_6b (l. 176-203): local 4, seq 4096, steps 10, SelectiveAC: NGPU 8 -> global 32, tokens 10 x 32 x 4096
    = 1,310,720; tied embeddings (models/qwen3/__init__.py _0_6b l. 262 enable_weight_tying=True). qwen3_32b
    (l. 330-362): local 2, steps 3000, FullAC: global 16, tokens 3000 x 16 x 4096 = 196,608,000."""
    from planner.catalog import load_model

    j = _read(tmp_path, "MODULE=qwen3 CONFIG=qwen3_0_6b NGPU=8 ./run_train.sh").job
    assert (j["model"], j["micro_batch"], j["global_batch"], j["tokens"], j["recompute"]) == (
        "torchtitan:qwen3/0.6B", 4, 32, 1_310_720.0, "selective")
    m = load_model(j["model"])
    assert (m.hidden_size, m.num_layers, m.ffn_hidden_size, m.tied_embeddings, m.vocab_size) == (1024, 28, 3072, True,
                                                                                                151936)
    j = _read(tmp_path, "MODULE=qwen3 CONFIG=qwen3_32b NGPU=8 ./run_train.sh").job
    assert (j["model"], j["micro_batch"], j["global_batch"], j["tokens"], j["recompute"]) == (
        "torchtitan:qwen3/32B", 2, 16, 196_608_000.0, "full")


def test_gpt_oss_120b_reads_by_hand(tmp_path):
    """gpt_oss_120b (gpt_oss/config_registry.py l. 101-129): local 1, seq 8192, steps 10000, ep 1, FullAC,
    model_registry('120b') with attn_backend 'varlen' (gpt_oss/__init__.py l. 391), priced as flex (stack
    torchtitan-0.3). NGPU 16: global 16, tokens 10000 x 16 x 8192 = 1,310,720,000."""
    cfg = _read(tmp_path, "MODULE=gpt_oss CONFIG=gpt_oss_120b NGPU=16 ./run_train.sh")
    j = cfg.job
    assert (j["model"], j["gpus"], j["micro_batch"], j["global_batch"]) == ("torchtitan:gpt_oss/120b", 16, 1, 16)
    assert (j["seq_len"], j["tokens"], j["recompute"], j["attention_kernel"]) == (8192, 1_310_720_000.0, "full", "flex")
    assert any(a.startswith("attention_kernel=flex: gpt_oss_120b builds its model with attn_backend 'varlen'")
               and "priced as flex" in a for a in cfg.assumed)


def test_deepseek_v3_16b_reads_by_hand(tmp_path):
    """deepseek_v3_16b (deepseek_v3/config_registry.py l. 138-170): local 4, seq 4096, steps 1000,
    disable_cuda_graphs, Interleaved1F1B (pp 1: not read), ep 8, compile of the loss only, SelectiveAC, flex.
    NGPU 8: global 32, tokens 1000 x 32 x 4096 = 131,072,000."""
    j = _read(tmp_path, "MODULE=deepseek_v3 CONFIG=deepseek_v3_16b NGPU=8 ./run_train.sh").job
    assert (j["model"], j["ep"], j["etp"], j["micro_batch"], j["global_batch"]) == ("torchtitan:deepseek_v3/16B", 8, 1,
                                                                                     4, 32)
    assert (j["tokens"], j["recompute"], j["torch_compile"], j["chunked_loss"]) == (131_072_000.0, "selective", False,
                                                                                    True)


def test_llama3_8b_mxfp8_converts_every_linear(tmp_path):
    """llama3_8b_mxfp8 (l. 242-254): llama3_8b with compile of the model and MXFP8LinearConverter(fqns default []):
    components/quantization/mx.py l. 79-95 converts every Linear when fqns is empty, lm_head included -> precision fp8,
    recipe mxfp8, the output layer in fp8 (filter_fqns [])."""
    j = _read(tmp_path, "MODULE=llama3 CONFIG=llama3_8b_mxfp8 NGPU=8 ./run_train.sh", "b200").job
    assert (j["precision"], j["fp8_recipe"], j["fp8_output_layer"], j["filter_fqns"]) == ("fp8", "mxfp8", True, [])
    assert (j["torch_compile"], j["micro_batch"], j["global_batch"], j["tokens"]) == (True, 1, 8, 65_536_000.0)


def test_chunked_loss_is_named_and_priced(tmp_path):
    """Every config function's loss is ChunkedLossWrapper (llama3_8b l. 187-191): the job field chunked_loss,
    named in the output with the terms that price it; --loss.num_chunks other than 8 is listed as not modelled."""
    cfg = load_trainer_config(DATA / "run_train_8b.sh", hardware="h100-sxm")
    assert cfg.job["chunked_loss"] is True
    assert any(a.startswith("chunked_loss=true: llama3_8b's loss is ChunkedLossWrapper") and "memory._chunked_loss" in a
               for a in cfg.assumed)
    cfg = _read(tmp_path, "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --loss.num_chunks 4")
    assert any(n.startswith("loss.num_chunks=4") and "priced at the stack's 8" in n for n in cfg.not_modelled)
    cfg = _read(tmp_path, "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --loss.num_chunks 8")
    assert not any("num_chunks" in n for n in cfg.not_modelled + cfg.ignored)


@pytest.mark.parametrize("option", ["--encoder.t5_encoder google/t5-v1_1-xxl", "--inference.prompts_path p.txt",
                                    "--inference.sampling.denoising_steps 50"])
def test_flux_only_options_are_refused_with_a_language_model(cli, tmp_path, option):
    """encoder.* and inference.* are FluxTrainer.Config's (models/flux/trainer.py l. 34-43): tyro parses a llama3
    function's Trainer.Config, which has neither section, and stops -- exit 2, naming the option and flux."""
    p = _line(tmp_path, f"MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh {option}")
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), str(p), option.split()[0], "FluxTrainer.Config")


def test_sft_qwen3_8b_math_reads_by_hand(tmp_path):
    """sft_qwen3_8b_math (qwen3/config_registry.py l. 449-498): model_registry("8B", attn_backend="varlen"), local 1,
    seq 2048, steps 180, SelectiveAC: NGPU 8 -> global 8, tokens 180 x 8 x 2048 = 2,949,120; varlen priced as flex;
    the chat data loader listed. Its export says what the function trains on."""
    cfg = _read(tmp_path, "MODULE=qwen3 CONFIG=sft_qwen3_8b_math NGPU=8 ./run_train.sh")
    j = cfg.job
    assert (j["model"], j["micro_batch"], j["global_batch"], j["seq_len"], j["tokens"]) == (
        "torchtitan:qwen3/8B", 1, 8, 2048, 2_949_120.0)
    assert (j["recompute"], j["attention_kernel"], j["chunked_loss"]) == ("selective", "flex", True)
    assert any("ChatDataLoader" in a for a in cfg.assumed)
    _, notes = export_plan(_row(**{**T03, "model": "torchtitan:qwen3/8B", "gpus": 8, "global_batch": 8,
                                   "seq_len": 2048})["plan"], "torchtitan")
    assert any(n.startswith("sft_qwen3_8b_math is 0.3.0's one config function of qwen3 8B") for n in notes)


def test_debug_functions_read_by_hand(tmp_path):
    """llama3_debugmodel_ce_loss (l. 174-181): llama3_debugmodel with config.loss = CrossEntropyLoss.Config: no chunked
    loss; llama3_debugmodel (l. 34-70) local 8, seq 2048, steps 10 -> NGPU 8: global 64, tokens 10 x 64 x 2048 =
    1,310,720. llama3_debugmodel_float8 (l. 96-107): Float8LinearConverter defaults, rowwise, filter_fqns [] -> the
    output layer in fp8. qwen3_moe_debug (l. 373-403): local 4, seq 4096, ep 1."""
    cfg = _read(tmp_path, "MODULE=llama3 CONFIG=llama3_debugmodel_ce_loss NGPU=8 ./run_train.sh")
    j = cfg.job
    assert (j["model"], j["global_batch"], j["tokens"]) == ("torchtitan:llama3/debugmodel_flex_attn", 64, 1_310_720.0)
    assert j["chunked_loss"] is False  # said, not left to the stack's default (true)
    assert any(a.startswith("chunked_loss=false: llama3_debugmodel_ce_loss's loss is the plain CrossEntropyLoss")
               for a in cfg.assumed)
    assert _read(tmp_path, "MODULE=llama3 CONFIG=llama3_debugmodel NGPU=8 ./run_train.sh").job["chunked_loss"] is True
    j = _read(tmp_path, "MODULE=llama3 CONFIG=llama3_debugmodel_float8 NGPU=8 ./run_train.sh").job
    assert (j["precision"], j["fp8_recipe"], j["fp8_output_layer"]) == ("fp8", "rowwise", True)
    j = _read(tmp_path, "MODULE=qwen3 CONFIG=qwen3_moe_debug NGPU=8 ./run_train.sh").job
    assert (j["model"], j["micro_batch"], j["global_batch"], j["seq_len"]) == ("torchtitan:qwen3/debugmodel_moe", 4, 32,
                                                                               4096)


@pytest.mark.parametrize("option, words", [
    ("--parallelism.tensor_parallel_degree 3", ("the GPU count 8 (NGPU) is not a multiple", "--parallelism.* degrees")),
    ("--training.global_batch_size 7", ("--training.global_batch_size 7 is not a multiple",)),
    ("--optimizer.implementation bogus", ("--optimizer.implementation 'bogus'",)),
])
def test_reused_refusals_speak_the_launch_lines_spelling(cli, tmp_path, option, words):
    """The TOML mapping's refusals, reused, name 0.3.0's options (--section.key) and the launcher's GPU count, not
    [section] keys or a --gpus the user did not give."""
    p = _line(tmp_path, f"MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh {option}")
    r = cli("explain", str(p), "--hardware", "h100-sxm")
    assert_one_error(r, str(p), *words)
    assert "[training]" not in r.stderr and "[parallelism]" not in r.stderr and "--gpus" not in r.stderr


# ------------------------------------------------------------------ multi-token prediction (tt03disp)
DSV3_DEBUG = "torchtitan:deepseek_v3/debugmodel_flex_attn"


def test_deepseek_v3_debugmodel_mtp_reads_by_hand(tmp_path):
    """deepseek_v3_debugmodel_mtp (deepseek_v3/config_registry.py l. 73-79): deepseek_v3_debugmodel's run (local 8,
    seq 2048, steps 10, ep 1, SelectiveAC) with model_registry("debugmodel", num_mtp_layers=1) and MTPLoss (no
    ChunkedLossWrapper). NGPU 8: shard 8, global 8 x 8 = 64, tokens 10 x 64 x 2048 = 1,310,720. The MTP module
    (mtp.py MTPTransformerBlock l. 109-164, a copy of the last layer, __init__.py l. 291-316) priced as the planner's
    (params.mtp_params): eh_proj 2 x 256 x 256 = 131,072, three norms 3 x 256 (enorm, hnorm, mtp_norm: Megatron's
    final_layernorm), one MoE layer of the debug model: MLA wq 256 x 16 x 192 = 786,432, wkv_a 256 x 576 = 147,456,
    kv_norm 512, wkv_b 512 x 16 x 256 = 2,097,152, wo 2048 x 256 = 524,288, two norms 512, router 256 x 8 + the 8
    expert biases = 2,056, experts 8 x 3 x 256 x 256 = 1,572,864, shared 3 x 256 x 512 = 393,216: 5,524,488;
    in all 5,656,328."""
    cfg = _read(tmp_path, "MODULE=deepseek_v3 CONFIG=deepseek_v3_debugmodel_mtp NGPU=8 ./run_train.sh")
    j = cfg.job
    assert (j["model"], j["gpus"], j.get("ep", 1), j["micro_batch"], j["global_batch"], j["seq_len"]) == (DSV3_DEBUG, 8, 1, 8, 64, 2048)
    assert (j["tokens"], j["recompute"], j["mtp_layers"], j["chunked_loss"]) == (1_310_720.0, "selective", 1, False)
    assert any(a.startswith("mtp_layers=1: deepseek_v3_debugmodel_mtp's model_registry(num_mtp_layers=1)") for a in cfg.assumed)
    assert any(a.startswith("chunked_loss=false: deepseek_v3_debugmodel_mtp's loss is MTPLoss") for a in cfg.assumed)
    settings, plan, _ = resolve(Job(**j))
    row = to_json(settings, plan, evaluate(settings, plan))
    assert row["params"]["mtp"] == 2 * 256 * 256 + 3 * 256 + 5_524_488 == 5_656_328
    assert row["plan"]["mtp_layers"] == 1 and not settings.chunked_loss
    # the same job without the module (deepseek_v3_debugmodel's model): MTP adds its layer, projection and logits
    base = _read(tmp_path, "MODULE=deepseek_v3 CONFIG=deepseek_v3_debugmodel NGPU=8 ./run_train.sh").job
    s0, p0, _ = resolve(Job(**{**base, "chunked_loss": False}))
    r0 = to_json(s0, p0, evaluate(s0, p0))
    assert "mtp" not in r0["params"] and r0["plan"]["mtp_layers"] == 0
    assert row["time"]["compute_s"] > r0["time"]["compute_s"]
    assert row["memory"]["activations_bytes"] > r0["memory"]["activations_bytes"]


@pytest.mark.parametrize("option", ["--parallelism.pipeline_parallel_degree 2", "--parallelism.context_parallel_degree 2"])
def test_mtp_under_pp_or_cp_is_refused(cli, tmp_path, option):
    """MTPDecoder.Config.update_from_config (mtp.py l. 199-209) raises NotImplementedError under PP or CP: start-up
    rule TORCHTITAN_MTP_PP_CP (code 79). CUDA graphs off, which PP needs first (trainer.py l. 183-187)."""
    p = _line(tmp_path, f"MODULE=deepseek_v3 CONFIG=deepseek_v3_debugmodel_mtp NGPU=8 ./run_train.sh {option} "
                        "--training.disable_cuda_graphs")
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), "TORCHTITAN_MTP_PP_CP", "mtp.py",
                     "l. 199-209", "pp 1 and cp 1")


def test_mtp_with_the_chunked_loss_is_refused(cli):
    """trainer.py l. 510-535 sets _skip_lm_head under ChunkedLossWrapper; MTPDecoder.forward raises then (l. 271-275):
    a job asking both on torchtitan-0.3 is refused; one that leaves chunked_loss out takes the plain loss."""
    args = ["--model", DSV3_DEBUG, "--gpus", "8", "--hardware", "h100-sxm", "--stack", "torchtitan-0.3",
            "--mtp-layers", "1", "--global-batch", "16"]
    assert_one_error(cli("explain", *args, "--chunked-loss"), "chunked_loss with 1 multi-token prediction",
                     "runs.mtp_chunked_loss false", "l. 271-275", "--no-chunked-loss")
    settings, _, _ = resolve(Job(model=DSV3_DEBUG, gpus=8, hardware="h100-sxm", stack="torchtitan-0.3", mtp_layers=1))
    assert settings.chunked_loss is False and settings.model.mtp_layers == 1
    settings, _, _ = resolve(Job(model=DSV3_DEBUG, gpus=8, hardware="h100-sxm", stack="torchtitan-0.3"))
    assert settings.chunked_loss is True  # without MTP: the stack's default, as before


def test_fit_with_mtp_ranks_no_pp_or_cp():
    """fit on torchtitan-0.3 with an MTP module never ranks PP or CP: rule 79 masks them and counts them. Ranked by
    memory, the search without the module puts PP and CP plans on top (the debug model's 6 layers split over stages);
    with it none, and the plans it drops are exactly the feasible PP / CP ones (the debug model fits either way)."""
    from planner.search import fit

    job = dict(model=DSV3_DEBUG, gpus=8, hardware="h100-sxm", stack="torchtitan-0.3", global_batch=64, seq_len=2048)
    free = fit(Job(**job), top=50, objective="memory")
    assert any(r["plan"]["pp"] > 1 for r in free.rows) and any(r["plan"]["cp"] > 1 for r in free.rows)
    res = fit(Job(**job, mtp_layers=1), top=50, objective="memory")
    assert res.rows and all(r["plan"]["pp"] == 1 and r["plan"]["cp"] == 1 for r in res.rows)
    assert all(r["plan"]["mtp_layers"] == 1 and not r["plan"].get("chunked_loss") for r in res.rows)
    masked = next(v for k, v in res.counts.reasons.items() if "TORCHTITAN_MTP_PP_CP" in k)
    assert not any("TORCHTITAN_MTP_PP_CP" in k for k in free.counts.reasons)
    assert res.counts.considered == free.counts.considered and res.counts.feasible + masked == free.counts.feasible
    assert masked > 0


def test_export_refuses_mtp_no_function_builds(cli):
    args = ["--model", DSV3_DEBUG, "--gpus", "8", "--global-batch", "64", "--seq-len", "2048", "--stack",
            "torchtitan-0.3", "--hardware", "h100-sxm"]
    assert_one_error(cli("export", "--format", "torchtitan", *args, "--mtp-layers", "2"),
                     "2 multi-token prediction module(s)", "deepseek_v3_debugmodel_mtp", "num_mtp_layers", "--mtp-layers")


def test_mtp_module_is_never_recomputed_on_0_3():
    """torchtitan 0.3's activation checkpointing wraps the children of model.layers only (activation_checkpoint.py
    l. 152-160) and the MTP modules live in model.mtp_layers (mtp.py l. 217-224): under selective or full AC the MTP
    layer keeps what it keeps without recompute (stack memory.mtp_checkpointed false). The debug model at micro-batch
    8 x 2048 = 16,384 tokens, h 256, V 2048, TP 1: the module holds its MoE layer's un-recomputed activations, the two
    normed halves 16,384 x 2 x 2 B x 256 = 16,777,216 B and its own output layer and loss, 16,384 x (2 x 256 + 2 x 256
    (the saved norm output) + 4 x 2048 (what the stack's plain loss saves, its fp32 log-softmax: loss_saved_per_logit 12
    less loss_transient_per_logit 8, the transient counted once at the main loss, memory.py [lt])) = 150,994,944 B
    (419,430,400 B before [lt], at 12 B a logit); and the step adds no selective re-run for it (its compute is the same
    under none and selective)."""
    from planner.memory import _PerLayer
    from planner.params import count_params

    job = dict(model=DSV3_DEBUG, gpus=8, hardware="h100-sxm", stack="torchtitan-0.3", global_batch=64, seq_len=2048)
    per, comp = {}, {}
    for rc in ("none", "selective", "full"):
        for m in (0, 1):
            settings, plan, _ = resolve(Job(**job, mtp_layers=m, recompute=rc))
            if m:
                per[rc] = _PerLayer(settings, plan, count_params(settings.model))
            comp[rc, m] = to_json(settings, plan, evaluate(settings, plan))["time"]["compute_s"]
    moe = per["none"].stored[1]  # the MoE kind (layers 1-5), the MTP module's
    assert float(per["selective"].stored[1]) < float(moe)  # selective AC keeps less in a main layer ...
    for rc in ("none", "selective", "full"):  # ... but not in the MTP module's
        assert float(per[rc].mtp) == pytest.approx(float(moe) + 16_777_216 + 150_994_944)
        assert float(per[rc].mtp_buffer) == 0.0
    assert comp["selective", 1] - comp["selective", 0] == pytest.approx(comp["none", 1] - comp["none", 0], rel=1e-9)


def test_deepseek_v3_recipe_mtp_not_taken_on_0_3():
    """DeepSeek-V3's recipe trains one MTP module (model_zoo deepseek-v3.yaml training mtp_layers 1, arXiv:2412.19437
    sec. 2.2, 4.2): taken on megatron; on torchtitan-0.3, whose MTP runs only with the plain loss and without PP or CP,
    not taken (a job asks it with --mtp-layers), so plain DeepSeek-V3 plans there stay as they were."""
    from planner.recipe import apply

    data, notes = apply({"model": "deepseek-v3", "stack": "torchtitan-0.3", "gpus": 256, "hardware": "h100-sxm"})
    assert "mtp_layers" not in data
    assert any("mtp_layers 1 not taken: stack torchtitan-0.3 trains MTP modules only with its plain loss" in n
               and "TORCHTITAN_MTP_PP_CP" in n for n in notes)
    data, _ = apply({"model": "deepseek-v3", "stack": "megatron", "gpus": 256, "hardware": "h100-sxm"})
    assert data["mtp_layers"] == 1


def test_launch_lines_nccl_environment_is_read(cli, tmp_path):
    """NCCL reads NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE in every torchrun rank, whatever the trainer: the launch
    file's exports are the job fields nccl_algo / nccl_proto / nccl_nvls_enable, read as the Megatron launch readers
    read them (megatron.NCCL_ENV_FIELDS; megatron.read_nccl_env), and listed as assumed. Found by the fuzz's config-fit
    kind exporting them (2026-12-07): run_train_8b.sh with `export NCCL_NVLS_ENABLE=0` after its shebang was read with
    the variable listed as "not a torchtitan setting: not read" (in the text output, one of the settings "with no
    effect on memory or time") and priced with NVLS; any other variable is still listed as ignored."""
    base = (DATA / "run_train_8b.sh").read_text().split("\n", 1)
    p = tmp_path / "run.sh"
    p.write_text(base[0] + "\nexport NCCL_NVLS_ENABLE=0\nexport NCCL_ALGO=Ring NCCL_PROTO=simple FOO=1\n" + base[1])
    cfg = load_trainer_config(p, hardware="h100-sxm")
    j = cfg.job
    assert (j["nccl_nvls_enable"], j["nccl_algo"], j["nccl_proto"]) == (0, "Ring", "simple")
    assert any(a.startswith("nccl_nvls_enable=0: the launch line's NCCL_NVLS_ENABLE") for a in cfg.assumed)
    assert any(a.startswith("nccl_algo=Ring: the launch line's NCCL_ALGO") for a in cfg.assumed)
    assert not any("NCCL" in i for i in cfg.ignored)
    assert "environment FOO=1 (not a torchtitan setting: not read)" in cfg.ignored
    assert "nccl_nvls_enable" not in load_trainer_config(DATA / "run_train_8b.sh", hardware="h100-sxm").job
    # 3: NCCL forces NVLS on for any number but 0 and 2 (megatron.nccl_nvls_enable_value): the job's 1, said so
    p.write_text(base[0] + "\nexport NCCL_NVLS_ENABLE=3\n" + base[1])
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["nccl_nvls_enable"] == 1
    assert "nccl_nvls_enable=1: the launch line's NCCL_NVLS_ENABLE (the script sets it; NCCL reads '3' as 3: any " \
           "number but 0 and 2 forces NVLS on, as 1 does)" in cfg.assumed
    p.write_text(base[0] + "\nexport NCCL_ALGO=Tree\n" + base[1])  # all-gather left no algorithm (comm)
    assert_one_error(cli("explain", str(p)), "NCCL_ALGO=Tree")


def test_export_writes_the_nccl_environment_it_reads():
    """The launch line's NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE are read as the job fields (above): the export writes
    them as export lines before the torchrun line (export.nccl_exports, as the Megatron scripts do), not the note "the
    file cannot hold it", and the line reads back as the same plan with them."""
    row = _row(**{**T03, **dict(model="llama3-8b", gpus=8, nccl_nvls_enable=0, nccl_proto="simple")})
    text, notes = export_plan(row["plan"], "torchtitan")
    assert "export NCCL_PROTO=simple\nexport NCCL_NVLS_ENABLE=0\ntorchrun" in text
    assert not any("NCCL" in n for n in notes)
    assert parse_launch("", text).nccl == {"NCCL_PROTO": "simple", "NCCL_NVLS_ENABLE": "0"}
    check_readback(row, "torchtitan", text)
