"""The critical pipeline stage's own passes (issue 22, critstage): the bubble's backward / forward ratio and
weight-gradient share, the DP hiding windows and the informational breakdowns inside the compute term
(cp_compute_s) are the critical stage's, the stage whose compute + communication the step takes
(step.critical_stage, step.stage_passes), not a middle stage's.

Llama 3 8B (model_zoo/llama3-8b.yaml: 32 layers of one kind), Megatron's uneven split
--decoder-first-pipeline-num-layers 11 --decoder-last-pipeline-num-layers 7 on pp 4 (transformer_block.py
@d98e8a64 l. 103-146): stages 11, 7, 7, 7 (+ the output layer on the last). Stage 0 is the critical one: 11 t
against 7 t + the head (test_pp_first_stage), and its TP / CP traffic counts 11 layers against 7
(test_pp_critical_comm).
"""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from planner import step
from planner.catalog import stack_source
from planner.explain import evaluate, to_json
from planner.pipeline import ZERO_BUBBLE_H1, bubble_fraction
from planner.plan import resolve
from planner.schema import Job

JOB = dict(model="llama3-8b", gpus=32, tp=2, cp=2, pp=4, sharding="zero1", micro_batch=1, global_batch=64,
           first_stage_layers=11, last_stage_layers=7)


def _any_plan_stack(tmp_path) -> str:
    """stack_db/megatron.yaml without `runs` (every plan runnable: Megatron-LM has no ZB-H1 schedule, as
    tests/snapshot_cases.py's ANY_PLAN_STACK)."""
    data = yaml.safe_load(stack_source("megatron").read_text(encoding="utf-8"))
    data.pop("runs", None)
    path = tmp_path / "megatron-any-plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


def _run(**kw):
    s, p, _ = resolve(Job(**kw))
    sc, lt, comp = step._compute_pass(s, p)
    return s, p, sc, lt, comp, to_json(s, p, evaluate(s, p))["time"]


def test_zero_bubble_ratio_is_the_critical_stages(tmp_path):
    """ZB-H1 (Qi et al. 2023; pipeline.bubble_fraction [4][5]) depends on the passes' durations: r = T_B / T_F and
    the weight-gradient share w = T_W / T_B. On the critical first stage (11 layers, no head, no recompute) per
    micro-batch T_F = 11 f, T_B = 11 b, W = 11 g (f, b: the layer's forward without the MoE host gaps and its
    backward; g its forward GEMMs, the weight-gradient GEMMs' worth): r = b / f, w = g / b, the model's one layer
    kind's own ratio. The middle stage's, which the step took before, added a third / two thirds of the output
    layer and loss to 7 layers (7 f + H / 3, 7 b + 2 H / 3): another ratio. bubble_s = bubble_fraction(4, m, 1,
    ZB-H1, r, w) x m x t_mb, t_mb the critical stage's micro-batch (compute + TP + CP + PP), m = 64 / 2 = 32."""
    s, p, sc, lt, comp, t = _run(**JOB, schedule="zb-h1", stack=_any_plan_stack(tmp_path))
    assert {k: int(v) for k, v in sc.n.items()} == {"first": 11, "mid": 7, "last": 7}
    f, b, g = lt.fwd[0] - lt.host_fwd[0], lt.bwd[0] + lt.sel[0], lt.gemm_fwd[0]
    first = comp.passes[1]
    assert first[0] == pytest.approx(11 * f, rel=1e-12) and first[1] == pytest.approx(11 * b, rel=1e-12)
    assert first[2] == pytest.approx(11 * g, rel=1e-12)
    m = 32
    assert int(p.microbatches) == m
    # (the once-a-step SP-gradient all-reduce, step.py [27], is none on a stack without runs: tp_sp_norm_grads_s absent)
    t_mb = (t["compute_s"] + t["tp_comm_s"] - t.get("tp_sp_norm_grads_s", 0.0) + t["cp_comm_s"] + t["pp_comm_s"]) / m
    frac = bubble_fraction(4, m, 1, ZERO_BUBBLE_H1, b / f, g / b)
    # plus the fill's and drain's hops the first stage's one exchange a micro-batch lacks (a middle stage's two:
    # step.py [31], pp_fill_drain): frac x m x (2 - 1) x its exchange = frac x pp_comm_s
    assert t["pp_fill_drain_s"] == pytest.approx(float(frac) * t["pp_comm_s"], rel=1e-9)
    assert t["bubble_s"] == pytest.approx(float(frac) * m * t_mb + t["pp_fill_drain_s"], rel=1e-9)
    # the critical stage is the first: its compute is 11 layers'
    assert t["compute_s"] == pytest.approx(m * 11 * float(lt.fwd[0] + lt.bwd[0] + lt.sel[0]), rel=1e-9)
    # the middle stage's ratio (what the step took before) differs
    H = comp.logits
    old = bubble_fraction(4, m, 1, ZERO_BUBBLE_H1, (7 * b + 2 * H / 3) / (7 * f + H / 3),
                          min(7 * g / (7 * b + 2 * H / 3), 1.0))
    assert abs(float(old) - float(frac)) > 1e-4 * float(frac)


def test_cp_compute_counts_the_critical_stages_layers():
    """cp_compute_s (context parallelism's own GPU work inside compute_s: the ring's per-step kernels' lower rate
    and the merges, step.cp_compute) over the critical stage's layers: cp 2, no recompute, per micro-batch
    11 (c_f + c_b) on stage 0 (c_f, c_b: one layer's CP forward and backward work, lt.cp_fwd / cp_bwd), not a
    middle stage's 7 (c_f + c_b); per step m = 64 / 2 = 32 of them."""
    s, p, sc, lt, comp, t = _run(**JOB)
    per_layer = float(lt.cp_fwd[0] + lt.cp_bwd[0])
    assert per_layer > 0
    assert t["cp_compute_s"] == pytest.approx(32 * 11 * per_layer, rel=1e-9)


def test_dp_windows_are_the_critical_stages_passes():
    """The DP transfers hide behind the critical stage's passes (dp_comm: the gradient reduction behind the
    backward, the weights' all-gather behind the forward): Compute.fwd_mb / bwd_mb after critical_stage are stage 0's
    11 f / 11 b. ZeRO-1, DP group dp x cp = 4 ranks, one reduce-scatter R and one all-gather A a step in n_b buckets
    (dp_comm_s = R + A); both windows exceed the traffic here, so each hides but its last / first bucket, at the
    stack's exposed share x = 0.189 (stack_db megatron.yaml overlap.overlapped_exposed_fraction): exposed =
    (R + A) (x (1 - 1 / n_b) + 1 / n_b). n_b = ceil(p / 40e6) (megatron fsdp.ddp_bucket_params 40e6 >= 1e6 x 4):
    p the dense parameters a GPU of the stage with the most, stage 0's 11 layers x 218,112,000 (attention 4,096 x
    (4,096 + 1,024 + 1,024 + 4,096), MLP 3 x 4,096 x 14,336, two norms 8,192) + the embedding 128,256 x 4,096 =
    525,336,576, over tp 2: about 1.4623e9 (the replicated norms split or not), n_b = 37."""
    s, p, sc, lt, comp, t = _run(**JOB)
    crit, ccomp = step.critical_stage(comp, [])  # by compute alone: stage 0 here too (11 t > 7 t + head)
    assert step.CRITICAL_STAGES[int(crit)] == "first"
    f, b = float(lt.fwd[0] - lt.host_fwd[0]), float(lt.bwd[0] + lt.sel[0])
    assert float(ccomp.fwd_mb) == pytest.approx(11 * f, rel=1e-12)
    assert float(ccomp.bwd_mb) == pytest.approx(11 * b, rel=1e-12)
    total, x, n_b = t["dp_comm_s"], 0.189, 37
    assert total < 11 * f  # the windows exceed the traffic
    assert t["dp_comm_exposed_s"] == pytest.approx(total * (x * (1 - 1 / n_b) + 1 / n_b), rel=1e-9)


def test_eager_cores_count_the_critical_stages_layers():
    """eager_core_s (the unfused attention cores' batched GEMMs, softmax and dropout inside compute_s,
    step.eager_core_time) over the critical stage's layers: no recompute, per micro-batch 11 (e_f + e_b) on stage 0
    (e_f, e_b: one layer's eager core forward and backward, compute.eager_core_terms' totals), not a middle stage's
    7; per step m = 32 of them, and each named term likewise."""
    s, p, sc, lt, comp, t = _run(**dict(JOB, cp=1, gpus=16), attention="eager")
    ef, eb = lt.eager_fwd[0], lt.eager_bwd[0]
    assert t["eager_core_s"] == pytest.approx(32 * 11 * float(ef.total + eb.total), rel=1e-9)
    assert t["eager_core_softmax_s"] == pytest.approx(32 * 11 * float(ef["softmax"] + eb["softmax"]), rel=1e-9)
