"""The `planner` command line: typer commands only (parse, call the library, render).

common.py holds the error wrapper and the --format option; each topic module (core.py:
explain, models, hardware, schema; fit.py, check.py, budget.py, export.py, validate.py,
collective.py, pipeline.py, calibrate.py) exposes `register(app)`.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="planner",
    help="Analytic capacity planner and auto-parallelism search for LLM training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # docstrings' hard line breaks join into paragraphs
)

# Topic modules register their commands here.
from . import budget, calibrate, check, collective, core, export, fit, pipeline, validate  # noqa: E402

for _mod in (core, collective, pipeline, calibrate, validate, check, fit, budget, export):
    _mod.register(app)


# --help lists the commands in the order a newcomer meets them
_ORDER = ["fit", "explain", "check", "budget", "export", "validate", "collective", "pipeline", "calibrate", "models",
          "hardware", "schema"]


def _rank(cmd) -> int:
    name = cmd.name or (cmd.callback.__name__ if cmd.callback else "")
    return _ORDER.index(name) if name in _ORDER else len(_ORDER)


app.registered_commands.sort(key=_rank)
app.registered_groups.sort(key=lambda g: _rank(g.typer_instance.info) if g.typer_instance else len(_ORDER))


def main() -> None:  # pragma: no cover - thin shim for `python -m planner`
    app()
