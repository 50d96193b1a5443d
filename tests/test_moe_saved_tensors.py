"""What an MoE layer saves for its backward under the megatron stack (memory.py [14], issue 23:
Qwen3-30B-A3B on H100 with PP2, whose NVIDIA presets the planner had priced above 80 GB): the
routed experts' outputs before the combine are not kept (Megatron-Core multiplies the routing
weights inside the SwiGLU; Transformer Engine's unpermute keeps only its row map), Transformer
Engine's GroupedLinear saves its quantized inputs under fp8 (1 B), and the router keeps its bf16
input (norm2_out at 2 B in an MoE layer). Every figure by hand from the model's shapes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.catalog import load_model, load_stack
from planner.layers import context, layer_list
from planner.memory import fp8_saved_bytes, kind_activation_bytes, layer_memory
from planner.plan import PlanArrays, resolve
from planner.precisions import BF16, FP8, NVFP4
from planner.schema import Job

T = 4096  # one micro-batch of one 4,096-token sequence
H, FE, TOPK, E = 2048, 768, 8, 128  # Qwen3-30B-A3B: hidden, expert width, routed experts per token, experts
QK = 2 * (32 + 4) * 128  # its q/k norms' bf16 inputs a token (32 query and 4 KV heads of 128; attention.py [10])
LSE = 4 * 32  # the fused attention core's fp32 log-sum-exp a token, 32 query heads (attention.py [ls])


def _moe_kind():
    ll = layer_list(load_model("qwen3-30b-a3b"))
    (kind,) = [k for k in ll.kinds if k.has_experts]
    return kind


def _ctx(precision):
    return context(PlanArrays(tp=1, cp=1, pp=1, vpp=1, dp=16, mbs=1, gbs=1024, seq=T, sharding=1, shard=1,
                              recompute=0, sp=0, schedule=0, precision=precision, ep=16))


def test_megatron_keeps_no_expert_outputs():
    """The stack field is false for megatron and true by default (other stacks unchanged)."""
    assert load_stack("megatron").memory.moe_keeps_expert_out is False
    assert load_stack("torchtitan").memory.moe_keeps_expert_out is True


def test_moe_kind_tensors_by_hand_bf16_and_fp8():
    """The MoE block's own tensors per token (keeps=() leaves the standard ones out): router
    logits 4 E = 512 B (fp32), expert inputs 2 x 8 x 2048 = 32,768 B, gate+up 2 x 2 x 768 x 8 =
    24,576 B, activation outputs 2 x 768 x 8 = 12,288 B; the expert outputs (32,768 B) dropped.
    Under fp8 the two GEMM inputs are 1 B: 16,384 and 6,144 B. The attention block's own
    tensors, the q/k norms' inputs (QK = 9,216 B, bf16 in every precision) and the fused core's fp32 log-sum-exp
    (LSE = 128 B, kept by every policy that keeps the core's state), beside them."""
    kind, f8 = _moe_kind(), fp8_saved_bytes(load_stack("megatron"))
    never = ("moe_expert_out",)
    bf16 = float(kind_activation_bytes(kind, _ctx(BF16), keeps=(), fp8_bytes=f8, drops=never))
    fp8 = float(kind_activation_bytes(kind, _ctx(FP8), keeps=(), fp8_bytes=f8, drops=never))
    kept = float(kind_activation_bytes(kind, _ctx(BF16), keeps=(), fp8_bytes=f8))
    assert bf16 == T * (4 * E + 2 * TOPK * H + 2 * 2 * FE * TOPK + 2 * FE * TOPK + QK + LSE) == T * (70144 + 9344)
    assert fp8 == T * (4 * E + 1 * TOPK * H + 2 * 2 * FE * TOPK + 1 * FE * TOPK + QK + LSE) == T * (47616 + 9344)
    assert kept - bf16 == T * 2 * TOPK * H


def test_router_input_stays_bf16_under_fp8():
    """norm2_out is the MLP's up-projection input in a dense layer (1 B under fp8) but the
    router's bf16 input in an MoE layer (2 B)."""
    f8 = fp8_saved_bytes(load_stack("megatron"))
    moe = _moe_kind()
    dense = layer_list(load_model("llama3-8b")).kinds[0]
    moe_only = float(kind_activation_bytes(moe, _ctx(FP8), keeps=(), fp8_bytes=f8))
    assert float(kind_activation_bytes(moe, _ctx(FP8), keeps=("norm2_out",), fp8_bytes=f8)) - moe_only == T * 2 * H
    dense_only = float(kind_activation_bytes(dense, _ctx(FP8), keeps=(), fp8_bytes=f8))
    h8 = 4096  # Llama 3 8B hidden size
    assert float(kind_activation_bytes(dense, _ctx(FP8), keeps=("norm2_out",), fp8_bytes=f8)) - dense_only == T * 1 * h8


def _stored(precision, keeps_expert_out):
    settings, plan, _ = resolve(Job(model="qwen3-30b-a3b", hardware="h100-sxm", gpus=16, tp=1, pp=1, dp=16, ep=16,
                                    etp=1, micro_batch=1, global_batch=1024, seq_len=T, sharding="zero1",
                                    recompute="none", precision=precision, stack="megatron"))
    st = settings.stack
    settings = dataclasses.replace(settings, stack=st.model_copy(
        update={"memory": st.memory.model_copy(update={"moe_keeps_expert_out": keeps_expert_out})}))
    ll = layer_list(settings.model)
    stored, _, _ = layer_memory(settings, plan, context(plan, settings.moe_capacity_factor), ll)
    (i,) = [j for j, k in enumerate(ll.kinds) if k.has_experts]
    return float(stored[i])


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_layer_memory_wires_the_stack_field(precision):
    """A resolved megatron plan's MoE layer keeps 2 x 8 x 2048 B a token fewer with the stack's
    moe_keeps_expert_out false than with it true (128 MiB for 4,096 tokens), in bf16 and fp8."""
    assert _stored(precision, True) - _stored(precision, False) == T * 2 * TOPK * H == 128 * 2**20


def test_fp8_saves_the_expert_gemm_inputs_at_one_byte():
    """The same MoE layer keeps T x (8 x 2048 + 8 x 768) B fewer in fp8 than in bf16 from the
    experts (their up- and down-projection inputs at 1 B), and T x (2048 + 4096) B fewer from the
    attention block's GEMM inputs (QKV input h, output projection input 32 x 128) less the fused
    attention's own bf16 output kept beside the fp8 copy (+2 x 4096): the net by hand."""
    attention = 1 * H + 1 * 4096 - 2 * 4096  # norm1_out and attn_out at 1 B; TE keeps O at 2 B as well
    assert _stored("bf16", False) - _stored("fp8", False) == T * (TOPK * H + TOPK * FE + attention)


def test_nvfp4_saves_the_expert_gemm_inputs_at_nvfp4_width():
    """Under nvfp4 Transformer Engine's GroupedLinear quantizes its inputs with the recipe's NVFP4
    quantizers and saves them as it does under fp8 (memory.py [14]): e2m1 values and an e4m3 scale
    per 16, 0.5 + 1/16 B an element. The MoE block's own tensors per token, by hand from the
    fp8 case above: expert inputs 8 x 2048 and activation outputs 8 x 768 at 0.5625 B instead of
    1 B; the router logits, the gate+up output and the q/k norms' inputs stay as they are."""
    kind, f8 = _moe_kind(), fp8_saved_bytes(load_stack("megatron"))
    never = ("moe_expert_out",)
    fp4 = float(kind_activation_bytes(kind, _ctx(NVFP4), keeps=(), fp8_bytes=f8, drops=never))
    want = T * (4 * E + 0.5625 * TOPK * H + 2 * 2 * FE * TOPK + 0.5625 * FE * TOPK + QK + LSE)
    assert fp4 == want == T * (37760 + 9344)


def test_drops_by_row_mask():
    """kind_activation_bytes' drops as {name: rows} (memory.selective_drops): a tensor leaves the sum on the rows
    its mask marks only. Two plans, bf16 and fp8, the routed experts' gate+up and activation outputs dropped on the
    bf16 row only: that row is the bf16 figure above less T x (24,576 + 12,288) B, the fp8 row the fp8 figure
    whole. The fused core's state ("scores") dropped on one row: each row as its own plan with or without the drop
    (under fp8 the attention output's width depends on it)."""
    kind, f8 = _moe_kind(), fp8_saved_bytes(load_stack("megatron"))
    two = context(PlanArrays(tp=1, cp=1, pp=1, vpp=1, dp=16, mbs=1, gbs=1024, seq=T, sharding=1, shard=1, recompute=0,
                             sp=0, schedule=0, precision=np.array([BF16, FP8]), ep=16))
    rows = np.array([True, False])
    drops = {"moe_expert_out": True, "moe_expert_gate_up": rows, "moe_expert_act_out": rows}
    got = kind_activation_bytes(kind, two, keeps=(), fp8_bytes=f8, drops=drops)
    assert got.tolist() == [T * (70144 + 9344 - 2 * 2 * FE * TOPK - 2 * FE * TOPK), T * (47616 + 9344)]
    for prec, row in ((BF16, 0), (FP8, 1)):  # a mask of True is the name dropped on every row
        names = ("moe_expert_out",) + (("moe_expert_gate_up", "moe_expert_act_out") if row == 0 else ())
        assert float(kind_activation_bytes(kind, _ctx(prec), keeps=(), fp8_bytes=f8, drops=names)) == got[row]
    fp8 = context(dataclasses.replace(two.plan, precision=np.array([FP8, FP8])))
    by_row = kind_activation_bytes(kind, fp8, fp8_bytes=f8, drops={"scores": rows}, core_out_bytes=2.0)
    alone = [float(kind_activation_bytes(kind, _ctx(FP8), fp8_bytes=f8, drops=d, core_out_bytes=2.0))
             for d in (("scores",), ())]
    assert by_row.tolist() == alone and alone[1] - alone[0] == T * 2 * 4096  # TE's bf16 O beside the fp8 copy
