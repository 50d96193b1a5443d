"""torchtitan 0.3's routed experts under op SAC: the grouped-GEMM outputs are never kept, eager or compiled.

pytorch/torchtitan release/0.3 @4f9e9a47d: models/common/moe.py GroupedExperts.forward (l. 94-108) runs three
torch._grouped_mm (aten._grouped_mm.default, l. 110-120). The save list (distributed/activation_checkpoint.py
_get_default_save_ops l. 31-94) is 0.3's own ops plus torch's get_default_op_list().compute_intensive_ops (l. 87-91);
0.3.0 validates against torch==2.14.0 (.github/workflows/validate_rc.yaml l. 42), whose
torch/_functorch/partitioners.py get_default_op_list l. 3306-3318 holds mm, convolution(_backward), bmm, addmm, the
SDPA / attention-forward ops, upsample_bilinear2d and _scaled_mm: no _grouped_mm, so the policy returns
PREFER_RECOMPUTE for it. Compiled, 0.3 compiles the whole checkpointed block (distributed/compile.py l. 70) and torch
2.14.0's checkpoint.py l. 1593-1598 tags the traced op with the same policy, which the partitioner recomputes
(partitioners.py l. 176-180, 2698-2705). Stack selective.expert_gemms_kept: never (memory.py [gmm3])."""

from __future__ import annotations

import pytest

from conftest import priced_with_selective
from planner.catalog import load_stack
from planner.compute import price_gemms
from planner.layers import layer_list
from planner.stacks import plan_context

# qwen3-30b-a3b: h 2048, 48 MoE layers, 128 experts top-8, f_e 768, no shared expert; rank load 1 (no imbalance)
JOB = dict(model="qwen3-30b-a3b", gpus=8, stack="torchtitan-0.3", tp=1, pp=1, sharding="fsdp", micro_batch=1,
           seq_len=4096, global_batch=8, recompute="selective", moe_rank_imbalance=1.0)
T, L, H, FE, K = 4096, 48, 2048, 768, 8


def _always(settings, plan):
    """The same plan priced as if the policy kept the grouped GEMMs (the field's default, 0.3's value before)."""
    return priced_with_selective(settings, plan, expert_gemms_kept="always")


def test_stack_field():
    assert load_stack("torchtitan-0.3").selective.expert_gemms_kept == "never"
    assert load_stack("torchtitan").selective.expert_gemms_kept == "compiled"  # main: inductor_compiled_code kept


@pytest.mark.parametrize("ep", [1, 8])
@pytest.mark.parametrize("compile_", [False, True])
def test_memory_drops_gate_up_and_act_out_always(explain, ep, compile_):
    """Kept set loses gate / up (2 x 2 B x f_e) and the activation output (2 B x f_e) a routed row, compiled or not,
    at EP 1 (LocalTokenDispatcher) and EP 8 alike. A rank's routed rows: T x k = 4,096 x 8 = 32,768 (EP 1: its own
    tokens' copies; EP 8 at load 1: the mean received), no padded rows on 0.3 (no token-group alignment):
    32,768 x (2 x 2 + 2) x 768 = 150,994,944 B a layer, x 48 = 7,247,757,312 B (6.75 GiB). At
    the peak (the loss's backward, before any layer's recompute) the one-layer recompute buffer is not live."""
    settings, plan, _, js = explain(ep=ep, torch_compile=compile_, **JOB)
    ctx = plan_context(settings, plan)
    moe = next(k for k in layer_list(settings.model).kinds if k.has_experts).mlp
    assert float(moe.token_copies(ctx)) == K and float(moe.padded_rows(ctx)) == 1.0
    per_layer = T * K * (2.0 * 2.0 * FE + 2.0 * FE)
    assert per_layer == 150_994_944 and L * per_layer == 7_247_757_312
    drop = _always(settings, plan)["memory"]["activations_bytes"] - js["memory"]["activations_bytes"]
    assert drop == pytest.approx(7_247_757_312, rel=1e-12)


@pytest.mark.parametrize("ep", [1, 8])
@pytest.mark.parametrize("compile_", [False, True])
def test_step_reruns_the_experts_forward_gemms(explain, ep, compile_):
    """The routed experts' forward grouped GEMMs (gate+up [t_e, 2 f_e, h] and down [t_e, h, f_e] on each of the
    128 / ep local experts) once more a layer, compiled or not; the stack's projection list (k, o, up: every second
    aten.mm) re-ran half the gate+up GEMM before: that share is gone. t_e = T k / E_l rows an expert:
    32,768 / 16 = 2,048 at EP 8, 32,768 / 128 = 256 at EP 1; FLOPs 2 x t_e x E_l x 3 f_e h either way."""
    s, p, _, j = explain(ep=ep, torch_compile=compile_, **JOB)
    o = _always(s, p)
    ctx = plan_context(s, p)
    moe = next(k for k in layer_list(s.model).kinds if k.has_experts).mlp
    ex = [r for r in moe.gemms(ctx) if r[0].name in ("expert_up", "expert_down")]
    up, down = (next(r for r in ex if r[0].name == n) for n in ("expert_up", "expert_down"))
    local, t_e = 128 // ep, T * K / (128 // ep)
    assert up[1] == down[1] == local and float(moe.expert_tokens(ctx)) == t_e
    assert 2.0 * up[0].M * up[0].N * up[0].K * up[1] == pytest.approx(2.0 * T * K * 2 * FE * H, rel=1e-12)
    assert 2.0 * down[0].M * down[0].N * down[0].K * down[1] == pytest.approx(2.0 * T * K * FE * H, rel=1e-12)
    t = price_gemms(ex, s.hardware, p.precision)
    t_up, t_down = float(t["expert_up"]), float(t["expert_down"])
    d = j["time"]["compute_s"] - o["time"]["compute_s"]
    # global batch 8 over dp 8: one micro-batch a step
    assert d == pytest.approx(L * (t_up + t_down - 0.5 * t_up), rel=1e-9) and d > 0.0
    assert j["time"]["step_s"] - o["time"]["step_s"] == pytest.approx(d, rel=1e-9)


def test_no_recompute_and_full_unchanged(explain):
    """The field acts only under op SAC: no recompute keeps everything, full AC keeps nothing, either way."""
    for rc in ("none", "full"):
        s, p, _, j = explain(ep=8, **dict(JOB, recompute=rc))
        o = _always(s, p)
        assert j["memory"]["activations_bytes"] == o["memory"]["activations_bytes"]
        assert j["time"]["compute_s"] == o["time"]["compute_s"]
