"""The `planner` command line: typer commands only (parse, call the library, render).

common.py holds the error wrapper and the --format option; each topic module (core.py:
explain, models, hardware, schema; fit.py, check.py, budget.py, export.py, validate.py,
collective.py, pipeline.py, calibrate.py) exposes `register(app)`.
"""

from __future__ import annotations

import sys

import typer
from .helpfmt import HelpGroup

try:  # typer >= 0.16 vendors click as typer._click; older ones use click itself
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as _click_exc


# click's Abort (Ctrl-C at a prompt); typer >= 0.2x raises its own typer.Abort instead
_ABORT = tuple(c for c in (getattr(_click_exc, "Abort", None), getattr(typer, "Abort", None)) if c is not None)


class _PlannerGroup(HelpGroup):
    """The `planner` command group: click's own usage errors (a missing argument, a bad
    option value, an unknown option) in the planner's one-line form, `error: ...` then
    `hint: ...` on stderr and exit 2, instead of typer's boxed panel. `--help` and a bare
    `planner` (the command list) are unchanged."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_exc.ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a bare group prints its help
                e.show()
            else:
                report_usage_error(e)
            sys.exit(e.exit_code)
        except _ABORT:
            sys.stderr.write("error: aborted\n")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def report_usage_error(e) -> None:
    """`error: <click's message on one line>` and a hint naming the command's --help."""
    msg = " ".join(e.format_message().split())
    msg = msg[:1].lower() + msg[1:] if msg[:2] != msg[:2].upper() else msg  # "No such option" -> "no such option"
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "planner"
    sys.stderr.write(f"error: {where}: {msg}\nhint: `{where} --help` lists the arguments and options\n")


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"planner {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", help="print the version and exit", callback=_version, is_eager=True),
) -> None:
    """Analytic capacity planner and auto-parallelism search for LLM training."""


# The topic modules, and the one that registers each command. Building the app imports only
# the modules it registers: `planner fit ...` loads fit's (and what it imports), not
# calibrate's scipy code or validate's, so a whole search starts sooner (issue 24).
_MODULES = ("core", "collective", "pipeline", "calibrate", "validate", "check", "fit", "budget", "export")
# (budget, check and export take explain's plan options from the registered explain command:
# core first)
_COMMAND_MODULE = {"fit": ("fit",), "explain": ("core",), "models": ("core",), "hardware": ("core",),
                   "check": ("core", "check"), "budget": ("core", "budget"),
                   "export": ("core", "export"), "validate": ("validate",), "collective": ("collective",),
                   "pipeline": ("pipeline",), "calibrate": ("calibrate",)}
# --help lists the commands in the order a newcomer meets them
_ORDER = ["fit", "explain", "check", "budget", "export", "validate", "collective", "pipeline", "calibrate", "models",
          "hardware", "schema"]


def build_app(modules=_MODULES) -> typer.Typer:
    """The `planner` typer app with the commands of `modules` (default: all)."""
    from importlib import import_module

    app = typer.Typer(
        cls=_PlannerGroup,
        name="planner",
        help="Analytic capacity planner and auto-parallelism search for LLM training.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # click's plain help: readable at 80 columns (helpfmt.py)
    )
    app.callback()(_root)
    for name in modules:
        import_module(f"{__name__}.{name}").register(app)
    app.registered_commands.sort(key=_rank)
    app.registered_groups.sort(key=lambda g: _rank(g.typer_instance.info) if g.typer_instance else len(_ORDER))
    return app


_APP = None


def __getattr__(name: str):
    """`planner.cli.app`: every command, built on first use (PEP 562)."""
    global _APP
    if name == "app":
        if _APP is None:
            _APP = build_app()
        return _APP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _rank(cmd) -> int:
    name = cmd.name or (cmd.callback.__name__ if cmd.callback else "")
    return _ORDER.index(name) if name in _ORDER else len(_ORDER)


def app_for(args: list[str]) -> typer.Typer:
    """The app a command line runs: only the invoked command's module when the first argument
    names a command (else every command: --help, a typo, no arguments)."""
    mod = _COMMAND_MODULE.get(args[0]) if args else None
    return build_app(mod) if mod is not None else __getattr__("app")


def main(argv=None) -> None:
    """The `planner` command (app_for, then run it)."""
    args = sys.argv[1:] if argv is None else list(argv)
    app_for(args)(args=args, prog_name="planner")
