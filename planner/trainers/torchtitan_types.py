"""The type torchtitan declares for each key of its TOML job file, and the rule its loader applies to a value of
another type: the check of the TOML reader (torchtitan.read), issue "readers".

torchtitan main @e347b1e5e (the stack `torchtitan`, the last TOML-configured commit) loads a TOML in two steps
[2]: ConfigManager._dict_to_dataclass builds the JobConfig dataclasses from the file's tables, refusing a key its
dataclass has not ('Invalid field names', l. 160-172) but passing every value as the file gives it (l. 174-181: no
type check), then tyro.cli(config_cls, default=base_config) (l. 56-58) lays the command line over that default.
tyro does not refuse a default of another type than the field declares: it warns and widens the field's type to
take it [3], and the run goes on with the file's value where torchtitan's code expects the declared type (a
string learning rate reaches torch.optim.AdamW, whose `0.0 <= lr` raises TypeError at start-up; a string "false"
for a bool is true; a Literal's unknown name reaches the code that branches on it). The reader refuses (exit 2)
exactly the values tyro warns about, and takes what tyro takes without a word:
  - a number (int, float or bool: numbers.Number) for a field of one type, int / float / bool / str / list[str] /
    a Literal: never warned (tyro _parsers.py l. 331-343 skips numbers, "The numeric tower in Python is wacky"), so
    `lr = 1` (an int for a float), `log_freq = 10.0`, `enable_wandb = 1` or `folder = 5` are taken as tyro takes them
    (the modelled keys keep the reader's own stricter checks: an integer degree, a string name, torchtitan.py
    _check_types / _int);
  - anything else (a string, a list, a table, a date) for a field of one type: warned unless it is of the type by
    tyro's is_instance [3]: isinstance for a plain type, membership for a Literal, the first item only for a list
    (typeguard's check_type, whose default collection_check_strategy is FIRST_ITEM [4]: ["a", 1] passes, [1, "a"] not);
  - a union (`str | None`, `int | None`, `float | int`, `list[str] | str`, ...): warned first where no option's
    origin matches with tyro's fuzzy numeric tower (expand_union_types [3]: an int matches float, a bool int or
    float, nothing else widens, so `prefetch_factor = 2.0` for int | None and `config_file = 5` for str | None are
    warned; an option that is a Literal makes isinstance raise TypeError there, which tyro takes as no warning), then
    by the rule above (a number not; otherwise is_instance over the options).
TOML has no None, so `X | None` takes an X. Checked by running ConfigManager.parse_args @e347b1e5e with tyro v1.0.15
on one-key TOML files (a string lr, a list log_freq, a float log_freq, an int for a bool, an unknown Literal name, a
mixed list, a table for a float: warned exactly where this rule says), and over every key with 16 values by
scripts/tyro_rule_check.py (2,303 cases, 0 differences).
A table where torchtitan has a section (a dataclass field) is required: a value there reaches torchtitan's code,
which reads its fields as attributes (AttributeError), and is refused with the section's name. Two value rules
torchtitan runs when the file loads are refused too: [validation] steps neither > 0 nor -1
(Validation.__post_init__, job_config.py l. 978-981: an assert), and a number for the tokenizer path ([model]
hf_assets_path, or a non-empty tokenizer_path that replaces it: _validate_config [2] l. 195-216 passes it to
os.path.exists and str.endswith). The keys the reader prices (torchtitan.MODELLED) are checked after its own
checks, whose messages name the values it reads (torchtitan.read).

Not checked: a file that names [job] custom_config_module, whose dataclasses _merge_configs lays over JobConfig,
a custom field replacing the base's type ([2] l. 119-158): its types are the user's module's (listed as assumed);
the values of the keys torchtitan @e347b1e5e has not (the earlier layouts the reader also reads: [float8], [mx],
[training] batch_size / compile, ...: read as before, listed where not priced, and named in one assumed line,
earlier_note: @e347b1e5e refuses such a file, 'Invalid field names', and @6404b932 drops a key its JobConfig has not
without a word; both verdicts for 107 unknown keys are tests/data/torchtitan_unknown_keys.json, from
scripts/tyro_rule_check.py --unknown); torchtitan 0.3.0's launch lines,
which tyro parses from the command line's words (torchtitan03.py BOOL_OPTIONS ... LITERAL_OPTIONS).

References
[1] pytorch/torchtitan @e347b1e5e torchtitan/config/job_config.py: the dataclasses, each key's line in MAIN_TYPES
    (Job l. 18, Profiling l. 42, Metrics l. 74, Model l. 100, Optimizer l. 134, LRScheduler l. 169, DataLoader
    l. 209, Training l. 243, Parallelism l. 312, Checkpoint l. 487, ActivationCheckpoint l. 651, Compile l. 721,
    Float8Linear l. 731, Float8GroupedMM l. 756, MXLinear l. 767, MXGroupedMM l. 794, Quantize l. 830, Comm
    l. 839, MemoryEstimation l. 876, FaultTolerance l. 885, Experimental l. 928, Validation l. 950, Debug l. 985,
    JobConfig l. 1000).
[2] pytorch/torchtitan @e347b1e5e torchtitan/config/manager.py ConfigManager.parse_args l. 46-62,
    _maybe_add_custom_config l. 86-117, _merge_configs l. 119-158, _dict_to_dataclass l. 160-181.
[3] brentyi/tyro v1.0.15 (d0f2e3fb) src/tyro/_parsers.py l. 331-353 (a default that is not is_instance of the
    field's type and not a numbers.Number: warnings.warn("... annotated with type ..., but the default value ...
    We'll try to handle this gracefully ...") and the type widened to Union[type, type(default)]); _fields.py
    l. 178-181 and _resolver.py expand_union_types l. 661-693 (a union whose options' origins none matches by
    isinstance_with_fuzzy_numeric_tower, l. 696-727: warned and widened); _resolver.py is_instance l. 1034-1068.
[4] agronholm/typeguard (81308a3) src/typeguard/_config.py l. 45-49, 81-101: check_type's default
    collection_check_strategy CollectionCheckStrategy.FIRST_ITEM ("check only the first item").
"""

from __future__ import annotations

import difflib

import numbers
import types
from typing import Literal, Optional, Union, get_args, get_origin

from ..errors import PlannerError
from .report import short_value as _short

COMMIT = "@e347b1e5e"
# section (a dotted path for a nested dataclass) -> key -> (the type torchtitan declares, its line in job_config.py [1])
MAIN_TYPES: dict[str, dict[str, tuple]] = {
    "job": {
        "config_file": (str | None, 19), "dump_folder": (str, 22), "description": (str, 25),
        "print_config": (bool, 28), "save_config_file": (str | None, 31), "custom_config_module": (str, 34),
    },
    "profiling": {
        "enable_profiling": (bool, 43), "save_traces_folder": (str, 46), "profile_freq": (int, 49),
        "profiler_active": (int, 52), "profiler_warmup": (int, 59), "enable_memory_snapshot": (bool, 66),
        "save_memory_snapshot_folder": (str, 69),
    },
    "metrics": {
        "log_freq": (int, 75), "enable_tensorboard": (bool, 78), "disable_color_printing": (bool, 81),
        "save_tb_folder": (str, 84), "save_for_all_ranks": (bool, 87), "enable_wandb": (bool, 95),
    },
    "model": {
        "name": (str, 101), "flavor": (str, 104), "hf_assets_path": (str, 107), "tokenizer_path": (str | None, 114),
        "converters": (list[str], 118), "print_after_conversion": (bool, 126),
    },
    "optimizer": {
        "name": (str, 135), "lr": (float, 138), "beta1": (float, 141), "beta2": (float, 142), "eps": (float, 145),
        "weight_decay": (float, 148), "implementation": (Literal['for-loop', 'foreach', 'fused'], 151),
        "early_step_in_backward": (bool, 160),
    },
    "lr_scheduler": {
        "warmup_steps": (int, 170), "total_steps": (int | None, 175), "decay_ratio": (float | None, 183),
        "decay_type": (Literal['linear', 'sqrt', 'cosine'], 192), "min_lr_factor": (float, 200),
    },
    "training": {
        "dataset": (str, 244), "dataset_path": (str | None, 247), "local_batch_size": (int, 253),
        "global_batch_size": (int, 256), "seq_len": (int, 261), "max_norm": (float | int, 264), "steps": (int, 267),
        "enable_cpu_offload": (bool, 270), "dtype": (Literal['bfloat16', 'float32'], 275),
        "mixed_precision_param": (Literal['bfloat16', 'float32'], 282),
        "mixed_precision_reduce": (Literal['float32'], 290), "gc_freq": (int, 296), "gc_debug": (bool, 299),
    },
    "training.dataloader": {
        "num_workers": (int, 226), "persistent_workers": (bool, 229), "pin_memory": (bool, 232),
        "prefetch_factor": (int | None, 235),
    },
    "parallelism": {
        "data_parallel_replicate_degree": (int, 313), "data_parallel_shard_degree": (int, 324),
        "fsdp_reshard_after_forward": (Literal['default', 'always', 'never'], 336),
        "tensor_parallel_degree": (int, 351), "disable_loss_parallel": (bool, 354),
        "enable_async_tensor_parallel": (bool, 357), "pipeline_parallel_degree": (int, 360),
        "module_fqns_per_model_part": (Optional[list[list[str]]], 367),
        "pipeline_parallel_first_stage_less_layers": (int, 377),
        "pipeline_parallel_last_stage_less_layers": (int, 383),
        "pipeline_parallel_layers_per_stage": (int | None, 389), "pipeline_parallel_schedule": (str, 396),
        "pipeline_parallel_schedule_csv": (str | None, 405), "pipeline_parallel_microbatch_size": (int, 412),
        "pipeline_parallel_expert_parallel_overlap": (bool, 420), "context_parallel_degree": (int, 428),
        "context_parallel_load_balancer": (str | None, 431),
        "context_parallel_rotate_method": (Literal['allgather', 'alltoall'], 446),
        "expert_parallel_degree": (int, 454), "expert_tensor_parallel_degree": (int, 464),
        "expert_parallel_comm_backend": (Literal['standard', 'deepep'], 474),
    },
    "checkpoint": {
        "enable": (bool, 488), "enable_ft_dataloader_checkpoints": (bool, 491), "folder": (str, 513),
        "interval": (int, 519), "initial_load_path": (str | None, 522), "initial_load_model_only": (bool, 538),
        "initial_load_in_hf": (bool, 548), "initial_load_in_hf_quantized": (bool, 558),
        "last_save_model_only": (bool, 566), "last_save_in_hf": (bool, 575),
        "export_dtype": (Literal['float16', 'bfloat16', 'float32'], 586),
        "async_mode": (Literal['disabled', 'async', 'async_with_pinned_mem'], 591), "keep_latest_k": (int, 608),
        "load_step": (int, 616), "exclude_from_loading": (list[str], 619),
        "enable_first_step_checkpoint": (bool, 626), "create_seed_checkpoint": (bool, 634), "load_only": (bool, 641),
    },
    "activation_checkpoint": {
        "mode": (Literal['selective', 'full', 'memory_budget', 'none'], 652), "selective_ac_option": (str, 655),
        "per_op_sac_force_recompute_mm_shapes_by_fqns": (list[str], 661), "early_stop": (bool, 675),
        "memory_budget": (float, 681), "visualize_memory_budget_pareto": (bool, 691),
        "preserve_rng_state": (bool, 699), "determinism_check": (str, 707), "debug": (bool, 713),
    },
    "compile": {
        "enable": (bool, 722), "components": (list[str], 725), "backend": (str, 727),
    },
    "quantize.linear.float8": {
        "enable_fsdp_float8_all_gather": (bool, 732), "precompute_float8_dynamic_scale_for_fsdp": (bool, 735),
        "recipe_name": (Literal['tensorwise', 'rowwise', 'rowwise_with_gw_hp'] | None, 738),
        "filter_fqns": (list[str], 741), "emulate": (bool, 747),
    },
    "quantize.linear.mx": {
        "mxfp8_dim1_cast_kernel_choice": (Literal['triton', 'cuda', 'torch'], 768), "recipe_name": (str, 777),
        "filter_fqns": (list[str], 784),
    },
    "quantize.grouped_mm.float8": {
        "fqns": (list[str] | str, 757),
    },
    "quantize.grouped_mm.mx": {
        "recipe_name": (Literal['mxfp8'], 795), "fqns": (list[str] | str, 802),
    },
    "comm": {
        "init_timeout_seconds": (int, 840), "train_timeout_seconds": (int, 843), "trace_buf_size": (int, 849),
        "save_traces_folder": (str, 852), "save_traces_file_prefix": (str, 855),
        "mode": (Literal['default', 'fake_backend', 'local_tensor'], 858),
    },
    "memory_estimation": {
        "enable": (bool, 877), "disable_fake_mode": (bool, 880),
    },
    "fault_tolerance": {
        "enable": (bool, 886), "process_group": (str, 895), "process_group_timeout_ms": (int, 900),
        "replica_id": (int, 906), "group_size": (int, 909), "min_replica_size": (int, 916),
        "semi_sync_method": (str | None, 919),
    },
    "experimental": {
        "custom_import": (str, 929), "custom_args_module": (str, 939),
    },
    "validation": {
        "enable": (bool, 951), "dataset": (str, 954), "dataset_path": (str | None, 957),
        "local_batch_size": (int, 960), "seq_len": (int, 963), "freq": (int, 966), "steps": (int, 969),
    },
    "validation.dataloader": {
        "num_workers": (int, 226), "persistent_workers": (bool, 229), "pin_memory": (bool, 232),
        "prefetch_factor": (int | None, 235),
    },
    "debug": {
        "seed": (int | None, 986), "deterministic": (bool, 989), "deterministic_warn_only": (bool, 992),
        "moe_force_load_balance": (bool, 995),
    },
}
# the sections: every dataclass path of MAIN_TYPES with its parents (quantize, quantize.linear, ...)
SECTIONS = frozenset(".".join(s.split(".")[:i + 1]) for s in MAIN_TYPES for i in range(s.count(".") + 1))


def _fuzzy(v, cls) -> bool:
    """tyro's isinstance_with_fuzzy_numeric_tower [3] l. 696-727, as a yes / no: exact isinstance, or a bool for int /
    float / complex, an int for float / complex, a float for complex. isinstance raises TypeError for a Literal."""
    if isinstance(v, cls):
        return True
    if isinstance(v, bool):
        return cls in (int, float, complex)
    if isinstance(v, int):
        return cls in (float, complex)
    if isinstance(v, float):
        return cls is complex
    return False


def _is_union(typ) -> bool:
    return get_origin(typ) in (Union, types.UnionType)


def _is_instance(typ, v) -> bool:
    """tyro's is_instance [3] l. 1034-1068 over the types MAIN_TYPES holds: a plain type by _fuzzy, a union by any of
    its options, a Literal by membership, list[X] by typeguard with its default FIRST_ITEM strategy [4]."""
    if type(typ) is type:
        return _fuzzy(v, typ)
    if _is_union(typ):
        return any(_is_instance(a, v) for a in get_args(typ))
    if get_origin(typ) is Literal:
        return v in get_args(typ)
    if get_origin(typ) is list:
        (item,) = get_args(typ)
        # typeguard's check of an item: isinstance for str (no numeric tower), a nested list the same way
        return isinstance(v, list) and (not v or (_is_instance(item, v[0]) if get_origin(item) is list
                                                  else isinstance(v[0], item)))
    raise TypeError(f"no rule for {typ!r}")  # every type of MAIN_TYPES has one (tests/test_reader_types.py)


def tyro_warns(typ, v) -> bool:
    """Whether tyro v1.0.15 warns about the TOML value `v` for a field declared `typ` (module docstring [3]): where
    the run then carries a value of another type than torchtitan's code expects."""
    if _is_union(typ):  # expand_union_types, before the field check
        try:
            if not any(_fuzzy(v, get_origin(o) or o) for o in get_args(typ)):
                return True
        except TypeError:  # a Literal option: isinstance raises, tyro's `except TypeError: pass` keeps the type
            pass
    if isinstance(v, numbers.Number):  # _parsers.py l. 343: numbers never checked
        return False
    return not _is_instance(typ, v)


def type_text(typ) -> str:
    """The declared type as job_config.py spells it."""
    if type(typ) is type:
        return typ.__name__
    if get_origin(typ) is Literal:
        return "Literal[" + ", ".join(repr(a) for a in get_args(typ)) + "]"
    if _is_union(typ):
        return " | ".join("None" if a is type(None) else type_text(a) for a in get_args(typ))
    return repr(typ).replace("typing.", "")


def _want(typ) -> str:
    """What to write in the TOML for the type (TOML has no None)."""
    if _is_union(typ):
        opts = [a for a in get_args(typ) if a is not type(None)]
        return " or ".join(_want(a) for a in opts)
    if get_origin(typ) is Literal:
        return "one of " + ", ".join(f'"{a}"' for a in get_args(typ))
    if get_origin(typ) is list:
        return "a list of lists of strings" if get_origin(get_args(typ)[0]) is list else "a list of strings"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[typ]


def _unquoted(typ) -> bool:
    """Whether the type takes no string at all (int, float, bool, their unions with None)."""
    return not _is_instance(typ, "") and not any(get_origin(a) is Literal for a in (get_args(typ) or (typ,)))


def custom_module(data: dict) -> Optional[str]:
    """[job] custom_config_module where the file names one ([2] _maybe_add_custom_config l. 106-111 reads it from the
    TOML's [job] table when the command line has none)."""
    job = data.get("job")
    v = job.get("custom_config_module") if isinstance(job, dict) else None
    return v if isinstance(v, str) and v else None


def check(where: str, data: dict, keys=None, known=None, earlier: Optional[list] = None) -> None:
    """Refuse (PlannerError, exit 2) a value of a torchtitan @e347b1e5e key that tyro warns about (tyro_warns), naming
    the file, the [section] key, the type job_config.py declares with its line, and the value; and a value that is
    not a table where torchtitan has a section; and a key or section torchtitan has not (_unknown: its ConfigManager
    refuses it, 'Invalid field names'), unless it is a key of the earlier layout the reader also reads (EARLIER) or
    known(section, key) says the reader prices it (an earlier name: [training] batch_size). The caller skips a file with [job] custom_config_module (custom_module). keys: which (section, key)
    to check (None: all; the reader checks the keys it prices after its own, more specific, checks have run).
    earlier: where given, the earlier layouts' keys the file uses that @e347b1e5e refuses ('[float8]', '[training]
    compile', ...) are appended to it (earlier_note)."""
    def walk(path: str, body: dict) -> None:
        fields = MAIN_TYPES.get(path, {})
        for key, v in body.items():
            sub = f"{path}.{key}" if path else key
            if sub in SECTIONS:
                if not isinstance(v, dict):
                    raise PlannerError(
                        f"{where}{sub} = {_short(v)}: [{sub}] must be a table (a [section] of key = value lines): "
                        f"torchtitan's {sub} is a dataclass of torchtitan/config/job_config.py {COMMIT}, whose fields "
                        "its code reads as attributes",
                        f"write [{sub}] as a section header with its keys below it")
                walk(sub, v)
            elif key not in fields:
                if sub in EARLIER and isinstance(v, dict):  # an earlier layout's section: its keys against it
                    if earlier is not None:
                        earlier.append(f"[{sub}]")
                    walk(sub, v)
                elif key in EARLIER.get(path, ()) or sub in EARLIER or (known is not None and known(path, key)):
                    if earlier is not None and (path in SECTIONS or not path) and (
                            key in EARLIER.get(path, ()) or sub in EARLIER or (path, key) == ("training", "batch_size")):
                        earlier.append(f"[{path}] {key}" if path else f"[{key}]")  # not a key inside [float8] / [mx]
                    continue  # a key of the earlier layout the reader reads (EARLIER) or prices: its listing
                elif path in EARLIER and path not in SECTIONS:
                    _unknown(where, path, key, EARLIER[path])
                else:
                    _unknown(where, path, key)
            elif keys is None or keys(path, key):
                typ, line = fields[key]
                if tyro_warns(typ, v):
                    raise PlannerError(
                        f"{where}[{path}] {key} = {_short(v)} ({type(v).__name__}) is not {_want(typ)}: torchtitan "
                        f"declares {key}: {type_text(typ)} (torchtitan/config/job_config.py {COMMIT} l. {line}); its "
                        "ConfigManager passes the file's value as it is (config/manager.py _dict_to_dataclass "
                        "l. 160-181) and tyro only warns ('annotated with type ..., but the default value ... has "
                        "type ...': tyro v1.0.15 _parsers.py l. 331-353), so the run would carry a "
                        f"{type(v).__name__} where torchtitan's code expects {type_text(typ)}",
                        f"write {key} as {_want(typ)}" + (" (without quotes: TOML's quotes make a string)"
                                                          if isinstance(v, str) and _unquoted(typ) else ""))
                if (path, key) == ("validation", "steps") and not (v > 0 or v == -1):
                    raise PlannerError(
                        f"{where}[validation] steps = {_short(v)}: torchtitan refuses it when it loads the file "
                        f"(Validation.__post_init__, torchtitan/config/job_config.py {COMMIT} l. 978-981: assert "
                        "steps > 0 or steps == -1, 'validation steps must be positive or -1')",
                        "give a positive number of validation steps, or -1 (the whole validation set)")
    walk("", data)
    if keys is None or keys("model", "hf_assets_path"):
        _assets_path(where, data)


# the fields of torchtitan's earlier layout (torchtitan/config/job_config.py @6404b932, 2025-08-03, whose option names
# the shipped tests/data/trainer_configs/llama3_8b.toml uses; the v0.1.0 linear layout, torchtitan.LINEAR_LAYOUTS) that
# @e347b1e5e no longer has, with their lines there: the reader reads a file of either layout, so these keep the
# reader's listing (not checked for type); a key neither layout has is refused, as both ConfigManagers refuse it
EARLIER_COMMIT = "@6404b932"
EARLIER: dict[str, dict[str, int]] = {
    "job": {"use_for_integration_test": 22, "print_args": 25},
    "training": {"compile": 213, "seed": 227, "deterministic": 230},
    "parallelism": {"enable_compiled_autograd": 247, "pipeline_parallel_split_points": 291},
    "checkpoint": {"enable_checkpoint": 378},
    "float8": {"enable_fsdp_float8_all_gather": 529, "precompute_float8_dynamic_scale_for_fsdp": 532,
               "recipe_name": 535, "filter_fqns": 538, "emulate": 545, "moe_fqns_prototype": 552},
    "mx": {"mxfp8_dim1_cast_kernel_choice": 562, "recipe_name": 565, "filter_fqns": 571, "moe_fqns_prototype": 579},
    "memory_estimation": {"enabled": 607},
    "fault_tolerance": {"sync_steps": 656, "should_quantize": 662, "fragment_sync_delay": 674,
                        "fragment_update_alpha": 688},
    "liger_kernel": {"enable_fused_linear_cross_entropy": 702},
    "validation": {"enabled": 728},
}


def earlier_note(keys: list) -> str:
    """The reading rule for the earlier layouts' keys a file uses (check's `earlier`): read as those layouts read them,
    though the stack's torchtitan refuses them and @6404b932's drops what it has not (the fixture
    tests/data/torchtitan_unknown_keys.json, from scripts/tyro_rule_check.py --unknown, holds both verdicts)."""
    batch = "[training] batch_size" in keys
    return (f"{', '.join(keys)}: the earlier layout's (torchtitan/config/job_config.py {EARLIER_COMMIT}"
            + ("; [training] batch_size the name before local_batch_size, 8570415c3, 2025-06-05" if batch else "")
            + "), read as that layout reads them; torchtitan {COMMIT}, the stack torchtitan's, refuses the file when it loads it "
            "('Invalid field names': config/manager.py _dict_to_dataclass l. 160-172, since eadca4835, 2025-08-28), "
            f"and torchtitan {EARLIER_COMMIT} drops a key its JobConfig has not without a word (manager.py "
            "l. 157-170)".replace("{COMMIT}", COMMIT)
            + (", so there [training] batch_size is not read and local_batch_size keeps its default, 8" if batch else ""))


def _unknown(where: str, path: str, key, fields=None) -> None:
    """A key or [section] JobConfig has not: torchtitan's ConfigManager refuses it when it loads the file
    (config/manager.py @e347b1e5e _dict_to_dataclass l. 165-171: ValueError 'Invalid field names in <class> data',
    at every level of the file's tables); the hint names the nearest field (difflib) or the section's fields."""
    known = sorted(fields if fields is not None else set(MAIN_TYPES.get(path, {})) | {
        s.split(".")[-1] for s in SECTIONS if (s.rsplit(".", 1)[0] if "." in s else "") == path})
    if fields is not None:  # an earlier layout's section ([float8], [mx], [liger_kernel]): its fields there
        raise PlannerError(
            f"{where}[{path}] {key} is not a key of torchtitan's [{path}] (job_config.py {EARLIER_COMMIT}, the earlier "
            f"layout that has the section; {COMMIT} has no [{path}]): torchtitan refuses the file when it loads it "
            "(ConfigManager._dict_to_dataclass: 'Invalid field names')", f"valid: {', '.join(sorted(fields))}")
    near = difflib.get_close_matches(str(key), known, n=1)
    at = f"[{path}] {key}" if path else f"[{key}]"
    raise PlannerError(
        f"{where}{at} is not a {'key' if path else 'section'} of torchtitan's JobConfig{' [' + path + ']' if path else ''}: "
        f"torchtitan {COMMIT} refuses the file when it loads it (config/manager.py _dict_to_dataclass l. 165-171: "
        "'Invalid field names ... Please modify your .toml config file')",
        (f"did you mean {near[0]!r}? " if near else "") + f"valid: {', '.join(known)}"
        if len(known) <= 12 or not near else f"did you mean {near[0]!r}?")


def _assets_path(where: str, data: dict) -> None:
    """ConfigManager._validate_config [2] l. 183-221, run when the file loads: a truthy [model] tokenizer_path replaces
    hf_assets_path (l. 195-200), which goes to os.path.exists (l. 201) and, where that finds it, str.endswith (l. 216).
    A number there (which tyro does not warn about) is no path: a float raises TypeError in os.path.exists, a bool or
    an int names a file descriptor (0 and 1 are open: stdin, stdout), which exists, and .endswith raises
    AttributeError; an int naming no open descriptor reaches the tokenizer's loader as a number. Refused."""
    model = data.get("model")
    if not isinstance(model, dict):
        return
    tok = model.get("tokenizer_path")
    key, v = ("tokenizer_path", tok) if tok else ("hf_assets_path", model.get("hf_assets_path", ""))
    if isinstance(v, numbers.Number):
        raise PlannerError(
            f"{where}[model] {key} = {_short(v)} is not a path: torchtitan's ConfigManager._validate_config "
            f"(torchtitan/config/manager.py {COMMIT} l. 195-216) passes the"
            + (" (non-empty) tokenizer_path on as hf_assets_path and its" if key == "tokenizer_path" else "")
            + " value to os.path.exists and str.endswith when the file loads (TypeError for a float, AttributeError "
            "for a bool or an int naming an open file descriptor; another int reaches the tokenizer's loader)",
            f"write {key} as a quoted path (model.hf_assets_path; tokenizer_path is its deprecated name)")
