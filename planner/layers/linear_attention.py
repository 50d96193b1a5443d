"""Linear-attention mixers: Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024 [1]; Qwen3-Next's
`linear_attention` layers). Units: parameters, FLOPs, bytes, per micro-batch of T tokens on one
GPU unless said. Symbols: h hidden, H_k key heads, H value heads, K = d_k and V = d_v per
head, C chunk length, w conv kernel, t TP ranks, c CP ranks, s the sequence length.

Parameters (transformers Qwen3NextGatedDeltaNet; key_dim = key heads x d_k, value_dim =
value heads x d_v, kernel w): in_proj_qkvz h (2 key_dim + 2 value_dim) [q, k, v, z],
in_proj_ba h (2 value heads) [beta, alpha], depthwise conv1d over the 2 key_dim + value_dim
channels of q, k, v (w each, no bias), dt_bias and A_log (value heads each), the gated
RMSNorm d_v (shared by the heads), out_proj value_dim h; one pre-norm.

Tensor parallelism (Megatron-Core GatedDeltaNet [3]): one column-parallel in_proj [q, k, v,
z, beta, alpha] split by head, the conv channels, dt_bias and A_log by head, out_proj
row-parallel; one TP collective pair each way. The gated RMSNorm's d_v weights are whole on
every TP rank (common.py `replicated`): Megatron-Core builds out_norm with hidden_size
value_head_dim, not divided by t (gated_delta_net/common.py l. 263-268; the spec's TENorm,
extensions/transformer_engine.py l. 1096-1101, a te.pytorch.RMSNorm marked sequence_parallel
under SP, TransformerEngine @d0067d0d module/rmsnorm.py l. 141-142), each rank normalising its
own H/t heads with it: under SP its gradient is in the step's TP all-reduce (step.py [27]);
without SP Megatron reduces it nowhere (finalize_model_grads.py l. 452-453 name q/k norms
only). q and k are per key head: past H_k ranks each keeps one (as GQA's K/V; Megatron
divides H_k by t). Forward GEMMs in_proj
[T, 2 K max(H_k/t, 1) + (2 H V + 2 H)/t, h], out_proj [T, h, H V/t].

Scan FLOPs: the chunkwise gated delta rule (DeltaNet's chunkwise form, Yang et al. 2024 [2]
sec. 3: the WY representation of the chunk's Householder products via the UT transform, then
the chunk-level state update; with [1]'s decay gates), as fla's kernels run it [4]
(fla/ops/gated_delta_rule/chunk.py `chunk_gated_delta_rule_fwd`). Every step runs per value
head (q and k are repeated to the H value heads before the kernel [3], and beta and the decay
are per value head); 2 FLOPs per multiply-add; per token per head, forward:
  kkt      A = beta K K^T (strictly lower) per chunk, [C, K] x [K, C]: 2 K m (the fused
           kernel `chunk_gated_delta_rule_fwd_kkt_solve_kernel` computes only the 16 x 16
           sub-blocks on and below the diagonal: the causal mean reach m)
  solve    (I + A)^-1, a unit lower-triangular inverse by substitution, sum_{j<i} 2 (i - j)
           ~ C^3/3 per chunk: f^2/3 per token (fla `solve_tril`, blockwise, is taken at this
           count: a named approximation)
  w, u     w = A (beta k e^g), u = A (beta v), [C, C] x [C, K] and [C, V]: 2 (K + V) f
           (`recompute_w_u_fwd`: whole C x C tiles)
  state    v' = u - w S and S <- e^g S + k^T v' per chunk, [C, K] x [K, V] twice: 4 K V
           (`chunk_gated_delta_rule_fwd_h`, sequential over chunks)
  output   o = q S e^g + (q k^T o M) v', [C, K] x [K, V], [C, K] x [K, C], [C, C] x [C, V]:
           2 K V + 2 (K + V) f (`chunk_fwd_o`: whole C x C tiles, masked after)
  F_GDN = H (6 K V + 2 K m + 4 (K + V) f + f^2/3),  m = mean_causal_keys(s, chunk=C) (C/2
          when C divides s), f = 2 m (C).
f^2/3 is exact when C divides s or s < C; a last partial chunk is taken at f (a named
approximation). Dropped (elementwise): the decays exp(g) and their cumulative sums, the
sigmoid of beta and the softplus of the gate (H per token), the gating mask (C^2/2 per chunk
and head). The model-FLOP convention (causal=False) counts every intra-chunk product at the
chunk span min(s, C); causal=True what the kernels run (F_GDN). Per token the count does not
depend on s but through the chunking: linear in the sequence length. The kernels are priced at
the FlashAttention rates (the named assumption SCAN_AT_ATTENTION_RATES of mamba.py: they are
tensor-core GEMMs over C x C tiles, as FlashAttention's are; no measured rate is catalogued).

Activations (what the autograd functions save, bytes per local token; Megatron-Core
GatedDeltaNet.forward [3] -> fla [4]):
  in_proj      its input, the norm output 2h ("norm1_out"), and the block input 2h ("input")
  conv1d       fla CausalConv1dFunction.forward: save_for_backward(x, ...): q, k, v before
               the conv 2 (2 H_k K + H V)
  l2norm       fla L2NormFunction.forward: save_for_backward(y, rstd): q, k 2 (2 H_k K), fp32
               rstd 4 (2 H_k)
  gates        g = -exp(A_log) softplus(alpha + dt_bias) under Megatron's jit_fuser: alpha
               2 H kept (GDN_COMPILED_GATES_KEEP_INPUTS, a named assumption)
  chunk rule   fla ChunkGatedDeltaRuleFunction.forward: save_for_backward(q, q_rstd, k,
               k_rstd, v, g, beta_raw, beta, A, ...): q and k repeated to H heads 2 (2 H K),
               v 2 H V, the cumulative decay g fp32 4 H, beta 2 H (beta_raw is the same
               tensor), A = (I + A)^-1 (k's dtype, [T, H, C]) 2 H C; the chunk states are
               recomputed in backward
  gated norm   Megatron _apply_gated_norm (jit_fuser): its inputs, the rule's output 2 H V
               and the gate z 2 H V, and fp32 rstd per head 4 H (GDN_COMPILED_NORM_KEEPS_INPUTS,
               a named assumption: what a fused gated RMSNorm, fla FusedRMSNormGated, saves)
  out_proj     its input 2 H V.
Where the model has dropout, the hidden dropout after the mixer keeps its mask, 1 B a hidden element
(Megatron-Core builds the G layer as a TransformerLayer whose self_attn_bda is get_bias_dropout_add
[3b]: the attention layer's bias-dropout-add at config.hidden_dropout; "dropout_masks", as the
attention, MLP and Mamba-2 blocks; transformers' Qwen3NextDecoderLayer adds the residual with no
dropout, and its configs have none). Where the model's norms are LayerNorms, Megatron's gated norm is
one too (TENorm follows config.normalization [3b]): 2 d_v parameters and an fp32 mean beside the rstd.
q and k per key head divide as K/V do (kind "kv", kv_heads = H_k); the rest by head (split).

Context parallelism (Megatron-Core [3]: gated_delta_net/common.py a2a_cp_to_hp /
a2a_hp_to_cp, through mamba_context_parallel's all-to-alls): the whole in_proj output passes
one all-to-all from sequence- to head-sharded before the conv, the gated norm's output one
back; their transposes in backward: 2 + 2 per layer. The scan then runs the whole sequence for
H/(t c) heads: its FLOPs per GPU are unchanged.

References
[1] Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with Delta Rule",
    arXiv:2412.06464.
[2] Yang, Wang, Zhang, Shen, Kim 2024, "Parallelizing Linear Transformers with the Delta Rule
    over Sequence Length", NeurIPS 2024, arXiv:2406.06484, sec. 3.
[3] NVIDIA Megatron-LM megatron/core/ssm/gated_delta_net/gdn.py (GatedDeltaNet.forward,
    chunk_size 64) and common.py (_prepare_input_for_gated_delta_rule, _apply_gated_norm,
    a2a_cp_to_hp, a2a_hp_to_cp), commit d98e8a64.
[3b] NVIDIA Megatron-LM megatron/core/models/hybrid/hybrid_layer_specs.py l. 122-135 (gdn_layer:
    TransformerLayer, self_attention GatedDeltaNet, self_attn_bda get_bias_dropout_add),
    megatron/core/transformer/transformer_layer.py TransformerLayer l. 363 (hidden_dropout =
    config.hidden_dropout), l. 754-755 (self_attn_bda(...)(attention_output_with_bias, residual,
    hidden_dropout)),
    gated_delta_net/common.py l. 262-268 (out_norm: TENorm of value_head_dim),
    extensions/transformer_engine.py l. 1080-1084 (TENorm: te LayerNorm for LayerNorm, RMSNorm for
    RMSNorm), commit d98e8a64.
[4] fla-org/flash-linear-attention fla/ops/gated_delta_rule/chunk.py, chunk_fwd.py,
    wy_fast.py, fla/ops/common/chunk_delta_h.py, chunk_o.py, fla/modules/l2norm.py,
    fla/modules/conv/triton/ops.py, commit bc3b101d.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import ACT_BYTES, BlockParams, kv_local, shapes
from .mamba import FP32_BYTES, chunk_reach, gemm_cast_elements


def gdn_flops(seq, heads, key_dim: int, value_dim: int, chunk: int, kernel: bool):
    """Forward FLOPs per token of the chunkwise gated delta rule over `heads` value heads
    (module docstring F_GDN; kernel=False: the chunk-span convention)."""
    m, f = chunk_reach(seq, chunk, kernel)
    K, V = float(key_dim), float(value_dim)
    return heads * (6.0 * K * V + 2.0 * K * m + 4.0 * (K + V) * f + f * f / 3.0)


@dataclass(frozen=True)
class GatedDeltaNetBlock:
    h: int
    key_heads: int
    value_heads: int
    key_dim: int  # per head
    value_dim: int  # per head
    conv_kernel: int
    chunk: int
    norm: int
    dropout: bool = False  # the model's hidden dropout after the mixer (the G layer's bias-dropout-add [3b])
    norm_bias: bool = False  # the gated norm a LayerNorm (scale and bias) where the model's norms are [3b]

    kind = "mixer"
    has_core = True
    selective_core = False
    cp_overlaps_core = False
    tp_pairs = (1.0,)
    sp_input_gemm = "gdn_in"  # the column-parallel in_proj fed by the SP all-gather of T h (step.py [35])

    @property
    def label(self) -> str:
        return f"gated_deltanet({self.key_heads}/{self.value_heads} heads)"

    @property
    def kv_heads(self) -> int:
        """q and k are per key head (the "kv" tensors divide by min(t, H_k))."""
        return self.key_heads

    @classmethod
    def from_spec(cls, spec, m, norm: int) -> "GatedDeltaNetBlock":
        return cls(h=m.hidden_size, key_heads=spec.num_key_heads, value_heads=spec.num_value_heads,
                   key_dim=spec.key_head_dim, value_dim=spec.value_head_dim, conv_kernel=spec.conv_kernel,
                   chunk=spec.chunk_size, norm=norm, dropout=m.hidden_dropout_on, norm_bias=m.norm == "layernorm")

    @property
    def gated_norm(self) -> int:
        """The gated norm's parameters: d_v (RMSNorm's scale), 2 d_v for a LayerNorm (scale and bias) [3b]."""
        return self.value_dim * (2 if self.norm_bias else 1)

    def params(self) -> BlockParams:
        h = self.h
        kd, vd = self.key_heads * self.key_dim, self.value_heads * self.value_dim
        in_proj = h * (2 * kd + 2 * vd) + h * 2 * self.value_heads
        conv = (2 * kd + vd) * self.conv_kernel
        # the gated RMSNorm (d_v, shared by the heads) whole on every TP rank [3] (module docstring)
        # conv1d, dt_bias and A_log (value heads each): plain parameters, no linear's (common.py [pl])
        return BlockParams(split=in_proj + conv + 2 * self.value_heads + vd * h, replicated=self.norm + self.gated_norm,
                           split_plain=conv + 2 * self.value_heads)

    def muon_matrices(self) -> tuple:
        """The 2-D matrices muon_per_gpu counts (common.py [ns]): in_proj (2 K H_k + 2 V H_v + 2 H_v) x h in one,
        out_proj h x V H_v (listed transposed: split on V H_v, its input, [ns])."""
        kd, vd = self.key_heads * self.key_dim, self.value_heads * self.value_dim
        return ((2 * kd + 2 * vd + 2 * self.value_heads, self.h, 1, "split"), (vd, self.h, 1, "split"))

    # ------------------------------------------------------------------ widths per GPU
    def _qk_width(self, ctx):
        """q and k channels per GPU: 2 K max(H_k/t, 1)."""
        return 2.0 * self.key_dim * kv_local(self.key_heads, ctx.tp)

    def _v_width(self, ctx):
        """Value (and gate z, norm, out_proj input) channels per GPU: H V/t."""
        return self.value_heads * self.value_dim / ctx.tp

    def _in_width(self, ctx):
        return self._qk_width(ctx) + 2.0 * self._v_width(ctx) + 2.0 * self.value_heads / ctx.tp

    # ------------------------------------------------------------------ compute
    def gemms(self, ctx):
        """Forward GEMMs [3]: in_proj [T, 2 K max(H_k/t, 1) + (2 H V + 2 H)/t, h], out_proj [T, h, H V/t]."""
        return shapes([("gdn_in", ctx.T, self._in_width(ctx), self.h, 1.0),
                       ("gdn_out", ctx.T, self.h, self._v_width(ctx), 1.0)])

    def projection_shares(self, ctx) -> dict:
        return {}  # selective recompute names attention projections only

    def core_kernel_flops(self, ctx):
        """Forward FLOPs of fla's chunk kernels for one micro-batch on one GPU: T x F_GDN over
        H/t value heads (module docstring)."""
        return ctx.T * gdn_flops(ctx.seq, self.value_heads / ctx.tp, self.key_dim, self.value_dim, self.chunk,
                                 kernel=True)

    def core_model_flops(self, seq, causal: bool, cp=1.0):
        """Model FLOPs per token, forward and backward (3x forward): 3 F_GDN over the H value
        heads; causal=False counts the intra-chunk products at the chunk span min(s, C)."""
        return 3.0 * gdn_flops(seq, float(self.value_heads), self.key_dim, self.value_dim, self.chunk, kernel=causal)

    def elementwise_bytes(self, ctx, kb, sfx):
        """Memory-bound bytes per micro-batch (sfx "" forward, "_bwd" backward): pre-norm and
        residual add (replicated unless SP); the conv1d + SiLU over q, k, v (read and write each
        element: the plain-activation figure); the L2 norms of q and k (the norm figure); the
        gated RMSNorm over H V/t (a norm, then y silu(z): the gated-activation figure). Left
        out, no stack figure matching them: the gate activations (H/t per token) and the copies
        that repeat q and k to the value heads."""
        h, qk, v = self.h, self._qk_width(ctx), self._v_width(ctx)
        drop = kb["dropout" + sfx] * (1.0 if self.dropout else 0.0)  # the hidden dropout's mask pass [3b]
        return ctx.T * ((kb["norm" + sfx] * h + kb["residual" + sfx] * h + drop * h) / ctx.rep_div
                        + kb["mlp_activation_plain" + sfx] * (qk + v)
                        + kb["norm" + sfx] * (qk + v) + kb["mlp_activation_gated" + sfx] * v)

    def cast_elements(self, ctx):
        """fp8: each GEMM's input and weight, cast per forward."""
        return gemm_cast_elements(self.gemms(ctx))

    # ------------------------------------------------------------------ memory
    def tensors(self, ctx, attention: str) -> dict:
        """Activation table, bytes per token (module docstring, [3] [4])."""
        h, Hk, H, K, V = self.h, self.key_heads, self.value_heads, self.key_dim, self.value_dim
        drop = {"dropout_masks": (1.0 * h, "rep")} if self.dropout else {}  # 1 B a hidden element [3b]
        stats = 2.0 if self.norm_bias else 1.0  # a LayerNorm's mean beside its rstd (fp32 each) [3b]
        return {
            **drop,
            "input": (ACT_BYTES * h, "rep"), "norm1_out": (ACT_BYTES * h, "rep"),
            "gdn_qk_conv_in": (ACT_BYTES * 2.0 * Hk * K, "kv"),
            "gdn_v_conv_in": (ACT_BYTES * H * V, "split"),
            "gdn_qk_l2norm": (ACT_BYTES * 2.0 * Hk * K + FP32_BYTES * 2.0 * Hk, "kv"),
            "gdn_alpha": (ACT_BYTES * H, "split"),
            "gdn_qk": (ACT_BYTES * 2.0 * H * K, "split"),  # repeated to the value heads
            "gdn_v": (ACT_BYTES * H * V, "split"),
            "gdn_g_beta": ((FP32_BYTES + ACT_BYTES) * H, "split"),
            "gdn_wy": (ACT_BYTES * H * self.chunk, "split"),  # A = (I + A)^-1, [T, H, C]
            "gdn_core_out": (ACT_BYTES * H * V, "split"),
            "gdn_gate": (ACT_BYTES * H * V, "split"),
            "gdn_norm_rstd": (FP32_BYTES * stats * H, "split"),
            "gdn_out_in": (ACT_BYTES * H * V, "split"),
        }

    # ------------------------------------------------------------------ communication
    def cp_collectives(self, ctx):
        """[(op, bytes per rank, count per layer, forward and backward)]: Megatron-Core's CP
        all-to-alls [3], each rank's whole buffer (comm.py): the in_proj output
        T (2 K max(H_k/t, 1) + (2 H V + 2 H)/t) x 2 B and the gated norm's output T H V/t x 2 B,
        each once forward and once backward."""
        T = ctx.T
        return [("all_to_all", T * self._in_width(ctx) * ACT_BYTES, 2.0),
                ("all_to_all", T * self._v_width(ctx) * ACT_BYTES, 2.0)]
