"""Where the Megatron-LM CI corpus' step time goes that the step model does not price (docs/host_overhead.md).

For every row that scripts/megatron_ci_step_times.py compares (352: a training row the planner resolves, with a
measured `ground_truth.step_time_s`), the planner's step (planner/megatron_ci.py resolve_row with the row's NCCL
environment, then step.step_time's total) against the measured one, and the gap = measured - predicted spread over
the rows' shapes: per GPU, hidden size, layers a pipeline stage holds (num_layers / pp), micro-batches a step (m),
TP degree, layer kind (MoE or dense) and Megatron's --transformer-impl. "per layer-mb" divides a row's gap (or
measured or predicted time) by the layer-micro-batches a stage runs in one step, (num_layers / pp) x m: what a cost
paid once per layer per micro-batch (a host's issue of a layer's forward and backward) would be. The last table is
an ordinary least-squares line gap = a + b x layer-micro-batches per GPU, descriptive only: nothing here is fed back
into the planner (the corpus is validation data; no constant is fitted to it).

    PYTHONPATH=. python scripts/megatron_ci_host_gap.py

Read by no test; run by hand (about a minute).
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import megatron_ci as m  # noqa: E402
from planner.step import step_time  # noqa: E402

CORPUS = ROOT / "tests/data/megatron_ci/corpus.json"


def _f(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def rows() -> list[dict]:
    out = []
    for r in json.loads(CORPUS.read_text())["rows"]:
        measured = (r.get("ground_truth") or {}).get("step_time_s")
        if not measured:
            continue
        row = m.CIRow(row_id=r["row_id"], tier=None, family=r.get("family"), gpu=r.get("gpu"),
                      world_size=r.get("world_size"), measured_bytes=None)
        try:
            settings, plan = m.resolve_row(r, CORPUS.parent, row, nccl=True)
        except m.Skip:
            continue
        terms, _ = step_time(settings, plan)
        model = settings.model
        lmb = model.num_layers / _f(plan.pp) * _f(plan.microbatches)
        out.append({"row": r["row_id"], "gpu": r.get("gpu"), "measured": measured, "predicted": _f(terms.total),
                    "h": model.hidden_size, "layers_per_stage": model.num_layers / _f(plan.pp),
                    "m": int(_f(plan.microbatches)), "tp": int(_f(plan.tp)), "lmb": lmb,
                    "moe": getattr(model, "moe", None) is not None, "impl": str(settings.transformer_impl)})
    return out


def table(title: str, data: list[dict], key) -> None:
    groups: dict = defaultdict(list)
    for d in data:
        groups[key(d)].append(d)
    print(f"\n{title}\n| group | rows | signed median | measured / layer-mb (ms) | predicted / layer-mb (ms) "
          "| gap / layer-mb (ms): median (p10-p90) |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for k in sorted(groups, key=str):
        g = groups[k]
        err = np.array([d["predicted"] / d["measured"] - 1.0 for d in g])
        meas = np.array([d["measured"] / d["lmb"] for d in g]) * 1e3
        pred = np.array([d["predicted"] / d["lmb"] for d in g]) * 1e3
        gap = meas - pred
        print(f"| {k} | {len(g)} | {np.median(err):+.1%} | {np.median(meas):.2f} | {np.median(pred):.2f} | "
              f"{np.median(gap):.2f} ({np.percentile(gap, 10):.2f}-{np.percentile(gap, 90):.2f}) |")


def lines(data: list[dict]) -> None:
    print("\nleast squares, gap (s) = a + b x layer-micro-batches (descriptive)\n"
          "| GPU | rows | a (s) | b (ms per layer-mb) | correlation |\n| --- | ---: | ---: | ---: | ---: |")
    for gpu in sorted({d["gpu"] for d in data}):
        g = [d for d in data if d["gpu"] == gpu]
        x = np.array([d["lmb"] for d in g])
        y = np.array([d["measured"] - d["predicted"] for d in g])
        (a, b), *_ = np.linalg.lstsq(np.c_[np.ones_like(x), x], y, rcond=None)
        print(f"| {gpu} | {len(g)} | {a:.3f} | {b * 1e3:.2f} | {np.corrcoef(x, y)[0, 1]:.2f} |")


def main() -> None:
    data = rows()
    err = np.array([d["predicted"] / d["measured"] - 1.0 for d in data])
    print(f"{len(data)} rows: signed median {np.median(err):+.1%}, median |err| {np.median(np.abs(err)):.1%}")
    table("by GPU", data, lambda d: d["gpu"])
    table("by hidden size", data, lambda d: d["h"])
    table("by GPU and layers a stage holds (num_layers / pp)", data, lambda d: (d["gpu"], d["layers_per_stage"]))
    table("by GPU and micro-batches a step (m)", data, lambda d: (d["gpu"], d["m"]))
    table("hidden 512 by GPU and TP degree", [d for d in data if d["h"] == 512], lambda d: (d["gpu"], d["tp"]))
    table("by GPU and layer kind (MoE or dense)", data, lambda d: (d["gpu"], "moe" if d["moe"] else "dense"))
    table("by GPU and --transformer-impl", data, lambda d: (d["gpu"], d["impl"]))
    lines(data)
    launch_bound(data)


# What a launch-bound host term could add at most (docs/host_overhead.md "What a launch term would explain"): K
# kernels a layer per micro-batch (forward + backward + the unfused gradient accumulation; the doc's count from the
# code, about 50-100) at t_launch a launch (Meta's Holistic Trace Analysis documentation: "Usually, the launch time on
# the CPU side is between 5-20 microseconds", facebookresearch/HolisticTraceAnalysis
# @0c2146a8 docs/source/features/cuda_kernel_launch_stats.rst). Added whole to the prediction, an upper bound on
# max(GPU time, host time) per layer. Ranges from their sources, not fitted: no value is chosen among them.
KERNELS_PER_LAYER_MB = (50, 100)
LAUNCH_S = (5e-6, 20e-6)


def launch_bound(data: list[dict]) -> None:
    print("\nupper bound of a launch term: prediction + layer-mb x K x t_launch (added whole)\n"
          "| K | t_launch (us) | signed median | median abs |\n| ---: | ---: | ---: | ---: |")
    for k in KERNELS_PER_LAYER_MB:
        for t in LAUNCH_S:
            err = np.array([(d["predicted"] + d["lmb"] * k * t) / d["measured"] - 1.0 for d in data])
            print(f"| {k} | {t * 1e6:g} | {np.median(err):+.1%} | {np.median(np.abs(err)):.1%} |")


if __name__ == "__main__":
    main()
