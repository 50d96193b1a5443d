"""Every ranked plan exports as the trainer's own config (issue 22): for each zoo model, a few
GPU counts and the stacks that have a trainer format (torchtitan, megatron, megatron-deepspeed),
take `planner fit`'s top rows and export each as `fit --export` does (planner/cli/export.py
write_export: the file written, read back as the trainer's config and compared with the priced
row: plan_signature and the memory total). Lists every row the export refuses or that reads
back as another plan, in three classes:
  rule       export's start-up check refuses a row fit ranked (fit and export disagree)
  read-back  the file reads back as another plan or another memory
  format     the format has no spelling for a setting the plan was priced with (export's own
             refusal, naming it: a DeepSpeed JSON has no TP / PP / EP, Megatron-LM's arguments
             no Gemma post-norms or Llama 4 / Jamba layer patterns)
Exit 1 if a row is in the first two classes.

    PYTHONPATH=. python scripts/export_sweep.py [--models a,b] [--gpus 8,64,512,2048]
                                                [--stacks torchtitan,megatron,megatron-deepspeed]
                                                [--top 3] [--hardware h100-sxm]

A model / GPU count / stack where nothing fits is counted, not listed (fit's NoFitError).
tests/test_export_sweep.py keeps a handful of rows this sweep found, hand-picked, so that a
disagreement that comes back fails a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.errors import NoFitError, PlannerError  # noqa: E402
from planner.schema import Job  # noqa: E402
from planner.search import fit  # noqa: E402
from planner.space import SpaceOptions  # noqa: E402
from planner.trainers import FORMAT_STACKS  # noqa: E402

STACK_FORMAT = {s: f for f, s in FORMAT_STACKS.items()}


def export_row(row: dict, fmt: str) -> str | None:
    """None where `fit --export` would write the row's file, else its error message."""
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    try:
        text, _ = export_plan(row["plan"], fmt)
        check_readback(row, fmt, text)
    except PlannerError as e:
        return e.message
    return None


def kind(msg: str) -> str:
    """The class of an export failure (the module docstring)."""
    if "breaks a rule of stack" in msg:
        return "rule"
    return "read-back" if "reads back as another plan" in msg else "format"


def sweep(models, gpus, stacks, top, hardware, log=print):
    """[(model, gpus, stack, row number, plan, message)] of the rows that fail, and the counts."""
    bad, counts = [], Counter()
    for model in models:
        for stack in stacks:
            for g in gpus:
                job = Job(model=model, gpus=g, stack=stack, hardware=hardware)
                try:
                    rows = fit(job, [g], SpaceOptions(), "time", top).rows[:top]
                except NoFitError:
                    counts["no fit"] += 1
                    continue
                except PlannerError as e:
                    counts["job refused"] += 1
                    log(f"  job refused: {model} {stack} {g}: {e.message[:160]}")
                    continue
                for n, row in enumerate(rows, 1):
                    counts["rows"] += 1
                    msg = export_row(row, STACK_FORMAT[stack])
                    if msg is not None:
                        p = row["plan"]
                        bad.append((model, g, stack, n, p, msg))
                        log(f"{kind(msg).upper()} {model} {stack} {g} row {n}: {mesh(p)}: {msg}")
    return bad, counts


def mesh(p: dict) -> str:
    return (f"tp {p['tp']} cp {p['cp']} pp {p['pp']} vpp {p['vpp']} dp {p['dp']} ep {p.get('ep', 1)} etp {p.get('etp')} "
            f"{p.get('sharding_mode') or p['sharding']} mb {p['micro_batch']} gb {p['global_batch']} {p['schedule']} "
            f"rc {p['recompute']} {p['precision']}")


def main(argv=None) -> int:
    from planner.catalog import list_models

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default: every zoo model)")
    ap.add_argument("--gpus", default="8,64,512,2048")
    ap.add_argument("--stacks", default="torchtitan,megatron,megatron-deepspeed")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--hardware", default="h100-sxm")
    a = ap.parse_args(argv)
    models = a.models.split(",") if a.models else list_models()
    t0 = time.perf_counter()
    bad, counts = sweep(models, [int(x) for x in a.gpus.split(",")], a.stacks.split(","), a.top, a.hardware)
    by = Counter(kind(b[-1]) for b in bad)
    print(f"\n{counts['rows']} rows exported: {by['rule']} refused by a rule, {by['read-back']} read back as another "
          f"plan, {by['format']} refused as the format cannot say a setting; {counts['no fit']} (model, stack, gpus) "
          f"with no plan, {counts['job refused']} jobs refused; {time.perf_counter() - t0:.0f} s")
    return 1 if by["rule"] or by["read-back"] else 0


if __name__ == "__main__":
    sys.exit(main())
