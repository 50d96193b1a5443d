"""`planner fit CONFIG`: search around a trainer config (issue 22, "fit takes no trainer config").

The file (a torchtitan TOML, a Megatron launch script / argument file, a DeepSpeed JSON, a torchtitan
0.3.0 launch line, or a planner job YAML) gives the job's facts: the model as its reader builds it,
the hardware and GPU count where it says them, sequence length, global batch, precision and fp8
recipe, stack, optimizer dtypes and every other setting the reader reads. It is read by the one
path `check`, `explain` and `budget` read it by (core.load_job), with every option laid over it
and named in a note (flags beat file values). The plan axes `fit` searches (PLAN_FIELDS) are not
pinned by the file: the search job is the file's job without them, and a note lists the file's own
values that fit searches over instead (and those it drops or runs at one value: config_jobs). The file's own plan, as the command line amends it, is
priced by explain's path (core.explain_json: what `planner explain CONFIG` with the same options
prints) and ranked among the plans the search found (search.rank_config). Where that plan lies outside a
default bound of the search the command line did not give (the layer slack, the rank orders), the bound is
widened just enough to include it, each named in a note (widen_to_plan), so that a searched plan prices the same.

Imported only when fit is given a file: `planner fit --model ...` imports no module of
planner/trainers/ (tests/test_start_up_cost.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..catalog import validate
from ..errors import PlannerError
from ..render.common import note
from ..schema import Job
from .core import explain_json, load_job

# The Job fields that are fit's plan axes (search.py; the SpaceOptions and the stack options it
# searches), and those that only mean something at one value of them: a Megatron
# --recompute-num-layers is full recompute's (recompute_layers), a
# --microbatch-group-size-per-virtual-pipeline-stage the interleaved schedule's at its pp
# (microbatch_group), TP overlap needs TP > 1 and SP (tp_comm_overlap: fit tries it where the
# stack has it, the faster per plan), a sharding mode is one of its level's (sharding_mode).
# A file's value of one of these is not pinned unless the command line gives it: the search job drops
# it, and the note says what fit does instead (config_jobs): the axes and sharding_mode, sequence_parallel,
# rank_order are searched over; recompute_layers and microbatch_group are dropped (DROPPED: the search
# varies neither, its rows run the default, Job's and pipeline.microbatch_group's); tp_comm_overlap is
# searched where space.variant_choices tries it off and on and no start-up rule of startup.OVERLAP_RULES refuses
# every overlapped row, else every row runs without it (_overlap_fixed, _overlap_refused); sequence_parallel likewise
# where a --tp 1 pin or the stack leaves no SP row (_sp_fixed).
# The MoE dispatcher is a stack option fit searches as it searches TP overlap (search.dispatcher_settings:
# every one the stack runs, the faster per plan, unless --moe-dispatcher pins one): the file's is listed in
# the note beside these, but kept in the search job, where it is what `explain CONFIG` takes (the dispatcher
# note's "explain and check take X", and the rows' explain commands name a row's other dispatcher).
PLAN_FIELDS = ("tp", "cp", "pp", "vpp", "dp", "micro_batch", "ep", "etp", "sharding", "sharding_mode", "shard_group",
               "recompute", "recompute_layers", "sequence_parallel", "schedule", "microbatch_group", "rank_order",
               "tp_comm_overlap")

# the PLAN_FIELDS the search job drops and the search does not vary (no SpaceOptions axis, no variant column): every
# row runs the default: full recompute re-runs every layer of a stage (Job.recompute_layers None), the interleaved
# schedule groups the stack's rule's N micro-batches per virtual stage (PlanArrays.mbg 0: pipeline.microbatch_group,
# pp where it divides the micro-batches, Megatron's default). The note says so, not "searched over"; the command
# line's option keeps the file's value in every row (--recompute full for the window: fixed_by_pins; --microbatch-group)
DROPPED = ("recompute_layers", "microbatch_group")

# the plan axes fit's options spell --NAME VALUE (name with hyphens)
_PIN_OPTIONS = ("tp", "cp", "pp", "vpp", "dp", "micro_batch", "ep", "etp", "sharding", "shard_group", "recompute", "schedule")


def _shown(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def config_jobs(path: Path, overrides: dict, pins: dict, config_format: Optional[str], bounds: Optional[dict] = None) -> tuple:
    """(search job, the file's own job, where, the trainer config read or None) of `fit CONFIG`.

    overrides: fit's job-field options (None: not given); pins: the plan axes the command line pins
    to one value (--tp 8: tp=8), which beat the file's as any option does (core.load_job's note),
    so that the file's own plan is the one `planner explain CONFIG` prices with the same options.
    The search job is the file's job without PLAN_FIELDS (but those fit's own job-field options
    gave): fit searches them (a pin reaches the search as its SpaceOptions). bounds: field -> the command
    line's options that bound its search without pinning it ('--max-pp 4', '--tp 4,8'), named in the note
    beside the file's value they replace as the search's range."""
    read: list = []
    own, where = load_job(path, {**overrides, **pins}, config_format, read)
    given = {k for k, v in {**overrides, **pins}.items() if v is not None}
    fixed = fixed_by_pins(own, pins)
    keep = {k for k, v in overrides.items() if v is not None} | set(fixed)
    data = {k: v for k, v in own.model_dump(exclude_unset=True).items() if k not in PLAN_FIELDS or k in keep}
    job = validate(Job, data, str(path))
    bounds = bounds or {}
    if fixed:
        note(f"{path}: the file's own {', '.join(f'{k}={getattr(own, k)}' for k in fixed)} is kept in every row, as a "
             f"count of a stage's layers: the command line's --recompute full fixes full recompute, whose block window "
             f"it is (a row's explain command names it)")
    fields = [k for k in PLAN_FIELDS if k in own.model_fields_set and k not in given and k not in fixed]
    if own.moe_dispatcher is not None and "moe_dispatcher" not in given and _file_dispatcher(own):
        fields.append("moe_dispatcher")  # searched (fit's search_dispatchers: no --moe-dispatcher), as TP overlap is
    # what the search does not vary is said as dropped or kept off, not listed among the axes searched over: the
    # file's full-recompute window and micro-batch group (DROPPED), and a TP overlap the search tries at one value
    dropped = [k for k in fields if k in DROPPED]
    off = _overlap_fixed(job, pins, where) if "tp_comm_overlap" in fields else None
    sp_off = _sp_fixed(job.stack, pins) if "sequence_parallel" in fields else None
    fields = [k for k in fields if k not in dropped and not (k == "tp_comm_overlap" and off is not None)
              and not (k == "sequence_parallel" and sp_off is not None)]
    if fields or dropped or off is not None or sp_off is not None:
        listed = ", ".join(f"{k}={_shown(getattr(own, k))}" + (f" (searched within the command line's {bounds[k]})"
                                                               if k in bounds else "") for k in fields)
        eg = next((k for k in fields if k in _PIN_OPTIONS), None)  # an axis fit's --NAME VALUE pins
        example = f", e.g. --{eg.replace('_', '-')} {getattr(own, eg)}" if eg is not None else ""
        searched = (f"the file's own {listed} are searched over, not pinned (its own plan is priced and ranked below; an "
                    f"option pins one{example})") if fields else "its own plan is priced and ranked below"
        window = (f"; the file's recompute_layers={own.recompute_layers} (full recompute's block window) is dropped from "
                  f"the search: its rows of full recompute re-run every layer of a stage (--recompute full keeps it "
                  f"in every row)") if "recompute_layers" in dropped else ""
        group = (f"; the file's microbatch_group={own.microbatch_group} (the interleaved schedule's micro-batches per "
                 f"virtual stage) is dropped from the search: its interleaved rows group pp micro-batches, the stack's "
                 f"rule (Megatron's default; --microbatch-group {own.microbatch_group} keeps it in every row)"
                 ) if "microbatch_group" in dropped else ""
        overlap = (f"; the file's tp_comm_overlap={_shown(own.tp_comm_overlap)} is not searched: every row runs without "
                   f"TP overlap, as {off}") if off is not None else ""
        sp = (f"; the file's sequence_parallel={_shown(own.sequence_parallel)} is not searched: every row runs without "
              f"sequence parallelism, as {sp_off}") if sp_off is not None else ""
        note(f"{path}: fit searches the plan: {searched}{window}{group}{sp}{overlap}")
    return job, own, where, read[0] if read else None


def _overlap_fixed(job: Job, pins: dict, where: str) -> Optional[str]:
    """Why fit ranks the search job's TP overlap at one value only (off in every row), or None where its ranked rows
    can hold it off and on: the search's own list (space.variant_choices' tpo column: off only where the stack has no
    TP overlap or turns it off for the model's multi-head latent attention, plan.mla_drops_tp_overlap), a start-up rule
    that refuses every overlapped row of that list (_overlap_refused: the file's deterministic_mode, its
    mla_down_proj_fusion, its pinned fp8 recipe), or a command-line pin that leaves no row it runs in
    (space.Space.variant_ok: tp > 1 with sequence parallelism)."""
    from ..plan import mla_drops_tp_overlap
    from ..space import settings_for, variant_choices

    if pins.get("tp") == 1 or pins.get("sequence_parallel") is False:
        flag = "--tp 1" if pins.get("tp") == 1 else "--no-sequence-parallel"
        return f"the command line's {flag} leaves no row it runs in (it needs tp > 1 with sequence parallelism)"
    settings = settings_for(job, where=where)[0]
    stack, model = settings.stack, settings.model
    rows = variant_choices(stack, job, where, settings.hardware, model)
    if len(set(rows[:, 0].tolist())) > 1:
        return _overlap_refused(settings, job, rows[rows[:, 0] > 0])
    if mla_drops_tp_overlap(stack, model, job.trainer_date):
        return (f"stack {stack.name} turns it off for a model with multi-head latent attention ({model.name}; "
                f"{stack.origin} overlap.tp_comm_overlap_off_with_mla)")
    return f"stack {stack.name} has no TP communication overlap ({stack.origin} overlap.tp_comm_overlap_supported)"


def _overlap_refused(settings, job: Job, on) -> Optional[str]:
    """The start-up rules that refuse every overlapped variant row `on` (variant_choices' rows with tpo 1), named with
    their codes and texts, or None where one of them passes (the search then ranks overlapped rows where they are
    faster). The rules are startup.OVERLAP_RULES, which read the overlap at tp > 1 with job and stack settings, the
    model's code and the fp8 recipe only: one probe plan at tp 2 per row stands for every overlapped candidate."""
    from types import SimpleNamespace

    from ..precisions import PRECISION_CODES
    from ..space import VARIANT_FIELDS
    from ..startup import CODES, OVERLAP_RULES, rules_for

    n = len(on)
    probe = SimpleNamespace(tp=np.full(n, 2, dtype=np.int64), tpo=on[:, VARIANT_FIELDS.index("tpo")],
                            precision=np.full(n, PRECISION_CODES[job.precision], dtype=np.int64),
                            f8r=on[:, VARIANT_FIELDS.index("f8r")])
    bad, said = np.zeros(n, dtype=bool), []
    for _, rule in rules_for(settings.stack):
        if rule.key in OVERLAP_RULES:
            hit = np.asarray(rule.check(settings.model, settings.stack, probe, None), dtype=bool)
            if hit.any():
                bad = bad | hit
                i = int(np.argmax(hit))  # a refused row's figures (StartupRule.detail: a 0-d plan)
                row = SimpleNamespace(**{k: np.asarray(v)[i] for k, v in vars(probe).items()})
                detail = f" ({rule.detail(settings.model, settings.stack, row, None)})" if rule.detail else ""
                said.append(f"start-up rule {rule.key} (code {CODES[rule.key]}) refuses it{detail}: "
                            f"{rule.text_on(settings.stack)}")
    return "; ".join(said) if bad.all() else None


def _sp_fixed(stack_name: str, pins: dict) -> Optional[str]:
    """Why fit runs every row at one sequence_parallel (off), or None where it tries it off and on (space: SP on and
    off where tp > 1, off at tp 1; a stack whose code has none refuses SP, start-up rule STACK_SEQUENCE_PARALLEL)."""
    from ..catalog import load_stack
    from ..startup import stack_lacks_sp

    if pins.get("tp") == 1:
        return "the command line's --tp 1 leaves no row it runs in (it splits across TP ranks)"
    stack = load_stack(stack_name)
    if stack_lacks_sp(stack):
        return (f"stack {stack.name} has no sequence parallelism ({stack.origin} runs.sequence_parallel supported "
                f"false: start-up rule STACK_SEQUENCE_PARALLEL)")
    return None


def fixed_by_pins(own: Job, pins: dict) -> tuple:
    """The PLAN_FIELDS the file sets that only mean something at one value of an axis the command line pins to that
    value, kept in the search job (every row is priced with them): recompute_layers (Megatron's --recompute-num-layers,
    torchtitan's every n-th layer: full recompute's block window) where --recompute full is given. Kept as the file's
    count of a stage's layers, which the readers work out at the file's (or the command line's) pp and vpp."""
    return ("recompute_layers",) if pins.get("recompute") == "full" and own.recompute_layers is not None else ()


def _file_dispatcher(own: Job) -> bool:
    """Whether the job's moe_dispatcher is the file's own, not the model recipe's (recipe.apply, which core.load_job
    lays on where the file says none): the recipe applied to the job without it gives another (or none)."""
    from .. import recipe

    data = {k: v for k, v in own.model_dump(exclude_unset=True).items() if k != "moe_dispatcher"}
    return recipe.apply(data)[0].get("moe_dispatcher") != own.moe_dispatcher


def widen_to_plan(opts, plan: dict, job: Job, given: set, where: str = "") -> tuple:
    """(opts, notes): the search's SpaceOptions with each default bound that the file's own plan (explain's
    JSON `plan` of it) lies outside widened just enough to include it, and a note per bound widened. The layer
    slack is widened for the file's (pp, vpp) only (SpaceOptions.splits): widening it for every split would
    search other uneven splits the user did not ask for (DeepSeek-V3's 61 layers on 2,048 H800: 2.8 million
    candidates at slack 2, 16.3 million at 3, 2.4 -> 13.5 s). A bound
    the command line gave (`given`: the option names, e.g. "max_layer_slack") is never widened: the plan then
    stays outside the searched space, as the rank line says. The default bounds are the layer slack
    (DEFAULT_LAYER_SLACK: how unevenly the search splits the layers, space._pipeline_rows) and the rank
    orders (TP innermost); the --max-* bounds have none by default (None: the axis' own list) and a pin is the
    command line's. The stack's own limits (stack_db runs.max_tp, ...) are what its trainer runs, not
    widened."""
    from dataclasses import replace

    from ..comm import ORDER_CODES, ORDER_NAMES
    from ..space import layer_slack, order_choices, settings_for

    notes = []
    # the layer slack: pp x vpp chunks of ceil(units / (pp vpp)) layers hold this many more than the split's units;
    # not bounded where the command line pins pp with one chunk per rank, or pins both (space._pipeline_rows)
    if "max_layer_slack" not in given and plan["pp"] * plan["vpp"] > 1 and not (opts.pp and (opts.vpp or plan["vpp"] == 1)):
        settings = settings_for(job, where=where)[0]
        counted = int(settings.split_emb + settings.split_loss)
        layers = settings.model.num_layers
        slack = int(layer_slack(layers, plan["pp"], plan["vpp"], counted))
        if slack > opts.max_layer_slack:
            vpp = f" x vpp {plan['vpp']}" if plan["vpp"] > 1 else ""
            ends = f" (+ {counted} end(s) counted as layers of the split)" if counted else ""
            notes.append(f"--max-layer-slack {opts.max_layer_slack} -> {slack} for the file's split only, to include its "
                         f"PP {plan['pp']}{vpp} over {layers:,} layers{ends} ({slack} of its {layers + counted + slack:,} "
                         f"layer slots empty; the other splits keep {opts.max_layer_slack}); --max-layer-slack N bounds it")
            opts = replace(opts, splits=opts.splits + ((int(plan["pp"]), int(plan["vpp"])),))
    # the rank orders: TP innermost unless the command line says (--rank-orders)
    own = ORDER_CODES.get(str(plan.get("rank_order")))
    if "rank_orders" not in given and own is not None:
        codes = order_choices(opts.rank_orders)
        if own not in codes:
            was = opts.rank_orders if isinstance(opts.rank_orders, str) else ",".join(opts.rank_orders)
            opts = replace(opts, rank_orders=tuple(ORDER_NAMES[int(c)] for c in codes) + (ORDER_NAMES[own],))
            notes.append(f"--rank-orders {was} -> {was} and {ORDER_NAMES[own]} to include the file's rank order; "
                         f"--rank-orders bounds it")
    return opts, notes


# PLAN_FIELDS a file may set that no fit row sets and `planner explain`'s options cannot clear: a row's explain
# command (search.config_explain_args) would keep the file's value
EXPLAIN_KEEPS = ("recompute_layers", "microbatch_group")


def file_axes(own: Job) -> tuple:
    """The expert axes (ep, etp) the file or a pin sets: the rows' explain commands name them on a dense row too
    (search.config_explain_args), where `planner explain CONFIG` would keep the file's, which the row was priced
    without (fit searches them: PLAN_FIELDS)."""
    return tuple(k for k in ("ep", "etp") if k in own.model_fields_set)


def unkept(own: Job, overrides: dict, pins: dict) -> list[str]:
    """'recompute_layers=4' for each EXPLAIN_KEEPS field the file set and the command line did not: the rows'
    explain commands say that `planner explain CONFIG` keeps it, where the row was priced without it."""
    given = {k for k, v in {**overrides, **pins}.items() if v is not None} | set(fixed_by_pins(own, pins))
    return [f"{k}={getattr(own, k)}" for k in EXPLAIN_KEEPS if k in own.model_fields_set and k not in given]


def price_config(own: Job, where: str, trainer, several: bool) -> tuple:
    """(explain's JSON of the file's own plan or None, why it cannot be ranked or None): the plan
    priced by core.explain_json, the path `planner explain` takes. Not ranked where its trainer or
    the planner refuses it (the error, as explain would exit 2 with it), where it does not fit, or
    where fit compares several GPU counts."""
    try:
        res, _ = explain_json(own, where, trainer)
    except PlannerError as e:
        return None, f"not a plan the planner can price: {e.message}"
    m = res["memory"]
    if not m["fits"]:
        from ..render.common import GiB

        return res, (f"does not fit: {m['total_bytes'] / GiB:,.1f} GiB per GPU, "
                     f"{(m['total_bytes'] - m['usable_bytes']) / GiB:,.1f} GiB over the usable {m['usable_bytes'] / GiB:,.1f} GiB")
    if several:
        return res, "fit compares several GPU counts: give one --gpus to rank the file's plan"
    return res, None
