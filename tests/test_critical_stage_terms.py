"""Issue 22 (critstage2): the terms of the step priced from the stage whose time they add to.

- the bf16 end layers (Megatron --first-last-layers-bf16) and the multi-token prediction modules are in their
  stage's passes (step.stage_passes: the DP hiding windows and the bubble's pass ratio read the critical stage's);
- full recompute re-runs the bf16 layers it covers at bf16 (megatron/core/recompute.py @d98e8a64 custom_forward
  l. 79-91, 108: each layer under its own quantization context), which ones by --recompute-method (l. 157-181:
  uniform every layer, block the first n of each model chunk), pipeline.stage_end_kinds(rerun=True);
- DeepSpeed's partitioned pipe tensors' all-gathers are each stage's own (engine.py @38327e07 l. 719-733, 826-851):
  the first stage 2, a middle one 3, the last 1 (step.pp_comm, [25]).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner import step as S
from planner.layers import layer_list
from planner.plan import resolve
from planner.schema import Job

# Llama 3 8B (32 layers, one layer kind), fp8 tensorwise on H100, pp 4: stages of 8 layers
FP8 = dict(model="llama3-8b", gpus=8, hardware="h100-sxm", tp=1, pp=4, micro_batch=1, global_batch=64, seq_len=4096,
           sharding="zero1", precision="fp8", fp8_recipe="tensorwise", stack="megatron")


def _sc(**kw):
    settings, plan, _ = resolve(Job(**{**FP8, **kw}))
    sc = S._context(settings, plan)
    return sc, S.layer_times(sc)


def _f(x) -> float:
    return float(np.ravel(x)[0])


def _deltas(sc, lt):
    """One layer's (forward as GPU work, backward with selective's share, forward GEMMs) at bf16 less at fp8."""
    plan = sc.plan
    lt16 = S.layer_times(S._context(sc.settings, S.with_fields(plan, precision=np.zeros_like(plan.precision))))
    df = _f((lt16.fwd[0] - lt16.host_fwd[0]) - (lt.fwd[0] - lt.host_fwd[0]))
    db = _f((lt16.bwd[0] + lt16.sel[0]) - (lt.bwd[0] + lt.sel[0]))
    dg = _f(lt16.gemm_fwd[0] - lt.gemm_fwd[0])
    return df, db, dg


def test_stage_end_kinds_rerun_windows_by_hand():
    """32 layers on pp 4 x vpp 2: chunks of 4, chunk j on stage j mod 4 (stage 0: 0-3 and 16-19; stage 1: 4-7 and
    20-23; stage 2: 8-11 and 24-27; stage 3: 12-15 and 28-31). bf16 layers 0-5 (n0 6) and 30-31 (n1 2).
    Held: stage 0 layers 0-3 (4); the middle stage holding the most, stage 1: 4-5 (2); stage 3: 30-31 (2).
    Block recompute, 1 a chunk (the readers' recompute_layers = 1 x vpp 2 = 2): each chunk's first layer re-runs,
    stage 0: 0, 16 -> bf16 among them 0 (1); stage 1: 4, 20 -> 4 (1); stage 3: 12, 28 -> none (0).
    2 a chunk (recompute_layers 4): stage 0: 0, 1, 16, 17 -> 0, 1 (2); stage 1: 4, 5, 20, 21 -> 4, 5 (2);
    stage 3: 12, 13, 28, 29 -> none (0). Uniform (cap None): every bf16 layer, the held counts."""
    from planner.pipeline import stage_end_kinds

    settings, plan, _ = resolve(Job(**{**FP8, "vpp": 2, "schedule": "interleaved"}))
    ll = layer_list(settings.model)
    held = [_f(x[0]) for x in stage_end_kinds(ll, plan, 6, 2)]
    assert held == [4.0, 2.0, 2.0]
    assert [_f(x[0]) for x in stage_end_kinds(ll, plan, 6, 2, rerun=True, cap=2)] == [1.0, 1.0, 0.0]
    assert [_f(x[0]) for x in stage_end_kinds(ll, plan, 6, 2, rerun=True, cap=4)] == [2.0, 2.0, 0.0]
    assert [_f(x[0]) for x in stage_end_kinds(ll, plan, 6, 2, rerun=True, cap=None)] == held


def test_bf16_end_layers_in_the_stage_passes_and_rerun_by_hand():
    """Llama 3 8B fp8 tensorwise, pp 4 (8 layers a stage), bf16 layers 2 at the start and 1 at the end: stage 0
    holds layers 0 and 1, stage 3 layer 31 (the middle stages none). Per bf16 layer the extra over fp8 is
    (df, db, dg): its forward as GPU work, its backward, its forward GEMMs (H100, T = 4,096: df 0.6365 ms, the
    backward's GEMMs twice the forward's [1] so db = 2 df = 1.2730 ms, dg 1.1790 ms (0.6403 / 1.2807 / 1.1829 ms before a
    GEMM's output write was priced after its K loop, compute [5a]: the write, the same in bf16 and fp8, cancels in the
    difference and the K loop's rates are a little higher), the GEMMs' whole gain, which
    df nets of fp8's casts). stage_passes' first stage is the plain passes plus 2 x (df, db, dg), the last plus
    1 x; compute_time's stages (bf16_end_layers) grow by the same forward + backward: 2 (df + db), 1 (df + db).
    Full recompute, uniform (no recompute_layers): every layer re-runs, the bf16 ones at bf16, so the backward pass
    gains df more per bf16 layer: first 2 x (db + df), last 1 x (db + df). Block, 1 layer a chunk
    (recompute_layers 1, vpp 1): the first layer of each stage re-runs, layer 0 (bf16) on stage 0 and layer 24 on
    stage 3 (fp8): first 2 db + 1 df, last db alone."""
    sc0, lt0 = _sc()
    base = S.stage_passes(sc0, lt0, S.head_time(sc0))
    sc, lt = _sc(bf16_layers_at_start=2, bf16_layers_at_end=1)
    df, db, dg = _deltas(sc, lt)
    assert (df, db, dg) == pytest.approx((0.6365e-3, 1.2730e-3, 1.1790e-3), rel=1e-3)
    assert db == pytest.approx(2 * df, rel=1e-9)
    mid, first, last = S.stage_passes(sc, lt, S.head_time(sc))
    for got, was, n in ((first, base[1], 2), (last, base[2], 1), (mid, base[0], 0)):
        assert [_f(g) - _f(w) for g, w in zip(got, was)] == pytest.approx([n * df, n * db, n * dg], rel=1e-9)
    f_, m_, l_ = (_f(x) for x in S.bf16_end_layers(sc, lt))
    assert (f_, m_, l_) == pytest.approx((2 * (df + db), 0.0, df + db), rel=1e-9)

    for kw, (rf, rl) in ((dict(recompute="full"), (2, 1)), (dict(recompute="full", recompute_layers=1), (1, 0))):
        sc0, lt0 = _sc(**kw)
        base = S.stage_passes(sc0, lt0, S.head_time(sc0))
        sc, lt = _sc(bf16_layers_at_start=2, bf16_layers_at_end=1, **kw)
        mid, first, last = S.stage_passes(sc, lt, S.head_time(sc))
        assert _f(first[1]) - _f(base[1][1]) == pytest.approx(2 * db + rf * df, rel=1e-9), kw
        assert _f(last[1]) - _f(base[2][1]) == pytest.approx(db + rl * df, rel=1e-9), kw
        f_, _, l_ = (_f(x) for x in S.bf16_end_layers(sc, lt))
        assert (f_, l_) == pytest.approx((2 * (df + db) + rf * df, df + db + rl * df), rel=1e-9), kw


MTP = dict(model="qwen3-30b-a3b", gpus=8, tp=1, pp=2, ep=4, global_batch=8, micro_batch=1, seq_len=4096,
           sharding="zero1", mtp_layers=1)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_mtp_modules_in_the_last_stage_passes(recompute):
    """Qwen3-30B-A3B with one MTP module (a layer of its last layer's kind k, the projection [T, h, 2h], its output
    layer and loss, logits L = head_time), pp 2: the last stage's passes gain the module's, as compute_time's last
    stage gains mtp_time. Forward: the layer's forward as GPU work (fwd - host, the MoE host gaps apart) + the
    projection's forward GEMM P + L / 3; backward: the layer's backward (+ its forward again as GPU work, and P,
    under full recompute's uniform method: multi_token_prediction.py @d98e8a64 l. 1621-1629) + 2 P + 2 L / 3;
    forward GEMMs: the layer's + P. So fwd + bwd = mtp_time less the host gaps, once
    (twice under full recompute, whose re-run forward issues the dispatcher again)."""
    settings, plan, _ = resolve(Job(**MTP, recompute=recompute))
    sc = S._context(settings, plan)
    lt = S.layer_times(sc)
    logits = S.head_time(sc)
    (k,) = sc.ll.mtp_kinds
    f, b, g = (_f(x) for x in S.mtp_passes(sc, lt, logits))
    full = recompute == "full"
    host = _f(lt.host_fwd[k]) * (2.0 if full else 1.0)
    assert f + b + host == pytest.approx(_f(S.mtp_time(sc, lt, logits)), rel=1e-9)
    lf = _f(lt.fwd[k] - lt.host_fwd[k])
    proj = f - lf - _f(logits) / 3.0
    assert proj > 0
    assert b == pytest.approx(_f(lt.bwd[k] + lt.sel[k]) + ((lf + proj) if full else 0.0) + 2 * proj
                              + 2 * _f(logits) / 3, rel=1e-9)
    assert g == pytest.approx(_f(lt.gemm_fwd[k]) + proj, rel=1e-9)
    # in the last stage's passes: the same stage without the module, plus these
    settings0, plan0, _ = resolve(Job(**{**MTP, "mtp_layers": 0}, recompute=recompute))
    sc0 = S._context(settings0, plan0)
    lt0 = S.layer_times(sc0)
    last, last0 = S.stage_passes(sc, lt, logits)[2], S.stage_passes(sc0, lt0, S.head_time(sc0))[2]
    assert [_f(a) - _f(c) for a, c in zip(last, last0)] == pytest.approx([f, b, g], rel=1e-9)


def test_partitioned_pipe_all_gathers_per_stage_by_hand():
    """DeepSpeed's partitioned pipe tensors (step.py [25]) on megatron-deepspeed (grad_partitioned: the gradient
    sent partitioned too), Llama 3 8B tp 2, pp 4, dp 1 (one node), no SP, micro-batch 1 x 4,096: T h = 4,096 x 4,096 x 2 B =
    33,554,432 B. Each stage's all-gathers of it over its 2 TP ranks a micro-batch (engine.py @38327e07): the
    received input (l. 719-733) on stages 1..3; the output rebuilt in the backward (l. 826-838) and the received
    gradient (l. 840-851) on stages 0..2. So first 2, middle 3, last 1, each priced AG = all_gather(33,554,432 B, 2).
    The sends (blocking, one after another: a middle stage's 4, an end stage's 2, of the 1 / 2 part S =
    send(16,777,216 B)): first 2 S + 2 AG, middle 4 S + 3 AG, last 2 S + 1 AG. On h100-sxm NVLink (370 GB/s,
    3.4 us): S = 16,777,216 / 370e9 + 3.4 us = 48.744 us; AG, each rank receiving 16,777,216 B, 48.744 us too:
    first 4 x 48.744 = 194.98 us, middle 7 x = 341.21 us, last 3 x = 146.23 us."""
    settings, plan, _ = resolve(Job(model="llama3-8b", gpus=8, hardware="h100-sxm", tp=2, pp=4, seq_len=4096,
                                    micro_batch=1, global_batch=64, sequence_parallel=False,
                                    stack="megatron-deepspeed", sharding="zero1"))
    assert settings.pipe_partitioned
    sc = S._context(settings, plan)
    lt = S.layer_times(sc)
    coll = S.Collectives(sc)
    per_mb, _, _, _ = S.pp_comm(sc, coll, lt)  # (per micro-batch, warm-up / flush, fill / drain hops, wrap: step.py [31])
    send = _f(coll(comm.SEND_RECV, 16_777_216.0, plan.pp, coll.strides["pp"]))
    ag = _f(coll(comm.ALL_GATHER, 33_554_432.0, plan.tp, coll.strides["tp"]))
    assert send == pytest.approx(16_777_216 / 370e9 + 3.4e-6, rel=1e-6)
    assert ag == pytest.approx(16_777_216 / 370e9 + 3.4e-6, rel=1e-6)
    assert _f(per_mb["first"]) == pytest.approx(2 * send + 2 * ag, rel=1e-9)
    assert _f(per_mb["mid"]) == pytest.approx(4 * send + 3 * ag, rel=1e-9)
    assert _f(per_mb["last"]) == pytest.approx(2 * send + 1 * ag, rel=1e-9)
    assert (_f(per_mb["first"]), _f(per_mb["mid"]), _f(per_mb["last"])) == pytest.approx(
        (194.98e-6, 341.21e-6, 146.23e-6), rel=1e-4)
