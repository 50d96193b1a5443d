"""`planner validate RUNS.yaml`: predicted vs published tokens/s per GPU (and memory) for a
file of published training runs. The library is planner/validate.py (inference rules and
statistics in its docstring); this module parses options, planner/render/validate.py renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import Format, FormatOption, cli_errors
from ..render.validate import emit_validate, render_table  # noqa: F401  render_table: tests call it here


def register(app: typer.Typer) -> None:
    @app.command("validate")
    @cli_errors
    def validate_cmd(
        runs: Optional[Path] = typer.Argument(
            None, help="YAML list of published runs (schema of tests/data/published_runs.yaml); default: the reference "
                       "file shipped with planner (the same records)"),
        group: Optional[list[str]] = typer.Option(None, "--group", help="only records of this source_group (repeatable)"),
        ids: Optional[str] = typer.Option(None, "--ids", help="only these record ids (comma-separated)"),
        complete: bool = typer.Option(
            False, "--complete",
            help="only the complete records: Megatron-LM 2021 Table 1, Megatron-LM README H100, MosaicML FSDP, "
                 "torchtitan 2024 groups with published tokens/s (or iteration time) and tp, pp, num_gpus",
        ),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="calibration profile from `planner calibrate`"),
        fmt: Format = FormatOption,
    ) -> None:
        """Compare predicted with published tokens/s per GPU (and memory per GPU) for each run
        record; print the relative errors, their count, median and 90th percentile, and every
        skipped record with its reason. Assumed fields are listed per record."""
        from ..catalog import reference_runs
        from ..validate import report

        shown = str(runs) if runs is not None else "(the shipped reference runs)"
        runs = runs if runs is not None else reference_runs()

        id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None
        data = report(runs, groups=group or None, ids=id_list, complete=complete,
                      calibration=str(calibration) if calibration else None)
        emit_validate(data, fmt, "planner validate" if shown.startswith("(") else f"planner validate {shown}")
