"""Step time of a training plan, and MFU/HFU. Units: seconds, FLOPs, tokens/s.

step = compute + tp_comm + cp_comm (exposed) + pp_comm + dp_comm_exposed + bubble + optimizer
       (+ moe_permute + moe_host + ep_comm for an MoE model: moe.py, step.moe_host)
       (+ muon_ns, Muon's Newton-Schulz GEMMs at the optimizer step, for a job of optimizer muon: [28])

All terms are per GPU on the critical pipeline stage: of the first stage, with its layers, a
middle stage, with ceil(L/(p v)) layers per chunk, and the last stage, with its layers plus the
output layer and the loss (pipeline.stage_layers; each plus the bf16 layers it holds,
bf16_end_layers; under DualPipe the end rank, which runs stage 0 and stage p - 1 for half the
micro-batches each [8]), the one whose micro-batch, its compute plus its own exposed TP, CP, PP
and EP communication (each counting that stage's layers), takes longest (critical_stage); every
term is that one stage's, never the heaviest of each. For one optimizer
step of m = global_batch / (dp x micro_batch) micro-batches. Every function takes a
PlanArrays of 0-d or 1-d arrays.

Layers (planner/layers/): each kind of layer a model has is priced once per plan from its
blocks' own GEMM shapes, core FLOPs, memory-bound bytes and collectives; a stage's compute is
the sum over the layers it holds. What overlaps (TP collectives behind a layer's GEMMs, the
pipeline's p2p behind a chunk, the DP traffic behind a micro-batch, the EP all-to-alls behind
the partner micro-batch's layer) is taken against the stage's mean layer: a named
approximation, exact for a model of one kind.

Compute, per layer and micro-batch of T = micro_batch x seq / cp tokens (after TP splits t):
  GEMMs  QKV [T, (a/t + 2 max(k/t, 1)) d, h], output [T, h, a d/t], MLP up [T, f1/t, h],
         MLP down [T, h, f/t] (f1 = 2f gated); output layer [T, V/t, h] on the last stage;
         forward 1x, backward 2x the forward FLOPs at the same shape's efficiency
         (dgrad + wgrad) [1]; time = (FLOPs / K-loop rate + output write) / wave efficiency (compute [5a]).
  attention core (FlashAttention, causal: the kernel skips masked blocks) 4 T a d / t x the
         mean keys a query attends to (s/2 global; a window or chunk fewer: layers/attention.py)
         FLOPs forward, 2.5x that backward, at its own efficiency (compute.py [7]; by head dim [7b]); the
         Mamba-2 and linear-attention chunk scans (layers/mamba.py, layers/linear_attention.py)
         at the same rates; Mamba's selective scan, which runs on the CUDA cores, at the slower
         of its FLOPs over the fp32 peak and its bytes over HBM (scan_core_times).
  memory-bound work as bytes over HBM bandwidth (x HBM_EFFICIENCY): norms (read + write
         2h each, twice), residual adds (read 4h, write 2h, twice), rotary on Q and K
         (read + write), the MLP activation (SwiGLU reads 2 x 2f/t and writes 2f/t; GeLU
         reads and writes 2f/t), dropout where the model has it (read, write, mask);
         replicated terms /t only with SP; the backward moves twice the forward bytes;
         the loss reads and writes the logits (16 B per vocab entry per token, fwd + bwd).
  recompute: full repeats each layer's forward; selective its attention core [2].
Communication (comm.py, placement TP innermost, then CP, PP, DP [3]):
  TP  per layer and micro-batch 2 all-reduces forward and 2 backward of T h bytes x 2 (bf16),
      or with SP a reduce-scatter + all-gather pair each [2]; +2 with full recompute. Exposed
      (Megatron's default), or with tp_comm_overlap hidden behind the layer's GEMMs except
      the first of tp chunks [7]. Once a step, with SP on a stack that sums them so (Megatron), the all-reduce of
      the SP-partial gradients (norms, row-parallel biases, router) after the backward, exposed [27]. With SP on a
      stack whose linears save their input's shard (Transformer Engine, Megatron's own), each backward re-gathers
      the column-parallel linears' inputs for the wgrad GEMMs, behind their dgrad GEMMs [35].
  CP  ring attention as the stack runs it (stack_db context_parallel, [4]): each pass runs
      one attention kernel per ring step (1/cp of the core each, at FlashAttention-2's rate
      for the step's block of keys: cp_kernel_factor), the K/V (and backward dK/dV) transfers
      each beside one step's kernel, hidden as far as it lasts (cp_ring_comm); the stack's
      output/LSE merges and gradient accumulations are memory-bound compute (cp_pass_times).
      Megatron's --cp-comm-type all_gather and a2a (job cp_comm_type, planner/cp_comm_type.py):
      one kernel, the all-gathers / reduce-scatters or the all-to-alls of Q, K, V and the output
      (cp_a2a_comm) exposed on the CP group's tier, their layout copies memory-bound [4].
  PP  send/recv of T h x 2 bytes (/t under SP) per micro-batch and model chunk, forward and
      backward, on the PP link; counted exposed (Megatron's 1F1B p2p is blocking).
  DP  DDP: all-reduce of the gradients once per step; ZeRO-1/2: reduce-scatter of the
      gradients + all-gather of the updated bf16 weights; FSDP/HSDP: per micro-batch an
      all-gather of the weights in forward and in backward and a reduce-scatter of the
      gradients [5]; HSDP adds an all-reduce of the sharded gradients across replicas.
      Hidden behind compute: gradient traffic behind the backward pass (of the last
      micro-batch for DDP/ZeRO), weight all-gathers behind the forward (FSDP prefetch; ZeRO-1/2's
      once-a-step gather exposed whole with the job's dp_param_gather_overlap false [40]); the
      first unit's all-gather and the last unit's reduce-scatter (1/layers of it) never
      hide. dp_comm_s is the total, dp_comm_exposed_s what is left on the critical path.
Bubble: (p-1)/(v m) of the pipeline's busy time [6], i.e. (p-1)/v micro-batch times.
Optimizer: Adam over the local shard: reads fp32 master, m, v and the gradient, writes
  master, m, v and the bf16 weight (28 B/param with bf16 grads) over HBM bandwidth.
MFU (PaLM, Chowdhery et al. 2022 App. B) counts model FLOPs (6N + attention); HFU adds the
recompute; both over GPUs x the peak of the training precision.

References
[1] Narayanan et al. 2021 (Megatron-LM), sec. 3.5 / eq. 3: the backward pass costs twice the
    forward; activation recomputation adds one more forward.
[2] Korthikanti et al. 2022, sec. 4.2.2 (SP: all-reduce = reduce-scatter + all-gather) and
    sec. 5 (selective recompute re-runs only the attention core).
[3] The Llama 3 Herd of Models (arXiv:2407.21783) sec. 3.3.2: parallelism order TP, CP, PP, DP.
[4] Liu et al. 2023, "Ring Attention with Blockwise Transformers": K/V blocks circulate while
    attention on the current block computes; Llama 3 sec. 3.3.2 (all-gather based CP).
    As run: NVIDIA/TransformerEngine @4329ff84 attention/dot_product_attention/context_parallel.py
    AttnFuncWithCPAndKVP2P (Megatron's default --cp-comm-type p2p), AttnFuncWithCPAndKVAllGather
    (all_gather), AttnFuncWithCPAndQKVOA2A (a2a; Jacobs et al. 2023, DeepSpeed Ulysses,
    arXiv:2309.14509); pytorch
    torch/distributed/tensor/experimental/_context_parallel/_attention.py
    _templated_ring_attention (torchtitan's context_parallel, rotate method allgather).
[5] Zhao et al. 2023, "PyTorch FSDP", sec. 3.2-3.4; Rajbhandari et al. 2019 (ZeRO) sec. 7:
    stage 3 moves 1.5x the data of an all-reduce; the seed sec. 3.1.
[6] Narayanan et al. 2021 sec. 2.2: bubble (p-1)/(v m).
[7] Wang et al. 2023, "Overlap Communication with Dependent Computation via Decomposition in
    Large Deep Learning Models" (ASPLOS '23): collectives split into per-rank chunks overlap
    the dependent GEMM; Megatron-LM --tp-comm-overlap (Transformer Engine userbuffers, needs
    sequence parallelism) and torchtitan's async TP implement it.
[8] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv:2412.19437) sec. 3.2.1, Fig. 5:
    DualPipe feeds micro-batches from both ends of the pipeline; deepseek-ai/DualPipe
    dualpipe/dualpipe.py @bb214e82 l. 42-44 and 75 (rank 0 runs the first stage of one direction
    and, in phase 1, the last stage of the other; rank r pairs stages r and p - 1 - r), with
    DualPipe.step feeding half the micro-batches each way (pipeline.py [8]).
[9] NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/param_and_grad_buffer.py: the
    buffer's grad_dtype is torch.float if grad_reduce_in_fp32 else the parameters' dtype (l. 924,
    group_params_for_buffers), and the bucket's reduce-scatter / all-reduce run on bucket.grad_data
    itself (l. 713-730, start_grad_sync): the reduction moves the buffer's dtype.
[10] NVIDIA/TransformerEngine @02965d2e transformer_engine/pytorch/triton/cross_entropy.py (Megatron-Core
    cross_entropy_fusion_impl te): the forward reads each logit once, the backward reads it and
    writes its gradient in place: 6 B a bf16 logit (stack_db memory.te_loss_per_logit).
[11] Gradient accumulation not fused (Job gradient_accumulation_fusion false, Megatron
    --no-gradient-accumulation-fusion): NVIDIA/TransformerEngine @4329ff84 transformer_engine/
    pytorch/module/linear.py l. 1160-1175 (fuse_wgrad_accumulation off: the wgrad GEMM writes a new
    tensor in the activation dtype instead of accumulating into main_grad), NVIDIA/Megatron-LM
    @d98e8a64 megatron/core/tensor_parallel/layers.py l. 713-782 (its own linears, the output layer:
    grad_output.t().matmul(total_input)) and megatron/core/distributed/distributed_data_parallel.py
    l. 575-579 (the backward hook: param.main_grad.add_(param.grad.data)): every micro-batch's
    backward adds each linear's weight gradient into the main gradient by a kernel of its own,
    reading the new gradient (stack kernels wgrad_unfused) and reading and writing the main
    gradient (bytes_per_param.gradients each); the wgrad GEMM's own output is in its GEMM time.
    Without FSDP only (Megatron's DDP buffers; FSDP's gradient path is its own); the router's
    weight, not a fused-accumulation linear, is left out.
[12] Quantized parameters (Job fp8_param_gather / fp4_param_gather: Megatron --fp8-param-gather,
    --fp4-param-gather): NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/param_and_grad_buffer.py
    l. 894-923 (a quantized parameter is stored in a uint8 parameter buffer; NVFP4 two values a byte,
    l. 1088-1100) and the distributed optimizer all-gathers that buffer after each step: the linears'
    weights move at 1 B (fp8) or 0.5 B (NVFP4, packed), the other parameters at 16 bits. MXFP8
    parameters are gathered through the gradient buffer instead (ddp config
    reuse_grad_buf_for_mxfp8_param_ag, param_and_grad_buffer.py _post_param_sync l. 302-331: the
    gathered values cast into the MXFP8 parameters; optimizer_config.py l. 416-424 recommends it
    with fp8_param_gather, and Megatron-Bridge requires it, mixed_precision.py @v0.3.0 l. 87-90):
    at the gradient buffer's bytes (bytes_per_param gradients), assumed for every MXFP8 job.
[13] The interleaved schedule's warm-up and flush (Megatron-LM @d98e8a64 megatron/core/pipeline_parallel/
    schedules.py forward_backward_pipelining_with_interleaving l. 953-977: num_warmup_microbatches =
    2 (pp - rank - 1) + (vpp - 1) N, + 1 with overlap_moe_expert_parallel_comm, at most vpp m;
    l. 1572-1660 and 1971-2058: without overlap_p2p_comm_warmup_flush (model_parallel_config.py
    l. 422-429, default False) the warm-up's send_forward_recv_forward and the cool-down's
    send_backward_recv_backward are called without overlap_p2p_comm, waited on). The step waits on the last
    rank's count, (vpp - 1) N each way (pp_warmup_flush says why: the other ranks' 2 (pp - rank - 1) more run in
    their bubble).
[14] The output layer in fp8 (Job fp8_output_layer): pytorch/torchtitan @e347b1e5e
    torchtitan/config/job_config.py l. 741 Float8Linear.filter_fqns default [] (since a6524d8a0,
    2025-04-07, PR #1063; before it float8.py converted with module_filter_fn fqn != "output"), and
    torchtitan/components/quantization/utils.py module_filter_fn: every nn.Linear whose dims are
    multiples of 16 and whose fqn no filter names is swapped for torchao's Float8Linear, the output
    layer included. Its three GEMMs then run at the fp8 rate, with the recipe's casts of the GEMM
    inputs as a layer's (the input T h and the weight V/t h forward, twice that backward). Its saved
    tensors do not change: Float8Linear saves its high-precision input and weight (pytorch/ao
    torchao/float8/float8_linear.py @024fe94f manual_float8_matmul_with_args_in_hp.forward
    ctx.save_for_backward(input_hp, weight_hp_t)).
[15] FSDP's fp8 weight all-gather (torchtitan [float8] enable_fsdp_float8_all_gather; the Job's
    fp8_allgather): pytorch/torchtitan @9810191bb~1 torchtitan/components/quantization/float8.py
    l. 62-99 (torchao Float8LinearConfig(enable_fsdp_float8_all_gather=dp_shard_enabled and the
    option), only with recipe_name unset; default false, torchtitan/config/job_config.py @e347b1e5e
    l. 732) and convert_to_float8_training, which swaps the nn.Linear modules module_filter_fn keeps
    (filter_fqns ["output"] keeps the output layer bf16, step.py [14]); pytorch/ao
    torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather casts each
    such weight to float8 before the all-gather (1 B an element, its scale passed as metadata).
    The embedding, the norms, the MoE routers, the routed experts (GroupedExperts, not nn.Linear;
    their own float8 grouped-GEMM converter has no fp8 all-gather there) and a bf16 output layer
    are gathered at the stack's param_gather_bytes (2 B, bf16).
[16] The routed experts' grouped GEMMs under an fp8 / nvfp4 plan (plan.fge: the job field
    fp8_grouped_experts, else the stack's rule stack_db defaults.fp8_grouped_experts; fit searches both
    where the stack runs both, stack_db runs.fp8_grouped_experts: torchtitan):
    pytorch/torchtitan @e347b1e5e torchtitan/models/moe/moe.py _run_experts_grouped_mm l. 113-130
    runs torch._grouped_mm on x.bfloat16() and w.bfloat16() whatever the linear converters (they
    swap nn.Linear modules only); only [quantize.grouped_mm.float8] (components/quantization/
    float8.py l. 176-236) or [quantize.grouped_mm.mx] (mx.py l. 99-168) with fqns naming the
    experts converts them. bf16 (fge 0): the expert_up / expert_down rows at the bf16 rate (forward
    1x, backward 2x, not scaled by the recipe's gemm_speed) and none of the recipe's casts for them
    (the MoE block's cast_elements_bf16_experts: the shared experts' alone); Transformer Engine's
    quantized weight copies (memory.py [11]) left out for the experts. Converted (fge 1): the rows at
    the grouped recipe's figures (stack_db fp8_recipes grouped_experts_recipe, else the plan's recipe;
    _expert_times): torchtitan's float8 converter runs torchao's MoETrainingConfig() whose default
    scaling is FP8_ROWWISE (float8.py l. 207-208, 227-232; pytorch/ao @9cd41075 torchao/prototype/
    moe_training/conversion_utils.py l. 48, scaled_grouped_mm.py _Float8GroupedMM l. 109-310:
    fprop, dgrad and wgrad each an e4m3 torch._scaled_grouped_mm with row-wise / per-group scales),
    so under every float8 linear recipe the expert rows run at the hardware's fp8 GEMM plateau
    (hardware_db compute.gemm_fp8_TFLOPS) times rowwise's gemm_speed 0.88 (stack_db torchtitan
    fp8_recipes rowwise: torchao's Llama3-8B table ratio, a named assumption; torchao's MoE kernels
    are not measured here), with rowwise's cast bytes (5 B an element) for their inputs; the mx
    converter runs mxfp8 (MoEScalingType.MXFP8), its own recipe's figures (the mxfp8 peak's ratio).
    Both pad each local expert's token group (layers/moe.py [14]: 8 rows bf16, 16 float8, 32 mxfp8),
    computed and held; torchao saves the bf16 inputs as the bf16 GEMMs do (memory.py [tt11]).
[17] Transformer Engine's P2P context-parallel ring under fp8 attention (job field fp8_attention;
    stack_db fp8_recipes fp8_attention cp_ring_kv_bytes, cp_ring_dkv_bytes, with sources):
    NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py AttnFuncWithCPAndKVP2P. Forward: delayed and current scaling quantize q, k,
    v before the ring and send the fp8 data, 1 B an element (l. 1579-1583, 1741, 1757); MXFP8
    keeps them bf16 and quantizes per step (l. 976-979). Backward (the `if ctx.fp8` branch, every
    recipe, l. 2367-2442, 2510-2535): steps 0 .. cp-2 send the K/V alone in the saved kv's dtype
    (the forward's bytes), and the last step runs one all_to_all_single of the (cp, local K/V)
    uint8 dK/dV buffers (1 B an element, every recipe), launched before its kernel and waited after
    it: no dK/dV rides with the K/V as in the bf16 ring. Priced in cp_ring_comm for the stacks whose
    ring is TE's (ContextParallelSpec kernel per_step, dkv with_kv; a2a+p2p's ring part, after its
    bf16 all-to-alls, l. 1543); all_gather and a2a CP unchanged (bf16).
[18] Which linears the plan's recipe converts (issue 22; planner/fp8_linears.py with its sources): per GEMM row a
    converted share (step.converted). torchtitan (module converters): each nn.Linear the row prices is kept bf16
    where the job's filter_fqns (torchtitan's [float8] / [quantize.linear.float8] filter_fqns; None: the shipped
    MoE configs' ["output", "router.gate"]) names it by substring, where a dim of its full weight is not a multiple
    of 16, or, with "auto_filter_small_kn" in the list and the float8 converter, where torchao's per-recipe
    thresholds skip it (tensorwise K <= 4096 and N <= 1024; rowwise N <= 2048, K <= 1024, or N <= 4096 and K <= 2048);
    the share is the converted linears' out width over the row's. Transformer Engine stacks (Megatron): every row but
    the MoE router (Megatron's TopKRouter is no TE module; DeepSeek-V3's report, arXiv:2412.19437 sec. 3.3.1, keeps
    "MoE gating modules" in BF16 / FP32 too: the deepseek stack). A kept share runs at the bf16 rate (forward 1x, backward 2x) with
    none of the recipe's casts; a converted router (filter_fqns without router.gate) runs at the low rate with the
    casts of its input and weight (its share of cast elements is added; the blocks' cast_elements leave the router
    out). Saved tensors do not move: torchao's Float8Linear saves its bf16 input and weight (as [14]).
[19] DeepSpeed ZeRO-3's overlap_comm moves the gradient reduction only (stack_db overlap.fsdp_gathers_overlap_always,
    megatron-deepspeed, with its sources): the weight all-gathers are prefetched asynchronously on the process group's
    NCCL stream whatever the setting (microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/partitioned_param_coordinator.py
    fetch_sub_module l. 285-420, partition_parameters.py l. 94-95 async_op=True; parameter_offload.py l. 143-144 picks
    only the launching stream), while the reduce-scatter runs on reduce_and_partition_stream, the default stream
    without overlap_comm (stage3.py l. 268-269; coalesced_collectives.py l. 22-23 async_op=False): with it off the
    backward waits for each bucket's reduce-scatter (and MiCS's replica all-reduce), the gathers still hide behind the
    forward and backward as with it on. The April 2021 DeepSpeed of Narayanan et al. (a12aaedc) likewise (stage3.py
    l. 342-354, 707, 825-826).
[20] The tied embedding's gradient all-reduce of DeepSpeed's pipeline engine (Stack.pipeline_tied_grad_allreduce,
    megatron-deepspeed): Megatron-DeepSpeed's GPTModelPipe puts the input embedding on the first stage and the output
    layer on the last as one TiedLayerSpec('embed') (microsoft/Megatron-DeepSpeed @f4157bea megatron/model/gpt_model.py
    l. 362-371, 423-434, unless --untie-embeddings-and-output-weights); the
    PipelineModule builds a group of the stages that hold it for each data / model-parallel coordinate
    (microsoft/DeepSpeed @38327e07 deepspeed/runtime/pipe/module.py _index_tied_modules l. 470-505: two ranks, the
    first and the last stage; none at pp 1), and the TrainSchedule's ReduceTiedGrads, after the last backward, runs
    PipelineEngine._exec_reduce_tied_grads (pipe/engine.py l. 275-291): dist.all_reduce(grad, group=group), blocking,
    of weight.grad (weight._hp_grad, fp32, under the BF16_Optimizer). Priced in pp_comm (pp_tied_grads).
    Megatron-LM does the same for a tied model (stack_db/megatron.yaml pipeline_tied_grad_allreduce) and, tied or
    not, for the multi-token-prediction stage's own word embedding (issue 21/22, mtpmore; stack
    memory.mtp_embedding_copy, memory.py [me]): NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/
    finalize_model_grads.py finalize_model_grads l. 671-680 calls _allreduce_word_embedding_grads (l. 164-201), whose
    weight getter _get_shared_word_embedding_weight (l. 132-148) returns shared_embedding_or_output_weight() where
    share_embeddings_and_output_weights or mtp_num_layers (the MTP stage's copy: language_module.py l. 345-357), and
    _allreduce_embedding_grad (l. 204-259) runs torch.distributed.all_reduce(main_grad, group=embd_group), blocking,
    after the data-parallel gradient sync (finish_grad_sync, l. 639-640) and before the step; the embedding group is
    pretrain_gpt.py get_embedding_ranks (l. 493-505): the first stage, the last where tied, and the MTP stages
    (multi_token_prediction.py get_mtp_ranks l. 834-847: the last stage without a custom layout); the planner prices
    the MTP modules, and so this copy, on the last stage (trainers/megatron.py parse_layout), so the group is the two
    ends, (pp - 1) pipeline strides apart, tied or not. The main_grad is the gradient buffer's (bytes_per_param
    gradients: fp32 for the megatron preset). Under Megatron-FSDP (stack runs.sharding embedding_grad_shard: the
    megatron_fsdp_optim, _optim_grads, _optim_grads_params and _hsdp modes) the tensor is the rank's shard of the
    optimizer's gradient: finalize_model_grads l. 250-258 reads weight.grad (the module's parameter is by then the
    optimizer's DTensor, finish_grad_sync -> _replace_param_with_distributed_if_needed, megatron_fsdp.py l. 1376-1427,
    which has no main_grad attribute) and all-reduces its _local_tensor; update_main_grads (param_and_grad_buffer.py
    l. 3351-3409) makes that the rank's (virtual) shard of the main gradient buffer at every sharded level (get_item
    only_shard, l. 1598-1630: the gradients' buffer sharded under optim_grads / optim_grads_params, whole under optim,
    where the shard is read from it all the same), .to(param.dtype), the main weight's (fp32:
    --megatron-fsdp-main-params-dtype default fp32, arguments.py l. 3687, distributed_data_parallel_config.py l. 125; the planner does not read
    the flag), where use_decoupled_grad is off. Both ends' embedding copies carry shared_embedding (language_module.py
    l. 270-290) and so each is a bucket of its own under any sharded level (_get_parameter_groups
    _does_param_require_new_bucket, l. 1774-1785, "so that the first and last pipeline stage partition ... the same
    way"), chunk size h (l. 1876-1912), padded to a multiple of n x h (l. 283-286) and cut in n equal shards (l.
    410-411): ceil(V/tp / n) x h elements a rank, x 4 B, over the same two ranks; n the main buffer's group, dp x cp
    (HSDP: the shard group x cp; mcore_fsdp_adapter.py _init_dist_index dp_shard_dim "dp_cp"). Under
    --use-precision-aware-optimizer update_main_grads installs the shard as decoupled_grad instead (l. 3404-3409;
    training.py l. 2649-2650) and weight.grad stays None, so the all-reduce returns without running (l. 255-257):
    the two copies' gradients are not summed (priced 0; stack embedding_grad_shard skipped_decoupled). Megatron-Core
    905c0e386 (stack megatron-bridge) runs the same code (finalize_model_grads.py l. 204-259, param_and_grad_buffer.py
    l. 283-286, 408, 1392-1403, 2813-2875; main_params_dtype float32, mcore_fsdp_adapter.py l. 73) but installs
    param.grad whatever the optimizer (l. 2845, 2872 read a use_precision_aware_optimizer attribute nothing sets):
    the shard always moves. torch FSDP2 (--use-torch-fsdp2) asserts pipeline_model_parallel_size 1 and untied
    embeddings (arguments.py l. 1034-1035, 1044-1045; start-up rule 24): its embedding group is one rank, nothing moves. Not
    priced: a layout's MTP stage other than the last (a third rank in the group where tied; noted by the reader).
[21] DeepSpeed ZeRO-3 of April 2021 all-reduces its gradient buckets whole (ShardingMode.grad_allreduce on an fsdp
    mode: stack megatron-deepspeed-2021's zero3): microsoft/DeepSpeed a12aaedc deepspeed/runtime/zero/stage3.py
    reduce_ipg_grads l. 2162-2193 sends a flushed bucket, without contiguous_gradients (the stage-3 default,
    constants.py l. 64), through buffered_reduce_fallback (l. 2319-2330) -> allreduce_bucket (l. 2267-2296):
    dist.all_reduce of the whole bucket over the data-parallel group, each rank then keeping its partition; with
    contiguous_gradients average_tensor all-reduces too while reduce_scatter is false (l. 1947-1957; default False,
    constants.py l. 56). Priced as the reduce-scatter it replaces (same buckets, same count, same hiding), as an
    all-reduce over the shard group: about twice the bytes on the wire.
[22] DeepSpeed ZeRO-3 of April 2021 fetches one deep and synchronises the device (stack overlap.fsdp_prefetch_depth 1;
    no entry sets it yet, see stack_db/megatron-deepspeed-2021.yaml `uncertain`): microsoft/DeepSpeed a12aaedc
    deepspeed/runtime/zero/stage3.py fetch_sub_module (l. 390-444) all-gathers the submodule's parameters not yet
    gathered and, where any were gathered or in flight, ends in _synchronize_communication (l. 521-529: handle.wait,
    comm_stream.synchronize(), torch.cuda.synchronize()); prefetch_next_sub_modules (l. 342-367), called right after
    (pre_sub_module_forward_function l. 1509-1525, the backward's l. 1544-1550), issues the next parameters of the
    trace only when none is in flight and fewer than stage3_max_live_parameters are gathered: at least one
    parameter, up to stage3_prefetch_bucket_size elements (get_params_to_prefetch l. 202-232). So a submodule's
    all-gather starts at the previous synchronize and hides behind the compute queued since only: the previous
    submodule's, and that of any submodule fetched in between without gathering (no synchronize: a module kept
    gathered from its full-recompute re-run to its backward, memory.py [z3] zero3_layer_peak's rule, 2 x the
    parameters after it below stage3_max_reuse_distance); one the live limit keeps from the prefetch is issued at
    its own fetch, after the torch.cuda.synchronize() of partition_parameters.py _allgather_param (l. 798): exposed
    whole. Each parameter is one collective (_all_gather l. 603-627) into a torch.zeros buffer (l. 791-793) through
    torch.distributed.all_gather into a list of world-size views, which PyTorch's NCCL process group of 2021 gathers
    into a flat buffer and copies out (pytorch/pytorch @00f5dfd5 torch/lib/c10d/ProcessGroupNCCL.cpp
    ProcessGroupNCCL::allgather): the collective + 3 x the gathered bytes over HBM. The gradient buckets
    (contiguous_gradients false: reduce_independent_p_g_buckets_and_remove_grads l. 1883-1889 flushes the bucket
    where the next gradient would overflow reduce_bucket_size; step.py bucket_flushes) are reduced on the same
    process group (reduction_stream, [21]) during the backward of the module whose hook flushed them and waited by the
    next fetch's device synchronize, after the gather issued before them (one NCCL communicator runs its
    collectives in order). Priced per layer kind (zero3_sync_gathers), the layer's figures the same for every layer
    of the kind (x the stage's layers): its submodules are memory.py's zero3_modules (one per GEMM row of the mixer and
    the MLP, forward order: GPT's query_key_value, dense, dense_h_to_4h, dense_4h_to_h, each one parameter above the
    default prefetch bucket, so one submodule a prefetch: assumed for any model); the compute of a submodule is its
    GEMM row's forward seconds (layer_times' price_gemms at the plan's precision over the GEMM speed factor; backward
    2x, [1]) plus the attention core (layer_times' core_fwd / core_bwd) where it runs (after the mixer's last row but
    one in the forward, after its last row in the backward) plus the per-fetch param.norm() of a12aaedc's
    print_rank_0 f-string (stage3.py l. 441-445, evaluated though print_rank_0 drops it, l. 37-39: a read of the
    gathered weights); the memory-bound kernels between are left out (a smaller window: an upper bound on what is
    exposed). Cycles: the forward (each layer each micro-batch), the backward without recompute, and under full
    recompute the re-run forward then the backward; each steady (sync_cycle: twice round). Each window's exposure is
    _hide(gathers and reductions, window), as the pass-wide hiding it replaces. The parameters outside the layers
    (embedding, output layer: p_local less the layers') are gathered once a pass and reduced once a backward, exposed
    whole. Not priced: the host's launch of PyTorch's world-size copy-out kernels per gathered parameter (one copy_
    a rank, issued by the host before it can queue the next compute: world x a launch, no sourced figure for the
    launch) and the host's gap after each synchronize.
[23] DeepSpeed ZeRO-3 re-gathers a fully recomputed layer's weights for its re-run forward (stack
    fsdp.zero3_rerun_regathers; megatron-deepspeed, megatron-deepspeed-2021): ZeRO-3 hooks every submodule
    (microsoft/DeepSpeed a12aaedc deepspeed/runtime/zero/stage3.py _register_hooks_recursively l. 1402-1507: forward
    pre-hook -> pre_sub_module_forward_function l. 1509-1531 -> fetch_sub_module l. 390-446, forward hook ->
    post_sub_module_forward_function l. 1533-1542 -> release_sub_module l. 448-498), and full recompute re-runs the
    layer's forward through those modules inside the backward (a12aaedc runtime/activation_checkpointing/
    checkpointing.py CheckpointFunction.backward l. 631-632: ctx.run_function under torch.enable_grad(), which
    Megatron-DeepSpeed installs as mpu.checkpoint, microsoft/Megatron-DeepSpeed @311e56c0 megatron/initialize.py
    l. 170-181; Megatron's own mpu/random.py CheckpointFunction l. 301-302 re-runs it the same way). So the re-run
    fetches (all-gathers) every module's parameters the forward released, and releases them after it unless
    _keep_for_later (l. 500-508: get_reuse_distance_in_numel l. 236-283, the parameters of the trace's modules
    before the module's next use, below stage3_max_reuse_distance): from its re-run to its backward a module j
    waits for the rest of the re-run and the backward down to it, 2 x the parameters after it (memory.py [z3]
    zero3_layer_peak's rule, read at @38327e07 partitioned_param_coordinator.py __params_to_release l. 523-554;
    the same test at a12aaedc); the backward's pre-hook (pre_sub_module_backward_function l. 1544-1552) gathers
    those released again. A fully recomputed layer's weights are gathered 2 + (1 - kept share) times a
    micro-batch (GPT at h 12,288 or 20,480 on the defaults: only the MLP's output projection, 4 of 12 h^2, is kept:
    2.67), where fsdp_traffic's reshard prices 2 (FSDP's unit hooks: the backward's gather serves the re-run). The
    extra gathers run in the backward and hide behind it as its other gathers (zero3_rerun_share, fsdp_traffic).
[24] DeepSpeed-MoE's dense gating (stack moe_gating; layers/moe.py [18]): its gating, casts and the experts' cat
    (gating_bytes) in place of a dispatcher's permutations (moe_dispatch_bytes), at the streaming rate; the dispatch
    and combine einsums (gating_einsum_rows, two GEMMs forward, three backward, bf16 whatever the plan's precision:
    the activations' dtype, as compute.EAGER_GEMM_PRECISION) each the slower of its GEMM time (price_gemms: the
    plateau x its wave efficiency, or a calibration's rate) and its compulsory traffic (each operand read once, the
    output written once, 2 B an element) at the streaming rate, compute.py [11]. Both go to the moe_permute term
    (perm_fwd / perm_bwd: re-run with the forward under full recompute) and the einsums' share is the extra
    moe_gating_einsum_s (the critical stage's, as eager_core_time). At tp > 1 its TP all-gathers of the capacity
    (gating_gather) join the MoE MLP's TP pair in tp_comm.
[25] DeepSpeed's partitioned pipe tensors (job pipe_partitioned, default the stack's pipeline_send_partitioned_default:
    the JSON's pipeline.pipe_partitioned / grad_partitioned, true unless it says false, microsoft/DeepSpeed @38327e07
    deepspeed/runtime/config.py l. 467-468; on wherever the grid has model parallelism, pipe/engine.py l. 144-145).
    A stage that is not the last wraps its output in a PartitionedTensor over the slice-parallel group (the TP ranks
    of the stage, topology.py l. 355-364) and sends its own 1 / tp part (engine.py l. 737-761); the next stage
    rebuilds the whole with part_input.full() before its forward (l. 719-733), an all_gather_into_tensor of the
    T h elements (runtime/utils.py PartitionedTensor.full l. 671-688, even split), blocking. In the backward a stage
    that partitioned its output rebuilds it the same way (l. 826-838) and the gradient it receives, sent as the
    sender's 1 / tp part, too (l. 840-851). So per micro-batch a send of T h / tp each way and, on a middle stage,
    three all-gathers of T h bf16 over the TP group (the first stage two, the last stage one): priced per stage, each
    stage's own count in its own micro-batch (pp_comm; critical_stage adds them to that stage's time: before issue 22
    critstage2 the busiest stage's count rode on every send, so a middle stage's four blocking sends paid it twice),
    on the TP tier, blocking (exposed whole: the stack overlaps no p2p).
    The partition's meta tensor, a few int64 sent beside each part (one more p2p latency), is not priced.
    Only a dense plan without SP runs it (pipe_partitioned): MoE and SP plans at pp > 1 x tp > 1 need it off.
    Activations only (Stack.pipeline_send_partitioned_grads false: microsoft/DeepSpeed a12aaedc, before
    grad_partitioned, e2fdd254e 2021-09; a12aaedc has no key for either, pipeline_send_partitioned_switch false):
    pipe/engine.py @a12aaedc l. 112-113 is_pipe_partitioned = is_model_parallel, is_grad_partitioned = False. The
    forward is as above (l. 498-509 part_input.full() on arrival, l. 518-528 the 1 / tp part sent); the stage
    that sent a part rebuilds its output by part_output.full() before it receives the gradient (_exec_recv_grads
    l. 914-924), and the gradient goes back whole, T h (_exec_send_grads l. 849-856: buffer.grad of the rebuilt
    input); PartitionedTensor.full is a dist.all_gather over the group (runtime/utils.py l. 470-491). So per
    micro-batch a send of T h / tp forward, T h backward, and on a middle stage two all-gathers (the first and the
    last stage one each), per stage as above.
[26] Which compute a zero2 mode's per-micro-batch gradient reductions hide behind (dp_comm, the mode's grad_reduce
    microbatch). By default (overlap.grad_reduce_queued false) the runtime waits for a micro-batch's reductions at
    the end of its backward, so each hides behind that backward (comp.bwd_mb) and the last bucket never hides:
    DeepSpeed ZeRO-2 (microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage_1_and_2.py
    independent_gradient_partition_epilogue l. 764-776: with overlap_comm a device synchronize at every backward's
    end) and Megatron-FSDP optim_grads (NVIDIA/Megatron-LM @d98e8a64 megatron_fsdp.py _root_post_backward l. 867-900
    -> param_and_grad_buffer.py GradReducePipeline.reset l. 3860-3862, wait_for_previous_grad_reduce(0)). A stack
    with grad_reduce_queued (llama3-meta: arXiv:2407.21783 sec. 3.3.2 'asynchronously ... reducing gradients',
    the runtime unpublished) issues each chunk's reduction when its backward ends, on one stream, and the compute
    stream runs the schedule's next passes, forwards and backwards of other micro-batches and chunks, meanwhile:
    the reductions drain in issue order and only what runs past the pipeline's compute (m t_mb (1 + bubble), the
    compute stream's micro-batch t_mb split forward : backward as comp.fwd_mb : comp.bwd_mb) is exposed,
    pipeline.reduce_queue_overrun [12] on the first stage, which drains last; the rest with the stack's exposed
    share (overlapped_exposed_fraction: NCCL's SMs and HBM taken from the compute beside it). The weights'
    all-gather (once a step) as before. PyTorch FSDP2 runs its reduce-scatters so (pytorch/pytorch @62a45b6f
    torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: FSDPCommContext.reduce_scatter_stream; post_backward
    issues foreach_reduce on it) with one bound: before issuing the next unit's reduce-scatter the compute stream
    waits for the previous one (comm_ctx.reduce_scatter_state.event, to free its input), and at a backward's end
    only when it is the last (_fsdp_state.py @01c9f4fc _root_post_backward_final_callback, is_last_backward). On
    the pattern [12] gives (backwards f + b apart, then b apart) that wait exposes what the queue does: each
    reduction longer than its gap stalls by the excess where the queue would carry it, and the queue never drains
    once it lags (the gaps only shrink), so both expose the same: the reductions from the first lag on, less the
    compute they are issued across. Where the gaps widen again (Megatron's first stage at m >= 2p) the queue can catch up and FSDP2's wait
    cannot: there the form is the queue's (an upper bound on it, [12]).
[27] The TP all-reduce of the gradients sequence parallelism leaves partial (stack runs.sequence_parallel
    norm_grads_step_allreduce: megatron; sp_norm_grads). Under SP each TP rank runs the norms (and adds the row-parallel
    linears' biases, and runs the TP-duplicated linears and the MoE router) on its own 1 / tp of the sequence, so the
    gradients of those parameters, whole on every TP rank, are partial sums. NVIDIA/Megatron-LM @d98e8a64
    megatron/core/distributed/finalize_model_grads.py finalize_model_grads waits for the data-parallel gradient sync
    (l. 639-640 finish_grad_sync) and then calls _allreduce_non_tensor_model_parallel_grads (l. 661; l. 416-484): at
    tp > 1 the main_grad of every parameter of the rank's model chunks marked sequence_parallel (l. 452; the norms,
    fusions/fused_layer_norm.py l. 119-120 and Transformer Engine's; the row-parallel biases, tensor_parallel/layers.py
    l. 1499, extensions/transformer_engine.py l. 1998; the TP-duplicated linears, l. 1316: MLA's down projections; the
    router, transformer/moe/router.py l. 85-88), cat into one buffer (_flatten_dense_tensors, l. 473) and summed by one
    torch.distributed.all_reduce over the TP group (l. 474), synchronous, before the optimizer step: nothing overlaps
    it. Its elements, the stage's: per layer its replicated parameters (BlockParams.replicated: norms, query/key norms,
    MLA's down projections and latent norms, the router, and the row-parallel linears' biases, h each, whole on every
    TP rank, layers/common.py [rb]: the attention output projection's, the dense MLP's down projection's, Mamba's
    out_proj's, where the model has them), the final norm and the MTP modules' on the last stage, the embedding's norm
    on the first; the stage with the most. Gated DeltaNet's gated output norm is among them (whole on every rank, a
    TENorm marked sequence_parallel: layers/linear_attention.py); the router's expert score bias is not (a buffer,
    not a parameter: router.py l. 180-198, layers/common.py [sb]). Without SP the same all-reduce runs over the
    query/key norms alone (l. 452-453: `config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in
    name)`, whatever sequence_parallel says; each TP rank's q_layernorm / k_layernorm, one head_dim weight shared
    by the heads (models/gpt/gpt_layer_specs.py l. 139-154; transformer/attention.py l. 1734-1745,
    hidden_size_per_attention_head),
    sees only its own heads, so its gradient is partial: BlockParams.qk_norm, 2 head_dim
    a layer); MLA's latent norms are not among them on the Transformer Engine spec (l. 104-130: fused into
    linear_q_up_proj / linear_kv_up_proj as layer_norm_weight, q_layernorm / kv_layernorm IdentityOp; their gradients
    are whole on every TP rank without SP, the column-parallel linear's input gradient being all-reduced before the
    norm's backward). The routed experts' output biases (gpt-oss; whole on each expert-TP rank, layers/common.py [rb])
    are not in the set either: Megatron marks them no sequence_parallel (extensions/transformer_engine.py l. 91-123
    _set_expert_parameter_attributes), and each expert-TP rank runs the same tokens (the all-to-all dispatcher gathers
    them over the expert-TP group, transformer/moe/token_dispatcher.py l. 86, 746-751), so their gradients are whole.
    Its bytes a main-gradient element (fp32 unless --grad-reduce-in-bf16: grad_reduce_bytes, [9]); under FSDP the local
    shard (grad._local_tensor, l. 461: / the shard group). Priced on the TP tier by comm.py's all-reduce, once a step,
    in tp_comm (its own key tp_sp_norm_grads_s). The flat buffer (a copy, a few MB: Llama 3 8B at tp 8 1.07 MB) lives
    after the backward, when the activations are freed, below the step's peak: no memory term.
[28] Muon's Newton-Schulz iterations (job field optimizer muon; memory.py [mu]), term muon_ns (Muon jobs only).
    NVIDIA-NeMo/Emerging-Optimizers v0.3.0 (the tag NVIDIA/Megatron-LM @d98e8a64 pyproject.toml l. 248 pins)
    emerging_optimizers/orthogonalized_optimizers/orthogonalized_optimizer.py step l. 166-199 orthogonalizes each
    parameter's momentum on its own (scaled_orthogonalize_fn, one tensor at a time); muon_utils.py newton_schulz
    l. 176-180 transposes an m x n matrix so that m <= n, and under --muon-fp32-matmul-prec medium (the default,
    optimizer_config.py @d98e8a64 l. 272) casts X to bf16 (l. 203-213); each of --muon-num-ns-steps 5 steps
    (optimizer_config.py l. 279, arguments.py l. 2648) is newton_schulz_step l. 315-319: A = X X^T (2 m^2 n FLOPs),
    B = b A + c A A (addmm, 2 m^3), X = a X + B X (addmm, 2 m^2 n): 4 m^2 n + 2 m^3 a step, three bf16 GEMMs
    [m, m, n], [m, m, m], [m, n, m] (M, N, K), priced by compute.price_gemms at the bf16 GEMM model (gemm_time: K loop, output write,
    wave efficiency) (or the profile's GEMM calibration), as the layers' GEMMs are; the elementwise normalisation and
    casts (a few passes over the matrix) are left out. Which matrices: every layer's 2-D weights Muon steps
    (layers/common.py [mu], [ns]: LayerKind.muon_matrices, whose elements are BlockParams.muon_per_gpu(1) and
    muon_experts_per_gpu(1, 1) to the element), a learned position table (max_seq x h) on the first stage, the
    multi-token-prediction modules (eh_proj h x 2h and one layer each) on the last. Under TP the default
    --muon-tp-mode duplicated (arguments.py l. 2650) all-gathers each shard over the TP group (the expert-TP group
    for the routed experts) and runs the iteration on the whole matrix on every TP rank (muon_utils.py
    newton_schulz_tp l. 272-278; emerging_optimizers.py @d98e8a64 l. 197-219): no 1 / tp, the whole matrix's FLOPs on
    each rank. --muon-tp-mode blockwise (the job's muon_tp_mode; the megatron-bridge stack's default: Megatron-Core
    905c0e386 optimizer_config.py l. 277-278, muon.py l. 273) passes partition_dim None (muon.py @905c0e386 l. 133,
    emerging_optimizers.py @d98e8a64 l. 403): each TP rank runs newton_schulz on its own shard, no collective
    (layers/common.py muon_local: the partitioned rows / tp, the experts' / etp; muon_blockwise), no gather (and no
    gathered matrix in memory.py [mu]). --muon-tp-mode distributed (the job's muon_tp_mode; Megatron-Core 905c0e386
    muon.py l. 87 hands it to Emerging-Optimizers v0.1.0's newton_schulz_tp as mode, l. 215-222, the same code as
    v0.3.0's l. 279-286): newton_schulz on each TP rank's fp32 momentum shard with tp_group set and transpose set by
    the partition_dim (0: transposed, 1: as it is), so the iteration spans the matrix's unpartitioned side m (the cols
    of layers/common.py [ns]'s split and expert matrices, at tp 1 too: TE's partition_dim whatever tp; the Gram on
    it even where the partitioned side is the smaller, the waste newton_schulz_tp's docstring warns of) with the
    rank's rows / tp (/ etp) of the other (layers/common.py muon_distributed): distributed_normalize_p2 (l. 120-124)
    all-reduces the fp32 sum of squares once (MUON_NORM_BYTES), and each step newton_schulz_step (l. 315-319)
    computes the partial Gram X X^T [m, m, n / tp], all-reduces it over the TP group (m^2 elements,
    MUON_NS_ELEMENT_BYTES: bf16 under medium), then B = b A + c A A [m, m, m] (the whole Gram's, on every TP rank) and
    X = a X + B X [m, n / tp, m]: the GEMMs in muon_ns, the all-reduces in tp_comm (muon_gram_time, extra
    tp_muon_gram_s), each waited on (synchronous torch.distributed.all_reduce, the next GEMM reads it); rep matrices
    (no partition_dim) take the fallback newton_schulz whole, no collective. --muon-fp32-matmul-prec (the job's
    muon_fp32_matmul_prec; OptimizerConfig.muon_fp32_matmul_prec, default medium, handed to TensorParallelMuon and
    set by Emerging-Optimizers' orthogonalized_optimizer.py v0.3.0 l. 192 / v0.1.0 l. 173 through
    torch.set_float32_matmul_precision around the orthogonalization): medium, the bf16 cast above; high, the fp32 X's
    GEMMs on TF32 tensor cores (torch's 'high'), priced at the bf16 rate x 1 / TF32_PER_BF16; low, which torch does
    not take (it warns and keeps its precision, the default highest), fp32 GEMMs off the tensor cores, at the bf16
    rate x bf16_TFLOPS / fp32_TFLOPS (muon_gemm_slowdown); under high and low the Gram all-reduce and the
    temporaries are fp32 (memory.py [mu]). --muon-use-syrk (Megatron-LM @d98e8a64 arguments.py l. 2656-2658) is refused
    by the Megatron reader: TensorParallelMuon raises unless Emerging-Optimizers >= 0.4.0 (emerging_optimizers.py
    l. 52-56, 202-207), and the pin is v0.3.0. Each dp x cp rank steps only the parameters the layer-wise distributed optimizer assigns it
    (layer_wise_optimizer.py l. 173-180, shard_params l. 614-641; the experts over the expert-data-parallel ranks):
    1 / (dp x cp) of the stage's dense matrices and 1 / edp of its E / ep experts a layer on average, at sharding
    zero1, but never less than the largest matrix of each (a parameter is never split: the worst rank holds it whole,
    _muon_stages), all of them at sharding none (no distributed optimizer); each stage's own, in its optimizer step
    (step_time's step-end pick, muon_stage_terms). The TP all-gathers of the momenta (4 B an element of each TP-split matrix's whole, one
    all-gather a matrix over the TP group, the experts' over the expert-TP group, waited on) are in tp_comm
    (muon_gather_time, extra tp_muon_gather_s). The layer-wise optimizer's DP traffic (dp_comm, layerwise_legacy):
    with its default layout the distributed optimizer's reduce-scatter and bucketed all-gather over the padded
    shard-aligned buffer (muon_layout_padding, memory.muon_layout_excess); on its legacy path (the job's
    optimizer_whole_tensors) an all-reduce of the gradients and allgather_params' one all-gather (l. 817-868). Not
    priced: the elementwise normalisation and scaling passes, GTP rematerialisation's groups (not modelled); the LPT's
    imbalance above the largest-matrix floor.
[29] Megatron-FSDP's HSDP with the outer-DP optimizer sharding (job field mfsdp_outer_optim, --outer-dp-sharding-
    strategy optim; stack runs.sharding outer_optim; memory.py [oo]). NVIDIA/Megatron-LM @d98e8a64
    megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py GradReducePipeline.reduce_gradients
    l. 4134-4213: at the step's last micro-batch (outer_fsdp_group_grad_reduce, megatron_fsdp.py l. 782-787, 896-900)
    each bucket's gradient shard over the shard group is reduce-scattered across the replicas
    (reduce_scatter_tensor over the outer FSDP group, l. 4180-4199) into the dp x cp shard of the main gradient
    buffer, in place of no_shard's all-reduce (l. 4200-4207); AllGatherPipeline.all_gather_params l. 4543-4563: at
    the step's first micro-batch (outer_fsdp_group_param_gather: microbatch_count == 0, megatron_fsdp.py l. 482-490)
    each bucket's 16-bit weights are all-gathered across the replicas from the rank's dp x cp slice into its shard
    group shard (all_gather_into_tensor, async_ops False), before the unit's own all-gather over the shard group
    waits on it (l. 4563). Priced once a step each, the reduce-scatter of the gradient bytes and the all-gather of
    the weights' gather bytes of the stage's shard-group shard over the replicas, at the replica all-reduce's place
    (exposed whole, as it); the optimizer step's Adam over the dp x cp shard (optimizer_time), and the pipeline's
    embedding gradient all-reduce over the dp x cp shard of the main gradient ([20]). At Megatron-Core 905c0e386
    (Megatron-Bridge's pin) the same design under the names hsdp_wbuf / hsdp_gbuf (param_and_grad_buffer.py
    l. 1944-1961, 2172-2241, 3552, 3887).
[30] MLA's fused down projection (job field mla_down_proj_fusion, Megatron --mla-down-proj-fusion; layers/attention.py
    MLA.down_fused): its own TP collectives, beyond the ones both layouts run ([32], mla_tp_collectives: the up
    projections' sequence-parallel gathers of the latents and the output's reduce-scatter). NVIDIA/Megatron-LM @d98e8a64
    megatron/core/models/gpt/gpt_layer_specs.py l. 257-272: linear_qkv_down_proj is a
    TELayerNormColumnParallelLinear (the input norm fused into it), which under SP all-gathers the normed input
    over the TP group before its GEMM (NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/module/
    layernorm_linear.py l. 284-290, gather_along_first_dim, the NCCL path: T h x 2 B gathered, exposed) and
    reduce-scatters its input's gradient backward (l. 857-865; without SP all-reduces it, l. 866-867); where the
    unfused layer's TELinear down projections are 'duplicated' (no TP collective: multi_latent_attention.py l.
    524-600). megatron/core/transformer/multi_latent_attention.py FusedMLASelfAttention._qkv_down_projection l.
    1353-1381: the q latent's columns, r_q / tp a rank, all-gathered over TP (gather_from_tensor_model_parallel_region,
    l. 1377: T r_q x 2 B) and, under SP, scattered back along the sequence (l. 1378-1379, whose backward all-gathers
    T r_q x 2 B: mappings.py _ScatterToSequenceParallelRegion.backward l. 295-297); get_query_key_value_tensors
    l. 745-755 (taken where the latent's columns are split, as the fused projection leaves them, l. 746): the
    kv latent and rotary key's columns, (r_kv + d_rope) / tp a rank, all-gathered (T (r_kv + d_rope) x 2 B) and
    the kv latent scattered back under SP (backward: T r_kv x 2 B all-gathered); the gather's own backward is a
    split (no collective). Per layer and micro-batch, forward: [SP] AG(T h) + AG(T r_q) + AG(T (r_kv + d_rope));
    backward: SP: RS(T h) + AG(T r_q) + AG(T r_kv), else AR(T h); a recomputed layer's forward again. All exposed:
    mappings.py's collectives and TE's NCCL gather are synchronous on the compute stream; the input gradient's
    reduce-scatter is issued async beside the wgrad GEMM (l. 861-864) but priced exposed as tp_comm prices every
    column-parallel linear's (an upper bound, named). TP communication overlap does not apply: Megatron's
    userbuffers cover the buffer names qkv, proj, fc1, fc2 (megatron/core/extensions/transformer_engine.py l.
    1176-1186; TransformerEngine base.py initialize_ub l. 310-336 registers no qkv_down_proj). TE's re-gather of
    the normed input for the wgrad GEMM in backward (layernorm_linear.py l. 724-749, async beside the dgrad GEMM):
    T h at the recipe's input width, behind linear_qkv_down_proj's dgrad GEMM, as every column-parallel SP linear's
    ([35], regather_seconds).
[31] The pipeline's fill and drain hops (pp_fill_drain, in the bubble term; extra pp_fill_drain_s). The first
    micro-batch's forward crosses the p - 1 stage boundaries one after another before the last stage starts (the
    fill), its backward crosses them back (the drain): 2 (p - 1) transfers on the step's critical path, whatever
    stage is the critical one. Megatron-LM @d98e8a64 megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_without_interleaving: rank r's p - r - 1 warm-up forwards (l. 2277) each recv_forward
    then send_forward (l. 2344, 2362), its own blocking _communicate with only the send (p2p_communication.py
    l. 494-514; waited l. 416-419), batched with no receive; the cooldown's recv_backward / send_backward (l. 2466,
    2474) likewise; torch.distributed.pipelining (pytorch/pytorch @00722e648 torch/distributed/pipelining/schedules.py
    Schedule1F1B._step_microbatches) waits each warm-up fwd_recv before its forward and each cooldown bwd_recv before
    its backward. The bubble (bubble_fraction x m micro-batches of the critical stage, (p - 1) / v under 1F1B and
    interleaved 1F1B) holds those hops as (p - 1) / v x the critical stage's own transfers a micro-batch: 2 v on a
    middle stage (2 (p - 1), as the hops), 2 v - 1 on an end stage of a runtime that batches a send with the receive
    from the same neighbour and skips the side an end lacks (Stack.pipeline_p2p_batched): (p - 1) / v transfers
    short, which pp_fill_drain adds. Each hop is priced whole, also where the stack overlaps the steady state's p2p
    (Megatron's interleaved overlap_p2p_comm, Llama 3's asynchronous p2p, DualPipe): the stage a hop feeds has no
    work before its first input arrives, and the runtimes wait it before that first pass (Megatron-LM @d98e8a64
    schedules.py forward_backward_pipelining_with_interleaving: the warm-up's first recv_forward, l. 1543-1548,
    blocking; with overlap_p2p_comm_warmup_flush each later warm-up forward waits its receive's handle, l. 1579-1588,
    and each cooldown backward its gradient's, l. 1973-1983; deepseek-ai/DualPipe @bb214e82 dualpipe.py step 1's
    _forward_chunk calls _commit_and_wait_comm before the chunk's compute, l. 185-214, 285-292), so the bubble's p2p,
    at the stage's waited share, is (p - 1) / v x count x that share against 2 (p - 1) whole transfers: pp_fill_drain
    adds the difference (before, the hops were priced at the hidden share's remainder, nothing on a middle stage).
    The interleaved schedule with its warm-up and flush p2p overlapped too (overlap.pp_p2p_warmup_flush_blocking off:
    Megatron-LM --overlap-p2p-communication-warmup-flush, Llama 3's asynchronous p2p) has more: after its p - 1 fill
    hops, each later model chunk's first micro-batch comes round the p ranks (stage p - 1's chunk k output to stage 0's
    chunk k + 1) while stage 0 runs the round's N micro-batches (N = microbatch_group, p by default): it waits for
    min(N, p) whole hops less the (N - p)+ chunks beyond p it runs meanwhile, v - 1 rounds in the fill and as many in
    the drain (the backward's chunks), 2 (p v - 1) whole transfers in all at N = p (pp_comm's wrap, per step; the
    slack is the waiting stage's: stage 0's forward chunks in the fill, stage p - 1's backward chunks in the drain,
    whichever stage is the critical one). With the warm-up and flush waited (Megatron's default) these round trips
    fit the lockstep the blocking sends make, each warm-up iteration a chunk plus one whole send on every rank, and
    the step waits on the last stage's own blocking warm-up and flush sends instead (pp_warmup_flush, 2 (v - 1) N).
    A replay of the schedule's dependencies by hand: forward chunk time c, hop h, p = 4, v = 2, N = m = 4:
    stage 3 ends micro-batch 0's chunk 0 at 3 (c + h) + c, stage 0 gets it at 4 c + 4 h, idle since 4 c (4 h); stage
    3 ends its chunk 1 at 7 (c + h) + c = 8 c + 7 h: 7 = p v - 1 hops before the last stage's first backward, 3 in the
    bubble's (p - 1) and 4 = min(N, p) more.
    DualPipe keeps frac_m x 2 v (v = 1; [8]'s bubble: at F = B = W and p 16, 2 x 14 / 3 = 9.3 whole hops a step,
    about 17.7 at DeepSeek-V3's layout with its own pass times): no closed form of its fill hops follows from the
    code. A dependency replay of deepseek-ai/DualPipe @bb214e82 dualpipe.py DualPipe.step (steps 1-8, l. 358-425;
    scripts/pp_schedule_replay.py dualpipe) gives [8]'s bubble at F = B = W (14 units at p 16) but puts nearly every
    hop of the step on its path where a forward-backward pair is one op with its outputs at its end (p 16, m 120:
    the step grows by 133 S, not 2 (p - 1) = 30 S): its steady state leaves neighbours no slack, so the fill's hops
    cannot be told from the steady state's. The open reference waits each chunk's exchange whole anyway
    (_commit_and_wait_comm, l. 285-292, before every chunk's compute, l. 185-214); under the runtime the stack prices
    (deepseek: the report's overlap inside each pair, arXiv:2412.19437 sec. 3.2.1, Fig. 4) the hops the step waits
    on depend on where inside a pair its forward output is ready, which the code leaves to the model's own
    overlapped_forward_backward (l. 168) and the report does not give. A named approximation, kept (issue 22).
[32] An MLA layer's TP collectives as the stack's code runs them (stack mla_tp_gathers; mla_tp_collectives), per layer
    and micro-batch over the TP group, T the micro-batch's tokens on the rank's CP shard, bf16. 'input' (torchtitan:
    the normed input gathered to every TP rank before the replicated down projections, the output reduce-scattered;
    @e347b1e5e torchtitan/models/deepseek_v3/infra/parallelize.py l. 256-296, release/0.3 @4f9e9a47d models/
    deepseek_v3/sharding.py l. 72-133): the block's pair, AG(T h) + RS(T h) each way under SP, else AR(T h) each
    way, as a standard attention block's (tp_pairs (1.0,)). 'latents' (Megatron-Core): NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/multi_latent_attention.py MLASelfAttention, unfused (gpt_layer_specs.py l. 295-311:
    input_layernorm a TENorm of its own on the rank's s / t tokens, the down projections backend.linear(), TELinear):
    linear_q_down_proj and linear_kv_down_proj parallel_mode 'duplicated' (l. 524-556, 571-600), no collective, run
    on the rank's s / t tokens under SP (_qkv_down_projection l. 638-664: q_compressed [s / TP, b, r_q],
    kv_combined [s / TP, b, r_kv + d_rope]); the rotary key all-gathered along the sequence at tp > 1 under SP
    (l. 756-763, gather_from_sequence_parallel_region: T d_rope; its backward a reduce-scatter, mappings.py
    _GatherFromSequenceParallelRegion); the column-parallel up projections linear_q_up_proj (l. 865) and
    linear_kv_up_proj (l. 875), TEColumnParallelLinear (TELayerNormColumnParallelLinear with qk_layernorm), all-gather
    their latent input along the sequence under SP before the GEMM (NVIDIA/TransformerEngine @4329ff84 transformer_
    engine/pytorch/module/linear.py l. 359-364, layernorm_linear.py l. 284-290: T r_q, T r_kv) and reduce-scatter
    its gradient backward (linear.py l. 1033-1043: without SP all-reduce it; layernorm_linear.py l. 857-867); without
    a q latent linear_q_proj (l. 869) is that column-parallel linear on the hidden states (T h). The output
    linear_proj row-parallel: RS(T h) forward, AG(T h) backward (without SP an all-reduce forward). Per layer:
      forward:  SP: AG(T r_q) + AG(T r_kv) + AG(T d_rope) + RS(T h);      no SP: AR(T h)
      backward: SP: RS(T r_q) + RS(T r_kv) + RS(T d_rope) + AG(T h);      no SP: AR(T r_q) + AR(T r_kv)
    (r_q read as h without a q latent); DeepSeek-V3 gathers T (1,536 + 512 + 64) = 2,112 columns a token where the
    pair priced T x 7,168. Each a collective of its own, synchronous on the compute stream (the input gradient's
    reduce-scatter issued async beside the wgrad GEMM, priced exposed as every column-parallel linear's). The same
    at Megatron-LM 905c0e386 (Megatron-Bridge's pin): l. 422-496, 526-552, 636-641, 743-753. FusedMLASelfAttention
    (job mla_down_proj_fusion, [30]) runs the same up-projection gathers and output collectives but no rotary-key
    gather (the rotary key comes whole out of the latents' column gather, l. 745-750), beside its own [30].
    A re-run forward repeats the forward ones: full recompute, and under selective recompute the up projections'
    gathers where the policy re-runs them (recompute_projections q -> the q up projection's, k / v -> the kv up
    projection's: --recompute-modules mla_up_proj, l. 171-174, 983-988: CheckpointWithoutOutput re-runs
    qkv_up_proj_and_rope_apply, l. 855-981, in the backward; no collective without SP). Under fp8 TE gathers the
    quantized input (linear.py l. 360-364), priced at the recipe's width [33]. TE's re-gather of the up projections'
    inputs for their wgrad GEMMs under SP (linear.py l. 897-923: T r_q, T r_kv; T h for linear_q_proj) is priced
    behind each one's dgrad GEMM, as every column-parallel SP linear's ([35], regather_seconds), once a backward,
    whatever the policy re-runs.
[33] Each TP collective of a layer's linear pair at the width it moves under a low-precision recipe (issue 22; stack_db
    fp8_recipes tp_collective_bytes, schema.TPCollectiveBytes, with the sources; tp_bytes): under SP Transformer
    Engine (NVIDIA/TransformerEngine @4329ff84, transformer_engine/pytorch) quantizes a column-parallel linear's input
    before its all-gather (module/layernorm_linear.py l. 207-290: the norm writes the quantized output, then
    distributed.py gather_along_first_dim with the input quantizer row-wise only; module/linear.py l. 330-371,
    layernorm_mlp.py l. 454-476 the same) and a row-parallel linear's output gradient before its backward all-gather
    (module/base.py grad_output_preprocess l. 1610-1631, the quantizer row- and column-wise), while the output's and
    the input gradient's reduce-scatters run on the GEMMs' bf16 outputs (distributed.py reduce_scatter_along_first_dim
    l. 928-950). Per element: delayed and tensorwise 1 B each way (_all_gather_fp8 l. 982-1072: the row-wise data,
    the scale not gathered, the transpose made after); MXFP8 1.03125 B forward and 2.0625 B backward (_all_gather_mxfp8
    l. 1509-1637: 1 B and an e8m0 scale per 32 for each usage held, the output gradient both); blockwise the same with
    fp32 scales per 128 (_start_all_gather_fp8_blockwise l. 1076-1223); NVFP4 0.5625 B forward and 1.125 B backward
    (_all_gather_nvfp4 l. 1324-1506: 0.5 B and an e4m3 scale per 16). A pair of size T h x mult then costs, per
    way, forward RS(T h mult x output_reduce_scatter) + AG(T h mult x input_all_gather) + the amax all-reduce,
    backward RS(T h mult x grad_input_reduce_scatter) + AG(T h mult x grad_output_all_gather) + the amax
    all-reduce (tp_pair_ways); MLA's up projections' gathers and linear_proj's pair ([32]) and the fused down
    projection's input gather ([30]) take the same widths; the all-reduces without SP,
    the expert-TP pair, DeepSpeed's gating gather, Megatron's own mappings (the rotary key's gather, the fused latents')
    stay bf16. Under --tp-comm-overlap Megatron-LM @d98e8a64 initializes TE's userbuffers in its FP8 mode with --fp8
    (megatron/training/initialize.py l. 229-244) and the all-gather buffers hold uint8 (TE module/base.py initialize_ub
    l. 310-321, 366, 448-451): the same bytes, hidden as every TP collective here. The layers a low-precision plan keeps
    bf16 (--first-last-layers-bf16: bf16_end_layers) pay bf16 widths (_bf16_end_tp). torchtitan's TP stays bf16 under
    every recipe (no table): @e347b1e5e models/llama3/infra/parallelize.py l. 76-94 applies torchao's
    Float8ColwiseParallel (fp8 gathers) only where "float8" is a member of model.converters, a name that commit does not
    register (startup.py TORCHTITAN_MX_TP_COMPILE's note), and rowwise and MX converters never. Tensorwise and NVFP4
    all-reduce the local amax over the TP group before each quantized gather (layernorm_linear.py l. 1902-1970,
    linear.py l. 2094-2140 with_amax_reduction; csrc/quantizer.cpp l. 919-926, 2339-2369): one all-reduce of
    amax_all_reduce_bytes (4 B, 8 B) a gather, synchronous (amax_reduce). TE's re-gather of a column-parallel input
    for the wgrad GEMM moves the saved quantized input at input_all_gather's width, with no amax all-reduce ([35]).
[34] Delayed scaling's amax reductions (stack_db fp8_recipes amax_reduction, schema.AmaxReduction; fp8_amax_comm, inside
    tp_comm, its own key tp_fp8_amax_s). NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch: under
    DelayedScaling each fp8 module registers, once, its current amax row (amax_history[0], one fp32 a quantizer:
    num_gemms x 3 forward, input, weight and output, num_gemms x 2 backward, the output and input gradients, module/
    base.py l. 1060-1062) in a global buffer keyed by (recipe, amax group) (quantization.py
    add_fp8_tensors_to_global_buffer l. 491-556): every module of the rank, all its layers and model chunks, in one
    buffer. At the exit of the outermost fp8_autocast region, grad enabled, the forward buffer is concatenated and
    all-reduced (max) over the group, async_op False (autocast_exit l. 762-772, reduce_and_update_fp8_tensors
    l. 646-702, reduce_tensor_across_group_op_max l. 635-644); the region's first fp8 module flags its backward
    (linear.py _check_fp8_reduce_and_update l. 242-249, l. 1335-1344), which reduces the backward buffer (l. 1362-1370;
    layernorm_linear.py l. 1137, layernorm_mlp.py l. 1794, grouped_linear.py l. 897): one reduction each way a region.
    Current scaling, MXFP8, blockwise and NVFP4 register nothing (their TP amax is [33]'s). NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/transformer_block.py l. 619-660 opens one region around the whole TransformerBlock
    forward under delayed scaling (each layer its own under the other recipes): one a model chunk a micro-batch;
    fp8_utils.py l. 857-865 passes get_amax_reduction_group(with_context_parallel=True): TP x DP x CP
    (parallel_state.py l. 1877-1890, 1298-1309); TransformerConfig.tp_only_amax_red (TP x CP instead, transformer_config.py
    l. 646, default False) has no command-line argument at @d98e8a64 (arguments.py l. 2307-2335). Per micro-
    batch a stage pays vpp x (AR(12 B x G) + AR(8 B x G)), G its fp8 GEMMs (fp8_gemms_per_layer: every GEMM row but the
    router, a grouped linear's local experts each), over amax_group (tp cp dp ranks at the smallest stride of its axes:
    a named approximation where pp lies between them), synchronous: exposed. Latency-bound (Llama 3 8B on 8 H100 at
    tp 2: 1,536 B and 1,024 B, 30.1 us a micro-batch under NCCL's LL ring, 15.0 us each: comm.py's protocols [17];
    46 us under the Simple protocol alone, NVLS's 23 us each, before they were priced). Full recompute (Megatron's
    te_checkpoint under fp8, recompute.py @d98e8a64
    l. 128-141, TE's reentrant checkpoint): the forward runs under no_grad, where the chunk's first module still consumes
    the region's flag; the backward re-runs each checkpoint under a new autocast (distributed.py _CheckpointFunction.
    backward l. 437-443), whose exit at depth 0, grad enabled, reduces the forward buffer again (one more a
    checkpoint); its autocast_enter at depth 0 sets is_first_fp8_module (quantization.py l. 744-745, after
    activation_recompute_forward's restore, distributed.py l. 265-268), which the recompute phase puts back after each
    module's check (linear.py l. 245-248): every re-run module's backward reduces the backward buffer (TE PR #3213, open
    on 2026-07-15, "Fix duplicate FP8 state updates during activation checkpoint recomputation"). Priced so
    (fp8_amax_comm's rc terms); no tests/data run does full recompute under delayed scaling: unchecked.
    torchtitan's float8 (torchao) scales dynamically (no amax history, no region buffer): its per-cast TP amax
    all-reduces and FSDP's fp8 all-gather amaxes are [39]'s.
[35] The backward's re-gather of a column-parallel linear's sequence-parallel input for its weight-gradient GEMM
    (regather_inputs, regather_seconds; extra tp_wgrad_regather_s, inside tp_comm). Under SP a column-parallel linear
    all-gathers its sequence-sharded input before the forward GEMM but saves only its own shard for the backward, so
    the wgrad GEMM (dW = dY^T X over the whole sequence) needs it gathered again. NVIDIA/TransformerEngine @4329ff84
    transformer_engine/pytorch/module/linear.py: backward_input_needs_gather = weight requires grad, parallel_mode
    'column' and sequence_parallel (l. 1869-1873); the forward saves inputmat, the local (un-gathered) input (l. 541-
    563); the backward gathers it, gather_along_first_dim(..., async_op=True) (l. 897-923), before the dgrad GEMM
    (l. 997-1010), and waits on it only before the wgrad GEMM (l. 1083-1085); module/layernorm_linear.py the same for
    the fused-norm QKV and fc1 (ln_out saved local, l. 440-446, ln_out_needs_gather; the gather l. 724-749; the wait
    l. 942-944). Under fp8 the saved input is already quantized: delayed / tensorwise gather their row-wise data
    (the transpose made after), MXFP8 / blockwise / NVFP4 the column-wise data the wgrad GEMM reads (l. 899-905), at
    the recipe's input_all_gather width ([33]: 1 B; 1.03125 B; 0.5625 B), with no new amax all-reduce (the quantizer
    ran in the forward). With --tp-comm-overlap Megatron-LM @d98e8a64 passes ub_bulk_dgrad = tp_comm_bulk_dgrad
    (default True, model_parallel_config.py l. 276; extensions/transformer_engine.py l. 1458-1459), and TE fills the
    userbuffers all-gather buffer instead (linear.py l. 907-913, layernorm_linear.py l. 734-740), the dgrad GEMM
    running with bulk_overlap (linear.py l. 1009, layernorm_linear.py l. 831): the same gather beside the same GEMM
    (TE turns the bulk overlap off where ub_overlap_rs_dgrad, linear.py l. 1537-1541, which Megatron leaves off:
    tp_comm_overlap_rs_dgrad default False, l. 291). Megatron's own linears (the output layer, the local spec) do the
    same (megatron/core/tensor_parallel/layers.py l. 666-687: the async all-gather, grad_output.matmul(weight), then
    handle.wait()), and microsoft/Megatron-DeepSpeed @f4157bea megatron/core/tensor_parallel/layers.py l. 293-320
    (stack megatron-deepspeed under --sequence-parallel). Priced per layer and micro-batch, once a backward (a
    recomputed layer's re-run is a forward: its forward gather is in the pairs' 2 x forward; its backward gathers
    once): per column-parallel linear on a gathered input (regather_inputs: attention's qkv and the MLP's fc1 on T h,
    the Mamba / Gated DeltaNet in_proj on T h; MLA's up projections on the latents where the stack gathers them, [32],
    the fused down projection on T h, [30]) one all-gather over the TP group of T x its input's columns, hidden behind
    that linear's dgrad GEMM (its forward GEMM's seconds: the dgrad runs the forward's shape, [1]) as the file's other
    async transfers beside compute (_hide at the stack's overlapped_exposed_fraction): max(AG - dgrad, 0) + the
    overlapped part x the fraction. On a stack whose SP linears save their all-gathered input (stack
    memory.tp_saves_gathered_input: torchtitan, whose DTensor ColwiseParallel redistributes the Shard(1) input to
    Replicate before F.linear and autograd saves that gathered tensor, memory.py counting it held, kind_activation_bytes
    gathered_input) nothing is re-gathered: 0 s. The output layer's re-gather was not priced (nor its forward gather)
    before [36]: head_tp_seconds prices both. The shared experts' fc1 is such a linear where they run their own pair
    ([37]), not under --moe-shared-expert-overlap ([38]: it saves the gathered input, _regathers).
    Under tp_comm_overlap the pairs hide behind a pool of the layer's GEMMs (tp_layer_seconds' hidden(): 3 x its
    forward GEMMs, 4 x for a re-run layer), which held these dgrad GEMMs too, so that one GEMM hid two transfers.
    In TE's userbuffers backward it does not: with Megatron's defaults (ub_bulk_dgrad and ub_bulk_wgrad on,
    ub_overlap_rs_dgrad off) a column-parallel SP linear's dgrad GEMM runs beside the bulk all-gather of its input
    (the re-gather: linear.py @4329ff84 l. 799-805 ub_type_dgrad AG on ub_obj_dgrad, the fill l. 907-913, the GEMM
    with bulk_overlap l. 997-1010), while the pair's backward reduce-scatter of that linear's dgrad output runs in the
    bulk overlap of its wgrad GEMM (l. 805-807 ub_type_wgrad RS, dgrad read back from ub_obj_wgrad l. 1031-1032, the
    wgrad GEMM's bulk_overlap l. 1178-1181); the row-parallel linear's grad-output gather overlaps its own dgrad
    (ub_overlap_ag, l. 789-793). So the re-gathered linears' dgrad GEMMs (regather_windows: their rows' forward
    seconds) leave the pairs' pool wherever the plan re-gathers (regather_on): the pairs hide behind 3 x the forward
    GEMMs less those (before issue headsp the pool kept them and each hid both its re-gather and the pairs' share).
[36] The TP collectives outside the layers: the embedding, the output layer and the vocab-parallel loss (head_tp_seconds,
    loss_tp_seconds; extra tp_head_s, inside tp_comm), per micro-batch, T h bf16 each (ACT_BYTES) unless said, over the
    TP group; 0 at tp 1. NVIDIA/Megatron-LM @d98e8a64: the embedding, VocabParallelEmbedding (megatron/core/
    tensor_parallel/layers.py l. 336-385), reduce-scatters its partial output into the sequence-parallel layout under SP
    (reduce_scatter_embeddings, l. 367-380; models/common/embeddings/language_model_embedding.py l. 51-56: without a
    learned absolute position embedding or token types), whose backward all-gathers the gradient (mappings.py
    reduce_scatter_to_sequence_parallel_region), and all-reduces it without SP (reduce_from_tensor_model_parallel_region,
    l. 381-383; identity backward): under SP one reduce-scatter forward and one all-gather backward, else one
    all-reduce, synchronous, on the first stage. A learned absolute position embedding (GPT-3 style) or
    microsoft/Megatron-DeepSpeed's embedding all-reduces and then splits the sequence (scatter_to_sequence_parallel_region,
    backward an all-gather): priced as the reduce-scatter, a named approximation (short by an all-reduce less a
    reduce-scatter). pytorch/torchtitan @e347b1e5e torchtitan/models/llama3/infra/parallelize.py apply_tp: tok_embeddings
    RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)): the same reduce-scatter forward, all-gather
    backward. The output layer (gpt_model.py l. 272-295: tensor_parallel.ColumnParallelLinear, TE's LM head only under
    MXFP8's output projection, priced the same at bf16 widths: a named approximation) under SP all-gathers its
    sequence-sharded input forward (layers.py LinearWithGradAccumulationAndAsyncCommunication.forward l. 628,
    synchronous); its backward re-gathers the saved local input for the wgrad GEMM, async beside the dgrad GEMM
    (l. 674-687, [35]), and reduce-scatters the input gradient, async beside the wgrad GEMM (l. 701-707, waited
    l. 790); without SP it all-reduces the input gradient, async the same way (allreduce_dgrad, l. 694-696, 807-808).
    Each async transfer hides behind that GEMM (the output GEMM's one-pass seconds, head_gemm) by _hide at the stack's
    exposed share. torchtitan's output ColwiseParallel(input_layouts=Shard(1), use_local_output=not loss_parallel)
    all-gathers the input forward (DTensor redistribute Shard(1) -> Replicate, synchronous), saves the gathered input
    (stack memory.tp_saves_gathered_input: no re-gather) and reduce-scatters the input gradient in the backward's
    redistribute, synchronous: exposed (the stack flag selects DTensor's synchronous redistribute: a stack setting).
    The loss keeps the logits vocab-parallel (V / t a rank, head_time) and reduces T fp32 values a row forward
    (loss_tp_seconds): Megatron's vocab_parallel_cross_entropy (tensor_parallel/cross_entropy.py l. 130, 146-152: the
    logits' max, the predicted logit, the sum of exps) three all-reduces of 4 T B; cross_entropy_loss_fusion's
    native one (fusions/fused_cross_entropy.py l. 94, 112-114: the max, then predicted logit and sum of exps batched)
    two, of 4 T B and 8 T B; TE's (NVIDIA/TransformerEngine @4329ff84 pytorch/triton/cross_entropy.py l. 46, 76-82,
    cross_entropy_fusion_impl te) one all_gather_into_tensor of 3 fp32 a row (12 T B a rank). DTensor's loss_parallel
    (torchtitan's default) is priced as the unfused three all-reduces (torch.distributed.tensor.parallel loss.py's
    _log_softmax max and sum and the NLL's target gather each reduce over the mesh: from the PyTorch source, no copy
    here: unverified). Synchronous: exposed. The output layer and the loss run on the last stage, the embedding on the
    first (at pp 1 the one stage holds both); each multi-token prediction module embeds its shifted tokens, runs the
    output layer and its loss again (megatron/core/transformer/multi_token_prediction.py l. 1476, 1013, 1027): its own
    set on the last stage. DualPipe's end ranks pair the first and last stages' as their compute (stage_comm). Before
    branch headsp none of these was priced.
[37] An MoE layer's shared experts' own TP collectives (stack moe_shared_experts_tp_pair, shared_experts_pair; extra
    tp_shared_experts_s, inside tp_comm). NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/shared_experts.py
    SharedExpertMLP is an MLP on the attention's TP group (l. 111-134, tp_group = pg_collection.tp), built with the
    MLP's submodules (models/gpt/moe_module_specs.py l. 21-35, 83-84: TEColumnParallelLinear fc1, TERowParallelLinear
    fc2, the config's sequence_parallel) and called by moe/moe_layer.py shared_experts_compute (l. 507-531) on the
    layer's [s / tp, b, h] input: under SP fc1 all-gathers T h and fc2 reduce-scatters T h forward, the reverse
    backward, without SP an all-reduce each way, one pair of T h each way as a dense layer's MLP: priced by the same
    tp_pair_ways way(1.0), at the recipe's widths ([33]: TE's Linear quantizes fc1's input before its gather, as for a
    dense fc1), with the amax all-reduce where the recipe has one, and fc1's wgrad re-gather ([35]: regather_inputs
    shared_up; under fp8 recipes other than delayed Megatron sets save_original_input on fc1, shared_experts.py
    l. 146-161, and TE quantizes the saved bf16 input before the backward's gather, module/linear.py l. 872-913: the
    same width). mlp.py l. 228, 251 give the linears the ub names fc1 / fc2 (extensions/transformer_engine.py
    l. 1473-1487): under --tp-comm-overlap they run on userbuffers, priced inside the layer's hidden() with its other
    pairs. A selectively recomputed MoE block (recompute_modules moe) or shared-experts module (shared_experts,
    te_checkpoint under fp8, else tensor_parallel.checkpoint, moe_layer.py l. 517-529) re-runs their forward pair in
    the backward; full recompute re-runs it as the layer's other forward pairs. Their share (tp_shared_experts_s) is the layer's exposed TP seconds less those
    without them. Under --moe-shared-expert-overlap (the job's moe_shared_expert_overlap) they run no such pair: [38].
    The gated shared expert (Qwen's, --moe-shared-expert-gate, l. 136-145,
    203-206) adds a replicated 1 x h GEMM on the local tokens and no collective. torchtitan @e347b1e5e
    models/llama4/infra/parallelize.py apply_moe_ep_tp l. 517-555 (which deepseek_v3's and qwen3's parallelize use):
    the moe module's input all-gathered once (Shard(1) -> Replicate) and its Partial output reduce-scattered once,
    moe.shared_experts.w1 / w3 colwise and w2 rowwise with Partial output inside that layout: no collective of their
    own (moe_shared_experts_tp_pair false, the default). The deepseek stack (HAI-LLM) runs no TP (max_tp 1).
[38] Megatron-Core's --moe-shared-expert-overlap (job field moe_shared_expert_overlap: the Megatron reader's flag,
    Bridge's model.moe_shared_expert_overlap; export writes it back; fit takes the job's, not searched; refused without
    shared experts, on a stack whose shared experts are not SharedExpertMLP, with the allgather dispatcher and with
    ep_comm_overlap: plan.moe_shared_expert_overlap) (shared_overlap_segments, extra ep_shared_experts_tp_s,
    inside ep_comm). NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/shared_experts.py l. 163-198: fc1 and fc2
    get parallel_mode None and every ub_overlap flag off (TE's Linear then runs no TP collective of its own and no
    userbuffers: the layer's hidden() pool under --tp-comm-overlap loses them), and l. 233-374 split the forward into
    pre_forward_comm (gather_from_sequence_parallel_region under SP, copy_to_tensor_model_parallel_region without: bf16,
    Megatron's own mappings, whatever the recipe), linear_fc1_forward_and_act, linear_fc2_forward, post_forward_comm
    (reduce_scatter_to_sequence_parallel_region, reduce_from_tensor_model_parallel_region without SP) and get_output,
    each on SharedExpertMLP.stream, a side stream; the compute stream waits on it in get_output only (l. 373). The
    dispatcher places them (moe/token_dispatcher.py): alltoall, l. 657-658 the gather issued before permutation 1,
    l. 697-717 the side stream waiting on the compute stream and fc1 issued right after the tokens' all-to-all ("Make
    sure the shared experts fc1 is overlapped with dispatch A2A"), l. 858-873 fc2 and the reduce-scatter right after
    the combine's all-to-all, l. 904-907 the output added after the unpermutation; flex (DeepEP, Hybrid-EP), l. 1972-
    1979 the gather and fc1 after the fused dispatch kernel is issued, l. 2029-2051 fc2 and the reduce-scatter in
    combine_postprocess, after the combine has returned. Backward: autograd runs each op's backward on its forward's
    stream; the sequence numbers set by set_tensor_grad_fn_sequence_sr (l. 254, 316-320, 330, 356) launch the
    reduce-scatter's backward (an all-gather) and fc2's backward with the combine's gradient all-to-all, and fc1's
    backward (after _BackwardStreamWait, l. 88-99: once the routed experts' fc1 backward is done) with the dispatch's
    gradient all-to-all, then the gather's backward reduce-scatter. Megatron-Core 905c0e386 (Megatron-Bridge) the same
    pieces (token_dispatcher.py l. 628, 694, 834-835; alltoall only, transformer_config.py l. 1213-1218). Priced per
    MoE layer and micro-batch as four segments, each an all-to-all A on the compute stream (the dispatcher's transfers,
    dispatch.transfers) beside the side stream's GEMMs G (fc1 or fc2: the shared_up / shared_down rows' forward
    seconds, layer_times' shared_gemms, 2x backward [1]) and one TP collective C (T h bf16 over the TP group) before or
    after them; the segment ends at max(A, C + G), so beyond the GEMMs (in compute) it exposes max(A - G, C): the
    all-to-all's _hide(A, G, x) (the stack's exposed share of an overlapped transfer, as the file's other overlaps) and
    C's remainder max(C - that, 0), the extra ep_shared_experts_tp_s. Forward: the dispatch beside the gather and fc1;
    the combine beside fc2 and the reduce-scatter (flex: both exposed whole, after the combine). Backward: the
    combine's gradient beside the all-gather and fc2's backward; the dispatch's gradient beside fc1's backward and the
    reduce-scatter. A re-run forward (full recompute, recompute_modules moe) repeats the forward segments. The
    probabilities' all-to-all stays exposed (tokens A2A -> fc1 -> probs A2A, l. 712-724: after fc1 is issued), as do the
    token counts. The shared experts' pair then leaves tp_comm ([37]: tp_shared_experts_s 0), and fc1, on the gathered
    input it saves (memory.py [se]), re-gathers nothing ([35]: _regathers). Named approximations: the gather issued
    before permutation 1 is priced beside the dispatch only (permutation 1 as a window is left out: an upper bound on
    what is exposed); GEMMs on the two streams do not overlap each other (the side stream's GEMMs that outlast an
    all-to-all run beside the routed experts' and are counted whole, as compute); the two streams' collectives share
    the links without contention. No tests/data run sets the flag: unchecked against a measurement.
[39] torchao float8's dynamic-scaling collectives (stack_db fp8_recipes dtensor_amax_bytes, float8_tp_styles,
    fsdp_amax_bytes: torchtitan's tensorwise; dynamic_amax_comm, fsdp_fp8_amax; extra tp_fp8_dynamic_amax_s). A
    tensorwise cast takes the amax of the whole tensor (pytorch/ao @9cd41075, the nightly nearest torchtitan
    @e347b1e5e, torchao/float8/float8_utils.py tensor_to_amax l. 57-82: torch.max(torch.abs(x))); on a TP-sharded
    DTensor that is a Partial(max) value, which amax_to_scale's clamp (l. 45-47) needs whole: DTensor all-reduces it
    (MAX) over the TP group before the cast, waited on (exposed). Which casts see a sharded DTensor (fp8_linears [4]):
    torchtitan's TP plans make every TP-split weight a DTensor, so each converted weight's cast (float8_linear.py
    matmul_with_hp_or_float8_args l. 68-83 forward, l. 125-141 again for the dgrad GEMM) all-reduces, unless FSDP
    gathered it as float8 already (tensor_already_casted_to_fp8; fsdp_gathers_fp8); a row-parallel linear's input is a
    Shard(-1) DTensor (its cast in the forward, or in Float8RowwiseParallel._prepare_input_fn l. 123-134); a
    column-parallel linear's output gradient reaches the Function's backward as a Shard(-1) DTensor (l. 107-123; a
    row-parallel one's Replicate, after the all-gather its reduce-scatter's backward runs). Under torchao's float8 TP
    styles (stack float8_tp_styles) PrepareFloat8ModuleInput casts each block's Shard(1) input before its float8
    all-gather (float8_tensor_parallel.py l. 218-240; the column-parallel linears then find it cast, l. 59-65) and
    every block linear's output gradient is cast on its DTensor (NoopFwToFloat8BwDynamic, float8_scaling_utils.py
    l. 90-120). torchtitan @e347b1e5e runs the plain styles: models/llama3/infra/parallelize.py l. 76-93 tests
    "float8" in model.converters, a name that commit no longer registers ("quantize.linear.float8"), so
    enable_float8_tensorwise_tp is false (its TP collectives bf16 too, tests/test_fp8_tp_widths.py); before
    8a2686c4a (2025-09-30) it ran the float8 styles. Llama 3 8B at tp 2 with bf16 FSDP gathers, plain styles: 7 + 2
    forward (weights; wo's and w2's inputs) and 5 + 7 backward (wq, wk, wv, w1, w3's output gradients; weights) = 21
    all-reduces a layer a micro-batch, 7 where FSDP gathers fp8 (float8 styles: 25 and 11); full recompute's re-run
    forward repeats the forward's. The fp8 output layer (plain ColwiseParallel, Shard(-1) logits) adds its weight's two
    casts and its output gradient's on the last stage. Each all-reduce of dtensor_amax_bytes: 8 B, a 0-d float64 (an
    assumption: 2 B bf16 if DTensor resolved the Partial at the max; latency-bound either way). Under FSDP's fp8
    all-gather (fsdp_gathers_fp8) torchao's WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather (fsdp_utils.py
    l. 228-246) all-reduces each converted weight's fp32 amax over the FSDP shard group (reduce_amax=True, the mesh FSDP
    passes; float8_utils.py l. 74-80) before the unit's all-gather: one all-reduce of fsdp_amax_bytes (4 B) a weight in
    each gather, on the gather's path (dp_comm adds them to each pass's all-gather, hidden as it is). With the job's
    fp8_precompute_scale (torchtitan [float8] precompute_float8_dynamic_scale_for_fsdp, components/quantization/
    float8.py l. 95-99, post_optimizer_hook l. 163-173) the scales come from precompute_float8_dynamic_scale_for_fsdp
    (fsdp_utils.py l. 27-80) after each optimizer step instead: one all-reduce of every converted weight's amax stacked
    (fp8_weights_on x 4 B) over the weights' mesh, the shard group and at tp > 1 the TP group, exposed (dp_comm's
    total and exposed, step-end part). Not priced: the rowwise recipe's axiswise casts under plain TP (an amax along a
    sharded dim is a Partial vector: wo's and w2's weights and inputs; torchtitan 0.3's only float8 recipe), the
    re-runs of selective (op) recompute (torchtitan's _op_sac_save_list keeps aten.max but not the all-reduce), the
    precompute's _foreach_norm read of the weights (memory-bound compute); the float8 styles' 1 B all-gathers and their
    fp8 saved gathered input (the stack's are the plain styles'). deepseek_v3's NotImplementedError on tensorwise TP
    (models/deepseek_v3/infra/parallelize.py l. 76-87) tests the same name and never fires at @e347b1e5e. Memory: none
    (0-d amaxes; the precompute's buffer, 4 B a weight, after the backward has freed the activations).
[40] The sharded optimizer's parameter all-gather apart from the gradient reduction's overlap (the Job's
    dp_param_gather_overlap; Megatron's --overlap-param-gather beside --overlap-grad-reduce, which arguments.py
    @d98e8a64 l. 1024-1029 requires). Without it NVIDIA/Megatron-LM @d98e8a64 megatron/core/optimizer/
    distrib_optimizer.py step_with_ready_grads (l. 3168-3198: should_sync_params = not overlap_param_gather, then
    start_param_sync_for_bucket_group_subset) all-gathers every bucket's updated 16-bit weights right after the step,
    synchronously (param_and_grad_buffer.py l. 386-408: async_op = overlap_param_gather and not force_sync): the whole
    once-a-step all-gather (ddp_traffic's ddp_param: its bytes gather_bytes' over the shard group, bucketed) on the
    critical path, where with it the buckets' gathers are dispatched asynchronously and waited on by the next
    forward's pre-hooks (distributed_data_parallel.py l. 476-479, 614-640), hidden behind that forward but the first
    bucket's. Read at the zero1 / zero2 levels (the distributed optimizer; Megatron-FSDP's optim / optim_grads, whose
    start_param_sync takes the same flag: megatron_fsdp.py l. 1288-1302); the FSDP levels' per-unit gathers are the
    FSDP path's, under dp_comm_overlap (Megatron-FSDP's optim_grads_params forces overlap_param_gather on,
    megatron_fsdp.py l. 328-330). Left out (None) the gather follows the plan's DP overlap as it runs. Muon's
    layer-wise distributed optimizer (zero1 under optimizer muon, [28]) the same: layer_wise_optimizer.py @d98e8a64
    step_with_ready_grads (l. 965-987) all-gathers after the step unless overlap_param_gather (DDP's start_param_sync
    of its buckets with the layout, allgather_params on the legacy path: _layerwise_gather), and Megatron-Core
    905c0e386 (Megatron-Bridge's pin) hands config.overlap_param_gather to LayerWiseDistributedOptimizer as
    async_allgather (optimizer/muon.py l. 347-354; layer_wise_optimizer.py l. 280-288), the forward's pre-hooks
    gathering with ddp.overlap_param_gather (distributed_data_parallel.py l. 239-242, 350-353).
    DeepSpeed's ZeRO-1/2 has no such switch: microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage_1_and_2.py
    DeepSpeedZeroOptimizer.step (l. 1826-1944) ends with all_gather_dp_groups of the updated 16-bit partitions
    (l. 1927-1935, inside the OPTIMIZER_ALLGATHER timer) -> runtime/utils.py all_gather_into_tensor_dp_groups
    (l. 954-962: dist.all_gather_into_tensor per group, no async_op: deepspeed/comm/comm.py l. 303-311, default
    False) on the current stream; overlap_comm only picks reduction_stream for the gradient reduction (average_tensor
    l. 1051-1058, reduce_ipg_grads l. 1382-1383, allreduce_and_copy l. 1530-1535). The BF16_Optimizer (the mode
    bf16_optimizer) the same: bf16_optimizer.py step -> update_lp_params (l. 312, 423-437: all_gather_dp_groups).
    So too at the DeepSpeed of the other DeepSpeed stacks: @77b649d16 stage_1_and_2.py l. 1748-1754,
    bf16_optimizer.py l. 251-254; @a12aaedc stage2.py l. 1488-1520 (sequential dist.all_gather per shard). Those
    stacks' overlap.dp_param_gather_overlap_supported false: the gather is exposed whole under overlap_comm too, and
    a job's dp_param_gather_overlap true is refused there (plan._dp_param_gather_overlap).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import comm, dispatch, moe
from .dispatch import dispatcher_rows  # noqa: F401 (each plan's dispatcher, moved to dispatch.py: memory.py reads it too)
from .compute import (
    ATTN_BWD_FLOPS_RATIO, EAGER_GEMM_PRECISION, HBM_EFFICIENCY, attention_block_rate, attention_head_dim_factor, attention_kernel,
    attention_rates, eager_core_terms, flops_per_token, fp8_attention_speedup,
    output_gemm_shape, price_gemms, recompute_flops_per_token,
)
from .layers import LayerList, layer_count, layer_list, mean_layer, weighted
from .layers.attention import MLA, dense_windows, mean_causal_keys
from .layers.common import ACT_BYTES, muon_distributed, muon_local, shapes
from .layers.moe import EXPERT_GEMMS, ROUTER_DTYPE_BYTES
from .memory import (FP8_GATHER_BYTES, PIPELINE_FIELDS, STEP_FP32_GRAD_BYTES, exchange_reruns, expert_gemms_rerun,
                     fp8_allgather_on, mfsdp_fusion_overridden, mfsdp_hook_unfused, tp_collectives_rerun, master_bytes, mtp_recomputed, params_of, recompute_fraction, recomputed_layers,
                     stage_param_split, muon_largest_params, muon_layout_excess, muon_params_of, muon_other_chunks)
from . import offload
from .params import count_params
from .pipeline import (INTERLEAVED, ONE_F_ONE_B, bubble_fraction, dualpipe_alone_share, dualpipe_pairs, microbatch_group,
                       heaviest_stage_index, reduce_queue_overrun, stage_end_kinds, stage_kind_counts, plan_stage_layers)
from .recompute_modules import block_rerun_times, rerun_kernel_bytes, reruns_dense_mlp, reruns_moe_block
from .plan import BF16, FP8, NVFP4, FSDP, HSDP, RC_FULL, RC_SELECTIVE, ZERO1, PlanArrays, Settings, dp_overlap, fp8_dispatch, tp_overlap
from .stacks import TP_COLLECTIVES, default_stack, embedding_grad_shard, fp8_recipe, grad_accum_bytes, kernel_bytes, main_grad_bytes, plan_context, ring_ranks, sharding_traits, stack_of, te_loss
from .stacks import outer_optim
from .moe import optimizer_shards
from .terms import Groups, Terms, with_fields



def adam_bytes_per_param(bpp, master=None):
    """HBM bytes one parameter's Adam update moves, from its state bytes (schema.BytesPerParam):
    it reads and writes the master copy and the moments, reads the gradient and writes the
    weight: 2 (master + optimizer) + weights + gradients (megatron 18 B: 30; mixed16: 28; bf16
    moments, arXiv:2412.19437 sec. 3.3.3: 22). A master copy below 4 B (none: pure bf16; or
    the 16-bit remainders TE's FusedAdam keeps, fused_adam.py @4329ff84 store_param_remainders)
    does not hold the fp32 value alone: the weight is read too (pure-bf16: 14). master: the master's bytes where they
    differ from bpp.master (memory.master_bytes [mw]: a sharding mode that steps its own fp32 main weights), an array."""
    m = bpp.master if master is None else master
    reread = np.where(np.asarray(m) < 4.0, bpp.weights, 0.0)
    out = 2.0 * (m + bpp.optimizer) + bpp.weights + bpp.gradients + reread
    return float(out) if np.ndim(out) == 0 else out


# profile collective names (nccl-tests) -> comm op codes
PROFILE_OPS = {"all_reduce": comm.ALL_REDUCE, "reduce_scatter": comm.REDUCE_SCATTER, "all_gather": comm.ALL_GATHER,
               "alltoall": comm.ALL_TO_ALL, "sendrecv": comm.SEND_RECV}
# the ops a layer block names for its collectives (planner/layers/)
BLOCK_OPS = {"send_recv": comm.SEND_RECV, "all_to_all": comm.ALL_TO_ALL, "all_gather": comm.ALL_GATHER,
             "reduce_scatter": comm.REDUCE_SCATTER, "all_reduce": comm.ALL_REDUCE}

TIME_TERMS = ("compute", "tp_comm", "cp_comm", "pp_comm", "dp_comm_exposed", "bubble", "optimizer")


def _hide(total, window, exposed_fraction):
    """Time an overlapped transfer of `total` seconds adds behind a compute `window`: what
    outlasts the window, plus the stack's exposed share of the part that overlaps (NCCL
    kernels take SMs and HBM bandwidth from the compute they run beside). Never more than
    `total` (issue: exposed <= total)."""
    over = np.maximum(total - window, 0.0)
    return np.minimum(over + (total - over) * exposed_fraction, total)


# ----------------------------------------------------------------------------- what the pieces share
@dataclass
class StepCtx:
    settings: Settings
    plan: PlanArrays
    ll: LayerList
    ctx: Any  # layers.Ctx
    stack: Any
    m: np.ndarray  # micro-batches per step (float)
    n: dict  # layers per stage: "first", "mid", "last"
    counts: dict  # (K, ...) layers of each kind per stage
    rc: dict  # fully recomputed layers per stage
    hbm: Any  # achievable HBM bandwidth, B/s
    kb: dict  # the stack's memory-bound bytes per element
    fp8: np.ndarray
    recipe: dict
    speed: np.ndarray  # GEMM speed factor: the fp8 recipe's, the run calibration's scale
    gemm_cal: Any
    x: Any  # exposed share of an overlapped transfer (stack, or a run calibration's knob)
    layers: dict = field(default_factory=dict)  # stage -> (counts, layers it holds): mean's divisor, computed once
    memo: dict = field(default_factory=dict)  # what several terms read of this one plan, computed once (dual, windows)

    def nf(self, stage: str) -> np.ndarray:
        """n[stage] as float64, cast once (the per-stage terms multiply it by seconds: numpy casts the int64 layer
        counts to float64 in each such product, the same values)."""
        key = ("nf", stage)
        got = self.memo.get(key)
        if got is None or got[0] is not self.n[stage]:
            got = self.memo[key] = (self.n[stage], np.asarray(self.n[stage], dtype=np.float64))
        return got[1]

    def dual(self) -> np.ndarray:
        """dualpipe_pairs(plan), once per context (stage_comm reads it for every per-stage term)."""
        d = self.memo.get("dual")
        if d is None:
            d = self.memo["dual"] = dualpipe_pairs(self.plan)
            self.memo["any_dual"] = bool(np.any(d))
        return d

    def mean(self, stage: str, values: list) -> np.ndarray:
        """mean_layer(counts, values) of the stage, its weights counts[k] / n once per counts array: the same
        products summed in the same order."""
        counts = self.counts[stage]
        if len(values) == 1:
            return mean_layer(counts, values)
        held = self.layers.get(stage)  # the stage's layer count and weights, once per counts array
        if held is None or held[0] is not counts:
            n = layer_count(counts)
            held = self.layers[stage] = (counts, n, [counts[i] / n for i in range(len(counts))])
        w = held[2]
        return sum((w[i] * v for i, v in enumerate(values)), np.float64(0.0))


def _placement(model, ll: LayerList, plan) -> tuple:
    """(layers per stage: first, middle, last; layers of each kind per stage) of a plan."""
    return (plan_stage_layers(model.num_layers, plan),
            stage_kind_counts(ll, plan))


def _context(settings: Settings, plan: PlanArrays, placed: bool = True) -> StepCtx:
    """What the pieces share. placed False: only what a layer's own time reads (layer_times),
    the pipeline placement (m, n, counts, rc) left None."""
    model, hw, stack, kn = settings.model, settings.hardware, stack_of(settings), settings.knobs
    ll = layer_list(model)
    n = counts = None
    if placed:  # once per distinct pipeline split (terms.Groups, memory.PIPELINE_FIELDS)
        g = Groups(plan, PIPELINE_FIELDS)
        n, counts = g.expand(_placement(model, ll, g.plan))
        n = dict(zip(("first", "mid", "last"), n))
    fp8 = plan.precision != BF16  # fp8 or nvfp4: the plan's low-precision recipe applies
    recipe = fp8_recipe(stack, plan.f8r, hw)
    prof = settings.calibration
    return StepCtx(
        settings=settings, plan=plan, ll=ll, ctx=plan_context(settings, plan), stack=stack,
        m=plan.microbatches.astype(np.float64) if placed else None, n=n,
        counts=counts,
        rc={st: recomputed_layers(settings, plan, n[st]).astype(np.float64) for st in n} if placed else None,
        hbm=hw.hbm_bandwidth * HBM_EFFICIENCY * kn.memory_bound_efficiency_scale,
        kb=kernel_bytes(stack, plan.compile, settings), fp8=fp8, recipe=recipe,
        speed=np.where(fp8, recipe["gemm_speed"], 1.0) * kn.gemm_efficiency_scale,
        gemm_cal=None if prof is None else getattr(prof, "gemm", None),
        x=stack.overlap.overlapped_exposed_fraction if kn.overlapped_exposed_fraction is None
        else kn.overlapped_exposed_fraction,
    )


# ----------------------------------------------------------------------------- compute
@dataclass
class LayerTimes:
    """Per layer kind, seconds per micro-batch on one GPU (lists indexed like LayerList.kinds)."""

    fwd: list
    bwd: list
    gemm_fwd: list  # forward GEMMs
    core_fwd: list  # attention / scan core, forward
    core_bwd: list
    sel: list  # what selective recompute re-runs
    perm_fwd: list  # MoE router top-k and token permutations (memory-bound)
    perm_bwd: list
    host_fwd: list  # MoE: host issue time the dispatcher's synchronisation exposes (moe_host)
    gate_gemm_fwd: list  # MoE dense gating: the dispatch and combine einsums, inside perm_fwd / perm_bwd [24]
    gate_gemm_bwd: list
    cp_fwd: list  # what context parallelism adds to the forward (merges, slower per-step kernels)
    cp_bwd: list
    unf_fwd: list = field(default_factory=list)  # the share of fwd/bwd the stack's unfused passes take (unfused_bytes)
    unf_bwd: list = field(default_factory=list)
    eager_fwd: list = field(default_factory=list)  # eager attention: the core's named terms (compute.eager_core_terms), else None
    eager_bwd: list = field(default_factory=list)
    # the forward seconds of each GEMM row whose input the SP all-gather feeds (REGATHER_ROWS), the window of its
    # dgrad GEMM, beside which Transformer Engine re-gathers that input for the wgrad GEMM [35]
    sp_gemms: list = field(default_factory=list)
    # [38] the shared experts' fc1 and fc2 forward seconds ({"shared_up", "shared_down"}; {} without shared experts),
    # the side stream's GEMMs beside the dispatcher's all-to-alls under --moe-shared-expert-overlap
    shared_gemms: list = field(default_factory=list)


def moe_dispatch_bytes(mlp, ctx, settings):
    """(forward, backward) HBM bytes of an MoE layer's router and permutations: the fused
    kernels' (layers/moe.py dispatch_bytes) plus, where the job runs them unfused
    (moe_permute_fusion / moe_router_fusion false), the unfused ops' extra bytes
    (unfused_dispatch_bytes' named terms "permute" and "router"); on a stack whose experts run
    as a Python loop (stack moe_experts), the loop's routing, gathers and index-adds instead
    (layers/moe.py loop_bytes [16])."""
    if stack_of(settings).moe_experts is not None:  # a stack setting: the experts as a Python loop (layers/moe.py [16])
        return mlp.loop_bytes(ctx)
    gating = stack_of(settings).moe_gating
    if gating is not None:  # a stack setting: DeepSpeed-MoE's dense gating, no permutation kernels [24]
        return mlp.gating_bytes(ctx, settings.moe_capacity_factor, settings.moe_min_capacity)
    fwd, bwd = mlp.dispatch_bytes(ctx)
    extra = mlp.unfused_dispatch_bytes(ctx)
    off = {"permute": not settings.moe_permute_fusion, "router": not settings.moe_router_fusion}
    for term, (f, b) in extra.items():
        w = 1.0 if off[term] else 0.0
        fwd, bwd = fwd + w * f, bwd + w * b
    return fwd, bwd


def gating_einsum_times(sc: StepCtx, mlp):
    """(forward, backward) seconds per micro-batch of an MoE layer's dispatch and combine einsums where the stack
    gates densely (stack moe_gating, DeepSpeed-MoE) [24]: each GEMM the slower of its priced time (bf16) and its
    compulsory traffic at the streaming rate; (0, 0) on every other stack."""
    gating = sc.stack.moe_gating
    if gating is None:  # a stack setting
        return np.float64(0.0), np.float64(0.0)
    rows = mlp.gating_einsum_rows(sc.ctx, sc.settings.moe_capacity_factor, sc.settings.moe_min_capacity)
    scale = sc.settings.knobs.gemm_efficiency_scale
    out = []
    for part in rows:
        t = price_gemms(part, sc.settings.hardware, EAGER_GEMM_PRECISION, sc.gemm_cal)
        traffic = [ACT_BYTES * (g.M * g.K + g.K * g.N + g.M * g.N) * c for g, c in part]
        out.append(sum((np.maximum(t[g.name] / scale, b / sc.hbm) for (g, _), b in zip(part, traffic)),
                       np.float64(0.0)))
    return out[0], out[1]


def _selective_rerun(sc: StepCtx, kind, times: dict, core_f, pass_f, ew_f, pf) -> np.ndarray:
    """layer_times' seconds a selectively recomputed layer of `kind` re-runs in the backward (before the plan's
    recompute mask): times, its GEMM rows' seconds; core_f, pass_f, ew_f, pf its forward core, CP merges,
    elementwise kernels and permutations."""
    settings, plan, ctx, kb, hbm = sc.settings, sc.plan, sc.ctx, sc.kb, sc.hbm
    sel, mixer, mlp = sc.stack.selective, kind.mixer, kind.mlp
    # selective recompute re-runs what the stack's policy does not keep: the attention core
    # (Megatron), the projections off its save list, the elementwise kernels (torchtitan's
    # per-op policy); a state-space or linear-attention mixer is not recomputed
    shares = {**mixer.projection_shares(ctx), **mlp.projection_shares(ctx)}
    # a policy that keeps the routed experts' grouped GEMMs only under compile (memory.py [gmm]) re-runs all of
    # them without it (their forward seconds once more) and none with it, one that never keeps them (torchtitan
    # 0.3, [gmm3]) re-runs them on every plan, whatever its projection list says (memory.expert_gemms_rerun)
    gmm = kind.has_experts and sel.expert_gemms_kept != "always"  # memory.py [gmm], [gmm3]
    sel_g = sum((times[name] * share for p in sel.recompute_projections
                 for name, share in _share_list(shares.get(p)) if not (gmm and name in EXPERT_GEMMS)),
                np.float64(0.0)) / sc.speed
    if gmm:
        sel_g = sel_g + np.where(expert_gemms_rerun(settings, plan), sum(
            (times[n] for n in EXPERT_GEMMS if n in times), np.float64(0.0)) / sc.speed, 0.0)
    core_rerun = _core_rerun(settings, sel)  # memory.py [tt8]
    # a re-run attention core re-runs its CP ring too: the per-step kernels (in core_f) and the merges
    sel_t = (sel_g + (core_f + pass_f if core_rerun and mixer.selective_core else 0.0)
             + (ew_f - pass_f if sel.recompute_elementwise else 0.0)
             + rerun_kernel_bytes(sel, kind, ctx, kb) / hbm  # named norms / MoE activation (recompute_modules.py)
             + block_rerun_times(sel, kind, ctx, kb, times, sc.speed, hbm, pf))  # mlp / moe / shared_experts
    return sel_t


def layer_times(sc: StepCtx) -> LayerTimes:
    """Each layer kind's forward and backward seconds: its blocks' GEMMs (forward 1x, backward
    2x at the same shapes [1]), core (compute.py [7] rates), memory-bound kernels and fp8
    casts over HBM bandwidth, MoE permutations; and what the stack's selective policy re-runs."""
    settings, plan, ctx, kb, hbm = sc.settings, sc.plan, sc.ctx, sc.kb, sc.hbm
    hw, sel = settings.hardware, sc.stack.selective
    kernel = attention_kernel(sc.stack, hw, settings.attention_kernel)
    rate_fwd, rate_bwd = attention_rates(hw, kernel)
    core_scale = sc.stack.attention_speed * settings.knobs.gemm_efficiency_scale
    out = LayerTimes(*([] for _ in range(13)))
    for kind in sc.ll.kinds:
        mixer, mlp = kind.mixer, kind.mlp
        rows = mixer.gemms(ctx) + mlp.gemms(ctx)
        times = price_gemms(rows, hw, plan.precision, sc.gemm_cal)
        shares = converted(sc, mixer, mlp, rows)  # [18] the converted share of each linear row
        if kind.has_experts and _experts_apart(sc):  # the model's kind and the stack's data [16]
            g, g_bwd, cast = _expert_times(sc, rows, times, mixer, mlp, shares)
        else:
            g, g_bwd = _converted_times(sc, rows, times, shares)
            cast = np.where(sc.fp8, sc.recipe["cast_bytes"] * (mixer.cast_elements(ctx) + mlp.cast_elements(ctx)
                                                               + cast_change(rows, shares)), 0.0)
        flops = mixer.core_kernel_flops(ctx) if mixer.has_core else 0.0
        if dense_windows(sc.stack, mixer):  # the stack's dense window mask: the whole square (attention.py [11])
            flops = mixer.dense_mask_kernel_flops(ctx)
        # the kernel's rate at the mixer's head dim (compute.py [7b]; a scan has none: 1)
        hd_f, hd_b = attention_head_dim_factor(getattr(mixer, "core_rate_head_dim", None), kernel)
        f8_rate, f8_cast_f, f8_cast_b = fp8_core(sc, mixer)  # fp8 attention (compute.py [7c]); 1, 0, 0 without it
        core_f = flops / (rate_fwd * hd_f * core_scale * f8_rate)
        core_b = ATTN_BWD_FLOPS_RATIO * flops / (rate_bwd * hd_b * core_scale)
        if hasattr(mixer, "scan_times"):  # Mamba's selective scan: CUDA cores, its own roofline
            core_f, core_b = scan_core_times(sc, mixer, rate_fwd * core_scale, rate_bwd * core_scale)
        eager = settings.attention == "eager" and hasattr(mixer, "eager_core")
        if eager:  # the unfused core: batched GEMMs, softmax and dropout passes (compute.eager_core_terms)
            ef, eb = eager_core_terms(mixer.eager_core(ctx), kb, mixer.score_dropout, hw, hbm, sc.gemm_cal,
                                      settings.knobs.gemm_efficiency_scale)
            core_f, core_b = ef.total, eb.total
        out.eager_fwd.append(ef if eager else None)
        out.eager_bwd.append(eb if eager else None)
        cp_f = cp_b = pass_f = pass_b = np.float64(0.0)
        if mixer.cp_overlaps_core:  # ring attention: per-step kernels and the stack's merges
            ring = cp_ring(sc, mixer)
            k_f, k_b = cp_kernel_factor(cp_split(sc)[1], ring, cp_spec(sc).kernel == "one", kernel)
            # the job's CP without load balancing: the last rank's share of the causal work (cp_balance_factor)
            u = (cp_balance_factor(sc.plan.cp, ctx.seq, getattr(mixer, "window", None))
                 if _unbalanced_core(sc, mixer, eager) else np.float64(1.0))
            k_f, k_b = k_f * u, k_b * u
            pass_f, pass_b = cp_pass_times(sc, ring)
            cp_f, cp_b = core_f * (k_f - 1.0) + pass_f, core_b * (k_b - 1.0) + pass_b
            core_f, core_b = core_f * k_f, core_b * k_b
        # fp8: every GEMM input (activations and weights) is scaled and cast each forward, and the
        # output gradients in backward (twice the forward's elements: dgrad and wgrad inputs): `cast` above
        ew_f = (mixer.elementwise_bytes(ctx, kb, "") + mlp.elementwise_bytes(ctx, kb, "") + kind.post_norm_bytes(ctx, kb, "")
                + cast + f8_cast_f) / hbm
        wgrad = wgrad_add_bytes(sc, rows) / hbm  # [11]
        ew_b = (mixer.elementwise_bytes(ctx, kb, "_bwd") + mlp.elementwise_bytes(ctx, kb, "_bwd")
                + kind.post_norm_bytes(ctx, kb, "_bwd") + 2.0 * cast + f8_cast_b) / hbm + wgrad
        if mixer.cp_overlaps_core:  # the CP merges and accumulations, memory-bound
            ew_f, ew_b = ew_f + pass_f, ew_b + pass_b
        pf, pb = moe_dispatch_bytes(mlp, ctx, sc.settings) if kind.has_experts else (0.0, 0.0)
        pf, pb = pf / hbm, pb / hbm
        ein_f, ein_b = gating_einsum_times(sc, mlp) if kind.has_experts else (np.float64(0.0), np.float64(0.0))
        pf, pb = pf + ein_f, pb + ein_b
        out.gate_gemm_fwd.append(ein_f)
        out.gate_gemm_bwd.append(ein_b)
        sel_t = _selective_rerun(sc, kind, times, core_f, pass_f, ew_f, pf)
        host = moe_host(sc, kind, g + core_f + ew_f + pf) if kind.has_experts else np.float64(0.0)
        out.fwd.append(g + core_f + ew_f + pf + host)
        out.bwd.append(g_bwd + core_b + ew_b + pb)
        out.gemm_fwd.append(g)
        out.core_fwd.append(core_f)
        out.core_bwd.append(core_b)
        out.sel.append(np.where(plan.recompute == RC_SELECTIVE, sel_t, 0.0))
        out.perm_fwd.append(pf)
        out.perm_bwd.append(pb)
        out.host_fwd.append(host)
        for lst, sfx in ((out.unf_fwd, ""), (out.unf_bwd, "_bwd")):
            lst.append(sum((b.unfused_bytes(ctx, kb, sfx) for b in (mixer, mlp) if hasattr(b, "unfused_bytes")),
                           np.float64(0.0)) / hbm + (wgrad if sfx else 0.0))
        out.cp_fwd.append(cp_f)
        out.cp_bwd.append(cp_b)
        # [35] the dgrad window of each column-parallel linear on an SP-gathered input: its row's forward seconds at
        # the plan's GEMM rate (the dgrad GEMM runs the forward's shape [1])
        out.sp_gemms.append({n: times[n] / sc.speed for n in REGATHER_ROWS if n in times})
        out.shared_gemms.append({n: times[n] / sc.speed for n in ("shared_up", "shared_down") if n in times})
    return out


# [35] the GEMM rows whose input a sequence-parallel all-gather feeds: the blocks' sp_input_gemm (attention's qkv, the
# MLP's fc1, the Mamba and Gated DeltaNet in_proj) and MLA's column-parallel up projections (and its fused down
# projection) where the stack gathers the latents, the shared experts' fc1 where they run their own pair ([37])
REGATHER_ROWS = ("qkv", "mlp_up", "mamba_in", "gdn_in", "mla_q", "mla_q_up", "mla_kv_up", "mla_qkv_down", "shared_up")


def fp8_core(sc: StepCtx, mixer):
    """fp8 attention (job field fp8_attention; memory.py [fa8]): (the forward kernel's rate over the
    bf16 one's, compute.fp8_attention_speedup [7c]; the forward's casts, q, k, v quantized at the
    recipe's cast_bytes_per_element, backends.py @4329ff84 l. 1392; the backward's, the output
    gradient quantized likewise). Not priced: delayed scaling's dequantized output copy (read 1 B,
    write 2 B an element, l. 1466) and the backward's dequantized dQ, dK, dV. (1, 0, 0) without it
    or for a mixer that is not softmax attention."""
    if not (sc.settings.fp8_attention and mixer.kind == "attention"):  # a job setting and the model's layer kind
        return np.float64(1.0), np.float64(0.0), np.float64(0.0)
    ring = mixer.cp_ring(sc.ctx)  # the local q, k, v and output elements of one micro-batch
    rate = np.where(sc.fp8, fp8_attention_speedup(mixer.core_rate_head_dim), 1.0)
    cast = np.where(sc.fp8, sc.recipe["cast_bytes"], 0.0)
    return rate, cast * (ring["q_el"] + ring["kv_el"]), cast * ring["o_el"]


def scan_core_times(sc: StepCtx, mixer, rate_fwd, rate_bwd):
    """(forward, backward) seconds per micro-batch of Mamba's selective scan (layers/mamba.py
    SCAN_ROOFLINE): the slower of its FLOPs at the GPU's fp32 peak (Hardware.fp32_TFLOPS,
    SCAN_AT_FP32_PEAK) and its bytes at the achievable HBM bandwidth; an entry without an fp32
    peak prices the FLOPs at the attention kernel's rates (rate_fwd, rate_bwd: optimistic)."""
    fp32 = sc.settings.hardware.fp32_TFLOPS
    rates = (rate_fwd, rate_bwd) if fp32 is None else (fp32 * 1e12, fp32 * 1e12)
    return mixer.scan_times(sc.ctx, rates, sc.hbm)


def wgrad_add_bytes(sc: StepCtx, gemms) -> np.ndarray:
    """Bytes per micro-batch of the separate kernel that adds each linear's weight gradient into
    the main gradient where the job turns gradient-accumulation fusion off [11]: per weight
    element of the GEMMs' linears (N x K x count; the router's left out), the new gradient read
    (wgrad_unfused) and the main gradient read and written (bytes_per_param.gradients each);
    0 where fused, and under FSDP but at Megatron-FSDP's fsdp levels with the fusion off (the job's or
    the mode's: memory.mfsdp_hook_unfused), whose hook copies the gradient into the unit's unsharded
    bucket, `param.main_grad.copy_(param.grad)`, the new gradient read and the bucket written once
    (NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py
    _grad_acc l. 647-662; the unsharded-buffer branch, l. 664-673, adds as below FSDP)."""
    kb, plan = sc.kb, sc.plan
    fused_job = bool(sc.settings.gradient_accumulation_fusion)
    if fused_job and not mfsdp_fusion_overridden(sc.settings):  # job / stack settings: fused everywhere
        return np.float64(0.0)
    weights = sum((s.N * s.K * c for s, c in gemms if s.name != "router"), np.float64(0.0))
    g = sc.settings.bpp.gradients
    below = 0.0 if fused_job else kb["unfused_wgrad"] * (kb["wgrad_unfused"] + 2.0 * g)
    hook = np.where(mfsdp_hook_unfused(sc.settings, plan), kb["wgrad_unfused"] + g, 0.0)
    return np.where(plan.sharding >= FSDP, hook, below) * weights


def cp_spec(sc: StepCtx):
    """The stack's context-parallel attention (schema.ContextParallelSpec); a stack file that
    does not say runs the default stack's (Transformer Engine's P2P ring), a named assumption.
    A job's torch rotate method (torchtitan [parallelism] context_parallel_rotate_method) is in
    the resolved stack's spec already (planner/cp_rotate.py: alltoall passes K/V as a ring)."""
    return sc.stack.context_parallel or default_stack().context_parallel


def cp_split(sc: StepCtx):
    """(the all-to-all group's ranks, the ring's ranks) of the stack's context parallelism: a2a+p2p's
    hierarchical sizes (ContextParallelSpec.hierarchical_sizes: the all-to-alls inside contiguous
    ranks, the ring across them, planner/cp_comm_type.py), else (1, cp)."""
    return ring_ranks(cp_spec(sc), np.asarray(sc.plan.cp, dtype=np.float64))


def cp_ring(sc: StepCtx, mixer) -> dict:
    """The mixer's context-parallel quantities (cp_ring) with the ring over cp_split's ring ranks:
    after a2a+p2p's all-to-alls each rank holds the sequence of cp / a2a ranks with 1 / a2a of its
    heads, the same elements (the ring's steps, its kernels' key lengths and its merges are those
    of the ring's ranks)."""
    a2a, ring_cp = cp_split(sc)
    return mixer.cp_ring(sc.ctx if a2a == 1.0 else dataclasses.replace(sc.ctx, cp=ring_cp))


def cp_kernel_factor(cp, ring, one: bool = False, kernel: str = "flash2"):
    """(forward, backward) time of a ring-attention core over the unsplit kernel's. Each ring
    step runs its own kernel on 1/steps of the core's FLOPs (load-balanced causal split into 2
    cp chunks: ContextParallelSpec): the first step the local queries against the local keys
    (s / cp keys a query block), every later one against half a rank's (s / (2 cp)), at the
    rate of its key length relative to the unsplit kernel's, on the attention kernel's own curve
    (compute.attention_block_rate [7]: FlashAttention-2's or cuDNN's); capped at a window's reach. 1 without CP, and for a stack that runs
    the local queries as one kernel against the gathered K/V (`one`, ContextParallelSpec kernel
    one): the unsplit kernel's rate on 1/cp of its FLOPs (assumed)."""
    if one:
        return np.float64(1.0), np.float64(1.0)
    steps = ring["sends"] + 1.0
    c = np.maximum(np.asarray(cp, dtype=np.float64), 1.0)
    full = ring["keys"]
    diag, off = np.minimum(ring["seq"] / c, full), np.minimum(ring["seq"] / (2.0 * c), full)
    out = []
    for bwd in (False, True):
        r = attention_block_rate(full, bwd, kernel)
        f = r * (1.0 / steps / attention_block_rate(diag, bwd, kernel)
                 + (steps - 1.0) / steps / attention_block_rate(off, bwd, kernel))
        out.append(np.where(c > 1.0, f, 1.0))
    return out[0], out[1]


def _unbalanced_core(sc: StepCtx, mixer, eager: bool) -> bool:
    """Whether the job's CP without load balancing (Settings.cp_load_balance false, a job setting) slows this mixer's
    core: a causal softmax-attention kernel that skips the masked blocks (global or sliding-window). Not: an eager
    core or the stack's dense window mask (every rank runs the whole square of its queries: balanced as it is), and
    a chunked layer (the work of a rank's contiguous chunk depends on where the attention chunks' boundaries fall;
    priced balanced, an assumption said by the reader)."""
    return bool(not getattr(sc.settings, "cp_load_balance", True) and mixer.kind == "attention" and not eager
                and getattr(mixer, "chunk", None) is None and not dense_windows(sc.stack, mixer))


def cp_balance_factor(cp, seq, window=None):
    """The attention core time of the busiest CP rank over the load-balanced share, where context parallelism runs
    contiguous sequence chunks (job cp_load_balance false: torchtitan's context_parallel_load_balancer None, pytorch/
    torchtitan release/0.3 @4f9e9a47d torchtitan/distributed/context_parallel/api.py cp_shard l. 217-264: no load
    balancer, so torch's context_parallel shards the sequence dim into cp contiguous pieces). Rank r holds the queries
    [r n, (r + 1) n), n = s / cp; a query at position p attends to min(p, w) keys (layers/attention.py mean_causal_keys;
    w = s for a global layer), nondecreasing in p, so the last rank is the busiest. With G(x) = x mean_causal_keys(x, w)
    the keys the first x queries attend to, its share is G(s) - G(s - n) against the balanced G(s) / cp:
      factor = cp (G(s) - G(s - n)) / G(s);  global: cp (s^2 - (s - n)^2) / s^2 = 2 - 1/cp = (2 cp - 1) / cp
    (1.5 at cp 2, 1.75 at cp 4); a window w <= s - n: every query of the last rank attends to w keys, factor
    cp w / (w - w^2 / (2 s)). 1 at cp 1."""
    c = np.maximum(np.asarray(cp, dtype=np.float64), 1.0)
    s = np.asarray(seq, dtype=np.float64)
    rest = s - s / c

    def g(x):
        return x * mean_causal_keys(np.maximum(x, 1.0), window)

    return np.where(c > 1.0, c * (g(s) - np.where(rest > 0.0, g(rest), 0.0)) / g(s), 1.0)


def cp_pass_times(sc: StepCtx, ring):
    """(forward, backward) seconds per micro-batch of the memory-bound work a ring-attention
    layer adds under CP: the stack's bytes per element (ContextParallelSpec out, kv_fwd, dq,
    dkv_acc, kv_bwd, and the a2a variant's q_fwd and dout_bwd: a fixed part and one per ring step
    after the first) times the elements of the output, query and local K/V, over the achievable
    HBM bandwidth. 0 without CP."""
    spec = cp_spec(sc)
    n = ring["sends"]

    def b(pb, el):
        return el * (pb.fixed + pb.per_step * n)

    fwd = b(spec.out, ring["o_el"]) + b(spec.kv_fwd, ring["kv_el"]) + b(spec.q_fwd, ring["q_el"])
    bwd = (b(spec.dq, ring["q_el"]) + b(spec.dkv_acc, ring["kv_el"]) + b(spec.kv_bwd, ring["kv_el"])
           + b(spec.dout_bwd, ring["o_el"]))
    on = np.asarray(sc.plan.cp) > 1
    return np.where(on, fwd / sc.hbm, 0.0), np.where(on, bwd / sc.hbm, 0.0)


def _disp_field(settings) -> tuple:
    """("disp",) where a plan's compute reads its dispatcher (moe_host: a dispatcher search whose dispatchers
    differ in the host synchronisation, padded to capacity), else (): the plan fields the layer times and the
    compute floor are grouped by (LAYER_TIME_FIELDS, FLOOR_FIELDS) add it."""
    return ("disp",) if _rows(settings) and len(_synced_table(settings)) > 1 else ()


def _wgrad_field(settings) -> tuple:
    """("sharding", "smode") where the job turns gradient-accumulation fusion off, or a Megatron-FSDP mode of the
    stack does: the separate weight-gradient add reads the plan's sharding level and mode (wgrad_add_bytes [11]:
    none under FSDP but Megatron-FSDP's fsdp levels' copy), so the layer times and the compute floor grouped by
    (LAYER_TIME_FIELDS, FLOOR_FIELDS, which leave them out) add them; else ()."""
    fused = settings.gradient_accumulation_fusion and not mfsdp_fusion_overridden(settings)
    return () if fused else ("sharding", "smode")


def floor_fields(settings) -> tuple:
    """The plan fields the compute floor (compute_floor, group_floor) reads under these settings: FLOOR_FIELDS,
    the dispatcher (_disp_field) and the sharding level (_wgrad_field) where they are read."""
    return FLOOR_FIELDS + _disp_field(settings) + _wgrad_field(settings)


_rows = dispatch.table_rows  # Settings.dispatcher_rows (a test's stand-in settings without the field: none)


def _host_synced_rows(sc: StepCtx):
    """dispatch.host_synced of each plan's dispatcher (dispatcher_rows): a bool, or per plan where the
    dispatchers it may run differ in it (padded to capacity only; then the layer times read `disp`:
    grouped_layer_times)."""
    st = sc.settings
    if not _rows(st) or len(_synced_table(st)) == 1:
        return dispatch.host_synced(st.moe_pad_to_capacity, st.moe_dispatcher, st.moe_hybridep_capacity_factor > 0)
    codes, _ = dispatcher_rows(st, sc.plan)
    table = np.zeros(len(dispatch.NAMES), dtype=bool)
    for c in _codes_of(st):
        table[c] = dispatch.host_synced(st.moe_pad_to_capacity, dispatch.NAMES[c], st.moe_hybridep_capacity_factor > 0)
    return table[codes]


def _codes_of(settings: Settings) -> tuple:
    """The dispatcher codes a plan under `settings` may run: its own and Settings.dispatcher_rows'."""
    return tuple(sorted({dispatch.CODES[settings.moe_dispatcher]} | {c for c, _ in _rows(settings)}))


def _synced_table(settings: Settings) -> set:
    """The distinct dispatch.host_synced values of the dispatchers a plan may run (_codes_of)."""
    return {dispatch.host_synced(settings.moe_pad_to_capacity, dispatch.NAMES[c],
                                   settings.moe_hybridep_capacity_factor > 0) for c in _codes_of(settings)}


def moe_host(sc: StepCtx, kind, gpu_fwd):
    """Seconds per micro-batch the GPU waits for the host in one MoE layer's forward.

    Megatron-Core's dropless token dispatchers copy the token counts to the host and
    synchronise once per MoE layer forward (token_dispatcher.py @d98e8a64
    MoEAlltoAllTokenDispatcher.preprocess: "A synchronization is needed before expert parallel
    AlltoAll communication to get the `input_splits` and `output_splits` CPU values", lines
    594-606; the allgather dispatcher's tokens_per_expert .cpu(), line 320; HybridEP's
    tokens_per_expert.sum(), lines 1111/1173). The queue drains there, so the host cannot run
    ahead: the GPU then waits for whatever the host takes to issue the next layer's worth of
    kernels (the experts, the combine, the next attention) beyond the GPU time of that work.
    Megatron-Core's MoE guide names the symptom ("gaps between GPU kernels where CPU cannot
    launch kernels fast enough", megatron/core/transformer/moe/README.md @d98e8a64, "CPU
    Overhead Bottleneck"). The issue time is the stack's moe_host (per layer, plus per local
    expert: Transformer Engine's GroupedLinear issues each expert's quantize and GEMM kernels
    on its own); exposed = max(issue - the layer's forward GPU time, 0). Assumed: the
    backward, with no synchronisation (the splits are saved), lets the host run ahead; the
    all-to-alls' own time is not counted in the window (a conservative bound). CUDA graphs of
    the parts before the dispatch (a job's cuda_graph_scope attn moe_router moe_preprocess)
    replay those kernels with one launch but leave the synchronisation; the constants are fitted
    on records with and without them, which cannot tell the graphed share apart, so the term is
    the same with or without them (planner/cuda_graphs.py, docs/moe_accuracy.md). Padded to
    capacity (moe_pad_to_capacity), the alltoall and hybridep dispatchers know every split on the
    host and neither copy nor synchronise (planner/dispatch.py PAD_WITHOUT_SYNC and its [7]): the
    host runs ahead as in the backward, so the term is 0, both constants, which price only what
    the synchronisation exposes (the records they are fitted on are all dropless,
    scripts/fit_moe_host.py). Allgather still synchronises padded: priced as dropless."""
    mh = sc.stack.moe_host
    synced = _host_synced_rows(sc) if mh is not None else False
    if mh is None or not np.any(synced):
        return np.float64(0.0)
    e_local = kind.mlp.num_experts / sc.plan.ep.astype(np.float64)
    issue = mh.per_layer_s + mh.per_local_expert_s * e_local
    out = np.maximum(issue - gpu_fwd, 0.0)
    return out if np.ndim(synced) == 0 else np.where(synced, out, 0.0)


def converted(sc: StepCtx, mixer, mlp, rows) -> dict:
    """[18] GEMM row name -> the share of its linears the plan's low-precision recipe runs (fp8_linears.
    converted_shares): a stack whose recipes convert modules by a filter (torchtitan: stack_db fp8_recipes
    output_layer_convertible) by the job's filter_fqns (None: the MoE router gate and the output layer bf16),
    the dims-of-16 rule and torchao's auto filter; elsewhere (Transformer Engine) every row but the MoE router,
    which is no TE module."""
    from .fp8_linears import converted_shares, module_filter

    if module_filter(sc.stack):
        return converted_shares(mixer, mlp, sc.settings.filter_fqns, sc.plan.f8r)
    return {"router": np.float64(0.0)} if any(r[0].name == "router" for r in rows) else {}


def cast_change(rows, shares) -> np.ndarray:
    """[18] Cast elements to add to the blocks' own (cast_elements, which count every linear but the router):
    minus a kept-bf16 row's input and weight elements, plus a converted router's."""
    from .layers.mamba import gemm_cast_elements

    out = np.float64(0.0)
    for name, w in shares.items():
        el = gemm_cast_elements([r for r in rows if r[0].name == name])
        out = out + (w * el if name == "router" else (np.asarray(w) - 1.0) * el)
    return out


def _converted_times(sc: StepCtx, rows, times: dict, shares: dict):
    """(forward, backward GEMM seconds) of rows of which `shares` converts a part [18]: a row's converted share as
    _low_and_bf16 prices it (the recipe's low_fwd / low_bwd), the rest at the bf16 rate (forward 1x, backward 2x);
    `times` is updated in place so that a partly kept row over sc.speed is its seconds (the selective re-run)."""
    names = list(dict.fromkeys(x[0].name for x in rows))
    w = {n: np.where(sc.fp8, shares[n], 1.0) for n in names if n in shares}
    if all(np.all(v == 1.0) for v in w.values()):
        return _low_and_bf16(sc, rows, sum((times[n] for n in names), np.float64(0.0)) / sc.speed)
    scale = sc.settings.knobs.gemm_efficiency_scale
    lf = np.where(sc.fp8, sc.recipe["low_fwd"], 1.0)
    lb = np.where(sc.fp8, sc.recipe["low_bwd"], 1.0)
    mixed = not (np.all(lf == 1.0) and np.all(lb == 1.0))  # a recipe with bf16 passes prices every row at bf16 too
    kept = {n for n, v in w.items() if not np.all(v == 1.0)}
    t16 = price_gemms([x for x in rows if mixed or x[0].name in kept], sc.settings.hardware,
                      np.zeros_like(sc.plan.precision), sc.gemm_cal)
    f = b = np.float64(0.0)
    for n in names:
        low = times[n] / sc.speed
        b16 = t16[n] / scale if n in t16 else low  # (a row converted whole under an all-low recipe: b16 unused)
        wn = w.get(n, np.float64(1.0))
        f = f + wn * (lf * low + (1.0 - lf) * b16) + (1.0 - wn) * b16
        b = b + 2.0 * (wn * (lb * low + (1.0 - lb) * b16) + (1.0 - wn) * b16)
        if n in w:
            times[n] = (wn * low + (1.0 - wn) * b16) * sc.speed
    return f, b


def _low_and_bf16(sc: StepCtx, rows, g_low):
    """(forward, backward) GEMM seconds of one layer kind: each of fprop, dgrad and wgrad (the
    backward runs two GEMMs of the forward's shapes [1]) at the low-precision rate `g_low`
    where the plan's recipe runs it there (stack_db fp8_recipes `gemms`), else in bf16."""
    lf = np.where(sc.fp8, sc.recipe["low_fwd"], 1.0)
    lb = np.where(sc.fp8, sc.recipe["low_bwd"], 1.0)
    if np.all(lf == 1.0) and np.all(lb == 1.0):
        return g_low, 2.0 * g_low
    g16 = sum(price_gemms(rows, sc.settings.hardware, np.zeros_like(sc.plan.precision), sc.gemm_cal).values(),
              np.float64(0.0)) / sc.settings.knobs.gemm_efficiency_scale
    return lf * g_low + (1.0 - lf) * g16, 2.0 * (lb * g_low + (1.0 - lb) * g16)




def _experts_apart(sc: StepCtx) -> bool:
    """Whether an MoE layer's routed experts are priced apart from its other GEMMs (_expert_times):
    where the stack runs them bf16 or converted (stack_db runs.fp8_grouped_experts lists both: fit
    searches plan.fge), the job's setting runs them bf16, or one of the stack's recipes runs them at
    another recipe's figures (fp8_recipes grouped_experts_recipe). Elsewhere (Megatron-Core: TE's
    GroupedLinear under the layer's recipe) every row is at the plan's recipe, as before the field.
    Stack data and a job setting, never a searched quantity."""
    st, runs = sc.stack, sc.stack.runs
    return bool(not sc.settings.fp8_grouped_experts
                or (runs is not None and len(set(runs.fp8_grouped_experts or ())) > 1)
                or any(r.grouped_experts_recipe not in (None, n) for n, r in st.fp8_recipes.items()))


def _expert_times(sc: StepCtx, rows, times: dict, mixer, mlp, shares: dict | None = None):
    """(forward, backward GEMM seconds, fp8 cast bytes) of an MoE layer kind whose routed experts'
    grouped GEMMs are priced apart [16]: the other rows as _low_and_bf16 prices them (the plan's
    recipe); the expert_up / expert_down rows, where they run converted (fp8 / nvfp4 with plan.fge), at
    the grouped recipe's rate (sc.recipe grouped_speed: torchtitan's float8 grouped GEMMs at rowwise's
    gemm_speed whatever the linear recipe) for its low-precision shares (grouped_low_fwd / _bwd), else at
    the bf16 rate (forward 1x, backward 2x [1]); the casts of the layer's other GEMM inputs at the plan
    recipe's bytes, the experts' (cast_elements less cast_elements_bf16_experts) at the grouped recipe's
    where converted, none where bf16. `times` is updated in place so that its expert rows over sc.speed
    are their seconds (what the selective policy's re-run reads)."""
    hw, scale, ctx, r = sc.settings.hardware, sc.settings.knobs.gemm_efficiency_scale, sc.ctx, sc.recipe
    on = sc.fp8 & (np.asarray(sc.plan.fge) > 0)  # the experts' grouped GEMMs converted
    rest = [x for x in rows if x[0].name not in EXPERT_GEMMS]
    shares = shares or {}
    g, g_bwd = _converted_times(sc, rest, times, shares) if rest else (np.float64(0.0), np.float64(0.0))
    ex = [x for x in rows if x[0].name in EXPERT_GEMMS]
    t16 = price_gemms(ex, hw, np.zeros_like(sc.plan.precision), sc.gemm_cal)
    lf = np.where(on, r["grouped_low_fwd"], 0.0)
    lb = np.where(on, r["grouped_low_bwd"], 0.0)
    gs = np.where(on, r["grouped_speed"], 1.0) * scale
    e_f = e_b = np.float64(0.0)
    for name in t16:
        low, b16 = times[name] / gs, t16[name] / scale
        f = lf * low + (1.0 - lf) * b16
        e_f, e_b = e_f + f, e_b + 2.0 * (lb * low + (1.0 - lb) * b16)
        times[name] = f * sc.speed
    ec = mlp.cast_elements(ctx) - mlp.cast_elements_bf16_experts(ctx)  # the routed experts' GEMM inputs
    cast = (np.where(sc.fp8, r["cast_bytes"] * (mixer.cast_elements(ctx) + mlp.cast_elements_bf16_experts(ctx)
                                                + cast_change(rest, shares)), 0.0)
            + np.where(on, r["grouped_cast_bytes"] * ec, 0.0))
    return g + e_f, g_bwd + e_b, cast


def _share_list(v):
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def head_gemm(sc: StepCtx) -> tuple:
    """(seconds of the output layer's [T, V/t, h] GEMM, one pass, per micro-batch; where it runs in bf16 under an fp8
    recipe that keeps it there, unless the job's fp8_output_layer): head_time's 3x, and the window the output layer's
    backward TP transfers hide behind ([36], head_tp_seconds). Once per context (sc.memo)."""
    got = sc.memo.get("head_gemm")
    if got is not None:
        return got
    settings, plan, ctx = sc.settings, sc.plan, sc.ctx
    hw, gemm_scale = settings.hardware, settings.knobs.gemm_efficiency_scale
    shape = output_gemm_shape(settings.model, ctx.tp, ctx.T)
    out_gemm = price_gemms(shape, hw, plan.precision, sc.gemm_cal)["output_layer"] / sc.speed
    bf16_out = sc.fp8 & sc.recipe["output_layer_bf16"] & (not settings.fp8_output_layer)
    if np.any(bf16_out):
        out16 = price_gemms(shape, hw, np.zeros_like(plan.precision), sc.gemm_cal)["output_layer"] / gemm_scale
        out_gemm = np.where(bf16_out, out16, out_gemm)
    got = sc.memo["head_gemm"] = (out_gemm, bf16_out)
    return got


def head_time(sc: StepCtx) -> np.ndarray:
    """The output layer and the loss per micro-batch: the [T, V/t, h] GEMM forward and backward
    (3x), bf16 where the fp8 recipe keeps it there (unless the job's fp8_output_layer), with its
    fp8 casts where it runs in fp8 [14], and the loss reading and writing the logits."""
    settings, ctx = sc.settings, sc.ctx
    V, h = settings.model.vocab_size, settings.model.hidden_size
    shape = output_gemm_shape(settings.model, ctx.tp, ctx.T)
    out_gemm, bf16_out = head_gemm(sc)
    # fp8 casts as a layer's (step.layer_times): the input T h and the weight V/t h forward, twice
    # that backward [14]
    cast = np.where(sc.fp8 & ~bf16_out, 3.0 * sc.recipe["cast_bytes"] * (ctx.T * h + V / ctx.tp * h), 0.0) / sc.hbm
    loss_b = sc.stack.memory.te_loss_per_logit[1] if te_loss(sc.settings) else sc.kb["loss_per_logit"]
    wgrad = wgrad_add_bytes(sc, shape) / sc.hbm  # the output layer's weight gradient added apart [11]
    return 3.0 * out_gemm + cast + ctx.T * V / ctx.tp * loss_b / sc.hbm + wgrad  # [10] with TE's fused loss


def mtp_time(sc: StepCtx, lt: LayerTimes, logits) -> np.ndarray:
    """Multi-token prediction on the last stage, per micro-batch: per module its layer, the
    projection [T, h/t, 2h] forward and backward, its own output layer and loss."""
    ll = sc.ll
    if not ll.mtp:
        return np.float64(0.0)
    h = sc.settings.model.hidden_size
    proj = price_gemms([(s, c) for s, c in _proj_shape(h, sc)], sc.settings.hardware, sc.plan.precision, sc.gemm_cal)
    # selective recompute re-runs part of the module's layer; full recompute the module's projection and layer, one
    # checkpoint, under the uniform method, and nothing under the block one (Megatron-LM @d98e8a64
    # megatron/core/transformer/multi_token_prediction.py l. 1705-1719: recompute_granularity 'full' runs
    # _checkpointed_forward, l. 1621-1651: uniform checkpoints _proj_and_transformer_layer, block warns 'not
    # supported for MTP yet' and runs it without recompute), the share memory.mtp_recomputed prices the module's
    # activations with (before issue 22 critstage2 the step re-ran the layer alone, under block too); none where
    # the stack's checkpointing leaves the MTP modules out (memory.mtp_checkpointed false: torchtitan 0.3)
    covered = sc.stack.memory.mtp_checkpointed is not False  # a stack setting
    again = mtp_recomputed(sc.settings, sc.plan)  # 1 or 0 a plan: the module's forward once more
    layers = 0.0
    for k in ll.mtp_kinds:  # the module's layers (one of the last layer's kind, or a hybrid MTP pattern's)
        rerun = (lt.sel[k] if covered else 0.0) + again * lt.fwd[k]
        layers = layers + (lt.fwd[k] + lt.bwd[k] + rerun)
    return float(ll.mtp) * (layers + (3.0 + again) * proj["mtp_proj"] / sc.speed + logits)


def mtp_passes(sc: StepCtx, lt: LayerTimes, logits) -> tuple:
    """mtp_time split as stage_passes splits a stage: (forward, backward, forward GEMMs) per micro-batch of the
    multi-token prediction modules on the last stage. The forward: each module's layers as GPU work (stage_windows'
    rule, without the MoE host gaps), its projection's forward GEMM and a third of its output layer and loss
    (head_time's 3x); the backward: the layers' backward with the re-runs mtp_time prices (selective's, full
    recompute's forward of the layer as GPU work and of the projection) and two thirds of the projection's and the
    head's; the forward GEMMs the layers'
    and the projection's. The modules run after the main model's last layer inside the last stage's forward and
    their backward before its layers' (Megatron-LM @d98e8a64 megatron/core/models/gpt/gpt_model.py forward: the
    MultiTokenPredictionBlock after the decoder, before the loss), in the same passes: the windows a DP transfer
    of the last stage hides behind, and the last stage's pass ratio in the bubble."""
    ll = sc.ll
    zero = np.float64(0.0)
    if not ll.mtp:
        return zero, zero, zero
    h = sc.settings.model.hidden_size
    proj = price_gemms([(s, c) for s, c in _proj_shape(h, sc)], sc.settings.hardware, sc.plan.precision,
                       sc.gemm_cal)["mtp_proj"] / sc.speed
    covered = sc.stack.memory.mtp_checkpointed is not False  # a stack setting (mtp_time's)
    again = mtp_recomputed(sc.settings, sc.plan)  # mtp_time's re-run share
    fwd, bwd, gemm = zero, zero, zero
    for k in ll.mtp_kinds:
        lf = lt.fwd[k] - lt.host_fwd[k]
        rerun = (lt.sel[k] if covered else 0.0) + again * lf
        fwd, bwd, gemm = fwd + lf, bwd + lt.bwd[k] + rerun, gemm + lt.gemm_fwd[k]
    m = float(ll.mtp)
    return (m * (fwd + proj + logits / 3.0), m * (bwd + (2.0 + again) * proj + logits * 2.0 / 3.0),
            m * (gemm + proj))


def _proj_shape(h, sc):
    from .layers.common import shapes

    return shapes([("mtp_proj", sc.ctx.T, h / sc.ctx.tp, 2 * h, 1.0)])


@dataclass
class Compute:
    """Per micro-batch on the critical stage, and its passes (seconds)."""

    mb: np.ndarray  # compute of the slowest of the first, a middle and the last stage (compute_time; in step_time
    # after critical_stage the critical stage's: the slowest by compute plus its own communication)
    perm: np.ndarray  # its MoE permutation share
    host: np.ndarray  # its MoE host-issue share (moe_host)
    unfused: np.ndarray  # its share run by the stack's unfused elementwise passes (informational, inside mb)
    fwd_mb: np.ndarray  # the same stage's forward pass (the last's with a third of the output layer), GPU work
    bwd_mb: np.ndarray  # its backward pass (the last's with two thirds of the output layer), its re-run forwards
    gemm_fwd: np.ndarray  # its forward GEMMs (every layer it holds): the weight-gradient share of its backward
    logits: np.ndarray
    # each stage's (compute, permutation, host, unfused) per micro-batch, CRITICAL_STAGES' order (middle, first, last):
    # -inf compute where the stage is not one the pipeline waits on alone (no middle stage at pp <= 2; the first under
    # DualPipe, whose end ranks run it paired, in the last's slot); critical_stage adds each one's communication
    stages: tuple = ()
    # each stage's (forward, backward, forward GEMMs) per micro-batch, the same order (stage_passes)
    passes: tuple = ()


def slowest_middle(sc: StepCtx, lt: LayerTimes) -> None:
    """Of the middle stages' compositions (layers.stage_counts) keep, per plan, the one whose
    compute takes longest as sc.counts["mid"] (K, ...): the stage the pipeline waits for."""
    cands = sc.counts["mid_all"] = sc.counts["mid"]
    if len(cands) == 1:
        sc.counts["mid"] = cands[0]
        return
    base = [f + b + s for f, b, s in zip(lt.fwd, lt.bwd, lt.sel)]
    best, best_t = cands[0], None
    for cand in cands:
        t = sc.n["mid"] * mean_layer(cand, base) + sc.rc["mid"] * mean_layer(cand, lt.fwd)
        best = cand if best_t is None else np.where(t > best_t, cand, best)
        best_t = t if best_t is None else np.maximum(t, best_t)
    sc.counts["mid"] = best


def compute_time(sc: StepCtx, lt: LayerTimes, picked: bool = True) -> Compute:
    """The pipeline runs at its slowest stage: the heaviest of the first (its layers plus any bf16
    layers at the start), a middle one (pp > 2) and the last (its layers plus the output layer, the
    loss, any multi-token prediction and bf16 layers at the end), each with its own layers
    (pipeline.stage_layers): the first may hold more than a middle one (Megatron-LM
    --decoder-first-pipeline-num-layers above the middle share, pipeline.py [14]; torchtitan's front
    rule, whose stage 0 holds the one chunk more; an fp8 plan's bf16 first layers). Under DualPipe the
    end ranks run stage 0 and stage p - 1 paired (dualpipe_end_rank): no rank runs the first stage
    alone. Full recompute repeats the forward of the layers it covers [1]. picked False (step_time, whose
    critical_stage sets them from `stages` and each stage's communication): perm, host, unfused and the passes left
    None; mb is the heaviest stage's compute either way (step_time's order floor reads it before critical_stage)."""
    base = [f + b + s for f, b, s in zip(lt.fwd, lt.bwd, lt.sel)]
    logits = head_time(sc)
    rc = sc.rc

    def stage(st):
        n_ = sc.nf(st)  # (n[st] as float64: the same products)
        fwd = sc.mean(st, lt.fwd)
        perm = sc.mean(st, [f + b for f, b in zip(lt.perm_fwd, lt.perm_bwd)])
        host = (n_ + rc[st]) * sc.mean(st, lt.host_fwd)  # full recompute re-runs the dispatcher's forward
        unf = n_ * sc.mean(st, [f + b for f, b in zip(lt.unf_fwd, lt.unf_bwd)]) + rc[st] * sc.mean(st, lt.unf_fwd)
        return n_ * sc.mean(st, base) + rc[st] * fwd, n_ * perm + rc[st] * sc.mean(st, lt.perm_fwd), host, unf

    first_stage = stage("first")
    # no plan with a middle stage (pp > 2, comm_stages): its compute is -inf below on every plan, never picked
    mid, perm_mid, host_mid, unf_mid = (stage("mid") if "mid" in comm_stages(sc)
                                        else (np.float64(-np.inf),) + (np.float64(0.0),) * 3)
    last, perm_last, host_last, unf_last = stage("last")
    extra_first, extra_mid, extra_last = bf16_end_layers(sc, lt)
    mid = mid + extra_mid
    last = last + logits + mtp_time(sc, lt, logits) + extra_last
    # DualPipe: the end rank runs stage 0 and stage p - 1, each for half the micro-batches
    last, perm_last, host_last, unf_last = dualpipe_end_rank(sc, first_stage, extra_first,
                                                             (last, perm_last, host_last, unf_last))
    # the first stage with its own layers (the embedding's lookup is not priced) plus its bf16 layers; under DualPipe
    # no rank runs it alone (the end ranks' pair above, pp 2 included: both ranks are end ranks)
    dual = sc.dual()
    first = np.where(dual, -np.inf, first_stage[0] + extra_first)
    # a middle stage exists at pp > 2 only (pipeline.stage_layers: at pp 2 its "mid" is stage 1's layers, the last's
    # without the head; at pp 1 the whole model, which the last prices with the head)
    mid = np.where(sc.plan.pp > 2, mid, -np.inf)
    # the heaviest by compute alone: the compute floor's stage (compute_floor, a lower bound of every stage's compute +
    # communication); step_time's critical stage adds each stage's communication first (critical_stage)
    stages = ((mid, perm_mid, host_mid, unf_mid), (first,) + tuple(first_stage[1:]),
              (last, perm_last, host_last, unf_last))
    passes = stage_passes(sc, lt, logits)
    mb = functools.reduce(np.maximum, (mid, first, last))  # the heaviest by compute alone (both callers read it)
    if picked:
        crit = _heaviest(mid, first, last)
        perm, host, unf = (_pick(crit, *(x[j] for x in stages)) for j in (1, 2, 3))
        fwd_mb, bwd_mb, gemm_fwd = (_pick(crit, *(x[j] for x in passes)) for j in (0, 1, 2))
    else:  # step_time's critical_stage picks them, with each stage's communication
        perm = host = unf = fwd_mb = bwd_mb = gemm_fwd = None
    return Compute(mb=mb, perm=perm, host=host, unfused=unf, fwd_mb=fwd_mb, bwd_mb=bwd_mb, gemm_fwd=gemm_fwd,
                   logits=logits, stages=stages, passes=passes)


def stage_passes(sc: StepCtx, lt: LayerTimes, logits) -> tuple:
    """Each stage's (forward, backward, forward GEMMs) per micro-batch, CRITICAL_STAGES' order: its own layers'
    (stage_windows: the forward as GPU work, without the MoE host gaps), the backward with what selective recompute
    re-runs and the fully recomputed layers' forwards, the last stage's with the output layer and loss (a third
    forward, two thirds backward, head_time's 3x); DualPipe's end-rank slot the pair's mean (dualpipe_end_rank's).
    What the step reads of them: each stage's, the windows its DP transfers hide behind (dp_comm, dp_windows); the
    critical stage's, the bubble's pass ratio and weight-gradient share (step_time): the 1F1B / interleaved flush
    waits on the slowest stage's forward + backward (Megatron-LM @d98e8a64 megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_without_interleaving: warm-up l. 2333-2376, steady 1F1B l. 2378-2448, cool-down
    l. 2450-2480, every pass between blocking p2p with its neighbours, so the pipeline runs at the slowest stage's pace, step_time's t_mb). The bf16
    layers' extra (bf16_end_passes: forward, backward with full recompute's re-run of them, forward GEMMs) is in the
    passes of the stage holding them, and the multi-token prediction modules (mtp_passes) in the last stage's, as
    compute_time adds them to the stages' compute: the DP transfers a stage hides and the bubble's pass ratio read
    the same stage's whole work (issue 22, critstage2; they were left out of the passes before)."""
    def passes(st, head=0.0):
        lf, lb = stage_windows(sc, lt, st)
        n, rc = sc.nf(st), sc.rc[st]
        return (n * lf + head / 3.0, n * (lb + sc.mean(st, lt.sel)) + rc * lf + head * 2.0 / 3.0,
                n * sc.mean(st, lt.gemm_fwd))

    def plus(a, b):
        return tuple(x + y for x, y in zip(a, b))

    b_first, b_mid, b_last = bf16_end_passes(sc, lt)
    first, last = plus(passes("first"), b_first), plus(plus(passes("last", logits), b_last), mtp_passes(sc, lt, logits))
    # no plan with a middle stage (comm_stages): compute_time's middle is -inf, never picked; its passes are not read
    mid = plus(passes("mid"), b_mid) if "mid" in comm_stages(sc) else (np.float64(0.0),) * 3
    dual = dualpipe_pairs(sc.plan)
    if np.any(dual):  # the end ranks run stage 0 and stage p - 1 paired (dualpipe_end_rank)
        last = tuple(np.where(dual, 0.5 * (f + x), x) for f, x in zip(first, last))
    return mid, first, last


# the stage slots of Compute.stages and of the communication terms' per-stage values, in the order ties go
CRITICAL_STAGES = ("mid", "first", "last")


def _heaviest(mid, first, last) -> np.ndarray:
    """Index into CRITICAL_STAGES of the heaviest of three per-micro-batch times: pipeline.heaviest_stage_index's,
    the one argmax memory takes too, with its tie rule (the first, then the middle, then the last; tied stages take
    the same time a micro-batch). The terms of one stage, never mixed."""
    return _CRITICAL_SLOTS[heaviest_stage_index(first, mid, last)]


# heaviest_stage_index's answers (HEAVIEST_FIRST, HEAVIEST_MIDDLE, HEAVIEST_LAST) as CRITICAL_STAGES slots
_CRITICAL_SLOTS = np.array([CRITICAL_STAGES.index("first"), CRITICAL_STAGES.index("mid"), CRITICAL_STAGES.index("last")],
                           dtype=np.int64)


_CRIT_MASKS: list = [None, None]  # (the last crit _pick saw, its masks): step_time picks a dozen terms by one crit


def _crit_masks(crit) -> tuple:
    """(crit == 0, crit == 1, whether any plan's is 0, whether any plan's is 1) of a crit, once per crit array (held
    here, so its id stays)."""
    if _CRIT_MASKS[0] is not crit:
        zero, one = crit == 0, crit == 1
        _CRIT_MASKS[:] = [crit, (zero, one, bool(np.any(zero)), bool(np.any(one)))]
    return _CRIT_MASKS[1]


def _pick(crit, mid, first, last) -> np.ndarray:
    """np.choose(crit, (mid, first, last)) by np.where (the same elements, a fraction of choose's instructions; the
    first's where no plan's crit is 1; a 0-d result as choose's numpy scalar). Where every plan's is the last, the
    last's own array when it already has crit's shape and the result's dtype (no copy: the picked terms are read,
    never written in place)."""
    is_mid, is_first, any_mid, any_first = _crit_masks(crit)
    if not (any_mid or any_first) and isinstance(last, np.ndarray) and last.shape == np.shape(crit) and last.ndim \
            and np.result_type(mid, first, last) == last.dtype:
        return last
    out = np.where(is_mid, mid, np.where(is_first, first, last) if any_first else last)
    return out[()] if out.ndim == 0 else out


def stage_windows(sc: StepCtx, lt: LayerTimes, st: str) -> tuple:
    """(forward, backward) of stage st's mean layer per micro-batch: the windows its overlapped transfers hide
    behind (the EP all-to-alls, a model chunk's p2p); the forward without the MoE host gaps (GPU work). Once per
    (stage, layer times, the stage's counts) in sc.memo: compute_time, ep_comm and pp_comm each read it; with one
    layer kind the mean layer is the kind's own on every stage (mean_layer), so the stages share one."""
    counts = sc.counts[st]
    key = ("windows", np.shape(counts)[1:]) if len(lt.fwd) == 1 else ("windows", st)
    hit = sc.memo.get(key)
    if hit is not None and hit[0] is lt and (len(lt.fwd) == 1 or hit[1] is counts):
        return hit[2]
    out = sc.mean(st, lt.fwd) - sc.mean(st, lt.host_fwd), sc.mean(st, lt.bwd)
    sc.memo[key] = (lt, counts, out)
    return out


def comm_stages(sc: StepCtx) -> tuple:
    """The CRITICAL_STAGES slots whose communication the per-stage terms price: all three, less the middle where no
    plan has pp > 2. There is no middle stage then: compute_time's middle compute is -inf on every plan, so
    critical_stage never picks it whatever its communication, and stage_comm gives its slot 0 s."""
    st = sc.memo.get("comm_stages")
    if st is None:
        st = sc.memo["comm_stages"] = CRITICAL_STAGES if np.any(sc.plan.pp > 2) else CRITICAL_STAGES[1:]
    return st


def stage_comm(sc: StepCtx, per: dict) -> dict:
    """A communication term's per-micro-batch seconds on each CRITICAL_STAGES slot: `per` (stage -> its value, each
    stage with its own layers; comm_stages' slots) with the last slot, under DualPipe, the end ranks' pair, the mean
    of stage 0's and stage p - 1's (dualpipe_end_rank's, as the compute); the middle slot 0 s where no plan has one
    (comm_stages)."""
    if "mid" not in per:
        per = dict(mid=np.float64(0.0), **per)
    dual = sc.dual()
    if not sc.memo["any_dual"]:
        return per
    return dict(per, last=np.where(dual, 0.5 * (per["first"] + per["last"]), per["last"]))


def stage_totals(comp: Compute, comms: list) -> list:
    """Each CRITICAL_STAGES slot's micro-batch: its compute plus its own exposed communication (comms: each term's
    per-stage dict, stage_comm, added in step_time's order); -inf where the slot is no stage."""
    tot = [comp.stages[i][0] for i in range(3)]
    for c in comms:
        tot = [t + c[st] for t, st in zip(tot, CRITICAL_STAGES)]
    return tot


def critical_stage(comp: Compute, comms: list) -> tuple:
    """(crit, Compute of the critical stage): the stage the pipeline waits on is the one whose micro-batch, compute
    plus its own exposed communication (comms: each term's per-stage dict, stage_comm, in step_time's order), takes
    longest; its compute, permutation, host and unfused shares replace comp's (the heaviest by compute alone). crit
    indexes CRITICAL_STAGES; each term is then taken from that one stage (pick), never the heaviest of each."""
    crit = _heaviest(*stage_totals(comp, comms))
    mb, perm, host, unf = (_pick(crit, *(comp.stages[i][j] for i in range(3))) for j in range(4))
    fwd, bwd, gemm = (_pick(crit, *(comp.passes[i][j] for i in range(3))) for j in range(3))
    return crit, dataclasses.replace(comp, mb=mb, perm=perm, host=host, unfused=unf, fwd_mb=fwd, bwd_mb=bwd,
                                     gemm_fwd=gemm)


def pick(crit, per: dict) -> np.ndarray:
    """The critical stage's value of a per-stage dict (critical_stage's crit)."""
    return _pick(crit, *(per[st] for st in CRITICAL_STAGES))


def dualpipe_end_rank(sc: StepCtx, first, extra_first, last) -> tuple:
    """The last stage's (compute, permutation, host, unfused) per micro-batch as the pipeline
    waits for it. DualPipe [8] (rank r runs stage r of one direction and stage p - 1 - r of the
    other, m/2 micro-batches each) pairs stage 0 and stage p - 1 on the end ranks, so their
    time per micro-batch is the mean of the two stages': the output layer, the loss and the MTP
    modules on stage p - 1 are half on the critical path, beside stage 0's lighter load (its
    layers, plus its bf16 layers). Every other schedule (and one stage): the last stage as it
    is. The middle ranks (stage r with p - 1 - r) keep the heaviest middle stage
    (slowest_middle), an upper bound on their mean; with pp 2 (no middle rank) both ranks are end
    ranks and compute_time prices them by this pair alone (a named approximation at pp > 2)."""
    dual = sc.dual()
    if not sc.memo["any_dual"]:
        return last
    first = (first[0] + extra_first,) + tuple(first[1:])
    return tuple(np.where(dual, 0.5 * (f + x), x) for f, x in zip(first, last))


def bf16_end_layers(sc: StepCtx, lt: LayerTimes):
    """(first stage, middle stage, last stage) extra seconds per micro-batch of the transformer layers a
    low-precision plan keeps in bf16 (Megatron --first-last-layers-bf16: the first N0 and last N1 layers
    outside the fp8 / fp4 autocast, transformer_config.py @d98e8a64), where they are: by global layer index
    (fp8_utils.py l. 711-727), on the stages whose model chunks hold them (pipeline.stage_end_layers: with vpp > 1
    or a first stage shorter than N0 some sit on stage 1 and later; the middle entry the middle stage holding the
    most). Each costs its own kind's forward + backward at bf16 instead of the plan's precision, counted by kind from
    the layers the stage holds (pipeline.stage_end_kinds: DeepSeek-V2-Lite's dense layer 0 is priced as the dense
    layer it is, not as the stage's mean layer, which the MoE layers dominate). With pp = 1 both ends are on the one
    stage, the last's. Under full recompute the bf16 layers the plan re-runs re-run at bf16 too (their forward's
    extra once more): the re-run calls each layer under its own quantization context, get_fp8_context(config,
    layer.layer_number - 1), nullcontext for a bf16 layer (megatron/core/recompute.py @d98e8a64 custom_forward
    l. 79-91, 108), and which of them re-run follows --recompute-method (pipeline.stage_end_kinds rerun: uniform
    every layer, block each chunk's first n). bf16_end_passes' forward + backward and the host gaps' extra, per
    stage."""
    return tuple(f + b + h for f, b, _, h in _bf16_end(sc, lt))


def bf16_end_passes(sc: StepCtx, lt: LayerTimes) -> tuple:
    """bf16_end_layers split as stage_passes splits a stage: per stage (first, middle, last) the bf16 layers'
    (forward, backward, forward GEMMs) extra per micro-batch over the plan's precision. The forward as GPU work
    (stage_windows' rule: fwd less the MoE host gaps), the backward with selective recompute's share and, on the
    layers full recompute re-runs (stage_end_kinds rerun), the forward's again; the forward GEMMs' extra the
    weight-gradient share reads."""
    return tuple(x[:3] for x in _bf16_end(sc, lt))


def _bf16_end(sc: StepCtx, lt: LayerTimes) -> tuple:
    """Per stage (first, middle, last) the bf16 layers' (forward, backward, forward GEMMs, MoE host gaps) extra per
    micro-batch (bf16_end_passes' three, and the host gaps' bf16_end_layers adds, as compute_time's stage() adds
    (n + rc) host_fwd to the windows). Once per layer times in sc.memo (compute_time and stage_passes each read it)."""
    zero = np.float64(0.0)
    n0, n1 = sc.settings.bf16_layers
    if not (n0 or n1):
        return ((zero,) * 4,) * 3
    hit = sc.memo.get("bf16_end")
    if hit is not None and hit[0] is lt:
        return hit[1]
    plan = sc.plan  # a PlanArrays, or a KeyedPlan under the search's keyed floors (group_floor): with_fields takes both
    lt16 = layer_times(_context(sc.settings, with_fields(plan, precision=np.zeros_like(plan.precision))))
    # each kind's extra seconds at bf16, weighted by the bf16 layers of that kind each stage holds
    fp8 = sc.fp8
    d_f = [np.where(fp8, (f16 - h16) - (f - h), 0.0)
           for f16, h16, f, h in zip(lt16.fwd, lt16.host_fwd, lt.fwd, lt.host_fwd)]
    d_b = [np.where(fp8, (b16 + s16) - (b + s), 0.0) for b16, s16, b, s in zip(lt16.bwd, lt16.sel, lt.bwd, lt.sel)]
    d_g = [np.where(fp8, g16 - g, 0.0) for g16, g in zip(lt16.gemm_fwd, lt.gemm_fwd)]
    d_h = [np.where(fp8, h16 - h, 0.0) for h16, h in zip(lt16.host_fwd, lt.host_fwd)]  # the host gaps' (forward)
    counts = stage_end_kinds(sc.ll, plan, n0, n1)
    # the re-run bf16 layers: every one under the uniform method (no recompute_layers), else the block window's
    cap = sc.settings.recompute_layers  # a job setting, not searched
    reruns = counts if cap is None else stage_end_kinds(sc.ll, plan, n0, n1, rerun=True, cap=cap)
    full = plan.recompute == RC_FULL
    one = plan.pp == 1
    keep = (np.where(one, 0.0, 1.0), np.where(plan.pp > 2, 1.0, 0.0), np.float64(1.0))  # first, middle, last
    out = []
    for c, r, k in zip(counts, reruns, keep):
        fwd = weighted(c, d_f)
        bwd = weighted(c, d_b) + np.where(full, weighted(r, d_f), 0.0)
        host = weighted(c, d_h) + np.where(full, weighted(r, d_h), 0.0)  # compute_time's total, not a window
        out.append((k * fwd, k * bwd, k * weighted(c, d_g), k * host))
    out = tuple(out)
    sc.memo["bf16_end"] = (lt, out)
    return out


# ----------------------------------------------------------------------------- collectives
class Collectives:
    """Prices one collective per (op, size, group, stride) at its place in the rank order:
    comm.py's model, a run calibration's bandwidth scale of the tier it crosses, a calibration
    profile's measured times where they apply; `used` names the measured figures used."""

    def __init__(self, sc: StepCtx):
        settings = sc.settings
        prof = settings.calibration
        # the run's NCCL_NVLS_ENABLE (job field nccl_nvls_enable): 0 takes NVLS and NVLS-tree out, CollNet direct
        # inside the domain (comm.nvls_enabled, comm.py [22])
        self.cpar = comm.comm_params(settings.hardware, nvls=comm.nvls_enabled(
            settings.nccl_nvls_enable, getattr(settings.hardware, "nvls", False)))
        self.job = settings.gpus
        self.groups = [] if prof is None or getattr(prof, "nccl", None) is None else prof.nccl.groups
        self.used: set[str] = set() if sc.gemm_cal is None else {"gemm"}
        kn = settings.knobs
        self.bw_nv, self.bw_in = kn.nvlink_bandwidth_scale, kn.internode_bandwidth_scale
        self.bw_arrays = np.ndim(self.bw_nv) > 0 or np.ndim(self.bw_in) > 0
        self.bw_scaled = self.bw_arrays or float(self.bw_nv) != 1.0 or float(self.bw_in) != 1.0
        self.memo = settings.comm_memo
        # the algorithms the run's NCCL_ALGO leaves each op (job field nccl_algo: comm.nccl_algo_candidates); None: all
        self.algos = settings.nccl_algos
        # the protocols the run's NCCL_PROTO leaves each op (job field nccl_proto: comm.nccl_proto_protocols); None:
        # NCCL's default set
        self.protos = settings.nccl_protos
        p = sc.plan
        self.strides = comm.strides_by_code(p.order, tp=p.tp, cp=p.cp, pp=p.pp, dp=p.dp)
        self.plans = None  # a terms.Groups of the batch's plans that each collective is priced once per (by_plans)
        self._last = None  # (size, group, stride, their comm.distinct) of the last call priced over the batch (_distinct)

    def by_plans(self, g) -> "Collectives":
        """This pricing (the same profile, bandwidth scales, memo and `used` set), each collective priced once per group
        of plans of `g` (a terms.Groups over the plan fields the caller's collectives read, dp_collectives) and the
        prices laid back on every plan: where a collective's (size, group, stride) are the same bits on every plan of
        each group (checked on every call, _by_plans; priced over the whole batch as ever where not), so the same
        values, without distinct's sort over every plan (and stage slot) of the batch. g None: this one."""
        if g is None:
            return self
        out = copy.copy(self)
        out.plans = g
        return out

    def _by_plans(self, op, size, group, stride):
        """by_plans' price, or None where a collective's arguments are not constant within the groups (or do not
        run over the batch's plans on their last axis)."""
        g = self.plans
        if self.bw_arrays:  # candidate knob values of a fit, per plan: distinct per element (_price)
            return None
        args = [np.asarray(a) for a in (size, group, stride)]
        shape = np.broadcast_shapes(*(a.shape for a in args))
        if not shape or shape[-1] != g.n:
            return None
        one = []
        for a in args:
            if a.ndim == 0 or a.shape[-1] == 1:  # the same on every plan
                one.append(a)
                continue
            r = a.take(g.first, axis=-1)
            back = r.take(g.index, axis=-1)
            same = (back.view(np.int64) == a.view(np.int64)) if a.dtype == np.float64 else back == a  # bits: -0.0 apart
            if not same.all():
                return None
            one.append(r)
        return np.asarray(self._price(op, *one)).take(g.index, axis=-1)

    def _all(self, op, size, group, stride, s_nv=None, s_in=None):
        s_nv = self.bw_nv if s_nv is None else s_nv
        s_in = self.bw_in if s_in is None else s_in
        # group_collective(op, size, group, stride, AUTO), each distinct collective priced once per process
        t, latency_s, bandwidth_s, link = comm.auto_collective_times(
            op, size, group, stride, self.cpar, self.job, self.algos[op] if self.algos else comm.AUTO_CANDIDATES,
            self.protos[op] if self.protos else None)
        if self.bw_scaled:  # a run calibration's bandwidth scale of the tier the group's traffic crosses
            t = latency_s + bandwidth_s / np.where(link == comm.LINK_NVLINK, s_nv, s_in)
        # a calibration profile replaces the default for the (collective, scope, ranks) it
        # measured; scope from placement: NVLink = intra-node, anything else inter-node
        for g in self.groups:
            if PROFILE_OPS.get(g.collective) != op:
                continue
            scope_ok = (link == comm.LINK_NVLINK) if g.scope == "intra-node" else (link != comm.LINK_NVLINK)
            hit = scope_ok & (np.asarray(group) == g.ranks)
            if np.any(hit):
                self.used.add(f"{g.collective}/{g.scope}/{g.ranks}")
                t = np.where(hit, g.time(size), t)
        return np.where(group > 1, t, 0.0)

    def __call__(self, op, size, group, stride):
        """_price's, once per group of plans where by_plans gave groups and the call's arguments allow it."""
        if self.plans is not None:
            out = self._by_plans(op, size, group, stride)
            if out is not None:
                return out
        return self._price(op, size, group, stride)

    def batch(self, calls) -> list:
        """[self(op, size, group, stride) for each call of `calls`], the calls of one op priced together: their
        broadcast arguments laid end to end and priced by one _price (one comm.distinct, one auto_collective_times),
        then split back. A collective's price is elementwise in (size, group, stride) (_all, comm.auto_collective_times'
        memo), so each element gets the bits its own call gives it. Each call on its own where by_plans' groups, a
        memo, per-plan bandwidth scales or a calibration profile take part; calls of one op whose arguments' dtypes
        differ apart (concatenation would cast them)."""
        out = [None] * len(calls)
        if self.plans is not None or self.memo is not None or self.bw_arrays or self.groups:
            return [self(*c) for c in calls]
        by_op = {}  # (op, the arguments' dtypes) -> its calls
        for i, (op, *args) in enumerate(calls):
            args = [np.asarray(a) for a in args]
            by_op.setdefault((op,) + tuple(a.dtype.str for a in args), []).append((i, args))
        for (op, *_), rows in by_op.items():
            if len(rows) == 1:
                i, args = rows[0]
                out[i] = self._price(op, *args)
                continue
            shapes = [np.broadcast_shapes(*(a.shape for a in args)) for _, args in rows]
            flat = [np.concatenate([np.broadcast_to(args[j], sh).ravel() for (_, args), sh in zip(rows, shapes)])
                    for j in range(3)]
            t = np.asarray(self._price(op, *flat))
            at = 0
            for (i, _), sh in zip(rows, shapes):
                k = int(np.prod(sh, dtype=np.int64))
                out[i] = t[at:at + k].reshape(sh)
                at += k
        return out

    def _distinct(self, size, group, stride):
        """comm.distinct(size, group, stride), the last call's again where the same three objects come back: a pair of
        collectives over one group and size (tp_comm's and etp_pair's reduce-scatter and all-gather, the allgather
        dispatcher's), priced in turn. The objects are held, so their ids stay theirs, and the planner never writes an
        array in place: the same tuples."""
        last = self._last
        if last is not None and last[0] is size and last[1] is group and last[2] is stride:
            return last[3]
        d = comm.distinct(size, group, stride)
        self._last = (size, group, stride, d)
        return d

    def _price(self, op, size, group, stride):
        """coll_all once per distinct (size, group, stride); each plan pays only the collectives
        it runs (group 1 = no collective), so a profile is reported used only where it changed a time. A call
        whose group is 1 on every plan runs no collective: its zeros, without pricing one (_all's result there,
        where no calibration profile or bandwidth-scale array takes part)."""
        if not (self.groups or self.bw_arrays) and not np.any(np.asarray(group) > 1):
            return np.zeros(np.broadcast_shapes(np.shape(size), np.shape(group), np.shape(stride)))
        if self.bw_arrays:  # candidate knob values of a fit: distinct per element too
            d = comm.distinct(size, group, stride, self.bw_nv, self.bw_in)
            return d.expand(self._all(op, *d.values))
        if self.memo is None:
            d = self._distinct(size, group, stride)
            return d.expand(self._all(op, *d.values))
        args = [np.asarray(x).ravel() for x in np.broadcast_arrays(size, group, stride)]
        shape = np.broadcast(size, group, stride).shape
        if not all(a.size and (a == a[0]).all() for a in args):  # memo: one plan's collectives only
            d = comm.distinct(size, group, stride)
            return d.expand(self._all(op, *d.values))
        one = [a[:1] for a in args]
        key = (op, float(self.bw_nv), float(self.bw_in)) + tuple(a.dtype.str + a.tobytes().hex() for a in one)
        if key not in self.memo:
            before = set(self.used)
            self.memo[key] = (np.asarray(self._all(op, *one))[0], self.used - before)
        t, added = self.memo[key]
        self.used.update(added)
        return np.full(shape, t)


# ----------------------------------------------------------------------------- TP, EP, CP, PP
def tp_comm(sc: StepCtx, coll: Collectives, lt: LayerTimes, parts: dict | None = None) -> dict:
    """TP collectives per micro-batch of each stage (CRITICAL_STAGES -> seconds, stage_comm: each with its own
    layers, n and rc; step_time takes the critical stage's) [2]: each block with a TP-split output
    runs one all-reduce (or reduce-scatter + all-gather under SP, at the recipe's widths [33]) of T h each way (an MoE
    MLP's moves the top_k c dispatched copies of each token); a recomputed layer repeats its
    forward ones; the stack's selective policy may re-run some of an attention layer's. With
    TP-communication overlap [7] each is split into tp chunks that ring-exchange while the GEMM
    they feed computes: the first chunk and what outlasts the layer's GEMMs stay exposed. The overlap
    as it runs (plan.tp_overlap): off for an MLA model where the stack turns it off (Megatron-LM since
    2025-04-24: transformer_engine.py @d98e8a64 l. 1176-1186, stack overlap.tp_comm_overlap_off_with_mla),
    every layer priced without it (the first MLA layer's linear_proj keeps it in Megatron-LM: 1 linear of
    L, a named approximation). An MLA layer on a stack that gathers its latents (stack mla_tp_gathers latents: Megatron-
    Core) runs the latents' gathers and the output's collectives of [32] in place of the pair (mla_tp_collectives),
    its up projections' gathers again where the selective policy re-runs them. With partition_activations
    (memory.py [pa]) each re-run layer first all-gathers its kept
    input, T h bf16 (T h / t under SP), over the TP group: not overlapped (the re-run waits on it).
    With sync_tp_duplicated_parameters [sy] every layer forward (a re-run one's too) all-reduces each of
    its TP-duplicated h-element parameters (the blocks' tp_synced: LayerNorm weight and bias, row-parallel
    bias) at the weights' bytes: BigScience's Megatron-DeepSpeed @8387ae17 megatron/model/fused_layer_norm.py
    l. 87, 103-105 (MixedFusedLayerNorm.forward: torch.distributed.all_reduce(weight), all_reduce(bias),
    ReduceOp.AVG, the TP group) and megatron/mpu/layers.py l. 426, 440-441 (RowParallelLinear.forward:
    all_reduce(bias)): synchronous calls before the kernels that read them, exposed. A BLOOM layer: 2
    LayerNorms x 2 + 2 biases = 6 a forward. Blocks without tp_synced (MoE, MLA, scans: the fork builds
    none) add none. Each layer's backward re-gathers its column-parallel linears' SP inputs for their wgrad GEMMs,
    behind their dgrad GEMMs ([35], regather_seconds): once a micro-batch, recomputed or not; `parts`, where given,
    gets that share of each stage's seconds under "regather" (step_time's tp_wgrad_regather_s). An MoE layer's shared
    experts run their own pair where the stack says so ([37], shared_experts_pair); `parts` gets its share under
    "shared" (step_time's tp_shared_experts_s)."""
    plan, ctx = sc.plan, sc.ctx
    s = coll.strides["tp"]
    msg = ctx.T * sc.settings.model.hidden_size * ACT_BYTES
    sp_on = plan.sp > 0
    tb = tp_bytes(sc)
    plain, again, regather, sh_plain, sh_again = tp_layer_seconds(sc, coll, lt, tb)
    at_bf16 = {}  # tp_layer_seconds at the bf16 widths, once (the pairs' and the re-gathers' bf16 end layers)

    def kinds(w):
        if "w" not in at_bf16:
            at_bf16["w"] = tp_layer_seconds(sc, coll, lt, w)
        return at_bf16["w"]
    # the bf16 layers' extra per stage (Megatron --first-last-layers-bf16)
    ends = _bf16_end_tp(sc, tb, plain, again, lambda w: kinds(w)[:2])
    gather = sync = None
    if sc.settings.partition_activations:  # a job setting [pa]: the kept input gathered before each re-run
        gather = coll(comm.ALL_GATHER, msg / np.where(sp_on, plan.tp, 1), plan.tp, s)
    if sc.settings.sync_tp_duplicated_parameters:  # a job setting [sy]: every forward, the re-runs' too
        h = sc.settings.model.hidden_size
        sync = coll(comm.ALL_REDUCE, np.float64(h * sc.settings.bpp.weights), plan.tp, s)

    def on(st):  # stage st's layers (n, of which rc recomputed), each kind's collectives
        n, rc = sc.nf(st), sc.rc[st]
        out = [(n - rc) * a + rc * b for a, b in zip(plain, again)]
        if gather is not None:
            out = [o + rc * gather for o in out]
        if sync is not None:
            out = [o + (n + rc) * (getattr(k.mixer, "tp_synced", 0.0) + getattr(k.mlp, "tp_synced", 0.0)) * sync
                   for o, k in zip(out, sc.ll.kinds)]
        return sc.mean(st, out) if ends is None else sc.mean(st, out) + ends[st]

    head = head_tp_seconds(sc, coll)  # [36] the embedding's, the output layer's and the loss's
    if parts is not None:  # [35] the re-gathers' share: every layer once (plain and again hold the same), bf16 ends
        r_ends = _bf16_end_tp(sc, tb, regather, regather, lambda w: (kinds(w)[2],) * 2)
        parts["regather"] = stage_comm(sc, {st: sc.mean(st, [sc.nf(st) * r for r in regather])
                                            + (0.0 if r_ends is None else r_ends[st]) for st in comm_stages(sc)})
        parts["head"] = stage_comm(sc, {st: head[st] for st in comm_stages(sc)})
        # [37] the shared experts' pairs' share, as on() counts the layers (n, rc re-run), bf16 ends
        s_ends = _bf16_end_tp(sc, tb, sh_plain, sh_again, lambda w: kinds(w)[3:5])

        def sh_on(st):
            n, rc = sc.nf(st), sc.rc[st]
            out = sc.mean(st, [(n - rc) * a + rc * b for a, b in zip(sh_plain, sh_again)])
            return out if s_ends is None else out + s_ends[st]
        parts["shared"] = stage_comm(sc, {st: sh_on(st) for st in comm_stages(sc)})
    return stage_comm(sc, {st: on(st) + head[st] for st in comm_stages(sc)})


def head_tp_seconds(sc: StepCtx, coll: Collectives) -> dict:
    """[36] The TP collectives of the embedding, the output layer and the vocab-parallel loss, per micro-batch: {"first":
    the embedding's, "last": the output layer's and the loss's, with the embedding's at pp 1 (one stage holds both) and
    each multi-token prediction module's own embedding, output layer and loss}; 0 at tp 1. stage_comm pairs them on
    DualPipe's end ranks."""
    plan = sc.plan
    # over the batch's distinct (stride, T, SP group, all-reduce group, SP) tuples, laid back on every plan (_tp_groups)
    s, T, tp_sp, tp_ar, _, back = _tp_groups(sc, coll)  # group 1: no such collective, 0 s
    msg = T * sc.settings.model.hidden_size * ACT_BYTES  # T h bf16 (a named approximation under MXFP8's TE head)
    g, _ = head_gemm(sc)
    # the three collectives of T h, each priced once (the embedding's, the output layer's and its re-gather's share them)
    rs, ag, ar = (coll(comm.REDUCE_SCATTER, msg, tp_sp, s), coll(comm.ALL_GATHER, msg, tp_sp, s),
                  coll(comm.ALL_REDUCE, msg, tp_ar, s))
    # the embedding: under SP the reduce-scatter forward, its all-gather backward; else the all-reduce forward
    emb = back(rs + ag + ar)
    # the output layer: under SP its input's all-gather forward; backward the input gradient's reduce-scatter (all-reduce
    # without SP), async beside the wgrad GEMM where the stack's linears save their local input (Megatron's), else
    # synchronous (DTensor's redistribute); and the re-gather behind the dgrad GEMM where the stack re-gathers ([35])
    dgrad, ag = back(rs + ar), back(ag)
    if not sc.stack.memory.tp_saves_gathered_input:  # a stack setting
        dgrad = _hide(dgrad, g, sc.x)
    regather = np.where(regather_on(sc), _hide(ag, g, sc.x), 0.0)
    head = ag + dgrad + regather + loss_tp_seconds(sc, coll)
    mtp = float(sc.ll.mtp)  # each module its embedding, output layer and loss
    last = head + np.where(plan.pp == 1, emb, 0.0) + mtp * (head + emb)
    return {"first": emb, "last": last, "mid": np.float64(0.0)}


def loss_tp_seconds(sc: StepCtx, coll: Collectives) -> np.ndarray:
    """[36] The vocab-parallel cross-entropy's forward collectives over TP per micro-batch, on T fp32 values a row:
    unfused (Megatron's vocab_parallel_cross_entropy, DTensor's loss_parallel) three all-reduces of 4 T B; the job's
    cross_entropy_fusion native two, of 4 T B and 8 T B; TE's (impl te) one all-gather of 12 T B a rank."""
    s, T, tp_sp, tp_ar, _, back = _tp_groups(sc, coll)  # distinct tuples, laid back on every plan (_tp_groups)
    tp = tp_sp * tp_ar  # the TP group (one of the two is 1)
    if not sc.settings.cross_entropy_fusion:  # job settings
        return back(3.0 * coll(comm.ALL_REDUCE, np.float64(4.0) * T, tp, s))
    if te_loss(sc.settings):
        return back(coll(comm.ALL_GATHER, 12.0 * T * tp, tp, s))
    return back(coll(comm.ALL_REDUCE, np.float64(4.0) * T, tp, s) + coll(comm.ALL_REDUCE, np.float64(8.0) * T, tp, s))


def tp_pair_ways(sc: StepCtx, coll: Collectives, tb):
    """way(mult, back=False): seconds per micro-batch of one way of a block's TP pair of size T h x mult [2] [33]: under
    SP the reduce-scatter and the all-gather at tb's widths (tp_bytes: forward output_reduce_scatter and
    input_all_gather, backward grad_input_reduce_scatter and grad_output_all_gather) and the amax all-reduce before the
    gather, else the all-reduce (bf16 whatever the recipe). Each collective priced once per (width, size), the
    backward way the forward's where their widths agree (bf16)."""
    # over the batch's distinct (stride, T, SP group, all-reduce group, SP) tuples, laid back on every plan (_tp_groups)
    s, T, tp_sp, tp_ar, sp_on, lay = _tp_groups(sc, coll, tb)
    msg = T * sc.settings.model.hidden_size * ACT_BYTES
    am = amax_reduce(coll, tb, tp_sp, s)  # before each quantized SP gather (0 s without SP)
    alike = all(np.array_equal(tb[a], tb[b]) for a, b in (("input_all_gather", "grad_output_all_gather"),
                                                          ("output_reduce_scatter", "grad_input_reduce_scatter")))
    priced, ways = {}, {}

    def at(op, name, mult):  # one collective of T h x mult: an SP one at width tb[name], else the all-reduce
        key = (op, mult) if op == comm.ALL_REDUCE else (op, next(k for k in TP_COLLECTIVES
                                                                 if np.array_equal(tb[k], tb[name])), mult)
        if key not in priced:
            priced[key] = (coll(op, msg * mult, tp_ar, s) if op == comm.ALL_REDUCE
                           else coll(op, msg * mult * tb[name], tp_sp, s))
        return priced[key]

    def way(mult, back=False):
        key = (mult, bool(back and not alike))
        if key not in ways:
            ag, rs = (("grad_output_all_gather", "grad_input_reduce_scatter") if key[1]
                      else ("input_all_gather", "output_reduce_scatter"))
            ways[key] = lay(np.where(sp_on, at(comm.REDUCE_SCATTER, rs, mult) + at(comm.ALL_GATHER, ag, mult) + am,
                                      at(comm.ALL_REDUCE, rs, mult)))
        return ways[key]
    return way


def tp_layer_seconds(sc: StepCtx, coll: Collectives, lt: LayerTimes, tb) -> tuple:
    """tp_comm's per-kind seconds per micro-batch at the TP widths tb (tp_bytes [33]): (a layer's forward and backward
    collectives, a recomputed layer's, the backward's wgrad input re-gathers inside both), each a list over the layer
    kinds, with the overlap as it runs (tp_comm's docstring: the pairs, MLA's own [30] [32], the selective policy's
    re-runs, the re-gathers [35]); the re-gathers' own exposed seconds, a list over the kinds (regather_seconds); and
    the shared experts' pairs' share of a layer's and a recomputed layer's seconds ([37]: each the layer's exposed
    seconds less those without the shared experts' pairs, so that the shares and the rest sum to the layer's), two lists
    over the kinds."""
    plan, ctx = sc.plan, sc.ctx
    way = tp_pair_ways(sc, coll, tb)
    regather = regather_seconds(sc, coll, lt, tb)
    # the overlap as it runs: off for an MLA model on a stack that turns it off (plan.tp_overlap, stack
    # overlap.tp_comm_overlap_off_with_mla); the first MLA layer's linear_proj, built before the switch, keeps it in
    # Megatron-LM: priced off too, 1 linear of L layers (a named approximation)
    tpo = tp_overlap(sc.settings, plan) > 0
    any_tpo = bool(np.any(tpo))
    # [35] the dgrad GEMMs of the linears whose inputs are re-gathered hide those re-gathers (TE's ub_bulk_dgrad): under
    # the overlap they are not the pairs' window too, which loses them (0 where nothing is re-gathered: regather_seconds)
    taken = regather_windows(sc, lt)

    def hidden(t, passes, g, d):
        if not any_tpo:  # no plan of the batch overlaps: t on every plan, in np.where's shape
            return np.array(np.broadcast_to(t, np.broadcast_shapes(np.shape(tpo), np.shape(t), np.shape(g), np.shape(d),
                                                                   np.shape(ctx.tp))), dtype=np.float64)
        return np.where(tpo, np.minimum(np.maximum(t - (passes * g - d), 0.0) + t / ctx.tp, t), t)

    # recompute_tp_collectives forward all-gathers re-run a layer, priced as half as many pairs (an all-gather and a
    # reduce-scatter); where the eager reduce-scatters are on no save list (memory.tp_collectives_rerun [tk]) each
    # re-run all-gather's block re-runs its reduce-scatter too: as many pairs as all-gathers
    rtc = sc.stack.selective.recompute_tp_collectives
    sel_tp = np.where(plan.recompute == RC_SELECTIVE,
                      np.where(tp_collectives_rerun(sc.settings, plan), rtc, rtc / 2.0), 0.0)
    latents = sc.stack.mla_tp_gathers == "latents"  # a stack setting [32]
    one = way(1.0)
    plain, again, sh_plain, sh_again = [], [], [], []
    priced = {}  # a block's collectives once per equal block (kinds share their MLA mixer or MoE MLP): the same values

    def once(fn, block):
        key = (fn, block)
        if key not in priced:
            priced[key] = fn(sc, coll, block, tb) if fn in (mla_tp_collectives, mla_fused_gathers) else fn(sc, coll, block)
        return priced[key]
    blocks = set(sc.stack.selective.recompute_blocks)
    for i, kind in enumerate(sc.ll.kinds):
        pairs_f = pairs_b = np.float64(0.0)
        # [37] the shared experts' own pair of T h each way (a stack setting, a model's kind), as a dense MLP's
        sh = shared_experts_pair(sc, kind)
        sh_f, sh_b = (way(1.0), way(1.0, back=True)) if sh else (np.float64(0.0), np.float64(0.0))
        if sh and sc.settings.moe_shared_expert_overlap:  # [38] on the side stream instead, priced in ep_comm
            so = shared_overlap_on(sc)
            sh_f, sh_b = np.where(so, 0.0, sh_f), np.where(so, 0.0, sh_b)
        # an MLA layer whose stack gathers the latents: its own collectives [32] in place of the block's pair
        mla = kind.mixer if latents and isinstance(kind.mixer, MLA) else None  # a stack setting, a model's kind
        f_l, b_l, r_l = once(mla_tp_collectives, mla) if mla is not None else (0.0, 0.0, 0.0)
        for mult in (() if mla is not None else kind.mixer.tp_pairs) + kind.mlp.tp_pairs:
            if mult == "moe":  # the expert-TP pair and DeepSpeed's gating gather: bf16 each way
                both = once(etp_pair, kind.mlp) + once(gating_gather, kind.mlp)
                pairs_f = pairs_f + both
                pairs_b = pairs_b + both
                continue
            pairs_f = pairs_f + way(mult)
            pairs_b = pairs_b + way(mult, back=True)
        extra = ((sel_tp * one if kind.mixer.selective_core else 0.0)
                 + np.where(plan.recompute == RC_SELECTIVE, r_l, 0.0))  # MLA's up projections' re-run gathers [32]
        # a checkpointed dense MLP or MoE block (recompute_modules mlp, moe) re-runs its forward collectives once more
        # in the backward (the SP all-gather and reduce-scatter, the expert-TP pair: planner/recompute_modules.py)
        if reruns_dense_mlp(sc.stack.selective, kind) or reruns_moe_block(sc.stack.selective, kind):  # policy, kind
            block = np.float64(0.0)
            for mult in kind.mlp.tp_pairs:
                block = block + (once(etp_pair, kind.mlp) + once(gating_gather, kind.mlp) if mult == "moe"
                                 else way(mult))
            extra = extra + np.where(plan.recompute == RC_SELECTIVE, block, 0.0)
        # [37] a checkpointed MoE block (moe) or shared-experts module (shared_experts) re-runs the shared experts'
        # forward pair in the backward (moe_layer.py l. 507-531 te_checkpoint; the policy's, the kind's)
        sh_x = (np.where(plan.recompute == RC_SELECTIVE, sh_f, 0.0)
                if sh and (reruns_moe_block(sc.stack.selective, kind) or "shared_experts" in blocks) else 0.0)
        g = lt.gemm_fwd[i]
        # MLA's fused down projection's own collectives [30], exposed beside the overlap (a model / job setting)
        f_x, b_x = (once(mla_fused_gathers, kind.mixer) if getattr(kind.mixer, "down_fused", False)
                    else (0.0, 0.0))
        # the backward's wgrad input re-gathers [35]: once a micro-batch, a re-run layer's too (the re-run is a forward)
        p_all = hidden(pairs_f + pairs_b + f_l + b_l + extra + sh_f + sh_b + sh_x, 3.0, g, taken[i])
        a_all = hidden(2.0 * (pairs_f + sh_f) + pairs_b + sh_b + 2.0 * f_l + b_l, 4.0, g, taken[i])
        plain.append(p_all + f_x + b_x + regather[i])
        again.append(a_all + 2.0 * f_x + b_x + regather[i])
        # [37] their share: the exposed seconds less those without them (0 where the kind has none)
        sh_plain.append(p_all - hidden(pairs_f + pairs_b + f_l + b_l + extra, 3.0, g, taken[i]) if sh
                        else np.float64(0.0))
        sh_again.append(a_all - hidden(2.0 * pairs_f + pairs_b + 2.0 * f_l + b_l, 4.0, g, taken[i]) if sh
                        else np.float64(0.0))
    return plain, again, regather, sh_plain, sh_again


def shared_experts_pair(sc: StepCtx, kind) -> bool:
    """[37] Whether layer `kind`'s shared experts run a TP pair of their own: the stack's moe_shared_experts_tp_pair
    (Megatron-Core's SharedExpertMLP) and a kind with shared experts (a stack setting, a model's kind)."""
    mlp = kind.mlp
    return bool(sc.stack.moe_shared_experts_tp_pair and getattr(mlp, "num_shared", 0) and getattr(mlp, "fs", 0))


def regather_inputs(sc: StepCtx, kind) -> list:
    """[35] (gathered elements per token, GEMM row) of each column-parallel linear of layer `kind` whose input the SP
    all-gather feeds and whose backward re-gathers it for the wgrad GEMM: the blocks' sp_input_gemm on their T h input
    (attention's qkv, the MLP's fc1, the Mamba / Gated DeltaNet in_proj); an MLA layer where the stack gathers the
    latents (stack mla_tp_gathers latents, [32]) its up projections' inputs, r_q (h without a q latent: linear_q_proj)
    and r_kv, and with the fused down projection ([30]) linear_qkv_down_proj's T h. Not an MLA layer under
    mla_tp_gathers input (its gathered input feeds replicated down projections), nor an MoE MLP's routed experts (they
    read the dispatcher's rows); the shared experts' fc1 on T h where they run their own pair ([37], shared_experts_pair:
    TE's Linear re-gathers it, at the recipe's width also where Megatron sets save_original_input on it, shared_experts.py
    l. 146-161: the saved bf16 input is quantized before the gather, TE linear.py l. 872-913)."""
    mixer, out = kind.mixer, []
    if isinstance(mixer, MLA) and sc.stack.mla_tp_gathers == "latents":  # a model's kind, a stack setting [32]
        q = (float(mixer.h), "mla_q") if mixer.q_lora_rank is None else (float(mixer.q_lora_rank), "mla_q_up")
        out = [q, (float(mixer.kv_lora_rank), "mla_kv_up")] + ([(float(mixer.h), "mla_qkv_down")] if mixer.down_fused
                                                               else [])
    h = float(sc.settings.model.hidden_size)
    return (out + [(h, b.sp_input_gemm) for b in (mixer, kind.mlp) if getattr(b, "sp_input_gemm", None)]
            + ([(h, "shared_up")] if shared_experts_pair(sc, kind) else []))


def _regathers(sc: StepCtx, name: str):
    """[35] [38] 1 where GEMM row `name`'s input is re-gathered for its wgrad GEMM, 0 where not: the shared experts' fc1
    under --moe-shared-expert-overlap (shared_overlap_on) runs with parallel_mode None on the input its side stream
    gathered (shared_experts.py @d98e8a64 l. 163-172, 246-249, 267-269) and so saves that gathered input: no re-gather."""
    if name != "shared_up" or not sc.settings.moe_shared_expert_overlap:  # a row name, a job setting
        return 1.0
    return np.where(shared_overlap_on(sc), 0.0, 1.0)


def regather_on(sc: StepCtx):
    """[35] Per plan, whether the backward re-gathers the SP linears' inputs: SP on at tp > 1, on a stack whose SP linears
    save their local shard (not stack memory.tp_saves_gathered_input); False (a scalar) where no plan does."""
    if sc.stack.memory.tp_saves_gathered_input:  # a stack setting
        return np.False_
    return (sc.plan.sp > 0) & (sc.plan.tp > 1)


def regather_windows(sc: StepCtx, lt: LayerTimes) -> list:
    """[35] Per layer kind, the seconds per micro-batch of the dgrad GEMMs that hide the re-gathers (each
    regather_inputs row's forward seconds, lt.sp_gemms), on the plans that re-gather (regather_on), else 0: what the
    tp_comm_overlap pricing takes out of the pairs' window (tp_layer_seconds' hidden())."""
    on = regather_on(sc)
    if not np.any(on):
        return [np.float64(0.0)] * len(sc.ll.kinds)
    out = []
    for i, kind in enumerate(sc.ll.kinds):
        rows = lt.sp_gemms[i]
        d = sum((rows.get(name, 0.0) * _regathers(sc, name) for _, name in regather_inputs(sc, kind)), np.float64(0.0))
        out.append(np.where(on, d, 0.0))
    return out


def regather_seconds(sc: StepCtx, coll: Collectives, lt: LayerTimes, tb) -> list:
    """[35] Per layer kind, the exposed seconds per micro-batch of the backward's re-gathers of the column-parallel
    linears' sequence-parallel inputs for their wgrad GEMMs (regather_inputs): each an all-gather over the TP group of
    T x its input's elements at the recipe's input_all_gather width (tb, tp_bytes [33]; TE gathers the saved quantized
    input, no amax all-reduce), issued async before the linear's dgrad GEMM and waited on before its wgrad GEMM, so
    hidden behind that dgrad GEMM (the row's forward seconds, lt.sp_gemms) at the stack's exposed share (_hide, sc.x).
    0 without SP, at tp 1, and on a stack whose SP linears save their all-gathered input instead (stack
    memory.tp_saves_gathered_input: DTensor's autograd saves the gathered tensor, memory.py counts it held)."""
    kinds = sc.ll.kinds
    if not np.any(regather_on(sc)):  # stack, plans
        return [np.float64(0.0)] * len(kinds)
    s, T, tp_sp, _, _, back = _tp_groups(sc, coll, tb)  # no SP: no gather (group 1, 0 s); distinct tuples (_tp_groups)
    col = T * ACT_BYTES * tb["input_all_gather"]  # one gathered column's bytes over the micro-batch's tokens
    out, gathers = [], {}  # each distinct width's all-gather priced once (the kinds' and linears' T h inputs share it)
    for i, kind in enumerate(kinds):
        rows = lt.sp_gemms[i]
        t = np.float64(0.0)
        for width, name in regather_inputs(sc, kind):
            if width not in gathers:
                gathers[width] = back(coll(comm.ALL_GATHER, col * width, tp_sp, s))
            t = t + _hide(gathers[width], rows.get(name, 0.0), sc.x) * _regathers(sc, name)
        out.append(t)
    return out


def tp_bytes(sc: StepCtx) -> dict:
    """[33] Each TP collective of a layer's linear pair (stacks.TP_COLLECTIVES), its width over bf16 per plan: the
    plan's recipe's tp_collective_bytes / ACT_BYTES where the plan runs low precision (sc.fp8), 1.0 (bf16, 2 B an
    element) elsewhere and where the recipe has no table (stack_db fp8_recipes tp_collective_bytes); and "amax", the
    bytes of the all-reduce before each quantized gather (amax_all_reduce_bytes; 0 where none)."""
    out = {k: np.where(sc.fp8, sc.recipe[f"tp_{k}"] / ACT_BYTES, 1.0) for k in TP_COLLECTIVES}
    out["amax"] = np.where(sc.fp8, sc.recipe["tp_amax"], 0.0)
    # one value on every plan (a search of one precision and recipe): that scalar, so that the collectives' sizes keep
    # their own shapes (Collectives prices each distinct size once; the same values)
    return {k: v.flat[0] if v.size and np.all(v == v.flat[0]) else v for k, v in out.items()}


BF16_WIDTHS = {**dict.fromkeys(TP_COLLECTIVES, 1.0), "amax": 0.0}  # tp_bytes of a bf16 plan [33]


def amax_reduce(coll: Collectives, tb, group, stride) -> np.ndarray:
    """[33] Seconds of the amax all-reduce before one quantized TP all-gather (tp_bytes' "amax" bytes over the TP
    group; none, 0 s, where the plan's recipe has none, at tp 1, or under `group` 1)."""
    a = tb["amax"]
    if not np.any(a > 0):
        return np.float64(0.0)
    return coll(comm.ALL_REDUCE, a, np.where(a > 0, group, 1), stride)


def fp8_gemms_per_layer(sc: StepCtx) -> tuple:
    """[34] Per layer kind, (the fp8 GEMMs of one layer on a rank, its fp8 modules): its GEMM rows' counts (a TE
    module's num_gemms: 1 a linear, the local experts E / ep a grouped linear) times the share of the row the plan's
    recipe converts (converted: under Transformer Engine every row but the MoE router, no TE module), and the rows
    converted at all (each row one TE module: a linear, a grouped linear)."""
    gemms, modules = [], []
    for kind in sc.ll.kinds:
        rows = kind.mixer.gemms(sc.ctx) + kind.mlp.gemms(sc.ctx)
        shares = converted(sc, kind.mixer, kind.mlp, rows)
        w = [np.asarray(shares.get(r.name, np.float64(1.0)), dtype=np.float64) for r, _ in rows]
        gemms.append(sum((np.asarray(c, dtype=np.float64) * x for (_, c), x in zip(rows, w)), np.float64(0.0)))
        modules.append(sum(((x > 0).astype(np.float64) for x in w), np.float64(0.0)))
    return gemms, modules


def amax_group(sc: StepCtx, coll: Collectives) -> tuple:
    """[34] (size, stride) of Megatron-Core's amax reduction group, TP x DP x CP (parallel_state.py
    _TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP): tp cp dp ranks at the smallest stride of its axes of degree > 1 (1 where
    none is; a named approximation: exact where the three axes are contiguous in the rank order, pp outermost or 1;
    where pp lies between them the group's ranks spread over more NVLink domains than priced)."""
    plan = sc.plan
    big = np.iinfo(np.int64).max
    st = functools.reduce(np.minimum, [np.where(d > 1, coll.strides[ax], big)
                                       for ax, d in (("tp", plan.tp), ("cp", plan.cp), ("dp", plan.dp))])
    return plan.tp * plan.cp * plan.dp, np.where(st == big, 1, st)


def fp8_amax_comm(sc: StepCtx, coll: Collectives) -> dict | None:
    """[34] Delayed scaling's amax reductions per micro-batch on each CRITICAL_STAGES slot (stage_comm), None where no
    plan's recipe has any (stack_db fp8_recipes amax_reduction): per model chunk (plan.vpp a stage) and fp8_autocast
    region (regions_per_chunk), one all-reduce of the forward buffer (forward_bytes_per_gemm x the stage's fp8 GEMMs,
    fp8_gemms_per_layer over its layers) and one of the backward buffer (backward_bytes_per_gemm x them) over the amax
    group (amax_group), synchronous on the compute stream: exposed. Under full recompute (the stage's rc re-run layers,
    each its own checkpoint: Megatron's block method, and uniform at --recompute-num-layers 1, a named approximation
    otherwise) each re-run's autocast exit reduces the forward buffer once more, and every re-run fp8 module's backward
    reduces the backward buffer, in place of the region's one (the first module's flag is consumed in the no-grad
    forward)."""
    fwd, bwd = sc.recipe["amax_fwd"], sc.recipe["amax_bwd"]
    on = sc.fp8 & (fwd > 0)
    if not np.any(on):
        return None
    size, stride = amax_group(sc, coll)
    group = np.where(on, size, 1)
    per_layer, modules = fp8_gemms_per_layer(sc)
    regions = np.asarray(sc.plan.vpp, dtype=np.float64) * sc.recipe["amax_regions"]

    def on_stage(st):
        gemms = sc.nf(st) * sc.mean(st, per_layer)  # the stage's fp8 GEMMs, every chunk's layers
        rc = sc.rc[st]  # full recompute: a checkpoint a re-run layer, each re-run fp8 module's backward its own
        n_fwd = regions + rc
        n_bwd = np.where(rc > 0, rc * sc.mean(st, modules), regions)
        return np.where(on, n_fwd * coll(comm.ALL_REDUCE, fwd * gemms, group, stride)
                        + n_bwd * coll(comm.ALL_REDUCE, bwd * gemms, group, stride), 0.0)

    return stage_comm(sc, {st: on_stage(st) for st in comm_stages(sc)})


def dynamic_amax_comm(sc: StepCtx, coll: Collectives) -> dict | None:
    """[39] torchao float8's per-cast amax all-reduces over the TP group per micro-batch on each CRITICAL_STAGES slot
    (stage_comm), None where no plan has any (a recipe with dtensor_amax_bytes, tp > 1): per layer its casts of a
    TP-sharded DTensor (fp8_linears.tp_amax_casts): forward the block inputs and row-parallel inputs plus each converted
    weight, backward each output gradient plus each weight again (the weights' casts none where FSDP gathers them in
    float8 already: fp8_allgather_on); full recompute's re-run forward (the stage's rc layers) repeats the forward's; on
    the last stage the fp8 output layer's (the job's fp8_output_layer) weight casts and its Shard(-1) logits' gradient.
    Each one all-reduce of dtensor_amax_bytes over the TP group, waited before the cast: exposed."""
    from .fp8_linears import tp_amax_casts

    plan = sc.plan
    b = sc.recipe["dt_amax"]
    on = sc.fp8 & (b > 0) & (plan.tp > 1)
    if not np.any(on):
        return None
    weights = np.where(fsdp_gathers_fp8(sc), 0.0, 1.0)  # [15]: gathered as float8, no weight cast
    styled = sc.recipe["f8_tp_styles"]  # per plan: its recipe runs torchao's float8 TP styles (a stack setting)
    fwd, bwd = [], []
    for kind in sc.ll.kinds:
        w, i, g = tp_amax_casts(kind.mixer, kind.mlp, sc.settings.filter_fqns, plan.f8r, styled)
        fwd.append(i + weights * w)
        bwd.append(g + weights * w)
    out_casts = (1.0 + 2.0 * weights) if sc.settings.fp8_output_layer else 0.0  # a job setting [14]
    ar = coll(comm.ALL_REDUCE, np.where(on, b, 0.0), np.where(on, plan.tp, 1), coll.strides["tp"])

    def on_stage(st):
        n = sc.nf(st) * (sc.mean(st, fwd) + sc.mean(st, bwd)) + sc.rc[st] * sc.mean(st, fwd)
        if st == "last":
            n = n + out_casts
        return np.where(on, n * ar, 0.0)

    return stage_comm(sc, {st: on_stage(st) for st in comm_stages(sc)})


def tp_amax_parts(sc: StepCtx, coll: Collectives) -> dict:
    """The amax all-reduces inside tp_comm per micro-batch on each CRITICAL_STAGES slot, by extra key: delayed scaling's
    region buffers (tp_fp8_amax_s, fp8_amax_comm [34]) and torchao float8's per-cast TP all-reduces
    (tp_fp8_dynamic_amax_s, dynamic_amax_comm [39]), each where some plan has it."""
    parts = {"tp_fp8_amax_s": fp8_amax_comm(sc, coll), "tp_fp8_dynamic_amax_s": dynamic_amax_comm(sc, coll)}
    return {k: v for k, v in parts.items() if v is not None}


def _bf16_end_tp(sc: StepCtx, tb, plain, again, kinds):
    """[33] The bf16 end layers' (Megatron --first-last-layers-bf16, bf16_end_layers) extra TP seconds per micro-batch
    on each comm_stages slot, a low-precision plan's kept-bf16 layers priced at bf16 widths: per kind the layers of
    that kind the stage holds (pipeline.stage_end_kinds) times (bf16 - plan widths) of a layer's collectives, and on
    the layers full recompute re-runs their re-run's too (stage_end_kinds rerun), with _bf16_end's stage weights
    (stage 0 none at pp 1, the middle only at pp > 2). tb: the plans' widths (tp_bytes); kinds: tp_comm's pricing of
    each kind at given widths. None where the job keeps no layer bf16, no plan runs low precision or every TP
    collective of the plans' recipes is bf16 anyway (the same seconds)."""
    n0, n1 = sc.settings.bf16_layers
    if not (n0 or n1) or not np.any(sc.fp8) or all(np.all(tb[k] == v) for k, v in BF16_WIDTHS.items()):
        return None
    plan = sc.plan
    p16, a16 = kinds(BF16_WIDTHS)
    d_p = [np.where(sc.fp8, x16 - x, 0.0) for x16, x in zip(p16, plain)]
    d_a = [np.where(sc.fp8, (y16 - y) - (x16 - x), 0.0) for x16, x, y16, y in zip(p16, plain, a16, again)]
    counts = stage_end_kinds(sc.ll, plan, n0, n1)
    cap = sc.settings.recompute_layers  # a job setting, not searched
    reruns = counts if cap is None else stage_end_kinds(sc.ll, plan, n0, n1, rerun=True, cap=cap)
    full = plan.recompute == RC_FULL
    keep = (np.where(plan.pp == 1, 0.0, 1.0), np.where(plan.pp > 2, 1.0, 0.0), np.float64(1.0))  # first, middle, last
    slot = {"first": 0, "mid": 1, "last": 2}
    return {st: keep[slot[st]] * (weighted(counts[slot[st]], d_p) + np.where(full, weighted(reruns[slot[st]], d_a), 0.0))
            for st in CRITICAL_STAGES}


def _tp_groups(sc: StepCtx, coll: Collectives, tb=None) -> tuple:
    """What the layers' TP pairs (tp_pair_ways), the re-gathers (regather_seconds) and the head's collectives
    (head_tp_seconds) read: (the TP group's stride, the micro-batch's tokens T on the rank's CP shard, the SP-only
    collectives' group (1 without SP), the no-SP all-reduces' group (1 under SP), SP on), each distinct tuple of the
    five among the batch's plans once (comm.distinct), and `back`, which lays a value computed on those tuples back on
    every plan. A collective's price is elementwise in (size, group, stride) (Collectives) and the sizes are products
    of T, so each plan gets the bits it got priced on its own, without distinct's sort over the batch in every call.
    Once per context and pricing (sc.memo); every plan as it is under per-plan bandwidth knobs (coll.bw_arrays),
    per-plan collective widths (tb, tp_bytes [33]: several precisions or recipes in one batch) or below
    comm.UNIQUE_MIN plans (as _mla_tp_groups)."""
    plan = sc.plan
    sp_on = plan.sp > 0
    return _distinct_tuples(sc, coll, tb, "tp_groups", lambda: (
        coll.strides["tp"], sc.ctx.T, np.where(sp_on, plan.tp, 1), np.where(sp_on, 1, plan.tp), sp_on), True)


def _distinct_tuples(sc: StepCtx, coll: Collectives, tb, key: str, make_args, spread_scalars: bool) -> tuple:
    """_tp_groups' and _mla_tp_groups' one logic: the per-plan tuple make_args() gives, reduced to its distinct
    tuples among the batch's plans (comm.distinct) with `back` appended, which lays a value priced on those tuples
    back on every plan (a 0-d value spread to the batch's shape where spread_scalars, else kept 0-d); every plan as it
    is under per-plan bandwidth knobs (coll.bw_arrays), per-plan collective widths (tb) or below comm.UNIQUE_MIN
    plans. Once per context and pricing (sc.memo[key], "_whole" appended under per-plan widths)."""
    whole = tb is not None and any(np.ndim(v) > 0 for v in tb.values())  # widths per plan: no reduction
    key = key + "_whole" if whole else key
    hit = sc.memo.get(key)
    if hit is not None and hit[0] is coll:
        return hit[1]
    args = make_args()
    d = None if (whole or coll.bw_arrays) else comm.distinct(*args)
    if d is None or d.index is None:
        out = args + (lambda x: x,)
    elif spread_scalars:
        shape = d.shape
        out = d.values + (lambda x: np.broadcast_to(x, shape).copy() if np.ndim(x) == 0 else d.expand(x),)
    else:
        out = d.values + (lambda x: x if np.ndim(x) == 0 else d.expand(x),)
    sc.memo[key] = (coll, out)
    return out


def _mla_tp_groups(sc: StepCtx, coll: Collectives, tb=None) -> tuple:
    """What both MLA TP pricings ([30], [32]) read: the TP group's stride, one bf16 column's bytes over the
    micro-batch's T tokens, the SP-only collectives' group (1, nothing, without SP) and the no-SP all-reduces' group
    (1 under SP), each distinct tuple of the four among the batch's plans once (comm.distinct), and `back`, which lays
    a value priced on those tuples back on every plan: a collective's price is elementwise in (size, group, stride)
    (Collectives), so each plan gets its own value, where [30] and [32] priced their up to 13 collectives a kind over
    every plan (distinct's sort over the batch in each call). Once per context and pricing (sc.memo); every plan as
    it is under per-plan bandwidth knobs (coll.bw_arrays: per plan, not per tuple), under per-plan collective widths
    (tb, tp_bytes [33]: a batch of plans of several precisions or recipes; its widths are per plan too) or below
    comm.UNIQUE_MIN plans."""
    plan = sc.plan
    sp_on = plan.sp > 0
    return _distinct_tuples(sc, coll, tb, "mla_tp_groups", lambda: (
        coll.strides["tp"], sc.ctx.T * ACT_BYTES, np.where(sp_on, plan.tp, 1), np.where(sp_on, 1, plan.tp)), False)


def mla_tp_collectives(sc: StepCtx, coll: Collectives, mla, tb=None) -> tuple:
    """(forward, backward, selective re-run) seconds per micro-batch of one MLA layer's TP collectives where the
    stack gathers the latents [32] (Megatron-Core's MLASelfAttention; with mla.down_fused the collectives
    FusedMLASelfAttention shares with it, its own in mla_fused_gathers [30]), over the TP group, T = the
    micro-batch's tokens on the rank's CP shard, bf16, r_q read as h without a q latent (linear_q_proj):
      forward:  SP: AG(T r_q) + AG(T r_kv) + AG(T d_rope) [not fused] + RS(T h);  no SP: AR(T h)
      backward: SP: RS(T r_q) + RS(T r_kv) + RS(T d_rope) [not fused] + AG(T h);  no SP: AR(T r_q) + AR(T r_kv)
      re-run:   the up projections' SP gathers the selective policy re-runs (recompute_projections q: AG(T r_q);
                k or v: AG(T r_kv)); 0 without SP
    0 at tp 1. tb: each TP linear collective's width over bf16 (tp_bytes [33]; None: bf16): the up projections' input
    gathers (Transformer Engine column-parallel linears) at input_all_gather, linear_proj's output reduce-scatter and
    output-gradient gather at output_reduce_scatter and grad_output_all_gather, the up projections' input-gradient
    reduce-scatters at grad_input_reduce_scatter; the rotary key's (Megatron's own mappings) and the all-reduces bf16."""
    s, col, tp_sp, tp_ar, back = _mla_tp_groups(sc, coll, tb)
    w = tb or BF16_WIDTHS
    am = amax_reduce(coll, w, tp_sp, s)  # before each quantized gather
    q_in = col * float(mla.h if mla.q_lora_rank is None else mla.q_lora_rank)  # the q up projection's input
    kv_in = col * float(mla.kv_lora_rank)  # the kv up projection's input, the kv latent
    h = col * mla.h
    ag_in, rs_in = w["input_all_gather"], w["grad_input_reduce_scatter"]
    AG, RS, AR = comm.ALL_GATHER, comm.REDUCE_SCATTER, comm.ALL_REDUCE
    calls = [(AG, q_in * ag_in, tp_sp, s), (AG, kv_in * ag_in, tp_sp, s), (RS, h * w["output_reduce_scatter"], tp_sp, s),
             (AR, h, tp_ar, s), (RS, q_in * rs_in, tp_sp, s), (RS, kv_in * rs_in, tp_sp, s),
             (AG, h * w["grad_output_all_gather"], tp_sp, s), (AR, q_in, tp_ar, s), (AR, kv_in, tp_ar, s)]
    if not mla.down_fused:  # the unfused layer's rotary key, gathered along the sequence (a job setting)
        rope = col * float(mla.qk_rope_head_dim)
        calls += [(AG, rope, tp_sp, s), (RS, rope, tp_sp, s)]
    t = coll.batch(calls)  # the layer's collectives, one pricing an op (Collectives.batch: the same values)
    q_ag, kv_ag = t[0] + am, t[1] + am
    fwd = q_ag + kv_ag + t[2] + t[3]
    bwd = t[4] + t[5] + t[6] + am + t[7] + t[8]
    if not mla.down_fused:
        fwd = fwd + t[9]
        bwd = bwd + t[10]
    rerun = sc.stack.selective.recompute_projections  # the job's selective policy (a stack / job setting)
    again = (q_ag if "q" in rerun else 0.0) + (kv_ag if ("k" in rerun or "v" in rerun) else 0.0)
    return back(fwd), back(bwd), back(np.asarray(again, dtype=np.float64))


def mla_fused_gathers(sc: StepCtx, coll: Collectives, mla, tb=None) -> tuple:
    """(forward, backward) seconds per micro-batch of one MLA layer's fused down projection's own TP collectives [30]
    (layers/attention.py MLA.down_fused), over the TP group, T = the micro-batch's tokens on the rank's CP shard:
      forward:  SP: AG(T h) + AG(T r_q) + AG(T (r_kv + d_rope));  no SP: AG(T r_q) + AG(T (r_kv + d_rope))
      backward: SP: RS(T h) + AG(T r_q) + AG(T r_kv);             no SP: AR(T h)
    (each size the gathered tensor's; bf16 but for linear_qkv_down_proj's, a Transformer Engine LayerNormLinear: its
    input gather at tb's input_all_gather width and its input gradient's reduce-scatter at grad_input_reduce_scatter,
    tp_bytes [33]; tb None: bf16); 0 at tp 1."""
    s, col, tp_sp, tp_ar, back = _mla_tp_groups(sc, coll, tb)
    w = tb or BF16_WIDTHS
    tp = tp_sp * tp_ar  # the TP group, with or without SP (the other group is 1)
    rq, rkv, rope = float(mla.q_lora_rank), float(mla.kv_lora_rank), float(mla.qk_rope_head_dim)
    h = col * mla.h
    AG = comm.ALL_GATHER
    t = coll.batch([(AG, col * rq, tp, s), (AG, col * (rkv + rope), tp, s), (AG, h * w["input_all_gather"], tp_sp, s),
                    (comm.REDUCE_SCATTER, h * w["grad_input_reduce_scatter"], tp_sp, s), (AG, col * rq, tp_sp, s),
                    (AG, col * rkv, tp_sp, s), (comm.ALL_REDUCE, h, tp_ar, s)])  # one pricing an op (the same values)
    lat = t[0] + t[1]
    fwd = t[2] + amax_reduce(coll, w, tp_sp, s) + lat
    bwd = t[3] + t[4] + t[5] + t[6]
    return back(fwd), back(bwd)


def gating_gather(sc: StepCtx, coll: Collectives, block) -> np.ndarray:
    """One way of DeepSpeed-MoE's TP all-gather per micro-batch where the stack gates densely (stack moe_gating,
    layers/moe.py [18]) and tp > 1: MOELayer.forward splits the capacity over the TP ranks before the dispatch
    all-to-all (drop_tokens) and all-gathers the combine all-to-all's output back to the whole [E, C, h] on every TP
    rank (gather_tokens, microsoft/DeepSpeed @38327e07 sharded_moe.py l. 659-664; mappings.py _gather_tokens:
    all_gather_into_tensor over the TP group); backward, drop_tokens' gradient is the same all-gather (_DropTokens
    .backward). 2 E C h bytes gathered (bf16), synchronous. 0 on every other stack and at tp 1."""
    gating = sc.stack.moe_gating
    if gating is None:  # a stack setting
        return np.zeros(np.shape(sc.plan.tp))
    ec = block.num_experts * block.gating_capacity(sc.ctx, sc.settings.moe_capacity_factor, sc.settings.moe_min_capacity)
    return coll(comm.ALL_GATHER, ACT_BYTES * ec * block.h, sc.plan.tp, coll.strides["tp"])


def etp_pair(sc: StepCtx, coll: Collectives, block) -> np.ndarray:
    """One way of an MoE MLP's expert-TP collectives per micro-batch (planner/moe.py [10]): the
    all-gather of the dispatched rows over the etp ranks after the dispatch all-to-all and the
    reduce-scatter before the combine (the backward runs the reverse pair), at the expert-TP
    group's place in the folded grid (moe.expert_strides); without SP, with etp = tp, the TP
    all-reduce of the replicated rows (T top_k c h x 2 B). Nothing with etp = 1, nor under
    DeepEP's and Hybrid-EP's kernels (dispatch.FLEX): Megatron's flex dispatcher sends each token
    to all etp ranks of its experts and its combine sums their partial outputs, priced in the
    dispatch (step.ep_comm over the etp x ep group; planner/dispatch.py "Expert TP")."""
    plan, ctx = sc.plan, sc.ctx
    codes, _ = dispatcher_rows(sc.settings, plan)
    flex = np.isin(codes, dispatch.FLEX)
    if np.all(flex):
        return np.zeros(np.shape(plan.tp))
    etp = moe.etp_of(plan)
    s_etp = moe.expert_strides(plan, coll.strides, ("etp",))["etp"]
    size = moe.etp_bytes(block, ctx)
    rs_ag = coll(comm.REDUCE_SCATTER, size, etp, s_etp) + coll(comm.ALL_GATHER, size, etp, s_etp)
    ar = coll(comm.ALL_REDUCE, size, np.where(plan.sp > 0, 1, etp), s_etp)
    out = np.where(ctx.gather > 1.0, rs_ag, ar)
    return out if np.ndim(flex) == 0 else np.where(flex, 0.0, out)


def ep_comm(sc: StepCtx, coll: Collectives, lt: LayerTimes) -> tuple[dict, dict]:
    """MoE dispatch and combine per micro-batch of each stage (CRITICAL_STAGES -> seconds, stage_comm: each with its
    own layers and windows, stage_windows; step_time takes the critical stage's) (planner/moe.py, the
    dispatcher's cost: planner/dispatch.py): per MoE layer a dispatch and a combine forward and
    their gradients backward (the forward ones again per recomputed layer) over the EP group;
    with ep_comm_overlap, where it applies, the combined 1F1B schedule hides a layer's forward
    ones behind the partner micro-batch's backward of a layer and its backward ones behind a
    layer's forward, at the stack's exposed share; the passes that run alone keep theirs.
    Also returns the dispatch and combine seconds per micro-batch (before overlap; per stage) and the EP
    group's tier, for explain. DeepEP's and Hybrid-EP's kernels run over the etp x ep group
    (dispatch.group_size), placed as the folded grid's tp_ep group.
    Selective recompute under a model code whose save list leaves the all-to-all out
    (Settings.sac_reruns_exchange, plan.sac_reruns_exchange: torchtitan's qwen3), or with torchtitan 0.3's eager
    exchange (memory.exchange_reruns [xk]), re-runs every
    MoE layer's forward dispatch and combine in the backward's recompute: `again` = n more layer forwards of transfers, part
    of ep_comm (and of explain's dispatch / combine seconds, and info's sac_rerun). They run in
    the backward pass, exposed as the forward's without ep_comm_overlap; with it they are priced
    exposed too (the combined schedule pairs the backward's own transfers, not the recompute's:
    an upper bound; torchtitan runs no EP overlap)."""
    plan, st = sc.plan, sc.settings
    codes, epo = dispatcher_rows(st, plan)
    kinds = np.unique(codes)
    fwd, bwd, disp, comb, tier, domains, probs, counts, shf, shb = _ep_transfers(sc, coll, int(kinds[0]), lt)
    if len(kinds) > 1:  # fit's dispatcher search: each plan's dispatcher's figures (each priced per plan)
        for k in kinds[1:]:
            f2, b2, d2, c2, t2, dom2, p2, n2, sf2, sb2 = _ep_transfers(sc, coll, int(k), lt)
            on = codes == k
            fwd, bwd, disp, comb, probs, counts, shf, shb = (
                [np.where(on, y, x) for x, y in zip(a, b)]
                for a, b in ((fwd, f2), (bwd, b2), (disp, d2), (comb, c2), (probs, p2), (counts, n2), (shf, sf2),
                             (shb, sb2)))
            tier, domains = np.where(on, t2, tier), np.where(on, dom2, domains)
    # the layers whose forward transfers selective recompute re-runs (the model code's save list)
    # (memory.py [xk]), and a policy that checkpoints the whole MoE block (recompute_modules moe: the dispatch and
    # combine are inside moe_layer.py custom_forward, planner/recompute_modules.py)
    block = "moe" in sc.stack.selective.recompute_blocks  # the stack's policy
    reruns = (plan.recompute == RC_SELECTIVE) & (exchange_reruns(st, plan) | block)
    dual = dualpipe_pairs(plan)
    overlap = bool(np.any(epo) or dual.any())
    if overlap:
        # DualPipe pairs a forward chunk with a backward chunk of the other direction and hides each
        # one's all-to-alls behind the other's compute (pipeline.py [8]), as the combined 1F1B does
        alone = np.where(dual, dualpipe_alone_share(plan.pp, sc.m), moe.alone_pass_share(plan, sc.m))
        on = dual | (epo & moe.ep_overlap_applies(plan))

    disp_half, comb_half = [d / 2.0 for d in disp], [c / 2.0 for c in comb]  # a forward's share, every stage's
    probs_half = [p_ / 2.0 for p_ in probs]

    def stage(s_):  # stage s_'s MoE layers (n, rc recomputed): (seconds per micro-batch, explain's figures)
        n, rc = sc.nf(s_), sc.rc[s_]
        again = np.where(reruns, n, 0.0)
        twice = rc + again
        half_f, half_b = sc.mean(s_, fwd), sc.mean(s_, bwd)  # a mean layer's forward (backward) transfers
        # the alltoall dispatcher's token-count all-gather (dispatch.py [12]): every layer forward and re-run, exposed
        pre = (n + twice) * sc.mean(s_, counts)
        info = {"dispatch": n * sc.mean(s_, disp) + twice * sc.mean(s_, disp_half),
                "combine": n * sc.mean(s_, comb) + twice * sc.mean(s_, comb_half),
                "sac_rerun": again * half_f,
                # beside the tokens' dispatch and combine (in half_f / half_b): the probabilities' all-to-alls [12]
                "probs": n * sc.mean(s_, probs) + twice * sc.mean(s_, probs_half),
                "counts": pre,
                # [38] of ep_mb, the shared experts' side-stream TP collectives' exposed remainder (0 without the overlap)
                "shared_tp": n * (sc.mean(s_, shf) + sc.mean(s_, shb)) + twice * sc.mean(s_, shf)}
        ep_mb = n * (half_f + half_b) + twice * half_f + pre
        if not overlap:
            return ep_mb, info
        # the windows: the stage's own mean layer (stage_windows)
        w_f, w_b = stage_windows(sc, lt, s_)
        paired = _hide(half_f, w_b, sc.x) + _hide(half_b, w_f, sc.x)
        ep_overlapped = n * (alone * (half_f + half_b) + (1.0 - alone) * paired) + again * half_f + pre
        return np.where(on, ep_overlapped, ep_mb), info

    per = {s_: stage(s_) for s_ in comm_stages(sc)}
    info = {k: stage_comm(sc, {s_: x[1][k] for s_, x in per.items()})
            for k in ("dispatch", "combine", "sac_rerun", "probs", "counts", "shared_tp")}
    return stage_comm(sc, {s_: x[0] for s_, x in per.items()}), dict(info, tier=tier, ep_domains=domains)


def _ep_transfers(sc: StepCtx, coll: Collectives, kind: int, lt: LayerTimes) -> tuple:
    """ep_comm's per-layer-kind lists (forward, backward, dispatch, combine seconds per micro-batch) and
    the group's (tier, domains) of every plan under dispatcher `kind`; with the job's --moe-shared-expert-overlap
    on `kind` ([38], shared_overlap_segments) the forward and backward lists hold each segment's exposed seconds (the
    all-to-all beside the shared experts' side-stream GEMMs, and their TP collectives' remainder) and the last two
    lists that remainder's forward and backward share.""" 
    plan, ctx, st = sc.plan, sc.ctx, sc.settings
    etp = moe.etp_of(plan)
    group, link = dispatch.group_link(kind, plan, coll.strides, coll.cpar, coll.job)
    stride = moe.ep_stride(plan, coll.strides)
    fp8 = fp8_dispatch(st, plan)  # the job's, else the stack's fp8 recipe's
    # dispatch.py [12], where the stack's alltoall dispatcher runs them (a stack setting): the probabilities' all-to-all
    # (their dtype, the router's logits') and the tp_ep group that all-gathers the token counts
    ex = sc.stack.moe_alltoall_exchanges
    probs_bytes = ROUTER_DTYPE_BYTES[st.moe_router_dtype] if ex is not None and ex.probs_all_to_all else None
    tp_ep_stride = moe.expert_strides(plan, coll.strides, ("tp_ep",))["tp_ep"]
    tp_ep = (etp * plan.ep, tp_ep_stride) if ex is not None and ex.counts == "tp_ep_all_gather" else None
    # a count's bytes, the stack's counts_dtype (Megatron's int64 sums; torchtitan main's float32 histc, 0.3's int64)
    c_bytes = dispatch.COUNT_DTYPE_BYTES[ex.counts_dtype] if ex is not None and ex.counts is not None else None
    # torchtitan's all-to-all of each rank's counts over the EP group (stack counts ep_all_to_all) [12]
    counts_a2a = c_bytes if ex is not None and ex.counts == "ep_all_to_all" else None
    # the allgather dispatcher's routing map and probabilities gathers and its combine's dtype (a stack setting) [13]
    gx = sc.stack.moe_allgather_exchanges
    gather = (dispatch.GatherExchanges(etp * plan.ep, tp_ep_stride, ROUTER_DTYPE_BYTES[st.moe_router_dtype],
                                       gx.routing_map_gather, gx.probs_gather, gx.combine_in_probs_dtype)
              if gx is not None else None)
    fwd, bwd, disp, comb, probs, counts, shf, shb = [], [], [], [], [], [], [], []
    for i, k in enumerate(sc.ll.kinds):
        if not k.has_experts:
            for lst in (fwd, bwd, disp, comb, probs, counts, shf, shb):
                lst.append(0.0)
            continue
        tr = dispatch.transfers(kind, k.mlp, ctx, coll, plan.ep, stride, link, coll.cpar,
                                fp8=fp8, route_nodes=st.moe_route_nodes, etp=etp, probs_bytes=probs_bytes,
                                counts_group=tp_ep, counts_a2a_bytes=counts_a2a, counts_bytes=c_bytes, gather=gather)
        f_k, b_k = np.where(group > 1, tr.fwd, 0.0), np.where(group > 1, tr.bwd, 0.0)
        sf = sb = np.float64(0.0)
        if shared_overlap_kind(sc, k, kind):  # [38] a job setting, the dispatcher, the model's kind
            f_k, b_k, sf, sb = shared_overlap_segments(sc, coll, lt, i, kind, tr, group)
        fwd.append(f_k)
        bwd.append(b_k)
        shf.append(sf)
        shb.append(sb)
        disp.append(np.where(group > 1, tr.dispatch_fwd + tr.dispatch_bwd, 0.0))
        comb.append(np.where(group > 1, tr.combine_fwd + tr.combine_bwd, 0.0))
        probs.append(np.where(group > 1, tr.probs_fwd + tr.probs_bwd, 0.0))
        counts.append(np.asarray(tr.counts_fwd, dtype=np.float64))  # its own group (tp_ep; 0 where that is 1); the
        # allgather dispatcher's routing map gather rides here (dispatch.py [13]: forward, exposed)
    return fwd, bwd, disp, comb, link.link, link.domains, probs, counts, shf, shb


def shared_overlap_on(sc: StepCtx):
    """[38] Per plan, whether the shared experts run overlapped: the job's moe_shared_expert_overlap (a job setting) on
    the plan's dispatcher where the stack runs it (_overlap_codes: transformer_config.py @d98e8a64 l. 1820-1826; fit's
    dispatcher search prices the other rows without it); False (a scalar) where no plan does."""
    if not sc.settings.moe_shared_expert_overlap:
        return np.False_
    codes, _ = dispatcher_rows(sc.settings, sc.plan)
    return np.isin(codes, _overlap_codes(sc))


def _overlap_codes(sc: StepCtx) -> tuple:
    """[38] The dispatcher codes the stack runs the shared-expert overlap with (stack
    moe_shared_expert_overlap_dispatchers: megatron's alltoall, deepep, hybridep; megatron-bridge's alltoall)."""
    return tuple(dispatch.CODES[n] for n in (sc.stack.moe_shared_expert_overlap_dispatchers or ()))


def shared_overlap_kind(sc: StepCtx, kind, code: int) -> bool:
    """[38] Whether layer `kind` under dispatcher `code` runs its shared experts overlapped: the job's
    moe_shared_expert_overlap, a dispatcher the stack runs it with (_overlap_codes) and shared experts on a stack whose
    shared experts are Megatron-Core's SharedExpertMLP (shared_experts_pair; a job setting, a dispatcher code, a model's
    kind)."""
    return bool(sc.settings.moe_shared_expert_overlap and code in _overlap_codes(sc) and shared_experts_pair(sc, kind))


def shared_overlap_segments(sc: StepCtx, coll: Collectives, lt: LayerTimes, i: int, code: int, tr, group) -> tuple:
    """[38] One MoE layer's (kind i) four segments under --moe-shared-expert-overlap, seconds per micro-batch: (forward,
    backward) exposed seconds of the dispatcher's transfers with the shared experts beside them (the tokens' all-to-alls
    and their TP collectives' remainder, with the probabilities' all-to-alls, tr.probs_*, unhidden), and of those the
    TP remainder (forward, backward). Each segment runs an all-to-all A on the compute stream beside the side stream's
    GEMMs G (the shared fc1 or fc2, forward 1x, backward 2x its forward seconds [1]) and a TP collective C before or
    after them; the segment ends at max(A, C + G), so it exposes max(A - G, C) beyond the GEMMs' compute: the
    all-to-all's _hide(A, G, x) and C's remainder max(C - that, 0). Forward: dispatch D_f beside the gather C and fc1;
    combine C_f beside fc2 and the reduce-scatter (alltoall; the flex dispatcher runs fc2 after its combine returns:
    C_f and the reduce-scatter exposed whole). Backward: the combine's gradient beside the reduce-scatter's backward
    all-gather and fc2's backward; the dispatch's gradient beside fc1's backward and the gather's backward
    reduce-scatter. The collectives bf16 over the TP group (Megatron's own mappings); without SP the forward gather
    is an identity (copy_to_tensor_model_parallel_region) and the reduce-scatter an all-reduce (reduce_from_...)."""
    plan, ctx = sc.plan, sc.ctx
    s = coll.strides["tp"]
    msg = ctx.T * sc.settings.model.hidden_size * ACT_BYTES
    sp_on = plan.sp > 0
    tp_sp, tp_ar = np.where(sp_on, plan.tp, 1), np.where(sp_on, 1, plan.tp)  # group 1: no such collective, 0 s
    ag = coll(comm.ALL_GATHER, msg, tp_sp, s)  # SP gather forward; the reduce-scatter's backward
    red = coll(comm.REDUCE_SCATTER, msg, tp_sp, s) + coll(comm.ALL_REDUCE, msg, tp_ar, s)  # SP RS / all-reduce
    g1, g2 = lt.shared_gemms[i]["shared_up"], lt.shared_gemms[i]["shared_down"]  # forward seconds, side stream
    on = group > 1
    d_f, c_f = np.where(on, tr.dispatch_fwd, 0.0), np.where(on, tr.combine_fwd, 0.0)
    d_b, c_b = np.where(on, tr.dispatch_bwd, 0.0), np.where(on, tr.combine_bwd, 0.0)  # combine's, dispatch's gradient
    p_f, p_b = np.where(on, tr.probs_fwd, 0.0), np.where(on, tr.probs_bwd, 0.0)

    def seg(a2a, gemm, c):  # (the all-to-all's exposed seconds, the collective's remainder)
        e = _hide(a2a, gemm, sc.x)
        return e, np.maximum(c - e, 0.0)
    e1, t1 = seg(d_f, g1, ag)  # dispatch: gather, then fc1 (token_dispatch, l. 697-717)
    if code == dispatch.ALLTOALL:  # the dispatcher code (a Python int, one per _ep_transfers call)
        e2, t2 = seg(c_f, g2, red)  # combine: fc2, then the reduce-scatter (token_combine l. 858-874)
    else:  # flex: fc2 and the reduce-scatter in combine_postprocess, after the combine (l. 2029-2051)
        e2, t2 = c_f, red
    e3, t3 = seg(d_b, 2.0 * g2, ag)  # the combine's gradient beside the all-gather and fc2's backward
    e4, t4 = seg(c_b, 2.0 * g1, red)  # the dispatch's gradient beside fc1's backward and the reduce-scatter
    return e1 + e2 + t1 + t2 + p_f, e3 + e4 + t3 + t4 + p_b, t1 + t2, t3 + t4


def cp_comm(sc: StepCtx, coll: Collectives, lt: LayerTimes) -> tuple[dict, dict, dict | None]:
    """(exposed, total, scan) CP traffic per micro-batch of each stage (CRITICAL_STAGES -> seconds, stage_comm: each
    with its own layers; step_time takes the critical stage's); scan: the part of both
    that the state-space and linear-attention layers' exchanges are (None where the model has no
    such layer), so that explain can tell it from the attention layers' K/V ring.

    Ring attention (a mixer with cp_overlaps_core, [4]) as the stack runs it (cp_ring_comm);
    a recomputed layer's forward, and an attention core the stack's selective policy re-runs,
    exchange its K/V again. The all-to-alls of Megatron-Core's state-space and
    linear-attention CP (layers/mamba.py, layers/linear_attention.py) and the state passing
    of a scan split over ranks are blocking: the scan waits for its inputs, so they are
    exposed."""
    plan, ctx = sc.plan, sc.ctx
    per = []  # per kind: (forward exposed, forward total, a layer's exposed, a layer's total, scan) or a blocking t
    for i, kind in enumerate(sc.ll.kinds):
        mixer = kind.mixer
        if mixer.cp_overlaps_core:
            (f_exp, f_tot), (b_exp, b_tot) = cp_ring_comm(sc, coll, lt, i, cp_ring(sc, mixer))
            per.append((f_exp, f_tot, f_exp + b_exp, f_tot + b_tot))
            continue
        t = np.float64(0.0)
        for op, size, count in mixer.cp_collectives(ctx):
            t = t + count * coll(BLOCK_OPS[op], size, plan.cp, coll.strides["cp"])
        per.append(t)
    has_scan = any(not kind.mixer.cp_overlaps_core for kind in sc.ll.kinds)  # a model property

    def stage(st):  # stage st's layers, each kind's exchange: (exposed, total, scan)
        n = sc.nf(st)
        exposed, total, scan = [], [], []
        for kind, x in zip(sc.ll.kinds, per):
            if kind.mixer.cp_overlaps_core:
                f_exp, f_tot, exp_, tot_ = x
                again = _cores_run_twice(sc, kind.mixer, st)
                exposed.append(n * exp_ + again * f_exp)
                total.append(n * tot_ + again * f_tot)
                scan.append(np.float64(0.0))
                continue
            exposed.append(n * x)
            total.append(n * x)
            scan.append(n * x)
        return sc.mean(st, exposed), sc.mean(st, total), (sc.mean(st, scan) if has_scan else None)

    out = {st: stage(st) for st in comm_stages(sc)}
    exposed, total = (stage_comm(sc, {st: x[j] for st, x in out.items()}) for j in (0, 1))
    return exposed, total, (stage_comm(sc, {st: x[2] for st, x in out.items()}) if has_scan else None)


def cp_compute(sc: StepCtx, lt: LayerTimes, crit) -> np.ndarray:
    """Seconds per micro-batch the critical stage's compute (crit: critical_stage's) spends on context parallelism's
    own work (informational; it is inside the compute term): the merges and accumulations
    (cp_pass_times) and the per-step kernels' lower rate (cp_kernel_factor), forward and
    backward, and again for every forward that runs twice (full recompute; an attention core
    the stack's selective policy re-runs), over the layers that stage holds (by_stage)."""
    def one(st):
        n = sc.n[st]
        return sc.mean(st, [n * (lt.cp_fwd[i] + lt.cp_bwd[i]) + _cores_run_twice(sc, kind.mixer, st) * lt.cp_fwd[i]
                            for i, kind in enumerate(sc.ll.kinds)])
    return by_stage(sc, crit, one)


def by_stage(sc: StepCtx, crit, one) -> np.ndarray:
    """The critical stage's value of one(stage) (crit indexes CRITICAL_STAGES; DualPipe's end-rank slot the pair's
    mean, stage_comm): the informational breakdowns inside the compute term (cp_compute, eager_core_time,
    mamba_scan_time, gating_einsum_time) counted over the layers of the stage whose compute the step takes."""
    return pick(crit, stage_comm(sc, {st: one(st) for st in CRITICAL_STAGES}))


def _core_rerun(settings: Settings, sel) -> bool:
    """Whether the selective policy re-runs the attention core: the stack's (Megatron's), or
    the run's (job field selective_recomputes_attention, memory.py [tt8])."""
    return bool(sel.recompute_attention_core or settings.selective_recomputes_attention)


def eager_core_time(sc: StepCtx, lt: LayerTimes, crit) -> dict:
    """Eager attention: seconds per step the critical stage's eager cores take (crit: critical_stage's; by_stage), each
    named term of compute.eager_core_terms (gemms, softmax, dropout; alibi where a core adds ALiBi's bias) as
    eager_core_<term>_s and their sum eager_core_s: forward and backward of every layer, and the
    forwards run twice (full recompute; the cores the selective policy re-runs). Part of compute;
    {} without eager cores."""
    kinds = [i for i, f in enumerate(lt.eager_fwd) if f is not None]
    if not kinds:
        return {}
    out = {}
    for t in dict.fromkeys(t for i in kinds for t in lt.eager_fwd[i]):  # every kind's terms (alibi: some kinds)
        def one(st, t=t):
            n = sc.n[st]
            per = [np.float64(0.0) if lt.eager_fwd[i] is None or t not in lt.eager_fwd[i].keys() else
                   lt.eager_fwd[i][t] * (1.0 + _cores_run_twice(sc, kind.mixer, st) / np.maximum(n, 1.0))
                   + lt.eager_bwd[i][t] for i, kind in enumerate(sc.ll.kinds)]
            return n * sc.mean(st, per)
        out[f"eager_core_{t}_s"] = sc.m * by_stage(sc, crit, one)
    out["eager_core_s"] = sum(out.values(), np.float64(0.0))
    return out


def gating_einsum_time(sc: StepCtx, lt: LayerTimes, crit) -> dict:
    """DeepSpeed-MoE's dispatch and combine einsums [24]: seconds per step the critical stage's take (crit:
    critical_stage's; by_stage), forward (twice where the layer is fully recomputed) and backward, as
    moe_gating_einsum_s. Part of moe_permute; {} on a stack without dense gating (stack moe_gating) or a model
    without MoE layers."""
    if sc.stack.moe_gating is None or not sc.ll.has_experts:  # a stack setting, a model property
        return {}
    per = [f + b for f, b in zip(lt.gate_gemm_fwd, lt.gate_gemm_bwd)]
    return {"moe_gating_einsum_s": sc.m * by_stage(
        sc, crit, lambda st: sc.n[st] * sc.mean(st, per) + sc.rc[st] * sc.mean(st, lt.gate_gemm_fwd))}


def mamba_scan_time(sc: StepCtx, lt: LayerTimes, crit) -> dict:
    """Mamba's selective scans (scan_core_times): seconds per step the critical stage's scans take (crit:
    critical_stage's; by_stage), forward (twice where the layer is fully recomputed) and backward, as mamba_scan_s.
    Part of compute; {} without Mamba layers."""
    scans = [hasattr(kind.mixer, "scan_times") for kind in sc.ll.kinds]
    if not any(scans):
        return {}

    def one(st):
        n = sc.n[st]
        per = [lt.core_fwd[i] * (1.0 + _cores_run_twice(sc, kind.mixer, st) / np.maximum(n, 1.0)) + lt.core_bwd[i]
               if scans[i] else np.float64(0.0) for i, kind in enumerate(sc.ll.kinds)]
        return n * sc.mean(st, per)
    return {"mamba_scan_s": sc.m * by_stage(sc, crit, one)}


def _cores_run_twice(sc: StepCtx, mixer, st: str = "mid") -> np.ndarray:
    """Stage st's layers of this mixer whose attention core runs its forward twice per
    micro-batch: the fully recomputed ones, and under selective recompute every other one
    where the policy re-runs the core (_core_rerun) and the mixer's core is selective's."""
    n, rc = sc.nf(st), sc.rc[st]
    sel_core = (sc.plan.recompute == RC_SELECTIVE) & (_core_rerun(sc.settings, sc.stack.selective)
                                                      and mixer.selective_core)
    return rc + np.where(sel_core, n - rc, 0.0)


def _ring_sends(coll: Collectives, kv, dkv, ring_cp, stride) -> tuple:
    """cp_ring_comm's three sends (the local K/V, the dK/dV alone, both in one buffer) over the ring's ranks, priced in
    one call once per distinct (kv, dkv, ring ranks, stride) of the batch's plans (comm.distinct) and laid back on
    every plan: a send's price is elementwise (Collectives), so each plan gets its own, where the call's distinct
    sorted the three sends of every plan. Every plan as it is under per-plan bandwidth knobs (coll.bw_arrays) or below
    comm.UNIQUE_MIN plans."""
    d = None if coll.bw_arrays else comm.distinct(kv, dkv, ring_cp, stride)
    if d is not None and d.index is not None:
        kv, dkv, ring_cp, stride = d.values
    sizes = np.broadcast_arrays(kv, dkv, kv + dkv, ring_cp, stride)
    out = coll(comm.SEND_RECV, np.stack(sizes[:3]), np.stack([sizes[3]] * 3), np.stack([sizes[4]] * 3))
    return tuple(out) if d is None or d.index is None else tuple(d.expand(t) for t in out)


def cp_ring_comm(sc: StepCtx, coll: Collectives, lt: LayerTimes, i: int, ring):
    """((forward exposed, total), (backward exposed, total)) seconds of one ring-attention
    layer's K/V exchange per micro-batch, as the stack runs it (schema.ContextParallelSpec).
    Each pass runs `sends` + 1 kernels of equal FLOPs (the core's time, lt.core_*, in as many
    steps); a transfer beside a step's kernel hides behind it as far as it lasts, at the
    stack's exposed share of what overlaps (SMs and HBM taken by the copy) [4]:
      forward  ring: a send of the local K/V beside each step's kernel but the last (sends);
               allgather: one all-gather of every rank's K/V beside the first step's kernel;
      backward with_kv (Transformer Engine): the first step's send carries K/V, the middle
               ones K/V and the dK/dV partial sums in one buffer, the last dK/dV alone, each
               beside its step's kernel; after_step (torch): the K/V as forward (ring or
               all-gather), and a dK/dV send after every step's kernel beside the next step's,
               the last one exposed.
      kernel one (Llama 3's all-gather CP, Transformer Engine's all_gather): forward one all-gather
               of every rank's K/V before the single kernel, backward the all-gather again and a
               reduce-scatter of the gathered K/V's gradients after it: nothing beside them, all
               exposed; separate_kv: K and V each in a collective of its own (half the bytes).
               a2a (Transformer Engine's, Ulysses; cp_a2a_comm): all-to-alls, all exposed.
    dK/dV move at the stack's dkv_bytes per element (fp32 in torch's ring). Under fp8 attention on
    Transformer Engine's ring [17]: the K/V at the recipe's cp_ring_kv bytes (forward and backward),
    and the backward sends the K/V alone beside each step's kernel but the last, whose kernel has the
    dK/dV all-to-all (ring ranks x local K/V at cp_ring_dkv bytes) beside it."""
    plan, x = sc.plan, sc.x
    spec = cp_spec(sc)
    a2a, ring_cp = cp_split(sc)
    stride = coll.strides["cp"] * a2a  # a2a+p2p: the ring steps over the all-to-all groups
    n = ring["sends"]
    steps = n + 1.0
    wf, wb = lt.core_fwd[i] / steps, lt.core_bwd[i] / steps
    kv = ring["kv_bytes"]
    dkv = ring["kv_el"] * spec.dkv_bytes
    # fp8 attention (a job setting) on Transformer Engine's P2P ring (per-step kernels, dK/dV with the K/V):
    # the K/V at the recipe's bytes, forward and backward, and the backward's dK/dV in one all-to-all of a
    # (ring ranks x local K/V) buffer at the recipe's cp_ring_dkv bytes at its last step [17]
    te_fp8 = bool(sc.settings.fp8_attention) and spec.kernel == "per_step" and spec.dkv == "with_kv"
    if te_fp8:
        f8 = fp8_recipe(sc.stack, plan.f8r)
        kv = ring["kv_el"] * f8["cp_ring_kv"]

    # the sends' sizes priced in one call (one pass over the plans' distinct tuples): the local
    # K/V, the dK/dV alone, and both in one buffer
    t_kv, t_dkv, t_both = _ring_sends(coll, kv, dkv, ring_cp, stride)

    def kv_pass(method, window):  # (exposed, total) of one pass's K/V exchange
        if method == "ring":
            return n * _hide(t_kv, window, x), n * t_kv
        ag = np.where(n > 0, coll(comm.ALL_GATHER, kv * plan.cp, plan.cp, stride), 0.0)  # the gathered buffer
        return _hide(ag, window, x), ag

    some = n > 0
    if spec.fwd_kv == "a2a":  # all-to-alls before and after the one kernel: exposed
        return cp_a2a_comm(sc, coll, ring, plan.cp, stride)
    if spec.kernel == "one":  # the exchange before / after the one kernel: exposed
        parts = 2.0 if spec.separate_kv else 1.0  # K and V in one collective, or each in its own
        ag = np.where(some, parts * coll(comm.ALL_GATHER, kv * plan.cp / parts, plan.cp, stride), 0.0)
        rs = np.where(some, parts * coll(comm.REDUCE_SCATTER, dkv * plan.cp / parts, plan.cp, stride), 0.0)
        return (ag, ag), (ag + rs, ag + rs)
    fwd = kv_pass(spec.fwd_kv, wf)
    if te_fp8:  # the K/V alone beside each step's kernel but the last, the dK/dV all-to-all beside the last's
        t_a2a = coll(comm.ALL_TO_ALL, ring_cp * ring["kv_el"] * f8["cp_ring_dkv"], ring_cp, stride)
        b_tot = np.where(some, n * t_kv + t_a2a, 0.0)
        b_exp = np.where(some, n * _hide(t_kv, wb, x) + _hide(t_a2a, wb, x), 0.0)
    elif spec.dkv == "with_kv":
        b_tot = np.where(some, t_kv + t_dkv + (n - 1.0) * t_both, 0.0)
        b_exp = np.where(some, _hide(t_kv, wb, x) + _hide(t_dkv, wb, x) + (n - 1.0) * _hide(t_both, wb, x), 0.0)
    if spec.dkv == "with_kv":
        if spec.hierarchical:  # a2a+p2p: the all-to-alls inside the group, before and after the ring, exposed
            (a_f, _), (a_b, _) = cp_a2a_comm(sc, coll, ring, a2a, coll.strides["cp"])
            return (fwd[0] + a_f, fwd[1] + a_f), (b_exp + a_b, b_tot + a_b)
    else:
        k_exp, k_tot = kv_pass(spec.bwd_kv, wb)
        b_tot = np.where(some, k_tot + steps * t_dkv, 0.0)
        b_exp = np.where(some, k_exp + n * _hide(t_dkv, wb, x) + t_dkv, 0.0)
    return fwd, (b_exp, b_tot)


def cp_a2a_comm(sc: StepCtx, coll: Collectives, ring, ranks, stride):
    """((forward exposed, total), (backward exposed, total)) seconds of one attention layer's
    all-to-alls per micro-batch under the a2a variant (Transformer Engine's
    AttnFuncWithCPAndQKVOA2A, Megatron --cp-comm-type a2a; planner/cp_comm_type.py [2]). Each
    rank sends its local tensor (T a d / t or T k d / t elements, bf16), cp - 1 parts of cp
    to the other ranks (comm.py all-to-all: S = the send buffer) on the CP group's tier:
      forward   Q, K and V (one all-to-all each) before the kernel, the output after it;
      backward  the output gradient before the kernel, dQ, dK and dV (dkv_bytes) after it.
    The kernel waits for every all-to-all before it (wait_stream, flash_attn_a2a_communicate)
    and the next layer's work for those after it: all exposed. a2a+p2p runs them over its
    all-to-all group (`ranks` contiguous ranks, the CP stride) around its ring. Under cp 1: 0."""
    spec = cp_spec(sc)
    q, o, kv = ring["q_el"] * ACT_BYTES, ring["o_el"] * ACT_BYTES, ring["kv_el"] * ACT_BYTES
    dkv = ring["kv_el"] * spec.dkv_bytes
    sizes = np.broadcast_arrays(q, o, kv / 2.0, dkv / 2.0, ranks, stride)
    t_q, t_o, t_k, t_dk = coll(comm.ALL_TO_ALL, np.stack(sizes[:4]), np.stack([sizes[4]] * 4), np.stack([sizes[5]] * 4))
    on = (np.asarray(sc.plan.cp) > 1) & (np.asarray(ranks) > 1)
    fwd = np.where(on, t_q + 2.0 * t_k + t_o, 0.0)
    bwd = np.where(on, t_o + t_q + 2.0 * t_dk, 0.0)
    return (fwd, fwd), (bwd, bwd)


def pp_comm(sc: StepCtx, coll: Collectives, lt: LayerTimes) -> tuple:
    """(per micro-batch, per step) seconds of the pipeline's p2p, each a dict of the stages' (CRITICAL_STAGES,
    stage_comm; step_time takes the critical stage's). Per micro-batch: a send/recv
    of T h bf16 (/t under SP) per model chunk, forward and backward, on the PP link (the end stages one fewer where
    the stack's runtime pairs each send with its neighbour's receive, Stack.pipeline_p2p_batched); blocking p2p
    waits for every send, an overlapped one (Megatron's interleaved schedule) hides behind the
    next model chunk's compute at the stack's share. Which runtime hides which schedule's is stack data with its
    sources (overlap.pp_p2p_overlapped): torch.distributed.pipelining's 1F1B, GPipe and Interleaved1F1B wait
    theirs (never: the receive issued after a pass and waited before the next, or held behind an earlier one on the
    group's one NCCL stream), DualPipe as DeepSeek's report states it (always; the open reference waits each
    chunk's exchange). Per step: pp_warmup_flush's, from the same send (the last stage's warm-up and flush sends,
    whole where this stage's steady state charged its waited share). Then, for pp_fill_drain [31]: per micro-batch
    of the bubble, max(count, 2 v) whole transfers (the fill's and drain's hops); per step, the interleaved schedule's
    wrap-around hops where its warm-up and flush are overlapped too (0 elsewhere; the same on every stage: the
    stages that wait at the wrap are stage 0 in the fill and stage p - 1 in the drain)."""
    plan, ctx = sc.plan, sc.ctx
    pp_msg = ctx.T * sc.settings.model.hidden_size * ACT_BYTES / ctx.rep_div
    part = pipe_partitioned(sc)
    tp = np.maximum(plan.tp, 1)
    pp_send = coll(comm.SEND_RECV, np.where(part, pp_msg / tp, pp_msg), plan.pp, coll.strides["pp"])
    # DeepSpeed's partitioned pipe tensors [25]: each stage's own all-gathers of the whole T h over its TP group a
    # micro-batch, waited on before the kernel that needs them (blocking, beside the sends, not among them): the
    # received input's on every stage but the first (engine.py @38327e07 l. 719-733), and on every stage but the last
    # its output's rebuild in the backward (l. 826-838) and the partitioned gradient's it receives (l. 840-851): the
    # first stage 2, a middle one 3, the last 1; activations only, the output's rebuild alone on the sending side
    # (a12aaedc _exec_recv_grads l. 914-924): 1, 2, 1. Each stage's with its own time (critical_stage adds it to that
    # stage's, as its sends), where the busiest stage's count rode on every stage's sends before (issue 22)
    ag_send = 2.0  # the sending side's (output rebuilt, partitioned gradient received)
    if not sc.stack.pipeline_send_partitioned_grads:  # the stack's runtime (not searched): activations only [25]
        whole = coll(comm.SEND_RECV, pp_msg, plan.pp, coll.strides["pp"])  # the gradient, sent whole
        pp_send = (pp_send + np.where(part, whole, pp_send)) / 2.0  # the mean of the two sends a micro-batch
        ag_send = 1.0
    ag = np.where(part, coll(comm.ALL_GATHER, pp_msg, tp, coll.strides["tp"]), 0.0)
    n_ag = {"first": ag_send, "mid": ag_send + 1.0, "last": 1.0}  # the receiving side's one
    p2p = sc.stack.overlap.pp_p2p_overlapped
    overlapped = (plan.schedule == INTERLEAVED) if p2p == "interleaved" else np.full(np.shape(plan.pp), p2p == "always")

    flush = _warmup_flush_sends(sc)  # the stage-independent part of pp_warmup_flush, once for the three stages
    # a middle stage's 2 exchanges a micro-batch and model chunk; where the runtime pairs each send with the receive
    # from the same neighbour and skips the side an end stage lacks (Stack.pipeline_p2p_batched: Megatron-LM @d98e8a64
    # p2p_communication.py l. 536-600, schedules.py l. 2378-2448) the first and the last stage make one fewer a
    # micro-batch: 2 v - 1 (at pp 2 both are ends; at pp 1 there is no send, pp_send 0)
    vpp = np.asarray(plan.vpp, dtype=np.float64)  # (n / vpp divides as floats either way: cast once)
    sends = 2.0 * vpp  # (2 vpp x, as 2.0 * vpp * x multiplies)
    ends = sends - (1.0 if sc.stack.pipeline_p2p_batched else 0.0)  # a stack setting

    # where the interleaved schedule's warm-up and flush p2p are overlapped too (Megatron-LM with
    # --overlap-p2p-communication-warmup-flush, overlap.pp_p2p_warmup_flush_blocking off; Llama 3's asynchronous p2p),
    # each later model chunk's first micro-batch comes round the p ranks whole: [31]'s wrap-around hops
    wrap_on = overlapped & (plan.schedule == INTERLEAVED) & (not sc.stack.overlap.pp_p2p_warmup_flush_blocking)
    wrap = 0.0
    if np.any(wrap_on):  # (a stack setting and the plans' schedules: nothing to price where no plan has it)
        n_grp = np.asarray(microbatch_group(plan.pp, plan.microbatches, plan.mbg), dtype=np.float64)
        ranks = np.asarray(plan.pp, dtype=np.float64)
        round_hops = np.minimum(n_grp, ranks) * pp_send  # min(N, p) whole hops a round the bubble lacks [31]
        slack = np.maximum(n_grp - ranks, 0.0)  # the round's chunks beyond p, run while micro-batch 0 comes round
        # the wrap-around hops a step (per step, not a micro-batch of the bubble): v - 1 later rounds each way, each
        # min(N, p) whole hops less the slack the round's other (N - p)+ chunks give on the stage that waits at the
        # wrap [31]: stage 0 in the fill (micro-batch 0's chunk k output comes round from stage p - 1 to stage 0's
        # chunk k + 1 while stage 0 runs its forwards), stage p - 1 in the drain (its chunk k gradient from stage 0's
        # chunk k + 1, the fill's mirror, while it runs its backwards): a pipeline-wide value, the same whichever
        # stage is the critical one (before: the critical stage's own chunk)
        win_f0 = stage_windows(sc, lt, "first")[0]
        win_bl = stage_windows(sc, lt, "last")[1]
        fill_w = np.maximum(round_hops - slack * (sc.nf("first") / vpp * win_f0), 0.0)
        drain_w = np.maximum(round_hops - slack * (sc.nf("last") / vpp * win_bl), 0.0)
        wrap = np.where(wrap_on, (vpp - 1.0) * (fill_w + drain_w), 0.0)

    def stage(st):  # an overlapped send hides behind stage st's next model chunk: its layers / vpp, its mean layer
        chunk = sc.nf(st) / vpp * stage_windows(sc, lt, st)[0]
        hidden = _hide(pp_send, chunk, sc.x)
        # DeepSpeed's blocking one-way sends (Stack.pipeline_p2p_sequential): a middle stage's 4 a micro-batch, the ends' 2
        count = (2.0 * sends if sc.stack.pipeline_p2p_sequential else sends) if st == "mid" else ends
        per = np.where(overlapped, hidden, pp_send)  # one transfer as this stage waits on it
        # The bubble's p2p (pp_fill_drain): the fill's p - 1 forward hops and the drain's p - 1 backward hops, one
        # whole transfer each (the stage waiting on a hop has no work before it arrives, whatever the stack overlaps),
        # 2 (p - 1) = (p - 1) / v x 2 v [31]: at least 2 v whole transfers a micro-batch of the (p - 1) / v the bubble
        # holds, where the stage's own count is at its waited share (per) and an end stage's one fewer (batched ends);
        # DeepSpeed's partitioned all-gathers (n_ag) ride on both, so the fill's difference leaves them out
        hops = np.maximum(count, sends) * pp_send + n_ag[st] * ag
        # the warm-up's and flush's waited sends on the step's path (pp_warmup_flush: the last stage's 2 W, each a
        # whole send where the steady state charged this stage's waited share)
        return count * per + n_ag[st] * ag, _warmup_flush(sc, flush, pp_send - hidden), hops, wrap

    out = {st: stage(st) for st in comm_stages(sc)}
    return tuple(stage_comm(sc, {st: x[j] for st, x in out.items()}) for j in (0, 1, 2, 3))


def pp_fill_drain(pp_mb, hops, frac_m, wrap=0.0) -> np.ndarray:
    """Seconds per step the pipeline's fill and drain add to the bubble beyond the critical stage's own p2p [31]:
    step_time's bubble is bubble_fraction x m micro-batches of the critical stage (compute and communication), whose
    p2p is its own count a micro-batch, each transfer as that stage waits on it in the steady state (the whole send,
    or its exposed share where the stack overlaps the p2p); the fill (the first micro-batch's forward from stage 0 to
    stage p - 1) and the drain (its backward back) cross p - 1 stage boundaries each, one whole transfer a boundary
    whatever the stage and the stack's overlap: the stage that waits on a hop has no work before its input arrives.
    Under 1F1B and interleaved 1F1B (bubble_fraction x m = (p - 1) / v) that is 2 (p - 1) transfers, 2 v a
    micro-batch of the bubble: a middle stage's count (2 v, or DeepSpeed's 4 v, which already covers it), one more
    than an end stage's where the runtime batches its exchanges and skips the side an end lacks
    (Stack.pipeline_p2p_batched: 2 v - 1). Megatron-LM's warm-up forward sends are such hops, each its own blocking
    send, batched with nothing (forward_backward_pipelining_without_interleaving: send_forward, schedules.py
    @d98e8a64 l. 2362; p2p_communication.py l. 494-514, _communicate with only tensor_send_next, waited l. 416-419),
    and the cooldown's backward sends likewise (l. 2474); the interleaved schedule's first forward waits its input
    whole (recv_forward, l. 1543-1548). pp_mb and hops: pp_comm's per-micro-batch values of the critical stage (its
    count x one transfer as it waits on it, and max(count, 2 v) x one whole transfer); frac_m: bubble_fraction x m;
    wrap: pp_comm's per-step wrap-around hops of the interleaved schedule where its warm-up and flush are overlapped
    [31]. 0 where the critical stage is a middle one whose transfers are waited whole, at pp 1, and on stacks whose
    ends are priced at 2 v blocking."""
    return frac_m * np.maximum(hops - pp_mb, 0.0) + wrap


def pipe_partitioned(sc: StepCtx) -> np.ndarray:
    """Where the plan runs DeepSpeed's partitioned pipe tensors [25]: the job's pipe_partitioned (default the stack's
    pipeline_send_partitioned_default), at pp > 1 with tp > 1, on a dense model without sequence parallelism (MoE and
    SP plans run them off: plan.mds_pipe_unpartitioned, the reader's refusals). The gradient's sends partitioned
    too, or activations only: the stack's pipeline_send_partitioned_grads (pp_comm)."""
    plan, settings = sc.plan, sc.settings
    on = settings.pipe_partitioned and settings.model.moe is None  # job and model, not searched
    return on & (plan.pp > 1) & (plan.tp > 1) & (plan.sp == 0)


def pp_tied_grads(sc: StepCtx, coll: Collectives) -> np.ndarray:
    """Seconds per step of the tied embedding's gradient all-reduce between the first and the last stage, where the
    stack's pipeline runtime runs one (Stack.pipeline_tied_grad_allreduce) [20]: at pp > 1 with tied embeddings, one
    all-reduce of the input embedding's gradient, vocabulary / tp x hidden elements (its vocab-parallel shard), over
    the two ranks that hold it, (pp - 1) pipeline strides apart; in the gradient's bytes (the mode's fp32 accumulation
    buffer's where it keeps one: DeepSpeed's BF16_Optimizer reduces weight._hp_grad; else bytes_per_param gradients);
    after the last backward and waited on: all of it on the step. Likewise, tied or not, the multi-token-prediction
    stage's own word embedding where the stack builds one (stack memory.mtp_embedding_copy, memory.py [me]): its
    gradient is all-reduced with the first stage's over the same group, one tensor of the same size whether the
    embeddings are tied or not [20]. Under Megatron-FSDP (the mode's embedding_grad_shard) the rank's shard of the
    optimizer's fp32 gradient, ceil(V/tp / n) x h elements x 4 B (n: dp x cp, HSDP's shard x cp), and nothing where the
    job's precision-aware optimizer leaves param.grad unset (skipped_decoupled) [20]. 0 elsewhere."""
    plan, settings = sc.plan, sc.settings
    tied = sc.stack.pipeline_tied_grad_allreduce and settings.model.tied_embeddings
    mtp_copy = bool(sc.stack.memory.mtp_embedding_copy and settings.model.mtp_layers)  # the MTP stage's copy [me]
    if not (tied or mtp_copy):  # stack and model, not searched
        return np.zeros(np.shape(plan.pp))
    model = settings.model
    acc = grad_accum_bytes(sc.stack, plan)
    whole = count_params(model).embedding / plan.tp * np.where(acc > 0, acc, settings.bpp.gradients)
    # Megatron-FSDP: the rank's shard of its own bucket, padded to the shard group x h, in fp32 (the main weight's);
    # none where the precision-aware optimizer leaves param.grad unset [20]
    shard, skipped = embedding_grad_shard(sc.stack, plan, settings.precision_aware)
    n = optimizer_shards(sc.stack, plan, settings.mfsdp_outer_optim, experts=False)[0]  # the main gradient's shard: dp x cp under [29]
    rows = np.ceil(float(model.vocab_size) / plan.tp / n)
    size = np.where(shard, rows * model.hidden_size * STEP_FP32_GRAD_BYTES, whole)
    on = (plan.pp > 1) & ~skipped
    t = coll(comm.ALL_REDUCE, size, np.where(on, 2, 1), np.maximum(plan.pp - 1, 1) * coll.strides["pp"])
    return np.where(on, t, 0.0)


def sp_partial_elements(sc: StepCtx) -> np.ndarray:
    """Parameters per GPU whose gradients the step's TP all-reduce sums [27], on the stage with the most (first, middle,
    last; sp_partial_stages' largest)."""
    mid, first, last = sp_partial_stages(sc, paired=False)
    return functools.reduce(np.maximum, (first, mid, last))


def sp_partial_stages(sc: StepCtx, paired: bool = True) -> tuple:
    """Parameters per GPU whose gradients the step's TP all-reduce sums [27], each CRITICAL_STAGES slot's (middle, first,
    last). Under SP, those SP leaves partial on each TP rank: on each stage its layers' replicated parameters
    (BlockParams.replicated: norms, query/key norms, MLA's down projections and latent norms, the router, the
    row-parallel linears' biases), the final norm and the MTP modules' on the last, the embedding's norm on the first
    (with one stage both ends). Without SP, the query/key norms alone (BlockParams.qk_norm: each TP rank's from its own
    heads; the layers' and the MTP modules'). A step-end term: each stage runs its own after its own schedule and DP
    gradient sync (Megatron-LM @d98e8a64 megatron/core/distributed/finalize_model_grads.py finalize_model_grads
    l. 637-677: finish_grad_sync, then _allreduce_non_tensor_model_parallel_grads over the stage's TP group), before the
    optimizer step's gradient norm (step_time's step end). paired (DualPipe [8]): a rank holds stages s and p - 1 - s
    and all-reduces both's, the end slots first + last, the middle two middle stages (_dp_stages' rule)."""
    settings, plan = sc.settings, sc.plan
    pc = count_params(settings.model)
    sp = plan.sp > 0
    per = [np.where(sp, np.float64(p.replicated), np.float64(p.qk_norm)) for p in pc.kind_params]
    single = plan.pp == 1
    head = np.where(sp, np.float64(pc.final_norm + pc.mtp.replicated), np.float64(pc.mtp.qk_norm))
    emb = np.where(sp, np.float64(pc.embedding_norm), 0.0)
    first = weighted(sc.counts["first"], per) + emb + np.where(single, head, 0.0)
    last = weighted(sc.counts["last"], per) + head + np.where(single, emb, 0.0)
    mid = weighted(sc.counts["mid"], per)
    dual = sc.dual()
    if not paired or not sc.memo["any_dual"]:  # (no plan of the batch DualPipe: np.where's values, each its own)
        return mid, first, last
    return np.where(dual, 2.0 * mid, mid), np.where(dual, first + last, first), np.where(dual, first + last, last)


def sp_norm_grads(sc: StepCtx, coll: Collectives) -> np.ndarray:
    """Seconds per step of the TP all-reduce of the SP-partial gradients and the query/key norms' [27], each
    CRITICAL_STAGES slot's (a leading axis of 3, sp_partial_stages): where the stack sums them in one all-reduce a step
    (runs.sequence_parallel norm_grads_step_allreduce), tp > 1 and the stage has some (SP on, or query/key norms); the
    elements at the main gradients' bytes (grad_reduce_bytes; / the shard group under FSDP) over the TP group, after
    the stage's DP gradient sync and waited on. 0 elsewhere, and in the middle slot where no plan of the batch has a
    middle stage (dp_comm's rule)."""
    plan = sc.plan
    runs = sc.stack.runs
    spr = None if runs is None else runs.sequence_parallel
    if spr is None or not spr.norm_grads_step_allreduce:  # a stack setting, not searched
        return np.zeros((len(CRITICAL_STAGES),) + np.shape(plan.tp))
    fsdp = plan.sharding >= FSDP
    shard_n = plan.shard * plan.cp
    slots = comm_stages(sc)  # the middle slot's only where some plan has a middle stage (dp_comm's rule)
    per = dict(zip(CRITICAL_STAGES, sp_partial_stages(sc)))
    elems = np.stack(np.broadcast_arrays(*(per[st] for st in slots)))
    size = elems * grad_reduce_bytes(sc, fsdp) / np.where(fsdp, shard_n, 1)
    on = (elems > 0) & (plan.tp > 1)
    t = dp_collectives(sc, coll, sp=True)(comm.ALL_REDUCE, size, np.where(on, plan.tp, 1), coll.strides["tp"])
    return _all_slots(sc, np.where(on, t, 0.0), slots)


def pp_warmup_flush(sc: StepCtx, waited) -> np.ndarray:
    """Seconds per step the interleaved schedule's warm-up and flush p2p add where the stack
    overlaps its steady state's but waits on theirs (overlap.pp_p2p_warmup_flush_blocking: Megatron-LM
    without --overlap-p2p-communication-warmup-flush [13]): the sends of those phases that lie on the step's
    path, each waited whole where the steady state charged `waited` less (a send less its overlapped share, as
    pp_comm hides it on the critical stage): 2 W x `waited`, W = W_(p-1) = (vpp - 1) N (+ 1 with the MoE EP
    overlap), the LAST stage's warm-up (and flush) count, whatever stage is the critical one. Why the last's:
    Megatron-LM @d98e8a64 schedules.py get_pp_rank_microbatches (l. 964-965: num_warmup = 2 (p - r - 1) +
    (v - 1) N, l. 969-970 + 1, l. 976-978 at most v m) gives rank r 2 (p - r - 1) more warm-up forwards (and as
    many more flush backwards: the cool-down loop, l. 1971, runs the same count) than the last rank; those run
    while rank r waits for its first backward, which comes back round the p - r - 1 stages below it (a round trip of
    2 (p - r - 1) hops, the whole fill and drain hops pp_fill_drain prices), so they sit in the bubble, and the
    chain the step waits on is the last stage's: the fill's p - 1 hops into it, its own W warm-up forwards, each
    followed by its blocking send_forward_recv_forward (l. 1655-1657: chunks 0 .. v - 2, every one sent on, the
    wrap to stage 0 included), its steady state, its W cool-down backwards, each a blocking
    send_backward_recv_backward (l. 2053-2055, every one sent), and the drain's p - 1 hops. The fill's round
    trips of the later chunks fit the lockstep these blocking sends make (each rank's warm-up iteration a forward
    plus one whole send: micro-batch 0's chunk k output reaches stage 0 just as its N = p chunk-k forwards end),
    so no wrap wait is priced here (pp_comm's wrap, 0 without the overlapped warm-up). 2 W - 1 sends where the MoE
    extra forward is the last virtual stage's (chunk v - 1 of micro-batch 0, which sends nothing). A dependency
    replay of the schedule (every rank's ops in Megatron's order, each forward waiting its input, each backward its
    gradient, a transfer S, a blocking send waited whole, an overlapped one at share x; scripts/pp_schedule_replay.py
    megatron; p 4 .. 16, v 2 .. 4, N = p or 2 p, a stage 20% heavier) puts 2 W_(p-1) - 1.23 of these (in (1 - x) S,
    beyond the steady share and the 2 (p - 1) whole hops) on the step where the last stage is the heavier,
    2 W_(p-1) + 1.07 where the middle ones are, 2 to 8 fewer on a balanced pipeline and fewer still where the first
    stage is heavier (its surplus hides them), while the first stage's 2 W_0 exceeds the replay everywhere, by 11
    to 77 (p 4, v 2, m 8: 5.9 balanced, 6.8 last, 9.1 middle, 4.1 first against 8; 2 W_0 = 20). Before (issue 22
    ppedges): the first stage's
    W_0 = 2 (p - 1) + (v - 1) N each way, scaled by the critical stage's share of a middle stage's transfers.
    0 without the interleaved schedule, where the stack overlaps nothing, or where it overlaps these too."""
    return _warmup_flush(sc, _warmup_flush_sends(sc), waited)


def _warmup_flush_sends(sc: StepCtx):
    """pp_warmup_flush's (interleaved, 2 W sends) of the plans, or None where it is 0 for every plan."""
    plan, ov = sc.plan, sc.stack.overlap
    inter = plan.schedule == INTERLEAVED
    if not ov.pp_p2p_warmup_flush_blocking or ov.pp_p2p_overlapped == "never" or not np.any(inter):  # stack settings
        return None
    n = microbatch_group(plan.pp, plan.microbatches, plan.mbg)
    epo = dispatcher_rows(sc.settings, plan)[1] if _rows(sc.settings) else bool(sc.settings.ep_comm_overlap)
    moe_extra = np.where(epo & moe.ep_overlap_applies(plan), 1.0, 0.0)
    # the last rank's (r = p - 1) warm-up count, l. 964-978: (v - 1) N (+ 1), at most v m (never reached: N <= m)
    warm = np.minimum((plan.vpp - 1) * n + moe_extra, plan.vpp * plan.microbatches)
    return inter, 2.0 * warm - moe_extra  # the extra warm-up forward (the last virtual stage's) sends nothing


def _warmup_flush(sc: StepCtx, sends, waited) -> np.ndarray:
    """pp_warmup_flush from _warmup_flush_sends' (interleaved, 2 W): 2 W x waited where interleaved."""
    if sends is None:
        return np.zeros(np.shape(sc.plan.pp))
    inter, twice = sends
    return np.where(inter, twice * waited, 0.0)


# ----------------------------------------------------------------------------- DP
@dataclass
class DPTraffic:
    # dp_comm's: each CRITICAL_STAGES slot's (a leading axis of 3: middle, first, last; dp_stage picks one stage's)
    total: np.ndarray  # every DP transfer of the step
    exposed: np.ndarray  # what is left on the critical path
    copies: np.ndarray  # the stack's copies into and out of the collective buffers (compute)
    p_local: np.ndarray  # dense parameters per GPU (DualPipe: the rank's pair, _dp_stages)
    e_local: np.ndarray  # routed-expert parameters per GPU (DualPipe: pair)
    e_shard: np.ndarray  # the experts' shard group
    counts: tuple = (1.0, 1.0, 1.0)  # (gradient reductions, FSDP all-gathers, FSDP reduce-scatters) a step (offload.py)
    # of exposed, the per-micro-batch share a micro-batch (dp_comm: (m - 1) x the exposure of each micro-batch's own
    # transfers before the last, / m): on the stage's critical path with its passes (critical_stage), 0 s where the
    # mode moves nothing every micro-batch; exposed - m x mb is the step-end part (step_end_stage)
    mb: np.ndarray = 0.0
    # of total, exposed and mb, the routed experts' (dp_expert_comm, over their expert-data-parallel ranks; 0 s on a
    # model without them): what they add behind the windows the dense traffic leaves (dp_exposure)
    e_total: np.ndarray = 0.0
    e_exposed: np.ndarray = 0.0
    e_mb: np.ndarray = 0.0


@dataclass
class DPColls:
    """One pass's DP collectives over a stage's parameters (seconds; dp_comm's dense, dp_expert_comm's routed
    experts'), each the sum of its buckets' or units': ag the weights' all-gather, rs the gradients' reduce-scatter
    (an all-reduce under an fsdp mode that all-reduces [21]), ar the gradients' all-reduce (DDP, a zero1 mode that
    all-reduces), rep HSDP's exchange across the replicas, inst the all-reduce across a zero1 mode's optimizer
    instances (each 0 s where the plan runs none)."""
    ag: Any
    rs: Any
    ar: Any
    rep: Any
    inst: Any

    def parts(self) -> tuple:
        return self.ag, self.rs, self.ar, self.rep, self.inst

    def __add__(self, other: "DPColls") -> "DPColls":
        return DPColls(*(a + b for a, b in zip(self.parts(), other.parts())))


def grad_reduce_bytes(sc: StepCtx, fsdp) -> np.ndarray:
    """Bytes per gradient element the data-parallel reduction moves: the stack's
    fsdp.grad_reduce_bytes; on a stack whose DDP / distributed optimizer reduces its gradient
    buffer in place (fsdp.ddp_reduces_grad_buffer: Megatron-LM, whose buffer is fp32 only with
    grad_reduce_in_fp32 [9]), the job's gradient bytes (bytes_per_param.gradients: 2 with
    --grad-reduce-in-bf16) where the plan does not shard with FSDP. A sharding mode that keeps its own
    main gradients in the job's dtype (runs.sharding grads_in_job_dtype: Megatron-FSDP, whose
    --megatron-fsdp-grad-comm-dtype auto reduces them in their own dtype; memory.py [mg]) moves the
    job's gradient bytes at every level."""
    fs = sc.stack.fsdp
    ddp = sc.settings.bpp.gradients if fs.ddp_reduces_grad_buffer else fs.grad_reduce_bytes
    return main_grad_bytes(sc.stack, sc.plan, sc.settings.bpp.gradients, np.where(fsdp, fs.grad_reduce_bytes, ddp))


def linear_share(pc) -> float:
    """The share of the dense parameters that are the layers' linear weights (their TP-split
    matrices, BlockParams.split_linear: biases and the mixers' conv1d, dt_bias, A_log, D and norms left out,
    layers/common.py [pl]), over the model: what quantized parameters cover [12] (the embedding, output layer,
    norms, routers and the mixers' plain parameters stay 16-bit); a stage's own share is taken as
    the model's (a named approximation: the first stage holds the embedding, the last the
    output layer)."""
    lin = sum(int(n) * p.split_linear for n, p in zip(pc.layers.totals, pc.kind_params))
    dense = sum(int(n) * (p.split + p.replicated) for n, p in zip(pc.layers.totals, pc.kind_params)) + pc.ends
    return lin / dense if dense else 0.0


# bytes per linear weight element the distributed optimizer's all-gather moves with quantized
# parameters, by recipe [12]: the uint8 parameter buffer (Float8Tensor data; blockwise's too, its
# scales not counted), NVFP4 packed two a byte; MXFP8 (NaN here) through the gradient buffer
QUANTIZED_GATHER_BYTES = {"delayed": 1.0, "tensorwise": 1.0, "rowwise": 1.0, "blockwise": 1.0, "mxfp8": float("nan"),
                          "nvfp4": 0.5}


def fp8_gather_share(pc, settings, plan) -> np.ndarray:
    """The share of the dense parameters FSDP's fp8 all-gather moves in fp8 [15]: the converted
    Linears' weights (memory.converted_linear_elems: the layers' linear matrices less those the job's
    filter_fqns keeps bf16, plus a converted router's or MLA down projection's [18]), plus the
    output layer's where it is converted too (the job's fp8_output_layer); the embedding, norms,
    routers (unless converted) and the output layer otherwise stay bf16 parameters."""
    from .memory import converted_linear_elems

    dense = sum(int(n) * (p.split + p.replicated) for n, p in zip(pc.layers.totals, pc.kind_params)) + pc.ends
    if not dense:
        return np.float64(0.0)
    conv = converted_linear_elems(settings, pc, plan, per_gpu=False)
    lin = sum((int(n) * c for n, c in zip(pc.layers.totals, conv)), np.float64(0.0))
    out = pc.output if settings.fp8_output_layer else 0.0
    return (lin + out) / dense


def gather_bytes(sc: StepCtx, zero, share, f8_share) -> np.ndarray:
    """Bytes per parameter a weight all-gather moves: the stack's param_gather_bytes, with FSDP's
    fp8 all-gather (the recipe's allgather_fp8, unless the job's fp8_allgather is false) the
    converted Linears' share (`f8_share`) at 1 B [15]; with the job's quantized parameters
    (fp8_param_gather / fp4_param_gather) under the distributed optimizer, the linears' share
    (`share`) at QUANTIZED_GATHER_BYTES, the rest at the stack's [12]."""
    from .precisions import FP8_RECIPES

    plan, settings, fs = sc.plan, sc.settings, sc.stack.fsdp
    fp8_ag = fp8_allgather_on(settings, plan)  # [15]
    fp8_linears = f8_share * FP8_GATHER_BYTES  # [15]
    bf16_rest = (1.0 - f8_share) * fs.param_gather_bytes
    w = np.where(fp8_ag, fp8_linears + bf16_rest, fs.param_gather_bytes)
    quant = (settings.fp8_param_gather or settings.fp4_param_gather) & ((plan.precision == FP8) | (plan.precision == NVFP4))
    per = np.array([QUANTIZED_GATHER_BYTES[r] for r in FP8_RECIPES])[np.asarray(plan.f8r, dtype=np.int64)]
    per = np.where(np.isnan(per), settings.bpp.gradients, per)  # MXFP8: gathered into the gradient buffer [12]
    return np.where(quant & zero, share * per + (1.0 - share) * w, w)


def _replica_exchange(sc: StepCtx, coll: Collectives, ar_rep, grad_shard, weight_shard) -> np.ndarray:
    """HSDP's exchange across the replicas, once a step: the all-reduce of the shard-group gradient shard (ar_rep), or
    under the outer-DP optimizer sharding (the job's mfsdp_outer_optim) [29] a reduce-scatter of it into the dp x cp
    shard and, at the step's first micro-batch, an all-gather of the updated 16-bit weights' shard (weight_shard
    bytes) across them, in its place."""
    plan = sc.plan
    oo = outer_optim(sc.stack, plan, sc.settings.mfsdp_outer_optim)
    if not np.any(oo):  # no plan runs it (the job's setting off, or no HSDP row): the all-reduce, no other collective priced
        return np.where(oo, 0.0, ar_rep)
    replicas, stride = plan.dp // np.maximum(plan.shard, 1), coll.strides["dp"] * plan.shard
    return np.where(oo, coll(comm.REDUCE_SCATTER, grad_shard, replicas, stride)
                    + coll(comm.ALL_GATHER, weight_shard, replicas, stride), ar_rep)


# the plan fields the DP collectives' (size, group, stride) read (dp_comm with its helpers): every PlanArrays field but
# the micro-batch's (mbs, gbs, seq: the activations'), the recompute, SP, TP-overlap, compile, DP-overlap, fp8
# grouped-experts, micro-batch-group and dispatcher fields, and vpp (a stage's parameters and layers are its chunks'
# sum). A grouping only, never a value: each collective is checked constant within the groups before it is priced
# once per group (Collectives.by_plans), and priced over every plan where not. The SP-gradient all-reduce
# (sp_norm_grads) reads sp too (its elements: the SP-partial parameters).
DP_COLLECTIVE_FIELDS = ("tp", "cp", "pp", "dp", "sharding", "shard", "schedule", "precision", "order", "f8r",
                        "split_emb", "split_loss", "split_front", "split_first", "split_last", "ep", "smode", "etp")


def dp_collectives(sc: StepCtx, coll: Collectives, sp: bool = False) -> Collectives:
    """coll pricing each DP collective once per group of the batch's plans that share DP_COLLECTIVE_FIELDS (with sp:
    and sp, sp_norm_grads') (Collectives.by_plans), the groups once per context (sc.memo); coll itself for one plan,
    a batch under UNIQUE_MIN plans, per-plan bandwidth knobs, or groups more than half the batch's plans (little to
    share)."""
    key = "sp_plans" if sp else "dp_plans"
    if key not in sc.memo:
        g, plan = None, sc.plan
        if np.ndim(plan.tp) == 1 and np.size(plan.tp) >= comm.UNIQUE_MIN and not coll.bw_arrays:
            if sp:
                g = dp_collectives(sc, coll).plans
                on = np.asarray(plan.sp)
                if g is not None and np.ndim(on) == 1 and on.min() != on.max():  # DP's groups split by SP on / off
                    g = Groups(plan, ("sp",), code=g.index * 2 + (on != 0))
            else:
                g = Groups(plan, DP_COLLECTIVE_FIELDS)
            g = g if g is not None and 2 * g.size <= g.n else None
        sc.memo[key] = g
    return coll.by_plans(sc.memo[key])


def _if_any(mask, price):
    """price() where some plan's mask is set, else 0 s without pricing it: a collective that no plan of the batch runs
    (every element it gives is 0 s or masked out by its caller); the same values either way."""
    return price() if np.any(mask) else np.float64(0.0)


def _dp_params(sc: StepCtx, pc, slots: tuple = CRITICAL_STAGES) -> tuple:
    """dp_comm's parameters: (p_local, _dp_stages' per-slot dict, the dense elements each slot's traffic moves, the
    experts' floor of it), each of the CRITICAL_STAGES `slots` on the leading axis: p_local the larger end stage's
    dense parameters (DualPipe: the larger pair), what ZeRO-3's gathers read (zero3_sync_gathers, zero3_rerun_share:
    one stage, DEEPSPEED_PP_ZERO); under Muon's default layout the traffic is each slot's padded buffer's
    (muon_layout_padding [28]; 0.0 elsewhere)."""
    plan, settings = sc.plan, sc.settings
    # the middle composition with the most expert parameters (a function of the pipeline split
    # alone), not the slowest one: the expert traffic is that stage's
    experts = [p.expert for p in pc.kind_params]
    mid = sc.counts["mid_all"][0]
    for cand in sc.counts["mid_all"][1:]:
        mid = np.where(weighted(cand, experts) > weighted(mid, experts), cand, mid)
    split = stage_param_split(pc, settings.model, plan, {**sc.counts, "mid": mid},
                              bool(sc.stack.memory.mtp_embedding_copy))  # the MTP stage's embedding (memory.py [me])
    # DualPipe: every rank holds two stages, s and p - 1 - s (the end rank the first and the last,
    # a middle rank two middle ones) and reduces and steps both stages' parameters [8] (sec. 3.2.1:
    # "DualPipe requires keeping two copies of the model parameters")
    dual = dualpipe_pairs(plan)
    pair = {i: np.maximum(split["first"][i] + split["last"][i], np.where(plan.pp > 2, 2.0 * split["mid"][i], 0.0))
            for i in (0, 1)}
    p_local = np.where(dual, pair[0], np.maximum(split["first"][0], split["last"][0]))
    stages = _dp_stages(sc, pc, split, mid, dual, slots)  # each slot's parameters: the step end takes each stage's own
    p_dp, pad_e = stages["p"], 0.0
    if settings.optimizer == "muon" and not settings.optimizer_whole_tensors:  # job settings: Muon's layout [28]
        pad_d, pad_e = muon_layout_padding(sc, pc, split, slots)
        p_dp = np.maximum(p_dp, pad_d)
    return p_local, stages, p_dp, pad_e


def dp_comm(sc: StepCtx, coll: Collectives, comp: Compute, lt: LayerTimes = None, stream_mb=None) -> DPTraffic:
    """Gradient reduction and parameter gathering over every rank that holds the same weights,
    dp x cp (context-parallel ranks compute gradients of the same weights on other tokens),
    placed at the finer of the two axes' strides [5]; then the routed experts' over their
    expert-data-parallel ranks (dp_expert_comm). Each CRITICAL_STAGES slot's own (_dp_stages: its parameters, layers
    and experts), as a leading axis of 3 on total, exposed, copies, p_local, e_local and mb: every stage reduces its own
    gradients over its own DP group, and step_time takes the step end's stage (dp_stage), not the largest of each
    term apart (issue 22 critstage3). Each slot's transfers hide behind that stage's own passes (dp_windows, from
    comp.passes: comp need not be critical_stage's), so the exposure is known before the critical stage is: mb, the
    per-micro-batch part a micro-batch ((m - 1) x what one micro-batch's own transfers expose, / m: ZeRO-2's
    reduce-scatter after each micro-batch, FSDP's gathers and reductions every micro-batch), weighs in
    critical_stage's pick with the stage's compute, and exposed - m x mb (the last micro-batch's, the step's first
    gather and its edges, the once-a-step reductions and gathers) is the step end's (step_end_stage; issue 22 critdp:
    before, the whole hid behind the critical stage's passes and went to the step end only, the pick made without
    it). The routed experts' traffic (dp_expert_comm) splits the same way: run with the dense collectives through the
    same rules and windows (dp_exposure), reduced and gathered when the dense ones are (Megatron DDP's expert bucket
    groups, Megatron-FSDP's expert parameter groups, torchtitan's expert FSDP2 units: dp_expert_comm), its part of each
    figure what it adds to the dense part's (e_total, e_exposed, e_mb), each slot's own (before, all of it step-end
    part, hidden behind what the dense traffic left of the stage's whole window); a queued stack's [26] is all
    step-end part (the first stage's queue overrunning the pipeline's compute at the step's end). The middle slot is
    priced only where some plan of the batch has a middle stage (comm_stages, as the per-micro-batch terms'), 0 s
    elsewhere: step_end_stage leaves it out at pp <= 2."""
    plan, settings, fs = sc.plan, sc.settings, sc.stack.fsdp
    coll = dp_collectives(sc, coll)
    slots = comm_stages(sc)
    comp = dp_windows(sc, comp, slots)  # each slot's own passes: the windows its transfers hide behind
    pc = count_params(settings.model)
    p_local, stages, p_dp, pad_e = _dp_params(sc, pc, slots)
    n_dp = stages["n"]
    shard_n = plan.shard * plan.cp
    dpcp = plan.dp * plan.cp
    dp_stride = np.where(plan.cp > 1, np.minimum(coll.strides["dp"], coll.strides["cp"]), coll.strides["dp"])
    fsdp = plan.sharding >= FSDP
    zero = (plan.sharding >= ZERO1) & ~fsdp
    sharded = plan.sharding >= ZERO1
    w_per = gather_bytes(sc, zero, linear_share(pc), fp8_gather_share(pc, settings, plan))  # [12] [15]
    # the stack issues these as one collective per bucket (an FSDP unit = a layer, or a bucket of
    # parameters: Megatron DDP, DeepSpeed), each paying the collective's latency term
    ddp_bucket = np.maximum(fs.ddp_bucket_params, fs.ddp_bucket_params_per_dp_rank * dpcp)
    # FSDP's units a layer each (no fsdp_bucket_params, a stack setting): the layer count of the stage whose parameters
    # p_dp are (n_dp), an integer, not ceil(p_dp / (p_dp / n)), whose float round trip gave n + 1 (62 for 61 layers)
    n_units = (np.maximum(np.asarray(n_dp, dtype=np.float64), 1.0) if fs.fsdp_bucket_params is None
               else np.ceil(p_dp / fs.fsdp_bucket_params))
    n_b = np.maximum(np.where(fsdp, n_units, np.ceil(p_dp / ddp_bucket)), 1.0)

    def bucketed(op, size, group):
        return n_b * coll(op, size / n_b, group, dp_stride)

    grad_b = p_dp * grad_reduce_bytes(sc, fsdp)
    tr = sharding_traits(sc.stack, plan)  # when the plan's mode moves its states (stack_db runs.sharding)
    # a zero1 mode that all-reduces the whole gradients, then all-gathers the updated weights (DeepSpeed's
    # BF16_Optimizer: engine.py @38327e07 allreduce_bucket l. 2491-2516 over its fp32 buffer cast to
    # communication_data_type, bf16_optimizer.py update_lp_params l. 423-436 all_gather_dp_groups)
    allred = zero & (tr["allreduce"] | layerwise_legacy(sc))  # and Muon's layer-wise optimizer's legacy path [28]
    # (each collective priced where some plan runs it: _if_any; the others' elements are 0 s or never read)
    ag_w = _if_any(sharded, lambda: _layerwise_gather(sc, coll, bucketed, p_dp * w_per, np.where(sharded, shard_n, 1),
                                                      dp_stride))
    # [39] torchao's amax all-reduces of FSDP's fp8 all-gather: per weight inside each gather, or once a step
    amax_ag, amax_step = fsdp_fp8_amax(sc, coll, slots, shard_n, dp_stride, fsdp)
    ag_w = ag_w + amax_ag
    # an fsdp mode that all-reduces each gradient bucket whole in place of its reduce-scatter [21]
    rs_g = bucketed(comm.REDUCE_SCATTER, grad_b, np.where(sharded, shard_n, 1))
    rs_g = np.where(fsdp & tr["allreduce"], _if_any(fsdp & tr["allreduce"], lambda: bucketed(
        comm.ALL_REDUCE, grad_b, np.where(sharded, shard_n, 1))), rs_g)
    ar_g = _if_any(~sharded | allred, lambda: bucketed(comm.ALL_REDUCE, grad_b, np.where(sharded & ~allred, 1, dpcp)))
    rep_on = (plan.sharding == HSDP) | (zero & (plan.shard < plan.dp))  # the replicas' all-reduce: 1 rank elsewhere
    ar_rep = _if_any(rep_on, lambda: coll(comm.ALL_REDUCE, grad_b / shard_n, np.where(  # (read only there)
        rep_on, plan.dp // np.maximum(plan.shard, 1), 1), coll.strides["dp"] * plan.shard))
    ar_hsdp = np.where(plan.sharding == HSDP, _replica_exchange(sc, coll, ar_rep, grad_b / shard_n, p_dp * w_per / shard_n), 0.0)
    # zero1 over groups of the dp ranks (Megatron's --num-distributed-optimizer-instances N, shard group dp / N): each
    # reduce-scattered shard all-reduced across the N groups (param_and_grad_buffer.py @d98e8a64 l. 735-759) [5]
    ar_inst = np.where(zero & (plan.shard < plan.dp), ar_rep, 0.0)
    # DeepSpeed ZeRO-3 of April 2021: one-deep, synchronised fetches [22] (a stack setting, not a searched quantity)
    sync = None
    if sc.stack.overlap.fsdp_prefetch_depth == 1 and lt is not None:
        sync = zero3_sync_gathers(sc, coll, lt, w_per, grad_reduce_bytes(sc, fsdp), np.where(sharded, shard_n, 1),
                                  dp_stride, p_local, fsdp & tr["allreduce"])
    rerun = zero3_rerun_share(sc, p_local)  # [23] the re-run forward's gathers, stage weights a micro-batch
    dense = DPColls(ag=ag_w, rs=rs_g, ar=ar_g, rep=ar_hsdp, inst=ar_inst)
    # what never hides: the stage's first unit's (bucket's) all-gather and its last one's reduction, 1/n_b of the dense
    # collectives (a stage's first forward unit and last backward one are dense: dp_expert_comm's units lie inside)
    edge = DPColls(*(x / n_b for x in dense.parts()))
    run = functools.partial(dp_exposure, sc, comp, tr, (fsdp, zero, allred), edge=edge, sync=sync, rerun=rerun,
                            stream_mb=stream_mb, shared={})  # (the two passes' shared figures: dp_exposure)
    total, exposed, mb_part, (n_red, n_ag, n_rs) = run(dense)
    # the stack's copies into and out of the collective buffers (FSDP2 copy-in/copy-out, the
    # fp32 cast before the reduce-scatter) run on the GPU's HBM, per unsharded parameter
    copies = np.where(fsdp, (n_ag * fs.allgather_copy_bytes + n_rs * fs.reduce_copy_bytes) * p_dp / sc.hbm, 0.0)
    total, exposed = total + amax_step, exposed + amax_step  # [39] the step's precomputed scales: exposed whole
    one_dp = dpcp == 1
    d_total, d_exposed, d_mb = (np.where(one_dp, 0.0, x) for x in (total, exposed, mb_part))
    e_total, e_exposed, e_mb = _dp_experts_part(sc, coll, run, dense, (total, exposed, mb_part),
                                                (np.maximum(stages["e"], pad_e), stages["u"], ddp_bucket), tr=tr)
    total, exposed, copies, p_dp_st, e_local, mb_part, e_total, e_exposed, e_mb = (_all_slots(sc, x, slots) for x in (
        d_total + e_total, d_exposed + e_exposed, np.where(dpcp > 1, copies, 0.0), stages["p"], stages["e"],
        d_mb + e_mb, e_total, e_exposed, e_mb))
    return DPTraffic(total=total, exposed=exposed, copies=copies, p_local=p_dp_st, e_local=e_local,
                     e_shard=moe.expert_shard(plan), counts=(n_red, n_ag, n_rs), mb=mb_part / sc.m, e_total=e_total,
                     e_exposed=e_exposed, e_mb=e_mb / sc.m)


def fsdp_gathers_fp8(sc: StepCtx) -> np.ndarray:
    """[39] Where FSDP all-gathers the converted weights as float8 (torchao's WeightWithDynamicFloat8CastTensor):
    fp8_allgather_on at an fsdp mode with a shard degree > 1 (torchtitan enables it only with dp_shard > 1,
    components/quantization/float8.py @e347b1e5e l. 86-90)."""
    plan = sc.plan
    return fp8_allgather_on(sc.settings, plan) & (plan.sharding >= FSDP) & (plan.shard > 1)


def fp8_weights_on(sc: StepCtx, slots: tuple) -> np.ndarray:
    """[39] Per comm_stages slot (a leading axis), the converted Float8Linear weights the slot's stage holds: its layers'
    (fp8_linears.converted_linears per kind, the stage's kind counts) plus the output layer's where the job converts it
    (fp8_output_layer: the last stage, every slot at pp 1). Not DualPipe's pairs (no torchtitan schedule)."""
    from .fp8_linears import converted_linears

    plan, settings = sc.plan, sc.settings
    per = [converted_linears(k.mixer, k.mlp, settings.filter_fqns, plan.f8r) for k in sc.ll.kinds]
    out = 1.0 if settings.fp8_output_layer else 0.0  # a job setting [14]
    rows = {st: weighted(sc.counts[st], per) + (out if st == "last" else np.where(plan.pp == 1, out, 0.0))
            for st in slots}
    return np.stack(np.broadcast_arrays(*(np.asarray(rows[st], dtype=np.float64) for st in slots)))


def fsdp_fp8_amax(sc: StepCtx, coll: Collectives, slots: tuple, shard_n, stride, fsdp) -> tuple:
    """[39] (per pass's all-gathers, once a step) seconds of torchao's amax all-reduces of FSDP's fp8 all-gather, per
    comm_stages slot: where the plan gathers fp8 (fp8_allgather_on, an fsdp mode, a recipe with fsdp_amax_bytes), each
    converted weight's amax (fsdp_amax_bytes) all-reduced over the FSDP shard group before each gather of it (a pass's
    gathers: one a weight), or with the job's fp8_precompute_scale one all-reduce of every weight's (fp8_weights_on x
    fsdp_amax_bytes) over that group and, at tp > 1, over the TP group, once a step after the optimizer, exposed."""
    plan = sc.plan
    b = sc.recipe["fsdp_amax"]
    on = fsdp & fsdp_gathers_fp8(sc) & (b > 0) & (shard_n > 1)
    if not np.any(on):
        return np.float64(0.0), np.float64(0.0)
    n_w = fp8_weights_on(sc, slots)
    if sc.settings.fp8_precompute_scale:  # a job setting
        size = n_w * np.where(on, b, 0.0)
        tp_ar = np.where(plan.tp > 1, coll(comm.ALL_REDUCE, size, np.where(on, plan.tp, 1), coll.strides["tp"]), 0.0)
        step = coll(comm.ALL_REDUCE, size, np.where(on, shard_n, 1), stride) + tp_ar
        return np.float64(0.0), np.where(on, step, 0.0)
    one = coll(comm.ALL_REDUCE, np.where(on, b, 0.0), np.where(on, shard_n, 1), stride)
    return np.where(on, n_w * one, 0.0), np.float64(0.0)


def dp_exposure(sc: StepCtx, comp: Compute, tr, masks, c: DPColls, edge: DPColls, sync=None, rerun=0.0,
                stream_mb=None, shared=None) -> tuple:
    """(total, exposed, per-micro-batch part x m, (gradient reductions, FSDP all-gathers, FSDP reduce-scatters) a step)
    of one pass's DP collectives `c` as the plan's mode moves them (fsdp_traffic at the FSDP levels, ddp_traffic below:
    masks (fsdp, zero, allred), tr stacks.sharding_traits), `edge` the part of them that never hides; dp_comm's for
    the dense traffic, and for the dense and routed experts' together (their windows shared). The per-micro-batch part:
    (m - 1) x what each micro-batch's own transfers expose (the last one's, the step's first gather and the edges at
    the step's end), the same branches as `exposed`; without overlap each reduction (ZeRO-2) or FSDP transfer of a
    micro-batch whole, or the gathers alone hidden where they always overlap [19]. comp's passes each dp_comm slot's
    own (dp_windows). shared: a dict dp_comm keeps over its two passes (the dense, the dense and experts'), whose
    other inputs agree: what reads no collective (the counts, the edges' figures) computed once."""
    fsdp, zero, allred = masks
    on = dp_overlap(sc.stack, sc.plan) > 0
    all_on = bool(np.all(on))  # every plan overlaps: the figures without overlap are read by none (not priced)
    f_total, f_exposed, n_ag, n_rs, f_gathers, f_x = fsdp_traffic(sc, comp, c, edge, tr, sync, rerun, off=not all_on,
                                                                  shared=shared)
    n_red, ddp_grad, ddp_total, ddp_exposed, ddp_x = ddp_traffic(sc, comp, tr, (zero, allred), c, edge, stream_mb,
                                                                 shared=shared)
    total = np.where(fsdp, f_total, ddp_total)
    # without overlap (dp_comm_overlap off) every DP transfer waits for, and is waited on by, compute
    # (the overlap as it runs: off at pp > 1 where the stack's pipeline runtime turns it off, plan.dp_overlap), but
    # a stack that prefetches its FSDP / ZeRO-3 gathers whatever the setting exposes the reductions alone [19]
    if all_on:  # np.where(on, ..., off)'s values and shape without the other branch (total's shape: the gathers')
        exposed = np.where(fsdp, f_exposed, ddp_exposed)
        exposed = np.array(np.broadcast_to(exposed, np.broadcast_shapes(*(np.shape(v) for v in (
            on, exposed, f_gathers, total)))))
        x_mb = np.where(fsdp, f_x[0], ddp_x)
        x_mb = np.array(np.broadcast_to(x_mb, np.broadcast_shapes(*(np.shape(v) for v in (
            on, x_mb, f_x[1], f_x[2], tr["reduce_mb"], ddp_grad)))))
    else:
        always = fsdp & sc.stack.overlap.fsdp_gathers_overlap_always
        off = np.where(always, f_gathers, total)
        exposed = np.where(on, np.where(fsdp, f_exposed, ddp_exposed), off)
        x_off = np.where(fsdp, np.where(always, f_x[1], f_x[2]), np.where(tr["reduce_mb"], ddp_grad, 0.0))
        x_mb = np.where(on, np.where(fsdp, f_x[0], ddp_x), x_off)
    mb = np.minimum((sc.m - 1.0) * x_mb, exposed)  # (the minimum absorbs rounding: exposed holds it)
    return total, exposed, mb, (n_red, n_ag, n_rs)


def ddp_traffic(sc: StepCtx, comp: Compute, tr, masks, c: DPColls, edge: DPColls, stream_mb=None, shared=None) -> tuple:
    """dp_comm's DDP / ZeRO-1 / ZeRO-2 traffic (the modes below FSDP): (gradient reductions a step, one reduction's
    seconds, total, exposed, one micro-batch's own exposure: 0 s where reduced once a step or queued [26]). masks:
    (zero, allred); c one pass's collectives (its reduce-scatter, all-reduce, optimizer instances' all-reduce and the
    weights' all-gather), edge their part that never hides (dp_exposure); comp's passes each stage's (dp_windows);
    shared: as fsdp_traffic's (the counts and the edges' figures once per dp_comm)."""
    zero, allred = masks
    # DDP / ZeRO-1: gradients once per step behind the last micro-batch's backward; ZeRO-2
    # reduce-scatters after every micro-batch's backward, as each rank keeps only its shard of
    # the accumulated gradients (DeepSpeed stage_1_and_2.py; "gradient reduction is required
    # after every backward because of gradient partitioning", deepspeedai/DeepSpeed issue
    # #2252, maintainer's answer; Megatron-FSDP optim_grads: grad_reduce_every_bprop) [5]: the
    # mode's grad_reduce (stacks.sharding_traits). The last bucket's reduction of each and the
    # first bucket's all-gather (1/n_b) never hide; the rest hides behind the backward / forward
    # pass (not the whole of it on top: exposed <= total)
    if shared is None or "ddp_edges" not in shared:  # (what reads no collective but the edges: once per dp_comm)
        n_red = np.where(tr["reduce_mb"], sc.m, 1.0)  # gradient reductions per step
        reduce_scatter = zero & ~allred
        g_edge, p_edge = np.where(reduce_scatter, edge.rs, edge.ar) + edge.inst, np.where(zero, edge.ag, 0.0)
        if shared is not None:
            shared["ddp_edges"] = (n_red, reduce_scatter, g_edge, p_edge)
    else:
        n_red, reduce_scatter, g_edge, p_edge = shared["ddp_edges"]
    ddp_grad = np.where(reduce_scatter, c.rs, c.ar) + c.inst
    ddp_param = np.where(zero, c.ag, 0.0)
    ddp_total = n_red * ddp_grad + ddp_param
    ddp_x = _hide(ddp_grad - g_edge, comp.bwd_mb, sc.x) + g_edge  # one reduction's exposure
    # the weights' all-gather behind the next forward but its first bucket, or with the job's dp_param_gather_overlap
    # false, or on a stack that gathers synchronously after the step (overlap.dp_param_gather_overlap_supported false:
    # DeepSpeed; a job and stack setting, not a searched quantity) exposed whole [40]
    if sc.settings.dp_param_gather_overlap is False or not sc.stack.overlap.dp_param_gather_overlap_supported:
        param_x = ddp_param
        ddp_exposed = np.minimum(n_red * ddp_x + param_x, ddp_total)
    else:  # (summed in this order: the figures as before the field)
        hidden = _hide(ddp_param - p_edge, comp.fwd_mb, sc.x)
        param_x = hidden + p_edge
        ddp_exposed = np.minimum(n_red * ddp_x + hidden + p_edge, ddp_total)
    ddp_x = np.where(tr["reduce_mb"], ddp_x, 0.0)  # a micro-batch's own (ZeRO-2), 0 s where reduced once a step
    # a stack whose runtime queues the per-micro-batch reductions behind the schedule's later passes [26]: what the
    # first stage's queue runs past the pipeline's compute, at the step's end (no per-micro-batch part)
    if sc.stack.overlap.grad_reduce_queued:  # a stack setting (the plan's mode and schedule: masks there)
        ddp_exposed, queued = queued_reductions(sc, comp, reduce_scatter & tr["reduce_mb"], ddp_grad, n_red,
                                                ddp_exposed, param_x, ddp_total, stream_mb)
        ddp_x = np.where(queued, 0.0, ddp_x)
    return n_red, ddp_grad, ddp_total, ddp_exposed, ddp_x


def dp_windows(sc: StepCtx, comp: Compute, slots: tuple) -> Compute:
    """comp with fwd_mb and bwd_mb each `slots` stage's own forward and backward a micro-batch (comp.passes,
    stage_passes; a leading axis of len(slots)): the windows dp_comm's transfers hide behind on each stage, known
    before critical_stage picks one (so the per-micro-batch part can weigh in that pick: no circularity). At pp 1 every
    slot the last's: the one stage is the whole model with the output layer (compute_time prices it there; the first
    slot's passes lack the head), as its DP traffic is the whole model's in both slots. Under DualPipe the first slot
    the last's too: both hold the end ranks' pair (_dp_stages), whose passes are the last slot's (stage_passes: the
    pair's mean, as the compute), not stage 0's alone."""
    one = sc.plan.pp == 1
    as_last = {"mid": one, "first": one | dualpipe_pairs(sc.plan), "last": False}
    last = comp.passes[CRITICAL_STAGES.index("last")]
    fwd, bwd = (np.stack(np.broadcast_arrays(*(np.where(as_last[st], last[j], comp.passes[CRITICAL_STAGES.index(st)][j])
                                               for st in slots)))
                for j in (0, 1))
    return dataclasses.replace(comp, fwd_mb=fwd, bwd_mb=bwd)


def _all_slots(sc: StepCtx, x, slots: tuple) -> np.ndarray:
    """Per-slot values over comm_stages' `slots` (a leading axis) on every CRITICAL_STAGES slot: the middle slot 0 where
    `slots` leave it out (no plan of the batch has a middle stage, so no step-end pick reads it)."""
    if len(slots) == len(CRITICAL_STAGES):
        return x
    x = np.broadcast_to(x, (len(slots),) + np.shape(sc.plan.tp))
    return np.concatenate((np.zeros((1,) + x.shape[1:]), x))


def dp_stage(dp: DPTraffic, crit) -> DPTraffic:
    """One stage's DP traffic of dp_comm's per-slot values: each plan's CRITICAL_STAGES slot `crit` (_heaviest's)."""
    return dataclasses.replace(dp, **{f: _pick(crit, *getattr(dp, f)) for f in ("total", "exposed", "copies", "p_local",
                                                                               "e_local", "mb", "e_total", "e_exposed",
                                                                               "e_mb")})


def muon_layout_padding(sc: StepCtx, pc, split, slots: tuple = CRITICAL_STAGES):
    """(dense, experts) elements per GPU of each CRITICAL_STAGES slot (a leading axis of 3; the middle: the
    composition with the most), its parameters and the padding of Muon's
    shard-aligned buffer (memory.muon_layout_excess's buffer floor, max(M, shard x the largest Muon parameter)) [28]:
    with the layer-wise optimizer's default layout DDP's reduce-scatter and all-gather run over the padded buckets
    (param_and_grad_buffer.py @d98e8a64: each bucket's whole range, dp_size x padded_shard_size), so the traffic is
    the padded buffer's, where the parameters' alone was priced. split: stage_param_split's end stages; the middle
    stages' compositions (sc.counts mid_all) each."""
    settings, plan = sc.settings, sc.plan
    copy = bool(sc.stack.memory.mtp_embedding_copy)
    shards = (plan.shard * plan.cp, moe.expert_shard(plan))
    stages = [("first", sc.counts["first"], split["first"], 1.0), ("last", sc.counts["last"], split["last"], 1.0)]
    stages += [("mid", c, params_of(pc, settings.model, plan, c, "mid"), np.where(plan.pp > 2, 1.0, 0.0))
               for c in sc.counts["mid_all"]]
    out = {st: [np.float64(0.0), np.float64(0.0)] for st in CRITICAL_STAGES}
    for end, counts, params, present in stages:
        mu = muon_params_of(pc, settings.model, plan, counts, end, copy)
        big = muon_largest_params(pc, settings.model, plan, counts, end, copy, chunks=True)  # every chunk's buffer
        for i in (0, 1):
            pad = muon_layout_excess(settings, plan, mu[i], big[i], shards[i])[0]
            out[end][i] = np.maximum(out[end][i], present * (params[i] + pad))
    return tuple(np.stack(np.broadcast_arrays(*(out[st][i] for st in slots))) for i in (0, 1))


def _dp_stages(sc: StepCtx, pc, split, mid, dual, slots: tuple = CRITICAL_STAGES) -> dict:
    """Each CRITICAL_STAGES slot's (middle, first, last; a leading axis of 3) "p" dense parameters a GPU, "n" its
    layers (the FSDP units a layer each), "e" routed-expert parameters and "u" MoE layers, what its DP traffic and
    optimizer step move and read. split: stage_param_split's, its middle the composition with the most expert
    parameters (`mid`, dp_comm's); the middle's dense parameters the most of sc.counts mid_all's compositions (Meta's
    405B: 8 layers a middle stage, 3.19e9 a GPU, against the last stage's 7 and the output layer, 3.05e9: stack
    pipeline_split trim_ends, Megatron's --account-for-*-in-pipeline-split, an uneven split); 0 in the middle slot where
    pp <= 2 (no middle stage: step_time leaves that slot out). DualPipe: every rank holds two stages, s and p - 1 - s,
    and reduces and steps both [8] (sec. 3.2.1: "DualPipe requires keeping two copies of the model parameters"): the
    end slots the end ranks' pair (first + last), the middle two middle stages.

    The MoE layers are a stage's FSDP units of experts where the stack's FSDP unit is a layer (no
    fsdp.fsdp_bucket_params): torchtitan wraps each MoE block's routed experts as their own FSDP2 unit,
    fully_shard(transformer_block.moe.experts, mesh=edp_mesh) (models/llama4/infra/parallelize.py @e347b1e5e apply_fsdp
    l. 381-409, which deepseek_v3's and qwen3's parallelize import; the router and shared experts stay in the block's
    unit), and Megatron-FSDP gives each unit's expert parameters their own parameter group and bucket ((fsdp_unit_id,
    is_expert_param) keys, megatron_fsdp/param_and_grad_buffer.py @d98e8a64 l. 1787-1799, 1829-1870: suggested_bucket_size
    splits only groups outside a unit): one expert collective a MoE layer, a multi-token-prediction module of a MoE kind
    one more on the last stage (as params_of counts its experts). At ep 1 torchtitan leaves the experts in the block's
    unit (one collective with the dense parameters): still priced as their own collectives here (assumed, their
    latency terms extra). Integers from the stage's layer counts (pipeline.stage_kind_counts)."""
    plan, n = sc.plan, sc.n
    moe_kind = [1.0 if k.has_experts else 0.0 for k in pc.layers.kinds]
    mtp = float(pc.layers.mtp_built) * sum(moe_kind[k] for k in pc.layers.mtp_kinds) if pc.layers.mtp else 0.0
    single = plan.pp == 1
    has_mid = plan.pp > 2
    # the middle's compositions' parameters where a slot is the middle's (comm_stages: some plan has pp > 2; 0 else)
    p_mid = (functools.reduce(np.maximum, [params_of(pc, sc.settings.model, plan, c, "mid")[0]
                                           for c in sc.counts["mid_all"]]) if "mid" in slots else 0.0)
    per = {"p": (np.where(has_mid, p_mid, 0.0), split["first"][0], split["last"][0]),
           "n": (np.where(has_mid, n["mid"], 0), n["first"], n["last"]),
           "e": (np.where(has_mid, split["mid"][1], 0.0), split["first"][1], split["last"][1]),
           "u": (np.where(has_mid, weighted(mid, moe_kind), 0.0),
                 weighted(sc.counts["first"], moe_kind) + np.where(single, mtp, 0.0),
                 weighted(sc.counts["last"], moe_kind) + mtp)}
    out = {}
    any_dual = bool(np.any(dual))  # (no plan of the batch DualPipe: each slot its own stage's, as np.where gives)
    for k, (m_, f_, l_) in per.items():
        m_, f_, l_ = (np.asarray(x, dtype=np.float64) for x in (m_, f_, l_))
        row = {"mid": m_, "first": f_, "last": l_}
        if any_dual:
            pair = f_ + l_
            row = {"mid": np.where(dual, 2.0 * m_, m_), "first": np.where(dual, pair, f_),
                   "last": np.where(dual, pair, l_)}
        out[k] = np.stack(np.broadcast_arrays(*(row[st] for st in slots)))
    return out


def queued_reductions(sc: StepCtx, comp: Compute, per_mb, ddp_grad, n_red, ddp_exposed, param_exposed, ddp_total,
                      stream_mb=None) -> np.ndarray:
    """The exposed DP time of a zero2 mode whose per-micro-batch reductions (`per_mb`: the plan reduces every
    micro-batch's gradients, not all-reduced) queue behind the schedule's later passes (stack
    overlap.grad_reduce_queued [26]), under 1F1B, the interleaved schedule or one stage; `ddp_exposed` (dp_comm's
    rule) elsewhere. Each chunk's reduction is issued as its backward ends and drained in issue order on one
    stream; what the first stage's queue runs past the pipeline's compute (pipeline.reduce_queue_overrun [12],
    in the compute stream's micro-batch `stream_mb`, split forward : backward as the stage's own passes) is
    exposed, the rest hides with the stack's exposed share; plus the weights' all-gather (`param_exposed`). Returns
    (exposed, the plans whose reductions queue): comp's passes each dp_comm slot's own (dp_windows), stream_mb the
    pipeline's pace before any DP part (step_time: the slowest stage's micro-batch)."""
    plan = sc.plan
    queued = per_mb & ((plan.pp == 1) | (plan.schedule == ONE_F_ONE_B) | (plan.schedule == INTERLEAVED))
    stream = comp.fwd_mb + comp.bwd_mb if stream_mb is None else stream_mb
    fwd_share = comp.fwd_mb / (comp.fwd_mb + comp.bwd_mb)
    over, _ = reduce_queue_overrun(plan.pp, sc.m, np.where(plan.pp > 1, plan.vpp, 1),
                                   microbatch_group(plan.pp, plan.microbatches, plan.mbg),
                                   stream * fwd_share, stream * (1.0 - fwd_share), ddp_grad)
    grads = n_red * ddp_grad
    over = np.minimum(over, grads)
    return np.where(queued, np.minimum(over + (grads - over) * sc.x + param_exposed, ddp_total), ddp_exposed), queued


def zero3_rerun_share(sc: StepCtx, p_local):
    """The weights DeepSpeed ZeRO-3 gathers a micro-batch beyond the forward's and the backward's under full
    recompute [23], as a share of the stage's (p_local): per fully recomputed layer of the middle stage (rc["mid"],
    its mean layer) the parameters of its submodules (memory.py zero3_modules) the reuse distance releases between
    the re-run and the backward (those with 2 x the parameters after them at or above stage3_max_reuse_distance);
    0 on a stack without fsdp.zero3_rerun_regathers. The re-run's own gathers replace the backward's of the modules
    kept (2 + released share in all, fsdp_traffic's 2 + this). The routed experts' rows count in the distance, not in
    the share (p_local is dense); their own gathers take the dense count (dp_expert_comm's n_ag: assumed).

    Why the middle stage's counts: every stack that sets zero3_rerun_regathers (or fsdp_prefetch_depth 1,
    zero3_sync_gathers) is a DeepSpeed one (startup_rules deepspeed), whose pipeline engine refuses ZeRO-2 and
    ZeRO-3 (microsoft/DeepSpeed @38327e07 deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ l. 77-78, start-up
    rule DEEPSPEED_PP_ZERO; Megatron-DeepSpeed's --no-pipeline-parallel asserts pp 1, megatron/arguments.py @f4157bea
    l. 94-96), so a ZeRO-3 plan has one stage, and at pp 1 the middle slot's counts are that stage's whole model
    (pipeline._stage_chunks at p 1), the stage whose time these gathers add to: no other stage to price (issue 22
    critstage2)."""
    if not sc.stack.fsdp.zero3_rerun_regathers or sc.settings.zero3 is None or sc.rc is None:
        return np.float64(0.0)
    from .memory import zero3_modules
    reuse = float(sc.settings.zero3["stage3_max_reuse_distance"])
    zero = np.float64(0.0)
    again = []
    for kind in sc.ll.kinds:
        mods = zero3_modules(kind, sc.ctx)  # every module counts in the reuse distance; the dense ones in the share
        dense = [s.name not in EXPERT_GEMMS for s, _ in kind.mixer.gemms(sc.ctx) + kind.mlp.gemms(sc.ctx)]
        again.append(sum((np.where(2.0 * sum(mods[j + 1:], zero) < reuse, 0.0, m) * float(d)
                          for j, (m, d) in enumerate(zip(mods, dense))), zero))
    return sc.rc["mid"] * sc.mean("mid", again) / np.maximum(p_local, 1.0)


def fsdp_traffic(sc: StepCtx, comp: Compute, c: DPColls, edge: DPColls, tr, sync=None, rerun=0.0, off=True,
                 shared=None):
    """(total, exposed, all-gathers, reduce-scatters, gathers-only exposed, per-micro-batch shares) of FSDP/HSDP per
    step [5], as the plan's
    mode moves its states (tr: stacks.sharding_traits): per micro-batch an all-gather of the
    weights in forward and, where the mode reshards after forward, another in backward (one
    that keeps them unsharded to the backward gathers in forward only); a reduce-scatter of the
    gradients per micro-batch, or once per step for a mode that accumulates without sync; under
    PP without resharding, one gather and one reduce per step; under PP resharding with the
    runtime's no-sync (regather_pp), the first forward's gather and one per backward, one reduce
    per step. HSDP's all-reduce across the
    replicas (ar_hsdp) runs with every reduce-scatter or once per step (the mode's
    replica_reduce). The first unit's all-gather and the last unit's reduce-scatter (`edge`: 1/n_b of
    the dense ones, a layer or a bucket) and the last replica all-reduce never hide; the rest hides
    behind the forward (all-gathers) and the backward (the backward all-gather, the
    reduce-scatter and the replica all-reduce) passes of its micro-batch. A stack that issues
    the backward all-gather only after the current unit's gradients (FSDP1 BACKWARD_POST) has
    nothing to hide it behind. c: one pass's collectives over the weights (DPColls: its all-gather,
    reduce-scatter and replica all-reduce read). The fifth value is the exposed time when only the all-gathers
    overlap and every
    reduce-scatter and replica all-reduce is waited on by the compute stream (DeepSpeed ZeRO-3 without
    overlap_comm [19]): the same gathers hidden as above, the reductions whole. sync: a stack that fetches one deep and
    synchronises (SyncGathers, zero3_sync_gathers [22]): its gathers and reductions, per micro-batch, in place of the
    units' and buckets' (the layers' reductions there once a micro-batch: the mode's grad_reduce microbatch; its trace
    holds every GEMM row's module, the routed experts' too, memory.zero3_modules, so c's beyond the dense add only
    their replica all-reduce). rerun:
    DeepSpeed ZeRO-3's extra gathers under full recompute, a share of the weights a micro-batch [23]
    (zero3_rerun_share), gathered in the backward beside its own gather where the mode reshards. The sixth value:
    what one micro-batch's own transfers expose of the exposed, the gathers-only and the total figures (each of them
    (m - 1) x that + the step's first gather, last reductions and edges, >= 0): dp_comm's per-micro-batch part. off
    False (dp_exposure, where every plan overlaps: nothing reads them): the gathers-only figure and the sixth value's
    last two zeros in their shapes, not priced (the sync path prices them whatever off). shared: a dict kept over
    dp_comm's passes (dp_exposure's), which holds what reads no collective once (the counts a step)."""
    plan, m, x = sc.plan, sc.m, sc.x
    ag_w, rs_g, ar_hsdp = c.ag, c.rs, c.rep
    keep_pp, reshard, regather = tr["keep_pp"], tr["reshard"], tr["regather_pp"]
    if shared is None or "fsdp_counts" not in shared:  # (what reads no collective: once per dp_comm, `shared`)
        extra = np.where(reshard & ~keep_pp & ~regather, rerun, 0.0)  # [23]
        # under PP with the runtime's no-sync, a mode that reshards after forward gathers m + 1 times
        # (stacks.sharding_traits regather_pp: once a backward, once the first forward)
        n_ag = np.where(keep_pp, 1.0, np.where(regather, m + 1.0, np.where(reshard, 2.0 + extra, 1.0) * m))
        n_rs = np.where(tr["reduce_mb"], m, 1.0)
        per_mb = n_rs == m
        n_ar = np.where(per_mb & tr["replica_mb"], m, 1.0)
        if shared is not None:
            shared["fsdp_counts"] = (extra, n_ag, n_rs, per_mb, n_ar)
    else:
        extra, n_ag, n_rs, per_mb, n_ar = shared["fsdp_counts"]
    ar_mb = np.where(n_ar == m, ar_hsdp, 0.0)  # a micro-batch's replica all-reduce (HSDP's replica_mb)
    if sync is not None:  # [22] one deep, synchronised: the layers' gathers and reductions as the fetches run them
        total = n_ag * sync.gather_pass + n_rs * sync.reduce_mb + n_ar * ar_hsdp
        bwd_g = np.where(reshard, sync.bwd_gathers, 0.0)
        x_on = sync.fwd + np.where(reshard, sync.bwd, sync.bwd - sync.bwd_gathers)
        exposed = m * x_on + n_ar * ar_hsdp
        x_g = sync.fwd + bwd_g + np.where(per_mb, sync.reduce_mb, 0.0) + ar_mb
        gathers = m * (sync.fwd + bwd_g) + n_rs * sync.reduce_mb + n_ar * ar_hsdp  # [19] the reductions waited on
        x_all = np.where(reshard, 2.0 + extra, 1.0) * sync.gather_pass + np.where(per_mb, sync.reduce_mb, 0.0) + ar_mb
        return (total, np.minimum(exposed, total), n_ag, n_rs, np.minimum(gathers, total),
                (x_on + ar_mb, x_g, x_all))
    total = n_ag * ag_w + n_rs * rs_g + n_ar * ar_hsdp
    ag_edge, rs_edge = edge.ag, edge.rs  # never hide: taken out of what can hide
    ag_b = np.where(reshard, ag_w * (1.0 + extra), 0.0)  # backward all-gather of one micro-batch (+ the re-run's [23])
    # reduce-scatter (and replica all-reduce) of one micro-batch
    rs_b = np.where(per_mb, rs_g, 0.0) + np.where(n_ar == m, ar_hsdp, 0.0)
    rs_b_last = np.where(per_mb, rs_g - rs_edge, 0.0)  # the last micro-batch's, less the last unit's

    def bwd_of(rs):  # exposed backward traffic of one micro-batch
        if sc.stack.overlap.fsdp_backward_prefetch:
            return _hide(ag_b + rs, comp.bwd_mb, x)  # both behind the micro-batch's backward
        return ag_b + _hide(rs, comp.bwd_mb, x)

    h_fwd, b_rs = _hide(ag_w, comp.fwd_mb, x), bwd_of(rs_b)  # (a whole forward gather's, a micro-batch's backward)
    fwd_ag = np.where(keep_pp | regather, _hide(ag_w - ag_edge, m * comp.fwd_mb, x),
                      _hide(ag_w - ag_edge, comp.fwd_mb, x) + (m - 1.0) * h_fwd)
    exposed = (fwd_ag + (m - 1.0) * b_rs + bwd_of(rs_b_last)
               + np.where(per_mb, 0.0, _hide(rs_g - rs_edge, comp.bwd_mb, x)) + ag_edge + rs_edge + ar_hsdp)
    # [19] the gathers hidden as above (a backward one behind its micro-batch's backward), the reductions exposed
    if not off:  # (dp_exposure: every plan overlaps) the figures without overlap unread: zeros in their shapes
        def unread(*xs):
            return np.broadcast_to(np.float64(0.0), np.broadcast_shapes(*(np.shape(v) for v in xs)))
        x_fwd = np.where(keep_pp | regather, 0.0, h_fwd)
        back = (ag_b, comp.bwd_mb, x, per_mb, rs_g, ar_mb)  # bwd_of(0.0)'s operands, rs_mb's and ar_mb
        return (total, np.minimum(exposed, total), n_ag, n_rs,
                unread(fwd_ag, ag_edge, n_rs, n_ar, ar_hsdp, total, *back),
                (x_fwd + b_rs, unread(x_fwd, *back), unread(keep_pp, regather, reshard, extra, ag_w, *back[3:])))
    gathers = fwd_ag + m * bwd_of(0.0) + ag_edge + n_rs * rs_g + n_ar * ar_hsdp
    # each micro-batch's own share of each (the sixth value; dp_comm's per-micro-batch part): its forward gather where
    # the mode gathers every forward (not keep_pp / regather_pp: once over the step's forwards), its backward's gather
    # and reductions; without overlap each transfer a micro-batch runs whole (n_ag / m of the weights' gathers)
    x_fwd = np.where(keep_pp | regather, 0.0, h_fwd)
    ag_mb = np.where(keep_pp, 0.0, np.where(regather, 1.0, np.where(reshard, 2.0 + extra, 1.0))) * ag_w
    rs_mb = np.where(per_mb, rs_g, 0.0)
    x_mb = (x_fwd + b_rs, x_fwd + bwd_of(0.0) + rs_mb + ar_mb, ag_mb + rs_mb + ar_mb)
    # each piece is at most its own traffic, so exposed <= total; the minimum only absorbs rounding
    return total, np.minimum(exposed, total), n_ag, n_rs, np.minimum(gathers, total), x_mb


def sync_cycle(gathers, computes, prefetch, x, after=None):
    """Exposed seconds of one round of a cycle of ZeRO-3 fetches that synchronise the device [22]: elements in trace
    order, each (gather seconds, 0 where its parameters are gathered already and the fetch neither gathers nor
    synchronises; compute seconds queued after its fetch; whether a prefetch is issued after its fetch, i.e. fewer
    than stage3_max_live_parameters gathered; `after`: communication issued after its fetch on the same group, the
    gradient reduction its hooks flush, waited by the next synchronize). A prefetched gather starts at the previous
    synchronize and, with the communication pending since, hides behind the compute queued since (_hide); one not
    prefetched is issued at its own fetch after a device synchronize (_allgather_param l. 798) and is exposed whole.
    The cycle repeats (a layer after a layer of the same kind): run twice, the second round's exposure returned."""
    after = [0.0] * len(gathers) if after is None else after
    since, pending, pre = np.float64(0.0), np.float64(0.0), np.asarray(True)
    for rnd in range(2):
        out = np.float64(0.0)
        for g, c, p, a in zip(gathers, computes, prefetch, after):
            fetch = np.asarray(g) > 0.0
            hid = np.where(pre, _hide(pending + g, since, x), _hide(pending, since, x) + g)
            out = out + np.where(fetch, hid, 0.0)
            since = np.where(fetch, 0.0, since) + c  # a synchronize empties the window
            pending = np.where(fetch, 0.0, pending) + a
            pre = np.where(fetch, p, pre)  # the decision of the last synchronising fetch
    return out


def bucket_flushes(mods: list, bucket: float):
    """The gradient elements each backward element's hook flushes (reduce_independent_p_g_buckets_and_remove_grads,
    a12aaedc stage3.py l. 1883-1889: a parameter whose gradient would overflow reduce_bucket_size flushes the bucket
    first), mods in backward order; the fill carries across layers: two rounds, the second's (exact where every
    gradient of a layer leaves within the layer; zero3_sync_gathers averages the others)."""
    zero = np.zeros(np.broadcast(*mods, np.float64(0.0)).shape)
    fill, out = zero, [zero] * len(mods)
    for _ in range(2):
        for j, m_j in enumerate(mods):
            flush = (fill + m_j > bucket) & (fill > 0.0)
            out[j] = np.where(flush, fill, 0.0)
            fill = np.where(flush, 0.0, fill) + m_j
    return out


@dataclass
class SyncGathers:
    """DeepSpeed ZeRO-3's one-deep synchronised fetches [22], per micro-batch on the middle stage (seconds)."""
    fwd: np.ndarray  # the forward's exposed gathers
    bwd: np.ndarray  # the backward's (with its re-run forward) exposed gathers and gradient reductions
    bwd_gathers: np.ndarray  # the same with the reductions apart (waited on whole: overlap_comm off)
    gather_pass: np.ndarray  # a pass's gathers, all of them
    reduce_mb: np.ndarray  # a backward's reductions, all of them


def zero3_sync_gathers(sc: StepCtx, coll: Collectives, lt: LayerTimes, w_per, g_per, group, stride, p_local,
                       allreduce) -> SyncGathers:
    """DeepSpeed ZeRO-3's one-deep synchronised fetches [22] on the middle stage, per micro-batch: per layer kind the
    forward cycle and the backward one (under full recompute the re-run forward, then the backward, a re-run module
    kept gathered to its backward fetching nothing there), x the stage's layers of the kind (n["mid"] x sc.mean;
    fully recomputed layers rc["mid"] take the re-run cycle). The gradient buckets each backward hook flushes
    (bucket_flushes) are reduced on the same process group as the gathers (reduction_stream; NCCL runs one group's
    collectives in order) and waited by the next fetch's device synchronize: in the backward cycle each is
    communication after its element. The parameters outside the layers (p_local less the layers': embedding,
    output layer) are gathered once a pass and reduced once a backward, exposed whole. The middle stage's counts are
    the one stage's whole model: a ZeRO-3 plan runs at pp 1 on every DeepSpeed stack (zero3_rerun_share's why)."""
    from .memory import zero3_modules
    plan, ctx, hw, z3 = sc.plan, sc.ctx, sc.settings.hardware, sc.settings.zero3
    reuse, live = float(z3["stage3_max_reuse_distance"]), float(z3["stage3_max_live_parameters"])
    bucket = float(z3["reduce_bucket_size"])

    def red(elems):  # one flushed bucket's reduction: an all-reduce [21], or a reduce-scatter
        return np.where(elems > 0.0, np.where(allreduce, coll(comm.ALL_REDUCE, elems * g_per, group, stride),
                                              coll(comm.REDUCE_SCATTER, elems * g_per, group, stride)), 0.0)

    fwd, plain, rerun, plain_g, rerun_g, lay, lay_g, lay_r = [], [], [], [], [], [], [], []
    for i, kind in enumerate(sc.ll.kinds):
        mix_rows = kind.mixer.gemms(ctx)
        rows = mix_rows + kind.mlp.gemms(ctx)
        mods = zero3_modules(kind, ctx)
        k = len(rows)
        # each parameter's all-gather (partition_parameters.py _all_gather l. 603-627: one collective a parameter)
        # into a torch.zeros buffer of its gathered size (_allgather_param l. 791-793: a write of the whole, before
        # the collective), through torch.distributed.all_gather into a list of world-size views of it (l. 809-819),
        # which NCCL gathers into a flat buffer of its own and copies out, view by view, on its stream (PyTorch 2021,
        # pytorch/pytorch @00f5dfd5 torch/lib/c10d/ProcessGroupNCCL.cpp ProcessGroupNCCL::allgather: read and write
        # the whole): 3 x the gathered bytes over HBM after the collective's own time, serial with it
        g = [coll(comm.ALL_GATHER, m_j * w_per, group, stride) + 3.0 * m_j * w_per / sc.hbm for m_j in mods]
        pre = [m_j < live for m_j in mods]  # prefetch_next_sub_modules l. 346: gathered below stage3_max_live_parameters
        # a row's forward GEMM seconds (price_gemms, as layer_times: over the GEMM speed factor), backward 2x [1]
        cf = [sum(price_gemms([r], hw, plan.precision, sc.gemm_cal).values()) / sc.speed for r in rows]
        cb = [2.0 * c for c in cf]
        if len(mix_rows) >= 2 and kind.mixer.has_core:  # the core between the input and output projections
            cf[len(mix_rows) - 2] = cf[len(mix_rows) - 2] + lt.core_fwd[i]
            cb[len(mix_rows) - 1] = cb[len(mix_rows) - 1] + lt.core_bwd[i]
        # every fetch's print_rank_0 f-string evaluates param.norm() of the module's parameters (stage3.py l. 441-445,
        # print_rank_0 l. 37-39 drops the message after): a read of the gathered weights on the compute stream
        cf = [c + m_j * w_per / sc.hbm for c, m_j in zip(cf, mods)]
        cb = [c + m_j * w_per / sc.hbm for c, m_j in zip(cb, mods)]
        zero = np.float64(0.0)
        # memory.py zero3_layer_peak's rule: a re-run module stays gathered to its backward where 2 x the parameters
        # after it are below stage3_max_reuse_distance
        keep = [2.0 * sum(mods[j + 1:], zero) < reuse for j in range(k)]
        back = list(reversed(range(k)))
        flushed = bucket_flushes([mods[j] for j in back], bucket)
        # where a layer's gradients do not all leave within it (a layer below the bucket: the bucket fills across
        # layers), each module's share of a full bucket's reduction, m_j / bucket of it, is its (averaged) flush
        steady = sum(flushed, zero) >= sum(mods, zero)
        ar = [np.where(steady, red(e), red(np.float64(bucket)) * mods[j] / bucket) for e, j in zip(flushed, back)]
        gb, cbb, pb = [g[j] for j in back], [cb[j] for j in back], [pre[j] for j in back]
        gk = [np.where(keep[j], 0.0, g[j]) for j in back]
        fwd.append(sync_cycle(g, cf, pre, sc.x))
        plain.append(sync_cycle(gb, cbb, pb, sc.x, ar))
        rerun.append(sync_cycle(g + gk, cf + cbb, pre + pb, sc.x, [0.0] * k + ar))
        plain_g.append(sync_cycle(gb, cbb, pb, sc.x))
        rerun_g.append(sync_cycle(g + gk, cf + cbb, pre + pb, sc.x))
        lay.append(sum(mods, zero))
        lay_g.append(sum(g, zero))
        lay_r.append(sum(ar, zero))
    n, rc = sc.n["mid"], sc.rc["mid"]
    out_p = np.maximum(p_local - n * sc.mean("mid", lay), 0.0)  # embedding and output layer, exposed whole
    rest = np.where(out_p > 0.0, coll(comm.ALL_GATHER, out_p * w_per, group, stride) + 3.0 * out_p * w_per / sc.hbm, 0.0)
    rest_r = red(out_p)
    gathers_b = (n - rc) * sc.mean("mid", plain_g) + rc * sc.mean("mid", rerun_g) + rest
    reduce_mb = n * sc.mean("mid", lay_r) + rest_r
    return SyncGathers(fwd=n * sc.mean("mid", fwd) + rest,
                       bwd=(n - rc) * sc.mean("mid", plain) + rc * sc.mean("mid", rerun) + rest + rest_r,
                       bwd_gathers=gathers_b, gather_pass=n * sc.mean("mid", lay_g) + rest, reduce_mb=reduce_mb)


def _dp_experts_part(sc: StepCtx, coll: Collectives, run, dense: DPColls, dense_fig: tuple, units: tuple,
                     tr=None) -> tuple:
    """dp_comm's routed experts' (total, exposed, per-micro-batch) seconds over their expert-data-parallel ranks (which
    dp x cp = 1 need not leave one): the same collectives a pass, reduced and gathered when the dense ones are, behind
    the same windows (run: dp_exposure over the dense and the experts' together; the experts' part what they add to
    the dense part's figures, dense_fig); units: (the stage's local expert parameters, its MoE layers, the DDP
    bucket); tr: the plans' sharding_traits (dp_comm's; None: priced here). Zeros for a model without experts (a model
    setting)."""
    zeros = tuple(np.zeros(np.shape(dense_fig[0])) for _ in range(3))
    if not sc.ll.has_experts:
        return zeros
    routed = dp_expert_comm(sc, coll, *units, tr=tr)
    joint = run(dense + routed)[:3]
    return tuple(np.maximum(j - d, 0.0) for j, d in zip(joint, dense_fig))


def dp_expert_comm(sc: StepCtx, coll: Collectives, e_local, e_units, ddp_bucket, tr=None) -> DPColls:
    """The routed experts' DP collectives of one pass over their parameters (e_local, each dp_comm slot's: its own
    experts), gradient reductions and FSDP / ZeRO weight gathers over the expert-data-parallel ranks, tp dp cp / (etp
    ep) (tp shard group cp / (etp ep): moe.expert_dp, moe.expert_shard), at their place in the folded expert grid
    (moe.expert_strides), in one collective a MoE layer (FSDP: e_units, _dp_stages) or the dense traffic's buckets
    (DDP / ZeRO: ddp_bucket parameters). dp_comm runs them with the dense ones (dp_exposure): reduced and gathered when
    the dense ones are, every micro-batch where the mode does so (ZeRO-2's reduce-scatter, FSDP's gathers and
    reductions: its per-micro-batch part), once a step elsewhere (the step end's), behind the same windows. As the
    stacks run them:

    - Megatron-LM @d98e8a64 megatron/core/distributed/distributed_data_parallel.py: the expert parameters' buffers
      over the expert-data-parallel group (l. 284-329: intra_expt_dp_group), bucketed at the dense bucket size into
      their own bucket groups (expert_parallel_bucket_groups, l. 342-355), each bucket's reduction issued by the same
      backward hook as the dense ones' (l. 553-587, register_grad_ready), on the last micro-batch (param_and_grad_
      buffer.py l. 863-885, is_last_microbatch, which no_sync l. 589-600 sets on both groups alike); the distributed
      optimizer's all-gather likewise over both;
    - Megatron-FSDP (megatron/core/distributed/fsdp/src/megatron_fsdp/ @d98e8a64): each FSDP unit's expert parameters
      their own parameter group (param_and_grad_buffer.py l. 1787-1799, (fsdp_unit_id, is_expert_param) l. 1948),
      whose buffers are over the expert groups (l. 2590-2612, get_fsdp_group(is_expert_parallel=...)), reduced in
      the same post-backward hook as the dense groups, every backward under optim_grads / optim_grads_params
      (megatron_fsdp.py _process_post_backward_gradients l. 707-787, grad_reduce_every_bprop l. 761-764) and on
      the last micro-batch under no_shard / optim;
    - torchtitan @e347b1e5e torchtitan/models/llama4/infra/parallelize.py apply_fsdp: each MoE block's routed experts
      their own FSDP2 unit over the edp mesh with the block's reshard_after_forward (l. 381-409), prefetched with
      their block where ep > 1 (l. 437-497), so gathered and reduce-scattered as often as the dense units.

    A stage's first forward unit or bucket (the embedding's, or its first layer's attention) and its last backward
    one are dense, so the experts' lie inside its passes: none of theirs is an edge (dp_comm's `edge`, assumed for
    Megatron's buckets, which follow the parameters' reverse order).

    Under HSDP the experts, sharded over the shard group's expert-data-parallel ranks, are
    replicated over the dp / shard_group replicas as the dense parameters are (memory.py's
    model_state_terms with moe.expert_shard), so their sharded gradients are all-reduced over
    the replicas too, the dense ar_hsdp's group (torchtitan: fully_shard(experts,
    mesh=["dp_replicate", "efsdp"]), models/llama4/infra/parallelize.py @e347b1e5e l. 188-194 and
    apply_fsdp l. 385-409, a 2-D mesh: reduce-scatter over efsdp, all-reduce over dp_replicate, torch
    _fsdp_collectives.foreach_reduce; issue 22, left out before); zero1's optimizer instances' all-reduce too. tr: the plans'
    stacks.sharding_traits where the caller has them (dp_comm's; None: read here)."""
    plan, fs = sc.plan, sc.stack.fsdp
    fsdp = plan.sharding >= FSDP
    zero = (plan.sharding >= ZERO1) & ~fsdp
    sharded = plan.sharding >= ZERO1
    e_shard, edp = moe.expert_shard(plan), moe.expert_dp(plan)
    e_st = moe.expert_strides(plan, coll.strides, ("edp",))["edp"]
    # FSDP: one collective a MoE layer's experts (_dp_stages), or a stated bucket's; DDP / ZeRO: its buckets
    n_fsdp = (np.asarray(e_units, dtype=np.float64) if fs.fsdp_bucket_params is None
              else np.ceil(e_local / fs.fsdp_bucket_params))
    n_be = np.maximum(np.where(fsdp, n_fsdp, np.ceil(e_local / ddp_bucket)), 1.0)
    # the experts' weights are linears' [12]; torchtitan's float8 Linear converter leaves the routed
    # experts (GroupedExperts, not nn.Linear) to bf16 gathers [15]
    w_per = gather_bytes(sc, zero, 1.0, 0.0)

    def e_coll(op, size, group):
        return n_be * coll(op, size / n_be, group, e_st)

    ag_we = _if_any(sharded, lambda: _layerwise_gather(sc, coll, e_coll, e_local * w_per, np.where(sharded, e_shard, 1),
                                                       e_st))
    red = grad_reduce_bytes(sc, fsdp)
    tr_all = (sharding_traits(sc.stack, plan) if tr is None else tr)["allreduce"]  # tr: the plan's, where given
    # ZeRO-3 of April 2021 all-reduces the experts' buckets too [21]
    rs_ge = e_coll(comm.REDUCE_SCATTER, e_local * red, np.where(sharded, e_shard, 1))
    rs_ge = np.where(fsdp & tr_all, _if_any(fsdp & tr_all, lambda: e_coll(
        comm.ALL_REDUCE, e_local * red, np.where(sharded, e_shard, 1))), rs_ge)
    # the BF16_Optimizer's all-reduce (dp_traffic), and Muon's layer-wise optimizer on its legacy path [28]
    allred = zero & (tr_all | layerwise_legacy(sc))
    ar_ge = _if_any(~sharded | allred, lambda: e_coll(comm.ALL_REDUCE, e_local * red, np.where(sharded & ~allred, 1, edp)))
    replicas = plan.dp // np.maximum(plan.shard, 1)
    # HSDP's replicas, or zero1's optimizer instances (dp_traffic's ar_inst: the experts' shards too)
    rep_on = (plan.sharding == HSDP) | (zero & (plan.shard < plan.dp))
    ar_he = np.where(rep_on, _if_any(rep_on, lambda: coll(comm.ALL_REDUCE, e_local * red / np.maximum(e_shard, 1),
                                                          replicas, coll.strides["dp"] * plan.shard)), 0.0)
    return DPColls(ag=ag_we, rs=rs_ge, ar=ar_ge, rep=np.where(fsdp, ar_he, 0.0), inst=np.where(zero, ar_he, 0.0))


# ----------------------------------------------------------------------------- optimizer, assembly
def offload_parts(sc: StepCtx, dp: DPTraffic, comp) -> dict:
    """CPU offload's step (planner/offload.py, a job setting): the rank's optimizer partition L (the dense one over
    the shard group, the routed experts' over theirs, as optimizer_time), the CPU's Adam over it shared by the node's
    ranks, memory-bound on the node's DRAM (offload.host_adam_bytes over host_memory_GBps x offload.HOST_MEMORY_EFFICIENCY, a
    named assumption, or a profile's calibrated fraction: settings.host_adam_efficiency), the host link's copies (offload.transfer_bytes, at the
    hardware's pcie_GBps a direction, the two directions at once) and what of them the backward hides, and the host
    bytes a rank holds (offload.host_bytes). Seconds and bytes, each array a plan."""
    plan, settings, spec = sc.plan, sc.settings, sc.stack.cpu_offload
    d_shard = plan.shard * plan.cp
    local = dp.p_local / np.where(plan.sharding >= ZERO1, d_shard, 1)
    if sc.ll.has_experts:
        local = local + dp.e_local / np.where(plan.sharding >= ZERO1, dp.e_shard, 1)
    n_red, n_ag, n_rs = dp.counts
    # the fraction of the DRAM peak the host's Adam sustains: offload.HOST_MEMORY_EFFICIENCY, or a profile's calibrated
    # one (settings.host_adam_efficiency: plan._host_adam, calibrate host-adam)
    host_bw = settings.hardware.host_memory_GBps * 1e9 * settings.host_adam_efficiency
    # the host's share of the partition: offload.switches' fraction (1 but on Megatron's HybridDeviceOptimizer)
    cpu_adam = offload.switches(settings)[0] * local * offload.node_ranks(settings) * offload.host_adam_bytes(settings.bpp) / host_bw
    down, up, after = offload.transfer_bytes(settings, local, sc.m, n_red, n_ag, n_rs, sc.stack, plan.sharding >= FSDP)
    link = settings.hardware.pcie_GBps * 1e9
    beside = np.maximum(down, up) / link  # full duplex: the two directions at once
    # hidden behind the step's backward (DeepSpeed: with overlap_comm the gradient hooks, stage_1_and_2.py l. 527-528,
    # copy on the reduction stream, l. 1382-1383; without it ZeRO-2's hooks copy on the compute stream and ZeRO-1
    # reduces after the backward) or forward and backward (FSDP2's gathers and reductions) where the plan overlaps its
    # data-parallel traffic (plan.dp_overlap, as it runs); what outlasts it exposed
    fsdp2 = spec.transfers == "fsdp2"
    if spec.transfers == "hybrid_device":  # Megatron's HybridDeviceOptimizer (offload.py): after the backward
        return _hybrid_device_parts(sc, dp, local, cpu_adam, down / link, after / link, down, after)
    window = sc.m * (comp.fwd_mb + comp.bwd_mb) if fsdp2 else sc.m * comp.bwd_mb
    hooked = dp_overlap(sc.stack, plan) > 0
    beside_exposed = np.where(hooked, np.maximum(beside - window, 0.0), beside)
    params_up = after / link
    host = offload.host_bytes(settings, local, local, sc.m, sc.stack)
    return {"offload_cpu_adam_s": cpu_adam, "offload_link_s": beside + params_up,
            "offload_link_exposed_s": beside_exposed + params_up,
            "offload_down_bytes": down, "offload_up_bytes": up + after, "offload_host_bytes_per_rank": host,
            "offload_host_bytes_per_node": host * offload.node_ranks(settings)}


def _hybrid_device_parts(sc: StepCtx, dp: DPTraffic, local, cpu_adam, down_s, up_s, down, up) -> dict:
    """Megatron's HybridDeviceOptimizer (planner/offload.py hybrid_device): the GPU steps the partition's 1 - f
    (optimizer_time's Adam over the rank's partition x (1 - f), an elementwise pass) while the CPU steps f; the
    gradients' copy down and the parameters' copy up follow the backward. Without offload_overlap all on the compute
    stream: down, then the longer of the two steps, then up; with it pipelined per parameter: the longest of the four
    (an assumption, offload.py). optimizer term = the whole; offload_link_exposed_s what the copies add to the
    longer step."""
    settings = sc.settings
    f = offload.switches(settings)[0]
    gpu_adam = (1.0 - f) * optimizer_time(sc, dp)
    steps = np.maximum(gpu_adam, cpu_adam)
    total = (np.maximum(steps, np.maximum(down_s, up_s)) if settings.offload_overlap
             else down_s + steps + up_s)
    host = offload.host_bytes(settings, local, local, sc.m, sc.stack)
    return {"offload_cpu_adam_s": cpu_adam, "offload_gpu_adam_s": gpu_adam, "offload_link_s": down_s + up_s,
            "offload_link_exposed_s": total - steps, "offload_down_bytes": down, "offload_up_bytes": up,
            "offload_host_bytes_per_rank": host, "offload_host_bytes_per_node": host * offload.node_ranks(settings)}


def optimizer_time(sc: StepCtx, dp: DPTraffic) -> np.ndarray:
    """Adam over the local shard: reads master, m, v and the gradient, writes master, m, v and
    the bf16 weight (adam_bytes_per_param: 28 B/param with fp32 states and bf16 grads) over HBM
    bandwidth; the routed experts' shard over the expert-data-parallel ranks; a mode's gradient accumulation
    buffer's passes over every local parameter (DeepSpeed's BF16_Optimizer: HP_ACCUM_BYTES a micro-batch,
    HP_CLEAR_BYTES a step)."""
    plan, bpp = sc.plan, sc.settings.bpp
    # the optimizer's shard groups: the shard group's, or dp x cp under HSDP's outer-DP sharding [29]
    oo = outer_optim(sc.stack, plan, sc.settings.mfsdp_outer_optim)
    d_shard, e_whole = optimizer_shards(sc.stack, plan, sc.settings.mfsdp_outer_optim, experts=sc.ll.has_experts)
    local_shard = dp.p_local / np.where(plan.sharding >= ZERO1, d_shard, 1)
    per_param = adam_bytes_per_param(bpp, master_bytes(sc.settings, plan))  # per mode: memory.py [mw]
    out = local_shard * per_param / sc.hbm
    if sc.ll.has_experts:
        e_shard = np.where(oo, e_whole, dp.e_shard)
        out = out + dp.e_local / np.where(plan.sharding >= ZERO1, e_shard, 1) * per_param / sc.hbm
    # a mode's gradient accumulation buffer (DeepSpeed's BF16_Optimizer, memory.py [bo]): after every micro-batch's
    # backward each bf16 gradient is cast and added into it (bf16_optimizer.py @38327e07 _update_hp_grad l. 332-347,
    # hp_grad.add_(lp.grad.to(fp32)): read 2 B, write the fp32 copy 4 B, read it and the buffer 4 + 4, write 4:
    # 18 B a parameter), and the step zeroes it (clear_hp_grads l. 438-443: 4 B written), over every local parameter
    acc = np.where(grad_accum_bytes(sc.stack, plan) > 0, 1.0, 0.0)
    accum_pass = (dp.p_local + (dp.e_local if sc.ll.has_experts else 0.0)) * acc * (HP_ACCUM_BYTES * sc.m + HP_CLEAR_BYTES)
    return out + accum_pass / sc.hbm


# Muon's Newton-Schulz steps a momentum (Megatron-LM @d98e8a64 optimizer_config.py l. 279 muon_num_ns_steps = 5,
# arguments.py l. 2648 --muon-num-ns-steps default 5) [28]
MUON_NS_STEPS = 5


def newton_schulz_gemms(rows, cols, count=1.0, steps=MUON_NS_STEPS, oriented=False):
    """[(GemmShape, count)] of the Newton-Schulz iteration on `count` whole rows x cols matrices [28]: m = min, n = max
    (the transpose to the smaller side), per step X X^T [m, m, n], b A + c A A [m, m, m], a X + B X [m, n, m].
    oriented: the matrices are layers/common.py muon_distributed's (the Gram side m = rows, whatever the smaller: the
    distributed TP mode's transpose by partition_dim, not by size)."""
    if oriented:
        m, n = np.asarray(rows, dtype=np.float64), np.asarray(cols, dtype=np.float64)
    else:
        m, n = np.minimum(rows, cols).astype(np.float64), np.maximum(rows, cols).astype(np.float64)
    return shapes([("ns_gram", m, m, n, steps * count), ("ns_poly", m, m, m, steps * count),
                   ("ns_update", m, n, m, steps * count)])


def _ns_seconds(mats, hw, cal, steps=MUON_NS_STEPS, oriented=False, slow=1.0) -> tuple:
    """(dense, experts) seconds of the Newton-Schulz iterations on matrices (rows, cols, count, group) [28], bf16
    (--muon-fp32-matmul-prec medium) at compute.price_gemms' rates, x slow at another precision (muon_gemm_slowdown),
    `steps` steps (the job's muon_ns_steps); oriented: newton_schulz_gemms'."""
    out = [0.0, 0.0]
    for rows, cols, count, group in mats:
        gemms = newton_schulz_gemms(rows, cols, count, steps, oriented)
        out[1 if group == "expert" else 0] += slow * sum(price_gemms(gemms, hw, "bf16", cal).values())
    return out[0], out[1]


# the dense TF32 tensor-core peak a dense BF16 one: NVIDIA's datasheets, A100 SXM TF32 156 / BF16 312 TFLOPS, H100 SXM
# 494.7 / 989.4 (the planner's reference hardware table, H100_SXM_80GB and A100_SXM4_40GB notes); measured, H100 torch.mm
# at 4096^3 TF32 402.15 / BF16 788.72 TFLOPS = 0.51 (zzc0721/torch-performance-test-data issue #79, the reference GEMM
# measurements) [28]
TF32_PER_BF16 = 0.5
# bytes an element of Newton-Schulz's X, A and B and of the Gram all-reduce, by the job's muon_fp32_matmul_prec:
# medium casts X to bf16 (muon_utils.py v0.3.0 l. 203-213), high and low leave the fp32 X fp32 [28]
MUON_NS_ELEMENT_BYTES = {"medium": 2.0, "high": 4.0, "low": 4.0}


def muon_gemm_slowdown(hw, prec: str) -> float:
    """Newton-Schulz GEMM seconds at the job's muon_fp32_matmul_prec over bf16's (price_gemms' bf16 rate, its plateau
    and wave efficiency, scaled by the peaks' ratio) [28]: medium 1 (bf16 GEMMs); high, torch's 'high' (TF32 tensor
    cores for fp32 matmuls), 1 / TF32_PER_BF16; low, which torch does not know (Context.cpp setFloat32MatmulPrecision
    warns 'the current setFloat32MatmulPrecision call has no effect', so the default highest stays: Megatron-LM
    @d98e8a64 sets no other, no set_float32_matmul_precision or allow_tf32 under megatron/), fp32 GEMMs off the tensor
    cores, bf16_TFLOPS / fp32_TFLOPS (plan._muon_matmul_prec refuses low where the hardware gives no fp32 peak)."""
    if prec == "high":
        return 1.0 / TF32_PER_BF16
    if prec == "low":
        return float(hw.bf16_TFLOPS) / float(hw.fp32_TFLOPS)
    return 1.0


def muon_ns_time(sc: StepCtx, dp: DPTraffic) -> np.ndarray:
    """Seconds per step of Muon's Newton-Schulz iterations on one GPU of each stage (_muon_stages' slots) [28]: each layer
    kind's whole matrices' time, summed over the stage's layers (+ a learned position table on the first stage, the
    multi-token-prediction modules on the last), the dense ones / (dp x cp) and the routed experts / (ep x the
    expert-data-parallel ranks) at sharding zero1 (Muon's layer-wise distributed optimizer; the rank's E / ep experts,
    whole on every expert-TP rank), the dense whole and the experts / ep at sharding none; the job's muon_ns_steps
    steps (--muon-num-ns-steps: Emerging-Optimizers v0.3.0 muon_utils.py newton_schulz's loop l. 216-217 runs the
    step, l. 315-319, once for each of get_coefficient_iterator's `steps` coefficient sets, l. 81-110, 199)."""
    hw, cal, steps = sc.settings.hardware, sc.gemm_cal, sc.settings.muon_ns_steps
    tp, etp, blockwise = sc.plan.tp, moe.etp_of(sc.plan), muon_blockwise(sc)
    slow = muon_gemm_slowdown(hw, sc.settings.muon_fp32_matmul_prec)  # a job setting
    if muon_distributed_mode(sc):  # a job setting: each TP rank's shard, the Gram on the unpartitioned side
        return _muon_stages(sc, dp, lambda mats: _ns_seconds(muon_distributed(mats, tp, etp), hw, cal, steps,
                                                                 oriented=True, slow=slow))
    return _muon_stages(sc, dp, lambda mats: _ns_seconds(muon_local(mats, tp, etp, blockwise), hw, cal, steps,
                                                             slow=slow))


def muon_distributed_mode(sc: StepCtx) -> bool:
    """Whether the job's Muon runs its distributed TP mode (the job's muon_tp_mode) [28]: newton_schulz_tp
    (Emerging-Optimizers v0.3.0 muon_utils.py l. 279-286) transposes each rank's shard by its partition_dim (0: the
    shard's transpose, 1: as it is), so the iteration's Gram side is the matrix's unpartitioned one, and
    newton_schulz_step all-reduces the Gram A = X X^T over the TP group every step (l. 315-317), the normalisation's
    sum of squares once (distributed_normalize_p2 l. 120-124): layers/common.py muon_distributed, muon_gram_time."""
    return sc.settings.muon_tp_mode == "distributed"  # a job setting


def muon_gram_time(sc: StepCtx, coll: Collectives, dp: DPTraffic) -> np.ndarray:
    """Seconds per step of the all-reduces Muon's distributed TP mode runs on a TP-split matrix [28]: each of the
    job's muon_ns_steps steps the m x m Gram (m the unpartitioned side; MUON_NS_ELEMENT_BYTES an element: bf16 under
    medium, fp32 otherwise) over the TP group (the expert-TP group for the routed experts), and once the fp32 sum of
    squares (distributed_normalize_p2, MUON_NORM_BYTES), each waited on (the next GEMM reads it; torch.distributed
    all_reduce, synchronous), on the matrices the rank steps (as muon_ns_time divides them); none for the matrices
    whole on every rank (group rep: the fallback newton_schulz, no tp_group, l. 263-265), none at tp 1, none in the
    other TP modes. Inside tp_comm."""
    plan = sc.plan
    if not muon_distributed_mode(sc):  # a job setting
        return np.zeros((len(CRITICAL_STAGES),) + np.shape(plan.tp))
    s_tp = coll.strides["tp"]
    etp = moe.etp_of(plan)
    s_etp = moe.expert_strides(plan, coll.strides, ("etp",))["etp"] if sc.ll.has_experts else s_tp
    steps, b = sc.settings.muon_ns_steps, MUON_NS_ELEMENT_BYTES[sc.settings.muon_fp32_matmul_prec]

    def grams(mats):
        d, e = 0.0, 0.0
        for gram, _local, count, group in muon_distributed(mats, plan.tp, etp):
            if group == "expert":
                e = e + count * (steps * coll(comm.ALL_REDUCE, b * gram * gram, etp, s_etp)
                                 + coll(comm.ALL_REDUCE, MUON_NORM_BYTES, etp, s_etp))
            elif group == "split":
                d = d + count * (steps * coll(comm.ALL_REDUCE, b * gram * gram, plan.tp, s_tp)
                                 + coll(comm.ALL_REDUCE, MUON_NORM_BYTES, plan.tp, s_tp))
        return d, e
    return _muon_stages(sc, dp, grams)


# the normalisation's all-reduce under the distributed TP mode: one fp32 scalar, (x * x).sum() of the fp32 momentum
# shard (muon_utils.py v0.3.0 distributed_normalize_p2 l. 122-123) [28]
MUON_NORM_BYTES = 4.0


def muon_blockwise(sc: StepCtx) -> bool:
    """Whether the job's Muon runs its blockwise TP mode (the job's muon_tp_mode, else the stack's runs.optimizers
    muon_tp_mode: Megatron-LM @d98e8a64 duplicated, optimizer_config.py l. 282; Bridge's 905c0e386 blockwise, l. 277-278)
    [28]: each TP rank's Newton-Schulz on its own shard (layers/common.py muon_local), no TP all-gather."""
    return sc.settings.muon_tp_mode == "blockwise"  # a job setting


def muon_gather_time(sc: StepCtx, coll: Collectives, dp: DPTraffic) -> np.ndarray:
    """Seconds per step of the TP all-gathers Muon's duplicated mode runs before each TP-split matrix's iteration
    [28] (newton_schulz_tp l. 273-274: the fp32 momentum's shards, 4 B an element of the whole matrix, the nccl-tests
    size; the experts' over the expert-TP group), one collective a matrix, waited on (the iteration reads it), on
    the matrices the rank steps (as muon_ns_time divides them); none at tp 1 (etp 1). Inside tp_comm."""
    plan = sc.plan
    s_tp = coll.strides["tp"]
    etp = moe.etp_of(plan)
    s_etp = moe.expert_strides(plan, coll.strides, ("etp",))["etp"] if sc.ll.has_experts else s_tp

    def gathers(mats):
        d, e = 0.0, 0.0
        for rows, cols, count, group in mats:
            if group == "expert":
                e = e + count * coll(comm.ALL_GATHER, MUON_GATHER_ELEMENT_BYTES * rows * cols, etp, s_etp)
            elif group == "split":
                d = d + count * coll(comm.ALL_GATHER, MUON_GATHER_ELEMENT_BYTES * rows * cols, plan.tp, s_tp)
        return d, e
    if sc.settings.muon_tp_mode != "duplicated":  # a job setting: blockwise and distributed gather nothing
        return np.zeros((len(CRITICAL_STAGES),) + np.shape(plan.tp))
    return _muon_stages(sc, dp, gathers)


# the fp32 momentum Muon's duplicated TP mode all-gathers, bytes an element (muon_utils.py v0.3.0 l. 273-274:
# torch.empty_like of the fp32 main parameter's momentum) [28]
MUON_GATHER_ELEMENT_BYTES = 4.0


def _largest(price, mats) -> tuple:
    """(dense, experts) of price() on the single matrix of `mats` (rows, cols, count, group) with the most, 0.0 for
    none: what the rank holding it whole pays at least [28] (count 1: one matrix, not its layer's count)."""
    out = [np.float64(0.0), np.float64(0.0)]
    for rows, cols, _count, group in mats:
        i = 1 if group == "expert" else 0
        out[i] = np.maximum(out[i], price(((rows, cols, 1, group),))[i])
    return out[0], out[1]


def layerwise_legacy(sc: StepCtx) -> bool:
    """Whether the job runs Muon's layer-wise distributed optimizer on its legacy path (the job's
    optimizer_whole_tensors, --no-use-layer-wise-param-layout) [28]: no shard-aligned layout handed to DDP
    (training/models/dist_utils.py @d98e8a64 _ddp_wrap l. 322-334 re-enables ddp_config.use_distributed_optimizer only
    with the layout; validate_args turned it off, arguments.py l. 1734-1736), so DDP all-reduces the whole gradient
    buffer (param_and_grad_buffer.py: reduce-scatter only under use_distributed_optimizer) and the optimizer's
    step_with_ready_grads (layer_wise_optimizer.py l. 965-994) runs allgather_params (l. 817-868): each rank's
    updated bf16 parameters flattened and gathered in one torch.distributed.all_gather over dp x cp (the experts' over
    the expert-data-parallel ranks), waited on, or bucket by bucket in the forward's pre-hooks with
    --overlap-param-gather (set_bucket_layerwise_params_list l. 764-815). With the layout (the default) the gather is
    DDP's own bucketed start_param_sync of the padded buffer (l. 945-963), the distributed optimizer's (zero1's)."""
    return bool(sc.settings.optimizer_whole_tensors)  # a job setting


def _layerwise_gather(sc: StepCtx, coll: Collectives, bucketed, size, group, stride):
    """Seconds of the parameter all-gather of `size` bytes over `group` ranks: bucketed(ALL_GATHER, size, group), the
    stack's buckets, but on Muon's layer-wise optimizer's legacy path (layerwise_legacy [28]: its gradients
    all-reduced, dp_comm's allred) without the DP overlap allgather_params' one all_gather of the rank's flattened
    shard (layer_wise_optimizer.py @d98e8a64 l. 838-853) at `stride`; with --overlap-param-gather the forward's
    per-bucket gathers (set_bucket_layerwise_params_list), so not where the job's dp_param_gather_overlap is false
    (step_with_ready_grads l. 975-985 runs allgather_params then, [40])."""
    ag = bucketed(comm.ALL_GATHER, size, group)
    if not layerwise_legacy(sc):  # a job setting (zero1 only: plan._optimizer)
        return ag
    if sc.settings.dp_param_gather_overlap is False:  # a job setting: no per-bucket gathers in the forward
        return coll(comm.ALL_GATHER, size, group, stride)
    return np.where(dp_overlap(sc.stack, sc.plan) > 0, ag, coll(comm.ALL_GATHER, size, group, stride))


def _muon_stages(sc: StepCtx, dp: DPTraffic, price) -> np.ndarray:
    """Each CRITICAL_STAGES slot's (a leading axis of 3: middle, first, last) price(matrices) -> (dense, experts)
    seconds [28], on the stage's worst rank (the middle: the composition with the most; 0 at pp <= 2, where there is
    no middle stage and step_end_stage leaves the slot out; DualPipe: a rank's two stages, first + last on the end
    ranks, as _dp_stages pairs them): each
    layer kind's, weighted by the stage's layers, + a learned position table (max_seq x h) on the first stage and the
    MTP modules (eh_proj h x 2h and one layer each) on the last; at sharding zero1 the dense / (dp x cp) and the
    experts / (ep x edp), but never below the largest single matrix of the stage, dense and expert each (the
    layer-wise optimizer hands whole parameters to a rank, layer_wise_optimizer.py @d98e8a64 _emit_bucket l. 275-346
    and _shard_params_ping_pong l. 713-762: the rank holding the largest matrix steps it whole, whatever dp x cp;
    under the default layout the compute-balanced LPT sorts by Newton-Schulz cost and sends the costliest matrix of
    each buffer, dense and expert apart, to shard 0, min() returning the first of the equally empty shards,
    l. 314-329); the dense whole and the experts / ep at sharding none. The floor is exact where a stage's matrices
    are no more than its ranks (each rank then holds one at most: LPT places each on an empty shard) and a lower
    bound above (list scheduling's max(mean, largest) <= worst <= mean + largest). Model chunks (vpp > 1) under the
    layout: each chunk has a layout of its own whose LPT starts from empty loads (dist_utils.py @d98e8a64 _ddp_wrap
    l. 354-396; layer_wise_optimizer.py l. 256), so shard 0, dp rank 0, steps every chunk's costliest matrix
    (memory.py [mu], muon_layout_excess): with c = 1 + memory.muon_other_chunks chunks, each taken as 1 / c of the
    stage, max(mean / c, the largest) + (c - 1) max(mean / c, the smallest held kind's largest) (c = 1 on the
    legacy path, whose ping-pong deals the stage's tensors as one list, and at sharding none)."""
    model, plan = sc.settings.model, sc.plan
    split = sc.settings.muon_split_qkv  # a job setting: linear_qkv split or whole (LayerKind.muon_matrices)
    # (the split also skipped where tp does not divide the KV heads: Attention.muon_matrices)
    kinds = [price(k.muon_matrices(split, plan.tp)) for k in sc.ll.kinds]
    big_k = [_largest(price, k.muon_matrices(split, plan.tp)) for k in sc.ll.kinds]
    dense_k, exp_k = [d for d, _ in kinds], [e for _, e in kinds]
    h = model.hidden_size
    pos = price(((model.max_seq_len, h, 1, "rep"),))[0] if model.position_embedding == "learned" else 0.0
    mtp, mtp_big = (0.0, 0.0), (0.0, 0.0)
    if model.mtp_layers:  # a model setting
        mats = ((h, 2 * h, 1, "split"),) + sum((sc.ll.kinds[k].muon_matrices(split, plan.tp) for k in sc.ll.mtp_kinds),
                                               ())
        mtp, mtp_big = price(mats), _largest(price, mats)
        mtp = (sc.ll.mtp_built * mtp[0], sc.ll.mtp_built * mtp[1])  # the weights built (one where shared)
    single = plan.pp == 1
    d_div = np.where(plan.sharding >= ZERO1, plan.shard * plan.cp, 1).astype(np.float64)
    # a rank's experts are E / ep of each layer's (every expert-TP rank runs them whole), of which it steps 1 / edp
    e_div = plan.ep * np.where(plan.sharding >= ZERO1, dp.e_shard, 1).astype(np.float64)

    def held(counts, i):  # the largest matrix among the layer kinds the stage holds (counts (K, ...))
        return functools.reduce(np.maximum, (np.where(np.asarray(c) > 0, b[i], 0.0) for c, b in zip(counts, big_k)),
                                np.float64(0.0))

    def small(counts, i):  # the smallest of those kinds' largest matrices: each other model chunk's, at least
        m = functools.reduce(np.minimum, (np.where(np.asarray(c) > 0, b[i], np.inf) for c, b in zip(counts, big_k)),
                             np.float64(np.inf))
        return np.where(np.isfinite(m), m, 0.0)

    layout = (plan.sharding >= ZERO1) & (not layerwise_legacy(sc))  # the layout's one per chunk (a job setting)

    def group(mean, big, each, o):  # max(mean / c, big) + (c - 1) max(mean / c, each), c = 1 + o
        m = mean / (1.0 + o)
        return np.maximum(m, big) + o * np.maximum(m, each)

    def stage(counts, end, dense_extra, exp_extra, dense_big, exp_big):
        o = np.where(layout, muon_other_chunks(plan, counts, end), 0.0)
        dense = group((weighted(counts, dense_k) + dense_extra) / d_div, np.maximum(held(counts, 0), dense_big),
                      small(counts, 0), o)
        return dense + group((weighted(counts, exp_k) + exp_extra) / e_div, np.maximum(held(counts, 1), exp_big),
                             small(counts, 1), o)

    first = stage(sc.counts["first"], "first", pos + np.where(single, mtp[0], 0.0), np.where(single, mtp[1], 0.0),
                  np.maximum(pos, np.where(single, mtp_big[0], 0.0)), np.where(single, mtp_big[1], 0.0))
    last = stage(sc.counts["last"], "last", mtp[0] + np.where(single, pos, 0.0), mtp[1],
                 np.maximum(mtp_big[0], np.where(single, pos, 0.0)), mtp_big[1])
    # the middle stages' candidate compositions (C, K, ...): the one with the most, not the slowest's (counts["mid"])
    mids = sc.counts.get("mid_all", sc.counts["mid"][None])
    mid = np.where(plan.pp > 2, functools.reduce(np.maximum, (stage(c, "mid", 0.0, 0.0, 0.0, 0.0) for c in mids)), 0.0)
    dual = dualpipe_pairs(plan)
    if np.any(dual):  # every rank steps its two stages [8] (_dp_stages)
        mid, first, last = np.where(dual, 2.0 * mid, mid), np.where(dual, first + last, first), np.where(dual, first + last, last)
    return np.stack(np.broadcast_arrays(mid, first, last))


# DeepSpeed's BF16_Optimizer's HBM bytes a parameter (optimizer_time): each micro-batch's cast-and-add of the bf16
# gradient into the fp32 buffer (bf16_optimizer.py @38327e07 l. 342: read 2, write 4, read 4 + 4, write 4) and the
# step's zeroing of the buffer (l. 440: write 4)
HP_ACCUM_BYTES = 2.0 + 4.0 + 4.0 + 4.0 + 4.0
HP_CLEAR_BYTES = 4.0


# the plan fields a layer's own time reads (layer_times: its GEMMs, core, memory-bound kernels,
# casts, MoE permutations and host issue, and what selective recompute re-runs)
LAYER_TIME_FIELDS = ("tp", "cp", "ep", "etp", "mbs", "seq", "sp", "precision", "recompute", "compile", "f8r", "fge")


def grouped_layer_times(sc: StepCtx) -> LayerTimes:
    """layer_times(sc), once per distinct tuple of LAYER_TIME_FIELDS (terms.Groups). Per
    candidate where that shares nothing, or where an input beside the plan is an array of
    candidate values, which the plan's fields do not key: a calibration fit's run knobs
    (profile.RunKnobs) or stack figures (scripts/fit_moe_host.py). Such an array has the
    candidates' length, not the groups' (each group holds fewer candidates than the plan
    here), so it fails to broadcast or leaves a result that Groups.expand refuses."""
    kn = sc.settings.knobs
    # without gradient-accumulation fusion the layer's backward reads the sharding level too (wgrad_add_bytes [11])
    g = Groups(sc.plan, LAYER_TIME_FIELDS + _disp_field(sc.settings) + _wgrad_field(sc.settings))
    if (not g.active or g.size == g.n or np.ndim(kn.gemm_efficiency_scale)
            or np.ndim(kn.memory_bound_efficiency_scale)):
        return layer_times(sc)
    try:
        lt = layer_times(_context(sc.settings, g.plan, placed=False))
        return LayerTimes(*g.expand(tuple(getattr(lt, f.name) for f in dataclasses.fields(LayerTimes))))
    except ValueError:  # an array of candidate values beside the plan (docstring): priced per candidate
        return layer_times(sc)


def _compute_pass(settings: Settings, plan: PlanArrays, picked: bool = True) -> tuple[StepCtx, LayerTimes, "Compute"]:
    """The context, layer times and pipeline compute step_time starts from (no communication; picked: compute_time's)."""
    sc = _context(settings, plan)
    lt = grouped_layer_times(sc)
    slowest_middle(sc, lt)
    return sc, lt, compute_time(sc, lt, picked)


def _gpu_mb(sc: StepCtx, comp) -> np.ndarray:
    """A micro-batch's GPU compute on the slowest stage without the MoE routing/permutation
    and host-issue terms (step_time's own `compute` per micro-batch, before the DP copies)."""
    return comp.mb - comp.perm - (comp.host if sc.ll.has_experts else 0.0)


def compute_floor(settings: Settings, plan: PlanArrays, moe: bool = False) -> np.ndarray:
    """m x _gpu_mb of the stage heaviest by compute alone (compute_time's Compute.mb), without pricing a
    collective: a lower bound of step_time's micro-batch, the critical stage's compute plus its own
    communication (critical_stage: >= the compute-heaviest stage's compute plus its communication >= its
    compute). Where the critical stage is the compute-heaviest one, step_time(...).total >= compute_floor(...)
    holds by the same arithmetic on the same values (step_time's `compute` term without the DP copies,
    dp.copies >= 0, and every other term >= 0: adding a value >= 0 never lowers a float sum); where
    communication makes another stage critical, up to float rounding: the search's lower bound before it prices
    communication (search._prefilter, which checks the fact on every candidate it evaluates and prices every
    candidate where it fails). moe (an MoE model): plus step_time's own moe_permute and
    moe_host terms (m x comp.perm, m x comp.host, from the same compute pass), added in
    step_time's order (they follow compute there): each partial sum of step_time's terms is >=
    the floor's, float rounding being monotone, so the total is still >= it.
    Why the stage heaviest by compute and not critical_stage's pick: critical_stage needs every stage's priced
    communication, which the floor exists to skip (search._prefilter prices it for the candidates the floor does not
    rank out), and a floor from the critical stage's compute would be lower, never higher: the critical stage's
    compute can be below the compute-heaviest stage's (Llama 3 8B tp 8, pp 4 with stages 7 / 9 / 9 / 7: the middle's
    9 t and its traffic outweigh the last's 7 t + the head, whose compute alone is larger; tests/
    test_explain_critical_stage.py), while step_time's micro-batch, the critical stage's compute plus communication,
    is >= the compute-heaviest stage's compute either way. So the floor stays by compute: the tightest bound
    available before a collective is priced (tests/test_compute_floor_critical.py)."""
    g = Groups(plan, floor_fields(settings))
    return g.expand(group_floor(settings, g.plan, moe))


def group_floor(settings: Settings, plan, moe: bool = False) -> np.ndarray:
    """compute_floor of a plan of distinct tuples of floor_fields(settings) (its Groups.plan, or the
    search's own grouping: search._prefilter)."""
    sc, _, comp = _compute_pass(settings, plan)
    floor = sc.m * _gpu_mb(sc, comp)
    if moe and sc.ll.has_experts:  # a model setting, not a searched quantity
        floor = floor + sc.m * comp.perm + sc.m * comp.host
    return floor


# the plan fields compute_floor reads: every field but the sharding mode, the rank order and DP
# overlap, which move only memory and communication (terms.Groups: the floor is priced once per
# distinct tuple, and reading another field is an error); nor the MoE dispatcher, which the compute reads
# only in a dispatcher search whose dispatchers differ in the host synchronisation (_disp_field)
FLOOR_FIELDS = tuple(f.name for f in dataclasses.fields(PlanArrays)
                     if f.name not in ("sharding", "shard", "smode", "order", "dpo", "disp")) + ("microbatches",)


def step_time(settings: Settings, plan: PlanArrays, calibration=None) -> tuple[Terms, dict]:
    """Named time terms (seconds) whose sum is the step time, plus informational extras."""
    sc, lt, comp = _compute_pass(settings, plan, picked=False)  # critical_stage picks the stage's compute
    coll = Collectives(sc)
    tp_parts = {}
    tp_mb = tp_comm(sc, coll, lt, tp_parts)
    amax = tp_amax_parts(sc, coll)  # [34] [39] the amax all-reduces, on the stage's path inside tp_comm
    for part in amax.values():
        tp_mb = {k: tp_mb[k] + part[k] for k in tp_mb}
    moe_model = sc.ll.has_experts
    ep_mb, ep_info = ep_comm(sc, coll, lt) if moe_model else (None, {})
    cp_mb, cp_total, cp_scan = cp_comm(sc, coll, lt)
    pp_mb, warm, pp_hops, pp_wrap = pp_comm(sc, coll, lt)  # warm: the warm-up's and flush's waited-on p2p, on the step, not scaled as the bubble
    # the critical stage: the heaviest by compute plus its own communication (each term of that one stage)
    # the heaviest stage by compute alone (with its permutation and host shares), whatever the rank order: the search's
    # floor of the plan at any order (extra's order_floor_s), as critical_stage's pick depends on the order's traffic
    heaviest_mb = comp.mb  # (compute_time's: the max of comp.stages' computes, before critical_stage replaces it)
    comms = [tp_mb, cp_mb, pp_mb] + ([ep_mb] if moe_model else [])
    # each stage's DP traffic behind its own passes (dp_windows), before the pick: its per-micro-batch part (dp_st.mb:
    # ZeRO-2's reduce-scatter after each micro-batch, FSDP's gathers and reductions every micro-batch) is on that
    # stage's path and weighs in the pick; the pace before it (the slowest stage's compute and per-micro-batch traffic,
    # the compute stream's micro-batch [26]) is the queue's stream
    dp_st = dp_comm(sc, coll, comp, lt, stream_mb=functools.reduce(np.maximum, stage_totals(comp, comms)))
    crit, comp = critical_stage(comp, comms + [dict(zip(CRITICAL_STAGES, dp_st.mb))])
    tp_mb, cp_mb, cp_total, pp_mb, warm, pp_hops, pp_wrap = (pick(crit, x) for x in (tp_mb, cp_mb, cp_total, pp_mb, warm,
                                                                                    pp_hops, pp_wrap))
    amax = {k: pick(crit, v) for k, v in amax.items()}
    regather = pick(crit, tp_parts["regather"])  # [35] the critical stage's re-gathers, inside tp_mb
    head_tp = pick(crit, tp_parts["head"])  # [36] the critical stage's embedding / output layer / loss TP, inside tp_mb
    shared = (pick(crit, tp_parts["shared"]) if any(shared_experts_pair(sc, k) for k in sc.ll.kinds)
              else None)  # [37] the critical stage's shared experts' pairs, inside tp_mb (a stack setting, the kinds)
    cp_scan = None if cp_scan is None else pick(crit, cp_scan)
    if moe_model:
        ep_mb = pick(crit, ep_mb)
        ep_info = {k: pick(crit, v) if isinstance(v, dict) else v for k, v in ep_info.items()}
    # the critical stage's per-micro-batch DP exposure: in its micro-batch, so in the bubble's unit too (the fill and
    # drain wait on the stage's passes, each followed by its exposed reduction / gather as in the steady state)
    dp_mb = _pick(crit, *dp_st.mb)
    t_mb = comp.mb + tp_mb + cp_mb + pp_mb + (ep_mb if moe_model else 0.0) + dp_mb
    tied = pp_tied_grads(sc, coll)  # [20] once a step, waited on
    # the step's end (step_end_stage): each stage's own once-a-step DP work (its exposure less the per-micro-batch
    # part, the critical stage's above) and SP-gradient all-reduce [27], the stage whose sum is the largest; its
    # optimizer step after the gradient norm's all-reduce, likewise
    sp_st = sp_norm_grads(sc, coll)
    m = sc.m
    dp_once = dp_st.exposed - m * dp_st.mb
    end_grads = step_end_stage(sc, dp_once + sp_st)
    dp, sp_grads = dp_stage(dp_st, end_grads), _pick(end_grads, *sp_st)
    dp_exposed = m * dp_mb + _pick(end_grads, *dp_once)
    # of it and of the DP traffic, the routed experts' (dp_comm's e_* parts, the same stages')
    experts = ({"dp_comm_experts_s": dp.e_total, "dp_comm_experts_exposed_s": m * _pick(crit, *dp_st.e_mb)
                + _pick(end_grads, *(dp_st.e_exposed - m * dp_st.e_mb))} if moe_model else {})
    # (p-1)/(v m) of the busy time [6]; ZB-H1's bubble depends on the pass durations, here
    # this plan's own, the critical stage's (stage_passes): backward / forward, and the weight-gradient GEMMs' share
    # of backward (one forward's worth of GEMMs, the dgrad being the other)
    w_share = np.minimum(comp.gemm_fwd / comp.bwd_mb, 1.0)
    frac_m = bubble_fraction(plan.pp, m, plan.vpp, plan.schedule, comp.bwd_mb / comp.fwd_mb, w_share) * m
    fill = pp_fill_drain(pp_mb, pp_hops, frac_m, pp_wrap)  # [31] the fill's and drain's whole hops the bubble's p2p lacks
    bubble = frac_m * t_mb + fill
    # MoE: router top-k + token permutations (memory-bound), and the all-to-alls (moe.py)
    # and the host issue time the dispatcher's synchronisation exposes (moe_host)
    ep_terms = {"moe_permute": m * comp.perm, "moe_host": m * comp.host, "ep_comm": m * ep_mb} if moe_model else {}
    gpu_mb = _gpu_mb(sc, comp)
    opt_st, muon_st = optimizer_time(sc, dp_st), muon_stage_terms(sc, coll, dp_st)
    # the optimizer step's stage: each stage's whole step, its Adam / Muon update and Muon's Newton-Schulz and TP
    # collectives [28] (muon_stage_terms), the one with the largest sum (step_end_stage)
    end_opt = step_end_stage(sc, functools.reduce(np.add, muon_st.values(), opt_st))
    opt = _pick(end_opt, *opt_st)
    off = {}
    muon = {"muon_ns": _pick(end_opt, *muon_st["muon_ns"])} if muon_st else {}  # a job setting [28]
    muon_gather, muon_gram = ((_pick(end_opt, *muon_st[k]) for k in ("gather", "gram")) if muon_st
                              else (0.0 * tied, 0.0 * tied))  # [28], inside tp_comm
    if offload.switches(sc.settings)[0] > 0:  # a job setting: the CPU steps the optimizer (planner/offload.py)
        off = offload_parts(sc, dp_stage(dp_st, end_opt), comp)
        opt = (off["offload_cpu_adam_s"] if "offload_gpu_adam_s" not in off
               else np.maximum(off["offload_cpu_adam_s"], off["offload_gpu_adam_s"])) + off["offload_link_exposed_s"]
    terms = Terms(compute=m * gpu_mb + dp.copies, tp_comm=m * tp_mb + sp_grads + muon_gather + muon_gram, cp_comm=m * cp_mb, pp_comm=m * pp_mb + warm + tied,
                  dp_comm_exposed=dp_exposed, bubble=bubble, optimizer=opt, **ep_terms, **muon)
    extra = {"dp_comm_s": dp.total, **experts, "cp_comm_total_s": m * cp_total, "cp_compute_s": m * cp_compute(sc, lt, crit),
             # a lower bound of the step at every rank order (search._step_parts' floor): the compute-heaviest stage's
             # micro-batches, the DP copies and the optimizer step. The critical stage's compute plus its own traffic
             # is >= the compute-heaviest stage's compute plus its own >= that compute, and the step holds m x the
             # critical stage's compute, permutation, host, TP, CP, PP and EP terms (each >= 0 beside), so the step is
             # >= it up to float rounding (the search checks it on every plan it prices and drops the bound where not)
             "order_floor_s": m * heaviest_mb + dp.copies + opt,
             # of cp_comm_total_s (all of it exposed): the state-space / linear-attention layers' exchanges
             **({"cp_scan_comm_s": m * cp_scan} if cp_scan is not None else {}),
             "pp_warmup_flush_s": warm, "pp_fill_drain_s": fill, "pp_tied_grads_s": tied, "tp_sp_norm_grads_s": sp_grads,
             **{k: m * v for k, v in amax.items()},  # [34] [39] inside tp_comm
             "tp_wgrad_regather_s": m * regather,  # [35] inside tp_comm (and the bubble's micro-batches hold it too)
             "tp_head_s": m * head_tp,  # [36] inside tp_comm
             **({"tp_shared_experts_s": m * shared} if shared is not None else {}),  # [37] inside tp_comm
             **({"tp_muon_gather_s": muon_gather, "tp_muon_gram_s": muon_gram} if muon else {}),
             **critical_stage_extras(sc, crit), **step_end_extras(sc, end_grads, end_opt),
             "calibrated": sorted(coll.used), "unfused_passes_s": m * comp.unfused, **eager_core_time(sc, lt, crit),
             **mamba_scan_time(sc, lt, crit), **gating_einsum_time(sc, lt, crit), **off,
             **(_ep_extras(sc, m, ep_info) if moe_model else {})}
    return terms, extra


def _ep_extras(sc: StepCtx, m, ep_info: dict) -> dict:
    """step_time's MoE extras: the critical stage's dispatch, combine, probabilities' and counts' seconds (before
    overlap), the selective re-run's, the EP tier; and, under --moe-shared-expert-overlap (a job setting), the shared
    experts' side-stream TP collectives' exposed remainder inside ep_comm ([38])."""
    out = {"moe_dispatch_s": m * ep_info["dispatch"], "moe_combine_s": m * ep_info["combine"],
           "moe_probs_a2a_s": m * ep_info["probs"], "moe_counts_gather_s": m * ep_info["counts"],
           "moe_sac_rerun_s": m * ep_info["sac_rerun"], "ep_tier": ep_info["tier"]}
    if sc.settings.moe_shared_expert_overlap:
        out["ep_shared_experts_tp_s"] = m * ep_info["shared_tp"]
    return out


def muon_stage_terms(sc: StepCtx, coll: Collectives, dp: DPTraffic) -> dict:
    """Muon's per-stage step terms [28], each (3, ...) in CRITICAL_STAGES' order (_muon_stages): "muon_ns" the
    Newton-Schulz iterations (muon_ns_time), "gather" and "gram" its TP collectives (muon_gather_time,
    muon_gram_time, inside tp_comm); {} without Muon (a job setting). Part of each stage's optimizer step, after the
    gradient norm's all-reduce (step_end_stage), so step_time picks them with optimizer_time's, one stage's."""
    if sc.settings.optimizer != "muon":
        return {}
    return {"muon_ns": muon_ns_time(sc, dp), "gather": muon_gather_time(sc, coll, dp),
            "gram": muon_gram_time(sc, coll, dp)}


def step_end_stage(sc: StepCtx, per) -> np.ndarray:
    """The CRITICAL_STAGES slot (_heaviest's index, its tie rule) whose step-end work `per` (a leading axis of 3, each
    slot's own seconds: dp_comm's, sp_norm_grads', optimizer_time's) is the largest; the middle slot left out where no
    plan stage is one (pp <= 2). Why one stage's sum, not each term's own largest: every stage runs its own step end
    and one cross-stage wait splits it. Megatron-LM @d98e8a64: after its schedule each stage's finalize_model_grads
    (megatron/core/distributed/finalize_model_grads.py l. 637-677) finishes its own DP gradient sync
    (finish_grad_sync over its own DP group), then all-reduces its SP-partial gradients over its own TP group
    (_allreduce_non_tensor_model_parallel_grads) and the tied embedding's over the first and last stages
    (_allreduce_word_embedding_grads: pp_tied_grads, a wait between those two, added apart); the optimizer's step
    (megatron/core/optimizer/optimizer.py step l. 816-851) then takes the gradient norm (clip_grad_norm,
    clip_grads.py get_grad_norm_fp32 l. 127-134: an all-reduce over the grad-stats group, the model-parallel group
    with every pipeline stage, or the whole world under the distributed optimizer, optimizer.py
    get_grad_stats_parallel_group l. 322-339), which every stage waits on, and only then steps its own parameters
    (step_with_ready_grads). So the step ends at the largest of the stages' gradient work (this over dp + SP), then
    the largest of their optimizer steps (this over optimizer_time): two maxima, each one stage's whole work. The DP
    part here is each stage's once-a-step exposure, its dense and routed experts' traffic alike (dp_comm's exposed less
    its per-micro-batch part, m x mb, which lies on the stage's path through the schedule and is the critical stage's:
    step_time). The
    DP parameter all-gather (sharded modes), which runs after the step behind the next forward, is counted in the
    gradient part with the rest of dp_comm's (a named approximation). Muon's Newton-Schulz and TP collectives
    (muon_stage_terms) are each stage's own, in its optimizer step's sum (issue 22 critdp: before, _muon_stage_max's
    largest stage beside the optimizer's, an upper bound where the stages differ; critstage3: each term its own
    largest stage)."""
    return _heaviest(np.where(sc.plan.pp > 2, per[0], -np.inf), per[1], per[2])


# step_time's critical_stage code (explain's time.critical_stage): CRITICAL_STAGES' index, or the one stage of a plan
# without a pipeline, or DualPipe's end ranks (stage 0 and stage p - 1 paired, dualpipe_end_rank)
CRITICAL_STAGE_NAMES = ("middle", "first", "last", "only", "end pair")


def critical_stage_extras(sc: StepCtx, crit) -> dict:
    """Which stage step_time's terms are (explain names it): critical_stage, an index into CRITICAL_STAGE_NAMES
    (critical_stage's crit; 3 at pp 1, 4 for DualPipe's end pair), and critical_stage_layers, the transformer layers
    it holds (pipeline.stage_layers; the end pair both stages')."""
    plan = sc.plan
    dual = dualpipe_pairs(plan)
    code = np.where(plan.pp == 1, 3, np.where(dual & (crit == 2), 4, crit)).astype(np.int64)
    n = sc.n
    layers = pick(crit, {"mid": n["mid"], "first": n["first"], "last": np.where(dual, n["first"] + n["last"], n["last"])})
    return {"critical_stage": code, "critical_stage_layers": np.asarray(layers, dtype=np.int64)}


def step_end_extras(sc: StepCtx, end_grads, end_opt) -> dict:
    """Which stage's step-end work step_time's terms hold (explain names them beside the critical stage, whose terms
    the rest are): step_end_grads_stage, the stage whose DP gradient sync and SP-gradient all-reduce end the step
    (step_end_stage over dp_comm's exposed + sp_norm_grads: dp_comm_s, dp_comm_exposed_s, the DP copies in compute_s,
    tp_sp_norm_grads_s in tp_comm_s), and step_end_optimizer_stage, the stage whose optimizer step does (step_end_stage
    over optimizer_time: optimizer_s). Each an index into CRITICAL_STAGE_NAMES as critical_stage_extras' (3 at pp 1;
    DualPipe's end slots, each the end ranks' pair of stages (_dp_stages), 4)."""
    plan = sc.plan
    dual = dualpipe_pairs(plan)

    def code(slot):
        return np.where(plan.pp == 1, 3, np.where(dual & (slot != CRITICAL_STAGES.index("mid")), 4, slot)).astype(np.int64)

    return {"step_end_grads_stage": code(end_grads), "step_end_optimizer_stage": code(end_opt)}


def throughput(settings: Settings, plan: PlanArrays, step_s) -> dict:
    """Tokens/s, MFU and HFU for a step time (PaLM's definitions)."""
    model, hw = settings.model, settings.hardware
    causal = settings.causal_attention_flops
    ft = flops_per_token(model, plan.seq, plan.recompute, causal, cp=plan.cp)  # cp: attention.py [14]
    # HFU counts what the kernels run: causal attention (FlashAttention skips the masked
    # blocks) and the recomputation, whatever convention MFU uses
    dense = stack_of(settings).windowed_attention is not None  # a stack setting: windows run as dense masks [11]
    ft_hw = flops_per_token(model, plan.seq, plan.recompute, True, dense_windows=dense, kernels=True,
                            cp=plan.cp)  # attention.py [13], [14]
    rc = recompute_flops_per_token(model, plan.seq, plan.recompute, True, recompute_fraction(settings, plan),
                                   dense_windows=dense, kernels=True, cp=plan.cp)
    tokens = plan.gbs * plan.seq
    tps = tokens / step_s
    peak = np.select([plan.precision == FP8, plan.precision == NVFP4],
                     [hw.fp8_TFLOPS or np.nan, hw.fp4_TFLOPS or np.nan], hw.bf16_TFLOPS) * 1e12
    denom = settings.gpus * peak
    return {
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / settings.gpus,
        "mfu": ft.total * tps / denom,
        "mfu_6n": ft.dense * tps / denom,
        "hfu": (ft_hw.total + rc) * tps / denom,
        "tflops_per_gpu": ft.total * tps / settings.gpus / 1e12,
        # what the GPUs execute (causal attention, recompute): never above the hardware's GEMM rate
        "hardware_tflops_per_gpu": (ft_hw.total + rc) * tps / settings.gpus / 1e12,
        "peak_tflops": peak / 1e12,
    }
