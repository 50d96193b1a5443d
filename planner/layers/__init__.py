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
it by how many layers of that kind a pipeline stage holds (`stage_counts`: the first stage,
stage 1 for the middle stages, the last; each model chunk of the virtual pipeline holds its
own consecutive layers, so an interleaved stage holds layers from all over the model).

Multi-token prediction (DeepSeek-V3 sec. 2.2, `mtp_layers`): each module is an RMSNorm on
the hidden state and one on the embedding of the next token, a projection [2h -> h] and one
layer of the last layer's kind, sharing the input embedding and the output head; it runs on
the last pipeline stage after the main model's layers, its own output head and loss included.

References
[1] NVIDIA Megatron-LM, megatron/core/transformer/transformer_layer.py
    get_transformer_layer_offset and megatron/core/pipeline_parallel/schedules.py
    (interleaved 1F1B): virtual stage j of pp x vpp runs on pipeline rank j mod pp and holds
    the next num_layers / (pp vpp) layers; with --account-for-embedding/loss-in-pipeline-split
    the first (last) virtual stage holds one layer fewer.
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
from .common import BlockParams, mb_tokens, norm_params, rep_div
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
                      bias=m.linear_bias, dropout=m.dropout, dense_f=m.ffn_hidden_size)
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


def context(plan, capacity_factor: float = 1.0) -> Ctx:
    return Ctx(plan=plan, tp=plan.tp.astype(np.float64), T=mb_tokens(plan), seq=plan.seq.astype(np.float64),
               cp=plan.cp.astype(np.float64), ep=plan.ep.astype(np.float64), rep_div=rep_div(plan),
               cf=float(capacity_factor))


def stage_counts(ll: LayerList, plan) -> dict:
    """Layers of each kind on the pipeline stages: "first" and "last" (K, ...) for stage 0 and
    stage p - 1, and the middle stages' distinct compositions as candidates, "mid" (C, K, ...)
    with "mid_stage" (C, ...) the lowest stage index holding each (the one with the most
    micro-batches in flight); with pp <= 2 the one candidate is stage 1's composition. With
    one stage all are the whole model. The cost models take the heaviest candidate.

    Placement (Megatron-Core's virtual pipeline [1]): model chunk j = 0 .. p v - 1 runs on
    stage j mod p and holds c = ceil(L' / (p v)) consecutive layers (pipeline.stage_layers),
    except that the first chunk holds e + ceil(r / 2) fewer and the last l + floor(r / 2)
    fewer, where e, l are the embedding and the loss counted in the split and r the layers
    the split leaves over (the stage_layers rule). A model of one kind needs only the counts."""
    from ..pipeline import stage_layers

    n_first, n_mid, n_last = stage_layers(ll.num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    if len(ll.kinds) == 1:
        out = {st: np.asarray(n, dtype=np.float64)[None] for st, n in (("first", n_first), ("last", n_last))}
        out["mid"] = np.asarray(n_mid, dtype=np.float64)[None, None]
        out["mid_stage"] = np.ones((1,) + np.shape(n_mid), dtype=np.int64)
        return out
    shape = np.broadcast(plan.pp, plan.vpp, plan.split_emb, plan.split_loss).shape
    pp, vpp, e, l_ = (np.broadcast_to(np.asarray(x, dtype=np.int64), shape).ravel()
                      for x in (plan.pp, plan.vpp, plan.split_emb, plan.split_loss))
    # the distinct pipeline configurations, found in one pass (a search holds a million plans
    # but a few dozen configurations): a dense key over the small ranges of the four fields
    V = int(vpp.max(initial=1)) + 1
    key = ((pp * V + vpp) * 2 + e) * 2 + l_
    present = np.zeros(int(key.max(initial=0)) + 1, dtype=bool)
    present[key] = True
    uniq = np.flatnonzero(present)
    inverse = (np.cumsum(present) - 1)[key]
    rows = [(int(k // 4 // V), int(k // 4 % V), int(k // 2 % 2), int(k % 2)) for k in uniq]
    per = [_placed_counts(ll, *row) for row in rows]
    K, C = len(ll.kinds), max(len(p["mid"]) for p in per)
    out = {st: np.stack([p[st] for p in per], axis=1)[:, inverse].reshape((K,) + shape) for st in ("first", "last")}
    # pad each configuration's candidates to C by repeating its first
    mids = np.stack([np.stack(p["mid"] + [p["mid"][0]] * (C - len(p["mid"]))) for p in per], axis=2)  # (C, K, U)
    stages = np.array([p["mid_stage"] + [p["mid_stage"][0]] * (C - len(p["mid"])) for p in per], dtype=np.int64).T
    out["mid"] = mids[:, :, inverse].reshape((C, K) + shape)
    out["mid_stage"] = stages[:, inverse].reshape((C,) + shape)
    return out


def _placed_counts(ll: LayerList, p: int, v: int, e: int, l_: int) -> dict:
    """stage_counts for one (pp, vpp, split_emb, split_loss)."""
    L = ll.num_layers
    if p == 1:
        return {"first": ll.totals, "last": ll.totals, "mid": [ll.totals], "mid_stage": [1]}
    c = -(-(L + e + l_) // (p * v))
    slack = max(p * v * c - (L + e + l_), 0)
    def_first, def_last = e + (slack + 1) // 2, l_ + slack // 2
    length = [c - (def_first if j == 0 else 0) - (def_last if j == p * v - 1 else 0) for j in range(p * v)]
    start = np.concatenate([[0], np.cumsum(np.maximum(length, 0))])

    def stage(s):
        return sum((ll.count(start[j], start[j + 1]) for j in range(s, p * v, p)), np.zeros(len(ll.kinds)))

    mid: dict = {}
    for s in range(1, max(p - 1, 2)):
        mid.setdefault(tuple(stage(s)), s)
    return {"first": stage(0), "last": stage(p - 1), "mid": [np.array(k) for k in mid], "mid_stage": list(mid.values())}


def weighted(counts: np.ndarray, values: list) -> np.ndarray:
    """sum_k counts[k] x values[k] (values: one array per kind)."""
    return sum((counts[i] * v for i, v in enumerate(values)), np.float64(0.0))


def mean_layer(counts: np.ndarray, values: list) -> np.ndarray:
    """The mean over a stage's layers of a per-kind quantity (0 where the stage holds none):
    sum_k (counts[k] / n) x values[k], so that a stage of one kind gets its value exactly."""
    n = np.maximum(counts.sum(axis=0), 1.0)
    return sum(((counts[i] / n) * v for i, v in enumerate(values)), np.float64(0.0))
