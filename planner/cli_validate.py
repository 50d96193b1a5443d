"""`planner validate RUNS.yaml`: predicted vs published tokens/s per GPU (and memory) for a
file of published training runs. The library is planner/validate.py (inference rules and
statistics in its docstring); this module parses options and renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .cli_common import Format, FormatOption, cli_errors, out

# Abbreviations of assumed fields in the table's last column.
_ABBREV = {
    "hardware": "hw", "gated_mlp": "arch", "norm": "arch", "tied_embeddings": "arch",
    "position_embedding": "arch", "linear_bias": "arch", "dropout": "arch",
    "micro_batch_size": "mbs", "vpp": "vpp", "cp": "cp", "activation_recompute": "rc",
    "sequence_parallel": "sp", "precision": "prec", "zero_fsdp_mode": "shard",
    "bytes_per_param": "bpp", "attention": "attn",
}
_LEGEND = ("assumed: hw hardware from gpu_type, arch architecture (gated MLP, norm, ...), mbs micro-batch, "
           "vpp, cp, rc recompute, sp sequence parallel, prec precision, shard sharding, bpp bytes/param, "
           "attn attention kernel (full list: --format json)")


def _abbrev(assumed: list[str]) -> str:
    seen: list[str] = []
    for a in assumed:
        key = _ABBREV.get(a.split("=", 1)[0], a.split("=", 1)[0])
        if key not in seen:
            seen.append(key)
    return " ".join(seen)


def _pct(x: Optional[float]) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def _num(x: Optional[float]) -> str:
    if x is None:
        return ""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}"


def summary_line(s: dict) -> str:
    if not s["n"]:
        return "n=0 (no record with both a prediction and a published tokens/s)"
    return f"n={s['n']} median |err|={100 * s['median_abs_error']:.1f}% p90 |err|={100 * s['p90_abs_error']:.1f}%"


def render_table(data: dict, title: str = "planner validate") -> None:
    """The people's view of a validate report: one row per evaluated record, the summary
    line, then every skipped record with its reason."""
    runs = data["runs"]
    shown = [r for r in runs if r["skipped"] is None or r["predicted_memory_gib"] is not None]
    tab = Table(title=title, title_justify="left")
    for name, justify in (("id", "left"), ("hardware", "left"), ("mesh", "left"), ("pred tok/s/GPU", "right"),
                          ("published", "right"), ("error", "right"), ("mem GiB pred/pub", "right"), ("assumed", "left")):
        tab.add_column(name, justify=justify, overflow="fold")
    for r in shown:
        mem = _num(r["predicted_memory_gib"])
        if r["published_memory_gib"] is not None:
            mem += f" / {_num(r['published_memory_gib'])} ({_pct(r['memory_error'])})"
        pub = _num(r["published_tokens_per_s_per_gpu"])
        if r.get("published_from") == "iteration_time_s":
            pub += "*"
        tab.add_row(r["id"], r["hardware"] or "", r["mesh"] or "", _num(r["predicted_tokens_per_s_per_gpu"]),
                    pub, _pct(r["error"]), mem, _abbrev(r["assumed"]))
    # A terminal sets its own width; piped output (files, CI logs, tests) gets room for the ids.
    (out if out.is_terminal else Console(soft_wrap=True, width=170)).print(tab)
    if any(r.get("published_from") == "iteration_time_s" for r in shown):
        out.print("* published tokens/s derived from iteration_time_s: global_batch x seq / (time x GPUs)")
    out.print(_LEGEND)
    out.print(summary_line(data["summary"]), highlight=False)
    skipped = [r for r in runs if r["skipped"] is not None]
    if skipped:
        out.print(f"skipped ({len(skipped)}):", highlight=False)
        for r in skipped:
            out.print(f"  {r['id']}: {r['skipped']}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    @app.command("validate")
    @cli_errors
    def validate_cmd(
        runs: Path = typer.Argument(..., help="YAML list of published runs (schema of tests/data/published_runs.yaml)"),
        group: Optional[list[str]] = typer.Option(None, "--group", help="only records of this source_group (repeatable)"),
        ids: Optional[str] = typer.Option(None, "--ids", help="only these record ids (comma-separated)"),
        complete: bool = typer.Option(
            False, "--complete",
            help="only the complete records: Megatron-LM 2021 Table 1, Megatron-LM README H100, MosaicML FSDP, "
                 "torchtitan 2024 groups with published tokens/s (or iteration time) and tp, pp, num_gpus",
        ),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="calibration profile from `planner calibrate`"),
        fmt: Format = FormatOption,
    ) -> None:
        """Compare predicted with published tokens/s per GPU (and memory per GPU) for each run
        record; print the relative errors, their count, median and 90th percentile, and every
        skipped record with its reason. Assumed fields are listed per record."""
        from .render import emit
        from .validate import report

        id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None
        data = report(runs, groups=group or None, ids=id_list, complete=complete,
                      calibration=str(calibration) if calibration else None)
        if fmt == Format.csv:  # one line per run; lists joined
            rows = [{k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in data["runs"]]
            emit(rows, fmt, lambda: None)
        else:
            emit(data, fmt, lambda: render_table(data, f"planner validate {runs}"))
