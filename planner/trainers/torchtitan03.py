"""Read (and write) torchtitan 0.3.0's launch line: `--module M --config F` plus `--section.key value` options.

torchtitan dropped its TOML job files in 9810191bb (#2386, 2026-02-23). Its release/0.3 (pytorch/torchtitan
@4f9e9a47d, version.txt 0.3.0rc1: the stack `torchtitan-0.3`, stack_db/torchtitan-0.3.yaml) is configured by a
Python config function, chosen by `--module M --config F` (config/manager.py ConfigManager._load_config l. 47-155:
torchtitan.models.<M>.config_registry.<F>(), the last --module / --config given winning), with the command
line's options laid over it by tyro (manager.py parse_args l. 33-44: CLI > config function). This module reads
such a line from a file (a shell script or a text file holding it), in either form torchtitan ships:

  [VAR=value ...] ./run_train.sh [options]     run_train.sh @4f9e9a47d l. 29-32: NGPU (default 8), MODULE (default
                                               llama3), CONFIG (default llama3_debugmodel) from the environment;
                                               l. 47-50: torchrun --nproc_per_node=${NGPU} ... -m torchtitan.train
                                               --module ${MODULE} --config ${CONFIG} "$@"
  torchrun [--nnodes=N] [--nproc_per_node=G] ... -m torchtitan.train --module M --config F [options]
  (python[3] -m torchtitan.train ... the same, on one GPU unless NGPU says otherwise)

The options, as tyro parses them with torchtitan's rules (config/manager.py register_tyro_rules l. 232-245):
`--section.key value` or `--section.key=value`, the key with underscores or hyphens (torchtitan's own tests write
both: tests/integration_tests/features.py l. 74 `--parallelism.tensor_parallel_degree 2`, l. 176
`--parallelism.no-enable-sequence-parallel`); a boolean is a flag, `--section.key` true and `--section.no-key`
false (h100.py l. 105 `--compile.no-enable`), and takes no value; every other option takes the next word as
its value, typed as tyro types it (the type table BOOL_OPTIONS ... LITERAL_OPTIONS: a missing value is refused, exit 2,
as tyro stops); a list[str] is one comma-separated word
(manager.py list_str_rule l. 234-245); the activation checkpointing policy is a subcommand,
`activation-checkpoint:selective|full|none|memory-budget` (distributed/activation_checkpoint.py l. 329-337).
The options that exist are exactly CLI_OPTIONS, torchtitan's own frozen list (tests/unit_tests/
test_no_new_cli_options.py l. 18-243: "The command-line options are frozen", config/README.md); any other
option -- main's `parallelism.expert_tensor_parallel_degree` say -- is refused (exit 2) naming the file and key,
with the 0.3 spelling where one exists (MAIN_ONLY). The model (Trainer.Config.model_spec, tyro.conf.Suppress:
trainer.py l. 75-77) and its converters (fp8) are the config function's: no option sets them.

Each config function read is copied below as data (CONFIG_FUNCTIONS: the settings it makes, file and lines),
its model as main's registry flavor of the same numbers (torchtitan_flavors.TORCHTITAN_03), with the attention
backend it builds (model_registry's default "flex", llama3/__init__.py l. 369-371, gpt_oss's "varlen", priced as
flex: ATTN_PRICED, or its own argument): llama3_8b, llama3_8b_mxfp8, llama3_70b, llama3_405b, deepseek_v3_16b,
deepseek_v3_671b, qwen3_0_6b, qwen3_1_7b, qwen3_14b, qwen3_30b_a3b, qwen3_32b, sft_qwen3_8b_math, gpt_oss_20b,
gpt_oss_120b and the debug models whose 0.3 flavor is main's (llama3_debugmodel and its _ce_loss, _varlen_attn, _float8;
qwen3_debugmodel, qwen3_moe_debug, deepseek_v3_debugmodel). Each but llama3_debugmodel_ce_loss wraps its loss in
ChunkedLossWrapper (LOSS_CHUNKS): read as the job field chunked_loss, priced by the stack's chunked-loss
terms (memory._chunked_loss), and said so; --loss.num_chunks other than 8 is listed as not modelled. Flux's
sections (`--encoder.*`, `--inference.*`: FluxTrainer.Config) with a language model's function are refused, as
tyro refuses them there. The
options and the function's settings are then laid out in main's sections (0.3 renames: to_main_sections) and
priced by the TOML reader's one mapping (torchtitan.read_sections); what only 0.3 has is read here (ONLY_03):
  parallelism.enable_sequence_parallel (default true, configs.py l. 160) -> sequence_parallel (false: TP without
      SP, which 0.3 runs: stack_db torchtitan-0.3 startup_rules_absent TORCHTITAN_SP)
  compile.enable_async_tensor_parallel (configs.py l. 295; main's parallelism.enable_async_tensor_parallel)
      -> tp_comm_overlap
  parallelism.spmd_backend (default "spmd_types", l. 163-172) -> spmd_backend (a DTensor backend: op SAC keeps
      the EP exchange's and the TP reduce-scatters' outputs eager too, memory.py [sb]; the default stated: ignored)
  parallelism.enable_fsdp_symm_mem (default false, l. 151) -> fsdp_symm_mem (refused below compute capability 9.0:
      start-up rule TORCHTITAN_FSDP_SYMM_MEM_SM90; its buffers and time not priced, said by resolve)
  debug.spmd_typechecking (default false, l. 356) -> spmd_typechecking (refused with PP, and with selective AC over
      FlexAttention, under spmd_types: TORCHTITAN_SPMD_TYPECHECK_PP / _SAC_FLEX)
  parallelism.context_parallel_load_balancer (default "headtail", l. 235): "" refused (l. 262-266), a name torch's
      cp_shard does not build -> cp_load_balancer as stated (refused under CP: start-up rule
      TORCHTITAN_CP_LOAD_BALANCER_NAME; ignored at cp 1), None (no load balancing) under CP -> cp_load_balance false (the
      attention core at the last CP rank's share: step.cp_balance_factor; cp_balancer.load_balancer; written back by the export)
  parallelism.context_parallel_ptrr_mask_key (l. 243), training.disable_cuda_graphs (default false, l. 66: the forward +
      backward step captured in a CUDA graph, trainer.py l. 613-614) -> not priced: listed (a stated non-default
      as not modelled, the default as assumed), never dropped; CUDA graphs on (the default) beside pipeline
      parallelism, or expert parallelism under any dispatch but HybridEP's non-blocking one, is refused as
      0.3.0 refuses it (trainer.py _validate_cuda_graphs l. 179-210: cuda_graph_refusal), and the export and
      check's fixes write --training.disable_cuda_graphs wherever the plan has either
Main's options that 0.3 has not (parallelism.context_parallel_rotate_method, disable_loss_parallel,
enable_async_tensor_parallel, expert_parallel_comm_backend, expert_tensor_parallel_degree,
pipeline_parallel_expert_parallel_overlap) are unknown options of 0.3: refused.

The export (launch_flavor and launch_text, called by export.export_plan; `fit --export torchtitan --stack torchtitan-0.3`, `planner export --format
torchtitan` of a plan on that stack) writes the config function whose model and fp8 converter equal the plan's
(no option can set either) and every other setting of the plan as an option, from the TOML export's one mapping
(export._torchtitan_sections); a plan no transcribed config function builds, or with a setting 0.3's options
cannot spell, is refused naming why.
"""

from __future__ import annotations

import copy
import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import files
from ..errors import PlannerError
from . import TrainerConfig, fmt_ignored, one_rank_mesh
from .cp_balancer import BalancerSource, load_balancer
from .report import Note, about, listed, listed_all, noted

COMMIT = "release/0.3 @4f9e9a47d"
STACK = "torchtitan-0.3"

# torchtitan's frozen command-line options at 4f9e9a47d, section -> keys (tests/unit_tests/test_no_new_cli_options.py
# l. 18-243, _FROZEN_CLI_OPTIONS; "" the top-level ones), copied in full
_OPTIONS = {
    "activation_checkpoint": (
        "debug determinism_check force_recompute_mm_shapes_by_fqns memory_budget preserve_rng_state "
        "visualize_memory_budget_pareto"
    ).split(),
    "checkpoint": (
        "async_mode create_seed_checkpoint enable enable_first_step_checkpoint exclude_from_loading "
        "export_dtype folder initial_load_in_hf initial_load_in_hf_quantized initial_load_model_only "
        "initial_load_path interval keep_latest_k last_save_in_hf last_save_model_only load_only "
        "load_step"
    ).split(),
    "comm": (
        "init_timeout_seconds mode save_traces_file_prefix save_traces_folder trace_buf_size "
        "train_timeout_seconds"
    ).split(),
    "compile": (
        "backend components enable enable_async_tensor_parallel"
    ).split(),
    "dataloader": (
        "build_mrope_positions dataset dataset_path dataset_subset generate_timesteps image_mean "
        "image_std img_size infinite load_dataset_kwargs max_images_per_batch max_patches "
        "max_patches_per_side max_pixels min_pixels num_workers packing_buffer_size patch_order "
        "patch_size persistent_workers pin_memory prefetch_factor prompt_dropout_prob seed "
        "sources.dataset sources.dataset_path sources.infinite sources.load_dataset_kwargs "
        "sources.num_workers sources.persistent_workers sources.pin_memory sources.prefetch_factor "
        "sources.weight spatial_merge_size stopping_strategy temporal_patch_size video_dir video_fps "
        "video_max_frames video_min_frames weight"
    ).split(),
    "debug": (
        "batch_invariant detect_anomaly deterministic deterministic_warn_only enable_structured_logging "
        "moe_force_load_balance print_config save_config_file seed spmd_typechecking"
    ).split(),
    "": (
        "dump_folder hf_assets_path"
    ).split(),
    "encoder": (
        "autoencoder_path clip_encoder random_init t5_encoder"
    ).split(),
    "inference": (
        "img_size local_batch_size prompts_path sampling.classifier_free_guidance_scale "
        "sampling.denoising_steps sampling.enable_classifier_free_guidance save_img_folder"
    ).split(),
    "loss": (
        "global_vocab_size loss_fn.global_vocab_size loss_fn.mtp_scale mtp_scale num_chunks"
    ).split(),
    "lr_scheduler": (
        "decay_ratio decay_type min_lr_factor total_steps warmup_steps"
    ).split(),
    "metrics": (
        "disable_color_printing enable_tensorboard enable_wandb log_freq save_for_all_ranks "
        "save_tb_folder"
    ).split(),
    "optimizer": (
        "implementation optimizer_factory_kwargs_by_name param_groups param_groups.optimizer_kwargs "
        "param_groups.optimizer_name param_groups.pattern"
    ).split(),
    "override": (
        "imports"
    ).split(),
    "parallelism": (
        "context_parallel_degree context_parallel_load_balancer context_parallel_ptrr_mask_key "
        "data_parallel_replicate_degree data_parallel_shard_degree enable_fsdp_symm_mem "
        "enable_sequence_parallel expert_parallel_degree fsdp_reshard_after_forward "
        "module_fqns_per_model_part pipeline_parallel_degree pipeline_parallel_first_stage_less_layers "
        "pipeline_parallel_last_stage_less_layers pipeline_parallel_layers_per_stage "
        "pipeline_parallel_microbatch_size pipeline_parallel_schedule pipeline_parallel_schedule_csv "
        "spmd_backend tensor_parallel_degree"
    ).split(),
    "profiler": (
        "enable_memory_snapshot enable_profiling memory_snapshot_freq memory_snapshot_max_entries "
        "profile_freq profiler_active profiler_repeat profiler_skip_first profiler_skip_first_wait "
        "profiler_warmup save_memory_snapshot_folder save_traces_folder"
    ).split(),
    "tokenizer": (
        "clip_tokenizer_path image_token max_t5_encoding_len pad_token t5_tokenizer_path test_mode "
        "video_token vision_end_token vision_start_token"
    ).split(),
    "training": (
        "disable_cuda_graphs dtype enable_cpu_offload gc_debug gc_freq global_batch_size local_batch_size "
        "max_norm mixed_precision_param mixed_precision_reduce seq_len steps"
    ).split(),
    "validator": (
        "all_timesteps dataloader.build_mrope_positions dataloader.dataset dataloader.dataset_path "
        "dataloader.dataset_subset dataloader.generate_timesteps dataloader.image_mean "
        "dataloader.image_std dataloader.img_size dataloader.infinite dataloader.load_dataset_kwargs "
        "dataloader.max_images_per_batch dataloader.max_patches dataloader.max_patches_per_side "
        "dataloader.max_pixels dataloader.min_pixels dataloader.num_workers "
        "dataloader.packing_buffer_size dataloader.patch_order dataloader.patch_size "
        "dataloader.persistent_workers dataloader.pin_memory dataloader.prefetch_factor "
        "dataloader.prompt_dropout_prob dataloader.seed dataloader.sources.dataset "
        "dataloader.sources.dataset_path dataloader.sources.infinite "
        "dataloader.sources.load_dataset_kwargs dataloader.sources.num_workers "
        "dataloader.sources.persistent_workers dataloader.sources.pin_memory "
        "dataloader.sources.prefetch_factor dataloader.sources.weight dataloader.spatial_merge_size "
        "dataloader.stopping_strategy dataloader.temporal_patch_size dataloader.video_dir "
        "dataloader.video_fps dataloader.video_max_frames dataloader.video_min_frames dataloader.weight "
        "enable freq sampling.classifier_free_guidance_scale sampling.denoising_steps "
        "sampling.enable_classifier_free_guidance save_img_count save_img_folder steps"
    ).split(),
}
CLI_OPTIONS = frozenset(f"{s}.{k}" if s else k for s, keys in _OPTIONS.items() for k in keys)

# each option's type at 4f9e9a47d, as tyro parses it (the field's annotation in the config dataclass that holds it:
# config/configs.py TrainingConfig l. 36-102, ParallelismConfig l. 112-289, CompileConfig l. 291-301, CommConfig
# l. 314-340, DebugConfig l. 352-382; components/checkpointer/base.py BaseCheckpointManager.Config l. 223-; components/
# metrics.py MetricsProcessor.Config l. 278-; components/optimizer/lr_scheduler.py l. 51-; components/optimizer/
# optimizer.py l. 100-; components/loss.py BaseLoss / ChunkedLossWrapper.Config l. 302, 609-; components/validate.py
# l. 35-, 73-; tools/profiler.py Profiler.Config l. 122-; distributed/activation_checkpoint.py l. 130-; hf_datasets/
# text_datasets.py l. 246-, 304-, 645-, 718- and multimodal/mm_datasets.py l. 500-; components/tokenizer.py; the Flux
# sections models/flux/configs.py), read with tyro >= 1.0.5 (.ci/docker/requirements.txt l. 5) at brentyi/tyro v1.0.15:
#   bool with a default: a flag pair --k / --no-k taking no value (_arguments.py _rule_handle_boolean_flags l. 377-412);
#   every other type takes its value from the next word, which must not look like a flag (a word that starts with "-"
#   and a letter, or "--"; a negative number is a value), else tyro stops: "Missing value for argument" (_backends/
#   _tyro_backend.py _blocks_value_consumption l. 67-97, _consume_argument l. 952-995), exit 2 (_errors.py l. 693);
#   int / float: Python's int() / float() of the word (constructors/_primitive_spec.py basics_rule l. 275-293);
#   X | None: the word "None" is None (union_rule l. 866-, nonetype_rule l. 327-337); a Literal: one of its values
#   (literal_rule l. 840-, InvalidChoice); list[str]: one comma-separated word (torchtitan's list_str_rule, manager.py
#   l. 234-245); tuple[float, ...]: the words up to the next flag-like one (nargs "*")
BOOL_OPTIONS = frozenset({
    "activation_checkpoint.debug", "activation_checkpoint.preserve_rng_state",
    "activation_checkpoint.visualize_memory_budget_pareto", "checkpoint.create_seed_checkpoint",
    "checkpoint.enable", "checkpoint.enable_first_step_checkpoint", "checkpoint.initial_load_in_hf",
    "checkpoint.initial_load_in_hf_quantized", "checkpoint.initial_load_model_only", "checkpoint.last_save_in_hf",
    "checkpoint.last_save_model_only", "checkpoint.load_only", "compile.enable",
    "compile.enable_async_tensor_parallel", "dataloader.build_mrope_positions", "dataloader.generate_timesteps",
    "dataloader.infinite", "dataloader.persistent_workers", "dataloader.pin_memory", "dataloader.sources.infinite",
    "dataloader.sources.persistent_workers", "dataloader.sources.pin_memory", "debug.batch_invariant",
    "debug.detect_anomaly", "debug.deterministic", "debug.deterministic_warn_only",
    "debug.enable_structured_logging", "debug.moe_force_load_balance", "debug.print_config",
    "debug.spmd_typechecking", "encoder.random_init", "inference.sampling.enable_classifier_free_guidance",
    "metrics.disable_color_printing", "metrics.enable_tensorboard", "metrics.enable_wandb",
    "metrics.save_for_all_ranks", "parallelism.enable_fsdp_symm_mem", "parallelism.enable_sequence_parallel",
    "profiler.enable_memory_snapshot", "profiler.enable_profiling", "tokenizer.test_mode",
    "training.disable_cuda_graphs", "training.enable_cpu_offload", "training.gc_debug", "validator.all_timesteps",
    "validator.dataloader.build_mrope_positions", "validator.dataloader.generate_timesteps",
    "validator.dataloader.infinite", "validator.dataloader.persistent_workers", "validator.dataloader.pin_memory",
    "validator.dataloader.sources.infinite", "validator.dataloader.sources.persistent_workers",
    "validator.dataloader.sources.pin_memory", "validator.enable",
    "validator.sampling.enable_classifier_free_guidance",
})
INT_OPTIONS = frozenset({
    "checkpoint.interval", "checkpoint.keep_latest_k", "checkpoint.load_step", "comm.init_timeout_seconds",
    "comm.trace_buf_size", "comm.train_timeout_seconds", "dataloader.img_size", "dataloader.max_images_per_batch",
    "dataloader.max_patches", "dataloader.max_patches_per_side", "dataloader.max_pixels", "dataloader.min_pixels",
    "dataloader.num_workers", "dataloader.packing_buffer_size", "dataloader.patch_size", "dataloader.seed",
    "dataloader.sources.num_workers", "dataloader.spatial_merge_size", "dataloader.temporal_patch_size",
    "dataloader.video_max_frames", "dataloader.video_min_frames", "inference.img_size",
    "inference.local_batch_size", "inference.sampling.denoising_steps", "loss.num_chunks",
    "lr_scheduler.warmup_steps", "metrics.log_freq", "parallelism.context_parallel_degree",
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.expert_parallel_degree", "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_first_stage_less_layers",
    "parallelism.pipeline_parallel_last_stage_less_layers", "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.tensor_parallel_degree", "profiler.memory_snapshot_max_entries", "profiler.profile_freq",
    "profiler.profiler_active", "profiler.profiler_warmup", "tokenizer.max_t5_encoding_len", "training.gc_freq",
    "training.global_batch_size", "training.local_batch_size", "training.seq_len", "training.steps",
    "validator.dataloader.img_size", "validator.dataloader.max_images_per_batch",
    "validator.dataloader.max_patches", "validator.dataloader.max_patches_per_side",
    "validator.dataloader.max_pixels", "validator.dataloader.min_pixels", "validator.dataloader.num_workers",
    "validator.dataloader.packing_buffer_size", "validator.dataloader.patch_size", "validator.dataloader.seed",
    "validator.dataloader.sources.num_workers", "validator.dataloader.spatial_merge_size",
    "validator.dataloader.temporal_patch_size", "validator.dataloader.video_max_frames",
    "validator.dataloader.video_min_frames", "validator.freq", "validator.sampling.denoising_steps",
    "validator.save_img_count", "validator.steps",
})
OPT_INT_OPTIONS = frozenset({
    "dataloader.prefetch_factor", "dataloader.sources.prefetch_factor", "debug.seed", "loss.global_vocab_size",
    "loss.loss_fn.global_vocab_size", "lr_scheduler.total_steps", "parallelism.pipeline_parallel_layers_per_stage",
    "profiler.memory_snapshot_freq", "profiler.profiler_repeat", "profiler.profiler_skip_first",
    "profiler.profiler_skip_first_wait", "validator.dataloader.prefetch_factor",
    "validator.dataloader.sources.prefetch_factor",
})
FLOAT_OPTIONS = frozenset({
    "activation_checkpoint.memory_budget", "dataloader.prompt_dropout_prob", "dataloader.sources.weight",
    "dataloader.video_fps", "dataloader.weight", "inference.sampling.classifier_free_guidance_scale",
    "loss.loss_fn.mtp_scale", "loss.mtp_scale", "lr_scheduler.min_lr_factor", "training.max_norm",
    "validator.dataloader.prompt_dropout_prob", "validator.dataloader.sources.weight",
    "validator.dataloader.video_fps", "validator.dataloader.weight",
    "validator.sampling.classifier_free_guidance_scale",
})
OPT_FLOAT_OPTIONS = frozenset({
    "lr_scheduler.decay_ratio",
})
STR_OPTIONS = frozenset({
    "activation_checkpoint.determinism_check", "checkpoint.folder", "comm.save_traces_file_prefix",
    "comm.save_traces_folder", "compile.backend", "dataloader.dataset", "dataloader.dataset_subset",
    "dataloader.sources.dataset", "dataloader.video_dir", "dump_folder", "encoder.autoencoder_path",
    "encoder.clip_encoder", "encoder.t5_encoder", "hf_assets_path", "inference.prompts_path",
    "inference.save_img_folder", "metrics.save_tb_folder", "optimizer.param_groups.optimizer_name",
    "optimizer.param_groups.pattern", "parallelism.pipeline_parallel_schedule",
    "profiler.save_memory_snapshot_folder", "profiler.save_traces_folder", "tokenizer.clip_tokenizer_path",
    "tokenizer.image_token", "tokenizer.pad_token", "tokenizer.t5_tokenizer_path", "tokenizer.video_token",
    "tokenizer.vision_end_token", "tokenizer.vision_start_token", "validator.dataloader.dataset",
    "validator.dataloader.dataset_subset", "validator.dataloader.sources.dataset",
    "validator.dataloader.video_dir", "validator.save_img_folder",
})
OPT_STR_OPTIONS = frozenset({
    "checkpoint.initial_load_path", "dataloader.dataset_path", "dataloader.sources.dataset_path",
    "debug.save_config_file", "parallelism.context_parallel_load_balancer",
    "parallelism.context_parallel_ptrr_mask_key", "parallelism.pipeline_parallel_schedule_csv",
    "validator.dataloader.dataset_path", "validator.dataloader.sources.dataset_path",
})
FLOATS_OPTIONS = frozenset({
    "dataloader.image_mean", "dataloader.image_std", "validator.dataloader.image_mean",
    "validator.dataloader.image_std",
})
LITERAL_OPTIONS = {
    "training.dtype": ("bfloat16", "float32"), "training.mixed_precision_param": ("bfloat16", "float32"),
    "training.mixed_precision_reduce": ("float32",), "parallelism.fsdp_reshard_after_forward": ("default", "always", "never"),
    "parallelism.spmd_backend": ("partial_dtensor", "full_dtensor", "spmd_types"),
    "comm.mode": ("default", "fake_backend", "local_tensor", "torchcomms"),
    "checkpoint.async_mode": ("disabled", "async", "async_with_pinned_mem"),
    "checkpoint.export_dtype": ("float16", "bfloat16", "float32"), "lr_scheduler.decay_type": ("linear", "sqrt", "cosine"),
    "optimizer.implementation": ("for-loop", "foreach", "fused", "fused_opt_states_bf16"),
    "dataloader.patch_order": ("block", "raster"), "validator.dataloader.patch_order": ("block", "raster"),
    "dataloader.stopping_strategy": ("on_first_exhausted", "all_exhausted"),
    "validator.dataloader.stopping_strategy": ("on_first_exhausted", "all_exhausted"),
}
LIST_OPTIONS = frozenset({"compile.components", "activation_checkpoint.force_recompute_mm_shapes_by_fqns",
                          "checkpoint.exclude_from_loading"})  # list[str]: one comma-separated word (list_str_rule)
# options whose value is no single word on a command line the planner reads (list[list[str]], dicts, the
# imports' own syntax): refused with a hint rather than half-read
NOT_ONE_WORD = frozenset({"parallelism.module_fqns_per_model_part", "override.imports",
                          "optimizer.optimizer_factory_kwargs_by_name", "optimizer.param_groups",
                          "dataloader.load_dataset_kwargs", "validator.dataloader.load_dataset_kwargs",
                          "dataloader.sources.load_dataset_kwargs", "validator.dataloader.sources.load_dataset_kwargs",
                          "optimizer.param_groups.optimizer_kwargs"})
# activation_checkpoint.py @4f9e9a47d l. 329-337: the policy subcommands -> main's [activation_checkpoint] mode
# (SelectiveAC l. 185-200 is per-op SAC, main's selective_ac_option "op"; memory-budget has no counterpart priced)
AC_SUBCOMMANDS = {"selective": {"mode": "selective", "selective_ac_option": "op"}, "full": {"mode": "full"},
                  "none": {"mode": "none"}, "memory-budget": None}
AC_KEYS_OF = {"memory_budget": "memory-budget", "visualize_memory_budget_pareto": "memory-budget",
              "force_recompute_mm_shapes_by_fqns": "selective"}  # the policy whose Config holds the key

# main's options (config/job_config.py @e347b1e5e) that 0.3 has not, each with what 0.3 has instead
MAIN_ONLY = {
    "parallelism.context_parallel_rotate_method": "0.3 has no such option (its ring attention's exchange is not "
                                                  "a setting; context_parallel_load_balancer is)",
    "parallelism.disable_loss_parallel": "0.3 has no such option (the loss is the config function's)",
    "parallelism.enable_async_tensor_parallel": "0.3 spells it --compile.enable_async_tensor_parallel",
    "parallelism.expert_parallel_comm_backend": "0.3 sets the token dispatcher in the model config (model_registry's "
                                                "moe_comm_backend), which no option reaches",
    "parallelism.expert_tensor_parallel_degree": "0.3 has no expert TP axis (parallel_dims.py l. 277-279, 336-340: "
                                                 "EP borrows ranks from FSDP and TP)",
    "parallelism.pipeline_parallel_expert_parallel_overlap": "0.3 has no such option",
    "model.name": "0.3 names the model by --module and --config", "model.flavor": "0.3 names the model by --module "
                  "and --config", "model.converters": "0.3 sets converters in the config function's model_spec",
    "optimizer.early_step_in_backward": "0.3 has no such option",
    "activation_checkpoint.mode": "0.3 chooses the policy by a subcommand: activation-checkpoint:selective|full|none",
    "activation_checkpoint.selective_ac_option": "0.3's selective policy is per-op (activation-checkpoint:selective)",
}

# the sections 0.3 has and main's reader has no reason for, and why none changes memory or step time (ignored);
# any other key the reader does not price is listed as not modelled
NO_COST_03 = {
    "checkpoint": "checkpointing between steps", "comm": "communication timeouts and tracing",
    "dataloader": "the data pipeline", "validator": "evaluation between steps", "metrics": "logging",
    "profiler": "profiling", "lr_scheduler": "the learning-rate schedule", "tokenizer": "the tokenizer",
    "hf_assets_path": "the tokenizer's and checkpoint's files", "dump_folder": "the job's output folder",
}
NO_COST_KEYS_03 = {
    "debug.seed": "the random seed", "debug.print_config": "logging", "debug.save_config_file": "logging",
    "debug.enable_structured_logging": "logging", "training.max_norm": "gradient clipping",
    "loss.global_vocab_size": "the loss's normaliser", "loss.loss_fn.global_vocab_size": "the loss's normaliser",
    "loss.mtp_scale": "a loss weight", "loss.loss_fn.mtp_scale": "a loss weight",
    "activation_checkpoint.preserve_rng_state": "the RNG state kept for recompute (a few bytes)",
    "activation_checkpoint.determinism_check": "a recompute check", "activation_checkpoint.debug": "a recompute check",
    "optimizer.implementation": None,  # priced by the TOML mapping (optimizer_implementation)
}
# the sections only Flux's trainer has (FluxTrainer.Config, models/flux/trainer.py l. 34-43; test_no_new_cli_options.py
# collects them from that subclass): no language model's config function parses them
FLUX_ONLY = ("encoder", "inference")
# comm.mode other than "default" runs no training (fake_backend / local_tensor: configs.py l. 333): refused
COMM_MODES_RUN = ("default", "torchcomms")

# the options 0.3 has and main not, read here (module docstring)
ONLY_03 = ("parallelism.enable_sequence_parallel", "parallelism.spmd_backend", "parallelism.enable_fsdp_symm_mem",
           "parallelism.context_parallel_ptrr_mask_key", "training.disable_cuda_graphs",
           "compile.enable_async_tensor_parallel", "debug.spmd_typechecking", "parallelism.context_parallel_load_balancer")
ONLY_03_DEFAULTS = {"parallelism.enable_sequence_parallel": True, "parallelism.spmd_backend": "spmd_types",
                    "parallelism.enable_fsdp_symm_mem": False, "parallelism.context_parallel_ptrr_mask_key": None,
                    "training.disable_cuda_graphs": False, "compile.enable_async_tensor_parallel": False,
                    "debug.spmd_typechecking": False, "parallelism.context_parallel_load_balancer": "headtail"}


@dataclass(frozen=True)
class ConfigFunction:
    """One 0.3.0 config function, as data: the settings it makes (0.3's option names, 'section.key' -> value;
    every other option keeps its configs.py default), its activation checkpointing policy (AC_SUBCOMMANDS key),
    its model as main's registry flavor of the same numbers (torchtitan_flavors.TORCHTITAN_03), the attention
    backend model_registry builds it with, and its fp8 converter in main's layout (export._torchtitan_sections'
    keys: "converters" and the converter's table; {} none)."""

    module: str
    name: str
    lines: str
    flavor: tuple[str, str]
    attn_backend: str
    settings: dict
    ac: str
    converter: dict = field(default_factory=dict)
    notes: tuple = ()  # where 0.3.0's flavor differs from main's in a field priced at nothing (said as assumed)
    export_note: str = ""  # what the export says of the function beyond the plan (its data, its start)
    chunked_loss: bool = True  # its loss is ChunkedLossWrapper (LOSS_CHUNKS); False: the plain CrossEntropyLoss
    mtp_layers: int = 0  # model_registry's num_mtp_layers (deepseek_v3's MTP modules, job field mtp_layers)
    # model_registry's moe_comm_backend as the planner's dispatcher ("standard" -> alltoall, "hybridep" -> hybridep)
    # and its non_blocking_capacity_factor (job fields moe_dispatcher, moe_hybridep_capacity_factor; None: blocking)
    moe_dispatcher: str = "alltoall"
    hybridep_capacity: Optional[float] = None

    @property
    def kernel(self) -> str:
        """The attention kernel the planner prices for the backend the function builds (ATTN_PRICED)."""
        return ATTN_PRICED[self.attn_backend]

    @property
    def where(self) -> str:
        return f"torchtitan {COMMIT} torchtitan/models/{self.module}/config_registry.py {self.name} {self.lines}"


# the attention backend a config function builds -> the kernel the planner prices (schema AttentionKernel): flex is
# FlexAttention; varlen (gpt_oss's default, models/gpt_oss/__init__.py l. 388-391: torch's varlen_attn) has no rate of
# its own and stack_db torchtitan-0.3 prices it as flex (its `not priced apart` line)
ATTN_PRICED = {"flex": "flex", "varlen": "flex"}
# every config function transcribed wraps its loss in ChunkedLossWrapper (components/loss.py; each function's
# `loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(...))`, num_chunks 8 by default): the job field
# chunked_loss, priced by memory._chunked_loss with the stack's memory.chunked_loss_chunks 8; no option removes it
LOSS_CHUNKS = 8
_QWEN3_CTX = ("rope max_seq_len 40960 (models/qwen3/__init__.py {l}), main @e347b1e5e's flavor {m}: the rotary "
              "table's length, priced at nothing (the model's context as 0.3.0 builds it, the model's "
              "max_seq_len_by_stack: the beyond-context check reads 40960; the run's seq_len is training.seq_len)")
# MXFP8LinearConverter.Config fqns default [] (components/quantization/mx.py l. 55-60, convert l. 79-95: an empty
# list converts every Linear, lm_head included); MXFP8Linear is torchao's prototype/moe_training/mxfp8_linear.py
# MXFP8Linear (scale_calculation_mode RCEIL, l. 281): torchao's mxfp8_rceil, the planner's mxfp8 recipe
_MXFP8_ALL = {"converters": ["quantize.linear.mx"], "quantize.linear.mx": {"recipe_name": "mxfp8_rceil", "filter_fqns": []}}
_QWEN3_DENSE = {"parallelism.data_parallel_shard_degree": -1, "parallelism.tensor_parallel_degree": 1,
                "parallelism.context_parallel_degree": 1, "parallelism.pipeline_parallel_degree": 1}
_GPT_OSS = {"training.local_batch_size": 1, "training.seq_len": 8192, "training.steps": 10000,
            "parallelism.expert_parallel_degree": 1}

# pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/models/<module>/config_registry.py, read line by line.
# model_registry's attn_backend defaults to "flex" (llama3/__init__.py l. 369-371); Float8LinearConverter's
# recipe_name defaults to "rowwise" (components/quantization/float8.py l. 57-61); the output Linear is lm_head in
# 0.3 (models/common/decoder.py l. 73), "output" in main's models, whose name the planner's filter_fqns reads
CONFIG_FUNCTIONS: dict[tuple[str, str], ConfigFunction] = {(cf.module, cf.name): cf for cf in (
    ConfigFunction("llama3", "llama3_8b", "l. 184-216", ("llama3", "8B"), "flex",
                   {"training.local_batch_size": 1, "training.seq_len": 8192, "training.steps": 1000}, "selective"),
    ConfigFunction("llama3", "llama3_70b", "l. 257-292", ("llama3", "70B"), "flex",
                   {"training.local_batch_size": 8, "training.seq_len": 8192, "training.steps": 1000,
                    "parallelism.tensor_parallel_degree": 8}, "full"),
    ConfigFunction("llama3", "llama3_405b", "l. 295-346", ("llama3", "405B"), "flex",
                   {"training.local_batch_size": 2, "training.seq_len": 8192, "training.steps": 3000,
                    "parallelism.tensor_parallel_degree": 8, "compile.enable": True,
                    "compile.enable_async_tensor_parallel": True}, "full",
                   {"converters": ["quantize.linear.float8"],
                    "quantize.linear.float8": {"recipe_name": "rowwise", "filter_fqns": ["output"]}}),
    ConfigFunction("deepseek_v3", "deepseek_v3_671b", "l. 206-242", ("deepseek_v3", "671B"), "flex",
                   {"training.local_batch_size": 4, "training.seq_len": 4096, "training.steps": 10000,
                    "training.disable_cuda_graphs": True, "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
                    "parallelism.expert_parallel_degree": 2, "compile.enable": True, "compile.components": ["loss"]},
                   "selective"),
    # llama3_8b (above) with compile on for the model and model_registry("8B", converters=[MXFP8LinearConverter.
    # Config(model_compile_enabled=True)]): every Linear in MXFP8, lm_head included (_MXFP8_ALL)
    ConfigFunction("llama3", "llama3_8b_mxfp8", "l. 242-254", ("llama3", "8B"), "flex",
                   {"training.local_batch_size": 1, "training.seq_len": 8192, "training.steps": 1000,
                    "compile.enable": True, "compile.components": ["model"]}, "selective", _MXFP8_ALL),
    ConfigFunction("deepseek_v3", "deepseek_v3_16b", "l. 138-170", ("deepseek_v3", "16B"), "flex",
                   {"training.local_batch_size": 4, "training.seq_len": 4096, "training.steps": 1000,
                    "training.disable_cuda_graphs": True, "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
                    "parallelism.expert_parallel_degree": 8, "compile.enable": True, "compile.components": ["loss"]},
                   "selective"),
    # the debug models (config_registry.py's first functions): 0.3.0's debugmodel flavors have main's numbers
    # (llama3/__init__.py _debugmodel l. 114-145: dim 256, 6 layers, 16 heads, vocab 2048, multiple_of 256, theta
    # 500000 "llama"; qwen3 _debugmodel l. 197-232, _debugmodel_moe l. 475-513; deepseek_v3 _debugmodel l. 319-386),
    # named by main's flex flavor of that shape where main has one (llama3 / deepseek_v3 debugmodel_flex_attn)
    ConfigFunction("llama3", "llama3_debugmodel", "l. 34-70", ("llama3", "debugmodel_flex_attn"), "flex",
                   {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10,
                    "parallelism.pipeline_parallel_schedule": "Interleaved1F1B"}, "selective"),
    ConfigFunction("llama3", "llama3_debugmodel_ce_loss", "l. 174-181", ("llama3", "debugmodel_flex_attn"), "flex",
                   {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10,
                    "parallelism.pipeline_parallel_schedule": "Interleaved1F1B"}, "selective", chunked_loss=False),
    ConfigFunction("llama3", "llama3_debugmodel_varlen_attn", "l. 73-77", ("llama3", "debugmodel_flex_attn"), "varlen",
                   {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10,
                    "parallelism.pipeline_parallel_schedule": "Interleaved1F1B", "training.disable_cuda_graphs": True},
                   "selective"),
    # Float8LinearConverter.Config defaults (components/quantization/float8.py l. 57-66): recipe "rowwise",
    # filter_fqns [] (every Linear, lm_head included: the debug model's dims are multiples of 16)
    ConfigFunction("llama3", "llama3_debugmodel_float8", "l. 96-107", ("llama3", "debugmodel_flex_attn"), "flex",
                   {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10,
                    "parallelism.pipeline_parallel_schedule": "Interleaved1F1B"}, "selective",
                   {"converters": ["quantize.linear.float8"],
                    "quantize.linear.float8": {"recipe_name": "rowwise", "filter_fqns": []}}),
    # deepseek_v3_debugmodel (above) with model_registry("debugmodel", num_mtp_layers=1) and loss MTPLoss.Config (mtp_scale
    # default 0.3, models/deepseek_v3/mtp.py l. 323-331): one MTP module (mtp.py MTPTransformerBlock l. 109-164, a copy of
    # the last layer, __init__.py _build_mtp_layers l. 291-316), the plain cross-entropy on the main and the MTP logits
    # (MTPLoss l. 339-409: no ChunkedLossWrapper, which MTPDecoder.forward refuses, l. 271-275)
    ConfigFunction("deepseek_v3", "deepseek_v3_debugmodel_mtp", "l. 73-79", ("deepseek_v3", "debugmodel_flex_attn"), "flex",
                   {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10,
                    "parallelism.expert_parallel_degree": 1}, "selective", chunked_loss=False, mtp_layers=1),
    ConfigFunction("qwen3", "qwen3_debugmodel", "l. 33-62", ("qwen3", "debugmodel"), "flex",
                   {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10}, "selective"),
    ConfigFunction("qwen3", "qwen3_moe_debug", "l. 373-403", ("qwen3", "debugmodel_moe"), "flex",
                   {"training.local_batch_size": 4, "training.seq_len": 4096, "training.steps": 10,
                    "parallelism.expert_parallel_degree": 1}, "selective"),
    ConfigFunction("deepseek_v3", "deepseek_v3_debugmodel", "l. 38-70", ("deepseek_v3", "debugmodel_flex_attn"), "flex",
                   {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10,
                    "parallelism.expert_parallel_degree": 1}, "selective"),
    # deepseek_v3_debugmodel (above) with model_registry("debugmodel", moe_comm_backend="hybridep",
    # non_blocking_capacity_factor=1.0): HybridEP's token dispatcher, non-blocking at capacity factor 1.0 (stack_db
    # torchtitan-0.3 runs.sources moe_dispatchers); its expert_parallel_degree stays 1, which 0.3 refuses at start-up
    # (start-up rule TORCHTITAN_HYBRIDEP): a launch line gives --parallelism.expert_parallel_degree
    ConfigFunction("deepseek_v3", "deepseek_v3_debugmodel_hybridep", "l. 109-116", ("deepseek_v3", "debugmodel_flex_attn"),
                   "flex", {"training.local_batch_size": 8, "training.seq_len": 2048, "training.steps": 10,
                            "parallelism.expert_parallel_degree": 1}, "selective",
                   moe_dispatcher="hybridep", hybridep_capacity=1.0),
    # deepseek_v3_16b (above) with model_registry("16B", attn_backend="flex", moe_comm_backend="hybridep",
    # non_blocking_capacity_factor=1.0) and training.disable_cuda_graphs False (l. 181)
    ConfigFunction("deepseek_v3", "deepseek_v3_16b_hybridep", "l. 173-182", ("deepseek_v3", "16B"), "flex",
                   {"training.local_batch_size": 4, "training.seq_len": 4096, "training.steps": 1000,
                    "training.disable_cuda_graphs": False, "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
                    "parallelism.expert_parallel_degree": 8, "compile.enable": True, "compile.components": ["loss"]},
                   "selective", moe_dispatcher="hybridep", hybridep_capacity=1.0),
    ConfigFunction("qwen3", "qwen3_0_6b", "l. 176-203", ("qwen3", "0.6B"), "flex",
                   {"training.local_batch_size": 4, "training.seq_len": 4096, "training.steps": 10}, "selective",
                   notes=(_QWEN3_CTX.format(l="l. 282-286", m=4096),)),
    ConfigFunction("qwen3", "qwen3_1_7b", "l. 206-232", ("qwen3", "1.7B"), "flex",
                   {"training.local_batch_size": 4, "training.seq_len": 4096, "training.steps": 100}, "selective",
                   notes=(_QWEN3_CTX.format(l="l. 320-324", m=4096),)),
    ConfigFunction("qwen3", "qwen3_14b", "l. 260-292", ("qwen3", "14B"), "flex",
                   {"training.local_batch_size": 4, "training.seq_len": 4096, "training.steps": 3000, **_QWEN3_DENSE},
                   "full", notes=(_QWEN3_CTX.format(l="l. 428-432", m=4096),)),
    ConfigFunction("qwen3", "qwen3_30b_a3b", "l. 295-327", ("qwen3", "30B-A3B"), "flex",
                   {"training.local_batch_size": 2, "training.seq_len": 4096, "training.steps": 3000, **_QWEN3_DENSE},
                   "full", notes=(_QWEN3_CTX.format(l="l. 547-551", m=262144),)),
    ConfigFunction("qwen3", "qwen3_32b", "l. 330-362", ("qwen3", "32B"), "flex",
                   {"training.local_batch_size": 2, "training.seq_len": 4096, "training.steps": 3000, **_QWEN3_DENSE},
                   "full", notes=(_QWEN3_CTX.format(l="l. 463-467", m=4096),)),
    # SFT of Qwen3-8B on GSM8K (ChatDataLoader): model_registry("8B", attn_backend="varlen"), local 1, seq 2048, steps
    # 180, SelectiveAC; its checkpoint (enable, initial_load_in_hf) and metrics (wandb) cost nothing
    ConfigFunction("qwen3", "sft_qwen3_8b_math", "l. 449-498", ("qwen3", "8B"), "varlen",
                   {"training.local_batch_size": 1, "training.seq_len": 2048, "training.steps": 180}, "selective",
                   notes=(_QWEN3_CTX.format(l="l. 393-397", m=4096),
                          "dataloader ChatDataLoader (openai/gsm8k, a chat template per sample, config_registry.py "
                          "l. 485-489): the data pipeline; each micro-batch priced as seq_len tokens"),
                   export_note="sft_qwen3_8b_math is 0.3.0's one config function of qwen3 8B: fine-tuning on GSM8K "
                               "(ChatDataLoader) from the Hugging Face checkpoint (checkpoint.enable, "
                               "initial_load_in_hf, config_registry.py l. 485-496), at the plan's cost; override "
                               "--dataloader.* / --checkpoint.* for another run"),
    ConfigFunction("gpt_oss", "gpt_oss_20b", "l. 70-98", ("gpt_oss", "20b"), "varlen", dict(_GPT_OSS), "full"),
    ConfigFunction("gpt_oss", "gpt_oss_120b", "l. 101-129", ("gpt_oss", "120b"), "varlen", dict(_GPT_OSS), "full"),
)}
# the other config functions at 4f9e9a47d (each module's config_registry.py `def`s): known, not transcribed
# (the debug models; NVFP4 / float8-emulated LoRA / first-85%-of-layers converters; other token dispatchers
# (deepep, minimal_async_ep); flex_flash; param groups; SFT chat data; the kimi_k2_7, qwen3_5 and
# muse_glimmer packages, whose flavors no planner model copies; flux, no language model): a launch line naming one
# is refused naming the transcribed ones
OTHER_FUNCTIONS = {
    "llama3": ("llama3_debugmodel_dist_gemm llama3_debugmodel_nvfp4 llama3_debugmodel_first_85_pct_layers_nvfp4 "
               "llama3_debugmodel_float8_emulate_lora llama3_8b_first_85_pct_layers_nvfp4 sft_debugmodel").split(),
    "deepseek_v3": ("deepseek_v3_debugmodel_mxfp8 deepseek_v3_debugmodel_minimal_async_ep "
                    "deepseek_v3_16b_minimal_async_ep deepseek_v3_671b_float8").split(),
    "qwen3": ("qwen3_debugmodel_nvfp4 qwen3_debugmodel_first_85_pct_layers_nvfp4 qwen3_debugmodel_moe_param_groups "
              "qwen3_debugmodel_flex_flash qwen3_8b_first_85_pct_layers_nvfp4 qwen3_debugmodel_non_fused_qkv "
              "qwen3_moe_deepep").split(),
    "gpt_oss": "gpt_oss_debugmodel gpt_oss_debugmodel_flex".split(),
    "kimi_k2_7": "kimi_k2_5_debugmodel moonlight_16b_a3b kimi_vl_a3b kimi_k2_5".split(),
    "qwen3_5": ("qwen35_debugmodel qwen35_debugmodel_varlen_attn qwen35_debugmodel_moe qwen35_0_8b qwen35_2b "
                "qwen35_4b qwen35_9b qwen35_27b qwen35_35b_a3b qwen35_122b_a10b qwen35_397b_a17b").split(),
    "muse_glimmer": ("muse_glimmer_debugmodel muse_glimmer_debugmodel_mm muse_glimmer_30b "
                     "muse_glimmer_30b_mm").split(),
    "flux": "flux_debugmodel flux_dev flux_schnell flux_schnell_mxfp8 flux_dev_mxfp8".split(),
}
# why a function of the llama3 / qwen3 / deepseek_v3 / gpt_oss modules is not transcribed, where it is one thing
# the other token dispatchers (models/common/config_utils.py make_token_dispatcher_config l. 360-425: standard |
# deepep | hybridep | minimal_async_ep, a model_registry argument no launch option reaches): why each not priced is not
# (hybridep is: ConfigFunction.moe_dispatcher, stack_db torchtitan-0.3 runs.sources moe_dispatchers)
_MINIMAL_ASYNC_EP = ("model_registry(moe_comm_backend='minimal_async_ep') beside expert_parallel_degree 1 "
                     "(config_registry.py {l}), which 0.3 refuses at start-up (models/common/token_dispatcher.py "
                     "update_ep_token_dispatcher_config l. 1238-1242: 'requires expert parallelism "
                     "(expert_parallel_degree > 1)'); with EP it moves rows by torch symmetric-memory copies "
                     "(distributed/minimal_async_ep/api.py init_buffer l. 176: symm_mem.empty / rendezvous l. 230-248; "
                     "_copy_rows_to_peers_and_wait_cuda l. 300), neither NCCL's all_to_all_single nor an overlap of it, "
                     "which no planner dispatcher prices: its Triton kernel writes every routed copy (n k rows) into the "
                     "peers' buffers and waits before returning ('this backend does not provide microbatch communication "
                     "overlap', l. 312-316), and its two receive buffers of ep x n x min(k, E / ep) rows x dim each "
                     "(l. 206-208, 229-236, n = local_batch_size x seq_len / (cp x tp)) are symmetric memory outside the "
                     "caching allocator: the planner has no rate for the copy kernel nor a term for those buffers")
# DeepEP v2 (models/common/token_dispatcher.py DeepEPTokenDispatcher l. 785-): in training its ElasticBuffer dispatch takes
# the compact path (distributed/deepep/deepep.py l. 10-25: do_expand False, do_cpu_sync True, one row per distinct
# token a rank receives, _permute_tokens l. 384-419), the transfer DeepEP v1's normal kernels make (planner/dispatch.py
# deepep); what differs is the buffer (one ElasticBuffer of get_buffer_size_hint bytes, l. 335-381)
_DEEPEP_V2 = ("model_registry('debugmodel_moe', moe_comm_backend='deepep') (config_registry.py l. 406-446): "
              "DeepEP v2's ElasticBuffer (distributed/deepep/deepep.py l. 44-50: 'DeepEP v2 (>= 2.0.0, ElasticBuffer) "
              "is required'), "
              "whose buffer size and handles the planner has not read (its deepep figures are DeepEP v1's Buffer, "
              "layers/moe.py [11], ep_buffers.py): in training v2 takes the compact path (deepep.py l. 10-25: one row "
              "per distinct token a rank receives, a host sync, then _permute_tokens l. 384-419), the transfer the "
              "planner's deepep prices, but its one ElasticBuffer is sized by "
              "ElasticBuffer.get_buffer_size_hint(group, num_max_tokens_per_rank, hidden, num_topk) (deepep.py "
              "get_buffer l. 335-381; num_max_tokens_per_rank = local_batch_size x seq_len / (cp x tp), "
              "token_dispatcher.py l. 1232-1234), which deepseek-ai/DeepEP main @dd758caf computes in C++ from the "
              "NCCL communicator (deep_ep/buffers/elastic.py l. 381-406: _C.calculate_elastic_buffer_size), and 0.3 "
              "pins no DeepEP v2 commit (.ci/docker/common/install_deepep.sh pins only the hybrid-ep branch "
              "@f725d2969): stack torchtitan-0.3 lists alltoall and hybridep, not deepep")
# torchtitan's NVFP4 (components/quantization/nvfp4.py NVFP4LinearConverter l. 264-315) is torchao's nvfp4_training
# NVFP4Linear (pytorch/ao @36027d82d torchao/prototype/moe_training/nvfp4_training/nvfp4_linear.py nvfp4_mm_triton
# l. 140-240): the recipe the planner's nvfp4 prices on Megatron (TE NVFP4BlockScaling: RHT, 1x16 e4m3 + fp32 scales,
# 16x16 weight blocks, stochastic rounding, fprop / dgrad / wgrad in NVFP4), on another stack's terms
_NVFP4 = ("its NVFP4 converter (components/quantization/nvfp4.py NVFP4LinearConverter l. 264-315: torchao's nvfp4_training "
          "NVFP4Linear on the named layers' Linears; the first_85_pct functions keep the last ceil(0.15 x layers) "
          "layers and lm_head bf16, nvfp4_bf16_tail_fqns l. 244-261): its numerics are the planner's nvfp4 recipe "
          "(Transformer Engine's NVFP4BlockScaling, stack megatron: RHT, 1x16 e4m3 and fp32 scales, 16x16 weight "
          "blocks, stochastic rounding, the three GEMMs in NVFP4; pytorch/ao @36027d82d torchao/prototype/"
          "moe_training/nvfp4_training/nvfp4_linear.py nvfp4_mm_triton l. 140-240), but stack torchtitan-0.3 lists "
          "no nvfp4 recipe (fp8_recipes rowwise, mxfp8) and its TOML mapping no NVFP4 converter, and what this "
          "converter costs beside TE's is not transcribed: it re-quantizes the bf16 weight at every GEMM (no "
          "quantized-weight cache across micro-batches) with Triton amax / RHT / quantize kernels, and saves only "
          "the fp4 column-wise input and transposed-weight codes for the backward (l. 197-236)")
NOT_TRANSCRIBED_WHY = {
    "gpt_oss_debugmodel": "its model, 0.3.0's gpt_oss debugmodel, has vocab_size 2048 (gpt_oss/__init__.py l. 257), "
                          "main @e347b1e5e's gpt_oss debugmodel 201088 (model/args.py l. 53): no planner model has "
                          "0.3.0's shape",
    "gpt_oss_debugmodel_flex": "its model, 0.3.0's gpt_oss debugmodel, has vocab_size 2048 (gpt_oss/__init__.py "
                               "l. 257), main @e347b1e5e's gpt_oss debugmodel 201088 (model/args.py l. 53): no planner "
                               "model has 0.3.0's shape",
    "llama3_debugmodel_dist_gemm": "tp_gemm_backend dist_gemm (the TP collectives folded into symmetric-memory "
                                   "GEMMs, models/common/config_utils.py l. 62-68), which the planner does not price",
    "llama3_debugmodel_nvfp4": _NVFP4, "llama3_debugmodel_first_85_pct_layers_nvfp4": _NVFP4,
    "llama3_8b_first_85_pct_layers_nvfp4": _NVFP4, "qwen3_debugmodel_nvfp4": _NVFP4,
    "qwen3_debugmodel_first_85_pct_layers_nvfp4": _NVFP4, "qwen3_8b_first_85_pct_layers_nvfp4": _NVFP4,
    "llama3_debugmodel_float8_emulate_lora": "float8 emulation (emulate=True, no fp8 GEMM) and LoRA adapters, which "
                                             "the planner does not price",
    "sft_debugmodel": "SFT from a local JSON file on the debug model (test data)",
    "deepseek_v3_debugmodel_mxfp8": "MXFP8 on the grouped experts and the linears of a debug model",
    "deepseek_v3_debugmodel_minimal_async_ep": _MINIMAL_ASYNC_EP.format(l="l. 119-135"),
    "deepseek_v3_16b_minimal_async_ep": _MINIMAL_ASYNC_EP.format(l="l. 185-203"),
    "qwen3_moe_deepep": _DEEPEP_V2,
    "deepseek_v3_671b_float8": "float8 on the grouped experts beside the linears",
    "qwen3_debugmodel_moe_param_groups": "optimizer param groups (Adam on the router gate)",
    "qwen3_debugmodel_flex_flash": "FlexAttention's FLASH backend (flex_flash: models/common/config_utils.py "
                                   "get_attention_config l. 85-94, FlexAttention.Config(block_size=(256, 128), "
                                   "kernel_options={'BACKEND': 'FLASH'}), Hopper or Blackwell only), torch's FLASH "
                                   "backend of flex_attention, not the Triton template flex runs, which has no rate of "
                                   "its own: the planner's "
                                   "kernels are flash2, cudnn and flex (FlashAttention-2's rate x flex_over_flash2, "
                                   "compute.py [7d], measured on flex's Triton kernel), and stack torchtitan-0.3 lists "
                                   "flex only",
    "qwen3_debugmodel_non_fused_qkv": "separate wq / wkv projections (the planner prices the fused QKV GEMM's shapes)",
}
# run_train.sh @4f9e9a47d l. 29-32: the environment's defaults
RUN_TRAIN_DEFAULTS = {"NGPU": "8", "MODULE": "llama3", "CONFIG": "llama3_debugmodel"}

_LAUNCH = re.compile(r"(?:^|[\s/])run_train\.sh\b|-m\s+torchtitan\.train\b")
_NAMED = re.compile(r"--module[=\s]|--config[=\s]|\bMODULE=|\bCONFIG=")


def is_launch_line(text: str) -> bool:
    """Whether the text launches torchtitan 0.3.0: run_train.sh or `-m torchtitan.train`, naming --module /
    --config or MODULE= / CONFIG= (a main-era run_train.sh line with CONFIG_FILE= is not one)."""
    return bool(_LAUNCH.search(text)) and bool(_NAMED.search(text))


@dataclass
class Launch:
    """A launch line read: the config function's module and name, the GPU count the launcher starts (with what
    set it, and whether only a default did), and the options (key -> value, in main's types) in order."""

    module: str
    config: str
    gpus: Optional[int]
    gpus_from: str
    gpus_soft: bool
    options: dict
    ac: Optional[str]
    notes: list[str]
    nccl: dict = field(default_factory=dict)  # the launch line's NCCL environment (parse_launch)


def _logical_lines(text: str) -> list[str]:
    return [ln.strip() for ln in re.sub(r"\\\r?\n", " ", text).splitlines()]


def _word(where: str, w: str) -> str:
    if "$" in w or "`" in w:
        raise PlannerError(f"{where}{w!r} is a shell expansion: the planner reads the launch line's literal words",
                           "write the value itself (e.g. --parallelism.tensor_parallel_degree 8)")
    return w


def _commands(where: str, ln: str) -> list[tuple[list[str], str]]:
    """The commands of one logical shell line, split at each unquoted `;` (bash runs them in turn: `NGPU=8;
    MODULE=llama3` sets both, where shlex's words kept the ';' in the value, NGPU '8;'): each as (its words, its text
    for the launch-line search and the notes). A quoted ';' stays in its word; a comment ends the line."""
    lex = shlex.shlex(ln, posix=True, punctuation_chars=";")
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError as e:
        raise PlannerError(f"{where}cannot split the shell line {ln[:60]!r}: {e}", "check its quotes") from None
    out, cur = [], []
    for tok in tokens + [";"]:
        if tok and set(tok) == {";"}:
            if cur:
                out.append((cur, ln if len(tokens) == len(cur) else " ".join(cur)))
            cur = []
        else:
            cur.append(tok)
    return out


def parse_launch(where: str, text: str) -> Launch:
    """The launch line of the file (module docstring): exactly one line that launches torchtitan; the file's
    other lines are shell the planner does not read (listed), except VAR=value / export VAR=value assignments,
    which the launch line's environment takes."""
    from .megatron import NCCL_ENV_FIELDS

    env: dict[str, str] = {}
    launch, notes = None, []
    for ln in _logical_lines(text):
        if not ln or ln.startswith("#"):
            continue
        for words, cmd in _commands(where, ln):  # a `;` list's commands in turn, as bash runs them
            if _LAUNCH.search(cmd):
                if launch is not None:
                    raise PlannerError(f"{where}two torchtitan launch lines", "keep one launch line in the file")
                launch = words
                continue
            body = words[1:] if words[0] == "export" else words
            if body and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w) for w in body):
                env.update(w.split("=", 1) for w in body)
            else:
                notes.append(noted("ignored", f"shell line {cmd[:60]!r}", "not a torchtitan setting: not read"))
    if launch is None:
        raise PlannerError(f"{where}no torchtitan launch line (run_train.sh or -m torchtitan.train)",
                           "write MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh [--section.key value ...]")
    i = 0
    while i < len(launch) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", launch[i]):
        k, v = launch[i].split("=", 1)
        env[k] = v
        i += 1
    rest = launch[i:]
    run_sh = next((j for j, w in enumerate(rest) if w.endswith("run_train.sh")), None)
    if run_sh is not None:
        args = rest[run_sh + 1:]
        module, config = env.get("MODULE"), env.get("CONFIG")
        module = module if module is not None else RUN_TRAIN_DEFAULTS["MODULE"]
        config = config if config is not None else RUN_TRAIN_DEFAULTS["CONFIG"]
        ngpu, soft = env.get("NGPU"), "NGPU" not in env
        gpus = _count(where, "NGPU", _word(where, ngpu)) if ngpu is not None else int(RUN_TRAIN_DEFAULTS["NGPU"])
        gpus_from = "NGPU" if not soft else "run_train.sh's default NGPU=8 (l. 29)"
    else:
        m = next((j for j, w in enumerate(rest) if w == "-m" and j + 1 < len(rest) and rest[j + 1] == "torchtitan.train"),
                 None)
        if m is None:
            raise PlannerError(f"{where}the launch line runs torchtitan.train without `-m`", "write -m torchtitan.train")
        args, pre = rest[m + 2:], rest[:m]
        module, config = env.get("MODULE"), env.get("CONFIG")
        nproc, nnodes = _torchrun_opt(where, pre, "nproc_per_node"), _torchrun_opt(where, pre, "nnodes")
        if pre and pre[0] == "torchrun":
            gpus = (nproc or 1) * (nnodes or 1)
            gpus_from = f"torchrun --nproc_per_node={nproc or 1} x --nnodes={nnodes or 1}"
            soft = nproc is None
        else:
            gpus, gpus_from, soft = None, "", True
            if "NGPU" in env:
                notes.append(listed("ignored", "NGPU", env["NGPU"], "read by run_train.sh only, not by python -m "
                                    "torchtitan.train"))
    options, ac, module, config = _options(where, args, module, config)
    if module is None or config is None:
        raise PlannerError(f"{where}the launch line names no {'--module' if module is None else '--config'}",
                           "torchtitan 0.3.0 requires both (config/manager.py l. 87-94): --module llama3 --config llama3_8b")
    for k in ("MODULE", "CONFIG", "NGPU"):
        env.pop(k, None)
    # the launch line's environment that NCCL reads, whatever the trainer (megatron.NCCL_ENV_FIELDS: NCCL_ALGO,
    # NCCL_PROTO, NCCL_NVLS_ENABLE), in every torchrun rank: the job fields, read as the Megatron launch readers read
    # them (read: megatron.read_nccl_env); before the fuzz config-fit kind exported them they were listed as "not a
    # torchtitan setting: not read" and the step priced with NVLS
    nccl = {var: env.pop(var) for _, var, _ in NCCL_ENV_FIELDS if var in env}
    for k, v in env.items():
        notes.append(listed("ignored", f"environment {k}", v, "not a torchtitan setting: not read"))
    return Launch(module, config, gpus, gpus_from, soft, options, ac, notes, nccl)


def _count(where: str, what: str, v: str) -> int:
    from ..schema import MAX_COUNT

    if not re.fullmatch(r"[0-9]{1,10}", v) or not 1 <= int(v) <= MAX_COUNT:
        raise PlannerError(f"{where}{what}={v!r} is not a GPU count from 1 to {MAX_COUNT}", f"e.g. {what}=8")
    return int(v)


def _torchrun_opt(where: str, words: list[str], name: str) -> Optional[int]:
    """torchrun's --nproc_per_node / --nnodes (either spelling, `=` or a separate word); None if absent."""
    spell = {f"--{name}", f"--{name.replace('_', '-')}"}
    for j, w in enumerate(words):
        key, eq, val = w.partition("=")
        if key in spell:
            v = val if eq else (words[j + 1] if j + 1 < len(words) else "")
            return _count(where, f"torchrun {key}", _word(where, v))
    return None


def _options(where: str, args: list[str], module, config):
    """The options after the launcher (module docstring: tyro's rules): 'section.key' -> value (bool, int, str,
    list[str]), the activation checkpointing subcommand, and --module / --config (the last of each wins,
    manager.py l. 56-85)."""
    out: dict = {}
    ac = None
    i = 0
    while i < len(args):
        w = _word(where, args[i])
        i += 1
        sub = re.fullmatch(r"activation[-_]checkpoint:([a-z-]+)", w)
        if sub:
            if sub.group(1) not in AC_SUBCOMMANDS:
                raise PlannerError(f"{where}{w}: no such activation checkpointing policy",
                                   f"valid: {', '.join('activation-checkpoint:' + k for k in AC_SUBCOMMANDS)}")
            ac = sub.group(1)
            continue
        if not w.startswith("--"):
            raise PlannerError(f"{where}{w!r} is not an option (--section.key value) of torchtitan 0.3.0",
                               "write each option as --section.key value (config/manager.py: tyro)")
        name, eq, val = w[2:].partition("=")
        if name in ("module", "config"):
            if not eq:
                if i >= len(args):
                    raise PlannerError(f"{where}--{name} requires a value", f"--{name} NAME")
                val = _word(where, args[i])
                i += 1
            module, config = (val, config) if name == "module" else (module, val)
            continue
        key = _key(name)
        neg = False
        if key not in CLI_OPTIONS:
            sect, _, leaf = key.rpartition(".")
            base = f"{sect}.{leaf[3:]}".lstrip(".")
            if leaf.startswith("no_") and base in BOOL_OPTIONS:  # tyro's --no-k exists for booleans only
                key, neg = base, True
            else:
                _unknown(where, key, w)
        if key in NOT_ONE_WORD:
            raise PlannerError(f"{where}--{name}: the planner does not read this option from a command line (its value "
                               "is not one word)", "set it in the config function, or leave it out")
        if key in BOOL_OPTIONS:
            if eq:
                raise PlannerError(f"{where}{w}: {key} is a flag in torchtitan 0.3.0 (tyro): it takes no value",
                                   f"write --{key} for true, --{_no(key)} for false")
            out[key] = not neg
            continue
        if key in FLOATS_OPTIONS and not eq:  # tuple[float, ...]: the words up to the next flag-like one
            vals = []
            while i < len(args) and not _flag_like(args[i]):
                vals.append(_word(where, args[i]))
                i += 1
            out[key] = [_float(where, key, v) for v in vals]
            continue
        if not eq:
            if i >= len(args) or _flag_like(args[i]):
                raise PlannerError(f"{where}--{name} has no value: {key} is {_type_text(key)} in torchtitan 0.3.0, not a "
                                   "flag, and tyro stops with 'Missing value for argument' (exit 2)",
                                   f"write --{name} VALUE")
            val = _word(where, args[i])
            i += 1
        out[key] = _typed(where, key, val)
    return out, ac, module, config


def _key(name: str) -> str:
    return name.replace("-", "_")


def _unknown(where: str, key: str, word: str):
    if key in MAIN_ONLY:
        raise PlannerError(f"{where}{word}: {key} is an option of torchtitan main's TOML, not of torchtitan 0.3.0 "
                           f"({COMMIT}'s frozen options, tests/unit_tests/test_no_new_cli_options.py)", MAIN_ONLY[key])
    near = difflib.get_close_matches(key, sorted(CLI_OPTIONS), n=1, cutoff=0.75)
    raise PlannerError(f"{where}{word}: {key} is no option of torchtitan 0.3.0 ({COMMIT}'s frozen options, "
                       "tests/unit_tests/test_no_new_cli_options.py l. 18-243)",
                       f"did you mean --{near[0]}?" if near else "see torchtitan's config/configs.py for the options")


def _flag_like(w: str) -> bool:
    """tyro's test of a word after a value-taking option (_tyro_backend.py _blocks_value_consumption l. 67-97): "--", or
    a word that starts with "-" and then a letter, is an option, not the value; a negative number is a value."""
    head = w.partition("=")[0]
    return w == "--" or (head.startswith("-") and len(head) > 1 and head.lstrip("-")[:1].isalpha())


def _no(key: str) -> str:
    sect, _, leaf = key.rpartition(".")
    return f"{sect}.no-{leaf}".lstrip(".")


def _type_text(key: str) -> str:
    if key in LITERAL_OPTIONS:
        return "one of " + ", ".join(LITERAL_OPTIONS[key])
    for kinds, text in ((INT_OPTIONS, "an integer"), (OPT_INT_OPTIONS, "an integer or None"),
                        (FLOAT_OPTIONS, "a number"), (OPT_FLOAT_OPTIONS, "a number or None"),
                        (STR_OPTIONS, "a string"), (OPT_STR_OPTIONS, "a string or None"),
                        (LIST_OPTIONS, "a list of strings (one comma-separated word)")):
        if key in kinds:
            return text
    return "a value"


def _float(where: str, key: str, val: str) -> float:
    try:
        x = float(val)
    except ValueError:
        x = None
    if x is None or x != x or x in (float("inf"), float("-inf")):
        raise PlannerError(f"{where}--{key} {val!r} is not a finite number", f"--{key} takes a number (e.g. 1.0)")
    return x


def _typed(where: str, key: str, val: str):
    """A value word as tyro types it for the option (the type table above); PlannerError where tyro stops."""
    from ..schema import MAX_COUNT

    if key in LIST_OPTIONS:
        return [v for v in val.split(",")] if val else []
    if val == "None" and key in OPT_INT_OPTIONS | OPT_FLOAT_OPTIONS | OPT_STR_OPTIONS:
        return None
    if key in INT_OPTIONS | OPT_INT_OPTIONS:
        if not re.fullmatch(r"-?[0-9]{1,10}", val) or abs(int(val)) > MAX_COUNT:
            raise PlannerError(f"{where}--{key} {val!r} is not a whole number",
                               f"--{key} takes an integer" + (" (or None)" if key in OPT_INT_OPTIONS else ""))
        return int(val)
    if key in FLOAT_OPTIONS | OPT_FLOAT_OPTIONS:
        return _float(where, key, val)
    if key in LITERAL_OPTIONS and val not in LITERAL_OPTIONS[key]:
        raise PlannerError(f"{where}--{key} {val!r} is not one of torchtitan 0.3.0's values for it (a Literal: tyro "
                           "stops with an invalid choice)", f"valid: {', '.join(LITERAL_OPTIONS[key])}")
    return val


def config_function(where: str, module: str, config: str) -> ConfigFunction:
    """The transcribed config function --module / --config name, or PlannerError naming why not."""
    from .torchtitan import TORCHTITAN_NAME_CODES

    cf = CONFIG_FUNCTIONS.get((module, config))
    if cf is not None:
        return cf
    ours = ", ".join(f"--module {m} --config {c}" for m, c in sorted(CONFIG_FUNCTIONS, key=lambda k: k[0] != module))
    if module not in OTHER_FUNCTIONS:
        raise PlannerError(f"{where}--module {module!r} is no model package of torchtitan {COMMIT} (models/__init__.py "
                           "_supported_models l. 7-18) the planner reads (a module of your own builds a model the "
                           "planner cannot see)", f"the config functions read: {ours}")
    if config in OTHER_FUNCTIONS[module]:
        what = ("no language model" if TORCHTITAN_NAME_CODES[STACK].get(module, "") is None else
                "a config function the planner has not transcribed (" +
                NOT_TRANSCRIBED_WHY.get(config, "its model's flavor has no planner model: the kimi_k2_7, qwen3_5 and "
                                                "muse_glimmer packages' flavors are not copied") + ")")
        raise PlannerError(f"{where}--module {module} --config {config} ({COMMIT} torchtitan/models/{module}/"
                           f"config_registry.py): {what}", f"the config functions read: {ours}")
    raise PlannerError(f"{where}--config {config!r} is no config function of torchtitan {COMMIT}'s {module} "
                       f"(models/{module}/config_registry.py)",
                       f"its functions: {', '.join(OTHER_FUNCTIONS[module] + [c for m, c in CONFIG_FUNCTIONS if m == module])}")


def to_main_sections(where: str, cf: ConfigFunction, options: dict, ac: Optional[str], ignored: list,
                     assumed: list, not_modelled: list) -> tuple[dict, dict]:
    """The config function's settings with the options laid over them, in main's sections (a TOML's
    {section: {key: value}}) for torchtitan.read_sections; the options only 0.3 has are returned apart
    ('section.key' -> value, ONLY_03, stated or the function's) and every other one is listed here as ignored /
    not modelled with its reason."""
    for key in options:
        if key.partition(".")[0] in FLUX_ONLY:
            raise PlannerError(f"{where}--{key}: an option of Flux's trainer only (models/flux/trainer.py l. 34-43: "
                               f"FluxTrainer.Config adds the {', '.join(FLUX_ONLY)} sections); {cf.name} builds a "
                               "Trainer.Config, whose tyro parser has no such option (config/manager.py l. 34-42), so "
                               "torchtitan stops with an unrecognized-argument error",
                               f"drop --{key}: it belongs to --module flux configs")
    given = {**cf.settings, **options}
    data: dict = {"model": {"name": cf.flavor[0], "flavor": cf.flavor[1]}}
    if cf.converter:
        data["model"]["converters"] = list(cf.converter["converters"])
        for k, v in cf.converter.items():
            if k.startswith("quantize."):
                _, kind, conv = k.split(".")
                data.setdefault("quantize", {}).setdefault(kind, {})[conv] = copy.deepcopy(v)
    only = {}
    for key, v in given.items():
        sect, _, leaf = key.partition(".") if "." in key else ("", "", key)
        if key in ONLY_03:
            only[key] = v
        elif key == "loss.num_chunks":
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise PlannerError(f"{where}--loss.num_chunks {v!r} is not a whole number of chunks",
                                   f"--loss.num_chunks takes an integer (ChunkedLossWrapper's, default {LOSS_CHUNKS})")
            if int(v) != LOSS_CHUNKS:
                not_modelled.append(listed("not_modelled", key, v,
                                           f"ChunkedLossWrapper's chunks: priced at the stack's "
                                           f"{LOSS_CHUNKS}, memory.chunked_loss_chunks"))
            only[key] = int(v)
        elif key == "compile.enable_async_tensor_parallel":
            pass
        elif sect in ("training", "parallelism", "compile") or key == "optimizer.implementation":
            data.setdefault(sect, {})[leaf] = v
        elif key == "comm.mode" and v not in COMM_MODES_RUN:
            raise PlannerError(f"{where}--comm.mode {v}: a dry run that trains nothing (configs.py l. 333)",
                               "leave comm.mode at default to plan the run")
        elif key in NO_COST_KEYS_03 or sect in NO_COST_03 or key in NO_COST_03:
            ignored.append(listed("ignored", key, v, f"{NO_COST_KEYS_03.get(key) or NO_COST_03.get(sect or key)}"))
        elif sect == "activation_checkpoint":
            if AC_KEYS_OF.get(leaf) not in (None, ac or cf.ac):
                raise PlannerError(f"{where}--{key}: an option of the {AC_KEYS_OF[leaf]} policy, but the run's is "
                                   f"{ac or cf.ac}", f"add activation-checkpoint:{AC_KEYS_OF[leaf]} or drop the option")
            not_modelled.append(listed("not_modelled", key, v, "not priced: it may change memory or time"))
        else:
            not_modelled.append(listed("not_modelled", key, v, "not priced: it may change memory or time"))
    if "compile.enable_async_tensor_parallel" in given:  # main's [parallelism] enable_async_tensor_parallel
        data.setdefault("parallelism", {})["enable_async_tensor_parallel"] = given["compile.enable_async_tensor_parallel"]
        only.pop("compile.enable_async_tensor_parallel", None)
    policy = ac or cf.ac
    if AC_SUBCOMMANDS[policy] is None:
        raise PlannerError(f"{where}activation-checkpoint:{policy}: torch's memory-budget recompute "
                           "(activation_checkpoint.py MemoryBudgetAC l. 290-326) chooses what to save by a solver the "
                           "planner does not model", "use activation-checkpoint:selective, full or none")
    data["activation_checkpoint"] = dict(AC_SUBCOMMANDS[policy])
    return data, only


def read(path: Path, text: Optional[str] = None, *, model: Optional[str] = None, gpus: Optional[int] = None,
         hardware: Optional[str] = None, parallel: Optional[dict] = None, **_) -> TrainerConfig:
    """The launch line in the file at `path` (module docstring), priced on stack torchtitan-0.3. parallel: the
    command line's tp / pp / cp, the mesh the job runs (torchtitan.read_sections)."""
    from . import resolve_gpus
    from .megatron import read_nccl_env
    from .torchtitan import BLOCK_CAUSAL_RULE, CITES_03, read_sections

    where = f"{path}: "
    launch = parse_launch(where, files.read_text(path, "give a torchtitan launch script") if text is None else text)
    cf = config_function(where, launch.module, launch.config)
    ignored: list[str] = list(launch.notes)
    assumed: list[str] = []
    not_modelled: list[str] = []
    set_here = ", ".join(f"{k}={v}" for k, v in cf.settings.items())
    assumed.append(listed_all("assumed", [("--module", cf.module), ("--config", cf.name)],
                              f"{cf.where}: model_registry({cf.flavor[1]!r}"
                              + (", a float8 converter (rowwise, lm_head kept bf16)" if cf.converter else "") +
                              f"), activation-checkpoint:{cf.ac}" + (f", {set_here}" if set_here else "") +
                              "; the options given replace these", spaced=True))
    data, only = to_main_sections(where, cf, launch.options, launch.ac, ignored, assumed, not_modelled)
    par = data.get("parallelism", {})
    degs = [par.get(k, 1) for k in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
                                    "data_parallel_replicate_degree")]
    shard = par.get("data_parallel_shard_degree", -1)
    run = launch.gpus
    if run is not None and gpus is not None and gpus != run:
        run = resolve_gpus(where, run, launch.gpus_from, gpus, soft=launch.gpus_soft, assumed=assumed)
    if run is not None and isinstance(shard, int) and shard != -1 and all(isinstance(d, int) for d in degs):
        prod = shard
        for d in degs:
            prod *= d
        if prod != run:  # torchtitan asserts the product is the world size (parallel_dims.py @4f9e9a47d _validate l. 170-189)
            raise PlannerError(f"{where}the degrees' product (replicate x shard x tp x pp x cp) is {prod} GPUs, but "
                               f"{'--gpus' if gpus is not None else launch.gpus_from} starts {run}",
                               "make the launcher's GPU count the degrees' product")
    try:
        cfg = read_sections(where, data, model=model, gpus=gpus if gpus is not None else run, hardware=hardware,
                            stack=STACK, ignored=ignored, assumed=assumed, not_modelled=not_modelled, parallel=parallel,
                            cites=CITES_03)
    except PlannerError as e:  # the TOML mapping's refusals, said in the launch line's terms
        if type(e) is not PlannerError:
            raise
        launcher = None if gpus is not None or run is None else f"the GPU count {run} ({launch.gpus_from})"
        raise PlannerError(_spell_03(e.message, run, launcher), _spell_03(e.hint, run, launcher)) from None
    job = cfg.job
    job["stack"] = STACK
    read_nccl_env(launch.nccl, job, assumed)  # the launch line's NCCL environment (parse_launch)
    _rope_fits(where, cf, job.get("seq_len"))
    # the attention backend model_registry builds (module docstring): flex for every function transcribed
    job["attention_kernel"] = cf.kernel
    job["attention_backend"] = cf.attn_backend  # what the start-up rules read (startup.TORCHTITAN_VARLEN_CP)
    # the TOML mapping's line on main's [model] flavor's kernel (torchtitan._model_of: attn_type "flex"), not kept: the
    # line below says what the config function builds
    assumed[:] = [a for a in assumed if not about(a, "attention_kernel", "flex")]
    assumed.append(listed("assumed", "attention_kernel", cf.kernel, f"{cf.name} builds its model with attn_backend "
                   f"{cf.attn_backend!r} (no option sets it)" + (
                       "" if cf.kernel == cf.attn_backend else
                       f"; torch's varlen attention has no rate of its own: priced as {cf.kernel} (stack_db "
                       f"{STACK}, attention)")))
    # the loss every config function builds (LOSS_CHUNKS): ChunkedLossWrapper around CrossEntropyLoss
    chunks = only.pop("loss.num_chunks", None)
    if not cf.chunked_loss:
        if chunks is not None:
            ignored.append(listed("ignored", "loss.num_chunks", chunks, f"{cf.name}'s loss is CrossEntropyLoss, no "
                                  "ChunkedLossWrapper"))
        assumed.append(listed("assumed", "chunked_loss", False, f"{cf.name}'s loss is " + (
            "MTPLoss, the plain cross-entropy on the main logits and on each MTP depth's (models/deepseek_v3/mtp.py "
            "l. 323-409, mtp_scale a loss weight)" if cf.mtp_layers else "the plain CrossEntropyLoss") +
            f" ({cf.where}), priced by the stack's cross-entropy terms"))
    job["chunked_loss"] = bool(cf.chunked_loss)  # the function's, never the stack's default (chunked_loss true)
    if cf.moe_dispatcher != "alltoall":  # model_registry(moe_comm_backend=...): job fields (stack_db runs.moe_dispatchers)
        job["moe_dispatcher"] = cf.moe_dispatcher
        if cf.hybridep_capacity is not None:
            job["moe_hybridep_capacity_factor"] = cf.hybridep_capacity
    if cf.mtp_layers:  # model_registry(num_mtp_layers=...): the job field mtp_layers (stack_db runs.mtp)
        job["mtp_layers"] = cf.mtp_layers
        assumed.append(listed("assumed", "mtp_layers", cf.mtp_layers,
                              f"{cf.name}'s model_registry(num_mtp_layers={cf.mtp_layers}) "
                              "(DeepSeek-V3's multi-token prediction: per module RMSNorms on the shifted tokens' embedding and "
                              "the previous hidden state, eh_proj [2h -> h], a copy of the last layer, mtp_norm, the shared "
                              "lm_head; models/deepseek_v3/mtp.py l. 109-278), priced by the stack's MTP terms; it runs "
                              "without PP and CP (mtp.py l. 199-209: start-up rule TORCHTITAN_MTP_PP_CP)"))
    if cf.chunked_loss:
        assumed.append(listed("assumed", "chunked_loss", True,
                              f"{cf.name}'s loss is ChunkedLossWrapper (CrossEntropyLoss per sequence chunk, "
                              f"num_chunks {chunks if chunks is not None else f'default {LOSS_CHUNKS}'}, torchtitan {COMMIT} "
                              f"components/loss.py), priced by the stack's chunked-loss terms (memory._chunked_loss, stack_db "
                              f"{STACK} memory.chunked_loss_chunks {LOSS_CHUNKS}), not its plain cross-entropy's"))
    assumed.extend(noted("assumed", f"{cf.flavor[0]} {cf.flavor[1]}", n) for n in cf.notes)
    _only_03(only, job, assumed, ignored, not_modelled, where, (parallel or {}).get("cp"))
    if only.get("training.disable_cuda_graphs", ONLY_03_DEFAULTS["training.disable_cuda_graphs"]) is not True:
        why = cuda_graph_refusal(cf, job.get("pp", 1), job.get("ep", 1))
        if why is not None:
            raise PlannerError(f"{where}{why}, with torchtitan 0.3's CUDA graphs on (training.disable_cuda_graphs "
                               f"{'false' if 'training.disable_cuda_graphs' in only else 'default false'}): "
                               f"{CUDA_GRAPH_SOURCE} stops the run at start-up",
                               "add --training.disable_cuda_graphs (no CUDA graph: the step as the planner prices it)")
    _compile_components({**cf.settings, **launch.options}, "compile.components" in launch.options, ignored)
    _async_tp(where, {**cf.settings, **launch.options}, job)
    if job.get("sharding") == "none":  # 0.3.0 applies FSDP over one rank (stack_db runs.fsdp_one_rank)
        one_rank_mesh(job, STACK, assumed)
        job.pop("sharding_mode", None)  # the TOML mapping's ddp: the stack's first mode of the level (plan.resolve)
    cfg.fmt = STACK
    # the TOML mapping's lines on what 0.3 sets in the model config, not by an option: said in 0.3's terms (its
    # dispatcher: torchtitan.py's expert_parallel_comm_backend default, the one moe_dispatcher line here)
    cfg.assumed = [_dispatcher_line(cf) if about(a, "moe_dispatcher", "alltoall") else a for a in assumed]
    cfg.assumed = [_in_03_terms(a, cf) for a in cfg.assumed]
    if not any(a.message == BLOCK_CAUSAL_RULE for a in cfg.assumed):  # the mapping said the mask (torchtitan._model_of)
        cfg.assumed.append(listed("assumed", "attention mask", "block_causal", f"{cf.name}'s attention, as every "
                                  "0.3.0 language model's (models/common/config_utils.py get_attention_config l. 76-81: "
                                  "the dataloaders emit per-document positions), attends within each document; priced "
                                  "as causal attention over the whole sequence, an upper bound", spaced=True))
    return cfg


# where each module's model_registry takes the token dispatcher (moe_comm_backend) and its default "standard"
MOE_BACKEND_LINES = {"deepseek_v3": "deepseek_v3/__init__.py l. 616-619",
                     "qwen3": "qwen3/__init__.py l. 613-621, the MoE flavors' default l. 477, 518, 559",
                     "gpt_oss": "gpt_oss/__init__.py l. 388-390", "llama3": "llama3 has no MoE"}


def _dispatcher_line(cf: ConfigFunction) -> Note:
    """What the config function builds as its token dispatcher (model_registry's moe_comm_backend), as assumed."""
    if cf.moe_dispatcher == "alltoall":
        return listed("assumed", "moe_dispatcher", "alltoall", f"{cf.name} keeps model_registry's moe_comm_backend "
                      f"\"standard\" ({MOE_BACKEND_LINES[cf.module]}; no option sets it)")
    return listed_all("assumed", [("moe_dispatcher", "hybridep"),
                                  ("moe_hybridep_capacity_factor", cf.hybridep_capacity, f"{cf.hybridep_capacity:g}")],
                      f"{cf.name}'s model_registry(moe_comm_backend='hybridep', non_blocking_capacity_factor="
                      f"{cf.hybridep_capacity:g}) ({cf.where}; no option sets it): HybridEP's non-blocking dispatch "
                      "(distributed/deepep/hybridep.py) on deepseek-ai/DeepEP hybrid-ep @f725d2969 "
                      "(.ci/docker/common/install_deepep.sh), its permuted expert input and grouped-GEMM outputs at ep x "
                      "min(E / ep, top_k) x the factor rows a local token (layers/moe.py [19]), its buffers at "
                      "local_batch_size x seq_len / (cp x tp) tokens a rank (memory.py [ep]); ep 1 raises at start-up "
                      "(TORCHTITAN_HYBRIDEP)")


def _in_03_terms(line: Note, cf: ConfigFunction) -> Note:
    """The TOML reader's lines on the model, said in 0.3.0's terms: the config function's model_registry flavor,
    whose numbers are main's flavor of the same key (torchtitan_flavors.TORCHTITAN_03), not a [model] table. A
    record's head and rule are reworded apart (Note.reworded), its settings and values kept (every line a record:
    tests/test_reader_notes_records.py)."""
    name, flavor = cf.flavor
    words = [(f"torchtitan [model] name {name!r} flavor {flavor!r} (torchtitan @e347b1e5e ",
              f"--module {cf.module} --config {cf.name}: model_registry({flavor!r}), the numbers of main's {name} "
              f"{flavor} (torchtitan @e347b1e5e "),
             (f"[model] {name} {flavor}", f"{cf.name}'s model_registry({flavor!r})")]
    for old, new in words:
        line = line.reworded(old, new)
    if about(line, "model code", name):  # torchtitan.model_code_line's: '[model] name NAME, the code ...' in 0.3's terms
        line = line.reworded(f"[model] name {name!r},", f"--module {cf.module},")
    return line


_TOML_KEY = re.compile(r"\[(training|parallelism|compile|optimizer|activation_checkpoint)\] ([a-z_]+)\b")


def _spell_03(text: Optional[str], run: Optional[int], launcher: Optional[str]) -> Optional[str]:
    """A message of the TOML reader's mapping in the launch line's spelling: `[section] key` -> `--section.key`, the
    sections' degrees -> the options, and --gpus -> the launcher's count where no --gpus was given."""
    if text is None:
        return None
    text = re.sub(r"the \[(\w+)\] degrees", r"the --\1.* degrees", text)
    text = _TOML_KEY.sub(lambda m: f"--{m.group(1)}.{m.group(2)}", text)
    if launcher is not None:
        text = text.replace(f"--gpus {run}", launcher).replace("change --gpus or", "change the GPU count or")
    return text


CUDA_GRAPH_SOURCE = (f"torchtitan {COMMIT} torchtitan/trainer.py Trainer.Config._validate_cuda_graphs l. 179-210 "
                     "(called by __post_init__ l. 141 and Trainer.__init__ l. 359)")


def cuda_graph_refusal(cf: ConfigFunction, pp: int, ep: int) -> Optional[str]:
    """What of the plan torchtitan 0.3.0 refuses beside its CUDA graphs (training.disable_cuda_graphs false, the
    default; CUDA_GRAPH_SOURCE), None where nothing: pipeline parallelism (l. 183-187: 'CUDA graphs do not support
    pipeline parallelism yet. Set --training.disable_cuda_graphs.'), and expert parallelism under a token dispatcher
    that synchronizes with the CPU, every one but HybridEP's non-blocking dispatch (non_blocking_capacity_factor set)
    and MinimalAsyncEP, which the planner does not price (l. 189-210: 'CUDA graphs support only expert parallel token
    dispatcher configurations without CPU synchronization'). The dispatcher is the config function's model_registry
    (cf.moe_dispatcher, cf.hybridep_capacity); ep > 1 is an MoE model's (resolve refuses it on a dense one)."""
    from .spelling import cuda_graph_conflict

    what = cuda_graph_conflict(pp, ep, cf.moe_dispatcher, cf.hybridep_capacity)
    if what == "pp":
        return (f"pipeline_parallel_degree {pp} (l. 183-187: 'CUDA graphs do not support pipeline parallelism yet. "
                "Set --training.disable_cuda_graphs.')")
    if what == "ep":
        return (f"expert_parallel_degree {ep} with {cf.name}'s {_disp_text(cf.moe_dispatcher, cf.hybridep_capacity)} "
                "(l. 189-210: 'CUDA graphs support only expert parallel token dispatcher configurations without CPU "
                "synchronization', HybridEP's non-blocking dispatch or MinimalAsyncEP)")
    return None


# torch's CP load balancers torchtitan 0.3.0 builds (distributed/context_parallel/api.py cp_shard l. 217-264): headtail
# (_HeadTailLoadBalancer) and ptrr (_PTRRLoadBalancer, over the BlockMask); None disables load balancing; any other name
# raises ValueError ("Invalid load_balancer_type ... Must be one of: 'headtail', 'ptrr', or None") in the first step's
# prepare_context_parallel_input (trainer.py l. 750-759, only where cp is enabled); "" raises at start-up
# (configs.py ParallelismConfig.__post_init__ l. 262-266: 'context_parallel_load_balancer cannot be an empty string')
CP_BALANCER_SOURCE = (f"torchtitan {COMMIT} torchtitan/distributed/context_parallel/api.py cp_shard l. 217-264")


LB_03 = BalancerSource("torchtitan 0.3", f"torchtitan {COMMIT} torchtitan/config/configs.py ParallelismConfig."
                       "__post_init__ l. 262-266", CP_BALANCER_SOURCE, "--parallelism.context_parallel_load_balancer ",
                       "give headtail (the default), ptrr, or None")



def _only_03(only: dict, job: dict, assumed: list, ignored: list, not_modelled: list, where: str = "",
             run_cp: Optional[int] = None) -> None:
    """The options only 0.3 has (ONLY_03), stated or the config function's; absent: their default, listed. run_cp:
    the command line's cp, over the line's (None: not given), at which the CP load balancer is read."""
    for key in ONLY_03:
        if key == "compile.enable_async_tensor_parallel":
            continue
        v = only.get(key, ONLY_03_DEFAULTS[key])
        stated = key in only
        name = fmt_ignored(key, v)
        if key == "parallelism.enable_sequence_parallel":
            if v is False and job.get("tp", 1) > 1:
                job["sequence_parallel"] = False
                assumed[:] = [a for a in assumed if not about(a, "sequence_parallel", True)]
                assumed.append(listed("assumed", "sequence_parallel", False,
                                      "--parallelism.no-enable-sequence-parallel (TP without "
                                      "SequenceParallel, configs.py l. 160)"))
            elif job.get("tp", 1) > 1:
                assumed[:] = [a if not about(a, "sequence_parallel", True) else
                              listed("assumed", "sequence_parallel", True, "parallelism.enable_sequence_parallel "
                                     f"{'true' if stated else 'default true'} (configs.py l. 160)") for a in assumed]
            elif stated:
                ignored.append(listed("ignored", key, v, "tensor_parallel_degree 1"))
        elif key == "training.disable_cuda_graphs":
            if v:
                if stated:
                    ignored.append(listed("ignored", key, v, "no CUDA graph: the step as the planner prices it"))
                else:
                    assumed.append(listed("assumed", key, v,
                                          "the config function's (no CUDA graph, the step as the planner "
                                          "prices it)"))
            else:
                why = ("torchtitan 0.3 captures the forward + backward step in a CUDA graph (trainer.py l. 613-614): its "
                       "graph pool and launch savings are not priced")
                (not_modelled.append(listed("not_modelled", key, v, why)) if stated else
                 assumed.append(listed("assumed", key, v, why)))
        elif key == "parallelism.enable_fsdp_symm_mem":
            if v:  # the job field: refused below compute capability 9.0 (startup.TORCHTITAN_FSDP_SYMM_MEM_SM90); what
                job["fsdp_symm_mem"] = True  # it leaves unpriced resolve says (plan.apply_startup_switches)
            elif stated:
                ignored.append(listed("ignored", key, v, "the default"))
        elif key == "debug.spmd_typechecking":
            if v:  # the job field: refused with PP and with SAC over FlexAttention (startup.TORCHTITAN_SPMD_TYPECHECK_*)
                job["spmd_typechecking"] = True
            elif stated:
                ignored.append(listed("ignored", key, v, "the default"))
        elif key == "parallelism.context_parallel_load_balancer":
            load_balancer(where, v, stated, job, assumed, ignored, not_modelled, LB_03, run_cp)
        elif key == "parallelism.spmd_backend":
            if v != ONLY_03_DEFAULTS[key]:
                # the job field (memory.py [sb]): on a DTensor backend op SAC keeps the EP exchange's and the TP
                # reduce-scatters' outputs eager too (the functional collectives on the save list)
                job["spmd_backend"] = v
            elif stated:
                ignored.append(listed("ignored", key, v, "the default"))
        elif key == "parallelism.context_parallel_ptrr_mask_key":
            if v is not None:
                if job.get("cp", 1) == 1:
                    ignored.append(listed("ignored", key, v, "context_parallel_degree 1"))
                else:
                    not_modelled.append(listed("not_modelled", key, v, "the CP load balancer's mask key, configs.py "
                                               "l. 243: not priced"))


def _rope_fits(where: str, cf: ConfigFunction, seq: Optional[int]) -> None:
    """0.3.0 stops a run whose training.seq_len exceeds the model's RoPE table (torchtitan_registry.ROPE_MAX_SEQ_LEN_03:
    decoder.py update_from_config l. 166-174, a ValueError at start-up): refused, as torchtitan refuses it."""
    from ..torchtitan_registry import ROPE_MAX_SEQ_LEN_03

    n, line = ROPE_MAX_SEQ_LEN_03[cf.flavor]
    if seq is not None and seq > n:
        raise PlannerError(f"{where}--training.seq_len {seq}: {cf.name}'s model_registry({cf.flavor[1]!r}) builds its "
                           f"RoPE table for {n} positions (torchtitan {COMMIT} models/{cf.module}/__init__.py {line}), "
                           "and torchtitan 0.3.0 stops a longer run at start-up (models/common/decoder.py "
                           "update_from_config l. 166-174: 'Training sequence length ... exceeds attention RoPE maximum "
                           "supported sequence length')", f"--training.seq_len at most {n}")


# the components torchtitan 0.3.0 compiles: CompileConfig.components (list[str], default ["model", "loss"], configs.py
# l. 298-299) is only ever tested for these two names, with compile.enable: "model" by each model's parallelize
# (models/llama3/parallelize.py l. 55, qwen3 l. 41, deepseek_v3 l. 52, gpt_oss l. 71: `compile_config.enable and
# "model" in compile_config.components`) and "loss" by BaseLoss._maybe_compile (components/loss.py l. 309-315); no
# code checks the list's other names, so torchtitan runs with them and they compile nothing
COMPILE_COMPONENTS = ("model", "loss")


def _async_tp(where: str, given: dict, job: dict) -> None:
    """compile.enable_async_tensor_parallel, said in 0.3.0's options where the plan cannot take it: 0.3.0 itself stops
    without compile of the model (CompileConfig.__post_init__, configs.py l. 303-310: ValueError "Async TP requires
    'model' in --compile.components and --compile.enable"), and the planner prices async TP only over sequence
    parallelism's all-gather / reduce-scatter (plan: tp_comm_overlap needs sequence_parallel)."""
    if not given.get("compile.enable_async_tensor_parallel"):
        return
    if not (given.get("compile.enable") and "model" in given.get("compile.components", list(COMPILE_COMPONENTS))):
        raise PlannerError(f"{where}--compile.enable-async-tensor-parallel without --compile.enable and 'model' in "
                           "--compile.components: torchtitan 0.3.0 stops at start-up (configs.py CompileConfig."
                           "__post_init__ l. 303-310: 'Async TP requires 'model' in --compile.components and "
                           "--compile.enable')", "add --compile.enable (components with model), or write "
                                                 "--compile.no-enable-async-tensor-parallel")
    if job.get("tp", 1) > 1 and job.get("sequence_parallel") is False:
        raise PlannerError(f"{where}--compile.enable-async-tensor-parallel with --parallelism.no-enable-sequence-parallel"
                           ": the planner prices async TP as the overlap of sequence parallelism's all-gather and "
                           "reduce-scatter with the GEMMs (tp_comm_overlap needs sequence_parallel), and without them "
                           "it has no price for it", "write --parallelism.enable-sequence-parallel, or "
                                                     "--compile.no-enable-async-tensor-parallel")


def _compile_components(given: dict, stated: bool, ignored: list) -> None:
    """What the run's compile.components does, listed (ignored: nothing is priced apart from torch_compile, which the
    TOML mapping sets from enable and "model"): the names 0.3.0 never reads, and the whole list with compile off."""
    comps = given.get("compile.components", list(COMPILE_COMPONENTS))
    other = [c for c in comps if c not in COMPILE_COMPONENTS]
    if not given.get("compile.enable", False):
        if stated:
            ignored.append(listed("ignored", "compile.components", comps, "compile.enable false: torchtitan 0.3.0 "
                                  "compiles no component, whatever the list names; configs.py l. 291-299"))
        return
    for c in other:
        ignored.append(noted("ignored", f"compile.components {c!r}", "no component of torchtitan 0.3.0: it compiles "
                             "only \"model\" (models/<module>/parallelize.py) and \"loss\" (components/loss.py "
                             "l. 309-315) and checks no other name, so this one compiles nothing"))


# ------------------------------------------------------------------ the export
# main's [parallelism] / [training] / [compile] / [optimizer] keys of export._torchtitan_sections that 0.3 spells as
# the same option; the others are rewritten (async TP, the end weights) or refused (launch_text)
SAME_KEYS = {
    "training": ("local_batch_size", "global_batch_size", "seq_len", "steps", "dtype"),
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                    "pipeline_parallel_degree", "context_parallel_degree", "expert_parallel_degree",
                    "pipeline_parallel_microbatch_size", "pipeline_parallel_schedule",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "fsdp_reshard_after_forward",
                    "context_parallel_load_balancer"),  # configs.py l. 235 (the job field cp_load_balancer)
    "optimizer": ("implementation",),
}


def _refuse(what: str, hint: str) -> PlannerError:
    return PlannerError(f"export torchtitan: {what}", hint)


def launch_flavor(plan: dict, model, picked: list) -> tuple[str, str]:
    """export._torchtitan_sections' flavor step for a launch line: main's (name, flavor) of the model the
    transcribed config functions build (appended to `picked`), or PlannerError where none builds it."""
    from .torchtitan_flavors import matching

    keys = {(f.code, f.flavor) for f in matching(model)}
    picked.extend(cf for cf in CONFIG_FUNCTIONS.values() if cf.flavor in keys)
    if not picked:
        funcs = ", ".join(f"{m} {c} ({cf.flavor[0]} {cf.flavor[1]})" for (m, c), cf in CONFIG_FUNCTIONS.items())
        raise _refuse(f"model {plan['model']}: no torchtitan {COMMIT} config function the planner reads builds it "
                      f"({funcs}), and 0.3 sets the model in the config function's model_spec, which no option "
                      "reaches (trainer.py l. 75-77, tyro.conf.Suppress)",
                      "plan one of those models on --stack torchtitan-0.3, or write a config function for it")
    return picked[0].flavor


def _config_function(plan: dict, sec: dict, picked: list):
    """The transcribed config function (CONFIG_FUNCTIONS) that builds the plan's model with its MTP modules, fp8
    converter, attention backend and loss, among `picked` (the functions that build the model); PlannerError
    naming what differs where none does (launch_text)."""
    kernel = plan.get("attention_kernel") or "flex"
    conv = {"converters": sec.get("model", {}).get("converters", [])}
    conv.update({k: v for k, v in sec.items() if k.startswith("quantize.")})
    conv = conv if conv["converters"] else {}
    mtp = int(plan.get("mtp_layers") or 0)  # the priced model's MTP modules (plan.py: settings.model.mtp_layers)
    with_mtp = [cf for cf in picked if cf.mtp_layers == mtp]
    if picked and not with_mtp:  # model_registry's num_mtp_layers is the function's (no option sets it)
        have = [cf for cf in CONFIG_FUNCTIONS.values() if cf.mtp_layers == mtp]
        raise _refuse(f"model {plan['model']} with {mtp} multi-token prediction module(s): the torchtitan {COMMIT} config "
                      f"functions that build the model ({', '.join(cf.name for cf in picked)}) build "
                      f"{', '.join(sorted({str(cf.mtp_layers) for cf in picked}))}; model_registry's num_mtp_layers is the "
                      "config function's, which no option reaches (trainer.py l. 75-77)" +
                      (f"; {', '.join(cf.name for cf in have)} builds {mtp}" if have else ""),
                      "price the plan with the MTP modules of one of those functions (--mtp-layers), then export")
    picked = with_mtp
    # (a hybridep row's factor 0.0 is the blocking dispatch: model_registry's non_blocking_capacity_factor None)
    disp = (plan.get("moe_dispatcher") or "alltoall", plan.get("moe_hybridep_capacity_factor") or None)
    with_disp = [cf for cf in picked if (cf.moe_dispatcher, cf.hybridep_capacity) == disp]
    if picked and not with_disp:  # model_registry's moe_comm_backend is the config function's (no option sets it)
        have = "; ".join(f"{cf.name}: {_disp_text(cf.moe_dispatcher, cf.hybridep_capacity)}" for cf in picked)
        raise _refuse(f"model {plan['model']} with {_disp_text(*disp)}: the torchtitan {COMMIT} config functions that "
                      f"build the model run {have}; model_registry's moe_comm_backend and non_blocking_capacity_factor "
                      "are the config function's, which no option reaches (trainer.py l. 75-77)",
                      "price the plan with the dispatcher of one of those functions, then export")
    picked = with_disp
    backend = plan.get("attention_backend")  # the job's attention module, where not the stack's default (flex)
    built = [cf for cf in picked if _priced_conv(cf.converter) == _priced_conv(conv) and cf.kernel == kernel
             and (backend is None or cf.attn_backend == backend)]
    fits = [cf for cf in built if cf.chunked_loss == bool(plan.get("chunked_loss"))]
    if built and not fits:  # the loss: ChunkedLossWrapper or CrossEntropyLoss, the function's (no option sets it)
        cf = built[0]
        if plan.get("chunked_loss"):
            raise _refuse(f"model {plan['model']} priced with chunked_loss: the torchtitan {COMMIT} config functions "
                          f"that build it ({', '.join(c.name for c in built)}) run the plain CrossEntropyLoss",
                          "price the plan without --chunked-loss, then export")
        raise _refuse(f"model {plan['model']} priced with the plain cross-entropy: every torchtitan {COMMIT} config "
                      f"function that builds it wraps its loss in ChunkedLossWrapper ({cf.where}: "
                      "loss=ChunkedLossWrapper.Config), which no option removes",
                      "price the plan with --chunked-loss on --stack torchtitan-0.3, then export")
    if not fits:
        have = ", ".join(f"{cf.module} {cf.name} ({_conv_text(cf.converter)}, attn_backend {cf.attn_backend}"
                         + (f", priced as {cf.kernel}" if cf.kernel != cf.attn_backend else "") + ")"
                         for cf in picked)
        raise _refuse(f"model {plan['model']} with {_conv_text(conv)} and attention kernel {kernel}"
                      + (f" (attention_backend {backend})" if backend is not None else "") + ": the torchtitan "
                         f"{COMMIT} config functions that build the model are {have}; 0.3 sets converters and the "
                         "attention backend in the config function's model_spec, which no option reaches (trainer.py "
                         "l. 75-77)", "plan the precision and kernel of one of those functions, then export")
    return fits[0]


def launch_text(plan: dict, sec: dict, picked: list, notes: list[str]) -> str:
    """The launch line of a plan priced on stack torchtitan-0.3 (module docstring) from its sections in main's
    layout (export._torchtitan_sections with launch_flavor): the config function that builds the plan's model
    with its fp8 converter and attention backend, and every other setting as an option; PlannerError where no
    transcribed function builds them or 0.3 has no option for a setting."""
    from ..catalog import load_hardware

    cf = _config_function(plan, sec, picked)
    opts: list[str] = []
    for sect, keys in SAME_KEYS.items():
        for k in keys:
            if k in sec.get(sect, {}):
                opts.append(f"--{sect}.{k} {_spell(sec[sect][k])}")
    par = sec.get("parallelism", {})
    for k in par:
        if k not in SAME_KEYS["parallelism"] + ("enable_async_tensor_parallel",):
            if k == "expert_tensor_parallel_degree" and par[k] == 1:
                continue  # 0.3 has no ETP axis: the experts unsplit by TP under EP (stack etp_one_under_ep)
            if k == "expert_parallel_comm_backend" and par[k] == "standard":
                continue  # the model config's default token dispatcher (stack_db torchtitan-0.3 moe_dispatchers)
            raise _refuse(f"the plan's parallelism.{k} {par[k]!r} (torchtitan main's option): "
                          f"{MAIN_ONLY.get('parallelism.' + k, 'no option of 0.3')}",
                          "price the plan without it on --stack torchtitan-0.3")
    if "early_step_in_backward" in sec.get("optimizer", {}):
        raise _refuse("early_step_in_backward: torchtitan 0.3.0 has no such option", "price it without")
    if sec.get("training", {}).get("enable_cpu_offload"):  # FSDP2's CPUOffloadPolicy (configs.py @4f9e9a47d l. 61-63)
        opts.append("--training.enable-cpu-offload")
    tp = plan["tp"]
    if tp > 1:
        opts.append("--parallelism.enable-sequence-parallel" if plan.get("sequence_parallel", True) else
                    "--parallelism.no-enable-sequence-parallel")
    if plan.get("spmd_backend") is not None:  # the job field (configs.py l. 163-165; memory.py [sb])
        opts.append(f"--parallelism.spmd-backend {plan['spmd_backend']}")
    if plan.get("cp_load_balance") is False and plan.get("cp", 1) > 1:  # the job field (configs.py l. 235; cp_balancer.load_balancer)
        opts.append("--parallelism.context-parallel-load-balancer None")
    if plan.get("fsdp_symm_mem"):  # the job field (configs.py l. 151; startup.TORCHTITAN_FSDP_SYMM_MEM_SM90)
        opts.append("--parallelism.enable-fsdp-symm-mem")
    if plan.get("spmd_typechecking"):  # the job field (configs.py l. 356; startup.TORCHTITAN_SPMD_TYPECHECK_*)
        opts.append("--debug.spmd-typechecking")
    comp = sec["compile"]
    opts.append("--compile.enable" if comp["enable"] else "--compile.no-enable")
    opts.append(f"--compile.components {','.join(comp['components'])}")
    if tp > 1:
        opts.append("--compile.enable-async-tensor-parallel" if par.get("enable_async_tensor_parallel") else
                    "--compile.no-enable-async-tensor-parallel")
    if (cf.settings.get("training.disable_cuda_graphs") or False) is not True:
        why = cuda_graph_refusal(cf, plan["pp"], plan.get("ep", 1))
        if why is not None:  # 0.3.0 refuses the plan beside its CUDA graphs: written off, as the plan is priced
            opts.append("--training.disable-cuda-graphs")
            notes.append(f"training.disable_cuda_graphs written: torchtitan 0.3 refuses {why} with its CUDA graphs on "
                         f"({CUDA_GRAPH_SOURCE}); without them the step is the one the plan prices")
        else:
            notes.append(f"training.disable_cuda_graphs: {cf.name} leaves torchtitan 0.3's CUDA graph of the forward + "
                         "backward step on (trainer.py l. 613-614), which the plan does not price")
    if cf.export_note:
        notes.append(cf.export_note)
    if "steps" not in sec["training"]:
        per = plan["global_batch"] * plan["seq_len"]
        if plan.get("tokens") is not None:  # no option but --training.steps sets the run's length: refused, not rounded
            lo = int(plan["tokens"] // per)
            near = " or ".join(f"{n * per} ({n:,} steps)" for n in (lo, lo + 1) if n >= 1)
            raise _refuse(f"tokens {plan['tokens']:,.0f} is not a whole number of steps of {plan['global_batch']} x "
                          f"{plan['seq_len']} = {per:,} tokens: torchtitan 0.3.0 runs whole steps "
                          "(--training.steps, configs.py l. 58), and the line read back would run "
                          f"{cf.name}'s own {cf.settings.get('training.steps', 10000):,} steps",
                          f"plan --tokens {near}")
        steps = cf.settings.get("training.steps", 10000)  # TrainingConfig.steps default 10000 (configs.py l. 58)
        notes.append(f"training.steps: the plan sets no token count; {cf.name}'s {steps:,} steps run ({steps * per:,} "
                     f"tokens; {cf.where})")
    ac = sec["activation_checkpoint"]
    sub = next((s for s, v in AC_SUBCOMMANDS.items() if v == ac), None)
    if sub is None:
        raise _refuse(f"activation checkpointing {ac}: torchtitan 0.3.0's policies are per-op selective, full and "
                         "none (activation_checkpoint.py l. 329-337); every n-th layer is no option",
                      "price recompute selective, full (every layer) or none")
    hw = load_hardware(plan.get("hardware_file") or plan["hardware"])  # a hardware YAML by its file (audit5)
    g, per = plan["gpus"], hw.gpus_per_node
    nodes, nproc = (g // per, per) if g % per == 0 else (1, g)
    head = ["#!/usr/bin/bash",
            "# torchtitan 0.3.0 launch line written by `planner export --format torchtitan` (plan on stack torchtitan-0.3)",
            f"# {cf.where}",
            f"# options: pytorch/torchtitan {COMMIT} config/configs.py, frozen in tests/unit_tests/"
            "test_no_new_cli_options.py",
            "# run on each node (torchrun --nnodes, with the cluster's rendezvous options)",
            f"# planner export: {plan['model']} on {g} x {plan['hardware']}"]
    from .megatron import nccl_exports

    head += nccl_exports(plan)  # the NCCL environment as priced (read back by parse_launch)
    words = [f"torchrun --nnodes={nodes} --nproc_per_node={nproc} -m torchtitan.train --module {cf.module} "
             f"--config {cf.name}"] + opts + [f"activation-checkpoint:{sub}"]
    return "\n".join(head) + "\n" + " \\\n  ".join(words) + "\n"


def _disp_text(name: str, capacity) -> str:
    """A token dispatcher as the export names it: alltoall, or hybridep with its non-blocking capacity factor."""
    if name == "alltoall":
        return "moe_dispatcher alltoall (moe_comm_backend 'standard')"
    return f"moe_dispatcher {name}" + (f", moe_hybridep_capacity_factor {capacity:g}" if capacity is not None
                                      else " (blocking)")


def _priced_conv(conv: dict) -> dict:
    """A converter as the planner prices it: every MX recipe name (torchao's mxfp8_cublas, mxfp8_rceil, ...) is the
    planner's one mxfp8 recipe (torchtitan.MX_DEFAULT_RECIPE's note), so the name is not compared."""
    out = copy.deepcopy(conv)
    out.get("quantize.linear.mx", {}).pop("recipe_name", None)
    return out


def _spell(v) -> str:
    return ",".join(v) if isinstance(v, list) else str(v)


def _conv_text(conv: dict) -> str:
    if not conv:
        return "no fp8 converter (bf16)"
    tabs = "; ".join(f"{k} {v}" for k, v in conv.items() if k != "converters")
    return f"converters {conv['converters']}" + (f" ({tabs})" if tabs else "")
