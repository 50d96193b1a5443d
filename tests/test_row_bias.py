"""Row-parallel biases are whole on every TP rank (issue 21 memory, issue 22 step; layers/common.py [rb]).

A RowParallelLinear adds its bias after the partial outputs are summed, so each TP rank holds all `output_size` of
it: NVIDIA/Megatron-LM @d98e8a64 megatron/core/tensor_parallel/layers.py l. 1482-1499 (`torch.empty(self.output_size`;
the column-parallel bias, l. 1110-1123, is `output_size_per_partition`), microsoft/Megatron-DeepSpeed @f4157bea the
same file l. 750-759, Transformer Engine's row mode (module/linear.py l. 1622-1625, 1703-1709), torchtitan's
RowwiseParallel (a Replicate() bias) and gpt-oss's mlp2_bias (Replicate() over TP). Before, planner/layers counted the
attention output's and the MLP down projection's bias (h each) among the TP-split parameters (/ tp). The whole model's
count (6N FLOPs) does not move; the per-GPU weights, gradients, optimizer states and DP traffic do.

The same issue's step half: the TP all-reduce of the SP-partial gradients (step.py [27]) reads each form's own fields
(BlockParams.replicated, row biases included, and .qk_norm), and Megatron runs it without SP too, over the query/key
norms (finalize_model_grads.py l. 452-453).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner.layers.attention import Attention
from planner.layers.common import BlockParams
from planner.layers.mamba import Mamba1Block, Mamba2Block
from planner.layers.mlp import DenseMLP
from planner.memory import params_of, stage_kind_counts
from planner.params import count_params
from planner.step import Collectives, _compute_pass, dp_comm, sp_partial_elements, step_time

H = 12_288  # GPT-3 175B (Brown et al. 2020 Table 2.1: 96 layers, d_model 12,288, 96 heads of 128; biases, LayerNorm)
GPT3 = dict(model="gpt3-175b", gpus=1024, micro_batch=1, global_batch=1536, seq_len=2048, hardware="a100-sxm-80gb",
            stack="megatron", tp=8, pp=16)


def test_gpt3_175b_layer_split(explain):
    """One GPT-3 layer: attention 4 h^2 weights + 3 h QKV biases (split) + h output bias (whole), MLP 8 h^2 + 4 h up
    bias (split) + h down bias (whole), two LayerNorms 2 h each: split 12 h^2 + 7 h, replicated 6 h, 12 h^2 + 13 h in
    all as before; the JSON's per-block counts keep each block's own biases."""
    s, p, est, js = explain(**GPT3)
    pc = count_params(s.model)
    (kp,) = pc.kind_params
    assert kp.split == 12 * H * H + 7 * H == 1_812_025_344
    assert kp.replicated == 6 * H == 73_728 and kp.row_bias == 2 * H and kp.split_bias == 7 * H
    assert kp.total == 12 * H * H + 13 * H
    # the whole model: 96 layers + the word embedding (tied) of 51,200 rows (GPT-3's 50,257 tokens as megatron pads them
    # at tp 8: 128 x 8 x 50, stack_db vocab_padding) + learned positions 2,048 h + the final LayerNorm
    assert pc.total == 96 * (12 * H * H + 13 * H) + 51_200 * H + 2048 * H + 2 * H == 174_615_846_912
    assert js["params"]["attention_per_layer"] == 4 * H * H + 4 * H and js["params"]["mlp_per_layer"] == 8 * H * H + 5 * H
    assert js["params"]["per_layer"] == 12 * H * H + 13 * H


def test_gpt3_175b_tp8_per_gpu_memory(explain):
    """GPT-3 175B at tp 8, pp 16 (6 layers a stage), DDP, the megatron preset (2 B weights, 4 B fp32 gradients, 12 B
    master + Adam): a middle stage's GPU holds per layer (12 h^2 + 7 h) / 8 + 6 h = 226,576,896 parameters (before,
    (12 h^2 + 9 h) / 8 + 4 h = 226,555,392: the two row-parallel biases, 2 h x 96 layers in the model, were / 8), 2 h x
    7/8 = 21,504 more a layer, 129,024 a stage: weights + 258,048 B, gradients + 516,096 B, optimizer + 1,548,288 B."""
    s, p, est, js = explain(**GPT3)
    per_layer = (12 * H * H + 7 * H) // 8 + 6 * H
    assert per_layer == 226_576_896 == (12 * H * H + 9 * H) // 8 + 4 * H + 21_504
    mid = js["memory"]["stages"]["middle"]
    assert s.bpp.weights == 2.0 and s.bpp.gradients == 4.0 and s.bpp.master + s.bpp.optimizer == 12.0
    assert mid["weights_bytes"] == 6 * per_layer * 2 == 2_718_922_752
    assert mid["gradients_bytes"] == 6 * per_layer * 4
    assert mid["optimizer_bytes"] == 6 * per_layer * 12


def test_gpt3_175b_tp8_dp_traffic_reads_the_whole_biases(explain):
    """The DP gradient reduction and the optimizer step read each stage's dense parameters a GPU: the first
    stage's word embedding / 8 (51,200 rows, megatron's padding of 50,257 at tp 8: 51,200 h / 8 = 78,643,200) +
    positions 2,048 h (whole) + 6 layers = 1,463,270,400."""
    s, p, est, js = explain(**GPT3)
    sc, _, comp = _compute_pass(s, p)
    dp = dp_comm(sc, Collectives(sc), comp)
    first = 51_200 * H // 8 + 2048 * H + 6 * ((12 * H * H + 7 * H) // 8 + 6 * H)
    assert float(dp.p_local[1]) == first == 1_463_270_400  # dp_comm's first-stage slot
    counts = stage_kind_counts(s.model, p)
    assert float(params_of(count_params(s.model), s.model, p, counts["first"], "first")[0]) == first


def test_mamba_and_mlp_forms_keep_row_bias_whole():
    """Each form says which of its biases are row-parallel: a plain MLP's down bias h, Mamba-2's and Mamba's out_proj
    bias h (proj_bias); their column-parallel biases (up f; in_proj's) stay split and are split_bias."""
    mlp = DenseMLP(h=64, f=256, gated=False, norm=128, bias=True)
    bp = mlp.params()
    assert (bp.split, bp.replicated, bp.split_bias, bp.row_bias) == (2 * 64 * 256 + 256, 128 + 64, 256, 64)
    m2 = Mamba2Block(h=64, heads=4, head_dim=32, state=16, groups=1, conv_kernel=4, chunk=128, norm=64, proj_bias=True)
    b2 = m2.params()
    d_in = 2 * 128 + 2 * 16 + 4  # in_proj's outputs [z, x, B, C, dt]
    assert (b2.row_bias, b2.split_bias, b2.replicated) == (64, d_in, 64 + 64)
    assert b2.total == Mamba2Block(h=64, heads=4, head_dim=32, state=16, groups=1, conv_kernel=4, chunk=128,
                                   norm=64).params().total + d_in + 64
    m1 = Mamba1Block(h=64, d_inner=128, state=16, conv_kernel=4, dt_rank=4, norm=64, proj_bias=True)
    b1 = m1.params()
    # in_proj's 2 d_i and dt_proj's d_i (an nn.Linear bias, column-parallel over d_i: layers/common.py [pl])
    assert (b1.row_bias, b1.split_bias, b1.replicated) == (64, 2 * 128 + 128, 64 + 64)
    a = Attention(h=64, a=4, k=2, d=16, norm=64, bias=True, qk_norm=True)
    ba = a.params()
    assert (ba.split_bias, ba.row_bias, ba.qk_norm, ba.replicated) == (4 * 16 + 2 * 2 * 16, 64, 32, 64 + 32 + 64)
    # dense_per_gpu: split / tp, the replicated ones whole
    assert ba.dense_per_gpu(4.0) == (ba.split) / 4.0 + 64 + 32 + 64


def test_block_params_add_and_times_carry_every_field():
    """An MTP module's params (count x one) and a layer's (mixer + MLP) keep the bias and norm fields."""
    b = BlockParams(1, 2, 3, 4, 5, 6, 7, 8)
    assert b.times(3) == BlockParams(3, 6, 9, 12, 15, 18, 21, 24)
    assert b + b == b.times(2)


def test_gpt_oss_expert_output_biases_whole_on_each_expert_tp_rank(explain):
    """gpt-oss-120b (h 2,880, 128 experts of width 2,880, gated, with biases): an expert's mlp2 bias (h) is whole on
    each expert-TP rank (torchtitan gpt_oss/infra/expert_parallel.py l. 64-70: [Shard(0), Replicate()]; Megatron's
    grouped row-parallel linear the same). torchtitan at tp 4, etp 4, ep 8: a layer's experts a GPU are
    (128 (3 h f + 2 f + h) - 128 h) / 32 + 128 h / 8 = 99,567,360 - 11,520 + 46,080 = 99,601,920 (before / 32 whole:
    99,567,360)."""
    s, p, est, js = explain(model="gpt-oss-120b", gpus=64, micro_batch=1, global_batch=64, seq_len=4096,
                            hardware="h100-sxm", stack="torchtitan", tp=4, ep=8, etp=4, sharding="fsdp")
    h = 2880
    kp = count_params(s.model).kind_params[0]
    assert kp.expert == 128 * (3 * h * h + 2 * h + h) and kp.expert_row_bias == 128 * h
    assert float(kp.experts_per_gpu(np.float64(4), np.float64(8))) == 99_601_920 == 128 * (3 * h * h + 3 * h) // 32 \
        - 128 * h // 32 + 128 * h // 8
    counts = stage_kind_counts(s.model, p)
    experts = float(params_of(count_params(s.model), s.model, p, counts["first"], "first")[1])
    assert experts == 36 * 99_601_920


def test_gpt_oss_sp_set_has_no_moe_bias(explain):
    """The SP all-reduce's set, read from the forms' own fields: gpt-oss-120b on megatron (tp 4, etp 1, ep 8, SP):
    a layer's two RMSNorms (h each), the attention output bias (h) and the router (h x 128 + 128 bias) = 377,408; 36
    layers + the final norm: 13,589,568. Before, the MoE MLP's `bias` read by getattr added h a layer as if it had a
    dense down projection (13,693,248): the experts' output biases are whole on each expert-TP rank and not marked
    sequence_parallel (extensions/transformer_engine.py l. 91-123), so not in the set."""
    s, p, est, js = explain(model="gpt-oss-120b", gpus=64, micro_batch=1, global_batch=64, seq_len=4096,
                            hardware="h100-sxm", stack="megatron", tp=4, ep=8, etp=1)
    assert int(p.sp) == 1
    h = 2880
    sc, _, _ = _compute_pass(s, p)
    assert float(sp_partial_elements(sc)) == 36 * (3 * h + 128 * h + 128) + h == 13_589_568


def test_qk_norms_all_reduced_without_sp(explain):
    """Megatron sums the query/key norms' gradients over TP with or without SP (finalize_model_grads.py l. 452-453):
    Gemma 3 27B (62 layers, q_norm and k_norm of head_dim 128 each) at tp 8, SP off: 62 x 256 = 15,872 fp32 main
    gradients, 63,488 B in one all-reduce over the 8 TP ranks a step; Llama 3 8B (no qk norms) SP off: none."""
    s, p, est, js = explain(model="gemma3-27b", gpus=8, micro_batch=1, global_batch=8, seq_len=4096,
                            hardware="h100-sxm", stack="megatron-bridge", tp=8, sequence_parallel=False)
    assert int(p.sp) == 0 and s.bpp.gradients == 4.0
    sc, _, _ = _compute_pass(s, p)
    coll = Collectives(sc)
    assert float(sp_partial_elements(sc)) == 62 * 2 * 128 == 15_872
    want = float(coll(comm.ALL_REDUCE, np.float64(15_872 * 4.0), np.asarray(8), coll.strides["tp"]))
    assert want > 0 and float(step_time(s, p)[1]["tp_sp_norm_grads_s"]) == pytest.approx(want, rel=1e-12)
    assert js["time"]["tp_sp_norm_grads_s"] == pytest.approx(want, rel=1e-12)
    s, p, est, js = explain(model="llama3-8b", gpus=8, micro_batch=1, global_batch=8, seq_len=4096,
                            hardware="h100-sxm", stack="megatron", tp=8, sequence_parallel=False)
    assert float(step_time(s, p)[1]["tp_sp_norm_grads_s"]) == 0.0 and "tp_sp_norm_grads_s" not in js["time"]
