"""`planner fit CONFIG`: search around a trainer config (issue 22, "fit takes no trainer config").

The file (a torchtitan TOML, a Megatron launch script / argument file, a DeepSpeed JSON, a torchtitan
0.3.0 launch line, or a planner job YAML) gives the job's facts: the model as its reader builds it,
the hardware and GPU count where it says them, sequence length, global batch, precision and fp8
recipe, stack, optimizer dtypes and every other setting the reader reads. It is read by the one
path `check`, `explain` and `budget` read it by (core.load_job), with every option laid over it
and named in a note (flags beat file values). The plan axes `fit` searches (PLAN_FIELDS) are not
pinned by the file: the search job is the file's job without them, and a note lists the file's own
values that fit searches over instead. The file's own plan, as the command line amends it, is
priced by explain's path (core.explain_json: what `planner explain CONFIG` with the same options
prints) and ranked among the plans the search found (search.rank_config).

Imported only when fit is given a file: `planner fit --model ...` imports no module of
planner/trainers/ (tests/test_start_up_cost.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

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
# A file's value of one of these is searched over, not pinned, unless the command line gives it.
PLAN_FIELDS = ("tp", "cp", "pp", "vpp", "dp", "micro_batch", "ep", "etp", "sharding", "sharding_mode", "shard_group",
               "recompute", "recompute_layers", "sequence_parallel", "schedule", "microbatch_group", "rank_order",
               "tp_comm_overlap")


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
    keep = {k for k, v in overrides.items() if v is not None}
    data = {k: v for k, v in own.model_dump(exclude_unset=True).items() if k not in PLAN_FIELDS or k in keep}
    job = validate(Job, data, str(path))
    bounds = bounds or {}
    fields = [k for k in PLAN_FIELDS if k in own.model_fields_set and k not in given]
    if fields:
        listed = ", ".join(f"{k}={_shown(getattr(own, k))}" + (f" (searched within the command line's {bounds[k]})"
                                                               if k in bounds else "") for k in fields)
        eg = next((k for k in fields if k in _PIN_OPTIONS), None)  # an axis fit's --NAME VALUE pins
        example = f", e.g. --{eg.replace('_', '-')} {getattr(own, eg)}" if eg is not None else ""
        note(f"{path}: fit searches the plan: the file's own {listed} are searched over, not pinned (its own plan is "
             f"priced and ranked below; an option pins one{example})")
    return job, own, where, read[0] if read else None


# PLAN_FIELDS a file may set that no fit row sets and `planner explain`'s options cannot clear: a row's explain
# command (search.config_explain_args) would keep the file's value
EXPLAIN_KEEPS = ("recompute_layers", "microbatch_group")


def unkept(own: Job, overrides: dict, pins: dict) -> list[str]:
    """'recompute_layers=4' for each EXPLAIN_KEEPS field the file set and the command line did not: the rows'
    explain commands say that `planner explain CONFIG` keeps it, where the row was priced without it."""
    given = {k for k, v in {**overrides, **pins}.items() if v is not None}
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
