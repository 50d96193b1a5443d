"""partition_activations at tp 1 (issue 22 ux2). The job field exists only on the megatron-deepspeed stacks (stack_db
runs.partition_activations: DeepSpeed activation checkpointing's --partition-activations; Megatron-LM's own
--distribute-saved-activations is no stack's job field, and its assert tensor_model_parallel_size > 1, NVIDIA/Megatron-LM
@d98e8a64 megatron/training/arguments.py l. 1410-1413, is checked on trainer files by trainers/rules.py RECOMPUTE).
DeepSpeed has no such assert: microsoft/DeepSpeed @38327e07 deepspeed/runtime/activation_checkpointing/checkpointing.py
get_partition_size l. 258-262 keeps numel / mp_size = the whole input at mp_size 1, and gather_partitioned_activations
l. 280-286 skips the all-gather where mp_size == 1; microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py asserts
nothing of --partition-activations (l. 1526; its l. 356-358 assert is --distribute-saved-activations'). So a tp 1 row is
a plan the trainer runs, priced as without the setting (memory.py [pa]: input / tp, tp 1; step.py tp_comm: an all-gather
over 1 rank) and no start-up rule is added; the row's plan carries no partition_activations (as cp_load_balance at
cp 1), so `fit --export` at tp 1 reads back as the same plan (it failed: 'partition_activations: True priced, None read
back', the reader leaving the flag out at tp 1), and explain says the setting prices nothing there."""
from __future__ import annotations

import json

JOB = ["--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed", "--global-batch", "64",
       "--seq-len", "4096"]


def test_fit_rows_carry_it_only_at_tp_above_1(cli):
    r = cli("fit", *JOB, "--partition-activations", "--top", "400", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    by_tp = {(x["plan"]["tp"], x["plan"].get("partition_activations")) for x in rows}
    assert (1, None) in by_tp and (1, True) not in by_tp
    assert {tp for tp, pa in by_tp if tp > 1} and all(pa is True for tp, pa in by_tp if tp > 1)


def test_explain_tp1_warns_and_prices_as_without(cli):
    args = [*JOB, "--tp", "1", "--recompute", "full", "--format", "json"]
    on = cli("explain", *args, "--partition-activations")
    off = cli("explain", *args)
    assert on.exit_code == 0 and off.exit_code == 0, on.stderr
    a, b = json.loads(on.stdout), json.loads(off.stdout)
    assert "partition_activations" not in a["plan"]
    assert (a["memory"]["total_bytes"], a["time"]["step_s"]) == (b["memory"]["total_bytes"], b["time"]["step_s"])
    assert a["warnings"] == ["partition_activations at tp 1: nothing to split (DeepSpeed @38327e07 "
                             "activation_checkpointing/checkpointing.py l. 258-262, 280-286: the whole input kept, no "
                             "all-gather at model-parallel size 1), so it prices nothing here and an exported file does "
                             "not carry it"]
    assert b["warnings"] == []
    # at tp 2 the setting is kept and priced: the kept inputs halve, so the memory differs
    on2 = json.loads(cli("explain", *JOB, "--tp", "2", "--recompute", "full", "--format", "json",
                         "--partition-activations").stdout)
    off2 = json.loads(cli("explain", *JOB, "--tp", "2", "--recompute", "full", "--format", "json").stdout)
    assert on2["plan"]["partition_activations"] is True
    assert on2["memory"]["total_bytes"] < off2["memory"]["total_bytes"]


def test_fit_export_at_tp1_reads_back(cli, tmp_path):
    out = tmp_path / "run.sh"
    r = cli("fit", *JOB, "--partition-activations", "--tp", "1", "--top", "1", "--export", "megatron-deepspeed",
            "--output", str(out))
    assert r.exit_code == 0, r.stderr
    assert "--partition-activations" not in out.read_text()
