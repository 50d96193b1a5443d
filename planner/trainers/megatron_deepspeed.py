"""A Megatron-DeepSpeed launch script read as the job it launches (issue 22).

microsoft/Megatron-DeepSpeed (and BigScience's fork, which trained BLOOM) is Megatron-LM's
argument list plus DeepSpeed's: `deepspeed pretrain_gpt.py ... --deepspeed --deepspeed_config
ds_config.json --zero-stage 1 ...`. The Megatron reader (megatron.py) recognizes it from the flags
present, never from a file name: any of `--deepspeed`, `--deepspeed_config` (also spelled
`--deepspeed-config`), `--deepscale` / `--deepscale_config`, `--zero-stage`,
`--deepspeed-activation-checkpointing`, `--partition-activations`, `--no-pipeline-parallel`
(MDS_MARKERS). Then:

- the stack is `megatron-deepspeed` (stack_db/megatron-deepspeed.yaml; `--stack` on the command
  line replaces it, with a note, as for any file value); BigScience's where the script has one of its fork's flags
  (below); `megatron-deepspeed-2021` where the command line declares it (STACK_2021: the 2021 fork's flags are the later
  fork's, so a script cannot name it; read with its one rule of its own, GPTModelPipe only at pp > 1, pipeline_model);
- the ds_config JSON the script names is read through the DeepSpeed JSON reader (deepspeed.py:
  ZeRO stage, batch keys, bf16 / fp16, ZeRO-3 knobs) at the script's TP and PP: the file the
  script itself writes with `cat <<EOT > $CONFIG_JSON` (its body expanded with the script's
  constants: megatron.command_words), else the file resolved relative to the script; neither
  found, or a body with a variable the script does not set, is refused naming it (exit 2);
- which side wins where both state a setting, read at microsoft/Megatron-DeepSpeed @f4157bea [1]:
  * the ZeRO stage: the JSON's. training.py l. 504-623 hands DeepSpeed `config=args.deepspeed_config_dict`
    (the JSON); `--zero-stage` (default 1, arguments.py l. 1487) is read by pretrain_gpt.py l. 46-50
    `deepspeed.zero.Init(enabled=args.zero_stage == 3)` (the model built partitioned) and by
    optimizer statistics (training.py l. 1056). A difference between 1 and 2 (or 0) is listed as
    assumed; one side 3 and the other not is refused: with the JSON at 3 the model is built whole on
    every GPU before the engine partitions it, with `--zero-stage 3` alone it is built partitioned for
    an engine that never gathers it;
  * the micro-batch: Megatron's data loader yields `--micro-batch-size` samples (training.py
    l. 715) while DeepSpeed's engine counts `train_micro_batch_size_per_gpu`: both stated and
    different is refused, naming both;
  * the global batch: Megatron's. training.py l. 1253-1258 calls DeepSpeed's
    `set_train_batch_size(dp x --micro-batch-size x num_microbatches)` every step, which keeps the
    micro-batch and sets the accumulation (deepspeed/runtime/engine.py @38327e07 l. 524-540; it
    raises unless the batch is a multiple of micro x dp, refused here likewise); a JSON
    `train_batch_size` that differs is listed as assumed (DeepSpeed still checks the JSON's own
    triple at start-up, deepspeed/runtime/config.py _batch_assertion: the DeepSpeed reader does);
  * bf16 / fp16: the JSON's `bf16.enabled` / `fp16.enabled` run the engine; a script's `--bf16`
    with the JSON's fp16 enabled, or `--fp16` with bf16, is refused;
  * data-parallel overlap: the JSON's `zero_optimization.overlap_comm` (the engine's reduction; absent,
    DeepSpeed's default at the stage, deepspeed.py overlap_default), not `--overlap-grad-reduce` (Megatron's DDP,
    not built under DeepSpeed); off under DeepSpeed's pipeline model (below).
- the model: without `--no-pipeline-parallel` Megatron-DeepSpeed builds GPTModelPipe, a PipelineModule, at every
  pipeline size, pp 1 too ([1] pretrain_gpt.py model_provider l. 51-56; GPTModel only with the flag, l. 83), and
  deepspeed.initialize runs it under the PipelineEngine ([2] deepspeed/__init__.py l. 178, 209). So a JSON at ZeRO
  stage 2 or 3 without the flag is refused (the engine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline
  parallelism', pipe/engine.py @38327e07 l. 77-78: the job stops at start-up; hint: add --no-pipeline-parallel);
  ZeRO-1's overlap_comm is off under it (engine.py l. 1639-1642: read as false, the JSON's key listed as ignored; at
  pp > 1 the stack's overlap.dp_comm_overlap_with_pp prices it off whatever the job says, plan.dp_overlap); the
  tied embedding's gradient all-reduce between the first and the last stage (TiedLayerSpec,
  PipelineEngine._exec_reduce_tied_grads, pipe/engine.py l. 275-291) is priced in the step's pp_comm at pp > 1 (the
  stack's pipeline_tied_grad_allreduce, step.py [20]; at pp 1 its group is the one rank); activation checkpointing as above (its uniform-only rule). With the flag the model is
  Megatron's GPTModel, no pipeline engine: the JSON's stage runs and its overlap_comm acts (listed as assumed).
- activation checkpointing to the job's recompute [1]: `--checkpoint-activations` re-runs every
  layer in chunks of `--checkpoint-num-layers` (default 1) in both models (transformer.py l. 1691,
  2082; gpt_model.py l. 446-447): recompute full (a chunk over 1 layer: the existing reader's
  uniform chunk note). `--recompute-granularity full` with a method other than uniform is not run by
  DeepSpeed's pipeline model (gpt_model.py l. 446-452: interval 0; the model GPTModelPipe unless
  `--no-pipeline-parallel`): recompute none, listed. `--deepspeed-activation-checkpointing` swaps
  Megatron's checkpoint function for deepspeed.checkpointing's (initialize.py l. 175-193, 266): the
  same layers re-run, listed as ignored unless `--partition-activations`, `--checkpoint-in-cpu` (kept
  on the host) or `--contigious-checkpointing` change what is kept. `--partition-activations` under
  full recompute at TP > 1 is the job's partition_activations (issue 21): each TP rank keeps 1/tp of
  every re-run layer's input and the ranks all-gather it before the re-run (memory.py [pa], step.tp_comm;
  DeepSpeed's configure takes the flag over the JSON's activation_checkpointing section,
  checkpointing.py @38327e07 l. 1084-1088); under selective recompute it is refused (the attention
  core's checkpointed inputs would split, not priced), and so are the other two with recompute on;
  else each is listed as ignored (no effect).
- `--use-distributed-optimizer` (issue 21) is listed as ignored, naming the JSON's stage that runs
  instead: under --deepspeed get_megatron_optimizer returns the bare optimizer before its distributed-
  optimizer branch (megatron/optimizer/__init__.py l. 115-116) and get_model wraps no DDP (training.py
  l. 406-407); with --DDP-impl other than local or --no-contiguous-buffers-in-local-ddp it is refused,
  as validate_args asserts (arguments.py l. 213-215).
- BigScience's fork [3] (BLOOM-176B's tr11-176B-ml.slurm): a script with one of its own flags (BIGSCIENCE_FLAGS, none
  in [1]'s arguments.py, whose parse_args refuses an unknown flag) is read on the stack megatron-deepspeed-bigscience
  (the fork and DeepSpeed as BLOOM ran them, stack_db/megatron-deepspeed-bigscience.yaml); `--position-embedding-type
  absolute|rotary|alibi` read as learned / rope / ALiBi (a model without position parameters; the
  bias added through baddbmm's input priced in the eager core, layers/attention.py [12]); `--pad-vocab-size-to N` the vocabulary
  (refused unless divisible by --make-vocab-size-divisible-by and TP, as tokenizer.py l. 72-82);
  `--pp-partition-method type:transformer|embedding` as account_for_embedding/loss_in_pipeline_split
  (DeepSpeed's type: partition balances the layers and both tied embeddings, the first (L + 2) mod PP stages
  one unit more, stack_db megatron-deepspeed-bigscience pipeline_split front; an end stage of no transformer layer, on
  which the fork's pipeline fails, is refused by start-up rule DEEPSPEED_PP_SPLIT_ENDS; any other method refused); `--embed-layernorm` as the model's embedding_norm (model_fields:
  its parameters and kept input on the first stage, memory.py [en]); `--sync-tp-duplicated-parameters`
  as the job's sync_tp_duplicated_parameters (its all-reduces in step.tp_comm [sy]); `--rampup-batch-size START INCREMENT SAMPLES` (both forks'
  microbatches.py) as the job's batch_size_schedule (_rampup); `--abort-on-unmet-fused-kernel-constraints`
  checked as initialize.py l. 190-207 does; `--glu-activation swiglu|geglu` (with the --no-bias-gelu-fusion the fork
  requires) as the gated MLP of --ffn-hidden-size (default 4h), reglu and liglu refused (_glu); the rest (kill switch,
  weighted data paths) listed as ignored.
- `--tokenizer-type NullTokenizer --vocab-size V` ([1] tokenizer.py l. 510-514): V + 1 tokens (the end-of-document id
  added), padded as any tokenizer's (the Megatron reader's rule, with --model too: the run's tokenizer, padded in the
  model's vocab_size's place, megatron_model.catalog_vocab_rows); Megatron-LM's NullTokenizer has V.
- Megatron-DeepSpeed's spellings of the shape flags are read as Megatron-LM's: `--num-key-value-heads N`
  as `--group-query-attention --num-query-groups N`, `--rotary-position-embeddings-theta` as `--rotary-base`,
  `--normalization layernorm|rmsnorm` as LayerNorm / RMSNorm ([1] arguments.py l. 442-449, 623, 634-636, 647-648).
- `--no-pipeline-parallel` with `--pipeline-model-parallel-size` > 1 is refused as arguments.py l. 94-96
  asserts (and ZeRO-2/3 without it, above); `--ds-sequence-parallel-size` > 1 (DeepSpeed-Ulysses) and `--remote-device` cpu / nvme
  (ZeRO-3 parameters on the host) are refused; the JSON's `offload_optimizer` / `offload_param` device
  cpu are the job's fields (planner/offload.py), the host's Adam DeepSpeedCPUAdam with `--cpu-optimizer`
  (_host_optimizer; `--cpu_torch_adam`'s torch.optim.AdamW, or no `--cpu-optimizer`, listed as not
  modelled and priced as DeepSpeedCPUAdam); `--cpu-optimizer` without the JSON's offload is listed as
  not modelled (the optimizer states priced on the GPU, an upper bound), naming the host optimizer
  (`--cpu_torch_adam`: torch.optim.AdamW, else DeepSpeedCPUAdam; `--cpu_torch_adam` alone is listed
  as ignored, read only with it).
- the optimizer: Megatron-DeepSpeed hands deepspeed.initialize its own, apex FusedAdam for
  `--optimizer adam` (DeepSpeed's FusedAdam with `--ds_fused_adam`, listed as ignored: both fused),
  which DeepSpeed's engine takes over the JSON's optimizer section ([1] megatron/optimizer/__init__.py
  l. 3-9, 96-116; [2] engine.py _configure_optimizer l. 1355-1366): no step temporaries (stack_db
  megatron-deepspeed memory.optimizer_default fused, memory.py [opt]).

`planner check`'s suggestions on such a script are spelled as Megatron-DeepSpeed flags and the JSON's
keys (trainers/spelling.py, fmt `megatron-deepspeed`).

References
[1] microsoft/Megatron-DeepSpeed @f4157bea69f3df8c6cb66f2ebcda66ba03d1288e (2024-12-24):
    megatron/arguments.py (deepspeed.add_config_arguments l. 54; validate_args l. 94-96;
    --checkpoint-activations l. 864, --no-pipeline-parallel l. 954, _add_zero_args l. 1483-1497,
    _add_activation_checkpoint_args), pretrain_gpt.py model_provider l. 36-60, megatron/training.py,
    megatron/initialize.py, megatron/model/gpt_model.py, megatron/model/transformer.py.
[3] bigscience-workshop/Megatron-DeepSpeed @8387ae17c4704f6579f88a84500b535d19d7fbbf, the fork that trained
    BLOOM: megatron/arguments.py (--pad-vocab-size-to l. 372, --sync-tp-duplicated-parameters l. 378,
    --embed-layernorm l. 386, --position-embedding-type absolute|rotary|alibi l. 398, --kill-switch-path
    l. 408, --abort-on-unmet-fused-kernel-constraints l. 576, --pp-partition-method l. 578),
    megatron/model/gpt_model.py GPTModelPipe, megatron/model/transformer.py (ALiBi).
[2] microsoft/DeepSpeed @38327e07 deepspeed/__init__.py _add_core_arguments (--deepspeed,
    --deepspeed_config, --deepscale, --deepscale_config), deepspeed/runtime/engine.py
    set_train_batch_size, deepspeed/launcher/runner.py (--num_gpus, --num_nodes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import PlannerError
from ..batch_ramp import rampup_phases
from . import fmt_ignored, words_of  # a flag of nargs 3 (megatron.NARGS_FLAGS): its words
from .report import Note, about, json_value, listed, noted
from .launch_files import Naming, launch_file
from .megatron_model import PADDED_VOCAB_RULE, _int  # _int: the Megatron reader's count check (ASCII digits, bounds, the flag named)

# store_true flags of Megatron-DeepSpeed's arguments.py [1] and DeepSpeed's add_config_arguments [2]
MDS_BOOL_FLAGS = {"--deepspeed", "--deepscale", "--deepspeed_mpi", "--no-pipeline-parallel", "--checkpoint-activations",
                  "--deepspeed-activation-checkpointing", "--partition-activations", "--contigious-checkpointing",
                  "--checkpoint-in-cpu", "--synchronize-each-layer", "--profile-backward", "--cpu-optimizer",
                  "--zero-reduce-scatter", "--zero-contigious-gradients", "--use-pin-memory", "--no-query-key-layer-scaling",
                  "--attention-softmax-in-fp32",  # both read here (_softmax_fp32), not by the Megatron reader
                  "--no-masked-softmax-fusion",  # read here (_softmax_fusion): every fork's eager core reads it
                  "--ds_fused_adam", "--cpu_torch_adam",
                  *("--use-flash-attn", "--use-flash-attn-v1", "--use-flash-attn-v2", "--use-flash-attn-triton",
                    "--use-flash-attn-builder"),
                  # BigScience's fork [3]
                  "--embed-layernorm", "--sync-tp-duplicated-parameters", "--abort-on-unmet-fused-kernel-constraints"}
FLASH_FLAGS = ("--use-flash-attn", "--use-flash-attn-v1", "--use-flash-attn-v2", "--use-flash-attn-triton",
               "--use-flash-attn-builder")
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepscale_config")
MDS_MARKERS = ("--deepspeed", "--deepscale", *CONFIG_FLAGS, "--zero-stage", "--deepspeed-activation-checkpointing",
               "--partition-activations", "--no-pipeline-parallel")
MDS_FLAGS = {*MDS_BOOL_FLAGS, *CONFIG_FLAGS, "--zero-stage", "--checkpoint-num-layers", "--ds-sequence-parallel-size",
             "--remote-device", "--zero-reduce-bucket-size", "--zero-allgather-bucket-size", "--num-key-value-heads",
             "--rotary-position-embeddings-theta", "--data-impl",
             # BigScience's fork (BLOOM) [3]: read in _bigscience
             "--pad-vocab-size-to", "--pp-partition-method", "--kill-switch-path", "--train-weighted-split-paths-path",
             "--valid-weighted-split-paths-path", "--valid-num-workers", "--tensorboard-queue-size",
             "--rampup-batch-size",  # both forks' megatron/microbatches.py: read in _rampup
             "--glu-activation",  # BigScience's fork [3]: a gated MLP, read in _bigscience (_glu)
             # DeepSpeed-MoE [1] (arguments.py l. 608-614, 910-926, 1151-1160): read in _deepspeed_moe
             "--topk", "--expert-interval", "--mlp-type", "--moe-expert-parallel-size", "--enable-expert-tensor-parallelism",
             "--moe-train-capacity-factor", "--moe-eval-capacity-factor", "--moe-min-capacity", "--moe-loss-coeff",
             "--create-moe-param-group", "--disable-moe-token-dropping", "--disable-moe-top2-2nd-expert-sampling",
             "--use-tutel", "--num-experts-switch"}
MDS_NARGS = frozenset({"--num-experts"})  # nargs '+' ([1] arguments.py l. 608): one count, or one per MoE layer
BIGSCIENCE_COMMIT = "bigscience-workshop/Megatron-DeepSpeed @8387ae17"
# BigScience's --position-embedding-type values ([3] arguments.py l. 398-402, PositionEmbeddingType) as Megatron-LM's
BIGSCIENCE_POSITIONS = {"absolute": "learned_absolute", "rotary": "rope", "alibi": "alibi"}
MDS_COMMIT = "microsoft/Megatron-DeepSpeed @f4157bea"
# flags BigScience's fork [3] has and microsoft's [1] has not (none of them in microsoft/Megatron-DeepSpeed @f4157bea
# megatron/arguments.py, whose parse_args refuses an unknown flag, l. 58-60): a script with one runs the fork, the stack
# megatron-deepspeed-bigscience (stack_db/megatron-deepspeed-bigscience.yaml, BLOOM's commits)
BIGSCIENCE_FLAGS = ("--position-embedding-type", "--embed-layernorm", "--sync-tp-duplicated-parameters",
                    "--pad-vocab-size-to", "--pp-partition-method", "--abort-on-unmet-fused-kernel-constraints",
                    "--kill-switch-path", "--train-weighted-split-paths-path", "--valid-weighted-split-paths-path",
                    "--valid-num-workers", "--glu-activation")
# BigScience's --glu-activation choices (bigscience-workshop/Megatron-DeepSpeed @497aa1bf megatron/model/
# glu_activations.py GLU_ACTIVATIONS: x1 * act(x2) over the two halves of dense_h_to_4h's 2 x --ffn-hidden-size
# output) -> the activation. The planner's gated MLP (ModelSpec.gated_mlp) is SwiGLU / GeGLU: those two are priced;
# ReGLU (relu) and LiGLU (identity, a bilinear layer) are refused, named
GLU_PRICED = {"swiglu": "silu", "geglu": "gelu"}
GLU_REFUSED = {"reglu": "relu", "liglu": "the identity (a bilinear layer)"}
BIGSCIENCE_STACK = "megatron-deepspeed-bigscience"
# microsoft/Megatron-DeepSpeed as of 2021 (stack_db/megatron-deepspeed-2021.yaml): its flags are a subset of the 2022
# fork's, so a script cannot name it; read on it where the command line declares it (--stack, load_trainer_config's
# stack), which changes one rule: b56b50bb pretrain_gpt.py model_provider l. 46 builds GPTModelPipe only where
# `args.deepspeed and mpu.get_pipeline_model_parallel_world_size() > 1` (Megatron's GPTModel at pp 1, no
# PipelineEngine: the JSON's ZeRO stage 2 or 3 runs and its overlap_comm acts; the fork has no --no-pipeline-parallel)
STACK_2021 = "megatron-deepspeed-2021"
MDS2021_COMMIT = "microsoft/Megatron-DeepSpeed b56b50bb"


def _flag_note(flag: str, value, why: str) -> Note:
    """An ignored flag of the script: `--flag (why)` where given bare (value True), else `--flag=value (why)`."""
    return noted("ignored", flag, why) if value is True else listed("ignored", flag, value, why, str)


def pipeline_model(ds: dict, pp: int, stack: Optional[str]) -> bool:
    """Whether the script builds DeepSpeed's pipeline model (GPTModelPipe under the PipelineEngine): the 2021 fork at
    pp > 1 only (STACK_2021), the later forks unless --no-pipeline-parallel (module docstring: the model)."""
    return pp > 1 if stack == STACK_2021 else "--no-pipeline-parallel" not in ds
# read with no effect on memory or step time, and why
MDS_IGNORED = {
    "--deepspeed": "turns DeepSpeed's engine on: the stack megatron-deepspeed",
    "--deepscale": "DeepSpeed's deprecated --deepspeed: the stack megatron-deepspeed",
    "--deepspeed_mpi": "how the ranks are discovered (MPI): start-up only",
    "--synchronize-each-layer": "a deepspeed.checkpointing debugging switch (synchronize=), off in training scripts",
    "--profile-backward": "deepspeed.checkpointing profiling timers",
    "--zero-reduce-scatter": "not read by the engine: the JSON's zero_optimization configures ZeRO (training.py "
                             "deepspeed.initialize(config=args.deepspeed_config_dict))",
    "--zero-contigious-gradients": "not read by the engine: the JSON's zero_optimization configures ZeRO",
    "--zero-reduce-bucket-size": "not read by the engine: the JSON's zero_optimization configures ZeRO",
    "--zero-allgather-bucket-size": "not read by the engine: the JSON's zero_optimization configures ZeRO",
    "--use-pin-memory": "pinned host memory for ZeRO-3 parameters initialised on the host (--remote-device)",
    "--ds_fused_adam": f"DeepSpeed's FusedAdam in place of apex's ({MDS_COMMIT} megatron/optimizer/__init__.py l. 96-105): "
                       "both multi-tensor kernels, no step temporaries (stack_db megatron-deepspeed "
                       "memory.optimizer_default fused)",
    "--data-impl": "the dataset's on-disk format (mmap, lazy, cached): data loading, between steps",
    "--abort-on-unmet-fused-kernel-constraints": f"a start-up check, met here, of the fused softmax's constraints "
                                                 f"({BIGSCIENCE_COMMIT} megatron/initialize.py l. 190-207)",
    "--kill-switch-path": "a file whose presence stops training: operations only",
    "--train-weighted-split-paths-path": "the training data's files and weights: data loading",
    "--valid-weighted-split-paths-path": "the validation data's files and weights: data loading",
    "--valid-num-workers": "validation data-loader workers: host side, between steps",
    "--tensorboard-queue-size": "TensorBoard logging: host side",
}


def is_megatron_deepspeed(flags: dict) -> bool:
    return any(f in flags for f in MDS_MARKERS)


def split_flags(flags: dict, where: str, stack: Optional[str] = None) -> tuple[dict, list[str], list[str], list[str],
                                                                             list[str]]:
    """Take Megatron-DeepSpeed's own flags out of `flags` (left for the Megatron reader) and turn the
    checkpointing flags into the Megatron flags that run the same recompute. stack: the command line's (STACK_2021
    changes the pipeline model's rule, pipeline_model). Returns (the DeepSpeed flags, ignored, assumed, not_modelled,
    unmodelled)."""
    ds = {k: flags.pop(k) for k in list(flags) if k in MDS_FLAGS}
    ignored, assumed, not_modelled, unmodelled = [], [], [], []
    # Megatron-DeepSpeed's spellings of Megatron-LM's model-shape flags ([1] arguments.py l. 623, 442-449, 634-636,
    # 647-648), read as the Megatron reader reads Megatron-LM's
    if "--num-key-value-heads" in ds and "--num-query-groups" not in flags:
        flags["--group-query-attention"] = True
        flags["--num-query-groups"] = ds["--num-key-value-heads"]
    if "--rotary-position-embeddings-theta" in ds and "--rotary-base" not in flags:
        flags["--rotary-base"] = ds["--rotary-position-embeddings-theta"]
    if flags.get("--normalization") in ("layernorm", "rmsnorm"):
        flags["--normalization"] = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[flags["--normalization"]]
    if flags.get("--tokenizer-type") == "NullTokenizer" and "--vocab-size" in flags:
        # [1] megatron/tokenizer/tokenizer.py _NullTokenizer l. 510-514: --vocab-size + 1 tokens (the end-of-document
        # id), padded as any tokenizer's (l. 52, 58-71); Megatron-LM's NullTokenizer has --vocab-size tokens, eod
        # among them (the Megatron reader's rule): the fork's size given it
        v = _int(where, flags, "--vocab-size")
        flags["--vocab-size"] = str(v + 1)
        assumed.append(noted("assumed", "vocab_size",
                             f"--tokenizer-type NullTokenizer --vocab-size {v:,}: {v + 1:,} tokens, the fork's "
                             f"NullTokenizer adding the end-of-document id ({MDS_COMMIT} megatron/tokenizer/tokenizer.py "
                             "l. 510-514)"))
    _bigscience(flags, ds, where, ignored, assumed, unmodelled)
    _deepspeed_moe(flags, ds, where, ignored, assumed)
    for k in ds:
        if k in MDS_IGNORED:
            ignored.append(_flag_note(k, ds[k], MDS_IGNORED[k]))
    pp = _int(where, flags, "--pipeline-model-parallel-size", 1)
    tp = _int(where, flags, "--tensor-model-parallel-size", 1)
    pipe = pipeline_model(ds, pp, stack)
    if "--no-pipeline-parallel" in ds:
        if pp != 1:
            raise PlannerError(f"{where}--no-pipeline-parallel with --pipeline-model-parallel-size {pp}",
                               f"Megatron-DeepSpeed asserts pipeline_model_parallel_size == 1 with it ({MDS_COMMIT} "
                               "megatron/arguments.py l. 94-96)")
        assumed.append(noted("assumed", "--no-pipeline-parallel",
                             "Megatron's GPTModel, not DeepSpeed's pipeline model GPTModelPipe "
                             f"({MDS_COMMIT} pretrain_gpt.py model_provider l. 51, 83): no PipelineEngine, so the JSON's ZeRO "
                             "stage 2 or 3 runs and its overlap_comm acts (DeepSpeed's engine turns it off only for a "
                             "PipelineModule, engine.py @38327e07 l. 1639-1642); the same layers"))
    sp = _int(where, ds, "--ds-sequence-parallel-size", 1)
    if sp > 1:
        raise PlannerError(f"{where}--ds-sequence-parallel-size {sp}: DeepSpeed-Ulysses sequence parallelism is not "
                           "modelled (the stack megatron-deepspeed runs no sequence split, stack_db runs.max_cp 1)",
                           "price it at --ds-sequence-parallel-size 1, or as Megatron-LM context parallelism")
    if "--ds-sequence-parallel-size" in ds:
        ignored.append(listed("ignored", "--ds-sequence-parallel-size", 1, "no sequence split"))
    remote = ds.get("--remote-device", "none")
    if remote not in ("none", True):
        raise PlannerError(f"{where}--remote-device {remote}: ZeRO-3 parameters initialised on the host "
                           "(pretrain_gpt.py zero.Init remote_device) are not modelled", "drop --remote-device")
    if "--remote-device" in ds:
        ignored.append(listed("ignored", "--remote-device", "none", "parameters initialised on the GPU"))
    if "--cpu-optimizer" in ds:
        torch_adam = "torch.optim.AdamW, --cpu_torch_adam" if "--cpu_torch_adam" in ds else "DeepSpeedCPUAdam"
        unmodelled.append(noted("unmodelled", "--cpu-optimizer", f"the optimizer on the host, {torch_adam}: "
                                f"{MDS_COMMIT} megatron/optimizer/__init__.py l. 83-94; its states priced on the GPU, an "
                                "upper bound", ruled=False))
    elif "--cpu_torch_adam" in ds:
        ignored.append(noted("ignored", "--cpu_torch_adam", f"read only with --cpu-optimizer, {MDS_COMMIT} "
                             "megatron/optimizer/__init__.py l. 83-86: the GPU optimizer is apex FusedAdam"))
    # ---- activation checkpointing -> Megatron's recompute flags (module docstring)
    if "--checkpoint-activations" in ds:
        n = _int(where, ds, "--checkpoint-num-layers", 1)
        given = {f: flags.get(f) for f in ("--recompute-granularity", "--recompute-method", "--recompute-num-layers")
                 if f in flags}
        flags.update({"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": str(n)})
        assumed.append(listed("assumed", "recompute", "full",
                              "--checkpoint-activations re-runs every layer in chunks of --checkpoint-num-layers "
                              f"{n} ({MDS_COMMIT} megatron/model/transformer.py l. 2082, gpt_model.py l. 446-447)"
                              + (f"; it wins over {', '.join(f'{k} {v}' for k, v in given.items())}" if given else "")))
    elif "--checkpoint-num-layers" in ds:
        ignored.append(listed("ignored", "--checkpoint-num-layers", ds["--checkpoint-num-layers"],
                              "no --checkpoint-activations", str))
    elif pipe and flags.get("--recompute-granularity") == "full" and flags.get("--recompute-method") != "uniform":
        dropped = {f: flags.pop(f) for f in ("--recompute-granularity", "--recompute-method", "--recompute-num-layers")
                   if f in flags}
        ignored.append(Note(" ".join(f"{k}={v}" for k, v in dropped.items()), "ignored",
                            tuple((k, json_value(v)) for k, v in dropped.items()), "DeepSpeed's pipeline model re-runs "
                            f"layers only with --checkpoint-activations or the uniform method: {MDS_COMMIT} "
                            "megatron/model/gpt_model.py l. 446-452, interval 0; recompute none"))
    recompute = flags.get("--recompute-granularity") in ("full", "selective") or "--recompute-activations" in flags
    dsac = "--deepspeed-activation-checkpointing" in ds
    if dsac:
        ignored.append(noted("ignored", "--deepspeed-activation-checkpointing", "deepspeed.checkpointing replaces "
                             "Megatron's checkpoint function: the same layers re-run, the same inputs kept; "
                             f"{MDS_COMMIT} megatron/initialize.py l. 175-193, 266"))
    full = flags.get("--recompute-granularity") == "full"
    if "--partition-activations" in ds and dsac and full and tp > 1:  # priced: the job's partition_activations
        ds["_partition"] = True
        assumed.append(listed("assumed", "partition_activations", True,
                              "--partition-activations with --deepspeed-activation-checkpointing: "
                              f"each of the {tp} TP ranks keeps 1/{tp} of every re-run layer's input, all-gathered before its "
                              "re-run (deepspeed.checkpointing.configure, "
                              f"{MDS_COMMIT} megatron/initialize.py l. 186-194; DeepSpeed @38327e07 activation_checkpointing/"
                              "checkpointing.py l. 377-430, 266-300)"))
    for flag, what, needs_tp in (("--partition-activations", "the kept layer inputs split over the TP ranks under "
                                  "selective recompute", True),
                                 ("--checkpoint-in-cpu", "the kept layer inputs moved to the host", False),
                                 ("--contigious-checkpointing", "the kept layer inputs copied into one preallocated "
                                                                "buffer", False)):
        if flag not in ds or (flag == "--partition-activations" and "_partition" in ds):
            continue
        if dsac and recompute and (tp > 1 or not needs_tp):
            raise PlannerError(f"{where}{flag}: {what} (deepspeed.checkpointing.configure, {MDS_COMMIT} "
                               "megatron/initialize.py l. 186-193) is not modelled: the planner prices the layer "
                               "inputs kept whole on the GPU", f"drop {flag} to price the job without it")
        why = ("no --deepspeed-activation-checkpointing" if not dsac else "no activation checkpointing" if not recompute
               else "tensor-parallel size 1: nothing to split")
        ignored.append(noted("ignored", flag, f"{why}: no effect"))
    return ds, ignored, assumed, not_modelled, unmodelled


MOE_FLAGS = ("--topk", "--expert-interval", "--mlp-type", "--moe-expert-parallel-size", "--enable-expert-tensor-parallelism",
             "--moe-train-capacity-factor", "--moe-eval-capacity-factor", "--moe-min-capacity", "--moe-loss-coeff",
             "--create-moe-param-group", "--disable-moe-token-dropping", "--disable-moe-top2-2nd-expert-sampling",
             "--use-tutel")
DS_MOE = "microsoft/DeepSpeed @38327e07 deepspeed/moe"


def _deepspeed_moe(flags: dict, ds: dict, where: str, ignored: list, assumed: list) -> None:
    """DeepSpeed-MoE as Megatron-DeepSpeed @f4157bea builds it [1] (transformer.py l. 1060-1082: deepspeed.moe.layer.MoE
    around ParallelMLP experts of --ffn-hidden-size), read into the Megatron flags the Megatron reader prices:
    --num-experts E (nargs '+': one count, or one per MoE layer, all E here) -> --num-experts E; --topk k (default 1)
    -> --moe-router-topk k (TopKGate: top1gating, top2gating, topkgating beyond, sharded_moe.py l. 513-524);
    --expert-interval N (default 2: layer i, 1-based, is MoE iff i % N == 0, transformer.py get_num_experts_per_layer
    l. 1650-1660) -> the model's layer pattern of period N (model_fields); --moe-expert-parallel-size -> --expert-model-parallel-size; without
    --enable-expert-tensor-parallelism the experts are whole on every TP rank (expert TP 1); the one dispatcher,
    MOELayer's all-to-all (alltoall); --moe-train-capacity-factor cf (default 1.0) with tokens dropped (the default):
    every expert's [E, C, d] input padded to C = ceil(k x tokens / E x cf) (_capacity l. 161-170, MOELayer.forward's
    einsum l. 609) -> --moe-expert-capacity-factor cf --moe-pad-expert-input-to-capacity; --moe-loss-coeff -> the
    job's moe_aux_loss_coeff (the gate computes its loss whatever the value; the stack prices no router saves).
    Refused: per-layer expert counts that differ, --mlp-type residual (PR-MoE), --disable-moe-token-dropping (every
    expert padded to the busiest one's count over the EP group, top1gating l. 214-225: not priced), --use-tutel,
    --num-experts-switch (Megatron-LM's SwitchMLP). In merge: ZeRO-1/2 without --create-moe-param-group, and pp > 1
    x tp > 1 without the JSON's pipeline.pipe_partitioned / grad_partitioned false (both false are read as priced);
    --sequence-parallel at TP > 1 is start-up rule 78 DEEPSPEED_MOE_SP's (planner/startup.py)."""
    given = [f for f in MOE_FLAGS if f in ds]
    if "--num-experts-switch" in ds:
        raise PlannerError(f"{where}--num-experts-switch: the fork's Megatron-LM SwitchMLP ({MDS_COMMIT} megatron/model/"
                           "transformer.py l. 1062-1063) is not modelled", "use DeepSpeed-MoE's --num-experts")
    raw = flags.pop("--num-experts", None)
    vals = words_of(raw) if isinstance(raw, (list, str)) else []
    counts = [_int(where, {"--num-experts": v}, "--num-experts") for v in vals] or [1]
    L = _int(where, flags, "--num-layers")
    N = _int(where, ds, "--expert-interval", 2)
    if N < 1:
        raise PlannerError(f"{where}--expert-interval {N} must be positive", "one MoE layer every N layers")
    if len(counts) > 1 and L is not None and len(counts) != L // N:
        raise PlannerError(f"{where}--num-experts lists {len(counts)} counts for {L} // {N} = {L // N} MoE layers: "
                           f"Megatron-DeepSpeed asserts one count, or one per MoE layer ({MDS_COMMIT} "
                           "megatron/model/transformer.py l. 1651-1652)", "give one count")
    if max(counts) <= 1 or (L is not None and L // N == 0):  # no layer gets experts: a dense model (gpt_model.py l. 373-374)
        if given or vals:
            ignored.append(Note(", ".join((["--num-experts"] if vals else []) + given), "ignored",
                                tuple((f, None) for f in (["--num-experts"] if vals else []) + given), "no MoE layer: "
                                f"--num-experts {' '.join(vals) or 1} over --expert-interval {N}, a dense model"))
        for f in given:
            ds.pop(f)
        return
    if len(set(counts)) > 1:
        raise PlannerError(f"{where}--num-experts {' '.join(vals)}: MoE layers of different expert counts are not "
                           "priced (the planner's MoE block has one count)", "give one count for every MoE layer")
    mlp = str(ds.get("--mlp-type", "standard")).strip("\"'")
    if mlp != "standard":
        raise PlannerError(f"{where}--mlp-type {mlp}: " + ("Residual MoE (PR-MoE: a dense MLP beside the experts, mixed by "
                           f"a learned coefficient, {DS_MOE}/layer.py l. 81-84, 124-129) is not modelled" if mlp == "residual"
                           else "the fork accepts standard or residual"), "use --mlp-type standard")
    for flag, what in (("--disable-moe-token-dropping", f"every expert's input is padded to the busiest expert's count over "
                        f"the expert-parallel group ({DS_MOE}/sharded_moe.py top1gating l. 214-225, top2gating l. 336-344), "
                        "which the planner does not price"),
                       ("--use-tutel", "Tutel's dispatch kernels (top-1 only) are not modelled")):
        if flag in ds:
            raise PlannerError(f"{where}{flag}: {what}", f"drop {flag}")
    E, k = counts[0], _int(where, ds, "--topk", 1)
    flags["--num-experts"] = str(E)
    flags["--moe-router-topk"] = str(k)
    from ..schema import MAX_LAYER_PERIOD

    if N > MAX_LAYER_PERIOD:
        raise PlannerError(f"{where}--expert-interval {N:,}: the MoE layers repeat every {N:,} layers, more than the "
                           f"{MAX_LAYER_PERIOD:,} the planner builds (schema.MAX_LAYER_PERIOD: one object a layer of the "
                           "period)", f"price an --expert-interval of at most {MAX_LAYER_PERIOD:,}")
    if N > 1:  # the period, [dense] * (N - 1) + [moe], repeated from the first layer (model_fields): O(N), any depth
        ds["_expert_interval"] = N
    flags["--moe-token-dispatcher-type"] = "alltoall"
    if "--moe-expert-parallel-size" in ds:
        flags["--expert-model-parallel-size"] = str(ds["--moe-expert-parallel-size"])
    tp = _int(where, flags, "--tensor-model-parallel-size", 1)
    if "--enable-expert-tensor-parallelism" not in ds:  # expert TP 1 at any tp (a --tp on the command line keeps it)
        flags["--expert-tensor-parallel-size"] = "1"
    cf = ds.get("--moe-train-capacity-factor", "1.0")
    flags["--moe-expert-capacity-factor"] = str(cf)
    flags["--moe-pad-expert-input-to-capacity"] = True
    if "--moe-loss-coeff" in ds:
        flags["--moe-aux-loss-coeff"] = [str(ds["--moe-loss-coeff"])]
    assumed.append(noted("assumed", f"DeepSpeed-MoE ({MDS_COMMIT} megatron/model/transformer.py l. 1060-1082)",
                   f"{E} experts of --ffn-hidden-size on every layer i (1-based) with i % {N} == 0 (--expert-interval {N}"
                   + ("" if "--expert-interval" in ds else ", the fork's default") + f"), top-{k}"
                   + ("" if "--topk" in ds else " (--topk absent: the fork's default)") + f", capacity factor {cf} with every "
                   f"expert padded to it, at least {ds.get('--moe-min-capacity', 4)} slots (--moe-min-capacity"
                   + ("" if "--moe-min-capacity" in ds else " absent: the fork's default, arguments.py l. 917")
                   + f"; the job's moe_min_capacity, C = max(ceil(k x tokens x cf / E), it): layers/moe.py [18]) ({DS_MOE}/sharded_moe.py _capacity l. 161-170, MOELayer.forward l. 609), EP "
                   f"{ds.get('--moe-expert-parallel-size', 1)}, expert TP "
                   + (f"{tp} (--enable-expert-tensor-parallelism)" if "--enable-expert-tensor-parallelism" in ds and tp > 1
                      else "1 (experts whole on each TP rank)") + "; the dispatch MOELayer's all-to-all (alltoall)"))
    for flag, why in (("--moe-eval-capacity-factor", "evaluation only"),
                      ("--disable-moe-top2-2nd-expert-sampling", "which second expert top-2 takes: numerics only"),
                      ("--create-moe-param-group", "the MoE parameters' optimizer groups, which DeepSpeed's ZeRO-1/2 needs "
                                                   "(stack_db megatron-deepspeed step_grads.moe_group_params)")):
        if flag in ds:
            ignored.append(_flag_note(flag, ds[flag], why))
    if "--moe-loss-coeff" not in ds:
        assumed.append(noted("assumed", "--moe-loss-coeff absent", "the fork's 0.1 scales the gate's loss, computed "
                             "whatever the value (moe_aux_loss_coeff 0: the stack prices no router saves, "
                             "memory.moe_routing_saved off)"))


def _glu(flags: dict, ds: dict, where: str, assumed: list) -> None:
    """BigScience's --glu-activation [3] (497aa1bf arguments.py l. 399-402; transformer.py ParallelMLP l. 73-104):
    dense_h_to_4h of 2 x --ffn-hidden-size, GLU_ACTIVATIONS's x1 * act(x2), dense_4h_to_h of --ffn-hidden-size: the
    gated MLP of --ffn-hidden-size (Megatron-LM's --swiglu, read so), where act is SiLU or GeLU (GLU_PRICED); ReGLU
    and LiGLU refused (GLU_REFUSED). The fork's --ffn-hidden-size default is 4h with or without it (arguments.py
    l. 242-243; not Megatron-LM's 8h/3 of --swiglu); the fork raises without --no-bias-gelu-fusion (l. 285-286)."""
    glu = str(ds["--glu-activation"]).strip("\"'").lower()
    if glu in GLU_REFUSED:
        raise PlannerError(f"{where}--glu-activation {glu}: a GLU of {GLU_REFUSED[glu]} ({BIGSCIENCE_COMMIT} megatron/model/"
                           "glu_activations.py); the planner's gated MLP is SwiGLU / GeGLU (the model's gated_mlp), so "
                           f"the {glu} MLP is not priced", "--glu-activation swiglu or geglu, or no GLU (GeLU)")
    if glu not in GLU_PRICED:
        raise PlannerError(f"{where}--glu-activation {glu!r}: not one of the fork's choices (geglu, liglu, reglu, swiglu: "
                           f"{BIGSCIENCE_COMMIT} megatron/model/glu_activations.py GLU_ACTIVATIONS)",
                           "--glu-activation swiglu or geglu")
    if "--no-bias-gelu-fusion" not in flags:
        raise PlannerError(f"{where}--glu-activation {glu} without --no-bias-gelu-fusion: the fork raises at start-up "
                           "('if glu-activation is used, please set --no-bias-gelu-fusion', bigscience-workshop/"
                           "Megatron-DeepSpeed @497aa1bf megatron/arguments.py l. 285-286)", "add --no-bias-gelu-fusion")
    del flags["--no-bias-gelu-fusion"]  # the GLU's requirement, not the Megatron reader's GeLU switch
    flags["--swiglu"] = True  # the gated MLP of --ffn-hidden-size (the Megatron reader's gated_mlp)
    h = _int(where, flags, "--hidden-size")
    if "--ffn-hidden-size" not in flags and h is not None:
        flags["--ffn-hidden-size"] = str(4 * h)
        assumed.append(listed("assumed", "ffn_hidden_size", 4 * h, "the fork's default 4 x --hidden-size, with "
                              "--glu-activation too (497aa1bf megatron/arguments.py l. 242-243)", show=f"{4 * h:,}"))
    assumed.append(listed("assumed", "gated_mlp", True,
                          f"--glu-activation {glu} (x1 * {GLU_PRICED[glu]}(x2) over dense_h_to_4h's 2 x "
                          "--ffn-hidden-size, 497aa1bf megatron/model/transformer.py l. 73-104, glu_activations.py), with "
                          "--no-bias-gelu-fusion, which the fork requires with it (arguments.py l. 285-286): its bias add and GLU "
                          "run unfused, priced at the stack's gated-activation figures (stack_db megatron-deepspeed-bigscience "
                          "uncertain)"))


def _bigscience(flags: dict, ds: dict, where: str, ignored: list, assumed: list, unmodelled: list) -> None:
    """BigScience's fork's flags [3] (BLOOM-176B's tr11 script), each read, priced, listed or refused."""
    if "--glu-activation" in ds:
        _glu(flags, ds, where, assumed)
    pos = flags.get("--position-embedding-type")
    if pos in BIGSCIENCE_POSITIONS and pos != BIGSCIENCE_POSITIONS[pos]:
        flags["--position-embedding-type"] = BIGSCIENCE_POSITIONS[pos]
        assumed.append(listed("assumed", "--position-embedding-type", pos,
                              f"BigScience's spelling of {BIGSCIENCE_POSITIONS[pos]} "
                              f"({BIGSCIENCE_COMMIT} megatron/enums.py PositionEmbeddingType)", spaced=True))
    if flags.get("--position-embedding-type") == "alibi":
        # [3] transformer.py l. 283-327, 491-498, 592-619: the [b x heads/tp, 1, s] bias is the baddbmm's input with
        # beta 1 (1 / layer number with query-key layer scaling); no parameters, no gradient
        assumed.append(listed("assumed", "--position-embedding-type", "alibi", spaced=True, reason="the model's ALiBi "
                       "positions, no parameters; the eager core's "
                       "bias is torch.baddbmm's input, beta != 0: PyTorch copies the [micro-batch x heads/tp, 1, s] bias, "
                       "expanded, into the [.., s, s] score buffer and the GEMM reads it back, 2 + 2 bytes a score element "
                       "each forward, priced (eager_core_alibi_s; layers/attention.py [12]: "
                       f"{BIGSCIENCE_COMMIT} megatron/model/transformer.py l. 283-327, 592-619)"))
    if "--pad-vocab-size-to" in ds:
        v = _int(where, ds, "--pad-vocab-size-to")
        div = _int(where, flags, "--make-vocab-size-divisible-by", 128)
        tp = _int(where, flags, "--tensor-model-parallel-size", 1)
        if v % div or v % tp:
            raise PlannerError(f"{where}--pad-vocab-size-to {v} is not divisible by --make-vocab-size-divisible-by {div}"
                               f" and the tensor-parallel size {tp}", f"the fork refuses it ({BIGSCIENCE_COMMIT} "
                               "megatron/tokenizer/tokenizer.py l. 72-82, arguments.py l. 372-375): pad to a multiple")
        if "--padded-vocab-size" not in flags:
            flags["--padded-vocab-size"] = str(v)
        assumed.append(listed("assumed", "vocab_size", v, f"--pad-vocab-size-to, the embedding's rows "
                              f"({BIGSCIENCE_COMMIT} megatron/tokenizer/tokenizer.py l. 72-82; the tokenizer's own size, "
                              "at most that, is in its files)", show=f"{v:,}"))
    if "--pp-partition-method" in ds:
        method = str(ds["--pp-partition-method"]).strip("\"'").lower()
        kinds = method[len("type:"):].split("|") if method.startswith("type:") else None
        if kinds is None or not set(kinds) <= {"transformer", "embedding"} or "transformer" not in kinds:
            raise PlannerError(f"{where}--pp-partition-method {method!r}: only 'type:transformer' and "
                               "'type:transformer|embedding' are modelled",
                               "drop it (the fork's default is type:transformer: gpt_model.py l. 310-313)")
        if "embedding" in kinds:
            L = _int(where, flags, "--num-layers")
            pp = _int(where, flags, "--pipeline-model-parallel-size", 1)
            # DeepSpeed's partition_balanced gives the first (L + 2) mod pp stages one unit more (stack_db
            # megatron-deepspeed-bigscience pipeline_split front, priced); an end stage of no transformer layer, on which the
            # fork's pipeline fails, is start-up rule DEEPSPEED_PP_SPLIT_ENDS's
            for f in ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"):
                flags[f] = True
            assumed.append(listed("assumed", "--pp-partition-method", method, spaced=True, reason="DeepSpeed's type: "
                           "partition balances the layers whose "
                           "class matches (the 70 ParallelTransformerLayerPipe and both tied EmbeddingPipe, the input "
                           "embedding first, the logits last): as account_for_embedding/loss_in_pipeline_split, the first "
                           f"and last stage one transformer layer fewer ({BIGSCIENCE_COMMIT} megatron/model/gpt_model.py "
                           "l. 222-319; microsoft/DeepSpeed @38327e07 deepspeed/runtime/pipe/module.py l. 409-414)"
                           .replace("the 70 ", f"the {L} ")))
        else:
            ignored.append(listed("ignored", "--pp-partition-method", method, "the fork's default: gpt_model.py "
                                  "l. 310-313", spaced=True))
    if "--abort-on-unmet-fused-kernel-constraints" in ds:  # [3] initialize.py l. 190-207: the job exits at start-up
        s = _int(where, flags, "--seq-length", 1)
        heads = _int(where, flags, "--num-attention-heads", 1)
        tp = _int(where, flags, "--tensor-model-parallel-size", 1)
        b = _int(where, flags, "--micro-batch-size", 1)
        half = "--fp16" in flags or "--bf16" in flags
        if not (half and 16 < s <= 2048 and s % 4 == 0 and (heads / tp * b) % 4 == 0
                and "--no-masked-softmax-fusion" not in ds):
            raise PlannerError(f"{where}--abort-on-unmet-fused-kernel-constraints: the fused softmax's constraints (--fp16 "
                               f"or --bf16, 16 < seq <= 2048, seq % 4 == 0, heads / tp x micro-batch % 4 == 0; here seq "
                               f"{s}, {heads} / {tp} x {b}) are not met, so the job exits at start-up ({BIGSCIENCE_COMMIT} "
                               "megatron/initialize.py l. 190-207)", "meet them, or drop the flag (unfused softmax)")
    if "--sync-tp-duplicated-parameters" in ds:  # the job's sync_tp_duplicated_parameters (merge), priced in step.tp_comm
        assumed.append(listed("assumed", "sync_tp_duplicated_parameters", True,
                              "--sync-tp-duplicated-parameters (every LayerNorm forward "
                              "all-reduces its weight and bias over the TP group, and row-parallel linears their bias: "
                              f"{BIGSCIENCE_COMMIT} megatron/model/fused_layer_norm.py l. 87, 103-105, megatron/mpu/layers.py "
                              "l. 426, 440-441: small all-reduces of h parameters each, priced in tp_comm, step.py [sy]; the "
                              "first stage's embedding norm and the last stage's final norm, two more each, not priced)"))


def model_fields(ds: dict) -> dict:
    """The ModelSpec fields the fork's own flags set on the model the flags define: BigScience's [3] --embed-layernorm
    -> embedding_norm (a LayerNorm on the word embedding's output on the first stage: memory.py [en]); DeepSpeed-MoE's
    --expert-interval N > 1 (_deepspeed_moe) -> the layer pattern [dense] * (N - 1) + [moe], which the model repeats
    from its first layer (schema layer_pattern): layer i (0-based) MoE iff i % N == N - 1, i.e. the fork's 1-based
    i % N == 0 ([1] transformer.py get_num_experts_per_layer l. 1650-1660, layer_num = i + 1 + offset, the stage's
    offset making it the model's layer number, l. 1848), the last L mod N layers dense either way."""
    out = {"embedding_norm": True} if "--embed-layernorm" in ds else {}
    N = ds.get("_expert_interval")
    if N:
        out["layer_kinds"] = {"dense": {"mlp": {"kind": "dense"}}, "moe": {"mlp": {"kind": "moe"}}}
        out["layer_pattern"] = ["dense"] * (N - 1) + ["moe"]
    return out


RAMP_PHASES_MAX = 4096  # increments a ramp may have here: a bound on the pricing work (a phase is one more plan row)


def _rampup(ds: dict, flags: dict, job: dict, where: str, g: int, micro_dp: int, assumed: list) -> None:
    """--rampup-batch-size START INCREMENT SAMPLES as the job's batch_size_schedule (planner/batch_ramp.py).
    Both forks' megatron/microbatches.py (BigScience @8387ae17 l. 22-50, 91-160; microsoft @f4157bea the same class):
    RampupBatchsizeNumMicroBatches, before each step (training.py l. 913, consistency_check on) the batch at c
    consumed samples is START + int(c / (SAMPLES / n)) x INCREMENT, n = (global - START) / INCREMENT, and the
    global batch once c > SAMPLES; each batch a multiple of micro-batch x dp (asserted; batch_ramp checks it per
    phase). Phase k starts at the least c with int(c / (SAMPLES / n)) >= k, the last at that or SAMPLES + 1; the
    thresholds in tokens are those samples x the sequence length (batch_ramp reads them back by floor division).
    Megatron-DeepSpeed hands each step's batch to DeepSpeed (set_train_batch_size, training.py l. 1253-1258)."""
    parts = words_of(ds["--rampup-batch-size"])
    bad = PlannerError(f"{where}--rampup-batch-size {' '.join(parts)!r} is not START INCREMENT SAMPLES",
                       "three whole numbers, e.g. --rampup-batch-size 192 16 9_765_625 (BLOOM's)")
    if len(parts) != 3:
        raise bad
    start, inc, samples = (_int(where, {"--rampup-batch-size": x}, "--rampup-batch-size") for x in parts)
    if "--train-iters" in flags:
        raise PlannerError(f"{where}--rampup-batch-size with --train-iters: the forks assert a ramp only with "
                           f"--train-samples ({BIGSCIENCE_COMMIT} megatron/arguments.py l. 210-217)",
                           "give --train-samples, or drop the ramp")
    diff = g - start
    if diff <= 0 or diff % inc:
        raise PlannerError(f"{where}--rampup-batch-size {start} {inc} {samples}: the global batch {g} must exceed the start "
                           f"{start} by a multiple of the increment {inc} (microbatches.py asserts it; equal, it divides by "
                           "zero increments)", "choose START and INCREMENT that reach --global-batch-size")
    seq = job.get("seq_len") or _int(where, flags, "--seq-length", 1)
    n = diff // inc
    if n > RAMP_PHASES_MAX:  # each phase is priced (explain.phase_plans): a bound on the work, stated, not a clamp
        raise PlannerError(f"{where}--rampup-batch-size {start} {inc} {samples}: {n:,} increments to the global batch {g}; "
                           f"the planner prices each phase and takes at most {RAMP_PHASES_MAX:,} (BLOOM's ramp has 116)",
                           "a larger INCREMENT, or the ramp as a job's batch_size_schedule of fewer phases")
    per = samples / n  # the fork's rampup_samples_per_increment, a Python float (the assumed line's figure)
    phases = rampup_phases(start, inc, samples, g)  # batch_ramp: the one rule, cited there
    job["batch_size_schedule"] = [{"from_tokens": float(c * seq), "global_batch": b} for c, b in phases]
    assumed.append(noted("assumed", "batch_size_schedule",
                         f"--rampup-batch-size {start} {inc} {samples:,}: the batch from {start} up by {inc} "
                         f"every {per:,.1f} samples to {g} at {phases[-1][0]:,} samples ({phases[-1][0] * seq:,} tokens), {n + 1} "
                         f"phases, each a multiple of micro-batch x dp {micro_dp} ({BIGSCIENCE_COMMIT} megatron/microbatches.py "
                         "RampupBatchsizeNumMicroBatches)"))


def config_text(ds: dict, where: str, script: Path, heredocs: dict) -> tuple[str, str]:
    """(the ds_config's name as shown, its text): the script's own heredoc for that file, else the
    file relative to the script (launch_files.launch_file, the lookup the Megatron-Bridge reader shares)."""
    named = [f for f in CONFIG_FLAGS if f in ds]
    if not named:  # named by the marker the script has (`--no-pipeline-parallel` without --deepspeed: rebase's
        # ds_pretrain_gpt_1.3B_megatron_checkpointing.sh, whose error named a --deepspeed it does not give)
        marker = next((f for f in MDS_MARKERS if f in ds), "--deepspeed")
        raise PlannerError(f"{where}{marker} without --deepspeed_config: the DeepSpeed engine needs its JSON "
                           f"({MDS_COMMIT} megatron/training.py _create_ds_config_dict)",
                           "add --deepspeed_config ds_config.json, the file the job runs with")
    if len(named) > 1 and len({str(ds[f]) for f in named}) > 1:
        raise PlannerError(f"{where}{' and '.join(f'{f} {ds[f]}' for f in named)} name different files",
                           "give the one the job runs with")
    name = str(ds[named[0]]).strip("\"'")
    return launch_file(name, script, heredocs, where, Naming(
        noun="script", field=named[0], in_heredoc="the ds_config {name} written by the script's heredoc (line {line})",
        unset_hint="set them at the script's top level, or pass the JSON the job runs with",
        missing_hint="put the ds_config JSON beside the script",
        read_hint="give the DeepSpeed ds_config.json the script names", says_no_heredoc=True))


def _host_optimizer(ds: dict, dj: dict, assumed: list, unmodelled: list) -> None:
    """The optimizer that steps the JSON's offloaded partition (zero_optimization.offload_optimizer device cpu, the job's
    offload_optimizer, planner/offload.py): Megatron-DeepSpeed builds DeepSpeedCPUAdam with --cpu-optimizer
    (megatron/optimizer/__init__.py l. 83-94; torch.optim.AdamW with --cpu_torch_adam), else its GPU apex FusedAdam,
    which the engine takes as the client optimizer. DeepSpeedCPUAdam is what the stack prices (stack_db cpu_offload
    deepspeed_cpu_adam); the others are listed as not modelled. Without the JSON's offload --cpu-optimizer stays listed
    as not modelled (the states priced on the GPU)."""
    if dj.get("offload_optimizer", "none") == "none":
        return
    unmodelled[:] = [u for u in unmodelled if not about(u, "--cpu-optimizer")]
    if "--cpu-optimizer" in ds and "--cpu_torch_adam" not in ds:
        assumed.append(listed("assumed", "offload_optimizer", "cpu",
                              "the JSON's offload_optimizer, stepped by DeepSpeedCPUAdam (--cpu-optimizer, "
                              f"{MDS_COMMIT} megatron/optimizer/__init__.py l. 83-94), the stack's host Adam (planner/offload.py)"))
    elif "--cpu-optimizer" in ds:
        unmodelled.append(noted("unmodelled", "--cpu-optimizer --cpu_torch_adam (torch.optim.AdamW steps the "
                                f"offloaded partition, {MDS_COMMIT} megatron/optimizer/__init__.py l. 83-86)", "priced at "
                                "DeepSpeedCPUAdam's rate (planner/offload.py)"))
    else:
        unmodelled.append(noted("unmodelled", "zero_optimization.offload_optimizer cpu without --cpu-optimizer (the "
                                "engine takes Megatron-DeepSpeed's GPU apex FusedAdam as the client optimizer for the host "
                                f"partition, {MDS_COMMIT} megatron/optimizer/__init__.py l. 83-116)", "priced as "
                                "DeepSpeedCPUAdam (planner/offload.py)"))


def _batch(cfg, ds: dict, flags: dict, stated: dict, dj: dict, where: str, jw: str, dp: int, assumed: list) -> None:
    """merge's batch: the micro-batch (flag and JSON must agree; the JSON's where the flag is absent), Megatron's
    global batch (set on the engine every step), the batch ramp."""
    job = cfg.job
    # the micro-batch: both stated must agree
    mbs_json = stated.get("train_micro_batch_size_per_gpu")
    if "--micro-batch-size" in flags and mbs_json is not None and mbs_json != job["micro_batch"]:
        raise PlannerError(f"{where}--micro-batch-size {job['micro_batch']} but {jw}train_micro_batch_size_per_gpu "
                           f"{mbs_json}: Megatron's data loader yields --micro-batch-size samples ({MDS_COMMIT} "
                           "megatron/training.py l. 715) while DeepSpeed's engine counts the JSON's",
                           "make them equal")
    if "--micro-batch-size" not in flags:
        job["micro_batch"] = dj["micro_batch"]
        cfg.assumed[:] = [a for a in cfg.assumed if not about(a, "micro_batch")]  # Megatron's: --micro-batch-size absent
        assumed.append(listed("assumed", "micro_batch", dj['micro_batch'], "the JSON's (--micro-batch-size absent)"))
    # the global batch: Megatron's, set on the engine every step
    g, m = job["global_batch"], job["micro_batch"]
    if g % (m * dp):
        raise PlannerError(f"{where}global batch {g} is not a multiple of micro-batch {m} x {dp} data-parallel ranks: "
                           "DeepSpeed's set_train_batch_size raises (deepspeed/runtime/engine.py @38327e07 l. 534-536), "
                           f"which Megatron-DeepSpeed calls every step ({MDS_COMMIT} megatron/training.py l. 1253-1258)",
                           "make --global-batch-size a multiple of micro-batch x dp")
    if stated.get("train_batch_size") is not None and stated["train_batch_size"] != g:
        assumed.append(listed("assumed", "global_batch", g,
                              f"Megatron's, not the JSON's train_batch_size {stated['train_batch_size']}: "
                              "Megatron-DeepSpeed sets DeepSpeed's batch to dp x --micro-batch-size x micro-batches every step "
                              f"({MDS_COMMIT} megatron/training.py l. 1253-1258; engine.py set_train_batch_size keeps the "
                              "micro-batch and sets the accumulation)"))
    if "--rampup-batch-size" in ds:
        _rampup(ds, flags, job, where, g, m * dp, assumed)


def _embed_layernorm(ds: dict, flags: dict, job: dict, where: str, dp: int, assumed: list, unmodelled: list) -> None:
    """merge's note on BigScience's --embed-layernorm [3]: priced where the job's model carries embedding_norm."""
    tp, pp = job["tp"], job["pp"]
    g, m = job["global_batch"], job["micro_batch"]
    if "--embed-layernorm" in ds:  # BigScience's [3]: the model's embedding_norm (model_fields), priced
        from ..catalog import load_model

        h, s = _int(where, flags, "--hidden-size", 1), job.get("seq_len") or _int(where, flags, "--seq-length", 1)
        per = s * m * h * 2 // tp if flags.get("--sequence-parallel") else s * m * h * 2
        held = min(pp, g // (m * dp))  # DeepSpeed's 1F1B: the first stage holds pp micro-batches (fewer if m < pp)
        what = (f"a LayerNorm on the first stage's embedding output, {BIGSCIENCE_COMMIT} megatron/mpu/layers.py l. 194-195, "
                f"250-251: 2 x {h:,} parameters, and its bf16 input kept outside the checkpointed layers, "
                f"{per / 2**20:,.0f} MiB a micro-batch, {held * per / 2**30:,.2f} GiB at the first stage's {held} in flight")
        if load_model(job["model"]).embedding_norm:  # the model the flags define carries it (model_fields)
            assumed.append(listed("assumed", "embedding_norm", True,
                                  f"--embed-layernorm ({what}; priced: memory.py [en], with its fp32 row "
                                  "statistics; its forward and backward pass, one LayerNorm on the first stage, which the step "
                                  "prices as a middle stage, not priced)"))
        else:  # --model given without the norm: the model wins, the flag is listed
            unmodelled.append(noted("unmodelled", "--embed-layernorm", f"{what}: the job's model {job['model']} has no "
                                    "embedding_norm, so none priced", ruled=False))


def _zero_stage(ds: dict, flags: dict, stated: dict, dj: dict, where: str, jw: str, pipe: bool, pp: int,
                ignored: list, assumed: list) -> tuple[int, int]:
    """merge's ZeRO stage: the JSON's (js), checked against the pipeline engine and --zero-stage (zs); (js, zs)."""
    # the ZeRO stage: the JSON's
    js = stated.get("zero_optimization.stage", 0)
    if pipe and js >= 2:  # GPTModelPipe under DeepSpeed's PipelineEngine, at any pp (module docstring: the model)
        raise PlannerError(f"{where}{jw}zero_optimization.stage {js} without --no-pipeline-parallel: Megatron-DeepSpeed "
                           f"then builds GPTModelPipe, a PipelineModule, at every pipeline size, pp {pp} here ({MDS_COMMIT} "
                           "pretrain_gpt.py model_provider l. 51-56), which deepspeed.initialize runs under the "
                           "PipelineEngine (microsoft/DeepSpeed @38327e07 deepspeed/__init__.py l. 178, 209), and that "
                           "asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism' (deepspeed/runtime/"
                           "pipe/engine.py l. 77-78): the job stops at start-up",
                           "add --no-pipeline-parallel (with --pipeline-model-parallel-size 1: Megatron's GPTModel, no "
                           "pipeline engine), or use ZeRO stage 0 or 1")
    # the tied embedding's gradient all-reduce of the pipeline model at pp > 1 (PipelineEngine._exec_reduce_tied_grads)
    # is priced in the step's pp_comm (stack_db pipeline_tied_grad_allreduce, step.py [20]): nothing to list
    zs = _int(where, ds, "--zero-stage", 1)  # arguments.py l. 1487 default 1
    shown = f"--zero-stage {zs}" if "--zero-stage" in ds else "--zero-stage absent (default 1)"
    if (js == 3) != (zs == 3):
        raise PlannerError(f"{where}{shown} but {jw}zero_optimization.stage {js}: Megatron-DeepSpeed builds the model "
                           f"with deepspeed.zero.Init(enabled=args.zero_stage == 3) ({MDS_COMMIT} pretrain_gpt.py l. 46-50) "
                           "and DeepSpeed's engine runs the JSON's stage (training.py deepspeed.initialize(config=...)): "
                           + ("the model is built whole on every GPU before stage 3 partitions it" if js == 3 else
                              "the parameters are built partitioned for an engine that never gathers them"),
                           "give --zero-stage the JSON's stage")
    if zs != js:
        assumed.append(noted("assumed", "sharding",
                             f"the JSON's zero_optimization.stage {js} runs (DeepSpeed's engine takes the JSON: "
                             f"{MDS_COMMIT} megatron/training.py deepspeed.initialize(config=args.deepspeed_config_dict)); "
                             f"{shown} is read only by zero.Init (stage 3) and optimizer statistics"))
    elif "--zero-stage" in ds:
        ignored.append(listed("ignored", "--zero-stage", zs, f"the JSON's zero_optimization.stage {js}, which the "
                              "engine runs", str))
    if "--use-distributed-optimizer" in flags:  # issue 21: read, never silently replaced
        ddp = flags.get("--DDP-impl", "local")
        if ddp != "local" or "--no-contiguous-buffers-in-local-ddp" in flags:
            given = f"--DDP-impl {ddp}" if ddp != "local" else "--no-contiguous-buffers-in-local-ddp"
            raise PlannerError(f"{where}--use-distributed-optimizer with {given}: Megatron-DeepSpeed's validate_args "
                               "asserts DDP_impl == 'local' and contiguous buffers on with it, before DeepSpeed starts "
                               f"({MDS_COMMIT} megatron/arguments.py l. 213-215)",
                               "drop --use-distributed-optimizer (DeepSpeed's engine shards by the JSON's ZeRO stage)")
        ignored.append(noted("ignored", "--use-distributed-optimizer", "under --deepspeed get_megatron_optimizer "
                             "returns the bare optimizer before its distributed-optimizer branch and get_model wraps no "
                             f"DDP: {MDS_COMMIT} megatron/optimizer/__init__.py l. 115-116, training.py l. 406-407; "
                             f"DeepSpeed's engine shards by the JSON's zero_optimization.stage {js} instead: "
                             f"sharding={dj.get('sharding', 'none')}"))
    return js, zs


def _pipeline_json(cfg, ds: dict, flags: dict, text: str, dcfg, where: str, jw: str, js: int, pipe: bool,
                   ignored: list, assumed: list):
    """merge's DeepSpeed-MoE checks and the JSON's pipeline section (the engine's partitioned pipe tensors): the
    parsed JSON (None where it is not JSON)."""
    tp, pp = cfg.job["tp"], cfg.job["pp"]
    data = _section(text)
    sec = data.get("pipeline") if isinstance(data, dict) else None
    on = [k for k in ("pipe_partitioned", "grad_partitioned") if not (isinstance(sec, dict) and sec.get(k) is False)]
    if "--num-experts" in flags:  # DeepSpeed-MoE (_deepspeed_moe)
        if js in (1, 2) and "--create-moe-param-group" not in ds:
            raise PlannerError(f"{where}an MoE model at {jw}zero_optimization.stage {js} without --create-moe-param-group: "
                               "DeepSpeed's ZeRO-1/2 optimizer asserts 'The model has moe layers, but None of the param "
                               "groups are marked as MoE' (microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/"
                               f"stage_1_and_2.py l. 626-628); the fork marks them only with the flag ({MDS_COMMIT} "
                               "megatron/optimizer/__init__.py l. 79-81)", "add --create-moe-param-group")
        if pipe and pp > 1 and tp > 1 and on:
            raise PlannerError(f"{where}an MoE model at pp {pp} and tp {tp} with {jw}pipeline.{' and '.join(on)} true "
                               "(DeepSpeed's default, deepspeed/runtime/config.py @38327e07 l. 467-468): GPTModelPipe "
                               "sends the hidden states and the aggregated MoE loss between stages, and the PipelineEngine "
                               f"partitions no more than one tensor that needs gradients ({MDS_COMMIT} megatron/model/"
                               "gpt_model.py l. 376-384)", 'set "pipeline": {"pipe_partitioned": false, '
                               '"grad_partitioned": false} in the JSON, or use tp 1 or pp 1')
        if "--moe-min-capacity" in ds:  # the capacity's floor the stack's dense gating prices (layers/moe.py [18])
            cfg.job["moe_min_capacity"] = _int(where, ds, "--moe-min-capacity")
        # the Megatron reader's defaults of the two (no --moe-aux-loss-coeff, no --moe-token-dispatcher-type)
        cfg.assumed[:] = [a for a in cfg.assumed if not (about(a, "moe_aux_loss_coeff") or about(a, "moe_dispatcher"))]
    if pipe and pp > 1 and tp > 1 and on and flags.get("--sequence-parallel"):
        # the engine's partitioned pipe tensors assume the TP ranks hold the same stage output
        # (plan.mds_pipe_unpartitioned): under SP each holds its own sequence shard
        raise PlannerError(f"{where}--sequence-parallel at pp {pp} and tp {tp} with {jw}pipeline.{' and '.join(on)} true "
                           "(DeepSpeed's default, deepspeed/runtime/config.py @38327e07 l. 467-468): the PipelineEngine "
                           "sends each TP rank's 1 / tp part of its stage output and all-gathers the parts on arrival "
                           "(deepspeed/runtime/pipe/engine.py l. 719-761, the gradient l. 826-851, over the TP ranks of "
                           "the stage, topology.py l. 355-364), which under sequence parallelism rebuilds a mix of "
                           "different ranks' sequence shards (microsoft/DeepSpeed#4196, microsoft/Megatron-DeepSpeed#227)",
                           'set "pipeline": {"pipe_partitioned": false, "grad_partitioned": false} in the JSON, or drop '
                           "--sequence-parallel, or use tp 1 or pp 1")
    if isinstance(sec, dict) and sec and set(sec) <= {"pipe_partitioned", "grad_partitioned"} \
            and all(v is False for v in sec.values()):
        # the engine's partitioned pipe tensors off (microsoft/DeepSpeed @38327e07 deepspeed/runtime/pipe/engine.py
        # l. 144-145, 719-761, 826-851): each stage sends every rank's whole output and its gradient, no TP all-gather
        # on arrival, the send step.py pp_comm prices; without a pipeline over TP (is_model_parallel) no effect
        dcfg.not_modelled[:] = [x for x in dcfg.not_modelled if not about(x, "pipeline")]
        shown = fmt_ignored("pipeline", sec)
        if pipe and pp > 1 and tp > 1:
            if "--num-experts" not in flags and not flags.get("--sequence-parallel"):
                cfg.job["pipe_partitioned"] = False  # the dense plan's whole sends (step.py [25]); MoE / SP run them off anyway
            assumed.append(listed("assumed", "pipeline", sec, "read, priced: the pipeline's p2p as the engine runs it "
                                  "with them, each TP rank's whole output (T h, / tp under SP) and its gradient with no TP "
                                  "all-gather (deepspeed/runtime/pipe/engine.py @38327e07 l. 719-761, 826-851; step.py "
                                  "pp_comm)", source=jw[:-2]))
        else:
            ignored.append(listed("ignored", "pipeline", sec, "no pipeline over TP: the engine partitions nothing at "
                                  "tp 1, pp 1 or --no-pipeline-parallel, deepspeed/runtime/pipe/engine.py @38327e07 "
                                  "l. 144-145", source=jw[:-2]))
    return data


def _engine_settings(cfg, ds: dict, flags: dict, data, dj: dict, where: str, jw: str, js: int, ignored: list,
                     assumed: list, unmodelled: list, stack: Optional[str] = None) -> None:
    """merge's engine settings: the precision and the attention kernel, the stack, the JSON's sharding, overlap and
    offload fields, the host optimizer."""
    job = cfg.job
    # precision: the engine's
    for flag, sec, other, on in (("--bf16", "bf16", "fp16", True), ("--fp16", "fp16", "bf16", False)):
        # the JSON's dtype as DeepSpeed reads it (deepspeed.read's job fp16: enabled by its truth, bf16 under its
        # older name bfloat16 too)
        if flag in flags and dj.get("fp16") is on:
            raise PlannerError(f"{where}{flag} but {jw}{other}.enabled on (as DeepSpeed reads it): DeepSpeed's engine "
                               "casts the model to the JSON's dtype, Megatron to the flag's",
                               f"enable {sec} in the JSON, or give --{other}")
    job.pop("fp16", None)
    if "fp16" in dj:  # the engine's dtype: fp16 with loss scaling (true) or bf16 (false), the JSON's (deepspeed.read)
        job["fp16"] = dj["fp16"]
    # the attention kernel: Megatron-DeepSpeed's flags, not Megatron-LM's --attention-backend
    flash = [f for f in FLASH_FLAGS if f in ds]
    job["attention"] = "flash" if flash else "eager"
    cfg.assumed[:] = [a for a in cfg.assumed if not (about(a, "attention") or about(a, "bytes_per_param"))]
    assumed.append(listed("assumed", "attention", job['attention'],
                          "" + (f"{flash[0]} (a FlashAttention kernel)" if flash else
                          "no --use-flash-attn* flag: Megatron-DeepSpeed's CoreAttention (baddbmm, fused scale-mask-softmax, "
                          f"bmm; {MDS_COMMIT} megatron/arguments.py l. 927-935, megatron/model/transformer.py)")))
    if "bytes_per_param" in job:  # Megatron-LM's DDP gradient-buffer rule (megatron._state_bytes): not built under DeepSpeed
        job.pop("bytes_per_param")
        assumed.append(noted("assumed", "bytes_per_param",
                             "the stack's (DeepSpeed's engine keeps the gradients; Megatron-LM's gradient "
                             "buffer flags are not read under DeepSpeed)"))
    fork = [f for f in BIGSCIENCE_FLAGS if f in ds or f in flags]
    job["stack"] = BIGSCIENCE_STACK if fork else STACK_2021 if stack == STACK_2021 else "megatron-deepspeed"
    if job["stack"] == STACK_2021:
        assumed.append(listed("assumed", "stack", STACK_2021,
                              f"the command line's (a script of the 2021 fork, {MDS2021_COMMIT}, names no "
                              "release: its flags are the later fork's); DeepSpeed's pipeline model only at pp > 1 "
                              f"({MDS2021_COMMIT} pretrain_gpt.py model_provider l. 46)"))
    if fork:
        assumed.append(listed("assumed", "stack", BIGSCIENCE_STACK,
                              f"{', '.join(fork)} {'is' if len(fork) == 1 else 'are'} BigScience's "
                              f"fork's ({BIGSCIENCE_COMMIT} megatron/arguments.py; none in {MDS_COMMIT} megatron/arguments.py, "
                              "whose parse_args refuses an unknown flag, l. 58-60): the fork as BLOOM ran it "
                              "(stack_db/megatron-deepspeed-bigscience.yaml)"))
    _softmax_fp32(cfg, ds, flash, ignored, assumed, cfg.not_modelled)
    _softmax_fusion(cfg, ds, flash, ignored)
    job.pop("sync_tp_duplicated_parameters", None)
    if "--sync-tp-duplicated-parameters" in ds:  # BigScience's fork [3]: _bigscience's note (step.tp_comm [sy])
        job["sync_tp_duplicated_parameters"] = True
    job.pop("partition_activations", None)
    if ds.get("_partition"):  # split_flags: --partition-activations under full recompute at TP > 1 [pa]
        job["partition_activations"] = True
    for k in ("sharding", "sharding_mode", "shard_group", "deepspeed_zero3", "dp_comm_overlap", "precision",
              "offload_optimizer", "offload_param"):
        job.pop(k, None)
        if k in dj:
            job[k] = dj[k]
    _host_optimizer(ds, dj, assumed, unmodelled)
    # the Megatron reader's --overlap-grad-reduce absent and bf16 (--fp16, or neither flag) lines: the JSON's engine runs
    cfg.assumed[:] = [a for a in cfg.assumed if not (about(a, "dp_comm_overlap", False) or about(a, "precision", "bf16"))]
    if "--overlap-grad-reduce" in flags:
        cfg.ignored.append(noted("ignored", "--overlap-grad-reduce", "Megatron's DDP, not built under DeepSpeed: the "
                                 "JSON's zero_optimization.overlap_comm runs"))
    if pipeline_model(ds, job["pp"], stack) and js == 1 and job.get("dp_comm_overlap"):
        # GPTModelPipe (pretrain_gpt.py model_provider without --no-pipeline-parallel) is a PipelineModule
        job["dp_comm_overlap"] = False
        ignored.append(listed("ignored", "zero_optimization.overlap_comm", True, "DeepSpeed's engine turns it off for "
                              "a PipelineModule, Megatron-DeepSpeed's GPTModelPipe without --no-pipeline-parallel: "
                              "microsoft/DeepSpeed @38327e07 deepspeed/runtime/engine.py l. 1639-1642; dp_comm_overlap "
                              "false", show="true", spaced=True, source=jw[:-2]))


# where each fork adds the two flags and its CoreAttention forces the fp32 softmax under query-key layer scaling
SOFTMAX_FP32_AT = {"megatron-deepspeed": f"{MDS_COMMIT} megatron/arguments.py l. 1129-1135, megatron/model/transformer.py "
                                         "CoreAttention l. 245-248, 274-280",
                   STACK_2021: f"{MDS2021_COMMIT} megatron/arguments.py l. 554-560, megatron/model/transformer.py "
                               "ParallelAttention l. 123-126",
                   BIGSCIENCE_STACK: "bigscience-workshop/Megatron-DeepSpeed @497aa1bf (and @8387ae17) megatron/arguments.py "
                                     "l. 688-694, megatron/model/transformer.py ParallelAttention l. 133-136"}


# where each fork adds --no-masked-softmax-fusion (store_false, dest masked_softmax_fusion) and hands it to its eager core's
# FusedScaleMaskSoftmax (stack_db runs.attention eager_softmax_fusion_switch, with the kernel conditions)
SOFTMAX_FUSION_AT = {"megatron-deepspeed": f"{MDS_COMMIT} megatron/arguments.py l. 899-903, megatron/model/transformer.py "
                                           "CoreAttention l. 274-280, megatron/model/fused_softmax.py l. 152-172",
                     STACK_2021: f"{MDS2021_COMMIT} megatron/arguments.py l. 422-426, megatron/model/transformer.py "
                                 "ParallelAttention l. 169-175, megatron/model/fused_softmax.py l. 132-137",
                     BIGSCIENCE_STACK: "bigscience-workshop/Megatron-DeepSpeed @497aa1bf megatron/arguments.py l. 537-541, "
                                       "megatron/model/transformer.py ParallelAttention l. 179-185, "
                                       "megatron/model/fused_softmax.py l. 165-184"}


def _softmax_fusion(cfg, ds: dict, flash: list, ignored: list) -> None:
    """--no-masked-softmax-fusion as every Megatron-DeepSpeed fork reads it (SOFTMAX_FUSION_AT): the eager core attention's
    FusedScaleMaskSoftmax never takes its fused kernel, so the job's masked_softmax_fusion is false (the unfused softmax at
    every key length: compute.eager_core_terms, memory.py [sm]); under a FlashAttention kernel (no CoreAttention) the flag
    is listed as ignored."""
    if "--no-masked-softmax-fusion" not in ds:
        return
    at = SOFTMAX_FUSION_AT[cfg.job["stack"]]
    if flash:
        ignored.append(_flag_note("--no-masked-softmax-fusion", True, f"read by the eager core attention's softmax only "
                                                                      f"({at}); {flash[0]} runs a FlashAttention kernel"))
        return
    cfg.job["masked_softmax_fusion"] = False


def _softmax_fp32(cfg, ds: dict, flash: list, ignored: list, assumed: list, not_modelled: list) -> None:
    """The job's attention_softmax_in_fp32 (planner/memory.py [sm]) as every Megatron-DeepSpeed fork sets it
    (SOFTMAX_FP32_AT): the eager core attention builds FusedScaleMaskSoftmax with softmax_in_fp32 =
    --attention-softmax-in-fp32 (store_true, default false) or apply_query_key_layer_scaling, which is on unless
    --no-query-key-layer-scaling (store_false): so true without either flag (the forks' default), false only with
    --no-query-key-layer-scaling alone (its torch softmax, where it runs, in the 16-bit input dtype; microsoft
    @f4157bea megatron/model/fused_softmax.py forward_torch_softmax l. 192-207). Listed as assumed where neither
    flag says it outright; under a FlashAttention kernel (no CoreAttention) both flags are listed as ignored. The
    Megatron reader's own reading (Megatron-LM's default false, its --transformer-impl local rule) is replaced."""
    job = cfg.job
    job.pop("attention_softmax_in_fp32", None)
    cfg.assumed[:] = [a for a in cfg.assumed if not about(a, "attention_softmax_in_fp32")]
    given = [f for f in ("--attention-softmax-in-fp32", "--no-query-key-layer-scaling") if f in ds]
    at = SOFTMAX_FP32_AT[job["stack"]]
    if flash:
        for f in given:
            ignored.append(_flag_note(f, True, f"read by the eager core attention's softmax only ({at}); {flash[0]} "
                                               "runs a FlashAttention kernel"))
        return
    scaling = "--no-query-key-layer-scaling" not in ds
    job["attention_softmax_in_fp32"] = scaling or "--attention-softmax-in-fp32" in ds
    if "--attention-softmax-in-fp32" in ds:
        if not scaling:  # the fp32 path without the scale multiply: no job field says so (stack kernels sources)
            not_modelled.append(noted("not_modelled", "--no-query-key-layer-scaling",
                                      "with --attention-softmax-in-fp32 "
                                      "the eager core's unfused softmax, where it runs, skips the scale multiply (input * "
                                      f"scale, scale None: {at}): priced with it, 8 + 8 B a score element more (stack "
                                      "kernels score_softmax_unfused 37 / 41 against 29 / 33)"))
        return
    assumed.append(listed("assumed", "attention_softmax_in_fp32", True, "no --no-query-key-layer-scaling: query-key "
                          "layer scaling, on by default, runs the eager core's masking and softmax in fp32, its fp32 "
                          f"output saved where the torch softmax runs ({at})") if scaling else
                   listed("assumed", "attention_softmax_in_fp32", False, "--no-query-key-layer-scaling without "
                          "--attention-softmax-in-fp32 (store_true, default false): the eager core's torch softmax, "
                          f"where it runs, in the 16-bit input dtype ({at})"))


def merge(cfg, ds: dict, flags: dict, where: str, script: Path, heredocs: dict, hardware: Optional[str],
          extra: tuple, stack: Optional[str] = None) -> None:
    """Lay the ds_config JSON over the Megatron reader's job (in place): module docstring. stack: the command line's
    (STACK_2021: the 2021 fork's pipeline-model rule, pipeline_model, and its stack)."""
    from .deepspeed import read as read_json

    ignored, assumed, not_modelled, unmodelled = extra
    job = cfg.job
    label, text = config_text(ds, where, script, heredocs)
    tp, pp = job["tp"], job["pp"]
    try:
        dcfg = read_json(Path(label), text, model=job["model"], gpus=job["gpus"], hardware=hardware,
                         parallel={"tp": tp, "pp": pp, "cp": job.get("cp", 1)})
    except PlannerError as e:
        raise PlannerError(f"{where}the ds_config the script names: {e.message}", e.hint) from None
    dj, stated = dcfg.job, dcfg.stated
    jw = f"{label}: "
    dp = job["gpus"] // (tp * pp * job.get("cp", 1))
    _batch(cfg, ds, flags, stated, dj, where, jw, dp, assumed)
    _embed_layernorm(ds, flags, job, where, dp, assumed, unmodelled)
    pipe = pipeline_model(ds, pp, stack)
    js, zs = _zero_stage(ds, flags, stated, dj, where, jw, pipe, pp, ignored, assumed)
    data = _pipeline_json(cfg, ds, flags, text, dcfg, where, jw, js, pipe, ignored, assumed)
    _engine_settings(cfg, ds, flags, data, dj, where, jw, js, ignored, assumed, unmodelled, stack)
    # the JSON's own lists, each named as the JSON's (and the lines above that the helpers named so)
    lab_ignored, lab_not_modelled = ([x.labeled(label) for x in xs] for xs in (dcfg.ignored, dcfg.not_modelled))
    cfg.ignored += ignored + lab_ignored
    cfg.not_modelled += not_modelled + lab_not_modelled
    cfg.unmodelled += unmodelled
    # the JSON reader's lines on what the script decides (its batch, recompute, model parallelism and, from its
    # --use-flash-attn* flags, the attention core: _engine_settings), not kept, by their first settings (deepspeed.read:
    # micro_batch, global_batch, recompute none, tp / pp / cp 1 where the command line gives none (here the script's
    # degrees: never), attention flash; None: its one line that is all rule, the batch keys read at the world size)
    drop = ("micro_batch", "global_batch", "recompute", "tp", "pp", "cp", None, "attention")
    if "--pad-vocab-size-to" in ds:  # _bigscience gave it as --padded-vocab-size: its own note replaces the reader's
        cfg.assumed[:] = [a for a in cfg.assumed if not (about(a, "vocab_size") and a.message == PADDED_VOCAB_RULE)]
    cfg.assumed += assumed + [x.labeled(label) for x in dcfg.assumed if not any(about(x, k) for k in drop)]
    cfg.stated.update({k: v for k, v in stated.items()})
    cfg.stated["--micro-batch-size"] = flags.get("--micro-batch-size")
    cfg.stated["--zero-stage"] = zs  # absent: Megatron-DeepSpeed's default 1
    cfg.stated["--no-pipeline-parallel"] = "--no-pipeline-parallel" in ds  # a PP change must drop it
    cfg.fmt = "megatron-deepspeed"
    cfg.param_gather = None  # no such DeepSpeed setting: its ZeRO-1/2 gather is synchronous (step.py [40])


def _section(text: str):
    import json

    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
