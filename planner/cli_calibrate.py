"""`planner calibrate ...`: fit cost figures to measurements (nccl-tests logs, GEMM timings).

Commands only parse options, call planner.calibrate and print; the fit lives in
planner/calibrate/nccl.py, the GEMM calibration in planner/calibrate/gemm.py and the
profile format in planner/calibrate/profile.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .cli_common import cli_errors, err, out, warn
from .compute import SUSTAINED_TENSOR_FRACTION
from .errors import PlannerError
from .units import parse_bytes

calibrate_app = typer.Typer(
    name="calibrate",
    help="Fit communication and GEMM figures to your own measurements; writes a profile YAML.",
    no_args_is_help=True,
)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}%"


def _size(b: float) -> str:
    for unit, f in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if b >= f:
            v = b / f
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{b:.0f} B"


def _nccl_tables(prof) -> list[Table]:
    """One table per fitted group: its regimes, and the busbw error from 1 MiB up."""
    tables = []
    for g in prof.nccl.groups:
        nodes = ",".join(map(str, g.nodes))
        t = Table(title=f"{g.collective}, {g.scope}, {g.ranks} ranks on {nodes} node(s)", title_justify="left")
        t.add_column("sizes (regime)")
        t.add_column("alpha us", justify="right")
        t.add_column("busbw GB/s", justify="right")
        for r in g.regimes:
            t.add_row(f"{_size(r.from_bytes)} - {_size(r.to_bytes)}", f"{r.latency_us:,.1f}", f"{r.busbw_GBps:,.1f}")
        res = g.residuals
        t.caption = (
            f"busbw error >= {_size(res.min_size_bytes)}: median {_pct(res.busbw_median_abs_rel_err)}, "
            f"max {_pct(res.busbw_max_abs_rel_err)} ({res.points} points)"
        )
        tables.append(t)
    return tables


@calibrate_app.command("nccl")
@cli_errors
def nccl(
    logs: list[Path] = typer.Argument(..., help="nccl-tests output files (all_reduce_perf, all_gather_perf, ...)", exists=False),
    output: Path = typer.Option(..., "--output", "-o", help="profile YAML to write"),
    collective: Optional[str] = typer.Option(None, "--collective", help="all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|... when the log does not name it"),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="rank count when neither Rank lines nor busbw/algbw tell it"),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="node count when the log lacks a complete set of Rank lines"),
    scope: Optional[str] = typer.Option(None, "--scope", help="intra-node|inter-node (default: intra-node if 1 node); intra-node also for one NVLink domain spanning trays (GB200 NVL72)"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog name or YAML path of the GPUs measured (recorded in the profile)"),
    min_size: str = typer.Option("1MiB", "--min-size", help="smallest message size fitted, e.g. 1MiB, 256KiB, 8MB"),
) -> None:
    """Fit latency and bus bandwidth per (collective, scope, ranks) to nccl-tests logs."""
    from .calibrate.nccl import calibrate_logs, scope_warnings
    from .calibrate.profile import keep_gemm_section, profile_from_calibration, write_profile

    hw = None
    if hardware is not None:
        from .catalog import load_hardware

        hw = load_hardware(hardware)
    min_bytes = int(parse_bytes(min_size, "--min-size"))
    cal = calibrate_logs(logs, collective=collective, ranks=ranks, nodes=nodes, scope=scope, min_bytes=min_bytes, warn=warn)
    if hw is not None and scope is None:
        for w in scope_warnings(cal, hw.nvlink_domain, hw.gpus_per_node):
            warn(w)
    prof = profile_from_calibration(cal, hardware=hw.name if hw else None)
    prof = keep_gemm_section(output, prof)
    write_profile(prof, output)
    out.print("t(S) = min_k(alpha_k + S*factor(n)/busbw_k), S = nccl-tests size; the last regime is the bulk one")
    for table in _nccl_tables(prof):
        out.print(table)
    out.print(f"wrote {output} ({len(prof.nccl.groups)} group(s) from {len(cal.logs)} file(s))")


# --- gemm ---------------------------------------------------------------------------
def _int_list(text: str, what: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).replace(" ", "").split(",") if v]
    except ValueError:
        vals = []
    if not vals or any(v <= 0 for v in vals):
        raise PlannerError(f"{what}: {text!r} is not a list of positive integers", f"e.g. {what} 1,2,4,8")
    return vals


def _split(values: Optional[list[str]]) -> list[str]:
    return [v.strip() for item in (values or []) for v in item.split(",") if v.strip()]


def _gemm_table(cal, hw, title: str) -> Table:
    """The rows, with % of the dense peak and the uncalibrated model's figure when --hardware is known."""
    from .calibrate.gemm import _default_rate

    t = Table(title=title, title_justify="left")
    for col in ("M", "N", "K", "dtype", "TFLOP/s"):
        t.add_column(col, justify="left" if col == "dtype" else "right", no_wrap=True)
    if hw is not None:
        t.add_column("% peak", justify="right", no_wrap=True)
        t.add_column("model", justify="right", no_wrap=True)
    t.add_column("layers" if cal.provenance.method == "measured" else "line", overflow="ellipsis", no_wrap=True)
    derate = 1.0 if cal.sustained else SUSTAINED_TENSOR_FRACTION
    for r in sorted(cal.rows, key=lambda r: (r.dtype, r.M, r.N, r.K)):
        cells = [f"{r.M:,}", f"{r.N:,}", f"{r.K:,}", r.dtype, f"{r.tflops:,.1f}"]
        if hw is not None:
            prec = "fp8" if r.dtype == "fp8" else "bf16"
            peak = hw.fp8_TFLOPS if prec == "fp8" else hw.bf16_TFLOPS
            model = float(_default_rate(float(r.M), float(r.N), prec, hw)) / derate / 1e12
            cells += ["-" if not peak else f"{100.0 * r.tflops / peak:.1f}%", "-" if model != model else f"{model:,.1f}"]
        if r.layers:
            what = r.layers[0] + (f" (+{len(r.layers) - 1})" if len(r.layers) > 1 else "")
        else:  # 'file:line (source)' or 'file: row n' -> 'line' / 'row n'
            where = r.source.split(" (")[0]
            what = where.split(": ", 1)[1] if ": " in where else where.rsplit(":", 1)[-1]
        cells.append(what)
        t.add_row(*cells)
    if hw is not None:
        t.caption = (f"% peak: of the {hw.name} dense peak; model: the uncalibrated estimate in TFLOP/s (plateau x wave efficiency) "
                     + ("at benchmark clocks" if not cal.sustained else "at the sustained clock"))
    return t


@calibrate_app.command("gemm")
@cli_errors
def gemm(
    from_files: Optional[list[Path]] = typer.Option(None, "--from", help="measurements to ingest: CSV (header M,N,K,dtype,tflops), JSON or YAML rows; repeatable"),
    run: bool = typer.Option(False, "--run", help="time the --model layer GEMM shapes with PyTorch on the local GPU (needs the gpu extra: PyTorch)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="profile YAML to write; an existing profile keeps its nccl section, its gemm section is replaced"),
    gpu_filter: Optional[str] = typer.Option(None, "--gpu-filter", help="--from: keep rows whose gpu field contains this text (case-insensitive)"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog name or YAML of the GPU measured: records its dense peaks and SM count, shows efficiencies"),
    sustained: bool = typer.Option(False, "--sustained", help="--run: heat the GPU and run each shape back to back before timing; --from: the file's rows were measured that way"),
    model: Optional[list[str]] = typer.Option(None, "--model", help="--run: model(s) whose GEMMs to time (repeatable or comma-separated)"),
    tp: str = typer.Option("1", "--tp", help="--run: tensor-parallel sizes, e.g. 1,2,4,8"),
    seq_len: Optional[str] = typer.Option(None, "--seq-len", help="--run: sequence length(s) (default: each model's max_seq_len)"),
    micro_batch: str = typer.Option("1", "--micro-batch", help="--run: sequences per micro-batch (list ok); M = seq_len x micro_batch tokens"),
    dtype: str = typer.Option("bf16,fp8", "--dtype", help="--run: bf16 and/or fp8 (fp8 is skipped on GPUs without FP8 tensor cores)"),
    warmup: int = typer.Option(10, "--warmup", min=0, help="--run: untimed calls per shape"),
    repeats: int = typer.Option(30, "--repeats", min=1, help="--run: timed calls per shape (the median is kept)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="--run: list the shapes it would time and exit (needs no GPU)"),
    note: Optional[list[str]] = typer.Option(None, "--note", help="free text for the profile's provenance (repeatable)"),
) -> None:
    """Measured GEMM throughput: time the model's shapes (--run) or ingest measurements (--from)."""
    from .calibrate import gemm as g
    from .calibrate.profile import with_gemm_section, write_profile

    if bool(from_files) == bool(run):
        raise PlannerError("give either --from FILE (ingest measurements) or --run (time GEMMs on this GPU)",
                           "e.g. planner calibrate gemm --from gemm.csv -o profile.yaml, or "
                           "planner calibrate gemm --run --model llama3-8b --tp 1,2,4,8 -o profile.yaml")
    if output is None and not dry_run:
        raise PlannerError("-o/--output is required: the profile YAML to write", "e.g. -o profile.yaml")
    hw = None
    if hardware is not None:
        from .catalog import load_hardware

        hw = load_hardware(hardware)
    notes = list(note or [])
    if from_files:
        ignored = [o for o, v in (("--model", model), ("--dry-run", dry_run)) if v]
        for o in ignored:
            warn(f"{o} is for --run; ignored with --from")
        res = g.ingest_files(from_files, gpu_filter)
        for s in res.skipped:
            warn(f"skipped {s}")
        if res.other_gpus:
            warn(f"skipped {res.other_gpus} row(s) of other GPUs (--gpu-filter {gpu_filter!r})")
        cal = g.calibration_from_ingest(res, hw, gpu_filter, notes)
        if sustained:
            cal = g.GemmCalibration.model_validate({**cal.model_dump(), "sustained": True})
        title = f"GEMM rows from {', '.join(p.name for p in from_files)}: {cal.gpu}"
    else:
        if gpu_filter is not None:
            warn("--gpu-filter is for --from; ignored with --run")
        names = _split(model)
        if not names:
            raise PlannerError("--run needs --model (the model whose GEMM shapes to time)", "e.g. --model llama3-8b --tp 1,2,4,8")
        from .catalog import load_model

        models = [load_model(n) for n in names]
        tps = _int_list(tp, "--tp")
        seqs = _int_list(seq_len, "--seq-len") if seq_len is not None else [None]
        mbs = _int_list(micro_batch, "--micro-batch")
        dtypes = _split([dtype])
        bad = [d for d in dtypes if d not in ("bf16", "fp8")]
        if bad or not dtypes:
            raise PlannerError(f"--dtype: {', '.join(bad) or repr(dtype)} is not bf16 or fp8", "e.g. --dtype bf16,fp8")
        shapes = g.benchmark_shapes(models, tps, seqs, mbs)
        if dry_run:
            _print_shapes(shapes, dtypes, warmup, repeats, sustained, hw)
            return
        res = g.run_gemm_benchmark(shapes, dtypes, warmup, repeats, sustained=sustained,
                                   progress=lambda m: err.print(m, highlight=False))
        for s in res.skipped:
            warn(f"not timed: {s}")
        seq_used = sorted({m.max_seq_len if s is None else s for m in models for s in seqs})
        cal = g.calibration_from_run(res, hw, [m.name for m in models], tps, seq_used, mbs, warmup, repeats, notes)
        title = f"GEMMs timed on {cal.gpu}" + (" (sustained)" if cal.sustained else "")
    prof = with_gemm_section(output, cal, hardware=hw.name if hw is not None else None)
    write_profile(prof, output)
    out.print(_gemm_table(cal, hw, title))
    kept = "; kept its nccl section" if prof.nccl is not None else ""
    out.print(f"wrote {output} (gemm: {len(cal.rows)} row(s){kept})")


def _print_shapes(shapes, dtypes, warmup: int, repeats: int, sustained: bool, hw) -> None:
    """--dry-run: the shapes, and the GPU time they would take at the uncalibrated rates."""
    from .calibrate.gemm import SUSTAINED_HEAT_S, SUSTAINED_WARM_S, _default_rate

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
                gpu_s += calls * s.flops / float(_default_rate(float(s.M), float(s.N), d, hw))
                if sustained:
                    gpu_s += SUSTAINED_WARM_S
        if sustained:
            gpu_s += SUSTAINED_HEAT_S
        out.print(f"estimated GPU time on {hw.name}: {gpu_s:,.0f} s of GEMMs ({calls} calls per shape"
                  + (f", {SUSTAINED_HEAT_S:g} s heat-up, {SUSTAINED_WARM_S:g} s per shape" if sustained else "")
                  + "), plus input set-up")


def register(app: typer.Typer) -> None:
    app.add_typer(calibrate_app, name="calibrate")
