"""issue 21 (dsstep): the optimizer DeepSpeed steps under Megatron-DeepSpeed, and its step's temporaries
(planner/memory.py [opt]; stack_db/megatron-deepspeed.yaml memory.optimizer_step_temporaries).

Megatron-DeepSpeed @f4157bea megatron/optimizer/__init__.py builds apex FusedAdam on a CUDA accelerator (l. 3-9,
96-105; DeepSpeed's FusedAdam with --ds_fused_adam) and hands it bare to deepspeed.initialize (l. 115-116;
training.py l. 573, 606-614); DeepSpeed @38327e07 engine.py _configure_optimizer (l. 1355-1366) takes a client
optimizer as the basic optimizer, so the JSON's optimizer section (torch_adam or not) builds none. Both FusedAdams
are multi-tensor kernels: no parameter-sized temporary at the step, on every mode of the stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import load_stack
from planner.errors import PlannerError
from planner.trainers import load_trainer_config
from planner.trainers.deepspeed import CLIENT_OPTIMIZER

DATA = Path(__file__).parent / "data" / "trainer_configs"
MDS = DATA / "run_deepspeed_example.sh"
ZERO2 = DATA / "ds_config_zero2.json"
# Llama 3 8B: P parameters
P = 8_030_261_248


def test_stack_runs_fused_only():
    mem = load_stack("megatron-deepspeed").memory
    assert mem.optimizer_step_temporaries == {"fused": 0.0}
    assert mem.optimizer_default == "fused"


@pytest.mark.parametrize("sharding, fp16", [("none", True), ("zero1", False), ("zero2", False), ("fsdp", False)])
def test_fused_is_the_default_and_prices_nothing(explain, sharding, fp16):
    """Every mode of the stack (zero0's FP16_Optimizer at stage 0 with fp16, ZeRO-1/2, ZeRO-3) resolves to the
    stack's fused optimizer; stating it changes no figure, and the step's moment holds no temporary: at ZeRO-2 on 8
    GPUs, b 1, s 1,024, full recompute, the step's excess is [sg]'s copies (step_grad_copies), optimizer_step 0."""
    job = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding=sharding, micro_batch=1, global_batch=8,
               seq_len=1024, recompute="full", **({"fp16": True} if fp16 else {}))
    s, _, _, plain = explain(**job)
    _, _, _, stated = explain(**job, optimizer_implementation="fused")
    assert s.optimizer_implementation == "fused"
    assert stated["memory"] == plain["memory"]
    assert plain["memory"]["terms"]["optimizer_step"] == 0.0
    assert "optimizer_implementation" not in plain["plan"]  # the stack's default: the resolved plan as before


def test_zero2_step_moment_is_the_copies_alone(explain):
    """ZeRO-2, Llama 3 8B on 8 GPUs, s 1,024, full recompute (memory.py [sg]: 2 P + 20 L at the step against
    2 P + 14 L + one layer at the backward's peak): the fused step adds no 4 B x L temporary, so the step's excess is
    step_grad_copies alone and optimizer_step is 0; a foreach AdamW's exp_avg_sq_sqrt (4 B x L = 3.74 GiB, L = P / 8)
    would have made the moment 2 P + 24 L."""
    _, _, _, j = explain(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="zero2", micro_batch=1,
                         global_batch=8, seq_len=1024, recompute="full")
    t = j["memory"]["terms"]
    assert t["optimizer_step"] == 0.0 and t["step_grad_copies"] > 0.0


def test_foreach_refused_on_the_stack(explain):
    with pytest.raises(PlannerError, match=r"optimizer_implementation foreach is not one stack megatron-deepspeed runs "
                                           r"\(stack_db megatron-deepspeed memory.optimizer_step_temporaries: fused\)"):
        explain(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="zero2", optimizer_implementation="foreach")


def test_foreach_refused_from_the_command_line(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed", "--sharding", "zero2",
            "--optimizer-implementation", "foreach")
    assert r.exit_code == 2
    out = r.stdout + r.stderr
    assert "error:" in out and "hint:" in out and "Traceback" not in out


@pytest.mark.parametrize("section", [
    {"type": "AdamW", "params": {"lr": 3e-4, "torch_adam": True}},
    {"type": "Adam", "params": {"torch_adam": True, "adam_w_mode": False}},
    {"type": "Lamb", "params": {"lr": 1e-3}},
])
def test_json_optimizer_section_builds_nothing(tmp_path, section):
    """The JSON's optimizer section, torch_adam or another type, is listed as ignored with why (the client optimizer
    Megatron-DeepSpeed passes wins); nothing about it is listed as not modelled, and the job is the same."""
    data = json.loads(ZERO2.read_text())
    base = load_trainer_config(ZERO2, model="llama3-8b", gpus=8)
    p = tmp_path / "ds_config.json"
    p.write_text(json.dumps({**data, "optimizer": section}))
    cfg = load_trainer_config(p, model="llama3-8b", gpus=8)
    said = [x for x in cfg.ignored if x.startswith("optimizer=")]
    assert said == [f"optimizer={json.dumps(section, separators=(',', ':'))} ({CLIENT_OPTIMIZER})"]
    assert not any(x.startswith("optimizer") for x in cfg.not_modelled)
    assert cfg.job == base.job and "optimizer_implementation" not in cfg.job


def _variant(tmp_path, extra: str) -> Path:
    text = MDS.read_text()
    assert "    --fp16 \\" in text
    p = tmp_path / "run.sh"
    p.write_text(text.replace("    --fp16 \\", f"    --fp16 {extra} \\"))
    return p


def test_mds_optimizer_flags(tmp_path):
    """--ds_fused_adam (DeepSpeed's FusedAdam for apex's) is read and ignored; --cpu_torch_adam is read only with
    --cpu-optimizer (l. 83-86), whose not-modelled line then names torch.optim.AdamW; neither is unknown."""
    cfg = load_trainer_config(_variant(tmp_path, "--ds_fused_adam"), gpus=8)
    assert any(x.startswith("--ds_fused_adam (DeepSpeed's FusedAdam in place of apex's") for x in cfg.ignored)
    cfg = load_trainer_config(_variant(tmp_path, "--cpu_torch_adam"), gpus=8)
    assert any(x.startswith("--cpu_torch_adam (read only with --cpu-optimizer") for x in cfg.ignored)
    cfg = load_trainer_config(_variant(tmp_path, "--cpu-optimizer --cpu_torch_adam"), gpus=8)
    assert any(x.startswith("--cpu-optimizer (the optimizer on the host, torch.optim.AdamW") for x in cfg.unmodelled)
    cfg = load_trainer_config(_variant(tmp_path, "--cpu-optimizer"), gpus=8)
    assert any(x.startswith("--cpu-optimizer (the optimizer on the host, DeepSpeedCPUAdam") for x in cfg.unmodelled)
    for extra in ("--ds_fused_adam", "--cpu-optimizer --cpu_torch_adam"):
        cfg = load_trainer_config(_variant(tmp_path, extra), gpus=8)
        assert not any("unknown" in x for x in cfg.not_modelled + cfg.unmodelled), extra
