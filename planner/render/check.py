"""`planner check` for people: a PASS/FAIL line per job file, for a failing one the
overflow, its memory terms and the checked changes that pass; then a count of verdicts.
json|yaml: every result; csv: one row per job with its lists joined."""

from __future__ import annotations

import typer

from ..check import mfu, step_seconds
from .common import Format, TERM_LABELS, capacity_text, emit, gib, mfu_convention, pct, seconds

SHOWN_SUGGESTIONS = 5  # in the text output; --format json lists all


def _gib(x: float) -> str:
    return f"{gib(x, 1)} GiB"


def memory_line(m: dict) -> str:
    gate = ""
    if "reserved_bytes" in m:  # what the gate adds up: the reserved peak and what lives outside the allocator
        band = (f" (band to {gib(m['reserved_high_bytes'], 1)})" if "reserved_high_bytes" in m else "")
        gate = (f"reserved peak {_gib(m['reserved_bytes'])}{band} + {_gib(m['total_bytes'] - m['reserved_bytes'])} "
                f"outside the allocator; ")
    return (f"{_gib(m['total_bytes'])} of {_gib(m['usable_bytes'])} usable "
            f"({gate}{100 * m['total_bytes'] / m['capacity_bytes']:.0f}% of {capacity_text(m)}, "
            f"headroom {100 * m['headroom']:.0f}%)")


def time_text(res: dict) -> str:
    t, u = step_seconds(res), mfu(res)
    parts = ([f"step {seconds(t)} s"] if t is not None else []) + ([f"MFU {pct(u)}"] if u is not None else [])
    return ", ".join(parts)


def training_text(res: dict) -> str:
    """With --tokens (or a job's `tokens`): the run's steps, days and GPU-hours, explain's training line (before
    2026-12-07 check's table left them out, so `check ... --tokens 1T` looked like a flag it ignored; its JSON had
    them). A failing job's figures are those of its plan as written, which does not run."""
    thr = res.get("throughput") or {}
    if "training_days" not in thr:
        return ""
    tokens = (res.get("flops") or {}).get("training_tokens")
    text = (f"  training{f' for {tokens:.4g} tokens' if tokens else ''}: {thr['training_steps']:,.0f} steps, "
            f"{thr['training_days']:,.1f} days, {thr['gpu_hours']:,.0f} GPU-hours (failure-free; see `planner budget`)")
    if "training_days_ramp" in thr:
        text += (f"; with the batch ramp {thr['training_steps_ramp']:,.0f} steps, {thr['training_days_ramp']:,.1f} "
                 f"days, {thr['gpu_hours_ramp']:,.0f} GPU-hours")
    if res.get("verdict") == "fail":
        text += " (the plan as written, which does not pass)"
    return text


def print_job(name: str, res: dict) -> None:
    m = res["memory"]
    timing = time_text(res)
    p = res["plan"]
    line = (f"{res['verdict'].upper()} {name}: {p['model']} on {p['gpus']:,} x {p['hardware']}: {memory_line(m)}"
            + (f"; {timing}" if timing else ""))
    typer.echo(line)
    training = training_text(res)
    if training:
        typer.echo(training)
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
                typer.echo(f"    {TERM_LABELS.get(k, k):<{width}}  {gib(v):>9} GiB  {100 * v / m['total_bytes']:5.1f}%")
        elif f["kind"] == "host_memory":
            typer.echo(f"  host memory: CPU offload holds {_gib(f['bytes_per_node'])} a node, over its "
                       f"{_gib(f['capacity_bytes_per_node'])} by {_gib(f['overflow_bytes'])}")
        elif f["kind"] == "step_time":
            typer.echo(f"  too slow: step {seconds(f['step_s'])} s > --max-step-time {seconds(f['max_step_s'])} s")
        elif f["kind"] == "mfu":
            typer.echo(f"  too little MFU: {pct(f['mfu'])} < --min-mfu {pct(f['min_mfu'])}")
    sugg = res["suggestions"]
    if not sugg:
        typer.echo("  no single change, nor any pair of changes, among stronger sharding, recompute, a smaller "
                   "micro-batch, more TP (up to the NVLink domain), more CP (where the stack runs it), more PP, more EP "
                   "(mixture-of-experts models) and TP overlap off makes it pass"
                   + ("; more GPUs, GPUs with more memory, or three or more of these changes together might"
                      if any(f["kind"] == "memory" for f in res["failures"]) else "")
                   # a time gate: the ladders only add memory-saving (audit5: `--min-mfu 0.5` on TP 8 was told nothing
                   # helps, while fit's TP 1 FSDP plan on the same 8 GPUs runs 63.6%)
                   + ("; the changes tried save memory and never lower TP or PP: `planner fit` with the job's model, "
                      "GPUs and batch searches every plan against the gate's figure"
                      if any(f["kind"] in ("step_time", "mfu") for f in res["failures"]) else ""))
        return
    by = "predicted step time" if all(s["step_s"] is not None for s in sugg) else "the documented cost order"
    typer.echo(f"  changes that pass, each checked with the same model as `planner explain` (ranked by {by}):")
    for i, s in enumerate(sugg[:SHOWN_SUGGESTIONS], 1):
        extra = f", step {seconds(s['step_s'])} s" if s["step_s"] is not None else ""
        extra += f", MFU {pct(s['mfu'])}" if s["mfu"] is not None else ""
        typer.echo(f"    {i}. {s['description']}: {_gib(s['total_bytes'])} ({100 * s['fraction_of_hbm']:.0f}% of HBM){extra}")
    if len(sugg) > SHOWN_SUGGESTIONS:
        typer.echo(f"    ... and {len(sugg) - SHOWN_SUGGESTIONS} more (--format json lists all)")


def csv_row(res: dict) -> dict:
    row = dict(res)
    row["suggestions"] = "; ".join(s["description"] for s in res.get("suggestions", []))
    row["failures"] = "; ".join(f["kind"] for f in res.get("failures", []))
    row["warnings"] = "; ".join(res.get("warnings", []))
    if "trainer_config" in res:  # each list as its lines, once each (an entry per setting shares its line)
        tc = res["trainer_config"]
        row["trainer_config"] = {k: "; ".join(dict.fromkeys(e["line"] for e in v)) if isinstance(v, list) else v
                                 for k, v in tc.items()}
    return row


def emit_check(results: list[dict], fmt: Format) -> None:
    """After the jobs: every result in a machine format, or (table, several jobs) the count
    of verdicts; the table's per-job lines were printed by print_job as each job finished."""
    if fmt == Format.csv:
        emit([csv_row(r) for r in results], fmt, lambda: None)
    elif fmt != Format.table:
        emit(results, fmt, lambda: None)
    else:
        if len(results) > 1:
            n = {v: sum(r["verdict"] == v for r in results) for v in ("pass", "fail", "error")}
            typer.echo(f"{len(results)} jobs: {n['pass']} pass, {n['fail']} fail, {n['error']} invalid")
        timed = [r for r in results if r.get("verdict") != "error" and mfu(r) is not None]
        if timed:
            typer.echo(mfu_convention((timed[0].get("flops") or {}).get("attention_counted")))
