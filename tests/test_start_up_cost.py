"""What the `planner` command does at start-up to start sooner (issue 24: `planner fit --model
llama3-405b --gpus 16384` under 1 s whole process), each checked where it can be seen: which
modules a command imports, the garbage collector's state after start-up (planner/__main__.py),
and the consoles' highlighting (planner/render/common.py console). The times themselves are
benchmarks (benchmarks/test_startup_speed.py), never asserted here.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from planner.render.common import console

ROOT = Path(__file__).resolve().parents[1]

# What `planner fit` on a catalog model never imports: the other commands' modules, the
# trainers' readers and writers, the Hugging Face reader, and the libraries only they use
# (scipy: calibrate and validate's fits; matplotlib: --plot; jsonschema: tests only; tomllib:
# the torchtitan reader), nor torchtitan's flavor registries (a catalog model's name is told from a flavor's by
# planner/flavor_names.py).
FIT_NEVER_IMPORTS = ("scipy", "matplotlib", "jsonschema", "tomllib", "planner.calibrate", "planner.validate",
                     "planner.plot", "planner.hf_config", "planner.check", "planner.budget", "planner.reliability",
                     "planner.megatron_ci", "planner.memory_rows", "planner.profile", "planner.trainers.",
                     "planner.torchtitan_registry")
# What `planner check` and `planner export` never import: the budget command's modules (their plan
# options are explain's, from cli/core.py plan_parameters, not from cli/budget.py), and the libraries
# and modules of commands they do not run.
CHECK_NEVER_IMPORTS = ("planner.budget", "planner.reliability", "planner.cli.budget", "planner.render.budget", "scipy",
                       "matplotlib", "jsonschema", "planner.calibrate", "planner.validate", "planner.plot",
                       "planner.cli.fit")
_PROCESS = """
import gc, json, runpy, sys
sys.argv = ['planner', *{args!r}]
try:
    runpy.run_module('planner', run_name='__main__')
except SystemExit as e:
    code = e.code
print(json.dumps({{'code': code, 'gc_enabled': gc.isenabled(), 'frozen': gc.get_freeze_count(), 'modules': sorted(sys.modules)}}))
"""


def _planner_process(*args: str) -> dict:
    """Run `planner ARGS` as the console script does (planner/__main__.py) in a fresh
    interpreter; what it left: exit code, the collector's state, every imported module."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _PROCESS.format(args=list(args))], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_fit_imports_only_what_fit_runs():
    res = _planner_process("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1")
    assert res["code"] == 0
    mods = res["modules"]
    assert "planner.search" in mods and "planner.cli.fit" in mods  # the list is the run's
    bad = [m for m in mods if any(m == p or m.startswith(p if p.endswith(".") else p + ".") for p in FIT_NEVER_IMPORTS)]
    assert not bad, f"planner fit imported {bad}"
    assert not [m for m in mods if m.startswith("planner.cli.") and m not in ("planner.cli.fit", "planner.cli.core",
                                                                               "planner.cli.common", "planner.cli.helpfmt")]


def _never(mods: list, never: tuple) -> list:
    return [m for m in mods if any(m == p or m.startswith(p if p.endswith(".") else p + ".") for p in never)]


def test_check_and_export_import_not_the_budget():
    script = str(ROOT / "tests" / "data" / "trainer_configs" / "train_llama3_8b.sh")
    for args, own in ((["check", script], "planner.cli.check"),
                      (["export", "--model", "llama3-8b", "--gpus", "8", "--format", "megatron"], "planner.cli.export")):
        res = _planner_process(*args)
        assert res["code"] == 0, args
        mods = res["modules"]
        assert own in mods and "planner.explain" in mods  # the list is the run's
        assert not _never(mods, CHECK_NEVER_IMPORTS), f"planner {args[0]} imported {_never(mods, CHECK_NEVER_IMPORTS)}"


def test_help_lists_the_commands_without_importing_them():
    """`planner --help` and a bare `planner` (the command list, planner.cli.listing_app) import
    none of the commands' modules, nor numpy, pydantic, rich or PyYAML."""
    res = _planner_process("--help")
    assert res["code"] == 0
    mods = res["modules"]
    assert "planner.cli" in mods  # the list is the run's
    assert [m for m in mods if m == "planner" or m.startswith("planner.")] == ["planner", "planner.cli", "planner.cli.helpfmt"]
    assert not [m for m in mods if m.split(".")[0] in ("numpy", "pydantic", "pydantic_core", "rich", "yaml")]


# What a command's --help never imports (issue 24): the cost models, the schema's pydantic classes, numpy, and pydantic
# itself (typer 0.29 coerces an unset --help of the group through a pydantic TypeAdapter: planner.cli._PlannerGroup
# gives it False). `planner fit --help` cost 1.72e9 instructions with them, 0.57e9 without (cachegrind, README).
HELP_NEVER_IMPORTS = ("numpy", "pydantic", "pydantic_core", "planner.schema", "planner.catalog", "planner.plan",
                      "planner.search", "planner.space", "planner.explain", "planner.check", "planner.step",
                      "planner.memory", "planner.render.fit", "planner.render.check")


def test_a_command_help_imports_no_cost_model():
    """`planner fit --help` and `planner check --help` print the options (every one of them: the help text is the one
    the commands had when their modules imported the cost models, tests/test_cli_*) without importing the search, the
    schema, numpy or pydantic."""
    for args, own in ((["fit", "--help"], "planner.cli.fit"), (["check", "--help"], "planner.cli.check")):
        res = _planner_process(*args)
        assert res["code"] == 0, args
        mods = res["modules"]
        assert own in mods and "planner.cli.core" in mods  # the list is the run's
        assert not _never(mods, HELP_NEVER_IMPORTS), f"planner {' '.join(args)} imported {_never(mods, HELP_NEVER_IMPORTS)}"


def test_a_command_imports_what_it_runs_at_start_up():
    """Without --help, planner.cli.app_for imports what the command runs on (the topic modules' import_runtime) before
    planner/__main__.py freezes start-up's objects: the search's and the schema's classes are frozen, not scanned by
    the collector while the search runs; with --help it does not."""
    code = ("import json, sys; from planner.cli import app_for; app_for({args!r}); "
            "print(json.dumps(sorted(sys.modules)))")
    for args, want in ((["fit", "--model", "llama3-8b", "--gpus", "8"], True), (["fit", "--help"], False),
                       (["check", "job.yaml"], True), (["explain", "--model", "llama3-8b", "--help"], False)):
        r = subprocess.run([sys.executable, "-c", code.format(args=args)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        mods = set(json.loads(r.stdout.splitlines()[-1]))
        runs = {"planner.schema", "planner.plan", "planner.explain", "numpy", "pydantic"}
        if args[0] == "fit":
            runs |= {"planner.search", "planner.render.fit"}
        if args[0] == "check":
            runs |= {"planner.check", "planner.render.check"}
        assert (runs <= mods) is want and (not (runs & mods)) is (not want), (args, sorted(runs & mods))


def test_the_command_list_is_the_commands_own():
    """The list `planner --help` prints from planner.cli.SUMMARIES is, byte for byte, the one
    the app with every command prints (each command's name and the first paragraph of its own
    help, in the app's order), for --help and for a bare `planner` (both exit 0, the list on stdout)."""
    from typer.testing import CliRunner

    from planner.cli import build_app, listing_app

    runner = CliRunner()
    for args in (["--help"], []):
        full, listed = runner.invoke(build_app(), args), runner.invoke(listing_app(), args)
        assert (listed.exit_code, listed.stdout, listed.stderr) == (full.exit_code, full.stdout, full.stderr)
        assert "  calibrate   Fit communication and GEMM figures" in full.stdout + full.stderr  # a list was compared
    assert full.exit_code == 0 and full.stderr == ""


def test_the_command_runs_with_start_up_frozen():
    """planner/__main__.py: start-up ran with the collector off, what it left is frozen (out
    of every later collection), and the command itself ran with the collector on."""
    res = _planner_process("models")
    assert res["code"] == 0
    assert res["gc_enabled"] is True
    assert res["frozen"] > 10_000  # modules, classes, schemas: ~80,000 objects on a fit


def test_the_command_keeps_freed_memory_on_glibc():
    """planner/__main__.py _keep_freed_memory: glibc takes both malloc settings (mallopt returns 1 for
    each, 0 for a value it refuses), run in a fresh interpreter so that this process's allocator is left
    as it was."""
    import platform

    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        import pytest

        pytest.skip("glibc's mallopt only")
    code = "import planner.__main__ as m; print(m._keep_freed_memory())"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]


def test_a_console_without_colors_does_not_highlight():
    """Piped (no color system): no highlight spans, and the same text rich's highlighting
    console writes; a terminal keeps rich's highlighting (the number in bold cyan)."""
    line = "searched 710,959 candidates in 0.70 s: 103,566 fit"
    piped, plain = io.StringIO(), io.StringIO()
    c = console(file=piped, soft_wrap=True)
    assert c.color_system is None
    assert c.render_str(line).spans == []
    c.print(line)
    from rich.console import Console

    Console(file=plain, soft_wrap=True).print(line)
    assert piped.getvalue() == plain.getvalue() == line + "\n"
    term = io.StringIO()
    t = console(file=term, soft_wrap=True, force_terminal=True, color_system="standard")
    assert t.render_str(line).spans  # highlighted
    t.print(line)
    assert "\x1b[1;36m710\x1b[0m" in term.getvalue()
