"""The power envelope: what a board power limit does to the tensor-core rate. Units: watts
(W); the rate fraction is dimensionless.

A training job runs tensor-core kernels back to back, at the board's power limit; the firmware
holds the limit by lowering the SM clock, and tensor-core throughput is proportional to the
clock. The catalog's GEMM and attention figures (hardware_db `compute:`) hold at the board's
rated power (`tdp_W`); many fleets run below it (Meta's Grand Teton H100s at 500 W,
torchtitan docs/performance.md), which `power_limit_W` (hardware file) or `power_limit_w`
(job, CLI `--power-limit-w`) sets.

Named assumption, POWER_CLOCK_EXPONENT = 3: at a limit P the tensor-core rate is
(P / tdp_W)^(1/3) of the rate at tdp_W [1], checked against [2]; memory-bound kernels are left
alone (the power limit lowers the SM clock, not the HBM clock). Below DEEP_CAP_FRACTION of
tdp_W the rule is optimistic [3] and plan.resolve warns. `planner calibrate gemm --sustained`
measures the rates at the limit in force and records it (profile `power_limit_w`), which
replaces the assumption (compute.calibration_derate).

References
[1] CMOS dynamic power P = a C V^2 f, and in the DVFS range the supply voltage rises about
    linearly with the clock, so the power of a fully busy chip grows as f^3 and the clock a
    power limit allows falls as its cube root (Hennessy & Patterson, "Computer Architecture:
    A Quantitative Approach", 6th ed., sec. 1.5 "Trends in Power and Energy in Integrated
    Circuits"; the "cube-root rule" of DVFS). Static power is neglected.
[2] The same GH100 die rated at two power envelopes (NVIDIA H100 datasheet; dense = half the
    sparse figures): H100 SXM 989 TFLOP/s bf16 at 700 W, H100 NVL 835 at 400 W, a ratio of
    0.844, where (400/700)^(1/3) = 0.830.
[3] A GB300 capped at 500 of its 1400 W ran cuBLAS GEMMs at ~617 TFLOP/s against ~1600-2174
    at 1400 W (facebookexperimental/triton PR #2023, 2026-07): ~0.3 of the rate at 0.36 of the
    power, where the cube-root rule says 0.71. Far below the rated power the voltage sits at
    its floor and power falls only linearly with the clock.
"""

from __future__ import annotations

from typing import Optional

POWER_CLOCK_EXPONENT = 3.0  # board power ~ clock^3 in the DVFS range [1], checked against [2]
DEEP_CAP_FRACTION = 0.5  # below this share of tdp_W the model is optimistic [3]


def power_limit(hw) -> float:
    """The board power limit the hardware runs at, W: its `power_limit_W` (a fleet's set point,
    or the job's `power_limit_w` applied by plan.resolve), else its rated power tdp_W."""
    p = getattr(hw, "power_limit_W", None)
    return float(p) if p else float(hw.tdp_W)


def power_rate_fraction(hw, limit_w: Optional[float] = None) -> float:
    """Tensor-core rate at board power limit `limit_w` (default: power_limit(hw)) over the rate
    at the rated power tdp_W: min(1, P / tdp_W)^(1 / POWER_CLOCK_EXPONENT) [1]."""
    p = power_limit(hw) if limit_w is None else float(limit_w)
    return min(1.0, p / float(hw.tdp_W)) ** (1.0 / POWER_CLOCK_EXPONENT)
