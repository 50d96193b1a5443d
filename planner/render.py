"""The one place that turns numbers into what a person or a machine reads.

Tables (rich) go to stdout for people; json, yaml and csv for machines. Human units
(GB, GiB, TFLOP/s, days) appear only here.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Callable, Iterable

import yaml
from rich.table import Table

from .cli_common import Format, out

GB, GiB = 1e9, 2.0**30


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def flatten(d: dict, prefix: str = "") -> dict:
    rows = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows.update(flatten(v, key + "."))
        else:
            rows[key] = v
    return rows


def to_csv(records: Iterable[dict]) -> str:
    flat = [flatten(r) for r in records]
    cols: list[str] = []
    for r in flat:
        cols += [c for c in r if c not in cols]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in flat:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
    return buf.getvalue()


def emit(data: Any, fmt: Format, table: Callable[[], None]) -> None:
    """Print `data` in a machine format, or call `table()` for people."""
    if fmt == Format.json:
        print(json.dumps(_clean(data), indent=2))
    elif fmt == Format.yaml:
        print(yaml.safe_dump(_clean(data), sort_keys=False), end="")
    elif fmt == Format.csv:
        print(to_csv(data if isinstance(data, list) else [data]), end="")
    else:
        table()


def gb(x: float, digits: int = 2) -> str:
    return f"{x / GB:,.{digits}f}"


def human_count(n: float) -> str:
    for unit, f in (("trillion", 1e12), ("billion", 1e9), ("million", 1e6)):
        if abs(n) >= f:
            return f"{n / f:,.2f} {unit}"
    return f"{n:,.0f}"


def _bpp(d: dict) -> str:
    return d if isinstance(d, str) else "custom"


def explain_table(res: dict, warnings: list[str]) -> None:
    p, m, fl, prm = res["plan"], res["memory"], res["flops"], res["params"]
    mesh = f"TP {p['tp']} x CP {p['cp']} x PP {p['pp']} x DP {p['dp']}" + (f" (vpp {p['vpp']})" if p["vpp"] > 1 else "")
    shard = p["sharding"] + (f" (shard group {p['shard_group']})" if p["shard_group"] else "")
    out.print(f"[bold]{p['model']}[/bold] on {p['gpus']:,} x {p['hardware']}: {mesh}")
    out.print(
        f"  {shard}, micro-batch {p['micro_batch']} x {p['microbatches_per_step']} per step, global batch "
        f"{p['global_batch']:,} x {p['seq_len']:,} tokens, recompute {p['recompute']}, "
        f"SP {'on' if p['sequence_parallel'] else 'off'}, schedule {p['schedule']}, {p['precision']}"
    )
    out.print(f"  parameters: {human_count(prm['total'])} ({prm['total']:,})")
    t = m["terms"]
    tab = Table(title=f"Memory per GPU (heaviest pipeline stage: {m['heaviest_stage']})", title_justify="left")
    tab.add_column("component")
    tab.add_column("GB", justify="right")
    tab.add_column("GiB", justify="right")
    rows = [
        ("weights", t["weights"]),
        ("gradients", t["gradients"]),
        ("fp32 master weights", t["master_weights"]),
        ("Adam m and v", t["adam"]),
        ("[bold]model states[/bold]", t["weights"] + t["gradients"] + t["master_weights"] + t["adam"]),
        ("layer activations", t["layer_activations"]),
        ("output layer (logits + loss)", t["output_activations"]),
        ("recompute buffer (one layer)", t["recompute_buffer"]),
        ("FSDP all-gather buffers", t["fsdp_buffers"]),
        ("CUDA context + NCCL reserve", t["reserve"]),
    ]
    for name, v in rows:
        tab.add_row(name, gb(v), f"{v / GiB:,.2f}")
    tab.add_row("[bold]total[/bold]", f"[bold]{gb(m['total_bytes'])}[/bold]", f"{m['total_bytes'] / GiB:,.2f}")
    tab.add_row(f"usable (HBM x {1 - m['headroom']:.2f})", gb(m["usable_bytes"]), f"{m['usable_bytes'] / GiB:,.2f}")
    out.print(tab)
    pct = 100 * m["total_bytes"] / m["capacity_bytes"]
    verdict = "[green]fits[/green]" if m["fits"] else "[red]does not fit[/red]"
    out.print(f"  {verdict}: {pct:.1f}% of {gb(m['capacity_bytes'], 0)} GB HBM")
    out.print(
        f"  FLOPs per token: 6N {fl['flops_per_token_6n']:.3e} + attention ({fl['attention_counted']}) "
        f"{fl['attention_flops_per_token']:.3e} = model {fl['model_flops_per_token']:.3e}; "
        f"hardware (with recompute) {fl['hardware_flops_per_token']:.3e}"
    )
    if "total_training_flops" in fl:
        out.print(f"  training compute for {fl['training_tokens']:.3g} tokens: {fl['total_training_flops']:.3e} FLOPs (6N)")
    if "time" in res:
        time_table(res)
    for w in warnings:
        from .cli_common import warn

        warn(w)


def list_table(title: str, rows: list[dict], cols: list[tuple[str, str]]) -> None:
    tab = Table(title=title, title_justify="left")
    for _, header in cols:
        tab.add_column(header)
    for r in rows:
        tab.add_row(*[("" if r.get(k) is None else (f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]))) for k, _ in cols])
    out.print(tab)


TIME_ROWS = [
    ("compute (GEMMs, attention, memory-bound ops, recompute)", "compute_s"),
    ("TP communication (exposed)", "tp_comm_s"),
    ("CP communication (exposed)", "cp_comm_s"),
    ("PP send/recv", "pp_comm_s"),
    ("DP / sharding communication (exposed)", "dp_comm_exposed_s"),
    ("pipeline bubble", "bubble_s"),
    ("optimizer step", "optimizer_s"),
]


def time_table(res: dict) -> None:
    """The step-time breakdown and throughput of explain's JSON."""
    t, thr = res["time"], res["throughput"]
    step = t["step_s"]
    tab = Table(title="Step time per GPU (critical pipeline stage)", title_justify="left")
    tab.add_column("term")
    tab.add_column("seconds", justify="right")
    tab.add_column("% of step", justify="right")
    for name, key in TIME_ROWS:
        tab.add_row(name, f"{t[key]:,.4g}", f"{100 * t[key] / step:.1f}%")
    tab.add_row("[bold]step[/bold]", f"[bold]{step:,.4g}[/bold]", "100%")
    out.print(tab)
    hidden = t["dp_comm_s"] - t["dp_comm_exposed_s"]
    if t["dp_comm_s"] > 0:
        out.print(f"  DP traffic {t['dp_comm_s']:,.4g} s per step, {hidden:,.4g} s of it hidden behind compute")
    out.print(
        f"  throughput: {thr['tokens_per_s']:,.0f} tokens/s ({thr['tokens_per_s_per_gpu']:,.0f} per GPU), "
        f"{thr['tflops_per_gpu']:,.0f} TFLOP/s per GPU; MFU {100 * thr['mfu']:.1f}% "
        f"(6N + attention, PaLM), {100 * thr['mfu_6n']:.1f}% (6N); HFU {100 * thr['hfu']:.1f}% "
        f"of {thr['peak_tflops']:,.0f} TFLOP/s"
    )
    if "training_days" in thr:
        out.print(f"  training: {thr['training_steps']:,.0f} steps, {thr['training_days']:,.1f} days, "
                  f"{thr['gpu_hours']:,.0f} GPU-hours (failure-free; see `planner budget`)")
    cal = res.get("calibration")
    if cal:
        used = ", ".join(cal["used"]) or "none of its entries (no plan collective matched)"
        out.print(f"  calibration {cal['profile']}: measured figures used for {used}; defaults elsewhere")
