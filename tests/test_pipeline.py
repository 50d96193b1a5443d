"""Pipeline schedules: the simulator reproduces the seed's section 5.3 timelines character for
character, and the closed forms the search uses (planner.pipeline.bubble_fraction,
inflight_microbatches) agree with the simulator over a grid of (p, m, v) for GPipe, 1F1B,
interleaved 1F1B (Megatron-LM's order) and ZB-H1 (Qi et al. 2023)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.pipeline import (
    GPIPE,
    INTERLEAVED,
    ONE_F_ONE_B,
    SCHEDULE_CODES,
    ZERO_BUBBLE_H1,
    bubble_fraction,
    inflight_microbatches,
    microbatch_group,
    reduce_queue_overrun,
    simulate,
    timeline_text,
)

# The seed chapter, section 5.3: the script's printed output for P, M = 4, 8 and
# TF, TB = 1, 2, copied verbatim (`print(name); simulate(sch)`).
SEED_GPIPE = """\
GPipe
  stage 0: 01234567.........aabbccddeeffgghh   peak stored: 8
  stage 1: .01234567......aabbccddeeffgghh..   peak stored: 8
  stage 2: ..01234567...aabbccddeeffgghh....   peak stored: 8
  stage 3: ...01234567aabbccddeeffgghh......   peak stored: 8
  step takes 33 units, each stage busy 24: idle 27% of the time
"""
SEED_1F1B = """\
1F1B
  stage 0: 0123......aa4bb5cc6dd7ee.ff.gg.hh   peak stored: 4
  stage 1: .012....aa3bb4cc5dd6ee7ff.gg.hh..   peak stored: 3
  stage 2: ..01..aa2bb3cc4dd5ee6ff7gg.hh....   peak stored: 2
  stage 3: ...0aa1bb2cc3dd4ee5ff6gg7hh......   peak stored: 1
  step takes 33 units, each stage busy 24: idle 27% of the time
"""

GRID = [(p, m) for p in (2, 4, 8) for m in (p, 2 * p, 4 * p)]


def exact_bubble(sim):
    """Idle over useful time as an exact fraction (the simulator's times are fractions)."""
    busy = max(sim.busy)
    return (sim.step - busy) / busy


# --------------------------------------------------------------------------- the seed


@pytest.mark.parametrize("name, expected", [("gpipe", SEED_GPIPE), ("1f1b", SEED_1F1B)])
def test_cli_prints_seed_timeline_exactly(cli, name, expected):
    r = cli("pipeline", "--pp", 4, "--microbatches", 8, "--schedule", name)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == expected


def test_cli_seed_durations_given_explicitly(cli):
    r = cli("pipeline", "--pp", 4, "--microbatches", 8, "--schedule", "1f1b", "--tf", 1, "--tb", 2)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == SEED_1F1B


def test_seed_figures_from_the_library():
    g, o = simulate(4, 8, "gpipe"), simulate(4, 8, "1f1b")
    assert g.peak_stored == (8, 8, 8, 8)
    assert o.peak_stored == (4, 3, 2, 1)
    for sim in (g, o):
        assert sim.step == 33 and sim.busy == (24, 24, 24, 24)
        # "Every stage is idle for 9 of the 33 units ... 3/8 of the 24 units of useful work"
        assert sim.idle_fraction == pytest.approx((9 / 33,) * 4)
        assert exact_bubble(sim) == Fraction(3, 8)
    assert timeline_text(g) + "\n" == SEED_GPIPE


def test_seed_5_2_bubble_and_interleaving():
    # "Four stages and 16 micro-batches waste 3/16, about 19%."
    assert float(bubble_fraction(4, 16)) == 3 / 16
    assert exact_bubble(simulate(4, 16, "gpipe")) == Fraction(3, 16)
    assert exact_bubble(simulate(4, 16, "1f1b")) == Fraction(3, 16)
    # "the bubble shrinks to (p - 1)/(v * m) for v pieces per GPU"
    for v in (2, 4):
        sim = simulate(4, 16, "interleaved", vpp=v)
        assert exact_bubble(sim) == Fraction(3, 16) / v
        assert float(bubble_fraction(4, 16, v, INTERLEAVED)) == pytest.approx(3 / 16 / v, rel=1e-15)


# --------------------------------------------------------------------------- bubble vs closed form


@pytest.mark.parametrize("p, m", GRID)
@pytest.mark.parametrize("v", [1, 2, 4])
def test_bubble_matches_closed_form_over_grid(p, m, v):
    sim = simulate(p, m, "1f1b" if v == 1 else "interleaved", vpp=v, t_f=1, t_b=2)
    assert exact_bubble(sim) == Fraction(p - 1, v * m)
    code = ONE_F_ONE_B if v == 1 else INTERLEAVED
    assert float(bubble_fraction(p, m, v, code)) == pytest.approx((p - 1) / (v * m), rel=1e-15)
    # the step: m (T_F + T_B) of work plus (p-1)(T_F + T_B)/v of fill and drain
    assert sim.step == m * 3 + Fraction(3 * (p - 1), v)


@pytest.mark.parametrize("t_f, t_b", [(1, 1), (2, 3), (1, 3)])
def test_bubble_does_not_depend_on_the_backward_ratio(t_f, t_b):
    for p, m in [(2, 4), (4, 8), (4, 4)]:
        assert exact_bubble(simulate(p, m, "gpipe", t_f=t_f, t_b=t_b)) == Fraction(p - 1, m)
        assert exact_bubble(simulate(p, m, "1f1b", t_f=t_f, t_b=t_b)) == Fraction(p - 1, m)
        assert exact_bubble(simulate(p, m, "interleaved", vpp=2, t_f=t_f, t_b=t_b)) == Fraction(p - 1, 2 * m)


@pytest.mark.parametrize("p, m", GRID + [(4, 1), (4, 3), (8, 5)])
def test_gpipe_bubble_and_peak(p, m):
    sim = simulate(p, m, "gpipe")
    assert exact_bubble(sim) == Fraction(p - 1, m)
    assert sim.peak_stored == (m,) * p
    assert float(inflight_microbatches(p, m, 1, GPIPE)) == m


@pytest.mark.parametrize("p, m", GRID + [(4, 1), (4, 2), (8, 3), (8, 5)])
def test_1f1b_peak_per_stage(p, m):
    sim = simulate(p, m, "1f1b")
    expected = tuple(min(m, p - s) for s in range(p))
    assert sim.peak_stored == expected
    assert [float(inflight_microbatches(p, m, 1, ONE_F_ONE_B, stage=s)) for s in range(p)] == list(expected)
    assert exact_bubble(sim) == Fraction(p - 1, m)  # also for m < p


# --------------------------------------------------------------------------- interleaved memory


@pytest.mark.parametrize("p, m", GRID)
@pytest.mark.parametrize("v", [2, 4])
def test_interleaved_first_stage_peak_vs_korthikanti(p, m, v):
    """Peak stored on stage 0, in micro-batches of a whole stage's layers (a chunk holds 1/v of
    them): Megatron's warm-up 2(p-1) + (v-1)p chunk passes plus one, i.e. p + (p-1)/v, which is
    Korthikanti's p (1 + (p-1)/(p v)) -- except at m = p, where every forward runs first and
    the stage holds all m micro-batches, exactly p."""
    sim = simulate(p, m, "interleaved", vpp=v)
    first = sim.peak_stored[0]
    korthikanti = p * (1 + Fraction(p - 1, p * v))
    if m == p:
        assert first == p and sim.peak_chunks[0] == m * v
    else:
        assert first == korthikanti
        assert sim.peak_chunks[0] == 2 * (p - 1) + (v - 1) * p + 1
    assert first == min(m, p + Fraction(p - 1, v))
    assert float(inflight_microbatches(p, m, v, INTERLEAVED)) == pytest.approx(float(first), rel=1e-15)


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 4, 2), (8, 16, 4), (2, 8, 4)])
def test_interleaved_peak_every_stage(p, m, v):
    sim = simulate(p, m, "interleaved", vpp=v)
    for s in range(p):
        chunks = min(m * v, 2 * (p - s - 1) + (v - 1) * p + 1)
        assert sim.peak_chunks[s] == chunks
        assert float(inflight_microbatches(p, m, v, INTERLEAVED, stage=s)) == pytest.approx(chunks / v, rel=1e-15)


# --------------------------------------------------------------------------- Llama 3's schedule: any m


def _valid_groups(p, m):
    """The N contiguous micro-batches without dependency bubbles (Megatron-LM schedules.py
    forward_backward_pipelining_with_interleaving: N in [p, m], m % N 0 or >= p); one group N = m
    where m < p (Llama 3's schedule runs fewer micro-batches than stages)."""
    return [m] if m < p else [n for n in range(p, m + 1) if m % n == 0 or m % n >= p]


@pytest.mark.parametrize("p", [2, 3, 4, 5])
@pytest.mark.parametrize("v", [2, 3])
def test_any_microbatch_count_bubble_and_peak_by_simulation(p, v):
    """Llama 3's interleaved schedule (arXiv:2407.21783 sec. 3.3.2, pipeline.py [9]) with every
    m from 1 to 3p + 1 and every bubble-free N: the simulated bubble on every stage is the
    closed form (p - 1 + (v-1) max(p - m, 0))/(v m) -- the paper's (p - 1)/(v m) once m >= p,
    whether p divides m or not -- and the peak min(2(p - s - 1) + (v - 1) N + 1, m v) chunks;
    microbatch_group picks the smallest such N."""
    for m in range(1, 3 * p + 2):
        groups = _valid_groups(p, m)
        assert int(microbatch_group(p, m)) == min(groups)
        for n in groups:
            sim = simulate(p, m, "interleaved", vpp=v, group=n)
            want = Fraction(p - 1 + (v - 1) * max(p - m, 0), v * m)
            for s in range(p):
                assert (sim.step - sim.busy[s]) / sim.busy[s] == want, (m, n, s)
                assert sim.peak_chunks[s] == min(2 * (p - s - 1) + (v - 1) * n + 1, m * v), (m, n, s)
        assert float(bubble_fraction(p, m, v, INTERLEAVED)) == pytest.approx(float(want), rel=1e-15)
        n0 = min(groups)
        for s in range(p):
            assert float(inflight_microbatches(p, m, v, INTERLEAVED, stage=s)) == pytest.approx(
                min(2 * (p - s - 1) + (v - 1) * n0 + 1, m * v) / v, rel=1e-15)


def test_any_microbatch_count_by_hand():
    """p 4, v 2: m 2 < p waits (v - 1)(p - m) = 2 chunk slots more than the paper's (p - 1)/(v m)
    = 3/4: 5/4; m 6 (one group of 6, as 6 % 4 = 2 < 4 leaves no N = 4) has the paper's 3/12;
    m 7 on p 2 takes N 4 (7 % 4 = 3 >= 2; N 2 and 3 leave a group of 1). The megatron default
    (group None = p) refuses m 6 on p 4."""
    assert float(bubble_fraction(4, 2, 2, INTERLEAVED)) == 5 / 4
    assert exact_bubble(simulate(4, 2, "interleaved", vpp=2, group=2)) == Fraction(5, 4)
    assert float(bubble_fraction(4, 6, 2, INTERLEAVED)) == 3 / 12
    assert exact_bubble(simulate(4, 6, "interleaved", vpp=2, group=6)) == Fraction(3, 12)
    assert [int(x) for x in microbatch_group([4, 4, 4, 2, 16], [8, 6, 2, 7, 20])] == [4, 6, 2, 4, 20]
    with pytest.raises(PlannerError, match="multiple of --pp"):
        simulate(4, 6, "interleaved", vpp=2)


def test_interleaved_follows_megatron_order():
    """Megatron-LM forward_backward_pipelining_with_interleaving: rank r runs
    min(2(p-r-1) + (v-1)p, m v) forwards before its first backward; the first p*v forwards
    of rank 0 are micro-batches 0..p-1 of chunk 0, then 0..p-1 of chunk 1, ..."""
    p, m, v = 4, 8, 2
    sim = simulate(p, m, "interleaved", vpp=v)
    for r in range(p):
        mine = [x for x in sim.passes if x.stage == r]
        first_b = next(i for i, x in enumerate(mine) if x.kind == "B")
        assert first_b == min(2 * (p - r - 1) + (v - 1) * p, m * v) + 1  # warm-up, then 1F before 1B
    rank0 = [(x.microbatch, x.chunk) for x in sim.passes if x.stage == 0 and x.kind == "F"]
    assert rank0[:8] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]
    assert rank0[8:12] == [(4, 0), (5, 0), (6, 0), (7, 0)]
    rank0_b = [(x.microbatch, x.chunk) for x in sim.passes if x.stage == 0 and x.kind == "B"]
    assert rank0_b[:4] == [(0, 1), (1, 1), (2, 1), (3, 1)]  # backward visits the last chunk first


# --------------------------------------------------------------------------- ZB-H1


@pytest.mark.parametrize("p, m", GRID)
def test_zbh1_cuts_the_bubble_and_keeps_1f1b_memory(p, m):
    zb, one = simulate(p, m, "zb-h1"), simulate(p, m, "1f1b")
    assert exact_bubble(zb) < exact_bubble(one)
    # Qi et al. 2023 sec. 2.1 with T_F = T_B = T_W (the default split of T_B = 2 T_F):
    # bubble (p-1)(T_F + T_B - T_W) = (p-1) units, a third of 1F1B's
    assert zb.step - max(zb.busy) == p - 1
    assert exact_bubble(zb) == exact_bubble(one) / 3 == Fraction(p - 1, 3 * m)
    assert float(bubble_fraction(p, m, 1, ZERO_BUBBLE_H1)) == pytest.approx((p - 1) / (3 * m), rel=1e-15)
    # peak memory: every stage holds 1F1B's first-stage peak, never more
    assert max(zb.peak_stored) == max(one.peak_stored) == min(m, p)
    assert zb.peak_stored == (min(m, p),) * p
    assert float(inflight_microbatches(p, m, 1, ZERO_BUBBLE_H1)) == float(inflight_microbatches(p, m, 1, ONE_F_ONE_B))


@pytest.mark.parametrize("t_f, t_bi, t_w", [(1, 1, 1), (2, 1, 1), (1, 2, 1), (3, 2, 1), (1, 1, Fraction(1, 2))])
def test_zbh1_bubble_is_the_papers_expression(t_f, t_bi, t_w):
    """(p-1)(T_F + T_B - T_W) with B the input-gradient pass, for W no longer than F or B."""
    for p, m in [(4, 4), (4, 8), (8, 16), (3, 7)]:
        sim = simulate(p, m, "zb-h1", t_f=t_f, t_b=t_bi + t_w, t_w=t_w)
        assert sim.step - max(sim.busy) == (p - 1) * (t_f + t_bi - t_w)
        assert sim.busy == (m * (t_f + t_bi + t_w),) * p


@pytest.mark.parametrize("p, m", [(4, 2), (4, 8), (8, 3), (8, 16), (2, 5)])
@pytest.mark.parametrize("t_f, t_bi, t_w", [(1, 1, 1), (1, 2, 3), (1, 1, 2), (2, 1, 3), (3, 1, 1)])
def test_zbh1_closed_form_matches_simulation_in_general(p, m, t_f, t_bi, t_w):
    """Beyond the paper's setting (W longer than F or B, or m < p) the W passes hide
    (min(m,p) - 1) min(T_W, T_F, T_B) of 1F1B's (p-1)(T_F + T_B) bubble."""
    sim = simulate(p, m, "zb-h1", t_f=t_f, t_b=t_bi + t_w, t_w=t_w)
    hidden = (min(m, p) - 1) * min(t_w, t_f, t_bi)
    assert sim.step - max(sim.busy) == (p - 1) * (t_f + t_bi) - hidden
    r = Fraction(t_bi + t_w, t_f)
    cf = bubble_fraction(p, m, 1, ZERO_BUBBLE_H1, backward_ratio=float(r), w_fraction=t_w / (t_bi + t_w))
    assert float(cf) == pytest.approx(float(exact_bubble(sim)), rel=1e-12)


def test_zbh1_defers_weight_gradients():
    sim = simulate(4, 8, "zb-h1")
    for s in range(4):
        kinds = "".join(x.kind for x in sim.passes if x.stage == s)
        # stage s keeps s W passes pending: after its last B come s + 1 W passes
        assert len(kinds) - len(kinds.rstrip("W")) == s + 1
        assert kinds.count("W") == 8
    text = timeline_text(sim)
    assert "  stage 0: 0123...aA4bB5cC6dD7eEfFgGhH   peak stored: 4" in text
    assert "  stage 3: ...0a1b2c3dA4eB5fC6gD7hEFGH   peak stored: 4" in text
    assert "step takes 27 units, each stage busy 24: idle 11% of the time" in text


# --------------------------------------------------------------------------- simulator invariants


@pytest.mark.parametrize(
    "schedule, p, m, v",
    [("gpipe", 4, 6, 1), ("1f1b", 8, 3, 1), ("1f1b", 4, 16, 1), ("interleaved", 4, 12, 3), ("zb-h1", 5, 9, 1)],
)
def test_passes_respect_dependencies_and_never_overlap(schedule, p, m, v):
    sim = simulate(p, m, schedule, vpp=v, t_f=2, t_b=3)
    end = {}
    for x in sim.passes:
        end[(x.kind, x.chunk * p + x.stage, x.microbatch)] = x.end
    last = p * v - 1
    for x in sim.passes:
        vs = x.chunk * p + x.stage
        if x.kind == "F" and vs > 0:
            assert x.start >= end[("F", vs - 1, x.microbatch)]
        if x.kind == "B":
            assert x.start >= end[("B", vs + 1, x.microbatch)] if vs < last else end[("F", vs, x.microbatch)]
        if x.kind == "W":
            assert x.start >= end[("B", vs, x.microbatch)]
    for s in range(p):
        mine = [x for x in sim.passes if x.stage == s]
        assert all(a.end <= b.start for a, b in zip(mine, mine[1:]))
        assert sum(1 for x in mine if x.kind == "F") == m * v
        assert sim.busy[s] == m * 5  # m (T_F + T_B), whatever the schedule


# --------------------------------------------------------------------------- closed forms, vectorised


def test_closed_forms_vectorise_over_schedule_codes():
    pp = np.array([4, 4, 4, 4, 8], dtype=np.int64)
    m = np.array([16, 16, 16, 16, 8], dtype=np.int64)
    v = np.array([1, 1, 2, 1, 4], dtype=np.int64)
    code = np.array([GPIPE, ONE_F_ONE_B, INTERLEAVED, ZERO_BUBBLE_H1, INTERLEAVED], dtype=np.int64)
    b = bubble_fraction(pp, m, v, code)
    assert b == pytest.approx([3 / 16, 3 / 16, 3 / 32, 1 / 16, 7 / 32], rel=1e-15)
    f = inflight_microbatches(pp, m, v, code)
    assert f == pytest.approx([16, 4, 4 + 3 / 2, 4, 8], rel=1e-15)
    for i in range(len(pp)):
        assert float(b[i]) == float(bubble_fraction(pp[i], m[i], v[i], code[i]))
    assert b.dtype == np.float64 and f.dtype == np.float64


# --------------------------------------------------------------------------- text and CLI


def test_interleaved_text_marks_chunks_and_the_time_unit(cli):
    r = cli("pipeline", "--pp", 4, "--microbatches", 8, "--schedule", "interleaved", "--vpp", 2)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Interleaved 1F1B (v=2)"
    # 24 units of work plus (p-1)(T_F + T_B)/v = 4.5 units of bubble; one character = 0.5 unit
    assert "  step takes 28.5 units, each stage busy 24: idle 16% of the time" in lines
    assert "  one character = 0.5 time units" in lines
    assert lines[1].startswith("  stage 0: 01230123") and lines[1].endswith("   peak stored: 5.5")
    assert lines[2].startswith("    chunk: 00001111")
    assert len(lines[1].split()[2]) == 57 == len(lines[2].split()[1])  # 28.5 units / 0.5


def test_cli_closed_form_option(cli):
    r = cli("pipeline", "--pp", 4, "--microbatches", 16, "-s", "interleaved", "--vpp", 2, "--closed-form")
    assert r.exit_code == 0, r.stderr
    assert "bubble (idle / useful): simulated 0.09375, closed form (p-1)/(v*m) = 0.09375" in r.stdout
    assert "peak stored per stage: simulated 5.5,4.5,3.5,2.5, closed form 5.5,4.5,3.5,2.5" in r.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--pp", "0", "--microbatches", "8"], "--pp"),
        (["--pp", "4", "--microbatches", "0"], "--microbatches"),
        (["--pp", "4", "--microbatches", "6", "--schedule", "interleaved", "--vpp", "2"], "multiple of --pp"),
        (["--pp", "4", "--microbatches", "8", "--schedule", "interleaved"], "--vpp 2 or more"),
        (["--pp", "4", "--microbatches", "8", "--schedule", "1f1b", "--vpp", "2"], "interleaved"),
        (["--pp", "4", "--microbatches", "8", "--schedule", "pipedream"], "unknown pipeline schedule"),
        (["--pp", "4", "--microbatches", "8", "--tf", "0"], "--tf"),
        (["--pp", "4", "--microbatches", "8", "--schedule", "zb-h1", "--tw", "2"], "--tw"),
        (["--pp", "4", "--microbatches", "8", "--tw", "1"], "zb-h1"),
        (["--pp", "4", "--microbatches", "8", "--plot", "timeline.gif"], ".png, .svg or .pdf"),
    ],
)
def test_cli_bad_input_exit_2(cli, args, needle):
    r = cli("pipeline", *args)
    assert r.exit_code == 2
    assert r.stdout == ""
    err = r.stderr.splitlines()
    assert err[0].startswith("error: ") and len(err) == 2 and err[1].startswith("hint: ")
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_library_errors_name_the_valid_values():
    with pytest.raises(PlannerError) as e:
        simulate(4, 8, "zero")
    assert all(name in e.value.hint for name in SCHEDULE_CODES)
    with pytest.raises(PlannerError) as e:
        simulate(4, 10, "interleaved", vpp=2)
    assert "--microbatches 12" in e.value.hint


# --------------------------------------------------------------------------- pictures


def _check_png(path: Path, min_bytes: int = 20_000):
    from matplotlib.image import imread

    assert path.stat().st_size > min_bytes
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 800
    colours = np.unique(img[..., :3].reshape(-1, 3), axis=0)
    assert len(colours) > 10  # bars in several colours, text, white: not a blank canvas
    # the forward (blue) and backward (orange) colours are both drawn
    rgb = img[..., :3]
    blue = np.all(np.abs(rgb - np.array([0x4C, 0x78, 0xA8]) / 255) < 0.02, axis=-1)
    orange = np.all(np.abs(rgb - np.array([0xF5, 0x85, 0x18]) / 255) < 0.02, axis=-1)
    assert blue.mean() > 0.01 and orange.mean() > 0.01


def test_plot_png_is_a_readable_picture(cli, tmp_path):
    out = tmp_path / "tl.png"
    r = cli("pipeline", "--pp", 4, "--microbatches", 8, "--schedule", "1f1b", "--plot", out)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == SEED_1F1B  # the text is unchanged by --plot
    assert f"wrote {out}" in r.stderr
    _check_png(out)


def test_plot_svg_and_other_schedules(tmp_path):
    from planner.plot import plot_timeline

    svg = plot_timeline(simulate(4, 8, "interleaved", vpp=2), tmp_path / "i.svg")
    head = svg.read_text()[:400]
    assert "<svg" in head and svg.stat().st_size > 20_000
    _check_png(plot_timeline(simulate(4, 8, "zb-h1"), tmp_path / "z.png"))


def test_docs_example_picture():
    """docs/pipeline_1f1b.png, the README's picture: p=4, m=8 1F1B, readable."""
    _check_png(Path(__file__).resolve().parent.parent / "docs" / "pipeline_1f1b.png")


# ------------------------------------------------- the embedding and loss counted in the split
def test_stage_layers_with_embedding_and_loss_counted():
    """Megatron-Core account_for_{embedding,loss}_in_pipeline_split: L + 2 units in pp*vpp
    chunks, the first and last chunk one transformer layer fewer (pipeline.py [6]).
    Llama 3.1 405B, 126 layers: pp 16 x vpp 8 = 128 chunks of 1 unit -> 8 layers per middle
    GPU, 7 on the first and the last; pp 128 x vpp 1 -> the first stage holds the embedding
    alone and the last the loss alone (0 transformer layers)."""
    from planner.pipeline import stage_layers

    assert [int(x) for x in stage_layers(126, 16, 8, 1, 1)] == [7, 8, 7]
    assert [int(x) for x in stage_layers(126, 128, 1, 1, 1)] == [0, 1, 0]
    assert [int(x) for x in stage_layers(126, 127, 1, 1, 0)] == [0, 1, 1]  # embedding only: 127 units
    assert [int(x) for x in stage_layers(126, 16, 1)] == [7, 8, 7]  # without: Llama 3's uneven split
    assert [int(x) for x in stage_layers(126, 1, 1, 1, 1)] == [126, 126, 126]


def test_megatron_bridge_405b_split_in_explain_and_fit(cli):
    """pp*vpp = 128 chunks of Llama 3.1 405B's 126 layers: refused without the accounting (rule
    'pp*vpp exceeds the layers'), explained with it, found by fit with it; a split that does
    not divide (126 + 2 into 12 stages) is bad input naming Megatron-Core's rule; explain
    reproduces fit's row."""
    import json

    from conftest import assert_one_error

    base = ["--model", "llama3-405b", "--gpus", "16384", "--tp", "8", "--pp", "16", "--vpp", "8",
            "--micro-batch", "1", "--global-batch", "2048"]
    flags = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    assert_one_error(cli("explain", *base), "pp*vpp=128 exceeds the 126 layers", "account_for_embedding")
    r = cli("explain", *base, *flags, "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["plan"]["account_for_embedding_in_pipeline_split"] and js["plan"]["account_for_loss_in_pipeline_split"]
    assert any("126 + 2 units in pp*vpp=128 chunks" in w and "first 7 and the last 7" in w for w in js["warnings"])
    bad = ["--model", "llama3-405b", "--gpus", "12288", "--tp", "8", "--pp", "12", "--micro-batch", "1",
           "--global-batch", "2048", *flags]
    assert_one_error(cli("explain", *bad), "126 layers + 2", "pp*vpp=12")
    f = cli("fit", "--model", "llama3-405b", "--gpus", "16384", "--tp", "8", "--pp", "16", "--vpp", "8",
            "--global-batch", "2048", *flags, "--top", "2", "--format", "json")
    assert f.exit_code == 0, f.stderr
    rows = json.loads(f.stdout)
    assert rows and all(r["plan"]["vpp"] == 8 and r["plan"]["account_for_loss_in_pipeline_split"] for r in rows)
    from planner.schema import Job
    from planner.search import explain_args

    e = cli("explain", *explain_args(Job(model="llama3-405b", gpus=16384), rows[0]), "--format", "json")
    assert e.exit_code == 0, e.stderr
    assert json.loads(e.stdout) == rows[0]


def test_torchtitan_front_loaded_split():
    """torchtitan 0.3.0 _generate_llm_fqn_per_model_part: floor(L'/S) units per chunk, one more on
    each of the first L' mod S chunks, the embedding's weight off chunk 0 and the output's off
    the last. 8 layers + 2 on 4 stages: chunks 3, 3, 2, 2 -> blocks 2, 3, 2, 1 (the oracle's
    traced stages); on pp 2 x vpp 2: chunks 3, 3, 2, 2 -> 2, 3, 2, 1, stage 0 holds chunks 0 and 2
    (2 + 2), stage 1 chunks 1 and 3 (3 + 1). Megatron's trim-ends rule refuses 10 units on 4."""
    from planner.pipeline import chunk_layers, stage_layers

    assert chunk_layers(8, 4, 1, 1, 1, front=1) == [2, 3, 2, 1]
    assert tuple(int(x) for x in stage_layers(8, 4, 1, 1, 1, split_front=1)) == (2, 3, 1)
    assert chunk_layers(8, 2, 2, 1, 1, front=1) == [2, 3, 2, 1]
    first, _, last = stage_layers(8, 2, 2, 1, 1, split_front=1)  # pp 2: no middle stage
    assert (int(first), int(last)) == (4, 4)
    # an even split is the same under both rules: 6 layers + 2 on 4 stages
    assert tuple(int(x) for x in stage_layers(6, 4, 1, 1, 1, split_front=1)) == tuple(int(x) for x in stage_layers(6, 4, 1, 1, 1))


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("v", [2, 3])
def test_given_group_chunk_inflight_by_simulation(p, v):
    """Megatron-LM's --microbatch-group-size-per-virtual-pipeline-stage N (pipeline.py [10]), given
    (the plan's mbg): for every m from p to 3p + 1 and every N Megatron runs (N in [p, m], m % N 0
    or >= p), microbatch_group returns N, and the micro-batches each model chunk of each stage
    holds when the stage starts its first backward in the simulator (the forwards it started
    before, per chunk) are _chunk_inflight's, a last group shorter than N included;
    inflight_microbatches is their sum / v."""
    from planner.pipeline import _chunk_inflight

    for m in range(p, 3 * p + 2):
        for n in _valid_groups(p, m):
            assert int(microbatch_group(p, m, n)) == n
            sim = simulate(p, m, "interleaved", vpp=v, group=n)
            for s in range(p):
                first_b = min(x.start for x in sim.passes if x.stage == s and x.kind == "B")
                held = [sum(1 for x in sim.passes if x.stage == s and x.kind == "F" and x.chunk == c and x.start < first_b)
                        for c in range(v)]
                assert _chunk_inflight(p, v, s, np.array([m]), INTERLEAVED, n)[:, 0].tolist() == held, (m, n, s)
                assert float(inflight_microbatches(p, m, v, INTERLEAVED, stage=s, group=n)) == pytest.approx(
                    sum(held) / v, rel=1e-15)


def test_given_group_by_hand():
    """group 0 is the default rule; a given N is taken as it is, wherever the schedule reads it: pp 4,
    m 12: N 6 -> 6 (the default 4); pp 4, m 5 (the CI's tunable_overlap rows): N 5 = the default's one
    group of m. Stage 0 of pp 4, vpp 2, m 12 holds 2(p - 1) + (v - 1) N + 1 = 11 (N 4) or 13 (N 6)
    chunk-micro-batches: 5.5 or 6.5 micro-batches of the stage's layers."""
    assert [int(x) for x in microbatch_group([4, 4, 4, 4], [12, 12, 5, 5], [0, 6, 0, 5])] == [4, 6, 5, 5]
    assert float(inflight_microbatches(4, 12, 2, INTERLEAVED)) == 5.5
    assert float(inflight_microbatches(4, 12, 2, INTERLEAVED, group=6)) == 6.5
    assert float(inflight_microbatches(4, 12, 2, ONE_F_ONE_B, group=6)) == 4.0  # read by the interleaved schedule only


# --------------------------------------------------------------------------- queued gradient reductions [12]


def _queue_drain(sim, stage: int, item: Fraction) -> Fraction:
    """The stage's reductions, item each, issued as each of its backwards ends, run one after another
    in issue order: when the last ends (the definition [12] prices, taken from the simulated passes)."""
    t = Fraction(0)
    for end in sorted(q.end for q in sim.passes if q.stage == stage and q.kind == "B"):
        t = max(t, end) + item
    return t


def test_reduce_queue_by_hand():
    """p 2, v 2, m 2 (N 2), a chunk's forward f = 1 and backward b = 2, a chunk's reduction 2.5 (5 a
    micro-batch of the stage). Megatron's order: stage 0 runs its 4 forwards (0-1, 1-2, 2-3, 3-4:
    chunk 1 waits for stage 1's chunk 0), stage 1 F(0,0) 1-2, F(1,0) 2-3, F(0,1) 3-4, B(0,1) 4-6,
    F(1,1) 6-7, B(1,1) 7-9, B(0,0) 9-11, B(1,0) 11-13; stage 0 B(0,1) 6-8, B(1,1) 9-11, B(0,0) 11-13,
    B(1,0) 13-15: T = 15 = (v m + p - 1)(f + b). Stage 0's reductions: 8-10.5, 11-13.5, 13.5-16,
    16-18.5, 3.5 past T; stage 1's (backwards ending 6, 9, 11, 13): 6-8.5, 9-11.5, 11.5-14, 14-16.5,
    1.5 past. The stage that drains last is the first: 3.5 exposed, the other 10 - 3.5 = 6.5 overlapped
    (x the stack's exposed share in step.queued_reductions)."""
    sim = simulate(2, 2, "interleaved", vpp=2, t_f=2, t_b=4)
    assert sim.step == 15
    assert [q.end for q in sim.passes if q.stage == 0 and q.kind == "B"] == [8, 11, 13, 15]
    assert [q.end for q in sim.passes if q.stage == 1 and q.kind == "B"] == [6, 9, 11, 13]
    assert _queue_drain(sim, 0, Fraction(5, 2)) == Fraction(37, 2)
    assert _queue_drain(sim, 1, Fraction(5, 2)) == Fraction(33, 2)
    over, T = reduce_queue_overrun(2, 2, 2, 2, 2.0, 4.0, 5.0)
    assert (float(over), float(T)) == (3.5, 15.0)
    # a reduction no longer than a chunk's backward never waits: only the last is exposed
    assert float(reduce_queue_overrun(2, 2, 2, 2, 2.0, 4.0, 3.0)[0]) == 1.5
    # one longer than a forward and a backward never drains: from the first backward's end, 8 + 4 x 4 - 15
    assert float(reduce_queue_overrun(2, 2, 2, 2, 2.0, 4.0, 8.0)[0]) == 9.0


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 8])
def test_reduce_queue_closed_form_against_the_simulator(p):
    """[12]'s claims over a grid of v, m and chunk times f : b : d, against the first-stage queue of the
    simulated schedule (the stage that drains last, checked on every stage): exact for 1F1B and one
    stage, for m in [p, 2p), and for m >= 2p where d <= b or d >= f + b; an upper bound for m >= 2p
    with b < d < f + b; within 6% of T where m < p."""
    times = [(Fraction(1), Fraction(2), d) for d in (Fraction(1, 2), Fraction(1), Fraction(5, 2), Fraction(7, 2), Fraction(6))]
    times += [(Fraction(2), Fraction(3), Fraction(4)), (Fraction(1), Fraction(3), Fraction(7, 2))]
    for v in ([1] if p == 1 else [1, 2, 3, 4]):
        for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 20, 24):
            n = int(microbatch_group(p, m)) if v > 1 else p
            for f, b, d in times:
                sim = simulate(p, m, "interleaved" if v > 1 else "1f1b", vpp=v, t_f=f * v, t_b=b * v,
                               group=n if v > 1 else None)
                drains = [_queue_drain(sim, s, d) for s in range(p)]
                assert max(drains) == drains[0]
                over, T = reduce_queue_overrun(p, m, v, n, float(f * v), float(b * v), float(d * v))
                assert float(T) == pytest.approx(float(sim.step), abs=1e-9)
                sim_over = float(drains[0] - sim.step)
                case = (p, v, m, f, b, d)
                if v == 1 or p <= m < 2 * p or (m >= 2 * p and (d <= b or d >= f + b)):
                    assert float(over) == pytest.approx(sim_over, abs=1e-9), case
                elif m >= 2 * p:
                    assert float(over) >= sim_over - 1e-9, case
                else:
                    assert abs(float(over) - sim_over) <= 0.06 * float(sim.step), case
