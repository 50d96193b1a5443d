"""`planner models` and `planner hardware`: the catalogs as tables."""

from __future__ import annotations

from rich.table import Table

from .common import Format, emit, human_count, print_wide

MODEL_COLUMNS = [
    ("name", "name"), ("params", "params"), ("active", "active"), ("experts", "experts"), ("layers", "layers"), ("hidden", "hidden"), ("ffn", "ffn"),
    ("heads", "heads"), ("kv_heads", "kv"), ("vocab", "vocab"), ("mlp", "mlp"), ("seq", "context"), ("train_seq", "train seq")]
HARDWARE_COLUMNS = [
    ("name", "name"), ("hbm_GB", "HBM GB"), ("hbm_visible_GiB", "HBM GiB (CUDA)"), ("hbm_TBps", "TB/s"), ("bf16_TFLOPS", "BF16 TF"),
    ("fp8_TFLOPS", "FP8 TF"), ("fp4_TFLOPS", "FP4 TF"), ("tdp_W", "TDP W"), ("gpus_per_node", "GPUs/node"), ("nvlink_domain", "NVL domain"),
    ("nvlink_GBps", "NVLink GB/s"), ("network_Gbps", "NIC Gb/s"), ("pod_gpus", "pod"), ("oversubscription", "1:N")]


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:,}" if isinstance(v, int) else str(v)


def list_table(title: str, rows: list[dict], cols: list[tuple[str, str]]) -> None:
    """One row per record, `cols` = (key, header); ints with thousands separators."""
    tab = Table(title=title, title_justify="left")
    cells = [[_cell(r.get(k)) for k, _ in cols] for r in rows]
    for j, (key, header) in enumerate(cols):
        if key == "name":  # what a user types back: never cut (`llam…`), at any terminal width or in a pipe
            tab.add_column(header, no_wrap=True, min_width=max([len(header)] + [len(c[j]) for c in cells]))
        else:
            tab.add_column(header)
    for c in cells:
        tab.add_row(*c)
    print_wide(tab, 1000)


def emit_models(rows: list[dict], fmt: Format) -> None:
    """The model catalog; the table writes parameter counts in words."""
    emit(rows, fmt, lambda: list_table("model_zoo", [{**r, "params": human_count(r["params"]),
                                                     "active": human_count(r["active"]) if r.get("experts") else None}
                                                    for r in rows],
                                       MODEL_COLUMNS))


def emit_hardware(rows: list[dict], fmt: Format) -> None:
    emit(rows, fmt, lambda: list_table("hardware_db", rows, HARDWARE_COLUMNS))


STACK_COLUMNS = [
    ("name", "name"), ("attention", "attention kernel"), ("compile", "compile"), ("tp_comm_overlap", "TP overlap"),
    ("grad_reduce_bytes", "grad reduce B"), ("fp8_recipes", "fp8 recipes"), ("reports", "memory logged")]


def emit_stacks(rows: list[dict], fmt: Format) -> None:
    emit(rows, fmt, lambda: list_table("stack_db", rows, STACK_COLUMNS))
