"""torchtitan's model flavors: the model `[model] name` + `flavor` builds, as planner models (issue 22).

A torchtitan TOML names its model by two strings: `[model] name`, the model package (its code: stack_db
runs.model_codes, torchtitan.TORCHTITAN_NAME_CODES), and `[model] flavor`, a key of that package's registry of
model args. The registries at the stack's commit (pytorch/torchtitan main @e347b1e5e, [1]-[5]) are copied below
argument for argument (FLAVOR_ARGS: each flavor's own keyword arguments, as the source writes them; every other
argument is the model-args dataclass's default, cited in the builders), and each flavor is turned into a planner
ModelSpec by its code's builder (flavor_spec), following the model code that reads the args. A flavor and a
model are compared field by field over what the planner prices (shape_differences: every layer's resolved
mixer and MLP, planner/layers LayerKind, which holds the widths, heads, experts, top-k, shared experts, router
kind and biases, group limits, MLA ranks, windows, chunks and which layers use RoPE; plus vocab, tied
embeddings and MTP modules) and over what is priced at nothing (rope_theta, the RoPE scaling: notes, as the
llama3 flavors' Llama 3.1 scaling on a Llama 3 entry always was).

TORCHTITAN_ZOO is the explicit table, per stack, (name, flavor) -> model_zoo entry, of every flavor whose priced
shape equals a zoo entry's (tests/test_torchtitan_flavors.py checks each entry field by field, and that no other
flavor of the registries equals a zoo entry). At @e347b1e5e:
  llama3 8B, 70B, 405B          -> llama3-8b, llama3-70b, llama3-405b (8B / 70B: torchtitan applies Llama 3.1's
                                   RoPE scaling the Llama 3 entries do not state; a note)
  llama3 8B_flex, 8B_varlen     -> llama3-8b (FlexAttention / varlen attention, block_causal)
  deepseek_v3 671B              -> deepseek-v3 (FlexAttention, block_causal: the plan's attention_kernel flex)
and no others: the qwen3 MoE and gpt_oss flavors keep torchtitan's aux-loss-free expert bias (MoEArgs
load_balance_coeff 1e-3 by default [6]: expert_score_bias, which the Qwen3 and gpt-oss entries do not have
and the planner's imbalance rule keys on), llama4's _irope flavors put the NoPE layer first in each group of
four (layer_id % 4 == 0 [3]; Llama 4 and model_zoo: the fourth) and keep the expert bias too, llama4's plain
flavors attend globally with RoPE in every layer, and the dense qwen3 flavors and the 16B / 236B deepseek_v3
ones have no zoo entry. A model YAML of a flavor's shape (tests/data/torchtitan_flavors/) exports as that
flavor: the export matches the plan's model against every flavor, not its name.

torchtitan 0.3.0 (stack torchtitan-0.3, release/0.3 @4f9e9a47d) builds its models in Python config_registry
functions (`--module M --config F`, config/manager.py l. 94-110; models/<module>/__init__.py model_registry of
per-layer Config builders) and reads no TOML: the export refuses a torchtitan-0.3 plan (export._other_release),
naming the model as 0.3.0 spells it where TORCHTITAN_03 has it, and the reader prices a TOML (main's layout)
under --stack torchtitan-0.3 with the model given by --model or the main table. TORCHTITAN_03: the 0.3.0 configs
whose model_registry flavor was read at 4f9e9a47d and has the numbers of the main flavor of the same key
(llama3/__init__.py _8b l. 236-276, _70b l. 277-317, _405b l. 318-368: dim, layers, heads, KV heads, vocab
128256, compute_ffn_hidden_dim(multiple_of, ffn_dim_multiplier) as main's, RoPE theta 500000 with scaling
"llama"; deepseek_v3/__init__.py _671b l. 533-590: main's 671B numbers, router sigmoid 8 groups / 4, YaRN 40,
models/common/moe.py l. 369 load_balance_coeff 1e-3), by the config function that builds it (llama3/
config_registry.py llama3_8b l. 184-185, llama3_70b l. 257-258, llama3_405b l. 295-307; deepseek_v3/
config_registry.py deepseek_v3_671b l. 206-210, attn_backend "flex"). The qwen3 and gpt_oss configs' flavors
are not read here (their catalog entries have no flavor at main either).

References (pytorch/torchtitan @e347b1e5e)
[1] torchtitan/models/llama3/__init__.py llama3_args l. 29-100; model/args.py TransformerModelArgs l. 28-47,
    RoPEScalingArgs l. 20-24 (applied always: model/model.py precompute_freqs_cis l. 35-86); model/model.py
    FeedForward (hidden = multiple_of * ceil(int(ffn_dim_multiplier * int(2 * 4 * dim / 3)) / multiple_of)).
[2] torchtitan/models/qwen3/__init__.py qwen3_args l. 32-191; model/args.py Qwen3ModelArgs l. 23-48 (vocab 151936,
    head_dim 128, qk_norm True, enable_weight_tying False, moe_enabled False); model/model.py l. 366 (every layer
    MoE when moe_enabled), l. 184-187 (no biases).
[3] torchtitan/models/llama4/__init__.py llama4_args l. 29-102; model/args.py l. 22-63 (RoPEScalingArgs 16, 1, 1,
    8192; vocab 202048; fixed_attn_block_size 8192; interleave_moe_layer_step 2; auto_scale_hidden_dim True);
    model/model.py TransformerBlock l. 374-411 (NoPE where layer_id % every_n_layers_nope == 0, the others
    chunked by fixed_attn_block_size, l. 560-564; MoE where (layer_id + 1) % interleave_moe_layer_step == 0;
    the expert width 4 dim -> int(2/3) -> x ffn_dim_multiplier -> / (top_k + num_shared_experts) -> rounded up
    to multiple_of; the dense layers' FeedForward(4 dim, multiple_of, ffn_dim_multiplier)).
[4] torchtitan/models/deepseek_v3/__init__.py deepseekv3_args l. 29-157; model/args.py DeepSeekV3ModelArgs l. 23-85
    (vocab 102400, q_lora_rank 0 = none, rope_theta 10000, rope_factor 40, original_seq_len 4096, beta_fast 32,
    beta_slow 1, mscale 1.0); model/model.py precompute_freqs_cis l. 30-120 (YaRN with the correction range
    floored / ceiled, l. 84-85: truncate; applied only where max_seq_len, set to training.seq_len by
    update_from_config args.py l. 87-93, exceeds original_seq_len, l. 111; no factor on cos / sin) and
    Attention l. 232-236 (the softmax scale times (0.1 mscale ln(rope_factor) + 1)^2 under the same condition:
    HF's mscale = mscale_all_dim = mscale).
[5] torchtitan/models/gpt_oss/__init__.py gptoss_configs l. 29-77; model/args.py GptOssModelArgs l. 22-73 (dim 2880,
    moe_inter_dim 2880, head_dim 64, 64 heads, 8 KV heads, sliding_window_size 128, rope_theta 150000,
    rope_factor 32, ntk_alpha 1, ntk_beta 32, original_seq_len 4096, swiglu_limit 7.0, vocab 201088, attn_type
    flex only); model/model.py precompute_rope_cache l. 28-90 (YaRN, no rounding of the correction range;
    concentration 0.1 ln(rope_factor) + 1 on cos and sin), l. 177-192 (attention linears with bias), l. 274
    (sliding window where layer_id % 2 == 0).
[6] torchtitan/models/moe/moe.py MoEArgs l. 22-40 (num_experts 8, num_shared_experts 1, score_func sigmoid,
    gate_bias False, top_k 1, load_balance_coeff 1e-3), MoE l. 445-458 (one shared FeedForward of hidden_dim x
    num_shared_experts; expert_bias registered where load_balance_coeff is not None, added to the scores for the
    top-k choice only, l. 322, and updated by the optimizer hook components/optimizer.py l. 350-435).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

COMMIT = "@e347b1e5e"


@dataclass(frozen=True)
class Moe:
    """torchtitan's MoEArgs [6], defaults as there."""

    num_experts: int = 8
    num_shared_experts: int = 1
    score_func: str = "sigmoid"
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


_QWEN3_MOE = dict(num_shared_experts=0, score_func="softmax")  # route_norm / route_scale / score_before: not priced
_V3_SMALL = dict(q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
_V3_BIG = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
_FLEX = dict(attn_type="flex", attn_mask_type="block_causal")
_GPT_OSS_MOE = dict(num_shared_experts=0, score_func="softmax", gate_bias=True, top_k=4, load_balance_coeff=1e-3)
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
                    score_func="sigmoid"), **_V3_BIG, **_FLEX),
    _f("gpt_oss", "debugmodel", "l. 30-46", dim=256, n_layers=4,
       moe_args=Moe(num_experts=8, **_GPT_OSS_MOE), attn_mask_type="causal"),
    _f("gpt_oss", "20b", "l. 47-61", n_layers=24, moe_args=Moe(num_experts=32, **_GPT_OSS_MOE)),
    _f("gpt_oss", "120b", "l. 62-76", n_layers=36, moe_args=Moe(num_experts=128, **_GPT_OSS_MOE)),
)
FLAVORS: dict[tuple[str, str], Flavor] = {(f.code, f.flavor): f for f in FLAVOR_ARGS}
REGISTRY = {"llama3": "llama3_args", "llama4": "llama4_args", "qwen3": "qwen3_args", "deepseek_v3": "deepseekv3_args",
            "gpt_oss": "gptoss_configs"}  # each package's dict ([1]-[5])

# (name, flavor) -> model_zoo entry: the flavors whose priced shape equals the entry's (module docstring), per stack
TORCHTITAN_ZOO: dict[str, dict[tuple[str, str], str]] = {
    "torchtitan": {("llama3", "8B"): "llama3-8b", ("llama3", "8B_flex"): "llama3-8b", ("llama3", "8B_varlen"): "llama3-8b",
                   ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b",
                   ("deepseek_v3", "671B"): "deepseek-v3"},
}
# release/0.3 @4f9e9a47d: main's (name, flavor) -> (--module, --config) of 0.3.0 building the same model (module docstring)
TORCHTITAN_03: dict[tuple[str, str], tuple[str, str]] = {
    ("llama3", "8B"): ("llama3", "llama3_8b"), ("llama3", "70B"): ("llama3", "llama3_70b"),
    ("llama3", "405B"): ("llama3", "llama3_405b"), ("deepseek_v3", "671B"): ("deepseek_v3", "deepseek_v3_671b"),
}
# the attention kernel the planner prices for a flavor's attn_type (schema AttentionKernel): sdpa is the stack's
# (stack_db torchtitan attention_kernel: SDPA flash, FlashAttention-2); flex FlexAttention (compute.py [7d]);
# varlen (torch's varlen attention, a FlashAttention-2 varlen kernel) has no rate of its own: not a kernel the
# export writes, read as the stack's (listed)
ATTN_KERNELS = {"sdpa": "flash2", "flex": "flex", "varlen": None}


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
    return out


def _base(fl: Flavor, **kw) -> dict:
    return dict(name=f"torchtitan-{fl.code}-{fl.flavor}", gated_mlp=True, norm="rmsnorm", position_embedding="rope",
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
_SPECS: dict = {}


def flavor_spec(fl: Flavor):
    """The planner ModelSpec torchtitan builds for the flavor (cached)."""
    from ..schema import ModelSpec

    if fl not in _SPECS:
        _SPECS[fl] = ModelSpec(**BUILDERS[fl.code](fl.args, fl))
    return _SPECS[fl]


def _layer_kinds(spec) -> list:
    from ..layers import layer_list

    ll = layer_list(spec)
    return [ll.kinds[ll.kind_at(i)] for i in range(spec.num_layers)]


def _kind_diff(a, b) -> str:
    """The fields two resolved layers differ in (planner/layers LayerKind: mixer, mlp), as 'mlp.score_bias True / False'."""
    out = []
    for part in ("mixer", "mlp"):
        x, y = getattr(a, part), getattr(b, part)
        if x == y:
            continue
        if type(x) is not type(y):
            out.append(f"{part} {type(x).__name__} / {type(y).__name__}")
            continue
        out += [f"{part}.{f.name} {getattr(x, f.name)!r} / {getattr(y, f.name)!r}" for f in fields(x)
                if getattr(x, f.name) != getattr(y, f.name)]
    if a.post_norm != b.post_norm:
        out.append(f"post_norm {a.post_norm} / {b.post_norm}")
    return ", ".join(out)


# the model-level fields priced (beside the layers): a difference refuses
PRICED = ("num_layers", "vocab_size", "tied_embeddings", "mtp_layers")
# priced at nothing (schema ModelSpec: the rotary tables are computed once): a difference is a note
COSTLESS = ("rope_theta", "llama3_rope_scaling", "yarn_rope_scaling", "mla_yarn_rope_scaling")


def shape_differences(fl: Flavor, spec) -> tuple[list[str], list[str]]:
    """(priced, costless): each field where the flavor's model (flavor_spec) and `spec` differ, as
    'field flavor-value / model-value'; the layers as 'layers a-b: field x / y' per run of equal differences."""
    mine = flavor_spec(fl)
    priced = [f"{k} {getattr(mine, k)!r} / {getattr(spec, k)!r}" for k in PRICED if getattr(mine, k) != getattr(spec, k)]
    if mine.num_layers == spec.num_layers:
        runs: list[list] = []
        for i, (a, b) in enumerate(zip(_layer_kinds(mine), _layer_kinds(spec))):
            d = _kind_diff(a, b) if a != b else ""
            if runs and runs[-1][2] == d and runs[-1][1] == i - 1:
                runs[-1][1] = i
            else:
                runs.append([i, i, d])
        priced += [f"layer{'s' if a != b else ''} {a}{'' if a == b else f'-{b}'}: {d}" for a, b, d in runs if d][:4]
    costless = [f"{k} {_show(getattr(mine, k))} / {_show(getattr(spec, k))}" for k in COSTLESS
                if getattr(mine, k) != getattr(spec, k)]
    return priced, costless


def _show(v) -> str:
    from . import rope_text

    if isinstance(v, tuple) and len(v) == 4 and not isinstance(v[0], tuple):
        return f"({rope_text(v)})"
    return "none" if v is None else repr(v)


def flavors_of(code: str) -> list[str]:
    return [f.flavor for f in FLAVOR_ARGS if f.code == code]


def matching(spec, stack_name: str = "torchtitan") -> list[Flavor]:
    """The flavors of the stack's registries whose priced shape equals `spec`'s (no priced difference)."""
    if stack_name != "torchtitan":
        return []
    return [fl for fl in FLAVOR_ARGS if fl.flavor and not shape_differences(fl, spec)[0]]


BUILT_CODES = frozenset(BUILDERS)  # the codes whose registries are copied here


def yarn_off_note(fl: Flavor, seq_len: Optional[int]) -> Optional[str]:
    """deepseek_v3's YaRN applies only where training.seq_len exceeds original_seq_len [4] (update_from_config sets
    max_seq_len to it): at or below it the run rotates with plain RoPE. Priced at nothing: a note, or None."""
    if fl.code != "deepseek_v3" or seq_len is None:
        return None
    orig = fl.args.get("original_seq_len", 4096)
    if seq_len > orig:
        return None
    return (f"torchtitan's deepseek_v3 {fl.flavor} applies its YaRN only where training.seq_len exceeds original_seq_len "
            f"{orig} (models/deepseek_v3/model/model.py {COMMIT} l. 111, args.py l. 87-93): at seq_len {seq_len} it "
            "rotates with plain RoPE, at the same cost")
