"""Ten models whose layers are not all alike, from the zoo (model_zoo/<name>.yaml) and from their
Hugging Face config.json (tests/data/arch/<folder>/config.json, read by planner/hf_config.py):
published parameter counts, the layer pattern each publisher describes, the HF reader's layer
list equal to the zoo entry's, and the reader's errors and assumptions.

Published figures and where they come from: tests/data/arch/README.md (model cards, READMEs,
keras-hub presets; each with its commit). Tolerances: 2% of a figure printed to three or more
significant digits; 5% where the card rounds to a whole number of billions ("17B", "12B",
"32B") or to one significant figure ("1T"); Qwen3-Next's "3B" active is checked by rounding (its
non-embedding active count is 3.25B: 8% above 3.0, rounds to 3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_one_error
from planner.catalog import load_model, model_from_hf_config
from planner.layers import layer_list
from planner.layers.attention import Attention
from planner.layers.mlp import DenseMLP, NoBlock
from planner.layers.moe import MoEMLP
from planner.params import count_params

ARCH = Path(__file__).parent / "data" / "arch"

# zoo name -> (config folder, published total, its tolerance, published active or None, its tolerance)
PUBLISHED = {
    "gpt-oss-120b": ("gpt-oss-120b", 116.8e9, 0.02, 5.1e9, 0.02),         # model card 116.8B / 5.1B
    "gpt-oss-20b": ("gpt-oss-20b", 20.9e9, 0.02, 3.6e9, 0.02),            # model card 20.9B / 3.6B
    "gemma3-27b": ("gemma-3-27b-it", 27_009_002_240, 0.02, None, None),    # keras-hub gemma3_27b_text
    "qwen3-next-80b-a3b": ("qwen3-next-80b-a3b-thinking", 80e9, 0.02, None, None),  # card 80B (active: below)
    "nemotron-h-56b": ("nemotron-h-56b-base-8k", 56e9, 0.02, None, None),  # NeMo docs 56B
    "jamba-v0.1": ("jamba-v0.1", 52e9, 0.02, 12e9, 0.05),                  # model card 52B / 12B
    "llama4-scout": ("llama-4-scout-17b-16e-instruct", 109e9, 0.02, 17e9, 0.05),  # MODEL_CARD 109B (with vision) / 17B
    "llama4-maverick": ("llama-4-maverick-17b-128e-instruct", 400e9, 0.02, 17e9, 0.05),  # 400B / 17B
    "kimi-k2": ("kimi-k2-instruct", 1e12, 0.05, 32e9, 0.05),               # README 1T / 32B
    "mistral-7b": ("mistral-7b-v0.1", 7.3e9, 0.02, None, None),            # announcement 7.3B
}


def hf(folder: str):
    p = ARCH / folder / "config.json"
    return model_from_hf_config(json.loads(p.read_text()), str(p))


def card_active(name: str, pc) -> int:
    """The active count in the card's convention. gpt-oss (model card): the input embedding is not
    counted, the untied output head is (a lookup is not a matmul): 5.13B / 3.61B; with the
    embedding planner's `active` is 5.71B / 4.19B. Jamba, Llama 4, Kimi K2: everything a token
    passes through, embedding and head included (12.11B, 17.17B / 17.18B, 32.86B)."""
    if name.startswith("gpt-oss"):
        return pc.active - pc.embedding
    return pc.active


@pytest.mark.parametrize("source", ["zoo", "hf"])
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts(name, source):
    folder, total, tol, active, atol = PUBLISHED[name]
    m = load_model(name) if source == "zoo" else hf(folder)
    pc = count_params(m)
    assert abs(pc.total / total - 1) < tol, (name, pc.total)
    if active is not None:
        assert abs(card_active(name, pc) / active - 1) < atol, (name, card_active(name, pc))


def test_zoo_and_hf_config_count_the_same_parameters():
    for name, (folder, *_rest) in PUBLISHED.items():
        a, b = count_params(load_model(name)), count_params(hf(folder))
        assert (a.total, a.active, a.mtp.total) == (b.total, b.active, b.mtp.total), name


def test_gemma3_27b_text_count_by_hand():
    """keras-hub's gemma3_27b_text, 27,009,002,240, counts vocab 262,144 and four RMSNorms plus q/k
    norms a layer; planner counts the HF checkpoint's 262,208 rows (Gemma3TextConfig default, 64 x
    5,376 more), the four norms a layer (post_norms) and the q/k norms (qk_norm)."""
    pc = count_params(load_model("gemma3-27b"))
    assert pc.total == 27_009_002_240 + 64 * 5376
    assert pc.output == 0 and pc.embedding == 262208 * 5376  # tied


def test_qwen3_next_non_embedding_and_active_as_the_card_rounds():
    """Card: 80B in total, 79B non-embedding, 3B activated. Non-embedding (layers + final norm):
    79.05B. Active without the embedding and the head: 3.25B, which the card rounds to 3B (with
    them 3.87B, which it would not)."""
    pc = count_params(load_model("qwen3-next-80b-a3b"))
    assert abs(pc.non_embedding / 79e9 - 1) < 0.02
    non_emb_active = pc.active - pc.embedding - pc.output
    assert round(non_emb_active / 1e9) == 3 and round(pc.active / 1e9) == 4


def test_mistral_and_kimi_gaps_are_the_cards_rounding():
    """Mistral 7B counts 7.242B exactly from its shape (the announcement says 7.3B); Kimi K2 1.026T
    (the README says 1T)."""
    assert count_params(load_model("mistral-7b")).total == 7_241_732_096
    assert round(count_params(load_model("kimi-k2")).total / 1e12) == 1


# ------------------------------------------------------------------ HF layer list = zoo layer list
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_hf_config_resolves_to_the_zoo_layer_list(name):
    zoo, got = load_model(name), hf(PUBLISHED[name][0])
    a, b = layer_list(zoo), layer_list(got)
    assert a.kinds == b.kinds and list(a.index) == list(b.index) and a.mtp == b.mtp
    assert a.described() == b.described()
    for f in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_heads", "dhead", "vocab_size",
              "gated_mlp", "norm", "tied_embeddings", "position_embedding", "linear_bias", "dropout", "moe", "mla"):
        assert getattr(zoo, f) == getattr(got, f), (name, f)


# ------------------------------------------------------------------ the layer patterns, by hand
def _layers(name):
    ll = layer_list(load_model(name))
    return [ll.kinds[i] for i in ll.index]


def test_gemma3_five_local_to_one_global():
    """52 sliding (1,024) and 10 global layers, global at 5, 11, ..., 59 ((i + 1) % 6 == 0)."""
    ls = _layers("gemma3-27b")
    glob = [i for i, k in enumerate(ls) if k.mixer.window is None]
    assert glob == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert all(k.mixer.window == 1024 for i, k in enumerate(ls) if i not in glob) and len(ls) == 62
    assert all(isinstance(k.mlp, DenseMLP) and k.mlp.f == 21504 and k.mlp.gated for k in ls)
    assert all(k.mixer.rope and k.mixer.d == 128 and k.mixer.k == 16 for k in ls)


@pytest.mark.parametrize("name,layers,experts", [("gpt-oss-120b", 36, 128), ("gpt-oss-20b", 24, 32)])
def test_gpt_oss_alternates_window_128_and_full(name, layers, experts):
    ls = _layers(name)
    assert [k.mixer.window for k in ls] == [128, None] * (layers // 2)
    assert all(isinstance(k.mlp, MoEMLP) and k.mlp.num_experts == experts and k.mlp.top_k == 4 and k.mlp.bias
               for k in ls)
    assert all(k.mixer.bias and k.mixer.a * k.mixer.d == 4096 and k.mixer.h == 2880 for k in ls)


def test_qwen3_next_three_deltanet_then_gated_attention():
    ls = _layers("qwen3-next-80b-a3b")
    full = [i for i, k in enumerate(ls) if isinstance(k.mixer, Attention)]
    assert full == list(range(3, 48, 4))  # (i + 1) % 4 == 0: 12 layers
    assert all(k.mixer.gate and k.mixer.d == 256 and k.mixer.k == 2 for i, k in enumerate(ls) if i in full)
    gdn = [k.mixer for i, k in enumerate(ls) if i not in full]
    assert len(gdn) == 36 and all(type(b).__name__ == "GatedDeltaNetBlock" for b in gdn)
    assert {(b.key_heads, b.value_heads, b.key_dim, b.value_dim) for b in gdn} == {(16, 32, 128, 128)}
    assert all(isinstance(k.mlp, MoEMLP) and (k.mlp.num_experts, k.mlp.top_k, k.mlp.num_shared) == (512, 10, 1)
               for k in ls)


def test_nemotron_h_blocks():
    """118 blocks: 54 Mamba-2, 54 MLP, 10 attention at 7, 18, 29, ..., 106; each block one
    sub-block (and one norm)."""
    ls = _layers("nemotron-h-56b")
    mamba = [i for i, k in enumerate(ls) if type(k.mixer).__name__ == "Mamba2Block"]
    mlp = [i for i, k in enumerate(ls) if isinstance(k.mlp, DenseMLP)]
    attn = [i for i, k in enumerate(ls) if isinstance(k.mixer, Attention)]
    assert (len(ls), len(mamba), len(mlp)) == (118, 54, 54)
    assert attn == [7 + 11 * j for j in range(10)]
    assert all(k.norms == 1 for k in ls)
    assert all(isinstance(k.mlp, NoBlock) for i, k in enumerate(ls) if i in mamba or i in attn)
    assert all(not k.mixer.rope for i, k in enumerate(ls) if i in attn)
    assert all(not k.mlp.gated and k.mlp.f == 32768 for i, k in enumerate(ls) if i in mlp)


def test_jamba_attention_every_eighth_and_experts_every_other():
    ls = _layers("jamba-v0.1")
    assert [i for i, k in enumerate(ls) if isinstance(k.mixer, Attention)] == [4, 12, 20, 28]  # i % 8 == 4
    assert all(type(k.mixer).__name__ == "Mamba1Block" for i, k in enumerate(ls) if i % 8 != 4)
    assert [i for i, k in enumerate(ls) if isinstance(k.mlp, MoEMLP)] == list(range(1, 32, 2))
    assert all(isinstance(k.mlp, DenseMLP) for i, k in enumerate(ls) if i % 2 == 0)
    assert all(not k.mixer.rope for k in ls if isinstance(k.mixer, Attention))


@pytest.mark.parametrize("name", ["llama4-scout", "llama4-maverick"])
def test_llama4_nope_global_every_fourth_layer_chunked_elsewhere(name):
    ls = _layers(name)
    nope = [i for i, k in enumerate(ls) if not k.mixer.rope]
    assert nope == [i for i in range(48) if (i + 1) % 4 == 0]
    assert all(ls[i].mixer.chunk is None for i in nope)
    assert all(k.mixer.chunk == 8192 and k.mixer.rope for i, k in enumerate(ls) if i not in nope)


def test_llama4_maverick_moe_on_odd_layers_dense_16384_on_even():
    ls = _layers("llama4-maverick")
    assert [i for i, k in enumerate(ls) if isinstance(k.mlp, MoEMLP)] == list(range(1, 48, 2))
    assert all(isinstance(k.mlp, DenseMLP) and k.mlp.f == 16384 for k in ls[0::2])
    assert {(k.mlp.num_experts, k.mlp.fe, k.mlp.num_shared, k.mlp.fs) for k in ls[1::2]} == {(128, 8192, 1, 8192)}
    assert all(isinstance(k.mlp, MoEMLP) and k.mlp.num_experts == 16 for k in _layers("llama4-scout"))


def test_kimi_k2_first_layer_dense_then_moe():
    ls = _layers("kimi-k2")
    assert isinstance(ls[0].mlp, DenseMLP) and ls[0].mlp.f == 18432
    assert all(isinstance(k.mlp, MoEMLP) and (k.mlp.num_experts, k.mlp.top_k, k.mlp.num_shared) == (384, 8, 1)
               for k in ls[1:])
    assert all(type(k.mixer).__name__ == "MLA" and k.mixer.a == 64 for k in ls) and len(ls) == 61


def test_mistral_every_layer_slides():
    assert [k.mixer.window for k in _layers("mistral-7b")] == [4096] * 32


# ------------------------------------------------------------------ reader: errors and assumptions
def _write(tmp_path, cfg, folder="m"):
    d = tmp_path / folder
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d / "config.json"


def _cfg(folder):
    return json.loads((ARCH / folder / "config.json").read_text())


def test_unknown_architecture_key_is_an_error(cli, tmp_path):
    p = _write(tmp_path, dict(_cfg("mistral-7b-v0.1"), attention_sink_size=4))
    assert_one_error(cli("explain", "--model", p, "--gpus", "8", "--seq-len", "4096"), str(p),
                     "field `attention_sink_size`", "may change the architecture", "hint: ")
    g = _cfg("gemma-3-27b-it")
    g["text_config"]["num_kv_shared_layers"] = 10
    p = _write(tmp_path, g, "gemma")
    assert_one_error(cli("explain", "--model", p, "--gpus", "8", "--seq-len", "4096"), "field `text_config.num_kv_shared_layers`")
    p = _write(tmp_path, dict(_cfg("gemma-3-27b-it"), audio_config={"hidden_size": 1}), "gemma-audio")
    assert_one_error(cli("explain", "--model", p, "--gpus", "8", "--seq-len", "4096"), "field `audio_config`")


@pytest.mark.parametrize("folder,key,value,field,needle", [
    ("mistral-7b-v0.1", "model_type", "llama", "sliding_window", "which layers use the window is not known for model_type 'llama'"),
    ("jamba-v0.1", "sliding_window", 4096, "sliding_window", "no sliding-window layers"),
    ("gpt-oss-120b", "layer_types", ["full_attention"] * 35, "layer_types", "expected a list of 36 layer types"),
    ("gpt-oss-120b", "layer_types", ["linear_attention"] * 36, "layer_types", "'linear_attention' is not modelled for model_type 'gpt_oss'"),
    ("nemotron-h-56b-base-8k", "hybrid_override_pattern", "M-X", "hybrid_override_pattern", "M, *, - and E"),
    ("nemotron-h-56b-base-8k", "num_hidden_layers", 117, "num_hidden_layers", "118 blocks"),
    ("nemotron-h-56b-base-8k", "mamba_proj_bias", True, "mamba_proj_bias", "differs from use_bias"),
    ("kimi-k2-instruct", "is_encoder_decoder", True, "is_encoder_decoder", "decoder-only"),
    ("gpt-oss-20b", "experts_per_token", 2, "experts_per_token", "num_experts_per_tok is 4"),
    ("gpt-oss-20b", "attention_bias", False, "attention_bias", "gpt-oss experts always carry biases"),
    ("jamba-v0.1", "attn_layer_offset", 8, "attn_layer_offset", "not below attn_layer_period 8"),
    ("qwen3-next-80b-a3b-thinking", "mlp_only_layers", [48], "mlp_only_layers", "48 is outside 0..47"),
])
def test_architecture_keys_the_reader_cannot_honour_are_errors(cli, tmp_path, folder, key, value, field, needle):
    p = _write(tmp_path, dict(_cfg(folder), **{key: value}))
    assert_one_error(cli("explain", "--model", p, "--gpus", "8", "--seq-len", "4096"), str(p), f"field `{field}`", needle)


def test_keys_that_do_not_change_the_cost_are_accepted():
    cfg = dict(_cfg("mistral-7b-v0.1"), quantization_config={"quant_method": "fp8"}, rope_scaling={"factor": 4.0},
               initializer_range=0.01, output_router_logits=True, pretraining_tp=2)
    m = model_from_hf_config(cfg, "config.json")
    assert count_params(m).total == 7_241_732_096


def test_text_config_plans_the_text_model_and_notes_the_vision_tower(cli):
    # --padded-vocab-size: the text model's own 262,208 rows (megatron pads them to 262,272 at tp 1, stack_db vocab_padding)
    r = cli("explain", "--model", ARCH / "gemma-3-27b-it", "--gpus", "8", "--seq-len", "4096", "--global-batch", "8",
            "--padded-vocab-size", "262208", "--stack", "megatron-bridge", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["params"]["total"] == count_params(load_model("gemma3-27b")).total
    assumed = js["assumed"]
    assert any("vision tower not planned: text model only" in a for a in assumed)
    assert "vocab_size absent: transformers' Gemma3TextConfig default 262208" in assumed
    assert "tie_word_embeddings absent: transformers' Gemma3TextConfig default True" in assumed
    assert "sliding_window_pattern absent: transformers' Gemma3TextConfig default 6" in assumed
    r = cli("explain", "--model", ARCH / "gemma-3-27b-it", "--gpus", "8", "--seq-len", "4096", "--global-batch", "8",
            "--stack", "megatron-bridge")
    assert "vision tower not planned: text model only" in r.stdout


def test_llama4_abridged_config_takes_the_text_class_defaults():
    """The abridged Llama 4 configs leave out tie_word_embeddings: Llama4TextConfig says False
    (PretrainedConfig's True would drop the 1.03B-parameter output head)."""
    from planner.catalog import hf_assumptions

    lines = hf_assumptions(_cfg("llama-4-scout-17b-16e-instruct"))
    assert "tie_word_embeddings absent: transformers' Llama4TextConfig default False" in lines
    assert "no_rope_layer_interval absent: transformers' Llama4TextConfig default 4" in lines
    assert any("vision tower not planned" in a for a in lines)
    assert not hf("llama-4-scout-17b-16e-instruct").tied_embeddings


def test_qwen3_moe_without_moe_intermediate_size_takes_the_class_default():
    """Qwen3MoeConfig's moe_intermediate_size default is 768 (not intermediate_size 6144)."""
    from planner.catalog import hf_assumptions
    from test_moe import QWEN3_MOE_HF

    cfg = {k: v for k, v in QWEN3_MOE_HF.items() if k != "moe_intermediate_size"}
    m = model_from_hf_config(cfg, "config.json")
    assert m.moe.expert_ffn_hidden_size == 768
    assert "moe_intermediate_size absent: transformers' Qwen3MoeConfig default 768" in hf_assumptions(cfg)


def test_qwen2_moe_without_moe_intermediate_size_says_so():
    """A model type without a class table: the experts take intermediate_size, listed as assumed."""
    from planner.catalog import hf_assumptions
    from test_moe import QWEN3_MOE_HF

    cfg = {k: v for k, v in QWEN3_MOE_HF.items() if k != "moe_intermediate_size"}
    cfg["model_type"] = "qwen2_moe"
    assert model_from_hf_config(cfg, "config.json").moe.expert_ffn_hidden_size is None
    assert any(a.startswith("moe_intermediate_size absent: routed experts as wide as intermediate_size")
               for a in hf_assumptions(cfg))


def test_mtp_modules_from_num_nextn_predict_layers():
    from test_moe import DEEPSEEK_V3_HF

    m = model_from_hf_config(DEEPSEEK_V3_HF, "config.json")
    assert m.mtp_layers == 1 and layer_list(m).mtp == 1
    assert model_from_hf_config(_cfg("kimi-k2-instruct"), "config.json").mtp_layers == 0


@pytest.mark.parametrize("name,gpus", [
    ("gemma3-27b", 64), ("gpt-oss-120b", 64), ("gpt-oss-20b", 16), ("qwen3-next-80b-a3b", 64),
    ("nemotron-h-56b", 64), ("jamba-v0.1", 64), ("llama4-scout", 64), ("llama4-maverick", 256),
    ("kimi-k2", 2048), ("mistral-7b", 8),
])
def test_fit_and_explain_run_on_every_new_model(cli, name, gpus, unlisted_stack):
    """`fit` ranks plans that fit for each new zoo model (seq 4,096), and `explain` of its top
    row gives the same step time and lists the model's layer kinds. On the default stack (megatron) where
    it builds the model's layers; Llama 4 (chunked attention) on torchtitan, the one shipped stack that
    builds it; Jamba (Mamba-1, which no shipped stack builds) on a stack file listing no layer kinds
    (start-up rule STACK_LAYER_KIND, tests/test_stack_layer_kinds.py)."""
    import json

    stack = {"jamba-v0.1": unlisted_stack, "gemma3-27b": "megatron-bridge", "llama4-scout": "torchtitan", "llama4-maverick": "torchtitan"}.get(name)
    extra = ("--stack", stack) if stack else ()
    r = cli("fit", "--model", name, "--gpus", str(gpus), "--seq-len", "4096", "--top", "1", "--format", "json", *extra)
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["memory"]["fits"] and row["throughput"]["tokens_per_s"] > 0
    from planner.schema import Job
    from planner.search import explain_args

    args = explain_args(Job(model=name, gpus=gpus, seq_len=4096, **({"stack": stack} if stack else {})), row)
    again = cli("explain", *args, "--format", "json")
    assert again.exit_code == 0, again.stderr
    res = json.loads(again.stdout)
    assert res["time"]["step_s"] == row["time"]["step_s"]
    assert sum(k["count"] for k in res["layers"] if not k["layers"].startswith("multi-token")) \
        == load_model(name).num_layers
