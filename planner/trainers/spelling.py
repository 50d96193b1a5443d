"""A `planner check` suggestion spelled completely in the trainer's own config (issue 22).

A change check.py suggests (TP, CP, PP, EP, sharding, micro-batch, recompute, TP overlap) is
a modified planner Job; the trainer's file must change in every setting that the checked plan
depends on, not only in the knob's own key. A change that shrinks dp = gpus / (tp cp pp) at a
fixed GPU count and global batch moves, with the knob:
  torchtitan  the data-parallel degrees where the file states them: ParallelDims._validate
              (torchtitan/distributed/parallel_dims.py @e347b1e5e) asserts dp_replicate x
              dp_shard x cp x tp x pp == world_size, with dp_shard -1 the leftover ranks;
              so a stated degree is spelled with its new value, an inferred one (-1) is named
              with the degree it now takes. The global batch: global_batch_size -1 (absent)
              is local_batch_size x dp (job_config.py @e347b1e5e Training.global_batch_size;
              the reader, torchtitan.py), so a smaller dp would shrink it: the checked plan
              keeps it, and the spelling sets it. Going from pp 1 to pp > 1 spells the
              pipeline keys whose torchtitan defaults differ from the checked plan
              (pipeline_parallel_microbatch_size default 1, the first / last stage's
              embedding and output weights default 1 each: the planner's account_for_*).
  deepspeed   zero_optimization.stage where the level's stage differs from the file's (hsdp -> fsdp
              keeps stage 3 and sets mics_shard_size -1, MiCS off); the batch triple train_batch_size = train_micro_batch_size_per_gpu x
              gradient_accumulation_steps x dp (deepspeed/runtime/config.py
              _set_batch_related_parameters): the accumulation is spelled where the file
              states it, or where an absent train_batch_size would let its default of 1
              shrink the batch; where DeepSpeed derives it (train_batch_size and the
              micro-batch stated), the new value is named. A DeepSpeed JSON has no model
              parallelism, activation checkpointing or TP overlap key: such a change cannot be
              written in it, and the spelling says so, naming Megatron-DeepSpeed's launcher
              argument, with what the JSON then needs: the batch keys at DeepSpeed's world size,
              the data-parallel size (deepspeed/runtime/config.py @38327e07 l. 725-726, world_size =
              mpu.get_data_parallel_world_size()), which the reader takes from --tp / --pp, the
              launcher's arguments on the planner's command line (deepspeed.py), so the JSON as
              spelled reads back, with them, as the plan checked. (DeepSpeed's own JSON key
              tensor_parallel.autotp_size, AutoTP training for Hugging Face models at @38327e07
              runtime/tensor_parallel/config.py, is another TP than Megatron-DeepSpeed's, not
              priced: the reader lists it as not modelled.)
  megatron    --global-batch-size stays and Megatron derives the number of micro-batches
              (global / (micro x dp): megatron/core/num_microbatches_calculator.py
              @d98e8a64), named as it changes; a script without --global-batch-size takes
              micro x dp (arguments.py @d98e8a64 validate_args), so the spelling adds it.
              A rank-order change (--use-tp-pp-dp-mapping) is carried (check.py). A plan checked at
              zero1 / zero2 under the DP overlap with its parameter all-gather hidden (the job's
              dp_param_gather_overlap left out) adds --overlap-param-gather where the script lacks it
              (_param_gather: a DDP script moved to the distributed optimizer; step.py [40]).
              --sequence-parallel as the checked plan runs it once tp > 1: Megatron turns a
              stated --sequence-parallel off at tp 1 only (arguments.py @d98e8a64 l. 1433-1439;
              the reader reads it so), so a TP rung above 1 runs it (check.py ladders,
              asks_sequence_parallel) and the spelling says the flag stays; where the plan
              checked runs TP without it (the command line's --no-sequence-parallel) it says to
              drop the flag, and to add it where the plan runs it and the script does not state it.
A change a file cannot hold (a DeepSpeed JSON's TP, PP, CP, EP, recompute, TP overlap; a sharding
level a command-line stack offers that the file's trainer does not build) is named as such, with
the keys the file then needs.

`spell(fmt, knobs, before, after, stated, order)` returns the Settings (key, value, text) and
notes; `Setting.value` None drops a flag / key. `stated` is what the reader recorded of the
file (TrainerConfig.stated); None reads as a file that states none of these keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from ..catalog import load_stack
from .bridge_sharding import SHARDING_MODES as BRIDGE_SHARDING_MODES, sharding_overrides as bridge_sharding_overrides

# torchtitan job_config.py @e347b1e5e defaults of the keys spelled here
TT_DEFAULTS = {"parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
               "parallelism.pipeline_parallel_microbatch_size": 1,
               "parallelism.pipeline_parallel_first_stage_less_layers": 1,
               "parallelism.pipeline_parallel_last_stage_less_layers": 1,
               "parallelism.pipeline_parallel_schedule": "1F1B", "parallelism.fsdp_reshard_after_forward": "default",
               "training.global_batch_size": -1, "training.local_batch_size": 8}
TT_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}  # torchtitan.SCHEDULES inverted
TT_RESHARD = {"fsdp2_no_reshard": "never", "fsdp2_reshard_always": "always"}  # torchtitan.py read(): the fsdp modes
DS_STAGES = {"none": 0, "zero1": 1, "zero2": 2, "fsdp": 3, "hsdp": 3}  # deepspeed.ZERO_STAGES inverted


def ds_stage(plan: dict) -> int:
    """The plan's zero_optimization.stage: its level's (DS_STAGES), but stage 0 for the megatron-deepspeed mode
    bf16_optimizer (DeepSpeed runs bf16 at stage 0 as its BF16_Optimizer: deepspeed.py gradient_path)."""
    return 0 if plan.get("sharding_mode") == "bf16_optimizer" else DS_STAGES[plan["sharding"]]
MEGATRON_AXES = {"tp": "--tensor-model-parallel-size", "cp": "--context-parallel-size",
                 "pp": "--pipeline-model-parallel-size", "ep": "--expert-model-parallel-size"}
TT_AXES = {"tp": "tensor_parallel_degree", "cp": "context_parallel_degree", "pp": "pipeline_parallel_degree",
           "ep": "expert_parallel_degree"}
# what a DeepSpeed JSON cannot hold (deepspeed.py: tp = pp = cp = 1 inferred; recompute set in the model code)
DS_NO_KEY = {"tp": "TP (Megatron-DeepSpeed's --tensor-model-parallel-size {tp}, on its command line)",
             "pp": "PP (Megatron-DeepSpeed's --pipeline-model-parallel-size {pp}, on its command line)",
             "cp": "CP",
             "ep": "EP (set where the model is built)",
             "recompute": "activation checkpointing (set in the model code)",
             "tp_comm_overlap": "TP communication overlap"}


FILE_NAMES = {"deepspeed": "a DeepSpeed JSON", "torchtitan": "a torchtitan TOML", "megatron": "Megatron's flags",
              "megatron-bridge": "Megatron-Bridge's run_recipe.py overrides",
              "megatron-deepspeed": "a Megatron-DeepSpeed script and its ds_config JSON",
              "torchtitan-0.3": "a torchtitan 0.3.0 launch line"}
# what a Megatron-DeepSpeed script cannot hold (megatron_deepspeed.py: no CP, no TP overlap on its stack)
MDS_NO_KEY = {"cp": "CP (DeepSpeed-Ulysses' --ds-sequence-parallel-size is another split, not priced)",
              "tp_comm_overlap": "TP communication overlap"}
TT_LEVELS = ("none", "fsdp", "hsdp")  # what torchtitan.py read() builds: DDP, FSDP, HSDP


@dataclass(frozen=True)
class Setting:
    key: str  # the trainer's key: '--context-parallel-size', 'parallelism.context_parallel_degree', 'zero_optimization.stage'
    value: Any  # the value to write; None: drop the flag or key; True: a flag without a value
    text: str  # as printed


@dataclass
class Spelling:
    settings: list[Setting]
    notes: list[str]
    unspellable: list[str]  # the changes the trainer's file has no key for (DS_NO_KEY)

    def text(self, fmt: str) -> str:
        parts: list[str] = []
        for s in self.settings:  # Megatron's flags one command line, as written; anything else one by one
            if fmt == "megatron" and parts and s.text.startswith("--") and parts[-1].startswith("--"):
                parts[-1] += " " + s.text
            else:
                parts.append(s.text)
        parts += self.notes
        if self.unspellable:
            head = (f"not spelled by the planner's {fmt} export (it writes DDP, the distributed optimizer, torch "
                    f"FSDP2 and Megatron-FSDP's optim, optim_grads, optim_grads_params and its HSDP): {', '.join(self.unspellable)}" if fmt == "megatron-bridge" else
                    f"cannot be written in {FILE_NAMES[fmt]}: it has no key for {', '.join(self.unspellable)}")
            needs = "the launch needs" if fmt == "megatron-bridge" else "the JSON needs"
            return head + (f"; with it {needs} {'; '.join(parts)}" if parts else "")
        return "; ".join(parts)


def _tt(key: str, value) -> Setting:
    section, name = key.split(".", 1)
    shown = "true" if value is True else "false" if value is False else f'"{value}"' if isinstance(value, str) else value
    return Setting(key, value, f"[{section}] {name} = {shown}")


def sharding_spelling(plan: dict) -> Optional[str]:
    """The stack's own spelling of the plan's sharding mode (stack_db runs.sharding), or None."""
    runs = load_stack(plan["stack"]).runs
    mode = next((m for m in (runs.sharding if runs else ()) if m.name == plan.get("sharding_mode")), None)
    return mode.spelling if mode is not None else None


def _megatron_flags(spelling: str) -> list[Setting]:
    """A stack_db spelling made of Megatron flags ('--use-megatron-fsdp --data-parallel-sharding-strategy
    optim ...') as flag settings; [] for a spelling in words."""
    words = spelling.split()
    if not words or not words[0].startswith("--"):
        return []
    out, i = [], 0
    while i < len(words):
        flag, value = words[i], True
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            value, i = words[i + 1], i + 1
        out.append(Setting(flag, value, flag if value is True else f"{flag} {value}"))
        i += 1
    return out


def _megatron_fsdp_dtypes(plan: dict) -> list[Setting]:
    """A Megatron-FSDP mode's gradient dtype flags where the plan keeps fp32 gradients, as the export writes them
    (trainers.megatron_fsdp_grad_flags; memory.py [mg]): Megatron-FSDP's default keeps and reduces them in the
    parameters' bf16 (NVIDIA/Megatron-LM @d98e8a64 arguments.py l. 3691-3698), and the reader reads a script without
    them so."""
    from . import megatron_fsdp_grad_flags

    return [Setting(f, v, f"{f} {v}") for f, v in megatron_fsdp_grad_flags(plan)]


def spell_order(stack_name: str, before: str, after: str) -> str:
    """A rank-order change in the stack's own words (stack_db runs.rank_orders spelling)."""
    runs = load_stack(stack_name).runs
    spell = {ro.order: ro.spelling for ro in (runs.rank_orders if runs is not None else ())}
    return f"rank order {after} {spell.get(after, '')} instead of {spell.get(before, before)}".replace("  ", " ")


# Megatron-Bridge's ConfigContainer keys (megatron_bridge.py, NVIDIA-NeMo/Megatron-Bridge @dc805f5cf), as run_recipe.py
# overrides key=value
BRIDGE_AXES = {"tp": "model.tensor_model_parallel_size", "cp": "model.context_parallel_size",
               "pp": "model.pipeline_model_parallel_size", "ep": "model.expert_model_parallel_size"}


def _ov(key: str, value) -> Setting:
    return Setting(key, value, f"{key}={hydra_value(value)}")


def hydra_value(x) -> str:
    """A value in Hydra's override grammar: true / false, null, a list [a,b], numbers and words as they are."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if x is None:
        return "null"
    if isinstance(x, (list, tuple)):
        return "[" + ",".join(hydra_value(i) for i in x) + "]"
    return str(x)


def _bridge_knob(knob: str, plan: dict) -> list[Setting]:
    """A knob's own ConfigContainer override(s) (export._megatron_bridge writes the same)."""
    if knob in BRIDGE_AXES:
        return [_ov(BRIDGE_AXES[knob], plan[knob])]
    if knob == "micro_batch":
        return [_ov("train.micro_batch_size", plan["micro_batch"])]
    if knob == "recompute":
        r = plan["recompute"]
        full = r == "full"
        return [_ov("model.recompute_granularity", None if r == "none" else r),
                _ov("model.recompute_method", "uniform" if full else None),
                _ov("model.recompute_num_layers", 1 if full else None)]
    if knob == "tp_comm_overlap":
        return [_ov("comm_overlap.tp_comm_overlap", False)]
    if knob == "sharding" and plan.get("sharding_mode") in BRIDGE_SHARDING_MODES:
        # the mode's overrides as the export writes them (bridge_sharding.sharding_overrides), with the
        # gradient-accumulation fusion as the plan runs it (off under torch FSDP2 and Megatron-FSDP: the modes' job
        # settings)
        return [_ov(k, v) for k, v in bridge_sharding_overrides(plan)] + \
            [_ov("model.gradient_accumulation_fusion", plan.get("gradient_accumulation_fusion") is not False)]
    return []


def _knob(fmt: str, knob: str, plan: dict) -> list[Setting]:
    """The knob's own key(s) in the trainer's file, with the checked plan's value."""
    if fmt == "megatron-bridge":
        return _bridge_knob(knob, plan)
    if fmt == "megatron-deepspeed":  # Megatron's flags for the model parallelism, the JSON's keys for ZeRO (and both
        # for the micro-batch, which must agree: megatron_deepspeed.py)
        if knob == "ep":  # DeepSpeed-MoE's degree (microsoft/Megatron-DeepSpeed @f4157bea arguments.py l. 1159)
            return [Setting("--moe-expert-parallel-size", plan["ep"], f"--moe-expert-parallel-size {plan['ep']}")]
        if knob in MEGATRON_AXES and knob not in MDS_NO_KEY:
            return [Setting(MEGATRON_AXES[knob], plan[knob], f"{MEGATRON_AXES[knob]} {plan[knob]}")]
        if knob == "micro_batch":
            return [Setting("--micro-batch-size", plan["micro_batch"], f"--micro-batch-size {plan['micro_batch']}"),
                    *_knob("deepspeed", knob, plan)]
        if knob == "sharding":
            stage = ds_stage(plan)
            return [*_knob("deepspeed", knob, plan), Setting("--zero-stage", stage, f"--zero-stage {stage}")]
        if knob == "recompute":
            r = plan["recompute"]
            if r == "full":
                return [Setting("--checkpoint-activations", True, "--checkpoint-activations")]
            return [Setting("--checkpoint-activations", None, "drop --checkpoint-activations")] + (
                [Setting("--recompute-granularity", "selective", "--recompute-granularity selective")]
                if r == "selective" else [])
        return []
    if fmt == "megatron":
        if knob in MEGATRON_AXES:
            return [Setting(MEGATRON_AXES[knob], plan[knob], f"{MEGATRON_AXES[knob]} {plan[knob]}")]
        if knob == "micro_batch":
            return [Setting("--micro-batch-size", plan["micro_batch"], f"--micro-batch-size {plan['micro_batch']}")]
        if knob == "recompute":
            r = plan["recompute"]
            out = [Setting("--recompute-granularity", r, f"--recompute-granularity {r}")]
            if r == "full":
                out += [Setting("--recompute-method", "uniform", "--recompute-method uniform"),
                        Setting("--recompute-num-layers", 1, "--recompute-num-layers 1")]
            return out
        if knob == "tp_comm_overlap":
            return [Setting("--tp-comm-overlap", None, "drop --tp-comm-overlap")]
        # (the mode's flags, with Megatron-FSDP's dtype flags where priced so; [] where the mode is no flags: unspellable)
        return _megatron_flags(sharding_spelling(plan) or "") + _megatron_fsdp_dtypes(plan)
    if fmt == "torchtitan":
        if knob in TT_AXES:
            return [_tt(f"parallelism.{TT_AXES[knob]}", plan[knob])]
        if knob == "recompute":
            r = plan["recompute"]
            return [_tt("activation_checkpoint.mode", r)] + ([_tt("activation_checkpoint.selective_ac_option", "op")]
                                                            if r == "selective" else [])
        if knob == "tp_comm_overlap":
            return [_tt("parallelism.enable_async_tensor_parallel", False)]
        return []  # micro_batch and sharding: the batch and DP keys, derived in _torchtitan
    if knob == "micro_batch":
        return [Setting("train_micro_batch_size_per_gpu", plan["micro_batch"],
                        f"\"train_micro_batch_size_per_gpu\": {plan['micro_batch']}")]
    if knob == "sharding":
        stage = ds_stage(plan)
        return [Setting("zero_optimization.stage", stage, f"\"zero_optimization\": {{\"stage\": {stage}}}")]
    return []


def asks_sequence_parallel(fmt: str, stated: Optional[dict]) -> bool:
    """Whether the trainer's file asks for sequence parallelism wherever TP runs, though its own TP
    turns it off: a Megatron script's --sequence-parallel, which Megatron sets off at tp 1 only
    (arguments.py @d98e8a64 l. 1433-1439). torchtitan's TP always runs it (the reader's TORCHTITAN_SP
    leaves it to resolve's default at tp 1: on once tp > 1); a DeepSpeed JSON has no TP."""
    return fmt == "megatron" and bool((stated or {}).get("--sequence-parallel"))


def spell_change(fmt: str, knob: str, plan: dict) -> str:
    """One knob's own key(s) in the trainer's words (no derived keys: `spell` gives those)."""
    if fmt == "deepspeed" and knob in DS_NO_KEY:
        return f"cannot be written in a DeepSpeed JSON: it has no key for {DS_NO_KEY[knob].format(**plan)}"
    return "; ".join(s.text for s in _knob(fmt, knob, plan))


def spell(fmt: str, knobs: list[str], before: dict, after: dict, stated: Optional[dict],
          order: Optional[tuple[str, str]] = None) -> Spelling:
    """Every setting of the trainer's file that the suggestion moves (module docstring): the
    knobs' own keys, then what must change with them. before / after: explain's `plan` of the
    job and of the checked change."""
    if fmt == "torchtitan-0.3":  # the same keys as torchtitan's TOML, spelled as 0.3.0's options (torchtitan03.py)
        sp = spell("torchtitan", knobs, before, after, stated, order)
        settings = [_option_03(x) for x in sp.settings if x.key != "activation_checkpoint.selective_ac_option"]
        if _cuda_graph_conflict(after) and not _cuda_graph_conflict(before):
            # 0.3.0 refuses PP, and EP but under HybridEP's non-blocking dispatch, with its CUDA graphs on (the
            # launch line's default; the reader refuses a line that states the axis without the flag)
            settings.append(Setting("training.disable_cuda_graphs", True, "--training.disable_cuda_graphs (0.3.0 refuses "
                                    f"{'PP' if _cuda_graph_conflict(after) == 'pp' else 'this EP dispatch'} with its "
                                    "CUDA graphs: trainer.py _validate_cuda_graphs l. 179-210)"))
        return Spelling(settings, sp.notes, sp.unspellable)
    stated = stated or {}
    settings: list[Setting] = []
    for k in knobs:
        settings += _knob(fmt, k, after)
    notes: list[str] = []
    unspellable = [DS_NO_KEY[k].format(**after) for k in knobs if fmt == "deepspeed" and k in DS_NO_KEY]
    unspellable += [MDS_NO_KEY[k] for k in knobs if fmt == "megatron-deepspeed" and k in MDS_NO_KEY]
    if "sharding" in knobs and ((fmt == "torchtitan" and after["sharding"] not in TT_LEVELS) or
                                (fmt in ("megatron", "megatron-bridge") and not _knob(fmt, "sharding", after))):
        # a stack chosen on the command line whose mode the file's trainer does not run
        unspellable.append(f"sharding {after['sharding']} ({after.get('sharding_mode')}: {sharding_spelling(after)})")
    if fmt == "torchtitan":
        settings += _torchtitan(before, after, stated)
    elif fmt == "megatron":
        settings += _megatron(before, after, stated, notes, order) + _param_gather(after, stated)
    elif fmt == "megatron-bridge":
        settings += _bridge(before, after, notes, order)
    elif fmt == "megatron-deepspeed":  # Megatron's global batch, and the JSON's batch triple at the new dp
        settings = [s for s in settings if not (s.key in ("zero_optimization.stage", "--zero-stage") and
                                                stated.get(s.key, 0 if s.key.startswith("zero") else 1) == s.value)]
        if after["pp"] > 1 and stated.get("--no-pipeline-parallel"):  # Megatron-DeepSpeed asserts pp 1 with it
            settings.append(Setting("--no-pipeline-parallel", None, "drop --no-pipeline-parallel (DeepSpeed's pipeline "
                                                                   "engine runs PP; arguments.py l. 94-96)"))
        settings += _megatron(before, after, stated, notes, None) + _deepspeed(knobs, before, after, stated, notes)
    else:
        # a stage the file already states needs no key (hsdp -> fsdp keeps stage 3: only mics_shard_size moves)
        settings = [s for s in settings if not (s.key == "zero_optimization.stage" and
                                                stated.get("zero_optimization.stage", 0) == s.value)]
        settings += _deepspeed(knobs, before, after, stated, notes)
    return Spelling(_dedupe(settings), notes, unspellable)


def cuda_graph_conflict(pp: int, ep: int, dispatcher: Optional[str], capacity: Optional[float]) -> Optional[str]:
    """Which of the plan's axes torchtitan 0.3.0's _validate_cuda_graphs refuses beside CUDA graphs (release/0.3
    @4f9e9a47d trainer.py l. 179-210; torchtitan03.cuda_graph_refusal says it): 'pp' (pp > 1), 'ep' (ep > 1 under any dispatch but HybridEP's non-blocking one: dispatcher hybridep with a
    capacity factor; 0 or None is the blocking dispatch, plan_dict's moe_hybridep_capacity_factor), else None."""
    if pp > 1:
        return "pp"
    if ep > 1 and not (dispatcher == "hybridep" and capacity):
        return "ep"
    return None


def _cuda_graph_conflict(plan: dict) -> Optional[str]:
    """cuda_graph_conflict of an explain `plan` dict (pp, ep and its MoE dispatch)."""
    return cuda_graph_conflict(plan["pp"], plan.get("ep", 1), plan.get("moe_dispatcher"),
                               plan.get("moe_hybridep_capacity_factor"))


def _option_03(x: Setting) -> Setting:
    """A torchtitan TOML key's Setting as torchtitan 0.3.0's command-line option (torchtitan03.py: the policy a
    subcommand, async TP under [compile], a boolean a flag)."""
    if x.key == "activation_checkpoint.mode":
        return Setting(x.key, x.value, f"activation-checkpoint:{x.value}")
    key = "compile.enable_async_tensor_parallel" if x.key == "parallelism.enable_async_tensor_parallel" else x.key
    if x.value is None:
        return Setting(key, None, f"drop --{key}")
    if isinstance(x.value, bool):
        section, name = key.rsplit(".", 1)
        return Setting(key, x.value, f"--{key}" if x.value else f"--{section}.no-{name.replace('_', '-')}")
    m = re.fullmatch(r"\[([\w.]+)\] (\w+) = (\S+)(.*)", x.text, re.S)  # _tt's text, with what it adds kept
    tail = m.group(4) if m is not None and f"{m.group(1)}.{m.group(2)}" == x.key else ""
    return Setting(key, x.value, f"--{key} {x.value}{tail}")


def _dedupe(settings: list[Setting]) -> list[Setting]:
    seen: dict[str, Setting] = {}
    for s in settings:
        seen.setdefault(s.key, s)
    return list(seen.values())


def _torchtitan(before: dict, after: dict, stated: dict) -> list[Setting]:
    def file(key):
        return stated.get(key, TT_DEFAULTS[key])

    out: list[Setting] = []
    dp, pp = after["dp"], after["pp"]
    # the data-parallel degrees the plan's sharding needs (torchtitan.py read(): rep x shard = dp)
    if after["sharding"] not in TT_LEVELS or before["sharding"] not in TT_LEVELS:
        rep = shard = None  # a level torchtitan does not build (a command-line stack's): no degrees to spell
    elif after["sharding"] == "hsdp":
        rep, shard = dp // after["shard_group"], after["shard_group"]
    elif after["sharding"] == "fsdp":
        rep, shard = 1, dp
    else:
        rep, shard = dp, 1
    before_shard = (before["shard_group"] if before["sharding"] == "hsdp" else
                    before["dp"] if before["sharding"] == "fsdp" else 1)
    if rep is not None:
        if file("parallelism.data_parallel_replicate_degree") != rep:
            out.append(_tt("parallelism.data_parallel_replicate_degree", rep))
        if file("parallelism.data_parallel_shard_degree") == -1:
            if shard != before_shard:  # inferred: named with the degree it now takes
                s = _tt("parallelism.data_parallel_shard_degree", -1)
                out.append(Setting(s.key, -1, f"{s.text} (the leftover GPUs: {before_shard} -> {shard})"))
        elif file("parallelism.data_parallel_shard_degree") != shard:
            out.append(_tt("parallelism.data_parallel_shard_degree", shard))
    if after["sharding"] in ("fsdp", "hsdp") and after.get("sharding_mode") != before.get("sharding_mode"):
        need = TT_RESHARD.get(after.get("sharding_mode"), "default")
        if file("parallelism.fsdp_reshard_after_forward") != need:
            out.append(_tt("parallelism.fsdp_reshard_after_forward", need))
    # the batch: local_batch_size is the micro-batch without PP; global_batch_size -1 = local x dp
    local = file("training.local_batch_size") if "training.local_batch_size" in stated else stated.get("training.batch_size", 8)
    if pp == 1 and local != after["micro_batch"]:
        local = after["micro_batch"]
        out.append(_tt("training.local_batch_size", local))
    gbs = file("training.global_batch_size")
    if (gbs if gbs != -1 else local * dp) != after["global_batch"]:
        out.append(_tt("training.global_batch_size", after["global_batch"]))
    if pp > 1:
        if file("parallelism.pipeline_parallel_microbatch_size") != after["micro_batch"]:
            out.append(_tt("parallelism.pipeline_parallel_microbatch_size", after["micro_batch"]))
        if before["pp"] == 1:  # the pipeline keys a pp 1 file left at their defaults
            for key, field in (("parallelism.pipeline_parallel_first_stage_less_layers", "account_for_embedding_in_pipeline_split"),
                               ("parallelism.pipeline_parallel_last_stage_less_layers", "account_for_loss_in_pipeline_split")):
                if file(key) != int(bool(after.get(field))):
                    out.append(_tt(key, int(bool(after.get(field)))))
            sched = TT_SCHEDULES.get(after.get("schedule"))
            if sched is not None and file("parallelism.pipeline_parallel_schedule") != sched:
                out.append(_tt("parallelism.pipeline_parallel_schedule", sched))
    return out


def _megatron(before: dict, after: dict, stated: dict, notes: list, order) -> list[Setting]:
    out: list[Setting] = []
    if order is not None:
        out.append(Setting("--use-tp-pp-dp-mapping", None if order[1] != "tp-cp-pp-dp" else True,
                           spell_order(after["stack"], *order)))
    # --sequence-parallel as the checked plan runs it: Megatron turns it off at tp 1 (arguments.py), so a
    # script that states it at tp 1 would run it once TP is raised; the plan checked is the one spelled
    sp_file = bool(stated.get("--sequence-parallel"))
    if after["tp"] > 1 and bool(after.get("sequence_parallel")) != sp_file:
        out.append(Setting("--sequence-parallel", True, "--sequence-parallel") if after.get("sequence_parallel") else
                   Setting("--sequence-parallel", None, "drop --sequence-parallel (the plan checked runs TP without it)"))
    elif after["tp"] > 1 and sp_file and not before.get("sequence_parallel"):  # off at the script's tp 1, on at the new TP
        notes.append(f"--sequence-parallel stays (Megatron runs it at tp {after['tp']}; off at tp 1 only: arguments.py)")
    m0, m1 = before.get("microbatches_per_step"), after.get("microbatches_per_step")
    if stated.get("--global-batch-size") or stated.get("--step-batch-size-schedule"):
        if m0 is not None and m1 is not None and m0 != m1:
            notes.append(f"num-microbatches {m0} -> {m1} (Megatron derives it: --global-batch-size / "
                         "(--micro-batch-size x dp); no flag)")
    elif after["global_batch"] != after["micro_batch"] * after["dp"]:  # the default, micro x dp, would move it
        out.append(Setting("--global-batch-size", after["global_batch"], f"--global-batch-size {after['global_batch']}"))
    return out


def _param_gather(after: dict, stated: dict) -> list[Setting]:
    """--overlap-param-gather where the plan checked hides the distributed optimizer's (Adam's, or Muon's layer-wise
    one's: step.py [40]) all-gather (zero1 / zero2 under
    the DP overlap, its dp_param_gather_overlap left out: tied, step.py [40]) and the script does not state it (a DDP
    script moved to the distributed optimizer): without it Megatron gathers after the step, exposed, and the script
    would read back as another plan (megatron.py reads the flag's absence as dp_param_gather_overlap false)."""
    if (after.get("sharding") in ("zero1", "zero2") and after.get("dp_comm_overlap")
            and after.get("dp_param_gather_overlap") is not False and not stated.get("--overlap-param-gather")):
        return [Setting("--overlap-param-gather", True, "--overlap-param-gather (the plan checked hides the distributed "
                                                        "optimizer's parameter all-gather behind the forward)")]
    return []


def _bridge(before: dict, after: dict, notes: list, order) -> list[Setting]:
    """What moves with a knob in a Bridge launch: the rank order (dist.use_tp_pp_dp_mapping), sequence parallelism as
    the checked plan runs it (model.sequence_parallel, written by the export whatever TP is), the global batch the
    recipe states (train.global_batch_size: Megatron-Core derives the micro-batch count from it)."""
    out: list[Setting] = []
    if order is not None:
        out.append(_ov("dist.use_tp_pp_dp_mapping", order[1] == "tp-cp-pp-dp"))
    if bool(after.get("sequence_parallel")) != bool(before.get("sequence_parallel")):
        out.append(_ov("model.sequence_parallel", bool(after.get("sequence_parallel"))))
    m0, m1 = before.get("microbatches_per_step"), after.get("microbatches_per_step")
    if m0 is not None and m1 is not None and m0 != m1:
        notes.append(f"micro-batches per step {m0} -> {m1} (Megatron-Core derives them: train.global_batch_size / "
                     "(train.micro_batch_size x dp); no key)")
    return out


def _deepspeed(knobs, before: dict, after: dict, stated: dict, notes: list) -> list[Setting]:
    out: list[Setting] = []
    if stated.get("zero_optimization.mics_shard_size") not in (None, -1) and after["sharding"] != "hsdp":
        out.append(Setting("zero_optimization.mics_shard_size", -1, "\"zero_optimization\": {\"mics_shard_size\": -1}"))
    if "sharding" in knobs:  # the file's overlap_comm as the new stage reads it (deepspeed.py): kept where it agrees
        from .deepspeed import overlap_default

        stage, given = ds_stage(after), stated.get("zero_optimization.overlap_comm")
        reads = (overlap_default(stage) if given is None else bool(given)) and after.get("sharding_mode") not in (
            "zero0", "bf16_optimizer")  # no ZeRO optimizer: overlap_comm not read (deepspeed.ZERO_OPTIMIZER_ENGINE)
        if reads != bool(after["dp_comm_overlap"]):
            v = bool(after["dp_comm_overlap"])
            out.append(Setting("zero_optimization.overlap_comm", v,
                               f"\"zero_optimization\": {{\"overlap_comm\": {str(v).lower()}}}"))
    g, m, dp = after["global_batch"], after["micro_batch"], after["dp"]
    gas, gas0 = g // (m * dp), before["global_batch"] // (before["micro_batch"] * before["dp"])
    tbs, gas_f, mbs_f = (stated.get(k) for k in ("train_batch_size", "gradient_accumulation_steps", "train_micro_batch_size_per_gpu"))
    if tbs is not None and tbs != g:
        out.append(Setting("train_batch_size", g, f"\"train_batch_size\": {g}"))
    if tbs is not None and gas_f is None and (mbs_f is not None or "micro_batch" in knobs):
        if gas != gas0:  # train_batch_size and the micro-batch stated: DeepSpeed derives the accumulation
            notes.append(f"gradient_accumulation_steps {gas0} -> {gas} (DeepSpeed derives it: train_batch_size / "
                         "(micro x dp); no key)")
    elif (gas_f if gas_f is not None else 1) != gas:  # stated, or its default 1 would move the batch
        out.append(Setting("gradient_accumulation_steps", gas, f"\"gradient_accumulation_steps\": {gas}"))
    return out
