"""`planner budget`: days, GPU-hours, cost, energy, checkpoints, failures and goodput of a plan.

The plan options are explain's, taken from the registered `explain` command's own
signature (the same typer declarations, the same job YAML positional argument, passed to
cli/core.py job_options/load_job exactly as explain passes them), so the two commands cannot
drift apart. The arithmetic lives in planner/budget.py and planner/reliability.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..budget import (
    DEFAULT_MC_RUNS, DEFAULT_RESTART_S, MC_MAX_ITERATIONS, NO_FIT, BudgetOptions, parse_gpu_list, plan_budget, sweep,
)
from ..trainers import load_trainer_config, sniff_format
from .common import Format, FormatOption, cli_errors, warn
from .core import job_option_names, job_from_cli, job_options, job_yaml, plan_parameters, with_parameters
from ..errors import PlannerError
from ..plan import resolve
from ..render.budget import emit_budget, emit_sweep
from ..render.common import progress
from ..units import parse_seconds


def _yaml_has_gpus(job_file, config_format=None, model=None) -> bool:
    if job_file is None:
        return False
    fmt, text = sniff_format(job_file, config_format)
    if fmt is not None:
        try:  # a trainer config: does it give the GPU count itself (a Megatron torchrun line, torchtitan degrees)?
            return load_trainer_config(job_file, fmt=fmt, text=text, model=model).job.get("gpus") is not None
        except PlannerError:
            return False
    raw = job_yaml(job_file, text)
    return isinstance(raw, dict) and raw.get("gpus") is not None


def _fit_pointer(warning: str, job, gpus: str | None = None) -> str:
    """budget.py's no-fit warning with the way out the README's budget flow gives: `planner fit` with the job's model,
    GPUs (`gpus`: a sweep's counts, which fit takes as a list), hardware, stack and batch options as given (saved as
    JSON), then `budget --from-fit` of its first row."""
    import shlex

    from ..schema import Job

    defaults = {k: f.default for k, f in Job.model_fields.items()}
    args = ["planner", "fit", "--model", str(job.model), "--gpus", gpus or str(job.gpus)]
    for key, flag in (("hardware", "--hardware"), ("stack", "--stack"), ("global_batch", "--global-batch"),
                      ("seq_len", "--seq-len")):
        v = getattr(job, key, None)
        if v is not None and v != defaults.get(key):
            args += [flag, str(v)]
    fit = " ".join(shlex.quote(a) for a in args + ["--format", "json"])
    return (f"{warning}: it cannot run, so these days and costs are of no run (exit 1). Find plans that fit with "
            f"`{fit} > fit.json`, then budget one with `planner budget --from-fit fit.json --row 1 --tokens "
            f"{job.tokens:g}`")


def register(app: typer.Typer) -> None:
    plan_params = plan_parameters(app)

    def budget(
        mfu: Optional[float] = typer.Option(None, "--mfu", help="replace the step-time model's MFU by this figure (6N convention), e.g. 0.4"),
        price_per_gpu_hour: Optional[float] = typer.Option(None, "--price-per-gpu-hour", help="price per GPU-hour, for the cost (in --currency)"),
        currency: str = typer.Option("USD", "--currency", help="ISO 4217 code of the price's currency: labels every cost"),
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
        sweep_gpus: Optional[str] = typer.Option(None, "--sweep-gpus", help="GPU counts, e.g. 1024,2048,4096 or a doubling range 1024..8192: a table against cluster size"),
        plot: Optional[Path] = typer.Option(None, "--plot", help="with --sweep-gpus: draw days, cost (GPU-hours without a price) and goodput against GPU count to FILE.png|svg|pdf"),
        fmt: Format = FormatOption,
        **plan_kw,
    ):
        """Training days, GPU-hours, cost, energy, checkpoint interval and goodput of a plan."""
        opts = BudgetOptions(
            mfu=mfu,
            price_per_gpu_hour=price_per_gpu_hour,
            currency=currency,
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
        counts = parse_gpu_list(sweep_gpus, warn=warn) if sweep_gpus is not None else None
        if plot is not None:
            if counts is None:
                raise PlannerError("--plot draws the GPU-count sweep", "add --sweep-gpus, e.g. --sweep-gpus 1024,2048,4096")
            from ..plot import check_plot_path

            check_plot_path(plot)
        job_file = plan_kw.pop("job_file", None)
        from_fit, row = plan_kw.pop("from_fit", None), plan_kw.pop("row", 1)
        config_format = plan_kw.pop("config_format", None)
        if counts is not None and plan_kw.get("gpus") is None and not _yaml_has_gpus(job_file, config_format, plan_kw.get("model")):
            plan_kw["gpus"] = counts[0]  # the base count (what --mtbf-hours refers to)
        read: list = []  # the trainer config read, if the job file is one (its JSON block, as explain's)
        job, where = job_from_cli(job_file, job_options(**{k: plan_kw.get(k) for k in job_option_names()}), from_fit, row,
                                  config_format, read)
        if job.tokens is None:
            raise PlannerError("no training tokens given", "pass --tokens, e.g. 15e12 or 15T, or set `tokens:` in the job YAML")
        if counts is not None:
            with progress("budget sweep", len(counts)) as tick:
                rows = sweep(job, counts, opts, where, progress=tick)
            priced = [r for r in rows if r["skipped"] is None]
            if not priced:
                raise PlannerError("--sweep-gpus: the plan runs at none of the counts: " + "; ".join(
                    f"{r['gpus']:,}: {r['skipped']}" for r in rows), "; ".join(dict.fromkeys(r["hint"] for r in rows)))
            for r in rows:
                if r["skipped"] is not None:
                    warn(f"--sweep-gpus {r['gpus']:,} left out: {r['skipped']} ({r['hint']})")
            if plot is not None:
                from ..plot import save_figure, sweep_figure

                save_figure(sweep_figure(priced, f"{job.model} on {job.hardware}, {job.tokens:.3g} tokens"), plot)
                sys.stderr.write(f"wrote {plot}\n")
            emit_sweep(rows, job, opts, fmt)
            if not any(r["fits"] for r in priced):  # as a single budget of a plan that does not fit: exit 1
                counts_run = ",".join(str(r["gpus"]) for r in priced)
                warn(_fit_pointer(f"{NO_FIT} at any count priced ({counts_run.replace(',', ', ')} GPUs)", job,
                                  counts_run))
                raise typer.Exit(1)
            return
        settings, plan, warnings = resolve(job, where)
        res = plan_budget(settings, plan, opts)
        if read:  # the reader's assumed lines and what it did not price, as explain's JSON has them (trainers/report.py)
            from ..trainers.report import with_config

            with_config(res, read[0])
            from ..budget import config_checkpoint

            config_checkpoint(res, read[0].checkpoint_enable)
        if not res["fits"]:
            res["warnings"] = [_fit_pointer(w, job) if w.startswith(NO_FIT) else w for w in res["warnings"]]
        res["warnings"] = warnings + res["warnings"]
        emit_budget(res, fmt)
        if not res["fits"]:
            # README exit codes: 1 = does not fit. The budget is printed (as fit prints its closest plan on exit 1),
            # but its days and costs are those of a run that cannot start: a script reading the exit code sees so
            # (before 2026-12-07: a warning and exit 0)
            raise typer.Exit(1)

    app.command("budget")(cli_errors(with_parameters(budget, plan_params)))

