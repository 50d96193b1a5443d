"""MLP sub-blocks: dense (gated SwiGLU/GeGLU, or plain with GeLU / squared ReLU) and none;
the mixture-of-experts MLP is planner/layers/moe.py. Units: parameters, bytes, per
micro-batch of T tokens on one GPU.

Dense MLP of width f (Shazeer 2020 for the gated form [1]): gated 3 h f (gate, up, down),
plain 2 h f; biases 2f (f plain) + h where the model has linear biases; one pre-norm.
Forward GEMMs mlp_up [T, f1/t, h] (f1 = 2f gated: gate and up as one GEMM) and mlp_down
[T, h, f/t] (Megatron-LM's column- then row-parallel split, Narayanan et al. 2021 sec. 3 [2]).
Activations (Korthikanti et al. 2022 sec. 4.1 [3]): the block's input (the residual after the
mixer) 2h and its norm output 2h (replicated unless SP), gate and up 2f each (up only for a
plain MLP), the activation output 2f (split), the output 2h (kept by torchtitan's per-op
policy only), a dropout mask h where the model has dropout.

References
[1] Shazeer 2020, "GLU Variants Improve Transformer", arXiv:2002.05202.
[2] Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM", sec. 3.
[3] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import BlockParams, shapes


def mlp_elementwise_bytes(block, f, ctx, kb, sfx):
    """Memory-bound bytes per micro-batch of an MLP of per-token width f (sfx "" forward,
    "_bwd" backward): pre-norm, residual add, dropout and output bias (replicated unless SP),
    the activation (SwiGLU reads gate and up and writes f; GeLU reads and writes f; bytes per
    element from the stack), the up-projection bias."""
    h = block.h
    act = kb[("mlp_activation_gated" if block.gated else "mlp_activation_plain") + sfx]
    bias = kb["bias"] * (1.0 if block.bias else 0.0)
    drop = 1.0 if block.dropout else 0.0
    f1 = 2.0 * f if block.gated else f
    return ctx.T * ((kb["norm" + sfx] * h + kb["residual" + sfx] * h + kb["dropout" + sfx] * drop * h + bias * h)
                    / ctx.rep_div + act * f / ctx.tp + bias * f1 / ctx.tp)


def mlp_cast_elements(block, f, ctx):
    """fp8: elements cast per forward, the GEMM inputs (h into up, f into down) and the
    weights, at the per-token width f."""
    h, tp = block.h, ctx.tp
    f1 = 2.0 * f if block.gated else f
    return ctx.T * (h + f / tp) + (h * f1 / tp + f / tp * h)


@dataclass(frozen=True)
class DenseMLP:
    h: int
    f: int
    gated: bool
    norm: int
    bias: bool = False
    dropout: bool = False

    kind = "mlp"
    has_core = False
    selective_core = False
    cp_overlaps_core = False
    sp_input_gemm = "mlp_up"  # fc1, column-parallel on the SP all-gather of T h (step.py [35])

    @property
    def label(self) -> str:
        return f"{'gated ' if self.gated else ''}mlp({self.f})"

    @property
    def f1(self) -> int:
        return 2 * self.f if self.gated else self.f

    @property
    def tp_pairs(self):
        return (1.0,)

    @property
    def tp_synced(self) -> float:
        """h-element tensors duplicated over TP that BigScience's --sync-tp-duplicated-parameters all-reduces each forward
        (step.tp_comm [sy]): the pre-norm's (LayerNorm: weight and bias; RMSNorm: weight) and the down projection's bias."""
        return self.norm / self.h + (1.0 if self.bias else 0.0)

    def params(self) -> BlockParams:
        split = (3 if self.gated else 2) * self.h * self.f
        col = (2 * self.f if self.gated else self.f) if self.bias else 0  # the up projection's, split with its outputs
        row = self.h if self.bias else 0  # the down projection's, whole on every TP rank (common.py [rb])
        return BlockParams(split=split + col, replicated=self.norm + row, split_bias=col, row_bias=row)

    def muon_matrices(self) -> tuple:
        """Muon's whole matrices (common.py [ns]): linear_fc1 (the gate and up projections in one, f1 x h), linear_fc2
        (h x f, listed transposed: split on f, its input, [ns])."""
        return ((self.f1, self.h, 1, "split"), (self.f, self.h, 1, "split"))

    def gemms(self, ctx):
        return shapes([("mlp_up", ctx.T, self.f1 / ctx.tp, self.h, 1.0), ("mlp_down", ctx.T, self.h, self.f / ctx.tp, 1.0)])

    def projection_shares(self, ctx) -> dict:
        return {"gate": ("mlp_up", 0.5 if self.gated else 0.0), "up": ("mlp_up", 0.5 if self.gated else 1.0),
                "down": ("mlp_down", 1.0)}

    def token_width(self, ctx):
        """MLP width one token passes through (the activation kernel and the fp8 casts)."""
        return float(self.f)

    def elementwise_bytes(self, ctx, kb, sfx):
        return mlp_elementwise_bytes(self, self.token_width(ctx), ctx, kb, sfx) + self.unfused_bytes(ctx, kb, sfx)

    def unfused_bytes(self, ctx, kb, sfx):
        """What the job's fusion switches off add to elementwise_bytes (0 where fused, kb
        unfused_*): with the bias-activation fusion off, a gated activation's unfused kernels
        beyond the fused one's (mlp_activation_gated_unfused - mlp_activation_gated, per element
        of its output; a plain GeLU runs the same bytes either way) and, with linear biases, the
        up-projection's bias add (bias_unfused per element of its output, forward); with the
        bias-dropout-add fusion off, the down-projection's bias add (per hidden element)."""
        f, tp = float(self.f), ctx.tp
        gated = 1.0 if self.gated else 0.0
        act = gated * (kb["mlp_activation_gated_unfused" + sfx] - kb["mlp_activation_gated" + sfx]) * f / tp
        biased = kb["bias_unfused"] * (1.0 if self.bias and not sfx else 0.0)
        return ctx.T * (kb["unfused_activation"] * (act + biased * self.f1 / tp)
                        + kb["unfused_bias_dropout"] * biased * self.h / ctx.rep_div)

    def unfused_saved_bytes(self, ctx, kb, recomputes_act: bool = False):
        """Bytes one layer saves for its backward beyond its tensors() where the job turns the
        bias-activation fusion off: the unfused gated activation's own output and its linear
        half's copy (mlp_activation_gated_unfused_saved per element of the width-f output, / tp)."""
        gated = 1.0 if self.gated else 0.0
        return ctx.T * kb["unfused_activation"] * gated * kb["mlp_activation_gated_unfused_saved"] * self.f / ctx.tp

    def cast_elements(self, ctx):
        return mlp_cast_elements(self, self.token_width(ctx), ctx)

    def tensors(self, ctx, attention: str) -> dict:
        h, f = self.h, self.f
        drop = 1.0 if self.dropout else 0.0
        return {
            "norm2_in": (2.0 * h, "rep"), "norm2_out": (2.0 * h, "rep"),
            "gate": (2.0 * f if self.gated else 0.0, "split"), "up": (2.0 * f, "split"), "act_out": (2.0 * f, "split"),
            "mlp_out": (2.0 * h, "rep"), "dropout_masks": (drop * h, "rep"),
        }


@dataclass(frozen=True)
class NoBlock:
    """An absent sub-block (Nemotron-H's Mamba-only and attention-only blocks have no MLP; its
    MLP-only blocks no mixer): no parameters, no work, no activations."""

    kind: str = "none"
    has_core = False
    selective_core = False
    cp_overlaps_core = False
    tp_pairs = ()
    sp_input_gemm = None
    label = "none"

    def params(self) -> BlockParams:
        return BlockParams()

    def muon_matrices(self) -> tuple:
        return ()

    def gemms(self, ctx):
        return []

    def projection_shares(self, ctx) -> dict:
        return {}

    def token_width(self, ctx):
        return 0.0

    def elementwise_bytes(self, ctx, kb, sfx):
        return np.zeros(np.shape(ctx.T))

    def cast_elements(self, ctx):
        return np.zeros(np.shape(ctx.T))

    def tensors(self, ctx, attention: str) -> dict:
        return {}

    def cp_collectives(self, ctx):
        return []
