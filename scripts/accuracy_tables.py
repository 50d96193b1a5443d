"""The accuracy tables of README.md and docs/*.md, computed from the library (issue 24: figures that cannot drift).

Each table sits between marker comments in a Markdown file,

    <!-- accuracy:NAME begin -->
    ...
    <!-- accuracy:NAME end -->

(or on one line, begin and end around the text, for a figure inside a sentence), and is rendered here from the
functions `planner validate` calls: planner.validate.report (the published-runs files: dense, MoE, low
precision), planner.memory_rows.report (the measured memory rows and the allocated-memory oracle's traces),
planner.megatron_ci.report_corpus (Megatron-LM's CI corpus), planner.calibrate.run.leave_one_out (the
leave-one-out of tests/test_calibrate_run.py) and scripts/dense_groups.py's group_table; and the plans of
docs/llama3_405b_16k.md (issue 22: `planner fit --model llama3-405b --gpus 16384` on the megatron and llama3-meta
stacks, Meta's own layout), computed as `fit` (search.fit) and `explain` (plan.resolve, explain.evaluate, to_json)
compute them (about 1 s of the whole). Nothing is subprocessed, nothing is fitted. tests/test_accuracy_tables.py
runs the check (all of it: about 15 s on one core).

    PYTHONPATH=. python scripts/accuracy_tables.py            # rewrite every table in place
    PYTHONPATH=. python scripts/accuracy_tables.py --check    # exit 1 naming each stale table
    PYTHONPATH=. python scripts/accuracy_tables.py --print NAME   # one table to stdout

A marker naming no table here, a begin without its end, and a table placed nowhere are errors (exit 2).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.calibrate import run as calibrate_run  # noqa: E402
from planner.megatron_ci import report_corpus  # noqa: E402
from planner import memory_rows  # noqa: E402
from planner.validate import load_runs, report  # noqa: E402

DATA = ROOT / "tests" / "data"
RUNS = DATA / "published_runs.yaml"
MOE = DATA / "published_runs_moe.yaml"
LOWPREC = DATA / "published_runs_lowprec.yaml"
MEASURED = DATA / "memory" / "measured_memory.yaml"
ORACLE = DATA / "memory" / "oracle_torchtitan_0.3.0.yaml"
SWEEP = DATA / "memory" / "oracle_sweep_torch2.13_tt0.3.0.yaml"
CORPUS = DATA / "megatron_ci" / "corpus.json"

#: the files whose markers are rewritten
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

MARKER = re.compile(r"<!-- accuracy:([a-z0-9_]+) (begin|end) -->")


def _dense_groups():
    spec = importlib.util.spec_from_file_location("dense_groups", ROOT / "scripts" / "dense_groups.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------------- formatting

def pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def signed(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def stats(err) -> dict:
    """n, median |error|, signed median, p90 |error| (numpy's linear percentile, as planner.validate), max |error|."""
    e = np.asarray(list(err), dtype=np.float64)
    if not e.size:
        return {"n": 0, "median_abs": None, "median": None, "p90_abs": None, "max_abs": None}
    return {"n": int(e.size), "median_abs": float(np.median(np.abs(e))), "median": float(np.median(e)),
            "p90_abs": float(np.percentile(np.abs(e), 90)), "max_abs": float(np.max(np.abs(e)))}


def stat_cells(s: dict) -> str:
    return f"{s['n']} | {pct(s['median_abs'])} | {signed(s['median'])} | {pct(s['p90_abs'])}"


def md(text: str) -> str:
    """A table cell: pipes escaped."""
    return text.replace("|", "\\|")


# ---------------------------------------------------------------------------------------------- the data (once each)

@functools.cache
def runs_report(path: Path, complete: bool = False) -> dict:
    return report(path, complete=complete)


@functools.cache
def records(path: Path) -> dict:
    return {r.id: r for r in load_runs(path)}


@functools.cache
def memory_report(path: Path) -> dict:
    return memory_rows.report(path)


@functools.cache
def corpus_report() -> dict:
    return report_corpus(CORPUS)


@functools.cache
def loo() -> dict:
    return calibrate_run.leave_one_out(load_runs(RUNS), DATA, str(RUNS))


def _errors(rows, keep=lambda r: True) -> list:
    return [r["error"] for r in rows if r["error"] is not None and keep(r)]


# ---------------------------------------------------------------------------------------------- the tables

def dense_headline() -> str:
    """Inline: the complete published records' count, median and signed median (README's opening paragraph)."""
    s = runs_report(RUNS, True)["summary"]
    return (f"{s['n']} published training runs (median error {pct(s['median_abs_error'])}, signed median "
            f"{signed(s['median_error'])}")


def _stack_rows(s: dict) -> list:
    """A validate summary's per-stack table and its **all** row (dense_by_stack, dense_file_by_stack)."""
    out = ["| stack | n | median \\|error\\| | signed median | p90 \\|error\\| |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, st in s["by_stack"].items():
        out.append(f"| {name} | {st['n']} | {pct(st['median_abs_error'])} | {signed(st['median_error'])} | "
                   f"{pct(st['p90_abs_error'])} |")
    out.append(f"| **all** | **{s['n']}** | **{pct(s['median_abs_error'])}** | **{signed(s['median_error'])}** | "
               f"**{pct(s['p90_abs_error'])}** |")
    return out


def dense_by_stack() -> str:
    """`planner validate tests/data/published_runs.yaml --complete`, per stack and over all."""
    s = runs_report(RUNS, True)["summary"]
    return "\n".join(_stack_rows(s))


def dense_file_by_stack() -> str:
    """The whole dense file (`planner validate tests/data/published_runs.yaml`), per stack and over all."""
    s = runs_report(RUNS)["summary"]
    return "\n".join([f"`planner validate tests/data/published_runs.yaml` (every record, {s['n_skipped']} skipped):", ""]
                     + _stack_rows(s))


def dense_groups() -> str:
    """scripts/dense_groups.py's table (groups of >= 3 records with a tokens/s error) over the whole dense file."""
    dg = _dense_groups()
    rows = runs_report(RUNS)["runs"]
    recs = records(RUNS)
    table = dg.group_table([recs[r["id"]] for r in rows if r["id"] in recs], [r for r in rows if r["id"] in recs])
    out = ["| axis | group | n | median \\|error\\| | signed median | p90 \\|error\\| |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    out += [f"| {t['axis']} | {md(t['group'])} | {t['n']} | {pct(t['median_abs'])} | {signed(t['median_signed'])} | "
            f"{pct(t['p90_abs'])} |" for t in table]
    return "\n".join(out)


def dense_worst() -> str:
    """The dense records whose |tokens/s error| is above 15% (scripts/dense_groups.py --worst 0.15)."""
    rows = sorted((r for r in runs_report(RUNS)["runs"] if r["error"] is not None and abs(r["error"]) > 0.15),
                  key=lambda r: r["error"])
    out = ["| error | stack | hardware | mesh | record |", "| ---: | --- | --- | --- | --- |"]
    out += [f"| {signed(r['error'])} | {r['stack']} | {r['hardware']} | {r['mesh']} | {r['id']} |" for r in rows]
    return "\n".join(out)


def published_memory() -> str:
    """The records of the published-runs files that publish a memory figure: predicted (the peak the stack logs)
    against published."""
    out = ["| record | stack | predicted GiB | published GiB | error |", "| --- | --- | ---: | ---: | ---: |"]
    for path in (RUNS, MOE, LOWPREC):
        for r in runs_report(path)["runs"]:
            if r["memory_error"] is not None:
                out.append(f"| {r['id']} | {r['stack']} | {r['predicted_memory_gib']:.2f} | "
                           f"{r['published_memory_gib']:.2f} | {signed(r['memory_error'])} |")
    return "\n".join(out)


def _by(path: Path, key: Callable) -> str:
    rows = runs_report(path)["runs"]
    recs = records(path)
    groups: dict = {}
    for r in rows:
        if r["error"] is not None:
            groups.setdefault(key(recs[r["id"]], r), []).append(r["error"])
    out = ["| group | n | median \\|error\\| | signed median | p90 \\|error\\| | worst \\|error\\| |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for g in sorted(groups):
        s = stats(groups[g])
        out.append(f"| {g} | {stat_cells(s)} | {pct(s['max_abs'])} |")
    s = stats(_errors(rows))
    skipped = sum(r["skipped"] is not None for r in rows)
    out.append(f"| **all** ({skipped} skipped) | **{s['n']}** | **{pct(s['median_abs'])}** | **{signed(s['median'])}** "
               f"| **{pct(s['p90_abs'])}** | {pct(s['max_abs'])} |")
    return "\n".join(out)


def moe_summary() -> str:
    """`planner validate tests/data/published_runs_moe.yaml`: per catalog model, per stack, over all."""
    per_model = _by(MOE, lambda rec, row: f"model {rec.model or rec.model_name}").splitlines()
    per_stack = _by(MOE, lambda rec, row: f"stack {row['stack']}").splitlines()
    return "\n".join(per_model[:-1] + per_stack[2:])


def lowprec_summary() -> str:
    """`planner validate tests/data/published_runs_lowprec.yaml`: the dense and the MoE records apart, and all."""
    return _by(LOWPREC, lambda rec, row: "MoE records" if rec.moe else "dense records")


def memory_rows_table() -> str:
    """`planner validate` of the measured memory rows (per source group, per kind) and of the two oracle files."""
    out = ["| file | group | n | skipped | median \\|error\\| | signed median | p90 \\|error\\| | worst under |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def row(file, group, s, skipped):
        wu = signed(s["worst_under"]) if s["worst_under"] is not None else ("none" if s["n"] else "-")
        return (f"| {file} | {md(group)} | {s['n']} | {skipped} | {pct(s['median_abs_error'])} | "
                f"{signed(s['median_error'])} | {pct(s['p90_abs_error'])} | {wu} |")

    for path in (MEASURED, ORACLE, SWEEP):
        s = memory_report(path)["summary"]
        name = path.name
        for g, gs in s["by_group"].items():
            out.append(row(name, g, gs, gs["n_skipped"]))
        for k, ks in s["by_kind"].items():
            if ks["n"]:
                out.append(row(name, f"all {k}", ks, ""))
        out.append(row(name, "**all**", s, s["n_skipped"]))
    return "\n".join(out)


def megatron_ci() -> str:
    """`planner validate tests/data/megatron_ci/corpus.json`: per memory trust tier and over all."""
    s = corpus_report()["summary"]
    out = ["| tier | rows | compared | median \\|error\\| | signed median | p90 \\|error\\| | worst under-prediction |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for t, st in s["by_tier"].items():
        wu = f"{signed(st['worst_under_error'])} (`{st['worst_under']}`)" if st["worst_under"] else "none"
        out.append(f"| {t} | {s['rows_by_tier'][t]} | {st['n']} | {pct(st['median_abs_error'])} | "
                   f"{signed(st['median_error'])} | {pct(st['p90_abs_error'])} | {wu} |")
    a = s["all"]
    out.append(f"| **all** | **{s['n_rows']}** | **{a['n']}** | **{pct(a['median_abs_error'])}** | "
               f"**{signed(a['median_error'])}** | **{pct(a['p90_abs_error'])}** | |")
    return "\n".join(out)


def leave_one_out() -> str:
    """tests/test_calibrate_run.py's leave-one-out: per source group of >= 4 records, and the medians over groups."""
    res = loo()
    out = ["| source group | records | pairs | before | after | signed median after |",
           "|---|---:|---:|---:|---:|---:|"]
    for g, v in res.items():
        out.append(f"| {g} | {v['records']} | {v['pairs']} | {pct(v['before_median_abs_error'])} | "
                   f"{pct(v['after_median_abs_error'])} | {signed(v['after_median_error'])} |")
    before = [v["before_median_abs_error"] for v in res.values() if v["before_median_abs_error"] is not None]
    after = [v["after_median_abs_error"] for v in res.values() if v["after_median_abs_error"] is not None]
    out.append(f"| median over groups | | | {pct(float(np.median(before)))} | {pct(float(np.median(after)))} | |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- Llama 3 405B (issue 22)
#
# docs/llama3_405b_16k.md: the plans of `planner fit --model llama3-405b --gpus 16384` (the megatron stack and
# `--stack llama3-meta`) and Meta's own layout (arXiv:2407.21783 sec. 3.3.2, Table 4: TP 8, CP 1, PP 16, DP 128,
# 16 sequences of 8,192 per DP rank, interleaved with 8 virtual stages), computed as `fit` (search.fit) and
# `explain` (plan.resolve, explain.evaluate / to_json) compute them.

L405 = dict(model="llama3-405b", gpus=16384)
#: Meta's 8K pre-training layout on 16,384 H100 (arXiv:2407.21783 Table 4; vpp 8: 126 + 2 units on 16 x 8 chunks, sec.
#: 3.3.2); on the megatron stack with the two ends counted as layers (Megatron's --account-for-*-in-pipeline-split),
#: DP outermost (the paper's Fig. 5), as llama3-meta takes them itself
META_LAYOUT = dict(L405, tp=8, cp=1, pp=16, vpp=8, dp=128, micro_batch=1, global_batch=2048, seq_len=8192)
META_ON_MEGATRON = dict(META_LAYOUT, stack="megatron", account_for_embedding_in_pipeline_split=True,
                        account_for_loss_in_pipeline_split=True, rank_order="tp-cp-pp-dp")


def _job(**fields):
    from planner.schema import Job

    return Job(**fields)


@functools.cache
def _fit405(stack: str = "megatron", tp_comm_overlap: Optional[bool] = None, cp: Optional[int] = None) -> tuple:
    """(rows, counts) of `planner fit --model llama3-405b --gpus 16384 [--stack S] [--no-tp-comm-overlap] [--cp N]`,
    top 3 (search.fit, as planner/cli/fit.py calls it)."""
    from planner.search import fit
    from planner.space import SpaceOptions

    job = _job(**L405, stack=stack, tp_comm_overlap=tp_comm_overlap)
    res = fit(job, [L405["gpus"]], SpaceOptions(cp=None if cp is None else (cp,)), "time", 3, search_dispatchers=True)
    return res.rows, res.counts


def _explain(job) -> dict:
    """`planner explain`'s JSON of a job (planner/cli/core.py: plan.resolve, explain.evaluate, explain.to_json)."""
    from planner.explain import evaluate, to_json
    from planner.plan import resolve

    settings, plan, _ = resolve(job)
    return to_json(settings, plan, evaluate(settings, plan))


def _top405() -> dict:
    return _fit405()[0][0]


@functools.cache
def _top_variant(**update) -> dict:
    """The megatron stack's top plan, explained with some fields changed (search.row_job: the Job that reproduces
    the row)."""
    from planner.search import row_job

    job = row_job(_job(**L405), _top405())
    return _explain(job.model_copy(update=update))


@functools.cache
def _meta_explain(stack: str = "llama3-meta", **update) -> dict:
    base = META_LAYOUT if stack == "llama3-meta" else META_ON_MEGATRON
    return _explain(_job(**{**base, "stack": stack, **update}))


GIB = 2.0**30


def _layout(p: dict) -> str:
    return f"{p['tp']}x{p['cp']}x{p['pp']}x{p['dp']}"


def _mb(p: dict) -> str:
    return f"{p['micro_batch']} x {p['microbatches_per_step']}"


def _options(p: dict) -> str:
    from planner.render.fit import stack_options_text

    opts = stack_options_text(p)
    return p["rank_order"] if opts == "-" else f"{opts}, {p['rank_order']}"


def _fits(r: dict) -> str:
    m = r["memory"]
    return "yes" if m["fits"] else f"no ({100 * m['total_bytes'] / m['capacity_bytes']:.1f}% of HBM)"


def _plan_cells(r: dict) -> str:
    p, m, t, th = r["plan"], r["memory"], r["time"], r["throughput"]
    return (f"{_layout(p)} | {p['vpp']} | {p['sharding']} ({p['sharding_mode']}) | {_mb(p)} | {p['recompute']} | "
            f"{_options(p)} | {m['total_bytes'] / GIB:.1f} | {_fits(r)} | {t['step_s']:.2f} | {pct(th['mfu'])} | "
            f"{pct(th['mfu_6n'])} |")


def _cp1_dp() -> int:
    """The DP degree the top plan's TP x PP takes at CP 1 on the 16,384 GPUs (the top plan's own CP ranks become DP)."""
    p = _top405()["plan"]
    return L405["gpus"] // (p["tp"] * p["pp"])


def llama405_megatron() -> str:
    """`planner fit --model llama3-405b --gpus 16384` (megatron stack): the top plan; that plan with one choice
    changed (TP overlap off, Megatron-FSDP optim_grads sharding, CP 1 with the DP that takes its GPUs, _cp1_dp, in either
    rank order); the top
    plans of `--no-tp-comm-overlap` and `--cp 1`."""
    head = ["| | TPxCPxPPxDP | vpp | sharding (mode) | micro-batch | recompute | options | GiB | fits | step s | "
            "MFU (PaLM) | MFU (6N) |", "| --- | --- | ---: | --- | ---: | --- | --- | ---: | --- | ---: | ---: | ---: |"]
    rows = [("**top plan**", _top405()),
            ("the same plan, `--no-tp-comm-overlap`", _top_variant(tp_comm_overlap=False)),
            ("the same plan, `--sharding zero2` (gradients reduced every micro-batch)",
             _top_variant(sharding="zero2", sharding_mode=None)),
            (f"the same plan at CP 1 (DP {_cp1_dp()})", _top_variant(cp=1, dp=_cp1_dp())),
            (f"the same plan at CP 1 (DP {_cp1_dp()}), DP outermost",
             _top_variant(cp=1, dp=_cp1_dp(), rank_order="tp-cp-pp-dp")),
            ("top plan of `--no-tp-comm-overlap`", _fit405(tp_comm_overlap=False)[0][0]),
            ("top plan of `--cp 1`", _fit405(cp=1)[0][0])]
    return "\n".join(head + [f"| {name} | {_plan_cells(r)}" for name, r in rows])


def _share(x: float, step: float) -> str:
    return f"{x:.3f} ({100 * x / step:.1f}%)"


def llama405_megatron_step() -> str:
    """The megatron top plan's step, term by term (explain's time terms, which sum to the step), with and without
    TP overlap."""
    cols = [("top plan", _top405()), ("the same, no TP overlap", _top_variant(tp_comm_overlap=False))]
    out = ["| s (share of the step) | " + " | ".join(c for c, _ in cols) + " |", "| --- |" + " ---: |" * len(cols)]

    def row(name, f):
        out.append(f"| {name} | " + " | ".join(f(r["time"]) for _, r in cols) + " |")

    row("compute", lambda t: _share(t["compute_s"], t["step_s"]))
    row("of which CP's own kernels (split attention, merges)", lambda t: f"{t['cp_compute_s']:.3f}")
    row("TP exposed", lambda t: _share(t["tp_comm_s"], t["step_s"]))
    row("CP exchange exposed (of its traffic)", lambda t: f"{t['cp_comm_s']:.3f} (of {t['cp_comm_total_s']:.3f})")
    row("PP p2p", lambda t: _share(t["pp_comm_s"], t["step_s"]))
    row("of which the warm-up and flush", lambda t: f"{t['pp_warmup_flush_s']:.3f}")
    row("DP exposed (of its traffic)", lambda t: f"{_share(t['dp_comm_exposed_s'], t['step_s'])} of {t['dp_comm_s']:.3f}")
    row("bubble", lambda t: _share(t["bubble_s"], t["step_s"]))
    row("optimizer", lambda t: f"{t['optimizer_s']:.3f}")
    row("**step**", lambda t: f"**{t['step_s']:.3f}**")
    return "\n".join(out)


def llama405_meta_on_megatron() -> str:
    """Meta's layout (8x1x16x128, vpp 8, micro-batch 1 x 16, DP outermost, the ends counted as layers) on the
    megatron stack, by sharding mode, TP overlap and recompute."""
    out = ["| sharding (mode) | TP overlap | recompute | GiB | fits (90% of 79.09 GiB = 71.18) | DP exposed s | step s | "
           "MFU (PaLM) | MFU (6N) |", "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for sh, ovl, rc in (("zero1", False, "none"), ("zero1", True, "none"), ("zero2", False, "none"),
                        ("zero2", True, "none"), ("zero1", False, "full")):
        r = _meta_explain("megatron", sharding=sh, tp_comm_overlap=ovl, recompute=rc)
        p, m, t, th = r["plan"], r["memory"], r["time"], r["throughput"]
        out.append(f"| {sh} ({p['sharding_mode']}) | {'on' if ovl else 'off'} | {rc} | {m['total_bytes'] / GIB:.2f} | "
                   f"{_fits(r)} | {t['dp_comm_exposed_s']:.3f} | {t['step_s']:.3f} | {pct(th['mfu'])} | "
                   f"{pct(th['mfu_6n'])} |")
    return "\n".join(out)


def _headroom_max(m: dict) -> str:
    """The largest headroom at which the plan fits (total <= capacity x (1 - headroom)), rounded down to 0.1%."""
    return f"{np.floor(1000 * (1 - m['total_bytes'] / m['capacity_bytes'])) / 10:.1f}%"


#: the three plans the note follows on llama3-meta: Meta's layout; TP 8 x CP 2 (micro-batch 2); TP 4 x CP 2 x PP 32
META_STACK_PLANS = (("8x1x16x128 (Meta's)", {}),
                    ("8x2x16x64", dict(cp=2, dp=64, micro_batch=2)),
                    ("4x2x32x64", dict(tp=4, cp=2, pp=32, vpp=4, dp=64)))


def llama405_meta_stack() -> str:
    """Meta's layout and two neighbours on `--stack llama3-meta` (explain): memory (the reduce-scatter input,
    memory.py [rs], term zero2_reduce_input), the largest headroom each fits, the DP traffic and its exposed part,
    step, MFU."""
    out = ["| plan | vpp | micro-batch | GiB | of which the reduce-scatter input | fits at 10% headroom | fits at a "
           "headroom of at most | DP traffic s | DP exposed s | step s | MFU (PaLM) | MFU (6N) | model TFLOP/s a GPU |",
           "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, upd in META_STACK_PLANS:
        r = _meta_explain(**upd)
        p, m, t, th = r["plan"], r["memory"], r["time"], r["throughput"]
        out.append(f"| {name} | {p['vpp']} | {_mb(p)} | {m['total_bytes'] / GIB:.2f} | "
                   f"{m['terms']['zero2_reduce_input'] / GIB:.2f} | {_fits(r)} | {_headroom_max(m)} | "
                   f"{t['dp_comm_s']:.3f} | {t['dp_comm_exposed_s']:.3f} | {t['step_s']:.3f} | {pct(th['mfu'])} | "
                   f"{pct(th['mfu_6n'])} | {th['tflops_per_gpu']:.0f} |")
    return "\n".join(out)


def llama405_meta_layout_step() -> str:
    """Meta's layout on llama3-meta: its step term by term (explain's time terms; they sum to the step)."""
    t = _meta_explain()["time"]
    s = t["step_s"]
    out = ["| term | s | share of the step |", "| --- | ---: | ---: |"]
    for name, key in (("compute", "compute_s"), ("DP / sharding exposed", "dp_comm_exposed_s"),
                      ("TP exposed", "tp_comm_s"), ("bubble", "bubble_s"), ("PP p2p", "pp_comm_s"),
                      ("CP", "cp_comm_s"), ("optimizer", "optimizer_s")):
        out.append(f"| {name} | {t[key]:.3f} | {100 * t[key] / s:.1f}% |")
    out.append(f"| **step** | **{s:.3f}** | |")
    out.append(f"| (DP traffic, exposed or not) | {t['dp_comm_s']:.3f} | |")
    return "\n".join(out)


def llama405_meta_top() -> str:
    """`planner fit --model llama3-405b --gpus 16384 --stack llama3-meta`: its counts and top 3 rows."""
    rows, c = _fit405("llama3-meta")
    out = [f"`fit` searched {c.considered:,} candidates: {c.feasible:,} fit.", "",
           "| # | TPxCPxPPxDP | vpp | micro-batch | recompute | GiB | DP exposed s | step s | MFU (PaLM) | MFU (6N) |",
           "| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for i, r in enumerate(rows, 1):
        p, m, t, th = r["plan"], r["memory"], r["time"], r["throughput"]
        out.append(f"| {i} | {_layout(p)} | {p['vpp']} | {_mb(p)} | {p['recompute']} | {m['total_bytes'] / GIB:.2f} | "
                   f"{t['dp_comm_exposed_s']:.3f} | {t['step_s']:.3f} | {pct(th['mfu'])} | {pct(th['mfu_6n'])} |")
    return "\n".join(out)


#: Meta's published BF16 MFU on 8K pre-training of the 405B: 38% (16,384 GPUs, CP 16 at 131,072 tokens) to 43%
#: (8,192 GPUs) (arXiv:2407.21783 Table 4)
META_BAND = (0.38, 0.43)


def _band(mfu: float) -> str:
    """Where an MFU lies against Meta's band, at the precision the tables print (0.1%)."""
    x = round(100 * mfu, 1)
    lo, hi = (100 * b for b in META_BAND)
    where = "above" if x > hi else "below" if x < lo else "inside"
    return f"{where} Meta's {lo:.0f}-{hi:.0f}%"


def llama405_noovl_inline() -> str:
    """Inline: the megatron top plan without TP overlap, its MFU against Meta's band."""
    th = _top_variant(tp_comm_overlap=False)["throughput"]
    return f"{pct(th['mfu'])} MFU (PaLM; {pct(th['mfu_6n'])} 6N): {_band(th['mfu'])}"


def _plan_phrase(r: dict, setting: str) -> str:
    """A fit row in a phrase: layout, vpp, `setting` (the row's sharding or recompute), micro-batches, memory, step,
    MFU both ways."""
    p, th = r["plan"], r["throughput"]
    return (f"{_layout(p)} (TPxCPxPPxDP), vpp {p['vpp']}, {setting}, {_mb(p)} micro-batches, "
            f"{r['memory']['total_bytes'] / GIB:.1f} GiB, {r['time']['step_s']:.2f} s, {pct(th['mfu'])} MFU "
            f"(PaLM; {pct(th['mfu_6n'])} 6N)")


def llama405_top_inline() -> str:
    """Inline: the megatron top plan in a phrase."""
    r = _top405()
    return f"{_plan_phrase(r, r['plan']['sharding'])}: {_band(r['throughput']['mfu'])}"


def llama405_meta_inline() -> str:
    """Inline: Meta's layout on llama3-meta in a phrase."""
    r = _meta_explain()
    m, th = r["memory"], r["throughput"]
    return (f"{pct(th['mfu'])} MFU (PaLM; {pct(th['mfu_6n'])} 6N; {_band(th['mfu'])}), {r['time']['step_s']:.2f} s, and "
            f"{m['total_bytes'] / GIB:.2f} GiB, {100 * m['total_bytes'] / m['capacity_bytes']:.1f}% of the "
            f"{m['capacity_bytes'] / GIB:.2f} GiB CUDA reports: it fits at a headroom of {_headroom_max(m)} or less")


def llama405_meta_top_inline() -> str:
    """Inline: the llama3-meta stack's top plan in a phrase."""
    r = _fit405("llama3-meta")[0][0]
    return _plan_phrase(r, f"{r['plan']['recompute']} recompute")


def llama405_scaling_inline() -> str:
    """Inline: Meta's layout on the megatron stack with the distributed optimizer and TP overlap (its fastest
    pricing) at 8,192 GPUs (DP 64) and 16,384 (DP 128), the same 2,048-sequence batch: MFU and the ratio."""
    a = _meta_explain("megatron", sharding="zero1", tp_comm_overlap=True, gpus=8192, dp=64)["throughput"]["mfu"]
    b = _meta_explain("megatron", sharding="zero1", tp_comm_overlap=True)["throughput"]["mfu"]
    return f"{pct(a)} -> {pct(b)}, x{b / a:.2f}"


def megatron_readme_weak_scaling() -> str:
    """`planner validate tests/data/published_runs.yaml --group megatron_lm_readme_h100_weak_scaling`: the
    Megatron-LM README's weak-scaling table (up to the 462B on 6,144 H100), record by record and over the group."""
    rows = [r for r in runs_report(RUNS)["runs"] if r["source_group"] == "megatron_lm_readme_h100_weak_scaling"]
    out = ["| record | mesh | predicted tokens/s a GPU | published | error | predicted MFU |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r["error"] is not None:
            out.append(f"| {r['id']} | {r['mesh']} | {r['predicted_tokens_per_s_per_gpu']:,.1f} | "
                       f"{r['published_tokens_per_s_per_gpu']:,.1f} | {signed(r['error'])} | {pct(r['predicted_mfu'])} |")
    s = stats(_errors(rows))
    out.append(f"| **all** ({s['n']}) | | | | median \\|error\\| {pct(s['median_abs'])}, signed median "
               f"{signed(s['median'])} | |")
    return "\n".join(out)


#: name -> (renderer, inline): an inline table is text inside a line, a block one whole lines
TABLES: dict[str, tuple[Callable[[], str], bool]] = {
    "dense_headline": (dense_headline, True),
    "dense_by_stack": (dense_by_stack, False),
    "dense_file_by_stack": (dense_file_by_stack, False),
    "dense_groups": (dense_groups, False),
    "dense_worst": (dense_worst, False),
    "published_memory": (published_memory, False),
    "moe_summary": (moe_summary, False),
    "lowprec_summary": (lowprec_summary, False),
    "memory_rows": (memory_rows_table, False),
    "megatron_ci": (megatron_ci, False),
    "leave_one_out": (leave_one_out, False),
    "llama405_megatron": (llama405_megatron, False),
    "llama405_megatron_step": (llama405_megatron_step, False),
    "llama405_meta_on_megatron": (llama405_meta_on_megatron, False),
    "llama405_meta_stack": (llama405_meta_stack, False),
    "llama405_meta_layout_step": (llama405_meta_layout_step, False),
    "llama405_meta_top": (llama405_meta_top, False),
    "llama405_top_inline": (llama405_top_inline, True),
    "llama405_meta_inline": (llama405_meta_inline, True),
    "llama405_meta_top_inline": (llama405_meta_top_inline, True),
    "llama405_noovl_inline": (llama405_noovl_inline, True),
    "llama405_scaling_inline": (llama405_scaling_inline, True),
    "megatron_readme_weak_scaling": (megatron_readme_weak_scaling, False),
}


# ---------------------------------------------------------------------------------------------- markers

class MarkerError(Exception):
    pass


def spans(text: str, where: str = "text") -> list[tuple[str, int, int]]:
    """[(name, start, end)] of each marked table's content (between the begin marker's end and the end marker's
    start). Unknown names, a begin without its end, an end without its begin and nesting are MarkerErrors."""
    out, open_ = [], None
    for m in MARKER.finditer(text):
        name, which = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if name not in TABLES:
            raise MarkerError(f"{where}:{line}: no accuracy table {name!r} (known: {', '.join(TABLES)})")
        if which == "begin":
            if open_ is not None:
                raise MarkerError(f"{where}:{line}: {name} begins inside {open_[0]}")
            open_ = (name, m.end(), line)
        else:
            if open_ is None or open_[0] != name:
                raise MarkerError(f"{where}:{line}: {name} ends where it did not begin")
            out.append((name, open_[1], m.start()))
            open_ = None
    if open_ is not None:
        raise MarkerError(f"{where}:{open_[2]}: {open_[0]} begins and never ends")
    return out


def content(name: str) -> str:
    """What goes between the markers: inline, the text itself; block, the table on lines of its own."""
    render, inline = TABLES[name]
    return render() if inline else "\n" + render() + "\n"


def rewrite(text: str, where: str = "text", render: Callable[[str], str] = content) -> tuple[str, list[str]]:
    """The text with every marked table rendered now, and the names of those that changed."""
    parts, stale, pos = [], [], 0
    for name, a, b in spans(text, where):
        new = render(name)
        if text[a:b] != new:
            stale.append(name)
        parts += [text[pos:a], new]
        pos = b
    parts.append(text[pos:])
    return "".join(parts), stale


def run(check: bool) -> tuple[list[str], list[str]]:
    """(stale 'file: name' entries, written files). Raises MarkerError where a marker is wrong or a table is
    placed nowhere."""
    placed, stale, written = set(), [], []
    for path in DOCS:
        text = path.read_text()
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        placed |= {n for n, _, _ in spans(text, rel)}
        new, changed = rewrite(text, rel)
        stale += [f"{rel}: {n}" for n in changed]
        if changed and not check:
            path.write_text(new)
            written.append(rel)
    missing = [n for n in TABLES if n not in placed]
    if missing:
        raise MarkerError(f"placed in no file: {', '.join(missing)} (add <!-- accuracy:NAME begin/end --> markers)")
    return stale, written


def main(argv: list[str]) -> int:
    if argv[:1] == ["--print"] and len(argv) == 2 and argv[1] in TABLES:
        print(TABLES[argv[1]][0]())
        return 0
    if argv not in ([], ["--check"]):
        print("usage: scripts/accuracy_tables.py [--check | --print NAME]", file=sys.stderr)
        return 2
    check = argv == ["--check"]
    try:
        stale, written = run(check)
    except MarkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if check:
        for s in stale:
            print(f"stale: {s} (rerun: PYTHONPATH=. python scripts/accuracy_tables.py)")
        if not stale:
            print("every accuracy table is current")
        return 1 if stale else 0
    print("\n".join(f"rewrote {w}" for w in written) if written else "every accuracy table was current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
