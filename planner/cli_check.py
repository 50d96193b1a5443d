"""`planner check JOB.yaml...` (a CI gate: exit 0 all fit, 1 any does not, 2 any invalid)
and `planner schema` (the JSON Schema of the job file, for editors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .check import Gates, TimeModelUnavailable, check_job, json_schema, mfu, step_seconds, worst_exit
from .cli_common import Format, FormatOption, cli_errors, report_error, warn
from .cli_core import load_job
from .errors import PlannerError
from .render import emit
from .units import parse_seconds

GiB = 2.0**30
SHOWN_SUGGESTIONS = 5  # in the text output; --format json lists all

TERM_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "master_weights": "fp32 master weights",
    "adam": "Adam m and v",
    "layer_activations": "layer activations",
    "output_activations": "output layer (logits + loss)",
    "recompute_buffer": "recompute buffer (one layer)",
    "fsdp_buffers": "FSDP all-gather buffers",
    "reserve": "CUDA context + NCCL reserve",
}


def _gib(x: float) -> str:
    return f"{x / GiB:,.1f} GiB"


def _memory_line(m: dict) -> str:
    return (f"{_gib(m['total_bytes'])} of {_gib(m['usable_bytes'])} usable "
            f"({100 * m['total_bytes'] / m['capacity_bytes']:.0f}% of {_gib(m['capacity_bytes'])} HBM, "
            f"headroom {100 * m['headroom']:.0f}%)")


def _seconds(t: float) -> str:
    return f"{t:,.0f} s" if t >= 100 else f"{t:.3g} s"


def _time_text(res: dict) -> str:
    t, u = step_seconds(res), mfu(res)
    parts = ([f"step {_seconds(t)}"] if t is not None else []) + ([f"MFU {100 * u:.1f}%"] if u is not None else [])
    return ", ".join(parts)


def _print_job(name: str, res: dict) -> None:
    m = res["memory"]
    timing = _time_text(res)
    line = f"{res['verdict'].upper()} {name}: {_memory_line(m)}" + (f"; {timing}" if timing else "")
    typer.echo(line)
    if res["verdict"] == "pass":
        return
    for f in res["failures"]:
        if f["kind"] == "memory":
            typer.echo(f"  does not fit: {_gib(f['total_bytes'])} per GPU exceeds the usable {_gib(f['usable_bytes'])} "
                       f"by {_gib(f['overflow_bytes'])} (heaviest pipeline stage: {m['heaviest_stage']})")
            typer.echo("  memory per GPU, largest first:")
            terms = sorted(((v, k) for k, v in m["terms"].items() if v > 0), reverse=True)
            width = max(len(TERM_LABELS.get(k, k)) for _, k in terms)
            for v, k in terms:
                typer.echo(f"    {TERM_LABELS.get(k, k):<{width}}  {v / GiB:9,.2f} GiB  {100 * v / m['total_bytes']:5.1f}%")
        elif f["kind"] == "step_time":
            typer.echo(f"  too slow: step {_seconds(f['step_s'])} > --max-step-time {_seconds(f['max_step_s'])}")
        elif f["kind"] == "mfu":
            typer.echo(f"  too little MFU: {100 * f['mfu']:.1f}% < --min-mfu {100 * f['min_mfu']:.1f}%")
    sugg = res["suggestions"]
    if not sugg:
        typer.echo("  no single change, nor any pair of changes, among stronger sharding, recompute, a smaller "
                   "micro-batch, more TP (up to the NVLink domain) and more PP makes it pass"
                   + ("; more GPUs, GPUs with more memory, or three or more of these changes together might"
                      if any(f["kind"] == "memory" for f in res["failures"]) else ""))
        return
    by = "predicted step time" if all(s["step_s"] is not None for s in sugg) else "the documented cost order"
    typer.echo(f"  changes that pass, each checked with the same model as `planner explain` (ranked by {by}):")
    for i, s in enumerate(sugg[:SHOWN_SUGGESTIONS], 1):
        extra = f", step {_seconds(s['step_s'])}" if s["step_s"] is not None else ""
        extra += f", MFU {100 * s['mfu']:.1f}%" if s["mfu"] is not None else ""
        typer.echo(f"    {i}. {s['description']}: {_gib(s['total_bytes'])} ({100 * s['fraction_of_hbm']:.0f}% of HBM){extra}")
    if len(sugg) > SHOWN_SUGGESTIONS:
        typer.echo(f"    ... and {len(sugg) - SHOWN_SUGGESTIONS} more (--format json lists all)")


def _csv_row(res: dict) -> dict:
    row = dict(res)
    row["suggestions"] = "; ".join(s["description"] for s in res.get("suggestions", []))
    row["failures"] = "; ".join(f["kind"] for f in res.get("failures", []))
    row["warnings"] = "; ".join(res.get("warnings", []))
    return row


def register(app: typer.Typer) -> None:
    @app.command("check")
    @cli_errors
    def check(
        job_files: list[Path] = typer.Argument(..., help="job YAML files (the fields `planner explain` reads; see `planner schema`)"),
        headroom: Optional[float] = typer.Option(None, "--headroom", help="fraction of HBM kept free, overrides the jobs' (default: 0.10)"),
        calibration: Optional[Path] = typer.Option(
            None, "--calibration", help="calibration profile (planner calibrate): used by the time gates; memory does not depend on it"),
        max_step_time: Optional[str] = typer.Option(None, "--max-step-time", help="also fail a job whose predicted step time exceeds this (e.g. 12s)"),
        min_mfu: Optional[float] = typer.Option(None, "--min-mfu", help="also fail a job whose predicted MFU is below this fraction (e.g. 0.4)"),
        fmt: Format = FormatOption,
    ):
        """Check that job files fit in GPU memory (and optional time gates); for a job that
        does not, name the overflow and the cheapest changes that make it fit, each checked.
        Exit 0 when every job passes, 1 when any fails, 2 when any input is invalid."""
        if headroom is not None and not (0.0 <= headroom < 1.0):
            raise PlannerError(f"--headroom {headroom} is not a fraction in [0, 1)", "e.g. --headroom 0.1 keeps 10% of HBM free")
        gates = Gates(
            max_step_s=parse_seconds(max_step_time, "--max-step-time") if max_step_time is not None else None,
            min_mfu=min_mfu,
        )
        if calibration is not None:
            from .calibrate.profile import load_profile

            load_profile(calibration)  # a bad profile is bad input (exit 2), once for all jobs
            if not gates.timed:
                warn("calibration profiles affect time only; the memory check is the same with or without one")
        results: list[dict] = []
        codes: list[int] = []
        for path in job_files:
            try:
                job, where = load_job(path, {"headroom": headroom,
                                             "calibration": str(calibration) if calibration else None})
                res = check_job(job, where, gates)
            except TimeModelUnavailable:
                raise  # the same for every job: one message, exit 2
            except PlannerError as e:
                if not e.message.startswith(str(path)):
                    e = PlannerError(f"{path}: {e.message}", e.hint)
                report_error(e)
                results.append({"file": str(path), "verdict": "error", "error": e.message, "hint": e.hint})
                codes.append(2)
                continue
            for w in res["warnings"]:
                warn(f"{path}: {w}")
            results.append({"file": str(path), **res})
            codes.append(1 if res["verdict"] == "fail" else 0)
            if fmt == Format.table:
                _print_job(str(path), res)
        if fmt == Format.csv:
            emit([_csv_row(r) for r in results], fmt, lambda: None)
        elif fmt != Format.table:
            emit(results, fmt, lambda: None)
        elif len(job_files) > 1:
            n = {v: sum(r["verdict"] == v for r in results) for v in ("pass", "fail", "error")}
            typer.echo(f"{len(job_files)} jobs: {n['pass']} pass, {n['fail']} fail, {n['error']} invalid")
        code = worst_exit(codes)
        if code:
            raise typer.Exit(code)

    @app.command("schema")
    @cli_errors
    def schema(
        what: str = typer.Argument("job", help="job (default) | model | hardware"),
    ):
        """Print the JSON Schema of a job file (or a model or hardware file), for editors
        and CI validators."""
        typer.echo(json.dumps(json_schema(what), indent=2))
