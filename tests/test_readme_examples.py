"""Issue 24: the README's example figures cannot drift. Every `$ planner ...` example of
README.md whose inputs exist is run (tests/readme_examples.py), and every figure its quoted
output states (decimals, percentages, counts with separators; a search's wall time aside)
must be in what the command prints now. When the model moves on purpose, refresh them with
`PYTHONPATH=. python tests/readme_examples.py` (it rewrites the figures of the lines it can
match and lists the rest) and read the diff."""

from __future__ import annotations

import pytest

from readme_examples import README_JOBS, ROOT, examples, figures, output, refreshed, runnable, skeleton

EXAMPLES = [ex for ex in examples() if runnable(ex, ROOT)]
_OUTPUT: dict[tuple, str] = {}  # an example's command -> its output, run once for the figures and the memory rows


def output_once(ex, jobs_dir) -> str:
    """output(ex, jobs_dir), run once per command of the module: the memory table tests read the same run's output
    as the figures test, and a command the README quotes twice (`planner check` of the fp8 script) runs once (a
    str, so no test can change what another reads)."""
    key = tuple(ex.argv)
    if key not in _OUTPUT:
        _OUTPUT[key] = output(ex, jobs_dir)
    return _OUTPUT[key]


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    for name, text in README_JOBS.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    return d


def test_the_readme_examples_are_found():
    """Enough examples run that the check means something: the quoted figures of at least
    20 commands, 250 figures in all."""
    assert len(EXAMPLES) >= 20
    assert sum(len(figures(ex.quoted)) for ex in EXAMPLES) >= 250


@pytest.mark.parametrize("ex", EXAMPLES, ids=[f"README:{ex.line}:{ex.argv[0]}" for ex in EXAMPLES])
def test_readme_example_figures_match(ex, jobs_dir, monkeypatch):
    monkeypatch.chdir(ROOT)
    got = output_once(ex, jobs_dir)
    stale = [(f, q.strip()[:120]) for q in ex.quoted for f in figures([q]) if f not in got]
    assert stale == [], f"README.md:{ex.line} `planner {' '.join(ex.argv)}` quotes figures it no longer prints"


def test_figures_and_refresh():
    assert figures(["  searched 428,866 candidates in 0.84 s: 70,459 did not fit, step 3.71 s, MFU 54.4%"]) == [
        "428,866", "70,459", "3.71", "54.4%"]
    assert skeleton("a 1.5 GiB b 12%") == skeleton("a   2.25 GiB b 9%")
    new, stuck = refreshed(["total 1.5 GiB, 12%", "other 3.0"], "total 2.5 GiB, 13%\n")
    assert new == ["total 2.5 GiB, 13%", "other 3.0"] and stuck == ["other 3.0"]


def memory_rows(lines: list[str]) -> list[str]:
    """The component labels of the first `Memory per GPU` table in lines (a row folded over two lines is one label)."""
    rows: list[str] = []
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Memory per GPU")), None)
    if start is None:
        return rows
    for ln in lines[start + 1:]:
        if ln.startswith("└"):
            break
        if not ln.startswith("│"):
            continue
        cells = [c.strip() for c in ln.split("│")[1:-1]]
        if rows and all(c == "" for c in cells[1:]):  # a label folded onto the next line
            rows[-1] += " " + cells[0]
        else:
            rows.append(cells[0])
    return rows


MEMORY_TABLES = [ex for ex in EXAMPLES if ex.argv[0] == "explain" and memory_rows(ex.quoted)]


def test_memory_rows_parse_folded_labels():
    table = ["Memory per GPU (x)", "┃ component ┃ GB ┃", "│ weights │ 1.00 │", "│ ZeRO-2 unit (beyond the │ 1.37 │",
             "│ peak) │ │", "└──┘", "│ after │ 2 │"]
    assert memory_rows(table) == ["weights", "ZeRO-2 unit (beyond the peak)"]


def test_readme_memory_tables_show_every_term():
    """The README's quoted `explain` memory table (hand-kept: the figures script refreshes numbers, not rows) lists
    every row the command prints now, in its order (issue 21: the Llama 3 70B excerpt had lost zero2_reduce_input)."""
    assert MEMORY_TABLES, "the README quotes an explain memory table"


@pytest.mark.parametrize("ex", MEMORY_TABLES, ids=[f"README:{ex.line}" for ex in MEMORY_TABLES])
def test_readme_memory_table_rows_match(ex, jobs_dir, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert memory_rows(ex.quoted) == memory_rows(output_once(ex, jobs_dir).splitlines())
