"""The EP permutation index torchtitan's standard all-to-all path keeps for the backward (issue 21; layers/moe.py [23],
memory.py [pi], stack memory.ep_permute_index), by hand.

release/0.3 @4f9e9a47d ('int64'): torchtitan/models/common/token_dispatcher.py AllToAllTokenDispatcher._permute
l. 501-553 builds permuted_indices = input_starts[seg_ids] + torch.arange(...) - output_starts[seg_ids] (l. 541-545):
int64, one entry a received row, no padding (total = routed_input_RD.shape[0], l. 518); routed_input_RD[permuted_indices]
(l. 550, IndexBackward0) and _unpermute's index_put_ (l. 555-559, IndexPutBackward0) keep that one tensor until the
layer's backward. EP 1 runs LocalTokenDispatcher (l. 403-410): no index.
main @e347b1e5e ('padded_int32'): torchtitan/models/moe/utils.py _permute l. 42-59, kernels.py generate_permute_indices
(fill_indices_wrapper l. 80-82: torch.full(..., dtype=torch.int32)) at padded_max_len = round_up(R + E_l A, A)
entries, A = TOKEN_GROUP_ALIGN_SIZE_M 8 (bf16); EP 1 too (moe.py l. 166-178 indices_padding_wrapper).
Op SAC: none of the ops that build it is on a save list: nothing kept, re-made in the re-run layer.

Qwen3-30B-A3B (E 128, k 8, 48 MoE layers), 8 H100s, EP 8, FSDP 8, seq 4,096, micro-batch 1, a measured rank load of
1.0 (moe_rank_imbalance): n = 4,096 local tokens, R = 4,096 x 8 = 32,768 received rows, E_l = 128 / 8 = 16:
  0.3   8 x 32,768 = 262,144 B a MoE layer and micro-batch (64 B a local token)
  main  4 x (32,768 + 16 x 8) = 4 x 32,896 = 131,584 B; at EP 1 (E_l 128) 4 x (32,768 + 1,024) = 135,168 B
By recompute mode (kept, re-run buffer): none (I, 0), op SAC (0, I), full (I, I) (the layers full AC does not re-run
keep it; the re-run layer re-makes it).
With the default rank load (aux_loss rule, planner/imbalance.py: L = 1 + 0.52 sqrt(ln 8 / (16 ln 64)) =
1 + 0.52 / sqrt(32), ln 64 = 2 ln 8) R = 32,768 L on the busiest rank: 0.3 keeps 262,144 L B.
"""

from __future__ import annotations

import math

import pytest

from conftest import layer_activations_with_and_without, moe_layer_saves
from planner.catalog import load_stack
from planner.memory import torch_permute_index_saves

QWEN = dict(model="qwen3-30b-a3b", gpus=8, ep=8, sharding="fsdp", global_batch=8, seq_len=4096, hardware="h100-sxm",
            moe_rank_imbalance=1.0)
R = 4096 * 8
I03 = 262_144
IMAIN = 131_584
IMAIN_EP1 = 135_168


def _saves(**job):
    return moe_layer_saves(torch_permute_index_saves, **job)


def test_hand_figures():
    assert 8 * R == I03 and I03 / 4096 == 64
    assert 4 * (R + (128 // 8) * 8) == IMAIN
    assert 4 * (R + 128 * 8) == IMAIN_EP1


def test_stack_fields():
    assert load_stack("torchtitan-0.3").memory.ep_permute_index == "int64"
    assert load_stack("torchtitan").memory.ep_permute_index == "padded_int32"
    for name in ("megatron", "megatron-bridge", "llm-foundry", "megatron-deepspeed"):
        assert load_stack(name).memory.ep_permute_index is None


@pytest.mark.parametrize("stack,index", [("torchtitan-0.3", I03), ("torchtitan", IMAIN)])
def test_by_recompute_mode(stack, index):
    assert _saves(stack=stack, recompute="none", **QWEN) == (index, 0.0)
    assert _saves(stack=stack, recompute="selective", **QWEN) == (0.0, index)
    assert _saves(stack=stack, recompute="full", **QWEN) == (index, index)


def test_ep1():
    """0.3's EP 1 runs LocalTokenDispatcher, no _permute; main pads through indices_padding_wrapper."""
    assert _saves(stack="torchtitan-0.3", recompute="none", **{**QWEN, "ep": 1}) == (0.0, 0.0)
    assert _saves(stack="torchtitan", recompute="none", **{**QWEN, "ep": 1}) == (IMAIN_EP1, 0.0)


def test_busiest_rank_load():
    job = {k: v for k, v in QWEN.items() if k != "moe_rank_imbalance"}
    load = 1.0 + 0.52 / math.sqrt(32.0)
    assert math.isclose(0.52 * math.sqrt(math.log(8) / (16 * math.log(64))), 0.52 / math.sqrt(32.0), rel_tol=1e-12)
    assert _saves(stack="torchtitan-0.3", recompute="none", **job)[0] == pytest.approx(I03 * load, rel=1e-12)


def test_other_dispatchers_and_stacks_price_none():
    """HybridEP (0.3) and DeepEP (main) run their own dispatch: no _permute; Megatron prices its own maps."""
    assert _saves(stack="torchtitan-0.3", recompute="none", moe_dispatcher="hybridep", **QWEN) == (0.0, 0.0)
    v3 = {**QWEN, "model": "deepseek-v3"}
    assert _saves(stack="torchtitan", recompute="none", moe_dispatcher="deepep", **v3) == (0.0, 0.0)
    assert _saves(stack="megatron", recompute="none", **{**QWEN, "sharding": "zero1"}) == (0.0, 0.0)


def test_explain_layer_activations():
    """explain's layer_activations (48 MoE layers, one micro-batch in flight) rise by 48 x 262,144 B on 0.3 without
    recompute over the same job with the field off."""
    settings, on, off = layer_activations_with_and_without("ep_permute_index", None, stack="torchtitan-0.3",
                                                           recompute="none", **QWEN)
    assert settings.model.num_layers == 48
    assert on - off == 48 * I03
