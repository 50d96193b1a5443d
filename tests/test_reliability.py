"""Tests for planner.reliability: checkpoint intervals, goodput, failure rates, budget terms.

Figures come from the seed chapter (sec. 9.1, 9.2, 10.2 and its sec. 1.2 script), Daly 2006
(figs. 3-5), the Llama 3 paper (sec. 3.3.4) and model card, or are derived by hand in the
comments next to each assert.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from planner import reliability as rel
from planner.errors import PlannerError

HOUR = 3600.0
DAY = 86400.0

# source: seed chapter sec. 9.2 script and its printed output
SEED_WORK_S = 45 * 24 * 3600
SEED_MTBF_S = 12 * 3600
SEED_SAVE_S = 30
SEED_RESTART_S = 10 * 60
SEED_MINUTES = (2, 10, 27, 60, 180, 600)
SEED_PERCENT = (78.8, 93.2, 95.0, 93.7, 86.6, 63.1)

# source: seed chapter sec. 1.2 script (Llama 3 paper Table 3 shape, vocab 128,000)
LAYERS, H, FFN, HEADS, KV_HEADS, VOCAB = 80, 8192, 28672, 64, 8, 128_000
H100_BF16_PEAK = 989e12  # H100 SXM dense BF16, the seed's peak
H100_TDP_W = 700.0  # H100 SXM datasheet; Llama 3 model card "TDP of 700W"


def llama3_70b_params() -> int:
    head_dim = H // HEADS
    attn = H * H + 2 * H * (KV_HEADS * head_dim) + H * H
    mlp = 3 * H * FFN
    return LAYERS * (attn + mlp) + 2 * VOCAB * H


# ---------------------------------------------------------------- checkpoint intervals
def test_young_seed_27_minutes():
    # sqrt(2 * 30 * 43,200) = sqrt(2,592,000) = 1,609.97 s = 26.8 min; the seed prints 27
    t = rel.young_interval(SEED_SAVE_S, SEED_MTBF_S)
    assert t == pytest.approx(1609.9689, rel=1e-6)
    assert f"{t / 60:.0f}" == "27"


def test_young_vectorized():
    # sqrt(2 * 8 * 100) = 40, sqrt(2 * 2 * 100) = 20, sqrt(0) = 0
    out = rel.young_interval(np.array([8.0, 2.0, 0.0]), 100.0)
    np.testing.assert_allclose(out, [40.0, 20.0, 0.0])


@pytest.mark.parametrize(
    "mtbf_s, published_min, tol_min",
    [  # Daly 2006 figs. 3-5: delta = 5 min, tau_opt = 117 min, 57 min, 9.1 min (as printed)
        (24 * HOUR, 117.0, 0.5),
        (6 * HOUR, 57.0, 0.5),
        (15 * 60.0, 9.1, 0.05),
    ],
)
def test_daly_interval_matches_published_figures(mtbf_s, published_min, tol_min):
    assert rel.daly_interval(300.0, mtbf_s) / 60 == pytest.approx(published_min, abs=tol_min)


def test_daly_interval_hand_value_and_cap():
    # delta = 300, M = 86,400: 2M = 172,800, x = 1/576, sqrt(2 delta M) = 7,200:
    # 7,200 * (1 + (1/24)/3 + (1/576)/9) - 300 = 7,200 + 100 + 1.3889 - 300 = 7,001.389 s
    assert rel.daly_interval(300.0, 86400.0) == pytest.approx(7001.3889, abs=1e-3)
    # delta >= 2M: Daly's rule caps the interval at M; the branch is np.where, per element
    out = rel.daly_interval(np.array([300.0, 500.0]), np.array([86400.0, 200.0]))
    np.testing.assert_allclose(out, [7001.3889, 200.0], atol=1e-3)


@pytest.mark.parametrize(
    "save_s, mtbf_s", [(30, 12 * HOUR), (300, 24 * HOUR), (300, 6 * HOUR), (300, 15 * 60), (3, HOUR)]
)
def test_daly_interval_is_the_optimum_of_the_closed_form(save_s, mtbf_s):
    """Daly's series solves d T_w / d tau = 0 for his wall-time model; check numerically."""
    res = minimize_scalar(
        lambda t: -rel.expected_goodput(t, save_s, 600.0, mtbf_s).goodput,
        bounds=(1e-3, 10 * mtbf_s),
        method="bounded",
        options={"xatol": 1e-6},
    )
    daly = rel.daly_interval(save_s, mtbf_s)
    young = rel.young_interval(save_s, mtbf_s)
    assert daly == pytest.approx(res.x, rel=5e-3)
    # Young is first-order: off by ~1% at the seed's delta/M, by a third at delta/M = 1/3
    assert abs(young / res.x - 1) > abs(daly / res.x - 1)


# ---------------------------------------------------------------- Monte-Carlo
def test_simulation_reproduces_seed_section_9_2():
    sim = rel.simulate_goodput(SEED_WORK_S, np.array(SEED_MINUTES) * 60.0, SEED_SAVE_S, SEED_RESTART_S, SEED_MTBF_S)
    pct = 100 * sim.goodput
    # the tolerance: within 1.5 points
    np.testing.assert_allclose(pct, SEED_PERCENT, atol=1.5)
    # the same algorithm and random stream reproduce the seed's print exactly (to its 0.1%)
    assert [f"{g:.1%}" for g in sim.goodput] == [f"{p}%" for p in SEED_PERCENT]
    # the first value to full precision, computed with the seed's script itself
    assert sim.goodput[0] == pytest.approx(0.7876455471192718, abs=1e-12)
    # Young's 27 min is the best of the six
    assert SEED_MINUTES[int(np.argmax(sim.goodput))] == 27


def test_simulation_is_deterministic_and_seeded():
    a = rel.simulate_goodput(SEED_WORK_S, 27 * 60.0, SEED_SAVE_S, SEED_RESTART_S, SEED_MTBF_S)
    b = rel.simulate_goodput(SEED_WORK_S, 27 * 60.0, SEED_SAVE_S, SEED_RESTART_S, SEED_MTBF_S)
    c = rel.simulate_goodput(SEED_WORK_S, 27 * 60.0, SEED_SAVE_S, SEED_RESTART_S, SEED_MTBF_S, seed=100)
    assert a == b
    assert a.goodput != c.goodput
    assert np.ndim(a.goodput) == 0
    # 45 days / 12 h MTBF is ~90 failures before counting the extra wall time
    assert 85 < a.failures < 105
    assert a.wall_s == pytest.approx(SEED_WORK_S / 0.95, rel=0.01)


def test_simulation_without_failures_is_exact():
    # MTBF of 1e12 s: no failure in 20 runs of 100 s; 10 chunks of 10 s + 1 s save -> 100/110
    sim = rel.simulate_goodput(100.0, 10.0, 1.0, 5.0, 1e12, runs=3)
    assert sim.goodput == pytest.approx(100 / 110, abs=1e-12)
    assert sim.failures == 0
    assert sim.goodput_std == 0


def test_simulation_refuses_a_run_that_would_not_finish():
    # (tau + delta) / M = 100: a segment succeeds with probability e^-100
    with pytest.raises(PlannerError) as err:
        rel.simulate_goodput(1000.0, 100.0 * HOUR, 30.0, 600.0, HOUR)
    assert err.value.hint


# ---------------------------------------------------------------- closed form
def test_closed_form_agrees_with_simulation_on_seed_cases():
    intervals = np.array(SEED_MINUTES) * 60.0
    cf = rel.expected_goodput(intervals, SEED_SAVE_S, SEED_RESTART_S, SEED_MTBF_S, work_s=SEED_WORK_S)
    sim = rel.simulate_goodput(SEED_WORK_S, intervals, SEED_SAVE_S, SEED_RESTART_S, SEED_MTBF_S)
    # measured: within 0.1 points on all six (20 runs of ~100 failures each)
    np.testing.assert_allclose(100 * cf.goodput, 100 * sim.goodput, atol=0.5)
    np.testing.assert_allclose(cf.failures, sim.failures, rtol=0.05)


def test_closed_form_hand_values():
    m = 1000.0
    tau = m * math.log(2)  # e^{tau/M} - 1 = 1: one failed attempt per segment on average
    # delta = R = 0: T_w = M * 1 * T_s / tau, goodput = tau / M = ln 2
    g = rel.expected_goodput(tau, 0.0, 0.0, m, work_s=10 * tau)
    assert g.goodput == pytest.approx(math.log(2), rel=1e-12)
    assert g.failures == pytest.approx(10.0, rel=1e-12)  # 10 segments x 1
    # failed attempts last M - tau p/(1-p) = 1000 - 693.147 = 306.853 s each
    assert g.lost_s == pytest.approx(10 * (m - tau), rel=1e-12)
    # R = M ln 2 too: e^{R/M} = 2 doubles the wall time, goodput = ln2 / 2
    g2 = rel.expected_goodput(tau, 0.0, tau, m, work_s=10 * tau)
    assert g2.goodput == pytest.approx(math.log(2) / 2, rel=1e-12)
    # restarts take M (e^{R/M} - 1) = 1000 s per failure, failures during restart double the count
    assert g2.restart_s == pytest.approx(10 * m, rel=1e-12)
    assert g2.failures == pytest.approx(20.0, rel=1e-12)


def test_closed_form_first_order_matches_young_waste():
    # Young's first-order waste: delta/tau + tau/(2M) + R/M
    # = 30/1620 + 1620/86,400 + 600/43,200 = 0.018519 + 0.01875 + 0.013889 = 0.051157
    g = rel.expected_goodput(1620.0, SEED_SAVE_S, SEED_RESTART_S, SEED_MTBF_S)
    assert 1 - g.goodput == pytest.approx(0.051157, abs=2e-3)


def test_closed_form_terms_sum_and_broadcast():
    intervals = np.array([60.0, 600.0, 6000.0])
    g = rel.expected_goodput(intervals, 30.0, 600.0, 12 * HOUR, work_s=45 * DAY)
    assert g.wall_s.shape == (3,)
    np.testing.assert_allclose(g.compute_s + g.checkpoint_s + g.lost_s + g.restart_s, g.wall_s, rtol=1e-12)
    np.testing.assert_allclose(g.goodput, g.compute_s / g.wall_s, rtol=1e-12)
    # Daly's T_w = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau
    m, r, d = 12 * HOUR, 600.0, 30.0
    daly_tw = m * np.exp(r / m) * np.expm1((intervals + d) / m) * 45 * DAY / intervals
    np.testing.assert_allclose(g.wall_s, daly_tw, rtol=1e-12)
    np.testing.assert_allclose(g.checkpoint_s, 45 * DAY / intervals * d, rtol=1e-12)


def test_cheaper_save_lifts_curve_and_shortens_best_interval():
    # seed sec. 9.2: an asynchronous save shrinks the pause, "and so does the best interval"
    slow = rel.daly_interval(30.0, SEED_MTBF_S)
    fast = rel.daly_interval(3.0, SEED_MTBF_S)
    assert fast < slow / 3
    g_slow = rel.expected_goodput(slow, 30.0, SEED_RESTART_S, SEED_MTBF_S).goodput
    g_fast = rel.expected_goodput(fast, 3.0, SEED_RESTART_S, SEED_MTBF_S).goodput
    assert g_fast > g_slow + 0.02


@settings(max_examples=60, deadline=None)
@given(
    tau=st.floats(10.0, 1e5),
    d=st.floats(0.0, 1e3),
    r=st.floats(0.0, 1e4),
    m=st.floats(600.0, 1e7),
)
def test_closed_form_properties(tau, d, r, m):
    g = rel.expected_goodput(tau, d, r, m, work_s=1e6)
    assert 0.0 < g.goodput <= 1.0
    for term in (g.checkpoint_s, g.lost_s, g.restart_s):
        assert term >= 0.0
    assert g.compute_s + g.checkpoint_s + g.lost_s + g.restart_s == pytest.approx(g.wall_s, rel=1e-9)
    # a slower save, a slower restart or a shorter MTBF never helps
    assert rel.expected_goodput(tau, d + 1, r, m).goodput < g.goodput
    assert rel.expected_goodput(tau, d, r + 1, m).goodput <= g.goodput
    assert rel.expected_goodput(tau, d, r, m / 2).goodput < g.goodput


# ---------------------------------------------------------------- failure rate
def test_llama3_failure_rate():
    # 419 / (54 days x 16,384 GPUs) = 4.7359e-4 per GPU-day
    assert rel.LLAMA3_FAILURES_PER_GPU_DAY == pytest.approx(419 / (54 * 16384), rel=1e-12)
    assert rel.LLAMA3_FAILURES_PER_GPU_DAY == pytest.approx(4.7359e-4, rel=1e-4)
    # seed sec. 9.1: "an interruption roughly every 3.1 hours" on 16,384 GPUs (54 x 24 / 419 = 3.093 h)
    assert rel.mtbf_s(16384) / HOUR == pytest.approx(3.093, abs=1e-3)
    # seed sec. 9.2: 12 h on 4,096 GPUs, "a quarter of Meta's rate for a quarter of the GPUs";
    # the derived rate gives 4 x 3.093 = 12.37 h
    assert rel.mtbf_s(4096) / HOUR == pytest.approx(12.372, abs=1e-3)
    assert round(rel.mtbf_s(4096) / HOUR) == 12


def test_mtbf_round_trip_and_vectorized():
    rate = rel.failures_per_gpu_s_from_mtbf(12 * HOUR, 4096)
    assert rel.mtbf_s(4096, rate) == pytest.approx(12 * HOUR, rel=1e-12)
    # rate 1e-6 per GPU-second: 1,000 GPUs -> 1,000 s; 4,000 -> 250 s
    np.testing.assert_allclose(rel.mtbf_s(np.array([1000, 4000], dtype=np.int64), 1e-6), [1000.0, 250.0])


# ---------------------------------------------------------------- training time, MFU
def test_llama3_70b_params_and_flops():
    n = llama3_70b_params()
    assert n == 70_548_193_280  # the seed prints "70.5 billion"
    flops = rel.dense_training_flops(n, 15e12)
    assert f"{flops:.2e}" == "6.35e+24"  # the seed's "training compute: 6.35e+24 FLOPs"


def test_seed_section_10_2_days_at_mfu():
    flops = rel.dense_training_flops(llama3_70b_params(), 15e12)
    days = {m: rel.training_time(flops, 4096, H100_BF16_PEAK, m).days for m in (0.3, 0.4, 0.5)}
    # 6.349e24 / (4,096 x 989e12 x 0.4) / 86,400 = 45.36 days; 0.3 -> 60.48, 0.5 -> 36.29
    assert days[0.4] == pytest.approx(45.36, abs=0.01)
    assert (round(days[0.4]), round(days[0.3]), round(days[0.5])) == (45, 60, 36)
    # seed sec. 1.2: one H100 at 100% of peak takes 204 years; at 40%, 509 years
    one = rel.training_time(flops, 1, H100_BF16_PEAK, np.array([1.0, 0.4]))
    np.testing.assert_array_equal(np.round(one.wall_s / (365 * DAY)), [204, 509])


def test_seed_section_10_2_meta_gpu_hours():
    flops = rel.dense_training_flops(llama3_70b_params(), 15e12)
    # at 28% MFU: 6.349e24 / (989e12 x 0.28) / 3,600 = 6.369e6 GPU-hours, Meta's 6.4 M
    t = rel.training_time(flops, 4096, H100_BF16_PEAK, 0.28)
    assert t.gpu_hours == pytest.approx(6.4e6, abs=0.05e6)
    # GPU-hours do not depend on the GPU count
    assert rel.training_time(flops, 16384, H100_BF16_PEAK, 0.28).gpu_hours == pytest.approx(t.gpu_hours, rel=1e-12)
    # and back: 6.4 M hours imply 27.9% ("about 28% of peak")
    mfu = rel.implied_mfu(flops, 6.4e6 * HOUR, H100_BF16_PEAK)
    assert mfu == pytest.approx(0.2786, abs=1e-4)
    assert round(mfu, 2) == 0.28


# ---------------------------------------------------------------- energy, cost
def test_energy_of_llama3_70b():
    # model card: 6.4 M GPU-hours at 700 W -> 6.4e6 x 0.7 kWh = 4.48e6 kWh
    e = rel.energy(6.4e6 * HOUR, H100_TDP_W)
    assert e.total_kwh == pytest.approx(4.48e6, rel=1e-12)
    assert e.overhead_J == 0.0
    # PUE 1.1 adds 10%: 4.928e6 kWh, of which 0.448e6 facility overhead
    e2 = rel.energy(6.4e6 * HOUR, H100_TDP_W, pue=1.1)
    assert e2.total_kwh == pytest.approx(4.928e6, rel=1e-12)
    assert e2.gpu_J + e2.overhead_J == pytest.approx(e2.total_J, rel=1e-12)
    assert e2.overhead_J / rel.JOULES_PER_KWH == pytest.approx(0.448e6, rel=1e-9)


def test_cost():
    # 6.4 M GPU-hours at 2.00 per GPU-hour = 12.8 M
    assert rel.cost(6.4e6 * HOUR, 2.0) == pytest.approx(12.8e6, rel=1e-12)
    np.testing.assert_allclose(rel.cost(np.array([HOUR, 10 * HOUR]), 3.0), [3.0, 30.0])


# ---------------------------------------------------------------- checkpoint size and time
def test_checkpoint_size_seed_llama3_70b():
    n = llama3_70b_params()
    total = rel.checkpoint_bytes_per_gpu(4.0 * n, 8.0 * n)  # FP32 master + Adam m, v
    assert total.total_bytes / 1e9 == pytest.approx(846.6, abs=0.1)  # seed: "846 GB"
    per_gpu = rel.checkpoint_bytes_per_gpu(4.0 * n / 4096, 8.0 * n / 4096, extra_bytes=0.0)
    # seed: "about 0.2 GB per GPU" with FSDP on 4,096 GPUs: 846.6 / 4,096 = 0.2067 GB
    assert per_gpu.total_bytes / 1e9 == pytest.approx(0.2067, abs=1e-4)
    assert per_gpu.master_weights_bytes + per_gpu.optimizer_bytes + per_gpu.extra_bytes == per_gpu.total_bytes


def test_checkpoint_time_sync_and_async():
    b = 0.2e9  # bytes per GPU
    # sync: 0.2 GB x 4,096 = 819.2 GB over 2 TB/s = 0.4096 s; the copy 0.2e9 / 64e9 = 3.125 ms
    t = rel.checkpoint_time(b, 4096, 2e12, async_save=np.array([False, True]))
    np.testing.assert_allclose(t.write_s, 0.4096)
    np.testing.assert_allclose(t.copy_s, 3.125e-3)
    np.testing.assert_allclose(t.pause_s, [0.4096, 3.125e-3])
    # a slow host link sets a synchronous pause: 1 GB/s -> 0.2 s copy vs 0.0041 s write on 200 TB/s
    t2 = rel.checkpoint_time(b, 4096, 200e12, host_Bps=1e9)
    assert t2.pause_s == pytest.approx(0.2)
    assert rel.PCIE_GEN5_X16_BPS == 64e9


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "call",
    [
        lambda: rel.young_interval(30.0, 0.0),
        lambda: rel.daly_interval(-1.0, 3600.0),
        lambda: rel.expected_goodput(0.0, 30.0, 600.0, 3600.0),
        lambda: rel.expected_goodput(60.0, 30.0, np.nan, 3600.0),
        lambda: rel.training_time(1e24, 8, 989e12, 1.5),
        lambda: rel.training_time(1e24, 0, 989e12, 0.4),
        lambda: rel.energy(1e6, 700.0, pue=0.9),
        lambda: rel.mtbf_s(np.array([8, -1])),
        lambda: rel.simulate_goodput(1000.0, 60.0, 1.0, 1.0, 3600.0, runs=0),
        lambda: rel.checkpoint_time(1e9, 8, 0.0),
    ],
)
def test_bad_input_raises_planner_error(call):
    with pytest.raises(PlannerError) as err:
        call()
    assert err.value.message and err.value.hint
