"""The GEMM epilogue (planner/compute.py [5a]): on a GPU whose GEMM kernels write each output
tile after its K loop (Hopper's cooperative kernels: DeepGEMM @327ec92 fp8_gemm.cuh l. 353-394,
cuBLAS's warpgroupsize2x1x1 kernels), a GEMM takes (2MNK / P + 2 B x MN / W) / wave efficiency:
its rate grows with K, as DeepGEMM's README table measured on H800 (tests/data/gemm_measurements.yaml
rows of source `deepgemm`).

Hand derivation on H800 SXM (hardware_db/h800-sxm.yaml: fp8 MAMF 1,402.6 TFLOP/s at K 14,336,
HBM 3.35 TB/s, 132 SMs):
- W = 3.35e12 x HBM_EFFICIENCY 0.9 = 3.015e12 B/s;
- P = 1 / (1/1402.6e12 - 2 / (2 x 14,336 x 3.015e12)) = 1 / (7.12962e-16 - 2.31363e-17)
  = 1,449.64e12 FLOP/s (the burst K-loop rate, before SUSTAINED_TENSOR_FRACTION);
- at M 4,096 every row's tiles fill 32/33 of their waves (128 x 256 tiles: N 32,768 -> 4,096
  tiles, 32 waves of 132; N 7,168 -> 896, 7 waves; N 4,096 -> 512, 4; N 24,576 -> 3,072, 24), so
  rate = (32/33) / (1/P + 1/(K W)) (2MNK over (2MNK/P + 2MN/W) / (32/33)):
    K 512:    K W = 1,543.68e12, 1/P + 1/(K W) = 6.89826e-16 + 6.47803e-16 -> 747.55 x 32/33 = 724.9
    K 1,536:  K W = 4,631.04e12 -> 6.89826e-16 + 2.15934e-16 -> 1,104.05 x 32/33 = 1,070.6
    K 2,048:  K W = 6,174.72e12 -> 6.89826e-16 + 1.61951e-16 -> 1,174.05 x 32/33 = 1,138.5
    K 7,168:  K W = 21,611.52e12 -> 6.89826e-16 + 4.62716e-17 -> 1,358.52 x 32/33 = 1,317.3
    K 16,384: K W = 49,397.76e12 -> 6.89826e-16 + 2.02438e-17 -> 1,408.31 x 32/33 = 1,365.6
  TFLOP/s, against DeepGEMM's measured 775, 1,212, 1,168, 1,410, 1,520 (before: 1,402.6 x 32/33
  = 1,360.1 at every K).
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from planner.catalog import load_hardware
from planner.compute import (
    GEMM_OUTPUT_BYTES, SUSTAINED_TENSOR_FRACTION, _mainloop_burst, gemm_epilogue_rate, gemm_epilogue_serialized,
    gemm_mainloop, gemm_plateau, gemm_time, price_gemms,
)
from planner.layers.common import shapes

H800 = load_hardware("h800-sxm")
W = 3.015e12
P = 1449.64e12
DEEPGEMM_M4096 = [  # (N, K, measured TFLOP/s, model TFLOP/s by hand above)
    (32768, 512, 775.0, 724.9),
    (24576, 1536, 1212.0, 1070.6),
    (7168, 2048, 1168.0, 1138.5),
    (4096, 7168, 1410.0, 1317.3),
    (7168, 16384, 1520.0, 1365.6),
]


def _rate(m, n, k, hw=H800):
    """Burst TFLOP/s of the model at one shape (the K-loop rate before the sustained derating)."""
    t = gemm_time(m, n, k, _mainloop_burst(hw, "fp8"), hw.compute.sm_count, gemm_epilogue_rate(hw))
    return 2.0 * m * n * k / t / 1e12


def test_h800_rates_by_hand():
    assert gemm_epilogue_serialized(H800) and GEMM_OUTPUT_BYTES == 2.0
    assert gemm_epilogue_rate(H800) == pytest.approx(W, rel=1e-12)
    assert _mainloop_burst(H800, "fp8") == pytest.approx(P, rel=1e-5)
    # sustained: the K loop's rate at the sustained clock; the plateau (attention's reference) stays the figure
    assert gemm_mainloop(H800, "fp8") == pytest.approx(P * SUSTAINED_TENSOR_FRACTION, rel=1e-5)
    assert gemm_plateau(H800, "fp8") == pytest.approx(1402.6e12 * SUSTAINED_TENSOR_FRACTION, rel=1e-12)


@pytest.mark.parametrize("n,k,measured,model", DEEPGEMM_M4096)
def test_deepgemm_m4096_rows(n, k, measured, model):
    """The module docstring's figures; each within 11.7% of DeepGEMM's measurement (before the
    epilogue the K 512 row was 75% too fast)."""
    got = _rate(4096.0, float(n), float(k))
    assert got == pytest.approx(model, abs=0.1)
    assert abs(got / measured - 1.0) < 0.117


def test_rate_grows_with_k_as_measured():
    """DeepGEMM's rate at K 16,384 over K 512 (M 4,096): 1,520 / 775 = 1.961 measured; the model
    1,365.6 / 724.9 = 1.884 (before: 1)."""
    lo, hi = _rate(4096.0, 32768.0, 512.0), _rate(4096.0, 7168.0, 16384.0)
    assert hi / lo == pytest.approx(1365.6 / 724.9, rel=1e-3)
    assert 1520.0 / 775.0 == pytest.approx(1.961, abs=1e-3)


def test_the_measured_figure_comes_back_at_its_shape():
    """At the MAMF shape's K, wave efficiency aside, 1 / (1/P + 2 / (2 K W)) is the figure:
    H100 SXM bf16 794.5 at K 13,312 (P 810.545), fp8 1,402.6 at K 14,336."""
    h100 = load_hardware("h100-sxm")
    for prec, k, fig in (("bf16", 13312, 794.5e12), ("fp8", 14336, 1402.6e12)):
        p = _mainloop_burst(h100, prec)
        assert 1.0 / (1.0 / p + GEMM_OUTPUT_BYTES / (2.0 * k * W)) == pytest.approx(fig, rel=1e-12)
    assert _mainloop_burst(h100, "bf16") == pytest.approx(810.545e12, rel=1e-6)


def test_a_sibling_parts_figure_is_backed_out_at_the_measured_gpus_hbm():
    """h100-sxm-96gb-hbm2e carries the H100 SXM5's MAMF figures, measured on 3.35 TB/s HBM3: its K loop
    is the H100 SXM5's (810.545 bf16), its own write slower (2.4 x 0.9 = 2.16e12 B/s)."""
    gt = load_hardware("h100-sxm-96gb-hbm2e")
    assert _mainloop_burst(gt, "bf16") == pytest.approx(810.545e12, rel=1e-6)
    assert gemm_epilogue_rate(gt) == pytest.approx(2.16e12, rel=1e-12)


def test_blackwell_epilogue_overlaps():
    """sm_100: the write overlaps the next tile's MMAs (CUTLASS sm100 kernels' accumulator
    pipeline): no write term, the K loop's rate is the measured figure (B200 bf16 1,745)."""
    b200 = load_hardware("b200")
    assert not gemm_epilogue_serialized(b200)
    assert gemm_epilogue_rate(b200) == np.inf
    assert gemm_mainloop(b200, "bf16") == gemm_plateau(b200, "bf16")
    assert _mainloop_burst(b200, "bf16") == 1745.0e12


def test_price_gemms_uses_the_write():
    """price_gemms (the step's GEMM pricing) at one DeepGEMM shape: (2MNK / (P x 0.85) + 2MN / W)
    / (32/33) for M 4,096, N 32,768, K 512 in fp8 on H800."""
    rows = shapes([("x", 4096.0, 32768.0, 512.0, 1.0)])
    t = price_gemms(rows, H800, "fp8")["x"]
    m, n, k = 4096.0, 32768.0, 512.0
    want = (2 * m * n * k / (P * SUSTAINED_TENSOR_FRACTION) + 2 * m * n / W) / (32 / 33)
    assert float(t) == pytest.approx(want, rel=1e-5)


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000),
       dm=st.integers(0, 600), dn=st.integers(0, 600), dk=st.integers(0, 600))
def test_more_work_never_takes_less_time(m, n, k, dm, dn, dk):
    """With the write, time = (2K/P + 2/W) x waves x sms x tm x tn: still monotone in M, N and K."""
    t0 = gemm_time(float(m), float(n), float(k), P, 132, W)
    t1 = gemm_time(float(m + dm), float(n + dn), float(k + dk), P, 132, W)
    assert t1 >= t0 * (1 - 1e-12)
