"""A CP load balancer torch's cp_shard does not build (issue 22 cpbal; found by fuzz13 seed 104, newest-fields chunk 1
input 41): start-up rule 105 TORCHTITAN_CP_LOAD_BALANCER_NAME, read from the job field cp_load_balancer, which keeps the
name the trainer config states.

Sources:
  main @e347b1e5e torchtitan/config/job_config.py l. 431 (context_parallel_load_balancer: str | None = "headtail"),
      __post_init__ l. 439-444 ("" refused at start-up); torchtitan/distributed/context_parallel.py cp_shard l. 184-211:
      `if load_balancer_type:` headtail / ptrr, `case _:` ValueError "Invalid load_balancer_type '...'. Must be one of:
      'headtail', 'ptrr', or None" (l. 207-211); train.py l. 469-477 calls it (prepare_context_parallel_input) only
      under parallel_dims.cp_enabled. TOML has no null: the string "None" reaches cp_shard as a name.
  0.3.0 release/0.3 @4f9e9a47d config/configs.py l. 235 (the same field); distributed/context_parallel/api.py cp_shard
      l. 218-264 (the raise l. 260-264); trainer.py l. 750-759 (only under cp_enabled). On its command line the word
      None is None (tyro), no load balancing (tests/test_cp_balance.py).
Hand cases (llama3-8b on 8 H100, the fuzz input: torchtitan 0.3 llama3_8b, tensor_parallel_degree 2, local batch 1,
seq 8192, context_parallel_degree 1, `--parallelism.context_parallel_load_balancer nosuch`, its
--debug.spmd_typechecking dropped where noted): at cp 1 cp_shard never runs, so the run trains: the name is listed as
ignored and kept as the job's; a plan at cp 2 (fit's CP rows, or --cp 2) stops in the first step: fit ranks cp 1 rows
only (before: its rows 2 and 3 were cp 2, whose reproduce lines exit 2), explain / check at --cp 2 exit 2 naming the
rule and the name. With headtail in its place the same fit ranks cp 2 rows (so the rule, not the space, drops them).
"""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_error, resolve_verdict
from planner.catalog import load_stack
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, rules_for
from planner.trainers import load_trainer_config

RULE = "TORCHTITAN_CP_LOAD_BALANCER_NAME"
MAIN_SRC = "torchtitan/distributed/context_parallel.py cp_shard l. 184-211"
HINT = "name headtail (the default) or ptrr"
BASE = dict(model="llama3-8b", gpus=8, global_batch=8, seq_len=8192, sharding="fsdp", stack="torchtitan",
            hardware="h100-sxm")
# the fuzz input (tmp/fuzz13/k104/inputs/newest-fields-1-41.sh), its lines as they were
LAUNCH = ("#!/usr/bin/bash\n# llama3_8b (torchtitan release/0.3 @4f9e9a47d torchtitan/models/llama3/config_registry.py "
          "l. 184-216) on one node\nset -ex\nMODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh \\\n"
          "  --parallelism.tensor_parallel_degree 2 \\\n  --training.local_batch_size 1 \\\n"
          "  --metrics.log_freq 10{typecheck} --parallelism.context_parallel_load_balancer {name}\n")


def _launch(tmp_path, name: str = "nosuch", typecheck: bool = False):
    p = tmp_path / f"run-{name}-{int(typecheck)}.sh"
    p.write_text(LAUNCH.format(name=name, typecheck=" --debug.spmd_typechecking" if typecheck else ""))
    return p


def _verdict(**job):
    return resolve_verdict(**{**BASE, **job})


def test_code_and_the_stacks_that_list_it():
    """Code 105 (FIXED_CODE_RULES); listed where the stack names CP load balancers (runs.cp_load_balancers: both
    torchtitan stacks), never on Megatron-LM's."""
    assert CODES[RULE] == 105
    for st in ("torchtitan", "torchtitan-0.3"):
        assert RULE in {r.key for _, r in rules_for(load_stack(st))}
    assert RULE not in {r.key for _, r in rules_for(load_stack("megatron"))}


@pytest.mark.parametrize("job, rule", [
    (dict(cp=2, cp_load_balancer="nosuch"), RULE),        # cp_shard's `case _:` raises
    (dict(cp=2, cp_load_balancer="None"), RULE),          # the string None (main's TOML): a name, raises alike
    (dict(cp=4, cp_load_balancer="zigzag"), RULE),
    (dict(cp=1, cp_load_balancer="nosuch"), None),        # cp_shard never runs at cp 1
    (dict(cp=2, cp_load_balancer="headtail"), None),      # a name it builds
    (dict(cp=2, cp_load_balancer="ptrr", attention_backend="flex"), None),
    (dict(cp=2, cp_load_balancer="nosuch", stack="torchtitan-0.3"), RULE),
])
def test_the_rule_by_hand(job, rule):
    m = _verdict(**job)
    if rule is None:
        assert m is None, m
    else:
        assert m is not None and f"breaks start-up rule {rule}" in m and MAIN_SRC in m
        assert f"context_parallel_load_balancer {job['cp_load_balancer']!r}" in m  # the rule's detail: the job's name


def test_job_field_checks():
    """A stack without the option still refuses any name (plan.apply_startup_switches); "" is no name (torchtitan
    refuses it at start-up: the readers say so; the job field's min_length); at cp 1 resolve says it is ignored."""
    m = _verdict(stack="megatron", sharding="zero1", cp=2, cp_load_balancer="nosuch")
    assert m is not None and "cp_load_balancer nosuch is set but stack megatron has no option" in m
    with pytest.raises(ValueError, match="cp_load_balancer"):
        Job(**{**BASE, "cp_load_balancer": ""})
    warnings = resolve(Job(**{**BASE, "cp": 1, "cp_load_balancer": "nosuch"}))[2]
    assert "cp_load_balancer nosuch ignored at cp 1 (no sequence split: nothing to balance)" in warnings


def test_fit_masks_cp_rows():
    """fit over cp 1 and 2 with the name: every cp 2 candidate breaks the rule (counted under it), cp 1 rows rank; with
    headtail the same space ranks cp 2 rows (the rule is what drops them)."""
    opts = SpaceOptions(tp=(1,), pp=(1,), cp=(1, 2))
    res = fit(Job(**{**BASE, "cp_load_balancer": "nosuch"}), opts=opts, top=200)
    assert res.rows and {r["plan"]["cp"] for r in res.rows} == {1}
    assert RULE in " ".join(res.counts.reasons)
    res = fit(Job(**{**BASE, "cp_load_balancer": "headtail"}), opts=opts, top=200)
    assert {r["plan"]["cp"] for r in res.rows} == {1, 2}


def test_the_fuzz_input(cli, tmp_path):
    """The 0.3 launch at cp 1 (no --debug.spmd_typechecking): the reader keeps nosuch as the job's and lists it as
    ignored at cp 1; fit ranks only cp 1 rows (its JSON), where the name of a built balancer gives cp 2 rows; explain and
    check at --cp 2 (a CP row's reproduce line) exit 2 naming the rule, the name and the hint; explain at the file's
    cp 1 runs."""
    p = _launch(tmp_path)
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["cp"] == 1 and cfg.job["cp_load_balancer"] == "nosuch"
    assert any(i.startswith("parallelism.context_parallel_load_balancer=nosuch (context_parallel_degree 1: never read")
               and RULE in i for i in cfg.ignored)
    r = cli("fit", str(p), "--top", "100", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert {row["plan"]["cp"] for row in json.loads(r.stdout)["rows"]} == {1}
    r = cli("fit", str(_launch(tmp_path, "headtail")), "--top", "100", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert 2 in {row["plan"]["cp"] for row in json.loads(r.stdout)["rows"]}
    for cmd in ("explain", "check"):
        assert_one_error(cli(cmd, str(p), "--cp", "2"), f"breaks start-up rule {RULE}", "'nosuch'", HINT,
                         "api.py cp_shard l. 218-264")
    r = cli("explain", str(p), "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["cp"] == 1


def test_the_fuzz_input_passes_the_fuzz_check(tmp_path):
    """The fuzz input as it was (with --debug.spmd_typechecking, whose rule 89 refuses the file's own selective plan) and
    without: recent_check on fit (every ranked row's reproduce line priced again by explain: before, row 2's, at cp 2,
    exited 2), explain and check."""
    from typer.testing import CliRunner

    from fuzzing import recent_check
    from planner.cli import app

    for typecheck in (True, False):
        p = _launch(tmp_path, typecheck=typecheck)
        for args in (["fit", str(p), "--top", "2", "--format", "json"], ["explain", str(p), "--format", "json"],
                     ["check", str(p), "--format", "json"]):
            r = CliRunner().invoke(app, args)
            assert r.exit_code in (0, 1, 2) and "Traceback" not in r.stderr
            assert recent_check(args, r) is None, (args, r.stderr[-400:])
        if not typecheck:
            assert r.exit_code == 0, r.stderr


def test_main_toml_none_string(cli, tmp_path):
    """main's TOML "None" is the string 'None' (no null in TOML): at cp 1 the job keeps it and fit ranks no cp 2 row; at
    cp 2 refused by the rule, its hint giving the command line's None."""
    p = tmp_path / "tt.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
                 '[parallelism]\ncontext_parallel_degree = 1\ncontext_parallel_load_balancer = "None"\n')
    cfg = load_trainer_config(p, gpus=8, hardware="h100-sxm")
    assert cfg.job["cp_load_balancer"] == "None" and "cp_load_balance" not in cfg.job
    r = cli("fit", str(p), "--gpus", "8", "--hardware", "h100-sxm", "--top", "100", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert {row["plan"]["cp"] for row in json.loads(r.stdout)["rows"]} == {1}
    assert_one_error(cli("explain", str(p), "--gpus", "8", "--hardware", "h100-sxm", "--cp", "2"),
                     f"breaks start-up rule {RULE}", "'None'", MAIN_SRC,
                     "--parallelism.context_parallel_load_balancer None")


def test_flags_over_the_files_name(cli, tmp_path):
    """The command line's balancer replaces the file's name (flags beat files, noted): --cp-load-balancer headtail at
    --cp 2 runs; --no-cp-load-balance at --cp 2 runs unbalanced (the file's name dropped, noted: cli/core.py)."""
    p = _launch(tmp_path)
    r = cli("explain", str(p), "--cp", "2", "--cp-load-balancer", "headtail", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert "cp_load_balancer=headtail: the command line replaces the file's nosuch" in r.stderr
    r = cli("explain", str(p), "--cp", "2", "--no-cp-load-balance", "-f", "json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["cp_load_balance"] is False and "cp_load_balancer" not in plan
    assert "the command line replaces the file's load balancer nosuch (no load balancing)" in r.stderr
