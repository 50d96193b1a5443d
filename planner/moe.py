"""Mixture-of-experts layers, expert parallelism (EP) and multi-head latent attention (MLA):
the MoE-specific formulas the cost models call. Units: parameters (counts), bytes, seconds,
tokens. Every function is pure and takes PlanArrays of 0-d or 1-d arrays (no Python `if` on a
searched quantity); a dense model never reaches them (memory.py and step.py call them only
when the model has `moe:` or `mla:`).

Layers. Layer i (0-based) is an MoE layer when i >= first_k_dense and i % layer_freq == 0
(transformers DeepseekV3DecoderLayer [1]); the first k keep the dense MLP. A pipeline stage
holds the layers of its index range (the first stage [0, n_first), the last the final
n_last); with interleaving (vpp > 1) a stage's chunks are spread over the model, and the
range of its layer count is used as if contiguous (exact for layer_freq 1 apart from where
the k dense layers sit: here on the first stage, where chunk 0 puts them).

Expert parallelism (Megatron-Core [2], "MoE parallel folding" [3]). The routed experts of a
MoE layer are split over `ep` ranks carved out of the data-parallel x context-parallel ranks
(ep divides dp*cp and the expert count): each EP rank holds E/ep experts, split across TP
as the dense MLP is (expert tensor parallelism = TP, Megatron's default
--expert-tensor-parallel-size; a separate expert TP degree is not modelled). Expert weights,
gradients and optimizer states per GPU are E_params / (tp ep), sharded by ZeRO / FSDP over the
remaining expert-data-parallel ranks d / ep, where d is the dense shard group (dp*cp, or
shard_group*cp under HSDP), as Megatron's distributed optimizer shards expert parameters over
the expert-data-parallel group. Everything else (attention, dense MLPs, shared experts,
router, embeddings) is sharded as in a dense model. Expert gradients reduce over the d / ep
expert-data-parallel ranks only.

Tokens. Each token goes to top_k experts; with EP the layer's tokens are dispatched to the
ranks holding their experts (all-to-all) and combined back (all-to-all) [2]: per MoE layer
and micro-batch 2 all-to-alls forward and 2 backward (the gradients of dispatch and
combine), each of T x top_k x h x 2 bytes per rank (bf16) of which (ep-1)/ep leave the rank
(nccl-tests alltoall: busbw = algbw x (n-1)/n [4]), over the EP group at its place in the rank
order (the DP/CP stride: inside the NVLink domain or across nodes). Tokens are already
sequence-split across TP (SP) or replicated (then each TP rank dispatches its copy: the
all-to-all is per TP rank either way).

Load imbalance. The router does not spread tokens evenly; the slowest EP rank sets the pace.
`capacity_factor` c (job field moe_capacity_factor, default 1.0 = perfectly balanced) is
the ratio of the busiest expert's tokens to the mean, T x top_k / E x c: Megatron's
--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity makes it exact (tokens
beyond it are dropped, buffers padded to it) [2]; dropless training with auxiliary-loss or
bias balancing ([1] sec. 2.1.2) keeps it near, not at, 1 and a measured value should be
given. It scales the expert GEMMs, the dispatched-token activations and the all-to-all
volume on the critical rank.

Expert GEMMs. Each local expert runs its MLP on its tokens, T x top_k x ep / E x c per
expert per micro-batch on an EP rank (the ep ranks' tokens reach it): GEMMs [t_e, f1_e/tp, h]
and [t_e, h, f_e/tp], E/ep of them, priced by compute.gemm_time at those small shapes: their
wave efficiency is the grouped-GEMM efficiency (a grouped GEMM runs the experts' tiles in one
launch, so the tile quantisation of each small expert GEMM is what it loses; named
assumption, a `planner calibrate gemm` profile at these shapes replaces it). Shared experts
run on all T tokens as a dense MLP of width s x f_s; the router is a [T, E, h] GEMM.

Activations (per MoE layer, per micro-batch, bytes per token, bf16 unless said): router
logits 4E (fp32, kept for the softmax/sigmoid backward), the dispatched (permuted) tokens
2 top_k h c, the expert MLP gate and up outputs 2 (f1_e / tp) top_k c and activation output
2 (f_e / tp) top_k c, the expert outputs before the combine 2 top_k h c; the shared experts
keep a dense MLP's tensors at width s x f_s. These replace the dense MLP's gate/up/act_out.

MLA. Attention core FLOPs per token per layer 4 s a (d_qk + d_v) / 2 forward (QK^T at
d_qk = d_nope + d_rope, AV at d_v), i.e. a dense layer's 4 s a d with d = (d_qk + d_v)/2;
the time and activation models take that mean head dimension with one KV head per query
head (the up-projected keys and values), and the MLA projections priced as their own GEMMs:
q_a [T, r_q, h] and kv_a [T, r_kv + d_rope, h] (replicated across TP), q_b [T, a d_qk / tp,
r_q], kv_b [T, a (d_nope + d_v) / tp, r_kv], output [T, h, a d_v / tp].

References
[1] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437: sec. 2.1 (MLA,
    DeepSeekMoE, auxiliary-loss-free balancing), sec. 3.2 (EP, all-to-all), Table 1.
[2] NVIDIA Megatron-LM, megatron/core/transformer/moe/README.md (core_r0.12.0): expert
    parallelism (--expert-model-parallel-size), --expert-tensor-parallel-size (default: the
    tensor-parallel size), the alltoall token dispatcher, --moe-expert-capacity-factor,
    --moe-pad-expert-input-to-capacity, --moe-grouped-gemm.
[3] Liu et al. 2025, "MoE Parallel Folding: Heterogeneous Parallelism Mappings for
    Efficient Large-Scale MoE Model Training with Megatron Core", arXiv:2504.14960: EP and
    expert TP folded into the attention's DP x CP x TP ranks.
[4] NVIDIA nccl-tests doc/PERFORMANCE.md: alltoall bus bandwidth = algbw x (n-1)/n.
[5] Lepikhin et al. 2020, "GShard", arXiv:2006.16668, sec. 2.2: expert capacity and dropped
    tokens; Fedus et al. 2021, "Switch Transformers", sec. 2.2: capacity factor.
"""

from __future__ import annotations

import numpy as np

DEFAULT_CAPACITY_FACTOR = 1.0  # perfectly balanced routing; see the module docstring
ROUTER_LOGIT_BYTES = 4.0  # fp32 router logits / probabilities kept for the backward [2]


def moe_layer_count(moe, lo, hi):
    """MoE layers among layer indices [lo, hi) (arrays ok): i >= first_k_dense and
    i % layer_freq == 0 [1]."""
    k, f = moe.first_k_dense, moe.layer_freq
    lo = np.maximum(np.asarray(lo, dtype=np.int64), 0)
    hi = np.maximum(np.asarray(hi, dtype=np.int64), lo)

    def upto(x):  # MoE layers in [0, x)
        return np.maximum(-(-x // f) - (-(-k // f)), 0)

    return upto(hi) - upto(lo)


def attention_head_dim(model):
    """The head dimension the attention core runs at: model.dhead, or for MLA the mean of the
    query/key (d_nope + d_rope) and value head dims, so that 4 s a d counts QK^T and AV
    exactly (module docstring)."""
    if model.mla is None:
        return model.dhead
    return (model.mla.qk_head_dim + model.mla.v_head_dim) / 2.0
