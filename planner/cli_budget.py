"""`planner budget`: days, GPU-hours, cost, energy, checkpoints, failures and goodput of a plan.

The plan options are explain's, taken from the registered `explain` command's own
signature (the same typer declarations, the same job YAML positional argument, passed to
cli_core.job_options/load_job exactly as explain passes them), so the two commands cannot
drift apart. The arithmetic lives in planner/budget.py and planner/reliability.py.
"""

from __future__ import annotations

import inspect
from typing import Optional

import typer
from rich.table import Table

from . import render
from .budget import (
    DEFAULT_MC_RUNS, DEFAULT_RESTART_S, MC_MAX_ITERATIONS, BudgetOptions, parse_gpu_list, plan_budget, sweep,
)
from .catalog import read_yaml
from .cli_common import Format, FormatOption, cli_errors, out, warn
from .cli_core import job_from_cli, job_options
from .errors import PlannerError
from .plan import resolve
from .units import parse_seconds

_JOB_OPTION_NAMES = tuple(inspect.signature(job_options).parameters)


def _plan_parameters(app: typer.Typer) -> list[inspect.Parameter]:
    """explain's job-file argument and plan options (those job_options takes), as declared."""
    for cmd in app.registered_commands:
        if getattr(cmd.callback, "__name__", "") == "explain":
            sig = inspect.signature(cmd.callback, eval_str=True)
            return [p for name, p in sig.parameters.items() if name in ("job_file", "from_fit", "row") or name in _JOB_OPTION_NAMES]
    raise RuntimeError("planner budget needs the explain command registered first (cli_core.register)")


def _with_parameters(fn, before: list[inspect.Parameter]):
    """Give `fn(**kw)` a signature of `before` + fn's own keyword parameters, for typer."""
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in before + own]
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn


def _yaml_has_gpus(job_file) -> bool:
    if job_file is None:
        return False
    raw = read_yaml(job_file)
    return isinstance(raw, dict) and raw.get("gpus") is not None


def register(app: typer.Typer) -> None:
    plan_params = _plan_parameters(app)

    def budget(
        mfu: Optional[float] = typer.Option(None, "--mfu", help="replace the step-time model's MFU by this figure (6N convention), e.g. 0.4"),
        price_per_gpu_hour: Optional[float] = typer.Option(None, "--price-per-gpu-hour", help="price per GPU-hour, for the cost"),
        pue: float = typer.Option(1.0, "--pue", help="power usage effectiveness (1.0: the GPUs alone at TDP)"),
        failures_per_gpu_day: Optional[float] = typer.Option(None, "--failures-per-gpu-day", help="interruptions per GPU per day (default: Llama 3: 419 / (54 d x 16,384))"),
        mtbf_hours: Optional[float] = typer.Option(None, "--mtbf-hours", help="the job's mean time between failures at --gpus (sweep without --gpus: at the first count)"),
        checkpoint_bandwidth: Optional[float] = typer.Option(None, "--checkpoint-bandwidth", help="aggregate storage write GB/s (default: 2000, Llama 3's 2 TB/s)"),
        checkpoint_save_s: Optional[float] = typer.Option(None, "--checkpoint-save-s", help="seconds to write one checkpoint (instead of the bandwidth)"),
        restart_s: float = typer.Option(DEFAULT_RESTART_S, "--restart-s", help="seconds to detect a failure, swap, reload (default: 600, the seed's)"),
        async_checkpoint: bool = typer.Option(False, "--async-checkpoint", help="pause only for the copy to host memory (DCP async_save)"),
        checkpoint_interval: Optional[str] = typer.Option(None, "--checkpoint-interval", help="e.g. 27min (default: Young's interval)"),
        mc_runs: int = typer.Option(DEFAULT_MC_RUNS, "--mc-runs", help=f"Monte-Carlo runs [20, the seed's; capped at {MC_MAX_ITERATIONS:.0e} segments; 0 = off]"),
        mc_seed: int = typer.Option(0, "--mc-seed", help="first random seed of the Monte-Carlo runs"),
        sweep_gpus: Optional[str] = typer.Option(None, "--sweep-gpus", help="GPU counts, e.g. 1024,2048,4096: a table against cluster size"),
        fmt: Format = FormatOption,
        **plan_kw,
    ):
        """Training days, GPU-hours, cost, energy, checkpoint interval and goodput of a plan."""
        opts = BudgetOptions(
            mfu=mfu,
            price_per_gpu_hour=price_per_gpu_hour,
            pue=pue,
            failures_per_gpu_s=None if failures_per_gpu_day is None else failures_per_gpu_day / 86400.0,
            job_mtbf_s=None if mtbf_hours is None else mtbf_hours * 3600.0,
            checkpoint_Bps=None if checkpoint_bandwidth is None else checkpoint_bandwidth * 1e9,
            checkpoint_save_s=checkpoint_save_s,
            restart_s=restart_s,
            async_save=async_checkpoint,
            interval_s=None if checkpoint_interval is None else parse_seconds(checkpoint_interval, "--checkpoint-interval"),
            mc_runs=mc_runs,
            mc_seed=mc_seed,
        )
        opts.check()
        counts = parse_gpu_list(sweep_gpus) if sweep_gpus is not None else None
        job_file = plan_kw.pop("job_file", None)
        from_fit, row = plan_kw.pop("from_fit", None), plan_kw.pop("row", 1)
        if counts is not None and plan_kw.get("gpus") is None and not _yaml_has_gpus(job_file):
            plan_kw["gpus"] = counts[0]  # the base count (what --mtbf-hours refers to)
        job, where = job_from_cli(job_file, job_options(**{k: plan_kw.get(k) for k in _JOB_OPTION_NAMES}), from_fit, row)
        if job.tokens is None:
            raise PlannerError("no training tokens given", "pass --tokens, e.g. 15e12 or 15T, or set `tokens:` in the job YAML")
        if counts is not None:
            rows = sweep(job, counts, opts, where)
            render.emit(rows, fmt, lambda: _sweep_table(rows, job, opts))
            return
        settings, plan, warnings = resolve(job, where)
        res = plan_budget(settings, plan, opts)
        res["warnings"] = warnings + res["warnings"]
        render.emit(res, fmt, lambda: _budget_table(res))
        if fmt != Format.table:
            for w in res["warnings"]:
                warn(w)

    app.command("budget")(cli_errors(_with_parameters(budget, plan_params)))


# ---------------------------------------------------------------- rendering
def _days(s: float) -> str:
    return f"{s / 86400:,.1f} days"


def _interval(s: float) -> str:
    return f"{s / 60:,.0f} min ({s:,.0f} s)" if s >= 60 else f"{s:,.1f} s"


def _money(x) -> str:
    return "" if x is None else f"{x:,.0f}"


def _millions(x) -> str:
    return "" if x is None else f"{x / 1e6:,.2f}M"


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def _short_source(src: str) -> str:
    if src.startswith("Llama 3"):
        return "Llama 3: 419 / (54 d x 16,384 GPUs)"
    return src


def _budget_table(res: dict) -> None:
    p, t, ck, fl, iv, gp, ef = (res[k] for k in ("plan", "training", "checkpoint", "failures", "interval", "goodput", "effective"))
    mesh = f"TP {p['tp']} x CP {p['cp']} x PP {p['pp']} x DP {p['dp']}"
    out.print(f"[bold]{p['model']}[/bold] on {p['gpus']:,} x {p['hardware']}: {mesh}, {p['sharding']}, "
              f"{t['tokens']:.3g} tokens")
    if t["mfu_source"] == "--mfu":
        mfu_note = f"given (--mfu), 6N convention; step-time model: {_pct(t['step_model_mfu_6n'])}"
        time_note = "6N x tokens / (GPUs x peak x MFU)"
        out.print(f"  training time = 6N x tokens / (GPUs x peak x MFU) with MFU {_pct(t['mfu'])} from --mfu, "
                  f"in the 6N convention (model FLOPs 6 per parameter per token, attention not counted), "
                  f"peak {t['peak_flops'] / 1e12:,.0f} TFLOP/s")
    else:
        mfu_note = f"step-time model, 6N convention ({_pct(t['step_model_mfu'])} with attention)"
        time_note = f"{t['steps']:,.0f} steps x {t['step_s']:.3f} s"
        out.print(f"  training time = steps x step time of the step-time model ({t['steps']:,.0f} x {t['step_s']:.3f} s), "
                  f"i.e. MFU {_pct(t['mfu'])} in the 6N convention; --mfu F replaces it")
    storage = "Llama 3's, assumed" if ck["storage_source"].startswith("Llama 3") else ck["storage_source"]
    tab = Table(title="Training budget", title_justify="left")
    tab.add_column("quantity")
    tab.add_column("value", justify="right", no_wrap=True)
    tab.add_column("note")
    rows = [
        ("training compute", f"{t['total_flops_6n']:.3e} FLOPs", "6N x tokens"),
        ("MFU", _pct(t["mfu"]), mfu_note),
        ("training time", _days(t["wall_s"]), f"failure-free: {time_note}"),
        ("GPU-hours", f"{t['gpu_hours']:,.0f}", "failure-free"),
    ]
    if t["cost"] is not None:
        rows.append(("cost", _money(t["cost"]), f"{t['price_per_gpu_hour']:g} per GPU-hour, failure-free"))
    rows += [
        ("energy", f"{t['energy_kwh'] / 1e3:,.1f} MWh", f"{t['tdp_W']:,.0f} W TDP x PUE {t['pue']:g}, failure-free"),
        ("checkpoint per GPU", f"{ck['bytes_per_gpu'] / 1e9:,.3f} GB", f"{ck['saved_terms']}; job {ck['job_bytes'] / 1e9:,.0f} GB"),
        ("checkpoint write", f"{ck['write_s']:,.2f} s", f"at {ck['storage_Bps'] / 1e9:,.0f} GB/s ({storage})"),
        ("pause per checkpoint", f"{ck['pause_s']:,.3g} s", "copy to host memory (async)" if ck["async"] else "synchronous save"),
        ("failure rate", f"{fl['failures_per_gpu_day']:.3g} /GPU/day", _short_source(fl["source"])),
        ("MTBF", f"{fl['mtbf_hours']:,.2f} h", f"restart {fl['restart_s']:,.0f} s"),
        ("Young interval", _interval(iv["young_s"]), "sqrt(2 x pause x MTBF)"),
        ("Daly interval", _interval(iv["daly_s"]), "Daly 2006 eq. (37)"),
        ("interval used", _interval(iv["used_s"]), iv["rule"].replace("young", "Young's")),
        ("goodput, closed form", _pct(gp["closed_form"]), f"Daly's T_w; {_pct(gp['closed_form_daly'])} at Daly's interval"),
    ]
    if gp["monte_carlo"] is not None:
        rows.append(("goodput, Monte-Carlo", _pct(gp["monte_carlo"]),
                     f"seed sec. 9.2, {gp['monte_carlo_runs']} runs, std {_pct(gp['monte_carlo_std'])}"))
    rows.append(("effective training time", _days(ef["wall_s"]), "closed form"
                 + (f"; Monte-Carlo {_days(ef['monte_carlo_wall_s'])}" if ef["monte_carlo_wall_s"] is not None else "")))
    rows.append(("effective GPU-hours", f"{ef['gpu_hours']:,.0f}", "closed form"))
    if ef["cost"] is not None:
        rows.append(("effective cost", _money(ef["cost"]), "closed form"))
    for r in rows:
        tab.add_row(*r)
    out.print(tab)
    for n in res["notes"]:
        out.print(f"  note: {n}")
    for w in res["warnings"]:
        warn(w)


def _sweep_table(rows: list[dict], job, opts: BudgetOptions) -> None:
    tab = Table(title=f"Budget against cluster size: {job.model}, {job.tokens:.3g} tokens", title_justify="left",
                box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    priced = opts.price_per_gpu_hour is not None
    # short, two-line headers and no wrapping inside a number, so the table fits 80 columns
    cols = ["GPUs", "mesh", "MFU", "days", "GPU-h"] + (["cost"] if priced else []) + [
        "MTBF\nh", "ckpt\nmin", "good-\nput", "eff.\ndays"]
    body = []
    for r in rows:
        cells = [f"{r['gpus']:,}", f"{r['tp']}x{r['cp']}x{r['pp']}x{r['dp']}" + ("" if r["fits"] else " no fit"),
                 _pct(r["mfu"]), f"{r['days']:,.1f}", _millions(r["gpu_hours"])]
        if priced:
            cells.append(_millions(r["cost"]))
        cells += [f"{r['mtbf_hours']:,.1f}", f"{r['interval_s'] / 60:,.1f}", _pct(r["goodput"]),
                  f"{r['effective_days']:,.1f}"]
        body.append(cells)
    for j, c in enumerate(cols):
        width = max([len(line) for line in c.split("\n")] + [len(b[j]) for b in body])
        tab.add_column(c, justify="left" if c == "mesh" else "right", min_width=width, no_wrap=True)
    for cells in body:
        tab.add_row(*cells)
    out.print(tab)
    out.print("  mesh = TPxCPxPPxDP, dp scales with the GPU count; ckpt = checkpoint interval; goodput and effective days from the closed form "
              "(the Monte-Carlo runs for a single plan only); --format json|csv for every column")
    if opts.mfu is not None:
        out.print("  MFU given with --mfu: days = 6N x tokens / (GPUs x peak x MFU), 6N convention")
