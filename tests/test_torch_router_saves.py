"""What torchtitan's MoE router saves for the backward on every dispatcher, the standard all-to-all first (issue 21;
layers/moe.py [21], memory.py [tr], stack memory.router_topk_saves, model moe.route_norm), by hand.

pytorch/torchtitan @e347b1e5e torchtitan/models/moe/moe.py TokenChoiceTopKRouter.forward (release/0.3 @4f9e9a47d
torchtitan/models/common/moe.py l. 297-341 the same ops):
  l. 326-328 `_, ids = torch.topk(scores_for_choice, k)`: the values dropped, TopkBackward0 freed with them;
  l. 333 `top_scores = scores.gather(dim=1, index=ids)`: GatherBackward0 keeps the int64 [n, k] index, 8 k B a token;
  l. 342-344 (route_norm) `top_scores / (top_scores.sum(-1, keepdim=True) + 1e-20)`: DivBackward0 keeps both fp32
  operands, [n, k] and [n, 1], 4 k + 4 B a token.
Op-level SAC: main's save lists (models/deepseek_v3/infra/parallelize.py l. 33-48; qwen3, llama4, gpt_oss alike)
hold no aten.topk, so the router keeps nothing and its re-run re-makes all of it; 0.3's
(distributed/activation_checkpoint.py l. 51-53) caches topk's fp32 values and int64 indices, 12 k B a token, and
the re-run re-makes the division's operands only (the gather re-runs on the cached index).

Qwen3-30B-A3B (k 8, norm_topk_prob true: route_norm), 8 H100s, EP 8, FSDP 8, seq 4,096, micro-batch 1:
n = 4,096 local tokens (tp 1), per MoE layer and micro-batch:
  no recompute   8 x 8 + 4 x 8 + 4 = 100 B a token: 409,600 B kept
  op SAC, main   nothing kept; 409,600 B re-made in the re-run layer's buffer
  op SAC, 0.3    12 x 8 = 96 B a token: 393,216 B kept; 4 x 8 + 4 = 36 B (147,456 B) re-made
  full AC        nothing kept by a re-run layer; 409,600 B re-made in its buffer
Llama 4 Scout (k 1, no route_norm) on main without recompute: 8 B a token, 32,768 B.
"""

from __future__ import annotations


import pytest

from conftest import layer_activations_with_and_without, moe_layer_saves
from planner.catalog import load_stack
from planner.memory import torch_router_saves

N = 4096
QWEN = dict(model="qwen3-30b-a3b", gpus=8, ep=8, sharding="fsdp", global_batch=8, seq_len=4096, hardware="h100-sxm")


def _saves(**job):
    return moe_layer_saves(torch_router_saves, **job)


def test_hand_figures():
    assert N * (8 * 8 + 4 * 8 + 4) == 409_600
    assert N * 12 * 8 == 393_216
    assert N * (4 * 8 + 4) == 147_456
    assert N * 8 * 1 == 32_768


@pytest.mark.parametrize("stack, saves, selective", [
    # torchtitan main (recompute_topk): the op SAC keeps nothing, re-makes all of it
    ("torchtitan", "recompute_topk", (0.0, 409_600)),
    # torchtitan 0.3 (cache_topk): the op SAC keeps topk's cached outputs
    ("torchtitan-0.3", "cache_topk", (393_216, 147_456)),
])
def test_by_recompute_mode(stack, saves, selective):
    """Each torchtitan stack's router_topk_saves and its (kept, re-made) per recompute mode (module docstring); full
    recompute's first figure is what the layers it does not re-run keep."""
    assert load_stack(stack).memory.router_topk_saves == saves
    assert _saves(stack=stack, recompute="none", **QWEN) == (409_600, 0.0)
    assert _saves(stack=stack, recompute="selective", **QWEN) == selective
    assert _saves(stack=stack, recompute="full", **QWEN) == (409_600, 409_600)


def test_without_route_norm_the_index_alone():
    job = {**QWEN, "model": "llama4-scout"}
    assert _saves(stack="torchtitan", recompute="none", **job) == (32_768, 0.0)


def test_other_stacks_price_none():
    """Megatron-Core prices its own router saves (moe_routing_saved, layers/moe.py [10]); the field is the
    torchtitan stacks' alone."""
    assert _saves(stack="megatron", recompute="none", **{**QWEN, "sharding": "zero1"}) == (0.0, 0.0)
    for name in ("megatron", "megatron-bridge", "llm-foundry", "megatron-deepspeed"):
        assert load_stack(name).memory.router_topk_saves is None


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-0.3"])
def test_explain_layer_activations(stack):
    """explain's layer_activations (48 MoE layers, one micro-batch in flight) rise by 48 x 409,600 B without
    recompute over the same job with the field off, on the standard all-to-all (the job's dispatcher)."""
    settings, on, off = layer_activations_with_and_without("router_topk_saves", None, stack=stack,
                                                           recompute="none", **QWEN)
    assert settings.model.num_layers == 48
    assert on - off == 48 * 409_600


def test_route_norm_read():
    """The field from config.json norm_topk_prob (the catalog entries say where it comes from) and torchtitan's
    registry (MoEArgs route_norm: the Qwen3 MoE flavors and DeepSeek-V3 671B true, 16B false)."""
    from planner.catalog import load_model
    assert load_model("qwen3-30b-a3b").moe.route_norm is True
    assert load_model("deepseek-v3").moe.route_norm is True
    assert load_model("llama4-scout").moe.route_norm is False
    assert load_model("torchtitan:deepseek_v3/671B").moe.route_norm is True
    assert load_model("torchtitan:deepseek_v3/16B").moe.route_norm is False
    assert load_model("torchtitan:qwen3/30B-A3B").moe.route_norm is True


@pytest.mark.parametrize("name, entry, want", [
    ("qwen3-30b-a3b", "qwen3-30b-a3b", True), ("deepseek-v3", "deepseek-v3", True),
    ("mixtral-8x7b-v0.1", "mixtral-8x7b", True), ("gpt-oss-20b", "gpt-oss-20b", True),
    ("llama-4-scout-17b-16e-instruct", "llama4-scout", False), ("jamba-v0.1", "jamba-v0.1", False)])
def test_route_norm_from_config_json(name, entry, want):
    """config.json norm_topk_prob where it says (Qwen3, DeepSeek-V3); Mixtral's and gpt-oss's routers renormalise
    without the key (the softmax over the top-k logits); Llama 4 and Jamba say nothing and do not; and each catalog
    entry agrees with its config.json."""
    from pathlib import Path

    from planner.catalog import load_model
    m = load_model(str(Path(__file__).parent / "data" / "arch" / name / "config.json"))
    assert m.moe.route_norm is want
    assert load_model(entry).moe.route_norm is want
