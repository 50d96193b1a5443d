"""`planner pipeline`: the text timeline for people (planner/pipeline.py timeline_text, the seed's sec. 5.3
notation), or the simulation's report (pipeline.simulation_report) in json / yaml / csv through render.common.emit.
csv: one line per stage (the schedule's figures repeated on each, the closed form's peak of that stage), the passes
left to json / yaml."""

from __future__ import annotations

from typing import Callable

from .common import Format, emit


def emit_pipeline(report: dict, fmt: Format, table: Callable[[], None]) -> None:
    if fmt == Format.csv:
        head = {k: v for k, v in report.items() if k not in ("stages", "passes", "closed_form")}
        cf = report.get("closed_form")
        rows = []
        for st in report["stages"]:
            row = {**head, **st}
            if cf is not None:
                row |= {"closed_form_bubble_formula": cf["bubble_formula"], "closed_form_bubble": cf["bubble"],
                        "closed_form_peak_stored": cf["peak_stored"][st["stage"]]}
            rows.append(row)
        emit(rows, fmt, table)
    else:
        emit(report, fmt, table)
