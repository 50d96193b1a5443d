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

Routing and permutation (dispatch_bytes; memory-bound, priced by step.py at HBM bandwidth x
compute.HBM_EFFICIENCY as its norms and activations are, and shown as explain's `moe_permute`
row). Megatron-Core's alltoall dispatcher [6] runs, per MoE layer, the router's fused top-k
(softmax or sigmoid) over the fp32 logits, a row-id map of the routing map, permutation 1
(each local token copied to its top_k destination rows, grouped by expert, before the
dispatch all-to-all), permutation 2 (the received rows sorted by local expert when a rank
holds more than one), the grouped expert MLP with the probabilities applied in its weighted
SwiGLU, and the two inverse permutations around the combine all-to-all; with
--moe-permute-fusion / --moe-router-fusion each is one Transformer Engine kernel [7] that
reads its inputs and writes its outputs once. The backward runs each permutation's inverse on
the gradients (the same bytes) and the router's softmax gradient. Bytes per token and per
row: dispatch_bytes' docstring.

All-to-all overlap (job field ep_comm_overlap, default off; a stack with
overlap.ep_comm_overlap_supported: Megatron-Core's --overlap-moe-expert-parallel-comm [8]).
The combined 1F1B schedule runs the forward of one micro-batch beside the backward of
another, layer by layer: the forward dispatch and combine of a layer hide behind the other
micro-batch's backward compute of a layer, its backward ones behind a layer's forward
compute, each at the stack's exposed share (step._hide). Passes with no partner run alone,
their all-to-alls exposed (alone_pass_share). Applied where Megatron-Core allows it
(ep_overlap_applies); DeepSeek's DualPipe and --delay-wgrad-compute (the weight gradients
deferred to widen the backward's window) are not modelled.

MLA. Attention core FLOPs per token per layer 4 s a (d_qk + d_v) / 2 forward (QK^T at
d_qk = d_nope + d_rope, AV at d_v), i.e. a dense layer's 4 s a d with d = (d_qk + d_v)/2;
the time and activation models take that mean head dimension with one KV head per query
head (the up-projected keys and values), and the MLA projections priced as their own GEMMs:
q_a [T, r_q, h] and kv_a [T, r_kv + d_rope, h] (replicated across TP), q_b [T, a d_qk / tp,
r_q], kv_b [T, a (d_nope + d_v) / tp, r_kv], output [T, h, a d_v / tp].

Expert gradients. Reduced (DDP all-reduce, ZeRO reduce-scatter + all-gather, FSDP per
micro-batch) over the d / ep expert-data-parallel ranks, placed ep x the EP stride apart, in
buckets as the dense gradients; they hide behind what the dense DP traffic leaves of the same
compute window (the backward and forward of the last micro-batch; every micro-batch under
FSDP), at the stack's exposed share. The Adam step reads and writes their shard.

Approximations (named, not fitted): one layer time for the middle and the last stage (the
middle stage's MoE share); the fp8 casts, the rotary and the MLP activation kernels of the
mean layer at the per-token MLP width top_k c f_e + s f_s (the casts of all local experts'
weights are not counted apart); selective recompute of individual projections priced at the
dense shapes; no HSDP replica all-reduce or FSDP buffer copies for the experts; `planner
calibrate gemm --run` times the per-expert and MLA shapes (mla_gemm_shapes, moe_gemm_shapes
at its --ep sizes) one GEMM at a time, not as one grouped launch. Not modelled: an
expert TP degree other than TP, DeepSeek's DualPipe ([1] sec. 3.2.1), node-limited routing and fp8 dispatch, dropped tokens' effect on FLOPs;
the dispatcher's host synchronisation (the token counts copied to the CPU before each
dispatch all-to-all [6]) and kernel-launch overheads.

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
[6] NVIDIA Megatron-LM: megatron/core/transformer/moe/token_dispatcher.py (commit 0014f137)
    MoEAlltoAllTokenDispatcher dispatch_preprocess (permutation 1), dispatch_postprocess
    (permutation 2, sort_chunks_by_idxs when num_local_experts > 1), combine_preprocess
    (unpermutation 2), combine_postprocess (unpermutation 1, without probabilities);
    moe_utils.py (commit 00611e6e) permute, unpermute, sort_chunks_by_idxs (fused=True: the TE
    kernels), topk_routing_with_score_function; megatron/core/fusions/fused_bias_swiglu.py
    (commit b1030e9d) WeightedSwiGLUFunction (probabilities read forward, their gradient
    written backward).
[7] NVIDIA TransformerEngine: transformer_engine/pytorch/triton/permutation.py (commit
    04481874) make_row_id_map (three passes, an int32 [tokens, 2E + 1] map),
    permute_with_mask_map / unpermute_with_mask_map (grid: tokens x hidden blocks; each token
    read once, its k rows written, or its k rows read and summed), sort_chunks_by_map;
    transformer_engine/pytorch/router.py (commit 03852664) FusedTopkScoreFunction (forward:
    probs, routing map and the fp32 intermediate output saved for the backward).
[8] NVIDIA Megatron-LM megatron/core/pipeline_parallel/combined_1f1b.py (commit 00caa53a):
    combined_1f1b_schedule_for_no_pipelining (phases: the first micro-batch's forward alone,
    then backward i + forward i+1, the last backward alone; "EP A2A in forward step is hidden
    by the attention/mlp computation in the backward step, and vice versa"),
    combined_1f1b_schedule_for_interleaved_pipelining (the steady state of the interleaved
    schedule); megatron/core/transformer/transformer_config.py __post_init__: the option
    needs expert_model_parallel_size > 1, virtual pipeline stages when pipeline parallel,
    the alltoall/flex dispatcher, no full recompute; megatron/core/pipeline_parallel/
    schedules.py (commit 4dabc623) forward_backward_pipelining_with_interleaving: warm-up
    2 (p - rank - 1) + (v - 1) p; later versions (get_pp_rank_microbatches, read in copies of
    the file, not at a stored NVIDIA commit) add one warm-up micro-batch with the overlap.
"""

from __future__ import annotations

import numpy as np

from .compute import GemmShape, calibrated_gemm_time, gemm_plateau, gemm_time, sm_count
from .params import moe_layer_count  # noqa: F401  (the layer pattern lives with the parameter counts)
from .pipeline import stage_layers
from .plan import DEFAULT_CAPACITY_FACTOR, FP8, ep_overlap_applies  # noqa: F401  (the default imbalance; the overlap rule step.py reads as moe.ep_overlap_applies)

ROUTER_LOGIT_BYTES = 4.0  # fp32 router logits / probabilities kept for the backward [2]


# ------------------------------------------------------------------ layers per stage
def stage_moe_layers(model, plan):
    """(first, middle, last): MoE layers on the first pipeline stage (layers [0, n_first)),
    a middle stage (the n_mid layers before the last stage's) and the last stage (the final
    n_last), from pipeline.stage_layers; with one stage all three count the whole model."""
    L, moe = model.num_layers, model.moe
    n_first, n_mid, n_last = stage_layers(L, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    first = moe_layer_count(moe, 0, n_first)
    last = moe_layer_count(moe, L - n_last, L)
    mid = moe_layer_count(moe, L - n_last - n_mid, L - n_last)
    one = plan.pp == 1
    return first, np.where(one, last, mid), last


# ------------------------------------------------------------------ parameters per GPU
def dense_stage_correction(pc, model, plan):
    """What memory.stage_params (every layer = attention/tp + mlp/tp + norms) misses for an
    MoE / MLA model, per GPU on the (first, middle, last) stage: MLA's replicated down
    projections and latent norms on every layer; on the MoE layers the dense MLP replaced by
    the shared experts (/tp) and the router (replicated). The routed experts are
    expert_stage_params."""
    tp = plan.tp.astype(np.float64)
    layers = stage_layers(model.num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    out = [n * float(pc.attn_replicated) for n in layers]
    if model.moe is not None:
        swap = (pc.shared - pc.mlp) / tp + pc.router
        out = [o + m * swap for o, m in zip(out, stage_moe_layers(model, plan))]
    return tuple(out)


def expert_stage_params(pc, model, plan):
    """Routed-expert parameters per GPU on the (first, middle, last) stage before ZeRO/FSDP
    sharding: MoE layers x E experts / (tp x ep) (expert TP = TP; module docstring)."""
    per = pc.num_experts * pc.expert / (plan.tp.astype(np.float64) * plan.ep)
    return tuple(m * per for m in stage_moe_layers(model, plan))


def moe_unit_params(pc, plan):
    """One MoE layer's parameters per GPU (the FSDP unit it gathers): attention/tp + the
    replicated parts + shared experts/tp + its E/ep experts/tp."""
    tp = plan.tp.astype(np.float64)
    return ((pc.attention + pc.shared) / tp + pc.norms + pc.attn_replicated + pc.router
            + pc.num_experts * pc.expert / (tp * plan.ep))


# ------------------------------------------------------------------ activations
def expert_tokens_factor(model, capacity_factor):
    """Token copies per token that reach the experts on the busiest rank: top_k x c."""
    return model.moe.top_k * capacity_factor


def moe_layer_activation_delta(model, plan, capacity_factor):
    """Bytes one MoE layer keeps for one micro-batch on one GPU beyond what
    memory.per_layer_activation_bytes counts for a dense layer (module docstring): the router
    logits (fp32, per token: /tp under SP), the expert inputs and outputs (top_k c copies of
    the hidden state, gathered across TP as Megatron's dispatcher does with expert TP = TP),
    the experts' gate/up/activation outputs (/tp), and the shared experts' MLP tensors, less
    the dense MLP's gate/up/activation tensors the layer does not have. With
    activation_model korthikanti as well, the dense MLP taken out at its arch sizes."""
    e = model.moe
    h = model.hidden_size
    tp = plan.tp.astype(np.float64)
    tokens = plan.mbs * (plan.seq / plan.cp)
    rep_div = np.where(plan.sp > 0, tp, 1.0)
    fe = e.expert_ffn_hidden_size or model.ffn_hidden_size
    fs = e.num_shared_experts * (e.shared_expert_ffn_hidden_size or fe)
    f = model.ffn_hidden_size
    g = 2.0 if model.gated_mlp else 1.0  # gate + up (gated) or up
    x = expert_tokens_factor(model, capacity_factor)
    dense_mlp = 2.0 * (g + 1.0) * f / tp
    per_token = (ROUTER_LOGIT_BYTES * e.num_experts / rep_div
                 + 2.0 * 2.0 * x * h  # expert inputs + outputs, gathered over TP
                 + 2.0 * (g + 1.0) * fe * x / tp  # expert gate/up + activation output
                 + 2.0 * (g + 1.0) * fs / tp  # shared experts
                 - dense_mlp)
    return tokens * per_token


def mla_latent_activation_bytes(model, plan):
    """Bytes one MLA layer keeps for one micro-batch on one GPU beyond q, k, v and the
    attention output (which memory.activation_tensors counts with one key/value head per query
    head at ModelSpec.core_head_dim): the query and key/value latents (the inputs of the
    up-projections) and their RMSNorm inputs, 2 B each, and the shared rotary key, 2 B x d_rope;
    computed on every TP rank (the down projections are replicated across TP [2])."""
    ml = model.mla
    tokens = plan.mbs * (plan.seq / plan.cp)
    latents = (ml.q_lora_rank or 0) + ml.kv_lora_rank
    return tokens * (2.0 * 2.0 * latents + 2.0 * ml.qk_rope_head_dim)


# ------------------------------------------------------------------ time
def _gemm_seconds(M, N, K, hw, precision, cal):
    """compute.gemm_time at the plateau (or the calibrated rate): the small per-expert
    shapes get their wave efficiency, i.e. the grouped-GEMM efficiency (module docstring)."""
    if cal is not None:
        return calibrated_gemm_time(M, N, K, precision, hw, cal)
    plat = np.where(np.asarray(precision) == FP8, gemm_plateau(hw, "fp8") if hw.fp8_TFLOPS else np.nan,
                    gemm_plateau(hw, "bf16"))
    return gemm_time(M, N, K, plat, sm_count(hw))


def _shapes(rows):
    """[(GemmShape, count)] with M, N, K broadcast to float64 arrays (compute.GemmShape)."""
    out = []
    for name, m, n, k, count in rows:
        m, n, k = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (m, n, k)))
        out.append((GemmShape(name, m, n, k), count))
    return out


def mla_gemm_shapes(model, tp, T):
    """MLA's forward GEMMs (name, M, N, K) with their count per layer (module docstring):
    q_a [T, r_q, h], q_b [T, a d_qk / tp, r_q] (or q [T, a d_qk / tp, h] without a query
    latent), kv_a [T, r_kv + d_rope, h], kv_b [T, a (d_nope + d_v) / tp, r_kv], output
    [T, h, a d_v / tp]. One definition for step.py and `planner calibrate gemm --run`."""
    ml, h, a = model.mla, model.hidden_size, model.num_attention_heads
    tp = np.asarray(tp, dtype=np.float64)
    if ml.q_lora_rank is None:
        rows = [("mla_q", T, a * ml.qk_head_dim / tp, h, 1.0)]
    else:
        rows = [("mla_q_down", T, ml.q_lora_rank, h, 1.0), ("mla_q_up", T, a * ml.qk_head_dim / tp, ml.q_lora_rank, 1.0)]
    rows += [("mla_kv_down", T, ml.kv_lora_rank + ml.qk_rope_head_dim, h, 1.0),
             ("mla_kv_up", T, a * (ml.qk_nope_head_dim + ml.v_head_dim) / tp, ml.kv_lora_rank, 1.0),
             ("mla_out", T, h, a * ml.v_head_dim / tp, 1.0)]
    return _shapes(rows)


def moe_gemm_shapes(model, tp, T, ep, capacity_factor=DEFAULT_CAPACITY_FACTOR):
    """One MoE layer's forward MLP GEMMs (name, M, N, K) with their count, on the busiest EP
    rank: the router [T, E, h]; the shared experts as one MLP of width s f_s; E/ep local
    experts of t_e = T top_k c ep / E tokens each, [t_e, f1_e/tp, h] and [t_e, h, f_e/tp].
    One definition for step.py and `planner calibrate gemm --run`."""
    e, h = model.moe, model.hidden_size
    tp = np.asarray(tp, dtype=np.float64)
    ep = np.asarray(ep, dtype=np.float64)
    fe = e.expert_ffn_hidden_size or model.ffn_hidden_size
    fs = e.num_shared_experts * (e.shared_expert_ffn_hidden_size or fe)
    g1 = 2.0 if model.gated_mlp else 1.0
    t_e = T * expert_tokens_factor(model, capacity_factor) * ep / e.num_experts
    local = e.num_experts / ep
    rows = [("router", T, e.num_experts, h, 1.0)]
    if fs:
        rows += [("shared_up", T, g1 * fs / tp, h, 1.0), ("shared_down", T, h, fs / tp, 1.0)]
    rows += [("expert_up", t_e, g1 * fe / tp, h, local), ("expert_down", t_e, h, fe / tp, local)]
    return _shapes(rows)


def _priced(shapes, hw, precision, cal):
    return sum((count * _gemm_seconds(g.M, g.N, g.K, hw, precision, cal) for g, count in shapes), np.float64(0.0))


def attention_gemm_fwd(model, hw, plan, T, cal, dense_times):
    """Forward seconds of one layer's attention projections: MLA's GEMMs (mla_gemm_shapes),
    else the dense qkv + output GEMMs already priced (dense_times)."""
    if model.mla is None:
        return dense_times.qkv + dense_times.attn_out
    return _priced(mla_gemm_shapes(model, plan.tp, T), hw, plan.precision, cal)


def moe_mlp_gemm_fwd(model, hw, plan, T, capacity_factor, cal):
    """Forward seconds of one MoE layer's MLP GEMMs on the busiest EP rank (moe_gemm_shapes)."""
    return _priced(moe_gemm_shapes(model, plan.tp, T, plan.ep, capacity_factor), hw, plan.precision, cal)


def middle_moe_share(model, plan):
    """Share of a middle stage's layers that are MoE layers (stage_moe_layers)."""
    _, n_mid, _ = stage_layers(model.num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    if model.moe is None:
        return np.zeros(np.shape(n_mid))
    return stage_moe_layers(model, plan)[1] / np.maximum(n_mid, 1)


def layer_gemm_fwd(model, hw, plan, T, capacity_factor, cal, dense_times):
    """Forward GEMM seconds of the mean layer of a middle pipeline stage (its MoE share of
    MoE layers, the rest dense): attention projections + MLP. dense_times: the dense layer's
    compute.forward_gemm_times."""
    attn = attention_gemm_fwd(model, hw, plan, T, cal, dense_times)
    dense_mlp = dense_times.mlp_up + dense_times.mlp_down
    if model.moe is None:
        return attn + dense_mlp
    share = middle_moe_share(model, plan)
    moe_mlp = moe_mlp_gemm_fwd(model, hw, plan, T, capacity_factor, cal)
    return attn + share * moe_mlp + (1.0 - share) * dense_mlp


def token_ffn_width(model, plan, capacity_factor):
    """MLP width per token of the mean middle-stage layer, for the memory-bound MLP
    activation and fp8 casts: top_k c f_e + s f_s on MoE layers, f on dense ones."""
    if model.moe is None:
        return float(model.ffn_hidden_size)
    e = model.moe
    fe = e.expert_ffn_hidden_size or model.ffn_hidden_size
    moe_w = expert_tokens_factor(model, capacity_factor) * fe + e.num_shared_experts * (e.shared_expert_ffn_hidden_size or fe)
    share = middle_moe_share(model, plan)
    return share * moe_w + (1.0 - share) * model.ffn_hidden_size


# ------------------------------------------------------------------ routing and permutation
PROB_BYTES = 4.0  # fp32 router probabilities and scores (TE router.py [7]: "scores" and "intermediate_output" FP32)
INDEX_BYTES = 4.0  # int32 row-id maps of the fused permutation kernels [7]
PERMUTE_ACT_BYTES = 2.0  # bf16 hidden states permuted and dispatched (Megatron dispatches bf16 unless fp8 dispatch [6])


def dispatch_bytes(model, plan, T, capacity_factor):
    """(forward, backward) HBM bytes of one MoE layer's router top-k and token permutations
    for one micro-batch on one GPU: Megatron-Core's alltoall token dispatcher with
    --moe-permute-fusion and --moe-router-fusion (Transformer Engine's fused kernels) [6][7],
    memory-bound work that step.py prices at HBM bandwidth x compute.HBM_EFFICIENCY. With
    n = T / tp (SP; T when the tokens are replicated) local tokens, R = T top_k c rows at the
    busiest rank's experts (gathered across TP), E experts, k = top_k, hidden size h, bf16
    tokens (A = 2 B), fp32 probabilities (P = 4 B), int32 maps (I = 4 B):

    per local token, forward
      router top-k (TE fused_topk_with_score_function): read the logits P E, write the
        probabilities P E, the saved softmax/sigmoid output P E and the routing map E (bool)
      row-id map (TE make_row_id_map, three passes): read the map E, write I E (pass 1),
        read and write I E (pass 2), read I E and write the dense row I (2E + 1) (pass 3)
      permutation 1 (permute): read the token A h once, write its k copies k A h, read and
        write its k probabilities 2 P k, read its row of the map I (2k + 1)
      unpermutation 1 (unpermute, no merging probs): read the k expert outputs k A h, write
        their sum A h, read the map row I (2k + 1)
    per expert row, forward, where a rank holds more than one expert (E / ep > 1: the
    received tokens arrive grouped by source rank and are sorted by local expert)
      permutation 2 (sort_chunks_by_idxs, with probs): write + read its I map entry, read and
        write the row 2 A h and its probability 2 P
      unpermutation 2 (without probs): write + read I, read and write the row 2 A h
    per expert row, forward, always: the probability read by the weighted SwiGLU P (the
      expert activation itself is step.py's MLP-activation kernel at width top_k c f_e)
    backward: each permutation's gradient is the inverse permutation of the same rows (a
      gather's gradient a scatter of the same size): unpermutation 1's gradient A h + k A h
      + I (2k + 1); permutation 1's k A h + P k read, A h + P E (the [n, E] probability
      gradient) written, + I (2k + 1); the router's read map, saved output and probability
      gradient E + 2 P E, write the logit gradient P E; per row, the two sorts 2 A h + I each
      (+ 2 P with probs) and the weighted SwiGLU's probability read and gradient write 2 P.

    Not counted (named approximations): the aux-loss score kernel (present only with an
    auxiliary loss), the tokens-per-expert reductions and split computations ([n, E] bool
    reads), the probabilities' own all-to-all (P per row, beside the A h of the tokens).
    Every stack is priced with this dispatcher's kernels (torchtitan and MegaBlocks gather
    and scatter the same rows with their own kernels, not counted apart)."""
    e, h = model.moe, float(model.hidden_size)
    E, k = float(e.num_experts), float(e.top_k)
    A, P, I = PERMUTE_ACT_BYTES, PROB_BYTES, INDEX_BYTES
    tp = plan.tp.astype(np.float64)
    n = T / np.where(plan.sp > 0, tp, 1.0)
    R = T * expert_tokens_factor(model, capacity_factor)
    sorts = np.where(E / plan.ep > 1.0, 1.0, 0.0)  # permutation 2 only with several local experts
    row_map = I * (2.0 * k + 1.0)
    fwd_token = ((2.0 * P * E + P * E + E)  # router top-k
                 + (E + I * E + 2.0 * I * E + I * E + I * (2.0 * E + 1.0))  # row-id map, 3 passes
                 + (A * h + k * A * h + 2.0 * P * k + row_map)  # permutation 1
                 + (k * A * h + A * h + row_map))  # unpermutation 1
    fwd_row = sorts * ((2.0 * I + 2.0 * A * h + 2.0 * P) + (2.0 * I + 2.0 * A * h)) + P
    bwd_token = ((A * h + k * A * h + row_map)  # unpermutation 1's gradient
                 + (k * A * h + P * k + A * h + P * E + row_map)  # permutation 1's gradient
                 + (E + 2.0 * P * E + P * E))  # router top-k gradient
    bwd_row = sorts * ((I + 2.0 * A * h + 2.0 * P) + (I + 2.0 * A * h)) + 2.0 * P
    return n * fwd_token + R * fwd_row, n * bwd_token + R * bwd_row


A2A_PER_LAYER = 4.0  # dispatch + combine forward, and their gradients backward [2]


def alone_pass_share(plan, m):
    """Share of a stage's forward (and of its backward) chunk passes that run alone under the
    combined 1F1B schedule [8], their all-to-alls with nothing to hide behind: with one stage
    the first micro-batch's forward and the last one's backward (1 of m each); interleaved,
    the warm-up forwards and cool-down backwards of the first stage, 2 (p-1) + (v-1) p + 1 of
    its m v passes (Megatron-Core's interleaved warm-up with microbatch_group_size_per_vp_stage
    = p, one more for the overlap; the first stage has the most, an upper bound for the
    others), at most all of them."""
    p, v = plan.pp.astype(np.float64), plan.vpp.astype(np.float64)
    passes = np.asarray(m, dtype=np.float64) * v
    warm = np.where(p > 1, 2.0 * (p - 1.0) + (v - 1.0) * p + 1.0, 1.0)
    return np.minimum(warm, passes) / np.maximum(passes, 1.0)


def alltoall_bytes(model, plan, T, capacity_factor):
    """Each rank's all-to-all send buffer for one dispatch or combine (comm.py size
    convention: S = the rank's whole buffer): its tokens (T/tp under SP) x top_k x c x h x 2 B."""
    tp = plan.tp.astype(np.float64)
    rep_div = np.where(plan.sp > 0, tp, 1.0)
    return T / rep_div * expert_tokens_factor(model, capacity_factor) * model.hidden_size * 2.0


def ep_stride(plan, strides):
    """The EP group's stride in the rank order. EP ranks are the innermost of the data x
    context parallel ranks (Megatron-Core's expert rank order tp-ep-dp [2][3]): inside the
    inner of the two axes (size n_in, stride s_in) when ep <= n_in, else the whole inner axis
    and ep / n_in ranks of the outer one (stride s_out), a block of span (ep / n_in) s_out
    placed as ep ranks s_out / n_in apart (the same span and members per NVLink domain,
    comm.group_link)."""
    cp_in = (plan.cp > 1) & (strides["cp"] < strides["dp"])
    n_in = np.where(cp_in, plan.cp, plan.dp)
    s_in = np.where(cp_in, strides["cp"], strides["dp"])
    s_out = np.where(cp_in, strides["dp"], strides["cp"])
    return np.where(plan.ep <= n_in, s_in, np.maximum(s_out // np.maximum(n_in, 1), 1))
