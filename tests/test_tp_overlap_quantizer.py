"""TP communication overlap and the fp8 recipe (issue 22 ubfp8): which quantizers Transformer Engine's userbuffers
carry, and at which width.

NVIDIA/TransformerEngine @4329ff84 (TE 2.17.1, the release NVIDIA/Megatron-LM @d98e8a64 pyproject.toml l. 246 pins):

- transformer_engine/pytorch/module/base.py initialize_ub l. 311-334: 12 userbuffers of Megatron's shape [T, h]
  (T = micro_batch x seq / cp; megatron/training/initialize.py l. 219-228), the 8 of layers_all_gather_overlap with
  fp8_buf (l. 367) and add_ub's buffer_dtype (l. 431-435) uint8 where the quantization mode is FP8, the 4
  reduce-scatter ones (proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad) in the activation dtype (bf16). Megatron passes
  FP8 whenever --fp8-format is set (initialize.py l. 230-233: args.fp8, whatever --fp8-recipe), so delayed,
  tensorwise and mxfp8 hold (8 x 1 + 4 x 2) T h = 16 T h bytes, bf16 (8 x 2 + 4 x 2) = 24 T h.
- fill_userbuffers_buffer_for_all_gather l. 573-720 has quantized branches for Float8Quantizer /
  Float8CurrentScalingQuantizer (l. 623-644) and MXFP8Quantizer (l. 646-717) only; any other quantizer raises
  ValueError 'Unsupported quantizer for Userbuffers' (l. 720): blockwise (Float8BlockQuantizer) and nvfp4
  (NVFP4Quantizer; under Megatron's fp4 args.fp8 is None, so only the NONE set is registered and get_ub(name,
  fp8=True), l. 550-560, raises first). Start-up rule 106 MEGATRON_TP_OVERLAP_QUANTIZER.
- mxfp8 by release (planner/te_version.py, quantizers): up to v2.3 each TE linear raises NotImplementedError 'Comm+GEMM
  overlap is only supported with FP8 delayed scaling or per-tensor current scaling' under any other recipe (v2.3
  module/linear.py l. 149-155); ce0b46c4d ('MXFP8 support in Userbuffers' #1711, first tagged v2.4) added the MXFP8
  branch. The rule reads the run's release as memory.py [ub] does (job te_version, else the stack's 2.17.1).

Llama 3 405B (model_zoo: hidden 16,384), TP 8, SP, micro-batch 1, seq 8,192, cp 1: T = 8,192, T h = 134,217,728:
bf16 24 T h = 3,221,225,472 B (3 GiB); fp8 16 T h = 2,147,483,648 B (2 GiB), delayed and tensorwise on H100 and mxfp8
on B200 alike."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES

TH_405B = 8192 * 16384  # T h, 134,217,728
L405 = dict(model="llama3-405b", gpus=1024, tp=8, pp=16, sequence_parallel=True, stack="megatron", global_batch=1024,
            seq_len=8192, micro_batch=1, tp_comm_overlap=True)


def _fit_rows(cli, *args):
    """The ranked rows of `planner fit ... --format json` (exit 0 asserted)."""
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    return d["rows"] if isinstance(d, dict) else d


@pytest.mark.parametrize("hardware, precision, recipe, per_th", [
    ("h100-sxm", "bf16", None, 24),         # 12 x 2 B
    ("h100-sxm", "fp8", "delayed", 16),     # 8 x 1 B + 4 x 2 B
    ("h100-sxm", "fp8", "tensorwise", 16),
    ("b200", "fp8", "mxfp8", 16),
])
def test_userbuffers_width_per_recipe(explain, hardware, precision, recipe, per_th):
    """405B TP 8: the userbuffers term is per_th x T h (module docstring): 3,221,225,472 B in bf16, 2,147,483,648 B
    under each fp8 recipe Megatron runs with the overlap."""
    fields = dict(L405, hardware=hardware, precision=precision, **({"fp8_recipe": recipe} if recipe else {}))
    *_, out = explain(**fields)
    assert out["memory"]["terms"]["tp_overlap_buffers"] == per_th * TH_405B
    assert {24: 3_221_225_472, 16: 2_147_483_648}[per_th] == per_th * TH_405B


@pytest.mark.parametrize("stack", ["megatron", "megatron-bridge"])
@pytest.mark.parametrize("precision, recipe, hardware", [("fp8", "blockwise", "h100-sxm"), ("nvfp4", None, "b200")])
def test_refused_with_overlap_runs_without(stack, precision, recipe, hardware):
    """Rule 106 refuses the overlap (tp 8) with blockwise fp8 and nvfp4 on both Megatron stacks; the same plan
    without the overlap resolves, and tensorwise with it resolves (the rule can fail)."""
    assert CODES["MEGATRON_TP_OVERLAP_QUANTIZER"] == 106
    fields = dict(L405, stack=stack, hardware=hardware, precision=precision, **({"fp8_recipe": recipe} if recipe else {}))
    with pytest.raises(PlannerError, match="MEGATRON_TP_OVERLAP_QUANTIZER"):
        resolve(Job(**fields))
    resolve(Job(**{**fields, "tp_comm_overlap": False}))
    resolve(Job(**{**fields, "precision": "fp8", "fp8_recipe": "tensorwise", "hardware": "h100-sxm"}))


def test_explain_and_check_exit_2_naming_the_rule(cli, tmp_path):
    """explain of Llama 3 70B, tp 8, SP, --tp-comm-overlap, fp8 blockwise on 64 H100, and check of a Megatron argument
    file asking the same (a 4-layer GPT at TP 2, --fp8-format hybrid --fp8-recipe blockwise --tp-comm-overlap, 8 H100):
    exit 2, error and hint naming rule MEGATRON_TP_OVERLAP_QUANTIZER, TE's fill_userbuffers_buffer_for_all_gather and
    the fix; the file without --tp-comm-overlap passes check."""
    from tests.conftest import assert_one_error

    r = cli("explain", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--sequence-parallel", "--tp-comm-overlap",
            "--precision", "fp8", "--fp8-recipe", "blockwise", "--hardware", "h100-sxm", "--stack", "megatron")
    assert_one_error(r, "MEGATRON_TP_OVERLAP_QUANTIZER", "base.py fill_userbuffers_buffer_for_all_gather",
                     "--no-tp-comm-overlap")
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings "
            "1024 --micro-batch-size 1 --global-batch-size 8 --bf16 --tensor-model-parallel-size 2 --sequence-parallel "
            "--fp8-format hybrid --fp8-recipe blockwise")
    bad, ok = tmp_path / "bad.args", tmp_path / "ok.args"
    bad.write_text(args + " --tp-comm-overlap\n")
    ok.write_text(args + "\n")
    assert_one_error(cli("check", str(bad), "--gpus", "8", "--hardware", "h100-sxm"), "MEGATRON_TP_OVERLAP_QUANTIZER",
                     "'Unsupported quantizer for Userbuffers'", "drop --tp-comm-overlap")
    r = cli("check", str(ok), "--gpus", "8", "--hardware", "h100-sxm")
    assert r.exit_code == 0 and r.stdout.startswith("PASS"), r.stderr


@pytest.mark.parametrize("model, gpus, extra", [
    ("llama3-70b", "64", ()),
    ("deepseek-v3", "2048", ("--hardware", "h800-sxm", "--global-batch", "15360", "--seq-len", "4096",
                             "--trainer-date", "2025-04-23")),
])
def test_fit_ranks_no_overlapped_blockwise_row(cli, model, gpus, extra):
    """fit --precision fp8 --fp8-recipe blockwise on the megatron stack ranks no row with tp_comm_overlap (every row's
    plan says false); the tensorwise twin ranks overlapped rows at tp > 1, so the assertion can fail. DeepSeek-V3 is
    fitted with a trainer date before Megatron-LM's MLA switch (4e6ae3a2d2, 2025-04-24: the overlap off for MLA, so
    fit would not try it at all there: tests/test_mla_tp_overlap.py)."""
    hw = () if "--hardware" in extra else ("--hardware", "h100-sxm")
    base = ("fit", "--model", model, "--gpus", gpus, "--precision", "fp8", "--stack", "megatron", "--format", "json",
            "--top", "30", *hw, *extra)

    def rows(recipe):
        return _fit_rows(cli, *base, "--fp8-recipe", recipe)

    block = rows("blockwise")
    assert block and all(x["plan"]["fp8_recipe"] == "blockwise" for x in block)
    assert not any(x["plan"].get("tp_comm_overlap") for x in block)
    assert any(x["plan"].get("tp_comm_overlap") and x["plan"]["tp"] > 1 for x in rows("tensorwise"))


@pytest.mark.parametrize("stack", ["megatron", "megatron-bridge"])
def test_mxfp8_overlap_by_te_version(stack):
    """405B, tp 8, mxfp8 on B200 with the overlap: refused at te_version 2.3 (before ce0b46c4d's MXFP8 userbuffers
    branch, TE 2.4), naming the recipe and the release; resolved at te_version 2.4 and at the stack's own 2.17.1 (no
    te_version); at 2.3 without the overlap it resolves (the rule, not the release, refuses)."""
    fields = dict(L405, stack=stack, hardware="b200", precision="fp8", fp8_recipe="mxfp8")
    with pytest.raises(PlannerError, match=r"MEGATRON_TP_OVERLAP_QUANTIZER") as e:
        resolve(Job(**fields, te_version="2.3"))
    assert "fp8 recipe mxfp8 on Transformer Engine 2.3" in str(e.value)
    resolve(Job(**fields, te_version="2.4"))
    resolve(Job(**fields))
    resolve(Job(**{**fields, "tp_comm_overlap": False}, te_version="2.3"))
    # tensorwise with the overlap at 2.3: the per-tensor recipes pass there (v2.3 linear.py l. 149-151)
    resolve(Job(**{**fields, "fp8_recipe": "tensorwise", "hardware": "h100-sxm"}, te_version="2.3"))


def test_rule_and_memory_read_one_te_version():
    """The rule and memory.py [ub] read the run's release through te_version.run_te_version: the job's te_version,
    else the stack's memory.te_version (2.17.1 on megatron); a stack file cannot state defaults.te_version."""
    from planner.schema import StackDefaults
    from planner.catalog import load_stack
    from planner.te_version import run_te_version

    stack = load_stack("megatron")
    assert run_te_version(None, stack) == "2.17.1"
    assert run_te_version("2.3", stack) == "2.3"
    assert run_te_version(None, None) is None
    with pytest.raises(ValueError, match="defaults.te_version is the job's"):
        StackDefaults.model_validate({**stack.defaults.model_dump(), "te_version": "2.3"})


def test_fit_ranks_no_overlapped_mxfp8_row_before_te_2_4(cli):
    """fit of Llama 3 70B on 64 B200 with mxfp8 on the megatron stack: at te_version 2.3 no ranked row has the
    overlap (the variant rule masks those rows); at 2.4 overlapped rows at tp > 1 are ranked (so it can fail)."""
    base = ("fit", "--model", "llama3-70b", "--gpus", "64", "--precision", "fp8", "--fp8-recipe", "mxfp8",
            "--hardware", "b200", "--stack", "megatron", "--format", "json", "--top", "30")

    def rows(te):
        return _fit_rows(cli, *base, "--te-version", te)

    old = rows("2.3")
    assert old and all(x["plan"]["fp8_recipe"] == "mxfp8" for x in old)
    assert not any(x["plan"].get("tp_comm_overlap") for x in old)
    assert any(x["plan"].get("tp_comm_overlap") and x["plan"]["tp"] > 1 for x in rows("2.4"))
