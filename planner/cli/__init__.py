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
    `planner` both print the command list on stdout and exit 0 (as a bare `git` does: asking for
    nothing is not an error; click's no_args_is_help would print it on stderr with exit 2)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_exc.ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a bare group prints its help
                sys.stdout.write(e.format_message() + "\n")  # --help's text and exit code
                sys.exit(0)
            else:
                report_usage_error(e, _command_path(self, prog_name or "planner", args))
            sys.exit(e.exit_code)
        except _ABORT:
            sys.stderr.write("error: aborted\n")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def get_help_option(self, ctx):
        """click's --help with False, not None, as its value where the command line leaves it out: typer (0.29)
        coerces a parameter's None through a pydantic TypeAdapter it builds on first use (typer/_coercion.py
        build_runtime_param), so `planner fit --help`, which leaves the group's own --help out, imported pydantic
        for it (3.3e8 of the command's 9.6e8 instructions, cachegrind) before printing fit's help. An unset flag is
        False (the help callback tests its truth only); a bool is passed through uncoerced (typer/core.py
        _TyperParameter.process_value)."""
        opt = super().get_help_option(ctx)
        if opt is not None and opt.default is None:
            opt.default = False
        return opt


def _command_path(group, prog: str, args) -> str:
    """The command a command line runs, from its leading words that name a command of the group (or of a command
    group under it): ['fit', '--shard-group'] -> 'planner fit', ['calibrate', 'nccl', ...] -> 'planner calibrate
    nccl'. A usage error click raises while parsing a value (`option '--shard-group' requires an argument`,
    parser._get_value_from_state) carries no context, so its command is named from the words given."""
    words, cmd = [prog], group
    for a in list(args or ()):
        sub = getattr(cmd, "commands", {}).get(a)
        if sub is None:
            break
        words.append(a)
        cmd = sub
    return " ".join(words)


def report_usage_error(e, fallback: str = "planner") -> None:
    """`error: <click's message on one line>` and a hint naming the command's --help: the error's own context's
    command, else `fallback` (the command the words given name: _command_path)."""
    msg = " ".join(e.format_message().split())
    msg = msg[:1].lower() + msg[1:] if msg[:2] != msg[:2].upper() else msg  # "No such option" -> "no such option"
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else fallback
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


# `planner --help` and a bare `planner` print the command list alone: each command's name and
# the first paragraph of its help (helpfmt.HelpGroup), in this order. They are answered from this
# table without importing the commands' modules (numpy, pydantic and the schema's classes, rich,
# PyYAML, the cost models: issue 24); tests/test_start_up_cost.py checks that the list is the one
# the commands' own help gives, word for word and in order.
SUMMARIES = {
    "fit": "Rank every way to split a model on this many GPUs (TP, CP, PP, virtual stages, DP, micro-batch, sharding, "
           "recompute, SP, schedule, rank order) by step time; exit 1 with the closest plan when none fits.",
    "explain": "Memory, FLOPs, step time and MFU of one training plan, term by term. The job file is a planner job YAML "
               "or a trainer's own config (torchtitan TOML, Megatron launch script / argument file, DeepSpeed JSON with "
               "--model).",
    "check": "Check that job files fit in GPU memory (and optional time gates); for a job that does not, name the "
             "overflow and the cheapest changes that make it fit, each checked. Every plan option `planner explain` "
             "takes applies to every file and overrides what the file says (a note names each value it replaces). Exit "
             "0 when every job passes, 1 when any fails, 2 when any input is invalid.",
    "budget": "Training days, GPU-hours, cost, energy, checkpoint interval and goodput of a plan.",
    "export": "Write a plan as a torchtitan TOML, a Megatron-LM launch script, a DeepSpeed JSON, a Megatron-DeepSpeed "
              "launch script (its ds_config JSON inside) or a Megatron-Bridge run_recipe.py launch; what the format "
              "cannot express is reported on stderr, never dropped.",
    "validate": "Compare predicted with published tokens/s per GPU (and memory per GPU) for each run record; print the "
                "relative errors, their count, median and 90th percentile, and every skipped record with its reason. "
                "Assumed fields are listed per record. Given the Megatron-LM CI corpus (a JSON object with `rows`, "
                "tests/data/megatron_ci/corpus.json), compare the predicted peak allocated memory of the last pipeline "
                "stage with each row's measured one, per trust tier.",
    "collective": "What one collective costs: bytes each rank sends and receives, rounds, latency and bandwidth terms, "
                  "time, and the bus bandwidth nccl-tests would report.",
    "pipeline": "Simulate a pipeline schedule: text timeline, step time, idle time and peak stored micro-batches per "
                "stage (digits forward, letters backward, dots idle).",
    "models": "List the model catalog (model_zoo/) and torchtitan's flavors (--model torchtitan:<code>/<flavor>).",
    "hardware": "List the hardware catalog (hardware_db/).",
    "schema": "Print the JSON Schema of a job file (or a model or hardware file), for editors and CI validators.",
    "stacks": "List the software-stack catalog (stack_db/): kernels, recompute, overlap, fp8 recipes.",
    "calibrate": "Fit communication and GEMM figures, and the host's CPU Adam, to your own measurements; writes a profile YAML.",
}


def _new_app() -> typer.Typer:
    """The `planner` group with its own options (--version, --help) and no command yet."""
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
    return app


def _listed() -> None:
    """A command of the list `planner --help` prints (SUMMARIES); never run."""


def listing_app() -> typer.Typer:
    """The app of `planner --help` and a bare `planner`: every command by name and summary
    (SUMMARIES), none of the commands' modules imported."""
    app = _new_app()
    for name, summary in SUMMARIES.items():
        app.command(name, help=summary)(_listed)
    return app


def build_app(modules=_MODULES) -> typer.Typer:
    """The `planner` typer app with the commands of `modules` (default: all)."""
    from importlib import import_module

    app = _new_app()
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
    names a command; the command list alone for `planner --help` and a bare `planner`
    (listing_app); else every command (a typo, an option of its own before the command)."""
    if args in ([], ["--help"]):
        return listing_app()
    mod = _COMMAND_MODULE.get(args[0]) if args else None
    app = build_app(mod) if mod is not None else __getattr__("app")
    if "--help" not in args:
        import_runtime(mod or _MODULES)
    return app


def import_runtime(modules) -> None:
    """The modules the commands of `modules` run on (each topic module's import_runtime, where it has one: core,
    fit and check import the cost models, pydantic's schema and numpy inside the commands, so that their --help
    prints without them), imported now, at start-up: planner/__main__.py freezes what start-up made, so that the
    collector never scans those objects while the command runs. A command line with --help skips this: click prints
    the help before any command runs (a command run anyway imports what it uses itself, only later)."""
    from importlib import import_module

    for name in modules:
        load = getattr(import_module(f"{__name__}.{name}"), "import_runtime", None)
        if load is not None:
            load()


def main(argv=None) -> None:
    """The `planner` command (app_for, then run it)."""
    args = sys.argv[1:] if argv is None else list(argv)
    app_for(args)(args=args, prog_name="planner")
