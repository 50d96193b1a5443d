"""Read a DeepSpeed JSON config (ds_config.json) into planner job fields; the model comes
from --model (a catalog name, a model YAML or the Hugging Face config.json the JSON sits
next to) and the GPU count from --gpus (a DeepSpeed JSON names neither).

Keys follow the DeepSpeed configuration reference [1] (deepspeed.ai/docs/config-json, as
published in 2025). Modelled:
  train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
    (train_batch_size = micro x accumulation x dp [1] "Batch Size Related Parameters";
    each may be "auto", the Hugging Face Trainer's placeholder [2], read as absent),
  zero_optimization.stage (0 none, 1 zero1, 2 zero2, 3 fsdp: ZeRO-3 shards parameters,
    gradients and optimizer states like FSDP), zero_optimization.mics_shard_size (ZeRO-3
    within groups of that many GPUs, replicated across them: hsdp, the stack's zero3_mics
    mode), zero_optimization.overlap_comm (-> dp_comm_overlap,
    DeepSpeed's default false), bf16.enabled, fp16.enabled (priced as bf16).
Listed as ignored ('key=value (why)'): keys with no effect on memory or step time (clipping,
the Adam(W) optimizer's hyper-parameters, schedules, logging, loss scaling); as not modelled:
every other key, among them zero_optimization's buckets and prefetch and offload_optimizer /
offload_param (CPU/NVMe offload is not modelled: the planner prices the states on the GPU, an
upper bound on memory).

Inferred (listed as assumed): tp = pp = cp = 1 (a DeepSpeed JSON has no model parallelism;
Megatron-DeepSpeed passes it as arguments); recompute none (activation checkpointing is set
in the model code, e.g. Hugging Face gradient_checkpointing; pass --recompute); the stack
megatron-deepspeed unless --stack says otherwise.

References
[1] DeepSpeed configuration JSON, https://www.deepspeed.ai/docs/config-json/ (batch size,
    bf16 / fp16, zero_optimization: stage, overlap_comm, offload_optimizer, offload_param).
[2] huggingface/transformers docs, "DeepSpeed" integration: "auto" values filled from the
    TrainingArguments.
[3] huggingface/transformers docs/source/en/deepspeed.md, the ZeRO-2 example
    (allgather_partitions, allgather_bucket_size 5e8, overlap_comm, reduce_scatter,
    reduce_bucket_size 5e8, contiguous_gradients): the layout of the fixture
    tests/data/trainer_configs/ds_config_zero2.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .. import files
from ..errors import PlannerError
from . import TrainerConfig, fmt_ignored, resolve_gpus

ZERO_STAGES = {0: "none", 1: "zero1", 2: "zero2", 3: "fsdp"}
MODELLED_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
                "bf16", "fp16"}
MODELLED_ZERO = {"stage", "overlap_comm", "mics_shard_size"}
# top-level keys with no effect on the plan's memory or step time, and why
NO_COST = {"gradient_clipping": "a norm over the gradients once a step", "optimizer": "optimizer hyper-parameters (Adam(W) priced)",
           "scheduler": "the learning-rate schedule", "steps_per_print": "logging", "wall_clock_breakdown": "logging",
           "tensorboard": "logging", "wandb": "logging", "csv_monitor": "logging", "comms_logger": "logging",
           "flops_profiler": "profiling", "zero_allow_untested_optimizer": "an optimizer check"}
# the stack's modes (stack_db megatron-deepspeed runs.sharding) by stage
ZERO_MODES = {0: "zero0", 1: "zero1", 2: "zero2", 3: "zero3"}


def _num(where, key, v) -> Optional[int]:
    if v is None or v == "auto":
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise PlannerError(f"{where}{key} = {v!r} is not a positive whole number", f"set {key} to an integer or \"auto\"")
    return v


def read(path: Path, text: Optional[str] = None, *, model: Optional[str] = None, gpus: Optional[int] = None,
         hardware: Optional[str] = None) -> TrainerConfig:
    """The config at `path`; `text`: its text when the caller already read it (else read here)."""
    where = f"{path}: "
    hint = "give a DeepSpeed ds_config.json"
    data = files.parse_json(files.read_text(path, hint) if text is None else text, str(path), hint)
    if not isinstance(data, dict):
        raise PlannerError(f"{where}expected a JSON object", hint)
    ignored, assumed, not_modelled = [], [], []
    for k, v in data.items():
        if k not in MODELLED_TOP:
            why = NO_COST.get(k)
            if k == "optimizer" and isinstance(v, dict) and str(v.get("type", "")).lower() not in ("adam", "adamw"):
                why = None  # another optimizer keeps other states than the Adam moments priced
            if why is None:
                not_modelled.append(fmt_ignored(k, v) + " (not priced: it may change memory or time)")
            else:
                ignored.append(fmt_ignored(k, v) + f" ({why})")
    zero = data.get("zero_optimization", {}) or {}
    if not isinstance(zero, dict):
        raise PlannerError(f"{where}zero_optimization must be an object", "e.g. {\"stage\": 2}")
    for k, v in zero.items():
        if k in ("offload_optimizer", "offload_param"):
            dev = v.get("device", "none") if isinstance(v, dict) else v
            if dev in ("none", None):
                ignored.append(fmt_ignored(f"zero_optimization.{k}", v) + " (no offload)")
            else:
                not_modelled.append(fmt_ignored(f"zero_optimization.{k}", v) + " (offload not modelled: states priced "
                                                                              "on the GPU, an upper bound)")
        elif k not in MODELLED_ZERO:
            not_modelled.append(fmt_ignored(f"zero_optimization.{k}", v) + " (buckets, prefetch and persistence change "
                                                                           "memory and overlap; not priced)")
    for sec in ("bf16", "fp16"):
        body = data.get(sec)
        if isinstance(body, dict):
            ignored += [fmt_ignored(f"{sec}.{k}", v) + " (loss scaling: numerics only)" for k, v in body.items()
                        if k != "enabled"]
    if model is None:
        raise PlannerError(f"{where}a DeepSpeed JSON does not name the model", "pass --model NAME, a model YAML or the Hugging Face config.json")
    if gpus is None:
        raise PlannerError(f"{where}a DeepSpeed JSON does not give the GPU count", "pass --gpus N (the launcher's world size)")
    job: dict = {"model": model, "stack": "megatron-deepspeed", "tp": 1, "pp": 1, "cp": 1}
    assumed.append("tp=pp=cp=1: a DeepSpeed JSON has no model parallelism")
    stage = zero.get("stage", 0)
    if stage not in ZERO_STAGES:
        raise PlannerError(f"{where}zero_optimization.stage = {stage!r}", "valid: 0, 1, 2, 3")
    job["sharding"] = ZERO_STAGES[stage]
    job["sharding_mode"] = ZERO_MODES[stage]
    if "stage" not in zero:
        assumed.append("sharding=none: zero_optimization.stage default 0")
    mics = zero.get("mics_shard_size")
    if mics not in (None, -1):  # DeepSpeed's MiCS: ZeRO-3 within groups of mics_shard_size, replicated across (-1: off)
        mics = _num(where, "zero_optimization.mics_shard_size", mics)
        if stage != 3:
            raise PlannerError(f"{where}zero_optimization.mics_shard_size with stage {stage}", "MiCS shards ZeRO-3 (stage 3)")
        if gpus is not None and gpus % mics:
            raise PlannerError(f"{where}zero_optimization.mics_shard_size {mics} does not divide {gpus} GPUs",
                               "the shard groups tile the data-parallel ranks")
        job.update(sharding="hsdp", sharding_mode="zero3_mics", shard_group=mics)
    job["dp_comm_overlap"] = bool(zero.get("overlap_comm", False))
    if "overlap_comm" not in zero:
        assumed.append("dp_comm_overlap=false: zero_optimization.overlap_comm default false")
    dp = resolve_gpus(where, None, "", gpus)
    job["gpus"] = dp
    tbs = _num(where, "train_batch_size", data.get("train_batch_size"))
    mbs = _num(where, "train_micro_batch_size_per_gpu", data.get("train_micro_batch_size_per_gpu"))
    gas = _num(where, "gradient_accumulation_steps", data.get("gradient_accumulation_steps"))
    # DeepSpeed derives the one missing of the three (deepspeed/runtime/config.py _set_batch_related_parameters)
    if tbs is not None and mbs is not None and gas is not None:
        if tbs != mbs * gas * dp:
            raise PlannerError(
                f"{where}train_batch_size {tbs} != train_micro_batch_size_per_gpu {mbs} x gradient_accumulation_steps {gas} "
                f"x {dp} GPUs = {mbs * gas * dp}", "DeepSpeed requires the product; fix one of them or --gpus")
    elif tbs is not None and mbs is not None:
        if tbs % (mbs * dp):
            raise PlannerError(f"{where}train_batch_size {tbs} is not a multiple of train_micro_batch_size_per_gpu {mbs} x {dp} GPUs",
                               "DeepSpeed derives gradient_accumulation_steps = train_batch_size / (micro x GPUs)")
    elif tbs is not None and gas is not None:
        if tbs % (gas * dp):
            raise PlannerError(f"{where}train_batch_size {tbs} is not a multiple of gradient_accumulation_steps {gas} x {dp} GPUs",
                               "DeepSpeed derives the micro-batch = train_batch_size / (accumulation x GPUs)")
        mbs = tbs // (gas * dp)
        assumed.append(f"micro_batch={mbs}: train_batch_size / (gradient_accumulation_steps x GPUs)")
    elif mbs is not None:
        gas = gas or 1
        tbs = mbs * gas * dp
        assumed.append(f"global_batch={tbs}: micro {mbs} x accumulation {gas} x {dp} GPUs" + ("" if data.get("gradient_accumulation_steps") not in (None, "auto") else " (accumulation default 1)"))
    elif tbs is not None:
        if tbs % dp:
            raise PlannerError(f"{where}train_batch_size {tbs} is not a multiple of {dp} GPUs", "DeepSpeed splits it evenly")
        mbs = tbs // dp
        assumed.append(f"micro_batch={mbs}: train_batch_size / GPUs (gradient_accumulation_steps default 1)")
    else:
        raise PlannerError(f"{where}no batch size: train_batch_size and train_micro_batch_size_per_gpu are absent or \"auto\"",
                           "set train_micro_batch_size_per_gpu (or pass --micro-batch and --global-batch)")
    job["micro_batch"] = mbs
    job["global_batch"] = tbs
    bf16 = isinstance(data.get("bf16"), dict) and data["bf16"].get("enabled") not in (False, None)
    fp16 = isinstance(data.get("fp16"), dict) and data["fp16"].get("enabled") not in (False, None)
    if bf16 and fp16:
        raise PlannerError(f"{where}bf16.enabled and fp16.enabled are both set", "DeepSpeed allows one")
    job["precision"] = "bf16"
    if fp16:
        assumed.append("precision=bf16: fp16 priced as bf16 (same 2-byte width and tensor peak)")
    elif not bf16:
        assumed.append("precision=bf16: neither bf16 nor fp16 enabled (fp32 training is not modelled)")
    job["recompute"] = "none"
    assumed.append("recompute=none: a DeepSpeed JSON does not set activation checkpointing (the model code does); pass --recompute")
    if hardware is not None:
        job["hardware"] = hardware
    return TrainerConfig(job=job, fmt="deepspeed", ignored=ignored, assumed=assumed, not_modelled=not_modelled)
