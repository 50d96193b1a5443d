"""`planner export --format torchtitan|megatron|deepspeed`: a plan (explain's options, a job
file or trainer config, or a saved fit row: --from-fit FILE --row N) written as the
trainer's own config (planner/trainers/export.py). What the format cannot express goes to
stderr; the file goes to stdout or --output."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .budget import _JOB_OPTION_NAMES, _plan_parameters, _with_parameters
from .common import cli_errors, warn
from .core import job_from_cli, job_options
from ..errors import PlannerError
from ..explain import evaluate, to_json
from ..plan import resolve
from ..trainers import FORMATS


def resolved_plan(job, where: str = "") -> dict:
    """explain's `plan` (every resolved setting) for a job."""
    settings, plan, _ = resolve(job, where)
    return to_json(settings, plan, evaluate(settings, plan))["plan"]


def write_export(plan: dict, target: str, output: Optional[Path]) -> None:
    """Export `plan` as `target`, notes on stderr, the text to `output` or stdout."""
    from ..trainers.export import export_plan

    text, notes = export_plan(plan, target)
    for n in notes:
        warn(f"export {target}: {n}")
    if output is None:
        typer.echo(text, nl=False)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as e:
            raise PlannerError(f"{output}: cannot write ({e.strerror})", "give a writable --output path") from None


def register(app: typer.Typer) -> None:
    plan_params = _plan_parameters(app)

    def export(
        target: str = typer.Option(..., "--format", "-f", help=f"the trainer's config format: {'|'.join(FORMATS)}"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the file here (default: stdout)"),
        **plan_kw,
    ):
        """Write a plan as a torchtitan TOML, a Megatron-LM launch script or a DeepSpeed JSON;
        what the format cannot express is reported on stderr, never dropped."""
        if target not in FORMATS:
            raise PlannerError(f"--format {target!r} is not a trainer format", f"valid: {', '.join(FORMATS)}")
        job_file = plan_kw.pop("job_file", None)
        from_fit, row = plan_kw.pop("from_fit", None), plan_kw.pop("row", 1)
        config_format = plan_kw.pop("config_format", None)
        job, where = job_from_cli(job_file, job_options(**{k: plan_kw.get(k) for k in _JOB_OPTION_NAMES}), from_fit, row,
                                  config_format)
        write_export(resolved_plan(job, where), target, output)

    app.command("export")(cli_errors(_with_parameters(export, plan_params)))
