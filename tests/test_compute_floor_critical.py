"""step.compute_floor by compute alone, beside step.critical_stage (issue 22, critstage): the floor is m x the
compute-heaviest stage's micro-batch compute, a lower bound of the step whichever stage communication makes
critical, and tighter than the critical stage's own compute where the two differ."""
from __future__ import annotations

import pytest

from planner import step
from planner.plan import resolve
from planner.schema import Job


def test_floor_is_the_compute_heaviest_stage_and_bounds_the_step():
    """Llama 3 8B, Megatron's uneven split first / last 7 on pp 4 (stages 7, 9, 9, 7 + the head), tp 8 on one node
    of 32 GPUs (dp 1), global batch 64 of micro-batch 1: m = 64. By compute alone the last stage is the heaviest,
    7 t + H > 9 t (H the output layer and loss, > 2 t); by compute + its own TP traffic the middle, 9 t + 9 c > 7 t +
    H + 7 c (tests/test_pp_critical_comm.py). compute_floor = m (7 t + H) (no MoE: the GPU compute is the whole
    micro-batch's), above the critical stage's compute m 9 t (what a floor from critical_stage would give) and below
    step_time's total, whose compute + TP terms alone are m (9 t + 9 c)."""
    job = dict(model="llama3-8b", gpus=32, tp=8, pp=4, sharding="zero1", micro_batch=1, global_batch=64,
               stack="megatron", first_stage_layers=7, last_stage_layers=7)
    s, p, _ = resolve(Job(**job))
    sc, lt, comp = step._compute_pass(s, p)
    t = float(lt.fwd[0] + lt.bwd[0] + lt.sel[0])
    head = float(comp.logits)
    assert 7 * t + head > 9 * t
    floor = float(step.compute_floor(s, p))
    assert floor == pytest.approx(64 * (7 * t + head), rel=1e-12)
    terms, _ = step.step_time(s, p)
    assert float(terms.compute) == pytest.approx(64 * 9 * t, rel=1e-9)  # the critical (middle) stage's compute
    assert floor > float(terms.compute)
    assert float(terms.total) >= floor


def test_the_search_floor_is_the_same_at_every_rank_order():
    """search._step_parts' floor (step_time's order_floor_s: the compute-heaviest stage's m micro-batches, the DP
    copies and the optimizer step) is one number for a plan at every rank order, and at most its step there. The
    critical stage's compute is not: Llama 3 70B, tp 8 without SP, pp 4, dp 128 on 4,096 H100 (global batch 2,048
    x 8,192): the last stage (20 layers + the head) is critical at tp-cp-pp-dp, a middle stage (20 layers, two
    exchanges a micro-batch to the ends' one, critstage) at tp-cp-dp-pp, where pp's exchanges cross the network, so
    t.compute + t.optimizer moved by 5% between the two orders
    and the search's branch-and-bound fell back to pricing every order (Counts.bound_fallback)."""
    import numpy as np

    from planner.plan import resolve
    from planner.schema import Job
    from planner.search import _step_parts
    from planner.step import step_time

    floors, steps, computes = [], [], []
    for order in ("tp-cp-pp-dp", "tp-cp-dp-pp"):
        s, p, _ = resolve(Job(model="llama3-70b", gpus=4096, tp=8, pp=4, dp=128, micro_batch=1, sharding="zero1",
                              rank_order=order, sequence_parallel=False, global_batch=2048, seq_len=8192,
                              recompute="none"))
        step, floor, _ = _step_parts(s, p, False)
        t, _ = step_time(s, p)
        floors.append(float(np.ravel(floor)[0]))
        steps.append(float(np.ravel(step)[0]))
        computes.append(float(np.ravel(t.compute + t.optimizer)[0]))
    assert floors[0] == floors[1]
    assert all(f <= st for f, st in zip(floors, steps))
    assert all(f >= c for f, c in zip(floors, computes))
    # the critical stage's compute + optimizer: 3.6118 s (the last) at tp-cp-pp-dp, 3.4180 s (a middle) at tp-cp-dp-pp
    # (3.5275 and 3.3349 s before a GEMM's output write was priced after its K loop, compute [5a]; the two orders'
    # critical stages are the same ones)
    assert computes[0] == pytest.approx(3.6118, abs=1e-4) and computes[1] == pytest.approx(3.4180, abs=1e-4)
    assert floors[0] == computes[0]
