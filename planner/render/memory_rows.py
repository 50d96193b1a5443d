"""`planner validate MEMORY_ROWS.yaml` for people: each row's measured and predicted peak (of the
kind the row measures: reserved or allocated), the signed error, the statistics per source group
and per kind, and every skipped row with its reason. csv: one line per row, lists joined."""

from __future__ import annotations

from typing import Optional

from rich.table import Table

from .common import Format, emit, out, print_skipped, print_wide, signed_pct


def _gib(x: Optional[float]) -> str:
    return "" if x is None else f"{x:.2f}"


def _pct(x: Optional[float]) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def emit_memory_rows(data: dict, fmt: Format, title: str) -> None:
    if fmt == Format.csv:
        rows = [{k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in data["rows"]]
        emit(rows, fmt, lambda: None)
    else:
        emit(data, fmt, lambda: render_table(data, title))


def summary_table(summary: dict) -> Table:
    """n, median |error|, p90 |error|, signed median and worst under-prediction per source
    group, per kind and overall."""
    tab = Table(title="accuracy (error = predicted / measured - 1)", title_justify="left")
    for name, justify in (("group", "left"), ("n", "right"), ("median |err|", "right"), ("p90 |err|", "right"),
                          ("signed median", "right"), ("worst under", "right"), ("skipped", "right")):
        tab.add_column(name, justify=justify, overflow="fold")

    def add(name, s, skipped=""):
        tab.add_row(name, str(s["n"]), _pct(s["median_abs_error"]), _pct(s["p90_abs_error"]),
                    signed_pct(s["median_error"]),
                    signed_pct(s["worst_under"]) if (s["worst_under"] is not None or not s["n"]) else "none", str(skipped))

    for g, s in summary["by_group"].items():
        add(g, s, s["n_skipped"])
    for k, s in summary["by_kind"].items():
        if s["n"]:
            add(f"all {k}", s)
    add("all", summary, summary["n_skipped"])
    return tab


def render_table(data: dict, title: str) -> None:
    rows = data["rows"]
    tab = Table(title=title, title_justify="left")
    for name, justify in (("id", "left"), ("kind", "left"), ("stack", "left"), ("mesh", "left"),
                          ("measured GiB", "right"), ("predicted GiB", "right"), ("error", "right"),
                          ("alloc / reserved pred", "right"), ("band top", "right"), ("assumed", "right")):
        tab.add_column(name, justify=justify, overflow="fold")
    for r in rows:
        if r["skipped"] is not None:
            continue
        kind = r["kind"] + (f" ({r['stage']} stage)" if r["stage"] else "")
        tab.add_row(r["id"], kind, r["stack"] or "", r["mesh"] or "", _gib(r["measured_gib"]), _gib(r["predicted_gib"]),
                    signed_pct(r["error"]), f"{_gib(r['predicted_allocated_gib'])} / {_gib(r['predicted_reserved_gib'])}",
                    _gib(r.get("predicted_reserved_high_gib")) + {True: " in", False: ""}.get(r.get("in_band"), ""),
                    str(len(r["assumed"])))
    print_wide(tab, 170)
    print_wide(summary_table(data["summary"]), 170)
    out.print("kind: the peak the source logs (reserved: torchtitan's memory_stats()['reserved_bytes.all.peak']; "
              "allocated: Megatron-LM's mem-max-allocated-bytes on the last rank, the oracle's tracker); "
              "band top: the reserved peak's fragmentation band (reserved / allocated up to 1.45, memory.py [13]), "
              "'in' where a reserved row's measured peak lies inside it; "
              "assumed: count of inferred settings (full list: --format json)", highlight=False)
    print_skipped(rows)
