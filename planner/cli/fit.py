"""`planner fit`: search every way to split a model on a GPU count and rank the plans that
fit (planner/search.py). Table for people; json|yaml|csv rows with `explain`'s keys."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import Format, FormatOption, QuietOption, cli_errors, warn
from ..render.common import note, progress
from .core import (ConfigFormatOption, field_values, with_field_options, CapacityFactorOption, PadToCapacityOption, LoadBalancingOption, RankImbalanceOption, CpCommTypeOption, PpP2pOverlapOption, PpP2pWarmupFlushOption, FitEpOverlapOption, HierCpOption, LossLayersOption, MicrobatchGroupOption, MtpLayersOption,
                   SplitEmbOption, SplitLossOption, StepBatchScheduleOption, load_job, parse_schedule, parse_sizes)
from .. import files
from ..defaults import DEFAULT_GLOBAL_BATCH_TOKENS, DEFAULT_LAYER_SLACK, RANK_ORDERS_ALL, RANK_ORDERS_TP_INNER
from ..errors import NoFitError, PlannerError
from ..trainers import FORMATS
from ..units import parse_count, refuse_repeat, refuse_thousands_separator

# The search, its cost models and its renderer (numpy, pydantic, the schema's classes) are imported where the command
# runs, not here: `planner fit --help` prints the options without them (import_runtime; issue 24, start-up).


def import_runtime() -> None:
    """The modules `planner fit` runs on, imported at start-up by planner.cli.app_for unless the command line asks
    only for --help (planner/__main__.py freezes what start-up made; the command's own imports find them loaded)."""
    from .. import plan, search, space  # noqa: F401
    from ..render import fit  # noqa: F401

DEFAULT_TOP = 10


def _ints(text: Optional[str], option: str, what: str = "value") -> Optional[tuple[int, ...]]:
    """'8' -> (8,), '4,8' -> (4, 8); None stays None; a value listed twice ('4,4') is refused (units.refuse_repeat,
    as --gpus 8,8 and budget --sweep-gpus 8,8 are): not the same value searched twice."""
    if text is None:
        return None
    note = refuse_thousands_separator(text, option)
    if note:
        warn(note)
    vals = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        v = parse_count(part, option)
        if v != int(v) or v < 1:
            raise PlannerError(f"{option} {text!r}: {part.strip()!r} is not a positive whole number",
                               f"give {option} as a number or a comma list, e.g. {option} 8 or {option} 4,8")
        refuse_repeat(int(v), vals, option, what)
        vals.append(int(v))
    if not vals:
        raise PlannerError(f"{option} is empty", f"give {option} as a number or a comma list, e.g. {option} 4,8")
    return tuple(vals)


def _pins_within_bounds(pairs) -> None:
    """Each pinned value (`--tp 8`, `--tp 4,8`) at most its own bound (`--max-tp 4`), else an error naming both options:
    a pin above the bound is a search of nothing (before: 'no plan fits', exit 1, from 0 candidates) or, in a list, a
    value dropped without a word. pairs: (pin option, its text, bound option, the bound) per axis with both."""
    for flag, text, max_flag, bound in pairs:
        if text is None or bound is None:
            continue
        above = [v for v in _ints(text, flag) if v > bound]
        if above:
            raise PlannerError(f"{flag} {text} and {max_flag} {bound} contradict: {', '.join(map(str, above))} "
                               f"{'is' if len(above) == 1 else 'are'} above the bound",
                               f"give {flag} values at most {bound}, or raise {max_flag} (or drop one of them)")


def _names(text: Optional[str], option: str) -> Optional[tuple[str, ...]]:
    """'zero1, fsdp' -> ('zero1', 'fsdp'); None stays None; a value with no name in it (`--sharding ,`, `--rank-orders
    ''`) is refused, as _ints refuses `--tp ,`: an empty pin is no search (before: the pin was dropped silently, the
    whole axis searched, and an empty --rank-orders list raised in the search); a name listed twice (`--sharding
    zero1,zero1`, any case) is refused as _ints refuses `--tp 4,4` (units.refuse_repeat)."""
    if text is None:
        return None
    names = tuple(p.strip().lower() for p in str(text).split(",") if p.strip())
    if not names:
        raise PlannerError(f"{option} is empty", f"give {option} as a name or a comma list, e.g. {_NAME_EXAMPLES[option]}")
    for i, name in enumerate(names):
        refuse_repeat(name, names[:i], option, "name")
    return names


_NAME_EXAMPLES = {"--sharding": "--sharding zero1,fsdp", "--recompute": "--recompute selective,full",
                  "--schedule": "--schedule 1f1b,interleaved", "--rank-orders": "--rank-orders tp-cp-dp-pp,tp-dp-cp-pp"}


def register(app: typer.Typer) -> None:
    @app.command("fit")
    @cli_errors
    @with_field_options
    def fit_cmd(
        job_file: Optional[Path] = typer.Argument(None, help="a trainer config (torchtitan .toml, Megatron launch script / argument file, DeepSpeed .json, torchtitan 0.3.0 launch line) or a job YAML: the job (model, GPUs, batch, precision, stack, ...) as `planner explain` reads it; its plan is searched, not pinned, and is priced and ranked among the rows", exists=False),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="catalog name, model YAML, or HF config.json / folder"),
        gpus: Optional[str] = typer.Option(None, "--gpus", "-g", help="GPU count, or counts to compare: a comma list (2048,4096) or a doubling range (512..4096)"),
        hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog name or YAML path (default: h100-sxm)"),
        tp: Optional[str] = typer.Option(None, "--tp", help="pin TP, a value or a comma list (default: divisors of the NVLink domain)"),
        cp: Optional[str] = typer.Option(None, "--cp", help="pin CP (default: divisors of the sequence length)"),
        pp: Optional[str] = typer.Option(None, "--pp", help="pin PP (default: 1 .. layers)"),
        vpp: Optional[str] = typer.Option(None, "--vpp", help="pin virtual stages per GPU (default: 1 .. layers/pp)"),
        dp: Optional[str] = typer.Option(None, "--dp", help="pin DP (default: gpus / (tp cp pp))"),
        micro_batch: Optional[str] = typer.Option(None, "--micro-batch", help="pin sequences per micro-batch (default: divisors of the global batch)"),
        max_tp: Optional[int] = typer.Option(None, "--max-tp", help="upper bound on TP"),
        max_cp: Optional[int] = typer.Option(None, "--max-cp", help="upper bound on CP"),
        max_pp: Optional[int] = typer.Option(None, "--max-pp", help="upper bound on PP"),
        max_vpp: Optional[int] = typer.Option(None, "--max-vpp", help="upper bound on virtual stages per GPU"),
        max_dp: Optional[int] = typer.Option(None, "--max-dp", help="upper bound on DP"),
        max_micro_batch: Optional[int] = typer.Option(None, "--max-micro-batch", help="upper bound on the micro-batch"),
        ep: Optional[str] = typer.Option(None, "--ep", help="pin expert parallelism (MoE models), a value or a comma list (default: divisors of the routed experts that fold into tp*dp*cp)"),
        max_ep: Optional[int] = typer.Option(None, "--max-ep", help="upper bound on EP"),
        etp: Optional[str] = typer.Option(None, "--etp", help="pin expert tensor parallelism (MoE models; Megatron --expert-tensor-parallel-size), a value or a comma list (default: divisors of tp where the stack has its own expert TP, else tp)"),
        max_etp: Optional[int] = typer.Option(None, "--max-etp", help="upper bound on expert TP"),
        moe_capacity_factor: Optional[float] = CapacityFactorOption,
        moe_pad_to_capacity: Optional[bool] = PadToCapacityOption,
        moe_rank_imbalance: Optional[float] = RankImbalanceOption,
        moe_load_balancing: Optional[str] = LoadBalancingOption,
        mtp_layers: Optional[int] = MtpLayersOption,
        ep_comm_overlap: Optional[bool] = FitEpOverlapOption,
        sharding: Optional[str] = typer.Option(None, "--sharding", help="pin sharding: none|zero1|zero2|fsdp|hsdp or a mode of the stack (`planner stacks`), or a comma list (default: all)"),
        shard_group: Optional[str] = typer.Option(None, "--shard-group", help="hsdp shard group sizes (default: every divisor s of dp, 2 <= s < dp)"),
        recompute: Optional[str] = typer.Option(None, "--recompute", help="pin recompute: none|selective|full or a comma list (default: all)"),
        sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help="pin SP (default: both where tp > 1 and the stack's code has SP and sums the norms' SP gradients over TP, stack_db runs.sequence_parallel)"),
        schedule: Optional[str] = typer.Option(None, "--schedule", help="pin pipeline schedules, comma list of 1f1b|interleaved|zb-h1|gpipe|dualpipe (default: the stack's first for vpp 1, 1f1b but on deepseek, interleaved for vpp >= 2)"),
        rank_orders: str = typer.Option(RANK_ORDERS_TP_INNER, "--rank-orders", help="tp-inner (TP innermost, 6 orders), all (24), or a comma list of orders like tp-cp-pp-dp"),
        max_layer_slack: int = typer.Option(DEFAULT_LAYER_SLACK, "--max-layer-slack", help="layers an uneven pipeline split may lack: 2 = the first and last stage one layer lighter (Llama 3 sec. 3.3.2)"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="tokens per sequence (default: the model's published pre-training length, training.seq_len, else at most 4096)"),
        global_batch: Optional[int] = typer.Option(None, "--global-batch", help="sequences per step"),
        global_batch_tokens: Optional[str] = typer.Option(None, "--global-batch-tokens", help=f"tokens per step (default: {DEFAULT_GLOBAL_BATCH_TOKENS:,} = 2,048 x 8,192, the seed's)"),
        precision: Optional[str] = typer.Option(None, "--precision", help="bf16|fp8|nvfp4 (default: bf16; nvfp4 needs FP4 tensor cores: Blackwell)"),
        bytes_per_param: Optional[str] = typer.Option(None, "--bytes-per-param", help="mixed16 (16 B, seed) | megatron (18 B) | pure-bf16 | bf16-moments (14 B, DeepSeek-V3) (default: the stack's)"),
        activation_model: Optional[str] = typer.Option(None, "--activation-model", help="arch | korthikanti (default: arch)"),
        attention: Optional[str] = typer.Option(None, "--attention", help="flash|eager (default: the stack's fastest core, the first of its runs.attention cores: flash; else defaults.attention: eager on megatron-deepspeed-2021, megatron-deepspeed-bigscience)"),
        causal: Optional[bool] = typer.Option(None, "--causal-flops/--noncausal-flops", help="count attention FLOPs causal (default: non-causal, PaLM)"),
        headroom: Optional[float] = typer.Option(None, "--headroom", help="fraction of HBM kept free (default: 0.10)"),
        reserve_gib: Optional[float] = typer.Option(None, "--reserve-gib", help="CUDA context + NCCL GiB per GPU (default: 1.0)"),
        tokens: Optional[str] = typer.Option(None, "--tokens", help="training tokens (e.g. 15T): adds training days"),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="calibration profile from `planner calibrate`"),
        tp_comm_overlap: Optional[bool] = typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap", help="pin TP-communication overlap (needs SP) (default: both where the stack has it, the faster per plan)"),
        stack: Optional[str] = typer.Option(None, "--stack", help="software stack: a catalog name (`planner stacks` lists them: megatron, megatron-bridge, torchtitan, torchtitan-0.3, llm-foundry, megatron-deepspeed, deepseek, ...) or a stack YAML (default: megatron)"),
        torch_compile: Optional[bool] = typer.Option(None, "--compile/--no-compile", help="pin torch.compile (default: on where the stack has it: it never slows a step in the model)"),
        dp_comm_overlap: Optional[bool] = typer.Option(None, "--dp-comm-overlap/--no-dp-comm-overlap", help="pin DP-communication overlap (default: on where the stack has it)"),
        fp8_recipe: Optional[str] = typer.Option(None, "--fp8-recipe", help="pin the fp8 recipe (default: every recipe of the stack, the faster per plan)"),
        power_limit_w: Optional[float] = typer.Option(None, "--power-limit-w", help="GPU board power limit in W (default: the hardware's)"),
        split_emb: Optional[bool] = SplitEmbOption,
        split_loss: Optional[bool] = SplitLossOption,
        loss_layers: Optional[int] = LossLayersOption,
        microbatch_group: Optional[int] = MicrobatchGroupOption,
        cp_comm_type: Optional[str] = CpCommTypeOption,
        hierarchical_cp_sizes: Optional[str] = HierCpOption,
        pp_p2p_overlap: Optional[bool] = PpP2pOverlapOption,
        pp_p2p_overlap_warmup_flush: Optional[bool] = PpP2pWarmupFlushOption,
        step_batch_size_schedule: Optional[str] = StepBatchScheduleOption,
        config_format: Optional[str] = ConfigFormatOption,
        objective: str = typer.Option("time", "--objective", help="time (step time) | memory (bytes per GPU) | cost (GPU-seconds per token)"),
        top: int = typer.Option(DEFAULT_TOP, "--top", help="rows to show"),
        explain_row: Optional[int] = typer.Option(None, "--explain", help="print the full `explain` breakdown of row N instead of the table"),
        plot: Optional[Path] = typer.Option(None, "--plot", help="draw FILE.png|svg|pdf: one count: the feasible plans (memory vs step time, Pareto front, top rows labelled) and the top rows' memory; several counts: MFU, step time, days and memory of the best plan per count (one count evaluates every feasible plan's step time: slower)"),
        export: Optional[str] = typer.Option(None, "--export", help="write the top row as a trainer config on stdout instead of the table: torchtitan|megatron|deepspeed|megatron-deepspeed|megatron-bridge (see `planner export`)"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="with --export: write the trainer config here instead of stdout (as `planner export --output`)"),
        fmt: Format = FormatOption,
        quiet: bool = QuietOption,
        **fields,
    ):
        """Rank every way to split a model on this many GPUs (TP, CP, PP, virtual stages, DP,
        micro-batch, sharding, recompute, SP, schedule, rank order) by step time; exit 1 with
        the closest plan when none fits.

        Given a trainer config (or a job YAML), the job is the file's, as `planner explain`
        reads it, every option beating the file's value with a note; its plan is searched, not
        pinned, and is priced and ranked beside the rows (stderr; `config_plan` in json|yaml)."""
        from ..render.fit import emit_fit, emit_fit_row
        from ..search import OBJECTIVES, fit, rank_config, row_objective
        from ..space import SpaceOptions

        if gpus is not None and ".." in str(gpus):
            from ..budget import parse_gpu_list

            gpus_list = parse_gpu_list(gpus, "--gpus")
        else:
            gpus_list = list(_ints(gpus, "--gpus", "GPU count") or ())  # (a count listed twice refused, as parse_gpu_list does)
        _pins_within_bounds((("--tp", tp, "--max-tp", max_tp), ("--cp", cp, "--max-cp", max_cp),
                             ("--pp", pp, "--max-pp", max_pp), ("--vpp", vpp, "--max-vpp", max_vpp),
                             ("--dp", dp, "--max-dp", max_dp), ("--micro-batch", micro_batch, "--max-micro-batch",
                                                                max_micro_batch),
                             ("--ep", ep, "--max-ep", max_ep), ("--etp", etp, "--max-etp", max_etp)))
        overrides = dict(
            model=model, gpus=gpus_list[0] if gpus_list else None, hardware=hardware, seq_len=seq_len,
            global_batch=global_batch,
            global_batch_tokens=parse_count(global_batch_tokens, "--global-batch-tokens") if global_batch_tokens is not None else None,
            precision=precision, bytes_per_param=bytes_per_param, activation_model=activation_model,
            attention=attention, causal_attention_flops=causal, headroom=headroom, reserve_GiB=reserve_gib,
            tokens=parse_count(tokens, "--tokens") if tokens is not None else None,
            calibration=str(calibration) if calibration else None, tp_comm_overlap=tp_comm_overlap,
            stack=stack, torch_compile=torch_compile, dp_comm_overlap=dp_comm_overlap, fp8_recipe=fp8_recipe,
            power_limit_w=power_limit_w, account_for_embedding_in_pipeline_split=split_emb,
            account_for_loss_in_pipeline_split=split_loss, moe_capacity_factor=moe_capacity_factor, mtp_layers=mtp_layers,
            moe_pad_to_capacity=moe_pad_to_capacity,
            moe_rank_imbalance=moe_rank_imbalance, moe_load_balancing=moe_load_balancing,
            ep_comm_overlap=ep_comm_overlap, loss_layers_in_pipeline_split=loss_layers, microbatch_group=microbatch_group,
            cp_comm_type=cp_comm_type,
            hierarchical_cp_sizes=parse_sizes(hierarchical_cp_sizes, "--hierarchical-context-parallel-sizes"),
            pp_p2p_overlap=pp_p2p_overlap, pp_p2p_overlap_warmup_flush=pp_p2p_overlap_warmup_flush,
            batch_size_schedule=parse_schedule(step_batch_size_schedule),
            # job fields every candidate takes as they are (planner/field_options.py; e.g. fp8_attention: the
            # recipes that run it, space.py; fp16: the sharding modes that take it, plan.stack_for_settings)
            **field_values(fields),
        )
        own = None  # the job of the file's own plan (fit CONFIG), priced and ranked beside the rows
        config = None  # fit CONFIG: (the file, its job options as given, the file's settings explain keeps, its expert axes), for the rows' explain commands
        if job_file is None:
            job, where = load_job(None, overrides, config_format)
        else:  # (planner/cli/fit_config.py: imported only here, with the readers it brings)
            from .fit_config import config_jobs, file_axes, unkept

            pins = _pins(tp, cp, pp, vpp, dp, micro_batch, ep, etp, sharding, shard_group, recompute, sequence_parallel,
                         schedule, rank_orders)
            bounds = {}  # the options that bound a plan axis's search without pinning it (--max-pp 4, --tp 4,8)
            for field, values, flag, bound, max_flag in (
                    ("tp", tp, "--tp", max_tp, "--max-tp"), ("cp", cp, "--cp", max_cp, "--max-cp"),
                    ("pp", pp, "--pp", max_pp, "--max-pp"), ("vpp", vpp, "--vpp", max_vpp, "--max-vpp"),
                    ("dp", dp, "--dp", max_dp, "--max-dp"), ("micro_batch", micro_batch, "--micro-batch", max_micro_batch,
                                                            "--max-micro-batch"),
                    ("ep", ep, "--ep", max_ep, "--max-ep"), ("etp", etp, "--etp", max_etp, "--max-etp"),
                    ("sharding", sharding, "--sharding", None, None), ("recompute", recompute, "--recompute", None, None),
                    ("schedule", schedule, "--schedule", None, None), ("shard_group", shard_group, "--shard-group", None, None)):
                said = ([f"{flag} {values}"] if values is not None and pins.get(field) is None else []) + (
                    [f"{max_flag} {bound}"] if bound is not None else [])
                if said:
                    bounds[field] = " ".join(said)
            job, own, where, trainer = config_jobs(job_file, overrides, pins, config_format, bounds)
            if not gpus_list:
                gpus_list = [job.gpus]
            config = (str(job_file), _given_job_args(), unkept(own, overrides, pins), file_axes(own))
        if objective not in OBJECTIVES:
            raise PlannerError(f"unknown --objective {objective!r}", f"valid: {', '.join(OBJECTIVES)}")
        orders = _names(rank_orders, "--rank-orders")  # (an empty one refused)
        opts = SpaceOptions(
            tp=_ints(tp, "--tp"), cp=_ints(cp, "--cp"), pp=_ints(pp, "--pp"), vpp=_ints(vpp, "--vpp"),
            dp=_ints(dp, "--dp"), micro_batch=_ints(micro_batch, "--micro-batch"),
            max_tp=max_tp, max_cp=max_cp, max_pp=max_pp, max_vpp=max_vpp, max_dp=max_dp, max_micro_batch=max_micro_batch,
            ep=_ints(ep, "--ep"), max_ep=max_ep, etp=_ints(etp, "--etp"), max_etp=max_etp,
            sharding=_names(sharding, "--sharding"), shard_group=_ints(shard_group, "--shard-group"),
            recompute=_names(recompute, "--recompute"), sequence_parallel=sequence_parallel,
            schedule=_names(schedule, "--schedule"),
            rank_orders=rank_orders if "," not in rank_orders else orders,
            max_layer_slack=max_layer_slack,
        )
        if explain_row is not None and explain_row < 1:
            raise PlannerError(f"--explain {explain_row}: rows are numbered from 1", "e.g. --explain 1")
        if top < 1:  # here, not only in search.fit, which is given max(top, --explain): the value the user typed
            raise PlannerError(f"--top must be at least 1, got {top}", "e.g. --top 10")
        if export is not None and export not in FORMATS:
            raise PlannerError(f"--export {export!r} is not a trainer format", f"valid: {', '.join(FORMATS)}")
        if export is not None and explain_row is not None:  # two outputs for stdout: neither dropped silently
            raise PlannerError(f"--export writes row 1 as a trainer config and --explain {explain_row} prints a row's "
                               "breakdown: give one", f"drop --explain, or --export (`planner export --from-fit FILE --row "
                               f"{explain_row}` exports another row of a saved fit)")
        if export is not None and fmt != Format.table:  # the file is in the trainer's own format
            warn(f"--format {fmt.value} is not used with --export: the file is a {export} config")
        if output is not None:
            if export is None:
                raise PlannerError("--output writes the --export file: without --export fit writes no file",
                                   "add --export " + "|".join(FORMATS) + ", or redirect the table (--format json > FILE)")
            files.output_path(output, "--output")
        if plot is not None:
            from ..plot import check_plot_path

            check_plot_path(plot)
        from ..catalog import load_model, load_stack

        stack = load_stack(job.stack)
        if stack.runs is not None and stack.runs.flavor_registry == "torchtitan":
            # torchtitan @e347b1e5e's flavor registry (stack field runs.flavor_registry), imported on such a stack only
            from ..trainers.torchtitan_flavors import fit_note

            differs = fit_note(job.model, load_model(job.model), stack)
            if differs is not None:  # torchtitan's own flavor of the model prices otherwise (issue 22): said, not refused
                note(differs)
        several = len(gpus_list) > 1
        config_plan = None
        if own is not None:
            from .fit_config import price_config

            own_res, why = price_config(own, where, trainer, several)
            if why is None:  # the search's default bounds widened to the file's plan where it lies outside them
                from .fit_config import widen_to_plan

                opts, widened = widen_to_plan(opts, own_res["plan"], job, _from_command_line(), where)
                for w in widened:
                    note(f"{job_file}: {w}")
            config_plan = {"file": str(job_file), "rank": None, "of": None, "searched": None, "reason": why,
                           "explain": own_res}
        ranking = config_plan is not None and config_plan["reason"] is None
        # the table of several GPU counts shows each count's best plan (result.best), whatever --top (its header says
        # so): the search keeps one ranked row there, not --top rows nobody sees (before, `--gpus 4,8 --top
        # 2147483647` priced and resolved all 4,869 fitting rows of tiny-fit to print two)
        best_only = several and fmt == Format.table and explain_row is None
        try:
            with progress("fit", len(gpus_list)) as tick:
                # the file's plan is ranked by the search's own bounds, widened to its keys (search.fit's around)
                result = fit(job, gpus_list, opts, objective, 1 if best_only else max(top, explain_row or 0), where=where,
                             search_dispatchers=fields.get("moe_dispatcher") is None,
                             keep_feasible=plot is not None and not several, progress=tick,
                             around=row_objective(config_plan["explain"], objective) if ranking else None)
        except NoFitError:
            if config_plan is not None:
                if ranking:
                    config_plan["reason"] = "no searched plan fits"
                note(_config_line(config_plan, None))
            raise
        if ranking:
            config_plan.update(rank_config(result, config_plan["explain"]))
        if config_plan is not None:
            note(_config_line(config_plan, result.rows[0] if result.rows else None))
        for w in result.warnings:
            warn(w)
        shown = result.best if best_only else result.rows[:top]  # the rows the table or file lists
        for w, nums in _trainer_bug_rows(shown, result.warnings).items():
            warn(f"row{'s' if len(nums) > 1 else ''} {', '.join(map(str, nums))}: {w}")
        if result.counts.dispatchers:  # the MoE dispatcher searched (search.dispatcher_settings)
            left = "".join(f"; {n} left out: {why}" for n, why in result.counts.dispatchers_left)
            note(f"{job.model}: MoE dispatcher searched, the faster per plan where it starts (stack options column): "
                 f"{', '.join(result.counts.dispatchers)}{left}; explain and check take "
                 f"{job.moe_dispatcher or 'the stack default'} without --moe-dispatcher (--moe-dispatcher X pins one)")
        elif result.counts.dispatchers_left:  # one dispatcher left to run: nothing searched, the others said
            left = "; ".join(f"{n} left out: {why}" for n, why in result.counts.dispatchers_left)
            note(f"{job.model}: MoE dispatcher not searched, the stack default in every row: {left}")
        grouped = _grouped_experts_rule(job)
        if grouped is not None:  # not searched: the stack's rule (step.py [16]), stated
            note(f"{job.model}: the routed experts' grouped GEMMs run {'fp8' if grouped else 'bf16'} in every row "
                 f"(fp8_grouped_experts not searched: stack {job.stack}'s rule, stack_db defaults.fp8_grouped_experts); "
                 f"--{'no-' if grouped else ''}fp8-grouped-experts plans the other")
        elif _grouped_experts_searched(job):  # space.variant_choices: both, the faster per plan where it starts
            note(f"{job.model}: the routed experts' grouped GEMMs searched, bf16 and {job.precision} (stack options "
                 f"column; stack_db runs.fp8_grouped_experts), the faster per plan where it starts (torchtitan's "
                 f"float8 grouped converter refuses pp > 1 and cp > 1); --fp8-grouped-experts / "
                 f"--no-fp8-grouped-experts pins one")
        if result.assumed:  # the job's training length where it gave none (plan._seq_len): never a silent default
            note(f"{job.model}: assumed: " + "; ".join(result.assumed))
        rows = result.rows
        if job.calibration is not None:
            note_calibration(shown)
        if plot is not None:
            _plot_fit(result, rows[:top], plot, several)
        if export is not None:
            if not rows:
                raise NoFitError("no plan fits: nothing to export", "see `planner fit` without --export for the closest plan")
            p = rows[0]["plan"]
            on = f" of {p['gpus']:,} GPUs" if several else ""  # --gpus 8,16: which count's plan (audit5: dp alone told)
            warn(f"exporting row 1{on}: tp {p['tp']}, cp {p['cp']}, pp {p['pp']}, vpp {p['vpp']}, dp {p['dp']}, "
                 f"micro-batch {p['micro_batch']}, {p['sharding']}"
                 + (f" as {p['sharding_mode']}" if p.get("sharding_mode") not in (None, p["sharding"]) else "")
                 + f", recompute {p['recompute']}")
            from .export import write_export  # only here: it brings in the export and budget commands

            write_export(p, export, output, readback=rows[0])
            return
        if explain_row is not None:
            if explain_row > len(rows):
                raise PlannerError(f"--explain {explain_row}: only {len(rows)} plans fit", f"choose a row from 1 to {len(rows)}")
            emit_fit_row(rows[explain_row - 1], job, fmt, config)
            return
        # best_only: the best plan of each GPU count (json|yaml|csv keep the ranked rows)
        emit_fit(result, shown, job, opts.rank_orders, fmt,
                 config_plan=_config_json(config_plan, result.rows[0]) if config_plan is not None else None, config=config)


# fit's options that are no job option of `planner explain CONFIG` (the search's own, and the plan axes and GPU
# count a row's explain command names from the row itself: search.config_explain_args)
_NOT_EXPLAIN = ("job_file", "gpus", "tp", "cp", "pp", "vpp", "dp", "micro_batch", "max_tp", "max_cp", "max_pp", "max_vpp",
                "max_dp", "max_micro_batch", "ep", "max_ep", "etp", "max_etp", "sharding", "shard_group", "recompute",
                "sequence_parallel", "schedule", "rank_orders", "max_layer_slack", "tp_comm_overlap", "objective", "top",
                "explain_row", "plot", "export", "output", "fmt", "quiet")


def _click_context():
    """The running command's click context (None outside one: a direct call), read by _from_command_line and
    _given_job_args."""
    try:  # typer >= 0.16 vendors click as typer._click (planner/cli/__init__.py)
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import get_current_context
    return get_current_context(silent=True)


def _from_command_line() -> set:
    """The names of fit's parameters given on the command line (click's parameter source), for `fit CONFIG`'s
    widening of the search's default bounds (fit_config.widen_to_plan), which never widens a bound given there;
    without a click context, every parameter (nothing widened)."""
    ctx = _click_context()
    if ctx is None:
        return {"max_layer_slack", "rank_orders"}
    return {p.name for p in ctx.command.params if p.name and (ctx.get_parameter_source(p.name) is None
                                                              or ctx.get_parameter_source(p.name).name != "DEFAULT")}


def _given_job_args() -> Optional[list[str]]:
    """The job options given to this `fit CONFIG` on the command line, as written for `planner explain CONFIG`
    (the two commands spell them alike: core.py's shared options), for the rows' explain commands; None where
    the command line cannot be read back (no click context), which the row command then says."""
    ctx = _click_context()
    if ctx is None:
        return None
    args: list[str] = []
    for p in ctx.command.params:
        source = ctx.get_parameter_source(p.name) if p.name else None
        if p.name in _NOT_EXPLAIN or source is None or source.name != "COMMANDLINE" or not p.opts:
            continue
        v = ctx.params.get(p.name)
        if getattr(p, "is_flag", False):
            if p.secondary_opts:
                args.append(p.opts[0] if v else p.secondary_opts[0])
            elif v:
                args.append(p.opts[0])
        elif v is not None:
            args += [p.opts[0], repr(v) if isinstance(v, float) else str(v)]
    return args


def _pins(tp, cp, pp, vpp, dp, micro_batch, ep, etp, sharding, shard_group, recompute, sequence_parallel, schedule,
          rank_orders) -> dict:
    """The plan axes fit's options pin to one value, as job fields (--tp 8: tp=8; --sharding takes a level or a
    mode of the stack, as explain's: job_options), for `fit CONFIG`: each beats the file's value as any option
    does (core.load_job, with its note), so that the file's own plan is the one `planner explain CONFIG` prices
    with the same options. A comma list pins the search only (SpaceOptions), not the file's plan."""
    from .core import sharding_levels

    def one(text, option):
        v = _ints(text, option)
        return v[0] if v is not None and len(v) == 1 else None

    def one_name(text, option):
        v = _names(text, option)
        return v[0] if v is not None and len(v) == 1 else None

    mode = one_name(sharding, "--sharding")
    # one order pins the file's plan; the keywords (any case, as space.order_choices reads them) pin nothing
    order = one_name(rank_orders, "--rank-orders")  # (an empty list refused)
    order = None if order in (RANK_ORDERS_TP_INNER, "tp-innermost", RANK_ORDERS_ALL) else order
    return dict(tp=one(tp, "--tp"), cp=one(cp, "--cp"), pp=one(pp, "--pp"), vpp=one(vpp, "--vpp"), dp=one(dp, "--dp"),
                micro_batch=one(micro_batch, "--micro-batch"), ep=one(ep, "--ep"), etp=one(etp, "--etp"),
                shard_group=one(shard_group, "--shard-group"), recompute=one_name(recompute, "--recompute"),
                sequence_parallel=sequence_parallel, schedule=one_name(schedule, "--schedule"), rank_order=order,
                **({"sharding_mode": mode} if mode is not None and mode not in sharding_levels() else {"sharding": mode}))


def _plan_text(p: dict) -> str:
    """'TP1xCP1xPP1xDP8 (zero1, micro-batch 1 x 16, recompute none)' of a plan_dict."""
    from ..render.common import sharding_text  # the table's sharding column (fit's, validate's)

    vpp = f", vpp {p['vpp']}" if p["vpp"] > 1 else ""
    return (f"TP{p['tp']}xCP{p['cp']}xPP{p['pp']}xDP{p['dp']} ({sharding_text(p)}{vpp}, "
            f"micro-batch {p['micro_batch']} x {p['microbatches_per_step']}, recompute {p['recompute']})")


def _config_line(cp: dict, top_row: Optional[dict]) -> str:
    """The stderr line of `fit CONFIG`: the file's own plan, where it ranks (or why not), its step
    and MFU, and how much faster the top row is (the file plan's step / the top row's - 1)."""
    res = cp["explain"]
    if res is None:
        return f"{cp['file']}: your config's plan is not ranked: {cp['reason']}"
    head = f"{cp['file']}: your config's plan {_plan_text(res['plan'])}"
    figures = f"step {res['time']['step_s']:.3g} s, MFU {100 * res['throughput']['mfu']:.1f}%"
    if cp["rank"] is None:
        return f"{head}: not ranked: {cp['reason']} ({figures} as planned)" + _versus(res, top_row)
    outside = "" if cp["searched"] else (" (no searched plan prices the same: a stack option the search chooses "
                                          "otherwise, or a plan outside the searched space)")
    if cp["rank"] == 1 and cp["searched"]:  # nothing ranks before it and a searched plan prices the same: the top row
        return f"{head}: rank 1 of {cp['of']:,}, {figures}: the top row prices the same"
    return f"{head}: rank {cp['rank']:,} of {cp['of']:,}{outside}, {figures}" + _versus(res, top_row)


def _versus(res: dict, top_row: Optional[dict]) -> str:
    if top_row is None:
        return ""
    r = res["time"]["step_s"] / top_row["time"]["step_s"] - 1.0
    return (f"; top plan {_plan_text(top_row['plan'])} {100 * abs(r):.1f}% {'faster' if r >= 0 else 'slower'} "
            f"(step {top_row['time']['step_s']:.3g} s)")


def _config_json(cp: dict, top_row: dict) -> dict:
    """The `config_plan` object of `fit CONFIG --format json|yaml`: the file, its plan's rank (1 + the table
    rows before it) of `of` (the plans that fit, as the counts line counts them: search.rank_config; null
    with `reason` where it is not ranked), `searched`, the top row's speed-up over it
    (`top_speedup`: the file plan's step / the top row's - 1) and explain's JSON of it (`explain`)."""
    res = cp["explain"]
    speedup = None if res is None else res["time"]["step_s"] / top_row["time"]["step_s"] - 1.0
    return {"file": cp["file"], "rank": cp["rank"], "of": cp["of"], "searched": cp["searched"], "reason": cp["reason"],
            "top_speedup": speedup, "explain": res}


def _trainer_bug_rows(rows: list[dict], said: list[str]) -> dict[str, list[int]]:
    """{warning: the 1-based rows it holds for} for the searched rows' own warnings on a trainer bug that only some rows
    meet (plan._embedding_grad_skip_warning: Megatron-LM's skipped embedding all-reduce, named by its source constant),
    those not already said for the whole search; each row's warnings are explain's (search.fit resolves every row)."""
    from ..plan import EMBEDDING_GRAD_SKIP_SOURCE

    out: dict[str, list[int]] = {}
    for i, row in enumerate(rows, 1):
        for w in row.get("warnings", []):
            if EMBEDDING_GRAD_SKIP_SOURCE in w and w not in said:
                out.setdefault(w, []).append(i)
    return out


def note_calibration(rows: list[dict]) -> None:
    """On stderr: which entries of the --calibration profile the shown rows used, and which
    none of them did (a profile that matches nothing, e.g. a 2-node nccl log for a 4,096-GPU
    plan, would otherwise be ignored without a word; issue 24)."""
    import sys

    cals = [r.get("calibration") for r in rows if r.get("calibration")]
    if not cals:
        return
    covered = list(cals[0]["covered"])
    used_by = {c: [n for n, r in enumerate(rows, 1) if c in ((r.get("calibration") or {}).get("used") or [])]
               for c in covered}
    used = [f"{c} (row{'s' if len(n) > 1 else ''} {', '.join(map(str, n[:6]))}{', ...' if len(n) > 6 else ''})"
            for c, n in used_by.items() if n]
    unused = [c for c, n in used_by.items() if not n]
    head = f"note: calibration profile {cals[0]['profile']}: "
    if used:
        sys.stderr.write(head + "used " + "; ".join(used) + "\n")
    if unused:
        sys.stderr.write(("note: " if used else head) + f"not used by any of the {len(rows)} row(s) shown: " + ", ".join(unused)
                         + " (no such row runs that collective on that many ranks in that scope, or no GEMM; "
                           "those rows take the uncalibrated model)\n")
    run = cals[0].get("run")
    if run is not None and run.get("not_applied"):
        sys.stderr.write(f"note: calibration profile {cals[0]['profile']}: run section not applied ({run['not_applied']})\n")


def _plot_fit(result, top_rows: list[dict], path: Path, several: bool) -> None:
    from ..plot import fit_figure, save_figure, scaling_figure

    p0 = top_rows[0]["plan"]
    title = f"{p0['model']} on {p0['hardware']}, global batch {p0['global_batch']:,} x {p0['seq_len']:,}, stack {p0['stack']}"
    if several:
        fig = scaling_figure(result.best, title + ": best plan per GPU count")
    else:
        import numpy as np

        memory = np.concatenate([f["memory"] for f in result.feasible]).tolist()
        step = np.concatenate([f["step"] for f in result.feasible]).tolist()
        fig = fit_figure(memory, step, top_rows, title + f" on {p0['gpus']:,} GPUs")
    save_figure(fig, path)
    warn_done(path)


def warn_done(path: Path) -> None:
    import sys

    sys.stderr.write(f"wrote {path}\n")


def _grouped_experts_searched(job) -> bool:
    """Whether fit searches fp8_grouped_experts for the job: an fp8 / nvfp4 MoE job that does not set it,
    on a stack that runs both settings (stack_db runs.fp8_grouped_experts; space.variant_choices)."""
    from ..catalog import load_model, load_stack

    if job.fp8_grouped_experts is not None or job.precision == "bf16" or load_model(job.model).moe is None:
        return False
    runs = load_stack(job.stack).runs
    return runs is not None and len(set(runs.fp8_grouped_experts or ())) > 1


def _grouped_experts_rule(job):
    """The stack's fp8_grouped_experts rule for an fp8 / nvfp4 MoE job that does not set it where fit
    does not search it (it plans every row with it, step.py [16]); None otherwise."""
    from ..catalog import load_model, load_stack

    if (job.fp8_grouped_experts is not None or job.precision == "bf16" or load_model(job.model).moe is None
            or _grouped_experts_searched(job)):
        return None
    return bool(load_stack(job.stack).defaults.fp8_grouped_experts)

