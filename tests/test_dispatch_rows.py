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


def _check(job: Job, **fields):
    settings, *_ = settings_for(job)
    disp, _ = dispatcher_settings(job, settings)
    assert disp is not None and len(disp) >= 3
    _, plan, _ = resolve(job.model_copy(update=fields))
    codes = list(disp)
    merged = replace(next(iter(disp.values())),
                     dispatcher_rows=tuple((c, bool(s.ep_comm_overlap)) for c, s in disp.items()))
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
