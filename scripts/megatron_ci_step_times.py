"""The Megatron-LM CI corpus' step times against the planner, without and with each row's NCCL environment.

tests/data/megatron_ci/corpus.json records each row's `ground_truth.step_time_s` (the median iteration-time after
the first 10% of logged samples) beside its memory. `planner validate` compares memory only; this prints the step
time the planner predicts for the same jobs (planner/megatron_ci.py resolve_row, then step.step_time's total), err =
predicted / measured - 1, twice: without the rows' NCCL environment (NCCL's own algorithm and protocol choice) and
with it (megatron_ci.nccl_env: the case's ENV_VARS NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE, else the CI training script's exported
defaults, NCCL_PROTO simple, NCCL_ALGO Ring and NCCL_NVLS_ENABLE 0 from NVIDIA/Megatron-LM ef1888bc5c, 2026-04-20). The rows are tiny
models (most hidden 512, 12 layers: tests/data/megatron_ci/README.md) whose step is dominated by what the planner does not price (Python, kernel
launches, the data loader, logging; docs/host_overhead.md and scripts/megatron_ci_host_gap.py: a host floor of about
6-10 ms per layer and micro-batch, not priced), so the errors are large and one-sided; the comparison says how much of the step
the NCCL environment moves, not that the step model fits these runs. Nothing is fitted to them.

    PYTHONPATH=. python scripts/megatron_ci_step_times.py [--markdown]

Read by no test; run by hand (a few minutes).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import megatron_ci as m  # noqa: E402
from planner.step import step_time  # noqa: E402

CORPUS = ROOT / "tests/data/megatron_ci/corpus.json"


def predict(r: dict, nccl: bool) -> tuple[float | None, list[str]]:
    out = m.CIRow(row_id=r["row_id"], tier=None, family=r.get("family"), gpu=r.get("gpu"),
                  world_size=r.get("world_size"), measured_bytes=None)
    try:
        settings, plan = m.resolve_row(r, CORPUS.parent, out, nccl=nccl)
    except m.Skip as s:
        return None, [str(s)]
    return float(np.asarray(step_time(settings, plan)[0].total).reshape(-1)[0]), out.assumed


def stats(err: list[float]) -> str:
    if not err:
        return "n 0"
    e = np.asarray(err)
    return (f"n {e.size}, signed median {np.median(e):+.1%}, median |err| {np.median(np.abs(e)):.1%}, "
            f"p90 |err| {np.percentile(np.abs(e), 90):.1%}")


def main(markdown: bool = False) -> None:
    rows = json.loads(CORPUS.read_text())["rows"]
    groups: dict[str, tuple[list, list]] = {}
    moved = []
    for r in rows:
        measured = (r.get("ground_truth") or {}).get("step_time_s")
        if not measured:
            continue
        before, _ = predict(r, nccl=False)
        after, notes = predict(r, nccl=True)
        if before is None or after is None:
            continue
        fields, _ = m.nccl_env(r)
        key = ", ".join(f"{k} {v}" for k, v in sorted(fields.items())) or "no NCCL variable applied"
        for name in ("all", f"{r.get('gpu')}: {key}"):
            b, a = groups.setdefault(name, ([], []))
            b.append(before / measured - 1.0)
            a.append(after / measured - 1.0)
        if after != before:
            moved.append((r["row_id"], measured, before, after))
    for name, (b, a) in sorted(groups.items(), key=lambda kv: (kv[0] != "all", kv[0])):
        print(f"{name}\n  without the NCCL environment: {stats(b)}\n  with it:                      {stats(a)}")
    print(f"rows whose prediction moved: {len(moved)}")
    if markdown:
        print("\n| row | measured (s) | without (s) | with (s) |\n| --- | ---: | ---: | ---: |")
        for rid, meas, b, a in sorted(moved, key=lambda x: -abs(x[3] / x[2] - 1.0))[:15]:
            print(f"| `{rid}` | {meas:.4f} | {b:.4f} | {a:.4f} |")


if __name__ == "__main__":
    main("--markdown" in sys.argv[1:])
