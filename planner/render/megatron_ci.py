"""`planner validate CORPUS.json` for people: the per-tier accuracy of the predicted last-stage
peak allocated memory against Megatron-LM's CI (planner/megatron_ci.py), the rows with the
largest errors, and the skipped rows counted by reason. json/yaml: every row with its error,
terms and assumptions; csv: one line per row."""

from __future__ import annotations

from rich.table import Table

from .common import Format, GiB, emit, out, print_wide, signed_pct

#: rows listed under the summary, by |error| (every row: --format json)
WORST_SHOWN = 15


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def emit_corpus(data: dict, fmt: Format, title: str) -> None:
    if fmt == Format.csv:
        rows = [{k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items() if k != "terms"} for r in data["rows"]]
        emit(rows, fmt, lambda: None)
    else:
        emit(data, fmt, lambda: render_corpus(data, title))


def tier_table(summary: dict, title: str) -> Table:
    tab = Table(title=title, title_justify="left")
    for name, justify in (("tier", "left"), ("rows", "right"), ("n", "right"), ("median |err|", "right"),
                          ("signed median", "right"), ("p90 |err|", "right"), ("worst under", "right"), ("row", "left")):
        tab.add_column(name, justify=justify, overflow="fold")
    for t, st in list(summary["by_tier"].items()) + [("all", summary["all"])]:
        rows = summary["rows_by_tier"].get(t, summary["n_rows"]) if t != "all" else summary["n_rows"]
        tab.add_row(t, str(rows), str(st["n"]), _pct(st["median_abs_error"]), signed_pct(st["median_error"]) if st["n"] else "",
                    _pct(st["p90_abs_error"]), signed_pct(st["worst_under_error"]) if st["worst_under_error"] is not None else "",
                    st["worst_under"] or "")
    return tab


def render_corpus(data: dict, title: str) -> None:
    s = data["summary"]
    out.print(f"{title}: {data['compared']}", highlight=False, markup=False)
    print_wide(tier_table(s, "by memory trust tier"), 170)
    done = sorted((r for r in data["rows"] if r["error"] is not None), key=lambda r: -abs(r["error"]))
    if done:
        tab = Table(title=f"largest errors ({min(WORST_SHOWN, len(done))} of {len(done)}; every row: --format json)",
                    title_justify="left")
        for name, justify in (("row", "left"), ("tier", "left"), ("mesh", "left"), ("measured GiB", "right"),
                              ("predicted GiB", "right"), ("error", "right")):
            tab.add_column(name, justify=justify, overflow="fold")
        for r in done[:WORST_SHOWN]:
            tab.add_row(r["row_id"], r["tier"] or "", r["mesh"] or "", f"{r['measured_bytes'] / GiB:.2f}",
                        f"{r['predicted_bytes'] / GiB:.2f}", signed_pct(r["error"]))
        print_wide(tab, 170)
    if s["n_skipped"]:
        out.print(f"skipped ({s['n_skipped']} of {s['n_rows']}), by reason:", highlight=False)
        for reason, n in s["skipped_by_reason"].items():
            out.print(f"  {n:4d}  {reason}", highlight=False, markup=False)
