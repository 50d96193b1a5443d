"""The `planner` command line: typer commands only (parse, call the library, render)."""

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


# --help lists the commands in the order a newcomer meets them
_ORDER = ["fit", "explain", "check", "budget", "validate", "collective", "pipeline", "calibrate", "models",
          "hardware", "schema"]


def _rank(cmd) -> int:
    name = cmd.name or (cmd.callback.__name__ if cmd.callback else "")
    return _ORDER.index(name) if name in _ORDER else len(_ORDER)


app.registered_commands.sort(key=_rank)
app.registered_groups.sort(key=lambda g: _rank(g.typer_instance.info) if g.typer_instance else len(_ORDER))


def main() -> None:  # pragma: no cover - thin shim for `python -m planner`
    app()
