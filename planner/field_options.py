"""The job fields a job YAML or trainer config sets that are command-line options as they are:
one table (FIELD_OPTIONS) that every command taking a job reads (cli/core.py builds explain's
and fit's typer options from it; check, budget and export copy explain's), and that a fit row's
reproduce line reads (search.explain_args). Issue 22 "flags beat file values", issue 24 "one
vocabulary": each option is spelled as its schema.Job field (dashes for underscores), a boolean
as --name/--no-name; its value is checked against the field's own constraints (cli/core.py
field_values: a bad value exits 2 naming the option), and where it replaces a job file's or a
trainer config's value the replacement is named in a note (cli/core.py replaced).

Each help text names the trainer flag or setting the field mirrors; the field's full description
(what it prices, its sources) is schema.Job's (`planner schema job`). A plain data module: no
typer here, so the library (search.py) reads it without the command line.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Kind = Literal["bool", "int", "float", "str", "words", "pairs"]


class FieldOption(NamedTuple):
    field: str  # the schema.Job field
    kind: Kind  # words: a list field, one argument of comma- or space-separated words; pairs: a mapping, KEY=N words
    help: str
    minimum: float | None = None  # a number's least value (typer min=; the field's own bound is checked too)

    @property
    def flag(self) -> str:
        """The option's spelling: the field's name with dashes."""
        return "--" + self.field.replace("_", "-")

    @property
    def decl(self) -> str:
        """typer's declaration: --name, or --name/--no-name for a boolean."""
        return f"{self.flag}/--no-{self.flag[2:]}" if self.kind == "bool" else self.flag


FIELD_OPTIONS: tuple[FieldOption, ...] = (
    # precision (issue 23) and fp8 details
    FieldOption("fp16", "bool", "the 16-bit dtype is fp16 with loss scaling, not bf16 (Megatron --fp16): priced as bf16, "
                "exported as --fp16 / DeepSpeed fp16.enabled; Megatron refuses it under --use-torch-fsdp2 (fit leaves that mode "
                "out); DeepSpeed's ZeRO stage 0 (megatron-deepspeed zero0) runs fp16 only, so only --fp16 plans it "
                "(default: off, bf16, planned without zero0)"),
    FieldOption("fp8_attention", "bool", "with --precision fp8: the fused attention in fp8 too (Megatron-Core "
                "TransformerConfig.fp8_dot_product_attention, Transformer Engine's fp8_dpa; needs a recipe of the stack with "
                "an fp8 attention path on the GPU; fit searches only those recipes) (default: off)"),
    FieldOption("fp8_output_layer", "bool", "with fp8: the output layer's GEMM in fp8 too (torchtitan [float8] filter_fqns "
                "without 'output'; needs a recipe with output_layer_convertible) (default: off, the output layer bf16)"),
    FieldOption("filter_fqns", "words", "with fp8 on torchtitan: the Linears kept bf16, words of module names "
                "(torchtitan [float8] filter_fqns: attention.wq, feed_forward.w1, moe.router.gate, ..., "
                "auto_filter_small_kn for torchao's size thresholds) (default: output,router.gate, the shipped configs')"),
    FieldOption("fp8_allgather", "bool", "with fp8 under FSDP: the converted Linears' weights all-gathered in fp8 "
                "(torchtitan [float8] enable_fsdp_float8_all_gather; needs a recipe with allgather_fp8: tensorwise) "
                "(default: the stack's recipe rule)"),
    FieldOption("fp8_precompute_scale", "bool", "with FSDP's fp8 all-gather: torchao's one amax all-reduce a step for "
                "every converted weight (torchtitan [float8] precompute_float8_dynamic_scale_for_fsdp) in place of one "
                "a weight in each all-gather (default: false, torchtitan's)"),
    FieldOption("fp8_grouped_experts", "bool", "with fp8 / nvfp4 on an MoE model: the routed experts' grouped GEMMs in the "
                "low precision too (torchtitan [quantize.grouped_mm.float8] / [quantize.grouped_mm.mx] fqns = "
                "['experts']; Megatron's TE GroupedLinear runs them so) (default: the stack's rule: torchtitan off, "
                "Megatron on)"),
    FieldOption("fp8_param_gather", "bool", "fp8 weights: kept and all-gathered in fp8 (Megatron --fp8-param-gather; needs "
                "--precision fp8 and a stack with memory.fp8_weight_cache) (default: off)"),
    FieldOption("fp4_param_gather", "bool", "NVFP4 weights: kept and all-gathered in NVFP4 (Megatron --fp4-param-gather; "
                "needs --precision nvfp4) (default: off)"),
    FieldOption("bf16_layers_at_start", "int", "with fp8 / nvfp4: the first N transformer layers stay bf16 (Megatron "
                "--first-last-layers-bf16 --num-layers-at-start-in-bf16 N) (default: 0)", 0),
    FieldOption("bf16_layers_at_end", "int", "with fp8 / nvfp4: the last N transformer layers stay bf16 (Megatron "
                "--first-last-layers-bf16 --num-layers-at-end-in-bf16 N) (default: 0)", 0),
    # kernels and fusions (plan.FUSION_SWITCHES; stack_db kernels)
    FieldOption("attention_kernel", "str", "the fused attention kernel: flash2|cudnn|flex (Megatron --attention-backend "
                "flash | fused; flex: FlexAttention) (default: the stack's for the GPU)"),
    FieldOption("attention_backend", "str", "the attention module the model code builds: sdpa|flex|varlen (torchtitan "
                "attn_type / attn_backend; varlen refuses cp > 1) (default: the stack's: sdpa on torchtitan, flex on "
                "torchtitan-0.3)"),
    FieldOption("transformer_impl", "str", "transformer_engine|local (Megatron --transformer-impl): local runs "
                "Megatron-Core's own layers, its core attention eager (default: the stack's, Transformer Engine)"),
    FieldOption("local_core_attention", "bool", "Megatron-Core's own DotProductAttention runs the core attention, eager "
                "(Megatron --attention-backend local) (default: off)"),
    FieldOption("apply_rope_fusion", "bool", "the fused rotary kernel (Megatron-Core apply_rope_fusion; --no-apply-rope-fusion "
                "is Megatron's --no-rope-fusion) (default: the stack's, fused)"),
    FieldOption("bias_activation_fusion", "bool", "the fused bias + activation kernel (--no-bias-activation-fusion is "
                "Megatron's --no-bias-swiglu-fusion / --no-bias-gelu-fusion) (default: the stack's, fused)"),
    FieldOption("bias_dropout_fusion", "bool", "the fused bias-dropout-add (--no-bias-dropout-fusion: Megatron's) "
                "(default: the stack's, fused)"),
    FieldOption("gradient_accumulation_fusion", "bool", "the weight-gradient GEMM accumulates into the main gradient "
                "(--no-gradient-accumulation-fusion: Megatron's) (default: the stack's, fused)"),
    FieldOption("masked_softmax_fusion", "bool", "with transformer_impl local, or a Megatron-DeepSpeed eager core: the "
                "fused scale-mask-softmax (--no-masked-softmax-fusion: Megatron's) (default: the stack's, fused)"),
    FieldOption("attention_softmax_in_fp32", "bool", "the eager attention's torch softmax in fp32, its fp32 output saved "
                "(Megatron --attention-softmax-in-fp32) (default: true, TransformerConfig's)"),
    FieldOption("cross_entropy_fusion", "bool", "the stack's fused cross-entropy (Megatron --cross-entropy-loss-fusion) "
                "(default: off)"),
    FieldOption("cross_entropy_fusion_impl", "str", "with --cross-entropy-fusion, its implementation: native|te "
                "(Megatron --cross-entropy-fusion-impl) (default: native)"),
    FieldOption("chunked_loss", "bool", "the output layer and loss per sequence chunk (torchtitan 0.3.0 "
                "ChunkedLossWrapper) (default: off)"),
    FieldOption("moe_grouped_gemm", "bool", "MoE: the experts as one grouped GEMM (Megatron --moe-grouped-gemm) "
                "(default: the stack's; Megatron-LM's off)"),
    FieldOption("moe_permute_fusion", "bool", "MoE: Transformer Engine's fused token permutation (Megatron "
                "--moe-permute-fusion) (default: the stack's; Megatron-LM's off)"),
    FieldOption("moe_router_fusion", "bool", "MoE: Transformer Engine's fused router top-k and score function (Megatron "
                "--moe-router-fusion) (default: the stack's; Megatron-LM's off)"),
    FieldOption("moe_shared_expert_overlap", "bool", "MoE with shared experts: them on a side stream beside the "
                "dispatcher's all-to-alls (Megatron --moe-shared-expert-overlap; alltoall or flex) (default: off)"),
    FieldOption("moe_router_padding", "bool", "MoE: the routing map padded to the fp8 / fp4 GEMMs' "
                "alignment (Megatron --moe-router-padding-for-quantization) (default: off)"),
    FieldOption("enable_experimental", "bool", "Megatron's experimental kernels (Megatron --enable-experimental; priced: "
                "the fused routing-map padding's int32 map) (default: off)"),
    # recompute, graphs, memory management
    FieldOption("recompute_modules", "words", "with --recompute selective: the modules re-run, words of "
                "core_attn|layernorm|moe_act|mla_up_proj, e.g. core_attn,layernorm (Megatron --recompute-modules) "
                "(default: the stack's selective policy)"),
    FieldOption("sync_tp_duplicated_parameters", "bool", "each forward all-reduces the TP-duplicated parameters (the "
                "LayerNorms' weights and biases, the row-parallel linears' biases) over the TP group (BigScience "
                "Megatron-DeepSpeed --sync-tp-duplicated-parameters; stack megatron-deepspeed-bigscience) (default: off)"),
    FieldOption("partition_activations", "bool", "with --recompute full at TP > 1: each TP rank keeps 1/tp of the "
                "checkpointed layer inputs, all-gathered before the re-run (Megatron-DeepSpeed --partition-activations) "
                "(default: off)"),
    FieldOption("selective_recomputes_attention", "bool", "with --recompute selective: the policy re-runs the attention "
                "core instead of saving its output (torchtitan's op SAC on Blackwell, 2025-05-20 to 2025-12-01) "
                "(default: off)"),
    FieldOption("cp_load_balance", "bool", "context parallelism load-balances the causal mask; false: contiguous "
                "chunks, a global layer's attention core at the last CP rank's (2 cp - 1) / cp (torchtitan's "
                "--parallelism.context_parallel_load_balancer None; stacks torchtitan and torchtitan-0.3 only; never "
                "searched by fit) "
                "(default on)"),
    FieldOption("cp_load_balancer", "str", "headtail|ptrr: the CP load balancer by name (torchtitan's "
                "--parallelism.context_parallel_load_balancer; stacks torchtitan and torchtitan-0.3 only), both priced "
                "as the balanced split; ptrr under CP needs a FlexAttention model (--attention-backend flex): start-up "
                "rule TORCHTITAN_CP_PTRR_MASK; another name (one torch does not build) is refused under CP: start-up "
                "rule TORCHTITAN_CP_LOAD_BALANCER_NAME (default: the stack's, headtail)"),
    FieldOption("fsdp_symm_mem", "bool", "FSDP's all-gathers on symmetric memory (torchtitan 0.3 "
                "--parallelism.enable_fsdp_symm_mem; stack torchtitan-0.3 only): refused below compute capability 9.0, "
                "start-up rule TORCHTITAN_FSDP_SYMM_MEM_SM90 (default off)"),
    FieldOption("spmd_typechecking", "bool", "SPMD type checking of the step (torchtitan 0.3 --debug.spmd_typechecking; "
                "stack torchtitan-0.3 only): refused with pp > 1 and with selective recompute over FlexAttention "
                "(default off)"),
    FieldOption("spmd_backend", "str", "spmd_types|partial_dtensor|full_dtensor (torchtitan 0.3 "
                "--parallelism.spmd-backend; stack torchtitan-0.3 only): on a DTensor backend op SAC keeps the EP "
                "exchange's and the TP reduce-scatters' outputs eager too (default: the stack's, spmd_types)"),
    FieldOption("cuda_graph_impl", "str", "CUDA graphs: none|local|transformer_engine|full_iteration (Megatron "
                "--cuda-graph-impl) (default: none)"),
    FieldOption("cuda_graph_scope", "words", "with per-layer graphs, the parts captured: words of attn|mlp|moe|"
                "moe_router|moe_preprocess|mamba (Megatron --cuda-graph-modules) (default: the whole layer)"),
    FieldOption("empty_unused_memory_level", "int", "0|1|2 (Megatron --empty-unused-memory-level): no priced figure "
                "moves, carried to the fragmentation band and the export (default: 0)"),
    FieldOption("defer_embedding_wgrad", "int", "the last stage defers the output layer's weight gradients of the first "
                "N micro-batches to the flush, 0: all (Megatron --defer-embedding-wgrad-compute --wgrad-deferral-limit N) "
                "(default: off)", 0),
    FieldOption("padded_vocab_size", "int", "the embedding's and output layer's rows as the trainer builds them "
                "(Megatron --padded-vocab-size) (default: the stack's padding at the plan's tp, Megatron's multiple of "
                "--make-vocab-size-divisible-by 128 x tp; none on torchtitan)", 1),
    FieldOption("make_vocab_size_divisible_by", "int", "the stack's vocabulary padding divisor: the rows a multiple of it "
                "x tp (Megatron --make-vocab-size-divisible-by) (default: the stack's, 128; stacks that pad only)", 1),
    FieldOption("dummy_wgrads", "str", "the dummy weight gradients the run's code version returns: per_call|none|cached "
                "(Transformer Engine before #1651 per_call; no trainer flag) (default: the stack's)"),
    FieldOption("te_version", "str", "the Transformer Engine release the run used, e.g. 1.8 (TP overlap's userbuffers and "
                "cuBLAS workspaces by release, mxfp8 with TP overlap from 2.4: start-up rule 106, each fp8 recipe from its "
                "first release: rule 107; no trainer flag) (default: the stack's, 2.17.1 on megatron)"),
    FieldOption("rope_cache", "str", "the rotary tables the run's code version keeps: none|model|layer|model_cp "
                "(torchtitan before 02d24f017 model; no trainer flag) (default: the stack's)"),
    FieldOption("cublas_workspace_config", "str", "the run's CUBLAS_WORKSPACE_CONFIG environment variable, e.g. :4096:8 "
                "(default: unset, the GPU's default workspaces)"),
    FieldOption("deterministic_mode", "bool", "Megatron's deterministic kernels (Megatron --deterministic-mode; not "
                "priced but, from 2026-07-08 (--trainer-date), its CUBLAS_WORKSPACE_CONFIG :4096:8 where --cublas-workspace-config "
                "is unset and its NCCL_ALGO Ring where --nccl-algo is unset: stack megatron) (default: off)"),
    FieldOption("nccl_algo", "str", "the run's NCCL_ALGO, e.g. Ring or ^NVLS or Ring;allreduce:Tree,Ring (a launch "
                "script's export NCCL_ALGO=...): the collectives priced with the algorithms it leaves them (default: "
                "unset, NCCL's own choice; Ring under --deterministic-mode on stack megatron)"),
    FieldOption("nccl_proto", "str", "the run's NCCL_PROTO, e.g. Simple or ^LL128 or Simple;allreduce:LL,Simple (a "
                "launch script's export NCCL_PROTO=...): the collectives priced under the protocols it leaves them, "
                "LL / LL128 inside one NVLink domain only (default: unset, NCCL's default set)"),
    FieldOption("nccl_nvls_enable", "int", "0|1|2, the run's NCCL_NVLS_ENABLE (a launch script's export "
                "NCCL_NVLS_ENABLE=0): 0 prices the all-reduces without NVLS and NVLS-tree and without NCCL's NVLS "
                "buffers (memory.py [nv]); 1 (forced) refused on "
                "hardware without NVLS (default: unset, NCCL's 2: the hardware's NVLS)"),
    FieldOption("attention_kernel_named", "bool", "with --attention-kernel: the config names it as its backend "
                "(Megatron-Bridge model.attention_backend flash / fused), not TE's auto choice: priced alike, but "
                "Bridge's deterministic mode refuses a named flash2 on every GPU (stack megatron-bridge) (default: off)"),
    FieldOption("use_flash_attn", "bool", "Megatron-LM's --use-flash-attn: picks no kernel at @d98e8a64, but "
                "--deterministic-mode refused it from 2024-05-04 to 2026-07-08 (with --trainer-date in that range; "
                "stack megatron) (default: off)"),
    FieldOption("trainer_date", "str", "the date of the trainer commit the run used, YYYY-MM-DD, where older than the "
                "stack's: start-up checks added later are not run (Megatron-LM's --deterministic-mode refuses "
                "--tp-comm-overlap from 2026-07-08; no trainer flag) (default: the stack's own commit)"),
    FieldOption("optimizer", "str", "adam|muon: the update rule (Megatron-LM --optimizer muon: one fp32 momentum a 2-D "
                "hidden matrix, Adam on the embeddings, norms and biases; stack megatron) (default: adam)"),
    FieldOption("optimizer_whole_tensors", "bool", "with --optimizer muon at zero1: Megatron's layer-wise optimizer "
                "without its parameter layout (--no-use-layer-wise-param-layout): whole tensors a rank, the word "
                "embedding's states on one rank, the gradients all-reduced and the parameters gathered once after the "
                "step (default: off, the layout)"),
    FieldOption("muon_ns_steps", "int", "with --optimizer muon: the Newton-Schulz steps a momentum is orthogonalized "
                "with (Megatron-LM --muon-num-ns-steps) (default: 5)"),
    FieldOption("muon_split_qkv", "bool", "with --optimizer muon: orthogonalize linear_qkv's q, k and v apart "
                "(Megatron-LM --muon-split-qkv; off: --muon-no-split-qkv, the one matrix whole) (default: on)"),
    FieldOption("muon_tp_mode", "str", "blockwise|duplicated|distributed: with --optimizer muon, Newton-Schulz on each TP "
                "rank's own shard, no gather (blockwise), on the whole matrix after a TP all-gather (duplicated), or split "
                "over the TP group, the Gram matrix all-reduced every step (distributed) "
                "(Megatron-LM --muon-tp-mode) (default: the stack's: megatron duplicated, megatron-bridge blockwise)"),
    FieldOption("muon_fp32_matmul_prec", "str", "low|medium|high: with --optimizer muon, torch's float32 matmul "
                "precision around Newton-Schulz: bf16 GEMMs (medium), TF32 (high), fp32 off the tensor cores (low, "
                "which torch ignores: its default highest) (Megatron-LM --muon-fp32-matmul-prec) (default: medium)"),
    FieldOption("optimizer_implementation", "str", "fused|foreach|for-loop (torchtitan [optimizer] implementation) "
                "(default: the stack's)"),
    FieldOption("precision_aware_optimizer", "bool", "the stack's precision-aware optimizer (Megatron-LM "
                "--use-precision-aware-optimizer, TE's FusedAdam): its master weights as 16-bit remainders, no fp32 copy "
                "of the gradients at the step (default: on where --bytes-per-param keeps Adam's moments below fp32)"),
    FieldOption("offload_optimizer", "str", "none|cpu: the optimizer partition (fp32 master, Adam moments, fp32 "
                "gradients) in host memory, stepped by the CPU (DeepSpeed zero_optimization.offload_optimizer device cpu; "
                "torchtitan [training] enable_cpu_offload with --offload-param cpu); explain / check only, fit does not "
                "search it (default: none)"),
    FieldOption("offload_fraction", "float", "with --offload-optimizer cpu, the fraction of the optimizer partition on "
                "the host, the rest stepped on the GPU (Megatron-LM --optimizer-offload-fraction; --stack megatron only) "
                "(default: 1)"),
    FieldOption("offload_overlap", "bool", "with --offload-optimizer cpu, the copies and the CPU step pipelined per "
                "parameter (Megatron-LM --overlap-cpu-optimizer-d2h-h2d) (default: off)"),
    FieldOption("offload_param", "str", "none|cpu: the sharded parameters in host memory too (DeepSpeed ZeRO-3 "
                "zero_optimization.offload_param device cpu; torchtitan's CPUOffloadPolicy) (default: none)"),
    # the node's host where the hardware entry has none (a PCIe server) or another (plan._apply_host: a flag beats
    # the entry, noted); CPU offload reads them (planner/offload.py)
    FieldOption("pcie_gbps", "float", "the GPU's host link, GB/s per direction (PCIe Gen5 x16: 64), what CPU offload's "
                "copies move over, in place of the hardware's pcie_GBps (default: the hardware's)"),
    FieldOption("host_memory_gbps", "float", "the node's host DRAM peak, GB/s (channels x MT/s x 8 B x sockets), what CPU "
                "offload's host Adam streams at, in place of the hardware's host_memory_GBps (default: the hardware's)"),
    FieldOption("host_memory_gb", "float", "the node's host memory, GB, the gate of CPU offload's host bytes, in place of "
                "the hardware's host_memory_GB (default: the hardware's)"),
    FieldOption("pipe_partitioned", "bool", "DeepSpeed's pipeline engine sends each TP rank's 1/tp of a stage's "
                "output and all-gathers it over the TP group on arrival (the DeepSpeed JSON's pipeline.pipe_partitioned "
                "/ grad_partitioned; dense models at pp > 1, tp > 1 without SP; on megatron-deepspeed-2021 always "
                "on, the activations only) (default: the stack's, pipeline_send_partitioned_default)"),
    FieldOption("dp_param_gather_overlap", "bool", "the sharded optimizer's parameter all-gather after the step hidden "
                "behind the next forward (Megatron --overlap-param-gather, Megatron-Bridge ddp.overlap_param_gather); "
                "--no-dp-param-gather-overlap exposes it whole, as Megatron without the flag; read at zero1 / zero2, "
                "needs the DP overlap on (default: follows --dp-comm-overlap)"),
    FieldOption("early_step_in_backward", "bool", "the optimizer steps each parameter in the backward (torchtitan "
                "[optimizer] early_step_in_backward) (default: off)"),
    FieldOption("deepspeed_zero3", "pairs", "DeepSpeed ZeRO-3's gathering and bucket settings, KEY=N words of "
                "stage3_prefetch_bucket_size|stage3_max_live_parameters|stage3_max_reuse_distance|"
                "stage3_param_persistence_threshold|reduce_bucket_size|sub_group_size|contiguous_gradients (0 or 1), e.g. "
                "stage3_prefetch_bucket_size=0 (the DeepSpeed JSON's zero_optimization keys; reduce_bucket_size also sizes "
                "ZeRO-1/2's IPG buffer) (default: the stack's, DeepSpeed's)"),
    FieldOption("mfsdp_double_buffer", "bool", "Megatron-FSDP's fixed double-buffer pools (--fsdp-double-buffer, "
                "--use-nccl-ub): two persistent layer units of gathered weights and two of gradients (default off)"),
    FieldOption("mfsdp_v2", "bool", "Megatron-FSDP v2 (--megatron-fsdp-version 2): one layer unit prefetched, no "
                "reduce-scatter queue, the root unit released after the backward; optim_grads_params at tp, pp, cp 1 "
                "(default off)"),
    FieldOption("mla_down_proj_fusion", "bool", "MLA's q and kv down projections fused into one TP-split linear "
                "(Megatron --mla-down-proj-fusion: FusedMLASelfAttention; an MLA model with a q_lora_rank, tp dividing "
                "q_lora_rank and kv_lora_rank + qk_rope_head_dim) (default off)"),
    FieldOption("mfsdp_outer_optim", "bool", "Megatron-FSDP's HSDP with the fp32 main weights and Adam's moments "
                "sharded over the replicas too (--outer-dp-sharding-strategy optim; read under sharding hsdp) (default off)"),
    FieldOption("loss_logit_chunks", "int", "the loss of torchtitan PR #996 (@f99bfc03 chunked_cross_entropy_loss): the "
                "materialised logits cross-entropied in this many sequence chunks, each upcast to fp32 in turn (no "
                "trainer flag) (default: the stack's loss)", 2),
    FieldOption("fsdp_root_unit", "bool", "FSDP2's root unit as torchtitan wrapped it before 83e69410 (#1094, 2025-07-28): "
                "embedding, final norm and output kept unsharded through the backward, the last block not resharded "
                "(default: the stack's)"),
    FieldOption("cp_rotate_method", "str", "torch ring attention's K/V exchange: allgather|alltoall (torchtitan "
                "[parallelism] context_parallel_rotate_method) (default: the stack's)"),
    # MoE routing and dispatch
    FieldOption("moe_aux_loss_coeff", "float", "MoE: the auxiliary load-balancing loss coefficient (Megatron "
                "--moe-aux-loss-coeff; 0: none); > 0 the router keeps its aux-loss scores for the backward (default: the "
                "model's training recipe's, else 0.0)", 0.0),
    FieldOption("moe_z_loss_coeff", "float", "MoE: the router z-loss coefficient (Megatron --moe-z-loss-coeff); > 0 the "
                "router keeps its logits for the backward (default: none, Megatron's)", 0.0),
    FieldOption("moe_min_capacity", "int", "MoE on a stack that gates densely (DeepSpeed-MoE, stack moe_gating): the "
                "capacity's floor, slots per expert, C = max(ceil(S k cf / E), N) (Megatron-DeepSpeed --moe-min-capacity) "
                "(default: the stack's, 4)", 0),
    FieldOption("moe_router_pre_softmax", "bool", "MoE: a softmax router's softmax over all experts before the top-k "
                "(Megatron --moe-router-pre-softmax); the unfused router keeps [n, E] scores, not [n, k] (default: off, "
                "Megatron's)"),
    FieldOption("moe_router_dtype", "str", "MoE: fp32|fp64, the router's logits and probabilities in that dtype "
                "(Megatron --moe-router-dtype); the z-loss keeps its logits in it (default: the input's dtype, bf16)"),
    FieldOption("moe_dispatcher", "str", "MoE token dispatcher: alltoall (NCCL) | allgather | deepep (DeepEP normal "
                "kernels) | deepep_ll | hybridep (Megatron --moe-token-dispatcher-type, --moe-flex-dispatcher-backend; one "
                "the stack runs, stack_db runs.moe_dispatchers; planner/dispatch.py); fit searches the stack's where it is "
                "not given (default: the model's training recipe's where the stack runs it, else the stack's)"),
    FieldOption("moe_hybridep_capacity_factor", "float", "MoE with moe_dispatcher hybridep on a stack whose HybridEP has a "
                "non-blocking dispatch (torchtitan-0.3: model_registry's non_blocking_capacity_factor, in (0, 1]): the "
                "permuted expert input and grouped-GEMM outputs held at ep x min(E / ep, top_k) x this rows a local token, "
                "no host synchronisation (layers/moe.py [19]) (default: the blocking dispatch, the rows routed)"),
    FieldOption("moe_fp8_dispatch", "bool", "MoE: the forward dispatch moves fp8 tokens with their scales (DeepSeek-V3 "
                "sec. 3.3.3; DeepEP / Hybrid-EP); fp8 jobs only (refused under bf16: planner/dispatch.py [11]); Megatron-LM "
                "runs it only on the ncclep backend (--moe-dispatch-fwd-dtype mxfp8), so export --format megatron refuses "
                "it (default: the stack's fp8 recipe's under fp8)"),
    FieldOption("first_stage_layers", "int", "transformer layers on the first pipeline stage, the rest equal over the "
                "middle stages (Megatron --decoder-first-pipeline-num-layers: > 0, a multiple of vpp; not with "
                "--account-for-*; given, every plan fit ranks holds it; left out, fit tries where the left-over layers go on a stack with pipeline_stage_layers) (default: the planner's split)", 1),
    FieldOption("last_stage_layers", "int", "transformer layers on the last pipeline stage (Megatron "
                "--decoder-last-pipeline-num-layers, first_stage_layers' rules) (default: the planner's split)", 1),
    FieldOption("moe_route_nodes", "int", "MoE node-limited routing: a token reaches at most N nodes (DeepSeek-V3 "
                "sec. 2.1.2, M = 4; no trainer flag: Megatron's --moe-router-num-groups / --moe-router-group-topk are the "
                "model's group-limited routing, read into the model) (default: no limit beyond the model's)", 1),
)

FIELD_NAMES = tuple(o.field for o in FIELD_OPTIONS)


# Job fields that spell one setting two or three ways: a command-line spelling replaces the file's others (issue 22,
# "flags beat file values"), as the command line's sharding level or mode replaces the file's (cli/core.py
# command_line_sharding). Where both stood the job would be refused:
#   - the step's batch: plan._global_batch refuses global_batch beside global_batch_tokens, schema.Job._batch_schedule
#     a batch_size_schedule beside global_batch_tokens or beside a global_batch other than its last phase's batch
#     (Megatron refuses --step-batch-size-schedule beside --global-batch-size, arguments.py @d98e8a64 l. 698-701);
#   - the vocabulary rows: plan.vocab_divisor refuses make_vocab_size_divisible_by beside padded_vocab_size,
#     which pins the rows (Megatron pads no further, build_tokenizer.py _set_padded_vocab_size);
#   - the loss's share of the pipeline split: schema.Job._loss_layers refuses loss_layers_in_pipeline_split other
#     than 1 beside account_for_loss_in_pipeline_split true (1 layer).
SPELLINGS = (("global_batch", "global_batch_tokens", "batch_size_schedule"),
             ("make_vocab_size_divisible_by", "padded_vocab_size"),
             ("loss_layers_in_pipeline_split", "account_for_loss_in_pipeline_split"))


def _phase(p, key: str):
    """One field of a schedule phase, a mapping (a job file, a saved fit row, the command line) or schema.BatchPhase."""
    return p[key] if isinstance(p, dict) else getattr(p, key)


def _one_setting(a: str, va, b: str, vb) -> bool:
    """Whether two spellings' values are one setting, so both stand: a global_batch that is the schedule's last
    batch; a loss split of 1 layer beside account_for_loss_in_pipeline_split, or beside it false."""
    v = {a: va, b: vb}
    try:
        if set(v) == {"global_batch", "batch_size_schedule"}:
            return _phase(v["batch_size_schedule"][-1], "global_batch") == v["global_batch"]
    except (TypeError, KeyError, IndexError, AttributeError):
        return False  # not a schedule: the command line's spelling replaces it (the schema would name it)
    if set(v) == {"loss_layers_in_pipeline_split", "account_for_loss_in_pipeline_split"}:
        return v["account_for_loss_in_pipeline_split"] is not True or v["loss_layers_in_pipeline_split"] == 1
    return False


def _shown(key: str, value) -> str:
    """A spelling's value in a note: a schedule in Megatron's THRESHOLD:BATCH words, else as given."""
    if key == "batch_size_schedule":
        from .batch_ramp import tokens_text

        try:
            return '"' + " ".join(f"{tokens_text(float(_phase(p, 'from_tokens')))}:{_phase(p, 'global_batch')}"
                                  for p in value) + '"'
        except (TypeError, KeyError, AttributeError, ValueError):
            return repr(value)
    return str(value)


def command_line_spellings(data: dict, given: dict) -> list[str]:
    """The file's spellings of a setting (SPELLINGS) that a command-line spelling replaces, each taken out of `data`
    and returned as a line naming both values: `--global-batch-tokens 1048576` over a job file's `global_batch: 16`
    was refused as "both global_batch and global_batch_tokens are set"; now the option's batch is the plan's. Two
    spellings of one setting (_one_setting) both stand. `data`: the file's (or a saved fit row's) job fields;
    `given`: the command line's options that are set."""
    lines: list[str] = []
    for group in SPELLINGS:
        for k in group:
            if given.get(k) is None:
                continue
            for other in group:
                if other == k or given.get(other) is not None or data.get(other) is None:
                    continue
                if _one_setting(k, given[k], other, data[other]):
                    continue
                from .trainers.report import noted  # where a note is written: `fit` imports no trainers module

                lines.append(noted("assumed", other, f"the file's {_shown(other, data.pop(other))} is not kept: the "
                                   f"command line's {k} {_shown(k, given[k])} replaces it"))
    return lines
