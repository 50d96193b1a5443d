"""Errors the CLI turns into `error: ... / hint: ...` and an exit code.

PlannerError  -> exit 2 (bad input: a file, a field, a value).
NoFitError    -> exit 1 (valid input, but nothing fits / no feasible plan).
"""

from __future__ import annotations


class PlannerError(Exception):
    """Bad input. `message` says what is wrong, `hint` what would be valid."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class NoFitError(PlannerError):
    exit_code = 1
