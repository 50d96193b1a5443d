"""The cliends pass (2026-12-07): the small CLI defects the audit5 new-user pass left (a bare `planner`, a zero-size
collective, csv headers, `pipeline --format`, `check --tokens`, a budget sweep with counts that cannot run, a budget
or explain of a plan above HBM). One test per defect, each failing before its fix."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conftest import assert_one_error


# ------------------------------------------------------------ a bare `planner`
def test_a_bare_planner_prints_the_command_list_on_stdout_and_exits_0(cli):
    # before: click's no_args_is_help printed the list on stderr and exited 2 with no `error:` line
    bare, helped = cli(), cli("--help")
    assert bare.exit_code == 0 and bare.stderr == ""
    assert bare.stdout == helped.stdout
    assert "  fit         Rank every way to split a model" in bare.stdout


# ------------------------------------------------------------ a zero-size collective
@pytest.mark.parametrize("op", ["all-reduce", "reduce-scatter", "all-gather"])
def test_a_zero_size_collective_is_refused_as_nccl_returns_at_once(cli, op):
    # before: all-reduce --size 0 on 8 ranks priced 14 ring rounds of 3.40 us, 47.6 us, for a call NCCL returns from
    # before making a task (src/enqueue.cc @b6475625 taskAppend l. 1865)
    assert_one_error(cli("collective", "--op", op, "--size", "0", "-n", "8"),
                     f"zero-count {op}", "taskAppend l. 1865", "--size 1GiB")


def test_a_zero_byte_send_recv_is_still_priced_as_one_round(cli):
    # NCCL enqueues a zero-count send / recv (the early return skips ncclFuncSend / ncclFuncRecv): one NVLink round
    r = cli("collective", "--op", "send-recv", "--size", "0", "-n", "2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["rounds"] == 1 and res["time_s"] == pytest.approx(3.4e-6)


# ------------------------------------------------------------ csv: one header whatever rows carry
def _header(text: str) -> list[str]:
    return next(csv.reader(io.StringIO(text)))


def test_csv_columns_do_not_depend_on_which_row_comes_first():
    from planner.render.common import to_csv

    plain = {"plan": {"tp": 1, "sharding": "fsdp", "sharding_mode": "torch_fsdp2", "shard_group": 8}, "mfu": 0.5}
    labelled = {"plan": {"tp": 2, "sharding": "fsdp", "sharding_mode": "megatron_fsdp_optim_grads_params",
                         "sharding_label": "Megatron-FSDP optim_grads_params", "shard_group": 4}, "mfu": 0.4}
    want = ["plan.tp", "plan.sharding", "plan.sharding_mode", "plan.sharding_label", "plan.shard_group", "mfu"]
    # before: [plain, labelled] put plan.sharding_label after mfu, [labelled, plain] after plan.sharding_mode
    assert _header(to_csv([plain, labelled])) == want
    assert _header(to_csv([labelled, plain])) == want
    rows = list(csv.DictReader(io.StringIO(to_csv([plain, labelled]))))
    assert rows[0]["plan.sharding_label"] == "" and rows[1]["plan.sharding_label"] == "Megatron-FSDP optim_grads_params"


def test_fit_csv_puts_the_sharding_label_beside_the_mode_when_the_first_row_has_none(cli):
    args = ["fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron", "--global-batch", "64", "--seq-len",
            "4096", "--format", "csv"]
    one, two = cli(*args, "--top", "1"), cli(*args, "--top", "2")
    assert one.exit_code == 0 and two.exit_code == 0, two.stderr
    rows = list(csv.DictReader(io.StringIO(two.stdout)))
    # the top row is torch_fsdp2 (no stack_db label), the second Megatron-FSDP (labelled)
    assert [r["plan.sharding_mode"] for r in rows] == ["torch_fsdp2", "megatron_fsdp_optim_grads_params"]
    assert [r["plan.sharding_label"] for r in rows] == ["", "Megatron-FSDP optim_grads_params"]
    cols = _header(two.stdout)
    assert cols[cols.index("plan.sharding_mode") + 1] == "plan.sharding_label"
    assert [c for c in cols if c != "plan.sharding_label"] == _header(one.stdout)


# ------------------------------------------------------------ pipeline --format
def test_pipeline_json_gives_the_simulation(cli):
    # before: `planner pipeline` had no --format (no such option, exit 2)
    r = cli("pipeline", "--pp", "4", "--microbatches", "8", "--closed-form", "--format", "json")
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)
    # 1F1B, p 4, m 8, T_F 1, T_B 2: step (m + p - 1)(T_F + T_B) = 33, each stage busy 8 x 3 = 24, bubble 9 / 24
    assert (res["schedule"], res["pp"], res["microbatches"], res["step_units"]) == ("1f1b", 4, 8, 33.0)
    assert res["bubble"] == 0.375 and res["closed_form"]["bubble"] == 0.375
    assert [s["peak_stored"] for s in res["stages"]] == [4.0, 3.0, 2.0, 1.0] == res["closed_form"]["peak_stored"]
    assert [s["busy_units"] for s in res["stages"]] == [24.0] * 4
    assert len(res["passes"]) == 4 * 8 * 2  # a forward and a backward per stage and micro-batch
    first = res["passes"][0]
    assert (first["stage"], first["kind"], first["microbatch"], first["start_units"], first["end_units"]) == (
        0, "F", 0, 0.0, 1.0)


def test_pipeline_csv_is_one_line_a_stage_and_yaml_parses(cli):
    import yaml

    r = cli("pipeline", "--pp", "2", "--microbatches", "4", "--schedule", "gpipe", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    # GPipe, p 2, m 4: step (m + p - 1)(T_F + T_B) = 15; stage 0 holds all 4 micro-batches, as does stage 1
    assert [(x["stage"], x["peak_stored"], x["step_units"]) for x in rows] == [("0", "4.0", "15.0"),
                                                                               ("1", "4.0", "15.0")]
    y = cli("pipeline", "--pp", "2", "--microbatches", "4", "--format", "yaml")
    assert y.exit_code == 0, y.stderr
    res = yaml.safe_load(y.stdout)  # 1F1B: the same step, 15, but stage 0 holds min(m, p) = 2 and stage 1 one
    assert (res["step_units"], [s["peak_stored"] for s in res["stages"]]) == (15.0, [2.0, 1.0])
    assert "closed_form" not in res


def test_pipeline_table_is_unchanged_by_the_format_option(cli):
    r = cli("pipeline", "--pp", "2", "--microbatches", "4", "--schedule", "gpipe")
    assert r.exit_code == 0
    assert r.stdout == ("GPipe\n  stage 0: 0123...aabbccdd   peak stored: 4\n  stage 1: .0123aabbccdd..   peak stored: 4\n"
                        "  step takes 15 units, each stage busy 12: idle 20% of the time\n")


# ------------------------------------------------------------ check --tokens
def test_check_tokens_prints_the_runs_days_and_gpu_hours_as_explain_does(cli, tmp_path):
    # before: `check JOB --tokens 1T` printed nothing of the tokens (only its JSON had the figures): a flag that
    # looked ignored. 1e12 tokens / (2,048 x 8,192 tokens a step) = 59,604.6 steps
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 16\nsharding: fsdp\n", encoding="utf-8")
    r = cli("check", job, "--tokens", "1T")
    assert r.exit_code == 0, r.stderr
    ex = cli("explain", "--model", "llama3-8b", "--gpus", "16", "--sharding", "fsdp", "--tokens", "1T", "-f", "json")
    thr = json.loads(ex.stdout)["throughput"]
    assert thr["training_steps"] == pytest.approx(1e12 / (2048 * 8192))
    line = r.stdout.splitlines()[1]
    assert line == (f"  training for 1e+12 tokens: 59,605 steps, {thr['training_days']:,.1f} days, "
                    f"{thr['gpu_hours']:,.0f} GPU-hours (failure-free; see `planner budget`)")
    assert thr["gpu_hours"] == pytest.approx(thr["training_days"] * 24 * 16)
    plain = cli("check", job)
    assert "training" not in plain.stdout  # without tokens no line


# ------------------------------------------------------------ budget --sweep-gpus with a count that cannot run
def test_a_sweep_prices_the_counts_that_run_and_names_the_one_left_out(cli):
    # the audit's command: llama3-70b's default plan (TP 1, global batch 2,048, micro-batch 1) cannot run on 4,096
    # GPUs (dp 4,096 does not divide 2,048 sequences); before, the whole sweep failed, exit 2
    r = cli("budget", "--model", "llama3-70b", "--tokens", "15T", "--sweep-gpus", "512..4096", "--format", "csv")
    assert r.exit_code == 1, r.stderr  # priced, but the default plan (TP 1, no sharding) fits at none of the counts
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(x["gpus"], x["dp"], x["skipped"]) for x in rows[:3]] == [("512", "512", ""), ("1024", "1024", ""),
                                                                     ("2048", "2048", "")]
    assert rows[3]["gpus"] == "4096" and rows[3]["days"] == ""
    assert rows[3]["skipped"] == "global batch 2,048 sequences does not divide into dp=4096 x micro_batch=1"
    assert rows[3]["hint"] == "use a global batch that is a multiple of 4096, or change micro_batch / the mesh"
    assert [x["fits"] for x in rows[:3]] == ["False"] * 3
    assert r.stderr.splitlines() == [
        "warning: --sweep-gpus 4,096 left out: global batch 2,048 sequences does not divide into dp=4096 x "
        "micro_batch=1 (use a global batch that is a multiple of 4096, or change micro_batch / the mesh)",
        "warning: the plan does not fit at any count priced (512, 1024, 2048 GPUs): it cannot run, so these days and "
        "costs are of no run (exit 1). Find plans that fit with `planner fit --model llama3-70b --gpus 512,1024,2048 "
        "--format json > fit.json`, then budget one with `planner budget --from-fit fit.json --row 1 --tokens "
        "1.5e+13`"]
    table = cli("budget", "--model", "llama3-70b", "--tokens", "15T", "--sweep-gpus", "512..4096")
    assert table.exit_code == 1 and "\n2,048  1x1x1x2048" in table.stdout and "4,096" not in table.stdout


def test_a_sweep_that_fits_somewhere_exits_0_and_none_that_runs_exits_2(cli):
    base = ("budget", "--model", "llama3-70b", "--tp", "8", "--sharding", "fsdp", "--tokens", "15T", "--mc-runs", "0")
    r = cli(*base, "--sweep-gpus", "2048,2050", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["gpus"], x["dp"], x["fits"]) for x in rows] == [(2048, 256, True), (2050, None, None)]
    assert rows[1]["skipped"].startswith("tp=8 x cp=1 x pp=1 = 8 does not divide --gpus 2050")
    assert_one_error(cli(*base, "--sweep-gpus", "2050,4100"), "the plan runs at none of the counts: 2,050: tp=8",
                     "4,100: tp=8")


# ------------------------------------------------------------ budget of a plan that does not fit
def test_budget_of_a_plan_that_does_not_fit_says_so_and_exits_1(cli, tmp_path):
    # the audit's command: llama3-8b's default plan on 8 GPUs, 190.5 GB a GPU; before: a warning and exit 0
    r = cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tokens", "1T", "--mc-runs", "0", "--format", "json")
    assert r.exit_code == 1
    res = json.loads(r.stdout)  # the budget is still printed
    assert res["fits"] is False and res["training"]["steps"] == pytest.approx(1e12 / (2048 * 8192))
    want = ("the plan does not fit: 190.5 GB per GPU against 76.4 GB usable (249% of it; `planner explain` with the "
            "same options shows where the memory goes): it cannot run, so these days and costs are of no run (exit "
            "1). Find plans that fit with `planner fit --model llama3-8b --gpus 8 --format json > fit.json`, then "
            "budget one with `planner budget --from-fit fit.json --row 1 --tokens 1e+12`")
    assert res["warnings"] == [want] and r.stderr.splitlines() == [f"warning: {want}"]
    # the flow the warning gives: fit's JSON, then budget --from-fit of its first row, which fits
    fit = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--format", "json")
    assert fit.exit_code == 0
    saved = tmp_path / "fit.json"
    saved.write_text(fit.stdout, encoding="utf-8")
    b = cli("budget", "--from-fit", saved, "--row", "1", "--tokens", "1e+12", "--mc-runs", "0", "--format", "json")
    assert b.exit_code == 0, b.stderr
    got = json.loads(b.stdout)
    assert got["fits"] is True and got["warnings"] == []
    # the saved row's tokens is null: --tokens replaces nothing (before: "the command line replaces the file's None")
    assert "replaces" not in b.stderr
    assert got["training"]["step_s"] == pytest.approx(json.loads(fit.stdout)[0]["time"]["step_s"], rel=1e-12)


# ------------------------------------------------------------ explain of a plan above HBM
def test_explain_of_a_plan_above_hbm_exits_0_and_says_it_does_not_fit(cli, tmp_path):
    # decided and documented (README, exit codes): explain is the breakdown of why; check is the gate (exit 1)
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8")
    assert r.exit_code == 0
    assert "  does not fit: 224.3% of 79.1 GiB HBM (measured, as CUDA reports it)" in r.stdout
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\n", encoding="utf-8")
    gate = cli("check", job)
    assert gate.exit_code == 1 and gate.stdout.startswith(f"FAIL {job}: llama3-8b on 8 x h100-sxm: 177.4 GiB")
