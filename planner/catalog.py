"""Find and load catalog entries and user files: model_zoo/, hardware_db/, Hugging Face
config.json files, and user YAML paths. Every error names the file and the field.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import PlannerError
from .schema import Hardware, ModelSpec, Stack

_PKG = Path(__file__).resolve().parent
T = TypeVar("T", bound=BaseModel)


def _catalog_dir(kind: str) -> Path:
    """Installed wheels carry the catalogs in planner/_data/; a source checkout has them at
    the repository root."""
    for d in (_PKG / "_data" / kind, _PKG.parent / kind):
        if d.is_dir():
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
    return PlannerError(f"{path}: field `{loc}`: {msg}{more}", hint)


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PlannerError(f"{path}: not a text file", "give a YAML file") from None
    except OSError as e:
        raise PlannerError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise PlannerError(f"{path}:{where}: invalid YAML: {problem}", "check indentation and `key: value` syntax") from None


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
    gated_types = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gemma", "gemma2", "olmo", "olmo2", "granite", "phi3", "cohere"}
    if cfg.get("model_type") in gated_types:
        return True
    return act in {"silu", "swish", "swiglu"}


def model_from_hf_config(cfg: dict, path: str) -> ModelSpec:
    """Map a Hugging Face transformers config.json onto ModelSpec."""
    if not isinstance(cfg, dict):
        raise PlannerError(f"{path}: expected a JSON object")
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
    moe = _moe_from_hf(cfg, path)
    if moe is not None:
        data["moe"] = moe
    if cfg.get("kv_lora_rank"):
        data["mla"] = {k: cfg.get(k) for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
        data["num_kv_heads"] = None  # MLA: one up-projected key/value head per query head
        data["head_dim"] = None
    return validate(ModelSpec, data, path)


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
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise PlannerError(f"{p}: folder has no config.json", "point --model at a Hugging Face config.json or a model YAML")
        p = p / "config.json"
    if p.is_file():
        if p.suffix == ".json":
            try:
                cfg = json.loads(p.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise PlannerError(f"{p}: invalid JSON: {e}", "give a Hugging Face config.json") from None
            return model_from_hf_config(cfg, str(p))
        return _load_model_file(str(p.resolve()))
    d = model_dir()
    f = d / f"{name_or_path}.yaml"
    if f.is_file():
        return _load_model_file(str(f))
    raise _did_you_mean(name_or_path, list_models(), "model", "models")


# --------------------------------------------------------------------------- hardware
@lru_cache(maxsize=64)
def _load_hw_file(path: str) -> Hardware:
    return validate(Hardware, read_yaml(Path(path)), path)


def load_hardware(name_or_path: str) -> Hardware:
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return _load_hw_file(str(p.resolve()))
    f = hardware_dir() / f"{name_or_path}.yaml"
    if f.is_file():
        return _load_hw_file(str(f))
    raise _did_you_mean(name_or_path, list_hardware(), "hardware", "hardware")


# ----------------------------------------------------------------------------- stacks
@lru_cache(maxsize=32)
def _load_stack_file(path: str) -> Stack:
    return validate(Stack, read_yaml(Path(path)), path)


def load_stack(name_or_path: str) -> Stack:
    """A catalog name (`torchtitan`) or a stack YAML."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return _load_stack_file(str(p.resolve()))
    f = stack_dir() / f"{name_or_path}.yaml"
    if f.is_file():
        return _load_stack_file(str(f))
    raise _did_you_mean(name_or_path, list_stacks(), "stack", "stacks")
