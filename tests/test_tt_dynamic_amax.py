"""torchao float8's dynamic-scaling all-reduces (planner/step.py [39], issue ttamax; stack_db torchtitan fp8_recipes
tensorwise dtensor_amax_bytes 8, float8_tp_styles false, fsdp_amax_bytes 4), derived by hand.

A tensorwise cast takes the amax of the whole tensor (pytorch/ao @9cd41075 torchao/float8/float8_utils.py
tensor_to_amax l. 57-82); on a TP-sharded DTensor that is a Partial(max) value which DTensor all-reduces over the TP
group before the cast. torchtitan @e347b1e5e runs the plain TP styles (its float8 styles test "float8" in
model.converters, a name it no longer registers: tests/test_fp8_tp_widths.py), so per Llama layer and micro-batch:
forward the 7 weights (ColwiseParallel Shard(0), RowwiseParallel Shard(1): float8_linear.py l. 68-83) and wo's and
w2's Shard(-1) inputs; backward the 5 column-parallel linears' Shard(-1) output gradients (l. 107-123) and the 7
weights again for the dgrad GEMMs (l. 125-141): 21; with FSDP's fp8 all-gather the weights arrive cast
(tensor_already_casted_to_fp8): 7. FSDP's fp8 all-gather all-reduces each converted weight's fp32 amax over the
shard group before each gather (fsdp_utils.py fsdp_pre_all_gather l. 228-246), or with
precompute_float8_dynamic_scale_for_fsdp every weight's stacked once a step (l. 27-80).

Llama 3 8B (32 layers, 7 linears each, output layer bf16) on 8 H100 at tp 2 x FSDP 4, micro-batch 1 x 4,096 tokens,
global batch 32: m = 8 micro-batches. comm.py inside one NVLink domain (conftest.h100_nvlink_ring_s; an all-reduce
is a reduce-scatter and an all-gather, 2 x its rounds and bytes):
  AR(8 B, 2 ranks)   = 2 x 3.4 us + 2 x 1/2 x 8 B / 370 GB/s         = 6.800022 us
  AR(4 B, 4 ranks)   = LL: 6.6 us + 6 x 0.6 us + 2 x 3/4 x 4 B / 87.7 GB/s = 10.200068 us
                       (Simple 6 x 3.4 us + ... = 20.400016 us; LL128 25.40 us; NCCL's tuner takes the least,
                       comm.py "Protocols", conftest.h100_nvlink_ll_ring_s)
  AR(896 B, 4 ranks) = LL: 10.2 us + 2 x 3/4 x 896 B / 87.7 GB/s        = 10.215325 us
  AR(896 B, 2 ranks) = 6.8 us + 896 B / 370 GB/s                     = 6.802422 us
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import explain_job, h100_nvlink_ll128_ring_s, h100_nvlink_ll_ring_s, h100_nvlink_ring_s
from planner.catalog import load_model, load_stack
from planner.fp8_linears import converted_linears, tp_amax_casts
from planner.layers import layer_list
from planner.plan import FSDP
from planner.step import (Collectives, _compute_pass, comm_stages, dynamic_amax_comm, fp8_weights_on, fsdp_fp8_amax,
                          step_time)

L8 = dict(model="llama3-8b", gpus=8, micro_batch=1, global_batch=32, seq_len=4096, hardware="h100-sxm",
          stack="torchtitan", tp=2, sharding="fsdp", precision="fp8", fp8_recipe="tensorwise")
M, L = 8, 32


def _ar(n, size):
    """The all-reduce ring under the fastest of NCCL's protocols inside one NVLink domain (comm.py "Protocols"):
    Simple at 2 ranks for these sizes (6.8 us against LL's 7.8 us), LL at 4 ranks."""
    return min(2.0 * h100_nvlink_ring_s(n, size), h100_nvlink_ll_ring_s(n, size, all_reduce=True),
               h100_nvlink_ll128_ring_s(n, size, all_reduce=True))


def _ctx(**over):
    s, p, est, js = explain_job(**{**L8, **over})
    sc, _, _ = _compute_pass(s, p)
    return s, p, js, sc, Collectives(sc)


def test_hand_latencies():
    assert _ar(2, 8.0) == pytest.approx(6.800022e-6, rel=1e-6)
    assert _ar(4, 4.0) == pytest.approx(10.200068e-6, rel=1e-6)
    assert _ar(4, 896.0) == pytest.approx(10.215325e-6, rel=1e-6)
    assert _ar(2, 896.0) == pytest.approx(6.802422e-6, rel=1e-6)


@pytest.mark.parametrize("allgather,per_layer,step_ms", [
    (False, 21, 36.557),  # bf16 FSDP gathers: 32 x 21 = 672 all-reduces a micro-batch, 4.5696 ms; 8 of them
    (True, 7, 12.186),    # fp8 gathers: the weights arrive cast; 224 a micro-batch, 1.5232 ms
])
def test_llama3_8b_tp2_fsdp4_tp_amax_by_hand(allgather, per_layer, step_ms):
    """The per-micro-batch TP amax all-reduces: count x AR(8 B, 2 ranks), on both stage slots (pp 1: one stage)."""
    s, p, js, sc, coll = _ctx(fp8_allgather=allgather)
    assert int(p.dp) == 4 and int(p.sp) == 1 and int(p.microbatches) == M
    kind = sc.ll.kinds[0]
    w, i, g = tp_amax_casts(kind.mixer, kind.mlp, s.filter_fqns, p.f8r, False)
    assert (float(w), float(i), float(g)) == (7.0, 2.0, 5.0)
    per_mb = L * per_layer * _ar(2, 8.0)
    got = dynamic_amax_comm(sc, coll)
    assert float(got["last"]) == pytest.approx(per_mb, rel=1e-9)
    assert js["time"]["tp_fp8_dynamic_amax_s"] == pytest.approx(M * per_mb, rel=1e-9)
    assert M * per_mb == pytest.approx(step_ms * 1e-3, rel=1e-4)


def test_inside_tp_comm():
    """tp_comm_s holds them: with the recipe's dtensor_amax_bytes 0 the plan's tp_comm is less by exactly them."""
    s, p, js, sc, coll = _ctx(fp8_allgather=False)
    terms, extra = step_time(s, p)
    st = s.stack
    rec = st.fp8_recipes["tensorwise"].model_copy(update={"dtensor_amax_bytes": 0.0})
    s_off = dataclasses.replace(s, stack=st.model_copy(update={"fp8_recipes": {**st.fp8_recipes, "tensorwise": rec}}))
    t_off, x_off = step_time(s_off, p)
    assert "tp_fp8_dynamic_amax_s" not in x_off
    assert float(terms.tp_comm - t_off.tp_comm) == pytest.approx(float(extra["tp_fp8_dynamic_amax_s"]), rel=1e-9)


def test_float8_styles_counts():
    """Under torchao's float8 TP styles (torchtitan before 8a2686c4a): PrepareFloat8ModuleInput casts the attention and
    feed_forward inputs (2) beside wo's and w2's (2), and every block linear's output gradient (7): 25 a layer, 11 with
    fp8 gathers."""
    kind = layer_list(load_model("llama3-8b")).kinds[0]
    w, i, g = tp_amax_casts(kind.mixer, kind.mlp, None, np.array(1), True)  # 1: tensorwise (precisions.FP8_RECIPES)
    assert (float(w), float(i), float(g)) == (7.0, 4.0, 7.0)
    assert float(w + i + g + w) == 25 and float(i + g) == 11
    # a filtered linear (wq kept bf16) casts nothing: one weight and one output gradient fewer
    w, i, g = tp_amax_casts(kind.mixer, kind.mlp, ["attention.wq"], np.array(1), False)
    assert (float(w), float(i), float(g)) == (6.0, 2.0, 4.0)


def test_full_recompute_reruns_the_forward():
    """Full recompute's re-run forward repeats the forward's 9 a layer: 30 a layer a micro-batch."""
    s, p, js, sc, coll = _ctx(fp8_allgather=False, recompute="full")
    assert float(dynamic_amax_comm(sc, coll)["last"]) == pytest.approx(L * 30 * _ar(2, 8.0), rel=1e-9)


def test_fp8_output_layer_adds_three():
    """The converted output layer (plain ColwiseParallel, Shard(-1) logits): its weight forward and for the dgrad GEMM,
    and its output gradient: 3 more on the last stage with bf16 gathers (1 with fp8 gathers)."""
    for ag, extra in ((False, 3), (True, 1)):
        s, p, js, sc, coll = _ctx(fp8_allgather=ag, fp8_output_layer=True)
        base = 21 if not ag else 7
        assert float(dynamic_amax_comm(sc, coll)["last"]) == pytest.approx((L * base + extra) * _ar(2, 8.0), rel=1e-9)


@pytest.mark.parametrize("over", [dict(tp=1), dict(precision="bf16", fp8_recipe=None), dict(fp8_recipe="rowwise")])
def test_none_where_nothing_is_sharded_or_scaled_per_tensor(over):
    s, p, js, sc, coll = _ctx(**over)
    assert dynamic_amax_comm(sc, coll) is None and "tp_fp8_dynamic_amax_s" not in js["time"]


def test_torchtitan_03_has_none():
    """torchtitan 0.3's float8 recipes are rowwise and mxfp8: no per-tensor amax (rowwise's axiswise casts are left
    out, step.py [39])."""
    st = load_stack("torchtitan-0.3")
    assert all(r.dtensor_amax_bytes == 0 and r.fsdp_amax_bytes == 0 for r in st.fp8_recipes.values())


def test_fsdp_fp8_gather_amax_by_hand():
    """Each of the 16 gathers of the stage's weights a step (forward and backward of each micro-batch: torchtitan
    reshards after the forward) all-reduces the 224 converted weights' amaxes one by one over the 4 FSDP ranks (stride
    2: tp innermost): 224 x 10.200068 us = 2.2848 ms a pass, 36.557 ms of dp_comm_s a step (LL; 73.114 ms under
    Simple alone, before the protocols were priced)."""
    s, p, js, sc, coll = _ctx(fp8_allgather=True)
    slots = comm_stages(sc)
    assert [float(x) for x in fp8_weights_on(sc, slots)] == [224.0, 224.0]
    assert float(converted_linears(sc.ll.kinds[0].mixer, sc.ll.kinds[0].mlp, None, p.f8r)) == 7.0
    per_pass, per_step = fsdp_fp8_amax(sc, coll, slots, p.shard * p.cp, coll.strides["dp"], p.sharding >= FSDP)
    assert int(coll.strides["dp"]) == 2
    assert [float(x) for x in per_pass] == pytest.approx([224 * _ar(4, 4.0)] * 2, rel=1e-9)
    assert float(per_step) == 0.0
    st = s.stack
    rec = st.fp8_recipes["tensorwise"].model_copy(update={"fsdp_amax_bytes": 0.0})
    s_off = dataclasses.replace(s, stack=st.model_copy(update={"fp8_recipes": {**st.fp8_recipes, "tensorwise": rec}}))
    _, x_on = step_time(s, p)
    _, x_off = step_time(s_off, p)
    assert float(x_on["dp_comm_s"] - x_off["dp_comm_s"]) == pytest.approx(2 * M * 224 * _ar(4, 4.0), rel=1e-9)
    assert 2 * M * 224 * _ar(4, 4.0) == pytest.approx(36.557e-3, rel=1e-4)


def test_precomputed_scales_once_a_step_exposed():
    """fp8_precompute_scale: one all-reduce of the 224 fp32 amaxes (896 B) over the FSDP ranks and one over TP after
    the optimizer step, 10.215 + 6.802 = 17.018 us (27.206 us under Simple alone), exposed whole, in place of the
    gathers' 36.557 ms."""
    s, p, js, sc, coll = _ctx(fp8_allgather=True, fp8_precompute_scale=True)
    slots = comm_stages(sc)
    per_pass, per_step = fsdp_fp8_amax(sc, coll, slots, p.shard * p.cp, coll.strides["dp"], p.sharding >= FSDP)
    want = _ar(4, 896.0) + _ar(2, 896.0)
    assert want == pytest.approx(17.018e-6, rel=1e-4)
    assert float(per_pass) == 0.0 and [float(x) for x in per_step] == pytest.approx([want] * 2, rel=1e-9)
    _, _, _, js_g = explain_job(**L8, fp8_allgather=True)
    assert js["time"]["dp_comm_s"] - js_g["time"]["dp_comm_s"] == pytest.approx(want - 2 * M * 224 * _ar(4, 4.0),
                                                                                rel=1e-9)
    assert js["plan"]["fp8_precompute_scale"] is True


def test_reader_reads_precompute(tmp_path):
    """torchtitan's [float8] precompute_float8_dynamic_scale_for_fsdp with the fp8 all-gather is the job's
    fp8_precompute_scale (no longer listed as not modelled); without the all-gather it is ignored, as torchtitan
    ignores it (components/quantization/float8.py @e347b1e5e l. 95-99)."""
    from planner.trainers import load_trainer_config

    p = tmp_path / "t.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["float8"]\n[parallelism]\n'
                 'data_parallel_shard_degree = -1\n[float8]\nenable_fsdp_float8_all_gather = true\n'
                 'precompute_float8_dynamic_scale_for_fsdp = true\n')
    cfg = load_trainer_config(p, gpus=8)
    assert cfg.job["fp8_allgather"] is True and cfg.job["fp8_precompute_scale"] is True
    assert not any("precompute" in x for x in cfg.not_modelled + cfg.ignored)


def test_export_writes_precompute_and_reads_back(tmp_path):
    """A plan with fp8_precompute_scale exports [quantize.linear.float8] precompute_float8_dynamic_scale_for_fsdp = true
    beside the fp8 all-gather, and the file reads back to the same job field."""
    import tomllib

    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan
    from planner.cli.export import resolved_plan

    job = Job(model="llama3-8b", seq_len=8192, stack="torchtitan", precision="fp8", gpus=32, hardware="h200-sxm",
              global_batch=64, sharding="fsdp", fp8_allgather=True, fp8_precompute_scale=True)
    text, _ = export_plan(resolved_plan(job), "torchtitan")
    assert tomllib.loads(text)["quantize"]["linear"]["float8"] == {
        "enable_fsdp_float8_all_gather": True, "precompute_float8_dynamic_scale_for_fsdp": True, "filter_fqns": ["output"]}
    p = tmp_path / "e.toml"
    p.write_text(text)
    back = load_trainer_config(p, model="llama3-8b").job
    assert back["fp8_allgather"] is True and back["fp8_precompute_scale"] is True
