"""`planner budget` for people: the budget of one plan (days, GPU-hours, cost, energy,
checkpoints, failures, goodput) and the table against cluster size (--sweep-gpus)."""

from __future__ import annotations

from rich.table import Table

from .common import Format, emit, gb, gbps, mesh, mesh_words, mfu_convention, millions, money, out, pct, print_assumed, warn


def _days(s: float) -> str:
    return f"{s / 86400:,.1f} days"


def _interval(s: float) -> str:
    return f"{s / 60:,.0f} min ({s:,.0f} s)" if s >= 60 else f"{s:,.1f} s"


def _short_source(src: str) -> str:
    if src.startswith("Llama 3"):
        return "Llama 3: 419 / (54 d x 16,384 GPUs)"
    return src


def emit_budget(res: dict, fmt: Format) -> None:
    """One plan's budget in `fmt`; its warnings on stderr in every format."""
    emit(res, fmt, lambda: budget_table(res))
    if fmt != Format.table:
        for w in res["warnings"]:
            warn(w)


def emit_sweep(rows: list[dict], job, opts, fmt: Format) -> None:
    """--sweep-gpus: one row per GPU count."""
    emit(rows, fmt, lambda: sweep_table(rows, job, opts))


def budget_table(res: dict) -> None:
    p, t, ck, fl, iv, gp, ef = (res[k] for k in ("plan", "training", "checkpoint", "failures", "interval", "goodput", "effective"))
    out.print(f"[bold]{p['model']}[/bold] on {p['gpus']:,} x {p['hardware']}: {mesh_words(p)}, {p['sharding']}, "
              f"{t['tokens']:.3g} tokens")
    print_assumed(res)
    if t["mfu_source"] == "--mfu":
        mfu_note = f"given (--mfu), 6N convention; step-time model: {pct(t['step_model_mfu_6n'])}"
        time_note = "6N x tokens / (GPUs x peak x MFU)"
        out.print(f"  training time = 6N x tokens / (GPUs x peak x MFU) with MFU {pct(t['mfu'])} from --mfu, "
                  f"in the 6N convention (model FLOPs 6 per parameter per token, attention not counted), "
                  f"peak {t['peak_flops'] / 1e12:,.0f} TFLOP/s")
    elif "batch_ramp" in t:  # each phase's steps at its own batch (explain.batch_ramp)
        mfu_note = f"step-time model over the batch ramp, 6N convention (last batch: {pct(t['step_model_mfu_6n'])})"
        time_note = " + ".join(f"{p['steps']:,.0f} x {p['step_s']:.3f} s" for p in t["batch_ramp"])
        out.print(f"  training time = each batch-ramp phase's steps x its step time ({time_note}), "
                  f"i.e. MFU {pct(t['mfu'])} in the 6N convention; --mfu F replaces it")
    else:
        mfu_note = f"step-time model, 6N convention ({pct(t['step_model_mfu'])} with attention)"
        time_note = f"{t['steps']:,.0f} steps x {t['step_s']:.3f} s"
        out.print(f"  training time = steps x step time of the step-time model ({t['steps']:,.0f} x {t['step_s']:.3f} s), "
                  f"i.e. MFU {pct(t['mfu'])} in the 6N convention; --mfu F replaces it")
    storage = "Llama 3's, assumed" if ck["storage_source"].startswith("Llama 3") else ck["storage_source"]
    tab = Table(title="Training budget", title_justify="left")
    tab.add_column("quantity")
    tab.add_column("value", justify="right", no_wrap=True)
    tab.add_column("note")
    rows = [
        ("training compute", f"{t['total_flops_6n']:.3e} FLOPs", "6N x tokens"),
        ("MFU", pct(t["mfu"]), mfu_note),
        ("training time", _days(t["wall_s"]), f"failure-free: {time_note}"),
        ("GPU-hours", f"{t['gpu_hours']:,.0f}", "failure-free"),
    ]
    if t["cost"] is not None:
        rows.append(("cost", f"{money(t['cost'])} {t['currency']}",
                     f"{t['price_per_gpu_hour']:g} {t['currency']} per GPU-hour (--price-per-gpu-hour), failure-free"))
    rows += [
        ("energy", f"{t['energy_kwh'] / 1e3:,.1f} MWh", f"{t['tdp_W']:,.0f} W TDP x PUE {t['pue']:g}, failure-free"),
        ("checkpoint per GPU", f"{gb(ck['bytes_per_gpu'], 3)} GB", f"{ck['saved_terms']}; job {gb(ck['job_bytes'], 0)} GB"
         + ("; global rank 0 writes it all (full state dict)" if ck.get("writer", "").startswith("global") else "")
         + ("" if ck.get("written_by_default", True) or ck.get("enabled_in_config") is True
            else "; if enabled: the stack's default writes none")),
        ("checkpoint write", f"{ck['write_s']:,.2f} s", f"at {gbps(ck['storage_Bps'], 0)} ({storage})"),
        ("pause per checkpoint", f"{ck['pause_s']:,.3g} s", "copy to host memory (async)" if ck["async"] else "synchronous save"),
        ("failure rate", f"{fl['failures_per_gpu_day']:.3g} /GPU/day", _short_source(fl["source"])),
        ("MTBF", f"{fl['mtbf_hours']:,.2f} h", f"restart {fl['restart_s']:,.0f} s"),
        ("Young interval", _interval(iv["young_s"]), "sqrt(2 x pause x MTBF)"),
        ("Daly interval", _interval(iv["daly_s"]), "Daly 2006 eq. (37)"),
        ("interval used", _interval(iv["used_s"]), iv["rule"].replace("young", "Young's")),
        ("goodput, closed form", pct(gp["closed_form"]), f"Daly's T_w; {pct(gp['closed_form_daly'])} at Daly's interval"),
    ]
    if gp["monte_carlo"] is not None:
        rows.append(("goodput, Monte-Carlo", pct(gp["monte_carlo"]),
                     f"seed sec. 9.2, {gp['monte_carlo_runs']} runs, std {pct(gp['monte_carlo_std'])}"))
    rows.append(("effective training time", _days(ef["wall_s"]), "closed form"
                 + (f"; Monte-Carlo {_days(ef['monte_carlo_wall_s'])}" if ef["monte_carlo_wall_s"] is not None else "")))
    rows.append(("effective GPU-hours", f"{ef['gpu_hours']:,.0f}", "closed form"))
    if ef["cost"] is not None:
        rows.append(("effective cost", f"{money(ef['cost'])} {t['currency']}", "closed form"))
    for r in rows:
        tab.add_row(*r)
    out.print(tab)
    for n in res["notes"]:
        out.print(f"  note: {n}")
    for w in res["warnings"]:
        warn(w)


def sweep_table(rows: list[dict], job, opts) -> None:
    tab = Table(title=f"Budget against cluster size: {job.model}, {job.tokens:.3g} tokens", title_justify="left",
                box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    priced = opts.price_per_gpu_hour is not None
    # short, two-line headers and no wrapping inside a number, so the table fits 80 columns
    cols = ["GPUs", "mesh", "MFU", "days", "GPU-h"] + ([f"cost\n{opts.currency}"] if priced else []) + [
        "MTBF\nh", "ckpt\nmin", "good-\nput", "eff.\ndays"]
    body = []
    for r in (r for r in rows if r["skipped"] is None):  # the counts left out are named on stderr (cli/budget.py)
        cells = [f"{r['gpus']:,}", mesh(r) + ("" if r["fits"] else " no fit"),
                 pct(r["mfu"]), f"{r['days']:,.1f}", millions(r["gpu_hours"])]
        if priced:
            cells.append(millions(r["cost"]))
        cells += [f"{r['mtbf_hours']:,.1f}", f"{r['interval_s'] / 60:,.1f}", pct(r["goodput"]),
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
    else:
        out.print(f"  {mfu_convention(None)}")
