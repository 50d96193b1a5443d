"""GEMM tile and wave quantization (planner/compute.py wave_efficiency, [5]: NVIDIA's "Matrix
Multiplication Background User's Guide", "Dimension Quantization Effects").

A GEMM's output is cut into tm x tn tiles (GEMM_TILE = 128 x 256, either orientation); every tile
is computed in full (tile quantization) and the SMs take tiles in waves of `sms` (wave
quantization), so the time is waves x one tile's time: 2 K tm tn / (plateau / sms) a wave."""

import numpy as np
from hypothesis import given, settings, strategies as st

from planner.compute import GEMM_TILE, gemm_time, wave_efficiency

SMS = 132  # H100 SXM
PLATEAU = 800e12


def test_one_wave_costs_one_tile_time_whatever_the_rows():
    """M = 1,280 and 1,281, N = 512, K = 2,048 on 132 SMs. 128 x 256 tiles: ceil(M/128) x 2 =
    20 and 22 tiles, one wave each; 256 x 128: 5 x 4 = 20 and 6 x 4 = 24, one wave. Either way
    one wave: time = 2 K tm tn sms / plateau = 2 x 2,048 x 128 x 256 x 132 / 800e12
    = 2.2150e-5 s for both (the wave factor alone priced M = 1,281 at 20/22 of M = 1,280's time
    x 1281/1280: 9% faster with more work)."""
    tm, tn = GEMM_TILE
    one_wave = 2.0 * 2048 * tm * tn * SMS / PLATEAU
    assert np.isclose(one_wave, 2.2150e-5, rtol=1e-4)
    for m in (1280.0, 1281.0):
        assert np.isclose(gemm_time(m, 512.0, 2048.0, PLATEAU, SMS), one_wave, rtol=1e-12)
    # the useful fraction: M N / (waves sms tm tn) = 1,281 x 512 / (132 x 32,768) = 0.151633
    assert np.isclose(wave_efficiency(1281.0, 512.0, SMS), 1281 * 512 / (132 * 32768), rtol=1e-12)


def test_full_tiles_full_waves_are_fully_efficient():
    """M = 128 x 132 = 16,896 rows, N = 256: 132 tiles of 128 x 256, exactly one wave, no padding:
    efficiency 1 (time = the plateau's)."""
    assert wave_efficiency(16896.0, 256.0, SMS) == 1.0


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), dm=st.integers(0, 600), dn=st.integers(0, 600))
def test_more_rows_or_columns_never_take_less_time(m, n, dm, dn):
    """Monotone: a GEMM with more output rows or columns never prices faster (K fixed)."""
    t0 = gemm_time(float(m), float(n), 4096.0, PLATEAU, SMS)
    t1 = gemm_time(float(m + dm), float(n + dn), 4096.0, PLATEAU, SMS)
    assert t1 >= t0 * (1 - 1e-12)
