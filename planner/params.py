"""Parameter counts from a model's layers, exactly.

Units: parameters (counts). Scalars only: the shape never varies inside a search.

A model is its layers (planner/layers/), each kind counted by its own module: attention
(Vaswani et al. 2017; GQA after Ainslie et al. 2023; MLA, DeepSeek-V2 sec. 2.1 [4]),
dense MLPs (gated: Shazeer 2020), mixture-of-experts MLPs [1]-[3], Gated DeltaNet and
Mamba mixers; each present sub-block has one pre-norm (RMSNorm h, Zhang & Sennrich 2019;
LayerNorm 2h). Model: the layers + input embedding V*h + output layer V*h unless tied +
final norm + learned position embedding max_seq*h where the model has one (GPT-2/3); the
multi-token-prediction modules (DeepSeek-V3 sec. 2.2) are counted apart (`mtp`), as the
report's 671B leaves them out.
The seed's script (sec. 1.2) counts attention + MLP + 2*V*h and no norms: 70.5e9 for the
Llama 3 70B paper shape; the norms add 1.3e6, below its printed precision.

`total` counts every expert; `active` the parameters one token passes through: the top-k
routed experts, the shared experts and the router of each MoE layer, everything else.

References
[1] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437, sec. 2.1, 2.2 and 4.2
    (671B total, 37B activated per token); Hugging Face deepseek-ai/DeepSeek-V3 config.json.
[2] Jiang et al. 2024, "Mixtral of Experts", arXiv:2401.04088, sec. 2 and Table 1 (46.7B /
    12.9B active for 8x7B); Hugging Face mistralai/Mixtral-8x7B-v0.1 config.json.
[3] Qwen Team 2025, "Qwen3 Technical Report", arXiv:2505.09388, Table 2 (30B-A3B: 48 layers,
    128 experts, 8 activated; 235B-A22B: 94 layers); model cards 30.5B total / 3.3B activated.
[4] DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434, sec. 2.1 (MLA), eqs. 9-19.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layers import LayerList, layer_list, per_model
from .layers.common import BlockParams, norm_params
from .layers.moe import MoEMLP
from .schema import ModelSpec


def moe_layer_count(moe, lo, hi):
    """MoE layers among layer indices [lo, hi) (arrays ok) of a model without a layer
    pattern: i >= first_k_dense and i % layer_freq == 0 [1]."""
    k, f = moe.first_k_dense, moe.layer_freq
    lo = np.maximum(np.asarray(lo, dtype=np.int64), 0)
    hi = np.maximum(np.asarray(hi, dtype=np.int64), lo)

    def upto(x):  # MoE layers in [0, x)
        return np.maximum(-(-x // f) - (-(-k // f)), 0)

    return upto(hi) - upto(lo)


@dataclass(frozen=True)
class ParamCounts:
    layers: LayerList
    kind_params: tuple  # BlockParams of one layer of each kind (layers.kinds)
    embedding: int  # input embedding (vocab-parallel under TP)
    output: int  # output layer (0 when tied)
    position: int  # learned position embedding (replicated)
    final_norm: int
    mtp: BlockParams = BlockParams()  # every multi-token-prediction module (projection, norms, layer)
    embedding_norm: int = 0  # the norm on the word embedding's output (ModelSpec.embedding_norm; replicated, first stage)
    legacy: dict | None = None  # the uniform-model keys of as_dict (no layer pattern)

    @property
    def num_layers(self) -> int:
        return self.layers.num_layers

    def _sum(self, attr: str) -> int:
        return int(sum(int(n) * getattr(p, attr) for n, p in zip(self.layers.totals, self.kind_params)))

    @property
    def layer_total(self) -> int:
        return self._sum("total")

    @property
    def ends(self) -> int:
        return self.embedding + self.output + self.position + self.final_norm + self.embedding_norm

    @property
    def total(self) -> int:
        return self.layer_total + self.ends

    @property
    def active(self) -> int:
        """Parameters one token passes through (= total for a dense model) [1]-[3]."""
        return self._sum("active") + self.ends

    @property
    def non_embedding(self) -> int:
        return self.layer_total + self.final_norm + self.embedding_norm  # the norms are no embedding table

    @property
    def routed_experts(self) -> int:
        """Every routed expert of the model (what expert parallelism shards)."""
        return self._sum("expert")

    @property
    def moe_layers(self) -> int:
        return int(sum(int(n) for n, k in zip(self.layers.totals, self.layers.kinds) if k.has_experts))

    def as_dict(self) -> dict:
        out = dict(self.legacy or {})
        out.update(total=self.total, non_embedding=self.non_embedding, embedding=self.embedding, output=self.output,
                   position=self.position, final_norm=self.final_norm)
        if self.embedding_norm:
            out["embedding_norm"] = self.embedding_norm
        if self.active != self.total or self.legacy is None or "active" in out:
            out.update(active=self.active, routed_experts=self.routed_experts, moe_layers=self.moe_layers)
        out["layer_kinds"] = [{"kind": k.label, "layers": int(n), "per_layer": p.total,
                               **({"active_per_layer": p.active} if p.active != p.total else {})}
                              for k, n, p in zip(self.layers.kinds, self.layers.totals, self.kind_params)]
        if self.mtp.total:
            out.update(mtp=self.mtp.total, total_with_mtp=self.total + self.mtp.total)
        return out


def mtp_params(m: ModelSpec, ll: LayerList, kind_params: tuple) -> BlockParams:
    """Every multi-token-prediction module [1] sec. 2.2: RMSNorms on the hidden state and on the
    next token's embedding, the projection M [2h -> h] (split across TP), one layer of the last
    layer's kind, and the norm before the shared output head (Megatron-LM @d98e8a64
    megatron/core/transformer/multi_token_prediction.py l. 1157-1174, 1247: enorm, hnorm, eh_proj,
    final_layernorm; pytorch/torchtitan release/0.3 @4f9e9a47d models/deepseek_v3/mtp.py l. 121-134:
    enorm, hnorm, mtp_norm; DeepSeek-V3's checkpoint names it shared_head.norm); the embedding and
    output head are the main model's. A module's layers are those of ll.mtp_kinds (a hybrid stack's MTP pattern,
    layers/__init__.py); modules run as one shared module (mtp_repeated_layer) count its weights once
    (LayerList.mtp_built)."""
    if not m.mtp_layers:
        return BlockParams()
    one = BlockParams(split=2 * m.hidden_size * m.hidden_size, replicated=3 * norm_params(m))
    for k in ll.mtp_kinds:
        one = one + kind_params[k]
    return one.times(ll.mtp_built)


def _legacy(m: ModelSpec, ll: LayerList) -> dict | None:
    """The per-layer keys explain reported before layer kinds, for a model without a layer
    pattern: its attention, dense MLP and norms per layer, and the MoE and MLA parts."""
    if m.layer_pattern is not None:
        return None
    from .layers import _mixer, _mlp

    mixer, dense = _mixer(None, m), _mlp(None, m, False)
    attn, mlp = mixer.params(), dense.params()
    norms = 2 * norm_params(m)
    # the blocks' own parameters, their row-parallel biases (kept in `replicated`, common.py [rb]) included
    attn_own, mlp_own = attn.split + attn.row_bias, mlp.split + mlp.row_bias
    attn_rep = attn.replicated - attn.row_bias - norm_params(m)
    out = {"per_layer": attn_own + mlp_own + norms + attn_rep,
           "attention_per_layer": attn_own, "mlp_per_layer": mlp_own, "norms_per_layer": norms}
    if m.moe is not None or attn_rep:
        moe = _mlp(None, m, True) if m.moe is not None else None
        out.update(
            expert=moe.expert_params if moe else 0,
            shared_experts_per_layer=moe.shared_params if moe else 0,
            router_per_layer=moe.router_params if moe else 0,
            attention_replicated_per_layer=attn_rep,
            active=0,  # filled by as_dict
        )
    return out


_counts = per_model(lambda m: _count_params(m))


def count_params(m: ModelSpec) -> ParamCounts:
    """The model's parameter counts, built once per model object (layers.per_model, as layer_list: a
    ModelSpec is frozen; a fit calls this about 30 times on one model, 0.1-0.4 ms each, issue 24)."""
    return _counts(m)


def _count_params(m: ModelSpec) -> ParamCounts:
    ll = layer_list(m)
    kp = tuple(k.params() for k in ll.kinds)
    h = m.hidden_size
    return ParamCounts(
        layers=ll,
        kind_params=kp,
        embedding=m.vocab_size * h,
        output=0 if m.tied_embeddings else m.vocab_size * h,
        position=m.max_seq_len * h if m.position_embedding == "learned" else 0,
        final_norm=norm_params(m),
        mtp=mtp_params(m, ll, kp),
        legacy=_legacy(m, ll),
        embedding_norm=norm_params(m) if m.embedding_norm else 0,
    )


def experts_of(ll: LayerList) -> list[bool]:
    """Per kind: whether its MLP has routed experts."""
    return [isinstance(k.mlp, MoEMLP) for k in ll.kinds]
