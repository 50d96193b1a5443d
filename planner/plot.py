"""Draw a simulated pipeline schedule as a timeline (one row of bars per stage).

Uses matplotlib's Agg renderer through a bare `Figure` (no pyplot, no display, no global
state), so it works on a headless CI machine. Output format follows the file name:
.png (raster, 150 dpi) or .svg (vector).

Colours: forward passes blue, backward (or ZB-H1's input-gradient B) orange, ZB-H1's
weight-gradient W green, idle time blank; each bar is labelled with its micro-batch number.
With v > 1 model chunks, each chunk has its own shade (later chunks darker) and hatching,
shown in the legend.
"""

from __future__ import annotations

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
_FORMATS = (".png", ".svg")
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


def plot_timeline(sim: Simulation, path) -> Path:
    """Save the schedule's timeline to `path` (.png or .svg) and return the path."""
    path = Path(path)
    if path.suffix.lower() not in _FORMATS:
        raise PlannerError(
            f"--plot {str(path)!r}: cannot tell the image format from the suffix {path.suffix or '(none)'!r}",
            "name the file .png or .svg",
        )
    if not files.is_dir(path.parent):
        raise PlannerError(f"--plot {str(path)!r}: folder {str(path.parent)!r} does not exist", "create it first, or write elsewhere")
    fig = timeline_figure(sim)
    try:
        fig.savefig(path, dpi=150)
    except OSError as e:
        raise PlannerError(f"--plot {str(path)!r}: cannot write the file ({e.strerror or e})", "choose a writable path") from None
    return path
