"""Signed and absolute error medians per group of a runs file (docs/dense_accuracy.md).

    PYTHONPATH=. python scripts/dense_groups.py [RUNS.yaml] [--min-n 3] [--worst 0.15] [--json OUT]

Reads planner.validate's API (load_runs + validate_runs: the rows `planner validate` prints) and
groups the rows with a tokens/s error by each record's own fields (no id or note is parsed):
source group, stack, hardware entry, precision (with its fp8 recipe; "(assumed)" where the record's
precision_assumed says the source does not state it), pipeline (none / 1F1B / interleaved), CP,
TP across NVLink (TP > the GPUs of one NVLink domain), sequence length, model size (parameters
from the planner's count), DP size, sharding (level and mode) and recompute (the explicit fields
validate prices; before the 2026-12-07 audit4 the leading term of the free-text fields). A group whose signed
median is far from 0 over several records is a missing or mispriced mechanism to look for
(README "Accuracy"). --worst lists the records whose |error| is above the given fraction.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from planner.catalog import load_hardware
from planner.validate import load_runs, validate_runs


def _bucket(x: float, edges: list[float], unit: str) -> str:
    lo = 0
    for e in edges:
        if x < e:
            return f"[{lo:g}, {e:g}) {unit}"
        lo = e
    return f">= {lo:g} {unit}"


def _setting(*parts) -> str:
    """A record's explicit setting (its fields joined), "not stated" where it leaves the first out."""
    return "not stated" if parts[0] is None else " ".join(str(p) for p in parts if p is not None)


def features(rec, row) -> dict:
    """The group each axis puts a record in, from its fields and the row's plan."""
    p = row["plan"] or {}
    tp, pp, vpp, cp, dp = p.get("tp", 1), p.get("pp", 1), p.get("vpp", 1), p.get("cp", 1), p.get("dp", 1)
    nvl = load_hardware(row["hardware"]).nvlink_domain if row["hardware"] else None
    n_params = 12 * rec.num_layers * rec.hidden_size ** 2  # rough size class only (12 L h^2)
    return {
        "source_group": rec.source_group or "-",
        "stack": row["stack"] or "-",
        "hardware": row["hardware"] or "-",
        "precision": _setting(rec.precision, rec.fp8_recipe, "(assumed)" if rec.precision_assumed else None),
        "pipeline": "PP1" if pp == 1 else ("PP interleaved" if vpp > 1 else "PP 1F1B"),
        "cp": "CP1" if cp == 1 else "CP>1",
        "tp_vs_nvlink": "TP1" if tp == 1 else ("TP > NVLink domain" if nvl and tp > nvl else "TP within NVLink"),
        "seq_length": _bucket(rec.seq_length, [4096, 8192, 16384, 32768], "tokens"),
        "model_size": _bucket(n_params / 1e9, [3, 10, 30, 100, 300], "B (12 L h^2)"),
        "dp": _bucket(dp, [8, 32, 128, 512], "ranks"),
        "sharding": _setting(rec.sharding, rec.sharding_mode),
        "recompute": _setting(rec.recompute),
    }


def group_table(records, rows, min_n: int = 3) -> list[dict]:
    """[{axis, group, n, median_abs, median_signed, p90_abs}] over rows with an error, groups of >= min_n."""
    by_id = {r.id: r for r in records}
    feats = [(features(by_id[row["id"]], row), row["error"]) for row in rows if row["error"] is not None]
    out = []
    for axis in feats[0][0] if feats else []:
        for g in sorted({f[axis] for f, _ in feats}):
            e = np.array([err for f, err in feats if f[axis] == g])
            if e.size >= min_n:
                out.append({"axis": axis, "group": g, "n": int(e.size), "median_abs": float(np.median(np.abs(e))),
                            "median_signed": float(np.median(e)), "p90_abs": float(np.percentile(np.abs(e), 90))})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", default="tests/data/published_runs.yaml")
    ap.add_argument("--min-n", type=int, default=3)
    ap.add_argument("--worst", type=float, default=0.15)
    ap.add_argument("--json", help="write the rows and the table here")
    a = ap.parse_args(argv)
    path = Path(a.runs)
    records = load_runs(path)
    rows = [r.as_dict() for r in validate_runs(records, path.resolve().parent, str(path))]
    err = np.array([r["error"] for r in rows if r["error"] is not None])
    print(f"{path}: n {err.size}, median |error| {np.median(np.abs(err)):.1%}, signed {np.median(err):+.1%}, "
          f"p90 {np.percentile(np.abs(err), 90):.1%}")
    table = group_table(records, rows, a.min_n)
    print(f"\n| axis | group | n | median \\|error\\| | signed median | p90 \\|error\\| |\n| --- | --- | ---: | ---: | ---: | ---: |")
    for t in table:
        print(f"| {t['axis']} | {t['group']} | {t['n']} | {t['median_abs']:.1%} | {t['median_signed']:+.1%} | "
              f"{t['p90_abs']:.1%} |")
    print(f"\nrecords with |error| > {a.worst:.0%}:")
    for r in sorted((r for r in rows if r["error"] is not None and abs(r["error"]) > a.worst), key=lambda r: r["error"]):
        print(f"  {r['error']:+7.1%}  {r['stack']:<18} {r['hardware']:<20} {r['mesh']:<22} {r['id']}")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "groups": table}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
