"""The word embedding's weight gradient on the first pipeline stage (issue 21; planner/memory.py [eg]).
Megatron's VocabParallelEmbedding is not a TE linear (NVIDIA/Megatron-LM @d98e8a64
megatron/core/tensor_parallel/layers.py l. 336-365: F.embedding(masked_input, weight)): autograd's
embedding backward (pytorch/pytorch @01b9dc56 aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu
embedding_backward_cuda_kernel) allocates a dense (V / t) x h gradient in the gradient's dtype (bf16) and
fp32 partial sums of one row per index (T x h), and Megatron's DDP hook adds the gradient into main_grad and
frees it (distributed/distributed_data_parallel.py l. 575-579). It is the last op of a micro-batch's
backward on the first stage: by then that micro-batch's layer activations and the recompute buffer are
freed. Figures by hand for Llama 3 8B (h 4096, vocab 128256) at seq 4096, micro-batch 1, TP 1."""

from __future__ import annotations

import pytest

from planner.memory import _PerLayer, stage_memory_terms
from planner.params import count_params
from tests.conftest import explain_job

H, V, T = 4096, 128256, 4096
MOMENT = 2 * V * H + T * (4 + 2) * H  # bf16 gradient + fp32 partials + the incoming bf16 gradient: 1,151,336,448 B
KW = dict(model="llama3-8b", gpus=8, hardware="h100-sxm", stack="megatron", precision="bf16",
          global_batch=16, seq_len=T, tp=1, dp=2, pp=4, micro_batch=1, recompute="full", sharding="zero1")


def test_moment_by_hand():
    settings, plan, _, _ = explain_job(**KW)
    assert float(_PerLayer(settings, plan, count_params(settings.model)).emb_wgrad) == MOMENT == 1_151_336_448


def test_first_stage_peak_at_the_embedding_backward():
    # PP 4 under full recompute: 8 layers a stage, 4 micro-batches in flight on the first stage, each layer
    # keeping its input (2 B T h); the re-run layer's buffer on a middle stage is the moment's other part
    settings, plan, _, _ = explain_job(**KW)
    st = stage_memory_terms(settings, plan)
    per_mb = 8 * 2 * T * H  # 268,435,456 B: the micro-batch whose backward ends
    assert float(st[0]["layer_activations"]) == 4 * per_mb
    mid_buf = float(st[2]["recompute_buffer"])
    assert float(st[0]["recompute_buffer"]) == mid_buf + (MOMENT - per_mb - mid_buf)  # 346,030,080 B more


def test_not_the_peak_on_one_stage():
    # PP 1: the moment comes after the loss's and the 32 layers' backward; their peak holds more
    settings, plan, _, _ = explain_job(**dict(KW, pp=1, dp=8, global_batch=8))
    terms = stage_memory_terms(settings, plan)[0]
    # one re-run layer's (0.5 GiB, with its fused core's fp32 log-sum-exp, T x 32 heads x 4 B: layers/attention.py
    # [ls]), no excess
    assert float(terms["recompute_buffer"]) == 2**29 + T * 32 * 4


@pytest.mark.parametrize("fields", [dict(sharding="fsdp", stack="torchtitan", recompute="full"),
                                    dict(stack="torchtitan", sharding="none", pp=1, dp=8, global_batch=8)])
def test_only_where_the_stack_says(fields):
    settings, plan, _, _ = explain_job(**dict(KW, **fields))
    assert _PerLayer(settings, plan, count_params(settings.model)).emb_wgrad is None


def test_none_under_fsdp():
    # Megatron's FSDP modes run the embedding's gradient through their own path (not priced here)
    settings, plan, _, _ = explain_job(**dict(KW, sharding="fsdp", pp=1, dp=8, global_batch=8))
    assert float(_PerLayer(settings, plan, count_params(settings.model)).emb_wgrad) == 0.0
