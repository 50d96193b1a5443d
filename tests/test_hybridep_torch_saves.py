"""What torchtitan 0.3's HybridEP ops save for the backward (issue 21; layers/moe.py [20], memory.py [hs], stack
torchtitan-0.3 memory.hybridep_dispatch_saves), by hand.

pytorch/torchtitan release/0.3 @4f9e9a47d:
  models/common/moe.py l. 318-324: `_, topk_expert_ids = torch.topk(scores_for_choice, k)`, then
  `scores.gather(-1, topk_expert_ids)`: GatherBackward0 keeps the int64 [n, k] index;
  distributed/deepep/hybridep.py l. 357-364: _dispatch_setup_context saves the same tensor (ctx.save_for_backward(topk_idx));
  l. 165-190, 219: the dispatch returns fp32 permuted scores, one a permuted row; l. 515-516: cast to bf16;
  l. 535-536: `hidden_states * permuted_scores`, whose MulBackward0 keeps the bf16 scores (2 B a row);
  distributed/activation_checkpoint.py l. 51-53, 67-68: aten.topk and hybridep.dispatch are MUST_SAVE under op SAC,
  so their outputs are cached (topk's fp32 values 4 k and int64 indices 8 k, the dispatch's fp32 scores 4 B a row).

deepseek_v3_16b_hybridep on 8 H100s (tests/test_torchtitan03_hybridep.py): n = 4 x 4096 = 16,384 local tokens, top-6,
capacity factor 1 at EP 8: 8 x min(64 / 8, 6) = 48 permuted rows a local token. Per MoE layer and micro-batch:
  no recompute   8 x 6 + 2 x 48 = 144 B a token: 2,359,296 B kept
  op SAC         12 x 6 + 4 x 48 = 264 B a token: 4,325,376 B kept, 2 x 48 = 96 B (1,572,864 B) re-made in the re-run
  full AC        nothing kept by a re-run layer; 2,359,296 B re-made in its buffer
and, every mode, the dispatch handle the dispatch and combine nodes keep as a ctx attribute (DispatchState.handle,
_dispatch_setup_context / _combine_setup_context l. 357-364, 376-381; the same tuple DeepEP's dispatch_with_permute
returns to Megatron, layers/moe.py [15]): the group's R = 8 ranks in one 8-GPU NVLink domain (N = 1), per local token
sparse_to_dense_map 4 R = 32, rdma_to_attn_map N = 1, attn_to_rdma_map N - 1 = 0, local_expert_routing_map E = 64,
dense_to_expert_map 4 E = 256, dense_chunk_layout 4 R / 64 = 0.5: 353.5 B, 5,791,744 B a layer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.catalog import load_stack
from planner.explain import evaluate, to_json
from planner.layers import layer_list
from planner.memory import hybridep_torch_saves, torch_router_saves
from planner.plan import resolve
from planner.schema import Job
from planner.stacks import plan_context
from planner.trainers import load_trainer_config

N = 4 * 4096
K, ROWS = 6, 8 * min(64 // 8, 6)  # 48 capacity rows a local token
MOE_LAYERS = 26
HANDLE = N * (4 * 8 + 1 + 0 + 64 + 4 * 64 + 4 * 8 / 64)  # 5,791,744 B a layer


def _job(tmp_path, config="deepseek_v3_16b_hybridep") -> dict:
    p = tmp_path / f"{config}.sh"
    p.write_text(f"#!/usr/bin/bash\nMODULE=deepseek_v3 CONFIG={config} NGPU=8 ./run_train.sh\n")
    return dict(load_trainer_config(p, hardware="h100-sxm").job)


def _saves(job: dict, dispatch_only: bool = False):
    settings, plan, _ = resolve(Job(**job))
    kind = next(k for k in layer_list(settings.model).kinds if k.has_experts)
    ctx = plan_context(settings, plan)
    kept, held, handle = hybridep_torch_saves(settings, kind, ctx, plan)
    if dispatch_only:
        return float(np.asarray(kept)), float(np.asarray(held)), float(np.asarray(handle)), settings, plan
    r_kept, r_held = torch_router_saves(settings, kind, ctx, plan)  # the router's index and cached topk [tr]
    return (float(np.asarray(kept + r_kept)), float(np.asarray(held + r_held)), float(np.asarray(handle)), settings,
            plan)


def test_hand_figures():
    assert ROWS == 48
    assert N * (8 * K + 2 * ROWS) == 2_359_296
    assert N * (12 * K + 4 * ROWS) == 4_325_376
    assert N * 2 * ROWS == 1_572_864
    assert HANDLE == 5_791_744


def test_by_recompute_mode(tmp_path):
    job = _job(tmp_path)
    assert job["recompute"] == "selective" and job["moe_hybridep_capacity_factor"] == 1.0
    assert _saves(job)[:3] == (4_325_376, 1_572_864, HANDLE)
    assert _saves({**job, "recompute": "none"})[:3] == (2_359_296, 0.0, HANDLE)
    assert _saves({**job, "recompute": "full"})[:3] == (2_359_296, 2_359_296, HANDLE)


def test_blocking_dispatch_rows_routed(tmp_path):
    """Without the capacity factor (the blocking dispatch, a user's config function) the scores are one a routed row:
    6 x the busiest rank's load a local token."""
    job = {**_job(tmp_path), "moe_hybridep_capacity_factor": 0.0, "recompute": "none"}
    kept, _, handle, settings, plan = _saves(job)
    load = float(plan_context(settings, plan).cf)
    assert 1.0 <= load < 1.1
    assert kept == pytest.approx(N * (8 * K + 2 * K * load), rel=1e-12)
    assert handle == HANDLE  # sized for every token of the group, not the rows routed


def test_other_dispatchers_and_stacks_save_none(tmp_path):
    """The standard all-to-all on 0.3 takes no HybridEP op (0; its router's index and cached topk outputs are still
    kept: tests/test_torch_router_saves.py); Megatron's flex dispatcher prices its own saves (moe_routing_saved), not
    these: the field is torchtitan-0.3's alone."""
    assert _saves(_job(tmp_path, "deepseek_v3_16b"), dispatch_only=True)[:3] == (0.0, 0.0, 0.0)
    assert _saves(_job(tmp_path, "deepseek_v3_16b"))[:3] == (N * 12 * K, 0.0, 0.0)  # SAC: topk's cache, 12 k B
    assert load_stack("torchtitan-0.3").memory.hybridep_dispatch_saves is True
    for name in ("torchtitan", "megatron", "megatron-bridge", "llm-foundry"):
        assert load_stack(name).memory.hybridep_dispatch_saves is False


def test_explain_layer_activations_without_recompute(tmp_path):
    """explain's layer_activations (26 MoE layers, one micro-batch in flight at pp 1) rise by the hand figures (the
    saves, the router's [tr] among them, and the handle) over the same job priced with both fields off; under full
    recompute by the handles alone."""
    job = {**_job(tmp_path), "recompute": "none"}
    settings, plan, _ = resolve(Job(**job))
    on = to_json(settings, plan, evaluate(settings, plan))["memory"]["terms"]["layer_activations"]
    st = settings.stack
    off_stack = st.model_copy(update={"memory": st.memory.model_copy(update={"hybridep_dispatch_saves": False,
                                                                               "router_topk_saves": None})})
    import dataclasses
    s_off = dataclasses.replace(settings, stack=off_stack)
    off = to_json(s_off, plan, evaluate(s_off, plan))["memory"]["terms"]["layer_activations"]
    assert on - off == MOE_LAYERS * (2_359_296 + HANDLE)
    full = {**job, "recompute": "full"}
    settings, plan, _ = resolve(Job(**full))
    on = to_json(settings, plan, evaluate(settings, plan))["memory"]["terms"]["layer_activations"]
    s_off = dataclasses.replace(settings, stack=off_stack)
    off = to_json(s_off, plan, evaluate(s_off, plan))["memory"]["terms"]["layer_activations"]
    assert on - off == MOE_LAYERS * HANDLE
