"""Parameter counts from a model's shape, exactly.

Units: parameters (counts). Scalars only: the shape never varies inside a search.

Per decoder layer (Vaswani et al. 2017; GQA after Ainslie et al. 2023):
  attention  h*(a*d) [Q] + 2*h*(k*d) [K, V] + (a*d)*h [output]        (+ biases a*d + 2*k*d + h)
  MLP        gated (SwiGLU, Shazeer 2020): 3*h*f;  plain: 2*h*f         (+ biases f(*2 gated) + h)
  norms      2 per layer: RMSNorm h each (Zhang & Sennrich 2019), LayerNorm 2h each (scale + bias)
Model: L layers + input embedding V*h + output layer V*h unless tied + final norm
       + learned position embedding max_seq*h where the model has one (GPT-2/3).
The seed's script (sec. 1.2) counts attention + MLP + 2*V*h and no norms: 70.5e9 for the
Llama 3 70B paper shape; the norms add 1.3e6, below its printed precision.

Mixture-of-experts layers (planner/moe.py [1]-[3]) replace the dense MLP with E routed
experts of width f_e (each a gated or plain MLP), s shared experts of width f_s, and a router
h*E (+E for DeepSeek-V3's score-correction bias, + h for Qwen2-MoE's shared-expert gate).
`total` counts every expert; `active` the parameters one token passes through: the top-k
routed experts, the shared experts and the router. Multi-head latent attention (DeepSeek-V2
sec. 2.1 [4]): q_a h*r_q, q_b r_q*a*(d_nope + d_rope) (or h*a*(d_nope + d_rope) without a
query latent), kv_a h*(r_kv + d_rope), kv_b r_kv*a*(d_nope + d_v), output a*d_v*h, and an RMSNorm
on each latent; the two down projections and the latent norms are replicated across TP
(Megatron-Core MLASelfAttention builds them "duplicated"), the rest split as Q, K, V, O are.

References
[1] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437, sec. 2.1 and 4.2
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

from .schema import ModelSpec


def moe_layer_count(moe, lo, hi):
    """MoE layers among layer indices [lo, hi) (arrays ok): i >= first_k_dense and
    i % layer_freq == 0 [1]."""
    k, f = moe.first_k_dense, moe.layer_freq
    lo = np.maximum(np.asarray(lo, dtype=np.int64), 0)
    hi = np.maximum(np.asarray(hi, dtype=np.int64), lo)

    def upto(x):  # MoE layers in [0, x)
        return np.maximum(-(-x // f) - (-(-k // f)), 0)

    return upto(hi) - upto(lo)


@dataclass(frozen=True)
class ParamCounts:
    attention: int  # per layer, matrices (+ biases): split across TP
    mlp: int  # per layer, matrices (+ biases): split across TP
    norms: int  # per layer: replicated across TP
    embedding: int  # input embedding (vocab-parallel under TP)
    output: int  # output layer (0 when tied)
    position: int  # learned position embedding (replicated)
    final_norm: int
    num_layers: int
    # mixture-of-experts (0 for dense models): per MoE layer, the `mlp` above being the dense
    # MLP of the other layers
    moe_layers: int = 0  # layers with an MoE MLP
    expert: int = 0  # one routed expert (matrices)
    num_experts: int = 0  # routed experts per MoE layer
    top_k: int = 0  # routed experts per token
    shared: int = 0  # all shared experts of one MoE layer (split across TP like the MLP)
    router: int = 0  # router weights (+ bias) of one MoE layer (replicated across TP)
    attn_replicated: int = 0  # per layer: MLA's down projections and latent norms (replicated across TP)

    @property
    def per_layer(self) -> int:
        return self.attention + self.mlp + self.norms + self.attn_replicated

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    @property
    def moe_per_layer(self) -> int:
        """An MoE layer's MLP part: every routed expert, the shared experts and the router."""
        return self.num_experts * self.expert + self.shared + self.router

    @property
    def moe_active_per_layer(self) -> int:
        return self.top_k * self.expert + self.shared + self.router

    @property
    def routed_experts(self) -> int:
        """Every routed expert of the model (what expert parallelism shards)."""
        return self.moe_layers * self.num_experts * self.expert

    @property
    def per_layer_tp_split(self) -> int:
        return self.attention + self.mlp

    @property
    def layers(self) -> int:
        if not self.moe_layers:
            return self.num_layers * self.per_layer
        return (self.num_layers * (self.attention + self.norms + self.attn_replicated)
                + self.dense_layers * self.mlp + self.moe_layers * self.moe_per_layer)

    @property
    def active(self) -> int:
        """Parameters one token passes through (= total for a dense model) [1]-[3]."""
        ends = self.embedding + self.output + self.position + self.final_norm
        if not self.moe_layers:
            return self.total
        return (self.num_layers * (self.attention + self.norms + self.attn_replicated)
                + self.dense_layers * self.mlp + self.moe_layers * self.moe_active_per_layer + ends)

    @property
    def total(self) -> int:
        return self.layers + self.embedding + self.output + self.position + self.final_norm

    @property
    def non_embedding(self) -> int:
        return self.layers + self.final_norm

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "non_embedding": self.non_embedding,
            "per_layer": self.per_layer,
            "attention_per_layer": self.attention,
            "mlp_per_layer": self.mlp,
            "norms_per_layer": self.norms,
            "embedding": self.embedding,
            "output": self.output,
            "position": self.position,
            "final_norm": self.final_norm,
            **({} if not (self.moe_layers or self.attn_replicated) else {
                "active": self.active,
                "routed_experts": self.routed_experts,
                "moe_layers": self.moe_layers,
                "expert": self.expert,
                "shared_experts_per_layer": self.shared,
                "router_per_layer": self.router,
                "attention_replicated_per_layer": self.attn_replicated,
            }),
        }


def count_params(m: ModelSpec) -> ParamCounts:
    h, f, a, k, d = m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.kv_heads, m.dhead
    attn = h * (a * d) + 2 * h * (k * d) + (a * d) * h
    attn_rep = 0
    if m.mla is not None:  # [4]
        ml = m.mla
        q = h * a * ml.qk_head_dim if ml.q_lora_rank is None else ml.q_lora_rank * a * ml.qk_head_dim
        attn = q + ml.kv_lora_rank * a * (ml.qk_nope_head_dim + ml.v_head_dim) + a * ml.v_head_dim * h
        attn_rep = (0 if ml.q_lora_rank is None else h * ml.q_lora_rank) + h * (ml.kv_lora_rank + ml.qk_rope_head_dim)
        attn_rep += (ml.q_lora_rank or 0) + ml.kv_lora_rank  # RMSNorm on each latent
    mlp = (3 if m.gated_mlp else 2) * h * f
    if m.linear_bias:
        attn += a * d + 2 * k * d + h
        mlp += (2 * f if m.gated_mlp else f) + h
    norm = h if m.norm == "rmsnorm" else 2 * h
    moe = {}
    if m.moe is not None:
        e = m.moe
        per_mat = 3 if m.gated_mlp else 2
        fe = e.expert_ffn_hidden_size or f
        fs = e.shared_expert_ffn_hidden_size or fe
        moe = dict(
            moe_layers=int(moe_layer_count(e, 0, m.num_layers)),
            expert=per_mat * h * fe,
            num_experts=e.num_experts,
            top_k=e.top_k,
            shared=e.num_shared_experts * per_mat * h * fs + (h if e.shared_expert_gate else 0),
            router=h * e.num_experts + (e.num_experts if e.router_bias else 0),
        )
    return ParamCounts(
        attention=attn,
        mlp=mlp,
        norms=2 * norm,
        embedding=m.vocab_size * h,
        output=0 if m.tied_embeddings else m.vocab_size * h,
        position=m.max_seq_len * h if m.position_embedding == "learned" else 0,
        final_norm=norm,
        num_layers=m.num_layers,
        attn_replicated=attn_rep,
        **moe,
    )
