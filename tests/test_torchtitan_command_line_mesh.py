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
    assert "sharding=none (ddp): FSDP runs where dp_shard x cp > 1, here 1 x 1 at the command line's mesh" in err


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
