"""Branch speed6's two savings, each with the same output as before:

- search._variant_groups: a dispatcher search's stack variants are priced one dispatcher's run at a time
  (the bound tightened between runs), or in one run, one step_times call, where at most
  search.ONE_CALL_CANDIDATES candidates can still rank;
- `planner validate RUNS`: the runs file is parsed once (cli/validate._parsed_yaml), not once to see whether it is a
  memory-rows file and again for its records."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from planner import files, search
from planner.schema import Job
from planner.space import DISPATCHER_COLUMN

DATA = Path(__file__).parent / "data"


def _dispatcher_space(codes):
    variants = np.zeros((len(codes), DISPATCHER_COLUMN + 1), dtype=np.int64)
    variants[:, DISPATCHER_COLUMN] = codes
    return SimpleNamespace(dispatchers={int(c): None for c in dict.fromkeys(codes)}, variants=variants)


def test_variant_groups_one_run_for_few_candidates():
    # qwen3-30b-a3b / 64 H100's dispatcher search: 8 variants, a TP-overlap pair for each of 4 dispatchers
    space = _dispatcher_space([0, 0, 1, 1, 2, 2, 4, 4])
    assert search.ONE_CALL_CANDIDATES == 512
    assert search._variant_groups(space, 513) == [[1], [2, 3], [4, 5], [6, 7]]
    assert search._variant_groups(space, 512) == [[1, 2, 3, 4, 5, 6, 7]]
    assert search._variant_groups(space, 0) == [[1, 2, 3, 4, 5, 6, 7]]
    # without a dispatcher search: one variant at a time, whatever the candidates
    plain = SimpleNamespace(dispatchers=None, variants=space.variants[:3])
    assert search._variant_groups(plain, 10) == [[1], [2]]
    assert search._variant_groups(_dispatcher_space([0]), 10) == []


def test_one_call_chooses_as_one_run_at_a_time(monkeypatch):
    """`planner fit --model qwen3-30b-a3b --gpus 64` (its dispatcher search): the same rows and counts with the few
    candidates' variants in one call as one dispatcher at a time (ONE_CALL_CANDIDATES 0), in fewer step_times calls
    (22 -> 14 in best_variants: three of its six calls had at most 512 candidates that can rank, 4, 4 and 3 runs)."""
    job = Job(model="qwen3-30b-a3b", gpus=64)
    calls, inside = [], []
    real_best, real_steps = search.best_variants, search.step_times

    def best(*a, **k):  # (a re-run with no bound calls itself: counted in the outer call)
        if not inside:
            calls.append(0)
        inside.append(1)
        try:
            return real_best(*a, **k)
        finally:
            inside.pop()

    def steps(*a, **k):
        if inside:
            calls[-1] += 1
        return real_steps(*a, **k)

    monkeypatch.setattr(search, "best_variants", best)
    monkeypatch.setattr(search, "step_times", steps)
    res = search.fit(job, top=10, search_dispatchers=True)
    merged = list(calls)
    calls.clear()
    monkeypatch.setattr(search, "ONE_CALL_CANDIDATES", 0)
    ref = search.fit(job, top=10, search_dispatchers=True)
    assert res.rows == ref.rows
    assert vars(res.counts) == vars(ref.counts)
    assert len(merged) == len(calls) == 6
    assert sum(merged) == 14 and sum(calls) == 22
    assert sorted(a - b for a, b in zip(calls, merged)) == [0, 0, 0, 2, 3, 3]


def test_validate_parses_the_runs_file_once(cli, monkeypatch):
    runs = DATA / "published_runs.yaml"
    read = []
    real = files.read_yaml

    def spy(path, *a, **k):
        read.append(Path(path).resolve())
        return real(path, *a, **k)

    monkeypatch.setattr(files, "read_yaml", spy)
    r = cli("validate", str(runs), "--ids", "narayanan2021-t1-1.7B", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert read.count(runs.resolve()) == 1
    assert '"narayanan2021-t1-1.7B"' in r.stdout


@pytest.mark.parametrize("text, message", [
    ("- id: [", "invalid YAML"),  # the parse error names the file, as before (raised by _parsed_yaml)
    ("memory_rows: 3\n", "memory_rows"),  # a memory-rows file still goes to its own reader
])
def test_validate_bad_runs_file_names_it(cli, tmp_path, text, message):
    p = tmp_path / "runs.yaml"
    p.write_text(text, encoding="utf-8")
    r = cli("validate", str(p))
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert str(p) in r.stderr and message in r.stderr
    assert "Traceback" not in r.stderr
