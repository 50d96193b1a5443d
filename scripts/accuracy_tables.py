"""The accuracy tables of README.md and docs/*.md, computed from the library (issue 24: figures that cannot drift).

Each table sits between marker comments in a Markdown file,

    <!-- accuracy:NAME begin -->
    ...
    <!-- accuracy:NAME end -->

(or on one line, begin and end around the text, for a figure inside a sentence), and is rendered here from the
functions `planner validate` calls: planner.validate.report (the published-runs files: dense, MoE, low
precision), planner.memory_rows.report (the measured memory rows and the allocated-memory oracle's traces),
planner.megatron_ci.report_corpus (Megatron-LM's CI corpus), planner.calibrate.run.leave_one_out (the
leave-one-out of tests/test_calibrate_run.py) and scripts/dense_groups.py's group_table. Nothing is subprocessed,
nothing is fitted. tests/test_accuracy_tables.py runs the check (all of it: about 15 s on one core).

    PYTHONPATH=. python scripts/accuracy_tables.py            # rewrite every table in place
    PYTHONPATH=. python scripts/accuracy_tables.py --check    # exit 1 naming each stale table
    PYTHONPATH=. python scripts/accuracy_tables.py --print NAME   # one table to stdout

A marker naming no table here, a begin without its end, and a table placed nowhere are errors (exit 2).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.calibrate import run as calibrate_run  # noqa: E402
from planner.megatron_ci import report_corpus  # noqa: E402
from planner import memory_rows  # noqa: E402
from planner.validate import load_runs, report  # noqa: E402

DATA = ROOT / "tests" / "data"
RUNS = DATA / "published_runs.yaml"
MOE = DATA / "published_runs_moe.yaml"
LOWPREC = DATA / "published_runs_lowprec.yaml"
MEASURED = DATA / "memory" / "measured_memory.yaml"
ORACLE = DATA / "memory" / "oracle_torchtitan_0.3.0.yaml"
SWEEP = DATA / "memory" / "oracle_sweep_torch2.13_tt0.3.0.yaml"
CORPUS = DATA / "megatron_ci" / "corpus.json"

#: the files whose markers are rewritten
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

MARKER = re.compile(r"<!-- accuracy:([a-z0-9_]+) (begin|end) -->")


def _dense_groups():
    spec = importlib.util.spec_from_file_location("dense_groups", ROOT / "scripts" / "dense_groups.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------------- formatting

def pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def signed(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def stats(err) -> dict:
    """n, median |error|, signed median, p90 |error| (numpy's linear percentile, as planner.validate), max |error|."""
    e = np.asarray(list(err), dtype=np.float64)
    if not e.size:
        return {"n": 0, "median_abs": None, "median": None, "p90_abs": None, "max_abs": None}
    return {"n": int(e.size), "median_abs": float(np.median(np.abs(e))), "median": float(np.median(e)),
            "p90_abs": float(np.percentile(np.abs(e), 90)), "max_abs": float(np.max(np.abs(e)))}


def stat_cells(s: dict) -> str:
    return f"{s['n']} | {pct(s['median_abs'])} | {signed(s['median'])} | {pct(s['p90_abs'])}"


def md(text: str) -> str:
    """A table cell: pipes escaped."""
    return text.replace("|", "\\|")


# ---------------------------------------------------------------------------------------------- the data (once each)

@functools.cache
def runs_report(path: Path, complete: bool = False) -> dict:
    return report(path, complete=complete)


@functools.cache
def records(path: Path) -> dict:
    return {r.id: r for r in load_runs(path)}


@functools.cache
def memory_report(path: Path) -> dict:
    return memory_rows.report(path)


@functools.cache
def corpus_report() -> dict:
    return report_corpus(CORPUS)


@functools.cache
def loo() -> dict:
    return calibrate_run.leave_one_out(load_runs(RUNS), DATA, str(RUNS))


def _errors(rows, keep=lambda r: True) -> list:
    return [r["error"] for r in rows if r["error"] is not None and keep(r)]


# ---------------------------------------------------------------------------------------------- the tables

def dense_headline() -> str:
    """Inline: the complete published records' count, median and signed median (README's opening paragraph)."""
    s = runs_report(RUNS, True)["summary"]
    return (f"{s['n']} published training runs (median error {pct(s['median_abs_error'])}, signed median "
            f"{signed(s['median_error'])}")


def _stack_rows(s: dict) -> list:
    """A validate summary's per-stack table and its **all** row (dense_by_stack, dense_file_by_stack)."""
    out = ["| stack | n | median \\|error\\| | signed median | p90 \\|error\\| |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, st in s["by_stack"].items():
        out.append(f"| {name} | {st['n']} | {pct(st['median_abs_error'])} | {signed(st['median_error'])} | "
                   f"{pct(st['p90_abs_error'])} |")
    out.append(f"| **all** | **{s['n']}** | **{pct(s['median_abs_error'])}** | **{signed(s['median_error'])}** | "
               f"**{pct(s['p90_abs_error'])}** |")
    return out


def dense_by_stack() -> str:
    """`planner validate tests/data/published_runs.yaml --complete`, per stack and over all."""
    s = runs_report(RUNS, True)["summary"]
    return "\n".join(_stack_rows(s))


def dense_file_by_stack() -> str:
    """The whole dense file (`planner validate tests/data/published_runs.yaml`), per stack and over all."""
    s = runs_report(RUNS)["summary"]
    return "\n".join([f"`planner validate tests/data/published_runs.yaml` (every record, {s['n_skipped']} skipped):", ""]
                     + _stack_rows(s))


def dense_groups() -> str:
    """scripts/dense_groups.py's table (groups of >= 3 records with a tokens/s error) over the whole dense file."""
    dg = _dense_groups()
    rows = runs_report(RUNS)["runs"]
    recs = records(RUNS)
    table = dg.group_table([recs[r["id"]] for r in rows if r["id"] in recs], [r for r in rows if r["id"] in recs])
    out = ["| axis | group | n | median \\|error\\| | signed median | p90 \\|error\\| |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    out += [f"| {t['axis']} | {md(t['group'])} | {t['n']} | {pct(t['median_abs'])} | {signed(t['median_signed'])} | "
            f"{pct(t['p90_abs'])} |" for t in table]
    return "\n".join(out)


def dense_worst() -> str:
    """The dense records whose |tokens/s error| is above 15% (scripts/dense_groups.py --worst 0.15)."""
    rows = sorted((r for r in runs_report(RUNS)["runs"] if r["error"] is not None and abs(r["error"]) > 0.15),
                  key=lambda r: r["error"])
    out = ["| error | stack | hardware | mesh | record |", "| ---: | --- | --- | --- | --- |"]
    out += [f"| {signed(r['error'])} | {r['stack']} | {r['hardware']} | {r['mesh']} | {r['id']} |" for r in rows]
    return "\n".join(out)


def published_memory() -> str:
    """The records of the published-runs files that publish a memory figure: predicted (the peak the stack logs)
    against published."""
    out = ["| record | stack | predicted GiB | published GiB | error |", "| --- | --- | ---: | ---: | ---: |"]
    for path in (RUNS, MOE, LOWPREC):
        for r in runs_report(path)["runs"]:
            if r["memory_error"] is not None:
                out.append(f"| {r['id']} | {r['stack']} | {r['predicted_memory_gib']:.2f} | "
                           f"{r['published_memory_gib']:.2f} | {signed(r['memory_error'])} |")
    return "\n".join(out)


def _by(path: Path, key: Callable) -> str:
    rows = runs_report(path)["runs"]
    recs = records(path)
    groups: dict = {}
    for r in rows:
        if r["error"] is not None:
            groups.setdefault(key(recs[r["id"]], r), []).append(r["error"])
    out = ["| group | n | median \\|error\\| | signed median | p90 \\|error\\| | worst \\|error\\| |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for g in sorted(groups):
        s = stats(groups[g])
        out.append(f"| {g} | {stat_cells(s)} | {pct(s['max_abs'])} |")
    s = stats(_errors(rows))
    skipped = sum(r["skipped"] is not None for r in rows)
    out.append(f"| **all** ({skipped} skipped) | **{s['n']}** | **{pct(s['median_abs'])}** | **{signed(s['median'])}** "
               f"| **{pct(s['p90_abs'])}** | {pct(s['max_abs'])} |")
    return "\n".join(out)


def moe_summary() -> str:
    """`planner validate tests/data/published_runs_moe.yaml`: per catalog model, per stack, over all."""
    per_model = _by(MOE, lambda rec, row: f"model {rec.model or rec.model_name}").splitlines()
    per_stack = _by(MOE, lambda rec, row: f"stack {row['stack']}").splitlines()
    return "\n".join(per_model[:-1] + per_stack[2:])


def lowprec_summary() -> str:
    """`planner validate tests/data/published_runs_lowprec.yaml`: the dense and the MoE records apart, and all."""
    return _by(LOWPREC, lambda rec, row: "MoE records" if rec.moe else "dense records")


def memory_rows_table() -> str:
    """`planner validate` of the measured memory rows (per source group, per kind) and of the two oracle files."""
    out = ["| file | group | n | skipped | median \\|error\\| | signed median | p90 \\|error\\| | worst under |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def row(file, group, s, skipped):
        wu = signed(s["worst_under"]) if s["worst_under"] is not None else ("none" if s["n"] else "-")
        return (f"| {file} | {md(group)} | {s['n']} | {skipped} | {pct(s['median_abs_error'])} | "
                f"{signed(s['median_error'])} | {pct(s['p90_abs_error'])} | {wu} |")

    for path in (MEASURED, ORACLE, SWEEP):
        s = memory_report(path)["summary"]
        name = path.name
        for g, gs in s["by_group"].items():
            out.append(row(name, g, gs, gs["n_skipped"]))
        for k, ks in s["by_kind"].items():
            if ks["n"]:
                out.append(row(name, f"all {k}", ks, ""))
        out.append(row(name, "**all**", s, s["n_skipped"]))
    return "\n".join(out)


def megatron_ci() -> str:
    """`planner validate tests/data/megatron_ci/corpus.json`: per memory trust tier and over all."""
    s = corpus_report()["summary"]
    out = ["| tier | rows | compared | median \\|error\\| | signed median | p90 \\|error\\| | worst under-prediction |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for t, st in s["by_tier"].items():
        wu = f"{signed(st['worst_under_error'])} (`{st['worst_under']}`)" if st["worst_under"] else "none"
        out.append(f"| {t} | {s['rows_by_tier'][t]} | {st['n']} | {pct(st['median_abs_error'])} | "
                   f"{signed(st['median_error'])} | {pct(st['p90_abs_error'])} | {wu} |")
    a = s["all"]
    out.append(f"| **all** | **{s['n_rows']}** | **{a['n']}** | **{pct(a['median_abs_error'])}** | "
               f"**{signed(a['median_error'])}** | **{pct(a['p90_abs_error'])}** | |")
    return "\n".join(out)


def leave_one_out() -> str:
    """tests/test_calibrate_run.py's leave-one-out: per source group of >= 4 records, and the medians over groups."""
    res = loo()
    out = ["| source group | records | pairs | before | after | signed median after |",
           "|---|---:|---:|---:|---:|---:|"]
    for g, v in res.items():
        out.append(f"| {g} | {v['records']} | {v['pairs']} | {pct(v['before_median_abs_error'])} | "
                   f"{pct(v['after_median_abs_error'])} | {signed(v['after_median_error'])} |")
    before = [v["before_median_abs_error"] for v in res.values() if v["before_median_abs_error"] is not None]
    after = [v["after_median_abs_error"] for v in res.values() if v["after_median_abs_error"] is not None]
    out.append(f"| median over groups | | | {pct(float(np.median(before)))} | {pct(float(np.median(after)))} | |")
    return "\n".join(out)


#: name -> (renderer, inline): an inline table is text inside a line, a block one whole lines
TABLES: dict[str, tuple[Callable[[], str], bool]] = {
    "dense_headline": (dense_headline, True),
    "dense_by_stack": (dense_by_stack, False),
    "dense_file_by_stack": (dense_file_by_stack, False),
    "dense_groups": (dense_groups, False),
    "dense_worst": (dense_worst, False),
    "published_memory": (published_memory, False),
    "moe_summary": (moe_summary, False),
    "lowprec_summary": (lowprec_summary, False),
    "memory_rows": (memory_rows_table, False),
    "megatron_ci": (megatron_ci, False),
    "leave_one_out": (leave_one_out, False),
}


# ---------------------------------------------------------------------------------------------- markers

class MarkerError(Exception):
    pass


def spans(text: str, where: str = "text") -> list[tuple[str, int, int]]:
    """[(name, start, end)] of each marked table's content (between the begin marker's end and the end marker's
    start). Unknown names, a begin without its end, an end without its begin and nesting are MarkerErrors."""
    out, open_ = [], None
    for m in MARKER.finditer(text):
        name, which = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if name not in TABLES:
            raise MarkerError(f"{where}:{line}: no accuracy table {name!r} (known: {', '.join(TABLES)})")
        if which == "begin":
            if open_ is not None:
                raise MarkerError(f"{where}:{line}: {name} begins inside {open_[0]}")
            open_ = (name, m.end(), line)
        else:
            if open_ is None or open_[0] != name:
                raise MarkerError(f"{where}:{line}: {name} ends where it did not begin")
            out.append((name, open_[1], m.start()))
            open_ = None
    if open_ is not None:
        raise MarkerError(f"{where}:{open_[2]}: {open_[0]} begins and never ends")
    return out


def content(name: str) -> str:
    """What goes between the markers: inline, the text itself; block, the table on lines of its own."""
    render, inline = TABLES[name]
    return render() if inline else "\n" + render() + "\n"


def rewrite(text: str, where: str = "text", render: Callable[[str], str] = content) -> tuple[str, list[str]]:
    """The text with every marked table rendered now, and the names of those that changed."""
    parts, stale, pos = [], [], 0
    for name, a, b in spans(text, where):
        new = render(name)
        if text[a:b] != new:
            stale.append(name)
        parts += [text[pos:a], new]
        pos = b
    parts.append(text[pos:])
    return "".join(parts), stale


def run(check: bool) -> tuple[list[str], list[str]]:
    """(stale 'file: name' entries, written files). Raises MarkerError where a marker is wrong or a table is
    placed nowhere."""
    placed, stale, written = set(), [], []
    for path in DOCS:
        text = path.read_text()
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        placed |= {n for n, _, _ in spans(text, rel)}
        new, changed = rewrite(text, rel)
        stale += [f"{rel}: {n}" for n in changed]
        if changed and not check:
            path.write_text(new)
            written.append(rel)
    missing = [n for n in TABLES if n not in placed]
    if missing:
        raise MarkerError(f"placed in no file: {', '.join(missing)} (add <!-- accuracy:NAME begin/end --> markers)")
    return stale, written


def main(argv: list[str]) -> int:
    if argv[:1] == ["--print"] and len(argv) == 2 and argv[1] in TABLES:
        print(TABLES[argv[1]][0]())
        return 0
    if argv not in ([], ["--check"]):
        print("usage: scripts/accuracy_tables.py [--check | --print NAME]", file=sys.stderr)
        return 2
    check = argv == ["--check"]
    try:
        stale, written = run(check)
    except MarkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if check:
        for s in stale:
            print(f"stale: {s} (rerun: PYTHONPATH=. python scripts/accuracy_tables.py)")
        if not stale:
            print("every accuracy table is current")
        return 1 if stale else 0
    print("\n".join(f"rewrote {w}" for w in written) if written else "every accuracy table was current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
