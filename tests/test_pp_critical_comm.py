"""The critical pipeline stage's communication and bf16 layers (issue 22, follow-up of tests/test_pp_first_stage.py).

The pipeline waits on the stage whose micro-batch, compute plus its own exposed communication, takes longest
(step.critical_stage); every term of the step is that one stage's: its TP / CP / EP / PP traffic counts its own
layers, not a middle stage's. An fp8 plan's bf16 layers (Megatron --num-layers-at-start-in-bf16 /
-at-end-) sit where their global index puts them (megatron/core/fp8_utils.py @d98e8a64 l. 711-727, the
global layer number of transformer_block.py l. 343-356), chunk by chunk (pipeline.stage_end_layers).

Llama 3 8B (model_zoo/llama3-8b.yaml: 32 layers, h 4,096), one layer kind, Megatron with SP (the stack's
default at tp > 1): each layer runs two TP pairs (attention's and the MLP's output; Korthikanti et al. 2022
sec. 4.2.2), a reduce-scatter + all-gather of T h bf16 each, forward, and the same backward: 4 x (RS + AG) of
T h x 2 B = 8,192 x 4,096 x 2 = 67,108,864 B a layer and micro-batch (step.tp_comm, no overlap, no recompute).
"""
from __future__ import annotations

import numpy as np
import pytest

from planner import comm, step
from planner.explain import evaluate, to_json
from planner.pipeline import stage_end_layers
from planner.plan import resolve
from planner.schema import Job

LLAMA = dict(model="llama3-8b", gpus=32, tp=2, pp=4, sharding="zero1", micro_batch=1, global_batch=64,
             stack="megatron")


def _pass(**kw):
    s, p, _ = resolve(Job(**kw))
    return (s, p) + step._compute_pass(s, p)


def _layer(lt, k=0):
    return lt.fwd[k] + lt.bwd[k] + lt.sel[k]


def _tp_layer(sc):
    """One layer's TP traffic a micro-batch: 4 x (reduce-scatter + all-gather) of T h x 2 B over the TP group
    (module docstring), priced by the same collective model."""
    coll = step.Collectives(sc)
    size = np.float64(8192 * 4096 * 2)
    tp, s = sc.plan.tp, coll.strides["tp"]
    return 4.0 * (coll(comm.REDUCE_SCATTER, size, tp, s) + coll(comm.ALL_GATHER, size, tp, s))


def test_first_stage_critical_carries_its_own_tp_traffic():
    """--decoder-first-pipeline-num-layers 11 --decoder-last-pipeline-num-layers 7, pp 4, tp 2 (Megatron-LM
    @d98e8a64 transformer_block.py l. 103-146): stages 11, 7, 7, 7 (+ the head on the last). Stage 0's
    compute, 11 t, is the heaviest (test_pp_first_stage); its TP traffic is 11 layers x 4 (RS + AG) of 64 MiB
    over 2 ranks, not a middle stage's 7 (which the step priced before: 7/11 of it). Per step: m = 64 / 4 = 16
    micro-batches, tp_comm_s = 16 x 11 x c (+ the step's SP-gradient all-reduce)."""
    s, p, sc, lt, comp = _pass(**LLAMA, first_stage_layers=11, last_stage_layers=7)
    coll = step.Collectives(sc)
    parts = {}
    tp = step.tp_comm(sc, coll, lt, parts)
    # less the backward's wgrad input re-gathers (step.py [35]), which count the stage's own layers too
    rg = parts["regather"]
    assert rg["first"] == pytest.approx(11 / 7 * rg["mid"], rel=1e-12) and rg["first"] > 0
    # and the embedding's (the first stage's), the output layer's and the loss's (the last's) TP collectives ([36])
    hd = parts["head"]
    assert hd["first"] > 0 and hd["last"] > 0 and hd["mid"] == 0
    tp = {k: v - rg[k] - hd[k] for k, v in tp.items()}
    c = _tp_layer(sc)
    assert c > 0
    assert tp["first"] == pytest.approx(11 * c, rel=1e-12)
    assert tp["mid"] == pytest.approx(7 * c, rel=1e-12) and tp["last"] == pytest.approx(7 * c, rel=1e-12)
    crit, crit_comp = step.critical_stage(comp, [{k: v + rg[k] + hd[k] for k, v in tp.items()}])
    assert step.CRITICAL_STAGES[int(crit)] == "first"
    assert crit_comp.mb == pytest.approx(11 * _layer(lt), rel=1e-12)
    t = to_json(s, p, evaluate(s, p))["time"]
    # (plus the step's one all-reduce of the SP-partial gradients, step.py [27], a term of its own)
    assert (t["tp_comm_s"] - t.get("tp_head_s", 0.0)) - t["tp_sp_norm_grads_s"] - t["tp_wgrad_regather_s"] == pytest.approx(16 * 11 * c, rel=1e-9)
    assert t["tp_wgrad_regather_s"] == pytest.approx(16 * rg["first"], rel=1e-9)
    assert t["compute_s"] == pytest.approx(16 * 11 * _layer(lt), rel=1e-9)


def test_communication_can_make_the_middle_stage_critical():
    """pp 4 with first / last 7 (Megatron's uneven split): stages 7, 9, 9, 7 + the head. tp 8 (one node, 32 GPUs:
    dp 1, m = 64 micro-batches). By compute alone the last stage is the heaviest, 7 t + head (the head is 2.41
    layers of GEMM MACs, more with the loss: > 2 t) > 9 t; by compute + TP traffic the middle one, 9 t + 9 c >
    7 t + head + 7 c where 2 c > head - 2 t (c: one layer's TP traffic over 8 ranks). The step's micro-batch is
    the middle stage's, compute and traffic both: 9 t + 9 c, not the last's compute with the middle's traffic
    (7 t + head + 9 c, what the step priced before: one stage's terms, never the heaviest of each)."""
    job = dict(LLAMA, tp=8, first_stage_layers=7, last_stage_layers=7)
    s, p, sc, lt, comp = _pass(**job)
    assert {k: int(v) for k, v in sc.n.items()} == {"first": 7, "mid": 9, "last": 7}
    t_, c = _layer(lt), _tp_layer(sc)
    head = comp.logits
    assert 7 * t_ + head > 9 * t_  # compute alone: the last
    assert comp.mb == pytest.approx(7 * t_ + head, rel=1e-12)
    assert 9 * t_ + 9 * c > 7 * t_ + head + 7 * c  # with its traffic: the middle
    d = to_json(s, p, evaluate(s, p))["time"]
    assert int(p.microbatches) == 64
    assert d["compute_s"] == pytest.approx(64 * 9 * t_, rel=1e-9)
    # the middle stage's 9 layers' backward wgrad input re-gathers (step.py [35]) beside the pairs, its own key
    parts = {}
    step.tp_comm(sc, step.Collectives(sc), lt, parts)
    assert d["tp_wgrad_regather_s"] == pytest.approx(64 * parts["regather"]["mid"], rel=1e-9)
    assert parts["regather"]["mid"] == pytest.approx(9 / 7 * parts["regather"]["last"], rel=1e-12)
    assert (d["tp_comm_s"] - d.get("tp_head_s", 0.0)) - d["tp_sp_norm_grads_s"] - d["tp_wgrad_regather_s"] == pytest.approx(64 * 9 * c, rel=1e-9)


def test_bf16_layers_by_global_index():
    """Megatron marks layer i bf16 where i < n0 or i >= L - n1 on its *global* index (fp8_utils.py l. 711-727).
    Chunk j of p v holds consecutive layers and runs on stage j mod p (vp-major, transformer_layer.py l. 65-180):
    32 layers on pp 4 x vpp 2 are chunks of 4; n0 6, n1 2: stage 0 holds 0-3 and 16-19 (4 bf16), stage 1 4-7 (2),
    stage 2 8-11 and 24-27 (0), stage 3 12-15 and 28-31 (2). Megatron's uneven split 2 / 6 on 4 stages, vpp 1: 2,
    12, 12, 6 layers, stage 0 0-1 (2 of the 6), stage 1 2-13 (4). With the loss and the embedding counted (Llama 3
    405B: 126 + 2 on 16 x 8, chunks of one unit), n0 2 / n1 2: chunk 0 is the embedding alone, layers 0 and 1 on
    stages 1 and 2, 124 and 125 on stages 13 and 14: none on the ends, 1 on the busiest middle stage. One stage:
    min(n0 + n1, L)."""
    from types import SimpleNamespace as N

    def plan(pp, vpp, first=0, last=0, e=0, l_=0):
        return N(pp=np.array(pp), vpp=np.array(vpp), split_emb=np.array(e), split_loss=np.array(l_),
                 split_front=np.array(0), split_first=np.array(first), split_last=np.array(last),
                 microbatches=np.array(8))

    got = stage_end_layers(32, plan([4, 4, 1, 2], [2, 1, 1, 1]), 6, 2)
    assert [g.tolist() for g in got] == [[4, 6, 8, 6], [2, 0, 0, 0], [2, 2, 8, 2]]
    assert [int(g) for g in stage_end_layers(32, plan(4, 1, first=2, last=6), 6, 0)] == [2, 4, 0]
    assert [int(g) for g in stage_end_layers(126, plan(16, 8, e=1, l_=1), 2, 2)] == [0, 1, 0]


def test_bf16_layers_on_the_stage_that_holds_them():
    """fp8 tensorwise, --num-layers-at-start-in-bf16 6, Megatron's uneven split first 2 / last 6 on pp 4 (middle
    (32 - 8) / 2 = 12 each): stage 0 runs layers 0-1 (both bf16), stage 1 layers 2-13 (2-5 bf16: 4 of them). Per
    micro-batch, t8 the fp8 layer and t16 the bf16 one (1.27 t8): stage 1 8 t8 + 4 t16 = 13.1 t8, the critical
    stage (the last 6 t8 + the bf16 head 3.26 t8, the first 2 t16); before, min(6, 2) = 2 bf16 layers were
    priced on stage 0 and none on stage 1 (12 t8). With vpp 2 (even split, chunks of 4: stage 0 layers 0-3 and
    16-19, stage 1 4-7): stage 0 4 t8 + 4 t16, stage 1 6 t8 + 2 t16 (before: 2 t8 + 6 t16 on stage 0)."""
    fp8 = dict(LLAMA, precision="fp8", fp8_recipe="tensorwise")
    _, _, _, lt, comp = _pass(**fp8, first_stage_layers=2, last_stage_layers=6, bf16_layers_at_start=6)
    _, _, _, lt16, _ = _pass(**LLAMA, first_stage_layers=2, last_stage_layers=6)
    t8, t16 = _layer(lt), _layer(lt16)
    assert 1.2 < t16 / t8 < 1.35
    mid, first, last = (x[0] for x in comp.stages)
    assert mid == pytest.approx(8 * t8 + 4 * t16, rel=1e-12)
    assert first == pytest.approx(2 * t16, rel=1e-12)
    assert comp.mb == pytest.approx(8 * t8 + 4 * t16, rel=1e-12) and last < mid
    _, _, _, lt, comp = _pass(**fp8, vpp=2, bf16_layers_at_start=6)
    t8 = _layer(lt)
    mid, first, last = (x[0] for x in comp.stages)
    assert first == pytest.approx(4 * t8 + 4 * t16, rel=1e-12)
    assert mid == pytest.approx(6 * t8 + 2 * t16, rel=1e-12)


def test_bf16_layers_priced_by_their_own_kind():
    """DeepSeek-V2-Lite (model_zoo/deepseek-v2-lite.yaml: 27 layers, layer 0 dense, 1-26 MoE), fp8 tensorwise, pp 2
    (Megatron's trim_ends split: chunks of ceil(27 / 2) = 14, the one slot left over off the first: 13 / 14
    layers, stage 0 layers 0-12), --num-layers-at-start-in-bf16 1: the one bf16
    layer is layer 0, the dense one (fp8_utils.py @d98e8a64 l. 711-727 on the global index; pipeline.stage_end_kinds).
    Stage 0's micro-batch is then d16 + 12 e8 (d: the dense layer's forward + backward, e: an MoE layer's; 16 / 8 the
    precision), its fp8 compute d8 + 12 e8 plus the dense layer's own bf16 extra d16 - d8; before, the extra was the
    middle composition's mean layer (stage 1's, all MoE: e16 - e8), an MoE layer's bf16 cost on a dense layer. No
    bf16 layer at the end: stage 1 is its fp8 self, 14 e8 + the head."""
    job = dict(model="deepseek-v2-lite", gpus=16, tp=1, pp=2, ep=8, sharding="zero1", micro_batch=1,
               global_batch=64, seq_len=4096, stack="megatron")
    s, p, sc, lt, comp = _pass(**job, precision="fp8", fp8_recipe="tensorwise", bf16_layers_at_start=1)
    _, _, _, lt16, _ = _pass(**job)
    dense = [i for i, k in enumerate(sc.ll.kinds) if not k.has_experts]
    moe = [i for i, k in enumerate(sc.ll.kinds) if k.has_experts]
    assert len(dense) == 1 and len(moe) == 1
    d, e = dense[0], moe[0]
    assert {k: int(v) for k, v in sc.n.items() if k != "mid"} == {"first": 13, "last": 14}
    d8, d16, e8, e16 = _layer(lt, d), _layer(lt16, d), _layer(lt, e), _layer(lt16, e)
    assert d16 > d8 and abs((d16 - d8) - (e16 - e8)) > 1e-3 * (d16 - d8)  # the two kinds' bf16 extras differ
    first_extra, mid_extra, last_extra = step.bf16_end_layers(sc, lt)
    assert first_extra == pytest.approx(d16 - d8, rel=1e-12)
    assert float(mid_extra) == 0.0 and float(last_extra) == 0.0
    _, first, last = (x[0] for x in comp.stages)
    assert first == pytest.approx(d16 + 12 * e8, rel=1e-12)
    assert last == pytest.approx(14 * e8 + comp.logits, rel=1e-9)
