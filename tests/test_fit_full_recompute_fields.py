"""fit with a job's full-recompute settings (plan.FULL_ONLY_FIELDS: recompute_layers, Megatron's block window, and
partition_activations, DeepSpeed's TP-split checkpoint inputs). The search's one-GPU probe (space.settings_for) runs
at recompute none, where plan._check_job_options refuses them: the probe leaves them out and lays them on its
Settings after, and the search prices recompute full only (space.recompute_choices), since Megatron-LM refuses a
--recompute-method at granularity selective (NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py
l. 1425-1427) and the window means nothing without full recompute. From the CLI, `fit CONFIG --recompute full`
keeps the file's window in every row (fit_config.fixed_by_pins), and a command-line recompute other than full
drops it with a note (cli/core.command_line_recompute), so a row's `explain CONFIG` command runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.schema import Job
from planner.search import explain_args, fit, row_job
from planner.space import SpaceOptions

JOB = dict(model="llama3-8b", gpus=8, recompute="full", recompute_layers=2, global_batch=64, seq_len=4096)
SCRIPT = "tests/data/trainer_configs/train_llama3_8b.sh"  # NVIDIA's Llama 3 8B script: TP 2, 8 GPUs, 32 layers
FLAG = "    --tensor-model-parallel-size $TP_SIZE"


def test_api_fit_prices_the_jobs_window_in_every_row():
    """The brief's reproduction (it raised 'recompute_layers needs recompute full (got none)' from the probe). Every
    row runs recompute full with the job's window: at pp 1 a stage is the model's 32 layers, of which the block
    method re-runs the first 2 (memory.recompute_fraction: min(32, 2) / 32 = 0.0625), and each row prices as
    `planner explain` of its own job (row_job) does, whose command names --recompute-layers 2."""
    from planner.explain import evaluate, to_json
    from planner.memory import recompute_fraction
    from planner.plan import resolve

    r = fit(Job(**JOB), [8], top=3)
    assert r.warnings == ["recompute_layers 2: a setting of full recompute only, so every plan searched runs recompute full"]
    assert len(r.rows) == 3
    for row in r.rows:
        p = row["plan"]
        assert (p["recompute"], p["recompute_layers"]) == ("full", 2)
        assert row["warnings"] == []
        settings, plan, _ = resolve(row_job(Job(**JOB), row))
        again = to_json(settings, plan, evaluate(settings, plan))
        assert again["memory"]["total_bytes"] == row["memory"]["total_bytes"]
        assert again["time"]["step_s"] == row["time"]["step_s"]
        share = float(np.asarray(recompute_fraction(settings, plan)).ravel()[0])
        assert share == (2 / 32 if p["pp"] == 1 else share)
        args = explain_args(Job(**JOB), row)
        assert args[args.index("--recompute-layers") + 1] == "2"
    assert r.rows[0]["plan"]["pp"] == 1 and share == 0.0625
    # the uniform method (no window) re-runs every layer: the top row without it is another price
    uniform = fit(Job(**{**JOB, "recompute_layers": None}), [8], SpaceOptions(recompute=("full",)), top=1).rows[0]
    assert uniform["plan"]["recompute_layers"] is None and "--recompute-layers" not in explain_args(Job(**JOB), uniform)


def test_api_fit_refuses_a_window_the_search_cannot_honour():
    """A --recompute pin naming another granularity, and a job whose own recompute is not full: exit-2 errors naming
    the field and the fix (no row would price the window)."""
    with pytest.raises(PlannerError) as e:
        fit(Job(**{k: v for k, v in JOB.items() if k != "recompute"}), [8], SpaceOptions(recompute=("none", "full")))
    assert e.value.message.startswith("--recompute none,full: the job's recompute_layers 2 is full recompute's")
    assert "arguments.py l. 1425-1427" in e.value.message
    assert e.value.hint == "use --recompute full, or leave --recompute out, or remove recompute_layers"
    with pytest.raises(PlannerError) as e:
        fit(Job(**{**JOB, "recompute": "selective"}), [8])
    assert e.value.message == "recompute_layers needs recompute full (got selective)"
    assert e.value.hint == "set recompute: full, or remove recompute_layers"


def test_cli_partition_activations_searches_full_recompute(cli):
    """`fit --partition-activations` (a field option, planner/field_options.py) reached the same probe and was
    refused ('with recompute none there are none'): now every row runs full recompute with it."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed", "--partition-activations",
            "--tp", "2", "--global-batch", "64", "--seq-len", "4096", "--top", "2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)  # (fit --model: a list of rows)
    assert [(x["plan"]["recompute"], x["plan"]["partition_activations"]) for x in rows] == [("full", True)] * 2
    assert "warning: partition_activations: a setting of full recompute only, so every plan searched runs recompute full" in r.stderr
    # a stack without the option is refused before the search, as explain refuses it (plan._check_stack_option_fields)
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron", "--partition-activations",
            "--global-batch", "64", "--seq-len", "4096")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert ("error: partition_activations is set but stack megatron does not split the checkpointed layer inputs over "
            "the TP ranks") in r.stderr


def _script(tmp_path):
    text = open(SCRIPT).read()
    assert FLAG in text
    path = tmp_path / "train.sh"
    path.write_text(text.replace(FLAG, FLAG + " --recompute-granularity full --recompute-method block --recompute-num-layers 2"))
    return path


def test_cli_fit_config_with_recompute_full_keeps_the_files_window(cli, tmp_path):
    """A Megatron script with --recompute-method block --recompute-num-layers 2 (vpp 1: recompute_layers 2 x 1 = 2,
    trainers/megatron.py). Without --recompute, fit searches the recompute (the file's recompute and window listed as
    searched over); with --recompute full the window is kept in every row, said, and the row's explain command names
    it and prices the same."""
    path = _script(tmp_path)
    from conftest import fit_table_and_rows

    # one search: the table and the rows --format json prints; the JSON run's notes are the table run's (conftest)
    t, rows = fit_table_and_rows(cli, path, "--top", "1", "--recompute", "full")
    r = t
    assert r.exit_code == 0, r.stderr
    row = rows[0]
    assert (row["plan"]["recompute"], row["plan"]["recompute_layers"]) == ("full", 2)
    assert (f"note: {path}: the file's own recompute_layers=2 is kept in every row, as a count of a stage's layers: "
            "the command line's --recompute full fixes full recompute") in r.stderr
    line = next(ln for ln in t.stdout.splitlines() if "row 1 in full:" in ln)
    assert "--recompute-layers 2" in line and "it keeps the file's" not in line
    args = line.split("planner explain ", 1)[1].split()
    e = cli("explain", *args, "--format", "json")
    assert e.exit_code == 0, e.stderr
    d = json.loads(e.stdout)
    assert (d["memory"]["total_bytes"], d["time"]["step_s"]) == (row["memory"]["total_bytes"], row["time"]["step_s"])


def test_cli_recompute_none_drops_the_files_window(cli, tmp_path):
    """Flags beat file values: `explain CONFIG --recompute none` (a fit row's command) was refused with
    'recompute_layers needs recompute full (got none)'; now the file's window is dropped with a note, and fit's
    row of recompute none no longer says its command keeps it."""
    path = _script(tmp_path)
    e = cli("explain", path, "--recompute", "none", "--format", "json")
    assert e.exit_code == 0, e.stderr
    assert json.loads(e.stdout)["plan"]["recompute_layers"] is None
    assert ("recompute_layers: the file's 2 is not kept: full recompute's, and the command line's recompute none "
            "re-runs no whole layer") in e.stderr
    r = cli("fit", path, "--top", "1")
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "row 1 in full:" in ln)
    assert "--recompute none" in line and "it keeps the file's recompute_layers" not in line
    searched = next(ln for ln in r.stderr.splitlines() if "fit searches the plan" in ln)
    assert "recompute=full, sequence_parallel=true" in searched and "recompute_layers=2 (searched" not in searched


def test_cli_fit_config_note_says_the_window_is_dropped(cli, tmp_path):
    """fit's 'searched over' note listed the file's recompute_layers among the axes it searches, but the search job
    drops it (fit_config.PLAN_FIELDS, kept only under --recompute full: fixed_by_pins): its rows of full recompute
    re-run every layer of a stage (schema Job.recompute_layers' default, all). The note now says so, and the rows of
    full recompute under --recompute full,selective (the window not pinned) carry no recompute_layers."""
    path = _script(tmp_path)
    r = cli("fit", path, "--top", "3000", "--recompute", "full,selective", "--format", "json")
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "fit searches the plan" in ln)
    assert line.endswith("; the file's recompute_layers=2 (full recompute's block window) is dropped from the search: "
                         "its rows of full recompute re-run every layer of a stage (--recompute full keeps it in every "
                         "row)"), line
    assert "recompute=full (searched within the command line's --recompute full,selective), sequence_parallel" in line
    rows = json.loads(r.stdout)["rows"]
    full = [x["plan"]["recompute_layers"] for x in rows if x["plan"]["recompute"] == "full"]
    assert full and set(full) == {None}
    # pinned: kept, and the searched-over note no longer mentions the window at all
    k = cli("fit", path, "--top", "1", "--recompute", "full")
    assert k.exit_code == 0, k.stderr
    assert "recompute_layers=2 (full recompute's block window) is dropped" not in k.stderr
