"""Pieces every CLI module shares: the error wrapper, consoles and the --format option.

Commands live in cli.py and in cli_<topic>.py modules that expose `register(app)`.
A command body only parses, calls the library and hands results to planner/render/.
"""

from __future__ import annotations

import functools
import sys
from enum import Enum

import typer
from rich.console import Console

from .errors import PlannerError

out = Console(soft_wrap=True)  # results: stdout
err = Console(stderr=True, soft_wrap=True)  # diagnostics: stderr


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"


FormatOption = typer.Option(Format.table, "--format", "-f", help="table (rich, for people) or json|yaml|csv")


def report_error(e: PlannerError) -> None:
    sys.stderr.write(f"error: {e.message}\n")
    if e.hint:
        sys.stderr.write(f"hint: {e.hint}\n")


def warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")


def cli_errors(fn):
    """Turn PlannerError into `error: ... / hint: ...` on stderr and its exit code (2 bad
    input, 1 does not fit), with no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PlannerError as e:
            report_error(e)
            raise typer.Exit(e.exit_code)

    return wrapper
