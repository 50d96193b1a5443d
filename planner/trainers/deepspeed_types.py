"""The type DeepSpeed's pydantic models declare for each key of a ds_config.json they validate, and the check of the
DeepSpeed JSON reader (deepspeed.read) against them, issue "readers".

microsoft/DeepSpeed @38327e07 builds these sections of the JSON into DeepSpeedConfigModel subclasses when
deepspeed.initialize builds its DeepSpeedConfig (deepspeed/runtime/config.py _initialize_params: get_zero_config
l. 818, get_monitor_config l. 827, get_hybrid_engine_config l. 877, get_timers_config l. 916,
get_tensor_parallel_config l. 917), and pydantic refuses a value of another type there (ValidationError: the run
stops before its first step) [1]. DeepSpeedConfigModel's model_config [2] does not set strict, so pydantic
validates in its lax mode [3] (validate_python: json.load's values): the reader takes what that takes, as pydantic
takes it, by running pydantic's own validator (TypeAdapter) on the type transcribed here:
  - int: an int, a float with no fractional part (5e8), a string of an integer ("5"), a bool; not 1.5, "5e8";
  - float: an int, a float, a bool, a numeric string; bool: true / false, 0 / 1, and the strings "true", "false",
    "yes", "no", "on", "off", "t", "f", "y", "n", "1", "0" in any case; str: a string only (no number);
  - Optional[X]: null or an X; Dict[str, Any]: an object; Path: a string;
  - the bounds the models set with Field (ge=0 on the bucket sizes and counts, 0 <= ratio <= 1).
One model validator is a rule on values the reader checks too: an offload_optimizer ratio below 1 outside stage 3
(offload_ratio_check, _partial_offload). Checked against DeepSpeed's own models (scripts/pydantic_rule_check.py:
2,340 key / value cases, 20 unknown keys and 218 values coerce reads, 0 differences).
"auto" (the Hugging Face Trainer's placeholder) is taken anywhere: DeepSpeedConfigModel.__init__ drops every "auto"
value before validating (config_utils.py l. 54-57; a nested model too, pydantic running its __init__). A section
that is not a JSON object is refused as pydantic refuses it (a model from a non-dict).

The keys the reader prices and these models type (zero_optimization.stage, overlap_comm, mics_shard_size, the
stage-3 knobs and reduce_bucket_size it reads, the offload sections' keys, tensor_parallel.autotp_size) are read as
DeepSpeed reads them: coerce runs pydantic's validator on each and the reader prices the value pydantic makes of it
("false" for overlap_comm prices overlap off, "2" or 2.0 for the stage is stage 2, true for the stage is stage 1 as
ZeroStageEnum takes it), listed as assumed with the JSON's spelling (a whole float for a count, 5e8, is read as
before, not listed); a value pydantic refuses is left for the reader's own check, which names the planner's choice,
and check refuses it after. bf16 / fp16.enabled and the batch keys are not in these models (get_scalar_param, no
type): the reader takes them as DeepSpeed's own code does with the untyped value (deepspeed._enabled: its Python
truth, so "false" is on, said so; deepspeed._batch: _batch_assertion's arithmetic, so a string, false or 0 is refused
and 64.0 or true read as 64 and 1, said so).
Keys a model does not have are refused as DeepSpeed refuses them (pydantic's extra="forbid", [2]: "Extra inputs are
not permitted" at start-up), the hint naming the nearest key the model has (difflib) or its keys; keys outside these
sections (the top level is a dict DeepSpeed reads with get_* helpers that look up the keys they know and ignore the
rest: bf16 / fp16's loss-scaling keys, gradient_clipping, a made-up key; config_utils.py get_scalar_param l. 193-194)
keep the reader's listing as before.

References
[1] microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/config.py DeepSpeedZeroConfig l. 86-344 (get_zero_config
    l. 67-74), runtime/zero/offload_config.py DeepSpeedZeroOffloadParamConfig l. 21-45,
    DeepSpeedZeroOffloadOptimizerConfig l. 52-93, monitor/config.py TensorBoardConfig l. 17-29, WandbConfig l. 33-45,
    CSVConfig l. 49-61, CometConfig l. 65-116 (get_monitor_config l. 12-14: tensorboard, wandb, csv_monitor, comet),
    runtime/config.py HybridEngineConfig l. 547-553 (get_hybrid_engine_config l. 556-559), utils/config.py
    DeepSpeedThroughputTimerConfig l. 35-41 (get_timers_config l. 27-32: timers.throughput),
    runtime/tensor_parallel/config.py TPTrainingConfig l. 38-67 (get_tensor_parallel_config l. 77-81).
[2] microsoft/DeepSpeed @38327e07 deepspeed/runtime/config_utils.py DeepSpeedConfigModel l. 17-113: model_config
    ConfigDict(validate_default=True, validate_assignment=True, use_enum_values=True, populate_by_name=True,
    extra="forbid", arbitrary_types_allowed=True, protected_namespaces=()) l. 105-113: no strict, so lax;
    populate_by_name: a field's alias (stage3_max_live_parameters) and its name (max_live_parameters) both taken.
[3] pydantic v2 docs, "Conversion Table" (lax mode, Python input) and "Strict Mode"; the project's pydantic
    (pyproject.toml: pydantic>=2.5) runs the validator.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from enum import Enum
from typing import Annotated, Any, Dict, Optional, get_args, get_origin

from pydantic import Field, TypeAdapter, ValidationError

from ..errors import PlannerError
from .report import short_value as _short

COMMIT = "@38327e07"
Count = Annotated[int, Field(ge=0)]  # Field(pp_int(...), ge=0): the bucket sizes and counts
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]  # offload_optimizer.ratio, Field(1.0, ge=0.0, le=1.0)



class ZeroStageEnum(int, Enum):
    """deepspeed/runtime/zero/config.py @38327e07 l. 77-84 (its max_stage alias of 3 left out: the same value)."""
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3


class OffloadDeviceEnum(str, Enum):
    """deepspeed/runtime/zero/offload_config.py @38327e07 l. 14-18."""
    none = "none"
    cpu = "cpu"
    nvme = "nvme"


ZERO = "deepspeed/runtime/zero/config.py"
OFFLOAD = "deepspeed/runtime/zero/offload_config.py"
MONITOR = "deepspeed/monitor/config.py"
# section (zero_optimization.offload_param: the nested model) -> (file, model) and key -> (type, line); an alias
# (Field(alias=...)) is its own row at the field's line, both spellings taken (populate_by_name [2])
MODELS: dict[str, tuple[str, str, dict[str, tuple[Any, int]]]] = {
    "zero_optimization": (ZERO, "DeepSpeedZeroConfig", {
        "stage": (ZeroStageEnum, 91), "contiguous_gradients": (bool, 98), "reduce_scatter": (bool, 104),
        "reduce_bucket_size": (Count, 109), "use_multi_rank_bucket_allreduce": (bool, 115),
        "allgather_partitions": (bool, 122), "allgather_bucket_size": (Count, 128), "overlap_comm": (Optional[bool], 134),
        "load_from_fp32_weights": (bool, 139), "elastic_checkpoint": (bool, 147), "sub_group_size": (Count, 168),
        "cpu_offload_param": (Optional[bool], 174), "cpu_offload_use_pin_memory": (Optional[bool], 185),
        "cpu_offload": (Optional[bool], 195),
        "prefetch_bucket_size": (Count, 208), "stage3_prefetch_bucket_size": (Count, 208),
        "param_persistence_threshold": (Count, 214), "stage3_param_persistence_threshold": (Count, 214),
        "model_persistence_threshold": (Count, 221), "stage3_model_persistence_threshold": (Count, 221),
        "max_live_parameters": (Count, 231), "stage3_max_live_parameters": (Count, 231),
        "max_reuse_distance": (Count, 237), "stage3_max_reuse_distance": (Count, 237),
        "gather_16bit_weights_on_model_save": (bool, 243), "stage3_gather_16bit_weights_on_model_save": (bool, 243),
        "module_granularity_threshold": (int, 251), "stage3_module_granularity_threshold": (int, 251),
        "use_all_reduce_for_fetch_params": (bool, 259), "stage3_use_all_reduce_for_fetch_params": (bool, 259),
        "stage3_gather_fp16_weights_on_model_save": (bool, 265), "ignore_unused_parameters": (bool, 272),
        "legacy_stage1": (bool, 281), "round_robin_gradients": (bool, 287), "zero_hpz_partition_size": (Count, 294),
        "zero_quantized_weights": (bool, 298), "zero_quantized_nontrainable_weights": (bool, 303),
        "zero_quantized_gradients": (bool, 310), "zeropp_loco_param": (Optional[Dict[str, Any]], 315),
        "mics_shard_size": (int, 326), "mics_hierarchical_params_gather": (bool, 328),
        "memory_efficient_linear": (bool, 330), "pipeline_loading_checkpoint": (bool, 337),
        "override_module_apply": (bool, 339), "log_trace_cache_warnings": (bool, 344)}),
    "zero_optimization.offload_param": (OFFLOAD, "DeepSpeedZeroOffloadParamConfig", {
        "device": (OffloadDeviceEnum, 24), "nvme_path": (Optional[Path], 30), "buffer_count": (Count, 33),
        "buffer_size": (Count, 36), "max_in_cpu": (Count, 39), "pin_memory": (bool, 45)}),
    "zero_optimization.offload_optimizer": (OFFLOAD, "DeepSpeedZeroOffloadOptimizerConfig", {
        "device": (OffloadDeviceEnum, 55), "nvme_path": (Optional[Path], 61), "buffer_count": (Count, 64),
        "pin_memory": (bool, 72), "pipeline_read": (bool, 78), "pipeline_write": (bool, 84), "fast_init": (bool, 90),
        "ratio": (Ratio, 93)}),
    "tensorboard": (MONITOR, "TensorBoardConfig", {"enabled": (bool, 20), "output_path": (str, 23), "job_name": (str, 29)}),
    "wandb": (MONITOR, "WandbConfig", {"enabled": (bool, 36), "group": (Optional[str], 39), "team": (Optional[str], 42),
                                       "project": (str, 45)}),
    "csv_monitor": (MONITOR, "CSVConfig", {"enabled": (bool, 52), "output_path": (str, 55), "job_name": (str, 61)}),
    "comet": (MONITOR, "CometConfig", {
        "enabled": (bool, 72), "samples_log_interval": (int, 75), "project": (Optional[str], 78),
        "workspace": (Optional[str], 84), "api_key": (Optional[str], 90), "experiment_name": (Optional[str], 96),
        "experiment_key": (Optional[str], 103), "online": (Optional[bool], 110), "mode": (Optional[str], 116)}),
    "hybrid_engine": ("deepspeed/runtime/config.py", "HybridEngineConfig", {
        "enabled": (bool, 548), "max_out_tokens": (int, 549), "inference_tp_size": (int, 550),
        "release_inference_cache": (bool, 551), "pin_parameters": (bool, 552), "tp_gather_partition_size": (int, 553)}),
    "timers.throughput": ("deepspeed/utils/config.py", "DeepSpeedThroughputTimerConfig", {
        "enabled": (bool, 38), "synchronized": (bool, 41)}),
    "tensor_parallel": ("deepspeed/runtime/tensor_parallel/config.py", "TPTrainingConfig", {
        "autotp_size": (int, 45), "keep_module_on_host": (bool, 59), "replace_with_kernel_inject": (bool, 67),
        "kernel_inject": (bool, 67)}),
}


@lru_cache(maxsize=None)
def _adapter(typ) -> TypeAdapter:
    return TypeAdapter(typ)


def type_text(typ) -> str:
    """The declared type as the model spells it (Count / Ratio: int / float with their Field bounds)."""
    if typ is Count:
        return "int (Field ge=0)"
    if typ is Ratio:
        return "float (Field ge=0.0, le=1.0)"
    if isinstance(typ, type) and issubclass(typ, Enum):
        return f"{typ.__name__} (" + ", ".join(repr(m.value) for m in typ) + ")"
    if get_origin(typ) is not None and type(None) in get_args(typ):
        (inner,) = [a for a in get_args(typ) if a is not type(None)]
        return f"Optional[{type_text(inner)}]"
    return getattr(typ, "__name__", repr(typ).replace("typing.", ""))


def _json(v) -> str:
    return "null" if v is None else "true" if v is True else "false" if v is False else _short(v)


def _at(data: dict, path: str):
    """The value at a dotted section path, or None where a table on the way is absent (the reader refuses a non-object
    zero_optimization itself) or is not an object."""
    body = data
    for part in path.split("."):
        if not isinstance(body, dict) or part not in body:
            return None
        body = body[part]
    return body


def check(where: str, data: dict, keys=None) -> None:
    """Refuse (PlannerError, exit 2) a value of a key MODELS types that pydantic's lax validation refuses, naming the
    file, the key, the type DeepSpeed declares with its file and line, the value and pydantic's reason; and a
    section that is not a JSON object (null allowed where the field is Optional: offload_param / offload_optimizer).
    keys: which (section, key) to check (None: all; the reader checks the keys it reads after its own checks)."""
    for path, (src, model, fields) in MODELS.items():
        body = _at(data, path)
        if body is None or body == "auto":
            continue
        if not isinstance(body, dict):
            if path in ("zero_optimization", "tensor_parallel") or path.startswith("zero_optimization."):
                continue  # the reader's own refusal names these (deepspeed.read, _offload, _autotp)
            raise PlannerError(f"{where}{path} = {_json(body)} must be a JSON object: DeepSpeed builds it into its "
                               f"{model} (microsoft/DeepSpeed {COMMIT} {src}), which pydantic refuses from anything else",
                               f'e.g. "{path.split(".")[-1]}": {{"enabled": false}}')
        for key, v in body.items():
            if key not in fields and key not in NESTED.get(path, ()):
                _unknown(where, path, key, src, model, fields)
            if key not in fields or v == "auto" or (keys is not None and not keys(path, key)):
                continue  # "auto" dropped [2]
            typ, line = fields[key]
            try:
                _adapter(typ).validate_python(v)
            except ValidationError as e:
                why = e.errors()[0]["msg"]
                raise PlannerError(
                    f"{where}{path}.{key} = {_json(v)} is not {type_text(typ)}: DeepSpeed declares "
                    f"{model}.{key} (microsoft/DeepSpeed {COMMIT} {src} l. {line}) and pydantic refuses the value at "
                    f"start-up ({why}; DeepSpeedConfigModel validates in pydantic's lax mode: config_utils.py l. 105-113)",
                    f"write {key} as {type_text(typ)}, or \"auto\"") from None
    if keys is None or keys("zero_optimization.offload_optimizer", "ratio"):
        _partial_offload(where, data)


# the fields a section's model has that MODELS does not type: the nested offload models (zero/config.py l. 153, 160, their
# own rows above) and TPTrainingConfig's dtype (l. 40), tensor_parallel / its alias tp (l. 50), injection_policy_tuple
# (l. 56), which the reader neither prices nor checks; with MODELS' keys, every field and alias of each model (checked
# against the class bodies @38327e07)
NESTED = {"zero_optimization": ("offload_param", "offload_optimizer"),
          "tensor_parallel": ("dtype", "tensor_parallel", "tp", "injection_policy_tuple")}


def _unknown(where: str, path: str, key, src: str, model: str, fields: dict) -> None:
    """A key the section's model has not: pydantic's extra="forbid" ([2] l. 110) refuses it at start-up."""
    known = sorted(set(fields) | set(NESTED.get(path, ())))
    near = difflib.get_close_matches(str(key), known, n=1)
    raise PlannerError(
        f"{where}{path}.{key} is not a key of DeepSpeed's {model} (microsoft/DeepSpeed {COMMIT} {src}): pydantic refuses "
        "it at start-up (DeepSpeedConfigModel's extra=\"forbid\", config_utils.py l. 110: 'Extra inputs are not permitted')",
        f"did you mean {near[0]!r}?" if near else f"valid keys of {path}: {', '.join(known)}")


def coerce(where: str, data: dict, keys) -> tuple[dict, list[tuple[str, Any, Any]]]:
    """The JSON with each value of a (section, key) that keys selects and MODELS types replaced by the value pydantic's
    lax validation makes of it (an enum by its value), as DeepSpeed reads it; and the (dotted key, JSON value, value
    read) of each whose JSON type differs from the value read's (a string or a boolean for a number, a number or a
    string for a boolean). A value pydantic refuses, "auto" and a section that is not an object are left as they are
    (the reader's own checks and check refuse what DeepSpeed refuses). data is not changed (a copy is returned)."""
    out = dict(data)
    changed: list[tuple[str, Any, Any]] = []
    for path, (_, _, fields) in MODELS.items():
        parts = path.split(".")
        body = _at(data, path)
        if not isinstance(body, dict):
            continue
        new = dict(body)
        for key, v in body.items():
            if key not in fields or v == "auto" or not keys(path, key):
                continue
            try:
                r = _adapter(fields[key][0]).validate_python(v)
            except ValidationError:
                continue
            r = r.value if isinstance(r, Enum) else str(r) if isinstance(r, Path) else r  # JSON values only
            if r is v or (type(r) is type(v) and r == v):
                continue
            new[key] = r
            if not (isinstance(v, float) and not isinstance(r, bool) and isinstance(r, (int, float)) and r == v):
                changed.append((f"{path}.{key}", v, r))  # 5e8 for an int: read as before, not listed
        cur = out
        for part in parts[:-1]:
            cur[part] = dict(cur[part])
            cur = cur[part]
        cur[parts[-1]] = new
    return out, changed


def _partial_offload(where: str, data: dict) -> None:
    """DeepSpeedZeroConfig's model validator offload_ratio_check ([1] zero/config.py l. 356-361): an offload_optimizer
    ratio below 1 (Twin-Flow's partial offload) asserts stage 3, a pydantic ValidationError at start-up elsewhere
    (the stage absent: 0, the model's default, l. 91)."""
    zero = data.get("zero_optimization")
    off = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    if not isinstance(off, dict) or off.get("ratio", 1.0) == "auto":
        return
    ratio, stage = _adapter(Ratio).validate_python(off.get("ratio", 1.0)), zero.get("stage", 0)
    if ratio < 1.0 and stage != "auto" and _adapter(ZeroStageEnum).validate_python(stage) != 3:
        raise PlannerError(
            f"{where}zero_optimization.offload_optimizer.ratio = {_json(off['ratio'])} at stage {_json(stage)}: DeepSpeed "
            f"refuses partial offload below ZeRO stage 3 at start-up (DeepSpeedZeroConfig.offload_ratio_check, "
            f"microsoft/DeepSpeed {COMMIT} {ZERO} l. 356-361: 'Partial offloading only supported for ZeRO Stage 3.')",
            "set ratio 1 (the whole optimizer partition offloaded), or zero_optimization.stage 3")
