"""What an MoE layer saves for its routing and token permutations (issue 21; planner/layers/moe.py [9],
routing_saved_bytes): Megatron-Core's alltoall dispatcher at d98e8a64 with Transformer Engine @4329ff84.
Per local token (n = T / tp under SP): the fused router's bool routing map (TE router.py l. 99: E x 1 B) or
the unfused router's int64 top-k indices (torch.topk / scatter: k x 8 B); the fused permutation's int32
row-id map [n, 2E + 1] (TE permutation.py l. 321 / 519, triton/permutation.py l. 52) or the unfused one's
int64 argsort of the [n E] map (moe_utils.py l. 473, kept through the probabilities' gather, l. 478) and
int64 sorted indices [n k] (l. 475); with more than one local expert the two fused chunk sorts' int32 maps
over the received rows (permutation.py l. 1250, triton/permutation.py l. 381). By hand for Mixtral 8x7B
(E 8, top-2) at seq 4096, micro-batch 1, TP 2 with SP, balanced routing."""

from __future__ import annotations

import dataclasses

import pytest

from planner.layers import context
from planner.memory import layer_memory, moe_routing_saves
from planner.params import count_params
from tests.conftest import explain_job

T, E, K = 4096, 8, 2
KW = dict(model="mixtral-8x7b", gpus=64, hardware="h100-sxm", stack="megatron", precision="bf16", global_batch=64,
          seq_len=T, tp=2, pp=4, micro_batch=1, recompute="none", sharding="zero1", moe_rank_imbalance=1.0)


def _moe(**fields):
    settings, plan, _, _ = explain_job(**dict(KW, **fields))
    pc = count_params(settings.model)
    i = next(j for j, k in enumerate(pc.layers.kinds) if k.has_experts)
    return settings, plan, pc, i


@pytest.mark.parametrize("ep,fused,want", [
    (8, True, T / 2 * (1 * E + 4 * (2 * E + 1))),           # 155,648 B: one local expert, no chunk sort
    (8, False, T / 2 * (8 * K + 8 * (E + K))),               # 196,608 B
    # 4 local experts: two int32 chunk-sort maps over the received rows, top_k rows a token (etp = tp: T k / tp x tp)
    (2, True, T / 2 * (1 * E + 4 * (2 * E + 1)) + T * 2 * 4 * K * 2 / 2),  # 221,184 B
    (2, False, T / 2 * (8 * K + 8 * (E + K))),               # unfused chunk sorts (split + cat) keep nothing
])
def test_bytes_by_hand(ep, fused, want):
    settings, plan, pc, i = _moe(ep=ep, moe_permute_fusion=fused, moe_router_fusion=fused)
    assert float(moe_routing_saves(settings)(pc.layers.kinds[i], context(plan))) == want


def test_in_the_layer_activations():
    # kept beside the layer's tensors under no recompute, gone under full recompute (the layer re-runs)
    settings, plan, pc, i = _moe(ep=8, moe_permute_fusion=True, moe_router_fusion=True)
    ctx = context(plan)
    mem = dataclasses.replace(settings.stack.memory, moe_routing_saved=False) if dataclasses.is_dataclass(
        settings.stack.memory) else settings.stack.memory.model_copy(update={"moe_routing_saved": False})
    without = dataclasses.replace(settings, stack=settings.stack.model_copy(update={"memory": mem}))
    assert moe_routing_saves(without) is None
    on, off = layer_memory(settings, plan, ctx, pc.layers)[0][i], layer_memory(without, plan, ctx, pc.layers)[0][i]
    assert float(on - off) == T / 2 * (1 * E + 4 * (2 * E + 1))


def test_other_dispatchers_not_priced():
    settings, _, _, _ = _moe(ep=8, moe_dispatcher="allgather")
    assert moe_routing_saves(settings) is None
