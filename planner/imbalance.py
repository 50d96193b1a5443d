"""MoE routing imbalance: the busiest expert-parallel rank's routed tokens over the mean, the
load every per-rank MoE cost is priced at. Pure numpy on 0-d or 1-d arrays (the EP size is a
searched quantity: no Python `if` on it).

A dropless MoE (no capacity factor) sends each EP rank the tokens its router picks; the
all-to-all and every layer after it wait for the rank that received the most. That rank's
tokens over the mean, the rank load L >= 1, scales what planner/layers/moe.py and
planner/dispatch.py price on the critical rank: the expert GEMMs' rows (expert_tokens), the
permutation kernels' per-row bytes (dispatch_bytes), the EP all-to-all volume (alltoall_bytes,
dispatch.transfers) and the dispatched-token activations it saves (tensors: moe_expert_in, the
experts' gate/up/activation outputs), i.e. top_k x L copies of a token on that rank.

Where L comes from (Settings fields, from the Job):
  moe_rank_imbalance  a measured L (Job field), applied at every EP size; Megatron
                      --moe-router-force-load-balancing reads as 1.0 [3].
  moe_load_balancing  else the balancing the run uses picks the default rule (Job field; read
                      from Megatron's --moe-router-load-balancing-type and
                      --moe-router-enable-expert-bias [3]; default: aux_loss_free for a model with a
                      per-expert score bias, schema.MoESpec.expert_score_bias (not a router linear's
                      own bias, router_linear_bias: gpt-oss's), else Megatron's default aux_loss):
    aux_loss         auxiliary loss (Megatron aux_loss, seq_aux_loss, global_aux_loss; also
                     `none`, which balances nothing: the aux-loss residual is a lower bound there)
    aux_loss_free    a per-expert score bias: auxiliary-loss-free balancing ([1] sec. 3, [2] sec.
                     2.1.2; Megatron --moe-router-enable-expert-bias), and Megatron's
                     quantile_balancing (a per-expert bias too, [3] arguments.py), priced alike
    sinkhorn         Sinkhorn-normalised routing: the assignment is iterated to equal expert
                     marginals within the batch, L = 1 (a named approximation)
    force            forced balancing, L = 1: Megatron's benchmark option replaces the router's
                     logits by normal random ones per token ([3] router.py, moe_utils.py RandomSTE),
                     balanced in expectation; the sampling spread of a micro-batch's M = T x top_k
                     routed copies per rank, about sqrt(2 ln ep / M) on the busiest rank (under 2%
                     at ep 64 for M >= 30,000), is not counted.

The default rule. [1] Table 2 measures MaxVio_global = max_e load_e / mean load - 1 per expert
over its validation set: auxiliary-loss ("loss-controlled") balancing 0.72 (1B model) and 0.52
(3B), loss-free 0.04 (both); its models route to E0 = 64 experts (top-6, 2 shared; [1] sec. 4.1
and its appendix's model configurations).
AUX_LOSS_MAXVIO and AUX_FREE_MAXVIO take the 3B figures. Per expert, not per rank: an EP rank
holds n = E / ep experts and its load is their mean, so the rank's MaxVio is at most the
experts' (the mean of n loads never exceeds their maximum). The conversion (named
approximation: independent, normally distributed expert loads of relative spread s): the
busiest of E0 experts sits sqrt(2 ln E0) s above the mean (the Gaussian maximum's leading
term), so s = MaxVio / sqrt(2 ln E0); a rank's mean of n loads has spread s / sqrt(n), and the
busiest of ep ranks sits sqrt(2 ln ep) s / sqrt(n) above, so

    L = 1 + MaxVio x sqrt(ln(ep) / (n ln E0)),   n = E / ep,

1 at ep = 1 (every expert on one rank: no rank waits for another) and the per-expert MaxVio
at ep = E = E0. MaxVio_global counts a whole validation set's tokens; a micro-batch's own
imbalance, what a step waits for, is larger ([1] Fig. 3 MaxVio_batch), so the rule is a lower
bound: give a measured moe_rank_imbalance where one exists. Not modelled: DeepSeek-V3's
node-limited routing bounding a node's load ([2] sec. 2.1.2), redundant experts (EPLB).

Capacity factor (Job moe_capacity_factor c, Megatron --moe-expert-capacity-factor [3]): tokens
beyond c x the mean of an expert are dropped, so the busiest rank receives min(L, c) (its
experts are each capped at c x their mean); with moe_pad_to_capacity
(--moe-pad-expert-input-to-capacity) every expert's input is padded to c: c exactly.

References
[1] Wang, Gao, Zhao, Sun, Dai 2024, "Auxiliary-Loss-Free Load Balancing Strategy for
    Mixture-of-Experts", arXiv:2408.15664: sec. 3 (the bias update), sec. 4.1 and appendix (models:
    64 routed experts), Table 2 (MaxVio_global, 1B and 3B), Fig. 3 (MaxVio_batch during training).
[2] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437, sec. 2.1.2
    (auxiliary-loss-free balancing, the complementary sequence-wise loss, node-limited routing).
[3] NVIDIA Megatron-LM @d98e8a64: megatron/training/arguments.py --moe-router-load-balancing-type
    {aux_loss, seq_aux_loss, global_aux_loss, sinkhorn, quantile_balancing, none} (default
    aux_loss); megatron/core/transformer/moe/README.md "Load Balancing Strategies"
    (--moe-router-enable-expert-bias), --moe-router-force-load-balancing ("Force load
    balancing (experimental)"), --moe-expert-capacity-factor, --moe-pad-expert-input-to-capacity;
    moe/router.py TopKRouter.forward (force load balancing: logits = apply_random_logits(logits)),
    moe/moe_utils.py RandomSTE ("random logits of router for load-balanced benchmark").
"""

from __future__ import annotations

import numpy as np

FORCE, AUX_LOSS, AUX_LOSS_FREE, SINKHORN = "force", "aux_loss", "aux_loss_free", "sinkhorn"
BALANCING = (FORCE, AUX_LOSS, AUX_LOSS_FREE, SINKHORN)
AUX_LOSS_MAXVIO = 0.52  # [1] Table 2, 3B model, loss-controlled: MaxVio_global per expert
AUX_FREE_MAXVIO = 0.04  # [1] Table 2, 3B (and 1B) model, loss-free: MaxVio_global per expert
MAXVIO_EXPERTS = 64  # E0: the routed experts of [1]'s models (sec. 4.1, appendix)
MAXVIO = {FORCE: 0.0, SINKHORN: 0.0, AUX_LOSS: AUX_LOSS_MAXVIO, AUX_LOSS_FREE: AUX_FREE_MAXVIO}


def default_balancing(model) -> str:
    """The balancing a job that names none uses: aux_loss_free for a model with a per-expert
    score bias (MoESpec.expert_score_bias; a router linear's bias balances nothing), else
    Megatron's default aux_loss [3]."""
    return AUX_LOSS_FREE if model.moe is not None and model.moe.expert_score_bias else AUX_LOSS


def rule_imbalance(balancing: str, num_experts, ep) -> np.ndarray:
    """The default rule's rank load L = 1 + MaxVio x sqrt(ln ep / (n ln E0)), n = E / ep (at
    least 1) (module docstring)."""
    ep = np.maximum(np.asarray(ep, dtype=np.float64), 1.0)
    n = np.maximum(float(num_experts) / ep, 1.0)
    return 1.0 + MAXVIO[balancing] * np.sqrt(np.log(ep) / (n * np.log(MAXVIO_EXPERTS)))


def rank_load(settings, plan, balanced: bool = False) -> np.ndarray:
    """The busiest EP rank's routed tokens over the mean for a plan (module docstring): the
    job's moe_rank_imbalance, else the default rule at the plan's EP size; composed with the
    capacity factor (min(L, c) where tokens are dropped, c where padded). balanced: at L = 1
    (what the capacity factor alone leaves: explain's routing-imbalance term). 1.0 for a dense
    model."""
    model = settings.model
    ep = np.asarray(plan.ep, dtype=np.float64)
    if model.moe is None:
        return np.ones_like(ep)
    given = settings.moe_rank_imbalance
    if balanced:
        r = np.ones_like(ep)
    elif given:
        r = np.full_like(ep, float(given))
    else:
        r = rule_imbalance(settings.moe_load_balancing, model.moe.num_experts, ep)
    if not settings.moe_token_drop:
        return r
    c = float(settings.moe_capacity_factor)
    return np.full_like(ep, c) if settings.moe_pad_to_capacity else np.minimum(r, c)
