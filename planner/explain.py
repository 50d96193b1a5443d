"""One evaluation path for one plan or a million: `evaluate` runs every cost model on a
PlanArrays and `to_json` turns one row into the stable JSON contract (DESIGN.md):
plan, params, memory, flops (and, once the time model lands, time and throughput).
`explain` and `search` both call `evaluate`, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import memory as mem
from .compute import flops_summary
from .params import count_params
from .plan import PlanArrays, Settings, plan_dict
from .terms import Terms


@dataclass
class Estimate:
    memory: Terms  # per-GPU bytes on the heaviest stage, by term
    stage: np.ndarray  # 0 first stage, 1 last stage
    capacity: float  # HBM bytes
    usable: float  # HBM x (1 - headroom)
    fits: np.ndarray  # bool
    flops: dict  # per-token FLOPs by convention

    def take(self, idx) -> "Estimate":
        return Estimate(
            memory=self.memory.take(idx),
            stage=self.stage[idx],
            capacity=self.capacity,
            usable=self.usable,
            fits=self.fits[idx],
            flops={k: (v[idx] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in self.flops.items()},
        )


def evaluate(settings: Settings, plan: PlanArrays) -> Estimate:
    terms, stage = mem.memory_terms(settings, plan)
    cap, usable = mem.capacity(settings)
    flops = flops_summary(settings.model, plan.seq, plan.recompute, settings.causal_attention_flops, settings.tokens)
    return Estimate(memory=terms, stage=stage, capacity=cap, usable=usable, fits=terms.total <= usable, flops=flops)


def _num(v):
    v = np.asarray(v)
    if v.dtype.kind in "iu":
        return int(v)
    if v.dtype.kind == "b":
        return bool(v)
    return float(v)


def to_json(settings: Settings, plan: PlanArrays, est: Estimate, i=None) -> dict:
    """The JSON object of one plan (i indexes 1-d arrays; None for 0-d)."""
    def pick(v):
        v = np.asarray(v)
        return v if (i is None or v.ndim == 0) else v[i]

    pc = count_params(settings.model)
    memory = {k: _num(pick(v)) for k, v in mem.grouped(est.memory).items()}
    memory.update(
        capacity_bytes=float(est.capacity),
        usable_bytes=float(est.usable),
        headroom=settings.headroom,
        fits=bool(pick(est.fits)),
        heaviest_stage="last" if int(pick(est.stage)) == 1 else "first",
        terms={k: _num(pick(v)) for k, v in est.memory.items()},
    )
    flops = {k: (_num(pick(v)) if not isinstance(v, str) else v) for k, v in est.flops.items()}
    return {
        "plan": plan_dict(plan, settings, i),
        "params": pc.as_dict(),
        "memory": memory,
        "flops": flops,
    }
