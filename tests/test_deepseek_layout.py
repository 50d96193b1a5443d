"""DeepSeek-V3's own layout on its own stack (issue 23; stack_db/deepseek.yaml): TP 1, PP 16
with DualPipe, EP 64, ZeRO-1 DP 128 on 2,048 H800 (arXiv:2412.19437 sec. 3.2).

Hand derivations: DualPipe's bubble and memory (Table 2 of the report, deepseek-ai/DualPipe
README @89f5de17) and the share of unpaired chunks (dualpipe.py @bb214e82 DualPipe.step); the
dispatch volume (sec. 2.1.2, 3.2.2, 3.3.3); the heaviest rank's memory term by term from the
model's shapes (model_zoo/deepseek-v3.yaml, report sec. 4.2) and the stack's policy. The
throughput is compared with the published 1,543.2 tokens/s per GPU (Table 1: 14.8T tokens in
2,664K H800 GPU-hours).
"""

from __future__ import annotations

import math

import numpy as np

import pytest

from planner.catalog import load_stack
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.layers import layer_list
from planner.pipeline import (
    DUALPIPE,
    ONE_F_ONE_B,
    bubble_fraction,
    dualpipe_alone_share,
    inflight_microbatches,
    simulate,
)
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions

GIB = 2.0**30
LAYOUT = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", tp=1, pp=16, dp=128, ep=64, micro_batch=1,
              global_batch=15360, seq_len=4096, sharding="zero1", precision="fp8", stack="deepseek",
              recompute="selective")
PUBLISHED = 14.8e12 / (2664e3 * 3600.0)  # tokens/s per GPU, arXiv:2412.19437 Table 1 and sec. 1


# ----------------------------------------------------------------------------- DualPipe closed forms
def test_dualpipe_bubble_by_hand():
    """Table 2: (PP/2 - 1)(F&B + B - 3W), with F = 1, B = 2 (the full backward), W = 1 (half of
    it) and F&B = F + B = 3 (the overlapped pair's compute adds up): (8 - 1)(3 + 2 - 3) = 14
    forward-times idle against 120 micro-batches x (F + B) = 360 busy: 14/360. 1F1B: 15/120."""
    assert bubble_fraction(16, 120, 1, DUALPIPE) == pytest.approx(14.0 / 360.0, rel=1e-12)
    assert bubble_fraction(16, 120, 1, ONE_F_ONE_B) == pytest.approx(15.0 / 120.0, rel=1e-12)
    # another split of the backward: B = 3, W = 1.5 (r 3, w 0.5): (4 - 1)(4 + 3 - 4.5) / (32 x 4)
    assert bubble_fraction(8, 32, 1, DUALPIPE, backward_ratio=3.0, w_fraction=0.5) == pytest.approx(7.5 / 128.0)
    assert bubble_fraction(1, 8, 1, DUALPIPE) == 0.0  # one stage: no pipeline


def test_dualpipe_memory_and_unpaired_chunks():
    """Table 2: PP + 1 micro-batches in flight on every rank (1 with one stage). dualpipe.py's
    steps on rank 0 (half_rank 0): steps 1-3 run 2(p/2 - 1) + 2 + (p/2 - 1) forwards alone,
    steps 4-5 pair 2(m/2 - p + 1) + (p/2 - 1) of them; for p 16, m 120: 23 alone, 97 paired."""
    assert inflight_microbatches(16, 120, 1, DUALPIPE) == 17.0
    assert inflight_microbatches(16, 120, 1, DUALPIPE, stage=7) == 17.0
    assert inflight_microbatches(1, 120, 1, DUALPIPE) == 1.0
    p, m = 16, 120
    alone = 2 * (p // 2 - 1) + 2 + (p // 2 - 1)
    paired = 2 * (m // 2 - p + 1) + (p // 2 - 1)
    assert (alone, paired) == (23, 97) and alone + paired == m
    assert dualpipe_alone_share(p, m) == pytest.approx(23.0 / 120.0)
    with pytest.raises(PlannerError, match="does not run the DualPipe"):
        simulate(4, 8, "dualpipe")


def test_dualpipe_shape_rule():
    """dualpipe.py asserts num_ranks even, num_chunks even and >= 2 num_ranks (start-up rule
    DUALPIPE_SHAPE of the deepseek stack): 120 micro-batches of 1 pass; 15 (micro-batch 8)
    are odd and 30 (micro-batch 4) fewer than 32 are refused."""
    resolve(Job(**LAYOUT))
    for mbs, why in ((8, "DUALPIPE_SHAPE"), (4, "DUALPIPE_SHAPE")):
        with pytest.raises(PlannerError, match=why):
            resolve(Job(**{**LAYOUT, "micro_batch": mbs}))


# ----------------------------------------------------------------------------- dispatch
def test_dispatch_is_deepeps_with_fp8_and_four_nodes():
    """One mechanism (planner/dispatch.py): the deepseek stack runs DeepEP's normal kernels
    (its defaults.moe_dispatcher; sec. 3.2.2), its blockwise recipe dispatches fp8 (sec. 3.3.3:
    stack_db fp8_dispatch), and the model's 8 expert groups, 4 per token, over the 8 nodes of
    EP 64 cap a token at 4 nodes (sec. 2.1.2). The megatron stack's blockwise dispatches bf16.
    By hand, one MoE layer's forward dispatch of a micro-batch (4,096 tokens) on 8-GPU nodes:
    4,096 x 4 nodes x 7,168 x (1 + 4/128 + 16/7,168) B at DeepEP's 51 GB/s (EP 64, a 50 GB/s
    NIC = H800's 400 Gb/s), plus the network latency."""
    from planner import comm, dispatch
    from planner.plan import fp8_dispatch

    settings, plan, _ = resolve(Job(**LAYOUT))
    assert settings.moe_dispatcher == "deepep" and bool(fp8_dispatch(settings, plan))
    mg, mg_plan, _ = resolve(Job(**{**LAYOUT, "stack": "megatron", "sharding": "zero1", "schedule": "1f1b",
                                    "fp8_recipe": "blockwise", "recompute": "full"}))
    assert not bool(fp8_dispatch(mg, mg_plan))
    block = next(k.mlp for k in layer_list(settings.model).kinds if k.has_experts)
    p = comm.comm_params(settings.hardware)
    link = comm.group_link(64, 1, p, pattern=comm.PATTERN_ALL_PAIRS, job_gpus=2048)
    d8, _, c16 = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, block, 64, link, p, True, 0)
    assert float(d8) == pytest.approx(p.network_latency + 4096 * 4 * 7168 * (1 + 4 / 128 + 16 / 7168) / 51e9)
    assert float(c16) == pytest.approx(p.network_latency + 4096 * 4 * 7168 * 2 / 50e9)


# ----------------------------------------------------------------------------- the layout
def _mla_params(h=7168, a=128, rq=1536, rkv=512, d_nope=128, d_rope=64, d_v=128):
    """MLA (DeepSeek-V2 sec. 2.1): q down / up, kv down (+ the shared rotary key) / up, output,
    the two latent RMSNorms."""
    return (h * rq + rq * a * (d_nope + d_rope) + h * (rkv + d_rope) + rkv * a * (d_nope + d_v) + a * d_v * h
            + rq + rkv)


def test_layout_fits_with_a_hand_derived_breakdown():
    """The heaviest rank is a middle one holding stage 1 (layer 2, dense, and layers 3-5, MoE)
    twice (DualPipe: stage 1 and stage 14, the same composition). Per stage:
      dense layer  MLA 187,107,328 + 2 norms 2 x 7,168 + MLP 3 x 7,168 x 18,432 = 583,483,392
      MoE layer    MLA + 2 norms + shared expert 3 x 7,168 x 2,048 + router 7,168 x 256
                   = 232,996,864 on every rank, + 256 experts x 44,040,192 / EP 64 = 176,160,768; the
                   router's score bias 256 a fp32 buffer with its fp32 token counter (layers/common.py
                   [sb]): model_buffers 2 x 3 MoE layers x 2 x 4 B x 256 = 12,288
    weights 2 B, gradients 4 B (fp32, sec. 3.3.3) of twice the stage; master 4 B and AdamW
    moments 2 + 2 B (bf16, sec. 3.3.3) sharded over DP 128 (dense) and 128 / 64 = 2 (experts).
    Activations, bytes per token kept (fp8 caching sec. 3.3.3, recompute sec. 3.2.3):
      both   input 14,336 + attention output 32,768 x 1.5/2 (E5M6) + latent norm input 4,096
             + rotary key 128 + norm2 input 14,336 = 57,472, + the fused core's fp32 log-sum-exp 128 heads x
             4 B = 512 (layers/attention.py [ls]: the stack's policy keeps the core's state)
      dense  + gate, up 2 x 36,864 + SwiGLU output 36,864 / 2 (fp8 GEMM input) = 149,632
      MoE    + router logits 4 x 256 + expert inputs 8 x 7,168 x 1 B (fp8 dispatch) + SwiGLU
             inputs 8 x 4,096 x 1 B + the shared expert's 4,096 x 1 B = 152,704
    x 4,096 tokens x 17 micro-batches (PP + 1), the routed rows (expert and SwiGLU inputs) at the
    busiest EP rank's load L = 1 + 0.04 sqrt(ln 64 / (4 ln 64)) = 1.02 (aux-loss-free balancing,
    planner/imbalance.py); one layer's re-run tensors (the MoE layer's: norm
    outputs 7,168 (fp8) + 2 x 7,168 (the router's bf16 input, memory.py [14]), q, k 2 x 49,152,
    v 32,768, latent norm output 4,096, SwiGLU outputs
    32,768 L + 4,096, experts' outputs 8 x 7,168 x 2 L) x 4,096; cuBLAS workspaces 2 x 32 MiB; the
    1 GiB reserve; DeepEP's buffers outside the allocator at Megatron's sizing for EP 64 (8 DeepEP
    nodes of 8; planner/ep_buffers.py): NVLink ceil128(10 x 8 x 19 x 4 + 10 x 8 x 288 x (2 x 7,168
    + 2,056)) = 377,677,824 + 160 + the 32 MiB workspace, RDMA 10 x 8 x 144 + 2 x 10 x 8 x 140 x
    (14,336 + 2,072) = 367,550,720: 778,783,136."""
    mla, norm = _mla_params(), 7168
    dense_layer = mla + 2 * norm + 3 * 7168 * 18432
    moe_rank = mla + 2 * norm + 3 * 7168 * 2048 + 7168 * 256  # the score bias a buffer, not a parameter
    experts = 256 * 3 * 7168 * 2048 // 64
    assert (dense_layer, moe_rank, experts) == (583_483_392, 232_996_864, 176_160_768)
    dense_p, expert_p = 2 * (dense_layer + 3 * moe_rank), 2 * 3 * experts  # the stage twice
    L = 1.0 + 0.04 * math.sqrt(math.log(64) / (256 / 64 * math.log(64)))  # 1.02: aux-loss-free, 4 experts a rank
    assert L == pytest.approx(1.02)
    lse = 128 * 4
    per_token = (57_472 + lse + 73_728 + 18_432) + 3 * (57_472 + lse + 1_024 + (57_344 + 32_768) * L + 4_096)
    buffer = 7168 + 2 * 7168 + 2 * 49152 + 32768 + 4096 + 32768 * L + 4096 + 8 * 7168 * 2 * L
    want = dict(weights=2 * (dense_p + expert_p), gradients=4 * (dense_p + expert_p),
                master_weights=4 * dense_p / 128 + 4 * expert_p / 2, adam=4 * dense_p / 128 + 4 * expert_p / 2,
                layer_activations=per_token * 4096 * 17, recompute_buffer=buffer * 4096,
                workspaces=2 * 32 * 2**20, reserve=GIB, model_buffers=2 * 3 * 2 * 4 * 256,
                ep_buffers=377_677_824 + 160 + 32 * 2**20 + 367_550_720,
                # NCCL's NVLS buffers (memory.py [nv]): the DP group's 8 ranks a node, 16 x 2 x 1 MiB x 8 + 2 MiB; the
                # expert-DP group (128 / 64 = 2 ranks) has too few
                nvls_buffers=258 * 2**20)
    assert want["ep_buffers"] == 778_783_136
    settings, plan, _ = resolve(Job(**LAYOUT))
    d = to_json(settings, plan, evaluate(settings, plan))
    mem = d["memory"]
    assert d["plan"]["schedule"] == "dualpipe" and mem["heaviest_stage"] == "middle"
    for k, v in want.items():
        assert mem["terms"][k] == pytest.approx(v, rel=1e-12), k
    assert mem["total_bytes"] == pytest.approx(sum(want.values()), rel=1e-12)
    # 66.34 before DeepEP's buffers were priced, 65.98 at balanced routing, 67.06 before the log-sum-exp,
    # 67.20 before NCCL's NVLS buffers
    assert mem["total_bytes"] / GIB == pytest.approx(67.45, abs=0.01)
    # H800: 79.09 GiB visible (the H100 SXM5 figure, hardware_db/h800-sxm.yaml), 10% headroom
    assert mem["fits"] and mem["total_bytes"] <= 0.9 * 79.09 * GIB


def test_fit_ranks_deepseeks_layout_within_25_percent():
    """`fit --stack deepseek --precision fp8 --max-layer-slack 3` (61 layers on 16 stages of 4
    leave 3 slots) ranks DeepSeek's own layout first, within 25% of the published rate. The run
    trained one MTP module (sec. 2.2, 4.2: the recipe's mtp_layers 1, which the command takes
    on this stack); DualPipe pairs it, with the output layer and the loss on stage 15, with
    stage 0 on the end ranks (step.dualpipe_end_rank)."""
    job = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096,
              stack="deepseek", precision="fp8", mtp_layers=1)
    top = fit(job, opts=SpaceOptions(max_layer_slack=3)).rows[0]
    p = top["plan"]
    assert (p["tp"], p["cp"], p["pp"], p["dp"], p["ep"], p["sharding"], p["schedule"]) == (
        1, 1, 16, 128, 64, "zero1", "dualpipe")
    rate = top["throughput"]["tokens_per_s_per_gpu"]
    assert abs(rate / PUBLISHED - 1.0) <= 0.25
