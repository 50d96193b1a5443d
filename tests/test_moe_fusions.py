"""Megatron-Core's unfused MoE permutation and router paths (--moe-permute-fusion /
--moe-router-fusion off, Megatron-LM's defaults: transformer_config.py @d98e8a64 l. 941-947):
the bytes they move beyond the fused Transformer Engine kernels dispatch_bytes prices
(planner/layers/moe.py unfused_token_terms, unfused_dispatch_bytes), counted by hand from
moe_utils.py @d98e8a64 permute / unpermute / topk_routing_with_score_function."""
from __future__ import annotations

import pytest

from planner.layers import context
from planner.layers.moe import fused_token_terms, unfused_dispatch_bytes, unfused_token_terms
from test_moe import _moe_block, _qwen3

# Qwen3-30B-A3B: h 2048, E 128, k 8; A h = 4,096 B a bf16 token row. int64 L = 8, bool B = 1,
# int32 I = 4, fp32 P = 4.
# permute, forward, per local token (unfused):
#   map transpose 2 E = 256; argsort: arange 8 E = 1,024, histogram E = 128, one pass 18 E = 2,304;
#   % num_tokens 2 L k = 128; probs transpose 2 P E = 1,024; probs gather L k + 2 P k = 64 + 64;
#   index_select L k + 2 k A h = 64 + 65,536                                     -> 70,592
#   fused (test_moe.py): row-id map 3,204 + permutation 1 36,996                  -> 40,200
# unpermute, forward: zeros A h 4,096 + L k 64 + k A h 32,768 + 2 A h 8,192       -> 45,120
#   fused 36,932
# unpermute's gradient: L k 64 + 2 k A h 65,536 = 65,600; fused 36,932
# permute's gradient: zeros 4,096 + L k 64 + k A h 32,768 + add 8,192; probabilities P E 512
#   + L k 64 + P k 32 + 2 P k 64                                                  -> 45,792
#   fused 37,476
# router, forward: score 2 P E 1,024; topk P E + k (P + L) 512 + 96; routing_probs zeros 512,
#   copy 1,024, scatter L k + 2 P k 128; routing_map zeros 512, .int() 512 + 512, copy 1,024,
#   scatter L k + I k 96, .bool() 512 + 128                                        -> 6,592
#   fused 3 P E + E = 1,664
# router, backward: gather L k + 2 P k 128; topk's gradient P E + L k + 2 P k 640; score 3 P E
#   1,536                                                                         -> 2,304
#   fused 1,664
UNFUSED = {"permute_fwd": 70_592, "unpermute_fwd": 45_120, "unpermute_bwd": 65_600, "permute_bwd": 45_792,
           "router_fwd": 6_592, "router_bwd": 2_304}
FUSED = {"permute_fwd": 40_200, "unpermute_fwd": 36_932, "unpermute_bwd": 36_932, "permute_bwd": 37_476,
         "router_fwd": 1_664, "router_bwd": 1_664}


def test_unfused_token_terms_qwen3_by_hand():
    assert unfused_token_terms(2048.0, 128.0, 8.0) == UNFUSED
    assert fused_token_terms(2048.0, 128.0, 8.0) == FUSED


def test_unfused_dispatch_bytes_qwen3_micro_batch():
    """T = 4096 local tokens (tp 1): the unfused permutations add (70,592 - 40,200) + (45,120 -
    36,932) = 38,580 B a token forward and (65,600 - 36,932) + (45,792 - 37,476) = 36,984 B
    backward; the unfused router 4,928 forward and 640 backward. Under SP with tp 2 each rank
    permutes its 2048 local tokens: half of it. The expert rows (per-row sorts) do not change."""
    settings, plan, _, _ = _qwen3()
    extra = unfused_dispatch_bytes(_moe_block(settings.model), context(plan, 1.0))
    assert tuple(float(x) for x in extra["permute"]) == (4096 * 38_580, 4096 * 36_984)
    assert tuple(float(x) for x in extra["router"]) == (4096 * 4_928, 4096 * 640)
    s_sp, p_sp, _, _ = _qwen3(gpus=16, tp=2, sequence_parallel=True)
    sp = unfused_dispatch_bytes(_moe_block(s_sp.model), context(p_sp, 1.0))
    assert float(sp["permute"][0]) == 2048 * 38_580


def test_unfused_share_of_the_fused_dispatch_bytes():
    """Against the whole fused dispatch (dispatch_bytes, ep 8: 860,536,832 B forward and
    849,248,256 B backward a micro-batch, test_moe.py), both paths unfused move 20.7% more
    forward and 18.1% more backward: not within a few percent of the fused pricing."""
    settings, plan, _, _ = _qwen3()
    ctx = context(plan, 1.0)
    fwd, bwd = _moe_block(settings.model).dispatch_bytes(ctx)
    extra = unfused_dispatch_bytes(_moe_block(settings.model), ctx)
    up_f = (extra["permute"][0] + extra["router"][0]) / fwd
    up_b = (extra["permute"][1] + extra["router"][1]) / bwd
    assert float(up_f) == pytest.approx(4096 * 43_508 / 860_536_832, rel=1e-12) and 0.20 < float(up_f) < 0.21
    assert float(up_b) == pytest.approx(4096 * 37_624 / 849_248_256, rel=1e-12) and 0.18 < float(up_b) < 0.19
