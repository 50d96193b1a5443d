"""The mixers' plain parameters are no quantized linear weights, and torchtitan's MoE token counter is a buffer
(issue 21 memory, issue 23 low precision; quantlin). Figures derived by hand from the sources cited in
planner/layers/common.py [pl] and [sb].

1. Mamba-2 (Megatron-Core MambaMixer, NVIDIA/Megatron-LM @d98e8a64 megatron/core/ssm/mamba_mixer.py): only in_proj and
   out_proj are Transformer Engine linears; conv1d_weight / conv1d_bias, dt_bias, A_log, D are nn.Parameters and the
   gated norm a mamba_ssm RMSNormGated. Under fp8 TE's weight cache holds in_proj's and out_proj's weights only.
2. Gated DeltaNet (gated_delta_net/common.py l. 229-260): conv1d an nn.Conv1d, dt_bias and A_log nn.Parameters.
3. torchtitan's MoE registers a fp32 tokens_per_expert buffer of E on every MoE layer, score bias or not
   (pytorch/torchtitan @e347b1e5e torchtitan/models/moe/moe.py l. 466-471; release/0.3 @4f9e9a47d
   models/common/moe.py l. 396-401); Megatron-Core's counter exists only beside the bias (router.py l. 180-198).
"""

from __future__ import annotations

import numpy as np

from planner.catalog import load_model
from planner.layers.common import etp_of
from planner.layers.mamba import Mamba1Block
from planner.memory import (_router_buffer_bytes, converted_linear_elems, quantized_weight_terms, stage_kind_counts,
                            weight_copy_bytes)
from planner.params import count_params
from planner.step import linear_share

FP8_TP8 = dict(gpus=64, micro_batch=1, global_batch=64, seq_len=4096, hardware="h100-sxm", stack="megatron", tp=8,
               precision="fp8")


def test_nemotron_h_mamba2_plain_params_not_quantized(explain):
    """Nemotron-H-56B (h 8,192; Mamba-2 256 heads of 64: d_i 16,384, state 256 in 8 groups, conv 4 with bias; 54
    Mamba-2, 54 MLP of 32,768, 10 attention blocks) in fp8 on megatron at tp 8 (pp 1, one stage of 118 blocks).
    A Mamba-2 block's TP-split parameters: in_proj 8,192 x (2 x 16,384 + 2 x 8 x 256 + 256) = 304,087,040, conv1d
    (16,384 + 2 x 2,048) x (4 + 1) = 102,400, dt_bias, A_log, D 3 x 256 = 768, the gated norm 16,384, out_proj
    16,384 x 8,192 = 134,217,728: 438,424,320, of which plain (no linear's) 102,400 + 768 + 16,384 = 119,552.
    TE's cache per GPU: (54 x 438,304,768 + 54 x 536,870,912 + 10 x 150,994,944) / 8 = 6,771,179,520 weight elements
    x (1 B row-wise + 1 B column-wise, H100) = 13,542,359,040 B; before (the plain ones in the cache):
    + 54 x 119,552 / 8 = 806,976 elements, 13,543,972,992 B (-1,613,952 B)."""
    s, p, est, js = explain(model="nemotron-h-56b", **FP8_TP8)
    pc = count_params(s.model)
    kinds = [k.label for k in pc.layers.kinds]
    assert kinds[0].startswith("mamba2(256x64") and [int(n) for n in pc.layers.totals] == [54, 54, 10]
    m2 = pc.kind_params[0]
    assert m2.split == 304_087_040 + 102_400 + 768 + 16_384 + 134_217_728 == 438_424_320
    assert m2.split_plain == 119_552 and m2.split_bias == 0 and m2.split_linear == 438_304_768
    assert pc.kind_params[1].split_plain == 0 and pc.kind_params[2].split_plain == 0
    assert pc.total == 56_324_350_464  # unchanged: every parameter is still counted (dense, below)
    assert int(p.pp) == 1 and s.bf16_layers == (0, 0)
    row, col = weight_copy_bytes(s, p.f8r)
    assert (float(row), float(col)) == (1.0, 1.0)
    counts = stage_kind_counts(s.model, p)
    copies, saved = quantized_weight_terms(s, p, pc, counts["first"], "first")
    assert float(copies) == 6_771_179_520 * 2 == 13_542_359_040 == 13_543_972_992 - 1_613_952
    assert float(saved) == 0.0  # no fp8_param_gather
    # + one 8-rank NVLS communicator on H100 since branch nvlsmem (memory.py [nv]): 16 x 2 x 1 MiB x 8 + 2 MiB
    assert js["memory"]["terms"]["nvls_buffers"] == 16 * 2 * 2**20 * 8 + 2 * 2**20
    assert js["memory"]["other_bytes"] == 15_335_466_112 - 1_613_952 + 16 * 2 * 2**20 * 8 + 2 * 2**20  # before (main @38958e2) 15,335,466,112
    # FSDP's fp8 all-gather's elements per kind (converted_linear_elems: Megatron converts no module by filter)
    conv = converted_linear_elems(s, pc, p)
    assert [float(c) for c in conv] == [438_304_768 / 8, 536_870_912 / 8, 150_994_944 / 8]
    # quantized parameters' share of the dense parameters (step.linear_share): the linears' 54,169,436,160 of
    # 56,324,350,464 (before 54,175,891,968: the plain ones counted in)
    assert linear_share(pc) == 54_169_436_160 / 56_324_350_464


def test_qwen3_next_gdn_plain_params_not_quantized(explain):
    """Qwen3-Next-80B-A3B in fp8 on megatron, tp 8, ep 8 (expert TP 8, pp 1): a GDN layer's conv1d (2 x 2,048 +
    4,096) x 4 = 32,768 and dt_bias + A_log 2 x 32 = 64 leave TE's cache: per GPU 36 x 32,832 / 8 = 147,744 elements,
    x 2 B = 295,488 B fewer. TE's cache: [36 x (36,866,112 - 32,832) + 12 x 30,410,752] / 8 + 48 x (512 x 3 x 2,048
    x 512) / (8 x 8) = 211,365,888 + 1,207,959,552 = 1,419,325,440 elements x 2 B = 2,838,650,880 B (before
    2,838,946,368)."""
    s, p, est, js = explain(model="qwen3-next-80b-a3b", ep=8, **FP8_TP8)
    pc = count_params(s.model)
    gdn, attn = pc.kind_params
    assert pc.layers.kinds[0].label.startswith("gated_deltanet") and [int(n) for n in pc.layers.totals] == [36, 12]
    assert gdn.split_plain == 32_768 + 64 and attn.split_plain == 0 and gdn.split_linear == 36_866_112 - 32_832
    assert int(p.pp) == 1 and int(p.fge) > 0 and int(etp_of(p)) == 8
    counts = stage_kind_counts(s.model, p)
    copies, _ = quantized_weight_terms(s, p, pc, counts["first"], "first")
    assert float(copies) == 1_419_325_440 * 2 == 2_838_650_880 == 2_838_946_368 - 295_488


def test_mamba1_dt_proj_bias_and_plain_params():
    """Mamba (h 8, d_i 16, N 2, conv 4 with bias, r 1): in_proj 8 x 32, conv1d 16 x 5 = 80, x_proj 16 x 5, dt_proj 16
    + its bias 16, A_log 16 x 2 = 32, D 16, out_proj 16 x 8: dt_proj's bias a split_bias (a column-parallel linear's),
    conv1d, A_log, D plain (80 + 32 + 16 = 128); the linears' matrices 256 + 80 + 16 + 128 = 480."""
    b = Mamba1Block(h=8, d_inner=16, state=2, conv_kernel=4, dt_rank=1, norm=8).params()
    assert b.split == 256 + 80 + 80 + 32 + 32 + 16 + 128 == 624
    assert (b.split_bias, b.split_plain, b.split_linear) == (16, 128, 480)
    jamba = count_params(load_model("jamba-v0.1")).kind_params[0]  # d_i 8,192, N 16, conv 4 + bias
    assert jamba.split_plain == 8192 * 5 + 8192 * 16 + 8192 and jamba.split_bias == 8192


def test_torchtitan_moe_token_counter_buffer(explain):
    """Qwen3-30B-A3B (48 MoE layers of 128 experts, no score bias) on torchtitan (FSDP, ep 8): every MoE layer keeps
    its fp32 tokens_per_expert, 48 x 128 x 4 B = 24,576 B in model_buffers beside the rotary tables 48 x 4,096 x 64 x
    8 B = 100,663,296 (before: the counter unpriced). On megatron (no score bias: no counter) nothing; DeepSeek-V3
    (score bias) 2 x 4 B x 256 a MoE layer either way."""
    job = dict(model="qwen3-30b-a3b", gpus=64, micro_batch=1, global_batch=256, seq_len=4096, hardware="h100-sxm",
               sharding="fsdp", ep=8)
    s, p, est, js = explain(stack="torchtitan", **job)
    assert int(p.pp) == 1
    assert float(est.memory.model_buffers) == 48 * 4096 * 64 * 8 + 48 * 128 * 4 == 100_687_872
    # + one 8-rank NVLS communicator on H100 since branch nvlsmem (memory.py [nv]): 16 x 2 x 1 MiB x 8 + 2 MiB
    assert js["memory"]["terms"]["nvls_buffers"] == 16 * 2 * 2**20 * 8 + 2 * 2**20
    assert js["memory"]["other_bytes"] == 5_828_367_744 + 24_576 + 16 * 2 * 2**20 * 8 + 2 * 2**20  # before (main @38958e2) 5,828,367,744
    s3, p3, est3, _ = explain(stack="torchtitan-0.3", **job)
    assert float(est3.memory.model_buffers) - 48 * 4096 * 64 * 8 == 24_576
    pc = count_params(s.model)
    counts = stage_kind_counts(s.model, p)["first"]
    assert float(_router_buffer_bytes(pc, counts, True, counter=False)) == 0.0  # megatron's rule: no bias, no counter
    assert float(_router_buffer_bytes(pc, counts, True, counter=True)) == 24_576
    # one MTP module (a layer of the last layer's kind: MoE, 128 experts) on the stage holding the loss: its counter too
    assert float(_router_buffer_bytes(pc, counts, True, counter=True, mtp_layers=1)) == 24_576 + 128 * 4
    assert float(_router_buffer_bytes(pc, counts, False, counter=True, mtp_layers=1)) == 24_576
    v3 = count_params(load_model("deepseek-v3"))
    c1 = np.array([1.0, 2.0])  # one dense layer, two MoE layers (score bias 256 each)
    assert float(_router_buffer_bytes(v3, c1, False, counter=True)) == float(
        _router_buffer_bytes(v3, c1, False, counter=False)) == 2 * 2 * 4 * 256
