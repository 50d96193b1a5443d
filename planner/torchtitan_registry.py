"""torchtitan's model-flavor registries at the stack's commit, and each flavor as a model the user names (issue 22).

The table (FLAVOR_ARGS) copies pytorch/torchtitan @e347b1e5e's registries argument for argument, and the builders
turn each flavor into a planner model's fields by its code's rules; the rules, the comparisons with the catalog and
the references [1]-[6] the builders cite are planner/trainers/torchtitan_flavors.py's (its docstring), which
re-exports everything here. This module stands below the catalog (planner/catalog.py resolves a --model
`torchtitan:<code>/<flavor>` through it), so it imports nothing of planner/trainers/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .errors import PlannerError
from .model_cache import write_model_file

COMMIT = "@e347b1e5e"


@dataclass(frozen=True)
class Moe:
    """torchtitan's MoEArgs [6], defaults as there."""

    num_experts: int = 8
    num_shared_experts: int = 1
    score_func: str = "sigmoid"
    route_norm: bool = False
    gate_bias: bool = False
    top_k: int = 1
    num_expert_groups: Optional[int] = None
    num_limited_groups: Optional[int] = None
    load_balance_coeff: Optional[float] = 1e-3


@dataclass(frozen=True)
class Flavor:
    """One registry entry: its code (the package), its key, its keyword arguments as the source writes them
    (the rest the dataclass defaults), and where it is."""

    code: str
    flavor: str
    args: dict = field(hash=False)
    lines: str = ""

    @property
    def attn_type(self) -> str:
        return self.args.get("attn_type", "flex" if self.code == "gpt_oss" else "sdpa")

    @property
    def attn_mask_type(self) -> str:
        return self.args.get("attn_mask_type", "causal")


def _f(code, flavor, lines, **args) -> Flavor:
    return Flavor(code, flavor, args, lines)


_QWEN3_MOE = dict(num_shared_experts=0, score_func="softmax", route_norm=True)  # route_scale / score_before: not priced
_V3_SMALL = dict(q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
_V3_BIG = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
_FLEX = dict(attn_type="flex", attn_mask_type="block_causal")
_GPT_OSS_MOE = dict(num_shared_experts=0, score_func="softmax", route_norm=True, gate_bias=True, top_k=4,
                    load_balance_coeff=1e-3)
_L4 = dict(dim=5120, n_layers=48, n_heads=40, n_kv_heads=8, ffn_dim_multiplier=1.2, multiple_of=2048, rope_theta=500000)

# the registries at @e347b1e5e, flavor by flavor ([1]-[5]; `lines`: the flavor's lines in the package __init__.py)
FLAVOR_ARGS: tuple[Flavor, ...] = (
    _f("llama3", "debugmodel", "l. 30-32", dim=256, n_layers=6, n_heads=16, vocab_size=2048, rope_theta=500000),
    _f("llama3", "debugmodel_flex_attn", "l. 33-41", dim=256, n_layers=6, n_heads=16, vocab_size=2048,
       rope_theta=500000, **_FLEX),
    _f("llama3", "debugmodel_varlen_attn", "l. 42-50", dim=256, n_layers=6, n_heads=16, vocab_size=2048,
       rope_theta=500000, attn_type="varlen", attn_mask_type="block_causal"),
    _f("llama3", "8B", "l. 51-59", dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3,
       multiple_of=1024, rope_theta=500000),
    _f("llama3", "8B_flex", "l. 60-70", dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3,
       multiple_of=1024, rope_theta=500000, **_FLEX),
    _f("llama3", "8B_varlen", "l. 71-81", dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3,
       multiple_of=1024, rope_theta=500000, attn_type="varlen", attn_mask_type="block_causal"),
    _f("llama3", "70B", "l. 82-90", dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim_multiplier=1.3,
       multiple_of=4096, rope_theta=500000),
    _f("llama3", "405B", "l. 91-99", dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, ffn_dim_multiplier=1.2,
       multiple_of=4096, rope_theta=500000),
    _f("llama4", "debugmodel", "l. 30-37", dim=256, n_layers=6, n_heads=16, vocab_size=2048, rope_theta=500000,
       rope_scaling_args=True),
    _f("llama4", "17bx16e", "l. 38-50", **_L4, rope_scaling_args=True, max_seq_len=10485760,
       moe_args=Moe(num_experts=16), interleave_moe_layer_step=1),
    _f("llama4", "17bx128e", "l. 51-60", **_L4, moe_args=Moe(num_experts=128)),
    _f("llama4", "debugmodel_irope", "l. 61-72", dim=256, n_layers=6, n_heads=16, vocab_size=2048, rope_theta=500000,
       rope_scaling_args=True, every_n_layers_nope=4, fixed_attn_block_size=256, **_FLEX),
    _f("llama4", "17bx16e_irope", "l. 73-88", **_L4, rope_scaling_args=True, max_seq_len=10485760,
       moe_args=Moe(num_experts=16), interleave_moe_layer_step=1, every_n_layers_nope=4, **_FLEX),
    _f("llama4", "17bx128e_irope", "l. 89-101", **_L4, moe_args=Moe(num_experts=128), every_n_layers_nope=4, **_FLEX),
    _f("qwen3", "debugmodel", "l. 33-45", vocab_size=2048, max_seq_len=4096, head_dim=128, dim=256, n_layers=8,
       n_heads=16, n_kv_heads=8, qk_norm=True, hidden_dim=3072, rope_theta=1000000, enable_weight_tying=True),
    _f("qwen3", "0.6B", "l. 46-58", vocab_size=151936, max_seq_len=4096, head_dim=128, dim=1024, n_layers=28,
       n_heads=16, n_kv_heads=8, qk_norm=True, hidden_dim=3072, rope_theta=1000000, enable_weight_tying=True),
    _f("qwen3", "1.7B", "l. 59-71", vocab_size=151936, max_seq_len=4096, head_dim=128, dim=2048, n_layers=28,
       n_heads=16, n_kv_heads=8, qk_norm=True, hidden_dim=6144, rope_theta=1000000, enable_weight_tying=True),
    _f("qwen3", "4B", "l. 72-84", vocab_size=151936, max_seq_len=4096, head_dim=128, dim=2560, n_layers=36,
       n_heads=32, n_kv_heads=8, qk_norm=True, hidden_dim=9728, rope_theta=1000000, enable_weight_tying=True),
    _f("qwen3", "8B", "l. 85-96", vocab_size=151936, max_seq_len=4096, head_dim=128, dim=4096, n_layers=36,
       n_heads=32, n_kv_heads=8, qk_norm=True, hidden_dim=12288, rope_theta=1000000),
    _f("qwen3", "14B", "l. 97-108", vocab_size=151936, max_seq_len=4096, head_dim=128, dim=5120, n_layers=40,
       n_heads=40, n_kv_heads=8, qk_norm=True, hidden_dim=17408, rope_theta=1000000),
    _f("qwen3", "32B", "l. 109-120", vocab_size=151936, max_seq_len=4096, head_dim=128, dim=5120, n_layers=64,
       n_heads=64, n_kv_heads=8, qk_norm=True, hidden_dim=25600, rope_theta=1000000),
    _f("qwen3", "debugmodel_moe", "l. 122-144", vocab_size=2048, max_seq_len=4096, head_dim=128, dim=256, n_layers=8,
       n_heads=16, n_kv_heads=8, qk_norm=True, hidden_dim=3072, rope_theta=1000000, moe_enabled=True,
       moe_inter_dim=768, moe_args=Moe(num_experts=64, top_k=8, **_QWEN3_MOE)),
    _f("qwen3", "30B-A3B", "l. 145-167", vocab_size=151936, max_seq_len=262144, head_dim=128, dim=2048, n_layers=48,
       n_heads=32, n_kv_heads=4, qk_norm=True, hidden_dim=6144, rope_theta=1000000, moe_enabled=True,
       moe_inter_dim=768, moe_args=Moe(num_experts=128, top_k=8, **_QWEN3_MOE)),
    _f("qwen3", "235B-A22B", "l. 168-190", vocab_size=151936, max_seq_len=4096, head_dim=128, dim=4096, n_layers=94,
       n_heads=64, n_kv_heads=4, qk_norm=True, hidden_dim=12288, rope_theta=5000000, moe_enabled=True,
       moe_inter_dim=1536, moe_args=Moe(num_experts=128, top_k=8, **_QWEN3_MOE)),
    _f("deepseek_v3", "debugmodel", "l. 30-52", vocab_size=2048, dim=256, inter_dim=1024, moe_inter_dim=256,
       n_layers=6, n_dense_layers=1, n_heads=16, moe_args=Moe(num_experts=8, num_shared_experts=2, top_k=3,
                                                              score_func="softmax"), **_V3_SMALL, mscale=0.70),
    _f("deepseek_v3", "debugmodel_flex_attn", "l. 53-77", vocab_size=2048, dim=256, inter_dim=1024, moe_inter_dim=256,
       n_layers=6, n_dense_layers=1, n_heads=16, moe_args=Moe(num_experts=8, num_shared_experts=2, top_k=3,
                                                              score_func="softmax"), **_V3_SMALL, mscale=0.70, **_FLEX),
    _f("deepseek_v3", "16B", "l. 78-102", vocab_size=102400, dim=2048, inter_dim=10944, moe_inter_dim=1408,
       n_layers=27, n_dense_layers=1, n_heads=16, moe_args=Moe(num_experts=64, num_shared_experts=2, top_k=6,
                                                               score_func="softmax"), **_V3_SMALL, mscale=0.70, **_FLEX),
    _f("deepseek_v3", "236B", "l. 103-129", vocab_size=102400, dim=5120, inter_dim=12288, moe_inter_dim=1536,
       n_layers=60, n_dense_layers=1, n_heads=128,
       moe_args=Moe(num_experts=160, num_shared_experts=2, top_k=6, num_expert_groups=8, num_limited_groups=3,
                    score_func="softmax"), **_V3_BIG, **_FLEX),
    _f("deepseek_v3", "671B", "l. 130-156", vocab_size=129280, dim=7168, inter_dim=18432, moe_inter_dim=2048,
       n_layers=61, n_dense_layers=3, n_heads=128,
       moe_args=Moe(num_experts=256, num_shared_experts=1, top_k=8, num_expert_groups=8, num_limited_groups=4,
                    score_func="sigmoid", route_norm=True), **_V3_BIG, **_FLEX),
    _f("gpt_oss", "debugmodel", "l. 30-46", dim=256, n_layers=4,
       moe_args=Moe(num_experts=8, **_GPT_OSS_MOE), attn_mask_type="causal"),
    _f("gpt_oss", "20b", "l. 47-61", n_layers=24, moe_args=Moe(num_experts=32, **_GPT_OSS_MOE)),
    _f("gpt_oss", "120b", "l. 62-76", n_layers=36, moe_args=Moe(num_experts=128, **_GPT_OSS_MOE)),
)
FLAVORS: dict[tuple[str, str], Flavor] = {(f.code, f.flavor): f for f in FLAVOR_ARGS}
REGISTRY = {"llama3": "llama3_args", "llama4": "llama4_args", "qwen3": "qwen3_args", "deepseek_v3": "deepseekv3_args",
            "gpt_oss": "gptoss_configs"}  # each package's dict ([1]-[5])

def _round_up(x: int, m: int) -> int:
    return m * ((x + m - 1) // m)


def llama_ffn(dim4: int, multiple_of: int, mult: Optional[float]) -> int:
    """torchtitan's llama FeedForward width from hidden_dim = 4 dim [1][3]."""
    h = int(2 * dim4 / 3)
    if mult is not None:
        h = int(mult * h)
    return _round_up(h, multiple_of)


def _moe(m: Moe, width: int, **more) -> dict:
    out = dict(num_experts=m.num_experts, top_k=m.top_k, expert_ffn_hidden_size=width,
               num_shared_experts=m.num_shared_experts, router=m.score_func,
               expert_score_bias=m.load_balance_coeff is not None, router_linear_bias=m.gate_bias, **more)
    if m.num_expert_groups is not None:
        out.update(expert_groups=m.num_expert_groups, groups_per_token=m.num_limited_groups)
    if m.route_norm:  # the router divides the top-k scores by their sum (layers/moe.py [21])
        out["route_norm"] = True
    return out


# the Hugging Face model_type each code ports (ModelSpec.hf_model_type: what the start-up rules key the model code on;
# stack_db torchtitan runs.model_codes lists each code's), a qwen3 flavor with moe_enabled qwen3_moe
HF_TYPES = {"llama3": "llama", "llama4": "llama4_text", "deepseek_v3": "deepseek_v3", "gpt_oss": "gpt_oss"}


def _base(fl: Flavor, **kw) -> dict:
    hf = HF_TYPES.get(fl.code) or ("qwen3_moe" if fl.args.get("moe_enabled") else "qwen3")
    return dict(name=model_name(fl), hf_model_type=hf, gated_mlp=True, norm="rmsnorm",
                position_embedding="rope",
                sources=[f"pytorch/torchtitan {COMMIT} torchtitan/models/{fl.code}/__init__.py {REGISTRY[fl.code]} "
                         f"{fl.flavor!r} ({fl.lines})"], **kw)


def _llama3(a: dict, fl: Flavor) -> dict:
    dim = a.get("dim", 4096)
    return _base(fl, num_layers=a.get("n_layers", 32), hidden_size=dim, num_attention_heads=a.get("n_heads", 32),
                 num_kv_heads=a.get("n_kv_heads"), vocab_size=a.get("vocab_size", 128256),
                 ffn_hidden_size=llama_ffn(4 * dim, a.get("multiple_of", 256), a.get("ffn_dim_multiplier")),
                 max_seq_len=a.get("max_seq_len", 131072), rope_theta=float(a.get("rope_theta", 10000)),
                 rope_scaling="llama3", rope_scaling_params=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                                 original_max_position_embeddings=8192))


def _llama4(a: dict, fl: Flavor) -> dict:
    dim, mo, mult = a.get("dim", 4096), a.get("multiple_of", 256), a.get("ffn_dim_multiplier")
    m: Moe = a.get("moe_args", Moe())
    h = int(2 * (4 * dim) / 3)
    h = int(mult * h) if mult is not None else h
    width = int(h / (m.top_k + m.num_shared_experts))  # auto_scale_hidden_dim True [3]
    width += -width % mo
    step, nope = a.get("interleave_moe_layer_step", 2), a.get("every_n_layers_nope")
    period = step * nope // math.gcd(step, nope) if nope else step
    kinds, pattern = {}, []
    for i in range(period):
        mixer = ({"kind": "global", "position": "nope"} if nope and i % nope == 0 else
                 {"kind": "chunked", "chunk": a.get("fixed_attn_block_size", 8192)} if nope else {"kind": "global"})
        mlp = {"kind": "moe"} if (i + 1) % step == 0 else {"kind": "dense"}
        name = f"{mixer['kind']}{'_nope' if mixer.get('position') else ''}_{mlp['kind']}"
        kinds[name] = {"mixer": mixer, "mlp": mlp}
        pattern.append(name)
    rope = (dict(rope_scaling="llama3", rope_scaling_params=dict(factor=16.0, low_freq_factor=1.0, high_freq_factor=1.0,
                                                                 original_max_position_embeddings=8192))
            if a.get("rope_scaling_args") else {})
    return _base(fl, num_layers=a.get("n_layers", 32), hidden_size=dim, num_attention_heads=a.get("n_heads", 32),
                 num_kv_heads=a.get("n_kv_heads"), vocab_size=a.get("vocab_size", 202048),
                 ffn_hidden_size=llama_ffn(4 * dim, mo, mult), max_seq_len=a.get("max_seq_len", 1048576),
                 rope_theta=float(a.get("rope_theta", 10000)), **rope, moe=_moe(m, width),
                 layer_kinds=kinds, layer_pattern=pattern)


def _qwen3(a: dict, fl: Flavor) -> dict:
    moe = _moe(a["moe_args"], a.get("moe_inter_dim", 768)) if a.get("moe_enabled") else None
    return _base(fl, num_layers=a.get("n_layers", 28), hidden_size=a.get("dim", 1024),
                 num_attention_heads=a.get("n_heads", 16), num_kv_heads=a.get("n_kv_heads", 8),
                 head_dim=a.get("head_dim", 128), vocab_size=a.get("vocab_size", 151936),
                 ffn_hidden_size=a.get("hidden_dim", 3072), max_seq_len=a.get("max_seq_len", 4096),
                 rope_theta=float(a.get("rope_theta", 1000000)), qk_norm=a.get("qk_norm", True),
                 tied_embeddings=a.get("enable_weight_tying", False), **({"moe": moe} if moe else {}))


def _deepseek_v3(a: dict, fl: Flavor) -> dict:
    factor, m = float(a.get("rope_factor", 40)), float(a.get("mscale", 1.0))
    q = a.get("q_lora_rank", 0)
    return _base(fl, num_layers=a.get("n_layers", 27), hidden_size=a.get("dim", 2048),
                 num_attention_heads=a.get("n_heads", 16), vocab_size=a.get("vocab_size", 102400),
                 ffn_hidden_size=a.get("inter_dim", 10944), max_seq_len=a.get("max_seq_len", 4096 * 4),
                 rope_theta=float(a.get("rope_theta", 10000.0)), rope_scaling="yarn",
                 rope_yarn_params=dict(factor=factor, original_max_position_embeddings=a.get("original_seq_len", 4096),
                                       beta_fast=float(a.get("beta_fast", 32)), beta_slow=float(a.get("beta_slow", 1)),
                                       truncate=True, mscale=m, mscale_all_dim=m),
                 mla=dict(q_lora_rank=q or None, kv_lora_rank=a.get("kv_lora_rank", 512),
                          qk_rope_head_dim=a.get("qk_rope_head_dim", 64), qk_nope_head_dim=a.get("qk_nope_head_dim", 128),
                          v_head_dim=a.get("v_head_dim", 128)),
                 moe=_moe(a.get("moe_args", Moe()), a.get("moe_inter_dim", 1408), first_k_dense=a.get("n_dense_layers", 1)))


def _gpt_oss(a: dict, fl: Flavor) -> dict:
    factor = float(a.get("rope_factor", 32))
    return _base(fl, num_layers=a.get("n_layers", 24), hidden_size=a.get("dim", 2880),
                 num_attention_heads=a.get("n_heads", 64), num_kv_heads=a.get("n_kv_heads", 8),
                 head_dim=a.get("head_dim", 64), vocab_size=a.get("vocab_size", 201088),
                 ffn_hidden_size=a.get("moe_inter_dim", 2880), max_seq_len=a.get("max_seq_len", 131072),
                 linear_bias=True, activation_clamp=float(a.get("swiglu_limit", 7.0)),
                 rope_theta=float(a.get("rope_theta", 150000.0)), rope_scaling="yarn",
                 rope_attention_factor=0.1 * math.log(factor) + 1.0,
                 rope_yarn_params=dict(factor=factor, original_max_position_embeddings=a.get("original_seq_len", 4096),
                                       beta_fast=float(a.get("ntk_beta", 32.0)), beta_slow=float(a.get("ntk_alpha", 1.0)),
                                       truncate=False),
                 moe=_moe(a.get("moe_args", Moe()), a.get("moe_inter_dim", 2880)),
                 layer_kinds={"sliding": {"mixer": {"kind": "sliding", "window": a.get("sliding_window_size", 128)}},
                              "full": {"mixer": {"kind": "global"}}},
                 layer_pattern=["sliding", "full"])


BUILDERS = {"llama3": _llama3, "llama4": _llama4, "qwen3": _qwen3, "deepseek_v3": _deepseek_v3, "gpt_oss": _gpt_oss}
def flavors_of(code: str) -> list[str]:
    return [f.flavor for f in FLAVOR_ARGS if f.code == code]


# ---------------------------------------------------------------------------------------------- flavors as --model
# Every flavor of the registries above is a model the user can name, `torchtitan:<code>/<flavor>` (the TOML's
# [model] name as the package spells it, then its registry key: `torchtitan:qwen3/30B-A3B`). The model is
# flavor_spec's, written once as a content-addressed model YAML (trainers.write_model_file: validated as any
# model file, its path and sha256 in the plan, `explain --from-fit` reads it back); `planner models` lists each
# with its source line at the stack's commit. No YAML of them ships: this table is their one source.
from .flavor_names import MODEL_PREFIX, is_flavor_name  # noqa: E402,F401 -- the prefix and the test, re-exported


def model_name(fl: Flavor) -> str:
    """The --model that names the flavor: torchtitan:<code>/<flavor>."""
    return f"{MODEL_PREFIX}{fl.code}/{fl.flavor}"


def flavor_named(text: str) -> Flavor:
    """The flavor a torchtitan:<code>/<flavor> name names; an unknown one is bad input naming the flavors."""
    code, _, key = text[len(MODEL_PREFIX):].partition("/")
    fl = FLAVORS.get((code, key))
    if fl is not None:
        return fl
    if code in REGISTRY:
        hint = f"torchtitan {COMMIT}'s {code} flavors: " + ", ".join(model_name(FLAVORS[(code, f)]) for f in flavors_of(code))
    else:
        hint = (f"name a model code ({', '.join(REGISTRY)}) and one of its flavors, e.g. torchtitan:qwen3/30B-A3B "
                "(planner models lists them all)")
    raise PlannerError(f"unknown model {text!r}: no flavor {key!r} of code {code!r} in torchtitan {COMMIT}'s registries",
                       hint)


# torchtitan 0.3.0's RoPE table length per flavor (pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/models/<code>/
# __init__.py, the flavor's `rope=...Config(max_seq_len=...)`), keyed by main's flavor of the same numbers (the
# debug models by main's flex flavor of their shape, torchtitan_flavors.TORCHTITAN_03). 0.3.0 refuses a run whose
# training.seq_len exceeds it (models/common/decoder.py Decoder.Config.update_from_config l. 166-174: ValueError
# "Training sequence length ... exceeds attention RoPE maximum supported sequence length"), where main only warns
# (qwen3 model/args.py @e347b1e5e l. 50-56). Where it differs from main's max_seq_len (the qwen3 flavors: 40960 at
# 0.3.0, 4096 / 262144 at main) the flavor's model carries it as max_seq_len_by_stack["torchtitan-0.3"]
ROPE_MAX_SEQ_LEN_03: dict[tuple[str, str], tuple[int, str]] = {
    ("llama3", "debugmodel_flex_attn"): (131072, "l. 138"), ("llama3", "8B"): (131072, "l. 267"),
    ("llama3", "70B"): (131072, "l. 308"), ("llama3", "405B"): (131072, "l. 349"),
    ("deepseek_v3", "debugmodel_flex_attn"): (16384, "l. 358"), ("deepseek_v3", "16B"): (16384, "l. 428"),
    ("deepseek_v3", "671B"): (16384, "l. 577"),
    ("gpt_oss", "20b"): (131072, "l. 324"), ("gpt_oss", "120b"): (131072, "l. 368"),
    ("qwen3", "debugmodel"): (4096, "l. 228"), ("qwen3", "0.6B"): (40960, "l. 284"), ("qwen3", "1.7B"): (40960, "l. 322"),
    ("qwen3", "4B"): (40960, "l. 360"), ("qwen3", "8B"): (40960, "l. 395"), ("qwen3", "14B"): (40960, "l. 430"),
    ("qwen3", "32B"): (40960, "l. 465"), ("qwen3", "debugmodel_moe"): (4096, "l. 508"),
    ("qwen3", "30B-A3B"): (40960, "l. 549"), ("qwen3", "235B-A22B"): (40960, "l. 590"),
}
STACK_03 = "torchtitan-0.3"


def flavor_model_dict(fl: Flavor) -> dict:
    """The flavor's ModelSpec fields as a model YAML holds them (flavor_spec's input, with a description)."""
    d = BUILDERS[fl.code](fl.args, fl)
    d["description"] = (f"torchtitan {COMMIT} [model] name {fl.code!r} flavor {fl.flavor!r}, as torchtitan builds it "
                        "(planner/torchtitan_registry.py)")
    rec = _kernel_recipe(fl)
    if rec is not None:
        d["training"] = rec
    rope03 = ROPE_MAX_SEQ_LEN_03.get((fl.code, fl.flavor))
    if rope03 is not None and rope03[0] != d["max_seq_len"]:
        d["max_seq_len_by_stack"] = {STACK_03: rope03[0]}
    return d


# the codes whose model args default attn_type to flex (their flavors need not set it): gpt_oss [5]
ARGS_FLEX_DEFAULT = {"gpt_oss": "model/args.py l. 67"}


def _kernel_recipe(fl: Flavor) -> Optional[dict]:
    """The flavor's attention kernel as its model's `training:` recipe (schema TrainingRecipe.attention_kernel,
    planner/recipe.py): a plan of `--model torchtitan:<code>/<flavor>` that names no kernel runs what torchtitan
    builds, listed as assumed; a job's own kernel replaces it, noted. Only attn_type flex gives one: sdpa is the
    stack's default kernel (stack_db torchtitan: no attention_kernels rule, so flash2, its SDPA flash), and varlen
    (torch's varlen_attn) has no rate of its own in the planner (torchtitan_flavors.ATTN_KERNELS; its plan is
    priced with the stack's kernel, and the export refuses to write it as another flavor): a varlen flavor gives
    attention_backend varlen instead, which the start-up rules read (TORCHTITAN_VARLEN_CP). A flex flavor's backend
    goes with its kernel (a job's own kernel replaces both: its export writes the sdpa flavor, noted)."""
    if fl.attn_type not in ("flex", "varlen"):
        return None
    where = (f"{fl.code} {ARGS_FLEX_DEFAULT[fl.code]} attn_type default \"{fl.attn_type}\"" if "attn_type" not in fl.args
             else f'attn_type "{fl.attn_type}"')
    src = f"what torchtitan {COMMIT} builds: models/{fl.code}/__init__.py {REGISTRY[fl.code]} {fl.flavor!r} {fl.lines}, {where}"
    if fl.attn_type == "varlen":  # the module the start-up rules read (startup.TORCHTITAN_VARLEN_CP: varlen refuses CP)
        rec = dict(attention_backend="varlen", sources={"attention_backend": src},
                   not_priced=[f"attn_type varlen: torch's varlen_attn has no rate of its own in the planner: {fl.flavor} "
                               "is priced with the stack's kernel"])
    else:
        rec = dict(attention_kernel="flex", sources={"attention_kernel": src})
    if fl.attn_mask_type == "block_causal":
        rec["not_priced"] = rec.get("not_priced", []) + [
            f"attn_mask_type block_causal: {fl.flavor} attends within each document; priced as causal attention over "
            "the whole sequence, an upper bound"]
    return rec


def flavor_model_file(fl: Flavor) -> str:
    """The flavor's model YAML (trainers.write_model_file: content-addressed in the planner's cache folder)."""
    return write_model_file(flavor_model_dict(fl), f"torchtitan-{fl.code}-{fl.flavor}")


def model_names() -> list[str]:
    return [model_name(fl) for fl in FLAVOR_ARGS]
