"""Expert parallelism (EP): where the routed experts live, the all-to-alls that move tokens
to them and back, and how those overlap. Units: parameters (counts), bytes, seconds, tokens.
Every function is pure and takes PlanArrays of 0-d or 1-d arrays (no Python `if` on a
searched quantity). The MoE MLP itself (its parameters, expert GEMMs, activations, router
and permutation kernels) is planner/layers/moe.py; a model's MoE layers are the layers of
that kind (planner/layers/).

Expert parallelism and MoE parallel folding (Megatron-Core [2][9], "MoE parallel folding"
[3]). The expert layers have their own grid over the same ranks as the attention's
tp x cp x dp (x pp): expert tensor parallelism etp (job field etp, Megatron
--expert-tensor-parallel-size; default tp), expert parallelism ep, and the expert-data-
parallel degree edp = tp dp cp / (etp ep) (world / (etp ep pp) [9]); Megatron requires etp
x ep to divide tp x dp x cp, not ep to divide dp x cp, so "TP2, ETP1, EP32" runs. Each EP
rank holds E/ep experts, each split over the etp ranks of its expert-TP group: routed expert
weights, gradients and optimizer states per GPU are E_params / (etp ep), sharded by ZeRO /
FSDP over the expert-data-parallel ranks of one shard group, tp x (shard_group under HSDP,
else dp) x cp / (etp ep) (expert_shard), as Megatron's distributed optimizer shards expert
parameters over the expert-data-parallel group. Everything else (attention, dense MLPs,
shared experts, router, embeddings) is sharded as in a dense model. Expert gradients reduce
over the expert-data-parallel ranks only.

Where the expert groups sit [9]. Megatron builds the expert grid with the RankGenerator of
its order (default 'tp-cp-ep-dp-pp'; --use-tp-pp-dp-mapping 'tp-cp-ep-pp-dp') with cp = 1
and tp = etp: the expert ranks enumerate the attention's non-pipeline ranks in order
(index j = the TP rank, then the inner, then the outer of CP and DP) and factor j as
etp (innermost), ep, edp. The expert-TP group is j-stride 1, the EP group j-stride etp,
the expert-DP group j-stride etp ep; with etp = tp they are the TP group, the innermost ep
of the DP x CP ranks and the rest, as before. With etp < tp the EP group starts inside a TP
group (TP2 ETP1 EP8: 8 consecutive ranks, one NVLink domain). _folded_stride maps each to
the (size, stride) comm.group_link places.

Tokens. Each token goes to top_k experts; with EP the layer's tokens are dispatched to the
ranks holding their experts (all-to-all) and combined back (all-to-all) [2][10]: per MoE
layer and micro-batch 2 all-to-alls forward and 2 backward (the gradients of dispatch and
combine), each of T x top_k x h x 2 bytes per rank (bf16; T/tp under SP) of which (ep-1)/ep
leave the rank (nccl-tests alltoall: busbw = algbw x (n-1)/n [4]), over the EP group at its
place in the expert grid (inside the NVLink domain or across nodes). Tokens are already
sequence-split across TP (SP) or replicated (then each TP rank dispatches its copy: the
all-to-all is per TP rank either way). With etp > 1 Megatron's alltoall dispatcher [10]
all-gathers the received rows over the expert-TP group after the dispatch all-to-all
(dispatch_postprocess: "AG(TP)") and reduce-scatters the experts' outputs before the combine
("RS(TP)"), the reverse pair backward: priced by step.etp_pair over the etp ranks (with
etp = tp under SP this is the pair step.tp_comm always priced for the MoE MLP; with etp = 1
there is none: the attention's sequence-parallel tokens go to the all-to-all directly). The
flex dispatcher's kernels (DeepEP, Hybrid-EP) run over the etp x ep group instead and send each
token to the etp ranks themselves: no such pair, the volume in their dispatch
(planner/dispatch.py "Expert TP").

Load imbalance. The router does not spread tokens evenly; the busiest EP rank sets the pace.
Its routed tokens over the mean, L (ctx.cf, planner/imbalance.py rank_load: the job's
moe_rank_imbalance or the rule of its router's balancing, capped by the capacity factor
--moe-expert-capacity-factor where tokens are dropped, exactly the capacity factor with
--moe-pad-expert-input-to-capacity [2]), scales the expert GEMMs, the dispatched-token
activations and the all-to-all volume on the critical rank: top_k x L copies of a token.

All-to-all overlap (job field ep_comm_overlap, default off; a stack with
overlap.ep_comm_overlap_supported: Megatron-Core's --overlap-moe-expert-parallel-comm [8]).
The combined 1F1B schedule runs the forward of one micro-batch beside the backward of
another, layer by layer: the forward dispatch and combine of a layer hide behind the other
micro-batch's backward compute of a layer, its backward ones behind a layer's forward
compute, each at the stack's exposed share (step._hide). Passes with no partner run alone,
their all-to-alls exposed (alone_pass_share). Applied where Megatron-Core allows it
(ep_overlap_applies); DeepSeek's DualPipe overlaps them likewise (below); --delay-wgrad-compute
(the weight gradients deferred to widen the backward's window) is not modelled.

Expert gradients. Reduced (DDP all-reduce, ZeRO reduce-scatter + all-gather, FSDP per
micro-batch) over the expert-data-parallel ranks (expert_shard; DDP: expert_dp), at their place
in the expert grid (expert_strides["edp"]), in
buckets as the dense gradients (FSDP: a unit a MoE layer), reduced and gathered when the dense
ones are (step.dp_expert_comm: Megatron's expert bucket groups, Megatron-FSDP's expert parameter
groups, torchtitan's expert FSDP2 units): every micro-batch where the mode does so (ZeRO-2,
FSDP), the stage's per-micro-batch DP part, else once a step, the step end's; they hide behind
what the dense DP traffic leaves of the same windows (each micro-batch's backward and forward),
at the stack's exposed share (step.dp_exposure). The Adam step reads and writes their shard.

Approximations (named, not fitted): the EP all-to-all overlap taken against the middle
stage's mean layer; no FSDP buffer copies for the experts (their HSDP replica all-reduce is priced: step.dp_expert_comm).
DeepSeek's DualPipe ([1] sec. 3.2.1) is a pipeline schedule (planner/pipeline.py [8]) that
hides the all-to-alls as the combined 1F1B does (step.ep_comm); node-deduplicated, node-limited
and fp8 dispatch are the dispatcher's (planner/dispatch.py: DeepEP's kernels are DeepSeek's).
The folded group's placement is approximated where it straddles an axis of the grid
(_folded_stride: the same span and members per NVLink domain). The shared experts' own TP
all-gather / reduce-scatter under SP (Megatron SharedExpertMLP over the attention's TP group
[10]) are step.py [37]'s (stack moe_shared_experts_tp_pair). Not modelled: dropped tokens'
effect on FLOPs.
The dispatcher's host synchronisation (the token counts copied to the CPU before each
dispatch all-to-all [6]) and the kernel issue time it exposes are priced by step.moe_host
(the stack's fitted moe_host).

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
[6] NVIDIA Megatron-LM: megatron/core/transformer/moe/token_dispatcher.py (commit 0014f137)
    MoEAlltoAllTokenDispatcher dispatch_preprocess (permutation 1), dispatch_postprocess
    (permutation 2, sort_chunks_by_idxs when num_local_experts > 1), combine_preprocess
    (unpermutation 2), combine_postprocess (unpermutation 1, without probabilities);
    moe_utils.py (commit 00611e6e) permute, unpermute, sort_chunks_by_idxs (fused=True: the TE
    kernels), topk_routing_with_score_function; megatron/core/fusions/fused_bias_swiglu.py
    (commit b1030e9d) WeightedSwiGLUFunction (probabilities read forward, their gradient
    written backward).
[9] NVIDIA Megatron-LM @d98e8a64 megatron/core/parallel_state.py initialize_model_parallel:
    expert_tensor_parallel_size defaults to tensor_model_parallel_size; expert_data_parallel
    _size = world_size // (expert_tensor_parallel_size x expert_model_parallel_size x
    pipeline_model_parallel_size) (a RuntimeError where it does not divide); the expert
    RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order=order) over the same order as the
    attention's; groups 'tp' (expert TP), 'ep', 'dp' (expert DP), 'tp-ep'.
[10] NVIDIA Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py
    MoETokenDispatcher (tp_group = pg_collection.expt_tp), MoEAlltoAllTokenDispatcher
    ("(3) token dispatch: A2A(EP) (4) dispatch postprocess: AG(TP)->sort_chunk ... (5) combine
    preprocess: sort_chunk->RS(TP) (6) token combine: A2A(EP)"; gather_from_sequence_parallel
    _region / reduce_scatter_to_sequence_parallel_region over the expert-TP group when its
    size > 1); moe/experts.py TEGroupedMLP (tp_group = pg_collection.expt_tp: the expert
    weights split over etp); moe/moe_layer.py MoELayer.forward (training with attention TP > 1
    requires sequence parallelism); moe/shared_experts.py (the shared experts on the
    attention's TP group).
[8] NVIDIA Megatron-LM megatron/core/pipeline_parallel/combined_1f1b.py (commit 00caa53a):
    combined_1f1b_schedule_for_no_pipelining (phases: the first micro-batch's forward alone,
    then backward i + forward i+1, the last backward alone; "EP A2A in forward step is hidden
    by the attention/mlp computation in the backward step, and vice versa"),
    combined_1f1b_schedule_for_interleaved_pipelining (the steady state of the interleaved
    schedule); megatron/core/transformer/transformer_config.py __post_init__: the option
    needs expert_model_parallel_size > 1, virtual pipeline stages when pipeline parallel,
    the alltoall/flex dispatcher, no full recompute; megatron/core/pipeline_parallel/
    schedules.py (commit 4dabc623) forward_backward_pipelining_with_interleaving: warm-up
    2 (p - rank - 1) + (v - 1) p; @d98e8a64 get_pp_rank_microbatches l. 964-970 adds one
    warm-up micro-batch with the overlap (alone_pass_share counts the last rank's on the path).
"""

from __future__ import annotations

import numpy as np

from .layers.common import ACT_BYTES, etp_of, gathered_tokens  # noqa: F401  (plan-level helpers the layer kinds share)
from .comm import folded_stride as _folded_stride  # (the folded grid's placement: startup.py's Hybrid-EP rules read it too)
from .plan import DEFAULT_CAPACITY_FACTOR, HSDP, ep_overlap_applies  # noqa: F401  (the capacity factor's default; the overlap rule step.py reads as moe.ep_overlap_applies)


def alltoall_bytes(block, ctx):
    """Each rank's all-to-all send buffer for one dispatch or combine of the MoE MLP `block`
    (comm.py size convention: S = the rank's whole buffer): its tokens (T/tp under SP) x
    top_k x L x h x 2 B [2] (L: the busiest rank's load, planner/imbalance.py)."""
    return ctx.T / ctx.rep_div * block.token_copies(ctx) * block.h * ACT_BYTES


def alone_pass_share(plan, m):
    """Share of a stage's forward (and of its backward) chunk passes that run alone under the
    combined 1F1B schedule [8], their all-to-alls with nothing to hide behind, as step_time
    charges it: on the m micro-batches of the critical stage and on the bubble's (p - 1) / v
    (pipeline.bubble_fraction x m for 1F1B / interleaved 1F1B), both at ep_comm's one per-micro-
    batch figure, so the share is that of the step's critical path: (W + p - 1) / (m v + p - 1).
    With one stage: the first micro-batch's forward and the last one's backward, 1 of m each.
    Pipelined (Megatron-LM @d98e8a64 megatron/core/pipeline_parallel/schedules.py
    get_pp_rank_microbatches l. 964-978: rank r warms up with 2 (p - r - 1) + (v - 1) N forwards,
    + 1 with --overlap-moe-expert-parallel-comm (l. 969-970), at most m v; the cool-down loop,
    l. 1971, runs as many backwards alone; each steady step is one combined forward + backward,
    combined_1f1b.py combined_1f1b_schedule_for_interleaved_pipelining): the path the step waits on
    is the fill's p - 1 forward chunk passes into the last stage (each a warm-up pass of its rank:
    alone), the last stage's m v passes, of which its W = min((v - 1) N + 1, m v) warm-up forwards
    and as many cool-down backwards are alone, and the drain's p - 1 backward chunk passes (cool-
    down passes: alone). Rank r's 2 (p - r - 1) further warm-up forwards (and flush backwards) run
    while it waits for its first backward, round the p - r - 1 stages below it: they sit in the
    bubble, whatever stage is the critical one (as step.pp_warmup_flush found for the sends).
    N: microbatch_group_size_per_vp_stage, p or the plan's mbg (pipeline.py [10]). A dependency
    replay of the combined schedule (each rank's ops in Megatron's order, a warm-up forward f + a,
    a combined step f + b, a cool-down backward b + a; scripts/pp_schedule_replay.py megatron-ep:
    p 2 .. 8, v 2, 4, m 4 .. 32, N p or 1.5 p) puts exactly (W + p - 1) x 2a on the step of a
    balanced pipeline and where the last or the middle stages are 20% heavier, up to one pass more
    where the first is. Before (issue 22 alonepass): the first stage's 2 (p - 1) + (v - 1) N + 1 of m v,
    which charged (1 + (p - 1) / (m v)) of it, 11.5 to 13.1 passes where the replay has 8 (p 4,
    v 2, m 8 .. 32)."""
    p, v = plan.pp.astype(np.float64), plan.vpp.astype(np.float64)
    n = np.where(np.asarray(plan.mbg) > 0, plan.mbg, p).astype(np.float64)
    passes = np.asarray(m, dtype=np.float64) * v
    warm = np.minimum(np.where(p > 1, (v - 1.0) * n + 1.0, 1.0), passes)
    return np.minimum((warm + p - 1.0) / np.maximum(passes + p - 1.0, 1.0), 1.0)


def expert_dp(plan) -> np.ndarray:
    """The expert-data-parallel degree tp dp cp / (etp ep) [9]: the ranks that hold the same
    experts (world / (etp ep pp)); with etp = tp, dp cp / ep."""
    return plan.tp * plan.dp * plan.cp // np.maximum(etp_of(plan) * plan.ep, 1)


def expert_shard(plan) -> np.ndarray:
    """The experts' ZeRO / FSDP shard group: the expert-data-parallel ranks of one dense shard
    group, tp x shard_group (HSDP's, or zero1's optimizer instances'; else dp) x cp / (etp ep) (Megatron's distributed
    optimizer shards expert parameters over the expert-data-parallel group [9])."""
    shard = plan.shard
    return plan.tp * shard * plan.cp // np.maximum(etp_of(plan) * plan.ep, 1)


def optimizer_shards(stack, plan, on: bool, experts: bool = True) -> tuple:
    """(dense, routed experts) ranks the optimizer states (the fp32 master and Adam's moments) shard over, below the
    level's own test (>= zero1): the shard group x cp and the experts' moe.expert_shard, or under the outer-DP
    optimizer sharding (outer_optim) the whole dp x cp group and tp x dp x cp / (etp ep) (memory.py [oo]).
    experts False (a caller that reads the dense groups only): None in the experts' place, not computed."""
    from .stacks import outer_optim

    oo = outer_optim(stack, plan, on)
    if not oo.any():  # no plan shards them over the replicas (the job's setting off, or no HSDP row): the own groups
        dense, e_own = np.asarray(plan.shard * plan.cp), (np.asarray(expert_shard(plan)) if experts else None)
        if dense.shape == oo.shape and dense.dtype == np.int64 and (  # as np.where's result
                not experts or (e_own.shape == oo.shape and e_own.dtype == np.int64)):
            return dense, e_own
    dense = np.where(oo, plan.dp * plan.cp, plan.shard * plan.cp)
    if not experts:
        return dense, None
    experts = np.where(oo, plan.tp * plan.dp * plan.cp // np.maximum(etp_of(plan) * plan.ep, 1), expert_shard(plan))
    return dense, experts


def expert_strides(plan, strides, groups=("etp", "ep", "edp")) -> dict:
    """Global strides (comm.group_link placement) of the expert tensor-parallel group (etp
    ranks, j-stride 1), the EP group (ep ranks, j-stride etp), the expert-data-parallel
    group (expert_dp ranks, j-stride etp ep) and the expert-TP x EP group ("tp_ep": etp ep
    ranks, j-stride 1, the flex dispatcher's [10]) of the folded expert grid [9]; of `groups` only."""
    etp = etp_of(plan)
    make = {"etp": lambda: _folded_stride(etp, 1, plan, strides),
            "ep": lambda: _folded_stride(plan.ep, etp, plan, strides),
            "edp": lambda: _folded_stride(expert_dp(plan), etp * plan.ep, plan, strides),
            "tp_ep": lambda: _folded_stride(etp * plan.ep, 1, plan, strides)}
    return {g: make[g]() for g in groups}


def ep_stride(plan, strides):
    """The EP group's stride in the rank order (expert_strides["ep"]). With etp = tp the EP
    ranks are the innermost of the data x context parallel ranks: inside the inner of the two
    axes (size n_in, stride s_in) when ep <= n_in, else the whole inner axis and ep / n_in ranks
    of the outer one (stride s_out), a block of span (ep / n_in) s_out placed as ep ranks
    s_out / n_in apart; with etp < tp they start inside the TP ranks."""
    return expert_strides(plan, strides, ("ep",))["ep"]


def etp_bytes(block, ctx):
    """The expert-TP all-gather (and reduce-scatter) buffer of one dispatch (combine) of the
    MoE MLP `block` (comm.py convention: the whole gathered buffer): the etp ranks' received
    rows, T / rep_div tokens x top_k x c x h x 2 B each, gathered [10]."""
    return ctx.T / ctx.rep_div * ctx.gather * block.token_copies(ctx) * block.h * ACT_BYTES
