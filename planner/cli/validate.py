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
        tier: Optional[list[str]] = typer.Option(
            None, "--tier", help="Megatron CI corpus: only rows of this memory trust tier A|B|C (repeatable)"),
        lenient: bool = typer.Option(
            False, "--lenient", help="skip (with the reason) a record that the schema refuses (a value outside a "
                                     "field's list), or whose published figure the hardware cannot produce, instead of "
                                     "stopping with an error"),
        fmt: Format = FormatOption,
    ) -> None:
        """Compare predicted with published tokens/s per GPU (and memory per GPU) for each run
        record; print the relative errors, their count, median and 90th percentile, and every
        skipped record with its reason. Assumed fields are listed per record. Given the
        Megatron-LM CI corpus (a JSON object with `rows`, tests/data/megatron_ci/corpus.json),
        compare the predicted peak allocated memory of the last pipeline stage with each row's
        measured one, per trust tier."""
        from ..catalog import reference_runs
        from ..validate import report

        shown = str(runs) if runs is not None else "(the shipped reference runs)"
        runs = runs if runs is not None else reference_runs()
        id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None
        parsed = None if _is_corpus_file(runs) else _parsed_yaml(runs)
        if parsed is not None and _memory_rows_file(parsed):
            # measured memory peaks (planner/memory_rows.py), detected by its top-level key
            _validate_memory_rows(runs, group, ids, complete, calibration, fmt)
            return
        if parsed is None:
            from ..errors import PlannerError
            from ..megatron_ci import TIERS, report_corpus
            from ..render.megatron_ci import emit_corpus

            given = [n for n, v in (("--group", group), ("--complete", complete), ("--calibration", calibration)) if v]
            if given:
                raise PlannerError(f"{', '.join(given)}: options of a runs file, not of the Megatron CI corpus",
                                   "use --tier A|B|C and --ids with a corpus")
            bad = sorted(set(tier or ()) - set(TIERS))
            if bad:
                raise PlannerError(f"--tier {bad[0]}: not a trust tier", "valid: A, B, C")
            emit_corpus(report_corpus(runs, tiers=tier or None, ids=id_list), fmt, f"planner validate {shown}")
            return
        if tier:
            from ..errors import PlannerError

            raise PlannerError("--tier applies to the Megatron CI corpus (a JSON file with `rows`)",
                               "give tests/data/megatron_ci/corpus.json, or drop --tier")
        data = report(runs, groups=group or None, ids=id_list, complete=complete,
                      calibration=str(calibration) if calibration else None, lenient=lenient, parsed=parsed)
        emit_validate(data, fmt, "planner validate" if shown.startswith("(") else f"planner validate {shown}")


def _is_corpus_file(path: Path) -> bool:
    """A JSON object (first non-blank character `{`): the Megatron CI corpus, which
    megatron_ci.load_corpus checks (a JSON object that is not one is an error naming the file);
    a runs file is a YAML list. A file that cannot be read is left to the runs reader, which
    names the problem."""
    from .. import files
    from ..errors import PlannerError

    if not files.is_file(path):
        return False
    try:
        return files.read_bytes(path).lstrip()[:1] == b"{"
    except PlannerError:
        return False


def _parsed_yaml(path: Path) -> list:
    """[the data of the YAML file `path`] (catalog.read_yaml: a problem is a PlannerError naming the file), parsed
    once for the command: _memory_rows_file reads its top-level key and a runs file's records are validated
    from it (validate.report's `parsed`). Before branch speed6 the file was parsed twice, once for each (the
    shipped 0.5 MB runs file: about a tenth of `planner validate`'s time)."""
    from ..catalog import read_yaml

    return [read_yaml(path)]


def _memory_rows_file(parsed: list) -> bool:
    """A memory-rows file: a YAML mapping with a `memory_rows:` or `oracle_rows:` list (parsed: _parsed_yaml's)."""
    from ..memory_rows import is_memory_rows

    return is_memory_rows(parsed[0])


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
