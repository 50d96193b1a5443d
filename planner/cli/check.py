"""`planner check JOB.yaml...` (a CI gate: exit 0 all fit, 1 any does not, 2 any invalid)
and `planner schema` (the JSON Schema of the job file, for editors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .common import Format, FormatOption, cli_errors, report_error, warn
from .core import job_option_names, job_options, load_job, plan_parameters, with_parameters
from ..errors import PlannerError
from ..render.common import check_finite

# planner/check.py (pydantic, the cost models) and its renderer are imported where a command runs, not here:
# `planner check --help` prints the options without them (import_runtime; issue 24, start-up).


def import_runtime() -> None:
    """The modules `planner check` and `planner schema` run on, imported at start-up by planner.cli.app_for unless
    the command line asks only for --help (planner/__main__.py freezes what start-up made)."""
    from .. import check  # noqa: F401
    from ..render import check as _check  # noqa: F401
from ..trainers.report import with_config
from ..units import parse_seconds


def register(app: typer.Typer) -> None:
    plan_params = [p for p in plan_parameters(app) if p.name not in ("job_file", "from_fit", "row")]

    def check(
        job_files: list[Path] = typer.Argument(..., help="job YAML files (the fields `planner explain` reads; see `planner schema`), or trainer configs: torchtitan .toml, Megatron launch script / argument file, DeepSpeed .json"),
        max_step_time: Optional[str] = typer.Option(None, "--max-step-time", help="also fail a job whose predicted step time exceeds this (e.g. 12s)"),
        min_mfu: Optional[float] = typer.Option(None, "--min-mfu", help="also fail a job whose predicted MFU is below this fraction (e.g. 0.4)"),
        fmt: Format = FormatOption,
        **plan_kw,
    ):
        """Check that job files fit in GPU memory (and optional time gates); for a job that
        does not, name the overflow and the cheapest changes that make it fit, each checked.
        Every plan option `planner explain` takes applies to every file and overrides what the
        file says (a note names each value it replaces). Exit 0 when every job passes, 1 when
        any fails, 2 when any input is invalid."""
        from ..check import Gates, TimeModelUnavailable, check_job, worst_exit
        from ..render.check import emit_check, print_job

        config_format = plan_kw.pop("config_format", None)
        headroom, calibration = plan_kw.get("headroom"), plan_kw.get("calibration")
        if headroom is not None and not (0.0 <= headroom < 1.0):
            raise PlannerError(f"--headroom {headroom} is not a fraction in [0, 1)", "e.g. --headroom 0.1 keeps 10% of HBM free")
        gates = Gates(
            max_step_s=parse_seconds(max_step_time, "--max-step-time") if max_step_time is not None else None,
            min_mfu=min_mfu,
        )
        if calibration is not None:
            from ..profile import load_profile

            prof = load_profile(calibration)  # a bad profile is bad input (exit 2), once for all jobs
            slack = prof.run is not None and "allocator_slack" in prof.run.parameters
            if not gates.timed and not slack:
                warn("this calibration profile affects time only (no run-calibrated allocator_slack); "
                     "the memory check is the same with or without it")
        overrides = job_options(**{k: plan_kw.get(k) for k in job_option_names()})
        results: list[dict] = []
        codes: list[int] = []
        internal: list[BaseException] = []  # a planner bug on one file: the others' verdicts still print
        for path in job_files:
            try:
                read: list = []
                job, where = load_job(path, overrides, config_format, read)
                trainer, stated = (read[0].fmt, read[0].stated) if read else (None, None)
                res = with_config(check_job(job, where, gates, trainer, stated, overrides.get("sequence_parallel")),
                                  read[0] if read else None)
                check_finite(res)  # an overflowing job is invalid, not a verdict
            except TimeModelUnavailable:
                raise  # the same for every job: one message, exit 2
            except PlannerError as e:
                if not e.message.startswith(str(path)):
                    e = PlannerError(f"{path}: {e.message}", e.hint)
                report_error(e)
                results.append({"file": str(path), "verdict": "error", "error": e.message, "hint": e.hint})
                codes.append(2)
                continue
            except Exception as e:  # not bad input but a bug: reported after the other files' verdicts
                internal.append(e)
                results.append({"file": str(path), "verdict": "error", "error": f"internal error: {type(e).__name__}: "
                                f"{str(e)[:200]}", "hint": "a planner bug: please report it with this file"})
                codes.append(2)
                continue
            for w in res["warnings"]:
                warn(f"{path}: {w}")
            results.append({"file": str(path), **res})
            codes.append(1 if res["verdict"] == "fail" else 0)
            if fmt == Format.table:
                print_job(str(path), res)
        emit_check(results, fmt)
        if internal:
            raise internal[0]
        code = worst_exit(codes)
        if code:
            raise typer.Exit(code)

    app.command("check")(cli_errors(with_parameters(check, plan_params)))

    @app.command("schema")
    @cli_errors
    def schema(
        what: str = typer.Argument("job", help="job (default) | model | hardware"),
    ):
        """Print the JSON Schema of a job file (or a model or hardware file), for editors
        and CI validators."""
        from ..check import json_schema

        typer.echo(json.dumps(json_schema(what), indent=2))
