"""`planner fit` for people: the search's counts and the ranked plans (json|yaml|csv: the
rows with `explain`'s keys)."""

from __future__ import annotations

import shlex


from ..search import config_explain_args, explain_args
from ..space import RANK_ORDERS_TP_INNER
from .common import (Format, capacity_text, emit, err, gib, mesh, mfu_convention, note, out, param_gather_exposed, pct,
                     print_rows, seconds, sharding_text)
from .explain import explain_table


def stack_options_text(p: dict) -> str:
    """The stack options of a row, compactly: 'TP overlap, compile, fp8 tensorwise' ('-' for none); 'no
    compile' on a stack that compiles (stack_db compiled_kernels), where fit takes compile on unless pinned
    or refused (space.uncompiled_choices: torchtitan's mxfp8 with TP); an MoE row with ep > 1 names its
    dispatcher (plan moe_dispatcher: 'EP overlap, deepep'); a row whose plan names fp8_grouped_experts its
    routed experts' precision ('fp8 experts', 'bf16 experts'); a row in fp16 says so first ('fp16': the job's;
    DeepSpeed's zero0 is planned only for a job that says fp16); a row of the job's mfsdp_v2 'Megatron-FSDP v2'; a row whose plan exposes the optimizer's parameter
    all-gather (the job's dp_param_gather_overlap false, or a stack that gathers after the step: DeepSpeed's ZeRO-1/2,
    at zero1 / zero2 under the DP overlap; common.param_gather_exposed) 'param gather exposed'."""
    from ..catalog import load_stack

    parts = ["fp16"] if p.get("fp16") else []  # the row's 16-bit dtype where not bf16 (priced as bf16)
    if p.get("mfsdp_v2"):  # the job's Megatron-FSDP v2 (--megatron-fsdp-version 2, memory.py [v2])
        parts.append("Megatron-FSDP v2")
    if p.get("tp_comm_overlap"):  # a pinned --tp-comm-overlap the trainer turns off (MLA: plan.tp_overlap) says so
        parts.append("TP overlap (priced off)" if p.get("tp_comm_overlap_runs") is False else "TP overlap")
    if p.get("torch_compile"):
        parts.append("compile")
    elif p.get("stack") and load_stack(p["stack"]).compiled_kernels is not None:
        parts.append("no compile")
    if not p.get("dp_comm_overlap", True):
        parts.append("no DP overlap")
    elif param_gather_exposed(p):  # the job's or the stack's (DeepSpeed): the all-gather exposed (step.py [40])
        parts.append("param gather exposed")
    if p.get("ep_comm_overlap"):
        parts.append("EP overlap")
    if p.get("moe_shared_expert_overlap"):  # the job's --moe-shared-expert-overlap (step.py [38])
        parts.append("shared-expert overlap")
    if p.get("moe_dispatcher") and (p.get("ep") or 1) > 1:  # the row's MoE dispatcher, where an EP group exchanges tokens
        parts.append(p["moe_dispatcher"])
    if p.get("fp8_recipe"):
        parts.append(f"{p['precision']} {p['fp8_recipe']}" if p["fp8_recipe"] != p["precision"] else p["precision"])
    if p.get("fp8_grouped_experts") is not None:  # the routed experts' grouped GEMMs (plan.fge; step.py [16])
        parts.append(f"{p['precision'] if p['fp8_grouped_experts'] else 'bf16'} experts")
    return ", ".join(parts) or "-"


def uncompiled_text(rows: list[dict], job) -> str:
    """The fit table's line for rows fit priced without torch.compile on a stack that compiles, where the
    job left compile to the search (space.uncompiled_choices): why (the start-up rules that read compile,
    startup.COMPILE_RULES, named as fit counts them) and how they are priced; '' where there are none."""
    from ..catalog import load_stack
    from ..startup import COMPILE_RULES, rules_for

    if job.torch_compile is not None:
        return ""
    off = [i for i, r in enumerate(rows, 1) if not r["plan"].get("torch_compile") and r["plan"].get("stack")
           and load_stack(r["plan"]["stack"]).compiled_kernels is not None]
    if not off:
        return ""
    rules = "; ".join(f"{r.key}: {r.text}" for _, r in rules_for(load_stack(rows[off[0] - 1]["plan"]["stack"]))
                      if r.key in COMPILE_RULES)
    return (f"no compile (row{'s' if len(off) > 1 else ''} {', '.join(map(str, off))}): torch.compile off, which fit "
            f"tries only where the same options compiled break a start-up rule ({rules}); priced with the stack's eager "
            "kernels (stack_db kernels: no fewer bytes moved or saved than its compiled_kernels); "
            "--compile / --no-compile pins it")


def searched(result) -> str:
    """'searched N candidates in T s: ... fit', the search's counts, and how many of the fitting
    ones were priced by their compute alone (search._prefilter: that lower bound of their step
    already ranks them below the top rows, so their communication was not priced)."""
    c = result.counts
    dropped = (f" ({c.prefilter_dropped:,} of them priced by their compute alone, which already ranks them below the "
               "top rows)") if c.prefilter_dropped else ""
    # fit's dispatcher search: candidates over the HBM with the stack's default dispatcher whose other dispatchers'
    # memory was not priced (search._other_dispatchers: their compute alone ranks them below the top rows)
    unpriced = (f" ({c.dispatcher_unpriced:,} of them with the default dispatcher, the others not priced: their compute "
                "alone ranks them below the top rows)") if c.dispatcher_unpriced else ""
    return (f"searched {c.considered:,} candidates in {result.wall_s:.2f} s: {c.broke_constraint:,} broke a constraint, "
            f"{c.did_not_fit:,} did not fit{unpriced}, {c.feasible:,} fit{dropped}")


def emit_fit(result, rows: list[dict], job, rank_orders, fmt: Format, config_plan: dict | None = None,
             config: tuple | None = None) -> None:
    """The first `rows` of a fit result; a machine format gets the counts as a note on stderr.
    The rank-order column appears when --rank-orders was given or a row is not tp-cp-pp-dp.
    config_plan (`fit CONFIG`): json and yaml print {"rows": [...], "config_plan": {...}} (the rows
    as ever, the file's own plan beside them); csv the rows alone."""
    if fmt != Format.table:
        note(searched(result))
    shown_orders = rank_orders != RANK_ORDERS_TP_INNER or any(r["plan"]["rank_order"] != "tp-cp-pp-dp" for r in rows)
    data = {"rows": rows, "config_plan": config_plan} if config_plan is not None and fmt in (Format.json, Format.yaml) else rows
    emit(data, fmt, lambda: fit_table(result.__class__(**{**result.__dict__, "rows": rows}), job,
                                      result.gpus, shown_orders, config))


def row_command(job, row: dict, config: tuple | None) -> str:
    """The `planner explain` command that prices a fit row: from the model and options (explain_args), or
    for `fit CONFIG` (config: (the file, the job options given to the fit as explain takes them, or None
    where they could not be read back, the file's settings explain keeps: fit_config.unkept, the expert axes it
    sets: fit_config.file_axes)) from the file
    with the row's plan (config_explain_args)."""
    if config is None:
        return f"planner explain {shlex.join(explain_args(job, row))}"
    path, given, kept, axes = config
    if given and "--mfsdp-outer-optim" in given and not row["plan"].get("mfsdp_outer_optim"):
        given = [a for a in given if a != "--mfsdp-outer-optim"]  # HSDP rows only (explain_args)
    if kept and row["plan"]["recompute"] != "full":  # the file's full-recompute settings: `explain CONFIG --recompute
        from ..plan import FULL_ONLY_FIELDS  # none|selective` drops them (cli/core.command_line_recompute)

        kept = [k for k in kept if k.split("=")[0] not in FULL_ONLY_FIELDS]
    args = config_explain_args(path, job, row, axes)
    if given and "--global-batch" in given and "--global-batch" in args:  # the fit's own option, repeated below
        i = args.index("--global-batch")
        args = args[:i] + args[i + 2:]
    return (f"planner explain {shlex.join(args + (given or []))}"
            + (" and this command's job options" if given is None else "")
            + (f" (it keeps the file's {', '.join(kept)}, which the row was priced without: --explain N here prices "
               "the row itself)" if kept else ""))


def emit_fit_row(res: dict, job, fmt: Format, config: tuple | None = None) -> None:
    """`fit --explain N`: row N as `explain` shows it, and the explain command that repeats it."""
    emit(res, fmt, lambda: explain_table(res, res.get("warnings", [])))
    if fmt == Format.table:
        out.print(f"  the same: {row_command(job, res, config)}")


def _ranked_by(objective: str, p0: dict) -> str:
    if objective == "memory":
        return "memory (the peak over the batch ramp's phases)" if p0.get("batch_size_schedule") else "memory"
    if p0.get("batch_size_schedule"):  # search.step_times: each phase's steps at its own batch
        return "the whole run's time over the batch ramp" + (" per token x GPUs (cost)" if objective == "cost" else "")
    return "step time" if objective == "time" else objective


def ramp_text(schedule: list) -> str:
    """The fit table's line for a batch ramp: what was applied and what the columns mean."""
    from ..batch_ramp import to_megatron, tokens_text

    phases = ", ".join(f"{p['global_batch']:,} from {tokens_text(p['from_tokens'])}" for p in schedule)
    return (f"batch ramp applied (--step-batch-size-schedule '{to_megatron([(p['from_tokens'], p['global_batch']) for p in schedule])}'): "
            f"batch {phases} tokens; every plan passes the batch rules and fits at every phase; GiB/GPU: the peak over the phases; "
            "step s, MFU, tokens/s: the last phase's; days: the whole run, each phase's steps at its own batch")


def fit_table(result, job, gpus_list, rank_order_shown: bool, config: tuple | None = None) -> None:
    """The ranked plans."""
    c = result.counts
    rows = result.rows
    p0 = rows[0]["plan"]
    gpus_text = ", ".join(f"{g:,}" for g in gpus_list)
    out.print(
        f"[bold]{p0['model']}[/bold] on {gpus_text} x {p0['hardware']}, global batch {p0['global_batch']:,} x "
        f"{p0['seq_len']:,} tokens, {p0['precision']}" + (" (fp16, priced as bf16)" if p0.get("fp16") else "")
        + f", stack {p0.get('stack', 'megatron')}; "
        f"ranked by {_ranked_by(result.objective, p0)}"
    )
    if p0.get("batch_size_schedule"):
        out.print(f"  {ramp_text(p0['batch_size_schedule'])}")
    out.print(f"  {searched(result)}")
    for reason, n in sorted(c.reasons.items(), key=lambda kv: -kv[1]):
        out.print(f"    {n:>12,}  {reason}")
    if len(gpus_list) > 1:
        out.print("  one row per GPU count: its best plan (--format json lists the ranked rows)")
    tokens = rows[0]["throughput"].get("training_days") is not None
    ramp = "training_days_ramp" in rows[0]["throughput"]  # a batch ramp: the run's days, memory's peak over its phases
    cols = ["#", "TPxCPxPPxDP", "vpp", "sharding", "micro-batch", "recompute", "SP", "stack options"]
    show_ep = any("moe_capacity_factor" in r["plan"] for r in rows)  # a mixture-of-experts model
    if show_ep:
        cols.insert(2, "EP")
    if rank_order_shown:
        cols.append("rank order")
    cols += ["GiB/GPU", "% HBM", "step s", "MFU", "tokens/s"]
    if tokens:
        cols.append("days")
    if len(gpus_list) > 1:
        cols.insert(1, "GPUs")
    justify = ["left" if col in ("TPxCPxPPxDP", "sharding", "recompute", "rank order", "stack options") else "right" for col in cols]
    table_rows = []
    for i, r in enumerate(rows, 1):
        p, m, t, th = r["plan"], r["memory"], r["time"], r["throughput"]
        cells = [str(i), mesh(p), str(p["vpp"]), sharding_text(p), f"{p['micro_batch']} x {p['microbatches_per_step']}",
                 p["recompute"], "on" if p["sequence_parallel"] else "off", stack_options_text(p)]
        if show_ep:  # EP, and the expert TP where it is not tp (MoE parallel folding: "8/etp1")
            etp = p.get("etp") or p["tp"]
            cells.insert(2, str(p["ep"]) + (f"/etp{etp}" if etp != p["tp"] else ""))
        if rank_order_shown:
            cells.append(p["rank_order"])
        peak = th["memory_peak_bytes_ramp"] if ramp else m["total_bytes"]
        cells += [gib(peak, 1), f"{100 * peak / m['capacity_bytes']:.0f}%",
                  seconds(t["step_s"]), pct(th["mfu"]), f"{th['tokens_per_s']:,.0f}"]
        if tokens:
            cells.append(f"{th['training_days_ramp' if ramp else 'training_days']:,.1f}")
        if len(gpus_list) > 1:
            cells.insert(1, f"{p['gpus']:,}")
        table_rows.append(cells)
    print_rows(cols, justify, table_rows, 1000)
    shown = {r["plan"]["gpus"] for r in rows}
    missing = [g for g in gpus_list if g not in shown]
    if len(gpus_list) > 1 and missing:
        out.print(f"  no row above for {', '.join(f'{g:,}' for g in missing)} GPUs: none of their plans ranks in the "
                  f"top {len(rows)} (or none fits); fit that count alone to see its plans")
    out.print("  micro-batch: sequences per micro-batch x micro-batches per step; GiB/GPU on the heaviest pipeline stage; "
              f"% HBM: share of {capacity_text(rows[0]['memory'])}")
    out.print(f"  {mfu_convention((rows[0].get('flops') or {}).get('attention_counted'))}")
    searched_off = uncompiled_text(rows, job)
    if searched_off:
        out.print(f"  {searched_off}")
    out.print(f"  row 1 in full: {row_command(job, rows[0], config)}")
    out.print("  (or add --explain N to this command for the breakdown of row N)")
