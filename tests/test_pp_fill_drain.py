"""Pipeline p2p counted as each runtime sends it (issue 22): torch.distributed.pipelining's batched exchanges on the
torchtitan stacks, and the fill's and drain's hops in the bubble (step.pp_fill_drain, step.py [31]).

torchtitan (stack_db torchtitan.yaml / torchtitan-0.3.yaml pipeline_p2p_batched): pytorch/pytorch @00722e648
torch/distributed/pipelining/schedules.py Schedule1F1B._step_microbatches fires a forward's send with the next
backward's receive in one batch_isend_irecv ('fwd_send_bwd_recv') and a backward's send with the next forward's
receive ('bwd_send_fwd_recv'), an empty list being no op (_batch_p2p): a middle stage 2 exchanges a micro-batch, the
first and the last 1. Before, the stack priced every stage at 2.

The fill and drain: the first micro-batch's forward crosses the p - 1 stage boundaries before the last stage starts
and its backward crosses them back, one transfer each (Megatron-LM @d98e8a64 schedules.py l. 2362: the warm-up's
send_forward, its own blocking _communicate, p2p_communication.py l. 494-514, batched with nothing; l. 2474 the
cooldown's send_backward): 2 (p - 1) transfers on the critical path. The bubble holds (p - 1) / v micro-batches of the
critical stage, its p2p that stage's own count; on an end stage of a batched runtime 2 v - 1 a micro-batch, so
(p - 1) / v transfers short of the 2 (p - 1) hops, which pp_fill_drain adds."""

from __future__ import annotations

import pytest

from planner import comm, step
from planner.plan import resolve
from planner.schema import Job

NV_BW = 450e9 * comm.NVLINK_RING_EFFICIENCY  # achievable NVLink ring bandwidth (tests/test_step.py)
NV_LAT = comm.NVLINK_LATENCY_S
SEND_8B = NV_LAT + 8192 * 4096 * 2 / NV_BW  # T h x 2 B = 8,192 x 4,096 x 2 = 67,108,864 B over NVLink


def _stage_pp(stack: str, **kw) -> dict:
    """The per-stage pp_comm values step_time hands critical_stage (first / mid / last, seconds a micro-batch)."""
    from test_pp_sequential_p2p import stage_comms

    s, p, _ = resolve(Job(stack=stack, **kw))
    return {k: float(v) for k, v in stage_comms(s, p)[2].items()}  # [tp, cp, pp (, ep)]: step_time's order


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-0.3"])
def test_torchtitan_1f1b_end_stages_make_one_exchange(stack):
    """Llama 3 8B, tp 1, pp 4 x FSDP2 2 on one H100 node (torchtitan trains bf16 only with FSDP under PP: start-up rule
    TORCHTITAN_FP32), 1F1B, torch.distributed.pipelining: stage 0's steady state sends its activation with the
    gradient's receive (one batch_isend_irecv with stage 1) and its bwd_send_fwd_recv batch is empty; stage 3 the
    reverse; stages 1 and 2 make both: first / middle / last = S, 2 S, S, S = T h x 2 B over NVLink (pp outermost of
    the mesh, stride 2: stages of one node)."""
    pp = _stage_pp(stack, model="llama3-8b", gpus=8, pp=4, tp=1, global_batch=16, micro_batch=1, seq_len=8192,
                   schedule="1f1b", sharding="fsdp")
    assert pp["first"] == pytest.approx(SEND_8B, rel=1e-9)
    assert pp["mid"] == pytest.approx(2 * SEND_8B, rel=1e-9)
    assert pp["last"] == pytest.approx(SEND_8B, rel=1e-9)


def _explain(stack, **kw):
    from planner.explain import evaluate, to_json

    s, p, _ = resolve(Job(stack=stack, **kw))
    est = evaluate(s, p)
    return est, to_json(s, p, est)


def test_two_stage_fill_and_drain_by_hand():
    """Llama 3 8B on 2 H100 of one node, pp 2, m = 4, Megatron-LM (1F1B). Exchanges, each one transfer S = T h x 2 B:
      fill   stage 0's warm-up send_forward of micro-batch 0 (p - 1 = 1 hop, l. 2362), waited alone;
      steady stage 0: send_forward_recv_backward x 4 (1 a micro-batch); stage 1: send_backward_recv_forward x 3 and
             the last iteration's send_backward (l. 2440-2444): 4 x 1;
      drain  stage 0's wait on micro-batch 3's gradient: 1 hop.
    Both stages are ends: pp_comm = m x 1 S = 4 S (tests/test_step.py test_pp_send_recv_by_hand). The bubble is
    (p - 1) / m = 1/4 of m = 4 micro-batches: 1 micro-batch of the critical stage, whose p2p is its 1 S, while the
    fill and drain carry 2 (p - 1) = 2 S: pp_fill_drain_s = 1 x (2 - 1) S = S, and bubble_s = 1 x t_mb + S, t_mb the
    critical stage's micro-batch (compute + TP + CP + PP: here tp 1, cp 1, so compute_s / 4 + pp_comm_s / 4)."""
    est, js = _explain("megatron", model="llama3-8b", gpus=2, pp=2, global_batch=4, micro_batch=1, seq_len=8192)
    t = js["time"]
    assert t["pp_comm_s"] == pytest.approx(4 * SEND_8B, rel=1e-9)
    assert t["pp_fill_drain_s"] == pytest.approx(SEND_8B, rel=1e-9)
    t_mb = (t["compute_s"] + t["tp_comm_s"] + t["cp_comm_s"] + t["pp_comm_s"]) / 4
    assert t["bubble_s"] == pytest.approx(1 * t_mb + SEND_8B, rel=1e-9)


def test_sequential_and_unbatched_ends_need_no_fill_term():
    """DeepSpeed's blocking one-way p2p (megatron-deepspeed: pipeline_p2p_sequential, not batched): an end stage
    already makes 2 v = 2 transfers a micro-batch, a middle 4, so the bubble's (p - 1) x the critical stage's count
    covers the 2 (p - 1) hops: pp_fill_drain_s 0. Same job as test_two_stage_fill_and_drain_by_hand."""
    est, js = _explain("megatron-deepspeed", model="llama3-8b", gpus=2, pp=2, global_batch=4, micro_batch=1,
                       seq_len=8192)
    assert float(est.time_extra["pp_fill_drain_s"]) == 0.0
    assert "pp_fill_drain_s" not in js["time"]


def test_middle_critical_stage_needs_no_fill_term():
    """Llama 3 8B, tp 8, pp 4 on 32 H100 (Megatron-LM), stages 7 / 9 / 9 / 7 (--decoder-first/last-pipeline-num-
    layers 7): a middle stage (9 layers) is the critical one and makes 2 exchanges a micro-batch, so the bubble's
    (p - 1) / v x 2 v = 2 (p - 1) transfers are the fill's and drain's hops already: pp_fill_drain_s 0."""
    est, js = _explain("megatron", model="llama3-8b", gpus=32, tp=8, pp=4, global_batch=64, micro_batch=1,
                       seq_len=8192, first_stage_layers=7, last_stage_layers=7)
    assert js["time"]["critical_stage"]["stage"] == "middle"
    assert float(est.time_extra["pp_fill_drain_s"]) == 0.0


def test_four_stage_interleaved_end_stage_fill_by_hand():
    """Llama 3 8B on 8 H100 of one node, pp 4, vpp 2, m = 4, Megatron-LM with the p2p overlap off
    (--no-overlap-p2p-communication): the critical stage is the last (tests/test_megatron_flags.py
    test_p2p_blocking_by_hand), 2 v - 1 = 3 exchanges a micro-batch. The bubble is (p - 1) / (v m) x m = 1.5
    micro-batches: 1.5 x 3 = 4.5 transfers against the fill's 3 forward hops and the drain's 3 backward hops (6 =
    1.5 x 2 v): pp_fill_drain_s = 1.5 S."""
    est, js = _explain("megatron", model="llama3-8b", gpus=8, pp=4, vpp=2, global_batch=8, micro_batch=1,
                       seq_len=8192, pp_p2p_overlap=False)
    t = js["time"]
    assert t["critical_stage"]["stage"] == "last"
    assert t["pp_fill_drain_s"] == pytest.approx(1.5 * SEND_8B, rel=1e-9)


X = 0.189  # stack_db megatron.yaml overlap.overlapped_exposed_fraction (Lee et al. 2025, arXiv:2507.03114)


def test_overlapped_interleaved_fill_hops_whole_by_hand():
    """Llama 3 8B on 8 H100 of one node, pp 4, vpp 2, m 4, Megatron-LM's default (overlap_p2p_comm on with the
    interleaved schedule, the warm-up and flush waited): the critical stage is the last, 2 v - 1 = 3 exchanges a
    micro-batch, each at the overlapped share X S (a 4-layer chunk, milliseconds, outlasts S = 0.18 ms: _hide gives
    X S). The bubble is (p - 1) / (v m) x m = 1.5 micro-batches of it: 1.5 x 3 X S of p2p. The fill's 3 forward hops
    and the drain's 3 backward hops are whole (step.py [31]: the stage a hop feeds has nothing to run before it;
    schedules.py @d98e8a64 l. 1543-1548 the first recv_forward, blocking): 6 S = 1.5 x 4 S, so
    pp_fill_drain_s = 1.5 x (4 - 3 X) S = 1.5 x 3.433 S = 5.1495 S (before: 1.5 x (4 X - 3 X) S = 0.2835 S, the hops
    at the overlapped share). The wrap-around round trips of the second chunk are stage 0's own blocking warm-up
    sends (pp_warmup_flush), not here."""
    est, js = _explain("megatron", model="llama3-8b", gpus=8, pp=4, vpp=2, global_batch=8, micro_batch=1,
                       seq_len=8192)
    t = js["time"]
    assert t["critical_stage"]["stage"] == "last"
    assert t["pp_comm_s"] == pytest.approx(4 * 3 * X * SEND_8B + t["pp_warmup_flush_s"], rel=1e-9)
    assert t["pp_fill_drain_s"] == pytest.approx(1.5 * (4 - 3 * X) * SEND_8B, rel=1e-9)
    assert t["pp_fill_drain_s"] == pytest.approx(5.1495 * SEND_8B, rel=1e-9)


def test_warmup_overlapped_wrap_hops_by_hand():
    """The same job with --overlap-p2p-communication-warmup-flush (the job's pp_p2p_overlap_warmup_flush): each later
    model chunk's first micro-batch comes round the p ranks whole while stage 0 waits (step.py [31]; schedules.py
    @d98e8a64 l. 1576-1588 each warm-up forward waits its receive's handle, l. 1973-1983 each cooldown backward its
    gradient's). Hand replay, forward chunk c, hop h = S, p = 4, v = 2, N = m = 4: stage 3 ends micro-batch 0's
    chunk 0 at 3 (c + S) + c; stage 0, done with its 4 chunk-0 forwards at 4 c, gets it at 4 c + 4 S (4 S idle);
    stage 3 ends chunk 1 at 8 c + 7 S: p v - 1 = 7 hops, 3 of the bubble's p - 1 and min(N, p) = 4 more; the drain
    likewise: 2 (p v - 1) = 14 S in all. The bubble holds 1.5 x 3 X S of them: pp_fill_drain_s =
    1.5 x (4 - 3 X) S + (v - 1) x (4 S + 4 S) = 5.1495 S + 8 S = 13.1495 S.
    With N = 8 (--microbatch-group-size-per-virtual-pipeline-stage 8, m 8) stage 0 runs 4 more chunk-0 forwards while
    micro-batch 0 comes round: 4 S = 0.74 ms against 4 forward chunks of 4 layers (tens of ms): no wait, the fill's
    2 (p - 1) alone: bubble (p - 1) / (v m) x m = 1.5 micro-batches, pp_fill_drain_s = 1.5 x (4 - 3 X) S."""
    est, js = _explain("megatron", model="llama3-8b", gpus=8, pp=4, vpp=2, global_batch=8, micro_batch=1,
                       seq_len=8192, pp_p2p_overlap_warmup_flush=True)
    t = js["time"]
    assert t["critical_stage"]["stage"] == "last"
    assert t["pp_fill_drain_s"] == pytest.approx((1.5 * (4 - 3 * X) + 8) * SEND_8B, rel=1e-9)
    assert t["pp_fill_drain_s"] == pytest.approx(13.1495 * SEND_8B, rel=1e-9)
    est, js = _explain("megatron", model="llama3-8b", gpus=8, pp=4, vpp=2, global_batch=16, micro_batch=1,
                       seq_len=8192, pp_p2p_overlap_warmup_flush=True, microbatch_group=8)
    t = js["time"]
    assert t["critical_stage"]["stage"] == "last"
    assert t["pp_fill_drain_s"] == pytest.approx(1.5 * (4 - 3 * X) * SEND_8B, rel=1e-9)


def test_blocking_stack_middle_stage_fill_unchanged():
    """torchtitan (pp_p2p_overlapped never: every transfer waited whole) prices the hops as before: Llama 3 8B, pp 4
    x FSDP2 2, 1F1B, m = 8 (global batch 16 over dp 2); critical_stage picks a middle one (8 layers a stage), 2 whole
    exchanges a micro-batch: the
    bubble's (p - 1) / m x m = 3 micro-batches x 2 S are the 2 (p - 1) = 6 whole hops already: pp_fill_drain_s 0 (on
    an overlapping stack a middle stage's 2 v are at the overlapped share, and the fill adds the rest: the tests
    above)."""
    est, js = _explain("torchtitan", model="llama3-8b", gpus=8, pp=4, tp=1, global_batch=16, micro_batch=1,
                       seq_len=8192, schedule="1f1b", sharding="fsdp")
    assert js["time"]["critical_stage"]["stage"] == "middle"
    assert float(est.time_extra["pp_fill_drain_s"]) == 0.0
