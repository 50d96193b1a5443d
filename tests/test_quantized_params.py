"""Quantized parameters beyond the memory they save (memory.py [11]): the distributed
optimizer's weight all-gather moves them at their stored width (step.py [12]), and NVFP4
weights (Megatron --fp4-param-gather, the job's fp4_param_gather) are the same mechanism as
fp8's. Llama 3 8B: the 32 blocks' weight matrices are 6,979,321,856 of its 8,030,261,248
parameters (tests/test_memory_mechanisms.py LINEAR, P)."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.params import count_params
from planner.catalog import load_model
from planner.step import linear_share

P, LINEAR = 8_030_261_248, 6_979_321_856
SHARE = LINEAR / P
JOB = dict(model="llama3-8b", gpus=64, sharding="zero1", micro_batch=1, global_batch=128, seq_len=8192)


def test_linear_share_by_hand():
    """The dense parameters' linear share: the blocks' matrices over every parameter."""
    assert linear_share(count_params(load_model("llama3-8b"))) == pytest.approx(SHARE, rel=1e-15)


def _gather(explain, **job):
    """(bytes per parameter of the dense weight all-gather, seconds of DP traffic): the all-gather's
    size read back through the step's own gather_bytes."""
    from planner.step import _context, gather_bytes
    from planner.plan import ZERO1

    settings, plan, _, h = explain(**{**JOB, **job})
    sc = _context(settings, plan)
    return float(gather_bytes(sc, plan.sharding >= ZERO1, SHARE, SHARE)), h["time"]["dp_comm_s"]


def test_gather_bytes_by_recipe(explain):
    """bf16 weights gather at 2 B; fp8 parameters (tensorwise) the linears at 1 B: 2 - share;
    NVFP4 parameters at 0.5 B: 2 - 1.5 share; MXFP8 parameters through the gradient buffer, fp32
    by default on megatron (bytes_per_param 2 + 4 + 4 + 8): 2 + 2 share. Less DP traffic with
    fp8 parameters than without."""
    plain, t_plain = _gather(explain, precision="fp8")
    assert plain == 2.0
    fp8, t_fp8 = _gather(explain, precision="fp8", fp8_param_gather=True)
    assert fp8 == pytest.approx(2.0 - SHARE, rel=1e-12)
    assert t_fp8 < t_plain
    fp4, _ = _gather(explain, precision="nvfp4", fp4_param_gather=True, hardware="b200")
    assert fp4 == pytest.approx(2.0 - 1.5 * SHARE, rel=1e-12)
    mx, _ = _gather(explain, precision="fp8", fp8_recipe="mxfp8", fp8_param_gather=True, hardware="b200")
    assert mx == pytest.approx(2.0 + 2.0 * SHARE, rel=1e-12)
    # DDP: Megatron refuses fp8 parameters there (stack_db megatron runs.sharding ddp job_settings)
    with pytest.raises(PlannerError, match="sharding none: sharding mode ddp with fp8_param_gather true: stack megatron's "
                                           "trainer refuses it .*arguments.py validate_args l. 1095-1097"):
        _gather(explain, precision="fp8", fp8_param_gather=True, sharding="none")


def test_fp4_param_gather_memory_by_hand(explain):
    """NVFP4 weights are the linears' NVFP4 tensors (0.5 B + an E4M3 scale per 16 x 16 block) beside
    the rest in bf16, and TE keeps only their column-wise copies (0.5 + 1/256 B) on a B200."""
    _, _, _, h = explain(**JOB, precision="nvfp4", fp4_param_gather=True, hardware="b200")
    w = 0.5 + 1.0 / 256
    assert h["memory"]["terms"]["weights"] == pytest.approx(w * LINEAR + 2.0 * (P - LINEAR), rel=1e-12)
    assert h["memory"]["terms"]["quantized_weights"] == pytest.approx(w * LINEAR, rel=1e-12)
    assert h["plan"]["fp4_param_gather"] is True
    with pytest.raises(PlannerError, match="fp4_param_gather needs precision nvfp4"):
        explain(**JOB, precision="fp8", fp4_param_gather=True)
    with pytest.raises(PlannerError, match="no nvfp4 training recipe"):  # torchtitan: no NVFP4 at all
        explain(**{**JOB, "sharding": "fsdp"}, precision="nvfp4", fp4_param_gather=True, stack="torchtitan",
                hardware="b200")


def test_fp4_param_gather_read_and_exported(tmp_path):
    """--fp4-param-gather is read (not listed as not modelled) and written back by the export."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(**JOB, precision="nvfp4", fp4_param_gather=True, hardware="b200"))
    text, _ = export_plan(plan, "megatron")
    assert "--fp4-param-gather" in text
    p = tmp_path / "x.sh"
    p.write_text(text)
    cfg = load_trainer_config(p)
    assert cfg.job["fp4_param_gather"] is True
    assert not any("fp4-param-gather" in u for u in cfg.unmodelled + cfg.not_modelled)
