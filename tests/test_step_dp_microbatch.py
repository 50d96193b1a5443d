"""The per-micro-batch part of the DP traffic weighs in the critical-stage pick, each stage's behind its own passes
(issue 22 "every axis priced", critdp; step.dp_comm's DPTraffic.mb, step.dp_windows, step.step_time).

ZeRO-2 reduce-scatters the gradients after every micro-batch's backward (DeepSpeed stage_1_and_2.py, "gradient
reduction is required after every backward because of gradient partitioning", deepspeedai/DeepSpeed issue #2252;
step.py [5]) and FSDP that reshards after forward gathers each unit's weights in the forward and again in the backward
and reduce-scatters its gradients every micro-batch (Megatron-FSDP optim_grads_params). Each stage runs those on its
own parameters after its own passes, so m - 1 of them lie on that stage's path through the step (the last one, the
weights' all-gather and the edges end the step: step_end_stage). Before, the whole DP exposure was priced behind the
critical stage's passes and added at the step's end only, and the critical stage was picked without it: the
compute-heavier last stage's compute beside the parameter-heavier first stage's DP traffic (two stages mixed).

The plans: Llama 3 8B (32 layers, h 4,096, 8 KV heads of 128, FFN 14,336, vocabulary 128,256 padded to 128,512 for
tp 4: Megatron's --make-vocab-size-divisible-by 128 x tp, untied) at tp 4 with SP, pp 2 split 17 / 15
(--decoder-first-pipeline-num-layers 17), dp 2, micro-batch 1, global batch 32 (m = 16 micro-batches), on 16 H100
SXM, megatron stack (fp32 gradients, 4 B a reduced element), the job's DP overlap off (dp_comm_overlap False: every
DP transfer waited on, so a micro-batch's exposure is its transfers whole).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import comm, step
from planner.plan import resolve
from planner.schema import Job

BASE = dict(model="llama3-8b", tp=4, pp=2, gpus=16, micro_batch=1, global_batch=32, stack="megatron",
            hardware="h100-sxm", first_stage_layers=17, dp_comm_overlap=False)
# one layer's parameters a GPU at tp 4: (q 4,096 x 4,096 + k, v 4,096 x 1,024 each + o 4,096 x 4,096 + gate, up, down
# 3 x 4,096 x 14,336) / 4 = 54,525,952, + its two RMSNorms whole (2 x 4,096) = 54,534,144
LAYER = (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336) // 4 + 2 * 4096
EMB = 128512 * 4096 // 4  # the padded vocabulary's shard a TP rank, input embedding or output layer: 131,596,288
FIRST = EMB + 17 * LAYER  # 1,058,676,736
LAST = 15 * LAYER + EMB + 4096  # with the final norm: 949,612,544
M = 16
FIRST_I, LAST_I = step.CRITICAL_STAGES.index("first"), step.CRITICAL_STAGES.index("last")


def _parts(**job):
    s, p, _ = resolve(Job(**{**BASE, **job}))
    sc, lt, comp = step._compute_pass(s, p, picked=False)
    return s, p, sc, lt, comp


def _bucketed(coll, op, elems, nbytes, n_b):
    """n_b collectives of elems x nbytes / n_b each over the dp 2 ranks at their stride (dp_comm's bucketed)."""
    return n_b * float(coll(op, np.float64(elems * nbytes / n_b), np.asarray(2), coll.strides["dp"]))


def _pick_without_and_with_dp(sc, lt, comp, dp):
    """critical_stage's pick from each stage's compute + TP + CP + PP per micro-batch, then with dp.mb added."""
    c = step.Collectives(sc)
    comms = [step.tp_comm(sc, c, lt), step.cp_comm(sc, c, lt)[0], step.pp_comm(sc, c, lt)[0]]
    tot = step.stage_totals(comp, comms)
    before, _ = step.critical_stage(comp, comms)
    after, _ = step.critical_stage(comp, comms + [dict(zip(step.CRITICAL_STAGES, dp.mb))])
    return [float(x) for x in tot], int(before), int(after)


def test_zero2_first_stage_per_microbatch_reduce_scatters_decide():
    """ZeRO-2, seq 2,048. Dense parameters a GPU: the first stage EMB + 17 x LAYER = 1,058,676,736, the last
    15 x LAYER + EMB + 4,096 = 949,612,544. Megatron's buckets max(40e6, 1e6 x dp 2) = 40e6 parameters: 27 on the
    first stage (ceil 26.47), 24 on the last (ceil 23.74). A micro-batch's reduce-scatter G = n_b x RS(4 B x p / n_b,
    2 ranks at the dp stride); overlap off, each waited on whole: the per-micro-batch part (m - 1) G, m x DPTraffic.mb
    = 15 G, and the step's end the last micro-batch's G + the weights' all-gather A = n_b x AG(2 B x p / n_b).
    Each stage's compute + TP + PP a micro-batch puts the last stage first (its output layer), by less than the first
    stage's larger reduce-scatter adds (15/16 x (G_first - G_last)), so the first stage is critical: its 17 layers'
    compute, and its DP exposure 16 G_first + A_first whole (it is also the step end's stage: the larger G + A)."""
    s, p, sc, lt, comp = _parts(sharding="zero2", seq_len=2048)
    assert LAYER == 54_534_144 and EMB == 131_596_288 and FIRST == 1_058_676_736 and LAST == 949_612_544
    assert float(sc.m) == M and s.bpp.gradients == 4.0
    dp = step.dp_comm(sc, step.Collectives(sc), comp, lt)
    assert float(dp.p_local[FIRST_I]) == FIRST and float(dp.p_local[LAST_I]) == LAST
    coll = step.dp_collectives(sc, step.Collectives(sc))
    n_b = {FIRST_I: math.ceil(FIRST / 40e6), LAST_I: math.ceil(LAST / 40e6)}
    assert n_b == {FIRST_I: 27, LAST_I: 24}
    g = {i: _bucketed(coll, comm.REDUCE_SCATTER, p_, 4.0, n_b[i]) for i, p_ in ((FIRST_I, FIRST), (LAST_I, LAST))}
    a = {i: _bucketed(coll, comm.ALL_GATHER, p_, 2.0, n_b[i]) for i, p_ in ((FIRST_I, FIRST), (LAST_I, LAST))}
    for i in (FIRST_I, LAST_I):
        assert float(dp.mb[i]) == pytest.approx((M - 1) / M * g[i], rel=1e-12)
        assert float(dp.exposed[i]) == pytest.approx(M * g[i] + a[i], rel=1e-12)  # overlap off: every transfer
        assert float(dp.exposed[i]) == pytest.approx(float(dp.total[i]), rel=1e-12)
    tot, before, after = _pick_without_and_with_dp(sc, lt, comp, dp)
    assert tot[LAST_I] > tot[FIRST_I] and before == LAST_I  # by compute + TP + PP alone: the last stage
    gap = tot[LAST_I] - tot[FIRST_I]
    assert (M - 1) / M * (g[FIRST_I] - g[LAST_I]) > gap and after == FIRST_I  # its reduce-scatters decide
    t, extra = step.step_time(s, p)
    assert int(extra["critical_stage"]) == FIRST_I and int(extra["critical_stage_layers"]) == 17
    assert float(t.compute) == pytest.approx(M * float(comp.stages[FIRST_I][0]), rel=1e-12)
    # m x the first stage's 15/16 G + its step end (G + A): its whole exposure
    assert float(t.dp_comm_exposed) == pytest.approx(M * g[FIRST_I] + a[FIRST_I], rel=1e-12)


def test_fsdp_first_stage_per_microbatch_gathers_decide():
    """FSDP (resharding after forward: megatron's FSDP under pp 2, no pipeline no-sync), seq 4,096. The units a layer
    each (no fsdp_bucket_params): 17 on the first stage, 15 on the last. A micro-batch's transfers, overlap off: the
    forward's all-gather and the backward's re-gather of the stage's weights, 2 x n_b x AG(2 B x p / n_b), and its
    gradients' reduce-scatter n_b x RS(4 B x p / n_b): X = 2 A + R, of which m - 1 per micro-batch (DPTraffic.mb =
    15/16 X) and the step's whole m X. The first stage's X beats the last's by more than the last stage's lead in
    compute + TP + PP, so the first stage is critical."""
    s, p, sc, lt, comp = _parts(sharding="fsdp", seq_len=4096)
    dp = step.dp_comm(sc, step.Collectives(sc), comp, lt)
    coll = step.dp_collectives(sc, step.Collectives(sc))
    assert {k: int(v) for k, v in sc.n.items() if k != "mid"} == {"first": 17, "last": 15}
    x = {}
    for i, p_, n_b in ((FIRST_I, FIRST, 17), (LAST_I, LAST, 15)):
        x[i] = 2.0 * _bucketed(coll, comm.ALL_GATHER, p_, 2.0, n_b) + _bucketed(coll, comm.REDUCE_SCATTER, p_, 4.0, n_b)
        assert float(dp.mb[i]) == pytest.approx((M - 1) / M * x[i], rel=1e-12)
        assert float(dp.exposed[i]) == pytest.approx(M * x[i], rel=1e-12)
    tot, before, after = _pick_without_and_with_dp(sc, lt, comp, dp)
    assert before == LAST_I and after == FIRST_I
    assert (M - 1) / M * (x[FIRST_I] - x[LAST_I]) > tot[LAST_I] - tot[FIRST_I]
    t, extra = step.step_time(s, p)
    assert int(extra["critical_stage"]) == FIRST_I
    assert float(t.dp_comm_exposed) == pytest.approx(M * x[FIRST_I], rel=1e-12)


def test_exposure_splits_into_per_microbatch_and_step_end_parts():
    """With the DP overlap on (ZeRO-2, the same plan): one reduction's exposure behind the stage's own backward,
    X = hide(G - G / n_b, backward, x) + G / n_b (step._hide: what outlasts the window, plus the stack's exposed share
    x of the overlapped rest; the last bucket's never hides), the per-micro-batch part 15 X, and what is left (the last
    micro-batch's X and the weights' all-gather behind the forward) the step end's; each stage's own window
    (stage_passes' backward: the last stage's with two thirds of the output layer)."""
    s, p, sc, lt, comp = _parts(sharding="zero2", seq_len=2048, dp_comm_overlap=True)
    dp = step.dp_comm(sc, step.Collectives(sc), comp, lt)
    coll = step.dp_collectives(sc, step.Collectives(sc))
    for i, p_, n_b in ((FIRST_I, FIRST, 27), (LAST_I, LAST, 24)):
        g = _bucketed(coll, comm.REDUCE_SCATTER, p_, 4.0, n_b)
        bwd = float(comp.passes[i][1])
        want = float(step._hide(g - g / n_b, bwd, sc.x)) + g / n_b
        assert float(dp.mb[i]) == pytest.approx((M - 1) / M * want, rel=1e-12)
        assert float(dp.exposed[i]) - M * float(dp.mb[i]) >= want * (1.0 - 1e-12)
    assert float(comp.passes[LAST_I][1]) > float(comp.passes[FIRST_I][1])  # the windows differ: each stage's own


def test_dualpipe_end_slots_share_the_pairs_windows():
    """DualPipe (deepseek stack, Llama 3 8B pp 4, 8 layers a stage): the end ranks hold stage 0 and stage 3 (the
    first and last slots' traffic both the pair's, _dp_stages), and run their passes paired, the last slot's passes
    the pair's mean (stage_passes); so both end slots hide the pair's traffic behind the pair's windows, and their
    exposure is the same (stage 0's own backward, without the output layer's two thirds, would leave more of the
    pair's traffic exposed: a step end that was no rank's)."""
    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, pp=4, micro_batch=1, global_batch=16, sharding="zero1",
                          precision="fp8", stack="deepseek", mtp_layers=0))
    sc, lt, comp = step._compute_pass(s, p, picked=False)
    assert bool(step.dualpipe_pairs(p))
    win = step.dp_windows(sc, comp, step.comm_stages(sc))
    last = comp.passes[LAST_I]
    assert float(comp.passes[FIRST_I][1]) < float(last[1])  # stage 0 alone: no output layer
    assert [float(win.fwd_mb[FIRST_I]), float(win.bwd_mb[FIRST_I])] == [float(last[0]), float(last[1])]
    dp = step.dp_comm(sc, step.Collectives(sc), comp, lt)
    assert float(dp.exposed[FIRST_I]) == float(dp.exposed[LAST_I]) > 0
