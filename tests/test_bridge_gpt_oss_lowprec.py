"""gpt-oss 20B's low-precision pre-training recipes on Megatron-Bridge (issue 22), read as they build and written back.

NVIDIA-NeMo/Megatron-Bridge @dc805f5cf src/megatron/bridge/recipes/gpt_oss/gpt_oss.py:
- gpt_oss_20b_pretrain_fp8_current_scaling_config (l. 265-268): gpt_oss_20b_pretrain_config, then
  _enable_gpt_oss_hopper_fp8_current_scaling (l. 26-30): mixed_precision = "bf16_with_fp8_current_scaling_mixed" (a
  preset's name; training/mixed_precision.py l. 271-290: hybrid, tensorwise, fp8_param_gather, the first and last
  layer in bf16) and model.moe_router_padding_for_fp8 = True;
- gpt_oss_20b_pretrain_mxfp8_config (l. 824-827): then _enable_gpt_oss_blackwell_mxfp8 (l. 817-821): mixed_precision =
  get_mixed_precision_config("bf16_with_mxfp8_mixed"), a MixedPrecisionConfig (l. 241-253: e4m3, mxfp8,
  fp8_param_gather, reuse_grad_buf_for_mxfp8_param_ag), and the router padding."""

from __future__ import annotations

import json

import pytest

from planner.trainers import load_trainer_config
from planner.trainers.export import plan_signature

RUN = "scripts/training/run_recipe.py"


def _launch(tmp_path, recipe, *overrides, name="launch.sh"):
    f = tmp_path / name
    # 2 nodes: TP 2 x PP 4 (gpt_oss.py l. 54-62) leaves DP 2, so EP 4 folds over TP x DP x CP = 4
    f.write_text(f"torchrun --nproc_per_node 8 --nnodes 2 {RUN} --recipe {recipe} {' '.join(overrides)}\n")
    return f


def test_fp8_current_scaling_recipe_reads_as_it_builds(tmp_path):
    """The preset's fields as the job's: fp8 tensorwise (current scaling), fp8 weights gathered, one bf16 layer at
    each end; the router padding on; the base recipe's layout."""
    cfg = load_trainer_config(_launch(tmp_path, "gpt_oss_20b_pretrain_fp8_current_scaling_config"), hardware="h100-sxm")
    j = cfg.job
    assert (j["model"], j["tp"], j["pp"], j["ep"]) == ("gpt-oss-20b", 2, 4, 4)
    assert (j["precision"], j["fp8_recipe"], j["fp8_param_gather"], j["bf16_layers_at_start"], j["bf16_layers_at_end"]) == \
        ("fp8", "tensorwise", True, 1, 1)
    assert j["moe_router_padding"] is True
    # the base recipe: bf16, no padding
    b = load_trainer_config(_launch(tmp_path, "gpt_oss_20b_pretrain_config", name="b.sh"), hardware="h100-sxm").job
    assert (b["precision"], b.get("moe_router_padding")) == ("bf16", None)
    # the preset is a name: another name replaces it; a field of it is refused, as Hydra refuses it
    f = _launch(tmp_path, "gpt_oss_20b_pretrain_fp8_current_scaling_config", "mixed_precision=bf16_mixed", name="c.sh")
    assert load_trainer_config(f, hardware="h100-sxm").job["precision"] == "bf16"


def test_mxfp8_recipe_reads_as_it_builds_and_lists_the_buffer_reuse(tmp_path):
    """MXFP8 with fp8 weights gathered; the preset's reuse of the gradient buffer for that gather is not priced (the
    gathered weights priced in a buffer of their own): listed as not modelled, never dropped."""
    cfg = load_trainer_config(_launch(tmp_path, "gpt_oss_20b_pretrain_mxfp8_config"), hardware="b200")
    j = cfg.job
    assert (j["precision"], j["fp8_recipe"], j["fp8_param_gather"], j["moe_router_padding"]) == ("fp8", "mxfp8", True, True)
    assert any("reuse_grad_buf_for_mxfp8_param_ag=true" in str(x) for x in cfg.not_modelled)
    # without the gather the reuse reads nothing: ignored, said so
    cfg = load_trainer_config(_launch(tmp_path, "gpt_oss_20b_pretrain_mxfp8_config", "mixed_precision.fp8_param_gather=false",
                                      name="b.sh"), hardware="b200")
    assert "fp8_param_gather" not in cfg.job
    assert any("reuse_grad_buf_for_mxfp8_param_ag=true (no fp8_param_gather" in str(x) for x in cfg.ignored)


@pytest.mark.parametrize("recipe,hw,overrides,written", [
    ("gpt_oss_20b_pretrain_fp8_current_scaling_config", "h100-sxm", [],
     ["--recipe gpt_oss_20b_pretrain_config", "mixed_precision=bf16_with_fp8_current_scaling_mixed",
      "model.moe_router_padding_for_fp8=true"]),
    # the writer refuses fp8_param_gather with mxfp8 (the reuse, not priced); without it the plan's fields need a
    # recipe that holds a MixedPrecisionConfig: the MXFP8 recipe itself
    ("gpt_oss_20b_pretrain_mxfp8_config", "b200", ["mixed_precision.fp8_param_gather=false"],
     ["--recipe gpt_oss_20b_pretrain_mxfp8_config", "mixed_precision.fp8_recipe=mxfp8",
      "mixed_precision.fp8_param_gather=false"]),
])
def test_round_trip(cli, tmp_path, recipe, hw, overrides, written):
    f = _launch(tmp_path, recipe, *overrides)
    out = tmp_path / "back.sh"
    r = cli("export", f, "--hardware", hw, "--format", "megatron-bridge", "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    for w in written:
        assert w in text
    a = json.loads(cli("explain", f, "--hardware", hw, "--format", "json", "-q").stdout)
    b = json.loads(cli("explain", out, "--hardware", hw, "--format", "json", "-q").stdout)
    assert plan_signature(b["plan"]) == plan_signature(a["plan"])
    assert b["memory"]["total_bytes"] == a["memory"]["total_bytes"]
    assert b["time"]["step_s"] == a["time"]["step_s"]


def test_mxfp8_as_shipped_is_not_written(cli, tmp_path):
    """The recipe as it ships gathers MXFP8 weights through the gradient buffer, which the planner does not price:
    the writer refuses the plan, naming it."""
    r = cli("export", _launch(tmp_path, "gpt_oss_20b_pretrain_mxfp8_config"), "--hardware", "b200", "--format",
            "megatron-bridge")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "error: export megatron-bridge: fp8_param_gather with mxfp8" in r.stderr  # (after the reader's warnings)
