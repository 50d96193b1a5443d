"""Linear-attention mixers: Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, arXiv:2412.06464;
Qwen3-Next's `linear_attention` layers). Units: parameters, FLOPs, bytes, per micro-batch of T
tokens on one GPU.

Parameters (transformers Qwen3NextGatedDeltaNet; key_dim = key heads x d_k, value_dim =
value heads x d_v, kernel w): in_proj_qkvz h (2 key_dim + 2 value_dim) [q, k, v, z],
in_proj_ba h (2 value heads) [beta, alpha], depthwise conv1d over the 2 key_dim + value_dim
channels of q, k, v (w each, no bias), dt_bias and A_log (value heads each), the gated
RMSNorm d_v (shared by the heads), out_proj value_dim h; one pre-norm.

TODO(issue 20): FLOPs of the chunked delta rule, activations, GEMM shapes, collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import BlockParams


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

    kind = "mixer"
    has_core = True
    selective_core = False
    tp_pairs = (1.0,)

    @property
    def label(self) -> str:
        return f"gated_deltanet({self.key_heads}/{self.value_heads} heads)"

    @classmethod
    def from_spec(cls, spec, m, norm: int) -> "GatedDeltaNetBlock":
        return cls(h=m.hidden_size, key_heads=spec.num_key_heads, value_heads=spec.num_value_heads,
                   key_dim=spec.key_head_dim, value_dim=spec.value_head_dim, conv_kernel=spec.conv_kernel,
                   chunk=spec.chunk_size, norm=norm)

    def params(self) -> BlockParams:
        h = self.h
        kd, vd = self.key_heads * self.key_dim, self.value_heads * self.value_dim
        in_proj = h * (2 * kd + 2 * vd) + h * 2 * self.value_heads
        conv = (2 * kd + vd) * self.conv_kernel
        return BlockParams(split=in_proj + conv + 2 * self.value_heads + self.value_dim + vd * h, replicated=self.norm)
