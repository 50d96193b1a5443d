"""Which layers each pipeline stage holds (planner/layers/__init__.py stage_counts): model
chunk j of pp x vpp runs on stage j mod pp and holds consecutive layers, the first and last
chunks fewer (pipeline.stage_layers' rule); the middle stages' distinct compositions are the
candidates memory and step time compare. Cases derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_model
from planner.layers import layer_list
from planner.pipeline import stage_kind_counts as stage_counts
from planner.plan import PlanArrays


def _plan(pp, vpp=1, e=0, l_=0):
    return PlanArrays(tp=1, cp=1, pp=pp, vpp=vpp, dp=1, mbs=1, gbs=64, seq=4096, sharding=0, shard=1, recompute=0,
                      sp=0, schedule=np.where(np.asarray(vpp) > 1, 2, 1), precision=0, split_emb=e, split_loss=l_)


def test_deepseek_v3_interleaved_chunks_by_hand():
    """DeepSeek-V3: 61 layers, the first 3 dense (kinds [dense, MoE]). pp 4 x vpp 4: c =
    ceil(61 / 16) = 4 layers per chunk, 3 left over: chunk 0 holds 4 - 2 = 2 (layers 0-1),
    chunk 15 holds 4 - 1 = 3. Stage 0 = chunks 0, 4, 8, 12: layers 0-1, 14-17, 30-33, 46-49
    (2 dense, 12 MoE); stage 1 = chunks 1, 5, 9, 13: 2-5, 18-21, 34-37, 50-53 (1 dense, 15
    MoE); stage 2: 16 MoE; stage 3 = chunks 3, 7, 11, 15: 4 + 4 + 4 + 3 = 15 MoE. The middle
    candidates: (1, 15) first held by stage 1 and (0, 16) by stage 2."""
    ll = layer_list(load_model("deepseek-v3"))
    c = stage_counts(ll, _plan(4, 4))
    assert c["first"].tolist() == [2.0, 12.0] and c["last"].tolist() == [0.0, 15.0]
    assert c["mid"].tolist() == [[1.0, 15.0], [0.0, 16.0]] and c["mid_stage"].tolist() == [1, 2]


def test_contiguous_stages_and_split_flags():
    """pp 4, vpp 1: stages hold [0, 14), [14, 30), [30, 46), [46, 61) (c 16, 3 left over: 2 off
    the first, 1 off the last): one middle composition, all MoE. With the embedding and the
    loss counted in the split (61 + 2 = 63 units over 4: c 16, 1 left over), the first chunk
    holds 16 - 1 - 1 = 14 layers, the last 16 - 1 = 15."""
    ll = layer_list(load_model("deepseek-v3"))
    c = stage_counts(ll, _plan(4))
    assert c["first"].tolist() == [3.0, 11.0] and c["last"].tolist() == [0.0, 15.0]
    assert c["mid"].tolist() == [[0.0, 16.0]] and c["mid_stage"].tolist() == [1]
    c = stage_counts(ll, _plan(4, e=1, l_=1))
    assert c["first"].tolist() == [3.0, 11.0] and c["last"].tolist() == [0.0, 15.0]


def test_plans_as_arrays_match_one_at_a_time():
    """A search's 1-d plans give each plan's own counts (the unique configurations are
    placed once and gathered back)."""
    ll = layer_list(load_model("deepseek-v3"))
    pps, vpps = np.array([4, 2, 4, 1, 8]), np.array([4, 1, 1, 1, 2])
    many = stage_counts(ll, _plan(pps, vpps))
    for i, (p, v) in enumerate(zip(pps, vpps)):
        one = stage_counts(ll, _plan(int(p), int(v)))
        assert many["first"][:, i].tolist() == one["first"].tolist()
        assert many["last"][:, i].tolist() == one["last"].tolist()
        assert many["mid"][: len(one["mid"]), :, i].tolist() == one["mid"].tolist()


def test_one_kind_needs_only_the_counts():
    """Llama 3 405B (126 layers of one kind) on pp 16: 7 / 8 / 7 layers (stage_layers)."""
    ll = layer_list(load_model("llama3-405b"))
    c = stage_counts(ll, _plan(16))
    assert c["first"].tolist() == [7.0] and c["mid"].tolist() == [[8.0]] and c["last"].tolist() == [7.0]


def test_the_heavier_middle_stage_sets_the_memory(explain):
    """DeepSeek-V3 pp 16 (records' layout): stage 1 holds layers 2-5 (1 dense, 3 MoE, 15
    micro-batches in flight), stage 2 layers 6-9 (4 MoE, 14 in flight). Both are evaluated;
    the middle stage reported is the heavier of the two, and never lighter than either."""
    from planner import memory as mem
    from planner.memory import _PerLayer, _stage_terms, stage_kind_counts
    from planner.params import count_params
    from planner.pipeline import stage_inflight_kinds

    settings, plan, est, js = explain(model="deepseek-v3", gpus=1024, pp=16, ep=8, sharding="zero1", global_batch=1024,
                                      micro_batch=1, seq_len=4096)
    counts = stage_kind_counts(settings.model, plan)
    assert counts["mid"].tolist() == [[1.0, 3.0], [0.0, 4.0]] and counts["mid_stage"].tolist() == [1, 2]
    pc = count_params(settings.model)
    held = stage_inflight_kinds(pc.layers, plan)
    # 1F1B: stage 1 holds p - 1 = 15 micro-batches of its layers, stage 2 holds 14
    assert held["mid"].tolist() == [[15.0, 45.0], [0.0, 56.0]]
    per = _PerLayer(settings, plan, pc)
    totals = [float(_stage_terms(per, "mid", counts["mid"][c], held["mid"][c], 4, held["loss"]).total) for c in range(2)]
    assert float(est.stages[mem.STAGE_MIDDLE].total) == max(totals)
    assert totals[1] > totals[0]  # 14 x 4 MoE layers outweigh 15 x (1 dense + 3 MoE)


def test_multi_token_prediction_on_the_last_stage(explain, tmp_path):
    """DeepSeek-V3 with one MTP module (report sec. 2.2, D = 1): its projection 2h x h, two
    RMSNorms h and one layer of the last layer's kind (an MoE layer), sharing the embedding
    and the output head: 2 x 7168^2 + 2 x 7168 + the MoE layer's parameters; the published
    checkpoint's 14B for the module also holds copies of the embedding and the head
    (2 x 129,280 x 7168 = 1.85B): 11.66B + 1.85B = 13.5B. The module adds its parameters to
    the last pipeline stage only, and its layer, projection and loss to the last stage's time."""
    import yaml

    from planner.params import count_params

    base = load_model("deepseek-v3")
    m = base.model_copy(update={"mtp_layers": 1})
    pc, pc0 = count_params(m), count_params(base)
    moe_layer = pc0.kind_params[1].total
    assert pc.mtp.total == 2 * 7168 * 7168 + 3 * 7168 + moe_layer  # enorm, hnorm, the head's norm
    assert (pc.mtp.total + 2 * 129_280 * 7168) / 1e9 == pytest.approx(13.5, abs=0.05)
    assert pc.total == pc0.total and pc.as_dict()["total_with_mtp"] == pc0.total + pc.mtp.total
    path = tmp_path / "ds-mtp.yaml"
    path.write_text(yaml.safe_dump(m.model_dump(exclude_none=True)))
    job = dict(gpus=1024, pp=16, ep=8, sharding="zero1", global_batch=1024, micro_batch=1, seq_len=4096)
    _, _, _, j0 = explain(model="deepseek-v3", **job)
    _, _, _, j1 = explain(model=str(path), **job)
    s0, s1 = j0["memory"]["stages"], j1["memory"]["stages"]
    assert s1["first"] == s0["first"] and s1["middle"] == s0["middle"]
    assert s1["last"]["weights_bytes"] > s0["last"]["weights_bytes"]
    assert s1["last"]["activations_bytes"] > s0["last"]["activations_bytes"]
    assert j1["time"]["step_s"] >= j0["time"]["step_s"]
    assert j1["flops"]["model_flops_per_token"] > j0["flops"]["model_flops_per_token"]


def test_interleaved_chunks_hold_their_own_micro_batches():
    """Megatron's interleaved 1F1B on the last of p = 4 stages, v = 2 chunks, m = 8: before
    its first backward it has run W + 1 = 2 (p - s - 1) + (v - 1) p + 1 = 5 forwards, the
    first 4 of chunk 0 (forward k runs chunk (k mod p v) // p) and 1 of chunk 1, the chunk
    with the loss: chunk 0 holds 4 micro-batches, chunk 1 holds 1, and the loss 1. With the
    loss counted in the split (Llama 3 8B's 32 layers + 1 over 8 chunks: c = 5, 7 left over),
    the last stage's chunks hold 5 and 5 - 1 - 3 = 1 layers: 4 x 5 + 1 x 1 = 21 layer-micro-
    batches, not the 5/2 x 6 = 15 of a mean chunk."""
    from planner.pipeline import stage_inflight_kinds

    ll = layer_list(load_model("llama3-8b"))
    plan = PlanArrays(tp=1, cp=1, pp=4, vpp=2, dp=1, mbs=1, gbs=8, seq=4096, sharding=0, shard=1, recompute=0,
                      sp=0, schedule=2, precision=0, split_emb=0, split_loss=1)
    held = stage_inflight_kinds(ll, plan)
    assert held["last"].tolist() == [21.0] and float(held["loss"]) == 1.0
    # stage 0: W + 1 = 2 x 3 + 4 + 1 = 11 forwards: chunk 0 gets 4 + 3 = 7... (k mod 8) // 4: k = 0-3 and 8-10 -> 7,
    # chunk 1 k = 4-7 -> 4; its chunks hold 5 - 4 = 1 (c 5, 7 left over: 4 off the first chunk) and 5 layers
    assert held["first"].tolist() == [7.0 * 1 + 4.0 * 5]


def test_layer_list_of_36_million_layers_by_hand():
    """Issue 24: the layer list is a head and a period, never one entry per layer. DeepSeek-V3's
    shape with 36,000,000 layers, first_k_dense 3 and layer_freq 2 (MoE on even i >= 3, i.e.
    4, 6, ..., 35,999,998): (35,999,998 - 4) / 2 + 1 = 17,999,998 MoE layers, the other
    18,000,002 dense. Layers [0, 5) hold 0-3 dense and 4 MoE; the dense ranges are 0-3, 5, 7,
    ..., 35,999,999: 1 + (35,999,999 - 5) / 2 + 1 = 17,999,999 of them, listed up to DESCRIBED_RUNS."""
    from planner.layers import DESCRIBED_RUNS

    m = load_model("deepseek-v3")
    L = 36_000_000
    m = m.model_copy(update=dict(num_layers=L, moe=m.moe.model_copy(update=dict(first_k_dense=3, layer_freq=2))))
    ll = layer_list(m)
    dense, moe = (0, 1) if not ll.kinds[0].has_experts else (1, 0)
    assert ll.totals[moe] == 17_999_998 and ll.totals[dense] == 18_000_002
    assert ll.count(0, 5).tolist() == ([4.0, 1.0] if dense == 0 else [1.0, 4.0])
    assert ll.count(L - 3, L + 7)[dense] == 2 and ll.mtp_kinds == (dense,)  # 35,999,997 and 35,999,999
    d = {x["kind"]: x for x in ll.described()[:2]}
    text = d[ll.kinds[dense].label]["layers"]
    assert text.startswith("0-3, 5, 7, 9") and text.endswith(", ... (17,999,999 ranges in all)")
    assert len(text.split(", ")) == DESCRIBED_RUNS + 1
    assert d[ll.kinds[moe].label]["layers"].startswith("4, 6, 8")


def test_inflight_layers_of_45000_virtual_stages_by_hand():
    """Issue 24: the in-flight count is array work over the model chunks (it was a Python loop
    per chunk: 45,000 virtual stages took seconds, 450,000 a minute). 36,000,000 layers on pp 8
    x vpp 45,000 = 360,000 chunks of exactly 100 layers; m = 64 micro-batches, interleaved
    1F1B, stage 0: F = min(2 (8 - 0 - 1) + (45,000 - 1) 8 + 1, 64 x 45,000) = 360,007
    forwards before its first backward, F // (p v) = 1 full round and 7 over, so chunk c holds
    1 x 8 + min(max(7 - 8 c, 0), 8): 15 for c = 0, 8 for the other 44,999. The stage holds
    100 x (15 + 8 x 44,999) = 36,000,700 layer micro-batches."""
    from planner.pipeline import stage_inflight_kinds

    m = load_model("llama3-8b").model_copy(update=dict(num_layers=36_000_000))
    held = stage_inflight_kinds(layer_list(m), _plan(8, 45_000))
    assert held["first"].tolist() == [36_000_700.0]


def test_described_ranges_are_counted_past_the_listing():
    """A pattern [mid, global, local, global] over 140 layers (Gemma 3's kinds plus a 512-token
    window): the global layers are 1, 3, 5, ..., 139, 70 single-layer ranges; explain lists the
    first DESCRIBED_RUNS (64: 1 .. 127) and counts the rest, also where another kind (mid, 35
    ranges) has not reached the limit when the layers run out."""
    from planner.layers import DESCRIBED_RUNS
    from planner.schema import LayerKindSpec, SlidingAttention

    m = load_model("gemma3-27b")
    kinds = {**m.layer_kinds, "mid": LayerKindSpec(mixer=SlidingAttention(kind="sliding", window=512))}
    m = m.model_copy(update=dict(num_layers=140, layer_kinds=kinds, layer_pattern=["mid", "global", "local", "global"]))
    by = {d["kind"]: d for d in layer_list(m).described()}
    glob = next(d for d in by.values() if d["count"] == 70)
    assert DESCRIBED_RUNS == 64
    assert glob["layers"] == ", ".join(str(i) for i in range(1, 128, 2)) + ", ... (70 ranges in all)"
    assert sorted(d["count"] for d in by.values()) == [35, 35, 70]
