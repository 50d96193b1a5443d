"""The optimizer step's copies of the gradients below FSDP (planner/memory.py [sg], term step_grad_copies; stack_db
runs.sharding step_grads), each by hand from its source:

- DeepSpeed ZeRO-1/2 (stage_1_and_2.py @38327e07 step l. 1882-1916): per parameter group the partition's gradients
  flattened in the model dtype (2 B) and converted to fp32 (4 B) at once, beside the partition's gradients (2 B: the
  epilogue, l. 764-808, freed every other gradient, ZeRO-1's full ones), the bf16 weights and the partition's fp32
  master and Adam m, v; before them the gradient norm's fp64 copy of one parameter's piece (l. 1699), where larger.
- Megatron-LM @d98e8a64: main_grad.float() (distrib_optimizer.py l. 2792, optimizer.py l. 1097), an fp32 copy of the
  rank's shard (of every gradient under DDP) only where the grad buffer is bf16 (--grad-reduce-in-bf16, bytes_per_param
  mixed16), the buffer kept.

Llama 3 8B: P = 8,030,261,248 parameters; on d data-parallel ranks the partition L = P / d. What every moment of the
step holds beside the states (memory.py `kept`): the GEMM workspaces, the mpu buffer, the rotary tables, TE's dummy
weight gradients and quantized copies (the terms in HELD)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from planner.schema import ShardingMode, StepGrads

P = 8_030_261_248
HELD = ("workspaces", "mpu_buffer", "model_buffers", "quantized_weights", "dummy_wgrads")


def _8b(explain, stack, gpus, **kw):
    job = dict(model="llama3-8b", gpus=gpus, stack=stack, recompute="full", micro_batch=1, global_batch=gpus,
               seq_len=1024, hardware="h200-sxm")
    return explain(**{**job, **kw})[3]["memory"]


def _held(t):
    return sum(t[k] for k in HELD)


def test_deepspeed_zero2_step_is_the_peak(explain):
    """ZeRO-2 on 8 GPUs, full recompute: the step holds 2 P (bf16 weights) + 2 L (the partition's gradients) + 12 L
    (master, Adam) + 2 L (the flat copy) + 4 L (its fp32 copy) = 2 P + 20 L, above the backward's 2 P + 14 L + one
    layer's activations: the stage's allocated peak, the term its excess."""
    m = _8b(explain, "megatron-deepspeed", 8, sharding="zero2")
    t, L = m["terms"], P / 8
    assert (t["weights"], t["gradients"], t["master_weights"] + t["adam"]) == pytest.approx((2 * P, 2 * L, 12 * L), rel=1e-12)
    assert t["step_grad_copies"] > 0 and t["optimizer_step"] == 0.0
    assert m["allocated_bytes"] == pytest.approx(2 * P + 20 * L + _held(t), rel=1e-12)


def test_deepspeed_zero2_gradient_norm_fp64_piece(explain):
    """Before the copies, get_grad_norm_direct (l. 1699) takes each gradient piece of the partition in fp64, one at a
    time: 8 B x min(the largest parameter, L). On 64 GPUs L = P / 64 = 125,472,832 is below the embedding's
    128,256 x 4,096 = 525,336,576 elements, so the piece is the whole partition: 8 L, above the copies' 6 L. At seq 256
    (full recompute, a 1e7-element IPG bucket: the default 5e8's 1e9 B at the backward's peak would top it, memory.py
    [zb]) that moment is the peak: 2 P + 2 L + 12 L + 8 L = 2 P + 22 L. On 8 GPUs (the test above)
    L = 1,003,782,656 and the piece is the embedding's, 8 x 525,336,576 B < 6 L: the copies set the moment."""
    m = _8b(explain, "megatron-deepspeed", 64, sharding="zero2", seq_len=256, deepspeed_zero3={"reduce_bucket_size": 10**7})
    t = m["terms"]
    assert t["step_grad_copies"] > 0
    assert m["allocated_bytes"] == pytest.approx(2 * P + 22 * P / 64 + _held(t), rel=1e-12)


def test_deepspeed_zero1_step_frees_the_full_gradients(explain):
    """ZeRO-1 holds the full bf16 gradients (2 P) in the backward, only the partition's (2 L) at the step: on 8 GPUs
    the step's 2 P + 20 L = 4.5 P is below the backward's 4 P + 12 L = 5.5 P (no term); on 2 GPUs the step's
    2 P + 20 P / 2 = 12 P is above the backward's 4 P + 12 P / 2 = 10 P plus one layer's activations: the peak."""
    m8 = _8b(explain, "megatron-deepspeed", 8, sharding="zero1")
    assert m8["terms"]["step_grad_copies"] == 0.0 and m8["terms"]["gradients"] == pytest.approx(2 * P, rel=1e-12)
    m2 = _8b(explain, "megatron-deepspeed", 2, sharding="zero1")
    t = m2["terms"]
    assert t["step_grad_copies"] > 0
    assert m2["allocated_bytes"] == pytest.approx(2 * P + 20 * P / 2 + _held(t), rel=1e-12)


def test_deepspeed_zero3_has_no_step_grad_copies(explain):
    """ZeRO-3's step is [z3s] (zero3_step_grads), not this term."""
    t = _8b(explain, "megatron-deepspeed", 8, sharding="fsdp")["terms"]
    assert t["step_grad_copies"] == 0.0 and t["zero3_step_grads"] > 0


def test_megatron_distributed_optimizer_bf16_grads_float_copy(explain):
    """The distributed optimizer on 8 GPUs with --grad-reduce-in-bf16 (mixed16): the bf16 grad buffer (2 P) stays, the
    fp32 copy of the shard is 4 L: the step holds 2 P + 2 P + 12 L + 4 L = 4 P + 16 L, above the backward's 4 P + 12 L
    + one layer's activations. With the default fp32 buffer (bytes_per_param megatron) .float() is the tensor itself:
    no term."""
    m = _8b(explain, "megatron", 8, sharding="zero1", bytes_per_param="mixed16")
    t, L = m["terms"], P / 8
    assert t["step_grad_copies"] > 0
    assert m["allocated_bytes"] == pytest.approx(4 * P + 16 * L + _held(t), rel=1e-12)
    assert _8b(explain, "megatron", 8, sharding="zero1")["terms"]["step_grad_copies"] == 0.0


def test_megatron_ddp_bf16_grads_float_copy_is_every_gradient(explain):
    """Megatron DDP (Float16OptimizerWithFloat16Params) with --grad-reduce-in-bf16: main_grad.float() of every
    parameter, 4 P, beside the 16 P of states: the step holds 20 P. Its backward peak is the fp32-buffer plan's
    (bytes_per_param megatron, whose step adds nothing) less the 2 P its gradients save: the term is the difference."""
    m = _8b(explain, "megatron", 8, sharding="none", bytes_per_param="mixed16")
    fp32 = _8b(explain, "megatron", 8, sharding="none")
    t = m["terms"]
    assert m["allocated_bytes"] == pytest.approx(20 * P + _held(t), rel=1e-12)
    assert fp32["terms"]["step_grad_copies"] == 0.0
    assert t["step_grad_copies"] == pytest.approx(20 * P + _held(t) - (fp32["allocated_bytes"] - 2 * P), rel=1e-12)


def test_torchtitan_states_no_step_grad_copies(explain):
    """torchtitan (FSDP2) states no step_grads: its step's temporaries are [opt]'s."""
    t = explain(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", recompute="full", micro_batch=1,
                global_batch=8, seq_len=1024)[3]["memory"]["terms"]
    assert t["step_grad_copies"] == 0.0


def test_step_grads_refused_on_an_fsdp_mode():
    """Under FSDP a mode may state the fp32 copy of its gradient shard only (Megatron-FSDP's update_main_grads)."""
    sg = StepGrads(flat=True, fp32=True, partition_only=True, sources=["s"])
    ShardingMode(name="z2", level="zero2", step_grads=sg, spelling="x", sources=["s"])
    with pytest.raises(ValidationError, match="step_grads under FSDP is an fp32 copy"):
        ShardingMode(name="z3", level="fsdp", step_grads=sg, spelling="x", sources=["s"])
    ShardingMode(name="z3", level="fsdp", step_grads=StepGrads(flat=False, fp32=True, partition_only=False, sources=["s"]),
                 spelling="x", sources=["s"])


def test_megatron_ci_last_step_allocated_holds_the_fp32_copy():
    """A cross-check on measured data (tests/data/megatron_ci, the Megatron-LM CI's golden values): Megatron logs the
    allocated bytes after the last step, when the step's fp32 copies of the gradients are still live (freed by the next
    train_step's zero_grad). On the --fp16 distributed-optimizer row (fp16 grad buffer, no
    --accumulate-allreduce-grads-in-fp32) that figure less the planner's persistent bytes (states, workspaces and the
    other buffers) is the fp32 copy of the shard, 4 B x L = the fp32 master's bytes, within 6 KiB (32,060,416 B against
    32,054,784 B); on a --bf16 distributed-optimizer row of the same model (fp32 buffer: .float() is the tensor itself)
    3,584 B are left, though its fp32 master is the same 32,054,784 B."""
    from planner.megatron_ci import report_corpus
    from tests.test_megatron_ci import CORPUS

    fp16 = "gpt__gpt3_mcore_tp1_pp1_resume_torch_dist_dist_optimizer_overlap_grad_reduce_param_gather__dev_dgx_h100"
    bf16 = "gpt__gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files__dev_dgx_h100"
    corpus = {r["row_id"]: r for r in json.loads(CORPUS.read_text())["rows"]}
    rows = {r["row_id"]: r for r in report_corpus(CORPUS, ids=[fp16, bf16])["rows"]}
    keep = ("weights", "gradients", "master_weights", "adam") + HELD

    def left(rid):
        return corpus[rid]["ground_truth"]["mem_allocated_bytes_last_step"] - sum(rows[rid]["terms"][k] for k in keep)

    assert abs(left(fp16) - rows[fp16]["terms"]["master_weights"]) < 6 * 1024
    assert abs(left(bf16)) < 6 * 1024 and rows[bf16]["terms"]["master_weights"] == rows[fp16]["terms"]["master_weights"]
