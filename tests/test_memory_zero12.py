"""DeepSpeed ZeRO-1/2's gradient reduction buffers and its MoE step (planner/memory.py [zb], [sg]; stack_db
megatron-deepspeed runs.sharding step_grads ipg_buffer, reduction, moe_group_params), each by hand from
microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage_1_and_2.py:

- the optimizer's backward (l. 2038-2057) allocates the contiguous-gradient (IPG) buffer, reduce_bucket_size (5e8)
  elements in the model dtype (2 B: 1e9 B), a second with overlap_comm; the engine runs it for the loss (engine.py
  l. 2123-2126; the pipeline engine only on the last stage, pipe/engine.py l. 803-812);
- ZeRO-2 allocates a new grads_in_partition at the first bucket each backward flushes (l. 1344-1355) beside the one
  averaged_gradients keeps from the earlier micro-batches (l. 783-800);
- ZeRO-1 reduces once after the last backward: the full gradients, the buffer and the partition at once;
- DeepSpeed MoE steps each expert group apart (moe/utils.py l. 72-148, groups of at most 178,956,971 elements).

Llama 3 8B: P = 8,030,261,248 parameters; on 8 GPUs the partition L = P / 8; its untied output layer V h =
128,256 x 4,096 = 525,336,576 elements, above the 5e8 bucket."""

from __future__ import annotations

import pytest

P, OUT = 8_030_261_248, 525_336_576
HELD = ("workspaces", "mpu_buffer", "model_buffers", "quantized_weights", "dummy_wgrads")


def _8b(explain, **kw):
    job = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", recompute="full", micro_batch=1, global_batch=8,
               seq_len=1024, hardware="h200-sxm")
    return explain(**{**job, **kw})[3]["memory"]


def test_ipg_buffers_at_the_backward_peak(explain):
    """ZeRO-2 and ZeRO-1: 2 B x 5e8 at the peak; two with overlap_comm (dp_comm_overlap); ZeRO-3 prices its own
    (zero3_ipg_bucket), stage 0 none (zero0: fp16's FP16_Optimizer, so an fp16 job)."""
    assert _8b(explain, sharding="zero2")["terms"]["zero12_ipg_bucket"] == 1e9
    assert _8b(explain, sharding="zero1")["terms"]["zero12_ipg_bucket"] == 1e9
    assert _8b(explain, sharding="zero2", dp_comm_overlap=True)["terms"]["zero12_ipg_bucket"] == 2e9
    assert _8b(explain, sharding="zero2", deepspeed_zero3={"reduce_bucket_size": 10**8})["terms"]["zero12_ipg_bucket"] == 2e8
    z3 = _8b(explain, sharding="fsdp")["terms"]
    assert z3["zero12_ipg_bucket"] == 0.0 and z3["zero3_ipg_bucket"] == 1e9
    assert _8b(explain, sharding="none", fp16=True)["terms"]["zero12_ipg_bucket"] == 0.0


def test_ipg_buffer_only_on_the_last_pipeline_stage(explain):
    """Under PP the engine's backward (and its buffer) runs on the last stage only: pp 2, ZeRO-1, the last stage's
    allocated bytes hold 1e9 B of buffer the first stage's do not (their difference with and without a 1-element
    bucket)."""
    def stages(bucket):
        m = _8b(explain, sharding="zero1", gpus=16, global_batch=16, pp=2, deepspeed_zero3={"reduce_bucket_size": bucket})
        return {k: m["stages"][k]["allocated_bytes"] for k in ("first", "last")}

    big, small = stages(500_000_000), stages(1)
    assert big["last"] - small["last"] == pytest.approx(1e9 - 2, rel=1e-12)
    assert big["first"] - small["first"] < 1e9  # no buffer at the first stage's peak (the reduction's moment below it)


def test_zero2_second_partition_from_the_second_micro_batch(explain):
    """ZeRO-2, 2 micro-batches: at the second backward's first flush a new partition (2 L) beside the accumulated one;
    the output layer's gradient (above the bucket) flushes alone right after the output layer's backward, so the
    moment holds it (2 x 525,336,576 B) and neither the loss's tensors nor a layer's recompute buffer: the term is
    2 L + 2 V h - output_activations - recompute_buffer beyond the peak. One micro-batch: none."""
    t = _8b(explain, sharding="zero2", global_batch=16)["terms"]
    assert t["zero12_grad_partition"] == pytest.approx(
        2 * P / 8 + 2 * OUT - t["output_activations"] - t["recompute_buffer"], rel=1e-12)
    assert _8b(explain, sharding="zero2")["terms"]["zero12_grad_partition"] == 0.0


def test_zero2_second_partition_inside_the_layers_backward(explain):
    """TP 2 (16 GPUs, dp 8), 2 micro-batches: the output layer's 262,668,288 elements a rank fit in the bucket, so the
    first flush comes inside the layers' backward, after the whole layers whose gradients the rest of the bucket
    holds: floor((5e8 - 262,668,288) / 109,060,096) = 2 (a layer's 218,103,808 split parameters / 2 + its 8,192 norm
    weights). The moment frees the loss's tensors and those two layers' activations (full recompute: each layer's
    input, layer_activations / 32 of the one micro-batch in flight), holds the recompute buffer: the term is
    2 L - output_activations - 2 x layer_activations / 32 (2 L: the states' gradients term again)."""
    t = _8b(explain, sharding="zero2", gpus=16, tp=2, global_batch=16)["terms"]
    assert t["zero12_grad_partition"] == pytest.approx(
        t["gradients"] - t["output_activations"] - 2 * t["layer_activations"] / 32, rel=1e-12)


def test_zero1_overlap_comm_reduces_in_the_last_backward(explain):
    """ZeRO-1 with overlap_comm (dp_comm_overlap; Megatron-DeepSpeed's GPTModel, --no-pipeline-parallel: DeepSpeed turns
    it off for the pipeline model, engine.py l. 1639-1642): the hooks exist (stage_1_and_2.py l. 527-528) and act at the
    accumulation boundary, the last backward (l. 1424-1426; engine.py l. 2125 sets the flag before it): each gradient
    moves into the two IPG buffers, and the first flush copies the rank's partition into grads_in_partition (allocated
    whole, l. 1344-1355). Llama 3 8B's output layer gradient (above the bucket) leaves alone at the next hook, right
    after the output layer's backward: the peak's states (the full gradients among them), both buffers and the new
    partition 2 L, the loss's tensors freed and no layer's recompute buffer yet: 2 L - output_activations -
    recompute_buffer beyond the peak (1.08 GB; 0 before, priced as the reduction after the backward below the peak of
    two buffers; without overlap_comm 0.81 GB after the backward, the test below), with
    one micro-batch or two; the epilogue's moment holds less (the full gradients moved into the buffers and the
    partition)."""
    for gb in (8, 16):
        t = _8b(explain, sharding="zero1", dp_comm_overlap=True, global_batch=gb)["terms"]
        assert t["zero12_ipg_bucket"] == 2e9
        assert t["zero12_grad_partition"] == pytest.approx(
            2 * P / 8 - t["output_activations"] - t["recompute_buffer"], rel=1e-12)


def test_zero1_reduction_after_the_backward(explain):
    """ZeRO-1 on 8 GPUs: after the last backward the states (the full bf16 gradients 2 P among them, 4 P + 12 L), the
    reduction's buffer (1e9 B) and the partition (2 L): 4 P + 14 L + 1e9, above the backward's peak (the same buffer
    at it) by 2 L less the activations: the stage's allocated peak. The step's 2 P + 20 L stays below (no copies
    term)."""
    m = _8b(explain, sharding="zero1")
    t, L = m["terms"], P / 8
    assert m["allocated_bytes"] == pytest.approx(4 * P + 14 * L + 1e9 + sum(t[k] for k in HELD), rel=1e-12)
    assert t["zero12_grad_partition"] == pytest.approx(
        2 * L - t["layer_activations"] - t["output_activations"] - t["recompute_buffer"], rel=1e-12)
    assert t["step_grad_copies"] == 0.0


def test_moe_step_copies_one_group_at_a_time(explain):
    """Mixtral 8x7B, ZeRO-2 on 8 GPUs, EP 8 (every rank's expert-data-parallel group is itself, d_e 1): the dense
    partition L_d = (46,702,792,704 - 45,097,156,608) / 8 = 200,704,512; the rank's experts (5.64e9) sit in groups of at
    most 178,956,971 elements, stepped one at a time: the copies are 6 B x max(L_d, 178,956,971) = 6 L_d, not
    6 B x (L_d + 5.64e9). At seq 256 the step (every state, the 2 B partition of every group, the copies) is the peak;
    the fp64 norm piece, 8 B x the 131,072,000-element embedding, stays below the copies."""
    m = explain(model="mixtral-8x7b", gpus=8, stack="megatron-deepspeed", sharding="zero2", ep=8, recompute="full",
                micro_batch=1, global_batch=8, seq_len=256, hardware="h200-sxm")[3]["memory"]
    t = m["terms"]
    dense = (46_702_792_704 - 45_097_156_608) / 8
    states = t["weights"] + t["gradients"] + t["master_weights"] + t["adam"]
    assert t["gradients"] == pytest.approx(2 * (dense + 45_097_156_608 / 8), rel=1e-12)
    assert m["allocated_bytes"] == pytest.approx(states + 6 * dense + sum(t[k] for k in HELD), rel=1e-12)


def test_zero1_overlap_comm_under_pp_keeps_the_reduction_after_the_backward(explain):
    """Under PP DeepSpeed's pipeline engine turns overlap_comm off (engine.py l. 1639-1642): the in-backward moment is
    priced at pp 1 only, so pp 2's first stage (its moment the reduction after the backward, its peak holding no
    buffer) allocates the same bytes with dp_comm_overlap as without it."""
    job = dict(sharding="zero1", gpus=16, global_batch=16, pp=2)
    on, off = (_8b(explain, **job, dp_comm_overlap=d)["stages"]["first"]["allocated_bytes"] for d in (True, False))
    assert on == off
