"""DeepSeek-V3's recipe items (issue 23): bf16 AdamW moments (arXiv:2412.19437 sec. 3.3.3) and
multi-token prediction (sec. 2.2, depth 1 in sec. 4.2), priced, read from Megatron's flags
(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, --mtp-num-layers;
Megatron-LM @d98e8a64 arguments.py l. 3667-3685, optimizer_config.py l. 407-478) and refused
where Megatron refuses them."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner import recipe
from planner.catalog import load_model
from planner.compute import _dense_params
from planner.errors import PlannerError
from planner.params import count_params
from planner.plan import bytes_per_param, with_mtp
from planner.step import adam_bytes_per_param
from planner.trainers import load_trainer_config

FP8_SH = Path(__file__).parent / "data" / "trainer_configs" / "train_llama3_8b_h100_fp8.sh"


def _variant(tmp_path, old: str, new: str) -> Path:
    text = FP8_SH.read_text()
    assert old in text, old
    p = tmp_path / FP8_SH.name
    p.write_text(text.replace(old, new))
    return p


PA = "--use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"


def test_megatron_bf16_moments_with_blockwise_fp8_is_the_bf16_moments_preset(tmp_path):
    """fp32 main grads (no --grad-reduce-in-bf16) 4 B, Megatron's fp32 main params 4 B (blockwise
    fp8: not TE's master, optimizer_config.py l. 407-413), m and v in bf16 2 + 2: 2+4+4+4 = 14 B."""
    p = _variant(tmp_path, "    --grad-reduce-in-bf16\n", f"    {PA}\n    --fp8-recipe blockwise\n")
    cfg = load_trainer_config(p)
    assert cfg.job["bytes_per_param"] == "bf16-moments"
    assert bytes_per_param("bf16-moments")[0].total == 14.0
    assert not any("optimizer state dtypes" in u for u in cfg.unmodelled)


def test_megatron_bf16_moments_with_delayed_fp8_keeps_master_remainders(tmp_path):
    """Delayed fp8 (the default recipe): TE's FusedAdam holds the master weights and keeps their
    16-bit remainders beside the bf16 weights (store_param_remainders): 2 B; --grad-reduce-in-bf16
    2 B grads: 2+2+2+4 = 10 B."""
    p = _variant(tmp_path, "    --grad-reduce-in-bf16\n", f"    --grad-reduce-in-bf16\n    {PA}\n")
    cfg = load_trainer_config(p)
    assert cfg.job["bytes_per_param"] == {"weights": 2.0, "gradients": 2.0, "master": 2.0, "optimizer": 4.0}
    assert any("store_param_remainders" in a for a in cfg.assumed)


@pytest.mark.parametrize("flags, match", [
    ("--exp-avg-dtype bf16", "without --use-precision-aware-optimizer"),
    ("--use-precision-aware-optimizer --exp-avg-dtype bf16", "without --use-distributed-optimizer"),
    ("--exp-avg-dtype fp64", "not one of Megatron's choices"),
])
def test_megatron_refuses_what_megatron_refuses(tmp_path, flags, match):
    p = _variant(tmp_path, "    --grad-reduce-in-bf16\n", f"    --grad-reduce-in-bf16\n    {flags}\n")
    if "without --use-distributed" in match:  # the script runs the distributed optimizer: take it out
        p.write_text(p.read_text().replace("    --use-distributed-optimizer\n", ""))
    with pytest.raises(PlannerError, match=match) as e:
        load_trainer_config(p)
    if "fp64" in flags:
        assert "fp32, fp16, bf16, fp8" in e.value.hint


def test_adam_step_bytes_per_parameter_by_hand():
    """read master, m, v, grad; write master, m, v, weight (+ read the weight without a full fp32 master)."""
    assert adam_bytes_per_param(bytes_per_param("megatron")[0]) == 2 * (4 + 8) + 2 + 4  # 30
    assert adam_bytes_per_param(bytes_per_param("mixed16")[0]) == 2 * (4 + 8) + 2 + 2  # 28
    assert adam_bytes_per_param(bytes_per_param("bf16-moments")[0]) == 2 * (4 + 4) + 2 + 4  # 22
    assert adam_bytes_per_param(bytes_per_param("pure-bf16")[0]) == 2 * (0 + 4) + 2 + 2 + 2  # 14


def test_mtp_module_params_and_flops_by_hand():
    """DeepSeek-V3's MTP module (sec. 2.2): projection 2h x h, two RMSNorms of h, one MoE layer
    (the last layer's kind); 6N adds its active parameters and the output head again (V x h)."""
    m = load_model("deepseek-v3")
    assert m.mtp_layers == 0
    m1 = with_mtp(m, 1)
    assert m1.mtp_layers == 1 and with_mtp(m, 1) is m1 and with_mtp(m, None) is m
    h, V = 7168, 129280
    pc0, pc1 = count_params(m), count_params(m1)
    layer = pc0.layer_params[-1] if hasattr(pc0, "layer_params") else None  # noqa: F841 (kept for reading)
    one_moe_layer_total = (pc0.total - count_params(m.model_copy(update={"num_layers": 60})).total)
    assert pc1.mtp.total == pytest.approx(2 * h * h + 2 * h + one_moe_layer_total)
    one_moe_layer_active = (pc0.active - count_params(m.model_copy(update={"num_layers": 60})).active)
    assert _dense_params(m1) - _dense_params(m) == pytest.approx(2 * h * h + 2 * h + one_moe_layer_active + V * h)


def test_recipe_takes_bf16_moments_and_mtp_only_where_the_stack_runs_them():
    data, notes = recipe.apply(dict(model="deepseek-v3", gpus=64, hardware="h800-sxm", stack="megatron"))
    assert data["bytes_per_param"] == "bf16-moments" and data["mtp_layers"] == 1
    assert not any(n.startswith("not priced: bf16 AdamW") or n.startswith("not priced: multi-token") for n in notes)
    data, notes = recipe.apply(dict(model="deepseek-v3", gpus=64, hardware="h800-sxm", stack="torchtitan"))
    assert "bytes_per_param" not in data and "mtp_layers" not in data
    assert any(n.startswith("bytes_per_param bf16-moments not taken: stack torchtitan keeps mixed16, pure-bf16") for n in notes)
    assert any(n.startswith("mtp_layers 1 not taken") for n in notes)
    data, _ = recipe.apply(dict(model="deepseek-v3", gpus=64, bytes_per_param="megatron", mtp_layers=0))
    assert data["bytes_per_param"] == "megatron" and data["mtp_layers"] == 0
