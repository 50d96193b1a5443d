"""fit's dispatcher search keeps a candidate that only a non-default MoE dispatcher fits (issue 22; search.py
_other_dispatchers): the stack's default dispatcher (variant 0) no longer decides alone which candidates fit.

The megatron case, by hand. Qwen3-30B-A3B on 8 H100 SXM, global batch 16 x 4,096, TP 2 x CP 1 x PP 2 x DP 2 (vpp 4),
EP 4 / ETP 1, ZeRO-1, micro-batch 2, full recompute: the usable HBM is the measured capacity less the headroom,
84,922,240,860.16 B x (1 - 0.1) = 76,430,016,774.144 B. explain prices the plan at 76,431,591,948.29 B with Megatron's
default all-to-all dispatcher (1,575,174 B over) and at 76,405,474,936.35 B with the allgather dispatcher (24,541,838 B
under: its held attributes and routing saves are smaller, memory.py [dh] [sr]; layer activations 742,391,808 ->
718,882,323.5 B, recompute buffer 469,370,380.3 -> 466,762,852.9 B). So the plan fits with allgather alone: before this
branch fit found nothing ("nothing fits ... 0.0 GiB over the usable 71.2 GiB"); now it ranks the allgather row, priced
as explain prices it.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import NoFitError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions

CAPACITY = 84_922_240_860.16  # h100-sxm, measured (hardware_db), as explain reports capacity_bytes
USABLE = CAPACITY * (1 - 0.1)  # headroom 0.1: 76,430,016,774.144 B
PLAN = dict(model="qwen3-30b-a3b", gpus=8, stack="megatron", global_batch=16, seq_len=4096, hardware="h100-sxm", tp=2,
            cp=1, pp=2, vpp=4, dp=2, micro_batch=2, ep=4, etp=1, sharding="zero1", recompute="full",
            rank_order="tp-cp-dp-pp")
OPTS = SpaceOptions(tp=(2,), cp=(1,), pp=(2,), vpp=(4,), dp=(2,), micro_batch=(2,), ep=(4,), etp=(1,),
                    sharding=("zero1",), recompute=("full",))


def _explain(**kw):
    settings, plan, _ = resolve(Job(**{**PLAN, **kw}))
    return to_json(settings, plan, evaluate(settings, plan))


def test_megatron_plan_only_allgather_fits_is_ranked():
    """The plan above: explain's totals straddle the usable bytes derived by hand; fit without a dispatcher (the
    search) ranks the allgather row with explain's memory and step, and counts the candidate as fitting (it did
    not fit with all-to-all and was counted so before)."""
    a2a, ag = _explain(moe_dispatcher="alltoall"), _explain(moe_dispatcher="allgather")
    assert a2a["memory"]["usable_bytes"] == pytest.approx(USABLE, rel=1e-15)
    assert a2a["memory"]["total_bytes"] == pytest.approx(76_431_591_948.29, abs=1.0) and not a2a["memory"]["fits"]
    assert ag["memory"]["total_bytes"] == pytest.approx(76_405_474_936.35, abs=1.0) and ag["memory"]["fits"]
    job = Job(model="qwen3-30b-a3b", gpus=8, stack="megatron", global_batch=16, seq_len=4096, hardware="h100-sxm")
    res = fit(job, opts=OPTS, top=3, search_dispatchers=True)
    assert [r["plan"]["moe_dispatcher"] for r in res.rows] == ["allgather"]
    row = res.rows[0]
    assert row["memory"]["total_bytes"] == ag["memory"]["total_bytes"]
    assert row["time"]["step_s"] == ag["time"]["step_s"]
    c = res.counts
    assert (c.considered, c.broke_constraint, c.did_not_fit, c.feasible, c.dispatcher_unpriced) == (2, 1, 0, 1, 0)
    # pinned to the default dispatcher the same space has nothing that fits
    with pytest.raises(NoFitError):
        fit(job.model_copy(update={"moe_dispatcher": "alltoall"}), opts=OPTS, top=3)


def test_closest_plan_is_the_least_over_the_dispatchers():
    """Where no dispatcher fits (headroom 0.11: usable 0.89 x 84,922,240,860.16 = 75,580,794,365.5 B, below both
    totals), the closest plan fit reports is the allgather one (76,405,474,936.35 B, the least), with its own
    dispatcher's Settings, not the all-to-all's 76,431,591,948.29 B."""
    job = Job(model="qwen3-30b-a3b", gpus=8, stack="megatron", global_batch=16, seq_len=4096, hardware="h100-sxm",
              headroom=0.11)
    with pytest.raises(NoFitError) as e:
        fit(job, opts=OPTS, top=3, search_dispatchers=True)
    closest = e.value.closest
    assert closest["plan"]["moe_dispatcher"] == "allgather"
    assert closest["memory"]["total_bytes"] == _explain(moe_dispatcher="allgather", headroom=0.11)["memory"]["total_bytes"]
    assert e.value.overflow_bytes == pytest.approx(76_405_474_936.35 - 0.89 * CAPACITY, abs=1.0)


def test_rescued_rows_rank_as_the_exhaustive_search_ranks_them():
    """torchtitan 0.3, Qwen3-30B-A3B on 16 H100, blocking HybridEP (factor 0) searched beside all-to-all: the
    bounded search's rows are the exhaustive one's (keep_feasible: no bound), rows that only HybridEP fits among
    them (tp 1, ep 16: 67.3 GiB, its all-to-all twin 72.9 GiB; tp 1, ep 8 at 70.5 / 76 GiB led before GEMM tile
    quantization, compute.wave_efficiency), and the counts add up (each candidate once)."""
    job = Job(model="torchtitan:qwen3/30B-A3B", gpus=16, stack="torchtitan-0.3", global_batch=32, seq_len=4096,
              hardware="h100-sxm", moe_hybridep_capacity_factor=0.0)
    opts = SpaceOptions(ep=(2, 4, 8, 16))
    res = fit(job, opts=opts, top=10, search_dispatchers=True)
    full = fit(job, opts=opts, top=10, search_dispatchers=True, keep_feasible=True)
    key = lambda r: (r["plan"]["moe_dispatcher"], r["plan"]["tp"], r["plan"]["ep"], r["time"]["step_s"],  # noqa: E731
                     r["memory"]["total_bytes"])
    assert [key(r) for r in res.rows] == [key(r) for r in full.rows]
    top = res.rows[0]
    assert (top["plan"]["moe_dispatcher"], top["plan"]["tp"], top["plan"]["ep"]) == ("hybridep", 1, 16)
    twin = _explain_job(job, top, moe_dispatcher="alltoall", moe_hybridep_capacity_factor=None)
    assert not twin["memory"]["fits"] and top["memory"]["fits"]
    for c in (res.counts, full.counts):
        assert c.considered == c.broke_constraint + c.did_not_fit + c.feasible
    assert res.counts.feasible == full.counts.feasible and full.counts.dispatcher_unpriced == 0
    assert len(full.feasible) and all(np.all(np.isfinite(f["step"])) for f in full.feasible)


def _explain_job(job, row, **kw):
    from planner.search import row_job

    one = row_job(job, row).model_copy(update=kw)
    settings, plan, _ = resolve(one)
    return to_json(settings, plan, evaluate(settings, plan))
