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
