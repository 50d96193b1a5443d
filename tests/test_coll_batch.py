"""step.Collectives.batch (the MLA layers' collectives, dispatch.transfers): each op's calls priced by one _price over
their arguments laid end to end, the same bits as the calls one by one; and comm.py's ring / tree protocols where
every element crosses a network hop (_all_net: Simple alone, the LL / LL128 terms not computed), the same figures as
_fastest's full pass."""
from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner import step as S
from planner.catalog import load_hardware
from planner.plan import resolve
from planner.schema import Job


def _coll():
    settings, plan, _ = resolve(Job(model="llama3-8b", gpus=8, hardware="h100-sxm", tp=2, pp=4, seq_len=4096,
                                    micro_batch=1, global_batch=64, sequence_parallel=False,
                                    stack="megatron-deepspeed", sharding="zero1"))
    return S.Collectives(S._context(settings, plan))


def test_batch_gives_each_call_its_own_bits():
    coll = _coll()
    s = coll.strides["tp"]
    sizes = np.array([12.0, 4096.0, 33_554_432.0, 2.0**30])
    calls = [(comm.ALL_GATHER, 33_554_432.0, 2, s), (comm.ALL_GATHER, sizes, np.array([2, 2, 1, 2]), s),
             (comm.REDUCE_SCATTER, sizes, 2, s), (comm.ALL_GATHER, sizes * 0.5, np.full(4, 2.0), s),  # a float group
             (comm.ALL_REDUCE, 8.0, 1, s), (comm.ALL_REDUCE, sizes, 2, s), (comm.REDUCE_SCATTER, 6.0, 2, s)]
    got = coll.batch(calls)
    for c, g in zip(calls, got):
        one = np.asarray(coll(*c))
        assert np.shape(g) == one.shape
        np.testing.assert_array_equal(np.asarray(g).view(np.int64), one.view(np.int64))
    # the hand value (test_critical_stage_terms): 33,554,432 B gathered over 2 NVLink ranks, 16,777,216 B received
    # at 370 GB/s plus the link's 3.4 us; a group of 1 runs nothing
    assert float(got[0]) == pytest.approx(16_777_216 / 370e9 + 3.4e-6, rel=1e-6)
    assert float(got[1][2]) == 0.0 and float(got[4]) == 0.0


@pytest.mark.parametrize("op", [comm.ALL_REDUCE, comm.REDUCE_SCATTER, comm.ALL_GATHER])
def test_all_network_batches_price_simple_as_the_full_pass(monkeypatch, op):
    """16 to 256 ranks over 2 to 32 H100 nodes (every group crosses the network): Simple on every element, the same
    time, latency, bandwidth and algorithm as with _fastest's LL / LL128 columns computed and masked (_all_net off)."""
    h100 = comm.comm_params(load_hardware("h100-sxm"))
    sizes = np.array([12.0, 4096.0, 65536.0, 2.0**20, 2.0**30, 12.0])
    groups = np.array([16, 16, 32, 64, 256, 128])
    ones = np.ones(6, dtype=np.int64)
    fast, link, algo = comm.group_collective(op, sizes, groups, ones, h100, job_gpus=256)
    assert np.all(link.domains > 1) and np.all(fast.protocol == comm.SIMPLE)
    monkeypatch.setattr(comm, "_all_net", lambda *a: False)
    full, _, algo_full = comm.group_collective(op, sizes, groups, ones, h100, job_gpus=256)
    np.testing.assert_array_equal(algo, algo_full)
    for k in ("time_s", "latency_s", "bandwidth_s", "protocol"):
        np.testing.assert_array_equal(getattr(fast, k), getattr(full, k))
