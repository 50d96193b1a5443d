"""Sequence parallelism's replicated parameters (issues 21 / 22, spnorm).

An FSDP unit holds a layer's replicated parameters whole (memory.unit_params): Megatron marks the norms no
tensor_model_parallel, torchtitan's SequenceParallel gives them a Replicate placement; before, a dense layer's were
divided by tp.
"""

from __future__ import annotations

from planner.memory import unit_params
from planner.params import count_params


def test_fsdp_unit_holds_the_norms_whole(explain):
    """Llama 3 405B at tp 8: a layer's unit is its TP-split matrices / 8 and its two RMSNorms whole. Attention
    16,384 x (16,384 + 2 x 8 x 128) + 16,384 x 16,384 = 570,425,344, MLP 3 x 16,384 x 53,248 = 2,617,245,696:
    3,187,671,040 / 8 + 2 x 16,384 = 398,491,648 parameters (before: (3,187,671,040 + 32,768) / 8 = 398,462,976,
    2 x 16,384 x (1 - 1/8) = 28,672 fewer)."""
    s, p, est, js = explain(model="llama3-405b", gpus=64, micro_batch=1, global_batch=64, seq_len=8192,
                            hardware="h100-sxm", stack="torchtitan", sharding="fsdp", tp=8)
    pc = count_params(s.model)
    (kp,) = pc.kind_params
    assert kp.split == 3_187_671_040 and kp.replicated == 2 * 16_384
    assert float(unit_params(pc, p, layers_only=True)) == 398_491_648 == 398_462_976 + 28_672
