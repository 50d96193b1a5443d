"""Muon's TP mode across stacks in export (issue 21, muonleft): a plan records muon_tp_mode only where it is not its
stack's default (plan.plan_dict), and the stacks' defaults differ (megatron duplicated: Megatron-LM @d98e8a64
optimizer_config.py l. 282, arguments.py l. 2650-2651; megatron-bridge blockwise: Megatron-LM 905c0e386
optimizer_config.py l. 277-278). A megatron-bridge plan is written as Megatron-LM flags (stack_db megatron-bridge
export_format megatron), so without an explicit --muon-tp-mode the file ran Megatron-LM's duplicated mode while the plan
priced blockwise. The writers now spell the priced mode always (export.priced_muon_tp_mode), and plan_signature
compares the priced mode, not the recorded key."""

from __future__ import annotations

import json

from planner.trainers.export import plan_signature, priced_muon_tp_mode

JOB = ["--model", "llama3-8b", "--gpus", "8", "--optimizer", "muon", "--tp", "2", "--sharding", "none",
       "--no-tp-comm-overlap"]


def test_priced_mode():
    """The recorded mode, else the plan's stack's default; None without Muon."""
    assert priced_muon_tp_mode({"stack": "megatron", "optimizer": "muon"}) == "duplicated"
    assert priced_muon_tp_mode({"stack": "megatron-bridge", "optimizer": "muon"}) == "blockwise"
    assert priced_muon_tp_mode({"stack": "megatron-bridge", "optimizer": "muon", "muon_tp_mode": "duplicated"}) == \
        "duplicated"
    assert priced_muon_tp_mode({"stack": "megatron"}) is None


def test_bridge_plan_written_as_megatron_runs_blockwise(cli, tmp_path):
    """Llama 3 8B at tp 2 on megatron-bridge prices blockwise (no TP all-gather: tp_muon_gather_s 0, its plan without
    muon_tp_mode); export --format megatron writes --muon-tp-mode blockwise (before: nothing, Megatron-LM's duplicated),
    and the file read back on the megatron stack prices the same Newton-Schulz time and no gather, its plan recording
    blockwise (not megatron's default) with the same signature but the stack."""
    a = json.loads(cli("explain", *JOB, "--stack", "megatron-bridge", "--format", "json", "-q").stdout)
    assert "muon_tp_mode" not in a["plan"] and a["time"]["tp_muon_gather_s"] == 0.0
    out = tmp_path / "bridge_as_megatron.sh"
    r = cli("export", *JOB, "--stack", "megatron-bridge", "--format", "megatron", "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    assert "--muon-tp-mode blockwise" in out.read_text()
    b = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
    assert b["plan"]["stack"] == "megatron" and b["plan"]["muon_tp_mode"] == "blockwise"
    assert b["time"]["tp_muon_gather_s"] == 0.0
    assert b["time"]["muon_ns_s"] == a["time"]["muon_ns_s"]
    sa, sb = plan_signature(a["plan"]), plan_signature(b["plan"])
    assert sa["muon_tp_mode"] == sb["muon_tp_mode"] == "blockwise"


def test_megatron_default_written_and_read_back(cli, tmp_path):
    """A megatron plan at its default (duplicated, not recorded) is written with --muon-tp-mode duplicated and reads
    back as the same plan (no muon_tp_mode key, the same signature, the gather priced); a Bridge plan at its default
    is written with optimizer.muon_tp_mode=blockwise and reads back without the key."""
    out = tmp_path / "megatron.sh"
    assert cli("export", *JOB, "--stack", "megatron", "--format", "megatron", "-o", out, "-q").exit_code == 0
    assert "--muon-tp-mode duplicated" in out.read_text()
    a = json.loads(cli("explain", *JOB, "--stack", "megatron", "--format", "json", "-q").stdout)
    b = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
    assert "muon_tp_mode" not in b["plan"] and plan_signature(b["plan"]) == plan_signature(a["plan"])
    assert b["time"]["tp_muon_gather_s"] == a["time"]["tp_muon_gather_s"] > 0.0
    out = tmp_path / "bridge.sh"
    assert cli("export", *JOB, "--stack", "megatron-bridge", "--format", "megatron-bridge", "-o", out,
               "-q").exit_code == 0
    assert "    optimizer.muon_tp_mode=blockwise \\\n" in out.read_text()
    c = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
    assert "muon_tp_mode" not in c["plan"] and c["time"]["tp_muon_gather_s"] == 0.0
