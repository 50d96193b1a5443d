"""torchtitan's routed experts under op SAC: the grouped-GEMM outputs are kept only under torch.compile.

torchtitan @e347b1e5e: models/moe/moe.py _run_experts_grouped_mm (l. 113-130) runs torch._grouped_mm
(aten._grouped_mm.default), which no code's _op_sac_save_list holds (aten.mm.default is matched exactly by
distributed/activation_checkpoint.py _custom_policy l. 98-124), so without compile the gate / up and activation
outputs are re-run, not kept; with compile llama4's apply_compile (l. 658-685, imported by deepseek_v3 and qwen3)
compiles the function, one inductor_compiled_code call the save lists keep (stack_db torchtitan selective
expert_gemms_kept: compiled; memory.py [gmm])."""

from __future__ import annotations

import pytest

from conftest import priced_with_selective
from planner.catalog import load_stack
from planner.compute import price_gemms
from planner.layers import layer_list
from planner.stacks import plan_context

# qwen3-30b-a3b: h 2048, 48 MoE layers, 128 experts top-8, f_e 768, no shared expert
JOB = dict(model="qwen3-30b-a3b", gpus=8, stack="torchtitan", tp=1, ep=8, pp=1, sharding="fsdp", micro_batch=1,
           seq_len=4096, global_batch=8, recompute="selective")
T, L, H, FE = 4096, 48, 2048, 768


def _always(settings, plan):
    """The same plan priced on the stack as it stood before the field (the grouped GEMMs kept either way)."""
    return priced_with_selective(settings, plan, expert_gemms_kept="always")


def test_stack_fields():
    assert load_stack("torchtitan").selective.expert_gemms_kept == "compiled"
    assert load_stack("megatron").selective.expert_gemms_kept == "always"  # the default: no change elsewhere


@pytest.mark.parametrize("compile_", [False, True])
def test_memory_eager_drops_gate_up_and_act_out(explain, compile_):
    """Without compile the kept set loses gate / up (2 x 2 B x f_e) and the activation output (2 B x f_e) per
    routed row, T x rows x pad rows a layer (rows: top_k 8 at the busiest rank's load, pad the 8-row token
    groups of the 16 local experts), on all 48 layers; with compile nothing moves."""
    settings, plan, est, js = explain(torch_compile=compile_, **JOB)
    old = _always(settings, plan)
    ctx = plan_context(settings, plan)
    moe = next(k for k in layer_list(settings.model).kinds if k.has_experts).mlp
    rows, pad = float(moe.token_copies(ctx)), float(moe.padded_rows(ctx))
    assert 8.0 <= rows < 9.0 and pad == pytest.approx(1.0 + 16 * 8 / (T * rows), rel=1e-12)
    per_layer = T * rows * pad * (2.0 * 2.0 * FE + 2.0 * FE)
    drop = old["memory"]["activations_bytes"] - js["memory"]["activations_bytes"]
    if compile_:
        assert drop == 0.0
    else:
        # the kept bytes of 48 layers leave; at the peak (the loss's backward, before any layer's recompute)
        # the one-layer recompute buffer is not live, so the whole 48 x per_layer moves
        assert drop == pytest.approx(L * per_layer, rel=1e-9)
        assert drop / 2**30 == pytest.approx(7.40, abs=0.01)


def test_step_reruns_the_experts_forward_gemms_without_compile(explain):
    """The routed experts' forward grouped GEMMs (gate+up [t_e, 2 f_e, h] and down [t_e, h, f_e] on each of
    the 16 local experts) once more per layer without compile; none with compile. The stack's projection
    list (k, o, up: every second aten.mm) re-ran half the gate+up GEMM either way before: that share is gone."""
    s_e, p_e, _, j_e = explain(torch_compile=False, **JOB)
    s_c, p_c, _, j_c = explain(torch_compile=True, **JOB)
    o_e, o_c = _always(s_e, p_e), _always(s_c, p_c)
    ctx = plan_context(s_e, p_e)
    moe = next(k for k in layer_list(s_e.model).kinds if k.has_experts).mlp
    ex = [r for r in moe.gemms(ctx) if r[0].name in ("expert_up", "expert_down")]
    up, down = (next(r for r in ex if r[0].name == n) for n in ("expert_up", "expert_down"))
    # the grouped GEMMs' shapes: t_e rows an expert (T x rows / 16 + 3.5 mean padding), 16 local experts
    assert up[1] == down[1] == 16
    t = price_gemms(ex, s_e.hardware, p_e.precision)
    t_up, t_down = float(t["expert_up"]), float(t["expert_down"])
    # the FLOPs the two rows carry: 2 x (2 f_e h + f_e h) per padded row (rows computed: t_e a local expert)
    t_e = float(moe.expert_tokens(ctx)) + 3.5
    assert 2.0 * up[0].M * up[0].N * up[0].K * up[1] == pytest.approx(2.0 * t_e * 16 * 2 * FE * H, rel=1e-12)
    assert 2.0 * down[0].M * down[0].N * down[0].K * down[1] == pytest.approx(2.0 * t_e * 16 * FE * H, rel=1e-12)
    one_mb = 1  # global batch 8 over dp 8: one micro-batch a step
    d_e = j_e["time"]["compute_s"] - o_e["time"]["compute_s"]
    d_c = j_c["time"]["compute_s"] - o_c["time"]["compute_s"]
    assert d_e == pytest.approx(one_mb * L * (t_up + t_down - 0.5 * t_up), rel=1e-9)  # all of them, less the half before
    assert d_c == pytest.approx(-one_mb * L * 0.5 * t_up, rel=1e-9)  # the half gate+up re-run is gone
    assert j_e["time"]["step_s"] - o_e["time"]["step_s"] == pytest.approx(d_e, rel=1e-9)
