"""The `planner` command line: typer commands only (parse, call the library, render)."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="planner",
    help="Analytic capacity planner and auto-parallelism search for LLM training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Topic modules register their commands here.
from . import cli_core  # noqa: E402

cli_core.register(app)

for _name in ("cli_collective", "cli_pipeline", "cli_calibrate", "cli_validate", "cli_check", "cli_fit", "cli_budget"):
    try:
        _mod = __import__(f"planner.{_name}", fromlist=["register"])
    except ModuleNotFoundError as _e:  # a topic module not written yet
        if _e.name != f"planner.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:  # pragma: no cover - thin shim for `python -m planner`
    app()
