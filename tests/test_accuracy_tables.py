"""Issue 24: the accuracy tables of README.md and docs/*.md cannot drift. scripts/accuracy_tables.py renders each
table between its `<!-- accuracy:NAME begin/end -->` markers from the functions `planner validate` and `planner
calibrate run` call (the dense, MoE and low-precision published runs, the measured memory rows and the oracle's
traces, Megatron-LM's CI corpus, the leave-one-out of tests/test_calibrate_run.py); this test fails naming each
table that differs from what the library computes now. After a change that moves a figure on purpose:
`PYTHONPATH=. python scripts/accuracy_tables.py`, and read the diff (every table in all: ~15 s on one core)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("accuracy_tables", ROOT / "scripts" / "accuracy_tables.py")
at = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(at)


def test_every_accuracy_table_is_current(monkeypatch, megatron_ci_report, published_runs_leave_one_out, reports):
    # the megatron_ci table's corpus report (at.corpus_report: report_corpus of the same file) and the leave_one_out
    # table's (at.loo: leave_one_out of the same runs file) are conftest's, each run once a session (test_megatron_ci
    # and test_megatron_hybrid read the first, test_calibrate_run the second)
    monkeypatch.setattr(at, "corpus_report", lambda: megatron_ci_report)
    monkeypatch.setattr(at, "loo", lambda: published_runs_leave_one_out)
    # the runs files' and memory-rows files' validate reports (at.runs_report, at.memory_report: the same calls) are
    # conftest's reports, shared with test_memory_rows, test_lowprec and test_stacks
    monkeypatch.setattr(at, "runs_report", reports.validate)
    monkeypatch.setattr(at, "memory_report", reports.memory_rows)
    stale, written = at.run(check=True)
    assert written == []
    assert stale == [], "stale accuracy tables (rerun PYTHONPATH=. python scripts/accuracy_tables.py): " + "; ".join(stale)


def test_every_table_is_placed_and_known():
    """Each table sits in some file, and every marker of README.md and docs/ names a table (run() raises else)."""
    placed = {n for p in at.DOCS for n, _, _ in at.spans(p.read_text(), p.name)}
    assert placed == set(at.TABLES)


def test_stats_by_hand():
    """[+0.10, -0.20, +0.05]: |e| sorted 0.05, 0.10, 0.20, median 0.10; signed median +0.05; p90 (linear, type 7)
    at rank 0.9 x 2 = 1.8: 0.10 + 0.8 x (0.20 - 0.10) = 0.18; max 0.20."""
    s = at.stats([0.10, -0.20, 0.05])
    assert s["n"] == 3
    assert s["median_abs"] == pytest.approx(0.10) and s["median"] == pytest.approx(0.05)
    assert s["p90_abs"] == pytest.approx(0.18) and s["max_abs"] == pytest.approx(0.20)
    assert at.pct(0.0514) == "5.1%" and at.signed(-0.0234) == "-2.3%" and at.signed(0.0006) == "+0.1%"
    assert at.stats([])["median_abs"] is None and at.pct(None) == "-"


def test_rewrite_block_and_inline():
    text = ("a <!-- accuracy:dense_headline begin -->old<!-- accuracy:dense_headline end --> b\n"
            "<!-- accuracy:leave_one_out begin -->\n| old |\n<!-- accuracy:leave_one_out end -->\ntail\n")
    new, stale = at.rewrite(text, "t", render=lambda n: "NEW" if n == "dense_headline" else "\n| new |\n")
    assert new == ("a <!-- accuracy:dense_headline begin -->NEW<!-- accuracy:dense_headline end --> b\n"
                   "<!-- accuracy:leave_one_out begin -->\n| new |\n<!-- accuracy:leave_one_out end -->\ntail\n")
    assert stale == ["dense_headline", "leave_one_out"]
    assert at.rewrite(new, "t", render=lambda n: "NEW" if n == "dense_headline" else "\n| new |\n")[1] == []


@pytest.mark.parametrize("text, message", [
    ("<!-- accuracy:nonesuch begin --><!-- accuracy:nonesuch end -->", "t:1: no accuracy table 'nonesuch'"),
    ("x\n<!-- accuracy:moe_summary begin -->\n", "t:2: moe_summary begins and never ends"),
    ("<!-- accuracy:moe_summary end -->", "t:1: moe_summary ends where it did not begin"),
    ("<!-- accuracy:moe_summary begin --><!-- accuracy:megatron_ci begin -->", "t:1: megatron_ci begins inside moe_summary"),
])
def test_bad_markers_are_named(text, message):
    with pytest.raises(at.MarkerError, match="^" + message.replace("(", r"\(")):
        at.spans(text, "t")


def test_check_exits_1_naming_the_stale_table(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- accuracy:t1 begin -->\n| 1.0% |\n<!-- accuracy:t1 end -->\n")
    monkeypatch.setattr(at, "TABLES", {"t1": (lambda: "| 2.0% |", False)})
    monkeypatch.setattr(at, "DOCS", [doc])
    assert at.main(["--check"]) == 1
    assert f"stale: {doc}: t1" in capsys.readouterr().out
    assert doc.read_text() == "<!-- accuracy:t1 begin -->\n| 1.0% |\n<!-- accuracy:t1 end -->\n"  # check writes nothing
    assert at.main([]) == 0
    assert doc.read_text() == "<!-- accuracy:t1 begin -->\n| 2.0% |\n<!-- accuracy:t1 end -->\n"
    assert at.main(["--check"]) == 0
    monkeypatch.setattr(at, "TABLES", {"t1": (lambda: "| 2.0% |", False), "t2": (lambda: "", False)})
    assert at.main(["--check"]) == 2
    assert "placed in no file: t2" in capsys.readouterr().err
