"""Issue 22 (task ttvpp): `planner fit` on torchtitan's Llama 3 8B TOML with `--recompute full --pp 2` ranks vpp 17
among its top rows. That is a plan torchtitan builds: 34 virtual stages, the embedding alone on stage 0 and the
norm + output alone on stage 33, 17 a rank; the planner prices that split, and `fit --export torchtitan` spells it
as pipeline_parallel_layers_per_stage = 1, which reads back as the same plan.

What torchtitan builds (pytorch/torchtitan main @e347b1e5e, torchtitan/distributed/pipeline_parallel.py; release/0.3
@4f9e9a47d has the same rules in _get_pipeline_metadata l. 194-265, _generate_llm_fqn_per_model_part l. 366-476,
_get_pp_rank_to_stage_indices_mapping l. 541-578):
- config/job_config.py l. 377, 383 (0.3: config/configs.py l. 191, 197): pipeline_parallel_first_stage_less_layers
  = pipeline_parallel_last_stage_less_layers = 1, read as input_weight / output_weight (pipeline_llm l. 67-68).
- pipeline_llm l. 71-110 with pipeline_parallel_layers_per_stage = 1: num_virtual_stages = ceil((32 + 1 + 1) / 1)
  = 34 (l. 75); 34 % pp 2 == 0 (else ValueError); stages_per_rank 17, and a multi-stage schedule (Interleaved1F1B)
  needs >= 2 (l. 104; a single-stage one exactly 1).
- generate_llm_fqn_per_model_part(34, 32, 1, 1) l. 236-344: 34 effective layers, layers_per_stage = 34 // 34 = 1,
  extra 0; 34 stages <= 34 effective layers (l. 269) and input_weight 1, output_weight 1 <= 1 (l. 289-296): stage 0
  = ["tok_embeddings"] + (1 - 1 = 0 layers), stages 1-32 one layer each, stage 33 = (1 - 1 = 0 layers) + ["norm",
  "output"]. pipeline_module_split l. 347-468, "loop" style for Interleaved1F1B (l. 461: stages r, r + 2, ...,
  r + 32 on rank r): rank 0 holds the embedding and layers 1, 3, ..., 31 (16), rank 1 layers 0, 2, ..., 30 (16)
  and norm + output. (Only the "v" schedules, ZBVZeroBubble / DualPipeV, need exactly 2 stages a rank, l. 464;
  the torchtitan stack entry lists 1f1b, gpipe and interleaved only: stack_db torchtitan.yaml runs.schedules.)
- torchtitan's own CI builds such end stages: tests/integration_tests/features.py l. 263-278 "pp_looped_1f1b" (pp 4,
  Interleaved1F1B, pipeline_parallel_layers_per_stage 1) on tests/integration_tests/base_config.toml l. 21-22, the
  llama3 debugmodel of 6 layers (models/llama3/__init__.py l. 30-32): ceil((6 + 2) / 1) = 8 stages, stage 0 the
  embedding alone, stage 7 norm + output alone (.github/workflows/integration_test_8gpu_features.yaml l. 104).
- torch.distributed.pipelining ScheduleInterleaved1F1B.__init__: number_of_rounds = max(1, m // pp) = max(1, 2 // 2)
  = 1, m % 1 == 0; torchtitan build_pipeline_schedule l. 197 only warns where m (2) < pp x local stages (34).

Which vpp the search keeps at pp 2 (space.py: pp*vpp chunks of ceil(L'/(pp vpp)) units, at most --max-layer-slack 2
more than L' = 32 + 2 = 34 units): vpp 1: 2 x 17 = 34 (slack 0); 2: 4 x 9 = 36 (2); 3: 6 x 6 = 36 (2); 4: 8 x 5 = 40
(6, out); 5: 10 x 4 = 40 (out); 6: 12 x 3 = 36 (2); 7: 14 x 3 = 42 and 8: 16 x 3 = 48 (out); 9: 18 x 2 = 36 (2);
10-16: 2 v x 2 - 34 = 4 v - 34 >= 6 (out); 17: 34 x 1 = 34 (0). vpp 18 = 36 stages > 34 effective layers:
generate_llm_fqn_per_model_part's "Number of stages (36) cannot be greater than effective layers (34)", the
planner's rule VPP_LAYERS.
"""

from __future__ import annotations

import json
from pathlib import Path

TOML = Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml"
# the reported command: the file's data_parallel_shard_degree -1 and global_batch_size -1 worked out at the command
# line's mesh (64 / pp 2 = dp 32, global batch 1 x 32 = 32 sequences)
REPORTED = (str(TOML), "--gpus", "64", "--recompute", "full", "--pp", "2")


def _fit_rows(cli, *extra) -> list[dict]:
    r = cli("fit", *REPORTED, *extra, "--top", "100000", "--format", "json", "--quiet")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["rows"]


def test_fit_searches_the_vpps_torchtitan_splits_34_units_into(cli):
    """The docstring's list: vpp 1, 2, 3, 6, 9 and 17 at pp 2, and vpp 17's row is the 34-stage split: 16
    transformer layers a rank, the last stage's with the output layer and the loss, both ends counted."""
    rows = _fit_rows(cli)
    assert sorted({r["plan"]["vpp"] for r in rows}) == [1, 2, 3, 6, 9, 17]
    v17 = [r for r in rows if r["plan"]["vpp"] == 17]
    assert v17
    for r in v17:
        p = r["plan"]
        assert (p["pp"], p["schedule"], p["global_batch"]) == (2, "interleaved", 32)
        assert (p["account_for_embedding_in_pipeline_split"], p["account_for_loss_in_pipeline_split"]) == (True, True)
        crit = r["time"]["critical_stage"]
        assert (crit["stage"], crit["layers"], crit["holds"]) == ("last", 16, ["output layer + loss"])


def test_vpp_18_at_pp_2_is_refused(cli):
    """36 stages for 34 effective layers: torchtitan raises, and fit ranks nothing (rule VPP_LAYERS)."""
    r = cli("fit", *REPORTED, "--vpp", "18", "--format", "json", "--quiet")
    assert r.exit_code == 1
    assert "pp*vpp exceeds the layers" in r.stderr


def test_the_vpp_17_row_exports_as_one_layer_a_stage_and_reads_back(cli, tmp_path):
    """fit --export torchtitan of the vpp 17 row writes layers_per_stage 1 with the end weights 1 and 1 (torchtitan:
    ceil(34 / 1) = 34 stages = pp 2 x vpp 17) and no stage lists; the file explains as the same plan, step and
    memory as fit priced."""
    row = _fit_rows(cli, "--vpp", "17")[0]
    out = tmp_path / "v17.toml"
    r = cli("fit", *REPORTED, "--vpp", "17", "--export", "torchtitan", "--output", str(out), "--quiet")
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    for line in ('pipeline_parallel_degree = 2', 'pipeline_parallel_schedule = "Interleaved1F1B"',
                 "pipeline_parallel_first_stage_less_layers = 1", "pipeline_parallel_last_stage_less_layers = 1",
                 "pipeline_parallel_layers_per_stage = 1", "local_batch_size = 2",
                 "pipeline_parallel_microbatch_size = 1"):
        assert line + "\n" in text, line
    assert "module_fqns_per_model_part" not in text
    back = cli("explain", str(out), "--gpus", "64", "--format", "json", "--quiet")
    assert back.exit_code == 0, back.stderr
    d = json.loads(back.stdout)
    keys = ("tp", "cp", "pp", "vpp", "dp", "micro_batch", "sharding", "sharding_mode", "recompute", "schedule")
    assert {k: d["plan"][k] for k in keys} == {k: row["plan"][k] for k in keys}
    assert (d["time"]["step_s"], d["memory"]["total_bytes"]) == (row["time"]["step_s"], row["memory"]["total_bytes"])
