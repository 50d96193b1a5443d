"""Hybrid-EP's buffers sized by each rank's own piece of its group per NVLink domain (issue 23;
planner/memory.py [ep], dispatcher_buffer_bytes; comm.domain_piece_columns).

Source: deepseek-ai/DeepEP @94a9f8f (hybrid-ep branch) deep_ep/hybrid_ep_buffer.py
HybridEPBuffer.__init__ l. 61-110: num_of_ranks_per_node = detect_accessible_ranks(group)
(csrc/hybrid_ep/allocator/allocator.cu l. 178-211: the group members this rank can reach, itself
included; never reduced over the group), num_of_nodes = group / that, both handed to the Configurer
that sizes the buffers; Megatron-LM @d98e8a64 fused_a2a.py init_hybrid_ep_buffer passes no count.
So a rank whose group straddles a rack is sized with its own piece, and the GPU's figure is the
heaviest rank's over the job's pieces.

Sizes (planner/ep_buffers.py hybridep, bf16, t tokens a rank, g ranks, e experts, n the piece,
N = g / n, s = 4 h / 128): NVLink t g (2h + 4 (e / g) n + s) + e t g; RDMA (N > 1)
t ((2h + 4e + s) + (N - 1)(2h + 4 (e / g) n + s) + 2 (N - 1)(2h + 4 (e / g) n)).

Step time: each group runs with its ranks' piece; the group with the smallest piece moves the most
over the network and paces the step, which is the piece comm.group_link prices (step.ep_comm): on
these placements it is domain_pieces' smallest, so no step time moves.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm, dispatch, ep_buffers as eb, memory
from planner.catalog import load_hardware
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.layers import context
from planner.plan import PlanArrays, resolve
from planner.schema import Job

GB = comm.comm_params(load_hardware("gb200-nvl72"))
H100 = comm.comm_params(load_hardware("h100-sxm"))
BASE = dict(tp=1, pp=1, etp=1, sharding="zero1", micro_batch=1, moe_dispatcher="hybridep")


def test_piece_columns_by_hand():
    """GB200 NVL72, 288 GPUs (72 nodes: 72-GPU segments, whole racks). Blocks of 32 consecutive
    ranks: 0-31, 32-63 whole (32), 64-95 as 64-71 (8) + 72-95 (24), 96-127 whole, 128-159 as
    16 + 16, 160-191 (32), 192-223 as 24 + 8, ...: pieces 8, 16, 24, 32. Blocks of 48: 0-47 (48),
    48-95 as 24 + 24, 96-143 (48), ...: 24, 48 (the largest repeated to fill the columns). 16: 16 or
    8 + 8 (blocks 64-79 across 72). 72: one rack each. 256 GPUs (64 nodes): 16-node (64-GPU) segments,
    a block of 64 fills one. H100 (8-GPU nodes), 2,048 GPUs: blocks of 16 put 8 in each node; 4 ranks
    4 apart (span 16) put 2 in each node."""
    cols = comm.domain_piece_columns(np.array([32, 48, 16, 72]), 1, GB, 288)
    assert cols.tolist() == [[8, 16, 24, 32], [24, 48, 48, 48], [8, 16, 16, 16], [72, 72, 72, 72]]
    assert comm.domain_piece_columns(64, 1, GB, 256).tolist() == [64]
    assert comm.domain_piece_columns(np.array([16, 4]), np.array([1, 4]), H100, 2048).tolist() == [[8], [2]]
    # the same count domain_pieces reads (each piece divides the group, their gcd, a group spans)
    div, gcd, spans = comm.domain_pieces(np.array([32, 48, 16, 72]), 1, GB, 288)
    assert div.tolist() == [False, True, True, True] and gcd.tolist() == [8, 24, 8, 72]
    assert spans.tolist() == [True, True, True, False]


def _buffers(**kw):
    settings, plan, _ = resolve(Job(**BASE, **kw))
    js = to_json(settings, plan, evaluate(settings, plan))
    return settings, plan, js["memory"]["terms"]["ep_buffers"]


def _smallest_piece_priced(settings, plan):
    """The members per domain step.ep_comm prices the dispatch with (comm.group_link's)."""
    strides = comm.strides_by_code(plan.order, tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    _, link = dispatch.group_link(dispatch.HYBRIDEP, plan, strides, comm.comm_params(settings.hardware), settings.gpus)
    return int(link.local_ranks)


def test_ep48_on_288_gb200_heaviest_rank_is_the_straddling_one():
    """Kimi-K2 (h 7,168, 384 experts, 8 a rank), EP 48 on 288 GB200 GPUs, 4,096 tokens a rank:
    ranks 48-95 and 192-239 see 24 of their group (N = 2), the others 48 (N = 1). s = 224.
    At 24: NVLink 4,096 x 48 x (14,336 + 4 x 8 x 24 + 224) + 384 x 4,096 x 48 = 4,096 x 48 x 15,712
    = 3,089,104,896; RDMA 4,096 x ((14,336 + 1,536 + 224) + (14,336 + 768 + 224) + 2 (14,336 + 768))
    = 4,096 x 61,632 = 252,444,672; 3,341,549,568 B. At 48: 4,096 x 48 x (14,336 + 1,536 + 224 + 384)
    = 3,240,099,840 B, no RDMA. The GPU's figure is the 24-piece rank's, as the smallest-piece
    pricing had it (no figure moves)."""
    at24 = float(eb.buffer_bytes("hybridep", 7168, 48, 4096, 384, 24))
    at48 = float(eb.buffer_bytes("hybridep", 7168, 48, 4096, 384, 48))
    assert (at24, at48) == (3_089_104_896 + 252_444_672, 3_240_099_840)
    settings, plan, got = _buffers(model="kimi-k2", hardware="gb200-nvl72", gpus=288, global_batch=288, ep=48)
    assert got == 3_341_549_568
    assert _smallest_piece_priced(settings, plan) == 24  # the step is paced by the straddling groups


def test_ep32_on_288_gb200_is_refused_before_it_is_priced():
    """EP 32 on 288 GB200 GPUs: pieces 8, 16, 24, 32 (above); 32 % 24 != 0, so HybridEPBuffer's assert
    stops it (start-up rule MEGATRON_HYBRIDEP_DOMAIN); its buffers would be the largest over the four
    pieces. Kimi-K2, 12 experts a rank: at 8 (N = 4) 4,096 x 32 x (14,336 + 4 x 12 x 8 + 224) + 384 x
    4,096 x 32 + 4,096 x ((14,336 + 1,536 + 224) + 3 (14,336 + 384 + 224) + 6 (14,336 + 384)) =
    4,096 x 32 x 15,328 + 4,096 x 149,248 = 2,009,071,616 + 611,319,808 = 2,620,391,424 B, the
    heaviest of the four (at 32, N = 1: 4,096 x 32 x (14,336 + 1,536 + 224 + 384) = 2,160,066,560)."""
    with pytest.raises(PlannerError) as e:
        resolve(Job(**BASE, model="kimi-k2", hardware="gb200-nvl72", gpus=288, global_batch=288, ep=32))
    assert "MEGATRON_HYBRIDEP_DOMAIN" in e.value.message
    each = [float(eb.buffer_bytes("hybridep", 7168, 32, 4096, 384, n)) for n in (8, 16, 24, 32)]
    assert each[0] == 4096 * 32 * 15_328 + 4096 * 149_248 == 2_620_391_424
    assert each[3] == 2_160_066_560 and max(each) == each[0]


def test_ep64_on_256_gb200_one_segment():
    """DeepSeek-V3, EP 64 on 256 GB200 GPUs (64-GPU segments): every rank sees its whole group, N = 1:
    4,096 x 64 x (14,336 + 4 x 4 x 64 + 224) + 256 x 4,096 x 64 = 4,152,360,960 B (tests/test_ep_buffers.py)."""
    settings, plan, got = _buffers(model="deepseek-v3", hardware="gb200-nvl72", gpus=256, global_batch=256, ep=64)
    assert got == 4_152_360_960
    assert _smallest_piece_priced(settings, plan) == 64


def test_h100_eight_gpu_domains():
    """DeepSeek-V3, EP 16 on 2,048 H100 (8-GPU nodes): every rank sees 8, N = 2. NVLink 4,096 x 16 x
    (14,336 + 4 x 16 x 8 + 224) + 256 x 4,096 x 16 = 4,096 x 16 x 15,328 = 1,004,535,808; RDMA
    4,096 x ((14,336 + 1,024 + 224) + (14,336 + 512 + 224) + 2 (14,336 + 512)) = 4,096 x 60,352 =
    247,201,792; 1,251,737,600 B."""
    settings, plan, got = _buffers(model="deepseek-v3", hardware="h100-sxm", gpus=2048, global_batch=2048, ep=16)
    assert got == 1_004_535_808 + 247_201_792 == 1_251_737_600
    assert _smallest_piece_priced(settings, plan) == 8


def test_the_whole_group_rank_is_heavier_where_experts_dominate():
    """Qwen3-Next-80B-A3B (h 2,048, 512 experts, 16 a rank), EP 32 on 96 GB200 GPUs (24 nodes: 12-node,
    48-GPU segments): ranks 0-31 and 64-95 see 32 (N = 1), 32-63 see 16 (N = 2). s = 64. At 32:
    4,096 x 32 x (4,096 + 4 x 16 x 32 + 64) + 512 x 4,096 x 32 = 4,096 x 32 x 6,720 = 880,803,840.
    At 16: 4,096 x 32 x (4,096 + 1,024 + 64 + 512) = 746,586,112 + RDMA 4,096 x ((4,096 + 2,048 + 64)
    + (4,096 + 1,024 + 64) + 2 (4,096 + 1,024)) = 4,096 x 21,632 = 88,604,672: 835,190,784. The
    whole-group ranks' probability columns (4 x 16 x 32 per row) outweigh the straddling ranks' RDMA
    copies: the GPU holds 880,803,840 B, where the smallest piece alone gave 835,190,784 (+45,613,056).
    The step is still priced at the straddling groups' 16."""
    settings, plan, got = _buffers(model="qwen3-next-80b-a3b", hardware="gb200-nvl72", gpus=96, global_batch=96,
                                   ep=32)
    assert comm.domain_piece_columns(32, 1, GB, 96).tolist() == [16, 32]
    assert float(eb.buffer_bytes("hybridep", 2048, 32, 4096, 512, 16)) == 746_586_112 + 88_604_672 == 835_190_784
    assert got == 880_803_840
    assert _smallest_piece_priced(settings, plan) == 16


def test_search_arrays_take_each_plans_pieces():
    """A search prices many plans at once: memory.dispatcher_buffer_bytes on plan arrays gives each
    plan its own heaviest piece, the same figure as each plan alone."""
    rows = []
    for ep in (16, 32):
        settings, plan, _ = resolve(Job(**BASE, model="qwen3-next-80b-a3b", hardware="gb200-nvl72", gpus=96,
                                        global_batch=96, ep=ep))
        rows.append((settings, plan))
    settings = rows[0][0]
    fields = {f: np.array([np.asarray(getattr(p, f)).item() for _, p in rows]) for f in PlanArrays.__dataclass_fields__}
    both = PlanArrays(**fields)
    got = memory.dispatcher_buffer_bytes(settings, both, context(both))
    alone = [float(memory.dispatcher_buffer_bytes(s, p, context(p))) for s, p in rows]
    assert got.tolist() == alone and alone[1] == 880_803_840
