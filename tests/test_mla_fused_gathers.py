"""MLA's fused down projection's own TP collectives (job field mla_down_proj_fusion, Megatron --mla-down-proj-fusion;
planner/step.py [30], mla_fused_gathers; the ones both layouts run: [32], tests/test_mla_tp_collectives.py), derived
by hand from NVIDIA/Megatron-LM @d98e8a64:

  - gpt_layer_specs.py l. 257-272: linear_qkv_down_proj is a TELayerNormColumnParallelLinear; under SP it all-gathers
    the normed input over TP before its GEMM (TransformerEngine @4329ff84 layernorm_linear.py l. 284-290: T h x 2 B)
    and reduce-scatters its input's gradient backward (l. 857-865);
  - multi_latent_attention.py l. 1353-1381 / 745-755: the q latent's columns (r_q / tp a rank) all-gathered over TP
    (T r_q x 2 B), the kv latent and rotary key's ((r_kv + d_rope) / tp a rank, T (r_kv + d_rope) x 2 B); under SP
    each latent is scattered back along the sequence, whose backward all-gathers T r_q and T r_kv x 2 B.

comm.py inside one NVLink domain (H100): n - 1 rounds of 3.4 us and (n - 1) / n of the gathered bytes at the ring's
450 GB/s x 0.8222 = 370 GB/s, for an all-gather and a reduce-scatter alike.
"""

from __future__ import annotations

import pytest

from conftest import explain_job, h100_nvlink_ring_s


_ring = h100_nvlink_ring_s


def _dsv3(**kw):
    base = dict(model="deepseek-v3", gpus=8, tp=2, pp=1, ep=4, sharding="zero1", bytes_per_param="megatron",
                global_batch=8, micro_batch=1, seq_len=4096, moe_rank_imbalance=1.0, stack="megatron",
                precision="bf16", mtp_layers=0)
    return explain_job(**{**base, **kw})


def _per_layer_comm(js):
    """tp_comm_s less the once-a-step SP gradient all-reduce (step.py [27]: the fused projection's weight is
    TP-split, so fewer duplicated gradients, a different term) and the backward's wgrad input re-gathers (step.py [35],
    their own key: the fused projection's T h among them, tests/test_tp_wgrad_regather.py)."""
    return (js["time"]["tp_comm_s"] - js["time"].get("tp_sp_norm_grads_s", 0.0)
            - js["time"].get("tp_wgrad_regather_s", 0.0))


def test_fused_gathers_by_hand():
    """DeepSeek-V3 (h 7168, r_q 1536, r_kv 512, d_rope 64, 61 MLA layers) at tp 2 with SP on 8 H100s, one NVLink
    domain, T = 4096 tokens a micro-batch, m = 2 micro-batches, no recompute.
      forward:  AG(T h) 4096 x 7168 x 2 = 58,720,256 B: 3.4 us + 1/2 x 58,720,256 / 370e9 = 82.750 us;
                AG(T r_q) 12,582,912 B: 20.404 us; AG(T (r_kv + d_rope)) 4,718,592 B: 9.776 us  -> 112.932 us
      backward: RS(T h) 82.750 us; AG(T r_q) 20.404 us; AG(T r_kv) 4,194,304 B: 9.068 us        -> 112.224 us
    The collectives both layouts run (step.py [32]: the up projections' latent gathers, the output's pair) are the
    same, but the unfused layer also gathers the rotary key along the sequence (multi_latent_attention.py l. 756-763:
    AG(T d_rope) 524,288 B, 4.108 us forward, its reduce-scatter backward), which the fused one takes whole from the
    kv latent's column gather: tp_comm (less the SP gradients' all-reduce) rises by m x 61 x (225.156 - 8.217) us =
    2 x 61 x 216.939 us = 26.467 ms against the same job without the fusion."""
    T, h = 4096 * 2, 7168  # bytes of one element a token x the micro-batch's tokens
    f = _ring(2, T * h) + _ring(2, T * 1536) + _ring(2, T * (512 + 64))
    b = _ring(2, T * h) + _ring(2, T * 1536) + _ring(2, T * 512)
    rope = _ring(2, T * 64)
    assert f == pytest.approx(112.932e-6, rel=1e-4) and b == pytest.approx(112.224e-6, rel=1e-4)
    assert rope == pytest.approx(4.108e-6, rel=1e-3)
    _, _, _, off = _dsv3()
    _, _, _, on = _dsv3(mla_down_proj_fusion=True)
    assert on["plan"]["sequence_parallel"] and on["plan"]["microbatches_per_step"] == 2
    assert _per_layer_comm(on) - _per_layer_comm(off) == pytest.approx(2 * 61 * (f + b - 2 * rope), rel=1e-9)
    assert 2 * 61 * (f + b - 2 * rope) == pytest.approx(26.467e-3, rel=1e-4)


def test_full_recompute_reruns_the_forward_ones():
    """Full recompute re-runs each layer's forward, the unfused layer's rotary-key gather too:
    m x 61 x ((2 f + b) - 3 x 4.108) = 2 x 61 x (338.088 - 12.325) us = 39.743 ms."""
    T, h = 4096 * 2, 7168
    f = _ring(2, T * h) + _ring(2, T * 1536) + _ring(2, T * (512 + 64))
    b = _ring(2, T * h) + _ring(2, T * 1536) + _ring(2, T * 512)
    rope = _ring(2, T * 64)
    _, _, _, off = _dsv3(recompute="full")
    _, _, _, on = _dsv3(recompute="full", mla_down_proj_fusion=True)
    assert _per_layer_comm(on) - _per_layer_comm(off) == pytest.approx(2 * 61 * (2 * f + b - 3 * rope), rel=1e-9)
    assert 2 * 61 * (2 * f + b - 3 * rope) == pytest.approx(39.743e-3, rel=1e-4)


def test_nothing_at_tp_1_and_no_warning():
    """At tp 1 the fused projection is whole on the rank: no collective, the same tp_comm; and the job is no longer
    warned that these collectives are not priced."""
    from planner.plan import resolve
    from planner.schema import Job

    _, _, _, off = _dsv3(tp=1, ep=8)
    _, _, _, on = _dsv3(tp=1, ep=8, mla_down_proj_fusion=True)
    assert on["time"]["tp_comm_s"] == off["time"]["tp_comm_s"]
    base = dict(model="deepseek-v3", gpus=8, tp=2, pp=1, ep=4, sharding="zero1", bytes_per_param="megatron",
                global_batch=8, micro_batch=1, seq_len=4096, stack="megatron", precision="bf16", mtp_layers=0)
    settings, _, warnings = resolve(Job(**base, mla_down_proj_fusion=True))
    assert settings.model.mla._down_fused  # the fused copy was built (plan.with_fused_mla)
    assert not any("mla_down_proj_fusion" in w for w in warnings)
