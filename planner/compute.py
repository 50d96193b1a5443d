"""FLOPs of a training step. Units: FLOPs (floating-point operations), per token or total.

References
[1] Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1: training costs
    about 6N FLOPs per token (2N forward, 4N backward). The seed (sec. 1.1) and the Llama 3
    paper (3.8e25 = 6 x 405e9 x 15.6e12) use N = all parameters, embeddings included.
[2] Chowdhery et al. 2022, "PaLM", Appendix B: model FLOPs per token 6N + 12*L*H*Q*T
    (L layers, H heads, Q head dim, T sequence length), attention counted non-causal.
[3] Korthikanti et al. 2022, sec. 5: full recompute repeats the forward pass (8N, HFU);
    selective recompute repeats only the attention core (QK^T and AV: 4*L*H*Q*T forward).
[4] Chowdhery et al. 2022 sec. 4.1 / Appendix B: MFU counts model FLOPs only; HFU counts
    the recomputed FLOPs too.
"""

from __future__ import annotations

import numpy as np

from .params import count_params
from .plan import RC_FULL, RC_SELECTIVE
from .schema import ModelSpec
from .terms import Terms


def flops_per_token(model: ModelSpec, seq, recompute, causal: bool = False) -> Terms:
    """Model FLOPs per token as named terms: dense (6N [1]) + attention (12*L*a*d*s [2],
    halved when counted causal). recompute (codes from plan) is only used by
    hardware_flops_per_token."""
    n = count_params(model).total
    L, a, d = model.num_layers, model.num_attention_heads, model.dhead
    cf = 0.5 if causal else 1.0
    seq = np.asarray(seq, dtype=np.float64)
    return Terms(dense=np.full(seq.shape, 6.0 * n), attention=12.0 * L * a * d * seq * cf)


def recompute_flops_per_token(model: ModelSpec, seq, recompute, causal: bool = False) -> np.ndarray:
    """Extra FLOPs per token that recomputation adds [3]: full = one more forward (2N + 4Lads);
    selective = the attention core forward (4Lads)."""
    n = count_params(model).total
    L, a, d = model.num_layers, model.num_attention_heads, model.dhead
    cf = 0.5 if causal else 1.0
    seq = np.asarray(seq, dtype=np.float64)
    core = 4.0 * L * a * d * seq * cf
    recompute = np.asarray(recompute)
    return np.where(recompute == RC_FULL, 2.0 * n + core, np.where(recompute == RC_SELECTIVE, core, 0.0))


def flops_summary(model: ModelSpec, seq, recompute, causal: bool = False, tokens: float | None = None) -> dict:
    """The `flops` object of explain's JSON."""
    t = flops_per_token(model, seq, recompute, causal)
    extra = recompute_flops_per_token(model, seq, recompute, causal)
    out = {
        "flops_per_token_6n": t.dense,
        "attention_flops_per_token": t.attention,
        "model_flops_per_token": t.total,
        "recompute_flops_per_token": extra,
        "hardware_flops_per_token": t.total + extra,
        "attention_counted": "causal" if causal else "non-causal",
    }
    if tokens is not None:
        out["training_tokens"] = tokens
        out["total_training_flops"] = t.dense * tokens  # 6N x tokens, the seed's and Llama 3's convention
        out["total_training_flops_with_attention"] = t.total * tokens
    return out
