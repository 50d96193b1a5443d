"""fit's shown rows resolved as explain resolves them, at a fraction of the cost (issue 22, `fit --top N`'s speed):
search.rows_warnings defers each row's plan rules and start-up rules (plan.resolve `rules`) and runs them once over
the rows (search.deferred_codes), and the files a row's job names are looked up and hashed once for all the rows
(files.held_lookups). render.common checks a result for NaN / inf in one walk (_finite) and writes JSON without
_clean's copy.

What must not change: each row's warnings are resolve(row_job(job, row))'s, and a row resolve refuses raises
resolve's own error, the first such row's."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from planner import files, search
from planner.errors import PlannerError
from planner.plan import (BATCH, OK, STACK_ORDER, TP_OVERLAP_SP, VPP_SCHEDULE, file_sha256, resolve, rule_codes)
from planner.render.common import _clean, _finite, check_finite
from planner.schema import Job
from planner.search import deferred_codes, fit, row_job, rows_warnings

DATA = Path(__file__).parent / "data"
TINY = Job(model=str(DATA / "tiny-fit.yaml"), gpus=8, seq_len=1024, global_batch=64)


@pytest.fixture(scope="module")
def tiny_rows():
    return fit(TINY, top=20).rows


def _broken(row: dict, **change) -> dict:
    bad = copy.deepcopy(row)
    bad["plan"].update(change)
    return bad


def _message(job: Job, row: dict) -> str:
    with pytest.raises(PlannerError) as e:
        resolve(row_job(job, row))
    return e.value.message


def test_rows_warnings_are_each_rows_resolve(cli, monkeypatch):
    """`fit llama3_8b.toml --gpus 8 --top 50` (torchtitan, its embedding and loss counted in the pipeline split):
    the warnings fit gives each row are resolve(row_job(job, row))'s, one plan at a time. 28 of its 50 rows warn
    (27 before pp 2 was priced without a middle stage, pp2mid: the ranking's pp 2 rows moved), in 4 distinct texts
    beside none (the split's units: 32 layers + 2 ends in pp*vpp = 34, 18, 12 or 6 chunks),
    so rows mixed up or dropped would differ."""
    seen = []
    real = search.rows_warnings
    monkeypatch.setattr(search, "rows_warnings", lambda job, rows, where="": seen.append(
        (job, copy.deepcopy(rows), where, w := real(job, rows, where))) or w)
    r = cli("fit", str(DATA / "trainer_configs" / "llama3_8b.toml"), "--gpus", "8", "--top", "50", "--format", "json")
    assert r.exit_code == 0, r.stderr
    (job, rows, where, got), = seen
    want = [resolve(row_job(job, row), where)[2] for row in rows]
    assert got == want
    assert sum(1 for w in got if w) == 28 and len({tuple(w) for w in got}) == 5
    assert [row["warnings"] for row in json.loads(r.stdout)["rows"]] == want


def test_rows_rules_run_once_over_the_rows(tiny_rows, monkeypatch):
    """The 20 rows of tiny-fit on 8 GPUs share model, GPU count, stack and hardware: their rules run in one
    rule_codes call over 20 plans, none per row (before: one call a row, inside resolve)."""
    import planner.plan as plan_module

    shapes = []
    real = rule_codes
    monkeypatch.setattr(plan_module, "rule_codes", lambda *a, **k: shapes.append(("plan", np.shape(a[3].tp)))
                        or real(*a, **k))
    monkeypatch.setattr(search, "rule_codes", lambda *a, **k: shapes.append(("search", np.shape(a[3].tp)))
                        or real(*a, **k))
    got = rows_warnings(TINY, tiny_rows)
    assert shapes == [("search", (20,))]
    assert got == [[]] * 20  # (tiny-fit's plans warn of nothing; the refusals below are what it checks)


def test_deferred_codes_are_each_plans_rule_codes(tiny_rows):
    """Plans resolve deferred, checked in one call, get the codes rule_codes gives each alone. From tiny-fit's top
    row (tp 2, dp 4, micro-batch 16 of 64, megatron_fsdp_optim_grads, tp-cp-pp-dp, TP overlap on):
    rank order dp-pp-cp-tp, which Megatron does not build -> STACK_ORDER (21); micro-batch 3: 64 % (4 x 3) = 4
    -> BATCH (2); no sequence parallelism under TP overlap -> TP_OVERLAP_SP (11); vpp 2 on 1f1b -> VPP_SCHEDULE (7);
    the row itself and the torch_fsdp2 mode at its level fsdp -> OK."""
    top = tiny_rows[0]
    assert (top["plan"]["tp"], top["plan"]["dp"], top["plan"]["micro_batch"], top["plan"]["rank_order"]) == (
        2, 4, 16, "tp-cp-pp-dp")
    rows = [top, _broken(top, rank_order="dp-pp-cp-tp"), _broken(top, micro_batch=3),
            _broken(top, sequence_parallel=False), _broken(top, schedule="1f1b", vpp=2),
            _broken(top, sharding_mode="torch_fsdp2", sharding="fsdp"), *tiny_rows[1:]]
    pending = []
    for row in rows:
        resolve(row_job(TINY, row), rules=pending)
    assert len(pending) == len(rows)
    alone = [int(rule_codes(m, g, st, p, hardware=h)) for m, g, st, p, h in pending]
    assert alone[:6] == [OK, STACK_ORDER, BATCH, TP_OVERLAP_SP, VPP_SCHEDULE, OK]
    assert deferred_codes(pending).tolist() == alone


def test_a_row_resolve_refuses_raises_its_error(tiny_rows):
    """A row whose rules break raises resolve's own error, the first such row's, whether the rules caught it (checked
    after the rows) or resolve raised before them (sharding_mode 'nope', a mode the stack lacks)."""
    top = tiny_rows[0]
    order, batch, mode = (_broken(top, rank_order="dp-pp-cp-tp"), _broken(top, micro_batch=3),
                          _broken(top, sharding_mode="nope"))
    assert _message(TINY, batch) == "global batch 64 sequences does not divide into dp=4 x micro_batch=3"
    assert _message(TINY, mode) == "sharding_mode 'nope' is not a mode of stack megatron"
    assert _message(TINY, order).startswith("stack megatron does not build rank order dp-pp-cp-tp with tp 2, cp 1")
    for rows, first in (([top, order, top, batch], order), ([top, batch, order], batch), ([top, batch, mode], batch),
                        ([top, mode, batch], mode)):
        with pytest.raises(PlannerError) as e:
            rows_warnings(TINY, rows)
        assert e.value.message == _message(TINY, first)


def test_held_lookups(tmp_path):
    """Within files.held_lookups a file's hash is read once (the file's later bytes are not seen there); outside it,
    every call reads the file. sha256('abc') is FIPS 180-2's example (appendix B.1). An error is not held: a
    name that names no file is refused, then found once the file exists."""
    f = tmp_path / "m.yaml"
    f.write_bytes(b"abc")
    abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    with files.held_lookups():
        assert file_sha256(str(f)) == abc
        f.write_bytes(b"abcd")
        assert file_sha256(str(f)) == abc
        with files.held_lookups():  # nested: the outer one's
            assert file_sha256(str(f)) == abc
        from planner.catalog import model_source

        g = tmp_path / "later.yaml"
        with pytest.raises(PlannerError, match="does not exist"):
            model_source(str(g))
        g.write_text("x")
        assert model_source(str(g)) == g.resolve()
    assert file_sha256(str(f)) == hashlib.sha256(b"abcd").hexdigest()


def test_finite_and_clean():
    """_finite: a NaN or inf among values at any depth, in dicts, lists and tuples, a float subclass (numpy's
    float64) too; a key is not a value (as _nonfinite). _clean: NaN / inf -> None, tuples -> lists."""
    nested = {"a": [1, "x", None, True, (2.5, {"b": np.float64("inf")})]}
    assert not _finite((nested,))
    assert _finite(({"a": [1, (2.5, {"b": np.float64(3.0)})], float("nan"): 1},))
    assert _clean(nested) == {"a": [1, "x", None, True, [2.5, {"b": None}]]}
    with pytest.raises(PlannerError, match=r"the result's a\[4\]\[1\]\.b is inf"):
        check_finite(nested)
    check_finite({"a": (1.0, -0.0, math.pi)})
