"""Which share of each pipeline transfer a runtime leaves on the critical path, per runtime and schedule (issue 22):
the stacks' overlap.pp_p2p_overlapped, read by step.pp_comm.

torch.distributed.pipelining (stack_db torchtitan.yaml / torchtitan-0.3.yaml, pp_p2p_overlapped never; pytorch/pytorch
@00722e648 torch/distributed/pipelining/schedules.py): Schedule1F1B._step_microbatches waits each steady-state batch
(fwd_send_bwd_recv, bwd_send_fwd_recv) right after issuing it, before the next pass; ScheduleGPipe issues each receive
after the previous pass and waits it before the next; ProcessGroupNCCL::pointToPoint's syncStreams makes the batch's
stream wait for the compute already queued, so each transfer lies whole between two passes. Interleaved1F1B
(_PipelineScheduleRuntime) issues a receive where its sender's pass falls in _add_send_recv's lock-step order, often a
pass ahead, but every one-op batch_isend_irecv runs on the group's one NCCL stream in issue order, so an early receive
holds the later sends (pytorch/pytorch#188833): no share is established as hidden, all whole.

Megatron-LM's interleaved schedule (megatron.yaml, pp_p2p_overlapped interleaved, overlap_p2p_comm on by default)
hides each steady-state transfer behind the next chunk at the stack's exposed share x = 0.189 and waits its warm-up's
and flush's (pp_p2p_warmup_flush_blocking, step.pp_warmup_flush). DeepSeek's runtime (deepseek.yaml, always: arXiv:
2412.19437 sec. 3.2.1 and Fig. 4) hides every transfer at that share; the open DualPipe @bb214e82 waits each chunk's
exchange (dualpipe.py l. 185-214, 285-292), which is not what the stack prices (its sources say why).

One transfer S of T h x 2 B over NVLink: Llama 3 8B at 8,192 tokens, 8,192 x 4,096 x 2 = 67,108,864 B on H100
(450 GB/s x NVLINK_RING_EFFICIENCY); DeepSeek-V2-Lite at 4,096 tokens, 4,096 x 2,048 x 2 = 16,777,216 B on H800
(200 GB/s x the same efficiency); each plus NVLINK_LATENCY_S."""

from __future__ import annotations

import pytest

from planner import comm
from planner.plan import resolve
from planner.schema import Job

X = 0.189  # stack_db megatron.yaml / deepseek.yaml overlap.overlapped_exposed_fraction
S_H100 = comm.NVLINK_LATENCY_S + 8192 * 4096 * 2 / (450e9 * comm.NVLINK_RING_EFFICIENCY)
S_H800 = comm.NVLINK_LATENCY_S + 4096 * 2048 * 2 / (200e9 * comm.NVLINK_RING_EFFICIENCY)
LLAMA = dict(model="llama3-8b", gpus=8, pp=4, tp=1, global_batch=16, micro_batch=1, seq_len=8192)


def _run(**kw):
    """(per-stage pp_comm a micro-batch {first, mid, last}, explain's time block) of one job."""
    from test_pp_sequential_p2p import stage_comms

    from planner.explain import evaluate, to_json

    s, p, _ = resolve(Job(**kw))
    per = {k: float(v) for k, v in stage_comms(s, p)[2].items()}
    return per, to_json(s, p, evaluate(s, p))["time"]


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-0.3"])
@pytest.mark.parametrize("schedule, vpp", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2)])
def test_torchtitan_waits_every_transfer_whole(stack, schedule, vpp):
    """Llama 3 8B on 8 H100, pp 4 x FSDP2 2, m = 16 / (1 x 2) = 8. A middle stage (9 layers, the critical one) makes
    2 exchanges a model chunk and micro-batch, an end stage one fewer a micro-batch (pipeline_p2p_batched), each a
    whole S: first / middle / last = (2 v - 1) S, 2 v S, (2 v - 1) S; pp_comm_s = 8 x 2 v S = 16 S (1F1B, GPipe) or
    32 S (Interleaved1F1B, v 2), and no warm-up / flush term (nothing is overlapped to begin with). The overlapped
    share would give 0.189 of these."""
    per, t = _run(stack=stack, schedule=schedule, vpp=vpp, sharding="fsdp", **LLAMA)
    v = vpp
    assert per["first"] == pytest.approx((2 * v - 1) * S_H100, rel=1e-9)
    assert per["mid"] == pytest.approx(2 * v * S_H100, rel=1e-9)
    assert per["last"] == pytest.approx((2 * v - 1) * S_H100, rel=1e-9)
    assert t["critical_stage"]["stage"] == "middle"
    assert t["pp_comm_s"] == pytest.approx(8 * 2 * v * S_H100, rel=1e-9)
    assert t.get("pp_warmup_flush_s", 0.0) == 0.0


def test_megatron_interleaved_hides_the_steady_state_and_waits_the_warmup():
    """The same layout on Megatron-LM, vpp 2 (stages of 8 layers, the last critical with the output layer and loss:
    2 v - 1 = 3 exchanges a micro-batch). Each steady-state transfer costs x S (S < a chunk's 4 layers' forward, so
    _hide leaves only the share): per micro-batch first / middle / last = 3 x S, 4 x S, 3 x S; 8 x 3 x 0.189 S =
    4.536 S over the micro-batches. The warm-up and flush on the step's path: the last stage's W = (v - 1) N = 4
    forwards (N = p = 4 where p divides m; schedules.py @d98e8a64 l. 964-965 at rank p - 1) and as many cool-down
    backwards, each a whole send (chunk 0's forwards and every backward send), 2 W (S - x S) = 8 x 0.811 S = 6.488 S
    (pp_warmup_flush_s, inside pp_comm_s; step.pp_warmup_flush says why the last stage's): pp_comm_s = 11.024 S.
    (Before issue 22 ppedges: the first stage's W = 2 (p - 1) + (v - 1) N = 10, x 3 / 4: 12.165 S.)"""
    per, t = _run(stack="megatron", vpp=2, **LLAMA)
    assert per["first"] == pytest.approx(3 * X * S_H100, rel=1e-9)
    assert per["mid"] == pytest.approx(4 * X * S_H100, rel=1e-9)
    assert per["last"] == pytest.approx(3 * X * S_H100, rel=1e-9)
    assert t["critical_stage"]["stage"] == "last"
    warm = 8 * (1 - X) * S_H100
    assert t["pp_warmup_flush_s"] == pytest.approx(warm, rel=1e-9)
    assert t["pp_comm_s"] == pytest.approx(8 * 3 * X * S_H100 + warm, rel=1e-9)


def test_dualpipe_hides_every_transfer_as_the_report_says():
    """DeepSeek-V2-Lite (27 layers) on 8 H800 of one node, DualPipe pp 4 x dp 2, ep 2, m = 16 / (1 x 2) = 8: the
    critical stage is the end pair (rank 0 runs stage 0 and stage 3's mirror, 13 layers with the embedding and the
    output layer), each of its stages one exchange a micro-batch (2 v - 1 = 1, the pair their mean: 1), a middle
    rank 2. Hidden at the report's share: first / middle / last = x S, 2 x S, x S (S = 4,096 x 2,048 x 2 B over
    200 GB/s NVLink, under a chunk); pp_comm_s = 8 x 0.189 S = 1.512 S, no warm-up term. The open reference's
    _commit_and_wait_comm would wait each whole: 8 S."""
    job = dict(model="deepseek-v2-lite", gpus=8, hardware="h800-sxm", tp=1, pp=4, dp=2, ep=2, micro_batch=1,
               global_batch=16, seq_len=4096, sharding="zero1", stack="deepseek")
    per, t = _run(**job)
    assert per["first"] == pytest.approx(X * S_H800, rel=1e-9)
    assert per["mid"] == pytest.approx(2 * X * S_H800, rel=1e-9)
    assert per["last"] == pytest.approx(X * S_H800, rel=1e-9)
    assert t["critical_stage"]["stage"] == "end pair"
    assert t["pp_comm_s"] == pytest.approx(8 * X * S_H800, rel=1e-9)
    assert t.get("pp_warmup_flush_s", 0.0) == 0.0


def test_each_stack_states_its_runtime():
    """The stack entries carry the per-runtime reading (a source naming the runtime's wait), and the values these
    tests price: torchtitan's schedules never, Megatron-LM's interleaved, DeepSeek's always."""
    from planner.catalog import load_stack

    for name, value, cue in [("torchtitan", "never", "Interleaved1F1B"), ("torchtitan-0.3", "never", "Interleaved1F1B"),
                             ("megatron", "interleaved", "overlap_p2p_comm"), ("deepseek", "always", "_commit_and_wait_comm")]:
        ov = load_stack(name).overlap
        assert ov.pp_p2p_overlapped == value
        assert any(cue in src for src in ov.sources), name
