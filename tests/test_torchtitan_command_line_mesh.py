"""A torchtitan TOML (and a torchtitan 0.3.0 launch line) under command-line mesh options, priced as torchtitan
would run it (issue 22, "flags beat files"; found by the fuzz helper): what the file leaves to the mesh is worked
out at the command line's tp / pp / cp laid over the file's degrees (planner/trainers/torchtitan.py read_sections).

torchtitan main @e347b1e5e (release/0.3 @4f9e9a47d alike):
  data_parallel_shard_degree -1 -> world / (dp_replicate x cp x tp x pp)   distributed/parallel_dims.py l. 48-51
                                                                           (0.3: l. 182-183)
  FSDP where dp_shard x cp > 1, else DDP / none                           parallel_dims.py l. 334-335
  global_batch_size -1 (default, config/job_config.py l. 256) ->
      local_batch_size x batch mesh (dp_replicate x dp_shard)             train.py l. 98-102, 196-200
                                                                          (0.3: trainer.py l. 326-328, 415-419)
  pp > 1: micro-batch pipeline_parallel_microbatch_size (default 1,      job_config.py l. 412-418 (0.3: configs.py
      local_batch_size / it micro-batches)                               l. 226); distributed/pipeline_parallel.py
                                                                          l. 186-194
  pp = 1: one micro-batch of local_batch_size per accumulation step
Every figure below is derived from those lines by hand; tests/data/trainer_configs/llama3_8b.toml: replicate 1,
shard -1, tp = pp = cp = 1, local_batch_size 1, global_batch_size unset (-1), steps 1000, seq_len 8192."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parent / "data" / "trainer_configs"
TOML = DATA / "llama3_8b.toml"
LAUNCH_03 = Path(__file__).parent / "data" / "torchtitan03" / "run_train_8b.sh"
KEYS = ("gpus", "tp", "pp", "cp", "dp", "global_batch", "micro_batch", "microbatches_per_step", "sharding",
        "sharding_mode")


def _variant(tmp_path, old: str, new: str) -> Path:
    text = TOML.read_text()
    assert old in text, old
    p = tmp_path / "job.toml"
    p.write_text(text.replace(old, new))
    return p


def _plan(cli, path, *args) -> tuple[dict, str]:
    r = cli("explain", path, *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    return {k: d["plan"][k] for k in KEYS}, r.stderr


def test_tp_2_resolves_the_files_minus_ones_at_the_command_lines_mesh(cli):
    """--gpus 8 --tp 2: dp_shard = 8 / (1 x 1 x 2 x 1) = 4, dp = 1 x 4 = 4; global_batch_size -1 = local 1 x 4 = 4
    (before: 8, the file's tp 1 dp 8, two accumulation steps torchtitan would not run); FSDP (4 x 1 > 1), fsdp2 (pp 1:
    reshard after forward, torchtitan's default); micro-batch local_batch_size 1, one per step. tokens = 1000 steps x
    4 x 8192 = 32,768,000. Without --tp the file's own mesh: dp 8, global 8, unchanged."""
    plan, err = _plan(cli, TOML, "--gpus", 8, "--tp", 2)
    assert plan == dict(gpus=8, tp=2, pp=1, cp=1, dp=4, global_batch=4, micro_batch=1, microbatches_per_step=1,
                        sharding="fsdp", sharding_mode="fsdp2")
    assert "data_parallel_shard_degree=4: -1 takes the leftover GPUs, 8 / 2 at the command line's mesh" in err
    assert "global_batch=4: global_batch_size -1 = local_batch_size 1 x dp 4 at the command line's mesh" in err
    assert "as torchtitan run with --parallelism.tensor_parallel_degree 2 works them out" in err
    assert "tp=2: the command line replaces the file's 1" in err
    r = json.loads(cli("explain", TOML, "--gpus", 8, "--tp", 2, "--format", "json").stdout)
    assert r["plan"]["tokens"] == 1000 * 4 * 8192
    own, err = _plan(cli, TOML, "--gpus", 8)
    assert (own["dp"], own["global_batch"], own["sharding"]) == (8, 8, "fsdp") and "command line's mesh" not in err


def test_tp_8_runs_no_fsdp_as_torchtitan_does(cli, tmp_path):
    """--gpus 8 --tp 8: dp_shard = 8 / 8 = 1, dp_shard x cp = 1: torchtitan applies no FSDP (parallel_dims.py l.
    334-335), so the plan is sharding none (before: fsdp, refused by TORCHTITAN_FSDP_MESH as a plan torchtitan does
    not run). With the file's training.dtype float32 (default) torchtitan then trains in fp32 (TP without FSDP:
    maybe_enable_amp off), refused by TORCHTITAN_FP32, the rule that holds; with dtype bfloat16 it is priced:
    dp 1, global 1 x 1 = 1, micro-batch 1."""
    r = cli("explain", TOML, "--gpus", 8, "--tp", 8)
    assert r.exit_code == 2 and "TORCHTITAN_FP32" in r.stderr and "TORCHTITAN_FSDP_MESH" not in r.stderr
    assert "Traceback" not in r.stderr
    bf16 = _variant(tmp_path, "[training]\n", '[training]\ndtype = "bfloat16"\n')
    plan, err = _plan(cli, bf16, "--gpus", 8, "--tp", 8)
    assert plan == dict(gpus=8, tp=8, pp=1, cp=1, dp=1, global_batch=1, micro_batch=1, microbatches_per_step=1,
                        sharding="none", sharding_mode="ddp")
    assert "sharding=none, sharding_mode=ddp: FSDP runs where dp_shard x cp > 1, here 1 x 1 at the command line's mesh" in err


def test_pp_2_takes_the_pipeline_micro_batch(cli, tmp_path):
    """--gpus 8 --pp 2: dp_shard = 8 / 2 = 4, global = 1 x 4 = 4, micro-batch pipeline_parallel_microbatch_size
    default 1 (before: local_batch_size, right only here by chance). With local_batch_size 4 and
    pipeline_parallel_microbatch_size 2: global = 4 x 4 = 16, micro-batch 2 (before: 4), 16 / (4 x 2) = 2
    micro-batches per step (local 4 / mbs 2, pipeline_parallel.py l. 194)."""
    plan, err = _plan(cli, TOML, "--gpus", 8, "--pp", 2)
    assert (plan["dp"], plan["global_batch"], plan["micro_batch"], plan["microbatches_per_step"]) == (4, 4, 1, 1)
    assert "micro_batch=1: pipeline_parallel_microbatch_size default 1" in err
    f = _variant(tmp_path, "local_batch_size = 1", "local_batch_size = 4")
    f.write_text(f.read_text().replace("context_parallel_degree = 1", "context_parallel_degree = 1\n"
                                                                    "pipeline_parallel_microbatch_size = 2"))
    plan, err = _plan(cli, f, "--gpus", 8, "--pp", 2)
    assert plan == dict(gpus=8, tp=1, pp=2, cp=1, dp=4, global_batch=16, micro_batch=2, microbatches_per_step=2,
                        sharding="fsdp", sharding_mode="fsdp2")
    assert "micro_batch=2: pipeline_parallel_microbatch_size at the command line's mesh" in err
    # at the file's pp 1 the pipeline key is ignored and the micro-batch is the local batch: 4, dp 8, global 32
    plan, err = _plan(cli, f, "--gpus", 8)
    assert (plan["micro_batch"], plan["dp"], plan["global_batch"]) == (4, 8, 32)
    d = json.loads(cli("explain", f, "--gpus", 8, "--format", "json").stdout)
    assert "parallelism.pipeline_parallel_microbatch_size=2 (pipeline_parallel_degree 1)" in [
        i["line"] for i in d["trainer_config"]["ignored"]]


def test_cp_2_and_a_stated_global_batch(cli, tmp_path):
    """--gpus 8 --cp 2: dp_shard = 8 / 2 = 4, FSDP over dp_shard x cp = 8 ranks, global = 1 x 4 = 4. A stated
    global_batch_size 32 is the file's at any mesh: --tp 2 gives dp 4, micro 1, 32 / (4 x 1) = 8 micro-batches."""
    plan, _ = _plan(cli, TOML, "--gpus", 8, "--cp", 2)
    assert (plan["dp"], plan["global_batch"], plan["sharding"]) == (4, 4, "fsdp")
    f = _variant(tmp_path, "local_batch_size = 1", "local_batch_size = 1\nglobal_batch_size = 32")
    plan, _ = _plan(cli, f, "--gpus", 8, "--tp", 2)
    assert (plan["dp"], plan["global_batch"], plan["micro_batch"], plan["microbatches_per_step"]) == (4, 32, 1, 8)


def test_a_mesh_the_gpus_do_not_fill_is_refused_naming_it(cli):
    """--gpus 8 --tp 3: 8 is no multiple of 3; torchtitan asserts the product is the world size (parallel_dims.py
    l. 48-56): exit 2 naming the command line's tp."""
    r = cli("explain", TOML, "--gpus", 8, "--tp", 3)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "not a multiple of tensor x pipeline x context x data_parallel_replicate = 3 (tp 3, pp 1, cp 1: the " \
           "command line's over the file's)" in r.stderr


def test_the_03_launch_line_alike(cli):
    """run_train_8b.sh (torchtitan 0.3.0, NGPU 8, tp 2, local_batch_size 2, shard and global batch -1): as written
    dp 4, global 2 x 4 = 8, micro 2. --tp 4: dp_shard 8 / 4 = 2, global 2 x 2 = 4, micro 2. --tp 1 --pp 2:
    dp_shard 8 / 2 = 4, global 2 x 4 = 8, micro pipeline_parallel_microbatch_size default 1 (configs.py l. 226),
    8 / (4 x 1) = 2 micro-batches."""
    plan, _ = _plan(cli, LAUNCH_03, "--hardware", "h100-sxm")
    assert (plan["dp"], plan["global_batch"], plan["micro_batch"]) == (4, 8, 2)
    plan, err = _plan(cli, LAUNCH_03, "--hardware", "h100-sxm", "--tp", 4)
    assert (plan["tp"], plan["dp"], plan["global_batch"], plan["micro_batch"], plan["sharding"]) == (4, 2, 4, 2, "fsdp")
    assert "global_batch=4: global_batch_size -1 = local_batch_size 2 x dp 2 at the command line's mesh" in err
    plan, _ = _plan(cli, LAUNCH_03, "--hardware", "h100-sxm", "--tp", 1, "--pp", 2)
    assert (plan["dp"], plan["global_batch"], plan["micro_batch"], plan["microbatches_per_step"]) == (4, 8, 1, 2)


def test_fit_holds_the_files_batch_and_names_it_in_each_row(cli):
    """fit CONFIG holds the file's global batch (8: the file's -1 at its own tp 1 on 8 GPUs, README "Around a
    trainer config") on every row; a row at tp 2 (dp 4) would be worked out anew as 1 x 4 = 4 by `explain CONFIG
    --tp 2`, so each torchtitan row's explain command names --global-batch 8, and prices the row's figures."""
    from planner.cli.fit_config import config_jobs, file_axes
    from planner.search import config_explain_args

    r = cli("fit", TOML, "--gpus", 8, "--top", "3", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert rows and all(row["plan"]["global_batch"] == 8 for row in rows)
    assert any(row["plan"]["dp"] != 8 for row in rows)
    job, own = config_jobs(TOML, {"gpus": 8}, {}, None)[:2]
    for row in rows:
        line = config_explain_args(str(TOML), job, row, file_axes(own))
        i = line.index("--global-batch")
        assert line[i + 1] == "8"
        one = cli("explain", *line, "--format", "json")
        assert one.exit_code == 0, (line, one.stderr)
        one = json.loads(one.stdout)
        assert one["plan"]["global_batch"] == 8 and one["time"] == row["time"], line
        assert one["memory"]["terms"] == row["memory"]["terms"], line


# ---- the four gaps of the last session's note (issue 22, "flags beat files")

def _shard8(tmp_path, shard: int = 8, rep: int = 1) -> Path:
    return _variant(tmp_path, "data_parallel_replicate_degree = 1\ndata_parallel_shard_degree = -1",
                    f"data_parallel_replicate_degree = {rep}\ndata_parallel_shard_degree = {shard}")


def test_a_stated_shard_degree_is_kept_or_refused_naming_the_key(cli, tmp_path):
    """data_parallel_shard_degree = 8 (stated, not -1): torchtitan keeps it and asserts replicate x shard x cp x tp x
    pp == world size (parallel_dims.py @e347b1e5e l. 48-56; only -1 is worked out, l. 49-51).
    --gpus 8 --tp 2: 1 x 8 x 2 x 1 x 1 = 16 != 8: refused (before: priced dp 4, the file's 8 changed silently),
    naming the key, the shard degree that fills 8 GPUs (8 / (1 x 2) = 4), --dp 4 and --gpus 16. --tp 2 alone: the
    GPU count is the file's degrees' product, 1 x 8 = 8: refused alike. --gpus 24 --tp 3: 8 x 3 = 24, kept;
    --gpus 8 --tp 3: 8 is no multiple of 3, only --gpus 24 keeps 8. --gpus 16 --tp 2: 16 = 16, kept: dp 1 x 8 = 8,
    global -1 = 1 x 8 = 8. --gpus 8 --tp 2 --dp 4: the command line's dp 4 = replicate 1 x shard 4 replaces 8
    (named), global 1 x 4 = 4."""
    f = _shard8(tmp_path)
    r = cli("explain", f, "--gpus", 8, "--tp", 2)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert ("data_parallel_shard_degree = 8 at tp 2 over the file's 1 (the command line's) is replicate 1 x shard 8 x "
            "tp 2 x pp 1 x cp 1 = 16 GPUs, but the job runs 8 (--gpus)") in r.stderr
    assert str(f) in r.stderr
    assert ("hint: set data_parallel_shard_degree = 4 (or -1: torchtitan works it out from the GPUs), or give --dp 4, "
            "or --gpus 16 to keep data_parallel_shard_degree 8") in r.stderr
    r = cli("explain", f, "--tp", 2)
    assert r.exit_code == 2 and "= 16 GPUs, but the job runs 8 (the file's degrees' product)" in r.stderr
    r = cli("explain", f, "--gpus", 8, "--tp", 3)
    assert r.exit_code == 2 and "hint: --gpus 24 to keep data_parallel_shard_degree 8" in r.stderr
    plan, err = _plan(cli, f, "--gpus", 16, "--tp", 2)
    assert plan == dict(gpus=16, tp=2, pp=1, cp=1, dp=8, global_batch=8, micro_batch=1, microbatches_per_step=1,
                        sharding="fsdp", sharding_mode="fsdp2")
    plan, err = _plan(cli, f, "--gpus", 8, "--tp", 2, "--dp", 4)
    assert (plan["dp"], plan["global_batch"], plan["micro_batch"], plan["microbatches_per_step"]) == (4, 4, 1, 1)
    assert ("data_parallel_shard_degree=4: the command line's dp 4 / the file's data_parallel_replicate_degree 1 "
            "replaces the file's 8 (flags beat files)") in err
    plan, _ = _plan(cli, f, "--gpus", 8)  # the file's own mesh: unchanged, 1 x 8 = 8 GPUs
    assert (plan["dp"], plan["global_batch"]) == (8, 8)


def test_a_command_line_dp_over_a_replicate_degree(cli, tmp_path):
    """HSDP file: replicate 2 x shard 4 = 8 GPUs. --dp 3: dp = replicate x shard (parallel_dims.py l. 53), 3 is no
    multiple of 2: refused naming the key. --dp 4 --tp 2 --gpus 8: shard 4 / 2 = 2 (the file's 4 replaced), 2 x 2 x
    2 = 8 GPUs: HSDP (replicate 2 > 1, dp_shard x cp = 2 > 1, parallel_dims.py l. 334-335) with shard group 2;
    global -1 = 1 x 4 = 4."""
    f = _shard8(tmp_path, shard=4, rep=2)
    r = cli("explain", f, "--dp", 3)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "--dp 3 is not a multiple of the file's [parallelism] data_parallel_replicate_degree 2" in r.stderr
    plan, err = _plan(cli, f, "--gpus", 8, "--tp", 2, "--dp", 4)
    assert (plan["dp"], plan["global_batch"], plan["sharding"]) == (4, 4, "hsdp")
    assert ("data_parallel_shard_degree=2: the command line's dp 4 / the file's data_parallel_replicate_degree 2 "
            "replaces the file's 4") in err


def test_pipeline_keys_read_at_the_command_lines_pp(cli, tmp_path):
    """File pp 1 with pipeline_parallel_layers_per_stage 3 and Interleaved1F1B (read by torchtitan only where pp > 1,
    train.py @e347b1e5e l. 218-232). llama3-8b: 32 layers + the end weights (first / last_stage_less_layers,
    default 1 each, job_config.py l. 377, 383) = 34 units; stages = ceil(34 / 3) = 12.
    --gpus 8 --pp 4: vpp 12 / 4 = 3, schedule interleaved (before: vpp 1, 1f1b, the keys read at the file's pp 1);
    dp 8 / 4 = 2, global -1 = 1 x 2 = 2, micro-batch pipeline_parallel_microbatch_size default 1.
    --pp 2: 12 / 2 = 6. With layers_per_stage 4: ceil(34 / 4) = 9 stages, --pp 4: 9 is no multiple of 4, refused as
    pipeline_module_split refuses it, naming the command line's pp; --vpp 1 --schedule 1f1b replaces the key (named)
    and prices vpp 1. Without --pp the keys are listed as ignored (pipeline_parallel_degree 1)."""
    f = _variant(tmp_path, "context_parallel_degree = 1", "context_parallel_degree = 1\n"
                 "pipeline_parallel_layers_per_stage = 3\npipeline_parallel_schedule = \"Interleaved1F1B\"")
    r = json.loads(cli("explain", f, "--gpus", 8, "--pp", 4, "--format", "json").stdout)
    p = r["plan"]
    assert (p["pp"], p["vpp"], p["schedule"], p["dp"], p["global_batch"], p["micro_batch"]) == (4, 3, "interleaved",
                                                                                              2, 2, 1)
    assert "vpp=3: pipeline_parallel_layers_per_stage 3 gives 12 stages over 32 layers (+ 2 end weight(s)), 12 / pp " \
           "4 at the command line's mesh" in [a["line"] for a in r["trainer_config"]["assumed"]]
    r = json.loads(cli("explain", f, "--gpus", 8, "--pp", 2, "--format", "json").stdout)
    assert (r["plan"]["vpp"], r["plan"]["schedule"]) == (6, "interleaved")
    d = json.loads(cli("explain", f, "--gpus", 8, "--format", "json").stdout)
    assert d["plan"]["vpp"] == 1
    ignored = [i["line"] for i in d["trainer_config"]["ignored"]]
    assert "parallelism.pipeline_parallel_layers_per_stage=3 (pipeline_parallel_degree 1)" in ignored
    assert "parallelism.pipeline_parallel_schedule=Interleaved1F1B (pipeline_parallel_degree 1)" in ignored
    f.write_text(f.read_text().replace("pipeline_parallel_layers_per_stage = 3", "pipeline_parallel_layers_per_stage = 4"))
    r = cli("explain", f, "--gpus", 8, "--pp", 4)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert ("pipeline_parallel_layers_per_stage 4 gives 9 stages for 32 layers, not a multiple of "
            "pipeline_parallel_degree 4 (the command line's pp 4 over the file's 1)") in r.stderr
    r = cli("explain", f, "--gpus", 8, "--pp", 4, "--vpp", 1, "--schedule", "1f1b")
    assert r.exit_code == 0, r.stderr
    assert ("pipeline_parallel_layers_per_stage: the file's 4 is not kept: the command line's vpp 1 sets the stages "
            "per rank") in r.stderr


def test_a_one_stage_schedule_with_several_stages_at_the_command_lines_pp(cli, tmp_path):
    """layers_per_stage 9 with the default schedule 1F1B: ceil(34 / 9) = 4 stages; at the command line's pp 2 that
    is 2 stages per rank, which 1F1B (one stage per rank) cannot run: refused naming both (before: not read)."""
    f = _variant(tmp_path, "context_parallel_degree = 1", "context_parallel_degree = 1\n"
                 "pipeline_parallel_layers_per_stage = 9")
    r = cli("explain", f, "--gpus", 8, "--pp", 2)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert ("puts 2 stages on each rank at pp 2 (the command line's pp 2 over the file's 1), but "
            "pipeline_parallel_schedule '1F1B' runs one stage per rank") in r.stderr
    plan, _ = _plan(cli, f, "--gpus", 8, "--pp", 4)  # 4 stages / pp 4: one per rank, 1F1B runs it
    assert (plan["pp"], plan["dp"]) == (4, 2)


def test_fit_rows_and_their_explain_print_the_same_days(cli):
    """One rule for the training's length: torchtitan runs training.steps steps at the batch the job runs
    (train.py @e347b1e5e l. 714), so tokens = steps x the plan's global batch x its seq_len. fit CONFIG holds the
    file's global batch 8 (local 1 x dp 8 at tp 1): tokens = 1000 x 8 x 8192 = 65,536,000 on every row. A row at tp 2
    was explained with --global-batch 8 over the file's -1 worked out at tp 2 (1 x 4 = 4): tokens 1000 x 4 x 8192 =
    32,768,000, 500 steps, half the row's days (before). Now both: 1000 steps, the same days and GPU-hours.
    explain --global-batch 16: 1000 x 16 x 8192 = 131,072,000 tokens (before: the file's 65,536,000, 500 steps);
    --seq-len 4096: 1000 x 8 x 4096 = 32,768,000."""
    from planner.cli.fit_config import config_jobs, file_axes
    from planner.search import config_explain_args

    r = cli("fit", TOML, "--gpus", 8, "--top", "4", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert any(row["plan"]["tp"] > 1 for row in rows)
    job, own = config_jobs(TOML, {"gpus": 8}, {}, None)[:2]
    for row in rows:
        one = json.loads(cli("explain", *config_explain_args(str(TOML), job, row, file_axes(own)), "--format",
                             "json").stdout)
        assert one["plan"]["tokens"] == row["plan"]["tokens"] == 1000 * 8 * 8192
        for k in ("training_steps", "training_days", "gpu_hours"):
            assert one["throughput"][k] == row["throughput"][k], k
        assert one["throughput"]["training_steps"] == 1000
    d = json.loads(cli("explain", TOML, "--gpus", 8, "--global-batch", 16, "--format", "json").stdout)
    assert (d["plan"]["tokens"], d["throughput"]["training_steps"]) == (1000 * 16 * 8192, 1000)
    d = json.loads(cli("explain", TOML, "--gpus", 8, "--seq-len", 4096, "--format", "json").stdout)
    assert d["plan"]["tokens"] == 1000 * 8 * 4096
    r = cli("fit", TOML, "--gpus", 8, "--global-batch", 16, "--top", "1", "--format", "json")
    assert json.loads(r.stdout)["rows"][0]["throughput"]["training_steps"] == 1000


def test_micro_batch_at_pp_1_is_the_local_batch(cli, tmp_path):
    """Without PP torchtitan's micro-batch is local_batch_size (each of global / (local x dp) accumulation steps one
    forward-backward of it, train.py @e347b1e5e l. 196-215, 561-564), so --micro-batch 2 is
    --training.local_batch_size 2 and global_batch_size -1 = 2 x dp 8 = 16, one micro-batch per step (before:
    refused, the file's global 1 x 8 = 8 not divisible by 8 x 2). A stated global_batch_size 32: 32 / (8 x 2) = 2
    micro-batches; a stated 8: 8 is no multiple of 2 x 8, refused naming the key. At pp 2 --micro-batch is
    pipeline_parallel_microbatch_size: local 1 is no multiple of 2 (pipeline_parallel.py l. 185-191): refused; with
    local_batch_size 4: dp 4, global 4 x 4 = 16, 16 / (4 x 2) = 2 micro-batches."""
    plan, err = _plan(cli, TOML, "--gpus", 8, "--micro-batch", 2)
    assert (plan["dp"], plan["global_batch"], plan["micro_batch"], plan["microbatches_per_step"]) == (8, 16, 2, 1)
    # the note names the plan field as every option that replaces a file's value does (cli/core.py), then the key;
    # it said "local_batch_size=2: the command line's micro-batch replaces ..." (fuzz cli-options seed 87: budget
    # llama3_8b.toml --gpus 8 --micro-batch 4 flagged as replacing micro_batch without a note)
    assert "micro_batch=2: the command line replaces the file's 1 ([training] local_batch_size: without PP" in err
    assert "global_batch=16: global_batch_size -1 = the command line's micro-batch 2 x dp 8" in err
    f = _variant(tmp_path, "local_batch_size = 1", "local_batch_size = 1\nglobal_batch_size = 32")
    plan, _ = _plan(cli, f, "--gpus", 8, "--micro-batch", 2)
    assert (plan["global_batch"], plan["micro_batch"], plan["microbatches_per_step"]) == (32, 2, 2)
    f.write_text(f.read_text().replace("global_batch_size = 32", "global_batch_size = 8"))
    r = cli("explain", f, "--gpus", 8, "--micro-batch", 2)
    assert r.exit_code == 2 and ("global_batch_size 8 is not a multiple of the command line's micro-batch 2 x dp 8"
                                 in r.stderr)
    r = cli("explain", TOML, "--gpus", 8, "--pp", 2, "--micro-batch", 2)
    assert r.exit_code == 2 and "local_batch_size 1 is not a multiple of the command line's --micro-batch 2" in r.stderr
    g = _variant(tmp_path, "local_batch_size = 1", "local_batch_size = 4")
    plan, err = _plan(cli, g, "--gpus", 8, "--pp", 2, "--micro-batch", 2)
    assert (plan["dp"], plan["global_batch"], plan["micro_batch"], plan["microbatches_per_step"]) == (4, 16, 2, 2)
    assert "micro_batch=2: the command line replaces the file's 1 ([parallelism] pipeline_parallel_microbatch_size, " \
           "its default)" in err


def test_a_command_line_dp_over_the_leftover_shard_degree(cli):
    """llama3_8b.toml leaves data_parallel_shard_degree at -1 (the leftover GPUs, parallel_dims.py @e347b1e5e l. 48-51)
    and replicate at 1; the data-parallel degree is replicate x shard (l. 53-56), so --dp D runs shard D / 1 = D, as
    torchtitan run with --parallelism.data_parallel_shard_degree D (issue 22, ttchecks: before, the reader worked -1 out
    from --gpus and the global batch from it, --dp 2 without --gpus was refused for want of a GPU count, and --gpus 8
    --dp 2 met resolve's generic product error).
    --dp 2 (no --gpus): shard 2, GPUs = 1 x 2 x tp 1 x pp 1 x cp 1 = 2, global -1 = local 1 x dp 2 = 2.
    --gpus 8 --tp 2 --dp 4: shard 4, 1 x 4 x 2 = 8 = --gpus: kept; global 1 x 4 = 4.
    --gpus 8 --dp 2: 1 x 2 x 1 = 2 GPUs != 8: refused naming what -1 would take (8 / 1 = 8, dp 8) and --gpus 2."""
    plan, err = _plan(cli, TOML, "--dp", 2)
    assert plan == dict(gpus=2, tp=1, pp=1, cp=1, dp=2, global_batch=2, micro_batch=1, microbatches_per_step=1,
                        sharding="fsdp", sharding_mode="fsdp2")
    assert ("data_parallel_shard_degree=2: the command line's dp 2 / the file's data_parallel_replicate_degree 1 "
            "replaces the file's -1 (the leftover GPUs; flags beat files)") in err
    assert "gpus=2: replicate 1 x shard 2 x tp 1 x pp 1 x cp 1, the degrees' product at the command line's dp" in err
    plan, err = _plan(cli, TOML, "--gpus", 8, "--tp", 2, "--dp", 4)
    assert (plan["gpus"], plan["tp"], plan["dp"], plan["global_batch"]) == (8, 2, 4, 4)
    assert "gpus=" not in err.split("data_parallel_shard_degree=4")[1].split(";")[0]
    r = cli("explain", TOML, "--gpus", 8, "--dp", 2)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert ("--dp 2 over the file's data_parallel_shard_degree = -1 is replicate 1 x shard 2 x tp 1 x pp 1 x cp 1 = 2 "
            "GPUs, but --gpus 8; -1 would take 8, dp 8") in r.stderr
    assert "hint: leave --dp out (the file's -1 takes the leftover GPUs), or give --gpus 2" in r.stderr


def test_messages_cite_the_release_read(cli):
    """The TOML mapping's refusals name where the release the stack names checks (issue 22, ttchecks): a 0.3.0 launch
    line's cite release/0.3 @4f9e9a47d (parallel_dims.py _validate l. 182-189: -1 -> world / (rep cp tp pp), then
    assert rep x shard x cp x tp x pp == world; trainer.py Trainer.Config.__post_init__ l. 130-139: local_batch_size %
    pipeline_parallel_microbatch_size under PP raises ValueError at start-up), main's TOML @e347b1e5e
    (parallel_dims.py l. 48-56; pipeline_parallel.py l. 186-193). Before, both cited main's lines.
    run_train_8b.sh (tp 2, local_batch_size 2): --gpus 8 --tp 3: 8 % 3 != 0; --pp 2 --micro-batch 3: 2 % 3 != 0."""
    r = cli("explain", LAUNCH_03, "--hardware", "h100-sxm", "--gpus", 8, "--tp", 3)
    assert r.exit_code == 2 and "distributed/parallel_dims.py release/0.3 @4f9e9a47d l. 182-189" in r.stderr
    assert "e347b1e5e" not in r.stderr
    r = cli("explain", LAUNCH_03, "--hardware", "h100-sxm", "--pp", 2, "--micro-batch", 3)
    assert r.exit_code == 2 and "--training.local_batch_size 2 is not a multiple of the command line's --micro-batch 3" \
        in r.stderr
    assert "torchtitan/trainer.py release/0.3 @4f9e9a47d Trainer.Config.__post_init__ l. 130-139" in r.stderr
    assert "e347b1e5e" not in r.stderr
    r = cli("explain", TOML, "--hardware", "h100-sxm", "--gpus", 8, "--tp", 3)
    assert r.exit_code == 2 and "distributed/parallel_dims.py @e347b1e5e l. 48-56" in r.stderr
    assert "4f9e9a47d" not in r.stderr


def test_pp_split_rule_cites_both_releases():
    """TORCHTITAN_PP_SPLIT (code 32), a rule of both stacks, cited at main only before: its source names 0.3.0's
    pipeline_parallel.py lines too (num_virtual_stages l. 223-225, _generate_llm_fqn_per_model_part l. 366-476)."""
    from planner.startup import BY_CODE, CODES

    src = BY_CODE[CODES["TORCHTITAN_PP_SPLIT"]].source
    assert "@e347b1e5e" in src and "release/0.3 @4f9e9a47d" in src and "l. 223-225" in src
