"""fp8 attention (job field fp8_attention; Megatron-Core TransformerConfig.fp8_dot_product_attention,
Transformer Engine's recipe fp8_dpa; issues 21 / 23). Memory: TE @4329ff84 FusedAttnFunc saves the
quantized q, k, v and, with delayed scaling, the fp8 output (memory.py [fa8], stack_db megatron
fp8_recipes fp8_attention). Time: the forward at cuDNN's FP8 rate over its bf16 one (FlashAttention-3
paper's FP8 forward figure, compute.py [7c]), the backward at the bf16 rate, q, k, v and the output
gradient cast at the recipe's bytes (step.fp8_core). No record in tests/data runs fp8 attention:
every figure here is derived by hand from code and the paper, none checked against a measurement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.cli.export import resolved_plan
from planner.compute import FP8_ATTN_FWD_SPEEDUP, fp8_attention_speedup
from planner.efficiencies import HBM_EFFICIENCY
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.step import _context, layer_times
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature

DATA = yaml.safe_load((Path(__file__).parent / "data" / "attention_kernels_h100.yaml").read_text())
FP8_SH = Path(__file__).parent / "data" / "trainer_configs" / "train_llama3_8b_h100_fp8.sh"
# Llama 3 8B (h 4096, a 32 query heads, k 8 KV heads, d 128, 32 layers) on one node, TP 1, one 8k sequence a
# micro-batch (T = 8192 tokens), no recompute, PP 1: every layer's activations of one micro-batch at the peak
JOB = dict(model="llama3-8b", gpus=8, stack="megatron", precision="fp8", seq_len=8192, global_batch=64,
           micro_batch=1, tp=1, pp=1, cp=1, recompute="none")
T, L, A, K, D = 8192, 32, 32, 8, 128
QKV = (A + 2 * K) * D  # q, k, v elements a token (TP 1: every head local): 6144
OUT = A * D  # the core output's: 4096


def _explain(explain, **kw):
    return explain(**{**JOB, **kw})[3]


@pytest.mark.parametrize("hw,recipe,per_token_layer", [
    # delayed: q, k, v 2 -> 1 B and the saved output 2 -> 1 B (the projection's own 1 B copy stays)
    ("h100-sxm", "delayed", QKV * 1.0 + OUT * 1.0),           # 10,240 B less a token a layer
    # current scaling (Blackwell only): q, k, v 2 -> 1 B, the output saved in bf16 as before
    ("b200", "tensorwise", QKV * 1.0),                        # 6,144 B less
    # MXFP8: q, k, v kept row- and column-wise with e8m0 scales, 2 x (1 + 1/32) = 2.0625 B: more than bf16
    ("b200", "mxfp8", QKV * (2.0 - 2.0625)),                  # 384 B MORE
])
def test_saved_bytes_by_recipe(explain, hw, recipe, per_token_layer):
    off = _explain(explain, hardware=hw, fp8_recipe=recipe)["memory"]["activations_bytes"]
    on = _explain(explain, hardware=hw, fp8_recipe=recipe, fp8_attention=True)["memory"]["activations_bytes"]
    assert off - on == pytest.approx(per_token_layer * T * L, rel=1e-12)


def test_delayed_figure_by_hand(explain):
    """10,240 B a token a layer x 8,192 tokens x 32 layers = 2,684,354,560 B (2.5 GiB) on Llama 3 8B."""
    off = _explain(explain, hardware="h100-sxm", fp8_recipe="delayed")["memory"]["activations_bytes"]
    on = _explain(explain, hardware="h100-sxm", fp8_recipe="delayed", fp8_attention=True)["memory"]["activations_bytes"]
    assert off - on == 2_684_354_560


def test_selective_recompute_keeps_the_bf16_checkpoint(explain):
    """Megatron's selective recompute checkpoints the core with its bf16 q, k, v: the layers' stored
    activations do not change; only the one re-run layer's buffer does (its output saved at 1 B)."""
    from planner.memory import layer_memory
    from planner.layers import context, layer_list

    rows = []
    for fa in (False, True):
        settings, plan, _ = resolve(Job(**{**JOB, "recompute": "selective", "fp8_recipe": "delayed", "fp8_attention": fa}))
        stored, buffers, _ = layer_memory(settings, plan, context(plan), layer_list(settings.model))
        rows.append((float(np.ravel(stored[0])[0]), float(np.ravel(buffers[0])[0])))
    assert rows[0][0] == rows[1][0]
    assert rows[0][1] - rows[1][1] == pytest.approx(OUT * 1.0 * T)  # the re-run's output, 2 -> 1 B


def test_speedup_is_the_paper_figure():
    """cuDNN FP8 / bf16 forward, means of the 2k-16k bars: head dim 128 (886 + 864 + 971 + 1005) / 4 =
    931.5 over 605.25 = 1.539; head dim 64 432.25 over 407 = 1.062; log2-linear between, held beyond."""
    fp8 = DATA["fp8_forward_tflops"]
    assert sum(fp8["cudnn"][2:]) / 4 == 931.5 and sum(fp8["cudnn_head_dim_64"][2:]) / 4 == 432.25
    assert list(FP8_ATTN_FWD_SPEEDUP) == pytest.approx([432.25 / 407.0, 931.5 / 605.25])
    assert fp8_attention_speedup(128) == pytest.approx(1.5390334572)
    assert fp8_attention_speedup(192) == fp8_attention_speedup(128)  # MLA's 192: held at 128's
    assert fp8_attention_speedup(2 ** 6.5) == pytest.approx((432.25 / 407 + 931.5 / 605.25) / 2)


def _times(fa: bool):
    settings, plan, _ = resolve(Job(**{**JOB, "hardware": "h100-sxm", "fp8_recipe": "delayed", "fp8_attention": fa}))
    return layer_times(_context(settings, plan, placed=False))


def test_time_forward_rate_and_casts():
    """The forward kernel 1.539x faster (compute.py [7c]); the backward unchanged (priced at the bf16
    rate, a named assumption); the casts at delayed scaling's 3 B an element (stack_db megatron
    cast_bytes_per_element): forward q, k, v 8,192 x 6,144 x 3 = 150,994,944 B, backward the output
    gradient 8,192 x 4,096 x 3 = 100,663,296 B, over h100-sxm's 3.35 TB/s x HBM_EFFICIENCY."""
    off, on = _times(False), _times(True)
    hbm = 3.35e12 * HBM_EFFICIENCY
    assert float(off.core_fwd[0] / on.core_fwd[0]) == pytest.approx(931.5 / 605.25)
    assert float(on.core_bwd[0]) == float(off.core_bwd[0])
    ew_on = on.fwd[0] - on.core_fwd[0] - on.gemm_fwd[0]
    ew_off = off.fwd[0] - off.core_fwd[0] - off.gemm_fwd[0]
    assert float(ew_on - ew_off) == pytest.approx(3.0 * T * QKV / hbm)
    assert float(on.bwd[0] - off.bwd[0]) == pytest.approx(3.0 * T * OUT / hbm)
    assert 150_994_944 == 3 * T * QKV and 100_663_296 == 3 * T * OUT


def test_step_is_faster_with_it(explain):
    off = _explain(explain, hardware="h100-sxm", fp8_recipe="delayed")
    on = _explain(explain, hardware="h100-sxm", fp8_recipe="delayed", fp8_attention=True)
    assert on["plan"]["fp8_attention"] is True and "fp8_attention" not in off["plan"]
    assert on["time"]["step_s"] < off["time"]["step_s"]


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("kw,needle", [
    (dict(precision="bf16"), "needs precision fp8"),
    (dict(stack="torchtitan", fp8_recipe="tensorwise", tp=1), "no fp8 attention with recipe tensorwise"),
    (dict(fp8_recipe="blockwise"), "no fp8 attention with recipe blockwise"),
    (dict(fp8_recipe="tensorwise"), "needs compute capability 10.0"),   # h100: TE's current scaling from sm100
    (dict(fp8_recipe="delayed", hardware="mi300x"), "needs compute capability 9.0"),  # no CUDA capability: no TE cuDNN
    (dict(fp8_recipe="delayed", attention="eager"), "needs Transformer Engine's fused attention"),
])
def test_refused(kw, needle):
    job = {**JOB, "hardware": "h100-sxm", "fp8_recipe": "delayed", **kw, "fp8_attention": True}
    if job["precision"] != "fp8":
        job.pop("fp8_recipe")
    with pytest.raises(PlannerError) as e:
        resolve(Job(**job))
    assert needle in str(e.value)


# ------------------------------------------------------------------ the reader and the export
def test_nvidia_fp8_script_does_not_set_it():
    cfg = load_trainer_config(FP8_SH)
    assert "fp8_attention" not in cfg.job
    assert not any("fp8-dot-product-attention" in x for x in cfg.ignored + cfg.not_modelled + cfg.assumed)


def _script(tmp_path, extra: str):
    text = FP8_SH.read_text()
    p = tmp_path / FP8_SH.name
    p.write_text(text.replace("--fp8-format hybrid", "--fp8-format hybrid " + extra, 1))
    assert extra in p.read_text()
    return load_trainer_config(p)


def test_reader_refuses_the_flag_as_megatron_does(tmp_path):
    """Megatron-LM @d98e8a64's parser has no --fp8-dot-product-attention (arguments.py l. 2333 excludes the field from
    the generated flags): argparse refuses the script, and so does the reader (before 2026-12-07 it read the flag as
    the job's fp8_attention, listing Megatron's refusal as assumed); the job field comes from --fp8-attention."""
    for extra in ("--fp8-dot-product-attention", "--fp8-recipe blockwise --fp8-dot-product-attention"):
        with pytest.raises(PlannerError) as e:
            _script(tmp_path, extra)
        assert str(e.value).endswith("--fp8-dot-product-attention: unrecognized argument (Megatron-LM's argparse "
                                     "refuses it, exit 2, before the run starts: neither Megatron-LM @d98e8a64 nor "
                                     "pretrain_gpt.py's extra_args_provider defines it)")
        assert "arguments.py @d98e8a64 l. 2333" in e.value.hint


def test_export_refuses_and_signature_has_it():
    job = Job(**{**JOB, "hardware": "h100-sxm", "fp8_recipe": "delayed", "fp8_attention": True})
    plan = resolved_plan(job)
    assert plan_signature(plan)["fp8_attention"] is True
    assert plan_signature(resolved_plan(job.model_copy(update={"fp8_attention": False})))["fp8_attention"] is None
    with pytest.raises(PlannerError) as e:
        export_plan(plan, "megatron")
    assert "arguments.py l. 2333" in str(e.value)
    # without it the plan exports as before
    text, _ = export_plan(resolved_plan(job.model_copy(update={"fp8_attention": False})), "megatron")
    assert "fp8-dot-product-attention" not in text


@pytest.mark.parametrize("hw,recipes,without", [
    ("h100-sxm", {"delayed"}, {"delayed", "tensorwise", "blockwise"}),
    ("b200", {"delayed", "tensorwise", "mxfp8"}, {"delayed", "tensorwise", "mxfp8"}),  # no blockwise on Blackwell anyway
])
def test_search_tries_only_recipes_with_an_fp8_attention_path(hw, recipes, without):
    """Without a pinned recipe the search tries the stack's recipes the GPU runs (space.variant_choices);
    with fp8_attention only those whose fp8 attention runs there (TE: current scaling and MXFP8 from
    sm100, blockwise none): on H100 delayed alone, where tensorwise and blockwise would otherwise be tried."""
    from planner.catalog import load_hardware, load_stack
    from planner.plan import FP8_RECIPE_CODES
    from planner.space import variant_choices

    names = {c: n for n, c in FP8_RECIPE_CODES.items()}
    job = {k: v for k, v in JOB.items() if k not in ("tp", "pp", "cp", "micro_batch")}
    st, h = load_stack("megatron"), load_hardware(hw)
    tried = lambda fa: {names[int(r)] for r in variant_choices(st, Job(**job, hardware=hw, fp8_attention=fa), "", h)[:, 3]}  # noqa: E731
    assert tried(True) == recipes and tried(False) == without
