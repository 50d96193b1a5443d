"""`planner pipeline`: simulate a pipeline schedule and print (or draw) its timeline.

The table format is plain text through typer.echo, character for character the seed's section 5.3
notation (digits forward, letters backward, dots idle; see planner/pipeline.py); --format
json|yaml|csv print the simulation's report (pipeline.simulation_report) through
render/pipeline.py, the one renderer every command's machine formats go through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import Format, FormatOption, cli_errors


def _stages(pp: Optional[int], stages: Optional[int]) -> int:
    """--pp, or its old spelling --stages / -p (hidden; the one vocabulary is --pp)."""
    from ..errors import PlannerError

    if pp is not None and stages is not None and pp != stages:
        raise PlannerError(f"--pp {pp} and --stages {stages} disagree", "give --pp only (--stages is its old spelling)")
    if pp is None and stages is None:
        raise PlannerError("missing option --pp (pipeline stages)", "e.g. planner pipeline --pp 4 --microbatches 8")
    return pp if pp is not None else stages


def register(app: typer.Typer) -> None:
    @app.command("pipeline")
    @cli_errors
    def pipeline(
        pp: Optional[int] = typer.Option(None, "--pp", help="pipeline stages p (as --pp in fit, explain and the job file)"),
        stages: Optional[int] = typer.Option(None, "--stages", "-p", hidden=True, help="the old spelling of --pp"),
        microbatches: int = typer.Option(..., "--microbatches", help="micro-batches per step m"),
        schedule: str = typer.Option("1f1b", "--schedule", "-s", help="gpipe | 1f1b | interleaved | zb-h1"),
        vpp: int = typer.Option(1, "--vpp", "-v", help="model chunks per stage v (interleaved only)"),
        tf: float = typer.Option(1.0, "--tf", help="forward time of one micro-batch through a whole stage"),
        tb: float = typer.Option(2.0, "--tb", help="whole backward time (B + W) of one micro-batch through a stage"),
        tw: Optional[float] = typer.Option(
            None, "--tw", help="zb-h1 only: the weight-gradient part W of --tb (default: half of --tb)"
        ),
        plot: Optional[Path] = typer.Option(None, "--plot", help="also draw the timeline to FILE.png or FILE.svg"),
        closed_form: bool = typer.Option(
            False, "--closed-form", help="also print the cost model's closed-form bubble and peaks next to the simulation"
        ),
        fmt: Format = FormatOption,
    ) -> None:
        """Simulate a pipeline schedule: text timeline, step time, idle time and peak stored
        micro-batches per stage (digits forward, letters backward, dots idle)."""
        from ..pipeline import closed_form_text, simulate, simulation_report, timeline_text
        from ..render.pipeline import emit_pipeline

        sim = simulate(_stages(pp, stages), microbatches, schedule, vpp=vpp, t_f=tf, t_b=tb, t_w=tw)
        text = timeline_text(sim) if fmt == Format.table else None
        if plot is not None:
            from ..plot import plot_timeline

            plot_timeline(sim, plot)

        def table() -> None:
            typer.echo(text)
            if closed_form:
                typer.echo(closed_form_text(sim))

        emit_pipeline(simulation_report(sim, closed_form), fmt, table)
        if plot is not None:
            typer.echo(f"wrote {plot}", err=True)
