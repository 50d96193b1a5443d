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
# Megatron GPT 7.5B: 36 layers of 12 h^2 + 13 h at h 4,096, the 51,200 x h embedding (tied), 2,048 x h positions and
# the final LayerNorm's 2 h: 7,249,674,240 + 209,715,200 + 8,388,608 + 8,192
P_GPT = 7_467_786_240


def _run(stack, **kw):
    """Llama 3 8B on `stack` (the 2021 fork builds no Llama: a stack file of the user's without runs.layer_kinds,
    conftest.unlisted_stack_file, prices the entry's mechanisms on it), or the job's model where kw names one."""
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
    the 2021 one: 4 AG + 2 AR, the all-gathers the same. Megatron GPT 7.5B at seq 2,048 (a shape the 2021 fork
    builds, mdsfork2), P_GPT parameters."""
    P = P_GPT
    out = {}
    for stack in ("megatron-deepspeed", "megatron-deepspeed-2021"):
        s, p, b = _run(stack, model="megatron-gpt-7.5b", seq_len=2048)
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


def test_sync_cycle_one_deep_by_hand():
    """step.py [22]: a gather hides behind the compute queued since the previous synchronising fetch only, one not
    prefetched (the previous fetch above stage3_max_live_parameters) is exposed whole, a fetch that gathers nothing
    does not synchronise. Cycle gathers (3, 1, 4) s, computes (2, 2, 1) s, no prefetch after the second, x = 0: in
    the steady round the first hides behind the third's 1 s (2 exposed), the second behind the first's 2 s (0), the
    third is not prefetched (4): 6 s."""
    from planner.step import sync_cycle
    assert float(sync_cycle([3.0, 1.0, 4.0], [2.0, 2.0, 1.0], [True, False, True], 0.0)) == pytest.approx(6.0)
    # the second kept gathered (no fetch, no synchronize): the third hides behind 2 + 2 s (0), the first behind 1 s
    assert float(sync_cycle([3.0, 0.0, 4.0], [2.0, 2.0, 1.0], [True, True, True], 0.0)) == pytest.approx(2.0)
    # the overlapped part pays the stack's exposed fraction (_hide): the first 2 + 1 x 0.189, the third 4 x 0.189
    assert float(sync_cycle([3.0, 0.0, 4.0], [2.0, 2.0, 1.0], [True, True, True], 0.189)) == pytest.approx(
        2.0 + 0.189 + 4.0 * 0.189)
    # a reduction of 1.5 s issued after the first fetch waits with the third's gather: 4 + 1.5 - (2 + 2) = 1.5 more
    assert float(sync_cycle([3.0, 0.0, 4.0], [2.0, 2.0, 1.0], [True, True, True], 0.0, [1.5, 0.0, 0.0])) == \
        pytest.approx(2.0 + 1.5)


def test_bucket_flushes_by_hand():
    """a12aaedc stage3.py l. 1883-1889: a gradient that would overflow reduce_bucket_size flushes the bucket first.
    GPT-3 175B's modules in backward order (fc2, fc1, dense, qkv: 4h^2, 4h^2, h^2, 3h^2 at h 12,288, in units of
    h^2 / 1e6 ~ 151M), bucket 5e8: every gradient flushes the previous one (qkv's at the next layer's fc2)."""
    from planner.step import bucket_flushes
    h2 = 12288.0 ** 2
    out = bucket_flushes([4 * h2, 4 * h2, h2, 3 * h2], 5e8)
    assert [float(x) for x in out] == [3 * h2, 4 * h2, 4 * h2, h2]
    # three of 100 into a bucket of 250: the fill carries across layers; round two flushes 200 at the second only
    assert [float(x) for x in bucket_flushes([100.0, 100.0, 100.0], 250.0)] == [0.0, 200.0, 0.0]



def test_no_entry_fetches_one_deep_yet():
    """[22] is priced but no stack entry sets it (the records' figures with it on: the z3sync commit message)."""
    assert load_stack("megatron-deepspeed-2021").overlap.fsdp_prefetch_depth is None


def test_one_deep_total_by_hand(tmp_path):
    """The entry with overlap.fsdp_prefetch_depth 1 [22] (its file without runs.layer_kinds: the fork builds no Llama,
    mdsfork2), Llama 3 8B on 16 GPUs, m = 2, no recompute: DP traffic =
    2 m gathers of every parameter, one collective each (the layers' four GEMM rows: 25,165,824, 16,777,216,
    117,440,512 and 58,720,256 parameters, 2 B) plus 3 x its bytes over HBM (the zeros buffer and PyTorch's
    copy-out), and the embedding and output layer's (P less 32 layers) in one; m reductions: a layer's 218,103,808
    gradients stay below the 5e8 bucket, so each module flushes its share of a 5e8-element all-reduce, and the
    rest's one all-reduce."""
    import dataclasses

    from conftest import unlisted_stack_file

    s, p, b = _run(unlisted_stack_file(tmp_path, "megatron-deepspeed-2021"), dp_comm_overlap=True)
    st = s.stack
    s1 = dataclasses.replace(s, stack=st.model_copy(update={"overlap": st.overlap.model_copy(
        update={"fsdp_prefetch_depth": 1})}))
    sc = _context(s1, p)
    coll = Collectives(sc)
    st_dp = coll.strides["dp"]
    mods = [25_165_824, 16_777_216, 117_440_512, 58_720_256]
    layer = sum(mods)
    rest = P - 32 * layer

    def ag(n):
        return float(coll(comm.ALL_GATHER, n * 2.0, 16, st_dp)) + 3.0 * n * 2.0 / float(sc.hbm)

    gather_pass = 32 * sum(ag(n) for n in mods) + ag(rest)
    bucket_ar = float(coll(comm.ALL_REDUCE, 5e8 * 2.0, 16, st_dp))
    reduce_mb = 32 * sum(bucket_ar * n / 5e8 for n in mods) + float(coll(comm.ALL_REDUCE, rest * 2.0, 16, st_dp))
    b1 = evaluate(s1, p)
    assert float(b1.time_extra["dp_comm_s"]) == pytest.approx(4 * gather_pass + 2 * reduce_mb, rel=1e-9)
    assert float(b1.time_extra["dp_comm_s"]) != pytest.approx(float(b.time_extra["dp_comm_s"]), rel=1e-3)
