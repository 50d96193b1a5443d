"""Kernels that pad the saved log-sum-exp rows (planner/layers/attention.py [ls2], issue 21): each sequence's local
queries rounded up to a multiple of m, 4 B a query head a row.

llm-foundry's Triton FlashAttention (attn_impl triton; mosaicml/llm-foundry @b2a43a147
llmfoundry/models/layers/flash_attn_triton.py l. 617-618: seqlen_q_rounded = ceil(seqlen_q / 128) * 128, l. 816
saved): m 128. MPT-7B (32 layers, 32 heads) at seq 2,000, one GPU's micro-batch of one sequence: 2,048 - 2,000 = 48
rows more a head, 32 heads x 4 B x 48 = 6,144 B a layer, 196,608 B over the 32 layers.

PyTorch's memory-efficient SDPA kernel (logsumexp [B, heads, ceil_div(s, 32) * 32], kAlignLSE 32), which litgpt's
windowed layers run under their dense mask: m 32. Mistral 7B (32 layers, all windowed at 4,096, 32 query heads) at
seq 4,090: 4,096 - 4,090 = 6 rows, 32 x 4 x 6 = 768 B a layer, 24,576 B over 32 layers; a model without a window
runs the flash kernel there: 0.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner.stacks as stacks
from planner.catalog import load_stack
from planner.layers import Ctx
from planner.layers.attention import lse_rows_factor


def _diff(explain, monkeypatch, key, **job):
    on = explain(**job)[3]["memory"]["terms"][key]
    monkeypatch.setattr(stacks, "lse_aligns", lambda stack: (0.0, 0.0))
    off = explain(**job)[3]["memory"]["terms"][key]
    monkeypatch.undo()
    return on - off


def test_hand_figures():
    assert 32 * 4 * (2048 - 2000) == 6_144 and 32 * 6_144 == 196_608
    assert 32 * 4 * (4096 - 4090) == 768 and 32 * 768 == 24_576


def test_rows_factor():
    ctx = Ctx(plan=None, tp=np.float64(1), T=np.float64(2000), seq=np.array([2000.0, 2048.0, 4000.0]),
              cp=np.array([1.0, 1.0, 2.0]), ep=np.float64(1), rep_div=np.float64(1), cf=1.0)
    # 2,000 -> 2,048; 2,048 stays; under CP 2 each rank's 2,000 queries -> 2,048
    assert lse_rows_factor(ctx, 128.0).tolist() == [2048 / 2000, 1.0, 2048 / 2000]
    assert lse_rows_factor(ctx, 0.0).tolist() == [1.0, 1.0, 1.0]


def test_stack_fields():
    assert stacks.lse_aligns(load_stack("llm-foundry")) == (128.0, 0.0)
    assert stacks.lse_aligns(load_stack("litgpt-benchmark")) == (0.0, 32.0)
    for name in ("megatron", "torchtitan", "torchtitan-0.3", "megatron-bridge", "megatron-deepspeed"):
        assert stacks.lse_aligns(load_stack(name)) == (0.0, 0.0)


LLMF = dict(model="mpt-7b", stack="llm-foundry", gpus=8, micro_batch=1, global_batch=8, sharding="fsdp")


def test_llm_foundry_triton_rounds_to_128(explain, monkeypatch):
    assert _diff(explain, monkeypatch, "layer_activations", seq_len=2000, recompute="none", **LLMF) == pytest.approx(196_608, abs=0.01)
    assert _diff(explain, monkeypatch, "layer_activations", seq_len=2048, recompute="none", **LLMF) == pytest.approx(0.0, abs=0.01)


def test_llm_foundry_full_recompute_one_layer(explain, monkeypatch):
    """Full recompute (llm-foundry's activation checkpointing) keeps none; the re-run layer's buffer holds one
    layer's padded statistics."""
    assert _diff(explain, monkeypatch, "layer_activations", seq_len=2000, recompute="full", **LLMF) == pytest.approx(0.0, abs=0.01)
    assert _diff(explain, monkeypatch, "recompute_buffer", seq_len=2000, recompute="full", **LLMF) == pytest.approx(6_144, abs=0.01)


LIT = dict(stack="litgpt-benchmark", gpus=8, micro_batch=1, global_batch=8, sharding="fsdp", recompute="none")


def test_litgpt_windowed_layers_pad_to_32(explain, monkeypatch):
    assert _diff(explain, monkeypatch, "layer_activations", model="mistral-7b", seq_len=4090, **LIT) == pytest.approx(24_576, abs=0.01)
    assert _diff(explain, monkeypatch, "layer_activations", model="mistral-7b", seq_len=4096, **LIT) == pytest.approx(0.0, abs=0.01)
    assert _diff(explain, monkeypatch, "layer_activations", model="llama2-7b", seq_len=4090, **LIT) == pytest.approx(0.0, abs=0.01)
