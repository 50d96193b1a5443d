"""Read a DeepSpeed JSON config (ds_config.json) into planner job fields; the model comes
from --model (a catalog name, a model YAML or the Hugging Face config.json the JSON sits
next to) and the GPU count from --gpus (a DeepSpeed JSON names neither).

Keys follow the DeepSpeed configuration reference [1] (deepspeed.ai/docs/config-json, as
published in 2025). Modelled:
  train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
    (train_batch_size = micro x accumulation x dp [1] "Batch Size Related Parameters";
    each may be "auto", the Hugging Face Trainer's placeholder [2], read as absent; otherwise read as DeepSpeed
    computes with the untyped value, _batch: a string, list, false, 0 or a fraction refused, exit 2, as
    _batch_assertion stops DeepSpeed; 64.0 and true read as 64 and 1, listed as assumed, a float
    micro-batch with the PipelineEngine's first-step TypeError said),
  zero_optimization.stage (0 none, 1 zero1, 2 zero2, 3 fsdp: ZeRO-3 shards parameters,
    gradients and optimizer states like FSDP), zero_optimization.mics_shard_size (ZeRO-3
    within groups of that many GPUs, replicated across them: hsdp, the stack's zero3_mics
    mode), zero_optimization.overlap_comm (-> dp_comm_overlap; absent or "auto", DeepSpeed's default
    at the stage, true at stage 3 and false below, overlap_default, listed as assumed; not read at stage 0 nor by the
    BF16_Optimizer, ZERO_OPTIMIZER_ENGINE: there false, a stated true listed as ignored), bf16.enabled, fp16.enabled (-> the job's fp16, false / true, priced as bf16; read by
    their Python truth as DeepSpeed's `if` reads them, _enabled: "false" or 1 on, 0 or "" off, each listed as assumed;
    a section that is not an object, null too, refused as DeepSpeed's .get on it raises;
    bf16's older name bfloat16 read as bf16 where bf16 is absent, ignored beside it, as get_bfloat16_enabled reads it;
    stage 0 with fp16 is the replicated FP16_Optimizer, the stack's mode zero0, which runs fp16 only),
  tensor_parallel.autotp_size (AutoTP training: absent, 0 or 1 off, the section listed as ignored; > 1 refused,
    _autotp),
  communication_data_type and data_types.grad_accum_dtype (the gradient path, gradient_path below:
    the reduction moves the stack's fsdp.grad_reduce_bytes, 2 B, the model dtype every path casts to by
    default; the BF16_Optimizer with fp32 accumulation, bf16 at stage 0 or stage 1 with grad_accum_dtype
    fp32, is read as sharding zero1, the stack's mode bf16_optimizer, as is the BF16_Optimizer accumulating in bf16
    (its 2 B buffer priced at the mode's 4 B, listed as not modelled); fp32 on the wire and ZeRO's fp32 accumulation
    listed as not modelled,
    an absent communication_data_type as assumed, DeepSpeed's refused fp16 + fp32 mix at stage 0 refused); with stage 3,
  zero_optimization.stage3_prefetch_bucket_size, stage3_max_live_parameters,
    stage3_max_reuse_distance, stage3_param_persistence_threshold, reduce_bucket_size, sub_group_size and
    contiguous_gradients (-> the job's deepspeed_zero3, the last as 0 / 1: ZeRO-3's gathered working set, gradient
    bucket and optimizer sub-groups, planner/memory.py [z3], [z3c], [z3r], [z3s], [z3g]; each
    absent or "auto" is the stack's, DeepSpeed's default, listed as assumed); at stages 1 and 2 contiguous_gradients
    true is what the IPG buffers' pricing assumes (read as modelled), false is listed as not modelled ([zb]).
Listed as ignored ('key=value (why)'): keys with no effect on memory or step time (clipping,
schedules, logging, loss scaling) and the optimizer section, which builds nothing on this stack
(Megatron-DeepSpeed passes deepspeed.initialize its own optimizer, apex FusedAdam, and the engine
takes it over the section, whatever its type or params.torch_adam: CLIENT_OPTIMIZER); as not modelled:
every other key, among them zero_optimization's buckets below stage 3.
  zero_optimization.offload_optimizer / offload_param (_offload): device cpu -> the job's
offload_optimizer / offload_param cpu (ZeRO-Offload, planner/offload.py; offload_param at stage 3
only); device nvme is not modelled (states priced on the GPU, an upper bound on memory); another
device is an error naming the key.

Before any of it, the keys DeepSpeed's pydantic models type (zero_optimization and its offload sections, the monitors,
hybrid_engine, timers.throughput, tensor_parallel) are validated as DeepSpeed validates them, pydantic's lax mode with
"auto" dropped (deepspeed_types.py): what DeepSpeed refuses at start-up is refused, exit 2, a key such a section's
model has not too (extra="forbid"); the keys read here that those models type are read at the value pydantic makes
of them (deepspeed_types.coerce: "false" for overlap_comm is false, "2" for the stage 2), listed as assumed.

Inferred (listed as assumed): tp = pp = cp = 1 (a DeepSpeed JSON has no model parallelism;
Megatron-DeepSpeed passes it as arguments: --tensor-model-parallel-size, --pipeline-model-parallel-size),
unless the command line gives --tp / --pp / --cp, which stand for those launcher arguments: the batch
keys are then read against DeepSpeed's world size, the data-parallel size dp = GPUs / (tp x pp x cp)
(deepspeed/runtime/config.py @38327e07 DeepSpeedConfig.__init__ l. 725-726: world_size =
mpu.get_data_parallel_world_size() where the launcher passes an mpu, as Megatron-DeepSpeed does;
_batch_assertion / _set_batch_related_parameters l. 919-979 then derive and check the triple with
it), so that a JSON written for TP 4 on 8 GPUs (train_batch_size = micro x accumulation x 2) reads
as that job; recompute none (activation checkpointing is set
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
from ..schema import MAX_COUNT, ZERO3_KEYS
from . import TrainerConfig, resolve_gpus
from .deepspeed_types import check as check_types, coerce
from .report import Note, about, cut, listed, noted, short_value as _short

ZERO_STAGES = {0: "none", 1: "zero1", 2: "zero2", 3: "fsdp"}
MODELLED_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
                "bf16", "bfloat16", "fp16", "communication_data_type", "data_types", "tensor_parallel"}
# DeepSpeed's dtype spellings (microsoft/DeepSpeed @38327e07 deepspeed/runtime/config.py get_communication_data_type
# l. 252-266: fp16, bf16, fp32, lower-cased; data_types.grad_accum_dtype through DtypeEnum, deepspeed/inference/config.py
# l. 15-19, engine.py get_data_types l. 1023)
COMM_DTYPES = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32"}
ACCUM_DTYPES = {**{k: "fp16" for k in ("fp16", "float16", "half", "torch.float16")},
                **{k: "fp32" for k in ("fp32", "float32", "float", "torch.float32")},
                **{k: "bf16" for k in ("bf16", "bfloat16", "bfloat", "torch.bfloat16")}}
MODELLED_ZERO = {"stage", "overlap_comm", "mics_shard_size"}
# the JSON's optimizer section on the stack megatron-deepspeed: Megatron-DeepSpeed hands the engine its own optimizer
CLIENT_OPTIMIZER = ("builds no optimizer: Megatron-DeepSpeed hands deepspeed.initialize its own, apex FusedAdam for --optimizer "
                    "adam (microsoft/Megatron-DeepSpeed @f4157bea megatron/optimizer/__init__.py l. 3-9, 96-116, training.py "
                    "l. 573, 606-614), which the engine takes as the basic optimizer (microsoft/DeepSpeed @38327e07 "
                    "deepspeed/runtime/engine.py _configure_optimizer l. 1355-1366), so the section's type and params "
                    "(torch_adam, adam_w_mode, the hyper-parameters) are not read; fused, no step temporaries, stack_db "
                    "megatron-deepspeed memory.optimizer_default")
# top-level keys with no effect on the plan's memory or step time, and why
NO_COST = {"gradient_clipping": "a norm over the gradients once a step", "optimizer": CLIENT_OPTIMIZER,
           "scheduler": "the learning-rate schedule", "steps_per_print": "logging", "wall_clock_breakdown": "logging",
           "tensorboard": "logging", "wandb": "logging", "csv_monitor": "logging", "comms_logger": "logging",
           "flops_profiler": "profiling", "zero_allow_untested_optimizer": "an optimizer check"}

# where DeepSpeed reads overlap_comm: only when it builds the ZeRO optimizer
ZERO_OPTIMIZER_ENGINE = ("DeepSpeed reads overlap_comm only to build the ZeRO optimizer: microsoft/DeepSpeed @38327e07 "
                         "deepspeed/runtime/engine.py _configure_zero_optimizer l. 1632, 1686, 1730, 1775; without ZeRO "
                         "(stage 0) and for the BF16_Optimizer the engine's allreduce_gradients runs after the loss's backward, "
                         "l. 2150-2152 (allreduce_gradients l. 2048-2061: buffered_allreduce_fallback), and "
                         "_configure_bf16_optimizer l. 1592-1613 takes no overlap")


def overlap_default(stage: int) -> bool:
    """overlap_comm's default at a ZeRO stage: microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/config.py
    DeepSpeedZeroConfig.overlap_comm: Optional[bool] = None (l. 134, "None for dynamic default value"), set by the
    validator overlap_comm_valid (l. 350-354) to self.stage == ZeroStageEnum.weights: true at stage 3, false at 0-2."""
    return stage == 3


# the stack's modes (stack_db megatron-deepspeed runs.sharding) by stage
ZERO_MODES = {0: "zero0", 1: "zero1", 2: "zero2", 3: "zero3"}


def _num(where, key, v) -> Optional[int]:
    if v is None or v == "auto":
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COUNT:
        raise PlannerError(f"{where}{key} = {_short(v)} is not a whole number from 1 to {MAX_COUNT}",
                           f"set {key} to an integer or \"auto\"")
    return v


# the batch keys and bf16 / fp16.enabled: no pydantic model types them; DeepSpeed reads each with get_scalar_param, the
# JSON's value as it is (microsoft/DeepSpeed @38327e07 deepspeed/runtime/config_utils.py l. 193-194; runtime/config.py
# get_train_batch_size l. 527-528, get_train_micro_batch_size_per_gpu l. 531-535, get_gradient_accumulation_steps
# l. 244-245, get_fp16_enabled l. 160-164, get_bfloat16_enabled l. 167-171), and computes or branches on it as Python
# does (BATCH_RULE, ENABLED_RULE)
BATCH_RULE = ("DeepSpeed reads it untyped (runtime/config.py @38327e07 get_scalar_param) and computes with it: "
              "_set_batch_related_parameters derives the missing key with // and _batch_assertion asserts each > 0 "
              "and train_batch_size == micro x accumulation x world size (l. 919-979)")
ENABLED_RULE = ("DeepSpeed reads it untyped (runtime/config.py @38327e07 get_bfloat16_enabled l. 167-171 / "
                "get_fp16_enabled l. 160-164: get_scalar_param) and branches on its truth (`assert not (fp16_enabled "
                "and bfloat16_enabled)` l. 834-835; engine.py `if self.fp16_enabled():` / `elif self.bfloat16_enabled():` "
                "l. 944-947, 1012-1014, 1224-1228)")


def _json_short(v) -> str:
    """A value as the JSON spells it (true, "32"), cut as report.short_value cuts (a huge integer not echoed)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return _short(v)
    return cut(json.dumps(v), 60)


def _batch(where, key, v) -> tuple[Optional[int], Optional[str]]:
    """A batch key as DeepSpeed computes with it (BATCH_RULE), and how the JSON's spelling was read (None: as written).
    Absent, null (get_scalar_param returns None: not given) or "auto" (the Hugging Face Trainer's placeholder [2]): None.
    A string, list or object: refused, as `value > 0` raises TypeError in _batch_assertion (l. 925-929; a string
    reaches it through _set_batch_related_parameters' arithmetic, or raises there first). true is Python's 1 (read as
    1, said so); false, 0 or a negative count fails the `> 0` assert; a whole float (32.0) computes as the integer
    (read as it, said so); a fraction (2.5) is no count of samples, which the planner prices: refused."""
    if v is None or v == "auto":
        return None, None
    bad = f"{where}{key} = {_json_short(v)} is not a whole number from 1 to {MAX_COUNT}: {BATCH_RULE}"
    fix = f"set {key} to an integer (without quotes) or \"auto\""
    if not isinstance(v, (int, float)):
        kind = "string" if isinstance(v, str) else "list" if isinstance(v, list) else "object"
        raise PlannerError(bad + f", so a {kind} stops DeepSpeed at start-up (TypeError: '>' not supported between a "
                           f"{type(v).__name__} and an int)", fix)
    if isinstance(v, bool):
        if not v:
            raise PlannerError(bad + ": false is Python's 0, which fails `assert ... > 0` (l. 925-929)", fix)
        return 1, "true is Python's 1, which DeepSpeed's arithmetic takes as 1"
    if not v > 0:
        raise PlannerError(bad + ", so it fails `assert ... > 0` at start-up (l. 925-929)", fix)
    if isinstance(v, float) and v != int(v):
        raise PlannerError(bad + ": a fraction of a sample, which no batch holds (DeepSpeed's float arithmetic runs "
                           "on where the product happens to hold, the planner prices whole samples)", fix)
    if v > MAX_COUNT:
        raise PlannerError(f"{where}{key} = {_short(v)} is not a whole number from 1 to {MAX_COUNT}", fix)
    if isinstance(v, float):
        pipe = ("; but under DeepSpeed's PipelineEngine (Megatron-DeepSpeed's GPTModelPipe, its model without "
                "--no-pipeline-parallel) the run stops at the first step: Megatron-DeepSpeed calls set_train_batch_size "
                "before every step (megatron/training.py @f4157bea l. 1253-1258), which divides by this float "
                "(runtime/engine.py l. 534-540) to a float micro-batch count that the pipeline schedule's range() "
                "refuses (pipe/engine.py l. 526-527, 386; pipe/schedule.py l. 200-201, TypeError): write it as an "
                "integer") if key == "train_micro_batch_size_per_gpu" else ""
        return int(v), f"a whole float, which DeepSpeed's arithmetic takes as {int(v)}{pipe}"
    return v, None


def _enabled(where, key, v) -> tuple[Optional[bool], Optional[str]]:
    """bf16 / fp16.enabled as DeepSpeed takes it (ENABLED_RULE: its truth), and how the JSON's spelling was read (None:
    a JSON boolean, absent or null). Absent or null: None (off: get_scalar_param's None, False by default);
    "auto" (the Hugging Face Trainer's placeholder, filled from --bf16 / --fp16 at launch [2]): None, said by read.
    Anything else is read by its Python truth: 1 on, 0 off, a non-empty string on (\"false\" too), "" off."""
    if v is None or v == "auto" or isinstance(v, bool):
        return (v if isinstance(v, bool) else None), None
    on = bool(v)
    if isinstance(v, str) and v.strip().lower() in ("false", "0", "no", "off", "n", "f", "none", "null", "disabled"):
        return on, ("a non-empty string, which DeepSpeed's `if` takes as true: the run is in "
                    f"{key.split('.')[0]}, not what the word says")
    what = (("a non-zero number" if on else "zero") if isinstance(v, (int, float)) else
            f"{'a non-empty' if on else 'an empty'} {'string' if isinstance(v, str) else 'list' if isinstance(v, list) else 'object'}")
    return on, f"{what}, which DeepSpeed's `if` takes as {str(on).lower()}"


def _elements(where, key, v) -> Optional[int]:
    """A count of elements >= 0 (DeepSpeed's pp_int fields: an integer, or a whole float such as 5e8); None for
    absent or "auto"."""
    if v is None or v == "auto":
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v > 1e18 or float(v) != int(v):
        raise PlannerError(f"{where}{key} = {_short(v)} is not a whole number of elements >= 0",
                           f"set {key} to an integer (e.g. 500000000 or 5e8) or \"auto\"")
    return int(v)


def _bool(where, key, v, default: bool) -> Optional[bool]:
    """A JSON boolean; "auto" (the Hugging Face template's placeholder [2], filled from the
    TrainingArguments at launch) and absence read as None (unset); anything else an error
    (a string "false" is not read as true)."""
    if v is None or v == "auto":
        return None
    if not isinstance(v, bool):
        raise PlannerError(f"{where}{key} = {_short(v)} is not true, false or \"auto\"", f"set {key} to true or false")
    return v


def _autotp(body, where: str, ignored: list) -> None:
    """tensor_parallel (DeepSpeed's AutoTP training, issue 21): microsoft/DeepSpeed @38327e07
    runtime/tensor_parallel/config.py TPTrainingConfig.autotp_size (l. 45, default 0: disabled); the engine splits the
    model only where autotp_size > 1 (engine.py l. 250-251 _configure_tensor_parallel_states, l. 420-430: a TP mesh of
    that size, ZeRO stage <= 2 asserted). Off (absent, 0 or 1), the section has no effect: listed as ignored. On, refused:
    the planner does not model AutoTP's own module replacement (which linears it splits, its collectives)."""
    if body is None:
        return
    if not isinstance(body, dict):
        raise PlannerError(f"{where}tensor_parallel must be an object", 'e.g. {"autotp_size": 0}')
    size = body.get("autotp_size", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise PlannerError(f"{where}tensor_parallel.autotp_size = {_short(size)} is not a whole number", "0 (off) or N > 1")
    if size > 1:
        raise PlannerError(f"{where}tensor_parallel.autotp_size = {size}: DeepSpeed's AutoTP training (the engine's own "
                           "tensor-parallel split of the model's linears, deepspeed/runtime/engine.py @38327e07 l. 250-251, "
                           "420-430) is not modelled",
                           f"set autotp_size 0 and price the split as Megatron's tensor parallelism, --tp {size} (the same "
                           "column / row split of the linears, Megatron's collectives)")
    ignored.append(listed("ignored", "tensor_parallel", body, f"autotp_size {size}: DeepSpeed's AutoTP training off, "
                          "config.py l. 45: no effect"))


def read(path: Path, text: Optional[str] = None, *, model: Optional[str] = None, gpus: Optional[int] = None,
         hardware: Optional[str] = None, parallel: Optional[dict] = None) -> TrainerConfig:
    """The config at `path`; `text`: its text when the caller already read it (else read here).
    parallel: the command line's tp / pp / cp (None or absent: 1), the launcher's model-parallel
    arguments a DeepSpeed JSON does not hold (module docstring)."""
    where = f"{path}: "
    hint = "give a DeepSpeed ds_config.json"
    data = files.parse_json(files.read_text(path, hint) if text is None else text, str(path), hint)
    if not isinstance(data, dict):
        raise PlannerError(f"{where}expected a JSON object", hint)
    # the keys DeepSpeed's pydantic models type, at its own (lax) rules (deepspeed_types.py): the keys not read here
    # first, the read ones after the reading's own checks (their messages name the planner's choices)
    check_types(where, data, lambda path, key: not _reads(path, key))
    ignored, assumed, not_modelled = [], [], []
    # the keys read here, as DeepSpeed reads them: pydantic's lax value ("false" -> false, "2" -> 2), said so
    data, coerced = coerce(where, data, _reads)
    for key, raw, value in coerced:
        assumed.append(listed("assumed", key, raw, show=json.dumps(raw), reason=
                              f"read as {json.dumps(value)}, as DeepSpeed reads it (pydantic's lax mode: "
                             "DeepSpeedConfigModel, microsoft/DeepSpeed @38327e07 deepspeed/runtime/config_utils.py "
                             "l. 105-113; deepspeed_types.coerce)"))
    for k, v in data.items():
        if k not in MODELLED_TOP:
            why = NO_COST.get(k)
            if why is None:
                not_modelled.append(listed("not_modelled", k, v, "not priced: it may change memory or time"))
            else:
                ignored.append(listed("ignored", k, v, why))
    _autotp(data.get("tensor_parallel"), where, ignored)
    zero = data.get("zero_optimization", {}) or {}
    if not isinstance(zero, dict):
        raise PlannerError(f"{where}zero_optimization must be an object", "e.g. {\"stage\": 2}")
    for k, v in zero.items():
        if k in ("offload_optimizer", "offload_param"):
            continue  # read below (_offload)
        elif k in ZERO3_KEYS and zero.get("stage") == 3:
            continue  # read below (the job's deepspeed_zero3)
        elif k in ("reduce_bucket_size", "contiguous_gradients") and zero.get("stage") in (1, 2) and v is not False:
            continue  # ZeRO-1/2's IPG buffer (planner/memory.py [zb]): the bucket read below, contiguous assumed on
        elif k == "contiguous_gradients" and zero.get("stage") in (1, 2):
            not_modelled.append(listed("not_modelled", f"zero_optimization.{k}", v,
                                       "ZeRO-1/2 without the IPG buffers: each "
                                       "gradient its own tensor until its bucket is flattened and reduced, the rank's partition "
                                       "kept as whole parameters' gradients instead of grads_in_partition; priced as with "
                                       "them, planner/memory.py [zb]"))
        elif k not in MODELLED_ZERO:
            not_modelled.append(listed("not_modelled", f"zero_optimization.{k}", v,
                                       "buckets, prefetch and persistence change "
                                       "memory and overlap; not priced"))
    # DeepSpeed's bf16 section: "bf16", else its older name "bfloat16" (runtime/constants.py @38327e07 BFLOAT16_OLD,
    # "keeping for backwards compatibility"; get_bfloat16_enabled l. 167-171 takes the first of the two present)
    names = {"bf16": "bfloat16" if "bfloat16" in data and "bf16" not in data else "bf16", "fp16": "fp16"}
    if "bfloat16" in data and "bf16" in data:
        ignored.append(listed("ignored", "bfloat16", data["bfloat16"], "DeepSpeed reads bf16 and never its older name "
                              "bfloat16 beside it (runtime/config.py @38327e07 get_bfloat16_enabled l. 167-171: the "
                              "first of bf16, bfloat16 present)"))
    for sec in ("bf16", "fp16"):
        body = data.get(names[sec])
        if isinstance(body, dict):
            ignored += [listed("ignored", f"{names[sec]}.{k}", v, "loss scaling: numerics only")
                        for k, v in body.items() if k != "enabled"]
    if model is None:
        raise PlannerError(f"{where}a DeepSpeed JSON does not name the model", "pass --model NAME, a model YAML or the Hugging Face config.json")
    if gpus is None:
        raise PlannerError(f"{where}a DeepSpeed JSON does not give the GPU count", "pass --gpus N (the launcher's world size)")
    degrees = {k: (parallel or {}).get(k) for k in ("tp", "pp", "cp")}
    job: dict = {"model": model, "stack": "megatron-deepspeed", **{k: v or 1 for k, v in degrees.items()}}
    for k, v in degrees.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COUNT):
            raise PlannerError(f"{where}--{k} {_short(v)} is not a whole number from 1 to {MAX_COUNT}", f"e.g. --{k} 2")
    inner = job["tp"] * job["pp"] * job["cp"]
    left = [k for k, v in degrees.items() if v is None]
    if left:
        assumed.append(Note(f"{'='.join(left)}=1", "assumed", tuple((k, 1) for k in left), "a DeepSpeed JSON has no "
                            "model parallelism (Megatron-DeepSpeed's launcher arguments; pass --tp / --pp)"))
    if inner > 1:
        if gpus % inner:
            raise PlannerError(f"{where}--tp {job['tp']} x --pp {job['pp']} x --cp {job['cp']} = {inner} does not divide "
                               f"{gpus} GPUs", "the data-parallel size is GPUs / (tp x pp x cp)")
        given = " x ".join(f"{k} {job[k]}" for k in ("tp", "pp", "cp") if degrees[k] is not None)
        assumed.append(noted("assumed", None, "batch keys read at DeepSpeed's world size, the data-parallel size "
                             f"{gpus // inner} = {gpus} GPUs / ({given}, the command line's: the launcher's model "
                             "parallelism; deepspeed/runtime/config.py world_size = mpu.get_data_parallel_world_size())"))
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in ZERO_STAGES:
        raise PlannerError(f"{where}zero_optimization.stage = {_short(stage)} is not a ZeRO stage", "valid: 0, 1, 2, 3")
    job["sharding"] = ZERO_STAGES[stage]
    job["sharding_mode"] = ZERO_MODES[stage]
    if "stage" not in zero:
        assumed.append(listed("assumed", "sharding", "none", "zero_optimization.stage default 0"))
    mics = zero.get("mics_shard_size")
    if mics not in (None, -1):  # DeepSpeed's MiCS: ZeRO-3 within groups of mics_shard_size, replicated across (-1: off)
        mics = _num(where, "zero_optimization.mics_shard_size", mics)
        if stage != 3:
            raise PlannerError(f"{where}zero_optimization.mics_shard_size with stage {stage}", "MiCS shards ZeRO-3 (stage 3)")
        if (gpus // inner) % mics:
            raise PlannerError(f"{where}zero_optimization.mics_shard_size {mics} does not divide the {gpus // inner} "
                               "data-parallel ranks", "the shard groups tile the data-parallel ranks")
        job.update(sharding="hsdp", sharding_mode="zero3_mics", shard_group=mics)
    if stage == 3:  # ZeRO-3's gathering and bucket settings (planner/memory.py [z3])
        knobs = {k: _elements(where, f"zero_optimization.{k}", zero.get(k)) for k in ZERO3_KEYS
                 if k != "contiguous_gradients"}
        contiguous = _bool(where, "zero_optimization.contiguous_gradients", zero.get("contiguous_gradients"), True)
        knobs["contiguous_gradients"] = None if contiguous is None else int(contiguous)  # planner/memory.py [z3g]
        job["deepspeed_zero3"] = {k: v for k, v in knobs.items() if v is not None}
        left = [k for k, v in knobs.items() if v is None]
        if left:
            assumed.append(listed("assumed", "zero_optimization", left, "absent or \"auto\", the stack's (DeepSpeed's "
                                  "defaults, stack_db fsdp.zero3_modules)", show=", ".join(left), spaced=True))
    if stage in (1, 2):  # ZeRO-1/2's contiguous-gradient (IPG) buffer (planner/memory.py [zb])
        bucket = _elements(where, "zero_optimization.reduce_bucket_size", zero.get("reduce_bucket_size"))
        if bucket is not None:
            job["deepspeed_zero3"] = {"reduce_bucket_size": bucket}
        else:
            assumed.append(noted("assumed", "zero_optimization reduce_bucket_size", "absent or \"auto\", the stack's "
                                 "(DeepSpeed's default, stack_db fsdp.zero3_modules)"))
    _offload(where, zero, stage, job, ignored, assumed, not_modelled)
    # overlap_comm left out: DeepSpeed's default per stage, true at stage 3 only (overlap_default)
    overlap = _bool(where, "zero_optimization.overlap_comm", zero.get("overlap_comm"), stage == 3)
    job["dp_comm_overlap"] = overlap_default(stage) if overlap is None else overlap
    if overlap is None:
        on = job["dp_comm_overlap"]
        assumed.append(listed("assumed", "dp_comm_overlap", str(on).lower(), "zero_optimization.overlap_comm " +
                       ("\"auto\" (filled at launch; " if "overlap_comm" in zero else "absent (") +
                       f"DeepSpeed's default at stage {stage}, {str(on).lower()}: deepspeed/runtime/zero/config.py "
                       "@38327e07 DeepSpeedZeroConfig.overlap_comm None, l. 134, set by overlap_comm_valid, l. 350-354, "
                       "to stage == 3)"))
    job["gpus"] = resolve_gpus(where, None, "", gpus)
    dp = gpus // inner  # DeepSpeed's world_size: the data-parallel ranks (module docstring)
    per = "GPUs" if inner == 1 else "data-parallel ranks"
    batch = {}
    for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        batch[k], how = _batch(where, k, data.get(k))
        if how is not None:  # DeepSpeed's reading of an unusual spelling (_batch), said so
            assumed.append(listed("assumed", k, data[k], show=json.dumps(data[k]),
                                  reason=f"read as {batch[k]}: {how} ({BATCH_RULE})"))
    tbs, mbs, gas = batch.values()
    # DeepSpeed derives the one missing of the three (deepspeed/runtime/config.py _set_batch_related_parameters)
    if tbs is not None and mbs is not None and gas is not None:
        if tbs != mbs * gas * dp:
            raise PlannerError(
                f"{where}train_batch_size {tbs} != train_micro_batch_size_per_gpu {mbs} x gradient_accumulation_steps {gas} "
                f"x {dp} {per} = {mbs * gas * dp}", "DeepSpeed requires the product; fix one of them or --gpus" + (" / --tp / --pp / --cp" if inner > 1 else ""))
    elif tbs is not None and mbs is not None:
        if tbs % (mbs * dp):
            raise PlannerError(f"{where}train_batch_size {tbs} is not a multiple of train_micro_batch_size_per_gpu {mbs} x {dp} {per}",
                               f"DeepSpeed derives gradient_accumulation_steps = train_batch_size / (micro x {per})")
    elif tbs is not None and gas is not None:
        if tbs % (gas * dp):
            raise PlannerError(f"{where}train_batch_size {tbs} is not a multiple of gradient_accumulation_steps {gas} x {dp} {per}",
                               f"DeepSpeed derives the micro-batch = train_batch_size / (accumulation x {per})")
        mbs = tbs // (gas * dp)
        assumed.append(listed("assumed", "micro_batch", mbs,
                              f"train_batch_size / (gradient_accumulation_steps x {per})"))
    elif mbs is not None:
        gas = gas or 1
        tbs = mbs * gas * dp
        assumed.append(listed("assumed", "global_batch", tbs,
                              f"micro {mbs} x accumulation {gas} x {dp} {per}" + ("" if data.get("gradient_accumulation_steps") not in (None, "auto") else " (accumulation default 1)")))
    elif tbs is not None:
        if tbs % dp:
            raise PlannerError(f"{where}train_batch_size {tbs} is not a multiple of {dp} {per}", "DeepSpeed splits it evenly")
        mbs = tbs // dp
        assumed.append(listed("assumed", "micro_batch", mbs,
                              f"train_batch_size / {per} (gradient_accumulation_steps default 1)"))
    else:
        raise PlannerError(f"{where}no batch size: train_batch_size and train_micro_batch_size_per_gpu are absent or \"auto\"",
                           "set train_micro_batch_size_per_gpu (or pass --micro-batch and --global-batch)")
    job["micro_batch"] = mbs
    job["global_batch"] = tbs
    stated = dict(batch)
    stated["zero_optimization.mics_shard_size"] = zero.get("mics_shard_size")
    stated["zero_optimization.stage"] = stage  # absent: DeepSpeed's default 0
    stated["zero_optimization.overlap_comm"] = overlap  # None: absent or "auto", DeepSpeed's default at the stage
    enabled = {}
    for sec in ("bf16", "fp16"):
        name = names[sec]
        body = data.get(name)
        if name in data and not isinstance(body, dict):  # null too: DeepSpeed calls .get on it (AttributeError)
            raise PlannerError(f"{where}{name} = {_short(body)} must be an object: DeepSpeed reads {name}.enabled with "
                               f"get_scalar_param(param_dict[{name!r}], 'enabled', ...), a dict's .get (runtime/config.py "
                               "@38327e07 l. 160-171, config_utils.py l. 193-194), so anything else stops it at "
                               "start-up (AttributeError)", f"e.g. \"{sec}\": {{\"enabled\": true}}")
        if name != sec:  # the older name, read as DeepSpeed reads it
            assumed.append(noted("assumed", name, "read as bf16, DeepSpeed's older name for the section (runtime/"
                                 "constants.py @38327e07 BFLOAT16_OLD; get_bfloat16_enabled l. 167-171 reads bf16, "
                                 "else bfloat16)"))
        enabled[sec], how = _enabled(where, f"{name}.enabled", (body or {}).get("enabled"))
        if how is not None:  # not a JSON boolean: read by its truth as DeepSpeed reads it, said so
            assumed.append(listed("assumed", f"{name}.enabled", body["enabled"], show=json.dumps(body["enabled"]),
                                  reason=f"read as {str(enabled[sec]).lower()}: {how} ({ENABLED_RULE})"))
    bf16, fp16 = bool(enabled["bf16"]), bool(enabled["fp16"])
    if bf16 and fp16:
        raise PlannerError(f"{where}bf16.enabled and fp16.enabled are both true (as DeepSpeed reads them): DeepSpeed "
                           "refuses the pair at start-up ('bfloat16 and fp16 modes cannot be simultaneously enabled', "
                           "runtime/config.py @38327e07 l. 834-835)", "DeepSpeed allows one")
    job["precision"] = "bf16"
    if fp16 or bf16:  # the 16-bit dtype the engine runs (job field fp16; left out, fp32 or "auto": the planner's bf16)
        job["fp16"] = fp16
    auto = [f"{names[sec]}.enabled" for sec in ("bf16", "fp16")
            if isinstance(data.get(names[sec]), dict) and data[names[sec]].get("enabled") == "auto"]
    if fp16:
        assumed.append(listed("assumed", "precision", "bf16",
                              "fp16 priced as bf16 (same 2-byte width and tensor peak)"))
    elif auto and not bf16:
        assumed.append(listed("assumed", "precision", "bf16",
                              f"{' and '.join(auto)} \"auto\" (the Hugging Face Trainer fills them from --bf16 / "
                              "--fp16 at launch [2]; fp16 is priced as bf16, fp32 training is not modelled)"))
    elif not bf16:
        assumed.append(listed("assumed", "precision", "bf16",
                              "neither bf16 nor fp16 enabled (fp32 training is not modelled)"))
    _gradient_path(where, data, stage, "fp16" if fp16 else "bf16" if bf16 else None, zero, stated, assumed, not_modelled,
                   job)
    if job["sharding_mode"] in ("zero0", "bf16_optimizer") and job["dp_comm_overlap"]:
        # not the ZeRO optimizer: overlap_comm is read only where the engine builds it (ZERO_OPTIMIZER_ENGINE)
        job["dp_comm_overlap"] = False
        ignored.append(listed("ignored", "zero_optimization.overlap_comm", zero["overlap_comm"],
                              f"{ZERO_OPTIMIZER_ENGINE}; "
                              f"here the {'FP16_Optimizer' if job['sharding_mode'] == 'zero0' else 'BF16_Optimizer'} runs, which "
                              "reduces the gradients after the last backward: dp_comm_overlap false"))
    job["recompute"] = "none"
    assumed.append(listed("assumed", "recompute", "none",
                          "a DeepSpeed JSON does not set activation checkpointing (the model code does); pass --recompute"))
    # not the stack's defaults.attention (eager: Megatron-DeepSpeed's CoreAttention without --use-flash-attn*, which
    # is a launch flag of that model code, not a JSON key): the JSON says nothing of the model code, taken fused
    job["attention"] = "flash"
    assumed.append(listed("assumed", "attention", "flash",
                          "a DeepSpeed JSON does not set the core attention (the model code does: "
                          "Megatron-DeepSpeed's --use-flash-attn*, a Hugging Face model's attn_implementation); a fused kernel "
                          "assumed, pass --attention eager for an eager core"))
    if hardware is not None:
        job["hardware"] = hardware
    check_types(where, data, _reads)
    return TrainerConfig(job=job, fmt="deepspeed", ignored=ignored, assumed=assumed, not_modelled=not_modelled, stated=stated)


def _reads(path: str, key: str) -> bool:
    """Whether read takes the key itself (the stage, MiCS, overlap_comm, ZeRO-3's knobs and ZeRO-1/2's bucket,
    the offload sections in _offload, AutoTP's size in _autotp)."""
    if path == "zero_optimization":
        return key in MODELLED_ZERO or key in ZERO3_KEYS
    return path.startswith("zero_optimization.") or (path, key) == ("tensor_parallel", "autotp_size")


# zero_optimization.offload_optimizer / offload_param (microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/
# offload_config.py: OffloadDeviceEnum none | cpu | nvme, l. 14-18; pin_memory default false, l. 45, 72; the optimizer's
# ratio, Twin-Flow's partial offload, default 1.0, l. 93)
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
# the sections' keys that change neither memory nor time as priced here (NVMe and swap-buffer settings, read only with
# device nvme; fast_init: the start-up)
OFFLOAD_NO_COST = {"nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pipeline_read", "pipeline_write",
                   "fast_init"}


def _offload(where, zero: dict, stage: int, job: dict, ignored: list, assumed: list, not_modelled: list) -> None:
    """zero_optimization.offload_optimizer / offload_param -> the job's offload_optimizer / offload_param
    (planner/offload.py): device cpu offloaded (offload_param at stage 3 only: DeepSpeed reads it in stage3.py alone,
    below that listed as ignored), none or absent not, nvme not modelled (priced on the GPU, an upper bound on memory);
    any other device is an error naming the key. pin_memory false (DeepSpeed's default): the host buffers pageable,
    priced at the pinned link rate (listed as not modelled); ratio < 1 (Twin-Flow's partial offload) not modelled."""
    for k in ("offload_optimizer", "offload_param"):
        v = zero.get(k)
        key = f"zero_optimization.{k}"
        if v is None:
            continue
        if not isinstance(v, dict):
            raise PlannerError(f"{where}{key} = {_short(v)} must be an object", f'e.g. "{k}": {{"device": "cpu", '
                               '"pin_memory": true}')
        dev = v.get("device", "none")
        if not isinstance(dev, str) or dev not in OFFLOAD_DEVICES:
            raise PlannerError(f"{where}{key}.device = {_short(dev)} is not an offload device",
                               "valid: \"none\", \"cpu\", \"nvme\" (deepspeed/runtime/zero/offload_config.py "
                               "OffloadDeviceEnum)")
        if dev == "none":
            ignored.append(listed("ignored", key, v, "no offload"))
            continue
        if dev == "nvme":
            not_modelled.append(listed("not_modelled", key, v,
                                       "NVMe offload not modelled: states priced on the GPU, an "
                                       "upper bound on memory"))
            continue
        if k == "offload_param" and stage != 3:
            ignored.append(listed("ignored", key, v, f"read at ZeRO stage 3 only, stage3.py; stage {stage}: no effect"))
            continue
        job[k] = "cpu"
        for kk, vv in v.items():
            if kk == "device":
                continue
            if kk == "pin_memory":
                if vv is not True:
                    not_modelled.append(listed("not_modelled", f"{key}.{kk}", vv,
                                               "pageable host buffers: the copies priced "
                                               "at the pinned link rate, a lower bound on their time"))
            elif kk == "ratio" and k == "offload_optimizer":
                if vv != 1 and vv != 1.0:
                    not_modelled.append(listed("not_modelled", f"{key}.{kk}", vv,
                                               "Twin-Flow's partial offload: priced as "
                                               "ratio 1, the whole partition on the host"))
            elif kk in OFFLOAD_NO_COST:
                ignored.append(listed("ignored", f"{key}.{kk}", vv,
                                      "NVMe / start-up setting: no effect with device cpu"))
            else:
                not_modelled.append(listed("not_modelled", f"{key}.{kk}", vv,
                                           "not priced: it may change memory or time"))
        if "pin_memory" not in v:
            not_modelled.append(noted("not_modelled", f"{key}.pin_memory absent", "DeepSpeed's default false "
                                      "(offload_config.py l. 45, 72), pageable host buffers; the copies priced at the "
                                      "pinned link rate, a lower bound on their time", ruled=True))


def gradient_path(stage: int, model_dtype: Optional[str], accum: Optional[str], offload: bool) -> tuple[str, str]:
    """(the engine's optimizer wrapper, the gradient accumulation dtype) for a ZeRO stage, the model dtype
    (fp16, bf16; None: fp32) and data_types.grad_accum_dtype (None: absent): microsoft/DeepSpeed @38327e07
    deepspeed/runtime/engine.py get_data_types (l. 1010-1025: absent, fp32 for bf16 without ZeRO, else the
    model dtype) and _do_optimizer_sanity_check (l. 1300-1350: with ZeRO the ZeRO optimizer, except bf16 with
    fp32 accumulation at stage 1 without CPU offload, the BF16_Optimizer; without ZeRO bf16 with fp32
    accumulation the BF16_Optimizer, fp16 with fp16 the FP16 optimizer, another mix refused)."""
    model = model_dtype or "fp32"
    acc = accum or ("fp32" if model == "bf16" and stage == 0 else model)
    if stage > 0:
        return ("bf16_optimizer" if model == "bf16" and acc == "fp32" and stage == 1 and not offload else "zero"), acc
    if model == acc:
        return {"bf16": "bf16_optimizer", "fp16": "fp16_optimizer", "fp32": "none"}[model], acc
    if model == "bf16" and acc == "fp32":
        return "bf16_optimizer", acc
    return "unsupported", acc


def _gradient_path(where, data, stage, model_dtype, zero, stated, assumed, not_modelled, job) -> None:
    """Read communication_data_type and data_types.grad_accum_dtype (the gradient path, gradient_path):
    what the data-parallel reduction moves (the stack's fsdp.grad_reduce_bytes, 2 B: the model dtype, the
    engine's default communication_data_type, engine.py l. 938-950), the BF16_Optimizer with fp32
    accumulation (job sharding zero1, sharding_mode bf16_optimizer: stack_db megatron-deepspeed, memory.py [bo])
    and what is not priced (fp32 on the wire, the BF16_Optimizer's accumulation in bf16, the ZeRO optimizer's
    fp32 accumulation)."""
    comm = data.get("communication_data_type")
    if comm is not None:
        if not isinstance(comm, str) or comm.lower() not in COMM_DTYPES:
            raise PlannerError(f"{where}communication_data_type = {_short(comm)} is not a DeepSpeed communication dtype",
                               "valid: \"fp16\", \"bf16\", \"fp32\" (deepspeed/runtime/config.py get_communication_data_type)")
        comm = COMM_DTYPES[comm.lower()]
    types = data.get("data_types")
    if types is not None and not isinstance(types, dict):
        raise PlannerError(f"{where}data_types = {_short(types)} must be an object", "e.g. \"data_types\": {\"grad_accum_dtype\": \"fp32\"}")
    accum = (types or {}).get("grad_accum_dtype")
    for k, v in (types or {}).items():
        if k != "grad_accum_dtype":
            not_modelled.append(listed("not_modelled", f"data_types.{k}", v,
                                       "not priced: it may change memory or time"))
    if accum is not None:
        if not isinstance(accum, str) or accum not in ACCUM_DTYPES:
            raise PlannerError(f"{where}data_types.grad_accum_dtype = {_short(accum)} is not a DeepSpeed dtype",
                               "valid: \"fp32\", \"fp16\", \"bf16\" (DtypeEnum, deepspeed/inference/config.py l. 15-19)")
        accum = ACCUM_DTYPES[accum]
    offload = isinstance(zero.get("offload_optimizer"), dict) and zero["offload_optimizer"].get("device") not in (None, "none")
    path, acc = gradient_path(stage, model_dtype, accum, offload)
    stated["communication_data_type"] = comm
    stated["data_types.grad_accum_dtype"] = accum
    if path == "unsupported":
        raise PlannerError(f"{where}{model_dtype or 'fp32'} weights with data_types.grad_accum_dtype {acc} at ZeRO stage 0: "
                           "DeepSpeed refuses the mix (engine.py @38327e07 _do_optimizer_sanity_check l. 1349-1350)",
                           "drop data_types.grad_accum_dtype or enable ZeRO (zero_optimization.stage 1-3)")
    if model_dtype is None:
        return  # fp32 training: not modelled, listed with the precision
    wire = comm or model_dtype
    if comm is None:
        assumed.append(noted("assumed", "communication_data_type absent", f"the model dtype {model_dtype} (DeepSpeed "
                             "engine.py @38327e07 l. 938-950), the gradients reduced in 2 B (stack "
                             "fsdp.grad_reduce_bytes)"))
    if wire == "fp32":
        not_modelled.append(listed("not_modelled", "communication_data_type", "fp32", "the gradients cast to fp32 "
                                   "for the data-parallel reduction, 4 B an element: priced at the stack's 2 B, the "
                                   "reduction's time a lower bound", show="'fp32'"))
    how = ("data_types.grad_accum_dtype absent: fp32 for bf16 without ZeRO, engine.py l. 1017-1019" if accum is None
           else f"data_types.grad_accum_dtype {accum}")
    if path == "bf16_optimizer" and acc == "fp32":
        job.update(sharding="zero1", sharding_mode="bf16_optimizer")
        assumed[:] = [x for x in assumed if not about(x, "sharding", "none")]  # read: zero_optimization.stage default 0
        assumed.append(listed(
            "assumed", "sharding", "zero1", show="zero1 as bf16_optimizer", reason=f"DeepSpeed's BF16_Optimizer (bf16 at "
            f"ZeRO stage {stage}, {how}; engine.py "
            "@38327e07 _do_optimizer_sanity_check l. 1300-1350): bf16 weights and gradients whole, an fp32 gradient "
            "accumulation buffer over the whole model (4 B a parameter, bf16_optimizer.py l. 162), the fp32 master and "
            "Adam states partitioned over the data-parallel ranks (l. 156, 196); the gradients all-reduced, the "
            "updated weights all-gathered (runs.sharding bf16_optimizer of the megatron-deepspeed stacks: stack_db "
            "megatron-deepspeed, megatron-deepspeed-bigscience)"))
    elif path == "bf16_optimizer":
        # bf16 accumulating in bf16 at stage 0 (DeepSpeed builds it under its pipeline engine only, l. 1333-1343):
        # the BF16_Optimizer with a 2 B buffer, priced as the mode's 4 B one (the mode's states and traffic as it runs)
        job.update(sharding="zero1", sharding_mode="bf16_optimizer")
        assumed[:] = [x for x in assumed if not about(x, "sharding", "none")]  # read: zero_optimization.stage default 0
        not_modelled.append(noted("not_modelled", None, 
            f"BF16_Optimizer (bf16 at ZeRO stage {stage}, {how}; engine.py @38327e07 _do_optimizer_sanity_check l. 1333-1343: "
            f"under the pipeline engine only, without it DeepSpeed raises) accumulating in {acc}: priced as sharding_mode "
            f"bf16_optimizer, its {acc} gradient buffer over the whole model (bf16_optimizer.py l. 162) at the mode's fp32 "
            "4 B a parameter, 2 B more than it holds (memory and the optimizer's buffer passes an upper bound)", ruled=True))
    elif stage > 0 and acc == "fp32" and model_dtype != "fp32":
        not_modelled.append(listed("not_modelled", "data_types.grad_accum_dtype", accum, f"ZeRO stage {stage} "
                                   "accumulates the gradient partition in fp32 (4 B an element; priced in the model "
                                   "dtype, bytes_per_param mixed16)", spaced=True, ruled=True))
