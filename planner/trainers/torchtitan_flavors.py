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
ones have no zoo entry. Every flavor is also a model the user names, `torchtitan:<code>/<flavor>` (model_name,
below: `planner models` lists them, a plan of one exports as that flavor and its TOML reads back as it), and the
refusal of a model of no flavor's shape names the --model of its code's nearest flavor (nearest). A model YAML of
a flavor's shape (tests/data/torchtitan_flavors/) exports as that flavor too: the export matches the plan's model
against every flavor, not its name (the plan's own flavor first among several of one shape).

torchtitan 0.3.0 (stack torchtitan-0.3, release/0.3 @4f9e9a47d) builds its models in Python config_registry
functions (`--module M --config F`, config/manager.py l. 94-110; models/<module>/__init__.py model_registry of
per-layer Config builders) and reads no TOML: a torchtitan-0.3 plan is exported as 0.3.0's launch line and such a
line read (torchtitan03.py, its config functions naming their model by TORCHTITAN_03's flavors), and the TOML
reader prices a TOML (main's layout) under --stack torchtitan-0.3 with the model given by --model or the main
table. TORCHTITAN_03: the 0.3.0 configs
whose model_registry flavor was read at 4f9e9a47d and has the numbers of the main flavor of the same key
(llama3/__init__.py _8b l. 236-276, _70b l. 277-317, _405b l. 318-368: dim, layers, heads, KV heads, vocab
128256, compute_ffn_hidden_dim(multiple_of, ffn_dim_multiplier) as main's, RoPE theta 500000 with scaling
"llama"; deepseek_v3/__init__.py _671b l. 533-590: main's 671B numbers, router sigmoid 8 groups / 4, YaRN 40,
models/common/moe.py l. 369 load_balance_coeff 1e-3), by the config function that builds it (llama3/
config_registry.py llama3_8b l. 184-185, llama3_70b l. 257-258, llama3_405b l. 295-307; deepseek_v3/
config_registry.py deepseek_v3_671b l. 206-210, attn_backend "flex"). Read the same way (tt03more), field by field
against main's flavor of the same key, every priced field equal: deepseek_v3/__init__.py _16b l. 389-456 (dim 2048, 27
layers, 1 dense of 10944, 16 heads, MLA q_lora 0 / kv 512 / nope 128 / rope 64 / v 128, mscale 0.70, 64 experts of 1408,
2 shared, top 6 softmax, no groups, YaRN 40 over 4096, vocab 102400; build_mla_moe_layers l. 168-277, make_moe_config
load_balance_coeff 1e-3: the expert bias) by deepseek_v3_16b l. 138-139; qwen3/__init__.py _0_6b l. 253-288, _1_7b
l. 291-326, _8b l. 367-399, _14b l. 402-434, _32b l. 437-469 (dim, layers, heads, KV heads, head_dim 128, hidden_dim, tied
embeddings for 0.6B / 1.7B, q/k RMSNorm, no biases: make_gqa_config / make_ffn_config, common/config_utils.py
l. 187-308) and _30b_a3b l. 516-554 (128 experts of 768, top 8, softmax with route_norm, no shared expert, no gate
bias, load_balance_coeff 1e-3: config_utils.py l. 311-357) by qwen3_0_6b, qwen3_1_7b, qwen3_14b, qwen3_30b_a3b,
qwen3_32b (config_registry.py l. 176-177, 206-207, 260-261, 295-296, 330-331) and sft_qwen3_8b_math (l. 464, varlen,
priced as flex); gpt_oss/__init__.py _20b l. 293-334,
_120b l. 337-378 (dim 2880, 24 / 36 layers, 64 heads of 64, 8 KV heads, window 128 on even layers l. 209, biased
QKV / output / router gate, 32 / 128 experts of 2880, top 4, softmax, load_balance_coeff 1e-3, swiglu limit 7.0
moe.py l. 67-88, YaRN 32 over 4096 untruncated, vocab 201088) by gpt_oss_20b / gpt_oss_120b (config_registry.py
l. 70-71, 101-102; attn_backend "varlen", priced as flex). The debug models too (llama3 _debugmodel l. 114-145, qwen3 _debugmodel l. 197-232 and _debugmodel_moe
l. 475-513, deepseek_v3 _debugmodel l. 319-386: main's numbers; named by main's flex flavor of the shape where
main has one, debugmodel_flex_attn), not gpt_oss's (vocab 2048 at 0.3.0, 201088 at main). The one difference,
priced at nothing: the qwen3
flavors' RoPE max_seq_len, 40960 at 0.3.0 against main's 4096 (262144 for 30B-A3B), said where a launch line is read
(torchtitan03.ConfigFunction.notes).

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

from dataclasses import fields
from typing import Optional

from ..torchtitan_registry import (  # noqa: F401 -- the table and the names, re-exported (one source)
    BUILDERS, COMMIT, FLAVOR_ARGS, FLAVORS, HF_TYPES, MODEL_PREFIX, REGISTRY, Flavor, Moe, flavor_model_dict,
    flavor_model_file, flavor_named, flavors_of, is_flavor_name, llama_ffn, model_name, model_names)

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
    ("deepseek_v3", "16B"): ("deepseek_v3", "deepseek_v3_16b"), ("qwen3", "0.6B"): ("qwen3", "qwen3_0_6b"),
    ("qwen3", "1.7B"): ("qwen3", "qwen3_1_7b"), ("qwen3", "14B"): ("qwen3", "qwen3_14b"),
    ("qwen3", "30B-A3B"): ("qwen3", "qwen3_30b_a3b"), ("qwen3", "32B"): ("qwen3", "qwen3_32b"),
    ("llama3", "debugmodel_flex_attn"): ("llama3", "llama3_debugmodel"), ("qwen3", "debugmodel"): ("qwen3", "qwen3_debugmodel"),
    ("qwen3", "debugmodel_moe"): ("qwen3", "qwen3_moe_debug"),
    ("deepseek_v3", "debugmodel_flex_attn"): ("deepseek_v3", "deepseek_v3_debugmodel"),
    ("qwen3", "8B"): ("qwen3", "sft_qwen3_8b_math"), ("gpt_oss", "20b"): ("gpt_oss", "gpt_oss_20b"), ("gpt_oss", "120b"): ("gpt_oss", "gpt_oss_120b"),
}
# the flavor registries of each release beside main's, per stack: module (0.3.0's --module) -> (the registry's keys in
# order, model_registry's default attn_backend, where). pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/models/
# <module>/__init__.py (models/__init__.py _supported_models l. 7-18; flux has no language-model flavor). 0.3.0 builds
# each flavor by a Python function with the attention backend an argument (flex by default, gpt_oss varlen; "sdpa" is a
# ValueError for language models, models/common/config_utils.py l. 71-101), not by main's attn_type flavors: llama3's
# 8B_flex / 8B_varlen / debugmodel_*_attn and deepseek_v3's debugmodel_flex_attn are gone, as is the llama4 code; llama3
# 1B and 3B, qwen3 debugmodel_non_fused_qkv and the kimi_k2_7, qwen3_5 and muse_glimmer packages are new and not
# transcribed here (no builder: the planner prices a --model of main's registry, noted on this stack)
RELEASE_FLAVORS: dict[str, dict[str, tuple[tuple[str, ...], str, str]]] = {
    "torchtitan-0.3": {
        "llama3": (("debugmodel", "1B", "3B", "8B", "70B", "405B"), "flex", "llama3/__init__.py l. 359-371"),
        "qwen3": (("debugmodel", "debugmodel_non_fused_qkv", "0.6B", "1.7B", "4B", "8B", "14B", "32B", "debugmodel_moe",
                   "30B-A3B", "235B-A22B"), "flex", "qwen3/__init__.py l. 598-615"),
        "deepseek_v3": (("debugmodel", "16B", "236B", "671B"), "flex", "deepseek_v3/__init__.py l. 608-618"),
        "gpt_oss": (("debugmodel", "20b", "120b"), "varlen", "gpt_oss/__init__.py l. 381-391"),
        "kimi_k2_7": (("debugmodel", "moonlight-16B-A3B", "Kimi-VL-A3B", "Kimi-K2.5"), "flex",
                      "kimi_k2_7/__init__.py l. 466-476"),
        "qwen3_5": (("debugmodel", "debugmodel_moe", "0.8B", "2B", "4B", "9B", "27B", "35B-A3B", "122B-A10B",
                     "397B-A17B"), "flex", "qwen3_5/__init__.py l. 1086-1102"),
        "muse_glimmer": (("debugmodel", "30B", "debugmodel_mm"), "flex", "muse_glimmer/__init__.py l. 512-522"),
    },
}
RELEASE_COMMITS = {"torchtitan-0.3": "release/0.3 @4f9e9a47d"}


def release_note(model: str, stack_name: str) -> Optional[str]:
    """The note on a `--model torchtitan:<code>/<flavor>` (main's registry, the one this module copies) planned on a
    release stack whose own registry (RELEASE_FLAVORS) differs: the release ships no such code or flavor, or builds
    the flavor with another default attention backend. None where the stack has no table of its own, the model is
    no flavor, or the release builds the same flavor name with the kernel main's attn_type gives."""
    from ..torchtitan_registry import flavor_named, is_flavor_name

    table = RELEASE_FLAVORS.get(stack_name)
    if table is None or not is_flavor_name(model):
        return None
    fl = flavor_named(model)
    at = f"torchtitan {RELEASE_COMMITS[stack_name]}"
    main = f"main {COMMIT}'s {fl.code} {fl.flavor} (models/{fl.code}/__init__.py {fl.lines})"
    if fl.code not in table:
        return (f"{model}: {at} has no {fl.code} code (models/__init__.py _supported_models): priced as {main}, "
                f"which stack {stack_name} does not build")
    keys, backend, where = table[fl.code]
    if fl.flavor not in keys:
        return (f"{model}: {at}'s {fl.code} registry ({where}) has no flavor {fl.flavor!r} (its flavors: "
                f"{', '.join(keys)}; the attention backend is a config argument there, default {backend!r}): priced as "
                f"{main}")
    if backend != fl.attn_type:
        return (f"{model}: {at} builds {fl.code} {fl.flavor} with attn_backend {backend!r} by default ({where}), "
                f"main {COMMIT} with attn_type {fl.attn_type!r}: priced with the stack's kernel")
    return None


# the attention kernel the planner prices for a flavor's attn_type (schema AttentionKernel): sdpa is the stack's
# (stack_db torchtitan attention_kernel: SDPA flash, FlashAttention-2); flex FlexAttention (compute.py [7d]);
# varlen (torch's varlen attention, a FlashAttention-2 varlen kernel) has no rate of its own: not a kernel the
# export writes, read as the stack's (listed)
ATTN_KERNELS = {"sdpa": "flash2", "flex": "flex", "varlen": None}


_SPECS: dict = {}


def flavor_spec(fl: Flavor):
    """The planner ModelSpec torchtitan builds for the flavor (cached)."""
    from ..schema import ModelSpec

    if fl not in _SPECS:
        _SPECS[fl] = ModelSpec(**flavor_model_dict(fl))
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


# the model-level fields priced (beside the layers), and the MLP's activation (ModelSpec.mlp_activation: priced as its
# form's, but a flavor's other activation trains another function, which no TOML setting changes): a difference refuses
PRICED = ("num_layers", "vocab_size", "tied_embeddings", "mtp_layers", "mlp_activation")
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


def counterpart(spec, code: Optional[str]) -> Optional[Flavor]:
    """The flavor of the model's code (startup.model_code) built for the same model -- equal num_layers,
    hidden_size and routed experts -- whose priced shape differs from it (a matching flavor, or none of the same
    size: None). Qwen3-30B-A3B's is qwen3 30B-A3B (the expert score bias)."""
    if code not in REGISTRY or matching(spec):
        return None
    experts = spec.moe.num_experts if spec.moe is not None else None
    same = [FLAVORS[(code, f)] for f in flavors_of(code)]
    same = [fl for fl in same if (lambda m: (m.num_layers, m.hidden_size, m.moe.num_experts if m.moe else None))(
        flavor_spec(fl)) == (spec.num_layers, spec.hidden_size, experts)]
    return min(same, key=lambda fl: distance(fl, spec)) if same else None


def distance(fl: Flavor, spec) -> tuple:
    """How far the flavor's priced shape is from `spec`: (num_layers differ, the model-level priced fields that
    differ + the layers' fields that differ with the layers of each taken as a multiset (sorted: what the sums
    price), the same layer by layer (where they sit)); the nearest flavor is the least. Llama 4 Scout's is
    17bx16e_irope: its layers are Scout's, one NoPE in four, the NoPE one placed first (each layer also keeps
    the expert bias), where 17bx16e's attend globally with RoPE everywhere."""
    mine = flavor_spec(fl)
    fields_ = sum(getattr(mine, k) != getattr(spec, k) for k in PRICED)
    if mine.num_layers != spec.num_layers:
        return (1, fields_, 0)

    def n(pairs) -> int:
        return sum(len(_kind_diff(a, b).split(", ")) for a, b in pairs if a != b)

    a, b = _layer_kinds(mine), _layer_kinds(spec)
    return (0, fields_ + n(zip(sorted(a, key=repr), sorted(b, key=repr))), n(zip(a, b)))


def nearest(spec, code: str) -> Flavor:
    """The flavor of the code's registry nearest `spec` (distance)."""
    return min((FLAVORS[(code, f)] for f in flavors_of(code)), key=lambda fl: distance(fl, spec))


def kernel_flag(fl: Flavor) -> str:
    """What the flavor's attn_type asks of the plan: '' for sdpa (the stack's kernel), else the option."""
    k = ATTN_KERNELS[fl.attn_type]
    return "" if k == "flash2" else f" --attention-kernel {k}" if k else ""


def fit_note(model_arg: str, spec, stack) -> Optional[str]:
    """fit's one line on a model whose torchtitan counterpart flavor differs in a priced way (counterpart): the
    plan prices the model as given (valid), torchtitan @e347b1e5e builds the flavor, and --model names it. For the
    stacks whose runs.flavor_registry is torchtitan only (stack_db torchtitan, and a stack file that extends it): its one
    caller (cli/fit.py) asks on those alone, and imports this module only there."""
    from ..startup import model_code

    have = model_code(spec, stack)
    fl = counterpart(spec, have.code if have is not None else None)
    if fl is None:
        return None
    return (f"{model_arg}: torchtitan {COMMIT} builds its own {fl.code} {fl.flavor} flavor, which differs (flavor / "
            f"model: {'; '.join(shape_differences(fl, spec)[0])}): these rows price {model_arg} as given, and "
            f"--export torchtitan refuses them; --model {model_name(fl)}{kernel_flag(fl)} plans what torchtitan builds")
