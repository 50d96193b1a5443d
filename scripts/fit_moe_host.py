"""Fit the megatron stack's MoE host-issue constants (stack_db/megatron.yaml `moe_host`) on the
MoE run records, and report their leave-one-out error.

    PYTHONPATH=. python scripts/fit_moe_host.py [tests/data/published_runs_moe.yaml] [--write]
    PYTHONPATH=. python scripts/fit_moe_host.py --without-model gpt-oss-120b   (the others alone)
    PYTHONPATH=. python scripts/fit_moe_host.py --graph-split   (can the records tell CUDA graphs' share?)

The model (planner/step.py moe_host): after the dropless dispatcher's device-to-host
synchronisation, the host takes per_layer_s + per_local_expert_s x (experts / ep) to issue one
MoE layer's forward, and the GPU waits for what exceeds that layer's forward GPU time. The two
constants are the only free figures; everything else is the planner's model as it stands.
The records are all dropless (none sets moe_pad_to_capacity: a padded alltoall or hybridep
job has no such synchronisation, and the term is 0 for it, planner/dispatch.py [7]).

Method: every record the megatron stack prices (the stack whose constants these are) is
evaluated on a grid of (per_layer_s, per_local_expert_s); the fit minimises the mean absolute
log error of tokens/s per GPU (least absolute deviations: robust to a family the mechanism does
not explain, which a squared loss would let pull the constants). Leave-one-out: each record is
predicted with the constants fitted on the others. Prints in-sample and leave-one-out median
|error| and signed median; --write puts the constants and that summary into
stack_db/megatron.yaml.

--graph-split asks whether the records identify the share of per_layer_s that CUDA graphs of
the parts before the dispatch remove (planner/cuda_graphs.py): a third constant g, the
per-layer issue time a record whose cuda_graph_scope holds moe_router does not pay (g <=
per_layer_s), fitted the same way; prints the loss's profile over g (the least over the other
two) and the three-constant leave-one-out. It writes nothing: a constant the records cannot
pin down is not one the planner takes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.step import step_time, throughput  # noqa: E402
from planner.validate import Skip, load_runs, new_row, prepare_record  # noqa: E402

PER_LAYER = np.linspace(0.0, 4e-3, 41)  # seconds: 0 to 4 ms in 0.1 ms steps
PER_EXPERT = np.linspace(0.0, 0.8e-3, 41)  # seconds: 0 to 0.8 ms in 0.02 ms steps


def prepared(path: Path, keep=None):
    """(id, settings, plan, published tokens/s per GPU) of each record the stack's moe_host
    prices; keep: a predicate on the record (RunRecord) to take only some."""
    out = []
    tmp = Path(tempfile.mkdtemp(prefix="fit-moe-host-"))
    for rec in load_runs(path):
        if keep is not None and not keep(rec):
            continue
        row = new_row(rec)
        try:
            settings, plan = prepare_record(rec, row, tmp, path.parent)
        except Skip as s:
            print(f"skipped {rec.id}: {s}", file=sys.stderr)
            continue
        if settings.stack.moe_host is None or row.published_tokens_per_s_per_gpu is None:
            continue
        out.append((rec.id, settings, plan, row.published_tokens_per_s_per_gpu))
    return out


def tokens_per_gpu(settings, plan, c0, c1):
    """Tokens/s per GPU with the given constants (scalars, or arrays that broadcast: the
    planner's formulas are numpy throughout, so one call prices a whole grid)."""
    mh = SimpleNamespace(per_layer_s=np.asarray(c0, dtype=np.float64),
                         per_local_expert_s=np.asarray(c1, dtype=np.float64))
    s = dataclasses.replace(settings, stack=settings.stack.model_copy(update={"moe_host": mh}))
    shape = np.broadcast(mh.per_layer_s, mh.per_local_expert_s).shape
    plan = dataclasses.replace(plan, **{f.name: np.broadcast_to(getattr(plan, f.name), shape)
                                        for f in dataclasses.fields(plan)})
    t, _ = step_time(s, plan)
    return np.broadcast_to(throughput(s, plan, t.total)["tokens_per_s_per_gpu"], shape)


def grid(rows) -> np.ndarray:
    """log(predicted / published) per record and grid point: (records, per_layer, per_expert)."""
    c0, c1 = np.meshgrid(PER_LAYER, PER_EXPERT, indexing="ij")
    return np.stack([np.log(tokens_per_gpu(settings, plan, c0.ravel(), c1.ravel()).reshape(c0.shape) / pub)
                     for _, settings, plan, pub in rows])


def best(logerr: np.ndarray) -> tuple[int, int]:
    loss = np.abs(logerr).mean(axis=0)
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return int(i), int(j)


GRAPHED = np.linspace(0.0, 4e-3, 41)  # seconds: g, 0 to 4 ms in 0.1 ms steps


def graph_split(rows, graphed: set) -> None:
    """--graph-split: the (per_layer_s, g, per_local_expert_s) grid, g taken off per_layer_s on
    the records in `graphed`; the loss profile over g and the leave-one-out."""
    c0, g, c1 = np.meshgrid(PER_LAYER, GRAPHED, PER_EXPERT, indexing="ij")
    eff = lambda rid: np.where(g <= c0, c0 - g if rid in graphed else c0, np.nan)  # noqa: E731
    e = np.stack([np.log(tokens_per_gpu(s, p, eff(rid).ravel(), c1.ravel()).reshape(c0.shape) / pub)
                  for rid, s, p, pub in rows])

    def fit(x):
        loss = np.abs(x).mean(axis=0)
        return np.unravel_index(np.argmin(np.where(np.isnan(loss), np.inf, loss)), loss.shape)

    loss = np.abs(e).mean(axis=0)
    i, j, k = fit(e)
    print(f"records with moe_router graphed: {len(graphed)} of {len(rows)}")
    print(f"three constants: per_layer_s {PER_LAYER[i]:.4g}, g {GRAPHED[j]:.4g}, per_local_expert_s "
          f"{PER_EXPERT[k]:.4g}: {summary(np.expm1(e[:, i, j, k]))}")
    loo = np.array([np.expm1(e[r][fit(np.delete(e, r, axis=0))]) for r in range(len(rows))])
    print(f"leave-one-out: {summary(loo)}")
    for jj in range(0, len(GRAPHED), 2):
        print(f"  g {GRAPHED[jj] * 1e3:3.1f} ms: least mean |log error| {np.nanmin(np.where(np.isnan(loss[:, jj]), np.inf, loss[:, jj])):.4f}")


def summary(err: np.ndarray) -> str:
    return f"median |error| {np.median(np.abs(err)):.1%}, signed median {np.median(err):+.1%}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="?", default=str(ROOT / "tests/data/published_runs_moe.yaml"))
    ap.add_argument("--write", action="store_true", help="write the constants into stack_db/megatron.yaml")
    ap.add_argument("--without-model", help="leave out the records of this model (their `model` field): "
                    "what the other families alone fit")
    ap.add_argument("--graph-split", action="store_true", help="fit a third constant, the per-layer issue time "
                    "CUDA graphs of moe_router remove, and report whether the records identify it (writes nothing)")
    a = ap.parse_args(argv)
    if a.write and (a.without_model or a.graph_split):
        ap.error("--write fits the two constants on every record: drop --without-model / --graph-split")
    path = Path(a.runs)
    rows = prepared(path, keep=None if a.without_model is None else (lambda rec: rec.model != a.without_model))
    if a.graph_split:
        graphed = {r.id for r in load_runs(path) if "moe_router" in (r.cuda_graph_scope or [])}
        graph_split(rows, graphed)
        return 0
    g = grid(rows)
    i, j = best(g)
    fit_err = np.expm1(g[:, i, j])
    loo = np.empty(len(rows))
    for r in range(len(rows)):
        ii, jj = best(np.delete(g, r, axis=0))
        loo[r] = np.expm1(g[r, ii, jj])
    base = np.expm1(g[:, 0, 0])
    c0, c1 = PER_LAYER[i], PER_EXPERT[j]
    print(f"records: {len(rows)} ({path.name}, the megatron stack's)")
    print(f"without the term: {summary(base)}")
    print(f"fitted per_layer_s {c0:.4g}, per_local_expert_s {c1:.4g}: {summary(fit_err)}")
    print(f"leave-one-out: {summary(loo)}")
    for (rid, *_), b, e, lo in sorted(zip(rows, base, fit_err, loo), key=lambda t: t[2]):
        print(f"  {rid:60s} {b:+7.1%} -> {e:+7.1%} (leave-one-out {lo:+7.1%})")
    if a.write:
        text = (f"fitted by scripts/fit_moe_host.py on {path.name} ({len(rows)} records the megatron stack prices): "
                f"least absolute log deviation over a grid of 0.1 ms x 0.02 ms; in-sample {summary(fit_err)} "
                f"(without the term {summary(base)}); leave-one-out {summary(loo)}")
        yml = ROOT / "stack_db/megatron.yaml"
        s = yml.read_text()
        head, _, _ = s.partition("\nmoe_host:\n")
        block = (f"\nmoe_host:\n  per_layer_s: {c0:.4g}\n  per_local_expert_s: {c1:.4g}\n  fit: >-\n    {text}\n"
                 "  sources:\n    - >-\n      " + SOURCE + "\n")
        yml.write_text(head + block)
    return 0


SOURCE = ("the mechanism: NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py "
          "(the dropless dispatchers' device-to-host synchronisation once per MoE layer forward, lines 594-606) "
          "and megatron/core/transformer/moe/README.md ('CPU Overhead Bottleneck'); the constants: fitted on "
          "tests/data/published_runs_moe.yaml by scripts/fit_moe_host.py (see `fit`)")

if __name__ == "__main__":
    raise SystemExit(main())
