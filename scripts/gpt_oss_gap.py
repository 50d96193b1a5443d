"""The figures of docs/gpt_oss_gap.md: for each record of one model (the records' `model`
field), the published and the predicted step, the time the prediction lacks per step, per
token and per layer and micro-batch, and the error without the fitted MoE host term.

    PYTHONPATH=. python scripts/gpt_oss_gap.py [tests/data/published_runs_moe.yaml] [--model gpt-oss-120b]

Published step = global batch x sequence length / (GPUs x published tokens/s per GPU). The
lacking time is published - predicted. Per token: over the tokens one GPU processes in a step
(global batch x sequence / GPUs). Per layer and micro-batch: over the (micro-batches + pipeline
stages - 1) x layers-per-stage slots of the critical rank (1F1B's forward-backward slots; the
head and loss are left in, so this is an upper bound of what a missing per-layer cost could be).
"Without moe_host": the same plan with the stack's fitted host term at zero (as
scripts/fit_moe_host.py's "without the term" column); "no-host lack s" is the published step less
that plan's step: what the planner lacks where its fitted host term is not counted. "fwd bound":
"host" where the MoE layers' forward is the host's issue time (step.moe_host exposed: the forward
GPU time, and any GPU cost missing from it up to the exposed host time, is hidden), "gpu" where
the forward GPU time outlasts the issue (docs/moe_gpt_oss.md). Records of stacks without the
term are left out (scripts/fit_moe_host.py prepared).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_moe_host import prepared, tokens_per_gpu  # noqa: E402
from planner.step import _context, layer_times, step_time  # noqa: E402


def first(x) -> float:
    return float(np.ravel(x)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="?", default=str(ROOT / "tests/data/published_runs_moe.yaml"))
    ap.add_argument("--model", default="gpt-oss-120b")
    a = ap.parse_args(argv)
    print(f"{'record':50s} {'GPU':12s} {'pub s':>6s} {'pred s':>6s} {'err':>7s} {'no-host err':>11s} "
          f"{'lack s':>6s} {'us/token':>8s} {'ms/layer-mb':>11s} {'host s':>6s} {'no-host lack s':>14s} {'fwd bound':>9s}")
    for rid, settings, plan, pub in prepared(Path(a.runs), keep=lambda rec: rec.model == a.model):
        terms, _ = step_time(settings, plan)
        pred = first(terms.total)
        gpus = first(plan.tp * plan.cp * plan.pp * plan.dp)
        tokens = first(plan.gbs * plan.seq) / gpus
        pub_step = tokens / pub
        lack = pub_step - pred
        pp = first(plan.pp)
        slots = (first(plan.microbatches) + pp - 1) * settings.model.num_layers / pp
        no_host = first(tokens_per_gpu(settings, plan, 0.0, 0.0))
        lt = layer_times(_context(settings, plan))
        bound = "host" if any(first(h) > 0.0 for h in lt.host_fwd) else "gpu"
        print(f"{rid[:50]:50s} {settings.hardware.name:12s} {pub_step:6.2f} {pred:6.2f} {pub_step / pred - 1:+7.1%} "
              f"{no_host / pub - 1:+11.1%} {lack:6.2f} {1e6 * lack / tokens:8.1f} {1e3 * lack / slots:11.2f} "
              f"{first(terms['moe_host']):6.2f} {pub_step - tokens / no_host:14.2f} {bound:>9s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
