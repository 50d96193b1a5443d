"""step_time with the MoE dispatcher per plan (PlanArrays.disp, Settings.dispatcher_rows; issues 23/24):
fit's dispatcher search prices every dispatcher in one step_time call, each plan looked up by its code.
Each plan's terms must be, bit for bit, what step_time gives that plan under its own dispatcher's
Settings (what explain prices: search.dispatcher_settings), on plans where the dispatchers differ
in every term they touch (ep_comm, tp_comm's expert-TP pair, the bubble, and padded to capacity
moe_host: alltoall and hybridep skip the host synchronisation there, allgather keeps it)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner import dispatch
from planner.plan import PlanArrays, resolve
from planner.schema import Job
from planner.search import dispatcher_settings, settings_for
from planner.step import dispatcher_rows, step_time


def _stacked(plan: PlanArrays, codes) -> PlanArrays:
    """The 0-d plan repeated once per code, each row with its dispatcher code in `disp`."""
    p = PlanArrays(**{k: np.full(len(codes), np.asarray(v)) for k, v in vars(plan).items()})
    p.disp = np.asarray(codes, dtype=np.int64)
    return p


def _rows(job: Job, **fields):
    """(each dispatcher's Settings, the job's plan, the dispatcher codes, the Settings pricing them per row)."""
    settings, *_ = settings_for(job)
    disp, _ = dispatcher_settings(job, settings)
    assert disp is not None and len(disp) >= 3
    _, plan, _ = resolve(job.model_copy(update=fields))
    codes = list(disp)
    merged = replace(next(iter(disp.values())),
                     dispatcher_rows=tuple((c, bool(s.ep_comm_overlap)) for c, s in disp.items()))
    return disp, plan, codes, merged


def _check(job: Job, **fields):
    disp, plan, codes, merged = _rows(job, **fields)
    got, _ = step_time(merged, _stacked(plan, codes))
    differ = set()
    for i, c in enumerate(codes):
        want, _ = step_time(disp[c], _stacked(plan, [-1]))
        for k in want.keys():
            a = np.broadcast_to(np.asarray(getattr(got, k)), (len(codes),))[i]
            b = np.asarray(getattr(want, k)).reshape(-1)[0]
            assert a == b, (dispatch.NAMES[c], k, a, b)
        differ.add(float(np.asarray(want.total).reshape(-1)[0]))
    assert len(differ) == len(codes)  # the dispatchers price these plans differently: the test can fail
    return codes


def test_deepseek_v3_dispatchers_per_plan():
    """DeepSeek-V3 on 2,048 H800 (arXiv:2412.19437 sec. 3.1) with expert TP 2 (the alltoall and allgather
    dispatchers price the expert-TP pair, the flex ones do not) and EP overlap (off for allgather)."""
    job = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096)
    codes = _check(job, tp=2, pp=8, vpp=2, ep=64, etp=2, sequence_parallel=True, micro_batch=1, rank_order="tp-cp-dp-pp")
    assert {dispatch.ALLTOALL, dispatch.ALLGATHER, dispatch.DEEPEP, dispatch.HYBRIDEP} <= set(codes)


def test_padded_host_sync_per_plan():
    """Qwen3-30B-A3B padded to capacity: alltoall and hybridep skip the host synchronisation, allgather
    keeps it (planner/dispatch.py [7]), so moe_host differs per plan (DeepEP left out: Megatron refuses
    padding on it)."""
    job = Job(model="qwen3-30b-a3b", gpus=128, moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    codes = _check(job, tp=1, pp=1, ep=8, micro_batch=1)
    assert dispatch.ALLGATHER in codes


def test_unknown_code_refused():
    """A plan naming a dispatcher the table lacks is an error, not a default."""
    job = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096)
    settings, *_ = settings_for(job)
    _, plan, _ = resolve(job.model_copy(update=dict(tp=2, pp=8, vpp=2, ep=64, etp=2, sequence_parallel=True, rank_order="tp-cp-dp-pp")))
    s = replace(settings, dispatcher_rows=((dispatch.ALLTOALL, True),))
    with pytest.raises(ValueError):
        dispatcher_rows(s, _stacked(plan, [dispatch.DEEPEP_LL]))


# ---------------------------------------------------------------- memory (issues 23/24, branch memdisp)
def _check_memory(job: Job, **fields):
    """memory.stage_memory_terms with the dispatcher per plan (disp, Settings.dispatcher_rows) against each
    dispatcher's own Settings: every term of every stage, bit for bit."""
    from planner.memory import STAGE_FIRST, STAGE_LAST, STAGE_MIDDLE, memory_total, stage_memory_terms

    disp, plan, codes, merged = _rows(job, **fields)
    got = stage_memory_terms(merged, _stacked(plan, codes))
    got_total = memory_total(merged, _stacked(plan, codes))
    totals = set()
    for i, c in enumerate(codes):
        want = stage_memory_terms(disp[c], _stacked(plan, [-1]))
        for stage in (STAGE_FIRST, STAGE_MIDDLE, STAGE_LAST):
            for k in want[stage].keys():
                a = np.broadcast_to(np.asarray(got[stage][k]), (len(codes),))[i]
                b = np.asarray(want[stage][k]).reshape(-1)[0]
                assert a == b, (dispatch.NAMES[c], stage, k, a, b)
        w = np.asarray(memory_total(disp[c], _stacked(plan, [-1]))).reshape(-1)[0]
        assert got_total[i] == w, (dispatch.NAMES[c], got_total[i], w)
        totals.add(float(w))
    assert len(totals) == len(codes)  # the dispatchers' bytes differ on these plans: the test can fail
    return disp


def test_deepseek_v3_memory_per_plan():
    """DeepSeek-V3 on 2,048 H800, TP 2 x EP 64 (etp 2): the dispatchers differ in their buffers (DeepEP's and
    Hybrid-EP's, memory.dispatcher_buffer_bytes [ep]), the permutations' saves (layers/moe.py routing_saved_bytes)
    and what they hold as attributes (memory.py [dh]), every stage."""
    disp = _check_memory(Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096),
                         tp=2, pp=8, vpp=2, ep=64, etp=2, sequence_parallel=True, micro_batch=1,
                         rank_order="tp-cp-dp-pp")
    assert {dispatch.ALLTOALL, dispatch.ALLGATHER, dispatch.DEEPEP, dispatch.HYBRIDEP} <= set(disp)


def test_qwen3_memory_per_plan_full_recompute():
    """Qwen3-30B-A3B on 128 GPUs, full recompute (the held attributes' recompute share, [dh])."""
    _check_memory(Job(model="qwen3-30b-a3b", gpus=128), tp=1, pp=2, ep=8, micro_batch=2, recompute="full")


def test_search_prices_every_dispatcher_in_one_call():
    """search._dispatchers_memory (fit's dispatcher search: each candidate under every other dispatcher, one
    memory_totals call on copies of its base rows, `disp` per copy) against memory_totals under each
    dispatcher's own Settings on the whole space, bit for bit: DeepSeek-V3 / 2,048 H800, TP 2 to 8, PP 1 or 8,
    a few rows of each, every recompute choice."""
    from planner.search import _dispatchers_memory, memory_totals
    from planner.space import OK, SpaceOptions, build_space

    job = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096)
    settings, gbs, seq, _ = settings_for(job)
    disp, _ = dispatcher_settings(job, settings)
    merged = replace(next(iter(disp.values())),
                     dispatcher_rows=tuple((int(c), bool(s.ep_comm_overlap)) for c, s in disp.items()))
    space = build_space(merged, gbs, seq, job.precision, SpaceOptions(tp=(2, 4, 8), pp=(1, 8)))
    rows = np.flatnonzero((space.codes == OK) & (np.broadcast_to(space.base.ep, np.shape(space.base.tp)) > 1))
    b = np.repeat(rows[::97][:30], len(space.recompute))
    r = np.tile(np.arange(len(space.recompute)), len(b) // len(space.recompute))
    codes = list(disp)
    got = _dispatchers_memory(space, codes, b, r)
    assert got.shape == (len(codes), len(b))
    for i, c in enumerate(codes):
        want = memory_totals(replace(space, settings=disp[c], dispatchers=None), b, r)
        assert np.array_equal(got[i], want), dispatch.NAMES[c]
    assert not np.array_equal(got[0], got[-1])  # the dispatchers' bytes differ: the test can fail
