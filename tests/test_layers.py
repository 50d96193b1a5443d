"""Layer kinds (planner/layers/): the state-space and linear-attention mixers worked by hand on
small shapes, the linear-in-sequence property of their scans, the TP and CP splits, and an
explain of a small hybrid model.

Conventions (planner/layers/mamba.py, linear_attention.py): m = mean_causal_keys(s, chunk=Q),
the mean causal reach inside a chunk (Q/2 when Q divides s), f = 2m, the chunk a token's
tile spans (Q); FLOPs count 2 per multiply-add; activations 2 B per bf16 element, 4 B fp32.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.layers import LayerKind, context
from planner.layers.attention import Attention
from planner.layers.linear_attention import GatedDeltaNetBlock
from planner.layers.mamba import Mamba1Block, Mamba2Block
from planner.layers.mlp import NoBlock
from planner.memory import kind_activation_bytes
from planner.plan import PlanArrays
from planner.schema import ACTIVATION_TENSORS
from planner.stacks import KERNEL_FIELDS


def ctx_of(tp=1, cp=1, mbs=1, seq=8, sp=0):
    """A one-plan context: mbs sequences of seq tokens, T = mbs seq / cp per GPU."""
    plan = PlanArrays(tp=tp, cp=cp, pp=1, vpp=1, dp=1, mbs=mbs, gbs=mbs, seq=seq, sharding=0, shard=1,
                      recompute=0, sp=sp, schedule=0, precision=0)
    return context(plan)


def act_bytes(block, ctx, keeps=None):
    kind = LayerKind(block, NoBlock())
    return float(kind_activation_bytes(kind, ctx) if keeps is None else kind_activation_bytes(kind, ctx, keeps=keeps))


# distinct bytes per element for each kernel, so that a mixed-up key changes the sum
KB = {f: float(i + 2) for i, f in enumerate(KERNEL_FIELDS)}  # norm 2, norm_bwd 3, residual 4, ...


def mamba2(groups=1, chunk=4):
    """h = 8, two heads of dim 4 (d_i = 8), N = 4, Q = 4, w = 4, RMSNorm pre-norm (8)."""
    return Mamba2Block(h=8, heads=2, head_dim=4, state=4, groups=groups, conv_kernel=4, chunk=chunk, norm=8)


def gdn():
    """h = 8, one key head and two value heads, d_k = d_v = 4, C = 4, w = 4."""
    return GatedDeltaNetBlock(h=8, key_heads=1, value_heads=2, key_dim=4, value_dim=4, conv_kernel=4, chunk=4, norm=8)


def mamba1():
    """h = 8, d_i = 16, N = 4, w = 4, dt rank 2."""
    return Mamba1Block(h=8, d_inner=16, state=4, conv_kernel=4, dt_rank=2, norm=8)


# ------------------------------------------------------------------ Mamba-2 by hand
def test_mamba2_params_by_hand():
    # in_proj 8 (2*8 + 2*1*4 + 2) = 208; conv (8 + 8) channels x (4 taps + bias) = 80;
    # dt_bias, A_log, D 3 x 2 = 6; gated norm 8; out_proj 8 x 8 = 64 -> 366 split, pre-norm 8
    p = mamba2().params()
    assert (p.split, p.replicated) == (366, 8)


def test_mamba2_gemms_and_casts_by_hand():
    # T = 8: in_proj [8, 2*8 + 2 + 2*4*1 = 26, 8], out_proj [8, 8, 8]
    g = mamba2().gemms(ctx_of())
    assert [(s.name, float(s.M), float(s.N), float(s.K), c) for s, c in g] == [
        ("mamba_in", 8.0, 26.0, 8.0, 1.0), ("mamba_out", 8.0, 8.0, 8.0, 1.0)]
    # fp8 casts: inputs 8*8 + 8*8, weights 26*8 + 8*8 = 128 + 272 = 400
    assert float(mamba2().cast_elements(ctx_of())) == 400.0


def test_mamba2_scan_flops_by_hand():
    """s = 8, Q = 4: two chunks, m = (2 * 4^2) / (2 * 8) = 2, f = 4, n_c / s = 2/8.
    per token: CB G 2 N f = 2*4*4 = 32; per head 2 P m + 4 N P + 2 N P n_c/s
    = 16 + 64 + 8 = 88, two heads 176; F = 208; T = 8 tokens: 1664 forward."""
    b = mamba2()
    assert float(b.core_kernel_flops(ctx_of())) == 1664.0
    # causal=True counts what the kernels run: 3 x 208; causal=False takes CB and the diagonal
    # block at the chunk span 4: 2*4*4 + 2 (2*4*4 + 64 + 8) = 32 + 208 = 240, x3 = 720
    assert float(b.core_model_flops(8, True)) == 624.0
    assert float(b.core_model_flops(8, False)) == 720.0
    # a sequence shorter than a chunk: s = 2 < Q, one chunk of 2: m = 1, f = 2, n_c/s = 1/2
    # 2*4*2 + 2 (2*4*1 + 64 + 32/2) = 16 + 176 = 192 per token
    assert float(b.core_model_flops(2, True)) == 3 * 192.0


def test_mamba2_activations_by_hand():
    """Per token: input 16 + norm1_out 16 + zxbcdt without B, C 2 (2*8 + 2) = 36 + B, C
    2*2*4 = 16 + scan output 16 + norm input 16 + fp32 rstd 4 + out_proj input 16 = 136
    (= 4h + 10 d_i + 2H + 4GN + 4G); x 8 tokens."""
    b = mamba2()
    assert act_bytes(b, ctx_of()) == 136.0 * 8
    # a selective policy names attention tensors only: keeping none of the named ones drops
    # just the input and norm output (2 x 16 per token)
    assert act_bytes(b, ctx_of(), keeps=()) == (136.0 - 32.0) * 8
    assert not set(b.tensors(ctx_of(), "flash")) - {"input", "norm1_out"} & set(ACTIVATION_TENSORS)


def test_mamba2_elementwise_bytes_by_hand():
    """Forward, per token: pre-norm 2*8 + residual 4*8 = 48; conv + SiLU over 8 + 2*4 = 16
    channels at the plain-activation figure; the z gate (gated figure) and the RMSNorm (norm)
    over 8: (gated + 2) * 8; x 8 tokens."""
    ctx = ctx_of()
    plain, gated = KB["mlp_activation_plain"], KB["mlp_activation_gated"]
    want = 8 * (2 * 8 + 4 * 8 + plain * 16 + (gated + 2) * 8)
    assert float(mamba2().elementwise_bytes(ctx, KB, "")) == want
    plain_b, gated_b = KB["mlp_activation_plain_bwd"], KB["mlp_activation_gated_bwd"]
    want_b = 8 * (3 * 8 + KB["residual_bwd"] * 8 + plain_b * 16 + (gated_b + 3) * 8)
    assert float(mamba2().elementwise_bytes(ctx, KB, "_bwd")) == want_b


def test_mamba2_tp_halves_the_split_tensors_and_gemms():
    """Two groups (Megatron needs G % t == 0): tp = 2 with SP halves every activation and the
    GEMMs' N (in_proj) and K (out_proj); with one group, B and C stay whole on each rank."""
    b = mamba2(groups=2)
    one, two = ctx_of(), ctx_of(tp=2, sp=1)
    assert act_bytes(b, two) == act_bytes(b, one) / 2
    (i1, _), (o1, _) = b.gemms(one)
    (i2, _), (o2, _) = b.gemms(two)
    assert (float(i2.N), float(o2.K)) == (float(i1.N) / 2, float(o1.K) / 2) == (17.0, 4.0)
    assert float(b.core_kernel_flops(two)) == float(b.core_kernel_flops(one)) / 2
    # G = 1: B and C (2*2*4 = 16 B per token) and the rstd (4 B) are kept whole on both ranks
    g1 = mamba2(groups=1)
    assert act_bytes(g1, two) == (136.0 - 20.0) / 2 * 8 + 20.0 * 8


def test_mamba2_context_parallel_all_to_alls():
    """cp = 2, s = 8: T = 4 local tokens. z, x and the output 4 * 8 * 2 B = 64 B, 3 forward +
    3 backward; B and C repeated to the cp = 2 ranks (max(G/t, c) = 2 groups): 4 * 4 * 2 * 2 B
    = 64 B, 2 + 2; dt 4 * 2 * 2 B = 16 B, 1 + 1."""
    cp = mamba2().cp_collectives(ctx_of(cp=2))
    assert [(op, float(b), c) for op, b, c in cp] == [
        ("all_to_all", 64.0, 6.0), ("all_to_all", 64.0, 4.0), ("all_to_all", 16.0, 2.0)]
    # each GPU runs the whole sequence for H/c heads: the heads' FLOPs halve, CB is done for
    # the one group each rank holds (2 ranks x 1 group): 4 tokens x (2*2*4*4 + 176) = 832
    assert float(mamba2().core_kernel_flops(ctx_of(cp=2))) == 4 * (2 * 32 + 176)


# ------------------------------------------------------------------ linear in sequence length
@pytest.mark.parametrize("block", [mamba2(), gdn(), mamba1()], ids=["mamba2", "gdn", "mamba1"])
def test_scans_are_linear_in_sequence_length(block):
    """For s a multiple of the chunk, a micro-batch of one sequence of s tokens costs F x s
    with F independent of s: doubling s doubles the core FLOPs per micro-batch, and at a fixed
    number of tokens per micro-batch (mbs x s) they are the same. Attention's grow with s."""
    flops = [float(block.core_kernel_flops(ctx_of(seq=s))) for s in (4, 8, 16, 4096)]
    assert flops[1] == 2 * flops[0] and flops[2] == 2 * flops[1] and flops[3] == 1024 * flops[0]
    assert float(block.core_kernel_flops(ctx_of(mbs=2, seq=8))) == flops[2]
    per_token = [float(block.core_model_flops(s, False)) for s in (4, 8, 4096)]
    assert per_token[0] == per_token[1] == per_token[2]
    attn = Attention(h=8, a=2, k=2, d=4, norm=8)
    assert float(attn.core_kernel_flops(ctx_of(seq=16))) == 4 * float(attn.core_kernel_flops(ctx_of(seq=8)))


# ------------------------------------------------------------------ Gated DeltaNet by hand
def test_gdn_params_and_gemms_by_hand():
    # in_proj 8 (2*4 + 2*8) + 8 * 2*2 = 224; conv (8 + 8) x 4 = 64; dt_bias, A_log 2 x 2 = 4;
    # out_proj 8 x 8 = 64 -> 356 TP-split; the gated norm's d_v = 4 whole on every TP rank (Megatron-Core
    # gated_delta_net/common.py l. 263-268, hidden_size value_head_dim) beside the pre-norm 8: 12 replicated
    b = gdn()
    p = b.params()
    assert (p.split, p.replicated) == (356, 12)
    assert p.total == 368
    g = b.gemms(ctx_of())
    # in_proj [8, 2*4 + 2*8 + 2*2 = 28, 8], out_proj [8, 8, 8]
    assert [(s.name, float(s.N), float(s.K)) for s, _ in g] == [("gdn_in", 28.0, 8.0), ("gdn_out", 8.0, 8.0)]


def test_gdn_scan_flops_by_hand():
    """s = 8, C = 4: m = 2, f = 4. Per value head: state and output 6 K V = 96, kkt 2 K m = 16,
    w, u and the output's C x C products 4 (K + V) f = 128, the triangular solve f^2/3 = 16/3;
    two heads, 8 tokens: 16 (240 + 16/3)."""
    b = gdn()
    assert float(b.core_kernel_flops(ctx_of())) == pytest.approx(16 * (240 + 16 / 3), rel=1e-15)
    # the chunk-span convention: kkt at 2 K C = 32: 2 (256 + 16/3) x 3
    assert float(b.core_model_flops(8, False)) == pytest.approx(6 * (256 + 16 / 3), rel=1e-15)
    assert float(b.core_model_flops(8, True)) == pytest.approx(6 * (240 + 16 / 3), rel=1e-15)


def test_gdn_activations_by_hand():
    """Per token: input, norm1_out 16 + 16; conv input q, k 2*2*4 = 16 and v 2*8 = 16; L2-normed
    q, k 16 + fp32 rstd 4*2 = 24; alpha 2*2 = 4; the rule's q, k repeated to 2 heads 2*2*2*4 =
    32, v 16, g (fp32) and beta (4 + 2) * 2 = 12, A 2*2*4 = 16; gated norm x, z 16 + 16, rstd
    4*2 = 8; out_proj input 16: 224; x 8 tokens."""
    b = gdn()
    assert act_bytes(b, ctx_of()) == 224.0 * 8
    # tp = 2 with SP: the one key head's q and k (16 + 24 = 40 B) stay whole on both ranks
    assert act_bytes(b, ctx_of(tp=2, sp=1)) == ((224.0 - 40.0) / 2 + 40.0) * 8


def test_gdn_context_parallel_all_to_alls():
    """cp = 2: T = 4. The in_proj output 4 * 28 * 2 B = 224 B and the norm output 4 * 8 * 2 B =
    64 B, each once forward and once backward."""
    cp = gdn().cp_collectives(ctx_of(cp=2))
    assert [(op, float(b), c) for op, b, c in cp] == [("all_to_all", 224.0, 2.0), ("all_to_all", 64.0, 2.0)]


# ------------------------------------------------------------------ Mamba by hand
def test_mamba1_by_hand():
    """params: in_proj 8*32 = 256, conv 16*4 + 16 = 80, x_proj 16 (2 + 8) = 160, dt_proj 2*16 +
    16 = 48, A_log 16*4 = 64, D 16, out_proj 16*8 = 128: 752. Scan 9 N d_i = 576 per token.
    Activations per token: input, norm output 32; xz 2*32 = 64; x_dbl 2*10 = 20; B, C 2*8 = 16;
    fp32 chunk states 4 * 2N d_i * ceil(8/2048) / 8 = 512/8 = 64; scan output 32: 228."""
    b = mamba1()
    assert b.params().split == 752
    assert float(b.core_kernel_flops(ctx_of())) == 8 * 576.0
    assert float(b.core_model_flops(np.array([8.0, 4096.0]), False)[1]) == 3 * 576.0
    assert act_bytes(b, ctx_of()) == 228.0 * 8
    # x_proj's all-reduce of r + 2N = 10 outputs, in units of T h = 8
    assert b.tp_pairs == (1.0, 10 / 8)
    # the assumed CP state passing: one sequence's 16 x 4 fp32 state, 1 hop each way; the
    # conv's last 3 inputs, 16 channels x 2 B, 1 hop forward
    assert [(op, float(s), float(c)) for op, s, c in b.cp_collectives(ctx_of(cp=2))] == [
        ("send_recv", 256.0, 2.0), ("send_recv", 96.0, 1.0)]


def test_mamba1_scan_roofline_by_hand():
    """The selective scan's roofline terms (layers/mamba.py SCAN_ROOFLINE), s = 8, T = 8, d_i 16,
    N 4. FLOPs: forward 9 N d_i = 576, backward 29 N d_i = 1,856 a token: 4,608 and 14,848.
    Bytes a token: per channel 10 (forward) / 18 (backward) + the fp32 chunk states 2 N x 4 B x
    ceil(8/2048) / 8 = 4; B and C 2 N x 2 B = 16; backward dB, dC 2 N x 4 B = 32: forward
    16 x 14 + 16 = 240, backward 16 x 22 + 16 + 32 = 400; x 8 tokens. At 1,000 / 2,000 FLOP/s
    and 100 B/s both passes are memory-bound: 19.2 s and 32 s. tp 2 halves the channels, not
    B, C. The z gate is the scan kernel's: elementwise_bytes keeps the norm, residual and conv
    (plain activation) only."""
    b = mamba1()
    assert [float(x) for x in b.scan_flops(ctx_of())] == [4608.0, 14848.0]
    assert [float(x) for x in b.scan_bytes(ctx_of())] == [1920.0, 3200.0]
    assert [float(x) for x in b.scan_bytes(ctx_of(tp=2))] == [8 * (8 * 14 + 16.0), 8 * (8 * 22 + 48.0)]
    assert [float(x) for x in b.scan_times(ctx_of(), (1e3, 2e3), 100.0)] == [19.2, 32.0]
    assert [float(x) for x in b.scan_times(ctx_of(), (1e2, 1e2), 1e4)] == [46.08, 148.48]  # FLOP-bound
    assert float(b.elementwise_bytes(ctx_of(), KB, "")) == 8 * (KB["norm"] * 8 + KB["residual"] * 8
                                                                + KB["mlp_activation_plain"] * 16)


def test_jamba_scan_on_h100_by_hand(explain, unlisted_stack):
    """Jamba v0.1's Mamba layer (d_i 8,192, N 16) on one H100 SXM, one 4,096-token sequence, tp 1
    (fp32 peak 67 TFLOP/s, HBM 3.35 TB/s x HBM_EFFICIENCY 0.9 = 3.015 TB/s):
      forward   FLOPs 4096 x 9 x 16 x 8192 = 4.832e9 -> 72.12 us at 67 TFLOP/s; bytes a token
                8192 x (10 + 2 x 16 x 4 x 2/4096) + 64 = 82,496 -> 337.9 MB -> 112.07 us:
                memory-bound, 112.07 us.
      backward  FLOPs 29/9 of that, 1.557e10 -> 232.38 us; bytes 8192 x 18.0625 + 64 + 128 =
                148,160 a token -> 606.9 MB -> 201.28 us: FLOP-bound, 232.38 us.
    At the attention rates it was (cuDNN on H100, 605 / 500 TFLOP/s x 0.85) 9.4 us forward and
    28.4 us backward, and the z gate was priced apart as a memory-bound pass. Both Mamba kinds
    (dense MLP and MoE) run the same scan; explain reports the step's scans (mamba_scan_s). No shipped stack
    builds Mamba-1 (start-up rule STACK_LAYER_KIND): priced on a stack file that lists no layer kinds."""
    import numpy as np
    from planner import step as S

    settings, plan, _, res = explain(model="jamba-v0.1", gpus=8, tp=1, pp=1, global_batch=8, micro_batch=1,
                                     seq_len=4096, recompute="none", stack=unlisted_stack)
    sc = S._context(settings, plan)
    lt = S.layer_times(sc)
    kinds = [i for i, k in enumerate(sc.ll.kinds) if isinstance(k.mixer, Mamba1Block)]
    assert len(kinds) == 2
    hbm = 3.35e12 * 0.9
    fwd = max(4096 * 9 * 16 * 8192 / 67e12, 4096 * 82496 / hbm)
    bwd = max(4096 * 29 * 16 * 8192 / 67e12, 4096 * 148160 / hbm)
    for i in kinds:
        assert float(np.ravel(lt.core_fwd[i])[0]) == pytest.approx(fwd, rel=1e-12)
        assert float(np.ravel(lt.core_bwd[i])[0]) == pytest.approx(bwd, rel=1e-12)
    assert fwd == pytest.approx(112.07e-6, abs=5e-9) and bwd == pytest.approx(232.38e-6, abs=5e-9)
    # explain's mamba_scan_s: one micro-batch (8 sequences over DP 8), the 28 Mamba layers of 32
    assert res["time"]["mamba_scan_s"] == pytest.approx(28 * (fwd + bwd), rel=1e-12)


def test_scan_against_flash_attention_order_of_magnitude():
    """[2] sec. 4.5 / Fig. 8 (left): on an A100 80GB PCIe the fused selective scan (N = 16,
    forward and backward) is faster than FlashAttention-2 (causal) "beyond sequence length 2K".
    Our reading: both at the same width D (the scan's D channels against D = heads x head dim),
    so per token and unit of width FlashAttention-2 runs 2 s FLOPs forward and 5 s backward
    (mean causal reach s/2, 2.5x backward) and the scan is s-free; the crossover length is the
    scan's time over FlashAttention's per unit of s. On the a100-sxm-80gb entry (fp32 19.5,
    HBM 2.039 TB/s, FlashAttention-2 190 / 170 x 0.85): scan max(144/19.5e12, 10/1.835e12) +
    max(464/19.5e12, 18/1.835e12) = 31.2 ps -> crossover 664 tokens; at the attention rates
    (the former SCAN_AT_ATTENTION_RATES: 144 forward, 2.5 x 144 backward) 72 tokens. The
    roofline is a bound (the exp2f on the SFUs, the block scan's shuffles and dB/dC's atomics
    are not in it), so it must cross at or below 2K: it sits a factor of ~3 under, the former
    pricing ~28 under. A check of the order of magnitude, not a fit: nothing is tuned to it."""
    from planner.catalog import load_hardware
    from planner.compute import HBM_EFFICIENCY, attention_rates

    hw = load_hardware("a100-sxm-80gb")
    rf, rb = attention_rates(hw, "flash2")
    b = Mamba1Block(h=1024, d_inner=1024, state=16, conv_kernel=4, dt_rank=64, norm=1024)
    c = ctx_of(seq=2048)
    fp32, hbm = hw.fp32_TFLOPS * 1e12, hw.hbm_bandwidth * HBM_EFFICIENCY
    scan = sum(float(t) for t in b.scan_times(c, (fp32, fp32), hbm)) / (2048 * 1024)
    # the former pricing: 9 N at the forward rate, 2.5 x 9 N = 22.5 N at the backward rate, no bytes
    old = sum(float(t) for t in b.scan_times(c, (rf, rb * 29 / 22.5), hbm * 1e6)) / (2048 * 1024)
    per_s = 2.0 / rf + 5.0 / rb
    assert 2048 / 4 < scan / per_s <= 2048
    assert scan / per_s == pytest.approx(664, abs=20)  # B and C a token (64 B / 1024 channels) included
    assert old / per_s == pytest.approx(72, abs=1) and old / per_s < 2048 / 16


# ------------------------------------------------------------------ a hybrid model, end to end
HYBRID = """
name: tiny-hybrid
num_layers: 4
hidden_size: 1024
ffn_hidden_size: 4096
num_attention_heads: 8
num_kv_heads: 2
vocab_size: 32000
gated_mlp: true
norm: rmsnorm
max_seq_len: 4096
layer_kinds:
  m:
    mixer: {kind: mamba2, num_heads: 32, head_dim: 64, state_size: 128, n_groups: 8, chunk_size: 256}
    mlp: {kind: none}
  a:
    mixer: {kind: global}
    mlp: {kind: dense}
layer_pattern: [m, a]
sources: ["tests/test_layers.py: a made-up 4-layer hybrid (two Mamba-2 layers, two attention + MLP layers)"]
"""


def _finite_tree(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            _finite_tree(v, f"{path}.{k}")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        assert math.isfinite(x), path


def test_explain_hybrid_model(explain, tmp_path):
    f = tmp_path / "tiny-hybrid.yaml"
    f.write_text(HYBRID)
    settings, plan, est, res = explain(model=str(f), gpus=8, tp=2, cp=2, global_batch=16, seq_len=4096)
    _finite_tree(res["memory"])
    _finite_tree(res["time"])
    kinds = res["params"]["layer_kinds"]
    assert [(k["kind"], k["layers"]) for k in kinds] == [("mamba2(32x64, N=128)", 2), ("global + gated mlp(4096)", 2)]
    # a Mamba-2 layer: in_proj 1024 (2*2048 + 2*8*128 + 32) = 6,324,224, conv (2048 + 2048) x 5
    # = 20,480, 3 x 32, norm 2048, out_proj 2048 x 1024 = 2,097,152, pre-norm 1024
    assert kinds[0]["per_layer"] == 6_324_224 + 20_480 + 96 + 2048 + 2_097_152 + 1024
    # the cores' model FLOPs per token: two Mamba-2 layers (3 F_SSD at the span 256: CB 8*2*128*256,
    # per head 2*64*256 + 4*128*64 + 2*128*64/256) and two global layers (12 a d s)
    ssd = 8 * 2 * 128 * 256 + 32 * (2 * 64 * 256 + 4 * 128 * 64 + 2 * 128 * 64 / 256)
    assert res["flops"]["attention_flops_per_token"] == pytest.approx(2 * 3 * ssd + 2 * 12 * 8 * 128 * 4096, rel=1e-12)
    t = res["time"]
    assert t["cp_comm_s"] > 0 and t["tp_comm_s"] > 0 and t["step_s"] > t["compute_s"] > 0
    assert 0 < res["memory"]["activations_bytes"] < res["memory"]["total_bytes"]


def test_tp_must_split_the_mixer_heads_and_groups(cli, tmp_path):
    """Megatron-Core's MambaMixer asserts nheads % tp == 0 and ngroups % tp == 0: the tiny
    hybrid's 8 groups refuse tp 16 (its 8 attention heads too), and with 32 attention heads
    tp 16 is refused for the 8 Mamba-2 groups, naming them (exit 2)."""
    from conftest import assert_one_error

    f = tmp_path / "tiny-hybrid.yaml"
    f.write_text(HYBRID.replace("num_attention_heads: 8", "num_attention_heads: 32"))
    r = cli("explain", "--model", str(f), "--gpus", "16", "--tp", "16", "--global-batch", "16", "--seq-len", "4096")
    assert_one_error(r, "tp=16 does not divide the 8 Mamba-2 groups")
    ok = cli("explain", "--model", str(f), "--gpus", "16", "--tp", "8", "--global-batch", "16", "--seq-len", "4096")
    assert ok.exit_code == 0, ok.stderr


def _numbers(x):
    """A block method's result as a flat list of arrays (GEMM shapes, collectives, tables)."""
    if isinstance(x, dict):
        return [np.asarray(b, dtype=float) for b, _ in x.values()]
    if isinstance(x, list):
        out = []
        for row in x:
            out += [np.asarray(v, dtype=float) for v in (row[0][1:] if hasattr(row[0], "M") else row[1:])]
        return out
    return [np.asarray(x, dtype=float)]


@pytest.mark.parametrize("block", [mamba2(groups=2), gdn(), mamba1()], ids=["mamba2", "gdn", "mamba1"])
def test_blocks_take_plan_arrays(block):
    """A search evaluates many plans at once: each method on 1-d plan fields equals the method
    on each plan alone."""
    tp, cp, mbs, seq, sp = [1, 2, 2, 1], [1, 2, 1, 4], [1, 1, 3, 2], [8, 16, 4096, 64], [0, 1, 1, 0]
    many = ctx_of(tp=tp, cp=cp, mbs=mbs, seq=seq, sp=sp)
    calls = [lambda c: block.gemms(c), lambda c: block.core_kernel_flops(c), lambda c: block.cast_elements(c),
             lambda c: block.elementwise_bytes(c, KB, ""), lambda c: block.tensors(c, "flash"),
             lambda c: block.cp_collectives(c), lambda c: act_bytes_array(block, c)]
    for call in calls:
        got = _numbers(call(many))
        for i in range(4):
            one = _numbers(call(ctx_of(tp=tp[i], cp=cp[i], mbs=mbs[i], seq=seq[i], sp=sp[i])))
            for g, o in zip(got, one):
                assert np.broadcast_to(g, (4,))[i] == pytest.approx(float(o), rel=1e-14)
    assert np.shape(block.core_model_flops(np.array(seq, dtype=float), False)) == (4,)


def act_bytes_array(block, ctx):
    return kind_activation_bytes(LayerKind(block, NoBlock()), ctx)


ALL_KINDS = HYBRID.replace("layer_pattern: [m, a]", """  g:
    mixer: {kind: gated_deltanet, num_key_heads: 4, num_value_heads: 8, key_head_dim: 128, value_head_dim: 128}
    mlp: {kind: dense}
  j:
    mixer: {kind: mamba1, d_inner: 2048, state_size: 16, dt_rank: 64, inner_norms: true}
layer_pattern: [m, a, g, j]""")


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_explain_every_mixer_kind(explain, tmp_path, recompute, unlisted_stack):
    """Every mixer kind in one model, Mamba-1 among them: on a stack file that lists no layer kinds (no shipped
    stack builds Mamba-1: start-up rule STACK_LAYER_KIND)."""
    f = tmp_path / "all-kinds.yaml"
    f.write_text(ALL_KINDS)
    _, _, _, res = explain(model=str(f), gpus=16, tp=2, cp=2, pp=2, global_batch=16, seq_len=4096,
                           recompute=recompute, stack=unlisted_stack)
    _finite_tree(res["memory"])
    _finite_tree(res["time"])
    assert [k["kind"].split("(")[0] for k in res["params"]["layer_kinds"]] == ["mamba2", "global + gated mlp",
                                                                             "gated_deltanet", "mamba"]
    assert res["time"]["step_s"] > 0 and res["memory"]["fits"]


# ------------------------------------------------------------------ context parallelism
def test_attention_cp_ring_by_hand():
    """GQA h 64, 8 query heads, 2 KV heads of dim 8, tp 2, cp 4, one sequence of 64 tokens:
    T = 16 tokens a GPU. Local K and V: 16 x 2 x (2/2) x 8 = 256 elements, 512 B in bf16; the
    output (and the query) 16 x 8 x 8 / 2 = 512 elements; 3 ring steps after the first. A
    window of 20 reaches ceil(19 / 16) = 2 ranks back: 2 sends, and its unsplit kernel spans 20
    keys. The same figures on arrays as plan by plan."""
    att = Attention(h=64, a=8, k=2, d=8, norm=64)
    r = att.cp_ring(ctx_of(tp=2, cp=4, seq=64))
    assert {k: float(v) for k, v in r.items()} == {"kv_bytes": 512.0, "kv_el": 256.0, "o_el": 512.0, "q_el": 512.0,
                                                   "sends": 3.0, "keys": 64.0, "seq": 64.0}
    w = Attention(h=64, a=8, k=2, d=8, norm=64, window=20).cp_ring(ctx_of(tp=2, cp=4, seq=64))
    assert float(w["sends"]) == 2.0 and float(w["keys"]) == 20.0
    tp, cp, mbs, seq = [1, 2, 2, 1], [1, 2, 1, 4], [1, 1, 3, 2], [8, 16, 4096, 64]
    many = att.cp_ring(ctx_of(tp=tp, cp=cp, mbs=mbs, seq=seq))
    for i in range(4):
        one = att.cp_ring(ctx_of(tp=tp[i], cp=cp[i], mbs=mbs[i], seq=seq[i]))
        for k in one:
            assert np.broadcast_to(many[k], (4,))[i] == pytest.approx(float(one[k]), rel=1e-14), k


def test_cp_kernel_factor_by_hand():
    """The per-step kernels of a ring pass against the unsplit kernel (step.cp_kernel_factor,
    FlashAttention-2 on H100 by keys a block, compute.ATTN_BLOCK_*): cp 1 is 1 exactly; cp 4 at
    8,192 tokens runs 1/4 of the core at 2,048 keys (the diagonal) and 3/4 at 1,024:
    370 (1/4 / 362 + 3/4 / 350) forward, 318 (1/4 / 291 + 3/4 / 260) backward. Below 512 keys
    the rate is held at 512's (cp 16 at 8,192: 512 and 256 keys)."""
    from planner.step import cp_kernel_factor

    att = Attention(h=4096, a=32, k=8, d=128, norm=4096)
    f1 = cp_kernel_factor(1, att.cp_ring(ctx_of(cp=1, seq=8192)))
    assert (float(f1[0]), float(f1[1])) == (1.0, 1.0)
    f4 = cp_kernel_factor(4, att.cp_ring(ctx_of(cp=4, seq=8192)))
    assert float(f4[0]) == pytest.approx(370 * (0.25 / 362 + 0.75 / 350), rel=1e-12)
    assert float(f4[1]) == pytest.approx(318 * (0.25 / 291 + 0.75 / 260), rel=1e-12)
    f16 = cp_kernel_factor(16, att.cp_ring(ctx_of(cp=16, seq=8192)))
    assert float(f16[0]) == pytest.approx(370 / 309, rel=1e-12)
    assert float(f16[1]) == pytest.approx(318 / 214, rel=1e-12)
