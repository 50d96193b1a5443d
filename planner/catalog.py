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


def format_validation_error(e: ValidationError, path: str) -> PlannerError:
    first = e.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
    msg = first["msg"]
    more = f" (and {e.error_count() - 1} more problem(s))" if e.error_count() > 1 else ""
    hint = None
    if first["type"] == "extra_forbidden":
        hint = "remove or rename the field; valid fields are documented in the README"
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
        raise format_validation_error(e, path) from None


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
    gated_types = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "olmo", "olmo2", "granite", "phi3", "cohere"}
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


def model_from_hf_config(cfg: dict, path: str) -> ModelSpec:
    """Map a Hugging Face transformers config.json onto ModelSpec."""
    if not isinstance(cfg, dict):
        raise PlannerError(f"{path}: expected a JSON object")
    _check_hf_types(cfg, path)
    for key in ("num_local_experts", "n_routed_experts", "num_experts"):
        if cfg.get(key):
            raise PlannerError(f"{path}: field `{key}`: mixture-of-experts models are not supported yet", "use a dense model")
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
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_seq_len=cfg.get("max_position_embeddings") or 4096,
        position_embedding="rope" if ("rope_theta" in cfg or "rope_scaling" in cfg) else "learned",
        linear_bias=bool(cfg.get("attention_bias", False) or cfg.get("mlp_bias", False)),
        dropout=float(cfg.get("attention_dropout", 0.0) or 0.0) > 0,
        sources=[f"Hugging Face config.json: {path}"],
    )
    return validate(ModelSpec, data, path)


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog name (`llama3-70b`), a model YAML, a config.json, or a folder holding one."""
    p = Path(name_or_path).expanduser()
    if files.is_dir(p):
        if not files.is_file(p / "config.json"):
            raise PlannerError(f"{p}: folder has no config.json", "point --model at a Hugging Face config.json or a model YAML")
        p = p / "config.json"
    if files.is_file(p):
        if p.suffix == ".json":
            cfg = files.read_json(p, "give a Hugging Face config.json")
            return model_from_hf_config(cfg, str(p))
        return _load_model_file(str(p.resolve()))
    d = model_dir()
    f = d / f"{name_or_path}.yaml"
    if files.is_file(f):
        return _load_model_file(str(f))
    raise _did_you_mean(name_or_path, list_models(), "model", "models")


# --------------------------------------------------------------------------- hardware
@lru_cache(maxsize=64)
def _load_hw_file(path: str) -> Hardware:
    return validate(Hardware, read_yaml(Path(path)), path)


def load_hardware(name_or_path: str) -> Hardware:
    p = Path(name_or_path).expanduser()
    if files.is_file(p):
        return _load_hw_file(str(p.resolve()))
    f = hardware_dir() / f"{name_or_path}.yaml"
    if files.is_file(f):
        return _load_hw_file(str(f))
    raise _did_you_mean(name_or_path, list_hardware(), "hardware", "hardware")


# ----------------------------------------------------------------------------- stacks
@lru_cache(maxsize=32)
def _load_stack_file(path: str) -> Stack:
    return validate(Stack, read_yaml(Path(path)), path)


def load_stack(name_or_path: str) -> Stack:
    """A catalog name (`torchtitan`) or a stack YAML."""
    p = Path(name_or_path).expanduser()
    if files.is_file(p):
        return _load_stack_file(str(p.resolve()))
    f = stack_dir() / f"{name_or_path}.yaml"
    if files.is_file(f):
        return _load_stack_file(str(f))
    raise _did_you_mean(name_or_path, list_stacks(), "stack", "stacks")
