"""An MLA layer's TP collectives as Megatron-Core runs them (stack mla_tp_gathers latents; planner/step.py [32],
mla_tp_collectives), derived by hand from NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/
multi_latent_attention.py (MLASelfAttention, unfused):

  - the down projections are TELinear 'duplicated' (l. 524-556, 571-600): no collective, run on the rank's s / t
    tokens under SP (_qkv_down_projection l. 638-664);
  - the rotary key is gathered along the sequence under SP (l. 756-763: T d_rope x 2 B; backward a reduce-scatter);
  - the column-parallel up projections (l. 865, 875; linear_q_proj on the hidden states without a q latent, l. 869)
    all-gather their latent input along the sequence under SP (T r_q, T r_kv x 2 B) and reduce-scatter its gradient;
    without SP they all-reduce the input gradient;
  - the output linear_proj: RS(T h) forward, AG(T h) backward (without SP an all-reduce forward).

The pair the layer was priced with before, AG(T h) + RS(T h) each way, is torchtitan's layout (the normed input
gathered before replicated down projections: stack mla_tp_gathers input), the reference each test differences from.

comm.py inside one NVLink domain (H100), 2 ranks: 1 round of 3.4 us and 1/2 of the gathered bytes at the ring's
450 GB/s x 0.8222 = 370 GB/s, for an all-gather and a reduce-scatter alike.
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import explain_job, h100_nvlink_ring_s
from planner.explain import evaluate, to_json


_ring = h100_nvlink_ring_s


def _job(model, **kw):
    base = dict(model=model, gpus=8, tp=2, pp=1, ep=4, sharding="zero1", bytes_per_param="megatron",
                global_batch=8, micro_batch=1, seq_len=4096, moe_rank_imbalance=1.0, stack="megatron",
                precision="bf16", mtp_layers=0, moe_dispatcher="alltoall")
    return explain_job(**{**base, **kw})


def _tp_comm_both(model, **kw):
    """tp_comm_s of the job as the megatron stack prices it (latents) and with the stack's mla_tp_gathers set to
    input (the pair), and the job's JSON; each less the backward's wgrad input re-gathers (step.py [35], their own
    key: the latents' under latents, none of the MLA layer's under input; tests/test_tp_wgrad_regather.py)."""
    settings, plan, _, js = _job(model, **kw)
    assert settings.stack.mla_tp_gathers == "latents"
    pair = dataclasses.replace(settings, stack=settings.stack.model_copy(update={"mla_tp_gathers": "input"}))
    t_pair = to_json(pair, plan, evaluate(pair, plan))["time"]

    def less(t):
        return t["tp_comm_s"] - t.get("tp_wgrad_regather_s", 0.0)
    return less(js["time"]), less(t_pair), js


def test_dsv3_latents_by_hand():
    """DeepSeek-V3 (h 7,168, r_q 1,536, r_kv 512, d_rope 64, 61 MLA layers) at tp 2 with SP on 8 H100s, T = 4,096
    tokens a micro-batch (8,192 B a column), m = 2 micro-batches, no recompute. Per layer:
      forward:  AG(T r_q) 12,582,912 B: 3.4 us + 1/2 x 12,582,912 / 370e9 = 20.404 us; AG(T r_kv) 4,194,304 B:
                9.068 us; AG(T d_rope) 524,288 B: 4.108 us; RS(T h) 58,720,256 B: 82.750 us        -> 116.331 us
      backward: RS(T r_q) + RS(T r_kv) + RS(T d_rope) + AG(T h), the same sizes                     -> 116.331 us
    against the pair's 2 x (82.750 + 82.750) = 331.000 us: 98.338 us less a layer, m x 61 x 98.338 us = 11.997 ms
    less tp_comm a step (the gathered columns 2,112 a token, not 7,168)."""
    col = 4096 * 2
    f = _ring(2, col * 1536) + _ring(2, col * 512) + _ring(2, col * 64) + _ring(2, col * 7168)
    assert f == pytest.approx(116.331e-6, rel=1e-4)
    pair = 2 * 2 * _ring(2, col * 7168)
    assert pair == pytest.approx(331.000e-6, rel=1e-4)
    latents, old, js = _tp_comm_both("deepseek-v3")
    assert js["plan"]["sequence_parallel"] and js["plan"]["microbatches_per_step"] == 2
    assert old - latents == pytest.approx(2 * 61 * (pair - 2 * f), rel=1e-9)
    assert 2 * 61 * (pair - 2 * f) == pytest.approx(11.997e-3, rel=1e-4)


def test_dsv3_full_recompute_reruns_the_forward_ones():
    """Full recompute re-runs each layer's forward collectives: m x 61 x (3 x 165.500 - (2 x 116.331 + 116.331))
    = 2 x 61 x 147.507 us = 17.996 ms less than the pair's."""
    col = 4096 * 2
    f = _ring(2, col * 1536) + _ring(2, col * 512) + _ring(2, col * 64) + _ring(2, col * 7168)
    one = 2 * _ring(2, col * 7168)
    latents, old, _ = _tp_comm_both("deepseek-v3", recompute="full")
    assert old - latents == pytest.approx(2 * 61 * (3 * one - 3 * f), rel=1e-9)
    assert 2 * 61 * (3 * one - 3 * f) == pytest.approx(17.996e-3, rel=1e-4)


def test_dsv3_mla_up_proj_regathers_the_latents():
    """--recompute-modules mla_up_proj (l. 171-174, 983-988) re-runs the up projections in the backward, their SP
    gathers with them: AG(T r_q) + AG(T r_kv) = 20.404 + 9.068 = 29.472 us a layer, m x 61 x 29.472 us = 3.596 ms
    more than core_attn alone (the same GEMM and memory re-runs in the pair's pricing, which re-runs no gather)."""
    col = 4096 * 2
    up = _ring(2, col * 1536) + _ring(2, col * 512)
    assert 2 * 61 * up == pytest.approx(3.596e-3, rel=1e-3)
    lat_up, old_up, _ = _tp_comm_both("deepseek-v3", recompute="selective", recompute_modules=["mla_up_proj"])
    lat_core, old_core, _ = _tp_comm_both("deepseek-v3", recompute="selective")
    assert old_up == pytest.approx(old_core, rel=1e-12)
    assert lat_up - lat_core == pytest.approx(2 * 61 * up, rel=1e-9)


def test_v2_lite_without_a_q_latent_gathers_more():
    """DeepSeek-V2-Lite (h 2,048, no q latent, r_kv 512, d_rope 64, 27 MLA layers) at tp 2 with SP: linear_q_proj
    gathers the hidden states (T h, as the pair's all-gather), and the kv latent and rotary key are gathered beside
    it: forward AG(T h) 16,777,216 B: 3.4 us + 22.671 us = 26.071 us, AG(T r_kv) 9.068 us, AG(T d_rope) 4.108 us,
    RS(T h) 26.071 us -> 65.318 us, backward the same; against the pair's 4 x 26.071 = 104.284 us: 26.352 us more a
    layer, m x 27 x 26.352 us = 1.423 ms more a step."""
    col = 4096 * 2
    f = 2 * _ring(2, col * 2048) + _ring(2, col * 512) + _ring(2, col * 64)
    assert f == pytest.approx(65.318e-6, rel=1e-4)
    latents, old, js = _tp_comm_both("deepseek-v2-lite")
    assert js["plan"]["sequence_parallel"]
    assert latents - old == pytest.approx(2 * 27 * (2 * f - 4 * _ring(2, col * 2048)), rel=1e-9)
    assert latents - old == pytest.approx(1.423e-3, rel=1e-3)


def test_fused_layout_has_no_rotary_gather():
    """With --mla-down-proj-fusion the rotary key comes whole out of the latents' column gather (l. 745-750): the
    layer's shared collectives lose AG(T d_rope) and RS(T d_rope), 2 x 4.108 us; its own ([30], mla_fused_gathers)
    come on top, the same under both settings of mla_tp_gathers. So (pair - latents) fused = (pair - latents)
    unfused + m x 61 x 8.217 us = 11.997 + 1.002 ms."""
    col = 4096 * 2
    rope = 2 * _ring(2, col * 64)
    assert rope == pytest.approx(8.217e-6, rel=1e-3)
    lat, old, _ = _tp_comm_both("deepseek-v3")
    lat_f, old_f, _ = _tp_comm_both("deepseek-v3", mla_down_proj_fusion=True)
    assert (old_f - lat_f) - (old - lat) == pytest.approx(2 * 61 * rope, rel=1e-6)


def test_torchtitan_keeps_the_pair():
    """torchtitan gathers the normed input before its replicated down projections (stack mla_tp_gathers input:
    @e347b1e5e deepseek_v3/infra/parallelize.py l. 256-296): its MLA layer is the pair, nothing of [32]."""
    from planner.catalog import load_stack

    assert load_stack("torchtitan").mla_tp_gathers == "input"
    assert load_stack("torchtitan-0.3").mla_tp_gathers == "input"
    assert load_stack("megatron-bridge").mla_tp_gathers == "latents"


def test_a_stack_with_mla_and_tp_must_say():
    """A stack_db-shaped entry that builds MLA with TP and does not say what its MLA layer gathers is refused."""
    from planner.catalog import load_stack
    from planner.schema import Stack

    data = load_stack("megatron").model_dump(exclude_unset=True)
    data.pop("mla_tp_gathers")
    with pytest.raises(ValueError, match="mla_tp_gathers is not set"):
        Stack.model_validate(data)
