"""Parameters kept whole on every TP rank, buffers that are no parameters, biases that are not quantized (issue 21
memory, gdnnorm). Figures derived by hand from the sources cited in layers/common.py ([rb], [sb], [qb]).

1. Gated DeltaNet's gated output RMSNorm: Megatron-Core builds out_norm with hidden_size value_head_dim, not divided by
   tp (NVIDIA/Megatron-LM @d98e8a64 megatron/core/ssm/gated_delta_net/common.py l. 263-268), a TENorm marked
   sequence_parallel under SP (extensions/transformer_engine.py l. 1096-1101): whole on every rank, in the SP set.
2. Jamba's dt / B / C RMSNorms act on x_proj's r + 2N outputs, whole on every rank in the assumed Mamba-1 layout
   (layers/mamba.py); no trainer shards Jamba with TP (transformers' JambaConfig has no tensor-parallel plan, no
   shipped stack builds Mamba-1): whole, replicated.
3. DeepSeek-V3's expert score bias is a fp32 buffer (megatron/core/transformer/moe/router.py l. 180-198,
   torchtitan @e347b1e5e models/moe/moe.py l. 456-471): no gradient, no optimizer state, no SP all-reduce; it and its
   fp32 token counter in model_buffers.
4. Transformer Engine's grouped linear quantizes the experts' weights only, the biases stay bf16
   (TransformerEngine @d0067d0d transformer_engine/pytorch/module/grouped_linear.py l. 832-857, 1738-1771).
"""

from __future__ import annotations

import numpy as np

from planner.catalog import load_model
from planner.layers.mamba import Mamba1Block
from planner.memory import params_of, quantized_weight_terms, stage_kind_counts, weight_copy_bytes
from planner.params import count_params
from planner.step import _compute_pass, sp_partial_elements

Q3N = dict(model="qwen3-next-80b-a3b", gpus=64, micro_batch=1, global_batch=64, seq_len=4096, hardware="h100-sxm",
           stack="megatron", tp=8, ep=8, padded_vocab_size=151936)
V3 = dict(model="deepseek-v3", gpus=1024, micro_batch=1, global_batch=1024, seq_len=4096, hardware="h100-sxm",
          stack="megatron", tp=8, pp=16, ep=8, etp=1, padded_vocab_size=129280)
# (the checkpoints' own vocabularies pinned: megatron would pad them to 152,576 and 130,048 rows at tp 8, stack_db
# vocab_padding; the figures below are the checkpoints' counts)


def test_qwen3_next_gdn_output_norm_whole_at_tp8(explain):
    """Qwen3-Next-80B-A3B (h 2,048; GDN 16 key / 32 value heads of 128; conv 4; 512 experts of 512, one shared of 512
    with a gate): a GDN layer's TP-split parameters are in_proj 2,048 (2 x 2,048 + 2 x 4,096) + 2,048 x 64 =
    25,296,896, conv (2 x 2,048 + 4,096) x 4 = 32,768, dt_bias and A_log 64, out_proj 4,096 x 2,048 = 8,388,608, the
    shared expert 3 x 2,048 x 512 + 2,048 = 3,147,776: 36,866,112; replicated the two pre-norms 2 x 2,048, the router
    2,048 x 512 and the gated norm's 128: 1,052,800. At tp 8 a GPU holds 36,866,112 / 8 + 1,052,800 = 5,661,064 a
    layer (before: the norm / 8, 36,866,240 / 8 + 1,052,672 = 5,660,952): the output norm's elements a GPU 128 (before
    16) a layer, 36 x 128 = 4,608 (before 576) on the one stage."""
    s, p, est, js = explain(**Q3N)
    pc = count_params(s.model)
    gdn = pc.kind_params[0]
    assert pc.layers.kinds[0].label.startswith("gated_deltanet") and int(pc.layers.totals[0]) == 36
    assert gdn.split == 25_296_896 + 32_768 + 64 + 8_388_608 + 3_147_776 == 36_866_112
    assert gdn.replicated == 2 * 2048 + 2048 * 512 + 128 == 1_052_800
    assert float(gdn.dense_per_gpu(np.float64(8))) == 36_866_112 / 8 + 1_052_800 == 5_661_064
    assert pc.total == 79_674_391_296  # the model's count does not move
    # the stage (pp 1): 36 GDN + 12 attention layers, +36 x (128 - 16) = +4,032 parameters a GPU (339,841,888 before)
    counts = stage_kind_counts(s.model, p)
    assert float(params_of(pc, s.model, p, counts["first"], "first")[0]) == 339_841_888 + 36 * 112 == 339_845_920
    # SP on: the gated norms join the TP all-reduce's set: 36 x 1,052,800 + 12 x 1,053,184 + the final norm 2,048
    assert int(p.sp) == 1
    sc, _, _ = _compute_pass(s, p)
    assert float(sp_partial_elements(sc)) == 36 * 1_052_800 + 12 * 1_053_184 + 2048 == 50_541_056  # before 50,536,448


def test_jamba_inner_norms_whole():
    """Jamba's Mamba layer (h 4,096, d_i 8,192, N 16, r 256): the dt, B and C norms r + 2N = 288 join the replicated
    parameters (two pre-norms 2 x 4,096): 8,480 (before 8,192, the norms / tp); the model's count unchanged."""
    pc = count_params(load_model("jamba-v0.1"))
    mamba_dense = pc.kind_params[0]
    assert pc.layers.kinds[0].label.startswith("mamba(8192, N=16)")
    assert mamba_dense.replicated == 2 * 4096 + 256 + 2 * 16 == 8_480
    assert pc.total == 51_570_323_328
    b = Mamba1Block(h=8, d_inner=16, state=2, conv_kernel=4, dt_rank=1, norm=8, inner_norms=True)
    plain = Mamba1Block(h=8, d_inner=16, state=2, conv_kernel=4, dt_rank=1, norm=8)
    assert b.params().split == plain.params().split and b.params().replicated == 8 + 1 + 2 * 2


def test_deepseek_v3_score_bias_is_a_buffer(explain):
    """DeepSeek-V3 (h 7,168, 256 experts) at tp 8, pp 16, ep 8 on megatron: the router's parameters a GPU a MoE layer
    are 7,168 x 256 = 1,835,008 (before 1,835,264, the score bias among them); the MoE layer's replicated parameters
    the MLA down projections and latent norms 7,168 x 1,536 + 7,168 x 576 + 1,536 + 512 = 15,140,864, two norms
    14,336, the router: 16,990,208. The SP all-reduce's set on the heaviest stage (4 MoE layers): 4 x 16,990,208 =
    67,960,832 (before 67,961,856). Its memory: weights -4 x 256 x 2 B, gradients -4 x 256 x 4 B, master and Adam
    -4 x 256 x 12 B; model_buffers +4 x 2 x 4 B x 256 = 8,192 B (the fp32 bias and its fp32 token counter)."""
    s, p, est, js = explain(**V3)
    pc = count_params(s.model)
    moe = pc.kind_params[1]
    assert int(pc.layers.totals[1]) == 58 and moe.score_bias == 256
    assert moe.replicated == 15_140_864 + 2 * 7168 + 7168 * 256 == 16_990_208
    assert pc.total == 671_026_419_200 and pc.active == 37_552_297_472  # counted as the checkpoint lists it
    assert float(moe.dense_per_gpu(np.float64(8))) == 216_006_656 / 8 + 16_990_208
    assert int(p.sp) == 1
    sc, _, _ = _compute_pass(s, p)
    assert float(sp_partial_elements(sc)) == 4 * 16_990_208 == 67_960_832
    m = js["memory"]
    # before (main @41eec45): weights 11,626,219,520, gradients 23,252,439,040, optimizer 69,757,317,120, other
    # 1,321,600,000 B on the heaviest stage
    assert m["weights_bytes"] == 11_626_219_520 - 4 * 256 * 2
    assert m["gradients_bytes"] == 23_252_439_040 - 4 * 256 * 4
    assert m["optimizer_bytes"] == 69_757_317_120 - 4 * 256 * 12
    # since branch nvlsmem other_bytes also holds NCCL's NVLS buffers (memory.py [nv]): one 8-rank NVLS communicator
    # on H100, 16 channels x 2 x 1 MiB x 8 heads + 2 MiB credits = 258 MiB (tests/test_nvls_buffers.py)
    assert m["terms"]["nvls_buffers"] == 16 * 2 * 2**20 * 8 + 2 * 2**20
    assert m["other_bytes"] == 1_321_600_000 + 4 * 2 * 4 * 256 + 16 * 2 * 2**20 * 8 + 2 * 2**20


def test_expert_biases_not_quantized(explain):
    """gpt-oss-120b on megatron, fp8 (tp 4, etp 1, ep 8, one stage of 36 layers): TE's quantized weight copies hold
    the linear matrices only: a layer's TP-split ones less their biases (26,547,200 - 5,120) / 4 and its experts'
    matrices 128 x 3 x 2,880^2 / 8 (before 128 (3 x 2,880^2 + 3 x 2,880) / 8: the experts' 2 f + h biases each in the
    cache), x (row-wise + column-wise bytes) a GPU."""
    s, p, est, js = explain(model="gpt-oss-120b", gpus=64, micro_batch=1, global_batch=64, seq_len=4096,
                            hardware="h100-sxm", stack="megatron", tp=4, ep=8, etp=1, precision="fp8")
    h = 2880
    pc = count_params(s.model)
    kp = pc.kind_params[0]
    assert kp.expert_bias == 128 * 3 * h and kp.expert - kp.expert_bias == 128 * 3 * h * h
    assert s.bf16_layers == (0, 0) and int(p.fge) > 0 and int(p.pp) == 1
    counts = stage_kind_counts(s.model, p)
    copies, _ = quantized_weight_terms(s, p, pc, counts["first"], "first")
    row, col = weight_copy_bytes(s, p.f8r)
    linear = 36 * ((26_547_200 - 5_120) / 4 + 128 * 3 * h * h / 8)
    assert float(copies) == linear * float(row + col)
    before = 36 * ((26_547_200 - 5_120) / 4 + 128 * (3 * h * h + 3 * h) / 8) * float(row + col)
    assert before - float(copies) == 36 * 128 * 3 * h / 8 * float(row + col) == 9_953_280  # 2 B an element on H100
