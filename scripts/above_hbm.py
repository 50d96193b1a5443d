"""The published records the planner prices above their GPU's visible HBM (issue 21): a run
published as trained held its step in the GPU's memory, so a record whose heaviest stage is
priced above it is a memory over-count (the direction that makes `fit` throw runnable plans
away), or a record that cannot be what ran.

    PYTHONPATH=. python scripts/above_hbm.py [RUNS.yaml ...] [--all] [--terms N]

The gate is what `planner check` gates on (planner/check.py): memory.total_bytes, the caching
allocator's reserved peak plus what lives outside it (the CUDA context and NCCL reserve, TP
overlap's buffers), against memory.capacity_bytes (the HBM the GPU reports to CUDA where
hardware_db measured it, else the datasheet's). The allocated peak + the outside terms is listed
beside it (Megatron logs the allocated peak). Rows are sorted by gate / HBM, largest first;
--all lists every record, --terms the N largest memory terms of each listed row.
Default runs files: tests/data/published_runs*.yaml.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import validate as V  # noqa: E402
from planner.explain import evaluate, to_json  # noqa: E402

GiB = 2.0**30


def priced(path: Path) -> list[dict]:
    """One dict per record of `path` that the planner evaluates: id, hardware, mesh, HBM, the
    gate (total), allocated, reserved and outside bytes of the heaviest stage, its terms and
    the per-stage totals."""
    out = []
    records = V.load_runs(path)
    with tempfile.TemporaryDirectory(prefix="above-hbm-") as d:
        for rec in records:
            row = V.new_row(rec)
            try:
                settings, plan = V.prepare_record(rec, row, Path(d), path.resolve().parent, str(path))
            except V.Skip:
                continue
            res = to_json(settings, plan, evaluate(settings, plan))
            m = res["memory"]
            outside = m["total_bytes"] - m["reserved_bytes"]
            out.append({
                "id": rec.id, "file": path.name, "hardware": row.hardware, "stack": row.stack,
                "mesh": V._mesh(res["plan"]), "hbm": m["capacity_bytes"], "gate": m["total_bytes"],
                "allocated": m["allocated_bytes"], "reserved": m["reserved_bytes"], "outside": outside,
                "published": rec.memory_per_gpu_gib, "terms": m["terms"],
                "stages": {k: v["total_bytes"] for k, v in (m.get("stages") or {}).items()},
            })
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", default=sorted(str(p) for p in (ROOT / "tests/data").glob("published_runs*.yaml")))
    ap.add_argument("--all", action="store_true", help="list every record, not only those above HBM")
    ap.add_argument("--terms", type=int, default=6, help="the N largest memory terms of each listed row")
    a = ap.parse_args(argv)
    rows = [r for p in a.runs for r in priced(Path(p))]
    rows.sort(key=lambda r: r["gate"] / r["hbm"], reverse=True)
    over = [r for r in rows if r["gate"] > r["hbm"]]
    print(f"{len(over)} of {len(rows)} records priced above their GPU's visible HBM (gate = reserved + outside)")
    for r in (rows if a.all else over):
        print(f"{r['gate'] / r['hbm']:6.1%}  {r['id']}  ({r['file']}, {r['stack']}, {r['hardware']}, {r['mesh']})")
        pub = "" if r["published"] is None else f", published {r['published']:.1f}"
        print(f"        gate {r['gate'] / GiB:.1f} GiB of {r['hbm'] / GiB:.1f}: allocated {r['allocated'] / GiB:.1f}, "
              f"reserved {r['reserved'] / GiB:.1f}, outside {r['outside'] / GiB:.1f}; allocated + outside "
              f"{(r['allocated'] + r['outside']) / GiB:.1f}{pub}")
        if r["stages"]:
            print("        stages: " + ", ".join(f"{k} {v / GiB:.1f}" for k, v in r["stages"].items()))
        top = sorted(((v, k) for k, v in r["terms"].items() if v > 0), reverse=True)[: a.terms]
        print("        terms: " + ", ".join(f"{k} {v / GiB:.1f}" for v, k in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
