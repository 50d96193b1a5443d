"""Pieces every CLI module shares: the error wrapper and the --format option (the
consoles, `Format` and `warn` are the renderer's, planner/render/common.py).

Commands live in planner/cli/<topic>.py modules that expose `register(app)`.
A command body only parses, calls the library and hands results to planner/render/.
"""

from __future__ import annotations

import errno
import functools
import inspect
import math
import sys

import typer

from ..errors import PlannerError
from ..render.common import QUIET, Format, err, note, out, warn

FormatOption = typer.Option(Format.table, "--format", "-f", help="table (rich, for people) or json|yaml|csv")
QuietOption = typer.Option(False, "--quiet", "-q", help="no notes on stderr (what was assumed, searched, read): for CI; "
                                                       "warnings and errors are still printed")


def report_error(e: PlannerError) -> None:
    sys.stderr.write(f"error: {e.message}\n")
    if e.hint:
        sys.stderr.write(f"hint: {e.hint}\n")


def cli_errors(fn):
    """Turn PlannerError into `error: ... / hint: ...` on stderr and its exit code (2 bad
    input, 1 does not fit), with no traceback."""

    names = _option_names(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        QUIET["notes"] = kwargs.get("quiet") is True  # a command's --quiet (QuietOption)
        try:
            _finite_options(kwargs, names)
            # numpy's overflow warnings never reach the user: a result that overflowed is
            # refused as a whole before it is printed (render.common.check_finite). (Imported
            # here: a command's --help never runs this, and prints without numpy.)
            import numpy as np

            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                return fn(*args, **kwargs)
        except PlannerError as e:
            report_error(e)
            raise typer.Exit(e.exit_code)
        except OSError as e:  # a name over 255 bytes, to read or to write (-o): named, no traceback (issue 24)
            if e.errno != errno.ENAMETOOLONG:
                raise
            from ..files import name_too_long

            report_error(name_too_long(e.filename or ""))
            raise typer.Exit(2)
        finally:
            QUIET["notes"] = False

    return wrapper


def _option_names(fn) -> dict:
    """parameter name -> the option's first spelling (`reserve_gib` -> `--reserve-gib`)."""
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        decls = [d for d in (getattr(p.default, "param_decls", None) or ()) if d.startswith("--")]
        out[name] = decls[0].split("/")[0] if decls else name
    return out


INT64_MAX = 2**63 - 1  # numpy's int64, where every count ends up


def _finite_options(kwargs: dict, names: dict) -> None:
    """Every float a command was given is finite: click reads `inf`, `nan` and `1e400` as
    floats, and none is a quantity (issue 12); every integer fits in an int64 (click reads
    any number of digits; numpy cannot hold them: issue 24)."""
    for name, v in kwargs.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise PlannerError(f"{names.get(name, name)} {v}: not a finite number", "give a finite value")
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT64_MAX:
            digits = len(str(abs(v)))
            raise PlannerError(f"{names.get(name, name)}: a {digits}-digit number, beyond a 64-bit integer ({INT64_MAX})",
                               "counts are whole numbers up to 2147483647 (2**31 - 1), e.g. 8")


__all__ = ["Format", "FormatOption", "QuietOption", "cli_errors", "err", "note", "out", "report_error", "warn"]
