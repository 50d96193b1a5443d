"""State-space mixers: Mamba-2 (Dao & Gu 2024, SSD) and Mamba (Gu & Dao 2023, selective
scan). Units: parameters, FLOPs, bytes, per micro-batch of T tokens on one GPU.

Parameters (mamba_ssm Mamba2 / transformers NemotronHMamba2Mixer; d_inner = heads x head_dim
d_i, G groups, N state size, H heads, kernel w):
  Mamba-2  in_proj h (2 d_i + 2 G N + H) [z, x, B, C, dt], depthwise conv1d over the
           d_i + 2 G N channels of x, B, C (w each, + a bias each), dt_bias, A_log, D (H
           each), the gated RMSNorm d_i, out_proj d_i h; one pre-norm.
  Mamba    in_proj h 2 d_i [x, z], conv1d d_i (w + bias), x_proj d_i (r + 2N) [dt, B, C],
           dt_proj r d_i + d_i, A_log d_i N, D d_i, out_proj d_i h; Jamba adds RMSNorms on
           dt (r), B and C (N each); one pre-norm.

TODO(issue 20): FLOPs of the chunked scan, activations, GEMM shapes, collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import BlockParams


@dataclass(frozen=True)
class Mamba2Block:
    h: int
    heads: int
    head_dim: int
    state: int
    groups: int
    conv_kernel: int
    chunk: int
    norm: int
    conv_bias: bool = True
    proj_bias: bool = False

    kind = "mixer"
    has_core = True
    selective_core = False
    tp_pairs = (1.0,)

    @property
    def label(self) -> str:
        return f"mamba2({self.heads}x{self.head_dim}, N={self.state})"

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim

    def params(self) -> BlockParams:
        h, di, gn, H = self.h, self.d_inner, self.groups * self.state, self.heads
        in_proj = h * (2 * di + 2 * gn + H) + ((2 * di + 2 * gn + H) if self.proj_bias else 0)
        conv_ch = di + 2 * gn
        conv = conv_ch * self.conv_kernel + (conv_ch if self.conv_bias else 0)
        out_proj = di * h + (h if self.proj_bias else 0)
        return BlockParams(split=in_proj + conv + 3 * H + di + out_proj, replicated=self.norm)


@dataclass(frozen=True)
class Mamba1Block:
    h: int
    d_inner: int
    state: int
    conv_kernel: int
    dt_rank: int
    norm: int
    conv_bias: bool = True
    proj_bias: bool = False
    inner_norms: bool = False

    kind = "mixer"
    has_core = True
    selective_core = False
    tp_pairs = (1.0,)

    @property
    def label(self) -> str:
        return f"mamba({self.d_inner}, N={self.state})"

    def params(self) -> BlockParams:
        h, di, N, r = self.h, self.d_inner, self.state, self.dt_rank
        in_proj = h * 2 * di + (2 * di if self.proj_bias else 0)
        conv = di * self.conv_kernel + (di if self.conv_bias else 0)
        x_proj = di * (r + 2 * N)
        dt_proj = r * di + di
        out_proj = di * h + (h if self.proj_bias else 0)
        norms = (r + 2 * N) if self.inner_norms else 0
        return BlockParams(split=in_proj + conv + x_proj + dt_proj + di * N + di + out_proj + norms, replicated=self.norm)


def mamba_block(spec, m, norm: int):
    """The block of a schema.Mamba2 / schema.Mamba1 spec on model m."""
    if spec.kind == "mamba2":
        return Mamba2Block(h=m.hidden_size, heads=spec.num_heads, head_dim=spec.head_dim, state=spec.state_size,
                           groups=spec.n_groups, conv_kernel=spec.conv_kernel, chunk=spec.chunk_size, norm=norm,
                           conv_bias=spec.conv_bias, proj_bias=spec.proj_bias)
    return Mamba1Block(h=m.hidden_size, d_inner=spec.d_inner, state=spec.state_size, conv_kernel=spec.conv_kernel,
                       dt_rank=spec.dt_rank, norm=norm, conv_bias=spec.conv_bias, proj_bias=spec.proj_bias,
                       inner_norms=spec.inner_norms)
