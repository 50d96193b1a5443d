"""The mixture-of-experts MLP sub-block: routed experts, top-k router, shared experts.
Units: parameters, bytes, per micro-batch of T tokens on one GPU. Expert parallelism (where
the experts live, the all-to-alls, their overlap) is planner/moe.py.

Parameters (planner/params.py [1]-[3]): E routed experts of width f_e (each a gated or plain
MLP: 3 h f_e or 2 h f_e, + 2 f_e (f_e) + h biases where the model has linear biases), s shared
experts of width f_s (split across TP as a dense MLP) with Qwen2-MoE's sigmoid gate h, a router
h E (+ E for gpt-oss's router linear bias; replicated across TP; + E for DeepSeek-V3's score-correction
bias, a fp32 buffer: layers/common.py [sb]), one pre-norm. A token
passes through its top_k routed experts, the shared experts and the router.

Expert GEMMs. Each local expert runs its MLP on its tokens, T x top_k x ep / E x c per
expert per micro-batch on an EP rank (the ep ranks' tokens reach it): GEMMs [t_e, f1_e/tp, h]
and [t_e, h, f_e/tp], E/ep of them, priced by compute.gemm_time at those small shapes: their
wave efficiency is the grouped-GEMM efficiency (a grouped GEMM runs the experts' tiles in one
launch, so the tile quantisation of each small expert GEMM is what it loses; named
assumption, a `planner calibrate gemm` profile at these shapes replaces it). Shared experts
run on all T tokens as a dense MLP of width s x f_s; the router is a [T / rep_div, E, h] GEMM (its local tokens).

Activations (per MoE layer, per micro-batch, bytes per token, bf16 unless said): router
logits 4E (fp32, kept for the softmax/sigmoid backward; where the stack prices its routing saves,
Megatron-Core's, the router's path's own bytes instead: router_saved_terms [10]), the dispatched (permuted) tokens
2 top_k h c, the expert MLP gate and up outputs 2 (f1_e / tp) top_k c and activation output
2 (f_e / tp) top_k c, the expert outputs before the combine 2 top_k h c (not kept by a stack
whose routing weights multiply inside the expert, stack memory.moe_keeps_expert_out false:
Megatron-Core, memory.py [14]); the shared experts keep a dense MLP's tensors at width s x f_s.
These replace the dense MLP's gate/up/act_out. A clamped gated activation (ModelSpec.activation_clamp)
keeps more where its stack runs the clamp as ops of its own: the stack's activation_clamp_saved per
element of a row's gate+up output (unfused_saved_bytes; Megatron-Core: the clamps' saved inputs
keep the fc1 output beside the clamped copy the fused activation saves).

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
row: dispatch_bytes' docstring. Without those flags (Megatron-LM's default, the job's
moe_permute_fusion / moe_router_fusion false) Megatron-Core runs torch ops instead [8]: a flat
argsort of the routing map, index_select and scatter_add_ (each token row read once per copy, the
output zeroed and added into), torch.topk and scatters into zeroed [n, E] tensors;
unfused_dispatch_bytes counts what they move beyond the fused kernels (step.py adds it to the
same memory-bound term). What the routing and the permutations save for the backward differs by path
(the unfused argsort's int64 [n E] indices, kept through the probability gather's saved index, where
the fused kernel keeps its int32 [n, 2E + 1] row-id map): routing_saved_bytes [9], added beside
tensors() by memory.layer_memory.

Approximations (named, not fitted): the fp8 casts and the MLP activation kernel at the
per-token MLP width top_k c f_e + s f_s (the casts of all local experts' weights are not
counted apart); selective recompute of individual projections priced at the expert and
shared GEMMs' shares.

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
[9] What the routing and the permutations save for the backward (routing_saved_bytes; stack memory.moe_routing_saved):
    NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/router.py TopKRouter.routing (l. 746-837) ->
    moe_utils.py topk_routing_with_score_function: fused (l. 828-846), Transformer Engine's
    fused_topk_with_score_function (NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/router.py: default
    RoutingMapFormat.BYTEMAP, FusedTopkScoreFunction.forward l. 99 ctx.save_for_backward(routing_map,
    intermediate_output): the bool [n, E] map and the fp32 [n, E] score output); unfused, torch.topk and
    zeros_like(logits).scatter(1, top_indices, probs) (l. 954), whose backward keeps the int64 [n, k] indices.
    token_dispatcher.py MoEAlltoAllTokenDispatcher.dispatch_preprocess -> moe_utils.py permute (l. 344-500): fused,
    TE permutation.py moe_permute_mask_map_forward (make_row_id_map l. 321; triton/permutation.py l. 52: int32
    [n, 2E + 1]; saved l. 519), the same map saved again by the combine's unpermute (l. 808: no new bytes); unfused,
    routing_map.bool().T.contiguous().reshape(-1).argsort() (l. 473, int64 [n E]), its first n k entries a view whose
    storage the probabilities' gather probs.T.contiguous().reshape(-1)[flat_sorted] (l. 478) keeps for its backward,
    and sorted_indices = flat_sorted % n (l. 475, int64 [n k]) kept by index_select (l. 486) and the unpermute's
    scatter_add_. With more
    than one local expert, dispatch_postprocess and combine_preprocess sort the received rows by local expert
    (sort_chunks_by_idxs): fused, TE moe_chunk_sort_forward (permutation.py l. 1110-1160, make_chunk_sort_map:
    triton/permutation.py l. 381 int32 [rows]; saved l. 1250), one map each; unfused, split + cat (nothing kept).
    The router's own saved tensors are [10]'s; the allgather dispatcher's [12], DeepEP's [11], Hybrid-EP's [15]. Not
    priced: the unfused padded (drop-and-pad) permute, which keeps int64 [E x capacity] indices twice instead (l. 439-457),
    is priced as the dropless one (the fused permute with probabilities takes no padded path).
[10] What the router saves for its backward (router_saved_terms; job fields moe_router_fusion, moe_router_pre_softmax,
    moe_aux_loss_coeff, moe_z_loss_coeff): NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/router.py
    TopKRouter.routing (l. 746-837: apply_z_loss, topk_routing_with_score_function, and where
    is_aux_loss_enabled (l. 403-408: moe_aux_loss_coeff > 0 for an aux_loss / seq_aux_loss / global_aux_loss type)
    compute_routing_scores_for_aux_loss), gating l. 105-111 (logits in the input's dtype unless --moe-router-dtype);
    moe_utils.py topk_routing_with_score_function l. 766-957 (fused: TE; unfused: softmax before or after
    torch.topk, sigmoid and the k > 1 division, scatter into zeros), group_limited_topk l. 673-728 (masked_fill),
    compute_routing_scores_for_aux_loss l. 960-1016, switch_load_balancing_loss_func l. 63-150 (a sum over tokens),
    z_loss_func l. 153-182 (logsumexp, square, mean); NVIDIA/TransformerEngine @4329ff84
    transformer_engine/pytorch/router.py FusedTopkScoreFunction (ctx.save_for_backward(routing_map,
    intermediate_output)), FusedComputeScoresForMoEAuxLoss (ctx.save_for_backward(intermediate_output)), FusedAuxLoss
    (Const_buf, tokens_per_expert), csrc/extensions/router.cpp (intermediate_output fp32, the logits' shape [n, E]);
    PyTorch tools/autograd/derivatives.yaml: _softmax and sigmoid save their result, topk its indices, gather and
    scatter their index, div both operands, masked_fill its mask, logsumexp its input and result.
[11] The flex dispatcher with DeepEP (deepep_saved_bytes): NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/moe/token_dispatcher.py _DeepepManager (setup_metadata l. 1294-1304: torch.topk of the
    [n, R x E / R] probabilities; _indices_to_multihot l. 1337-1365: probs[mask] and multihot_probs[row_indices,
    valid_indices] = ..., int64 index tensors saved by their backward (PyTorch derivatives.yaml index / index_put_);
    get_permuted_hidden_states_by_experts l. 1424-1457: moe_utils.permute of the received tokens with probabilities,
    fused or not as [9]; fused_indices_to_multihot only under --enable-experimental), fused_a2a.py FusedDispatch /
    FusedCombine (ctx.handle); deepseek-ai/DeepEP @dd758caf deep_ep/buffers/legacy.py l. 313 (is_token_in_rank
    `[num_tokens, num_ranks]` torch.bool), l. 378 (internode where num_rdma_ranks > 1), l. 401, 500 (the handles),
    csrc/legacy/buffer.hpp l. 121 (num_rdma_ranks = max(1, num_ranks / 8)), 366, 604, 608 (intranode recv_src_idx,
    send_head), 1121, 1124-1125 (internode recv_src_meta, send_rdma_head, send_nvl_head), csrc/kernels/legacy/internode.cu
    l. 22-45 (SourceMeta, 8 B); fused_a2a.py @d98e8a64 l. 135, 187 (ctx.handle kept until the backward). The prefix
    matrices (deepep_prefix_bytes): DeepEP main @567632d deep_ep/buffer.py dispatch l. 385-398 (the intranode handle),
    internode_dispatch l. 474-496, csrc/deep_ep.cpp l. 490, 954 (num_channels = config.num_sms / 2), 594-595, 660
    (intranode), 1097-1100, 1180-1181 (internode); the same shapes at @dd758caf csrc/legacy/buffer.hpp l. 541-542, 607,
    1043-1046, 1122-1123; token_dispatcher.py @d98e8a64 l. 1288-1292 (set_deepep_num_sms(20) unless
    --moe-flex-dispatcher-num-sms).
[12] The allgather dispatcher (allgather_saved_bytes): NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/moe/token_dispatcher.py MoEAllGatherTokenDispatcher token_dispatch (l. 281-303: the routing
    map gathered under no_grad, the probabilities and tokens by gather_from_sequence_parallel_region over the tp_ep group),
    dispatch_postprocess (l. 305-335: local_map and local_probs sliced to the local experts, permute(hidden_states,
    local_map) without probabilities, local_probs.T.contiguous().masked_select(local_map.T.contiguous()) l. 331-333),
    combine_preprocess (unpermute with the same map, l. 337-353); moe_utils.py permute l. 344-500 (fused: TE
    moe_permute_mask_map_forward, the int32 [N, 2 E_l + 1] row-id map saved as in [9]; unfused: flat_sorted % num_tokens
    l. 475 kept by index_select l. 486, flat_sorted itself dropped without probabilities); PyTorch
    tools/autograd/derivatives.yaml `masked_select(Tensor self, Tensor mask)`: `self: masked_select_backward(grad, self,
    mask)` (MaskedSelectBackward0 saves self and mask).
[13] What the dispatchers hold as attributes and what the expert activation saves of the probabilities
    (dispatcher_held_bytes, expert_probs_saved_bytes): NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher.dispatch_preprocess l. 641-643
    (self.probs = probs; self.routing_map = routing_map: no method clears them, combine_preprocess reads
    self.probs.dtype l. 830 and combine_postprocess self.routing_map l. 895), MoEAllGatherTokenDispatcher
    dispatch_postprocess l. 312-334 (self.local_map, self.local_probs kept; self.routing_map = None),
    _DeepepManager.setup_metadata l. 1294-1304 (self.token_probs, self.token_indices = torch.topk(...)), dispatch
    l. 1313-1318 (token_probs.float()), get_permuted_hidden_states_by_experts l. 1424-1457 (self.dispatched_routing_map
    kept; dispatched_probs fp32, .to(torch.float64) under fp64), combine l. 1386-1390 (only handle, dispatched_indices
    and dispatched_probs released); fused_a2a.py FusedDispatch.forward (ctx keeps the handle, not the probabilities);
    moe_utils.py topk_routing_with_score_function l. 936-955 (probs.type_as(logits) scattered into
    zeros_like(logits); routing_map zeros_like(logits).int().scatter(...).bool()); NVIDIA/TransformerEngine @4329ff84
    transformer_engine/pytorch/csrc/extensions/router.cpp l. 62-65 (fused probs [n, E] in the logits' dtype, the bool
    routing map saved by FusedTopkScoreFunction, router.py l. 99); experts.py TEGroupedMLP.forward l. 881, 943-1027
    (permuted_probs into bias_act_func: weighted_bias_swiglu_impl, or intermediate * permuted_probs; under
    activation_recompute CheckpointWithoutOutput.checkpoint(bias_act_func, fc1_output, bias_parallel, permuted_probs));
    megatron/core/fusions/fused_bias_swiglu.py WeightedSwiGLUFunction.forward l. 268-270
    (ctx.save_for_backward(input_for_backward, weights)).
[14] Token-group padding (Ctx.group_align A: stacks.token_group_align, stack_db memory.moe_token_group_align for
    bf16 grouped GEMMs, fp8_recipes grouped_experts_align where the experts run converted; 0 on a stack that pads
    nothing): pytorch/torchtitan @e347b1e5e torchtitan/models/moe/utils.py _permute l. 42-59 gathers the rank's R
    routed rows into x[permuted_indices] of padded_max_len = round_up(R + E_l A, A) rows (E_l = E / ep local experts;
    the round-up, under A rows, left out), and the grouped GEMMs' outputs (gate / up, the activation output) have as
    many rows; kernels.py generate_permute_indices l. 183-194 sets each expert's group to round_up(max(n_e, A), A)
    rows, the offsets the grouped GEMMs run over (torch._grouped_mm, torchao's _scaled_grouped_mm: pytorch/ao
    @9cd41075 torchao/prototype/moe_training/scaled_grouped_mm.py l. 198-206). Held (tensors): moe_expert_in,
    moe_expert_gate_up and moe_expert_act_out at (R + E_l A) / R of their rows (padded_rows); the experts' output is
    unpermuted to R rows before the combine (_unpermute l. 62-66), not padded. Computed (gemms): t_e + (A - 1) / 2
    rows a local expert, the mean padding where a group's size mod A is uniform over 0 .. A - 1 (a named
    assumption; t_e >> A, so the clamp of an empty group to A rows is left out). The memory-bound kernels over the
    padded rows (SiLU, the multiply) are not scaled. With EP the same _permute runs after the all-to-all
    (distributed/expert_parallel.py l. 151-170), without it indices_padding_wrapper (models/moe/moe.py l. 166-178).
[15] The flex dispatcher with Hybrid-EP (hybridep_held_bytes, hybridep_saved_bytes): NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher.__init__ l. 1845-1851 (_HybridEPManager over
    the tp_ep group, num_experts = tp_size x num_moe_experts), _initialize_metadata l. 1893-1920 (routing map and
    probabilities reshaped to [n, tp_size x ep_size, num_local_experts], expand(...).contiguous()), _HybridEPManager
    setup_metadata l. 1068-1127 (self.routing_map, self.token_probs), dispatch l. 1129-1181 (self.token_probs =
    self.token_probs.float() l. 1136-1141; self.dispatched_probs, self.handle = hybrid_ep_dispatch(...)), combine
    l. 1183-1210 (self.handle = None; dispatched_probs and routing_map kept); fused_a2a.py HybridEPDispatch.forward
    l. 364-446 (ctx.handle = handle; routing map and probabilities not saved), HybridEPCombine.forward l. 485-499
    (ctx.handle); deepseek-ai/DeepEP @94a9f8f (hybrid-ep branch) deep_ep/hybrid_ep_buffer.py dispatch_with_permute
    l. 289-432 (the handle's eleven entries), csrc/hybrid_ep/executor/executor.cu metadata_preprocess_core l. 85-133
    (their shapes and dtypes), csrc/hybrid_ep/hybrid_ep.cu dispatch_with_permute l. 313-317 (the permuted tokens and
    fp32 [num_permuted_tokens] probabilities), csrc/hybrid_ep/config.cuh l. 418-420 (the 64-token preprocessing chunk).
[16] The experts as a Python loop (stack moe_experts per_expert_loop; loop_bytes): Lightning-AI/litgpt v0.4.11
    litgpt/model.py l. 393-404 LLaMAMoE.forward, read op by op with PyTorch's autograd formulas
    (tools/autograd/derivatives.yaml: topk saves its indices, _softmax its output, index (IndexBackward0) its
    indices, its gradient zeros(self).index_put_(indices, grad, accumulate=True); index_put_'s gradient for
    values grad.index(indices) and for self grad.index_put(indices, zeros_like(values)), an out-of-place copy;
    mul its two operands; autograd sums a tensor's gradients as they arrive). No permutation kernel, no grouped
    GEMM: each expert's GEMMs are its own (the expert_up / expert_down rows, E of them), no expert parallelism.
    The GEMMs, the SwiGLU (mlp_activation_gated bytes) are priced as for every MoE; loop_bytes counts the rest.
    n tokens, R = n k c routed rows, E experts, k = top_k, h hidden, bf16 activations (2 B), int64 indices
    (8 B); expert 0, the loop's first, writes into the zeroed y, which needs no gradient:
  forward, per token: topk of the bf16 [n, E] logits (read 2E, write values 2k and indices 8k), softmax to fp32
    (read 2k, write 4k), .to(bf16) (read 4k, write 2k), indices == arange(E) (read 8k, write a bool k E),
    zeros_like(x) (write 2h), each expert's torch.where reading its bool [n, k] slice (k E in all):
    2E + 30k + 2kE + 2h;
  forward, per routed row: torch.where's int64 pair (write 16), x[token_idx] (read 8 + 2h, write 2h),
    probs[token_idx, expert_idx] (read 16 + 2, write 2), the weight times the expert's output (read 2h + 2,
    write 2h), y[token_idx] (read 8 + 2h, write 2h), += (read 4h, write 2h), the index_put_ back (read
    8 + 2h, write 2h): 22h + 62;
  backward, per token: for each expert but the first, index_put_'s gradient for the earlier y (a copy of the
    gradient, read 2h write 2h), y[token_idx]'s (zeros, write 2h) and their sum (read 4h, write 2h): 12h;
    for every expert, x[token_idx]'s gradient (zeros, write 2h) and its sum into x's (read 4h, write 2h):
    8h; the [n, k] probabilities' gradient per expert (zeros 2k) and their sums (6k each, E - 1), the cast
    back (read 2k, write 4k), the softmax's backward (read 4k + 4k, write 2k), topk's (zeros 2E, scatter read
    8k + 2k, write 2k): (E - 1) 12h + 8hE + 8kE + 22k + 2E;
  backward, per routed row: the values' gradient grad[token_idx] (read 8 + 2h, write 2h), the multiply's (the
    output's grad x p: read 2h + 2, write 2h; the weight's (grad x out).sum: read 4h, write 2h, read 2h,
    write 2), the probabilities' index_put (read 16 + 2, read and write 2 + 2), x[token_idx]'s index_put
    (read 8 + 2h + 2h, write 2h); and on the rows of the experts but the first ((E - 1) / E of them,
    balanced): index_put_'s zeros_like(values) and put (write 2h, read 8 + 2h, write 2h), y[token_idx]'s
    index_put (read 8 + 2h + 2h, write 2h): 22h + 42 + (E - 1) / E (12h + 16).
    Not counted: the sort CUDA's accumulating index_put_ runs on its int64 indices (tens of bytes a row), the
    arange; the host's wait at each torch.where (stack uncertain).
[17] The routing map padded for quantized grouped GEMMs (padded_routing_map_bytes; job fields
    moe_router_padding, enable_experimental): NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/transformer_config.py l. 771-778 (moe_router_padding_for_quantization; the
    moe_router_padding_for_fp8 alias sets it, l. 2641-2647), l. 2649-2659 (refused without fp8 / fp4 and on the
    allgather dispatcher); megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher.dispatch_preprocess
    l. 643-655 (self.routing_map = routing_map, the router's bool map; padded: fused_pad_routing_map where
    is_experimental_enabled() and moe_permute_fusion, else pad_routing_map; self.routing_map is read again by
    combine_postprocess l. 895 and overwritten only by the layer's next forward), _DeepepManager._pad_routing_map
    l. 1393-1422 and get_permuted_hidden_states_by_experts l. 1433-1436 (self.dispatched_routing_map);
    megatron/core/fusions/fused_pad_routing_map.py fused_pad_routing_map l. 74-100 (input_map =
    routing_map.transpose(0, 1).contiguous().int(); output_map = torch.empty_like(input_map), int32 [E, tokens];
    returned transposed: a new int32 tensor); moe_utils.py pad_routing_map l. 731-763 (the unfused padding writes
    into the bool map in place: no new tensor kept); megatron/core/config.py set_experimental_flag /
    is_experimental_enabled, megatron/training/global_vars.py l. 168-169 (--enable-experimental sets it),
    arguments.py l. 3643. Not priced: the two int32 [E, tokens] tensors' transient in the padding kernel, and the
    padding tokens the all-to-all carries (each expert's count rounded up to the fp8 / fp4 alignment,
    moe_utils.get_align_size_for_quantization: under its alignment a rank's rows, as the GroupedMLP's own padding
    would add them).
[18] DeepSpeed-MoE's dense gating (stack moe_gating dense_einsum; gating_capacity, gating_einsum_rows,
    gating_bytes, gating_saved_bytes, gating_transient_bytes): microsoft/DeepSpeed @38327e07
    deepspeed/moe/sharded_moe.py, as Megatron-DeepSpeed @f4157bea megatron/model/transformer.py l. 1066-1083 builds it
    (MoE(hidden_size, ParallelMLP(...), num_experts, ep_size, k=--topk, capacity_factor, min_capacity, drop_tokens)).
    S = T / rep_div tokens (the layer's [s, b, h] input on the rank, sequence-sharded under SP, whole on every TP
    rank without it: MOELayer.forward l. 597, input[0].reshape(-1, d_model)), E experts, k = top_k, M = h.
    TopKGate.forward (l. 499-533): input.float() (l. 507) (a fp32 [S, M] copy, which F.linear saves for the gate weight's
    gradient), fp32 logits; top1gating (l. 183-287, k 1), top2gating (l. 290-371, k 2), topkgating (l. 374-446, k > 2),
    every tensor fp32 ("everything is in fp32 in this function"). Capacity (_capacity l. 161-170):
    C = max(ceil(S / E x cf'), min_capacity), cf' = cf x k for top-2 and top-k (l. 331, 406), cf for top-1 (k = 1):
    C = max(ceil(S k cf / E), min_capacity) in every case (min_capacity: Megatron-DeepSpeed's --moe-min-capacity,
    default 4, megatron/arguments.py l. 917; the stack's figure). The [S, E, C] tensors: top-1, the fp32
    combine_weights = einsum("se,sc->sec", gates, one_hot(locations1_s, C).float()) (l. 283), its .bool()
    dispatch_mask; top-2, two such fp32 products and their sum (l. 366-369), then .bool(); top-k, one_hot of the
    [S, E] locations (an int64 [S, E, C], .float(), l. 440) times the gates (l. 442), then .bool(). MOELayer.forward
    (l. 586-678): dispatched_input = einsum("sec,sm->ecm", dispatch_mask.type_as(input), input) (l. 610, a bf16 copy
    of the mask, USE_EINSUM True l. 113: torch.einsum, one GEMM [E C, S] x [S, M]), the all-to-all, the experts
    (deepspeed/moe/experts.py Experts.forward: inputs.chunk(num_local_experts, dim=1), one ParallelMLP call per
    local expert, torch.cat of the outputs: per-expert GEMMs, as gemms() prices them, and a cat), the all-to-all
    back, with TP > 1 gather_tokens to the whole C on every TP rank (l. 659-664), and combined_output =
    einsum("sec,ecm->sm", combine_weights.type_as(input), expert_output) (l. 669, a bf16 copy of the weights; one
    GEMM [S, E C] x [E C, M]).
  GEMMs (gating_einsum_rows; 2 S E C M FLOPs each; torch.einsum contracts through at::bmm in sumproduct_pair,
    aten/src/ATen/native/Linear.cpp): forward the dispatch [E C, M, K = S] and the combine [S, M, K = E C]; backward
    (each operand's gradient a GEMM, computed only for an operand that needs one; the bool mask's copy needs none)
    the dispatch's input gradient [S, M, K = E C], the combine's weight gradient [S, E C, K = M] and expert-output
    gradient [E C, M, K = S]: 2 forward, 3 backward. What autograd saves: mm / bmm / mul keep an operand only where
    the other needs a gradient (the generated guards `if (grad_fn->should_compute_output(1)) grad_fn->self_ =
    SavedVariable(self)`, pytorch/pytorch issue 97575 for MmBackward0, PR 16583 for bmm and mul): the dispatch keeps
    the mask's copy, not its input; the combine both operands.
  HBM bytes a token of S (gating_bytes; the [S, E] and [S] tensors of the gating left out, below):
    forward: input.float() read 2M write 4M (6M); per location one-hot [S, C] (top-1 one, top-2 two) int64 write 8C,
    .float() read 8C write 4C, the outer product read 4C write 4EC (24C + 4EC each); top-2's sum read 8EC write 4EC;
    top-k's int64 one-hot [S, E, C] write 8EC, .float() read 8EC write 4EC, the product read 4EC write 4EC; .bool()
    read 4EC write EC; MOELayer's two casts, the mask read EC write 2EC and the weights read 4EC write 2EC:
      top-1 6M + 24C + 18EC; top-2 6M + 48C + 34EC; top-k 6M + 42EC;
    backward: the weights' cast back read 2EC write 4EC; each product's gradient for the gates (torch.einsum with
    no summed index is at::mul, aten/src/ATen/native/Linear.cpp sumproduct_pair; mul's backward grad x other, then
    sum_to_size): read 4EC + 4C (top-k: 4EC + 4EC), write 4EC, read it 4EC; the fp32 input's gradient (written 4M
    by the gate's dgrad) cast to bf16, read 4M write 2M: top-1 10M + 4C + 18EC; top-2 10M + 8C + 30EC;
    top-k 10M + 22EC;
    and the experts' torch.cat, read 2 write 2 per element of the rank's expert output (rows x M).
  Saved for the backward, a token of S (gating_saved_bytes): the fp32 input 4M (F.linear's input, the gate weight
    needing its gradient); the fp32 location one-hots the outer products keep for the gates' gradient, top-1 4C,
    top-2 8C, top-k the [S, E, C] 4EC; the dispatch's bf16 mask 2EC and the combine's bf16 weights 2EC (each
    einsum's operand for the other's gradient); and per micro-batch the combine's expert_output [E, C, M] bf16,
    2 E C M, the whole C on every TP rank (it replaces tensors()' moe_expert_out); the gates' fp32 softmax output
    is tensors()' moe_router_logits (4E).
  Forward transients beyond those (gating_transient_bytes, one layer's forward): top-1 the fp32 weights and the
    bool mask, 5EC a token, held through MOELayer.forward; top-2 its two fp32 products and their sum at once,
    12EC; top-k the int64 one-hot beside its fp32 copy (saved), 8EC. Backward: the weights' gradient in bf16 and
    its fp32 cast and a product's fp32 gradient, 10EC.
  Not counted: the [S, E] fp32 / int64 tensors (gates, masks, cumsums, the normalised gates: some tens of bytes
    x E a token, under 2% of the [S, E, C] ones at C >= 8), the gate weight's fp32 copy ([E, M] a layer), the
    TP drop / gather copies (the TP all-gathers of [E, C / tp, M] themselves are step.py gating_gather's), the host's wait at _capacity's comparison (l. 168), the chunked experts' input copies. Under
    Megatron's sequence parallelism the gate's input is already the rank's 1 / tp of the sequence, yet MOELayer
    narrows the capacity dimension to 1 / tp before the all-to-all as if the tokens were duplicated over TP
    (sharded_moe.py l. 626, deepspeed/moe/mappings.py _drop_tokens l. 56-68): the fork breaks there (start-up rule
    78 DEEPSPEED_MOE_SP, planner/startup.py), so a plan priced here has SP off at tp > 1 and every TP rank gates the
    micro-batch's T tokens (the pricing below still takes T / rep_div, which is T there).
[8] NVIDIA Megatron-LM @d98e8a64: megatron/core/transformer/moe/moe_utils.py permute
    (fused=False: bool map transpose, flat argsort, index_select), unpermute (zeros +
    scatter_add_), sort_chunks_by_idxs (split + cat), topk_routing_with_score_function
    (fused=False: score function, torch.topk, scatter into zeros); token_dispatcher.py
    MoEAlltoAllTokenDispatcher (permute with probs, unpermute without); transformer_config.py
    l. 941-947 (moe_permute_fusion, moe_router_fusion default False).
[19] HybridEP's non-blocking dispatch (Ctx.capacity_rows, stacks.capacity_rows; job moe_hybridep_capacity_factor f,
    stack runs.hybridep_non_blocking): pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/distributed/deepep/
    hybridep.py _dispatch_impl l. 151-174 hands DeepEP's dispatch_with_permute num_permuted_tokens =
    _num_permuted_tokens_for_non_blocking (l. 80-109: int(n x ep x min(E / ep, k) x f), pad_multiple None from
    model_registry, models/common/config_utils.py make_token_dispatcher_config l. 402-409), the rows of the permuted
    expert input it returns (_dispatch_fake l. 207-218: hidden [out_tokens, h], fp32 scores [out_tokens]);
    deepseek-ai/DeepEP hybrid-ep @94a9f8f deep_ep/hybrid_ep_buffer.py dispatch_with_permute l. 351-357 (non_blocking:
    num_permuted_tokens given, no host synchronisation) -- torchtitan pins @f725d2969 (.ci/docker/common/
    install_deepep.sh), DeepEP PR #699 merged on hybrid-ep@94a9f8f, which changes setup.py's C++ standard flag and adds
    a build test only (torchtitan c91448d20 "Bump DeepEP HybridEP pin": "the current hybrid-ep branch head and
    includes DeepEP PR #699"). models/common/moe.py GroupedExperts.forward l. 81-108 then runs its three
    torch._grouped_mm over those rows with offsets the cumulative routed counts: the gate / up outputs, the SiLU and
    product (the activation output) and the down output have as many rows, and so does the product with the
    permuted scores before the combine (hybridep.py combine_tokens l. 535-540). Held (tensors): moe_expert_in,
    moe_expert_gate_up, moe_expert_act_out and moe_expert_out at ep x min(E / ep, k) x f rows a local token
    (capacity_scale: those over local_rows), under the stack's recompute rules as the rows routed (selective AC saves
    the hybridep dispatch and combine ops' outputs, activation_checkpoint.py _get_default_save_ops l. 61-70).
    Computed (gemms): the rows routed, unchanged: torch.nn.functional.grouped_mm ignores the rows beyond offs[-1]
    (docs.pytorch.org/docs/main/generated/torch.nn.functional.grouped_mm.html, offs: "elements beyond offs[-1] are
    ignored"); the gated activation's memory-bound kernels (SiLU, the product: elementwise_bytes) run over every row
    of their tensors, the capacity rows. Not priced (named): the product with the permuted scores and the scores'
    bf16 copy (hybridep.py l. 515-516, 535-536) over those rows (their time). What the ops save for the backward and
    the handle they keep: [20].
[20] What torchtitan 0.3's HybridEP path saves for the backward (hybridep_torch_saved_bytes; stack
    memory.hybridep_dispatch_saves), read at pytorch/torchtitan release/0.3 @4f9e9a47d. The router
    (models/common/moe.py TokenChoiceTopKRouter.forward l. 297-341) computes its scores in fp32 (the gate under fp32
    autocast, l. 298-308), takes `_, topk_expert_ids = torch.topk(scores_for_choice, k)` (l. 318-320: the values
    dropped) and `topk_scores = scores.gather(-1, topk_expert_ids)` (l. 324: GatherBackward0 keeps the int64 [n, k]
    index). The HybridEP dispatch (distributed/deepep/hybridep.py) saves the same tensor: dispatch_tokens passes
    selected_experts_indices.contiguous() (l. 491, already contiguous: no copy) and _dispatch_setup_context
    (l. 357-364) ctx.save_for_backward(topk_idx): 8 k B a local token, one tensor. The dispatch op returns the permuted
    scores in fp32, one a permuted row (hybridep.py l. 165-190, _dispatch_fake l. 219: [out_tokens] float32, out_tokens
    the capacity rows [19] or, blocking, the rows routed); dispatch_tokens casts them to the hidden states' bf16
    (l. 515-516; ToCopyBackward0 saves nothing, the fp32 tensor is freed) and combine_tokens multiplies the experts'
    output by them (l. 535-536: MulBackward0 keeps both factors, the output rows are tensors()' moe_expert_out and the
    bf16 scores 2 B a row). Without recompute: 8 k B a local token + 2 B a permuted row. Op-level selective AC
    (distributed/activation_checkpoint.py _get_default_save_ops l. 31-70: torch.ops.aten.topk.default l. 51-53 and
    hybridep.dispatch l. 67-68 are MUST_SAVE, their outputs cached whole; gather and mul are not, their saves are
    dropped and re-made in the backward's re-run): topk's fp32 values and int64 indices, 12 k B a local token, and the
    dispatch's fp32 scores, 4 B a permuted row, kept; the bf16 copy and its product re-made in the re-run (2 B a row,
    one layer's). Full AC keeps none (the re-run layer re-makes the no-recompute set). n = T / rep_div local tokens,
    as [19]. The dispatch handle (DeepEP's dispatch_with_permute tuple, the one Megatron's fused_a2a.py l. 425 gets:
    hybridep_saved_bytes [15]) is a Python attribute of the dispatch and combine nodes' ctx (l. 361, 379), not a saved
    tensor, so the checkpoint's hooks never drop it: kept under every mode, full AC's re-run layers too (memory.py
    hybridep_torch_saves). The router's part (the index, topk's cached outputs, route_norm's division) is [21]'s, on
    every dispatcher. Not priced: the re-run dispatch's second handle (a transient of the layer's recompute).
[21] What torchtitan's router saves for the backward beyond the layer's fp32 scores (torch_router_saved_bytes; stack
    memory.router_topk_saves), the same TokenChoiceTopKRouter on every dispatcher (alltoall, DeepEP, HybridEP) and at
    both commits: pytorch/torchtitan @e347b1e5e torchtitan/models/moe/moe.py TokenChoiceTopKRouter.forward l. 311-355
    (built by MoE l. 432-443 and DeepEPMoE, moe_deepep.py l. 51-53), release/0.3 @4f9e9a47d
    torchtitan/models/common/moe.py l. 297-341 (MoE.forward l. 422-426, every token dispatcher). The softmax / sigmoid
    saves its fp32 result [n, E] (the generic 4 E, moe_router_logits); `_, ids = torch.topk(scores_for_choice, k)`
    (main l. 326-328, 0.3 l. 318-320) drops the values, so TopkBackward0 dies with them after the forward;
    `top_scores = scores.gather(dim=1, index=ids)` (main l. 333, 0.3 l. 324): GatherBackward0 keeps the int64 [n, k]
    index (its `self` is the softmax's saved result, no new bytes): 8 k B a local token. Where the model's router
    renormalises (MoESpec.route_norm; torchtitan MoEArgs route_norm: DeepSeek-V3 671B, the Qwen3 MoE and gpt-oss
    flavors), `denominator = top_scores.sum(-1, keepdim=True) + 1e-20; top_scores = top_scores / denominator` (main
    l. 342-344, 0.3 l. 333-335): DivBackward0 keeps both fp32 operands, the gathered [n, k] scores and the [n, 1] sum,
    4 k + 4 B a local token (sum and the scalar add save no tensor; `* route_scale`, a Python number, saves none). So
    without recompute 8 k (+ 4 k + 4) B a local token, n = T / rep_div. Full AC keeps none, the layer's re-run
    re-makes them (its buffer). Op-level selective AC caches the outputs of the save list's ops and re-runs the rest
    (torch.utils.checkpoint create_selective_checkpoint_contexts): at main the list (e.g.
    models/deepseek_v3/infra/parallelize.py _op_sac_save_list l. 33-48) holds no topk, so nothing of the router's is
    kept and the re-run re-makes all of it ('recompute_topk'); at 0.3 aten.topk is MUST_SAVE
    (distributed/activation_checkpoint.py _get_default_save_ops l. 51-53), its fp32 values and int64 indices cached
    whole, 12 k B a local token, and the re-run's gather keeps the cached index (no new bytes) while its division
    re-makes 4 k + 4 B ('cache_topk'). The HybridEP dispatch's saved index is the same tensor ([20]).
[22] What torchtitan's standard reorder and combine save for the backward beyond the generic table (torch_reorder_saved_bytes;
    stack memory.reorder_combine_saves), on the plans whose dispatcher is the standard all-to-all (EP 1 too; DeepEP and
    HybridEP run their own: main's DeepEPMoE.forward, moe_deepep.py l. 48-81, skips the reorderer; 0.3's DeepEP and
    HybridEP dispatchers, models/common/token_dispatcher.py l. 785, 891). n = T / rep_div local tokens (the router's
    input, as [21]), k = top_k, h the hidden size; the reorder's rows are n k (every token's k copies, before the
    dispatch's all-to-all and after the combine's).
    pytorch/torchtitan @e347b1e5e torchtitan/models/moe/moe.py: TokenReorderer.forward l. 408-412 `argsort(ids.view(-1))`
    (int64 [n k]), kept by `top_scores.view(-1)[argsort]`'s IndexBackward0 (where its output is used) and by
    MoE.forward l. 537's `routed_output_unsorted[argsort] = routed_output` (IndexPutBackward0 keeps the index, not the
    values); l. 515 `x[argsort // top_k]`: a second int64 [n k] tensor, kept by IndexBackward0 (x needs grad): 16 k B a
    token. The scores: flavors with MoEArgs score_before_experts true (l. 517-521, Qwen3, Llama 4) compute
    `routed_input.to(float32) * scores_sorted.reshape(-1, 1)`: MulBackward0 keeps the fp32 input rows (4 h B a row; the
    ToCopyBackward0 on either side keeps nothing) and the fp32 sorted scores (4 B a row), and the output side's
    index_put_ and sum(dim=1) (l. 551) keep no expert row; false (l. 541-549, DeepSeek-V3, gpt-oss)
    `torch.bmm(top_scores.reshape(-1, 1, k), routed_output_unsorted.float())`: BmmBackward0 keeps the fp32 [n, k, h]
    expert outputs (4 h B a row) and the fp32 [n, 1, k] scores (4 B a row). Both flavors keep 4 h + 4 B a row: the
    place differs, not the bytes, so no model field is read.
    release/0.3 @4f9e9a47d torchtitan/models/common/token_dispatcher.py LocalTokenDispatcher._local_reorder l. 93-100 (the
    AllToAll and TorchAO dispatchers call it, l. 419, 678): the argsort kept by the scores' IndexBackward0 (l. 96-98),
    its `// top_k` copy by `x_TD[...]`'s IndexBackward0 (l. 100) and by deterministic_scatter_add's saved index
    (torchtitan/ops/scatter_add.py l. 36-42, an expand view: no new bytes): 16 k B a token; combine l. 616-619 (EP 1:
    l. 158-161) `routed_output_RD.to(float32) * scores_sorted.reshape(-1, 1)`: the fp32 expert rows and scores, 4 h +
    4 B a row, whatever the flavor (0.3 has no score_before_experts).
    No bf16 copy of the experts' output rows is kept at either commit (the grouped GEMMs keep their inputs); the generic
    table's moe_expert_out (2 h B a routed row, tensors()) stands for the fp32 copy's first half, so beyond it: 2 h + 4 B a
    row over n k rows, + 16 k B a token. Without recompute n k (2 h + 4) + 16 k n. Op-level SAC keeps none: argsort,
    floor_divide, index, index_put_, mul, bmm and _to_copy are on neither save list (main: models/qwen3/infra/
    parallelize.py _op_sac_save_list l. 39-54, deepseek_v3 l. 33-48, llama4 l. 51-66, aten.mm.default matched exactly,
    not aten.bmm; 0.3: distributed/activation_checkpoint.py _get_default_save_ops l. 31-94, torch's
    get_default_op_list compute_intensive_ops holds bmm, which 0.3's combine does not run), so the re-run layer
    re-makes the no-recompute set; full AC likewise.
[23] The EP permutation index torchtitan's standard all-to-all path keeps for the backward (torch_permute_index_bytes;
    stack memory.ep_permute_index), on the plans whose dispatcher is the standard all-to-all. After the dispatch
    all-to-all the rank's R received rows (R = T x local_rows, as moe_expert_in) are reordered from rank-major to
    expert-major by an index gather `x[permuted_indices, :]` and put back by `out[permuted_indices, :] = y` before
    the combine: IndexBackward0 and IndexPutBackward0 both keep the index (one tensor, not the rows), so one index
    tensor a MoE layer and micro-batch lives until the layer's backward.
    release/0.3 @4f9e9a47d ('int64'): torchtitan/models/common/token_dispatcher.py AllToAllTokenDispatcher._permute
    l. 501-553: permuted_indices = input_starts[seg_ids] + torch.arange(seg_ids.shape[0]) - output_starts[seg_ids]
    (l. 541-545), int64 (torch.arange's default dtype; the counts are int64, MoE.forward l. 437 routing_map.sum),
    one a received row, no padding (total = routed_input_RD.shape[0], l. 518): 8 B x R. Kept by
    routed_input_RD[permuted_indices, :] (l. 550) and _unpermute's index_put_ (l. 555-559). Only with EP > 1: at
    EP 1 dispatch and combine fall back to LocalTokenDispatcher (l. 403-410, 579-585), which runs no _permute.
    main @e347b1e5e ('padded_int32'): torchtitan/models/moe/utils.py _permute l. 42-59 builds it by
    kernels.py generate_permute_indices (fill_indices_wrapper l. 80-82: torch.full((max_len,), -1,
    dtype=torch.int32)) at max_len = padded_max_len = round_up(R + E_l A, A) (l. 44-45; E_l = E / ep local experts,
    A = ctx.group_align, [14]; the round-up, under A entries, left out as in padded_rows): 4 B x R (R + E_l A) / R;
    x[permuted_indices, :] (l. 57) and _unpermute's index_put_ (l. 62-66) keep it. With EP through
    distributed/expert_parallel.py ExpertParallel._token_dispatch l. 157-164, at EP 1 through
    models/moe/moe.py GroupedExperts.forward l. 166-178 indices_padding_wrapper: every all-to-all plan.
    Under op-level SAC nothing of it is kept: the ops that build it (cumsum, repeat_interleave, arange, index; main's
    torch.full and the Triton fill) are on neither save list (0.3 distributed/activation_checkpoint.py
    _get_default_save_ops l. 31-94; main models/<code>/infra/parallelize.py _op_sac_save_list), so the re-run
    layer re-makes it; full AC likewise. The dispatch and combine all-to-alls' own outputs are priced as
    moe_expert_in / moe_expert_out (memory.selective_drops, plan.sac_reruns_exchange).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ep_buffers import DEEPEP_SMS
from .common import ACT_BYTES, BlockParams, shapes
from .mlp import mlp_cast_elements, mlp_elementwise_bytes

ROUTER_LOGIT_BYTES = 4.0  # fp32 router logits / probabilities kept for the backward [2]
PROB_BYTES = 4.0  # fp32 router probabilities and scores (TE router.py [7]: "scores" and "intermediate_output" FP32)
INDEX_BYTES = 4.0  # int32 row-id maps of the fused permutation kernels [7]
PERMUTE_ACT_BYTES = 2.0  # bf16 hidden states permuted and dispatched (Megatron dispatches bf16 unless fp8 dispatch [6])
INT64_INDEX_BYTES = 8.0  # torch.argsort / torch.topk indices are int64 (the unfused paths [8])
# torchtitan main's permutation index: kernels.py @e347b1e5e fill_indices_wrapper l. 80-82 torch.full(..., dtype=torch.int32) [23]
INT32_INDEX_BYTES = 4.0
BOOL_BYTES = 1.0  # torch.bool routing map
LOGIT_BYTES = 2.0  # the router's logits in the input's dtype, bf16, without --moe-router-dtype [10] (router.py l. 105-111)
# the router's logits by --moe-router-dtype (Job.moe_router_dtype; None: the input's dtype, bf16) [10]: router.py
# @d98e8a64 l. 105-111 (torch.float32 / torch.float64 for 'fp32' / 'fp64'), moe_utils.py RouterGatingLinearFunction
# l. 1357-1400 (the gating GEMM's output in that dtype)
ROUTER_DTYPE_BYTES = {None: LOGIT_BYTES, "fp32": 4.0, "fp64": 8.0}
EXPERT_GEMMS = ("expert_up", "expert_down")  # the routed experts' grouped GEMM rows (MoEMLP.gemms)
DEEPEP_NVL_PEERS = 8.0  # DeepEP @dd758caf LEGACY_NUM_MAX_NVL_PEERS: its intranode kernels' limit (buffer.hpp l. 121) [11]
DEEPEP_SOURCE_META_BYTES = 8.0  # sizeof(SourceMeta), two ints (csrc/kernels/legacy/internode.cu l. 22-45) [11]
A2A_PER_LAYER = 4.0  # dispatch + combine forward, and their gradients backward [2]
# DeepEP's channels, config.num_sms / 2 (csrc/deep_ep.cpp @567632d l. 490, 954) at Megatron's 20 SMs (ep_buffers.DEEPEP_SMS) [11]
DEEPEP_CHANNELS = DEEPEP_SMS / 2.0
# Hybrid-EP's preprocessing chunk, NUM_OF_TOKENS_PER_CHUNK_PREPROCESSING_API's default (csrc/hybrid_ep/config.cuh @94a9f8f
# l. 418-420): the dense_chunk_layout has one int32 per chunk and rank of the group [15]
HYBRIDEP_CHUNK_TOKENS = 64.0


@dataclass(frozen=True)
class MoEMLP:
    h: int
    num_experts: int
    top_k: int
    fe: int  # one routed expert's width
    num_shared: int
    fs: int  # one shared expert's width
    shared_gate: bool
    router_bias: int  # bias vectors of E on the router: expert_score_bias + router_linear_bias (schema.MoESpec)
    gated: bool
    norm: int
    bias: bool = False
    dropout: bool = False
    dense_f: int = 0  # the model's dense MLP width (korthikanti reference only)
    expert_groups: int = 0  # group-limited routing (schema.MoESpec; 0: none)
    groups_per_token: int = 0
    clamp: bool = False  # the gated activation's inputs are clamped (ModelSpec.activation_clamp)
    sigmoid: bool = False  # the router's score function is a sigmoid (MoESpec.router), else a softmax
    score_bias: bool = False  # the expert score bias alone (schema.MoESpec.expert_score_bias: aux-loss-free balancing)
    route_norm: bool = False  # a token's k routing weights divided by their sum (schema.MoESpec.route_norm)

    kind = "mlp"
    has_core = False
    selective_core = False
    cp_overlaps_core = False
    # the experts' GEMMs read the dispatcher's rows (no SP gather of their own); the shared experts' fc1 gathers T h
    # under SP where the stack runs their own pair (step.shared_experts_pair: the pair and fc1's backward re-gather,
    # step.py [37], [35])
    sp_input_gemm = None

    @property
    def label(self) -> str:
        shared = f" + {self.num_shared} shared" if self.num_shared else ""
        return f"moe({self.num_experts} x {self.fe}, top-{self.top_k}{shared})"

    @property
    def per_mat(self) -> int:
        return 3 if self.gated else 2

    @property
    def expert_params(self) -> int:
        """One routed expert's matrices (+ biases)."""
        b = ((2 * self.fe if self.gated else self.fe) + self.h) if self.bias else 0
        return self.per_mat * self.h * self.fe + b

    @property
    def shared_params(self) -> int:
        """All shared experts of one layer, with the shared-expert gate."""
        return self.num_shared * self.per_mat * self.h * self.fs + (self.h if self.shared_gate else 0)

    @property
    def router_params(self) -> int:
        return self.h * self.num_experts + self.num_experts * int(self.router_bias)

    @property
    def score_bias_params(self) -> int:
        """The router's expert score bias, E (DeepSeek-V3's e_score_correction_bias): a buffer (common.py [sb])."""
        return self.num_experts if self.score_bias else 0

    def params(self) -> BlockParams:
        """The router's linear (+ its linear bias, gpt-oss) replicated, its score bias a buffer apart (common.py [sb]);
        the routed experts with their biases (expert_bias: 2 f_e (f_e) + h each, h of them the output bias, [rb] [qb]).
        The shared experts have no biases: Megatron-LM @d98e8a64 megatron/core/transformer/moe/shared_experts.py
        l. 124-125 asserts add_bias_linear False, torchtitan's FeedForward has none (pytorch/torchtitan @e347b1e5e
        torchtitan/models/moe/moe.py l. 63-65, bias=False), and no catalogued model has a
        shared expert with biases."""
        sb = self.score_bias_params
        eb = ((2 * self.fe if self.gated else self.fe) + self.h) if self.bias else 0
        # the router's weight (E x h) is 2-D: Muon's (common.py [mu]); the shared experts' gate is in split_linear
        return BlockParams(split=self.shared_params, replicated=self.router_params - sb + self.norm,
                           rep_matrix=self.h * self.num_experts,
                           expert=self.num_experts * self.expert_params, active_expert=self.top_k * self.expert_params,
                           expert_row_bias=self.num_experts * self.h if self.bias else 0,
                           expert_bias=self.num_experts * eb, score_bias=sb)

    def muon_matrices(self) -> tuple:
        """Muon's whole matrices (common.py [ns]): the router's E x h; the shared experts' one MLP (Megatron's
        SharedExpertMLP: fc1 of (2) n_s f_s x h, fc2 h x n_s f_s) and its gate (1 x h); each routed expert's fc1 and fc2
        (TE GroupedLinear weight{i}, 2-D each; expert_tp, the expert tensor-parallel group: optimizer/__init__.py
        @d98e8a64 l. 788-789); each fc2 listed transposed (split on its input: [ns])."""
        h, g = self.h, (2 if self.gated else 1)
        s = self.num_shared * self.fs
        shared = ((g * s, h, 1, "split"), (s, h, 1, "split")) if s else ()
        return (((self.num_experts, h, 1, "rep"),) + shared + (((1, h, 1, "rep"),) if self.shared_gate else ())
                + ((g * self.fe, h, self.num_experts, "expert"), (self.fe, h, self.num_experts, "expert")))

    # ------------------------------------------------------------------ tokens
    def token_copies(self, ctx):
        """Token copies per token that reach the experts on the busiest rank: top_k x L (ctx.cf, the
        busiest EP rank's routed tokens / mean: planner/imbalance.py rank_load)."""
        return self.top_k * ctx.cf

    def padded_rows(self, ctx):
        """The rank's permuted expert rows held over its routed rows: (R + E_l A) / R, R = T x local_rows,
        E_l = E / ep local experts, A = ctx.group_align (torchtitan's _permute buffer [14]); 1 where A = 0."""
        return 1.0 + (self.num_experts / ctx.ep) * ctx.group_align / (ctx.T * self.local_rows(ctx))

    def capacity_scale(self, ctx):
        """The rows one micro-batch's expert tensors hold over the rows routed to the rank: where the dispatcher
        allocates Ctx.capacity_rows a local token (HybridEP's non-blocking dispatch [19]), those rows of the rank's
        T / rep_div x gather local tokens over local_rows; 1 elsewhere."""
        cap = np.asarray(ctx.capacity_rows, dtype=np.float64)
        held = cap * ctx.gather / ctx.rep_div
        return np.where(cap > 0, held / np.where(cap > 0, self.local_rows(ctx), 1.0), 1.0)

    def local_rows(self, ctx):
        """Routed rows per token on this rank (the expert inputs it receives, as moe_expert_in):
        token_copies x ctx.expert_scale x etp / tp."""
        return self.token_copies(ctx) * ctx.expert_scale * ctx.etp / ctx.tp

    def token_width(self, ctx):
        """MLP width per token as a TP-split width: top_k c f_e x ctx.expert_scale (the rank's
        expert rows over etp, not tp) + s f_s."""
        return self.token_copies(ctx) * self.fe * ctx.expert_scale + self.num_shared * self.fs

    @property
    def tp_pairs(self):
        """The MLP's TP pair is the expert-TP group's all-gather / reduce-scatter of the
        dispatched rows (step.tp_comm prices it over the etp ranks: planner/moe.py)."""
        return ("moe",)

    def expert_tokens(self, ctx):
        """t_e, tokens per local expert on the busiest rank: the etp ep ranks of the folded
        group each route T / rep_div x top_k c tokens over E experts (the expert-TP group
        gathers `ctx.gather` ranks' rows): T / rep_div x gather x ep x top_k c / E; with etp =
        tp under SP, T top_k c ep / E."""
        return ctx.T / ctx.rep_div * ctx.gather * self.token_copies(ctx) * ctx.ep / self.num_experts

    # ------------------------------------------------------------------ compute
    def gemms(self, ctx):
        """The router [T / rep_div, E, h] (its local tokens); the shared experts as one MLP of width s f_s (split over tp);
        E/ep local experts of t_e tokens each (expert_tokens), [t_e, f1_e/etp, h] and
        [t_e, h, f_e/etp], on the busiest EP rank."""
        T, tp, ep, h, etp = ctx.T, ctx.tp, ctx.ep, self.h, ctx.etp
        fs = self.num_shared * self.fs
        g1 = 2.0 if self.gated else 1.0
        # each local expert's token group padded to a multiple of ctx.group_align rows: (A - 1) / 2 more on average [14]
        t_e = self.expert_tokens(ctx) + np.maximum(ctx.group_align - 1.0, 0.0) / 2.0
        local = self.num_experts / ep
        # the router's input is the layer's local tokens, sequence-sharded under SP (T / rep_div: Megatron-LM @d98e8a64
        # moe_layer.py l. 451 router(hidden_states) on the [s / tp, b, h] input, l. 636-640 MoE with TP needs SP)
        rows = [("router", T / ctx.rep_div, self.num_experts, h, 1.0)]
        if fs:
            rows += [("shared_up", T, g1 * fs / tp, h, 1.0), ("shared_down", T, h, fs / tp, 1.0)]
        rows += [("expert_up", t_e, g1 * self.fe / etp, h, local), ("expert_down", t_e, h, self.fe / etp, local)]
        return shapes(rows)

    def projection_shares(self, ctx) -> dict:
        """gate/up/down of the shared and routed experts' GEMMs (selective recompute of projections)."""
        g = 0.5 if self.gated else 0.0
        out = {"gate": [("expert_up", g)], "up": [("expert_up", 1.0 - g)], "down": [("expert_down", 1.0)]}
        if self.num_shared:
            out["gate"].append(("shared_up", g))
            out["up"].append(("shared_up", 1.0 - g))
            out["down"].append(("shared_down", 1.0))
        return out

    def elementwise_bytes(self, ctx, kb, sfx):
        """As a dense MLP at the per-token width (mlp.mlp_elementwise_bytes), plus two passes over
        the routed experts' rows that a stack may run outside its fused kernels (stack kernel
        bytes, 0 where fused; the rank's rows per token top_k c x expert_scale x etp / tp):
          activation_clamp  per element of a row's gate+up output (2 f_e / etp) of a model with
                            activation_clamp;
          expert_bias       per element of a row's output (h) of a model with linear biases.
        Megatron-Core's TEGroupedMLP (experts.py @0d8e0714) runs both unfused: the clamp as
        chunk, two clamps and a cat before the fused weighted activation (fused_bias_geglu.py
        weighted_bias_quick_geglu_impl), the output bias, which the router probability scales,
        as a per-expert loop t + b x p in fp32, a cat and a cast back (_apply_bias; linear_fc2
        is built with skip_bias_add=True); stack_db/megatron.yaml counts their bytes."""
        # the routed part over the rows the expert tensors hold (capacity_scale: HybridEP's capacity rows [19])
        width = self.token_width(ctx) + self.token_copies(ctx) * self.fe * ctx.expert_scale * (self.capacity_scale(ctx) - 1.0)
        return mlp_elementwise_bytes(self, width, ctx, kb, sfx) + self.unfused_bytes(ctx, kb, sfx)

    def unfused_bytes(self, ctx, kb, sfx):
        """The two passes of elementwise_bytes' docstring (0 where the stack fuses them), and
        where the job turns the bias-activation fusion off (kb unfused_activation) the unfused
        activation: the routed experts' (experts.py bias_act_func: a gated one's unfused
        kernels beyond the fused one's, mlp_activation_gated_unfused - mlp_activation_gated,
        and the routing probability multiplied in fp32 and cast back, expert_probs_unfused, per
        element of a row's activation output f_e / etp) and the shared experts' (an MLP's)."""
        rows = self.local_rows(ctx)  # routed rows per token on this rank
        clamp = kb["activation_clamp" + sfx] * (2.0 * self.fe / ctx.etp if self.gated else self.fe / ctx.etp) \
            * (1.0 if self.clamp else 0.0)
        bias = kb["expert_bias" + sfx] * self.h * (1.0 if self.bias else 0.0)
        glu = (1.0 if self.gated else 0.0) * (kb["mlp_activation_gated_unfused" + sfx] - kb["mlp_activation_gated" + sfx])
        act = rows * (glu + kb["expert_probs_unfused" + sfx]) * self.fe / ctx.etp + glu * self.num_shared * self.fs / ctx.tp
        return ctx.T * (rows * (clamp + bias) + kb["unfused_activation"] * act)

    def unfused_saved_bytes(self, ctx, kb, recomputes_act: bool = False):
        """Bytes one layer saves beyond its tensors() where the job turns the bias-activation
        fusion off (memory.py [uf]): a gated activation's two factors (the routed experts' and
        the shared experts', mlp_activation_gated_unfused_saved) and the routed activation's
        output the probability multiply keeps (expert_probs_unfused_saved), per element of the
        activation outputs; the routed experts' none where the policy re-runs their activation
        (recompute_modules moe_act: `recomputes_act`).
        And, fused or not, what a clamped activation's own ops keep (a gated model with
        activation_clamp; the stack's activation_clamp_saved, or activation_clamp_unfused_saved on
        the unfused path, per element of a routed row's gate+up output 2 f_e / etp): Megatron-Core's
        clamps save their inputs, views of the fc1 output, while the activation saves the clamped
        copy (stack_db/megatron.yaml sources); none where moe_act re-runs the chain."""
        gated = 1.0 if self.gated else 0.0
        rows = self.local_rows(ctx)
        kept = 0.0 if recomputes_act else 1.0
        routed = kept * rows * self.fe / ctx.etp * (
            gated * kb["mlp_activation_gated_unfused_saved"] + kb["expert_probs_unfused_saved"])
        shared = gated * kb["mlp_activation_gated_unfused_saved"] * self.num_shared * self.fs / ctx.tp
        unf = kb["unfused_activation"]
        clamp = (1.0 if self.clamp and self.gated else 0.0) * kept * rows * 2.0 * self.fe / ctx.etp * (
            (1.0 - unf) * kb["activation_clamp_saved"] + unf * kb["activation_clamp_unfused_saved"])
        return ctx.T * (unf * (routed + shared) + clamp)

    def routing_saved_bytes(self, ctx, permute_fused: bool, router: "RouterPath", dispatcher: str = "alltoall",
                            domain: float | None = None, fused_multihot: bool = False):
        """Bytes one layer saves for its backward for the router and the token permutations [9], per local
        token (n = T / rep_div): the router's, on the job's path, for every dispatcher (router_saved_terms [10]:
        they replace tensors()' generic moe_router_logits, which memory.layer_memory drops where this is
        priced); and the dispatcher's (permutation_saved_bytes; domain: the GPUs of an NVLink domain the job's
        ranks fill, comm.domain_in_use, which Hybrid-EP's handle reads; fused_multihot: DeepEP's received map built
        by Megatron's fused kernel, deepep_saved_bytes)."""
        routed = sum(router_saved_terms(self, router).values())
        return (ctx.T * routed / ctx.rep_div
                + self.permutation_saved_bytes(ctx, permute_fused, dispatcher, router.logit_bytes, domain, fused_multihot)
                + self.expert_probs_saved_bytes(ctx, dispatcher, router.logit_bytes))

    def expert_probs_saved_bytes(self, ctx, dispatcher: str, logit_bytes: float = LOGIT_BYTES):
        """The permuted probabilities the routed experts' activation saves for its backward [13], one per routed row
        the rank receives (local_rows per token, as moe_expert_in): the fused weighted SwiGLU / quick-GeGLU saves
        them beside its input (WeightedSwiGLUFunction ctx.save_for_backward(input, weights)), the unfused and TE
        activation paths' intermediate * permuted_probs (MulBackward0) keep both factors, and recompute_modules
        moe_act's CheckpointWithoutOutput keeps its inputs, the probabilities among them: kept by every mode but
        full recompute. Their dtype is the dispatcher's: alltoall and allgather pass the router's probabilities
        (the logits' dtype, logit_bytes: 2 B bf16, 4 / 8 B under --moe-router-dtype fp32 / fp64); DeepEP casts them
        to fp32 (token_dispatcher.py l. 1316-1322, "DeepEP only supports float32 probs") and back to fp64 under
        --moe-router-dtype fp64 (l. 1455-1456); HybridEP to fp32 (l. 1136-1141). deepep_ll: not priced (0)."""
        per_row = {"alltoall": logit_bytes, "allgather": logit_bytes, "hybridep": PROB_BYTES,
                   "deepep": logit_bytes if logit_bytes == ROUTER_DTYPE_BYTES["fp64"] else PROB_BYTES}.get(dispatcher, 0.0)
        return ctx.T * self.local_rows(ctx) * per_row

    def torch_router_saved_bytes(self, ctx, cache_topk: bool):
        """(no recompute, op-level selective kept, op-level selective's re-run) bytes torchtitan's router saves for
        one MoE layer and micro-batch beyond the layer's fp32 scores [21], on every dispatcher: n = T / rep_div local
        tokens, k = top_k;
          none       the gather's int64 index 8 k n (+ route_norm's fp32 operands (4 k + 4) n);
          selective  cache_topk (topk on the save list): topk's cached fp32 values and int64 indices 12 k n; else 0;
          re-run     what the selective re-run re-makes (one layer's): route_norm's operands, and the index too where
                     topk is not cached (the re-run gather keeps the cached index: no new bytes).
        Full recompute re-makes the no-recompute set (memory.py torch_router_saves)."""
        n = ctx.T / ctx.rep_div
        k = float(self.top_k)
        norm = n * (PROB_BYTES * k + PROB_BYTES) if self.route_norm else 0.0  # DivBackward0: [n, k] and [n, 1] fp32
        index = n * INT64_INDEX_BYTES * k
        if cache_topk:  # a stack setting
            return index + norm, n * (PROB_BYTES + INT64_INDEX_BYTES) * k, norm
        return index + norm, 0.0 * n, index + norm

    def torch_reorder_saved_bytes(self, ctx):
        """(no recompute, op-level selective kept, op-level selective's re-run) bytes torchtitan's standard reorder
        and combine save for one MoE layer and micro-batch beyond the generic table's tensors [22]: n = T / rep_div
        local tokens, k = top_k, n k rows;
          none       the argsort and its `// top_k` copy, int64, 16 k n; the fp32 expert rows (input rows under
                     score_before_experts, output rows else, the combine's at 0.3) beyond the generic bf16
                     moe_expert_out, 2 h a row; the fp32 sorted scores, 4 a row;
          selective  none (no op of theirs on the save list);
          re-run     the no-recompute set, re-made in the re-run layer (one layer's)."""
        n = ctx.T / ctx.rep_div
        k = float(self.top_k)
        none = n * k * (2.0 * INT64_INDEX_BYTES + (PROB_BYTES - ACT_BYTES) * self.h + PROB_BYTES)
        return none, 0.0 * n, none

    def torch_permute_index_bytes(self, ctx, mode: str):
        """(no recompute, op-level selective kept, op-level selective's re-run) bytes of the EP permutation index
        torchtitan's standard all-to-all path keeps for one MoE layer and micro-batch [23]: R = T x local_rows the
        rank's received rows;
          none       'int64' (0.3): 8 R; 'padded_int32' (main): 4 R (R + E_l A) / R (padded_rows);
          selective  none (no op that builds it on the save list);
          re-run     the no-recompute set, re-made in the re-run layer (one layer's)."""
        rows = ctx.T * self.local_rows(ctx)
        if mode == "padded_int32":  # a stack setting
            index = rows * self.padded_rows(ctx) * INT32_INDEX_BYTES
        else:
            index = rows * INT64_INDEX_BYTES
        return index, 0.0 * index, index

    def hybridep_torch_saved_bytes(self, ctx):
        """(no recompute, op-level selective, selective's re-run) bytes one MoE layer's HybridEP dispatch and combine
        save on torchtitan 0.3 beyond its tensors, one micro-batch [20] (the router's index, the same tensor as the
        dispatch's, and topk's cached outputs are torch_router_saved_bytes' [21]): R = the permuted rows the dispatch
        returns (T x local_rows x capacity_scale: the capacity rows [19], else the rows routed);
          none       the combine's bf16 permuted scores 2 R;
          selective  the dispatch's cached fp32 scores 4 R;
          re-run     the bf16 scores re-made by the selective re-run, 2 R (one layer's)."""
        rows = ctx.T * self.local_rows(ctx) * self.capacity_scale(ctx)
        return rows * PERMUTE_ACT_BYTES, rows * PROB_BYTES, rows * PERMUTE_ACT_BYTES

    def dispatcher_held_bytes(self, ctx, dispatcher: str, logit_bytes: float = LOGIT_BYTES,
                              router_fused: bool = False, padded_map: bool = False):
        """(held, held_if_recomputed): what one MoE layer's token dispatcher keeps as attributes from its forward
        until the layer's next forward [13], for one micro-batch, bytes; not per micro-batch in flight (each
        forward overwrites the last), so at the step's peak (and at the optimizer step) every MoE layer of the stage
        holds one micro-batch's. n = T / rep_div local tokens (the router's input, sequence-sharded under SP).
          held               tensors autograd does not also save:
            alltoall   self.probs, the dense [n, E] probabilities in the logits' dtype (D E, logit_bytes), and,
                       where the router is unfused, self.routing_map, the bool [n, E] map (E; the unfused router
                       builds it by zeros().int().scatter().bool(), whose backward keeps the int64 index only);
            allgather  self.local_map, the gathered bool map of the local experts [n R, E / ep], R = etp ep ranks:
                       etp E B a local token (the masked_select saves another contiguous copy, its transpose);
            deepep     _DeepepManager.token_probs, the fp32 top-k probabilities over the flex group's etp E
                       columns [n, etp k] (4 etp k; DeepEP casts them to fp32, FusedDispatch saves only its
                       handle), and dispatched_routing_map, the bool multihot map of the received tokens
                       [n_recv, E / ep] (E / ep per received token, n_recv as deepep_saved_bytes counts it).
          held_if_recomputed tensors autograd also saves for the layer's backward (priced there, per micro-batch in
                       flight), so held beyond them only where the layer's forward ran without saving, under full
                       recompute (memory.py prices them for the share of layers it re-runs): alltoall's routing map
                       where TE's fused top-k saves it (E); allgather's local_probs, the masked_select's output, the
                       per-row probabilities the activation saves (D per received row); DeepEP's token_indices, the
                       int64 top-k indices torch.topk's backward keeps (8 etp k).
            hybridep   _HybridEPManager's routing map, fp32 probabilities and dispatched probabilities
                       (hybridep_held_bytes [15]).
        Other dispatchers (deepep_ll): 0.
        padded_map (memory.padded_routing_map: Megatron's routing-map padding run by its fused Triton kernel [17]):
        the map the alltoall dispatcher keeps (self.routing_map) and DeepEP's dispatched_routing_map are the padded
        int32 copies (padded_routing_map_bytes), which replace the bool maps above: the unfused router's bool map
        and DeepEP's received multihot map are then freed after the layer's forward, and the router's map TE's fused
        top-k saves is no longer also held by the dispatcher under full recompute."""
        from .common import distinct_draws as distinct

        E, k = float(self.num_experts), float(self.top_k)
        n = ctx.T / ctx.rep_div
        pad = self.padded_routing_map_bytes(ctx, dispatcher) if padded_map else 0.0
        if dispatcher == "alltoall":  # a job setting
            mapped = 0.0 if padded_map else BOOL_BYTES * E  # a job setting
            return n * (logit_bytes * E + (0.0 if router_fused else mapped)) + pad, n * (mapped if router_fused else 0.0)
        if dispatcher == "allgather":
            return n * BOOL_BYTES * ctx.etp * E, ctx.T * self.local_rows(ctx) * logit_bytes
        if dispatcher == "deepep":
            recv = self.local_rows(ctx) * distinct(ctx.ep, k) / k  # received tokens per local token (deepep_saved_bytes)
            multihot = 0.0 if padded_map else ctx.T * recv * BOOL_BYTES * E / ctx.ep  # replaced by the padded map
            return (n * PROB_BYTES * ctx.etp * k + multihot + pad, n * INT64_INDEX_BYTES * ctx.etp * k)
        if dispatcher == "hybridep":
            return self.hybridep_held_bytes(ctx, router_fused)
        return 0.0, 0.0

    def padded_routing_map_bytes(self, ctx, dispatcher: str):
        """The padded routing map one MoE layer's dispatcher keeps from its forward to its next one [17], one
        micro-batch's, bytes, where Megatron pads the map with its fused Triton kernel (memory.padded_routing_map:
        moe_router_padding, enable_experimental and moe_permute_fusion). fused_pad_routing_map
        returns output_map, int32 [E, tokens] transposed to [tokens, E] (INDEX_BYTES a cell), a new tensor in place of
        the bool map:
          alltoall  self.routing_map over the n = T / rep_div local tokens and all E experts: 4 E B a local token
                    (DeepSeek-V3, E 256, 4,096 tokens: 4 MiB a layer);
          deepep    _DeepepManager.dispatched_routing_map over the tokens the rank receives and its E / ep local
                    experts: 4 E / ep B a received token (received tokens as deepep_saved_bytes counts them), where
                    every expert's padded count fits the received tokens (token_dispatcher.py l. 1407-1413 falls back
                    to the GroupedMLP's own padding otherwise: a data-dependent case, not priced).
        Other dispatchers 0: allgather is refused with the padding (plan._router_padding_ok), and Hybrid-EP pads in its
        own dispatch kernel whatever the flag (token_dispatcher.py _HybridEPManager.dispatch l. 1142-1162:
        pad_multiple = get_align_size_for_quantization; moe_utils.py skip_routed_expert_padding l. 1494-1510): no
        routing-map padding runs."""
        from .common import distinct_draws as distinct

        E, k = float(self.num_experts), float(self.top_k)
        if dispatcher == "alltoall":  # a job setting
            return ctx.T / ctx.rep_div * INDEX_BYTES * E
        if dispatcher == "deepep":
            recv = self.local_rows(ctx) * distinct(ctx.ep, k) / k
            return ctx.T * recv * INDEX_BYTES * E / ctx.ep
        return 0.0

    def hybridep_held_bytes(self, ctx, router_fused: bool):
        """(held, held_if_recomputed) of Megatron-Core's flex dispatcher with Hybrid-EP [15], one micro-batch's, n = T /
        rep_div local tokens, R = etp ep ranks of the flex group over etp E columns (E / ep local experts a rank):
          held   self.routing_map, bool [n, R, E / ep] = etp E B a local token (_initialize_metadata's expand and
                 contiguous(): with etp 1 a view of the router's own map, saved by TE's fused top-k, so held beyond
                 the saves only under full recompute, below); self.token_probs, the fp32 [n, etp E] copy dispatch()
                 makes of the probabilities (.float(); the router's own where they are fp32 already, which no
                 autograd node saves either), 4 etp E B; HybridEPDispatch saves only the handle, not these.
          held_if_recomputed  the router's map (E B) where it is the same tensor (etp 1, fused router); and
                 self.dispatched_probs, fp32 [rows] (4 B a row the rank receives, local_rows per token), which
                 combine() does not release (it drops only the handle) and the experts' activation saves
                 (expert_probs_saved_bytes)."""
        E = float(self.num_experts)
        n = ctx.T / ctx.rep_div
        shared = (ctx.etp == 1.0) & bool(router_fused)  # the manager's map is the router's saved one
        held = n * (np.where(shared, 0.0, BOOL_BYTES * ctx.etp * E) + PROB_BYTES * ctx.etp * E)
        return held, n * np.where(shared, BOOL_BYTES * E, 0.0) + ctx.T * self.local_rows(ctx) * PROB_BYTES

    def permutation_saved_bytes(self, ctx, permute_fused: bool, dispatcher: str, logit_bytes: float = LOGIT_BYTES,
                                domain: float | None = None, fused_multihot: bool = False):
        """What the token permutations save [9]: Megatron-Core's alltoall dispatcher, per local token, the fused
        permutation's int32 row-id map (4 (2E + 1) B; the unfused one's int64 argsort of the [n E] map, kept
        whole through the probabilities' gather index, and its int64 sorted indices: 8 E + 8 k B); and, with
        more than one local expert, the fused chunk sorts' int32 maps (4 B each) around the experts, over the
        rows the rank's experts receive (token_copies x expert_scale x etp / tp per token, as moe_expert_in).
        Megatron-Core's flex dispatcher with DeepEP: deepep_saved_bytes; with Hybrid-EP: hybridep_saved_bytes (its
        handle; domain: the GPUs of an NVLink domain); the allgather dispatcher: allgather_saved_bytes (logit_bytes:
        the probabilities' dtype, the router's logits'). deepep_ll's permutations are not priced (0)."""
        if dispatcher == "deepep":  # a job setting
            return self.deepep_saved_bytes(ctx, permute_fused, fused_multihot)
        if dispatcher == "hybridep":  # a job setting
            if domain is None:
                raise ValueError("hybridep_saved_bytes needs the GPUs of an NVLink domain (memory.moe_routing_saves)")
            return self.hybridep_saved_bytes(ctx, domain)
        if dispatcher == "allgather":  # a job setting
            return self.allgather_saved_bytes(ctx, permute_fused, logit_bytes)
        if dispatcher != "alltoall":
            return 0.0
        E, k = float(self.num_experts), float(self.top_k)
        permute = INDEX_BYTES * (2.0 * E + 1.0) if permute_fused else INT64_INDEX_BYTES * (E + k)
        rows = self.local_rows(ctx)
        sorts = np.where(E / ctx.ep > 1.0, 2.0 * INDEX_BYTES * rows, 0.0) if permute_fused else 0.0
        return ctx.T * (permute / ctx.rep_div + sorts)

    def allgather_saved_bytes(self, ctx, permute_fused: bool, logit_bytes: float = LOGIT_BYTES):
        """What Megatron-Core's allgather dispatcher saves for its backward [12], per local token (n = T / rep_div),
        over the N = n x R tokens it gathers from the R = etp x ep ranks of its group (E_l = E / ep local experts,
        D = logit_bytes, the probabilities' dtype):
          the probabilities' masked_select: it saves its input, the local experts' gathered probabilities
            transposed and made contiguous ([E_l, N], D B), and its mask, the local map likewise ([E_l, N] bool):
            R E_l (D + 1) = etp E (D + 1) B a local token;
          the permutation of the gathered tokens to the local experts (permute without probabilities): fused, TE's
            int32 row-id map over the gathered tokens [N, 2 E_l + 1], R 4 (2 E_l + 1) B a local token; unfused,
            the int64 sorted indices of the rank's rows (the flat argsort freed with no probabilities to gather),
            8 B a received row (local_rows, as alltoall's). The combine's unpermute keeps the same map or index
            (no new bytes), its reduce-scatter nothing."""
        E = float(self.num_experts)
        local = E / ctx.ep
        ranks = ctx.ep * ctx.etp
        masked = ranks * local * (logit_bytes + BOOL_BYTES)
        if permute_fused:
            return ctx.T * (masked + ranks * INDEX_BYTES * (2.0 * local + 1.0)) / ctx.rep_div
        return ctx.T * (masked / ctx.rep_div + INT64_INDEX_BYTES * self.local_rows(ctx))

    def deepep_saved_bytes(self, ctx, permute_fused: bool, fused_multihot: bool = False):
        """What Megatron-Core's flex dispatcher with DeepEP saves for its backward [11]: per local token
        (n = T / rep_div), the int64 top-k indices of its probabilities (_DeepepManager.setup_metadata's torch.topk,
        8 etp k B: the manager's router_topk is tp_size x moe_router_topk over tp_size x E columns, tp_size the
        dispatcher's expert-TP group, token_dispatcher.py l. 1856-1859) and DeepEP's is_token_in_rank bool [n, R] in the layout handle both fused kernels keep (R = ep x etp
        ranks of the flex group, R B); per token the rank receives (each once, whatever its local experts: the
        rank's rows x distinct(ep, k) / k, the distinct ranks a token reaches under uniform routing as
        planner/dispatch.py counts them), the local permutation's map over the rank's E / ep experts: fused, TE's
        int32 row-id map 4 (2 E / ep + 1) B; unfused, the int64 argsort of the [n_recv, E / ep] map 8 E / ep B;
        and per received row (copy), the multihot conversion's int64 index pairs (probs[mask] and the index_put_,
        2 x 16 B) and, unfused, the int64 sorted indices 8 B.
        And the rest of DeepEP's handle, which FusedDispatch / FusedCombine keep in ctx.handle until their backward
        (fused_a2a.py @d98e8a64 l. 135, 187): DeepEP runs its intranode kernels where the group's R = ep x etp
        ranks fit its 8 NVLink peers (num_rdma_ranks = max(1, R / 8), buffer.hpp l. 121; legacy.py l. 378) and its
        internode kernels beyond. Intranode (legacy.py l. 401, buffer.hpp l. 604, 608): send_head int32 [n, R],
        4 R B a local token, and recv_src_idx int32, 4 B a received token. Internode (legacy.py l. 500, buffer.hpp l.
        1121, 1124-1125): send_rdma_head int32 [n, R / 8], 4 R / 8 B a local token; recv_src_meta [n_recv,
        sizeof(SourceMeta) = 8] (internode.cu l. 22-45), 8 B a received token; send_nvl_head int32
        [n_rdma_recv, 8], 32 B per token this rank receives over RDMA (each token once per node it reaches, from the
        same local rank of each node: n x the nodes a token reaches, distinct(R / 8, k), capped by the model's
        group-limited routing as planner/dispatch.py caps it). And the handle's prefix matrices, a layer's whatever
        its tokens (deepep_prefix_bytes). Not priced (named): the job's moe_route_nodes cap on the nodes reached
        (the model's group-limited cap is applied).
        fused_multihot (memory.fused_multihot: --enable-experimental with moe_permute_fusion, token_dispatcher.py
        @d98e8a64 l. 1425-1428): the received map is built by fused_indices_to_multihot, whose IndicesToMultihot saves
        only its int32 position_map [n_recv, E / ep] (fusions/fused_indices_converter.py @d98e8a64 l. 211-213, 232):
        4 E / ep B a received token in place of the multihot conversion's int64 index pairs (2 x 16 B a row) [17]."""
        from .common import distinct_draws as distinct

        E, k = float(self.num_experts), float(self.top_k)
        local = E / ctx.ep
        rows = self.local_rows(ctx)  # received rows per token (as alltoall)
        recv = rows * distinct(ctx.ep, k) / k
        ranks = ctx.ep * ctx.etp
        token = INT64_INDEX_BYTES * k * ctx.etp + BOOL_BYTES * ranks  # top-k over etp k columns (docstring)
        if permute_fused:
            per_recv, per_row = INDEX_BYTES * (2.0 * local + 1.0), 4.0 * INT64_INDEX_BYTES
        else:
            per_recv, per_row = INT64_INDEX_BYTES * local, 5.0 * INT64_INDEX_BYTES
        if fused_multihot:  # a job setting: the position map in place of the index pairs (docstring)
            per_recv, per_row = per_recv + INDEX_BYTES * local, per_row - 4.0 * INT64_INDEX_BYTES
        handle_token, handle_recv = self.deepep_handle_bytes(ranks)
        return (ctx.T * ((token + handle_token) / ctx.rep_div + recv * (per_recv + handle_recv) + rows * per_row)
                + self.deepep_prefix_bytes(ranks))

    @staticmethod
    def deepep_prefix_bytes(ranks):
        """The prefix matrices in DeepEP's handle, int32, one set a layer and micro-batch whatever its tokens [11]
        (deepseek-ai/DeepEP @567632d deep_ep/buffer.py dispatch l. 393-398, internode_dispatch l. 474-496; csrc/deep_ep.cpp,
        C = num_sms / 2 = 10 channels at Megatron's 20 SMs, DEEPEP_CHANNELS; Megatron's FusedDispatch passes no cached
        handle, so each dispatch allocates them): intranode (R = ranks <= 8) rank_prefix_matrix [R, R] (l. 594),
        channel_prefix_matrix and recv_channel_prefix_matrix [R, C] (l. 595, 660): 4 R (R + 2 C) B; internode, over
        the r = R / 8 RDMA ranks, rdma_channel_prefix_matrix and recv_rdma_channel_prefix_matrix [r, C],
        recv_rdma_rank_prefix_sum [r], gbl_channel_prefix_matrix and recv_gbl_channel_prefix_matrix [R, C],
        recv_gbl_rank_prefix_sum [R] (l. 1097-1100, 1180-1181): 4 (r (2 C + 1) + R (2 C + 1)) B. Kilobytes a
        layer (R 64: 5.8 KiB); the caching allocator's 512-B rounding of each is not priced."""
        C = DEEPEP_CHANNELS
        rdma = np.maximum(ranks / DEEPEP_NVL_PEERS, 1.0)
        return np.where(ranks > DEEPEP_NVL_PEERS, INDEX_BYTES * (rdma + ranks) * (2.0 * C + 1.0),
                        INDEX_BYTES * ranks * (ranks + 2.0 * C))

    def hybridep_saved_bytes(self, ctx, domain):
        """What Megatron-Core's flex dispatcher with Hybrid-EP keeps for its backward [15]: the handle, which
        HybridEPDispatch and HybridEPCombine keep in ctx.handle until their backward (one tuple, counted once), per
        micro-batch in flight. Per local token (n = T / rep_div, the rows HybridEP's dispatch is handed), R = etp ep
        ranks of the flex group, E / ep local experts (R E / ep = etp E), N = the group's NVLink domains (Hybrid-EP's
        nodes: R / the ranks a rank reaches over NVLink, taken as R / min(R, domain), at least 1):
          sparse_to_dense_map  int32 [n N, R / N]                         4 R
          rdma_to_attn_map     bool [n (rounded up to 16), N]             N
          attn_to_rdma_map     bool [n, N - 1]                            N - 1
          local_expert_routing_map  bool [n R, E / ep]                    etp E
          dense_to_expert_map  int32 [n R, E / ep]                        4 etp E
          dense_chunk_layout   int32 [n / 64 chunks x R]                  4 R / 64
        Sized for every token of the group (n R rows), not the rows the rank receives. Nothing else: the experts'
        permuted probabilities are expert_probs_saved_bytes', the manager's attributes hybridep_held_bytes'; the
        int32 / int64 counters of E / ep or 1 element (tokens_per_expert, overflow_flag, num_dispatched_tokens) are not
        priced (a few 512-B blocks a layer); nor, where ranks straddle NVLink domains unevenly, a rank's larger N."""
        E = float(self.num_experts)
        ranks = ctx.ep * ctx.etp
        nodes = np.maximum(np.ceil(ranks / np.minimum(ranks, domain)), 1.0)
        per_token = (INDEX_BYTES * ranks * (1.0 + 1.0 / HYBRIDEP_CHUNK_TOKENS) + 2.0 * nodes - 1.0
                     + (BOOL_BYTES + INDEX_BYTES) * ctx.etp * E)
        return ctx.T * per_token / ctx.rep_div

    def deepep_handle_bytes(self, ranks):
        """(per local token, per received token) bytes of DeepEP's handle beyond is_token_in_rank, for a group of
        `ranks` (deepep_saved_bytes [11]): intranode (ranks <= 8) send_head 4 ranks and recv_src_idx 4;
        internode send_rdma_head 4 ranks / 8, send_nvl_head 32 x the nodes a token reaches, recv_src_meta 8."""
        from .common import distinct_draws as distinct

        nodes = np.maximum(ranks / DEEPEP_NVL_PEERS, 1.0)  # DeepEP's RDMA ranks, not the hardware's domain
        reach = distinct(nodes, float(self.top_k))
        if self.expert_groups:  # the model's group-limited routing (planner/dispatch.py _merged_bytes)
            reach = np.minimum(reach, self.groups_per_token * np.maximum(1.0, nodes / self.expert_groups))
        inter = ranks > DEEPEP_NVL_PEERS
        per_token = np.where(inter, INDEX_BYTES * nodes + INDEX_BYTES * DEEPEP_NVL_PEERS * reach, INDEX_BYTES * ranks)
        return per_token, np.where(inter, DEEPEP_SOURCE_META_BYTES, INDEX_BYTES)

    def cast_elements(self, ctx):
        return mlp_cast_elements(self, self.token_width(ctx), ctx)

    def cast_elements_bf16_experts(self, ctx):
        """fp8 cast elements where the routed experts run bf16 (job field fp8_grouped_experts
        false, step.py [16]): the shared experts' alone (mlp_cast_elements at their width s f_s),
        0 without shared experts (the router gate is not cast: torchtitan filters router.gate,
        Megatron's router is a plain GEMM)."""
        fs = self.num_shared * self.fs
        return mlp_cast_elements(self, fs, ctx) if fs else 0.0

    def dispatch_bytes(self, ctx):
        return dispatch_bytes(self, ctx)

    def loop_bytes(self, ctx):
        """(forward, backward) HBM bytes of the routing and the per-expert gathers and index-adds of a loop over
        the experts, one micro-batch on one GPU [16] (in place of dispatch_bytes where the stack runs the loop)."""
        E, k, h = float(self.num_experts), float(self.top_k), float(self.h)
        n = ctx.T / ctx.rep_div
        rows = n * self.token_copies(ctx)
        later = (E - 1.0) / E  # the rows of the experts but the loop's first [16]
        fwd = n * (2.0 * E + 30.0 * k + 2.0 * k * E + 2.0 * h) + rows * (22.0 * h + 62.0)
        bwd = (n * ((E - 1.0) * 12.0 * h + 8.0 * h * E + 8.0 * k * E + 22.0 * k + 2.0 * E)
               + rows * (22.0 * h + 42.0 + later * (12.0 * h + 16.0)))
        return fwd, bwd

    def unfused_dispatch_bytes(self, ctx):
        return unfused_dispatch_bytes(self, ctx)

    # ------------------------------------------------------------------ DeepSpeed-MoE's dense gating [18]
    def gating_tokens(self, ctx):
        """S, the tokens the gate runs on: the layer's local tokens T / rep_div [18]."""
        return ctx.T / ctx.rep_div

    def gating_capacity(self, ctx, cf, min_capacity):
        """C = max(ceil(S k cf / E), min_capacity), each expert's slots [18] (_capacity)."""
        S = self.gating_tokens(ctx)
        return np.maximum(np.ceil(S / self.num_experts * (cf * self.top_k)), float(min_capacity))

    def gating_einsum_rows(self, ctx, cf, min_capacity):
        """(forward, backward) [(GemmShape, count)] of the dispatch and combine einsums [18], M = h:
        forward the dispatch [E C, M, S] and the combine [S, M, E C]; backward the dispatch's input gradient
        [S, M, E C], the combine's weight gradient [S, E C, M] and its expert-output gradient [E C, M, S]."""
        S, h = self.gating_tokens(ctx), float(self.h)
        ec = self.num_experts * self.gating_capacity(ctx, cf, min_capacity)
        fwd = shapes([("moe_dispatch_einsum", ec, h, S, 1.0), ("moe_combine_einsum", S, h, ec, 1.0)])
        bwd = shapes([("moe_dispatch_einsum_dinput", S, h, ec, 1.0), ("moe_combine_einsum_dweights", S, ec, h, 1.0),
                      ("moe_combine_einsum_dexperts", ec, h, S, 1.0)])
        return fwd, bwd

    def _gating_per_token(self, ctx, cf, min_capacity):
        """(C, E C, the top-k path: 1, 2 or 3 for top-1, top-2, top-k > 2) [18]."""
        C = self.gating_capacity(ctx, cf, min_capacity)
        return C, self.num_experts * C, min(self.top_k, 3)

    def gating_bytes(self, ctx, cf, min_capacity):
        """(forward, backward) HBM bytes of the dense gating, its casts and the experts' cat, one micro-batch [18]."""
        C, ec, path = self._gating_per_token(ctx, cf, min_capacity)
        M = float(self.h)
        fwd = 6.0 * M + {1: 24.0 * C + 18.0 * ec, 2: 48.0 * C + 34.0 * ec, 3: 42.0 * ec}[path]
        bwd = 10.0 * M + {1: 4.0 * C + 18.0 * ec, 2: 8.0 * C + 30.0 * ec, 3: 22.0 * ec}[path]
        cat = 4.0 * ctx.T * self.local_rows(ctx) * M  # the rank's expert output rows, read and written once
        S = self.gating_tokens(ctx)
        return S * fwd + cat, S * bwd

    def gating_saved_bytes(self, ctx, cf, min_capacity):
        """Bytes one layer's dense gating saves for its backward, one micro-batch, by name [18]."""
        C, ec, path = self._gating_per_token(ctx, cf, min_capacity)
        S, M = self.gating_tokens(ctx), float(self.h)
        return {"moe_gate_input_fp32": S * 4.0 * M,
                "moe_gate_locations": S * {1: 4.0 * C, 2: 8.0 * C, 3: 4.0 * ec}[path],
                "moe_dispatch_mask": S * 2.0 * ec, "moe_combine_weights": S * 2.0 * ec,
                "moe_combine_expert_out": 2.0 * ec * M}

    def gating_transient_bytes(self, ctx, cf, min_capacity):
        """(forward, backward) bytes one layer's dense gating holds beyond its saves, one micro-batch [18]."""
        _, ec, path = self._gating_per_token(ctx, cf, min_capacity)
        S = self.gating_tokens(ctx)
        return S * {1: 5.0, 2: 12.0, 3: 8.0}[path] * ec, S * 10.0 * ec

    # ------------------------------------------------------------------ memory
    def tensors(self, ctx, attention: str) -> dict:
        """The block input and norm output (replicated unless SP), the output, a dropout mask;
        the router logits (fp32, /tp under SP), the expert inputs and outputs (top_k c copies
        of the hidden state, the rank's rows gathered across expert TP as Megatron's dispatcher
        does: x ctx.expert_scale x etp / tp), the experts' gate/up/activation outputs (the rows
        over etp: x ctx.expert_scale, /tp), the shared experts' MLP tensors."""
        h = self.h
        drop = 1.0 if self.dropout else 0.0
        g = 2.0 if self.gated else 1.0  # gate + up (gated) or up
        x = self.token_copies(ctx)
        xs = ctx.expert_scale
        cap = self.capacity_scale(ctx)  # rows allocated by capacity, not as routed [19]
        pad = np.where(cap != 1.0, cap, self.padded_rows(ctx))  # the grouped GEMMs' padded token groups [14]
        return {
            "norm2_in": (2.0 * h, "rep"), "norm2_out": (2.0 * h, "rep"),
            "mlp_out": (2.0 * h, "rep"), "dropout_masks": (drop * h, "rep"),
            "moe_router_logits": (ROUTER_LOGIT_BYTES * self.num_experts, "rep"),
            "moe_expert_in": (2.0 * x * h * xs * ctx.etp / ctx.tp * pad, "full"),
            "moe_expert_out": (2.0 * x * h * xs * ctx.etp / ctx.tp * cap, "full"),
            "moe_expert_gate_up": (2.0 * g * self.fe * x * xs * pad, "split"),
            "moe_expert_act_out": (2.0 * self.fe * x * xs * pad, "split"),
            "moe_shared_gate_up": (2.0 * g * self.num_shared * self.fs, "split"),
            "moe_shared_act_out": (2.0 * self.num_shared * self.fs, "split"),
        }


@dataclass(frozen=True)
class RouterPath:
    """The router's code path in a Megatron-Core run (job settings, planner/plan.py Settings): TE's fused
    top-k (moe_router_fusion), softmax before the top-k (moe_router_pre_softmax; a softmax router only), an
    auxiliary load-balancing loss computed (moe_aux_loss_coeff > 0 for an aux_loss / seq_aux_loss /
    global_aux_loss balancing), a z-loss (moe_z_loss_coeff > 0), the logits' bytes (moe_router_dtype)."""
    fused: bool = False
    pre_softmax: bool = False
    aux_loss: bool = False
    z_loss: bool = False
    logit_bytes: float = LOGIT_BYTES  # the logits' dtype (moe_router_dtype: ROUTER_DTYPE_BYTES), bf16 by default


def router_saved_terms(moe, path: RouterPath) -> dict:
    """Bytes the router saves for its backward per local token, by named term [10] (E experts, top-k k;
    P = 4 B fp32, L = 8 B int64, B = 1 B bool, D = the logits' bytes, path.logit_bytes: 2 B bf16 by default, 4 / 8 B
    under --moe-router-dtype fp32 / fp64, ROUTER_DTYPE_BYTES):
      topk     fused: TE's bool routing map E B and its fp32 [n, E] intermediate output 4 E (both saved by
               FusedTopkScoreFunction, softmax and sigmoid alike); unfused: torch.topk's int64 indices 8 k (the
               probabilities' scatter keeps the same index tensor) and the score function's saved output:
               softmax after the top-k (Megatron's default) its fp32 [n, k] output 4 k; softmax before it
               (pre-softmax) its fp32 [n, E] output 4 E; sigmoid its fp32 [n, E] output 4 E and, with k > 1,
               the normalising division's operands, the top-k scores 4 k and their sum 4.
      groups   unfused group-limited top-k: masked_fill's bool [n, E] mask E, kept where the top-k's result
               is the routing (not with a sigmoid router's expert bias, whose biased top-k only picks the
               indices and is freed).
      aux      an auxiliary loss: fused, TE's score kernel's fp32 [n, E] intermediate output 4 E; unfused, the
               softmax's (or sigmoid's) fp32 [n, E] output 4 E (a sigmoid's normalising sum 4 more); the loss
               itself (a sum over tokens) keeps [E]-sized tensors only.
      z_loss   the z-loss: torch.logsumexp keeps its input, the logits D E, and its output D (the square keeps
               the same output; moe_utils.py @d98e8a64 z_loss_func l. 169-170, on the gating GEMM's output in the
               router dtype).
    --moe-router-dtype (moe_router_dtype; router.py @d98e8a64 l. 105-111): of the tensors above only the z-loss's
    take the logits' dtype. Every score function computes in fp32 whatever the logits' dtype (moe_utils.py l.
    896-899 "Logits are converted to fp32 for score functions"; softmax with dtype=torch.float32 l. 902 / 914,
    torch.sigmoid(logits.float()) l. 917, so the saved softmax / sigmoid outputs are fp32 at any router dtype);
    torch.topk and the scatters save int64 indices; TE's fused kernel writes its intermediate output in fp32
    (csrc/extensions/router.cpp @4329ff84 l. 66) and its routing map as bool; the gating GEMM
    (RouterGatingLinearFunction, moe_utils.py l. 1382) saves its bf16 input and weight, not its output. Not
    priced (named, with their sizes per token of one MoE layer):
      - the probabilities in the logits' dtype, probs.type_as(logits) (l. 936) scattered into a dense [n, E]
        tensor (l. 954): not saved by autograd, but the alltoall dispatcher keeps it and the routing map as
        attributes (token_dispatcher.py l. 642-643, self.probs / self.routing_map, overwritten only by the
        layer's next forward): D E + E B held per MoE layer for one micro-batch (not per micro-batch in flight),
        bf16 included: DeepSeek-V3 (E 256) 768 B bf16, 1,280 B fp32, 2,304 B fp64;
      - the permuted probabilities the expert activation saves per routed row (WeightedSwiGLUFunction
        ctx.save_for_backward(input, weights), fused_bias_swiglu.py l. 270): D per row (bf16 included) under
        alltoall / allgather; fp32 under DeepEP and HybridEP, which cast them (token_dispatcher.py l. 1141,
        1318) whatever the router dtype;
      - transients: the gating backward's copy of its input in the router dtype, inp.to(router_dtype)
        (l. 1430 / 1436: D h per token, during the router's backward), the fp32 / fp64 expert output before the
        expert-TP reduce-scatter (token_dispatcher.py l. 830, hidden_states.to(self.probs.dtype)) and the
        allgather dispatcher's combine (l. 366), which also move D / 2 times the bf16 bytes on the wire (step
        time not priced either), and the fp64 gating GEMM on torch.mm at the fp64 rate (l. 1389-1400). The
        backward's copies (with fp32 up to 8 h + 4 E h / n B a token over bf16's 2 h) come after the layer's
        experts' backward freed their saves (k x 2 h B a token and more), so they move no priced peak
        (docs/memory_mechanisms.md, issue 21 fourth pass).
    Also not priced: sinkhorn and quantile balancing's own paths (priced as the top-k path); a padding mask's
    masked copies."""
    E, k = float(moe.num_experts), float(moe.top_k)
    P, L, B, D = PROB_BYTES, INT64_INDEX_BYTES, BOOL_BYTES, path.logit_bytes
    multi = 1.0 if moe.top_k > 1 else 0.0  # the sigmoid's normalisation runs for k > 1 only (a model constant)
    if path.fused:
        topk, groups = B * E + P * E, 0.0
    elif moe.sigmoid:
        topk = L * k + P * E + multi * (P * k + P)
        groups = 0.0 if moe.score_bias else B * E * (1.0 if moe.expert_groups else 0.0)
    else:
        topk = L * k + (P * E if path.pre_softmax else P * k)
        groups = B * E * (1.0 if moe.expert_groups else 0.0)
    aux = (P * E + (P if moe.sigmoid and not path.fused else 0.0)) if path.aux_loss else 0.0
    return {"topk": topk, "groups": groups, "aux": aux, "z_loss": (D * E + D) if path.z_loss else 0.0}


def dispatch_bytes(moe, ctx):
    """(forward, backward) HBM bytes of one MoE layer's router top-k and token permutations
    for one micro-batch on one GPU: Megatron-Core's alltoall token dispatcher with
    --moe-permute-fusion and --moe-router-fusion (Transformer Engine's fused kernels) [6][7],
    memory-bound work that step.py prices at HBM bandwidth x compute.HBM_EFFICIENCY. With
    n = T / tp (SP; T when the tokens are replicated) local tokens, R = n x gather x top_k c
    rows at the busiest rank's experts (gathered across expert TP: moe.gathered_tokens), E experts, k = top_k, hidden size h, bf16
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
    h = float(moe.h)
    E, k = float(moe.num_experts), float(moe.top_k)
    A, P, I = PERMUTE_ACT_BYTES, PROB_BYTES, INDEX_BYTES
    T = ctx.T
    n = T / ctx.rep_div
    R = n * ctx.gather * moe.token_copies(ctx)
    sorts = np.where(E / ctx.ep > 1.0, 1.0, 0.0)  # permutation 2 only with several local experts
    t = fused_token_terms(h, E, k)
    fwd_token = t["router_fwd"] + t["permute_fwd"] + t["unpermute_fwd"]
    fwd_row = sorts * ((2.0 * I + 2.0 * A * h + 2.0 * P) + (2.0 * I + 2.0 * A * h)) + P
    bwd_token = t["unpermute_bwd"] + t["permute_bwd"] + t["router_bwd"]
    bwd_row = sorts * ((I + 2.0 * A * h + 2.0 * P) + (I + 2.0 * A * h)) + 2.0 * P
    return n * fwd_token + R * fwd_row, n * bwd_token + R * bwd_row


def fused_token_terms(h, E, k):
    """dispatch_bytes' per-local-token bytes of the fused kernels (TE [7]), named: the router
    top-k, permutation 1 with its row-id map, unpermutation 1, forward and backward."""
    A, P, I = PERMUTE_ACT_BYTES, PROB_BYTES, INDEX_BYTES
    row_map = I * (2.0 * k + 1.0)
    return {
        "router_fwd": 2.0 * P * E + P * E + E,
        "permute_fwd": ((E + I * E + 2.0 * I * E + I * E + I * (2.0 * E + 1.0))  # row-id map, 3 passes
                        + (A * h + k * A * h + 2.0 * P * k + row_map)),
        "unpermute_fwd": k * A * h + A * h + row_map,
        "unpermute_bwd": A * h + k * A * h + row_map,
        "permute_bwd": k * A * h + P * k + A * h + P * E + row_map,
        "router_bwd": E + 2.0 * P * E + P * E,
    }


def unfused_token_terms(h, E, k):
    """Per-local-token bytes of the same work on Megatron-Core's unfused paths (moe_utils.py
    @d98e8a64 [8]: --moe-permute-fusion / --moe-router-fusion off, their defaults; dropless,
    non-deterministic), the keys of fused_token_terms. L = 8 B int64 indices (torch.argsort,
    torch.topk), B = 1 B bool, I = 4 B int32, P = 4 B fp32, A = 2 B bf16.

    permute_fwd (permute, fused=False): routing_map.bool().T.contiguous() 2 B E; the flat
      argsort of the n E bool map (torch's radix sort of key/index pairs: an arange of int64
      indices written L E, one histogram read of the keys B E, one pass over 8-bit keys that
      reads and writes key and index 2 (B + L) E: a named approximation of cub's onesweep
      sort) and `% num_tokens` on its first n k entries 2 L k; probs.T.contiguous() 2 P E and
      the gather of the k probabilities L k + 2 P k; tokens.index_select: the index L k, each
      of the k rows read from its token and written, 2 k A h.
    unpermute_fwd (unpermute, no probs): torch.zeros of the output A h, scatter_add_ reading
      the index L k and the k rows k A h, adding into the output (read and written) 2 A h.
    unpermute_bwd (scatter_add_'s gradient, a gather): L k + the k rows read and written 2 k A h.
    permute_bwd (index_select's gradient: zeros + index_add_): A h + L k + k A h + 2 A h; the
      probability gather's gradient (index_put_ accumulate into zeros of [n, E]): P E + L k
      + P k read + 2 P k (the contiguous copy's gradient is the same tensor, no kernel).
    router_fwd (topk_routing_with_score_function, fused=False, the score function over all E
      logits: sigmoid, or softmax before the top-k): the score 2 P E; torch.topk reads P E
      and writes k (P + L); routing_probs = zeros_like(logits).scatter(...): zeros P E, the
      out-of-place scatter's copy 2 P E, the scatter L k + 2 P k; routing_map =
      zeros_like(logits).int().scatter(...).bool(): zeros P E, .int() P E + I E, the copy
      2 I E, the scatter L k + I k, .bool() I E + B E.
    router_bwd: the scatter's gradient (a gather) L k + 2 P k; topk's gradient zeros P E +
      L k + 2 P k; the score function's gradient reads its output and the gradient and writes
      one, 3 P E.
    Not counted (named approximations), as in dispatch_bytes: the aux-loss scores, DeepSeek-V3's
    expert-bias add and gather and the group-limited top-k's extra reductions; permutation 2
    unfused (torch.split + torch.cat) moves the rows as the fused sort does (2 I B a row less)."""
    A, P, I = PERMUTE_ACT_BYTES, PROB_BYTES, INDEX_BYTES
    L, B = INT64_INDEX_BYTES, BOOL_BYTES
    return {
        "router_fwd": (2.0 * P * E + (P * E + k * (P + L)) + (P * E + 2.0 * P * E + L * k + 2.0 * P * k)
                       + (P * E + P * E + I * E + 2.0 * I * E + L * k + I * k + I * E + B * E)),
        "permute_fwd": (2.0 * B * E + (L * E + B * E + 2.0 * (B + L) * E) + 2.0 * L * k
                        + 2.0 * P * E + L * k + 2.0 * P * k + L * k + 2.0 * k * A * h),
        "unpermute_fwd": A * h + L * k + k * A * h + 2.0 * A * h,
        "unpermute_bwd": L * k + 2.0 * k * A * h,
        "permute_bwd": (A * h + L * k + k * A * h + 2.0 * A * h) + (P * E + L * k + P * k + 2.0 * P * k),
        "router_bwd": (L * k + 2.0 * P * k) + (P * E + L * k + 2.0 * P * k) + 3.0 * P * E,
    }


def unfused_dispatch_bytes(moe, ctx):
    """{"permute": (forward, backward), "router": (forward, backward)}: the HBM bytes one MoE
    layer's unfused permutation / router kernels move beyond the fused ones dispatch_bytes
    prices, one micro-batch on one GPU (n local tokens as there): n x (unfused_token_terms
    - fused_token_terms). A job without --moe-permute-fusion adds "permute", without
    --moe-router-fusion "router" (Megatron-LM's defaults: both off, transformer_config.py
    @d98e8a64 l. 941-947)."""
    h = float(moe.h)
    E, k = float(moe.num_experts), float(moe.top_k)
    n = ctx.T / ctx.rep_div
    f, u = fused_token_terms(h, E, k), unfused_token_terms(h, E, k)
    extra = {key: n * (u[key] - f[key]) for key in f}
    return {"permute": (extra["permute_fwd"] + extra["unpermute_fwd"], extra["permute_bwd"] + extra["unpermute_bwd"]),
            "router": (extra["router_fwd"], extra["router_bwd"])}
