"""Two small sourced mechanisms of sequence parallelism's replicated parameters (issues 21 / 22, spnorm).

1. Megatron-Core sums the gradients SP leaves partial on each TP rank (the norms', the row-parallel biases', the
   router's, MLA's down projections') in one all-reduce over the TP group once a step, after the data-parallel gradient
   sync: NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/finalize_model_grads.py l. 639-640, 661, 416-484
   (_flatten_dense_tensors into one buffer of main_grad, fp32 unless --grad-reduce-in-bf16). step.py [27],
   stack_db megatron runs.sequence_parallel norm_grads_step_allreduce, priced inside tp_comm (tp_sp_norm_grads_s).
2. An FSDP unit holds a layer's replicated parameters whole (memory.unit_params): Megatron marks the norms no
   tensor_model_parallel, torchtitan's SequenceParallel gives them a Replicate placement; before, a dense layer's
   were divided by tp.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner.memory import unit_params
from planner.params import count_params
from planner.step import Collectives, _compute_pass, sp_partial_elements, step_time

L8 = dict(model="llama3-8b", gpus=8, micro_batch=1, global_batch=8, seq_len=4096, hardware="h100-sxm",
          stack="megatron", tp=8)


def _coll(s, p):
    sc, _, _ = _compute_pass(s, p)
    return sc, Collectives(sc)


def test_llama3_8b_tp8_all_reduces_its_norms_fp32_once_a_step(explain):
    """Llama 3 8B at tp 8, SP on (megatron's default at tp > 1), one stage: 32 layers x 2 RMSNorms x 4,096 + the final
    norm's 4,096 = 266,240 parameters (no linear biases, no router), each an fp32 main gradient (the megatron preset's
    gradients, 4 B): 1,064,960 bytes in one all-reduce over the 8 TP ranks, once a step, inside tp_comm_s."""
    s, p, est, js = explain(**L8)
    assert int(p.sp) == 1 and s.bpp.gradients == 4.0
    sc, coll = _coll(s, p)
    assert float(sp_partial_elements(sc)) == 2 * 4096 * 32 + 4096 == 266_240
    want = float(coll(comm.ALL_REDUCE, np.float64(1_064_960.0), np.asarray(8), coll.strides["tp"]))
    terms, extra = step_time(s, p)
    assert float(extra["tp_sp_norm_grads_s"]) == pytest.approx(want, rel=1e-12) and want > 0
    assert js["time"]["tp_sp_norm_grads_s"] == pytest.approx(want, rel=1e-12)
    # inside tp_comm: the same plan's tp_comm less it is the per-micro-batch collectives' (m = 8 micro-batches)
    from planner.step import grouped_layer_times, tp_comm
    per_mb = float(tp_comm(sc, coll, grouped_layer_times(sc))["last"])  # one stage: the last (and only) one
    assert float(terms.tp_comm) == pytest.approx(8 * per_mb + want, rel=1e-12)


def test_row_parallel_biases_and_pipeline_stages(explain):
    """Megatron's GPT 1.7B (Narayanan et al. 2021 Table 1: 24 layers, h 2,304, LayerNorm, linear biases) at tp 8, pp 2:
    a layer's two LayerNorms (weight and bias, 2 h each) and its two row-parallel biases (the attention output's and
    the MLP down projection's, h each) are 6 h = 13,824; each stage holds 12 layers, the last one also the final
    LayerNorm's 2 h: 12 x 13,824 + 4,608 = 170,496 parameters, the stage with the most."""
    s, p, est, js = explain(model="megatron-gpt-1.7b", gpus=16, micro_batch=1, global_batch=16, seq_len=2048,
                            hardware="h100-sxm", stack="megatron", tp=8, pp=2)
    assert s.model.linear_bias and int(p.sp) == 1 and s.model.num_layers == 24 and s.model.hidden_size == 2304
    sc, _ = _coll(s, p)
    assert float(sp_partial_elements(sc)) == 12 * 6 * 2304 + 2 * 2304 == 170_496


def test_nothing_without_sp_at_tp1_or_on_torchtitan(explain):
    """SP off, tp 1, or a stack that does not sum them so (torchtitan: DTensor's Partial gradients, not priced):
    0 and no key in the JSON."""
    for kw in (dict(sequence_parallel=False), dict(tp=1), dict(stack="torchtitan", gpus=16, global_batch=16, sharding="fsdp")):
        s, p, est, js = explain(**{**L8, **kw})
        assert float(step_time(s, p)[1]["tp_sp_norm_grads_s"]) == 0.0
        assert "tp_sp_norm_grads_s" not in js["time"]


def test_bf16_main_grads_halve_the_bytes(explain):
    """--grad-reduce-in-bf16 (the mixed16 preset: gradients 2 B): the main gradients, and so the all-reduce's buffer,
    bf16: 266,240 x 2 B."""
    s, p, est, js = explain(**L8, bytes_per_param="mixed16")
    assert s.bpp.gradients == 2.0
    sc, coll = _coll(s, p)
    want = float(coll(comm.ALL_REDUCE, np.float64(266_240 * 2.0), np.asarray(8), coll.strides["tp"]))
    assert float(step_time(s, p)[1]["tp_sp_norm_grads_s"]) == pytest.approx(want, rel=1e-12)


def test_step_allreduce_needs_the_sum():
    """A stack that says it all-reduces them once a step must say it sums them."""
    from planner.schema import SequenceParallelRuns

    with pytest.raises(ValueError, match="norm_grads_step_allreduce true needs norm_grads_reduced true"):
        SequenceParallelRuns(supported=True, norm_grads_reduced=False, norm_grads_step_allreduce=True, sources=["x"])


def test_fsdp_unit_holds_the_norms_whole(explain):
    """Llama 3 405B at tp 8: a layer's unit is its TP-split matrices / 8 and its two RMSNorms whole. Attention
    16,384 x (16,384 + 2 x 8 x 128) + 16,384 x 16,384 = 570,425,344, MLP 3 x 16,384 x 53,248 = 2,617,245,696:
    3,187,671,040 / 8 + 2 x 16,384 = 398,491,648 parameters (before: (3,187,671,040 + 32,768) / 8 = 398,462,976,
    2 x 16,384 x (1 - 1/8) = 28,672 fewer)."""
    s, p, est, js = explain(model="llama3-405b", gpus=64, micro_batch=1, global_batch=64, seq_len=8192,
                            hardware="h100-sxm", stack="torchtitan", sharding="fsdp", tp=8)
    pc = count_params(s.model)
    (kp,) = pc.kind_params
    assert kp.split == 3_187_671_040 and kp.replicated == 2 * 16_384
    assert float(unit_params(pc, p, layers_only=True)) == 398_491_648 == 398_462_976 + 28_672
