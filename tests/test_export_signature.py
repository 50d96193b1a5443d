"""export.plan_signature, what a file read back must reproduce (fit --export's check_readback): a setting no file
of a plan can hold and that prices nothing is no part of it."""

from __future__ import annotations

from planner.cli.export import _settings_plan, check_readback
from planner.explain import to_json
from planner.schema import Job
from planner.trainers.export import export_plan, plan_signature


def _row(**kw) -> dict:
    return to_json(*_settings_plan(Job.model_validate(kw)))


def test_one_stage_runs_no_schedule():
    """Qwen3-30B-A3B on 16 GPUs at EP 8, pp 1, a job's schedule zb-h1 (job-fields fuzz seed 84 chunk 2 input 22): one
    pipeline stage runs no schedule, so explain prices it as 1f1b to the byte and the second (same step time and memory
    total); the Megatron script written at pp 1 names no schedule (Megatron-LM has no zb-h1 flag) and read back is 1f1b:
    the same plan, where check_readback refused it ("schedule: 'zb-h1' priced, '1f1b' read back"). At pp 2 the
    schedule stays in the signature."""
    job = dict(model="qwen3-30b-a3b", gpus=16, ep=8, sharding="zero1", recompute="full", global_batch=32, seq_len=4096,
               stack="megatron")
    zb, one = _row(**job, schedule="zb-h1"), _row(**job, schedule="1f1b")
    assert zb["plan"]["schedule"] == "zb-h1" and zb["plan"]["pp"] == 1
    assert zb["memory"]["total_bytes"] == one["memory"]["total_bytes"] and zb["time"] == one["time"]
    assert plan_signature(zb["plan"])["schedule"] is None
    text, _ = export_plan(zb["plan"], "megatron")
    check_readback(zb, "megatron", text)
    two = _row(**dict(job, gpus=32), pp=2)
    assert plan_signature(two["plan"])["schedule"] == two["plan"]["schedule"] == "1f1b"


def test_offload_runs_the_precision_aware_optimizer():
    """Qwen3-30B-A3B on Megatron with offload_optimizer cpu and precision_aware_optimizer left out (job-fields fuzz
    seed 85 chunk 1 input 10): the Megatron script carries --use-precision-aware-optimizer beside
    --optimizer-cpu-offload (Megatron-LM @d98e8a64 arguments.py l. 1884-1888 requires it) and reads back as
    precision_aware_optimizer true, which prices the same memory and step time as the job's unset field (te_master is
    off under offload either way, plan.py); check_readback refused it ("None priced, True read back")."""
    job = dict(model="qwen3-30b-a3b", gpus=16, ep=8, sharding="zero1", recompute="full", global_batch=32, seq_len=4096,
               stack="megatron", offload_optimizer="cpu")
    unset, on = _row(**job), _row(**job, precision_aware_optimizer=True)
    assert unset["plan"].get("precision_aware_optimizer") is None
    assert unset["memory"]["total_bytes"] == on["memory"]["total_bytes"] and unset["time"] == on["time"]
    assert plan_signature(unset["plan"])["precision_aware_optimizer"] is True
    text, _ = export_plan(unset["plan"], "megatron")
    assert "--use-precision-aware-optimizer" in text and "--optimizer-cpu-offload" in text
    check_readback(unset, "megatron", text)
