"""TE's quantized weight copies on a stage whose bf16 layers sit by global layer index (planner/memory.py
quantized_weight_terms, pipeline.stage_end_layers; issue 21).

Megatron-Core keeps the first n0 layers outside the fp8 autocast by their *global* index (megatron/core/fp8_utils.py
@d98e8a64 l. 711-727 is_first_last_bf16_layer; transformer_block.py l. 343-356), and with the interleaved schedule
model chunk j = c p + s sits on stage s (transformer_layer.py l. 65-180, vp-major). Llama 3 8B (32 layers) on pp 4 x
vpp 2: 8 chunks of 4 layers; stage 0 holds chunks 0 (layers 0-3) and 4 (layers 16-19). With
--num-layers-at-start-in-bf16 6, layers 0-5 run bf16: stage 0 holds 4 of them (0-3), stage 1 the other 2 (4, 5).
So stage 0's fp8 copies are those of 8 - 4 = 4 of its 8 layers: half of the all-fp8 figure (before: min(6, 8) = 6
taken off, a quarter kept: stage 0's copies under-counted by half). The memory's model-state groups call it with a
plan of STATE_FIELDS only (terms.Groups): explain must run (it raised KeyError on plan.microbatches in a first try)."""
import pytest

from planner.memory import quantized_weight_terms, stage_kind_counts
from planner.params import count_params

JOB = dict(model="llama3-8b", gpus=64, micro_batch=1, global_batch=64, seq_len=4096, hardware="h100-sxm",
           stack="megatron", tp=1, pp=4, vpp=2, precision="fp8", fp8_recipe="tensorwise", sharding="zero1")


def _first_stage_copies(explain, **extra):
    s, p, _, js = explain(**JOB, **extra)
    pc = count_params(s.model)
    counts = stage_kind_counts(s.model, p)
    copies, _ = quantized_weight_terms(s, p, pc, counts["first"], "first")
    return float(copies), s, js


def test_first_stage_keeps_the_copies_of_its_fp8_layers_only(explain):
    full, s0, _ = _first_stage_copies(explain)
    assert s0.bf16_layers == (0, 0) and full > 0
    part, s6, js = _first_stage_copies(explain, bf16_layers_at_start=6)
    assert s6.bf16_layers == (6, 0)
    assert part == pytest.approx(full * 4 / 8, rel=1e-12)  # 4 of stage 0's 8 layers in bf16 (not 6)
    assert js["memory"]["stages"]["first"]["allocated_bytes"] > 0  # explain ran through the keyed state groups



def test_the_bf16_layers_leave_out_their_own_kind_s_copies(explain):
    """DeepSeek-V2-Lite (27 layers: layer 0 a dense MLP, layers 1-26 MoE) at pp 2, ep 8, fp8 tensorwise, 1 layer kept
    bf16 at the start: stage 0 holds layer 0 and 12 MoE layers (13 of 27). The kept layer is the dense one, so stage
    0's fp8 copies lose exactly the dense kind's (its layer's linears: attention and the 10,944-wide gated MLP), the
    stage priced with one dense layer fewer: 2,537,816,064 - 2,378,170,368 = 159,645,696 B; the old rule took a
    thirteenth of the stage's copies off (the mean layer: 195,216,620 B, 22% more, the MoE layers' local experts
    weighing in)."""
    import numpy as np

    from planner.layers import layer_list

    job = dict(model="deepseek-v2-lite", gpus=16, micro_batch=1, global_batch=16, seq_len=4096, hardware="h100-sxm",
               stack="megatron", tp=1, pp=2, ep=8, precision="fp8", fp8_recipe="tensorwise", sharding="zero1")

    def copies(counts=None, **extra):
        s, p, _, _ = explain(**job, **extra)
        pc = count_params(s.model)
        c = stage_kind_counts(s.model, p)["first"] if counts is None else counts
        return s, c, float(quantized_weight_terms(s, p, pc, c, "first")[0])

    s, counts, full = copies()
    _, _, kept = copies(bf16_layers_at_start=1)
    dense = next(i for i, k in enumerate(layer_list(s.model).kinds) if not k.has_experts)
    assert float(counts[dense]) == 1.0 and float(np.sum(counts)) == 13.0
    one_fewer = counts - (np.arange(len(counts)) == dense).reshape((-1,) + (1,) * (np.ndim(counts) - 1))
    _, _, without_dense = copies(one_fewer)
    assert kept == pytest.approx(without_dense, rel=1e-12)
    assert (full, kept) == (2_537_816_064.0, 2_378_170_368.0)
    assert full / 13 == pytest.approx(195_216_620.3, rel=1e-9)  # the old rule's share
