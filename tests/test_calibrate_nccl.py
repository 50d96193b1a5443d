"""planner calibrate nccl: parsing real nccl-tests logs, the fit, the profile and the CLI.

Data: tests/data/nccl_logs/*.txt are verbatim copies of the project's reference logs (each
starts with its `# source:` line); tests/data/nccl_logs/malformed/ holds fixtures written
for these tests (garbage.bin: 4096 bytes of random.Random(5) output; the text fixtures carry a
`# source:` line); tests/data/nccl_busbw_factors.yaml is a copy of the reference factor table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.calibrate.nccl import (
    BUSBW_FACTORS,
    DEFAULT_MIN_BYTES,
    busbw_factor,
    calibrate_logs,
    fit_points,
    monotone_bound,
    nccl_form_bound,
    noisy_sizes,
    normalize_collective,
    parse_log,
)
from planner.calibrate.profile import dump_profile, profile_from_calibration
from planner.catalog import load_hardware
from planner.cli import app
from planner.errors import PlannerError
from planner.profile import CalibrationProfile, load_profile

DATA = Path(__file__).parent / "data"
LOGS = DATA / "nccl_logs"
BAD = LOGS / "malformed"
MiB = 2**20

# What a user knows and passes for each reference log: only the facts its file does not
# contain (their `# source:` lines are human notes, never parsed for facts). The file itself
# gives the collective (command line, header, or busbw/algbw: above 1 only all_reduce; below
# 1 with a reduction only reduce_scatter), the rank count (Rank lines, busbw/algbw) and the
# node count (host names of a complete set of Rank lines).
LOG_OPTIONS = {
    # srun '0: ' prefixes, no command line, no Rank lines: busbw/algbw 1.875 -> all_reduce on 16
    "a100_16gpu_2node_allreduce_aws-p4de-efa.txt": dict(nodes=2),
    # command line present; trimmed to size/time/algbw/busbw; one server
    "a100_8gpu_allreduce_stas00-mlengineering-TRIMMED.txt": dict(nodes=1),
    # complete Rank lines (2 hosts); busbw/algbw 15/16 with redop none: all_gather, alltoall,
    # gather or scatter -> the collective is the one fact missing
    "b200_16gpu_2node_allgather_google-dranet.txt": dict(collective="all_gather"),
    # busbw/algbw 2*71/72 -> all_reduce on 72; 18 trays of a GB200 NVL72 = one NVLink domain
    "gb200_72gpu_nvl72_allreduce_coreweave.txt": dict(nodes=18, hardware="gb200-nvl72"),
    # command line and complete Rank lines: nothing to pass
    "h100_16gpu_2node_allreduce_dgx06-dgx07.txt": dict(),
    # mpirun prefixes, header only: busbw/algbw 1.75 -> all_reduce on 8
    "h100_8gpu_allreduce_aws-p5-batch.txt": dict(nodes=1),
    # one Rank line, cut-off in-place columns: busbw/algbw 7/8 and redop sum -> reduce_scatter
    "h100_8gpu_reducescatter_nccl-issue1047-PARTIAL.txt": dict(nodes=1),
}


def options(name: str) -> dict:
    """LOG_OPTIONS[name] as calibrate_logs keywords (a hardware name loaded from the catalog)."""
    kw = dict(LOG_OPTIONS[name])
    if "hardware" in kw:
        kw["hardware"] = load_hardware(kw["hardware"])
    return kw


# (collective, scope, ranks, nodes) each log must resolve to
EXPECTED = {
    "a100_16gpu_2node_allreduce_aws-p4de-efa.txt": ("all_reduce", "inter-node", 16, 2),
    "a100_8gpu_allreduce_stas00-mlengineering-TRIMMED.txt": ("all_reduce", "intra-node", 8, 1),
    "b200_16gpu_2node_allgather_google-dranet.txt": ("all_gather", "inter-node", 16, 2),
    "gb200_72gpu_nvl72_allreduce_coreweave.txt": ("all_reduce", "intra-node", 72, 18),
    "h100_16gpu_2node_allreduce_dgx06-dgx07.txt": ("all_reduce", "inter-node", 16, 2),
    "h100_8gpu_allreduce_aws-p5-batch.txt": ("all_reduce", "intra-node", 8, 1),
    "h100_8gpu_reducescatter_nccl-issue1047-PARTIAL.txt": ("reduce_scatter", "intra-node", 8, 1),
}


def _flag_args(opts: dict) -> list[str]:
    args = []
    for k, v in opts.items():
        args += [f"--{k}", str(v)]
    return args


def test_every_reference_log_is_here():
    assert sorted(p.name for p in LOGS.glob("*.txt")) == sorted(LOG_OPTIONS)


# ---------------------------------------------------------------------------- factors
def test_factors_match_the_reference_table():
    """The code's busbw factors are the ones of nccl-tests PERFORMANCE.md (copied table)."""
    ref = yaml.safe_load((DATA / "nccl_busbw_factors.yaml").read_text())["collectives"]
    for coll in BUSBW_FACTORS:
        formula = str(ref[coll]["factor"])
        for n in (2, 3, 8, 16, 72):
            expected = eval(formula, {"__builtins__": {}}, {"n": n})  # "2*(n-1)/n", "(n-1)/n", "1"
            assert float(busbw_factor(coll, n)) == pytest.approx(expected, rel=1e-15), (coll, n)
    assert float(busbw_factor("all_reduce", 8)) == 1.75
    assert float(busbw_factor("all_gather", 16)) == 0.9375


@pytest.mark.parametrize("text", ["allreduce", "all-reduce", "ALL_REDUCE", "all_reduce_perf", "all_reduce_perf_mpi"])
def test_collective_aliases(text):
    assert normalize_collective(text) == "all_reduce"


def test_unknown_collective_is_an_error():
    with pytest.raises(PlannerError, match="unknown collective"):
        normalize_collective("allreduce_v2_fast")


# ---------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("name", sorted(LOG_OPTIONS))
def test_every_reference_log_parses(name):
    log = parse_log(LOGS / name)
    assert log.sweeps and all(sw.points for sw in log.sweeps)
    assert log.provenance and log.provenance[0].startswith("source:")
    assert len(log.sha256) == 64


def test_srun_prefixed_log():
    log = parse_log(LOGS / "a100_16gpu_2node_allreduce_aws-p4de-efa.txt")
    assert log.issues == []
    (sw,) = log.sweeps
    assert len(sw.points) == 29 * 2  # 8 B .. 2 GiB, out-of-place and in-place
    p0 = sw.points[0]
    assert (p0.size, p0.in_place, p0.time) == (8, False, pytest.approx(164.3e-6))
    last = sw.points[-1]
    assert (last.size, last.in_place, last.busbw) == (2147483648, True, pytest.approx(78.33e9))


def test_mpirun_prefixed_log():
    log = parse_log(LOGS / "h100_8gpu_allreduce_aws-p5-batch.txt")
    assert log.issues == []
    (sw,) = log.sweeps
    assert len(sw.points) == 32 * 2  # 8 B .. 16 GiB
    big = [p for p in sw.points if p.size == 17179869184]
    assert [p.time for p in big] == [pytest.approx(62239e-6), pytest.approx(62200e-6)]
    assert [p.busbw for p in big] == [pytest.approx(483.05e9), pytest.approx(483.35e9)]


def test_trimmed_log_with_underscore_sizes():
    log = parse_log(LOGS / "a100_8gpu_allreduce_stas00-mlengineering-TRIMMED.txt")
    (sw,) = log.sweeps
    assert [p.size for p in sw.points][:6] == [32768, 65536, 131072, 262144, 524288, 1048576]  # '1048_576'
    assert sw.points[-1].size == 17179869184  # '17_179_869_184'
    assert all(not p.in_place for p in sw.points) and len(sw.points) == 20
    assert sw.ctx.collective == "all_reduce" and sw.ctx.collective_from == "command line (line 2)"
    assert [(i.line, i.reason) for i in log.issues] == [(3, "not nccl-tests output")]  # '[...]'


def test_partial_log_with_cut_off_in_place_columns():
    log = parse_log(LOGS / "h100_8gpu_reducescatter_nccl-issue1047-PARTIAL.txt")
    (sw,) = log.sweeps
    assert len(sw.points) == 6 * 2 + 1
    assert [(i.line, i.reason) for i in log.issues] == [
        (2, "not nccl-tests output"),  # 'Reducescatter (H100: ring)': a human title
        (13, "in-place columns missing; out-of-place kept"),
    ]
    assert sorted(sw.ctx.ranks) == [7]  # only the last Rank line was kept


def test_header_rank_lines_and_version():
    log = parse_log(LOGS / "b200_16gpu_2node_allgather_google-dranet.txt")
    (sw,) = log.sweeps
    assert sorted(sw.ctx.ranks) == list(range(16))
    assert sw.hosts == ["nccl-gib-test-0", "nccl-gib-test-1"]
    assert sw.gpus == ["NVIDIA B200"]
    assert sw.ctx.nccl_version == "2.26.6+cuda12.8"
    assert sw.ctx.ngpus == 1 and sw.ctx.collective is None
    assert len(sw.points) == 24 * 2


@pytest.mark.parametrize("name", sorted(LOG_OPTIONS))
def test_metadata_resolution(name):
    cal = calibrate_logs([LOGS / name], **options(name))
    (sw,) = cal.sweeps
    assert (sw.collective, sw.scope, sw.ranks, sw.nodes) == EXPECTED[name]


def test_where_the_figures_come_from():
    cal = calibrate_logs([LOGS / "h100_16gpu_2node_allreduce_dgx06-dgx07.txt"])
    (sw,) = cal.sweeps
    assert sw.collective_from == "command line (line 2)"
    assert sw.ranks_from == "Rank lines 6-21"
    assert sw.nodes_from == "host names in Rank lines" and sw.hosts == ["dgx-06", "dgx-07"]
    cal = calibrate_logs([LOGS / "gb200_72gpu_nvl72_allreduce_coreweave.txt"], **options("gb200_72gpu_nvl72_allreduce_coreweave.txt"))
    (sw,) = cal.sweeps
    # one 'Rank 71' line does not prove 72 ranks; busbw/algbw = 2*71/72 does, and says all_reduce
    assert (sw.ranks, sw.ranks_from) == (72, "busbw/algbw")
    assert (sw.collective, sw.collective_from) == ("all_reduce", "busbw/algbw > 1")
    assert sw.nodes_from == "--nodes"
    assert sw.scope_from == "18 gb200-nvl72 server(s) = 1 NVLink domain(s)"


def test_ranks_from_ratio_needs_enough_digits():
    """busbw 0.85 / algbw 0.49 (8 KiB row of the aws-p5 log), each +-0.005: the ratio lies
    in [0.845/0.495, 0.855/0.485] = [1.707, 1.763], n = 2/(2 - r) in [6.83, 8.45] -> 7 or 8.
    The 16 GiB row of the trimmed A100 log (234.89 / 134.22) pins n = 8."""
    from planner.calibrate.nccl import Point, ranks_from_ratio

    small = Point(1, 8192, False, 16.85e-6, 0.49e9, 0.85e9, 0.005e9, 0.005e9)
    assert ranks_from_ratio("all_reduce", [small]) == (7, 8)
    big = Point(2, 2**34, False, 0.127997, 134.22e9, 234.89e9, 0.005e9, 0.005e9)
    assert ranks_from_ratio("all_reduce", [small, big]) == (8, 8)
    assert ranks_from_ratio("sendrecv", [small, big]) is None  # factor 1: no information


@settings(max_examples=200, deadline=None)
@given(
    coll=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "alltoall"]),
    n=st.integers(min_value=1, max_value=1024),
    algbw=st.floats(min_value=0.01, max_value=2000.0),
)
def test_ranks_from_ratio_always_contains_the_true_count(coll, n, algbw):
    """Rows printed to 2 decimals the way nccl-tests does (%6.2f): the true n is never excluded."""
    from planner.calibrate.nccl import Point, ranks_from_ratio

    a = round(algbw, 2)
    b = round(algbw * float(busbw_factor(coll, n)), 2)
    if a == 0:
        return
    lo, hi = ranks_from_ratio(coll, [Point(1, 2**20, False, 1e-3, a * 1e9, b * 1e9, 0.005e9, 0.005e9)])
    assert lo <= n <= hi


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _body(name):
    return (LOGS / name).read_text().splitlines()


def test_several_sweeps_and_collectives_in_one_file(tmp_path):
    ar = _body("h100_16gpu_2node_allreduce_dgx06-dgx07.txt")[1:]  # drop the human note
    ag = _body("b200_16gpu_2node_allgather_google-dranet.txt")[1:]
    text = "\n".join(ar + ["$ mpirun -np 16 ./build/all_gather_perf -b 1K -e 8G -f 2"] + ag) + "\n"
    cal = calibrate_logs([_write(tmp_path, "two.txt", text)])
    assert [(sw.collective, sw.ranks, sw.nodes, len(sw.points)) for sw in cal.sweeps] == [
        ("all_reduce", 16, 2, 64),
        ("all_gather", 16, 2, 48),
    ]
    assert sorted(cal.fits) == [("all_gather", "inter-node", 16), ("all_reduce", "inter-node", 16)]


def _nccl_tests_run(tool, hosts, gpus_per_host, factor, alpha_us, busbw_GBps, sizes):
    """Text in the layout of nccl-tests >= 2.14 (src/common.cu, src/util.cu) for a run whose
    time is alpha + S*factor/busbw exactly; for parser tests only."""
    n = len(hosts) * gpus_per_host
    out = [
        "# nccl-tests version 2.18.2 nccl-headers=22703 nccl-library=22703",
        f"# Collective test starting: {tool}",
        f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 iters: 20",
        "#",
        "# Using devices",
    ]
    for r in range(n):
        h = hosts[r // gpus_per_host]
        out.append(f"#  Rank {r:2d} Group  0 Pid  {1000 + r:5d} on {h:>10s} device {r % gpus_per_host:2d} [0000:1b:00] NVIDIA H100 80GB HBM3")
    out += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
    ]
    f = factor(n)
    for S in sizes:
        t = alpha_us + S * f / (busbw_GBps * 1e3)
        alg = S / (t * 1e3)
        cells = f"{t:8.2f}  {alg:6.2f}  {alg * f:6.2f}       0"
        out.append(f"{S:12d}  {S // 4:12d}     float     sum      -1  {cells}  {cells}")
    out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0", "#", f"# Collective test concluded: {tool}", ""]
    return out


def test_two_runs_of_a_recent_nccl_tests_in_one_file(tmp_path):
    sizes = [2**k for k in range(20, 31)]
    text = "\n".join(
        _nccl_tests_run("all_gather_perf", ["node-a", "node-b"], 4, lambda n: (n - 1) / n, 30.0, 40.0, sizes)
        + _nccl_tests_run("all_reduce_perf", ["node-a"], 8, lambda n: 2 * (n - 1) / n, 25.0, 360.0, sizes)
    )
    cal = calibrate_logs([_write(tmp_path, "runs.txt", text)])
    assert cal.warnings == []
    got = [(sw.collective, sw.collective_from, sw.ranks, sw.nodes, sw.scope, sw.ctx.nccl_version) for sw in cal.sweeps]
    assert got == [
        ("all_gather", "header (line 2)", 8, 2, "inter-node", "2.27.3"),
        ("all_reduce", "header (line 35)", 8, 1, "intra-node", "2.27.3"),  # run 1: 5 + 8 + 4 + 11 + 5 lines
    ]
    # the generated times are alpha + S_eff/B exactly (to the printed 4-5 digits)
    (ag,) = cal.fits[("all_gather", "inter-node", 8)].lines
    assert (ag.latency, ag.busbw) == (pytest.approx(30e-6, rel=1e-3), pytest.approx(40e9, rel=1e-3))
    (ar,) = cal.fits[("all_reduce", "intra-node", 8)].lines
    assert (ar.latency, ar.busbw) == (pytest.approx(25e-6, rel=1e-3), pytest.approx(360e9, rel=1e-3))


def test_a_repeated_sweep_without_a_new_header(tmp_path):
    lines = _body("h100_8gpu_allreduce_aws-p5-batch.txt")
    rows = [ln for ln in lines if ln.split(":", 1)[1].strip()[:1].isdigit()]
    text = "\n".join(lines[1:4] + rows + rows) + "\n"
    log = parse_log(_write(tmp_path, "twice.txt", text))
    assert [len(sw.points) for sw in log.sweeps] == [64, 64]
    cal = calibrate_logs([tmp_path / "twice.txt"], collective="all_reduce", nodes=1)
    assert list(cal.fits) == [("all_reduce", "intra-node", 8)] and cal.fits[("all_reduce", "intra-node", 8)].points == 2 * 2 * 15  # 1 MiB .. 16 GiB, 2 placements


def test_na_cells_and_wrong_results(tmp_path):
    lines = _body("h100_16gpu_2node_allreduce_dgx06-dgx07.txt")
    out = []
    for ln in lines:
        toks = ln.split()
        if len(toks) == 13 and toks[1].isdigit():
            toks[8] = toks[12] = "N/A"  # `-c 0`: no validation, nccl-tests prints N/A
            if toks[0] == "1048576":
                toks[9] = "N/A"  # a missing in-place time
            if toks[0] == "2097152":
                toks[8] = "3"  # three wrong elements out-of-place
            ln = "  ".join(toks)
        out.append(ln)
    log = parse_log(_write(tmp_path, "na.txt", "\n".join(out) + "\n"))
    (sw,) = log.sweeps
    assert len(sw.points) == 64 - 2
    assert [i.reason for i in log.issues] == ["in-place time is N/A; not used", "out-of-place #wrong = 3 (data errors); not used"]


def test_headerless_rows_and_nccl_debug_lines(tmp_path):
    lines = _body("h100_16gpu_2node_allreduce_dgx06-dgx07.txt")
    rows = [ln for ln in lines if ln.strip()[:1].isdigit()]
    text = "\n".join(
        lines[1:22] + ["dgx-06:1471953:1472001 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7"] + rows
    ) + "\n"
    log = parse_log(_write(tmp_path, "noheader.txt", text))
    assert log.ignored_debug_lines == 1
    assert len(log.issues) == 1 and "no table header before this row" in log.issues[0].reason
    assert len(log.sweeps[0].points) == 64


def test_non_text_without_nul_bytes(tmp_path):
    p = tmp_path / "latin.bin"
    p.write_bytes(bytes(range(128, 256)) * 40)
    with pytest.raises(PlannerError, match="not a text file"):
        parse_log(p)


# ---------------------------------------------------------------------------- fit
def test_fit_recovers_an_exact_alpha_beta_line():
    """t = 20 us + S*1.75/450 GB/s on 8 ranks (all_reduce): one line, figures exact."""
    s = 2.0 ** np.arange(20, 35)
    t = 20e-6 + s * 1.75 / 450e9
    fit = fit_points("all_reduce", 8, s, t)
    (line,) = fit.lines
    assert line.latency == pytest.approx(20e-6, rel=1e-6)
    assert line.busbw == pytest.approx(450e9, rel=1e-6)
    assert fit.median_abs_err < 1e-6


def test_fit_recovers_two_regimes():
    """Envelope of (10 us, 200 GB/s) and (60 us, 450 GB/s): crossover where
    10e-6 + x/200e9 = 60e-6 + x/450e9, x = 50e-6 / (1/200e9 - 1/450e9) = 18 MB of S_eff."""
    s = 2.0 ** np.arange(20, 35)
    f = 1.75
    t = np.minimum(10e-6 + s * f / 200e9, 60e-6 + s * f / 450e9)
    fit = fit_points("all_reduce", 8, s, t)
    lo, hi = fit.lines
    assert (lo.latency, lo.busbw) == (pytest.approx(10e-6, rel=1e-4), pytest.approx(200e9, rel=1e-4))
    assert (hi.latency, hi.busbw) == (pytest.approx(60e-6, rel=1e-4), pytest.approx(450e9, rel=1e-4))
    assert lo.to_bytes == 8 * MiB and hi.from_bytes == 16 * MiB  # 18e6 / 1.75 = 10.3 MB lies between


def test_fit_is_robust_to_one_slow_row():
    """A row 5x too slow (shared-cluster noise) moves a robust fit by less than 1 %."""
    s = np.repeat(2.0 ** np.arange(20, 35), 2)
    t = 20e-6 + s * 1.75 / 450e9
    t[7] *= 5.0
    (line,) = fit_points("all_reduce", 8, s, t).lines
    assert line.busbw == pytest.approx(450e9, rel=0.01)
    assert line.latency == pytest.approx(20e-6, rel=0.01)


def test_fit_needs_two_sizes_in_range():
    with pytest.raises(PlannerError, match="distinct size"):
        fit_points("all_reduce", 8, [2.0**20, 2.0**20], [1e-4, 1.1e-4])


def _profile_for(name, **extra) -> CalibrationProfile:
    cal = calibrate_logs([LOGS / name], **{**options(name), **extra})
    return profile_from_calibration(cal, hardware=None)


@pytest.mark.parametrize("name", sorted(LOG_OPTIONS))
def test_profile_reproduces_measured_busbw_from_1MiB(name):
    """Issue 5: for every reference log, the fitted model gives the log's busbw at sizes
    >= 1 MiB with a median error of at most 10 %. Recomputed here from the profile as
    written to YAML, against the busbw column of the log itself."""
    prof = load_profile_text(dump_profile(_profile_for(name)))
    coll, scope, ranks, _ = EXPECTED[name]
    g = prof.group(coll, scope, ranks)
    assert g is not None
    pts = [p for sw in parse_log(LOGS / name).sweeps for p in sw.points if p.size >= MiB]
    size = np.array([p.size for p in pts], dtype=float)
    measured = np.array([p.busbw for p in pts])
    model = size * float(busbw_factor(coll, ranks)) / g.time(size)
    err = np.abs(model / measured - 1.0)
    assert np.median(err) <= 0.10
    assert g.residuals.points == len(pts)
    assert g.residuals.busbw_median_abs_rel_err == pytest.approx(np.median(err), abs=1e-3)
    assert g.residuals.busbw_max_abs_rel_err == pytest.approx(np.max(err), abs=1e-3)


def load_profile_text(text: str) -> CalibrationProfile:
    return CalibrationProfile.model_validate(yaml.safe_load(text))


def test_fitted_figures_of_the_clean_single_node_logs():
    """Hand check on the H100 ring reduce-scatter log: between the 4 GiB and 8 GiB rows the
    time grows by 20754 - 10505 = 10249 us for 4 GiB * 7/8 of S_eff, i.e. 366.7 GB/s of bus
    bandwidth; the fitted bulk regime must agree within 2 %, and its latency be tens of us."""
    prof = _profile_for("h100_8gpu_reducescatter_nccl-issue1047-PARTIAL.txt")
    bw, alpha = prof.bandwidth_and_latency("reduce_scatter", "intra-node", 8)
    slope_bw = 4 * 2**30 * 7 / 8 / ((20754 - 10505) * 1e-6)
    assert slope_bw == pytest.approx(366.7e9, rel=1e-3)
    assert bw == pytest.approx(slope_bw, rel=0.02)
    assert 0 < alpha < 200e-6
    # 8 H100 all-reduce (aws-p5 log): the bulk regime's asymptote lies between the busbw the
    # log shows at 1 GiB (441.81 GB/s, latency still visible) and its highest (483.35, NVLS)
    bw, alpha = _profile_for("h100_8gpu_allreduce_aws-p5-batch.txt").bandwidth_and_latency("all_reduce", "intra-node", 8)
    assert 441.81e9 < bw < 483.35e9 and 0 < alpha < 200e-6


def test_lookup_returns_none_outside_the_profile():
    prof = _profile_for("h100_8gpu_allreduce_aws-p5-batch.txt")
    assert prof.covered() == [("all_reduce", "intra-node", 8)]
    assert prof.bandwidth_and_latency("all_reduce", "inter-node", 8) is None
    assert prof.bandwidth_and_latency("all_reduce", "intra-node", 4) is None
    assert prof.bandwidth_and_latency("all_gather", "intra-node", 8) is None
    with pytest.raises(PlannerError, match="unknown scope"):
        prof.bandwidth_and_latency("all_reduce", "rack", 8)
    t = prof.collective_time("all_reduce", "intra-node", 8, np.array([2**20, 2**30]))
    assert t.shape == (2,) and np.all(np.diff(t) > 0)


# ----------------------------------------------------------- older nccl-tests output
# nccl-tests before 2022 printed per-collective headers without the root column (and
# without redop for all_gather), and an `error` column holding the largest deviation from the
# expected result (%5.0le, e.g. 5e-07 for a float sum) instead of the `#wrong` count
# (NVIDIA/nccl-tests src/all_gather.cu at ec1b5e22, src/common.cu at 0f8c785a; the current
# src/common.cu prints root and #wrong). Each fixture's first line cites its source.
OLDER = LOGS / "older"
OLDER_OPTIONS = {
    # real 2021 log (aws-samples/aws-efa-eks): Rank lines without Group give 16 ranks on 2
    # hosts, busbw/algbw 1.875 says all_reduce: nothing to pass
    "a100_16gpu_2node_allreduce_aws-efa-eks-2021.txt": dict(),
    # the pre-2022 all_gather layout has no redop column: reduce_scatter or all_gather?
    "b200_16gpu_2node_allgather_pre2022-layout.txt": dict(collective="all_gather"),
}
OLDER_EXPECTED = {
    "a100_16gpu_2node_allreduce_aws-efa-eks-2021.txt": ("all_reduce", "inter-node", 16, 2, 28),
    "b200_16gpu_2node_allgather_pre2022-layout.txt": ("all_gather", "inter-node", 16, 2, 24),
}


def test_every_older_fixture_is_listed():
    assert sorted(p.name for p in OLDER.glob("*.txt")) == sorted(OLDER_OPTIONS)


@pytest.mark.parametrize("name", sorted(OLDER_OPTIONS))
def test_older_formats_parse_and_calibrate(name):
    log = parse_log(OLDER / name)
    assert log.provenance[0].startswith("source:")
    cal = calibrate_logs([OLDER / name], **OLDER_OPTIONS[name])
    (sw,) = cal.sweeps
    coll, scope, ranks, nodes, rows = OLDER_EXPECTED[name]
    assert (sw.collective, sw.scope, sw.ranks, sw.nodes) == (coll, scope, ranks, nodes)
    # every row, both placements: a nonzero `error` (max deviation) is not a data error
    assert len(sw.points) == 2 * rows
    assert not [i for i in cal.warnings if "data errors" in i]
    (fit,) = cal.fits.values()
    assert fit.median_abs_err < 0.10


def test_the_2021_efa_log_by_hand():
    """The 1 GiB row of the aws-efa-eks log: out-of-place 61,556 us, busbw 32.71 GB/s =
    1 GiB / 61,556 us x 2 x 15/16 (all_reduce on 16 ranks), error 5e-07 kept."""
    (sw,) = parse_log(OLDER / "a100_16gpu_2node_allreduce_aws-efa-eks-2021.txt").sweeps
    p = [p for p in sw.points if p.size == 2**30 and not p.in_place][0]
    assert p.time == pytest.approx(61556e-6) and p.busbw == pytest.approx(32.71e9)
    assert 2**30 / p.time * 1.875 == pytest.approx(32.71e9, rel=2e-3)
    assert sw.ctx.nccl_version == "2.8.3+cuda11.2" and sw.hosts == ["nccl-tests-efa-worker-0", "nccl-tests-efa-worker-1"]


def test_pre2022_layout_reads_the_same_points_as_today():
    """The all_gather rows printed in the pre-2022 layout give the same measurements as the
    same rows in today's layout."""
    old = parse_log(OLDER / "b200_16gpu_2node_allgather_pre2022-layout.txt").sweeps[0].points
    new = parse_log(LOGS / "b200_16gpu_2node_allgather_google-dranet.txt").sweeps[0].points
    assert [(p.size, p.in_place, p.time, p.algbw, p.busbw) for p in old] == [
        (p.size, p.in_place, p.time, p.algbw, p.busbw) for p in new]


def test_headerless_pre2022_rows(tmp_path):
    """Rows pasted without their header: 12 fields are the pre-2022 layout (size count type
    redop + 2 x time algbw busbw error); a 4th field that is an integer is broadcast's root."""
    body = [ln.split(">:", 1)[1] for ln in _body("older/a100_16gpu_2node_allreduce_aws-efa-eks-2021.txt")
            if ">:" in ln and ln.split(">:", 1)[1].strip()[:1].isdigit()]
    log = parse_log(_write(tmp_path, "rows.txt", "\n".join(body) + "\n"))
    assert len(log.sweeps[0].points) == 56
    assert "12-field nccl-tests layout (size count type redop + 2 x time algbw busbw error)" in log.issues[0].reason
    bc = ["%12d %12d %6s %6d %8.1f %6.2f %6.2f %6s %8.1f %6.2f %6.2f %6s" % (s, s // 4, "float", 0, s / 2e4, 20.0, 20.0, "0e+00",
          s / 2e4, 20.0, 20.0, "0e+00") for s in (2**20, 2**21, 2**22)]
    log = parse_log(_write(tmp_path, "bc.txt", "\n".join(bc) + "\n"))
    assert len(log.sweeps[0].points) == 6 and "size count type root" in log.issues[0].reason


def test_cputime_header_and_units(tmp_path):
    """nccl-tests -C 1 names the time column `cputime` (src/common.cu, report_cputime); the
    units line is read in column order, so a time printed in ms is an error naming its line."""
    text = (LOGS / "h100_16gpu_2node_allreduce_dgx06-dgx07.txt").read_text()
    cpu = _write(tmp_path, "cpu.txt", text.replace("root     time", "root  cputime"))
    assert len(parse_log(cpu).sweeps[0].points) == len(parse_log(LOGS / "h100_16gpu_2node_allreduce_dgx06-dgx07.txt").sweeps[0].points)
    ms = _write(tmp_path, "ms.txt", text.replace("(us)  (GB/s)  (GB/s)            (us)", "(ms)  (GB/s)  (GB/s)            (us)"))
    with pytest.raises(PlannerError, match=r"ms.txt:25: time unit \(ms\) \(nccl-tests prints \(us\)\)"):
        parse_log(ms)


def test_out_of_bounds_values_are_reported(tmp_path):
    text = (OLDER / "a100_16gpu_2node_allreduce_aws-efa-eks-2021.txt").read_text()
    p = _write(tmp_path, "oob.txt", text.replace("Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED"))
    log = parse_log(p)
    assert any("3 out-of-bounds value(s)" in i.reason for i in log.issues)


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("name", sorted(LOG_OPTIONS))
def test_each_log_needs_exactly_the_facts_it_lacks(name):
    """Leaving out any one option of LOG_OPTIONS is an error that asks for it: the options
    are the smallest set, and every missing fact comes back in one message."""
    opts = options(name)
    for key in [k for k in opts if k != "hardware"]:
        less = {k: v for k, v in opts.items() if k != key}
        with pytest.raises(PlannerError) as e:
            calibrate_logs([LOGS / name], **less)
        assert f"--{key}" in e.value.message and f"--{key}" in e.value.hint
        assert e.value.message.startswith("1 fact(s) the log(s) do not say")


def test_every_missing_fact_in_one_message(tmp_path):
    """Two files, three facts missing: one error lists them all with their lines."""
    p5 = LOGS / "h100_8gpu_allreduce_aws-p5-batch.txt"
    ag = LOGS / "b200_16gpu_2node_allgather_google-dranet.txt"
    sr = _write(tmp_path, "sr.txt", "$ ./build/sendrecv_perf -b 8 -e 16G\n" + "\n".join(_body(p5.name)[1:]) + "\n")
    with pytest.raises(PlannerError) as e:
        calibrate_logs([p5, ag, sr])
    msg = e.value.message
    assert msg.startswith("4 fact(s) the log(s) do not say")
    assert "h100_8gpu_allreduce_aws-p5-batch.txt:5: how many servers the 8 ranks ran on (no Rank lines) -> --nodes" in msg
    assert ("b200_16gpu_2node_allgather_google-dranet.txt:27: which collective (no *_perf command line or test header; "
            "busbw/algbw allows: all_gather, alltoall, gather, scatter) -> --collective") in msg
    assert "sr.txt:5: the rank count (busbw = algbw for sendrecv at any rank count) -> --ranks" in msg
    assert "sr.txt:5: how many servers the ranks ran on (no Rank lines) -> --nodes" in msg
    assert e.value.hint.startswith("pass --collective NAME --ranks N --nodes N")
    # the CLI prints the same, exit 2
    r = runner.invoke(app, ["calibrate", "nccl", str(p5), str(ag), "-o", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2 and "2 fact(s) the log(s) do not say" in r.stderr and "Traceback" not in r.output


def test_the_largest_rank_line_bounds_the_count(tmp_path):
    """busbw 0.85 / algbw 0.49 (+-0.005 each) allows 7 or 8 ranks; a 'Rank 7' line rules out 7.
    Rows: 1, 2, 4 MiB at 0.486 GB/s algbw (time = size / 0.486e9)."""
    rows = [f"{s:>12d} {s // 4:>12d} float sum -1 {s / 0.486e9 * 1e6:8.1f} 0.49 0.85 0 {s / 0.486e9 * 1e6:8.1f} 0.49 0.85 0"
            for s in (2**20, 2**21, 2**22)]
    head = "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
    text = "$ ./all_reduce_perf -b 1M -e 4M\n#  Rank  7 Group  0 Pid 1 on node3 device  7 [0x01] NVIDIA H100\n" + head + "\n".join(rows) + "\n"
    cal = calibrate_logs([_write(tmp_path, "r7.txt", text)], nodes=1)
    (sw,) = cal.sweeps
    assert (sw.ranks, sw.ranks_from) == (8, "busbw/algbw and Rank line 2")
    with pytest.raises(PlannerError, match="the rank count \\(busbw/algbw allows n = 7..8\\)"):
        calibrate_logs([_write(tmp_path, "no7.txt", text.replace("#  Rank  7 Group  0 Pid 1 on node3 device  7 [0x01] NVIDIA H100\n", ""))], nodes=1)


def test_rank_lines_that_contradict_the_table_name_the_line(tmp_path):
    """busbw/algbw 1.75 says 8 ranks; a Rank 11 line cannot belong to that table: exit 2 naming line 2."""
    body = _body("h100_8gpu_allreduce_aws-p5-batch.txt")[1:]
    text = "$ ./all_reduce_perf -b 8 -e 16G\n#  Rank 11 Group  0 Pid 1 on node1 device  3 [0x01] NVIDIA H100\n" + "\n".join(body) + "\n"
    p = _write(tmp_path, "r11.txt", text)
    r = runner.invoke(app, ["calibrate", "nccl", str(p), "--nodes", "2", "-o", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2, r.output
    assert "error: r11.txt:2: this Rank line names rank 11 but the table at line 6 has 8 ranks (busbw/algbw)" in r.stderr


def test_a_single_size_is_refused_naming_its_line(tmp_path):
    body = _body("h100_8gpu_allreduce_aws-p5-batch.txt")[1:]
    keep = [ln for ln in body if "#" in ln or "  1073741824     268435456 " in ln]
    p = _write(tmp_path, "one.txt", "\n".join(keep) + "\n")
    r = runner.invoke(app, ["calibrate", "nccl", str(p), "--nodes", "1", "-o", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2, r.output
    assert "error: one.txt:4: all_reduce on 8 ranks: 1 distinct size(s) at or above 1,048,576 bytes" in r.stderr


def test_wrong_collective_contradicts_the_table():
    """all_gather rows (busbw/algbw = 15/16) cannot be an all_reduce on 16 ranks (1.875)."""
    with pytest.raises(PlannerError, match="fit no rank count for all_reduce"):
        calibrate_logs([LOGS / "b200_16gpu_2node_allgather_google-dranet.txt"], collective="all_reduce")


def test_sendrecv_rank_count_needs_rank_lines_or_the_option(tmp_path):
    rows = [ln for ln in _body("h100_8gpu_allreduce_aws-p5-batch.txt")[1:]]
    p = _write(tmp_path, "sr.txt", "$ ./build/sendrecv_perf -b 8 -e 16G\n" + "\n".join(rows) + "\n")
    with pytest.raises(PlannerError, match="the rank count") as e:
        calibrate_logs([p], nodes=1)
    assert "--ranks" in e.value.hint
    cal = calibrate_logs([p], nodes=1, ranks=8)
    assert (cal.sweeps[0].ranks, cal.sweeps[0].ranks_from) == (8, "--ranks")


# ---------------------------------------------------------------------------- CLI
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, ["calibrate", "nccl", *[str(a) for a in args]])


def test_cli_writes_a_valid_profile_and_prints_the_table(tmp_path):
    out = tmp_path / "profile.yaml"
    names = ["h100_8gpu_allreduce_aws-p5-batch.txt", "h100_16gpu_2node_allreduce_dgx06-dgx07.txt"]
    r = _run(*(LOGS / n for n in names), "--collective", "all_reduce", "--nodes", "1", "--hardware", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    for word in ("all_reduce", "intra-node", "inter-node", "busbw"):
        assert word in r.stdout
    # the 2-node log names its command and hosts: the options do not override it, and say so
    assert "--nodes 1 not used" in r.stderr
    prof = load_profile(out)
    assert prof.hardware == "h100-sxm"
    assert sorted(prof.covered()) == [("all_reduce", "inter-node", 16), ("all_reduce", "intra-node", 8)]
    assert [s.name for s in prof.nccl.sources] == names
    import hashlib

    assert prof.nccl.sources[0].sha256 == hashlib.sha256((LOGS / names[0]).read_bytes()).hexdigest()
    m = prof.nccl.measurements[1]
    assert (m.hosts, m.gpus, m.nodes_from) == (["dgx-06", "dgx-07"], ["NVIDIA H100 80GB HBM3"], "host names in Rank lines")
    assert prof.planner_version and prof.created.tzinfo is not None


def test_cli_prints_the_uncalibrated_model_beside_the_log(tmp_path):
    """With --hardware, calibrate nccl also prints what the default model predicts for the
    measured sizes >= 64 MiB (tests/test_comm.py holds the figures of every multi-node log)."""
    r = _run(LOGS / "h100_16gpu_2node_allreduce_dgx06-dgx07.txt", "--hardware", "h100-sxm", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 0, r.stderr
    assert "uncalibrated model on h100-sxm: all_reduce, inter-node, 16 ranks, sizes >= 64 MiB" in r.stdout
    # 16 GiB: NVLS-tree, 16 GiB / (16 GiB / 274.3 GB/s + 43 us) x 1.875 = 513.9 GB/s against
    # the log's 472.35 and 470.37 (mean 471.4)
    assert "16 GiB │ nvls-tree │      513.9 │    471.4 │   +9.0%" in r.stdout
    assert "median |error| 43.9%, max |error| 777.1%, signed median +43.9%" in r.stdout
    assert ("least max |error| any model could reach on these points: 26.5% for NCCL's form" in r.stdout
            and "21.9% for any model in which more bytes never take less time" in r.stdout)
    assert "h100_16gpu_2node_allreduce_dgx06-dgx07.txt:49: 67,108,864 B takes 2,523.1 us (in-place)" in r.stderr
    # a log the model cannot place as it ran (16 ranks on 4 nodes vs 8-GPU nodes): said, not compared
    r = _run(LOGS / "a100_16gpu_2node_allreduce_aws-p4de-efa.txt", "--nodes", "4", "--hardware", "a100-sxm-80gb",
             "-o", tmp_path / "q.yaml")
    assert r.exit_code == 0, r.stderr
    assert "not compared (the log's 16 ranks span 4 NVLink domain(s) (inter-node); a100-sxm-80gb packs them into 2)" in r.stdout


def test_cli_lists_unreadable_lines_on_stderr(tmp_path):
    r = _run(LOGS / "h100_8gpu_reducescatter_nccl-issue1047-PARTIAL.txt", "--collective", "reduce_scatter",
             "--nodes", "1", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 0, r.stderr
    assert "warning: h100_8gpu_reducescatter_nccl-issue1047-PARTIAL.txt:2: not nccl-tests output" in r.stderr
    assert ":13: in-place columns missing" in r.stderr


@pytest.mark.parametrize(
    "fixture, message",
    [
        ("empty.txt", "the file is empty"),
        ("garbage.bin", "not a text file"),
        ("other_tool.txt", "no nccl-tests result rows found"),
        ("header_only.txt", "no nccl-tests result rows found"),
        ("truncated.txt", "0 distinct size(s) at or above 1,048,576 bytes"),
    ],
)
def test_cli_malformed_inputs_exit_2(tmp_path, fixture, message):
    out = tmp_path / "p.yaml"
    r = _run(BAD / fixture, "--collective", "all_reduce", "--nodes", "1", "-o", out)
    assert r.exit_code == 2
    assert "error: " in r.stderr and message in r.stderr
    assert "hint: " in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not out.exists()


def test_cli_truncated_row_is_reported_with_its_line_number(tmp_path):
    r = _run(BAD / "truncated.txt", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 2
    assert "warning: truncated.txt:41: 6 fields where the table header (line 24) has 13" in r.stderr


def test_cli_missing_file_and_bad_options(tmp_path):
    r = _run(tmp_path / "nope.txt", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 2 and "no such file" in r.stderr
    p5 = LOGS / "h100_8gpu_allreduce_aws-p5-batch.txt"
    r = _run(p5, "--collective", "allreduce", "--nodes", "1", "--min-size", "lots", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 2 and "--min-size" in r.stderr
    r = _run(p5, "--collective", "all_reduce", "--nodes", "1", "--scope", "rack", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 2 and "unknown scope" in r.stderr


def test_profile_rejects_unknown_keys(tmp_path):
    prof = _profile_for("h100_8gpu_allreduce_aws-p5-batch.txt")
    data = yaml.safe_load(dump_profile(prof))
    data["nccl"]["groups"][0]["regimes"][0]["busbw_GBs"] = 1.0
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(PlannerError, match=r"busbw_GBs") as e:
        load_profile(p)
    assert str(p) in e.value.message
    assert load_profile_text(dump_profile(prof)) == prof  # a written profile reads back identically


def test_default_calibration_range_is_1MiB():
    assert DEFAULT_MIN_BYTES == MiB


# ------------------------------------------------------------- what any model could reach
GiB = 2**30


def _busbw(sizes, times):
    """busbw up to the constant factor(n): S / t (the bounds only use ratios at one rank count)."""
    return np.asarray(sizes, dtype=float) / np.asarray(times, dtype=float)


def test_monotone_bound_by_hand():
    """Two sizes where the larger is faster: t = 2 and 1. A monotone model needs
    2 / (1 + e) <= 1 / (1 - e), e >= (2 - 1) / (2 + 1) = 1/3; the pair is (0, 1)."""
    s = np.array([1, 2]) * GiB
    eps, pair = monotone_bound(s, _busbw(s, [2.0, 1.0]))
    assert eps == pytest.approx(1 / 3, rel=1e-12) and pair == (0, 1)
    # two placements of one size, 3 and 2: (3 - 2) / (3 + 2) = 0.2
    eps, pair = monotone_bound(np.array([GiB, GiB]), _busbw([GiB, GiB], [3.0, 2.0]))
    assert eps == pytest.approx(0.2, rel=1e-12) and pair == (0, 1)
    # already monotone: 0, no pair
    s = np.array([1, 2, 4]) * GiB
    assert monotone_bound(s, _busbw(s, [1.0, 1.0, 3.0])) == (0.0, None)
    # a busbw printed as 0.00 has no time: the bound is undefined, not a number
    eps, pair = monotone_bound(s, [1e9, 0.0, 2e9])
    assert np.isnan(eps) and pair is None and np.isnan(nccl_form_bound(s, [1e9, 0.0, 2e9]))


def test_nccl_form_bound_by_hand():
    """min_k(alpha_k + S / B_k), alpha_k >= 0, is concave, non-decreasing and >= 0 at S = 0.
    (1) on an exact alpha-beta line: 0. (2) times 1, 1, 2 at 1, 2, 3 GiB are convex (flat,
    then rising): a concave curve needs t2 >= (t1 + t3) / 2; at best t1 = 1/(1+e), t3 = 2/(1+e),
    t2 = 1/(1-e): 1/(1-e) = 1.5/(1+e), e = 0.2. (3) times 1 and 3 at 1 and 2 GiB: algbw falls
    with size, which a latency >= 0 cannot do: t(0) = 2 t1 - t2 >= 0 needs 3/(1+e) <= 2/(1-e),
    e = 0.2 (a monotone model needs nothing: 0)."""
    s = np.array([1, 2, 4, 8]) * GiB
    assert nccl_form_bound(s, _busbw(s, 1e-3 + s / 400e9)) == pytest.approx(0.0, abs=1e-6)
    s = np.array([1, 2, 3]) * GiB
    assert nccl_form_bound(s, _busbw(s, [1.0, 1.0, 2.0])) == pytest.approx(0.2, abs=2e-6)
    s = np.array([1, 2]) * GiB
    assert nccl_form_bound(s, _busbw(s, [1.0, 3.0])) == pytest.approx(0.2, abs=2e-6)
    assert monotone_bound(s, _busbw(s, [1.0, 3.0]))[0] == 0.0


def test_a_fitted_model_never_beats_the_nccl_form_bound():
    """calibrate nccl's own fit is of NCCL's form, so on the same points its max error is at
    least the bound (the GB200 rack: one regime, 3.6 % max over 512 MiB - 8 GiB vs 3.05 %)."""
    cal = calibrate_logs([LOGS / "gb200_72gpu_nvl72_allreduce_coreweave.txt"], nodes=18,
                         hardware=load_hardware("gb200-nvl72"))
    (fit,) = cal.fits.values()
    pts = [p for sw in cal.sweeps for p in sw.points]
    sizes = np.array([p.size for p in pts], dtype=float)
    times = np.array([p.time for p in pts])
    bound = nccl_form_bound(sizes, _busbw(sizes, times))
    assert bound == pytest.approx(0.0305, abs=5e-4)
    fitted = np.max(np.abs(times / fit.time(sizes) - 1))
    assert fitted == pytest.approx(0.036, abs=1e-3) and fitted >= bound


def test_noisy_tables_are_named_with_their_rows():
    """The warning names the two rows that bound every model, and stays quiet on steady logs."""
    h100 = parse_log(LOGS / "h100_16gpu_2node_allreduce_dgx06-dgx07.txt")
    msg = noisy_sizes(h100.sweeps[0])
    assert msg.startswith("h100_16gpu_2node_allreduce_dgx06-dgx07.txt:49: 67,108,864 B takes 2,523.1 us (in-place), "
                          "longer than 134,217,728 B at 1,615.8 us (out-of-place, line 50): ")
    assert "within 21.9% of both" in msg
    a100 = parse_log(LOGS / "a100_16gpu_2node_allreduce_aws-p4de-efa.txt")
    assert noisy_sizes(a100.sweeps[0]) is None  # 0.25 %


def test_a_row_larger_than_any_gpu_holds_is_not_used(tmp_path):
    """A size beyond MAX_ROW_BYTES (4 TiB, 14x the largest HBM in the catalog) is a corrupted
    row: reported with its line and left out, the rest of the table calibrates."""
    src = (LOGS / "h100_8gpu_allreduce_aws-p5-batch.txt").read_text().splitlines()
    i = next(k for k, ln in enumerate(src) if " 1048576 " in ln)
    src[i] = src[i].replace(" 1048576 ", " " + "1" + "0" * 30 + " ", 1)
    log = tmp_path / "big.txt"
    log.write_text("\n".join(src) + "\n")
    parsed = parse_log(log)
    assert [str(x) for x in parsed.issues if x.line == i + 1][0].startswith(
        f"big.txt:{i + 1}: size 1,000,000,000,000,000,000,000,000,000,000 B is more than a GPU holds")
    assert 10**30 not in [p.size for sw in parsed.sweeps for p in sw.points]
    cal = calibrate_logs([log], nodes=1)
    assert len(cal.fits) == 1
