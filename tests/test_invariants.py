"""Invariants of the cost model over many plans (issue 12, "what it must show"):
costs finite and non-negative; exposed <= total for every overlapped term; more sharding
never raises model-state memory; full recompute never raises activation memory; fit's top
plan fits and its rows are ordered by the ranking key; explain equals a fit row through the
CLI, calibration included (the printed command, run as printed).

Plans come from the search space itself (space.build_space: every candidate that breaks no
rule), for jobs hypothesis draws from the catalog (models, stacks, GPU counts, sequence
lengths, hardware); each example evaluates a bounded random sample of the candidates in one
vectorized call, so the whole file runs in a few seconds (derandomized: the same examples
every run)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings as hsettings, strategies as st

from planner import memory as mem
from planner.explain import evaluate
from planner.plan import FSDP, HSDP, NONE, RC_FULL, RC_NONE, ZERO1, ZERO2
from planner.schema import Job
from planner.search import fit, rank_key
from planner.space import OK, SpaceOptions, build_space, settings_for, variant_choices
from planner.step import _hide

MODELS = ("llama3-8b", "llama2-13b", "llama3-70b", "gpt3-175b", "mpt-7b", "megatron-gpt-1.7b")
STACKS = ("megatron", "torchtitan", "llm-foundry", "megatron-deepspeed", "litgpt-benchmark")
HARDWARE = ("h100-sxm", "a100-sxm-80gb", "b200", "gb200-nvl72")
SAMPLE = 400  # candidates evaluated per example
HYP = dict(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

jobs = st.builds(
    dict,
    model=st.sampled_from(MODELS),
    stack=st.sampled_from(STACKS),
    hardware=st.sampled_from(HARDWARE),
    gpus=st.sampled_from((8, 16, 64, 256, 1024)),
    seq_len=st.sampled_from((1024, 2048, 4096, 8192)),
    global_batch=st.sampled_from((64, 256, 1024)),
    seed=st.integers(0, 2**16),
)


def _space_sample(j: dict):
    """(settings, plans) of up to SAMPLE random valid candidates of the job's search space,
    every recompute mode and stack variant, rank order 0. A model the stack's code does not build (start-up rule
    STACK_LAYER_KIND, docs/stack_models.md: GPT-3 / MPT on torchtitan or litgpt) is no example."""
    from planner.catalog import load_model, load_stack
    from planner.startup import layer_gaps

    assume(not layer_gaps(load_model(j["model"]), load_stack(j["stack"])))
    job = Job(model=j["model"], stack=j["stack"], hardware=j["hardware"], gpus=j["gpus"], seq_len=j["seq_len"],
              global_batch=j["global_batch"])
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, job.precision, SpaceOptions(), variant_choices(settings.stack, job))
    ok = np.flatnonzero(space.codes == OK)
    if len(ok) == 0:
        return settings, space, None
    rng = np.random.default_rng(j["seed"])
    b = rng.choice(ok, size=min(SAMPLE, len(ok)), replace=len(ok) < SAMPLE)
    r = rng.integers(0, len(space.recompute), size=len(b))
    v = rng.integers(0, len(space.variants), size=len(b))
    plan = space.plans(b, r, None, 0)
    valid = np.ones(len(b), dtype=bool)
    for k in range(len(space.variants)):  # only variants a plan can run
        sel = v == k
        valid[sel] = space.variant_ok(plan.take(np.flatnonzero(sel)), k)
    v = np.where(valid, v, 0)
    return settings, space, space.plans(b, r, None, v)


@given(jobs)
@hsettings(**HYP)
def test_costs_are_finite_non_negative_and_exposed_at_most_total(j):
    settings, _, plan = _space_sample(j)
    if plan is None:
        return
    est = evaluate(settings, plan)
    for name, t in list(est.memory.items()) + list(est.time.items()):
        a = np.asarray(t, dtype=np.float64)
        assert np.all(np.isfinite(a)), name
        assert np.all(a >= 0.0), name
    for k, v in est.throughput.items():
        if k != "peak_tflops":
            assert np.all(np.isfinite(v) & (np.asarray(v) >= 0)), k
    assert np.all(est.throughput["mfu"] < 1.0) and np.all(est.throughput["hfu"] < 1.0)
    extra = est.time_extra
    tol = 1e-12
    # DP: exposed <= total traffic time; CP: exposed <= the ring's total
    assert np.all(est.time.dp_comm_exposed <= extra["dp_comm_s"] * (1 + tol))
    assert np.all(est.time.cp_comm <= extra["cp_comm_total_s"] * (1 + tol))
    # TP overlap never costs more than the same plan's exposed collectives
    on = plan.tpo > 0
    if np.any(on):
        off = plan.take(np.flatnonzero(on))
        t_on = est.time.tp_comm[on]
        off.tpo = np.zeros_like(off.tpo)
        t_off = evaluate(settings, off).time.tp_comm
        assert np.all(t_on <= t_off * (1 + tol))
    # the memory reported is every stage's largest total
    stages = mem.stage_memory_terms(settings, plan)
    top = np.maximum.reduce([s.total for s in stages.values()])
    assert np.allclose(est.memory.total, top, rtol=0, atol=0)


@given(total=st.floats(0, 1e6), window=st.floats(0, 1e6), x=st.floats(0, 1))
@hsettings(max_examples=200, deadline=None, derandomize=True)
def test_hide_never_exposes_more_than_the_transfer(total, window, x):
    h = float(_hide(np.float64(total), np.float64(window), x))
    assert 0.0 <= h <= total
    assert h >= total - window - 1e-9 * max(total, 1.0)  # what outlasts the window always shows


def _level_mode(settings, level: str, smode):
    """The stack's first sharding mode of `level` (stack_db runs.sharding; PlanArrays.smode), else the plan's own."""
    runs = settings.stack.runs
    i = next((k for k, m in enumerate(runs.sharding) if m.level == level), None) if runs is not None else None
    return smode.copy() if i is None else np.full_like(smode, i)


def _stage_states(settings, plan, code, level, shard):
    """Each stage's model states (stage_memory_terms: the same stage at every sharding, not the heaviest, which the
    optimizer step's moment [sg] may move to a stage of more parameters) with sharding `code` run as its level's mode."""
    p = plan.take(np.arange(len(plan.tp)))
    p.sharding, p.smode, p.shard = np.full_like(p.sharding, code), _level_mode(settings, level, p.smode), shard(p)
    return {k: t.sum(*mem.STATE_TERMS) for k, t in mem.stage_memory_terms(settings, p).items()}


@given(jobs)
@hsettings(**HYP)
def test_more_sharding_never_raises_model_state_memory(j):
    settings, _, plan = _space_sample(j)
    if plan is None:
        return
    pc_terms = [_stage_states(settings, plan, code, level, lambda p: p.dp.copy())
                for code, level in ((NONE, "none"), (ZERO1, "zero1"), (ZERO2, "zero2"), (FSDP, "fsdp"))]
    for less, more in zip(pc_terms, pc_terms[1:]):
        assert all(np.all(more[k] <= less[k] * (1 + 1e-12)) for k in less)
    # HSDP with a shard group smaller than dp keeps more than FSDP over all of dp, less than none
    even = np.flatnonzero(plan.dp % 2 == 0)
    if len(even):
        hsdp = _stage_states(settings, plan.take(even), HSDP, "hsdp", lambda p: p.dp // 2)
        assert all(np.all(hsdp[k] >= pc_terms[3][k][even] * (1 - 1e-12)) for k in hsdp)
        assert all(np.all(hsdp[k] <= pc_terms[0][k][even] * (1 + 1e-12)) for k in hsdp)


@given(jobs)
@hsettings(**HYP)
def test_full_recompute_never_raises_activation_memory(j):
    settings, _, plan = _space_sample(j)
    if plan is None:
        return

    def act(code):
        p = plan.take(np.arange(len(plan.tp)))
        p.recompute = np.full_like(p.recompute, code)
        # the same stage for both: the activations of each stage, first and last
        return [s.sum(*mem.ACTIVATION_TERMS) for s in mem.stage_memory_terms(settings, p).values()]

    for none, full in zip(act(RC_NONE), act(RC_FULL)):
        assert np.all(full <= none * (1 + 1e-12))


@given(st.sampled_from((("llama3-8b", 8), ("llama2-13b", 16), ("llama3-8b", 64), ("llama3-70b", 32))),
       st.sampled_from(("time", "memory", "cost")), st.sampled_from(("megatron", "torchtitan")))
@hsettings(max_examples=6, deadline=None, derandomize=True)
def test_fit_top_plan_fits_and_rows_follow_the_key(model_gpus, objective, stack):
    model, gpus = model_gpus
    res = fit(Job(model=model, gpus=gpus, global_batch=256, seq_len=4096, stack=stack), objective=objective, top=8)
    rows = res.rows
    assert rows[0]["memory"]["fits"] and all(r["memory"]["fits"] for r in rows)

    def key(r):
        t, m = r["time"]["step_s"], r["memory"]["total_bytes"]
        if objective == "time":
            return (rank_key(t), rank_key(m))
        if objective == "memory":
            return (rank_key(m), rank_key(m), rank_key(t))
        return (rank_key(gpus * t / (r["plan"]["global_batch"] * r["plan"]["seq_len"])), rank_key(m))

    keys = [tuple(float(x) for x in key(r)) for r in rows]
    assert keys == sorted(keys)


def test_explain_equals_the_fit_row_through_the_cli_with_calibration(cli, tmp_path):
    """The command `fit` prints under its table, run as printed, gives the fit row's JSON:
    every memory, time and throughput figure, with the calibration profile in use."""
    from pathlib import Path

    log = Path(__file__).parent / "data" / "nccl_logs" / "h100_8gpu_allreduce_aws-p5-batch.txt"
    prof = tmp_path / "p.yaml"
    assert cli("calibrate", "nccl", log, "--nodes", "1", "--hardware", "h100-sxm", "-o", prof).exit_code == 0
    base = ["--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--no-sequence-parallel", "--calibration", prof]
    table = cli("fit", *base, "--top", "3")
    assert table.exit_code == 0, table.stderr
    line = next(ln for ln in table.stdout.splitlines() if "row 1 in full: planner explain" in ln)
    cmd = shlex.split(line.split("row 1 in full: planner ", 1)[1])
    rows = json.loads(cli("fit", *base, "--top", "3", "--format", "json").stdout)
    got = json.loads(cli(*cmd, "--format", "json").stdout)
    want = rows[0]
    assert want["calibration"]["used"]
    for k in ("plan", "params", "memory", "flops", "time", "throughput", "calibration"):
        assert got[k] == want[k], k
