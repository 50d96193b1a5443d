"""Per-GPU memory of a training plan: model states, activations, buffers. Units: bytes.

Every function takes a PlanArrays whose fields are 0-d (one plan) or 1-d (a search) and
returns Terms whose sum is the total; no Python `if` touches a searched quantity.

A stage's memory is the sum over the layers it holds (planner/layers/: each kind's
parameters and activation table from its own module, weighted by the stage's count of that
kind), plus the ends (embedding on the first stage, output layer, loss and multi-token
prediction on the last) and the buffers.

References
[1] Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
    Models", sec. 3 and Fig. 1: model states 2+2+K bytes/param (K=12 for mixed-precision
    Adam); stage 1 shards the optimizer (K/Nd), stage 2 also the gradients, stage 3 also
    the weights.
[2] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", sec. 4 and Table 2: activations per layer sbh(34 + 5as/h) with no parallelism,
    sbh(10 + 24/t + 5as/(ht)) with TP, sbh/t (34 + 5as/h) with TP + SP, 34sbh/t with
    selective recompute, 2sbh (layer input only) with full recompute; sec. 4.2.3 pipeline
    in-flight micro-batches.
[3] Dao et al. 2022, "FlashAttention": the s x s score and softmax tensors are never stored
    (they are recomputed from Q, K, V and the softmax statistics in the backward pass).
[4] Zhao et al. 2023, "PyTorch FSDP", sec. 3.3-3.4: each FSDP unit is all-gathered before
    use and freed after; backward prefetch keeps the next unit's all-gather in flight, so
    two unsharded units exist at once, plus the unsharded gradient of the unit being
    reduce-scattered.
[5] Megatron-LM core/tensor_parallel/cross_entropy.py (VocabParallelCrossEntropy): the loss
    casts the vocab-parallel logits to fp32 and saves the fp32 softmax for the backward
    pass.
[6] Narayanan et al. 2021 (Megatron-LM), sec. 2.2: pipeline stages; with tied embeddings the
    last stage keeps a copy of the word embedding when pp > 1.
[7] PyTorch FSDP2 (torch 2.13 torch/distributed/fsdp/_fully_shard/: _fsdp_param.py,
    _fsdp_collectives.py foreach_all_gather / foreach_reduce, _fsdp_param_group.py
    wait_for_unshard, FSDPParam.to_accumulated_grad_if_needed) and torchtitan's
    apply_fsdp_to_decoder; derived in docs/memory_mechanisms.md (b), (c): the stack's
    `fsdp:` fields say what a rank holds at its peak and in which stream's pool. Under PP,
    torch 2.13 torch/distributed/pipelining/stage.py backward_maybe_with_nosync runs every
    backward with set_reshard_after_backward(False): a unit resharded after forward (torchtitan
    fsdp_reshard_after_forward "always", apply_fsdp @e347b1e5e) is gathered by its backward
    and stays gathered until its next forward (stacks.sharding_traits regather_pp): with one
    chunk a rank the stage's weights are all gathered at a backward's end, one micro-batch's
    activations fewer, and none at a forward's end; with virtual stages a chunk stays gathered
    from its last backward (the stage's weights counted whole).
[8] NVIDIA TransformerEngine transformer_engine/pytorch/module/linear.py and
    layernorm_linear.py: with fp8 the quantized GEMM input is saved for the backward with its
    row-wise data discarded (update_usage(rowwise_usage=False, columnwise_usage=True)), 1 B
    per element (docs/memory_mechanisms.md (h)); the stack's memory.fp8_saves_gemm_inputs.
[9] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv:2412.19437) sec. 3.2.1 Table 2
    (DualPipe: 2x parameters, PP + 1 activations; pipeline.py [8]) and sec. 3.2.3 (the
    shallowest layers with the embedding and the deepest with the output head on one PP
    rank, the MTP modules sharing them).
[10] NVIDIA/Megatron-LM d98e8a64 megatron/core/tensor_parallel/layers.py: with
     --defer-embedding-wgrad-compute, ColumnParallelLinear.forward (l. 1226-1232) appends the
     output layer's input (input_parallel, sequence-sharded under SP) to
     embedding_activation_buffer and its backward (l. 650-659) appends the bf16 output gradient
     (s, b, V/t) to grad_output_buffer, each for the first --wgrad-deferral-limit micro-batches
     (0: all); pipeline_parallel/schedules.py finish_embedding_wgrad_compute (l. 913-926) drains
     them after the last backward, so they live on the last stage until the pipeline flush.
[11] Quantized weights (stack memory.fp8_weight_cache; stack_db/megatron.yaml sources): Megatron
     passes is_first_microbatch to Transformer Engine (megatron/core/extensions/
     transformer_engine.py @d98e8a64), which then keeps each fp8 / nvfp4 linear's quantized
     weight in its _fp8_workspaces across micro-batches and steps, with the row-wise data its
     forward reads and the column-wise copy its backward reads (TE @4329ff84 module/linear.py
     l. 405-434, 1859-1963; module/base.py quantize_weight). A Float8Tensor (delayed and
     per-tensor current scaling) keeps that copy as a transpose, only where the GPU's fp8 GEMMs
     take the TN layout alone (hardware fp8_gemm_tn_only; utils.py is_non_tn_fp8_gemm_supported);
     MXFP8, blockwise and NVFP4 tensors keep separate row- and column-wise data with their
     scales (recipe/__init__.py: MXFP8 one E8M0 scale per 32; blockwise weights 128 x 128 blocks
     with an fp32 scale; NVFP4 weights 16 x 16 blocks, one E4M3 scale). With the job's
     fp8_param_gather (Megatron --fp8-param-gather, fp8_model_init; fp4_param_gather, --fp4-param-gather, the same
     for NVFP4 weights, param_and_grad_buffer.py l. 1088-1100) the weight is itself the
     quantized tensor (a uint8 parameter buffer, distributed/param_and_grad_buffer.py l. 921-923)
     and the column-wise copy is re-created after each parameter all-gather into the same buffer
     (fp8_utils.py post_all_gather_processing -> TE tensor/utils.py l. 936-971): the weights are
     the row-wise bytes, the copies the column-wise. The layers' TP-split weight matrices and the
     experts' are the linears' (biases, norms, routers, embedding and output layer stay bf16;
     assumed: MLA's replicated down-projections, fp8 in Megatron, are left out); the layers a
     plan keeps in bf16 (bf16_layers) take their stage's mean share. Not under FSDP: TE keeps no
     cache for FSDP2 (linear.py: cache_name None when is_fsdp2) and Megatron turns fp8 param
     gather off under torch FSDP2 (training/arguments.py l. 1051-1056). Checked on Megatron-LM's
     CI (docs/megatron_ci_gap.md): the native-fp8 rows' end-of-step allocated bytes on H100 exceed
     the same rows' on GB200 by the transposes to the byte at TP4 CP2 (9,437,184 B).
[12] Megatron-Core's GlobalMemoryBuffer (stack memory.global_memory_buffer; NVIDIA/Megatron-LM
     @d98e8a64 megatron/core/utils.py l. 727-749): one persistent tensor per (name, dtype), grown
     to the largest request and never freed. Its "mpu" users in training: the sequence-parallel
     all-gather of the input of Megatron's own ColumnParallelLinear, [s/cp, b, h] in the
     activation dtype (tensor_parallel/layers.py l. 623-630, 667-673: the output layer, and every
     linear with --transformer-impl local), and the local core attention's baddbmm input
     [b a/t, s/cp, s] (transformer/dot_product_attention.py l. 188-191; --transformer-impl local
     or --attention-backend local). Per GPU: 2 B x max(T a/t s, T h) where each applies (T the
     micro-batch's tokens on the GPU, s / cp of a sequence). With --transformer-impl local no
     Transformer Engine GEMM runs, so its cuBLAS workspace is not allocated; with
     --moe-grouped-gemm and TE layers, TE's GroupedLinear keeps one more workspace per compute
     stream (4: TE @4329ff84 cpp_extensions/gemm.py get_cublas_workspace(grouped_gemm=True),
     common/util/multi_stream.cpp; stack memory.te_grouped_gemm_streams).
[ws] PyTorch's cuBLAS workspaces (stack memory.blas_handles, one per thread that runs GEMMs): each is
     pytorch/pytorch aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize (@26a39059): the
     CUBLAS_WORKSPACE_CONFIG environment variable's ":SIZE:COUNT" pairs summed, SIZE x 1024 x COUNT bytes
     each (":4096:8" = 32 MiB), else the GPU's default (hardware torch_cublas_workspace_MiB: 32 MiB on
     Hopper and, from pytorch/pytorch#175344, Blackwell; 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB elsewhere),
     allocated through the caching allocator by getNewWorkspace and kept (job field cublas_workspace_config:
     the run's variable; Megatron-LM's CI sets ":4096:8" in most test cases' ENV_VARS, and Megatron-LM @d98e8a64's
     --deterministic-mode sets it where the launcher has not: training/determinism.py l. 27-31, 114-116, from
     3ab71eeb3e, 2026-07-08, dated by the job's trainer_date: plan._cublas_workspace).
[13] The caching allocator's fragmentation band: the reserved peak can exceed the point estimate
     (the allocated peak, the pools modelled as stream_pools, the stack's allocator_slack) by
     blocks split and stranded between requests of other sizes. Public reserved / allocated
     ratios at the peak, in tests/data/memory/measured_memory.yaml: torchtitan PR #112
     (2024-03, FSDP1 + SP, LLaMA 7B, default allocator) 1.45 with loss parallel off and 1.32
     with it on (row torchtitan_pr112_llama7b_tp4_sp_loss_parallel); llama-recipes PR #41
     (2023-07, FSDP1, pure bf16) reserved / active 1.27 (row llamarecipes_pr41_...). The band
     is [point, max(point, allocated x RESERVED_OVER_ALLOCATED_MAX)], the top the largest
     measured ratio, not a fitted constant; `check` gates on the point (it says which number
     it used) and reports the top. What widens it: allocations that outlive the phase that
     freed their neighbours (pipeline stages' outputs and received activations allocated
     between a micro-batch's forward and its backward; FSDP's per-stream pools). PyTorch's
     expandable_segments (PYTORCH_CUDA_ALLOC_CONF, stack memory.allocator; torchtitan's
     run_train.sh sets it) grows one segment per stream in place and removes most of it
     (PyTorch docs, "CUDA semantics: optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF");
     no ratio measured with it is in the reference, so its band keeps the default
     allocator's top as a bound. Megatron's --empty-unused-memory-level (job field; torch.cuda.empty_cache() after
     the forward-backward, and after the optimizer step at 2: NVIDIA/Megatron-LM @d98e8a64 megatron/training/
     training.py l. 3149-3150, 3229-3230) moves neither peak: the allocator's release_blocks frees only segments
     with no block in use ("Frees all non-split blocks", pytorch c10/cuda/CUDACachingAllocator.cpp), so no phase's
     peak falls, and the point estimate is one step from a clean cache, what level 2 makes every step; what it
     removes is the carry-over between phases and steps inside the band (no ratio measured with it narrows it).
[14] What an MoE layer saves for its backward (stack memory.moe_keeps_expert_out, memory.fp8_saves_gemm_inputs;
     stack_db/megatron.yaml sources): Megatron-Core multiplies the routing probabilities inside the experts'
     activation (NVIDIA/Megatron-LM @b0cc2706 megatron/core/transformer/moe/experts.py TEGroupedMLP.forward,
     weighted_bias_swiglu_impl) and unpermutes the experts' outputs without them, which Transformer Engine's
     fused unpermute does keeping only its row map (NVIDIA/TransformerEngine v2.12 transformer_engine/pytorch/
     permutation.py _moe_unpermute_mask_map.forward l. 385-388): the outputs before the combine are not kept.
     Transformer Engine's GroupedLinear saves its quantized inputs under fp8 as its Linear does [8]
     (module/grouped_linear.py l. 231-261): the routed experts' up- and down-projection inputs at 1 B
     (megatron's memory.fp8_saved_bytes), and under nvfp4 at 0.5 + 1/16 B, the recipe's NVFP4 quantizers
     saving them the same way (grouped_linear.py v2.12 l. 149-151 tex.split_quantize with the recipe's
     input quantizers; csrc/extensions/cast.cpp l. 502-717 bulk_allocate_nvfp4_tensors: e2m1 data and an
     e4m3 scale per 16 for each split, l. 803-963 the split-quantize with the column-wise Hadamard
     transform; MOE_GEMM_INPUTS). The
     router's GEMM runs in bf16 / fp32 and saves its bf16 input (Megatron-LM @b0cc2706 moe/moe_utils.py
     RouterGatingLinearFunction; DeepSeek-V3 arXiv:2412.19437 sec. 3.3.1 keeps the gating modules in their
     original precision), so an MoE layer's norm2_out is 2 B under fp8. The shared experts' own copy of
     norm2_out (their up-projection's input) beside the router's: [se].
[se] The shared experts' fc1 saved input (shared_fc1_saves; Megatron-Core's SharedExpertMLP, stack
     moe_shared_experts_tp_pair). NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/shared_experts.py
     l. 147-161: under fp8 with a recipe other than delayed (TE >= 2.6) and under fp4 (TE >= 2.7) Megatron sets
     save_original_input on fc1 (unless the shared experts are recomputed), so it keeps the bf16 input, the
     router's norm2_out (counted once); under delayed scaling it does not, and TE's Linear saves the quantized
     input it made (module/linear.py @4329ff84 l. 541-563: inputmat, before the SP gather, so the local shard):
     T h / rep_div at 1 B (fp8_saves_gemm_inputs' 1 B a saved GEMM input) beyond norm2_out, before branch shexpov
     not priced. Under --moe-shared-expert-overlap (the job's moe_shared_expert_overlap, step.py [38]) fc1 runs with
     parallel_mode None (l. 163-172) on the input the side stream gathered (l. 246-249), which it saves: a new
     tensor of T h at 2 B where SP at tp > 1 gathers it (bf16 and the save_original_input recipes; at tp 1 the
     input is norm2_out itself), its quantized copy of T h at 1 B under delayed scaling. Kept as the layer's
     tensors are: dropped under full recompute (re-made in the re-run, in the re-run buffer) and by a policy that
     checkpoints the MoE block or the shared experts (recompute_modules moe, shared_experts; the latter Megatron
     refuses beside the overlap). The side stream's own transient (the gathered input between the gather and fc1,
     fc1's output until fc2) is not priced beside the layer's peak: it lives while the dispatcher's buffers do,
     a moment the activation terms do not pick.
[tt1] torchtitan 0.3.0 models/llama3/parallelize.py apply_tp: "norm": SequenceParallel(), "output":
     ColwiseParallel(input_layouts=Shard(1), ...): the output linear receives the all-gathered
     (Replicate) final-norm output and autograd saves it (2 B x T x h), beside the norm's own
     saved input (sequence-sharded); Megatron's output layer saves its sequence-sharded input.
[tt2] torch 2.13 torch/distributed/tensor/parallel/loss.py (loss_parallel, torchtitan's default
     under TP): _log_softmax saves its fp32 output (4 B/logit); _nll_loss_and_log_softmax_backward
     returns (zeros_like(x) + exp(x)) * grad_output: beside the saved log-softmax, grad_input,
     exp(x) and their sum are live at once, 16 B/logit (ATen's unsharded CE: 12).
[te] Transformer Engine's fused cross-entropy (Megatron-Core cross_entropy_fusion_impl te):
     NVIDIA/TransformerEngine @02965d2e transformer_engine/pytorch/cross_entropy.py saves the
     logits themselves and its backward kernel (triton/cross_entropy.py) stores their gradient
     over them in place: 2 B a bf16 logit held, no fp32 copy (stack_db memory.te_loss_per_logit).
[ml] Each multi-token-prediction module's loss as Megatron-Core holds it (NVIDIA/Megatron-LM @d98e8a64; the same
     loop at 905c0e386, Megatron-Bridge's pin): gpt_model.py _postprocess runs process_mtp_loss (l. 746) before the
     main output layer and loss (l. 807, 839). multi_token_prediction.py process_mtp_loss l. 1012-1066: per depth
     `mtp_logits, _ = output_layer(...)` (bf16 [s, b, V/t]; the linear saves its input, not its output),
     compute_language_model_loss (l. 1027), the acceptance counts under no_grad (l. 1035, _compute_mtp_acceptance_counts
     l. 686-723: an argmax, per-token tensors), and MTPLossAutoScaler.apply (l. 1061/1064), which saves only the
     [b, s] loss (l. 902). The next depth's assignment (and the return, l. 1068) drops the bf16 logits: nothing
     saves them. What lives to the backward is what the loss saved: tensor_parallel/cross_entropy.py
     _VocabParallelCrossEntropy.forward (unfused) casts the logits to fp32 (l. 25) and saves the fp32 softmax
     exp_logits (l. 181); fusions/fused_cross_entropy.py (--cross-entropy-loss-fusion, impl native) saves the same
     (l. 119): 4 B a logit each (stack memory.mtp_loss_kept_per_logit); impl te saves the bf16 logits themselves ([te]:
     te_loss_per_logit[0], as the main loss). The backward runs the main loss first (its nodes are the last
     created; each module's loss nodes become ready only through MTPLossAutoScaler.backward): the main loss's
     backward transients (the bf16 gradient cast beside the fp32 one, 2 B; the fused loss's compiled calculate_gradients
     buffer, 4 B: loss_saved_per_logit, fused_loss_extra_per_logit) are counted once, in out_act, at that moment,
     beside every module's kept softmax; a module's own backward comes later, with the main softmax freed and one
     module's softmax less than at the main loss's. Each module's final-norm input and its output layer's saved input
     are as the main output layer's (out_act's hidden terms).
[lt] What a loss keeps per micro-batch and what it holds once. Of the bytes a logit the loss holds at its backward's
     peak (stack kernels loss_saved_per_logit; fused_loss_extra_per_logit; te_loss_per_logit[0]), the part its forward
     saves lives until that micro-batch's backward: once per micro-batch whose loss the stage holds (pipeline.py
     stage_inflight_kinds "loss": m under GPipe, torch.distributed.pipelining ScheduleGPipe running every micro-batch's
     forward and loss before the first backward; 1 under 1F1B / interleaved / ZB-H1 / DualPipe and without PP, where
     each loss's backward follows its forward). The rest (kernels loss_transient_per_logit: the gradients the
     backward creates, a dtype cast, the fused loss's compiled buffer) exists inside one micro-batch's loss backward,
     and one runs at a time: counted once (_stage_terms: losses x (out_act - out_transient) + min(losses, 1) x
     out_transient). Megatron-LM @d98e8a64 tensor_parallel/cross_entropy.py: the fp32 softmax saved (l. 181, 4 B),
     the bf16 gradient the autograd engine casts the returned fp32 gradient to (torch/csrc/autograd/engine.cpp
     validate_outputs, 2 B: transient); fusions/fused_cross_entropy.py the same softmax (l. 119), the compiled
     calculate_gradients' fp32 buffer and its bf16 result (l. 82): 4 + 2 transient; TE's loss writes the gradient
     over the saved logits: none. torchtitan (ATen cross_entropy on the fp32 copy): the log-softmax saved (4), the
     nll and log-softmax gradients (8; loss_parallel: 12) transient. The same split prices a multi-token-prediction
     module's loss where the stack gives no mtp_loss_kept_per_logit ([ml]): torchtitan release/0.3 @4f9e9a47d
     models/deepseek_v3/mtp.py MTPDecoder.forward (l. 246-278) returns the main and every depth's bf16 logits as one
     list; MTPLoss.__call__ (l. 339-409) runs self.fn (cross_entropy_loss, compiled where the loss is) on each; the
     trainer deletes the list before the backward (trainer.py l. 814-828, `del pred`), so each depth keeps what its
     loss saved (the fp32 log-softmax 4 B; compiled, the bf16 logits 2 B). Every loss's backward nodes were created
     after every lm_head call, so autograd runs all the losses' backwards before any lm_head backward, one at a time
     (the highest sequence number first): at the first, all (1 + D) saved figures and one transient are live; each
     later one has one saved figure fewer and one bf16 logits gradient (2 B) more, never more than that (eager 4 > 2;
     compiled 2 = 2). MTP under PP is refused there (mtp.py l. 199-204).
[lp] The loss under torch.distributed.pipelining (stack memory.pipeline_keeps_logits; torchtitan). The last stage's
     forward output, the bf16 logits, is the tensor the schedule hands the loss (pytorch/pytorch @00722e648
     torch/distributed/pipelining/schedules.py _maybe_compute_loss -> _compute_loss: self._loss_fn(output, target),
     output the tensor forward_one_chunk returned and stored in stage.fwd_cache [tt4]) and lives to the micro-batch's
     stage backward (2 B a logit a held micro-batch, pp_logits). (a) A loss that saves its input by reference prices
     those bytes once: torchtitan's compiled loss (@e347b1e5e components/loss.py l. 20-35: the cast inside the compiled
     function) saves the bf16 logits (kernels loss_saved_per_logit 4 = 2 saved + 2 transient), the same storage:
     stack kernels loss_saved_input_per_logit 2, pp_logits = T (2 - 2) V / t = 0 compiled; eager (the fp32
     log-softmax saved, not its input) 2 B a logit. (b) The allocator's loss pool (kernels loss_pool_per_logit, [5])
     is the training loop's bf16 logits freed by `del pred` before loss.backward() (torchtitan @e347b1e5e train.py,
     release/0.3 @4f9e9a47d trainer.py l. 814-828): under PP the loop holds no logits (pp_schedule.step) and fwd_cache
     keeps them to the stage backward, so that block is never freed; the block the eager loss frees is its fp32 copy
     (the .float() output, 4 B a logit, freed once log_softmax has saved its own output), which the same-sized fp32
     nll and log-softmax gradients of the backward can reuse: pool 0 under PP. Without PP `del pred` frees every
     logits block of the list a multi-token-prediction model returns (release/0.3 models/deepseek_v3/mtp.py
     MTPDecoder.forward l. 246-278: the main and D depths' bf16 logits), none of which the 4 B requests of the first
     loss backward can use: (1 + D) x 2 B a logit.
[tt3] torch autograd: the backward runs the loss's nodes (and frees their saved tensors and
     temporaries) before the last layer's; torch.utils.checkpoint re-runs a layer's forward
     only when its backward starts. The oracle's full-AC rows (tests/data/memory/oracle_sweep_
     torch2.13_tt0.3.0.yaml) peak at the loss's backward with no re-materialised layer live.
[tt4] torch 2.13 torch/distributed/pipelining/stage.py forward_one_chunk stores (output_tuple,
     inputs) in fwd_cache[chunk]; backward_one_chunk pops it into locals that live until the
     stage's backward returns; torchtitan 0.3.0 trainer.py calls pp_schedule.step(...,
     return_outputs=False), so output_chunks keeps nothing more. On the last stage the output
     is the bf16 logits [T, V/t], 2 B per logit per micro-batch whose loss is in flight.
     The other stages' outputs (the last block's output [T, h], sequence-sharded under SP) are held the
     same way, one per chunk-micro-batch in flight whose chunk sends on (stack memory.
     pipeline_keeps_stage_outputs); the received input is the first block's saved input, not counted
     twice. Megatron-LM @d98e8a64 frees a sent output's data (schedules.py deallocate_output_tensor l. 171-200,
     called after each send; training/argument_utils.py l. 305 sets deallocate_pipeline_outputs True).
[tt5] torchtitan 0.3.0 models/common/feed_forward.py (w2(F.silu(w1(x)) * w3(x))) under torch
     2.13 autograd: w2's backward writes its weight gradient and its input gradient, the mul's
     backward the two factors' gradients while the re-run silu and w3 outputs live;
     models/common/attention.py GQAttention.forward (self.rope(xq, xk) returns new tensors;
     inner_attention(...).contiguous() copies the [B, N, L, H] output before wo). Seen in the
     oracle's PP rank 0 trace (tt_fake_pp.py, 4 layers, pp 2): the peak op is that mul's
     backward in the last block's feed_forward.
[tt6] torchtitan 0.3.0 components/loss.py ChunkedLossWrapper.__call__ (hidden states detached
     and split into num_chunks = 8 sequence chunks, each .contiguous(); GradAccumulator's fp32
     buffer; lm_head.set_requires_gradient_sync(False) until the last chunk; `logits` of the
     last chunk live through its backward) and torch 2.13 fsdp/_fully_shard/_fsdp_param.py
     to_accumulated_grad_if_needed (fp32 copy), _fsdp_param_group.py post_backward ->
     _fsdp_collectives.foreach_reduce (fp32 reduce-scatter input, output / N). The oracle's
     chunked rows peak at that reduce-scatter's output allocation.
[tt7] torch 2.13 fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce: the unit's unsharded bf16
     gradients, copied in (foreach_reduce_scatter_copy_in) to an fp32 reduce-scatter input of
     the same length, and the output whose views are the sharded gradients, allocated on the
     reduce-scatter stream; by the last units of the backward every other unit's sharded
     gradient is allocated. The oracle's full-AC rows with little activation (70B TP 8 s8192 b1;
     8B s2048 b1) peak there: the first block's and the embedding's reduce-scatter.
[tt8] pytorch/torchtitan @6fc499f6 (2025-08-14) torchtitan/models/attention.py
     ScaledDotProductAttention._init_backend: on compute capability >= 10.0 (Blackwell) SDPA runs
     with SDPBackend.CUDNN_ATTENTION first (since #1209, 2025-05-20), whose op
     aten._scaled_dot_product_cudnn_attention is not on models/llama3/infra/parallelize.py's
     _save_list (mm, the flash and efficient SDPA ops, reduce_scatter_tensor, max): the per-op
     policy returns PREFER_RECOMPUTE for it, so the attention output (2 a d bytes per token, /t) is
     not saved and the attention core re-runs in the backward. #2095 (b39377f9, 2025-12-01; issue
     #2091 "avoid recomputing attention during backward") added every SDPA backend to the list.
     The job field selective_recomputes_attention drops attn_out from the stack's selective keeps
     and re-runs the core (step.py).
[tt9] The rotary embedding's precomputed tables (stack memory.rope_cache, job field rope_cache): torchtitan
     02d24f017 (2026-06-05, #3458; 0.3.0) torchtitan/models/common/rope.py RoPE.__init__ l. 68
     register_buffer("cache", ..., persistent=False) in every attention layer, _precompute_cache
     (l. 139-219) torch.polar -> complex64 (max_seq_len, dim / 2), max_seq_len the job's seq_len: 4 B x seq x
     the rotated head dim a layer, on the stage that holds the layer, all step (8B at seq 8192: 32 x 4 MiB,
     the oracle's "Buffer" 0.125 GiB). Before it one freqs_cis buffer of the same shape per model part
     (model.py register_buffer("freqs_cis", ..., persistent=True) @e7c0cae l. 411, @6fc499f6 l. 345): one per
     pipeline chunk on the rank. Checked: the oracle rows' signed median -0.9% -> +0.1%, worst -4.4% -> -3.0%.
[tt10] FSDP2's root unit before torchtitan 83e69410 (#1094, 2025-07-28; job field fsdp_root_unit): pytorch/torchtitan
     @e7c0cae torchtitan/models/llama3/parallelize_llama.py apply_fsdp (l. 313-367; the same @cc2c31229
     models/llama/parallelize_llama.py l. 320-374) wraps each block (reshard_after_forward = int(layer_id) <
     len(model.layers) - 1 under "default" without PP: the last block is not resharded after its forward) and then
     fully_shard(model): the embedding, final norm and output layer are the root unit's. torch before #154704 /
     #155319 (2025-06; torch 2.8.0a0+5228986c39 of NGC 25.05 among them) clamps the root to no reshard after forward
     (torch/distributed/fsdp/_fully_shard/_fsdp_state.py _lazy_init: "For the root, do not reshard after forward
     since for training, the parameters would be freed and all-gathered immediately", post_forward_mesh_info =
     None). So at the loss's backward peak the embedding's bf16 weight (2 B x V h) is unsharded beside the output
     layer's, the last block is still gathered (its converted Linears at 1 B under the fp8 all-gather [fa]), and the
     all-gather stream's pool [7] held the root unit's flat all-gather output, embedding and output together
     (foreach_all_gather: one buffer a unit), where 0.3.0's largest unit is the embedding alone. The root's
     post-backward runs in the backward's final callback (its forward inputs, the token ids, need no gradient:
     no RegisterPostBackwardFunction fires), so the output layer's bf16 weight gradient (2 B x V h) waits through
     the layers' backward, and the root is reduced last, embedding and output together: 6 B x 2 V h (their bf16
     gradients and the fp32 reduce-scatter input, resharded first: FSDPParamGroup.post_backward) at the end of
     the backward [tt7] (below the loss's peak for every measured row). Not priced: the norms' weights (h a
     norm, bytes in the thousands).
[ck] torchtitan PR #996's chunked cross-entropy (job field loss_logit_chunks, n chunks): pytorch/torchtitan @f99bfc03
     (refs/pull/996/head, 2025-03-20, the PR's measured run; 9a6781f5 then left it off by default)
     torchtitan/components/loss.py chunked_cross_entropy_loss (adapted from torchtune's ce_chunked_output_loss.py):
     the model's bf16 logits [b, s, V] are materialised whole, logits.chunk(n, dim=1), and each chunk runs
     cross_entropy_loss (F.cross_entropy(chunk.flatten(0, 1).float(), ...)) in turn, eagerly (loss.py's own comment:
     the loss is not compiled); train.py @f99bfc03 l. 370-376 then `del pred` and loss.backward(). Per ATen
     (derivatives.yaml): the .float() upcast (ToCopyBackward) and the chunk views (SplitBackward) save nothing;
     log_softmax saves its fp32 output. Forward, at the last chunk: the bf16 logits (2 B a logit), every chunk's
     log-softmax (4), the chunk's upcast (4 / n): 6 + 4 / n (under PP the logits are the fwd_cache's, pp_logits
     [lp]: 4 + 4 / n). Backward, after `del pred`: autograd runs the chunks' losses one at a time (the last chunk's
     nodes first, the highest sequence numbers), each its nll gradient and log-softmax gradient (fp32, 4 / n each;
     loss_parallel's three, 12 / n [tt2]) beside the log-softmaxes not yet consumed: 4 + 8 / n at the first (12 / n
     under TP); each chunk's bf16 gradient (2 / n) waits in SplitBackward's input buffer, which concatenates them
     (2 + 2, below). The loss's peak: max of the two (6.5 B a logit at n = 8: the forward's, against the whole
     loss's 12 at its backward, [lt]); of it, the log-softmax (4) is kept per micro-batch in flight, the rest
     transient. Its freed blocks leave no pool [5]: the freed bf16 logits (2 B a logit) and the chunk upcasts (4 / n)
     serve the backward's fp32 requests of 4 / n (the caching allocator splits a large free block).
[tt11] torchtitan's routed experts converted to torchao's scaled grouped GEMMs (plan.fge: job field
     fp8_grouped_experts, searched by fit; step.py [16]) save what its bf16 grouped GEMMs save: pytorch/ao
     @9cd41075 (main 2026-02-13, the torchao nightly nearest torchtitan @e347b1e5e)
     torchao/prototype/moe_training/scaled_grouped_mm.py _Float8GroupedMM.forward l. 181
     ctx.save_for_backward(A, B_t, offs) (A the bf16 input, B_t the expert weight itself, offs E_l int32) and
     _MXFP8GroupedMM l. 428 the same; their fp8 / mxfp8 copies and scales are made inside the call and made
     again in the backward (l. 213-309), so no saved tensor changes width (torchtitan keeps no fp8 weight cache,
     memory.fp8_weight_cache false). What moves: the token groups padded to 16 / 32 rows an expert in place of
     8 (layers/moe.py [14]: the permuted input, the gate / up and the activation outputs). The transient fp8
     copies of a GEMM's operands (1 B an element of A and of the local experts' weights, with their scales)
     live only inside the call: not priced.
[gmm] torchtitan's routed experts under op SAC (stack selective.expert_gemms_kept: compiled). pytorch/torchtitan
     @e347b1e5e torchtitan/models/moe/moe.py _run_experts_grouped_mm l. 113-130 runs three torch._grouped_mm calls
     (gate w1, up w3, down w2) and F.silu / the multiply between them; torch._grouped_mm dispatches as
     aten._grouped_mm.default (the op a tensor subclass sees: pytorch/ao @36027d82
     torchao/quantization/quantize_/workflows/float8/float8_tensor.py l. 1085 @implements([aten._grouped_mm.default])).
     No code's _op_sac_save_list holds it (models/llama4/infra/parallelize.py l. 51-66, deepseek_v3 l. 33-48, qwen3
     l. 39-54, gpt_oss l. 42-57: aten.mm, the SDPA ops, reduce_scatter_tensor, all_to_all_single (not qwen3), max,
     flex_attention, inductor_compiled_code), and distributed/activation_checkpoint.py _custom_policy (l. 98-124)
     compares OpOverloads exactly (func in op_sac_save_list; its mm counter only for func ==
     torch.ops.aten.mm.default): aten.mm does not catch aten._grouped_mm, which gets PREFER_RECOMPUTE. So without
     compile the policy keeps neither the gate / up outputs nor the activation output (moe_expert_gate_up,
     moe_expert_act_out leave the kept set and, as every re-run tensor, exist for one layer in the recompute
     buffer) and the backward's recompute (early_stop false: the whole block) re-runs the three grouped GEMMs
     (step.py layer_times). With compile, llama4's apply_compile (l. 658-685; deepseek_v3 and qwen3 import it)
     replaces _run_experts_grouped_mm by torch.compile(...) of it: one inductor_compiled_code call, whose outputs
     (the saved tensors AOTAutograd's partition returns among them) the save list keeps, and nothing inside it
     re-runs: kept as the stack's keeps say. gpt_oss's own model/moe.py _run_experts_grouped_mm, which no
     apply_compile reaches (its parallelize.py calls none: ModelCode.compiles_blocks false), is re-run with
     compile on too (experts_run_eager).
[gmm3] torchtitan 0.3's routed experts under op SAC (stack selective.expert_gemms_kept: never): kept neither eager nor
     compiled. pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/models/common/moe.py GroupedExperts.forward
     l. 94-108 runs three GroupedExperts._grouped_mm (l. 110-120: torch._grouped_mm, aten._grouped_mm.default) with
     F.silu and the multiply between them. The save list (distributed/activation_checkpoint.py _get_default_save_ops
     l. 31-94) is its own ops (SDPA, max, flex_attention, linear, topk, inductor_compiled_code, varlen) and comms plus
     torch's get_default_op_list().compute_intensive_ops (l. 87-91). 0.3.0 pins torch 2.14.0
     (.github/workflows/validate_rc.yaml l. 42, the release candidate's install: torch==2.14.0, torchao==0.18.0), whose
     torch/_functorch/partitioners.py get_default_op_list l. 3306-3318 lists mm, convolution, convolution_backward,
     bmm, addmm, the flash / efficient SDPA and attention-forward ops, upsample_bilinear2d and _scaled_mm: no
     _grouped_mm. So wrapped_policy (l. 246-274) returns PREFER_RECOMPUTE for the three GEMMs (their counter is only
     for aten.mm / aten.linear) and eager the block's recompute (early_stop False, l. 285) re-runs them. Compiled,
     0.3 compiles the whole checkpointed block (models/qwen3/parallelize.py l. 60 applies AC, then apply_compile l. 64;
     distributed/compile.py l. 70 transformer_block.compile(fullgraph=True)), no separate compile of the experts:
     torch 2.14.0 torch/utils/checkpoint.py _CachingTorchDispatchMode l. 1593-1598 tags each traced node with the
     same policy (node.meta["recompute"] = PREFER_RECOMPUTE for aten._grouped_mm), and the partitioner recomputes
     every such node (partitioners.py must_recompute l. 176-180, solve_min_cut l. 2698-2705: an infinite edge to the
     sink). So the gate / up and activation outputs (moe_expert_gate_up, moe_expert_act_out) are never kept and the
     forward grouped GEMMs re-run on every plan, EP 1 (LocalTokenDispatcher) and EP > 1 alike (expert_gemms_rerun).
     torchao's scaled grouped GEMM (plan.fge; components/quantization/mx.py l. 134-139 overrides _grouped_mm with
     _quantize_then_scaled_grouped_mm) is priced the same: no op of it is on the list either (_scaled_grouped_mm is
     not _scaled_mm).
[xk] torchtitan 0.3's token exchange under op SAC (stack selective.exchange_kept: compiled; exchange_reruns). The
     save list holds torch.ops._c10d_functional.all_to_all_single.default (pytorch/torchtitan release/0.3 @4f9e9a47d
     torchtitan/distributed/activation_checkpoint.py _get_default_save_ops l. 61-63), but
     models/common/token_dispatcher.py AllToAllTokenDispatcher calls torch's functional all_to_all_single only when
     compiling or off the spmd_types backend (_token_count_exchange l. 258-266, _dispatch_token_exchange l. 325-333,
     _combine_token_exchange l. 353-361); on the default backend (config/configs.py l. 163-165 spmd_backend
     'spmd_types', set by trainer.py l. 319) eager it calls spmd_types 0.2.3's all_to_all (l. 335-342, 363-370;
     pyproject.toml l. 30 pins spmd_types==0.2.3), _collectives.py l. 1154 _AllToAllUneven.apply, whose forward
     (l. 897-923) runs torch.split, .contiguous(), torch.empty, torch.distributed.all_to_all (l. 920, c10d alltoall_)
     and torch.cat (l. 922), none of them on the list, so the policy (_wrapped_policy l. 246-274:
     PREFER_RECOMPUTE off the list) keeps neither the dispatch's received rows nor the combine's returned rows, and
     the block's recompute (early_stop False, l. 285) re-runs both exchanges. Compiled (distributed/compile.py l. 69-70
     transformer_block.compile(fullgraph=True), AC applied first) the traced exchange is the functional op, kept.
     Priced as the model-code rule (Settings.sac_reruns_exchange) on the eager alltoall rows: moe_expert_in and
     moe_expert_out leave the kept set (one layer's worth in the selective buffer), the forward dispatch and combine
     run again in the backward (step.py ep_comm). On a DTensor backend (job field spmd_backend, [sb]) the eager
     exchange is the functional op too: kept, as compiled.
[tk] torchtitan 0.3's TP collectives under op SAC (stack selective.tp_collectives_kept: compiled; tp_collectives_rerun).
     On the default spmd_types backend (pytorch/torchtitan release/0.3 @4f9e9a47d config/configs.py l. 163-165) the
     row-parallel wo / w2 redistribute P -> S(1) under SP (models/common/decoder_sharding.py rowwise_config l. 81-98;
     protocols/module.py _redistribute_outputs l. 673-680; distributed/spmd_types.py l. 389-395) through spmd_types
     0.2.3 _ReduceScatterShard (_collectives.py l. 633-655: a movedim copy, new_empty, c10d
     dist.reduce_scatter_tensor l. 648), and the block inputs S(1) -> R through _AllGatherShard (c10d
     all_gather_into_tensor l. 307); the save list (distributed/activation_checkpoint.py _get_default_save_ops
     l. 31-94) names _c10d_functional.reduce_scatter_tensor (l. 62) and no c10d op, so eager _wrapped_policy
     (l. 246-274) returns PREFER_RECOMPUTE: neither reduce-scatter output is kept (tp_partials drops the 2h / t a
     token a block) and the recompute (early_stop False, l. 285) re-runs both reduce-scatters beside the 2
     all-gathers: 4 TP collectives a layer, 2 pairs (step.py tp_comm). The w2 mm output (the full-length partial
     sum) stays kept (aten.mm, l. 87-91). Compiled (distributed/compile.py l. 69-70, fullgraph) dynamo is taken to
     trace the c10d collectives as the _c10d_functional ops (torch's traceable-collective remap, not read at torch
     2.14.0: stack uncertain), which the list keeps. The re-run reduce-scatter output is consumed by the residual
     add and saved by no backward node: it joins no recompute buffer. docs/torchtitan_model_codes.md.
     Without SP (parallelism.enable_sequence_parallel false, configs.py l. 160) rowwise_config(output_sp=False)
     (decoder_sharding.py l. 81-98) all-reduces the wo / w2 outputs (P -> I): no reduce-scatter runs and
     _c10d_functional.all_reduce is on no save list (l. 31-94), so tp_partials keeps nothing beyond the table's
     mlp_out (the w2 mm output, full length at rep_div 1), eager or compiled; eager re-runs both all-reduces, compiled
     the partitioner re-runs only the attention one, whose sum h the ffn_norm backward reads (1 all-reduce:
     recompute_tp_collectives / 2 pairs, step.py tp_comm; stack uncertain). tests/test_torchtitan03_tp_sac.py.
[sb] torchtitan 0.3's SPMD backend (job field spmd_backend; stack runs.spmd_backends: pytorch/torchtitan release/0.3
     @4f9e9a47d config/configs.py l. 163-165, default 'spmd_types'; functional_collectives_eager). Off spmd_types
     ('partial_dtensor', 'full_dtensor') the dispatcher runs torch's functional all_to_all_single eager as compiled
     (models/common/token_dispatcher.py l. 258-266, 325-333, 353-361: `is_compiling() or get_spmd_backend() !=
     "spmd_types"`), and the TP / SP layouts are DTensor placements whose redistributes are the _c10d_functional
     collectives (the memory oracle's partial_dtensor traces peak at _c10d_functional.reduce_scatter_tensor,
     scripts/memory_oracle/results/sweep.jsonl), both on the op-SAC save list (distributed/activation_checkpoint.py
     l. 62-63): selective.exchange_kept and tp_collectives_kept 'compiled' are priced as 'always' ([xk], [tk]).
[mr] Megatron-LM's rotary tables (stack memory.rope_cache model_cp): NVIDIA/Megatron-LM @d98e8a64
     megatron/core/models/common/embeddings/rotary_pos_embedding.py RotaryEmbedding.forward (l. 177-206) is
     @lru_cache(maxsize=32): the emb it returns, get_emb's torch.cat((freqs, freqs)) of fp32 freqs (torch.outer of the
     positions and the fp32 inv_freq, l. 127-175) shaped [seq, 1, 1, dim] (dim = kv_channels x rotary_percent),
     cut to the CP rank's two chunks by get_pos_emb_on_this_cp_rank (rope_utils.py l. 48-70, index_select: a new
     tensor of seq / cp rows), stays referenced by the cache for the run: 4 B x seq / cp x dim. gpt_model.py builds
     one RotaryEmbedding per GPTModel (l. 183-195: every pipeline stage, one per virtual chunk) and calls it once a
     forward (l. 411-420). With multi-latent attention GPTModel builds none and each MLA layer its own
     (multi_latent_attention.py l. 182-197, called l. 695-705; YarnRotaryEmbedding.forward is @lru_cache(maxsize=32)
     too, yarn_rotary_pos_embedding.py l. 159): one table of qk_rope_head_dim per MLA layer on the stage, the shared
     cache keeping at most 32.
[uf] The job's fusion switches off (stack kernels mlp_activation_gated_unfused_saved, wgrad_unfused;
     stack_db/megatron.yaml sources): Megatron-Core's unfused gated activation (NVIDIA/Megatron-LM @d98e8a64
     megatron/core/transformer/mlp.py l. 320-336, silu(x_glu) * (x_linear + glu_linear_offset)) keeps for the
     product's backward both of its factors, new f-wide tensors (4 B per element of the activation output), where
     the fused bias_swiglu_impl keeps only its input; the routed experts' unfused activation (moe/experts.py
     TEGroupedMLP bias_act_func l. 943-1018) multiplies the routing probabilities in apart and keeps the
     activation's output for their gradient (2 B), where the fused weighted kernel keeps only its input (a GeLU MoE
     has no fused weighted kernel: Megatron runs it unfused); and without gradient-accumulation fusion each linear's
     weight-gradient GEMM writes a bf16 tensor (TransformerEngine @4329ff84 module/linear.py l. 1160-1175) that
     lives until Megatron's backward hook adds it into the main gradient and frees it
     (distributed/distributed_data_parallel.py l. 575-579): one linear's at a time during a layer's backward, the
     layer's largest (Transformer Engine's GroupedLinear returns every local expert's at once: with
     moe_grouped_gemm the routed experts' linear counts all of them), in the recompute buffer (a moment of one
     layer's backward). Without FSDP only (FSDP2's gradient path is its own), and at Megatron-FSDP's fsdp levels
     (optim_grads_params, its HSDP: the modes stating runs.sharding reduce_queue_units), whose per-parameter
     post-accumulate-grad hook does as Megatron's DDP hook (megatron_fsdp.py @d98e8a64 l. 1132-1143 -> _grad_acc
     l. 635-680: param.main_grad.copy_(param.grad); del param.grad, the unit's unsharded bucket [rs] beside it; 0
     before). The CI's gpt3_mcore_te_tp2_zp_z3 row (tp 2, h 512): 4h x h / 2 x 2 B = 1,048,576 B; its MoE twin
     (8 experts, ep 2, etp 2, grouped GEMM): 4 local experts' fc1, 4 x 4h x h / 2 x 2 B = 4,194,304 B
     (tests/test_megatron_ci.py). The output layer's: [ow].
[ow] The output layer's backward without gradient-accumulation fusion (job gradient_accumulation_fusion false; stack
     kernels wgrad_unfused): Megatron's output layer is its own ColumnParallelLinear (NVIDIA/Megatron-LM @d98e8a64
     megatron/core/models/gpt/gpt_model.py l. 272-295; TE's only for the MXFP8 output projection), whose backward
     (tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication.backward l. 637-810) computes the input
     gradient grad_output.matmul(weight) first (l. 683: [s, b, h] over the whole sequence, 2 T h; under SP the reduce-scatter's
     output sub_grad_input beside it, 2 T h / t) and then, fusion off, grad_weight = grad_output.t().matmul(total_input)
     (l. 782), a new (V / t) x h tensor in the activation dtype (2 B a weight element, stack kernels wgrad_unfused),
     returned to autograd and added into the main gradient by the DDP hook (distributed_data_parallel.py l. 575-579). Its
     grad_output is the logits' bf16 gradient (2 B a logit): the unfused loss's fp32 gradient (cross_entropy.py l. 186-210,
     the saved softmax updated in place) is cast to the logits' dtype by autograd's validate_outputs and freed with the
     loss node's saved tensors before the next node runs (torch/csrc/autograd/engine.cpp). So a moment of the last
     stage's backward after the loss's: the final norm's saved input (2 h, /t under SP), the logits' gradient, the input
     gradients and the weight gradient, T (2 h / sp + 2 V / t + 2 h + 2 h / t under SP) + 2 V h / t, against the loss's
     peak (out_act) and a layer's backward buffer; where it is larger the excess is in output_activations. The output
     layer's own saved input (the final norm's output, 2 T h / sp, layers.py l. 604 ctx.save_for_backward(input,
     weight)) is in both moments (stack memory.output_saves_norm_out: megatron true). Without FSDP only, as [uf].
[dw] Transformer Engine's dummy weight gradients (stack memory.te_dummy_wgrads; job gradient_accumulation_fusion on, and
     not fixed off by the plan's sharding mode: Megatron's torch_fsdp2, stack_db runs.sharding job_settings, stacks.mode_value):
     with fused accumulation the wgrad GEMM writes into the parameter's main_grad, and because Megatron's DDP sets
     grad_added_to_main_grad on every trainable parameter (distributed_data_parallel.py @d98e8a64 l. 187; Megatron-FSDP
     megatron_fsdp.py l. 343) each TE linear returns get_dummy_wgrad(main_grad.shape, weight.dtype) to autograd
     (NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/module/linear.py l. 1258-1276, layernorm_linear.py
     l. 1116-1133, grouped_linear.py l. 865-889 and 1131-1158: one per expert weight, all of one shape; Megatron passes
     fuse_wgrad_accumulation=config.gradient_accumulation_fusion, extensions/transformer_engine.py l. 1293, 1524, 2527), and so does
     Megatron's output layer with TE installed (tensor_parallel/layers.py l. 733-762). get_dummy_wgrad (module/base.py
     l. 82, 109-123) caches one torch.empty tensor per (shape, dtype) in the module-level _dummy_wgrads dict: allocated
     at the first backward and never freed (since TE #1651, ba5dc5dd, 2025-04-08; GroupedLinear since #2305, d2945c6a,
     2025-10-27; before them a fresh tensor per call, a transient). Per GPU: 2 B (the bf16 / fp16 weights' dtype) x the
     elements of each distinct weight shape among the linears the rank holds (the GEMMs of its layer kinds but the
     router, a torch parameter; the routed experts' local weights one shape) and the output layer's (V / t) x h on the
     rank holding it; in every moment of the step (term dummy_wgrads). The mode is the stack's (memory.dummy_wgrads:
     Megatron cached) or the job's code version's (job field dummy_wgrads): per_call where TE's linears and Megatron's
     own returned a fresh torch.empty each backward (TE before #1651; Megatron-LM layers.py from 28766b55fb,
     2023-09-05, until get_dummy_wgrad in e7c55de99e, 2025-08-01), freed by the DDP hook right after autograd's
     AccumulateGrad: the size of the unfused weight gradient [uf] (one linear's in a layer's backward, every local
     expert's with grouped GEMMs) and [ow] at the output layer; none before 28766b55fb (the fused GEMM accumulated
     and returned None).
[eg] The word embedding's weight gradient (stack memory.embedding_wgrad_transient): Megatron's VocabParallelEmbedding is
     not a TE linear (NVIDIA/Megatron-LM @d98e8a64 megatron/core/tensor_parallel/layers.py l. 336-365: F.embedding(
     masked_input, weight), l. 362; no gradient-accumulation fusion), so autograd's embedding backward runs: pytorch/pytorch
     @01b9dc56 aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu embedding_backward_cuda_kernel allocates the dense
     gradient grad_weight = at::zeros({num_weights, h}, grad.options()) ((V / t) x h in the gradient's dtype, bf16: 2 B an
     element) and, for a bf16 gradient, fp32 partial sums grad_weight_per_segment = at::empty({numel, stride}) (one row of
     h per index: 4 B T h), beside the incoming gradient over the whole sequence (2 B T h; under SP the reduce-scatter's
     backward all-gathers it). AccumulateGrad hands the gradient to Megatron's DDP hook, which adds it into main_grad and
     frees it (distributed/distributed_data_parallel.py l. 575-579). It is the last op of a micro-batch's backward on the
     stage holding the embedding (the first; with one stage the single one, tied or not: a tied output layer's gradient
     path is the output layer's own moment [ow], at the start of the backward): by then that micro-batch's layer
     activations, the recompute buffer and (one stage) its loss's tensors are freed, the other micro-batches in flight
     and the states are live. Where the moment exceeds them, the excess is in the recompute buffer (a transient of one
     op). Not priced: the sort's index arrays (a few int64 per token: under 1% of the 6 h B a token). Without FSDP only (torchtitan's embedding unit: the reduce-scatter
     moment [tt7], its bf16 gradient and fp32 reduce-scatter input).
[fa] FSDP's fp8 all-gather (torchtitan [float8] enable_fsdp_float8_all_gather, job field fp8_allgather; step.py [15]
     for its traffic): pytorch/ao @36027d82 torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor
     fsdp_pre_all_gather (l. 228-251) casts each converted Linear's sharded weight to float8 and all-gathers its uint8
     data; fsdp_post_all_gather (l. 253-280) wraps the gathered data as the unsharded weight, a Float8TrainingTensor:
     the rank holds 1 B a converted Linear's weight element unsharded (FP8_GATHER_BYTES), in FSDP2's flat all-gather
     buffer and in the unsharded parameters alike, the embedding, norms, routers, routed experts and a bf16 output
     layer at the stack's param_gather_bytes (gathered_bytes). No bf16 copy is made: Float8Linear.forward passes
     self.weight.t() and finds it already cast (torchao/float8/float8_linear.py l. 68-69 tensor_already_casted_to_fp8;
     the transposed view is column-major, what torch._scaled_mm takes, no copy). Its backward's grad-input GEMM takes the
     weight row-major, and preprocess_addmm (float8_ops.py l. 344-345) copies it column-major (b_data.t().contiguous()
     .t()): a 1 B transient of one Linear's weight, w2's (h f / t) the largest, during that GEMM, beside the block's
     output gradient, its fp8 cast and the grad input (T (2 h + h + 2 f / t)); the mul's backward that follows
     (block_backward_extra [tt5]) holds T (2 h + 6 f / t) and w2's bf16 weight gradient (2 h f / t), more whenever
     4 f / t > h: the copy is not the block's peak and has no term of its own (checked for Llama 3 8B and 70B at TP <= 8).
     A converted output layer (fp8_output_layer) likewise: 1 B an element in the all-gather buffer, the root / end
     units, and, where FSDP2 keeps a stage unsharded under PP (fsdp_unsharded_stage, [7]), in the last stage's
     unsharded weights (held_out_cut; before issue 21's pass it stayed at param_gather_bytes there).
[cp1] Context parallel attention's backward (the K/V rotate method: the stack's memory.cp_ring_backward,
     which a job's cp_rotate_method replaces at resolve, planner/cp_rotate.py): torch
     2.13 torch/distributed/tensor/experimental/_context_parallel/_attention.py
     _templated_ring_attention_backward (l. 488-640): fp32 grad_query/key/value (zeros_like, accum_dtype
     fp32 with _cp_options.convert_to_f32, the default), each step's SDPA backward outputs (bf16), the K/V
     torch.cat([key, value]) sent on, _AllGatherRotater's all-gathered K/V of every cp rank kept for the
     loop (torchtitan's default context_parallel_rotate_method "allgather", job_config.py @e347b1e5e) or
     _AllToAllRotater's permuted buffer, and the fp32 dK/dV torch.cat exchanged each step through an
     _AllToAllRotater (ft_c.permute_tensor), the accumulators being views of the received one: a moment of
     the block's backward after its MLP's, where the MLP's weight gradients have joined the block's
     unsharded gradients (memory.cp_attention_backward_extra); the recompute buffer adds the larger of
     the two moments' tensors. Derived from the code, not traced (the oracle has no CP row). Not priced:
     the forward's _SDPAMerger fp32 temporaries (forward time, or the re-run under full AC) and
     FlashAttention's own fp32 dq accumulator (with or without CP).
[cp2] All-gather context parallelism with one kernel (stack context_parallel.kernel one): Llama 3,
     arXiv:2407.21783 sec. 3.3.2 'Context parallelism for long sequences': 'we first all-gather the key
     (K) and value (V) tensors, and then compute attention output for the local query (Q) tensor chunk':
     the gathered K and V, cp times the local, exist while one layer's attention runs; the backward
     (assumed, stack_db llama3-meta context_parallel sources: the paper describes the forward only)
     all-gathers them again and its kernel writes the gathered K/V's gradients, reduce-scattered to
     their ranks in dkv_bytes (fp32: sec. 3.3.2 'Numerical stability'). Priced as one layer's moment in
     the recompute buffer (cp_held_extra, the stack's context_parallel.held), the backward's being the
     larger. Megatron's other --cp-comm-type values (job field cp_comm_type, planner/cp_comm_type.py)
     state theirs the same way, derived from NVIDIA/TransformerEngine @4329ff84 context_parallel.py
     (stack_db megatron cp_comm_types, not traced): all_gather (AttnFuncWithCPAndKVAllGather) holds the
     gathered K/V and one of them re-ordered, 3 cp B a local K/V element, forward; backward the gathered
     bf16 dK/dV zeros, the re-gathered K/V, both query halves' dk/dv over their causal prefixes and the
     re-ordered dK, (7 cp + 1) B a K/V element, and the halves' dq, 2 B a query element; a2a
     (AttnFuncWithCPAndQKVOA2A) holds the caller's Q, K, V beside their contiguous send copies and one
     all-to-all output (6 B a query, 4 B a K/V element), backward the kernel's dQ, dK, dV beside their
     send copies (6 B, 4 B) and the re-ordered output gradient (2 B an output element); and a2a saves
     its kernel's output (head-split, out_part) beside the all-to-all's result the output projection
     saves: 2 B an output element more per layer where the core is not recomputed
     (context_parallel.saved_out_bytes; under full recompute in the one layer's buffer); a2a+p2p
     holds and saves as a2a (AttnFuncWithCPAndKVP2P l. 2081, 2147: out_part saved before the output's
     all-to-all).
[cp3] Context parallel attention's forward in Transformer Engine's P2P ring (stack memory.cp_forward_merge; Megatron's
     default --cp-comm-type p2p): NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/
     dot_product_attention/context_parallel.py AttnFuncWithCPAndKVP2P.forward keeps, until the merge after its ring
     loop (l. 2031-2121), every step's output out_per_step (bf16: the fp32 dequantization of l. 1980-1986 is fp8
     attention's, [fa8]) and fp32 softmax_lse_per_step (l. 1723-1724), and every
     K/V buffer of the ring (p2p_comm_buffers, l. 1734-1760: the local torch.cat((k, v)) and one received per step,
     none released in the loop), beside the roped k and v the layer passed in. Causal (load-balanced chunks): rank
     r's steps 0..r attend its whole local query, the later ones its second half, so rank cp - 1 (Megatron logs the
     last global rank, the last CP rank of the default order) holds cp outputs of its local query. Per GPU, T the
     local tokens of the micro-batch, a / t query heads, k' = max(k / t, 1) KV heads, head dim d: cp T a d / t x 2 B
     + cp T a / t x 4 B + cp T k' d x 4 B beyond what the layer saves (its q, the last K/V buffer and the merged
     output, in the activation table). The merge itself (jit_fuser = torch.compile, jit.py l. 36-38) writes the bf16
     output without an fp32 copy. The moment is the last layer's forward of the last micro-batch in flight: the
     stage's states and saved activations (its own later tensors counted, an upper bound by the layer's MLP
     tensors) and these; where it exceeds the peak above, the excess is in the recompute buffer (the transient of
     one layer). all_gather and a2a have no such merge (planner/cp_comm_type.py turns it off): [cp2]; a2a+p2p
     (hierarchical) runs it over its p2p ranks (cp / the all-to-all group's), its all-to-alls' copies in [cp2].
     With fp8 attention ([fa8]; fp8 = fp8_dpa, Megatron's fp8_dot_product_attention, is_input_fp8 off) the recipe's
     ring (stack_db fp8_recipes fp8_attention cp_ring_kv_bytes, cp_merge_out_bytes, cp_inputs_bf16_bytes, with
     sources): l. 1579-1583 quantize q, k, v up front and ring their fp8 data (1 B; MXFP8 keeps them bf16 and
     quantizes each step's slices, cp_p2p_fwd_fused_attn l. 976-979: 2 B); l. 1979-1986 dequantize every step's
     output to fp32 (4 B, CP_FP8_STEP_OUT_BYTES), kept in out_per_step to the end of forward; the merge writes
     out in that fp32, then out_part (l. 2081) and out_f16 (l. 2124) are bf16 copies and delayed scaling's
     O_quantizer makes the saved out_fp8 (l. 2125-2130): 4 + 2 + 2 B an output element beyond the saved one
     (current scaling and MXFP8 save out_part: 4 + 2 B); the caller's bf16 q, k, v stay referenced beside the
     saved fp8 ones under delayed and current scaling (2 B; MXFP8 saves the bf16 q and kv, l. 2153-2154).
     Per local token: cp (4 a d / t + 4 a / t + 2 c k' d) + o a d / t + i (a d / t + 2 k' d), c, o, i the
     recipe's three figures. The saved q, kv under CP: [fa8]'s cp_qkv_saved_bytes (MXFP8: the bf16 ones, 2 B).
     Megatron's fp8_multi_head_attention (TE fp8_mha) adds nothing: [fa8]. The ring's backward: [cp4].
[cp4] Context parallel attention's backward in Transformer Engine's P2P ring (stack memory.cp_p2p_backward, bf16;
     under fp8 attention the recipe's fp8_attention cp_backward; planner/cp_comm_type.py keeps it for p2p and
     a2a+p2p, over its p2p ranks, as [cp3]): NVIDIA/TransformerEngine @4329ff84 context_parallel.py
     AttnFuncWithCPAndKVP2P.backward (l. 2253-2990) allocates its buffers before the ring loop (l. 2510), the same
     on every CP rank, and keeps them to its end, beside the saved q, kv, out and the incoming output gradient.
     Per element of the local query Q (T a d / t) and of the local K and V KV (T 2 k' d / t), k' = max(k / t, 1):
     bf16: dq_buffer (empty_like(q), 2 B a Q element), two (2, kv) send / receive buffers (K/V and dK/dV, 8 B a
     KV element, l. 2446-2452) and the diagonal step 0's kernel outputs dq_, dk_, dv_ over the whole local query
     and K/V (2 + 2 B; the later steps' cover half of one): 4 Q + 10 KV. Delayed scaling: dout quantized (1 B a Q
     element, l. 2386), cp uint8 dq partials (l. 2404-2408), kv_recv (1 B) and cp-deep uint8 dK/dV send and
     receive buffers (2 cp B, l. 2415-2421); after the loop combine_and_dequantize (l. 2880-2887, utils.py
     l. 2969-2978: a torch.cat of the fp8 partials, cp B, dequantized to one fp32 tensor, 4 cp B) and each
     partial's fp32 sum and bf16 copy (l. 2888): three moments, (1 + 6 cp) Q + (1 + 7 cp) KV, (7 + 5 cp) Q +
     (1 + 6 cp) KV (dq's sum), (3 + 5 cp) Q + (5 + 6 cp) KV (dv's sum), the largest priced. Current scaling:
     dout quantized (1), fp32 dq and dK/dV accumulators (4 + 4, l. 2410-2429), kv_recv (1), the cp-deep uint8
     dK/dV buffers allocated all the same (2 cp), a step's fp8 partials and their fp32 copies (1 + 4 each,
     l. 2691): 10 Q + (10 + 2 cp) KV. MXFP8: no dout quantized up front, kv_recv bf16 (2), the kernel's
     partials MXFP8 row- and column-wise (2.0625): 10.0625 Q + (12.0625 + 2 cp) KV (its per-step quantizations
     of q, k, v and dout inside cp_p2p_bwd_fused_attn, l. 1251-1269, not priced: at most 2.0625 B an element each,
     freed when the step's kernel returns, before the fp32 copies of l. 2691 are made, so that moment holds at most
     2.0625 (2 Q + KV) beside the kernel's partials against the priced 4 (Q + KV): below it wherever
     a / t <= 31 k' (a / k at most 16 among model_zoo's models). stack_db megatron memory.cp_p2p_backward and
     fp8_recipes.*.fp8_attention.cp_backward state each moment as fixed + per-rank bytes (schema
     CPBackwardMoment). One attention layer's backward is a moment of that layer beside what it holds then:
     added to the recompute buffer as [cp2]'s held bytes (the re-run layer's tensors under full recompute);
     the forward merge's moment [cp3] adds only its excess beyond it. Llama 3 8B, tp 1: 36,864 B a local token
     in bf16 (cp 2, 4,096 tokens: 144 MiB). Derived from the code, not traced; not priced: the kernels' own
     workspaces, the fp32 softmax statistics' transposed copies (4 B a head a token).
[cp5] What Transformer Engine's context-parallel attentions save and hold of the softmax statistics (issue 21,
     branch tecp; NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/dot_product_attention/
     context_parallel.py). Saved (ctx.save_for_backward): AttnFuncWithCPAndKVP2P (p2p, a2a+p2p) its q, one K/V
     buffer of the local size (p2p_comm_buffers[-1]), the merged output and one merged fp32 softmax_lse [b, a/t,
     s/cp] (torch.clone of step 0's at l. 1989, corrected in place per step; saved l. 2182-2193), the per-step rng
     states and cu_seqlens (cp x 2 int64, cp x (b + 1) int32: bytes); the per-step lists out_per_step and
     softmax_lse_per_step are locals, freed when the forward returns ([cp3] prices them at the merge).
     AttnFuncWithCPAndKVAllGather saves its two query halves' lse (l. 3432-3441: together one [b, a/t, s/cp]) and
     AttnFuncWithCPAndQKVOA2A the kernel's aux tensors (l. 4181, 4273-4282: lse [b, a/(t cp), s]): per GPU every
     variant saves the same 4 B a head a local token as the kernel without CP, which the activation table prices
     for every flash kernel (softmax_lse, layers/attention.py [ls]: 0.1% of a Llama 3 8B layer's saved bytes).
     Held beyond them, and priced here: the P2P backward's contiguous copy of the merged lse's second half,
     softmax_lse_ = softmax_lse.view(..., 2, -1)[..., 1, :].contiguous() (l. 2327-2346), made before the ring
     loop on every CP rank but the last (second_half_lse_seqlen, l. 2027-2029: causal and rank < cp - 1) and
     kept to the backward's end, beside every moment of [cp4] (bf16 and every fp8 recipe alike): fp32 over half
     the local query rows, CP_BWD_LSE_HALF_BYTES = 4 x 1/2 = 2 B a local token and query head, T a / t x 2 per
     layer (cp_backward_lse_copy_bytes; a2a+p2p over its p2p ranks, as [cp4]). Per GPU the heaviest rank's:
     Megatron logs the last rank, which has none (an over-count there of this figure, one layer's: the Megatron
     CI's CP rows 4 to 32 KiB). Hand check: Llama 3 8B (32 heads), tp 1, cp 2, one micro-batch of 8,192
     tokens: 4,096 local tokens x 32 x 2 B = 262,144 B (tests/test_memory_unpriced_mechanisms.py). Not priced:
     with packed sequences (qkv_format thd, softmax_lse_in_packed_format) the fused backend's transposed copies
     (l. 2341-2346: 4 B a head a token more, the [cp4] docstring's); the planner plans no packed sequences.
[fa8] fp8 attention (job field fp8_attention; Megatron-Core TransformerConfig.fp8_dot_product_attention, Transformer
     Engine's recipe fp8_dpa; stack_db fp8_recipes fp8_attention, with sources): NVIDIA/TransformerEngine @4329ff84
     transformer_engine/pytorch/attention/dot_product_attention/backends.py FusedAttnFunc.forward quantizes q, k, v
     (combine_and_quantize, l. 1392) and saves (l. 1486-1498, ctx.save_for_backward l. 1569) the quantized q, k, v
     in place of the bf16 ones (fp8_recipes qkv_saved_bytes: 1 B with delayed and current scaling, 2.0625 B with
     MXFP8, which keeps row-wise and column-wise copies with their e8m0 scales) and its output at out_saved_bytes
     (delayed: the fp8 output, 1 B; current scaling and MXFP8: the bf16 output, 2 B) beside the output projection's
     own quantized input. Per token and layer, against bf16 attention under fp8 GEMMs (q, k, v at 2 B, the output
     at 2 + 1 B): delayed saves (a/t + 2 k') d + a d / t B less, current scaling (a/t + 2 k') d less, MXFP8 1/16
     (a/t + 2 k') d more (gated attention: the gate half of q stays bf16). The bf16 q, k, v TE quantizes are freed
     (the fused rotary's outputs, saved by nothing else). Only where the core's state is kept: Megatron's selective
     recompute checkpoints the core with its bf16 inputs (as without fp8 attention), and its buffer is priced
     without the re-run's fp8 copies (one layer's). The FP8 backend's fp32 softmax statistics (M, [b, h, s, 1] at
     @4329ff84: fused_attn_fp8.cu l. 1129-1134) replace the F16 backend's one log-sum-exp, 4 B a head a token either
     way (softmax_lse, layers/attention.py [ls]). Under CP > 1 TE's context-parallel
     attention saves in place of the kernel (context_parallel.py @4329ff84): AttnFuncWithCPAndKVP2P (p2p, a2a+p2p)
     its q and one K/V chunk of the local size (kv = p2p_comm_buffers[-1], l. 2138), the fp8 data under delayed and
     current scaling (l. 2150) and under MXFP8, whose q_fp8 stays None (l. 1536, 1575-1583), the bf16 q and kv
     (f16_tensors = (q, kv, out_f16), l. 2153-2154); AttnFuncWithCPAndKVAllGather the local q, k, v the same way
     (l. 3398-3418); AttnFuncWithCPAndQKVOA2A the kernel's quantized q_part, k_part, v_part (MXFP8 row- and column-
     wise, used_in_backward, l. 4092-4099, 4253) as without CP. Priced from the recipe's cp_qkv_saved_bytes (1, 1,
     2 B) where cp > 1 (np.where on the plans' cp) unless the stack's variant is in cp_comm_types.fp8_kernel_saves_qkv
     (a2a): MXFP8 on the ring and the all-gather 0.0625 (a/t + 2 k') d B a token a layer less than before (Llama 3 8B,
     tp 1: 384 B; cp 2, 4,096 tokens, 32 layers: 48 MiB). Megatron's fp8_multi_head_attention (TransformerConfig,
     no CLI flag at @d98e8a64, arguments.py l. 2334; passed as fp8_mha to TEDelayedScaling only, extensions/
     transformer_engine.py l. 3351) changes no saved tensor: TE's DotProductAttention only forces fp8_dpa on with it
     (dot_product_attention.py l. 1266-1273), is_input_fp8 is whether q arrives quantized (backends.py l. 1357,
     context_parallel.py l. 1514, 3132, 3998) and Megatron hands it the bf16 roped q, k, v and asks no fp8_output:
     the same bytes as fp8_attention. No record in tests/data runs fp8 attention: these bytes are derived from code,
     unchecked against a measurement.
[lg1] Lightning-AI/lightning-thunder @69ee6a218 thunder/benchmarks/benchmark_litgpt.py (stack_db
     litgpt-bench): train() keeps `logits = logits.reshape(...)` referenced through loss.backward(),
     so the bf16 logits (2 B a logit) are live while the layers' backward runs; the torch FSDP1
     root unit (wte, ln_f, lm_head: not wrapped apart) keeps its parameters unsharded after its
     forward (torch/distributed/fsdp/_runtime_utils.py _post_forward_reshard: "Do not free the
     root's parameters in the post-forward for FULL_SHARD") and, its parameters being torch.split
     views of one flat parameter (_flat_param.py _get_unflat_views), the output layer's weight
     gradient waits for the embedding's, at the end of the backward, before the unit's
     reduce-scatter; during a block's backward FSDP1 holds that block's and the prefetched block's
     unsharded parameters (BACKWARD_PRE, the default) and the block's unsharded flat gradient.
     At the loss's own peak none of these but the logits is allocated beside the loss (the root's
     pre-backward hook, which prefetches the last block, fires on the logits' gradient, after the
     loss's backward): with memory.loss_peak_apart the recompute buffer counts them, the moment
     of the layers' backward (stack fields memory.loop_holds_logits, fsdp.output_grad_held,
     fsdp.backward_gathered_units, fsdp.backward_grad_units).
[lg2] K and V expanded to the query heads (stack memory.expands_kv_heads): Lightning-AI/litgpt v0.4.11 litgpt/model.py
     CausalSelfAttention.forward l. 251-257 (the litgpt Thunder's benchmark pins: lightning-thunder requirements/
     test.txt litgpt==0.4.11): under GQA (n_query_groups < n_head, no KV cache) k and v are expand()-ed to
     (B, n_query_groups, q_per_kv, T, head_size) and reshape()-d to (B, n_head, T, head_size), a copy; k is roped
     (apply_rope + torch.cat, a new n_head-wide tensor) and F.scaled_dot_product_attention (l. 287, 313) saves the
     two for its backward: 2 x 2 B x n_head x head_size a token where the table (Attention.tensors) counts the KV
     heads' 2 x 2 B x k x head_size; the smaller qkv output is saved by nothing (the projection saves its input; the
     rope's products save cos and sin). A layer's saved activations, so under full recompute the re-run block's
     (the recompute buffer). Inductor's compiled graph is assumed to hand SDPA's backward the same expanded tensors.
[pc] Padded chunks (stack chunked_attention.pads_last_chunk; layers/attention.py [13], Megatron-Bridge @dc805f5cf
    llama4_utils.py chunkify l. 78-122 and Llama4SelfAttention.forward l. 294-302, 417-426): the chunked layer's saved q,
    k and v are the padded ones, p = ceil(s / c) c / s times the real part's (Attention.tensors), and so is Transformer
    Engine's saved output (TE @4329ff84 backends.py l. 1535-1569); the output folded back to [s, b, a d] is a copy
    whose [:s] view the output projection saves as its bf16 input (its storage p x), or, where the projection saves
    its own quantized input (fp8 / nvfp4 with the stack's attn_out among its fp8 saves), a quantized tensor of the s
    real tokens (attn_out's own width) and the copy is freed. Beyond attn_out's 2 B a d / t a token (the projection's
    input, which in Megatron is the core's output itself): (2p - 1) x 2 B a d / t in bf16, (p - 1) x under fp8 (the
    core's padded output beside the narrow input, attn_out's width adding the core's unpadded one); where selective
    recompute re-runs the core (TE's output unsaved, the cp2 pattern below) (p - 1) x in bf16, 0 under fp8. Full
    recompute re-materialises the core-kept figure with the layer's backward (a buffer).
[lg3] A window as a dense mask (stack windowed_attention; layers/attention.py [11]): litgpt v0.4.11 litgpt/model.py
     l. 280-285 builds, in each windowed Block's forward, mask = torch.ones(T, T, dtype=q.dtype).triu(1) masked to
     -inf plus the window's tril(-w) band, and l. 313 hands it to F.scaled_dot_product_attention(attn_mask=mask,
     is_causal=False): the memory-efficient kernel saves it for its backward. One [s, s] mask of mask_bytes (bf16:
     2 B) an element per windowed layer and micro-batch, whatever the micro-batch size (it broadcasts over the
     sequences and heads): 2 s^2 B, 32 MiB at s = 4,096. A layer's saved activation, so under full recompute the
     re-run block's (the recompute buffer). The forward's transient triu / tril copies are not priced (stack
     uncertain).
[opt] The optimizer step, a moment of its own after the backward (stack memory.optimizer_step_temporaries,
     job field optimizer_implementation, default memory.optimizer_default): torch 2.13 torch/optim/adam.py
     _multi_tensor_adam (foreach; one group per device and dtype, every local parameter at once) allocates
     exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs) (l. 760-769; AdamW's decoupled weight decay
     and a float beta2 copy no gradient, and `del device_grads` comes first): one temporary the size of the
     local optimizer parameters in the state dtype (adam / 2, Adam keeping two such moments); _fused_adam
     (torch fused AdamW; TE / Apex FusedAdam in Megatron) none. At the step the activations, the loss and
     FSDP's gathered units are freed; the states, every sharded gradient (FSDP2's, views of reduce-scatter
     outputs: allocated now, no longer only reserved), the workspaces and the temporaries are live. The
     stage's allocated peak is the larger moment (the term optimizer_step is the excess); the reserved peak
     grows only by what the reduce-scatter pool did not already hold. torchtitan's `[optimizer]
     implementation` defaults to fused (job_config.py @e347b1e5e l. 151), so the moment rarely sets the
     peak; a foreach step's temporaries, freed and re-requested every step in per-parameter sizes between
     the activations' blocks, matter mostly through fragmentation, inside the band of [13].
     Megatron-DeepSpeed (stack megatron-deepspeed: fused only, its default): get_megatron_optimizer builds apex
     FusedAdam on a CUDA accelerator (DeepSpeed's FusedAdam with --ds_fused_adam; microsoft/Megatron-DeepSpeed
     @f4157bea megatron/optimizer/__init__.py l. 3-9, 96-105) and returns it bare under --deepspeed (l. 115-116) to
     deepspeed.initialize(optimizer=...) (training.py l. 573, 606-614); DeepSpeed's engine takes a client optimizer
     as the basic optimizer and never reads the JSON's optimizer section then (microsoft/DeepSpeed @38327e07
     engine.py _configure_optimizer l. 1355-1366; the section's FusedAdam or, with params.torch_adam, torch.optim
     Adam / AdamW only without one, _configure_basic_optimizer l. 1405-1441). Every mode steps it: zero0's
     FP16_Optimizer (apex's FusedAdam counted fused, engine.py l. 1545-1549), bf16_optimizer, ZeRO-1/2 one group
     at a time on its flat fp32 partition (stage_1_and_2.py _optimizer_step l. 1811-1821), ZeRO-3 one sub-group at a
     time (stage3.py step l. 2111-2120); multi_tensor_adam over the tensor lists, no parameter-sized temporary. A
     torch foreach AdamW there (a DeepSpeed launcher other than Megatron-DeepSpeed with torch_adam, or a client's
     torch.optim.AdamW: no stack here runs one) would hold exp_avg_sq_sqrt (pytorch/pytorch torch/optim/adamw.py
     _multi_tensor_adamw: torch._foreach_sqrt(device_exp_avg_sqs), fp32 like the master it steps, freed on return):
     4 B x the group's elements stepped at once, the largest ZeRO-1/2 group's partition or ZeRO-3 sub-group (beside
     its fp32 gradient, [sg] / [z3s]), the BF16_Optimizer's and FP16_Optimizer's largest group's fp32 master
     (torch.optim.*.step runs its groups one after the other); the FP16_Optimizer would be FP16_UnfusedOptimizer
     instead (engine.py l. 1577-1588). A job's optimizer_implementation foreach on the stack is refused.
[mu] Muon (job field optimizer muon; Megatron-LM --optimizer muon, stack_db megatron runs.optimizers): NVIDIA/Megatron-LM
     @d98e8a64 megatron/core/optimizer/__init__.py _get_megatron_emerging_optimizer (l. 727-990) splits the parameters
     by emerging_optimizers.py _is_muon_excluded (l. 140-147: use_muon False, the word embedding and output layer
     tagged is_embedding_or_output_parameter, or not 2-D) onto --muon-scalar-optimizer (default adam, arguments.py
     l. 2661-2664: Adam's two fp32 moments, bpp.optimizer) and TensorParallelMuon (l. 177-259) for the rest, wrapped in
     Float16OptimizerWithFloat16Params under --bf16 (l. 899-902; layer_wise_optimizer.py l. 579-590 on the
     layer-wise path): fp32 main parameters as under Adam (bpp.master), and one state, NVIDIA-NeMo/Emerging-Optimizers
     v0.3.0
     (the tag Megatron's pyproject.toml l. 248 pins) orthogonalized_optimizer.py l. 144-145 momentum_buffer =
     torch.zeros_like(p.data) of that fp32 main parameter: 4 B a parameter (MUON_MOMENTUM_BYTES) in place of 8.
     Which parameters: layers/common.py [mu] (muon_params_of). Sharding: without --use-distributed-optimizer every rank
     holds every state (sharding none); with it validate_args turns the distributed optimizer off and the layer-wise
     one on (arguments.py l. 1725-1737: use_layer_wise_distributed_optimizer), which shards whole parameters over the
     dp x cp ranks (dense) and the expert-data-parallel ones (experts) (layer_wise_optimizer.py shard_params
     l. 614-641): the states of a rank are 1 / d of the stage's on average (sharding zero1 prices that). The
     Newton-Schulz iterations (--muon-num-ns-steps 5, muon_utils.py l. 127-225: per step X X^T, then two addmm, in bf16
     under --muon-fp32-matmul-prec medium) run at the optimizer step on the rank's own matrices, one at a time, after
     the backward's activations are freed: their GEMMs are the step time's term muon_ns (step.py [28]); their
     temporaries are the optimizer step's moment (optimizer_step, [opt]; muon_step_temporaries, MUON_*_BYTES): under
     the default --muon-tp-mode duplicated newton_schulz_tp (l. 272-278) all-gathers the shards of a TP-split matrix
     (a list of tp fp32 shards and their torch.cat, 8 B an element of the whole matrix, at tp 1 too: a group of one),
     and newton_schulz holds the larger of the fp32 normalised X beside its bf16 cast (6 B), the loop's two bf16 X
     and the m x m bf16 A and B (4 B an element + 4 B m^2, m the smaller side) and the last bf16 X beside its fp32
     result (6 B), of the largest matrix the stage's Muon steps (layers/common.py [ns]: linear_qkv split into q, k,
     v); the rank holding it is the one priced (one rank holds it whole under the layer-wise optimizer). Under
     --muon-tp-mode blockwise no gather and the shard's; under distributed no gather either, newton_schulz on the
     rank's shard oriented on the matrix's unpartitioned side (layers/common.py muon_distributed: m that side, its
     Gram all-reduced in place, muon_utils.py v0.3.0 l. 315-317). Under --muon-fp32-matmul-prec high or low X stays
     fp32 (no bf16 cast, l. 203-213; the last .to(float32) a no-op, l. 220): the normalised X alone (4 B), or the
     loop's two fp32 X and the fp32 A and B (8 B an element + 8 B m^2). The TP gathers' and Gram all-reduces' time is
     in tp_comm (step.py [28]). The layer-wise optimizer's parameter all-gather: with the layout,
     DDP's own start_param_sync into its buffer (no new tensor); on the legacy path allgather_params' flattened shard
     and receive buffers, the stage's bf16 parameters, a moment after the step (legacy_gather_bytes).
     Whole tensors (job field optimizer_whole_tensors; --no-use-layer-wise-param-layout, arguments.py l. 3160-3169): with
     no precomputed layout the layer-wise optimizer keeps every parameter in its own shard list and assigns them sorted
     by numel to the dp x cp ranks in ping-pong order (layer_wise_optimizer.py _shard_params_ping_pong l. 713-762):
     the largest tensor, the word embedding (V / tp x h, Adam's), lands whole on one rank, whose fp32 master and two
     moments of it (12 B an element) are whole there: priced for that rank (whole_tensor_excess), the rest at 1 / d;
     on a middle stage the largest are a layer's Muon matrices (fc1, or linear_qkv whole), a rank holding
     ceil(k / d) of the k largest (whole_tensor_state_bytes: max(M / d, ceil(k / d) b), the experts' over the
     expert-data-parallel ranks the same).
     In the corpus's Muon MoE rows (88 dense tensors, dp 8) the embedding is the 88th, the loop's 8th slot: dp rank 7,
     the last rank, the one Megatron logs. With the layout (the default) the Adam parameters go to a distributed
     optimizer of their own, byte-sharded (optimizer/__init__.py l. 826-946), and the Muon ones are bin-packed whole
     (layer_wise_optimizer.py _compute_per_buffer_param_layout l. 196-444) into shard-aligned buckets: 1 / d each on
     average, but the buffer DDP allocates (bf16 parameters and gradients, every rank) is dp_size x the padded shard,
     at least the largest parameter, and the rank holding that parameter holds its main parameter and momentum
     whole (muon_layout_excess: both floors; 64 x fc1 for Llama 3 8B at pp 8, dp 64, where the parameters are
     4 layers x 218e6: the layout's padding, which the code's "up to 30%" bound by its per-bucket cap does not
     cover once no shard fits under the cap). With model chunks (vpp > 1) each chunk has its layout, and each
     layout's LPT sends its costliest parameter to shard 0 (empty compute loads, min() takes the first): dp rank 0
     holds every chunk's largest whole, their sum (4 x fc1 for Llama 3 8B at pp 2, vpp 4, dp 8, above the even
     M / 8). MLA's down projections (linear_q_down_proj r_q x h, linear_kv_down_proj (r_kv + d_rope) x h: TELinear
     parallel_mode duplicated, multi_latent_attention.py @d98e8a64 l. 524-590) are 2-D, untagged and whole on every
     TP rank: Muon steps them (_is_muon_excluded l. 140-147 does not exclude them), not split (is_qkv tags
     linear_qkv.weight only, optimizer/__init__.py l. 790-796, 'TODO(deyuf): support MLA') and not gathered
     (partition_dim -1 -> None, emerging_optimizers.py l. 403-405): layers/attention.py MLA.muon_matrices' "rep".
[sg] The optimizer step's copies of the gradients below FSDP, and Megatron-FSDP's fp32 copy at every level ([mg])
     (term step_grad_copies; stack_db runs.sharding step_grads: flat, fp32, partition_only, per sharding mode). DeepSpeed ZeRO-1/2 (stage_1_and_2.py @38327e07, no
     cpu_offload): the reduction's epilogue (independent_gradient_partition_epilogue l. 764-808) leaves the rank's
     partition of the gradients in grads_in_partition (the model dtype, averaged_gradients its views), releases the
     IPG buffers and frees every other gradient (zero_grad(set_to_none) l. 807: ZeRO-1's full bf16 gradients); step
     (l. 1882-1916) then runs, per parameter group, self.flatten(averaged_gradients[i]).to(fp32) (l. 1896-1897): a
     flat copy of the partition in the model dtype (_flatten_dense_tensors, a torch.cat) and its fp32 copy at once,
     the fp32 one kept as the fp32 partition's .grad to after the group's step (l. 1916); the optimizer adds none
     (Megatron-DeepSpeed's apex FusedAdam, [opt]). The moment: the bf16 weights, the partition's fp32 master and Adam m, v, the partition's gradients
     and L x (2 + 4) B (L the partition's elements, one parameter group assumed: Megatron-DeepSpeed's no-weight-decay
     group of biases and norms is small). DeepSpeed MoE (stack step_grads.moe_group_params): Megatron-DeepSpeed's
     --create-moe-param-group hands the groups to deepspeed/moe/utils.py split_params_into_different_moe_groups_for_
     optimizer (@38327e07 l. 72-148), which moves the routed experts' parameters to groups of their own, cut into runs
     of at most max_group_size = 178,956,971 elements of the rank's experts (l. 74, 122-143; a parameter above it
     alone), each partitioned over the expert-data-parallel group (stage_1_and_2.py _configure_moe_settings
     l. 616-641); step's loop (l. 1862-1916) flattens and converts one group at a time and frees its fp32 gradient
     (l. 1916) before the next, while grads_in_partition, one tensor over every group's partition
     (copy_grads_in_partition l. 1344-1355), stays referenced by the groups not yet stepped. So the moment holds the
     partition's gradients of every group (2 B x L) and the copies of the largest group only: L_dense, or
     min(the rank's experts, max(178,956,971, the largest expert weight)) / d_e (an upper bound: a run ends before
     the parameter that would overflow it; Mixtral 8x7B's experts, 176,160,768 a group, priced 178,956,971), where
     this summed every group (Mixtral 8x7B, ZeRO-2 on 8 GPUs, EP 8: 6 B x 5.84e9 -> 6 B x 2.01e8); the norm's fp64
     piece is the largest parameter's part of its own group's partition.
     Megatron-LM @d98e8a64: main_grad.float() (distrib_optimizer.py _copy_model_grads_to_main_grads l. 2792, of the
     rank's shard; optimizer.py l. 1097 under DDP, of every gradient) is an fp32 copy only where the grad buffer is bf16
     (--grad-reduce-in-bf16: bytes_per_param mixed16; the default fp32 buffer's .float() is the tensor itself), kept
     to the next train_step's optimizer.zero_grad() (training.py l. 3044), before its forward: a moment of the step,
     the grad buffer kept. The precision-aware optimizer (--use-precision-aware-optimizer; the job's precision_aware_optimizer,
     plan.Settings.precision_aware, by default on where Adam's moments are below fp32) makes none where TE's FusedAdam
     holds the master weights (plan.Settings.te_master; stack step_grads fp32_decoupled te_master):
     use_precision_aware_optimizer_no_fp8_or_ds_fp8 (optimizer_config.py l. 407-413: main weights below fp32, or no fp8
     recipe or delayed scaling, or the CPU offload, which planner/offload.py prices apart) hands FusedAdam the grad
     buffer's shard itself as decoupled_grad (distrib_optimizer.py l. 2784-2790; optimizer/__init__.py l. 576-584:
     master_weights, use_decoupled_grad, master_weight_dtype), whatever the main gradients' (--main-grads-dtype bf16:
     a bf16 buffer, arguments.py l. 1215) and the moments' dtypes; FusedAdam's master is then an int16 remainder beside
     the bf16 weights where it is fp32 (store_param_remainders, optimizer_config.py l. 192, no flag turns it off;
     TransformerEngine @4329ff84 fused_adam.py l. 213-215, 612: master 2 B, plan._bytes_per_param). Under another fp8
     recipe with fp32 main weights Megatron keeps its own fp32 master and the copy (l. 2792). Llama 3 8B on 8 H100,
     the distributed optimizer, seq 1,024, full recompute, --main-grads-dtype bf16 --exp-avg-dtype bf16
     --exp-avg-sq-dtype bf16: 2 P + 2 P + 2 L + 4 L held; the step held 4 L more (4 P + 10 L, 43.75 GB, term
     2.81 GB), now none, the backward's 4 P + 6 L + one layer the peak (40.94 GB); fp8 blockwise keeps the copy,
     4 P + 12 L (tests/test_precision_aware_step.py). The step's moment is kept + copies - the gradients freed; the term is its excess over the
     backward's peak (the stage's allocated peak is the larger). DeepSpeed ZeRO-2 on Llama 3 8B, 8 GPUs, seq 1,024,
     full recompute: 2 P + 20 L against 2 P + 14 L + one layer: +4.49 GiB; ZeRO-1 frees 2 P - 2 L first: the step
     sets its peak only at small d (2 P + 20 P / d above 4 P + 12 P / d + the activations needs d < 4). Megatron's
     distributed optimizer, mixed16, same plan: 4 L beside 4 P + 12 L: +2.62 GiB. DeepSpeed's gradient norm comes
     first (step l. 1857, get_grad_norm_direct l. 1699: g.double() of one parameter's piece of the partition at a
     time, beside the partition's gradients; norm_fp64): 8 B x min(the stage's largest parameter, L), the largest a
     layer GEMM's weight N x K, the embedding on the first stage, the output layer on the last (V x h / tp), at most
     the worst rank's (a rank's piece is the part of the parameter inside its partition); the moment is the larger of
     the two, the norm's only where one parameter covers more than 3/4 of a partition (Llama 3 8B, ZeRO-2 on 64 GPUs:
     L = 125M below the embedding's 525M, 8 L against 6 L). Not priced: the parameters straddling a partition's ends
     (grads_in_partition holds them whole, l. 1344-1352). With cpu_offload the step's copies are the host's (the
     updated partition's copy back to the GPU is [ocb]); the BF16_Optimizer path is its own mode, [bo]. Nothing else of the step is
     parameter-sized: Megatron's clip-grad norm (clip_grads.py get_grad_norm_fp32, multi_tensor_l2norm: one output
     per chunk) and TE / Apex FusedAdam (multi-tensor kernels, no workspace), torchtitan's clip_grad_norm_
     (torch.nn.utils.get_total_norm, _foreach_norm: one scalar a tensor; distributed/utils.py @e347b1e5e l. 399-475);
     FSDP2's foreach AdamW is [opt], DeepSpeed ZeRO-3's [z3s]; Megatron-FSDP's modes return before the distributed
     optimizer's copy (distrib_optimizer.py l. 2767-2771) and make their own, [mg].
     DeepSpeed's FP16_Optimizer (megatron-deepspeed zero0, fp16 at stage 0: flat_fp32; fp16/fused_optimizer.py
     @38327e07 step l. 246-340, not fused_adam_legacy, DeepSpeed's default): per parameter group
     _flatten_dense_tensors([p.grad.to(fp32) for p in group]) (l. 285-288): every gradient's fp32 copy and their
     fp32 flat cat at once, L x (4 + 4) B over the whole (replicated) group, beside its fp16 gradients, freed only
     after the flatten (l. 309-310); the flat kept as the fp32 master's .grad (l. 291) to after optimizer.step
     (l. 335-340). One parameter group assumed, as above (with more, a group's copies beside the earlier groups'
     4 B flats: at most 8 B x L too). Not priced: CheckOverflow's and the norm's per-tensor temporaries.
[bo] DeepSpeed's BF16_Optimizer (stack_db megatron-deepspeed runs.sharding bf16_optimizer, level zero1,
     grad_accum_bytes 4, grad_allreduce; term gradients): what the engine builds for bf16 at ZeRO stage 0 and for
     bf16 at stage 1 with data_types.grad_accum_dtype fp32 without offload (microsoft/DeepSpeed @38327e07
     engine.py get_data_types l. 1010-1025, _do_optimizer_sanity_check l. 1300-1350; the DeepSpeed JSON reader
     selects it, trainers/deepspeed.py gradient_path). bf16_optimizer.py _setup_for_real_optimizer (l. 126-200):
     the bf16 parameters whole (bf16_groups_flat), the fp32 master a partition over the data-parallel ranks
     (fp32_groups_flat_partition, l. 146-157) and Adam's m, v over it (l. 196): the zero1 level's 2 B whole and
     12 B / d; fp32_groups_gradients_flat (l. 162), torch.zeros_like(the whole flat group, grad_acc_dtype fp32):
     4 B a parameter whole, beside the bf16 gradients (param.grad, 2 B), which backward (l. 316-329; the pipeline
     engine, pipe/engine.py l. 852-867) adds into it (_update_hp_grad l. 332-347, clear_lp_grads=False) and frees
     only at the next backward's clear_lp_grads (l. 445-453): both held at the backward's peak and at the step,
     the gradients term 2 + 4 = 6 B a parameter (model_state_terms accum). The step (l. 271-314) hands the
     optimizer the fp32 buffer's partition as a view (no copy: no [sg] copies, step_grads null), all-gathers the
     updated bf16 partitions in place (update_lp_params l. 423-436) and zeroes the buffer (clear_hp_grads). Its
     traffic (step.py dp_traffic): one all-reduce of the gradients a step, cast to communication_data_type (engine.py
     buffered_allreduce_fallback l. 2611-2625 -> allreduce_bucket l. 2491-2516, 2 B on the wire by default), and the
     all-gather of the 2 B weights; its passes over HBM (each micro-batch's cast-and-add into the buffer, the step's
     zeroing: step.py optimizer_time, HP_ACCUM_BYTES, HP_CLEAR_BYTES).
     The reduction's copies (term bf16_reduce_copy; stack runs.sharding allreduce_bucket_params, fsdp.grad_reduce_bytes):
     after the last backward (engine.py backward l. 2150-2152; the pipeline engine's ReduceGrads after the last
     micro-batch, pipe/engine.py l. 293-304) buffered_allreduce_fallback (l. 2611-2625) takes get_grads_for_reduction
     (bf16_optimizer.py l. 371-375: the fp32 flat buffers, one a parameter group, in the groups' order; split_half_float_
     double_sparse l. 126-146 keeps it) to allreduce_no_retain (l. 2523-2534), which gathers whole buffers into a bucket
     until their elements pass MEMORY_OPT_ALLREDUCE_SIZE = 5e8 (l. 111; allreduce_gradients' and _bf16_reduce_grads'
     bucket) and hands each bucket to allreduce_and_copy (l. 2518-2521) -> allreduce_bucket (l. 2491-2516):
     self.flatten(bucket) (torch._utils._flatten_dense_tensors: one tensor's own view, several a torch.cat, a copy in
     fp32), .to(communication_data_type) (bf16 by default, engine.py l. 938-950: a 2 B copy; none where the JSON sets
     fp32), the in-place division and all-reduce, tensor.copy_ back into the flat, then unflatten's views copied into
     the buffers; both copies freed at return, before the next bucket. Megatron-DeepSpeed builds two groups
     (microsoft/Megatron-DeepSpeed @f4157bea megatron/optimizer/__init__.py get_param_groups l. 18-64: the weight-decay
     matrices first, then the biases and 1-D parameters, name.endswith(".bias") or len(shape) == 1), so the first
     bucket is the weight-decay buffer alone where it passes 5e8 (a 2 B copy of it: Llama 3 8B at tp 1, pp 1), else
     both buffers at once (4 + 2 = 6 B an element). The moment, after the backward (the activations, the loss's
     tensors and the recompute buffer freed): the kept tensors (the states with both gradients, bf16 and fp32) and the
     larger bucket's copies; the term is its excess over the backward's peak, before the step's (whose moment, the kept
     tensors and apex FusedAdam's no temporaries, it covers). Llama 3 8B, bf16_optimizer on 8 GPUs, seq 1,024, micro-batch 1,
     full recompute: 2 B x 8,030,261,248 = 16.06 GB against the peak's activations, output layer and recompute buffer
     (0.27 + 0.80 + 0.13 GB): +14.86 GB. The weight-decay group's size is read as the stage's parameters a rank (the
     biases and norms a small share: 13 h a layer with biases and LayerNorms beside its 12 h^2 matrices, 0.1% at h 1,024;
     Llama 3 8B's 266,240 norm weights): an upper bound of 2 B x the second
     group where the first passes the bucket, and 2 B where 6 B would be right for a stage whose whole parameters pass
     5e8 but whose weight-decay ones do not (a band of the second group's width). BigScience's fork (stack
     megatron-deepspeed-bigscience, memory.optimizer_groups decay_halves_by_count: bigscience-workshop/Megatron-DeepSpeed
     @497aa1bf megatron/optimizer/__init__.py _get_params_for_weight_decay_optimization l. 27-57, the weight-decay
     tensors cut in two halves by count in module order, three groups) is priced group by group (_decay_halves: the
     tied embedding first, DeepSpeed's PipelineModule registering tied_modules before the layers, @77b649d16
     pipe/module.py l. 192-200; then each layer's four matrices; from the stage's layer count in closed form) and the
     buckets walked in turn (_bucket_copies): BLOOM's tr11 last stage flushes each half alone, its largest copy
     2 B x 2,286,419,968, +1.50 GB over its peak (4.90 GB read with two groups). Not priced: DeepSpeed MoE's expert groups
     (reduced after the dense ones, _reduce_expert_gradients l. 2588-2609, each bucket of its moe_group_params groups:
     the rule is read on the stage's whole parameters); the buffers' alignment padding (_flatten_dense_tensors_aligned
     l. 267-268 with nccl_start_alignment_factor 2 x dp, runtime/utils.py align_dense_tensors l. 940-951: fewer than 2 dp
     zero elements a group in the bf16 flat, the fp32 buffer and the cast copy, 2 + 4 + 2 B each, and under 2 elements
     of the fp32 master and Adam partition, 12 B each: at most 2 groups x (16 dp + 24) B, 304 B at dp 8, 33 KB at
     dp 1,024, below the printed precision); the copies' HBM passes in the step time (step.py optimizer_time).
[zb] DeepSpeed ZeRO-1/2's gradient reduction buffers (terms zero12_ipg_bucket, zero12_grad_partition; stack_db
     runs.sharding step_grads ipg_buffer, reduction), microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/
     stage_1_and_2.py, contiguous_gradients on (config.py l. 98, its default; a DeepSpeed JSON's false is not priced):
     - the IPG buffer: the optimizer's backward (l. 2038-2057) allocates torch.empty(reduce_bucket_size,
       dtype=self.dtype) (the model dtype: bytes_per_param.weights; 5e8 by default, config.py l. 109: 1e9 B), and a
       second with overlap_comm (the plan's dp_comm_overlap), kept to the reduction's epilogue (_release_ipg_buffers
       l. 676-680, called l. 802): at the backward's peak of the stage whose engine runs that backward, the loss's
       (engine.py l. 2123-2126; the pipeline engine calls it on the last stage only, pipe/engine.py l. 803-812, the
       others torch.autograd.backward, l. 860-862). Term zero12_ipg_bucket.
     - ZeRO-2 (reduction "backward", partition_gradients): the hooks of every backward copy each gradient into the
       buffer and, at each flush, the rank's partition of it into grads_in_partition, allocated whole, every group's
       partition, at the first copy (copy_grads_in_partition l. 1344-1355); the epilogue (l. 764-808) makes
       averaged_gradients its views the first time and adds the new one into them after (l. 783-800), releasing the
       name (l. 679) but not the storage the views hold. From the second micro-batch two partitions are live from
       the backward's first flush: a moment the backward's peak does not hold (the states' gradients term is one).
       When the untied output layer's gradient is above the bucket (Llama 3 8B at tp 1: 525,336,576 > 5e8) it is
       flushed alone at the next hook (l. 943-958), right after the output layer's backward: the moment holds every
       layer's activations, the buffer, both partitions and that gradient, but neither the loss's tensors nor a
       layer's recompute buffer; otherwise at most reduce_bucket_size gradient elements later (the output layer's
       among them), inside a layer's backward: the loss's tensors freed, and the activations of the whole layers
       whose gradients that bucket holds, floor((reduce_bucket_size - the output layer's) / the largest kind's
       parameters a rank), at the mean layer's of one micro-batch (one in flight: ZeRO-2 runs without PP). A tied
       output layer's hook fires with the embedding's, at the end of the backward. Llama 3 8B, ZeRO-2 on 8 GPUs, 2 micro-batches, seq 1,024, full
       recompute: 2 L + 2 V h - the loss's 0.80 GB - the buffer's 0.13 GB = 2.13 GB beyond the peak (the step, 4 L
       above it, stays the stage's peak).
     - ZeRO-1 (reduction "after_backward"): no hooks without overlap_comm (l. 527-528); engine.py allreduce_gradients
       (l. 2048-2061) calls reduce_gradients at the accumulation boundary, after the last backward (the pipeline
       engine's _exec_reduce_grads, l. 293-301, with pipeline_parallel=True: one new buffer, l. 706-717), which moves
       each gradient into the buffer (l. 956-962), reduces it and copies the rank's partition into grads_in_partition
       (allocated whole at the first copy); the full gradients go at the epilogue's zero_grad (l. 807). The moment:
       the kept tensors with the full gradients (the states), one buffer and the partition, an upper bound by the first
       bucket's gradients, which the buffer holds in place of their own tensors (at most reduce_bucket_size elements;
       none where the group's first parameter, Megatron's word embedding, is above the bucket). Llama 3 8B, ZeRO-1 on
       8 GPUs, seq 1,024, full recompute: 4 P + 14 L + 1e9 B, 0.81 GB above the backward's peak.
     - ZeRO-1 with overlap_comm (the plan's dpo; issue 21, dsz3tied): the hooks exist (l. 527-528) and act at the
       accumulation boundary only (reduce_ready_partitions_and_remove_grads, l. 1424-1426; engine.py l. 2125 sets the
       flag before the optimizer's backward), so in the last backward each gradient moves into the two buffers (its own
       tensor freed, l. 956-962) and the first flush copies the rank's partition into grads_in_partition (l. 1344-1355,
       for ZeRO-1 the rank's parameters only, l. 1414-1416): from that flush on, the peak's states (their full
       gradients: the earlier micro-batches' all there, with one micro-batch only those the backward has made, so an
       upper bound there, as the peak's own) beside the new partition, as ZeRO-2's moment above
       but with any micro-batch count and no output-layer gradient added (the states count it). The epilogue then holds
       less (the gradients moved). Llama 3 8B as above with it: 2 L - the loss's - the recompute buffer = 1.08 GB above
       the peak (which two buffers raised 2.00 GB; 0 before: priced after the backward). Only Megatron-DeepSpeed's
       GPTModel (--no-pipeline-parallel) runs it: DeepSpeed's engine turns overlap_comm off for a PipelineModule
       (engine.py l. 1639-1642; at pp > 1 the stack's overlap.dp_comm_overlap_with_pp false prices the plan's dpo off,
       plan.dp_overlap, one IPG buffer; at pp 1 trainers/megatron_deepspeed.py reads the pipeline model's as false). Term
       zero12_grad_partition, the
       larger moment's excess over the peak, before the step's terms ([opt], [sg]) take theirs over it.
     Not priced: ZeRO-2's gradients above the bucket waiting alone for the next hook inside a layer's backward (a
     weight above reduce_bucket_size a rank: 175B's 4 h^2 = 6.0e8 at tp 1), the stage-0 (DDP) path's flattened
     buckets (buffered_allreduce_fallback), cpu_offload.
[mg] Megatron-FSDP's main gradients (stack_db megatron runs.sharding grads_in_job_dtype, step_grads with
     fp32_decoupled_low_moments; stacks.main_grad_bytes; terms gradients, fsdp_unit_grads, zero2_reduce_input,
     step_grad_copies; step.py grad_reduce_bytes). NVIDIA/Megatron-LM @d98e8a64: the main gradient buffer is built in
     --megatron-fsdp-main-grads-dtype, default auto (megatron/training/arguments.py l. 3691-3694) -> None (l. 1076-1080,
     1092), for which param_and_grad_buffer.py _resolve_group_grad_dtype (l. 2313-2320) takes the parameter group's
     dtype, bf16 under --bf16; the reduce-scatter moves --megatron-fsdp-grad-comm-dtype, default auto: the buffer's
     (fetch_bucket(dtype=None), l. 3107-3111). Megatron-FSDP reads no grad_reduce_in_fp32 (no use under
     megatron/core/distributed/fsdp/), so --accumulate-allreduce-grads-in-fp32, which --bf16 turns on, leaves it bf16.
     The planner prices the job's gradient bytes (bytes_per_param.gradients) in every Megatron-FSDP mode, held (sharded
     in optim_grads and optim_grads_params, whole in optim), reduced (at every level, HSDP's replica all-reduce and the
     SP norm gradients' all-reduce too), in the gathered unit's unsharded gradient (fsdp_unit_grads) and in the
     reduce-scatter queue's buckets of optim_grads, optim_grads_params and its HSDP ([rs]), where the stack's
     fsdp.grad_reduce_bytes (4) and zero2_reduce_queue_grad_bytes (2) price
     the other modes (--use-torch-fsdp2). The job says the dtype: the Megatron reader sets the gradients to 2 B for a
     --use-megatron-fsdp script without --megatron-fsdp-main-grads-dtype (or with auto / bf16 / fp16) and 4 B with fp32
     (trainers/megatron.py _megatron_fsdp_grads); the export writes fp32 for a plan keeping 4 B (the megatron and
     bf16-moments presets), and check's suggestions do too (trainers/spelling.py). Llama 3 8B on 8 GPUs, optim_grads_params:
     2 P / 8 = 2,007,565,312 B of gradients a GPU from a script without the flag, 4 P / 8 with fp32
     (tests/test_megatron_fsdp_grads.py). Stack megatron-bridge: Bridge's pinned Megatron-Core 905c0e386 builds them in
     fp32 whatever grad_reduce_in_fp32 says (mcore_fsdp_adapter.py l. 73-75, 92-97), so its modes state
     main_grads_bytes 4 and a job of other gradient bytes is planned without them (plan.stack_for_states); at 4 B the
     two stacks price one figure (tests/test_bridge_launch.py: Llama 3 70B, 4 x 70,553,706,496 / 8 B a GPU).
     Its update_main_grads (param_and_grad_buffer.py @905c0e386 l. 2813-2875) skips the conversion and param.grad only
     where the buffer's use_precision_aware_optimizer attribute is set (l. 2845, 2872), which nothing at 905c0e386 sets:
     megatron-bridge's modes state no fp32_decoupled, and with its fp32 main gradients .to(fp32) is the tensor itself,
     so no copy with the precision-aware optimizer or without (tests/test_bridge_step_grads.py).
     The optimizer's gradient: update_main_grads (l. 3351-3381; attach_grad_to_optimizer_state, megatron_fsdp.py
     l. 1369-1374, and scale_gradients l. 3181-3187) hands each optimizer parameter the rank's shard of the buffer,
     .to(param.dtype) of the fp32 main weight where a main weight buffer exists and use_decoupled_grad is off (l. 3377):
     an fp32 copy, 4 B x the rank's shard L, where the main gradients are 16-bit (the tensor itself where they are
     fp32), held from the step to the next train_step's zero_grad_buffer (zero_grad l. 3189-3215 sets param.grad None),
     before its forward: a moment of the step, priced as [sg]'s fp32 copy (step_grads fp32, allowed under FSDP for this
     copy only) and counted as its excess over the backward's peak. use_decoupled_grad is --use-precision-aware-optimizer
     (training.py l. 2649-2650), which the job says (precision_aware_optimizer, the Megatron reader's
     --use-precision-aware-optimizer; by default on where Adam's moments are below fp32, bytes_per_param.optimizer < 8:
     stack runs.low_precision_moments; step_grads fp32_decoupled precision_aware): no copy there, whatever the moments'
     and the main weights' dtypes. Llama 3 8B, 8 GPUs,
     optim_grads_params, mixed16, seq 512, full recompute: the step holds 2 L + 2 L + 4 L + 8 L + 4 L = 20 L, the stage's
     peak. Not priced: a grad-comm dtype other than the main gradients' (listed as not modelled), fp32
     parameters (neither --bf16 nor --fp16: auto would be fp32; the reader lists them as not modelled).
[mw] The master weights under Megatron-FSDP with the precision-aware optimizer (master_bytes; stack_db
     runs.low_precision_moments.own_master_modes): Megatron-FSDP's own fp32 main weight shards, which FusedAdam steps
     with master_weights set False (Megatron-LM @d98e8a64 optimizer/__init__.py l. 1147-1161): 4 B a parameter where
     the distributed optimizer holds TE's 16-bit remainders (2 B, Settings.remainders). Llama 3 8B, 8 GPUs, DP 8,
     bf16-moments: master 4 P / 8 = 4,015,130,624 B under megatron_fsdp_optim, 2 P / 8 under distributed_optimizer, and
     the step's HBM bytes 22 against 20 a parameter (step.adam_bytes_per_param; tests/test_precision_aware_mfsdp.py).
     At Megatron-LM 905c0e386 (megatron-bridge) the pair with TE's decoupled_grad does not train at all: start-up rule
     PRECISION_AWARE_MFSDP.
[rs] The unsharded gradient of the layer unit being reduce-scattered, in a zero2 mode that reduces every micro-batch
     into a sharded accumulator (stack fsdp.zero2_unit_reduce, runs.sharding grad_reduce microbatch; term
     zero2_reduce_input): llama3-meta's fsdp_no_reshard, Meta's FSDP "shards optimizer states and gradients" and
     reduce-scatters them in fp32 (arXiv:2407.21783 sec. 3.3.2), read as torch FSDP2 runs it. pytorch/pytorch @62a45b6f
     torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward: at a unit's post-backward its autograd
     gradients (unsharded, the parameters' bf16) are handed to foreach_reduce, which allocates the reduce-scatter input,
     unsharded, in the reduce dtype (fp32: grad_reduce_bytes), copies them in (foreach_reduce_scatter_copy_in, a
     widening bf16 -> fp32 chunk-cat) and only then frees them ("Only after the copy-in finishes can we free the
     gradients": @010ae4a8 _fsdp_collectives.py foreach_reduce, the same order in every version); post_backward keeps
     the input in comm_ctx.reduce_scatter_state until the next unit's post_backward, which makes the compute stream
     wait for its reduce-scatter's event and drops it before its own foreach_reduce allocates the next: one unit's
     input at a time (with the queued reductions, overlap.grad_reduce_queued, step.py [26], no more: FSDP2's wait is
     the queue's bound). The unit is a layer (u: the largest layer's parameters a GPU, as params_of counts them: the end
     layers' units not priced). Two moments beyond the stage's peak (its in-flight activations A and one layer's backward
     buffer B): the copy-in, right after a unit's backward, which has freed one layer-micro-batch's activations a and
     B, holds (2 + r) u (r = grad_reduce_bytes); and the start of the next backward holds r u beside A + B, less a
     where every forward of the step ran before the stage's first backward (its layer-micro-batches in flight are all
     m n of the step: no forward brings the activations back to A after a backward), A itself where one does (1F1B's
     steady state: the input of the last backward is held through the next forward and into the next backward). The
     term is the larger excess, max((2 + r) u - a - B, r u - a [every forward first], 0). Meta's 405B layout (TP 8,
     PP 16, vpp 8, m 16: a middle stage runs its 128 chunk-forwards first): u = 398,491,648, a = 1,024 tokens x
     520,704 B, B = 0: 6 u - a = 1.73 GiB.
     Megatron-FSDP optim_grads (megatron_fsdp_optim_grads, runs.sharding reduce_queue_units 0; stack
     fsdp.zero2_reduce_queue_params, the queue's capacity C in parameters, and zero2_reduce_queue_grad_bytes g) holds
     a queue of such buckets instead (NVIDIA/Megatron-LM
     @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/): each FSDP unit (TransformerLayer,
     mcore_fsdp_adapter.py l. 166-171) is one bucket group (param_and_grad_buffer.py l. 1921-1957); a sharded gradient
     buffer's param.get_main_grad() allocates the unit's unsharded bucket (l. 3094-3117 -> fetch_bucket l. 1296-1340,
     in grad_comm_dtype else main_grads_dtype else the parameters' dtype, l. 2313-2320: bf16 by default, 'auto';
     Megatron-FSDP reads no grad_reduce_in_fp32) at the layer's first weight gradient (TE's fused accumulation writes
     into it; megatron_fsdp.py _grad_acc l. 635-663 copies an unfused bf16 grad in and deletes it); the unit's
     post-backward (_process_post_backward_gradients l. 707-787, grad_reduce_every_bprop) calls GradReducePipeline.reduce_gradients (l. 3880-3922),
     which first drains the queue, oldest first, while its buckets exceed C parameters
     (wait_for_previous_grad_reduce l. 3924-3948: each drained bucket's storage freed, free_up_grad_bucket l. 4229-4252),
     then queues the unit's reduce-scatter; C = suggested_RS_queue_capacity = max(1e9, the bucket size or 1e9)
     (megatron_fsdp.py l. 420-443; --suggested-communication-unit-size sets it, not read: the stack's 1e9); the root
     post-backward's reset (l. 867-901; reset l. 3860-3878) drains and frees every bucket at the end of each model
     chunk's micro-batch backward, so nothing is carried into the next forward. During the backward of the chunk's
     i-th layer min(i, k + 2) buckets are live (k = floor(C / u) left after a drain, the one just queued, the one
     filling), i - 1 layer-micro-batches' activations freed, the layer's backward buffer B live throughout: the excess
     over the peak A + B is max over i of min(i, k + 2) g u - (i - 1) a, linear up to m = min(k + 2, c) layers (c the
     chunk's: ceil(n / vpp)), falling after: max(g u, m g u - (m - 1) a). Llama 3 8B tp 1 at 4,096 tokens, full
     recompute: u = 218,112,000, k = 4, 12 u - 5 a = 2.28 GiB (tests/test_megatron_fsdp_queue.py). Bounded by the
     largest layer (an MoE layer's expert and dense groups are two bucket groups of one unit: their sum, u). Not
     priced: the end units' buckets (embedding, output layer: the root post-backward's), the bucket padding (the
     unfused path's bf16 autograd gradient beside the bucket is [uf]'s), a --megatron-fsdp-grad-comm-dtype other than
     the main gradients' (g is the job's gradient bytes, [mg]); --megatron-fsdp-version 2 (the job's mfsdp_v2)
     runs no queue: [v2]. Under fsdp_double_buffer the buckets are its fixed pools instead, no queue beyond the peak [db].
     optim_grads_params and its HSDP (megatron_fsdp_hsdp) run the same queue, priced by the same function
     (_reduce_queue), the mode's data saying which and how large (stack runs.sharding reduce_queue_units: 0 for
     optim_grads, 2 for these): grad_reduce_every_bprop holds for both (l. 707-787), the root post-backward resets the
     queue for both (l. 867-901), and optim_grads_params' capacity is max(1e9, twice the average FSDP unit's parameters,
     total_param_elements // total_fsdp_module * 2, counted on the TP-local parameters before they are made
     distributed, l. 349-353) (l. 420-443): C = max(1e9, 2 x the model's average layer a GPU, by kind; a chunk's own
     average where the kinds split unevenly over the stages is not followed). A unit's bucket is queued from its last
     parameter's post-accumulate-grad hook (l. 1137) while its gathered weights are released only at its post-backward
     (_post_backward_release_module l. 684-705, attached to the unit's inputs, l. 852): its weights sit beside its
     bucket, as the fsdp level's fsdp_gathered_units (the current and the prefetched units, [pf]) already price. HSDP's
     replica all-reduce (param_and_grad_buffer.py l. 4134-4220, at the last micro-batch) runs in place on the sharded
     main gradients: no buffer but with a custom --megatron-fsdp-grad-comm-dtype (hsdp_comm_gbuf, not modelled). At the
     fsdp levels the backward's peak already holds one unit's gradient (fsdp_unit_grads: g x the largest unit, the
     embedding's or output layer's where larger, read as the end units' bucket queued first): the term is the queue's
     moment less that, at least 0. Llama 3 8B tp 1, 4,096 tokens, full recompute: 12 u - 5 a - 2 x 525,336,576 =
     1.30 GiB (0 before), none 0; 70B tp 8: 1.87 / 0.64 GiB; 405B tp 4 (2 u = 1.59e9 > 1e9: k = 2, m = 4):
     8 u - 3 a - 2 u = 4.36 GiB (tests/test_megatron_fsdp_queue.py).
     Not priced: DeepSpeed ZeRO-2 (its IPG bucket is [zb]'s term: the stack's flag off), the FSDP levels' (their own
     terms: fsdp_unit_grads, [tt7] at the end of the backward, fsdp_accumulated_grads under PP).
[pf] Megatron-FSDP's all-gather prefetch (stack fsdp.gather_prefetch_share; the modes stating runs.sharding
     reduce_queue_units at the fsdp levels: optim_grads_params, megatron_fsdp_hsdp), NVIDIA/Megatron-LM @d98e8a64
     megatron/core/distributed/fsdp/src/megatron_fsdp/: each FSDP unit's pre-forward and pre-backward hook
     (megatron_fsdp.py l. 793-811, 918-931) all-gathers its unit and prefetches the next units (forward or backward
     order) while the parameters already prefetched are below suggested_AG_prefetch_size P = the queue's capacity
     // 2 (l. 420-444: max(1e9, twice the average FSDP unit) // 2; param_and_grad_buffer.py l. 4487-4516): ceil(P / u)
     units of u parameters, those already gathered not gathered again, a unit released at its post-backward
     (l. 684-700). At the backward's peak: the current layer unit and min(ceil(P / u), c - 1) prefetched layer
     units (c the chunk's layers; u the largest layer unit a GPU, _gathered_units): at the i-th layer's backward of a
     chunk the current layer and the next min(ceil(P / u), i - 1) layers; the prefetch's reach past layer 0 into the
     embedding's bucket (non-unit, bucket 0) gathers nothing, that bucket being kept gathered the whole step ([nu]:
     fsdp_unsharded_ends). Llama 3 8B tp 1: u = 218,112,000, P = 5e8: 3 prefetched, 4 u x 2 B = 1,744,896,000 B
     (before [nu] the current unit was priced as the largest unit, the embedding: (525,336,576 + 3 u) x 2 =
     2,359,345,152; before [pf] 2 x 525,336,576 x 2 = 2,101,346,304); 70B tp 8: u = 106,971,136, 5 prefetched:
     6 u x 2 = 1,283,653,632 B (was (131,334,144 + 5 u) x 2 = 1,332,379,648) (tests/test_megatron_fsdp_prefetch.py).
     Under fsdp_double_buffer the prefetch stops at two layer units, held in its fixed pools [db]. Not priced: a
     chunk's own average unit where kinds split unevenly over the stages.
[nu] Megatron-FSDP's non-unit buckets kept gathered (the modes [pf] prices, term fsdp_unsharded_ends, and in the kept
     tensors of every moment of the step), NVIDIA/Megatron-LM @d98e8a64: the FSDP units are TransformerLayer,
     MoETransformerLayer and MambaLayer by default for any sharding strategy but no_shard
     (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py l. 163-173); every parameter outside them (the embedding,
     a learned position embedding, the output layer, the final norm) is in a bucket of its own unit id None
     (param_and_grad_buffer.py l. 1756-1810), and optim_grads_params shards every model weight buffer, these too
     (is_model_weight_buffer_distributed, l. 2342-2345; l. 2652-2670). A non-unit module's forward pre-hook
     all-gathers its direct parameters (megatron_fsdp.py l. 559-600, 793-811, 1074-1087); nothing releases them: the
     post-forward release and the post-backward release are registered on FSDP units alone (l. 977-1001, 684-705,
     1074-1125; _root_pre_backward marks only unit buckets releasable, l. 936-975), release_bucket's docstring says
     non-unit buckets "should remain persistently allocated" (param_and_grad_buffer.py l. 4612-4650), and
     synchronize_param_gather's reset(preserve_non_fsdp_units=True) (megatron_fsdp.py l. 1342-1347;
     param_and_grad_buffer.py l. 4339-4386) marks them PRESERVED, their storage kept and refreshed in place by the
     next all-gather (l. 4518-4527). So from the first forward on, the stage holding the embedding keeps E / t
     (+ a learned position embedding, + an embedding norm) unsharded, and the stage holding the output layer its
     V h / t (under PP a tied output layer's copy of the embedding) and the final norm, in the gathered weights'
     bytes (2 B; an fp8-converted output layer 1 B [fa]). Llama 3 8B tp 1 (pp 1): (2 x 525,336,576 + 4,096) x 2 =
     2,101,354,496 B; with [pf]'s 4 u, 3,846,250,496 B gathered at the peak (was 2,359,345,152: +1,486,905,344);
     70B tp 8 on 64: (2 x 131,334,144 + 8,192) x 2 = 525,352,960 B + 6 u x 2 = 1,809,006,592 B (was 1,332,379,648)
     (tests/test_megatron_fsdp_prefetch.py). An MTP module's non-unit parameters (its projection and norms, and the
     MTP stage's own embedding under PP) since [me]. Not priced: fine-grained param-gather hooks
     (megatron_fsdp_enable_fine_grained_param_gather, off by default).
[db] Megatron-FSDP's fixed double-buffer pools (the job's mfsdp_double_buffer; the Megatron reader's --fsdp-double-buffer,
     and --use-nccl-ub and --megatron-fsdp-max-pool-double-buffer, which set it: NVIDIA/Megatron-LM @d98e8a64
     megatron/training/arguments.py l. 1172-1181; term mfsdp_double_buffer, at the modes running the [rs] queue).
     param_and_grad_buffer.py l. 2524-2576: the model weight buffers' and the main gradient buffers' temporary buckets
     come from a FixedPoolAllocator of size 2 (UB_BUFFER_NUM), whose units are the largest set of FSDP units with
     identical buckets (l. 667-697: the layers), each buffer a GlobalMemoryBuffer tensor named by (pool buffer, bucket
     offset), created at its first use and never freed (megatron_fsdp/utils.py l. 769-803): from the first step on, every
     moment (the optimizer step's, the forward's) holds them. The names are the pool's (fsdp_params, fsdp_grads, l. 2534,
     2554), not a model chunk's, and the GlobalMemoryBuffer is one a process (utils.py l. 798-803): a rank's virtual
     pipeline chunks, each its own Megatron-FSDP module, share one set of pools. The weight pool is used where the weights are sharded
     (optim_grads_params, its HSDP: fetch_bucket allocates only for a distributed buffer or another dtype, l. 1328-1336),
     the gradient pool where the gradients are (optim_grads too); at most two units each at once: the all-gather's
     prefetch stops at the second unit (need_skip_prefetch l. 4475-4484; a non-unit module prefetches nothing,
     l. 4441-4449) and main_grad_getter drains the reduce-scatter queue to two units before fetching a bucket
     (_enforce_double_buffer_limit l. 3956-3977, l. 3099), so the pools are min(2, the chunk's layers) x u x (2 B of
     weights + g B of gradients), u the largest layer unit a GPU (_gathered_units' pooled), in place of [pf]'s prefetched
     units and [rs]'s queue (no excess beyond the peak: the pools are held at it). The non-unit buckets (embedding,
     output layer, final norm: fsdp_unit_id None) stay outside the pools (l. 698-725, 781, 835-845: the backup allocator):
     their weights [nu], and the end's gradient bucket at the backward's start, fsdp_unit_grads g x max(E, V h) / t
     (the layer's bucket in the pool). Llama 3 8B tp 1 on 8 (u = 218,112,000), optim_grads_params, bf16 gradients:
     8 u = 1,744,896,000 B in place of [pf]'s 4 gathered units (8 u) and [rs]'s queue excess; at optim_grads the
     gradient pool alone, 4 u (tests/test_megatron_fsdp_double_buffer.py). --use-nccl-ub allocates every
     Megatron-FSDP buffer (the pools and the sharded buffers, l. 2163-2223, 2653-2731, 3034-3087) from NCCL's memory pool,
     a torch.cuda.MemPool over ncclMemAlloc (megatron/core/nccl_allocator.py l. 111-141): a private pool of PyTorch's
     caching allocator whose segments come from the pool's allocator in place of cudaMalloc (pytorch
     c10/cuda/CUDACachingAllocator.cpp allocPrimitive), its blocks counted in the allocated and reserved statistics like
     any other: in the allocated and reserved peaks, nothing outside the allocator. Not priced: ncclMemAlloc's rounding
     to its granularity, the fp8 transpose pool (fsdp_fp8_transpose_params, MXFP8 parameters only), a model whose layer
     units differ (FixedPoolAllocator pools the most frequent identical unit and allocates the others on demand beside
     it; MaxPoolAllocator pools each offset's largest bucket: both priced as the largest layer unit's pool),
     --fsdp-db-use-persist-buf-on-alloc-fail (the buckets outside the pools kept: the reader lists it as not modelled).
[oo] Megatron-FSDP's HSDP with the outer-DP optimizer sharding (the job's mfsdp_outer_optim: Megatron
     --outer-dp-sharding-strategy optim with --num-distributed-optimizer-instances > 1; stack runs.sharding
     outer_optim; stacks.optimizer_shards). NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/src/
     megatron_fsdp/param_and_grad_buffer.py _init_each_parameter_group_buffers l. 2351-2512 (the design note), 2594-2764:
     should_create_hfsdp_helper_buffers (hybrid FSDP and outer_dp_sharding_strategy != no_shard, l. 2498-2501) builds
     every buffer over the whole DP group (DP-Outer x DP-Shard, get_dp_group, l. 2596-2598): the main weight buffer
     (fp32, l. 2688-2706) is a DataParallelBuffer of its own over it, allocated at its own size (mbuf.init_data,
     l. 2881-2884): 1 / (dp x cp) of the master; the model weight buffer and the main gradient buffer over it are only
     views into the hybrid-FSDP helper buffers hfsdp_helper_wbuf / hfsdp_helper_gbuf (_create_hfsdp_helper_buffer
     l. 3691-3751, over the inner, shard, group), which own the storage (_init_hfsdp_helper_and_dp_buffer_data
     l. 3754-3800: the helper allocated whole, the DP buffer a slice of it): the 16-bit weights and the main gradients
     stay 1 / (shard group x cp) a rank, as under no_shard; Adam's moments are built over the optimizer's parameters,
     the main weight buffer's shards (_init_optimizer_named_parameters l. 3295-3349), and the step's fp32 gradient copy over the
     main gradient buffer's DP view (update_main_grads, [sg]): both 1 / (dp x cp). The routed experts the same over
     their expert-data-parallel group (get_dp_group(is_expert_parallel)): tp x dp x cp / (etp ep). So under the job's
     setting the master and the moments divide by dp x cp in place of the shard group x cp (model_state_terms
     opt_shard), and the step's copies follow (_step_grad_copies reads the master's partition). Llama 3 8B
     (8,030,261,248 parameters) tp 1 on 64 GPUs, shard group 8 (8 instances): the master 4 P / 8 = 4,015,130,624 B
     becomes 4 P / 64 = 501,891,328 B, Adam's moments 8 P / 8 = 8,030,261,248 B become 1,003,782,656 B
     (tests/test_megatron_fsdp_outer_optim.py). Its traffic: step.py [29]. Not priced: the hsdp_comm_gbuf of a custom
     --megatron-fsdp-grad-comm-dtype (as under no_shard).
[v2] Megatron-FSDP v2 (the job's mfsdp_v2: Megatron --megatron-fsdp-version 2; stack runs.sharding mfsdp_v2, Megatron's
     optim_grads_params, at tp, pp and cp 1 with one model chunk: start-up rule MEGATRON_FSDP_V2_LAYOUT; issue 21
     memleft). NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/mcore_fsdp_adapter.py
     FullyShardedDataParallelV2 l. 489-601 fully_shards every TransformerLayer / MoETransformerLayer / MambaLayer
     (l. 536-537, 589-592) and then the root (l. 595-596: the embedding, the output layer, the final norm), each an
     FsdpModule of megatron_fsdp/experimental/. Its persistent buffers (parameter_group.py FsdpParameterGroup l. 155-214)
     are version 1's at optim_grads_params: the fp32 main weights (main_params_dtype, default fp32, l. 156-161), the
     16-bit model weights (l. 169-184) and the main gradients (main_grads_dtype, else the parameters' dtype: the job's
     gradient bytes [mg], l. 195-214), each Shard(0) over dp x cp (mcore_fsdp_adapter.py l. 554-560), and Adam's moments
     over the main weights' shards; the step's fp32 copy of a 16-bit gradient shard is FullyShardedOptimizer.
     _copy_model_grads_to_main_grads's (optimizer/fully_sharded_optimizer.py l. 119-145, none with the precision-aware
     optimizer), priced as version 1's [sg]. What moves:
     - the prefetch: an FsdpModule's pre-forward all-gathers itself and the next module in forward order, its
       pre-backward itself and the next in backward order (experimental/module.py l. 318-353, 402-425), and each is
       released at its post-forward and post-backward (l. 372-400, 427-432; release_unsharded_storage,
       parameter_group.py l. 316-326): min(2, the chunk's layers) layer units gathered (fsdp_gathered_units), in place
       of [pf]'s 1 + ceil(P / u);
     - the root unit: gathered at the root's pre-forward and pre-backward, released at its post-forward and its
       post-backward (after the embedding's gradient, the last): held through the forward and the backward as [nu]'s
       buckets are (fsdp_unsharded_ends), but not at the optimizer step's moment (no kept end in the step's tensors);
     - the gradients: no gradient-accumulation fusion under v2 (_validate_config l. 672-673), so each unsharded
       parameter's autograd gradient is in its dtype (W = 2 B, bf16) until its module's post-backward, which a module
       runs once every trainable parameter of it has its gradient (post-accumulate-grad hooks, module.py l. 278-296):
       the backward's peak holds the layer unit's gradients W u beside the root's output-layer gradient (the
       embedding's where tied), held from the output layer's backward to the root's post-backward at the end,
       fsdp_unit_grads = W (u + V h / t) in place of g x max(u, E, V h) / t;
     - the reduce-scatter: no queue (no GradReducePipeline: [rs]'s queue off); _reduce_gradient_groups (module.py
       l. 434-452) allocates one reduce-scatter input of the unit's size in the gradients' dtype on the reduce-scatter
       stream (allocate_partial_grad_buffer, parameter_group.py l. 328-344), copies the gradients in and drops them
       (l. 346-351), and reduce-scatters it into the main gradients (in place at the first micro-batch where the
       dtypes match, l. 417-434); the input is dropped once its collective is queued, freed to that stream's pool
       where the next unit's input reuses it: beyond the peak max(W u - a - buf, 0) at the copy-in (zero2_reduce_input),
       a one layer-micro-batch's activations, buf one layer's backward buffer, as FSDP2's copy-in moment at fsdp.
     - the experts under EP (issue 21, mfsdp2): at ep > 1 each MoE layer's experts are an FsdpModule of their own over
       the expert-DP mesh (fully_shard(submodule.experts), mcore_fsdp_adapter.py l. 570-583), a child of its layer's,
       so the forward order is L_i, E_i, L_i+1 and the backward's L_i, E_i, L_i-1 (module.py l. 97-115, 464-470):
       during E_i's forward or backward its layer's dense unit D_i (released at its own post-hook, after E_i's), E_i
       and the neighbour's dense unit (E_i's pre-hook prefetches it) are gathered: fsdp_gathered_units = W (max (D + E)
       + max D) in place of 2 W max (D + E), E a kind's local experts (/ (etp ep)), the bound attained where the
       largest dense layer borders the largest MoE layer (DeepSeek's first MoE layer in the backward); each unit's
       reduce-scatter input is its own, u = max(max D, max E) at the copy-in (_v2_units). The unit gradients
       (issue 21, mfsdp3) are W (max(max D, max E) + V h), not W (D + E + V h): the MoE block's forward runs the
       shared experts, then the router, the dispatch, the experts and the combine (moe_layer.py l. 658-694), so its
       backward, which autograd's ready queue runs latest-created node first (the experts' GEMMs before the
       router's and the shared experts' nodes, the AccumulateGrad nodes at once: sequence_nr UINT64_MAX, pytorch/pytorch
       @55f1a796 torch/csrc/autograd/functions/accumulate_grad.cpp l. 17-22), completes E_i's gradients
       before any of D_i's (router, shared experts, norms, attention); E_i's post-backward copies them into its
       input and drops them (parameter_group.py l. 346-351) before D_i's first, and D_i's post-backward drops D_i's
       before L_i-1's backward: one of the two at a time (_v2_units' third figure, the copy-in's unit). Not priced:
       with --moe-shared-expert-overlap (the job's moe_shared_expert_overlap, step.py [38]) the shared experts'
       fc2 runs in the combine, after the experts (token_dispatcher.py l. 871-873), and its backward on the side
       stream beside the combine's gradient all-to-all, so its weight gradient (h f_s / tp) may or may not exist
       when E_i's post-backward copies E_i's in: which comes first is a race of two streams (the side stream's
       fc2 dgrad / wgrad against the compute stream's routed experts' backward), not an order the code fixes;
       priced as without the overlap (no tests/data run sets the two together);
     - the root at the backward's end (fsdp_end_of_backward): the root's post-backward runs after the embedding's
       gradient, the backward's last. Two moments, the activations freed: the embedding's weight-gradient kernel,
       its fp32 partial sums and incoming gradient (6 B T h, [eg]) beside the root's gradients W R (R the root's
       parameters: embedding, output layer, final norm) and the gathered root (fsdp_unsharded_ends); and the root's
       copy-in (issue 21, mfsdp3), by which the embedding's incoming gradient is freed (the autograd engine drops a
       node's inputs when its call returns, before the AccumulateGrad task it queues runs the post-accumulate-grad
       hook: pytorch/pytorch @e1253a95 torch/csrc/autograd/engine.cpp call_function, evaluate_function; torch >= 2.1
       accumulate_grad.cpp AccumulateGrad::apply calls tensor_post_acc_grad_hooks after accumulating) and
       the gathered root too (post_backward reshards before it reduces, module.py l. 427-432): W R and their
       reduce-scatter input W R beside the kept tensors. The excess of max(the gathered root + W R + 6 T h, 2 W R) +
       the kept tensors over the backward's peak (_v2_root_end): the kernel's moment wherever the gathered root is
       W R. A tied output layer's gradient waits in the shared weight's AccumulateGrad input buffer until the
       embedding's is added to it (pytorch torch/csrc/autograd/input_buffer.cpp accumulate): W V h / t more at the
       kernel's moment (Llama 3.2 1B on 32 GPUs at seq 32: the end is the peak, 2,294,990,848 B);
     - the reduce-scatter stream's pool (stream_pools, reserved only): each input, and from the second micro-batch
       (zero_grad(set_to_none=True), fully_sharded_optimizer.py l. 108-117, leaves the sharded gradients unset at
       the first: reduced in place, parameter_group.py l. 417-434) or where the main gradients' dtype is not the
       parameters' its sharded output (reduced_grad, W u / the unit's DP group, l. 423), is allocated on the reduce-
       scatter stream and freed there, where the allocator caches it for that stream alone (FsdpContext l. 78-84:
       the adapter leaves unify_communication_stream off, mcore_fsdp_adapter.py l. 569): the largest unit's,
       W max(u (1 + o / dp), E (1 + o / edp), R (1 + o / dp)), o 1 from the second micro-batch or with other main
       gradients, reserved at every moment, beyond the allocated peak by the pool less what the peak's copy-in holds
       of it (_v2_rs_pool). The output itself never sets the allocated peak: it is allocated once the unit's
       gradients are dropped, W u / dp beside the input W u below the copy-in's gradients and input 2 W u. The
       all-gather stream's pool holds the root and two units at most, what the peak holds: none beyond it.
     - the model-weight cast after the optimizer step (issue 21, mfsdp3; in optimizer_step, or the term its moment
       first exceeds the peak in, [opt]): FullyShardedOptimizer's step (MixedPrecisionOptimizer.step_with_ready_grads,
       optimizer/optimizer.py l. 777-813) runs the inner step, then _copy_main_params_to_model_params
       (fully_sharded_optimizer.py l. 148-150), sync_model_weights_from_main_weights: for each parameter group in
       turn, self.model_weight = self.main_weight.cast(bf16) on the all-gather stream (parameter_group.py l. 269-279):
       DBuffer.cast allocates a new buffer of the group's shard and copies into it (experimental/dbuffer.py l.
       287-294, 308-315), the old shard dropped only by that assignment, so one group's 16-bit shard is allocated
       twice: the largest, W max(u / dp, E / edp, R / dp) (v2_cast), while the fp32 gradient copies [sg] are still
       held (restored after step_with_ready_grads returns, fully_sharded_optimizer.py l. 137-146) and the inner
       step's temporaries freed (none: Megatron's Adam is fused, [opt]): the step's moment is kept + [sg] +
       max(temporaries, the cast).
       Reserved: none beyond that moment, the new shard comes from the all-gather stream's own cached blocks (the
       gathered units and the root, each at least its size, freed after the backward) and the next group's from the
       old shard just freed;
     Llama 3 8B tp 1 on 8 (u = 218,112,000; V h = 525,336,576), full recompute: gathered 2 u x 2 = 872,448,000 B (v1
     1,744,896,000), unit gradients 2 (u + V h) = 1,486,897,152 B (v1 g V h = 2 x 525,336,576 with bf16 main
     gradients), no queue excess (v1 1.30 GiB); at seq 512 the root's end 20,376,740,864 B, below the backward's
     peak, and its pool 2 x 1,050,677,248 x 9 / 8 = 2,364,023,808 B reserved; on 2 GPUs the step's cast 2 R / 2 =
     1,050,677,248 B; DeepSeek-V2-Lite ep 8 on 16: gathered (100,405,760 + 81,007,104) x 2 B in place of 4 x
     100,405,760, unit gradients 2 (81,007,104 + V h) (was 2 (100,405,760 + V h)), the step's cast the experts'
     2 x 69,206,016 / 2 (tests/test_megatron_fsdp_v2.py). Not priced: --use-nccl-ub's symmetric-memory pool (v2
     refuses fsdp_manual_registration, the reader with it).
[bp] Megatron-FSDP's bucket padding: not priced, as noise (issue 21, mfsdpouter). NVIDIA/Megatron-LM @d98e8a64
     megatron_fsdp/param_and_grad_buffer.py _get_parameter_groups l. 1876-1913 gives each parameter group (a layer unit's
     parameters of one dtype, dense or expert) a chunk_size_factor c, the largest row size (shape[1:]) made the lcm
     with every row that does not divide it (Llama: lcm(ffn / tp, h), the row-parallel fc2's rows and the
     column-parallel linears' h: 28,672 for Llama 3 8B, 57,344 for 70B, 212,992 for 405B); build_data_parallel_buffer_
     index l. 258-363 places each parameter at a multiple of c (two remnants sharing a chunk where they fit, the 1-D
     norms filling the gaps) and pads the bucket to a multiple of d x c (_pad_if_needed l. 285-288, l. 365-370; d the
     group's data-parallel ranks), so a rank's shard of each unit is ceil(B / (d c)) c elements (B <= U + c a
     parameter with a remnant) and a gathered bucket B rounded up to d c. Replaying that placement on the Llama 3
     layer shapes (qkv, proj, fc1, fc2, two norms): at tp 1 and d 8 the unit grows 0.01% (8B: 218,112,000 -> 218,136,576
     elements); the share reaches 2.6-9.8% only where d x c nears the unit (70B tp 8 at d 512: 106,971,136 ->
     117,440,512; 405B tp 8 at d 1,024: 398,491,648 -> 436,207,616), where the rank's shards are small: +20,448
     elements a unit a rank (70B, 80 units x 8 B of weights, main weights and gradients: 13 MB) and +37.7 M elements
     a gathered 405B bucket (75 MB in bf16; about 0.5 GB with the prefetched units and the gradient buckets), under
     1% of an 80 GB GPU and inside the fragmentation band; the Megatron CI rows (hidden 512, d <= 4) below 0.3% of a
     unit. The embedding's and output layer's buckets (c = h, padded to d x h) are priced where they move a figure:
     step.py [20]'s embedding gradient shard.
[me] The multi-token-prediction stage's own word embedding and the MTP modules' non-unit parameters (issue 21,
     memsmall4). NVIDIA/Megatron-LM @d98e8a64 (and 905c0e386, Megatron-Bridge's pin): GPTModel builds a
     LanguageModelEmbedding `if self.pre_process or self.mtp_process` (megatron/core/models/gpt/gpt_model.py
     l. 166-181; mtp_process: the last pipeline stage without a custom layout, multi_token_prediction.py l. 788-828),
     so under PP the stage holding the MTP modules keeps a second word embedding (V/t x h, a learned position table
     with it) that setup_embeddings_and_output_layer zero-fills, marks shared_embedding and all-reduces with the
     first stage's (language_module.py l. 229-230, 253-305): a trainable parameter of that stage, with its gradient
     and optimizer states in the stage's buffers, beside its output layer, which allocates its own weight on a stage
     without pre_process whether or not the embeddings are tied (gpt_model.py l. 289-290; tied, the MTP stage's
     forward passes the embedding's weight, language_module.py l. 345-357). params_of adds it on the last stage where
     pp > 1 and the stack says so (stack memory.mtp_embedding_copy: megatron, inherited by megatron-bridge; not
     deepseek, whose DualPipe end rank holds the embedding and the head together, nor torchtitan-0.3, which refuses
     MTP under PP): Llama 3 8B with one MTP module at pp 2, tp 1: E = 525,336,576 parameters more on the last stage.
     Under Megatron-FSDP every MTP module's eh_proj (2 h x h / t) and three norms (enorm, hnorm, final_layernorm:
     multi_token_prediction.py l. 1157-1174, 1247) are outside its one FSDP unit, mtp_model_layer (a TransformerLayer,
     l. 1220-1228; mcore_fsdp_adapter.py l. 163-173), and the MTP stage's embedding copy too: [nu]'s non-unit
     buckets, kept gathered the whole step on the last stage (_mtp_non_unit): Llama 3 8B, one module, tp 1,
     (33,554,432 + 3 x 4,096) x 2 B = 67,133,440 B at pp 1, + 525,336,576 x 2 B at pp 2 (tests/test_mtp_embedding.py).
     With tied embeddings the last stage then holds two V/t x h copies, the output layer's ([6]) and this one. The
     copy's gradient all-reduce with the first stage's, tied or not, is priced in the step's pp_comm since mtpmore
     (step.py [20], pp_tied_grads). With a custom layout (--pipeline-model-parallel-layout) Megatron's MTP stage is
     the rank whose last model chunk holds the 'm's (mtp_on_this_rank l. 788-828; pipeline_parallel_layer_layout.py
     validate_layer_layout: after every decoder layer, all in one rank's last virtual stage), possibly not the last
     ("MTP standalone"); the planner prices the MTP modules on the last stage whatever the layout (trainers/
     megatron.py parse_layout notes a layout that puts them elsewhere), and the copy with them, on the same stage.
     Not priced: an fp8-gathered eh_proj at 1 B (priced at the gathered weights' bytes); a standalone MTP stage's
     copy on its own rank (with the modules, on the last stage instead), or none where a layout puts the modules on
     the first rank (vpp 1: pre_process, one embedding).
[sm] The eager core attention's torch softmax in fp32 (torch_softmax_fp32; job fields masked_softmax_fusion,
     attention_softmax_in_fp32): Megatron-Core's DotProductAttention (dot_product_attention.py @d98e8a64 l. 100-109)
     runs fused_softmax.py FusedScaleMaskSoftmax: the fused CUDA kernel where is_kernel_available (l. 238-270:
     masked_softmax_fusion and 16 < sk <= 4096, the stack's score_softmax_max_keys), which saves its 16-bit output;
     else forward_torch_softmax (l. 299-345): with softmax_in_fp32 (TransformerConfig.attention_softmax_in_fp32,
     default True, l. 485; Megatron-LM's --attention-softmax-in-fp32, or --apply-query-key-layer-scaling, which sets it,
     arguments.py l. 1713-1715) input.float(), the scale and masked_fill_ in fp32, torch.nn.Softmax in fp32, whose
     autograd node saves its fp32 result (PyTorch derivatives.yaml `_softmax`: result), then probs.half() /
     .bfloat16() (saves nothing; the dropout keeps its mask, the context bmm the dropout's 16-bit output, as the
     fused path's). So 4 - 2 = 2 B a score element more than the "scores" tensor counts, per local head and key,
     dropped with the scores by recompute. Without softmax_in_fp32 the torch softmax runs and saves in the 16-bit
     input dtype: nothing more. The Megatron-DeepSpeed forks' eager core builds the same FusedScaleMaskSoftmax, each
     with its own key limit (kernels score_softmax_max_keys: 4,096 at microsoft's @f4157bea and BigScience's @497aa1bf,
     2,048 at the 2021 fork b56b50bb) and reading --no-masked-softmax-fusion whatever else the job sets (stack
     runs.attention eager_softmax_fusion_switch); softmax_in_fp32 there is --attention-softmax-in-fp32 or query-key
     layer scaling, on by default (trainers/megatron_deepspeed.py _softmax_fp32). Not priced: the transient fp32
     copies within the forward (input.float(), the scaled scores).
[cg] CUDA graphs (job fields cuda_graph_impl, cuda_graph_scope; planner/cuda_graphs.py held_output_bytes and its
     references): a graph's static outputs live in the graph pool from the layer's forward to its backward; under
     Transformer Engine graphs of moe_router + moe_preprocess with the alltoall dispatcher the permuted tokens
     (T / (tp under SP) x top_k x h x 2 B an MoE layer and micro-batch), which the eager layer frees after the
     dispatch, are among them: added to the layer's saved activations (every recompute mode a graph runs with).
[dh] The MoE token dispatchers' attributes (layers/moe.py dispatcher_held_bytes [13]; stack memory.moe_routing_saved):
     Megatron-Core's dispatchers keep tensors of a layer's last forward as attributes until that layer's next
     forward overwrites them (the alltoall dispatcher's dense probabilities self.probs and, on the unfused router,
     its bool routing map; the allgather dispatcher's local map; DeepEP's fp32 top-k probabilities and received
     multihot map; Hybrid-EP's manager's routing map and fp32 [n, etp E] probabilities). One micro-batch's per MoE
     layer, whatever the micro-batches in flight: summed over the stage's MoE layers (and an MTP module's on the
     stage holding the loss), held at the activations' peak and at the optimizer step (every moment of the step: the
     previous step's are held until each layer's first forward), priced in layer_activations. The tensors autograd
     also saves (TE's fused routing map, DeepEP's top-k indices, the allgather's per-row probabilities, Hybrid-EP's
     dispatched fp32 probabilities) count beyond the saves only in the share of layers full recompute re-runs, whose
     checkpointed forward saved nothing; for an MTP module that share is mtp_recomputed's (Megatron checkpoints the
     module under the uniform method, not under the block one, whatever its count), which also prices the module's
     own activations: under it the module keeps its checkpoint's two inputs and its re-run tensors are the recompute
     buffer of the stage holding the loss (_with_mtp).
     With Megatron's routing-map padding run by its fused kernel (job moe_router_padding,
     enable_experimental and moe_permute_fusion: padded_routing_map) the alltoall dispatcher's self.routing_map and
     DeepEP's dispatched_routing_map are the padded int32 copies in place of the bool maps (layers/moe.py
     padded_routing_map_bytes [17]: 4 E B a local token, DeepSeek-V3 at 4,096 tokens 4 MiB an MoE layer).
[sr] The selective recompute buffer and the MoE routing saves (layers/moe.py routing_saved_bytes [9]-[15]): Megatron-Core's
     selective modules the planner prices re-run no routing tensor of any dispatcher. NVIDIA/Megatron-LM @d98e8a64
     transformer_layer.py _forward_pre_mlp_layernorm l. 818-831 (layernorm: CheckpointWithoutOutput around the
     pre-MLP norm alone; the router and the dispatch run on its output outside the checkpoint), moe/experts.py
     l. 1019-1030 (moe_act: bias_act_func(fc1_output, bias, permuted_probs) alone, the probabilities a checkpoint
     input, kept, and detached, not copied, in the re-run), attention.py l. 394 (core_attn), multi_latent_attention.py
     l. 171-174 (mla_up_proj). So the router's saves, the permutations' maps, DeepEP's and Hybrid-EP's handles, the
     allgather's masked_select and the permuted probabilities are kept (the policy's saved tensors), never in the
     buffer of one layer's re-run: alltoall, allgather, deepep, hybridep alike (deepep_ll prices none).
[hs] torchtitan 0.3's HybridEP ops (stack memory.hybridep_dispatch_saves; layers/moe.py hybridep_torch_saved_bytes [20],
     hybridep_torch_saves): beside the layer's tensors (its generic fp32 router scores 4 E, moe_router_logits, and
     the experts' rows), per MoE layer and micro-batch in flight, the combine's bf16 permuted scores (2 B a permuted
     row: the capacity rows of the non-blocking dispatch); op-level SAC keeps the dispatch's cached fp32 scores (4 B a
     row) instead, the bf16 scores re-made in the re-run layer; full AC keeps none and re-makes the no-recompute set
     with the layer. The router's int64 top-k indices (gather's and the dispatch's saved index, one tensor: 8 k B a
     local token) and, under SAC, topk's cached outputs (12 k B) are the router's, priced on every dispatcher by [tr].
     DeepSeek-V3 16B (E 64, k 6) at EP 8, capacity factor 1 (48 rows a local token), router and dispatch together:
     48 + 96 = 144 B a local token a layer without recompute, 72 + 192 = 264 B under SAC. DeepEP's dispatch handle
     (hybridep_saved_bytes [15]: 353.5 B a local token there) is a ctx attribute of the dispatch and combine nodes,
     kept under every mode: full recompute's re-run layers keep it beside their input (layer_memory's per-kind
     inputs). docs/memory_mechanisms.md (z), fifth pass.
[tr] torchtitan's router (stack memory.router_topk_saves; layers/moe.py torch_router_saved_bytes [21],
     torch_router_saves), on every dispatcher: beside the layer's fp32 scores (4 E, moe_router_logits), per MoE layer
     and micro-batch in flight, the gather's int64 [n, k] index (8 k B a local token) and, where the model's router
     renormalises (MoESpec.route_norm), the division's fp32 operands (4 k + 4 B). Op-level SAC: at torchtitan main
     ('recompute_topk') none kept, all re-made in the re-run layer; at 0.3 ('cache_topk') topk's cached fp32 values
     and int64 indices (12 k B) kept, the division's operands re-made in the re-run. Full AC keeps none and re-makes
     the no-recompute set with the layer. Qwen3-30B-A3B (k 8, route_norm) without recompute: 64 + 36 = 100 B a local
     token a layer. docs/memory_mechanisms.md (z), sixth pass.
[ro] torchtitan's standard reorder and combine (stack memory.reorder_combine_saves; layers/moe.py
     torch_reorder_saved_bytes [22], torch_reorder_saves), on the all-to-all plans (EP 1 too): per MoE layer and
     micro-batch in flight, the argsort's int64 index and its `// top_k` copy (16 k B a local token) and the fp32 copy
     of the expert rows the score multiplies (main: the input rows under score_before_experts, the outputs else; 0.3:
     the combine's outputs), 4 h B a row of which the generic moe_expert_out prices 2 h, with the fp32 scores 4 B a
     row: beyond the generic table n k (2 h + 4) + 16 k n. Op-level SAC and full AC keep none, the re-run layer
     re-makes them. Qwen3-30B-A3B (h 2,048, k 8): 8 x (4,096 + 4 + 16) = 32,928 B a local token a layer.
     docs/memory_mechanisms.md (z), seventh pass.
[pi] torchtitan's EP permutation index (stack memory.ep_permute_index; layers/moe.py torch_permute_index_bytes [23],
     torch_permute_index_saves), on the all-to-all plans: per MoE layer and micro-batch in flight, the index the
     received rows' expert-major gather and the combine's index_put keep (one tensor): 0.3 ('int64') 8 B a received
     row with EP > 1 only (AllToAllTokenDispatcher._permute; EP 1 runs LocalTokenDispatcher, no permute); main
     ('padded_int32') 4 B a padded row, R + E_l A entries, EP 1 too. Op-level SAC and full AC keep none, the re-run
     layer re-makes it. Qwen3-30B-A3B (k 8, E 128) at EP 8 on 0.3: 8 x 8 = 64 B a local token a layer where the
     busiest rank receives the mean (planner/imbalance.py: cf scales R).
[vs] The vocabulary's uneven TP split (stack memory.vocab_split_uneven; vocab_tp_divisor): torchtitan shards the
     embedding's and the output layer's weights along the vocabulary as DTensor Shard(0) placements (pytorch/torchtitan
     @e347b1e5e models/llama3/infra/parallelize.py l. 173-188; release/0.3 @4f9e9a47d models/common/decoder_sharding.py
     set_decoder_sharding_config l. 301-345) and the vocab-parallel loss's logits as Shard(-1); torch's
     Shard._split_tensor splits by torch.chunk, the first ranks ceil(V / tp) rows, the last the remainder. The largest
     rank's rows are priced: V / ceil(V / tp) in place of tp for the embedding and output parameters (params_of, the FSDP
     units and ends, the root unit, FSDP2's end of the backward), the logits and the loss (output activations, the
     logits PP and the loop hold, the loss pool, ChunkedLossWrapper's chunk and head). tp itself where tp divides V (every
     catalog model a torchtitan stack runs). Not moved: the output GEMM's time and the DP reduction's volume (step.py
     reads params_of without it: under one row a rank), the Megatron and DeepSpeed sites (their stacks pad or split V
     evenly: the field is false there).
[dg] DeepSpeed-MoE's dense gating (stack moe_gating; layers/moe.py [18] derives each tensor): what an MoE layer saves
     for its backward, gating_saved_bytes' named tensors (the gate's fp32 input, the fp32 location one-hots, the
     einsums' bf16 dispatch mask and combine weights, the combine's [E, C, M] expert output, which replaces the
     tensors() moe_expert_out), kept by every mode but full recompute (Megatron-DeepSpeed's selective policy re-runs
     the attention core alone) and re-materialised with the layer under it; what it holds beyond them
     (gating_transient_bytes): backward, the combine weights' gradient in bf16 and fp32 and a product's gradient, in
     the layer's buffer; forward, the gating's fp32 [S, E, C] products (top-2: three at once), a moment of the last
     layer's forward beside the stage's saved activations, its excess over the peak added to recompute_buffer as
     TE's CP merge [cp3] is (the moment counts that layer's own saves too: a named approximation, high by them).
[off] CPU offload (job fields offload_optimizer / offload_param, stack cpu_offload; planner/offload.py cites the
     code): model_state_terms moves the fp32 master, Adam's moments and the sharded gradient (ZeRO-2 and above) and,
     with offload_param, the sharded weights (FSDP / ZeRO-3) off the GPU; the step's temporaries and gradient copies,
     sized by the partition left on the GPU, go with them; DeepSpeed keeps one staging buffer of the stage's largest
     parameter in the gradient dtype (_offload_staging, in the gradients term). Megatron's HybridDeviceOptimizer
     moves offload_fraction of the master and Adam partition (offload.switches' factor; the distributed optimizer's
     grad buffer stays whole on the GPU, sharding zero1). The host's bytes are step.offload_parts'.
[ocb] DeepSpeed ZeRO-1/2 offload's copy of the updated partition back to the GPU (term offload_copy_back; job field
     offload_optimizer cpu, stack cpu_offload.transfers zero_offload; planner/offload.py copy_back_gpu_bytes).
     microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage_1_and_2.py step (l. 1826-1944), cpu_offload branch
     (l. 1865-1884): per parameter group, after the CPU optimizer's step (_optimizer_step l. 1871, on the host's fp32
     partition and its pinned fp32 gradient), bit16_partitions[partition_id].data.copy_(fp32_partition.to(device).data)
     (l. 1879-1882): the group's fp32 partition copied to the GPU (4 B an element), converted into the bf16 partition in
     place (a view of bit16_groups_flat), freed with the statement, before the next group. What else is live on the
     GPU then: the 16-bit weights whole (bit16_groups_flat, the states' weights), the staging buffer
     temp_grad_buffer_for_gpu_offload (l. 483-485, an attribute kept all run: [off]), the workspaces and buffers of the
     kept tensors; no gradient: the hooks' copies set each partition gradient's param.grad = None (l. 1284), the
     partition buffer grads_in_partition is never allocated under offload (copy_grads_in_partition returns first,
     l. 1329-1342) nor averaged_gradients filled (l. 780), and the reduction's epilogue releases the IPG buffers and
     frees every other gradient (l. 802, 807: ZeRO-1's whole ones); the gradient norm is the hooks' per-parameter
     scalars (scaled_global_norm l. 1791-1796), the unscale and the step run on host tensors, the activations are
     freed. The moment: the kept tensors less the gradients but the staging buffer, plus 4 B x the largest group's
     partition (one dense group assumed, an upper bound as in [sg]: Megatron-DeepSpeed's no-weight-decay group is
     small; DeepSpeed MoE's expert groups at most moe_group_params a rank, _largest_group); the term is its excess over
     the backward's peak and the step's terms before it. Llama 3 8B, ZeRO-2 on 8 H100s, seq 1,024, micro-batch 1, full
     recompute: 4 B x 1,003,782,656 = 4.02 GB against the peak's activations, output layer, recompute buffer and IPG
     buffer (0.27 + 0.80 + 0.13 + 1.00 GB): +1.82 GB (tests/test_offload.py). ZeRO-1 frees its 2 P of gradients first:
     the moment sets the peak only where 4 P / d > 2 P + the activations (d < 2). ZeRO-3's copy-back holds
     nothing on the GPU (stage3.py l. 2069-2072 copies the host's fp32 into the 16-bit partition, converted on the
     CPU). Not priced: the partition's alignment padding (under 2 dp elements a group). Since [onf] the reduction's
     fp64 norm piece comes first and is the larger moment on that example: the copy-back adds 0 there.
[onf] DeepSpeed ZeRO-1/2 offload's fp64 gradient-norm piece (term offload_norm_fp64; issue 21, memsmall4). Under
     cpu_offload the gradient norm is not taken at the step (get_grad_norm_direct, [sg]'s norm_fp64) but in the
     reduction's hooks: microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage_1_and_2.py reduce_ipg_grads
     (l. 1370-1420) -> copy_grads_in_partition (l. 1329-1340), whose cpu_offload branch at the accumulation boundary
     runs set_norm_for_param_grad_in_gpu (l. 1253-1266: accumulated_grad.view(-1).narrow(0, source_offset,
     num_elements).data.double().norm(2): an fp64 copy of the parameter's piece inside the rank's partition on the
     GPU, 8 B an element, freed once its 0-d norm is taken) and then async_inplace_copy_grad_to_fp32_buffer_from_gpu
     (l. 1268-1284: src_tensor.float(), 4 B an element, after the fp64 copy is freed); the norms are combined on the
     host (complete_grad_norm_calculation_for_cpu_offload l. 1286-1326). ZeRO-2 flushes in the last backward's hooks
     and the epilogue (the embedding, the backward's last gradient, there: after the backward, the activations freed),
     ZeRO-1 (and under PP the pipeline engine's stages without the loss, pipe/engine.py l. 803-812, 860-862) after the
     backward with one buffer; the IPG buffers are live until the epilogue releases them (l. 802). The moment: the
     kept tensors (ZeRO-1's whole gradients; ZeRO-2's staging buffer), the mode's IPG buffers and 8 B x the largest
     piece (_norm_piece, [sg]'s: min(the stage's largest parameter, the rank's whole partition), offloaded or not);
     the term is its excess over the peak and the reduction's terms ([zb]) before it, and the step's terms after it
     are priced over it. Llama 3 8B, ZeRO-2 offload on 8 H100s, seq 1,024, full recompute: 8 x 525,336,576 +
     1e9 = 5,202,692,608 B beside the kept tensors, 3,003,645,952 B above the backward's peak and 1,187,561,984 B
     above [ocb]'s copy-back moment: allocated 21,193,435,136 -> 22,380,997,120 B (tests/test_offload.py). A lower
     bound where the largest piece is flushed inside the backward (the output layer's, a layer's weight: the
     activations not yet freed beside it are not added); the 0-d fp64 norms kept to the step (one 512-B block a
     parameter of the partition) are not priced.
[es] The optimizer stepped in the backward (job field early_step_in_backward, stack memory.optimizer_in_backward):
     pytorch/torchtitan @e347b1e5e torchtitan/components/optimizer.py OptimizersInBackwardContainer (l. 138-183): one
     optimizer per parameter and param.register_post_accumulate_grad_hook(optim_hook), the hook running
     optim_dict[param].step() then .zero_grad() (set_to_none); step() and zero_grad() of the container are no-ops.
     torch 2.13 fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce calls the sharded parameter's post-accumulate-
     grad hooks right after it assigns the sharded gradient (a view of the unit's reduce-scatter output, allocated on
     the reduce-scatter stream), so each unit's sharded gradients are stepped and dropped as its reduce-scatter ends:
     the output block returns to the reduce-scatter stream's pool, which the next unit's output reuses. Priced under
     FSDP: the pool holds the largest unit's sharded gradients (grad_reduce_bytes x unit / N) instead of every one
     (grad_reduce_bytes x P / N), the end-of-backward moment [tt7] holds the same, and the optimizer step is no moment
     of its own: a foreach step's temporary is one parameter's (the largest, the embedding's or output layer's shard,
     bpp.optimizer / 2 B a parameter), beside the rest. torchtitan refuses it with pipeline and expert parallelism
     (build_optimizers l. 277-290, plan._check_early_step). Not priced without FSDP (DDP's gradients: a warning).
[ub] TP communication overlap's buffers (plan tpo; stack memory.tp_overlap_buffers), outside the caching
     allocator, so in the total (the gate) and not in the allocated or reserved peaks; per GPU, T = micro-batch
     x seq / cp tokens (every rank of the TP group holds the whole gathered shape):
     userbuffers (Megatron --tp-comm-overlap): NVIDIA/Megatron-LM @d98e8a64 megatron/training/initialize.py
     _initialize_tp_communicators (l. 194-269) calls Transformer Engine's initialize_ub with shape
     [seq_length x micro_batch_size // context_parallel_size, hidden_size], quantization_modes [FP8 if args.fp8
     else NONE] (a second, NONE set with --first-last-layers-bf16 and bf16 layers) and ub_cfgs {} unless
     --tp-comm-overlap-cfg names a file. TE @4329ff84 transformer_engine/pytorch/module/base.py initialize_ub
     (l. 126-547) makes one communicator per GEMM name of its default methods: ring_exchange qkv_fprop,
     fc1_fprop, proj_dgrad, fc2_dgrad; pipeline proj_fprop, fc2_fprop; bulk qkv_dgrad, qkv_wgrad, fc1_dgrad,
     fc1_wgrad; external proj_wgrad, fc2_wgrad: 12, shared by every layer. Each holds a buffer of `shape`,
     bf16, or uint8 under FP8 for the 8 all-gather layers (layers_all_gather_overlap, fp8_buf); the 4
     reduce-scatter layers stay bf16. common/comm_gemm_overlap/comm_gemm_overlap.cpp CommOverlapBase::initialize
     (l. 410-425) and CommOverlapP2PBase::initialize (l. 805-830; a reduce-scatter ring-exchange buffer holds
     2 t - 1 chunks of T / t rows: none of the defaults is one) register it with register_user_buffer_collective
     (userbuffers/userbuffers-host.cpp l. 514-738: cuMemCreate rounded up to the minimum multicast granularity,
     or cudaMalloc): 24 B x T h per GPU in bf16 (Llama 3 70B at 8192 tokens: 1.5 GiB), 8 + 4 x 2 = 16 B with
     fp8 (+ 24 with bf16 layers under fp8; nvfp4 runs args.fp8 None: bf16). Megatron passes FP8 for every
     --fp8-recipe (initialize.py l. 230-233), so delayed, tensorwise and mxfp8 are 16 alike; blockwise and nvfp4 with
     the overlap do not start (TE's all-gather fill has no branch for their quantizers: start-up rule 106
     MEGATRON_TP_OVERLAP_QUANTIZER; tests/test_tp_overlap_quantizer.py). By the run's Transformer Engine
     release (job field te_version, else the stack's memory.te_version, 2.17.1; planner/te_version.py, read at
     every tag v1.6-v2.18): before 2.7 no "external" method, 10 buffers, 6 all-gather (20 B x T h in bf16,
     6 + 8 = 14 with fp8: NeMo 24.07's TE 1.8, the Nemotron-8B record 0.125 GiB lower); before 2.10 the
     overlapped GEMMs' 3 workspaces replace the plain one (initialize_ub's _cublas_workspace =
     get_workspace().repeat(3)): one workspace fewer than the 3 beside it priced from 2.10 (Megatron-Bridge
     25.11's TE 2.9: 12 buffers, 32 MiB + 1 KiB less on H100 / B200). Not priced: a
     --tp-comm-overlap-cfg that moves a reduce-scatter to ring_exchange ((t - 1) / t x 2 B x T h more each),
     the communicator's flags region (about 3 MiB). Beside them, through the caching allocator, the
     overlapped GEMMs' own cuBLAS workspace (cpp_extensions/gemm.py get_cublas_workspace(ub=True):
     _NUM_MAX_UB_STREAMS = 3 workspaces; stack memory.tp_overlap_workspaces), in the workspaces term.
     symmetric_memory (torchtitan async TP, torch.compile's micro-pipeline TP): torch 2.13
     torch/distributed/_symmetric_memory/__init__.py get_symm_mem_workspace keeps one workspace per TP group
     (_SymmetricMemory.empty_strided_p2p, outside the caching allocator) grown to the largest request: an
     all-gather's shard (2 B x T h / t) or a reduce-scatter's two output chunks (2 x 2 B x T h / t): 4 B x T h / t
     (70B at 8192 tokens, TP 8: 32 MiB).

[ep] The MoE dispatcher's communication buffers (job moe_dispatcher; planner/ep_buffers.py, its
     references): DeepEP's NVLink buffer (cudaMalloc) and, for an EP group of more than 8 ranks, its
     RDMA buffer (NVSHMEM's symmetric heap), or its low-latency RDMA buffer; Hybrid-EP's NVLink
     (cuMemCreate / cudaMalloc) and RDMA (cudaMalloc) buffers: allocated once at the first dispatch
     and kept, outside the caching allocator, so in the total (the gate) and not in the allocated or
     reserved peaks (Megatron's logged max-allocated does not see them), like the reserve. A rank
     allocates it at its first dispatch (fused_a2a.py get_buffer, init_hybrid_ep_buffer): priced on
     a stage that holds an MoE layer (or twin's), not on an all-dense one. NCCL's dispatchers
     (alltoall, allgather): none beyond the reserve. Hybrid-EP's sizes read the group's ranks per
     NVLink domain, and each rank passes its own: deepseek-ai/DeepEP @94a9f8f (hybrid-ep branch)
     deep_ep/hybrid_ep_buffer.py HybridEPBuffer.__init__ l. 61-110 sets num_of_ranks_per_node to
     detect_accessible_ranks(group) (csrc/hybrid_ep/allocator/allocator.cu l. 178-211: the rank
     all-gathers a memory handle and counts the members whose handle it can import or that share its
     host, itself included; the count is not reduced over the group) unless the environment sets
     NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN (not modelled: Megatron-LM @d98e8a64 sets it only in
     functional-test configs), num_of_nodes = group / that, and the Configurer and the buffers
     (buffer/intranode.cu l. 193-278: probabilities of num_of_experts_per_rank x num_of_ranks_per_node
     columns; buffer/internode_doca.cu: the num_of_nodes - 1 inter-node copies) are sized from them;
     Megatron's init_hybrid_ep_buffer (fused_a2a.py l. 285-350) passes no per-domain count. So a rank
     is sized by its own piece (comm.domain_pieces), and where groups straddle domains unevenly (EP 48
     on 72-GPU racks: ranks see 48 or 24 of their group) the GPU's figure is the heaviest rank's, the
     largest of the buffers at each piece the job's ranks see.
     The tokens per rank the buffers are sized for (stack runs.hybridep_buffer_tokens, hybridep_tokens):
     dispatch, Megatron-Core's, the first dispatch's rows (fused_a2a.py HybridEPDispatch.forward: the micro-
     batch's T / rep_div, padded to 64 there); local_batch, torchtitan 0.3's, local_batch_size x seq_len / (cp x
     tp) (pytorch/torchtitan release/0.3 @4f9e9a47d models/common/token_dispatcher.py
     update_ep_token_dispatcher_config l. 1216-1255 into HybridEPTokenDispatcher.init_buffer l. 946-963 and
     distributed/deepep/hybridep.py get_buffer l. 394-452: HybridEPBuffer(max_num_of_tokens_per_rank=that,
     use_shared_buffer=True, enable_custom_allgather=True, 16 dispatch / 16 combine SMs), whatever the PP
     micro-batch, with the local batch taken as the plan's micro-batch without PP and gbs / dp with it (one
     pipeline pass a step: a named assumption where the run accumulates gradients), then the Configurer's
     max(tokens, 512) rounded up to the 64-token combine chunk (csrc/hybrid_ep/config.cuh @94a9f8f l. 385-387;
     the @f725d2969 torchtitan pins is @94a9f8f with a build fix, layers/moe.py [19]). The buffers' formulas are
     the same for both (ep_buffers.hybridep); the SM counts size none of the priced buffers (only the
     preprocessing scratch, not priced). The 512 floor applies to Megatron's rule too: Megatron @d98e8a64
     fused_a2a.py HybridEPDispatch.forward l. 400-412 passes num_tokens = x.shape[-2] to init_hybrid_ep_buffer
     (l. 285-350: HybridEPBuffer(max_num_of_tokens_per_rank=num_tokens), l. 343), whose deep_ep/hybrid_ep_buffer.py
     @94a9f8f l. 85-87 hands it to the same Configurer, max(tokens, 512) (config.cuh l. 385-387): a rank's
     micro-batch under 512 tokens is sized at 512.

[nv] NCCL's NVLink SHARP buffers (term nvls_buffers; planner/nvls_buffers.py, its references): NCCL binds them with
     cuMemCreate for each communicator that runs an NVLS collective (NVIDIA/nccl v2.27.3-1 src/transport/nvls.cc
     ncclNvlsBufferSetup l. 316-342), outside the caching allocator, so in the total (the gate) and not in the
     allocated or reserved peaks, like the reserve; set up at the first NVLS collective (NCCL_RUNTIME_CONNECT,
     src/group.cc l. 153-156) and kept, so held at every step's peak after the first. Per GPU and communicator:
     nvlsChannels x 2 x 128 KiB x 8 steps x nHeads + 2 MiB of credits, nvlsChannels 16 (Hopper) or 24 / 32
     (Blackwell, one domain / several), nHeads the communicator's GPUs in the NVLink domain (at most 32), none where
     they are 2 or fewer; on hardware with NVLS (hardware nvls) unless the job's nccl_nvls_enable is 0
     (comm.nvls_enabled, comm.py [22]). The GPU's communicators: TP (tp), the gradient group (dp x cp) and the
     expert-data-parallel group (MoE), placed at the plan's rank order (plan.order): --use-tp-pp-dp-mapping's
     tp-cp-pp-dp puts DP outside PP, fewer of its ranks in a domain (TP 2 PP 2 DP 4 on 8-GPU nodes: DP 2 a node, no
     NVLS, where tp-cp-dp-pp holds 4 a node, 130 MiB). The one memory term that reads the order: fit prices a
     candidate's memory at its lightest order and adds the difference at each other order (search.with_order_memory,
     order_extra), so explain and fit agree at every order (tests/test_nvls_buffers.py). Llama 3 8B TP 8 on 8 H100s:
     one communicator (TP; dp 1), 16 x 2 x 1 MiB x 8 + 2 MiB = 258 MiB. Not in the reserve: that is the job's reserve_GiB, an assumption (docs/memory_mechanisms.md),
     no measurement of NCCL's NVLS memory. NCCL releases before v2.22.3-1 bound more, at init (planner/
     nvls_buffers.py [8]): not modelled, no stack or record carries its NCCL release.

[z3] DeepSpeed ZeRO-3's gathered working set (stack fsdp.zero3_modules, DeepSpeed's defaults; job field
     deepspeed_zero3, the DeepSpeed JSON's zero_optimization keys), at microsoft/DeepSpeed @38327e07: parameters are
     gathered per submodule, not per layer. partitioned_param_coordinator.py fetch_sub_module (l. 285-418) all-gathers
     the module's own parameters (iter_params(recurse=False): each Megatron linear is a module, a layer's GEMM rows here;
     a row of several GEMMs, e.g. the experts, taken as one module, assumed) and then, where the gathered parameters
     (__n_available_params) are below stage3_max_live_parameters L, prefetches the next not-gathered parameters of the
     recorded trace while the prefetched count is below min(L - gathered, stage3_prefetch_bucket_size) (l. 380-413: at
     least one whole parameter once it starts; L bounds the prefetch only, never the fetch). release_sub_module
     (l. 421-440, __params_to_release l. 523-554) frees a module's parameters after its forward or backward unless the
     trace reuses them before stage3_max_reuse_distance R parameters of modules have gone by: a module re-run under
     full recompute stays gathered from its re-run to its backward where the modules between (the rest of the re-run
     forward, then the backward down to it: 2 x the parameters after it) hold fewer than R (the layer's last module
     always). Parameters of at most stage3_param_persistence_threshold elements are never partitioned (ds_persist:
     the norms and biases, where the widest is within it; partition_parameters.py), 2 B each all step. Gradients:
     the model dtype (engine.py get_data_types: grad_accum_dtype = the model's under ZeRO; communication_data_type the
     same), handed by autograd per parameter to reduce_ready_partitions_and_remove_grads (stage3.py l. 1258-1290): one
     of at most reduce_bucket_size elements is copied into the contiguous IPG buffer (torch.empty(reduce_bucket_size,
     dtype=model dtype), allocated once, l. 537-540: in every moment) and freed; a larger one stays its own tensor
     until the next gradient's hook reduce-scatters it (__reduce_and_partition_ipg_grads, l. 1294-1328, on the
     reduce stream under overlap_comm, stage 3's default) into the flat gradient partition (l. 547-557, the sharded
     gradients). So in a layer's backward, at module j's weight-gradient GEMM: j's gathered weights and any
     prefetched, j's gradient and the previous module's (in backward order) where it exceeds the bucket, unless another
     gradient's hook fires before j's GEMM and flushes it ([z3h]: the moments then split). Priced: the
     largest over a layer kind's trace (its re-run forward under full recompute, then its backward; the next layer of
     the same kind after it) of the gathered parameters + those gradients, and the output layer's moment (its weight
     and gradient); x the weights' bytes (the terms zero3_working_set and zero3_unreduced_grads), + the IPG buffer
     (zero3_ipg_bucket), + the persistent parameters of the stage's layers (zero3_persistent; zero3_parts computes
     each, FSDP_TERMS). Since issue 21's z3pieces the three pieces docs/memory_mechanisms.md (x) named as not priced:
[z3c] reduce_scatter_coalesced's copy (term zero3_bucket_copy): with reduce_scatter on (config.py l. 104, the default)
     __reduce_and_partition_ipg_grads (stage3.py l. 1292-1328) hands the bucket's gradients to comm/coalesced_collectives.py
     reduce_scatter_coalesced (l. 158-218), which reduces a bucket of one gradient the DP world W divides in place
     (l. 179-182) and copies any other by torch.cat (l. 199): W x sum ceil(n_i / W) elements in the model dtype, live
     beside the hook's own gradient and the flushed ones until partition_grads has taken the rank's part. The hook of a
     gradient flushes the bucket where it would overflow (l. 1268-1272); a gradient above reduce_bucket_size is never
     copied into the buffer, so it always leaves alone at the next hook: at module j's backward in [z3]'s order the
     previous module's, copied where W does not divide it (530B, h 20,480, on 560 GPUs: fc2's 4 h^2 at fc1's hook,
     3.125 GiB; on 640 none). Smaller gradients fill the contiguous buffer and leave together: where a layer holds a
     gradient above the bucket the fill is exact (zero3_flush_copies: two passes of the layer's backward, the second's
     exact); where none does the buffer fills across layers and the copy is priced at its bound, reduce_bucket_size
     elements. Biases' and norms' gradients (persistent, small) are left out of the fill, as [z3] leaves them out of
     the modules. W: the ZeRO-3 group's ranks (dp x cp, MiCS's shard group: mics.py l. 415 dp_process_group).
[z3r] the last layers kept gathered (term zero3_reuse_kept): __params_to_release (partitioned_param_coordinator.py
     l. 523-554, called by release_sub_module l. 422-440 with the step after the module) keeps a module's parameters
     where the modules the trace runs before its next use hold fewer than stage3_max_reuse_distance R parameters. From
     a last layer's first forward: without full recompute the rest of the forward, the output layer (assumed a module
     of the trace; a tied weight used outside its module may not be) and the backward down to it, 2 (A_j + i P) + out
     (A_j the layer's parameters after module j, P a layer's, i the layers above it); under full recompute the rest of
     the forward, the output layer, the layers above re-run and backward and its own layer's re-run up to it,
     (P - m_j) + 3 i P + out (zero3_reuse_kept, a closed form over i). Kept modules live from the end of the forward to
     their backward (their re-run): beside the output layer's moment all of them, beside the last layer's worst
     backward moment those of the layers below it; the term is the larger excess (the last layer's kind; its own kept
     modules inside the layer are [z3]'s trace). None for a model whose layers hold more than R / 2 (the 175B and 530B
     records); Llama 3 8B on the defaults, full recompute: its last layer, 0.41 GiB.
[z3s] the optimizer step (term zero3_step_grads): step (stage3.py l. 2086-2130) prepares one sub-group at a time;
     _prepare_fp32_grad_for_sub_group (l. 1895-1915) runs self.flatten(averaged_gradients[i]).to(fp32): a flat copy of
     the sub-group's gradient partition (model dtype; _flatten_dense_tensors, l. 187, a torch.cat) and its fp32 copy at
     once, the fp32 one kept to _release_sub_group (l. 1943-1951). _create_fp16_sub_groups (l. 943-966) cuts a
     parameter group into runs of at least sub_group_size local elements (config.py l. 168: 1e9), so the largest is
     priced min(local partition, sub_group_size) x (2 + 4) B: at least that (a run ends on the parameter that reaches
     the size, so it may exceed it by one parameter's partition; one parameter group assumed: Megatron-DeepSpeed's
     no-weight-decay group of biases and norms is small). A moment of the step, the activations and gathered modules
     freed (_partition_all_parameters): beside the states, every sharded gradient, the IPG buffer and the persistent
     parameters; its excess over the peak, beyond the optimizer_step term's, is the term (Llama 3 8B on 8 GPUs at seq
     1,024, full recompute: 2.11 GiB; the 530B records: none).
[z3h] the hooks' order (issue 21, zero3hook; zero3_early_hooks): DeepSpeed hooks every parameter's AccumulateGrad
     (utils/torch.py l. 25-31: register_post_accumulate_grad_hook), and any hook flushes a bucket that holds a gradient
     above reduce_bucket_size (stage3.py l. 1266: elements_in_ipg_bucket counts it, l. 643-644). A module's bias added
     outside its linear (Megatron's skip_bias_add: the bias returned, added by bias-GeLU or bias-dropout-add after the
     GEMM; stack fsdp.zero3_bias_hook_gemms, where the model has linear biases) gets its gradient before the linear's
     backward runs, and a norm module of its own between two linears (fsdp.zero3_norm_hook_gemms, where the block
     that follows has a norm) gets its gradients between them; the module is gathered by then for its bias
     (parameter_offload.py l. 342-379 wraps the returned bias too), assumed for a norm (an upper bound: there only the
     modules already gathered or prefetched). partition_grads frees the flushed gradient (param.grad = None after
     record_stream, l. 1517-1520: torch's caching allocator counts it free at once and reuses the block after the
     reduce stream's event; assumed, the allocator's source not re-read here; reserved not priced apart). So such a module j has two moments: at the early hook its gathered
     set + the previous module's gradient where above the bucket + that flush's copy [z3c], its own gradient not yet
     computed; at its GEMM the gathered set + its own gradient (+ a flush of small ones). Megatron-DeepSpeed @8fd352da
     (2021-style GPT layers: proj, fc1, fc2 skip_bias_add, qkv's bias inside F.linear; two LayerNorm modules): the
     530B records' worst moment 8 h^2, not 12 h^2 (fc1's GEMM beside fc1's weights and gradient, fc2's flushed at fc1's
     bias hook); on 560 GPUs fc1's bias hook, 12 h^2 with fc2's copy, not 16 h^2. A stack that lists no rows: the
     hook-together order above. The tied output layer: [z3t].
[z3g] contiguous_gradients false (issue 21, dsz3tied; job deepspeed_zero3 contiguous_gradients 0, the DeepSpeed JSON's
     key; stack fsdp.zero3_modules.contiguous_gradients 1, DeepSpeed's default, config.py l. 98): stage3.py allocates no
     IPG buffer (l. 537-540) and __add_grad_to_ipg_bucket (l. 1275-1289) leaves each small gradient its own tensor in
     the bucket (the flush rule, l. 1268-1272, and the reduce-scatter path, l. 1314-1318 with reduce_scatter on, the
     same: [z3c]'s copies unchanged). Held instead of the buffer: the bucket's pending gradients, at most
     reduce_bucket_size elements, priced at that bound in the backward (zero3_ipg_bucket; the fill at the worst moment
     not derived, as [z3c]'s bound where no gradient exceeds the bucket); the backward's epilogue reduces them, so the
     step [z3s] holds none (contiguous: the buffer, never freed). ZeRO-1/2 without it ([zb]): not priced, listed.
[z3t] a tied output layer (issue 21, dsz3tied; the model's tied_embeddings, on the stage holding both uses: ZeRO-3
     runs without PP, startup's deepspeed rules; term zero3_tied_output). Megatron-DeepSpeed @8fd352da GPTModel.forward
     (megatron/model/gpt_model.py l. 126-133) hands word_embeddings_weight() (module.py l. 53-55: with one stage the
     embedding module's weight) to parallel_lm_logits (language_model.py l. 29-38, F.linear): one parameter, two
     modules. The engine's forward sets _parameters._in_forward on every module (engine.py l. 1974-1992), so the
     access outside the embedding registers the weight as an external parameter of GPTModel (parameter_offload.py
     ZeROOrderedDict.__getitem__ l. 56-70; get_all_parameters counts it among GPTModel's, partitioned_param_coordinator.py
     l. 34-36). GPTModel's pre-backward hook gathers it at the loss's backward; its post-backward hook hangs on its
     inputs, the token ids, which need no gradient, and never fires (nor the embedding's): the weight stays gathered
     to the step's _partition_all_parameters (stage3.py l. 2091; parameter_offload.py partition_all_parameters
     l. 183-190 names the case), counted in __n_available_params (l. 484), which bounds the prefetch (l. 379-381:
     min(max_live - available, prefetch bucket); zero3_layer_peak's held). Its gradient hook,
     register_post_accumulate_grad_hook (utils/torch.py l. 25-31), follows the one AccumulateGrad, which autograd runs
     once both uses' gradients are in: at the embedding's backward, the last of the backward, the output layer's
     V/t x h gradient waiting in its input buffer until then. Priced: beside every layer's moment the weight and that
     gradient, 2 x V/t x h x 2 B (GPT-3 175B at tp 1 2.30 GiB, the 530B 3.906 GiB; the layers' working set then
     prefetches less: GPT-3's back fc2 no longer takes fc1, 12 h^2 -> 8 h^2), and the embedding's backward, the end of
     the backward without a layer's activations: the weight, the held gradient and the embedding's own dense one
     (3 x V/t x h x 2 B; summed in place, then the reduce-scatter's copy of the sum at most as large) and its incoming
     gradient (tokens x h x 2 B), beside the kept tensors, the IPG buffer and the persistent parameters, where it
     exceeds the peak (zero3_tied_end in _step_excess, added to the term). The first step's trace (the weight
     released after GPTModel's forward) is not priced apart; the steady state's forward holds the weight too, below the
     backward's peak.
[pa] Partitioned checkpoint inputs (job field partition_activations; stack runs.partition_activations, Megatron-DeepSpeed
     --deepspeed-activation-checkpointing --partition-activations): microsoft/DeepSpeed @38327e07
     deepspeed/runtime/activation_checkpointing/checkpointing.py CheckpointFunction.forward (l. 528-552): with
     PARTITION_ACTIVATIONS partition_activations (l. 377-430) keeps of each floating-point input of the checkpointed
     chunk the rank's 1/mp_size slice (get_partition_size l. 258-263, narrow(...).clone(), l. 391) and
     get_partitioned_activations_for_backward (l. 432-470) empties the input itself (arg.data = torch.empty([])); the
     backward all-gathers it whole over the model-parallel group (gather_partitioned_activations l. 266-300,
     all_gather_into_tensor into a fresh flat tensor) before the re-run. Megatron-DeepSpeed @f4157bea configures it with
     mpu, the TP group (megatron/initialize.py l. 186-194). So a fully recomputed layer keeps 2 T h / (rep_div x tp)
     bytes of input (its hidden states; the attention mask is not floating point, kept whole and not counted), the
     layer under re-run holds its gathered input with its re-materialised tensors (the recompute buffer is the layer's
     activations less the kept 1/tp slice), and step.tp_comm adds one all-gather of the input per re-run layer.
[en] The word embedding's norm (ModelSpec.embedding_norm; BLOOM's word_embeddings_layernorm, BigScience's
     Megatron-DeepSpeed --embed-layernorm): bigscience-workshop/Megatron-DeepSpeed @8387ae17 megatron/mpu/layers.py
     l. 194-195 builds it on the first pipeline stage only (VocabParallelEmbedding.norm) and l. 250-251 runs it on the
     all-reduced embedding output; a LayerNorm of weight and bias, 2h parameters, whole on every TP rank (params_of:
     the first stage's, with their gradients and optimizer states). Its fused kernel (megatron/model/fused_layer_norm.py
     FusedLayerNormAffineFunction.forward) saves its input, T h bf16, and the fp32 mean and inverse deviation of each
     row, 8 B a token; DeepSpeed's pipeline model checkpoints only the transformer layers (microsoft/DeepSpeed @38327e07
     deepspeed/runtime/pipe/module.py PipelineModule._is_checkpointable: GPTModelPipe's chunks checkpoint only when
     every function is a ParallelTransformerLayerPipe), so the norm's saved tensors are kept under full recompute for
     every micro-batch the first stage's first chunk holds (pipeline.stage_inflight_kinds "embedding": 1F1B min(m, p)),
     T (2h + 8) / rep_div bytes each, counted in the first stage's layer activations. Its output is the first layer's
     input, counted there. Not priced: the norm's forward and backward passes (one norm on the first stage, which
     step.compute_time prices as a middle stage).

What a stage holds at its peak, the start of its backward (the loss's backward on the last
stage), and what the caching allocator reserves beside it: stage_memory_terms' docstring; the
allocated peak is the live tensors, the reserved one adds the pools the allocator holds for
other streams or cannot hand to the peak (`stream_pools`) and the stack's slack; the total
adds what lives outside the allocator (OUTSIDE_TERMS): the reserve (CUDA context, NCCL), TP
overlap's communication buffers [ub], the MoE dispatcher's [ep] and NCCL's NVLS buffers [nv].

Derivation of the architecture-aware per-layer coefficient (activation_model "arch"),
bytes stored per token per layer with 16-bit activations, following [2] sec. 4.1 term by
term and generalising the shapes (h hidden, a query heads, k KV heads, d head dim,
f FFN width, f1 = 2f for a gated MLP else f):
  replicated across TP unless SP ("rep"):
    norm inputs 2 x 2h; attention input (norm output) 2h; MLP input 2h; dropout masks
    1h after attention and 1h after the MLP when the model has dropout     [2]: 10h for GPT
  split across TP ("split"):
    Q 2ad, K and V 2 x 2kd, attention output (input of the output projection) 2ad,
    MLP first-linear output 2f1 (gate and up for SwiGLU, saved by Megatron's fused
    bias-SwiGLU, which recomputes the activation in backward), activation output 2f
                                                                          [2]: 24h for GPT
  eager attention only (no FlashAttention [3]): softmax output 2as, plus its dropout mask
    as and dropout output 2as when the model has dropout                  [2]: 5as for GPT
For GPT-3 shapes (a*d = h, k = a, f = 4h, plain MLP, dropout) rep + split = 10h + 24h =
34h, the coefficient of [2]; the seed's 34 bytes per token per unit width per layer.
Other kinds add their own tensors (MLA latents, MoE router logits and expert tensors, the
state-space and linear-attention mixers' inputs and states: each module's `tensors`), kept
by every recompute policy but full recompute. activation_model "korthikanti" scales an
attention layer's standard tensors to GPT-3's coefficients and leaves the others as derived.
A fused (flash) core also keeps its fp32 softmax log-sum-exp, 4a bytes per token (0.03 h for
GPT-3; layers/attention.py [ls]): the table's "softmax_lse" (split across TP), kept with the core's state; the "korthikanti"
model, [2]'s coefficients for the whole attention layer, counts none.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

from .layers import Ctx, LayerKind, LayerList, context, layer_list, mean_layer, weighted
from . import comm, offload
from .cuda_graphs import held_output_bytes
from .cp_comm_type import fp8_kernel_saves_qkv
from .dispatch import ALLTOALL, CODES, HYBRIDEP, group_size, group_stride
from .dispatch_codes import dispatcher_rows, plan_dispatchers
from .ep_buffers import buffer_bytes as ep_buffer_bytes
from .nvls_buffers import nvls_channels, nvls_comm_bytes
from .layers.attention import chunk_pad_factor
from .layers.common import ACT_BYTES, kv_local, muon_distributed, muon_local, norm_params
from .layers.moe import EXPERT_GEMMS, ROUTER_DTYPE_BYTES, RouterPath
from .moe import etp_of, expert_shard, optimizer_shards
from .params import ParamCounts, count_params
from .pipeline import (dualpipe_pairs, heaviest_stage_index, plan_stage_layers, stage_end_kinds, stage_inflight_kinds, stage_kind_counts as placed_kind_counts,
                       per_plan, stage_table, stage_layers)  # noqa: F401 (stage_layers: read from here by callers of memory, tests/test_memory.py)
from .plan import BF16, FP8, NVFP4, FSDP, RC_FULL, RC_NONE, RC_SELECTIVE, ZERO1, ZERO2, PlanArrays, Settings, dp_overlap
from .recompute_modules import block_drops, norm_drops, reruns_moe_block
from .schema import ACTIVATION_TENSORS, ModelSpec
from .stacks import cp_backward_moments, fp8_recipe, kernel_bytes, mode_value, plan_context, reshard_by_default, ring_ranks, sharding_traits, stack_of, te_loss
from .stacks import allreduce_bucket_params, grad_accum_bytes, main_grad_bytes, mfsdp_v2, own_master, reduce_queue_units
from .stacks import step_grads as mode_step_grads
from .te_version import run_te_version, te_userbuffers
from .terms import Groups, KeyedPlan, Terms, gather

LOGIT_BYTES_PER_VOCAB = 2.0 + 4.0  # bf16 logits + fp32 softmax kept for the loss backward [5]

STATE_TERMS = ("weights", "gradients", "master_weights", "adam")
ACTIVATION_TERMS = ("layer_activations", "output_activations", "recompute_buffer")
# FSDP's and DeepSpeed ZeRO-3's buffers beside the sharded states, each its own term (issue 21; their sum was one
# term, fsdp_buffers), in the Terms' order (_PerLayer._fsdp_parts, _stage_fsdp, _stage_terms); each 0 where the plan's
# sharding holds none:
#   fsdp_gathered_units     the unsharded weights of the layer units in flight at the peak (stack
#                           fsdp.gathered_units_at_peak): FSDP1's current and prefetched unit [4], none at FSDP2's loss
#                           backward [7]; torchtitan's last block, not resharded after its forward (fsdp_root_unit) [tt10];
#                           Megatron-FSDP's current layer unit and the layer units its prefetch gathers
#                           (gather_prefetch_share) [pf]
#   fsdp_unit_grads         the unsharded gradient of the unit being reduce-scattered, in the reduce dtype (stack
#                           fsdp.gathered_grad_units_at_peak, grad_reduce_bytes) [4]
#   mfsdp_double_buffer     Megatron-FSDP's fixed double-buffer pools (the job's mfsdp_double_buffer: --fsdp-double-buffer,
#                           --use-nccl-ub): two persistent buffers of a layer unit's gathered weights and two of its
#                           unsharded gradients, held from the first step on, the optimizer step's moment included [db]
#   zero3_working_set       DeepSpeed ZeRO-3's gathered parameters at a layer's worst moment: the module's own
#                           (partitioned_param_coordinator.py fetch_sub_module), those __params_to_release keeps within
#                           stage3_max_reuse_distance, and the prefetch [z3]
#   zero3_unreduced_grads   the full gradients awaiting their reduce-scatter at that moment: the module's and the
#                           previous one's where above reduce_bucket_size (stage3.py l. 1258-1328) [z3], in the model
#                           code's hook order (an early hook flushes the previous one before the GEMM) [z3h]
#   zero3_bucket_copy       at that moment reduce_scatter_coalesced's torch.cat copy of the bucket the hook flushes
#                           (comm/coalesced_collectives.py l. 158-218) [z3c]
#   zero3_reuse_kept        the last layers' modules __params_to_release keeps gathered from their first forward, beyond
#                           that moment (partitioned_param_coordinator.py l. 422-440, 523-554) [z3r]
#   zero3_tied_output       a tied output layer's weight (gathered through the forward and backward to the step) and its
#                           gradient (held by autograd until the embedding's backward) beside a layer's moment, + the
#                           embedding's backward's excess over the peak (the end of the backward) [z3t]
#   zero3_ipg_bucket        the contiguous IPG buffer, reduce_bucket_size elements in the model dtype (stage3.py
#                           l. 537-540) [z3]; with contiguous_gradients false the bucket's pending gradients, their
#                           own tensors, at that bound [z3g]
#   zero3_persistent        the stage's parameters of at most stage3_param_persistence_threshold elements, never
#                           partitioned (partition_parameters.py ds_persist) [z3]
#   zero3_step_grads        the optimizer step's moment beyond the peak: a sub-group's flattened gradient partition and
#                           its fp32 copy (stage3.py l. 1895-1915) beside the states [z3s]
#   fsdp_unsharded_ends     the end units kept unsharded from their forward to their backward (stack fsdp.unsharded_ends;
#                           torchtitan's [norm, output], the root unit before #1094) [7] [tt10] [lg1], 1 B a converted
#                           weight under the fp8 all-gather [fa]; Megatron-FSDP's non-unit buckets (embedding, output
#                           layer, final norm), gathered the whole step [nu]
#   fsdp_unsharded_stage    every unit of the stage gathered (2 B, the converted linears 1 B [fa]): under PP
#                           (reshard_after_forward False) or torchtitan's "never", less what a resharding stage's
#                           micro-batch frees first (regather_pp) [7]
#   fsdp_accumulated_grads  under PP the unsharded gradients accumulated over the micro-batches, fp32 (stack
#                           fsdp.pp_unsharded_grad_bytes; FSDPParam.to_accumulated_grad_if_needed) [7]
#   fsdp_end_of_backward    FSDP2's end of the backward (the last units' reduce-scatter, every sharded gradient
#                           allocated) where it exceeds the peak [tt7]; Megatron-FSDP v2's root unit's gradients and
#                           reduce-scatter input at the end [v2]
FSDP_TERMS = ("fsdp_gathered_units", "fsdp_unit_grads", "mfsdp_double_buffer", "zero3_working_set", "zero3_unreduced_grads", "zero3_bucket_copy",
              "zero3_reuse_kept", "zero3_tied_output", "zero3_ipg_bucket", "zero3_persistent", "zero3_step_grads", "fsdp_unsharded_ends",
              "fsdp_unsharded_stage", "fsdp_accumulated_grads", "fsdp_end_of_backward")
# (step_grad_copies: the optimizer step's copies of the gradients below FSDP, beyond the peak and optimizer_step's [sg])
# (offload_copy_back: DeepSpeed ZeRO-1/2 offload's updated fp32 partition copied up to the GPU after the CPU step, its
# moment beyond the peak and the step's terms before it [ocb]; offload_norm_fp64: the same offload's fp64 copy of one
# parameter's gradient piece for its norm, in the reduction's hooks, beyond the peak and the reduction's terms [onf])
# (bf16_reduce_copy: DeepSpeed's BF16_Optimizer's all-reduce of its fp32 buffers after the backward, the bucket's flat
# and cast copies beyond the peak [bo])
# (zero2_reduce_input: a zero2 mode reducing every micro-batch as FSDP2 does, the unit's unsharded gradient and its
# reduce-scatter input beyond the backward's peak [rs])
# (zero12_ipg_bucket: DeepSpeed ZeRO-1/2's IPG buffers in the backward of the stage holding the loss; zero12_grad_partition:
# the gradient reduction's moment beyond the peak, ZeRO-2's second partition, ZeRO-1's reduction after the backward [zb])
OTHER_TERMS = FSDP_TERMS + ("model_buffers", "quantized_weights", "workspaces", "mpu_buffer", "dummy_wgrads",
               "zero2_reduce_input", "zero12_ipg_bucket", "zero12_grad_partition", "bf16_reduce_copy", "optimizer_step", "step_grad_copies", "offload_norm_fp64", "offload_copy_back", "stream_pools", "allocator_slack", "tp_overlap_buffers",
               "ep_buffers", "nvls_buffers", "reserve")
# the terms that live outside the caching allocator: in the total (the gate), not in its peaks
OUTSIDE_TERMS = ("tp_overlap_buffers", "ep_buffers", "nvls_buffers", "reserve")

# the fp32 gradient of a ZeRO-3 optimizer sub-group: .to(fp32_partitioned_groups_flat[i].dtype), the fp32 partition
# (stage3.py l. 1899-1900, 902-906 .float()) [z3s]
ZERO3_FP32_GRAD_BYTES = 4.0
# the fp32 gradient partition a mode below FSDP converts its gradients to at the step: DeepSpeed stage_1_and_2.py
# l. 1896-1897 .to(single_partition_of_fp32_groups[i].dtype) (the fp32 master's), Megatron's main_grad.float() [sg]
STEP_FP32_GRAD_BYTES = 4.0
# DeepSpeed's gradient norm below FSDP: torch.linalg.vector_norm(g.data.double()) per parameter piece, fp64
# (stage_1_and_2.py get_grad_norm_direct l. 1699) [sg]
STEP_NORM_FP64_BYTES = 8.0
# the torch softmax's fp32 output saved in place of the fused kernel's 16-bit one: 4 - 2 B a score element [sm]
SOFTMAX_FP32_EXTRA = 4.0 - ACT_BYTES
ROPE_CACHE_BYTES = 8.0  # complex64, one per pair of rotated dimensions: 4 B x seq x rotary dim [tt9]
MEGATRON_ROPE_BYTES = 4.0  # fp32 per rotated dimension a position: Megatron's cached emb [seq / cp, 1, 1, dim] [mr]
# bytes per converted-Linear weight element FSDP's fp8 all-gather moves and the rank then holds unsharded: the
# float8_e4m3 data of torchao's WeightWithDynamicFloat8CastTensor fsdp_pre_all_gather (its one scale a tensor not
# counted) [fa]
FP8_GATHER_BYTES = 1.0
MEGATRON_ROPE_LRU = 32  # @lru_cache(maxsize=32) on RotaryEmbedding.forward / YarnRotaryEmbedding.forward [mr]

# Transformer Engine's bytes per weight element by recipe (precisions.FP8_RECIPES order) [11]:
# (row-wise, column-wise, the column-wise copy is a transpose: kept only on TN-only GPUs)
QUANTIZED_WEIGHT_BYTES = {
    "delayed": (1.0, 1.0, True),  # Float8Tensor: e4m3 data + its transpose, one fp32 scale a tensor
    "tensorwise": (1.0, 1.0, True),  # Float8CurrentScaling: a Float8Tensor too
    "rowwise": (1.0, 1.0, True),  # torchao's recipe: no TE cache (a stack without fp8_weight_cache)
    "mxfp8": (1.0 + 1.0 / 32, 1.0 + 1.0 / 32, False),  # MXFP8Tensor: e4m3 + an E8M0 scale per 32, each direction
    "blockwise": (1.0 + 4.0 / 128**2, 1.0 + 4.0 / 128**2, False),  # Float8BlockwiseQTensor: 128 x 128 fp32-scaled blocks
    "nvfp4": (0.5 + 1.0 / 256, 0.5 + 1.0 / 256, False),  # NVFP4Tensor: e2m1 + an E4M3 scale per 16 x 16 block
}

# what a layer keeps without recompute (Korthikanti et al. 2022 sec. 4.1 [2]); "mlp_out" is
# kept only by stacks whose recompute policy saves it (torchtitan's per-op SAC)
STANDARD_TENSORS = ("input", "norm1_out", "q", "k", "v", "attn_out", "norm2_in", "norm2_out", "gate", "up",
                    "act_out", "dropout_masks", "scores")
STAGES = ("first", "mid", "last")


# ----------------------------------------------------------------------------- activation tables
def _scale_to(target, have):
    """target / have elementwise, 0 where have is 0 (kind_tensors' korthikanti scales)."""
    return np.where(have != 0, target / np.where(have != 0, have, 1.0), 0.0)


def kind_tensors(kind: LayerKind, ctx: Ctx, activation_model: str = "arch", attention: str = "flash") -> dict:
    """A layer kind's activation tensors -> (bytes per token, common.py kind). The "arch"
    derivation is the module docstring's; "korthikanti" scales an attention layer's standard
    tensors so that they sum to GPT-3's 10h + 24h + 5as of [2] on any shape (the seed's model),
    K and V counted as split tensors, and counts no fused core's softmax statistics (softmax_lse: [2]'s
    coefficients are the whole attention layer)."""
    from .layers.common import merge_tables

    t = merge_tables(kind.mixer.tensors(ctx, attention), kind.mlp.tensors(ctx, attention), kind.post_norm_tensors())
    if activation_model != "korthikanti" or kind.mixer.kind != "attention":
        return t
    h, a = kind.mixer.h, kind.mixer.a
    std = {k: sum(b for n, (b, kk) in t.items() if n in STANDARD_TENSORS and kk == k) for k in ("rep", "split", "kv", "score")}
    target = {"rep": 10.0 * h, "split": 24.0 * h, "score": 5.0 * a if attention != "flash" else 0.0}
    split_all = std["split"] + std["kv"]
    # a kind's bytes may be arrays of candidates (an fp8 recipe searched: the quantized tensors' widths), so each
    # scale is taken elementwise, 0 where the layer keeps none of that kind
    scale = {"rep": _scale_to(target["rep"], std["rep"]), "split": _scale_to(target["split"], split_all),
             "score": _scale_to(target["score"], std["score"])}
    scale["kv"] = scale["split"]
    # [2]'s coefficients are the whole attention layer: no fused core's softmax statistics beside them (its 34 sbh
    # predates them; layers/attention.py [ls] prices them under "arch")
    return {n: ((b * scale[kk], "split" if kk == "kv" else kk) if n in ACTIVATION_TENSORS
                else ((0.0 * b, kk) if n == "softmax_lse" else (b, kk)))
            for n, (b, kk) in t.items()}


NVFP4_SAVED_BYTES = 0.5 + 1.0 / 16.0  # bytes per element of a saved nvfp4 GEMM input: e2m1 + e4m3 scale per 16 [8]
# the inputs of the four GEMMs of a layer (QKV, output projection, MLP up, MLP down); an MoE layer's
# expert GEMM inputs are the stack's memory.fp8_saved_bytes where it quantizes them [14]
GEMM_INPUTS = ("norm1_out", "attn_out", "norm2_out", "act_out")
# the MoE layer's GEMM inputs a stack's memory.fp8_saved_bytes may name (Transformer Engine's
# GroupedLinear for the routed experts, its Linear for the shared experts' down projection): under
# nvfp4 the recipe's own quantizer saves them, 0.5 + 1/16 B, as it does the four above [14]
MOE_GEMM_INPUTS = ("moe_expert_in", "moe_expert_act_out", "moe_shared_act_out")
NVFP4_GEMM_INPUTS = GEMM_INPUTS + MOE_GEMM_INPUTS


def fp8_saved_bytes(stack) -> dict:
    """Bytes per element of the saved tensors the stack keeps narrower than bf16 when it trains
    in fp8: the GEMM inputs at 1 B where its linears save their quantized input [8], then its
    own per-tensor figures (memory.fp8_saved_bytes: DeepSeek-V3's sec. 3.3.3)."""
    out = {n: 1.0 for n in GEMM_INPUTS} if stack.memory.fp8_saves_gemm_inputs else {}
    out.update(stack.memory.fp8_saved_bytes)
    return out


def kind_activation_bytes(kind: LayerKind, ctx: Ctx, activation_model="arch", attention="flash",
                          keeps=STANDARD_TENSORS, gathered_input: bool = False, fp8_bytes=None, drops=(),
                          core_out_bytes: float = 0.0, core_in_bytes=ACT_BYTES, softmax_fp32=0.0, memo=None):
    """Bytes one layer of `kind` stores for one micro-batch on one GPU, for the named tensors
    in `keeps` (default: all a layer keeps without recompute) and every tensor no policy names
    but those in `drops` (the kind tensors a selective policy re-runs, schema.KindTensor): names,
    dropped on every row, or {name: rows} (selective_drops), dropped where rows holds (True: every
    row; a boolean array over the plan's rows, such as the rows without torch.compile).
    gathered_input: with SP, the attention and MLP inputs (norm outputs) are saved all-gathered,
    not sequence-sharded (DTensor TP). fp8_bytes: {tensor: bytes per element} saved narrower
    than bf16 where the plan trains in fp8 (fp8_saved_bytes) [8]; in nvfp4 the GEMM inputs among
    them are saved at 0.5 + 1/16 B (e2m1 values and one e4m3 scale per 16) [8]. core_out_bytes:
    bytes per element of the fused attention's own saved output (stack memory.attention_keeps_output:
    2), a tensor beside the projection's quantized input where attn_out is saved narrower, kept
    with the core attention's state ("scores": dropped by selective recompute). core_in_bytes: bytes
    per element of the q, k, v the fused core saves, with the core's state (fp8 attention [fa8]). softmax_fp32: 1 where
    the eager core's torch softmax saves its fp32 output (torch_softmax_fp32 [sm]): the "scores" tensor 2 B a score
    element more, per local head (0: the 16-bit output the stack's scores count). memo: a dict the caller keeps over
    calls of one ctx, activation_model, attention and fp8_bytes (layer_memory's), which holds the kind's tensor table
    and the saved widths once (the same values)."""
    plan, tp = ctx.plan, ctx.tp
    fp8, fp4 = plan.precision == FP8, plan.precision == NVFP4
    # an MoE layer's norm2_out is the router's input, saved at bf16 by its bf16 / fp32 GEMM [14]
    w_key = ("width", bool(kind.has_experts))
    if memo is None or w_key not in memo:
        base = {n: np.select([fp8, fp4], [b / ACT_BYTES, (NVFP4_SAVED_BYTES if n in NVFP4_GEMM_INPUTS else ACT_BYTES) / ACT_BYTES], 1.0)
                for n, b in (fp8_bytes or {}).items() if not (kind.has_experts and n == "norm2_out")}
        if memo is not None:
            memo[w_key] = base
    else:
        base = memo[w_key]
    width = dict(base)  # (updated below per call)
    drops = drops if isinstance(drops, dict) else dict.fromkeys(drops, True)
    # the rows the fused core's state is kept on: False, True or a row mask (where "scores" is dropped on some)
    core = attention == "flash" and "scores" in keeps and _kept_rows(drops, "scores")
    if "attn_out" in width and core is not False:
        width["attn_out"] = width["attn_out"] + np.where((fp8 | fp4) & core, core_out_bytes / ACT_BYTES, 0.0)
    if core is not False and kind.mixer.kind == "attention":  # fp8 attention's quantized q, k, v [fa8] (2 B: as bf16)
        qkv = np.where(fp8 & core, core_in_bytes / ACT_BYTES, 1.0)
        gated = bool(getattr(kind.mixer, "gate", False))  # the gate half of a gated query stays bf16
        width.update({"q": (qkv + 1.0) / 2.0 if gated else qkv, "k": qkv, "v": qkv})
    kv_div = np.minimum(tp, float(getattr(kind.mixer, "kv_heads", 1)))  # per GPU: max(k/tp, 1) KV heads
    total = np.zeros(np.broadcast(tp, ctx.T).shape)
    t_key = ("table", kind)
    if memo is None or t_key not in memo:
        table = kind_tensors(kind, ctx, activation_model, attention)
        if memo is not None:
            memo[t_key] = table
    else:
        table = memo[t_key]
    # the named tensors in schema order, then the kind's own (a fixed order: the same sum every time)
    for name in [n for n in ACTIVATION_TENSORS if n in table] + [n for n in table if n not in ACTIVATION_TENSORS]:
        b, tk = table[name]
        gone = drops.get(name, False)  # True: dropped on every row; a row mask: on the rows it marks
        if (name in ACTIVATION_TENSORS and name not in keeps) or gone is True:
            continue
        if name in width:
            b = b * width[name]
        if name == "scores":  # the torch softmax's fp32 output in place of a 16-bit one [sm] (0 elsewhere)
            b = b + softmax_fp32 * SOFTMAX_FP32_EXTRA * float(getattr(kind.mixer, "a", 0.0))
        if tk == "rep":
            b = b / (1.0 if (gathered_input and name in ("norm1_out", "norm2_out")) else ctx.rep_div)
        elif tk == "split":
            b = b / tp
        elif tk == "kv":
            b = b / kv_div
        elif tk != "full":  # eager scores: per token per key of the local sequence, heads split across TP;
            # dropped by recompute
            b = np.where(plan.recompute == RC_NONE, b, 0.0) * kind.mixer.score_keys(ctx.seq) / ctx.cp / tp
        total = total + (b if gone is False else np.where(gone, 0.0, b))
    return ctx.T * total


def torch_softmax_fp32(settings: Settings, ctx: Ctx, kb: dict):
    """1 where the eager core attention runs Megatron-Core's torch softmax in fp32 and saves its fp32 output [sm], else
    0: attention eager, the job's attention_softmax_in_fp32 (default true), and the torch path: the keys beyond the
    fused kernel's (kb score_softmax_max_keys) or masked_softmax_fusion false (kb unfused_masked_softmax)."""
    if settings.attention != "eager" or not settings.attention_softmax_in_fp32:  # job settings
        return 0.0
    torch_path = (np.asarray(ctx.seq) > kb["score_softmax_max_keys"]) | (kb.get("unfused_masked_softmax", 0.0) > 0.0)
    return np.where(torch_path, 1.0, 0.0)


def _kept_rows(drops: dict, name: str):
    """Where kind_activation_bytes' drops ({name: rows}) keep `name`: True, False or a row mask."""
    gone = drops.get(name, False)
    return (not gone) if isinstance(gone, bool) else ~np.asarray(gone, dtype=bool)


def activation_tensors(model: ModelSpec, activation_model: str = "arch", attention: str = "flash") -> dict:
    """The activation table of the model's first layer (kind_tensors), at capacity factor 1."""
    from .plan import PlanArrays

    one = PlanArrays(tp=1, cp=1, pp=1, vpp=1, dp=1, mbs=1, gbs=1, seq=model.max_seq_len, sharding=0, shard=1,
                     recompute=0, sp=0, schedule=0, precision=0)
    ll = layer_list(model)
    return kind_tensors(ll.kinds[ll.kind_at(0)], context(one), activation_model, attention)


def layer_coefficients(model: ModelSpec, activation_model: str = "arch", attention: str = "flash"):
    """(rep, split, kv, score): bytes per token of the model's first layer replicated across TP
    (unless SP), split across TP, the K and V projections (kept per KV head), and the eager
    score term per token per token of sequence, for the tensors a layer keeps without recompute."""
    by = {"rep": 0.0, "split": 0.0, "kv": 0.0, "score": 0.0, "full": 0.0}
    for name, (b, kind) in activation_tensors(model, activation_model, attention).items():
        if name in STANDARD_TENSORS:
            by[kind] += b
    return by["rep"], by["split"], by["kv"], by["score"]


def per_layer_activation_bytes(model: ModelSpec, plan: PlanArrays, activation_model="arch", attention="flash",
                               keeps=STANDARD_TENSORS, gathered_input: bool = False, capacity_factor: float = 1.0):
    """kind_activation_bytes of the model's first layer."""
    ll = layer_list(model)
    return kind_activation_bytes(ll.kinds[ll.kind_at(0)], context(plan, capacity_factor), activation_model, attention,
                                 keeps, gathered_input)


def tp_partials(kind: LayerKind, ctx: Ctx, h: int, keeps_mlp_out: bool, rs_kept=True):
    """What a selective policy that saves reduce-scatter outputs keeps beyond its tensors under
    TP (tp > 1; torchtitan, docs/memory_mechanisms.md (i)): each TP-split block's reduce-scatter
    output, 2h / t per token, on the rows rs_kept marks (tp_collectives_rerun's complement [tk]:
    torchtitan 0.3's eager c10d reduce-scatter is on no save list), and the row-parallel MLP
    output it keeps at its full length, the partial sum before the reduce-scatter (2h, of which
    the table counted 2h / rep_div; aten.mm's output, kept eager or compiled). Without SP
    (plan.sp 0) there is no reduce-scatter: the row-parallel outputs are all-reduced (P -> R),
    _c10d_functional.all_reduce is on no save list (torchtitan release/0.3 @4f9e9a47d
    distributed/activation_checkpoint.py l. 31-94; main's _op_sac_save_list, llama3/infra/
    parallelize.py l. 36-51, neither) and the table's mlp_out already holds the full-length w2
    output (rep_div 1): nothing more is kept, eager or compiled [tk]."""
    tp = ctx.tp
    blocks = len(kind.mixer.tp_pairs) + len(kind.mlp.tp_pairs)
    mlp = 1.0 if keeps_mlp_out and kind.mlp.label != "none" else 0.0
    rs = np.where(rs_kept & (ctx.plan.sp > 0), blocks * ACT_BYTES * h / tp, 0.0)
    return np.where(tp > 1, ctx.T * (rs + mlp * ACT_BYTES * h * (1.0 - 1.0 / ctx.rep_div)), 0.0)


def tp_collectives_rerun(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Where selective recompute keeps neither TP reduce-scatter output and re-runs the reduce-scatters with the
    all-gathers, per plan (bool) [tk]: on a stack whose policy keeps them only compiled (selective.
    tp_collectives_kept 'compiled': torchtitan 0.3), the plans whose blocks run eager (experts_run_eager: no
    plan.compile, or a code that compiles no block); nowhere on 'always'."""
    return kept_only_compiled_reruns(settings, plan, stack_of(settings).selective.tp_collectives_kept)


def kept_only_compiled_reruns(settings: Settings, plan: PlanArrays, kept: str) -> np.ndarray:
    """Where a collective the stack's op-SAC policy keeps only compiled (`kept`, a selective.*_kept stack setting:
    'compiled' [xk] [tk]) is re-run, per plan (bool): the plans whose blocks run eager (experts_run_eager), unless
    the job's SPMD backend runs the functional collectives eager too (functional_collectives_eager [sb]); nowhere
    on 'always'."""
    compiled_only = kept == "compiled" and not functional_collectives_eager(settings)
    return compiled_only & experts_run_eager(settings, plan)


def functional_collectives_eager(settings: Settings) -> bool:
    """Whether the run's SPMD backend runs the TP redistributes and the EP token exchange as torch's functional
    collectives eager too (the op-SAC save list's ops) [sb]: the job's spmd_backend, or the stack's default
    (runs.spmd_backends), is a DTensor backend ('partial_dtensor', 'full_dtensor'); False on a stack without the
    option. A job setting, not searched: one bool for every plan."""
    runs = stack_of(settings).runs
    spmd = runs.spmd_backends if runs is not None else None
    if spmd is None:
        return False
    backend = settings.spmd_backend or spmd.default
    return backend != "spmd_types"


def recomputed_layers(settings: Settings, plan: PlanArrays, layers):
    """How many of a stage's `layers` full recompute re-runs: all of them, or at most
    settings.recompute_layers (Megatron-LM --recompute-method block --recompute-num-layers:
    the first N layers of each stage recompute, the others keep their activations) [2].

    Megatron's window is a model chunk's (--recompute-num-layers n over each chunk's own layers: megatron/core/
    recompute.py @d98e8a64 l. 167-181, transformer_block.py l. 334), so a stage of chunks c_1 .. c_v re-runs
    sum_j min(c_j, n), with recompute_layers = n x vpp (the readers'; start-up rule MEGATRON_RECOMPUTE_LAYERS_VPP
    refuses a value vpp does not divide). That is min(sum_j c_j, n v), this function's, unless n lies strictly
    between two of the stage's chunk lengths; pipeline.chunk_layers' chunks of one stage differ by at most one layer
    where Megatron runs the split (the counted embedding / loss: one layer fewer in the end chunk; an uneven
    first / last stage's own chunks are equal, transformer_block.py l. 174-179 asserts it), so no integer n does."""
    cap = settings.recompute_layers if settings.recompute_layers is not None else np.iinfo(np.int64).max
    return np.where(plan.recompute == RC_FULL, np.minimum(layers, cap), 0)


def recompute_fraction(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Share of the model's transformer layers that full recompute re-runs (1 for plain full, 0 for any other
    recompute): each stage k re-runs min(its layers s_k, recompute_layers) (recomputed_layers: Megatron-LM's block
    method re-runs the first --recompute-num-layers n layers of each model chunk, megatron/core/recompute.py
    @d98e8a64 l. 167-181, `layer_idx < recompute_num_layers` over the chunk's own len(self.layers),
    transformer_block.py l. 334; the readers take recompute_layers = n x vpp a GPU, trainers/megatron.py, which is
    the sum over its chunks as a rank's layers divide by vpp, transformer_block.py l. 174-179), so the share is
    sum_k min(s_k, cap) / sum_k s_k over every stage (pipeline.stage_table, the placement's per-stage table), not one stage's: an uneven
    split's ends re-run their own count (Megatron-LM --decoder-first-pipeline-num-layers 11 --decoder-last-... 7
    on 4 stages, n 8: 8 + 7 + 7 + 7 = 29 of 32). What the recomputation's FLOPs per token (compute.
    recompute_flops_per_token: HFU, explain's flops) scale by."""
    configs, rows = stage_table(settings.model.num_layers, plan)  # per distinct split, gathered per plan below
    cap = settings.recompute_layers if settings.recompute_layers is not None else np.iinfo(np.int64).max
    share = np.minimum(rows, cap).sum(axis=-1) / np.maximum(rows.sum(axis=-1), 1)
    return np.where(np.asarray(plan.recompute) == RC_FULL, per_plan(configs, share), 0.0)


def selective_keeps(settings: Settings) -> tuple:
    """The tensors the stack's selective recompute keeps (plus nothing it recomputes); without
    the attention output where the run's policy re-runs the attention core (job field
    selective_recomputes_attention [tt8])."""
    keeps = tuple(stack_of(settings).selective.keeps)
    if settings.selective_recomputes_attention:
        keeps = tuple(k for k in keeps if k != "attn_out")
    return keeps


def experts_run_eager(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Where the routed experts' grouped GEMMs run eager [gmm]: the plan does not compile, or the
    model's code compiles no block (Settings.code_compiles_blocks: torchtitan @e347b1e5e's gpt_oss,
    whose model/moe.py _run_experts_grouped_mm no apply_compile reaches)."""
    return (np.asarray(plan.compile) == 0) | (not getattr(settings, "code_compiles_blocks", True))


def expert_gemms_rerun(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Where selective recompute keeps neither of the routed experts' grouped-GEMM outputs (moe_expert_gate_up,
    moe_expert_act_out) and re-runs those GEMMs, per plan (bool), by the stack's selective.expert_gemms_kept:
    'always' nowhere; 'compiled' (torchtitan main [gmm]) where the experts run eager (experts_run_eager);
    'never' (torchtitan 0.3 [gmm3]) on every plan."""
    kept = stack_of(settings).selective.expert_gemms_kept  # a stack setting
    eager = experts_run_eager(settings, plan)
    return (eager & (kept == "compiled")) | ((kept == "never") & np.ones(np.shape(eager), dtype=bool))


def exchange_reruns(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Where selective recompute re-runs the EP token exchange and keeps neither of its outputs (moe_expert_in,
    moe_expert_out), per plan (bool): a model code whose save list leaves the all-to-all out (Settings.
    sac_reruns_exchange: torchtitan main's qwen3, every plan), or, on a stack whose policy keeps the exchange only
    compiled (selective.exchange_kept 'compiled' [xk]: torchtitan 0.3), the standard all-to-all plans whose blocks
    run eager (experts_run_eager: no plan.compile, or a code that compiles no block)."""
    codes, _ = dispatcher_rows(settings, plan)
    kept = stack_of(settings).selective.exchange_kept  # a stack setting
    rule = (np.asarray(codes) == ALLTOALL) & kept_only_compiled_reruns(settings, plan, kept)
    return np.asarray(bool(settings.sac_reruns_exchange)) | rule


def selective_drops(settings: Settings, kind, never: tuple, plan) -> dict:
    """The tensors of `kind` a selective policy does not keep, each with the rows it drops it on (True: every
    row; a boolean array: the rows it marks), kind_activation_bytes' drops; each exists for one layer at a time in
    the recompute (the selective buffer), as every re-run tensor:
      the stack's recomputes, those no mode saves (`never`) and the norm outputs a named-module policy re-runs
      (recompute_modules.norm_drops) and the tensors inside a whole-block checkpoint (block_drops): every row;
      the fused core's softmax statistics (softmax_lse, layers/attention.py [ls]) where the policy re-runs the core
      (the stack's recompute_attention_core, Megatron's core_attn, or the run's selective_recomputes_attention
      [tt8]): every row;
      the EP exchange's outputs where the policy re-runs the exchange (exchange_reruns: the model code's save list,
      Settings.sac_reruns_exchange, on every row; torchtitan 0.3's eager exchange [xk] on the rows it marks): the
      dispatch all-to-all's output (the experts' input rows, moe_expert_in) and the combine's (the experts' output
      rows, moe_expert_out);
      the routed experts' grouped-GEMM outputs a policy does not keep (expert_gemms_rerun: stack
      selective.expert_gemms_kept "compiled" [gmm] on the rows where they run eager, experts_run_eager: no
      plan.compile, or a model code that compiles no block; "never" [gmm3] on every row).
    A tensor two of them drop keeps the first's rows. Which rule applies is job, stack and kind data; the rows
    are the mask, never a Python branch on a searched quantity."""
    sel = stack_of(settings).selective
    # the fused core's softmax statistics go with the core where the policy re-runs it (layers/attention.py [ls])
    lse = ("softmax_lse",) if sel.recompute_attention_core or settings.selective_recomputes_attention else ()
    rules = ((tuple(sel.recomputes) + never + norm_drops(sel, kind) + block_drops(sel, kind) + lse, True),
             (("moe_expert_in", "moe_expert_out") if kind.has_experts else (), exchange_reruns(settings, plan)),
             (("moe_expert_gate_up", "moe_expert_act_out") if kind.has_experts else (),
              expert_gemms_rerun(settings, plan)))
    drops = {}
    for names, rows in rules:
        for n in names:
            drops.setdefault(n, rows)
    return drops


# ----------------------------------------------------------------------------- model states
def master_bytes(settings, plan) -> np.ndarray | float:
    """Bytes a parameter of the master weights the plan's sharding mode holds [mw]: the job's bytes_per_param.master
    (settings.bpp: 2 B where TE's FusedAdam keeps the fp32 master as 16-bit remainders, Settings.remainders), but the
    job's 4 B under a mode that steps its own fp32 main weights (stack_db runs.low_precision_moments.own_master_modes).
    [mw] NVIDIA/Megatron-LM @d98e8a64, Megatron-FSDP v1 with --use-precision-aware-optimizer: the optimizer's
    parameters are the main weight buffer's DTensor shards (param_and_grad_buffer.py _init_distributed_params
    l. 3224-3293, _init_optimizer_named_parameters l. 3295-3349), fp32 (--megatron-fsdp-main-params-dtype default fp32,
    arguments.py l. 3687; fsdp distributed_data_parallel_config.py l. 125); get_megatron_optimizer sets FusedAdam's
    master_weights False under Megatron-FSDP (optimizer/__init__.py l. 1147-1161: 'Megatron-FSDP should NEVER use
    FusedAdam's main weights'), so FusedAdam allocates no master_param (TransformerEngine @4329ff84 fused_adam.py
    initialize_state l. 452-469: only `if self.master_weights`) and keeps no remainder of an fp32 parameter (step
    l. 612: store_param_remainders only where p is bf16): 4 B a parameter, sharded as the mode shards the optimizer. A float where no mode differs."""
    bpp = settings.bpp
    if not getattr(settings, "remainders", False):
        return bpp.master
    own = own_master(stack_of(settings), plan)
    # the job's fp32 master (remainders is set only where it is 4 B, plan._bytes_per_param)
    return np.where(own, OWN_MASTER_BYTES, bpp.master) if own.any() else bpp.master


OWN_MASTER_BYTES = 4.0  # Megatron-FSDP's main weight buffer: torch.float32 (--megatron-fsdp-main-params-dtype fp32) [mw]


MUON_MOMENTUM_BYTES = 4.0  # Muon's one state, momentum_buffer = zeros_like(the fp32 main parameter) [mu]
# Muon's Newton-Schulz temporaries a whole-matrix element [mu]: the TP all-gather's fp32 shards and their torch.cat
# (muon_utils.py v0.3.0 newton_schulz_tp l. 273-275: 4 + 4 B, live to its return), and inside newton_schulz the
# larger of the normalised fp32 X beside its bf16 cast (l. 186, 213: 4 + 2 B), the loop's bf16 X and the next (l. 319:
# 2 + 2 B, with the m x m bf16 A and B, 2 + 2 B an element of m^2) and the last bf16 X beside its fp32 result (l. 220:
# 2 + 4 B)
MUON_GATHER_BYTES = 4.0 + 4.0
MUON_NS_BYTES = 4.0 + 2.0
MUON_LOOP_BYTES = 2.0 + 2.0
MUON_GRAM_BYTES = 2.0 + 2.0
MUON_NS_FP32_BYTES = 4.0  # the normalised fp32 X with no bf16 cast (muon_fp32_matmul_prec high or low) [mu]


def muon_step_temporaries(mats, gathered=True, oriented=False, fp32=False):
    """Bytes of the Newton-Schulz temporaries of the largest of `mats` (rows, cols, count, group: layers/common.py
    [ns]; rows may be float64 arrays, muon_local's shards) [mu]: e = rows x cols, m = min(rows, cols): MUON_GATHER_BYTES
    e where newton_schulz_tp gathers it (groups split and expert, under the duplicated TP mode: `gathered`; none under
    blockwise, each rank's own shard) + max(MUON_NS_BYTES e, MUON_LOOP_BYTES e + MUON_GRAM_BYTES m^2); 0 for none. One
    matrix at a time: the optimizer's step loop (orthogonalized_optimizer.py l. 169-199) frees each one's before the
    next. oriented: layers/common.py muon_distributed's (gram, local) matrices, m = gram (the distributed TP mode: the
    rank's shard, no gather, its Gram all-reduced in place). fp32: the job's muon_fp32_matmul_prec high or low, which
    leave X fp32 (no bf16 cast, muon_utils.py v0.3.0 l. 203-213, and the last .to(float32) a no-op, l. 220): the
    normalised X alone (MUON_NS_FP32_BYTES), the loop's X, A and B in fp32 (twice MUON_LOOP_BYTES, MUON_GRAM_BYTES)."""
    out = 0.0
    for rows, cols, _count, group in mats:
        rows, cols = np.asarray(rows, dtype=np.float64), np.asarray(cols, dtype=np.float64)
        e, m = rows * cols, (rows if oriented else np.minimum(rows, cols))
        wide = 2.0 if fp32 else 1.0
        work = np.maximum((MUON_NS_FP32_BYTES if fp32 else MUON_NS_BYTES) * e,
                          wide * (MUON_LOOP_BYTES * e + MUON_GRAM_BYTES * m * m))
        out = np.maximum(out, work + (MUON_GATHER_BYTES * e if gathered and group != "rep" else 0.0))
    return out if np.ndim(out) else float(out)



def model_state_terms(bpp, plan: PlanArrays, params_per_gpu, shard=None, fsdp=None, accum=0.0, off=(0.0, 0.0),
                      master=None, muon=0.0, opt_shard=None) -> Terms:
    """Weights, gradients, fp32 master and Adam m, v per GPU under ZeRO/FSDP/HSDP [1], as the
    stack holds them at the peak, and the sharded gradients its reduce-scatter stream holds in
    its own pool (`grad_pool`, reserved, not allocated).

    The shard degree is dp*cp (context-parallel ranks hold the same weights, and Megatron
    and torchtitan shard the optimizer over the combined dp x cp group); HSDP shards over
    shard_group*cp and replicates across groups, as zero1 does under a mode with optimizer instances (Megatron's
    --num-distributed-optimizer-instances N, shard_group dp / N: stack_db runs.sharding optimizer_instances). shard: another shard degree (the routed
    experts of an MoE model shard over tp x that group / (etp ep): moe.expert_shard, the
    expert-data-parallel ranks).
    fsdp (the stack's schema.FSDPSpec): what a sharded rank holds [7]: FSDP2 keeps no
    low-precision shard (its sharded parameter is the fp32 master, cast on each all-gather),
    frees the sharded gradients with zero_grad(set_to_none) so that none is allocated at the
    start of the backward, and allocates them (in the reduce dtype) on the reduce-scatter
    stream, whose pool keeps them reserved.
    accum: the sharding mode's gradient accumulation buffer, bytes a parameter, whole on every rank, in the
    gradients term beside the model-dtype gradients (stacks.grad_accum_bytes; DeepSpeed's BF16_Optimizer [bo]).
    off: the job's (offload_optimizer, offload_param) factors [off] (planner/offload.py: the optimizer's the offloaded
    fraction, 1 but on Megatron's HybridDeviceOptimizer; the parameters' 0 / 1): the master, Adam's
    moments and the sharded gradient (ZeRO-2 and above; ZeRO-1 keeps its whole gradients) leave the GPU, and with
    offload_param the sharded weights (FSDP / ZeRO-3).
    master: the master's bytes a parameter where they differ from bpp.master (master_bytes [mw]: per sharding mode).
    muon: the parameters among params_per_gpu that the job's Muon steps (muon_params_of [mu]): one fp32 momentum
    (MUON_MOMENTUM_BYTES) each in place of Adam's bpp.optimizer; 0 under Adam.
    opt_shard: the ranks the master and Adam's moments shard over where they differ from the weights' and gradients'
    (stacks.optimizer_shards: HSDP with the outer-DP optimizer sharding, [oo]); None: the same shard degree.
    """
    d = plan.shard * plan.cp if shard is None else shard
    d_opt = d if opt_shard is None else opt_shard
    s = plan.sharding
    one = np.ones_like(d)
    fsdp_on = s >= FSDP
    keep_w = 1.0 if fsdp is None or fsdp.sharded_weights_copy else np.where(fsdp_on, 0.0, 1.0)
    live_g = 1.0 if fsdp is None or fsdp.grads_at_peak else np.where(fsdp_on, 0.0, 1.0)
    pool = 0.0 if fsdp is None or not fsdp.reduce_output_pool else np.where(
        fsdp_on, params_per_gpu * fsdp.grad_reduce_bytes / d, 0.0)
    w = keep_w * params_per_gpu * bpp.weights / np.where(fsdp_on, d, one)
    g = live_g * params_per_gpu * bpp.gradients / np.where(s >= ZERO2, d, one)
    master = params_per_gpu * (bpp.master if master is None else master) / np.where(s >= ZERO1, d_opt, one)
    adam = (params_per_gpu * bpp.optimizer - muon * (bpp.optimizer - MUON_MOMENTUM_BYTES)) / np.where(s >= ZERO1, d_opt, one)
    opt, par = off
    if opt or par:  # [off] a job setting, not a searched quantity: what stays on the GPU
        w, g = (1.0 - par * fsdp_on) * w, (1.0 - opt * (s >= ZERO2)) * g  # the sharded gradient on the host
        master, adam = (1.0 - opt) * master, (1.0 - opt) * adam
    return Terms(weights=w, gradients=g + params_per_gpu * accum, master_weights=master, adam=adam, grad_pool=pool)


def stage_kind_counts(model: ModelSpec, plan: PlanArrays) -> dict:
    """layers.stage_counts of the model: "first", "last" (K, ...) and the middle stages'
    candidate compositions "mid" (C, K, ...) with their stage indices "mid_stage"."""
    return placed_kind_counts(layer_list(model), plan)


def vocab_tp_divisor(settings: Settings, tp) -> np.ndarray:
    """What the vocabulary's V rows (V h embedding / output parameters, V logits a token) divide by for the largest
    tensor-parallel rank's share [vs]: tp where the split is even (Megatron pads V to a multiple of tp, stack
    vocab_padding; any stack where tp divides V), V / ceil(V / tp) where the stack shards the vocabulary as a DTensor
    Shard placement (stack memory.vocab_split_uneven: torch's Shard._split_tensor, torch.chunk, gives the first ranks
    ceil(V / tp) rows); tp itself, bit for bit, where tp divides V."""
    t = np.asarray(tp, dtype=np.float64)
    if not stack_of(settings).memory.vocab_split_uneven:  # a stack setting
        return t
    V = float(settings.model.vocab_size)
    return V / np.ceil(V / t)


def params_of(pc: ParamCounts, model: ModelSpec, plan: PlanArrays, counts, end: str, vdiv=None,
              mtp_copy: bool = False):
    """(dense, experts) parameters per GPU before sharding of a stage holding `counts` (K, ...)
    layers of each kind: every layer's TP-split parameters / tp and its replicated ones (the row-parallel linears'
    biases among them, whole on every TP rank: layers/common.py [rb]); the routed experts / (etp ep), their output
    biases / ep, apart (they shard over the expert-data-parallel ranks). The first
    stage (end "first") also holds the input embedding (vocab-parallel: /tp) and any learned
    position table; the last ("last") the final norm and the output layer (/tp), or, with tied
    embeddings and pp > 1, a copy of the word embedding [6], and the multi-token-prediction
    modules, with pp > 1 on a stack whose MTP stage builds its own word embedding (mtp_copy: stack
    memory.mtp_embedding_copy, a stack setting) that copy and any learned position table too [me]. With one
    stage, both ends. vdiv: the vocabulary's divisor for the largest TP rank (vocab_tp_divisor [vs]; None: tp)."""
    tp = plan.tp.astype(np.float64)
    vd = tp if vdiv is None else vdiv
    dense = weighted(counts, [p.dense_per_gpu(tp) for p in pc.kind_params])
    etp = etp_of(plan).astype(np.float64)  # experts split over etp, not tp (planner/moe.py)
    experts = weighted(counts, [p.experts_per_gpu(etp, plan.ep) for p in pc.kind_params])
    emb = pc.embedding / vd + pc.position + pc.embedding_norm  # the embedding's norm replicated over TP [en]
    out_params = pc.output if not model.tied_embeddings else np.where(plan.pp > 1, pc.embedding, 0)
    head = out_params / vd + pc.final_norm
    mtp_dense, mtp_expert = pc.mtp.dense_per_gpu(tp), pc.mtp.experts_per_gpu(etp, plan.ep)
    single = plan.pp == 1
    if end == "first":
        return dense + emb + np.where(single, head + mtp_dense, 0.0), experts + np.where(single, mtp_expert, 0.0)
    if end == "last":
        # the MTP stage's own word embedding (and position table) under PP [me]
        copy = (pc.embedding / vd + pc.position) if (mtp_copy and model.mtp_layers) else 0.0
        return dense + head + mtp_dense + np.where(single, emb, copy), experts + mtp_expert
    return dense, experts


def muon_params_of(pc: ParamCounts, model: ModelSpec, plan: PlanArrays, counts, end: str, mtp_copy: bool = False):
    """(dense, experts) parameters per GPU before sharding of a stage holding `counts` (K, ...) layers that Megatron's
    Muon steps [mu]: the layers' 2-D weight matrices (BlockParams.muon_per_gpu, muon_experts_per_gpu), the multi-token
    prediction modules' on the last stage, and a learned position table (2-D, untagged) where the stage holds one, as
    params_of places them; never the word embedding or the output layer (is_embedding_or_output_parameter), the
    norms or the biases (1-D): Adam steps those."""
    tp = plan.tp.astype(np.float64)
    etp = etp_of(plan).astype(np.float64)
    dense = weighted(counts, [p.muon_per_gpu(tp) for p in pc.kind_params])
    experts = weighted(counts, [p.muon_experts_per_gpu(etp, plan.ep) for p in pc.kind_params])
    mtp_dense, mtp_expert = pc.mtp.muon_per_gpu(tp), pc.mtp.muon_experts_per_gpu(etp, plan.ep)
    single = plan.pp == 1
    if end == "first":
        return dense + pc.position + np.where(single, mtp_dense, 0.0), experts + np.where(single, mtp_expert, 0.0)
    if end == "last":
        copy = pc.position if (mtp_copy and model.mtp_layers) else 0.0
        return dense + mtp_dense + np.where(single, pc.position, copy), experts + mtp_expert
    return dense, experts


def muon_other_chunks(plan: PlanArrays, counts, end: str):
    """The model chunks beyond one of a stage holding `counts` (K, ...) layers that hold a layer [mu]: min(vpp, the
    stage's layers) - 1, one fewer at an end whose embedding or loss counts as a layer of the split (that chunk may
    hold none); each chunk has a layout of its own (dist_utils.py @d98e8a64 _ddp_wrap l. 354-396)."""
    n = functools.reduce(np.add, (np.asarray(c, dtype=np.float64) for c in counts), np.float64(0.0))
    ends = (plan.split_emb > 0) if end == "first" else (plan.split_loss > 0) if end == "last" else False
    return np.maximum(np.minimum(plan.vpp, n) - 1.0 - np.where(ends, 1.0, 0.0), 0.0)


def muon_largest_params(pc: ParamCounts, model: ModelSpec, plan: PlanArrays, counts, end: str, mtp_copy: bool = False,
                        chunks: bool = False, parts: bool = False):
    """(dense, experts) elements per GPU of the largest single parameter Muon steps on a stage holding `counts` (K, ...)
    layers [mu]: of the layer kinds it holds (LayerKind.muon_params: linear_qkv whole; a TP-split matrix / tp, a
    replicated one whole, an expert's / etp), a learned position table (s x h) where muon_params_of places one, the
    MTP modules' eh_proj (h x 2h / tp) and layer on the last stage; 0.0 for none. chunks: the sum over the rank's
    model chunks (plan.vpp, each with a layout of its own: dist_utils.py @d98e8a64 _ddp_wrap l. 354-396, one
    compute_full_param_layout a chunk) of each chunk's largest, at least: the largest, plus the smallest kind's
    largest for each other chunk holding a layer (min(vpp, the stage's layers) - 1, one fewer at an end whose
    embedding or loss counts as a layer of the split: that chunk may hold none). parts: (the largest, (dense,
    experts), each other chunk's at least, (dense, experts), the number of other chunks) for muon_layout_excess's
    worst rank, which holds one of each (its chunks' sum is chunks')."""
    tp = plan.tp.astype(np.float64)
    etp = etp_of(plan).astype(np.float64)

    def largest(params):
        out = [np.float64(0.0), np.float64(0.0)]
        for rows, cols, _n, group in params:
            e = float(rows) * float(cols)
            i = 1 if group == "expert" else 0
            out[i] = np.maximum(out[i], e / (etp if group == "expert" else tp if group == "split" else 1.0))
        return out

    kinds = [largest(k.muon_params()) for k in pc.layers.kinds]
    big = [functools.reduce(np.maximum, (np.where(np.asarray(c) > 0, k[i], 0.0) for c, k in zip(counts, kinds)),
                            np.float64(0.0)) for i in (0, 1)]
    more, each, others = [0.0, 0.0], [0.0, 0.0], 0.0  # the other chunks' (chunks): each the smallest kind's largest
    if chunks or parts:
        small = [functools.reduce(np.minimum, (np.where(np.asarray(c) > 0, k[i], np.inf) for c, k in zip(counts, kinds)),
                                  np.float64(np.inf)) for i in (0, 1)]
        others = muon_other_chunks(plan, counts, end)
        each = [np.where(np.isfinite(m), m, 0.0) for m in small]
        more = [others * m for m in each] if chunks else more
    h = model.hidden_size
    mtp = (largest(((h, 2 * h, 1, "split"),) + sum((pc.layers.kinds[k].muon_params() for k in pc.layers.mtp_kinds), ()))
           if model.mtp_layers else (0.0, 0.0))
    pos = float(pc.position)  # a learned position table, 2-D and untagged, replicated over TP (0 without one)
    single = plan.pp == 1
    if end == "first":
        out = (np.maximum(big[0], np.maximum(pos, np.where(single, mtp[0], 0.0))),
               np.maximum(big[1], np.where(single, mtp[1], 0.0)))
    elif end == "last":
        copy = pos if (mtp_copy and model.mtp_layers) else 0.0  # the MTP stage's own position table [me]
        out = np.maximum(np.maximum(big[0], mtp[0]), np.where(single, pos, copy)), np.maximum(big[1], mtp[1])
    else:
        out = big
    if parts:
        return (out[0], out[1]), (each[0], each[1]), others
    return out[0] + more[0], out[1] + more[1]


def muon_layout_excess(settings: Settings, plan: PlanArrays, muon, big, shard, chunked=None, parts=None):
    """(buffer, states) elements per GPU the layer-wise optimizer's default layout adds to a Muon group's even shares
    [mu] (muon: the group's Muon parameters a GPU, big its largest one, muon_largest_params; chunked: the sum of
    each model chunk's largest, muon_largest_params' chunks, each chunk's buffer padded on its own; parts: this
    group's (largest, each other chunk's largest, other chunks), muon_largest_params' parts; shard: the
    group's ranks, dp x cp dense, the expert-data-parallel ones for the experts). layer_wise_optimizer.py @d98e8a64
    _compute_per_buffer_param_layout (l. 196-444) never splits a parameter: each bucket is dp_size shards of
    padded_shard_size = pad_to_divisor(max(shard_cursors), _shard_divisor) (l. 332), and some shard holds the
    bucket's largest parameter whole, so the buffer DDP allocates for the group (param_and_grad_buffer.py l. 1115:
    numel = the layout's last bucket end; its bf16 parameters and its gradients, on every rank) is at least
    max(M, shard x big), and the rank holding the largest parameter steps at least max(M / shard, big) of it (its
    fp32 main parameters and momentum: Float16OptimizerWithFloat16Params and Muon's momentum_buffer, l. 579-590).
    Model chunks (vpp > 1): training/models/dist_utils.py @d98e8a64 _ddp_wrap l. 354-396 computes one layout a
    chunk (compute_full_param_layout on the chunk's parameters), and each layout's _emit_bucket starts from
    shard_compute_loads = [0] x dp_size (l. 256, local to the call) and sends the chunk's first bucket's costliest
    parameter to min(candidates, key=load), the first of the equally empty shards: shard 0, dp rank 0
    (_shard_params_from_layout l. 645-711: shard_id is the rank, l. 681), in every chunk. So dp rank 0 holds each
    chunk's largest whole (the costliest by max(m, n) min(m, n)^2, l. 258-273, is the largest by elements for the shapes
    here, which share the hidden size): with c = 1 + the other chunks, each chunk's share taken as M / c, that
    rank's states are sum over chunks of max(M / (c shard), the chunk's largest) = max(M / (c shard), largest) +
    (c - 1) max(M / (c shard), each other's), its excess over M / shard priced (c = 1 without parts: max(M / shard,
    big)). Both floors, exact where a chunk's parameters are no more than its ranks (a shard each at most:
    _emit_bucket's LPT sends each to an empty shard, l. 314-329; with no shard under the per-bucket cap of
    1.3 M / shard, l. 313-326, the emptiest), lower bounds above: the LPT by compute cost with the numel cap
    (1.3 x the mean, l. 313-315) bounds the rest's imbalance, which a sum-only model cannot price (the order of the
    chunk's parameters decides it), not priced; nor the 64-element starts (param_layout.py pad_param_start
    l. 24-26, l. 327 here: under 64 elements a parameter) and the bucket divisor's alignment (_shard_divisor,
    l. 184-193: lcm(64, bucket divisor / dp), a few hundred elements a bucket), below 1e-4 of a layer's matrices.
    0 without the layout (sharding none, or the legacy
    path's whole tensors: whole_tensor_excess) and under Adam."""
    if settings.optimizer != "muon" or settings.optimizer_whole_tensors:  # job settings
        return 0.0, 0.0
    on = plan.sharding >= ZERO1
    d = np.asarray(shard, dtype=np.float64)
    buffer = np.where(on, np.maximum(muon, d * (big if chunked is None else chunked)) - muon, 0.0)
    if parts is None:
        worst = np.maximum(muon / d, big)
    else:
        first, each, others = parts
        mean = muon / (d * (1.0 + others))  # each chunk's even share (M / c) / shard
        worst = np.maximum(mean, first) + others * np.maximum(mean, each)
    states = np.where(on, worst - muon / d, 0.0)
    return buffer, states


def muon_param_total(pc: ParamCounts) -> int:
    """The model's parameters Megatron's Muon steps [mu] (ParamCounts.total's: the layers' 2-D matrices, every routed
    expert's, and a learned position table; no multi-token-prediction module, which total leaves out too)."""
    return int(sum(int(n) * (p.muon_per_gpu(1) + p.muon_experts_per_gpu(1, 1))
                   for n, p in zip(pc.layers.totals, pc.kind_params))) + pc.position


def legacy_gather_bytes(settings: Settings, plan: PlanArrays, params, e_part):
    """Bytes of the layer-wise optimizer's parameter all-gather buffers on its legacy path (the job's
    optimizer_whole_tensors, step.py layerwise_legacy) [mu], a moment after the optimizer step (its Newton-Schulz
    temporaries freed, the states and gradient buffer live): allgather_params' _allgather_helper
    (layer_wise_optimizer.py @d98e8a64 l. 828-862) flattens the rank's own parameters (_flatten_dense_tensors, a new
    tensor) and allocates a receive buffer of every other rank's (torch.empty(flat_sizes[i]), the model dtype): the
    stage's whole dense parameters in the weights' bytes, then (the dense buffers freed on return) the rank's E / ep
    experts' over the expert-data-parallel group; the copies back are views (_unflatten_dense_tensors). params: the
    stage's dense + expert parameters a GPU, e_part the experts' optimizer partition (x expert_shard at zero1).
    0.0 elsewhere (with the layout the gather is DDP's own buffer's, in place)."""
    if not settings.optimizer_whole_tensors:  # a job setting (zero1 only: plan._optimizer)
        return 0.0
    experts = e_part * expert_shard(plan)
    return settings.bpp.weights * np.maximum(params - experts, experts)


def whole_tensor_excess(pc: ParamCounts, model: ModelSpec, plan: PlanArrays, end: str, vdiv) -> np.ndarray | float:
    """Elements per GPU of the largest Adam-stepped tensor a stage holds, which Muon's layer-wise distributed optimizer
    on its legacy path hands whole to one rank [mu]: the word embedding (V / tp x h) on the first stage, the output
    layer (untied), or the tied copy at pp > 1, on the last; with one stage the larger. Its states there are whole,
    where the shard's 1 / d is priced: the caller adds (1 - 1 / d) of them."""
    emb = pc.embedding / vdiv
    out = pc.output / vdiv if not model.tied_embeddings else np.where(plan.pp > 1, pc.embedding / vdiv, 0.0)
    if end == "first":
        return np.where(plan.pp == 1, np.maximum(emb, out), emb)
    if end == "last":
        return np.where(plan.pp == 1, np.maximum(emb, out), out)
    return 0.0


def muon_top_tensors(pc: ParamCounts, plan: PlanArrays, counts):
    """((size, count) dense, (size, count) experts) per GPU of the largest 2-D parameters Muon steps among a stage's
    layers (`counts` (K, ...)) [mu]: the largest element count of a parameter (LayerKind.muon_params: linear_qkv whole,
    a TP-split matrix / tp, a replicated one whole, a routed expert's / etp) and how many tensors of that size the
    stage holds (a kind's layers x its tensors of that size; a routed expert's x num_experts / ep, TE GroupedLinear's
    weight{i} one tensor an expert); (0.0, 0.0) for none."""
    tp = plan.tp.astype(np.float64)
    etp = etp_of(plan).astype(np.float64)
    ep = np.asarray(plan.ep, dtype=np.float64)
    out = []
    for expert in (False, True):
        kinds = []
        for k in pc.layers.kinds:
            sizes = [(float(r) * float(c) / (etp if g == "expert" else tp if g == "split" else 1.0),
                      float(n) / (ep if g == "expert" else 1.0))
                     for r, c, n, g in k.muon_params() if (g == "expert") == expert]
            big = functools.reduce(np.maximum, (e for e, _ in sizes), np.float64(0.0))
            mult = sum((np.where(np.abs(e - big) <= 1e-9 * big, n, 0.0) for e, n in sizes), np.float64(0.0))
            kinds.append((big, mult))
        b = functools.reduce(np.maximum, (np.where(np.asarray(c) > 0, big, 0.0) for c, (big, _) in zip(counts, kinds)),
                             np.float64(0.0))
        n = sum((np.where((np.asarray(c) > 0) & (np.abs(big - b) <= 1e-9 * b), np.asarray(c, dtype=np.float64) * m, 0.0)
                 for c, (big, m) in zip(counts, kinds)), np.float64(0.0))
        out.append((b, n))
    return out[0], out[1]


def whole_tensor_state_bytes(pc: ParamCounts, model: ModelSpec, plan: PlanArrays, counts, end: str, vdiv, mw,
                             adam_bytes, muon) -> dict:
    """{master_weights, adam}: bytes per GPU beyond the even 1 / d share that the worst rank of Muon's layer-wise
    distributed optimizer on its legacy path holds (the job's optimizer_whole_tensors) [mu]. _shard_params_ping_pong
    (layer_wise_optimizer.py @d98e8a64 l. 713-762) sorts every parameter of the rank's stage (all its model chunks,
    every optimizer's groups) by numel (l. 740, ascending) and deals them whole in the ping-pong order 0 .. d-1,
    d-1 .. 0 (l. 726), the routed experts apart over the expert-data-parallel ranks (l. 727, 744-749). The largest
    tensors come last, a rank each: with k tensors of the largest size b (muon_top_tensors; the stage's layers) a
    rank holds ceil(k / d) of them, so the worst holds at least max(M / d, ceil(k / d) b) of the stage's M Muon
    elements (muon: (dense, experts), muon_params_of), exact where the stage's tensors are no more than d (one each:
    Llama 3 8B's 24 a stage at pp 8 on dp 64), the floor above (as muon_layout_excess's): a Muon matrix's master +
    momentum (MUON_MOMENTUM_BYTES) beyond the even share. A lone dominant Adam tensor, the first stage's word
    embedding or the last's output layer (whole_tensor_excess: master + Adam's two moments), is priced b (1 - 1 / d)
    beyond the even share (its rank takes its ping-pong share of the rest too: the corpus's Muon MoE rows, 88 dense
    tensors on dp 8). The dense group prices the larger of the two excesses (a middle stage: the Muon matrices' alone;
    their largest a layer's fc1 or linear_qkv), the experts' top group beside it over the expert-data-parallel ranks.
    Not priced: the ping-pong's turnarounds (ranks 0 and d-1 take two consecutive slots, l. 726), which can give one
    rank two of the top group where k <= d, depending on the stage's whole tensor count (the norms' and biases' among
    them) mod 2 d, which the planner does not count; the next sizes' imbalance above the floor. 0.0 below zero1."""
    d = (plan.shard * plan.cp).astype(np.float64)
    de = np.asarray(expert_shard(plan), dtype=np.float64)
    on = plan.sharding >= ZERO1

    def extra(b, k, m, ranks):  # max(m / ranks, ceil(k / ranks) b) - m / ranks, for k tensors of b among m
        r = np.maximum(ranks, 1.0)
        return np.maximum(m / r, np.ceil(k / r - 1e-9) * b) - m / r

    (b_d, k_d), (b_e, k_e) = muon_top_tensors(pc, plan, counts)
    emb = whole_tensor_excess(pc, model, plan, end, vdiv) * (1.0 - 1.0 / d)
    mu = extra(b_d, k_d, muon[0], d)
    adam_wins = emb * (mw + adam_bytes) >= mu * (mw + MUON_MOMENTUM_BYTES)
    ex = extra(b_e, k_e, muon[1], de)
    master = np.where(adam_wins, emb, mu) * mw + ex * mw
    moments = np.where(adam_wins, emb * adam_bytes, mu * MUON_MOMENTUM_BYTES) + ex * MUON_MOMENTUM_BYTES
    return {"master_weights": np.where(on, master, 0.0), "adam": np.where(on, moments, 0.0)}


def weight_copy_bytes(settings: Settings, code):
    """(row-wise, column-wise) bytes per linear weight element of TE's quantized copy for the
    recipe(s) `code` (precisions.FP8_RECIPES) on the settings' GPU [11]: QUANTIZED_WEIGHT_BYTES,
    the column-wise copy that is a transpose kept only on TN-only GPUs. What quantized_weight_terms
    prices per element, and what the search compares to gate a recipe variant (search.variant_memory)."""
    from .precisions import FP8_RECIPES

    table = np.array([QUANTIZED_WEIGHT_BYTES[r] for r in FP8_RECIPES])
    code = np.asarray(code, dtype=np.int64)
    row, col = table[code, 0], table[code, 1]
    return row, np.where((table[code, 2] > 0) & (not settings.hardware.fp8_gemm_tn_only), 0.0, col)


def quantized_weight_terms(settings: Settings, plan: PlanArrays, pc: ParamCounts, counts, end: str):
    """(quantized weight copies, weight bytes saved) per GPU of a stage holding `counts` (K, ...)
    layers [11]: the stage's linear weights (the layers' TP-split ones / tp, BlockParams.split_linear: the
    biases and the mixers' conv1d, dt_bias, A_log, D and norms left out, layers/common.py [pl]; and the experts'
    matrices / (etp ep), their biases left out: layers/common.py [qb]) in TE's cache
    beside bf16 weights, row-wise + column-wise bytes (the transpose only on TN-only GPUs); with
    fp8_param_gather the column-wise copies only, beside weights of the row-wise bytes
    (bpp.weights - row-wise saved a parameter). The layers kept in bf16 (settings.bf16_layers: the
    first n0, the last n1) take their share of the stage's linears. Zero in bf16, under FSDP and
    on stacks without memory.fp8_weight_cache."""
    zero = np.zeros(np.broadcast(plan.tp, plan.precision).shape)
    on = ((plan.precision == FP8) | (plan.precision == NVFP4)) & (plan.sharding < FSDP)
    if not stack_of(settings).memory.fp8_weight_cache or not np.any(on):  # the second: a shortcut only (zero either way)
        return zero, zero
    row, col = weight_copy_bytes(settings, plan.f8r)
    tp = plan.tp.astype(np.float64)
    e_div = etp_of(plan).astype(np.float64) * plan.ep
    # the routed experts' weights only where their grouped GEMMs run quantized (plan.fge: job field fp8_grouped_experts, step.py [16])
    ex = np.where(np.asarray(plan.fge) > 0, 1.0, 0.0)
    # the experts' weight matrices only: their biases stay bf16, outside TE's cache (layers/common.py [qb])
    per_kind = [p.split_linear / tp + ex * (p.expert - p.expert_bias) / e_div for p in pc.kind_params]
    # the bf16 layers where they sit, by kind: by global layer index on the stages whose model chunks hold them
    # (pipeline.stage_end_kinds, as step.bf16_end_layers prices their time: with vpp > 1 or a first chunk shorter
    # than n0 some sit on stage 1 and later; DeepSeek's first dense layers keep their own, smaller, linears out, not
    # the stage's mean layer's); a middle stage is priced with none (the middle stage holding the most fp8 copies:
    # the memory's worst case)
    n0, n1 = settings.bf16_layers
    b16 = 0.0
    if (n0 or n1) and end in ("first", "last"):  # job settings and the stage asked for, not searched quantities
        k0, _, k_last = stage_end_kinds(layer_list(settings.model), plan, n0, n1)
        b16 = np.minimum(k0 if end == "first" else k_last, counts)
    linear = weighted(counts - b16, per_kind)
    # fp8 parameters need Megatron's distributed optimizer (training/arguments.py l. 1095-1097)
    pg = bool(settings.fp8_param_gather or settings.fp4_param_gather) & (plan.sharding >= ZERO1)
    copies = np.where(on, linear * (col + np.where(pg, 0.0, row)), 0.0)
    return copies + zero, np.where(on & pg, linear * (settings.bpp.weights - row), 0.0) + zero


def stage_param_split(pc: ParamCounts, model: ModelSpec, plan: PlanArrays, counts: dict, mtp_copy: bool = False) -> dict:
    """{"first", "mid", "last": (dense, experts)} params_of each stage; counts["mid"] (K, ...):
    the middle stage's composition; mtp_copy: params_of's (the stack's memory.mtp_embedding_copy) [me]."""
    return {st: params_of(pc, model, plan, counts[st], st, mtp_copy=mtp_copy) for st in STAGES}


def stage_params(pc: ParamCounts, model: ModelSpec, plan: PlanArrays):
    """Dense parameters per GPU on the first and on the last pipeline stage (params_of)."""
    counts = stage_kind_counts(model, plan)
    return params_of(pc, model, plan, counts["first"], "first")[0], params_of(pc, model, plan, counts["last"], "last")[0]


def converted_linear_elems(settings: Settings, pc: ParamCounts, plan: PlanArrays, per_gpu: bool = True) -> list:
    """Per layer kind, the linear weight elements FSDP's fp8 all-gather gathers at FP8_GATHER_BYTES [fa]: the
    TP-split matrices (BlockParams.split_linear: biases and the mixers' plain parameters left out, layers/common.py
    [pl]) / tp, on a stack that converts Linear modules by filter (torchtitan,
    step.py [18]) less the kept-bf16 linears' and plus a converted router's or MLA down projection's (whole on each
    TP rank) (fp8_linears.converted_param_change). per_gpu False: the layer's whole (no / tp)."""
    from .fp8_linears import converted_param_change, module_filter

    tp = plan.tp.astype(np.float64) if per_gpu else np.float64(1.0)
    filt = module_filter(stack_of(settings))
    out = []
    for k, p in zip(pc.layers.kinds, pc.kind_params):
        base = np.float64(p.split_linear)
        if filt:
            split, rep = converted_param_change(k.mixer, k.mlp, settings.filter_fqns, plan.f8r)
            out.append((base + split) / tp + rep)
        else:
            out.append(base / tp)
    return out


def unit_params(pc: ParamCounts, plan: PlanArrays, layers_only: bool = False, per=1.0, cut=0.0, out_cut=0.0,
                conv=None, vdiv=None) -> np.ndarray:
    """The largest FSDP unit one GPU gathers: a layer (its TP-split parameters / tp and its replicated ones whole,
    as params_of: norms, routers, MLA's down projections and the row-parallel linears' biases are whole on every TP
    rank, Megatron marking them no tensor_model_parallel and torchtitan's SequenceParallel / norms and RowwiseParallel's
    biases a Replicate placement (layers/common.py [rb]); a layer with experts also its E/ep experts / etp, their
    output biases whole), or the
    embedding or output layer / tp (layers_only: the largest layer). In bytes where per is the
    bytes a gathered parameter (1.0: parameters), `cut` fewer for each of a layer's linear weight
    elements (the TP-split matrices, biases and the mixers' plain parameters left out: BlockParams.split_linear,
    layers/common.py [pl]; or per kind `conv`, converted_linear_elems: the Linears
    FSDP's fp8 all-gather gathers at FP8_GATHER_BYTES, gathered_bytes [fa]) and `out_cut` fewer for the output
    layer's. vdiv: the vocabulary's divisor for the largest TP rank (vocab_tp_divisor [vs]; None: tp)."""
    tp = plan.tp.astype(np.float64)
    unit = (np.zeros(np.shape(tp)) if layers_only
            else np.maximum(per * pc.embedding, (per - out_cut) * pc.output) / (tp if vdiv is None else vdiv))
    for i, (k, p) in enumerate(zip(pc.layers.kinds, pc.kind_params)):
        u = (p.dense_per_gpu(tp) + p.experts_per_gpu(etp_of(plan), plan.ep)) if k.has_experts else p.dense_per_gpu(tp)
        lin = p.split_linear / tp if conv is None else conv[i]
        unit = np.maximum(unit, per * u - cut * lin)
    return unit


def fp8_allgather_on(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Where FSDP all-gathers the converted Linears' weights in fp8 [fa]: a low-precision plan whose
    recipe has the fp8 all-gather (stack_db fp8_recipes allgather_fp8), unless the job's fp8_allgather
    is false. What the step's traffic (step.gather_bytes, step.py [15]) and the gathered weights' memory read."""
    recipe = fp8_recipe(stack_of(settings), plan.f8r)
    return (plan.precision != BF16) & recipe["allgather_fp8"] & (settings.fp8_allgather is not False)


def gathered_bytes(settings: Settings, plan: PlanArrays):
    """(bytes a gathered parameter, bytes fewer a converted layer Linear's weight element, bytes fewer an
    output-layer weight element) of FSDP's unsharded weights [fa]: the stack's param_gather_bytes (bf16: 2),
    with the fp8 all-gather (fp8_allgather_on) the converted Linears' weights at FP8_GATHER_BYTES (torchao
    fsdp_post_all_gather wraps the gathered float8 data as the unsharded weight, a Float8TrainingTensor: no
    bf16 copy), the output layer's too where the job converts it (fp8_output_layer); the embedding, norms,
    routers and routed experts at the stack's."""
    pgb = stack_of(settings).fsdp.param_gather_bytes
    cut = np.where(fp8_allgather_on(settings, plan), pgb - FP8_GATHER_BYTES, 0.0)
    return pgb, cut, (cut if settings.fp8_output_layer else 0.0 * cut)


def stage_linear_params(pc: ParamCounts, plan: PlanArrays, counts, conv=None) -> np.ndarray:
    """The layers' linear weight elements per GPU of a stage holding `counts` (K, ...) layers of each kind:
    their TP-split matrices / tp (BlockParams.split_linear: biases and the mixers' plain parameters left out,
    layers/common.py [pl]), or per kind `conv` (converted_linear_elems) (what FSDP's fp8
    all-gather gathers at 1 B [fa])."""
    if conv is None:
        conv = [p.split_linear / plan.tp.astype(np.float64) for p in pc.kind_params]
    return weighted(counts, conv)


STAGE_FIRST, STAGE_LAST, STAGE_MIDDLE = 0, 1, 2
STAGE_NAMES = {STAGE_FIRST: "first", STAGE_LAST: "last", STAGE_MIDDLE: "middle"}


def memory_terms(settings: Settings, plan: PlanArrays) -> tuple[Terms, np.ndarray]:
    """Per-GPU memory on the most loaded pipeline stage. Returns (terms, stage) where
    stage is STAGE_FIRST, STAGE_LAST or STAGE_MIDDLE (equal when pp == 1); the terms are
    all of that one stage, the stage with the largest total (stage_memory_terms)."""
    return heaviest_stage(stage_memory_terms(settings, plan))


def heaviest_stage(stages: dict) -> tuple[Terms, np.ndarray]:
    """(terms of the stage with the largest total, its stage code) from stage_memory_terms:
    every term of one stage, never the states of one and the activations of another."""
    first, last, middle = stages[STAGE_FIRST], stages[STAGE_LAST], stages[STAGE_MIDDLE]
    stage = _heaviest_code(first.total, last.total, middle.total)
    chosen = Terms(**{k: np.where(stage == STAGE_LAST, last[k], np.where(stage == STAGE_MIDDLE, middle[k], first[k]))
                      for k in first})
    return chosen, stage


def _heaviest_code(first, last, middle) -> np.ndarray:
    """The stage code (STAGE_FIRST, STAGE_LAST, STAGE_MIDDLE) of the largest of three totals: pipeline.
    heaviest_stage_index's, whose tie rule it keeps (the lower pipeline rank: the first, then the middle, then the
    last)."""
    return _STAGE_CODES[heaviest_stage_index(first, middle, last)]


# heaviest_stage_index's answers (HEAVIEST_FIRST, HEAVIEST_MIDDLE, HEAVIEST_LAST) as stage codes
_STAGE_CODES = np.array([STAGE_FIRST, STAGE_MIDDLE, STAGE_LAST], dtype=np.int64)


def padded_chunk_bytes(kind: LayerKind, ctx: Ctx, plan: PlanArrays, stack, f8: dict) -> tuple:
    """(bytes one layer keeps, the buffer full recompute re-materialises) of a padded chunked layer's output beyond
    attn_out's 2 B a d / t a token [pc]: TE's padded output (p x, with the core's state) and, where the output
    projection saves its bf16 input, the folded-back copy's storage (p x) in attn_out's place; 0 for every other
    layer (Attention.chunk_padded: a stack setting on the layer kind, plan._stack_chunks)."""
    if not getattr(kind.mixer, "chunk_padded", False):
        return 0.0, 0.0
    p = chunk_pad_factor(ctx.seq, kind.mixer.chunk_of(ctx), True)  # 1 where the code chunks nothing [14]
    out_el = kind.mixer.chunk_out_elements(ctx)
    narrow = (plan.precision == FP8) | (plan.precision == NVFP4) if "attn_out" in f8 else False
    kept = ACT_BYTES * out_el * np.where(narrow, p - 1.0, 2.0 * p - 1.0)  # the core's state kept
    rerun = ACT_BYTES * out_el * np.where(narrow, 0.0, p - 1.0)  # the core re-run: TE's output unsaved
    stored = np.where(plan.recompute == RC_SELECTIVE, rerun if stack.selective.recompute_attention_core else kept, kept)
    return stored, np.where(plan.recompute == RC_FULL, kept, 0.0)


def hybridep_torch_saves(settings: Settings, kind: LayerKind, ctx: Ctx, plan: PlanArrays) -> tuple:
    """(bytes one layer keeps, the buffer of the layer being re-run, the handle every mode keeps) of what torchtitan
    0.3's HybridEP ops hold for the backward beyond the layer's tensors [hs] (layers/moe.py hybridep_torch_saved_bytes
    [20]), on the plans that run moe_dispatcher hybridep with ep > 1 (dispatch_codes.dispatcher_rows: the job's, or
    fit's dispatcher search's per plan): without recompute the bf16 permuted scores; under selective recompute the save
    list's cached dispatch output, the bf16 scores re-made in the re-run (the router's index and cached topk outputs:
    torch_router_saves [tr]); under
    full recompute nothing kept, the no-recompute set re-made in the re-run layer's buffer; and DeepEP's dispatch handle
    (hybridep_saved_bytes [15], over the group's NVLink domains), a ctx attribute of the dispatch and combine nodes,
    kept under every mode, full recompute's re-run layers too. (0, 0, 0) for a layer without routed experts and on a
    stack whose memory.hybridep_dispatch_saves is false (a stack setting)."""
    if not stack_of(settings).memory.hybridep_dispatch_saves or not kind.has_experts:  # stack and model settings
        return 0.0, 0.0, 0.0
    codes, _ = dispatcher_rows(settings, plan)
    on = (np.asarray(codes) == HYBRIDEP) & (np.asarray(plan.ep) > 1)
    none, sac, rerun = kind.mlp.hybridep_torch_saved_bytes(ctx)
    kept = np.where(plan.recompute == RC_SELECTIVE, sac, none)  # full recompute: the layers it does not re-run
    held = np.where(plan.recompute == RC_FULL, none, np.where(plan.recompute == RC_SELECTIVE, rerun, 0.0))
    domain = float(np.max(comm.domain_in_use(settings.gpus, comm.comm_params(settings.hardware))))
    return np.where(on, kept, 0.0), np.where(on, held, 0.0), np.where(on, kind.mlp.hybridep_saved_bytes(ctx, domain), 0.0)


def torch_router_saves(settings: Settings, kind: LayerKind, ctx: Ctx, plan: PlanArrays) -> tuple:
    """(bytes one layer keeps, the buffer of the layer being re-run) of what torchtitan's router saves beyond the
    layer's fp32 scores [tr] (layers/moe.py torch_router_saved_bytes [21]), on every plan and dispatcher of a stack
    whose memory.router_topk_saves is set: without recompute the gather's int64 index and route_norm's operands; under
    selective recompute the save list's cached topk outputs ('cache_topk'; none for 'recompute_topk'), the rest
    re-made in the re-run; under full recompute none kept, the no-recompute set re-made in the re-run layer's buffer.
    (0, 0) for a layer without routed experts and where the field is null (a stack setting)."""
    mode = stack_of(settings).memory.router_topk_saves
    if mode is None or not kind.has_experts:  # stack and model settings
        return 0.0, 0.0
    none, sac, rerun = kind.mlp.torch_router_saved_bytes(ctx, mode == "cache_topk")
    kept = np.where(plan.recompute == RC_SELECTIVE, sac, none)  # full recompute: the layers it does not re-run
    held = np.where(plan.recompute == RC_FULL, none, np.where(plan.recompute == RC_SELECTIVE, rerun, 0.0))
    return kept, held


def torch_reorder_saves(settings: Settings, kind: LayerKind, ctx: Ctx, plan: PlanArrays) -> tuple:
    """(bytes one layer keeps, the buffer of the layer being re-run) of what torchtitan's standard reorder and combine
    save beyond the generic table [ro] (layers/moe.py torch_reorder_saved_bytes [22]), on the plans whose dispatcher
    is the standard all-to-all (dispatch_codes.dispatcher_rows: the job's, or fit's dispatcher search's per plan) on a
    stack whose memory.reorder_combine_saves is true: without recompute the two int64 reorder indices and the fp32
    expert rows and scores; selective recompute keeps none and re-makes them in the re-run layer; full recompute keeps
    none, the no-recompute set in the re-run layer's buffer. (0, 0) for a layer without routed experts and where the
    field is false (a stack setting)."""
    if not stack_of(settings).memory.reorder_combine_saves or not kind.has_experts:  # stack and model settings
        return 0.0, 0.0
    codes, _ = dispatcher_rows(settings, plan)
    on = np.asarray(codes) == ALLTOALL
    none, sac, rerun = kind.mlp.torch_reorder_saved_bytes(ctx)
    kept = np.where(plan.recompute == RC_SELECTIVE, sac, none)  # full recompute: the layers it does not re-run
    held = np.where(plan.recompute == RC_FULL, none, np.where(plan.recompute == RC_SELECTIVE, rerun, 0.0))
    return np.where(on, kept, 0.0), np.where(on, held, 0.0)


def torch_permute_index_saves(settings: Settings, kind: LayerKind, ctx: Ctx, plan: PlanArrays) -> tuple:
    """(bytes one layer keeps, the buffer of the layer being re-run) of the EP permutation index torchtitan's standard
    all-to-all path keeps [pi] (layers/moe.py torch_permute_index_bytes [23]), on the plans whose dispatcher is the
    standard all-to-all on a stack whose memory.ep_permute_index is set: 'int64' (0.3) with EP > 1 only, 'padded_int32'
    (main) on every such plan; without recompute the index, under selective or full recompute none kept and the index
    re-made in the re-run layer's buffer. (0, 0) for a layer without routed experts and where the field is null."""
    mode = stack_of(settings).memory.ep_permute_index
    if mode is None or not kind.has_experts:  # stack and model settings
        return 0.0, 0.0
    codes, _ = dispatcher_rows(settings, plan)
    ep1 = mode == "padded_int32"  # a stack setting: main pads at EP 1 too (indices_padding_wrapper)
    on = (np.asarray(codes) == ALLTOALL) & ((np.asarray(plan.ep) > 1) | ep1)
    none, sac, rerun = kind.mlp.torch_permute_index_bytes(ctx, mode)
    kept = np.where(plan.recompute == RC_SELECTIVE, sac, none)  # full recompute: the layers it does not re-run
    held = np.where(plan.recompute == RC_FULL, none, np.where(plan.recompute == RC_SELECTIVE, rerun, 0.0))
    return np.where(on, kept, 0.0), np.where(on, held, 0.0)


def shared_fc1_saves(settings: Settings, kind: LayerKind, ctx: Ctx, plan: PlanArrays):
    """[se] Bytes one MoE layer's shared experts' fc1 (Megatron-Core's SharedExpertMLP: stack moe_shared_experts_tp_pair)
    saves for its backward beyond the layer's tensors (norm2_out, the router's bf16 input, already counted), one
    micro-batch on one GPU: under --moe-shared-expert-overlap (the job's moe_shared_expert_overlap, on the dispatchers
    of stack moe_shared_expert_overlap_dispatchers) the gathered input T h, a tensor of its own where the side stream gathered it (SP at tp > 1),
    at 2 B, or its quantized copy at 1 B under fp8 delayed scaling wherever the stack's linears save quantized inputs
    (stack memory.fp8_saves_gemm_inputs); without the overlap, under delayed scaling, the quantized copy of the local
    input, T h / rep_div at 1 B. 0 where the kind has no shared experts. A scalar 0 where nothing applies."""
    stack = stack_of(settings)
    mlp = kind.mlp
    if not (stack.moe_shared_experts_tp_pair and getattr(mlp, "num_shared", 0) and getattr(mlp, "fs", 0)):
        return 0.0  # a stack setting, the model's kind
    from .precisions import FP8_RECIPE_CODES

    th = ctx.T * float(settings.model.hidden_size)
    te = bool(stack.memory.fp8_saves_gemm_inputs)  # a stack setting: its linears save their quantized inputs [8]
    delayed = (plan.precision == FP8) & (np.asarray(plan.f8r) == FP8_RECIPE_CODES["delayed"]) & te
    gathered = np.asarray(ctx.rep_div) > 1  # SP at tp > 1: the side stream's gather is a new tensor
    off = np.where(delayed, th / ctx.rep_div, 0.0)  # the quantized copy of the local input, 1 B an element
    if not settings.moe_shared_expert_overlap:  # a job setting
        return off
    codes, _ = dispatcher_rows(settings, plan)
    ov = np.isin(codes, [CODES[n] for n in (stack.moe_shared_expert_overlap_dispatchers or ())])
    on = np.where(delayed, th, np.where(gathered, ACT_BYTES * th, 0.0))
    return np.where(ov, on, off)


def torch_moe_saves(settings: Settings, kind: LayerKind, ctx: Ctx, plan: PlanArrays) -> tuple:
    """(kept, re-run buffer, handle) of torchtitan's MoE ops beyond the layer's tensors: the router's on every
    dispatcher [tr], the standard reorder and combine's and the EP permutation index on the all-to-all plans [ro] [pi],
    plus torchtitan 0.3's HybridEP dispatch and combine on its plans [hs]."""
    r_kept, r_held = torch_router_saves(settings, kind, ctx, plan)
    o_kept, o_held = torch_reorder_saves(settings, kind, ctx, plan)
    p_kept, p_held = torch_permute_index_saves(settings, kind, ctx, plan)
    kept, held, handle = hybridep_torch_saves(settings, kind, ctx, plan)
    return kept + r_kept + o_kept + p_kept, held + r_held + o_held + p_held, handle


def layer_memory(settings: Settings, plan: PlanArrays, ctx: Ctx, ll: LayerList) -> tuple[list, list, list]:
    """Per layer kind: (what one layer keeps for one micro-batch under the plan's recompute
    mode, the buffer that mode needs while one layer's backward runs), and the layer input a
    fully recomputed layer keeps. Full recompute keeps only the inputs of the layers it
    re-runs [2] and re-materialises one layer's activations during that layer's backward pass
    (the seed's sec. 8.1: one layer's 34 sbh), all but the layer input, which is the checkpoint
    already counted; selective recompute keeps what the stack's policy saves (the job's
    Megatron --recompute-modules replace it: recompute_modules.py norm_drops, block_drops), and the tensors it
    re-runs exist for one layer at a time; per kind, what a fully re-run layer keeps: its input, its ops' handle [hs]."""
    stack = stack_of(settings)
    gathered = bool(stack.memory.tp_saves_gathered_input)
    f8 = fp8_saved_bytes(stack)
    co = ACT_BYTES if stack.memory.attention_keeps_output else 0.0  # the fused attention's bf16 output [8]
    ci = ACT_BYTES
    if settings.fp8_attention:  # its quantized q, k, v and output [fa8] (a job setting, the recipe's bytes)
        f8r = fp8_recipe(stack, plan.f8r)
        co, ci = np.where(co > 0.0, f8r["dpa_out"], 0.0), f8r["dpa_qkv"]
        if not fp8_kernel_saves_qkv(stack):  # a stack setting: under CP > 1 TE's CP attention saves its own q, k, v
            ci = np.where(np.asarray(ctx.cp) > 1, f8r["dpa_qkv_cp"], ci)  # (MXFP8: the bf16 ones) [fa8]
    never = () if stack.memory.moe_keeps_expert_out else ("moe_expert_out",)  # not saved by any mode [14]
    gating = dense_gating(settings)
    # DeepSpeed-MoE's combine einsum saves its own [E, C, M] expert output (gating_saved_bytes) in its place [dg]
    never += ("moe_expert_out",) if gating is not None and "moe_expert_out" not in never else ()
    route_saves = moe_routing_saves(settings)
    # where the routing saves are priced, the router's path's own bytes replace the generic fp32 logits
    never += ("moe_router_logits",) if route_saves is not None else ()
    am, at = settings.activation_model, settings.attention
    kb = kernel_bytes(stack, plan.compile, settings)
    sm32 = torch_softmax_fp32(settings, ctx, kb)  # the eager core's fp32 softmax output [sm]
    keeps = selective_keeps(settings)
    sel_recomputed = tuple(n for n in STANDARD_TENSORS if n in keeps or n == "scores")
    h = settings.model.hidden_size
    layer_input = ctx.T * ACT_BYTES * h / ctx.rep_div  # 2sbh (/t with SP) in either activation model [2]
    if settings.partition_activations:  # a job setting: each TP rank keeps 1/tp of the kept input [pa]
        layer_input = layer_input / ctx.tp
    # a selective policy that re-runs the elementwise kernels keeps none of the eager norms' extra saves
    keeps_norm = 0.0 if stack.selective.recompute_elementwise else 1.0
    stored, buffers, inputs = [], [], []
    cp_ring_bwd = cp_p2p_backward(settings, plan, stack, ctx)
    # kind_activation_bytes at this ctx, its tables and widths once per kind (memo)
    act_bytes = functools.partial(kind_activation_bytes, ctx=ctx, activation_model=am, attention=at, gathered_input=gathered,
                                  fp8_bytes=f8, core_in_bytes=ci, softmax_fp32=sm32, memo={})
    for kind in ll.kinds:
        full = act_bytes(kind, drops=never, core_out_bytes=co)
        if stack.memory.expands_kv_heads:  # K and V saved at the query heads' width [lg2] (a stack setting)
            full = full + kv_expansion_bytes(kind, ctx)
        if stack.windowed_attention is not None and getattr(kind.mixer, "window", None) is not None:
            # a windowed layer's dense [s, s] mask, which its attention kernel saves [lg3] (a stack setting and the
            # layer kind's window)
            full = full + kind.mixer.dense_mask_bytes(ctx, stack.windowed_attention.mask_bytes)
        # the unfused activation's saved tensors [uf]: kept by every mode but full recompute and moe_act's policy
        saves = getattr(kind.mlp, "unfused_saved_bytes", None)
        full = full + (saves(ctx, kb) if saves else 0.0)
        routing = route_saves(kind, ctx) if route_saves is not None else 0.0  # every mode but full ([9])
        # DeepSpeed-MoE's dense gating saves, kept by every mode but full recompute as the routing saves are [dg]
        g_saved, g_fwd, g_bwd = gating(kind, ctx) if gating is not None else (0.0, 0.0, 0.0)
        routing = routing + g_saved
        shared_in = shared_fc1_saves(settings, kind, ctx, plan)  # [se] the shared experts' fc1 input beyond norm2_out
        full = full + routing + shared_in
        kd = selective_drops(settings, kind, never, plan)  # per tensor, the rows the policy re-runs it on
        rr = 0.0 if reruns_moe_block(stack.selective, kind) else 1.0  # recompute_modules moe re-runs both (policy, kind)
        kept_saves = rr * saves(ctx, kb, "moe_expert_act_out" in stack.selective.recomputes) if saves else 0.0
        rs = 0.0 if "shared_experts" in stack.selective.recompute_blocks else rr  # [se] the moe / shared_experts policy
        kept_sel = act_bytes(kind, keeps=keeps, drops=kd, core_out_bytes=co) + kept_saves + rr * routing + rs * shared_in
        if stack.selective.saves_tp_partials:
            kept_sel = kept_sel + tp_partials(kind, ctx, h, "mlp_out" in keeps, ~tp_collectives_rerun(settings, plan))
        # the routing saves are kept, not re-run, by every selective policy and dispatcher [sr] but moe's (rr), and so
        # are the unfused activation's saves but the routed experts' under moe_act [uf] (kept_sel holds both)
        sel_buffer = np.maximum(full - rr * routing - rs * shared_in - kept_saves - act_bytes(kind, keeps=sel_recomputed, drops=kd), 0.0)
        # kernels that save more than the standard set: eager RMSNorm keeps an fp32 copy of its input
        # (the layer's pre-norms, and a model's query/key norms over T (a/t + k') d elements)
        norm_extra = kb["norm_saved_extra"] * (ctx.T * kind.norms * h / ctx.rep_div + kind.qk_norm_elements(ctx))
        graphed, (pc_kept, pc_held) = held_output_bytes(settings, kind, ctx), padded_chunk_bytes(kind, ctx, plan, stack, f8)
        he_kept, he_held, he_handle = torch_moe_saves(settings, kind, ctx, plan)  # torchtitan's ops [tr] [hs]
        stored.append(np.where(plan.recompute == RC_SELECTIVE, kept_sel + keeps_norm * norm_extra, full + norm_extra)
                      + graphed + pc_kept + he_kept + he_handle)  # a CUDA graph's static outputs [cg]; a padded chunk's [pc]
        inputs.append(layer_input + he_handle)
        rematerialised = np.maximum(full + norm_extra - layer_input, 0.0)
        buffers.append(np.where(plan.recompute == RC_FULL, rematerialised,
                                np.where(plan.recompute == RC_SELECTIVE, sel_buffer, 0.0)) + g_bwd + pc_held + he_held)  # [dg]
        if stack.memory.block_backward_transients:
            extra = block_backward_extra(kind, ctx, plan, am, at)
            if stack.memory.cp_ring_backward is not None:  # a stack setting, not a searched quantity
                # under CP the attention's backward is a later moment of the block's backward [cp1]
                extra = np.where(ctx.cp > 1, np.maximum(extra, cp_attention_backward_extra(
                    kind, ctx, plan, stack.memory.cp_ring_backward, am, at)), extra)
            buffers[-1] = buffers[-1] + extra
        cps = stack.context_parallel
        if cps is not None and cps.saved_out_bytes and kind.mixer.cp_overlaps_core:  # a stack setting
            # the a2a variant's second copy of the attention output, saved where the core is not re-run [cp2]
            out2 = np.where(ctx.cp > 1, cps.saved_out_bytes * kind.mixer.cp_ring(ctx)["o_el"], 0.0)
            stored[-1] = stored[-1] + np.where(plan.recompute == RC_SELECTIVE,
                                               0.0 if stack.selective.recompute_attention_core else out2, out2)
            buffers[-1] = buffers[-1] + np.where(plan.recompute == RC_FULL, out2, 0.0)
        if cps is not None and cps.held is not None:  # a stack setting, not a searched quantity
            # what the layer being run holds beyond its saved tensors (gathered K/V, all-to-all copies) [cp2]
            buffers[-1] = buffers[-1] + np.where(ctx.cp > 1, cp_held_extra(kind, ctx, cps.held), 0.0)
        # the P2P ring's backward beside what the layer holds then [cp4] (0 where the stack prices none)
        buffers[-1] = buffers[-1] + cp_ring_bwd(kind)
    return stored, buffers, inputs


def dense_gating(settings: Settings):
    """kind, ctx -> (bytes one MoE layer's dense gating saves, its forward transient, its backward transient), one
    micro-batch on one GPU (layers/moe.py gating_saved_bytes, gating_transient_bytes [dg]); (0, 0, 0) for a layer
    without routed experts; None where the stack has no dense gating (stack moe_gating)."""
    gating = stack_of(settings).moe_gating
    if gating is None:  # a stack setting
        return None
    cf, floor = settings.moe_capacity_factor, settings.moe_min_capacity

    def of(kind, ctx):
        if not kind.has_experts:  # a model property
            return 0.0, 0.0, 0.0
        saved = sum(kind.mlp.gating_saved_bytes(ctx, cf, floor).values())
        return (saved, *kind.mlp.gating_transient_bytes(ctx, cf, floor))
    return of


def _per_dispatcher(settings: Settings, plan, f):
    """f(dispatcher name) of each plan's MoE dispatcher (dispatch_codes.plan_dispatchers): f of the one every plan
    runs (the job's; fit's dispatcher search's base rows), else f of each dispatcher the plans run, each plan's taken
    by np.where (arrays, in tuples and lists, None kept): the same elements f gives under that dispatcher alone."""
    (first, _), *rest = plan_dispatchers(settings, plan)
    out = f(first)
    for name, on in rest:
        out = _where_nested(on, f(name), out)
    return out


def _where_nested(on, a, b):
    """np.where(on, a, b) element by element through tuples and lists (None where both are None)."""
    if isinstance(a, (tuple, list)):
        return type(a)(_where_nested(on, x, y) for x, y in zip(a, b, strict=True))
    if a is None and b is None:
        return None
    return np.where(on, a, b)


def moe_routing_saves(settings: Settings):
    """kind, ctx -> what one MoE layer saves for its routing and permutations beyond its tensors (layers/moe.py
    routing_saved_bytes [9] [10]: the router's on the job's path, every dispatcher; the permutations' on the
    job's moe_permute_fusion path, the alltoall dispatcher's), 0 for a layer without routed experts; None where
    the stack does not save them so (memory.moe_routing_saved)."""
    if not stack_of(settings).memory.moe_routing_saved:  # a stack setting
        return None
    pf, path, multihot = bool(settings.moe_permute_fusion), router_path(settings), fused_multihot(settings)

    @functools.cache
    def domain(dispatcher: str) -> float:
        # Hybrid-EP's handle reads the group's NVLink domains (layers/moe.py hybridep_saved_bytes [15]): the GPUs of
        # a domain the job's ranks fill (no other dispatcher reads it; a job setting)
        return (float(np.max(comm.domain_in_use(settings.gpus, comm.comm_params(settings.hardware))))
                if dispatcher == "hybridep" else 0.0)

    def saves(kind, ctx):
        if not kind.has_experts:  # a model property
            return 0.0
        # each plan's dispatcher (_per_dispatcher: the job's, or fit's dispatcher search's per plan)
        return _per_dispatcher(settings, ctx.plan, lambda d: kind.mlp.routing_saved_bytes(ctx, pf, path, d, domain(d),
                                                                                               multihot))
    return saves


def moe_dispatcher_held(settings: Settings, ctx: Ctx, ll):
    """(per layer kind (held, held_if_recomputed), the MTP modules' held): what one MoE layer's token dispatcher
    keeps as attributes from its forward to its next one, one micro-batch's (layers/moe.py dispatcher_held_bytes
    [13]; (0, 0) for a kind without routed experts), and the MTP modules' MoE layers' on the stage holding the loss
    [dh], the recompute share at the share of the module full recompute re-runs (mtp_recomputed); (None, 0) where
    the stack does not save the routing so (memory.moe_routing_saved)."""
    if not stack_of(settings).memory.moe_routing_saved:  # a stack setting
        return None, 0.0
    path, padded = router_path(settings), padded_routing_map(settings)

    def of(dispatcher: str) -> tuple:
        held = [kind.mlp.dispatcher_held_bytes(ctx, dispatcher, path.logit_bytes, path.fused, padded) if kind.has_experts
                else (0.0, 0.0) for kind in ll.kinds]
        if not ll.mtp:  # a model property
            return held, 0.0
        r = mtp_recomputed(settings, ctx.plan)
        return held, float(ll.mtp) * sum(held[k][0] + r * held[k][1] for k in ll.mtp_kinds)
    # each plan's dispatcher (_per_dispatcher: the job's, or fit's dispatcher search's per plan)
    return _per_dispatcher(settings, ctx.plan, of)


def fused_multihot(settings: Settings) -> bool:
    """Whether DeepEP's received routing map is built by Megatron's fused indices_to_multihot kernel (layers/moe.py
    deepep_saved_bytes [17]): is_experimental_enabled() (job enable_experimental) and moe_permute_fusion
    (token_dispatcher.py @d98e8a64 l. 1425-1428); read by the deepep dispatcher only."""
    return bool(settings.enable_experimental and settings.moe_permute_fusion)


def padded_routing_map(settings: Settings) -> bool:
    """Whether each MoE layer's dispatcher keeps the padded int32 routing map [dh] (layers/moe.py
    padded_routing_map_bytes [17]): Megatron-Core pads the map (job moe_router_padding) with its fused
    Triton kernel, a new int32 tensor, only where is_experimental_enabled() (job enable_experimental) and
    moe_permute_fusion (token_dispatcher.py @d98e8a64 l. 649-654, 1415-1420); otherwise pad_routing_map writes into the
    bool map in place (moe_utils.py l. 731-763) and nothing more is kept."""
    return bool(settings.moe_router_padding and settings.enable_experimental
                and settings.moe_permute_fusion)


def mtp_recomputed(settings: Settings, plan) -> np.ndarray:
    """The share of a multi-token-prediction module full recompute re-runs [dh]: 1 under full recompute re-running
    every layer (settings.recompute_layers unset: --recompute-method uniform), else 0. NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer.forward l. 1705-1719
    (recompute_granularity full: _checkpointed_forward), _checkpointed_forward l. 1621-1651 (uniform: the module's
    projection and layer under one checkpoint, recompute_num_layers 1 asserted; block: 'not supported for MTP yet',
    run without recompute, whatever --recompute-num-layers, so also where it covers every layer: the Megatron reader
    keeps recompute_layers for any block method, trainers/megatron.py)."""
    if settings.recompute_layers is not None:  # a job setting: Megatron's --recompute-method block
        return np.zeros(np.shape(plan.tp))
    if stack_of(settings).memory.mtp_checkpointed is False:  # a stack setting: torchtitan 0.3 checkpoints model.layers only
        return np.zeros(np.shape(plan.tp))
    return np.where(plan.recompute == RC_FULL, 1.0, 0.0)


def mtp_stored(settings: Settings, plan: PlanArrays, pc: ParamCounts, stored: list) -> np.ndarray:
    """What one MTP module's layer saves for one micro-batch [dh]: the plan's layer of its kind (stored, under the plan's
    recompute), or, where the stack's checkpointing does not cover the MTP modules (memory.mtp_checkpointed false:
    pytorch/torchtitan release/0.3 @4f9e9a47d distributed/activation_checkpoint.py apply l. 152-160 wraps the children
    of model.layers, and models/deepseek_v3/mtp.py keeps its modules in model.mtp_layers), the layer without recompute."""
    ll = pc.layers
    if stack_of(settings).memory.mtp_checkpointed is not False:  # a stack setting
        return sum(stored[k] for k in ll.mtp_kinds)  # the module's layers (layers/__init__.py)
    # RC_NONE for every plan; fit's plans may be 2-D (recompute x rows, search._memory_totals): flattened, then reshaped
    names = [f.name for f in dataclasses.fields(plan)]
    shape = np.broadcast_shapes(*(np.shape(getattr(plan, f)) for f in names))
    flat = {f: np.broadcast_to(np.asarray(getattr(plan, f)), shape).reshape(-1) for f in names}
    flat["recompute"] = np.full(flat["recompute"].shape, RC_NONE, dtype=np.int64)
    per_kind = _grouped_layer_memory(settings, dataclasses.replace(plan, **flat), ll)[0]
    kept = sum(per_kind[k] for k in ll.mtp_kinds)
    return np.reshape(kept, shape) if shape else np.asarray(kept).reshape(())


def _dispatcher_held(per: _PerLayer, counts, r) -> np.ndarray:
    """What the MoE layers of a stage (counts (K, ...) layers of each kind) hold as their dispatchers' attributes
    [dh]: each layer one micro-batch's, whatever the micro-batches in flight; the tensors autograd also saves held
    beyond their saves only in the share r of the layers full recompute re-runs (their forward saved nothing)."""
    if per.dispatcher_held is None:  # a stack setting
        return np.zeros(np.shape(per.plan.tp))
    return weighted(counts, [held + r * rc for held, rc in per.dispatcher_held]) + np.zeros(np.shape(per.plan.tp))


def router_path(settings: Settings) -> RouterPath:
    """The router's code path of the job's settings (layers/moe.py RouterPath [10])."""
    return RouterPath(fused=bool(settings.moe_router_fusion), pre_softmax=bool(settings.moe_router_pre_softmax),
                      aux_loss=settings.moe_aux_loss_coeff > 0.0, z_loss=settings.moe_z_loss_coeff > 0.0,
                      logit_bytes=ROUTER_DTYPE_BYTES[settings.moe_router_dtype])


def dummy_wgrads_mode(settings: Settings) -> str:
    """What a fused-accumulation linear returns as its weight gradient [dw]: the job's code version's
    (job field dummy_wgrads), else the stack's memory.dummy_wgrads; "none" where the job runs unfused."""
    if not settings.gradient_accumulation_fusion:
        return "none"
    return settings.dummy_wgrads or stack_of(settings).memory.dummy_wgrads


def wgrad_tensor_bytes(settings: Settings, plan: PlanArrays, kb: dict):
    """Bytes per weight element of the weight-gradient tensor a linear's backward hands to autograd,
    alive until the DDP hook drops it: the unfused GEMM's output (wgrad_unfused, job
    gradient_accumulation_fusion false) [uf] or, fused, a per-call dummy of the weight's dtype (2 B)
    [dw]; None where neither (fused with no or a cached dummy, and no Megatron-FSDP mode of the stack runs
    the fusion off whatever the job says); 0 under FSDP but at the fsdp levels of Megatron-FSDP (the modes
    stating runs.sharding reduce_queue_units), whose per-parameter post-accumulate-grad hook copies the
    autograd gradient into the unit's bucket and deletes it as Megatron's DDP hook does (NVIDIA/Megatron-LM
    @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py l. 1132-1143
    register_post_accumulate_grad_hook -> _process_post_backward_gradients l. 707-787 -> _grad_acc l. 635-680:
    param.main_grad.copy_(param.grad); del param.grad; @905c0e386 l. 555-601, 1024) [uf]: there the unfused
    tensor wherever the fusion is off, the job's or the mode's (stacks.mode_value: Megatron-Bridge turns it
    off under Megatron-FSDP, stack_db megatron-bridge job_settings overridden)."""
    fused_job = bool(settings.gradient_accumulation_fusion)
    per_call = dummy_wgrads_mode(settings) == "per_call"
    if fused_job and not per_call and not mfsdp_fusion_overridden(settings):  # job / stack settings
        return None
    # below FSDP the job's own setting (kb unfused_wgrad: 1.0 where the job turns the fusion off)
    below = (ACT_BYTES if per_call else 0.0) if fused_job else kb["unfused_wgrad"] * kb["wgrad_unfused"]
    # (none under Megatron-FSDP v2: no per-parameter copy, the autograd gradients are the unit's, fsdp_unit_grads [v2])
    v2 = mfsdp_v2(stack_of(settings), plan, getattr(settings, "mfsdp_v2", False))  # (a job setting)
    return np.where(plan.sharding < FSDP, below, np.where(mfsdp_hook_unfused(settings, plan) & ~v2,
                                                          kb["wgrad_unfused"], 0.0))


def mfsdp_fusion_overridden(settings: Settings) -> bool:
    """Stack data: a Megatron-FSDP fsdp-level mode (runs.sharding reduce_queue_units) that runs the
    gradient-accumulation fusion off whatever the job says (Megatron-Bridge, stack_db job_settings)."""
    stack = stack_of(settings)
    return any(m.reduce_queue_units is not None and any(
        x.setting == "gradient_accumulation_fusion" and not x.value for x in m.job_settings)
        for m in (stack.runs.sharding if stack is not None and stack.runs is not None else []))


def mfsdp_hook_unfused(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Per plan: a Megatron-FSDP fsdp level (FSDP or above with a reduce queue) with the fusion off, the
    job's or the mode's (stacks.mode_value): its post-accumulate-grad hook copies the autograd weight
    gradient into the unit's bucket (wgrad_tensor_bytes [uf]; step.wgrad_add_bytes [11])."""
    stack = stack_of(settings)
    mfsdp_hook = (plan.sharding >= FSDP) & ~np.isnan(reduce_queue_units(stack, plan))
    fused_mode = mode_value(stack, plan, "gradient_accumulation_fusion", bool(settings.gradient_accumulation_fusion))
    return mfsdp_hook & ~fused_mode


def _wgrad_gemms(kind: LayerKind, ctx: Ctx) -> list:
    """The (GEMM, count) rows of a layer kind whose weight gradient a linear hands to autograd:
    every GEMM of its mixer and MLP but the router (a torch parameter, not a TE / Megatron linear):
    the unfused transient [uf] and the cached dummies [dw] read the same list."""
    return [(s, c) for s, c in kind.mixer.gemms(ctx) + kind.mlp.gemms(ctx) if s.name != "router"]


def unfused_wgrad_transient(settings: Settings, plan: PlanArrays, ctx: Ctx, kb: dict):
    """kind -> the bf16 weight gradient of the kind's largest linear that lives during its backward
    where the job turns gradient-accumulation fusion off [uf], or a per-call dummy of its shape [dw]
    (wgrad_tensor_bytes per weight element of the GEMM's N x K, the routed experts' all local experts
    with moe_grouped_gemm, one without; the router left out); 0 where fused (cached or no dummy),
    and under FSDP."""
    on = wgrad_tensor_bytes(settings, plan, kb)
    if on is None:  # job / stack settings: no transient
        return lambda kind: 0.0

    def of(kind: LayerKind):
        each = [s.N * s.K * (c if s.name.startswith("expert_") and settings.moe_grouped_gemm else 1.0)
                for s, c in _wgrad_gemms(kind, ctx)]
        return on * (np.maximum.reduce(each) if each else 0.0)
    return of


def cp_held_extra(kind: LayerKind, ctx: Ctx, held):
    """What the layer being run holds beyond its saved tensors under a context parallelism whose
    stack spec says (ContextParallelSpec.held) [cp2], bytes: per element of the local K and V
    (T 2 k' d, k' = max(k / t, 1); MLA's up-projected K and V), of the query and of the output,
    each pass's terms summed (fixed + per_rank x cp a K/V element); the larger pass is what one
    layer adds. Llama 3's all-gather (2 cp B forward, (2 + dkv_bytes) cp B backward a K/V
    element), Transformer Engine's all_gather and a2a: stack_db. Layers without an attention
    core: 0."""
    mixer = kind.mixer
    if not mixer.cp_overlaps_core:
        return np.zeros(np.shape(ctx.T))
    ring = mixer.cp_ring(ctx)
    cp = np.asarray(ctx.cp, dtype=np.float64)
    fwd = ring["kv_el"] * (held.kv_fwd.fixed + held.kv_fwd.per_rank * cp) + ring["q_el"] * held.q_fwd
    bwd = (ring["kv_el"] * (held.kv_bwd.fixed + held.kv_bwd.per_rank * cp) + ring["q_el"] * held.q_bwd
           + ring["o_el"] * held.o_bwd)
    return np.maximum(fwd, bwd)


def kv_expansion_bytes(kind: LayerKind, ctx: Ctx) -> np.ndarray:
    """What a layer saves beyond its table's K and V where the model code expands them to the
    query heads before the attention kernel [lg2] (litgpt): K and V of a / t heads instead of the
    GPU's KV heads (max(k / t, 1)), 2 B x 2 x d x (a / t - max(k / t, 1)) per token; 0 for
    multi-head attention (k = a), MLA and layers without an attention core."""
    from .layers.attention import Attention

    mixer = kind.mixer
    if type(mixer) is not Attention:
        return np.zeros(np.shape(ctx.T))
    extra = mixer.a / ctx.tp - kv_local(mixer.k, ctx.tp)
    return ctx.T * 2.0 * ACT_BYTES * mixer.d * np.maximum(extra, 0.0)


# each ring step's output, dequantized to fp32 and kept to the merge under fp8 attention [cp3]: TE @4329ff84
# context_parallel.py AttnFuncWithCPAndKVP2P.forward l. 1979-1986 (delayed: dequantize(dtype=torch.float32);
# current scaling and MXFP8: .to(dtype=torch.float32))
CP_FP8_STEP_OUT_BYTES = 4.0


def cp_forward_merge_bytes(kind: LayerKind, ctx: Ctx, f8=None) -> np.ndarray:
    """What one attention layer's forward holds beyond its saved tensors at the end of Transformer
    Engine's P2P ring [cp3], on the last CP rank: cp step outputs (bf16, T a d / t each), cp fp32
    softmax statistics (T a / t each) and cp K/V buffers of the local size (bf16, 2 T k' d each, the
    saved one and the layer's own roped k, v counted: cp in all beyond the table); 0 without CP,
    for MLA and for layers without an attention core. f8: under fp8 attention, the recipe's ring
    figures (stacks.fp8_recipe cp_ring_kv, cp_merge_out, cp_inputs_bf16: arrays over the plans, or
    None): the step outputs at 4 B (fp32), the K/V buffers at cp_ring_kv B an element, and at the
    end of the forward the merged output's fp32 and bf16 copies beyond the saved one (cp_merge_out B
    a local output element) and the caller's bf16 q, k, v beside the saved quantized ones
    (cp_inputs_bf16 B an element)."""
    from .layers.attention import Attention

    mixer = kind.mixer
    if type(mixer) is not Attention:
        return np.zeros(np.shape(ctx.T))
    cp = np.asarray(ctx.cp, dtype=np.float64)
    a_loc = mixer.a / ctx.tp
    kv_el = 2.0 * kv_local(mixer.k, ctx.tp) * mixer.d  # K and V elements a local token
    if f8 is None:
        per_token = cp * (ACT_BYTES * a_loc * mixer.d + 4.0 * a_loc + ACT_BYTES * kv_el)
    else:
        per_token = (cp * (CP_FP8_STEP_OUT_BYTES * a_loc * mixer.d + 4.0 * a_loc + f8["cp_ring_kv"] * kv_el)
                     + f8["cp_merge_out"] * a_loc * mixer.d + f8["cp_inputs_bf16"] * (a_loc * mixer.d + kv_el))
    return np.where(cp > 1, ctx.T * per_token, 0.0)


def cp_p2p_backward(settings: Settings, plan: PlanArrays, stack, ctx: Ctx):
    """kind -> what one attention layer's backward holds in Transformer Engine's P2P ring beyond its saved
    tensors [cp4] (cp_p2p_backward_bytes), 0 for every kind where the stack prices none (memory.cp_p2p_backward,
    a stack setting). a2a+p2p: the ring over the p2p ranks (planner/cp_comm_type.py); under fp8 attention (a job
    setting) the recipe's moments."""
    moments = cp_backward_moments(stack, plan.f8r if settings.fp8_attention else None)
    if moments is None:
        return lambda kind: 0.0
    a2a, ring_cp = ring_ranks(stack.context_parallel, ctx.cp)
    ring_ctx = ctx if a2a == 1.0 else dataclasses.replace(ctx, cp=ring_cp)
    # the ring's buffers [cp4] and, beside them, the second-half softmax-statistics copy [cp5]
    return lambda kind: cp_p2p_backward_bytes(kind, ring_ctx, moments) + cp_backward_lse_copy_bytes(kind, ring_ctx)


# the P2P backward's contiguous copy of the merged softmax statistics' second half [cp5]: TE @4329ff84
# context_parallel.py AttnFuncWithCPAndKVP2P.backward l. 2327-2346 (fp32, 4 B, over half the local query rows)
CP_BWD_LSE_HALF_BYTES = 4.0 * 0.5


def cp_backward_lse_copy_bytes(kind: LayerKind, ctx: Ctx) -> np.ndarray:
    """The P2P ring backward's second-half softmax-statistics copy for one attention layer, per GPU [cp5]:
    CP_BWD_LSE_HALF_BYTES a local token and query head (T a / t x 2 B), on every CP rank but the last, held
    beside each moment of [cp4]; 0 without CP, for MLA and for layers without an attention core (as [cp4])."""
    from .layers.attention import Attention

    mixer = kind.mixer
    if type(mixer) is not Attention:
        return np.zeros(np.shape(ctx.T))
    cp = np.asarray(ctx.cp, dtype=np.float64)
    return np.where(cp > 1, ctx.T * CP_BWD_LSE_HALF_BYTES * mixer.a / ctx.tp, 0.0)


def cp_p2p_backward_bytes(kind: LayerKind, ctx: Ctx, moments) -> np.ndarray:
    """The largest moment of Transformer Engine's P2P ring backward [cp4] for one attention layer, per GPU:
    each moment (q fixed, q per rank, kv fixed, kv per rank; stacks.cp_backward_moments) prices (fixed + per
    rank x cp) B an element of the local query (T a d / t) and of the local K and V (T 2 k' d / t, k' = max(k / t,
    1)); 0 without CP, for MLA and for layers without an attention core (as [cp3])."""
    from .layers.attention import Attention

    mixer = kind.mixer
    if type(mixer) is not Attention:
        return np.zeros(np.shape(ctx.T))
    cp = np.asarray(ctx.cp, dtype=np.float64)
    q_el = mixer.a / ctx.tp * mixer.d
    kv_el = 2.0 * kv_local(mixer.k, ctx.tp) * mixer.d
    per_token = np.maximum.reduce([(qf + qr * cp) * q_el + (kf + kr * cp) * kv_el for qf, qr, kf, kr in moments]
                                  + [np.zeros(np.shape(cp))])
    return np.where(cp > 1, ctx.T * per_token, 0.0)


def block_backward_extra(kind: LayerKind, ctx: Ctx, plan: PlanArrays, am: str = "arch", at: str = "flash"):
    """What one block's backward holds beside the recompute buffer at its MLP's backward, the
    block's peak in torchtitan's eager step [tt5]: the block's output gradient (2h, /t under SP);
    the gradients of the MLP's activation product, for a gated MLP the down projection's input
    gradient and its two factors' (3 x 2f / t), for a plain one two (2 x 2f / t); the down
    projection's bf16 weight gradient (2 h f / t, unsharded); and under selective recompute the
    re-run attention's copies beside the tensors its policy keeps (the projection's output and
    the attention kernel's): the rotary-embedded q (2ad / t) and the attention output made
    contiguous for the output projection (2ad / t); without recompute and under full recompute
    the table's q and attn_out are those tensors already. Routed-expert MLPs: not priced (0)."""
    from .layers.mlp import DenseMLP

    t = kind_tensors(kind, ctx, am, at)

    def per(name):
        return t[name][0] / (ctx.tp if t[name][1] == "split" else ctx.rep_div) if name in t else 0.0

    dense = isinstance(kind.mlp, DenseMLP)
    grads = (3.0 if kind.mlp.gated else 2.0) * per("act_out") if dense else 0.0
    w_down = ACT_BYTES * kind.mlp.h * kind.mlp.f / ctx.tp if dense else 0.0
    rerun = np.where(plan.recompute == RC_SELECTIVE, per("q") + per("attn_out"), 0.0)
    return ctx.T * (per("input") + grads + rerun) + w_down


def cp_attention_backward_extra(kind: LayerKind, ctx: Ctx, plan: PlanArrays, rotate: str, am: str = "arch",
                                at: str = "flash"):
    """What one block's backward holds beside the recompute buffer at its attention's backward under
    context parallelism, torch's ring attention (torch 2.13 _context_parallel/_attention.py
    _templated_ring_attention_backward, convert_to_f32 on) [cp1]: the block's output gradient (2h, /t
    under SP) and the attention output's (2ad / t); under selective recompute the re-run rotary q
    (2ad / t), SDPA's input; the unsharded bf16 weight gradients of the block's linears computed by
    then (the MLP's 2 or 3 h f / t and the output projection's h a d / t, 2 B each: FSDP reduces them
    when the block's backward ends); and the ring's own tensors, per element of the GPU's local
    query Q (T a d / t) and of its local key K (T k d / min(t, k)): the fp32 grad_query accumulator
    and a step's bf16 dq (6 B a Q element), a step's bf16 dk, dv (4 B a K element), the fp32
    dK/dV exchanged by an all-to-all (the received buffer the accumulators are views of, the
    torch.cat sent on and the all-to-all's output: 3 x 8 B), the K/V torch.cat sent on (4 B) and
    the rotate method's K/V: the all-gathered K/V of the cp ranks (allgather: 4 cp B) or the
    received and the next permute output (alltoall: 8 B). Routed-expert MLPs, MLA and layers
    without an attention core: 0."""
    from .layers.attention import Attention
    from .layers.mlp import DenseMLP

    mixer = kind.mixer
    if not isinstance(mixer, Attention) or not isinstance(kind.mlp, DenseMLP):
        return np.zeros(np.shape(ctx.T))
    t = kind_tensors(kind, ctx, am, at)

    def per(name):
        return t[name][0] / (ctx.tp if t[name][1] == "split" else ctx.rep_div) if name in t else 0.0

    q_el = ctx.T * mixer.a * mixer.d / ctx.tp
    k_el = ctx.T * kv_local(mixer.k, ctx.tp) * mixer.d
    kv_held = 4.0 * ctx.cp if rotate == "allgather" else 8.0
    ring = 6.0 * q_el + (4.0 + 24.0 + 4.0 + kv_held) * k_el
    rerun = np.where(plan.recompute == RC_SELECTIVE, per("q"), 0.0)
    mlp = kind.mlp
    w_grads = ACT_BYTES * ((3.0 if mlp.gated else 2.0) * mlp.h * mlp.f + mixer.h * mixer.a * mixer.d) / ctx.tp
    return ctx.T * (per("input") + per("attn_out") + rerun) + w_grads + ring


def stage_memory_terms(settings: Settings, plan: PlanArrays) -> dict[int, Terms]:
    """Per-GPU memory terms of the first stage, the heaviest middle stage and the last stage.
    A middle stage of a model of one kind is stage 1, which holds the most micro-batches in
    flight; a model of several kinds compares the middle stages' distinct compositions, each
    at the lowest stage holding it (layers.stage_counts); with pp <= 2 there is none and its
    terms are the first stage's. An uneven split (stage_layers) can make the middle one the
    heaviest: Llama 3 405B's 126 layers on 16 stages put 7 layers x 16 in flight on stage 0
    and 8 x 15 on stage 1."""
    first, last, middle = _choose_stages(*_stages(settings, plan))
    return {STAGE_FIRST: first, STAGE_LAST: last, STAGE_MIDDLE: middle}


def memory_total(settings: Settings, plan: PlanArrays, layers=None, placed=None, dummies=None, states=None) -> np.ndarray:
    """memory_terms(settings, plan)[0].total, the bytes per GPU the search ranks and checks
    against the HBM, without building the chosen stage's terms: the stages' totals chosen as
    stage_memory_terms and heaviest_stage choose their terms (_choose_stages, _heaviest_code on
    the totals: the same values summed in the same order, so the same numbers). layers: the
    plan's layer_memory where the caller has it (the search prices it once per distinct tuple
    of LAYER_FIELDS over all its candidates: search.memory_totals), else priced here; placed:
    likewise the pipeline placement (placement_groups: (groups' _placement, each candidate's
    group, groups)) and TE's cached dummy weight-gradient shapes (_dummy_wgrad_shapes of the
    plans, gathered); states: each plan's group of STATE_FIELDS among a larger set's (search.memory_totals: the
    rows' Groups, which states_floor groups by too), else the plans are grouped here (_PerLayer.state_groups)."""
    first, last, mids, dual, has_mid = _stages(settings, plan, layers, placed, dummies, states)
    if dual is not None:
        dual = (dual[0], dual[1].total, [d.total for d in dual[2]])
    f, l_, m_ = _choose_stages(first.total, last.total, [c.total for c in mids], dual, has_mid)
    stage = _heaviest_code(f, l_, m_)
    return np.where(stage == STAGE_LAST, l_, np.where(stage == STAGE_MIDDLE, m_, f))


def states_floor(settings: Settings, plan, placed, groups=None) -> np.ndarray:
    """A lower bound of memory_total, read off a plan's model states alone: the larger of its first
    and last stages' weights, gradients, fp32 master weights and Adam moments (STATE_TERMS, the
    numbers _stage_states gives those stages), 0 where the plan runs DualPipe (each rank two
    stages: no bound claimed). plan: a KeyedPlan (or PlanArrays) of STATE_FIELDS and `schedule`;
    placed: placement_groups of the same plans (memory_total's `placed`). A bound because
    memory_total is the largest of the first, last and middle stages' totals (_heaviest_code),
    and a stage's total adds to those four terms others that hold bytes (activations, buffers,
    pools, the allocator's slack, the reserve). Not proven term by term for every stack (the FSDP
    buffers subtract what the fp8 all-gather and resharding save from what they hold), so it is
    checked: the search (search.fitting_memory) prices in full only the plans whose floor is
    within the HBM, checks on each of them that the floor is at most each of its totals, and
    prices every plan where one is not; tests/test_memory_floor.py checks it on every candidate
    of five spaces (megatron, torchtitan's FSDP2, MoE experts with pp > 2, DualPipe, fp8).
    The model states are priced once per distinct tuple of STATE_FIELDS (the layer counts follow
    the pipeline split), as _stage_terms prices them."""
    floor = np.float64(0.0)
    for states in _end_states(settings, plan, placed, groups):
        floor = np.maximum(floor, states)
    return np.where(dualpipe_pairs(plan), 0.0, floor)


def _end_states(settings: Settings, plan, placed, groups=None, copies: bool = False) -> tuple:
    """(first stage's, last stage's) model states (STATE_TERMS summed, _stage_states' numbers) of the plans, as
    states_floor reads them (its arguments); copies: plus TE's quantized weight copies [11] (_stage_states')."""
    (counts, _, _), index, size = placed
    if index is not None:
        counts = gather(_ends_only(counts), index, size)
    g = Groups(plan, STATE_FIELDS) if groups is None else groups  # (groups: the caller's Groups of these plans)
    per = _StatesOnly(settings, count_params(settings.model), stack_of(settings).fsdp)
    out = []
    for end in ("first", "last"):
        (c,) = g.pick(counts[end])
        states, quantized = _stage_states(per, g.plan, end, c)[:2]
        out.append(g.expand(states.sum(*STATE_TERMS) + quantized if copies else states.sum(*STATE_TERMS)))
    return tuple(out)


def activations_floor(settings: Settings, plan, placed, recompute, layers) -> np.ndarray:
    """A lower bound of memory_total under each of several MoE dispatchers (fit's dispatcher search: search.
    _other_dispatchers), (len(recompute), plans): on the first and on the last stage, states_floor's model states
    plus the quantized weight copies (_stage_states' numbers, which read no dispatcher: STATE_FIELDS) plus the
    stage's layers' activations (_held_activations: the layers x micro-batches of each kind the stage holds, a
    share r of its layers re-run under full recompute, their inputs kept); the larger of the two, 0 where the plan
    runs DualPipe (as states_floor). layers: (stored, layer_input) per layer kind, (len(recompute), plans) arrays,
    each at most the figure layer_memory gives the plan under every dispatcher bounded (the caller's least over
    them): the activations are sums of non-negative counts and shares times them, so at most each dispatcher's
    ((1 - r) x a + r x b is at least (1 - r) x min a + r x min b). A bound on the same footing as states_floor (a
    stage's total adds to these terms others that hold bytes: the outputs, the embedding's norm, the MTP modules,
    the dispatchers' attributes, buffers, pools, slack, the reserve), so checked by its caller on every plan it
    prices, as fitting_memory checks states_floor. plan: a KeyedPlan of STATE_FIELDS and `schedule`; placed:
    placement_groups of the same plans; recompute: the recompute codes, a column ((R, 1)) against the plans."""
    (_, held, n), index, size = placed
    if index is not None:
        held, n = gather((_ends_only(held), n), index, size)
    stored, layer_input = layers
    r_plan = KeyedPlan({"recompute": recompute})
    floor = np.float64(0.0)
    for (end, i), states in zip((("first", 0), ("last", 2)), _end_states(settings, plan, placed, copies=True)):
        r = recomputed_layers(settings, r_plan, n[i]) / np.maximum(n[i], 1)
        act = sum((held[end][k] * ((1.0 - r) * stored[k] + r * layer_input[k]) for k in range(len(stored))),
                  np.float64(0.0))
        floor = np.maximum(floor, states + act)
    return np.where(dualpipe_pairs(plan), 0.0, floor)


class _StatesOnly:
    """What _stage_states reads of _PerLayer (the settings, the parameter counts, the stack's
    FSDP; copy_back 0: the floor reads the states alone, not the offload copy-back's partition [ocb]), for
    states_floor without the activations _PerLayer prices."""

    def __init__(self, settings: Settings, pc: ParamCounts, fsdp):
        self.settings, self.pc, self.fsdp = settings, pc, fsdp
        self.copy_back = 0.0


def _where(mask, a, b):
    """np.where of two stages: arrays, or Terms key by key (every term of one stage)."""
    if isinstance(a, Terms):
        return Terms(**{k: np.where(mask, a[k], b[k]) for k in a})
    return np.where(mask, a, b)


def _choose_stages(first, last, mids, dual, has_mid):
    """(first, last, middle) from _stages (each stage's Terms, or their totals alike): DualPipe's
    ranks where it runs, the heaviest of the middle candidates, the first stage's where there
    is no middle one."""
    def total(x):
        return x.total if isinstance(x, Terms) else x

    if dual is not None:
        dual, ends, mids_d = dual
        first, last = _where(dual, ends, first), _where(dual, ends, last)
        mids = [_where(dual, d, m_) for d, m_ in zip(mids_d, mids)]
    if not mids:  # no plan has a middle stage (_stages): the first stage's, as the np.where below gives
        return first, last, first
    middle = mids[0]
    for cand in mids[1:]:
        middle = _where(total(cand) > total(middle), cand, middle)
    return first, last, _where(has_mid, middle, first)


# the plan fields (and properties) the pipeline placement reads: the layers of each kind on the
# stages and the micro-batches each holds in flight (stage_kind_counts, stage_inflight_kinds)
PIPELINE_FIELDS = ("pp", "vpp", "split_emb", "split_loss", "split_front", "split_first", "split_last", "microbatches",
                   "schedule", "mbg")


def _placement(model: ModelSpec, layers: LayerList, plan) -> tuple:
    """(stage_kind_counts, stage_inflight_kinds, (first, middle, last) stage_layers) of a plan."""
    return (stage_kind_counts(model, plan), stage_inflight_kinds(layers, plan),
            plan_stage_layers(model.num_layers, plan))


def placement_groups(settings: Settings, plan) -> tuple:
    """(_placement once per distinct tuple of PIPELINE_FIELDS of the plans (terms.Groups), each
    plan's group, groups): what _stages prices on every block of the search's plans, priced once
    for all of them (search.memory_totals: memory_total's `placed`, each block gathers its share)."""
    g = Groups(plan, PIPELINE_FIELDS)
    r = _placement(settings.model, count_params(settings.model).layers, g.plan)
    return (r, g.index, g.size) if g.active else (r, None, None)


def _stages(settings: Settings, plan: PlanArrays, layers=None, placed=None, dummies=None, states=None):
    """(first, last, [middle candidates], DualPipe (mask, ends, [middles]) or None, has a middle
    stage): each stage's Terms (_stage_terms) before stage_memory_terms chooses among them. The
    middle candidates are empty where no plan has pp > 2 (_choose_stages: the first stage's).
    layers, placed, dummies: the plan's layer_memory, placement_groups and dummy shapes, as
    memory_total takes them."""
    model = settings.model
    pc = count_params(model)
    # once per distinct pipeline split, micro-batch count and schedule (terms.Groups)
    if placed is None:
        g = Groups(plan, PIPELINE_FIELDS)
        (counts, held, n), expand = _placement(model, pc.layers, g.plan), g.expand
    else:
        (counts, held, n), index, size = placed
        expand = (lambda r: r) if index is None else (lambda r: gather(r, index, size))  # noqa: E731
    has_mid = plan.pp > 2
    # a middle stage only with pp > 2: where no plan has one, its candidates are not priced
    # (_choose_stages takes the first stage's terms there, as its np.where on has_mid would),
    # and their placement is not expanded onto the candidates
    priced = range(len(counts["mid"])) if np.any(has_mid) else ()
    if not priced:
        counts, held = _ends_only(counts), {**_ends_only(held), "outputs": _ends_only(held["outputs"])}
    counts, held, n = expand((counts, held, n))
    n = dict(zip(STAGES, n))
    per = _PerLayer(settings, plan, pc, layers, dummies, states)
    outs = held["outputs"]
    first = _stage_terms(per, "first", counts["first"], held["first"], n["first"], held["loss"], outputs=outs["first"],
                         embedding=held["embedding"])
    last = _stage_terms(per, "last", counts["last"], held["last"], n["last"], held["loss"], outputs=outs["last"])
    mids = [_stage_terms(per, "mid", counts["mid"][c], held["mid"][c], n["mid"], held["loss"], outputs=outs["mid"][c])
            for c in priced]
    dual = dualpipe_pairs(plan)
    dual_stages = None
    if dual.any():  # a shortcut only: where no plan runs DualPipe both sides of the np.where agree
        # DualPipe [9]: rank r runs stage r of one direction and stage p-1-r of the other, 2x
        # parameters; the end ranks hold the first and the last stage (embedding, output head
        # and MTP on one rank: DeepSeek-V3 sec. 3.2.3), a middle rank its stage twice (stage
        # p-1-r of a middle stage has the same composition, assumed)
        ends = _stage_terms(per, "first", counts["first"], held["first"], n["first"], held["loss"],
                            twin=(counts["last"], "last", held["last"], n["last"]), embedding=held["embedding"])
        mids_d = [_stage_terms(per, "mid", counts["mid"][c], held["mid"][c], n["mid"], held["loss"],
                               twin=(counts["mid"][c], "mid", held["mid"][c], n["mid"])) for c in priced]
        dual_stages = (dual, ends, mids_d)
    return first, last, mids, dual_stages, has_mid


def _mtp_non_unit(settings: Settings, pc: ParamCounts, plan) -> np.ndarray:
    """Parameters a GPU of the MTP stage holds outside Megatron-FSDP's units [me]: each multi-token-prediction module's
    projection eh_proj (2 h x h / tp) and its three norms (enorm, hnorm, final_layernorm: params.mtp_params), its layer
    being a unit of its own; with pp > 1 on a stack whose MTP stage builds its own word embedding (stack
    memory.mtp_embedding_copy) that copy (V h / tp) and any learned position table. 0 without MTP."""
    m = settings.model
    tp = plan.tp.astype(np.float64)
    if not m.mtp_layers:
        return 0.0 * tp
    own = pc.layers.mtp_built * (2.0 * m.hidden_size * m.hidden_size / tp + 3.0 * norm_params(m))  # once where shared
    copy = (pc.embedding / tp + pc.position) if stack_of(settings).memory.mtp_embedding_copy else 0.0 * tp
    return own + np.where(plan.pp > 1, copy, 0.0)


def _ends_only(placed: dict) -> dict:
    """A placement dict (_placement's counts, held or outputs) without its middle stage entries."""
    return {k: v for k, v in placed.items() if k not in ("mid", "mid_stage")}


# the plan fields a layer's activations and recompute buffer read (layer_memory, context)
# f8r: fp8 attention [fa8]; fge: the experts' token-group padding (layers/moe.py [14])
# disp: the MoE dispatcher of fit's dispatcher search, per plan (the routing saves: moe_routing_saves; a constant
# column, every plan the Settings' own, costs Groups nothing)
LAYER_FIELDS = ("tp", "cp", "ep", "etp", "mbs", "seq", "sp", "precision", "recompute", "compile", "f8r", "fge", "disp")


def _grouped_layer_memory(settings: Settings, plan: PlanArrays, layers: LayerList):
    """layer_memory once per distinct tuple of the fields a layer's activations read
    (LAYER_FIELDS, terms.Groups)."""
    g = Groups(plan, LAYER_FIELDS)
    return g.expand(layer_memory(settings, g.plan, plan_context(settings, g.plan), layers))


class _PerLayer:
    """What every stage's memory reads: the per-kind activations and buffers (layer_memory),
    the output layer's and the multi-token-prediction modules' activations, the FSDP buffers,
    the reserve and the allocator's slack."""

    def __init__(self, settings: Settings, plan: PlanArrays, pc: ParamCounts, layers=None, dummies=None, states=None):
        model, stack = settings.model, stack_of(settings)
        self.settings, self.plan, self.pc = settings, plan, pc
        self.state_code = states  # (memory_total's `states`: the plans' STATE_FIELDS groups, numbered by the caller)
        ctx = plan_context(settings, plan)
        # (layers: the plan's layer_memory, where the caller priced it: memory_total)
        self.stored, self.buffers, self.layer_input = (_grouped_layer_memory(settings, plan, pc.layers)
                                                       if layers is None else layers)
        kb = kernel_bytes(stack, plan.compile, settings)
        # one linear's bf16 weight gradient in each layer's backward without gradient-accumulation fusion [uf]
        wgrad = unfused_wgrad_transient(settings, plan, ctx, kb)
        self.buffers = [b + wgrad(kind) for b, kind in zip(self.buffers, pc.layers.kinds)]
        # output layer: the final norm's input 2h (/t under SP), its output saved by the output
        # linear (all-gathered under SP where the stack's linears save their gathered input [tt1])
        # and the logits + fp32 softmax [5]; under TP the stack's vocab-parallel loss [tt2]
        # (the stack's fused cross-entropy holds one more fp32 copy at its backward: stack_db
        # memory.fused_loss_extra_per_logit, Megatron's torch.compile'd calculate_gradients)
        fused = (stack.memory.fused_loss_extra_per_logit or 0.0) if settings.cross_entropy_fusion else 0.0
        loss_b = np.where(ctx.tp > 1, kb["loss_parallel_saved_per_logit"], kb["loss_saved_per_logit"])
        # the part of it one micro-batch's loss backward creates and frees (its gradients, a cast) [lt]
        loss_t = np.where(ctx.tp > 1, kb["loss_parallel_transient_per_logit"], kb["loss_transient_per_logit"])
        if te_loss(settings):  # a job setting: TE's kernel keeps the logits alone and writes their gradient in place [te]
            fused, loss_b, loss_t = 0.0, stack.memory.te_loss_per_logit[0], 0.0
        if settings.loss_logit_chunks is not None:  # torchtitan PR #996's chunked cross-entropy, a job setting [ck]
            fused, (loss_b, loss_t) = 0.0, logit_chunk_loss_bytes(settings.loss_logit_chunks, ctx.tp, plan.pp,
                                                                  stack.memory.pipeline_keeps_logits)
        norm_out = (ACT_BYTES * model.hidden_size / (1.0 if stack.memory.tp_saves_gathered_input else ctx.rep_div)
                    if stack.memory.output_saves_norm_out else 0.0)
        vd = self.vdiv = vocab_tp_divisor(settings, ctx.tp)  # the largest TP rank's vocabulary rows [vs]
        self.out_act = ctx.T * (ACT_BYTES * model.hidden_size / ctx.rep_div + norm_out
                                + (loss_b + fused) * model.vocab_size / vd)
        # of out_act, what only one micro-batch's loss backward holds at a time [lt]: the stack's transient and the fused
        # loss's compiled buffer (the rest, out_act - out_transient, is held once per micro-batch whose loss is in flight)
        self.out_transient = ctx.T * (loss_t + fused) * model.vocab_size / vd
        self.loss_apart = bool(stack.memory.loss_peak_apart)
        # what a layer's backward holds beyond the loss's peak on the stage holding the loss [lg1]:
        # the bf16 logits the training loop still references, the output layer's unsharded weight
        # gradient waiting for its unit's reduce-scatter, FSDP1's gathered units and unsharded gradient
        fs = stack.fsdp
        layer_unit = unit_params(pc, plan, layers_only=True)
        # a unit's unsharded gradient: the reduce dtype, the job's gradient bytes where the plan's mode keeps its own
        # main gradients in them (Megatron-FSDP) [mg]; the same for its reduce-scatter queue's buckets [rs]
        self.unit_grad_bytes = main_grad_bytes(stack, plan, settings.bpp.gradients, fs.grad_reduce_bytes)
        self.queue_grad_bytes = main_grad_bytes(stack, plan, settings.bpp.gradients, fs.zero2_reduce_queue_grad_bytes)
        # the gathered weights' bytes (gathered_bytes: param_gather_bytes a parameter, the converted Linears' 1 B
        # under FSDP's fp8 all-gather [fa]) and the largest layer unit's so gathered
        self.gathered = gathered_bytes(settings, plan)
        self.conv = converted_linear_elems(settings, pc, plan)  # per kind, the Linears gathered in fp8 [fa]
        self.layer_gathered = unit_params(pc, plan, True, *self.gathered, conv=self.conv)
        out_params = (pc.output or pc.embedding) / vd
        # (FSDP2's root unit before torchtitan #1094, a job setting: its reduce-scatter waits for the backward's end [tt10])
        held_out = np.where(plan.pp == 1, float(settings.fsdp_root_unit), 0.0) if not fs.output_grad_held else 1.0
        self.after_loss = (ctx.T * ACT_BYTES * model.vocab_size / vd * float(stack.memory.loop_holds_logits)
                           + np.where(plan.sharding >= FSDP, fs.param_gather_bytes * out_params * held_out
                                      + fs.backward_gathered_units * self.layer_gathered
                                      + fs.backward_grad_units * self.unit_grad_bytes * layer_unit, 0.0))
        self.head_grads = 0.0
        if settings.chunked_loss:
            self.out_act, self.head_grads = _chunked_loss(settings, plan, ctx, stack.memory.chunked_loss_chunks)
            self.out_transient = 0.0  # (the wrapper's per micro-batch figure, all of it kept per micro-batch [tt6])
        self._loss_pipeline_parts(settings, plan, pc, stack, ctx, kb)  # pp_logits [tt4], loss_pool [5] ([lp])
        # ... and every other stage's output, the activation [T, h] (/t under SP) sent to the next
        # stage, from its forward to its backward [tt4]; Megatron frees the data after the send
        self.stage_output = (np.where(plan.pp > 1, ctx.T * ACT_BYTES * model.hidden_size / ctx.rep_div, 0.0)
                             if stack.memory.pipeline_keeps_stage_outputs else 0.0)
        # the word embedding's norm [en]: its saved bf16 input and fp32 row statistics, a micro-batch on the first stage
        self.embedding_norm = (ctx.T * (ACT_BYTES * model.hidden_size + EMBEDDING_NORM_STATS_BYTES) / ctx.rep_div
                               if model.embedding_norm else 0.0)
        self._mtp_parts(settings, plan, pc, stack, ctx, norm_out)
        ll = pc.layers
        # what each MoE layer's token dispatcher holds until the layer's next forward, and the MTP modules' [dh]
        self.dispatcher_held, self.mtp_held = moe_dispatcher_held(settings, ctx, ll)
        # Megatron's deferred output-layer weight gradients [10]: at the last micro-batch's
        # backward (the stage's peak) the first min(L, m - 1) output gradients (bf16, T x V/t)
        # and min(L, m) inputs (2 B x T x h, /t under SP) are held, L = the limit (0: all m)
        self.deferred_wgrad = 0.0
        if settings.defer_embedding_wgrad is not None:
            m = plan.microbatches.astype(np.float64)
            lim = float(settings.defer_embedding_wgrad)
            grads, inputs = (m - 1.0, m) if lim == 0 else (np.minimum(lim, m - 1.0), np.minimum(lim, m))
            self.deferred_wgrad = np.where(plan.pp > 1, ctx.T * ACT_BYTES * (grads * model.vocab_size / ctx.tp
                                                                             + inputs * model.hidden_size / ctx.rep_div), 0.0)
        self.out_wgrad = output_wgrad_moment(settings, plan, ctx, kb)
        self.emb_wgrad = embedding_wgrad_moment(settings, plan, ctx)
        # the embedding's weight-gradient kernel's fp32 partial sums and incoming gradient, Megatron-FSDP v2's root
        # end [v2] ([eg]: 0 under FSDP there)
        self.v2_emb_wgrad = ctx.T * (EMBEDDING_PARTIAL_BYTES + ACT_BYTES) * float(model.hidden_size)
        # (dummies: the plan's _dummy_wgrad_shapes where the caller priced them: memory_total)
        self.dummy_shapes = _dummy_wgrad_shapes(settings, plan, pc) if dummies is None else dummies
        self._fsdp_parts(settings, plan, pc, stack)
        self._buffers(settings, plan, pc, stack, ctx)
        self._step_parts(settings, plan, pc, stack, ctx)
        # a run calibration's measured slack replaces the stack's (profile.RunKnobs)
        kn = settings.knobs
        self.slack = stack.memory.allocator_slack if kn.allocator_slack is None else kn.allocator_slack
        self.fsdp = stack.fsdp
        self.cp_merge = self._cp_merge(settings, plan, pc, stack, ctx)
        # DeepSpeed-MoE's gating forward transient per layer kind [dg] (None: a stack without dense gating)
        gating = dense_gating(settings)
        self.gating_fwd = None if gating is None else [gating(k, ctx)[1] for k in pc.layers.kinds]

    def _loss_pipeline_parts(self, settings: Settings, plan: PlanArrays, pc: ParamCounts, stack, ctx: Ctx, kb) -> None:
        """The bf16 logits PyTorch's pipelining keeps on the last stage (pp_logits, a held micro-batch's) and the loss's
        freed blocks the allocator holds (loss_pool) [lp]."""
        v = settings.model.vocab_size / self.vdiv
        keeps = stack.memory.pipeline_keeps_logits  # a stack setting
        # PyTorch pipelining keeps the last stage's output, the bf16 logits, from its forward to its stage backward [tt4];
        # the part of them the loss saves by reference (kernels loss_saved_input_per_logit, in out_act) counted once [lp]
        # (PR #996's chunked loss, a job setting, is eager whatever the compile flag: it saves no logits by reference [ck])
        by_ref = 0.0 if settings.loss_logit_chunks is not None else kb["loss_saved_input_per_logit"]
        self.pp_logits = (np.where(plan.pp > 1, ctx.T * np.maximum(ACT_BYTES - by_ref, 0.0) * v, 0.0)
                          if keeps and not settings.chunked_loss else 0.0)
        # the loss's freed blocks its backward peak cannot reuse (stack kernels) [5]: the loop's 1 + D logits blocks
        # (the main and each MTP depth's); none under PP where the runtime keeps the logits to the stage backward [lp]
        self.loss_pool = (ctx.T * kb["loss_pool_per_logit"] * v * (1.0 + float(pc.layers.mtp))
                          * (np.where(plan.pp > 1, 0.0, 1.0) if keeps else 1.0))
        if settings.loss_logit_chunks is not None:  # PR #996's chunks: the freed blocks serve its requests [ck]
            self.loss_pool = 0.0

    def _mtp_parts(self, settings: Settings, plan: PlanArrays, pc: ParamCounts, stack, ctx: Ctx, norm_out) -> None:
        """The multi-token-prediction modules' activations on the stage holding the loss (mtp, one micro-batch's) and
        their recompute buffer (mtp_buffer); mtp_out_act: one module's output layer and loss [ml]."""
        model = settings.model
        # each MTP module's output layer and loss at the main loss's backward [ml]: the same hidden terms, and what its
        # loss saved (stack memory.mtp_loss_kept_per_logit), its logits dropped; where the stack does not say, with TE's
        # loss (it saves the logits themselves, as the main loss's te figure) or a chunked loss, what the main loss saves
        # (out_act less its one-at-a-time transient, counted once at the main loss [lt])
        kept = stack.memory.mtp_loss_kept_per_logit
        self.mtp_out_act = (self.out_act - self.out_transient if kept is None or te_loss(settings) or settings.chunked_loss
                            else ctx.T * (ACT_BYTES * model.hidden_size / ctx.rep_div + norm_out
                                          + kept * model.vocab_size / self.vdiv))
        # multi-token prediction (layers/__init__.py): per module one layer of its kind, the
        # projection's input (the two normed halves, 2 x 2h) and its own output layer and loss [ml]; under full
        # recompute (the share mtp_recomputed) the layer's tensors are re-run in the module's backward, where they
        # and the halves are the recompute buffer, and the checkpoint keeps the module's two inputs (2 x 2h) [dh]
        ll = pc.layers
        halves = ctx.T * 2.0 * ACT_BYTES * model.hidden_size / ctx.rep_div
        r_mtp = mtp_recomputed(settings, plan)
        mtp_kept = mtp_stored(settings, plan, pc, self.stored) if ll.mtp else 0.0
        self.mtp = (float(ll.mtp) * ((1.0 - r_mtp) * mtp_kept + halves + self.mtp_out_act) if ll.mtp else 0.0)
        self.mtp_buffer = r_mtp * (mtp_kept + halves) if ll.mtp else 0.0

    def _step_parts(self, settings: Settings, plan: PlanArrays, pc: ParamCounts, stack, ctx: Ctx) -> None:
        """What the optimizer step holds beyond the states: its temporaries, the sharding mode's gradient copies and
        the optimizer stepped in the backward."""
        # the optimizer step's temporaries, in local-optimizer-parameter tensors of the state dtype [opt]
        impl = settings.optimizer_implementation
        self.opt_temporaries = float(stack.memory.optimizer_step_temporaries.get(impl, 0.0)) if impl else 0.0
        # Muon's Newton-Schulz temporaries [mu]: per layer kind, and the learned position table's and the MTP modules'
        self.muon_temp = None
        if settings.optimizer == "muon":  # a job setting
            m, kinds = settings.model, pc.layers.kinds
            # the job's TP mode (step.py [28]): under blockwise each TP rank's own shard, no gather (muon_local);
            # under distributed the shard oriented on its unpartitioned side, no gather (muon_distributed)
            block = settings.muon_tp_mode == "blockwise"  # a job setting
            dist = settings.muon_tp_mode == "distributed"  # a job setting
            fp32 = settings.muon_fp32_matmul_prec != "medium"  # a job setting: X left fp32
            etp = etp_of(plan)

            def temps(mats):
                if dist:
                    return muon_step_temporaries(muon_distributed(mats, plan.tp, etp), gathered=False, oriented=True,
                                                 fp32=fp32)
                return muon_step_temporaries(muon_local(mats, plan.tp, etp, block), gathered=not block, fp32=fp32)
            split = settings.muon_split_qkv  # a job setting: linear_qkv split or whole
            self.muon_temp = [temps(k.muon_matrices(split, plan.tp)) for k in kinds]  # (at tp not dividing k: whole)
            self.muon_temp_position = (temps(((m.max_seq_len, m.hidden_size, 1, "rep"),))
                                       if m.position_embedding == "learned" else 0.0)
            self.muon_temp_mtp = (temps(((m.hidden_size, 2 * m.hidden_size, 1, "split"),)
                                        + sum((kinds[k].muon_matrices(split, plan.tp) for k in pc.layers.mtp_kinds), ()))
                                  if m.mtp_layers else 0.0)
        # the sharding mode's optimizer step copies of the gradients (stack_db runs.sharding step_grads) [sg]
        self.step_grads = mode_step_grads(stack, plan)
        # a copy is made only where some mode of the stack flattens the partition, keeps only it, takes the fp64 norm,
        # or converts gradients narrower than fp32 (stack data and the job's gradient bytes: Megatron's modes state only
        # the fp32 copy, the tensor itself on its default fp32 grad buffer); elsewhere every element of
        # _step_grad_copies is +0.0 (g - g + max(x * 0.0, 0.0 * y), finite figures), which it then returns unpriced
        gb = settings.bpp.gradients
        self.step_copies = self.step_grads is not None and any(
            m.step_grads is not None and (m.step_grads.flat or m.step_grads.partition_only or m.step_grads.norm_fp64
                                          or (m.step_grads.fp32 and gb < STEP_FP32_GRAD_BYTES
                                              and not decoupled_grad(settings, m.step_grads.fp32_decoupled)))
            for m in stack.runs.sharding)
        # CPU offload [off] (job settings): the optimizer's step on the host; DeepSpeed's GPU staging buffer of the
        # largest parameter (planner/offload.py)
        self.offload = offload.switches(settings)
        self.staging = (self.offload[0] > 0 and stack.cpu_offload is not None
                        and stack.cpu_offload.transfers == "zero_offload")
        # DeepSpeed ZeRO-1/2 offload's updated fp32 partition copied up after the CPU step [ocb]: bytes an element of the
        # largest parameter group's partition (0 without offload or on a stack whose offload makes no such copy)
        self.copy_back = offload.copy_back_gpu_bytes(settings, stack)
        self.largest_params = _largest_params(pc, plan, ctx) if (self.step_copies or self.staging) else None
        # DeepSpeed ZeRO-1/2's IPG buffers and the gradient reduction's partition buffers [zb]
        # (none where no mode of the stack states either: every term of _zero12_terms is then 0, stack data)
        reduces = stack.runs is not None and any(m.step_grads is not None and (m.step_grads.ipg_buffer or m.step_grads.reduction)
                                                 for m in stack.runs.sharding)
        self.zero12 = zero12_parts(settings, plan, pc, self.step_grads) if self.step_grads is not None and reduces else None
        # DeepSpeed's BF16_Optimizer's all-reduce of its accumulation buffers after the backward [bo]: the bucket (elements,
        # 0 where the plan's mode states none), the buffers' and the communication dtype's bytes (stack data)
        self.reduce_bucket = allreduce_bucket_params(stack, plan)
        self.reduce_copying = stack.runs is not None and any(m.allreduce_bucket_params > 0 for m in stack.runs.sharding)
        self.reduce_bytes = (grad_accum_bytes(stack, plan), float(stack.fsdp.grad_reduce_bytes))
        # the optimizer stepped in the backward [es]: under FSDP the reduce-scatter pool holds one unit's
        # sharded gradients (the largest unit's), and a step's temporaries are one parameter's (the largest,
        # the embedding's or the output layer's shard), in the state dtype (bpp.optimizer / 2 per moment)
        self.early_step = bool(settings.early_step_in_backward)
        if self.early_step:
            d = (plan.shard * plan.cp).astype(np.float64)
            tp = plan.tp.astype(np.float64)
            self.early_pool = stack.fsdp.grad_reduce_bytes * unit_params(pc, plan) / d
            self.early_temp = settings.bpp.optimizer / 2.0 * max(pc.embedding, pc.output or 0) / tp / d

    @staticmethod
    def _cp_merge(settings: Settings, plan: PlanArrays, pc: ParamCounts, stack, ctx: Ctx):
        """TE's P2P ring attention's forward merge under CP, per layer kind [cp3] (a stack setting; None
        where the stack has none). a2a+p2p: the ring over the p2p ranks, cp / the all-to-all group's
        (planner/cp_comm_type.py); under fp8 attention (a job setting) the recipe's fp8 ring figures."""
        if not stack.memory.cp_forward_merge:
            return None
        a2a, ring_cp = ring_ranks(stack.context_parallel, ctx.cp)
        ring_ctx = ctx if a2a == 1.0 else dataclasses.replace(ctx, cp=ring_cp)
        f8 = fp8_recipe(stack, plan.f8r) if settings.fp8_attention else None
        return [cp_forward_merge_bytes(k, ring_ctx, f8) for k in pc.layers.kinds]

    def _buffers(self, settings: Settings, plan: PlanArrays, pc: ParamCounts, stack, ctx: Ctx) -> None:
        """The buffers every stage holds beside its tensors: the reserve, the GEMM workspaces, TP
        overlap's buffers, the mpu buffer and the rotary tables."""
        self.reserve = np.full(np.shape(ctx.tp), settings.reserve_bytes, dtype=np.float64)
        # the GEMM libraries' workspaces, allocated through the caching allocator at the first
        # GEMM and kept: PyTorch's cuBLAS one per thread that runs GEMMs, Transformer Engine's
        model, hw, mem = settings.model, settings.hardware, stack.memory
        te = (hw.te_workspace_MiB or 0.0) if mem.te_workspace and settings.transformer_impl != "local" else 0.0
        # TE's grouped GEMM of the MoE experts: one more workspace per compute stream [12]
        te = te * (1.0 + (mem.te_grouped_gemm_streams if settings.moe_grouped_gemm and model.moe is not None else 0.0))
        # PyTorch's: the run's CUBLAS_WORKSPACE_CONFIG where it sets one, else the GPU's default [ws]
        torch_ws = (cublas_workspace_bytes(settings.cublas_workspace_config)
                    if settings.cublas_workspace_config else (hw.torch_cublas_workspace_MiB or 0.0) * 2.0**20)
        ws = mem.blas_handles * torch_ws + te * 2.0**20
        # TP overlap's buffers outside the allocator and its GEMMs' own cuBLAS workspaces [ub]
        self.tp_overlap, ub_workspaces = tp_overlap_bytes(settings, plan)
        # the MoE dispatcher's communication buffers, outside the allocator [ep]
        self.ep_buffers = dispatcher_buffer_bytes(settings, plan, ctx)
        # NCCL's NVLS buffers of the GPU's communicators, outside the allocator [nv]
        self.nvls = nvls_buffer_bytes(settings, plan)
        self.workspaces = np.full(np.shape(ctx.tp), ws, dtype=np.float64) + ub_workspaces
        self.mpu = _mpu_buffer(settings, ctx)
        # the rotary embedding's precomputed tables [tt9]: 8 B (complex64) x seq x rotary dim / 2 each
        self.rope_mode = settings.rope_cache or stack.memory.rope_cache
        seq = plan.seq.astype(np.float64)
        # (each priced only for the mode that reads it: _stage_terms)
        self.rope_layer = ([ROPE_CACHE_BYTES / 2.0 * seq * rotary_dim(k.mixer) for k in pc.layers.kinds]
                           if self.rope_mode == "layer" else None)
        self.rope_model = (ROPE_CACHE_BYTES / 2.0 * seq * max(rotary_dim(k.mixer) for k in pc.layers.kinds)
                           if self.rope_mode == "model" else None)
        # Megatron's lru_cache'd rotary tables [mr]: fp32 (4 B) x seq / cp x the rotated dim, one per model chunk
        # (GPTModel's), or with MLA one per MLA layer (each its own RotaryEmbedding), at most MEGATRON_ROPE_LRU of them
        cp = plan.cp.astype(np.float64)
        self.rope_cp_mla = [float(bool(getattr(k.mixer, "qk_rope_head_dim", None))) for k in pc.layers.kinds]
        self.rope_cp_table = (MEGATRON_ROPE_BYTES * seq / cp * max(rotary_dim(k.mixer) for k in pc.layers.kinds)
                              if self.rope_mode == "model_cp" else None)

    def _fsdp_parts(self, settings: Settings, plan: PlanArrays, pc: ParamCounts, stack) -> None:
        """FSDP's buffers and pools of every stage: fsdp_units, gather_pool, pp_unsharded, pp_grads, ends."""
        fs = stack.fsdp
        fsdp_on = plan.sharding >= FSDP
        pgb, cut, out_cut = self.gathered  # (__init__: gathered_bytes [fa])
        unit = unit_params(pc, plan, vdiv=self.vdiv)
        # the gathered layer units at the peak (FSDP1: the current and the prefetched; DeepSpeed ZeRO-3: [z3] below)
        # and the unsharded gradients of one, in the reduce dtype [4]; FSDP2's end units kept
        # unsharded from their forward to their backward (bf16) [7]
        tp = plan.tp.astype(np.float64)
        # (a mode that keeps every unit gathered, `held` below, counts them there)
        tr = sharding_traits(stack, plan)
        # regather_pp (resharding under torch.distributed.pipelining): each unit stays gathered after
        # its backward until its next forward reshards it, so at the end of a backward the stage's
        # units are all gathered, as `held` (with one chunk a rank _stage_terms takes off what that
        # backward's micro-batch frees, regather_w below [7]); its gradients accumulate unsharded
        # as keep_pp's
        keep_pp, held = tr["keep_pp"] | tr["regather_pp"], fsdp_on & (~tr["reshard"] | tr["regather_pp"])
        zero = np.zeros(np.shape(tp))
        # (the stage-independent parts of FSDP_TERMS, every plan's; _stage_fsdp adds the stage's)
        # the units gathered at the peak: the stack's gathered_units_at_peak of the largest unit, or, where the mode prefetches
        # to a capacity (fsdp.gather_prefetch_share), the current and prefetched layer units [pf] (or `pooled`: the double buffer [db])
        # Megatron-FSDP v2 (the job's mfsdp_v2 under a mode stating runs.sharding mfsdp_v2) [v2]
        self.v2 = mfsdp_v2(stack, plan, settings.mfsdp_v2) & fsdp_on
        # no plan of the batch runs v2 (the job's mfsdp_v2 off, its default): v2's figures are 0 and every np.where on
        # self.v2 takes its other branch, whose values are taken as they are, v2's not priced (_PerLayer._no_v2)
        self.any_v2 = bool(np.any(self.v2))
        current, prefetched, layer_unit, kept_on, self.pooled = _gathered_units(pc, plan, stack, settings.mfsdp_double_buffer,
                                                                                self.v2)
        self.fsdp_units = {
            "fsdp_gathered_units": np.where(fsdp_on, np.where(held, 0.0, current * unit + prefetched * layer_unit)
                                            * settings.bpp.weights, 0.0),
            "fsdp_unit_grads": np.where(fsdp_on, fs.gathered_grad_units_at_peak * self.unit_grad_bytes * unit, 0.0),
            "mfsdp_double_buffer": np.where(fsdp_on & ~held, self.pooled * layer_unit * settings.bpp.weights, 0.0),
            "zero3_working_set": zero, "zero3_unreduced_grads": zero, "zero3_bucket_copy": zero, "zero3_reuse_kept": zero,
            "zero3_tied_output": zero, "zero3_ipg_bucket": zero}
        self._v2_gathered(settings, plan, pc)  # Megatron-FSDP v2's, its experts a unit of their own under EP [v2]
        # DeepSpeed ZeRO-3 gathers per submodule: its working set, gradients and IPG buffer in place of layer units,
        # and its persistent parameters per layer (_stage_fsdp) [z3]
        self.zero3 = zero3_parts(settings, plan, pc, plan_context(settings, plan)) if settings.zero3 else None
        if self.zero3 is not None:
            z = self.zero3
            self.fsdp_units.update(fsdp_gathered_units=zero, fsdp_unit_grads=zero,
                                   zero3_working_set=np.where(fsdp_on, z["gathered"], 0.0),
                                   zero3_unreduced_grads=np.where(fsdp_on, z["unreduced_grads"], 0.0),
                                   zero3_bucket_copy=np.where(fsdp_on, z["bucket_copy"], 0.0),
                                   zero3_reuse_kept=np.where(fsdp_on, z["reuse_kept"], 0.0),
                                   zero3_tied_output=np.where(fsdp_on, z["tied_output"], 0.0),
                                   zero3_ipg_bucket=np.where(fsdp_on, z["ipg_bucket"], 0.0))
        if settings.fsdp_root_unit:  # the last block, not resharded after its forward, gathered at the peak [tt10]
            last = fsdp_on & ~held & reshard_by_default(stack, plan) & (plan.pp == 1)
            self.fsdp_units["fsdp_gathered_units"] = self.fsdp_units["fsdp_gathered_units"] + np.where(
                last, self.layer_gathered, 0.0)
        # FSDP2's flat all-gather buffers, each kept in the all-gather stream's pool until the
        # next unit's copy-out [7]: the largest unit's beside the largest layer's (the embedding
        # and the first block at the start of the forward), then layers'
        largest = unit_params(pc, plan, False, pgb, cut, out_cut, conv=self.conv, vdiv=self.vdiv)
        if settings.fsdp_root_unit:  # without PP one root unit holds the embedding and the output layer [tt10]
            root_unit = (pgb * pc.embedding + (pgb - out_cut) * (pc.output or 0.0)) / self.vdiv
            largest = np.where(plan.pp == 1, np.maximum(largest, root_unit), largest)
        pool_units = np.where(fs.allgather_pool_units > 0, largest
                              + max(fs.allgather_pool_units - 1.0, 0.0) * self.layer_gathered, 0.0)
        self.gather_pool = np.where(fsdp_on, pool_units, 0.0)
        # a mode that keeps the weights unsharded from the forward to the backward holds every
        # unit of the stage gathered at the backward's start (torchtitan fsdp_reshard_after_forward
        # "never"); FSDP2 under pipeline parallelism keeps every unit unsharded for the step and
        # accumulates unsharded gradients over the micro-batches [7]: bytes per stage parameter
        # (the stage's layer linears 1 B fewer each under the fp8 all-gather: held_cut x stage_linear_params [fa])
        self.pp_unsharded = np.where(held, fs.param_gather_bytes, 0.0)
        self.pp_grads = np.where(keep_pp, fs.pp_unsharded_grad_bytes, 0.0)
        self.held_cut = np.where(held, cut, 0.0)
        # a converted output layer (fp8_output_layer) is gathered at 1 B as the layers' Linears are [fa]: on the stage
        # holding it, its unsharded weight (V / t) h 1 B fewer (an untied output layer; a tied one is the embedding's)
        out_elems = (pc.output or 0.0) / self.vdiv
        self.held_out_cut = np.where(held, out_cut, 0.0) * out_elems
        # regather_pp with one model chunk a rank: the stage's units are all gathered only at the
        # end of a backward, when that micro-batch's activations are freed, and all resharded at
        # the end of a forward: the peak is the in-flight activations + max(weights - one
        # micro-batch's activations, 0) [7] (_stage_terms takes the smaller off); with virtual
        # stages other chunks stay gathered from their own last backward: the weights whole
        self.regather_w = np.where(tr["regather_pp"] & (plan.vpp == 1), fs.param_gather_bytes, 0.0)
        self.regather_cut = np.where(tr["regather_pp"] & (plan.vpp == 1), cut, 0.0)
        self.regather_out_cut = np.where(tr["regather_pp"] & (plan.vpp == 1), out_cut, 0.0) * out_elems
        # the end units kept unsharded (bf16) from their forward to their backward, on the
        # stage that holds them (already in the whole unsharded stage under PP) [7]
        single = plan.pp == 1
        ends = {"first": 0.0, "last": 0.0, "mid": 0.0}
        # the root unit before torchtitan #1094 [tt10] (a job setting): the embedding and an untied output layer
        root_ends = ("embedding",) + (("output",) if pc.output else ())
        for e in (root_ends if settings.fsdp_root_unit else fs.unsharded_ends):  # a converted output layer's at 1 B [fa]
            gathered = (pgb * pc.embedding / self.vdiv if e == "embedding"
                        else (pgb - out_cut) * (pc.output or pc.embedding) / self.vdiv)
            ends["first" if e == "embedding" else "last"] = ends["first" if e == "embedding" else "last"] + gathered
        both = ends["first"] + ends["last"]
        self.ends = {st: np.where(fsdp_on & ~held, np.where(single, both, v), 0.0) for st, v in ends.items()}
        self._non_unit_ends(settings, plan, pc, fsdp_on & ~held & kept_on, out_cut)  # [nu], [v2]
        self._reduce_parts(plan, pc, stack, tr)  # [rs]

    def _v2_gathered(self, settings: Settings, plan: PlanArrays, pc: ParamCounts) -> None:
        """Megatron-FSDP v2's gathered layer units (self.v2: its plans) [v2]: the largest layer with its experts and,
        where the chunk has a second layer, the unit prefetched beside it: the layer again, or under EP (each MoE
        layer's experts a unit of their own) the largest dense unit (_v2_units); self.v2_units kept for the others."""
        if not self.any_v2:  # (no plan runs v2: np.where(self.v2, ..., x) is x)
            self.v2_units = None
            return
        self.v2_units = _v2_units(pc, plan)
        layer, beside, _, _ = self.v2_units
        chunk = np.ceil(pc.num_layers / (plan.pp.astype(np.float64) * plan.vpp))
        self.fsdp_units["fsdp_gathered_units"] = np.where(
            self.v2, (layer + (np.minimum(2.0, chunk) - 1.0) * beside) * settings.bpp.weights,
            self.fsdp_units["fsdp_gathered_units"])

    def _non_unit_ends(self, settings: Settings, plan: PlanArrays, pc: ParamCounts, on, out_cut) -> None:
        """Megatron-FSDP's non-unit buckets (the modes that prefetch to a capacity, `on`): the embedding (and a learned
        position embedding, an embedding norm) on the first stage, the output layer (under PP a tied one's copy of the
        embedding) and the final norm on the last, gathered at their first forward and never released: the whole step,
        the optimizer step's moment included (self.kept_ends) [nu]; added to self.ends. v2's root unit is released at
        its post-forward and post-backward: gathered through the forward and the backward, not at the optimizer step's
        moment [v2]."""
        pgb, tp, single = self.gathered[0], plan.tp.astype(np.float64), plan.pp == 1
        first_nu = pgb * (pc.embedding / tp + pc.position + pc.embedding_norm)
        out_nu = np.where(single, float(pc.output or 0.0), float(pc.output or pc.embedding)) / tp
        last_nu = (pgb - out_cut) * out_nu + pgb * (pc.final_norm + _mtp_non_unit(settings, pc, plan))  # (MTP's [me])
        nu = {"first": np.where(single, first_nu + last_nu, first_nu), "last": np.where(single, first_nu + last_nu, last_nu),
              "mid": 0.0 * tp}
        nu_on = {st: np.where(on, v, 0.0) for st, v in nu.items()}
        self.ends = {st: self.ends[st] + nu_on[st] for st in self.ends}
        if not self.any_v2:  # (no plan runs v2: the np.wheres below give nu_on's values and zeros)
            self.kept_ends = {st: self._no_v2(v) for st, v in nu_on.items()}
            self.v2_root, self.v2_tied = self._no_v2(0.0 * tp), self._no_v2(0.0 * tp)
            return
        self.kept_ends = {st: np.where(self.v2, 0.0, v) for st, v in nu_on.items()}
        # v2's root unit (pp 1), parameters a GPU: what its gradients and its reduce-scatter input hold [v2]
        self.v2_root = np.where(self.v2 & single, pc.embedding / tp + pc.position + pc.embedding_norm + out_nu
                                + pc.final_norm + _mtp_non_unit(settings, pc, plan), 0.0)
        # a tied output layer's gradient waits in its AccumulateGrad's input buffer for the embedding's, the two added
        # there: at the embedding's kernel both are live, V h / t more than the root's parameters [v2]
        self.v2_tied = np.where(self.v2 & single & (not pc.output), pc.embedding / tp, 0.0)

    def _reduce_parts(self, plan: PlanArrays, pc: ParamCounts, stack, tr) -> None:
        """The layer unit whose gradients a zero2 mode reducing every micro-batch, or a mode running Megatron-FSDP's
        reduce-scatter queue, holds unsharded (zero2_unit), and the queue's mask, capacity and the unit gradient the
        peak already holds (queue_on, queue_cap, queue_held) [rs]."""
        fs = stack.fsdp
        tp = plan.tp.astype(np.float64)
        fsdp_on = plan.sharding >= FSDP
        # a zero2 mode reducing every micro-batch as FSDP2 does (a stack setting): the largest layer unit a GPU whose
        # gradients it reduce-scatters from an unsharded input [rs], 0 elsewhere
        z2 = (plan.sharding == ZERO2) & tr["reduce_mb"] if fs.zero2_unit_reduce else np.zeros(np.shape(tp), dtype=bool)
        # a mode whose layer units' gradients wait in the stack's reduce-scatter queue (Megatron-FSDP's
        # GradReducePipeline, stack runs.sharding reduce_queue_units) at the zero2, fsdp and hsdp levels [rs]
        units = reduce_queue_units(stack, plan)
        # (none under Megatron-FSDP v2: each unit's gradients are copied into one reduce-scatter input [v2])
        self.queue_on = (~np.isnan(units) & tr["reduce_mb"] & ((plan.sharding == ZERO2) | fsdp_on)
                         & (fs.zero2_reduce_queue_params is not None) & ~self.v2)
        layer, self.queue_cap = _layer_and_queue_capacity(pc, plan, stack)
        # (Megatron-FSDP v2: the largest unit it reduce-scatters, under EP the experts apart from their layer [v2])
        self.zero2_unit = (np.where(self.v2, self.v2_units[2], np.where(z2 | self.queue_on, layer, 0.0)) if self.any_v2
                           else self._no_v2(np.where(z2 | self.queue_on, layer, 0.0)))
        # under Megatron-FSDP's double buffer [db] the unit gradient the backward's peak holds beside the pools is the end
        # units' bucket (non-unit: outside the pools, allocated on demand), the embedding's or output layer's / t
        self.fsdp_units["fsdp_unit_grads"] = np.where(self.pooled > 0, np.where(
            fsdp_on, stack.fsdp.gathered_grad_units_at_peak * self.unit_grad_bytes
            * np.maximum(pc.embedding, pc.output or 0.0) / self.vdiv, 0.0), self.fsdp_units["fsdp_unit_grads"])
        # Megatron-FSDP's gradient double buffer (a job setting) [db]: the queue's buckets in two persistent buffers
        # of the largest layer unit, g B a parameter, at most two layer units' buckets at once (the one filling and
        # the one queued: _enforce_double_buffer_limit), so no excess of the queue beyond the peak
        self.queue_db = self.queue_on & bool(self.settings.mfsdp_double_buffer)
        chunk = np.ceil(pc.num_layers / (plan.pp.astype(np.float64) * plan.vpp))
        db_grads = np.where(self.queue_db & (layer > 0), np.minimum(chunk, 2.0) * self.queue_grad_bytes * layer, 0.0)
        self.fsdp_units["mfsdp_double_buffer"] = self.fsdp_units["mfsdp_double_buffer"] + db_grads
        self.db_pools = self.fsdp_units["mfsdp_double_buffer"]
        # Megatron-FSDP v2 [v2]: the backward's peak holds one unit's autograd gradients (the parameters' dtype, W B: no
        # gradient-accumulation fusion under v2) beside the root unit's output-layer gradient (the embedding's where
        # tied), held from the output layer's backward to the root's post-backward at the end; the unit: the layer with
        # its experts, or under EP the larger of its dense part and its experts (each freed at its own post-backward,
        # the experts' first: v2_units[2], the unit one reduce-scatter input holds)
        w = self.settings.bpp.weights
        out_held = float(pc.output or pc.embedding) / self.vdiv
        if not self.any_v2:  # (no plan runs v2: its figures 0, the unit gradients as above)
            self.fsdp_units["fsdp_unit_grads"] = self._no_v2(self.fsdp_units["fsdp_unit_grads"])
            self.v2_rs_pool, self.v2_cast = self._no_v2(0.0 * tp), self._no_v2(0.0 * tp)
            self.queue_held = np.where(self.queue_on, self.fsdp_units["fsdp_unit_grads"], 0.0)
            return
        self.fsdp_units["fsdp_unit_grads"] = np.where(self.v2, w * (self.v2_units[2] + out_held),
                                                      self.fsdp_units["fsdp_unit_grads"])
        # Megatron-FSDP v2's reduce-scatter stream pool [v2]: each unit's reduce-scatter input (W B a parameter) and,
        # from the second micro-batch or where the main gradients' dtype is not the parameters', its sharded output
        # (W u / the unit's DP group) are allocated on that stream and freed there, cached for it alone: the largest
        # unit's, the layer's (under EP its dense unit over dp, its experts over the expert DP dp tp / (etp ep)) or
        # the root's, reserved at every moment of the step
        _, d_unit, _, e_unit = self.v2_units
        dp = (plan.dp * plan.cp).astype(np.float64)
        edp = dp * tp / (etp_of(plan).astype(np.float64) * plan.ep)
        o = ((plan.microbatches > 1) | (self.settings.bpp.gradients != w)).astype(np.float64)
        self.v2_rs_pool = np.where(self.v2, w * np.maximum.reduce([d_unit * (1.0 + o / dp), e_unit * (1.0 + o / edp),
                                                                   self.v2_root * (1.0 + o / dp)]), 0.0)
        # Megatron-FSDP v2's model-weight cast after the optimizer step [v2]: each parameter group's 16-bit shard made
        # anew from its fp32 main weights before the old one is dropped (parameter_group.py l. 269-279), one group at a
        # time: the largest shard, W (the layer's, the experts' or the root's unit) / its DP group, where main weights
        # are kept (master > 0: main_params_dtype fp32)
        self.v2_cast = np.where(self.v2 & (self.settings.bpp.master > 0), w * np.maximum.reduce(
            [d_unit / dp, e_unit / edp, self.v2_root / dp]), 0.0)
        # what the backward's peak already holds of the unit's gradient: fsdp_unit_grads at the fsdp levels, none at
        # zero2 (its queue's buckets are this term's alone) [rs]
        self.queue_held = np.where(self.queue_on, self.fsdp_units["fsdp_unit_grads"], 0.0)

    def _no_v2(self, x) -> np.ndarray:
        """np.where(self.v2, ..., x) where no plan runs v2 (self.any_v2 False): x's values in the plans' shape (v2's
        figures, each of that shape, not priced)."""
        return np.array(np.broadcast_to(x, np.broadcast_shapes(np.shape(self.v2), np.shape(x))), dtype=np.float64)

    @functools.cached_property
    def state_groups(self) -> Groups:
        """The candidates by the fields a stage's model states read (STATE_FIELDS; the layer
        counts follow the pipeline split): _stage_terms prices them once per group (numbered by the caller where it
        has them: memory_total's `states`)."""
        return Groups(self.plan, STATE_FIELDS, code=self.state_code)


def zero3_modules(kind: LayerKind, ctx: Ctx) -> list:
    """A layer kind's ZeRO-3 submodules with parameters of their own, in forward order, in parameters per GPU [z3]:
    each GEMM row of its mixer and MLP one module of N x K x count weights (biases and norms: zero3_persistent)."""
    return [s.N * s.K * c for s, c in kind.mixer.gemms(ctx) + kind.mlp.gemms(ctx)]


def _zero3_prefetch(cands, budget):
    """The parameters DeepSpeed's prefetch loop gathers [z3]: candidates (parameters, weight: 0 where already gathered)
    in trace order, each taken while the count so far is below the budget."""
    got = 0.0
    for m, w in cands:
        got = got + np.where(got < budget, m * w, 0.0)
    return got


def zero3_flush_copies(mods: list, bucket: float, world):
    """The elements reduce_scatter_coalesced's torch.cat copies at each module's backward gradient hook [z3c], in
    forward order: the bucket the hook flushes (its gradients, each padded to world x ceil(n / world)), none where
    it flushes nothing or one gradient the DP world divides. Two passes of the layer's backward from an empty bucket:
    the second's are exact where a module's gradient exceeds the bucket (it leaves alone, emptying it); where none
    does, the bucket fills across layers and the copy is its bound, `bucket` elements (a flush at any module)."""
    zero = np.zeros(np.broadcast(*mods, np.asarray(world), np.float64(0.0)).shape)
    fill, padded, count, copies = zero, zero, zero, [zero] * len(mods)
    for _ in range(2):
        for j in reversed(range(len(mods))):
            flush = (fill + mods[j] > bucket) & (count > 0)  # stage3.py l. 1268-1272
            alone = (count == 1) & (np.mod(fill, world) == 0)  # coalesced_collectives.py l. 179-182: in place
            copies[j] = np.where(flush & ~alone, padded, 0.0)
            fill, padded = np.where(flush, 0.0, fill) + mods[j], np.where(flush, 0.0, padded) + world * np.ceil(mods[j] / world)
            count = np.where(flush, 0.0, count) + 1.0
    big = functools.reduce(np.maximum, mods) > bucket
    return [np.where(big, c, bucket) for c in copies]


def zero3_early_hooks(kind: LayerKind, ctx: Ctx, fsdp) -> list:
    """For each of a layer kind's ZeRO-3 modules (zero3_modules' order), whether another parameter's gradient hook
    fires between the previous backward module's weight hook and the module's weight-gradient GEMM [z3h]: its own
    bias added outside the linear (stack fsdp.zero3_bias_hook_gemms, where the block has linear biases) or the norm
    module that follows it in the forward (fsdp.zero3_norm_hook_gemms, where the next block has a norm: the MLP's
    after a mixer row, the next layer's mixer's, taken of the same kind, after an MLP row)."""
    rows = [(s.name, kind.mixer, kind.mlp) for s, _ in kind.mixer.gemms(ctx)] + \
           [(s.name, kind.mlp, kind.mixer) for s, _ in kind.mlp.gemms(ctx)]
    return [(name in fsdp.zero3_bias_hook_gemms and bool(getattr(own, "bias", False)))
            or (name in fsdp.zero3_norm_hook_gemms and bool(getattr(nxt, "norm", 0))) for name, own, nxt in rows]


def zero3_layer_peak(mods: list, full: bool, z3: dict, world=1.0, early=None, held=0.0):
    """(gathered parameters, unreduced gradients' elements, the bucket's torch.cat copy) at the worst moment of one
    layer's re-run forward (full) and backward under DeepSpeed ZeRO-3 [z3] [z3c]: mods its submodules in forward
    order (zero3_modules), z3 the settings, world the ZeRO-3 DP group's ranks (the reduce-scatter's), early the
    modules whose GEMM another gradient's hook precedes (zero3_early_hooks; None: none) [z3h], held the parameters
    gathered all through the backward outside the layers (a tied output layer's [z3t]: they count in
    __n_available_params, so the prefetch's budget is the smaller; not in the moments returned)."""
    k = len(mods)
    early = [False] * k if early is None else early
    lim, pb = float(z3["stage3_max_live_parameters"]), float(z3["stage3_prefetch_bucket_size"])
    reuse, bucket = float(z3["stage3_max_reuse_distance"]), float(z3["reduce_bucket_size"])
    zero = np.zeros(np.broadcast(*mods, np.asarray(world), np.asarray(held), np.float64(0.0)).shape)
    copies = zero3_flush_copies(mods, bucket, world)
    trace = ([(j, 0) for j in range(k)] if full else []) + [(j, 1) for j in reversed(range(k))]
    pos = {key: p for p, key in enumerate(trace)}  # (module, pass) -> position; pass 0 the re-run, 1 the backward
    # a re-run module stays gathered to its backward where 2 x the parameters after it are within R
    keep = [np.asarray(2.0 * sum(mods[j + 1:], zero) < reuse, dtype=np.float64) * float(full) for j in range(k)]
    best_g, best_d, best_c = zero, zero, zero
    for p, (j, ps) in enumerate(trace):
        live = [i for i in range(k) if i != j and full and pos[(i, 0)] < p < pos[(i, 1)]]
        avail = mods[j] + sum((mods[i] * keep[i] for i in live), zero)
        cands, seen = [], {(0, j)}
        for layer, (i, _) in [(0, t) for t in trace[p + 1:]] + [(1, t) for t in trace]:  # then the next layer's
            if (layer, i) not in seen:
                seen.add((layer, i))
                gathered_now = keep[i] if layer == 0 and i in live else 0.0
                cands.append((mods[i], 1.0 - gathered_now))
        g = avail + _zero3_prefetch(cands, np.minimum(lim - avail - held, pb))
        prev = mods[j + 1] if j + 1 < k else mods[0]  # the module whose backward came before (the last: the layer above's first)
        big = np.where(prev > bucket, prev, 0.0)
        # the hook's flush: prev alone where above the bucket, else the bucket's small ones; an early hook [z3h] flushes
        # a big prev before the GEMM (prev and its copy, no own gradient yet), the GEMM then beside its own gradient only
        moments = ([(g, big * float(ps), np.where(prev > bucket, copies[j], 0.0) * float(ps)),
                    (g, mods[j] * float(ps), np.where(prev > bucket, 0.0, copies[j]) * float(ps))] if early[j]
                   else [(g, (mods[j] + big) * float(ps), copies[j] * float(ps))])
        for mg, d, c in moments:
            more = mg + d + c > best_g + best_d + best_c
            best_g, best_d, best_c = np.where(more, mg, best_g), np.where(more, d, best_d), np.where(more, c, best_c)
    return best_g, best_d, best_c


def zero3_reuse_kept(mods: list, full, out, layers: int, reuse: float):
    """(all, all but the last layer's) parameters of the last layers' modules __params_to_release keeps gathered from
    their first forward to their next use [z3r]: module j of the layer i below the last is kept where the parameters of
    the modules the trace runs in between are below R: without full recompute 2 (A_j + i P) + out (the rest of the
    forward, the output layer, the backward down to it), under full recompute (P - m_j) + 3 i P + out (to its re-run);
    A_j the layer's parameters after module j, P a layer's, out the output layer's (assumed a module of the trace).
    Closed form: i < x, so ceil(x) layers of the `layers`."""
    zero = np.zeros(np.broadcast(*mods, np.asarray(out), np.asarray(full)).shape)
    per_layer = np.maximum(sum(mods, zero), 1.0)
    kept, below = zero, zero
    for j, m in enumerate(mods):
        after = sum(mods[j + 1:], zero)
        x = np.where(full, (reuse - out - per_layer + m) / (3.0 * per_layer), (reuse - out - 2.0 * after) / (2.0 * per_layer))
        n = np.clip(np.ceil(x), 0.0, float(layers))
        kept, below = kept + m * n, below + m * np.maximum(n - 1.0, 0.0)
    return kept, below


def zero3_persistent(kind: LayerKind, p, ctx: Ctx, h: int, threshold: float):
    """A layer's parameters DeepSpeed never partitions [z3]: its biases and norms (split_bias / t + replicated: the
    column-parallel biases split, the row-parallel ones and the norms whole, layers/common.py [rb]), where
    the widest (the hidden size h, or the widest biased GEMM output) is within stage3_param_persistence_threshold."""
    widths = [np.float64(h)] + [s.N for s, _ in kind.mixer.gemms(ctx) + kind.mlp.gemms(ctx)] * bool(p.split_bias)
    return np.where(functools.reduce(np.maximum, widths) <= threshold, p.split_bias / ctx.tp + p.replicated, 0.0)


def zero3_parts(settings: Settings, plan: PlanArrays, pc: ParamCounts, ctx: Ctx) -> dict:
    """DeepSpeed ZeRO-3's buffers beside the sharded states [z3], bytes per GPU: gathered (the working set's gathered
    weights), unreduced_grads (the full gradients awaiting their reduce-scatter) and bucket_copy (the reduce-scatter's
    torch.cat copy [z3c]) at the worst moment of a layer's backward or the output layer's, reuse_kept (the last
    layers' modules the reuse distance keeps gathered, beyond that moment [z3r]), tied_output (a tied output layer's
    weight and gradient beside a layer's moment [z3t]), tied_end (bytes of the embedding's backward moment beside the
    kept tensors: the tied weight, the held gradient, the embedding's and its incoming gradient [z3t]), ipg_bucket (the
    contiguous gradient buffer), persistent (per layer kind, one layer's), sub_group (the optimizer's sub-group,
    elements [z3s])."""
    z3, b = settings.zero3, settings.bpp.weights
    full = plan.recompute == RC_FULL
    world = (plan.shard * plan.cp).astype(np.float64)  # the reduce-scatter's
    out = max(pc.embedding, pc.output or 0) / plan.tp.astype(np.float64)  # the output layer's weight and its gradient
    # the tied weight (the model's tied_embeddings) on the stage holding both uses (pp 1: ZeRO-3 runs without PP) [z3t]
    held = np.where(plan.pp == 1, out, 0.0) * float(settings.model.tied_embeddings)
    best_g = best_d = best_c = np.zeros(np.shape(plan.tp))
    fsdp = stack_of(settings).fsdp
    for kind in pc.layers.kinds:
        mods, early = zero3_modules(kind, ctx), zero3_early_hooks(kind, ctx, fsdp)
        (fg, fd, fc), (ng, nd, nc) = (zero3_layer_peak(mods, True, z3, world, early, held),
                                      zero3_layer_peak(mods, False, z3, world, early, held))
        g, d, c = np.where(full, fg, ng), np.where(full, fd, nd), np.where(full, fc, nc)
        more = g + d + c > best_g + best_d + best_c
        best_g, best_d, best_c = np.where(more, g, best_g), np.where(more, d, best_d), np.where(more, c, best_c)
    # the output layer's moment (its weight and gradient) against a layer's, beside which a tied one's stay [z3t]
    more = 2.0 * out > best_g + best_d + best_c + 2.0 * held
    best_g, best_d, best_c = np.where(more, out, best_g), np.where(more, out, best_d), np.where(more, 0.0, best_c)
    tied = np.where(more, 0.0, 2.0 * held)
    # the last layers' kept modules: those of the layers below the last beside its worst moment, all of them beside the
    # output layer's (its weight and gradient); the excess over the moment above [z3r]
    last = pc.layers.kinds[pc.layers.kind_at(pc.layers.num_layers - 1)]
    kept, below = zero3_reuse_kept(zero3_modules(last, ctx), full, out, pc.layers.num_layers,
                                   float(z3["stage3_max_reuse_distance"]))
    reuse = np.maximum(below, np.maximum(kept + 2.0 * out - (best_g + best_d + best_c + tied), 0.0))
    # the embedding's backward's incoming gradient, one micro-batch's tokens x h (split under SP)
    tokens = plan.mbs.astype(np.float64) * plan.seq / (plan.cp * np.where(plan.sp > 0, plan.tp, 1))
    incoming = ACT_BYTES * tokens * settings.model.hidden_size
    return {"gathered": b * best_g, "unreduced_grads": b * best_d, "bucket_copy": b * best_c, "reuse_kept": b * reuse,
            "tied_output": b * tied, "tied_end": np.where(held > 0, 3.0 * b * held + incoming, 0.0),
            "ipg_bucket": b * float(z3["reduce_bucket_size"]) + 0.0 * best_g,
            "persistent": [b * zero3_persistent(k, p, ctx, settings.model.hidden_size,
                                                float(z3["stage3_param_persistence_threshold"]))
                           for k, p in zip(pc.layers.kinds, pc.kind_params)],
            "sub_group": float(z3["sub_group_size"]), "contiguous": float(z3["contiguous_gradients"])}


def rotary_dim(mixer) -> float:
    """The dimensions of a head the mixer rotates (its rotary table's width x 2): the head dim of
    a rope attention layer, MLA's qk_rope_head_dim, 0 for a layer without rotary positions."""
    if getattr(mixer, "qk_rope_head_dim", None):
        return float(mixer.qk_rope_head_dim)
    return float(mixer.d) if getattr(mixer, "kind", "") == "attention" and getattr(mixer, "rope", False) else 0.0


def _mpu_buffer(settings: Settings, ctx: Ctx) -> dict:
    """Megatron-Core's global memory buffer per GPU [12], on a stage that holds the output
    layer ("last") and on the others ("layers"): 2 B x the largest request among the local
    core attention's scores (T a/t s) and the sequence-parallel all-gather of Megatron's own
    linears' input (T h: the output layer's, and every layer's with transformer_impl local)."""
    zero = np.zeros(np.shape(ctx.T))
    if not stack_of(settings).memory.global_memory_buffer:
        return {"last": zero, "layers": zero}
    model, plan = settings.model, ctx.plan
    scores = (ctx.T * model.num_attention_heads / ctx.tp * ctx.seq) if settings.local_core_attention else zero
    gather = np.where((plan.sp > 0) & (plan.tp > 1), ctx.T * model.hidden_size, 0.0)
    own = gather if settings.transformer_impl == "local" else zero
    return {"last": ACT_BYTES * np.maximum(scores, gather), "layers": ACT_BYTES * np.maximum(scores, own)}


def output_wgrad_moment(settings: Settings, plan: PlanArrays, ctx: Ctx, kb: dict):
    """What the last stage holds beside its layers' activations at its output layer's weight-gradient GEMM
    where the job turns gradient-accumulation fusion off [ow] (or, fused, its per-call dummy [dw]), for one
    micro-batch: the final norm's saved input (2 h, /t under SP), its output the layer saved where the stack's
    output_saves_norm_out (2 h, /t under SP unless tp_saves_gathered_input), the logits' bf16 gradient (2 V / t), the
    input gradient over the whole sequence (2 h) and under SP its reduce-scattered part (2 h / t) per token,
    and the weight gradient (wgrad_tensor_bytes x V h / t); None where fused with no or a cached dummy, 0
    under FSDP and on stacks without the switch (wgrad_unfused 0)."""
    wb = wgrad_tensor_bytes(settings, plan, kb)
    if wb is None:  # job / stack settings: no such moment
        return None
    model = settings.model
    h, V = float(model.hidden_size), float(model.vocab_size)
    sp_part = np.where(ctx.rep_div > 1, ACT_BYTES * h / ctx.rep_div, 0.0)
    # the output layer's own saved input (the final norm's output) is read by this GEMM: alive at it
    mem = stack_of(settings).memory
    norm_out = (ACT_BYTES * h / (1.0 if mem.tp_saves_gathered_input else ctx.rep_div)
                if mem.output_saves_norm_out else 0.0)
    per_token = ACT_BYTES * h / ctx.rep_div + norm_out + ACT_BYTES * V / ctx.tp + ACT_BYTES * h + sp_part
    return np.where(wb > 0, ctx.T * per_token + wb * V * h / ctx.tp, 0.0)


EMBEDDING_NORM_STATS_BYTES = 8.0  # the fused LayerNorm's saved fp32 mean and inverse deviation, a token [en]
EMBEDDING_PARTIAL_BYTES = 4.0  # fp32 partial sums per gradient element of a bf16 embedding backward [eg]


def embedding_wgrad_moment(settings: Settings, plan: PlanArrays, ctx: Ctx):
    """What the stage holding the word embedding holds beside its states at the end of one micro-batch's backward,
    the embedding's weight-gradient moment [eg]: the dense (V / t) x h gradient in the activation dtype, the
    backward kernel's fp32 partial sums (4 B T h) and the incoming gradient over the whole sequence (2 B T h); None
    on stacks without it (memory.embedding_wgrad_transient), 0 under FSDP (its gradient path is its own)."""
    if not stack_of(settings).memory.embedding_wgrad_transient:  # a stack setting
        return None
    h, V = float(settings.model.hidden_size), float(settings.model.vocab_size)
    moment = ACT_BYTES * V * h / ctx.tp + ctx.T * (EMBEDDING_PARTIAL_BYTES + ACT_BYTES) * h
    return np.where(plan.sharding >= FSDP, 0.0, moment)


def _embedding_wgrad_excess(per: "_PerLayer", end: str, twin, per_mb, buf, losses):
    """The embedding's weight-gradient moment [eg] at the end of a micro-batch's backward on a stage holding the
    embedding (the first, a single stage, or DualPipe's twin the first): its excess over what that micro-batch has
    freed by then (its layers' activations per_mb, the recompute buffer buf, on a single stage its `losses` loss
    tensors), a transient of one op; 0 where the moment is not priced."""
    single = per.plan.pp == 1
    holds_emb = (end == "first") | single | (twin is not None and twin[1] == "first")
    if per.emb_wgrad is None or not np.any(holds_emb):  # a stack setting; a stage without the embedding
        return 0.0
    loss_tensors = np.where(single, losses * per.out_act, 0.0)
    return np.where(holds_emb, np.maximum(per.emb_wgrad - per_mb - buf - loss_tensors, 0.0), 0.0)


def dummy_wgrad_shapes(settings: Settings, plan) -> list | None:
    """_dummy_wgrad_shapes of 1-d plans (a KeyedPlan of LAYER_FIELDS but recompute will do), for a
    caller that prices many blocks of them (search.memory_totals: memory_total's `dummies`, each
    block's share by take_dummies)."""
    return _dummy_wgrad_shapes(settings, plan, count_params(settings.model))


def take_dummies(dummies: list | None, idx) -> list | None:
    """dummy_wgrad_shapes at some of its plans (idx: a slice or indices)."""
    if dummies is None:
        return None
    return [(i, nk[idx], [(e, m if m is True else m[idx]) for e, m in same]) for i, nk, same in dummies]


def _dummy_wgrad_shapes(settings: Settings, plan: PlanArrays, pc: ParamCounts):
    """Per layer kind, the (N, K) weight shapes of its linears whose TE module returns a cached dummy
    weight gradient [dw] (every GEMM of the kind but the router), and the output layer's (V / t, h);
    None where the run keeps no cached dummy (dummy_wgrads_mode). Returned as _dummy_wgrads reads
    them: [(kind index (-1: the output layer), N x K, [(earlier entry, where its shape is this
    one's: a mask, or True everywhere)])], the shapes compared once here, not at every stage
    _dummy_wgrads prices (an earlier entry whose shape is nowhere this one's is left out: it never
    marks this shape seen). The shapes read the fields a layer's activations read (LAYER_FIELDS):
    priced once per distinct tuple of them (terms.Groups)."""
    if dummy_wgrads_mode(settings) != "cached":  # stack / job settings
        return None
    g = Groups(plan, tuple(f for f in LAYER_FIELDS if f != "recompute"))
    ctx = plan_context(settings, g.plan)
    shapes = [(i, s.N, s.K) for i, k in enumerate(pc.layers.kinds) for s, _ in _wgrad_gemms(k, ctx)]
    shapes.append((-1, settings.model.vocab_size / g.plan.tp.astype(np.float64), np.float64(settings.model.hidden_size)))
    N = np.array(np.broadcast_arrays(*(n for _, n, _ in shapes), *(k for _, _, k in shapes)))
    N, K = N[:len(shapes)], N[len(shapes):]  # (entries, groups)
    out = []
    for j, (i, _, _) in enumerate(shapes):
        if not j:  # no earlier entry
            out.append((i, N[j] * K[j], []))
            continue
        same = (N[:j] == N[j]) & (K[:j] == K[j])  # (earlier entry, groups): each earlier entry, once
        flat = same.reshape(j, -1)
        some, every = flat.any(axis=-1), flat.all(axis=-1)
        out.append((i, N[j] * K[j], [(e, True if every[e] else same[e]) for e in range(j) if some[e]]))
    return g.expand(out)


def _output_wgrad_excess(per: _PerLayer, losses, buf):
    """The output layer's weight-gradient moment [ow], after the loss's peak on a stage holding the loss
    (losses > 0): its excess over one micro-batch's loss tensors and a layer's backward buffer (buf,
    after the loss_apart adjustment); 0 where the moment is not priced."""
    if per.out_wgrad is None:  # a job / stack setting, not a searched quantity
        return 0.0
    return np.where(losses > 0, np.maximum(per.out_wgrad - per.out_act - buf, 0.0), 0.0)


def _dummy_wgrads(per: _PerLayer, counts, holds_output) -> np.ndarray:
    """TE's cached dummy weight gradients on a rank [dw]: 2 B x the elements of each distinct weight
    shape among the linears of the layer kinds it holds (counts (K, ...) > 0) and, where holds_output,
    the output layer's; a shape counted once however many linears share it (the first entry of
    _dummy_wgrad_shapes holding it)."""
    zero = np.zeros(np.shape(per.plan.tp))
    if per.dummy_shapes is None:
        return zero
    held = {i: counts[i] > 0 if i >= 0 else holds_output for i in {i for i, _, _ in per.dummy_shapes}}  # per kind
    on = [held[i] for i, _, _ in per.dummy_shapes]
    total = zero
    for j, (_, nk, same) in enumerate(per.dummy_shapes):
        seen = None  # where an earlier entry on the rank has this shape (none: nowhere)
        for e, m in same:
            hit = on[e] if m is True else on[e] & m
            seen = hit if seen is None else seen | hit
        total = total + np.where(on[j] if seen is None else on[j] & ~seen, nk, 0.0)
    # none where the plan's sharding mode runs the accumulation unfused (Megatron's --use-torch-fsdp2)
    return ACT_BYTES * total * mode_value(stack_of(per.settings), per.plan, "gradient_accumulation_fusion", True)


def logit_chunk_loss_bytes(n: int, tp, pp, keeps_logits: bool):
    """(bytes a logit the loss holds at its peak, of them the transient part) of torchtitan PR #996's chunked
    cross-entropy over n chunks of the materialised logits [ck]: the forward's last chunk, the bf16 logits (2; under
    PP the pipeline's, pp_logits, where the stack's runtime keeps them) + every chunk's saved fp32 log-softmax (4) +
    the chunk's fp32 upcast (4 / n), or the first chunk's backward, the log-softmaxes (4) + its nll and log-softmax
    gradients (8 / n; 12 / n under TP's loss_parallel [tt2]), whichever is larger; the log-softmaxes are kept per
    micro-batch in flight [lt], the rest is transient."""
    saved = 4.0
    logits = np.where(np.asarray(pp) > 1, 0.0, ACT_BYTES) if keeps_logits else ACT_BYTES
    fwd = logits + saved + 4.0 / n
    bwd = saved + np.where(np.asarray(tp) > 1, 12.0, 8.0) / n
    peak = np.maximum(fwd, bwd)
    return peak, peak - saved


def _chunked_loss(settings: Settings, plan: PlanArrays, ctx: Ctx, chunks: int):
    """(per micro-batch, once) bytes of torchtitan 0.3.0's ChunkedLossWrapper at its peak, the
    last chunk's output-layer reduce-scatter [tt6]. Per token: the final norm's input (2h, /t
    under SP) and output (2h, replicated on the TP axis), the fp32 GradAccumulator (4h), the
    contiguous chunk copies of the hidden states where the micro-batch is over 1 (2h; with one
    sequence a sequence split is a view), the last chunk's bf16 logits (2 V / (t n)). Once, per
    output-layer parameter on the GPU (V h / t), under FSDP: its unsharded bf16 gradient (2),
    the fp32 accumulated gradient (4, gradient sync off for chunks 0 .. n - 2), the fp32
    reduce-scatter input (4) and output (4 / N, N the shard degree)."""
    model = settings.model
    h, V = model.hidden_size, model.vocab_size
    vd = vocab_tp_divisor(settings, ctx.tp)  # the largest TP rank's vocabulary rows [vs]
    per_token = (ACT_BYTES * h / ctx.rep_div + ACT_BYTES * h + 4.0 * h + np.where(plan.mbs > 1, ACT_BYTES * h, 0.0)
                 + ACT_BYTES * V / (vd * chunks))
    shard = plan.shard * plan.cp
    params = V * h / vd
    head = np.where(plan.sharding >= FSDP, (ACT_BYTES + 4.0 + 4.0 + 4.0 / shard) * params, 0.0)
    return ctx.T * per_token, head


def _offload_staging(per: _PerLayer, states: Terms, allocated, kept, counts, where):
    """(states, allocated, kept, the buffer's bytes) with DeepSpeed ZeRO-Offload's GPU staging buffer [off]:
    temp_grad_buffer_for_gpu_offload, the largest parameter of the stage in the gradient dtype, in the gradients term
    (where (end, twin, single, holds_loss): the embedding on the first stage, the output layer on the one holding the
    loss); unchanged (and 0) without offload (a job setting) or on a stack whose offload keeps no such buffer."""
    if not per.staging:
        return states, allocated, kept, 0.0
    end, twin, single, holds_loss = where
    kinds, (emb_p, out_p), kinds_e = per.largest_params
    # single: plan.pp == 1, a searched quantity (an array over the plans): combined with |, never Python `or`
    first = single | (end == "first" or (twin is not None and twin[1] == "first"))
    big = np.maximum(np.maximum(_of_kinds(kinds, counts), _of_kinds(kinds_e, counts)),
                     np.maximum(np.where(first, emb_p, 0.0), np.where(holds_loss | single, out_p, 0.0)))
    buf = big * per.settings.bpp.gradients
    return Terms(**{k: states[k] + buf if k == "gradients" else states[k] for k in states}), allocated + buf, kept + buf, buf


def _forward_moments(per: _PerLayer, c, held, allocated):
    """The excess over the peak `allocated` of one layer's forward transients, each a moment of the last layer's
    forward beside `held` (the states, no sharded gradient, and the stage's saved activations): TE's CP merge [cp3],
    DeepSpeed-MoE's gating products [dg]; the largest among the kinds the stage holds (c: its layers of each kind);
    0 where the stack has neither (stack settings, not searched quantities)."""
    excess = np.float64(0.0)
    for moments in (per.cp_merge, per.gating_fwd):
        if moments is not None:
            top = np.maximum.reduce([np.where(c[i] > 0, m_, 0.0) for i, m_ in enumerate(moments)])
            excess = np.maximum(excess, held + top - allocated)
    return np.maximum(excess, 0.0)


def _muon_temp(per: _PerLayer, counts, n, end, twin, single, holds_loss, params):
    """The Newton-Schulz temporaries of the largest matrix Muon steps on a stage [mu] (muon_step_temporaries), 0.0 but
    under Muon (a job setting): of the layer kinds it holds (counts, DualPipe's twin's added; one kind: its n layers),
    the learned position table where it holds the first layers, the MTP modules where it holds the loss; or, where
    larger, what follows them on the layer-wise optimizer's legacy path, its parameter all-gather's buffers
    (legacy_gather_bytes of params: the stage's (parameters, experts' optimizer partition))."""
    kinds = per.muon_temp
    if kinds is None:
        return 0.0
    gather = legacy_gather_bytes(per.settings, per.plan, *params)
    counts = counts if twin is None else counts + twin[0]
    first, last = (end == "first") | (twin is not None and twin[1] == "first") | single, holds_loss | single
    if len(kinds) == 1:
        t = np.where(np.asarray(n) > 0, kinds[0], 0.0)
    else:
        t = functools.reduce(np.maximum, (np.where(np.asarray(c) > 0, v, 0.0) for c, v in zip(counts, kinds)))
    t = np.maximum(np.maximum(t, np.where(first, per.muon_temp_position, 0.0)), np.where(last, per.muon_temp_mtp, 0.0))
    return np.maximum(t, gather)


def _stage_terms(per: _PerLayer, end: str, counts, held, n, loss, twin=None, outputs=0.0, embedding=0.0) -> Terms:
    """One stage's memory terms: its model states (params_of, sharded [1], as the stack holds
    them at the peak), its layers' activations for the micro-batches each of its model chunks
    holds at the stage's peak (held: pipeline.stage_inflight_kinds) [2] (full recompute keeps
    the inputs of the layers it re-runs, a share r/n of each chunk), one layer's recompute
    buffer (the largest among the kinds it holds), the output layer and MTP on the last stage
    for the `loss` micro-batches it holds, FSDP's and ZeRO-3's buffers (FSDP_TERMS: _stage_fsdp; FSDP2's
    unsharded stage under PP); and the pools the allocator holds beside them (reserved, not allocated): the sharded
    gradients on the reduce-scatter stream, the all-gather buffers, the loss's freed blocks.
    twin (counts, end, held, n): DualPipe's second stage on the same rank [9]: its parameters
    add, and the rank's PP + 1 micro-batches in flight (held, pipeline.py [8]) are half of
    each stage's layers. embedding: the micro-batches the first stage's first chunk holds, each keeping the word
    embedding's norm's saved tensors [en] (0 on the other stages)."""
    settings, plan, pc = per.settings, per.plan, per.pc
    # the model states read neither the micro-batch, SP nor recompute: priced once per distinct
    # tuple of what they read (terms.Groups)
    g = per.state_groups
    if twin is None:
        (c,) = g.pick(counts)
        states, copies, params, e_part, local = g.expand(_stage_states(per, g.plan, end, c))
    else:
        c, c2 = g.pick(counts, twin[0])
        states, copies, params, e_part, local = g.expand(_stage_states(per, g.plan, end, c, (c2, twin[1])))
    early = per.early_step & (plan.sharding >= FSDP)  # the optimizer stepped in the backward [es] (a job setting)
    if per.early_step:  # only a sharded gradient of one unit at a time waits in the reduce-scatter pool [es]
        states = Terms(**{k: np.where(early, np.minimum(states[k], per.early_pool), states[k]) if k == "grad_pool"
                          else states[k] for k in states})
    single, r = plan.pp == 1, recomputed_layers(settings, plan, n) / np.maximum(n, 1)  # r: the share of its layers re-run
    held_all = (_held_activations(per, held, r), sum((held[i] for i in range(len(per.stored))), np.float64(0.0)))  # [rs]
    act = held_all[0] + embedding * per.embedding_norm  # [en]
    # one micro-batch's layer activations of the stage (act / the micro-batches held), for per.regather_w below
    per_mb = act * n / np.maximum(held_all[1], 1e-300)
    moe_held = _dispatcher_held(per, counts, r)  # the MoE dispatchers' attributes, once a layer [dh]
    if twin is not None:
        r2 = recomputed_layers(settings, plan, twin[3]) / np.maximum(twin[3], 1)
        act = 0.5 * (act + _held_activations(per, twin[2], r2))
        moe_held = moe_held + _dispatcher_held(per, twin[0], r2)
        counts = counts + twin[0]  # the recompute buffer: the largest kind either stage holds
    buf = _largest_buffer(per, counts)
    holds_loss = end == "last" or (twin is not None and twin[1] == "last")
    losses = np.where(single, 1.0, loss) if holds_loss else np.where(single, 1.0, 0.0)
    out, buf = _loss_terms(per, losses, holds_loss, buf)
    out = out + _output_wgrad_excess(per, losses, buf)  # the output layer's weight-gradient moment [ow]
    buf = buf + _embedding_wgrad_excess(per, end, twin, per_mb, buf, losses)  # the embedding's wgrad moment [eg]
    act, moe_held, buf = _with_mtp(per, losses, act, moe_held, buf)  # the MTP modules on the stage holding the loss
    # the stage's outputs sent on, kept by the runtime until their backward [tt4] (outputs:
    # chunk-micro-batches in flight, pipeline.stage_inflight_kinds; DualPipe's twin not added)
    act = act + outputs * per.stage_output
    # resharding after forward under torch's pipelining with one chunk a rank (per.regather_w):
    # a micro-batch's activations (its layers' and its output sent on) are freed by the time its
    # backward has gathered the stage's weights: the peak holds the larger of the two only [7]
    per_mb = per_mb + np.minimum(outputs, 1.0) * per.stage_output
    fsdp = _stage_fsdp(per, end, params, counts, per_mb, twin)
    fsdp_buf = sum(fsdp.values(), np.float64(0.0))
    # the loss's freed blocks (per.loss_pool [lp]) once on the stage holding the loss, however many micro-batches' losses
    # it holds (GPipe: m): each loss frees its blocks before the next reuses them, the allocator caching one set (0 where
    # a runtime keeps the logits under PP, stack memory.pipeline_keeps_logits: the shipped stacks with a pool)
    pools = states.grad_pool + per.gather_pool + np.minimum(losses, 1.0) * per.loss_pool
    mpu = np.where(single, per.mpu["last"], per.mpu["last"] if holds_loss else per.mpu["layers"])
    rope = _model_buffers(per, counts, twin is not None, holds_loss | single)  # counts: DualPipe's twin added above
    state_bytes = sum((states[k] for k in STATE_TERMS), np.float64(0.0))
    dummies = _dummy_wgrads(per, counts, np.asarray(holds_loss) | single)  # TE's cached dummy wgrads [dw]
    allocated = state_bytes + act + moe_held + out + buf + fsdp_buf + copies + per.workspaces + mpu + rope + dummies
    # what every moment of the step holds: the states, every sharded gradient (allocated at the
    # end of the backward and at the optimizer step, no longer only reserved), the workspaces, the
    # quantized copies, the mpu buffer, the rotary tables, TE's dummy weight gradients, the MoE dispatchers' attributes, Megatron-FSDP's double-buffer pools [db]
    kept = state_bytes + states.grad_pool + per.workspaces + copies + mpu + rope + dummies + moe_held + per.kept_ends[end] + per.db_pools
    grads_pooled = states.grad_pool  # the sharded gradients still counted as reserved, not allocated
    if per.fsdp.end_of_backward_peak:  # a stack setting, not a searched quantity
        # the end of the backward [tt7]: its excess over the peak above is FSDP's; the sharded gradients it
        # allocates leave the reduce-scatter pool (reserved = the larger moment's)
        excess = np.where(plan.pp == 1, np.maximum(kept + _end_of_backward(per, counts) - allocated, 0.0), 0.0)
        fsdp["fsdp_end_of_backward"], allocated = excess, allocated + excess
        pools, grads_pooled = pools - np.minimum(excess, grads_pooled), grads_pooled - np.minimum(excess, grads_pooled)
    z2_input = _zero2_reduce_input(per, held_all, n, buf)  # the unit's reduce-scatter input beyond the peak [rs]
    # Megatron-FSDP v2's root unit at the backward's end: (its excess, the compute stream's most, the peak with it) [v2]
    v2 = _v2_root_end(per, (kept, per.ends[end]), allocated, allocated + z2_input)
    fsdp["fsdp_end_of_backward"], allocated = fsdp["fsdp_end_of_backward"] + v2[0], v2[2]
    excess = _forward_moments(per, counts if twin is None else counts + twin[0], kept - states.grad_pool + act, allocated)
    buf, allocated = buf + excess, allocated + excess
    # the optimizer step, a moment of its own after the backward [opt]: the states, every sharded
    # gradient and the implementation's temporaries (one moment's tensor the size of the local
    # optimizer parameters in the state dtype, adam / 2: Adam keeps two) are live, the activations,
    # the loss and the gathered units freed; where it exceeds the peak above, the excess is its own (stepped in the
    # backward [es]: one parameter's temporaries at a time, beside one unit's sharded gradients; below FSDP [sg])
    temps = per.opt_temporaries * (np.where(early, per.early_temp, states.adam / 2.0) if per.early_step else states.adam / 2.0)
    # Muon's [mu]; Megatron-FSDP v2's model-weight cast, once the step's own temporaries are freed (0 elsewhere) [v2]
    temps = np.maximum(temps + _muon_temp(per, counts, n, end, twin, single, holds_loss, (params, e_part)), per.v2_cast)
    states, allocated, kept, staging = _offload_staging(per, states, allocated, kept, counts, (end, twin, single, holds_loss))  # [off]
    temps = (temps, _reduce_copy(per, params, end, counts))  # the BF16_Optimizer's all-reduce after the backward [bo]
    step = _step_excess(per, states, fsdp, (kept, temps), allocated, (counts, end == "first" or single,
                        holds_loss | single, e_part), (out, buf, per_mb / np.maximum(n, 1), n), (local, staging))  # (before the step: DeepSpeed ZeRO-1/2's IPG buffers and gradient reduction [zb])
    fsdp["zero3_step_grads"], tied_end = step.pop("zero3_step_grads"), step.pop("zero3_tied_end")  # ([z3s], [z3t])
    fsdp["zero3_tied_output"] = fsdp["zero3_tied_output"] + tied_end
    allocated = allocated + fsdp["zero3_step_grads"] + tied_end + sum(step.values(), np.float64(0.0))  # ([zb], [opt], [sg])
    pools = pools - np.minimum(step["optimizer_step"], grads_pooled)
    return Terms(**{k: states[k] for k in STATE_TERMS}, layer_activations=act + moe_held, output_activations=out,
                 recompute_buffer=buf, **fsdp, model_buffers=rope, quantized_weights=copies, workspaces=per.workspaces,
                 mpu_buffer=mpu, dummy_wgrads=dummies, zero2_reduce_input=z2_input, **step, stream_pools=pools + _v2_rs_pool(per, allocated - v2[2], *v2[1:]), allocator_slack=per.slack * allocated,  # the allocator's reserved - allocated at the peak
                 tp_overlap_buffers=per.tp_overlap, ep_buffers=_stage_ep_buffers(per, counts), nvls_buffers=per.nvls, reserve=per.reserve)


def _layer_and_queue_capacity(pc: ParamCounts, plan: PlanArrays, stack):
    """(the largest layer unit a GPU, the reduce-scatter queue's capacity in parameters [rs]).
    The layer: a GPU's parameters of it, params_of's (the TP-split ones / tp, the replicated ones whole, its experts
    / (etp ep) with their output biases / ep; unit_params' layer, with its experts). The capacity: max(the stack's
    zero2_reduce_queue_params, the mode's reduce_queue_units x the average layer unit a GPU, over the model's layers
    by kind: megatron_fsdp.py l. 420-443 averages the chunk's FSDP units' parameters); NaN units (no queue): the
    stack's."""
    tp = plan.tp.astype(np.float64)
    etp = etp_of(plan).astype(np.float64)
    per_kind = [p.dense_per_gpu(tp) + p.experts_per_gpu(etp, plan.ep) for p in pc.kind_params]
    layer = np.maximum.reduce(per_kind + [0.0 * tp])
    avg = sum((float(c) * u for c, u in zip(pc.layers.totals, per_kind)), 0.0 * tp) / max(pc.num_layers, 1)
    units = reduce_queue_units(stack, plan)
    return layer, np.maximum(stack.fsdp.zero2_reduce_queue_params or 0.0, np.nan_to_num(units) * avg)


def _gathered_units(pc: ParamCounts, plan: PlanArrays, stack, double_buffer: bool = False, v2=False):
    """(current, prefetched, layer, on, pooled) of fsdp_gathered_units = (current x the largest unit + prefetched x layer) x
    the weights' bytes [pf]: the stack's gathered_units_at_peak of the largest unit (0 prefetched) where its fsdp spec
    has no gather_prefetch_share or the plan's mode no reduce-scatter queue (runs.sharding reduce_queue_units); else
    (`on`) Megatron-FSDP's all-gather prefetch: no end unit (its non-unit buckets, the embedding's and output layer's,
    are kept gathered the whole step, fsdp_unsharded_ends [nu]) and min(1 + ceil(P / layer), the chunk's layers) layer
    units, the current one and those it prefetches, P = floor(share x the queue's capacity), layer the largest layer
    unit a GPU (the prefetch's reach past the chunk's layers, into the end buckets, gathers nothing: they are already
    gathered) [pf]. Under Megatron-FSDP's double buffer (double_buffer, the job's mfsdp_double_buffer) those layer
    units are `pooled` instead, at most 2 (the prefetch stops at the pool's second unit), prefetched 0 [db]. Where `v2`
    (Megatron-FSDP v2, a boolean array) min(2, the chunk's layers): the current unit and the next one [v2]."""
    fs = stack.fsdp
    tp = plan.tp.astype(np.float64)
    base = np.full(np.shape(tp), fs.gathered_units_at_peak)
    if fs.gather_prefetch_share is None:  # stack data: no mode prefetches to a capacity
        return base, 0.0 * tp, 0.0 * tp, np.zeros(np.shape(tp), dtype=bool), 0.0 * tp
    layer, cap = _layer_and_queue_capacity(pc, plan, stack)
    on = ~np.isnan(reduce_queue_units(stack, plan)) & (layer > 0)
    budget = np.floor(fs.gather_prefetch_share * cap)
    # at most the largest model chunk's layers (each chunk its own Megatron-FSDP module and all-gather pipeline)
    chunk = np.ceil(pc.num_layers / (plan.pp.astype(np.float64) * plan.vpp))
    units = np.minimum(1.0 + np.ceil(budget / np.where(layer > 0, layer, 1.0)), chunk)
    units = np.where(v2, np.minimum(2.0, chunk), units)  # v2: one unit prefetched [v2]
    pooled = np.where(on & bool(double_buffer) & ~np.asarray(v2), np.minimum(units, 2.0), 0.0)  # (a job setting) [db]
    return np.where(on, 0.0, base), np.where(on & ~(bool(double_buffer) & ~np.asarray(v2)), units, 0.0), layer, on, pooled


def _v2_units(pc: ParamCounts, plan: PlanArrays) -> tuple:
    """Megatron-FSDP v2's layer units a GPU, parameters [v2]: (the largest layer with its experts, max over kinds of
    D + E; the unit gathered beside it at the peak; the largest unit whose gradients one reduce-scatter input holds;
    the largest experts' unit apart, 0 at ep 1),
    D a kind's dense parameters, E its routed experts' a GPU (/ (etp ep)). At ep 1 the experts are the layer's: (D + E,
    D + E, D + E, 0). At ep > 1 each MoE layer's experts are an FsdpModule of their own over the expert-DP mesh
    (mcore_fsdp_adapter.py @d98e8a64 l. 570-583), a child of the layer's, in forward order L_i, E_i, L_i+1 and in
    backward order L_i, E_i, L_i-1 (module.py l. 97-115, 464-470): during E_i's forward or backward its layer's dense
    unit, E_i and the neighbour's dense unit are gathered (E_i's pre-hook prefetches it, l. 350-353, 423-425; L_i is
    released at its own post-hook, after E_i's): D_i + E_i + D_j, bounded by the largest D + E and the largest D
    (attained where the largest dense layer borders the largest MoE layer: DeepSeek's first MoE layer after its dense
    ones, in the backward); and the copy-in moments are E_i's and L_i's apart: max(max D, max E)."""
    tp = plan.tp.astype(np.float64)
    etp = etp_of(plan).astype(np.float64)
    dense = [p.dense_per_gpu(tp) + 0.0 * tp for p in pc.kind_params]
    experts = [p.experts_per_gpu(etp, plan.ep) + 0.0 * tp for p in pc.kind_params]
    zero = 0.0 * tp
    layer = np.maximum.reduce([d + e for d, e in zip(dense, experts)] + [zero])
    apart = plan.ep > 1
    d_max, e_max = np.maximum.reduce(dense + [zero]), np.maximum.reduce(experts + [zero])
    return layer, np.where(apart, d_max, layer), np.where(apart, np.maximum(d_max, e_max), layer), np.where(apart, e_max, 0.0)


def _unpriced(*operands) -> np.ndarray:
    """0.0 in the shape an elementwise expression of `operands` has (their broadcast shape): what a np.where reads
    from a branch no plan of the batch takes, in place of pricing it (every element of the np.where then comes from
    its other branch, as it did; the shape, and so every later broadcast, is the same)."""
    return np.zeros(np.broadcast_shapes(*(np.shape(x) for x in operands)))


def _v2_root_end(per: _PerLayer, held, base, allocated) -> tuple:
    """Megatron-FSDP v2's root unit at the end of the backward [v2]: (its excess over `allocated`, the backward's peak
    `base` with the layer units' copy-in; the most the compute stream holds, max(base, at the end); allocated + the
    excess), the excess 0 where the plan does not run v2. `held`: (the kept tensors, the gathered root:
    fsdp_unsharded_ends). The root (the embedding, the output layer, the final norm: R parameters a GPU, per.v2_root)
    runs its post-backward once every parameter of it has its gradient (module.py @d98e8a64 l. 278-296), after the
    embedding's, the backward's last. Two moments, the activations freed:
    - the embedding's weight-gradient kernel: its fp32 partial sums and incoming gradient (6 B T h, [eg]) beside the
      root's gradients W R (the output layer's, held from the start of the backward, and the embedding's being made)
      and the gathered root: kept + gathered + W R + 6 T h; with a tied output layer (R then holds V h / t once) the
      output layer's gradient waits in the shared weight's AccumulateGrad input buffer (one node a leaf, run once
      both gradients are in) and the embedding's new one is added to it there afterwards (pytorch
      torch/csrc/autograd/input_buffer.cpp accumulate: old_var.add_(var) in place): W V h / t more (per.v2_tied);
    - the root's copy-in: post_backward reshards before it reduces (module.py l. 427-432: _reshard_parameter_groups
      releases the gathered root, parameter_group.py l. 316-326, then _reduce_gradient_groups allocates the
      reduce-scatter input W R, l. 328-351), and the embedding's incoming gradient is gone: the autograd engine frees a
      node's inputs when its call returns (pytorch/pytorch @e1253a95 torch/csrc/autograd/engine.cpp call_function: the
      inputs moved out of the node's InputBuffer are a local of the call; evaluate_function then queues the
      AccumulateGrad task), before that task runs the post-accumulate-grad hook (torch >= 2.1
      functions/accumulate_grad.cpp AccumulateGrad::apply): kept + 2 W R, which never
      exceeds the kernel's moment while the gathered root is W R.
    The compute stream's part (the input is on the reduce-scatter stream, _v2_rs_pool): the kernel's moment."""
    kept, gathered = held
    if not np.any(per.v2):  # no plan of the batch runs v2: every element of the np.where below is 0.0 (_unpriced)
        kernel = _unpriced(kept, gathered, per.v2_root, per.v2_tied, per.v2_emb_wgrad)
        excess = np.where(per.v2, _unpriced(kernel, allocated), 0.0)
        return excess, np.maximum(base, np.where(per.v2, kernel, 0.0)), allocated + excess
    grads = per.settings.bpp.weights * per.v2_root
    kernel = kept + gathered + grads + per.settings.bpp.weights * per.v2_tied + per.v2_emb_wgrad
    end = np.maximum(kernel, kept + 2.0 * grads)
    excess = np.where(per.v2, np.maximum(end - allocated, 0.0), 0.0)
    return excess, np.maximum(base, np.where(per.v2, kernel, 0.0)), allocated + excess


def _v2_rs_pool(per: _PerLayer, later, compute, moments):
    """Megatron-FSDP v2's reduce-scatter stream pool beyond the allocated peak [v2] (reserved, not allocated): the
    caching allocator keeps the blocks freed on that stream for it alone (FsdpContext l. 78-84: its own stream, the
    adapter leaves unify_communication_stream off, mcore_fsdp_adapter.py l. 569), so the reserved peak is the compute
    stream's most (`compute`: the backward's peak or the root's end, _v2_root_end) plus the pool (per.v2_rs_pool). Where
    a later moment (the forward's, the optimizer step's: `later` > 0, none on the reduce-scatter stream) is the
    allocated peak, the pool whole; else the pool less what the allocated peak (`moments`: the copy-ins) adds on it."""
    pool = per.v2_rs_pool
    if not np.any(per.v2):  # no plan of the batch runs v2 (_unpriced)
        return np.where(per.v2, _unpriced(later, pool, compute, moments), 0.0)
    return np.where(per.v2, np.where(later > 0, pool, np.maximum(pool + compute - moments, 0.0)), 0.0)


def _zero2_reduce_input(per: _PerLayer, held_all, n, buf):
    """What a zero2 mode reducing every micro-batch as FSDP2 does holds beyond the backward's peak at its layer unit's
    reduce-scatter [rs] (a mode running Megatron-FSDP's queue, at any level: _reduce_queue's): max((2 + r) u - a - buf, r u - a where every forward of the step precedes the stage's first
    backward, else r u; 0), u the largest layer unit a GPU (0 where the plan's mode holds none), r the stack's
    grad_reduce_bytes, a one layer-micro-batch's activations (held_all: the stage's layer activations in flight and
    their layer-micro-batches), n the stage's layers, buf one layer's backward buffer."""
    u = per.zero2_unit
    if not per.fsdp.zero2_unit_reduce and per.fsdp.zero2_reduce_queue_params is None:  # stack data: no mode reduces so
        return 0.0 * u
    act, count = held_all
    a = act / np.maximum(count, 1e-300)
    first = count >= per.plan.microbatches * np.asarray(n, dtype=np.float64)  # every forward before the first backward
    r = per.fsdp.grad_reduce_bytes
    # (none on a stage without layers: its end units are not priced)
    units = (u > 0) & (np.asarray(n) > 0)
    # priced where some plan of the batch reads it, not queued nor v2 (else 0 s wherever read: _unpriced's zeros)
    fsdp2 = (np.where(units, np.maximum(np.maximum((ACT_BYTES + r) * u - a - buf, r * u - np.where(first, a, 0.0)), 0.0),
                      0.0) if np.any(units & ~per.queue_on & ~per.v2) else _unpriced(units, a, buf, first))
    # Megatron-FSDP v2 [v2]: the reduce-scatter input (W B a parameter: the gradients' dtype) allocated beside the
    # unit's gradients, which the peak holds (fsdp_unit_grads), then the gradients freed and the input dropped once its
    # reduce-scatter is queued (stream-ordered: the next unit's reuses it): max(W u - a - buf, 0)
    # (each branch priced where some plan of the batch takes it: _unpriced)
    v2 = (np.where((u > 0) & (np.asarray(n) > 0), np.maximum(per.settings.bpp.weights * u - a - buf, 0.0), 0.0)
          if np.any(per.v2) else _unpriced(u, n, a, buf))
    # a mode running Megatron-FSDP's reduce-scatter queue (stack runs.sharding reduce_queue_units) [rs]
    queue = (_reduce_queue(per, u, a, n) if np.any(per.queue_on) else
             _unpriced(u, n, a, per.plan.vpp, per.queue_cap, per.queue_db, per.queue_held, per.queue_grad_bytes))
    return np.where(per.queue_on, queue, np.where(per.v2, v2, fsdp2))


def _reduce_queue(per: _PerLayer, u, a, n):
    """Megatron-FSDP's unsharded gradient buckets (GradReducePipeline: optim_grads, optim_grads_params, its HSDP)
    beyond the backward's peak [rs]: during the backward of the i-th layer of a model chunk's micro-batch backward
    q(i) = min(i, k + 2) buckets of u parameters (k = floor(C / u) left in the queue after its drain, C the mode's
    capacity per.queue_cap; the last reduced one, the one filling) of g B a parameter, (i - 1) layer-micro-batches'
    activations a freed: max over i <= the chunk's layers c of q(i) g u - (i - 1) a, at i = 1 or i = min(k + 2, c)
    (linear in between, falling after): max(g u, m g u - (m - 1) a), m = min(k + 2, c); less what the peak already
    holds of the filling bucket (per.queue_held: the fsdp levels' fsdp_unit_grads, 0 at zero2), at least 0."""
    g = per.queue_grad_bytes  # (the job's gradient bytes under Megatron-FSDP [mg])
    n = np.asarray(n, dtype=np.float64)
    chunk = np.ceil(n / per.plan.vpp)  # each model chunk is its own Megatron-FSDP module, its queue drained at its end
    k = np.floor(per.queue_cap / np.where(u > 0, u, 1.0))
    m = np.minimum(k + 2.0, chunk)
    # (under the double buffer [db] the buckets are its persistent pools, held at the peak: no excess)
    return np.where((u > 0) & (n > 0) & ~per.queue_db,
                    np.maximum(np.maximum(g * u, m * g * u - (m - 1.0) * a) - per.queue_held, 0.0), 0.0)


def _loss_terms(per: _PerLayer, losses, holds_loss: bool, buf):
    """(the output layer's and loss's bytes at the stage's peak, the recompute buffer) for the `losses` micro-batches
    whose loss the stage holds: each keeps what its loss saved, one loss backward runs at a time, its transient once
    [lt]; the deferred output-layer gradients [10], the logits PyTorch's pipelining keeps [tt4] and a chunked loss's
    head gradients [tt6] on the stage holding the loss. Where the stack runs the loss's backward apart from the
    layers' (stack_db memory.loss_peak_apart, a stack setting), the loss's backward frees one micro-batch's loss
    tensors before the first layer's backward re-materialises that layer [tt3]: the buffer counts only what it needs
    beyond the loss's peak, the other held losses keeping theirs."""
    one = np.minimum(losses, 1.0)
    out = (losses * (per.out_act - per.out_transient) + one * per.out_transient
           + (per.deferred_wgrad + losses * per.pp_logits + per.head_grads if holds_loss else 0.0))
    if per.loss_apart:  # a stack setting, not a searched quantity
        held = per.after_loss if holds_loss else 0.0  # what the layers' backward holds beside it [lg1]
        buf = np.maximum(buf + held - one * per.out_act - (per.head_grads if holds_loss else 0.0), 0.0)
    return out, buf


def _with_mtp(per: _PerLayer, losses, act, moe_held, buf):
    """(act, moe_held, buf) with the multi-token-prediction modules of the stage holding the loss (losses: its
    micro-batches in flight, 0 elsewhere): their activations for each micro-batch, their MoE layers' dispatcher
    attributes once [dh], and under full recompute the re-run module's tensors as the recompute buffer where they
    exceed the stage's layers' (one module re-run at a time)."""
    return (act + losses * per.mtp, moe_held + np.where(losses > 0, per.mtp_held, 0.0),
            np.maximum(buf, np.where(losses > 0, per.mtp_buffer, 0.0)))


def _stage_ep_buffers(per: _PerLayer, counts) -> np.ndarray:
    """The dispatcher's buffers [ep] on a stage holding `counts` layers of each kind: where it
    holds an MoE layer (DualPipe's twin's counts already added by the caller)."""
    kinds = per.pc.layers.kinds
    if len(kinds) == 1:  # one kind: counts may be the stage's layer count alone (_largest_buffer)
        return per.ep_buffers if kinds[0].has_experts else np.zeros(np.shape(per.ep_buffers))
    moe = sum((np.asarray(c, dtype=np.float64) for c, k in zip(counts, kinds) if k.has_experts),
              np.float64(0.0))
    return np.where(moe > 0, per.ep_buffers, 0.0)


def _stage_fsdp(per: _PerLayer, end: str, params, counts, per_mb, twin) -> dict:
    """FSDP's and DeepSpeed ZeRO-3's buffers (FSDP_TERMS but the end of the backward's) on a stage of `params` dense
    parameters per GPU holding `counts` layers: the gathered units and their gradients at the peak (per.fsdp_units),
    ZeRO-3's persistent parameters, the end units kept unsharded, under PP the whole stage gathered (its layer linears
    1 B fewer each under the fp8 all-gather [fa]), less, resharding after forward under torch's pipelining with one
    chunk a rank, what a micro-batch's backward frees before it has gathered the stage's weights (per_mb) [7], and its
    accumulated unsharded gradients."""
    lin = stage_linear_params(per.pc, per.plan, counts, per.conv)
    # the output layer's weight elements 1 B fewer where it is converted and gathered in fp8 [fa], on the stage that
    # holds it (the last; the only one without PP; DualPipe's twin when it is the last)
    holds_out = end == "last" or (twin is not None and twin[1] == "last")
    out = np.where(per.plan.pp == 1, 1.0, 1.0 if holds_out else 0.0)
    # DeepSpeed ZeRO-3's persistent parameters of the stage's layers [z3]
    persistent = (np.where(per.plan.sharding >= FSDP, weighted(counts, per.zero3["persistent"]), 0.0)
                  if per.zero3 is not None else 0.0 * lin)
    regather_saving = (np.minimum(per.regather_w * params - per.regather_cut * lin - out * per.regather_out_cut, per_mb)
                       if twin is None else 0.0)
    return {**per.fsdp_units, "zero3_persistent": persistent, "fsdp_unsharded_ends": per.ends[end],
            "fsdp_unsharded_stage": (per.pp_unsharded * params - per.held_cut * lin - out * per.held_out_cut
                                     - regather_saving),
            "fsdp_accumulated_grads": per.pp_grads * params, "fsdp_end_of_backward": 0.0 * lin, "zero3_step_grads": 0.0 * lin}


def _step_excess(per: _PerLayer, states: Terms, fsdp: dict, kept_temps, allocated, where, loss, off_part) -> dict:
    """The terms beyond the backward's peak `allocated`, in order (each the excess of its moment over the peak and
    the terms before it): zero12_ipg_bucket and zero12_grad_partition, DeepSpeed ZeRO-1/2's IPG buffers at the peak and
    its gradient reduction's moment [zb] (_zero12_terms); zero3_tied_end, the end of DeepSpeed ZeRO-3's backward with a
    tied output layer [z3t] (the kept tensors, the IPG buffer, the persistent parameters and zero3_parts' tied_end: the
    caller adds it to zero3_tied_output); optimizer_step, the optimizer step's moment [opt] (the kept
    tensors and the step's temporaries, kept_temps); zero3_step_grads, what DeepSpeed ZeRO-3's step adds beyond that
    [z3s] (the IPG buffer, the persistent parameters and one sub-group's gradient partition flattened in the model
    dtype with its fp32 copy, _zero3_step); step_grad_copies, what a mode below FSDP adds instead [sg] (its copies of
    the gradient partition, less the gradients it no longer holds, _step_grad_copies; the two never on one plan: [z3s]
    under FSDP, [sg] below it). A step that frees gradients (delta < 0) beside temporaries would make the last term
    negative; no stack prices both (DeepSpeed's under Megatron-DeepSpeed and Megatron's optimizers are fused: no
    temporaries, [opt]); offload_norm_fp64, DeepSpeed ZeRO-1/2 offload's fp64 norm piece in the reduction's hooks,
    beyond the peak and the reduction's terms [onf] (_offload_norm_fp64); offload_copy_back, DeepSpeed ZeRO-1/2
    offload's copy of the updated fp32 partition up to the GPU after the CPU step, beyond all of them [ocb]
    (_offload_copy_back). where: (counts,
    holds the embedding, holds the output layer, the routed experts' partition) of the stage, for the largest
    parameter's fp64 norm piece and the largest group; loss: (the output layer's and loss's tensors, the recompute
    buffer) at the peak; off_part: (the rank's optimizer partition, elements, offloaded or not; the offload's staging
    buffer, bytes, in the states' gradients)."""
    kept, (temps, reduce_copy) = kept_temps
    if per.zero12 is None and per.zero3 is None and not per.step_copies:  # stack data: no [zb], [z3s] or [sg] moment
        # (the figures the lines below give there: ipg, part, tied_end, the z3 step and the copies +0.0, so `allocated` is unchanged
        # and the two last terms are opt_step - opt_step)
        reduce = np.maximum(kept + reduce_copy - allocated, 0.0)  # [bo]
        opt_step = np.maximum(kept + temps - allocated - reduce, 0.0)
        zero = 0.0 * allocated
        back = _offload_copy_back(per, states, kept, allocated + reduce + opt_step, where, off_part)  # [ocb]
        return {"zero12_ipg_bucket": zero, "zero12_grad_partition": zero, "zero3_tied_end": zero, "bf16_reduce_copy": reduce,
                "optimizer_step": opt_step, "zero3_step_grads": 0.0 * opt_step, "step_grad_copies": 0.0 * opt_step,
                "offload_norm_fp64": 0.0 * opt_step, "offload_copy_back": back}
    ipg, part = _zero12_terms(per, states, kept, allocated, where[2], loss)
    # ZeRO-Offload's fp64 norm piece in the reduction's hooks, before the step [onf]
    norm = _offload_norm_fp64(per, kept, allocated + ipg + part, where, off_part)
    # the end of the backward under ZeRO-3 with a tied output layer: the embedding's backward [z3t]
    tied_end = (np.where(per.plan.sharding >= FSDP, np.maximum(kept + fsdp["zero3_ipg_bucket"] + fsdp["zero3_persistent"]
                                                               + per.zero3["tied_end"] - allocated - ipg - part - norm, 0.0), 0.0)
                if per.zero3 is not None else 0.0 * ipg)
    allocated = allocated + ipg + part + norm + tied_end
    # the BF16_Optimizer's all-reduce after the backward, before the step: the kept tensors and the bucket's copies [bo]
    reduce = np.maximum(kept + reduce_copy - allocated, 0.0)
    allocated, step_peak = allocated + reduce, kept + temps
    opt_step = np.maximum(step_peak - allocated, 0.0)
    z3_step = _zero3_step(per, states, fsdp) if per.zero3 is not None else 0.0 * opt_step
    copies = np.maximum(step_peak + _step_grad_copies(per, states, where) - allocated, 0.0) - opt_step
    z3_term = np.maximum(step_peak + z3_step - allocated, 0.0) - opt_step
    back = _offload_copy_back(per, states, kept, allocated + opt_step + z3_term + copies, where, off_part)  # [ocb]
    return {"zero12_ipg_bucket": ipg, "zero12_grad_partition": part, "zero3_tied_end": tied_end, "bf16_reduce_copy": reduce,
            "optimizer_step": opt_step, "zero3_step_grads": z3_term, "step_grad_copies": copies, "offload_norm_fp64": norm,
            "offload_copy_back": back}


def _reduce_copy(per: _PerLayer, params, end: str = "middle", counts=None):
    """What DeepSpeed's BF16_Optimizer's gradient all-reduce holds beyond the kept tensors at its largest bucket [bo]
    (bytes; 0 where the plan's mode states no allreduce_bucket_params): `params` the stage's parameters a rank, in
    the model code's optimizer groups (stack memory.optimizer_groups), each one flat buffer (grad_accum_bytes an
    element). allreduce_no_retain gathers whole buffers until their elements pass the bucket: the first buffer alone
    where it does (its own view flattened, no copy; the second then alone too, a smaller copy), else both, flattened
    by a torch.cat in the buffer's dtype; allreduce_bucket then casts the flat to the communication dtype (the stack's
    fsdp.grad_reduce_bytes; no copy where the two are one dtype). decay_then_no_decay (Megatron-DeepSpeed's two
    groups): the first group's size read as the stage's parameters (the second's biases and norms a small share of
    them). decay_halves_by_count (BigScience's fork's three groups): each group's size from the stage's weight-decay
    tensors in module order (_decay_halves), the buckets run in turn (_bucket_copies)."""
    if not per.reduce_copying:  # stack data: no mode of the stack states the all-reduce's bucket
        return 0.0 * params
    bucket = per.reduce_bucket
    accum, comm = per.reduce_bytes
    cast = np.where(accum != comm, comm, 0.0)
    halves = (_decay_halves(per, params, end, counts)
              if stack_of(per.settings).memory.optimizer_groups == "decay_halves_by_count" else None)  # stack data
    if halves is not None:
        return np.where(bucket > 0, _bucket_copies(halves, bucket, accum, cast), 0.0)
    return np.where(bucket > 0, params * np.where(params > bucket, cast, accum + cast), 0.0)


def _decay_tensors(kind: LayerKind):
    """The weight-decay tensors of one layer of `kind`, elements before the TP split, in the model code's module order
    (BigScience's ParallelTransformerLayer: query_key_value, dense, then dense_h_to_4h, dense_4h_to_h; the biases and
    the LayerNorms are the no-decay group's), or None for a kind the fork does not build (its stack refuses it:
    runs.layer_kinds)."""
    from .layers.attention import Attention
    from .layers.mlp import DenseMLP, NoBlock

    mx, mlp = kind.mixer, kind.mlp
    if not isinstance(mx, Attention) or not isinstance(mlp, (DenseMLP, NoBlock)):
        return None
    g = 2 if mx.gate else 1
    out = [float((g * mx.a + 2 * mx.k) * mx.d * mx.h), float(mx.a * mx.d * mx.h)]
    if isinstance(mlp, DenseMLP):
        out += [float(mlp.f1 * mlp.h), float(mlp.f * mlp.h)]
    return out


def _decay_halves(per: _PerLayer, params, end: str, counts):
    """[bo] The three optimizer groups of BigScience's Megatron-DeepSpeed fork on a stage, elements a rank: its
    _get_params_for_weight_decay_optimization (bigscience-workshop/Megatron-DeepSpeed @497aa1bf megatron/optimizer/
    __init__.py l. 27-57) walks module.modules() and puts every LayerNorm's parameters and every bias in the no-decay
    group and the rest in a list it cuts in two by count, first_half = params[:count // 2]: (first half, second half,
    no decay). The order is DeepSpeed's PipelineModule's (microsoft/DeepSpeed @77b649d16 deepspeed/runtime/pipe/
    module.py l. 192-200: tied_modules registered before _build adds the stage's layers), so on a stage holding the
    tied embedding (the first, the last, a single stage) its word embedding (vocab-parallel, /tp) and a learned
    position table (whole) come first, then each layer's matrices (_decay_tensors, /tp); an untied output layer
    last. From the stage's layer count in closed form (never layer by layer): N = F + k n tensors, m = N // 2, the
    first half the prefix of m. None where the stage holds several layer kinds or one the fork does not build (the
    two-group reading then)."""
    pc, plan, model = per.pc, per.plan, per.settings.model
    if counts is None or len(pc.layers.kinds) != 1:
        return None
    lay = _decay_tensors(pc.layers.kinds[0])
    if lay is None:
        return None
    tp = plan.tp.astype(np.float64)
    single = plan.pp == 1
    n = np.asarray(counts[0], dtype=np.float64) * np.ones(np.shape(params))
    # the embedding's module: the first stage's, and the last's where tied (the fork ties always, gpt_model.py l. 225-232,
    # 279-287; an untied model's output layer is read as params_of reads it, the last stage's last tensor)
    tied_here = ((end == "first") or (end == "last" and model.tied_embeddings)) | single
    # the tied EmbeddingPipe whole: the word embedding, then a learned position table (built on the last stage too,
    # which params_of does not count there: the no-decay group, params less these, then floored at 0)
    emb = [model.vocab_size * model.hidden_size / tp] + ([float(pc.position) * np.ones(np.shape(tp))] if pc.position else [])
    untied_out = (end == "last") | single if not model.tied_embeddings else np.zeros(np.shape(single), dtype=bool)
    n_front = np.where(tied_here, float(len(emb)), 0.0)
    front = [np.where(tied_here, e, 0.0) for e in emb]
    back = np.where(untied_out, (pc.output or 0) / tp, 0.0)
    k = float(len(lay))
    lay_t = [x / tp for x in lay]
    lay_sum = sum(lay_t, np.float64(0.0) * tp)
    total = sum(front, np.float64(0.0) * tp) + n * lay_sum + back
    m = np.floor((n_front + k * n + np.where(untied_out, 1.0, 0.0)) / 2.0)
    # the prefix of m tensors: within the front, within the layers (whole layers, then the first j of the next), or
    # reaching into the back (an untied output layer: the second half then holds it alone, or nothing)
    pre_front = np.zeros(np.shape(total))
    for i, e in enumerate(front):
        pre_front = pre_front + np.where(m > i, e, 0.0)
    r = np.clip(m - n_front, 0.0, k * n)
    whole, j = np.floor(r / k), r - k * np.floor(r / k)
    part = sum((np.where(j > i, x, 0.0) for i, x in enumerate(lay_t)), np.float64(0.0) * tp)
    first = pre_front + whole * lay_sum + part + np.where(m > n_front + k * n, back, 0.0)
    return first, total - first, np.maximum(params - total, 0.0)


def _bucket_copies(groups, bucket, accum, cast):
    """[bo] The largest copy DeepSpeed's allreduce_no_retain makes over `groups` (the buffers' elements, in order):
    buffers gathered until their elements pass `bucket`, then flushed; a bucket of one buffer flattens to its own
    view (only the cast copy, `cast` bytes an element), of several a torch.cat in the buffer's dtype (`accum`) and
    its cast; the last, partial bucket flushed at the end."""
    pending, cnt, peak = 0.0 * groups[0], 0.0 * groups[0], 0.0 * groups[0]
    for g in groups:
        pending, cnt = pending + g, cnt + 1.0
        full = pending > bucket
        cost = pending * np.where(cnt > 1.0, accum + cast, cast)
        peak = np.where(full, np.maximum(peak, cost), peak)
        pending, cnt = np.where(full, 0.0, pending), np.where(full, 0.0, cnt)
    return np.maximum(peak, pending * np.where(cnt > 1.0, accum + cast, cast))


def zero12_parts(settings: Settings, plan: PlanArrays, pc: ParamCounts, sg: dict) -> dict:
    """What DeepSpeed ZeRO-1/2's gradient reduction allocates [zb], per GPU: ipg_backward, the IPG buffers of the
    optimizer's backward (bytes: reduce_bucket_size elements in the model dtype, two with overlap_comm, the plan's dpo as
    it runs, plan.dp_overlap: one at pp > 1 on a stack whose pipeline runtime turns it off, and under a mode without it;
    0 where the mode has none); ipg_after, the one buffer of the reduction after the backward (bytes); big_out, the
    untied output layer's parameters a rank where above reduce_bucket_size (elements; else 0: its gradient then enters
    the contiguous buffer, and a tied one's hook fires with the embedding's, at the end of the backward)."""
    bucket = float(settings.zero3["reduce_bucket_size"]) if settings.zero3 is not None else 0.0
    one = sg["ipg_buffer"] * bucket * settings.bpp.weights
    tp = plan.tp.astype(np.float64)
    out = (pc.output or 0.0) / tp
    # the layers whose gradients all enter the first bucket before it flushes (after the output layer's, where it fits
    # in the bucket): whole layers of the largest kind's parameters a rank
    etp = etp_of(plan).astype(np.float64)
    layer = np.maximum.reduce([p.dense_per_gpu(tp) + p.experts_per_gpu(etp, plan.ep) for p in pc.kind_params])
    first = np.floor(np.maximum(bucket - np.where(out > bucket, 0.0, out), 0.0) / np.maximum(layer, 1.0))
    return {"ipg_backward": one * (1.0 + dp_overlap(stack_of(settings), plan)), "ipg_after": one, "big_out": np.where(out > bucket, out, 0.0),
            "first_layers": np.where(out > bucket, 0.0, first)}


def _zero12_terms(per: _PerLayer, states: Terms, kept, allocated, holds_loss, loss):
    """(zero12_ipg_bucket, zero12_grad_partition) of a stage [zb]: the IPG buffers on the stage holding the loss, at
    its peak; and the excess over that peak of the gradient reduction's moment. ZeRO-2 (reduction "backward"), from the
    second micro-batch on the stage holding the loss: at the first bucket's flush a new partition buffer of every
    group's partition (the gradients' bytes, the states' gradients term again) beside the one accumulated; where the
    output layer's gradient is above the bucket it is flushed alone at the next hook, right after the output layer's
    backward: the loss's tensors freed, no layer's recompute buffer yet, the output layer's gradient still live;
    otherwise at most reduce_bucket_size elements later, in a layer's backward: the loss's tensors freed and the
    activations of the whole layers whose gradients the first bucket holds (first_layers, the largest kind's
    parameters; the mean layer's activations of one micro-batch, per_layer) freed.
    ZeRO-1 (reduction "after_backward"), every stage: after the last backward the kept tensors (the full
    gradients among the states), the reduction's IPG buffer and the partition buffer (an upper bound by the first
    bucket, at most reduce_bucket_size elements, whose gradients the buffer holds instead of their own tensors: none
    where the first parameter of the group is above the bucket). With overlap_comm (the plan's dpo; without PP: the
    pipeline engine turns it off, engine.py l. 1639-1642) ZeRO-1's hooks reduce in the last backward instead, from its first flush as ZeRO-2's (the full gradients among the states already,
    so no output-layer gradient added; any micro-batch count); the epilogue's moment then holds less (the full
    gradients moved into the buffers and the partition)."""
    z, plan = per.zero12, per.plan
    if z is None:  # a stack setting: no mode of the stack states its step's gradients, its IPG buffer or reduction
        return 0.0 * allocated, 0.0 * allocated
    sg, gb = per.step_grads, per.settings.bpp.gradients
    ipg = np.where(holds_loss, z["ipg_backward"], 0.0)
    out, buf, per_layer, n = loss
    partition = (states.master_weights / per.settings.bpp.master if per.settings.bpp.master > 0 else
                 states.adam / per.settings.bpp.optimizer) * gb
    big = z["big_out"] > 0
    freed = np.where(big, buf, np.minimum(z["first_layers"], n) * per_layer)
    # ZeRO-1 with overlap_comm: the last backward's hooks (as it runs: DeepSpeed turns overlap_comm off for the pipeline
    # model at pp > 1, plan.dp_overlap, the stack's overlap.dp_comm_overlap_with_pp)
    hooks = (sg["after_backward"] > 0) & (dp_overlap(stack_of(per.settings), plan) > 0)
    second = allocated + ipg - out - freed + partition + gb * z["big_out"] * sg["backward"]
    second = np.where(holds_loss & (((sg["backward"] > 0) & (plan.microbatches > 1)) | hooks), second, 0.0)
    after = np.where((sg["after_backward"] > 0) & ~hooks, kept + z["ipg_after"] + partition, 0.0)
    return ipg, np.maximum(np.maximum(second, after) - allocated - ipg, 0.0)


def decoupled_grad(settings: Settings, kind: str | None) -> bool:
    """Whether a sharding mode whose step_grads.fp32_decoupled is `kind` hands the optimizer the gradient shard in its
    own dtype (decoupled_grad, no fp32 copy) for the job [sg]: precision_aware wherever the job runs the stack's
    precision-aware optimizer (Settings.precision_aware), te_master only where TE's FusedAdam also holds the master
    weights (Settings.te_master, plan._bytes_per_param); None never."""
    return bool(kind == "precision_aware" and getattr(settings, "precision_aware", False)
                or kind == "te_master" and getattr(settings, "te_master", False))


def _step_grad_copies(per: _PerLayer, states: Terms, where):
    """What the optimizer step of the plan's sharding mode holds beyond the states at its copies of the gradients
    [sg] (stack_db runs.sharding step_grads): the rank's optimizer partition (L elements, the fp32 master's) flattened
    in the gradient dtype (flat: L x bytes_per_param.gradients) and converted to fp32 (fp32, where the gradients are
    not: L x 4 B), the gradients it still holds being only that partition's where the mode frees the rest before the
    step (partition_only: L x gradient bytes in place of the states' gradients, DeepSpeed ZeRO-1's full ones); the
    gradient norm's fp64 piece before them where larger (norm_fp64: 8 B x min(the stage's largest parameter, L), at most
    the worst rank's: a rank's piece of a parameter is all of it, or the part inside its partition)."""
    sg = per.step_grads
    if not per.step_copies:  # stack data (and the job's gradient bytes): no mode's step copies a gradient [sg]
        return 0.0 * states.gradients
    bpp = per.settings.bpp
    local = (states.master_weights / master_bytes(per.settings, per.plan) if bpp.master > 0 else
             states.adam / bpp.optimizer if bpp.optimizer > 0 else states.weights / bpp.weights)
    held = np.where(sg["partition_only"] > 0, local * bpp.gradients, states.gradients)
    fp32 = STEP_FP32_GRAD_BYTES if bpp.gradients < STEP_FP32_GRAD_BYTES else 0.0  # .float() of fp32: the tensor itself
    # (none where the precision-aware optimizer reads the shard itself as decoupled_grad: Megatron-FSDP's whenever it
    # runs [mg], the distributed optimizer's where TE's FusedAdam holds the master weights [sg])
    st = per.settings
    fp32 = fp32 * (1.0 - sg["decoupled_precision_aware"] * float(decoupled_grad(st, "precision_aware"))
                   - sg["decoupled_te_master"] * float(decoupled_grad(st, "te_master")))
    counts, emb, out, experts = where
    # the routed experts' partition left on the GPU, as `local` (CPU offload [off] steps the rest on the host: its
    # expert groups' copies are the host's too)
    if per.offload[0]:  # a job setting
        experts = experts * (1.0 - per.offload[0])
    piece, (groups, step_l) = _norm_piece(per, local, (counts, emb, out, experts))
    # the flat copy in the gradients' dtype, or in fp32 where each gradient is converted first (flat_fp32: FP16_Optimizer)
    flat = np.where(sg["flat_fp32"] > 0, np.maximum(bpp.gradients, STEP_FP32_GRAD_BYTES), bpp.gradients)
    copies = step_l * (sg["flat"] * flat + sg["fp32"] * fp32)
    norm = sg["norm_fp64"] * STEP_NORM_FP64_BYTES * piece
    return held - states.gradients + np.maximum(copies, norm)


def _norm_piece(per: _PerLayer, local, where):
    """(the largest piece of one parameter inside a rank's partition of `local` elements, in elements; (DeepSpeed MoE's
    expert groups on, the largest group's partition): _largest_group's) of a stage, where = (counts, holds the
    embedding, holds the output layer, the routed experts' partition): min(the stage's largest parameter, the
    partition), the largest a layer GEMM's weight N x K, the embedding on the first stage, the output layer on the last
    (V x h / tp); under DeepSpeed MoE's groups the dense group's or an expert group's, the larger [sg]. At most the worst
    rank's: a rank's piece of a parameter is all of it, or the part inside its partition."""
    counts, emb, out, experts = where
    kinds, (emb_p, out_p), kinds_e = per.largest_params
    layer = _of_kinds(kinds, counts)
    largest = np.maximum(layer, np.maximum(np.where(emb, emb_p, 0.0), np.where(out, out_p, 0.0)))
    groups, step_l, group_e, layer_e = _largest_group(per, local, counts, experts)
    piece = np.where(groups, np.maximum(np.minimum(largest, local - experts), np.minimum(layer_e, group_e)),
                     np.minimum(np.maximum(largest, layer_e), local))
    return piece, (groups, step_l)


def _offload_norm_fp64(per: _PerLayer, kept, allocated, where, off_part):
    """DeepSpeed ZeRO-1/2 offload's fp64 copy of one parameter's gradient piece for its norm [onf], the moment's excess
    over `allocated` (the peak and the reduction's terms before it): the kept tensors (ZeRO-1's whole gradients among
    the states; ZeRO-2's none but the staging buffer), the mode's IPG buffers and STEP_NORM_FP64_BYTES x the largest
    piece of one parameter in the rank's whole partition (_norm_piece; offloaded or not, every piece is normed on the
    GPU). Below FSDP only, on a mode that takes its norm in fp64 (step_grads norm_fp64), with ZeRO-Offload's copy-back
    (per.copy_back > 0: job offload_optimizer cpu on a zero_offload stack); 0 elsewhere (job settings and stack data)."""
    z = per.zero12
    if per.copy_back == 0.0 or per.largest_params is None or z is None:  # no ZeRO-Offload, or no IPG buffer stated
        return 0.0 * allocated
    sg = per.step_grads
    local, _ = off_part
    counts, emb, out, experts = where
    piece, _ = _norm_piece(per, local, (counts, emb, out, experts))
    # the IPG buffers then: the backward's (ZeRO-2 in the engine's backward, on the stage holding the loss), else the
    # one the reduction after the backward allocates (ZeRO-1; under PP the pipeline engine's other stages, [zb])
    after = (sg["after_backward"] > 0) | ~np.asarray(where[2], dtype=bool)
    ipg = np.where(after, z["ipg_after"], z["ipg_backward"])
    moment = kept + ipg + STEP_NORM_FP64_BYTES * piece
    return np.where((per.plan.sharding < FSDP) & (sg["norm_fp64"] > 0), np.maximum(moment - allocated, 0.0), 0.0)


def _largest_group(per: _PerLayer, local, counts, experts):
    """(DeepSpeed MoE's expert groups on (bool array), the largest optimizer group's partition (elements), the largest
    expert group's partition, the largest routed expert weight a rank) of a stage whose rank's partition is `local`
    elements, `experts` of them the routed experts' [sg]: DeepSpeed steps its parameter groups one at a time; the
    routed experts' groups (stack step_grads moe_group_params) hold at most moe_group_params elements a rank (one larger
    parameter alone) before their partition over the expert-data-parallel ranks; the dense parameters one group (an
    upper bound: Megatron-DeepSpeed's no-weight-decay group of biases and norms is apart, and small)."""
    sg = per.step_grads
    layer_e = _of_kinds(per.largest_params[2], counts)
    if sg is None:  # stack data: no mode states its step's gradients, nor DeepSpeed MoE's groups
        return np.zeros(np.shape(local), dtype=bool), local, 0.0 * local, layer_e
    groups = sg["moe_group_params"] > 0
    d_e = np.where(per.plan.sharding >= ZERO1, expert_shard(per.plan), 1).astype(np.float64)
    group_e = np.minimum(experts * d_e, np.maximum(sg["moe_group_params"], layer_e)) / d_e
    return groups, np.where(groups, np.maximum(local - experts, group_e), local), group_e, layer_e


def _offload_copy_back(per: _PerLayer, states: Terms, kept, allocated, where, off_part):
    """DeepSpeed ZeRO-1/2 offload's copy of the updated partition up to the GPU, the moment's excess over `allocated`
    (the peak and the step's terms before it) [ocb]: after the CPU step of each parameter group, the kept tensors less
    the gradients the reduction's epilogue freed (every one but the staging buffer: ZeRO-1's whole gradients; ZeRO-2
    keeps none on the GPU) and the group's fp32 partition on the GPU (offload.copy_back_gpu_bytes an element, the
    largest group's: _largest_group). Below FSDP only (ZeRO-3's copy converts on the CPU); 0 without offload or on a
    stack whose offload makes no such copy (job settings and stack data, not searched quantities)."""
    if per.copy_back == 0.0 or per.largest_params is None:  # no ZeRO-Offload copy-back (the staging buffer's data too)
        return 0.0 * allocated
    local, staging = off_part
    counts, _, _, experts = where
    _, group, _, _ = _largest_group(per, local, counts, experts)
    moment = kept - (states.gradients - staging) + per.copy_back * group
    return np.where(per.plan.sharding < FSDP, np.maximum(moment - allocated, 0.0), 0.0)


def _of_kinds(per_kind: list, counts) -> np.ndarray:
    """The largest of a per-layer-kind figure among the kinds a stage holds (counts (K, ...))."""
    return (per_kind[0] if len(per_kind) == 1 else
            np.maximum.reduce([np.where(counts[i] > 0, k, 0.0) for i, k in enumerate(per_kind)]))


def _largest_params(pc: ParamCounts, plan: PlanArrays, ctx: Ctx):
    """([the largest dense weight of each layer kind], (the embedding's, the output layer's), [the largest routed
    expert weight of each layer kind]), parameters per GPU: a layer kind's GEMM weights N x K (zero3_modules' rows, one
    tensor each; the routed experts' rows, EXPERT_GEMMS, one expert's), the embedding and output layer V x h / tp [sg]."""
    tp = plan.tp.astype(np.float64)

    def largest(k, experts: bool):
        return np.maximum.reduce([s.N * s.K + 0.0 * tp for s, _ in k.mixer.gemms(ctx) + k.mlp.gemms(ctx)
                                  if (s.name in EXPERT_GEMMS) == experts] or [0.0 * tp])

    return ([largest(k, False) for k in pc.layers.kinds], (pc.embedding / tp, (pc.output or pc.embedding) / tp),
            [largest(k, True) for k in pc.layers.kinds])


def _zero3_step(per: _PerLayer, states: Terms, fsdp: dict):
    """What DeepSpeed ZeRO-3's optimizer step holds beside the states and the step's temporaries at its worst statement
    [z3s]: the IPG buffer (contiguous_gradients; without it the bucket's pending gradients, reduced by the backward's
    epilogue: none [z3g]), the persistent parameters and, for the largest sub-group, min(local partition,
    sub_group_size) elements flattened in the model dtype and converted to fp32 at once (ZERO3_FP32_GRAD_BYTES)."""
    bpp = per.settings.bpp
    local = states.master_weights / bpp.master if bpp.master > 0 else states.weights / bpp.weights
    sub = np.minimum(local, per.zero3["sub_group"]) * (bpp.weights + ZERO3_FP32_GRAD_BYTES)
    ipg = fsdp["zero3_ipg_bucket"] * per.zero3["contiguous"]
    return np.where(per.plan.sharding >= FSDP, sub + ipg + fsdp["zero3_persistent"], 0.0)


def _rope_bytes(per: _PerLayer, counts, stages: float):
    """The rotary tables a rank holds, for `counts` layers of each kind on it and `stages` pipeline
    stages on the rank (2 with DualPipe's twin), each of plan.vpp model chunks."""
    # the rotary embedding's tables, non-trainable buffers kept all step [tt9]: one per attention
    # layer the stage holds, or one per model part (chunk) on the rank
    rope = (weighted(counts, per.rope_layer) if per.rope_mode == "layer"
            else per.rope_model * (per.plan.vpp * stages) if per.rope_mode == "model" else 0.0)
    if per.rope_mode == "model_cp":  # Megatron's lru_cache'd tables [mr]: per model chunk, or per MLA layer (at most 32)
        mla = weighted(counts, per.rope_cp_mla)
        chunks = per.plan.vpp * stages
        rope = per.rope_cp_table * (np.minimum(mla, MEGATRON_ROPE_LRU) if any(per.rope_cp_mla) else chunks)
    return rope + np.zeros(np.shape(per.plan.tp))


# fp32 elements a router with an expert score bias keeps as buffers, per bias element: the bias and its token counter
# (Megatron-LM @d98e8a64 transformer/moe/router.py l. 180-198 'expert_bias' and 'local_tokens_per_expert';
# torchtitan @e347b1e5e models/moe/moe.py l. 456-471 "expert_bias" and "tokens_per_expert": layers/common.py [sb]);
# on a stack whose MoE keeps the counter on every MoE layer (stack memory.moe_token_counter: torchtitan's
# "tokens_per_expert", registered with or without the bias) the bias alone, the counter priced per MoE layer
ROUTER_BUFFERS_PER_SCORE_BIAS = 2.0
FP32_BUFFER_BYTES = 4.0  # both fp32 (torch.float32 in both sources)


def _model_buffers(per: _PerLayer, counts, dual: bool, holds_loss) -> np.ndarray:
    """The model's buffers a rank holds (model_buffers): the rotary tables (_rope_bytes; dual: DualPipe's two stages)
    and the routers' score-bias buffers (_router_buffer_bytes)."""
    counter = bool(stack_of(per.settings).memory.moe_token_counter)  # a stack setting, not a searched quantity
    return (_rope_bytes(per, counts, 2.0 if dual else 1.0)
            + _router_buffer_bytes(per.pc, counts, holds_loss, counter, per.settings.model.mtp_layers))


def _router_buffer_bytes(pc: ParamCounts, counts, holds_loss, counter: bool = False, mtp_layers: int = 0) -> np.ndarray:
    """The routers' buffers a stage holds (layers/common.py [sb]): 2 x 4 B x E a MoE layer with an expert score bias
    (the bias and its token counter); on a stack whose MoE keeps the counter on every MoE layer (`counter`: stack
    memory.moe_token_counter, torchtitan's tokens_per_expert) 4 B x E the bias and 4 B x E the counter a MoE layer,
    with or without the bias. Its layers' (counts) and the MTP modules' (mtp_layers, each a layer of the MTP kind) on
    the stage holding the loss; no gradient, no optimizer state, never sharded (FSDP and the distributed optimizer
    shard parameters only), every expert's count on every rank (not divided by EP)."""
    elems = weighted(counts, [np.float64(p.score_bias) for p in pc.kind_params])
    elems = elems + np.where(holds_loss, np.float64(pc.mtp.score_bias), 0.0)
    if not counter:
        return ROUTER_BUFFERS_PER_SCORE_BIAS * FP32_BUFFER_BYTES * elems
    experts = [np.float64(k.mlp.num_experts if k.has_experts else 0) for k in pc.layers.kinds]
    built = min(mtp_layers, 1) if pc.layers.mtp_shared else mtp_layers  # the routers built: one module's if shared
    mtp = np.float64(built * sum(experts[k] for k in pc.layers.mtp_kinds)) if mtp_layers else np.float64(0.0)
    tally = weighted(counts, experts) + np.where(holds_loss, mtp, 0.0)
    return FP32_BUFFER_BYTES * (elems + tally)


# the plan fields the model states of a stage read (_stage_states; its KeyedPlan refuses any other)
STATE_FIELDS = ("tp", "cp", "pp", "dp", "ep", "etp", "sharding", "smode", "shard", "precision", "f8r", "fge",
                "vpp", "split_emb", "split_loss", "split_front", "split_first", "split_last")


def _stage_states(per: _PerLayer, plan, end: str, counts, twin=None):
    """(model state terms, quantized weight copies, dense + expert parameters, the routed experts' optimizer partition
    in elements, the rank's whole optimizer partition in elements, offloaded or not) of one stage
    holding `counts` (K, ...) layers (twin: DualPipe's second stage (counts, end)):
    params_of, sharded by model_state_terms [1] (the routed experts over their own shard
    group), less the weight bytes fp8 parameters save, and TE's quantized copies [11]."""
    settings, pc = per.settings, per.pc
    vd = vocab_tp_divisor(settings, plan.tp)  # the largest TP rank's vocabulary rows [vs]
    copy = bool(stack_of(settings).memory.mtp_embedding_copy)  # the MTP stage's own embedding [me] (a stack setting)
    dense, experts = params_of(pc, settings.model, plan, counts, end, vd, copy)
    if twin is not None:
        d2, e2 = params_of(pc, settings.model, plan, twin[0], twin[1], vd, copy)
        dense, experts = dense + d2, experts + e2
    accum = grad_accum_bytes(stack_of(settings), plan)  # the mode's gradient accumulation buffer [bo]
    off = offload.switches(settings)  # [off]
    mw = master_bytes(settings, plan)  # [mw]
    mu_d, mu_e = 0.0, 0.0  # the parameters Muon steps [mu] (the job's optimizer, a job setting)
    if settings.optimizer == "muon":
        mu_d, mu_e = muon_params_of(pc, settings.model, plan, counts, end, copy)
        if twin is not None:
            m2, e2 = muon_params_of(pc, settings.model, plan, twin[0], twin[1], copy)
            mu_d, mu_e = mu_d + m2, mu_e + e2
    # the optimizer's shard groups: the shard group's, or the whole dp x cp under HSDP's outer-DP sharding [oo]
    opt_d, opt_e = optimizer_shards(stack_of(settings), plan, settings.mfsdp_outer_optim,
                                    experts=bool(pc.routed_experts or pc.mtp.expert))  # opt_e read only with experts
    states = model_state_terms(settings.bpp, plan, dense, fsdp=per.fsdp, accum=accum, off=off, master=mw, muon=mu_d,
                               opt_shard=opt_d)
    if settings.optimizer == "muon" and not settings.optimizer_whole_tensors:  # job settings: the default layout [mu]
        # each stage a GPU holds its own model chunks' layouts (DualPipe's twin too, were Muon run with it: no stack
        # runs both, plan._optimizer refuses muon on the deepseek stack), so their excesses add (muon_layout_excess)
        pad, worst = 0.0, 0.0
        for c, e in ((counts, end),) + (((twin[0], twin[1]),) if twin is not None else ()):
            m = muon_params_of(pc, settings.model, plan, c, e, copy)
            chunked = muon_largest_params(pc, settings.model, plan, c, e, copy, chunks=True)
            first, each, others = muon_largest_params(pc, settings.model, plan, c, e, copy, parts=True)
            for i, shard in ((0, plan.shard * plan.cp), (1, expert_shard(plan))):
                p_i, w_i = muon_layout_excess(settings, plan, m[i], first[i], shard, chunked[i],
                                              (first[i], each[i], others))
                pad, worst = pad + p_i, worst + w_i
        worst = worst * (1.0 - off[0])
        b = settings.bpp
        add = {"weights": pad * b.weights, "gradients": pad * b.gradients, "master_weights": worst * mw,
               "adam": worst * MUON_MOMENTUM_BYTES}
        states = Terms(**{k: states[k] + add[k] if k in add else states[k] for k in states})
    if settings.optimizer_whole_tensors:  # a job setting: the rank holding the stage's largest tensors whole [mu]
        add = whole_tensor_state_bytes(pc, settings.model, plan, counts, end, vd, mw, settings.bpp.optimizer,
                                       (mu_d, mu_e))
        states = Terms(**{k: states[k] + add[k] if k in add else states[k] for k in states})
    e_part = 0.0 * dense  # the routed experts' optimizer partition, elements (memory.py [sg])
    if pc.routed_experts or pc.mtp.expert:
        e = model_state_terms(settings.bpp, plan, experts, shard=expert_shard(plan), fsdp=per.fsdp, accum=accum, off=off,
                              master=mw, muon=mu_e, opt_shard=opt_e)
        states = Terms(**{k: states[k] + e[k] for k in states})
        e_part = experts / np.where(plan.sharding >= ZERO1, opt_e, 1)
    # the optimizer partition (elements) whatever offload moves: the master's (model_state_terms' d), read only by
    # ZeRO-Offload's copy-back [ocb] (a job setting: 0.0 elsewhere, not computed)
    local = 0.0
    if per.copy_back:
        local = dense / np.where(plan.sharding >= ZERO1, opt_d, 1) + e_part
    # TE's quantized weight copies, and the weight bytes fp8 parameters save [11]
    copies, saved = quantized_weight_terms(settings, plan, pc, counts if twin is None else counts + twin[0], end)
    states = Terms(**{k: states[k] - saved if k == "weights" else states[k] for k in states})
    return states, copies, dense + experts, e_part, local


def _largest_buffer(per: _PerLayer, counts) -> np.ndarray:
    """One layer's recompute buffer: the largest among the kinds the stage holds (counts (K, ...))."""
    if len(per.buffers) == 1:
        return per.buffers[0]
    return np.maximum.reduce([np.where(counts[i] > 0, b, 0.0) for i, b in enumerate(per.buffers)])


def _end_of_backward(per: _PerLayer, counts) -> np.ndarray:
    """What FSDP2 holds beside the states and every sharded gradient at the reduce-scatter of one
    of the last units of the backward [tt7]: the embedding's, its bf16 unsharded gradient (2 B)
    and the fp32 reduce-scatter input (4 B) per parameter (V h / t); or the first block's, the
    same 6 B plus its bf16 unsharded parameters (2 B) per parameter, while its backward holds
    the recompute buffer (the largest kind's here). The root unit before torchtitan #1094 (a job
    setting, [tt10]) is reduced last, embedding and output layer together, and the output layer's bf16
    gradient waits beside the first block's."""
    plan, pc = per.plan, per.pc
    block = unit_params(pc, plan, layers_only=True)
    buf = _largest_buffer(per, counts)
    grads = ACT_BYTES + per.fsdp.grad_reduce_bytes  # the unit's bf16 gradient and its reduce-scatter input
    out = (pc.output or 0.0) / per.vdiv if per.settings.fsdp_root_unit else 0.0
    return np.where(plan.sharding >= FSDP, np.maximum(grads * (pc.embedding / per.vdiv + out),
                                                      grads * block + per.layer_gathered + buf + ACT_BYTES * out), 0.0)


def _held_activations(per: _PerLayer, held, r):
    """The layers' activations of the micro-batches a stage holds (held: layers x micro-batches
    of each kind), a share r of its layers re-run under full recompute (their inputs kept)."""
    return sum((held[i] * ((1.0 - r) * per.stored[i] + r * per.layer_input[i]) for i in range(len(per.stored))),
               np.float64(0.0))


def capacity(settings: Settings) -> tuple[float, float]:
    """(HBM bytes, usable bytes = HBM x (1 - headroom)). The HBM is what the device reports to
    CUDA where the catalog entry gives a measurement (Hardware.hbm_visible_GiB: H100 80 GB 79.09
    GiB, not 80e9 B = 74.5 GiB), else the datasheet's hbm_GB x 1e9 (Hardware.hbm_bytes)."""
    cap = settings.hardware.hbm_bytes
    return cap, cap * (1.0 - settings.headroom)


# the largest reserved / allocated ratio at the peak measured on a public run [13]: the top of
# the fragmentation band (torchtitan PR #112, FSDP1 + SP, default allocator, loss parallel off)
RESERVED_OVER_ALLOCATED_MAX = 1.45

# the components of grouped() that sum to total_bytes (the peaks are views of the same terms)
COMPONENTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes")


def grouped(t: Terms) -> dict[str, np.ndarray]:
    """The stable JSON grouping: weights, gradients, optimizer (master + Adam),
    activations, other; and the two peaks the caching allocator knows: allocated (the live
    tensors at the worst moment of the step) and reserved (allocated plus what the allocator
    holds and cannot hand to the peak), both without what lives outside the allocator (the
    CUDA context and NCCL reserve, TP overlap's buffers: outside_bytes) that the total adds; and the top of the reserved peak's fragmentation band
    [13] (reserved_bytes is its bottom)."""
    return {
        "weights_bytes": t.weights,
        "gradients_bytes": t.gradients,
        "optimizer_bytes": t.master_weights + t.adam,
        "activations_bytes": t.sum(*ACTIVATION_TERMS),
        "other_bytes": t.sum(*OTHER_TERMS),
        "total_bytes": t.total,
        "allocated_bytes": allocated_bytes(t),
        "reserved_bytes": reserved_bytes(t),
        "reserved_high_bytes": reserved_high_bytes(t),
    }


def reserved_bytes(t: Terms) -> np.ndarray:
    """The caching allocator's peak reserved bytes: everything but what lives outside it
    (outside_bytes: the reserve, TP overlap's buffers)."""
    return t.total - outside_bytes(t)


def outside_bytes(t: Terms) -> np.ndarray:
    """What the total holds outside the caching allocator (OUTSIDE_TERMS): the CUDA context and
    NCCL reserve, TP overlap's buffers [ub], the MoE dispatcher's [ep] and NCCL's NVLS buffers [nv] (each
    where Terms has it)."""
    return t.sum(*(k for k in OUTSIDE_TERMS if k in t.keys()))


# the plan fields TP overlap's buffers read (tp_overlap_bytes)
TP_OVERLAP_FIELDS = ("tpo", "tp", "cp", "mbs", "seq", "precision")
# Transformer Engine's userbuffers of initialize_ub's default methods [ub], by the run's TE release
# (planner/te_version.py TE_USERBUFFERS): the all-gather layers' (uint8 under fp8: qkv_fprop, fc1_fprop,
# proj_dgrad, fc2_dgrad, qkv_dgrad, fc1_dgrad, and from 2.7 proj_wgrad, fc2_wgrad) and the reduce-scatter
# layers' (bf16: proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad); the stack's pinned release (2.17.1): 8 and 4
def cublas_workspace_bytes(config: str) -> float:
    """Bytes of one PyTorch cuBLAS workspace under CUBLAS_WORKSPACE_CONFIG `config` (":SIZE:COUNT"
    pairs, SIZE in KiB): the sum of SIZE x 1024 x COUNT over the pairs [ws]."""
    return float(sum(int(size) * 1024 * int(count) for size, count in re.findall(r":([0-9]+):([0-9]+)", config)))


# torch's symmetric-memory workspace of a TP group [ub]: the largest request, a reduce-scatter's two
# output chunks of T / t rows in bf16
SYMM_MEM_CHUNKS = 2


def dispatcher_buffer_bytes(settings: Settings, plan, ctx: Ctx) -> np.ndarray:
    """Bytes per GPU of the MoE dispatcher's communication buffers [ep] (planner/ep_buffers.py),
    over the expert-TP x EP group Megatron's flex dispatcher builds them on: 0 for a dense model.
    Hybrid-EP's are sized by each rank with its own ranks per NVLink domain: HybridEPBuffer takes
    num_of_ranks_per_node = the group members the rank itself reaches over NVLink
    (detect_accessible_ranks, no collective agreement on it; Megatron passes none), its nodes the
    group / that; so the rank's piece (comm.domain_pieces, counted rank by rank at the folded grid's
    tp_ep stride, as step.ep_comm places the group), and the heaviest rank's buffers, the largest
    over the job's pieces, are the GPU's."""
    if settings.model.moe is None:  # a model property, not a searched quantity
        return np.zeros(np.shape(plan.tp))
    # each plan's dispatcher (_per_dispatcher: the job's, or fit's dispatcher search's per plan)
    return _per_dispatcher(settings, plan, lambda d: _dispatcher_buffers(settings, plan, ctx, d))


def _dispatcher_buffers(settings: Settings, plan, ctx: Ctx, dispatcher: str) -> np.ndarray:
    """dispatcher_buffer_bytes of every plan under `dispatcher`."""
    model = settings.model
    etp = etp_of(plan)
    if dispatcher != "hybridep":  # a job-wide setting (per plan in fit's dispatcher search: _per_dispatcher)
        b = ep_buffer_bytes(dispatcher, model.hidden_size, plan.ep, ctx.T / ctx.rep_div,
                            model.moe.num_experts, 1.0, etp)
        return np.broadcast_to(b, np.shape(plan.tp)).astype(np.float64)
    strides = comm.strides_by_code(plan.order, tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    group = group_size(HYBRIDEP, plan.ep, etp).astype(np.int64)
    pieces = comm.domain_piece_columns(group, group_stride(HYBRIDEP, plan, strides),
                                       comm.comm_params(settings.hardware), settings.gpus)
    b = np.zeros(np.shape(plan.tp))
    tokens = hybridep_tokens(settings, plan, ctx)
    for j in range(pieces.shape[-1]):  # each distinct piece a column (the last repeats the largest)
        b = np.maximum(b, ep_buffer_bytes("hybridep", model.hidden_size, plan.ep, tokens,
                                          model.moe.num_experts, pieces[..., j], etp))
    return b.astype(np.float64)


HYBRIDEP_CONFIGURER_MIN_TOKENS = 512  # csrc/hybrid_ep/config.cuh @94a9f8f Configurer l. 385-387: max(tokens, 512) [ep]


def hybridep_tokens(settings: Settings, plan, ctx: Ctx) -> np.ndarray:
    """The tokens per rank Hybrid-EP's buffers are sized for under the stack's rule (runs.hybridep_buffer_tokens [ep]),
    at least the Configurer's 512 on either (DeepEP's floor, whichever trainer builds the buffer): dispatch, the
    micro-batch's T / rep_div; local_batch, local batch x seq / (cp x tp), the local batch the plan's micro-batch
    without PP and gbs / dp with it."""
    runs = stack_of(settings).runs
    if runs is None or runs.hybridep_buffer_tokens == "dispatch":  # a stack setting
        t = np.asarray(ctx.T / ctx.rep_div, dtype=np.float64)
    else:
        local = np.where(plan.pp > 1, plan.gbs / np.maximum(plan.dp, 1), plan.mbs).astype(np.float64)
        t = local * plan.seq / (plan.cp * plan.tp)
    return np.maximum(t, float(HYBRIDEP_CONFIGURER_MIN_TOKENS))


# the plan fields nvls_buffer_bytes reads (search.with_order_memory prices it once per distinct tuple of them)
NVLS_FIELDS = ("tp", "cp", "pp", "dp", "ep", "etp", "order")


def nvls_buffer_bytes(settings: Settings, plan) -> np.ndarray:
    """Bytes per GPU of NCCL's NVLS buffers [nv] (planner/nvls_buffers.py): on hardware with NVLS and NCCL_NVLS_ENABLE
    not 0 (comm.nvls_enabled), for each of the GPU's TP group (tp ranks, stride tp's), gradient group (dp x cp
    ranks tp apart in the grid: comm.folded_stride) and, with MoE, expert-data-parallel group (tp cp dp / (etp ep)
    ranks etp ep apart), nvls_comm_bytes of its members in the GPU's NVLink domain (comm.domain_piece_columns: each
    rank its own piece, the heaviest rank's figure the GPU's), with the channels of a group inside one domain or
    spanning domains; 0 elsewhere. The groups are placed at the plan's rank order (plan.order, codes: an order that
    puts DP farther out leaves fewer of its ranks in a domain); fit prices a candidate's memory at its lightest
    order and adds the difference at each other order (search.order_extra)."""
    hw = settings.hardware
    shape = np.shape(plan.tp)
    if not comm.nvls_enabled(settings.nccl_nvls_enable, getattr(hw, "nvls", False)):  # job / hardware settings
        return np.zeros(shape, dtype=np.float64)
    cc = comm.gpu_capability(hw)  # (major, minor) or None: assumed Hopper's rule (nvls_channels)
    params = comm.comm_params(hw)
    strides = comm.strides_by_code(plan.order, tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    tp, cp, dp = (np.asarray(x, dtype=np.int64) for x in (plan.tp, plan.cp, plan.dp))
    groups = [(tp, strides["tp"]), (dp * cp, comm.folded_stride(dp * cp, tp, plan, strides))]
    if settings.model.moe is not None:  # a model property
        etp = np.asarray(etp_of(plan), dtype=np.int64)
        ep = np.asarray(plan.ep, dtype=np.int64)
        edp = np.maximum(tp * cp * dp // np.maximum(etp * ep, 1), 1)
        groups.append((edp, comm.folded_stride(edp, etp * ep, plan, strides)))
    total = np.zeros(shape, dtype=np.float64)
    for size, stride in groups:
        pieces = comm.domain_piece_columns(size, stride, params, settings.gpus)
        channels = nvls_channels(cc, np.min(pieces, axis=-1) < size)  # the group spans NVLink domains
        total = total + np.max(nvls_comm_bytes(pieces, channels[..., None]), axis=-1)
    return np.broadcast_to(total, shape).astype(np.float64)


def tp_overlap_bytes(settings: Settings, plan) -> tuple[np.ndarray, np.ndarray]:
    """(outside the allocator, cuBLAS workspaces through it) bytes per GPU of a plan's TP
    communication overlap [ub], 0 where it is off (tpo 0 or tp 1): the stack's userbuffers
    (24 B x T h in bf16, 16 with fp8, + 24 with bf16 layers under fp8) or symmetric-memory
    workspace (4 B x T h / t), T = micro-batch x seq / cp; and the overlapped GEMMs' own
    workspaces (stack memory.tp_overlap_workspaces x hardware te_workspace_MiB, where
    Transformer Engine's GEMMs run). Reads only TP_OVERLAP_FIELDS of the plan."""
    from .layers.common import mb_tokens

    mem, h = stack_of(settings).memory, float(settings.model.hidden_size)
    on = (np.asarray(plan.tpo) > 0) & (np.asarray(plan.tp) > 1)
    T = mb_tokens(plan).astype(np.float64)
    te_version = run_te_version(settings.te_version, stack_of(settings))  # the run's Transformer Engine, else the stack's
    ag, rs, beside = te_userbuffers(te_version) if te_version else (0, 0, True)  # userbuffers need one (schema)
    if mem.tp_overlap_buffers == "userbuffers":
        fp8 = np.asarray(plan.precision) == FP8
        per_token = h * (ag * np.where(fp8, 1.0, ACT_BYTES) + rs * ACT_BYTES)
        if any(settings.bf16_layers):  # the NONE set beside the FP8 one (--first-last-layers-bf16)
            per_token = per_token + np.where(fp8, (ag + rs) * ACT_BYTES * h, 0.0)
        outside = T * per_token
    elif mem.tp_overlap_buffers == "symmetric_memory":
        outside = SYMM_MEM_CHUNKS * ACT_BYTES * T * h / np.asarray(plan.tp, dtype=np.float64)
    else:
        outside = np.zeros(np.shape(T))
    te = mem.te_workspace and settings.transformer_impl != "local"
    # before TE 2.10 the overlapped GEMMs' workspaces replace the plain one (the workspaces term's), so one fewer
    n_ws = mem.tp_overlap_workspaces - (0 if beside or mem.tp_overlap_workspaces == 0 else 1)
    ws = n_ws * (settings.hardware.te_workspace_MiB or 0.0) * 2.0**20 if te else 0.0
    return np.where(on, outside, 0.0), np.where(on, ws, 0.0)


def tp_overlap_total(settings: Settings, plan) -> np.ndarray:
    """The bytes TP overlap adds to a plan's total (memory_total), as _stage_terms adds them on
    every stage: the buffers outside the allocator, and the workspaces with the allocator's
    slack on them (allocator_slack = slack x allocated). A search prices memory once per
    candidate with the stack's variant 0 (search.py); a variant whose TP overlap differs adds
    tp_overlap_total(variant) - tp_overlap_total(variant 0), which is how it is gated."""
    outside, ws = tp_overlap_bytes(settings, plan)
    kn = settings.knobs
    slack = stack_of(settings).memory.allocator_slack if kn.allocator_slack is None else kn.allocator_slack
    return outside + ws * (1.0 + slack)


def reserved_high_bytes(t: Terms) -> np.ndarray:
    """The top of the fragmentation band [13]: the allocated peak at the largest measured
    reserved / allocated ratio, never below the reserved point estimate."""
    return np.maximum(reserved_bytes(t), allocated_bytes(t) * RESERVED_OVER_ALLOCATED_MAX)


def allocated_bytes(t: Terms) -> np.ndarray:
    """The peak allocated bytes: the reserved less the allocator's pools and slack."""
    return reserved_bytes(t) - t.allocator_slack - t.stream_pools


def reported_bytes(settings: Settings, t: Terms) -> np.ndarray:
    """The peak memory the stack itself logs (stack_db memory.reports): PyTorch's max reserved
    excludes the CUDA context and NCCL's buffers (the `reserve` term) and TP overlap's buffers
    (outside the caching allocator); max allocated also excludes the allocator's slack."""
    rep = stack_of(settings).memory.reports
    return allocated_bytes(t) if rep == "max_allocated" else reserved_bytes(t)
