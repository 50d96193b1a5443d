"""`planner fit`'s own options (planner/cli/fit.py): bad input is exit 2 with one `error:` line and a `hint:` line,
no traceback."""

from __future__ import annotations

import pytest
from conftest import assert_one_error

FIT = ("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1")


@pytest.mark.parametrize("option, value", [("--rank-orders", ","), ("--rank-orders", ""), ("--rank-orders", " "),
                                           ("--sharding", ","), ("--recompute", ""), ("--schedule", " , ")])
def test_an_empty_name_list_is_refused(cli, tmp_path, option, value):
    """A pin of names with no name in it is bad input, as `--tp ,` is ('--tp is empty'). Found by probing the
    options beside the cli-options fuzz kind: `fit ... --rank-orders ,` (or '') raised ValueError ('attempt to get
    argmax of an empty sequence': no rank order searched, space.order_choices of ()); `--sharding ,`, `--recompute ''`
    and `--schedule ,` searched the whole axis, the pin dropped silently. The same through fit JOB.yaml (its pins)."""
    r = cli(*FIT, option, value)
    assert_one_error(r, f"{option} is empty")
    assert f"hint: give {option} as a name or a comma list, e.g. {option} " in r.stderr
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\n")
    assert_one_error(cli("fit", str(job), "--top", "1", option, value), f"{option} is empty")


def test_a_name_list_with_an_empty_item_keeps_its_names(cli):
    """`--rank-orders tp-cp-dp-pp,` (a trailing comma) pins the one order, as `--tp 8,` pins TP 8."""
    import json

    r = cli(*FIT, "--rank-orders", "tp-dp-cp-pp,", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)[0]["plan"]["rank_order"] == "tp-dp-cp-pp"


@pytest.mark.parametrize("extra", [(), ("--explain", "2"), ("--export", "megatron")])
def test_a_top_below_1_is_refused_as_typed(cli, extra):
    """`--top -5` is refused naming -5 (before: 'got 0', the max of --top and --explain that search.fit is given), and
    `--top -5 --explain 2` is refused too (before: it ran, the bad --top dropped silently). Found probing the
    options beside the cli-options fuzz kind."""
    assert_one_error(cli(*FIT[:-2], "--top", "-5", *extra), "--top must be at least 1, got -5")


def test_export_with_explain_is_refused_and_a_format_is_said_unused(cli, tmp_path):
    """--export writes row 1's trainer config on stdout, --explain N prints row N's breakdown there: given both, fit
    refuses (before: the export was written and --explain dropped silently). A --format other than the default
    table is said to be unused with --export (the file is the trainer's own format), and the export still written."""
    r = cli(*FIT, "--export", "megatron", "--explain", "2")
    assert_one_error(r, "--export writes row 1 as a trainer config and --explain 2 prints a row's breakdown: give one")
    out = tmp_path / "out.sh"
    r = cli(*FIT, "--export", "megatron", "--format", "json", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert "warning: --format json is not used with --export: the file is a megatron config" in r.stderr
    assert "--tensor-model-parallel-size" in out.read_text()


@pytest.mark.parametrize("orders, first", [("TP-INNER", None), ("tp-innermost", None), ("ALL", None),
                                           ("TP-DP-CP-PP", "tp-dp-cp-pp")])
def test_rank_orders_read_alike_with_a_job_file(cli, tmp_path, orders, first):
    """`fit JOB.yaml --rank-orders X` reads X as `fit --model ...` does (space.order_choices: any case, tp-innermost):
    a keyword pins nothing, one order pins the file's plan, lowercased. Before: the keywords in another case, and
    tp-innermost, were pinned as the job's rank_order and refused ('rank_order 'TP-INNER' must name tp, cp, pp and
    dp'), though the same option without a job file searched. Found probing the options beside the cli-options kind."""
    import json

    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\n")
    for args in ((str(job),), ("--model", "llama3-8b", "--gpus", "8")):
        r = cli("fit", *args, "--top", "1", "--rank-orders", orders, "--format", "json")
        assert r.exit_code == 0, r.stderr
        data = json.loads(r.stdout)
        rows = data["rows"] if isinstance(data, dict) else data
        assert first is None or rows[0]["plan"]["rank_order"] == first


@pytest.mark.parametrize("pin,bound,named", [
    (["--tp", "8", "--max-tp", "4"], "8 is above the bound", ("--tp 8", "--max-tp 4")),
    (["--tp", "2,8", "--max-tp", "4"], "8 is above the bound", ("--tp 2,8", "--max-tp 4")),
    (["--pp", "4,8", "--max-pp", "2"], "4, 8 are above the bound", ("--pp 4,8", "--max-pp 2")),
    (["--cp", "2", "--max-cp", "1"], "2 is above the bound", ("--cp 2", "--max-cp 1")),
    (["--dp", "8", "--max-dp", "4"], "8 is above the bound", ("--dp 8", "--max-dp 4")),
    (["--vpp", "2", "--max-vpp", "1"], "2 is above the bound", ("--vpp 2", "--max-vpp 1")),
    (["--micro-batch", "2", "--max-micro-batch", "1"], "2 is above the bound", ("--micro-batch 2", "--max-micro-batch 1")),
])
def test_fit_pin_above_its_bound_exits_2_naming_both(cli, pin, bound, named):
    """`fit --tp 8 --max-tp 4` searched nothing and exited 1 ('no plan fits', 0 candidates); a list with one value
    above the bound (`--tp 2,8 --max-tp 4`) dropped 8 without a word. Both are contradictory input: exit 2 naming the
    pin and the bound (cli/fit._pins_within_bounds, every pin / --max-* pair in one place)."""
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "8", *pin), *named, bound)


def test_fit_pin_at_its_bound_still_searches(cli):
    """A pin equal to its bound is no contradiction: `--tp 4 --max-tp 4` ranks TP 4 rows."""
    import json

    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--tp", "4", "--max-tp", "4", "--top", "1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)[0]["plan"]["tp"] == 4


@pytest.mark.parametrize("option,value,dup,what", [
    ("--tp", "4,4", "4", "value"), ("--cp", "2,1,2", "2", "value"), ("--pp", "1,1", "1", "value"),
    ("--vpp", "1,1", "1", "value"), ("--dp", "2,2", "2", "value"), ("--micro-batch", "1,2,1", "1", "value"),
    ("--ep", "1,1", "1", "value"), ("--etp", "1,1", "1", "value"), ("--shard-group", "2,2", "2", "value"),
    ("--sharding", "zero1,ZERO1", "zero1", "name"), ("--recompute", "full,full", "full", "name"),
    ("--schedule", "1f1b,1f1b", "1f1b", "name"), ("--rank-orders", "tp-cp-dp-pp,tp-cp-dp-pp", "tp-cp-dp-pp", "name"),
])
def test_fit_list_option_value_listed_twice_exits_2_as_gpus_does(cli, option, value, dup, what):
    """Every comma list fit takes refuses a value listed twice with --gpus 8,8's check and message
    (units.refuse_repeat: 'OPTION: V is listed twice' / 'list each ... once'). Before, `--tp 4,4` was taken and
    searched the same TP twice (exit 0); names are read lower-case (fit._names), so ZERO1 repeats zero1."""
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "8", option, value), f"{option}: {dup} is listed twice",
                     f"list each {what} once")


@pytest.mark.parametrize("gpus,dup", [("8,8", "8"), ("8,16,8", "8"), ("8..16,16", "16")])
def test_fit_gpus_listed_twice_exits_2_as_budget_does(cli, gpus, dup):
    """`fit --gpus 8,8` searched 8 GPUs twice; `budget --sweep-gpus 8,8` refuses it (budget.parse_gpu_list: 'is listed
    twice' / 'list each GPU count once'). fit now says the same."""
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", gpus), f"--gpus: {dup} is listed twice",
                     "list each GPU count once")


TINY_FIT = dict(model=str(__import__("pathlib").Path(__file__).parent / "data" / "tiny-fit.yaml"), gpus=8, seq_len=1024,
                global_batch=64)


def test_fit_rows_sum_each_rows_own_terms(monkeypatch):
    """search.rows_of prices the rows at once and explain.to_json reads row i of them: the sums of terms a row
    reports (memory.grouped's weights ... total and peaks, every stage's, the step's total) are summed over row i's
    own elements (explain._picked), not over every row's arrays and then picked. Before, each of N rows summed the
    N-element arrays, quadratic in the rows: `fit --model tests/data/tiny-fit.yaml --gpus 8 --top 2147483647`
    (2,875 rows) spent about 7 of its 11 s of to_json in memory.grouped. The figures are the same elementwise sums
    (every row equals explain's: test_search.test_every_row_is_explain; the 2,875 rows' JSON compared equal to the
    code before)."""
    import numpy as np

    from planner import memory as mem
    from planner.schema import Job
    from planner.search import fit

    grouped = mem.grouped
    calls = {}
    for top in (10, 50):
        shapes = calls[top] = []
        monkeypatch.setattr(mem, "grouped", lambda t, shapes=shapes: shapes.append(np.shape(t.total)) or grouped(t))
        res = fit(Job(**TINY_FIT), top=top)
        assert len(res.rows) == top
        # each call sums one row's elements (shape ()) or every shown row's at once (explain.memory_groups, f78840c:
        # shape (top,), each row then reading its element): never an N-row array once a row
        assert shapes and set(shapes) <= {(), (top,)}, set(shapes)
    assert len(calls[10]) == len(calls[50]), calls  # the calls do not grow with the rows


def test_fit_several_counts_table_prices_only_the_rows_it_shows(cli, monkeypatch):
    """The table of several GPU counts lists each count's best plan (search.FitResult.best), whatever --top ('one
    row per GPU count: its best plan'): fit now searches for one ranked row there. Before, `--gpus 4,8 --top
    2147483647` priced (search.rows_of) and re-resolved all 4,869 fitting rows of tiny-fit to print two (45 s
    against 3 s at --top 10). Counted: rows_of prices the one ranked row (the overall best, for the export and
    the config line) and each count's best, 1 + 2 = 3 rows; the table shows two. json keeps --top ranked rows."""
    import json

    from planner import search

    priced = []
    rows_of = search.rows_of
    monkeypatch.setattr(search, "rows_of", lambda r: priced.append(len(r.base)) or rows_of(r))
    args = ("fit", "--model", TINY_FIT["model"], "--gpus", "4,8", "--seq-len", "1024", "--global-batch", "64")
    r = cli(*args, "--top", "2147483647")
    assert r.exit_code == 0, r.stderr
    assert sum(priced) == 3, priced
    assert [ln.split("│")[2].strip() for ln in r.stdout.splitlines() if ln.startswith("│")] == ["4", "8"]
    r = cli(*args, "--top", "3", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)) == 3
