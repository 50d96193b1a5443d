"""Write a resolved plan (explain's / fit's JSON `plan`) in a trainer's own format: a
torchtitan TOML job file, a Megatron-LM launch script, a DeepSpeed JSON config, a
Megatron-DeepSpeed launch script (the fork's flags and the DeepSpeed JSON in a heredoc).

Each file holds every setting of the plan the format can spell, and nothing the plan does
not fix (where the trainer needs a value the plan leaves open, such as Megatron's
--fp8-format, the choice is reported in `notes`, which the CLI prints on stderr, as is what
the file leaves to the model code, such as recompute in a DeepSpeed JSON). Issue 22: every
setting the plan was priced with is written in the trainer's spelling (the model file it was
priced with, `plan["model_file"]`; the sharding mode's flags from stack_db runs.sharding, MLA,
shared experts and dense layers, the capacity factor, the pipeline split as the trainer
places it, expert TP), or export refuses (PlannerError, exit 2) naming what the format cannot
say: a plan priced on another stack than the format's (its modes, kernels and start-up rules
are not the file's; except a stack whose export_format is the format, which extends the format's
stack: megatron-bridge as Megatron-LM flags where Megatron-LM builds every layer, refused naming
the layers it does not, Llama 4's chunked attention: _written_as), CP / TP / PP / EP in a DeepSpeed JSON, a state layout the trainer does not
keep. The plan must pass the stack's start-up rules (planner/startup.py) first. Reading the
file back (planner/trainers, the same option names, cited in torchtitan.py, megatron.py and
deepspeed.py) gives the same plan: `plan_signature` is what a read-back must reproduce
(tests/test_trainers.py, tests/test_runnable_plans.py).

`export_plan(plan, fmt)` -> (text, notes). Units: the plan's (sequences, tokens, counts).
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple, Optional

from ..batch_ramp import to_megatron
from ..catalog import load_hardware, load_model
from ..errors import PlannerError
from ..schema import split_loss_units
from . import FORMATS, FORMAT_STACKS, MEGATRON_LLAMA3_ROPE, MEGATRON_ROTARY_BASE, TORCHTITAN_LLAMA3_ROPE, rope_text
from . import megatron_fsdp_grad_flags, plan_bytes as _plan_bytes
# Megatron-LM @d98e8a64's hybrid stack (megatron_model.py [9]): the Mamba mixer settings no flag sets (mamba_mixer.py
# l. 174-194) and the stack spec pretrain_hybrid.py builds Transformer Engine layers from
from .megatron import nccl_env_of, nccl_exports
from .megatron_model import GDN_CHUNK, HYBRID_TE_SPEC, MAMBA_CHUNK, MAMBA_CONV_KERNEL
from .megatron_bridge import BRIDGE, COMM_OVERLAP_TARGET, COMMON, MP_FIELDS, MP_PRESETS, RECIPES, SCRIPT, UB_NOTE
from .megatron_bridge import recipe_for, BRIDGE_DETERMINISTIC_NCCL_ALGOS
from .megatron_bridge import FMT as BRIDGE_FMT, STACK as BRIDGE_STACK, _BF16 as BRIDGE_BF16
from .bridge_sharding import MFSDP_STRATEGY as BRIDGE_MFSDP_STRATEGY, SHARDING_MODES as BRIDGE_MODES
from .bridge_sharding import sharding_overrides as bridge_sharding_overrides
from .spelling import hydra_value

MIXED16 = {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}  # schema BYTES_PER_PARAM_PRESETS mixed16
_TT_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}


def export_plan(plan: dict, fmt: str) -> tuple[str, list[str]]:
    """The file text for `plan` in `fmt` ('torchtitan' | 'megatron' | 'deepspeed' | 'megatron-deepspeed') and the
    notes: what the format cannot express, and choices the plan did not fix."""
    if fmt not in FORMATS:
        raise PlannerError(f"--format {fmt!r} is not a trainer format", f"valid: {', '.join(FORMATS)}")
    notes: list[str] = []
    # torchtitan 0.3.0 (stack torchtitan-0.3) is written as its launch line (torchtitan03.export_launch)
    launch = fmt == "torchtitan" and plan.get("stack") == FORMAT_STACKS["torchtitan-0.3"]
    # the older Megatron-DeepSpeed forks (their stacks) are written in their own flags (_megatron_deepspeed, MDS_FORKS)
    fork = fmt == "megatron-deepspeed" and plan.get("stack") in MDS_FORKS
    written_as = not launch and not fork and _written_as(plan, fmt, notes)
    if plan.get("stack") != FORMAT_STACKS[fmt] and not launch and not fork and not written_as:
        _other_release(plan.get("stack"), fmt, plan)
        raise PlannerError(f"export {fmt}: the plan was priced on stack {plan.get('stack')}, not {FORMAT_STACKS[fmt]}, "
                           f"whose modes and rules the file runs with",
                           f"price it on that stack first (--stack {FORMAT_STACKS[fmt]}), then export")
    _check_runnable(plan)
    _mtp_shape(plan, fmt)
    if any(stage_ends(plan)) and fmt not in ("megatron", "megatron-bridge"):
        raise _refuse(fmt, "first_stage_layers / last_stage_layers: Megatron-LM's --decoder-first/last-pipeline-num-layers "
                           "(layers on the first / last stage, the rest equal over the middle ones); the file has no such "
                           "setting the planner writes (torchtitan @e347b1e5e's pipeline_parallel_first/last_stage_less_layers "
                           "weigh the embedding and the output as layers of its front-loaded split, config/job_config.py "
                           "l. 377-387, distributed/pipeline_parallel.py l. 59-112: no count of a stage's layers; DeepSpeed's "
                           "PipelineModule places the split itself)",
                      "export it --format megatron (or megatron-bridge: model.num_layers_in_first/last_pipeline_stage), "
                      "or price it without them")
    if plan.get("cp") == 1:  # a CP variant without CP: no run holds one, so no trainer's file reads back with it
        held = [f"{k} {plan[k]}" for k in ("cp_comm_type", "hierarchical_cp_sizes", "cp_rotate_method") if plan.get(k)]
        if held:
            raise _refuse(fmt, f"{', '.join(held)} at cp 1: without context parallelism no variant runs (Megatron-Core "
                               "hands the attention none, torchtitan no ring: planner/cp_comm_type.py, cp_rotate.py), "
                               "and a plan at cp 1 lists none (plan.plan_dict); each trainer's reader ignores it there",
                          "export the plan as explain lists it (without the variant at cp 1)")
    if plan.get("dummy_wgrads") is not None:  # a code version's dummy weight gradients (memory.py [dw])
        raise _refuse(fmt, f"dummy_wgrads {plan['dummy_wgrads']}: what the linears return as weight gradients is the "
                           "code version's, not a setting the file can hold", "price it without dummy_wgrads (the stack's own)")
    if plan.get("rope_cache") is not None:  # a code version's buffers (memory.py [tt9]), no setting of any format
        raise _refuse(fmt, f"rope_cache {plan['rope_cache']}: which rotary tables a run keeps is its code version's, "
                           "not a setting the file can hold", "price it without rope_cache (the stack's own)")
    if plan.get("loss_logit_chunks") is not None:  # a code version's loss function (memory.py [ck]), no setting of any format
        raise _refuse(fmt, f"loss_logit_chunks {plan['loss_logit_chunks']}: the chunked cross-entropy of torchtitan PR #996 "
                           "is a code version's loss function, not a setting the file can hold",
                      "price it without loss_logit_chunks (the stack's loss)")
    if plan.get("dp_param_gather_overlap") is False and fmt not in ("megatron", "megatron-bridge"):
        # the optimizer's all-gather exposed after the step (step.py [40]): Megatron's flag, no other format's setting
        raise _refuse(fmt, "dp_param_gather_overlap false: the parameter all-gather's overlap apart from the gradient "
                           "reduction's is Megatron's --overlap-param-gather (Megatron-Bridge ddp.overlap_param_gather); "
                           "the format has no such setting the planner writes",
                      "export megatron or megatron-bridge, or price it without dp_param_gather_overlap")
    if plan.get("fsdp_root_unit"):  # a code version's FSDP wrapping (memory.py [tt10]), no setting of any format
        raise _refuse(fmt, "fsdp_root_unit: which units FSDP keeps unsharded is the code version's (torchtitan before "
                           "#1094), not a setting the file can hold", "price it without fsdp_root_unit (the stack's own)")
    # a batch ramp: Megatron-LM's --step-batch-size-schedule, every Megatron-DeepSpeed fork's --rampup-batch-size
    # (_fork_rampup: the 2021 and BigScience forks and microsoft's 2022 one); planner/batch_ramp.py
    if plan.get("batch_size_schedule") and fmt not in ("megatron", "megatron-deepspeed"):
        raise _refuse(fmt, "batch_size_schedule: the format has no batch-size ramp (Megatron-LM's "
                           "--step-batch-size-schedule)", "price it without the schedule, or export megatron")
    if plan.get("cublas_workspace_config") and fmt != "megatron":  # an environment variable (memory.py [ws]): the
        # Megatron launch script exports it (_megatron; the reader's megatron._exported_cublas), no other format holds it
        notes.append(f"cublas_workspace_config {plan['cublas_workspace_config']}: PyTorch reads it from the environment; "
                     f"launch with CUBLAS_WORKSPACE_CONFIG={plan['cublas_workspace_config']} (the file cannot hold it)")
    if fmt not in ("megatron", "megatron-deepspeed", "megatron-bridge") and not launch:  # the environment: the launch
        # scripts and torchtitan 0.3.0's launch line export it (megatron.nccl_exports, read back by megatron.read_nccl_*);
        # no other format holds it
        for field, var, value in nccl_env_of(plan):
            notes.append(f"{field} {value}: NCCL reads it from the environment; launch with {var}={value} (the file "
                         "cannot hold it)")
    if plan.get("trainer_date"):  # the trainer commit's date (plan._deterministic_switches): the file is the stack's
        notes.append(f"trainer_date {plan['trainer_date']}: the file is written for the stack's own trainer commit, "
                     "whose start-up checks it passes (the job's older commit is not a setting the file can hold)")
    if plan.get("te_version"):  # the installed Transformer Engine (planner/te_version.py), no setting of any format
        notes.append(f"te_version {plan['te_version']}: the Transformer Engine release the run installs (its TP-overlap "
                     "userbuffers and workspaces priced by release); the file cannot hold it")
    from ..plan import HOST_FIELDS

    for f, hw_field in HOST_FIELDS:  # the job's host (plan._apply_host), a fact of the servers, no setting of any format
        if plan.get(f) is not None:
            notes.append(f"{f} {plan[f]:g}: the servers' host (priced in place of hardware {hw_field}); the file cannot "
                         "hold it")
    if plan.get("optimizer", "adam") != "adam" and fmt not in ("megatron", BRIDGE_FMT):
        # Megatron-LM's --optimizer muon and Megatron-Bridge's optimizer.optimizer muon / dist_muon only
        raise _refuse(fmt, f"optimizer {plan['optimizer']}: the planner writes Megatron-LM's --optimizer muon and "
                           "Megatron-Bridge's optimizer.optimizer only (stack_db megatron, megatron-bridge runs.optimizers)",
                      "export megatron or megatron-bridge, or price it with optimizer adam")
    if plan.get("fp16") and fmt == "torchtitan":  # priced as bf16; the megatron (--fp16) and deepspeed (fp16.enabled) writers spell it
        raise _refuse(fmt, "fp16: the planner writes this format's bf16 settings only (Megatron-LM's --fp16 and "
                           "DeepSpeed's fp16.enabled are the fp16 spellings it writes)",
                      "price it without fp16, or export megatron or deepspeed")
    if launch:
        from .torchtitan03 import launch_flavor, launch_text

        picked: list = []
        # the chunked loss is every 0.3.0 config function's (torchtitan03.LOSS_CHUNKS), checked by launch_text; the
        # TOML's mapping refuses it (main's torchtitan has none); the token dispatcher is the config function's too
        # (model_registry's moe_comm_backend, matched by launch_text), not the TOML's expert_parallel_comm_backend
        toml = {k: v for k, v in plan.items() if k not in ("chunked_loss", "moe_hybridep_capacity_factor")}
        toml["moe_dispatcher"] = "alltoall" if plan.get("moe_dispatcher") == "hybridep" else plan.get("moe_dispatcher")
        sec = _torchtitan_sections(toml, notes, lambda p, m, n: launch_flavor(p, m, picked))
        return launch_text(plan, sec, picked, notes), notes
    text = {"torchtitan": _torchtitan, "megatron": _megatron, "deepspeed": _deepspeed,
            "megatron-deepspeed": _megatron_deepspeed, "megatron-bridge": _megatron_bridge}[fmt](plan, notes)
    return text, notes


# what drives a catalog trainer whose plans are written in another stack's files (export_format), in place of a file
# the planner writes, keyed by Stack.base (a user's file that extends the entry runs the same trainer); a stack
# whose base is absent here is said to have no config of its own written, nothing more. Megatron-Bridge
# @dc805f5cf: src/megatron/bridge/recipes/<family>/*.py, e.g. llama/llama3.py l. 225 llama3_8b_pretrain_config()
# -> ConfigContainer, overridden in Python (stack_db/megatron-bridge.yaml export_format).
OWN_DRIVERS = {"megatron-bridge": ("Megatron-Bridge's Python recipes and model providers (a recipe function returns its "
                                   "ConfigContainer, Megatron-Bridge @dc805f5cf src/megatron/bridge/recipes/)",
                                   "Python recipe")}


def _own_driver(stack, own) -> tuple[str, str]:
    """(the clause of _written_as's note and refusal that says what drives the stack instead of the file written,
    the hint's name for it): OWN_DRIVERS by Stack.base; a user's file that extends the format's own stack (own) runs
    that trainer, which reads the file; else no config of the stack's own is written."""
    if stack.base in OWN_DRIVERS:
        driver, thing = OWN_DRIVERS[stack.base]
        who = "it" if stack.base == stack.name else f"{stack.base}, which it extends,"
        return f"the planner writes no {stack.name} config: {who} is driven by {driver}, not a file the planner writes", thing
    if stack.base == own.name:
        return f"{stack.name} extends {own.name}, whose trainer reads the file", "trainer"
    return f"the planner writes no config of {stack.name}'s own trainer", "trainer"


def _written_as(plan: dict, fmt: str, notes: list[str]) -> bool:
    """Whether the plan's stack is written in `fmt`'s files (stack_db export_format: megatron-bridge as Megatron-LM
    flags, which drive the same Megatron-Core): True, with a note saying so, where the format's own stack builds every
    layer of the plan's model; a layer it does not build (STACK_LAYER_KIND on the format's stack: Llama 4's chunked
    attention, which Megatron-LM @d98e8a64 lacks) is refused, naming it, rather than written as a file the trainer
    would run as another model or reject. False for the format's own stack and for a stack without export_format."""
    from ..catalog import load_stack
    from ..startup import layer_gaps, layer_kind_detail

    name = plan.get("stack")
    if name == FORMAT_STACKS[fmt]:
        return False
    try:
        stack = load_stack(name)
    except PlannerError:
        return False
    if stack.export_format != fmt:
        return False
    own, model = load_stack(FORMAT_STACKS[fmt]), _model(plan)
    if layer_gaps(model, own):
        raise _refuse(fmt, f"the plan was priced on stack {stack.name}, whose layers the format's trainer (stack "
                           f"{own.name}, {own.version.split(';')[0]}) does not all build: "
                           f"{layer_kind_detail(model, own)}; {_own_driver(stack, own)[0]}",
                      f"train {model.name} with {stack.name}'s own {_own_driver(stack, own)[1]} at the layout the plan gives, or "
                      f"price a model {own.name} builds")
    inherits = stack.origin if stack.file is not None else f"stack_db {stack.name} extends {own.name}"
    notes.append(f"stack {stack.name}: written as stack {own.name}'s file ({own.version.split(';')[0]}), whose "
                 f"figures {stack.name} inherits ({inherits}) and whose code builds every "
                 f"layer of {model.name}; {_own_driver(stack, own)[0]}")
    return True


def _other_release(stack_name, fmt: str, plan: Optional[dict] = None) -> None:
    """Refuse a plan priced on another release of the format's trainer (a stack of the same start-up rule
    set, stack_db runs.startup_rules: torchtitan-0.3 beside torchtitan), naming the release the format is
    written for (the format's stack's `version`)."""
    from ..catalog import load_stack

    try:
        own, other = load_stack(FORMAT_STACKS[fmt]), load_stack(stack_name)
    except PlannerError:
        return
    if own.runs is None or other.runs is None or own.runs.startup_rules != other.runs.startup_rules:
        return
    if other.version == own.version and other.name not in MDS_FORKS:
        # the same release (a user's copy of the shipped file, say): what is missing is the file's export_format,
        # which says that its plans are written as the format's stack's file (_written_as); before 2026-12-07 this
        # was refused as "another release" of the trainer, which it is not
        where = other.origin if other.file is not None else f"stack {other.name}"
        raise PlannerError(f"export {fmt}: the plan was priced on stack {other.name} ({where}), which runs the release "
                           f"this format's files are written for ({own.version.split(';')[0]}) but is not the shipped "
                           f"stack {own.name} and gives no export_format: the planner writes {fmt} files for stack "
                           f"{own.name}'s plans and for a stack that says its plans are written as them",
                           f"add `export_format: {fmt}` to the stack file (its plans are then written as stack "
                           f"{own.name}'s file, a note saying so), or price it on --stack {own.name}, then export")
    raise PlannerError(f"export {fmt}: the plan was priced on stack {other.name} ({other.version.split(';')[0]}), another "
                       f"release of the trainer than the one this format's files are written for (stack {own.name}: "
                       f"{own.version.split(';')[0]}); the option names and what the release runs differ",
                       "export it as --format megatron-deepspeed (the fork's own launch script, its JSON inside), or "
                       f"price it on --stack {own.name}" if other.name in MDS_FORKS else
                       f"price it on --stack {own.name}, then export")


def _refuse(fmt: str, what: str, hint: str) -> PlannerError:
    return PlannerError(f"export {fmt}: {what}", hint)


def _model(plan: dict):
    """The model the plan was priced with: its file (plan model_file), else the catalog name."""
    src = plan.get("model_file") or plan["model"]
    try:
        return load_model(src)
    except PlannerError:
        return load_model(plan["model"])


def _mtp_shape(plan: dict, fmt: str) -> None:
    """Refuse a plan whose multi-token prediction modules only Megatron-LM's hybrid stack builds: a module of other
    layers than one of the last layer's kind (ModelSpec.mtp_layer_pattern) or one module run at every depth
    (mtp_repeated_layer), in any format but megatron's pretrain_hybrid.py ('/' parts, --mtp-use-repeated-layer:
    _hybrid_args); the repeated module also in pretrain_gpt.py (--mtp-use-repeated-layer, _megatron_args)."""
    model = _model(plan)
    if not _mtp(plan, model):
        return
    last = model.layer_pattern[(model.num_layers - 1) % len(model.layer_pattern)] if model.layer_pattern else None
    shaped = model.mtp_layer_pattern is not None and model.mtp_layer_pattern != [last]
    hybrid = fmt == "megatron" and _hybrid_blocks(model, fmt) is not None
    if (shaped and not hybrid) or (model.mtp_repeated_layer and fmt != "megatron"):
        what = (f"MTP modules of layers {model.mtp_layer_pattern}" if shaped and not hybrid else
                "one MTP module run at every depth (mtp_repeated_layer)")
        raise _refuse(fmt, f"model {model.name}: {what}, which only Megatron-LM's "
                           + ("hybrid stack builds ('/' parts of --hybrid-layer-pattern)" if shaped and not hybrid else
                              "--mtp-use-repeated-layer builds"),
                      "export it --format megatron, or price it without MTP (--mtp-layers 0)")


def _mtp(plan: dict, model) -> int:
    """The multi-token prediction modules priced: the plan's (job field mtp_layers), else the model's."""
    n = plan.get("mtp_layers")
    return int(model.mtp_layers or 0) if n is None else int(n)


def _auto_attention_kernel(plan: dict) -> str:
    """The kernel Megatron's --attention-backend auto runs on the plan's GPU (stack_db megatron
    attention_kernels, compute.py [7a])."""
    from ..catalog import load_stack
    from ..compute import attention_kernel

    return attention_kernel(load_stack("megatron"), load_hardware(plan.get("hardware_file") or plan["hardware"]))


def _plan_arrays(plan: dict):
    from ..comm import order_code
    from ..pipeline import SCHEDULE_CODES
    from ..plan import RECOMPUTE_CODES, SHARDING_CODES, PlanArrays

    return PlanArrays(tp=plan["tp"], cp=plan["cp"], pp=plan["pp"], vpp=plan["vpp"], dp=plan["dp"], mbs=plan["micro_batch"],
                      gbs=plan["global_batch"], seq=plan["seq_len"], sharding=SHARDING_CODES[plan["sharding"]],
                      shard=plan.get("shard_group") or plan["dp"], recompute=RECOMPUTE_CODES.get(plan.get("recompute"), 0),
                      sp=int(plan["sequence_parallel"]),
                      schedule=SCHEDULE_CODES[plan["schedule"]], precision=0, order=order_code(plan["rank_order"]),
                      split_emb=int(plan.get("account_for_embedding_in_pipeline_split", False)),
                      split_loss=split_loss_units(plan), ep=plan.get("ep", 1),
                      split_first=stage_ends(plan)[0], split_last=stage_ends(plan)[1],
                      etp=plan.get("etp") or plan["tp"],
                      smode=_mode_index(plan), tpo=int(plan.get("tp_comm_overlap", False)),
                      compile=int(plan.get("torch_compile", False)), mbg=plan.get("microbatch_group") or 0)


def _mode_index(plan: dict) -> int:
    from ..catalog import load_stack

    runs = load_stack(plan["stack"]).runs
    names = [m.name for m in runs.sharding] if runs is not None else []
    return names.index(plan["sharding_mode"]) if plan.get("sharding_mode") in names else 0


def _check_runnable(plan: dict) -> None:
    """The plan passes the checks `planner explain` runs on it: its job (search.plan_job_fields,
    the model and hardware files it was priced with) resolved again by plan.resolve, which builds
    the PlanArrays and the stack (the job's options laid on it) and runs plan.rule_codes with the
    stack's runs and its trainer's start-up rules. One check, so `explain`, `check`, `fit` and
    `export` cannot disagree on its inputs (issue 22: a copy here lacked PlanArrays.split_front, so
    DeepSeek-V3 on torchtitan pp 8, torchtitan's own front-loaded split, was refused under
    TORCHTITAN_PP_SPLIT). An exported file the trainer would refuse is never written."""
    from ..catalog import validate
    from ..plan import resolve
    from ..schema import Job
    from ..search import plan_job_fields

    fields = plan_job_fields(plan)
    # the file is the stack's trainer's (its commit): every start-up check of the stack runs on it, those the job's
    # trainer_date left out too (plan._deterministic_switches), so a plan only an older commit runs is refused
    fields.pop("trainer_date", None)
    for key in ("model", "hardware"):  # the files it was priced with (plan_dict model_file / hardware_file)
        if plan.get(f"{key}_file"):
            fields[key] = plan[f"{key}_file"]
    try:
        resolve(validate(Job, fields, "export: the plan"))
    except PlannerError as e:
        raise PlannerError(f"export: the plan breaks a rule of stack {plan.get('stack')}: {e.message}",
                           e.hint or "export a plan that `planner explain` accepts on that stack") from None


def priced_muon_tp_mode(plan: dict) -> Optional[str]:
    """The Muon TP mode `plan` was priced with (step.py [28]): its muon_tp_mode, which plan_dict writes only where it is
    not the plan's stack's default, else that stack's default (plan.muon_tp_default: megatron duplicated,
    megatron-bridge blockwise); None for a plan without Muon. The writers spell it whatever the file's trainer's
    default, so a plan priced on one stack and written in another's files runs the mode priced."""
    from ..catalog import load_stack
    from ..plan import muon_tp_default

    if plan.get("optimizer", "adam") != "muon":
        return None
    return plan.get("muon_tp_mode") or muon_tp_default(load_stack(plan["stack"]))


def plan_signature(plan: dict) -> dict:
    """What a file read back must reproduce: every plan setting priced, with the pipeline
    split as its placement (layers on the first, middle and last stage), since counting the
    embedding / loss as a layer (account_for_*) and the planner's uneven split with the same
    placement are one plan."""
    from ..pipeline import SPLIT_CODES, stage_layers

    keys = ("gpus", "tp", "cp", "pp", "vpp", "dp", "ep", "etp", "micro_batch", "global_batch", "seq_len", "sharding",
            "sharding_mode", "shard_group", "recompute", "recompute_layers", "sequence_parallel", "schedule", "precision",
            "fp8_recipe", "rank_order", "bytes_per_param", "tp_comm_overlap", "dp_comm_overlap", "torch_compile",
            "moe_capacity_factor", "moe_pad_to_capacity", "moe_min_capacity", "moe_rank_load", "moe_dispatcher", "moe_hybridep_capacity_factor", "moe_fp8_dispatch", "ep_comm_overlap", "moe_shared_expert_overlap", "defer_embedding_wgrad", "cross_entropy_fusion", "cross_entropy_fusion_impl", "cuda_graph_impl", "cuda_graph_scope", "chunked_loss", "selective_recomputes_attention", "spmd_backend", "fsdp_symm_mem", "spmd_typechecking", "partition_activations", "recompute_modules", "optimizer_implementation", "early_step_in_backward", "cp_rotate_method", "fp8_param_gather", "fp4_param_gather", "transformer_impl", "local_core_attention", "moe_grouped_gemm", "moe_permute_fusion", "moe_router_fusion", "moe_router_padding", "enable_experimental", "masked_softmax_fusion", "attention_softmax_in_fp32", "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_router_pre_softmax", "moe_router_dtype", "apply_rope_fusion", "bias_activation_fusion",
            "bias_dropout_fusion", "gradient_accumulation_fusion", "stack", "bf16_layers_at_start",
            "bf16_layers_at_end", "fp8_output_layer", "fp8_allgather", "fp8_precompute_scale", "fp8_attention", "fp16", "mtp_layers", "dp_param_gather_overlap", "microbatch_group", "cp_comm_type", "hierarchical_cp_sizes", "cp_load_balance", "cp_load_balancer",
            "pp_p2p_overlap", "pp_p2p_overlap_warmup_flush", "batch_size_schedule", "empty_unused_memory_level",
            "mfsdp_double_buffer", "mfsdp_outer_optim", "mfsdp_v2", "deepspeed_zero3", "offload_optimizer", "offload_param", "offload_fraction", "offload_overlap",
            "precision_aware_optimizer", "optimizer", "optimizer_whole_tensors", "deterministic_mode", "use_flash_attn", "nccl_algo", "nccl_proto", "nccl_nvls_enable", "attention_kernel_named", "muon_ns_steps",
            "muon_tp_mode", "muon_split_qkv", "muon_fp32_matmul_prec", "mla_down_proj_fusion")
    out = {k: plan.get(k) for k in keys}
    out["muon_tp_mode"] = priced_muon_tp_mode(plan)  # as priced: a stack's default is left out of its plans
    from ..schema import BYTES_PER_PARAM_PRESETS

    b = out["bytes_per_param"]  # a preset's name and the same bytes as a dict are one setting
    if isinstance(b, str) and b in BYTES_PER_PARAM_PRESETS:
        b = BYTES_PER_PARAM_PRESETS[b].model_dump()
    if isinstance(b, dict):
        out["bytes_per_param"] = tuple(sorted((k, float(v)) for k, v in b.items()))
    m = _model(plan)
    from ..catalog import load_stack
    from ..startup import built_order

    out["stage_layers"] = tuple(int(x) for x in stage_layers(
        m.num_layers, plan["pp"], plan["vpp"], int(plan.get("account_for_embedding_in_pipeline_split", False)),
        split_loss_units(plan), SPLIT_CODES[load_stack(plan["stack"]).pipeline_split], *stage_ends(plan)))
    # the rank order as the trainer builds it (equal up to size-1 axes)

    built = built_order(load_stack(plan["stack"]), plan["rank_order"], plan["tp"], plan["cp"], plan["pp"], plan["dp"])
    if built is not None:
        out["rank_order"] = built
    out["fp8_allgather"] = _fp8_allgather_on(plan, load_stack(plan["stack"]))
    out["fp8_grouped_experts"] = _grouped_experts_on(plan)
    if m.moe is None:  # a dense model runs no experts: the MoE settings a plan holds (moe_grouped_gemm) are no setting
        out.update({k: None for k in out if k.startswith("moe_")})  # of the file read back (torchtitan leaves them unset)
    # --recompute-modules names what selective recompute re-runs (planner/recompute_modules.py): no setting at another
    # recompute (the memory total, compared beside the signature, still tells a module that changes the cost)
    if plan.get("recompute") != "selective":
        out["recompute_modules"] = None
    # DeepSpeed's ZeRO-3 knobs (memory.py [z3]) are read by its stage-3 engine only (stage3.py; the reader ignores them
    # below stage 3, trainers/deepspeed.py): no setting of a zero0-2 plan's file read back
    if plan.get("sharding") not in ("fsdp", "hsdp"):
        out["deepspeed_zero3"] = None
    # the optimizer's CPU offload runs with Megatron's precision-aware optimizer (arguments.py @d98e8a64 l. 1884-1888;
    # _megatron_offload_flags writes --use-precision-aware-optimizer beside --optimizer-cpu-offload, read back as true):
    # a job that leaves the field out under offload prices the same plan (plan.precision_aware's te_master is off
    # under offload either way), so None there is the true its file reads back as
    if plan.get("offload_optimizer", "none") != "none" and out["precision_aware_optimizer"] is None:
        out["precision_aware_optimizer"] = True
    # one pipeline stage runs no schedule (every schedule prices pp 1 alike, pipeline.py): the file written at pp 1 names
    # none and reads back as the reader's default, the same plan (a job's zb-h1 on Megatron-LM, which has no such flag)
    if plan["pp"] == 1:
        out["schedule"] = None
    # the torch softmax's fp32 runs on the eager core only (memory.py [sm]; default true): elsewhere no setting
    out["attention_softmax_in_fp32"] = (False if plan.get("attention") == "eager" and plan.get("attention_softmax_in_fp32")
                                        is False else None)
    # likewise the fused softmax switch: read by the eager core only (a flash plan's false is the same plan; the
    # Megatron-DeepSpeed readers list the flag as ignored under a FlashAttention kernel)
    out["masked_softmax_fusion"] = (False if plan.get("attention") == "eager" and plan.get("masked_softmax_fusion")
                                    is False else None)
    return out


def _grouped_experts_on(plan: dict) -> bool | None:
    """Whether the routed experts' grouped GEMMs run in the plan's low precision (step.py [16]): its
    fp8_grouped_experts, else the stack's rule (stack_db defaults.fp8_grouped_experts); None for a
    dense model or a bf16 plan (nothing converted)."""
    from ..catalog import load_stack

    if plan.get("precision", "bf16") == "bf16" or _model(plan).moe is None:
        return None
    v = plan.get("fp8_grouped_experts")
    return bool(load_stack(plan["stack"]).defaults.fp8_grouped_experts) if v is None else bool(v)


def _fp8_allgather_on(plan: dict, stack) -> bool | None:
    """The fp8 FSDP all-gather a plan runs (step.py [15]): its fp8_allgather, else the recipe's
    allgather_fp8; None where no weight is sharded (torchtitan reads the option only with
    dp_shard > 1, float8.py @9810191bb~1 l. 88-91) or the recipe has none."""
    spec = stack.fp8_recipes.get(plan.get("fp8_recipe") or "") if plan.get("precision") == "fp8" else None
    mode = plan.get("sharding_mode")
    sh = plan.get("shard_group") if mode == "hsdp" else (plan["dp"] if mode and mode.startswith("fsdp") else 1)
    if spec is None or not spec.allgather_fp8 or not sh or sh <= 1:
        return None
    ag = plan.get("fp8_allgather")
    return True if ag is None else bool(ag)


def _steps(plan: dict) -> int | None:
    t = plan.get("tokens")
    if t is None:
        return None
    per = plan["global_batch"] * plan["seq_len"]
    return int(t // per) if t % per == 0 else None


# ------------------------------------------------------------------------ torchtitan
def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string is a JSON string


# torchtitan's linear converters at the exported commit, each the name [model] converters gives and the
# table its settings sit in: pytorch/torchtitan @e347b1e5e components/quantization/float8.py l. 238 and
# mx.py l. 171 register_model_converter(..., "quantize.linear.float8" / "quantize.linear.mx") (any other
# name is a KeyError in protocols/model_converter.py l. 62), config/job_config.py l. 812-836 JobConfig.quantize
# .linear.float8 (Float8Linear: enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp,
# recipe_name, filter_fqns, emulate) / .mx (MXLinear: mxfp8_dim1_cast_kernel_choice, recipe_name, filter_fqns);
# no top-level [float8] / [mx] ("Invalid field names", config/manager.py l. 160-168 _dict_to_dataclass). The layout since
# 8a2686c4a (2025-09-30, #1763; torchtitan.py reads both, LINEAR_LAYOUTS)
TT_QUANTIZE = {"float8": "quantize.linear.float8", "mx": "quantize.linear.mx"}
# the routed experts' grouped-GEMM converters (float8.py l. 239, mx.py l. 172) and their tables' settings
TT_GROUPED_MM = {"float8": "quantize.grouped_mm.float8", "mx": "quantize.grouped_mm.mx"}
TT_GROUPED_MM_SETTINGS = {"float8": {"fqns": ["experts"]}, "mx": {"recipe_name": "mxfp8", "fqns": ["experts"]}}


def _megatron_rope_scaling(plan: dict, model) -> list:
    """The flags that spell the model's rope_scaling on Megatron-LM @d98e8a64's command line, or a refusal naming
    the scaling and what Megatron lacks (it would train another model):
      llama3: --use-rope-scaling at Megatron's numbers (trainers.MEGATRON_LLAMA3_ROPE) only;
      yarn without MLA: --position-embedding-type yarn (written by _megatron) with --rotary-scaling-factor,
        --yarn-original-max-position-embeddings, --yarn-beta-fast, --yarn-beta-slow, for truncate false
        --no-yarn-correction-range-round-to-int, and --mscale / --mscale-all-dim where the model's
        rope_attention_factor is not Megatron's at their defaults 1, 0 (argument_utils.py
        _apply_yarn_config_from_args l. 384-413 sets config.yarn_mscale / yarn_mscale_all_dim from them, l. 411-412;
        GPTModel hands them to YarnRotaryEmbedding, gpt_model.py l. 209-210; the flags megatron_model.YARN_FLAGS
        lists): the pair _plain_yarn_mscales finds, the model's own first;
      linear: --rotary-seq-len-interpolation-factor (RotaryEmbedding divides the positions by it,
        rotary_pos_embedding.py l. 135-136; argparse type int, arguments.py l. 2422);
      dynamic, longrope: refused (no such rotary in Megatron-LM).
      yarn with MLA (--rope-type yarn, MLATransformerConfig's default): --rotary-scaling-factor, --mscale,
        --mscale-all-dim, which core_transformer_config_from_args copies over MLATransformerConfig's factor 40
        and mscales (argument_utils.py l. 301-303; command-line defaults 1.0, 1.0, 0.0: an MLA run that
        writes none trains factor 1); its original length 4096, beta_fast 32, beta_slow 1 and rounded
        correction range have no flag (megatron_model.MLA_YARN_FIXED): other numbers are refused, as is an
        attention factor other than _yarn_get_mscale(factor, mscale) / _yarn_get_mscale(factor, mscale_all_dim).
    A plain-RoPE model writes nothing."""
    kind, name = model.rope_scaling, plan["model"]
    if kind is None:
        return []
    # YaRN: MLA's at any position embedding, GPTModel's YarnRotaryEmbedding for rope only (refused below otherwise)
    if kind == "yarn" and (model.mla is not None or model.position_embedding == "rope"):
        return _megatron_yarn(model, name)
    if model.mla is not None or model.position_embedding != "rope":  # gpt_model.py @d98e8a64 l. 183-214
        raise _refuse("megatron", f"rope_scaling {kind} ({name}) with "
                                  f"{'MLA' if model.mla is not None else 'position_embedding ' + model.position_embedding}: "
                                  "Megatron-LM applies a rotary scaling to the RotaryEmbedding of "
                                  "--position-embedding-type rope (llama3, linear) or the YarnRotaryEmbedding of yarn, "
                                  "without MLA only (gpt_model.py @d98e8a64 l. 183-214)",
                      f"export the plan in another format, or plan the model without rope_scaling {kind}")
    if kind == "llama3":
        have = model.llama3_rope_scaling
        if have != MEGATRON_LLAMA3_ROPE:
            f, lo, hi, orig = MEGATRON_LLAMA3_ROPE
            raise _refuse("megatron", f"rope_scaling llama3 ({name}: {rope_text(have)}): Megatron-LM @d98e8a64's "
                                      f"--use-rope-scaling applies factor {f:g}, low_freq_factor {lo:g}, high_freq_factor "
                                      f"{hi:g}, original_max_position_embeddings {orig} only (rotary_pos_embedding.py "
                                      "_apply_scaling; gpt_config_from_args passes no --rope-scaling-factor)",
                          "export the plan in another format, or give the model Llama 3.1's rope_scaling_params")
        return [("--use-rope-scaling", None)]
    if kind == "linear":
        f = model.rope_linear_factor
        if f is None:
            raise _refuse("megatron", f"rope_scaling linear ({name}): its factor is not stated, and Megatron-LM's "
                                      "--rotary-seq-len-interpolation-factor needs it",
                          "give the model rope_linear_factor (config.json rope_scaling.factor), or export in another format")
        if not float(f).is_integer():
            raise _refuse("megatron", f"rope_scaling linear ({name}: factor {f:g}): Megatron-LM @d98e8a64's "
                                      "--rotary-seq-len-interpolation-factor takes a whole number only (argparse type int, "
                                      "arguments.py l. 2422)",
                          "export the plan in another format, or plan the model with a whole linear factor")
        return [("--rotary-seq-len-interpolation-factor", int(f))]
    raise _refuse("megatron", f"rope_scaling {kind} ({name}): Megatron-LM @d98e8a64 has no {kind} rotary scaling "
                              "(--position-embedding-type: learned_absolute, rope, yarn, mrope, relative, none, arguments.py "
                              "l. 2397-2398; RotaryEmbedding scales by --use-rope-scaling, llama3, or "
                              "--rotary-seq-len-interpolation-factor, linear, only)",
                  f"export the plan in another format, or plan the model without rope_scaling {kind}")


class _MegatronYarn(NamedTuple):
    """What the refusals of one of Megatron-LM @d98e8a64's YaRN rotaries say (_megatron_yarn)."""
    label: str  # the scaling as the refusals name it
    needs: str  # the flags its unstated numbers would have to give
    fields: str  # the rope_yarn_params fields beside factor it reads
    gives: str  # the attention factor its flags give (str.format: factor, m, a, want)
    of: str  # what the model's attention factor must be the one of


# GPTModel's YarnRotaryEmbedding (--position-embedding-type yarn), at any mscale pair (_plain_yarn_mscales: refused
# only where the factor is <= 1 and the attention factor is not 1), and MLA's (--rope-type yarn,
# MLATransformerConfig's default), at the model's mscale pair (1 and 0 where unstated), keyed by whether the model
# has MLA
_MEGATRON_YARNS = {
    False: _MegatronYarn(
        "rope_scaling yarn",
        "Megatron-LM's --position-embedding-type yarn needs them (--rotary-scaling-factor, default 1.0; "
        "--yarn-original-max-position-embeddings, --yarn-beta-fast, --yarn-beta-slow, "
        "--[no-]yarn-correction-range-round-to-int: argument_utils.py @d98e8a64 l. 384-413)",
        "original_max_position_embeddings, beta_fast, beta_slow, truncate",
        "YarnRotaryEmbedding puts _yarn_get_mscale(factor, --mscale) / _yarn_get_mscale(factor, --mscale-all-dim) "
        "on cos and sin, and _yarn_get_mscale is 1 for a factor <= 1 whatever the mscale "
        "(yarn_rotary_pos_embedding.py l. 275-294): at factor {factor:g} every --mscale pair puts {want:g} there",
        "YaRN factor"),
    True: _MegatronYarn(
        "rope_scaling yarn with MLA",
        "Megatron-LM @d98e8a64's MLA YaRN takes --rotary-scaling-factor (default 1.0, which replaces "
        "MLATransformerConfig's 40: argument_utils.py l. 301-303), --mscale, --mscale-all-dim",
        "mscale, mscale_all_dim, original_max_position_embeddings, beta_fast, beta_slow",
        "MLA YaRN at factor {factor:g}, --mscale {m:g}, --mscale-all-dim {a:g} puts {want:g} on cos and sin "
        "(yarn_rotary_pos_embedding.py l. 275-294)",
        "mscales"),
}


def _megatron_yarn(model, name: str) -> list:
    """The flags of the model's YaRN (_megatron_rope_scaling's docstring), with or without MLA, or a refusal: its
    numbers unstated, MLA's numbers that have no flag (megatron_model.MLA_YARN_FIXED), or a rope_attention_factor
    other than the one Megatron puts on cos and sin at the factor and the mscale pair the flags give
    (megatron_model.yarn_concentration), each said as _MEGATRON_YARNS says it for the model's rotary."""
    from .megatron_model import MLA_YARN_FIXED, yarn_concentration

    mla = model.mla is not None
    say, p = _MEGATRON_YARNS[mla], model.rope_yarn_params
    if p is None:
        raise _refuse("megatron", f"{say.label} ({name}): its numbers are not stated, and {say.needs}",
                      f"give the model rope_yarn_params (config.json rope_scaling factor, {say.fields}), "
                      "or export in another format")
    have = (p.original_max_position_embeddings, float(p.beta_fast), float(p.beta_slow), bool(p.truncate))
    if mla and have != MLA_YARN_FIXED:
        raise _refuse("megatron", f"rope_scaling yarn with MLA ({name}: original_max_position_embeddings "
                                  f"{have[0]}, beta_fast {have[1]:g}, beta_slow {have[2]:g}, truncate "
                                  f"{str(have[3]).lower()}): Megatron-LM @d98e8a64's MLA YaRN has no flag for them "
                                  "and keeps MLATransformerConfig's 4096, 32, 1 (transformer_config.py l. 3318-3324) "
                                  "and YarnRotaryEmbedding's rounded correction range (yarn_rotary_pos_embedding.py "
                                  "l. 63); --yarn-* apply to non-MLA YaRN only (argument_utils.py l. 395-413)",
                      "export the plan in another format, or plan the model with those numbers")
    # the mscale pair on the command line: MLA's the model's (1, 0 where unstated; its mscale_all_dim also scales
    # MLA's softmax); plain YaRN's any pair whose cos/sin factor is the model's (_plain_yarn_mscales)
    m = 1.0 if p.mscale is None else float(p.mscale)
    a = 0.0 if p.mscale_all_dim is None else float(p.mscale_all_dim)
    attention = float(model.rope_attention_factor)
    pair = (m, a) if mla else _plain_yarn_mscales(p.factor, m, a, attention)
    if pair is None and p.factor > 1:  # solvable but for a float's range (_plain_yarn_mscales)
        raise _refuse("megatron", f"{say.label} ({name}): rope_attention_factor {attention:g} at factor {p.factor:g}: "
                                  "no finite --mscale / --mscale-all-dim gives it (Megatron-LM @d98e8a64's "
                                  "_yarn_get_mscale(factor, m) = 0.1 m ln(factor) + 1 overflows, "
                                  "yarn_rotary_pos_embedding.py l. 275-279)",
                      "export the plan in another format, or give the model a finite attention factor Megatron can reach")
    want = yarn_concentration(p.factor, *(pair or (m, a)))
    if pair is None or round(attention, 12) != round(want, 12):
        raise _refuse("megatron", f"{say.label} ({name}): rope_attention_factor {attention:g}, "
                                  "but Megatron-LM @d98e8a64's " + say.gives.format(factor=p.factor, m=m, a=a, want=want),
                      f"export the plan in another format, or give the model the attention factor of its {say.of}")
    m, a = pair
    if mla:
        return [("--rotary-scaling-factor", _exact(p.factor)), ("--mscale", _exact(m)), ("--mscale-all-dim", _exact(a))]
    args = [("--rotary-scaling-factor", _exact(p.factor)),
            ("--yarn-original-max-position-embeddings", p.original_max_position_embeddings),
            ("--yarn-beta-fast", _exact(p.beta_fast)), ("--yarn-beta-slow", _exact(p.beta_slow))]
    if pair != (1.0, 0.0):  # Megatron's --mscale 1, --mscale-all-dim 0 (arguments.py l. 3560-3563) written only if not
        args += [("--mscale", _exact(m)), ("--mscale-all-dim", _exact(a))]
    if not p.truncate:  # Megatron rounds the correction range unless told not to (argument_utils.py l. 413)
        args.append(("--no-yarn-correction-range-round-to-int", None))
    return args


def _exact(x: float) -> str:
    """x as a command-line number argparse's float reads back as x (%g where that is exact, else Python's shortest
    round-tripping repr): a --mscale of 0.7071067811865476 written 0.707107 would train another factor."""
    s = f"{float(x):g}"
    return s if float(s) == float(x) else repr(float(x))


def _plain_yarn_mscales(factor: float, mscale: float, mscale_all_dim: float, attention: float):
    """The (--mscale, --mscale-all-dim) pair for GPTModel's YarnRotaryEmbedding (no MLA) whose factor on cos and sin,
    megatron_model.yarn_concentration(factor, m, a) = _yarn_get_mscale(factor, m) / _yarn_get_mscale(factor, a)
    (yarn_rotary_pos_embedding.py @d98e8a64 l. 275-294; attention.py l. 326 applies it), is the model's attention
    factor at 12 decimals (the readers' comparison, ModelSpec.yarn_rope_scaling), or None where none is. Without
    MLA the pair does nothing else (config.yarn_mscale / yarn_mscale_all_dim are read by YarnRotaryEmbedding and
    _yarn_get_concentration_factor_from_config only), so any pair that gives the factor trains the same model.
    In order: the model's own (rope_yarn_params mscale, mscale_all_dim; 1 and 0 where unstated); Megatron's
    defaults 1, 0 (0.1 ln(factor) + 1: transformers' get_mscale(factor), where config.json states no pair or
    an mscale_all_dim of 0, which _compute_yarn_parameters then ignores); else, for a factor > 1, the pair solved
    from g(m) = 0.1 m ln(factor) + 1: at or above g(1), m = (attention - 1) / (0.1 ln factor) with a = 0; below,
    m = 1 with a = (g(1) / attention - 1) / (0.1 ln factor) (both > 0), each written at the fewest significant
    digits whose factor is the model's to a relative 1e-15 (a config.json attention_factor, no pair). A
    factor <= 1 puts 1 on cos and sin whatever the pair (_yarn_get_mscale l. 276-277): None unless attention is 1."""
    from .megatron_model import yarn_concentration

    def gives(m, a):
        return round(yarn_concentration(factor, m, a), 12) == round(attention, 12)

    for pair in ((mscale, mscale_all_dim), (1.0, 0.0)):
        if gives(*pair):
            return pair
    if factor <= 1:
        return None
    ln = 0.1 * math.log(factor)
    g1 = ln + 1.0
    solve = (lambda x: (x, 0.0)) if attention >= g1 else (lambda x: (1.0, x))
    x = (attention - 1.0) / ln if attention >= g1 else (g1 / attention - 1.0) / ln
    for digits in range(1, 18):  # the fewest digits whose factor is the model's to 1e-15 (a few float ulps)
        y = float(f"{x:.{digits}g}")
        if y > 0 and gives(*solve(y)) and math.isclose(yarn_concentration(factor, *solve(y)), attention, rel_tol=1e-15):
            return solve(y)
    return solve(x) if x > 0 and gives(*solve(x)) else None


def _megatron_rotary_base(plan: dict, model) -> list:
    """--rotary-base, the model's rope_theta, where it differs from Megatron-LM @d98e8a64's default 10000
    (arguments.py l. 2418, argparse type int; gpt_config_from_args passes it to RotaryEmbedding and
    YarnRotaryEmbedding, argument_utils.py l. 463, and core_transformer_config_from_args to
    MLATransformerConfig.rotary_base, l. 301-303): a rotary model's other base would train Megatron's
    10000. A base that is no whole number is refused; an unstated one writes nothing (Megatron's default)."""
    theta = model.rope_theta
    if theta is None or model.position_embedding != "rope" or float(theta) == MEGATRON_ROTARY_BASE:
        return []
    if not float(theta).is_integer():
        raise _refuse("megatron", f"rope_theta {theta:g} ({plan['model']}): Megatron-LM @d98e8a64's --rotary-base takes a "
                                  "whole number only (argparse type int, arguments.py l. 2418)",
                      "export the plan in another format, or plan the model with a whole rope_theta")
    return [("--rotary-base", int(theta))]


def _torchtitan_flavor(plan: dict, model, notes: list[str]) -> tuple[str, str]:
    """[model] name and flavor: the flavor of torchtitan @e347b1e5e's registries whose priced shape equals the
    plan's model, field by field (torchtitan_flavors.matching: the model itself, not its name), and whose
    attn_type runs the plan's attention kernel (sdpa: the stack's flash2, flex: flex); a costless difference
    (rope_theta, RoPE scaling) is noted. None: refused (issue 22: a TOML without the model would build
    torchtitan's default llama3 debugmodel), naming the model code's flavors and the nearest one's differences."""
    from .torchtitan import TORCHTITAN_COMMITS, TORCHTITAN_NAME_CODES
    from .torchtitan_flavors import (ATTN_KERNELS, FLAVORS, REGISTRY, flavor_spec, flavors_of, kernel_flag, matching,
                                     model_name, nearest, shape_differences, yarn_off_note)
    from ..catalog import load_stack
    from ..startup import model_code

    name = plan["model"]
    kernel = load_stack("torchtitan").attention_kernel_for(load_hardware(plan.get("hardware_file") or plan["hardware"]).capability,
                                                           plan.get("attention_kernel"))  # SDPA's, or the job's
    same = matching(model)
    runs = [fl for fl in same if ATTN_KERNELS[fl.attn_type] == kernel]
    commit = TORCHTITAN_COMMITS["torchtitan"]
    own = next((f for f in same if model_name(f) == model.name), None)  # --model torchtitan:<code>/<flavor>'s flavor
    backend = plan.get("attention_backend")  # the job's attn_type, where not the stack's default (sdpa)
    # (a varlen flavor of its own, --model torchtitan:<code>/<flavor>, is refused below as before, naming the flavor of
    # its shape that runs the kernel priced)
    if backend is not None and not (own is not None and own.attn_type == backend and ATTN_KERNELS[backend] is None):
        runs = [fl for fl in runs if fl.attn_type == backend]
        if not runs:
            have = ", ".join(f"{f.flavor} (attn_type {f.attn_type!r})" for f in same) or "none"
            raise _refuse("torchtitan", f"model {name} with attention_backend {backend} and attention kernel {kernel}: "
                                        f"torchtitan {commit}'s flavors of its shape are {have}; none runs attn_type "
                                        f"{backend!r} with the kernel priced" +
                                        ("" if ATTN_KERNELS[backend] is not None else
                                         f" (the planner has no rate for {backend!r}: it prices the stack's kernel)"),
                          "plan it with the attn_type and kernel of one of those flavors (--attention-backend, "
                          "--attention-kernel), then export")
    if own is not None and own not in runs:
        other = [f.flavor for f in runs]
        if ATTN_KERNELS[own.attn_type] is None:  # varlen: no rate of its own, priced with the stack's kernel
            raise _refuse("torchtitan", f"model {name}: torchtitan {commit}'s {own.code} {own.flavor} runs attn_type "
                                        f"{own.attn_type!r} (models/{own.code}/__init__.py {own.lines}), which the planner "
                                        f"has no rate for: the plan was priced with {kernel}, which torchtitan runs as "
                                        f"{', '.join(other) or 'no flavor of this shape'}, not as {own.flavor}",
                          f"plan --model {model_name(runs[0])} (the same priced shape with attn_type "
                          f"{runs[0].attn_type!r}), then export" if runs else
                          "plan a flavor whose attn_type the planner prices (sdpa or flex), then export")
        if runs:  # a flex flavor priced with the job's flash2: the flavor of its shape that runs it (noted)
            notes.append(f"model {name}: priced with attention kernel {kernel} (the job's), which torchtitan's "
                         f"{own.flavor} (attn_type {own.attn_type!r}) does not run: written as {runs[0].code} "
                         f"{runs[0].flavor}, the flavor of the same priced shape whose attn_type {runs[0].attn_type!r} "
                         "runs it")
    if runs:  # the plan's own flavor (--model torchtitan:<code>/<flavor>) first among those of its shape
        fl = own if own in runs else runs[0]
        for d in shape_differences(fl, model)[1]:
            if fl.code == "llama3" and d.startswith("llama3_rope_scaling"):  # every llama3 flavor's RoPEScalingArgs
                notes.append(f"model {plan['model']}: rope_scaling {rope_text(model.llama3_rope_scaling or 'none')}, but "
                             f"torchtitan's {fl.code} {fl.flavor} flavor always applies Llama 3.1's "
                             f"({rope_text(TORCHTITAN_LLAMA3_ROPE)}; no setting turns it off): the run trains those "
                             "rotary frequencies, at the same cost")
                continue
            notes.append(f"model {plan['model']}: torchtitan's {fl.code} {fl.flavor} flavor differs in {d} (flavor / "
                         "model; no setting changes it): the run trains the flavor's, at the same cost")
        off = yarn_off_note(fl, plan.get("seq_len"))
        if off is not None:
            notes.append(f"model {plan['model']}: {off}")
        if fl.attn_mask_type == "block_causal":
            notes.append(f"model {plan['model']}: torchtitan's {fl.code} {fl.flavor} flavor masks attention block_causal "
                         "(within each document); the plan prices causal attention over the whole sequence, an upper bound")
        names = [n for n, c in TORCHTITAN_NAME_CODES["torchtitan"].items() if c == fl.code]
        return (fl.code if fl.code in names else names[0]), fl.flavor
    if same:
        fl = same[0]
        want = ATTN_KERNELS[fl.attn_type] or fl.attn_type
        raise _refuse("torchtitan", f"model {name}: torchtitan {commit}'s flavor{'s' if len(same) > 1 else ''} of its shape "
                                    f"({', '.join(f'{f.code} {f.flavor}' for f in same)}) run{'s' if len(same) == 1 else ''} attn_type "
                                    f"{fl.attn_type!r}, attention kernel {want}, but the plan was priced with {kernel}",
                      f"price it with --attention-kernel {want}, then export")
    stack = load_stack("torchtitan")
    have = model_code(model, stack)
    code = have.code if have is not None else None
    codes = [code] if code in REGISTRY else list(REGISTRY)
    listed = "; ".join(f"{c + ': ' if len(codes) > 1 else ''}{', '.join(flavors_of(c))}" for c in codes)
    near, use = "", "a --model torchtitan:<code>/<flavor> (planner models lists every flavor)"
    if code in REGISTRY:
        fl = nearest(model, code)
        near = f"; the nearest, {fl.flavor}, differs in (flavor / model) {'; '.join(shape_differences(fl, model)[0])}"
        flag = kernel_flag(fl)
        use = (f"--model {model_name(fl)}{flag} (the nearest flavor as torchtitan builds it"
               + (f"; its attn_type {fl.attn_type!r} is priced with{flag}" if flag else
                  f"; its attn_type {fl.attn_type!r} runs the stack's kernel") + ")")
    raise _refuse("torchtitan", f"model {name}: no flavor of torchtitan {commit}'s registries has its shape, and a TOML "
                                "without [model] name and flavor builds torchtitan's default (llama3 debugmodel); "
                                f"the flavors of {'its code ' + code if code in REGISTRY else 'each code'}: {listed}{near}",
                  f"plan {use}, then export; or add a flavor of the model's shape to torchtitan's registry "
                  f"(torchtitan/models/{code or '<code>'}/__init__.py) and write its name in [model] flavor")


def _torchtitan(plan: dict, notes: list[str]) -> str:
    if plan.get("cp_load_balance") is False and plan.get("cp", 1) > 1:  # the job field (stack_db torchtitan sources)
        raise _refuse("torchtitan", "cp_load_balance false: torchtitan @e347b1e5e turns CP load balancing off only with "
                      "context_parallel_load_balancer None (config/job_config.py l. 431-437), which a TOML cannot say "
                      "(TOML has no null; config/manager.py _dict_to_dataclass l. 160-181 passes a 'None' string as "
                      "the name 'None', which distributed/context_parallel.py cp_shard l. 207-211 refuses)",
                      "launch this file with --parallelism.context_parallel_load_balancer None on torchtitan's command "
                      "line (export the plan without --no-cp-load-balance, then add the option), or export with "
                      "--stack torchtitan-0.3, whose launch line carries it")
    sec = _torchtitan_sections(plan, notes, _torchtitan_flavor)
    head = ["# torchtitan job file written by `planner export --format torchtitan`",
            "# option names: pytorch/torchtitan torchtitan/config/job_config.py @e347b1e5e",
            f"# hardware {plan['hardware']}, {plan['gpus']} GPUs (torchtitan takes NGPU from the launcher)"]
    lines = head
    for name, body in sec.items():
        lines += ["", f"[{name}]"] + [f"{k} = {_toml(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


def _torchtitan_sections(plan: dict, notes: list[str], flavor) -> dict[str, dict]:
    """The plan as torchtitan's sections in main's layout ({section: {key: value}}, as the TOML holds them): the
    one mapping of the TOML export (_torchtitan) and of torchtitan 0.3.0's launch line (torchtitan03.export_launch,
    which spells these sections as its command-line options). flavor(plan, model, notes) -> ([model] name,
    flavor): the model as the release names it, or PlannerError."""
    F = "torchtitan"
    model = _model(plan)
    L = model.num_layers
    tp, cp, pp, vpp, dp = plan["tp"], plan["cp"], plan["pp"], plan["vpp"], plan["dp"]
    sec: dict[str, dict] = {"job": {"description": f"planner export: {plan['model']} on {plan['gpus']} x {plan['hardware']}"}}
    for key in ("moe_aux_loss_coeff", "moe_z_loss_coeff"):  # no such loss in torchtitan: the reader reads 0.0
        if plan.get(key):
            raise _refuse(F, f"{key} {plan[key]:g}: torchtitan @e347b1e5e computes no auxiliary or z-loss on the router "
                             "(no setting in config/job_config.py; models/moe/moe.py balances by the expert bias alone), "
                             "so the run keeps none of what the plan priced for it",
                          f"price it with --{key.replace('_', '-')} 0, then export")
    m: dict = {}
    m["name"], m["flavor"] = flavor(plan, model, notes)
    # the embedding's and output layer's rows: the flavor's model args vocab_size (nn.Embedding / nn.Linear, pytorch/
    # torchtitan @e347b1e5e torchtitan/models/llama3/model/model.py l. 448, 458; args.py l. 33), unpadded (stack_db
    # torchtitan vocab_padding null), which no key of config/job_config.py sets: a plan priced at other rows (a job's
    # padded_vocab_size) reads back at the flavor's (the flavor matches the model's vocab_size, torchtitan_flavors
    # PRICED), so refused, not dropped
    rows = plan_rows(plan, model.vocab_size)
    if rows != model.vocab_size:
        raise _refuse(F, f"padded_vocab_size {rows:,}: torchtitan builds the embedding and output layer at its "
                         f"{m['name']} {m['flavor']} flavor's vocab_size ({model.vocab_size:,} rows: its model args', as "
                         "llama3's models/llama3/model/model.py l. 448, 458 @e347b1e5e), which no setting of its config "
                         "changes", "price it without padded_vocab_size (torchtitan pads no vocabulary), then export")
    if plan["precision"] == "fp8":  # the converters' registered names at @e347b1e5e (TT_QUANTIZE)
        kind = "mx" if plan.get("fp8_recipe") == "mxfp8" else "float8"
        m["converters"] = [TT_QUANTIZE[kind]]
        # the routed experts' grouped GEMMs in fp8 (step.py [16]): the grouped converter of the same type (one
        # quantization type per job, components/quantization/__init__.py @e347b1e5e l. 37-55) with fqns naming the
        # experts (job_config.py Float8GroupedMM l. 756-764, MXGroupedMM l. 794-811); absent: the stack's rule
        if _grouped_experts_on(plan):
            m["converters"].append(TT_GROUPED_MM[kind])
    if m:
        sec["model"] = m
    tr: dict = {}
    par: dict = {}
    gbs, mbs = plan["global_batch"], plan["micro_batch"]
    if pp > 1:
        tr["local_batch_size"] = gbs // dp
        par["pipeline_parallel_microbatch_size"] = mbs
    else:
        tr["local_batch_size"] = mbs
    tr["global_batch_size"] = gbs
    tr["seq_len"] = plan["seq_len"]
    steps = _steps(plan)
    if steps is not None:
        tr["steps"] = steps
    elif plan.get("tokens") is not None:
        notes.append(f"tokens {plan['tokens']:.6g}: not a whole number of steps of {gbs} x {plan['seq_len']} tokens; steps left out")
    bpp = plan.get("bytes_per_param")
    if bpp == "pure-bf16":
        tr["dtype"] = "bfloat16"
    elif bpp not in (None, "mixed16"):
        raise _refuse(F, f"bytes_per_param {bpp}: torchtitan keeps mixed16 (fp32 master and Adam states) or pure bf16 "
                         "(training.dtype)", "price it with --bytes-per-param mixed16 or pure-bf16")
    if plan.get("offload_optimizer", "none") != "none":  # FSDP2's CPUOffloadPolicy (job_config.py @e347b1e5e l. 270)
        tr["enable_cpu_offload"] = True
    sec["training"] = tr
    mode = plan.get("sharding_mode")
    shard = plan.get("shard_group")
    if mode == "hsdp":
        rep, sh = dp // shard, shard
    elif mode == "ddp":
        rep, sh = dp, 1
    elif mode in ("fsdp2", "fsdp2_no_reshard", "fsdp2_reshard_always"):
        rep, sh = 1, dp
    else:
        raise _refuse(F, f"sharding {plan['sharding']} (mode {mode}): torchtitan runs ddp, fsdp2, fsdp2_no_reshard, "
                         "fsdp2_reshard_always and hsdp (stack_db torchtitan runs.sharding)", "price it on --stack torchtitan")
    par = {"data_parallel_replicate_degree": rep, "data_parallel_shard_degree": sh, "tensor_parallel_degree": tp,
           "pipeline_parallel_degree": pp, "context_parallel_degree": cp, **par}
    if sh * cp > 1:  # FSDP runs over dp_shard x cp (startup.py TORCHTITAN_FSDP_MESH)
        par["fsdp_reshard_after_forward"] = {"fsdp2_no_reshard": "never", "fsdp2_reshard_always": "always"}.get(mode, "default")
    if plan.get("ep", 1) > 1:  # torchtitan [parallelism] expert_parallel_degree; its ETP default is 1, not tp
        par["expert_parallel_degree"] = plan["ep"]
        par["expert_tensor_parallel_degree"] = plan.get("etp") or tp
    if model.moe is not None:
        par.update(_torchtitan_dispatcher(plan))
    if pp > 1:
        par["pipeline_parallel_schedule"] = _TT_SCHEDULES[plan["schedule"]]
        from ..pipeline import layers_per_stage

        # the split as priced: torchtitan's own front-loaded placement (stack_db pipeline_split front) of
        # the layers plus the ends the plan counts, in pp x vpp stages (layers_per_stage where
        # ceil(L' / it) spells them; else torchtitan's default stages per rank)
        wf = int(plan.get("account_for_embedding_in_pipeline_split", False))
        wl = split_loss_units(plan)
        par["pipeline_parallel_first_stage_less_layers"] = wf
        par["pipeline_parallel_last_stage_less_layers"] = wl
        lps, spelled = layers_per_stage(L + wf + wl, pp * vpp)
        if spelled:
            par["pipeline_parallel_layers_per_stage"] = lps
        elif vpp != (2 if plan["schedule"] == "interleaved" else 1):
            # no layers_per_stage gives that many stages (stages = ceil(layers / it)): the same placement as
            # torchtitan's stage lists (issue 22's export sweep: 126 + 0 layers on 16 x 4 stages)
            from .torchtitan import fqns_per_model_part

            par["module_fqns_per_model_part"] = fqns_per_model_part(pp * vpp, L, wf, wl)
    if tp > 1:
        par["enable_async_tensor_parallel"] = bool(plan.get("tp_comm_overlap"))
    elif plan.get("tp_comm_overlap"):
        raise _refuse(F, "tp_comm_overlap with tp 1: nothing to overlap", "price it without --tp-comm-overlap")
    if plan.get("chunked_loss"):
        raise _refuse(F, "chunked_loss: the TOML-configured torchtitan this exports (@e347b1e5e) has no chunked loss; "
                         "0.3.0 sets its ChunkedLossWrapper in Python configs", "price it without chunked_loss")
    if plan.get("recompute_modules"):
        raise _refuse(F, "recompute_modules: Megatron-Core's --recompute-modules; torchtitan names no modules",
                      "price it without recompute_modules, or export --format megatron")
    if plan.get("selective_recomputes_attention"):
        raise _refuse(F, "selective_recomputes_attention: the torchtitan this exports (@e347b1e5e) saves every SDPA "
                         "backend's output under op SAC (#2095, 2025-12-01)", "price it without selective_recomputes_attention")
    if not plan.get("dp_comm_overlap") and dp > 1:
        raise _refuse(F, "dp_comm_overlap off: torchtitan's FSDP2 / DDP always overlap the DP collectives",
                      "price it with --dp-comm-overlap")
    if plan.get("cp_rotate_method"):  # job_config.py @e347b1e5e Parallelism.context_parallel_rotate_method (default allgather)
        par["context_parallel_rotate_method"] = plan["cp_rotate_method"]
    if plan.get("cp_load_balancer") and cp > 1:  # job_config.py @e347b1e5e l. 431 (0.3: configs.py l. 235), default headtail
        par["context_parallel_load_balancer"] = plan["cp_load_balancer"]
    sec["parallelism"] = par
    if plan.get("optimizer_implementation"):  # job_config.py @e347b1e5e Optimizer.implementation (default fused)
        sec["optimizer"] = {"implementation": plan["optimizer_implementation"]}
    if plan.get("early_step_in_backward"):  # job_config.py @e347b1e5e l. 160 Optimizer.early_step_in_backward
        sec.setdefault("optimizer", {})["early_step_in_backward"] = True
    # async TP needs compile (torchtitan/distributed/tensor_parallel.py @e347b1e5e): [compile] carries it
    sec["compile"] = {"enable": bool(plan.get("torch_compile")), "components": ["model", "loss"]}
    ac: dict = {"mode": plan["recompute"]}
    if plan["recompute"] == "selective":
        ac["selective_ac_option"] = "op"
    rl = plan.get("recompute_layers")
    if plan["recompute"] == "full" and rl is not None:
        per = math.ceil(L / pp)
        ns = [n for n in range(1, per + 1) if max(1, math.ceil(L / pp / n)) == rl]
        if not ns:
            raise _refuse(F, f"recompute_layers {rl}: torchtitan recomputes every n-th layer of a stage (ceil({per} / n) "
                             "layers); no n gives it", "price full recompute of every layer, or a count torchtitan can run")
        ac = {"mode": "selective", "selective_ac_option": str(ns[0])}
    sec["activation_checkpoint"] = ac
    if plan.get("bf16_layers_at_start") or plan.get("bf16_layers_at_end"):
        raise _refuse(F, "bf16 layers at the start / end: no torchtitan setting (filter_fqns names modules, not layers by place)",
                      "price it without bf16_layers_at_start / bf16_layers_at_end")
    if plan["precision"] == "nvfp4":
        raise _refuse(F, "precision nvfp4: torchtitan has no NVFP4 converter (job_config.py @e347b1e5e: float8, mx)",
                      "price it with --precision fp8 (tensorwise, rowwise or mxfp8)")
    # filter_fqns: the output layer as priced (step.py [14]): kept bf16 (["output"]) unless fp8_output_layer; the
    # Linears kept bf16 as priced (step.py [18]): the job's filter_fqns, else the MoE router gate ("router.gate", the
    # shipped MoE configs') on a model with MoE layers
    out = [] if plan.get("fp8_output_layer") else ["output"]
    if plan.get("filter_fqns") is not None:
        out = list(plan["filter_fqns"])
    elif model.moe is not None:
        out = out + ["router.gate"]
    if plan["precision"] == "fp8" and plan.get("fp8_recipe") == "mxfp8":
        # the mx converter keeps by name only (no auto filter, fp8_linears.py [2]): the output layer's entry alone
        # is what the float8 reader and pricing read for it; its own list as priced
        sec[TT_QUANTIZE["mx"]] = {"recipe_name": "mxfp8_cublas", "filter_fqns": out}  # MXLinear.recipe_name default
    elif plan["precision"] == "fp8":
        r = plan.get("fp8_recipe") or "tensorwise"
        if r not in ("tensorwise", "rowwise"):
            raise _refuse(F, f"fp8_recipe {r}: torchtitan's float8 recipes are tensorwise, rowwise (and mx: mxfp8)", "price another recipe")
        # tensorwise: recipe_name left unset, the fp8 FSDP all-gather as the plan's fp8_allgather (absent: on,
        # the torchtitan stack's tensorwise rule, stack_db/torchtitan.yaml allgather_fp8): torchtitan turns the all-gather
        # off (asserts it off) with any recipe_name, and its default is false (torchtitan/config/job_config.py
        # @e347b1e5e l. 732; components/quantization/float8.py @9810191bb~1 l. 62-99)
        ag = plan.get("fp8_allgather", True)  # absent: the tensorwise recipe's rule (allgather_fp8: true)
        f8 = ({"enable_fsdp_float8_all_gather": bool(ag)} if sh > 1 else {}) if r == "tensorwise" else {"recipe_name": r}
        if r == "tensorwise" and sh > 1 and ag and plan.get("fp8_precompute_scale"):  # step.py [39]
            f8["precompute_float8_dynamic_scale_for_fsdp"] = True
        sec[TT_QUANTIZE["float8"]] = {**f8, "filter_fqns": out}
    for kind, name in TT_GROUPED_MM.items():
        if name in sec.get("model", {}).get("converters", []):
            sec[name] = dict(TT_GROUPED_MM_SETTINGS[kind])
    return sec


# the planner's dispatchers in torchtitan's key (stack_db torchtitan runs.moe_dispatchers; torchtitan.py
# reads it back): pytorch/torchtitan @e347b1e5e torchtitan/config/job_config.py l. 474
# Parallelism.expert_parallel_comm_backend: Literal["standard", "deepep"] = "standard"
TORCHTITAN_DISPATCHERS = {"alltoall": "standard", "deepep": "deepep"}


def _torchtitan_dispatcher(plan: dict) -> dict:
    """The MoE dispatcher the plan was priced with as torchtitan's [parallelism] key (written
    always, the default "standard" too); refused where the TOML-configured torchtitan has no
    backend for it, or the plan fixes a dispatch setting it has no key for."""
    name = plan.get("moe_dispatcher") or "alltoall"
    if name not in TORCHTITAN_DISPATCHERS:
        raise _refuse("torchtitan", f"moe_dispatcher {name}: torchtitan's expert_parallel_comm_backend (job_config.py "
                                    "@e347b1e5e l. 474) is 'standard' or 'deepep' (HybridEP came with 156db2ead, "
                                    "2026-03-11, in the Python configs that replaced the TOML files)",
                      f"price it with moe_dispatcher {' or '.join(TORCHTITAN_DISPATCHERS)}")
    if plan.get("moe_fp8_dispatch"):
        raise _refuse("torchtitan", "moe_fp8_dispatch: torchtitan @e347b1e5e dispatches the bf16 hidden states "
                                    "(distributed/deepep/deepep.py dispatch_tokens; expert_parallel.py all_to_all_single); "
                                    "no key dispatches fp8 tokens", "price it with moe_fp8_dispatch: false")
    if plan.get("moe_route_nodes"):
        raise _refuse("torchtitan", f"moe_route_nodes {plan['moe_route_nodes']}: torchtitan's TOML has no node-limited "
                                    "routing key (its group-limited routing is the model's MoEArgs num_expert_groups / "
                                    "num_limited_groups, set in Python)", "price it without moe_route_nodes")
    return {"expert_parallel_comm_backend": TORCHTITAN_DISPATCHERS[name]}


# ------------------------------------------------------------------------ Megatron
MEGATRON_MODE_FLAGS = {  # stack_db megatron runs.sharding, as argument words
    "ddp": [],
    "distributed_optimizer": [("--use-distributed-optimizer", None)],
    "megatron_fsdp_optim": [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim"), ("--ckpt-format", "fsdp_dtensor")],
    "megatron_fsdp_optim_grads": [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim_grads"),
                                  ("--ckpt-format", "fsdp_dtensor")],
    "megatron_fsdp_optim_grads_params": [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim_grads_params"),
                                         ("--ckpt-format", "fsdp_dtensor")],
    "megatron_fsdp_hsdp": [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim_grads_params"),
                           ("--ckpt-format", "fsdp_dtensor")],
    # (--no-gradient-accumulation-fusion, which it needs: the plan's gradient_accumulation_fusion false, from the mode's
    # job_settings, plan.plan_dict)
    "torch_fsdp2": [("--use-torch-fsdp2", None), ("--ckpt-format", "torch_dist")],
}


def _precision_aware_layout(b: dict, mode, what: str, hint: str, moments_ok: bool, moment: Optional[str] = None):
    """Refuse bytes the precision-aware optimizer's export cannot say (Megatron with --bf16: bf16 weights, fp32 or bf16
    main gradients, fp32 master weights, two moments of one dtype) or a sharding mode without the distributed
    optimizer, which that optimizer needs (megatron/core/optimizer/__init__.py @d98e8a64 l. 1057)."""
    from .megatron import NO_DISTRIBUTED_OPTIMIZER

    if b["weights"] != 2.0 or b["gradients"] not in (2.0, 4.0) or not moments_ok or b["master"] != 4.0:
        raise _refuse("megatron", f"{what}: Megatron with --bf16 keeps bf16 weights, fp32 or bf16 main gradients, fp32 "
                                  "master weights and Adam moments of one dtype (fp32, bf16, fp8; "
                                  "--use-precision-aware-optimizer)", hint)
    if mode in NO_DISTRIBUTED_OPTIMIZER:
        held = f" (Adam moments in {moment})" if moment else ""
        raise _refuse("megatron", f"{what}: Megatron's precision-aware optimizer{held} runs only with the distributed "
                                  f"optimizer, not sharding mode {mode} (megatron/core/optimizer/__init__.py @d98e8a64 "
                                  "l. 1057)", "plan it with --sharding zero1 (--use-distributed-optimizer)")


def _megatron_state_flags(plan: dict, mode, notes: list) -> list:
    """The flags that give the plan's bytes_per_param in Megatron (megatron.py [5], [5b], the
    reader's inverse): 18 B none; mixed16 --grad-reduce-in-bf16; lower Adam moments (bf16-moments:
    DeepSeek-V3's bf16 m and v) the precision-aware optimizer, which needs the distributed
    optimizer. Where TE's FusedAdam then holds the master weights it keeps their 16-bit
    remainders, which the stack prices (stack_db megatron runs.low_precision_moments)."""
    from ..schema import BYTES_PER_PARAM_PRESETS

    bpp = plan.get("bytes_per_param")
    b = _plan_bytes(plan)
    if plan.get("fp16") and plan.get("precision_aware_optimizer"):
        raise _refuse("megatron", "precision_aware_optimizer with fp16: the planner writes the precision-aware optimizer "
                                  "with --bf16 only", "price it without fp16, or leave precision_aware_optimizer out")
    if plan.get("fp16"):  # --fp16 keeps the gradient buffer in fp16 unless --accumulate-allreduce-grads-in-fp32
        # (arguments.py @d98e8a64 validate_args l. 1195-1217: only --bf16 turns the fp32 accumulation on)
        if b == BYTES_PER_PARAM_PRESETS["megatron"].model_dump():
            return [("--accumulate-allreduce-grads-in-fp32", None)]
        if b == MIXED16:
            return []
        raise _refuse("megatron", f"bytes_per_param {bpp} with fp16: the planner writes fp16 with the megatron or mixed16 "
                                  "bytes only (16-bit weights, fp32 or fp16 gradients, fp32 master and Adam moments)",
                      "price it with --bytes-per-param megatron or mixed16, or without fp16")
    if plan.get("precision_aware_optimizer") and b["optimizer"] == 8.0:
        # the precision-aware optimizer with fp32 moments (the job's precision_aware_optimizer): its 16-bit main
        # gradients are --main-grads-dtype bf16, not --grad-reduce-in-bf16 (megatron.py [5b])
        _precision_aware_layout(b, mode, f"bytes_per_param {bpp} with precision_aware_optimizer",
                                "price it with --bytes-per-param megatron or mixed16", moments_ok=True)
        return [("--use-precision-aware-optimizer", None)] + ([("--main-grads-dtype", "bf16")] if b["gradients"] == 2.0 else [])
    if bpp is None or b == BYTES_PER_PARAM_PRESETS["megatron"].model_dump():
        return []
    if b == MIXED16:  # a bf16 gradient buffer (megatron.py [5]): the mixed16 preset's bytes
        return [("--grad-reduce-in-bf16", None)]
    moment = {8.0: "fp32", 4.0: "bf16", 2.0: "fp8"}.get(b["optimizer"])  # two moments of one dtype (DTYPE_BYTES)
    _precision_aware_layout(b, mode, f"bytes_per_param {bpp}", "price it with --bytes-per-param megatron, mixed16 or "
                            "bf16-moments", moments_ok=moment is not None, moment=moment)
    out = [("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", moment), ("--exp-avg-sq-dtype", moment)]
    if b["gradients"] == 2.0:
        out.append(("--main-grads-dtype", "bf16"))
    return out


def _megatron_offload_flags(plan: dict, args: list) -> list:
    """The optimizer's CPU offload (planner/offload.py hybrid_device; the reader's inverse, megatron._optimizer_offload):
    --optimizer-cpu-offload with the precision-aware optimizer Megatron requires for it (arguments.py @d98e8a64
    l. 1884-1888; fp32 states: the flag alone, no dtype flags), the fraction always written (its argparse default
    1.0, the config's 0.0), --overlap-cpu-optimizer-d2h-h2d where the plan overlaps."""
    if plan.get("offload_optimizer", "none") == "none":
        return []
    out = [] if ("--use-precision-aware-optimizer", None) in args else [("--use-precision-aware-optimizer", None)]
    out += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", f"{plan.get('offload_fraction', 1.0):g}")]
    if plan.get("offload_overlap"):
        out.append(("--overlap-cpu-optimizer-d2h-h2d", None))
    return out


def megatron_layout(chunks: list[int], mtp: int = 0) -> str:
    """Megatron-Core's --pipeline-model-parallel-layout for the model chunks' layer counts (in
    layer order; chunk j runs on pipeline rank j mod pp): 'E' the embedding on the first chunk,
    't' a transformer layer, 'm' a multi-token-prediction layer on the last chunk, 'L' the loss
    last, '|' between chunks (megatron/core/transformer/pipeline_parallel_layer_layout.py
    @d98e8a64 parse_str_to_list; 't*n' repeats)."""
    def part(n):
        return "" if n == 0 else ("t" if n == 1 else f"t*{n}")

    out = []
    for j, n in enumerate(chunks):
        body = part(n)
        if j == 0:
            body = "E" + body
        if j == len(chunks) - 1:
            body += ("m" if mtp == 1 else f"m*{mtp}" if mtp else "") + "L"
        out.append(body)
    return "|".join(out)


def stage_ends(plan: dict) -> tuple[int, int]:
    """(first_stage_layers, last_stage_layers) of a plan dict, 0 where it gives none (PlanArrays.split_first / split_last)."""
    return int(plan.get("first_stage_layers") or 0), int(plan.get("last_stage_layers") or 0)


def megatron_split_args(model, pp: int, vpp: int, e: int, l_: int, mtp: int | None = None, first: int = 0,
                        last: int = 0) -> list[tuple[str, object]]:
    """The Megatron arguments that place the planner's pipeline split (pipeline.chunk_layers):
    the plan's own first / last stage layers (Job first_stage_layers / last_stage_layers) as
    --decoder-first/last-pipeline-num-layers, with --num-virtual-stages-per-pipeline-rank (which
    arguments.py @d98e8a64 l. 954-956 requires beside them); else
    the virtual stages, and nothing more where pp x vpp divides the layers; the end stages'
    weights as --account-for-embedding/loss-in-pipeline-split where each end is at most one
    layer lighter; with one chunk per rank, --decoder-first/last-pipeline-num-layers; else the
    whole placement as --pipeline-model-parallel-layout (which sets vpp itself: arguments.py
    @d98e8a64 allows no --num-virtual-stages-per-pipeline-rank beside it)."""
    from ..pipeline import chunk_layers

    L = model.num_layers
    vflag = [("--num-virtual-stages-per-pipeline-rank", vpp)] if vpp > 1 else []
    if first > 0 or last > 0:  # Megatron's own uneven split, as priced (pipeline.py [14]; plan.uneven_split_error)
        return vflag + [(flag, n) for flag, n in (("--decoder-first-pipeline-num-layers", first),
                                                  ("--decoder-last-pipeline-num-layers", last)) if n > 0]
    chunks = chunk_layers(L, pp, vpp, e, l_)
    if min(chunks) < 0 or sum(chunks) != L:
        raise _refuse("megatron", f"pp {pp} x vpp {vpp} cannot place {L} layers (chunks {chunks})",
                      "choose pp x vpp with at most one chunk's worth of layers left over")
    c = max(chunks)
    wf, wl = c - chunks[0], c - chunks[-1]
    if len(set(chunks)) == 1:
        return vflag
    if wf <= 1 and wl <= 1 and all(n == c for n in chunks[1:-1]):
        return vflag + [(flag, None) for flag, w in (("--account-for-embedding-in-pipeline-split", wf),
                                                       ("--account-for-loss-in-pipeline-split", wl)) if w]
    if vpp == 1 and chunks[0] > 0 and chunks[-1] > 0:
        return [("--decoder-first-pipeline-num-layers", chunks[0]), ("--decoder-last-pipeline-num-layers", chunks[-1])]
    return [("--pipeline-model-parallel-layout", shlex_quote(megatron_layout(chunks, int(model.mtp_layers or 0) if mtp is None else mtp)))]


def shlex_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _run_lengths(pat: list[int]) -> str:
    """A 0/1 layer list as Megatron's list expression: runs joined, "([0]*3+[1]*58)"."""
    runs: list[list[int]] = []
    for x in pat:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    return "(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")"


def _window_args(model, F: str) -> list[tuple[str, object]]:
    """Per-layer kinds Megatron can place: sliding-window and full attention layers that differ
    in nothing else, as --window-size (W - 1),0 (TE's (left, right): W keys, the query's own
    included) and --window-attn-skip-freq N (every N-th layer full) or a 0/1 list (1 = windowed)
    (planner/trainers/megatron_model.py [8])."""
    w = model.layer_windows
    if w is None or any(k.mlp is not None for k in model.layer_kinds.values()) or len({x for x in w if x}) != 1:
        raise _refuse(F, f"model {model.name} has per-layer kinds (layer_pattern) other than sliding-window and full "
                         "attention layers, which the Megatron arguments the planner writes cannot place",
                      "export a model of one layer kind, or of sliding-window and full attention layers")
    args: list[tuple[str, object]] = [("--window-size", f"{max(w) - 1},0")]
    pat = [1 if x else 0 for x in w]
    if not all(pat):
        n = next((n for n in range(2, len(pat) + 1) if pat == [1 if (i + 1) % n else 0 for i in range(len(pat))]), None)
        args.append(("--window-attn-skip-freq", n if n is not None else f'"{_run_lengths(pat)}"'))
    return args


def _hybrid_symbol(model, name: str, k, F: str) -> str:
    """A layer kind as a --hybrid-layer-pattern symbol (hf_config.hybrid_block_table's inverse): M a Mamba-2 mixer
    alone, G a Gated DeltaNet mixer alone, * global attention alone at the model's positions, - the model's dense MLP
    alone, E its MoE MLP alone; any other kind refused naming it."""
    mixer, mlp = k.mixer, k.mlp
    mk, lk = getattr(mixer, "kind", None), getattr(mlp, "kind", None)
    if mk == "mamba2" and lk == "none":
        return "M"
    if mk == "gated_deltanet" and lk == "none":
        return "G"
    if mk == "global" and lk == "none" and not mixer.output_gate and (
            mixer.position is None or (mixer.position == "rope") == (model.position_embedding == "rope")):
        return "*"
    if mk == "none" and lk == "dense" and mlp.ffn_hidden_size in (None, model.ffn_hidden_size) \
            and mlp.gated in (None, model.gated_mlp):
        return "-"
    if mk == "none" and lk == "moe":
        return "E"
    raise _refuse(F, f"layer kind {name!r} of model {model.name} ({mk or 'default mixer'} with {lk or 'default MLP'}) is no "
                     "block of Megatron-LM's hybrid stack (M Mamba-2, G Gated DeltaNet, * attention at the model's positions, - the model's "
                     "MLP, E its MoE: hybrid_layer_allocation.py @d98e8a64 l. 14-26)",
                  "export a model whose layers are those blocks, or in another format")


def _hybrid_blocks(model, F: str) -> list[str] | None:
    """The model's layers as hybrid-stack symbols, one a layer; None for a model with no Mamba-2 mixer, no MLP-less
    Gated DeltaNet and no mixer-less block (a pretrain_gpt.py model)."""
    kinds = model.layer_kinds or {}
    if not any(getattr(k.mixer, "kind", None) in ("mamba2", "none") or (
            getattr(k.mixer, "kind", None) == "gated_deltanet" and getattr(k.mlp, "kind", None) == "none")
               for k in kinds.values()):
        return None
    sym = {name: _hybrid_symbol(model, name, k, F) for name, k in kinds.items()}
    pat = model.layer_pattern
    return [sym[pat[i % len(pat)]] for i in range(model.num_layers)]


def _hybrid_args(plan: dict, model, blocks: list[str], F: str) -> list[tuple[str, object]]:
    """--hybrid-layer-pattern with a '|' between the plan's model chunks (pipeline.chunk_layers: chunk j = vp x pp +
    pp_rank, Megatron's segment index, hybrid_layer_allocation.py @d98e8a64 l. 466-478, so the segments place the
    layers as priced and give vpp = segments / pp, arguments.py l. 840-863), --spec's TE hybrid stack and the Mamba
    mixer's shape (megatron_model.hybrid_spec reads them back); refused where the flags cannot say the plan."""
    from ..pipeline import chunk_layers

    if model.mla is not None:
        raise _refuse(F, f"model {model.name}: MLA in a hybrid stack, which the planner prices as pretrain_gpt.py builds "
                         "it, not as HybridStack does", "export a plan without it")
    pp, vpp = plan["pp"], plan["vpp"]
    # the plan's own first / last stage layers (Megatron's --decoder-first/last-pipeline-num-layers, which a '|' pattern
    # refuses beside it: hybrid_layer_allocation.py @d98e8a64 l. 377-383) placed by the segments, as priced
    first, last = stage_ends(plan)
    chunks = chunk_layers(model.num_layers, pp, vpp, int(plan.get("account_for_embedding_in_pipeline_split", False)),
                          split_loss_units(plan), first=first, last=last)
    if pp * vpp > 1 and min(chunks) <= 0:
        raise _refuse(F, f"the plan's model chunks {chunks} include an empty one, which a hybrid pattern's '|' segments "
                         "do not place", "choose pp x vpp with layers on every chunk")
    text, at = [], 0
    for n in (chunks if pp * vpp > 1 else [model.num_layers]):
        text.append("".join(blocks[at:at + n]))
        at += n
    mtp = _mtp(plan, model)
    if mtp:  # the MTP module's layers as '/' parts, one a depth (megatron_model.hybrid_mtp_spec reads them back)
        pat = model.layer_pattern
        sym = {n: blocks[pat.index(n)] for n in pat}  # a kind's symbol: the symbol of a main layer of that kind
        names = model.mtp_layer_pattern or [pat[(model.num_layers - 1) % len(pat)]]
        text[-1] += "".join("/" + "".join(sym[n] for n in names) for _ in range(mtp))
    args: list[tuple[str, object]] = [("--hybrid-layer-pattern", shlex_quote("|".join(text))),
                                      ("--spec", " ".join(HYBRID_TE_SPEC))]
    mambas = {(k.mixer.num_heads, k.mixer.head_dim, k.mixer.state_size, k.mixer.n_groups, k.mixer.conv_kernel,
               k.mixer.chunk_size, k.mixer.conv_bias, k.mixer.proj_bias)
              for k in model.layer_kinds.values() if getattr(k.mixer, "kind", None) == "mamba2"}
    if len(mambas) > 1:
        raise _refuse(F, f"model {model.name} has {len(mambas)} Mamba-2 shapes; Megatron's --mamba-* flags set one",
                      "export a model with one Mamba-2 shape")
    if mambas:
        H, P, N, G, w, Q, cb, pb = mambas.pop()
        if (w, Q, cb, pb) != (MAMBA_CONV_KERNEL, MAMBA_CHUNK, True, False):
            raise _refuse(F, f"model {model.name}'s Mamba-2 mixer has conv kernel {w}, chunk {Q}, conv bias {cb}, projection "
                             f"bias {pb}; Megatron-Core's MambaMixer fixes {MAMBA_CONV_KERNEL}, {MAMBA_CHUNK}, True, False "
                             "(mamba_mixer.py @d98e8a64 l. 174-194) and no flag sets them", "export in another format")
        args += [("--mamba-num-heads", H), ("--mamba-head-dim", P), ("--mamba-state-dim", N), ("--mamba-num-groups", G)]
    gdns = {(k.mixer.num_key_heads, k.mixer.num_value_heads, k.mixer.key_head_dim, k.mixer.value_head_dim,
             k.mixer.conv_kernel, k.mixer.chunk_size)
            for k in model.layer_kinds.values() if getattr(k.mixer, "kind", None) == "gated_deltanet"}
    if len(gdns) > 1:
        raise _refuse(F, f"model {model.name} has {len(gdns)} Gated DeltaNet shapes; Megatron's --linear-* flags set one",
                      "export a model with one Gated DeltaNet shape")
    if gdns:  # megatron_model.gdn_mixer reads them back (TransformerConfig's linear_* fields, [10])
        Hk, Hv, K, V, w, Q = gdns.pop()
        if Q != GDN_CHUNK:
            raise _refuse(F, f"model {model.name}'s Gated DeltaNet chunk is {Q}; Megatron-Core's GatedDeltaNet runs fla's "
                             f"chunk rule at {GDN_CHUNK} (gated_delta_net/gdn.py @d98e8a64 l. 73) and no flag sets it",
                          "export in another format")
        args += [("--linear-num-key-heads", Hk), ("--linear-num-value-heads", Hv), ("--linear-key-head-dim", K),
                 ("--linear-value-head-dim", V), ("--linear-conv-kernel-dim", w)]
    return args


def _megatron(plan: dict, notes: list[str]) -> str:
    hw = load_hardware(plan.get("hardware_file") or plan["hardware"])
    g = plan["gpus"]
    per_node = hw.gpus_per_node if g % hw.gpus_per_node == 0 else g
    args = _megatron_args(plan, notes)
    mode = plan.get("sharding_mode")
    fsdp = mode.startswith("megatron_fsdp") or mode == "torch_fsdp2"
    lines = ["#!/bin/bash", "# Megatron-LM launch written by `planner export --format megatron`",
             "# flag names: NVIDIA/Megatron-LM megatron/training/arguments.py and transformer_config.py @d98e8a64",
             f"# hardware {plan['hardware']}: {plan['gpus']} GPUs = {g // per_node} node(s) x {per_node}",
             # FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 (arguments.py validate_args)
             "export CUDA_DEVICE_MAX_CONNECTIONS=" + ("8" if fsdp else "1"),
             # PyTorch's cuBLAS workspaces as priced (memory.py [ws]; read back by megatron._exported_cublas)
             *([f"export CUBLAS_WORKSPACE_CONFIG={plan['cublas_workspace_config']}"]
               if plan.get("cublas_workspace_config") else []),
             *nccl_exports(plan), "",
             f"torchrun --nproc_per_node {per_node} --nnodes {g // per_node} {_megatron_script(plan)} \\"]
    body = [f"    {k}" + ("" if v is None else f" {v}") for k, v in args]
    lines += [ln + " \\" for ln in body[:-1]] + body[-1:]
    return "\n".join(lines) + "\n"


def _megatron_script(plan: dict) -> str:
    """pretrain_hybrid.py for a hybrid stack (it builds HybridModel from --hybrid-layer-pattern: hybrid_builders.py
    @d98e8a64 l. 12-44), else pretrain_gpt.py."""
    return "pretrain_hybrid.py" if _hybrid_blocks(_model(plan), "megatron") is not None else "pretrain_gpt.py"


def _megatron_args(plan: dict, notes: list[str], fork: bool = False) -> list[tuple[str, object]]:
    """The Megatron-LM @d98e8a64 argument words of the plan. fork: for Megatron-DeepSpeed's script
    (_megatron_deepspeed), which spells them in its fork's flags: the sharding mode, the optimizer
    states' bytes and the data-parallel overlap are then left out (the ds_config JSON holds them)."""
    from ..startup import uses_tp_pp_dp_mapping

    F = "megatron-deepspeed" if fork else "megatron"  # the format a refusal names
    model = _model(plan)
    tp, cp, pp, vpp, dp = plan["tp"], plan["cp"], plan["pp"], plan["vpp"], plan["dp"]
    args: list[tuple[str, object]] = [
        ("--num-layers", model.num_layers), ("--hidden-size", model.hidden_size), ("--ffn-hidden-size", model.ffn_hidden_size),
        ("--num-attention-heads", model.num_attention_heads)]
    # a pattern of MoE and dense layers alone is the fork's --expert-interval or refused by _mds_moe, naming it
    mlp_only = model.moe is not None and all(k.mixer is None for k in model.layer_kinds.values())
    hybrid = _hybrid_blocks(model, F)
    if hybrid is not None and fork:
        raise _refuse(F, f"model {model.name} is a hybrid Mamba stack, which the Megatron-DeepSpeed forks do not build",
                      "export it with --format megatron (pretrain_hybrid.py)")
    if hybrid is not None:
        args += _hybrid_args(plan, model, hybrid, F)
    elif model.layer_pattern is not None and not (fork and mlp_only):
        args += _window_args(model, F)
    if model.kv_heads != model.num_attention_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", model.kv_heads)]
    args += [("--kv-channels", model.dhead), ("--vocab-size", model.vocab_size),
             ("--max-position-embeddings", max(model.max_seq_len, plan["seq_len"]))]
    if not fork:  # the rows the plan priced (the forks' own: _mds_vocab, _fork_vocab)
        args += _megatron_vocab_rows(plan, model.vocab_size, tp, notes)
    if model.moe is not None:  # Megatron-Core MoE shape (arguments.py _add_moe_args; megatron_model.py reads them back)
        moe = model.moe
        args += [("--num-experts", moe.num_experts), ("--moe-router-topk", moe.top_k)]
        if moe.expert_ffn_hidden_size:
            args.append(("--moe-ffn-hidden-size", moe.expert_ffn_hidden_size))
        if moe.num_shared_experts:  # Megatron has one shared MLP of the shared experts' total width
            fs = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size or model.ffn_hidden_size
            args.append(("--moe-shared-expert-intermediate-size", moe.num_shared_experts * fs))
            if moe.shared_expert_gate:
                args.append(("--moe-shared-expert-gate", None))
        if model.layer_pattern is None and (moe.first_k_dense or moe.layer_freq != 1):
            if moe.first_k_dense:
                pat = [1 if (i >= moe.first_k_dense and i % moe.layer_freq == 0) else 0 for i in range(model.num_layers)]
                args.append(("--moe-layer-freq", f'"{_run_lengths(pat)}"'))
            else:
                args.append(("--moe-layer-freq", moe.layer_freq))
        if moe.router == "sigmoid":
            args.append(("--moe-router-score-function", "sigmoid"))
        if moe.expert_score_bias:  # aux-loss-free score bias: sigmoid scores only (transformer_config.py l. 2617-2625)
            if moe.router != "sigmoid":
                raise _refuse(F, f"expert_score_bias with a {moe.router} router ({plan['model']}): Megatron-Core refuses "
                                 "--moe-router-enable-expert-bias without a sigmoid or sqrtsoftplus score "
                                 "(transformer_config.py @d98e8a64 l. 2617-2625)",
                              "export the plan in another format, or plan the model with router sigmoid")
            args.append(("--moe-router-enable-expert-bias", None))
        if moe.router_linear_bias != model.linear_bias:  # Megatron's router linear has a bias iff add_bias_linear
            raise _refuse(F, f"router_linear_bias {str(moe.router_linear_bias).lower()} with linear_bias "
                             f"{str(model.linear_bias).lower()} ({plan['model']}): Megatron-Core gives the router's linear a "
                             "bias exactly when the other linears have one (moe/router.py @d98e8a64 l. 67-72: "
                             "config.add_bias_linear)",
                          "export the plan in another format, or plan the model with router_linear_bias equal to linear_bias")
        if moe.expert_groups:  # group-limited routing (arguments.py --moe-router-num-groups, --moe-router-group-topk)
            args += [("--moe-router-num-groups", moe.expert_groups), ("--moe-router-group-topk", moe.groups_per_token)]
        cf = plan.get("moe_capacity_factor")
        if cf is not None:  # tokens beyond it dropped (None: dropless); padded where the job pads (planner/imbalance.py)
            args.append(("--moe-expert-capacity-factor", cf))
            if plan.get("moe_pad_to_capacity"):
                args.append(("--moe-pad-expert-input-to-capacity", None))
        balancing = plan.get("moe_load_balancing")
        if balancing == "force" or plan.get("moe_rank_imbalance") == 1.0:  # balanced: Megatron's benchmark option
            args.append(("--moe-router-force-load-balancing", None))  # (planner/imbalance.py [3])
        elif balancing == "sinkhorn":
            args.append(("--moe-router-load-balancing-type", "sinkhorn"))
        # the router's path (planner/layers/moe.py router_saved_terms): Megatron's default type aux_loss takes the
        # coefficient (megatron.py _router reads it back); 0, Megatron's default, is not written
        if plan.get("moe_aux_loss_coeff"):
            args.append(("--moe-aux-loss-coeff", plan["moe_aux_loss_coeff"]))
        if plan.get("moe_z_loss_coeff"):
            args.append(("--moe-z-loss-coeff", plan["moe_z_loss_coeff"]))
        if plan.get("moe_router_pre_softmax"):
            args.append(("--moe-router-pre-softmax", None))
        if plan.get("moe_router_dtype"):  # None (the input's dtype) is Megatron's default, not written
            args.append(("--moe-router-dtype", plan["moe_router_dtype"]))
    if model.post_norms:  # Gemma's sandwich norms: a layer spec of Megatron-Bridge's, no flag of Megatron-LM's
        raise _refuse(F, f"post_norms ({plan['model']}): Megatron-LM's arguments have no flag for a norm on each "
                         "sub-block's output (Megatron-Bridge builds Gemma's with its own layer spec)",
                      "export the plan in another format, or plan the model without post_norms")
    if model.mla is not None:  # Megatron-Core MLA (arguments.py _add_mla_args)
        args.append(("--multi-latent-attention", None))
        if model.mla.q_lora_rank is not None:
            args.append(("--q-lora-rank", model.mla.q_lora_rank))
        args += [("--kv-lora-rank", model.mla.kv_lora_rank), ("--qk-head-dim", model.mla.qk_nope_head_dim),
                 ("--qk-pos-emb-head-dim", model.mla.qk_rope_head_dim), ("--v-head-dim", model.mla.v_head_dim)]
        if model.rope_scaling != "yarn":  # MLATransformerConfig.rope_type defaults to yarn (transformer_config.py
            # @d98e8a64 l. 3306; arguments.py --rope-type: 'MLA takes yarn by default'); its fusion is YaRN's only
            # (l. 3345-3346: the plan runs it off, plan._mla_rope_fusion, written as --no-rope-fusion below)
            args.append(("--rope-type", "rope"))
    mtp = _mtp(plan, model)
    if mtp:
        args.append(("--mtp-num-layers", mtp))
        if model.mtp_repeated_layer:  # one module run at every depth (megatron.repeated_mtp reads it back)
            args.append(("--mtp-use-repeated-layer", None))
    # alibi: BigScience's fork's only (its writer spells it; microsoft's fork refuses the flag, MDS_FORK_FLAGS)
    pos = {"rope": "rope", "learned": "learned_absolute", "none": "none",
           **({"alibi": "alibi"} if fork else {})}.get(model.position_embedding)
    if pos is None:
        raise _refuse(F, f"position_embedding {model.position_embedding}: Megatron's --position-embedding-type has no such choice",
                      "export a model with rope, learned or no position embeddings")
    rope_args = _megatron_rope_scaling(plan, model)
    if pos == "rope" and model.rope_scaling == "yarn" and model.mla is None:
        pos = "yarn"  # YarnRotaryEmbedding (gpt_model.py @d98e8a64 l. 196-214), its numbers in rope_args
    args.append(("--position-embedding-type", pos))
    args += rope_args
    args += _megatron_rotary_base(plan, model)
    # the activation (argument_utils.py @d98e8a64 l. 314-326): --swiglu (SiLU), --quick-geglu (gated quick GeLU),
    # --squared-relu (plain), none: GeLU (ModelSpec.mlp_activation)
    if model.gated_mlp:
        args.append(("--quick-geglu" if model.mlp_activation == "quick_gelu" else "--swiglu", None))
    elif model.mlp_activation == "squared_relu":
        args.append(("--squared-relu", None))
    if model.activation_clamp is not None and model.gated_mlp:  # priced where it runs (layers/moe.py clamp)
        # Megatron-Core's TransformerConfig.activation_func_clamp_value (transformer_config.py @d98e8a64 l. 235) has no
        # argument in Megatron-LM's parser (megatron/training/arguments.py @d98e8a64: none; Megatron-Bridge's gpt-oss
        # provider sets it in Python): the script's experts run an unclamped SwiGLU
        notes.append(f"activation_clamp {model.activation_clamp:g} ({plan['model']}): Megatron-LM @d98e8a64's arguments have "
                     "no flag for TransformerConfig.activation_func_clamp_value (Megatron-Bridge sets it in its model "
                     "provider): the script trains the experts' SwiGLU unclamped, without the clamp's kernels and its "
                     "saved copy that the plan priced (stack_db megatron activation_clamp, activation_clamp_saved: 2 B "
                     "an element of the routed experts' gate+up output); `planner check` reads the script back as the "
                     "catalog model, clamp included")
    args.append(("--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"))
    if not model.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    # linear biases are Megatron's default (add_bias_linear True, transformer_config.py @d98e8a64 l. 212): no flag;
    # before 2026-12-07 --add-bias-linear was written, a flag Megatron-LM's parser never defined (it refuses the script)
    if not model.linear_bias:
        args.append(("--disable-bias-linear", None))
    # TransformerConfig.qk_layernorm: TENorm on each head's query and key, or, with MLA, the latents' norms
    # before the up-projections (gpt_layer_specs.py @d98e8a64 l. 240-251), which the MLA block prices
    if model.qk_norm or model.mla is not None:
        args.append(("--qk-layernorm", None))
    # the probabilities priced (ModelSpec.hidden_dropout / attention_dropout; null: Megatron's 0.1 where dropout)
    args += [("--attention-dropout", _dropout(model, model.attention_dropout)),
             ("--hidden-dropout", _dropout(model, model.hidden_dropout))]
    # parallelism
    args += [("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp), ("--context-parallel-size", cp)]
    if plan.get("ep", 1) > 1:
        args.append(("--expert-model-parallel-size", plan["ep"]))
    # Megatron's default is tp (arguments.py @d98e8a64 l. 587-588). A dense model's too: initialize.py l. 392 passes it
    # to initialize_model_parallel, which builds the expert groups whatever the model (the CI's gpt3 tp2 cp2 etp4 cases)
    if (plan.get("etp") or tp) != tp and (model.moe is not None or not fork):
        args.append(("--expert-tensor-parallel-size", plan["etp"]))
    if model.moe is not None:
        args += _megatron_dispatcher(plan)
    if plan.get("ep_comm_overlap"):
        args.append(("--overlap-moe-expert-parallel-comm", None))
    if plan.get("moe_shared_expert_overlap"):  # the shared experts beside the all-to-alls (step.py [38])
        args.append(("--moe-shared-expert-overlap", None))
    if plan.get("cross_entropy_fusion_impl") == "te":
        raise _refuse(F, "cross_entropy_fusion_impl te: Megatron-LM's argument parser refuses --cross-entropy-fusion-impl te "
                         "(NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 1698); Megatron-Bridge configs set it",
                      "price it with the native fused loss (leave cross_entropy_fusion_impl out)")
    if plan.get("fp8_attention"):
        raise _refuse(F, "fp8_attention: Megatron-LM's argument parser has no --fp8-dot-product-attention (NVIDIA/"
                         "Megatron-LM @d98e8a64 megatron/training/arguments.py l. 2333: fp8_dot_product_attention is "
                         "among the TransformerConfig fields 'no CLI argument exists for'); Megatron-Bridge sets it "
                         "(mixed_precision.fp8_dot_product_attention)",
                      "export the plan without fp8_attention and set TransformerConfig.fp8_dot_product_attention "
                      "in the training code, or run it through Megatron-Bridge")
    if plan.get("cross_entropy_fusion"):
        args.append(("--cross-entropy-loss-fusion", None))
    args += _megatron_cuda_graphs(plan)
    if plan.get("fp8_param_gather"):
        args.append(("--fp8-param-gather", None))
    if plan.get("fp4_param_gather"):
        args.append(("--fp4-param-gather", None))
    if plan.get("moe_grouped_gemm"):
        args.append(("--moe-grouped-gemm", None))
    for flag, field in (("--moe-permute-fusion", "moe_permute_fusion"), ("--moe-router-fusion", "moe_router_fusion")):
        if plan.get(field):  # store_true (default off): written where the plan runs the fused kernel
            args.append((flag, None))
    # store_true (default off): the routing map padded for quantized grouped GEMMs, Megatron's experimental kernels
    # (planner/layers/moe.py [17]); written where the plan runs them
    for flag, field in (("--moe-router-padding-for-quantization", "moe_router_padding"),
                        ("--enable-experimental", "enable_experimental")):
        if plan.get(field):
            args.append((flag, None))
    if plan.get("deterministic_mode"):  # store_true (model_parallel_config.py @d98e8a64 l. 229): read back by
        args.append(("--deterministic-mode", None))  # megatron._deterministic; its cuBLAS workspace is the export line
    if plan.get("use_flash_attn"):  # store_true (arguments.py @d98e8a64 l. 2910), read by no model code there: written
        args.append(("--use-flash-attn", None))  # as given, read back by megatron._deterministic
    # the fusion switches the plan turned off (megatron.py [6]; the last also where its sharding mode runs it off:
    # --use-torch-fsdp2, plan.plan_dict)
    if plan.get("apply_rope_fusion") is False:
        args.append(("--no-rope-fusion", None))
    if plan.get("bias_activation_fusion") is False:  # argument_utils.py l. 314-319: the one --swiglu reads
        # --quick-geglu reads bias_gelu_fusion, as a plain MLP does (argument_utils.py l. 314-326)
        swiglu = model.gated_mlp and model.mlp_activation != "quick_gelu"
        args.append(("--no-bias-swiglu-fusion" if swiglu else "--no-bias-gelu-fusion", None))
    if plan.get("bias_dropout_fusion") is False:
        args.append(("--no-bias-dropout-fusion", None))
    if plan.get("gradient_accumulation_fusion") is False:
        args.append(("--no-gradient-accumulation-fusion", None))
    if plan.get("defer_embedding_wgrad") is not None:
        args += [("--defer-embedding-wgrad-compute", None), ("--wgrad-deferral-limit", plan["defer_embedding_wgrad"])]
    if plan.get("empty_unused_memory_level"):  # training_config.py @d98e8a64 l. 48-51 (memory.py [13])
        args.append(("--empty-unused-memory-level", plan["empty_unused_memory_level"]))
    if pp > 1 and fork:  # DeepSpeed's PipelineModule places the split itself (_mds_split checks it is the plan's)
        pass
    elif hybrid is not None:  # the pattern's '|' segments place the split and give vpp (_hybrid_args)
        pass
    elif pp > 1:  # the split as priced (planner/startup.py: Megatron places every split of pipeline.stage_layers)
        args += megatron_split_args(model, pp, vpp, int(plan.get("account_for_embedding_in_pipeline_split", False)),
                                    split_loss_units(plan), _mtp(plan, model), *stage_ends(plan))
    elif vpp > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", vpp))
    if plan.get("microbatch_group"):  # N of the interleaved schedule (model_parallel_config.py @d98e8a64 l. 431-449)
        args.append(("--microbatch-group-size-per-virtual-pipeline-stage", plan["microbatch_group"]))
    if plan.get("pp_p2p_overlap") is False:  # the pipeline p2p blocking (arguments.py @d98e8a64 l. 3118-3120)
        args.append(("--no-overlap-p2p-communication", None))
    if plan.get("pp_p2p_overlap_warmup_flush"):  # model_parallel_config.py @d98e8a64 l. 422-429 (step.py [13])
        args.append(("--overlap-p2p-communication-warmup-flush", None))
    if plan.get("cp_comm_type"):  # the context-parallel variant, where not p2p (arguments.py @d98e8a64 l. 3221-3226)
        args.append(("--cp-comm-type", plan["cp_comm_type"]))
    if plan.get("hierarchical_cp_sizes"):  # a2a+p2p's groups (arguments.py @d98e8a64 l. 580-585)
        args.append(("--hierarchical-context-parallel-sizes", " ".join(map(str, plan["hierarchical_cp_sizes"]))))
    if plan.get("sequence_parallel"):
        args.append(("--sequence-parallel", None))
    mode = plan.get("sharding_mode")
    if mode not in MEGATRON_MODE_FLAGS and not fork:
        raise _refuse(F, f"sharding {plan['sharding']} (mode {mode}) is not a Megatron-LM mode (stack_db megatron runs.sharding)",
                      "price it on --stack megatron")
    args += [] if fork else MEGATRON_MODE_FLAGS[mode]
    # Megatron-FSDP keeps its main gradients and reduces them in the parameters' dtype unless told (arguments.py
    # @d98e8a64 l. 3691-3698: --megatron-fsdp-main-grads-dtype / --megatron-fsdp-grad-comm-dtype default auto;
    # param_and_grad_buffer.py _resolve_group_grad_dtype l. 2313-2320; grad_reduce_in_fp32 is not read there):
    # the plan's fp32 gradients (4 B, as priced) are these two flags
    args += list(megatron_fsdp_grad_flags(plan))
    if plan.get("mfsdp_double_buffer"):  # Megatron-FSDP's fixed pools (memory.py [db]; arguments.py @d98e8a64 l. 3202)
        if fork or not str(mode).startswith("megatron_fsdp_"):
            raise _refuse(F, f"mfsdp_double_buffer with sharding mode {mode}: only Megatron-FSDP reads "
                             "--fsdp-double-buffer (arguments.py @d98e8a64 l. 1172-1181)",
                          "price it without mfsdp_double_buffer, or with a Megatron-FSDP sharding")
        args.append(("--fsdp-double-buffer", None))
    if plan.get("mfsdp_v2"):  # Megatron-FSDP v2 (memory.py [v2]; arguments.py @d98e8a64 l. 3158); start-up rule
        # MEGATRON_FSDP_V2_LAYOUT keeps its plans at optim_grads_params, tp / pp / cp 1, bf16
        if fork or mode != "megatron_fsdp_optim_grads_params":
            raise _refuse(F, f"mfsdp_v2 with sharding mode {mode}: Megatron-FSDP v2 runs optim_grads_params only "
                             "(mcore_fsdp_adapter.py @d98e8a64 l. 666-668)",
                          "price it without mfsdp_v2, or with sharding megatron_fsdp_optim_grads_params")
        args.append(("--megatron-fsdp-version", 2))
    if mode == "megatron_fsdp_hsdp" or (mode == "distributed_optimizer" and plan.get("shard_group")):
        # HSDP's replicas, or the distributed optimizer's instances (stack_db runs.sharding optimizer_instances)
        args.append(("--num-distributed-optimizer-instances", dp // plan["shard_group"]))
    if plan.get("mfsdp_outer_optim"):  # HSDP's optimizer over the replicas too (memory.py [oo]; arguments.py
        # @d98e8a64 l. 3193-3194); plan_dict writes it on HSDP plans only
        if fork or mode != "megatron_fsdp_hsdp":
            raise _refuse(F, f"mfsdp_outer_optim with sharding mode {mode}: only Megatron-FSDP's HSDP reads "
                             "--outer-dp-sharding-strategy (param_and_grad_buffer.py @d98e8a64 l. 2498-2512)",
                          "price it without mfsdp_outer_optim, or with --sharding hsdp on --stack megatron")
        args.append(("--outer-dp-sharding-strategy", "optim"))
    if plan.get("mla_down_proj_fusion"):  # MLA's fused TP-split down projection (layers/attention.py MLA.down_fused;
        # arguments.py @d98e8a64 l. 3566-3572); the Megatron-DeepSpeed forks build no MLA
        args.append(("--mla-down-proj-fusion", None))
    if plan.get("optimizer", "adam") != "adam":  # the job's update rule (memory.py [mu]); with
        # --use-distributed-optimizer validate_args runs Muon's layer-wise distributed optimizer (arguments.py @d98e8a64
        # l. 1725-1737), priced as the same level
        args.append(("--optimizer", plan["optimizer"]))
        if plan.get("optimizer_whole_tensors"):  # the layer-wise optimizer's legacy path (arguments.py l. 3160-3169)
            args.append(("--no-use-layer-wise-param-layout", None))
        if plan.get("muon_ns_steps"):  # Newton-Schulz steps other than 5 (arguments.py l. 2648-2649; step.py [28])
            args.append(("--muon-num-ns-steps", plan["muon_ns_steps"]))
        if plan.get("muon_split_qkv") is False:  # linear_qkv whole (arguments.py l. 2630-2632; step.py [28])
            args.append(("--muon-no-split-qkv", None))
        if plan.get("muon_fp32_matmul_prec"):  # a precision other than medium (arguments.py l. 2640-2642; step.py [28])
            args.append(("--muon-fp32-matmul-prec", plan["muon_fp32_matmul_prec"]))
        # Muon's TP mode as priced, always spelled (arguments.py l. 2650-2651; step.py [28]): a plan records it only
        # where it is not its stack's default, and a megatron-bridge plan written here (blockwise by default) would
        # otherwise run Megatron-LM's duplicated
        args.append(("--muon-tp-mode", priced_muon_tp_mode(plan)))
    rec = plan["recompute"]
    if rec == "full":
        rl = plan.get("recompute_layers")
        if rl is None:
            args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
        elif rl % vpp == 0:
            args += [("--recompute-granularity", "full"), ("--recompute-method", "block"), ("--recompute-num-layers", rl // vpp)]
        else:
            raise _refuse(F, f"recompute_layers {rl}: Megatron's block method counts layers per model chunk; {rl} is not a "
                             f"multiple of vpp {vpp}", "price a multiple of vpp")
    elif rec == "selective":
        args.append(("--recompute-granularity", "selective"))
        if plan.get("recompute_modules"):  # planner/recompute_modules.py; argparse nargs '+'
            args.append(("--recompute-modules", " ".join(plan["recompute_modules"])))
    ramp = plan.get("batch_size_schedule")  # Megatron refuses it beside --global-batch-size (arguments.py l. 698-701)
    args += [("--micro-batch-size", plan["micro_batch"]),
             ("--step-batch-size-schedule", shlex_quote(to_megatron([(p["from_tokens"], p["global_batch"]) for p in ramp])))
             if ramp else ("--global-batch-size", plan["global_batch"]), ("--seq-length", plan["seq_len"])]
    steps = None if ramp else _steps(plan)  # with a ramp, Megatron counts the steps from --train-samples
    if steps is not None:
        args.append(("--train-iters", steps))
    elif plan.get("tokens") is not None:
        if plan["tokens"] % plan["seq_len"] == 0:
            args.append(("--train-samples", int(plan["tokens"] // plan["seq_len"])))
        else:
            notes.append(f"tokens {plan['tokens']:.6g}: not a whole number of {plan['seq_len']}-token samples; left out")
    args.append(("--fp16", None) if plan.get("fp16") else ("--bf16", None))
    if not fork:
        args += _megatron_state_flags(plan, mode, notes)
        args += _megatron_offload_flags(plan, args)
    if plan["precision"] == "fp8":
        args += [("--fp8-format", "hybrid"), ("--fp8-recipe", plan.get("fp8_recipe") or "delayed")]
        notes.append("--fp8-format hybrid: the plan does not fix e4m3 vs hybrid (Megatron's example recipes use hybrid)")
    elif plan["precision"] == "nvfp4":  # transformer_config.py @d98e8a64: fp4 'e2m1', fp4_recipe 'nvfp4'
        args += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    if plan.get("bf16_layers_at_start") or plan.get("bf16_layers_at_end"):
        args += [("--first-last-layers-bf16", None),
                 ("--num-layers-at-start-in-bf16", str(plan.get("bf16_layers_at_start", 0))),
                 ("--num-layers-at-end-in-bf16", str(plan.get("bf16_layers_at_end", 0)))]
    if plan.get("tp_comm_overlap"):
        args.append(("--tp-comm-overlap", None))
    if plan.get("dp_comm_overlap") and not fork:
        args.append(("--overlap-grad-reduce", None))
        # arguments.py: distributed optimizer or Megatron-FSDP only; not where the plan exposes the gather (step.py [40])
        if mode != "ddp" and mode != "torch_fsdp2" and plan.get("dp_param_gather_overlap") is not False:
            args.append(("--overlap-param-gather", None))
    if bool(uses_tp_pp_dp_mapping(_plan_arrays(plan))):
        args.append(("--use-tp-pp-dp-mapping", None))
    if plan.get("torch_compile"):
        raise _refuse(F, "torch_compile on: Megatron-LM has no flag that compiles the model", "price it with --no-compile")
    if plan.get("transformer_impl") == "local":  # Megatron-Core's own layers (memory.py [12])
        args.append(("--transformer-impl", "local"))
        # its DotProductAttention's softmax (memory.py [sm]): the plan's attention_softmax_in_fp32 (absent: true, as
        # priced; Megatron-LM's argument default is false) and masked_softmax_fusion
        if plan.get("attention_softmax_in_fp32") is not False:
            args.append(("--attention-softmax-in-fp32", None))
        if plan.get("masked_softmax_fusion") is False:
            args.append(("--no-masked-softmax-fusion", None))
    elif plan.get("local_core_attention"):
        # validate_args l. 436-437 runs --attention-backend local only with --spec local, which
        # pretrain_gpt.py cannot build (gpt_builders.py l. 32-33: import_module takes a (module, name) pair)
        raise _refuse(F, "local_core_attention: Megatron-LM @d98e8a64 runs --attention-backend local only with --spec "
                         "local (megatron/training/arguments.py validate_args l. 436-437), and pretrain_gpt.py builds no "
                         "model from it (gpt_builders.py l. 32-33, megatron/core/transformer/spec_utils.py import_module "
                         "l. 41-48: a (module, name) pair)",
                      "price the plan with transformer_impl local (--transformer-impl local) or attention eager "
                      "(--attention-backend unfused)")
    elif plan.get("attention") == "eager":  # unfused core attention (megatron.py [4])
        args.append(("--attention-backend", "unfused"))
    elif plan.get("attention_kernel") and plan["attention_kernel"] != _auto_attention_kernel(plan):
        # a kernel other than TE's own choice on this GPU (compute.py [7a]): flash2 -> flash, cudnn -> fused
        args.append(("--attention-backend", "flash" if plan["attention_kernel"] == "flash2" else "fused"))
    return args


# the planner's dispatchers in Megatron's flags (planner/dispatch.py [1]; megatron.py _dispatcher
# reads them back): --moe-token-dispatcher-type allgather | alltoall | flex, flex with
# --moe-flex-dispatcher-backend deepep | hybridep (NVIDIA/Megatron-LM megatron/training/arguments.py)
MEGATRON_DISPATCHER_FLAGS = {
    "alltoall": [("--moe-token-dispatcher-type", "alltoall")],
    "allgather": [("--moe-token-dispatcher-type", "allgather")],
    "deepep": [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")],
    "hybridep": [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "hybridep")],
}


def _dropout(model, p) -> str:
    """A dropout probability as Megatron's flag takes it: the model's own, else 0.1 (TransformerConfig's default,
    megatron_model.DEFAULT_DROPOUT) where it has dropout, else 0."""
    from .megatron_model import DEFAULT_DROPOUT

    return repr(float(p if p is not None else DEFAULT_DROPOUT if model.dropout else 0.0))


def _megatron_cuda_graphs(plan: dict) -> list:
    """--cuda-graph-impl and --cuda-graph-modules (Megatron-LM @d98e8a64 transformer_config.py l. 1075-1106;
    arguments.py l. 2047-2050: --cuda-graph-modules nargs '+', default [] the whole layer)."""
    impl = plan.get("cuda_graph_impl", "none")
    if impl == "none":
        return []
    scope = plan.get("cuda_graph_scope") or []
    mods = [("--cuda-graph-modules", " ".join(scope))] if scope else []  # argparse's default []: the whole layer
    return [("--cuda-graph-impl", impl)] + mods


def _megatron_dispatcher(plan: dict) -> list:
    """The MoE token dispatcher the plan was priced with, as Megatron's flags (written always:
    Megatron's own default is allgather); refused where Megatron has no flag for it."""
    name = plan.get("moe_dispatcher") or "alltoall"
    if name not in MEGATRON_DISPATCHER_FLAGS:
        raise _refuse("megatron", f"moe_dispatcher {name}: Megatron-LM's --moe-token-dispatcher-type / "
                                  f"--moe-flex-dispatcher-backend have no such dispatcher",
                      f"price it with one of {', '.join(MEGATRON_DISPATCHER_FLAGS)}")
    if _grouped_experts_on(plan) is False:
        raise _refuse("megatron", "fp8_grouped_experts false: Megatron-LM @d98e8a64 runs the routed experts' "
                                  "TEGroupedLinear under the layer's fp8 autocast (transformer_block.py l. 354, "
                                  "fp8_utils.py get_fp8_context), no flag keeps them bf16 (step.py [16])",
                      "price it without fp8_grouped_experts (Megatron's rule: the experts in the recipe's precision)")
    if plan.get("moe_fp8_dispatch"):
        raise _refuse("megatron", "moe_fp8_dispatch: Megatron-LM @d98e8a64 dispatches fp8 tokens only with "
                                  "--moe-dispatch-fwd-dtype mxfp8, which it refuses on every dispatcher but the ncclep "
                                  "flex backend (transformer_config.py l. 1776-1784), one the planner does not price "
                                  "(planner/dispatch.py [11])", "price it with moe_fp8_dispatch: false")
    return list(MEGATRON_DISPATCHER_FLAGS[name])


# ------------------------------------------------------------------------ DeepSpeed
def _deepspeed(plan: dict, notes: list[str]) -> str:
    F = "deepspeed"
    tp, cp, pp = plan["tp"], plan["cp"], plan["pp"]
    for name, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", plan.get("ep", 1))):
        if v > 1:
            raise _refuse(F, f"{name} {v}: a DeepSpeed JSON has no {name.upper()} (Megatron-DeepSpeed takes it as a launch "
                             "argument)", "export it as --format megatron-deepspeed (the launch script, its JSON inside), "
                             "or a plan with tp = pp = cp = ep = 1 as a DeepSpeed JSON")
    if plan.get("partition_activations"):  # Megatron-DeepSpeed's flag overrides the JSON's (memory.py [pa])
        raise _refuse(F, "partition_activations: Megatron-DeepSpeed's --partition-activations launch flag, which "
                         "overrides a JSON activation_checkpointing section (deepspeed.checkpointing.configure takes "
                         "the flag's value, DeepSpeed @38327e07 activation_checkpointing/checkpointing.py l. 1084-1088)",
                      "price it without partition_activations, and add the flag to the launch")
    if plan.get("sync_tp_duplicated_parameters"):  # BigScience's launch flag (step.tp_comm [sy]), no JSON key
        raise _refuse(F, "sync_tp_duplicated_parameters: BigScience's Megatron-DeepSpeed --sync-tp-duplicated-parameters "
                         "launch flag, which a DeepSpeed JSON has no key for",
                      "price it without sync_tp_duplicated_parameters, and add the flag to the launch")
    # what the model code sets, which a DeepSpeed JSON has no key for and its reader (trainers/deepspeed.py) leaves to
    # the stack (None; mtp_layers 0): refused where the plan runs it (plan_signature: the fp32 softmax only on the eager
    # core, grouped GEMMs only with experts), as partition_activations above: the file would read back as another plan
    sig = plan_signature(plan)
    for k, flag in (("mtp_layers", "--mtp-num-layers"), ("attention_softmax_in_fp32", "--attention-softmax-in-fp32"),
                    ("masked_softmax_fusion", "--no-masked-softmax-fusion"), ("moe_grouped_gemm", "--moe-grouped-gemm")):
        if sig.get(k) not in (None, 0) or sig.get(k) is False:
            raise _refuse(F, f"{k} {plan[k]}: set in the model code (Megatron-DeepSpeed's {flag} launch flag), which a "
                             "DeepSpeed JSON has no key for", "export it as --format megatron-deepspeed (the launch "
                             f"script, its JSON inside), or price it without {k}")
    # the embedding's rows: built from the launch's tokenizer (--tokenizer-type, --vocab-size) and
    # --make-vocab-size-divisible-by (microsoft/Megatron-DeepSpeed @f4157bea megatron/tokenizer/tokenizer.py l. 38-41, 52,
    # 58-71), which a DeepSpeed JSON has no key for: its reader (trainers/deepspeed.py, stack megatron-deepspeed) prices the
    # model's tokens padded by the stack's rule (stack_db vocab_padding, 128 x tp 1). Refused where the plan priced other
    # rows (a job's padded_vocab_size or make_vocab_size_divisible_by): the file would read back as another plan
    from ..catalog import load_stack

    m, pad = _model(plan), load_stack("megatron-deepspeed").vocab_padding
    read = m.vocab_size if pad is None else -(-m.vocab_size // pad.divisor) * pad.divisor
    want = plan_rows(plan, m.vocab_size)
    if want != read:
        what = (f"padded_vocab_size {want:,}" if plan.get("padded_vocab_size") else
                f"make_vocab_size_divisible_by {plan.get('make_vocab_size_divisible_by')}: {want:,} rows")
        raise _refuse(F, f"{what}: the embedding's rows, built by "
                         "the launch's tokenizer and --make-vocab-size-divisible-by (microsoft/Megatron-DeepSpeed @f4157bea "
                         "megatron/tokenizer/tokenizer.py l. 38-41, 58-71), which a DeepSpeed JSON has no key for; read back "
                         f"with --model it has {m.name}'s {m.vocab_size:,} tokens padded to {read:,}",
                      "export it as --format megatron-deepspeed (the launch script, its JSON inside), or price it "
                      "without padded_vocab_size / make_vocab_size_divisible_by")
    cfg = deepspeed_config(plan, F)
    if plan.get("attention", "flash") != "flash":  # the reader assumes a fused core (trainers/deepspeed.py)
        notes.append(f"attention {plan['attention']}: set in the model code, not in a DeepSpeed JSON; pass --attention "
                     f"{plan['attention']} when reading it back")
    if plan["recompute"] != "none":
        notes.append(f"recompute {plan['recompute']}: set in the model code (Hugging Face gradient_checkpointing), "
                     "not in a DeepSpeed JSON; pass --recompute when reading it back")
    notes.append(f"the JSON does not name the model, the GPU count or the sequence length: read it back with --model "
                 f"{plan.get('model_file') or plan['model']} --gpus {plan['gpus']} "
                 f"--hardware {plan.get('hardware_file') or plan['hardware']} "
                 f"--seq-len {plan['seq_len']}")
    return json.dumps(cfg, indent=2) + "\n"


def deepspeed_config(plan: dict, F: str) -> dict:
    """The DeepSpeed JSON of the plan (batch keys, precision, zero_optimization): the one writer of it, for
    `export --format deepspeed` and the ds_config a Megatron-DeepSpeed script writes (_megatron_deepspeed)."""
    dp = plan["dp"]
    mode = plan.get("sharding_mode")
    # bf16_optimizer: bf16 at stage 0 runs DeepSpeed's BF16_Optimizer (engine.py @38327e07 get_data_types l. 1017-1019:
    # fp32 accumulation by default without ZeRO; _do_optimizer_sanity_check l. 1300-1350), read back as that mode;
    # zero0: fp16 at stage 0, the replicated FP16_Optimizer (l. 1344-1345), the only precision the mode runs
    # (stack_db megatron-deepspeed runs.sharding job_settings: the plan says fp16)
    stages = {"zero0": 0, "zero1": 1, "zero2": 2, "zero3": 3, "zero3_mics": 3, "bf16_optimizer": 0}
    if mode == "zero0" and not plan.get("fp16"):  # a plan written before zero0 ran fp16 only (issue 22)
        raise _refuse(F, "sharding none (mode zero0) in bf16: DeepSpeed runs bf16 at zero_optimization.stage 0 as its "
                         "BF16_Optimizer (fp32 master and Adam states partitioned, an fp32 gradient buffer; engine.py "
                         "@38327e07 l. 1010-1025, 1300-1350), not as the replicated states priced",
                      "price it with --sharding bf16_optimizer (what the JSON with stage 0 and bf16 runs), or with "
                      "--fp16 (zero0 is fp16's FP16_Optimizer)")
    if mode not in stages:
        raise _refuse(F, f"sharding {plan['sharding']} (mode {mode}) is not a DeepSpeed ZeRO stage", "price it on --stack megatron-deepspeed")
    from ..schema import BYTES_PER_PARAM_PRESETS

    b = plan.get("bytes_per_param")  # a preset's name or its bytes
    b = BYTES_PER_PARAM_PRESETS[b].model_dump() if isinstance(b, str) and b in BYTES_PER_PARAM_PRESETS else b
    if b is not None and {k: float(v) for k, v in dict(b).items()} != {
            k: float(v) for k, v in BYTES_PER_PARAM_PRESETS["mixed16"].model_dump().items()}:
        raise _refuse(F, f"bytes_per_param {plan['bytes_per_param']}: a DeepSpeed JSON's bf16 / fp16 section runs mixed16 "
                         "(16-bit weights and gradients, fp32 master and Adam states), as its reader "
                         "(trainers/deepspeed.py) prices it", "price it with --bytes-per-param mixed16")
    gbs, mbs = plan["global_batch"], plan["micro_batch"]
    zero: dict = {"stage": stages[mode], "overlap_comm": bool(plan.get("dp_comm_overlap"))}
    if mode == "zero3_mics":
        zero["mics_shard_size"] = plan["shard_group"]
    zero.update(plan.get("deepspeed_zero3") or {})  # ZeRO-3's settings the job changed from DeepSpeed's defaults
    if "contiguous_gradients" in zero:  # a JSON boolean (the job's 0 / 1)
        zero["contiguous_gradients"] = bool(zero["contiguous_gradients"])
    # CPU offload (planner/offload.py): pinned host buffers, as priced (offload_config.py @38327e07 pin_memory, l. 45, 72)
    for k in ("offload_optimizer", "offload_param"):
        if plan.get(k, "none") != "none":
            zero[k] = {"device": plan[k], "pin_memory": True}
    cfg = {
        "train_batch_size": gbs,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": gbs // (dp * mbs),
        # fp16: with DeepSpeed's default dynamic loss scaling (deepspeed.ai/docs/config-json fp16.loss_scale 0; numerics only)
        **({"fp16": {"enabled": True}} if plan.get("fp16") else {"bf16": {"enabled": True}}),
        "zero_optimization": zero,
    }
    if plan["precision"] != "bf16":
        raise _refuse(F, f"precision {plan['precision']}: not a DeepSpeed JSON setting (Transformer Engine in the model code)", "price it in bf16")
    if plan.get("torch_compile"):
        raise _refuse(F, "torch_compile on: not written (DeepSpeed's `compile` section differs between releases)",
                      "price it with --no-compile")
    return cfg


# ------------------------------------------------------------------------ Megatron-DeepSpeed
# microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py: the flags its launch script is written with, each with
# the line that adds it (the fork's, 2022 Megatron-LM with DeepSpeed's; its examples_deepspeed/pretrain_llama2_
# distributed.sh is the canonical script: torchrun pretrain_gpt.py, the JSON by `cat <<EOT > $DS_CONFIG`, --deepspeed
# --deepspeed_config --zero-stage). A Megatron-LM @d98e8a64 flag the plan needs and the fork lacks is refused, named.
MDS_FORK_FLAGS = {
    "--num-layers": 602, "--hidden-size": 616, "--ffn-hidden-size": 618, "--num-attention-heads": 621,
    "--num-key-value-heads": 623, "--kv-channels": 625, "--max-position-embeddings": 630,
    "--use-rotary-position-embeddings": 633, "--rotary-position-embeddings-theta": 635, "--no-position-embedding": 640,
    "--normalization": 647, "--squared-relu": 668, "--swiglu": 670, "--untie-embeddings-and-output-weights": 680,
    "--attention-dropout": 768, "--hidden-dropout": 770, "--micro-batch-size": 801, "--global-batch-size": 808,
    "--recompute-granularity": 830, "--recompute-method": 842, "--recompute-num-layers": 851,
    "--checkpoint-activations": 864, "--checkpoint-num-layers": 871, "--train-iters": 873, "--train-samples": 877,
    "--no-masked-softmax-fusion": 899, "--no-bias-gelu-fusion": 904, "--no-bias-dropout-fusion": 907,
    "--disable-bias-linear": 937, "--no-pipeline-parallel": 954, "--sequence-parallel": 972,
    "--no-gradient-accumulation-fusion": 986, "--fp16": 1111, "--bf16": 1113, "--no-query-key-layer-scaling": 1129,
    "--attention-softmax-in-fp32": 1132,
    "--tensor-model-parallel-size": 1149, "--pipeline-model-parallel-size": 1154, "--empty-unused-memory-level": 1201,
    "--vocab-size": 1269, "--seq-length": 1278, "--transformer-impl": 516, "--zero-stage": 1487,
    "--deepspeed-activation-checkpointing": 1524, "--partition-activations": 1526, "--cpu-optimizer": 948,
    "--use-flash-attn-v2": 930, "--rampup-batch-size": 815, "--tokenizer-type": 1299,
    "--make-vocab-size-divisible-by": 644,
    # DeepSpeed-MoE (_mds_moe)
    "--num-experts": 608, "--topk": 612, "--expert-interval": 614, "--moe-train-capacity-factor": 913,
    "--moe-min-capacity": 917, "--moe-loss-coeff": 919, "--create-moe-param-group": 921, "--enable-expert-tensor-parallelism": 1151,
    "--moe-expert-parallel-size": 1159,
}
# Megatron-LM @d98e8a64's spellings the fork writes otherwise ([1] of megatron_deepspeed.py; its reader maps them back)
_MDS_SAME_DEFAULT = {("--context-parallel-size", 1),  # the fork has no CP (stack_db megatron-deepspeed runs.max_cp 1)
                     ("--add-bias-linear", None),  # the fork's default: --disable-bias-linear is store_false (l. 937)
                     ("--group-query-attention", None),  # --num-key-value-heads alone (l. 623)
                     ("--position-embedding-type", "learned_absolute")}  # the fork's default (no rotary, l. 633)


def mds_moe_interval(model) -> Optional[int]:
    """N where the model's MoE layers are Megatron-DeepSpeed's for --expert-interval N: the layers i (0-based) with
    (i + 1) % N == 0 (@f4157bea megatron/model/transformer.py get_num_experts_per_layer l. 1650-1660), every other layer
    the same dense MLP of --ffn-hidden-size and every layer the default mixer; else None. A model without a
    layer_pattern: 1 where every layer is MoE. With one (period p, its kinds' mlp set, mixer left out, the dense MLP at
    the model's width and gating): N = the first MoE layer + 1, checked over the pattern's first p layers (or L, if
    fewer), where N divides p (so both repeat every p layers; else None). O(p), never O(num_layers)."""
    moe = model.moe
    if moe is None:
        return None
    if model.layer_pattern is None:
        return 1 if (moe.first_k_dense == 0 and moe.layer_freq == 1) else None
    pat, L = model.layer_pattern, model.num_layers
    kinds = model.layer_kinds
    is_moe = {}
    for name in set(pat):
        k = kinds.get(name)
        if k is None or k.mixer is not None or k.mlp is None:
            return None
        if k.mlp.kind == "dense" and (getattr(k.mlp, "ffn_hidden_size", None) not in (None, model.ffn_hidden_size)
                                      or getattr(k.mlp, "gated", None) not in (None, model.gated_mlp)):
            return None
        is_moe[name] = k.mlp.kind == "moe"
    p = len(pat)
    first = next((i for i in range(min(p, L)) if is_moe[pat[i]]), None)
    if first is None:
        return None
    n = first + 1
    if p % n and L > p:
        return None
    return n if all(is_moe[pat[i]] == ((i + 1) % n == 0) for i in range(min(p, L))) else None


MDS_MIN_CAPACITY = 4  # --moe-min-capacity's default (microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py l. 917)


def _mds_moe(plan: dict, args: list) -> list:
    """The Megatron writer's MoE flags (Megatron-Core's) as microsoft/Megatron-DeepSpeed @f4157bea spells DeepSpeed-MoE
    (megatron/model/transformer.py l. 1060-1082; megatron_deepspeed._deepspeed_moe reads them back): --num-experts E,
    --topk k (TopKGate runs any k: top1gating, top2gating, topkgating, microsoft/DeepSpeed @38327e07 deepspeed/moe/
    sharded_moe.py l. 513-524), --expert-interval N (mds_moe_interval: every layer MoE, N = 1, or a layer pattern of
    N - 1 dense kinds and a moe kind), --moe-expert-parallel-size ep,
    --enable-expert-tensor-parallelism where the experts are split over TP (etp = tp > 1), --moe-train-capacity-factor
    cf (DeepSpeed drops the tokens beyond it and pads every expert to it: the plan's moe_capacity_factor with
    moe_pad_to_capacity), --moe-min-capacity (the plan's moe_min_capacity, where not the fork's 4), --moe-loss-coeff, --create-moe-param-group (ZeRO-1/2 asserts the MoE groups). At pp > 1
    with tp > 1 the JSON's pipeline section turns the engine's partitioned pipe tensors off (_mds_pipe_section). Refused, named:
    another placement, an expert width other than --ffn-hidden-size, a dropless plan or one not padded; expert TP
    other than 1 or tp and ZeRO-3 are start-up rule DEEPSPEED_MOE's, sequence parallelism at tp > 1
    DEEPSPEED_MOE_SP's (export's _check_runnable)."""
    F = "megatron-deepspeed"
    model = _model(plan)
    if model.moe is None:
        return args
    moe = model.moe
    interval = mds_moe_interval(model)
    if interval is None:
        placed = (f"layer_pattern {model.layer_pattern[:8]}{' ...' if len(model.layer_pattern) > 8 else ''}"
                  if model.layer_pattern is not None else
                  f"MoE layers i >= first_k_dense {moe.first_k_dense} with i % layer_freq {moe.layer_freq} == 0")
        raise _refuse(F, f"{placed} ({plan['model']}): Megatron-DeepSpeed's layers differ only in being MoE or dense, "
                         "the MoE ones every layer i (1-based) with i % --expert-interval == 0 (@f4157bea "
                         "megatron/model/transformer.py get_num_experts_per_layer l. 1650-1660): never the first layer "
                         "of several, nor another placement",
                      "price a model whose every N-th layer is MoE from the N-th (a layer_pattern of N - 1 dense "
                      "kinds and one moe kind, or every layer), or export --format megatron")
    if (moe.expert_ffn_hidden_size or model.ffn_hidden_size) != model.ffn_hidden_size:
        raise _refuse(F, f"expert_ffn_hidden_size {moe.expert_ffn_hidden_size} with ffn_hidden_size {model.ffn_hidden_size} "
                         f"({plan['model']}): Megatron-DeepSpeed's experts are ParallelMLP(config) of --ffn-hidden-size "
                         "(@f4157bea megatron/model/transformer.py l. 1070-1072); no flag sets another width",
                      "export --format megatron on --stack megatron")
    tp, etp = plan["tp"], plan.get("etp") or plan["tp"]
    if plan.get("moe_capacity_factor") is None or not plan.get("moe_pad_to_capacity"):
        what = ("dropless (no moe_capacity_factor): DeepSpeed's --disable-moe-token-dropping pads every expert to the "
                "busiest expert's count over the EP group (@38327e07 deepspeed/moe/sharded_moe.py top1gating l. 214-225), "
                "not the dropless dispatch priced" if plan.get("moe_capacity_factor") is None else
                f"moe_capacity_factor {plan['moe_capacity_factor']} without moe_pad_to_capacity: DeepSpeed's MOELayer "
                "dispatches an [E, C, d] tensor (sharded_moe.py l. 609), every expert padded to the capacity")
        raise _refuse(F, what, "price it with --moe-capacity-factor CF --moe-pad-to-capacity (DeepSpeed's default: 1.0, "
                               "tokens beyond it dropped, every expert padded to it)")
    out = []
    for k, v in args:
        if k == "--moe-router-topk":
            k = "--topk"
        elif k == "--expert-model-parallel-size":
            k = "--moe-expert-parallel-size"
        elif k == "--moe-expert-capacity-factor":
            k = "--moe-train-capacity-factor"
        elif k == "--moe-aux-loss-coeff":
            k = "--moe-loss-coeff"
        elif k in ("--moe-pad-expert-input-to-capacity", "--moe-ffn-hidden-size", "--expert-tensor-parallel-size") or (
                k, v) == ("--moe-token-dispatcher-type", "alltoall"):
            continue  # DeepSpeed's padding always; the width and expert TP checked above; its one dispatcher
        out.append((k, v))
        if k == "--topk":
            out.append(("--expert-interval", interval))
    if etp == tp > 1:
        out.append(("--enable-expert-tensor-parallelism", None))
    if plan.get("moe_min_capacity", MDS_MIN_CAPACITY) != MDS_MIN_CAPACITY:  # the capacity's floor, written where not
        out.append(("--moe-min-capacity", plan["moe_min_capacity"]))  # the fork's default
    out.append(("--create-moe-param-group", None))
    return out


def _mds_pipe_section(plan: dict, cfg: dict) -> None:
    """The JSON's "pipeline": {"pipe_partitioned": false, "grad_partitioned": false} where the plan needs it
    (mds_pipe_unpartitioned). What the two change is the pipeline's p2p: off, each stage sends every rank's whole
    output, T h / (tp under SP) bf16 elements, and its gradient back, with no TP all-gather on arrival (engine.py
    l. 719-733, 743-761, 826-851: PartitionedTensor's 1 / tp slice and .full() all-gather skipped): the send
    step.py pp_comm prices, plus the aggregated MoE loss, a 0-d tensor a micro-batch each way (one p2p latency,
    not priced, with MoE)."""
    from ..plan import mds_pipe_unpartitioned

    if mds_pipe_unpartitioned(_model(plan), plan["tp"], plan["pp"], bool(plan.get("sequence_parallel"))) \
            or (plan.get("pipe_partitioned") is False and plan["pp"] > 1 and plan["tp"] > 1):  # the job turned them off
        cfg["pipeline"] = {"pipe_partitioned": False, "grad_partitioned": False}


def _mds_split(plan: dict, notes: list[str]) -> None:
    """The plan's pipeline split is the one microsoft/Megatron-DeepSpeed @f4157bea runs, which no argument sets:
    GPTModelPipe hands DeepSpeed's PipelineModule partition_method='type:transformer' (megatron/model/gpt_model.py
    l. 463), and partition_balanced gives the first L mod pp stages one transformer layer more (stack_db
    megatron-deepspeed pipeline_split front, the plan's own rule). The embedding and the output layer counted as
    layers of the split (BigScience's --pp-partition-method 'type:transformer|embedding') are refused: the fork has
    no such argument, so its script would run the other split."""
    pp = plan["pp"]
    e, l_ = bool(plan.get("account_for_embedding_in_pipeline_split")), split_loss_units(plan)
    if pp > 1 and (e or l_):
        counted = " and ".join(n for n, on in (("account_for_embedding_in_pipeline_split", e),
                                                ("account_for_loss_in_pipeline_split", l_)) if on)
        raise _refuse("megatron-deepspeed",
                      f"{counted}: microsoft/Megatron-DeepSpeed @f4157bea's GPTModelPipe partitions the pipeline with "
                      "partition_method='type:transformer' (megatron/model/gpt_model.py l. 463), which no argument "
                      "changes: only the transformer layers are counted (BigScience's fork's --pp-partition-method "
                      "'type:transformer|embedding', bigscience-workshop/Megatron-DeepSpeed @8387ae17 arguments.py l. 578, "
                      "counts the two ends; microsoft's arguments.py has no such flag)",
                      "price it without account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split "
                      "(DeepSpeed's own placement: the first L mod pp stages one layer more)")
    L = _model(plan).num_layers
    if pp > 1 and L % pp:
        q, r = divmod(L, pp)
        notes.append(f"pipeline split: {L} layers on {pp} stages, no flag: DeepSpeed's partition_balanced (microsoft/"
                     f"DeepSpeed @38327e07 deepspeed/runtime/utils.py l. 583-621) over GPTModelPipe's transformer layers "
                     f"gives the first {r} stage(s) {q + 1} and the other {pp - r} {q}, as priced")


# The older forks (issue 22), each written in its own flags at the stack's pinned commit, or refused naming the setting:
# microsoft/Megatron-DeepSpeed b56b50bb (2021-07-02, the first with DeepSpeed's engine; stack megatron-deepspeed-2021)
# and bigscience-workshop/Megatron-DeepSpeed 497aa1bf (2022-03-11, BLOOM-176B's launch; stack
# megatron-deepspeed-bigscience). Each table: the flag -> its line in that commit's megatron/arguments.py ("--deepspeed"
# and "--deepspeed_config": DeepSpeed's deepspeed.add_config_arguments, _add_core_arguments, which both forks' parse_args
# call). A flag the microsoft writer spells and the fork's table lacks is refused, named with the setting it writes.
MDS2021_FLAGS = {
    "--num-layers": 268, "--hidden-size": 270, "--ffn-hidden-size": 272, "--num-attention-heads": 275, "--kv-channels": 277,
    "--max-position-embeddings": 282, "--make-vocab-size-divisible-by": 285, "--attention-dropout": 344,
    "--hidden-dropout": 346, "--micro-batch-size": 370, "--global-batch-size": 377, "--rampup-batch-size": 384,
    "--checkpoint-activations": 396,
    "--train-iters": 405, "--train-samples": 409, "--no-masked-softmax-fusion": 422, "--no-bias-gelu-fusion": 427,
    "--no-bias-dropout-fusion": 430, "--cpu-optimizer": 439, "--fp16": 536, "--no-query-key-layer-scaling": 554,
    "--attention-softmax-in-fp32": 557,
    "--tensor-model-parallel-size": 574, "--pipeline-model-parallel-size": 576, "--vocab-file": 636, "--merge-file": 638,
    "--seq-length": 643, "--zero-stage": 772, "--deepspeed-activation-checkpointing": 809, "--partition-activations": 811,
    "--deepspeed": 0, "--deepspeed_config": 0,
}
BIGSCIENCE_FLAGS_AT = {
    "--num-layers": 352, "--hidden-size": 354, "--ffn-hidden-size": 356, "--num-attention-heads": 359, "--kv-channels": 361,
    "--max-position-embeddings": 366, "--make-vocab-size-divisible-by": 369, "--pad-vocab-size-to": 372,
    "--embed-layernorm": 382, "--position-embedding-type": 394, "--attention-dropout": 456, "--hidden-dropout": 458,
    "--micro-batch-size": 482, "--global-batch-size": 489, "--rampup-batch-size": 496, "--checkpoint-activations": 508,
    "--train-iters": 517,
    "--train-samples": 521, "--no-masked-softmax-fusion": 537, "--no-bias-gelu-fusion": 542, "--no-bias-dropout-fusion": 545,
    "--cpu-optimizer": 558, "--pp-partition-method": 572, "--glu-activation": 399, "--fp16": 670, "--bf16": 672,
    "--no-query-key-layer-scaling": 688, "--attention-softmax-in-fp32": 691,
    "--tensor-model-parallel-size": 708, "--pipeline-model-parallel-size": 710, "--vocab-file": 872,
    "--merge-file": 874, "--seq-length": 879,
    "--tokenizer-type": 900, "--tokenizer-name-or-path": 907, "--zero-stage": 1018,
    "--deepspeed-activation-checkpointing": 1055, "--partition-activations": 1057, "--deepspeed": 0, "--deepspeed_config": 0,
    # not at 497aa1bf: merged as 'sync layer norms (#272)' e1c479e5 (2022-07-04), @8387ae17 arguments.py l. 378; BLOOM
    # ran its band-aid from iteration 17,235 (stack_db megatron-deepspeed-bigscience runs.sources)
    "--sync-tp-duplicated-parameters": 378,
}
MDS_2021 = "megatron-deepspeed-2021"
MDS_BIGSCIENCE = "megatron-deepspeed-bigscience"
# stack -> (the fork's name, its commit, its flag table)
MDS_FORKS = {MDS_2021: ("microsoft/Megatron-DeepSpeed", "b56b50bb", MDS2021_FLAGS),
             MDS_BIGSCIENCE: ("bigscience-workshop/Megatron-DeepSpeed", "497aa1bf", BIGSCIENCE_FLAGS_AT)}
# the microsoft writer's flags the older forks lack, as the plan setting each writes (the refusal names it)
_FORK_SETTING = {
    "--normalization": "norm rmsnorm (the forks build LayerNorm only, MixedFusedLayerNorm)",
    "--swiglu": "gated_mlp (a SwiGLU MLP)",
    "--squared-relu": "mlp_activation squared_relu",
    "--num-key-value-heads": "grouped-query attention (kv_heads < heads: query_key_value is 3 x the projection)",
    "--use-rotary-position-embeddings": "position_embedding rope",
    "--rotary-position-embeddings-theta": "rope_theta other than 10,000",
    "--no-position-embedding": "position_embedding none",
    "--untie-embeddings-and-output-weights": "untied embeddings (the forks tie the output layer to the embedding)",
    "--disable-bias-linear": "linear_bias false (the forks' linears have biases)",
    "--sequence-parallel": "sequence_parallel", "--recompute-granularity": "recompute selective",
    "--use-flash-attn-v2": "attention flash", "--no-pipeline-parallel": "ZeRO-2/3 or overlap_comm at pp 1",
    "--no-gradient-accumulation-fusion": "gradient_accumulation_fusion false",
    "--empty-unused-memory-level": "empty_unused_memory_level", "--transformer-impl": "transformer_impl local",
    "--vocab-size": "vocab_size", "--position-embedding-type": "position_embedding alibi",
}
GPT2_VOCAB = 50257  # the GPT-2 BPE vocabulary (megatron_model.TOKENIZER_VOCAB GPT2BPETokenizer)


def _gpt2_divisor(v: int, tp: int) -> Optional[int]:
    """The --make-vocab-size-divisible-by d with which Megatron pads GPT-2's 50,257 tokens to exactly v rows
    (vocab_size_with_padding: the least multiple of d x tp at or above 50,257; microsoft/Megatron-DeepSpeed b56b50bb
    megatron/tokenizer/tokenizer.py _vocab_size_with_padding), the smallest such d; None where none does. m = d tp
    must divide v and exceed v - 50,257. Beyond 2 x 50,257 only v itself does (a proper divisor is at most v / 2, below
    v - 50,257), so the search runs over at most 100,514 / tp candidates, whatever the vocabulary."""
    if v < GPT2_VOCAB:
        return None
    if v > 2 * GPT2_VOCAB:
        return v // tp if v % tp == 0 else None
    for m in range(tp, v + 1, tp):
        if v % m == 0 and m > v - GPT2_VOCAB:
            return m // tp
    return None


def _fork_vocab(plan: dict, fork: str, tp: int, notes: list[str]) -> list:
    """The vocabulary as the fork builds it, in place of --vocab-size (neither fork has it). 2021: the tokenizer's files;
    the planner writes GPT-2's (the fork's default GPT2BPETokenizer, as b56b50bb examples/pretrain_gpt3_175B.sh) with the
    --make-vocab-size-divisible-by that pads its 50,257 tokens to the model's rows (_gpt2_divisor), refused for a
    vocabulary below 50,257; where no divisor gives it, the fork's default 128 and a note naming the rows it builds
    (as the microsoft writer's --vocab-size, which Megatron pads too). BigScience: --pad-vocab-size-to V (the
    embedding's rows, whatever the tokenizer's size below it; 497aa1bf tokenizer.py l. 70-82 checks V %
    --make-vocab-size-divisible-by, the embedding V % tp), with BLOOM's --tokenizer-type PretrainedFromHF; where tp does
    not divide V, GPT-2's files as the 2021 fork's."""
    F = "megatron-deepspeed"
    model = _model(plan)
    v = plan_rows(plan, model.vocab_size)  # the rows the plan priced (the stack's padding at its tp, or the job's)
    if fork == MDS_BIGSCIENCE and model.vocab_size % tp == 0:  # else GPT-2's files, as the 2021 fork's (below)
        out = [("--tokenizer-type", "PretrainedFromHF"), ("--tokenizer-name-or-path", "$TOKENIZER_NAME_OR_PATH")]
        if v % 128:  # the fork's default divisor (l. 369) must divide the padded size (tokenizer.py l. 78-79)
            out.append(("--make-vocab-size-divisible-by", 1))
        notes.append(f"vocabulary: --pad-vocab-size-to {v:,} builds the embedding's {v:,} rows; set "
                     f"TOKENIZER_NAME_OR_PATH to the run's Hugging Face tokenizer, of at most {v:,} tokens (the fork "
                     "raises on a larger one, 497aa1bf megatron/tokenizer/tokenizer.py l. 72-76)")
        return out + [("--pad-vocab-size-to", v)]
    d = _gpt2_divisor(v, tp)
    name, commit, _ = MDS_FORKS[fork]
    if v < GPT2_VOCAB:
        raise _refuse(F, f"vocab_size {v:,}" + (f" at tp {tp}" if fork == MDS_BIGSCIENCE else "") + f": {name} @{commit} "
                         "has no --vocab-size (its vocabulary is the tokenizer's files" + (
                             "; --pad-vocab-size-to must divide over the tensor-parallel ranks, the vocab-parallel "
                             "embedding splitting its rows, arguments.py l. 372-375" if fork == MDS_BIGSCIENCE else "")
                         + f"); the planner writes GPT-2's BPE files, {GPT2_VOCAB:,} tokens, more than the model's rows",
                      "price a model of GPT-2's vocabulary (50,257, or it padded)" + (
                          ", or a tp that divides the vocabulary" if fork == MDS_BIGSCIENCE else "")
                      + ", or export it on another stack")
    out = [("--vocab-file", "gpt2-vocab.json"), ("--merge-file", "gpt2-merges.txt")]
    if fork == MDS_BIGSCIENCE:  # the fork's default tokenizer type is None (497aa1bf arguments.py l. 900): named
        out.insert(0, ("--tokenizer-type", "GPT2BPETokenizer"))
    if d is not None and d != 128:
        out.insert(0, ("--make-vocab-size-divisible-by", d))
    rows = -(-GPT2_VOCAB // ((d or 128) * tp)) * (d or 128) * tp
    notes.append(f"vocabulary: GPT-2's BPE files (gpt2-vocab.json, gpt2-merges.txt: {GPT2_VOCAB:,} tokens; {commit} has "
                 "no --vocab-size), which the fork pads to a multiple of --make-vocab-size-divisible-by "
                 f"{d or 128} x tp {tp}: {rows:,} rows" + ("" if rows == v else f", where the plan priced the model's "
                                                            f"{v:,} (no divisor pads 50,257 to it at tp {tp})"))
    return out


def plan_rows(plan: dict, v: int) -> int:
    """The embedding's rows the plan priced: the job's padded_vocab_size, else the stack's padding of the model's v
    tokens at the plan's tp (plan vocab_rows: stack_db vocab_padding, Megatron's 128 x tp), else v."""
    return int(plan.get("padded_vocab_size") or plan.get("vocab_rows") or v)


def _megatron_vocab_rows(plan: dict, v: int, tp: int, notes: list[str]) -> list:
    """--padded-vocab-size R where Megatron-LM's default padding of the model's v tokens (a multiple of 128 x tp,
    vocab_size_with_padding, NVIDIA/Megatron-LM @d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py
    l. 133-152; --padded-vocab-size: training/config/training_config.py l. 682, TokenizerConfig) builds other rows
    than the R the plan priced (its padded_vocab_size, else v): the script then builds R rows. Where tp does not
    divide R (an unpadded plan of such a vocabulary: the vocab-parallel embedding needs it), nothing, and a note
    naming the rows Megatron builds."""
    from .megatron_model import DEFAULT_VOCAB_DIVISOR

    rows = plan_rows(plan, v)
    mult = DEFAULT_VOCAB_DIVISOR * tp
    built = -(-v // mult) * mult
    if rows == built:
        return []
    if rows % tp == 0:
        return [("--padded-vocab-size", rows)]
    notes.append(f"vocabulary: Megatron pads the model's {v:,} tokens to {built:,} rows (a multiple of 128 x tp {tp}, "
                 f"vocab_size_with_padding), where the plan priced {rows:,} (tp {tp} does not divide them, so no "
                 f"--padded-vocab-size gives them); price it with --padded-vocab-size {built:,}")
    return []


MDS_VOCAB_DIVISOR = 128  # microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py l. 644 (the default)


def mds_vocab_divisor(v: int, tp: int) -> Optional[int]:
    """The --make-vocab-size-divisible-by d (at most the fork's default 128, the largest such) with which the 2022
    fork builds exactly v rows: d x tp divides v (_vocab_size_with_padding, microsoft/Megatron-DeepSpeed @f4157bea
    megatron/tokenizer/tokenizer.py l. 58-71: the least multiple of d x tp at or above the tokenizer's size); None
    where tp does not divide v (no divisor does). At most 128 candidates."""
    if v % tp:
        return None
    return next(d for d in range(MDS_VOCAB_DIVISOR, 0, -1) if (v // tp) % d == 0)


def _mds_vocab(plan: dict, notes: list[str]) -> list:
    """The model's vocabulary as microsoft/Megatron-DeepSpeed @f4157bea builds it, in place of the Megatron writer's
    --vocab-size V: the fork reads --vocab-size only for its NullTokenizer (megatron/tokenizer/tokenizer.py
    build_tokenizer l. 38-41; pretrain_gpt.py l. 364 defaults the tokenizer to GPT2BPETokenizer, which needs
    --vocab-file and --merge-file and ignores --vocab-size), whose size is --vocab-size + 1, the end-of-document id
    (_NullTokenizer l. 510-514); the embedding and output layer then have that size padded to a multiple of
    --make-vocab-size-divisible-by x tp (l. 52, 58-71). So: --tokenizer-type NullTokenizer --vocab-size V - 1 and the
    largest divisor <= 128 that pads V to the R rows the plan priced (plan_rows: the stack's padding at the plan's tp,
    128 x tp, where no flag is written; a job's padded_vocab_size), else R - 1 tokens and the divisor that pads R to
    itself (mds_vocab_divisor); where tp does not divide R none does: the fork's default, and a note naming the rows it
    builds beside the R the plan priced."""
    v, tp = _model(plan).vocab_size, plan["tp"]
    want = plan_rows(plan, v)
    d = next((d for d in range(MDS_VOCAB_DIVISOR, 0, -1) if -(-v // (d * tp)) * d * tp == want), None)
    tokens = v if d is not None else want
    if d is None:
        d = mds_vocab_divisor(want, tp)
    if tokens < 2:
        raise _refuse("megatron-deepspeed", f"vocab_size {tokens}: Megatron-DeepSpeed @f4157bea's NullTokenizer has "
                                            "--vocab-size + 1 tokens (the end-of-document id), at least 2",
                      "price a model of two tokens or more")
    out = [("--tokenizer-type", "NullTokenizer"), ("--vocab-size", tokens - 1)]
    if d is not None and d != MDS_VOCAB_DIVISOR:
        out.append(("--make-vocab-size-divisible-by", d))
    rows = -(-tokens // ((d or MDS_VOCAB_DIVISOR) * tp)) * (d or MDS_VOCAB_DIVISOR) * tp
    notes.append(f"vocabulary: --tokenizer-type NullTokenizer --vocab-size {tokens - 1:,} (the fork's NullTokenizer adds the "
                 f"end-of-document id: {tokens:,} tokens, microsoft/Megatron-DeepSpeed @f4157bea megatron/tokenizer/tokenizer.py "
                 f"l. 510-514), padded to a multiple of --make-vocab-size-divisible-by {d or MDS_VOCAB_DIVISOR} x tp {tp}: "
                 f"{rows:,} rows" + (", the plan's" if rows == want else
                                     f", where the plan priced {want:,} (tp {tp} does not divide it, so no "
                                     "divisor pads it to itself)")
                 + "; a run with its own tokenizer (--tokenizer-type HFTokenizer --tokenizer-model ...) builds its size "
                   "padded so")
    return out


def _ramp_args(plan: dict, args: list) -> list:
    """The Megatron writer's flags with its --step-batch-size-schedule (Megatron-LM's ramp) replaced by every
    Megatron-DeepSpeed fork's --global-batch-size and --rampup-batch-size (_fork_rampup); the others as they are."""
    out: list = []
    for k, v in args:
        if k == "--step-batch-size-schedule":
            out += [("--global-batch-size", plan["global_batch"])] + _fork_rampup(plan, args)
        else:
            out.append((k, v))
    return out


def _fork_rampup(plan: dict, args: list) -> list:
    """The plan's batch_size_schedule as the Megatron-DeepSpeed forks' --rampup-batch-size START INCREMENT SAMPLES beside
    --global-batch-size (in place of the Megatron writer's --step-batch-size-schedule): the three forks' megatron/
    microbatches.py RampupBatchsizeNumMicroBatches (b56b50bb, BigScience 497aa1bf, microsoft @f4157bea l. 78-140: the
    same class, only the licence header differs), whose phases batch_ramp.rampup_phases gives (the reader's rule,
    megatron_deepspeed._rampup). START the first phase's batch, INCREMENT the step to the second, SAMPLES from the last
    phase's start (the ramp reaches the global batch at SAMPLES, or SAMPLES + 1: the candidates around it, each checked
    by replaying rampup_phases, O(phases)). Refused, named: a schedule no such ramp runs (thresholds not whole samples,
    uneven steps, a first phase after 0), or one without --train-samples (the forks assert a ramp only with it,
    BigScience @8387ae17 megatron/arguments.py l. 210-217, microsoft @f4157bea l. 238-248: the plan's tokens give it)."""
    from ..batch_ramp import rampup_phases

    F = "megatron-deepspeed"
    seq, g = plan["seq_len"], plan["global_batch"]
    pts = [(p["from_tokens"] / seq, int(p["global_batch"])) for p in plan["batch_size_schedule"]]
    hint = "price it without the schedule, or with a linear ramp (--rampup-batch-size START INCREMENT SAMPLES's phases)"
    if not any(k == "--train-samples" for k, _ in args):
        raise _refuse(F, "batch_size_schedule without tokens: the forks run --rampup-batch-size only with "
                         "--train-samples (bigscience-workshop/Megatron-DeepSpeed @8387ae17 megatron/arguments.py "
                         "l. 210-217), which the plan's tokens give", "price it with --tokens (a whole number of samples)")
    want = [(int(c), b) for c, b in pts]
    ok = (len(pts) >= 2 and all(c == int(c) for c, _ in pts) and want[0][0] == 0 and want[-1][1] == g
          and pts[1][1] > pts[0][1] and (g - pts[0][1]) % (pts[1][1] - pts[0][1]) == 0)
    if ok:
        start, inc, cn = want[0][1], want[1][1] - want[0][1], want[-1][0]
        for samples in (cn, cn - 1, cn - 2, cn + 1):
            if samples > 0 and rampup_phases(start, inc, samples, g) == want:
                return [("--rampup-batch-size", f"{start} {inc} {samples}")]
    raise _refuse(F, f"batch_size_schedule of {len(pts)} phases: not the phases of a --rampup-batch-size START INCREMENT "
                     "SAMPLES ramp (both forks' megatron/microbatches.py RampupBatchsizeNumMicroBatches: START + "
                     "int(c / (SAMPLES / n)) x INCREMENT at c samples, the global batch beyond SAMPLES)", hint)


def _fork_split(plan: dict, fork: str, notes: list[str]) -> list:
    """The pipeline split the fork runs, as priced (pipeline.stage_layers with the stack's pipeline_split). 2021:
    b56b50bb's GPTModelPipe partition_method='type:transformer' (megatron/model/gpt_model.py l. 168-253; no argument)
    under DeepSpeed a12aaedc's partition_balanced (the stack's bisection): only the transformer layers counted, so a
    plan that counts an end is refused. BigScience: --pp-partition-method 'type:transformer|embedding' (497aa1bf
    megatron/arguments.py l. 572) where the plan counts both tied embeddings (one alone is start-up rule
    DEEPSPEED_PP_SPLIT_ENDS's), else the fork's default 'type:transformer'."""
    from ..catalog import load_stack
    from ..pipeline import SPLIT_CODES, stage_layers

    pp = plan["pp"]
    e, l_ = bool(plan.get("account_for_embedding_in_pipeline_split")), split_loss_units(plan)
    out = []
    if pp > 1 and (e or l_):
        if fork == MDS_2021:
            raise _refuse("megatron-deepspeed",
                          "account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split: microsoft/"
                          "Megatron-DeepSpeed b56b50bb's GPTModelPipe partitions with partition_method='type:transformer' "
                          "(megatron/model/gpt_model.py l. 168-253), which no argument changes: the ends are never counted",
                          "price it without them (the stack's own split: bisection over the transformer layers)")
        if not (e and l_ == 1):
            raise _refuse("megatron-deepspeed", f"the split counts {'the embedding' if e else 'the loss'} alone: "
                          "BigScience's --pp-partition-method 'type:transformer|embedding' counts both tied EmbeddingPipe",
                          "price it with both ends counted, or neither")
        out.append(("--pp-partition-method", "'type:transformer|embedding'"))
    if pp > 1:
        L = _model(plan).num_layers
        first, mid, last = (int(x) for x in stage_layers(L, pp, 1, int(e), l_,
                                                         SPLIT_CODES[load_stack(plan["stack"]).pipeline_split]))
        if len({first, mid, last}) > 1:
            notes.append(f"pipeline split: {L} layers on {pp} stages, the first {first}, "
                         + (f"the middle {mid}, " if pp > 2 else "") + "the last "
                         f"{last}: DeepSpeed's partition_balanced over GPTModelPipe's "
                         + ("transformer layers and both tied embeddings" if e else "transformer layers")
                         + f" (stack {plan['stack']} pipeline_split {load_stack(plan['stack']).pipeline_split}), "
                         "no flag of its own, as priced")
    return out


def _fork_args(plan: dict, args: list, fork: str, notes: list[str]) -> list:
    """The microsoft writer's flags (2022 fork spellings) in the older fork's (MDS_FORKS): the vocabulary
    (_fork_vocab), the positions (BigScience's --position-embedding-type absolute | rotary | alibi, written always:
    the flag the reader infers the fork from), BigScience's --embed-layernorm and --glu-activation swiglu for the gated
    MLP (with the --no-bias-gelu-fusion the fork requires); any flag the fork's table lacks refused,
    named with the setting it writes (_FORK_SETTING)."""
    F = "megatron-deepspeed"
    name, commit, table = MDS_FORKS[fork]
    model = _model(plan)
    tp = plan["tp"]
    out: list = []
    for k, v in args:
        if k == "--vocab-size":
            out += _fork_vocab(plan, fork, tp, notes)
            continue
        if fork == MDS_BIGSCIENCE and k == "--use-rotary-position-embeddings":
            k, v = "--position-embedding-type", "rotary"
        if fork == MDS_BIGSCIENCE and k == "--swiglu":  # the gated MLP: BigScience's --glu-activation swiglu (l. 399),
            out.append(("--glu-activation", "swiglu"))  # dense_h_to_4h of 2 x --ffn-hidden-size, as Megatron's
            if not any(a == "--no-bias-gelu-fusion" for a, _ in args):  # the fork raises without it (l. 285-286)
                out.append(("--no-bias-gelu-fusion", None))
            continue
        out.append((k, v))
    if fork == MDS_BIGSCIENCE:
        if not any(k == "--position-embedding-type" for k, _ in out):  # learned: the fork's absolute (its default,
            i = next(j for j, (k, _) in enumerate(out) if k == "--max-position-embeddings")  # written: it names the fork)
            out.insert(i + 1, ("--position-embedding-type", "absolute"))
        if model.embedding_norm:  # a LayerNorm on the embedding's output (memory.py [en])
            out.append(("--embed-layernorm", None))
    bad = [k for k, _ in out if k not in table]
    if bad:
        what = "; ".join(f"{k} ({_FORK_SETTING[k]})" if k in _FORK_SETTING else k for k in dict.fromkeys(bad))
        raise _refuse(F, f"{what}: the plan's, and {name} @{commit}'s megatron/arguments.py (stack {fork}) has no "
                         "such flag", "price the plan without the setting, or export it on --stack megatron-deepspeed "
                                            "(today's fork) or --stack megatron")
    return out


def _megatron_deepspeed(plan: dict, notes: list[str]) -> str:
    """A microsoft/Megatron-DeepSpeed @f4157bea launch script: the Megatron writer's flags (_megatron_args) in the
    fork's spellings, `--deepspeed --deepspeed_config $DS_CONFIG --zero-stage N` and the ds_config JSON (the DeepSpeed
    writer's, deepspeed_config) written by a heredoc, as the fork's examples_deepspeed scripts do. Read back by the
    Megatron reader (megatron_deepspeed.py), whose tables are the spellings' truth. A plan on an older fork's stack
    (MDS_FORKS) is written in that fork's flags (_fork_args, _fork_split): the 2021 fork as b56b50bb's
    examples/pretrain_gpt3_175B.sh with DeepSpeed's flags and JSON (read back with --stack megatron-deepspeed-2021:
    its flags cannot name it), BigScience's as BLOOM's tr11-176B-ml.slurm."""
    F = "megatron-deepspeed"
    tp, pp = plan["tp"], plan["pp"]
    fork = plan["stack"] if plan.get("stack") in MDS_FORKS else None
    if plan.get("sync_tp_duplicated_parameters") and fork != MDS_BIGSCIENCE:
        raise _refuse(F, "sync_tp_duplicated_parameters: --sync-tp-duplicated-parameters is BigScience's fork's "
                         "(bigscience-workshop/Megatron-DeepSpeed @8387ae17 arguments.py l. 378); microsoft/"
                         "Megatron-DeepSpeed @f4157bea's arguments.py has no such flag",
                      "price it without sync_tp_duplicated_parameters")
    cfg = deepspeed_config(plan, F)
    if fork == MDS_2021 and plan.get("sharding_mode") == "zero3_mics":
        raise _refuse(F, "sharding zero3_mics: MiCS (Zhang et al. 2022) is not in DeepSpeed a12aaedc, the 2021 stack's "
                         "(no mics_shard_size key; deepspeed/runtime/zero/mics.py came in 2023)",
                      "price it with --sharding zero3 on this stack, or on --stack megatron-deepspeed")
    _mds_pipe_section(plan, cfg)
    split = _fork_split(plan, fork, notes) if fork else []
    if not fork:
        _mds_split(plan, notes)
    stage = cfg["zero_optimization"]["stage"]
    # the model: GPTModelPipe under DeepSpeed's PipelineEngine unless --no-pipeline-parallel (pretrain_gpt.py
    # model_provider l. 51-56, 83); the engine runs ZeRO 0-1 only (pipe/engine.py @38327e07 l. 77-78) and turns
    # overlap_comm off (engine.py l. 1639-1642): at pp 1 a plan at stage 2-3 or with the overlap is written with it.
    # The 2021 fork builds GPTModel at pp 1 whatever (b56b50bb pretrain_gpt.py l. 46): nothing to write
    no_pipe = pp == 1 and (stage >= 2 or bool(plan.get("dp_comm_overlap"))) and fork != MDS_2021
    if no_pipe and fork == MDS_BIGSCIENCE:
        raise _refuse(F, f"{'ZeRO stage ' + str(stage) if stage >= 2 else 'dp_comm_overlap'} at pp 1: BigScience's "
                         "fork builds GPTModelPipe whenever --deepspeed is given (497aa1bf pretrain_gpt.py l. 55) and has "
                         "no --no-pipeline-parallel; DeepSpeed's PipelineEngine runs ZeRO 0-1 and turns overlap_comm off",
                      "price it without the overlap (the stack's ZeRO 0-1)")
    args = []
    for k, v in _mds_moe(plan, _megatron_args(plan, notes, fork=True)):
        if (k, v) in _MDS_SAME_DEFAULT or k == "--attention-backend":  # the kernel: the fork's flags, below
            continue
        if k == "--quick-geglu":  # the fork's ParallelMLP builds gelu, openai_gelu, erf_gelu, swiglu or squared_relu
            raise _refuse(F, "mlp_activation quick_gelu: microsoft/Megatron-DeepSpeed @f4157bea has no --quick-geglu "
                             "(megatron/model/transformer.py ParallelMLP l. 133-148: gelu, openai_gelu, erf_gelu, swiglu, "
                             "squared_relu; arguments.py l. 668: --squared-relu)",
                          "price a SwiGLU, GeLU or squared-ReLU model, or export megatron")
        if k == "--num-query-groups":
            k = "--num-key-value-heads"
        elif k == "--normalization":  # choices layernorm | rmsnorm (arguments.py l. 647-648)
            if fork and v == "LayerNorm":  # the older forks' only norm, no flag
                continue
            v = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}[v]
        elif k == "--rotary-base":
            k = "--rotary-position-embeddings-theta"
        elif (k, v) == ("--position-embedding-type", "rope"):
            k, v = "--use-rotary-position-embeddings", None
        elif (k, v) == ("--position-embedding-type", "none"):
            k, v = "--no-position-embedding", None
        args.append((k, v))
    # full recompute of every layer: --checkpoint-activations (arguments.py l. 864; transformer.py l. 2082), the
    # spelling both of the fork's models re-run with; the block method only where the model is Megatron's GPTModel
    uniform = [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    if all(a in args for a in uniform):
        i = args.index(uniform[0])
        args = [a for a in args if a not in uniform]
        args.insert(i, ("--checkpoint-activations", None))
        if fork == MDS_BIGSCIENCE and not plan.get("partition_activations"):  # BLOOM's form: DeepSpeed's checkpoint
            args.append(("--deepspeed-activation-checkpointing", None))  # function, the same layers re-run (the reader)
    elif ("--recompute-method", "block") in args and (fork or not no_pipe):
        raise _refuse(F, f"recompute_layers {plan.get('recompute_layers')}: " + (
                         f"{MDS_FORKS[fork][0]} @{MDS_FORKS[fork][1]} re-runs every layer with --checkpoint-activations "
                         "(no --recompute-method)" if fork else "DeepSpeed's pipeline model (GPTModelPipe) "
                         "re-runs layers only with --checkpoint-activations or the uniform method (Megatron-DeepSpeed "
                         "@f4157bea megatron/model/gpt_model.py l. 446-452)"),
                      "price it with full recompute of every layer" + ("" if fork else
                                                                      ", or at pp 1 with ZeRO-2/3 (--no-pipeline-parallel)"))
    if plan.get("offload_optimizer", "none") != "none":  # the host's Adam for the JSON's offload (megatron/optimizer/
        args.append(("--cpu-optimizer", None))  # __init__.py @f4157bea l. 83-94: DeepSpeedCPUAdam, as priced)
    if plan.get("attention") == "flash":  # --use-flash-attn-v2 (arguments.py l. 930); none: CoreAttention (eager),
        args.append(("--use-flash-attn-v2", None))  # as the reader reads both (megatron_deepspeed.py merge)
    elif plan.get("attention") not in (None, "eager"):
        raise _refuse(F, f"attention {plan['attention']}: Megatron-DeepSpeed @f4157bea runs CoreAttention or a "
                         "FlashAttention kernel (--use-flash-attn*, megatron/arguments.py l. 927-935)",
                      "price it with attention eager or flash")
    if plan.get("attention") == "eager" and plan.get("attention_softmax_in_fp32") is False:
        # the eager core's 16-bit softmax (memory.py [sm]): every fork runs it in fp32 under query-key layer scaling, on
        # by default, so false is --no-query-key-layer-scaling without --attention-softmax-in-fp32 (@f4157bea
        # megatron/arguments.py l. 1129-1135, transformer.py CoreAttention l. 245-248; megatron_deepspeed._softmax_fp32,
        # which reads it back); true is the forks' default, nothing written
        args.append(("--no-query-key-layer-scaling", None))
        notes.append("attention_softmax_in_fp32 false: written as --no-query-key-layer-scaling (Megatron-DeepSpeed runs "
                     "the eager core's softmax in fp32 whenever query-key layer scaling is on, its default); the scores "
                     "are computed without the 1 / layer-number pre-scale that the softmax multiplies back (numerics only)")
    if plan.get("attention") == "eager" and plan.get("masked_softmax_fusion") is False:
        # the eager core's unfused softmax at every key length (every fork's FusedScaleMaskSoftmax reads it: stack_db
        # runs.attention eager_softmax_fusion_switch; megatron_deepspeed._softmax_fusion reads it back)
        args.append(("--no-masked-softmax-fusion", None))
    if no_pipe:
        args.append(("--no-pipeline-parallel", None))
    if plan.get("partition_activations"):  # memory.py [pa]: the reader's partition_activations (megatron_deepspeed.py)
        args += [("--deepspeed-activation-checkpointing", None), ("--partition-activations", None)]
    if plan.get("sync_tp_duplicated_parameters"):  # BigScience's (step.tp_comm [sy]); refused above elsewhere
        args.append(("--sync-tp-duplicated-parameters", None))
    args = _ramp_args(plan, split + args)  # Megatron-LM's ramp as --rampup-batch-size (every fork's)
    if not fork:  # the vocabulary as @f4157bea builds it: _mds_vocab
        i = next(j for j, (k, _) in enumerate(args) if k == "--vocab-size")
        args[i:i + 1] = _mds_vocab(plan, notes)
    if fork:
        args = _fork_args(plan, args, fork, notes)
    else:
        bad = [k for k, _ in args if k not in MDS_FORK_FLAGS]
        if bad:
            raise _refuse(F, f"{', '.join(dict.fromkeys(bad))}: Megatron-LM @d98e8a64's, and microsoft/Megatron-DeepSpeed "
                             "@f4157bea's megatron/arguments.py has no such flag (the 2022 fork)",
                          "price the plan without the setting, or export it as --format megatron on --stack megatron")
    hw = load_hardware(plan.get("hardware_file") or plan["hardware"])
    g = plan["gpus"]
    per_node = hw.gpus_per_node if g % hw.gpus_per_node == 0 else g
    head = {None: ["# flag names: microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py (its examples_deepspeed/ "
                   "scripts' form); the JSON: DeepSpeed's config keys"],
            MDS_2021: ["# flag names: microsoft/Megatron-DeepSpeed b56b50bb (2021-07-02) megatron/arguments.py (its "
                       "examples/pretrain_gpt3_175B.sh form, with DeepSpeed's); the JSON: DeepSpeed a12aaedc's keys",
                       "# the stack megatron-deepspeed-2021, which the flags cannot name: read it back with --stack "
                       "megatron-deepspeed-2021"],
            MDS_BIGSCIENCE: ["# flag names: bigscience-workshop/Megatron-DeepSpeed 497aa1bf (2022-03-11) megatron/"
                             "arguments.py (BLOOM's train/tr11-176B-ml/tr11-176B-ml.slurm form); the JSON: DeepSpeed's keys"]}
    launch = {None: f"torchrun --nproc_per_node {per_node} --nnodes {g // per_node} pretrain_gpt.py \\",
              # b56b50bb examples/pretrain_gpt_distributed.sh; BLOOM's LAUNCHER (tr11-176B-ml.slurm)
              MDS_2021: f"python -m torch.distributed.launch --nproc_per_node {per_node} --nnodes {g // per_node} "
                        "pretrain_gpt.py \\",
              MDS_BIGSCIENCE: f"python -u -m torch.distributed.run --nproc_per_node {per_node} --nnodes {g // per_node} "
                              "pretrain_gpt.py \\"}[fork]
    lines = ["#!/bin/bash", "# Megatron-DeepSpeed launch written by `planner export --format megatron-deepspeed`",
             *head[fork],
             f"# hardware {plan['hardware']}: {g} GPUs = {g // per_node} node(s) x {per_node}",
             # --sequence-parallel raises without it (Megatron-DeepSpeed @f4157bea megatron/arguments.py l. 398-406)
             *(["export CUDA_DEVICE_MAX_CONNECTIONS=1"] if plan.get("sequence_parallel") else []),
             *nccl_exports(plan),
             *(["TOKENIZER_NAME_OR_PATH=bigscience/bloom  # the run's tokenizer"]
               if ("--tokenizer-name-or-path", "$TOKENIZER_NAME_OR_PATH") in args else []),
             "DS_CONFIG=ds_config.json", "", "cat <<EOT > $DS_CONFIG", json.dumps(cfg, indent=2), "EOT", "", launch]
    args += [("--deepspeed", None), ("--deepspeed_config", "$DS_CONFIG"), ("--zero-stage", stage)]
    body = [f"    {k}" + ("" if v is None else f" {v}") for k, v in args]
    lines += [ln + " \\" for ln in body[:-1]] + body[-1:]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ Megatron-Bridge (megatron_bridge.py: the recipes, the reader)
def _bridge_refuse(what: str, hint: str) -> PlannerError:
    return PlannerError(f"export {BRIDGE_FMT}: {what}", hint)


# plan keys (export.plan_signature's) the writer spells, each below; any other that the plan sets away from the
# stack's default is refused, naming it
_BRIDGE_WRITTEN = {
    "gpus", "tp", "cp", "pp", "vpp", "dp", "ep", "etp", "micro_batch", "global_batch", "seq_len", "sharding",
    "sharding_mode", "shard_group", "recompute", "recompute_layers", "recompute_modules", "sequence_parallel",
    "schedule", "precision", "fp8_recipe", "rank_order", "bytes_per_param", "tp_comm_overlap",
    "dp_comm_overlap", "dp_param_gather_overlap", "cross_entropy_fusion", "cross_entropy_fusion_impl", "apply_rope_fusion",
    "bias_activation_fusion", "bias_dropout_fusion", "gradient_accumulation_fusion", "stack",
    "bf16_layers_at_start", "bf16_layers_at_end", "fp8_param_gather", "pp_p2p_overlap", "transformer_impl",
    "mtp_layers", "cuda_graph_impl", "optimizer", "optimizer_whole_tensors", "mfsdp_double_buffer", "mfsdp_outer_optim",
    "muon_tp_mode", "muon_split_qkv", "muon_fp32_matmul_prec", "deterministic_mode", "mla_down_proj_fusion", "nccl_algo",
    "nccl_proto", "nccl_nvls_enable", "attention_kernel_named", "muon_ns_steps"}
# and, for a MoE recipe (bridge_moe.py moe_overrides, optimizer_overrides), its MoE and optimizer-state keys
_BRIDGE_MOE_WRITTEN = {
    "moe_capacity_factor", "moe_pad_to_capacity", "moe_rank_load", "moe_dispatcher", "ep_comm_overlap",
    "moe_shared_expert_overlap", "moe_grouped_gemm", "moe_permute_fusion", "moe_router_fusion", "moe_router_padding", "enable_experimental",
    "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_router_pre_softmax", "moe_router_dtype", "precision_aware_optimizer",
    "fp8_grouped_experts", "moe_load_balancing", "moe_rank_imbalance", "loss_layers_in_pipeline_split"}
_BRIDGE_SCHEDULES = {"1f1b", "interleaved"}
# Megatron-LM's uneven-split flags (megatron_split_args) as the ConfigContainer's model fields
BRIDGE_UNEVEN = {"--decoder-first-pipeline-num-layers": "model.num_layers_in_first_pipeline_stage",
                 "--decoder-last-pipeline-num-layers": "model.num_layers_in_last_pipeline_stage"}


def _bridge_mlp_dropout(model, recipe: str) -> None:
    """The recipe's model provider builds a gated MLP at its config's activation, without dropout (NVIDIA-NeMo/
    Megatron-Bridge @dc805f5cf: provider.gated_linear_unit True and hidden_dropout 0.0 in models/llama/llama_bridge.py
    l. 63, 65, qwen/qwen3_moe_bridge.py l. 48, 52, deepseek/deepseek_v3_bridge.py l. 54, 81, deepseek_v2_bridge.py
    l. 50, 74, gpt_oss/gpt_oss_bridge.py l. 70, 85; qwen/qwen3_next_bridge.py l. 64; attention_dropout the
    config.json's, conversion/model_bridge.py l. 264, 0.0 in each recipe model's config: tests/data/arch), the model the
    catalog entries of those recipes price (gated_mlp true, mlp_activation null, dropout false). A model priced with
    another MLP activation (ModelSpec gated_mlp / mlp_activation) is not what the recipe trains, and the provider's
    activation_func is a Python callable no run_recipe.py override can set: refused, naming it. A dropout (ModelSpec
    dropout, hidden_dropout / attention_dropout) is written as the provider's own fields, model.hidden_dropout /
    model.attention_dropout (_bridge_dropout), which the Bridge reader reads back (megatron_bridge._dropout_job)."""
    if not model.gated_mlp or model.mlp_activation is not None:
        act = model.mlp_activation or "gelu (plain MLP)"
        raise _bridge_refuse(f"mlp_activation {act}{'' if model.gated_mlp else ', gated_mlp false'}: recipe {recipe}'s "
                             "model provider builds a gated MLP at its config's activation (gated_linear_unit True), and "
                             "model.activation_func is a Python callable no override can set",
                             "price the recipe's model (a gated SwiGLU MLP), or export --format megatron")


def _bridge_dropout(model) -> list:
    """The dropout probabilities priced (ModelSpec hidden_dropout / attention_dropout; null: Megatron's 0.1 where
    dropout, _dropout) as overrides of the provider's fields, Megatron-Core's TransformerConfig.hidden_dropout /
    attention_dropout (NVIDIA/Megatron-LM @905c0e386 megatron/core/transformer/transformer_config.py l. 152, 155; the
    recipes' providers set 0.0: NVIDIA-NeMo/Megatron-Bridge @dc805f5cf models/llama/llama_bridge.py l. 65, the
    config.json's attention_dropout 0.0), where the model has dropout; none written where it has none (the
    provider's 0.0 is the plan's)."""
    if not model.dropout:
        return []
    return [("model.hidden_dropout", float(_dropout(model, model.hidden_dropout))),
            ("model.attention_dropout", float(_dropout(model, model.attention_dropout)))]


def _megatron_bridge(plan: dict, notes: list[str]) -> str:
    """The launch script of `plan` (explain's `plan`, stack megatron-bridge): run_recipe.py with the recipe of the
    plan's model and every priced setting as an override."""
    from ..schema import BYTES_PER_PARAM_PRESETS
    from ..startup import uses_tp_pp_dp_mapping
    from .bridge_moe import NO_LLAMA4, layout_text, moe_overrides, optimizer_overrides
    from .megatron_bridge import CP_COMM_TYPES

    if plan.get("stack") != BRIDGE_STACK:
        raise _bridge_refuse(f"the plan was priced on stack {plan.get('stack')}, not {BRIDGE_STACK}, whose modes and rules the file "
                             "runs with", f"price it on that stack first (--stack {BRIDGE_STACK}), then export")
    det = _bridge_nccl_algo(plan)  # deterministic mode: the plan's NCCL_ALGO one Bridge's start-up takes
    model = _model(plan)
    name = recipe_for(model)
    if name is None:
        raise _bridge_refuse(f"model {model.name} is none of the transcribed recipes' models ({', '.join(RECIPES)}: "
                             f"{BRIDGE} src/megatron/bridge/recipes/llama/, deepseek/deepseek_v2.py, deepseek_v3.py, qwen/qwen3_moe.py, "
                             "qwen/qwen3_next.py, gpt_oss/gpt_oss.py); run_recipe.py builds the model its --recipe names "
                             f"({NO_LLAMA4})",
                             "price a model of one of those recipes (llama2-7b, llama3-8b, llama3-70b, llama3-405b, deepseek-v2, "
                             "deepseek-v2-lite, deepseek-v3, "
                             "qwen3-30b-a3b, qwen3-235b-a22b, qwen3-next-80b-a3b, gpt-oss-20b, gpt-oss-120b), or write the "
                             "Bridge recipe for this model yourself")
    if not RECIPES[name].mp_object and plan["precision"] == "fp8" and plan.get("fp8_recipe") == "mxfp8":
        # an MXFP8 plan without fp8_param_gather matches no preset's name (bf16_with_mxfp8_mixed gathers fp8 weights,
        # training/mixed_precision.py l. 241-253), which a recipe holding mixed_precision as a name takes only: a
        # recipe of the same model that holds a MixedPrecisionConfig (gpt_oss_20b_pretrain_mxfp8_config), whose
        # fields the overrides set, where there is one
        from .megatron_bridge import recipes_for

        name = next((n for n in recipes_for(model) if RECIPES[n].mp_object), name)
    rec = RECIPES[name]
    _bridge_mlp_dropout(model, name)
    sig = plan_signature(plan)
    for k in sig:
        if k in _BRIDGE_WRITTEN or k == "stage_layers" or (rec.moe and k in _BRIDGE_MOE_WRITTEN):
            continue
        if (k == "cp_comm_type" and sig[k] in CP_COMM_TYPES) or k == "hierarchical_cp_sizes":
            continue  # model.cp_comm_type and a2a+p2p's sizes, written below (every recipe reads them: megatron_bridge.COMMON)
        if sig[k] not in (None, False, 0, [], ()):
            raise _bridge_refuse(f"{k} {sig[k]!r}: the planner's {BRIDGE_FMT} writer spells no ConfigContainer key for it",
                                 f"price it without {k}, or export --format megatron")
    if plan["schedule"] not in _BRIDGE_SCHEDULES:
        raise _bridge_refuse(f"schedule {plan['schedule']}: Megatron-Core runs 1F1B, interleaved where vpp > 1",
                             "price it with the 1f1b or interleaved schedule")
    if plan.get("mtp_layers") and not rec.moe:
        raise _bridge_refuse(f"mtp_layers {plan['mtp_layers']}: the recipes' Llama models have no MTP", "price it without MTP")
    if plan.get("cuda_graph_impl", "none") != "none":
        raise _bridge_refuse(f"cuda_graph_impl {plan['cuda_graph_impl']}: not written by the planner's {BRIDGE_FMT} writer",
                             "price it without CUDA graphs")
    if plan.get("transformer_impl") not in (None, "transformer_engine"):
        raise _bridge_refuse(f"transformer_impl {plan['transformer_impl']}: the recipes build Transformer Engine layers; "
                             "the planner's writer spells no other", "price it with Transformer Engine layers")
    if plan.get("fp16"):
        raise _bridge_refuse("fp16: the planner's writer spells Bridge's bf16 presets only", "price it without fp16")
    tp, cp, pp, vpp = plan["tp"], plan["cp"], plan["pp"], plan["vpp"]
    o: list[tuple[str, object]] = [
        ("model.tensor_model_parallel_size", tp), ("model.pipeline_model_parallel_size", pp),
        ("model.virtual_pipeline_model_parallel_size", vpp if vpp > 1 else None),
        ("model.context_parallel_size", cp), ("model.sequence_parallel", bool(plan["sequence_parallel"])),
        ("model.expert_model_parallel_size", plan.get("ep", 1)), ("model.expert_tensor_parallel_size", plan.get("etp") or tp),
        ("model.seq_length", plan["seq_len"]), ("dataset.sequence_length", plan["seq_len"]),
        ("train.micro_batch_size", plan["micro_batch"]), ("train.global_batch_size", plan["global_batch"]),
        # the embedding's rows: the provider builds model.vocab_size of them, unpadded, where it is at least the
        # tokenizer's (training/setup.py l. 177-180, _validate_and_set_vocab_size l. 467-498; should_pad_vocab False):
        # the Hugging Face config's, or the rows the plan priced
        ("model.vocab_size", plan.get("padded_vocab_size") or model.vocab_size)]
    if cp > 1:
        # the plan's context-parallel variant over the recipe's (None, p2p; gpt_oss.py l. 66: a2a): the stack's default
        # p2p where the plan names none (plan.plan_dict writes cp_comm_type only away from it, and none at cp 1, where
        # Megatron-Core runs no variant: the recipe's value stands, ignored, as the reader reads it)
        o.append(("model.cp_comm_type", plan.get("cp_comm_type") or "p2p"))
        if plan.get("hierarchical_cp_sizes"):  # a2a+p2p run hierarchically (planner/cp_comm_type.py)
            o.append(("model.hierarchical_context_parallel_sizes", list(plan["hierarchical_cp_sizes"])))
    steps = None
    if plan.get("tokens") is not None:
        per = plan["global_batch"] * plan["seq_len"]
        steps = int(plan["tokens"] // per) if plan["tokens"] % per == 0 else None
    if steps is not None:
        o.append(("train.train_iters", steps))
    else:
        notes.append(f"train.train_iters: the plan fixes no whole step count; the recipe's "
                     f"{rec.values.get('train.train_iters', COMMON['train.train_iters']):,} iterations stand (no effect on a step's memory or time)")
    # the pipeline split: even, the ends one layer lighter (account_for_*), or the end stages' layers (the plan's
    # first_stage_layers / last_stage_layers, or the planner's split at vpp 1 as megatron_split_args places it) as
    # Megatron-Core's num_layers_in_first/last_pipeline_stage (TransformerConfig @905c0e386 l. 77-83, which Bridge's
    # GPTModelProvider is; its own mlm_compat/arguments.py l. 74-75 maps --decoder-first/last-pipeline-num-layers onto
    # them); other placements are refused
    e_, l_ = int(plan.get("account_for_embedding_in_pipeline_split", False)), _bridge_split_loss(plan)
    first, last = stage_ends(plan)
    split = megatron_split_args(model, pp, vpp, e_, l_, 0, first, last) if pp > 1 else []
    extra = [f for f, _ in split if f != "--num-virtual-stages-per-pipeline-rank"]
    layout = None
    if rec.moe:
        # a MoE recipe holds its own layout (deepseek_v3.py l. 29-49, 101): the plan's written over it, null where the
        # plan's split needs none (account_for_*, even, or the plan's own end stages' layers, which Megatron-Core refuses
        # beside a layout), else the split as Megatron-Core's layout string (which refuses account_for_* beside it:
        # transformer_config.py @905c0e386 l. 1430-1447)
        if not (first or last) and any(not f.startswith("--account-for-") for f in extra):
            from ..pipeline import chunk_layers

            layout = layout_text([int(x) for x in chunk_layers(model.num_layers, pp, vpp, e_, l_)], _mtp(plan, model))
            extra = []
        o.append(("model.pipeline_model_parallel_layout", f"'\"{layout}\"'" if layout else None))
    if any(not f.startswith("--account-for-") and f not in BRIDGE_UNEVEN for f in extra):
        raise _bridge_refuse(f"the pipeline split of {model.num_layers} layers on pp {pp} x vpp {vpp} "
                             f"({', '.join(extra)}): the planner's {BRIDGE_FMT} writer spells an even split, the "
                             "account_for_* one or the end stages' layers only", "price a pp x vpp that divides the "
                             "layers, or with --account-for-embedding/loss-in-pipeline-split or --first/last-stage-layers")
    o += [("model.account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split" in extra),
          ("model.account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split" in extra)]
    # (written where set only: every transcribed recipe leaves them None, megatron_bridge.COMMON and bridge_moe's tables)
    o += [(BRIDGE_UNEVEN[f], n) for f, n in split if f in BRIDGE_UNEVEN and f in extra]  # (none beside a layout)
    # recompute (as export._megatron_args writes it)
    r, rl = plan["recompute"], plan.get("recompute_layers")
    gran, method, num, mods = None, None, None, None
    if r == "full":
        gran = "full"
        if rl is None:
            method, num = "uniform", 1
        elif rl % vpp == 0:
            method, num = "block", rl // vpp
        else:
            raise _bridge_refuse(f"recompute_layers {rl}: Megatron-Core's block method counts layers per model chunk; {rl} "
                                 f"is not a multiple of vpp {vpp}", "price a multiple of vpp")
    elif r == "selective":
        # the plan's modules, else null: Megatron-Core's own choice for selective (core_attn: transformer_config.py
        # @905c0e386 l. 1316-1317), which the plan prices so
        gran, mods = "selective", (list(plan["recompute_modules"]) if plan.get("recompute_modules") else None)
    o += [("model.recompute_granularity", gran), ("model.recompute_method", method),
          ("model.recompute_num_layers", num), ("model.recompute_modules", mods)]
    # the sharding mode
    mode = plan.get("sharding_mode")
    # (bridge_sharding's tables, which check's suggestions spell by too: the HSDP mode is optim_grads_params with
    # ddp.num_distributed_optimizer_instances = dp / shard group)
    mfsdp = BRIDGE_MFSDP_STRATEGY
    if mode not in BRIDGE_MODES:
        raise _bridge_refuse(f"sharding {plan['sharding']} (mode {mode}): the planner's writer spells DDP, the distributed "
                             "optimizer, torch FSDP2 and Megatron-FSDP's optim, optim_grads, optim_grads_params and its HSDP only",
                             "price it with another --sharding, or export --format megatron")
    # torch FSDP2: Bridge wraps each model chunk in Megatron-Core's TorchFullyShardedDataParallel (models/common/
    # unimodal.py l. 217-222), the class Megatron-LM's --use-torch-fsdp2 builds (905c0e386 and d98e8a64 differ in a
    # parameter marker and a finish_grad_sync that calls the base's); its checkpoint format torch_dist (the recipes'
    # own, recipes/common.py l. 120), written so, as Megatron-LM requires it with FSDP2 (stack_db megatron runs.sharding)
    dist = BRIDGE_MODES[mode][0]
    # Megatron-FSDP: FullyShardedDataParallel (unimodal.py l. 217-219) at ddp.data_parallel_sharding_strategy; its
    # main gradients fp32 whatever grad_reduce_in_fp32 says (mcore_fsdp_adapter.py @905c0e386 l. 73-75, 92-97: Bridge
    # passes no main_grads_dtype), so a plan of other gradient bytes is not what runs; checkpoint.ckpt_format
    # fsdp_dtensor, the only format Bridge saves or loads with it (training/config.py l. 1544-1548); no tp-pp-dp
    # mapping (l. 1542); the gradient-accumulation fusion off (l. 1554-1557: the stack's runs.sharding job_settings)
    if mode in mfsdp:
        if _plan_bytes(plan)["gradients"] != 4.0:
            raise _bridge_refuse(f"sharding mode {mode} with {_plan_bytes(plan)['gradients']:g}-byte gradients: Megatron-Core 905c0e386, "
                                 "which Bridge @dc805f5cf pins, builds Megatron-FSDP's main gradients in fp32 whatever "
                                 "grad_reduce_in_fp32 says (mcore_fsdp_adapter.py l. 73-75, 92-97; Bridge passes no "
                                 "main_grads_dtype, models/common/unimodal.py l. 232-241)",
                                 "price it with fp32 gradients (--bytes-per-param megatron)")
        if uses_tp_pp_dp_mapping(_plan_arrays(plan)):
            raise _bridge_refuse(f"sharding mode {mode} with the tp-pp-dp rank order: Bridge asserts no "
                                 "dist.use_tp_pp_dp_mapping under Megatron-FSDP (training/config.py l. 1542)",
                                 "price it with the tp-cp-dp-pp rank order")
    # the mode's overrides (bridge_sharding.sharding_overrides, which check's suggestions spell too): the flags, the
    # strategy, the checkpoint format it needs, HSDP's instances
    # the update rule (megatron_bridge.BRIDGE_OPTIMIZERS, _optimizer_job): adam; Muon under DDP (muon) or its
    # layer-wise distributed optimizer (dist_muon), which Megatron-Core 905c0e386 builds with the distributed
    # optimizer's flags off (muon.py l. 192-193 raises beside them) and which hands each parameter whole to one rank
    # (layer_wise_optimizer.py l. 105-155: the plan's optimizer_whole_tensors; 905c0e386 has no precomputed layout)
    muon = plan.get("optimizer", "adam") == "muon"
    sharding_o = bridge_sharding_overrides(plan)
    if muon:
        if mode not in ("ddp", "distributed_optimizer"):
            raise _bridge_refuse(f"optimizer muon with sharding mode {mode}: Bridge builds Megatron-Core 905c0e386's Muon "
                                 "under DDP (optimizer.optimizer=muon) or its layer-wise distributed optimizer (dist_muon) "
                                 "only (optimizer/muon.py l. 165-355)", "price it with --sharding none or zero1")
        if mode == "distributed_optimizer" and not plan.get("optimizer_whole_tensors"):
            raise _bridge_refuse("optimizer muon at zero1 with the layer-wise parameter layout: Megatron-Core 905c0e386's "
                                 "LayerWiseDistributedOptimizer hands each parameter whole to one rank (layer_wise_"
                                 "optimizer.py l. 105-155; the layout is Megatron-LM @d98e8a64's)",
                                 "price it with --optimizer-whole-tensors, or export --format megatron")
        dist = False  # (sharding_o: the distributed optimizer's flags off, optimizer.optimizer muon / dist_muon)
    o += sharding_o
    # Megatron-FSDP's fixed pools and HSDP's outer-DP optimizer sharding (memory.py [db], [oo]): DistributedDataParallel
    # Config.fsdp_double_buffer and outer_dp_sharding_strategy (Megatron-Core 905c0e386 distributed_data_parallel_
    # config.py l. 117, 142; the same pools and helper buffers as d98e8a64's: megatron_bridge._mfsdp_buffers)
    if plan.get("mfsdp_double_buffer"):
        if mode not in mfsdp:
            raise _bridge_refuse(f"mfsdp_double_buffer with sharding mode {mode}: only Megatron-FSDP reads "
                                 "ddp.fsdp_double_buffer", "price it without mfsdp_double_buffer, or with a "
                                 "Megatron-FSDP sharding")
        o.append(("ddp.fsdp_double_buffer", True))
    if plan.get("mfsdp_outer_optim"):
        if mode != "megatron_fsdp_hsdp":
            raise _bridge_refuse(f"mfsdp_outer_optim with sharding mode {mode}: only Megatron-FSDP's HSDP reads "
                                 "ddp.outer_dp_sharding_strategy", "price it without mfsdp_outer_optim, or with "
                                 "--sharding hsdp")
        o.append(("ddp.outer_dp_sharding_strategy", "optim"))
    if not muon:
        o.append(("optimizer.optimizer", "adam"))
    else:  # Muon's TP mode as priced, always spelled (Megatron-Core 905c0e386 optimizer_config.py l. 277-278, Bridge's
        # OptimizerConfig its subclass: step.py [28]; priced_muon_tp_mode)
        o.append(("optimizer.muon_tp_mode", priced_muon_tp_mode(plan)))
    if muon and plan.get("muon_split_qkv") is False:  # OptimizerConfig.muon_split_qkv (905c0e386 l. 263, default True)
        o.append(("optimizer.muon_split_qkv", False))
    if muon and plan.get("muon_fp32_matmul_prec"):  # OptimizerConfig.muon_fp32_matmul_prec (905c0e386 l. 272, medium)
        o.append(("optimizer.muon_fp32_matmul_prec", plan["muon_fp32_matmul_prec"]))
    if muon and plan.get("muon_ns_steps"):  # OptimizerConfig.muon_num_ns_steps (905c0e386 l. 275, default 5)
        o.append(("optimizer.muon_num_ns_steps", plan["muon_ns_steps"]))
    # the data-parallel overlap (the param gather only with the distributed optimizer, as Megatron-LM's export, or
    # Muon's layer-wise one, dist_muon at zero1), as the plan prices it (step.py [40]): hidden where the plan's
    # dp_param_gather_overlap is left out under the DP overlap, off where it is false. The layer-wise optimizer defers
    # its all-gather to the forward only with OptimizerConfig.overlap_param_gather (Megatron-Core 905c0e386
    # optimizer/muon.py l. 347-354: async_allgather=config.overlap_param_gather; layer_wise_optimizer.py l. 65-71,
    # 280-288: else allgather_params after the step, synchronous) and DDP's forward pre-hooks with ddp.overlap_param_
    # gather (distributed_data_parallel.py l. 239-242, 350-353: 'the layer-wise optimizer sets overlap_param_gather=
    # True without use_distributed_optimizer'); Bridge's CommOverlapConfig sets neither without the distributed
    # optimizer (comm_overlap.py @dc805f5cf l. 631-640), so both are written. (NVIDIA's Kimi-K2 Muon recipe turns both
    # off, recipes/kimi/kimi_k2.py l. 190-199: a plan with the gather exposed, dp_param_gather_overlap false)
    dpo = bool(plan.get("dp_comm_overlap"))
    layer_wise = muon and mode == "distributed_optimizer"
    gather = dpo and (dist or layer_wise) and plan.get("dp_param_gather_overlap") is not False
    ddp_ov = [("overlap_grad_reduce", dpo), ("overlap_param_gather", gather)]
    o += [(f"ddp.{k}", v) for k, v in ddp_ov]
    if layer_wise:
        o.append(("optimizer.overlap_param_gather", gather))
    # pipeline p2p (Megatron-LM's default: overlapped under the interleaved schedule, batched otherwise)
    p2p = []
    if pp > 1:
        ov = vpp > 1 and plan.get("pp_p2p_overlap") is not False
        p2p = [("overlap_p2p_comm", ov), ("batch_p2p_comm", not ov)]
        o += [(f"model.{k}", v) for k, v in p2p]
    # TP overlap: the recipe's CommOverlapConfig (its non-None fields beat the model's and ddp's)
    co = [("tp_comm_overlap", bool(plan.get("tp_comm_overlap")))] + p2p + ddp_ov
    # a CommOverlapConfig sets the DDP bucket to 128 Mi parameters where dp > 1 (comm_overlap.py
    # _get_optimizer_overlap_cfgs l. 560-580), over Megatron-Core's max(40e6, 1e6 x dp x cp) (distributed_data_parallel.py
    # @905c0e386 l. 64-65), which the stack prices (stack_db fsdp.ddp_bucket_params, step.py): written as priced
    from ..catalog import load_stack

    fs = load_stack(plan["stack"]).fsdp
    bucket = max(fs.ddp_bucket_params, fs.ddp_bucket_params_per_dp_rank * plan["dp"] * cp)
    if bucket != int(bucket):
        raise _bridge_refuse(f"DDP bucket {bucket:g} parameters: not a whole number", "report it: a stack figure")
    co.append(("bucket_size", int(bucket)))
    if rec.moe:  # the EP overlap (comm_overlap.py l. 468-502 asserts its conditions), no deferred weight gradients
        co += [("overlap_moe_expert_parallel_comm", bool(plan.get("ep_comm_overlap"))), ("delay_wgrad_compute", False)]
        o += moe_overrides(plan, model, rec.values, notes, _mtp(plan, model), _grouped_experts_on(plan))
    if rec.comm_overlap:
        o += [(f"comm_overlap.{k}", v) for k, v in co]
        if plan.get("tp_comm_overlap") and rec.ub_cfg:
            notes.append(f"comm_overlap.tp_comm_overlap_cfg: the recipe's {rec.ub_cfg} stands: it {UB_NOTE}")
        elif plan.get("tp_comm_overlap"):
            notes.append(f"comm_overlap.tp_comm_overlap_cfg: recipe {name} has none: Bridge initializes Transformer "
                         "Engine's userbuffers with their default config (training/comm_overlap.py l. 615-621)")
    elif plan.get("tp_comm_overlap"):
        # the recipe's comm_overlap is None (recipes/common.py l. 127): a CommOverlapConfig made by the override,
        # quoted for the shell (its braces and commas)
        o.append(("comm_overlap", "'{" + ",".join([f"_target_:{COMM_OVERLAP_TARGET}"] +
                                                  [f"{k}:{hydra_value(v)}" for k, v in co]) + "}'"))
        notes.append(f"comm_overlap: recipe {name} has none; the launch creates a CommOverlapConfig through Bridge's "
                     "_target_ instantiation of an override (training/utils/omegaconf_utils.py l. 461-471)")
    # rank order
    o.append(("dist.use_tp_pp_dp_mapping", bool(uses_tp_pp_dp_mapping(_plan_arrays(plan)))))
    # fusions (the plan's None is Megatron-LM's default, as export._megatron_args reads it)
    ce = bool(plan.get("cross_entropy_fusion"))
    o += [("model.cross_entropy_loss_fusion", ce),
          ("model.cross_entropy_fusion_impl", plan.get("cross_entropy_fusion_impl") or "native")]
    for f in ("apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion", "gradient_accumulation_fusion"):
        o.append((f"model.{f}", plan.get(f) is not False and not (f == "gradient_accumulation_fusion" and mode in mfsdp)))
    o += [("model.transformer_impl", "transformer_engine"), ("model.cuda_graph_impl", "none"),
          ("model.attention_backend", _bridge_attention_backend(plan))]
    o += _bridge_dropout(model)
    if plan.get("deterministic_mode"):  # Megatron-Core ModelParallelConfig.deterministic_mode (@905c0e386 l. 142)
        o.append(("model.deterministic_mode", True))
    if plan.get("mla_down_proj_fusion"):  # TransformerConfig.mla_down_proj_fusion (@905c0e386 l. 2263)
        o.append(("model.mla_down_proj_fusion", True))
    # precision and the optimizer states' bytes
    b = _bridge_bytes(plan, BYTES_PER_PARAM_PRESETS, rec.moe)
    mp = _bridge_mp_fields(plan, b)
    o += optimizer_overrides(plan, b) if rec.moe else [("optimizer.use_precision_aware_optimizer", False)]
    if rec.mp_object:
        o += [(f"mixed_precision.{f}", mp[f]) for f in MP_FIELDS if f != "fp4"]
    else:
        preset = next((n for n, p in MP_PRESETS.items() if p == mp), None)
        if preset is None:
            raise _bridge_refuse(f"precision {plan['precision']} ({', '.join(f'{k} {v}' for k, v in mp.items() if v != BRIDGE_BF16[k])}): "
                                 f"recipe {name} holds mixed_precision as a preset's name ({BRIDGE} recipes/common.py l. 129), "
                                 "which an override replaces by another name only, and no preset (training/mixed_precision.py) "
                                 "has these fields", f"price it as one of the presets: {', '.join(MP_PRESETS)}")
        o.append(("mixed_precision", preset))
    if mp["fp8"]:
        notes.append("mixed_precision.fp8 hybrid: the plan does not fix e4m3 vs hybrid (the fp8 presets of "
                     "training/mixed_precision.py use hybrid)")
    hw = load_hardware(plan.get("hardware_file") or plan["hardware"])
    g = plan["gpus"]
    per_node = hw.gpus_per_node if g % hw.gpus_per_node == 0 else g
    flex, a2a = plan.get("moe_dispatcher") in ("deepep", "hybridep"), bool(plan.get("ep_comm_overlap"))
    # a gated repository only where the recipe's field says so (megatron_bridge.Recipe.hf_gated: the meta-llama ones)
    gate = "; a gated repository: accept its licence on Hugging Face and log in first" if rec.hf_gated else ""
    notes.append(f"recipe {name}: run_recipe.py builds its model from the Hugging Face config of {rec.hf_id} "
                 f"(AutoBridge.from_hf_pretrained, {rec.file} {rec.lines}), which the launch downloads{gate}")
    lines = ["#!/bin/bash", f"# Megatron-Bridge launch written by `planner export --format {BRIDGE_FMT}`",
             f"# {BRIDGE}: {SCRIPT} --recipe (the recipe's ConfigContainer) with Hydra overrides of its dot paths "
             "(training/config.py, models/gpt_provider.py, training/mixed_precision.py, training/comm_overlap.py)",
             f"# hardware {plan['hardware']}: {g} GPUs = {g // per_node} node(s) x {per_node}",
             "# CUDA_DEVICE_MAX_CONNECTIONS: Bridge's own rule for its launches (recipes/run_plugins.py "
             "PerfEnvPlugin._set_num_cuda_device_max_connections l. 570-595)",
             f"export CUDA_DEVICE_MAX_CONNECTIONS={_bridge_max_connections(hw, tp, cp, pp, g // (tp * cp * pp), flex, a2a)}",
             *nccl_exports(plan, why={"nccl_algo": _BRIDGE_NCCL_NOTE if det else ""}),  # each as priced, commented
             "",
             f"torchrun --nproc_per_node {per_node} --nnodes {g // per_node} {SCRIPT} \\", f"    --recipe {name} \\"]
    body = [f"    {k}={hydra_value(v)}" for k, v in o]
    lines += [ln + " \\" for ln in body[:-1]] + body[-1:]
    return "\n".join(lines) + "\n"


# Bridge's deterministic mode asserts NCCL_ALGO set, to exactly one of BRIDGE_DETERMINISTIC_NCCL_ALGOS (NVIDIA-NeMo/
# Megatron-Bridge @dc805f5cf src/megatron/bridge/training/config.py _validate_and_apply_deterministic_mode l. 1463-1466;
# the reader checks a launch line's value: megatron_bridge._deterministic_nccl_algo)
_BRIDGE_NCCL_NOTE = ("; Bridge's deterministic mode asserts it set, to one of Tree, Ring, CollnetDirect, CollnetChain, "
                     "^NVLS (training/config.py @dc805f5cf l. 1463-1466)")


def _bridge_nccl_algo(plan: dict) -> bool:
    """Whether the plan runs Bridge's deterministic mode, whose start-up asserts NCCL_ALGO set to one of
    BRIDGE_DETERMINISTIC_NCCL_ALGOS: the plan's nccl_algo (priced: comm.nccl_algo_candidates), else refused (a launch
    exporting one the plan was not priced with would not be the plan)."""
    det = bool(plan.get("deterministic_mode"))
    if det and plan.get("nccl_algo") not in BRIDGE_DETERMINISTIC_NCCL_ALGOS:
        raise _bridge_refuse(f"deterministic_mode with nccl_algo {plan.get('nccl_algo')}: Bridge's start-up asserts "
                             f"NCCL_ALGO set to one of {', '.join(BRIDGE_DETERMINISTIC_NCCL_ALGOS)} (training/config.py "
                             "@dc805f5cf l. 1463-1466), and the launch exports only what the plan was priced with",
                             "price it with --nccl-algo Ring (Megatron-LM's own deterministic default, determinism.py "
                             "@d98e8a64 l. 27-31)")
    return det


def _bridge_max_connections(hw, tp: int, cp: int, pp: int, dp: int, flex: bool = False, a2a_overlap: bool = False) -> int:
    """Megatron-Bridge's CUDA_DEVICE_MAX_CONNECTIONS (recipes/run_plugins.py @dc805f5cf l. 570-595): 8, 32 under a
    flex dispatcher (deepep, hybridep: l. 574-575); on sm100 and newer 32 where TP or CP runs beside DP or PP; on
    Hopper and earlier 1 where TP or CP runs without the EP a2a overlap, so the communication kernel is queued
    before the overlapping GEMM."""
    cc = hw.capability
    if cc is None:
        raise _bridge_refuse(f"hardware {hw.name} gives no compute_capability, which Bridge's CUDA_DEVICE_MAX_CONNECTIONS "
                             "rule reads (recipes/run_plugins.py l. 576-590)", "give the hardware entry's compute_capability")
    base = 32 if flex else 8
    if cc >= (10, 0):
        return 32 if (tp > 1 or cp > 1) and (dp > 1 or pp > 1) else base
    return 1 if (tp > 1 or cp > 1) and not a2a_overlap else base


def _bridge_split_loss(plan: dict) -> int:
    return split_loss_units(plan)


def _bridge_attention_backend(plan: dict):
    """model.attention_backend (Megatron-Core AttnBackend: flash, fused, unfused, local, auto): null (the recipes'
    None: Transformer Engine's own choice) where the plan runs the kernel TE picks on its GPU, else the kernel."""
    if plan.get("local_core_attention"):
        raise _bridge_refuse("local_core_attention: not written by the planner's writer", "price it without it")
    if plan.get("attention") == "eager":
        return "unfused"
    k = plan.get("attention_kernel")
    if k and (k != _auto_attention_kernel(plan) or plan.get("attention_kernel_named")):  # named: as the config named it
        return "flash" if k == "flash2" else "fused"
    return None


def _bridge_bytes(plan: dict, presets, moe: bool = False) -> dict:
    from . import plan_bytes

    b = plan_bytes(plan)
    if moe and plan.get("offload_optimizer", "none") == "none":  # a MoE recipe's OptimizerConfig dtypes (bridge_moe.py)
        return b
    if plan.get("precision_aware_optimizer") or plan.get("offload_optimizer", "none") != "none":
        raise _bridge_refuse("the precision-aware optimizer / optimizer offload: not written by the planner's writer",
                             "price it without them")
    if b not in (presets["megatron"].model_dump(), {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}):
        raise _bridge_refuse(f"bytes_per_param {plan.get('bytes_per_param')}: the planner's writer spells bf16 weights with "
                             "fp32 master weights and Adam moments, and fp32 or bf16 main gradients (mixed_precision."
                             "grad_reduce_in_fp32) only", "price it with --bytes-per-param megatron or mixed16")
    return b


def _bridge_mp_fields(plan: dict, b: dict) -> dict:
    """The MixedPrecisionConfig fields of the plan's precision."""
    out = dict(BRIDGE_BF16, grad_reduce_in_fp32=b["gradients"] == 4.0)
    prec = plan["precision"]
    if prec == "fp8":
        rec = plan.get("fp8_recipe") or "delayed"
        if rec not in ("delayed", "tensorwise", "blockwise", "mxfp8"):
            raise _bridge_refuse(f"fp8_recipe {rec}: MixedPrecisionConfig.fp8_recipe takes tensorwise, delayed, mxfp8, "
                                 "blockwise (training/mixed_precision.py l. 45-47)", "price another fp8 recipe")
        if rec == "mxfp8" and plan.get("fp8_param_gather"):
            raise _bridge_refuse("fp8_param_gather with mxfp8: Bridge then reuses the gradient buffer for the gather "
                                 "(mixed_precision.py l. 87-92), which the planner does not price", "price it without it")
        out.update(fp8="hybrid", fp8_recipe=rec, fp8_param_gather=bool(plan.get("fp8_param_gather")))
        s, e = int(plan.get("bf16_layers_at_start") or 0), int(plan.get("bf16_layers_at_end") or 0)
        if s or e:
            out.update(first_last_layers_bf16=True, num_layers_at_start_in_bf16=s, num_layers_at_end_in_bf16=e)
    elif prec != "bf16":
        raise _bridge_refuse(f"precision {prec}: the planner's writer spells bf16 and fp8 only", "price it in bf16 or fp8")
    return out
