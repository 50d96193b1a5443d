"""Issue 22 "flags beat file values", issue 24 "one vocabulary": every schema.Job field a job
YAML or trainer config sets is a command-line option (planner/field_options.py FIELD_OPTIONS,
one table that explain, check, budget, export and fit read). Per option: its value reaches the
plan (the plan field, and the figure it moves), the option's plan is the plan of a job YAML
that sets the field, it replaces a job file's value with a note, and a bad value exits 2
naming the option. Also: `explain --from-fit` notes an option that replaces the saved row's
value, and a fit row's reproduce line carries the options the fit was given.

tests/test_cli_job_fields.py holds the first six fields' own tests (fp8_attention, fp16, the
MoE router's coefficients and pre-softmax, fsdp_root_unit) and a trainer config's value replaced
(fp16, moe_permute_fusion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import assert_one_error
from planner.field_options import FIELD_NAMES, FIELD_OPTIONS
from planner.schema import Job
from planner.search import explain_args

DENSE = dict(model="llama3-8b", gpus=8)
FP8 = dict(DENSE, precision="fp8")
EAGER = dict(DENSE, attention="eager")
TT = dict(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp")
TT_ROTATE_TRAINS = str(Path(__file__).parent / "data" / "stacks" / "torchtitan-rotate-trains.yaml")  # cp_rotate.py [4]
TT_FP8 = dict(TT, precision="fp8")
MOE = dict(model="qwen3-30b-a3b", gpus=16, ep=8)
MG_OFF = dict(model="llama3-8b", gpus=8, stack="megatron", sharding="zero1", offload_optimizer="cpu")  # HybridDeviceOptimizer
DS_Z3 = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="fsdp")  # DeepSpeed ZeRO-3
GIB = 2**30

# (field, option words, the plan's value, the job it is given with, the job file's other value,
#  what it moves against the job without it: {"memory"|"step": +1 more | -1 less}, {} nothing priced)
CASES = [
    # fp8 details (plan._fp8_output_layer, memory.py fp8 weights [fp8w], precisions.py bf16 layers)
    ("fp8_output_layer", ["--fp8-output-layer"], True, TT_FP8, False, {"memory": -1, "step": -1}),
    ("fp8_allgather", ["--no-fp8-allgather"], False, TT_FP8, True, {"memory": +1, "step": +1}),
    # torchao's amax all-reduces of the fp8 all-gather once a step in place of one a weight a gather (step.py [39])
    ("fp8_precompute_scale", ["--fp8-precompute-scale"], True, TT_FP8, False, {"step": -1}),
    # attention.wq ([4096, 4096]) kept bf16: its GEMMs at the bf16 rate (step.py [18]), its weight gathered at 2 B
    # under the fp8 all-gather (memory.converted_linear_elems); saved tensors unchanged
    ("filter_fqns", ["--filter-fqns", "output,attention.wq"], ["output", "attention.wq"], TT_FP8,
     ["output", "attention.wk"], {"step": +1, "memory": +1}),
    # converted: faster GEMMs, and each expert's token group padded to 16 rows in place of 8 (layers/moe.py [14])
    ("fp8_grouped_experts", ["--fp8-grouped-experts"], True, dict(MOE, stack="torchtitan", sharding="fsdp", precision="fp8"),
     False, {"step": -1, "memory": +1}),
    ("fp8_param_gather", ["--fp8-param-gather"], True, dict(FP8, sharding="zero1"), False, {"memory": -1, "step": -1}),
    ("fp4_param_gather", ["--fp4-param-gather"], True,
     dict(DENSE, hardware="b200", precision="nvfp4", sharding="zero1"), False, {"memory": -1, "step": -1}),
    ("bf16_layers_at_start", ["--bf16-layers-at-start", "2"], 2, dict(FP8, fp8_recipe="tensorwise"), 1, {"memory": -1, "step": +1}),
    ("bf16_layers_at_end", ["--bf16-layers-at-end", "2"], 2, dict(FP8, fp8_recipe="tensorwise"), 1, {"memory": -1, "step": +1}),
    # kernels and fusions (plan.FUSION_SWITCHES: the unfused kernels' time and saved tensors)
    ("attention_kernel", ["--attention-kernel", "flash2"], "flash2", DENSE, "cudnn", {"step": +1}),
    # the attention module torchtitan's code builds: read by the start-up rules only (TORCHTITAN_VARLEN_CP at cp > 1),
    # priced by attention_kernel: nothing moves at cp 1
    ("attention_backend", ["--attention-backend", "varlen"], "varlen", TT, "flex", {}),
    ("transformer_impl", ["--transformer-impl", "local"], "local", EAGER, "transformer_engine", {"memory": +1}),
    ("local_core_attention", ["--local-core-attention"], True, EAGER, False, {"memory": +1}),
    ("apply_rope_fusion", ["--no-apply-rope-fusion"], False, DENSE, True, {"step": +1}),
    ("bias_activation_fusion", ["--no-bias-activation-fusion"], False, DENSE, True, {"memory": +1, "step": +1}),
    ("bias_dropout_fusion", ["--no-bias-dropout-fusion"], False, dict(model="megatron-gpt-1.7b", gpus=8), True,
     {"step": +1}),
    ("gradient_accumulation_fusion", ["--no-gradient-accumulation-fusion"], False, DENSE, True,
     {"memory": -1, "step": +1}),
    # Megatron-Core's own core attention's softmax (memory.py [sm]): the torch softmax's fp32 output, its unfused time
    ("masked_softmax_fusion", ["--no-masked-softmax-fusion"], False, dict(EAGER, transformer_impl="local", seq_len=4096), True,
     {"memory": +1, "step": +1}),
    ("attention_softmax_in_fp32", ["--no-attention-softmax-in-fp32"], False,
     dict(EAGER, transformer_impl="local", masked_softmax_fusion=False), True, {"memory": -1}),
    ("cross_entropy_fusion", ["--cross-entropy-fusion"], True, DENSE, False, {"memory": +1}),
    ("cross_entropy_fusion_impl", ["--cross-entropy-fusion-impl", "te"], "te", dict(DENSE, cross_entropy_fusion=True),
     "native", {"memory": -1, "step": -1}),
    ("chunked_loss", ["--chunked-loss"], True, TT, False, {"memory": -1}),
    ("moe_grouped_gemm", ["--moe-grouped-gemm"], True, MOE, False, {"memory": +1}),
    ("moe_permute_fusion", ["--moe-permute-fusion"], True, MOE, False, {"memory": +1, "step": -1}),
    ("moe_router_fusion", ["--moe-router-fusion"], True, MOE, False, {"memory": +1, "step": -1}),
    # the shared experts on a side stream beside the all-to-alls (step.py [38]): fc1 keeps its gathered input (memory.py [se])
    ("moe_shared_expert_overlap", ["--moe-shared-expert-overlap"], True, dict(model="deepseek-v2-lite", gpus=16, tp=2,
                                                                              ep=8), False, {"memory": +1, "step": -1}),
    # the routing map padded by Megatron's fused kernel: each MoE layer's dispatcher keeps an int32 copy (layers/moe.py [17])
    ("moe_router_padding", ["--moe-router-padding"], True,
     dict(MOE, precision="fp8", moe_permute_fusion=True, enable_experimental=True), False, {"memory": +1}),
    ("enable_experimental", ["--enable-experimental"], True,
     dict(MOE, precision="fp8", moe_permute_fusion=True, moe_router_padding=True), False, {"memory": +1}),
    # recompute, graphs, memory management
    ("recompute_modules", ["--recompute-modules", "core_attn,moe_act"], ["core_attn", "moe_act"],
     dict(MOE, recompute="selective", moe_grouped_gemm=True), ["core_attn"], {"memory": -1, "step": +1}),
    ("selective_recomputes_attention", ["--selective-recomputes-attention"], True, dict(TT, recompute="selective"), False,
     {"memory": -1, "step": +1}),
    # torchtitan 0.3's DTensor backend (memory.py [sb]): op SAC keeps the eager TP reduce-scatter outputs (more memory)
    # and re-runs 1 TP pair a layer, not 2 (less TP time)
    ("spmd_backend", ["--spmd-backend", "partial_dtensor"], "partial_dtensor",
     dict(TT, stack="torchtitan-0.3", tp=2, recompute="selective"), "full_dtensor", {"memory": +1, "step": -1}),
    # torchtitan 0.3's switches that only start-up rules read (rule87: TORCHTITAN_FSDP_SYMM_MEM_SM90, _SPMD_TYPECHECK_*):
    # priced as without them (said, not modelled)
    ("fsdp_symm_mem", ["--fsdp-symm-mem"], True, dict(TT, stack="torchtitan-0.3", hardware="h100-sxm"), False, {}),
    ("spmd_typechecking", ["--spmd-typechecking"], True, dict(TT, stack="torchtitan-0.3", recompute="full"), False, {}),
    # contiguous CP chunks: the last CP rank's (2 cp - 1) / cp = 1.5x of the causal core (step.cp_balance_factor;
    # hand values: tests/test_cp_balance.py); memory unchanged
    ("cp_load_balance", ["--no-cp-load-balance"], False, dict(TT, stack="torchtitan-0.3", hardware="h100-sxm", cp=2),
     True, {"step": +1}),
    # torch's PTRR balancer by name: priced as the balanced split (nothing moves); a flex model, whose BlockMask it
    # needs under CP (start-up rule TORCHTITAN_CP_PTRR_MASK; tests/test_cp_ptrr.py)
    ("cp_load_balancer", ["--cp-load-balancer", "ptrr"], "ptrr",
     dict(TT, hardware="h100-sxm", cp=2, attention_backend="flex"), "headtail", {}),
    # the TP-duplicated parameters all-reduced in every forward (step.py [sy]): more TP communication
    ("sync_tp_duplicated_parameters", ["--sync-tp-duplicated-parameters"], True,
     dict(model="megatron-gpt-1.7b", gpus=8, stack="megatron-deepspeed-bigscience", tp=2), False, {"step": +1}),
    # the kept layer inputs split over TP (memory.py [pa]): less memory, an all-gather before each re-run
    ("partition_activations", ["--partition-activations"], True,
     dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", tp=2, recompute="full"), False,
     {"memory": -1, "step": +1}),
    ("cuda_graph_impl", ["--cuda-graph-impl", "transformer_engine"], "transformer_engine", DENSE, "local", {}),
    ("cuda_graph_scope", ["--cuda-graph-scope", "attn mlp"], ["attn", "mlp"], dict(DENSE, cuda_graph_impl="transformer_engine"),
     ["attn"], {}),
    ("empty_unused_memory_level", ["--empty-unused-memory-level", "2"], 2, DENSE, 1, {}),  # by design (memory.py [13])
    # Megatron-FSDP's double-buffer pools (memory.py [db]): at zero2 (optim_grads, the megatron stack's one mode there) two
    # layer units' gradient buckets in place of the reduce-scatter queue (tests/test_megatron_fsdp_double_buffer.py)
    ("mfsdp_double_buffer", ["--mfsdp-double-buffer"], True,
     dict(DENSE, stack="megatron", sharding="zero2", recompute="full"),
     False, {"memory": -1}),
    # HSDP's optimizer over the replicas too (memory.py [oo], step.py [29]): the master and Adam's moments over dp 8 in
    # place of the shard group's 4; the replicas' all-reduce of fp32 gradients (4 B) becomes a reduce-scatter and an
    # all-gather of the 2-byte weights, fewer bytes (tests/test_megatron_fsdp_outer_optim.py)
    ("mfsdp_outer_optim", ["--mfsdp-outer-optim"], True,
     dict(DENSE, stack="megatron", sharding="hsdp", shard_group=4, recompute="full", gradient_accumulation_fusion=False),
     False, {"memory": -1, "step": -1}),
    # Megatron-FSDP v2 (memory.py [v2]): Llama 3 8B tp 1, 2 layer units gathered in place of 4, no reduce-scatter queue
    # (tests/test_megatron_fsdp_v2.py)
    ("mfsdp_v2", ["--mfsdp-v2"], True,
     dict(DENSE, stack="megatron", sharding="fsdp", tp=1, recompute="full", gradient_accumulation_fusion=False),
     False, {"memory": -1}),
    # MLA's fused TP-split down projection (layers/attention.py MLA.down_fused): 7/8 of each layer's 7,168 x 2,112 down
    # weights off a rank at tp 8, and its GEMM at 2,112 / 8 columns (tests/test_mla_down_proj_fusion.py); but its own TP
    # collectives (step.py [30]: the normed input's SP all-gather and the latents' gathers, T (h + 2 r_q + 2 r_kv +
    # d_rope) x 2 B a layer forward and backward, exposed; tests/test_mla_fused_gathers.py) outweigh the 7/8 of the
    # down GEMM saved at tp 8: the step lengthens (664.63 -> 668.78 s)
    ("mla_down_proj_fusion", ["--mla-down-proj-fusion"], True,
     dict(model="deepseek-v3", gpus=256, tp=8, pp=16, ep=2, etp=1, hardware="h800-sxm"), False,
     {"memory": -1, "step": +1}),
    ("defer_embedding_wgrad", ["--defer-embedding-wgrad", "0"], 0, dict(DENSE, pp=2), 1, {"memory": +1}),
    # Megatron's padded vocabulary (plan.with_padded_vocab): the megatron stack pads Llama 3's 128,256 rows at tp 8 to a
    # multiple of 128 x 8 = 1,024 itself (stack_db vocab_padding), 129,024 rows; pinned to its own 128,256 (Megatron
    # --no-pad-vocab-size): fewer embedding / output weights and logits, a smaller output GEMM
    ("padded_vocab_size", ["--padded-vocab-size", "128256"], 128256, dict(DENSE, tp=8), 129024, {"memory": -1, "step": -1}),
    # the divisor: 64 x 8 = 512 pads 128,256 to 128,512 rows (251 x 512), 512 fewer than the default's 129,024
    ("make_vocab_size_divisible_by", ["--make-vocab-size-divisible-by", "64"], 64, dict(DENSE, tp=8), 128,
     {"memory": -1, "step": -1}),
    ("dummy_wgrads", ["--dummy-wgrads", "per_call"], "per_call", DENSE, "none", {"memory": -1}),
    # TE before 2.7: 10 userbuffers, not 12; before 2.10 the overlapped GEMMs' workspaces replace the plain one
    ("te_version", ["--te-version", "1.8"], "1.8", dict(DENSE, tp=2, tp_comm_overlap=True), "2.9", {"memory": -1}),
    ("rope_cache", ["--rope-cache", "model"], "model", TT, "layer", {"memory": -1}),
    # torchtitan PR #996's loss: 6.5 B a logit at its peak where the plain loss holds 12 + a 2 B pool (memory.py [ck],
    # tests/test_loss_logit_chunks.py); the loss's kernels' time is not re-priced
    ("loss_logit_chunks", ["--loss-logit-chunks", "8"], 8, TT, 4, {"memory": -1}),
    ("cublas_workspace_config", ["--cublas-workspace-config", ":4096:16"], ":4096:16", DENSE, ":4096:8", {"memory": +1}),
    # Megatron-LM's :4096:8 (32 MiB) where the A100's default is 8.125 MiB (test_export_megatron_deterministic.py)
    ("deterministic_mode", ["--deterministic-mode"], True, dict(DENSE, hardware="a100-sxm-80gb", stack="megatron"), False,
     {"memory": +1}),
    # the trainer commit's date: which start-up checks run (stack runs.deterministic_refuses since), nothing priced
    ("trainer_date", ["--trainer-date", "2026-07-02"], "2026-07-02", dict(DENSE, stack="megatron"), "2026-07-01", {}),
    # Megatron-LM's --use-flash-attn: read only by an older deterministic check (start-up rule 98), nothing priced
    ("use_flash_attn", ["--use-flash-attn"], True, dict(DENSE, stack="megatron"), False, {}),
    # the config names its attention backend (Bridge's deterministic check reads it; tests/test_startup_deterministic.py)
    ("attention_kernel_named", ["--attention-kernel-named"], True,
     dict(DENSE, stack="megatron-bridge", attention_kernel="flash2"), False, {}),
    # the run's NCCL_ALGO: DDP's gradient all-reduce on one H100 node by ring, not NVLS (tests/test_nccl_algo.py)
    ("nccl_algo", ["--nccl-algo", "Ring"], "Ring", dict(DENSE, tp=1, pp=1, cp=1, sharding="none", micro_batch=1,
                                                       global_batch=32, seq_len=4096), "^NVLS,NVLSTree", {"step": +1}),
    # the run's NCCL_PROTO: delayed scaling's amax all-reduces over one H100 node under Simple (NVLS, 23 us), not
    # NCCL's ring LL (15 us) (tests/test_nccl_proto.py, tests/test_fp8_amax.py)
    ("nccl_proto", ["--nccl-proto", "Simple"], "Simple", dict(FP8, tp=2, pp=1, cp=1, fp8_recipe="delayed",
                                                              stack="megatron", micro_batch=1, global_batch=32,
                                                              seq_len=4096), "^LL128", {"step": +1}),
    # the run's NCCL_NVLS_ENABLE 0: DDP's gradient all-reduce on one H100 node by ring, not NVLS
    # (tests/test_nccl_nvls_enable.py), and no NVLS buffers for its 8-rank group: -258 MiB (memory.py [nv],
    # tests/test_nvls_buffers.py)
    ("nccl_nvls_enable", ["--nccl-nvls-enable", "0"], 0, dict(DENSE, tp=1, pp=1, cp=1, sharding="none", micro_batch=1,
                                                              global_batch=32, seq_len=4096), 2,
     {"step": +1, "memory": -1}),
    ("optimizer_implementation", ["--optimizer-implementation", "foreach"], "foreach", TT, "for-loop", {}),
    ("early_step_in_backward", ["--early-step-in-backward"], True, TT, False, {"memory": -1}),
    # the distributed optimizer's all-gather after the step exposed whole, not behind the next forward (step.py [40])
    ("dp_param_gather_overlap", ["--no-dp-param-gather-overlap"], False, dict(DENSE, stack="megatron", sharding="zero1"),
     True, {"step": +1}),
    # CPU offload (planner/offload.py, tests/test_offload.py): the optimizer partition off the GPU, the CPU's step on
    ("offload_optimizer", ["--offload-optimizer", "cpu"], "cpu", dict(DENSE, stack="megatron-deepspeed", sharding="zero2"),
     "none", {"memory": -1, "step": +1}),
    # ZeRO-3's 16-bit partition off the GPU too, copied up before each all-gather: beside the backward of the
    # step's 256 micro-batches (ZeRO-3's overlap_comm on), hidden: the step does not move
    ("offload_param", ["--offload-param", "cpu"], "cpu", dict(DS_Z3, offload_optimizer="cpu"), "none",
     {"memory": -1}),
    # Megatron's HybridDeviceOptimizer (tests/test_offload.py): half the partition back on the GPU (memory up), half
    # the host's Adam (the longer step, so the step down)
    ("offload_fraction", ["--offload-fraction", "0.5"], 0.5, MG_OFF, 1.0, {"memory": +1, "step": -1}),
    # the copies pipelined with the host's Adam: the step the longest of them, not their sum
    ("offload_overlap", ["--offload-overlap"], True, MG_OFF, False, {"step": -1}),
    # Megatron's precision-aware optimizer with fp32 moments and bf16 main gradients (tests/test_precision_aware_step.py):
    # TE's FusedAdam's 2 B master remainders and no fp32 copy of the shard at the step, memory down; its update moves
    # 26 B a parameter, not 28 (step.adam_bytes_per_param: the remainders and the bf16 weight read), the step down
    ("precision_aware_optimizer", ["--precision-aware-optimizer"], True, dict(DENSE, stack="megatron", sharding="zero1",
     bytes_per_param="mixed16"), False, {"memory": -1, "step": -1}),
    # Muon: one fp32 momentum (4 B) in place of Adam's two moments (8 B) on every 2-D hidden matrix (memory.py [mu]);
    # the step adds the Newton-Schulz iterations' GEMMs (step.py [28], term muon_ns), so it moves up
    ("optimizer", ["--optimizer", "muon"], "muon", dict(DENSE, stack="megatron", sharding="zero1"), "adam",
     {"memory": -1, "step": +1}),
    # Muon's layer-wise optimizer without its layout: the word embedding's master and moments whole on one rank
    # (memory.py [mu], whole_tensor_excess), priced for that rank; DDP without its distributed optimizer all-reduces
    # the gradients where the layout's reduce-scatters them, and allgather_params gathers once (step.py [28]): up
    ("optimizer_whole_tensors", ["--optimizer-whole-tensors"], True,
     dict(DENSE, stack="megatron", sharding="zero1", optimizer="muon"), False, {"memory": +1, "step": +1}),
    # Muon's Newton-Schulz steps (--muon-num-ns-steps): 10 runs twice the default 5's GEMMs (step.py [28], term
    # muon_ns); the temporaries are one step's: the memory stays
    ("muon_ns_steps", ["--muon-ns-steps", "10"], 10, dict(DENSE, stack="megatron", sharding="zero1", optimizer="muon"),
     5, {"memory": 0, "step": +1}),
    # Muon's TP mode (--muon-tp-mode; step.py [28]): blockwise at tp 2 runs Newton-Schulz on each rank's half-matrix
    # shards with no TP all-gather (muon_ns 0.250 s -> 0.121 s, the gathers gone); the temporaries are not the peak
    # Muon's q / k / v split off (--muon-no-split-qkv; step.py [28]): linear_qkv's 6144 x 4096 whole costs more
    # Newton-Schulz FLOPs than q 4096^2 and k, v 1024 x 4096 apart (tests/test_muon_tp_mode.py)
    ("muon_split_qkv", ["--no-muon-split-qkv"], False, dict(DENSE, stack="megatron", sharding="zero1", optimizer="muon"),
     True, {"memory": 0, "step": +1}),
    ("muon_tp_mode", ["--muon-tp-mode", "blockwise"], "blockwise",
     dict(DENSE, stack="megatron", sharding="zero1", optimizer="muon", tp=2), "duplicated", {"memory": 0, "step": -1}),
    # Newton-Schulz's float32 matmul precision (--muon-fp32-matmul-prec; step.py [28]): high runs the GEMMs on TF32
    # tensor cores at half the bf16 rate (muon_ns 0.250 s -> 0.500 s at tp 2); the fp32 temporaries are not the peak
    ("muon_fp32_matmul_prec", ["--muon-fp32-matmul-prec", "high"], "high",
     dict(DENSE, stack="megatron", sharding="zero1", optimizer="muon", tp=2), "medium", {"memory": 0, "step": +1}),
    # the job's host (plan._apply_host) in place of the hardware entry's, read by CPU offload (tests/test_host_adam.py):
    # half h100-sxm's DRAM peak (563.2 GB/s), the host's Adam twice as long; half its PCIe Gen5 link (64 GB/s), the
    # copies twice as long; host memory only gates (check), no figure moves
    ("host_memory_gbps", ["--host-memory-gbps", "281.6"], 281.6, dict(DENSE, stack="megatron-deepspeed", sharding="zero2",
     offload_optimizer="cpu"), 300.0, {"step": +1}),
    ("pcie_gbps", ["--pcie-gbps", "32"], 32.0, dict(DENSE, stack="megatron-deepspeed", sharding="zero2",
     offload_optimizer="cpu"), 48.0, {"step": +1}),
    ("host_memory_gb", ["--host-memory-gb", "1024"], 1024.0, dict(DENSE, stack="megatron-deepspeed", sharding="zero2",
     offload_optimizer="cpu"), 512.0, {}),
    # DeepSpeed's partitioned pipeline sends off (step.py [25]): the whole send in place of a 1/tp one and the TP
    # all-gathers (Llama 3 8B tp 2 pp 2, 32 micro-batches: the critical last stage's one all-gather a micro-batch,
    # its own, pp_comm 4.68 -> 6.02 ms, tests/test_export_mds.py; slower without, since issue 22 critstage2 prices
    # each stage's own all-gathers, where the busiest stage's two rode on the last stage's sends before: 6.24 ms)
    ("pipe_partitioned", ["--no-pipe-partitioned"], False, dict(model="llama3-8b", gpus=8, hardware="h100-sxm", tp=2,
     pp=2, stack="megatron-deepspeed", sharding="zero1", seq_len=4096, micro_batch=1, global_batch=64,
     sequence_parallel=False), True, {"step": 1}),
    # on a stack whose training takes it (torchtitan before 1e8f9acd1; the catalog's never does: planner/cp_rotate.py [4])
    ("cp_rotate_method", ["--cp-rotate-method", "alltoall"], "alltoall", dict(TT, cp=2, stack=TT_ROTATE_TRAINS), "allgather",
     {}),
    ("deepspeed_zero3", ["--deepspeed-zero3", "reduce_bucket_size=1e9"], {"reduce_bucket_size": 10**9}, DS_Z3,
     {"reduce_bucket_size": 10**8}, {"memory": +1}),
    # MoE dispatch and routing (planner/dispatch.py)
    ("moe_fp8_dispatch", ["--moe-fp8-dispatch"], True, dict(MOE, precision="fp8"), False, {"step": -1}),
    # the router's logits dtype: the z-loss keeps them (planner/layers/moe.py router_saved_terms; fp64 needs the unfused router),
    # and the alltoall dispatcher's probabilities' all-to-all moves 4 B a routed row, not 2 (planner/dispatch.py [12])
    ("moe_router_dtype", ["--moe-router-dtype", "fp32"], "fp32", dict(MOE, moe_z_loss_coeff=0.001, moe_router_fusion=False),
     "fp64", {"memory": +1, "step": +1}),
    # DeepSpeed-MoE's capacity floor: C = max(ceil(4,096 x 2 / 8), 2,048) = 2,048, twice the [S, E, C] one-hots and
    # einsum FLOPs of the stack's floor 4 (layers/moe.py [18])
    ("moe_min_capacity", ["--moe-min-capacity", "2048"], 2048, dict(model="mixtral-8x7b", gpus=64, ep=8, tp=1, pp=1,
     stack="megatron-deepspeed", sharding="zero1", seq_len=4096, micro_batch=1), 8, {"memory": +1, "step": +1}),
    ("moe_route_nodes", ["--moe-route-nodes", "1"], 1, dict(model="deepseek-v3", gpus=256, ep=64, pp=4), 2,
     {"step": -1}),
    # Megatron's uneven split (pipeline.py [14]): llama3-8b's 32 layers on pp 4 hold 8 a stage; 5 on one end leaves
    # (32 - 5) / 3 = 9 on each other stage (the file's 2: 10 each). On the first stage: the heaviest stage was the
    # first (the embedding, 4 micro-batches in flight), now lighter; the step, set by the slowest, grows (the
    # middle's 9 layers). On the last: the last stage (8 layers and the 128,256-row output layer, about 2.4
    # layers' GEMMs) was the slowest, now 5 + 2.4 < 9, so the step shrinks; the middle stage's 9 layers with
    # more micro-batches in flight than the last's weigh more
    ("first_stage_layers", ["--first-stage-layers", "5"], 5, dict(DENSE, pp=4), 2, {"memory": -1, "step": +1}),
    ("last_stage_layers", ["--last-stage-layers", "5"], 5, dict(DENSE, pp=4), 2, {"memory": +1, "step": -1}),
    # HybridEP's non-blocking dispatch on torchtitan 0.3 (layers/moe.py [19]): without the option the stack's 1.0 (its
    # config functions'), the expert tensors at 8 x min(16, 8) = 64 rows a local token; 0, the blocking dispatch, holds
    # the 8 x load routed, and the gated activation's bytes run over those
    ("moe_hybridep_capacity_factor", ["--moe-hybridep-capacity-factor", "0"], 0.0,
     dict(MOE, stack="torchtitan-0.3", moe_dispatcher="hybridep"), 0.5, {"memory": -1, "step": -1}),
]
IDS = [c[0] for c in CASES]
# the plan (plan.plan_dict) leaves a field out at its default: a boolean off, these at these values
# (a fusion switch on: the stack's fused kernel; muon_tp_mode: the megatron stack's, the case's)
OMITTED = {"optimizer": "adam", "muon_ns_steps": 5, "muon_tp_mode": "duplicated", "muon_split_qkv": True, "muon_fp32_matmul_prec": "medium", "pipe_partitioned": True, "offload_fraction": 1.0, "offload_optimizer": "none", "offload_param": "none", "cp_rotate_method": "allgather", "cp_load_balance": True, "cross_entropy_fusion_impl": "native", "transformer_impl": "transformer_engine",
           "apply_rope_fusion": True, "bias_activation_fusion": True, "bias_dropout_fusion": True,
           "gradient_accumulation_fusion": True, "masked_softmax_fusion": True, "attention_softmax_in_fp32": True,
           "dp_param_gather_overlap": True}  # (left out: tied to the DP overlap, on)
SIX = ("fp8_attention", "fp16", "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_router_pre_softmax", "fsdp_root_unit")
OWN_TESTS = SIX + ("moe_dispatcher",)  # tests/test_dispatch_option.py


def _args(job: dict) -> list[str]:
    """A job's fields as options (a boolean as --name / --no-name)."""
    out = []
    for k, v in job.items():
        flag = f"--{k.replace('_', '-')}"
        out += ([flag if v else "--no-" + flag[2:]] if isinstance(v, bool) else [flag, str(v)])
    return out


def _explain(cli, *args):
    r = cli("explain", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def _yaml(tmp_path, job: dict):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(job))
    return f


def test_every_job_field_has_an_option():
    """Every Job field is an option of the table or of explain's own declarations (the first
    options, some with their own spellings); sharding_mode is --sharding's (it takes a mode)."""
    from planner.cli.core import job_options

    import inspect

    own = job_options(*[None] * sum(p.default is inspect.Parameter.empty
                                    for p in inspect.signature(job_options).parameters.values()))
    covered = set(own) | set(FIELD_NAMES) | {"sharding_mode"}
    assert set(Job.model_fields) - covered == set()
    assert set(CASES_FIELDS := [c[0] for c in CASES]) | set(OWN_TESTS) == set(FIELD_NAMES), "a table option without a test"
    assert len(CASES_FIELDS) == len(set(CASES_FIELDS))


def test_the_table_spells_each_option_as_its_field():
    for o in FIELD_OPTIONS:
        assert o.field in Job.model_fields
        assert o.flag == "--" + o.field.replace("_", "-")
        assert o.help and "default" in o.help, o.field


@pytest.mark.parametrize("field, opt, value, job, other, moves", CASES, ids=IDS)
def test_option_reaches_the_plan_as_the_file_field_does(cli, tmp_path, field, opt, value, job, other, moves):
    """The plan field is the option's value, and the plan (every memory and time figure) is the
    plan of a job YAML that sets the field."""
    got, _ = _explain(cli, *_args(job), *opt)
    assert got["plan"][field] == value
    want, _ = _explain(cli, _yaml(tmp_path, {**job, field: value}))
    assert got["plan"] == want["plan"]
    assert got["memory"]["total_bytes"] == want["memory"]["total_bytes"]
    assert got["time"]["step_s"] == want["time"]["step_s"]


@pytest.mark.parametrize("field, opt, value, job, other, moves", CASES, ids=IDS)
def test_option_moves_what_it_prices(cli, field, opt, value, job, other, moves):
    """Against the same job without the option: the figures the field prices move, in the
    direction its mechanism gives (the schema's description); the others stay."""
    got, _ = _explain(cli, *_args(job), *opt)
    plain, _ = _explain(cli, *_args(job))
    for figure, key in (("memory", ("memory", "total_bytes")), ("step", ("time", "step_s"))):
        a, b = got[key[0]][key[1]], plain[key[0]][key[1]]
        sign = moves.get(figure, 0)
        assert (a > b) - (a < b) == sign, (field, figure, a, b)


def test_deepspeed_zero3_by_hand(cli):
    """reduce_bucket_size=1e9: ZeRO-3's contiguous gradient (IPG) bucket of 1e9 elements in the model
    dtype (2 B) where DeepSpeed's default is 5e8 (stack_db megatron-deepspeed fsdp.zero3_modules,
    DeepSpeed config.py @38327e07 l. 109): +(1e9 - 5e8) x 2 B = +1e9 B (memory.py [z3]). Every Llama 3 8B
    module is below either bucket (qkv 25,165,824, proj 16,777,216, gate-up 117,440,512, down 58,720,256), so a
    flush copies at most the bucket [z3c]. At 5e8 the output layer's moment (its weight and gradient, 2 x
    525,336,576) with the last layers' modules the reuse distance keeps (all of the last layer's, P = 218,103,808,
    and the down projection of the one below: 276,824,064 [z3r]) is the peak; at 1e9 a layer's is: gate-up's
    backward, its weight + the prefetch of proj, qkv and the next layer's down (P in all) + its gradient + the 1e9
    copy = 1,335,544,320 elements, beside it the layer below's kept down (58,720,256). x 2 B: +1e9 (buffer)
    + 2 (P + 117,440,512 + 1e9 + 58,720,256 - 2 x 525,336,576 - 276,824,064) = +1,133,534,720 B."""
    got, _ = _explain(cli, *_args(DS_Z3), "--deepspeed-zero3", "reduce_bucket_size=1e9")
    plain, _ = _explain(cli, *_args(DS_Z3))
    p, out = 218_103_808, 525_336_576
    moved = 2 * (p + 117_440_512 + 10**9 + 58_720_256 - 2 * out - 276_824_064)
    assert got["memory"]["total_bytes"] - plain["memory"]["total_bytes"] == (10**9 - 5 * 10**8) * 2 + moved
    assert got["memory"]["terms"]["zero3_bucket_copy"] == 2 * 10**9


def test_cublas_workspace_config_by_hand(cli):
    """:4096:16 is 4096 KiB x 16 = 64 MiB a cuBLAS workspace where the H100's default is 32 MiB
    (hardware_db torch_cublas_workspace_MiB, :4096:8), on the megatron stack's two BLAS handles
    (stack_db memory.blas_handles: the forward's thread and the autograd engine's): +64 MiB."""
    got, _ = _explain(cli, *_args(DENSE), "--cublas-workspace-config", ":4096:16")
    plain, _ = _explain(cli, *_args(DENSE))
    assert got["memory"]["total_bytes"] - plain["memory"]["total_bytes"] == 2 * (16 - 8) * 4096 * 1024


@pytest.mark.parametrize("field, opt, value, job, other, moves", CASES, ids=IDS)
def test_option_replaces_the_job_files_value_with_a_note(cli, tmp_path, field, opt, value, job, other, moves):
    f = _yaml(tmp_path, {**job, field: other})
    got, err = _explain(cli, f, *opt)
    assert got["plan"][field] == value
    assert f"note: {f}: {field}={value}: the command line replaces the file's {other}" in err
    same, err = _explain(cli, f)  # without the option: the file's value, no note
    assert same["plan"].get(field, OMITTED.get(field, False if isinstance(other, bool) else None)) == other
    assert "the command line replaces" not in err


@pytest.mark.parametrize("opt, job, needle", [
    # the field's own type and bounds (cli/core.field_values, typer's min): the option named
    (["--attention-kernel", "flash3"], DENSE, "--attention-kernel"),
    (["--transformer-impl", "te"], DENSE, "--transformer-impl"),
    (["--cross-entropy-fusion-impl", "x"], DENSE, "--cross-entropy-fusion-impl"),
    (["--recompute-modules", "core_attn,attn"], DENSE, "--recompute-modules"),
    (["--cuda-graph-impl", "full"], DENSE, "--cuda-graph-impl"),
    (["--cuda-graph-impl", "local", "--cuda-graph-scope", "attn,experts"], DENSE, "--cuda-graph-scope"),
    (["--empty-unused-memory-level", "3"], DENSE, "--empty-unused-memory-level"),
    (["--defer-embedding-wgrad", "-1"], DENSE, "--defer-embedding-wgrad"),
    (["--dummy-wgrads", "always"], DENSE, "--dummy-wgrads"),
    (["--rope-cache", "x"], DENSE, "--rope-cache"),
    (["--cublas-workspace-config", "4096:8"], DENSE, "--cublas-workspace-config"),
    (["--optimizer-implementation", "adam"], TT, "--optimizer-implementation"),
    (["--cp-rotate-method", "ring"], TT, "--cp-rotate-method"),
    (["--bf16-layers-at-start", "-1"], FP8, "--bf16-layers-at-start"),
    (["--bf16-layers-at-end", "x"], FP8, "--bf16-layers-at-end"),
    (["--moe-route-nodes", "0"], MOE, "--moe-route-nodes"),
    (["--deepspeed-zero3", "stage3_prefetch=0"], DS_Z3, "--deepspeed-zero3"),
    (["--deepspeed-zero3", "reduce_bucket_size"], DS_Z3, "--deepspeed-zero3"),
    (["--deepspeed-zero3", "reduce_bucket_size=-1"], DS_Z3, "--deepspeed-zero3"),
    (["--deepspeed-zero3", "reduce_bucket_size=1e9"], DENSE, "deepspeed_zero3"),
    # a value the plan refuses with the job (plan.resolve's checks, each the trainer's own): the field named
    (["--fp8-output-layer"], TT, "fp8_output_layer"),
    (["--fp8-allgather"], TT, "fp8_allgather"),
    (["--fp8-precompute-scale"], TT, "fp8_precompute_scale"),
    (["--fp8-precompute-scale", "--no-fp8-allgather"], TT_FP8, "fp8_precompute_scale"),
    (["--fp8-grouped-experts"], DENSE, "fp8_grouped_experts"),
    (["--fp8-param-gather"], DENSE, "fp8_param_gather"),
    (["--fp4-param-gather"], FP8, "fp4_param_gather"),
    (["--bf16-layers-at-end", "2"], DENSE, "bf16_layers"),
    (["--local-core-attention"], DENSE, "eager"),
    (["--no-apply-rope-fusion"], TT, "apply_rope_fusion"),
    (["--no-bias-activation-fusion"], TT, "bias_activation_fusion"),
    (["--no-bias-dropout-fusion"], TT, "bias_dropout_fusion"),
    (["--no-gradient-accumulation-fusion"], TT, "gradient_accumulation_fusion"),
    (["--cross-entropy-fusion"], TT, "cross_entropy_fusion"),
    (["--cross-entropy-fusion-impl", "te"], DENSE, "cross_entropy_fusion"),
    (["--chunked-loss"], DENSE, "chunked_loss"),
    (["--selective-recomputes-attention"], DENSE, "selective_recomputes_attention"),
    (["--spmd-backend", "partial_dtensor"], DENSE, "spmd_backend"),
    (["--cuda-graph-scope", "attn"], DENSE, "cuda_graph_impl"),
    (["--early-step-in-backward"], DENSE, "early_step_in_backward"),
    (["--early-step-in-backward", "--pp", "2"], TT, "early_step_in_backward"),
    (["--cp-rotate-method", "alltoall"], DENSE, "cp_rotate_method"),
    (["--moe-fp8-dispatch"], DENSE, "moe_fp8_dispatch"),
    (["--moe-route-nodes", "2"], DENSE, "moe_route_nodes"),
    (["--first-stage-layers", "3", "--pp", "4"], DENSE, "the 29 layers left do not divide equally over the 3 middle stages"),
    (["--last-stage-layers", "0", "--pp", "4"], DENSE, "--last-stage-layers"),
    (["--moe-hybridep-capacity-factor", "1.0"], DENSE, "moe_hybridep_capacity_factor"),
    (["--moe-hybridep-capacity-factor", "1.5"], DENSE, "moe_hybridep_capacity_factor"),
    (["--host-memory-gbps", "0"], DENSE, "--host-memory-gbps"),
    (["--pcie-gbps", "-64"], DENSE, "--pcie-gbps"),
    (["--host-memory-gb", "x"], DENSE, "--host-memory-gb"),
    (["--te-version", "1.5"], DENSE, "te_version 1.5 is older than Transformer Engine 1.6"),
    (["--te-version", "2.x"], DENSE, "te_version"),
    (["--te-version", "2.9"], TT, "te_version is set but stack torchtitan runs no Transformer Engine"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_bad_values_exit_2(cli, opt, job, needle):
    assert_one_error(cli("explain", *_args(job), *opt), needle)


@pytest.mark.parametrize("cmd", ["explain", "check", "budget", "export", "fit"])
def test_every_job_command_takes_every_option(cli, cmd):
    text = cli(cmd, "--help").stdout
    for o in FIELD_OPTIONS:
        assert o.flag in text, (cmd, o.flag)
        if o.kind == "bool":
            assert "--no-" + o.flag[2:] in text, (cmd, o.flag)


def test_check_budget_and_export_apply_the_options(cli, tmp_path):
    f = _yaml(tmp_path, dict(MOE, tokens=1e12))
    opts = ["--moe-permute-fusion", "--moe-router-fusion", "--cublas-workspace-config", ":4096:16"]
    want, err = _explain(cli, f, *opts)
    r = cli("check", f, *opts, "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    checked = json.loads(r.stdout)[0]
    assert (checked["plan"]["moe_permute_fusion"], checked["plan"]["cublas_workspace_config"]) == (True, ":4096:16")
    assert checked["memory"]["total_bytes"] == want["memory"]["total_bytes"]
    b = cli("budget", f, *opts, "--format", "json")
    assert b.exit_code == 1, b.stderr  # the plan does not fit (122.9 GB a GPU): the budget printed, exit 1
    budget = json.loads(b.stdout)
    assert budget["plan"]["moe_permute_fusion"] is True
    assert budget["training"]["step_s"] == pytest.approx(want["time"]["step_s"], rel=1e-12)
    e = cli("export", f, "--format", "megatron", *opts[:2])
    assert e.exit_code == 0, e.stderr
    assert "--moe-permute-fusion" in e.stdout and "--moe-router-fusion" in e.stdout


def test_from_fit_notes_the_options_that_replace_the_rows_values(cli, tmp_path):
    """explain --from-fit with an option that replaces the saved row's value: the same note as a
    job file's (before: replaced silently)."""
    r = cli("fit", *_args(MOE), "--tp", "2", "--pp", "1", "--top", "1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    saved = tmp_path / "fit.json"
    saved.write_text(r.stdout)
    row = json.loads(r.stdout)[0]["plan"]
    assert row["moe_router_fusion"] is False and row["micro_batch"] != 1
    got, err = _explain(cli, "--from-fit", saved, "--moe-router-fusion", "--micro-batch", "1")
    assert (got["plan"]["moe_router_fusion"], got["plan"]["micro_batch"]) == (True, 1)
    assert (f"note: {saved} row 1: micro_batch=1: the command line replaces the file's {row['micro_batch']}; "
            "moe_router_fusion=True: the command line replaces the file's False") in err
    same, err = _explain(cli, "--from-fit", saved, "--no-moe-router-fusion")
    assert "replaces" not in err  # the row's own value given again: nothing replaced


def test_fit_prices_every_row_with_the_options_and_the_row_reproduces(cli):
    """fit gives every candidate the options as job fields; the row's reproduce line
    (search.explain_args) carries each, so explain gives the row's step time and memory."""
    opts = ["--moe-grouped-gemm", "--moe-permute-fusion", "--no-moe-router-fusion", "--cublas-workspace-config", ":4096:16",
            "--recompute-modules", "core_attn,moe_act"]
    r = cli("fit", *_args(MOE), "--tp", "2", "--pp", "1", "--recompute", "selective", "--top", "1", *opts,
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    p = row["plan"]
    assert (p["moe_grouped_gemm"], p["moe_permute_fusion"], p["moe_router_fusion"], p["cublas_workspace_config"],
            p["recompute_modules"]) == (True, True, False, ":4096:16", ["core_attn", "moe_act"])
    job = Job(**MOE, moe_grouped_gemm=True, moe_permute_fusion=True, moe_router_fusion=False,
              cublas_workspace_config=":4096:16", recompute_modules=["core_attn", "moe_act"])
    args = explain_args(job, row)
    for o in opts:
        assert o in args, o
    again, _ = _explain(cli, *args)
    assert again["time"]["step_s"] == row["time"]["step_s"]
    assert again["memory"]["total_bytes"] == row["memory"]["total_bytes"]
    assert "--moe-grouped-gemm" not in explain_args(Job(**MOE), row)  # a bare job: none of them


def test_fit_export_reads_back_with_the_cublas_workspace_config(cli):
    """The run's CUBLAS_WORKSPACE_CONFIG: a Megatron launch script holds it as an environment line (the
    writer's `export CUBLAS_WORKSPACE_CONFIG=...`, read back by the Megatron reader since 41f23a6), so fit
    --export writes it and its read-back passes with the 64 MiB it moves, instead of a note to launch
    with it (what formats that cannot hold it still print)."""
    r = cli("fit", *_args(MOE), "--tp", "2", "--pp", "1", "--top", "1", "--cublas-workspace-config", ":4096:16",
            "--moe-permute-fusion", "--export", "megatron")
    assert r.exit_code == 0, r.stderr
    assert "--moe-permute-fusion" in r.stdout
    assert "export CUBLAS_WORKSPACE_CONFIG=:4096:16" in r.stdout.splitlines()
    assert "launch with CUBLAS_WORKSPACE_CONFIG" not in r.stderr
