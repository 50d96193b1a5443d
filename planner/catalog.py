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


def _catalog_dir(kind: str) -> Path:
    """Installed wheels carry the catalogs in planner/_data/; a source checkout has them at
    the repository root."""
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
        close = difflib.get_close_matches(str(first["loc"][-1]), names, n=3, cutoff=0.6) if names else []
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
    file suffix (catalog names have neither: `llama3-70b`, `h100-sxm`)."""
    t = str(text)
    return "/" in t or "\\" in t or t.startswith("~") or t.lower().endswith(PATH_SUFFIXES)


def _source(name_or_path: str, d: Path, kind: str, cmd: str) -> Path:
    """The file a name or path names: an existing file, else the catalog entry `name`; a
    value that looks like a path but does not exist is a missing file, not an unknown name."""
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


def _gated_from_hf(cfg: dict) -> bool:
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or "").lower()
    # Llama, Mistral, Qwen, Gemma use SwiGLU/GeGLU: hidden_act silu/swish/gelu_pytorch_tanh
    # with gate_proj + up_proj (transformers' LlamaMLP). GPT-2/NeoX/OPT use a plain MLP.
    gated_types = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gemma", "gemma2", "olmo", "olmo2", "granite", "phi3", "cohere"}
    if cfg.get("model_type") in gated_types:
        return True
    return act in {"silu", "swish", "swiglu"}


# The types transformers' PretrainedConfig gives the keys read here (the shape fields are
# ints and ModelSpec checks them); null is allowed where transformers allows it.
_HF_TYPES: dict[str, tuple[type, ...]] = {
    "model_type": (str,), "hidden_act": (str,), "activation_function": (str,), "_name_or_path": (str,),
    "attention_dropout": (int, float), "tie_word_embeddings": (bool,), "attention_bias": (bool,), "mlp_bias": (bool,),
}


def _check_hf_types(cfg: dict, path: str) -> None:
    for key, types in _HF_TYPES.items():
        v = cfg.get(key)
        if v is not None and (not isinstance(v, types) or (bool not in types and isinstance(v, bool))):
            want = " or ".join(dict.fromkeys({str: "a string", int: "a number", float: "a number", bool: "true or false"}[t]
                                             for t in types))
            raise PlannerError(f"{path}: field `{key}`: expected {want}, got {type(v).__name__} {str(v)[:40]}",
                               "give the config.json transformers saved for the model")


# What a config.json may leave out, and what planner then takes. tie_word_embeddings: the
# transformers PretrainedConfig default (True; transformers v4.46 configuration_utils.py,
# `tie_word_embeddings: bool = True`), so Gemma-2-9B, whose config omits it, is tied (9.24B).
HF_DEFAULTS = {"tie_word_embeddings": True}
HF_ABSENT = {  # key -> what its absence means here
    "tie_word_embeddings": "tied input/output embeddings (transformers' PretrainedConfig default: True)",
    "num_key_value_heads": "num_key_value_heads = num_attention_heads (multi-head attention)",
    "head_dim": "head_dim = hidden_size / num_attention_heads",
    "max_position_embeddings": "max_seq_len 4096",
    "rms_norm_eps": "LayerNorm (no rms_norm_eps)",
    "rope_theta": "learned position embeddings (no rope_theta / rope_scaling)",
    "attention_bias": "no linear biases (no attention_bias / mlp_bias)",
    "attention_dropout": "no dropout (no attention_dropout)",
    "hidden_act": "activation from model_type (no hidden_act)",
}


def hf_assumptions(cfg: dict) -> list[str]:
    """The settings a config.json leaves to planner's rules (model_from_hf_config), one line each."""
    if not isinstance(cfg, dict):
        return []
    out = []
    for key, text in HF_ABSENT.items():
        alt = {"rope_theta": ("rope_scaling",), "attention_bias": ("mlp_bias",), "hidden_act": ("activation_function",)}.get(key, ())
        if key not in cfg and not any(a in cfg for a in alt):
            out.append(f"{key} absent: {text}")
    return out


def model_from_hf_config(cfg: dict, path: str) -> ModelSpec:
    """Map a Hugging Face transformers config.json onto ModelSpec."""
    if not isinstance(cfg, dict):
        raise PlannerError(f"{path}: expected a JSON object")
    _check_hf_types(cfg, path)
    required = ["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"]
    missing = [k for k in required if k not in cfg]
    if missing:
        raise PlannerError(
            f"{path}: missing field(s) {', '.join(missing)}",
            "a Hugging Face config.json needs num_hidden_layers, hidden_size, intermediate_size, "
            "num_attention_heads, num_key_value_heads, vocab_size, hidden_act, tie_word_embeddings",
        )
    name = cfg.get("_name_or_path") or Path(path).parent.name or Path(path).stem
    data = dict(
        name=str(name),
        description=f"from Hugging Face config {path}",
        num_layers=cfg["num_hidden_layers"],
        hidden_size=cfg["hidden_size"],
        ffn_hidden_size=cfg["intermediate_size"],
        num_attention_heads=cfg["num_attention_heads"],
        num_kv_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        head_dim=cfg.get("head_dim"),
        vocab_size=cfg["vocab_size"],
        gated_mlp=_gated_from_hf(cfg),
        norm="rmsnorm" if "rms_norm_eps" in cfg else "layernorm",
        # transformers' PretrainedConfig default is tie_word_embeddings=True (configuration_utils.py)
        tied_embeddings=bool(cfg.get("tie_word_embeddings", HF_DEFAULTS["tie_word_embeddings"])),
        max_seq_len=cfg.get("max_position_embeddings") or 4096,
        position_embedding="rope" if ("rope_theta" in cfg or "rope_scaling" in cfg) else "learned",
        linear_bias=bool(cfg.get("attention_bias", False) or cfg.get("mlp_bias", False)),
        dropout=float(cfg.get("attention_dropout", 0.0) or 0.0) > 0,
        sources=[f"Hugging Face config.json: {path}"],
    )
    moe = _moe_from_hf(cfg, path)
    if moe is not None:
        data["moe"] = moe
    if cfg.get("kv_lora_rank"):
        data["mla"] = {k: cfg.get(k) for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
        data["num_kv_heads"] = None  # MLA: one up-projected key/value head per query head
        data["head_dim"] = None
    return validate(ModelSpec, data, path)


def model_source(name_or_path: str) -> Path:
    """The file `load_model` reads for a catalog name, a model YAML, a config.json or a
    folder holding one (absolute)."""
    p = Path(name_or_path).expanduser()
    if files.is_dir(p):
        if not files.is_file(p / "config.json"):
            raise PlannerError(f"{p}: folder has no config.json", "point --model at a Hugging Face config.json or a model YAML")
        return (p / "config.json").resolve()
    return _source(name_or_path, model_dir(), "model", "models")


def _moe_from_hf(cfg: dict, path: str) -> dict | None:
    """The `moe:` block of a Hugging Face MoE config: Mixtral (num_local_experts), Qwen2/3-MoE
    (num_experts, moe_intermediate_size, shared_expert_intermediate_size, decoder_sparse_step,
    mlp_only_layers), DeepSeek-V2/V3 (n_routed_experts, n_shared_experts, first_k_dense_replace,
    moe_layer_freq, scoring_func, topk_method), with num_experts_per_tok as top-k."""
    key = next((k for k in ("num_local_experts", "n_routed_experts", "num_experts") if cfg.get(k)), None)
    if key is None:
        return None
    if not cfg.get("num_experts_per_tok"):
        raise PlannerError(f"{path}: field `{key}` is set but `num_experts_per_tok` is missing",
                           "add num_experts_per_tok (the experts each token is routed to)")
    step = cfg.get("decoder_sparse_step", 1) or 1
    if step != 1:
        raise PlannerError(f"{path}: field `decoder_sparse_step`: {step} (every {step}th layer MoE, counted from 1) is not modelled",
                           "only decoder_sparse_step 1 (every layer MoE) is supported; or write a model YAML with moe.layer_freq")
    if cfg.get("mlp_only_layers"):
        raise PlannerError(f"{path}: field `mlp_only_layers`: dense layers at arbitrary positions are not modelled",
                           "write a model YAML with moe.first_k_dense / moe.layer_freq")
    moe: dict = dict(num_experts=cfg[key], top_k=cfg["num_experts_per_tok"])
    if cfg.get("moe_intermediate_size"):
        moe["expert_ffn_hidden_size"] = cfg["moe_intermediate_size"]
    if cfg.get("n_shared_experts"):  # DeepSeek: shared experts of the routed experts' width
        moe["num_shared_experts"] = cfg["n_shared_experts"]
    elif cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one gated shared expert of its own width
        moe.update(num_shared_experts=1, shared_expert_ffn_hidden_size=cfg["shared_expert_intermediate_size"],
                   shared_expert_gate=True)
    if cfg.get("first_k_dense_replace"):
        moe["first_k_dense"] = cfg["first_k_dense_replace"]
    if cfg.get("moe_layer_freq"):
        moe["layer_freq"] = cfg["moe_layer_freq"]
    moe["router"] = "sigmoid" if cfg.get("scoring_func") == "sigmoid" else "softmax"
    moe["router_bias"] = cfg.get("topk_method") == "noaux_tc"  # DeepSeek-V3's e_score_correction_bias
    return moe


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
    return validate(Stack, read_yaml(Path(path)), path)


def stack_source(name_or_path: str) -> Path:
    return _source(name_or_path, stack_dir(), "stack", "stacks")


def load_stack(name_or_path: str) -> Stack:
    """A catalog name (`torchtitan`) or a stack YAML."""
    return _load_stack_file(str(stack_source(name_or_path)))


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

