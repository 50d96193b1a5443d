"""Diagnostics of issue 23's three large MoE gaps (docs/moe_accuracy.md "The three issue-23 gaps
re-checked"). Each variant changes one assumption of the planner's model in this process only
(nothing is written, no planner file changes) and prints how the MoE file's rows move:

    PYTHONPATH=. python scripts/moegap_diagnostics.py [tests/data/published_runs_moe.yaml] [--refit]

  no-ep-overlap   every record's ep_comm_overlap read as false: what the combined 1F1B's hiding
                  of the all-to-alls is worth on each record that states it
  host-bwd        the dispatcher's host issue exposed in the backward too: each MoE layer's
                  backward issue taken equal to its forward's (moe_host's per_layer_s +
                  per_local_expert_s x local experts), exposed beyond the layer's backward GPU
                  time; under ep_comm_overlap the combined 1F1B pairs one layer's forward with
                  another's backward between two synchronisations, so their issue and GPU times
                  are summed before the max
  host-combined   only the combined-1F1B part of host-bwd (records without ep_comm_overlap as
                  the planner prices them)

--refit refits moe_host's two constants under each host variant with scripts/fit_moe_host.py's
grid and loss, so that a variant is judged at its own best constants, not the planner's.
These are not models the planner takes: they test candidate mechanisms against the records.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import planner.step as step  # noqa: E402
from planner import dispatch  # noqa: E402
import fit_moe_host as fit  # noqa: E402

_original_layer_times = step.layer_times
VARIANT = {"host": None}


def _issue(sc, kind):
    mh = sc.stack.moe_host
    e_local = kind.mlp.num_experts / sc.plan.ep.astype(np.float64)
    return mh.per_layer_s + mh.per_local_expert_s * e_local


def _layer_times(sc):
    """step.layer_times with the MoE host term replaced per VARIANT (see the module doc)."""
    out = _original_layer_times(sc)
    mode = VARIANT["host"]
    mh = sc.stack.moe_host
    if mode is None or mh is None or not dispatch.host_synced(sc.settings.moe_pad_to_capacity,
                                                             sc.settings.moe_dispatcher):
        return out
    overlap = bool(sc.settings.ep_comm_overlap)
    for i, kind in enumerate(sc.ll.kinds):
        if not kind.has_experts:
            continue
        issue = _issue(sc, kind)
        gf = out.fwd[i] - out.host_fwd[i]
        gb = out.bwd[i]
        host = out.host_fwd[i]
        if overlap:
            host = np.maximum(2.0 * issue - gf - gb, 0.0)
        elif mode == "host-bwd":
            host = host + np.maximum(issue - gb, 0.0)
        out.fwd[i] = gf + host
        out.host_fwd[i] = host
    return out


def _errors(rows, no_overlap: bool = False, constants=None):
    """{id: (error, predicted tokens/s per GPU)} of the prepared records (fit_moe_host.prepared), at the
    stack's moe_host constants or the given (per_layer_s, per_local_expert_s)."""
    res = {}
    for rid, settings, plan, pub in rows:
        if no_overlap:
            settings = dataclasses.replace(settings, ep_comm_overlap=False)
        mh = settings.stack.moe_host
        c0, c1 = constants if constants is not None else (mh.per_layer_s, mh.per_local_expert_s)
        tok = float(np.asarray(fit.tokens_per_gpu(settings, plan, c0, c1)).ravel()[0])
        res[rid] = (tok / pub - 1.0, tok)
    return res


def _summary(res):
    return f"n {len(res)}: " + fit.summary(np.array([v[0] for v in res.values()]))


def _moves(base, res):
    for rid, (err, _) in res.items():
        if abs(err - base[rid][0]) > 1e-4:
            print(f"  {rid[:62]:62} {base[rid][0]:+7.1%} -> {err:+7.1%}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=str(ROOT / "tests/data/published_runs_moe.yaml"))
    ap.add_argument("--refit", action="store_true", help="refit moe_host under each host variant")
    a = ap.parse_args(argv)
    step.layer_times = _layer_times
    rows = fit.prepared(Path(a.path))
    base = _errors(rows)
    print("planner as it stands (the records moe_host prices):", _summary(base))
    for name, kw, host in (("no-ep-overlap", {"no_overlap": True}, None),
                           ("host-bwd", {}, "host-bwd"), ("host-combined", {}, "host-combined")):
        VARIANT["host"] = host
        res = _errors(rows, **kw)
        print(f"\n{name}, the stack's moe_host constants: {_summary(res)}")
        _moves(base, res)
        if a.refit and host is not None:
            e = fit.grid(rows)
            i, j = fit.best(e)
            loo = np.array([np.expm1(e[r][fit.best(np.delete(e, r, axis=0))]) for r in range(len(rows))])
            c = (fit.PER_LAYER[i], fit.PER_EXPERT[j])
            res = _errors(rows, constants=c)
            print(f"{name}, refitted: per_layer_s {c[0]:.4g}, per_local_expert_s {c[1]:.4g}: {_summary(res)}; "
                  f"leave-one-out {fit.summary(loo)}")
            _moves(base, res)
    VARIANT["host"] = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
