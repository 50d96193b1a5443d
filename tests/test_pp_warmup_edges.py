"""The interleaved schedule's warm-up / flush p2p and wrap-around slack at the stage the step waits on (issue 22,
ppedges; step.pp_warmup_flush, step.pp_comm, step.py [13] and [31]).

Megatron-LM @d98e8a64 megatron/core/pipeline_parallel/schedules.py get_pp_rank_microbatches l. 964-965 gives each
pipeline rank r its own warm-up count, W_r = 2 (p - r - 1) + (v - 1) N (+ 1 with the MoE EP overlap, l. 969-970; at
most v m, l. 976-978), and its cool-down loop (l. 1971) runs as many backwards. Without
--overlap-p2p-communication-warmup-flush each of those iterations waits its send_forward_recv_forward (l. 1655-1657) /
send_backward_recv_backward (l. 2053-2055) whole. Before this branch pp_warmup_flush charged the first rank's W_0 on
every stage (scaled by the stage's share of a middle stage's transfers); now the last rank's W_(p-1) = (v - 1) N each
way, every one of them a send, on every stage slot (step.pp_warmup_flush's docstring derives why).

One transfer S of T h x 2 B over NVLink: Llama 3 8B at 8,192 tokens, 8,192 x 4,096 x 2 = 67,108,864 B on H100
(450 GB/s x NVLINK_RING_EFFICIENCY) plus NVLINK_LATENCY_S (tests/test_pp_fill_drain.py's SEND_8B)."""

from __future__ import annotations

import pytest

from planner import comm, step
from planner.plan import resolve
from planner.schema import Job

S = comm.NVLINK_LATENCY_S + 8192 * 4096 * 2 / (450e9 * comm.NVLINK_RING_EFFICIENCY)
X = 0.189  # stack_db megatron.yaml overlap.overlapped_exposed_fraction (Lee et al. 2025, arXiv:2507.03114)
LLAMA = dict(model="llama3-8b", gpus=8, pp=4, vpp=2, tp=1, micro_batch=1, seq_len=8192)


def _pp_comm(**kw) -> tuple:
    """step.pp_comm's four per-slot dicts (per micro-batch, warm-up / flush per step, fill hops, wrap per step) of one
    job, each {mid, first, last: seconds}, as step_time computes them before critical_stage picks one."""
    s, p, _ = resolve(Job(**kw))
    sc, lt, _ = step._compute_pass(s, p, picked=False)
    out = step.pp_comm(sc, step.Collectives(sc), lt)
    return tuple({k: float(v) for k, v in d.items()} for d in out)


def test_warmup_flush_is_the_last_stages_count_on_every_stage():
    """Llama 3 8B on 8 H100 of one node, pp 4, vpp 2, m 8 (global batch 16 over dp 2), Megatron-LM's default: the
    steady state's p2p overlapped (overlap_p2p_comm with the interleaved schedule), the warm-up's and flush's waited
    (no --overlap-p2p-communication-warmup-flush). N = p = 4 (p divides m). Each rank's warm-up (l. 964-965), of
    v m = 16 chunk-forwards:
        rank 0: 2 x 3 + 4 = 10    rank 1: 2 x 2 + 4 = 8    rank 2: 2 x 1 + 4 = 6    rank 3: 0 + 4 = 4
    and as many cool-down backwards. Rank r's 2 (p - r - 1) forwards beyond rank 3's run while it waits for its first
    backward to come back round the stages below it (that round trip's hops are pp_fill_drain's, whole), so the chain
    the step waits on is rank 3's: its 4 warm-up forwards are chunk 0 of micro-batches 0-3, each sent on (to stage 0's
    chunk 1), and its 4 cool-down backwards each send to rank 2: 8 whole sends. The steady state already charged each
    at the stage's waited share x S (a 4-layer chunk's forward, milliseconds, outlasts S = 0.18 ms, so _hide leaves
    the share), so pp_warmup_flush adds 8 (S - x S) = 8 x 0.811 S = 6.488 S, the same on the first, the middle and
    the last slot. (Before: the first rank's W = 10, 2 W = 20 x 0.811 S x the slot's share of a middle stage's 4
    transfers a micro-batch: first / middle / last 15, 20, 15 x 0.811 S = 12.165, 16.22, 12.165 S.)
    A dependency replay of this schedule (scripts/pp_schedule_replay.py megatron: each rank's ops in Megatron's
    order, chunk forward f = 10, backward 20, S = 1, x = 0.189) puts 5.9 x (1 - x) S of warm-up / flush on the
    balanced step beyond the steady share and the 2 (p - 1) whole hops, 6.8 with the last stage 20% heavier, 9.1
    with the middle ones: 8 from rank 3's count, where rank 0's gave 20."""
    per_mb, warm, hops, wrap = _pp_comm(global_batch=16, **LLAMA)
    for st in ("first", "mid", "last"):
        assert warm[st] == pytest.approx(8 * (1 - X) * S, rel=1e-9), st
        assert wrap[st] == 0.0  # the warm-up waited: its round trips fit the blocking sends' lockstep (step.py [31])
    # the steady state as before: 2 v - 1 = 3 exchanges a micro-batch at the ends, 4 in the middle, each at x S
    assert per_mb["first"] == pytest.approx(3 * X * S, rel=1e-9)
    assert per_mb["mid"] == pytest.approx(4 * X * S, rel=1e-9)
    assert per_mb["last"] == pytest.approx(3 * X * S, rel=1e-9)


def test_warmup_flush_follows_the_microbatch_group():
    """The same layout with m 16 and --microbatch-group-size-per-virtual-pipeline-stage 8 (N = 8): rank 3's warm-up
    is (v - 1) N = 8 chunk-forwards (chunk 0 of micro-batches 0-7), 8 cool-down backwards: 16 whole sends,
    16 x 0.811 S = 12.976 S on every slot (rank 0's 2 x 3 + 8 = 14 gave 28 x 0.811 S x 3/4 on an end slot)."""
    _, warm, _, _ = _pp_comm(global_batch=32, microbatch_group=8, **LLAMA)
    for st in ("first", "mid", "last"):
        assert warm[st] == pytest.approx(16 * (1 - X) * S, rel=1e-9), st


def test_wrap_slack_is_stage0_forwards_in_the_fill_and_the_last_stages_backwards_in_the_drain(monkeypatch):
    """With the warm-up and flush overlapped too (pp_p2p_overlap_warmup_flush), each of the v - 1 later rounds waits
    min(N, p) whole hops less the (N - p) chunks the waiting stage runs meanwhile (step.py [31]): in the fill the
    waiting stage is stage 0 (micro-batch 0's chunk k output comes round from stage p - 1 to stage 0's chunk k + 1,
    while stage 0 runs its round's other chunk-k forwards), in the drain stage p - 1 (its chunk k gradient from stage
    0's chunk k + 1, while it runs its backwards), whichever stage is the critical one. The layer windows are set by
    hand (step.stage_windows replaced) so that both are partly hidden: per layer, stage 0's forward S / 8, the last
    stage's backward S / 16, everything else 10 S. Llama 3 8B, pp 4, vpp 2, m 8, N = 8 (global batch 16,
    microbatch_group 8): 8 layers a stage, 4 a chunk, slack N - p = 4 chunks, a round min(N, p) = 4 S:
        fill  4 S - 4 x (4 x S / 8)  = 2 S      drain  4 S - 4 x (4 x S / 16) = 3 S
    (v - 1) x (2 + 3) S = 5 S on every slot. Before, each slot used its own chunks: first 2 S + 0 (its backward
    10 S a layer hides the drain), middle 0, last 0 + 3 S."""
    def windows(sc, lt, st):
        return {"first": (S / 8, 10 * S), "mid": (10 * S, 10 * S), "last": (10 * S, S / 16)}[st]

    s, p, _ = resolve(Job(global_batch=16, microbatch_group=8, pp_p2p_overlap_warmup_flush=True, **LLAMA))
    sc, lt, _ = step._compute_pass(s, p, picked=False)
    monkeypatch.setattr(step, "stage_windows", windows)
    _, warm, _, wrap = ({k: float(v) for k, v in d.items()} for d in step.pp_comm(sc, step.Collectives(sc), lt))
    for st in ("first", "mid", "last"):
        assert wrap[st] == pytest.approx(5 * S, rel=1e-9), st
        assert warm[st] == 0.0  # the warm-up overlapped: nothing waited whole beyond the wrap


def test_moe_ep_overlap_adds_one_warmup_forward_that_sends_nothing():
    """Qwen3-30B-A3B on 32 B200, pp 2 x vpp 2, EP 8, m 8 (global batch 128 over dp 16), Megatron's default p2p: with
    --overlap-moe-expert-parallel-comm every rank runs one more warm-up forward (schedules.py @d98e8a64 l. 969-970)
    and, the cool-down running the same count, one more backward. The last rank's W = (v - 1) N = 1 x 2 = 2 (N = p = 2)
    becomes 3; its third warm-up forward is micro-batch 0's chunk 1, the last virtual stage, which sends nothing, while
    its third cool-down backward sends: 2 W = 4 whole sends without the overlap, 2 x 3 - 1 = 5 with it. Each at
    (1 - x) S where the steady state charged x S: the end slots' per-micro-batch p2p is 2 v - 1 = 3 exchanges at x S
    (the chunk outlasts S), so S = per_mb / (3 x) and the warm-up is 4 (or 5) x (1 - x) / (3 x) x per_mb. (The pipeline
    has no middle stage at pp 2: the middle slot is 0.)"""
    job = dict(model="qwen3-30b-a3b", gpus=32, tp=1, pp=2, vpp=2, ep=8, sharding="zero1", bytes_per_param="megatron",
               global_batch=128, micro_batch=1, seq_len=4096, hardware="b200", moe_rank_imbalance=1.0)
    per_off, warm_off, _, _ = _pp_comm(**job)
    per_on, warm_on, _, _ = _pp_comm(**job, ep_comm_overlap=True)
    for st in ("first", "last"):
        s = per_off[st] / (3 * X)
        assert per_on[st] == per_off[st]
        assert warm_off[st] == pytest.approx(4 * (1 - X) * s, rel=1e-9), st
        assert warm_on[st] == pytest.approx(5 * (1 - X) * s, rel=1e-9), st
    assert warm_off["mid"] == warm_on["mid"] == 0.0
