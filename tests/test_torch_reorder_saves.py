"""What torchtitan's standard reorder and combine save for the backward beyond the generic table, on the all-to-all
plans (issue 21; layers/moe.py [22], memory.py [ro], stack memory.reorder_combine_saves), by hand.

pytorch/torchtitan @e347b1e5e torchtitan/models/moe/moe.py:
  l. 408-412 argsort(ids.view(-1)): int64 [n k], kept by the scores' IndexBackward0 and l. 537's index_put_;
  l. 515 x[argsort // top_k]: a second int64 [n k] tensor, kept by IndexBackward0: 16 k B a token;
  l. 517-521 (score_before_experts, Qwen3) routed_input.to(float32) * scores: MulBackward0 keeps the fp32 input rows
  (4 h B a row) and the fp32 scores (4 B a row); l. 541-549 (DeepSeek-V3) bmm(scores, out.float()) keeps the fp32
  outputs and scores, the same bytes.
release/0.3 @4f9e9a47d torchtitan/models/common/token_dispatcher.py _local_reorder l. 93-100 (16 k B a token) and
combine l. 616-619 (the fp32 expert rows and scores, 4 h + 4 B a row).
No bf16 expert output row is kept; the generic moe_expert_out (2 h B a row) stands for half the fp32 copy, so beyond
it 2 h + 4 B a row over n k rows, + 16 k B a token. Op SAC: nothing on either save list (re-made in the re-run).

Qwen3-30B-A3B (h 2,048, k 8), 8 H100s, EP 8, FSDP 8, seq 4,096, micro-batch 1: n = 4,096 local tokens,
per MoE layer and micro-batch:
  no recompute   8 x (2 x 2,048 + 4) + 16 x 8 = 32,928 B a token: 134,873,088 B kept
  op SAC         nothing kept; 134,873,088 B re-made in the re-run layer's buffer
  full AC        nothing kept by a re-run layer; 134,873,088 B in its buffer
Llama 4 Scout (h 5,120, k 1): 10,244 + 16 = 10,260 B a token, 42,024,960 B.
"""

from __future__ import annotations


import pytest

from conftest import layer_activations_with_and_without, moe_layer_saves
from planner.catalog import load_stack
from planner.memory import torch_reorder_saves

N = 4096
QWEN = dict(model="qwen3-30b-a3b", gpus=8, ep=8, sharding="fsdp", global_batch=8, seq_len=4096, hardware="h100-sxm")
PER_LAYER = 134_873_088


def _saves(**job):
    return moe_layer_saves(torch_reorder_saves, **job)


def test_hand_figures():
    assert 8 * (2 * 2048 + 4) + 16 * 8 == 32_928
    assert N * 32_928 == PER_LAYER
    assert N * (1 * (2 * 5120 + 4) + 16 * 1) == 42_024_960


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-0.3"])
def test_by_recompute_mode(stack):
    """Both commits keep the same bytes (main by score_before_experts' place, 0.3 at the combine); op SAC keeps
    none; full recompute's first figure is what the layers it does not re-run keep."""
    assert load_stack(stack).memory.reorder_combine_saves is True
    assert _saves(stack=stack, recompute="none", **QWEN) == (PER_LAYER, 0.0)
    assert _saves(stack=stack, recompute="selective", **QWEN) == (0.0, PER_LAYER)
    assert _saves(stack=stack, recompute="full", **QWEN) == (PER_LAYER, PER_LAYER)


def test_llama4_scout():
    job = {**QWEN, "model": "llama4-scout"}
    assert _saves(stack="torchtitan", recompute="none", **job) == (42_024_960, 0.0)


def test_other_dispatchers_and_stacks_price_none():
    """DeepEP runs no reorderer (main moe_deepep.py l. 48-81; 0.3's DeepEP and HybridEP dispatchers their own);
    Megatron-Core's dispatcher is priced by its own terms."""
    v3 = {**QWEN, "model": "deepseek-v3"}
    assert _saves(stack="torchtitan", recompute="none", **v3)[0] > 0.0
    assert _saves(stack="torchtitan", recompute="none", moe_dispatcher="deepep", **v3) == (0.0, 0.0)
    assert _saves(stack="megatron", recompute="none", **{**QWEN, "sharding": "zero1"}) == (0.0, 0.0)
    for name in ("megatron", "megatron-bridge", "llm-foundry", "megatron-deepspeed"):
        assert load_stack(name).memory.reorder_combine_saves is False


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-0.3"])
def test_explain_layer_activations(stack):
    """explain's layer_activations (48 MoE layers, one micro-batch in flight) rise by 48 x 134,873,088 B without
    recompute over the same job with the field off."""
    settings, on, off = layer_activations_with_and_without("reorder_combine_saves", False, stack=stack,
                                                           recompute="none", **QWEN)
    assert settings.model.num_layers == 48 and settings.model.hidden_size == 2048
    assert on - off == 48 * PER_LAYER
