"""`planner fit` (planner/space.py, planner/search.py, planner/cli/fit.py).

What is checked:
- the vectorized constraint codes are resolve()'s rules: resolve raises exactly where a code
  is set, with that rule's message, on candidates built to break every rule;
- every fit row is `explain`'s JSON for the same settings, number for number;
- a plain Python loop over every plan of a small space (4-layer model, 64 GPUs) finds the
  same counts, the same feasible set, the same step times and the same best plans;
- the seed's plans fit (llama3-70b TP 8 x FSDP 512 on 4,096; llama3-405b TP 8 x PP 16 x DP
  128 on 16,384, Llama 3 Table 4) and the search's winner is no slower;
- nothing fits: exit 1 with the closest plan, its overflow and the largest component;
- the facts the search's shortcuts rest on (comm.apply_unique gives fn's numbers; a rank
  order changes only communication; equivalent orders give the same step time).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner import memory as mem
from planner.catalog import load_hardware, load_model
from planner.comm import AXES, ORDER_CODES, ORDER_NAMES, apply_unique, axis_strides, distinct
from planner.errors import NoFitError, PlannerError
from planner.plan import PlanArrays, resolve
from planner.schema import Job
from planner.search import explain_args, fit, fit_row_job, load_fit_rows, row_job
from planner.space import (
    BATCH, OK, REASONS, SpaceOptions, constraint_codes, distinct_orders, layer_slack, settings_for,
)
from planner.step import step_time


TINY = str(Path(__file__).parent / "data" / "tiny-fit.yaml")
GiB = 2.0**30


# ------------------------------------------------------------------ constraints = resolve
RULE_TEXT = {  # a piece of resolve's message for each rule
    1: "does not divide --gpus", 2: "does not divide into dp", 3: "attention heads", 4: "KV heads",
    5: "does not divide seq_len", 6: "more stages than", 7: "needs the interleaved schedule",
    8: "needs pp >= 2 and vpp >= 2", 9: "divisible by pp", 10: "exceeds the", 11: "tp_comm_overlap needs",
    12: "sequence_parallel needs tp > 1", 13: "does not divide dp", 14: "only used with sharding hsdp",
}


RULES_MODEL = """name: rules-test
num_layers: 4
hidden_size: 1536
ffn_hidden_size: 4096
num_attention_heads: 12
num_kv_heads: 4
vocab_size: 32000
gated_mlp: true
norm: rmsnorm
max_seq_len: 1000
sources: ["synthetic shape for the constraint test: 12 heads, 4 KV heads, 1,000-token sequences"]
"""


# the orders the candidates take: Megatron's default, its --use-tp-pp-dp-mapping, and one it
# does not build (STACK_ORDER)
CAND_ORDERS = ("tp-cp-dp-pp", "tp-cp-pp-dp", "dp-tp-cp-pp")


def _random_candidates(n, rng, gpus, stack):
    """Candidates that break every rule now and then (12 heads and 4 KV heads: tp 6 divides
    the heads but not the KV heads; 4 layers; seq 1,000: cp 3 does not divide it, cp 8 does
    but 2 x 8 does not), each with one of the stack's sharding modes of its level
    (PlanArrays.smode, stack_db runs.sharding) and one of CAND_ORDERS."""
    tp = rng.choice([1, 2, 3, 4, 6, 8], n)
    cp = rng.choice([1, 2, 3, 4, 8], n, p=[0.4, 0.2, 0.1, 0.1, 0.2])
    pp = rng.choice([1, 2, 4, 8], n)
    inner = tp * cp * pp
    dp = np.where(gpus % inner == 0, gpus // np.maximum(inner, 1), 0)
    sharding = rng.integers(0, 5, n)
    shard = np.where(sharding == 4, rng.choice([1, 2, 3, 4, 8], n), np.where(rng.random(n) < 0.1, 5, dp))
    levels = ("none", "zero1", "zero2", "fsdp", "hsdp")
    modes = [[i for i, m in enumerate(stack.runs.sharding) if m.level == lv] for lv in levels]
    smode = np.array([rng.choice(modes[c]) for c in sharding])
    order = rng.choice([ORDER_CODES[o] for o in CAND_ORDERS], n, p=[0.6, 0.3, 0.1])
    return PlanArrays(tp=tp, cp=cp, pp=pp, vpp=rng.choice([1, 2, 3], n), dp=dp, mbs=rng.choice([1, 2, 4], n),
                      gbs=np.full(n, 48), seq=np.full(n, 1000), sharding=sharding, shard=shard,
                      recompute=np.zeros(n, dtype=int), sp=rng.integers(0, 2, n), schedule=rng.choice([0, 1, 2, 3], n, p=[0.1, 0.4, 0.4, 0.1]),
                      precision=np.zeros(n, dtype=int), order=order, smode=smode)


@pytest.mark.parametrize("overlap", [False, True])
def test_constraint_codes_are_resolves_rules(overlap, tmp_path):
    """On the megatron stack, with its sharding modes and rank orders: the plan rules (1-18),
    what the stack runs (19-23: here its schedules and orders) and Megatron's start-up rules
    (planner/startup.py, 24 on) are resolve's, case by case."""
    from planner.startup import BY_CODE, CODES

    gpus = 48
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_MODEL)
    base = Job(model=str(path), gpus=gpus, global_batch=48, tp_comm_overlap=overlap)
    if overlap:
        cand_overlap = 1
    else:
        cand_overlap = 0
    settings, _, _, _ = settings_for(base)
    stack = settings.stack
    rng = np.random.default_rng(7)
    cand = _random_candidates(3000, rng, gpus, stack)
    cand.tpo = np.full(len(cand.tp), cand_overlap)
    codes = constraint_codes(settings, cand)
    seen = Counter()
    sched = {0: "gpipe", 1: "1f1b", 2: "interleaved", 3: "zb-h1"}
    shard_names = {0: "none", 1: "zero1", 2: "zero2", 3: "fsdp", 4: "hsdp"}
    text = {**RULE_TEXT, 20: "does not run the", 21: "does not build rank order",
            **{c: r.text for c, r in BY_CODE.items()}}
    for i in range(len(codes)):
        g = lambda f: int(getattr(cand, f)[i])  # noqa: E731
        sh = g("sharding")
        shard_group = g("shard") if (sh == 4 or g("shard") != g("dp")) else None
        job = base.model_copy(update=dict(
            tp=g("tp"), cp=g("cp"), pp=g("pp"), vpp=g("vpp"), micro_batch=g("mbs"), sharding=shard_names[sh],
            shard_group=shard_group, sequence_parallel=bool(g("sp")), schedule=sched[g("schedule")],
            sharding_mode=stack.runs.sharding[g("smode")].name, rank_order=ORDER_NAMES[g("order")]))
        code = int(codes[i])
        seen[code] += 1
        if code == OK:
            _, plan, _ = resolve(job)
            assert int(plan.dp) == g("dp") and int(plan.smode) == g("smode")
        else:
            with pytest.raises(PlannerError) as e:
                resolve(job)
            assert text[code] in e.value.message, (code, REASONS[code], e.value.message)
    # every rule is exercised (rule 11 only exists with TP-communication overlap), except:
    # 15 (async TP without torch.compile) needs a stack that requires it: test_stacks.py;
    # 16 (embedding/loss counted in the split) and 17/18 (EP) need those fields: the MoE tests;
    # 19 (a level the stack lacks), 22 (a degree above its largest), 23 (expert TP): megatron has
    # every level, no largest degree and expert TP; MEGATRON_PP_SPLIT: 4 layers leave no split
    # that rules 6 and 10 let through overdrawn (tests/test_runnable_plans.py has one)
    want = set(range(0, 15)) | {20, 21, CODES["MEGATRON_TORCH_FSDP2"], CODES["MEGATRON_TP_PP_DP_MAPPING"],
                                CODES["MEGATRON_CP_SEQ"]}
    assert set(seen) == want - (set() if overlap else {11}), seen
    assert seen[OK] > 20


# ------------------------------------------------------------------ rows = explain
def test_every_row_is_explain(explain):
    job = Job(model="llama3-70b", gpus=4096, tokens=15e12)
    res = fit(job, top=10)
    assert len(res.rows) == 10
    steps = [r["time"]["step_s"] for r in res.rows]
    assert steps == sorted(steps)
    for row in res.rows:
        j = row_job(job, row)
        _, _, _, js = explain(**j.model_dump())
        assert {k: v for k, v in row.items() if k != "warnings"} == js  # identical memory, time, everything
        assert row["memory"]["fits"]


def test_fit_json_reproduced_by_explain_cli(cli, explain, tmp_path):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--top", "3", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 3
    job = Job(model="llama3-8b", gpus=64)
    for row in rows:
        e = cli("explain", *explain_args(job, row), "--format", "json")
        assert e.exit_code == 0, e.stderr
        assert json.loads(e.stdout) == row
    # a saved fit, row 2, back into a Job (what `explain --from-fit fit.json --row 2` needs)
    f = tmp_path / "fit.json"
    f.write_text(r.stdout)
    j = fit_row_job(load_fit_rows(f), 2)
    _, _, _, js = explain(**j.model_dump())
    assert js == {k: v for k, v in rows[1].items() if k != "warnings"}
    with pytest.raises(PlannerError, match="row 4 does not exist"):
        fit_row_job(load_fit_rows(f), 4)


# ------------------------------------------------------------------ brute force
def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def brute_force(gpus, hardware, gbs, max_cp, max_mbs):
    """Every plan of the documented space, one at a time: resolve() says whether it is
    valid, memory_terms whether it fits; the step time of the fitting plans comes from
    step_time on all of them stacked (one call a padded vocabulary, each plan's model as resolve pads it at
    its tp; no blocks, no pruning).

    The rank orders are those the stack builds (the megatron stack: Megatron's default
    tp-cp-dp-pp and --use-tp-pp-dp-mapping's tp-cp-pp-dp, stack_db runs.rank_orders), less the
    mapping where Megatron refuses it for the mesh: with pp > 1 it needs expert-TP x EP = TP x CP,
    i.e. cp 1 on this dense model (parallel_state.py; planner/startup.py). An order that the
    stack does not build for a mesh is not a plan of the space (fit does not consider it)."""
    model, hw = load_model(TINY), load_hardware(hardware)
    L, seq = model.num_layers, model.max_seq_len
    base = Job(model=TINY, gpus=gpus, hardware=hardware, global_batch=gbs)
    settings, _, _, _ = settings_for(base)
    usable = mem.capacity(settings)[1]
    assert [o.order for o in settings.stack.runs.rank_orders] == ["tp-cp-dp-pp", "tp-cp-pp-dp"]
    counts = Counter()
    feasible, models = {}, {}
    for tp, cp, pp in itertools.product(_divisors(hw.nvlink_domain), [c for c in _divisors(seq) if c <= max_cp], range(1, L + 1)):
        if gpus % (tp * cp * pp):
            counts["considered"] += 1
            counts["broke"] += 1
            continue
        dp = gpus // (tp * cp * pp)
        sizes = dict(tp=tp, cp=cp, pp=pp, dp=dp)
        seen, mesh_orders = set(), []
        orders = ["tp-cp-dp-pp"] + (["tp-cp-pp-dp"] if pp == 1 or cp == 1 else [])
        # arrangements that differ only where a size-1 axis sits are one plan, named by the
        # lowest code (comm.ORDER_CODES), as fit names it
        for o in sorted(orders, key=ORDER_CODES.get):
            st = axis_strides(o, **sizes)
            sig = tuple(int(st[a]) if sizes[a] > 1 else 0 for a in AXES)
            if sig not in seen:
                seen.add(sig)
                mesh_orders.append(o)
        vpps = [1] if pp == 1 else range(1, L // pp + 1)
        for vpp in [v for v in vpps if pp * v * math.ceil(L / (pp * v)) - L <= 2]:
            for mbs in [m for m in _divisors(gbs) if m <= max_mbs]:
                # each level's default mode, and --use-torch-fsdp2 beside Megatron-FSDP's optim_grads_params (priced
                # apart: the latter's reduce-scatter queue, memory.py [rs]; space.mode_heads)
                shardings = [(s, None, None) for s in ("none", "zero1", "zero2", "fsdp")] + [("fsdp", None, "torch_fsdp2")]
                shardings += [("hsdp", g, None) for g in range(2, dp) if dp % g == 0]
                for (sharding, group, mode), sp, rc, order in itertools.product(
                        shardings, [True, False] if tp > 1 else [False], ("none", "selective", "full"), mesh_orders):
                    counts["considered"] += 1
                    job = base.model_copy(update=dict(
                        tp=tp, cp=cp, pp=pp, vpp=vpp, micro_batch=mbs, sharding=sharding, shard_group=group,
                        recompute=rc, sequence_parallel=sp, rank_order=order, sharding_mode=mode))
                    try:
                        s, plan, _ = resolve(job)
                    except PlannerError:
                        counts["broke"] += 1
                        # the mesh divides the GPUs (MESH passes), so one whose dp x micro-batch does not divide the
                        # batch breaks BATCH, resolve's second rule (plan.rule_codes), whatever else it holds
                        counts["batch"] += bool(gbs % (dp * mbs))
                        continue
                    total = float(mem.memory_terms(s, plan)[0].total)
                    if total <= usable:
                        counts["feasible"] += 1
                        key = (tp, cp, pp, vpp, dp, mbs, sharding, group, rc, sp, s.stack.runs.sharding[int(plan.smode)].name,
                               order)
                        feasible[key] = [plan, total]
                        models[key] = s.model  # its vocabulary padded at its tp (stack_db megatron vocab_padding)
                    else:
                        counts["did_not_fit"] += 1
    counts["least_memory_plain"] = min(feasible[k][1] for k in feasible)  # without TP overlap: the closest plan's
    # one call per padded vocabulary (the plans of one tp's rows: Megatron pads 128 x tp), with that model
    for rows in sorted({m.vocab_size for m in models.values()}):
        keys = [k for k in feasible if models[k].vocab_size == rows]
        st = replace(settings, model=models[keys[0]])
        stacked = PlanArrays(**{f: np.array([getattr(feasible[k][0], f) for k in keys]) for f in PlanArrays.__dataclass_fields__})
        step = step_time(st, stacked)[0].total
        # the stack's options are part of a plan: megatron can overlap TP communication (with SP,
        # tp > 1), and fit keeps the faster of off and on (space.variant_choices) where it fits with
        # TP overlap's own buffers (memory.tp_overlap_bytes); the plan's memory is then the overlap's
        can = (stacked.sp > 0) & (stacked.tp > 1)
        stacked.tpo = np.where(can, 1, 0)
        mem_on = mem.memory_terms(st, stacked)[0].total
        step_on = step_time(st, stacked)[0].total
        better = can & (mem_on <= usable) & (step_on < step)
        counts["overlap_chosen"] += int(better.sum())
        step = np.where(better, step_on, step)
        for k, t, m_on, b in zip(keys, step, mem_on, better):
            if b:
                feasible[k][1] = float(m_on)
            feasible[k].append(float(t))
    return counts, feasible


def test_brute_force_batch_counted_without_listing():
    """build_space counts the (mesh, split, micro-batch) pairs whose dp x micro-batch does not divide the global
    batch under BATCH arithmetically (their multiplicity, not listed): the same counts as the plain loop. On 16
    GPUs (dp 1, 2, 4, 8, 16) and a batch of 12 sequences, dp 8 and 16 break BATCH at every micro-batch and dp 4 at
    micro-batch 2 (4 x 2 = 8 does not divide 12): a space that has plans and BATCH breaks both."""
    gpus, hw, gbs = 16, "a100-sxm-40gb", 12
    counts, _ = brute_force(gpus, hw, gbs, max_cp=2, max_mbs=2)
    res = fit(Job(model=TINY, gpus=gpus, hardware=hw, global_batch=gbs), opts=SpaceOptions(max_cp=2, max_micro_batch=2),
              top=5, keep_feasible=True)
    c = res.counts
    assert (c.considered, c.broke_constraint, c.did_not_fit, c.feasible) == (
        counts["considered"], counts["broke"], counts["did_not_fit"], counts["feasible"])
    assert c.reasons[REASONS[BATCH]] == counts["batch"] > 100 and counts["feasible"] > 100


def test_no_plan_on_16m_gpus_builds_one_space(monkeypatch):
    """16,000,000 = 2^10 x 5^6 GPUs and a batch of 32 sequences: tp (divisors of 8) and cp (of the 8,192 tokens) are
    powers of two and pp <= 80 layers holds at most 5^2, so dp = gpus / (tp cp pp) holds 5^4 = 625 or more and
    divides no batch of 32 (nor any within NEAREST_TRIES of it, nor of any GPU count within NEAREST_TRIES: none
    is 2^a x (pp <= 82) with 2^a <= 8 x 8,192 x 32). fit says so with the counts of every candidate by its
    reason, and the nearest-working search behind its hint decides every one of its 1,567 tries by
    space.batch_divides without building a space: build_space runs once, for the search itself."""
    import planner.search as search
    from planner.space import batch_divides, build_space

    job = Job(model="llama3-70b", gpus=16_000_000, global_batch=32)
    settings, gbs, seq, _ = settings_for(job)
    assert (gbs, seq) == (32, 8192) and not batch_divides(settings, gbs, seq)
    assert batch_divides(replace(settings, gpus=16_000_000 // 625), gbs, seq)  # dp 1 on tp 8 x cp 8,192 x pp ...
    built = []
    monkeypatch.setattr(search, "build_space", lambda *a, **k: built.append(a[1]) or build_space(*a, **k))
    with pytest.raises(NoFitError) as e:
        fit(job)
    assert len(built) == 1
    # the listing before this change counted the same: every candidate once, by the first rule it breaks
    assert ("no plan for llama3-70b on 16,000,000 x h100-sxm satisfies the constraints (1,351,394 candidates; global "
            "batch does not divide into dp x micro-batch: 1,347,318; tp*cp*pp does not divide the GPU count: 4,076; "
            "2,512 pipeline splits (pp, vpp) left out") in str(e.value)
    assert 1_347_318 + 4_076 == 1_351_394  # nothing else broken: no mesh passes BATCH
    assert "GPU counts near" not in e.value.hint and "global batches near" not in e.value.hint


def _key(row):
    p = row["plan"]
    return (p["tp"], p["cp"], p["pp"], p["vpp"], p["dp"], p["micro_batch"], p["sharding"], p["shard_group"],
            p["recompute"], p["sequence_parallel"], p["sharding_mode"], p["rank_order"])


@pytest.fixture(scope="module")
def small():
    gpus, hw, gbs = 64, "a100-sxm-40gb", 64
    counts, feasible = brute_force(gpus, hw, gbs, max_cp=2, max_mbs=2)
    job = Job(model=TINY, gpus=gpus, hardware=hw, global_batch=gbs)
    opts = SpaceOptions(max_cp=2, max_micro_batch=2)
    return job, opts, counts, feasible


def test_brute_force_same_counts_and_feasible_set(small):
    job, opts, counts, feasible = small
    res = fit(job, opts=opts, top=5, keep_feasible=True)
    c = res.counts
    assert (c.considered, c.broke_constraint, c.did_not_fit, c.feasible) == (
        counts["considered"], counts["broke"], counts["did_not_fit"], counts["feasible"])
    # a real test: every branch taken many times (76 plans over the 0.9 x 39.42 GiB an A100 40GB
    # reports to CUDA, hardware_db hbm_visible_GiB; 100+ over the datasheet's 0.9 x 40e9 B)
    assert counts["did_not_fit"] > 50 and counts["broke"] > 100 and counts["feasible"] > 1000
    assert counts["overlap_chosen"] > 100  # plans whose memory is the TP-overlap variant's
    from planner.comm import ORDER_NAMES
    from planner.plan import RECOMPUTE_NAMES, SHARDING_NAMES, HSDP
    job_modes = [m.name for m in settings_for(job)[0].stack.runs.sharding]
    got = {}
    # one space a padded vocabulary with fitting plans (search.vocab_spaces): tp 1 and 2 (128,256 rows), tp 4 (128,512)
    assert sorted(f["space"].settings.model.vocab_size for f in res.feasible) == [128256, 128512]
    for f in res.feasible:
        space = f["space"]
        plans = space.plans(f["base"], f["rc"], f["order"], f["var"])
        for i in range(len(f["step"])):
            g = lambda n: int(getattr(plans, n)[i])  # noqa: E731
            key = (g("tp"), g("cp"), g("pp"), g("vpp"), g("dp"), g("mbs"), SHARDING_NAMES[g("sharding")],
                   g("shard") if g("sharding") == HSDP else None, RECOMPUTE_NAMES[g("recompute")], bool(g("sp")),
                   job_modes[g("smode")], ORDER_NAMES[g("order")])
            got[key] = (float(f["memory"][i]), float(f["step"][i]))
    assert set(got) == set(feasible)
    for k, (m, t) in got.items():
        assert m == feasible[k][1] and t == feasible[k][2], k


@pytest.mark.parametrize("objective", ["time", "memory"])
def test_brute_force_same_best_plans(small, objective):
    job, opts, counts, feasible = small
    res = fit(job, opts=opts, top=5, objective=objective)  # with the branch-and-bound pruning
    # the reference ranking: objective, then memory (then time); one row per plan and step time
    items = sorted(feasible.items(), key=lambda kv: (kv[1][2], kv[1][1]) if objective == "time" else (kv[1][1], kv[1][2]))
    ref, seen = [], set()
    for k, (_, m, t) in items:
        if (k[:-1], t) not in seen:
            seen.add((k[:-1], t))
            ref.append((k, m, t))
    got = [(_key(r), r["memory"]["total_bytes"], r["time"]["step_s"]) for r in res.rows]
    assert [(m, t) for _, m, t in got] == [(m, t) for _, m, t in ref[:5]]
    for k, m, t in got:
        assert feasible[k][1:] == [m, t]


def test_brute_force_closest_when_nothing_fits(small):
    job, opts, counts, feasible = small
    tight = job.model_copy(update=dict(reserve_GiB=36.0))  # leaves ~-2.5 GiB: nothing fits
    with pytest.raises(NoFitError) as e:
        fit(tight, opts=opts)
    settings, _, _, _ = settings_for(tight)
    least = counts["least_memory_plain"] + (36.0 - 1.0) * GiB  # the reserve is a plain term
    closest = e.value.closest["memory"]
    assert closest["total_bytes"] == pytest.approx(least, rel=1e-12)
    assert e.value.overflow_bytes == pytest.approx(closest["total_bytes"] - closest["usable_bytes"])
    assert e.value.largest_component == "other"  # the 36 GiB reserve
    assert f"{closest['total_bytes'] / GiB:,.1f} GiB per GPU" in e.value.message


@pytest.mark.parametrize("model, gpus", [("llama3-70b", 4096), ("mixtral-8x7b", 64)])
def test_pruned_ranking_equals_exhaustive(model, gpus):
    # the branch-and-bound (search.py steps 3 and 4) against every order of every fitting plan;
    # on Mixtral 8x7B / 64 GPUs best_variants' tighter bound for TP-overlap variants defers
    # thousands of variant trials and resolves the few deferred candidates whose other orders
    # are evaluated: the ranking is an exhaustive evaluation's, row for row
    job = Job(model=model, gpus=gpus)
    pruned = fit(job, top=10)
    full = fit(job, top=10, keep_feasible=True)
    assert not pruned.counts.bound_fallback
    assert pruned.counts.prefilter_dropped > 0 and full.counts.prefilter_dropped == 0  # search._prefilter ran
    assert pruned.counts.time_evaluations < full.counts.time_evaluations
    assert [r["time"]["step_s"] for r in pruned.rows] == [r["time"]["step_s"] for r in full.rows]
    assert [_key(r) for r in pruned.rows] == [_key(r) for r in full.rows]


_FIT_70B_512: list = []


def fit_70b_512_top5():
    """fit(Job(model="llama3-70b", gpus=512), top=5) as the search runs it (no monkeypatch: it is called before a
    test patches anything), once for the module: the unpatched rows the fallback tests compare with (FitResult is
    read, never changed)."""
    if not _FIT_70B_512:
        _FIT_70B_512.append(fit(Job(model="llama3-70b", gpus=512), top=5))
    return _FIT_70B_512[0]


def test_prefilter_falls_back_when_its_fact_fails(monkeypatch):
    # search._prefilter drops candidates whose compute floor (step.compute_floor) exceeds the
    # seed's k-th best step; a floor that is not below the step time (here 1.5x the compute)
    # fails its check on the seed: nothing is dropped (bound_fallback) and the rows stay
    import planner.search as search

    job = Job(model="llama3-70b", gpus=512)
    want = fit_70b_512_top5()
    assert want.counts.prefilter_dropped > 0 and not want.counts.bound_fallback
    real = search.group_floor
    monkeypatch.setattr(search, "group_floor", lambda s, p, **k: 1.5 * real(s, p, **k))
    got = fit(job, top=5)
    assert got.counts.bound_fallback and got.counts.prefilter_dropped == 0
    assert [r["time"]["step_s"] for r in got.rows] == [r["time"]["step_s"] for r in want.rows]
    assert [_key(r) for r in got.rows] == [_key(r) for r in want.rows]


def test_prefilter_seed_and_top(monkeypatch):
    # the prefilter bounds with the k-th best of its seed: no bound where the seed is not at least
    # twice k; with a seed of 16 for the top 5 (a looser k-th) the rows are still the exhaustive ones
    import planner.search as search

    monkeypatch.setattr(search, "PREFILTER_SEED", 16)
    job = Job(model="llama3-70b", gpus=512)
    assert fit(job, top=10).counts.prefilter_dropped == 0
    _prefiltered_is_exhaustive(job, top=5)


def _prefiltered_is_exhaustive(job: Job, top: int) -> None:
    """fit's top rows with the prefilter (it dropped candidates, no fallback) are an exhaustive
    evaluation's (keep_feasible: every feasible candidate priced), row for row."""
    pruned = fit(job, top=top)
    full = fit(job, top=top, keep_feasible=True)
    assert pruned.counts.prefilter_dropped > 0 and not pruned.counts.bound_fallback
    assert [r["time"]["step_s"] for r in pruned.rows] == [r["time"]["step_s"] for r in full.rows]
    assert [_key(r) for r in pruned.rows] == [_key(r) for r in full.rows]


def test_prefilter_with_fp8_recipes_equals_exhaustive():
    # the stack tries several fp8 recipes on B200 (delayed, tensorwise, mxfp8): a recipe changes the
    # compute, so the prefilter bounds with the least compute floor over the recipes
    # (search.floor_variants, candidate_floors); before, it did not run at all there (qwen3-30b-a3b /
    # 128 B200 fp8: 10.8 s whole process). It drops candidates and the rows are an exhaustive evaluation's
    import planner.search as search

    job = Job(model="llama3-8b", gpus=64, hardware="b200", precision="fp8")
    settings, space, fb, fr = _random_priced_candidates(job, n=2000)
    recipes = set(space.variants[:, 3].tolist())
    assert len(recipes) >= 2 and len(search.floor_variants(space)) == len(recipes)
    _prefiltered_is_exhaustive(job, top=10)


def test_candidate_floors_least_over_variants():
    # candidate_floors over floor_variants: the least of step.compute_floor on each variant's plans,
    # bit for bit; each recipe's floor is below the step time of that recipe's plans
    import planner.search as search
    from planner.step import compute_floor

    settings, space, fb, fr = _random_priced_candidates(Job(model="llama3-8b", gpus=64, hardware="b200", precision="fp8"))
    order = space.orders[np.argmax(space.order_ok[fb], axis=1)]
    each = [compute_floor(settings, space.plans(fb, fr, order, np.full(len(fb), v)), moe=search.PREFILTER_MOE_FLOOR)
            for v in search.floor_variants(space)]
    assert not np.array_equal(each[0], each[1])  # the recipes' compute differs
    got = search.candidate_floors(space, fb, fr, search.floor_variants(space))
    np.testing.assert_array_equal(got, np.minimum.reduce(each))
    np.testing.assert_array_equal(search.candidate_floors(space, fb, fr), each[0])
    for v, low in zip(search.floor_variants(space), each):
        t, _ = step_time(settings, space.plans(fb, fr, order, np.full(len(fb), v)))
        assert np.all(t.total >= low)


def test_prefilter_dropped_counted_and_shown(cli, monkeypatch):
    # Counts.prefilter_dropped: the fitting candidates search._prefilter left unpriced, each with
    # its rank orders (the units of `N fit`, not (plan, recompute) pairs); what fit's counts line
    # says of them holds: each one's compute floor alone is slower than the last row's step
    import planner.search as search
    from planner.render.fit import searched

    seen = []
    real = search._prefilter

    def spy(space, fb, fr, fm, *args, **kw):
        out = real(space, fb, fr, fm, *args, **kw)
        seen.append((space, fb, fm, out))
        return out

    monkeypatch.setattr(search, "_prefilter", spy)
    res = fit(Job(model="llama3-70b", gpus=512), top=5)
    # one _prefilter a space it bounds (search.vocab_spaces: one a padded vocabulary), the counts their sum, each
    # candidate with its rank orders where it fits (search._fit_orders: NCCL's NVLS buffers differ between orders)
    seen = [(sp, fb, fm, out) for sp, fb, fm, out in seen if out is not None]
    assert len(seen) >= 2
    assert res.counts.prefilter_dropped == sum(int(search._fit_orders(sp, fb[~out[0]], fm[~out[0]], sp.n_orders).sum())
                                               for sp, fb, fm, out in seen) > 0
    seen = [(sp, fb, out) for sp, fb, fm, out in seen]
    assert res.counts.prefilter_dropped > sum(int((~out[0]).sum()) for _, _, out in seen)
    assert res.counts.prefilter_dropped < res.counts.feasible
    assert min(out[1][~out[0]].min() for _, _, out in seen if (~out[0]).any()) > res.rows[-1]["time"]["step_s"]
    assert (f"{res.counts.feasible:,} fit ({res.counts.prefilter_dropped:,} of them priced by their compute alone, "
            "which already ranks them below the top rows)") in searched(res)
    # shown where fit shows its counts: the table's line, the note on stderr beside JSON
    monkeypatch.setattr(search, "_prefilter", real)
    table = cli("fit", "--model", "llama3-70b", "--gpus", "512", "--top", "5")
    js = cli("fit", "--model", "llama3-70b", "--gpus", "512", "--top", "5", "--format", "json")
    want = f"({res.counts.prefilter_dropped:,} of them priced by their compute alone"
    assert table.exit_code == js.exit_code == 0
    assert want in table.stdout and want in js.stderr and want not in js.stdout
    # nothing dropped (every feasible plan priced): no such clause
    assert "priced by their compute alone" not in searched(fit(Job(model="llama3-70b", gpus=512), top=5,
                                                               keep_feasible=True))


def test_fp8_recipe_variant_gated_on_its_own_weight_copies():
    # B200 takes fp8 GEMMs in every layout, so delayed scaling's quantized weight copy is 1 B a
    # linear weight element and mxfp8's 2 x 1.03125 B (row- and column-wise data with their E8M0
    # scales: memory.QUANTIZED_WEIGHT_BYTES). On llama3-70b / 32 GPUs the search chooses mxfp8 for
    # a few candidates that do not shard with FSDP (the megatron stack keeps TE's copies there);
    # the memory it gates and ranks them with is mxfp8's own, not variant 0's (delayed)
    from planner.plan import FP8_RECIPE_CODES, FSDP

    r = fit(Job(model="llama3-70b", gpus=32, hardware="b200", precision="fp8"), top=5, keep_feasible=True)
    n = 0
    for f in r.feasible:  # one space a padded vocabulary (search.vocab_spaces)
        sp = f["space"]
        assert int(sp.variants[0, 3]) == FP8_RECIPE_CODES["delayed"]
        sel = np.flatnonzero((sp.variants[f["var"], 3] == FP8_RECIPE_CODES["mxfp8"]) & (sp.base.sharding[f["base"]] < FSDP))
        n += len(sel)
        if not len(sel):
            continue
        chosen = sp.plans(f["base"][sel], f["rc"][sel], f["order"][sel], f["var"][sel])
        assert f["memory"][sel] == pytest.approx(mem.memory_total(sp.settings, chosen), rel=1e-12)
        delayed = sp.plans(f["base"][sel], f["rc"][sel], f["order"][sel], f["var"][sel])
        delayed.f8r = np.full(len(sel), FP8_RECIPE_CODES["delayed"])
        t_mx, t_d = mem.memory_terms(sp.settings, chosen)[0], mem.memory_terms(sp.settings, delayed)[0]
        assert np.all(t_d.quantized_weights > 0)
        assert t_mx.quantized_weights == pytest.approx(2.0625 * t_d.quantized_weights, rel=1e-12)
        # what the gate missed: exactly mxfp8's extra copy bytes (2.0625 - 1 B an element), 2.1 GiB and more (TP 8 x PP 4
        # layouts, chosen mxfp8 since delayed scaling's amax all-reduces are priced, step.py [34]; 4.2 GiB and more before)
        gap = f["memory"][sel] - mem.memory_total(sp.settings, delayed)
        assert gap == pytest.approx(1.0625 * t_d.quantized_weights, rel=1e-9)
        assert np.all(gap > 2 * 2**30)
    assert n > 0


def test_first_recipe_holds_the_least_weight_copies():
    # the search tries a recipe only on candidates that fit with variant 0 (the stack's first
    # recipe of the precision): exact only where no searched recipe holds smaller weight copies
    # than variant 0's (search.variant_memory); so on every catalog stack that keeps copies
    # (memory.fp8_weight_cache) and every GPU with fp8 tensor cores
    from planner.catalog import list_hardware, list_stacks, load_stack
    from planner.precisions import FP8_RECIPES, recipe_unsupported
    from planner.space import variant_choices

    checked = 0
    for stack_name in list_stacks():
        stack = load_stack(stack_name)
        if not stack.memory.fp8_weight_cache:
            continue
        for hw_name in list_hardware():
            hw = load_hardware(hw_name)
            settings, _, _ = resolve(Job(model="llama3-8b", gpus=8, hardware=hw_name, stack=stack_name))
            for precision in ("fp8", "nvfp4"):
                try:
                    codes = variant_choices(stack, Job(model="llama3-8b", gpus=8, precision=precision, stack=stack_name),
                                            "", hw)[:, 3]
                except PlannerError:  # no recipe of that precision on the stack
                    continue
                if any(recipe_unsupported(FP8_RECIPES[int(c)], hw) for c in codes):
                    continue  # the GPU runs none of them (resolve refuses the job)
                per = [sum(mem.weight_copy_bytes(settings, int(c))) for c in codes]
                assert min(per) == per[0], (stack_name, hw_name, precision, [FP8_RECIPES[int(c)] for c in codes])
                checked += len(set(codes.tolist())) > 1
    assert checked > 0


def test_compute_floor_is_step_times_compute_without_copies():
    # step.compute_floor is step_time's `compute` term less the DP copies, bit for bit (the
    # same arithmetic), so step_time's total (every other term >= 0) is never below it
    from planner.space import build_space, settings_for, variant_choices
    from planner.step import (Collectives, _compute_pass, compute_floor, dp_comm, dp_stage, sp_norm_grads,
                              step_end_stage)

    job = Job(model="mixtral-8x7b", gpus=64)
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, job.precision, SpaceOptions(),
                        variant_choices(settings.stack, job, "", settings.hardware))
    rows = np.flatnonzero(space.codes == 0)[:5000]
    plan = space.plans(rows, np.zeros(len(rows), dtype=np.int64), space.orders[np.argmax(space.order_ok[rows], axis=1)])
    low = compute_floor(settings, plan)
    t, _ = step_time(settings, plan)
    sc, _, comp = _compute_pass(settings, plan)
    # the step end's stage's copies (step_time's pick: dp_comm's slots by their DP + SP-gradient step-end work)
    dp = dp_comm(sc, Collectives(sc), comp)
    copies = dp_stage(dp, step_end_stage(sc, dp.exposed + sp_norm_grads(sc, Collectives(sc)))).copies
    assert len(rows) > 1000 and np.all(low > 0)
    np.testing.assert_array_equal(low + copies, t.compute)
    assert np.all(t.total >= low)
    # moe=True (search._prefilter's bound on an MoE model where search.PREFILTER_MOE_FLOOR): plus step_time's own moe_permute and
    # moe_host terms, bit for bit, added in step_time's order; the total is still never below it
    low_moe = compute_floor(settings, plan, moe=True)
    assert np.all(t.moe_permute > 0)
    np.testing.assert_array_equal(low_moe, low + t.moe_permute + t.moe_host)
    assert np.all(low_moe > low) and np.all(t.total >= low_moe)


def _random_priced_candidates(job: Job, n: int = 4000) -> tuple:
    """(settings, space, base rows, recompute indices) of n random valid candidates of the job's
    search space (repeated and unordered; seeded)."""
    from planner.space import build_space, settings_for, variant_choices

    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, job.precision, SpaceOptions(),
                        variant_choices(settings.stack, job, "", settings.hardware))
    rng = np.random.default_rng(0)
    fb = rng.choice(np.flatnonzero(space.codes == 0), n)
    return settings, space, fb, rng.integers(0, len(space.recompute), n)


def test_candidate_floors_are_compute_floor():
    # search.candidate_floors prices the floor once per distinct tuple of its fields over the base
    # rows x recompute (search.row_groups): the same numbers as step.compute_floor on the candidates
    import planner.search as search
    from planner.step import compute_floor

    for job in (Job(model="mixtral-8x7b", gpus=64), Job(model="llama3-70b", gpus=512)):
        settings, space, fb, fr = _random_priced_candidates(job)
        order = space.orders[np.argmax(space.order_ok[fb], axis=1)]
        want = compute_floor(settings, space.plans(fb, fr, order, np.zeros(len(fb), dtype=np.int64)),
                             moe=search.PREFILTER_MOE_FLOOR)
        got = search.candidate_floors(space, fb, fr)
        assert len(np.unique(want)) > 100
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("job, slack", [
    (Job(model="deepseek-v3", gpus=256, hardware="h800-sxm", global_batch=1920, seq_len=4096), 2),
    (Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096, stack="deepseek"), 3),
    (Job(model="mixtral-8x7b", gpus=64, stack="torchtitan"), 2), (Job(model="llama3-405b", gpus=16384), 2)])
def test_choose_modes_grouped_is_per_row(job, slack, monkeypatch):
    # space.choose_modes evaluates the rules once per distinct tuple of mode_rule_fields (every
    # field but the micro-batch; the micro-batches per step where a start-up rule reads them, as
    # DualPipe's on the deepseek stack), found from build_space's key (pipeline row, sharding
    # option, SP) or by terms.Groups: the same modes and codes as the rules on every base row
    # (both ways)
    # (space._choose_modes on the PlanArrays itself), and far fewer tuples than rows
    import copy

    import planner.space as space_mod
    from planner.terms import Groups

    seen = {}
    real = space_mod.choose_modes

    def spy(settings, base, key=None):
        seen["before"], seen["key"] = copy.deepcopy(base), key
        codes = real(settings, base, key)
        seen.update(settings=settings, smode=base.smode.copy(), codes=codes)
        return codes

    monkeypatch.setattr(space_mod, "choose_modes", spy)
    settings, gbs, seq, _ = settings_for(job)
    space_mod.build_space(settings, gbs, seq, job.precision, SpaceOptions(max_layer_slack=slack))
    want = seen["before"]
    runs = seen["settings"].stack.runs
    want_codes = space_mod._choose_modes(seen["settings"], want, runs)
    np.testing.assert_array_equal(seen["smode"], want.smode)
    np.testing.assert_array_equal(seen["codes"], want_codes)
    by_groups = copy.deepcopy(seen["before"])
    np.testing.assert_array_equal(real(seen["settings"], by_groups), want_codes)
    np.testing.assert_array_equal(by_groups.smode, want.smode)
    assert seen["key"] is not None and len(np.unique(seen["key"])) < len(want.tp)
    assert len(np.unique(seen["codes"])) > 1
    assert len(np.unique(want.smode)) > 1 or len(runs.sharding) == 1  # (the deepseek stack runs ZeRO-1 only)
    fields = space_mod.mode_rule_fields(seen["settings"].stack)
    if "microbatches" not in fields:  # (keyed on them, the groups are about the rows)
        assert Groups(seen["before"], fields).size < len(want.tp) / 2


def test_rows_placement_links_once_for_all_rows(monkeypatch):
    # search.rows_of prices the placement report's group links once for all the rows
    # (placement.links, comm.group_link on the rows' arrays); each row's report is the one
    # placement.report gives that plan alone (its scalar group sizes)
    import planner.search as search
    from planner import placement

    calls = []
    real = search.rows_of

    def spy(r):
        out = real(r)
        calls.append((r, out))
        return out

    monkeypatch.setattr(search, "rows_of", spy)
    for job in (Job(model="mixtral-8x7b", gpus=64), Job(model="llama3-70b", gpus=4096)):
        calls.clear()
        res = fit(job, top=10)  # one rows_of a space the rows come from (search.vocab_spaces: one a padded vocabulary)
        tiers, n = set(), 0
        for r, out in calls:
            plan = r.space.plans(r.base, r.rc, r.order, r.var)
            for i, row in enumerate(out):
                alone = placement.report(r.settings, plan, lambda v, i=i: np.asarray(v) if np.ndim(v) == 0 else np.asarray(v)[i])
                assert row["placement"] == alone
                tiers |= {v["tier"] for v in alone.values() if isinstance(v, dict)}
                n += 1
        assert len(res.rows) == 10 == n and len(tiers) > 1


def test_memory_totals_is_memory_total_of_each_candidate():
    # search.memory_totals prices the distinct base rows against every recompute choice at once
    # (recompute (R, 1) broadcast against the rows' (n,) fields): the same numbers as
    # memory.memory_total on the candidates' own plans, bit for bit, also for candidates in any
    # order, repeated, and leaving (row, recompute) pairs out (priced there and dropped), and
    # with another fp8 recipe (f8r); mixtral on 64 GPUs has pp > 2 (a middle stage) among them
    import planner.search as search
    from planner.plan import FP8_RECIPE_CODES

    for job in (Job(model="mixtral-8x7b", gpus=64), Job(model="llama3-70b", gpus=512, precision="fp8")):
        settings, space, fb, fr = _random_priced_candidates(job)
        assert len(space.recompute) == 3 and len(np.unique(fb)) * 3 > len(np.unique(fb * 3 + fr))  # pairs left out
        assert np.any(space.base.pp[fb] > 2)
        want = mem.memory_total(settings, space.plans(fb, fr))
        got = search.memory_totals(space, fb, fr)
        assert len(np.unique(want)) > 1000
        np.testing.assert_array_equal(got, want)
        if job.precision == "fp8":
            p = space.plans(fb, fr)
            p.f8r = np.full(len(fb), FP8_RECIPE_CODES["blockwise"], dtype=np.int64)
            np.testing.assert_array_equal(search.memory_totals(space, fb, fr, f8r=FP8_RECIPE_CODES["blockwise"]),
                                          mem.memory_total(settings, p))


def test_memory_totals_dummy_shapes_on_the_layer_groups():
    # search.memory_totals prices TE's cached dummy weight-gradient shapes (memory.dummy_wgrad_shapes)
    # once per group of the layer fields it groups the activations by (search._base_groups) and gathers
    # them onto the rows: DeepSeek-V3 / 256 H800 has shapes that coincide on some plans only (a mask
    # over the groups, neither all nor none), and the totals are memory_total's on the candidates' own
    # plans, bit for bit
    import planner.search as search
    from planner.terms import KeyedPlan

    settings, space, fb, fr = _random_priced_candidates(
        Job(model="deepseek-v3", gpus=256, hardware="h800-sxm", global_batch=1920, seq_len=4096))
    rows = np.unique(fb)
    shapes = mem.dummy_wgrad_shapes(settings, KeyedPlan(search._columns(space.base, rows, search.LAYER_BASE_FIELDS)))
    masks = [m for _, _, same in shapes for _, m in same if m is not True]
    assert masks and any(0 < np.mean(m) < 1 for m in masks)
    want = mem.memory_total(settings, space.plans(fb, fr))
    assert len(np.unique(want)) > 1000
    np.testing.assert_array_equal(search.memory_totals(space, fb, fr), want)


def test_tp_overlap_bound_falls_back_when_its_facts_fail(monkeypatch):
    # naming the wrong term (compute) as the one TP overlap changes, the bound's premise (the
    # other terms, tp_comm among them, are variant 0's bit for bit) fails on the first
    # TP-overlap variant evaluated: the search drops the bound (bound_fallback) and ranks as
    # before
    import planner.search as search

    job = Job(model="llama3-70b", gpus=512)
    want = fit_70b_512_top5()
    monkeypatch.setattr(search, "TPO_TERMS", ("compute",))
    got = fit(job, top=5)
    assert got.counts.bound_fallback and not want.counts.bound_fallback
    assert [r["time"]["step_s"] for r in got.rows] == [r["time"]["step_s"] for r in want.rows]
    assert [_key(r) for r in got.rows] == [_key(r) for r in want.rows]


# ------------------------------------------------------------------ the seed's plans
def test_seed_70b_tp8_fsdp512_fits_and_winner_no_slower():
    job = Job(model="llama3-70b", gpus=4096)
    pinned = fit(job, opts=SpaceOptions(tp=(8,), cp=(1,), pp=(1,), sharding=("fsdp",)), top=1)
    p = pinned.rows[0]["plan"]
    assert (p["tp"], p["cp"], p["pp"], p["dp"], p["sharding"]) == (8, 1, 1, 512, "fsdp")
    assert pinned.rows[0]["memory"]["fits"]
    best = fit(job, top=1)
    assert best.rows[0]["time"]["step_s"] <= pinned.rows[0]["time"]["step_s"]
    assert best.counts.feasible > pinned.counts.feasible > 0


def test_llama3_table4_405b_fits_and_winner_no_slower():
    # Llama 3 paper Table 4: 16,384 GPUs, TP 8, CP 1, PP 16, DP 128, 8,192-token sequences,
    # 16M tokens per batch
    job = Job(model="llama3-405b", gpus=16384, seq_len=8192, global_batch_tokens=16 * 2**20)
    pinned = fit(job, opts=SpaceOptions(tp=(8,), cp=(1,), pp=(16,)), top=1)
    p = pinned.rows[0]["plan"]
    assert (p["tp"], p["cp"], p["pp"], p["dp"]) == (8, 1, 16, 128)
    best = fit(job, top=3)
    assert best.rows[0]["time"]["step_s"] <= pinned.rows[0]["time"]["step_s"]
    c = best.counts
    assert c.considered == c.broke_constraint + c.did_not_fit + c.feasible


def test_405b_on_8_gpus_exits_1_with_closest_plan(cli):
    r = cli("fit", "--model", "llama3-405b", "--gpus", "8")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: nothing fits llama3-405b on 8 x h100-sxm")
    assert "largest component: optimizer" in r.stderr  # fp32 master + Adam: 12 of 16 bytes a parameter
    assert "hint:" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(NoFitError) as e:
        fit(Job(model="llama3-405b", gpus=8))
    m = e.value.closest["memory"]
    # 405.85e9 parameters x 12 B of optimizer state over at most 8 GPUs
    assert m["optimizer_bytes"] >= 405_853_388_800 * 12 / 8
    assert e.value.overflow_bytes == pytest.approx(m["total_bytes"] - m["usable_bytes"])


# ------------------------------------------------------------------ the shortcuts' facts
def test_apply_unique_equals_direct_evaluation():
    rng = np.random.default_rng(1)
    n = 5000
    size = rng.choice([1e6, 2e6, 3.5e6, 0.0, -0.0], n)
    group = rng.choice([1, 2, 8, 64], n)
    stride = rng.choice([1, 8, 512], n)
    calls = []

    def fn(s, g, t):
        calls.append(len(s))
        return s * 3.0 + g * 1e-3 + np.sqrt(t) + np.sign(np.copysign(1.0, s))

    direct = size * 3.0 + group * 1e-3 + np.sqrt(stride) + np.sign(np.copysign(1.0, size))
    got = apply_unique(fn, size, group, stride)
    assert np.array_equal(got, direct)
    assert calls == [5 * 4 * 3]  # every distinct tuple once (-0.0 and 0.0 kept apart by their bits)
    # sorted runs and a broadcast scalar
    got = apply_unique(fn, np.sort(size), 8, stride)
    assert np.array_equal(got, np.sort(size) * 3.0 + 8e-3 + np.sqrt(stride) + np.sign(np.copysign(1.0, np.sort(size))))


def test_distinct_lets_the_caller_evaluate():
    """comm.distinct: apply_unique without handing a function down (no call back up)."""
    rng = np.random.default_rng(2)
    size, group = rng.choice([1e6, 0.0, -0.0], 500), rng.choice([1, 8], 500)
    d = distinct(size, group, 4)
    assert len(d.values) == 3 and len(d.values[0]) == 3 * 2
    assert len({(np.float64(s).tobytes(), g, t) for s, g, t in zip(*d.values)}) == 6
    assert np.array_equal(d.expand(d.values[0] * 2 + d.values[1]), size * 2 + group)
    small = distinct(np.arange(3.0), 1)  # below UNIQUE_MIN: the broadcast arguments themselves
    assert small.index is None and np.array_equal(small.expand(small.values[0] + small.values[1]), np.arange(3.0) + 1)


def test_rank_order_changes_only_communication_and_equivalent_orders_agree():
    job = Job(model="llama3-8b", gpus=256, tp=4, cp=2, pp=4, vpp=2, sharding="hsdp", shard_group=2,
              recompute="selective")
    settings, plan, _ = resolve(job)
    codes = np.arange(len(ORDER_CODES))
    n = len(codes)
    many = PlanArrays(**{f: np.repeat(np.atleast_1d(getattr(plan, f)), n) for f in PlanArrays.__dataclass_fields__})
    many.order = codes
    t, _ = step_time(settings, many)
    for name in ("compute", "optimizer"):  # what search.py's bound leaves out never depends on the order
        assert np.all(t[name] == t[name][0])
    for name in t:  # every term >= 0: step >= compute + optimizer
        assert np.all(t[name] >= 0)
    assert len(set(t.total.tolist())) > 1  # the placement does matter here
    # dp = 8: every axis communicates, so all 24 arrangements are distinct
    assert distinct_orders(codes, [4], [2], [4], [8]).all()
    # with cp = 1, orders that differ only in where cp sits are the same plan
    one = job.model_copy(update=dict(cp=1))
    s1, p1, _ = resolve(one)
    m1 = PlanArrays(**{f: np.repeat(np.atleast_1d(getattr(p1, f)), n) for f in PlanArrays.__dataclass_fields__})
    m1.order = codes
    t1 = step_time(s1, m1)[0].total
    keep = distinct_orders(codes, [4], [1], [4], [int(p1.dp)])[0]
    assert keep.sum() == 6  # 4! / 4 arrangements of tp, pp, dp, cp anywhere
    def sig(c):  # strides of the axes that communicate (cp = 1 does not)
        st = axis_strides(ORDER_NAMES[int(c)], tp=4, cp=1, pp=4, dp=int(p1.dp))
        return tuple(int(st[a]) for a in AXES if a != "cp")

    for c in codes:
        firsts = [d for d in codes if keep[d] and sig(d) == sig(c)]
        assert len(firsts) == 1 and t1[c] == t1[firsts[0]]


def test_layer_slack_llama3_405b():
    # 126 layers on 16 stages of 8: the first and last stage one layer lighter (Llama 3)
    assert int(layer_slack(126, 16, 1)) == 2
    assert int(layer_slack(126, 7, 2)) == 0
    assert int(layer_slack(126, 5, 1)) == 4  # 5 x 26 = 130: left out of the default space


# ------------------------------------------------------------------ CLI
def test_cli_table_and_formats(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--top", "3", "--tokens", "15T")
    assert r.exit_code == 0, r.stderr
    for text in ("searched", "broke a constraint", "did not fit", "TPxCPxPPxDP", "GiB/GPU", "% HBM", "MFU",
                 "tokens/s", "days", "planner explain --model llama3-8b --gpus 64"):
        assert text in r.stdout
    y = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--top", "2", "--format", "yaml")
    rows = yaml.safe_load(y.stdout)  # (a row's `assumed` list, where it has one, comes before its plan)
    assert y.exit_code == 0 and len(rows) == 2 and all({"plan", "memory", "time"} <= set(row) for row in rows)
    c = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--top", "2", "--format", "csv")
    assert c.exit_code == 0 and len(c.stdout.strip().splitlines()) == 3 and "time.step_s" in c.stdout
    e = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--explain", "2")
    assert e.exit_code == 0 and "Memory per GPU" in e.stdout and "planner explain" in e.stdout


def test_cli_gpu_list_cost_objective(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "32,64", "--objective", "cost", "--top", "4", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    cost = [row["plan"]["gpus"] * row["time"]["step_s"] / row["plan"]["global_batch_tokens"] for row in rows]
    assert cost == sorted(cost)


@pytest.mark.parametrize("args, text", [
    (["--tp", "x"], "cannot read --tp"),
    (["--tp", "0"], "not a positive whole number"),
    (["--objective", "fast"], "unknown --objective"),
    (["--sharding", "zero3"], "unknown --sharding"),
    (["--recompute", "some"], "unknown --recompute"),
    (["--rank-orders", "tp-cp"], "rank order"),
    (["--explain", "0"], "rows are numbered from 1"),
])
def test_cli_bad_input_exit_2(cli, args, text):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "64", *args)
    assert r.exit_code == 2, r.stdout
    assert text in r.stderr and "hint:" in r.stderr


def test_cli_no_candidate_satisfies_constraints(cli):
    """A pin no plan of the model can use is bad input (exit 2, issue 12); a GPU count that
    does not factor with the batch is "no feasible plan" (exit 1) and names what would work."""
    from conftest import assert_one_error

    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "48", "--tp", "3"), "--tp 3", "32 attention heads",
                     "valid: 1, 2, 4, 8")
    r = cli("fit", "--model", "llama3-8b", "--gpus", "1000")
    assert r.exit_code == 1
    assert "no plan for llama3-8b on 1,000" in r.stderr and "global batch does not divide into dp x micro-batch" in r.stderr
    # 1,024 = 2^10 divides the 2,048-sequence batch; 1,000 = 8 x 125 divides a batch of 2,000 (TP 8 x DP 125)
    assert "GPU counts near 1,000 with valid plans: 768, 1,024" in r.stderr
    assert "--global-batch 2,000" in r.stderr


def test_explain_from_fit_reproduces_a_row(tmp_path):
    from typer.testing import CliRunner

    from planner.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["fit", "--model", "llama3-8b", "--gpus", "64", "--top", "3", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    saved = tmp_path / "fit.json"
    saved.write_text(r.stdout)
    rows = json.loads(r.stdout)
    for n in (1, 3):
        e = runner.invoke(app, ["explain", "--from-fit", str(saved), "--row", str(n), "--format", "json"])
        assert e.exit_code == 0, e.stderr
        got, want = json.loads(e.stdout), rows[n - 1]
        assert got["memory"] == want["memory"] and got["time"] == want["time"] and got["plan"] == want["plan"]
    bad = runner.invoke(app, ["explain", "--from-fit", str(saved), "--row", "9"])
    assert bad.exit_code == 2 and "row 9" in bad.stderr


def test_memory_total_is_memory_terms_total(small):
    """The search's memory.memory_total (the stages' totals chosen without building the chosen
    stage's terms) equals memory_terms(...)[0].total exactly: on every feasible candidate of the
    small search, and on single plans with a middle stage, DualPipe and FSDP under PP."""
    job, opts, _, _ = small
    feasible = fit(job, opts=opts, top=5, keep_feasible=True).feasible  # one a padded vocabulary (search.vocab_spaces)
    assert sum(len(f["step"]) for f in feasible) > 1000
    for f in feasible:
        space = f["space"]
        plans = space.plans(f["base"], f["rc"], f["order"], f["var"])
        assert np.array_equal(mem.memory_total(space.settings, plans), mem.memory_terms(space.settings, plans)[0].total)
    for extra in (dict(model="llama3-8b", gpus=64, tp=2, pp=8, vpp=2),
                  dict(model="deepseek-v3", gpus=2048, pp=16, ep=64, schedule="dualpipe", stack="deepseek", sharding="zero1"),
                  dict(model="mixtral-8x7b", gpus=64, tp=2, pp=4, ep=8, sharding="fsdp", stack="torchtitan")):
        settings, plan, _ = resolve(Job(**extra))
        assert mem.memory_total(settings, plan) == mem.memory_terms(settings, plan)[0].total, extra
