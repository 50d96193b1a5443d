"""The backward's re-gather of a column-parallel linear's sequence-parallel input for its wgrad GEMM (planner/step.py
[35], step.regather_seconds; explain's time.tp_wgrad_regather_s, inside tp_comm_s), derived by hand.

Transformer Engine (NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/module/linear.py l. 897-923,
layernorm_linear.py l. 724-749) saves a column-parallel linear's local input shard under SP and all-gathers it again in
the backward, async, before the dgrad GEMM, waiting on it before the wgrad GEMM: one all-gather of T x the input's
columns over the TP group a linear and micro-batch, hidden behind that linear's dgrad GEMM at the stack's exposed
share (step._hide: max(AG - window, 0) + the overlapped part x overlapped_exposed_fraction, 0.189 on the megatron
stack: stack_db/megatron.yaml, Lee et al. 2025 arXiv:2507.03114).

Llama 3 8B (h 4,096, 32 layers: an attention block and an MLP each, so two such linears a layer: the fused-norm QKV and
fc1) at TP 2 with SP on 8 H100s, T = 4,096 tokens a micro-batch (micro-batch 1, seq 4,096), m = 2 micro-batches.
comm.py inside one NVLink domain, 2 ranks (conftest.h100_nvlink_ring_s): AG of T h x 2 B = 33,554,432 B:
3.4 + 45.344 = 48.744 us. Each window outlasts it whatever the GEMM efficiency: the QKV dgrad GEMM is
2 T (a + 2 k) d / t h = 2 x 4,096 x 3,072 x 4,096 = 1.031e11 FLOPs, >= 104 us at the H100's 989 TFLOP/s peak (fc1's
4.81e11, >= 487 us): so each re-gather costs 0.189 x 48.744 = 9.2126 us, 18.425 us a layer, m x L x that =
1.1792 ms a step.
"""

from __future__ import annotations

import pytest

from conftest import explain_job, h100_nvlink_ring_s as _ring

X = 0.189  # stack_db/megatron.yaml overlap.overlapped_exposed_fraction
MSG = 4096 * 4096 * 2  # T h x 2 B
M, L = 2, 32


def _job(**kw):
    base = dict(model="llama3-8b", gpus=8, tp=2, pp=1, sharding="zero1", bytes_per_param="megatron", global_batch=8,
                micro_batch=1, seq_len=4096, stack="megatron", hardware="h100-sxm", precision="bf16")
    settings, plan, est, js = explain_job(**{**base, **kw})
    assert js["plan"]["microbatches_per_step"] == M
    return settings, plan, est, js


def test_bf16_tp2_by_hand():
    """bf16: 2 linears x 0.189 x 48.744 us a layer and micro-batch; 64 x 18.425 us = 1.1792 ms a step, inside
    tp_comm_s."""
    one = X * _ring(2, MSG)
    assert one == pytest.approx(9.2126e-6, rel=1e-4)
    assert 2.0 * 4096 * 3072 * 4096 / 989e12 > _ring(2, MSG)  # the QKV dgrad window outlasts the gather
    _, _, _, js = _job()
    t = js["time"]
    assert t["tp_wgrad_regather_s"] == pytest.approx(M * L * 2 * one, rel=1e-9)
    assert M * L * 2 * one == pytest.approx(1.1792e-3, rel=1e-4)
    assert t["tp_wgrad_regather_s"] < t["tp_comm_s"]


def test_fp8_delayed_gathers_the_quantized_input():
    """fp8 delayed: the saved input is the fp8 row-wise data, gathered at 1 B an element (linear.py l. 899-905,
    stack_db megatron fp8_recipes tp_collective_bytes input_all_gather 1.0): AG of 16,777,216 B = 3.4 + 22.672 =
    26.072 us, x 0.189 = 4.9276 us a linear. Tensorwise adds no amax all-reduce to it (the quantizer ran in the
    forward): the same."""
    one = X * _ring(2, MSG / 2)
    assert one == pytest.approx(4.9276e-6, rel=1e-4)
    for recipe in ("delayed", "tensorwise"):
        _, _, _, js = _job(precision="fp8", fp8_recipe=recipe)
        assert js["time"]["tp_wgrad_regather_s"] == pytest.approx(M * L * 2 * one, rel=1e-9), recipe


def test_once_a_backward_with_overlap_and_recompute():
    """With --tp-comm-overlap the gather runs in the userbuffers' bulk overlap beside the same dgrad GEMM (ub_bulk_dgrad,
    Megatron's tp_comm_bulk_dgrad default True): the same seconds. Full recompute re-runs the forward only: still one
    re-gather a layer's backward."""
    want = M * L * 2 * X * _ring(2, MSG)
    for kw in ({"tp_comm_overlap": True}, {"recompute": "full"}):
        _, _, _, js = _job(**kw)
        assert js["time"]["tp_wgrad_regather_s"] == pytest.approx(want, rel=1e-9), kw


def test_none_without_sp_or_on_dtensor():
    """Without SP nothing is gathered; torchtitan's ColwiseParallel saves the gathered input (stack memory
    tp_saves_gathered_input true: memory.py holds it) and re-gathers nothing."""
    _, _, _, js = _job(sequence_parallel=False)
    assert "tp_wgrad_regather_s" not in js["time"]
    _, _, est, js = _job(stack="torchtitan", sharding="fsdp", bytes_per_param="mixed16")
    assert js["plan"]["sequence_parallel"]
    assert "tp_wgrad_regather_s" not in js["time"]
    assert float(est.time_extra["tp_wgrad_regather_s"]) == 0.0


def test_partly_exposed_where_the_gather_outlasts_the_window():
    """TP 8 on one node at micro-batch 1, seq 2,048 (T = 2,048, m = 8): AG of T h x 2 B = 16,777,216 B over 8 ranks:
    7 x 3.4 + 7/8 x 16,777,216 / 370e9 = 63.476 us; the QKV dgrad GEMM [2,048, 768, 4,096] is one wave of tiles
    (compute.py's tile quantization), shorter than the gather, fc1's [2,048, 3,584, 4,096] longer. Each linear's share
    is _hide's: max(AG - w, 0) + min(AG, w) x 0.189, with w the layer's own row (lt.sp_gemms: qkv, mlp_up), and the
    step's m x L x their sum."""
    from planner import step

    settings, plan, est, js = explain_job(model="llama3-8b", gpus=8, tp=8, pp=1, sharding="zero1",
                                          bytes_per_param="megatron", global_batch=8, micro_batch=1, seq_len=2048,
                                          stack="megatron", hardware="h100-sxm", precision="bf16")
    m = js["plan"]["microbatches_per_step"]
    assert m == 8
    ag = _ring(8, 2048 * 4096 * 2)
    assert ag == pytest.approx(63.476e-6, rel=1e-4)
    sc, lt, _ = step._compute_pass(settings, plan)
    w = lt.sp_gemms[0]
    assert set(w) == {"qkv", "mlp_up"}
    assert float(w["qkv"]) < ag < float(w["mlp_up"])  # QKV's window the shorter: its gather partly exposed
    per = sum(max(ag - float(w[n]), 0.0) + min(ag, float(w[n])) * X for n in ("qkv", "mlp_up"))
    assert per > 2 * X * ag
    assert js["time"]["tp_wgrad_regather_s"] == pytest.approx(m * L * per, rel=1e-9)


def test_mla_latents_by_hand():
    """DeepSeek-V3 on the megatron stack (the latents gathered into the up projections, step.py [32];
    tests/test_mla_tp_collectives.py's job: tp 2 with SP, T = 4,096, m = 2): per MLA layer the up projections
    re-gather T r_q (1,536) and T r_kv (512) bf16, AG 20.404 us and 9.068 us, each behind a dgrad GEMM of >= 2 x
    4,096 x 12,288 x 1,536 = 1.55e11 and 2 x 4,096 x 16,384 x 512 = 6.87e10 FLOPs (>= 157 us, 69 us at peak); the 3
    dense layers' fc1 re-gathers T h (7,168): 82.752 us behind >= 2 x 4,096 x 18,432 x 7,168 FLOPs; the 58 MoE
    MLPs' shared experts' fc1 (their own TP pair, step.py [37]) the same T h behind >= 2 x 4,096 x 2,048 x 7,168 =
    1.20e11 FLOPs (>= 122 us at peak; the routed experts read the dispatcher's rows: none). m x 0.189 x (61 x 29.472 +
    (3 + 58) x 82.752) us = 2.5877 ms."""
    from test_mla_tp_collectives import _job as mla_job

    col = 4096 * 2
    q, kv, h = _ring(2, col * 1536), _ring(2, col * 512), _ring(2, col * 7168)
    assert (q, kv, h) == (pytest.approx(20.404e-6, rel=1e-4), pytest.approx(9.068e-6, rel=1e-4),
                          pytest.approx(82.752e-6, rel=1e-4))
    _, _, _, js = mla_job("deepseek-v3")
    want = 2 * X * (61 * (q + kv) + (3 + 58) * h)
    assert js["time"]["tp_wgrad_regather_s"] == pytest.approx(want, rel=1e-9)
    assert want == pytest.approx(2.5877e-3, rel=1e-4)


def test_overlap_pairs_lose_the_regathered_dgrad_window():
    """Under tp_comm_overlap TE hides the re-gather behind the column-parallel linear's dgrad GEMM (ub_bulk_dgrad) and
    the pair's backward reduce-scatter behind its wgrad GEMM (ub_bulk_wgrad; TE @4329ff84 linear.py l. 799-807), so
    the re-gathered linears' dgrad GEMMs (QKV and fc1: their rows' forward seconds, lt.sp_gemms) leave the pairs'
    pool of 3 x the layer's forward GEMMs g (step.py [35], regather_windows). TP 8 on one node, seq 1,024 (T = 1,024,
    m = 8): the 2 pairs each way are 8 collectives of T h x 2 B = 8,388,608 B over 8 ranks, 7 x 3.4 + 7/8 x
    8,388,608 / 370e9 = 43.638 us each, t = 349.10 us a layer and micro-batch; it outlasts 3 g - d (not 3 g), so the
    pairs' exposed seconds are max(t - (3 g - d), 0) + t / 8, and the step's m x L x that (tp_comm_s less the SP norm
    grads, the re-gathers and the head's collectives, [36], which keep their own seconds)."""
    from planner import step

    settings, plan, _, js = explain_job(model="llama3-8b", gpus=8, tp=8, pp=1, sharding="zero1",
                                        bytes_per_param="megatron", global_batch=8, micro_batch=1, seq_len=1024,
                                        stack="megatron", hardware="h100-sxm", precision="bf16", tp_comm_overlap=True)
    m = js["plan"]["microbatches_per_step"]
    assert m == 8
    one = _ring(8, 1024 * 4096 * 2)
    assert one == pytest.approx(43.638e-6, rel=1e-4)
    t = 8 * one
    sc, lt, _ = step._compute_pass(settings, plan)
    g = float(lt.gemm_fwd[0])
    d = float(lt.sp_gemms[0]["qkv"] + lt.sp_gemms[0]["mlp_up"])
    assert 0 < d < g
    assert 3 * g - d < t < 3 * g  # the moved window is what exposes part of the pairs here
    per = max(t - (3 * g - d), 0.0) + t / 8
    assert per > t / 8  # before: 3 g outlasted t, only the first chunk t / tp exposed
    tm = js["time"]
    pairs = tm["tp_comm_s"] - tm["tp_sp_norm_grads_s"] - tm["tp_wgrad_regather_s"] - tm["tp_head_s"]
    assert pairs == pytest.approx(m * L * per, rel=1e-9)
    # the re-gathers themselves keep their dgrad GEMMs whole (_hide at the stack's share)
    w = lt.sp_gemms[0]
    reg = sum(max(_ring(8, 1024 * 4096 * 2) - float(w[n]), 0.0) + min(_ring(8, 1024 * 4096 * 2), float(w[n])) * X
              for n in ("qkv", "mlp_up"))
    assert tm["tp_wgrad_regather_s"] == pytest.approx(m * L * reg, rel=1e-9)


def test_no_window_taken_without_regather():
    """Where nothing is re-gathered (no SP: tp_comm_overlap needs SP, so a plan without overlap; or torchtitan, which
    saves the gathered input) regather_windows is 0 a kind: the pairs keep 3 x the forward GEMMs."""
    from planner import step

    settings, plan, _, _ = _job(stack="torchtitan", sharding="fsdp", bytes_per_param="mixed16")
    sc, lt, _ = step._compute_pass(settings, plan)
    assert [float(x) for x in step.regather_windows(sc, lt)] == [0.0] * len(sc.ll.kinds)
    settings, plan, _, _ = _job()
    sc, lt, _ = step._compute_pass(settings, plan)
    w = lt.sp_gemms[0]
    assert float(step.regather_windows(sc, lt)[0]) == pytest.approx(float(w["qkv"] + w["mlp_up"]), rel=1e-12)
