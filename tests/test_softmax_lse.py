"""The fused attention core's saved fp32 softmax statistics (planner/layers/attention.py [ls], issue 21): one
log-sum-exp a query head and query token, 4 B, kept with the core's state.

Llama 3 70B: 80 layers, 64 query heads (8 KV heads), head dim 128. At TP 8 a GPU holds 64 / 8 = 8 query heads, so
at 8,192 tokens one layer keeps 8 x 4 B x 8,192 = 262,144 B and the 80 layers 20,971,520 B; under CP 2 each rank
keeps its 4,096 local tokens' (half)."""

from __future__ import annotations

import planner.layers.attention as attention
from planner.layers import context, layer_list
from planner.plan import PlanArrays
from planner.schema import ModelSpec
from planner.catalog import load_model

PER_LAYER = 64 // 8 * 4 * 8192  # 262,144 B
ALL_LAYERS = PER_LAYER * 80  # 20,971,520 B
BASE = dict(model="llama3-70b", gpus=8, tp=8, micro_batch=1, global_batch=1, seq_len=8192)


def _mem(explain, monkeypatch, lse: bool, **fields):
    """explain's memory of the job with the statistics priced (lse) or their bytes set to 0."""
    monkeypatch.setattr(attention, "SOFTMAX_LSE_BYTES", 4.0 if lse else 0.0)
    return explain(**(BASE | fields))[3]["memory"]


def _diff(explain, monkeypatch, key, **fields):
    on, off = _mem(explain, monkeypatch, True, **fields), _mem(explain, monkeypatch, False, **fields)
    return on["terms"][key] - off["terms"][key], on["total_bytes"] - off["total_bytes"]


def test_hand_figure_no_recompute(explain, monkeypatch):
    """No recompute, Megatron (TE's fused attention: cuDNN Stats [b, h, s, 1] fp32): 20,971,520 B of layer
    activations, and the total moves by as much."""
    assert ALL_LAYERS == 20_971_520
    kept, total = _diff(explain, monkeypatch, "layer_activations", recompute="none")
    assert kept == ALL_LAYERS and total == ALL_LAYERS


def test_full_recompute_keeps_none_but_the_layer_under_rerun(explain, monkeypatch):
    """Full recompute keeps each layer's input only: the statistics live in the one re-run layer's buffer."""
    kept, _ = _diff(explain, monkeypatch, "layer_activations", recompute="full")
    held, total = _diff(explain, monkeypatch, "recompute_buffer", recompute="full")
    assert kept == 0.0 and held == PER_LAYER and total == PER_LAYER


def test_megatron_selective_reruns_the_core(explain, monkeypatch):
    """Megatron's selective recompute (core_attn) re-runs the core: its statistics are not kept, one layer's are
    re-made in the selective buffer."""
    kept, _ = _diff(explain, monkeypatch, "layer_activations", recompute="selective")
    held, _ = _diff(explain, monkeypatch, "recompute_buffer", recompute="selective")
    assert kept == 0.0 and held == PER_LAYER


def test_torchtitan_op_sac_saves_the_sdpa_outputs(explain, monkeypatch):
    """torchtitan's per-op policy saves the SDPA op's outputs (its logsumexp among them): kept under selective;
    with the run's selective_recomputes_attention (the op is not on its save list) not kept."""
    job = dict(stack="torchtitan", gpus=16, global_batch=2, sharding="fsdp", recompute="selective")
    kept, total = _diff(explain, monkeypatch, "layer_activations", **job)
    assert kept == ALL_LAYERS and total == ALL_LAYERS
    kept, _ = _diff(explain, monkeypatch, "layer_activations", **job, selective_recomputes_attention=True)
    assert kept == 0.0


def test_context_parallel_keeps_the_local_tokens(explain, monkeypatch):
    """CP 2: each rank saves the statistics of its 4,096 local query tokens (TE's merged lse [b, a/t, s/cp])."""
    kept, _ = _diff(explain, monkeypatch, "layer_activations", gpus=16, cp=2, recompute="none")
    assert kept == ALL_LAYERS / 2 == 10_485_760


def test_eager_core_saves_no_statistics(explain, monkeypatch):
    """An eager core saves its softmax output (the "scores" tensor), no log-sum-exp."""
    kept, total = _diff(explain, monkeypatch, "layer_activations", stack="megatron-deepspeed", attention="eager",
                        recompute="none")
    assert kept == 0.0 and total == 0.0


def _table(model, attn="flash"):
    spec = load_model(model) if isinstance(model, str) else model
    assert isinstance(spec, ModelSpec)
    one = PlanArrays(tp=1, cp=1, pp=1, vpp=1, dp=1, mbs=1, gbs=1, seq=4096, sharding=0, shard=1, recompute=0, sp=0,
                     schedule=0, precision=0)
    ll = layer_list(spec)
    return [ll.kinds[i].mixer.tensors(context(one), attn) for i in range(len(ll.kinds)) if ll.kinds[i].mixer.kind == "attention"]


def test_mla_counts_its_query_heads():
    """MLA (DeepSeek-V3, 128 heads): 4 B x 128 a token, split over TP; eager: 0."""
    t = _table("deepseek-v3")[0]
    assert t["softmax_lse"] == (4.0 * 128, "split")
    assert _table("deepseek-v3", "eager")[0]["softmax_lse"][0] == 0.0


def test_gqa_counts_query_heads_not_kv_heads():
    """GQA: one statistic a query head (Llama 3 70B: 64, not its 8 KV heads)."""
    assert _table("llama3-70b")[0]["softmax_lse"] == (4.0 * 64, "split")
