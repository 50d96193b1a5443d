"""Find and load catalog entries and user files: model_zoo/, hardware_db/, Hugging Face
config.json files, and user YAML paths. Every error names the file and the field.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from . import files
from .errors import PlannerError
from .schema import MAX_COUNT, Hardware, ModelSpec, Stack

_PKG = Path(__file__).resolve().parent
T = TypeVar("T", bound=BaseModel)


@lru_cache(maxsize=None)
def _catalog_dir(kind: str) -> Path:
    """Installed wheels carry the catalogs in planner/_data/; a source checkout has them at
    the repository root. Looked up once a process (the installation does not move while it runs; each fit row's
    resolve asked about 10 times, two stats each); a missing catalog is not cached (lru_cache keeps no raise)."""
    for d in (_PKG / "_data" / kind, _PKG.parent / kind):
        if files.is_dir(d):
            return d
    raise PlannerError(f"the {kind} catalog is missing from this installation", "reinstall with `pip install .`")


def reference_runs() -> Path:
    """The published-runs reference file (`planner validate` with no path): shipped in the
    wheel as planner/_data/published_runs.yaml, tests/data/published_runs.yaml in a checkout."""
    for f in (_PKG / "_data" / "published_runs.yaml", _PKG.parent / "tests" / "data" / "published_runs.yaml"):
        if f.is_file():
            return f
    raise PlannerError("the published-runs reference file is missing from this installation",
                       "reinstall with `pip install .`, or give the file: planner validate RUNS.yaml")


def model_dir() -> Path:
    return _catalog_dir("model_zoo")


def hardware_dir() -> Path:
    return _catalog_dir("hardware_db")


def stack_dir() -> Path:
    return _catalog_dir("stack_db")


def _names(d: Path) -> list[str]:
    return sorted(p.stem for p in d.glob("*.yaml"))


def list_models() -> list[str]:
    return _names(model_dir())


def list_model_names() -> list[str]:
    """What --model can name from the catalogs (`planner models`): the model_zoo entries, then every torchtitan
    flavor (planner/torchtitan_registry.py model_names, `torchtitan:<code>/<flavor>`)."""
    from .torchtitan_registry import model_names

    return list_models() + model_names()


def list_hardware() -> list[str]:
    return _names(hardware_dir())


def list_stacks() -> list[str]:
    return _names(stack_dir())


def _fields_at(cls, loc: tuple) -> list[str]:
    """The field names of the model that holds the last part of `loc` (nested models followed
    through their annotations; list indices skipped)."""
    import typing

    cur = cls
    for part in loc[:-1]:
        if isinstance(part, int) or cur is None:
            continue
        f = getattr(cur, "model_fields", {}).get(part)
        if f is None:
            return []
        ann, cur = f.annotation, None
        stack = [ann]
        while stack:  # Optional[X], list[X], Union[...]
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                cur = a
                break
            stack.extend(typing.get_args(a))
    return list(getattr(cur, "model_fields", {}) or [])


def format_validation_error(e: ValidationError, path: str, cls=None) -> PlannerError:
    errs = e.errors()
    # a misspelled key is both an unknown field and a missing one: report the unknown one,
    # whose did-you-mean names the fix
    first = next((x for x in errs if x["type"] == "extra_forbidden"), errs[0])
    loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
    msg = first["msg"]
    more = f" (and {e.error_count() - 1} more problem(s))" if e.error_count() > 1 else ""
    hint = None
    if first["type"] == "extra_forbidden":
        hint = "remove or rename the field; valid fields are documented in the README"
        names = _fields_at(cls, tuple(first["loc"])) if cls is not None and first["loc"] else []
        key = str(first["loc"][-1])
        close = difflib.get_close_matches(key, names, n=3, cutoff=0.6) if names else []
        # only the near-best: `micro_bach` is `micro_batch` (0.95), not also `rope_cache` (0.60)
        ratio = [difflib.SequenceMatcher(None, key, c).ratio() for c in close]
        close = [c for c, r in zip(close, ratio) if r >= max(ratio) - 0.15]
        # a key that differs only in case is that field (`gemm_bf16_tflops` is `gemm_bf16_TFLOPS`, not also `gemm_bf16_K`)
        same = [c for c in names if c.lower() == key.lower()]
        close = same or close
        if close:
            hint = f"did you mean {' or '.join('`' + c + '`' for c in close)}?"
        elif names:
            hint = f"remove or rename the field; valid fields: {', '.join(names)}"
    elif first["type"] == "missing":
        hint = f"add the field `{loc}`"
    elif "literal" in first["type"]:
        hint = msg
    elif first["type"] == "less_than_equal" and first.get("ctx", {}).get("le") == MAX_COUNT:
        hint = f"counts are whole numbers up to {MAX_COUNT:,} (2**31 - 1)"
    elif first["type"] == "finite_number":
        hint = "give a finite number (not .inf, .nan or a value beyond 1.8e308)"
    elif first["type"] in ("float_parsing", "int_parsing") and isinstance(first.get("input"), str):
        # `tokens: 15T` in a file: the suffixes are the command line's (units.parse_count); say what to write (audit5)
        from .units import parse_count

        try:
            hint = (f"write the field `{loc}` as a number: {parse_count(first['input']):.6g} (the k, M, G, T suffixes "
                    "are the command line's)")
        except PlannerError:
            pass
    if not first["loc"] and first["type"] == "value_error":
        # a rule across fields (a model validator): no one field to name, so not "field `(top level)`" (before the
        # 2026-12-07 audit5: "field `(top level)`: Value error, num_attention_heads (32) must be a multiple of ...")
        text = msg.removeprefix("Value error, ")
        return PlannerError(f"{path}: {text}{more}",
                            hint or "fix the fields it names (the README and `planner schema` give each field's type)")
    if hint is None:  # a wrong type or value: name what to fix
        hint = f"fix the field `{loc}` (the README and `planner schema` give each field's type)"
    return PlannerError(f"{path}: field `{loc}`: {msg}{more}", hint)


def read_yaml(path: Path) -> Any:
    """Read and parse a YAML file (planner/files.py: regular files only, size cap, every
    parser error a PlannerError naming the file)."""
    return files.read_yaml(path)


def validate(cls: type[T], data: Any, path: str) -> T:
    if not isinstance(data, dict):
        raise PlannerError(f"{path}: expected a mapping of fields, got {type(data).__name__}", f"see the {cls.__name__} fields in the README")
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(e, path, cls) from None


PATH_SUFFIXES = (".yaml", ".yml", ".json")


def looks_like_path(text: str) -> bool:
    """A value that names a file rather than a catalog entry: it has a directory part or a
    file suffix (catalog names have neither: `llama3-70b`, `h100-sxm`); a torchtitan flavor's model name
    (`torchtitan:qwen3/30B-A3B`, planner/torchtitan_registry.py) is a name, its `/` notwithstanding."""
    from .flavor_names import is_flavor_name

    t = str(text)
    if is_flavor_name(t):
        return False
    return "/" in t or "\\" in t or t.startswith("~") or t.lower().endswith(PATH_SUFFIXES)


def _source(name_or_path: str, d: Path, kind: str, cmd: str) -> Path:
    """The file a name or path names: an existing file, else the catalog entry `name`; a
    value that looks like a path but does not exist is a missing file, not an unknown name
    (held within files.held_lookups)."""
    return files.held(("source", name_or_path, d, kind, cmd), lambda: _find_source(name_or_path, d, kind, cmd))


def _find_source(name_or_path: str, d: Path, kind: str, cmd: str) -> Path:
    p = Path(name_or_path).expanduser()
    if files.is_file(p):
        return p.resolve()
    f = d / f"{name_or_path}.yaml"
    if not looks_like_path(name_or_path) and files.is_file(f):
        return f
    if looks_like_path(name_or_path):
        why = "is a folder" if files.is_dir(p) else "does not exist"
        raise PlannerError(f"{kind} file {name_or_path}: {why}" + (f" (resolved to {p.resolve()})" if not p.is_absolute() else ""),
                           f"check the path, or give a catalog name (`planner {cmd}` lists them)")
    raise _did_you_mean(name_or_path, _names(d), kind, cmd)


def _did_you_mean(name: str, choices: list[str], kind: str, cmd: str) -> PlannerError:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"`planner {cmd}` lists them"
    if close:
        hint += f" (`planner {cmd}` lists all)"
    return PlannerError(f"unknown {kind} {name!r}", hint + "; a path to a file also works")


# ----------------------------------------------------------------------------- models
@lru_cache(maxsize=256)
def _load_model_file(path: str) -> ModelSpec:
    return validate(ModelSpec, read_yaml(Path(path)), path)


# The Hugging Face reader lives in planner/hf_config.py (what it reads, the class defaults, the
# keys it accepts without reading); these names are its public face here. It is imported when
# first needed: a run on catalog models never reads a config.json (start-up, issue 24).
_HF_NAMES = ("HF_DEFAULTS", "HF_ABSENT", "HF_NO_COST")


def __getattr__(name: str):
    if name in _HF_NAMES:
        from . import hf_config

        return getattr(hf_config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def hf_assumptions(cfg: dict, path: str = "config.json") -> list[str]:
    """The settings a config.json leaves to transformers' class defaults or planner's rules, and
    what it leaves out (a vision tower), one line each (`planner explain` prints them)."""
    if not isinstance(cfg, dict):
        return []
    from . import hf_config

    return hf_config.read(cfg, path)[1]


def model_from_hf_config(cfg: dict, path: str) -> ModelSpec:
    """Map a Hugging Face transformers config.json onto ModelSpec (planner/hf_config.py)."""
    from . import hf_config

    data, _ = hf_config.read(cfg, path)
    return validate(ModelSpec, data, path)


def model_source(name_or_path: str) -> Path:
    """The file `load_model` reads for a catalog name, a model YAML, a config.json or a
    folder holding one (absolute); a torchtitan flavor's name (`torchtitan:qwen3/30B-A3B`,
    planner/torchtitan_registry.py MODEL_PREFIX) its generated model YAML (held within files.held_lookups)."""
    return files.held(("model_source", name_or_path), lambda: _model_source(name_or_path))


def _model_source(name_or_path: str) -> Path:
    from .flavor_names import is_flavor_name

    if is_flavor_name(name_or_path):
        from . import torchtitan_registry as ttf

        return Path(ttf.flavor_model_file(ttf.flavor_named(name_or_path)))
    p = Path(name_or_path).expanduser()
    if files.is_dir(p):
        if not files.is_file(p / "config.json"):
            raise PlannerError(f"{p}: folder has no config.json", "point --model at a Hugging Face config.json or a model YAML")
        return (p / "config.json").resolve()
    return _source(name_or_path, model_dir(), "model", "models")


def _moe_from_hf(cfg: dict, path: str) -> dict | None:
    """The `moe:` block of a Hugging Face MoE config (hf_config.Reader._moe): Mixtral
    (num_local_experts), Qwen2/3-MoE (num_experts, moe_intermediate_size,
    shared_expert_intermediate_size), DeepSeek-V2/V3 and Kimi K2 (n_routed_experts,
    n_shared_experts, first_k_dense_replace, moe_layer_freq, scoring_func, topk_method), gpt-oss,
    Jamba, Llama 4, with num_experts_per_tok as top-k."""
    from . import hf_config

    return hf_config.Reader(cfg, path)._moe()


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog name (`llama3-70b`), a model YAML, a config.json, or a folder holding one."""
    p = model_source(name_or_path)
    if p.suffix == ".json":
        return _load_hf_file(str(p))
    return _load_model_file(str(p))


def hf_assumed(name_or_path: str) -> list[str]:
    """What a Hugging Face config left out and the mapping inferred (empty for a model YAML)."""
    p = model_source(name_or_path)
    if p.suffix != ".json":
        return []
    return hf_assumptions(_read_json(p))


def _read_json(p: Path):
    return files.read_json(p, "give a Hugging Face config.json")


@lru_cache(maxsize=64)
def _load_hf_file(path: str) -> ModelSpec:
    return model_from_hf_config(_read_json(Path(path)), path)


# --------------------------------------------------------------------------- hardware
@lru_cache(maxsize=64)
def _load_hw_file(path: str) -> Hardware:
    return validate(Hardware, read_yaml(Path(path)), path)


def hardware_source(name_or_path: str) -> Path:
    return _source(name_or_path, hardware_dir(), "hardware", "hardware")


def load_hardware(name_or_path: str) -> Hardware:
    return _load_hw_file(str(hardware_source(name_or_path)))


# ----------------------------------------------------------------------------- stacks
@lru_cache(maxsize=32)
def _load_stack_file(path: str) -> Stack:
    data = stack_data(Path(path))
    stack = validate(Stack, data, path)
    if Path(path).resolve().parent != stack_dir().resolve():  # a user's file: messages name it (Stack.origin)
        raw = read_yaml(Path(path))
        stack._file = path
        stack._extends = raw.get("extends") if isinstance(raw, dict) else None
    return stack


def stack_data(path: Path, chain: tuple[str, ...] = ()) -> Any:
    """A stack YAML's fields with its `extends:` resolved (_extend): a stack that is another plus what its own code
    adds (megatron-bridge: megatron's Megatron-Core plus Megatron-Bridge's Llama 4 attention) names the catalog
    entry it extends and states only what differs, so that the base's figures, each cited once, are not copied.
    What names the stack itself is never inherited: `name` and `version` are required (the base's would report
    this stack as the base, or as the base's release), and the base's `description` is dropped."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        return data
    if "extends" not in data:
        _no_appends(data, str(path), "this file has no `extends:` (no base stack to append to)",
                    "write `{name}:` with the whole list, or add `extends: <catalog stack>`")
        return data
    base_name = data["extends"]
    if not isinstance(base_name, str) or looks_like_path(base_name) or base_name not in list_stacks():
        raise PlannerError(f"{path}: extends {base_name!r} is not a catalog stack",
                           f"name one of {', '.join(list_stacks())} (`planner stacks`), or write the whole stack file")
    if base_name in chain:
        raise PlannerError(f"{path}: extends {base_name!r} extends itself ({' -> '.join((*chain, base_name))})",
                           "break the cycle: a stack extends a stack that extends no stack of the chain")
    if "name" not in data:  # inherited, the stack would be reported, and a profile's run knobs found, as the base
        raise PlannerError(f"{path}: extends {base_name!r} but gives no `name`: its own figures would be reported as "
                           f"stack {base_name}'s (and a calibration profile's run knobs for {base_name} applied to them)",
                           "add `name: <this stack's name>`")
    if "version" not in data:  # inherited, export's messages would quote the base's release as this stack's
        raise PlannerError(f"{path}: extends {base_name!r} but gives no `version`: the base's would be reported as "
                           f"the release or commit this stack's code is (export quotes it)",
                           "add `version: <the release or commit of the code your stack describes>`")
    base = stack_data(stack_dir() / f"{base_name}.yaml", (*chain, base_name))
    if not isinstance(base, dict):
        raise PlannerError(f"{path}: extends {base_name!r}, whose file is not a mapping of fields",
                           "fix the base stack file")
    # the base's description is prose about the base: not inherited (a file that gives none has none, as a whole file)
    base = {k: v for k, v in base.items() if k != "description"}
    return _extend(base, {k: v for k, v in data.items() if k != "extends"}, str(path))


def _extend(base: dict, over: dict, where: str) -> dict:
    """`base` with `over` laid on it: a mapping merges key by key (recursively); a key written `name+` whose value
    is a list appends it to the base's list `name` (runs.layer_kinds+: the kinds the extension's code adds); any
    other value replaces the base's. A `name+` whose base is not a list, or given beside `name`, is an error."""
    out = dict(base)
    for k, v in over.items():
        key = str(k)
        if key.endswith("+"):
            name = key[:-1]
            if name in over:
                raise PlannerError(f"{where}: `{name}` and `{key}` are both given",
                                   f"give `{name}` (replaces the base's) or `{key}` (appends to it)")
            if not isinstance(out.get(name), list) or not isinstance(v, list):
                raise PlannerError(f"{where}: `{key}` appends a list to the base stack's list `{name}`, but "
                                   f"{'the base has no list ' + repr(name) if not isinstance(out.get(name), list) else 'its value is not a list'}",
                                   f"write `{name}:` to set it, or give a list")
            _no_appends(v, f"{where}: {key}", "the items a list appends are taken as written",
                        "write `{name}:` with the whole list")
            out[name] = [*out[name], *v]
        elif isinstance(v, dict) and isinstance(out.get(key), dict):
            out[key] = _extend(out[key], v, f"{where}: {key}")
        else:
            why = (f"the base stack has no `{key}` (null or absent) to merge it into" if out.get(key) is None else
                   f"`{key}` replaces the base stack's whole (only a mapping merges, into the base's mapping)")
            _no_appends(v, f"{where}: {key}", why, "write `{name}:` with the whole list")
            out[key] = v
    return out


def _no_appends(value: Any, where: str, why: str, hint: str) -> None:
    """A PlannerError for the first `name+` key inside `value` (mappings and lists walked without recursion, so a
    deeply nested file cannot exhaust the stack): an append means something only at a mapping _extend merges into
    the base's, never in a file without `extends:` or inside a value that replaces the base's."""
    todo = [((), value)]
    while todo:
        at, v = todo.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            if isinstance(k, str) and k.endswith("+"):
                inner = ".".join(map(str, (*at, k)))
                raise PlannerError(f"{where}: `{inner}` appends to a base stack's list `{k[:-1]}`, but {why}",
                                   hint.format(name=k[:-1]))
            todo.append(((*at, k), x))


def stack_source(name_or_path: str) -> Path:
    return _source(name_or_path, stack_dir(), "stack", "stacks")


def load_stack(name_or_path: str) -> Stack:
    """A catalog name (`torchtitan`) or a stack YAML."""
    return _load_stack_file(str(stack_source(name_or_path)))


# the stack whose figures stand in for what a stack file leaves out (stacks.default_stack)
DEFAULT_STACK = "megatron"


# ----------------------------------------------------------------------------- job files
JOB_PATH_FIELDS = ("model", "hardware", "stack", "calibration")


def _key_spelling(key: str) -> str:
    """The form job_file_data compares a job key in: dashes as underscores, lower case."""
    return key.replace("-", "_").lower()


def key_pattern(name: str) -> str | None:
    """The spellings of job field `name` that job_file_data reads as it, as a JSON Schema
    (ECMA-262) pattern for `planner schema`: its words joined by `-` (the CLI option's
    spelling, `micro-batch`) or `_`, each word as written or in lower case
    (`^reserve[-_](GiB|gib)$`); None for a name with no other spelling (`tp`). Any other case
    reads too (`MICRO-BATCH`: keys are compared in lower case, _key_spelling); the pattern
    leaves it out to stay readable. Names are letters, digits and `_`: nothing to escape."""
    words = name.split("_")
    if len(words) == 1 and name == name.lower():
        return None
    return "^" + "[-_]".join(w if w == w.lower() else f"({w}|{w.lower()})" for w in words) + "$"


def job_file_data(raw: dict, path: Path | None, fields) -> dict:
    """The fields of a job mapping as the Job model names them.

    - a key may be written with dashes, as the CLI option is (`micro-batch:`), or in another
      case (`reserve_gib:` for reserve_GiB); a key given two ways is an error;
    - in a job file (path given) a relative path in model, hardware, stack or calibration is
      relative to the job file's folder, not to the working directory (a value with a folder
      part or a .yaml/.yml/.json suffix is a path; catalog names have neither), so that
      `planner check jobs/*.yaml` works from anywhere.
    Unknown keys are left for the Job model to reject (with a did-you-mean)."""
    by_lower = {_key_spelling(f): f for f in fields}
    out: dict = {}
    given: dict = {}
    where = f"{path}: " if path is not None else ""
    for k, v in raw.items():
        key = str(k)
        name = by_lower.get(_key_spelling(key), key)
        if name in out:
            raise PlannerError(f"{where}field `{name}` is given twice (as `{given[name]}` and as `{key}`)",
                               f"keep one of them; dashes and underscores name the same field")
        out[name], given[name] = v, key
    if path is not None:
        base = Path(path).resolve().parent
        for f in JOB_PATH_FIELDS:
            v = out.get(f)
            if isinstance(v, str) and looks_like_path(v):
                p = Path(v).expanduser()
                if not p.is_absolute():
                    out[f] = str(base / p)
    return out

