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
        if _memory_rows_file(runs):  # measured memory peaks (planner/memory_rows.py), detected by its top-level key
            _validate_memory_rows(runs, group, ids, complete, calibration, fmt)
            return

        id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None
        data = report(runs, groups=group or None, ids=id_list, complete=complete,
                      calibration=str(calibration) if calibration else None)
        emit_validate(data, fmt, "planner validate" if shown.startswith("(") else f"planner validate {shown}")


def _memory_rows_file(path: Path) -> bool:
    """A memory-rows file: a YAML mapping with a `memory_rows:` or `oracle_rows:` list."""
    from ..catalog import read_yaml
    from ..memory_rows import is_memory_rows

    return is_memory_rows(read_yaml(path))


def _validate_memory_rows(path: Path, group, ids, complete: bool, calibration, fmt: Format) -> None:
    from ..errors import PlannerError
    from ..memory_rows import report, select
    from ..render.memory_rows import emit_memory_rows

    if complete or calibration is not None:
        raise PlannerError(f"{path} is a memory-rows file: --complete and --calibration apply to published runs only",
                           "drop them; --group and --ids select memory rows")
    id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None
    data = select(report(path), group or None, id_list)
    emit_memory_rows(data, fmt, f"planner validate {path} (memory peaks)")
