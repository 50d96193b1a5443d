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
