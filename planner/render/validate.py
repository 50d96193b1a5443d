"""`planner validate` for people: predicted vs published tokens/s per GPU (and memory) per
record, the error summary, and each skipped record with its reason. csv: one line per run,
lists joined."""

from __future__ import annotations

from typing import Optional

from rich.table import Table

from .common import Format, emit, out, print_skipped, print_wide, sharding_text, signed_pct

# Abbreviations of assumed fields in the table's last column.
_ABBREV = {
    "hardware": "hw", "gated_mlp": "arch", "norm": "arch", "tied_embeddings": "arch",
    "position_embedding": "arch", "linear_bias": "arch", "dropout": "arch",
    "micro_batch_size": "mbs", "vpp": "vpp", "cp": "cp", "recompute": "rc",
    "sequence_parallel": "sp", "precision": "prec", "sharding": "shard",
    "bytes_per_param": "bpp", "attention": "attn", "stack": "stack", "tp_comm_overlap": "stk",
    "dp_comm_overlap": "stk", "torch_compile": "stk", "fp8_recipe": "stk", "selective_policy": "stk",
    "micro_batch": "mbs", "moe_rank_imbalance": "imb", "fp16": "prec",  # (the stack's 16-bit dtype, runs.half_dtypes)
    "dp_param_gather_overlap": "pg",  # (the record leaves it out: tied to the DP overlap, plan.param_gather_assumed)
    # the free-text lines of plan.code_assumed (startup.model_code_assumed, model_code_compile_note), keyed by
    # the words before their colon
    "model code": "code", "torch.compile": "code",
}
_LEGEND = ("assumed: hw hardware (an entry the record marks hardware_assumed), "
           "arch architecture (gated MLP, norm, ...), mbs micro-batch, "
           "vpp, cp, rc recompute, sp sequence parallel, prec precision, shard sharding, bpp bytes/param, "
           "attn attention kernel, stk stack options from the stack's defaults, "
           "pg parameter all-gather overlap (follows the DP overlap), imb MoE routing imbalance rule, "
           "code the trainer's model code (none covers the model, or it compiles no block) (full list: --format json)")


def _abbrev(assumed: list[str]) -> str:
    seen: list[str] = []
    for a in assumed:
        head = a.split("=", 1)[0]
        if ":" in head:  # a free-text line ("model code: ..."), no name=value
            head = head.split(":", 1)[0]
        key = _ABBREV.get(head, head)
        if key not in seen:
            seen.append(key)
    return " ".join(seen)


def _num(x: Optional[float]) -> str:
    if x is None:
        return ""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}"


def summary_line(s: dict) -> str:
    if not s["n"]:
        return "n=0 (no record with both a prediction and a published tokens/s)"
    return (f"n={s['n']} median |err|={100 * s['median_abs_error']:.1f}% signed median={signed_pct(s['median_error'])} "
            f"p90 |err|={100 * s['p90_abs_error']:.1f}%")


def stack_table(summary: dict) -> None:
    """n, median |error|, signed median and p90 per software stack."""
    by = summary.get("by_stack") or {}
    if not by:
        return
    tab = Table(title="by stack", title_justify="left")
    for name, justify in (("stack", "left"), ("n", "right"), ("median |err|", "right"), ("signed median", "right"),
                          ("p90 |err|", "right")):
        tab.add_column(name, justify=justify)
    for name, st in by.items():
        tab.add_row(name, str(st["n"]), f"{100 * st['median_abs_error']:.1f}%", signed_pct(st["median_error"]),
                    f"{100 * st['p90_abs_error']:.1f}%")
    out.print(tab)


def emit_validate(data: dict, fmt: Format, title: str) -> None:
    """A validate report in `fmt` (csv: the runs, lists joined with '; ')."""
    if fmt == Format.csv:  # one line per run; lists joined
        rows = [{k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in data["runs"]]
        emit(rows, fmt, lambda: None)
    else:
        emit(data, fmt, lambda: render_table(data, title))


def render_table(data: dict, title: str = "planner validate") -> None:
    """The people's view of a validate report: one row per evaluated record, the summary
    line, then every skipped record with its reason."""
    runs = data["runs"]
    shown = [r for r in runs if r["skipped"] is None or r["predicted_memory_gib"] is not None]
    tab = Table(title=title, title_justify="left")
    for name, justify in (("id", "left"), ("hardware", "left"), ("mesh", "left"), ("sharding", "left"),
                          ("pred tok/s/GPU", "right"), ("published", "right"), ("error", "right"),
                          ("mem GiB pred/pub", "right"), ("assumed", "left")):
        tab.add_column(name, justify=justify, overflow="fold")
    for r in shown:
        mem = _num(r["predicted_memory_gib"])
        if r["published_memory_gib"] is not None:
            mem += f" / {_num(r['published_memory_gib'])} ({signed_pct(r['memory_error'])})"
        pub = _num(r["published_tokens_per_s_per_gpu"])
        if r.get("published_from") == "iteration_time_s":
            pub += "*"
        # the plan's sharding as fit's column shows it (the stack's own words where stack_db gives them: sharding_label)
        shard = sharding_text(r["plan"]) if r.get("plan") else ""
        tab.add_row(r["id"], r["hardware"] or "", r["mesh"] or "", shard, _num(r["predicted_tokens_per_s_per_gpu"]),
                    pub, signed_pct(r["error"]), mem, _abbrev(r["assumed"]))
    # piped output (files, CI logs, tests) gets room for the ids
    print_wide(tab, 170)
    if any(r.get("published_from") == "iteration_time_s" for r in shown):
        out.print("* published tokens/s derived from iteration_time_s: global_batch x seq / (time x GPUs)")
    out.print(_LEGEND)
    stack_table(data["summary"])
    out.print(summary_line(data["summary"]), highlight=False)
    s = data["summary"]
    if s.get("n_memory"):
        out.print(f"memory: n={s['n_memory']} median |err|={100 * s['median_abs_memory_error']:.1f}% "
                  f"signed median={signed_pct(s['median_memory_error'])} max |err|={100 * s['max_abs_memory_error']:.1f}% "
                  "(against what each stack logs: torchtitan max reserved)", highlight=False)
    print_skipped(runs)
