"""Shared fixtures: build a plan from job fields and evaluate it; run the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job


def _build_the_cli_once():
    """The click command typer builds from `planner.cli.app`, built once per test session as a `planner` process
    builds it once, instead of once per CliRunner.invoke: typer.testing.CliRunner.invoke calls
    typer.main.get_command(app) on every call (typer/testing.py), which rebuilt every command's parameters from the
    function signatures (typer/main.py get_command_from_info, get_params_from_function) and the pydantic
    TypeAdapters its parameters build on first use (typer/core.py _TyperParameter.get_runtime_param): about 0.4 s of
    a 0.6 s `explain` invoke here, two thirds of the time of the tests that run the CLI in-process. The command is
    the same object tree a process builds (no state of one invoke is kept: click makes a new Context per call, the
    parameter sources are the context's), so every test still runs what `planner ...` runs; the first invoke of each
    app of the session builds it as before. Every CliRunner of the tests goes through typer.testing's
    `_get_command`, the name replaced here (a typer without it is left as it is)."""
    import typer.testing

    build = getattr(typer.testing, "_get_command", None)
    if build is None or getattr(build, "_planner_tests_once", False):
        return
    built: dict[int, tuple] = {}

    def get_command(typer_app):
        got = built.get(id(typer_app))
        if got is None or got[0] is not typer_app:  # the app is held, so its id is not reused
            got = built[id(typer_app)] = (typer_app, build(typer_app))
        return got[1]

    get_command._planner_tests_once = True
    typer.testing._get_command = get_command


_build_the_cli_once()


@pytest.fixture(autouse=True, scope="session")
def _model_cache(tmp_path_factory):
    """Generated model files (a Megatron argument file's own model: trainers.write_model_file)
    go to a folder of this test session, not the user's cache."""
    import os

    from planner.trainers import CACHE_ENV

    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("planner-cache"))
    yield
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture(scope="session")
def megatron_ci_report():
    """planner.megatron_ci.report_corpus of tests/data/megatron_ci/corpus.json (every row of Megatron-LM's CI
    corpus compared, about 12 s), computed once per test session: test_megatron_ci's report fixture,
    test_megatron_hybrid's hybrid rows and test_accuracy_tables' megatron_ci table (scripts/accuracy_tables.py
    corpus_report, the same call on the same file) each ran it. No reader mutates it (they read rows and summary,
    or copy the rows into their own dicts)."""
    from pathlib import Path

    from planner.megatron_ci import report_corpus

    return report_corpus(Path(__file__).parent / "data" / "megatron_ci" / "corpus.json")


@pytest.fixture(scope="session")
def published_runs_leave_one_out():
    """planner.calibrate.run.leave_one_out over tests/data/published_runs.yaml (every source group of >= 4 records
    calibrated on each record in turn), computed once per test session: test_calibrate_run's loo fixture and
    test_accuracy_tables' leave_one_out table (scripts/accuracy_tables.py loo, the same call on the same file) each
    ran it. No reader mutates it."""
    from pathlib import Path

    from planner.calibrate.run import leave_one_out
    from planner.validate import load_runs

    data = Path(__file__).parent / "data"
    return leave_one_out(load_runs(data / "published_runs.yaml"), data, str(data / "published_runs.yaml"))


class _Reports:
    """The validate results several test files compute of the same file in one session, each computed once (by the
    file's resolved path and the call's options): `planner validate`'s report of a runs file (planner.validate.report)
    and of a memory-rows file (planner.memory_rows.report). The same function on the same file and options: what each
    reader got from its own call. No reader mutates them (they read rows and summaries, or copy them)."""

    def __init__(self):
        self._got: dict = {}

    def _once(self, what, fn, path, **kw):
        from pathlib import Path

        key = (what, str(Path(path).resolve()), tuple(sorted(kw.items())))
        if key not in self._got:
            self._got[key] = fn(path, **kw)
        return self._got[key]

    def validate(self, path, complete: bool = False) -> dict:
        """planner.validate.report(path, complete=complete)."""
        from planner.validate import report

        return self._once("validate", report, path, complete=complete)

    def memory_rows(self, path) -> dict:
        """planner.memory_rows.report(path)."""
        from planner import memory_rows

        return self._once("memory_rows", memory_rows.report, path)


@pytest.fixture(scope="session")
def reports():
    """_Reports, one for the session: test_accuracy_tables (scripts/accuracy_tables.py runs_report, memory_report),
    test_memory_rows, test_lowprec and test_stacks each computed some of these reports of the same files."""
    return _Reports()


def fit_exports(folder, target: str):
    """A memo for a test module's `planner fit ARGS --export TARGET --output FILE` runs: go(name, args) -> (result,
    FILE (folder / name + ".sh"), row 1), each args run once (the first name given names the file). Row 1 is the row
    the export wrote (cli/fit.py hands it to export.write_export as readback, imported at call time), as `fit ARGS
    --top 1 --format json` prints it (render/common.py emit: check_finite, then json_text), without a second
    identical search; the search is exact (test_search's pruned ranking equals the exhaustive one), so row 1 of the
    export's default --top is row 1 of --top 1. None where the export wrote nothing. Nothing mutates what it returns."""
    import json

    import planner.cli.export as export_cli
    from planner.render.common import check_finite, json_text

    done, run = {}, _Run()

    def go(name: str, args) -> tuple:
        key = tuple(str(a) for a in args)
        if key not in done:
            out, got, write = folder / f"{name}.sh", [], export_cli.write_export
            export_cli.write_export = lambda p, *a, **k: (got.append(k["readback"]), write(p, *a, **k))[1]
            try:
                r = run("fit", *args, "--export", target, "--output", out)
            finally:
                export_cli.write_export = write
            if got:
                check_finite(got)
            done[key] = (r, out, json.loads(json_text(got))[0] if len(got) == 1 else None)
        return done[key]

    return go


def fit_table_and_rows(run, *args) -> tuple:
    """(the click Result of `planner fit ARGS` as a table, the rows `planner fit ARGS --format json` prints) of one
    search: the rows the table run shows (cli/fit.py hands them to render/fit.py emit_fit, imported at call time)
    printed as the JSON run prints them (emit: check_finite, then json_text of the shown rows); the JSON run's stderr
    notes are the table run's but for the counts note (emit_fit adds it for a machine format). None for the rows
    where the table run printed none. For a single GPU count (with several the table shows each count's best)."""
    import json

    import planner.render.fit as render_fit
    from planner.render.common import check_finite, json_text

    shown, emit_fit = [], render_fit.emit_fit
    render_fit.emit_fit = lambda result, rows, *a, **k: (shown.append(rows), emit_fit(result, rows, *a, **k))[1]
    try:
        r = run("fit", *args)
    finally:
        render_fit.emit_fit = emit_fit
    if len(shown) != 1:
        return r, None
    check_finite(shown[0])
    return r, json.loads(json_text(shown[0]))


def resolve_verdict(**job):
    """The start-up verdict of resolving `job`: the PlannerError's message where resolve refuses it, else None (the
    rule tests' one shape: a plan a trainer accepts or the rule naming why not)."""
    from planner.errors import PlannerError

    try:
        resolve(Job(**job))
    except PlannerError as e:
        return e.message
    return None


def h100_nvlink_ring_s(n, size):
    """comm.py's ring collective (and pairwise all-to-all) of `size` bytes over n ranks inside one H100 NVLink domain,
    by hand: n - 1 rounds of comm.NVLINK_LATENCY_S 3.4 us, and (n - 1) / n of the buffer at hardware_db h100-sxm's
    nvlink 450 GB/s x comm.NVLINK_RING_EFFICIENCY 0.8222... (the hand-derived exchange tests' one formula)."""
    return (n - 1) * 3.4e-6 + (n - 1) / n * size / (450e9 * 0.8222222222222222)


def h100_nvlink_ll_ring_s(n, size, all_reduce=False):
    """comm.py's ring under NCCL's LL protocol inside one H100 NVLink domain, by hand (comm.py "Protocols", NVIDIA/nccl
    src/graph/tuning.cc @v2.20.3-1 l. 57, 67, 86-90, 181): baseLat 6.6 us + one 0.6 us step a round (2 (n - 1) for an
    all-reduce, n - 1 else), the bytes of h100_nvlink_ring_s (twice for an all-reduce) at min(370 GB/s x 1/4 for an
    all-reduce, 1/3 else, llMaxBw 87.7 GB/s): 87.7 GB/s either way on H100."""
    rounds = 2 * (n - 1) if all_reduce else n - 1
    moved = (2 if all_reduce else 1) * (n - 1) / n * size
    return 6.6e-6 + rounds * 0.6e-6 + moved / min(450e9 * 0.8222222222222222 * (0.25 if all_reduce else 1 / 3), 87.7e9)


def explain_job(**fields):
    """(settings, plan, estimate, json) for one job; hardware defaults to h100-sxm."""
    job = Job(**fields)
    settings, plan, warnings = resolve(job)
    est = evaluate(settings, plan)
    return settings, plan, est, to_json(settings, plan, est)


def moe_layer_saves(saves, **fields) -> tuple:
    """A memory.py per-kind MoE saves function (torch_router_saves, torch_reorder_saves: (kept, re-run buffer) of one
    layer) on the model's first routed-expert layer kind, for one job, as floats."""
    from planner.layers import layer_list
    from planner.stacks import plan_context

    settings, plan, _ = resolve(Job(**fields))
    kind = next(k for k in layer_list(settings.model).kinds if k.has_experts)
    return tuple(float(np.asarray(x)) for x in saves(settings, kind, plan_context(settings, plan), plan))


def layer_activations_with_and_without(memory_field: str, off, **fields) -> tuple:
    """explain's layer_activations of one job (settings, then the term with the stack's memory.<memory_field> as
    given, then with it set to `off`): (settings, on, off)."""
    import dataclasses

    settings, plan, _ = resolve(Job(**fields))
    on = to_json(settings, plan, evaluate(settings, plan))["memory"]["terms"]["layer_activations"]
    st = settings.stack
    s_off = dataclasses.replace(settings, stack=st.model_copy(
        update={"memory": st.memory.model_copy(update={memory_field: off})}))
    return settings, on, to_json(s_off, plan, evaluate(s_off, plan))["memory"]["terms"]["layer_activations"]


def priced_with_selective(settings, plan, **update) -> dict:
    """explain's JSON of the plan with the stack's selective policy fields replaced by `update`."""
    import dataclasses

    st = settings.stack
    s = dataclasses.replace(settings, stack=st.model_copy(update={"selective": st.selective.model_copy(update=update)}))
    return to_json(s, plan, evaluate(s, plan))


@pytest.fixture
def explain():
    return explain_job


class _Run:
    def __init__(self):
        self.runner = CliRunner()

    def __call__(self, *args: str):
        return self.runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def cli():
    """cli('explain', '--model', ...) -> click Result with .exit_code, .stdout, .stderr."""
    return _Run()


@pytest.fixture(scope="session")
def free_stack(tmp_path_factory):
    """The megatron stack as a user stack file that does not say what it runs (no `runs`:
    schema Stack.runs, every plan is taken as runnable), for the cost models' own tests of
    choices no catalog stack runs (GPipe and ZB-H1 on Megatron's kernels, a DP-innermost rank
    order). Its figures are megatron's, so its prices are the megatron stack's."""
    import yaml

    from planner.catalog import stack_source

    data = yaml.safe_load(stack_source("megatron").read_text(encoding="utf-8"))
    assert "runs" in data
    del data["runs"]
    path = tmp_path_factory.mktemp("stacks") / "megatron-any-plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


def assert_one_error(r, *needles):
    """Bad input: exit 2, stderr is `error: ...` then `hint: ...` lines, no traceback, and it
    names each of `needles`; `note: ...` lines may come first (what was read before the error,
    e.g. an option replacing a job file's value)."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    while len(lines) > 1 and lines[0].startswith("note: "):
        lines = lines[1:]
    assert lines[0].startswith("error: ")
    assert all(ln.startswith(("error: ", "hint: ")) for ln in lines)
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr


def explain_each_row(cli, job, rows):
    """(row, explain's JSON) for each fit row: `planner explain` of the row's reproduce line (search.explain_args:
    one 0-d plan), for the tests that check explain and search (search.rows_of: one 1-d PlanArrays) price alike."""
    import json

    from planner.search import explain_args

    for row in rows:
        again = cli("explain", *explain_args(job, row), "--format", "json")
        assert again.exit_code == 0, again.stderr
        yield row, json.loads(again.stdout)


def unlisted_stack_file(folder, stack: str = "megatron") -> str:
    """stack_db/megatron.yaml without runs.layer_kinds, named megatron-unlisted: a user's stack file that lists
    no layer kinds, so start-up rule STACK_LAYER_KIND (code 73) does not apply and the cost models of a kind no
    shipped stack builds (Mamba-1: Jamba) can still be exercised. Returns its path."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "stack_db" / f"{stack}.yaml").read_text()
    text, n = re.subn(r"  layer_kinds:\n(    [^\n]*\n)+", "", text)  # its entries and their not_built lists
    assert n == 1, f"stack_db/{stack}.yaml: the runs.layer_kinds block moved; update tests/conftest.py"
    text, n = re.subn(rf"^name: {stack}$", f"name: {stack}-unlisted", text, flags=re.M)
    assert n == 1
    p = Path(folder) / f"{stack}-unlisted.yaml"
    p.write_text(text)
    return str(p)


@pytest.fixture(scope="session")
def unlisted_stack(tmp_path_factory):
    """The path of unlisted_stack_file's stack (runs.layer_kinds null)."""
    return unlisted_stack_file(tmp_path_factory.mktemp("unlisted-stack"))


def h100_nvlink_ll128_ring_s(n, size, all_reduce=False):
    """The same ring under NCCL's LL128 (tuning.cc @v2.20.3-1 l. 57, 67, 182): 14 us + one 1.9 us step a round, the
    bytes at 0.92 x 370 GB/s."""
    rounds = 2 * (n - 1) if all_reduce else n - 1
    moved = (2 if all_reduce else 1) * (n - 1) / n * size
    return 14.0e-6 + rounds * 1.9e-6 + moved / (450e9 * 0.8222222222222222 * 0.92)


def h100_nvlink_ring_fastest_s(n, size):
    """A reduce-scatter / all-gather ring inside one H100 NVLink domain under the fastest of NCCL's protocols (comm.py
    "Protocols": the least of Simple, LL and LL128, as NCCL's tuner picks)."""
    return min(h100_nvlink_ring_s(n, size), h100_nvlink_ll_ring_s(n, size), h100_nvlink_ll128_ring_s(n, size))


def edited_json(src, dst, edit):
    """dst: the JSON file src with edit(data) applied to its parsed data (the readers' mistyped-value tests)."""
    import json
    data = json.loads(src.read_text())
    edit(data)
    dst.write_text(json.dumps(data), encoding="utf-8")
    return dst
