"""Mixture-of-experts models, multi-head latent attention and expert parallelism
(planner/moe.py, params.py, catalog.py's HF reader).

Published figures the parameter counts are checked against (the cards round or truncate to
the printed digit: DeepSeek-V3's 37.55B active prints as "37B"):
  DeepSeek-V3 report (arXiv:2412.19437) abstract: 671B total, 37B activated per token.
  Mixtral 8x7B model card / announcement: 46.7B total, 12.9B per token.
  Mixtral 8x22B announcement: 141B total, 39B active.
  Qwen3-30B-A3B model card: 30.5B total, 3.3B activated; Qwen3-235B-A22B: 235B / 22B.
"""

from __future__ import annotations

import json
import math

import pytest

from planner.catalog import load_model, model_from_hf_config
from planner.compute import flops_per_token
from planner.errors import PlannerError
from planner.params import moe_layer_count
from planner.params import count_params
from planner.schema import ModelSpec


@pytest.mark.parametrize("name,total,active,digits", [
    ("deepseek-v3", 671, 37, 0),  # report: 671B / 37B (truncated)
    ("mixtral-8x7b", 46.7, 12.9, 1),
    ("mixtral-8x22b", 141, 39, 0),
    ("qwen3-30b-a3b", 30.5, 3.3, 1),
    ("qwen3-235b-a22b", 235, 22, 0),
])
def test_total_and_active_parameters_match_the_model_cards(name, total, active, digits):
    """The published figure is the count rounded (Mixtral: 12.88 -> 12.9) or truncated
    (DeepSeek-V3: 37.55 -> 37; Qwen3-30B-A3B: 3.353 -> 3.3) to its last printed digit."""
    pc = count_params(load_model(name))
    unit = 10.0 ** -digits
    for got, card in ((pc.total / 1e9, total), (pc.active / 1e9, active)):
        assert card - unit / 2 <= got < card + unit, (name, got, card)


def test_mixtral_8x7b_count_by_hand():
    """Per layer: attention 4096*4096*2 + 2*4096*1024 = 41,943,040; 8 experts of 3*4096*14336
    = 176,160,768; router 4096*8; two RMSNorms 2*4096. 32 layers + 2 embeddings of
    32000*4096 + the final norm."""
    pc = count_params(load_model("mixtral-8x7b"))
    layer = 41_943_040 + 8 * 176_160_768 + 32_768 + 8_192
    assert pc.total == 32 * layer + 2 * 32_000 * 4096 + 4096 == 46_702_792_704
    active_layer = 41_943_040 + 2 * 176_160_768 + 32_768 + 8_192
    assert pc.active == 32 * active_layer + 2 * 32_000 * 4096 + 4096 == 12_879_925_248
    assert pc.routed_experts == 32 * 8 * 176_160_768


def test_deepseek_v3_mla_and_dense_layers_by_hand():
    """MLA per layer: q_a 7168*1536, q_b 1536*128*192, kv_a 7168*(512+64), kv_b 512*128*256,
    output 128*128*7168; latent norms 1536 + 512. Dense layers (3): MLP 3*7168*18432. MoE
    layers (58): 256 + 1 shared experts of 3*7168*2048, router 256*7168 + 256 bias."""
    pc = count_params(load_model("deepseek-v3"))
    assert pc.attention == 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    assert pc.attn_replicated == 7168 * 1536 + 7168 * 576 + 1536 + 512
    assert pc.moe_layers == 58 and pc.dense_layers == 3
    assert pc.expert == 3 * 7168 * 2048 and pc.shared == 3 * 7168 * 2048
    assert pc.router == 256 * 7168 + 256
    attn = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168 + 7168 * 1536 + 7168 * 576 + 1536 + 512 + 2 * 7168
    total = 61 * attn + 3 * 3 * 7168 * 18432 + 58 * (257 * 3 * 7168 * 2048 + 256 * 7168 + 256) + 2 * 129280 * 7168 + 7168
    assert pc.total == total == 671_026_419_200


def test_moe_layer_pattern():
    m = load_model("deepseek-v3").moe
    assert int(moe_layer_count(m, 0, 61)) == 58
    assert int(moe_layer_count(m, 0, 3)) == 0 and int(moe_layer_count(m, 0, 4)) == 1
    assert list(moe_layer_count(m, [0, 2, 10], [2, 5, 20])) == [0, 2, 10]
    every_other = m.model_copy(update=dict(first_k_dense=1, layer_freq=2))
    # layers 2, 4, 6, 8 of [0, 10) (i >= 1 and i % 2 == 0)
    assert int(moe_layer_count(every_other, 0, 10)) == 4


def test_model_flops_use_the_active_parameters_and_mla_head_dims():
    """6N with N active; attention 12 L a d s with d = (192 + 128) / 2 for DeepSeek-V3's MLA,
    i.e. 6 L a (d_qk + d_v) s."""
    m = load_model("deepseek-v3")
    pc = count_params(m)
    t = flops_per_token(m, 4096, 0)
    assert float(t.dense) == 6.0 * pc.active
    assert float(t.attention) == 6.0 * 61 * 128 * (192 + 128) * 4096
    dense = load_model("llama3-70b")
    assert float(flops_per_token(dense, 8192, 0).dense) == 6.0 * count_params(dense).total


def test_moe_spec_validation():
    base = dict(load_model("mixtral-8x7b").model_dump())
    bad = dict(base, moe=dict(num_experts=8, top_k=9))
    with pytest.raises(Exception, match="top_k"):
        ModelSpec(**bad)
    with pytest.raises(Exception, match="num_kv_heads"):
        ModelSpec(**dict(load_model("deepseek-v3").model_dump(), num_kv_heads=8))


# ------------------------------------------------------------------ Hugging Face configs
MIXTRAL_HF = {  # mistralai/Mixtral-8x7B-v0.1 config.json (the fields the reader uses)
    "model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1e6, "tie_word_embeddings": False,
    "num_local_experts": 8, "num_experts_per_tok": 2,
}
DEEPSEEK_V3_HF = {  # deepseek-ai/DeepSeek-V3 config.json
    "model_type": "deepseek_v3", "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
    "rope_theta": 10000, "tie_word_embeddings": False, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "num_nextn_predict_layers": 1,
}
QWEN3_MOE_HF = {  # Qwen/Qwen3-30B-A3B config.json
    "model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
    "tie_word_embeddings": False,
}


@pytest.mark.parametrize("cfg,zoo", [(MIXTRAL_HF, "mixtral-8x7b"), (DEEPSEEK_V3_HF, "deepseek-v3"),
                                     (QWEN3_MOE_HF, "qwen3-30b-a3b")])
def test_hf_configs_load_with_the_zoo_parameter_counts(cfg, zoo):
    m = model_from_hf_config(cfg, "config.json")
    pc, ref = count_params(m), count_params(load_model(zoo))
    assert (pc.total, pc.active) == (ref.total, ref.active)
    assert m.moe == load_model(zoo).moe
    assert m.mla == load_model(zoo).mla


def test_hf_qwen2_moe_shared_expert():
    """Qwen2-MoE: one shared expert of shared_expert_intermediate_size with a sigmoid gate (h)."""
    cfg = dict(QWEN3_MOE_HF, model_type="qwen2_moe", shared_expert_intermediate_size=5632, moe_intermediate_size=1408,
               num_experts=60, num_experts_per_tok=4)
    pc = count_params(model_from_hf_config(cfg, "config.json"))
    assert pc.shared == 3 * 2048 * 5632 + 2048
    assert pc.expert == 3 * 2048 * 1408 and pc.num_experts == 60 and pc.top_k == 4


def test_hf_moe_patterns_it_cannot_model_are_errors(tmp_path, cli):
    from conftest import assert_one_error

    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(QWEN3_MOE_HF, decoder_sparse_step=2)))
    r = cli("explain", "--model", str(p), "--gpus", "8")
    assert_one_error(r, "decoder_sparse_step", str(p))
    p.write_text(json.dumps(dict(QWEN3_MOE_HF, mlp_only_layers=[0, 5])))
    assert_one_error(cli("explain", "--model", str(p), "--gpus", "8"), "mlp_only_layers")
    with pytest.raises(PlannerError, match="num_experts_per_tok"):
        model_from_hf_config({k: v for k, v in MIXTRAL_HF.items() if k != "num_experts_per_tok"}, "c.json")
