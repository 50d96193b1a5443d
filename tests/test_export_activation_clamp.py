"""Megatron export of a clamped gated MLP (gpt-oss's swiglu_limit 7.0, ModelSpec.activation_clamp) is
reported, not dropped (issue 22/24 audit). Megatron-Core has TransformerConfig.
activation_func_clamp_value (NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/
transformer_config.py l. 235), but Megatron-LM's argument parser has no flag for it (megatron/
training/arguments.py @d98e8a64: no clamp argument; Megatron-Bridge's gpt-oss provider sets it in
Python), so the launch script trains an unclamped SwiGLU while the plan priced the clamp's kernels
and its saved copy (stack_db megatron activation_clamp_saved). Before, the script was written with
no word of it, and `planner check` read it back as gpt-oss-20b, clamp included."""

from __future__ import annotations

from planner.cli.export import resolved_plan
from planner.schema import Job
from planner.trainers.export import export_plan


def _notes(**job):
    return export_plan(resolved_plan(Job(**job)), "megatron")[1]


def test_the_clamp_megatron_cannot_set_is_reported():
    notes = _notes(model="gpt-oss-20b", gpus=16, tp=2, ep=8, etp=1, sharding="zero1", global_batch=64, seq_len=4096)
    clamp = [n for n in notes if n.startswith("activation_clamp 7 (gpt-oss-20b)")]
    assert len(clamp) == 1 and "activation_func_clamp_value" in clamp[0] and "unclamped" in clamp[0]
    # a model without the clamp says nothing of it
    assert not any("activation_clamp" in n for n in _notes(model="mixtral-8x7b", gpus=16, tp=2, ep=8, sharding="zero1",
                                                             global_batch=64, seq_len=4096))
