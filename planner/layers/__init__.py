"""A model as an ordered list of layers, each a mixer sub-block and an MLP sub-block, each
sub-block costed by the module of its kind. Units: parameters (counts), bytes, FLOPs.

Kinds (schema.py's specs, the modules here):
  mixers   global / sliding-window / chunked softmax attention, with or without rotary
           positions, with or without an output gate (attention.py); multi-head latent
           attention (attention.MLA); Gated DeltaNet linear attention (linear_attention.py);
           Mamba-2 and Mamba state-space mixers (mamba.py); none
  MLPs     dense, gated or plain (mlp.py); mixture-of-experts (moe.py); none
Every block has one pre-norm when present (RMSNorm h or LayerNorm 2h) and is a frozen
dataclass with the same methods (each takes a Ctx, the per-micro-batch quantities of a plan
as 0-d or 1-d arrays): params(), gemms(ctx) (the forward GEMMs with their counts),
projection_shares(ctx), elementwise_bytes(ctx, kernel_bytes, "" | "_bwd"),
cast_elements(ctx), tensors(ctx, attention) (the activation table, common.py), and mixers
core_kernel_flops(ctx) / core_model_flops(seq, causal), cp_kv_bytes / cp_sends; tp_pairs says
which TP collective pairs the block runs each way.

Which layer is which (`layer_list`):
  - a model YAML with `layer_pattern` names a kind from `layer_kinds` for each layer, the
    pattern repeated from the start until num_layers are listed; a kind that leaves out its
    mixer gets the model's default (MLA with `mla:`, else global attention), one that leaves
    out its MLP the MoE MLP with `moe:`, else the dense MLP;
  - otherwise every layer has the default mixer, and the MLP is the MoE MLP on layer i
    (0-based) when i >= moe.first_k_dense and i % moe.layer_freq == 0 (transformers
    DeepseekV3DecoderLayer), the dense MLP elsewhere.
Identical layers form one kind; the cost models evaluate each kind once per plan and weight
it by how many layers of that kind a pipeline stage holds (pipeline.stage_kind_counts: each
model chunk of the virtual pipeline holds its own consecutive layers, so an interleaved stage
holds layers from all over the model).

Multi-token prediction (DeepSeek-V3 sec. 2.2, `mtp_layers`): each module is an RMSNorm on
the hidden state and one on the embedding of the next token, a projection [2h -> h] and one
layer of the last layer's kind, sharing the input embedding and the output head; it runs on
the last pipeline stage after the main model's layers, its own output head and loss included.

"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..schema import (
    ChunkedAttention, DenseMLP as DenseSpec, GatedDeltaNet, GlobalAttention, Mamba1, Mamba2, MLAAttention,
    ModelSpec, MoEMLP as MoESpecKind, NoMixer, NoMLP, SlidingAttention,
)
from .attention import MLA, Attention
from .common import BlockParams, etp_of, gathered_tokens, mb_tokens, norm_params, rep_div
from .mlp import DenseMLP, NoBlock
from .moe import MoEMLP


@dataclass(frozen=True)
class LayerKind:
    mixer: Any
    mlp: Any

    @property
    def label(self) -> str:
        parts = [b.label for b in (self.mixer, self.mlp) if b.label != "none"]
        return " + ".join(parts) or "none"

    @property
    def blocks(self) -> tuple:
        return (self.mixer, self.mlp)

    def params(self) -> BlockParams:
        return self.mixer.params() + self.mlp.params()

    @property
    def norms(self) -> int:
        """Pre-norms of the layer: one per present sub-block."""
        return sum(b.label != "none" for b in self.blocks)

    @property
    def has_experts(self) -> bool:
        return isinstance(self.mlp, MoEMLP)


@dataclass(frozen=True)
class LayerList:
    kinds: tuple  # distinct LayerKinds, in order of first appearance
    index: np.ndarray  # (L,) int64: the kind of each layer
    prefix: np.ndarray  # (K, L + 1) int64: layers of each kind among the first i
    mtp: int = 0  # multi-token prediction modules (each one layer of the last layer's kind)

    @property
    def num_layers(self) -> int:
        return len(self.index)

    def count(self, lo, hi) -> np.ndarray:
        """(K, ...) layers of each kind among indices [lo, hi) (arrays broadcast)."""
        L = self.num_layers
        lo, hi = np.broadcast_arrays(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64))
        lo = np.clip(lo, 0, L)
        hi = np.clip(hi, lo, L)
        return (self.prefix[:, hi] - self.prefix[:, lo]).astype(np.float64)

    @property
    def totals(self) -> np.ndarray:
        return self.prefix[:, -1].astype(np.float64)

    @property
    def mtp_kind(self) -> int:
        return int(self.index[-1])

    def described(self) -> list[dict]:
        """Each kind with its count and its layers as index ranges (explain's `layers`)."""
        out = []
        for k, kind in enumerate(self.kinds):
            idx = np.flatnonzero(self.index == k)
            runs, start = [], idx[0]
            for a, b in zip(idx, list(idx[1:]) + [None]):
                if b is None or b != a + 1:
                    runs.append(f"{start}" if a == start else f"{start}-{a}")
                    start = b
            out.append({"kind": kind.label, "count": int(len(idx)), "layers": ", ".join(runs)})
        if self.mtp:
            out.append({"kind": self.kinds[self.mtp_kind].label, "count": self.mtp,
                        "layers": "multi-token prediction (after the last layer)"})
        return out


# ----------------------------------------------------------------------------- resolution
def _mixer(spec, m: ModelSpec):
    norm = norm_params(m)
    if spec is None:
        spec = MLAAttention(kind="mla") if m.mla is not None else GlobalAttention()
    if isinstance(spec, (GlobalAttention, SlidingAttention, ChunkedAttention)):
        pos = spec.position or ("rope" if m.position_embedding == "rope" else "nope")
        return Attention(h=m.hidden_size, a=m.num_attention_heads, k=m.kv_heads, d=m.dhead, norm=norm,
                         bias=m.linear_bias, rope=pos == "rope", gate=spec.output_gate, dropout=m.dropout,
                         window=getattr(spec, "window", None), chunk=getattr(spec, "chunk", None))
    if isinstance(spec, MLAAttention):
        ml = m.mla
        return MLA(h=m.hidden_size, a=m.num_attention_heads, q_lora_rank=ml.q_lora_rank, kv_lora_rank=ml.kv_lora_rank,
                   qk_rope_head_dim=ml.qk_rope_head_dim, qk_nope_head_dim=ml.qk_nope_head_dim,
                   v_head_dim=ml.v_head_dim, norm=norm, dropout=m.dropout)
    if isinstance(spec, GatedDeltaNet):
        from .linear_attention import GatedDeltaNetBlock
        return GatedDeltaNetBlock.from_spec(spec, m, norm)
    if isinstance(spec, (Mamba2, Mamba1)):
        from .mamba import mamba_block
        return mamba_block(spec, m, norm)
    assert isinstance(spec, NoMixer)
    return NoBlock()


def _mlp(spec, m: ModelSpec, moe_layer: bool):
    norm = norm_params(m)
    if spec is None:
        spec = MoESpecKind(kind="moe") if moe_layer else DenseSpec()
    if isinstance(spec, DenseSpec):
        return DenseMLP(h=m.hidden_size, f=spec.ffn_hidden_size or m.ffn_hidden_size,
                        gated=m.gated_mlp if spec.gated is None else spec.gated, norm=norm, bias=m.linear_bias,
                        dropout=m.dropout)
    if isinstance(spec, MoESpecKind):
        e = m.moe
        fe = e.expert_ffn_hidden_size or m.ffn_hidden_size
        return MoEMLP(h=m.hidden_size, num_experts=e.num_experts, top_k=e.top_k, fe=fe,
                      num_shared=e.num_shared_experts, fs=e.shared_expert_ffn_hidden_size or fe,
                      shared_gate=e.shared_expert_gate, router_bias=e.router_bias, gated=m.gated_mlp, norm=norm,
                      bias=m.linear_bias, dropout=m.dropout, dense_f=m.ffn_hidden_size,
                      expert_groups=e.expert_groups or 0, groups_per_token=e.groups_per_token or 0)
    assert isinstance(spec, NoMLP)
    return NoBlock()


def _is_moe_layer(m: ModelSpec, i: int) -> bool:
    e = m.moe
    return e is not None and i >= e.first_k_dense and i % e.layer_freq == 0


def _build(m: ModelSpec) -> LayerList:
    L = m.num_layers
    if m.layer_pattern is not None:
        names = [m.layer_pattern[i % len(m.layer_pattern)] for i in range(L)]
        per_layer = [LayerKind(_mixer(m.layer_kinds[n].mixer, m), _mlp(m.layer_kinds[n].mlp, m, m.moe is not None))
                     for n in names]
    else:
        mixer = _mixer(None, m)
        dense, moe = _mlp(None, m, False), (_mlp(None, m, True) if m.moe is not None else None)
        per_layer = [LayerKind(mixer, moe if _is_moe_layer(m, i) else dense) for i in range(L)]
    kinds: list = []
    index = np.empty(L, dtype=np.int64)
    for i, k in enumerate(per_layer):
        if k not in kinds:
            kinds.append(k)
        index[i] = kinds.index(k)
    onehot = (index[None, :] == np.arange(len(kinds))[:, None]).astype(np.int64)
    prefix = np.concatenate([np.zeros((len(kinds), 1), dtype=np.int64), np.cumsum(onehot, axis=1)], axis=1)
    return LayerList(kinds=tuple(kinds), index=index, prefix=prefix, mtp=m.mtp_layers)


_CACHE: "OrderedDict[int, tuple[ModelSpec, LayerList]]" = OrderedDict()


def layer_list(m: ModelSpec) -> LayerList:
    """The model's layers (module docstring), built once per model object."""
    hit = _CACHE.get(id(m))
    if hit is not None and hit[0] is m:
        _CACHE.move_to_end(id(m))
        return hit[1]
    out = _build(m)
    _CACHE[id(m)] = (m, out)  # the entry holds the model, so its id cannot be reused while cached
    while len(_CACHE) > 256:
        _CACHE.popitem(last=False)
    return out


# ----------------------------------------------------------------------------- per plan
@dataclass(frozen=True)
class Ctx:
    """Per-micro-batch quantities of a plan that every block reads (0-d or 1-d arrays)."""

    plan: Any
    tp: np.ndarray  # float64
    T: np.ndarray  # tokens of one micro-batch on one GPU
    seq: np.ndarray  # float64 tokens per sequence
    cp: np.ndarray  # float64
    ep: np.ndarray  # float64
    rep_div: np.ndarray  # tp under SP, else 1
    cf: float  # MoE capacity factor (busiest expert / mean)
    etp: Any = 1.0  # float64 expert tensor-parallel degree (common.etp_of)
    gather: Any = 1.0  # ranks' tokens an expert-TP group gathers (common.gathered_tokens)
    # an expert tensor's bytes per GPU over what it would be as a TP-split tensor of the
    # micro-batch's T tokens: the rank's rows T / rep_div x gather, split over etp not tp,
    # gather / rep_div x tp / etp; 1 with etp = tp (planner/moe.py)
    expert_scale: Any = 1.0


def context(plan, capacity_factor: float = 1.0) -> Ctx:
    tp, etp, gather, rd = plan.tp.astype(np.float64), etp_of(plan).astype(np.float64), gathered_tokens(plan), rep_div(plan)
    return Ctx(plan=plan, tp=tp, T=mb_tokens(plan), seq=plan.seq.astype(np.float64),
               cp=plan.cp.astype(np.float64), ep=plan.ep.astype(np.float64), rep_div=rd,
               cf=float(capacity_factor), etp=etp, gather=gather, expert_scale=gather / rd * (tp / etp))


def weighted(counts: np.ndarray, values: list) -> np.ndarray:
    """sum_k counts[k] x values[k] (values: one array per kind)."""
    return sum((counts[i] * v for i, v in enumerate(values)), np.float64(0.0))


def mean_layer(counts: np.ndarray, values: list) -> np.ndarray:
    """The mean over a stage's layers of a per-kind quantity (0 where the stage holds none):
    sum_k (counts[k] / n) x values[k], so that a stage of one kind gets its value exactly."""
    if len(values) == 1:  # one kind: its value (what a stage of no layers multiplies by 0 layers)
        return values[0] + np.zeros(np.shape(counts)[1:])
    n = np.maximum(counts.sum(axis=0), 1.0)
    return sum(((counts[i] / n) * v for i, v in enumerate(values)), np.float64(0.0))
