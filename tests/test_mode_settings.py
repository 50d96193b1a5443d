"""Job settings a sharding mode runs at one value only (stack_db runs.sharding job_settings,
schema.ModeSetting; issue 22): Megatron-LM @d98e8a64 refuses --use-torch-fsdp2 with the
gradient-accumulation fusion on (megatron/training/arguments.py validate_args l. 1040-1041; the
fusion is on unless --no-gradient-accumulation-fusion, l. 2944-2948), refuses --fp8-param-gather
without the distributed optimizer or an FSDP (l. 1095-1097), and turns --fp8-param-gather off
under --use-torch-fsdp2 with TE >= 2.0 (l. 1051-1057). A job breaking a refusal is refused with
the check named (exit 2, error and hint), `fit` never ranks the mode for it, and a job that leaves
the setting out runs, is priced and is exported as Megatron runs the mode."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.schema import Job, ShardingMode
from planner.search import fit
from planner.space import SpaceOptions
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan
from planner.trainers.rules import megatron_script_errors

FSDP2 = dict(model="llama3-8b", gpus=16, stack="megatron", sharding_mode="torch_fsdp2", global_batch=64, seq_len=4096)
FP8 = dict(model="llama3-8b", gpus=8, stack="megatron", precision="fp8", fp8_param_gather=True, global_batch=64,
           seq_len=4096)


def _yaml(tmp_path, name, fields):
    import yaml

    p = tmp_path / name
    p.write_text(yaml.safe_dump(fields), encoding="utf-8")
    return p


@pytest.mark.parametrize("setting, check", [
    ("gradient_accumulation_fusion", "l. 1040-1041: assert not args.gradient_accumulation_fusion, '--use-torch-fsdp2 is not "
                                     "supported with gradient accumulation fusion'"),
    # --fp16 (the job's fp16), until issue 22's audit caught only on exported scripts (rules.py TORCH_FSDP2)
    ("fp16", "l. 1046-1047: assert not args.fp16, '--use-torch-fsdp2 not supported with fp16 yet'"),
])
@pytest.mark.parametrize("command", ["explain", "check"])
def test_torch_fsdp2_with_a_refused_setting_is_refused_naming_megatrons_check(cli, tmp_path, command, setting, check):
    p = _yaml(tmp_path, "job.yaml", {**FSDP2, setting: True})
    r = cli(command, p)
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith(f"error: {p}: sharding mode torch_fsdp2 with {setting} true: stack megatron's trainer "
                               f"refuses it (NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py validate_args {check}")
    assert f"\nhint: leave {setting} out (the mode runs it false)" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_a_script_with_torch_fsdp2_and_megatrons_default_fusion_is_refused(cli, tmp_path):
    """A launch script that passes --use-torch-fsdp2 without --no-gradient-accumulation-fusion runs
    Megatron's default (the fusion on), which Megatron refuses: `check` refuses it the same way,
    and the transcribed start-up checks (planner/trainers/rules.py TORCH_FSDP2) agree."""
    text, _ = export_plan(resolved_plan(Job(**FSDP2)), "megatron")
    assert text.count("--no-gradient-accumulation-fusion") == 1 and megatron_script_errors(text) == []
    bad = tmp_path / "fsdp2_fused.sh"
    bad.write_text(text.replace("--no-gradient-accumulation-fusion", ""), encoding="utf-8")
    assert [k for k, _ in megatron_script_errors(bad.read_text())] == ["TORCH_FSDP2"]
    r = cli("check", bad)
    assert r.exit_code == 2 and "sharding mode torch_fsdp2 with gradient_accumulation_fusion true" in r.stderr
    assert "l. 1040-1041" in r.stderr and "Traceback" not in r.stderr


def test_torch_fsdp2_left_unset_runs_and_exports_the_fusion_off(explain, tmp_path):
    """Leaving gradient_accumulation_fusion out, the torch_fsdp2 plan is Megatron's: the plan says
    the fusion is off, the export writes --no-gradient-accumulation-fusion once and reads back as the
    same plan, and the figures are those of the job that says false: no TE dummy weight gradients
    (memory.py [dw], kept only with the fusion on), and no separate add kernel (under FSDP the
    unfused weight gradient is FSDP's own gradient path, step.py [11])."""
    s, _, _, unset = explain(**FSDP2)
    _, _, _, off = explain(**FSDP2, gradient_accumulation_fusion=False)
    assert unset["plan"]["gradient_accumulation_fusion"] is False and off["plan"]["gradient_accumulation_fusion"] is False
    assert unset["memory"] == off["memory"] and unset["time"] == off["time"]
    # Megatron-FSDP's optim_grads_params, the same FSDP traffic with the fusion on, keeps TE's cached
    # dummy weight gradients (memory.py [dw]): 2 B x each distinct weight shape of Llama 3 8B at tp 1,
    # qkv 6144 x 4096, proj 4096 x 4096, fc1 28672 x 4096, fc2 4096 x 14336, output 128256 x 4096
    _, _, _, mfsdp = explain(**{**FSDP2, "sharding_mode": "megatron_fsdp_optim_grads_params"})
    dummies = 2 * (6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336 + 128256 * 4096)
    assert dummies == 1_486_880_768
    # and its gradients wait in Megatron-FSDP's reduce-scatter queue (memory.py [rs]): fp32 buckets (the megatron
    # preset, g 4) of u = 218,112,000, k = floor(1e9 / u) = 4, m = 6, a = 570,949,632 B (no recompute; the attention
    # core's fp32 log-sum-exp, 4,096 x 32 heads x 4 B, among it: planner/layers/attention.py [ls]), less the
    # peak's fsdp_unit_grads 4 x 525,336,576 (the embedding, the largest unit; torch_fsdp2's too)
    queue = 24 * 218_112_000 - 5 * 570_949_632 - 4 * 525_336_576
    assert queue == 278_593_536 and mfsdp["memory"]["terms"]["zero2_reduce_input"] == queue
    # and Megatron-FSDP's all-gather prefetch (memory.py [pf]): the current layer unit and ceil(5e8 / u) = 3 prefetched
    # layers, 4 u, in place of torch_fsdp2's two largest units (2 E): 2 x (4 u - 2 E)
    prefetch = 2 * (4 * 218_112_000 - 2 * 525_336_576)
    assert prefetch == -356_450_304
    assert mfsdp["memory"]["terms"]["fsdp_gathered_units"] - unset["memory"]["terms"]["fsdp_gathered_units"] == prefetch
    # and its non-unit buckets kept gathered (memory.py [nu]): embedding, untied output layer, final norm, 2 B each
    ends = 2 * (2 * 525_336_576 + 4096)
    assert ends == 2_101_354_496 and mfsdp["memory"]["terms"]["fsdp_unsharded_ends"] == ends
    assert unset["memory"]["terms"]["fsdp_unsharded_ends"] == 0.0
    assert mfsdp["memory"]["allocated_bytes"] - unset["memory"]["allocated_bytes"] == dummies + queue + prefetch + ends
    assert unset["time"]["step_s"] == mfsdp["time"]["step_s"]
    plan = resolved_plan(Job(**FSDP2))
    text, _ = export_plan(plan, "megatron")
    p = tmp_path / "fsdp2.sh"
    p.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(p)
    assert cfg.job["sharding_mode"] == "torch_fsdp2" and "gradient_accumulation_fusion" not in cfg.job
    assert resolved_plan(Job(**{**cfg.job, "model": plan["model"]}))["gradient_accumulation_fusion"] is False


def test_fit_never_ranks_torch_fsdp2_for_a_job_with_the_fusion_on():
    """Pinned to torch_fsdp2 (fit ranks a mode priced like an earlier one only when pinned:
    tests/test_sharding_modes.py), the search ranks it for a job that leaves the fusion out and
    refuses a job that sets it on; searching every mode, that job gets none of its rows (the mode is
    left out, its refusal cited first in the stack's sources)."""
    job = {k: v for k, v in FSDP2.items() if k != "sharding_mode"}
    pin = SpaceOptions(tp=(1,), cp=(1,), pp=(1,), sharding=("torch_fsdp2",))
    free = fit(Job(**job), opts=pin, top=5)
    assert free.rows and {r["plan"]["sharding_mode"] for r in free.rows} == {"torch_fsdp2"}
    assert all(r["plan"]["gradient_accumulation_fusion"] is False for r in free.rows)
    with pytest.raises(PlannerError, match="sharding mode torch_fsdp2 with gradient_accumulation_fusion true"):
        fit(Job(**job, gradient_accumulation_fusion=True), opts=pin, top=5)
    fused = fit(Job(**job, gradient_accumulation_fusion=True), opts=SpaceOptions(tp=(1,), cp=(1,), pp=(1,)), top=200)
    assert fused.rows and "torch_fsdp2" not in {r["plan"]["sharding_mode"] for r in fused.rows}
    from planner.plan import stack_for_states
    from planner.catalog import load_stack

    runs = stack_for_states(Job(**job, gradient_accumulation_fusion=True), load_stack("megatron")).runs
    assert "torch_fsdp2" not in [m.name for m in runs.sharding]
    assert runs.sources[0].startswith("sharding mode torch_fsdp2 with gradient_accumulation_fusion true: stack megatron's "
                                      "trainer refuses it (NVIDIA/Megatron-LM @d98e8a64")


@pytest.mark.parametrize("command", ["explain", "check"])
def test_fp8_param_gather_under_ddp_is_refused(cli, tmp_path, command):
    p = _yaml(tmp_path, "job.yaml", {**FP8, "sharding_mode": "ddp"})
    r = cli(command, p)
    assert r.exit_code == 2, r.stdout
    assert ("sharding mode ddp with fp8_param_gather true: stack megatron's trainer refuses it (NVIDIA/Megatron-LM "
            "@d98e8a64 megatron/training/arguments.py validate_args l. 1095-1097") in r.stderr
    assert "'--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp, or inference " \
           "mode'" in r.stderr and "\nhint: " in r.stderr and "Traceback" not in r.stderr


def test_fp8_param_gather_plans_no_ddp():
    """A job with fp8 parameters and no sharding runs the stack's first mode that takes them (the
    distributed optimizer, listed as inherited), and fit never ranks DDP for it."""
    from planner.plan import resolve

    settings, plan, _ = resolve(Job(**FP8))
    assert ("sharding", "zero1") in settings.inherited
    r = fit(Job(**FP8), opts=SpaceOptions(tp=(1,), cp=(1,), pp=(1,), recompute=("none",)), top=50)
    assert r.rows and "ddp" not in {row["plan"]["sharding_mode"] for row in r.rows}
    with pytest.raises(PlannerError, match="sharding none: sharding mode ddp with fp8_param_gather true"):
        resolve(Job(**FP8, sharding="none"))


def test_fp8_param_gather_under_torch_fsdp2_is_priced_and_exported_off(explain, tmp_path):
    """Megatron turns --fp8-param-gather off under --use-torch-fsdp2: the job is priced with bf16
    weight gathers (the same figures as without it), warned, and exported without the flag."""
    from planner.plan import resolve

    job = {**FP8, "gpus": 16, "sharding_mode": "torch_fsdp2"}
    _, _, w = resolve(Job(**job))
    assert any(x.startswith("fp8_param_gather true under sharding mode torch_fsdp2: the trainer runs it false "
                            "(NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py validate_args l. 1051-1057")
               for x in w)
    _, _, _, on = explain(**job)
    _, _, _, off = explain(**{**job, "fp8_param_gather": False})
    assert "fp8_param_gather" not in on["plan"]
    assert on["memory"] == off["memory"] and on["time"] == off["time"]
    text, _ = export_plan(resolved_plan(Job(**job)), "megatron")
    assert "--fp8-param-gather" not in text and megatron_script_errors(text) == []
    p = tmp_path / "fsdp2_fp8.sh"
    p.write_text(text.replace("--use-torch-fsdp2", "--use-torch-fsdp2 --fp8-param-gather"), encoding="utf-8")
    cfg = load_trainer_config(p)
    assert "fp8_param_gather" not in cfg.job
    assert any(a.startswith("fp8_param_gather=false: Megatron runs sharding mode torch_fsdp2 so") for a in cfg.assumed)


def test_a_mode_may_fix_a_setting_only_where_it_is_priced_so():
    """The schema refuses a mode that would run a setting other than the job's default below FSDP
    (the cost models read those settings per job and price neither under FSDP), a setting listed
    twice, and an unknown one (extra fields forbidden)."""
    src = "NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py"
    base = dict(name="m", spelling="--m", sources=["x"])
    fsdp2 = dict(setting="gradient_accumulation_fusion", value=False, other="refused", source=src)
    assert ShardingMode(**base, level="fsdp", job_settings=[fsdp2]).job_settings[0].value is False
    with pytest.raises(ValidationError, match="priced per job below FSDP"):
        ShardingMode(**base, level="zero1", job_settings=[fsdp2])
    # refusing the other value keeps the job's default: any level (Megatron's DDP and --fp8-param-gather)
    ddp = dict(setting="fp8_param_gather", value=False, other="refused", source=src)
    assert ShardingMode(**base, level="none", job_settings=[ddp])
    with pytest.raises(ValidationError, match="priced per job below FSDP"):
        ShardingMode(**base, level="none", job_settings=[{**ddp, "other": "overridden"}])
    with pytest.raises(ValidationError, match="listed twice"):
        ShardingMode(**base, level="fsdp", job_settings=[fsdp2, fsdp2])
    with pytest.raises(ValidationError):
        ShardingMode(**base, level="fsdp", job_settings=[{**fsdp2, "setting": "bias_dropout_fusion"}])
    with pytest.raises(ValidationError):
        ShardingMode(**base, level="fsdp", job_settings=[{**fsdp2, "why": "x"}])
