"""Attention kinds (planner/layers/attention.py): sliding-window, chunked and NoPE layers
priced by the keys each query attends to. Cases derived by hand in each docstring."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_model
from planner.compute import flops_per_token
from planner.layers import context, layer_list
from planner.layers.attention import mean_causal_keys, span_keys
from planner.plan import PlanArrays
from planner.schema import ModelSpec


def _variant(pattern: list[dict] | None, name="llama3-8b", **kw) -> ModelSpec:
    """llama3-8b's shape with each layer kind of `pattern` (mixer specs), repeated."""
    base = load_model(name).model_dump()
    base.update(kw)
    if pattern is not None:
        base["layer_kinds"] = {f"k{i}": {"mixer": mixer} for i, mixer in enumerate(pattern)}
        base["layer_pattern"] = [f"k{i}" for i in range(len(pattern))]
    return ModelSpec.model_validate(base)


def test_mean_keys_by_hand():
    """s = 32,768. Global: s/2 = 16,384. Sliding w = 4,096: the first w queries ramp up
    (w^2/2 keys in all), the other s - w attend to w: (w^2/2 + (s - w) w) / s = w - w^2/(2s) =
    4,096 - 256 = 3,840. Chunked c = 8,192 (4 whole chunks): c/2 = 4,096; s = 10,000 with
    c = 8,192: (8,192^2 + 1,808^2) / 20,000 = 3,518.8864. A window or chunk longer than the
    sequence is a global layer."""
    assert float(mean_causal_keys(32768)) == 16384.0
    assert float(mean_causal_keys(32768, window=4096)) == 3840.0
    assert float(mean_causal_keys(32768, chunk=8192)) == 4096.0
    assert float(mean_causal_keys(10000, chunk=8192)) == pytest.approx(3518.8864, rel=1e-12)
    assert float(mean_causal_keys(2048, window=4096)) == float(mean_causal_keys(2048, chunk=4096)) == 1024.0
    assert float(span_keys(32768, window=4096)) == 4096.0 and float(span_keys(1000, window=4096)) == 1000.0


def test_sliding_window_model_flops_at_32k_by_the_pattern_ratio():
    """Mistral-7B-style (every layer a 4,096-token window) and gpt-oss-style (sliding 128 and
    global alternating) against the same config with every layer global, at 32k tokens: the
    attention FLOPs per token fall by the pattern's ratio of keys. PaLM's non-causal
    convention: 4,096 / 32,768 = 1/8 all-sliding; (128 + 32,768) / 2 / 32,768 alternating.
    Causal: 3,840 / 16,384; alternating (128 - 128^2/65,536 + 16,384) / 2 / 16,384. The 6N
    term does not change."""
    glob = _variant(None, max_seq_len=32768)
    slide = _variant([{"kind": "sliding", "window": 4096}], max_seq_len=32768)
    alt = _variant([{"kind": "sliding", "window": 128}, {"kind": "global"}], max_seq_len=32768)
    for causal, r_slide, r_alt in ((False, 4096 / 32768, (128 + 32768) / 2 / 32768),
                                   (True, 3840 / 16384, (128 - 128 ** 2 / 65536 + 16384) / 2 / 16384)):
        g = flops_per_token(glob, 32768, 0, causal)
        s = flops_per_token(slide, 32768, 0, causal)
        a = flops_per_token(alt, 32768, 0, causal)
        assert float(s.attention) == pytest.approx(r_slide * float(g.attention), rel=1e-12)
        assert float(a.attention) == pytest.approx(r_alt * float(g.attention), rel=1e-12)
        assert float(s.dense) == float(g.dense) == float(a.dense)
    # a global layer's 12 a d s: llama3-8b's 32 layers x 32 heads x 128 x 32,768
    assert float(flops_per_token(glob, 32768, 0).attention) == 12.0 * 32 * 32 * 128 * 32768


def test_sliding_layers_cut_the_core_time_and_the_cp_ring(explain, tmp_path):
    """At 32k tokens the kernel runs mean keys x 4 T a d / t: a 4,096 window needs 3,840 /
    16,384 of a global layer's core time. Context parallel 8 splits 32,768 tokens into 4,096
    per rank: a 4,096 window reaches one rank back (ceil(4,095 / 4,096) = 1 send instead of 7),
    so the ring moves 1/7 of the global layer's K/V bytes. The megatron stack (Transformer
    Engine's P2P ring) sends them as: forward one K/V send a step after the first (n = sends);
    backward K/V at the first step, dK/dV alone at the last, K/V + dK/dV as one buffer in
    between (n - 1). Each send pays the link's latency once: global 7 + 2 + 6 messages (7 + 2
    + 12 K/V units of bytes), sliding 1 + 2 (3 units). Transformer Engine itself refuses a window under
    its P2P ring (start-up rule MEGATRON_CP_SLIDING_WINDOW, the stack's cp_comm_types.no_sliding_window):
    the ring's arithmetic is checked on a stack file that is the megatron entry without that list (a
    stack whose ring runs windows)."""
    import yaml

    from planner.catalog import stack_dir

    files = {}
    for name, pattern in (("glob", None), ("slide", [{"kind": "sliding", "window": 4096}])):
        m = _variant(pattern, max_seq_len=32768)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(m.model_dump(exclude_none=True)))
        files[name] = str(path)
    stack = yaml.safe_load((stack_dir() / "megatron.yaml").read_text())
    del stack["cp_comm_types"]["no_sliding_window"]
    (tmp_path / "ring.yaml").write_text(yaml.safe_dump(stack))
    job = dict(gpus=64, tp=1, cp=8, pp=1, global_batch=8, micro_batch=1, seq_len=32768, sharding="zero1",
               stack=str(tmp_path / "ring.yaml"))
    _, _, eg, jg = explain(model=files["glob"], **job)
    _, _, es, js = explain(model=files["slide"], **job)
    from planner import comm
    from planner.catalog import load_hardware

    kv = 4096 * 2 * 8 * 128 * 2  # 4,096 local tokens, K and V of 8 KV heads, bf16
    bw = load_hardware("h100-sxm").nvlink_GBps * 1e9 * comm.NVLINK_RING_EFFICIENCY  # cp 8 inside a node

    def t(size):
        return comm.NVLINK_LATENCY_S + size / bw

    glob, slide = 9 * t(kv) + 6 * t(2 * kv), 3 * t(kv)
    assert js["time"]["cp_comm_total_s"] / jg["time"]["cp_comm_total_s"] == pytest.approx(slide / glob, rel=1e-12)
    # the bytes are 1/7: only the messages' latencies keep the ratio off it
    assert (slide - 3 * comm.NVLINK_LATENCY_S) / (glob - 15 * comm.NVLINK_LATENCY_S) == pytest.approx(1 / 7, rel=1e-12)
    assert js["time"]["compute_s"] < jg["time"]["compute_s"]
    assert js["flops"]["attention_flops_per_token"] == pytest.approx(jg["flops"]["attention_flops_per_token"] / 8)
    # the memory is the same: FlashAttention keeps no score matrix either way
    assert js["memory"]["activations_bytes"] == jg["memory"]["activations_bytes"]


def test_nope_layers_skip_the_rotary_kernel():
    """A NoPE layer (Llama 4's every fourth, Nemotron-H, Jamba) runs no rotary embedding: its
    forward memory-bound bytes are the RoPE layer's less rope x (a/t + k/t) d x T."""
    from planner.stacks import default_stack, kernel_bytes

    rope = _variant(None)
    nope = _variant([{"kind": "global", "position": "nope"}])
    plan = PlanArrays(tp=2, cp=1, pp=1, vpp=1, dp=1, mbs=1, gbs=1, seq=8192, sharding=0, shard=1, recompute=0,
                      sp=1, schedule=1, precision=0)
    ctx = context(plan)
    kb = kernel_bytes(default_stack(), 0)
    r, n = layer_list(rope).kinds[0].mixer, layer_list(nope).kinds[0].mixer
    assert n.label == "global nope" and not n.rope
    diff = r.elementwise_bytes(ctx, kb, "") - n.elementwise_bytes(ctx, kb, "")
    assert float(diff) == pytest.approx(8192 * float(kb["rope"]) * (32 / 2 + 8 / 2) * 128, rel=1e-12)


def test_eager_scores_cover_the_whole_sequence_under_a_window():
    """Eager attention keeps the softmax output per key of the whole [s, s] matrix: the window is a
    mask applied after the scores' GEMM (Megatron-Core DotProductAttention, transformers' eager
    attention), so a 4,096 window keeps as many score bytes at 32k as the global layer (this test
    said 1/8 before; test_eager_scores_of_a_window_are_the_whole_sequence below has the source)."""
    from planner.memory import kind_activation_bytes

    plan = PlanArrays(tp=1, cp=1, pp=1, vpp=1, dp=1, mbs=1, gbs=1, seq=32768, sharding=0, shard=1, recompute=0,
                      sp=0, schedule=1, precision=0)
    ctx = context(plan)
    kinds = [layer_list(m).kinds[0] for m in (_variant(None), _variant([{"kind": "sliding", "window": 4096}]))]
    flash, eager = ([float(kind_activation_bytes(k, ctx, attention=a)) for k in kinds] for a in ("flash", "eager"))
    assert flash[0] == flash[1]
    scores = [e - f for e, f in zip(eager, flash)]
    assert scores[1] == pytest.approx(scores[0], rel=1e-12)
    # T x 2 B x a heads x s keys, less the fused (flash) core's fp32 log-sum-exp, which eager does not keep:
    # T x 4 B x a heads (layers/attention.py [ls])
    assert scores[0] == pytest.approx(32768 * 2.0 * 32 * 32768 - 32768 * 4.0 * 32, rel=1e-12)


def test_layer_pattern_errors():
    """A pattern naming a kind it does not define, a kind given without a pattern, a pattern
    longer than the model: each a validation error naming the field."""
    base = load_model("llama3-8b").model_dump()
    with pytest.raises(ValueError, match="not in layer_kinds"):
        ModelSpec.model_validate({**base, "layer_kinds": {"a": {}}, "layer_pattern": ["a", "b"]})
    with pytest.raises(ValueError, match="without layer_pattern"):
        ModelSpec.model_validate({**base, "layer_kinds": {"a": {}}})
    with pytest.raises(ValueError, match="more than num_layers"):
        ModelSpec.model_validate({**base, "layer_kinds": {"a": {}}, "layer_pattern": ["a"] * 33})
    with pytest.raises(ValueError, match="needs the model's `moe:`"):
        ModelSpec.model_validate({**base, "layer_kinds": {"a": {"mlp": {"kind": "moe"}}}, "layer_pattern": ["a"]})
    np.testing.assert_array_equal(layer_list(_variant([{"kind": "sliding", "window": 8}, {"kind": "global"}])).index,
                                  np.arange(32) % 2)


def test_eager_scores_of_a_window_are_the_whole_sequence(explain):
    """Eager core attention writes every score of [b a/t, s, s] and masks after the GEMM (Megatron-Core's
    DotProductAttention @d98e8a64 l. 93-108 hands the window to FusedScaleMaskSoftmax only; its baddbmm's
    output is [b np, sq, sk] over the whole sequence), as the eager core's time is priced: the saved
    softmax output of a sliding layer is s keys a row, not min(s, w). mistral-7b (32 layers, 32 heads,
    window 4,096, no dropout) at seq 8,192, tp 8, one micro-batch in flight: eager - flash = 32 layers x
    8,192 tokens x 2 B x 32 heads / 8 x 8,192 keys = 17,179,869,184 B (half that before: 4,096 keys), with the torch
    softmax (8,192 keys: beyond the fused kernel's 4,096) in the 16-bit input dtype; in fp32 (TransformerConfig's
    default) its fp32 output too, 2 B a score more (memory.py [sm]): twice that. Less, each, the flash core's fp32
    log-sum-exp, which the eager core does not keep: 32 layers x 8,192 tokens x 4 B x 4 heads = 4,194,304 B
    (layers/attention.py [ls])."""
    job = dict(model="mistral-7b", gpus=8, tp=8, seq_len=8192, global_batch=8, micro_batch=1)
    *_, fp32 = explain(**job, attention="eager")
    job["attention_softmax_in_fp32"] = False
    *_, flash = explain(**job, attention="flash")
    *_, eager = explain(**job, attention="eager")
    lse = 32 * 8192 * 4 * (32 // 8)
    diff = eager["memory"]["activations_bytes"] - flash["memory"]["activations_bytes"]
    assert diff + lse == 32 * 8192 * 2 * (32 // 8) * 8192 == 17_179_869_184
    assert fp32["memory"]["activations_bytes"] - flash["memory"]["activations_bytes"] == 2 * (diff + lse) - lse
