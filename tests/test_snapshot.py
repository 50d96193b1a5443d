"""Predictions stay what they were: every record of tests/data's reference runs (dense and
MoE) and a grid of explain plans over the zoo give the same JSON as the snapshot taken before
the layer-kind restructure (issue 20; tests/snapshot_cases.py says how it was written), up to
float rounding (relative 1e-9). A change of a figure on purpose rewrites the snapshot in the
same commit and names the figures that moved."""

from __future__ import annotations

import fnmatch
import json
import math

import pytest

from tests.snapshot_cases import SNAPSHOT, all_cases

REL = 1e-9
# keys the JSON contract gained since the snapshot (DESIGN.md: add keys freely, never rename)
ADDED = {".params.layer_kinds", ".layers", ".memory.allocated_bytes", ".memory.reserved_bytes", ".memory.terms.stream_pools", ".memory.terms.workspaces",
         ".memory.stages.*.allocated_bytes", ".memory.stages.*.reserved_bytes",
         ".plan.sharding_mode", ".plan.etp"}  # issue 22: the stack's mode that runs the plan, expert TP
ADDED |= {".placement", ".moe"}  # issue 23: each group's tier, the MoE dispatcher terms
ADDED |= {".moe.route_groups"}  # issue 23: the model's group-limited routing, which caps the dispatch's nodes
ADDED |= {".memory.terms.quantized_weights", ".memory.terms.mpu_buffer"}  # issue 21: TE's quantized weight copies, Megatron's global memory buffer (memory.py [11], [12])
ADDED |= {".memory.reserved_high_bytes", ".memory.stages.*.reserved_high_bytes", ".memory.fragmentation"}  # issue 21: the reserved peak's fragmentation band (memory.py [13])
ADDED |= {".memory.terms.optimizer_step", ".memory.terms.model_buffers"}  # issue 21: the optimizer step's moment, the RoPE tables (memory.py [opt], [tt9])
ADDED |= {".time.unfused_passes_s"}  # issue 23: the share of compute the stack's unfused elementwise passes take (gpt-oss)
ADDED |= {".time.cp_compute_s"}  # issue 22: context parallelism's own GPU work (merges, per-step kernels), inside compute_s
ADDED |= {".assumed"}  # issue 24: a job without seq_len lists its training length as assumed (plan._seq_len): the published training.seq_len, or plan.HF_DEFAULT_SEQ
ADDED |= {".memory.terms.tp_overlap_buffers"}  # issue 21: TP overlap's buffers outside the allocator (memory.py [ub])
ADDED |= {".memory.terms.dummy_wgrads"}  # issue 21: Transformer Engine's cached dummy weight gradients (memory.py [dw])
ADDED |= {".plan.attention_kernel"}  # issues 22/23: the attention kernel priced (compute.attention_kernel: TE's cuDNN on Hopper+)
ADDED |= {".memory.capacity_source"}  # issue 21: which HBM the gate used: measured (hbm_visible_GiB, as CUDA reports it) or datasheet (hbm_GB)
ADDED |= {".memory.terms.ep_buffers"}  # issue 23: DeepEP's / Hybrid-EP's buffers outside the allocator (memory.py [ep], planner/ep_buffers.py)
ADDED |= {".plan.recompute_modules"}  # issue 23: Megatron --recompute-modules, the selective policy they make (planner/recompute_modules.py)


def _diff(a, b, path="", out=None):
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a and any(fnmatch.fnmatchcase(f"{path}.{k}", pat) for pat in ADDED):
                continue
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing now' if k not in b else 'new'}")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                and math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)):
            out.append(f"{path}: {a!r} -> {b!r}")
    elif a != b:
        out.append(f"{path}: {a!r} -> {b!r}")
    return out


@pytest.fixture(scope="module")
def now():
    return all_cases()


@pytest.fixture(scope="module")
def before():
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_snapshot_covers_dense_and_moe_records(before):
    ran = [k for k, v in before.items() if "plan" in v]
    assert sum(k.startswith("published_runs.yaml:") for k in ran) >= 130
    assert sum(k.startswith("published_runs_moe.yaml:") for k in ran) >= 8
    assert sum(k.startswith("published_runs_lowprec.yaml:") for k in ran) >= 16
    assert sum(k.startswith("grid:") for k in ran) >= 65


def test_predictions_match_the_snapshot(now, before):
    assert set(now) == set(before)
    diffs = {k: _diff(before[k], now[k]) for k in before}
    bad = {k: d[:6] for k, d in diffs.items() if d}
    assert not bad, json.dumps(bad, indent=1)[:6000]
