"""The stack megatron-deepspeed-2021 (issue 21, ds2021): Megatron-DeepSpeed with DeepSpeed a12aaedc (2021-04-29), the
ZeRO-3 of Narayanan et al. 2021 Table 2. At its stage-3 defaults (constants.py @a12aaedc: contiguous_gradients False
l. 64, reduce_scatter False l. 56) stage3.py reduce_ipg_grads sends each flushed gradient bucket through
buffered_reduce_fallback -> allreduce_bucket: dist.all_reduce of the whole bucket over the data-parallel group
(l. 2162-2193, 2267-2330), where today's DeepSpeed reduce-scatters it (step.py [21], mode zero3 grad_allreduce)."""

from __future__ import annotations

import pytest

from planner import comm
from planner.catalog import load_stack
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job
from planner.step import Collectives, _context

# Llama 3 8B: 8,030,261,248 parameters (HF safetensors)
P = 8_030_261_248


def _run(stack, **kw):
    job = dict(model="llama3-8b", gpus=16, micro_batch=1, seq_len=8192, global_batch=32, stack=stack,
               sharding="fsdp", dp_comm_overlap=False)
    job.update(kw)
    settings, plan, _ = resolve(Job(**job))
    return settings, plan, evaluate(settings, plan)


def test_the_entry_says_what_a12aaedc_runs():
    s = load_stack("megatron-deepspeed-2021")
    z3 = {m.name: m for m in s.runs.sharding}["zero3"]
    assert z3.grad_allreduce and z3.dp_comm_overlap  # all-reduced buckets; stage 3's overlap_comm default True (l. 60)
    assert s.fsdp.zero3_modules.contiguous_gradients == 0 and s.fsdp.zero3_modules.sub_group_size == 10 ** 12
    assert [k.kind for k in s.runs.layer_kinds] == ["global"]  # no deepspeed/moe at a12aaedc
    today = load_stack("megatron-deepspeed")
    assert not {m.name: m for m in today.runs.sharding}["zero3"].grad_allreduce
    assert s.runs.startup_rules == today.runs.startup_rules == "deepspeed"  # the same start-up rules, by field


def test_zero3_dp_traffic_all_reduces_the_buckets_in_place_of_the_reduce_scatters():
    """Without overlap every DP transfer is on the step: 16 ranks, m = 32 / 16 = 2 micro-batches, two gathers a
    micro-batch (forward, backward: resharded) and one reduction a micro-batch (grad_reduce microbatch), each in
    n_b = ceil(P / fsdp_bucket_params) buckets of the 2 B weights / gradients. Today's stack: 4 AG + 2 RS;
    the 2021 one: 4 AG + 2 AR, the all-gathers the same."""
    out = {}
    for stack in ("megatron-deepspeed", "megatron-deepspeed-2021"):
        s, p, b = _run(stack)
        assert (int(p.sharding), int(p.dp), int(p.pp)) == (3, 16, 1)
        sc = _context(s, p)
        coll = Collectives(sc)
        fs = s.stack.fsdp
        n_b = -(-P // fs.fsdp_bucket_params)

        def one(op, per):
            return float(n_b * coll(op, P * per / n_b, 16, coll.strides["dp"]))

        ag, rs, ar = (one(comm.ALL_GATHER, fs.param_gather_bytes), one(comm.REDUCE_SCATTER, fs.grad_reduce_bytes),
                      one(comm.ALL_REDUCE, fs.grad_reduce_bytes))
        out[stack] = (float(b.time_extra["dp_comm_s"]), ag, rs, ar)
    t_now, ag, rs, ar = out["megatron-deepspeed"]
    assert t_now == pytest.approx(4 * ag + 2 * rs, rel=1e-9)
    t_2021, ag21, rs21, ar21 = out["megatron-deepspeed-2021"]
    assert (ag21, rs21, ar21) == (ag, rs, ar)
    assert t_2021 == pytest.approx(4 * ag + 2 * ar, rel=1e-9)
    assert ar > rs  # at 16 ranks the all-reduce moves twice the bytes and costs more
