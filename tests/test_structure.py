"""The shape of the cost models (issue 20): short functions, and a plan's walk that goes down.

1. No function (or method) of the cost-model modules is longer than MAX_FUNCTION_LINES.
2. One `explain.evaluate`, traced call by call (sys.setprofile), never calls from a module of
   a lower layer into one of a higher layer (DESIGN.md: "Arrows point down only"); the test
   prints how often each module was entered, and the walk's length does not grow with the
   model's depth or the number of pipeline stages (the cost models are array code: a model
   is a list of layer kinds, not a loop over its layers).

The import graph itself (no cycle, no parser or command under the cost models) is
tests/test_imports.py.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

import pytest

import planner
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job

ROOT = Path(planner.__file__).parent
MAX_FUNCTION_LINES = 100
COST_MODEL_FILES = (
    "step.py", "memory.py", "compute.py", "comm.py", "pipeline.py", "params.py", "moe.py", "power.py",
    "efficiencies.py", "terms.py", "stacks.py", "layers/*.py",
)

# Layer ranks, higher = nearer the commands. DESIGN.md: explain/search -> step -> memory,
# compute, comm, pipeline -> layers/ -> plan, schema, units. A call may go down or stay on its
# own rank; a call into a higher rank is the walk climbing back up.
RANKS = {
    "planner.explain": 90,
    "planner.search": 90,
    "planner.step": 80,
    # the MoE dispatchers' costs (step prices them, they call step's Collectives back) and the
    # groups' placement report (explain)
    "planner.dispatch": 80,
    "planner.placement": 75,
    # the cost models (moe.py: expert-parallel placement and overlap, until layers/ absorbs it)
    "planner.memory": 70,
    "planner.compute": 70,
    "planner.comm": 70,
    "planner.pipeline": 70,
    "planner.moe": 70,
    # where the import graph puts them: imported by the cost models (memory, compute, step) and
    # explain; params imports layers/ and schema, stacks imports plan, catalog and schema
    "planner.params": 60,
    "planner.stacks": 60,
    # the selective policy of Megatron's --recompute-modules: read by step and memory, reads the
    # layer kinds (their elementwise bytes, which kinds hold MLA or experts)
    "planner.recompute_modules": 60,
    # a job's CUDA graphs (Megatron --cuda-graph-impl / --cuda-graph-modules): read by memory
    # (the static outputs a graph holds) and plan (the checks), reads the layer kinds
    "planner.cuda_graphs": 60,
    # which linears the fp8 recipe converts (issue 22): read by step and memory, reads the layer kinds' blocks
    "planner.fp8_linears": 60,
    # layers/: the package (layer lists, per-stage means, the shared context) over the kind
    # modules; the MoE MLP over the dense MLP whose pieces it reuses; all over common
    "planner.layers": 50,
    "planner.layers.moe": 45,
    "planner.layers.attention": 40,
    "planner.layers.mlp": 40,
    "planner.layers.mamba": 40,  # gemm_cast_elements, which step's converted rows read (step.py [18])
    "planner.layers.common": 35,
    # the data every layer above reads, and leaf modules that import nothing of planner
    # (terms, efficiencies, power). plan imports comm and pipeline for their codes
    # (order_code, SCHEDULE_CODES) and pipeline.stage_layers, an import arrow that DESIGN.md
    # does not draw; pricing a plan calls none of them from plan.
    "planner.plan": 20,
    "planner.schema": 20,
    "planner.units": 20,
    "planner.terms": 20,
    "planner.profile": 20,
    "planner.catalog": 20,
    "planner.files": 20,
    "planner.errors": 20,
    "planner.efficiencies": 20,
    # the MoE routing imbalance: a leaf (imports nothing of planner) that plan_dict, the cost models and explain read
    "planner.imbalance": 20,
    # which MoE dispatchers synchronise with the host when padded: a leaf that step, plan and cuda_graphs read
    "planner.moe_padding": 20,
    # the MoE dispatchers' communication buffers (DeepEP, Hybrid-EP): a leaf that memory reads
    "planner.ep_buffers": 20,
    # NCCL's NVLS buffers per communicator (memory.py [nv]): a leaf (numpy only) that memory reads
    "planner.nvls_buffers": 20,
    # the MoE dispatchers' codes and each plan's dispatcher (fit's dispatcher search): a leaf that dispatch, step and
    # memory read
    "planner.dispatch_codes": 20,
    "planner.power": 20,
    # CPU offload's host bytes, link copies and CPU step (job fields offload_optimizer / offload_param): a leaf that
    # memory, step and explain read
    "planner.offload": 20,
    # Transformer Engine releases and what TP overlap allocates and carries by release (job field te_version): a leaf
    # that plan, memory and startup (MEGATRON_TP_OVERLAP_QUANTIZER, MEGATRON_TE_RECIPE_RELEASE) read
    "planner.te_version": 20,
}

# Upward calls the code still makes, each with how it goes away. Any other upward call fails
# test_a_plans_walk_goes_down; one of these that no longer happens fails
# test_known_upward_calls_still_happen, so that this list only shrinks.
KNOWN_UPWARD: dict = {}

TRACED_JOBS = {
    "deepseek-v3": dict(model="deepseek-v3", gpus=256, pp=4, ep=8),
    "llama3-70b": dict(model="llama3-70b", gpus=64, tp=8),
}


# --------------------------------------------------------------------- function length
def _cost_model_paths() -> list[Path]:
    paths = []
    for pattern in COST_MODEL_FILES:
        found = sorted(ROOT.glob(pattern))
        assert found, f"no planner/{pattern}: update COST_MODEL_FILES"
        paths += found
    return paths


def function_lengths(path: Path) -> list[tuple[str, int]]:
    """(qualified name, lines from the first decorator to the last line) of every function and
    method in a file, nested ones included."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((prefix + child.name, child.end_lineno - start + 1))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return out


def test_function_lengths_are_measured(tmp_path):
    """Not vacuous: the walk finds methods and nested functions, and the files exist."""
    src = tmp_path / "m.py"
    src.write_text("class A:\n    @staticmethod\n    def f():\n        def g():\n            return 1\n        return g\n")
    assert dict(function_lengths(src)) == {"A.f": 5, "A.f.g": 2}
    names = {name for p in _cost_model_paths() for name, _ in function_lengths(p)}
    assert {"step_time", "collective_time", "simulate", "stage_memory_terms"} <= names


def test_no_long_functions_in_the_cost_models():
    rows = []
    for p in _cost_model_paths():
        for name, n in function_lengths(p):
            rows.append((n, f"{p.relative_to(ROOT.parent)}:{name}"))
    long = sorted((r for r in rows if r[0] > MAX_FUNCTION_LINES), reverse=True)
    print(f"\nlongest cost-model functions (limit {MAX_FUNCTION_LINES} lines):")
    for n, where in sorted(rows, reverse=True)[:8]:
        print(f"  {n:4d}  {where}")
    assert not long, "functions over %d lines: %s" % (
        MAX_FUNCTION_LINES, ", ".join(f"{where} ({n})" for n, where in long))


# --------------------------------------------------------------------- the walk
def _planner_module(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name == "planner" or name.startswith("planner.") else None


def trace_evaluate(fields: dict):
    """The calls between planner modules during one explain.evaluate: a list of (caller
    module, caller function, callee module, callee function, callback) in call order.

    The caller is the nearest planner frame below the callee (numpy or functools in between
    do not count). callback: the caller called a function it holds in a local variable (one
    handed to it), not one it named. Caches are warmed by a first evaluation, and the traced
    one runs on freshly resolved settings, so that the walk is the same in any test order."""
    settings, plan, _ = resolve(Job(**fields))
    evaluate(settings, plan)
    settings, plan, _ = resolve(Job(**fields))
    calls = []

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _planner_module(frame)
        if callee is None:
            return
        caller = frame.f_back
        while caller is not None and _planner_module(caller) is None:
            caller = caller.f_back
        if caller is None or _planner_module(caller) == callee:
            return
        code = frame.f_code
        callback = any(getattr(v, "__code__", None) is code for v in caller.f_locals.values())
        calls.append((_planner_module(caller), caller.f_code.co_name, callee, code.co_name, callback))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        evaluate(settings, plan)
    finally:
        sys.setprofile(previous)
    return calls


def upward_calls(calls) -> Counter:
    """{(caller module.function, callee module.function): times} for calls into a higher rank."""
    unranked = sorted({m for c in calls for m in (c[0], c[2])} - RANKS.keys())
    assert not unranked, f"give these modules a rank in RANKS: {unranked}"
    return Counter(
        (f"{a}.{fa}", f"{b}.{fb}") for a, fa, b, fb, _ in calls if RANKS[b] > RANKS[a]
    )


def entries(calls) -> Counter:
    """How often each module was entered from another one."""
    return Counter(c[2] for c in calls)


def _report(name, calls):
    """Print the entries per module (with the functions entered, for the cost models and
    step) and the upward calls."""
    print(f"\n{name}: {len(calls)} calls between modules; entries per module:")
    for mod, n in sorted(entries(calls).items(), key=lambda kv: (-RANKS.get(kv[0], 0), kv[0])):
        funcs = Counter(c[3] for c in calls if c[2] == mod)
        detail = ", ".join(f"{f} {k}" for f, k in funcs.most_common()) if RANKS.get(mod, 0) >= 70 else ""
        print(f"  {RANKS.get(mod, '?')!s:>3}  {mod:26s} {n:4d}  {detail}".rstrip())
    callbacks = {(f"{a}.{fa}", f"{b}.{fb}") for a, fa, b, fb, cb in calls if cb}
    for (a, b), n in sorted(upward_calls(calls).items()):
        known = "known" if (a, b) in KNOWN_UPWARD else "NEW"
        kind = "callback" if (a, b) in callbacks else "call"
        print(f"  upward ({known} {kind}): {a} -> {b} x{n}")


@pytest.fixture(scope="module")
def walks():
    return {name: trace_evaluate(fields) for name, fields in TRACED_JOBS.items()}


def test_the_trace_sees_the_walk(walks):
    """Not vacuous: the trace records explain's calls into the cost models and theirs below."""
    for calls in walks.values():
        pairs = {(f"{a}.{fa}", f"{b}.{fb}") for a, fa, b, fb, _ in calls}
        assert ("planner.explain.evaluate", "planner.step.step_time") in pairs
        assert ("planner.explain.evaluate", "planner.memory.stage_memory_terms") in pairs
        assert any(a == "planner.step" and b == "planner.comm" for a, _, b, _, _ in calls)
        assert any(a.startswith("planner.layers") or b.startswith("planner.layers") for a, _, b, _, _ in calls)
    # and the rank test would catch a call up
    assert upward_calls([("planner.layers.common", "f", "planner.step", "g", False)])


@pytest.mark.parametrize("name", TRACED_JOBS)
def test_a_plans_walk_goes_down(walks, name):
    calls = walks[name]
    _report(name, calls)
    new = {k: n for k, n in upward_calls(calls).items() if k not in KNOWN_UPWARD}
    assert not new, "calls up the layers: " + "; ".join(f"{a} -> {b} x{n}" for (a, b), n in sorted(new.items()))


def test_known_upward_calls_still_happen(walks):
    """A fixed one leaves KNOWN_UPWARD with it."""
    seen = set()
    for calls in walks.values():
        seen |= upward_calls(calls).keys()
    gone = sorted(set(KNOWN_UPWARD) - seen)
    assert not gone, f"no longer called, remove from KNOWN_UPWARD: {gone}"


def test_the_walk_does_not_grow_with_depth_or_stages():
    """The same entries per module for 32 and 126 layers, and for 4 and 8 pipeline stages: the
    cost models price layer kinds as arrays, they do not walk the model layer by layer. (The
    stages are priced as first, middle and last; with one or two stages there is no middle
    stage to price, so those walks are shorter, never longer.)"""
    small = entries(trace_evaluate(dict(model="llama3-8b", gpus=64, tp=8)))
    deep = entries(trace_evaluate(dict(model="llama3-405b", gpus=1024, tp=8)))
    assert small == deep
    four = entries(trace_evaluate(dict(model="llama3-8b", gpus=64, tp=2, pp=4)))
    eight = entries(trace_evaluate(dict(model="llama3-405b", gpus=1024, tp=8, pp=8)))
    assert four == eight
    two = entries(trace_evaluate(dict(model="llama3-8b", gpus=64, tp=4, pp=2)))
    assert all(two[m] <= eight[m] for m in two) and two != eight
