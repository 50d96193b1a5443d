"""Read a torchtitan TOML job file into planner job fields.

Option names and defaults follow torchtitan's config dataclasses, torchtitan/config/
job_config.py [1] (the layout of torchtitan v0.1.0 and its successors on main, 2025), and
accept the later layout [2] where compile has its own `[compile]` section and float8
moved to `[quantize.linear.float8]`. The pre-2025 `[training] batch_size` (the
llama3_8b.toml of [3]) is read as local_batch_size.

The job's stack is `torchtitan` (stack_db/torchtitan.yaml: main @e347b1e5e, the last TOML-configured
commit); torchtitan 0.3.0 (stack `torchtitan-0.3`) reads no TOML (Python config_registry functions with
command-line overrides: its launch line is read by torchtitan03.py, through this module's read_sections), and
`--stack torchtitan-0.3` prices a TOML's degrees as 0.3.0 runs them
(planner/trainers one_rank_mesh: the unsharded mesh as HSDP with a shard group of one).

Read and modelled (section.key -> planner job field):
  [model] name, flavor          -> model, through torchtitan_flavors (every flavor of the
                                   llama3, llama4, qwen3, deepseek_v3, gpt_oss registries @e347b1e5e as
                                   a planner model, compared field by field with --model: another
                                   priced shape refused, rope_theta / RoPE scaling noted; without
                                   --model TORCHTITAN_ZOO's entry, else the flavor itself as the
                                   model torchtitan:<code>/<flavor>; the flavor's attn_type flex ->
                                   attention_kernel flex); name -> the model code
                                   (TORCHTITAN_NAME_CODES [9], per stack), which must be the code
                                   the start-up rules take for the model (stack_db runs.model_codes
                                   by its hf_model_type, startup.model_code): a name whose code
                                   differs, or that names no language model, is refused (exit 2);
                                   the code is listed as assumed (absent: torchtitan's default
                                   name llama3, noted where the model's code differs); converters "float8" /
                                   "quantize.linear.float8" -> precision fp8
  [training] local_batch_size (batch_size), global_batch_size, seq_len, steps (-> tokens =
                                   steps x global batch x seq_len), compile (v0.1.0),
                                   dtype "bfloat16" (pure bf16 training -> bytes_per_param
                                   pure-bf16), mixed_precision_param (float32: listed as not
                                   modelled, priced as bf16)
  [parallelism] data_parallel_replicate_degree, data_parallel_shard_degree (-1 = the
                                   leftover ranks), tensor_parallel_degree,
                                   pipeline_parallel_degree, context_parallel_degree,
                                   pipeline_parallel_schedule, pipeline_parallel_microbatch_size,
                                   pipeline_parallel_layers_per_stage, enable_async_tensor_parallel,
                                   context_parallel_rotate_method (-> cp_rotate_method:
                                   allgather | alltoall, anything else refused; on a stack
                                   whose training never sets it, runs.cp_rotate_method_trains
                                   false as the catalog torchtitan's, listed as ignored, or
                                   not modelled under [validation] enable: cp_rotate.py [4]),
                                   expert_parallel_degree, expert_tensor_parallel_degree (-> ep,
                                   etp; etp default 1), expert_parallel_comm_backend (-> moe_dispatcher:
                                   standard -> alltoall, deepep -> deepep [7]; an MoE model only),
                                   fsdp_reshard_after_forward (-> the fsdp
                                   sharding mode: stack_db torchtitan runs.sharding),
                                   pipeline_parallel_first/last_stage_less_layers (the
                                   embedding and output counted in the split: 0 or 1)
                                   context_parallel_load_balancer (headtail | ptrr: balanced;
                                   "" refused; other names -> cp_load_balancer, refused at
                                   cp > 1 as torchtitan stops: TORCHTITAN_CP_LOAD_BALANCER_NAME [11])
  [activation_checkpoint] mode (none|selective|full), selective_ac_option ('op' or an
                                   integer n: every n-th layer of a stage fully recomputed)
  [compile] enable, components ("model")
  [optimizer] implementation    -> optimizer_implementation (fused | foreach | for-loop; absent:
                                   the stack's default, fused: job_config.py @e347b1e5e l. 151)
  [optimizer] early_step_in_backward -> early_step_in_backward (the optimizer stepped per parameter
                                   in the backward, job_config.py @e347b1e5e l. 160; memory.py [es];
                                   refused with PP or EP as torchtitan's build_optimizers refuses it)
  [training] enable_cpu_offload -> offload_optimizer and offload_param cpu under FSDP / HSDP (FSDP2's
                                   CPUOffloadPolicy, job_config.py @e347b1e5e l. 270-273; planner/offload.py);
                                   without a shard degree ignored (torchtitan applies no policy: cpu_offload)
  (the fp8 converters in either layout of [8], not a mix: converters "float8" / "mx" with [float8] /
  [mx] before 2025-09-30, "quantize.linear.float8" / "quantize.linear.mx" with [quantize.linear.*]
  since; the export writes the later, the stack's @e347b1e5e)
  [float8] / [quantize.linear.float8] recipe_name (None = tensorwise, torchao's default);
                                   enable_fsdp_float8_all_gather -> fp8_allgather (tensorwise under
                                   FSDP; unset: false, torchtitan's default, listed as assumed;
                                   refused with a recipe_name as torchtitan does),
                                   precompute_float8_dynamic_scale_for_fsdp -> fp8_precompute_scale (with
                                   the fp8 all-gather; step.py [39]); ignored without the float8 converter
  [float8] / [mx] filter_fqns      -> fp8_output_layer where the list (or the default: [] for float8,
                                   ["output"] for mx) leaves the output layer converted; a filter of
                                   any other Linear not modelled
  [mx] / [quantize.linear.mx] recipe_name (converter "mx" -> precision fp8, recipe mxfp8)
Before any of it, every key torchtitan @e347b1e5e's JobConfig types is checked against its declared type at tyro's
rule (torchtitan_types.py: a value tyro would warn about and run on is refused, exit 2; a number taken as tyro takes
it; not with [job] custom_config_module), and a key or section it has not is refused as its ConfigManager refuses
it ('Invalid field names'), except the earlier layout's keys this reader also reads (torchtitan_types.EARLIER,
@6404b932) and the earlier names it prices ([training] batch_size).
Everything else is listed: as ignored ('section.key=value (why)') where it cannot change the
plan's memory or step time (job, metrics, checkpoint, optimizer hyper-parameters, ...), else
as not modelled (a setting that may change either; the plan is priced without it).

  [parallelism] enable_sequence_parallel [10] -> sequence_parallel (false: TP without SP) on a stack whose
                                   trainer has the option (torchtitan 0.3.0: --stack torchtitan-0.3);
                                   refused on main, which has no such field (_sequence_parallel_option)
Inferred (listed as assumed): torchtitan's TP always shards the norms' sequence dimension
(SequenceParallel in parallelize_llama [5]) -> sequence_parallel on when tp > 1; DP
sharding: shard > 1 and replicate > 1 -> hsdp (shard group = shard degree), shard > 1 ->
fsdp, else none (DDP; with expert_parallel_degree > 1 torchtitan @e347b1e5e refuses that: start-up
rule TORCHTITAN_EP_FSDP, so explain / check exit 2; with tensor or pipeline parallelism and context
parallelism 1 torchtitan turns mixed precision off and, unless training.dtype is bfloat16, trains in
fp32, which the planner does not price: start-up rule TORCHTITAN_FP32, exit 2); the rank order is torchtitan's mesh ['pp', 'dp_replicate',
'dp_shard', 'cp', 'tp'] outermost first [6] -> tp-cp-dp-pp; job_config defaults where a key
is absent (local_batch_size 8, seq_len 2048, activation_checkpoint.mode selective,
pipeline_parallel_microbatch_size 1, schedule 1F1B).

References
[1] pytorch/torchtitan torchtitan/config/job_config.py @6404b932 and @000204a4 (Training,
    Parallelism, ActivationCheckpoint, Float8 dataclasses).
[2] torchtitan job_config.py with `class Compile: enable, components=["model","loss"]` and
    `Quantize.linear.float8` (2025-H2 main; seen in forks of it, e.g. the one stored as
    id 65720117573 of the project's code index).
[3] pytorch/torchtitan torchtitan/models/llama3/train_configs/llama3_8b.toml @f3534d77.
[4] planner/trainers/torchtitan_flavors.py: the registries, cited there line by line.
[5] pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py apply_tp (SequenceParallel
    on attention_norm / ffn_norm / norm).
[6] pytorch/torchtitan torchtitan/distributed/parallel_dims.py build_mesh (dims pp,
    dp_replicate, dp_shard, cp, tp; outermost first).
[7] pytorch/torchtitan torchtitan/config/job_config.py @e347b1e5e l. 474-483
    Parallelism.expert_parallel_comm_backend ('standard': PyTorch all-to-all; 'deepep': DeepEP's
    kernels; 'No effect for non-MoE models or when ep = 1'); DeepEP since 36a4b6942 (2025-12-17).
[8] pytorch/torchtitan: up to 5b5d46856~1 JobConfig.float8 / .mx (config/job_config.py l. 775-776), registered as
    "float8" / "mx" (components/quantization/float8.py @5b5d46856~1 l. 221, mx.py l. 112); 5b5d46856
    (2025-09-26, #1701) quantize.dense.*; 8a2686c4a (2025-09-30, #1763, before v0.2.0) JobConfig.quantize
    .linear.float8 / .mx, registered as "quantize.linear.float8" / "quantize.linear.mx" (@e347b1e5e
    float8.py l. 238, mx.py l. 171; config/job_config.py l. 731-836).
[9] torchtitan's train_spec registry: @e347b1e5e torchtitan/protocols/train_spec.py get_train_spec
    (l. 71-87: torchtitan.models.<[model] name>, a name of torchtitan/models/__init__.py
    _supported_models l. 7-9, or an experiment / a user's register_train_spec) and job_config.py
    Model.name (default "llama3", l. 101); release/0.3 @4f9e9a47d: --module, a name of
    torchtitan/models/__init__.py _supported_models l. 7-18 (config/manager.py l. 94-110).
[10] parallelism.enable_sequence_parallel: pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/config/configs.py
    l. 160 (bool, default true: 'Whether to use SequenceParallel as part of tensor parallelism'); main @e347b1e5e has
    no such field (git grep enable_sequence_parallel finds none in torchtitan/; config/job_config.py Parallelism
    l. 311-484), and config/manager.py _dict_to_dataclass l. 160-171 raises ValueError 'Invalid field names' for a
    TOML key its dataclass lacks; its apply_tp always applies SequenceParallel [5].
[11] parallelism.context_parallel_load_balancer: pytorch/torchtitan @e347b1e5e torchtitan/config/job_config.py
    l. 431 (str | None, default "headtail"; "" refused by __post_init__ l. 439-444), consumed by train.py l. 469-477
    -> distributed/context_parallel.py cp_shard l. 138-246 (headtail, ptrr, None; other names ValueError l. 207-211):
    read by the function the 0.3 reader uses (cp_balancer.load_balancer); a TOML string only (no null in TOML).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import files
from ..errors import PlannerError
from ..schema import MAX_COUNT, split_fields
from . import TORCHTITAN_LLAMA3_ROPE, TrainerConfig, resolve_gpus, rope_text, torchtitan_types
from .cp_balancer import BalancerSource, load_balancer
from .report import Note, listed, listed_all, noted, short_value as _short
from .torchtitan_flavors import (ATTN_KERNELS, BUILT_CODES, FLAVORS, TORCHTITAN_ZOO, flavors_of, model_name,
                                 shape_differences)

# [model] name + flavor -> the model torchtitan builds: torchtitan_flavors.py (the registries at @e347b1e5e, each
# flavor as a planner model; TORCHTITAN_ZOO: the flavors of a model_zoo entry's priced shape)
# [model] name -> the model code (stack_db runs.model_codes `code`) torchtitan builds for it [9], per stack; None: no
# language model (flux: FLUX.1, a diffusion transformer). A name absent from the stack's table is a package the stack
# lists no code for (an experiment, a TrainSpec registered outside torchtitan): the model's own code is taken, noted.
TORCHTITAN_NAME_CODES: dict[str, dict[str, Optional[str]]] = {
    # e347b1e5e: get_train_spec(name) imports torchtitan.models.<name> (protocols/train_spec.py l. 71-87) for a name of
    # models/__init__.py _supported_models (l. 7-9); llama3_ft is llama3's Transformer, llama3_args, parallelize_llama
    # and pipeline_llm in a FaultTolerantTrainSpec (models/llama3_ft/__init__.py l. 17-33): the llama3 code
    "torchtitan": {"llama3": "llama3", "llama3_ft": "llama3", "llama4": "llama4", "deepseek_v3": "deepseek_v3",
                   "qwen3": "qwen3", "gpt_oss": "gpt_oss", "flux": None},
    # release/0.3 @4f9e9a47d: the model is --module, a package of models/__init__.py _supported_models (l. 7-18;
    # config/manager.py l. 94-110 imports torchtitan.models.<module>.config_registry); kimi_k2_7 (a multimodal
    # K2.5-K2.7), qwen3_5 and muse_glimmer are packages the stack lists no code for; llama4 and llama3_ft are gone
    "torchtitan-0.3": {"llama3": "llama3", "deepseek_v3": "deepseek_v3", "qwen3": "qwen3", "gpt_oss": "gpt_oss",
                       "flux": None},
}
TORCHTITAN_COMMITS = {"torchtitan": "@e347b1e5e", "torchtitan-0.3": "release/0.3 @4f9e9a47d"}  # the tables' commits
TORCHTITAN_DEFAULT_NAME = "llama3"  # job_config.py @e347b1e5e Model.name = "llama3" (l. 101), flavor "debugmodel"

# pipeline_parallel_schedule (torch.distributed.pipelining names) -> planner schedule
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved"}
LOOPED = {"Interleaved1F1B"}
RANK_ORDER = "tp-cp-dp-pp"  # [6]


@dataclass(frozen=True)
class ReleaseCites:
    """Where one torchtitan release runs the checks read_sections transcribes, for its messages (issue 22: an error
    cites the version the stack names; torchtitan03 passes release/0.3's, the TOML reader main's)."""
    world: str       # replicate x shard x cp x tp x pp == the world size asserted (-1: the leftover GPUs)
    microbatch: str  # local_batch_size % pipeline_parallel_microbatch_size raises ValueError
    stages: str      # pipeline_parallel_layers_per_stage's stages % pp raises ValueError
    micro_default: str  # pipeline_parallel_microbatch_size's default 1, and where it splits the local batch
    accumulation: str  # without PP each accumulation step is one forward-backward of local_batch_size sequences
    steps: str       # training.steps optimizer steps, whatever the batch


MAIN_CITES = ReleaseCites(
    world="distributed/parallel_dims.py @e347b1e5e l. 48-56",
    microbatch="distributed/pipeline_parallel.py @e347b1e5e l. 186-193",
    stages="distributed/pipeline_parallel.py @e347b1e5e l. 85-92",
    micro_default="torchtitan/config/job_config.py @e347b1e5e l. 412; distributed/pipeline_parallel.py l. 186-194",
    accumulation="train.py @e347b1e5e l. 196-215, 561-564",
    steps="train.py @e347b1e5e l. 714")
CITES_03 = ReleaseCites(
    world="distributed/parallel_dims.py release/0.3 @4f9e9a47d l. 182-189",
    microbatch="torchtitan/trainer.py release/0.3 @4f9e9a47d Trainer.Config.__post_init__ l. 130-139",
    stages="distributed/pipeline_parallel.py release/0.3 @4f9e9a47d l. 233-240",
    micro_default="torchtitan/config/configs.py release/0.3 @4f9e9a47d l. 226; distributed/pipeline_parallel.py "
                  "l. 303-311",
    accumulation="torchtitan/trainer.py release/0.3 @4f9e9a47d l. 415-433, 885-887",
    steps="torchtitan/trainer.py release/0.3 @4f9e9a47d l. 1075-1076")
# Parallelism.context_parallel_rotate_method: Literal["allgather", "alltoall"] = "allgather"
# (pytorch/torchtitan torchtitan/config/job_config.py @e347b1e5e l. 446; set_rotate_method in
# torchtitan/distributed/utils.py): how torch's ring attention passes K/V between the cp ranks
CP_ROTATE_METHODS = ("allgather", "alltoall")
# Parallelism.expert_parallel_comm_backend: Literal["standard", "deepep"] = "standard" [7] -> the planner's
# moe_dispatcher (stack_db torchtitan runs.moe_dispatchers; export.py TORCHTITAN_DISPATCHERS writes it back)
COMM_BACKENDS = {"standard": "alltoall", "deepep": "deepep"}


def _lb_main():
    """[11] Parallelism.context_parallel_load_balancer at main, for the one reader of the key both releases share
    (cp_balancer.load_balancer): "" refused at start-up, headtail / ptrr balanced, any other string (the TOML's "None"
    too: TOML has no null, and ConfigManager._dict_to_dataclass passes the file's string as it is) refused where CP
    runs; None, no load balancing, only on torchtitan's command line (tyro parses None for `str | None`)."""
    return BalancerSource(
        "torchtitan @e347b1e5e",
        "pytorch/torchtitan @e347b1e5e torchtitan/config/job_config.py Parallelism.__post_init__ l. 439-444",
        "pytorch/torchtitan @e347b1e5e torchtitan/distributed/context_parallel.py cp_shard l. 138-246 (the balancer "
        "l. 183-211), called from train.py l. 469-477 (prepare_context_parallel_input, only where cp is enabled)",
        "[parallelism] context_parallel_load_balancer = ",
        "give \"headtail\" (the default) or \"ptrr\"; TOML has no None (torchtitan/config/manager.py @e347b1e5e "
        "_dict_to_dataclass l. 160-181 passes the file's string as it is): for no load balancing pass "
        "--parallelism.context_parallel_load_balancer None on torchtitan's command line and price it with "
        "--no-cp-load-balance", quote=True)

def fqns_per_model_part(num_stages: int, num_layers: int, input_weight: int = 1, output_weight: int = 1) -> list[list[str]]:
    """torchtitan's own placement of an LLM's modules on its pipeline stages, as
    [parallelism] module_fqns_per_model_part spells it: pytorch/torchtitan @e347b1e5e
    torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part l. 236-334
    (num_layers + the two weights effective layers, floor per stage, one more on each of the
    first `remainder` stages; the first less input_weight, the last less output_weight). The
    planner prices this split (stack_db torchtitan pipeline_split front, pipeline.stage_layers);
    the export writes it where no pipeline_parallel_layers_per_stage gives the stage count
    (ceil(layers / it) stages), and the reader takes it back only in this form."""
    if num_stages == 1:
        return [["tok_embeddings"] + [f"layers.{i}" for i in range(num_layers)] + ["norm", "output"]]
    units = num_layers + input_weight + output_weight
    base, extra = divmod(units, num_stages)
    parts, layer = [], 0
    for k in range(num_stages):
        n = base + (k < extra) - (input_weight if k == 0 else output_weight if k == num_stages - 1 else 0)
        take = list(range(layer, min(layer + max(n, 0), num_layers)))
        layer += len(take)
        parts.append((["tok_embeddings"] if k == 0 else []) + [f"layers.{i}" for i in take]
                     + (["norm", "output"] if k == num_stages - 1 else []))
    return parts


MODELLED = {
    "model": {"name", "flavor", "converters"},
    "training": {"local_batch_size", "batch_size", "global_batch_size", "seq_len", "steps", "compile", "dtype",
                 "mixed_precision_param", "enable_cpu_offload"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                    "pipeline_parallel_degree", "context_parallel_degree", "pipeline_parallel_schedule",
                    "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
                    "enable_async_tensor_parallel", "expert_parallel_degree", "expert_tensor_parallel_degree",
                    "fsdp_reshard_after_forward", "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "context_parallel_rotate_method",
                    "expert_parallel_comm_backend", "module_fqns_per_model_part", "enable_sequence_parallel",
                    "context_parallel_load_balancer"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "compile": {"enable", "components"},
    "float8": {"recipe_name", "enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "filter_fqns"},
    "mx": {"recipe_name", "filter_fqns"},
    "optimizer": {"implementation", "early_step_in_backward"},
}
# torchtitan MXLinear recipe names (torchtitan/config/job_config.py @e347b1e5e MXLinear.recipe_name,
# default "mxfp8_cublas"; torchao MXLinearRecipeName mxfp8_emulated / mxfp8_cublas / mxfp8_cutlass /
# mxfp8_rceil ...): every mxfp8 one is the planner's mxfp8 recipe (1x32 e8m0 blocks)
MX_DEFAULT_RECIPE = "mxfp8_cublas"


# settings with no effect on the plan's memory or step time (torchtitan/config/job_config.py
# @e347b1e5e): listed as ignored with the reason; any other unread key is "not modelled"
NO_COST_SECTIONS = {
    "job": "the job's name and folders", "metrics": "logging", "checkpoint": "checkpointing between steps",
    "lr_scheduler": "the learning-rate schedule", "validation": "evaluation between steps",
    "comm": "communication timeouts and tracing", "profiling": "profiling", "fault_tolerance": "fault tolerance settings",
}
NO_COST_TRAINING = {"dataset", "dataset_path", "max_norm", "seed", "deterministic", "warmup_steps", "max_steps"}


def _no_cost(section: str, key: str, value):
    """Why a TOML key has no effect on memory or step time, or None when it may have one."""
    if section in NO_COST_SECTIONS:
        return NO_COST_SECTIONS[section]
    if section == "optimizer":
        if key == "name" and str(value).lower() not in ("adamw", "adam"):
            return None  # another optimizer keeps other states than the Adam moments priced
        return "optimizer hyper-parameters (Adam(W) priced)"
    if section == "training" and key in NO_COST_TRAINING:
        return "data, clipping and seed settings"
    if section == "model" and key in ("tokenizer_path", "hf_assets_path"):  # job_config.py @9810191bb~1 l. 107-115
        return "the tokenizer's files (the data pipeline)"
    return None


def _int(where: str, key: str, v, minimum: int = 1, allowed: tuple = ()) -> int:
    """A whole number from `minimum` to MAX_COUNT (2**31 - 1: planner/schema.py), or one of
    `allowed` (torchtitan's -1 = "derived"); else PlannerError naming the key."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise PlannerError(f"{where}{key} = {_short(v)} is not a whole number", f"set {key} to an integer")
    if v in allowed:
        return v
    if not (minimum <= v <= MAX_COUNT):
        also = "".join(f" or {a}" for a in allowed)
        raise PlannerError(f"{where}{key} = {_short(v)} is not a whole number from {minimum} to {MAX_COUNT}{also}",
                           f"set {key} to a count such as {max(minimum, 1)}")
    return v


# the type each modelled key must have (torchtitan/config/job_config.py @e347b1e5e: str fields;
# converters and compile.components are list[str], a comma-separated string accepted too)
STR_KEYS = {("model", "name"), ("model", "flavor"), ("parallelism", "pipeline_parallel_schedule"),
            ("activation_checkpoint", "mode"), ("training", "dtype"), ("training", "mixed_precision_param"),
            ("float8", "recipe_name"), ("parallelism", "fsdp_reshard_after_forward"), ("optimizer", "implementation"),
            ("parallelism", "context_parallel_rotate_method"), ("parallelism", "expert_parallel_comm_backend"),
            ("parallelism", "context_parallel_load_balancer")}
STR_LIST_KEYS = {("model", "converters"), ("compile", "components")}
BOOL_KEYS = {("training", "compile"), ("compile", "enable"), ("parallelism", "enable_async_tensor_parallel"),
             ("training", "enable_cpu_offload"), ("parallelism", "enable_sequence_parallel")}


def _check_types(where: str, data: dict) -> None:
    """Every modelled section is a table and every modelled string / list / boolean key has
    its type, so that a `training = 5` or `flavor = ["8B"]` is an error naming it, not a crash."""
    for section in list(MODELLED) + ["quantize"]:
        if section in data and not isinstance(data[section], dict):
            raise PlannerError(f"{where}{section} = {_short(data[section])}: [{section}] must be a table (a [section] "
                               "of key = value lines)", f"write [{section}] as a section header with its keys below it")
    for (section, key) in sorted(STR_KEYS | STR_LIST_KEYS | BOOL_KEYS):
        body = data.get(section, {})
        if key not in body:
            continue
        v = body[key]
        if (section, key) in STR_KEYS:
            ok, want = isinstance(v, str), "a string"
        elif (section, key) in BOOL_KEYS:
            ok, want = isinstance(v, bool), "true or false"
        else:
            ok, want = isinstance(v, str) or (isinstance(v, list) and all(isinstance(c, str) for c in v)), "a list of strings"
        if not ok:
            raise PlannerError(f"{where}[{section}] {key} = {_short(v)} is not {want}", f"torchtitan's {key} is {want}")


# torchtitan's two layouts of its linear converters, each (the names [model] converters gives, the tables
# their settings sit in): [8] before 5b5d46856 (2025-09-26; v0.1.0) converters "float8" / "mx" with [float8] /
# [mx]; since 8a2686c4a (2025-09-30, #1763; v0.2.0 to @e347b1e5e, the stack's, which the export writes)
# "quantize.linear.float8" / "quantize.linear.mx" with [quantize.linear.float8] / [quantize.linear.mx]
# (5b5d46856 to 8a2686c4a~1 named them quantize.dense.*: refused, _precision_from_converters)
LINEAR_LAYOUTS = {"before 2025-09-30 (v0.1.0)": (("float8", "mx"), ("float8", "mx")),
                  "since 2025-09-30 (v0.2.0 on)": (("quantize.linear.float8", "quantize.linear.mx"),
                                                   ("quantize.linear.float8", "quantize.linear.mx"))}


def _one_layout(where: str, data: dict) -> None:
    """A file in one of LINEAR_LAYOUTS: a mix runs on no torchtitan [8] (the earlier has no [quantize]
    table, 'Invalid field names'; the later registers no converter "float8", a KeyError, and has no
    [float8] table), so it is refused rather than read as either."""
    conv = data.get("model", {}).get("converters", [])
    conv = [c.strip() for c in conv.split(",")] if isinstance(conv, str) else conv
    quant = data.get("quantize", {})
    lin = quant.get("linear", {}) if isinstance(quant, dict) else {}
    seen = []
    for era, (names, tables) in LINEAR_LAYOUTS.items():
        has = [f'converters "{c}"' for c in conv if c in names]
        has += [f"[{t}]" for t in tables if (lin if t.startswith("quantize.") else data).get(t.split(".")[-1]) is not None]
        if has:
            seen.append((era, has[0]))
    if len(seen) > 1:
        (e0, k0), (e1, k1) = seen
        raise PlannerError(f"{where}{k0} is torchtitan's layout {e0}, {k1} its layout {e1}: no torchtitan reads both",
                           'write converters = ["quantize.linear.float8"] with [quantize.linear.float8] (torchtitan v0.2.0 '
                           'on, the stack\'s @e347b1e5e), or "float8" with [float8] (v0.1.0); "mx" the same way')


def model_code_line(where: str, name: Optional[str], model: str, given: bool, stack_name: str) -> Optional[Note]:
    """The model code the start-up rules take for `model` on the stack (startup.model_code, by its hf_model_type)
    against the one the TOML's [model] name builds (TORCHTITAN_NAME_CODES): the assumed line that names it, or
    None where the stack has no torchtitan names (a command-line --stack megatron; the table is keyed by the stack's
    Stack.base, the catalog trainer it runs: a user's file that extends torchtitan is checked as torchtitan) or the model or stack does
    not load (resolve names that). A name of no language model, or of another code than the model's, or of a
    code that trains other model types than the model's, is a contradiction: PlannerError (exit 2). given:
    the model came from --model (else from the flavor table)."""
    from ..catalog import load_model, load_stack
    from ..startup import model_code

    try:
        stack = load_stack(stack_name)
    except PlannerError:
        return None
    base = stack.base  # the catalog trainer the stack runs (a user's file: the entry it extends), not its name
    table = TORCHTITAN_NAME_CODES.get(base)
    if table is None:
        return None
    try:
        spec = load_model(model)
    except PlannerError:
        return None
    have, mt = model_code(spec, stack), spec.hf_model_type
    who = f"--model {model}" if given else model
    src = f"{stack.origin} runs.model_codes"
    codes = {c.code: c for c in (stack.runs.model_codes or ())} if stack.runs is not None else {}
    own = "no hf_model_type" if mt is None else f"model_type {mt!r}"
    if name is None:  # torchtitan's default name: not stated, so noted, never a contradiction
        default = f"torchtitan's default {TORCHTITAN_DEFAULT_NAME!r} (job_config.py Model.name)"
        if have is None:
            return noted("assumed", "model code", f"none: the TOML gives no [model] name ({default}), and {model} "
                         f"({own}) has no code in {src}: priced on the stack's runs alone")
        if have.code == table[TORCHTITAN_DEFAULT_NAME]:
            return listed("assumed", "model code", have.code, f"no [model] name, {default}, the code {src} gives "
                          f"{model}'s model_type {mt!r}", spaced=True)
        return listed("assumed", "model code", have.code, f"{model}'s model_type {mt!r} ({src}); the TOML gives no "
                      f"[model] name, whose torchtitan default {TORCHTITAN_DEFAULT_NAME!r} (job_config.py Model.name) "
                      f"builds the {table[TORCHTITAN_DEFAULT_NAME]} code: set [model] name = \"{have.code}\" for "
                      "torchtitan to build the model priced", spaced=True)
    if name not in table:
        taken = f"{model}'s code {have.code} (model_type {mt!r}, {src})" if have is not None else f"no code ({model}: {own})"
        return noted("assumed", "model code", f"[model] name {name!r} is no model package of torchtitan "
                     f"{TORCHTITAN_COMMITS[base]} (an experiment or a TrainSpec registered outside torchtitan): the "
                     f"start-up rules take {taken}")
    code = table[name]
    if code is None:
        raise PlannerError(f"{where}[model] name {name!r} is no language model (torchtitan's flux: FLUX.1, a diffusion "
                           "transformer)", f"the planner prices language models: name one ({', '.join(n for n, c in table.items() if c)})")
    trains = ", ".join(codes[code].model_types) if code in codes else "?"
    if have is not None and have.code == code:
        return listed("assumed", "model code", code, f"[model] name {name!r}, the code {src} gives {model}'s "
                      f"model_type {mt!r}", spaced=True)
    if have is not None:
        names = [n for n, c in table.items() if c == have.code]
        raise PlannerError(
            f"{where}[model] name {name!r} builds torchtitan's {code} code (model_type {trains}), but {who} is model_type "
            f"{mt!r}, which {stack.name} trains with its {have.code} code ({src})",
            f"set [model] name = \"{names[0] if names else have.code}\" with a flavor of the model's shape, or give a "
            f"--model of model_type {trains}")
    if mt is not None:
        raise PlannerError(f"{where}[model] name {name!r} builds torchtitan's {code} code, which trains model_type {trains} "
                           f"({src}); {who} is model_type {mt!r}, which no {stack.name} code trains",
                           f"give a --model of model_type {trains}, or a model YAML without hf_model_type")
    return listed("assumed", "model code", code, f"[model] name {name!r}; {model} gives no hf_model_type, so the "
                  f"start-up rules do not read the {code} code's limits ({src}: priced on the stack's runs alone)",
                  spaced=True)


def _flavor(name: Optional[str], flavor: Optional[str]):
    """The registry entry [model] name + flavor builds (torchtitan_flavors.FLAVORS, by the name's code at
    @e347b1e5e, the layout of the file: a TOML is main's, whichever stack prices it), or None."""
    code = TORCHTITAN_NAME_CODES["torchtitan"].get(name) if name is not None else None
    return FLAVORS.get((code, flavor)) if code is not None and flavor is not None else None


def _model_of(where: str, name, flavor, model: Optional[str], stack_name: str, job: dict, assumed: list) -> None:
    """[model] name + flavor -> job model (and the flavor's attention kernel), checked field by field
    (torchtitan_flavors.shape_differences): with --model, a flavor of another priced shape is refused and a
    costless difference (rope_theta, RoPE scaling) noted; without, the flavor's model_zoo entry
    (TORCHTITAN_ZOO), else refused naming why."""
    from ..catalog import load_model, load_stack

    fl = _flavor(name, flavor)
    zoo = TORCHTITAN_ZOO["torchtitan"].get((fl.code, fl.flavor)) if fl is not None else None
    # a flavor whose attn_type the planner has no rate for (varlen, ATTN_KERNELS None) is read as itself, not as
    # the catalog entry of its shape: its plan is priced with the stack's kernel, and its name keeps the export
    # from writing it back as the flavor of that shape which runs the stack's kernel (8B_varlen -> 8B)
    unpriced = fl is not None and ATTN_KERNELS[fl.attn_type] is None
    if unpriced and model is None:
        zoo = None
    src = (f"torchtitan {TORCHTITAN_COMMITS['torchtitan']} models/{fl.code}/__init__.py {fl.lines}"
           if fl is not None else "")
    if model is None and zoo is None and fl is not None:  # the flavor itself (torchtitan_flavors.model_name)
        zoo = model_name(fl)
    if model is None and zoo is None:
        code = TORCHTITAN_NAME_CODES["torchtitan"].get(name) if name is not None else None
        known = (f"{name}'s flavors: {', '.join(flavors_of(code))}" if code in {f.code for f in FLAVORS.values()} else
                 "flavors of a catalog model: " + ", ".join(f"{n} {f}" for n, f in TORCHTITAN_ZOO["torchtitan"]))
        raise PlannerError(f"{where}[model] name {name!r} flavor {flavor!r} is not a flavor the planner knows, and no "
                           "--model was given", f"pass --model NAME (a catalog name, model YAML or HF config.json); {known}")
    job["model"] = model if model is not None else zoo
    line = model_code_line(where, name, job["model"], model is not None, stack_name)
    if model is None:
        same = TORCHTITAN_ZOO["torchtitan"].get((fl.code, fl.flavor))
        assumed.append(listed("assumed", "model", zoo, f"torchtitan [model] name {name!r} flavor {flavor!r} ({src}; " +
                       ("its shape checked against the catalog field by field)" if zoo != model_name(fl) else
                        f"the flavor as torchtitan builds it: {same}'s priced shape, read as the flavor for its attn_type "
                        f"{fl.attn_type!r})" if same is not None else
                        "no catalog model has its shape: the flavor as torchtitan builds it)")))
    if line is not None:
        assumed.append(line)
    if fl is None and flavor is None and model is not None:  # job_config.py @e347b1e5e Model.flavor (l. 104)
        assumed.append(noted("assumed", "[model] flavor unset",
                             "torchtitan's default \"debugmodel\" (job_config.py Model.flavor, l. 104) builds its "
                             f"{name or TORCHTITAN_DEFAULT_NAME} debug model, not --model {model}: set [model] flavor "
                             "to a flavor of the model's shape for torchtitan to build the model priced"))
    if fl is None:
        if flavor is not None and name is not None and TORCHTITAN_NAME_CODES["torchtitan"].get(name) in BUILT_CODES:
            assumed.append(listed("assumed", "[model] flavor", flavor, f"not in torchtitan "
                                  f"{TORCHTITAN_COMMITS['torchtitan']}'s {name} registry (a flavor added to it): priced "
                                  f"as --model {model}", show=repr(flavor), spaced=True))
        return
    priced, costless = shape_differences(fl, load_model(job["model"]))
    if priced:
        raise PlannerError(f"{where}[model] {name} {flavor} ({src}) contradicts --model {model} (flavor / model): "
                           f"{'; '.join(priced)}",
                           f"give --model {model_name(fl)} (the flavor as torchtitan builds it), or name a flavor of "
                           f"{model}'s shape")
    for d in costless:
        if fl.code == "llama3" and d.startswith("llama3_rope_scaling"):  # every llama3 flavor's RoPEScalingArgs
            have = load_model(job["model"]).llama3_rope_scaling
            assumed.append(listed("assumed", "model", job['model'],
                                  f"rope_scaling {rope_text(have or 'none')}, but torchtitan's [model] {name} "
                                  f"{flavor} always applies Llama 3.1's ({rope_text(TORCHTITAN_LLAMA3_ROPE)}, "
                                  "models/llama3/model/args.py RoPEScalingArgs @e347b1e5e): the same cost, another rotary"))
            continue
        assumed.append(listed("assumed", "model", job['model'],
                              f"torchtitan's [model] {name} {flavor} differs in {d} (flavor / model), "
                              "priced at nothing (the rotary tables are computed once): the run trains the flavor's"))
    kernel = ATTN_KERNELS[fl.attn_type]
    # the attention module the flavor builds, read by the start-up rules (startup.TORCHTITAN_VARLEN_CP: varlen refuses CP),
    # where the pricing stack builds it (runs.attention_backends: 0.3.0 has no sdpa for language models)
    runs = load_stack(stack_name).runs
    backends = runs.attention_backends if runs is not None else None
    if backends is not None and fl.attn_type in backends:
        job["attention_backend"] = fl.attn_type
    elif backends is not None:
        assumed.append(noted("assumed", "attention_backend",
                             f"[model] {name} {flavor} sets attn_type {fl.attn_type!r}, which {stack_name} "
                             f"does not build ({', '.join(backends)}): the start-up rules read its default"))
    if kernel == "flex":
        job["attention_kernel"] = "flex"
        assumed.append(listed("assumed", "attention_kernel", "flex",
                              f"[model] {name} {flavor} sets attn_type \"flex\" (FlexAttention; no "
                              "TOML key changes it)"))
    elif kernel is None:
        assumed.append(noted("assumed", "attention_kernel",
                             f"[model] {name} {flavor} runs attn_type {fl.attn_type!r}, which the planner "
                             "has no rate for: priced as the stack's kernel (" +
                             ("its export is refused: no other flavor runs it)" if model is None else
                             f"--model {model}: its export writes the flavor of its shape that runs the stack's kernel, "
                             "not this one)")))
    if fl.attn_mask_type == "block_causal":
        assumed.append(noted("assumed", f"[model] {name} {flavor}", BLOCK_CAUSAL_RULE))


# the rule of a [model] flavor's block-causal mask (_model_of's assumed record; torchtitan03.read states the mask
# where the mapping's lines have no such record)
BLOCK_CAUSAL_RULE = ("attn_mask_type block_causal (attention within each document): priced as causal attention over "
                     "the whole sequence, an upper bound")


def read(path: Path, text: Optional[str] = None, *, model: Optional[str] = None, gpus: Optional[int] = None,
         hardware: Optional[str] = None, stack: Optional[str] = None, parallel: Optional[dict] = None) -> TrainerConfig:
    """The config at `path`; `text`: its text when the caller already read it (else read here). stack: the
    command line's --stack, whose model codes the [model] name is checked against (model_code_line; None:
    the file's, torchtitan). parallel: the command line's tp / pp / cp (read_sections: the mesh the job runs)."""
    where = f"{path}: "
    try:
        data = tomllib.loads(files.read_text(path, "give a torchtitan .toml job file") if text is None else text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError) as e:  # ValueError: an integer of over 4,300 digits
        raise PlannerError(f"{where}invalid TOML: {str(e)[:200]}", "check the [section] headers and key = value lines") from None
    assumed: list = []
    custom = torchtitan_types.custom_module(data)
    if custom is None:  # each key torchtitan @e347b1e5e types, at tyro's rules (torchtitan_types.py): the keys not
        # priced first, the priced ones after the reading's own checks (their messages name the planner's choices)
        earlier: list = []
        torchtitan_types.check(where, data, lambda path, key: not _priced(path, key),
                               known=lambda path, key: key in MODELLED.get(path, ()), earlier=earlier)
        if earlier:  # the earlier layouts' keys, which torchtitan @e347b1e5e refuses: read as those layouts read them
            assumed.append(noted("assumed", None, torchtitan_types.earlier_note(earlier)))
    else:
        assumed.append(noted("assumed", f"[job] custom_config_module {custom!r}",
                             "the module's JobConfig is merged over torchtitan's, its fields replacing theirs with "
                             "their own types (torchtitan/config/manager.py @e347b1e5e _merge_configs l. 119-158): the "
                             "values' types are not checked against torchtitan's"))
    cfg = read_sections(where, data, model=model, gpus=gpus, hardware=hardware, stack=stack, parallel=parallel,
                        assumed=assumed)
    if custom is None:
        torchtitan_types.check(where, data, _priced, known=lambda path, key: key in MODELLED.get(path, ()))
    return cfg


def _priced(path: str, key: str) -> bool:
    """Whether read_sections reads the TOML key (MODELLED; [quantize.linear.float8] / [quantize.linear.mx] as [float8]
    / [mx]; [quantize.grouped_mm.*] by _grouped_experts)."""
    if path.startswith("quantize.grouped_mm."):
        return True
    section = path.rsplit(".", 1)[-1] if path.startswith("quantize.linear.") else path
    return key in MODELLED.get(section, ())


def _rotate_trains(stack_name: str) -> bool:
    """Whether the stack's training takes the TOML's context_parallel_rotate_method (runs.cp_rotate_method_trains,
    planner/cp_rotate.py [4]); a stack that does not load: yes (resolve names the stack's error)."""
    from ..catalog import load_stack
    from ..cp_rotate import trains

    try:
        return trains(load_stack(stack_name))
    except PlannerError:
        return True


def _sp_always(stack_name: str) -> bool:
    """Whether the stack's TP always runs sequence parallelism, so its trainer has no option turning it off: start-up
    rule TORCHTITAN_SP is in its rule set (stack_db runs.startup_rules torchtitan, less runs.startup_rules_absent:
    main @e347b1e5e keeps it, release/0.3 leaves it out); a stack that does not load: yes (resolve names its error)."""
    from ..catalog import load_stack
    from ..startup import rules_for

    try:
        stack = load_stack(stack_name)
    except PlannerError:
        return True
    return any(r.key == "TORCHTITAN_SP" for _, r in rules_for(stack))


def _sequence_parallel_option(where: str, v: bool, tp: int, stack_name: str, job: dict, assumed: list,
                              ignored: list) -> None:
    """[parallelism] enable_sequence_parallel [10]: on a stack whose TP always runs SP (_sp_always: main) refused, as
    main's ConfigManager refuses a key its Parallelism has not; elsewhere (torchtitan 0.3.0, configs.py l. 160) read:
    false at tp > 1 is TP without SP (sequence_parallel false), true SP on, either ignored at tp 1."""
    if _sp_always(stack_name):
        raise PlannerError(
            f"{where}[parallelism] enable_sequence_parallel = {str(v).lower()}: torchtitan @e347b1e5e (stack "
            f"{stack_name}) has no such option: its Parallelism (torchtitan/config/job_config.py l. 311-484) has no "
            "enable_sequence_parallel field, so its ConfigManager refuses the file (config/manager.py _dict_to_dataclass "
            "l. 160-171: 'Invalid field names'), and its TP always shards the norms' sequence dimension (SequenceParallel, "
            "models/llama3/infra/parallelize.py apply_tp; start-up rule TORCHTITAN_SP)",
            "remove the key (main's TP is always sequence-parallel), or price the run on torchtitan 0.3.0, which has "
            "the option (--stack torchtitan-0.3; its launch line spells it --parallelism.no-enable-sequence-parallel)")
    if tp <= 1:
        ignored.append(listed("ignored", "parallelism.enable_sequence_parallel", v, "tensor_parallel_degree 1"))
        return
    job["sequence_parallel"] = bool(v)
    assumed.append(listed("assumed", "sequence_parallel", bool(v), "[parallelism] enable_sequence_parallel "
                   f"{str(v).lower()} (torchtitan release/0.3 @4f9e9a47d configs.py l. 160" +
                   ("; TP without SequenceParallel: the norms and the TP collectives' outputs whole on every TP rank, "
                    "all-reduces in place of reduce-scatter / all-gather)" if not v else ")")))


def read_sections(where: str, data: dict, *, model: Optional[str] = None, gpus: Optional[int] = None,
                  hardware: Optional[str] = None, stack: Optional[str] = None,
                  ignored: Optional[list] = None, assumed: Optional[list] = None,
                  not_modelled: Optional[list] = None, parallel: Optional[dict] = None,
                  cites: ReleaseCites = MAIN_CITES) -> TrainerConfig:
    """The mapping of torchtitan's sections (main's layout, as a TOML holds them: {section: {key: value}}) onto
    planner job fields: the one mapping of the TOML reader (read) and of torchtitan 0.3.0's launch lines
    (torchtitan03.py, which lays its config function's settings and its command-line options out in these
    sections first). ignored / assumed / not_modelled: lists that already hold the caller's lines.

    parallel: the command line's options of core.PARALLEL_KEYS (tp, pp, cp, dp, vpp, schedule, micro_batch, the
    global batch's spellings, seq_len; None or absent: not given), which beat the file's values (issue 22, "flags
    beat files"; core.load_job names each replacement). The values the file leaves to torchtitan to work out
    from the mesh are worked out at the mesh the job then runs, the command line's degrees laid over the file's,
    as torchtitan run with `--parallelism.tensor_parallel_degree 2` (...) works them out:
      data_parallel_shard_degree -1: world size / (dp_replicate x cp x tp x pp) (distributed/parallel_dims.py
          @e347b1e5e l. 48-51; release/0.3 @4f9e9a47d l. 182-183), and with it whether FSDP runs (dp_shard x cp
          > 1, l. 334-335) and which sharding mode;
      global_batch_size -1 (the default, config/job_config.py l. 256): local_batch_size x the batch mesh's size,
          dp_replicate x dp_shard (train.py l. 98-102, 196-200; release/0.3 trainer.py l. 326-328, 415-419);
      the micro-batch: pipeline_parallel_microbatch_size (default 1, job_config.py l. 412-418; 0.3 configs.py
          l. 226) where pp > 1 (distributed/pipeline_parallel.py l. 186-194: local_batch_size / it micro-batches),
          local_batch_size where pp = 1;
      sequence parallelism where tp > 1 (main's TP always runs it; 0.3's enable_sequence_parallel);
      the pipeline keys (schedule, layers per stage / module lists, end weights, microbatch size) at that pp,
          --vpp / --schedule replacing them (train.py @e347b1e5e l. 218-232: read only where pp > 1);
      --micro-batch: local_batch_size where pp = 1 (torchtitan's micro-batch there), else
          pipeline_parallel_microbatch_size; tokens: steps x the global batch and seq_len the job runs (_tokens).
    An explicit data_parallel_shard_degree is kept as torchtitan keeps it, or replaced by --dp, and a command-line
    mesh it does not fill is refused (_explicit_shard). cites: where the release read runs the checks its messages
    name (MAIN_CITES; torchtitan03: CITES_03)."""
    ignored = [] if ignored is None else ignored
    assumed = [] if assumed is None else assumed
    quant = data.get("quantize", {})
    if isinstance(quant, dict) and "linear" in quant and not isinstance(quant["linear"], dict):
        raise PlannerError(f"{where}quantize.linear = {_short(quant['linear'])} must be a table", "write [quantize.linear.float8]")
    _check_types(where, data)
    _one_layout(where, data)
    if isinstance(quant, dict) and isinstance(quant.get("linear"), dict) and "float8" in quant["linear"]:
        _check_types(where, {"float8": quant["linear"]["float8"]})
    # the later layout's [quantize.linear.float8] reads as [float8]
    for conv in ("float8", "mx"):  # [quantize.linear.mx] reads as [mx] the same way
        quant = data.get("quantize", {})
        if isinstance(quant, dict) and isinstance(quant.get("linear"), dict) and conv in quant["linear"]:
            data = dict(data)
            data[conv] = {**data.get(conv, {}), **quant["linear"][conv]}
            rest = {k: v for k, v in quant.items() if k != "linear"}
            rest_linear = {k: v for k, v in quant["linear"].items() if k != conv}
            data["quantize"] = {**rest, **({"linear": rest_linear} if rest_linear else {})}
            if not data["quantize"]:
                del data["quantize"]
    grouped = _pop_grouped_mm(where, data)  # [quantize.grouped_mm.float8] / [quantize.grouped_mm.mx] (step.py [16])
    not_modelled = [] if not_modelled is None else not_modelled
    for section, body in data.items():
        if not isinstance(body, dict):
            not_modelled.append(listed("not_modelled", section, body,
                                       "unknown to the planner: it may change memory or time"))
            continue
        for key, v in _flatten(body):
            if key not in MODELLED.get(section, ()):
                why = _no_cost(section, key, v)
                if why is None:
                    not_modelled.append(listed("not_modelled", f"{section}.{key}", v,
                                               "not priced: it may change memory or time"))
                else:
                    ignored.append(listed("ignored", f"{section}.{key}", v, why))
    sec = {name: data.get(name, {}) for name in MODELLED}
    tr, par, ac, m = sec["training"], sec["parallelism"], sec["activation_checkpoint"], sec["model"]
    from .spelling import TT_DEFAULTS

    stated = {f"{name}.{k}": body[k] for name, body in (("training", tr), ("parallelism", par)) if isinstance(body, dict)
              for k in body if f"{name}.{k}" in TT_DEFAULTS or f"{name}.{k}" == "training.batch_size"}
    job: dict = {"stack": "torchtitan", "rank_order": RANK_ORDER}
    assumed.append(listed("assumed", "rank_order", RANK_ORDER,
                          "torchtitan's device mesh is pp, dp_replicate, dp_shard, cp, tp (outermost first)"))

    # ---- model
    name, flavor = m.get("name"), m.get("flavor")
    _model_of(where, name, flavor, model, stack or "torchtitan", job, assumed)

    # ---- parallel degrees
    def deg(key: str, default: int) -> int:
        return _int(where, f"[parallelism] {key}", par.get(key, default),
                    allowed=(-1,) if key == "data_parallel_shard_degree" else ())

    tp, pp, cp = deg("tensor_parallel_degree", 1), deg("pipeline_parallel_degree", 1), deg("context_parallel_degree", 1)
    rep, shard = deg("data_parallel_replicate_degree", 1), deg("data_parallel_shard_degree", -1)
    # the mesh the job runs (docstring): the command line's degrees over the file's, as torchtitan's own command
    # line (--parallelism.tensor_parallel_degree 2 ...) lays them over a TOML's
    flags = {k: v for k, v in (parallel or {}).items() if v is not None}
    run_tp, run_pp, run_cp = flags.get("tp", tp), flags.get("pp", pp), flags.get("cp", cp)
    at_flags = (run_tp, run_pp, run_cp) != (tp, pp, cp)
    mesh = " at the command line's mesh" if at_flags else ""
    said = ", ".join(f"{k} {r} over the file's {f}" for k, r, f in (("tp", run_tp, tp), ("pp", run_pp, pp),
                                                                     ("cp", run_cp, cp)) if r != f)
    if at_flags:
        spelt = " ".join(f"--parallelism.{key} {r}" for key, r, f in (
            ("tensor_parallel_degree", run_tp, tp), ("pipeline_parallel_degree", run_pp, pp),
            ("context_parallel_degree", run_cp, cp)) if r != f)
        assumed.append(noted("assumed", f"the command line's mesh ({said}; flags beat files)",
                             "the file's data_parallel_shard_degree, its global_batch_size -1, the micro-batch and the "
                             f"pipeline keys are worked out at it, as torchtitan run with {spelt} works them out"))
    inner = run_tp * run_pp * run_cp * rep
    if shard == -1 and flags.get("dp") is not None:
        shard, gpus = _leftover_shard_at_dp(where, rep, inner, (run_tp, run_pp, run_cp), flags["dp"], gpus, assumed,
                                            cites)
    elif shard == -1:
        if gpus is None:
            raise PlannerError(f"{where}[parallelism] data_parallel_shard_degree = -1 (the leftover GPUs) and no --gpus given",
                               "pass --gpus N (torchtitan takes it from NGPU x nodes), or set data_parallel_shard_degree")
        if gpus % inner:
            what = "--tp / --pp / --cp or " if at_flags else ""
            raise PlannerError(
                f"{where}--gpus {gpus} is not a multiple of tensor x pipeline x context x data_parallel_replicate = {inner}"
                + (f" (tp {run_tp}, pp {run_pp}, cp {run_cp}: the command line's over the file's)" if at_flags else "")
                + f" (torchtitan asserts the degrees' product is the world size: {cites.world})",
                f"change --gpus or {what}the [parallelism] degrees")
        shard = gpus // inner
        assumed.append(listed("assumed", "data_parallel_shard_degree", shard,
                              f"-1 takes the leftover GPUs, {gpus} / {inner}{mesh}"))
    else:
        shard, gpus = _explicit_shard(where, shard, rep, (tp, pp, cp), (run_tp, run_pp, run_cp), said, gpus,
                                      flags.get("dp"), assumed, cites)
    job.update(gpus=gpus, tp=tp, pp=pp, cp=cp)
    ep = deg("expert_parallel_degree", 1)  # MoE models (torchtitan Parallelism.expert_parallel_degree)
    if ep > 1:
        job["ep"] = ep
    dp = rep * shard
    if ep > 1:  # torchtitan's expert_tensor_parallel_degree defaults to 1 (job_config.py @e347b1e5e)
        job["etp"] = deg("expert_tensor_parallel_degree", 1)
    reshard = par.get("fsdp_reshard_after_forward", "default")
    # FSDP over the dp_shard x cp ranks where that is more than one (distributed/parallel_dims.py @e347b1e5e
    # l. 334-335 fsdp_enabled = dp_shard > 1 or cp > 1; models/llama3/infra/parallelize.py l. 125-152)
    if shard * run_cp > 1 and rep > 1:
        job.update(sharding="hsdp", shard_group=shard, sharding_mode="hsdp")
    elif shard * run_cp > 1:
        # stack_db torchtitan runs.sharding: "never" keeps the parameters from the forward to the
        # backward (fsdp2_no_reshard, an fsdp mode that gathers once per micro-batch)
        # "always" under PP reshards every unit after each forward (fsdp2_reshard_always); without PP
        # it is torchtitan's "default" (apply_fsdp: reshard_after_forward = not pp_enabled)
        job.update(sharding="fsdp", sharding_mode="fsdp2_no_reshard" if reshard == "never" else
                   "fsdp2_reshard_always" if reshard == "always" and run_pp > 1 else "fsdp2")
    else:
        job.update(sharding="none", sharding_mode="ddp")
    if at_flags:
        assumed.append(listed_all("assumed", [("sharding", job["sharding"]), ("sharding_mode", job["sharding_mode"])],
                                  f"FSDP runs where dp_shard x cp > 1, here {shard} x {run_cp}{mesh}"))
    if "enable_sequence_parallel" in par:  # [10]: torchtitan 0.3.0's option, which main has not
        _sequence_parallel_option(where, par["enable_sequence_parallel"], run_tp, stack or "torchtitan", job, assumed,
                                  ignored)
    elif run_tp > 1:
        job["sequence_parallel"] = True
        assumed.append(listed("assumed", "sequence_parallel", True,
                              "torchtitan's TP shards the norms' sequence dimension (SequenceParallel)"))
    if "context_parallel_rotate_method" in par:  # torch CP's K/V exchange (stack_db memory.cp_ring_backward)
        rot = par["context_parallel_rotate_method"]
        if rot not in CP_ROTATE_METHODS:
            raise PlannerError(f"{where}[parallelism] context_parallel_rotate_method {_short(rot)} is not one torchtitan accepts",
                               f"valid: {', '.join(CP_ROTATE_METHODS)} (torchtitan/config/job_config.py @e347b1e5e)")
        if cp > 1 and not _rotate_trains(stack or "torchtitan"):  # planner/cp_rotate.py [4]
            key = "parallelism.context_parallel_rotate_method"
            val = data.get("validation")
            if isinstance(val, dict) and val.get("enable") is True:  # the validator sets torch's global for later steps
                not_modelled.append(listed("not_modelled", key, rot,
                                           "training runs torch's default allgather until the "
                                           "first validation pass, whose create_context_parallel_ctx calls "
                                           "set_rotate_method: torchtitan @e347b1e5e components/validate.py l. 204-214; "
                                           "the later steps' method not priced"))
            else:
                ignored.append(listed("ignored", key, rot, "no effect on training: torchtitan @e347b1e5e calls "
                                      "set_rotate_method only in components/validate.py l. 204-214, validation off; "
                                      "training runs torch's default allgather"))
        elif cp > 1:
            job["cp_rotate_method"] = rot
        else:
            ignored.append(listed("ignored", "parallelism.context_parallel_rotate_method", rot,
                                  "context_parallel_degree 1"))
    if "context_parallel_load_balancer" in par:  # [11]: the job field cp_load_balance (cp_balancer.load_balancer)
        load_balancer(where, par["context_parallel_load_balancer"], True, job, assumed, ignored, not_modelled,
                       _lb_main(), run_cp)
    if "enable_async_tensor_parallel" in par:
        job["tp_comm_overlap"] = bool(par["enable_async_tensor_parallel"])
    _comm_backend(where, par, job, assumed, ignored)

    # ---- pipeline schedule and virtual stages, at the pp the job runs (the command line's over the file's: issue 22;
    # torchtitan reads these keys only where pipeline_parallel_degree > 1: train.py @e347b1e5e l. 218-232, pp_enabled
    # parallel_dims.py l. 342-343)
    at_pp = f" (the command line's pp {run_pp} over the file's {pp})" if run_pp != pp else ""
    cli_sched, cli_vpp = flags.get("schedule"), flags.get("vpp")

    def end_weights() -> tuple[int, int]:
        return (_int(where, "[parallelism] pipeline_parallel_first_stage_less_layers",
                     par.get("pipeline_parallel_first_stage_less_layers", 1), minimum=0),
                _int(where, "[parallelism] pipeline_parallel_last_stage_less_layers",
                     par.get("pipeline_parallel_last_stage_less_layers", 1), minimum=0))
    if run_pp > 1:
        sched = par.get("pipeline_parallel_schedule", "1F1B")
        if "pipeline_parallel_schedule" not in par and cli_sched is None:
            assumed.append(listed("assumed", "schedule", "1f1b",
                                  "pipeline_parallel_schedule default 1F1B" + (mesh if pp == 1 else "")))
        if sched not in SCHEDULES and cli_sched is None:
            raise PlannerError(f"{where}[parallelism] pipeline_parallel_schedule {sched!r} is not one the planner models",
                               f"valid: {', '.join(SCHEDULES)}")
        if sched in SCHEDULES:
            job["schedule"] = SCHEDULES[sched]  # a command-line --schedule replaces it, named (core.load_job)
        else:
            assumed.append(noted("assumed", "schedule",
                                 f"the file's pipeline_parallel_schedule {sched!r} is not kept: the command line's "
                                 f"{cli_sched} replaces it"))
        looped = cli_sched == "interleaved" if cli_sched is not None else sched in LOOPED
        what = (f"the command line's --schedule {cli_sched}" if cli_sched is not None
                else f"pipeline_parallel_schedule {sched!r}")
        lps = par.get("pipeline_parallel_layers_per_stage")
        from ..catalog import load_model

        L = load_model(job["model"]).num_layers
        # end-stage weights (job_config.py @e347b1e5e: default 1 each): the embedding / output counted as a
        # layer of the split (planner account_for_*; the output's weight N as loss_layers_in_pipeline_split,
        # distributed/pipeline_parallel.py @e347b1e5e generate_llm_fqn_per_model_part: num_layers +
        # input_weight + output_weight effective layers, each weight at most their floor per stage;
        # an embedding weight above 1 is not modelled)
        wf, wl = end_weights()
        if wf not in (0, 1):
            raise PlannerError(f"{where}[parallelism] pipeline_parallel_first_stage_less_layers {wf}: weights other than "
                               "0 and 1 are not modelled", "use 0 or 1 (the embedding counted as a layer or not)")
        job.update(split_fields(wf, wl))
        fqns = par.get("module_fqns_per_model_part")
        stage_key = ("module_fqns_per_model_part" if fqns is not None else
                     "pipeline_parallel_layers_per_stage" if lps is not None else None)
        if cli_vpp is not None:  # the command line's stages per rank: the file's stage key is not read
            vpp = None
            if stage_key is not None:
                assumed.append(noted("assumed", stage_key,
                                     f"the file's {_short(par[stage_key])} is not kept: the command line's vpp "
                                     f"{cli_vpp} sets the stages per rank (flags beat files)"))
        elif fqns is not None:
            vpp = _fqn_stages(where, fqns, lps, run_pp, L, wf, wl, at_pp)
        elif lps is not None:
            lps = _int(where, "[parallelism] pipeline_parallel_layers_per_stage", lps)
            stages = math.ceil((L + wf + wl) / lps)
            if stages % run_pp:
                raise PlannerError(f"{where}[parallelism] pipeline_parallel_layers_per_stage {lps} gives {stages} stages for "
                                   f"{L} layers, not a multiple of pipeline_parallel_degree {run_pp}{at_pp} "
                                   f"(torchtitan raises ValueError: {cites.stages})",
                                   "choose layers per stage so that layers / it is a multiple of the pipeline degree"
                                   + (", or give --vpp (the command line's stages per rank)" if at_pp else ""))
            vpp = stages // run_pp
            if at_pp:
                assumed.append(listed("assumed", "vpp", vpp,
                                      f"pipeline_parallel_layers_per_stage {lps} gives {stages} stages over "
                                      f"{L} layers (+ {wf + wl} end weight(s)), {stages} / pp {run_pp}{mesh}"))
        else:
            vpp = 2 if looped else 1
            if looped:
                assumed.append(listed("assumed", "vpp", 2,
                                      "a looped schedule without pipeline_parallel_layers_per_stage (torchtitan's two stages per rank)"))
        if vpp is not None and vpp > 1 and not looped:
            raise PlannerError(f"{where}[parallelism] {stage_key or 'pipeline_parallel_layers_per_stage'} "
                               f"{_short(par.get(stage_key)) if stage_key else lps} puts {vpp} stages on each rank at "
                               f"pp {run_pp}{at_pp}, but {what} runs one stage per rank",
                               "use Interleaved1F1B, or layers per stage = layers / pipeline degree")
        if vpp is not None:
            job["vpp"] = vpp
    else:  # no PP in the run: torchtitan reads none of the pipeline keys (pipeline_parallel_degree 1)
        # the end weights (torchtitan's defaults 1, job_config.py @e347b1e5e l. 377, 383) are carried where they are
        # ones the planner models: they price nothing at pp 1, and `fit CONFIG`'s rows at pp > 1 split the layers as
        # torchtitan run with --parallelism.pipeline_parallel_degree would (what `explain CONFIG --pp N` reads)
        try:
            wf, wl = end_weights()
        except PlannerError:  # a value torchtitan would not read here: listed as ignored below
            wf, wl = -1, -1
        carried = wf in (0, 1)
        if carried:
            job.update(split_fields(wf, wl))
        for key in ("pipeline_parallel_schedule", "pipeline_parallel_layers_per_stage", "module_fqns_per_model_part",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"):
            if key in par and not (carried and key.endswith("_stage_less_layers")):
                ignored.append(listed("ignored", f"parallelism.{key}", par[key], f"pipeline_parallel_degree 1{at_pp}"))

    # ---- batch, at the mesh the job runs, with the command line's micro-batch and global batch (flags beat files)
    cli_mb, cli_gbs = flags.get("micro_batch"), flags.get("global_batch")
    if "local_batch_size" in tr:
        local = _int(where, "[training] local_batch_size", tr["local_batch_size"])
    elif "batch_size" in tr:
        local = _int(where, "[training] batch_size", tr["batch_size"])
        assumed.append(noted("assumed", "local_batch_size", "[training] batch_size (pre-2025 name)"))
    else:
        local = 8
        assumed.append(listed("assumed", "local_batch_size", 8, "torchtitan's default"))
    local_from = "local_batch_size"
    if run_pp == 1 and cli_mb is not None and cli_mb != local:
        # without PP torchtitan's micro-batch is the local batch: each of global / (local x dp) accumulation steps is
        # one forward-backward of local_batch_size sequences (train.py @e347b1e5e l. 196-215, 561-564): --micro-batch
        # M is --training.local_batch_size M, and a global_batch_size -1 is M x dp
        assumed.append(listed("assumed", "micro_batch", cli_mb,
                              f"the command line replaces the file's {local} ([training] "
                              "local_batch_size: without PP torchtitan's micro-batch is the local batch, one forward-backward "
                              f"of local_batch_size per accumulation step: {cites.accumulation})"))
        local, local_from = cli_mb, "the command line's micro-batch"
    gbs = tr.get("global_batch_size", -1)
    gbs = _int(where, "[training] global_batch_size", gbs, allowed=(-1,))
    if gbs == -1:
        gbs = local * dp
        assumed.append(listed("assumed", "global_batch", gbs,
                              f"global_batch_size -1 = {local_from} {local} x dp {dp}{mesh}"))
    elif cli_gbs is None and gbs % (local * dp):
        raise PlannerError(f"{where}[training] global_batch_size {gbs} is not a multiple of {local_from} {local} x dp {dp}"
                           + mesh, "torchtitan accumulates gradients over global / (local x dp) steps; make it whole")
    job["global_batch"] = gbs
    if run_pp > 1:
        file_mbs = par.get("pipeline_parallel_microbatch_size", 1)
        # the command line's micro-batch replaces the file's, which is then not read (as the schedule's above): a
        # value the file holds for pp 1, where torchtitan reads none of the pipeline keys, is listed there as ignored,
        # and `fit CONFIG`'s rows at pp > 1 give --micro-batch (fuzz seed 124 newest-fields 3-2: a 0 there)
        mbs = file_mbs if cli_mb is not None else _int(where, "[parallelism] pipeline_parallel_microbatch_size", file_mbs)
        if cli_mb is not None and not (type(file_mbs) is int and cli_mb == file_mbs):
            assumed.append(listed("assumed", "micro_batch", cli_mb,
                                  f"the command line replaces the file's {_short(file_mbs)} ([parallelism] "
                                  "pipeline_parallel_microbatch_size" + ("" if "pipeline_parallel_microbatch_size" in par
                                  else ", its default") + ")"))
            mbs = cli_mb
        elif "pipeline_parallel_microbatch_size" not in par:
            assumed.append(listed("assumed", "micro_batch", 1,
                                  f"pipeline_parallel_microbatch_size default 1 ({cites.micro_default})"
                                  + (mesh if pp == 1 else "")))
        elif pp == 1:
            assumed.append(listed("assumed", "micro_batch", mbs, f"pipeline_parallel_microbatch_size{mesh}"))
        if local % mbs and cli_gbs is not None and cli_mb is not None:
            # the command line's batch and micro-batch are the plan's; torchtitan would run them with another local batch
            assumed.append(noted("assumed", "local_batch_size",
                                 f"the file's {local} is not kept: the command line's global batch {cli_gbs} "
                                 f"and micro-batch {mbs} set the step (torchtitan needs a local_batch_size that is a multiple "
                                 f"of pipeline_parallel_microbatch_size, {cites.microbatch})"))
        elif local % mbs:
            key = (f"the command line's --micro-batch {mbs} (pipeline_parallel_microbatch_size at pp {run_pp})"
                   if cli_mb is not None else f"[parallelism] pipeline_parallel_microbatch_size {mbs}")
            raise PlannerError(f"{where}[training] local_batch_size {local} is not a multiple of {key} (torchtitan "
                               f"raises ValueError: {cites.microbatch})",
                               "make it a divisor of the local batch")
        job["micro_batch"] = mbs
    else:
        job["micro_batch"] = local
        if pp > 1:
            assumed.append(listed("assumed", "micro_batch", local,
                                  f"local_batch_size, one micro-batch per step without PP{mesh}"))
        if "pipeline_parallel_microbatch_size" in par:
            ignored.append(listed("ignored", "parallelism.pipeline_parallel_microbatch_size",
                                  par["pipeline_parallel_microbatch_size"], f"pipeline_parallel_degree 1{at_pp}"))
    seq = tr.get("seq_len")
    if seq is None:
        seq = 2048
        assumed.append(listed("assumed", "seq_len", 2048, "torchtitan's default"))
    job["seq_len"] = _int(where, "[training] seq_len", seq)
    if "steps" in tr:
        _tokens(where, _int(where, "[training] steps", tr["steps"]), gbs, job["seq_len"], flags, job, assumed, cites)

    # ---- precision
    if tr.get("dtype") == "bfloat16":
        job["bytes_per_param"] = "pure-bf16"
    elif "dtype" in tr and tr["dtype"] != "float32":
        raise PlannerError(f"{where}[training] dtype {tr['dtype']!r} is not bfloat16 or float32", "torchtitan's choices")
    mpp = tr.get("mixed_precision_param", "bfloat16")
    if mpp != "bfloat16":
        not_modelled.append(listed("not_modelled", "training.mixed_precision_param", mpp,
                                   "fp32 compute not modelled: priced as bf16"))
    converters = m.get("converters", [])
    if isinstance(converters, str):
        converters = [c.strip() for c in converters.split(",") if c.strip()]
    _precision_from_converters(where, converters, sec, job, assumed, ignored)
    _grouped_experts(where, converters, grouped, job, assumed, ignored, not_modelled)
    _float8_fsdp(sec["float8"], job, shard, assumed, ignored, not_modelled)
    for conv in ("float8", "mx"):
        _output_filter(conv, sec[conv], job, assumed, ignored, not_modelled)

    # ---- compile
    if "compile" in data:
        comps = sec["compile"].get("components", ["model", "loss"])
        job["torch_compile"] = bool(sec["compile"].get("enable", False)) and "model" in comps
    elif "compile" in tr:
        job["torch_compile"] = bool(tr["compile"])
    else:
        job["torch_compile"] = False
        assumed.append(listed("assumed", "torch_compile", False, "torchtitan's default"))

    # ---- activation checkpointing
    mode = ac.get("mode")
    if mode is None:
        mode = "selective"
        assumed.append(listed("assumed", "activation_checkpoint.mode", "selective", "torchtitan's default"))
    if mode not in ("none", "selective", "full"):
        raise PlannerError(f"{where}[activation_checkpoint] mode {mode!r} is not modelled", "valid: none, selective, full")
    if mode == "selective":
        opt = ac.get("selective_ac_option", "2")
        opt = str(opt) if isinstance(opt, int) and not isinstance(opt, bool) and 0 < opt <= MAX_COUNT else opt
        if "selective_ac_option" not in ac:
            assumed.append(listed("assumed", "selective_ac_option", 2, "torchtitan's default"))
        if opt == "op":
            job["recompute"] = "selective"
        elif isinstance(opt, str) and re.fullmatch(r"[0-9]{1,9}", opt) and int(opt) >= 1:  # ASCII digits only
            n = int(opt)
            from ..catalog import load_model

            L = load_model(job["model"]).num_layers
            # the rule validate.py applies to published torchtitan runs (its rule 4b)
            k = max(1, math.ceil(L / run_pp / n))  # at the pp the job runs (the command line's over the file's)
            job["recompute"] = "full"
            if k < math.ceil(L / run_pp):
                job["recompute_layers"] = k
            assumed.append(listed_all("assumed", [("recompute", "full"), ("recompute_layers", k)],
                                      f"selective_ac_option {n} checkpoints every {n}-th layer, ceil({L} layers / pp "
                                      f"{run_pp} / {n}){mesh}"))
        else:
            raise PlannerError(f"{where}[activation_checkpoint] selective_ac_option {_short(opt)} is neither 'op' nor a positive integer",
                               "torchtitan's choices: 'op' or an integer n (every n-th layer)")
    else:
        job["recompute"] = mode
        if "selective_ac_option" in ac:
            ignored.append(listed("ignored", "activation_checkpoint.selective_ac_option", ac["selective_ac_option"],
                                  f"mode {mode}"))
    # ---- optimizer: its step's temporaries (stack_db memory.optimizer_step_temporaries, memory.py [opt])
    impl = data.get("optimizer", {}).get("implementation") if isinstance(data.get("optimizer"), dict) else None
    if impl is not None:
        if impl not in ("fused", "foreach", "for-loop"):
            raise PlannerError(f"{where}[optimizer] implementation {_short(impl)} is not one torchtitan runs",
                               "valid: fused (the default), foreach, for-loop")
        job["optimizer_implementation"] = impl
    early = data.get("optimizer", {}).get("early_step_in_backward") if isinstance(data.get("optimizer"), dict) else None
    if early is not None:
        if not isinstance(early, bool):
            raise PlannerError(f"{where}[optimizer] early_step_in_backward = {_short(early)} is not true or false",
                               "torchtitan's early_step_in_backward is a boolean")
        if early:
            job["early_step_in_backward"] = True
            assumed.append(listed("assumed", "early_step_in_backward", True,
                                  "gradient clipping ([training] max_norm) sees no gradients, "
                                  "each freed in the backward (job_config.py @e347b1e5e l. 160-165: 'not compatible with "
                                  "gradients clipping')"))
    cpu_offload(where, tr, job, ignored)
    if hardware is not None:
        job["hardware"] = hardware
    # [checkpoint] enable (job_config.py @e347b1e5e l. 487-489, default false): budget's "if enabled" (budget.py [10])
    ck_on = data.get("checkpoint", {}).get("enable") if isinstance(data.get("checkpoint"), dict) else None
    return TrainerConfig(job=job, fmt="torchtitan", ignored=ignored, assumed=assumed, not_modelled=not_modelled, stated=stated,
                         checkpoint_enable=ck_on if isinstance(ck_on, bool) else None)


def _tokens(where: str, steps: int, gbs: int, seq: int, flags: dict, job: dict, assumed: list,
            cites: ReleaseCites = MAIN_CITES) -> None:
    """job tokens from [training] steps: torchtitan runs training.steps optimizer steps whatever the batch
    (train.py @e347b1e5e l. 714 should_continue_training: step < training.steps; config/job_config.py l. 267), so
    the training's length is its steps at the batch and sequence length the job runs: the command line's global
    batch (--global-batch, --global-batch-tokens, --step-batch-size-schedule: each step at its phase's batch,
    batch_ramp.iters_samples) and --seq-len over the file's (flags beat files; one rule for `explain CONFIG
    --global-batch N` and a `fit CONFIG` row, which holds a batch its explain command names: issue 22). A
    command-line --tokens replaces the figure (core.load_job names it)."""
    cli_seq, cli_gbs = flags.get("seq_len"), flags.get("global_batch")
    run_seq = cli_seq or seq
    seq_said = f"seq_len {run_seq}" + (" (the command line's)" if cli_seq is not None and cli_seq != seq else "")
    if flags.get("batch_size_schedule"):
        from ..batch_ramp import iters_samples

        phases = [(p["from_tokens"], p["global_batch"]) for p in flags["batch_size_schedule"]]
        job["tokens"] = float(iters_samples(phases, run_seq, steps) * run_seq)
        said = "the command line's --step-batch-size-schedule batches (each step at its phase's)"
    elif flags.get("global_batch_tokens") is not None:
        job["tokens"] = float(steps * flags["global_batch_tokens"])
        said, seq_said = f"the command line's global batch {flags['global_batch_tokens']:.6g} tokens", ""
    else:
        run_gbs = cli_gbs or gbs
        job["tokens"] = float(steps * run_gbs * run_seq)
        said = f"global batch {run_gbs}" + (" (the command line's)" if cli_gbs is not None and cli_gbs != gbs else "")
    assumed.append(listed("assumed", "tokens", job["tokens"], f"steps {steps} x {said}" + (f" x {seq_said}" if seq_said
                                                                                        else "")
                          + (f": torchtitan runs training.steps steps at the batch given ({cites.steps})"
                             if said.endswith("'s)") or "command line" in said or "command line" in seq_said else ""),
                          show=f"{job['tokens']:.6g}"))


def _dp_of_replicate(where: str, dp: int, rep: int, cites) -> None:
    """Refuse a command-line --dp that the file's data_parallel_replicate_degree does not divide (torchtitan's
    data-parallel degree is replicate x shard: cites.world)."""
    if dp % rep:
        raise PlannerError(
            f"{where}--dp {dp} is not a multiple of the file's [parallelism] data_parallel_replicate_degree {rep} "
            "(torchtitan's data-parallel degree is data_parallel_replicate_degree x data_parallel_shard_degree: "
            f"{cites.world})",
            f"give --dp a multiple of {rep}, or change the file's data_parallel_replicate_degree")


def _leftover_shard_at_dp(where: str, rep: int, inner: int, run_degs: tuple, dp: int, gpus: Optional[int],
                          assumed: list, cites: ReleaseCites = MAIN_CITES) -> tuple[int, int]:
    """(dp_shard, GPU count) of a file whose data_parallel_shard_degree is -1 (the default: the leftover GPUs, world /
    (replicate x cp x tp x pp), distributed/parallel_dims.py @e347b1e5e l. 48-51; release/0.3 @4f9e9a47d l. 182-183)
    under the command line's --dp D (issue 22, "flags beat files"): the data-parallel degree is replicate x shard
    (l. 53-56), so dp_shard = D / the file's data_parallel_replicate_degree, as torchtitan run with
    --parallelism.data_parallel_shard_degree D/replicate over the file (an assumed line; D not a multiple of the
    replicate degree refused). Without --gpus the GPU count is the degrees' product at it (the world torchtitan's
    assertion then needs); with --gpus G the product must be G, as torchtitan asserts replicate x shard x cp x tp x pp
    == world (l. 53-56): otherwise refused, naming the shard degree -1 would take (G / the inner degrees), so the
    command line's dp is never dropped for the file's leftover."""
    rtp, rpp, rcp = run_degs
    _dp_of_replicate(where, dp, rep, cites)
    shard = dp // rep
    run = inner * shard
    if gpus is not None and gpus != run:
        left = (f"; -1 would take {gpus // inner}, dp {rep * (gpus // inner)}" if gpus % inner == 0 else
                f"; {gpus} is not a multiple of replicate x tp x pp x cp = {inner} either")
        raise PlannerError(
            f"{where}--dp {dp} over the file's data_parallel_shard_degree = -1 is replicate {rep} x shard {shard} x tp "
            f"{rtp} x pp {rpp} x cp {rcp} = {run} GPUs, but --gpus {gpus}{left} (torchtitan asserts the degrees' product "
            f"is the world size: {cites.world})",
            f"leave --dp out (the file's -1 takes the leftover GPUs), or give --gpus {run}")
    assumed.append(listed("assumed", "data_parallel_shard_degree", shard, f"the command line's dp {dp} / the file's "
                   f"data_parallel_replicate_degree {rep} replaces the file's -1 (the leftover GPUs; flags beat files)"))
    if gpus is None:
        gpus = run
        assumed.append(listed("assumed", "gpus", gpus,
                              f"replicate {rep} x shard {shard} x tp {rtp} x pp {rpp} x cp {rcp}, the degrees' "
                              "product at the command line's dp (torchtitan's world size, parallel_dims.py l. 53-56)"))
    return shard, gpus


def _explicit_shard(where: str, shard: int, rep: int, file_degs: tuple, run_degs: tuple, said: str,
                    gpus: Optional[int], dp: Optional[int], assumed: list,
                    cites: ReleaseCites = MAIN_CITES) -> tuple[int, int]:
    """(dp_shard, GPU count) of a file that states data_parallel_shard_degree N (not -1) under the command line's
    degrees (issue 22, "flags beat files"). torchtitan keeps a stated degree as it is and asserts replicate x shard x
    cp x tp x pp == the world size (distributed/parallel_dims.py @e347b1e5e l. 48-56; release/0.3 @4f9e9a47d
    l. 170-189): only -1 is worked out from the mesh (l. 49-51). The GPU count is --gpus, else the file's degrees'
    product (the one count the file states).
      --dp D: the command line's data-parallel degree, replicate x shard (l. 53): dp_shard = D / the file's
          data_parallel_replicate_degree, which replaces N (an assumed line; D not a multiple of the replicate
          degree is refused), and without --gpus the GPU count is the degrees' product at it;
      --tp / --pp / --cp (no --dp) whose product with replicate x N is not the GPU count: refused (exit 2), as
          torchtitan run with those options over the file refuses to start, naming the file's key and the shard
          degree that fills the GPUs (or -1, which works it out), --dp, or the GPU count that keeps N."""
    from . import resolve_gpus

    ftp, fpp, fcp = file_degs
    rtp, rpp, rcp = run_degs
    inner = rep * rtp * rpp * rcp
    if dp is not None:
        _dp_of_replicate(where, dp, rep, cites)
        if dp // rep != shard:
            assumed.append(listed("assumed", "data_parallel_shard_degree", dp // rep,
                                  f"the command line's dp {dp} / the file's "
                                  f"data_parallel_replicate_degree {rep} replaces the file's {shard} (flags beat files)"))
        file_gpus = rep * shard * ftp * fpp * fcp
        shard = dp // rep
        if gpus is None:
            gpus = inner * shard
            if gpus != file_gpus:
                assumed.append(listed("assumed", "gpus", gpus,
                                      f"replicate {rep} x shard {shard} x tp {rtp} x pp {rpp} x cp {rcp}, the "
                                      "degrees' product at the command line's dp (torchtitan's world size, parallel_dims.py "
                                      "l. 53-56)"))
        return shard, gpus
    run = inner * shard
    if run_degs == file_degs:
        return shard, resolve_gpus(where, run, "[parallelism] replicate x shard x tp x pp x cp", gpus)
    given = gpus is not None
    gpus = gpus if given else rep * shard * ftp * fpp * fcp
    if run != gpus:
        fill = (f"set data_parallel_shard_degree = {gpus // inner} (or -1: torchtitan works it out from the GPUs), "
                f"or give --dp {rep * (gpus // inner)}, or "
                if gpus % inner == 0 else "")
        raise PlannerError(
            f"{where}[parallelism] data_parallel_shard_degree = {shard} at {said} (the command line's) is replicate "
            f"{rep} x shard {shard} x tp {rtp} x pp {rpp} x cp {rcp} = {run} GPUs, but the job runs {gpus} ("
            + ("--gpus" if given else "the file's degrees' product") + "): torchtitan keeps a stated shard degree and "
            f"asserts the product is the world size ({cites.world})",
            f"{fill}--gpus {run} to keep data_parallel_shard_degree {shard}")
    return shard, gpus


def cpu_offload(where: str, tr: dict, job: dict, ignored: list) -> None:
    """[training] enable_cpu_offload (job_config.py @e347b1e5e l. 270-273): under FSDP / HSDP, FSDP2's CPUOffloadPolicy
    (models/llama3/infra/parallelize.py l. 137, 315-317): the job's offload_optimizer and offload_param cpu
    (planner/offload.py); without FSDP torchtitan applies no policy (l. 125-147): listed as ignored."""
    on = tr.get("enable_cpu_offload") if isinstance(tr, dict) else None
    if on is None:
        return
    if not isinstance(on, bool):
        raise PlannerError(f"{where}[training] enable_cpu_offload = {_short(on)} is not true or false",
                           "torchtitan's enable_cpu_offload is a boolean")
    if on and job.get("sharding") in ("fsdp", "hsdp"):
        job.update(offload_optimizer="cpu", offload_param="cpu")
    elif on:
        ignored.append(listed("ignored", "training.enable_cpu_offload", on, "applied with FSDP only, apply_fsdp's "
                              "offload_policy: no effect without a shard degree"))


def _fqn_stages(where: str, fqns, lps, pp: int, L: int, wf: int, wl: int, at_pp: str = "") -> int:
    """vpp from [parallelism] module_fqns_per_model_part (one list of module names per stage;
    pipeline_parallel.py @e347b1e5e pipeline_module_split: stages = its length, a multiple of pp),
    which must be torchtitan's generated placement for that many stages (fqns_per_model_part):
    another placement is not what the planner prices."""
    if lps is not None:
        raise PlannerError(f"{where}[parallelism] module_fqns_per_model_part and pipeline_parallel_layers_per_stage both "
                           "given", "give one of them: the module lists place the stages themselves")
    if not isinstance(fqns, list) or not fqns or not all(isinstance(x, list) and all(isinstance(n, str) for n in x)
                                                         for x in fqns):
        raise PlannerError(f"{where}[parallelism] module_fqns_per_model_part = {_short(fqns)} is not a list of lists of "
                           "module names", "write one list of module names per pipeline stage")
    if len(fqns) % pp:
        raise PlannerError(f"{where}[parallelism] module_fqns_per_model_part has {len(fqns)} stages, not a multiple of "
                           f"pipeline_parallel_degree {pp}{at_pp}", "give pp x vpp stage lists (pipeline_module_split asserts it)"
                           + (", or give --vpp (the command line's stages per rank)" if at_pp else ""))
    if fqns != fqns_per_model_part(len(fqns), L, wf, wl):
        raise PlannerError(f"{where}[parallelism] module_fqns_per_model_part: a placement other than torchtitan's generated "
                           f"one for {len(fqns)} stages and end weights {wf}, {wl} is not modelled",
                           "leave the stage lists to torchtitan (pipeline_parallel_layers_per_stage or its default)")
    return len(fqns) // pp


def _comm_backend(where: str, par: dict, job: dict, assumed: list, ignored: list) -> None:
    """[parallelism] expert_parallel_comm_backend -> moe_dispatcher (COMM_BACKENDS, [7]) for an MoE
    model; torchtitan's default "standard" where the key is absent; no effect on a dense model."""
    from ..catalog import load_model

    v = par.get("expert_parallel_comm_backend", "standard")
    if v not in COMM_BACKENDS:
        raise PlannerError(f"{where}[parallelism] expert_parallel_comm_backend {_short(v)} is not one torchtitan accepts",
                           f"valid: {', '.join(COMM_BACKENDS)} (torchtitan/config/job_config.py @e347b1e5e l. 474)")
    if load_model(job["model"]).moe is None:
        if "expert_parallel_comm_backend" in par:
            ignored.append(listed("ignored", "parallelism.expert_parallel_comm_backend", v,
                                  "no effect on a dense model"))
        return
    job["moe_dispatcher"] = COMM_BACKENDS[v]
    if "expert_parallel_comm_backend" not in par:
        assumed.append(listed("assumed", "moe_dispatcher", "alltoall",
                              "expert_parallel_comm_backend defaults to \"standard\" (torch all-to-all)"))


def _flatten(body: dict, prefix: str = ""):
    for k, v in body.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


# torchtitan @e347b1e5e's grouped-GEMM converters of the routed experts (step.py [16]; docs/torchtitan_grouped_mm.md):
# the registered names (components/quantization/float8.py l. 239, mx.py l. 172) and their tables' keys
# (config/job_config.py Float8GroupedMM l. 756-764: fqns; MXGroupedMM l. 794-811: recipe_name "mxfp8", fqns)
GROUPED_MM_CONVERTERS = ("quantize.grouped_mm.float8", "quantize.grouped_mm.mx")
GROUPED_MM_KEYS = {"float8": ("fqns",), "mx": ("recipe_name", "fqns")}
# the routed experts' module path in torchtitan's MoE models @e347b1e5e (models/moe/moe.py MoE.experts, under each
# TransformerBlock's moe: layers.<i>.moe.experts); a converter's fqns entry converts them where it is a substring
# of it (float8.py moe_module_filter_fn l. 221-225: `target_fqn in cur_fqn`)
EXPERTS_FQN = "moe.experts"


def _pop_grouped_mm(where: str, data: dict) -> dict:
    """[quantize.grouped_mm] taken out of the file (its tables read by _grouped_experts), each a table."""
    quant = data.get("quantize")
    if not isinstance(quant, dict) or "grouped_mm" not in quant:
        return {}
    g = quant["grouped_mm"]
    if not isinstance(g, dict) or any(not isinstance(v, dict) for v in g.values()):
        raise PlannerError(f"{where}quantize.grouped_mm = {_short(g)} must hold tables",
                           "write [quantize.grouped_mm.float8] with fqns = [\"experts\"]")
    rest = {k: v for k, v in quant.items() if k != "grouped_mm"}
    if rest:
        data["quantize"] = rest
    else:
        del data["quantize"]
    return g


def _grouped_experts(where, converters, grouped: dict, job, assumed, ignored, not_modelled) -> None:
    """[model] converters "quantize.grouped_mm.float8" / "quantize.grouped_mm.mx" with their tables -> the
    job's fp8_grouped_experts (step.py [16]). torchtitan @e347b1e5e asserts one quantization type for every
    quantize.* converter (components/quantization/__init__.py QuantizationConverter._validate l. 37-55): the
    grouped converter's type must be the linear one's; one without a linear converter (torchtitan runs it:
    bf16 linears, fp8 experts) is refused too, a plan the planner does not price. fqns (a list or a comma-separated string)
    converts the experts where an entry is a substring of their module path (EXPERTS_FQN); none does: not
    converted. Absent: the stack's rule (torchtitan: bf16 experts), which resolve lists as assumed."""
    names = [c for c in converters if c in GROUPED_MM_CONVERTERS]
    for kind, body in grouped.items():
        if f"quantize.grouped_mm.{kind}" not in names:
            ignored.append(noted("ignored", f"[quantize.grouped_mm.{kind}]",
                                 f"no converter \"quantize.grouped_mm.{kind}\" "
                                 "in [model] converters: torchtitan reads the table only for it"))
    if not names:
        return
    if len(names) > 1:
        raise PlannerError(f"{where}[model] converters name {' and '.join(names)}: torchtitan runs one quantization "
                           "type per job (components/quantization/__init__.py @e347b1e5e l. 37-55)", "keep one")
    kind = names[0].split(".")[-1]
    linear = "mx" if job.get("fp8_recipe") == "mxfp8" else "float8"
    if job.get("precision") != "fp8" or linear != kind:
        have = f"quantize.linear.{linear}" if job.get("precision") == "fp8" else "no linear converter"
        raise PlannerError(f"{where}converter {names[0]} with {have}: torchtitan asserts one quantization type for "
                           "every quantize.* converter (components/quantization/__init__.py @e347b1e5e l. 37-55), and "
                           "the planner prices the experts' grouped GEMMs in fp8 only beside fp8 linears",
                           f"add quantize.linear.{kind} to [model] converters, or remove {names[0]}")
    body = grouped.get(kind, {})
    for k, v in body.items():
        if k not in GROUPED_MM_KEYS[kind]:
            not_modelled.append(listed("not_modelled", f"quantize.grouped_mm.{kind}.{k}", v,
                                       "not priced: it may change memory "
                                       "or time"))
    if kind == "mx" and body.get("recipe_name", "mxfp8") != "mxfp8":
        raise PlannerError(f"{where}[quantize.grouped_mm.mx] recipe_name {body['recipe_name']!r}: torchtitan's only "
                           "one is \"mxfp8\" (job_config.py @e347b1e5e MXGroupedMM l. 794-801)", "write recipe_name = \"mxfp8\"")
    fqns = body.get("fqns", [])
    fqns = [f.strip() for f in fqns.split(",") if f.strip()] if isinstance(fqns, str) else fqns
    if not isinstance(fqns, list) or not all(isinstance(f, str) for f in fqns):
        raise PlannerError(f"{where}[quantize.grouped_mm.{kind}] fqns = {_short(body.get('fqns'))} is not a list of "
                           "strings", "write fqns = [\"experts\"]")
    on = [f for f in fqns if f and f in EXPERTS_FQN]
    off = [f for f in fqns if f not in on]
    if off:
        not_modelled.append(listed("not_modelled", f"quantize.grouped_mm.{kind}.fqns", off,
                                   "names no routed-expert module "
                                   f"path '{EXPERTS_FQN}': not priced"))
    job["fp8_grouped_experts"] = bool(on)
    if not on:
        assumed.append(listed("assumed", "fp8_grouped_experts", False,
                              f"[quantize.grouped_mm.{kind}] fqns names no routed experts "
                              "(torchtitan's default fqns [] converts none)"))


# every name torchtitan's TOML-configured releases register as a model converter (git log -G
# 'register_model_converter\(' to @9810191bb~1, the last TOML layout): "float8" (57387af0e, 2025-02-15) and "mx"
# (fb17e251c, 2025-05-14), then quantize.linear.* / quantize.grouped_mm.* (8a2686c4a, 2025-09-30); between
# 5b5d46856 (2025-09-26) and 8a2686c4a quantize.dense.* / quantize.moe.*. None is a precision the planner does not
# price: an unregistered name (an "nvfp4", which torchtitan's TOML era never had) is an error, not bf16 (issue 23).
KNOWN_CONVERTERS = ("float8", "mx", "quantize.linear.float8", "quantize.linear.mx") + GROUPED_MM_CONVERTERS
INTERIM_CONVERTERS = {"quantize.dense.float8": "quantize.linear.float8", "quantize.dense.mx": "quantize.linear.mx",
                      "quantize.moe.float8": "quantize.grouped_mm.float8", "quantize.moe.mx": "quantize.grouped_mm.mx"}


def _precision_from_converters(where, converters, sec, job, assumed, ignored):
    """[model] converters: "float8" -> fp8 with [float8] recipe_name (tensorwise when unset,
    torchao's default); "mx" -> fp8 recipe mxfp8 ([mx] recipe_name mxfp8*, torchtitan
    MXLinear @e347b1e5e); both at once is an error (one converter per Linear)."""
    fp8 = any(c in ("float8", "quantize.linear.float8") for c in converters)
    mx = any(c in ("mx", "quantize.linear.mx") for c in converters)
    for c in converters:
        if c in INTERIM_CONVERTERS:
            raise PlannerError(f"{where}[model] converters {c!r} is torchtitan's name of 2025-09-26 to 2025-09-30 "
                               f"(5b5d46856, renamed by 8a2686c4a), whose [quantize.dense] / [quantize.moe] tables "
                               f"the reader does not read: not priced as bf16",
                               f"write {INTERIM_CONVERTERS[c]!r} with its table (v0.2.0 on), or the v0.1.0 layout")
        if c not in KNOWN_CONVERTERS:
            raise PlannerError(f"{where}[model] converters {c!r} is not a converter torchtitan registers (any other "
                               f"name is a KeyError at start-up, protocols/model_converter.py l. 62 @e347b1e5e)",
                               f"valid: {', '.join(KNOWN_CONVERTERS)}")
    if fp8 and mx:
        raise PlannerError(f"{where}[model] converters name both float8 and mx", "keep one: each Linear is converted once")
    if fp8:
        job["precision"] = "fp8"
        recipe = sec["float8"].get("recipe_name")
        job["fp8_recipe"] = recipe or "tensorwise"
        if recipe is None:
            assumed.append(listed("assumed", "fp8_recipe", "tensorwise",
                                  "float8 recipe_name unset (torchao's default dynamic tensorwise scaling)"))
    elif mx:
        recipe = sec["mx"].get("recipe_name", MX_DEFAULT_RECIPE)
        if not str(recipe).startswith("mxfp8"):
            raise PlannerError(f"{where}[mx] recipe_name {recipe!r} is not modelled",
                               "valid: mxfp8, mxfp8_cublas, mxfp8_cutlass, mxfp8_rceil (every mxfp8 recipe: 1x32 e8m0 blocks)")
        job["precision"], job["fp8_recipe"] = "fp8", "mxfp8"
        if "recipe_name" not in sec["mx"]:
            assumed.append(listed("assumed", "fp8_recipe", "mxfp8",
                                  f"[mx] recipe_name unset ({MX_DEFAULT_RECIPE}, torchtitan's default)"))
    for conv, on in (("float8", fp8), ("mx", mx)):
        if not on and "recipe_name" in sec[conv]:
            ignored.append(listed("ignored", f"{conv}.recipe_name", sec[conv]["recipe_name"], f"no {conv} converter"))


def _float8_fsdp(f8: dict, job: dict, shard: int, assumed: list, ignored: list, not_modelled: list) -> None:
    """[float8] enable_fsdp_float8_all_gather / precompute_float8_dynamic_scale_for_fsdp, as torchtitan
    @9810191bb~1 (the last TOML layout) reads them, torchtitan/components/quantization/float8.py l. 62-99:
    the fp8 all-gather only with recipe_name unset (tensorwise; torchtitan asserts it off with a recipe_name)
    and dp_shard > 1; the precomputed scales only with the fp8 all-gather. Read into the job's
    fp8_allgather (step.py [15]: the converted Linears' weights at 1 B); unset: false, torchtitan's
    default (job_config.py @e347b1e5e l. 732), listed as assumed; the precomputed scales into the job's
    fp8_precompute_scale (step.py [39]; unset: false, the job's default). Not the job's fp8_param_gather
    (Megatron's fp8 parameters under the distributed optimizer, a different mechanism)."""
    key, pre = "enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp"
    tensorwise = job.get("precision") == "fp8" and job.get("fp8_recipe") == "tensorwise"
    if f8.get(key) is True and f8.get("recipe_name") is not None and job.get("precision") == "fp8":
        raise PlannerError(f"[float8] enable_fsdp_float8_all_gather = true with recipe_name {_short(f8['recipe_name'])}: "
                           "torchtitan refuses it (float8.py @9810191bb~1 l. 65-69)",
                           "remove recipe_name (tensorwise, the fp8 all-gather) or set enable_fsdp_float8_all_gather = false")
    fsdp = shard > 1 and tensorwise and f8.get("recipe_name") is None
    if fsdp and key not in f8:  # torchtitan's default: false (job_config.py @e347b1e5e l. 732)
        job["fp8_allgather"] = False
        assumed.append(listed("assumed", "fp8_allgather", False,
                              f"float8.{key} unset (torchtitan's default false, job_config.py "
                              "@e347b1e5e l. 732: bf16 weight all-gathers, 2 B per parameter)"))
    for k in (key, pre):
        if k not in f8:
            continue
        v, name = f8[k], f"float8.{k}"
        if not isinstance(v, bool):
            not_modelled.append(listed("not_modelled", name, v,
                                       "not a boolean: not priced, it may change memory or time"))
        elif not fsdp:
            ignored.append(listed("ignored", name, v, "read by torchtitan only with the float8 converter, recipe_name "
                                  "unset and data_parallel_shard_degree > 1, float8.py l. 62-99: none here"))
        elif k == key:
            job["fp8_allgather"] = v
        elif not f8.get(key) is True:
            ignored.append(listed("ignored", name, v,
                                  "read only with enable_fsdp_float8_all_gather, float8.py l. 95-99"))
        else:  # step.py [39]: one amax all-reduce for every weight after the optimizer step, or one a weight a gather
            job["fp8_precompute_scale"] = v


def _output_filter(conv: str, f: dict, job: dict, assumed: list, ignored: list, not_modelled: list) -> None:
    """[float8] / [mx] filter_fqns: whether the output layer (fqn "output" in the TOML-era models)
    runs in fp8, the job's fp8_output_layer. torchtitan skips every Linear whose fqn contains one of
    the list's strings (components/quantization/utils.py @e347b1e5e module_filter_fn l. 24-25:
    `filter_fqn in fqn`). Defaults (job_config.py @e347b1e5e): Float8Linear.filter_fqns [] (l. 741,
    since a6524d8a0, 2025-04-07, PR #1063; before it the converter always kept "output" bf16, float8.py
    @0011fb90 l. 100): the output layer converted; MXLinear.filter_fqns ["output"]: kept bf16. Any
    filter of another Linear is not modelled (the planner prices every other Linear in fp8)."""
    if conv == "float8":
        on = job.get("precision") == "fp8" and job.get("fp8_recipe") != "mxfp8"
    else:
        on = job.get("fp8_recipe") == "mxfp8"
    key = f"{conv}.filter_fqns"
    if "filter_fqns" not in f:
        if on and conv == "float8":
            job["fp8_output_layer"] = True
            job["filter_fqns"] = []
            assumed.append(listed("assumed", "fp8_output_layer", True,
                                  "[float8] filter_fqns unset (torchtitan's default [] since a6524d8a0, "
                                  "2025-04-07: the output layer converted to fp8 too; before it torchtitan kept it bf16, and "
                                  "its train_configs set filter_fqns = [\"output\"]); filter_fqns=[]: the MoE router gate "
                                  "converted too (step.py [18])"))
        elif on:  # MXLinear.filter_fqns default ["output"] (job_config.py @e347b1e5e l. 784): the router gate converted
            job["filter_fqns"] = ["output"]
            assumed.append(listed("assumed", "filter_fqns", ["output"], "[mx] filter_fqns unset (torchtitan's MXLinear "
                                  "default): the MoE router gate converted (step.py [18])", show="['output']"))
        return
    v = f["filter_fqns"]
    fq = [c.strip() for c in v.split(",") if c.strip()] if isinstance(v, str) else v
    if not on:
        ignored.append(listed("ignored", key, v, f"no {conv} converter"))
        return
    out_bf16 = any(isinstance(c, str) and c in "output" for c in fq)
    if not out_bf16:
        job["fp8_output_layer"] = True
    job["filter_fqns"] = [c for c in fq if isinstance(c, str)]  # the Linears kept bf16 (step.py [18])
    others = [c for c in fq if not (isinstance(c, str) and c in "output")]
    what = "the output layer kept in bf16" if out_bf16 else "the output layer in fp8 too (fp8_output_layer)"
    per_layer = [c for c in others if not isinstance(c, str) or "layers" in c]
    if per_layer:
        not_modelled.append(listed("not_modelled", key, v, f"{what}; {', '.join(map(str, per_layer))}: a filter of "
                                   "some layers by index, not priced (step.py [18] reads a block's module names)"))
    else:
        # read and priced (the job's filter_fqns / fp8_output_layer): said as assumed (before 2026-12-07 listed as
        # ignored, whose line said it was priced: tests/ignored_keys.py)
        assumed.append(listed("assumed", key, v, f"{what}, the other Linears by filter_fqns: priced, step.py [18]"))