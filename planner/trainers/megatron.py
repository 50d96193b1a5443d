"""Read a Megatron-LM argument list into planner job fields: a file of arguments, or a
launch script whose `pretrain_gpt.py` / `torchrun` line holds them.

A Megatron-DeepSpeed script (`--deepspeed`, `--deepspeed_config`, `--zero-stage`, ... : megatron_deepspeed.py
MDS_MARKERS, read from the flags, never the file name) is read here and then as the job it launches: its
DeepSpeed flags and the ds_config JSON it names or writes with `cat <<EOT > $FILE` (megatron_deepspeed.py).

The script is not run. Backslash continuations are joined; top-level shell assignments
(`NAME=value`, `export NAME=value`, `export -n NAME`, `declare [-x|+x|-i|-l|-u|-n] NAME=value` and
`typeset` / `local` / `readonly`, arrays `NAME=( ... )` and `NAME+=( ... )`) are read and bash's
parameter expansion (`${NAME:-default}` and the other defaults, nested; `${#NAME}`, `${NAME:off:len}`,
`${NAME#p}` and the other pattern removals, `${NAME/p/r}`, case modification, `${!NAME}`: _Shell,
shell_pattern.py), `$(( a * b ))` / `$[ a * b ]` of known integers are expanded into the command line;
quoting is bash's (single quotes literal, a variable's quote characters characters in a pattern: _Shell.expand);
an `if` / `elif` whose condition tests the script's constants (`[[ ]]` with `&&` `||` `!` `( )` and its `==`
patterns, `[ ]` / `test`: _condition), on one line or several (_one_line_if), picks the branch read, and a
`[[ ... ]] && X=...` / `|| X=...` list runs what bash runs (_and_or); lines inside other `if/case/for/while`
blocks (a one-line `for ...; done` one of them: _one_line_block) are not evaluated (listed as assumed); a `$VAR` it cannot
expand stays as written, a command substitution `$( ... )` / `` `...` ``, arithmetic it does not
evaluate or an expansion it cannot evaluate statically stays one word as written, and a
modelled flag whose value is unexpanded is an error (naming the script line of a substitution)
unless the command line gives the job field the flag sets (COMMAND_LINE_FLAGS: flags beat files).
The words are split with shlex. Before the script name, torchrun's `--nproc_per_node` x
`--nnodes` give the GPU count.

Option names follow Megatron-LM megatron/training/arguments.py [1] (`--num-virtual-stages-
per-pipeline-rank` is the successor of `--num-layers-per-virtual-pipeline-stage`; both are
read). Modelled:
  --tensor-model-parallel-size, --pipeline-model-parallel-size, --context-parallel-size,
  --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank,
  --sequence-parallel, --use-distributed-optimizer (-> zero1), --use-torch-fsdp2 (-> fsdp),
  --recompute-granularity full|selective, --recompute-activations (= selective),
  --recompute-method uniform|block, --recompute-num-layers, --micro-batch-size,
  --global-batch-size, --seq-length, --bf16, --fp16, --fp8-format, --fp8-recipe,
  --fp8-dot-product-attention (-> fp8_attention, _fp8_attention; not a Megatron-LM @d98e8a64 flag: refused in a
  Megatron-LM script, megatron_argparse.NEVER_DEFINED; read in a Megatron-DeepSpeed one),
  --tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather (-> dp_param_gather_overlap: false where the
  distributed optimizer's gather runs without it under --overlap-grad-reduce; true, as stated, where Megatron's
  validate_args asserts, l. 1024-1029: without --overlap-grad-reduce, or without --use-distributed-optimizer,
  --use-megatron-fsdp or --optimizer dist_muon; refused then by start-up rule MEGATRON_PARAM_GATHER, code 108),
  --use-tp-pp-dp-mapping,
  --train-iters / --train-samples (-> tokens),
  model shape: --num-layers, --hidden-size, --ffn-hidden-size, --num-attention-heads,
  --group-query-attention, --num-query-groups, --kv-channels, --vocab-size, --swiglu,
  --normalization, --untie-embeddings-and-output-weights, --position-embedding-type,
  --disable-bias-linear (--add-bias-linear, never a Megatron-LM flag, refused; read in a Megatron-DeepSpeed
  script), --attention-dropout, --hidden-dropout,
  --max-position-embeddings, --qk-layernorm (ModelSpec.qk_norm; absent: none, Megatron's default),
  --use-rope-scaling (ModelSpec.rope_scaling llama3 at Megatron's fixed numbers, trainers.MEGATRON_LLAMA3_ROPE,
  compared like the shape; absent on a rotary model: none; --rope-scaling-factor listed as ignored, pretrain_gpt
  does not pass it), --rotary-seq-len-interpolation-factor (rope without MLA: ModelSpec.rope_scaling linear,
  linear_rope_scaling), --position-embedding-type yarn without MLA with --rotary-scaling-factor,
  --yarn-original-max-position-embeddings, --yarn-beta-fast, --yarn-beta-slow, --mscale, --mscale-all-dim,
  --[no-]yarn-correction-range-round-to-int (ModelSpec.yarn_rope_scaling: rope_yarn_params and
  rope_attention_factor, megatron_model.megatron_yarn; a rope script is a model without yarn); with
  --multi-latent-attention and --rope-type yarn (or none) --rotary-scaling-factor [1], --mscale [1],
  --mscale-all-dim [0], which replace MLATransformerConfig's YaRN factor 40 and mscales (ModelSpec.mla_yarn_rope_scaling,
  megatron_model.megatron_mla_yarn; its original length and betas have no flag); elsewhere those flags are
  listed as ignored; --rotary-base [10000] where Megatron builds a rotary (ModelSpec.rope_theta, compared like
  the shape, megatron_model.megatron_rotary_base);
  and, for a model the flags define (below), the vocabulary
  (--tokenizer-type, --make-vocab-size-divisible-by, --padded-vocab-size, --no-pad-vocab-size);
  for a catalog model or --model, --make-vocab-size-divisible-by, --padded-vocab-size and
  --no-pad-vocab-size pad the model's vocab_size (the tokenizer's size) as Megatron does: the job's
  padded_vocab_size where the rows differ (megatron_model.catalog_vocab_rows, plan.with_padded_vocab);
  with --model, the --vocab-size of a tokenizer that reads it (NullTokenizer, TikTokenizer:
  megatron_model.VOCAB_SIZE_TOKENIZERS) at or above the model's tokens is the run's tokenizer, a job
  setting padded in the model's place (not a shape --model replaces),
  --squared-relu / --quick-geglu, the MoE flags (--moe-shared-expert-intermediate-size,
  --moe-shared-expert-gate, --moe-layer-freq, --moe-router-score-function,
  --moe-router-enable-expert-bias), the MLA flags (--multi-latent-attention, --q-lora-rank,
  --kv-lora-rank, --qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim), --mtp-num-layers, a hybrid
  stack's --hybrid-layer-pattern / --hybrid-override-pattern with --mamba-num-heads, --mamba-head-dim,
  --mamba-state-dim, --mamba-num-groups, the G layers' --linear-num-key-heads, --linear-num-value-heads,
  --linear-key-head-dim, --linear-value-head-dim, --linear-conv-kernel-dim (with
  --experimental-attention-variant gdn and its --linear-attention-freq), the pattern's '/' MTP parts with
  --mtp-num-layers and --mtp-use-repeated-layer (repeated_mtp; also for pretrain_gpt.py's MTP without --model)
  and --spec naming the TE hybrid stack spec (the virtual
  pipeline size and the split from the pattern's '|' segments: _hybrid_split)
  (megatron_model.py cites each),
  --attention-backend / --transformer-impl (-> attention eager or flash [4]),
  --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split,
  --fp16 / --bf16 with --accumulate-allreduce-grads-in-fp32 / --grad-reduce-in-bf16 (the
  gradient buffer's dtype -> bytes_per_param [5]);
  --use-precision-aware-optimizer with --main-grads-dtype, --main-params-dtype,
  --exp-avg-dtype, --exp-avg-sq-dtype (-> bytes_per_param [5b], and precision_aware_optimizer true:
  TE's master remainders and no fp32 gradient copy at the step, memory.py [sg]; refused without the
  distributed optimizer, and any non-fp32 dtype without it, as Megatron refuses them);
  --optimizer-cpu-offload with --optimizer-offload-fraction, --overlap-cpu-optimizer-d2h-h2d
  (-> offload_optimizer cpu, offload_fraction, offload_overlap: _optimizer_offload, planner/offload.py
  hybrid_device);
  under --use-megatron-fsdp, --megatron-fsdp-main-grads-dtype (-> bytes_per_param.gradients: 2 B
  for auto, its default, bf16 and fp16, 4 B for fp32) and --megatron-fsdp-grad-comm-dtype (auto, or
  the main gradients' dtype: priced; another: not modelled) (_megatron_fsdp_grads; memory.py [mg]),
  --fsdp-double-buffer, --use-nccl-ub and --megatron-fsdp-max-pool-double-buffer (-> the job's mfsdp_double_buffer:
  memory.py [db]), --outer-dp-sharding-strategy (optim under HSDP -> the job's mfsdp_outer_optim: memory.py [oo]),
  --megatron-fsdp-version (2: the job's mfsdp_v2; both refused where Megatron refuses them) (_mfsdp_settings);
  ignored without it;
  read and reported as not modelled (TrainerConfig.unmodelled: a warning on stderr; `planner
  validate` skips a corpus row with one): fp32 parameters (neither --bf16 nor --fp16),
  --optimizer other than adam and muon (muon, dist_muon -> the job's optimizer muon, memory.py [mu]; --muon-scalar-optimizer
  other than adam not modelled), activation offloading (--fine-grained-activation-offloading,
  --offload-modules, --cpu-offloading), pageable offload buffers (--no-pin-cpu-grads, --no-pin-cpu-params),
  --use-megatron-fsdp (priced as the sharding its --data-parallel-sharding-strategy names:
  no_shard none, optim zero1, optim_grads zero2, optim_grads_params fsdp, the default),
  --num-distributed-optimizer-instances > 1 (outside Megatron-FSDP optim_grads_params, where it is HSDP, and the
  distributed optimizer, where it is the job's shard_group dp / N: below),
  --pipeline-model-parallel-layout (a layout the planner's split cannot place: below), --recompute-modules other than core_attn, layernorm, moe_act and mla_up_proj, --export-kd-teacher-load (a distillation
  teacher).
  Read into the plan (issue 22): the stack's sharding modes (--use-distributed-optimizer,
  --use-torch-fsdp2, --use-megatron-fsdp with --data-parallel-sharding-strategy, and with
  --num-distributed-optimizer-instances N over optim_grads_params: HSDP of shard group dp / N; with
  --use-distributed-optimizer: zero1 over shard_group dp / N, stack_db runs.sharding optimizer_instances),
  --expert-tensor-parallel-size (the job's etp, priced as its own axis: planner/moe.py), --moe-expert-capacity-factor
  and --moe-pad-expert-input-to-capacity, the router's balancing (--moe-router-force-load-balancing: moe_rank_imbalance
  1.0; --moe-router-enable-expert-bias, --moe-router-load-balancing-type: moe_load_balancing, planner/imbalance.py),
  the router's path (--moe-aux-loss-coeff of an auxiliary-loss type: moe_aux_loss_coeff, absent 0.0 as in Megatron-LM,
  listed as assumed; a list of types with a list of coefficients by router_balancing, the Bridge reader's rule; --moe-z-loss-coeff: moe_z_loss_coeff; --moe-router-pre-softmax: moe_router_pre_softmax;
  --moe-router-dtype: moe_router_dtype; what the router saves for its backward: planner/layers/moe.py
  router_saved_terms), --moe-shared-expert-overlap (moe_shared_expert_overlap with shared experts, planner/step.py [38];
  listed ignored without them),
  --microbatch-group-size-per-virtual-pipeline-stage (the job's microbatch_group: the interleaved
  schedule's N, planner/pipeline.py [10]), the fusion switches [6] (--no-rope-fusion,
  --no-bias-swiglu-fusion / --no-bias-gelu-fusion, --no-bias-dropout-fusion,
  --no-gradient-accumulation-fusion -> apply_rope_fusion, bias_activation_fusion,
  bias_dropout_fusion, gradient_accumulation_fusion false; --no-masked-softmax-fusion and
  --no-persist-layer-norm ignored where Transformer Engine's kernels run: _fusions), --cp-comm-type (the
  job's cp_comm_type with cp > 1: p2p, all_gather, a2a, a2a+p2p with --hierarchical-context-parallel-sizes,
  priced as run, planner/cp_comm_type.py; a list of one value is that value, a per-layer list of several
  values is refused), --no-overlap-p2p-communication (the job's pp_p2p_overlap false: the interleaved
  schedule's p2p blocking, planner/step.py pp_comm; pp > 2 with virtual stages, start-up rule
  MEGATRON_P2P_OVERLAP_PP; --overlap-p2p-communication, its older store_true spelling of the
  default before Megatron-LM 4eeff55d1f, read as the default with a note for a --trainer-date in its dates,
  megatron_argparse.OLDER_FLAGS, else refused),
  --overlap-p2p-communication-warmup-flush (the job's pp_p2p_overlap_warmup_flush: the warm-up's
  and flush's p2p overlapped too, planner/step.py [13]), CUDA graphs (--cuda-graph-impl,
  --cuda-graph-modules / --cuda-graph-scope, --enable-cuda-graph, --external-cuda-graph -> the
  job's cuda_graph_impl and cuda_graph_scope, checked as Megatron checks them:
  planner/cuda_graphs.py; --cuda-graph-warmup-steps ignored), and the pipeline
  split as Megatron places it (--decoder-first/last-pipeline-num-layers -> the job's
  first_stage_layers / last_stage_layers, Megatron's own placement, planner/pipeline.py [14], checked
  as Megatron checks them; --pipeline-model-parallel-layout: read into the planner's split where it
  is one, else listed as not modelled).
Every other flag is listed: as ignored ('--flag=value (why)') where it cannot change the
plan's memory or step time (IGNORED_REASONS: optimizer and schedule settings, data, logging
and checkpoints, rotary constants, numerics constants and loss coefficients, --apply-layernorm-1p,
--attention-softmax-in-fp32 and --apply-query-key-layer-scaling with Transformer Engine's attention: with
Megatron-Core's own (--transformer-impl local) they are the job's attention_softmax_in_fp32, as
--no-masked-softmax-fusion is its masked_softmax_fusion, _fusions, planner/memory.py [sm]), else as not modelled
with what it changes, cited at the code
(NOT_MODELLED, NOT_MODELLED_PATTERNS: --manual-gc /
--manual-gc-interval (host pauses), --bf16-reduce (no Megatron-LM flag at any commit),
--deterministic-mode (slower kernels), --check-weight-hash-across-dp-replicas-interval, --spec,
Megatron-FSDP dtypes, encoder-decoder shapes, the --mamba-* shape flags without a hybrid pattern, ...; --rotary-percent below 1; and any
flag the planner does not know, "unknown to the planner": the CI corpus's argument files have
none, tests/test_reader_lists.py); --moe-permute-fusion and
--moe-router-fusion are the job's moe_permute_fusion / moe_router_fusion (absent: the stack's default,
off as in Megatron-LM, listed as assumed; planner/layers/moe.py unfused_dispatch_bytes prices the
unfused ops); --moe-router-padding-for-quantization (and --moe-router-padding-for-fp8, the older spelling that
sets it) and --enable-experimental are the job's moe_router_padding and enable_experimental
(_router_padding: with --moe-permute-fusion the dispatcher keeps the padded int32 routing map, and DeepEP's
fused multihot saves its int32 position map, planner/layers/moe.py [17]; absent on an fp8 / fp4 MoE run the
padding is off, listed as assumed; on a dense model the padding flag is listed as ignored); --no-async-tensor-model-
parallel-allreduce, ignored by Megatron-LM since 2024 and removed in 639c08ab82, is listed ignored.
--empty-unused-memory-level N is the job's empty_unused_memory_level (0, 1 or 2; it moves no priced figure:
torch.cuda.empty_cache() frees only wholly free segments between phases, planner/memory.py [13]). --step-batch-size-schedule "tokens:batch ..." is the job's
batch_size_schedule (planner/batch_ramp.py: parsed and checked as Megatron does, each phase priced at its
own batch); its last batch is the global batch, and --global-batch-size beside it (which Megatron refuses)
must equal that batch; --train-iters then counts each step at its phase's batch. --rampup-batch-size START INCREMENT
SAMPLES is listed as ignored because Megatron-LM @d98e8a64 ignores it (deprecated, passed to no calculator: the run
steps at --global-batch-size), with the --step-batch-size-schedule that runs the ramp its removed calculator ran
(batch_ramp.rampup_phases, the rule the Megatron-DeepSpeed reader reads it by; _rampup_ignored). A flag of argparse nargs '*' takes every word
up to the next flag (an argument file writes a YAML list `[a b]` as `--flag a b`).

Inferred (listed as assumed): an absent store_true flag is off, as in arguments.py
(--sequence-parallel, --tp-comm-overlap, --overlap-grad-reduce: Megatron's defaults are
off, unlike the planner stack's recipe defaults); the rank order is parallel_state's
'tp-cp-ep-dp-pp' (or 'tp-cp-ep-pp-dp' with --use-tp-pp-dp-mapping) [2] -> tp-cp-dp-pp /
tp-cp-pp-dp; --fp16 is priced as bf16 (the same 2-byte width and tensor peak) and read as
the job's fp16 (refused under --use-torch-fsdp2, stack_db runs.sharding job_settings); the model
is --model if given (the shape flags must agree with it), else the one catalog model with
the flags' core shape that no other shape flag contradicts (field comparison, no names
read), else the model the flags define: megatron_model.py builds it as Megatron does, with
Megatron's defaults for what the flags leave out (each listed as assumed), and it is written
as a content-addressed model YAML in the cache folder (trainers.write_model_file:
$PLANNER_CACHE_DIR, else $XDG_CACHE_HOME/planner or ~/.cache/planner), whose path is the
job's model: `explain` names it ("model=<file>: from the Megatron flags"), and `export` and
`explain --from-fit` read it like any model YAML; --recompute-method uniform re-runs every
layer (its chunk size is listed as not modelled); the attention kernel is flash (TE's fused
attention under --attention-backend auto, Megatron's default) unless the flags say unfused.

References
[1] NVIDIA/Megatron-LM megatron/training/arguments.py @307dcf37 (2024): the parallel
    sizes, --num-layers-per-virtual-pipeline-stage, --sequence-parallel,
    --use-distributed-optimizer, recompute, batch, --seq-length, --bf16/--fp16, --fp8-format,
    --tp-comm-overlap, --overlap-grad-reduce / --overlap-param-gather, the shape flags and
    validate_args' defaults (--ffn-hidden-size: 4h, or int(8h/3 / 64) x 64 with --swiglu;
    --kv-channels: h / heads; global batch: micro-batch x dp); and its 2025 main for
    --num-virtual-stages-per-pipeline-rank, --use-torch-fsdp2 and --fp8-recipe.
[2] NVIDIA/Megatron-LM megatron/training/initialize.py _initialize_distributed ->
    parallel_state.initialize_model_parallel(order='tp-cp-ep-dp-pp' if not
    args.use_tp_pp_dp_mapping else 'tp-cp-ep-pp-dp').
[3] NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh @f7ec7ea8 and
    examples/gpt3/train_gpt3_175b_distributed.sh @4b36c6c4 (the launch-script layout).
[4] NVIDIA/Megatron-LM @d98e8a64: megatron/core/transformer/enums.py AttnBackend (flash,
    fused, unfused, local, auto); megatron/core/models/common/language_module/language_module.py
    _set_attention_backend (unfused: NVTE_UNFUSED_ATTN=1 and the fused kernels off);
    megatron/core/models/backends.py LocalSpecProvider.core_attention = DotProductAttention
    (--transformer-impl local); megatron/core/transformer/dot_product_attention.py (keeps
    attention_probs for the backward); transformer_config.py transformer_impl default
    transformer_engine, attention_backend default auto.
[5] NVIDIA/Megatron-LM @d98e8a64: megatron/training/arguments.py validate_args (params_dtype;
    with --bf16 accumulate_allreduce_grads_in_fp32 is set unless --grad-reduce-in-bf16;
    --fp16 leaves it as given; --optimizer default adam, --data-parallel-sharding-strategy
    default optim_grads_params); megatron/training/training.py (ddp grad_reduce_in_fp32 =
    accumulate_allreduce_grads_in_fp32); megatron/core/distributed/param_and_grad_buffer.py
    group_params_for_buffers (grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype).
[5b] The precision-aware optimizer (bytes_per_param; DeepSeek-V3's bf16 AdamW moments,
    arXiv:2412.19437 sec. 3.3.3): NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py
    l. 3667-3685 (--use-precision-aware-optimizer, --main-grads-dtype fp32|bf16,
    --main-params-dtype fp32|fp16, --exp-avg-dtype / --exp-avg-sq-dtype fp32|fp16|bf16|fp8);
    megatron/core/optimizer/optimizer_config.py l. 192 (store_param_remainders True), l. 407-413,
    l. 433-478; megatron/core/optimizer/__init__.py l. 564-585, 1057; NVIDIA/TransformerEngine
    @4329ff84 transformer_engine/pytorch/optimizers/fused_adam.py (exp_avg_dtype fp32, fp16,
    bf16, uint8 (fp8); store_param_remainders: int16 remainders of fp32 master weights).
[6] The fusion switches: NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 2887-2905
    and 2939-2948 (--no-masked-softmax-fusion, --no-bias-gelu-fusion, --no-bias-swiglu-fusion,
    --no-bias-dropout-fusion, --no-rope-fusion, --no-persist-layer-norm,
    --no-gradient-accumulation-fusion), argument_utils.py l. 314-319, and what reads them:
    transformer/mlp.py, fusions/fused_bias_dropout.py, models/common/embeddings/rope_utils.py,
    tensor_parallel/layers.py, transformer/dot_product_attention.py, fusions/fused_layer_norm.py
    (priced: stack_db/megatron.yaml kernels, planner/step.py [11], planner/memory.py [uf]).
"""

from __future__ import annotations

import math
import re
import functools
import shlex
from pathlib import Path
import typing
from typing import Optional

from .. import files
from ..errors import PlannerError
from ..schema import RecomputeModule, split_fields
from . import shell_arith, shell_pattern
from . import (MEGATRON_LLAMA3_ROPE, TrainerConfig, _show, words_of, catalog_models_with_shape, check_model_shape, resolve_gpus,
               write_model_file)
from .report import Note, about, json_value, listed, listed_all, noted, short_value
from .megatron_model import (GDN_FLAGS, HYBRID_FLAGS, HYBRID_TE_SPEC, MAMBA_FLAGS, hybrid_mtp, hybrid_pattern,
                             INT64_MAX, VOCAB_SIZE_TOKENIZERS, catalog_vocab_rows, stack_pads_other, MAX_COUNT, MLA_YARN_FLAGS, NOT_BUILT, YARN_FLAGS, YARN_ROUND, _int, _short,
                             layer_windows, megatron_mla_yarn, megatron_rotary_base, megatron_yarn, mla_yarn_built,
                             model_spec_from_flags, rope_scaled, rotary_built, yarn_built)
from ..batch_ramp import iters_samples, parse_megatron, rampup_phases, to_megatron
from ..cuda_graphs import IMPLS as CUDA_GRAPH_IMPLS, SCOPES as CUDA_GRAPH_SCOPES
from . import megatron_deepspeed as mds
from . import megatron_argparse
from .megatron_deepspeed import MDS_BOOL_FLAGS

# the flags that set Megatron-Core's attention_softmax_in_fp32 (arguments.py @d98e8a64 l. 3067 store_true; l. 1713-1715:
# --apply-query-key-layer-scaling sets it): read with Megatron-Core's own core attention (_fusions), else ignored
SOFTMAX_FP32_FLAGS = ("--attention-softmax-in-fp32", "--apply-query-key-layer-scaling")
# --moe-router-padding-for-quantization and its older spelling, which sets it (transformer_config.py @d98e8a64
# l. 771-778, 2641-2647): the job's moe_router_padding (_router_padding)
ROUTER_PADDING_FLAGS = ("--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8")
# store_true flags of arguments.py that the planner reads (no value follows them)
BOOL_FLAGS = {
    "--sequence-parallel", "--use-distributed-optimizer", "--use-torch-fsdp2", "--recompute-activations", "--bf16",
    "--fp16", "--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather", "--use-tp-pp-dp-mapping",
    "--group-query-attention", "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--add-bias-linear", "--overlap-moe-expert-parallel-comm", "--defer-embedding-wgrad-compute", "--moe-enable-deepep",
    "--moe-shared-expert-overlap",  # the job's moe_shared_expert_overlap (step.py [38])
    "--cross-entropy-loss-fusion", "--moe-grouped-gemm", "--moe-router-force-load-balancing",
    "--moe-permute-fusion", "--moe-router-fusion", "--moe-router-pre-softmax",
    # the model the flags define (megatron_model.py)
    "--multi-latent-attention", "--moe-shared-expert-gate", "--moe-router-enable-expert-bias", "--squared-relu",
    "--quick-geglu", "--use-rotary-position-embeddings", "--no-position-embedding", "--no-pad-vocab-size",
    "--use-rope-scaling",
    # the plan and what it cannot express
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "--use-megatron-fsdp",
    "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16", "--fp8-param-gather", "--fp4-param-gather", "--use-precision-aware-optimizer",
    "--fine-grained-activation-offloading", "--cpu-offloading", "--optimizer-cpu-offload", "--first-last-layers-bf16",
    "--overlap-cpu-optimizer-d2h-h2d", "--use-torch-optimizer-for-cpu-offload", "--no-pin-cpu-grads", "--no-pin-cpu-params",
    # the fusion switches (_fusions: job fields, or ignored / not modelled where they change nothing priced)
    "--no-rope-fusion", "--no-bias-swiglu-fusion", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
    "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion", "--no-persist-layer-norm",
    # the pipeline p2p overlap (the job's pp_p2p_overlap) and its warm-up / flush (pp_p2p_overlap_warmup_flush)
    "--no-overlap-p2p-communication", "--overlap-p2p-communication-warmup-flush",
    # CUDA graphs, the deprecated spellings of --cuda-graph-impl (_cuda_graphs)
    "--enable-cuda-graph", "--external-cuda-graph",
    # the routing map padded for quantized grouped GEMMs and the experimental kernels (_router_padding)
    *ROUTER_PADDING_FLAGS, "--enable-experimental",
}
VALUE_FLAGS = {
    "--megatron-fsdp-main-grads-dtype", "--megatron-fsdp-grad-comm-dtype",  # _megatron_fsdp_grads
    "--megatron-fsdp-main-params-dtype",  # _megatron_fsdp_buffers
    "--megatron-fsdp-version", "--outer-dp-sharding-strategy",  # _megatron_fsdp_buffers (_mfsdp_settings)
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank", "--recompute-granularity",
    "--recompute-method", "--recompute-num-layers", "--micro-batch-size", "--global-batch-size", "--seq-length",
    "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe", "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16", "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
    "--num-query-groups", "--kv-channels", "--vocab-size", "--normalization", "--position-embedding-type",
    "--attention-dropout", "--hidden-dropout", "--max-position-embeddings", "--train-iters", "--train-samples",
    "--expert-model-parallel-size", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    # the model the flags define (megatron_model.py)
    "--tokenizer-type", "--make-vocab-size-divisible-by", "--padded-vocab-size", "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq", "--moe-router-score-function", "--moe-router-num-groups", "--moe-router-group-topk", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
    "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers", "--encoder-num-layers", "--decoder-num-layers",
    "--hybrid-layer-pattern", "--hybrid-override-pattern",  # a hybrid stack (megatron_model.hybrid_pattern)
    "--window-size", "--window-attn-skip-freq", "--rope-type",
    # the plan and what it cannot express
    "--attention-backend", "--transformer-impl", "--expert-tensor-parallel-size", "--data-parallel-sharding-strategy",
    "--optimizer", "--muon-scalar-optimizer", "--muon-num-ns-steps", "--muon-tp-mode", "--muon-fp32-matmul-prec", "--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
    "--optimizer-offload-fraction",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--pipeline-model-parallel-layout",
    "--num-distributed-optimizer-instances", "--recompute-modules", "--offload-modules", "--export-kd-teacher-load",
    "--moe-expert-capacity-factor", "--wgrad-deferral-limit", "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend",
    "--moe-dispatch-fwd-dtype", "--moe-combine-bwd-dtype",  # the MoE wire dtypes: bf16 only (_wire_dtypes)
    "--microbatch-group-size-per-virtual-pipeline-stage", "--cp-comm-type", "--hierarchical-context-parallel-sizes",
    "--step-batch-size-schedule",  # the job's batch_size_schedule (planner/batch_ramp.py)
    "--rampup-batch-size",  # ignored by Megatron-LM @d98e8a64, listed with the schedule it stood for (_rampup_ignored)
    "--empty-unused-memory-level",  # the job's empty_unused_memory_level (_read_empty_cache)
    "--cuda-graph-impl", "--cuda-graph-modules", "--cuda-graph-scope",  # CUDA graphs (_cuda_graphs)
    "--moe-router-load-balancing-type",  # the job's moe_load_balancing (_balancing; planner/imbalance.py)
    "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-dtype",  # the router's path (_router; planner/layers/moe.py [10])
}
# store_true flags the planner does not read but that take no value (so the next word is not theirs)
# store_true flags read as part of the model or the plan (checked against the model, or priced with
# another flag: --moe-pad-expert-input-to-capacity is the capacity factor's padding, priced with it)
BOOL_READ = {"--no-use-layer-wise-param-layout",  # the job's optimizer_whole_tensors with muon (memory.py [mu])
             "--muon-no-split-qkv",  # the job's muon_split_qkv false with muon (step.py [28])
             "--muon-use-syrk",  # refused with muon (the pinned Emerging-Optimizers v0.3.0 lacks it: _unmodelled)
             "--mla-down-proj-fusion",  # the job's mla_down_proj_fusion (layers/attention.py MLA.down_fused)
             "--overlap-p2p-communication", "--multi-latent-attention", "--moe-router-enable-expert-bias", "--moe-shared-expert-gate", "--qk-layernorm",
             "--moe-pad-expert-input-to-capacity", "--use-rotary-position-embeddings",
             "--fp8-dot-product-attention",  # the job's fp8_attention (_fp8_attention)
             "--use-flash-attn",  # the job's use_flash_attn, read by the older deterministic check alone (_deterministic)
             # Megatron-FSDP's double buffer (the job's mfsdp_double_buffer) and what sets it (_mfsdp_settings)
             "--fsdp-double-buffer", "--use-nccl-ub", "--megatron-fsdp-max-pool-double-buffer",
             "--fsdp-db-use-persist-buf-on-alloc-fail", "--fsdp-manual-registration"}
KNOWN_BOOL_IGNORED = {
    *MDS_BOOL_FLAGS,  # Megatron-DeepSpeed's store_true flags (megatron_deepspeed.py reads them)
    "--is-hybrid-model",  # TransformerConfig.is_hybrid_model (store_true from the argument factory): IGNORED_REASONS
    "--use-mcore-models", "--use-flash-attn", "--apply-layernorm-1p", "--moe-pad-expert-input-to-capacity",
    "--calculate-per-token-loss", "--log-throughput", "--profile",
    "--mock-data", "--no-create-attention-mask-in-dataloader", "--no-mmap-bin-files",
    "--bf16-reduce", "--no-async-tensor-model-parallel-allreduce", "--overlap-p2p-communication", "--manual-gc",
    "--log-timers-to-tensorboard", "--log-memory-to-tensorboard", "--log-validation-ppl-to-tensorboard",
    "--distributed-backend-nccl",
    *YARN_ROUND,  # store_true / store_false (arguments.py @d98e8a64 l. 2406-2410); read where yarn_built (_rope_scaling)
}
# flags read but not priced that change memory or step time: listed as "not modelled" with what
# they change (the plan is priced without them); every flag the planner does not know (that Megatron-LM or the entry
# script defines: a flag neither defines is refused, megatron_argparse.unknown_flags) is listed
# there too (it may change either). Megatron-LM megatron/training/arguments.py @d98e8a64.
NOT_MODELLED = {
    # training_config.py @d98e8a64 l. 91-104; training.py l. 4402-4411 (gc.disable(), gc.collect() once) and
    # l. 4026-4033 (gc.collect() every --manual-gc-interval steps, 0: never)
    "--manual-gc": "Python's threshold garbage collector off (gc.disable()) and a full gc.collect() every "
                   "--manual-gc-interval steps (0: never), training.py @d98e8a64 l. 4402-4411, 4026-4033: host pauses "
                   "aligned across ranks instead of one rank's stalling the collectives; the planner prices no host "
                   "garbage collection, with or without it",
    "--manual-gc-interval": "the steps between manual garbage collections (with --manual-gc), training.py @d98e8a64 "
                            "l. 4026-4033: host pauses the planner does not price",
    # not a Megatron-LM flag: `git log -S"'--bf16-reduce'"` finds none in Megatron-LM's history to @d98e8a64
    "--bf16-reduce": "no such flag in Megatron-LM (none in its history to @d98e8a64: its parser refuses it); "
                     "the gradients' reduce dtype is --grad-reduce-in-bf16 / --accumulate-allreduce-grads-in-fp32, "
                     "which the reader prices",
    # the flags below are the ones the CI corpus (tests/data/megatron_ci/args) sets that the reader does not price;
    # places at Megatron-LM @d98e8a64
    "--deterministic-mode": "deterministic kernels only (model_parallel_config.py l. 229 'usually means slower "
                            "execution'; training/determinism.py: torch.use_deterministic_algorithms, NCCL_ALGO Ring; TE's "
                            "attention with NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, extensions/transformer_engine.py l. "
                            "2155-2161): slower backward kernels than priced (the flag is the job's deterministic_mode, the "
                            "CUBLAS_WORKSPACE_CONFIG :4096:8 it sets from 2026-07-08 priced, plan._cublas_workspace; what "
                            "it refuses at start-up is checked, dated by the job's trainer_date: --tp-comm-overlap from "
                            "2026-07-08 and --cross-entropy-loss-fusion from 2024-07-25 (rules MEGATRON_DETERMINISTIC_TP_OVERLAP, "
                            "_CE_FUSION), --use-flash-attn from 2024-05-04 to 2026-07-08 and an MoE model from "
                            "2024-07-25 to 2024-08-02 (_USE_FLASH_ATTN, _MOE), an NCCL_ALGO token outside Ring, "
                            "CollnetDirect, CollnetChain, ^NVLS from 2026-07-08 and a value not one of Tree, Ring, "
                            "CollnetDirect, CollnetChain, ^NVLS from 2024-05-04 to 2026-07-08 (_NCCL_ALGO, "
                            "_NCCL_CHOICE); an NCCL_ALGO the script exports is the job's nccl_algo, priced, and where "
                            "it exports none the Ring determinism.py l. 27-31 sets from 2026-07-08 is (stack "
                            "runs.deterministic_nccl_algo, listed as assumed))",
    "--check-weight-hash-across-dp-replicas-interval": "after the optimizer step of every N-th iteration (training.py "
                                                       "l. 3981-3990) core/utils.py check_param_hashes_across_dp_replicas "
                                                       "(l. 936-1010) copies each weight to the host (param.data.to('cpu')) "
                                                       "for a host SHA-1 and all-gathers the 20-B digests over the data-"
                                                       "parallel group: host and PCIe time on those iterations only, "
                                                       "outside the steady step priced; on the GPU 20 B a parameter "
                                                       "tensor x (dp + 1), no allocated peak moved",
    "--spec": "the module spec the layers are built from (e.g. 'local': Megatron-Core's layers without Transformer "
              "Engine; arguments.py l. 3645): other kernels than the stack prices",
    "--overlap-param-gather-with-optimizer-step": "the first model chunk gets an optimizer of its own, and its "
                                                  "parameter all-gathers are dispatched right after that optimizer's "
                                                  "step, beside the other chunks' steps, not in the next forward's "
                                                  "pre-hooks (optimizer/__init__.py @d98e8a64 l. 1063-1065, optimizer.py "
                                                  "l. 1672-1675, distributed_data_parallel.py l. 635): the same gathered "
                                                  "buffers (no bytes moved), the first chunk's all-gather hidden behind "
                                                  "the optimizer step instead of the first micro-batch's forward",
    "--tp-comm-overlap-cfg": "Transformer Engine's userbuffers settings for the TP overlap (chunks, SMs per "
                             "collective): the overlapped TP time",
    "--use-fused-weighted-squared-relu": "a fused kernel for the weighted squared-ReLU activation: fewer bytes than "
                                         "the unfused kernels priced",
    "--no-check-for-nan-in-loss-and-grad": "no NaN / Inf check of the gradient buffers (param_and_grad_buffer.py l. "
                                           "655-657): one read of the gradients per step saved",
    "--ddp-average-in-collective": "the 1/dp gradient scaling done by the collective (ReduceOp.AVG) instead of a "
                                   "pass over the gradient buffer before it",
    "--ddp-bucket-size": "the gradient buckets' size, one collective each, in place of Megatron-Core's max(40e6, 1e6 x "
                         "dp x cp), which the stack prices (training.py @d98e8a64 resolve_ddp_bucket_size l. 2179-2194, "
                         "get_model l. 2496-2502: for DDP and Megatron-FSDP alike); under --use-megatron-fsdp it cuts "
                         "only the parameters outside the FSDP units, the embedding, final norm and output layer "
                         "(megatron_fsdp/param_and_grad_buffer.py l. 1858-1866; mcore_fsdp_adapter.py l. 158-160, 171: "
                         "the layers are units at every sharded strategy) and under optim / optim_grads sizes the "
                         "reduce-scatter queue, max(1e9, it) (megatron_fsdp.py l. 420-443); the stack prices those two "
                         "in the DDP buckets above, optim_grads_params one collective per unit (not read without "
                         "--overlap-grad-reduce: no buckets, l. 2192-2193)",
    "--ddp-num-buckets": "the gradient buckets' size set by count (training/models/dist_utils.py l. 304-308): the "
                         "reduce-scatter overlap's granularity",
    "--cross-entropy-fusion-impl": "which fused cross-entropy kernel runs (native or TE, language_module.py l. "
                                   "174-197): the loss's bytes and time",
    "--mtp-use-repeated-layer": "one multi-token-prediction layer's weights shared across the MTP depths: fewer "
                                "weights than one layer per depth",
    "--model-provider": "the model builder (e.g. llava_vlm: a vision encoder and projector besides the language model)",
    "--export-kd-cfg": "knowledge distillation (post_training/model_builder.py l. 498): a teacher model's weights and "
                       "its forward every step",
    "--export-te-mcore-model": "ModelOpt's model built with Transformer Engine layers (post_training/model_builder.py "
                               "l. 113)",
    "--export-model-type": "ModelOpt's model class (e.g. MambaModel)",
    "--encoder-seq-length": "an encoder-decoder model's encoder sequence length: activations and attention",
    "--decoder-seq-length": "an encoder-decoder model's decoder sequence length: activations and attention",
    "--total-seq-length": "the MIMO example's sequence length, text and image tokens (examples/mimo/data/mock.py "
                          "l. 261; not a Megatron-LM training flag): the tokens each micro-batch's activations hold",
    "--vocab-extra-ids": "extra tokenizer ids (T5's sentinels, training_config.py l. 695): a larger vocabulary, "
                         "embedding and output layer",
}
# flag families the reader does not price that change memory or time: (pattern, what they change)
NOT_MODELLED_PATTERNS = (
    (r"--mamba-(num-heads|head-dim|state-dim|num-groups)$",
     "the Mamba mixer's shape: its weights, activations and scan time"),
)
# TE's fused MoE kernels (Megatron-Core moe_permute_fusion / moe_router_fusion, store_true: arguments.py
# @d98e8a64 from transformer_config.py l. 941-947, default off): the job's fields of the same names
MOE_FUSION_FLAGS = {"--moe-permute-fusion": "moe_permute_fusion", "--moe-router-fusion": "moe_router_fusion"}
# flags with no effect on the plan's memory or step time: listed as "ignored" with the reason
IGNORED_REASONS = (
    (r"--(lr|min-lr|decoupled-lr|decoupled-min-lr|lr-[\w-]+|weight-decay[\w-]*|start-weight-decay|end-weight-decay|"
     r"adam-[\w-]+|sgd-momentum|clip-grad|init-method-[\w-]+|seed|loss-scale[\w-]*|initial-loss-scale|min-loss-scale|"
     r"hysteresis)$", "optimizer, schedule and initialisation settings"),
    (r"--(data-path|split|vocab-file|merge-file|tokenizer-[\w-]+|tiktoken-[\w-]+|mock-data|data-cache-path|"
     r"no-mmap-bin-files|num-workers|no-create-attention-mask-in-dataloader|dataloader-type|train-data-path|"
     r"valid-data-path|test-data-path|make-vocab-size-divisible-by)$", "the data pipeline"),
    (r"--(log-[\w-]+|eval-[\w-]+|save|save-interval|load|no-load-[\w-]+|tensorboard-[\w-]+|wandb-[\w-]+|profile|"
     r"profile-[\w-]+|exit-[\w-]+|distributed-timeout-minutes|ckpt-format|use-checkpoint-args|timing-log-level|"
     r"use-dist-ckpt|async-save|distributed-backend-nccl|distributed-backend)$",
     "logging, evaluation and checkpointing (between steps)"),
    # --rotary-seq-len-interpolation-factor and the YaRN flags are read where Megatron applies them (_rope_scaling:
    # rope_scaled, yarn_built, mla_yarn_built; --rotary-base: rotary_built); elsewhere (no rotary that takes them)
    # they are listed here
    (r"--rotary-(base|seq-len-interpolation-factor|scaling-factor)$|--(no-)?yarn-[\w-]+$",
     "a constant of the rotary embedding: the same kernel and bytes"),
    # --use-rope-scaling is read (the model's rope_scaling, _rope_scaling); its factor is not passed on
    (r"--rope-scaling-factor$", "pretrain_gpt.py @d98e8a64 does not pass it (argument_utils.py gpt_config_from_args "
     "l. 465 passes --use-rope-scaling only; GPTModelConfig.rope_scaling_factor stays 8.0, training/models/gpt.py "
     "l. 179): --use-rope-scaling scales by 8; a constant of the rotary embedding, the same kernel and bytes"),
    (r"--apply-layernorm-1p$", "the norm's weight read as 1 + w (zero-centred gamma): numerics only, the same kernel"),
    # TransformerConfig.is_hybrid_model (transformer_config.py @d98e8a64 l. 1256), which --hybrid-layer-pattern sets
    # itself (argument_utils.py l. 345-346); its one other use is the output layers' init scale (l. 2603-2609)
    (r"--is-hybrid-model$", "an initialisation constant (the output layers' init scale; the hybrid stack itself comes "
     "from --hybrid-layer-pattern): the same kernels and bytes"),
    (r"--calculate-per-token-loss$", "how the loss is averaged: numerics only"),
    (r"--use-mcore-models$", "Megatron-Core models, the only model path at @d98e8a64 (the one priced)"),
    (r"--fp8-amax-(history-len|compute-algo)$", "delayed scaling's amax history: a few values per tensor"),
    (r"--(norm-epsilon|mtp-loss-scaling-factor|moe-router-topk-scaling-factor|"
     r"moe-router-bias-update-rate|apply-query-key-layer-scaling|te-rng-tracker)$",
     "a numerics setting (a constant, loss coefficient or RNG tracker): the same kernels and bytes"),
    # with Megatron-Core's own core attention (--transformer-impl local) both flags that set it are read (_fusions)
    (r"--attention-softmax-in-fp32$", "the masking and softmax dtype of Megatron-Core's own core attention "
     "(dot_product_attention.py @d98e8a64 l. 106), read with --transformer-impl local; Transformer Engine's attention "
     "runs here, which does not take it"),
    (r"--muon-(momentum|extra-scale-factor|scale-mode|nesterov)$", "optimizer hyper-parameter: no memory or time effect"),
    # the job's muon_ns_steps is --muon-num-ns-steps (_unmodelled); the coefficient type picks the constants only
    (r"--muon-coefficient-type$", "the Newton-Schulz coefficients: the same three GEMMs a step, as many steps "
     "(Emerging-Optimizers v0.3.0 muon_utils.py get_coefficient_iterator l. 81-110 yields --muon-num-ns-steps sets "
     "whatever the type, newton_schulz l. 199, 216-217)"),
    (r"--mscale(-all-dim)?$|--rotary-interleaved$",
     "a constant or channel order of the rotary embedding: the same kernel and bytes"),
    (r"--(use-persistent-ckpt-worker|dist-ckpt-[\w-]+|(no-)?ckpt-[\w-]+|use-checkpoint-opt_param-scheduler|"
     r"auto-detect-ckpt-format|async-strategy|async-ckpt-[\w-]+|verify-integrity|finetune|"
     r"override-opt[_-]param-scheduler|language-model-checkpoint|logging-level|disable-gloo-process-groups)$",
     "checkpointing and logging (between steps; the gloo groups are host-side, for checkpoints)"),
    (r"--(fim-data|fim-rate|fim-spm-rate|dataset-provider|sft|sft-tokenizer-prompt-format)$", "the data pipeline"),
    (r"--max-position-embeddings$", "the model file's position table is priced"),
    (r"--cuda-graph-warmup-steps$", "the eager steps before the CUDA graphs are captured (transformer_config.py @d98e8a64 "
     "cuda_graph_warmup_steps): the first steps only, not the steady step priced"),
    # arguments.py: 'DEPRECATED. This flag is ignored.' from Megatron-LM 5fffdfc737 (2024-04-29) until 639c08ab82
    # (2026-01-29) removed it
    (r"--no-async-tensor-model-parallel-allreduce$",
     "a flag Megatron-LM ignored ('DEPRECATED. This flag is ignored.', from 5fffdfc737, 2024-04-29) and removed in "
     "639c08ab82 (2026-01-29): @d98e8a64's parser refuses it; the TP collectives are priced as --tp-comm-overlap says"),
)


# the fp8 recipes Megatron passes TransformerConfig.fp8_dot_product_attention to as Transformer Engine's fp8_dpa
# (extensions/transformer_engine.py @d98e8a64 l. 3350-3351 TEDelayedScaling; core/fp8_utils.py l. 777-788
# Float8CurrentScaling, MXFP8BlockScaling); Float8BlockScaling is built without it (l. 781-784)
FP8_DPA_RECIPES = ("delayed", "tensorwise", "mxfp8")


def _fp8_attention(flags: dict, job: dict, assumed: list, ignored: list, not_modelled: list) -> None:
    """--fp8-dot-product-attention -> the job's fp8_attention (memory.py [fa8], step.fp8_core) where
    Megatron builds an fp8 recipe that takes it (--fp8-format with FP8_DPA_RECIPES); with the
    blockwise recipe or without --fp8-format listed as ignored (the attention stays bf16); with
    --fp4-format not modelled. Megatron-LM @d98e8a64 has the config field
    (transformer_config.py l. 640) but no such flag: arguments.py l. 2333 lists
    fp8_dot_product_attention among the TransformerConfig fields 'no CLI argument exists for',
    and none was added in its history (git log -G), so its parser refuses the flag; scripts of
    Megatron forks pass it, Megatron-Bridge sets the field (mixed_precision.fp8_dot_product_attention)."""
    if "--fp8-dot-product-attention" not in flags:
        return
    flag = ("--fp8-dot-product-attention", flags["--fp8-dot-product-attention"])
    recipe = job.get("fp8_recipe")
    if "--fp4-format" in flags:
        not_modelled.append(listed("not_modelled", *flag, "the NVFP4 recipe's fp8_dpa, fp4_utils.py @d98e8a64 l. 225: "
                                   "fp8 attention beside NVFP4 GEMMs is not priced; the attention is priced in bf16"))
    elif job.get("precision") != "fp8":
        ignored.append(listed("ignored", *flag, "no --fp8-format: Megatron builds no fp8 recipe, the attention runs in bf16"))
    elif recipe not in FP8_DPA_RECIPES:
        ignored.append(listed("ignored", *flag, f"the {recipe} recipe is built without fp8_dpa, core/fp8_utils.py "
                              "@d98e8a64 l. 781-784: the attention runs in bf16"))
    else:
        job["fp8_attention"] = True
        assumed.append(listed("assumed", "fp8_attention", True, "--fp8-dot-product-attention read as Megatron-Core's "
                       "TransformerConfig.fp8_dot_product_attention (Transformer Engine's fp8_dpa); Megatron-LM "
                       "@d98e8a64's parser has no such flag (arguments.py l. 2333: 'no CLI argument exists' for the "
                       "field) and refuses it: a fork's or a launcher's flag"))


def classify_unread(name: str, value) -> tuple[str, str]:
    """('ignored' | 'not_modelled', reason) for a flag the reader does not price."""
    if name == "--rotary-percent":
        try:
            full = float(value) == 1.0
        except (TypeError, ValueError):
            full = False
        return ("ignored", "RoPE on every channel, as priced") if full else (
            "not_modelled", "RoPE on part of each head: fewer rope bytes than priced")
    if name in NOT_MODELLED:
        return "not_modelled", NOT_MODELLED[name]
    for pat, why in NOT_MODELLED_PATTERNS:
        if re.match(pat, name):
            return "not_modelled", why
    for pat, why in IGNORED_REASONS:
        if re.match(pat, name):
            return "ignored", why
    return "not_modelled", "unknown to the planner: it may change memory or time"


# flags of argparse nargs '*' / '+' that the planner reads: every word up to the next flag is theirs
# (arguments.py: --recompute-modules, --offload-modules; an argument file writes a YAML list
# `[a b]` as `--flag a b`); an unknown flag likewise takes every word up to the next flag
NARGS_FLAGS = {"--recompute-modules", "--offload-modules", "--cp-comm-type", "--hierarchical-context-parallel-sizes",
               "--cuda-graph-modules", "--cuda-graph-scope", "--moe-router-load-balancing-type", "--moe-aux-loss-coeff",
               "--rampup-batch-size"}  # nargs 3 (training_config.py @d98e8a64 l. 20)
ARGS_SCRIPT = re.compile(r"(^|/)pretrain_\w+\.py$|\.py$")
_LAUNCHERS = ("torchrun", "python", "python3", "deepspeed")


def _join_continuations(text: str) -> list[tuple[int, str]]:
    """Lines with backslash continuations joined, each with its first line number. A comment line
    (first word `#`, not inside a continued command) ends at its end, as in bash, where the
    backslash is the comment's text: `#    --universal-checkpoint \\` above `export CMD=...` in
    BigScience's tr11-176B-ml.slurm comments out one line, not the assignment below it."""
    out, buf, start = [], "", 0
    for i, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = i
            if line.lstrip().startswith("#"):
                out.append((i, line))
                continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


# bounds on the work of expanding a script (issue 24: an array that doubles 24 times, a
# variable that doubles itself), not bash limits: the longest launch script the tests read
# (tests/data/trainer_configs/train_llama3_8b_h100_fp8.sh) is 5,780 bytes
MAX_EXPANSION = 200_000  # characters of one expanded line or value
MAX_ARRAY = 20_000  # elements of one array


class _Shell:
    """The little of bash a launch script needs to expand its torchrun line: its variables (scalars and indexed
    arrays, with the attributes declare gives them: -i integer, -l / -u case, -n name reference; GNU Bash Reference
    Manual 5.2, 4.2 Bash Builtin Commands, declare) and the expansions of 3.5.3 Shell Parameter Expansion,
    3.5.4 Command Substitution and 3.5.5 Arithmetic Expansion of that manual, each checked by running bash 5.2.15
    (tests/test_megatron_script_shell.py carries the outputs). $NAME, ${NAME}, ${NAME[@]} / ${NAME[*]} /
    ${NAME[i]}; ${NAME OP WORD} with OP one of `-` `=` `+` `?` with or without `:` (WORD nested to any depth);
    ${#NAME} (length; ${#A[@]}: the count); ${NAME:offset} / ${NAME:offset:length} (arithmetic; a negative offset
    counts from the end, a negative length ends that far from it); ${NAME#p} / ## / % / %% and ${NAME/p/r} / // /
    /# / /% (bash patterns: shell_pattern.py); ${NAME^p} / ^^ / , / ,, (case); ${!NAME} (indirection, or a name
    reference's target); on an array's [@] / [*] each operation applies per element, as bash applies it; $(( ))
    and the old $[ ] arithmetic (shell_arith, never Python's eval). A command substitution `$( )` or `` ` ` `` is
    never run: it stays as written, one word (rejoined), and is recorded (substitutions) so a flag that holds it
    names its line; so does an expansion the reader cannot evaluate (an unreadable word): `${X@Q}`, `${!P*}`, an
    extended pattern, bash's own errors (`${X:1:-9}` 'substring expression < 0', `${A[@]:=w}`), a variable the
    reader holds but cannot read (an associative array, an array written with [i]= subscripts, opaque)."""

    def __init__(self, where: str = ""):
        self.where = where
        self.vars: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}
        self.raw_arrays: dict[str, list[str]] = {}  # the elements as written (for soft_launcher)
        self.soft: set[str] = set()  # variables whose value is a ${X:-default}
        self.unknown: set[str] = set()
        self.kept_whole: list[tuple[str, str]] = []  # (array, element with spaces) expanded unquoted
        self.line = 0  # the script line being read (command_words sets it)
        # the command substitutions $(...) / `...`, the arithmetic $(( )) / $[ ] and the parameter expansions left
        # unexpanded, as they stand in the expanded text, each with the script line it is written on (its first): a
        # flag whose value holds one names it
        self.substitutions: dict[str, int] = {}
        self.refs: dict[str, Optional[str]] = {}  # name references (declare -n): name -> the variable it names
        self.attrs: dict[str, set] = {}  # declare's -i / -l / -u attributes, by variable
        self.opaque: set[str] = set()  # variables set in ways the reader does not read (declare -A, A[i]=v, ([i]=v))
        self.depth = 0  # the expansions being read, one inside another (MAX_NESTING)

    # ---------------------------------------------------------------- variables
    def _target(self, name: str) -> Optional[str]:
        """The variable `name` stands for through name references (`declare -n R=TP`: R stands for TP); None for a
        chain over MAX_NAMEREF references (a circular one: bash warns and reads the variable unset)."""
        for _ in range(MAX_NAMEREF):
            if self.refs.get(name) is None:
                return name
            name = self.refs[name]
        return None

    def _value(self, name: str) -> Optional[str]:
        """The variable's value (an array's first element, as bash gives $A), None where the script does not set it
        (or sets it so the reader cannot read it)."""
        name = self._target(name)
        if name is None or name in self.opaque:
            return None
        if name in self.vars:
            return self.vars[name]
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return None

    def _lookup(self, name: str, sub: Optional[str]):
        """(state, value) of NAME or NAME[sub]: state "unknown" where the script does not set the variable (its
        environment may: left unexpanded), "unread" where the reader cannot read it, "unset" / "set" else; value a
        str, or the list of elements for a [@] / [*] subscript."""
        t = self._target(name) if _NAME.fullmatch(name) else name
        if t is None:
            return "unknown", None
        if t in self.opaque:
            return "unread", None
        elems = self.arrays.get(t, [self.vars[t]] if t in self.vars else None)
        if sub in ("@", "*"):
            return ("unknown", None) if elems is None else ("set", list(elems))
        if sub is not None:
            idx = self._arith_value(sub, None, f"${{{name}[{sub}]}}")
            if idx is None or elems is None:
                return ("unread" if idx is None else "unknown"), None
            idx += len(elems) if idx < 0 else 0
            if idx < 0:  # bash: 'bad array subscript'
                return "unread", None
            return ("set", elems[idx]) if idx < len(elems) else ("unset", None)
        if elems is None:
            return "unknown", None
        return ("set", elems[0]) if elems else ("unset", None)

    def assign(self, name: str, value: str, append: bool = False) -> None:
        """NAME=value (append: NAME+=value) as bash assigns it: through a name reference, where a reference with no
        variable yet takes `value` as the one it names (`declare -n R; R=TP`; a value that is no name: bash's
        'invalid variable name for name reference', the reference dropped); with the variable's attributes (-i: the
        value is arithmetic, `+=` adds; -l / -u: lower / upper case); into element 0 of an array."""
        if name in self.refs and self.refs[name] is None:
            if _NAME.fullmatch(value) and value != name:
                self.refs[name] = value
            else:
                self.refs.pop(name)
            return
        t = self._target(name)
        if t is None:
            return
        attrs = self.attrs.get(t, set())
        old = self._value(t) if append else None
        if "i" in attrs:
            value = self._arith_text(f"{old or 0} + ({value})" if append else value)
            old = None
        elif attrs & {"l", "u"}:
            value = value.lower() if "l" in attrs else value.upper()
        value = (old or "") + value
        self.opaque.discard(t)
        if t in self.arrays:
            self.arrays[t][:1] = [value]
        else:
            self.vars[t] = value

    def assign_array(self, name: str, elems: list[str], raw: list[str], append: bool = False) -> None:
        """NAME=( ... ) / NAME+=( ... ): through a name reference, each element with the -i / -l / -u attributes; an
        element written `[i]=v` (a subscript: a sparse array the reader's lists do not hold) leaves it unreadable."""
        t = self._target(name)
        if t is None:
            return
        attrs = self.attrs.get(t, set())
        if "i" in attrs:
            elems = [self._arith_text(e) for e in elems]
        elif attrs & {"l", "u"}:
            elems = [e.lower() if "l" in attrs else e.upper() for e in elems]
        base = (self.arrays[t] if t in self.arrays else [self.vars[t]] if t in self.vars else []) if append else []
        self.vars.pop(t, None)
        self.arrays[t] = base + elems
        self.raw_arrays[t] = (self.raw_arrays.get(t, []) if append else []) + raw
        if any(re.match(r"\[[^\]]*\]\+?=", w) for w in raw):
            self.opaque.add(t)
        elif not append:
            self.opaque.discard(t)

    def unset(self, name: str, ref: bool = False) -> Optional[str]:
        """`unset NAME` (through a name reference: bash unsets the variable it names) or, ref, `unset -n NAME` (the
        reference itself); the variable unset."""
        if ref:
            self.refs.pop(name, None)
            t = name
        else:
            t = self._target(name)
            if t is None:
                return None
        for d in (self.vars, self.arrays, self.raw_arrays, self.attrs):
            d.pop(t, None)
        self.opaque.discard(t)
        self.soft.discard(t)
        return t

    def declare(self, name: str, on: set, off: set, valued: bool) -> None:
        """declare's attributes of NAME (on: -x, off: +x), before any value the same command assigns: -n makes NAME a
        name reference (the variable it names is the value assigned, or without one NAME's own value), +n makes it
        a variable holding that name; -i, -l, -u (-l turns -u off and -u -l; both in one command set neither: bash
        5.2.15 gives `declare -lu Q=AbC` the value AbC and `declare -p Q` 'declare -- Q="AbC"'); -A (associative)
        leaves the variable unreadable."""
        if "n" in on and name not in self.refs:
            cur = self.vars.pop(name, None)
            self.refs[name] = cur if not valued and cur and _NAME.fullmatch(cur) and cur != name else None
        elif "n" in on and valued:  # `declare -n R=B` of a reference: it names B now
            self.refs[name] = None
        if "n" in off and name in self.refs:
            target = self.refs.pop(name)
            if target is not None:
                self.vars[name] = target
        t = self._target(name)
        if t is None or "n" in on:
            return
        if "A" in on:
            self.opaque.add(t)
        a = self.attrs.setdefault(t, set())
        if {"l", "u"} <= on:
            a -= {"l", "u"}
        else:
            for c, other in (("l", "u"), ("u", "l")):
                if c in on:
                    a.discard(other)
                    a.add(c)
        a |= on & {"i"}
        a -= off & {"i", "l", "u"}

    # ---------------------------------------------------------------- arithmetic
    def _arith_value(self, expr: str, soft_seen: Optional[set], shown: str, expanded: bool = False) -> Optional[int]:
        """The value of bash arithmetic `expr` (its $-expansions first, unless expanded; a variable's value read as
        a parenthesised sub-expression, as bash evaluates it, an empty one as 0); None where shell_arith does not
        evaluate it (a name the script does not set, a shift, ...). What bash refuses is bad input."""
        inner = expr if expanded else self.expand(expr, soft_seen)
        for _ in range(MAX_NAMEREF):  # a variable's value may name variables: bash evaluates it in turn
            def name(mm):
                v = self._value(mm.group(1))
                if v is None:
                    return mm.group(0)
                v = v.strip()
                return "0" if v == "" else v if re.fullmatch(r"\d+", v) else f"({v})"
            nxt = re.sub(r"\b([A-Za-z_]\w*)\b", name, inner)
            if nxt == inner or len(nxt) > shell_arith.MAX_CHARS:
                break
            inner = nxt
        try:
            return shell_arith.evaluate(inner)
        except shell_arith.ShellArithError as e:
            raise PlannerError(f"{self.where}{f'line {self.line}: ' if self.line else ''}{shown[:70]}: {e}",
                               "bash refuses it (or wraps it around): write the number the script means") from None

    def _arith(self, expr: str, written: str, soft_seen: Optional[set]) -> str:
        """$(( expr )) / $[ expr ]: the number, or as written where the reader does not evaluate it."""
        v = self._arith_value(expr, soft_seen, written if written.startswith("$[") else f"$(( {expr.strip()[:60]} ))")
        return written if v is None else str(v)

    def _arith_text(self, expr: str) -> str:
        """An integer variable's value (declare -i): `expr` (expanded) evaluated, or `$(( expr ))` left unexpanded
        and recorded where the reader does not evaluate it."""
        v = self._arith_value(expr, None, f"$(( {expr.strip()[:60]} ))", expanded=True)
        if v is not None:
            return str(v)
        text = f"$(( {expr} ))"
        self.substitutions.setdefault(text, self.line)
        return text

    # ---------------------------------------------------------------- expansion
    def expand(self, s: str, soft_seen: Optional[set] = None, *, dq: bool = False, mode: str = "word") -> str:
        """`s` with its variables expanded. An array's elements stay words of their own, quoted
        for the shlex split that follows ("${A[@]}"). An unquoted ${A[@]} word-splits in bash:
        an element that starts with a flag ("--fp8-format hybrid", NVIDIA's llama3 fp8 script)
        is split so, as the script means; an element that is a quoted value
        (--step-batch-size-schedule "0:16 2.4B:320 ...", NVIDIA's gpt3 script) is kept one value,
        as it means, which bash would split (kept_whole records it for a note).
        ${X-w} / ${X:-w} give w where X is unset (or, with `:`, empty); ${X=w} / ${X:=w} likewise and assign it to
        X; ${X+w} / ${X:+w} give w where X is set (non-empty) and nothing else; ${X?w} / ${X:?w} give X where set,
        else stay unexpanded (bash stops the script there). A default taken marks the variable soft (soft_seen).
        A backslash-escaped character stays as written (`\\$X` is no expansion).
        Quoting as bash reads it (GNU Bash Reference Manual 5.2, 3.1.2 Quoting): text in single quotes is literal (no
        `$X`, `$(( ))`, `` ` ``: '$X' is $X), in double quotes (dq: the text starts inside them, as a default word of a
        "${X:-w}" does) a single quote is a character and `\\$` / `` \\` `` a literal `$` / `` ` ``. A literal `$` or
        `` ` `` is written as LITERAL_DOLLAR / LITERAL_BACKQUOTE, so that what follows (rejoined, substitutions, the
        words' split) never takes it for an expansion; literal() turns them back at the reader's exits. mode
        "pattern": the text is a bash pattern (${X#p}, ${X/p/r}, [[ A == p ]]): a variable's value keeps its quote
        characters as characters (bash does not quote-remove an expansion's result), its `*` `?` `[` and `\\` active
        unless the expansion is in double quotes (3.5.8.1 Pattern Matching; checked with bash 5.2.15). mode "heredoc":
        a here-document's body, where quotes are characters (3.6.6 Here Documents)."""
        # a quoted "${A[@]}" (or "${A[@]OP}", each element operated on) is its elements as words of their own
        quoted = set(re.findall(r'"\$\{(\w+)\[@\][^"]*\}"', s))
        s = re.sub(r'"(\$\{\w+\[@\][^"]*\})"', r"\1", s)
        out = self._scan(s, soft_seen, quoted, dq, mode)
        if len(out) > MAX_EXPANSION:
            raise PlannerError(f"{self.where}the script's variables expand to over {MAX_EXPANSION:,} characters in one "
                               "line", "a launch script's lines are a few kB: give the arguments as written")
        for expr in substitutions(out):
            self.substitutions.setdefault(expr, self.line)
        return out

    def _scan(self, s: str, soft_seen: Optional[set], quoted: set, dq: bool = False, mode: str = "word") -> str:
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise PlannerError(f"{self.where}{f'line {self.line}: ' if self.line else ''}expansions nested over "
                                   f"{MAX_NESTING} deep", "a launch script nests a default or a substitution a few "
                                   "levels: give the value as written")
            return self._scan_text(s, soft_seen, quoted, dq, mode)
        finally:
            self.depth -= 1

    def _scan_text(self, s: str, soft_seen: Optional[set], quoted: set, dq: bool = False, mode: str = "word") -> str:
        out, i, n = [], 0, len(s)
        quotes = mode != "heredoc"
        while i < n:
            c = s[i]
            if c == "'" and quotes and not dq:  # single quotes: every character literal to the next one
                j = s.find("'", i + 1)
                j = n if j < 0 else j
                out.append(s[i:j + 1].replace("$", LITERAL_DOLLAR).replace("`", LITERAL_BACKQUOTE))
                i = j + 1
                continue
            if c == '"' and quotes:
                dq = not dq
                out.append(c)
                i += 1
                continue
            if c == "\\":
                nxt = s[i + 1:i + 2]
                if nxt in ("$", "`"):  # a literal `$` / `` ` `` (in double quotes and here-documents bash drops the
                    lit = LITERAL_DOLLAR if nxt == "$" else LITERAL_BACKQUOTE  # backslash; outside, quote removal)
                    out.append(lit if dq or not quotes else "\\" + lit)
                else:
                    out.append(s[i:i + 2])
                i += 2
                continue
            if c == "`":  # a command substitution (the old form): never run, kept with its variables expanded
                j = i + 1
                while j < n and s[j] != "`":
                    j += 2 if s[j] == "\\" else 1
                out.append("`" + self._scan(s[i + 1:j], soft_seen, quoted) + s[j:j + 1])
                i = j + 1
                continue
            if c != "$":
                out.append(c)
                i += 1
                continue
            nxt = s[i + 1] if i + 1 < n else ""
            if nxt and nxt in "([{":
                k = _closing(s, i + 1)
                if k is None:  # a lone quote inside (`${X:-it's}`): brackets counted alone
                    k = _closing(s, i + 1, quotes=False)
                if k is None:  # unclosed: bash's syntax error; kept as written (its variables expanded for `$(`)
                    out.append(s[i:i + 2] + (self._scan(s[i + 2:], soft_seen, quoted) if nxt == "(" else s[i + 2:]))
                    break
                if nxt == "(" and s[i + 2:i + 3] == "(" and _closing(s, i + 2) == k - 1:
                    out.append(self._arith(s[i + 3:k - 1], s[i:k + 1], soft_seen))
                elif nxt == "(":
                    out.append("$(" + self._scan(s[i + 2:k], soft_seen, quoted) + ")")
                elif nxt == "[":
                    out.append(self._arith(s[i + 2:k], s[i:k + 1], soft_seen))
                else:
                    out.append(self._param(s[i + 2:k], s[i:k + 1], soft_seen, quoted, dq, mode))
                i = k + 1
                continue
            m = _DOLLAR_NAME.match(s, i)
            if m:
                value = self._value(m.group(1))
                if value is None:
                    self.unknown.add(m.group(1))
                    out.append(m.group(0))
                else:
                    if soft_seen is not None and self._target(m.group(1)) in self.soft:
                        soft_seen.add(m.group(1))
                    out.append(_as_pattern(value, dq) if mode == "pattern" else value)
                i = m.end()
                continue
            # `$` before no name, bracket or special parameter (`$"`, `$ `, the line's end): a literal dollar sign
            out.append(c if nxt and nxt in "@*#?$!-" else LITERAL_DOLLAR)
            i += 1
        return "".join(out)

    def _unread(self, written: str) -> str:
        """An expansion the reader does not evaluate: kept as written and recorded (an unreadable word)."""
        self.substitutions.setdefault(written, self.line)
        return written

    def _render(self, name: str, elems: list[str], star: bool, quoted: set) -> str:
        if star:
            return " ".join(elems)
        words = []
        for e in elems:
            if name not in quoted and not e.strip():
                # an unquoted ${A[@]}'s empty (or blank) element is no word: bash removes an unquoted implicit null
                # argument (Bash Reference Manual 5.2, 3.5.7 Word Splitting; bash 5.2.15: A=(x "" y); printf '[%s]' ${A[@]}
                # gives [x][y]); a quoted "${A[@]}" keeps it an empty argument
                continue
            if name not in quoted and re.search(r"\s", functools.reduce(lambda t, x: t.replace(x, ""), substitutions(e), e)):
                # (spaces inside a `$(( ))` or `$( )` are no split of the value)
                if e.lstrip().startswith("-"):  # "--fp8-format hybrid": bash's word split, as meant
                    words += e.split()
                    continue
                self.kept_whole.append((name, e))  # a quoted value: one value, as meant
            words.append(e)
        return " ".join(shlex.quote(w) for w in words)

    def _param(self, body: str, written: str, soft_seen: Optional[set], quoted: set, dq: bool = False,
               mode: str = "word") -> str:
        """One ${body} (written: as the script writes it; dq: inside double quotes; mode: expand's)."""

        def val(x):  # a variable's value (not a default word's text): in a pattern its quote characters are characters
            return _as_pattern(x, dq) if mode == "pattern" and x is not None else x

        m = _PARAM.match(body)
        if m is None:
            return self._unread(written)  # bash's 'bad substitution'
        prefix, name = m.group(1) or m.group(2), m.group(3)
        j, sub = m.end(), None
        if j < len(body) and body[j] == "[" and _NAME.fullmatch(name):
            k = _closing(body, j)
            if k is None:
                return self._unread(written)
            sub, j = body[j + 1:k].strip(), k + 1
        rest, many, star = body[j:], sub in ("@", "*"), sub == "*"
        t = self._target(name) if _NAME.fullmatch(name) else name
        soft = t is not None and t in self.soft

        def seen():
            if soft and soft_seen is not None:
                soft_seen.add(name)

        if prefix == "!":  # ${!NAME}: a name reference's target, else the variable NAME's value names
            if rest or sub is not None:
                return self._unread(written)  # ${!A[@]} (keys), ${!P*} (names): not read
            if name in self.refs:
                return self.refs[name] or ""
            state, v = self._lookup(name, None)
            if state == "unknown":
                self.unknown.add(name)
                return written
            if state != "set" or not _NAME.fullmatch(v):
                return self._unread(written)
            return self._param(v, "${" + v + "}", soft_seen, quoted, dq, mode)
        state, v = self._lookup(name, sub)
        if state == "unread":
            return self._unread(written)
        if prefix == "#":  # ${#NAME}: the length; ${#A[@]}: the count
            if rest:
                return self._unread(written)
            if state == "unknown":
                self.unknown.add(name)
                return written
            seen()
            return str(len(v) if v is not None else 0)
        if not rest:
            if state == "unknown":
                self.unknown.add(name)
                return written
            seen()
            return val(self._render(name, v, star, quoted) if many else (v or ""))
        mo = re.match(r":?[-=+?]", rest)
        if mo:  # the defaults and alternatives
            op, word = mo.group(0), rest[mo.end():]
            is_set = state == "set" and (not many or len(v) > 0)
            null = (" ".join(v) if many else v) == "" if is_set else True
            cond = is_set and not (op.startswith(":") and null)
            if op in ("?", ":?"):
                if cond:
                    seen()
                    return val(self._render(name, v, star, quoted) if many else v)
                self.unknown.add(name)
                return written
            if op in ("+", ":+"):  # the alternative where set, else nothing
                if soft_seen is not None and (soft or state != "set"):
                    soft_seen.add(name)
                return self.expand(word, soft_seen, dq=dq, mode=mode) if cond else ""
            if cond:  # `-` / `=`: the value where set
                seen()
                return val(self._render(name, v, star, quoted) if many else v)
            if soft_seen is not None:
                soft_seen.add(name)
            default = self.expand(word, soft_seen, dq=dq, mode=mode)
            if op in ("=", ":="):  # assigned as well as given (`: ${NNODES:=1}`)
                if sub is not None or not _NAME.fullmatch(name) or t is None:
                    return self._unread(written)  # bash: 'cannot assign in this way'
                # the word after quote removal, as bash assigns it (in a pattern: the word read again as a word)
                self.assign(name, _unquoted(default if mode != "pattern" else self.expand(word, None, dq=dq)))
                self.soft.add(self._target(name) or name)
                return val(self._value(name) or "")
            return default
        if state == "unknown":
            self.unknown.add(name)
            return written
        seen()
        vals = v if many else [v or ""]
        if rest.startswith(":"):  # ${X:offset[:length]}
            got = self._substring(v if many else vals[0], rest[1:], many, soft_seen, written)
            if got is None:
                return self._unread(written)
            return val(self._render(name, got, star, quoted) if many else got)
        if rest[:1] in "#%":
            op = rest[:2] if rest[:2] in ("##", "%%") else rest[:1]
            pat = self.expand(rest[len(op):], soft_seen, mode="pattern")
            out = [shell_pattern.remove(e, op, pat) for e in vals]
        elif rest[:1] == "/":
            op = next(o for o in ("//", "/#", "/%", "/") if rest.startswith(o))
            parts = _split_top(rest[len(op):], "/", 1)
            pat = self.expand(parts[0], soft_seen, mode="pattern")
            rep = shell_pattern.replacement(self.expand(parts[1], soft_seen)) if len(parts) > 1 else ""
            out = [None] if rep is None else [shell_pattern.replace(e, op, pat, rep) for e in vals]
        elif rest[:1] in "^,":
            op = rest[:2] if rest[:2] in ("^^", ",,") else rest[:1]
            pat = self.expand(rest[len(op):], soft_seen, mode="pattern")
            out = [shell_pattern.case(e, op, pat) for e in vals]
        else:  # ${X@Q} and the other transformations, or bash's 'bad substitution'
            return self._unread(written)
        if any(o is None for o in out):
            return self._unread(written)
        return val(self._render(name, out, star, quoted) if many else out[0])

    def _substring(self, v, spec: str, many: bool, soft_seen: Optional[set], written: str):
        """${X:offset[:length]} of the string v (many: the list of elements v); None where bash errs
        ('substring expression < 0') or the reader does not evaluate the arithmetic."""
        parts = _split_top(spec, ":", 1)
        nums = [self._arith_value(p, soft_seen, written) if p.strip() else 0 for p in parts]
        if any(x is None for x in nums):
            return None
        off, n = nums[0], len(v)
        if off < 0:
            off += n
            if off < 0:
                return [] if many else ""
        if off > n:
            return [] if many else ""
        if len(nums) == 1:
            return v[off:]
        end = nums[1]
        if end < 0:
            if many:
                return None
            end += n
            if end < off:
                return None
            return v[off:end]
        return v[off:off + end]


# a literal `$` / `` ` `` in the expanded text (quoted, backslash-escaped, or a `$` that starts no expansion: _Shell.expand),
# told from one that starts an expansion the reader left as written; literal() writes them back. Unicode private-use
# characters, which no launch script the reader meets holds (a script that did would read them as `$` / `` ` ``)
LITERAL_DOLLAR, LITERAL_BACKQUOTE = "\ue000", "\ue001"


def literal(s):
    """`s` (a str, or a list / dict of them, recursively) with the reader's literal `$` / `` ` `` written back."""
    if isinstance(s, str):
        return s.replace(LITERAL_DOLLAR, "$").replace(LITERAL_BACKQUOTE, "`")
    if isinstance(s, (list, tuple)):
        return type(s)(literal(x) for x in s)
    if isinstance(s, dict):
        return {literal(k): literal(v) for k, v in s.items()}
    return s


def _as_pattern(value: str, dq: bool) -> str:
    """A variable's value where it stands in a bash pattern: its quote characters are characters (no quote removal
    of an expansion's result); unquoted, its `*` `?` `[` `\\` stay active; in double quotes everything is literal
    (shell_pattern.unquote reads `\\` and `"` escaped there)."""
    if dq:
        return value.replace("\\", "\\\\").replace('"', '\\"')
    return value.replace("'", "\\'").replace('"', '\\"')


def _unquoted(word: str) -> str:
    """`word` after bash's quote removal (an unclosed quote: as it stands)."""
    chars = shell_pattern.unquote(word)
    return word if chars is None else "".join(c for c, _ in chars)


MAX_NAMEREF = 8  # name references followed, and rounds of a variable's arithmetic read in turn: a bound on work
MAX_NESTING = 64  # expansions read one inside another (`${A:-${B:-...}}`): a bound on work, not a bash limit
_NAME = re.compile(r"[A-Za-z_]\w*")
# the parameter of a ${...}: `#` (length) or `!` (indirection) first, then a name, a positional number or a special
_PARAM = re.compile(r"(?:(#)(?=[A-Za-z_\d@*#?$!-])|(!)(?=[A-Za-z_]))?([A-Za-z_]\w*|\d+|[@*#?$!0-])")
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_DOLLAR_NAME = re.compile(r"\$(\w+)")


def _closing(s: str, k: int, quotes: bool = True) -> Optional[int]:
    """The index of the bracket that closes the `(`, `[` or `{` at s[k] (brackets of its kind inside counted, as bash
    counts braces alone in a ${...}: `${L%%[*}`; backslash escapes and, with quotes, quoted text skipped); None where
    it does not close."""
    o, depth, j, quote = s[k], 1, k + 1, None
    while j < len(s):
        c = s[j]
        if quote:
            if c == "\\" and quote == '"':
                j += 1
            elif c == quote:
                quote = None
        elif c == "\\":
            j += 1
        elif quotes and c in "'\"":
            quote = c
        elif c in (o, _PAIRS[o]):
            depth += 1 if c == o else -1
            if not depth:
                return j
        j += 1
    return None


def _split_top(s: str, sep: str, maxsplit: int) -> list[str]:
    """`s` split at `sep` where it stands outside quotes, backslash escapes and $( ) / ${ } / $[ ] (and, for `:`,
    any parentheses or brackets: the offset `(-3)` of ${X:(-3):2})."""
    out, cur, k, quote, depth = [], [], 0, None, 0
    while k < len(s):
        c = s[k]
        if quote:
            quote = None if c == quote else quote
        elif c == "\\":
            cur.append(s[k:k + 2])
            k += 2
            continue
        elif c in "'\"":
            quote = c
        elif c == "$" and s[k + 1:k + 2] in ("(", "{", "["):
            kk = _closing(s, k + 1)
            if kk is not None:
                cur.append(s[k:kk + 1])
                k = kk + 1
                continue
        elif sep == ":" and c in "([":
            depth += 1
        elif sep == ":" and c in ")]":
            depth -= 1
        elif c == sep and not depth and len(out) < maxsplit:
            out.append("".join(cur))
            cur = []
            k += 1
            continue
        cur.append(c)
        k += 1
    return out + ["".join(cur)]


def substitutions(text: str) -> list[str]:
    """The command substitutions `$(...)` / `` `...` `` and arithmetic `$((...))` / `$[...]` in `text` (outermost,
    brackets balanced; an unclosed one to the end of the text), as written."""
    out, k = [], 0
    while True:
        m = _SUBST.search(text, k)
        if m is None:
            return out
        b = m.start()
        if text[b] == "`":
            j = b + 1
            while j < len(text) and text[j] != "`":
                j += 2 if text[j] == "\\" else 1
        else:
            o, c = text[b + 1], _PAIRS[text[b + 1]]
            depth, j = 0, b + 1
            while j < len(text):
                depth += (text[j] == o) - (text[j] == c)
                if depth == 0:
                    break
                j += 1
        out.append(text[b:j + 1])
        k = j + 1


_SUBST = re.compile(r"\$[(\[]|`")


def _open_after(w: str, stack: list[str]) -> list[str]:
    """The expansions still open after the word `w`, given those open before it (stack: the closers awaited)."""
    for k, c in enumerate(w):
        if c == "`":
            if stack and stack[-1] == "`":
                stack.pop()
            else:
                stack.append("`")
        elif c in _PAIRS and (stack or (k and w[k - 1] == "$")):
            stack.append(_PAIRS[c])
        elif stack and c == stack[-1]:
            stack.pop()
    return stack


def rejoined(words: list[str]) -> list[str]:
    """shlex's words with a command substitution, arithmetic or parameter expansion that spaces split (`$((`, `A`,
    `<<`, `7`, `))`; `$(nvidia-smi`, `-L`, `|`, `wc`, `-l)`; `` `date ``, `` +%s` ``; `${X:?set`, `X}`) joined back
    into the one word bash reads it as, its brackets balanced."""
    out: list[str] = []
    k = 0
    while k < len(words):
        w = words[k]
        k += 1
        if "$(" in w or "$[" in w or "${" in w or "`" in w:
            stack = _open_after(w, [])
            j, joined = k, w
            while stack and j < len(words):
                stack = _open_after(words[j], stack)
                joined += " " + words[j]
                j += 1
            if not stack:  # an unclosed one (bash's syntax error) keeps the words as they are
                w, k = joined, j
        out.append(w)
    return out


_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)(\+?)=(.*)$")
_ELEMENT = re.compile(r"^\s*([A-Za-z_]\w*)\[[^\]]*\]\+?=")  # an array element assigned, `A[i]=v`
_BLOCK_OPEN = re.compile(r"^\s*(if|case|for|while|until)\b")
# a function definition, `name() {`, `function name {`, `function name() {` (the brace on the line: bash also takes it on
# the next line, which the reader then reads as a `{ ...; }` group's first line)
_FUNC_OPEN = re.compile(r"^\s*(?:function\s+[A-Za-z_][\w-]*\s*(?:\(\s*\))?|[A-Za-z_][\w-]*\s*\(\s*\))\s*\{")
_BLOCK_CLOSE = re.compile(r"^\s*(fi|esac|done)\b")


_IF = re.compile(r"^\s*(if)\s+(.*?)\s*;?\s*(then)?\s*$")
_ELSE = re.compile(r"^\s*(else|elif)\b\s*(.*?)\s*;?\s*(then)?\s*$")


def frames_unknown(frames) -> bool:
    return any(f[0] is None for f in frames)


def _span_end(s: str, k: int, backquotes: bool = False) -> Optional[int]:
    """_top_split's and _cond_tokens' one step over a span that is a single piece of a word: where s[k] opens a quote
    (a backslash escapes the next character inside double quotes only), is a backslash escape, opens `$( )` / `${ }`
    / `$[ ]` (_closing) or, with backquotes, a backquoted command, the index just after the span; k where s[k] opens
    none; None where the span does not close."""
    c, n = s[k], len(s)
    if c in "'\"":
        j = k + 1
        while j < n and s[j] != c:
            j += 2 if (c == '"' and s[j] == "\\") else 1
        return j + 1 if j < n else None
    if c == "\\":
        return min(k + 2, n)
    if c == "`" and backquotes:
        j = k + 1
        while j < n and s[j] != "`":
            j += 2 if s[j] == "\\" else 1
        return j + 1 if j < n else None
    if c == "$" and s[k + 1:k + 2] in ("(", "{", "["):
        j = _closing(s, k + 1)
        return None if j is None else j + 1
    return k


def _top_split(s: str) -> Optional[list[str]]:
    """A command line's items at its top level: the commands and, as items of their own, the list operators `;`,
    `;;`, `&&`, `||` between them (bash(1), Lists), found outside quotes, backslash escapes, `$( )` / `${ }` / `$[ ]`,
    backquotes and a `[[ ... ]]` (whose `&&` / `||` are its own: GNU Bash Reference Manual 5.2, 3.2.5.2 Conditional
    Constructs); a `#` that starts a word ends the line. None where a quote or bracket does not close."""
    items, cur, k, n, dbl = [], [], 0, len(s), False

    def at_word():
        return not cur or cur[-1][-1:].isspace()

    while k < n:
        c = s[k]
        j = _span_end(s, k, backquotes=True)
        if j is None:
            return None
        if j > k:  # a quoted / escaped / bracketed span, one piece of the word
            cur.append(s[k:j])
            k = j
            continue
        if at_word() and s.startswith("[[", k) and (k + 2 == n or s[k + 2].isspace()):
            dbl = True
        elif dbl and at_word() and s.startswith("]]", k) and (k + 2 == n or s[k + 2] in " \t;&|)"):
            dbl = False
            cur.append("]]")
            k += 2
            continue
        if c == "#" and at_word() and not dbl:
            break
        op = next((o for o in (";;", "&&", "||", ";") if s.startswith(o, k)), None)
        if op is not None and not dbl:
            items += ["".join(cur).strip(), op]
            cur = []
            k += len(op)
            continue
        cur.append(c)
        k += 1
    if dbl:
        return None
    items.append("".join(cur).strip())
    return items


def _commands(items: list[str]) -> list[str]:
    """_top_split's items joined into the `;`-separated commands (an and-or list one command); empty ones dropped."""
    out, cur = [], []
    for it in items + [";"]:
        if it in (";", ";;"):
            if cur and "".join(cur).strip():
                out.append(" ".join(cur).strip())
            cur = []
        else:
            cur.append(it)
    return out


def _first_word(cmd: str) -> str:
    return cmd.split(None, 1)[0] if cmd.split() else ""


def _one_line_if(s: str) -> Optional[list[str]]:
    """The lines a one-line if (`if [[ $D == fp8 ]]; then TP=4; else TP=2; fi`, bash(1) Compound Commands) stands for,
    in the form the reader evaluates: `if COND; then`, the body's commands a line each, `elif COND; then`, `else`,
    `fi`. None where the line is no such if (or only its first line: `if COND; then`), or one the reader does not
    split (`then` not after the condition, words after `fi`)."""
    items = _top_split(s)
    if items is None or ";" not in items and ";;" not in items:
        return None
    cmds = _commands(items)
    if not cmds or _first_word(cmds[0]) != "if":
        return None
    out, k = [], 0
    while k < len(cmds):
        kw = _first_word(cmds[k])
        rest = cmds[k][len(kw):].strip()
        if kw in ("if", "elif"):
            if k + 1 >= len(cmds) or _first_word(cmds[k + 1]) != "then" or not rest:
                return None
            out.append(f"{kw} {rest}; then")
            body = cmds[k + 1][len("then"):].strip()
            if body:
                out.append(body)
            k += 2
            continue
        if kw == "then" or kw == "fi" and rest:
            return None
        if kw == "else":
            out.append("else")
            if rest:
                out.append(rest)
        else:
            out.append(cmds[k])
        k += 1
    return out if len(out) > 1 else None


def _one_line_block(s: str) -> bool:
    """Whether a line is a whole compound command (`for x in a b; do ...; done`, `case $X in a) ...;; esac`, an `if
    ...; fi` the reader does not split): it opens and closes on the line, so no block stays open after it."""
    items = _top_split(s)
    if items is None:
        return False
    cmds = _commands(items)
    return len(cmds) > 1 and _first_word(cmds[-1]) in ("fi", "done", "esac")


# the commands an and-or list may run that the reader reads (assignments, exports, declarations, unset)
_SIMPLE = re.compile(r"^\s*(?:[A-Za-z_]\w*\+?=|(?:export|unset|declare|typeset|local|readonly)\b)")
_TEST_WORDS = ("[[", "[", "test", "!", "true", "false", ":")


def _is_test(cmd: str) -> bool:
    return _first_word(cmd) in _TEST_WORDS


def _cond_tokens(body: str) -> Optional[list[str]]:
    """A `[[ ]]` body's words as written (quotes, `$( )`, `${ }` kept), `&&` `||` `(` `)` tokens of their own."""
    out, cur, k, n = [], [], 0, len(body)

    def flush():
        if cur:
            out.append("".join(cur))
            cur.clear()

    while k < n:
        c = body[k]
        j = _span_end(body, k)
        if j is None:
            return None
        if j > k:  # a quoted / escaped / bracketed span, one piece of the word
            cur.append(body[k:j])
            k = j - 1
        elif c.isspace():
            flush()
        elif body.startswith("&&", k) or body.startswith("||", k):
            flush()
            out.append(body[k:k + 2])
            k += 1
        elif c in "()":
            flush()
            out.append(c)
        else:
            cur.append(c)
        k += 1
    flush()
    return out


def _known(sh: "_Shell", text: str, mode: str = "word") -> Optional[str]:
    """`text` expanded (mode: _Shell.expand's), None where it names a variable the script does not set or holds an
    expansion the reader leaves as written (a command substitution, arithmetic or expansion it does not evaluate)."""
    sh.unknown.clear()
    before = set(sh.substitutions)
    e = sh.expand(text, mode=mode)
    if sh.unknown or substitutions(e) or any(w in e for w in set(sh.substitutions) - before) or "${" in e:
        sh.unknown.clear()
        return None
    return e


_INT_TESTS = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-lt": lambda a, b: a < b,
              "-le": lambda a, b: a <= b, "-gt": lambda a, b: a > b, "-ge": lambda a, b: a >= b}


def _dbl_test(sh: "_Shell", body: str) -> Optional[bool]:
    """A `[[ ]]` expression (GNU Bash Reference Manual 5.2, 3.2.5.2 Conditional Constructs, 6.4 Bash Conditional
    Expressions): `( )`, `!`, `&&` over `||` (&& binds tighter); each term `-z W`, `-n W`, a lone `W` (not empty),
    `A == P` / `A = P` / `A != P` with P a bash pattern where unquoted (shell_pattern; quoted: literal), and `A -eq|
    -ne|-lt|-le|-gt|-ge B` arithmetic; no word splitting. None where it holds anything else (`=~`, `<`, file tests),
    an unknown variable or a substitution; an unknown operand of `&&` / `||` leaves the result unknown unless the
    other decides it."""
    toks = _cond_tokens(body)
    if toks is None or not toks:
        return None
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def or_():
        v = and_()
        while peek() == "||":
            pos[0] += 1
            w = and_()
            v = True if (v is True or w is True) else (None if v is None or w is None else False)
        return v

    def and_():
        v = not_()
        while peek() == "&&":
            pos[0] += 1
            w = not_()
            v = False if (v is False or w is False) else (None if v is None or w is None else True)
        return v

    def not_():
        if peek() == "!":
            pos[0] += 1
            v = not_()
            return None if v is None else not v
        if peek() == "(":
            pos[0] += 1
            v = or_()
            if peek() != ")":
                raise ValueError("unclosed (")
            pos[0] += 1
            return v
        return term()

    def term():
        words = []
        while peek() is not None and peek() not in ("&&", "||", "(", ")"):
            words.append(peek())
            pos[0] += 1
        if len(words) == 1:
            w = _known(sh, words[0])
            return None if w is None else _unquoted(w) != ""
        if len(words) == 2 and words[0] in ("-z", "-n"):
            w = _known(sh, words[1])
            return None if w is None else ((_unquoted(w) == "") == (words[0] == "-z"))
        if len(words) == 3 and words[1] in ("==", "=", "!="):
            a, p = _known(sh, words[0]), _known(sh, words[2], mode="pattern")
            rx = shell_pattern.compile_pattern(p) if p is not None else None
            if a is None or rx is None:
                return None
            return (rx.fullmatch(_unquoted(a)) is not None) == (words[1] != "!=")
        if len(words) == 3 and words[1] in _INT_TESTS:
            vals = []
            for w in (words[0], words[2]):
                e = _known(sh, w)
                try:
                    v = None if e is None else sh._arith_value(_unquoted(e), None, w, expanded=True)
                except PlannerError:
                    v = None
                if v is None:
                    return None
                vals.append(v)
            return _INT_TESTS[words[1]](*vals)
        if not words:
            raise ValueError("empty term")
        return None

    try:
        v = or_()
    except ValueError:  # bash's syntax error in the conditional expression
        return None
    return v if pos[0] == len(toks) else None


def _posix_test(words: list[str]) -> Optional[bool]:
    """`test` / `[ ]` of its words after expansion and word splitting, by their count (GNU Bash Reference Manual 5.2,
    4.1 Bourne Shell Builtins, test): 0 false; 1 not empty; 2 `! W`, `-z W`, `-n W`; 3 `A = B` / `A == B` / `A != B`
    (strings, no pattern), `A -eq B` and the other integer tests (integers; else bash's error, None), `! W W`; 4 `!`
    and three; else None."""
    if not words:
        return False
    if len(words) == 1:
        return words[0] != ""
    if words[0] == "!" and len(words) in (2, 3, 4):
        v = _posix_test(words[1:])
        return None if v is None else not v
    if len(words) == 2:
        return (words[1] == "") == (words[0] == "-z") if words[0] in ("-z", "-n") else None
    if len(words) == 3:
        a, op, b = words
        if op in ("=", "==", "!="):
            return (a == b) == (op != "!=")
        if op in _INT_TESTS and all(re.fullmatch(r"\s*[-+]?\d+\s*", x) for x in (a, b)):
            return _INT_TESTS[op](int(a), int(b))
    return None


def _test(sh: "_Shell", cmd: str) -> Optional[bool]:
    """The status (True: 0) of one test command: `[[ ... ]]` (_dbl_test), `[ ... ]` / `test ...` (_posix_test),
    `true`, `false`, `:`, each after `!` (negated); None for any other command or what the reader cannot evaluate."""
    cmd = cmd.strip()
    neg = False
    while cmd.startswith("!") and cmd[1:2].isspace():
        neg, cmd = not neg, cmd[1:].strip()
    if cmd.startswith("[[") and cmd.endswith("]]"):
        v = _dbl_test(sh, cmd[2:-2])
    elif cmd in ("true", ":"):
        v = True
    elif cmd == "false":
        v = False
    elif cmd.startswith("[") and cmd.endswith("]") and cmd[1:2].isspace() or cmd.startswith("test") and cmd[4:5].isspace():
        args = cmd[1:-1] if cmd.startswith("[") else cmd[4:]
        e = _known(sh, args)
        try:
            v = None if e is None else _posix_test(shlex.split(e))
        except ValueError:
            v = None
    else:
        return None
    return None if v is None else v != neg


def _condition(sh: "_Shell", text: str):
    """The truth of a bash condition (an if's or elif's list): tests (_test) joined by `&&` and `||`, which bash runs
    left to right with equal precedence (bash(1), Lists: `a || b && c` is `(a || b) && c`), an unknown status
    unknown unless what follows decides it; None when it is anything else."""
    text = text.strip()
    if text.endswith("then"):
        text = text[:-4].rstrip().rstrip(";").rstrip()
    items = _top_split(text)
    if items is None or ";" in items or ";;" in items or not items[0]:
        return None
    value = _test(sh, items[0])
    for op, cmd in zip(items[1::2], items[2::2]):
        if (op == "&&" and value is False) or (op == "||" and value is True):
            continue  # not run: the status stands
        v = _test(sh, cmd)
        if value is None:
            value = (False if v is False else None) if op == "&&" else (True if v is True else None)
        else:
            value = v
    return value


def _and_or(sh: "_Shell", s: str):
    """A line that is an and-or list led by a test (`[[ $D == fp8 ]] && TP=4`, `[ -n "$X" ] || X=1`, bash(1), Lists)
    whose other commands are tests or commands the reader reads (assignments, export, unset, declarations): ("run",
    the commands bash runs, in order) where each test that decides it is evaluated; ("unknown", None) where one is
    not (or a test follows a command run, which the reader would evaluate before that command); None where the line
    is no such list (read as before: `cd x && torchrun ...`)."""
    items = _top_split(s)
    if items is None or ";" in items or ";;" in items or len(items) < 3 or not _is_test(items[0]):
        return None
    cmds = items[0::2]
    if not all(_is_test(c) or _SIMPLE.match(c) for c in cmds[1:]):
        return None
    status, run = _test(sh, cmds[0]), []
    for op, cmd in zip(items[1::2], cmds[1:]):
        if status is None:
            return "unknown", None
        if (op == "&&") != status:
            continue  # not run: the status stands
        if _is_test(cmd):
            if run:
                return "unknown", None
            status = _test(sh, cmd)
        else:
            run.append(cmd)
            status = None if substitutions(cmd) else True  # an assignment's status: its substitution's, else 0
    return "run", run


def _quoted_words(line: str, where: str, no: int) -> list[str]:
    """shlex's words of one script line as written (before the reader expands its variables), comments dropped;
    an unbalanced quote is bad input naming the line. bash reads a quoted word on over the next lines (or fails
    at the end of the file); the reader splits a line at a time, so such a line was read wrong without a word:
    a launch line skipped ('no pretrain_gpt.py / torchrun line found'), an array line kept as one element, a
    value kept with its quote."""
    try:
        return shlex.split(line, comments=True)
    except ValueError as e:  # shlex: 'No closing quotation' / 'No escaped character'
        raise PlannerError(f"{where}line {no}: cannot split {line.strip()[:80]!r}: {e} (a quote opened on the line is "
                           "not closed on it)",
                           "close the quote on the same line (a quoted value over several lines is not read), or "
                           "continue the line with a trailing backslash") from None


def _assignment_words(s: str) -> Optional[list[str]]:
    """The lines a line `[export] A=1 B="x y" ...` stands for, one assignment each as written (quotes, `$VAR`,
    `${X:-a b}` and `$(...)` kept, for the reader to expand as it expands one assignment), where it holds two or more
    assignments and nothing else (bash assigns, and exports, each in turn: `export CUDA_DEVICE_MAX_CONNECTIONS=1
    NCCL_ALGO=Ring`), or a `;` list of such commands, `unset NAME ...` and declarations (`declare -x A=1`, `export -n
    A`: _declaration) (`A=1; export A`, `export NCCL_ALGO=Ring;`);
    else None (one assignment, a command line, or another list / pipe / redirection, `&|<>()` outside quotes, left as
    read before)."""
    if len(s) > MAX_EXPANSION:  # a line past what a value may expand to: read as one assignment, refused as such
        return None
    words, cur, quote, depth, k = [], [], None, 0, 0
    while k < len(s):
        c = s[k]
        if quote:
            cur.append(c)
            if c == "\\" and quote == '"' and k + 1 < len(s):
                cur.append(s[k + 1])
                k += 1
            elif c == quote:
                quote = None
        elif c == "\\" and k + 1 < len(s):
            cur += [c, s[k + 1]]
            k += 1
        elif c in "'\"":
            quote = c
            cur.append(c)
        elif c == "$" and s[k + 1:k + 2] in ("{", "("):
            cur += [c, s[k + 1]]
            depth += 1
            k += 1
        elif depth and c in "})":
            cur.append(c)
            depth -= 1
        elif depth:
            cur.append(c)
        elif c.isspace():
            if cur:
                words.append("".join(cur))
                cur = []
        elif c == "#" and not cur:
            break
        elif c == ";":
            if cur:
                words.append("".join(cur))
                cur = []
            words.append(";")
        elif c in "&|<>()":
            return None
        else:
            cur.append(c)
        k += 1
    if quote or depth:
        return None
    if cur:
        words.append("".join(cur))
    out, listed_ = [], ";" in words
    while words:
        seg = words[:words.index(";")] if ";" in words else words
        words = words[len(seg) + 1:]
        if not seg:
            continue
        if (seg[0] in ("unset", "declare", "typeset", "local", "readonly") or seg[0] == "export" and len(seg) > 1
                and seg[1][:1] in "-+") and len(seg) > 1:  # read as its own line (_declaration)
            out.append(" ".join(seg))
            continue
        export = seg[0] == "export"
        rest = seg[1:] if export else seg
        if not rest or not all(re.fullmatch(r"[A-Za-z_]\w*\+?=.*", w) or (export and re.fullmatch(r"[A-Za-z_]\w*", w))
                               for w in rest):
            return None
        out += [("export " if export else "") + w for w in rest]
    return out if out and (len(out) > 1 or listed_) else None


# bash's declaration builtins (bash(1), SHELL BUILTIN COMMANDS): `export -n`, `declare` / `typeset` / `local` /
# `readonly` with their options, then names and NAME=value words
_DECLARE = re.compile(r"^\s*(export|declare|typeset|local|readonly)((?:\s+(?:[-+][A-Za-z]+|--))*)(?:\s+(.*?))?\s*$")
_UNEXPORT = re.compile(r"\s*export\s+-n\s+([A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*)\s*(?:#.*)?")


def _declaration(s: str) -> Optional[tuple[list[str], list[tuple[str, set, set, bool]]]]:
    """(the lines a declaration stands for, as the reader reads them, and the attributes it gives each name, for
    _Shell.declare: (name, attributes on, attributes off, whether the command assigns it a value)). Lines: `declare
    -x A=1 B` -> `export A=1`, `export B`; `declare A=1` / `typeset` / `local` / `readonly A=1` -> `A=1` (a name
    without a value: nothing); `export -n A=1 B` and `declare +x A` -> `A=1`, `export -n A`, `export -n B` (the export
    taken back, the variable kept: bash(1) export -n); `-f` / `-F` / `-p` (functions, printing) -> nothing.
    Attributes: -i (integer: the value, and every later one, is arithmetic), -l / -u (lower / upper case),
    -n (a name reference: `declare -n R=TP` -> R stands for TP), -A (associative: not read), each `+` to take it off
    (GNU Bash Reference Manual 5.2, 4.2 Bash Builtin Commands, declare). None: a plain `export` (read as before),
    or words that are no assignments."""
    m = _DECLARE.match(s)
    if m is None:
        return None
    cmd, opts, rest = m.group(1), [o for o in m.group(2).split() if o != "--"], (m.group(3) or "")  # `--`: options end
    if cmd == "export" and not m.group(2).split():
        return None
    on = set("".join(o[1:] for o in opts if o[0] == "-"))
    off = set("".join(o[1:] for o in opts if o[0] == "+"))
    if on & set("fFp"):
        return [], []
    unexport = (cmd == "export" and "n" in on) or "x" in off
    export = not unexport and (cmd == "export" or "x" in on)
    kept = set("ilunA") if cmd != "export" else set()  # export's -n is its own (unexport)
    if not rest.strip() or rest.lstrip().startswith("#"):
        return [], []
    arr = re.match(r"([A-Za-z_]\w*)\+?=\(", rest)
    if arr:  # an array (`declare -a A=(x y)`): read by the array assignment, whose elements may run on
        return ([("export " if export else "") + rest] + ([f"export -n {arr.group(1)}"] if unexport else []),
                [(arr.group(1), on & kept, off & kept, True)])
    words = _assignment_words("export " + rest + " ;")
    if words is None:
        return None
    out, attrs = [], []
    for w in (w[len("export "):] for w in words):
        name, eq, value = w.partition("=")
        name = name.rstrip("+")
        attrs.append((name, on & kept, off & kept, bool(eq)))
        if eq:
            out.append(("export " if export else "") + w)
        elif export:
            out.append(f"export {name}")
        if unexport:
            out.append(f"export -n {name}")
    return out, attrs


def _array_end(text: str) -> Optional[int]:
    """Where the `)` that closes an array assignment's `(` stands in `text` (the text after the `(`), or None where
    it is not there: a `)` of a `$( )` / `$(( ))` / `${ }` inside it, inside quotes or in a comment does not close it
    (bash(1), Arrays: `A=(--train-iters $((1000 << 1)))`)."""
    quote, depth, k = None, 0, 0
    while k < len(text):
        c = text[k]
        if quote:
            if c == "\\" and quote == '"':
                k += 1
            elif c == quote:
                quote = None
        elif c == "\\":
            k += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (k == 0 or text[k - 1].isspace()):
            nl = text.find("\n", k)
            if nl < 0:
                return None
            k = nl
        elif c == "$" and text[k + 1:k + 2] in ("(", "{"):
            depth += 1
            k += 1
        elif depth and c in "({":
            depth += 1
        elif depth and c in ")}":
            depth -= 1
        elif c == ")":
            return k
        k += 1
    return None


def _strip_comment(s: str) -> str:
    try:
        return " ".join(shlex.split(s, comments=True))
    except ValueError:
        return s


_HEREDOC = re.compile(r"""^\s*cat\s+(?:<<(-?)\s*(['"]?)(\w+)\2\s*>\s*(\S+)|>\s*(\S+)\s*<<(-?)\s*(['"]?)(\w+)\7)\s*$""")
# a command line ends at a pipe or a list operator (`... | tee log`, Megatron-DeepSpeed's examples)
_COMMAND_END = ("|", "||", "&&", ";", "&")


def command_words(text: str, where: str, assumed: list[str], heredocs: Optional[dict] = None,
                  env: Optional[dict] = None, functions_read: bool = False,
                  subs: Optional[dict] = None, script: Optional[list] = None) -> tuple[list[str], list[str], bool]:
    """(launcher words before the script, argument words after it, whether the GPU-count
    words came from shell defaults). A file that starts with `--` is an argument file.
    heredocs: filled with the files the script writes with `cat <<EOT > $FILE` (or `cat > $FILE
    <<EOT`) at its top level, as {expanded file name: (text, unexpanded variables, line)}: the
    body expanded with the script's variables as bash expands it (a quoted delimiter, <<'EOT':
    as written); Megatron-DeepSpeed's scripts write their ds_config.json so.
    env: filled with the environment the launch line runs in, as far as the script sets it: the variables it
    exports at its top level (`export NAME=value`, or `export NAME` after `NAME=value`), their values when the
    launch line runs, and the assignments before the launcher on that line (`NCCL_ALGO=Ring torchrun ...`).
    subs: filled with the command substitutions and arithmetic the reader left unexpanded, {as expanded: script
    line} (_Shell.substitutions).
    script: filled with the launch line's script word (nothing for an argument file)."""
    lines = _join_continuations(text)
    body = [(no, ln) for no, ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if body and body[0][1].lstrip().startswith("-"):
        words = [w for no, ln in body for w in _quoted_words(ln, where, no)]
        return [], words, False
    sh = _Shell(where)
    exported: set = set()  # the names the script exports (env)
    line_env: dict = {}
    depth, skipped, cmd = 0, [], None
    functions: list = []  # the lines of function bodies, not read (`name() {` ... `}`)
    frames: list = []  # evaluated if-blocks: [branch active (None: unknown), some branch taken]
    evaluated: list = []
    lists_unknown: list = []  # `test && cmd` lines whose tests the reader cannot evaluate
    i = 0
    while i < len(lines):
        no, line = lines[i]
        i += 1
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        sh.line = no
        m_doc = _HEREDOC.match(s)
        if m_doc:  # the body is the file's text, never commands: skipped here, kept where it is written
            g = m_doc.groups()
            dash, quote, delim, target = (g[0], g[1], g[2], g[3]) if g[2] else (g[5], g[6], g[7], g[4])
            body = []
            while i < len(lines) and (lines[i][1].lstrip("\t") if dash else lines[i][1]).strip() != delim:
                body.append(lines[i][1])
                i += 1
            i += 1
            active = not depth and not frames_unknown(frames) and all(f[0] for f in frames)
            if heredocs is not None and active:
                sh.unknown.clear()
                name = literal(_unquoted(sh.expand(target)))
                unknown = set(sh.unknown)
                sh.unknown.clear()
                doc = "\n".join(body) if quote else literal(sh.expand("\n".join(body), mode="heredoc"))
                heredocs[name] = (doc, (unknown | set(sh.unknown)) if not quote else unknown, no)
            continue
        if not functions_read and _FUNC_OPEN.match(s):  # a body runs only where its function is called: not read
            start, brace = no, 0 if re.search(r"\}\s*(?:#.*)?$", s) else 1  # `f() { ...; }`: one line
            while brace > 0 and i < len(lines):  # a body line that ends with `{` opens a group, one that starts with
                inner = re.sub(r"\s+#.*$", "", lines[i][1].strip())  # `}` closes one (a quoted brace inside a
                i += 1  # line is neither)
                brace += inner.endswith("{") - inner.startswith("}")
            functions.append(f"{start}-{lines[i - 1][0]}" if lines[i - 1][0] != start else str(start))
            continue
        if _BLOCK_OPEN.match(s):
            parts = _one_line_if(s)  # `if [[ ... ]]; then A=1; else A=2; fi`: read as the lines it stands for
            if parts is not None:
                lines[i:i] = [(no, p) for p in parts[1:]]
                s = parts[0]
            elif _one_line_block(s):  # `for ...; do ...; done` on one line: one block, opened and closed there
                if not any(f[0] is False for f in frames):
                    skipped.append(no)
                continue
        # `if` blocks whose conditions are constant tests of known variables are evaluated
        # (DTYPE=fp8; if [[ $DTYPE == fp8 ]]); any other block is skipped and listed
        m_if = _IF.match(s)
        if m_if:  # inside a block not evaluated the if is not either: its own frame, so that its `fi` closes it
            val = _condition(sh, m_if.group(2)) if not frames_unknown(frames) else None
            frames.append([val, bool(val)])  # [active, a branch was taken]
            if val is None:
                skipped.append(no)
            else:
                evaluated.append(no)
            continue
        m_el = _ELSE.match(s)
        if m_el and frames and frames[-1][0] is not None:
            top = frames[-1]
            if m_el.group(1) == "else":
                top[0] = not top[1]
            else:
                v = _condition(sh, m_el.group(2) or "")
                if v is None:
                    top[0] = None
                    skipped.append(no)
                else:
                    top[0] = (not top[1]) and v
                    top[1] = top[1] or bool(top[0])
            continue
        if _BLOCK_CLOSE.match(s) and frames and s.split()[0] == "fi":
            frames.pop()
            continue
        if _BLOCK_OPEN.match(s):
            depth += 1
            skipped.append(no)
            continue
        if _BLOCK_CLOSE.match(s):
            depth = max(0, depth - 1)
            continue
        if depth or any(f[0] is None for f in frames):
            skipped.append(no)
            continue
        if any(not f[0] for f in frames):  # a branch not taken
            continue
        listed_ = _and_or(sh, s)
        if listed_ is not None:  # `[[ $D == fp8 ]] && TP=4`: the commands bash runs, read as lines of their own
            if listed_[0] == "unknown":
                lists_unknown.append(no)
            else:
                lines[i:i] = [(no, c) for c in listed_[1]]
                evaluated.append(no)
            continue
        written = _quoted_words(s, where, no)  # a line the reader reads: its quotes balanced as written
        m_unexport = _UNEXPORT.fullmatch(s)
        if m_unexport:  # `export -n NAME ...`: the names no longer exported, their values kept
            exported.difference_update(sh._target(n) or n for n in m_unexport.group(1).split())
            continue
        declared = _declaration(s)
        if declared is not None:  # `declare -x A=1`, `readonly A=1`, `export -n A=1`: read as the lines they stand for,
            for name, on, off, valued in declared[1]:  # after the attributes it gives (-i, -l, -u, -n, -A)
                sh.declare(name, on, off, valued)
            lines[i:i] = [(no, w) for w in declared[0]]
            continue
        several = _assignment_words(s)
        if several is not None:  # `[export] A=1 B=2`, `A=1; export A`: each command read as its own line, in bash's order
            lines[i:i] = [(no, w) for w in several[1:]]
            s = several[0]
            written = _quoted_words(s, where, no)
        m_unset = re.fullmatch(r"\s*unset\s+(?:-([vfn])\s+)?([A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*)\s*(?:#.*)?", s)
        if m_unset:  # `unset NAME ...`: the variables (and their export) gone from the launch line's environment;
            for name in m_unset.group(2).split() if m_unset.group(1) != "f" else ():  # -n: a name reference itself
                exported.discard(sh.unset(name, ref=m_unset.group(1) == "n"))  # (-f: functions, no variable)
            continue
        m_export = re.fullmatch(r"\s*export\s+([A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*)\s*", s)
        if m_export:  # `export NAME ...`: names set before (or after) exported (a name reference: the variable it names)
            exported.update(sh._target(n) or n for n in m_export.group(1).split())
            continue
        m_elem = _ELEMENT.match(s)
        if m_elem:  # `A[i]=v`: an element assigned (a sparse array the reader's lists do not hold): A unreadable
            sh.opaque.add(sh._target(m_elem.group(1)) or m_elem.group(1))
            continue
        m = _ASSIGN.match(s)
        # `NAME=value cmd ...`: assignments for the command alone, a command line (its launcher or script after them)
        prefixed = (m is not None and not s.lstrip().startswith("export") and not m.group(3).startswith("(")
                    and len(written) > 1 and re.fullmatch(r"[A-Za-z_]\w*=.*", written[0]) is not None
                    and any(w.split("/")[-1] in _LAUNCHERS or ARGS_SCRIPT.search(w) for w in written[1:]))
        if m and not prefixed and m.group(1) and s.lstrip().startswith("export"):
            exported.add(sh._target(m.group(1)) or m.group(1))
        # a launcher as a whole word of the first word (`X=torchrun`), not inside a value: DS_CONFIG=./deepspeed.json
        # is an assignment (Megatron-DeepSpeed's examples)
        if m and not prefixed and not any(re.search(rf"(^|[=/]){w}$", s.split()[0]) for w in _LAUNCHERS):
            name, plus, rhs = m.groups()
            if rhs.startswith("("):
                parts = [rhs[1:]]
                # the array ends at its own `)`, not one inside `$(( ))`, `$( )`, quotes or a comment
                while (")" not in parts[-1] or _array_end("\n".join(parts)) is None) and i < len(lines):
                    _quoted_words(lines[i][1], where, lines[i][0])  # each element line's quotes as written
                    parts.append(lines[i][1])
                    i += 1
                inner = "\n".join(parts)
                end = _array_end(inner)
                inner = inner[:end] if end is not None else inner[: inner.rfind(")")]
                elems = []
                raw = []
                for ln in inner.splitlines():
                    try:
                        raw += shlex.split(ln, comments=True)
                    except ValueError:
                        pass
                    ln = sh.expand(ln)
                    try:
                        elems += rejoined(shlex.split(ln, comments=True))
                    except ValueError:
                        elems.append(ln)
                sh.assign_array(name, elems, raw, bool(plus))
                if len(sh.arrays.get(sh._target(name) or name, ())) > MAX_ARRAY:
                    raise PlannerError(f"{where}line {no}: the array {name} grows past {MAX_ARRAY:,} elements",
                                       "a launch script's argument arrays hold tens of words: give them as written")
            else:
                seen: set = set()
                val = sh.expand(rhs, seen)
                try:
                    w = shlex.split(val, comments=True)
                    val = w[0] if len(w) == 1 else " ".join(w)
                except ValueError:
                    pass
                # `NAME+=value`: bash appends to the string (bash(1), PARAMETERS); through a name reference, with
                sh.assign(name, val, bool(plus))  # the variable's -i / -l / -u attributes (_Shell.assign)
                if len(sh._value(name) or "") > MAX_EXPANSION:
                    raise PlannerError(f"{where}line {no}: the variable {name} grows past {MAX_EXPANSION:,} "
                                       "characters", "a launch script's values are a few kB: give them as written")
                if seen or re.search(r"\$\{\w+:?-", rhs):
                    sh.soft.add(sh._target(name) or name)
            continue
        expanded_seen: set = set()
        ex = sh.expand(s, expanded_seen)
        try:
            words = rejoined(shlex.split(ex, comments=True))
        except ValueError:
            continue
        words = _inline_shell_c(words)
        if cmd is not None and words and words[0].startswith("-") and ")" not in words[0]:
            # a command line after the launch line that starts with a flag (`--micro-batch-size 1 \` or an
            # `${ARGS[@]}` of flags): bash runs the flag as a command name ("command not found", after the training
            # has run without it), as when a blank or commented line breaks the launch line's `\` continuation.
            # Before 2026-12-07 these flags were passed over silently (fuzz4's finding on the Bridge reader,
            # megatron_bridge._stray_overrides, seen here on train_llama3_8b.sh); a case pattern (`--tp)`) is not one.
            # That reader's own check (a dotted override that starts a line) stays there: it scans the raw text, above
            # the launcher too, and here it would refuse a dotted word in a Megatron-LM script, passed over as another
            # command (no pretrain_gpt.py argument is dotted); this one reads expanded words (`${ARGS[@]}`'s flags)
            raise PlannerError(f"{where}line {no}: {literal(words[0])} starts a command after the launch line: "
                               "bash runs a flag as a command name, so it and the words after it never reach the "
                               "launched script (a line continuation broken by a blank or commented line?)",
                               "give the arguments on the launch line, each line but the last ending with `\\`")
        script_at = [k for k, w in enumerate(words) if ARGS_SCRIPT.search(w.strip("\"'"))]
        end = next((k for k, w in enumerate(words) if w in _COMMAND_END and script_at and k > script_at[0]), None)
        words = words if end is None else words[:end]
        if script_at:  # bash redirections after the script are the shell's, not arguments: `... $CMD" 2>&1 | tee`
            words = words[:script_at[0] + 1] + _drop_redirections(words[script_at[0] + 1:])
        if script_at and ("pretrain_gpt.py" in ex or "pretrain_hybrid.py" in ex or any(w.split("/")[-1] in _LAUNCHERS for w in words[:script_at[0] + 1])):
            cmd = (words, script_at[0], s)
            line_env = {}  # the environment this launch line runs in (env)
            for k in exported:
                if k in sh.vars:
                    line_env[k] = sh.vars[k]
            for w in words[:script_at[0]]:  # `NAME=value` words before the launcher
                a = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", w)
                if a is None:
                    break
                line_env[a.group(1)] = a.group(2)
    if cmd is None and functions:  # the launch line is inside a function (`run() { torchrun ... }; run`): the bodies
        # read as the script's own lines, as before function bodies were skipped, and said so
        assumed.append(noted("assumed", None, f"script lines {', '.join(functions[:8])}"
                             f"{' ...' if len(functions) > 8 else ''} are function bodies, read as the script's own "
                             "lines: the launch line is inside one (the reader does not follow calls)"))
        return command_words(text, where, assumed, heredocs, env, functions_read=True, subs=subs, script=script)
    # a one-line if stands for several lines of one number: each listed once
    evaluated, skipped = list(dict.fromkeys(evaluated)), list(dict.fromkeys(skipped))
    if evaluated:
        assumed.append(listed("assumed", "script lines", evaluated[:8], "conditions on the script's constants "
                              "evaluated (bash [[ ]] / [ ] / test in if blocks and && / || lists)",
                              show=", ".join(map(str, evaluated[:8])), spaced=True))
    if lists_unknown:
        assumed.append(noted("assumed", None, f"script lines {', '.join(map(str, lists_unknown[:8]))}"
                             f"{' ...' if len(lists_unknown) > 8 else ''}: && / || lists whose tests are not constant "
                             "were not evaluated (the commands after them not read)"))
    for name, elem in dict.fromkeys(sh.kept_whole):
        assumed.append(noted("assumed", repr(literal(elem)), f"read as one value, as ${{{name}[@]}}'s element is written (bash "
                             f"splits an unquoted ${{{name}[@]}} at spaces; quote it, \"${{{name}[@]}}\", for Megatron "
                             "to receive one value)"))
    if functions:
        assumed.append(noted("assumed", None, f"script lines {', '.join(functions[:8])}"
                             f"{' ...' if len(functions) > 8 else ''} are function bodies, not read (bash runs a "
                             "body only where the function is called, which the reader does not follow)"))
    if skipped:
        assumed.append(noted("assumed", None, f"script lines {', '.join(map(str, skipped[:8]))}"
                             f"{' ...' if len(skipped) > 8 else ''} inside if/case/for/while blocks whose conditions are "
                             "not constant were not evaluated"))
    if cmd is None:
        raise PlannerError(f"{where}no pretrain_gpt.py / torchrun line found",
                           "give a launch script whose torchrun ... pretrain_gpt.py line holds the arguments, "
                           "or a file of arguments starting with --")
    words, k, raw_line = cmd
    if env is not None:
        env.update(literal(line_env))
    if subs is not None:
        subs.update(literal(sh.substitutions))
    if script is not None:
        script.append(literal(words[k]))
    return literal(words[:k]), literal(words[k + 1:]), _soft_launcher(sh, raw_line)


_REDIRECT = re.compile(r"(\d*|&)(>>?|<)(&\d+|&-)?")  # a redirection operator alone (its target the next word)
_REDIRECT_JOINED = re.compile(r"(\d*|&)(>>?|<)(&\d+|&-|[^\s&<>-]\S*)")  # with its target: 2>&1, >log, 2>>err.txt


class ScriptWords(typing.NamedTuple):
    """A launch script split as command_words splits it (read_script_words)."""
    text: str            # the script's text
    launch: list         # the launcher's words before the script
    words: list          # the argument words after it
    soft: bool           # the GPU-count words came from shell defaults
    assumed: list        # what splitting it assumed (command_words' notes)
    heredocs: dict       # the files it writes with `cat <<EOT > $FILE` (command_words' heredocs)
    env: dict = {}       # the environment its launch line runs in, as far as the script sets it (command_words' env)
    subs: dict = {}      # the substitutions left unexpanded, {text: script line} (command_words' subs)
    script: str = ""     # the launch line's script word (`pretrain_gpt.py`); "" for an argument file


def read_script_words(path: Optional[Path], text: Optional[str], where: str, hint: str) -> ScriptWords:
    """The script at `path` (`text`: its text when the caller already read it; else read here, `hint` the
    read error's hint) split by command_words with its heredoc files collected; a quoting shlex cannot split
    (unbalanced quotes) is bad input. The Megatron-LM and Megatron-Bridge readers share it."""
    if text is None:
        text = files.read_text(path, hint)
    assumed: list[str] = []
    heredocs: dict = {}
    env: dict = {}
    subs: dict = {}
    script: list = []
    try:
        launch, words, soft = command_words(text, where, assumed, heredocs, env, subs=subs, script=script)
    except ValueError as e:  # shlex: unbalanced quotes
        raise PlannerError(f"{where}cannot split the arguments ({e})", "check the quotes") from None
    return ScriptWords(text, launch, words, soft, assumed, heredocs, env, subs, script[0] if script else "")


def _drop_redirections(words: list[str]) -> list[str]:
    """`words` without bash redirections: `2>&1`, `>log`, `> log` (the target word too)."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if _REDIRECT.fullmatch(w) and not w[-1].isdigit() and not w.endswith("-"):
            skip = True  # `>` / `2>>` / `&>`: the target is the next word
            continue
        if _REDIRECT_JOINED.fullmatch(w) or _REDIRECT.fullmatch(w):
            continue
        out.append(w)
    return out


def _inline_shell_c(words: list[str]) -> list[str]:
    """`bash -c "<command>"` (or sh): the command string's own words in its place, where it names a
    pretrain_*.py script. BigScience's tr11-176B-ml.slurm launches `srun ... bash -c "$LAUNCHER
    --node_rank \\$SLURM_PROCID $CMD"`: one quoted word to shlex, the script inside it."""
    for k in range(1, len(words) - 1):
        if words[k] == "-c" and words[k - 1].split("/")[-1] in ("bash", "sh"):
            try:
                inner = shlex.split(words[k + 1], comments=True)
            except ValueError:
                return words
            if any(re.search(r"(^|/)pretrain_\w+\.py$", w) for w in inner):
                return words[:k + 1] + inner + words[k + 2:]
    return words


def _soft_launcher(sh: _Shell, raw_line: str) -> bool:
    """Whether torchrun's --nproc_per_node / --nnodes values come from a shell default
    (`${VAR:-default}`) or a variable the script does not set: then --gpus replaces them."""
    def raw_words(words, depth=0):
        for w in words:
            m = re.fullmatch(r"\$\{(\w+)\[[@*]\]\}", w.strip('"'))
            if m and m.group(1) in sh.raw_arrays and depth < 8:
                yield from raw_words(sh.raw_arrays[m.group(1)], depth + 1)
            else:
                yield w
    try:
        ws = list(raw_words(shlex.split(raw_line, comments=True)))
    except ValueError:
        return False
    soft = False
    for j, w in enumerate(ws):
        for key in ("--nproc_per_node", "--nproc-per-node", "--nnodes"):
            val = ws[j + 1] if w == key and j + 1 < len(ws) else (w.split("=", 1)[1] if w.startswith(key + "=") else None)
            if val is None:
                continue
            seen: set = set()
            sh.unknown.clear()
            out = sh.expand(val, seen)
            soft |= bool(seen) or bool(sh.unknown) or not out.isdigit()
    return soft


def parse_flags(words: list[str], where: str, nargs: frozenset = frozenset(),
                occurrences: Optional[list] = None) -> tuple[dict, list[str]]:
    """{flag: value or True}; and words that are no flag's value (listed as ignored). nargs: flags that take a list
    here beside NARGS_FLAGS (a Megatron-DeepSpeed script's --num-experts, nargs '+': megatron_deepspeed.MDS_NARGS).
    A repeated flag keeps its last value, as argparse does; occurrences: filled with every (flag, value) in the
    line's order (megatron_argparse.check_occurrences checks the earlier ones)."""
    flags = _Occurrences(occurrences) if occurrences is not None else {}
    stray: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("--"):
            stray.append(w)
            continue
        if "=" in w:
            name, val = w.split("=", 1)
            flags[name] = val
            continue
        if w in BOOL_FLAGS or w in KNOWN_BOOL_IGNORED:
            flags[w] = True
            continue
        if w in VALUE_FLAGS and w not in NARGS_FLAGS and w not in nargs:
            if i >= len(words):
                raise PlannerError(f"{where}{w}: expected one argument (argparse refuses a flag without its value, "
                                   "exit 2, before the run starts)", megatron_argparse.hint(w, f"e.g. {w} 8"))
            flags[w] = words[i]
            i += 1
            continue
        # a list flag or an unknown flag: the words up to the next flag are its value
        vals = []
        while i < len(words) and not words[i].startswith("--"):
            vals.append(words[i])
            i += 1
        if w in NARGS_FLAGS or w in nargs:
            flags[w] = vals
        else:
            flags[w] = " ".join(vals) if vals else True
    return dict(flags), stray


class _Occurrences(dict):
    """parse_flags' flags, each value it sets recorded in `seen` too."""

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __setitem__(self, key, value):
        self.seen.append((key, value))
        super().__setitem__(key, value)


SPELLED_PHASES = 4096  # _rampup_ignored spells a ramp of fewer increments (a message's length, not a model figure)


def _rampup_ignored(flags: dict, job: dict, seq: int) -> Note:
    """--rampup-batch-size START INCREMENT SAMPLES in a Megatron-LM script: listed as ignored, as Megatron-LM
    @d98e8a64 ignores it (parsed, training_config.py l. 20-29 "Deprecated. Use step_batch_size_schedule
    instead."; passed to no calculator, global_vars.py l. 148-157: the run trains at --global-batch-size, or at
    --step-batch-size-schedule's batches where that is given). Where the ramp is whole (three whole numbers, the
    global batch START + k x INCREMENT, k >= 1) the note gives the --step-batch-size-schedule that runs the ramp
    Megatron-LM ran before 532ad926b4 (batch_ramp.rampup_phases, the one rule with the Megatron-DeepSpeed reader),
    its thresholds the phases' samples x the sequence length in tokens."""
    value = " ".join(words_of(flags["--rampup-batch-size"]))
    why = ("deprecated and passed to nothing at Megatron-LM @d98e8a64 (training_config.py l. 20-29, global_vars.py "
           "l. 148-157; its calculator was removed by 532ad926b4)")
    def note(reason: str) -> Note:
        return listed("ignored", "--rampup-batch-size", value, f"{why}: {reason}")

    if "--step-batch-size-schedule" in flags:
        return note("--step-batch-size-schedule is the ramp the run steps by")
    try:
        start, inc, samples = (int(w) for w in value.split())
    except ValueError:
        return note("the run steps at --global-batch-size")
    g = job["global_batch"]
    if start <= 0 or inc <= 0 or samples <= 0 or g - start <= 0 or (g - start) % inc:
        return note("the run steps at --global-batch-size")
    if (g - start) // inc >= SPELLED_PHASES:  # O(phases) to spell: a fuzzed 1 1 N ramp to a 2**31 batch is not
        return note(f"the run steps at --global-batch-size {g}; the ramp has {(g - start) // inc + 1:,} phases, too "
                    "many to spell as a --step-batch-size-schedule here")
    phases = rampup_phases(start, inc, samples, g)
    return note(f"the run steps at --global-batch-size {g}; the ramp, {len(phases)} phases, is "
                f"--step-batch-size-schedule '{to_megatron([(c * seq, b) for c, b in phases])}' in place of "
                "--global-batch-size: planner/batch_ramp.py rampup_phases")


def _read_wgrad_deferral(where, flags, job) -> None:
    """--defer-embedding-wgrad-compute [--wgrad-deferral-limit N] -> job defer_embedding_wgrad = N
    (default 0: every micro-batch), with Megatron-Core's own checks (model_parallel_config.py
    __post_init__ @d98e8a64: the limit >= 0; gradient-accumulation fusion required)."""
    if "--defer-embedding-wgrad-compute" not in flags:
        if "--wgrad-deferral-limit" in flags:
            raise PlannerError(f"{where}--wgrad-deferral-limit is set without --defer-embedding-wgrad-compute",
                               "add --defer-embedding-wgrad-compute, or drop the limit (Megatron: 'invalid if "
                               "defer_embedding_wgrad_compute is False')")
        return
    limit = _int(where, flags, "--wgrad-deferral-limit", 0)  # 0 (every micro-batch) or a count: megatron_model.ZERO_OK
    if "--no-gradient-accumulation-fusion" in flags:
        raise PlannerError(f"{where}--defer-embedding-wgrad-compute with --no-gradient-accumulation-fusion",
                           "Megatron refuses it ('Cannot defer embedding wgrad compute when gradient accumulation "
                           "fusion is not used'): drop one of the two")
    job["defer_embedding_wgrad"] = limit


def _read_empty_cache(where, flags, job) -> None:
    """--empty-unused-memory-level N -> job empty_unused_memory_level (0, 1 or 2: training_config.py
    @d98e8a64 l. 48-51 Literal[0, 1, 2]): torch.cuda.empty_cache() after the forward-backward (1) and
    after the optimizer step too (2), training.py l. 3149-3150, 3229-3230. No priced figure moves: it
    frees only wholly free segments between phases (memory.py [13])."""
    if "--empty-unused-memory-level" not in flags:
        return
    level = _int(where, flags, "--empty-unused-memory-level", 0)
    if level not in (0, 1, 2):
        raise PlannerError(f"{where}--empty-unused-memory-level {level} is not one of Megatron's 0, 1, 2",
                           "give 0 (off), 1 (after the forward-backward) or 2 (after the optimizer step too)")
    if level:
        job["empty_unused_memory_level"] = level


def _float(where, flags, name):
    v = flags.get(name)
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise PlannerError(f"{where}{name} {_short(v)} is not a number", "give a number") from None
    if not math.isfinite(x):
        raise PlannerError(f"{where}{name} {_short(v)} is not a finite number", "give a finite number")
    return x


def _choice(where, name, v, choices, source):
    """v, where it is one of an argparse flag's (or a config field's) choices; else refused naming them and source."""
    if v not in choices:
        raise PlannerError(f"{where}{name} {_short(v)}: not one of Megatron's choices",
                           f"valid: {', '.join(choices)} ({source})")
    return v


# torchrun's --nproc_per_node words that count the node's devices at launch (torch/distributed/run.py
# determine_local_world_size): the GPU count then comes from --gpus
NPROC_WORDS = ("auto", "gpu", "cpu", "xpu")
LAUNCHER_KEYS = {"--num_gpus": "--nproc_per_node", "--num-gpus": "--nproc_per_node", "--num_nodes": "--nnodes",
                 "--num-nodes": "--nnodes"}


def _launcher_gpus(launch: list[str], where: str) -> Optional[int]:
    """torchrun's --nproc_per_node x --nnodes, or None where either is unexpanded (a `$VAR`,
    a NPROC_WORDS word) and the count comes from --gpus; any other value must be a count
    in ASCII digits ('²' or '0' is an error naming the option)."""
    vals = {}
    for j, w in enumerate(launch):
        for key in ("--nproc_per_node", "--nproc-per-node", "--nnodes", "--num_gpus", "--num-gpus", "--num_nodes",
                    "--num-nodes"):
            # the deepspeed launcher's --num_gpus x --num_nodes (deepspeed/launcher/runner.py @38327e07) as torchrun's
            name = LAUNCHER_KEYS.get(key, key.replace("-", "_").replace("__", "--"))
            if w == key and j + 1 < len(launch):
                vals[name] = launch[j + 1]
            elif w.startswith(key + "="):
                vals[name] = w.split("=", 1)[1]
    per = vals.get("--nproc_per_node")
    nodes = vals.get("--nnodes", "1")
    if per is None:
        return None
    if "$" in str(per) + str(nodes) or per in NPROC_WORDS or ":" in str(nodes):
        return None  # unexpanded, counted at launch, or an elastic MIN:MAX node range: the count comes from --gpus
    n = _int(where, {"torchrun --nproc_per_node": per}, "torchrun --nproc_per_node")
    m = _int(where, {"torchrun --nnodes": nodes}, "torchrun --nnodes")
    if n * m > MAX_COUNT:
        raise PlannerError(f"{where}torchrun --nproc_per_node {n} x --nnodes {m} = {n * m} GPUs, beyond a count "
                           f"({MAX_COUNT})", "give the launch's real GPU count")
    return n * m


# the Megatron flags a command-line option replaces, by the job field it sets (cli/core.py load_job lays the option over
# the file): {flag: (job field, option)}. The option's value stands for the flag's own where the script gives the flag a
# substitution the reader does not run (_unread_substitutions)
COMMAND_LINE_FLAGS = {
    "--tensor-model-parallel-size": ("tp", "--tp"), "--pipeline-model-parallel-size": ("pp", "--pp"),
    "--context-parallel-size": ("cp", "--cp"), "--expert-model-parallel-size": ("ep", "--ep"),
    "--expert-tensor-parallel-size": ("etp", "--etp"), "--num-virtual-stages-per-pipeline-rank": ("vpp", "--vpp"),
    "--num-layers-per-virtual-pipeline-stage": ("vpp", "--vpp"),
    "--micro-batch-size": ("micro_batch", "--micro-batch"), "--global-batch-size": ("global_batch", "--global-batch"),
    "--seq-length": ("seq_len", "--seq-len"), "--mtp-num-layers": ("mtp_layers", "--mtp-layers"),
    "--recompute-num-layers": ("recompute_layers", "--recompute-layers"),
    "--microbatch-group-size-per-virtual-pipeline-stage": ("microbatch_group", "--microbatch-group"),
    "--moe-expert-capacity-factor": ("moe_capacity_factor", "--moe-capacity-factor"),
    "--train-iters": ("tokens", "--tokens"), "--train-samples": ("tokens", "--tokens"),
    "--moe-expert-parallel-size": ("ep", "--ep"),  # Megatron-DeepSpeed's (megatron_deepspeed.split_flags)
}
MAX_SHOWN = 300  # characters of an unread substitution an error shows (a fuzzed one may run to MAX_EXPANSION)


def _unread_substitutions(flags: dict, subs: dict, where: str, overrides: dict) -> list:
    """The flags of COMMAND_LINE_FLAGS whose value holds a command substitution `$(...)` / `` `...` `` or arithmetic
    `$((...))` / `$[...]` the reader does not run (a `$(nproc)`, a `$(( A << 7 ))`), a parameter expansion it does not
    evaluate (_Shell: `${V/b/&}`, `${V@Q}`), or a variable the script does not set: where the command
    line gives the job field the flag sets (flags beat files), the flag reads the option's value (--num-layers-per-virtual-pipeline-stage as
    --num-virtual-stages-per-pipeline-rank, --train-iters / --train-samples dropped for --tokens) and an assumed note
    names the script's value it replaces; where it does not, a substitution is an error naming the file, the script
    line, the flag and the whole expression, hinting the option (a variable: the flag's own reading names it, as
    before: megatron_model._int). Returns the notes."""
    notes = []
    for flag, (field_, option) in COMMAND_LINE_FLAGS.items():
        value = flags.get(flag)
        if not isinstance(value, str) or not megatron_argparse.UNEXPANDED.search(value):
            continue
        hit = [e for e in subs if e in value]
        no = subs[hit[0]] if hit else None
        at = f"line {no}: " if no else ""
        unrun = "$(" in value or "$[" in value or "`" in value
        what = ("bash arithmetic the reader does not run" if "$((" in value or "$[" in value else
                "a command substitution the reader does not run" if unrun else
                "a parameter expansion the reader does not evaluate" if hit else
                "a variable the script does not set")
        if overrides.get(field_) is None:
            if not unrun and not hit:
                continue
            shown = value if len(value) <= MAX_SHOWN else value[:MAX_SHOWN] + "..."
            raise PlannerError(f"{where}{at}{flag} {shown!r}: {what}",
                               f"write the number it gives in the script, or give {option} N on the command line "
                               f"(it replaces the script's {flag})")
        given = overrides[field_]
        shown = value if len(value) <= MAX_SHOWN else value[:MAX_SHOWN] + "..."
        del flags[flag]
        if flag == "--num-layers-per-virtual-pipeline-stage":
            flags["--num-virtual-stages-per-pipeline-rank"] = str(given)
        elif field_ != "tokens":
            flags[flag] = str(given)
        notes.append(listed("assumed", field_, given, f"the command line's {option} replaces the script's {flag} "
                            f"{shown} ({at}{what}; flags beat the file)"))
    return notes


def read(path: Path, text: Optional[str] = None, *, model: Optional[str] = None, gpus: Optional[int] = None,
         hardware: Optional[str] = None, stack: Optional[str] = None, overrides: Optional[dict] = None,
         script: Optional[str] = None) -> TrainerConfig:
    """The config at `path`; `text`: its text when the caller already read it (else read here). stack: the command
    line's --stack, which a Megatron-DeepSpeed script of the 2021 fork is read on (megatron_deepspeed.STACK_2021).
    script: the entry script an argument file runs with, where its record names one (the CI corpus row's: megatron_ci
    TRAINING_SCRIPTS); a launch line's own script word wins (megatron_argparse.unknown_flags reads its flags).
    overrides: the job fields the command line gives (cli/core.py load_job), which stand for a flag the script sets
    from a substitution the reader does not run (_unread_substitutions)."""
    where = f"{path}: "
    split = read_script_words(path, text, where, "give a launch script or a file of Megatron arguments")
    text, launch, words, soft, assumed, heredocs = split[:6]
    occurrences: list = []
    flags, stray = parse_flags(words, where, occurrences=occurrences)
    if not mds.is_megatron_deepspeed(flags):
        if flags.get("--position-embedding-type") == "alibi":
            raise PlannerError(f"{where}--position-embedding-type alibi: Megatron-LM has no ALiBi (its choices: "
                               "learned_absolute, rope, mrope, relative, none)",
                               "ALiBi is BigScience's Megatron-DeepSpeed fork's: a --deepspeed script")
        # what Megatron-LM's argparse refuses, exit 2 (issue argparse): a value, each occurrence's, then (argparse's
        # order: parse_args reports the unrecognized arguments after parsing the known ones) a flag neither Megatron
        # nor the entry script defines (issue unkflags)
        megatron_argparse.check_occurrences(occurrences, where)
        megatron_argparse.check(flags, where)
        read_as = megatron_argparse.unknown_flags([f for f, _ in occurrences], where, split.script or script,
                                                  (overrides or {}).get("trainer_date"))
        assumed = assumed + [listed("assumed", flag, flags[flag], why) for flag, why in read_as]
        unread = _unread_substitutions(flags, split.subs, where, overrides or {})
        cfg = from_flags(flags, where, launch=launch, soft=soft, stray=stray, assumed=assumed, model=model, gpus=gpus,
                         hardware=hardware, label=Path(path).name)
        cfg.assumed += unread
        _exported_cublas(split.env, cfg)
        read_nccl_env(split.env, cfg.job, cfg.assumed)
        return cfg
    # a Megatron-DeepSpeed script: its DeepSpeed flags and ds_config JSON (megatron_deepspeed.py), its list flags as lists
    flags, stray = parse_flags(words, where, mds.MDS_NARGS)
    unread = _unread_substitutions(flags, split.subs, where, overrides or {})
    ds, *extra = mds.split_flags(flags, where, stack)
    cfg = from_flags(flags, where, launch=launch, soft=soft, stray=stray, assumed=assumed, model=model, gpus=gpus,
                     hardware=hardware, label=Path(path).name, model_fields=mds.model_fields(ds))
    cfg.assumed += unread
    mds.merge(cfg, ds, flags, where, Path(path), heredocs, hardware, tuple(extra), stack)
    read_nccl_env(split.env, cfg.job, cfg.assumed)
    return cfg


def _check_moe_mla(where, flags, spec, name, assumed, given: bool) -> None:
    """The MLA, shared-expert, dense-layer and MTP flags (what `planner export` writes) agree
    with the model; a disagreement is an error, or a note where --model was given (it wins)."""
    checks = []
    a, mo = spec.mla, spec.moe
    if "--multi-latent-attention" in flags:
        for flag, attr in (("--q-lora-rank", "q_lora_rank"), ("--kv-lora-rank", "kv_lora_rank"), ("--qk-head-dim", "qk_nope_head_dim"),
                           ("--qk-pos-emb-head-dim", "qk_rope_head_dim"), ("--v-head-dim", "v_head_dim")):
            if flag in flags:
                checks.append((flag, _int(where, flags, flag), getattr(a, attr, None) if a is not None else None))
        # --rope-type (absent: MLA's default yarn, transformer_config.py @d98e8a64 l. 3306) against rope_scaling
        rope = str(flags.get("--rope-type") or "yarn")
        checks.append(("--rope-type", rope, "yarn" if spec.rope_scaling == "yarn" else "rope"))
    elif a is not None:
        checks.append(("--multi-latent-attention (absent)", None, "MLA"))
    if "--moe-shared-expert-intermediate-size" in flags:
        width = (mo.shared_expert_ffn_hidden_size or mo.expert_ffn_hidden_size or spec.ffn_hidden_size) if mo else 0
        checks.append(("--moe-shared-expert-intermediate-size", _int(where, flags, "--moe-shared-expert-intermediate-size"),
                       mo.num_shared_experts * width if mo else None))
    if "--moe-layer-freq" in flags and mo is not None:
        from .megatron_model import eval_layer_pattern

        text = str(flags["--moe-layer-freq"]).strip().strip("\"'")
        want = [int(i >= mo.first_k_dense and i % mo.layer_freq == 0) for i in range(spec.num_layers)]
        if text.isdigit():
            checks.append(("--moe-layer-freq", text, str(mo.layer_freq) if not mo.first_k_dense else want))
        else:
            checks.append(("--moe-layer-freq", [int(x) for x in eval_layer_pattern(text, where, "--moe-layer-freq")], want))
    for flag, attr in (("--moe-router-enable-expert-bias", "expert_score_bias"), ("--moe-shared-expert-gate", "shared_expert_gate")):
        if flag in flags:
            checks.append((flag, True, bool(getattr(mo, attr, False)) if mo is not None else None))
    for flag, have, want in checks:
        if have != want:
            msg = f"{flag} {have} contradicts --model {name} ({want})"
            if given:
                assumed.append(listed("assumed", "model", name, f"--model replaces the arguments' {msg}"))
            else:
                raise PlannerError(f"{where}{msg}", "give --model, or fix the flag")


def parse_layout(text: str, pp: int, spec, where: str, notes: list | None = None) -> list[int]:
    """Transformer layers of each model chunk of a --pipeline-model-parallel-layout (Megatron-Core
    megatron/core/transformer/pipeline_parallel_layer_layout.py @d98e8a64 parse_str_to_list:
    commas are cosmetic, '(..)*n' and 'x*n' repeat, '|' ends a chunk; E embedding, L loss, t
    a transformer layer, m an MTP layer), checked as validate_layer_layout does: the entries a
    multiple of pp, the embedding first and the loss last once each, the model's layers and
    MTP layers. The planner prices the MTP modules on the last chunk, beside the loss: a layout
    that places them elsewhere (Megatron's "MTP standalone", validate_layer_layout) is noted
    in `notes`. The 'm' and 'L' at the end of the last chunk count in the split as the layers
    that chunk lacks (split_of: Job loss_layers_in_pipeline_split)."""
    s = text.replace(",", "")

    def repeat(m):  # bounded: a layout lists each layer once, `t*99999999999` is not expanded (issue 24)
        n = int(m.group(2)) if re.fullmatch(r"[0-9]{1,9}", m.group(2)) else MAX_EXPANSION + 1
        if len(m.group(1)) * n > MAX_EXPANSION:
            raise PlannerError(f"{where}--pipeline-model-parallel-layout {_short(text)}: {m.group(0)[:40]} repeats past "
                               f"{MAX_EXPANSION:,} entries", "one entry per layer of the model, e.g. 'Et*3|t*4|t*4|t*3L'")
        return m.group(1) * n

    for pat in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pat, repeat, s)
        if len(s) > MAX_EXPANSION:
            raise PlannerError(f"{where}--pipeline-model-parallel-layout {_short(text)} expands past {MAX_EXPANSION:,} "
                               "entries", "one entry per layer of the model")
    stages = s.split("|")
    bad = sorted(set(s) - set("ELtm|"))
    if bad:
        raise PlannerError(f"{where}--pipeline-model-parallel-layout {text!r}: unknown layer characters {bad}",
                           "valid: E (embedding), t (transformer layer), m (MTP layer), L (loss), | between chunks")
    if len(stages) % pp:
        raise PlannerError(f"{where}--pipeline-model-parallel-layout has {len(stages)} chunks, not a multiple of "
                           f"--pipeline-model-parallel-size {pp}", "one entry per model chunk, pp x vpp of them")
    flat = "".join(stages)
    if not (flat.startswith("E") and flat.endswith("L") and flat.count("E") == 1 and flat.count("L") == 1):
        raise PlannerError(f"{where}--pipeline-model-parallel-layout {text!r}: the embedding must come first and the loss "
                           "last, once each (validate_layer_layout)", "e.g. 'Et*3|t*4|t*4|t*3L'")
    if flat.count("t") != spec.num_layers or flat.count("m") != (spec.mtp_layers or 0):
        raise PlannerError(f"{where}--pipeline-model-parallel-layout holds {flat.count('t')} transformer and "
                           f"{flat.count('m')} MTP layers; the model has {spec.num_layers} and {spec.mtp_layers or 0}",
                           "one 't' per layer of --num-layers")
    if notes is not None and stages[-1].count("m") != flat.count("m"):
        notes.append(f"--pipeline-model-parallel-layout {_short(text)}: the MTP layers are not in the last chunk (Megatron's "
                     "MTP standalone); priced on the last pipeline stage, beside the loss, with the MTP stage's own embedding "
                     "copy and its gradient all-reduce")
    return [st.count("t") for st in stages]


def decoder_first_last(L: int, pp: int, vpp: int, first, last, where: str,
                       what: str = "--decoder-first/last-pipeline-num-layers",
                       src: str = "transformer_config.py __post_init__") -> list[int]:
    """Layers per pipeline rank with --decoder-first/last-pipeline-num-layers, as Megatron-Core
    checks them (transformer_config.py @d98e8a64 __post_init__: each > 0 and a multiple of vpp,
    the middle ranks' layers equal and, per rank, a multiple of vpp). `what` and `src` name the
    settings and the check in the reader's format (Megatron-Bridge's ConfigContainer fields
    model.num_layers_in_first/last_pipeline_stage, the same check at Megatron-Core 905c0e386)."""
    rest, mid_ranks = L, pp
    for n in (first, last):
        if n is not None:
            if n <= 0 or n % vpp:
                raise PlannerError(f"{where}{what} {n}: must be > 0 and a multiple of vpp {vpp}",
                                   f"Megatron refuses it ({src})")
            rest -= n
            mid_ranks -= 1
    if bool(rest) != bool(mid_ranks) or (mid_ranks and (rest % mid_ranks or (rest // mid_ranks) % vpp)):
        raise PlannerError(f"{where}{what} leave {rest} layers for {mid_ranks} middle "
                           f"ranks: not equal multiples of vpp {vpp}", f"Megatron refuses it ({src})")
    mid = rest // mid_ranks if mid_ranks else 0
    return [first if first is not None else mid] + [mid] * (pp - 2) + [last if last is not None else mid]


def _take_split(job: dict, e_l, placed: str, rule: str, unmodelled: list[str]) -> bool:
    """Set the job's counted ends from split_of's answer; where it is None, note that the
    flags' placement (`placed`) is priced as the planner's split instead."""
    if e_l is None:
        unmodelled.append(noted("unmodelled", placed, f"not a split the planner models ({rule}); priced as the "
                                "planner's split of pp x vpp", ruled=False))
        return False
    job.update(split_fields(*e_l))
    return True


def _hybrid_split(flags: dict, where: str, hyb: tuple, pp: int, L: int, job: dict, assumed: list[str],
                  unmodelled: list[str]) -> int:
    """The virtual pipeline size of a hybrid stack and its split, as Megatron-LM @d98e8a64 derives them from the
    pattern's '|' segments (megatron_model.py [9]: arguments.py l. 802-863, hybrid_layer_allocation.py
    select_pipeline_segment l. 372-493): the flags it asserts absent beside a pattern are refused; segments must be
    a multiple of pp (vpp = segments / pp where more), chunk j = vp x pp + pp_rank holds segment j, read into the
    planner's split (split_of); without pipes the layers split evenly (or by --decoder-first/last-pipeline-num-layers,
    read by the caller) with no virtual stages. L is the priced model's layer count."""
    flag, main, segments = hyb
    for f, line in (("--num-layers-per-virtual-pipeline-stage", "814-819"), ("--num-virtual-stages-per-pipeline-rank", "820-824"),
                    ("--pipeline-model-parallel-layout", "825-828"), ("--account-for-embedding-in-pipeline-split", "829-833"),
                    ("--account-for-loss-in-pipeline-split", "834-838")):
        if f in flags:
            raise PlannerError(f"{where}{f} with {flag}: Megatron-LM asserts it is absent (arguments.py @d98e8a64 l. {line}: "
                               "the pattern's '|' segments place the layers)", f"drop {f}; split the pattern with '|'")
    if len(segments) == 1:
        firsts = any(f in flags for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"))
        if pp > 1 and L % pp and not firsts:
            raise PlannerError(f"{where}{flag} without '|' splits {L} layers evenly over --pipeline-model-parallel-size "
                               f"{pp}, which does not divide them: Megatron-LM raises (hybrid_layer_allocation.py "
                               "@d98e8a64 l. 436-441)", "split the pattern with '|' into pp x N segments")
        if pp > 1:
            assumed.append(noted("assumed", f"{flag} without '|'", f"the {L} layers split evenly over pp {pp}, no "
                                 "virtual stages (hybrid_layer_allocation.py @d98e8a64 l. 385-456, deprecated by "
                                 "Megatron)"))
        return 1
    for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"):
        if f in flags:
            raise PlannerError(f"{where}{f} with a '|' in {flag}: Megatron-LM asserts it is absent (arguments.py "
                               "@d98e8a64 l. 802-813)", f"drop {f} (the segments place the layers)")
    if len(segments) % pp:
        raise PlannerError(f"{where}{flag} has {len(segments)} '|' segments, not a multiple of "
                           f"--pipeline-model-parallel-size {pp}: Megatron-LM asserts it (arguments.py @d98e8a64 l. 849-853)",
                           f"give {pp} x N segments")
    vpp = len(segments) // pp
    chunks = [len(x) for x in segments]
    if sum(chunks) != L:
        unmodelled.append(listed("unmodelled", f"{flag} segments", chunks, f"place {sum(chunks)} layers, the model "
                                 f"has {L}; priced as the planner's split of pp x vpp", show=str(chunks), spaced=True,
                                 ruled=False))
    else:
        e_l = split_of(L, pp, vpp, chunks=chunks)
        ends = uneven_ends(L, pp, vpp, chunks) if e_l is None else None
        if ends is not None:  # the segments place Megatron's uneven split (pipeline.py [14]): its first / last layers
            for key, n in zip(("first_stage_layers", "last_stage_layers"), ends):
                if n:
                    job[key] = n
            assumed.append(noted("assumed", f"{flag} segments", f"{chunks} layers on the model chunks, the uneven "
                                 f"split of first_stage_layers {ends[0] or 'none'}, last_stage_layers "
                                 f"{ends[1] or 'none'} (pipeline.chunk_layers [14]; export writes it back as these "
                                 "segments)"))
        else:
            _take_split(job, e_l, f"{flag} segments: {chunks} layers on the model chunks", "pipeline.chunk_layers",
                        unmodelled)
    return vpp


def uneven_ends(L: int, pp: int, vpp: int, chunks) -> tuple[int, int] | None:
    """(first_stage_layers, last_stage_layers), 0 for one left out, whose uneven split (pipeline.chunk_layers with
    first / last, Megatron's --decoder-first/last-pipeline-num-layers placement [14]) places the layers per model
    chunk as given (a hybrid pattern's '|' segments, which export._hybrid_args writes for such a plan); None where
    none does or pp < 2."""
    from ..pipeline import chunk_layers

    if pp < 2 or len(chunks) != pp * vpp:
        return None
    gpu = [sum(chunks[j] for j in range(s, pp * vpp, pp)) for s in range(pp)]
    for first, last in ((gpu[0], gpu[-1]), (gpu[0], 0), (0, gpu[-1])):
        if first + last and chunk_layers(L, pp, vpp, first=first, last=last) == list(chunks):
            return first, last
    return None


def split_of(L: int, pp: int, vpp: int, *, chunks):
    """(account_for_embedding, loss units) whose planner split (pipeline.chunk_layers) places the
    layers of each model chunk as `chunks` gives them; None if none does. The loss end counts as 0 or 1
    layer (--account-for-loss-in-pipeline-split), or, for a layout, as the N layers its last
    chunk lacks (Job loss_layers_in_pipeline_split: Megatron-Bridge's DeepSeek-V3 'Et*4|(t*4|)*14tmL'
    is 61 layers + 3 = 16 chunks of 4, the last one layer and the MTP module and the loss). (A per-GPU
    form, for --decoder-first/last-pipeline-num-layers, went with 6a2e3cd: those flags are the job's
    first_stage_layers / last_stage_layers, placed as Megatron-LM does.)"""
    from ..pipeline import chunk_layers

    more = [(e, n) for n in range(2, -(-L // (pp * vpp)) + 2) for e in (0, 1)]
    for e, l_ in [(0, 0), (1, 0), (0, 1), (1, 1)] + more:
        if (e or l_) and (L + e + l_) % (pp * vpp):
            continue  # the counted ends must divide into the chunks (plan.SPLIT_UNITS; transformer_config.py)
        if chunk_layers(L, pp, vpp, e, l_) == list(chunks):
            return e, l_
    return None


SHAPE_FLAGS = {
    "--num-layers": "num_layers", "--hidden-size": "hidden_size", "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads", "--vocab-size": "vocab_size",
    "--num-experts": "moe.num_experts", "--moe-router-topk": "moe.top_k", "--moe-ffn-hidden-size": "moe.expert_ffn_hidden_size",
}


POSITION_TYPES = {"learned_absolute": "learned", "rope": "rope", "yarn": "rope", "mrope": "rope", "none": "none",
                  "alibi": "alibi"}  # alibi: BigScience's Megatron-DeepSpeed only (read() refuses it elsewhere)
MLA_SHAPE = {"--kv-lora-rank": "mla.kv_lora_rank", "--q-lora-rank": "mla.q_lora_rank", "--qk-head-dim": "mla.qk_nope_head_dim",
             "--qk-pos-emb-head-dim": "mla.qk_rope_head_dim", "--v-head-dim": "mla.v_head_dim"}
CORE_ATTRS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_heads", "vocab_size", "dhead", "layer_windows",
              "moe.num_experts", "moe.top_k")


def repeated_mtp(flags: dict, where: str) -> bool:
    """Whether the flags' model is one multi-token-prediction module run --mtp-num-layers times: --mtp-use-repeated-layer
    with a count from 1 (TransformerConfig.mtp_use_repeated_layer: multi_token_prediction.py @d98e8a64 l. 1960-1970,
    1985-1996 build one module, l. 2048-2049 run it at every depth), and for a hybrid stack '/' MTP parts to build it
    from (megatron_model.hybrid_mtp_spec). ModelSpec.mtp_repeated_layer: its weights once, its runs each priced."""
    if "--mtp-use-repeated-layer" not in flags or not _int(where, flags, "--mtp-num-layers"):
        return False
    return not any(f in flags for f in HYBRID_FLAGS) or bool(hybrid_mtp(flags, where)[1])


def _flags_model(flags: dict, shape: dict, where: str, tp: int, label: str, assumed: list[str],
                 model_fields: dict | None = None) -> tuple[str, str, bool]:
    """(the job's model, the rule as text, whether the flags define it): the one catalog model
    whose core shape equals the flags' and that no other shape flag contradicts, else the
    model the flags define (megatron_model.py), written as a content-addressed model YAML
    (trainers.write_model_file)."""
    from ..catalog import format_validation_error
    from ..schema import ModelSpec
    from pydantic import ValidationError

    core = {k: v for k, v in shape.items() if v[0] in CORE_ATTRS}
    have = {a for a, _ in core.values()}
    why = None
    if (not model_fields and not any(f in flags for f in NOT_BUILT) and not any(f in flags for f in HYBRID_FLAGS)
            and {"num_layers", "hidden_size", "num_attention_heads"} <= have):
        hits = catalog_models_with_shape(core)
        if len(hits) == 1:
            try:
                check_model_shape(where, hits[0], shape)
            except PlannerError as e:
                why = f"the one catalog model of its core shape, {hits[0]}, differs ({e.message.removeprefix(where)})"
            else:
                shown = ", ".join(f"{a}={_show(v)}" for a, v in core.values())
                return hits[0], listed("assumed", "model", hits[0], "the one catalog model with the shape of the "
                                       f"Megatron arguments ({shown})"), False
        else:
            why = "no catalog model has their shape" if not hits else f"{len(hits)} catalog models ({', '.join(hits)}) have their shape"
    spec = {**model_spec_from_flags(flags, where, tp, label, assumed), **(model_fields or {})}
    try:
        ModelSpec.model_validate(spec)
    except ValidationError as e:
        raise format_validation_error(e, f"{where}the model the Megatron flags define") from None
    path = write_model_file(spec, "megatron-flags")
    return path, listed("assumed", "model", path, "from the Megatron flags" + (f" ({why})" if why else "") +
                        "; every setting they leave out is Megatron's default (listed here)"), True


def _cp_comm_type(flags: dict, where: str, cp: int):
    """Megatron's --cp-comm-type (arguments.py @d98e8a64 l. 3221-3226, nargs '+': one value, or one
    per layer, transformer_layer.py l. 378-386) as the job's cp_comm_type (planner/cp_comm_type.py):
    one value, or a list of one value; a list of several values (per-layer variants) is refused, as
    is a spelling Transformer Engine does not run (attn_forward_func_with_cp @4329ff84 accepts p2p,
    all_gather, a2a, a2a+p2p and raises 'Unsupported communication type' otherwise). None: absent."""
    vals = words_of(flags.get("--cp-comm-type"), strip="'\"[],")
    if not vals:
        return None
    if len(set(vals)) > 1:
        raise PlannerError(f"{where}--cp-comm-type {' '.join(vals)}: per-layer context-parallel variants are not priced "
                           "(the planner prices one variant for every layer)",
                           "give one value (--cp-comm-type p2p | all_gather | a2a)")
    val = vals[0]
    if val not in ("p2p", "all_gather", "a2a", "a2a+p2p"):
        raise PlannerError(f"{where}--cp-comm-type {val}: Transformer Engine runs p2p, all_gather, a2a or a2a+p2p "
                           "(context_parallel.py @4329ff84 attn_forward_func_with_cp raises 'Unsupported communication "
                           "type' for any other)", "use --cp-comm-type all_gather" if val.replace("_", "") == "allgather"
                           else "use one of p2p, all_gather, a2a")
    return val


def _hierarchical_sizes(flags: dict, where: str):
    """--hierarchical-context-parallel-sizes (arguments.py @d98e8a64, nargs '+' of ints; an argument
    file may quote them as one word "2 2") as a list of ints, or None where absent."""
    raw = flags.get("--hierarchical-context-parallel-sizes")
    if raw is None or raw is True:
        return None
    vals = words_of(raw, strip="'\"[]", commas=True)
    words = " ".join(vals)
    try:
        sizes = [int(v) for v in vals]
    except ValueError:
        raise PlannerError(f"{where}--hierarchical-context-parallel-sizes {words}: not whole numbers",
                           "e.g. --hierarchical-context-parallel-sizes 2 2") from None
    if not sizes or any(v < 1 for v in sizes):
        raise PlannerError(f"{where}--hierarchical-context-parallel-sizes {words}: positive sizes needed",
                           "e.g. --hierarchical-context-parallel-sizes 2 2")
    return sizes


def _rope_scaling(flags: dict, shape: dict, ignored: list[str], where: str = "") -> None:
    """--use-rope-scaling -> the model's llama3 rope_scaling at Megatron's numbers (trainers.MEGATRON_LLAMA3_ROPE:
    factor 8, 1, 4, 8192, what _apply_scaling fixes), compared like the shape (ModelSpec.llama3_rope_scaling);
    its absence on a rotary model is a model without it (store_true, arguments.py l. 2424), so a Llama 3.1
    model (llama3-405b) is not matched to a script that trains plain RoPE. Where Megatron builds no
    RotaryEmbedding the flag is listed as ignored."""
    on = "--use-rope-scaling" in flags
    if rope_scaled(flags):
        shape["--use-rope-scaling" if on else "(no --use-rope-scaling)"] = (
            "llama3_rope_scaling", MEGATRON_LLAMA3_ROPE if on else None)
    elif on:
        ignored.append(listed("ignored", "--use-rope-scaling", True,
                              "no RotaryEmbedding it scales: Megatron builds one "
                              "for --position-embedding-type rope without MLA only, gpt_model.py @d98e8a64 l. 183-194"))
    # linear scaling: --rotary-seq-len-interpolation-factor divides RotaryEmbedding's positions (rotary_pos_embedding.py
    # @d98e8a64 l. 135-136), the same rotary as --use-rope-scaling's; absent: none (default None, arguments.py l. 2422)
    interp = "--rotary-seq-len-interpolation-factor"
    if rope_scaled(flags):
        if on and interp in flags:
            raise PlannerError(f"{where}--use-rope-scaling with {interp}: two rotary scalings at once, which no "
                               "model the planner reads has (ModelSpec.rope_scaling is one)", "drop one of the two")
        shape[interp if interp in flags else f"(no {interp})"] = (
            "linear_rope_scaling", float(_int(where, flags, interp)) if interp in flags else None)
    # YaRN without MLA: --position-embedding-type yarn and its numbers (megatron_model.megatron_yarn), compared with
    # the model's rope_yarn_params and rope_attention_factor; a plain-rope script is a model without it
    if yarn_built(flags):
        key, attention = megatron_yarn(flags, where)
        shape["--position-embedding-type yarn (--rotary-scaling-factor, --yarn-*, --mscale*)"] = (
            "yarn_rope_scaling", key + (round(attention, 12),))
    elif rope_scaled(flags):
        shape["(--position-embedding-type rope: no yarn)"] = ("yarn_rope_scaling", None)
    # the rotary base: --rotary-base (absent: 10000) against the model's rope_theta, where Megatron builds a rotary
    if rotary_built(flags):
        shape["--rotary-base" if "--rotary-base" in flags else "(no --rotary-base: 10000)"] = (
            "rope_theta", megatron_rotary_base(flags, where))
    # MLA's YaRN: --rotary-scaling-factor, --mscale, --mscale-all-dim replace MLATransformerConfig's (its factor 40
    # included: argument_utils.py @d98e8a64 l. 301-303), the rest fixed (megatron_model.megatron_mla_yarn)
    if mla_yarn_built(flags):
        shape["--multi-latent-attention yarn (--rotary-scaling-factor, --mscale, --mscale-all-dim)"] = (
            "mla_yarn_rope_scaling", megatron_mla_yarn(flags, where))


def from_flags(flags: dict, where: str, *, launch=(), soft=False, stray=(), assumed=None, model=None, gpus=None,
               hardware=None, label: str = "megatron-args", model_fields: dict | None = None) -> TrainerConfig:
    """model_fields: ModelSpec fields a Megatron-DeepSpeed fork's own flags set on the model the flags define
    (megatron_deepspeed.split_flags: BigScience's --embed-layernorm); with them no catalog model is matched."""
    assumed = [] if assumed is None else assumed
    unmodelled: list[str] = []
    ignored: list[str] = []
    not_modelled: list[str] = []
    by_reason: dict = {}
    read_rope = ({*YARN_FLAGS, *YARN_ROUND} if yarn_built(flags) else set(MLA_YARN_FLAGS) if mla_yarn_built(flags)
                 else set()) | (
        {"--rotary-seq-len-interpolation-factor"} if rope_scaled(flags) else set()) | (
        {"--rotary-base"} if rotary_built(flags) else set())  # _rope_scaling reads them
    if flags.get("--attention-backend") == "local" or flags.get("--transformer-impl") == "local":
        read_rope = read_rope | set(SOFTMAX_FP32_FLAGS)  # Megatron-Core's own core attention: _fusions reads them
    hybrid = any(f in flags for f in HYBRID_FLAGS)
    if hybrid:  # the Mamba mixer's shape (megatron_model.hybrid_spec); the TE hybrid stack spec, the layers priced
        read_rope = read_rope | set(MAMBA_FLAGS) | set(GDN_FLAGS) | (
            {"--spec"} if words_of(flags.get("--spec"), strip="'\"") == HYBRID_TE_SPEC else set())
    if model is None and repeated_mtp(flags, where):  # the flags' model: one MTP module run --mtp-num-layers times
        read_rope = read_rope | {"--mtp-use-repeated-layer"}
        model_fields = {**(model_fields or {}), "mtp_repeated_layer": True}  # no catalog model has it (_flags_model)
    for k, v in flags.items():
        if k in BOOL_FLAGS or k in VALUE_FLAGS or k in BOOL_READ or k in read_rope:
            continue
        kind, why = classify_unread(k, v)
        by_reason.setdefault((kind, why), []).append((k, v))
    for (kind, why), pairs in by_reason.items():
        (ignored if kind == "ignored" else not_modelled).append(listed_all(kind, pairs, why))
    not_modelled += [noted("not_modelled", w, "a word that is no flag's value") for w in stray]
    job: dict = {"stack": "megatron"}
    tp = _int(where, flags, "--tensor-model-parallel-size", 1)
    pp = _int(where, flags, "--pipeline-model-parallel-size", 1)
    cp = _int(where, flags, "--context-parallel-size", 1)
    job.update(tp=tp, pp=pp, cp=cp)
    cct = _cp_comm_type(flags, where, cp)
    hcp = _hierarchical_sizes(flags, where)
    if cct is not None and cp > 1:
        job["cp_comm_type"] = cct
        if cct == "a2a+p2p" and hcp is not None:  # the a2a group's and the ring's ranks (planner/cp_comm_type.py)
            job["hierarchical_cp_sizes"] = hcp
    elif cct is not None:
        ignored.append(listed("ignored", "--cp-comm-type", f"{cct}", "context-parallel-size 1: no context parallelism, "
                              "the layers ignore it, transformer_layer.py @d98e8a64 l. 378"))
    if hcp is not None and "hierarchical_cp_sizes" not in job:
        ignored.append(listed("ignored", "--hierarchical-context-parallel-sizes", " ".join(map(str, hcp)), "read by "
                              "--cp-comm-type a2a+p2p only; arguments.py @d98e8a64 l. 580-582 asserts their "
                              "product is cp"))
    ep = _int(where, flags, "--expert-model-parallel-size", 1)  # Megatron-Core MoE (arguments.py _add_moe_args)
    if ep > 1:
        job["ep"] = ep
    if "--overlap-moe-expert-parallel-comm" in flags:  # the combined 1F1B schedule (planner/moe.py [8])
        job["ep_comm_overlap"] = True
    if "--moe-shared-expert-overlap" in flags:  # the shared experts beside the all-to-alls (step.py [38])
        if "--moe-shared-expert-intermediate-size" in flags:
            job["moe_shared_expert_overlap"] = True
        else:  # "Only effective when moe-shared-expert-intermediate-size is set" (transformer_config.py l. 717-721)
            ignored.append(listed("ignored", "--moe-shared-expert-overlap", True, "no shared experts "
                                  "(--moe-shared-expert-intermediate-size unset): transformer_config.py @d98e8a64 "
                                  "l. 717-721, only effective with them"))
    _read_wgrad_deferral(where, flags, job)
    _read_empty_cache(where, flags, job)
    _deterministic(flags, job)
    if "--cross-entropy-loss-fusion" in flags:  # the native fused loss (Megatron refuses the TE one, arguments.py)
        job["cross_entropy_fusion"] = True
    for flag, field in MOE_FUSION_FLAGS.items():  # TE's fused MoE kernels (planner/layers/moe.py [7] [8])
        if flag in flags and "--num-experts" not in flags:  # a dense model builds no MoE layer (as _router_padding)
            ignored.append(listed("ignored", flag, flags[flag],
                                  "no --num-experts: a dense model builds no MoE layer, the "
                                  "flag fuses nothing"))
        elif flag in flags:
            job[field] = flags[flag] is True or str(flags[flag]).lower() in ("true", "1")
    if "--moe-grouped-gemm" in flags and "--num-experts" not in flags:
        ignored.append(listed("ignored", "--moe-grouped-gemm", flags["--moe-grouped-gemm"], "no --num-experts: a dense "
                              "model builds no experts to group"))
    elif "--moe-grouped-gemm" in flags:  # TE's GroupedLinear: its multi-stream workspaces (planner/memory.py [12])
        job["moe_grouped_gemm"] = True
    if "--fp8-param-gather" in flags:  # fp8 weights (planner/memory.py [11]; under a mode that runs it off: _mode_settings)
        job["fp8_param_gather"] = True
    if "--fp4-param-gather" in flags:  # NVFP4 weights (planner/memory.py [11], step.py [12])
        job["fp4_param_gather"] = True

    # ---- model: shape flags against --model, or the one catalog model with that shape
    shape: dict[str, tuple[str, object]] = {}
    for flag, attr in SHAPE_FLAGS.items():
        if flag in flags:
            shape[flag] = (attr, _int(where, flags, flag))
    hyb_shape = hybrid_pattern(flags, where)
    if hyb_shape is not None:  # the pattern's layer count replaces --num-layers (arguments.py @d98e8a64 l. 787-797)
        shape.pop("--num-layers", None)
        shape[f"{hyb_shape[0]} (its layer count)"] = ("num_layers", len(hyb_shape[1].replace("|", "")))
    h = shape.get("--hidden-size", (None, None))[1]
    if h is not None and "--ffn-hidden-size" not in flags:  # validate_args' default [1]
        ffn = int((4 * h * 2 / 3) / 64) * 64 if "--swiglu" in flags else 4 * h
        shape["--ffn-hidden-size (default from --hidden-size" + (" and --swiglu)" if "--swiglu" in flags else ")")] = ("ffn_hidden_size", ffn)
    heads = shape.get("--num-attention-heads", (None, None))[1]
    if "--group-query-attention" in flags:
        shape["--num-query-groups"] = ("kv_heads", _int(where, flags, "--num-query-groups", 1))
    elif heads is not None:
        shape["(no --group-query-attention: MHA)"] = ("kv_heads", heads)
    if "--kv-channels" in flags:
        shape["--kv-channels"] = ("dhead", _int(where, flags, "--kv-channels"))
    # the MLP's gate, the tied output layer and the linear biases: each flag's absence is Megatron's default, compared
    # like its presence (as --qk-layernorm's below): a plain MLP without --swiglu / --quick-geglu (gated_linear_unit
    # default False, transformer_config.py @d98e8a64 l. 221, set only by them, argument_utils.py l. 314-326), tied
    # embeddings without --untie-embeddings-and-output-weights (share_embeddings_and_output_weights = not untie,
    # gpt_builders.py l. 96), linear biases without --disable-bias-linear (add_bias_linear default True,
    # transformer_config.py l. 212): the model the flags define
    # has them so (megatron_model.py l. 803, 839, 847); before 2026-12-07 only the flags' presence was compared, so a
    # script without --swiglu read as Llama 3 8B's gated MLP (tests/ignored_keys.py found it)
    if "--swiglu" in flags or "--quick-geglu" in flags:
        gate = "--swiglu" if "--swiglu" in flags else "--quick-geglu"
        shape[gate] = ("gated_mlp", True)
    else:
        shape["(no --swiglu: a plain MLP)"] = ("gated_mlp", False)
    if "--untie-embeddings-and-output-weights" not in flags:
        shape["(no --untie-embeddings-and-output-weights: tied)"] = ("tied_embeddings", True)
    if "--disable-bias-linear" not in flags:
        shape["(no --disable-bias-linear: linear biases)"] = ("linear_bias", True)
    if "--normalization" in flags:
        norm = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}.get(flags["--normalization"])
        if norm is None:
            raise PlannerError(f"{where}--normalization {flags['--normalization']!r} is not modelled", "valid: LayerNorm, RMSNorm")
        shape["--normalization"] = ("norm", norm)
    if "--untie-embeddings-and-output-weights" in flags:
        shape["--untie-embeddings-and-output-weights"] = ("tied_embeddings", False)
    if "--disable-bias-linear" in flags:
        shape["--disable-bias-linear"] = ("linear_bias", False)
    elif "--add-bias-linear" in flags:
        shape["--add-bias-linear"] = ("linear_bias", True)
    if "--use-rotary-position-embeddings" in flags and "--position-embedding-type" not in flags:
        shape["--use-rotary-position-embeddings"] = ("position_embedding", "rope")  # the older spelling of rope
    if "--position-embedding-type" in flags:
        pos = POSITION_TYPES.get(flags["--position-embedding-type"])
        if pos is None:
            raise PlannerError(f"{where}--position-embedding-type {flags['--position-embedding-type']!r} is not modelled",
                               "valid: " + ", ".join(POSITION_TYPES))
        shape["--position-embedding-type"] = ("position_embedding", pos)
    # query/key norms: Megatron's qk_layernorm defaults to False (transformer_config.py @d98e8a64 l. 259, the
    # --qk-layernorm flag arguments.py's ArgumentGroupFactory(TransformerConfig) builds, l. 2373), so
    # the flag's absence is a model without them, compared like the shape (ModelSpec.qk_norm). With
    # --multi-latent-attention the flag is the latents' norms instead (gpt_layer_specs.py @d98e8a64 l. 240-251:
    # the q and kv up-projections become LayerNormLinear), which the MLA block always prices: not compared
    if "--multi-latent-attention" not in flags:
        shape["--qk-layernorm" if "--qk-layernorm" in flags else "(no --qk-layernorm)"] = ("qk_norm", "--qk-layernorm" in flags)
    _rope_scaling(flags, shape, ignored, where)
    drops = [_float(where, flags, f) for f in ("--attention-dropout", "--hidden-dropout") if f in flags]
    if drops:
        shape["--attention-dropout/--hidden-dropout"] = ("dropout", any(d > 0 for d in drops))
    if "--multi-latent-attention" in flags:
        for flag, attr in MLA_SHAPE.items():
            if flag in flags:
                shape[flag] = (attr, _int(where, flags, flag))
    if "--num-layers" in flags:  # sliding-window layers (megatron_model.py [8]), compared like the shape
        windows = layer_windows(flags, where, _int(where, flags, "--num-layers"), assumed)
        if windows is not None:
            shape["--window-size/--window-attn-skip-freq"] = ("layer_windows", windows)
    absent_drop = [f for f in ("--attention-dropout", "--hidden-dropout") if f not in flags]
    from_flags_model = False
    from ..catalog import load_model

    # with --model, the --vocab-size of a tokenizer that reads it (NullTokenizer, TikTokenizer: VOCAB_SIZE_TOKENIZERS)
    # is the run's tokenizer, a job setting: Megatron pads it, not the model's vocab_size, to the embedding's rows
    # (build_tokenizer.py @d98e8a64 l. 96-114, 133-152; Megatron-DeepSpeed @f4157bea tokenizer.py l. 38-41, 52, 58-71:
    # the same rule, its NullTokenizer one token more, megatron_deepspeed.py), so it is no shape --model replaces:
    # catalog_vocab_rows pads it (the job's padded_vocab_size). Below the model's tokens it would leave tokens without
    # a row (plan.with_padded_vocab refuses that): compared as the shape, which --model replaces, with a note
    tokenizer_size = None
    if model is not None and "--vocab-size" in shape and flags.get("--tokenizer-type") in VOCAB_SIZE_TOKENIZERS:
        m = load_model(model)
        if shape["--vocab-size"][1] >= (m.tokenizer_vocab_size or m.vocab_size):
            tokenizer_size = shape.pop("--vocab-size")[1]
    if model is not None:
        try:
            check_model_shape(where, model, shape)
        except PlannerError as e:  # --model beats the file's shape flags, with a note (issue 22)
            assumed.append(listed("assumed", "model", model,
                                  f"--model replaces the arguments' shape ({e.message.removeprefix(where)})"))
        if hyb_shape is not None:
            assumed.append(noted("assumed", hyb_shape[0],
                                 "--model's layer kinds are priced (the pattern's symbols are not compared "
                                 "with them, nor its '/' MTP parts with --model's MTP modules; its layer count is, and its '|' "
                                 "segments place the split)"))
        job["model"] = model
    else:
        job["model"], rule, from_flags_model = _flags_model(flags, shape, where, tp, label, assumed, model_fields)
        assumed.append(rule)
    spec = load_model(job["model"])
    if not from_flags_model:
        _check_moe_mla(where, flags, spec, job["model"], assumed, model is not None)
        tok = flags.get("--tokenizer-type")
        if "--vocab-size" in flags and tok is not None and tok not in VOCAB_SIZE_TOKENIZERS:
            # a tokenizer that reads its files, not --vocab-size (build_tokenizer.py @d98e8a64 l. 58-66, 96-102): the
            # flag stands for its size, as the flags' own model takes it (megatron_model.padded_vocab), said so here
            # too (before 2026-12-07 a catalog model matched with it said nothing of the tokenizer: tests/ignored_keys.py)
            assumed.append(listed("assumed", "--vocab-size", flags["--vocab-size"], f"taken as the size of "
                                  f"--tokenizer-type {tok}, whose files the planner does not read (Megatron hands "
                                  "--vocab-size to NullTokenizer and TikTokenizer only)"))
        # the embedding's rows as Megatron builds them for a catalog model (the model the flags define has them
        # in its vocab_size already: megatron_model.padded_vocab): the job's padded_vocab_size (plan.with_padded_vocab)
        rows, note = catalog_vocab_rows(flags, job["model"], spec.vocab_size, tp, where,
                                         None if tokenizer_size == spec.vocab_size else tokenizer_size)
        if rows is not None:  # rows equal to the model's: nothing to list
            job["padded_vocab_size"] = rows
            assumed.append(note)
        elif stack_pads_other(spec.vocab_size, tp):  # the model's own rows (--no-pad-vocab-size, a divisor that pads
            job["padded_vocab_size"] = spec.vocab_size  # none), where the stack's padding would build others: pinned
            assumed.append(note)
    elif stack_pads_other(spec.vocab_size, tp):  # the flags' model holds the rows Megatron builds (padded_vocab) in its
        job["padded_vocab_size"] = spec.vocab_size  # vocab_size; pinned where the stack's padding would pad them further
        assumed.append(listed("assumed", "padded_vocab_size", spec.vocab_size, "the arguments' rows "
                              "(--padded-vocab-size or --no-pad-vocab-size), which the stack's padding (stack_db "
                              "vocab_padding) would not build", show=f"{spec.vocab_size:,}"))
    if "--mtp-num-layers" in flags and hybrid and not hybrid_mtp(flags, where)[1]:  # no '/' MTP part: no MTP module
        _int(where, flags, "--mtp-num-layers")
        job["mtp_layers"] = 0
        assumed.append(listed("assumed", "mtp_layers", 0,
                              "--mtp-num-layers with a hybrid pattern without '/' MTP parts: HybridModel builds "
                              "MTP layers only from the pattern's '/' parts (hybrid_model.py @d98e8a64 l. 204-233; arguments.py "
                              "l. 897-907 warns)"))
    elif "--mtp-num-layers" in flags:  # a training setting of the job (multi_token_prediction.py: the last stage's modules;
        job["mtp_layers"] = _int(where, flags, "--mtp-num-layers")  # a hybrid's '/' parts: megatron_model.hybrid_mtp_spec)
    elif spec.mtp_layers:  # transformer_config.py @d98e8a64 l. 68: mtp_num_layers default None (no MTP)
        job["mtp_layers"] = 0
        assumed.append(listed("assumed", "mtp_layers", 0,
                              "--mtp-num-layers absent (Megatron trains no MTP module; the model's entry "
                              f"has {spec.mtp_layers})"))
    from ..plan import with_mtp

    spec = with_mtp(spec, job.get("mtp_layers"))
    if absent_drop and not spec.dropout and not from_flags_model:
        assumed.append(noted("assumed", f"dropout as the model ({job['model']}: none)", f"{', '.join(absent_drop)} "
                             "absent, though Megatron's default is 0.1 (arguments.py); dropout masks would add 1 B per "
                             "hidden element"))
    a, k, L = spec.num_attention_heads, spec.kv_heads, spec.num_layers
    if a % tp:
        raise PlannerError(f"{where}--tensor-model-parallel-size {tp} does not divide --num-attention-heads {a}",
                           f"choose a tensor-parallel size that divides {a}")
    if k % tp and tp % k:
        raise PlannerError(f"{where}--tensor-model-parallel-size {tp} and --num-query-groups {k} do not divide one another",
                           "Megatron splits the query groups across TP ranks")

    # ---- virtual pipeline stages
    vps = _int(where, flags, "--num-virtual-stages-per-pipeline-rank")
    lpv = _int(where, flags, "--num-layers-per-virtual-pipeline-stage")
    vpp = 1
    uneven_flags = [f for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers") if f in flags]
    if lpv is not None and vps is None and uneven_flags:  # asserted before the layers per stage are divided
        raise PlannerError(f"{where}{' and '.join(uneven_flags)} with --num-layers-per-virtual-pipeline-stage",
                           "Megatron-LM asks for --num-virtual-stages-per-pipeline-rank with an uneven split "
                           "(arguments.py @d98e8a64 validate_args l. 954-956)")
    if lpv is not None:
        if L % (pp * lpv):
            raise PlannerError(f"{where}--num-layers-per-virtual-pipeline-stage {lpv} x --pipeline-model-parallel-size {pp} "
                               f"does not divide --num-layers {L}", "layers = pp x vpp x layers per virtual stage")
        vpp = L // (pp * lpv)
    if vps is not None:
        if lpv is not None and vps != vpp:
            raise PlannerError(f"{where}--num-virtual-stages-per-pipeline-rank {vps} contradicts "
                               f"--num-layers-per-virtual-pipeline-stage {lpv} ({L} layers / pp {pp} / {lpv} = {vpp})",
                               "give one of the two")
        vpp = vps
    # ---- the pipeline split (Megatron-Core's uneven placements, read back into the planner's)
    split_unmodelled: list[str] = []
    hyb = hybrid_pattern(flags, where)
    if hyb is not None:  # a hybrid stack's segments (megatron_model.py [9]): vpp and the split from its '|'
        vpp = _hybrid_split(flags, where, hyb, pp, L, job, assumed, split_unmodelled)
    layout = flags.get("--pipeline-model-parallel-layout")
    if layout is not None:
        if vps is not None or lpv is not None:
            raise PlannerError(f"{where}--pipeline-model-parallel-layout with --num-virtual-stages-per-pipeline-rank or "
                               "--num-layers-per-virtual-pipeline-stage", "Megatron allows one of them (arguments.py validate_args)")
        chunks = parse_layout(str(layout), pp, spec, where, split_unmodelled)
        vpp = len(chunks) // pp
    firsts = [_int(where, flags, f) for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")]
    if any(x is not None for x in firsts):
        if layout is not None or any(f in flags for f in ("--account-for-embedding-in-pipeline-split",
                                                           "--account-for-loss-in-pipeline-split")):
            raise PlannerError(f"{where}--decoder-first/last-pipeline-num-layers with --pipeline-model-parallel-layout or "
                               "--account-for-*-in-pipeline-split", "Megatron refuses them together (transformer_config.py "
                               "__post_init__)")
        if pp > 1:
            decoder_first_last(L, pp, vpp, *firsts, where)  # Megatron's own checks, in its words
        # the job's first_stage_layers / last_stage_layers: Megatron's placement as it runs (pipeline.py [14]); at pp 1
        # the job's rules refuse them (plan.uneven_split_error)
        for key, n in zip(("first_stage_layers", "last_stage_layers"), firsts):
            if n is not None:
                job[key] = n
    if layout is not None and pp > 1:
        _take_split(job, split_of(L, pp, vpp, chunks=chunks),
                    f"--pipeline-model-parallel-layout {layout}: {chunks} layers on the model chunks", "pipeline.chunk_layers",
                    split_unmodelled)
    if vpp > 1:
        job["vpp"] = vpp
        job["schedule"] = "interleaved"
    # N contiguous micro-batches per virtual stage (model_parallel_config.py @d98e8a64 l. 431-449,
    # default pp; read by the interleaved schedule only): the job's microbatch_group
    group = _int(where, flags, "--microbatch-group-size-per-virtual-pipeline-stage")
    if group is not None:
        job["microbatch_group"] = group
    _p2p_overlap(flags, vpp, job, assumed)
    _cuda_graphs(where, flags, job, assumed)

    # ---- GPUs
    file_gpus = _launcher_gpus(list(launch), where)
    # the launcher's node count comes from the scheduler: --gpus replaces it, with a note (issue 22)
    job["gpus"] = resolve_gpus(where, file_gpus, "torchrun --nproc_per_node x --nnodes", gpus, soft=True, assumed=assumed)
    if job["gpus"] is None:
        raise PlannerError(f"{where}no GPU count: the arguments have no torchrun --nproc_per_node/--nnodes", "pass --gpus N")

    # ---- batch, sequence
    for flag, key in (("--micro-batch-size", "micro_batch"), ("--global-batch-size", "global_batch"), ("--seq-length", "seq_len")):
        if flag in flags:
            job[key] = _int(where, flags, flag)
    if "micro_batch" not in job:
        job["micro_batch"] = 1
        assumed.append(listed("assumed", "micro_batch", 1,
                              "--micro-batch-size absent (Megatron requires it; 1 assumed)"))
    schedule = flags.get("--step-batch-size-schedule")
    if schedule is not None:  # "tokens:batch ..." (planner/batch_ramp.py): the job's batch ramp, priced phase by phase
        if "--decrease-batch-size-if-needed" in flags:
            raise PlannerError(f"{where}--step-batch-size-schedule with --decrease-batch-size-if-needed: Megatron-LM refuses "
                               "the two together (num_microbatches_calculator.py @d98e8a64 _build_num_microbatches_calculator)",
                               "drop --decrease-batch-size-if-needed")
        phases = parse_megatron(schedule, where)
        job["batch_size_schedule"] = [{"from_tokens": float(t), "global_batch": b} for t, b in phases]
        final = phases[-1][1]
        if "global_batch" in job and job["global_batch"] != final:
            raise PlannerError(f"{where}--global-batch-size {job['global_batch']} beside --step-batch-size-schedule, whose "
                               f"last batch is {final}: Megatron-LM refuses the two together (arguments.py @d98e8a64 "
                               "l. 698-701)", "drop --global-batch-size (the schedule gives the batch)")
        if "global_batch" in job:
            assumed.append(listed("assumed", "global_batch", job['global_batch'],
                                  "--global-batch-size beside --step-batch-size-schedule, its "
                                  "last batch (Megatron-LM @d98e8a64 refuses the two together: arguments.py validate_args)"))
        else:
            job["global_batch"] = final
            assumed.append(listed("assumed", "global_batch", final, "the last batch of --step-batch-size-schedule"))
    if "--max-position-embeddings" in flags and not from_flags_model:  # the flags' model reads it (its position table)
        ignored.append(listed("ignored", "--max-position-embeddings", flags["--max-position-embeddings"],
                              "the model file's position table is priced"))
    if "global_batch" not in job:
        assumed.append(noted("assumed", "global_batch",
                             "--global-batch-size absent, Megatron's default = micro-batch x dp"))
        dp = job["gpus"] // max(1, tp * pp * cp)
        job["global_batch"] = job["micro_batch"] * dp
    if "seq_len" in job:
        seq = job["seq_len"]
    else:  # the plan's default training length (trainer configs take no recipe: plan._seq_len)
        from ..plan import default_seq_len

        seq = default_seq_len(spec)
    if "--rampup-batch-size" in flags:
        ignored.append(_rampup_ignored(flags, job, seq))
    if "--train-iters" in flags and "batch_size_schedule" in job:  # each step at its phase's batch (batch_ramp)
        job["tokens"] = float(iters_samples([(p["from_tokens"], p["global_batch"]) for p in job["batch_size_schedule"]],
                                            seq, _int(where, flags, "--train-iters")) * seq)
        assumed.append(listed("assumed", "tokens", job["tokens"], "--train-iters steps at "
                              "--step-batch-size-schedule's batches x sequence length", show=f"{job['tokens']:.6g}"))
    elif "--train-iters" in flags:
        job["tokens"] = float(_int(where, flags, "--train-iters") * job["global_batch"] * seq)
        assumed.append(listed("assumed", "tokens", job["tokens"], "--train-iters x global batch x sequence length",
                              show=f"{job['tokens']:.6g}"))
    elif "--train-samples" in flags:
        job["tokens"] = float(_int(where, flags, "--train-samples") * seq)
        assumed.append(listed("assumed", "tokens", job["tokens"], "--train-samples x sequence length",
                              show=f"{job['tokens']:.6g}"))

    # ---- sharding (the stack's mode, stack_db megatron runs.sharding), SP, recompute
    if "--use-torch-fsdp2" in flags and "--use-megatron-fsdp" in flags:
        # validate_args runs --use-torch-fsdp2's asserts (no distributed optimizer, l. 1031-1039) before
        # --use-megatron-fsdp turns the distributed optimizer on (v1, the default, l. 1118-1134), and get_model then
        # wraps the model in Torch-FSDP2 (training.py l. 2484-2488) under that optimizer: no plan either mode prices
        raise PlannerError(f"{where}--use-torch-fsdp2 with --use-megatron-fsdp: two FSDP implementations; Megatron-LM "
                           "@d98e8a64 wraps the model in Torch-FSDP2 (megatron/training/training.py l. 2484-2488) while "
                           "--use-megatron-fsdp turns on the distributed optimizer (arguments.py l. 1118-1134), which "
                           "--use-torch-fsdp2's own assert (l. 1038-1039) forbids but checks before it is set",
                           "give one of --use-torch-fsdp2 and --use-megatron-fsdp")
    if "--use-torch-fsdp2" in flags and "--use-distributed-optimizer" in flags:
        raise PlannerError(f"{where}--use-torch-fsdp2 with --use-distributed-optimizer: Megatron-LM asserts "
                           "\"--use-torch-fsdp2 is not supported with MCore's distributed optimizer\" (megatron/training/"
                           "arguments.py @d98e8a64 l. 1038-1039)", "give one of --use-torch-fsdp2 and "
                           "--use-distributed-optimizer")
    if "--use-torch-fsdp2" in flags:
        job["sharding_mode"] = "torch_fsdp2"
    elif "--use-megatron-fsdp" in flags:
        strategy = flags.get("--data-parallel-sharding-strategy", "optim_grads_params")  # arguments.py default
        instances = _int(where, flags, "--num-distributed-optimizer-instances", 1)
        if strategy == "optim_grads_params" and instances > 1:
            job["sharding_mode"] = "megatron_fsdp_hsdp"
            dp_all = _mesh_dp(job["gpus"], tp * pp * cp)  # None: a mesh the GPUs do not hold (the plan names it)
            if dp_all is not None and dp_all % instances:
                raise PlannerError(f"{where}--num-distributed-optimizer-instances {instances} does not divide dp {dp_all}",
                                   "Megatron asserts (dp x cp) % instances == 0")
            if dp_all is not None:
                job["shard_group"] = dp_all // instances
        elif strategy in ("optim", "optim_grads", "optim_grads_params"):
            job["sharding_mode"] = f"megatron_fsdp_{strategy}"
        elif strategy == "no_shard":
            job["sharding_mode"] = "ddp"
        else:
            raise PlannerError(f"{where}--data-parallel-sharding-strategy {strategy!r}", "valid: no_shard, optim, optim_grads, optim_grads_params")
    elif "--use-distributed-optimizer" in flags or flags.get("--optimizer") == "dist_muon":
        # with muon (or the deprecated dist_muon) validate_args runs the layer-wise distributed optimizer in its place
        # (arguments.py @d98e8a64 l. 1725-1737): whole parameters sharded over the same dp x cp ranks, priced as the
        # distributed optimizer's level (memory.py [mu])
        job["sharding_mode"] = "distributed_optimizer"
        instances = _int(where, flags, "--num-distributed-optimizer-instances", 1)
        dp_all = _mesh_dp(job["gpus"], tp * pp * cp)
        if instances > 1 and dp_all is not None and dp_all % instances == 0:
            # the optimizer sharded over dp / N ranks x cp, the shards all-reduced across the N instances
            # (parallel_state.py @d98e8a64 l. 922-929; param_and_grad_buffer.py l. 701-759): the job's shard_group
            # under the mode's optimizer_instances (stack_db megatron runs.sharding)
            job["shard_group"] = dp_all // instances
    else:
        job["sharding_mode"] = "ddp"
    if "--data-parallel-sharding-strategy" in flags and "--use-megatron-fsdp" not in flags:
        # only Megatron-FSDP reads it (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py @d98e8a64 l. 104-228,
        # megatron_fsdp.py l. 274): before 2026-12-07 its change moved nothing and said nothing (tests/ignored_keys.py)
        ignored.append(listed("ignored", "--data-parallel-sharding-strategy", flags["--data-parallel-sharding-strategy"],
                              "no --use-megatron-fsdp: only Megatron-FSDP reads the strategy"))
    job["sharding"] = {"ddp": "none", "distributed_optimizer": "zero1", "megatron_fsdp_optim": "zero1",
                       "megatron_fsdp_optim_grads": "zero2", "megatron_fsdp_optim_grads_params": "fsdp",
                       "torch_fsdp2": "fsdp", "megatron_fsdp_hsdp": "hsdp"}[job["sharding_mode"]]
    for flag, key in (("--account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split"),
                      ("--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split")):
        if flag in flags:
            job[key] = True
    if "--expert-tensor-parallel-size" in flags:
        job["etp"] = _int(where, flags, "--expert-tensor-parallel-size")
    _wire_dtypes(where, flags)
    if "--num-experts" in flags:
        _dispatcher(where, flags, job, assumed)
    if "--moe-expert-capacity-factor" in flags:
        job["moe_capacity_factor"] = _float(where, flags, "--moe-expert-capacity-factor")
        job["moe_pad_to_capacity"] = "--moe-pad-expert-input-to-capacity" in flags
        assumed.append(noted("assumed", "moe_capacity_factor",
                             "--moe-expert-capacity-factor (tokens beyond it are dropped; the busiest "
                             "rank's load capped at it" + (", every expert padded to it" if job["moe_pad_to_capacity"] else "")
                             + ": planner/imbalance.py)"))
    if "--num-experts" in flags:
        _balancing(where, flags, job, assumed)
        _router(where, flags, job, assumed)
    _router_padding(where, flags, job, assumed, ignored)
    job["sequence_parallel"] = "--sequence-parallel" in flags
    if tp > 1 and not job["sequence_parallel"]:
        assumed.append(listed("assumed", "sequence_parallel", False,
                              "--sequence-parallel absent (off by default in Megatron)"))
    if tp == 1 and job["sequence_parallel"]:
        job["sequence_parallel"] = False
        assumed.append(SP_OFF_AT_TP1)
    gran = flags.get("--recompute-granularity")
    if gran is None and "--recompute-activations" in flags:
        gran = "selective"
    if gran not in (None, "full", "selective"):
        raise PlannerError(f"{where}--recompute-granularity {gran!r}", "valid: full, selective")
    job["recompute"] = gran or "none"
    method = flags.get("--recompute-method")
    if gran == "full":
        n = _int(where, flags, "--recompute-num-layers")
        if method == "block" and n is not None:
            # Megatron's block method re-runs the first n layers of each model chunk; the
            # planner's recompute_layers counts a GPU's layers over its vpp chunks. Kept where n covers
            # every layer too: the block method runs an MTP module without recompute, unlike the uniform one
            # (multi_token_prediction.py @d98e8a64 l. 1630-1650; memory.py [dh] mtp_recomputed)
            job["recompute_layers"] = n * vpp
            every = " (every layer of a stage: priced as uniform but for an MTP module)" if n * vpp >= L // pp else ""
            assumed.append(listed("assumed", "recompute_layers", n * vpp,
                                  f"--recompute-num-layers {n} per model chunk x {vpp} chunks{every}"))
        elif method not in (None, "uniform", "block"):
            raise PlannerError(f"{where}--recompute-method {method!r}", "valid: uniform, block")
        elif method == "uniform" and n not in (None, 1):
            not_modelled.append(listed("not_modelled", "--recompute-num-layers", n,
                                       f"uniform chunks of {n} layers: every "
                                       "layer re-runs, but only each chunk's input is saved, less than priced"))
    elif method is not None or "--recompute-num-layers" in flags:
        ignored += [listed("ignored", f, flags[f], "no --recompute-granularity full")
                    for f in ("--recompute-method", "--recompute-num-layers") if f in flags]

    # ---- precision, overlap, order
    if "--fp4-format" in flags:
        _fp4(flags, job, assumed, where)
    elif "--fp8-format" in flags:
        if flags["--fp8-format"] not in FP8_FORMATS:
            raise PlannerError(f"{where}--fp8-format {flags['--fp8-format']!r} is not an fp8 format Megatron-LM takes",
                               f"valid: {', '.join(FP8_FORMATS)} (transformer_config.py fp8; NVFP4 is "
                               f"--fp4-format e2m1)")
        job["precision"] = "fp8"
        job["fp8_recipe"] = flags.get("--fp8-recipe", "delayed")
        if "--fp8-recipe" not in flags:
            assumed.append(listed("assumed", "fp8_recipe", "delayed", "--fp8-recipe default (arguments.py)"))
        # the flag turns fp8 training on (priced: precision fp8); its format is numerics only. Said as assumed, not
        # ignored (before 2026-12-07 listed as ignored, yet the flag removed prices bf16: tests/ignored_keys.py)
        assumed.append(listed("assumed", "precision", "fp8", f"--fp8-format {flags['--fp8-format']} (e4m3 or hybrid: "
                              "the same fp8 GEMMs)"))
    else:
        job["precision"] = "bf16"
        if "--fp16" in flags:
            assumed.append(listed("assumed", "precision", "bf16",
                                  "--fp16 priced as bf16 (same 2-byte width and tensor peak)"))
        elif "--bf16" not in flags:
            assumed.append(listed("assumed", "precision", "bf16",
                                  "neither --bf16 nor --fp16 (fp32 training is not modelled)"))
        if "--fp8-recipe" in flags:
            ignored.append(listed("ignored", "--fp8-recipe", flags["--fp8-recipe"], "no --fp8-format"))
    if "--fp16" in flags:  # the job's fp16: exported back as --fp16, refused under --use-torch-fsdp2 (_mode_settings)
        job["fp16"] = True
    _bf16_layers(flags, job, where, ignored)
    _fp8_attention(flags, job, assumed, ignored, not_modelled)
    job["tp_comm_overlap"] = "--tp-comm-overlap" in flags
    job["dp_comm_overlap"] = "--overlap-grad-reduce" in flags
    if not job["dp_comm_overlap"]:
        assumed.append(listed("assumed", "dp_comm_overlap", False,
                              "--overlap-grad-reduce absent (off by default in Megatron)"))
    if "--overlap-param-gather" in flags and (not job["dp_comm_overlap"] or not (
            "--use-distributed-optimizer" in flags or "--use-megatron-fsdp" in flags
            or flags.get("--optimizer") == "dist_muon")):
        # Megatron asserts both (arguments.py @d98e8a64 l. 1024-1029): the flag as stated, which the start-up rule
        # MEGATRON_PARAM_GATHER (code 108) refuses at resolve (without --overlap-grad-reduce, or under ddp / torch_fsdp2)
        job["dp_param_gather_overlap"] = True
    elif job["dp_comm_overlap"] and job["sharding"] in ("zero1", "zero2") and "--overlap-param-gather" not in flags:
        # the distributed optimizer's (Megatron-FSDP optim / optim_grads') all-gather after the step, synchronous
        # without --overlap-param-gather (distrib_optimizer.py @d98e8a64 l. 3168-3198; step.py [40]); so Muon's
        # layer-wise optimizer's (layer_wise_optimizer.py l. 965-987 step_with_ready_grads: DDP's start_param_sync of
        # its buckets, or allgather_params on the legacy path, unless overlap_param_gather defers it to the forward)
        job["dp_param_gather_overlap"] = False
    job["rank_order"] = "tp-cp-pp-dp" if "--use-tp-pp-dp-mapping" in flags else "tp-cp-dp-pp"
    assumed.append(listed("assumed", "rank_order", job['rank_order'], "Megatron's parallel_state order "
                   f"{'tp-cp-ep-pp-dp' if '--use-tp-pp-dp-mapping' in flags else 'tp-cp-ep-dp-pp'}"))
    _attention(flags, where, job, assumed)
    _fusions(flags, spec, job, ignored, not_modelled, assumed)
    _mode_settings(flags, job, assumed)
    for flag, key in (("--account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split"),
                      ("--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split")):
        if flag in flags:
            job[key] = True
    buffer16 = _state_bytes(flags, where, job, assumed, unmodelled)
    _optimizer_offload(flags, where, job, assumed, ignored, unmodelled)
    _megatron_fsdp_grads(flags, where, job, assumed, ignored, unmodelled, buffer16)
    _megatron_fsdp_buffers(flags, where, job, assumed, ignored, unmodelled)
    _unmodelled(flags, where, job, spec, tp, unmodelled)
    if "--no-use-layer-wise-param-layout" in flags:  # Muon's layer-wise optimizer without its layout (memory.py [mu])
        if job.get("optimizer") == "muon" and job.get("sharding") == "zero1":
            job["optimizer_whole_tensors"] = True
        else:
            ignored.append(noted("ignored", "--no-use-layer-wise-param-layout",
                                 "no layer-wise distributed optimizer: it "
                                 "runs with --optimizer muon and --use-distributed-optimizer only, arguments.py @d98e8a64 "
                                 "l. 1725-1737"))
    if "--muon-num-ns-steps" in flags and job.get("optimizer") != "muon":  # read under Muon only (_unmodelled)
        ignored.append(listed("ignored", "--muon-num-ns-steps", flags["--muon-num-ns-steps"], "Muon's Newton-Schulz "
                              f"steps: the job's optimizer is {job.get('optimizer', 'adam')}, which runs none "
                              "(arguments.py @d98e8a64 l. 2648-2649)"))
    if "--mla-down-proj-fusion" in flags:  # arguments.py @d98e8a64 l. 3566-3572 (store_true): FusedMLASelfAttention's
        # TP-split down projection; refused by resolve where Megatron asserts (a model without MLA or q_lora_rank)
        job["mla_down_proj_fusion"] = True  # the job's mla_down_proj_fusion (layers/attention.py MLA.down_fused)
    if "--muon-no-split-qkv" in flags:  # arguments.py @d98e8a64 l. 2630-2632 (store_false, dest muon_split_qkv)
        if job.get("optimizer") == "muon":
            job["muon_split_qkv"] = False  # the job's muon_split_qkv (step.py [28])
        else:
            ignored.append(noted("ignored", "--muon-no-split-qkv", "Muon's q / k / v split: the job's optimizer is "
                                 f"{job.get('optimizer', 'adam')}, which runs no Newton-Schulz (arguments.py @d98e8a64 "
                                 "l. 2630-2632)"))
    for f in ("--muon-fp32-matmul-prec", "--muon-use-syrk"):  # read under Muon only (_unmodelled)
        if f in flags and job.get("optimizer") != "muon":
            ignored.append(listed("ignored", f, flags[f], "Muon's Newton-Schulz setting: the job's optimizer is "
                                  f"{job.get('optimizer', 'adam')}, which runs none (arguments.py @d98e8a64 l. 2640-2658)"))
    if "--muon-tp-mode" in flags and job.get("optimizer") != "muon":  # read under Muon only (_unmodelled)
        ignored.append(listed("ignored", "--muon-tp-mode", flags["--muon-tp-mode"], "Muon's TP mode: the job's "
                              f"optimizer is {job.get('optimizer', 'adam')}, which runs no Newton-Schulz "
                              "(arguments.py @d98e8a64 l. 2650-2651)"))
    unmodelled += split_unmodelled
    if hardware is not None:
        job["hardware"] = hardware
    return TrainerConfig(job=job, fmt="megatron", ignored=ignored, assumed=assumed, unmodelled=unmodelled,
                         not_modelled=not_modelled,
                         # the flag stated: the gather hidden wherever it acts; absent, Megatron's default off
                         # (arguments.py @d98e8a64 l. 3148-3149), which the job leaves to the tie (not stated)
                         param_gather=True if "--overlap-param-gather" in flags else None,
                         param_gather_key="--overlap-param-gather",
                         stated={f: flags[f] for f in ("--global-batch-size", "--step-batch-size-schedule", "--sequence-parallel",
                                                       "--overlap-param-gather")
                                 if f in flags})


# Megatron-LM's validate_args turns --sequence-parallel off at tp 1 with a warning and starts (arguments.py @d98e8a64
# l. 1433-1439); Megatron-Bridge refuses it instead (megatron_bridge.py _job: ModelParallelConfig's ValueError)
SP_OFF_AT_TP1 = listed("assumed", "sequence_parallel", False, "--sequence-parallel with tp 1 (Megatron turns it off: "
                       "validate_args, arguments.py @d98e8a64 l. 1433-1439)")


def command_line_tp(cfg: TrainerConfig, data: dict, given: dict, where: str) -> None:
    """Megatron's own start-up rules on a script's --sequence-parallel and --tp-comm-overlap where the
    command line moves TP (load_job: `data` the script's job fields, `given` the options laid over
    them; `data` and cfg.assumed are updated in place). validate_args (arguments.py @d98e8a64
    l. 1433-1439) turns --sequence-parallel off at tp 1 only, so the script's flag runs at the tp
    Megatron starts with:
      - a stated --sequence-parallel (read as off at the script's tp 1) is on at a command-line tp > 1;
      - a script's sequence parallelism is off at a command-line tp 1;
    each with a note, unless the command line says --[no-]sequence-parallel (it wins). Then l. 1441-1442
    assert sequence parallelism with --tp-comm-overlap ('Tensor parallel communication/GEMM overlap can
    happen only when sequence parallelism is enabled'), after the tp 1 rule: a script with the flag at
    tp 1, or at tp > 1 without --sequence-parallel, does not start, and is refused here in Megatron's
    words (resolve's TP_OVERLAP_SP would refuse it in the job's)."""
    from .spelling import asks_sequence_parallel

    if cfg.fmt != "megatron":
        return
    tp = given.get("tp", data.get("tp", 1))
    if "tp" in given and "sequence_parallel" not in given:
        if tp > 1 and asks_sequence_parallel(cfg.fmt, cfg.stated) and not data.get("sequence_parallel"):
            data["sequence_parallel"] = True
            cfg.assumed[:] = [a for a in cfg.assumed if not about(a, "sequence_parallel", False)]  # SP_OFF_AT_TP1
            cfg.assumed.append(listed("assumed", "sequence_parallel", True,
                                      f"the script's --sequence-parallel at the command line's tp {tp} "
                                      "(Megatron keeps it as the script asks at tp > 1 and turns it off at tp 1 only: "
                                      "arguments.py @d98e8a64 l. 1433-1439; --no-sequence-parallel turns it off)"))
        elif tp == 1 and data.get("sequence_parallel"):
            data["sequence_parallel"] = False
            cfg.assumed.append(listed("assumed", "sequence_parallel", False,
                                      "the script's --sequence-parallel at the command line's tp 1 "
                                      "(Megatron turns it off at tp 1: arguments.py @d98e8a64 l. 1433-1439)"))
    sp = given.get("sequence_parallel", data.get("sequence_parallel"))
    if given.get("tp_comm_overlap", data.get("tp_comm_overlap")) and not (sp and tp > 1):
        why = ("Megatron's validate_args turns --sequence-parallel off at tp 1 (l. 1433-1439), then asserts it" if tp == 1 else
               "without --sequence-parallel Megatron's validate_args asserts sequence parallelism")
        raise PlannerError(f"{where}--tp-comm-overlap at tp {tp}: {why} under --tp-comm-overlap (arguments.py @d98e8a64 "
                           "l. 1441-1442: 'Tensor parallel communication/GEMM overlap can happen only when sequence "
                           "parallelism is enabled'): Megatron does not start",
                           "drop --tp-comm-overlap (or pass --no-tp-comm-overlap), or run tp > 1 with --sequence-parallel "
                           "(e.g. --tp 2 --sequence-parallel)")


ATTENTION_BACKENDS = ("auto", "flash", "fused", "unfused", "local")  # megatron/core/transformer/enums.py AttnBackend [4]


def _attention(flags: dict, where: str, job: dict, assumed: list[str]) -> None:
    """The attention kernel, from --attention-backend and --transformer-impl [4]: `unfused`
    (Transformer Engine's UnfusedDotProductAttention) and `local` (Megatron-Core's
    DotProductAttention), like every core attention of --transformer-impl local
    (LocalSpecProvider.core_attention), keep the softmax output for the backward (eager:
    the s x s scores); flash, fused and auto run TE's fused kernels, which keep none. flash
    and fused name the kernel (job attention_kernel flash2 | cudnn: FlashAttention-2 and
    cuDNN's rates); auto leaves it to the stack's rule (TE's choice by GPU, compute.py [7a])."""
    backend = flags.get("--attention-backend", "auto")
    impl = flags.get("--transformer-impl", "transformer_engine")
    if backend not in ATTENTION_BACKENDS:
        raise PlannerError(f"{where}--attention-backend {backend!r}", f"valid: {', '.join(ATTENTION_BACKENDS)}")
    if impl not in ("transformer_engine", "local", "inference_optimized"):
        raise PlannerError(f"{where}--transformer-impl {impl!r}", "valid: transformer_engine, local")
    if impl == "local":  # Megatron-Core's own layers: no TE GEMM (planner/memory.py [12])
        job["transformer_impl"] = "local"
    if backend == "local" or impl == "local":  # Megatron-Core's DotProductAttention (training/models/gpt.py)
        job["local_core_attention"] = True
    if backend in ("unfused", "local") or impl == "local":
        job["attention"] = "eager"
        why = f"--attention-backend {backend}" if backend in ("unfused", "local") else "--transformer-impl local"
        assumed.append(listed("assumed", "attention", "eager",
                              f"{why} keeps the softmax output for the backward (unfused core attention)"))
    else:
        job["attention"] = "flash"
        if backend in ("flash", "fused"):  # TE's FlashAttention or cuDNN's fused kernel, not TE's own choice (compute.py [7a])
            job["attention_kernel"] = "flash2" if backend == "flash" else "cudnn"
        if "--attention-backend" not in flags:
            assumed.append(listed("assumed", "attention", "flash",
                                  "--attention-backend auto (Megatron's default) with Transformer Engine runs a "
                                  "fused attention kernel that keeps no s x s scores"))


def _fusions(flags: dict, spec, job: dict, ignored: list, not_modelled: list, assumed: list) -> None:
    """Megatron's fusion switches [6] into the job's fields (None: the stack's fused kernels),
    or listed as ignored, with the reason, where they change nothing on this job:
      --no-rope-fusion                   apply_rope_fusion false (a model without RoPE: Megatron turns
                                         the fusion off itself, arguments.py l. 1628-1629);
      --no-bias-swiglu-fusion            bias_activation_fusion false with --swiglu, else ignored (argument_utils.py
      --no-bias-gelu-fusion              l. 314-319 reads the one that matches --swiglu);
      --no-bias-dropout-fusion           bias_dropout_fusion false;
      --no-gradient-accumulation-fusion  gradient_accumulation_fusion false (under --use-torch-fsdp2, which requires it,
                                         arguments.py l. 1040-1041, left unset: _mode_settings);
      --no-masked-softmax-fusion         Megatron-Core's own DotProductAttention only (dot_product_attention.py
                                         l. 104): masked_softmax_fusion false with the local one, ignored with TE's;
      --attention-softmax-in-fp32,       with the local one attention_softmax_in_fp32 (either flag true, else false:
      --apply-query-key-layer-scaling    Megatron-LM's argument default, listed as assumed; planner/memory.py [sm]),
                                         with TE's attention ignored (IGNORED_REASONS);
      --no-persist-layer-norm            Megatron-Core's FusedLayerNorm only (fused_layer_norm.py l. 99-135): ignored
                                         with TE's norms, not modelled with --transformer-impl local."""
    def ignore(flag, why):
        ignored.append(listed("ignored", flag, True, why))

    if "--no-rope-fusion" in flags:
        if spec.position_embedding == "rope":
            job["apply_rope_fusion"] = False
        else:
            ignore("--no-rope-fusion", "the model has no rotary embedding: Megatron turns apply_rope_fusion off itself, "
                                       "arguments.py l. 1628-1629")
    swiglu = "--swiglu" in flags
    for flag, applies in (("--no-bias-swiglu-fusion", swiglu), ("--no-bias-gelu-fusion", not swiglu)):
        if flag not in flags:
            continue
        if applies and flag == "--no-bias-gelu-fusion" and not spec.linear_bias:
            # Megatron turns bias_gelu_fusion off itself without linear biases (arguments.py @d98e8a64 l. 1604-1606):
            # the flag changes nothing (before 2026-12-07 said nowhere: tests/ignored_keys.py); the job's field kept, so
            # a plan exported with it reads back the same (export.py writes the flag for bias_activation_fusion false)
            job["bias_activation_fusion"] = False
            ignore(flag, "no linear biases: Megatron turns bias_gelu_fusion off itself (arguments.py l. 1604-1606)")
        elif applies:
            job["bias_activation_fusion"] = False
        else:
            ignore(flag, f"bias_activation_fusion follows {'--no-bias-swiglu-fusion' if swiglu else '--no-bias-gelu-fusion'}"
                         f" {'with' if swiglu else 'without'} --swiglu (argument_utils.py l. 314-319)")
    if "--squared-relu" in flags and "--no-bias-gelu-fusion" not in flags and spec.linear_bias:
        # --squared-relu reads bias_gelu_fusion (default on, argument_utils.py l. 314-326; off only without
        # --add-bias-linear, arguments.py l. 1605-1606): on with the linear biases, which Megatron-Core refuses
        # (transformer_config.py l. 2420-2424): the job says so and plan._fusion_settings refuses it
        job["bias_activation_fusion"] = True
    if "--no-bias-dropout-fusion" in flags:
        job["bias_dropout_fusion"] = False
    if "--no-gradient-accumulation-fusion" in flags:  # under a mode that requires it: _mode_settings
        job["gradient_accumulation_fusion"] = False
    if job.get("local_core_attention"):  # Megatron-Core's DotProductAttention's softmax (planner/memory.py [sm])
        fp32 = [f for f in SOFTMAX_FP32_FLAGS if _on(flags, f)]
        job["attention_softmax_in_fp32"] = bool(fp32)
        if not fp32:
            assumed.append(listed("assumed", "attention_softmax_in_fp32", False,
                                  "neither --attention-softmax-in-fp32 nor "
                                  "--apply-query-key-layer-scaling (Megatron-LM's argument default, arguments.py @d98e8a64 "
                                  "l. 3067, 1713-1715): the torch softmax, where it runs, in the 16-bit input dtype"))
    if "--no-masked-softmax-fusion" in flags:
        if job.get("local_core_attention"):
            job["masked_softmax_fusion"] = False
        else:
            ignore("--no-masked-softmax-fusion", "read only by Megatron-Core's own DotProductAttention (dot_product_"
                                                 "attention.py l. 104); Transformer Engine's attention runs")
    if "--no-persist-layer-norm" in flags:
        if job.get("transformer_impl") == "local":
            not_modelled.append(noted("not_modelled", "--no-persist-layer-norm",
                                      "Megatron-Core's FusedLayerNorm without "
                                      "the persistent kernel: the same bytes, a slower kernel"))
        else:
            ignore("--no-persist-layer-norm", "read only by Megatron-Core's FusedLayerNorm (fused_layer_norm.py "
                                              "l. 99-135); Transformer Engine's norms run")


def _mode_settings(flags: dict, job: dict, assumed: list) -> None:
    """The job settings the script's sharding mode runs at one value (stack_db megatron
    runs.sharding job_settings, schema.ModeSetting), read as Megatron runs them: the setting as
    the flags give it (Megatron's defaults: --no-gradient-accumulation-fusion is store_false, the
    fusion on, arguments.py l. 2944-2948; --fp8-param-gather off) is left out of the job where the
    mode runs that value anyway (--use-torch-fsdp2 with --no-gradient-accumulation-fusion: listed as
    assumed; kept where the mode says unset default, where a job leaving it out counts as its default),
    left out with a note where the mode overrides it (--fp8-param-gather under --use-torch-fsdp2), and
    kept where the mode refuses it (the fusion on under --use-torch-fsdp2, --fp8-param-gather under
    DDP), so that the job is refused naming Megatron's check."""
    from ..catalog import load_stack

    given = {"gradient_accumulation_fusion": "--no-gradient-accumulation-fusion" not in flags,
             "fp8_param_gather": "--fp8-param-gather" in flags, "fp16": "--fp16" in flags}
    flag = {"gradient_accumulation_fusion": "--no-gradient-accumulation-fusion", "fp8_param_gather": "--fp8-param-gather",
            "fp16": "--fp16"}
    mode = next(m for m in load_stack("megatron").runs.sharding if m.name == job["sharding_mode"])
    for x in mode.job_settings:
        v = given[x.setting]
        if v == x.value and x.unset == "default":  # the mode is the job's only where the job gives the value itself
            job[x.setting] = v
        elif v == x.value:
            if job.pop(x.setting, None) is not None:
                assumed.append(noted("assumed", x.setting,
                                     f"{flag[x.setting]} is what sharding mode {mode.name} requires ({x.source}); "
                                     "priced as the mode runs it"))
        elif x.other == "overridden":
            job.pop(x.setting, None)
            assumed.append(listed("assumed", x.setting, x.value, f"Megatron runs sharding mode {mode.name} so "
                                  f"whatever {flag[x.setting]} says ({x.source})", show=str(x.value).lower()))
        else:
            job[x.setting] = v  # refused by resolve (plan.stack_for_settings), naming the check


def _state_bytes(flags: dict, where: str, job: dict, assumed: list[str], unmodelled: list[str]) -> Optional[Note]:
    """Bytes of model state per parameter where Megatron's flags make them differ from the
    megatron stack's 18 B (bf16 weights 2, fp32 main grads 4, fp32 master 4, Adam 8) [5]: the
    gradient buffer is fp32 only when accumulate_allreduce_grads_in_fp32, which --bf16 turns on
    unless --grad-reduce-in-bf16; with --fp16 it stays off unless
    --accumulate-allreduce-grads-in-fp32 is given, and the buffer has the parameters' dtype
    (param_and_grad_buffer.group_params_for_buffers: grad_dtype = float if
    grad_reduce_in_fp32 else param.dtype). Returns the assumed record of a 16-bit gradient buffer (None: none), which
    Megatron-FSDP's reading replaces without keeping its rule (_megatron_fsdp_grads)."""
    fp16, bf16 = "--fp16" in flags, "--bf16" in flags
    buffer16 = None
    acc32 = "--accumulate-allreduce-grads-in-fp32" in flags
    if (fp16 and not acc32) or (bf16 and "--grad-reduce-in-bf16" in flags):
        job["bytes_per_param"] = {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}
        why = ("--fp16 without --accumulate-allreduce-grads-in-fp32" if fp16 else "--grad-reduce-in-bf16")
        buffer16 = listed("assumed", "bytes_per_param", job["bytes_per_param"], f"{why} keeps the gradient "
                          "buffer in 16 bits (validate_args; param_and_grad_buffer.group_params_for_buffers)",
                          show="2+2+4+8", spaced=True)
        assumed.append(buffer16)
    if not (fp16 or bf16):  # fp8 without --bf16 keeps fp32 parameters too (params_dtype float, validate_args)
        unmodelled.append(noted("unmodelled", "fp32 parameters (neither --bf16 nor --fp16)", "4-byte weights and "
                                "activations, priced as bf16"))
    _optimizer_dtypes(flags, where, job, assumed)
    return buffer16


# Megatron-LM @d98e8a64 megatron/training/arguments.py l. 3667-3685: the precision-aware
# optimizer's state dtypes and their argparse choices (default fp32 each).
OPTIMIZER_DTYPE_CHOICES = {"--main-grads-dtype": ("fp32", "bf16"), "--main-params-dtype": ("fp32", "fp16"),
                           "--exp-avg-dtype": ("fp32", "fp16", "bf16", "fp8"),
                           "--exp-avg-sq-dtype": ("fp32", "fp16", "bf16", "fp8")}
# bytes per element of each dtype (fp8 moments: TE FusedAdam keeps them as uint8 with one fp32 scale per
# tensor, transformer_engine/pytorch/optimizers/fused_adam.py @4329ff84 l. 84-92, 414-426; the scale not priced)
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# the sharding modes that run without Megatron's distributed optimizer (the precision-aware optimizer
# refuses them): DDP, and --use-torch-fsdp2 (arguments.py l. 1096 lets it run without one);
# Megatron-FSDP v1 enables it (arguments.py @d98e8a64 l. 1127-1130, 'Megatron-FSDP v1 requires the
# DistributedOptimizer')
NO_DISTRIBUTED_OPTIMIZER = ("ddp", "torch_fsdp2")


def _optimizer_dtypes(flags: dict, where: str, job: dict, assumed: list[str]) -> None:
    """Bytes of model state per parameter from Megatron's precision-aware optimizer [5b]
    (--use-precision-aware-optimizer with --main-grads-dtype, --main-params-dtype,
    --exp-avg-dtype, --exp-avg-sq-dtype; DeepSeek-V3's bf16 AdamW moments are --exp-avg-dtype
    bf16 --exp-avg-sq-dtype bf16, preset bf16-moments). Refused as Megatron refuses it: a dtype
    outside its choices, a non-fp32 dtype without the precision-aware optimizer
    (OptimizerConfig.__post_init__ asserts), the precision-aware optimizer without the
    distributed optimizer (optimizer/__init__.py raises)."""
    dtypes = {}
    for f, choices in OPTIMIZER_DTYPE_CHOICES.items():
        dtypes[f] = _choice(where, f, flags.get(f, "fp32"), choices, "megatron/training/arguments.py @d98e8a64")
    low = [f"{f} {v}" for f, v in dtypes.items() if v != "fp32"]
    if "--use-precision-aware-optimizer" not in flags:
        if low:
            raise PlannerError(f"{where}{', '.join(low)} without --use-precision-aware-optimizer",
                               "Megatron asserts the optimizer state dtypes are fp32 without it (megatron/core/optimizer/"
                               "optimizer_config.py @d98e8a64 l. 466-478); add --use-precision-aware-optimizer")
        return
    if job.get("sharding_mode") in NO_DISTRIBUTED_OPTIMIZER:
        raise PlannerError(f"{where}--use-precision-aware-optimizer without --use-distributed-optimizer",
                           "Megatron raises '--use-precision-aware-optimizer only supported with distributed optimizer' "
                           "(megatron/core/optimizer/__init__.py @d98e8a64 l. 1057); add --use-distributed-optimizer "
                           "(Megatron-FSDP v1 turns it on itself: arguments.py l. 1127-1130)")
    if dtypes["--main-grads-dtype"] == "bf16" and "--accumulate-allreduce-grads-in-fp32" in flags:
        raise PlannerError(f"{where}--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32",
                           "Megatron asserts '--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-"
                           "fp32 is set' (arguments.py @d98e8a64 l. 1209-1211)")
    # the job says it (plan._bytes_per_param: TE's FusedAdam holds the master weights and reads the gradient shard as
    # decoupled_grad whatever the state dtypes, memory.py [sg])
    job["precision_aware_optimizer"] = True
    bpp = dict(job.get("bytes_per_param") or {"weights": 2.0, "gradients": 4.0, "master": 4.0, "optimizer": 8.0})
    if dtypes["--main-grads-dtype"] == "bf16":  # arguments.py l. 1215: fp32 accumulation only with fp32 main grads
        bpp["gradients"] = 2.0
    # the master weights in --main-params-dtype; where TE's FusedAdam holds fp32 ones beside bf16
    # weights it keeps their 16-bit remainders, which the stack prices (stack_db megatron
    # runs.low_precision_moments, plan._bytes_per_param), as for a planned job, fp32 moments too
    bpp["master"] = DTYPE_BYTES[dtypes["--main-params-dtype"]]
    bpp["optimizer"] = DTYPE_BYTES[dtypes["--exp-avg-dtype"]] + DTYPE_BYTES[dtypes["--exp-avg-sq-dtype"]]
    from ..schema import BYTES_PER_PARAM_PRESETS

    name = next((n for n, b in BYTES_PER_PARAM_PRESETS.items() if b.model_dump() == bpp), None)
    job["bytes_per_param"] = name or bpp
    assumed.append(listed("assumed", "bytes_per_param", name or bpp, "--use-precision-aware-optimizer with "
                          + " ".join(f"{f} {v}" for f, v in dtypes.items()), show=f"{name or 'custom'} "
                          f"({bpp['weights']:g}+{bpp['gradients']:g}+{bpp['master']:g}+{bpp['optimizer']:g} B)",
                          spaced=True))


# Megatron-LM @d98e8a64 megatron/training/arguments.py l. 2918-2935: the optimizer offload's flags (HybridDeviceOptimizer,
# planner/offload.py hybrid_device); --optimizer-offload-fraction's argparse default 1.0
OFFLOAD_FLAGS = ("--optimizer-offload-fraction", "--overlap-cpu-optimizer-d2h-h2d", "--use-torch-optimizer-for-cpu-offload",
                 "--no-pin-cpu-grads", "--no-pin-cpu-params")


def _optimizer_offload(flags: dict, where: str, job: dict, assumed: list, ignored: list, unmodelled: list) -> None:
    """--optimizer-cpu-offload (Megatron-Core's HybridDeviceOptimizer; stack_db megatron cpu_offload, planner/offload.py
    hybrid_device) -> offload_optimizer cpu, offload_fraction from --optimizer-offload-fraction (default 1.0),
    offload_overlap from --overlap-cpu-optimizer-d2h-h2d. Refused as Megatron refuses it: without
    --use-precision-aware-optimizer (arguments.py @d98e8a64 l. 1884-1888); --fp8-param-gather with a recipe other
    than delayed (l. 1889-1892); a fraction outside [0, 1] (Megatron takes any float, and one above 1 offloads every
    parameter, below 0 none: stated, not clamped). A fraction 0 offloads nothing: every parameter stepped on the GPU
    (the job keeps no offload, noted). The optimizer state dtypes (--main-params-dtype, --exp-avg-dtype,
    --exp-avg-sq-dtype) are not handed to the hybrid optimizer (optimizer/__init__.py l. 519-528: lr, weight decay,
    betas, eps, bias correction, fused): its fp32 master copies (param_update_in_fp32) and fp32 moments are priced,
    said in the assumed list. --use-torch-optimizer-for-cpu-offload is overridden for Adam (l. 515-518: the GPU
    optimizer is FusedAdam whatever it says): ignored. Pageable host buffers (--no-pin-cpu-grads / --no-pin-cpu-params):
    not modelled (the link priced at its pinned rate)."""
    if "--optimizer-cpu-offload" not in flags:
        ignored += [listed("ignored", f, flags[f], "no --optimizer-cpu-offload") for f in OFFLOAD_FLAGS if f in flags]
        return
    if "--use-precision-aware-optimizer" not in flags:
        raise PlannerError(f"{where}--optimizer-cpu-offload without --use-precision-aware-optimizer",
                           "Megatron asserts 'The optimizer cpu offload must be used in conjunction with "
                           "`--use-precision-aware-optimizer`' (megatron/training/arguments.py @d98e8a64 l. 1884-1888); "
                           "add --use-precision-aware-optimizer (and --use-distributed-optimizer)")
    if "--fp8-param-gather" in flags and job.get("fp8_recipe", "delayed") != "delayed":
        raise PlannerError(f"{where}--optimizer-cpu-offload with --fp8-param-gather and --fp8-recipe "
                           f"{job.get('fp8_recipe')}", "Megatron asserts the offload takes --fp8-param-gather only "
                           "with --fp8-recipe delayed (arguments.py @d98e8a64 l. 1889-1892)")
    frac = _float(where, flags, "--optimizer-offload-fraction")
    if frac is None:
        frac = 1.0
        assumed.append(listed("assumed", "offload_fraction", 1,
                              "--optimizer-offload-fraction default 1.0 (arguments.py @d98e8a64 l. 2922)"))
    if not 0.0 <= frac <= 1.0:
        raise PlannerError(f"{where}--optimizer-offload-fraction {_short(flags['--optimizer-offload-fraction'])} is "
                           "outside 0 .. 1", "give the fraction of the optimizer states offloaded, 0 to 1 "
                           "(HybridDeviceOptimizer offloads whole parameters until that fraction of the elements)")
    if frac == 0.0:
        assumed.append(listed("assumed", "offload_optimizer", "none",
                              "--optimizer-cpu-offload with --optimizer-offload-fraction 0 offloads "
                              "nothing (HybridDeviceOptimizer steps every parameter on the GPU)"))
        ignored += [listed("ignored", f, flags[f], "offload fraction 0") for f in OFFLOAD_FLAGS[1:] if f in flags]
        return
    job["offload_optimizer"] = "cpu"
    if frac != 1.0:
        job["offload_fraction"] = frac
    if "--overlap-cpu-optimizer-d2h-h2d" in flags:
        job["offload_overlap"] = True
    dtypes = [f"{f} {flags[f]}" for f in ("--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype")
              if flags.get(f, "fp32") != "fp32"]
    if dtypes:
        bpp = job.get("bytes_per_param")
        from ..schema import BYTES_PER_PARAM_PRESETS

        bpp = dict(BYTES_PER_PARAM_PRESETS[bpp].model_dump() if isinstance(bpp, str) else bpp)
        bpp.update(master=4.0, optimizer=8.0)
        name = next((n for n, b in BYTES_PER_PARAM_PRESETS.items() if b.model_dump() == bpp), None)
        job["bytes_per_param"] = name or bpp
        assumed[:] = [a for a in assumed if not about(a, "bytes_per_param")]  # _optimizer_dtypes' reading
        assumed.append(listed("assumed", "bytes_per_param", name or bpp, f"{', '.join(dtypes)} not handed to "
                              "--optimizer-cpu-offload's HybridDeviceOptimizer, which keeps fp32 master copies and fp32 "
                              "moments (megatron/core/optimizer/__init__.py @d98e8a64 l. 519-546)",
                              show=f"{name or 'custom'} ({bpp['weights']:g}+{bpp['gradients']:g}+4+8 B)", spaced=True))
    if "--use-torch-optimizer-for-cpu-offload" in flags:
        ignored.append(noted("ignored", "--use-torch-optimizer-for-cpu-offload", "overridden for Adam: the GPU's part "
                             "runs FusedAdam, megatron/core/optimizer/__init__.py @d98e8a64 l. 515-518"))
    for f in ("--no-pin-cpu-grads", "--no-pin-cpu-params"):
        if f in flags:
            unmodelled.append(noted("unmodelled", f, "pageable host buffers (the host link priced at its pinned rate)"))


# Megatron-LM @d98e8a64 megatron/training/arguments.py l. 3691-3698: Megatron-FSDP's main-gradient and gradient
# collective dtypes, their argparse choices (default auto each)
MFSDP_GRAD_FLAGS = {"--megatron-fsdp-main-grads-dtype": ("fp32", "bf16", "fp16", "auto"),
                    "--megatron-fsdp-grad-comm-dtype": ("fp32", "fp16", "bf16", "auto")}


def _megatron_fsdp_grads(flags: dict, where: str, job: dict, assumed: list, ignored: list, unmodelled: list,
                         buffer16: Optional[Note] = None) -> None:
    """Megatron-FSDP's main gradients (--use-megatron-fsdp; memory.py [mg]) -> the job's bytes_per_param.gradients:
    --megatron-fsdp-main-grads-dtype, default auto (arguments.py @d98e8a64 l. 3691-3694), the parameters' dtype
    (param_and_grad_buffer.py _resolve_group_grad_dtype l. 2313-2320: bf16 under --bf16, fp16 under --fp16), 2 B;
    fp32 4 B. Megatron-FSDP reads neither grad_reduce_in_fp32 (--accumulate-allreduce-grads-in-fp32, which --bf16
    turns on; no use under megatron/core/distributed/fsdp/) nor the precision-aware optimizer's --main-grads-dtype
    (the help of l. 3693: 'Replaces --main-grads-dtype'), so this flag alone says the gradients' bytes, set here
    whatever _state_bytes read. --megatron-fsdp-grad-comm-dtype, default auto (l. 3695-3698), reduces in the main
    gradients' dtype (fetch_bucket(dtype=None), l. 3107-3111), as the planner prices (runs.sharding
    grads_in_job_dtype); another dtype than theirs is not modelled (priced in theirs). Without --use-megatron-fsdp
    both flags are ignored (only Megatron-FSDP reads them: training.py l. 2646-2648 to the DDP config,
    mcore_fsdp_adapter.py l. 139-143)."""
    given = {f: flags[f] for f in MFSDP_GRAD_FLAGS if f in flags}
    if "--use-megatron-fsdp" not in flags:
        ignored += [listed("ignored", f, v,
                           "no --use-megatron-fsdp: only Megatron-FSDP reads it") for f, v in given.items()]
        return
    for f, v in given.items():
        _choice(where, f, v, MFSDP_GRAD_FLAGS[f], "megatron/training/arguments.py @d98e8a64 l. 3691-3698")
    main = given.get("--megatron-fsdp-main-grads-dtype", "auto")
    comm = given.get("--megatron-fsdp-grad-comm-dtype", "auto")
    main_b = DTYPE_BYTES[main] if main != "auto" else 2.0  # auto: the 16-bit parameters' (fp32 ones: _state_bytes)
    comm_b = main_b if comm == "auto" else DTYPE_BYTES[comm]
    from ..schema import BYTES_PER_PARAM_PRESETS

    bpp = job.get("bytes_per_param") or "megatron"
    bpp = dict(BYTES_PER_PARAM_PRESETS[bpp].model_dump() if isinstance(bpp, str) else bpp)
    was = bpp["gradients"]
    bpp["gradients"] = main_b
    name = next((n for n, b in BYTES_PER_PARAM_PRESETS.items() if b.model_dump() == bpp), None)
    if was != main_b:  # (else the job's reading stands as it was written: a preset's name or _state_bytes' mapping)
        job["bytes_per_param"] = name or bpp
    # (_state_bytes' reading of --grad-reduce-in-bf16 / --fp16 is Megatron's DDP buffer's, not Megatron-FSDP's; the
    # precision-aware optimizer's or the offload's reading of the other states is kept, in this one line; buffer16:
    # _state_bytes' record, whose rule is not kept)
    others = [a.message for a in assumed if about(a, "bytes_per_param") and a is not buffer16]
    assumed[:] = [a for a in assumed if not about(a, "bytes_per_param")]
    why = (f"--megatron-fsdp-main-grads-dtype {main}" if "--megatron-fsdp-main-grads-dtype" in given else
           "--megatron-fsdp-main-grads-dtype not given")
    assumed.append(listed("assumed", "bytes_per_param", name or bpp, f"--use-megatron-fsdp keeps its main gradients "
                   f"in {main_b:g} B, {why}: "
                   "--megatron-fsdp-main-grads-dtype default auto, the parameters' dtype (megatron/training/arguments.py "
                   "@d98e8a64 l. 3691-3694; param_and_grad_buffer.py _resolve_group_grad_dtype l. 2313-2320), and "
                   "reduces them in it (--megatron-fsdp-grad-comm-dtype auto, l. 3695-3698; l. 3107-3111); "
                   "--accumulate-allreduce-grads-in-fp32 and --grad-reduce-in-bf16 are not read by Megatron-FSDP"
                   + (f" (the job's other flags read {was:g} B: Megatron's DDP buffer)" if was != main_b else "")
                   + "".join(f"; the other states: {o}" for o in others),
                   show=f"{name or 'custom'} ({bpp['weights']:g}+{bpp['gradients']:g}+{bpp['master']:g}+"
                   f"{bpp['optimizer']:g} B)", spaced=True))
    if comm_b != main_b:
        unmodelled.append(listed("unmodelled", "--megatron-fsdp-grad-comm-dtype", comm, f"Megatron-FSDP reduces "
                                 f"{comm_b:g} B a gradient, priced in the main gradients' dtype ({main_b:g} B)",
                                 show=f"{comm} with main gradients in {main_b:g} B", spaced=True))


# Megatron-LM @d98e8a64 megatron/training/arguments.py l. 3687-3690: the main weight buffer's dtype, default fp32
MFSDP_MAIN_PARAMS_CHOICES = ("fp32", "bf16", "fp16", "auto")


def _megatron_fsdp_buffers(flags: dict, where: str, job: dict, assumed: list, ignored: list, unmodelled: list) -> None:
    """Megatron-FSDP's own buffers at the sharded levels (--use-megatron-fsdp with --data-parallel-sharding-strategy
    optim, optim_grads, optim_grads_params, and its HSDP): what memory.py prices for each, read from
    NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py
    _init_each_parameter_group_buffers (l. 2324-3127), one DataParallelBuffer of each kind per parameter group
    (a group: one FSDP unit's parameters of one dtype, expert or not, _get_parameter_groups l. 1731-1962):
    - the model weight buffer (l. 2653-2667), the parameters' dtype, sharded only at optim_grads_params
      (l. 2330-2345), whole otherwise: weights, 2 B a parameter, / d at the fsdp level (the expert groups over the
      expert-data-parallel group);
    - the main weight buffer (l. 2688-2706), --megatron-fsdp-main-params-dtype (default fp32, arguments.py
      l. 3687-3690), sharded at every level but no_shard: master 4 B / d (memory.py [mw]);
    - the main gradient buffer (l. 2708-2731; one flat tensor a dtype, l. 3032-3087), sharded at optim_grads and
      optim_grads_params, whole at optim: gradients in the job's gradient bytes (memory.py [mg]);
    - the temporary buckets: the unsharded weights a unit gathers (StorageResizeBasedBucketAllocator, l. 2577-2580;
      fetch_bucket l. 1296-1353), memory.py [pf] fsdp_gathered_units and [nu] fsdp_unsharded_ends; the unsharded
      gradient buckets a sharded gradient buffer allocates (main_grad_getter l. 3094-3117), [rs] zero2_reduce_input
      and fsdp_unit_grads; none where a buffer is whole and its dtype the bucket's (l. 1328-1336);
    - the optimizer's fp32 gradient copy (update_main_grads l. 3351-3409), [sg] step_grad_copies; Adam's moments
      over the main weights' shards. The distributed optimizer returns before building any buffer of its own
      (megatron/core/optimizer/distrib_optimizer.py l. 704-706).
    --fsdp-double-buffer (or --use-nccl-ub, --megatron-fsdp-max-pool-double-buffer, which set it: arguments.py
    l. 1172-1181) is the job's mfsdp_double_buffer, its fixed pools priced (memory.py [db]); --outer-dp-sharding-strategy
    optim under HSDP the job's mfsdp_outer_optim (memory.py [oo]); --megatron-fsdp-version 2 is the job's
    mfsdp_v2 (memory.py [v2]); each refused where Megatron refuses it (_mfsdp_settings). Not priced: the buckets' padding to a multiple of
    dp x the group's chunk size (build_data_parallel_buffer_index l. 258-370: noise, memory.py [bp]), the model's own
    unsharded weights while the buffers are built (before the first step: below the step's peak, the Megatron CI
    row gpt3_mcore_te_tp2_zp_z3_resume_torch_dist_te_8experts2parallel_top2router's first run within 2.4%). --megatron-fsdp-main-params-
    dtype fp32 (the default) is what is priced; bf16 / fp16 (a 2 B main weight buffer) and auto (none: the
    optimizer steps the model weights) are listed as not modelled. Without --use-megatron-fsdp it is ignored."""
    mp = flags.get("--megatron-fsdp-main-params-dtype")
    _mfsdp_settings(flags, where, job, assumed, ignored, unmodelled)
    if "--use-megatron-fsdp" not in flags:
        if mp is not None:
            ignored.append(listed("ignored", "--megatron-fsdp-main-params-dtype", mp,
                                  "no --use-megatron-fsdp: only Megatron-FSDP reads it"))
        return
    if mp is not None:
        _choice(where, "--megatron-fsdp-main-params-dtype", mp, MFSDP_MAIN_PARAMS_CHOICES,
                "megatron/training/arguments.py @d98e8a64 l. 3687-3690")
    if mp not in (None, "fp32"):
        unmodelled.append(listed("unmodelled", "--megatron-fsdp-main-params-dtype", mp,
                                 "Megatron-FSDP's main weight buffer "
                                 + ("is not built (the optimizer steps the model weights)" if mp == "auto" else
                                 f"holds {mp} weights, 2 B a parameter") + "; priced as fp32, 4 B a parameter", spaced=True))
    mode = job.get("sharding_mode")
    if mode == "ddp":  # no_shard: _unmodelled says how it is priced
        return
    level = {"megatron_fsdp_optim": "optim", "megatron_fsdp_optim_grads": "optim_grads",
             "megatron_fsdp_optim_grads_params": "optim_grads_params",
             "megatron_fsdp_hsdp": "optim_grads_params over the instances (HSDP)"}[mode]
    whole = {"megatron_fsdp_optim": "the 16-bit weights and the main gradients whole",
             "megatron_fsdp_optim_grads": "the 16-bit weights whole, the main gradients sharded"}.get(
                 mode, "the 16-bit weights and the main gradients sharded")
    if job.get("mfsdp_v2"):  # version 2's buffers (its own line, mfsdp_v2, lists what moves)
        assumed.append(listed("assumed", "sharding_mode", mode,
                              f"--use-megatron-fsdp ({level}) --megatron-fsdp-version 2 priced from Megatron-FSDP v2's "
                              "own buffers (megatron_fsdp/experimental/parameter_group.py @d98e8a64 FsdpParameterGroup "
                              f"l. 155-214): {whole}, the fp32 main weights (--megatron-fsdp-main-params-dtype fp32) and "
                              "Adam's moments sharded; its gathered units, unit gradients, reduce-scatter inputs and "
                              "weight cast as the mfsdp_v2 line says (memory.py [v2]) and the step's fp32 gradient copy "
                              "([sg]); not priced: the shards' padding (experimental/layout.py l. 40-78 pads as version "
                              "1 does: noise, planner/memory.py [bp])"))
        return
    assumed.append(listed("assumed", "sharding_mode", mode,
                          f"--use-megatron-fsdp ({level}) priced from Megatron-FSDP's own buffers "
                          f"(param_and_grad_buffer.py @d98e8a64 _init_each_parameter_group_buffers l. 2324-3127): {whole}, "
                          "the fp32 main weights (--megatron-fsdp-main-params-dtype fp32) and Adam's moments sharded; the "
                          "temporary buckets of gathered weights and unsharded gradients (memory.py [pf], [nu], [rs]) and "
                          "the step's fp32 gradient copy ([sg])"
                          + ("" if job.get("mfsdp_double_buffer") else " (no --fsdp-double-buffer: buckets allocated on demand)")
                          + "; not priced: the buckets' padding (noise: planner/memory.py [bp])"))


# the flags that turn on Megatron-FSDP's double buffer (arguments.py @d98e8a64 l. 3202 --fsdp-double-buffer; l. 1172-1177
# --use-nccl-ub sets fsdp_double_buffer; l. 1179-1181 --megatron-fsdp-max-pool-double-buffer sets it too)
MFSDP_DOUBLE_BUFFER_FLAGS = ("--fsdp-double-buffer", "--use-nccl-ub", "--megatron-fsdp-max-pool-double-buffer")
# the flags only Megatron-FSDP's double buffer reads (arguments.py @d98e8a64 l. 3184-3186, 3722-3725)
MFSDP_DB_ONLY_FLAGS = ("--fsdp-db-use-persist-buf-on-alloc-fail", "--fsdp-manual-registration")


def _mfsdp_settings(flags: dict, where: str, job: dict, assumed: list, ignored: list, unmodelled: list) -> None:
    """Megatron-FSDP's remaining settings (issue 21), NVIDIA/Megatron-LM @d98e8a64:
    - --fsdp-double-buffer, and --use-nccl-ub and --megatron-fsdp-max-pool-double-buffer which set it under
      --use-megatron-fsdp (megatron/training/arguments.py l. 1172-1181): the job's mfsdp_double_buffer, Megatron-FSDP's
      fixed pools priced in memory.py [db] (param_and_grad_buffer.py l. 2524-2576). With --use-nccl-ub every
      Megatron-FSDP buffer is allocated from NCCL's memory pool (a torch.cuda.MemPool over ncclMemAlloc,
      megatron/core/nccl_allocator.py l. 111-141; get_mem_alloc_context l. 2163-2223, used by every buffer,
      l. 2653-2731, 3034-3087), a private pool of PyTorch's caching allocator whose segments come from the pool's
      allocator in place of cudaMalloc (c10/cuda/CUDACachingAllocator.cpp allocPrimitive): its blocks count in the
      allocated and reserved peaks like any other, so nothing moves outside the allocator (assumed: ncclMemAlloc's
      rounding to its granularity is not priced). Without --use-megatron-fsdp, --use-nccl-ub registers Megatron's DDP
      buffers (distributed/param_and_grad_buffer.py l. 1136-1160): the same bytes in NCCL's pool, listed as not
      modelled; --fsdp-double-buffer and --megatron-fsdp-max-pool-double-buffer are ignored there (only Megatron-FSDP
      reads them).
    - --megatron-fsdp-max-pool-double-buffer (MaxPoolAllocator, l. 886-1185: each pool offset the largest bucket of
      any unit) is priced as the fixed pool of the largest layer unit; --fsdp-db-use-persist-buf-on-alloc-fail (the
      buckets outside the pools kept persistently, l. 835-836) is not modelled; --fsdp-manual-registration (the NCCL
      registration call, with --use-nccl-ub) moves no byte: ignored.
    - --megatron-fsdp-version 2 (FullyShardedDataParallelV2, mcore_fsdp_adapter.py l. 489-703; its buffers from
      megatron_fsdp/experimental/) is the job's mfsdp_v2 (memory.py [v2]; --fsdp-double-buffer, which v2 does not
      read, ignored under it); Megatron refuses it with --use-distributed-optimizer
      (arguments.py l. 1124-1126), at any strategy but optim_grads_params (mcore_fsdp_adapter.py l. 666-668) and at
      what _validate_config raises on (_mfsdp_v2_refusals: TP / PP / CP above 1, outer-DP sharding, the gradient-
      accumulation fusion, per-token loss, fp8 / fp4, CUDA graphs, ...): refused here too; it shards over the whole
      dp x cp group (l. 554), so --num-distributed-optimizer-instances is ignored under it (no HSDP).
    - --outer-dp-sharding-strategy optim under HSDP shards the fp32 main weights and Adam's moments over DP-Outer x
      DP-Shard, the 16-bit weights and the main gradients staying in the shard group's helper buffers (param_and_grad_
      buffer.py l. 2351-2512, 2594-2764, 3691-3800): the job's mfsdp_outer_optim (memory.py [oo], step.py [29]);
      Megatron refuses it at any strategy but
      optim_grads_params (l. 2502-2512): refused here; without HSDP (--num-distributed-optimizer-instances 1) it is
      not read (should_create_hfsdp_helper_buffers, l. 2498-2501): ignored."""
    on = [f for f in MFSDP_DOUBLE_BUFFER_FLAGS if f in flags]
    version = flags.get("--megatron-fsdp-version")
    outer = flags.get("--outer-dp-sharding-strategy")
    if version is not None:
        _choice(where, "--megatron-fsdp-version", version, ("1", "2"), "megatron/training/arguments.py @d98e8a64 l. 3158")
    if outer is not None:
        _choice(where, "--outer-dp-sharding-strategy", outer, ("no_shard", "optim"),
                "megatron/training/arguments.py @d98e8a64 l. 3193-3194")
    if "--use-megatron-fsdp" not in flags:
        for f in on + [f for f in MFSDP_DB_ONLY_FLAGS if f in flags]:
            if f == "--use-nccl-ub":
                unmodelled.append(listed("unmodelled", "--use-nccl-ub", True, ruled=False, reason=
                    "without --use-megatron-fsdp: Megatron's DDP buffers allocated from NCCL's memory pool, "
                    "distributed/param_and_grad_buffer.py @d98e8a64 l. 1136-1160; the same bytes, priced from "
                    "the default allocator"))
            else:
                ignored.append(listed("ignored", f, True, "no --use-megatron-fsdp: only Megatron-FSDP reads it"))
        for f, v in (("--megatron-fsdp-version", version), ("--outer-dp-sharding-strategy", outer)):
            if v is not None:
                ignored.append(listed("ignored", f, v, "no --use-megatron-fsdp: only Megatron-FSDP reads it"))
        return
    strategy = flags.get("--data-parallel-sharding-strategy", "optim_grads_params")  # arguments.py default
    if version == "2":
        if "--use-distributed-optimizer" in flags:
            raise PlannerError(f"{where}--megatron-fsdp-version 2 with --use-distributed-optimizer: Megatron asserts "
                               "'--megatron-fsdp-version 2 is not compatible with --use-distributed-optimizer' "
                               "(megatron/training/arguments.py @d98e8a64 l. 1124-1126)",
                               "drop --use-distributed-optimizer, or --megatron-fsdp-version 2")
        if strategy != "optim_grads_params":
            raise PlannerError(f"{where}--megatron-fsdp-version 2 with --data-parallel-sharding-strategy {strategy}: "
                               "Megatron raises 'MFSDP v2 requires data_parallel_sharding_strategy="
                               "'optim_grads_params'' (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py @d98e8a64 "
                               "l. 666-668)", "use optim_grads_params, or --megatron-fsdp-version 1")
        _mfsdp_v2_refusals(flags, where, job, outer)
        if job.get("sharding_mode") == "megatron_fsdp_hsdp":  # v2's mesh is the whole dp x cp group: no HSDP
            job["sharding_mode"], job["sharding"] = "megatron_fsdp_optim_grads_params", "fsdp"
            job.pop("shard_group", None)
            ignored.append(listed("ignored", "--num-distributed-optimizer-instances",
                                  flags["--num-distributed-optimizer-instances"],
                                  "Megatron-FSDP v2 shards over the whole dp x cp group whatever the instances (its "
                                  "DeviceMesh is pg_collection.dp_cp, mcore_fsdp_adapter.py @d98e8a64 l. 554; no "
                                  "distributed optimizer, arguments.py l. 1124-1126): priced as optim_grads_params"))
        job["mfsdp_v2"] = True
        assumed.append(listed("assumed", "mfsdp_v2", True,
            "--megatron-fsdp-version 2: FullyShardedDataParallelV2 (mcore_fsdp_adapter.py @d98e8a64 l. 489-601) over "
            "megatron_fsdp/experimental/'s buffers: the fp32 main weights, the 16-bit weights and the main gradients "
            "sharded over dp x cp as version 1's optim_grads_params (parameter_group.py l. 155-214), one unit "
            "prefetched (module.py l. 318-353, 402-425), under expert parallelism each MoE layer's experts a unit of "
            "their own over the expert data-parallel group (mcore_fsdp_adapter.py l. 570-583), so one layer's dense "
            "part or its experts' gradients at a time; each unit's gradients copied into one reduce-scatter input and "
            "no queue (module.py l. 434-452, parameter_group.py l. 328-351), the inputs and sharded outputs cached for "
            "the reduce-scatter stream alone (reserved, module.py l. 78-84); the root unit (embedding, output layer, "
            "final norm) released after the forward and the backward, its output-layer gradient held to the backward's "
            "end, its copy-in after its gathered weights are released (module.py l. 427-432); after the optimizer "
            "step each parameter group's fp32 main weights cast into a new 16-bit shard before the old one is "
            "dropped (parameter_group.py l. 269-279) (planner/memory.py [v2])"))
        if [f for f in MFSDP_DOUBLE_BUFFER_FLAGS if f in flags]:  # (--fsdp-double-buffer: the others are refused above)
            ignored.append(listed_all("ignored", [(f, True) for f in MFSDP_DOUBLE_BUFFER_FLAGS if f in flags],
                                      "Megatron-FSDP v2 reads no fsdp_double_buffer: its buffers are allocated on "
                                      "demand (megatron_fsdp/experimental/, mcore_fsdp_adapter.py @d98e8a64 l. 489-601)"))
            on = []
    elif version == "1":
        ignored.append(listed("ignored", "--megatron-fsdp-version", '1',
            'the default, arguments.py @d98e8a64 l. 3158: the one priced'))
    if version != "2" and "--use-distributed-optimizer" not in flags:
        # said (before 2026-12-07 the flag's removal moved nothing and said nothing: tests/ignored_keys.py)
        assumed.append(noted("assumed", "--use-distributed-optimizer", "absent: Megatron-FSDP v1 turns the distributed "
                             "optimizer on itself, with a warning (megatron/training/arguments.py @d98e8a64 l. 1127-1134)"))
    hsdp = job.get("sharding_mode") == "megatron_fsdp_hsdp"
    if outer == "optim":
        if hsdp:
            job["mfsdp_outer_optim"] = True
            assumed.append(listed("assumed", "mfsdp_outer_optim", True, "--outer-dp-sharding-strategy optim under HSDP "
                           "(--num-distributed-optimizer-instances > 1): the fp32 main weights and Adam's moments over "
                           "DP-Outer x DP-Shard (dp x cp), the 16-bit weights and main gradients in the shard group's "
                           "helper buffers, param_and_grad_buffer.py @d98e8a64 l. 2351-2512, 2594-2764, 3691-3800; the "
                           "replicas' all-reduce a reduce-scatter, the weights all-gathered across them at the first "
                           "micro-batch, l. 4134-4213, 4543-4563 (planner/memory.py [oo], step.py [29])"))
        elif strategy != "optim_grads_params" and _int(where, flags, "--num-distributed-optimizer-instances", 1) > 1:
            raise PlannerError(f"{where}--outer-dp-sharding-strategy optim with --data-parallel-sharding-strategy "
                               f"{strategy}: Megatron-FSDP raises 'Optimizer fully-sharded HFSDP is only supported with "
                               "full-sharding on DP-Shard' (param_and_grad_buffer.py @d98e8a64 l. 2502-2512)",
                               "use optim_grads_params, or --outer-dp-sharding-strategy no_shard")
        else:
            ignored.append(listed("ignored", "--outer-dp-sharding-strategy", 'optim',
                "no HSDP: --num-distributed-optimizer-instances 1, Megatron-FSDP reads it only under Hybrid "
                "FSDP, param_and_grad_buffer.py @d98e8a64 l. 2498-2501"))
    elif outer == "no_shard":
        ignored.append(listed("ignored", "--outer-dp-sharding-strategy", 'no_shard',
            'the default, arguments.py @d98e8a64 l. 3193: the one priced'))
    if "--fsdp-manual-registration" in flags:
        ignored.append(listed("ignored", "--fsdp-manual-registration", True,
            'when NCCL registers the buffers, arguments.py @d98e8a64 l. 3184-3186: no byte moves'))
    if not on:
        if "--fsdp-db-use-persist-buf-on-alloc-fail" in flags:
            ignored.append(listed("ignored", "--fsdp-db-use-persist-buf-on-alloc-fail", True,
                'no double buffer: read only by its pools, param_and_grad_buffer.py @d98e8a64 l. 2533-2575'))
        return
    if job.get("sharding_mode") == "ddp":  # no_shard: no bucket allocated from the pools
        ignored.append(listed_all("ignored", [(f, True) for f in on], "--data-parallel-sharding-strategy no_shard: no "
                                  "temporary bucket to pool"))
        return
    job["mfsdp_double_buffer"] = True
    assumed.append(listed("assumed", "mfsdp_double_buffer", True,
                          f"{', '.join(on)} (arguments.py @d98e8a64 l. 1172-1181, 3202): Megatron-"
                          "FSDP's fixed pools, two persistent buffers of a layer unit's gathered weights and two of its gradient "
                          "bucket (param_and_grad_buffer.py l. 2524-2576; planner/memory.py [db])"
                          + ("; --use-nccl-ub allocates every Megatron-FSDP buffer from NCCL's memory pool, a private pool of "
                          "the caching allocator: counted in the allocated and reserved peaks (ncclMemAlloc's granularity "
                          "not priced)" if "--use-nccl-ub" in flags else "")
                          + ("; --megatron-fsdp-max-pool-double-buffer's pools priced as the largest layer unit's"
                          if "--megatron-fsdp-max-pool-double-buffer" in flags else "")))
    if "--fsdp-db-use-persist-buf-on-alloc-fail" in flags:
        unmodelled.append(listed("unmodelled", "--fsdp-db-use-persist-buf-on-alloc-fail", True, "the buckets outside "
                                 "the double buffer's pools, the embedding's and output layer's gradients among them, "
                                 "kept allocated: param_and_grad_buffer.py @d98e8a64 l. 835-836; priced as allocated "
                                 "on demand", ruled=False))


# Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/mcore_fsdp_adapter.py FullyShardedDataParallelV2._validate_config
# l. 603-705: what v2 raises ValueError on at model build, (the flag that sets it, Megatron's message, its line); the
# DDP config's fields come from the flags of their names (training.py l. 2631-2634), num_buckets from --ddp-num-buckets
# (l. 2638)
MFSDP_V2_FLAG_REFUSALS = (
    ("--calculate-per-token-loss", "MFSDP v2 does not currently support per-token loss normalization.", "674-675"),
    ("--fp8-param-gather", "MFSDP v2 does not currently support FP8 or FP4.", "676-677"),
    ("--fp4-param-gather", "MFSDP v2 does not currently support FP8 or FP4.", "676-677"),
    ("--fsdp-db-use-persist-buf-on-alloc-fail", "MFSDP v2 does not support fsdp_db_use_persist_buf_on_alloc_fail: it "
     "allocates communication buffers from PyTorch memory pools.", "681-685"),
    ("--fsdp-manual-registration", "MFSDP v2 does not support fsdp_manual_registration.", "688-689"),
    ("--use-nccl-ub", "MFSDP v2 does not support fsdp_manual_registration. (--use-nccl-ub under --use-megatron-fsdp "
     "sets fsdp_manual_registration: arguments.py l. 1172-1177)", "688-689"),
    ("--delay-wgrad-compute", "MFSDP v2 does not support delay_wgrad_compute.", "690-691"),
    ("--suggested-communication-unit-size", "MFSDP v2 does not support suggested_communication_unit_size.", "692-693"),
    ("--ddp-num-buckets", "MFSDP v2 does not support num_buckets.", "694-695"),
    ("--megatron-fsdp-enable-fine-grained-param-gather",
     "MFSDP v2 does not support megatron_fsdp_enable_fine_grained_param_gather.", "698-701"),
    ("--megatron-fsdp-max-pool-double-buffer", "MFSDP v2 does not support megatron_fsdp_max_pool_double_buffer.",
     "702-703"),
)


def _mfsdp_v2_refusals(flags: dict, where: str, job: dict, outer) -> None:
    """Megatron-FSDP v2's build-time refusals (FullyShardedDataParallelV2._validate_config, mcore_fsdp_adapter.py
    @d98e8a64 l. 603-705), raised here as Megatron raises them: TP, PP or CP above 1 (l. 627-648), an outer-DP sharding
    (l. 670-671), the gradient-accumulation fusion (on unless --no-gradient-accumulation-fusion, arguments.py
    l. 2944-2948; l. 672-673), fp8 / fp4 compute (l. 676-677), CUDA graphs (l. 678-679), and the flags of
    MFSDP_V2_FLAG_REFUSALS."""
    def refuse(what: str, msg: str, lines: str, hint: str):
        raise PlannerError(f"{where}--megatron-fsdp-version 2 with {what}: Megatron raises '{msg}' (megatron/core/"
                           f"distributed/fsdp/mcore_fsdp_adapter.py @d98e8a64 FullyShardedDataParallelV2."
                           f"_validate_config l. {lines})", hint)
    bad = [f"{k}={job.get(k, 1)}" for k in ("tp", "pp", "cp") if job.get(k, 1) != 1]
    if bad:
        refuse(", ".join(bad), "MFSDP v2 does not currently support: tensor_model_parallel_size, "
               "pipeline_model_parallel_size, context_parallel_size (those above 1)", "627-648",
               "run v2 at TP, PP and CP 1, or --megatron-fsdp-version 1")
    if outer == "optim":
        refuse("--outer-dp-sharding-strategy optim", "MFSDP v2 does not currently support outer DP sharding.",
               "670-671", "drop --outer-dp-sharding-strategy, or --megatron-fsdp-version 1")
    if "--no-gradient-accumulation-fusion" not in flags:
        refuse("the gradient-accumulation fusion (on by default, arguments.py l. 2944-2948)",
               "MFSDP v2 does not currently support gradient accumulation fusion.", "672-673",
               "add --no-gradient-accumulation-fusion")
    if job.get("precision") in ("fp8", "nvfp4"):
        refuse(f"{job['precision']} compute", "MFSDP v2 does not currently support FP8 or FP4.", "676-677",
               "drop --fp8-format / --fp4-format, or --megatron-fsdp-version 1")
    if flags.get("--cuda-graph-impl", "none") != "none":
        refuse(f"--cuda-graph-impl {flags['--cuda-graph-impl']}", "MFSDP v2 does not currently support CUDA graphs.",
               "678-679", "drop --cuda-graph-impl, or --megatron-fsdp-version 1")
    for f, msg, lines in MFSDP_V2_FLAG_REFUSALS:
        if f in flags:
            refuse(f, msg, lines, f"drop {f}, or --megatron-fsdp-version 1")


def _unmodelled(flags: dict, where: str, job: dict, spec, tp: int, unmodelled: list[str]) -> None:
    """What the flags set that the planner cannot express and prices otherwise (TrainerConfig
    .unmodelled; the CLI warns, `planner validate` skips a corpus row that has any)."""
    opt = flags.get("--optimizer", "adam")
    if opt in MUON_OPTIMIZERS:  # the job's optimizer muon (memory.py [mu]); dist_muon: the sharding section
        job["optimizer"] = "muon"
        steps = _int(where, flags, "--muon-num-ns-steps", 5)  # arguments.py @d98e8a64 l. 2648-2649, default 5
        if steps != 5:
            job["muon_ns_steps"] = steps  # the job's muon_ns_steps (step.py [28])
        mode = _choice(where, "--muon-tp-mode", flags.get("--muon-tp-mode", "duplicated"),  # default duplicated
                       ("blockwise", "duplicated", "distributed"), "megatron/training/arguments.py @d98e8a64 l. 2650-2651")
        if mode != "duplicated":
            job["muon_tp_mode"] = mode  # the job's muon_tp_mode (step.py [28])
        prec = _choice(where, "--muon-fp32-matmul-prec", flags.get("--muon-fp32-matmul-prec", "medium"),  # default
                       ("low", "medium", "high"), "megatron/training/arguments.py @d98e8a64 l. 2640-2642")  # medium
        if prec != "medium":
            job["muon_fp32_matmul_prec"] = prec  # the job's muon_fp32_matmul_prec (step.py [28])
        if "--muon-use-syrk" in flags:  # arguments.py @d98e8a64 l. 2656-2658 (store_true)
            raise PlannerError(f"{where}--muon-use-syrk: Megatron-LM @d98e8a64's TensorParallelMuon raises 'use_syrk "
                               "requires emerging_optimizers >= 0.4.0.dev0' (megatron/core/optimizer/"
                               "emerging_optimizers.py l. 52-56, 202-207: newton_schulz_tp takes use_syrk from 0.4.0) "
                               "and the Emerging-Optimizers it pins is v0.3.0 (pyproject.toml l. 248), whose "
                               "newton_schulz_tp has no use_syrk (muon_utils.py v0.3.0 l. 228-235)",
                               "drop --muon-use-syrk (the planner prices the pinned v0.3.0's GEMMs)")
        scalar = flags.get("--muon-scalar-optimizer", "adam")  # arguments.py @d98e8a64 l. 2661-2664, default adam
        if scalar != "adam":
            unmodelled.append(listed("unmodelled", "--muon-scalar-optimizer", scalar,
                                     "the scalar parameters' optimizer state is not "
                                     "modelled (Adam's two fp32 moments are priced)", spaced=True))
        if _int(where, flags, "--num-distributed-optimizer-instances", 1) > 1 and job.get("sharding") == "zero1":
            raise PlannerError(f"{where}--optimizer {opt} with --use-distributed-optimizer and "
                               "--num-distributed-optimizer-instances > 1: Megatron-LM's layer-wise distributed "
                               "optimizer asserts 'LayerWiseDistributedOptimizer does not support "
                               "num_distributed_optimizer_instances > 1.' (megatron/core/optimizer/"
                               "layer_wise_optimizer.py @d98e8a64 l. 537-541)",
                               "drop --num-distributed-optimizer-instances")
    elif opt != "adam":
        unmodelled.append(listed("unmodelled", "--optimizer", opt,
                                 "its state is not modelled (Adam's two fp32 moments are priced)", spaced=True))
    for f in ("--fine-grained-activation-offloading", "--cpu-offloading", "--offload-modules"):
        if f in flags:
            unmodelled.append(noted("unmodelled", f,
                                    "offloading to the host is not modelled (everything is priced on the GPU)"))
    if "--export-kd-teacher-load" in flags:  # ModelOpt knowledge distillation (megatron/post_training)
        unmodelled.append(noted("unmodelled", "--export-kd-teacher-load",
                                "a distillation teacher model is held beside the student, not modelled"))
    if "--use-megatron-fsdp" in flags and job.get("sharding_mode") == "ddp":  # no_shard (_megatron_fsdp_buffers)
        unmodelled.append(noted("unmodelled", "--use-megatron-fsdp (no_shard)", "priced as Megatron's DDP (sharding "
                                "none: 16-bit weights, the main gradients, an fp32 master and Adam's moments whole), not "
                                "from Megatron-FSDP's no_shard buffers, which the planner has not compared"))
    n_inst = _int(where, flags, "--num-distributed-optimizer-instances", 1)
    v2 = "--use-megatron-fsdp" in flags and flags.get("--megatron-fsdp-version") == "2"  # instances ignored: _mfsdp_settings
    if n_inst > 1 and not v2 and job.get("sharding_mode") not in ("megatron_fsdp_hsdp", "distributed_optimizer"):
        unmodelled.append(listed("unmodelled", "--num-distributed-optimizer-instances", n_inst,
                                 f"the optimizer is sharded over dp / {n_inst}, "
                                 "priced over dp", spaced=True))
    elif n_inst > 1 and not v2 and "shard_group" not in job:  # the distributed optimizer's instances over dp x cp, not dp alone
        unmodelled.append(listed("unmodelled", "--num-distributed-optimizer-instances", n_inst,
                                 "it divides dp x cp but not dp "
                                 f"({job['gpus'] // max(1, tp * job.get('pp', 1) * job.get('cp', 1))}): the planner's shard "
                                 "group is a number of dp ranks x cp; priced over dp", spaced=True))
    mods = None if "--recompute-modules" not in flags else words_of(flags["--recompute-modules"])
    if mods is not None and job.get("recompute") == "selective" and list(mods) != ["core_attn"]:
        priced = typing.get_args(RecomputeModule)
        if ("shared_experts" in mods and "--moe-shared-expert-overlap" in flags
                and "--moe-shared-expert-intermediate-size" in flags):
            raise PlannerError(f"{where}--recompute-modules shared_experts with --moe-shared-expert-overlap: Megatron-Core "
                               "refuses it ('shared_experts recompute cannot work with --moe-shared-expert-overlap.', "
                               "transformer_config.py @d98e8a64 l. 1991-1998)",
                               "drop --moe-shared-expert-overlap, or leave shared_experts out")
        if mods and all(m in priced for m in mods):  # the job's recompute_modules (planner/recompute_modules.py)
            job["recompute_modules"] = list(mods)
        else:
            unmodelled.append(listed("unmodelled", "--recompute-modules", list(mods), "selective recompute of "
                              + ", ".join(m for m in mods if m not in priced) + " is not modelled (the planner prices "
                              + ", ".join(priced) + "; the stack's default, the attention core's, is priced)", show=" ".join(mods),
                              spaced=True))


def _mesh_dp(gpus: int, mesh: int) -> int | None:
    """The data-parallel ranks (dp x cp's dp) of gpus over a tp x pp x cp mesh; None where the mesh does not divide
    them (or exceeds them): no shard group is read from --num-distributed-optimizer-instances then, and the plan's own
    check refuses the mesh (tp x cp x pp does not divide the GPU count), where a shard group of 0 was set and refused as
    a bare schema field."""
    mesh = max(1, mesh)
    return gpus // mesh if gpus >= mesh and gpus % mesh == 0 else None


# the --optimizer choices the job's optimizer muon prices (arguments.py @d98e8a64 l. 2913-2917; dist_muon the
# deprecated spelling of muon with the layer-wise distributed optimizer, l. 1727-1733)
MUON_OPTIMIZERS = ("muon", "dist_muon")


# megatron/core/transformer/transformer_config.py @d98e8a64 l. 587-589 fp8: Optional[Literal['e4m3', 'hybrid']]
# (argparse takes the Literal's choices); fp8_utils.py l. 761-766 raises "E4M3 and HYBRID are the only supported FP8
# formats" for any other
FP8_FORMATS = ("e4m3", "hybrid")
FP4_FORMATS = ("e2m1",)  # megatron/core/transformer/transformer_config.py fp4: Optional[Literal['e2m1']] @d98e8a64
FP4_RECIPES = ("nvfp4",)  # fp4_recipe Literal['nvfp4', 'custom'] (custom: a user quantizer factory, not modelled)


def _fp4(flags: dict, job: dict, assumed: list, where: str) -> None:
    """--fp4-format e2m1 [--fp4-recipe nvfp4]: NVFP4 training (Megatron-LM arguments.py and
    transformer_config.py @d98e8a64: --fp4-format and --fp8-format cannot be used together;
    --fp4-recipe defaults to nvfp4)."""
    if "--fp8-format" in flags:
        raise PlannerError(f"{where}--fp4-format and --fp8-format cannot be used simultaneously",
                           "keep one (Megatron-LM arguments.py refuses both)")
    fmt, recipe = flags["--fp4-format"], flags.get("--fp4-recipe", "nvfp4")
    if fmt not in FP4_FORMATS:
        raise PlannerError(f"{where}--fp4-format {fmt!r} is not modelled", f"valid: {', '.join(FP4_FORMATS)}")
    if recipe not in FP4_RECIPES:
        raise PlannerError(f"{where}--fp4-recipe {recipe!r} is not modelled", f"valid: {', '.join(FP4_RECIPES)}")
    job["precision"], job["fp8_recipe"] = "nvfp4", "nvfp4"
    if "--fp4-recipe" not in flags:
        assumed.append(listed("assumed", "fp8_recipe", "nvfp4", "--fp4-recipe default (transformer_config.py)"))


def _bf16_layers(flags: dict, job: dict, where: str, ignored: list) -> None:
    """--first-last-layers-bf16 [--num-layers-at-start-in-bf16 N (default 1)]
    [--num-layers-at-end-in-bf16 M (default 1)]: the first N and last M transformer layers
    outside the fp8 / fp4 autocast (megatron/core/transformer/transformer_config.py
    @d98e8a64 first_last_layers_bf16, num_layers_at_start_in_bf16 = num_layers_at_end_in_bf16 = 1)."""
    names = ("--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16")
    if "--first-last-layers-bf16" not in flags or job.get("precision", "bf16") == "bf16":
        ignored += [listed("ignored", f, flags[f],
                           "no fp8 / fp4 training: every layer is bf16") for f in names if f in flags]
        return
    job["bf16_layers_at_start"] = _int(where, flags, "--num-layers-at-start-in-bf16", 1)
    job["bf16_layers_at_end"] = _int(where, flags, "--num-layers-at-end-in-bf16", 1)


DISPATCHER_TYPES = {"alltoall": "alltoall", "allgather": "allgather"}
FLEX_BACKENDS = {"deepep": "deepep", "hybridep": "hybridep"}


def _p2p_overlap(flags: dict, vpp: int, job: dict, assumed: list) -> None:
    """--no-overlap-p2p-communication -> the job's pp_p2p_overlap false: Megatron-LM @d98e8a64
    arguments.py l. 3118-3120 (store_false, dest overlap_p2p_comm: on by default); with virtual stages
    the interleaved schedule then waits on each send/recv (argument_utils.py l. 307 batch_p2p_comm,
    p2p_communication.py l. 607-649), and pp must be > 2 (l. 1000-1009: start-up rule
    MEGATRON_P2P_OVERLAP_PP); without them Megatron sets the overlap off anyway (l. 1010-1017).
    --overlap-p2p-communication is the older store_true spelling of today's default (Megatron-LM
    f9283c5a8a, 2023-05-31, replaced by 4eeff55d1f, 2023-10-12): read as the default, where the command line's
    --trainer-date falls in those dates (megatron_argparse.OLDER_FLAGS; else refused before this runs).
    --overlap-p2p-communication-warmup-flush -> the job's pp_p2p_overlap_warmup_flush true (the
    warm-up's and flush's p2p overlapped too; off by default: step.py [13])."""
    old = "--overlap-p2p-communication" in flags
    if "--no-overlap-p2p-communication" in flags:
        job["pp_p2p_overlap"] = False
        if vpp == 1:
            assumed.append(listed("assumed", "pp_p2p_overlap", False,
                                  "--no-overlap-p2p-communication without virtual stages (Megatron sets the "
                                  "overlap off there anyway: the 1F1B schedule's p2p blocks; arguments.py @d98e8a64 l. 1010-1017)"))
        if old:
            assumed.append(listed("assumed", "pp_p2p_overlap", False,
                                  "--no-overlap-p2p-communication beside the older --overlap-p2p-communication "
                                  "(gone since Megatron-LM 4eeff55d1f, 2023-10-12; @d98e8a64's parser refuses it)"))
    elif old:
        assumed.append(noted("assumed", "pp_p2p_overlap",
                             "--overlap-p2p-communication, the older spelling (Megatron-LM f9283c5a8a 2023-05-31 to "
                             "4eeff55d1f 2023-10-12) of today's default, priced (the interleaved schedule's p2p overlapped); "
                             "Megatron-LM @d98e8a64's parser refuses it: drop it from the script"))
    if "--overlap-p2p-communication-warmup-flush" in flags:  # model_parallel_config.py @d98e8a64 l. 422-429, 570-575
        job["pp_p2p_overlap_warmup_flush"] = True


# --moe-router-load-balancing-type (Megatron-LM @d98e8a64 arguments.py) as the job's moe_load_balancing
# (planner/imbalance.py): the auxiliary losses, and `none` (no balancing: the aux-loss residual its lower bound),
# price as aux_loss; quantile_balancing, a per-expert bias, as aux_loss_free
BALANCING_TYPES = {"aux_loss": "aux_loss", "seq_aux_loss": "aux_loss", "global_aux_loss": "aux_loss", "none": "aux_loss",
                   "sinkhorn": "sinkhorn", "quantile_balancing": "aux_loss_free"}
AUX_LOSS_TYPES = ("aux_loss", "seq_aux_loss", "global_aux_loss")  # router.py @d98e8a64 is_aux_loss_enabled l. 403-408
# the types a list may hold: a list routes by top-k with each auxiliary loss added (router.py @d98e8a64 l. 771-790,
# 803-830; @905c0e386 l. 611-665): Sinkhorn and quantile balancing run only where the type is that string
LIST_TYPES = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")


class BalancingRules(typing.NamedTuple):
    """What differs between the Megatron-Core commits the readers follow, as data (router_balancing): the keys'
    spellings in messages, the commit, the single types its router knows, and its source lines."""
    types_key: str   # "--moe-router-load-balancing-type" / "model.moe_router_load_balancing_type"
    coeff_key: str   # "--moe-aux-loss-coeff" / "model.moe_aux_loss_coeff"
    sep: str         # between a key and its value in a message: " " (a flag) or "=" (an override)
    commit: str
    types: tuple     # the commit's types (transformer_config.py's list)
    types_at: str    # where the commit lists them
    coeff_at: str    # router.py get_aux_loss_coeff
    same_length_at: str  # transformer_config.py's assert of a list of coefficients of the types' length
    sinkhorn_at: str     # router.py's Sinkhorn assert on the coefficient


# Megatron-LM's own pin (its launch scripts' reader) and Megatron-Bridge's Megatron-Core (bridge_moe.py): the same
# list semantics, one type more at d98e8a64 (quantile_balancing)
MEGATRON_LM_BALANCING = BalancingRules(
    "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", " ", "d98e8a64", tuple(BALANCING_TYPES),
    "arguments.py l. 3532-3537 choices; transformer_config.py l. 743-758", "router.py l. 388-401",
    "transformer_config.py l. 1828-1834", "router.py l. 298")
BRIDGE_BALANCING = BalancingRules(
    "model.moe_router_load_balancing_type", "model.moe_aux_loss_coeff", "=", "905c0e386",
    ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"), "transformer_config.py l. 636-648",
    "router.py l. 262-275", "transformer_config.py l. 1220-1226", "router.py l. 247")


def _coefficient(c) -> bool:
    return isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c >= 0


def _shown_as(v, sep: str) -> str:
    """A value as the reader's input spells it: a flag's words (sep " "), an override's [a,b] (sep "=")."""
    if isinstance(v, list):
        words = [_shown_as(x, sep) for x in v]
        return " ".join(words) if sep == " " else "[" + ",".join(words) + "]"
    if isinstance(v, str) and v in BALANCING_TYPES:
        return v
    return f"{v:g}" if isinstance(v, float) else _short(v) if isinstance(v, str) else repr(v)


def router_balancing(kind, coeff, force: bool, expert_bias: bool, rules: BalancingRules, where: str,
                     assumed: list) -> dict:
    """The job's balancing fields of Megatron-Core's router settings, one rule for both readers (Megatron-LM's launch
    scripts, after arguments.py @d98e8a64 l. 1661-1664 turns a one-word list into its word; Megatron-Bridge's
    overrides, as given): `kind` the load-balancing type (a string) or a list of them, `coeff` the auxiliary-loss
    coefficient (a number) or a list, one per type. Megatron-Core (both commits):
    - force load balancing is balanced routing (moe_rank_imbalance 1.0); else the expert bias is aux_loss_free; else
      the type names the rule (BALANCING_TYPES; planner/imbalance.py), a list aux_loss;
    - one type: its coefficient is the loss's where the type is an auxiliary loss, else none is computed (0.0;
      get_aux_loss_coeff); a type priced by another's rule (seq_aux_loss, global_aux_loss and none as aux_loss,
      quantile_balancing as aux_loss_free) is listed as assumed, saying so; Sinkhorn asserts a coefficient of 0 (rules.sinkhorn_at); a list of coefficients beside
      an auxiliary type or sinkhorn is refused (get_aux_loss_coeff returns the list, which the router compares with
      0), beside `none` or quantile_balancing never read (listed as assumed);
    - a list of types (transformer_config.py: a list of coefficients of the same length, asserted): the router
      routes by top-k and computes each auxiliary type's loss with its first entry's coefficient (list.index) on one
      set of scores (compute_routing_scores_for_aux_loss once); `none` adds nothing. So the run routes as under one
      auxiliary loss (imbalance.py's aux_loss rule prices aux_loss, seq_aux_loss, global_aux_loss and none alike)
      and keeps the router's scores once where a coefficient is above 0 (layers/moe.py router_saved_terms):
      moe_aux_loss_coeff is the largest first-entry coefficient among the auxiliary types (its value beyond > 0 is
      not priced). Sinkhorn or quantile balancing in a list is refused: the router runs them only where the type is
      that string, so a list's is never applied.
    What differs between the commits (the type list, the keys, the lines) is `rules`."""
    tk, ck, s, c = rules.types_key, rules.coeff_key, rules.sep, rules.commit

    def _shown(v):
        return _shown_as(v, s)

    job = {"moe_rank_imbalance": 1.0} if force else {"moe_load_balancing": "aux_loss_free"} if expert_bias else {}
    if isinstance(kind, list):
        if not kind:
            raise PlannerError(f"{where}{tk}{s}[]: an empty list of types", f"give a type, or a list of {', '.join(LIST_TYPES)}")
        bad = [k for k in kind if not isinstance(k, str) or k not in LIST_TYPES]
        if bad and bad[0] in ("sinkhorn", "quantile_balancing") and bad[0] in rules.types:
            raise PlannerError(f"{where}{tk}{s}{_shown(kind)}: {bad[0]} in a list, which Megatron-Core {c} never applies "
                               f"(its router runs {bad[0]} only where the type is the string '{bad[0]}'), so the planner "
                               "does not read it", f"give {tk}{s}{bad[0]} alone, or drop it from the list")
        if bad:
            raise PlannerError(f"{where}{tk}{s}{_shown(kind)}: {_shown(bad[0])} is not a type a list of Megatron-Core {c} "
                               f"takes ({rules.types_at})", f"list {', '.join(LIST_TYPES)}")
        if not isinstance(coeff, list) or len(coeff) != len(kind):
            raise PlannerError(f"{where}{tk}{s}{_shown(kind)} with {ck}{s}{_shown(coeff)}: Megatron-Core asserts a list "
                               f"of coefficients of the same length ({rules.same_length_at} @{c})",
                               f"give {ck} {len(kind)} numbers, one per type")
        if not all(_coefficient(x) for x in coeff):
            raise PlannerError(f"{where}{ck}{s}{_shown(coeff)}: not coefficients >= 0", "give numbers >= 0")
        first = {k: float(coeff[kind.index(k)]) for k in kind}  # get_aux_loss_coeff: the type's first entry
        aux = max([x for k, x in first.items() if k in AUX_LOSS_TYPES], default=0.0)
        if not job:
            job["moe_load_balancing"] = "aux_loss"
        job["moe_aux_loss_coeff"] = aux
        assumed.append(Note(f"{tk}{s}{_shown(kind)} with {ck}{s}{_shown(coeff)}", "assumed",
                            ((tk, json_value(kind)), (ck, json_value(coeff))), "priced as auxiliary-loss balancing "
                            "(imbalance.py's aux_loss rule), the router's scores saved once where a coefficient is "
                            f"above 0, moe_aux_loss_coeff {aux:g} the largest ({rules.coeff_at} @{c}: each type's loss "
                            "on the same scores)"))
        return job
    if not isinstance(kind, str) or kind not in rules.types:
        raise PlannerError(f"{where}{tk}{s}{_shown(kind)}: not a type of Megatron-Core {c} ({rules.types_at})",
                           f"valid: {', '.join(rules.types)}, or a list of {', '.join(LIST_TYPES)}")
    if isinstance(coeff, list) and (kind in AUX_LOSS_TYPES or kind == "sinkhorn"):
        raise PlannerError(f"{where}{ck}{s}{_shown(coeff)} beside the one type {kind}: a list of coefficients goes with "
                           "a list of types (Megatron-Core's get_aux_loss_coeff returns the list, which the router "
                           f"compares with 0 and fails, {rules.coeff_at} @{c}"
                           + (f"; Sinkhorn asserts it is 0, {rules.sinkhorn_at})" if kind == "sinkhorn" else ")"),
                           f"give one number >= 0, or list the types: {tk}{s}[...]" if s == "=" else
                           f"give one number >= 0, or one type per coefficient: {tk} {kind} ...")
    if isinstance(coeff, list) and coeff and all(_coefficient(x) for x in coeff):  # `none`, quantile_balancing
        assumed.append(Note(f"{ck}{s}{_shown(coeff)} beside {tk}{s}{kind}", "assumed",
                            ((ck, json_value(coeff)), (tk, json_value(kind))), "never read (get_aux_loss_coeff gives "
                            f"{kind} no auxiliary loss, {rules.coeff_at} @{c}): moe_aux_loss_coeff 0"))
        coeff = 0.0
    if not _coefficient(coeff):
        raise PlannerError(f"{where}{ck}{s}{_shown(coeff)}: not a coefficient >= 0", "give one number >= 0")
    if kind == "sinkhorn" and coeff > 0:
        raise PlannerError(f"{where}{tk}{s}sinkhorn with {ck}{s}{_shown(coeff)}: Megatron-Core {c} asserts a "
                           f"coefficient of 0 under Sinkhorn ({rules.sinkhorn_at}: 'Sinkhorn routing does not support "
                           "aux loss'), so the run stops at its first step", f"give {ck}{s}0, or another type")
    if kind != BALANCING_TYPES[kind]:  # seq_aux_loss, global_aux_loss, none, quantile_balancing: read, priced alike
        rule = BALANCING_TYPES[kind]
        assumed.append(Note(f"{tk}{s}{kind}", "assumed", ((tk, kind),),
                            (f"priced by planner/imbalance.py's {rule} rule, which prices aux_loss, seq_aux_loss, "
                             "global_aux_loss and none alike and quantile_balancing as aux_loss_free (a per-expert bias)"
                             if not job else "the routing imbalance is the "
                             + ("forced balancing's" if force else "expert bias's") + " (planner/imbalance.py)")
                            + ("; an auxiliary loss computed where the coefficient is above 0" if kind in AUX_LOSS_TYPES
                               else "; no auxiliary loss computed")))
    if not job:
        job["moe_load_balancing"] = BALANCING_TYPES[kind]
    job["moe_aux_loss_coeff"] = float(coeff) if kind in AUX_LOSS_TYPES else 0.0
    return job


def _balancing(where: str, flags: dict, job: dict, assumed: list) -> None:
    """The MoE routing imbalance and the auxiliary loss's coefficient of Megatron-LM's flags (router_balancing, the
    rule Megatron-Bridge's reader shares): --moe-router-force-load-balancing, --moe-router-enable-expert-bias,
    --moe-router-load-balancing-type (nargs '+', default aux_loss) and --moe-aux-loss-coeff (nargs '+', default
    0.0), a one-word list turned into its word as arguments.py @d98e8a64 l. 1661-1664 does. A coefficient word is
    read as a number and refused when negative, naming the word."""
    raw_kinds, raw = flags.get("--moe-router-load-balancing-type"), flags.get("--moe-aux-loss-coeff")
    kinds = words_of(raw_kinds) or ["aux_loss"]
    if raw is None:
        coeffs = [0.0]
        assumed.append(noted("assumed", "moe_aux_loss_coeff",
                             "0.0 (no --moe-aux-loss-coeff: Megatron-LM arguments.py's default; no "
                             "auxiliary loss computed, none of its scores kept)"))
    else:
        coeffs = [_non_negative(where, "--moe-aux-loss-coeff", w, _float(where, {"--moe-aux-loss-coeff": w},
                                                                          "--moe-aux-loss-coeff")) for w in words_of(raw)]
    force, bias = "--moe-router-force-load-balancing" in flags, "--moe-router-enable-expert-bias" in flags
    job.update(router_balancing(kinds[0] if len(kinds) == 1 else kinds, coeffs[0] if len(coeffs) == 1 else coeffs,
                                force, bias, MEGATRON_LM_BALANCING, where, assumed))
    if raw_kinds is None and not force and not bias:
        assumed.append(noted("assumed", "moe_load_balancing",
                             "aux_loss (no --moe-router-load-balancing-type: Megatron-LM arguments.py's "
                             "default; the routing imbalance rule of planner/imbalance.py)"))


ROUTER_DTYPES = ("fp32", "fp64")  # transformer_config.py @d98e8a64 l. 811 moe_router_dtype Optional[Literal['fp32', 'fp64']]


def _router(where: str, flags: dict, job: dict, assumed: list) -> None:
    """The router's path (planner/layers/moe.py router_saved_terms [10]) beyond the auxiliary loss's coefficient
    (moe_aux_loss_coeff: _balancing): --moe-z-loss-coeff is moe_z_loss_coeff (absent: none, transformer_config.py),
    --moe-router-pre-softmax moe_router_pre_softmax, --moe-router-dtype moe_router_dtype (absent: the input's
    dtype)."""
    if "--moe-z-loss-coeff" in flags:
        z = _float(where, flags, "--moe-z-loss-coeff")
        job["moe_z_loss_coeff"] = _non_negative(where, "--moe-z-loss-coeff", flags["--moe-z-loss-coeff"], z)
    job["moe_router_pre_softmax"] = "--moe-router-pre-softmax" in flags
    if "--moe-router-dtype" in flags:
        job["moe_router_dtype"] = _choice(where, "--moe-router-dtype", flags["--moe-router-dtype"], ROUTER_DTYPES,
                                          "transformer_config.py @d98e8a64 l. 811 moe_router_dtype "
                                          "Optional[Literal['fp32', 'fp64']]")


#: the :SIZE:COUNT pairs PyTorch reads of CUBLAS_WORKSPACE_CONFIG (pytorch aten/src/ATen/cuda/CublasHandlePool.cpp
#: parseChosenWorkspaceSize: std::regex ":([0-9]+):([0-9]+)" searched through the value; none found: TORCH_WARN "Could
#: not parse CUBLAS_WORKSPACE_CONFIG, using default workspace size")
_CUBLAS_PAIR = re.compile(r":[0-9]+:[0-9]+")


def read_nccl_algo(env: dict, job: dict, assumed: list) -> None:
    """The launch line's NCCL_ALGO (ScriptWords.env: the script's export or the line's `NCCL_ALGO=... torchrun`) ->
    the job's nccl_algo: the collectives priced with the algorithms it leaves them (comm.nccl_algo_candidates, which
    refuses a value NCCL or the model cannot run). Megatron-LM's and Megatron-Bridge's launch scripts alike."""
    if env.get("NCCL_ALGO"):
        job["nccl_algo"] = env["NCCL_ALGO"]
        assumed.append(listed("assumed", "nccl_algo", env["NCCL_ALGO"], "the launch line's NCCL_ALGO (the script "
                              "sets it): its collectives priced with the algorithms it leaves them"))


def read_nccl_proto(env: dict, job: dict, assumed: list) -> None:
    """The launch line's NCCL_PROTO (ScriptWords.env, as read_nccl_algo) -> the job's nccl_proto: the collectives
    priced under the protocols it leaves them (comm.nccl_proto_protocols, which refuses a value NCCL refuses or one
    leaving a collective no protocol). Megatron-LM's and Megatron-Bridge's launch scripts alike; Megatron-LM's CI
    exports NCCL_PROTO=simple where the launcher has not (tests/functional_tests/shell_test_utils/_run_training.sh
    @d98e8a64 l. 58)."""
    if env.get("NCCL_PROTO"):
        job["nccl_proto"] = env["NCCL_PROTO"]
        assumed.append(listed("assumed", "nccl_proto", env["NCCL_PROTO"], "the launch line's NCCL_PROTO (the script "
                              "sets it): its collectives priced under the protocols it leaves them"))


NCCL_NVLS_ENABLE_VALUES = ("0", "1", "2")  # the job field's (schema Job.nccl_nvls_enable; comm.py [22])


# the plan fields of the run's NCCL environment, their variables, and the cost model's function that prices each: the
# collectives' algorithms (comm.nccl_algo_candidates), protocols (comm.nccl_proto_protocols) and NVLink SHARP on or off
# (comm.nvls_enabled); read by read_nccl_env (the launch scripts: Megatron, Megatron-DeepSpeed, Megatron-Bridge,
# torchtitan 0.3.0's launch line: torchtitan03.parse_launch) and megatron_ci.nccl_env (the CI corpus' environment),
# written by nccl_exports and export's notes
NCCL_ENV_FIELDS = (("nccl_algo", "NCCL_ALGO", "comm.nccl_algo_candidates"),
                   ("nccl_proto", "NCCL_PROTO", "comm.nccl_proto_protocols"),
                   ("nccl_nvls_enable", "NCCL_NVLS_ENABLE", "comm.nvls_enabled"))


def nccl_env_of(plan: dict) -> list[tuple[str, str, object]]:
    """(field, variable, value) of the plan's NCCL environment as priced: each field the plan sets (nccl_nvls_enable 0
    included; an empty nccl_algo / nccl_proto is none)."""
    return [(f, var, plan[f]) for f, var, _ in NCCL_ENV_FIELDS if plan.get(f) is not None and plan.get(f) != ""]


def nccl_exports(plan: dict, why: Optional[dict] = None) -> list[str]:
    """The plan's NCCL environment as priced (nccl_env_of), as a launch script's export lines, read back by
    read_nccl_env (the Megatron and Megatron-DeepSpeed scripts, torchtitan 0.3.0's launch line). With `why` (the
    Megatron-Bridge launch: export._megatron_bridge) each export follows a comment naming the plan field and the
    function that priced it (NCCL_ENV_FIELDS), then why's text for that field, if any."""
    priced_by = {f: by for f, _, by in NCCL_ENV_FIELDS}
    lines = []
    for field, var, value in nccl_env_of(plan):
        if why is not None:
            lines.append(f"# {var}: as priced (the plan's {field}: {priced_by[field]}){why.get(field, '')}")
        lines.append(f"export {var}={value}")
    return lines


# NCCL's reading of an integer variable (NVIDIA/nccl @5067397c src/misc/param.cc ncclLoadParam l. 93-99; v2.20.3-1
# l. 68-74 the same): strtoll(str, nullptr, 0), C's: leading white space, a sign, then a 0x / 0X (hexadecimal) or 0
# (octal) prefix or decimal digits, read up to the first character that is no digit of the base (the rest dropped);
# no digits: 0; outside the int64 range: errno ERANGE, and NCCL keeps the parameter's default
_STRTOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))?")


def nccl_int(text: str) -> Optional[int]:
    """The integer NCCL reads from a variable's text (_STRTOLL), None where strtoll finds it out of range (NCCL's
    default then)."""
    m = _STRTOLL.match(text)
    sign, hexa, octal, dec = m.groups()
    n = int(hexa, 16) if hexa else int(octal, 8) if octal else int(dec) if dec else 0
    n = -n if sign == "-" else n
    return n if -2**63 <= n < 2**63 else None


def nccl_nvls_enable_value(text: str) -> tuple[int, str]:
    """An NCCL_NVLS_ENABLE value -> (the job's nccl_nvls_enable, how NCCL reads the text where it is none of 0, 1, 2;
    '' for those), the one reading of the launch scripts' reader (read_nccl_nvls_enable) and the CI corpus'
    (megatron_ci.nccl_env). NCCL reads the variable as an integer (nccl_int), its default 2 where unset, empty or out
    of range, and then (src/transport/nvls.cc ncclNvlsInit @5067397c l. 262-276; v2.20.3-1 l. 240-254): 0 NVLS off, 2
    the GPU's multicast support, any other number NVLS forced on, which the job field spells 1 (schema
    Job.nccl_nvls_enable: 0, 1 or 2). So any text is a value NCCL runs with: one other than 0, 1, 2 (3, -1, 0x2, yes,
    2x) is read as NCCL reads it, never refused, and the reading is said. A forced value on hardware without NVLS is
    refused as 1 is (plan._nccl_nvls_enable): @5067397c nvls.cc l. 372-380 fails the communicator whose
    multicast bind fails whatever the forcing value (v2.27.3-1 l. 282-288 failed only 1 and went on without NVLS)."""
    if text in NCCL_NVLS_ENABLE_VALUES:
        return int(text), ""
    n, shown = nccl_int(text), short_value(text)
    if n is None:
        return 2, f"NCCL reads {shown} as out of range and keeps its default 2 (NVLS where the GPU supports it)"
    if n in (0, 2):
        return n, f"NCCL reads {shown} as {n} (C's strtoll)" + (": NVLS off" if n == 0 else ", its default")
    return 1, f"NCCL reads {shown} as {n}: any number but 0 and 2 forces NVLS on, as 1 does"


def read_nccl_nvls_enable(env: dict, job: dict, assumed: list) -> None:
    """The launch line's NCCL_NVLS_ENABLE (ScriptWords.env, as read_nccl_algo) -> the job's nccl_nvls_enable, as NCCL
    reads it (nccl_nvls_enable_value: 0, 1 or 2, or another text read as NCCL reads it, said in the line): 0 prices
    the all-reduces without NVLS and NVLS-tree (comm.nvls_enabled, comm.py [22]). Megatron-LM's CI exports 0 where the
    launcher has not (tests/functional_tests/shell_test_utils/_run_training.sh @d98e8a64 l. 61)."""
    value = env.get("NCCL_NVLS_ENABLE")
    if value is None or value == "":
        return
    n, how = nccl_nvls_enable_value(value)
    job["nccl_nvls_enable"] = n
    assumed.append(listed("assumed", "nccl_nvls_enable", n if how else value, "the launch line's NCCL_NVLS_ENABLE (the "
                          "script sets it" + (f"; {how}" if how else "") + ")"
                          + (": its all-reduces priced without NVLS and NVLS-tree" if n == 0 else "")))


def read_nccl_env(env: dict, job: dict, assumed: list) -> None:
    """The launch line's NCCL environment (NCCL_ENV_FIELDS) -> the job's fields, in the table's order:
    read_nccl_algo, read_nccl_proto, read_nccl_nvls_enable. The Megatron-LM, Megatron-DeepSpeed and Megatron-Bridge
    launch scripts and torchtitan 0.3.0's launch line alike."""
    read_nccl_algo(env, job, assumed)
    read_nccl_proto(env, job, assumed)
    read_nccl_nvls_enable(env, job, assumed)


def _exported_cublas(env: dict, cfg) -> None:
    """A launch script that exports CUBLAS_WORKSPACE_CONFIG (the export writes it so: export._megatron) -> the job's
    cublas_workspace_config: its value in the launch line's environment (ScriptWords.env: the last export before the
    launch line, one of several assignments of one `export A=1 B=2` too, not one taken back by `export -n`, or the
    line's own `CUBLAS_WORKSPACE_CONFIG=... torchrun`); it wins over --deterministic-mode's, which Megatron sets only
    where the launcher has not (training/determinism.py @d98e8a64 l. 114-116 env.setdefault; dated:
    plan._cublas_workspace). PyTorch reads the :SIZE:COUNT pairs it finds in the value (_CUBLAS_PAIR), those pairs are
    the job's; a value with none is listed as ignored, as PyTorch warns and takes its default workspace (priced so:
    memory.py [ws])."""
    value = env.get("CUBLAS_WORKSPACE_CONFIG")
    if value is None:
        return
    pairs = "".join(_CUBLAS_PAIR.findall(value))
    if not pairs:
        cfg.ignored.append(listed("ignored", "CUBLAS_WORKSPACE_CONFIG", value, "no :SIZE:COUNT pair in it: PyTorch "
                                  "warns and takes its default cuBLAS workspace (CublasHandlePool.cpp "
                                  "parseChosenWorkspaceSize), as priced (planner/memory.py [ws])"))
        return
    value = pairs
    cfg.job["cublas_workspace_config"] = value
    cfg.assumed.append(listed("assumed", "cublas_workspace_config", value,
                              "the script exports CUBLAS_WORKSPACE_CONFIG "
                              "(planner/memory.py [ws])"))


def _deterministic(flags: dict, job: dict) -> None:
    """--deterministic-mode -> the job's deterministic_mode. The CUBLAS_WORKSPACE_CONFIG and NCCL_ALGO it sets where
    the launcher has not are the plan's, dated by the job's trainer_date (plan._cublas_workspace, _nccl_algo on stack
    runs.deterministic_cublas_workspace / deterministic_nccl_algo: Megatron-LM sets them from 3ab71eeb3e,
    2026-07-08, training/determinism.py @d98e8a64 l. 27-31, 114-116), listed as assumed there; a script's export is
    the job's own (_exported_cublas, read_nccl_algo) and wins. Its slower kernels stay not modelled (NOT_MODELLED)."""
    if _on(flags, "--use-flash-attn"):  # read by no model code at @d98e8a64 (arguments.py l. 2910); refused beside
        job["use_flash_attn"] = True  # --deterministic-mode from ac08742c96 to 3ab71eeb3e (MEGATRON_DETERMINISTIC_USE_FLASH_ATTN)
    if not _on(flags, "--deterministic-mode"):
        return
    job["deterministic_mode"] = True  # the job field the export writes back as the flag (export._megatron)


def _on(flags: dict, flag: str) -> bool:
    """A store_true flag given (an argument file's `--flag true` / `1` as given; `false` / `0` as absent)."""
    return flag in flags and (flags[flag] is True or str(flags[flag]).lower() in ("true", "1"))


def _router_padding(where: str, flags: dict, job: dict, assumed: list, ignored: list) -> None:
    """--moe-router-padding-for-quantization (or --moe-router-padding-for-fp8, its older spelling, which sets it:
    transformer_config.py @d98e8a64 l. 2641-2647) -> the job's moe_router_padding, and
    --enable-experimental -> enable_experimental (arguments.py l. 3643): with moe_permute_fusion they make each MoE
    layer's dispatcher keep the padded int32 routing map (planner/layers/moe.py padded_routing_map_bytes [17]). On an
    MoE model absent, the padding is off as in Megatron-LM, listed as assumed where an fp8 / fp4 recipe could run it;
    on a dense model the padding flag is listed as ignored (Megatron builds no router). Megatron's own refusals
    (no fp8 / fp4, the allgather dispatcher) are the plan's (plan._router_padding_ok)."""
    given = [f for f in ROUTER_PADDING_FLAGS if _on(flags, f)]
    experimental = _on(flags, "--enable-experimental")
    if experimental:
        job["enable_experimental"] = True
    if "--num-experts" not in flags:
        for f in given:
            ignored.append(listed("ignored", f, flags[f], "no --num-experts: a dense model builds no router, the flag "
                                  "pads nothing"))
        return
    if given:
        job["moe_router_padding"] = True
        if "--moe-router-padding-for-fp8" in given:
            assumed.append(listed("assumed", "moe_router_padding", True,
                                  "--moe-router-padding-for-fp8, the older spelling "
                                  "that sets it (transformer_config.py @d98e8a64 l. 2641-2647)"))
        if not experimental:
            assumed.append(listed("assumed", "enable_experimental", False,
                                  "no --enable-experimental (Megatron-LM's default): the routing map "
                                  "is padded in place by pad_routing_map (moe_utils.py @d98e8a64 l. 731-763), no int32 copy kept"))
    elif "--fp8-format" in flags or "--fp4-format" in flags:
        assumed.append(listed("assumed", "moe_router_padding", False, "no --moe-router-padding-for-quantization "
                       "(Megatron-LM's default, transformer_config.py @d98e8a64 l. 771)"))


def _non_negative(where: str, name: str, raw, value: float) -> float:
    """A loss coefficient as given, refused when negative: a negative coefficient rewards imbalance (or large
    logits), which no run means; the planner does not clamp it to 0 (the guide: nothing given is clamped)."""
    if value < 0.0:
        raise PlannerError(f"{where}{name} {_short(raw)} is negative",
                           "give a coefficient >= 0 (0: the loss is not computed)")
    return value


def _dispatcher(where: str, flags: dict, job: dict, assumed: list) -> None:
    """The MoE token dispatcher of Megatron's flags (planner/dispatch.py [1]):
    --moe-token-dispatcher-type alltoall | allgather | flex (default allgather, arguments.py);
    flex with --moe-flex-dispatcher-backend deepep (its default) | hybridep; the older
    --moe-enable-deepep is flex with DeepEP."""
    kind = flags.get("--moe-token-dispatcher-type")
    if "--moe-enable-deepep" in flags:
        kind = "flex"
    if kind is None:
        job["moe_dispatcher"] = "allgather"
        assumed.append(noted("assumed", "moe_dispatcher",
                             "allgather (no --moe-token-dispatcher-type: Megatron-LM arguments.py's default)"))
        return
    if kind == "flex":
        backend = flags.get("--moe-flex-dispatcher-backend") or "deepep"
        if backend not in FLEX_BACKENDS:
            raise PlannerError(f"{where}--moe-flex-dispatcher-backend {backend!r} is not one the planner prices",
                               f"use one of {', '.join(FLEX_BACKENDS)}")
        job["moe_dispatcher"] = FLEX_BACKENDS[backend]
        return
    if kind not in DISPATCHER_TYPES:
        raise PlannerError(f"{where}--moe-token-dispatcher-type {kind!r} is not one the planner prices",
                           "use alltoall, allgather or flex")
    job["moe_dispatcher"] = DISPATCHER_TYPES[kind]


WIRE_DTYPE_FLAGS = ("--moe-dispatch-fwd-dtype", "--moe-combine-bwd-dtype")


def _wire_dtypes(where: str, flags: dict) -> None:
    """--moe-dispatch-fwd-dtype / --moe-combine-bwd-dtype (TransformerConfig moe_dispatch_fwd_dtype,
    moe_combine_bwd_dtype @d98e8a64 l. 997-1009, arguments through arguments.py's ArgumentGroupFactory):
    bf16 is the default (nothing to read); mxfp8 quantizes the MoE dispatch's forward payload (the
    combine's backward gradient) on the wire, and transformer_config.py __post_init__ l. 1776-1790 refuses
    it unless --moe-token-dispatcher-type flex with --moe-flex-dispatcher-backend ncclep, a backend the
    planner does not price (_dispatcher refuses it): so Megatron refuses it with every dispatcher the
    reader takes (planner/dispatch.py [11]), and the reader refuses it rather than price it without."""
    for flag in WIRE_DTYPE_FLAGS:
        value = flags.get(flag)
        if value is not None and value != "bf16":
            raise PlannerError(
                f"{where}{flag} {_short(value)}: Megatron-LM refuses a wire dtype other than bf16 unless the dispatcher "
                "is --moe-token-dispatcher-type flex with --moe-flex-dispatcher-backend ncclep ('moe_dispatch_fwd_dtype "
                "/ moe_combine_bwd_dtype require the ncclep flex dispatcher backend', transformer_config.py @d98e8a64 "
                "l. 1776-1784), a backend the planner does not price",
                f"remove {flag} (or give bf16)")


def _cuda_graphs(where: str, flags: dict, job: dict, assumed: list) -> None:
    """The job's cuda_graph_impl and cuda_graph_scope (planner/cuda_graphs.py) from Megatron's flags
    (arguments.py @d98e8a64 l. 611-641: --enable-cuda-graph is --cuda-graph-impl local,
    --external-cuda-graph transformer_engine, neither beside --cuda-graph-impl, not both;
    --cuda-graph-scope the deprecated --cuda-graph-modules, not beside it; cuda_graph_config.py
    normalize_cuda_graph_modules: `full` alone is the whole layer (an empty list), `full_iteration`
    is --cuda-graph-impl full_iteration). The combinations are checked where the job is priced;
    modules without an implementation change nothing in Megatron (transformer_config.py l. 1087)
    and are dropped with a note."""
    impl = flags.get("--cuda-graph-impl")
    old = [f for f in ("--enable-cuda-graph", "--external-cuda-graph") if f in flags]
    if old and impl not in (None, "none"):
        raise PlannerError(f"{where}{old[0]} beside --cuda-graph-impl {impl}: Megatron refuses them together",
                           "keep --cuda-graph-impl only")
    if len(old) == 2:
        raise PlannerError(f"{where}--enable-cuda-graph and --external-cuda-graph together: Megatron refuses them",
                           "keep one (or --cuda-graph-impl local | transformer_engine)")
    if old:
        impl = "local" if old[0] == "--enable-cuda-graph" else "transformer_engine"
    mods = words_of(flags.get("--cuda-graph-modules"))
    if "--cuda-graph-scope" in flags:
        if mods:
            raise PlannerError(f"{where}--cuda-graph-scope and --cuda-graph-modules together: Megatron refuses them",
                               "keep --cuda-graph-modules")
        mods = words_of(flags["--cuda-graph-scope"])
    if "full_iteration" in mods:
        if mods != ["full_iteration"] or impl not in (None, "none", "local", "full_iteration"):
            raise PlannerError(f"{where}--cuda-graph-modules {' '.join(mods)} with --cuda-graph-impl {impl}: Megatron "
                               "migrates full_iteration to --cuda-graph-impl full_iteration alone", "use --cuda-graph-impl full_iteration")
        impl, mods = "full_iteration", []
    if "full" in mods:
        if mods != ["full"]:
            raise PlannerError(f"{where}--cuda-graph-modules full with other modules: Megatron refuses it",
                               "full alone (the whole layer), or list the modules")
        mods = []
    bad = [m for m in mods if m not in CUDA_GRAPH_SCOPES]
    if bad:
        raise PlannerError(f"{where}--cuda-graph-modules {' '.join(bad)}: not a module Megatron graphs",
                           f"use {', '.join(CUDA_GRAPH_SCOPES)}")
    if impl is not None and impl not in CUDA_GRAPH_IMPLS:
        raise PlannerError(f"{where}--cuda-graph-impl {impl!r}: not one of Megatron's", f"use {', '.join(CUDA_GRAPH_IMPLS)}")
    if impl in (None, "none"):
        if mods:
            assumed.append(noted("assumed", "cuda_graph_scope",
                                 f"--cuda-graph-modules {' '.join(mods)} without --cuda-graph-impl has "
                                 "no effect in Megatron (cuda_graph_impl none): no CUDA graphs"))
        return
    job["cuda_graph_impl"] = impl
    if mods:
        job["cuda_graph_scope"] = mods
