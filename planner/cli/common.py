"""Pieces every CLI module shares: the error wrapper and the --format option (the
consoles, `Format` and `warn` are the renderer's, planner/render/common.py).

Commands live in planner/cli/<topic>.py modules that expose `register(app)`.
A command body only parses, calls the library and hands results to planner/render/.
"""

from __future__ import annotations

import functools
import sys

import typer

from ..errors import PlannerError
from ..render.common import Format, err, out, warn

FormatOption = typer.Option(Format.table, "--format", "-f", help="table (rich, for people) or json|yaml|csv")


def report_error(e: PlannerError) -> None:
    sys.stderr.write(f"error: {e.message}\n")
    if e.hint:
        sys.stderr.write(f"hint: {e.hint}\n")


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


__all__ = ["Format", "FormatOption", "cli_errors", "err", "out", "report_error", "warn"]
