"""The figures of docs/gemm_k.md: the GEMM time model against every row of
tests/data/gemm_measurements.yaml that has a shape (M, N, K, or M per group with groups) on a GPU
with a hardware entry and a modelled precision (bf16 / fp16 rows as bf16, fp8 rows as fp8), at the
benchmarks' clock (no SUSTAINED_TENSOR_FRACTION, no power envelope).

    PYTHONPATH=. python scripts/gemm_k.py

Models (rates, TFLOP/s; a grouped or batched row is `x` GEMMs of its shape, each with its own waves):
- before: 2MNK / (R x wave efficiency), R the entry's measured figure (compute._burst): the model
  without the epilogue term;
- after: compute.gemm_time at compute._mainloop_burst and compute.gemm_epilogue_rate (compute [5a]);
- roofline: max(before, (in_bytes x (MK + KN) + 2 MN) / (HBM x HBM_EFFICIENCY)), the overlapped
  alternative (in_bytes 1 for fp8, 2 for bf16).
Error = model / measured - 1; groups: source (DeepGEMM's M <= 128 rows apart), GPU family.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import compute as c  # noqa: E402
from planner.catalog import load_hardware  # noqa: E402

GPUS = (("h800", "h800-sxm"), ("h200", "h200-sxm"), ("h100", "h100-sxm"), ("a100 sxm", "a100-sxm-80gb"),
        ("a100 40gb", "a100-sxm-40gb"), ("b200", "b200"), ("gb200", "gb200-nvl72"), ("mi300x", "mi300x"))
MODELS = ("before", "after", "roofline")


def hardware_of(gpu: str):
    g = gpu.lower()
    return next((name for prefix, name in GPUS if g.startswith(prefix)), None)


def precision_of(dtype: str):
    d = dtype.lower()
    return "fp8" if d.startswith("fp8") else "bf16" if d in ("bf16", "fp16") else None


def rate(row, model: str) -> float:
    hw = load_hardware(hardware_of(row["gpu"]))
    p = precision_of(row["dtype"])
    sms = hw.compute.sm_count
    m, n, k = float(row.get("M", row.get("M_per_group"))), float(row["N"]), float(row["K"])
    flops = 2.0 * m * n * k
    before = flops / (c._burst(hw, p) * c.wave_efficiency(m, n, sms))
    if model == "before":
        t = before
    elif model == "after":
        t = c.gemm_time(m, n, k, c._mainloop_burst(hw, p), sms, c.gemm_epilogue_rate(hw))
    else:
        in_bytes = 1.0 if p == "fp8" else 2.0
        t = max(before, (in_bytes * (m * k + k * n) + 2.0 * m * n) / (hw.hbm_TBps * 1e12 * c.HBM_EFFICIENCY))
    return float(flops / t / 1e12)


def main() -> None:
    ref = yaml.safe_load((ROOT / "tests" / "data" / "gemm_measurements.yaml").read_text())
    rows = [r for r in ref["measurements"]
            if ("M" in r or "M_per_group" in r) and hardware_of(r["gpu"]) and precision_of(r["dtype"])]
    groups: dict = defaultdict(lambda: defaultdict(list))
    print("| source | GPU | dtype | M | N | K | x | measured | before | after | roofline |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        small = r["source"] == "deepgemm" and r.get("M", 1 << 30) <= 128
        hw = hardware_of(r["gpu"])
        keys = [r["source"] + (" grouped" if "groups" in r else "") + (" M <= 128" if small else ""),
                "GPU family: " + ("Hopper" if (load_hardware(hw).capability or (0, 0))[0] == 9 else hw) + (" (DeepGEMM M <= 128)" if small else ""),
                "all rows"] + ([] if small else ["all rows but DeepGEMM's M <= 128"])
        got = {m: rate(r, m) for m in MODELS}
        for m in MODELS:
            for key in keys:
                groups[key][m].append(got[m] / r["tflops"] - 1.0)
        m_ = int(r.get("M", r.get("M_per_group")))
        print(f"| {r['source']} | {r['gpu']} | {r['dtype']} | {m_:,} | {r['N']:,} | {r['K']:,} | "
              f"{r.get('groups', 1) * r.get('batch', 1)} | {r['tflops']:,.1f} | "
              + " | ".join(f"{got[m]:,.1f}" for m in MODELS) + " |")
    print()
    print("| rows | n | " + " | ".join(f"{m}: median error / median \\|error\\|" for m in MODELS) + " |")
    print("|---|---:|" + "---:|" * len(MODELS))
    for key in sorted(groups):
        d = groups[key]
        print(f"| {key} | {len(d['before'])} | " + " | ".join(
            f"{100 * np.median(d[m]):+.1f}% / {100 * np.median(np.abs(d[m])):.1f}%" for m in MODELS) + " |")


if __name__ == "__main__":
    main()
