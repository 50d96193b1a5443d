"""A sharding mode shown in its stack's own words (stack_db runs.sharding label, issue 22 mfsdp2): megatron's zero2 level
is Megatron-FSDP's optim_grads strategy (NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py
--data-parallel-sharding-strategy choices no_shard, optim, optim_grads, optim_grads_params), which shards the gradients
and reduce-scatters them after every micro-batch's backward: 'zero2' would read as DeepSpeed's ZeRO-2. fit's sharding
column and explain's plan line say 'Megatron-FSDP optim_grads'; the JSON plan keeps sharding 'zero2' and sharding_mode
'megatron_fsdp_optim_grads' and adds sharding_label beside them. A stack whose zero2 is ZeRO-2 (megatron-deepspeed)
keeps the level's name and no label."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from planner.catalog import load_stack
from planner.cli import app

JOB = ["--model", "llama3-8b", "--gpus", "8", "--hardware", "h100-sxm", "--global-batch", "16", "--seq-len", "4096",
       "--sharding", "zero2"]


def _run(*args):
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r


def test_stack_data_labels_the_megatron_fsdp_strategies_only():
    """megatron and megatron-bridge label their optim mode (the zero1 level's second, beside the distributed
    optimizer, issue 22 ux2), their optim_grads mode and their optim_grads_params mode (the fsdp level's first, beside
    torch FSDP2: tests/test_sharding_label_text.py), each by its --data-parallel-sharding-strategy choice
    (NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 3190-3192); no other mode of theirs, and no mode
    of megatron-deepspeed (DeepSpeed's own zero2) or torchtitan, carries a label."""
    for name in ("megatron", "megatron-bridge"):
        labels = {m.name: m.label for m in load_stack(name).runs.sharding if m.label}
        assert labels == {"megatron_fsdp_optim": "Megatron-FSDP optim",
                          "megatron_fsdp_optim_grads": "Megatron-FSDP optim_grads",
                          "megatron_fsdp_optim_grads_params": "Megatron-FSDP optim_grads_params"}, name
    for name in ("megatron-deepspeed", "torchtitan"):
        assert not [m.name for m in load_stack(name).runs.sharding if m.label], name


def test_json_keeps_the_level_and_adds_the_label():
    row = json.loads(_run("explain", *JOB, "--stack", "megatron", "--format", "json").stdout)
    p = row["plan"]
    assert (p["sharding"], p["sharding_mode"], p["sharding_label"]) == (
        "zero2", "megatron_fsdp_optim_grads", "Megatron-FSDP optim_grads")
    ds = json.loads(_run("explain", *JOB, "--stack", "megatron-deepspeed", "--format", "json").stdout)["plan"]
    assert ds["sharding"] == "zero2" and "sharding_label" not in ds


def test_explain_and_fit_tables_use_the_label():
    text = _run("explain", *JOB, "--stack", "megatron").output
    assert "  Megatron-FSDP optim_grads (level zero2), micro-batch" in text, text
    fit = _run("fit", *JOB, "--stack", "megatron", "--top", "2").output
    rows = [ln for ln in fit.splitlines() if ln.startswith("│")]
    assert len(rows) == 2 and all("Megatron-FSDP optim_grads" in ln and "zero2" not in ln for ln in rows), fit
    ds = _run("fit", *JOB, "--stack", "megatron-deepspeed", "--top", "1").output
    assert [ln for ln in ds.splitlines() if ln.startswith("│") and "zero2" in ln], ds


def test_megatron_fsdp_optim_is_shown_by_its_strategy():
    """--sharding megatron_fsdp_optim (Megatron-FSDP's optim strategy, level zero1): explain's plan line says
    'Megatron-FSDP optim (level zero1)' and the JSON plan keeps sharding 'zero1' beside the label; the zero1 level's
    other mode, the distributed optimizer, has no label (its plan line says zero1)."""
    job = JOB[:-1] + ["megatron_fsdp_optim", "--stack", "megatron"]
    assert "  Megatron-FSDP optim (level zero1), micro-batch" in _run("explain", *job).output
    p = json.loads(_run("explain", *job, "--format", "json").stdout)["plan"]
    assert (p["sharding"], p["sharding_mode"], p["sharding_label"]) == (
        "zero1", "megatron_fsdp_optim", "Megatron-FSDP optim")
    d = json.loads(_run("explain", *(JOB[:-1] + ["distributed_optimizer", "--stack", "megatron"]),
                        "--format", "json").stdout)["plan"]
    assert (d["sharding"], d["sharding_mode"]) == ("zero1", "distributed_optimizer") and "sharding_label" not in d
