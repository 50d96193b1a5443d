"""Delayed scaling's amax reductions (step.py [34], stack_db megatron fp8_recipes delayed amax_reduction).

Transformer Engine @4329ff84 (the one Megatron-LM d98e8a64 pins) all-reduces (max) one buffer of every fp8 module's
current forward amaxes at the exit of each fp8_autocast region (quantization.py reduce_and_update_fp8_tensors,
autocast_exit l. 762-772), and the backward ones at the region's backward end (the first module's backward, linear.py
l. 1362-1370): 3 fp32 a GEMM forward (input, weight, output), 2 backward (base.py l. 1060-1062). Megatron-Core opens
one region a TransformerBlock forward under delayed scaling (transformer_block.py l. 619-660) over TP x DP x CP
(fp8_utils.py l. 857-865). Priced inside tp_comm (tp_fp8_amax_s)."""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner.step import Collectives, _compute_pass, amax_group, fp8_amax_comm, fp8_gemms_per_layer, step_time

# Llama 3 8B (32 layers: qkv, attention output, MLP up (gate and up in one), MLP down: 4 fp8 GEMMs a layer) on 8 H100,
# tp 2 x dp 4, 8 micro-batches of one 4,096-token sequence
L8 = dict(model="llama3-8b", gpus=8, micro_batch=1, global_batch=32, seq_len=4096, hardware="h100-sxm",
          stack="megatron", tp=2, precision="fp8")


def _ctx(explain, **over):
    s, p, est, js = explain(**{**L8, **over})
    sc, _, _ = _compute_pass(s, p)
    return s, p, js, sc, Collectives(sc)


def test_llama3_8b_tp2_dp4_delayed_hand_derived(explain):
    """Buffers: 32 layers x 4 GEMMs = 128 fp8 GEMMs on the rank; forward 128 x 3 x 4 B = 1,536 B, backward 128 x 2 x
    4 B = 1,024 B, each one all-reduce over the 8 ranks of TP x DP (one NVLink domain). NCCL's LL ring (comm.py
    "Protocols", tuning.cc @v2.20.3-1 l. 57, 67, 181): 6.6 us + 14 steps x 0.6 us = 15.0 us + 2 x 7/8 x S at
    min(370 GB/s / 4, 87.7 GB/s) = 87.7 GB/s: 15.0306 + 15.0204 us = 30.0511 us a micro-batch, 8 micro-batches:
    240.41 us a step. (Under the Simple protocol alone: NVLS, 23 us + S / 274.3 GB/s, 46.0093 us and 368.07 us.)"""
    s, p, js, sc, coll = _ctx(explain, fp8_recipe="delayed")
    assert int(p.dp) == 4 and int(p.vpp) == 1 and int(p.microbatches) == 8
    gemms, modules = fp8_gemms_per_layer(sc)
    assert [float(g) for g in gemms] == [4.0] and [float(m) for m in modules] == [4.0]
    size, stride = amax_group(sc, coll)
    assert int(size) == 8 and int(stride) == 1
    per_mb = (15.0e-6 + 1.75 * 1536.0 / 87.7e9) + (15.0e-6 + 1.75 * 1024.0 / 87.7e9)
    assert per_mb == pytest.approx(30.0511e-6, rel=1e-5)
    assert float(fp8_amax_comm(sc, coll)["last"]) == pytest.approx(per_mb, rel=1e-9)
    terms, extra = step_time(s, p)
    assert float(extra["tp_fp8_amax_s"]) == pytest.approx(8 * per_mb, rel=1e-9)
    assert js["time"]["tp_fp8_amax_s"] == pytest.approx(240.41e-6, rel=1e-4)


def test_inside_tp_comm_and_none_without_delayed(explain):
    """tp_comm_s holds it: the delayed plan's tp_comm less tp_fp8_amax_s is tensorwise's tp_comm less its per-gather TP
    amax all-reduces (tensorwise has no amax buffer: fp8_amax_comm None, no tp_fp8_amax_s); bf16 none either."""
    s, p, js, sc, coll = _ctx(explain, fp8_recipe="tensorwise")
    assert fp8_amax_comm(sc, coll) is None and "tp_fp8_amax_s" not in js["time"]
    s, p, js, sc, coll = _ctx(explain, precision="bf16")
    assert fp8_amax_comm(sc, coll) is None and "tp_fp8_amax_s" not in js["time"]
    s, p, js_d, sc, coll = _ctx(explain, fp8_recipe="delayed")
    terms, extra = step_time(s, p)
    s2, p2 = s, p
    import dataclasses
    st = s.stack
    rec = st.fp8_recipes["delayed"].model_copy(update={"amax_reduction": None})
    s_off = dataclasses.replace(s, stack=st.model_copy(update={"fp8_recipes": {**st.fp8_recipes, "delayed": rec}}))
    t_off, x_off = step_time(s_off, p2)
    assert "tp_fp8_amax_s" not in x_off
    assert float(terms.tp_comm - t_off.tp_comm) == pytest.approx(float(extra["tp_fp8_amax_s"]), rel=1e-9)


def test_chunks_and_group_across_nodes(explain):
    """Each model chunk is a TransformerBlock of its own, one region each: at pp 2 x vpp 2 a micro-batch runs 2 forward
    and 2 backward reductions on a stage, each of the rank's whole buffer (its 16 layers, both chunks: 64 GEMMs,
    768 B / 512 B). The group TP x DP spans the 32 ranks of tp 2 x dp 16 at stride 1 (pp outermost in this order
    would not be; the default order tp-cp-pp-dp puts pp between, priced at the smallest stride, amax_group)."""
    s, p, js, sc, coll = _ctx(explain, gpus=64, pp=2, vpp=2, global_batch=64, fp8_recipe="delayed")
    assert int(p.dp) == 16 and int(p.vpp) == 2
    size, stride = amax_group(sc, coll)
    assert int(size) == 32 and int(stride) == 1
    one = (coll(comm.ALL_REDUCE, np.float64(768.0), np.asarray(32), np.asarray(1))
           + coll(comm.ALL_REDUCE, np.float64(512.0), np.asarray(32), np.asarray(1)))
    got = fp8_amax_comm(sc, coll)
    assert float(got["first"]) == pytest.approx(2.0 * float(one), rel=1e-12)
    assert float(got["last"]) == pytest.approx(2.0 * float(one), rel=1e-12)


def test_full_recompute_reduces_per_checkpoint_and_per_module(explain):
    """Full recompute, every layer its own TE checkpoint: the backward's 32 re-runs each reduce the forward buffer at
    their autocast's exit (33 forward reductions a micro-batch with the block's own) and each re-run fp8 module's
    backward reduces the backward buffer (32 layers x 4 modules = 128, the block's one consumed in the no-grad
    forward): 33 AR(1,536 B) + 128 AR(1,024 B) = 33 x 15.0306 + 128 x 15.0204 us = 2.4186 ms a micro-batch (NCCL's LL
    ring: test_llama3_8b_tp2_dp4_delayed_hand_derived; 3.7036 ms under Simple's NVLS)."""
    s, p, js, sc, coll = _ctx(explain, fp8_recipe="delayed", recompute="full")
    assert float(sc.rc["last"]) == 32.0
    want = 33 * (15.0e-6 + 1.75 * 1536.0 / 87.7e9) + 128 * (15.0e-6 + 1.75 * 1024.0 / 87.7e9)
    assert want == pytest.approx(2.4186e-3, rel=1e-4)
    assert float(fp8_amax_comm(sc, coll)["last"]) == pytest.approx(want, rel=1e-9)
