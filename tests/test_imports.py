"""The import graph of the planner package (DESIGN.md: arrows point down only).

Every module is read with `ast` and every import in it counts, at module level and inside
functions alike (a function-level import is still an arrow; it only runs later). Importing
`a.b.c` also runs the `__init__` of `a.b` and `a`, so a module that imports `a.b.c` depends
on those packages too, unless they are its own enclosing packages (already being imported).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import planner

ROOT = Path(planner.__file__).parent
PACKAGE = "planner"
# The cost models and what they stand on: pricing a plan never calls a parser, a fitter or
# a benchmark runner (calibrate/ produces data; the cost models receive it; trainers/ reads and
# writes trainers' files). The layer kinds (planner/layers/, every module of it) are cost
# models too.
LAYER_MODULES = tuple(
    "planner.layers" + ("" if p.stem == "__init__" else "." + p.stem) for p in sorted((ROOT / "layers").glob("*.py"))
)
COST_MODELS = (
    "planner.step", "planner.compute", "planner.memory", "planner.comm", "planner.plan", "planner.pipeline",
    "planner.params", "planner.moe", "planner.stacks", "planner.power", "planner.efficiencies", "planner.terms",
) + LAYER_MODULES


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The planner modules `name` imports (and the packages whose __init__ that runs)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets.add(mod)
            for a in node.names:  # `from pkg import submodule`
                if f"{mod}.{a.name}" in modules:
                    targets.add(f"{mod}.{a.name}")
    own = set(_ancestors(name)) | {name}
    out: set[str] = set()
    for t in targets:
        if t != PACKAGE and not t.startswith(PACKAGE + "."):
            continue
        for m in [t, *_ancestors(t)]:
            if m in modules and m not in own:
                out.add(m)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = {n: WHITE for n in graph}
    for start in sorted(graph):
        if color[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        color[start] = GREY
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = BLACK
                stack.pop()
                path.pop()
            elif color[nxt] == GREY:
                return path[path.index(nxt):] + [nxt]
            elif color[nxt] == WHITE:
                color[nxt] = GREY
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
    return None


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module `start` imports, directly or not: {module: the module that imports it}."""
    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        n = todo.pop()
        for m in sorted(graph[n]):
            if m not in seen and m != start:
                seen[m] = n
                todo.append(m)
    return seen


def _chain(seen: dict[str, str], start: str, end: str) -> str:
    chain = [end]
    while chain[-1] != start:
        chain.append(seen[chain[-1]])
    return " -> ".join(reversed(chain))


def test_the_walk_sees_known_arrows():
    """The graph itself: the test would be vacuous if the walk missed imports."""
    g = import_graph()
    assert "planner.step" in g and "planner.render.common" in g
    assert {"planner.comm", "planner.compute", "planner.memory", "planner.plan"} <= g["planner.step"]
    assert "planner.search" in g["planner.render.fit"]  # `from ..search import ...`
    assert "planner.explain" in g["planner.check"]
    assert "planner.catalog" in g["planner.search"]  # a function-level import counts
    # every module of planner/layers/ is a cost model of the checks below
    assert {"planner.layers", "planner.layers.common", "planner.layers.attention"} <= set(LAYER_MODULES)
    assert set(LAYER_MODULES) == {m for m in g if m == "planner.layers" or m.startswith("planner.layers.")}
    assert set(COST_MODELS) <= set(g)


def test_finds_a_cycle_and_a_path():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(g) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert _chain(reachable(g, "d"), "d", "c") == "d -> a -> b -> c"


@pytest.fixture(scope="module")
def graph():
    """The import graph, read once for the checks of every cost model."""
    return import_graph()


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _assert_imports_none_of(graph, module: str, packages: tuple[str, ...]) -> None:
    """`module` imports, directly or not, no module of the planner subpackages `packages`."""
    seen = reachable(graph, module)
    bad = sorted(m for m in seen if m.split(".")[1] in packages)
    assert not bad, f"{module} imports {bad[0]}: " + _chain(seen, module, bad[0])


@pytest.mark.parametrize("module", COST_MODELS)
def test_cost_models_do_not_import_calibrate(module, graph):
    _assert_imports_none_of(graph, module, ("calibrate",))


@pytest.mark.parametrize("module", COST_MODELS)
def test_cost_models_do_not_import_trainers(module, graph):
    """Nor a trainer's reader or writer (trainers/: torchtitan TOML, Megatron, DeepSpeed)."""
    _assert_imports_none_of(graph, module, ("trainers",))


@pytest.mark.parametrize("module", COST_MODELS)
def test_cost_models_do_not_import_commands(module, graph):
    """Nor a command or a renderer (cli/, render/)."""
    _assert_imports_none_of(graph, module, ("cli", "render"))


def test_pricing_with_a_profile_runs_no_calibrate_code(tmp_path):
    """At run time too: a fresh interpreter loads a profile with both sections, prices a plan
    that uses both (measured GEMMs, the measured 8-GPU all-reduce), and has imported no
    module of planner.calibrate (so step_time called none of its functions)."""
    from typer.testing import CliRunner

    from planner.cli import app

    prof = tmp_path / "p.yaml"
    runner = CliRunner()
    r = runner.invoke(app, ["calibrate", "nccl", "tests/data/nccl_logs/h100_8gpu_allreduce_aws-p5-batch.txt",
                            "--collective", "all_reduce", "--nodes", "1", "-o", str(prof)])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["calibrate", "gemm", "--from", "tests/data/gemm_measurements.yaml",
                            "--gpu-filter", "H100 80GB HBM3", "--hardware", "h100-sxm", "-o", str(prof)])
    assert r.exit_code == 0, r.stderr
    code = f"""
import json, sys
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
settings, plan, _ = resolve(Job(model="llama3-8b", gpus=16, tp=8, sequence_parallel=False, calibration={str(prof)!r}))
js = to_json(settings, plan, evaluate(settings, plan))
print(json.dumps({{"used": js["calibration"]["used"],
                  "calibrate": sorted(m for m in sys.modules if m.startswith("planner.calibrate"))}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout)
    assert res["used"] == ["all_reduce/intra-node/8", "gemm"]
    assert res["calibrate"] == []
