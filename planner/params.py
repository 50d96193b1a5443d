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
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import ModelSpec


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

    @property
    def per_layer(self) -> int:
        return self.attention + self.mlp + self.norms

    @property
    def per_layer_tp_split(self) -> int:
        return self.attention + self.mlp

    @property
    def layers(self) -> int:
        return self.num_layers * self.per_layer

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
        }


def count_params(m: ModelSpec) -> ParamCounts:
    h, f, a, k, d = m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.kv_heads, m.dhead
    attn = h * (a * d) + 2 * h * (k * d) + (a * d) * h
    mlp = (3 if m.gated_mlp else 2) * h * f
    if m.linear_bias:
        attn += a * d + 2 * k * d + h
        mlp += (2 * f if m.gated_mlp else f) + h
    norm = h if m.norm == "rmsnorm" else 2 * h
    return ParamCounts(
        attention=attn,
        mlp=mlp,
        norms=2 * norm,
        embedding=m.vocab_size * h,
        output=0 if m.tied_embeddings else m.vocab_size * h,
        position=m.max_seq_len * h if m.position_embedding == "learned" else 0,
        final_norm=norm,
        num_layers=m.num_layers,
    )
