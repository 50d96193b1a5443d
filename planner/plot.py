"""Every picture the planner draws (`--plot FILE`): a simulated pipeline schedule as a
timeline (`planner pipeline`), the memory breakdown of plans as stacked bars against the
usable HBM (`explain`, `fit`), the feasible plans of a fit as memory against step time
with the Pareto front (`fit`), the best plan per GPU count (`fit --gpus A,B,...`), and
days, cost and goodput against GPU count (`budget --sweep-gpus`).

Uses matplotlib's Agg renderer through a bare `Figure` (no pyplot, no display, no global
state), so it works on a headless CI machine. Output format follows the file name:
.png (raster; 150 dpi for the timeline, 100 for the others), .svg or .pdf (vector).
Inputs are the commands' JSON (SI: bytes, seconds); the axes carry GiB, s and days.

Colours: forward passes blue, backward (or ZB-H1's input-gradient B) orange, ZB-H1's
weight-gradient W green, idle time blank; each bar is labelled with its micro-batch number.
With v > 1 model chunks, each chunk has its own shade (later chunks darker) and hatching,
shown in the legend.
"""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .errors import PlannerError
from . import files
from .pipeline import Simulation

_COLOURS = {"F": "#4C78A8", "B": "#F58518", "W": "#54A24B"}  # Tableau 10 blue, orange, green
_NAMES = {"F": "forward", "B": "backward", "W": "weight gradient (W)"}
_FORMATS = (".png", ".svg", ".pdf")
GiB = 2.0**30
DPI = 100  # the memory / fit / sweep figures (the timeline keeps 150)
# memory terms (planner/memory.py MemoryTerms keys, explain JSON memory.terms) in stacking
# order, with their colours (Tableau 10)
_TERM_COLOURS = {
    "weights": "#4C78A8", "gradients": "#72B7B2", "master_weights": "#54A24B", "adam": "#EECA3B",
    "layer_activations": "#F58518", "output_activations": "#E45756", "recompute_buffer": "#FF9DA6",
    # FSDP's and ZeRO-3's buffers (memory.FSDP_TERMS) in shades of Tableau's purple
    "fsdp_gathered_units": "#B279A2", "fsdp_unit_grads": "#C994BA", "mfsdp_double_buffer": "#6B4562", "zero3_working_set": "#B279A2",
    "zero3_unreduced_grads": "#C994BA", "zero3_bucket_copy": "#6B4562", "zero3_reuse_kept": "#E8D2E2", "zero3_tied_output": "#C994BA",
    "zero3_ipg_bucket": "#8E5C82", "zero3_persistent": "#D9B5CF", "zero3_step_grads": "#6B4562",
    "fsdp_unsharded_ends": "#8E5C82", "fsdp_unsharded_stage": "#D9B5CF", "fsdp_accumulated_grads": "#6B4562",
    "fsdp_end_of_backward": "#E8D2E2", "allocator_slack": "#9D755D", "tp_overlap_buffers": "#79706E", "ep_buffers": "#D4A6C8",
    "nvls_buffers": "#A0CBE8",
    "reserve": "#BAB0AC",
}
_HATCHES = (None, "//", "..", "xx", "\\\\", "++")  # model chunk 0, 1, 2, ...


def _shade(colour: str, chunk: int, v: int) -> tuple[float, float, float]:
    """Chunk 0 in the base colour, later chunks progressively darker."""
    r, g, b = to_rgb(colour)
    k = 1.0 - 0.45 * chunk / max(v - 1, 1)
    return (r * k, g * k, b * k)


def timeline_figure(sim: Simulation) -> Figure:
    """A matplotlib Figure of the schedule; `plot_timeline` saves it."""
    p, v = sim.stages, sim.vpp
    step = float(sim.step)
    per_stage = len(sim.passes) / p
    width = min(18.0, max(7.0, 3.0 + 0.25 * per_stage))  # inches: about a quarter inch a pass
    fig = Figure(figsize=(width, 0.55 * p + 1.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    min_label = step / 60.0  # label bars wide enough to hold text
    for x in sim.passes:
        start, dur = float(x.start), float(x.end - x.start)
        y = p - 1 - x.stage  # stage 0 on top
        ax.broken_barh(
            [(start, dur)], (y + 0.1, 0.8),
            facecolors=_shade(_COLOURS[x.kind], x.chunk, v),
            edgecolors="white", linewidth=0.6,
            hatch=_HATCHES[x.chunk % len(_HATCHES)] if v > 1 else None,
        )
        if dur >= min_label:
            ax.text(start + dur / 2, y + 0.5, str(x.microbatch), ha="center", va="center", fontsize=7, color="white")
    ax.set_xlim(0, step)
    ax.set_ylim(0, p)
    ax.set_yticks([p - 1 - s + 0.5 for s in range(p)])
    ax.set_yticklabels([f"stage {s}" for s in range(p)])
    ax.set_xlabel("time (units of the forward/backward durations given)")
    ax.grid(axis="x", linestyle=":", linewidth=0.5, alpha=0.6)
    ax.set_axisbelow(True)
    busy = max(sim.busy)
    ax.set_title(
        f"{sim.title}: p={p}, m={sim.microbatches} -- step {float(sim.step):g} units, "
        f"busy {float(busy):g}, idle {1 - float(busy) / step:.0%}, "
        f"peak stored {', '.join(f'{float(x):g}' for x in sim.peak_stored)}",
        fontsize=9,
    )
    kinds = [k for k in ("F", "B", "W") if any(x.kind == k for x in sim.passes)]
    handles = [Patch(facecolor=_COLOURS[k], label=_NAMES[k] if not (k == "B" and "W" in kinds) else "input gradient (B)")
               for k in kinds]
    if v > 1:
        handles += [Patch(facecolor=_shade("#999999", c, v), hatch=_HATCHES[c % len(_HATCHES)], label=f"chunk {c}")
                    for c in range(v)]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def check_plot_path(path) -> Path:
    """A --plot path whose suffix names a format and whose folder exists (checked before a
    long search, so that a typo fails at once)."""
    path = files.output_path(path, "--plot")
    if path.suffix.lower() not in _FORMATS:
        raise PlannerError(
            f"--plot {str(path)!r}: cannot tell the image format from the suffix {path.suffix or '(none)'!r}",
            "name the file .png, .svg or .pdf",
        )
    return path


def save_figure(fig: Figure, path, dpi: int = DPI) -> Path:
    """Save a figure to `path` (.png, .svg or .pdf) and return the path."""
    path = check_plot_path(path)
    buf = io.BytesIO()  # drawn in memory first: matplotlib's own writers leave half a file (and a PDF an
    fig.savefig(buf, format=path.suffix.lower()[1:], dpi=dpi)  # AttributeError) when the disk write fails
    return files.write_atomic(path, buf.getvalue(), what="--plot", hint="choose a writable path with free space")


def plot_timeline(sim: Simulation, path) -> Path:
    """Save the schedule's timeline to `path` (.png, .svg or .pdf) and return the path."""
    check_plot_path(path)
    return save_figure(timeline_figure(sim), path, dpi=150)


# ------------------------------------------------------------------ plans: memory, fit, sweeps
def _new(width: float, height: float, panels: int = 1):
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    return fig, axes


def _row_label(p: dict) -> str:
    """'TP8 PP4 DP16 fsdp' (the factors > 1, the sharding), for a bar or a point."""
    parts = [f"{k.upper()}{p[k]}" for k in ("tp", "cp", "pp", "dp") if p[k] > 1]
    if p.get("vpp", 1) > 1:
        parts.append(f"v{p['vpp']}")
    rec = {"none": "", "selective": " sel", "full": " full"}[p["recompute"]]
    return " ".join(parts or ["1 GPU"]) + f" {p['sharding']}" + rec


def _memory_axes(ax, rows: list[dict], labels: list[str]) -> None:
    """Stacked bars of each row's memory terms (GiB) with the usable-HBM and HBM lines."""
    from .render.common import TERM_LABELS

    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for term, colour in _TERM_COLOURS.items():
        vals = [r["memory"]["terms"].get(term, 0.0) / GiB for r in rows]
        if not any(vals):
            continue
        ax.bar(x, vals, bottom=bottom, color=colour, label=TERM_LABELS[term], width=0.6, edgecolor="white", linewidth=0.4)
        bottom = [b + v for b, v in zip(bottom, vals)]
    usable = rows[0]["memory"]["usable_bytes"] / GiB
    cap = rows[0]["memory"]["capacity_bytes"] / GiB
    ax.axhline(usable, color="black", linestyle="--", linewidth=1.2, label=f"usable HBM {usable:.1f} GiB")
    ax.axhline(cap, color="grey", linestyle=":", linewidth=1.0, label=f"HBM {cap:.1f} GiB")
    if len(rows) == 1:
        ax.set_xlim(-1.5, 1.5)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30 if len(rows) > 2 else 0, ha="right" if len(rows) > 2 else "center", fontsize=8)
    ax.set_ylabel("GiB per GPU (heaviest stage)")
    ax.set_ylim(0, max(max(bottom), cap) * 1.12)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("memory per GPU", fontsize=10)


def memory_figure(rows: list[dict], title: str = "") -> Figure:
    """`explain --plot` (one row) / the memory panel of `fit --plot`: stacked memory terms."""
    fig, (ax,) = _new(4.0 + 0.9 * len(rows) + 2.6, 4.2)
    labels = [f"#{i} {_row_label(r['plan'])}" if len(rows) > 1 else _row_label(r["plan"]) for i, r in enumerate(rows, 1)]
    _memory_axes(ax, rows, labels)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def pareto_front(memory, step) -> list[int]:
    """Indices of the plans no other plan beats on both memory and step time (lower is
    better), in increasing memory."""
    order = sorted(range(len(memory)), key=lambda i: (memory[i], step[i]))
    front, best = [], float("inf")
    for i in order:
        if step[i] < best:
            front.append(i)
            best = step[i]
    return front


def _scatter_axes(ax, memory, step, usable: float, top: list[dict]) -> None:
    m = [v / GiB for v in memory]
    ax.scatter(m, step, s=6, color="#9ecae1", alpha=0.6, linewidths=0, label=f"{len(m):,} feasible plans")
    front = pareto_front(m, step)
    ax.plot([m[i] for i in front], [step[i] for i in front], color="#E45756", marker="o", markersize=3, linewidth=1.2,
            label=f"Pareto front ({len(front)})")
    # a batch ramp (search.step_times): the search's step is the run's time per last-batch step, its
    # memory the peak over the phases; the top rows are placed on the same axes
    ramp = bool(top) and "training_days_ramp" in top[0]["throughput"]
    for i, r in enumerate(top, 1):
        th = r["throughput"]
        x = (th["memory_peak_bytes_ramp"] if ramp else r["memory"]["total_bytes"]) / GiB
        y = th["training_days_ramp"] * 86400.0 / th["training_steps"] if ramp else r["time"]["step_s"]
        ax.scatter([x], [y], s=28, color="#4C78A8", zorder=3)
        ax.annotate(f"#{i}", (x, y), textcoords="offset points", xytext=(5, 2 + 9 * (i - 1)), fontsize=7,
                    arrowprops=dict(arrowstyle="-", color="grey", linewidth=0.5) if i > 1 else None)
    ax.axvline(usable / GiB, color="black", linestyle="--", linewidth=1.0, label="usable HBM")
    ax.set_xlabel("GiB per GPU")
    ax.set_yscale("log")  # slow outliers (deep pipelines, tiny micro-batches) span decades
    ax.set_ylabel("run time per last-batch step (s, log)" if ramp else "step time (s, log scale)")
    ax.set_title("feasible plans: memory (peak over the phases) vs run time" if ramp else "feasible plans: memory vs step time",
                 fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    ax.grid(linestyle=":", linewidth=0.5, alpha=0.6)


def fit_figure(memory, step, top: list[dict], title: str = "") -> Figure:
    """`fit --plot` on one GPU count: the feasible plans (memory against step time, the
    Pareto front, the top rows labelled #1, #2, ...) beside the top rows' memory bars."""
    fig, (a1, a2) = _new(13.0, 4.8, 2)
    _scatter_axes(a1, memory, step, top[0]["memory"]["usable_bytes"], top)
    _memory_axes(a2, top, [f"#{i} {_row_label(r['plan'])}" for i, r in enumerate(top, 1)])
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def scaling_figure(best: list[dict], title: str = "") -> Figure:
    """`fit --gpus A,B,... --plot`: the best plan per GPU count, MFU, step time and (with
    --tokens) training days against the count, each point named by its plan; and their
    memory bars."""
    days = all(r["throughput"].get("training_days") is not None for r in best)
    panels = 4 if days else 3
    fig, axes = _new(4.2 * panels + 1.5, 4.6, panels)
    g = [r["plan"]["gpus"] for r in best]
    series = [("MFU (%)", [100 * r["throughput"]["mfu"] for r in best]), ("step time (s)", [r["time"]["step_s"] for r in best])]
    if days:
        series.append(("training days", [r["throughput"]["training_days"] for r in best]))
    for ax, (name, ys) in zip(axes, series):
        ax.plot(g, ys, marker="o", color="#4C78A8")
        for x, y, r in zip(g, ys, best):
            ax.annotate(_row_label(r["plan"]), (x, y), textcoords="offset points", xytext=(3, 4), fontsize=6.5)
        ax.set_xscale("log", base=2)
        ax.set_xticks(g)
        ax.set_xticklabels([f"{x:,}" for x in g], fontsize=8)
        ax.set_xlabel("GPUs")
        ax.set_title(name, fontsize=10)
        ax.grid(linestyle=":", linewidth=0.5, alpha=0.6)
    _memory_axes(axes[-1], best, [f"{r['plan']['gpus']:,}" for r in best])
    axes[-1].set_xlabel("GPUs (best plan)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def sweep_figure(rows: list[dict], title: str = "") -> Figure:
    """`budget --sweep-gpus --plot`: training days (ideal and with failures), cost (with
    --price-per-gpu-hour; else GPU-hours) and goodput against GPU count."""
    fig, axes = _new(13.0, 4.2, 3)
    g = [r["gpus"] for r in rows]
    ax = axes[0]
    ax.plot(g, [r["days"] for r in rows], marker="o", color="#4C78A8", label="no failures")
    ax.plot(g, [r["effective_days"] for r in rows], marker="s", color="#E45756", label="with failures, checkpoints")
    ax.set_title("training days", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    priced = all(r.get("cost") is not None for r in rows)
    ax = axes[1]
    key, eff, name = ("cost", "effective_cost", f"cost, {rows[0].get('currency')} (--price-per-gpu-hour x GPU-hours)") if priced else ("gpu_hours", "effective_gpu_hours", "GPU-hours")
    ax.plot(g, [r[key] for r in rows], marker="o", color="#4C78A8", label="no failures")
    ax.plot(g, [r[eff] for r in rows], marker="s", color="#E45756", label="with failures, checkpoints")
    ax.set_title(name, fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    ax = axes[2]
    ax.plot(g, [100 * r["goodput"] for r in rows], marker="o", color="#54A24B")
    ax.set_title("goodput (%)", fontsize=10)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(g)
        ax.set_xticklabels([f"{x:,}" for x in g], fontsize=8)
        ax.set_xlabel("GPUs")
        ax.grid(linestyle=":", linewidth=0.5, alpha=0.6)
    for r, x in zip(rows, g):
        if not r["fits"]:
            axes[0].annotate("does not fit", (x, r["days"]), textcoords="offset points", xytext=(3, -10), fontsize=7, color="#E45756")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
