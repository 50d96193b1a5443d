"""The power envelope (planner/power.py): a board power limit lowers the tensor-core rate by
the cube-root rule, the Grand Teton H100 part runs at its 500 W set point, a job's limit
overrides it, a limit above the rated power is bad input, and sustained calibrations scale
from the limit they were measured at."""

from __future__ import annotations

import math

from pathlib import Path

import pytest

from conftest import assert_one_error
from planner.catalog import load_hardware
from planner.compute import (
    SUSTAINED_TENSOR_FRACTION, attention_rates, calibration_derate, gemm_plateau,
)
from planner.power import POWER_CLOCK_EXPONENT, power_limit, power_rate_fraction
from planner.profile import GemmCalibration
from planner.validate import load_runs

H100 = load_hardware("h100-sxm")
GT = load_hardware("h100-sxm-96gb-hbm2e")


def test_power_capped_gemm_rate_by_hand():
    """H100 SXM at 500 W: MAMF 794.5 TFLOP/s x sustained 0.85 x (500/700)^(1/3).
    (500/700) = 0.714286, ln = -0.336472, / 3 = -0.112157, exp = 0.893904, so
    794.5 x 0.85 x 0.893904 = 603.67 TFLOP/s (675.3 at 700 W)."""
    capped = H100.model_copy(update={"power_limit_W": 500.0})
    assert power_rate_fraction(capped) == pytest.approx(0.893904, abs=1e-6)
    assert gemm_plateau(H100, "bf16") / 1e12 == pytest.approx(794.5 * 0.85, rel=1e-12)
    assert gemm_plateau(capped, "bf16") / 1e12 == pytest.approx(603.67, abs=0.01)
    # attention (FlashAttention-2 365 / 310 TFLOP/s on H100) scales the same way
    f0, b0 = attention_rates(H100)
    f1, b1 = attention_rates(capped)
    assert (f1 / f0, b1 / b0) == pytest.approx((0.893904, 0.893904), abs=1e-6)


def test_cube_root_rule_against_the_datasheet_envelopes():
    """NVIDIA rates the GH100 die at 989 dense bf16 TFLOP/s at 700 W (SXM) and 835 at 400 W
    (NVL): 0.844; the rule gives (400/700)^(1/3) = 0.830, within 2%."""
    assert POWER_CLOCK_EXPONENT == 3.0
    assert power_rate_fraction(H100, 400.0) == pytest.approx(835.0 / 989.0, rel=0.02)
    assert power_rate_fraction(H100, 700.0) == 1.0
    assert power_rate_fraction(H100) == 1.0  # no limit set: the rated power


def test_grand_teton_part_runs_at_its_set_point():
    """torchtitan's H100s: 96 GB HBM2e, 2.4 TB/s, 500 W default limit of a 700 W board."""
    assert (GT.hbm_GB, GT.hbm_TBps, GT.tdp_W, GT.power_limit_W) == (96, 2.4, 700, 500)
    assert power_limit(GT) == 500.0
    assert gemm_plateau(GT, "bf16") == pytest.approx(gemm_plateau(H100, "bf16") * (500 / 700) ** (1 / 3), rel=1e-12)


def test_validate_maps_the_parts_to_their_entries():
    """The records' explicit `hardware:` fields (validate rule 1) name these parts' entries."""
    hw = {r.gpu_type: r.hardware for r in load_runs(Path(__file__).parent / "data" / "published_runs.yaml")}
    assert hw["H100 SXM 95/96GB HBM2e, lower TDP"] == "h100-sxm-96gb-hbm2e"
    assert hw["H100-SXM-80GB"] == "h100-sxm" and hw["A100-40GB"] == "a100-sxm-40gb"


def test_h800_is_an_h100_with_half_the_nvlink():
    h800 = load_hardware("h800-sxm")
    assert (h800.nvlink_GBps, H100.nvlink_GBps) == (200, 450)
    assert gemm_plateau(h800, "bf16") == gemm_plateau(H100, "bf16")


def test_job_limit_overrides_and_slows_only_tensor_core_work(explain):
    """The same plan at 500 W: every GEMM's K loop takes 1/0.8939 as long; its output write
    (compute [5a], at HBM x 0.9 = 3.015e12 B/s) and the memory-bound kernels (HBM) do not change,
    so the compute time grows by less than that. The writes of llama3-8b's forward GEMMs at TP 1,
    8,192 tokens (M 8,192; 2 B x M x N / wave efficiency on 132 SMs, 128x256 tiles): qkv N 6,144
    (1,536 tiles, 12 waves, 32/33) 103,809,024 B; attn_out and mlp_down N 4,096 (1,024 tiles, 8
    waves, 32/33) 69,206,016 B each; mlp_up N 28,672 (7,168 tiles, 55 waves, 7,168/7,260)
    475,791,360 B; output N 128,256 (32,064 tiles, 243 waves, 32,064/32,076) 2,102,132,736 B;
    2,820,145,152 B / 3.015e12 = 0.93537 ms."""
    from planner.compute import forward_gemm_times

    base = dict(model="llama3-8b", gpus=8, tp=1, pp=1, micro_batch=1, global_batch=8, sharding="fsdp")
    s0, p0, e0, j0 = explain(**base)
    s1, p1, e1, j1 = explain(**base, power_limit_w=500)
    assert (s0.power_limit_w, s0.power_limit_source) == (700.0, "tdp")
    assert (s1.power_limit_w, s1.power_limit_source) == (500.0, "job")
    assert j1["plan"]["tensor_rate_fraction"] == pytest.approx(0.893904, abs=1e-6)
    g0 = forward_gemm_times(s0.model, s0.hardware, p0.tp, 8192, "bf16")
    g1 = forward_gemm_times(s1.model, s1.hardware, p1.tp, 8192, "bf16")
    write = 2_820_145_152 / 3.015e12
    assert float(g1.total) == pytest.approx((float(g0.total) - write) / 0.893904 + write, rel=1e-6)
    ratio = j1["time"]["compute_s"] / j0["time"]["compute_s"]
    assert 1.0 < ratio < 1.0 / 0.893904
    assert j1["time"]["step_s"] > j0["time"]["step_s"]


def test_limit_above_the_rated_power_is_bad_input(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--power-limit-w", "800")
    assert_one_error(r, "power_limit_w 800 W", "tdp_W 700")


def test_deep_cap_warns(explain):
    from planner.plan import resolve
    from planner.schema import Job

    _, _, warnings = resolve(Job(model="llama3-8b", gpus=8, power_limit_w=300))
    assert any("below 50%" in w and "300 W" in w for w in warnings)


def test_sustained_calibration_scales_from_its_measured_limit():
    """Rows measured at the sustained clock at 700 W priced for a 500 W job: x 0.8939; rows
    measured at the job's own limit (or with the limit unrecorded): x 1; burst rows: the
    hardware figures' derating, 0.85 x 0.8939."""
    capped = H100.model_copy(update={"power_limit_W": 500.0})
    row = dict(M=4096, N=4096, K=4096, dtype="bf16", tflops=700.0, source="t")
    prov = dict(method="ingested", created="2026-12-01T00:00:00Z", planner_version="0")

    def cal(**kw):
        return GemmCalibration(gpu="H100", rows=[row], provenance=prov, **kw)

    assert calibration_derate(cal(sustained=True, power_limit_w=700.0), capped) == pytest.approx(0.893904, abs=1e-6)
    assert calibration_derate(cal(sustained=True, power_limit_w=500.0), capped) == pytest.approx(1.0)
    assert calibration_derate(cal(sustained=True), capped) == 1.0
    assert calibration_derate(cal(sustained=False), capped) == pytest.approx(SUSTAINED_TENSOR_FRACTION * 0.893904, abs=1e-6)
    assert calibration_derate(cal(sustained=False), H100) == SUSTAINED_TENSOR_FRACTION


def test_power_limit_from_nvidia_smi_line():
    from planner.calibrate.gemm import power_limit_from_smi

    assert power_limit_from_smi("1755 MHz, 1980 MHz, 512.31 W, 700.00 W, 61") == 700.0
    assert power_limit_from_smi("1755 MHz, 1980 MHz, [N/A], [N/A], 61") is None
    assert power_limit_from_smi(None) is None
    assert math.isclose(power_limit_from_smi("1, 2, 3 W, 500 W"), 500.0)
