"""`planner calibrate` for people: the fitted nccl regimes with their busbw error, the
GEMM rows (with % of peak and the uncalibrated model's figure when the GPU is known), and
--dry-run's list of shapes with the GPU time they would take."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.table import Table

from ..compute import calibration_derate, default_gemm_rate
from .common import binary_size, duration, err, out, pct, print_wide


def progress(message: str) -> None:
    """A benchmark's progress line, on stderr."""
    err.print(message, highlight=False)


# ---------------------------------------------------------------- nccl
def nccl_tables(prof) -> list[Table]:
    """One table per fitted group: its regimes, and the busbw error from 1 MiB up."""
    tables = []
    for g in prof.nccl.groups:
        nodes = ",".join(map(str, g.nodes))
        t = Table(title=f"{g.collective}, {g.scope}, {g.ranks} ranks on {nodes} node(s)", title_justify="left")
        t.add_column("sizes (regime)")
        t.add_column("alpha us", justify="right")
        t.add_column("busbw GB/s", justify="right")
        for r in g.regimes:
            t.add_row(f"{binary_size(r.from_bytes)} - {binary_size(r.to_bytes)}", f"{r.latency_us:,.1f}", f"{r.busbw_GBps:,.1f}")
        res = g.residuals
        t.caption = (
            f"busbw error >= {binary_size(res.min_size_bytes)}: median {pct(res.busbw_median_abs_rel_err, '-')}, "
            f"max {pct(res.busbw_max_abs_rel_err, '-')} ({res.points} points)"
        )
        tables.append(t)
    return tables


def _bound(x: float) -> str:
    """A bound of calibrate.nccl (NaN where a point has no time, e.g. busbw printed 0.00): '-'."""
    return "-" if x != x else pct(x)


def model_check_tables(checks) -> list:
    """The uncalibrated model beside the log, one table per group: busbw per measured size
    (the mean of the placements), the algorithm `auto` picks, and the error summary; a
    group the model cannot place as the log ran it is one line saying why."""
    items = []
    for c in checks:
        group = f"{c.collective}, {c.scope}, {c.ranks} ranks"
        if c.skipped:
            items.append(f"uncalibrated model on {c.hardware}: {group} not compared ({c.skipped})")
            continue
        t = Table(title=f"uncalibrated model on {c.hardware}: {group}, sizes >= {binary_size(c.min_bytes)}",
                  title_justify="left")
        for col in ("size", "algorithm", "model GB/s", "log GB/s", "error"):
            t.add_column(col, justify="left" if col == "algorithm" else "right", no_wrap=True)
        by_size: dict[int, list] = {}
        for size, meas, pred, algo in zip(c.sizes, c.measured, c.predicted, c.algorithms):
            by_size.setdefault(size, []).append((meas, pred, algo))
        for size, rows in sorted(by_size.items()):
            meas = sum(r[0] for r in rows) / len(rows)
            t.add_row(binary_size(size), rows[0][2], f"{rows[0][1] / 1e9:,.1f}", f"{meas / 1e9:,.1f}", f"{rows[0][1] / meas - 1:+.1%}")
        t.caption = (f"busbw error (model / log - 1, {len(c.sizes)} points): median |error| {pct(c.median_abs_err, '-')}, "
                     f"max |error| {pct(c.max_abs_err, '-')}, signed median {c.median_err:+.1%}\n"
                     f"least max |error| any model could reach on these points: {_bound(c.nccl_form)} for NCCL's form "
                     f"(the fastest of latency + size / bandwidth algorithms, whatever their figures), "
                     f"{_bound(c.monotone[0])} for any model in which more bytes never take less time")
        items.append(t)
    return items


def print_nccl_report(prof, cal, output: Optional[Path], checks=()) -> None:
    """The fit of `calibrate nccl`, the uncalibrated model beside the log where --hardware is
    known (`checks`, calibrate.nccl.compare_to_model), and the profile it wrote (no output:
    the profile went to stdout, so the report goes to stderr)."""
    con = out if output is not None else err
    con.print("t(S) = min_k(alpha_k + S*factor(n)/busbw_k), S = nccl-tests size; the last regime is the bulk one")
    for table in nccl_tables(prof):
        con.print(table)
    for item in model_check_tables(checks):
        con.print(item)
    where = f"wrote {output}" if output is not None else "profile on stdout"
    con.print(f"{where} ({len(prof.nccl.groups)} group(s) from {len(cal.logs)} file(s))")


# ---------------------------------------------------------------- gemm
def gemm_table(cal, hw, title: str) -> Table:
    """The rows, with % of the dense peak and the uncalibrated model's figure when --hardware is known."""
    t = Table(title=title, title_justify="left")
    for col in ("M", "N", "K", "dtype", "TFLOP/s"):
        t.add_column(col, justify="left" if col == "dtype" else "right", no_wrap=True)
    if hw is not None:
        t.add_column("% peak", justify="right", no_wrap=True)
        t.add_column("model", justify="right", no_wrap=True)
    t.add_column("layers" if cal.provenance.method == "measured" else "line", overflow="ellipsis", no_wrap=True)
    derate = calibration_derate(cal, hw) if hw is not None else 1.0
    for r in sorted(cal.rows, key=lambda r: (r.dtype, r.M, r.N, r.K)):
        cells = [f"{r.M:,}", f"{r.N:,}", f"{r.K:,}", r.dtype, f"{r.tflops:,.1f}"]
        if hw is not None:
            prec = "fp8" if r.dtype == "fp8" else "bf16"
            peak = hw.fp8_TFLOPS if prec == "fp8" else hw.bf16_TFLOPS
            model = float(default_gemm_rate(float(r.M), float(r.N), float(r.K), prec, hw)) / derate / 1e12
            cells += ["-" if not peak else f"{100.0 * r.tflops / peak:.1f}%", "-" if model != model else f"{model:,.1f}"]
        if r.layers:
            what = r.layers[0] + (f" (+{len(r.layers) - 1})" if len(r.layers) > 1 else "")
        else:  # 'file:line (source)' or 'file: row n' -> 'line' / 'row n'
            where = r.source.split(" (")[0]
            what = where.split(": ", 1)[1] if ": " in where else where.rsplit(":", 1)[-1]
        cells.append(what)
        t.add_row(*cells)
    if hw is not None:
        t.caption = (f"% peak: of the {hw.name} dense peak; model: the uncalibrated estimate in TFLOP/s (compute.gemm_time: K loop and output write over wave efficiency) "
                     + ("at benchmark clocks" if not cal.sustained else "at the sustained clock"))
    return t


def print_gemm_report(prof, cal, hw, output: Path, from_files: Optional[list[Path]] = None) -> None:
    """The GEMM rows of `calibrate gemm` (ingested from `from_files`, else timed here) and
    the profile it wrote."""
    if from_files:
        title = f"GEMM rows from {', '.join(p.name for p in from_files)}: {cal.gpu}"
    else:
        title = f"GEMMs timed on {cal.gpu}" + (" (sustained)" if cal.sustained else "")
    out.print(gemm_table(cal, hw, title))
    kept = "; kept its nccl section" if prof.nccl is not None else ""
    out.print(f"wrote {output} (gemm: {len(cal.rows)} row(s){kept})")


def print_shapes(shapes, dtypes, warmup: int, repeats: int, sustained: bool, hw) -> None:
    """--dry-run: the shapes, and the GPU time they would take at the uncalibrated rates."""
    from ..calibrate.gemm import SUSTAINED_HEAT_S, SUSTAINED_WARM_S

    t = Table(title=f"{len(shapes)} GEMM shape(s) x {', '.join(dtypes)}", title_justify="left")
    for col in ("M", "N", "K", "GFLOP"):
        t.add_column(col, justify="right")
    t.add_column("layers")
    for s in shapes:
        t.add_row(f"{s.M:,}", f"{s.N:,}", f"{s.K:,}", f"{s.flops / 1e9:,.1f}", "; ".join(s.layers))
    out.print(t)
    if hw is not None:
        calls = warmup + repeats
        gpu_s = 0.0
        for d in dtypes:
            if d == "fp8" and hw.fp8_TFLOPS is None:
                continue
            for s in shapes:
                gpu_s += calls * s.flops / float(default_gemm_rate(float(s.M), float(s.N), float(s.K), d, hw))
                if sustained:
                    gpu_s += SUSTAINED_WARM_S
        if sustained:
            gpu_s += SUSTAINED_HEAT_S
        out.print(f"estimated GPU time on {hw.name}: {gpu_s:,.0f} s of GEMMs ({calls} calls per shape"
                  + (f", {SUSTAINED_HEAT_S:g} s heat-up, {SUSTAINED_WARM_S:g} s per shape" if sustained else "")
                  + "), plus input set-up")


# ---------------------------------------------------------------- run
def _measured(m) -> str:
    if m.unit == "s":
        return duration(m.measured)
    return f"{m.measured / 2**30:,.2f} GiB"


def _predicted(m, v) -> str:
    return duration(v) if m.unit == "s" else f"{v / 2**30:,.2f} GiB"


def print_run_report(section, output: Path) -> None:
    """`calibrate run`: the fitted knobs with their 1-sigma range, and each measurement with
    the model's prediction before and after."""
    t = Table(title=f"run calibration: {', '.join(section.stacks)} on {section.hardware}", title_justify="left")
    for col in ("parameter", "fitted", "1-sigma range", "uncalibrated", "bounds"):
        t.add_column(col, justify="left" if col == "parameter" else "right", no_wrap=True)
    for k, p in section.parameters.items():
        rng = "-" if p.low_1sigma is None else f"{p.low_1sigma:.4g} - {p.high_1sigma:.4g}"
        t.add_row(k + (" (at bound)" if p.at_bound else ""), f"{p.value:.4g}", rng, f"{p.prior:.4g}",
                  f"[{p.lower:.3g}, {p.upper:.3g}]")
    print_wide(t, 120)
    m_t = Table(title="measurements (residual = model / measured - 1)", title_justify="left")
    for col in ("run", "quantity", "measured", "steady lines", "spread", "before", "after", "fitted"):
        m_t.add_column(col, justify="left" if col in ("run", "quantity") else "right", no_wrap=col != "run")
    for m in section.measurements:
        spread = "" if not m.spread_rel else f"{m.spread_rel[0]:+.1%} / {m.spread_rel[1]:+.1%}"
        lines = "" if m.steps is None else f"{m.steps} (+{m.warmup_dropped} warm-up)"
        m_t.add_row(f"{m.source} ({m.mesh}, {m.gpus} GPUs)", m.quantity.replace("_", " "), _measured(m), lines, spread,
                    f"{_predicted(m, m.predicted_before)} ({m.residual_before:+.1%})",
                    f"{_predicted(m, m.predicted_after)} ({m.residual_after:+.1%})", "yes" if m.fitted else "no")
    print_wide(m_t, 220)
    out.print(f"wrote {output} (run section: {len(section.parameters)} knob(s) from "
              f"{section.fit.independent_measurements} independent measurement(s); applies to "
              f"{'/'.join(section.stacks)} on {section.hardware})")


def print_host_adam_report(section, output: Path) -> None:
    """`calibrate host-adam`: each timed step, what was subtracted, the efficiency it gives, and the median written."""
    t = Table(title=f"host Adam: {section.formula}", title_justify="left")
    for col in ("measurement", "optimizer", "elements x processes", "seconds", "copy subtracted", "DRAM peak GB/s",
                "efficiency"):
        t.add_column(col, justify="left" if col in ("measurement", "optimizer") else "right", no_wrap=col != "measurement")
    for m in section.measurements:
        t.add_row(m.source, m.optimizer, f"{m.params:,.4g} x {m.processes}", f"{m.seconds:,.4g}",
                  f"{m.copy_seconds:,.4g}" if m.copy_seconds else "-", f"{m.host_memory_GBps:,.4g}",
                  f"{m.efficiency:.4g}")
    print_wide(t, 160)
    from ..offload import HOST_MEMORY_EFFICIENCY

    scope = f"plans on {section.hardware}" if section.hardware else "plans on every hardware"
    out.print(f"wrote {output} (host_adam section: efficiency {section.efficiency:.4g}, the median of "
              f"{len(section.measurements)}, in place of the assumed {HOST_MEMORY_EFFICIENCY:g}; applies to {scope} "
              "with --calibration)")
