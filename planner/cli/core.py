"""Core commands: explain, models, hardware."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Optional, get_args

import typer

import sys

from .common import Format, FormatOption, QuietOption, cli_errors, note, warn
from ..errors import PlannerError
from ..files import parse_yaml
from ..field_options import FIELD_NAMES, FIELD_OPTIONS, command_line_spellings
from ..trainers import READ_FORMATS, default_trainer_seq, load_trainer_config, one_rank_mesh, sniff_format, words_of
from ..units import parse_count

# The catalog, the schema's pydantic classes, the cost models and the renderers are imported where a command runs,
# not here: a command's --help (explain's, and fit's, check's, budget's and export's, which take options declared
# here) prints without them (import_runtime; issue 24, start-up).


def import_runtime() -> None:
    """The modules explain, models, stacks and hardware (and the commands that load a job here) run on, imported at
    start-up by planner.cli.app_for unless the command line asks only for --help (planner/__main__.py freezes what
    start-up made; the functions' own imports find them loaded)."""
    from .. import catalog, explain, params, plan, recipe, schema  # noqa: F401
    from ..render import catalog as _catalog, explain as _explain  # noqa: F401


def report_trainer_config(cfg) -> None:
    """A trainer config's not-modelled and assumed lists on stderr (never silently); the
    settings it read that have no effect on memory or time (the readers' documented lists:
    optimizer, schedule, data, logging, checkpoints, ...) are counted, not listed (issue 24)."""
    if cfg.not_modelled:
        warn(f"{cfg.source}: read as {cfg.fmt}; not modelled (they change memory or time; the plan is priced without "
             f"them): {'; '.join(group_by_reason(cfg.not_modelled))}")
    if cfg.ignored:
        n = sum(len(i.entries) for i in cfg.ignored)  # each line a reader's record (report.Note): its settings
        note(f"{cfg.source}: read as {cfg.fmt}; {n} setting(s) with no effect on memory or time not listed "
             f"(optimizer, schedule, data, logging, checkpoints: the reader's documented list)")
    if cfg.assumed:
        note(f"{cfg.source}: assumed: {'; '.join(cfg.assumed)}")
    for u in getattr(cfg, "unmodelled", ()):
        warn(f"{cfg.source}: not modelled, priced otherwise: {u}")


def group_by_reason(entries: list) -> list[str]:
    """Entries that share a reason written once: 'a=1, b=2 (why)', in first-seen order; each a reader's record
    (planner/trainers/report.py Note: every line of a TrainerConfig's lists is one, tests/test_reader_notes_records.py),
    grouped by its head and message, never by its text read back."""
    groups: dict[str, list[str]] = {}
    for e in entries:
        # a record written `head: rule` (report.Note.ruled) is grouped whole, as its text has no trailing reason
        what, why = (str(e), "") if e.ruled else (e.head, e.message or "")
        groups.setdefault(why, []).append(what)
    return [", ".join(whats) + (f" ({why})" if why else "") for why, whats in groups.items()]


def stack_only_fields() -> tuple[str, ...]:
    """The Job fields marked as one stack's options (schema.STACK_ONLY), in declaration order."""
    from ..schema import Job

    return tuple(k for k, f in Job.model_fields.items() if (f.json_schema_extra or {}).get("stack_only"))


def _assumed(setting: str, rule: str, value=None, shown: Optional[str] = None):
    """A command-line note over a file as an assumed record (planner/trainers/report.py Note): `setting=shown: rule`,
    or `setting: rule` where no value is shown (a Job field's value then the job's). Imported where a note is
    written: `planner fit` imports no module of planner/trainers/ (tests/test_start_up_cost.py)."""
    from ..trainers.report import listed, noted

    return noted("assumed", setting, rule) if shown is None else listed("assumed", setting, value, rule, show=shown)


def replaced(data: dict, given: dict) -> list[str]:
    """'k=v: the command line replaces the file's old' for each option in `given` that changes a
    value the file (`data`) sets: an option beats the file, never silently (issues 22, 24). A key the file holds as
    null (a saved fit row's `tokens` where the fit had none) sets nothing, so an option there replaces nothing (before
    2026-12-07: "tokens=1e12: the command line replaces the file's None")."""
    return [_assumed(k, f"the command line replaces the file's {data[k]}", v, f"{v}") for k, v in given.items()
            if k in data and data[k] is not None and data[k] != v]


def replaced_defaults(data: dict, given: dict) -> list[str]:
    """The trainer config's own defaults a command-line option replaces where the file leaves the key out (replaced
    names only what the reader put in `data`): cp_load_balance, which every reader leaves out where the file's CP runs
    load-balanced (torchtitan's context_parallel_load_balancer default 'headtail' or a stated headtail / ptrr:
    planner/trainers/cp_balancer.py; Megatron-LM always balances) and sets false where it reads None. So
    `explain CONFIG --no-cp-load-balance` at cp > 1 (the file's cp, or the command line's) replaces the file's balanced
    CP, named as replaced values are (issue 22: flags beat file values, with a note)."""
    cp = given.get("cp", data.get("cp", 1)) or 1
    if given.get("cp_load_balance") is False and "cp_load_balancer" in data and "cp_load_balancer" not in given:
        # the file's named balancer (ptrr) is its balanced CP: the command line's none replaces it (a job naming both is
        # refused, plan.apply_startup_switches)
        return [_assumed("cp_load_balance", "the command line replaces the file's load balancer "
                         f"{data.pop('cp_load_balancer')} (no load balancing)", False, "False")]
    if given.get("cp_load_balance") is False and "cp_load_balance" not in data and cp > 1:
        return [_assumed("cp_load_balance", "the command line replaces the file's load-balanced context parallelism "
                         f"(its default at cp {cp}: each CP rank holds sequence chunks i and 2 cp - 1 - i)", False,
                         "False")]
    return []


def _level_of(mode: str, stack_name) -> Optional[str]:
    """The sharding level of the stack's mode `mode`; None for an unknown stack or mode (resolve names it)."""
    from ..catalog import load_stack

    try:
        runs = load_stack(stack_name).runs if stack_name is not None else None
    except PlannerError:
        return None
    return next((m.level for m in (runs.sharding if runs is not None else ()) if m.name == mode), None)


def _mode_level(data: dict, mode: str, stack_name, assumed: list) -> None:
    """A command-line sharding mode over a trainer config's sharding level of another (a DeepSpeed JSON at stage 0,
    sharding none, with --sharding bf16_optimizer, the zero1 mode DeepSpeed runs for bf16 there): the mode chooses
    its level, the file's not kept, listed as assumed (flags beat file values, as a command-line level chooses the
    mode anew). An unknown stack or mode is left to resolve, which names it."""
    level = _level_of(mode, stack_name)
    if level is not None and level != data["sharding"]:
        assumed.append(_assumed("sharding", f"the file's {data.pop('sharding')} is not kept: the command line's "
                                f"sharding mode {mode} chooses its level, {level}"))


def command_line_sharding(data: dict, given: dict) -> list[str]:
    """The file's sharding level or mode that the command line's options replace, each taken out of `data` and
    returned as a line: the two must agree (plan.resolve refuses a level and a mode of another level), and an
    option beats the file's value (issues 22, 24). The file's mode is a mode of the file's stack and level: the
    command line's stack or level chooses the mode anew (the stack's first of the level, plan.resolve); a
    command-line mode chooses its own level (_mode_level). For a trainer config (its reader's assumed lines) and
    a job YAML (a note) alike: `fit JOB.yaml` prints each row as `explain JOB.yaml --sharding MODE ...`
    (search.config_explain_args), whose mode replaces the file's level."""
    from ..schema import Job

    lines: list[str] = []
    if "sharding_mode" in data and "sharding_mode" not in given and (
            given.get("stack", data.get("stack")) != data.get("stack") or "sharding" in given):
        lines.append(_assumed("sharding_mode", f"the file's {data.pop('sharding_mode')} is not kept: the command "
                              "line's " + " and ".join(f"{k} {given[k]}" for k in ("stack", "sharding") if k in given)
                              + " choose(s) the mode (the stack's first of the level)"))
    stack = given.get("stack", data.get("stack", Job.model_fields["stack"].default))  # (a job without `stack:`: the default)
    if "sharding_mode" in given and "sharding" not in given and "sharding" in data:
        _mode_level(data, given["sharding_mode"], stack, lines)
    # the file's hsdp shard group under a command-line level or mode that is not hsdp (fit's rows of another level)
    level = given.get("sharding") or (_level_of(given["sharding_mode"], stack) if "sharding_mode" in given else None)
    if "shard_group" in data and "shard_group" not in given and level is not None and level != "hsdp":
        lines.append(_assumed("shard_group", f"the file's {data.pop('shard_group')} is not kept: the command line's "
                              f"sharding {given.get('sharding_mode') or level} is not hsdp"))
    return lines


def command_line_recompute(data: dict, given: dict) -> list[str]:
    """The file's full-recompute settings (plan.FULL_ONLY_FIELDS: Megatron's block window recompute_layers, DeepSpeed's
    partition_activations) that a command-line recompute other than full replaces, each taken out of `data` and
    returned as a line: resolve refuses them at recompute none or selective (plan._check_job_options, as Megatron-LM
    refuses a --recompute-method at granularity selective: arguments.py @d98e8a64 l. 1425-1427), and an option beats
    the file's value (issue 22). For a trainer config and a job YAML alike: `fit CONFIG` prints a row of recompute
    none as `explain CONFIG --recompute none ...` (search.config_explain_args), which would otherwise be refused."""
    from ..plan import FULL_ONLY_FIELDS

    if given.get("recompute", "full") == "full":
        return []
    return [_assumed(k, f"the file's {data.pop(k)} is not kept: full recompute's, and the command line's recompute "
                     f"{given['recompute']} re-runs no whole layer") for k, off in FULL_ONLY_FIELDS.items()
            if k not in given and data.get(k, off) != off]


# the options that choose where the gather acts (plan.param_gather_acts: the sharding level, the DP overlap as it runs)
PARAM_GATHER_MOVERS = ("sharding", "sharding_mode", "dp_comm_overlap", "stack", "optimizer")


def command_line_param_gather(cfg, data: dict, given: dict) -> list[str]:
    """The trainer config's parameter all-gather overlap (TrainerConfig.param_gather) under the command line's options,
    as lines (a value laid in `data`): flags beat files, each named (issue 22).
    - The command line's dp_param_gather_overlap where the reader left the field out (the file states the gather's
      overlap on, or for a mode where it does not act): named as replacing the file's setting.
    - A file that states the gather exposed (a Bridge config's ddp.overlap_param_gather false, or dist_muon without
      both) where its reader left the field out, since nothing gathers at the file's own sharding mode or DP overlap
      (megatron_bridge._job): the job's false is laid, so a plan where it acts (plan.param_gather_acts: a
      command-line sharding, mode, DP overlap, stack or optimizer; a fit's rows of zero1 / zero2) runs the file's
      setting, not the tie (plan_dict shows it only where it acts, so elsewhere nothing moves); named where such an
      option is given. A Megatron script without --overlap-param-gather states nothing (param_gather None): the tie
      stays, listed as assumed where it acts (plan.param_gather_assumed)."""
    stated, key = cfg.param_gather, cfg.param_gather_key
    if stated is None or "dp_param_gather_overlap" in data:
        return []  # replaced() names a command-line value over the reader's own field
    if "dp_param_gather_overlap" in given:
        v = given["dp_param_gather_overlap"]
        return [] if v == stated else [
            _assumed("dp_param_gather_overlap", f"the command line replaces the file's {key} {str(stated).lower()}",
                     v, str(v))]
    if stated:
        return []  # the tie is the file's (report.with_config lists no line)
    data["dp_param_gather_overlap"] = False
    moved = [k for k in PARAM_GATHER_MOVERS if k in given and given[k] != data.get(k)]
    return [_assumed("dp_param_gather_overlap", f"the file's {key} false, kept under the command line's "
                     + ", ".join(f"{k} {given[k]}" for k in moved) + " (the options replace the file's settings they "
                     "name, not this one): the parameter all-gather after the step exposed where it acts (step.py [40])",
                     False, "False")] if moved else []


# the command-line options a trainer config's reader reads the file under (load_trainer_config's parallel): the mesh,
# at which a DeepSpeed JSON's batch keys and a torchtitan TOML's -1 degrees and batch are read, and the batch and
# length options a torchtitan TOML works its local batch and tokens out at (torchtitan.read_sections)
PARALLEL_KEYS = ("tp", "pp", "cp", "dp", "vpp", "schedule", "micro_batch", "global_batch", "global_batch_tokens",
                 "batch_size_schedule", "seq_len")


def load_job(path: Optional[Path], overrides: dict, config_format: Optional[str] = None,
             trainer_out: Optional[list] = None) -> tuple[Job, str]:
    """A job from a YAML file or a trainer config (torchtitan TOML, Megatron script or
    argument file, DeepSpeed JSON: planner/trainers, detected or named by config_format)
    with CLI options laid over it. trainer_out: a list the trainer config read (TrainerConfig)
    is appended to, for `planner check` to spell its suggestions in the file's own keys."""
    from .. import recipe
    from ..catalog import job_file_data, validate
    from ..schema import Job

    data: dict = {}
    where = ""
    fmt, text = (None, None) if path is None else sniff_format(path, config_format)  # the file is read once
    if fmt is not None:
        cfg = load_trainer_config(path, fmt=fmt, text=text, model=overrides.get("model"), gpus=overrides.get("gpus"),
                                  hardware=overrides.get("hardware"),
                                  parallel={k: overrides.get(k) for k in PARALLEL_KEYS}, stack=overrides.get("stack"),
                                  overrides={k: v for k, v in overrides.items() if v is not None})
        data.update(cfg.job)
        if trainer_out is not None:
            trainer_out.append(cfg)
        given = {k: v for k, v in overrides.items() if v is not None and k not in ("model", "gpus")}
        # flags beat file values (issue 22), each replacement named
        cfg.assumed += replaced(data, {k: v for k, v in given.items() if k != "hardware"}) + replaced_defaults(data, given)
        # Megatron's own rules on the script's --sequence-parallel / --tp-comm-overlap at the tp it starts with
        from ..trainers.megatron import command_line_tp
        from ..trainers import megatron_bridge

        command_line_tp(cfg, data, given, f"{path}: ")
        megatron_bridge.command_line_tp(cfg, data, given, f"{path}: ")  # Bridge refuses SP at tp 1
        cfg.assumed += command_line_sharding(data, given) + command_line_recompute(data, given)
        cfg.assumed += command_line_spellings(data, given)
        cfg.assumed += command_line_param_gather(cfg, data, given)
        if given.get("stack", data.get("stack")) != data.get("stack") and "sharding" not in given:
            one_rank_mesh(data, given["stack"], cfg.assumed)
        if given.get("stack", data.get("stack")) != data.get("stack"):
            # the file's stack-only options (Megatron's fused loss, deferred output-layer wgrad) are
            # its stack's: a command-line stack chooses anew (a stack without them would refuse them)
            for k in stack_only_fields():
                if k in data and k not in given:
                    cfg.assumed.append(_assumed(k, f"the file's {data.pop(k)} is not kept: the command line's "
                                                f"stack {given['stack']} chooses its own"))
            if cfg.fmt == "deepspeed" and "attention" in data and "attention" not in given:
                # a DeepSpeed JSON names no core attention: the reader's fused core is an assumption for its stack
                cfg.assumed.append(_assumed("attention", f"the reader's assumed {data.pop('attention')} is not kept: "
                                            f"the command line's stack {given['stack']} chooses its own "
                                            "(defaults.attention)"))
        if "seq_len" not in given:  # a trainer config takes no recipe: its own default length (plan._seq_len)
            default_trainer_seq(data, cfg.assumed)
        report_trainer_config(cfg)
        data.update(given)
        return validate(Job, data, str(path)), f"{path}: "
    if config_format is not None:
        raise PlannerError("--config-format needs a trainer config file", "give the .toml / script / .json as the first argument")
    if path is not None:
        try:
            raw = job_yaml(path, text)
        except PlannerError:
            if _shell_script(path, text):  # a launch script no reader knows, not a job YAML gone wrong
                from ..trainers import not_a_config

                raise not_a_config(path) from None
            raise
        if not isinstance(raw, dict):
            if _shell_script(path, text):
                from ..trainers import not_a_config

                raise not_a_config(path)
            raise PlannerError(f"{path}: expected a mapping of job fields", "see `planner schema` or the README's job file example")
        data.update(job_file_data(raw, path, Job.model_fields))
        where = f"{path}: "
    given = {k: v for k, v in overrides.items() if v is not None}
    if path is not None and (lines := replaced(data, given) + command_line_sharding(data, given)
                             + command_line_recompute(data, given) + command_line_spellings(data, given)):
        note(f"{path}: {'; '.join(lines)}")  # flags beat the job file's values, each named (issue 24)
    data.update(given)
    if "model" not in data:
        raise PlannerError("no model given", "pass --model NAME (see `planner models`) or a job YAML with `model:`")
    if "gpus" not in data:
        raise PlannerError("no GPU count given", "pass --gpus N or set `gpus:` in the job YAML")
    release = _release_note(data)  # a torchtitan flavor on a release stack whose registry differs from main's
    if release is not None:
        note(release)
    data, taken = recipe.apply(data)  # the model's published training recipe where the job is silent
    if taken:
        from ..flavor_names import is_flavor_name  # a torchtitan:<code>/<flavor> model: what torchtitan builds

        origin = ("from what torchtitan builds for the flavor (its generated model's `training:`, planner/"
                  "torchtitan_registry.py" if is_flavor_name(data["model"]) else
                  "from its published training recipe (model_zoo `training:`, each cited there in full")
        note(f"{data['model']}: assumed {origin}; an option or job field replaces each): {'; '.join(taken)}")
    return validate(Job, data, str(path) if path else "command line"), where


def explain_json(job: Job, where: str, trainer=None) -> tuple[dict, object]:
    """`planner explain --format json` of one job, and its Settings: resolve, evaluate, to_json, the
    trainer config's block (trainer: the TrainerConfig load_job read, or None) and the plan's warnings.
    The one path `explain` and `fit CONFIG`'s own plan (planner/cli/fit_config.py) price a job by."""
    from ..explain import evaluate, to_json
    from ..plan import resolve

    settings, plan, warnings = resolve(job, where)
    res = to_json(settings, plan, evaluate(settings, plan))
    if trainer is not None:  # the reader's assumed lines and what it did not price, as data (planner/trainers/report.py)
        from ..trainers.report import with_config

        with_config(res, trainer)
    res["warnings"] = warnings
    return res, settings


ConfigFormatOption = typer.Option(
    None, "--config-format",
    help=f"read the job file as a trainer config: {'|'.join(READ_FORMATS)} (default: detected: .toml torchtitan, "
         ".json with zero_optimization deepspeed, a script / args file with Megatron flags megatron, a torchtitan "
         "0.3.0 launch line with --module / --config or MODULE= / CONFIG= ./run_train.sh torchtitan-0.3)")


def _release_note(data: dict) -> Optional[str]:
    """torchtitan_flavors.release_note for the job's model and stack (names only: a model of another kind, or a
    stack with no release registry, imports nothing of planner/trainers/)."""
    from ..flavor_names import is_flavor_name

    model, stack = data.get("model"), data.get("stack")
    if not (isinstance(model, str) and isinstance(stack, str) and is_flavor_name(model)):
        return None
    from ..trainers.torchtitan_flavors import release_note

    try:
        return release_note(model, stack)
    except PlannerError:  # an unknown flavor: resolve names it
        return None


def _shell_script(path: Path, text: Optional[str]) -> bool:
    """A file that no trainer reader took (sniff_format) and that is a shell script by its name (.sh, .bash, .slurm,
    .sbatch) or its first line (#!): a launch the readers do not know (Megatron-Bridge's MIMO scripts, a conversion
    script), named so rather than as the job YAML it is not ('line 10, column 1: invalid YAML'). Only a file
    sniff_format read (text not None): a missing run.sh is the reader's 'cannot read (no such file)', not 'not a
    trainer config' (before the 2026-12-07 audit5 it was the latter)."""
    if text is None:
        return False
    return path.suffix.lower() in (".sh", ".bash", ".slurm", ".sbatch") or text.lstrip().startswith("#!")


def job_yaml(path: Path, text: Optional[str] = None):
    """The data of a job YAML: parsed from `text` when sniff_format already read it, else read."""
    from ..catalog import read_yaml

    return read_yaml(path) if text is None else parse_yaml(text, str(path))


def job_from_cli(job_file: Optional[Path], overrides: dict, from_fit: Optional[Path] = None, row: int = 1,
                 config_format: Optional[str] = None, trainer_out: Optional[list] = None) -> tuple[Job, str]:
    """The job a command was given: a job YAML or trainer config, or row `row` of a saved
    `planner fit --format json` (--from-fit), with the command-line options laid over it.
    trainer_out: as load_job's (the trainer config read, for the JSON's trainer_config block)."""
    if from_fit is None:
        if row != 1:  # --row picks a row of --from-fit: without one it would be dropped silently
            raise PlannerError(f"--row {row} picks a row of a saved fit, and no --from-fit is given",
                               "add --from-fit FILE (a saved `planner fit --format json`), or leave --row out")
        return load_job(job_file, overrides, config_format, trainer_out)
    if job_file is not None:
        raise PlannerError("give a job file or --from-fit, not both", "e.g. --from-fit fit.json --row N")
    from ..search import fit_row_job, load_fit_rows, plan_job_fields

    rows = load_fit_rows(from_fit)
    job = fit_row_job(rows, row, where=f"{from_fit}: ", **overrides)
    # flags beat the saved plan's values as they beat a job file's, each named (issue 22)
    fields, given = plan_job_fields(rows[row - 1]["plan"]), {k: v for k, v in overrides.items() if v is not None}
    if lines := replaced(fields, given) + command_line_spellings(fields, given):  # (fit_row_job drops the same)
        note(f"{from_fit} row {row}: {'; '.join(lines)}")
    return job, f"{from_fit} row {row}: "


@functools.cache
def sharding_levels() -> tuple[str, ...]:
    """The sharding levels (schema.Sharding's values): --sharding takes one of them or a stack's mode."""
    from ..schema import Sharding

    return get_args(Sharding)


def job_options(
    model, gpus, hardware, tp, cp, pp, vpp, dp, micro_batch, global_batch, global_batch_tokens, seq_len,
    sharding, shard_group, recompute, sequence_parallel, precision, schedule, bytes_per_param,
    activation_model, attention, causal, headroom, reserve_gib, tokens, rank_order=None, calibration=None,
    tp_comm_overlap=None, recompute_layers=None, stack=None, torch_compile=None, dp_comm_overlap=None,
    fp8_recipe=None, power_limit_w=None, split_emb=None, split_loss=None, ep=None, moe_capacity_factor=None,
    ep_comm_overlap=None, etp=None, mtp_layers=None, loss_layers=None, microbatch_group=None, cp_comm_type=None,
    hierarchical_cp_sizes=None, pp_p2p_overlap=None, pp_p2p_overlap_warmup_flush=None, moe_rank_imbalance=None,
    moe_load_balancing=None, step_batch_size_schedule=None, moe_pad_to_capacity=None, **fields,
) -> dict:
    """The job fields a command's options give (None: not given); `fields`: the FIELD_OPTIONS
    options' values by field name (field_values checks each)."""
    return dict(
        model=model, gpus=gpus, hardware=hardware, tp=tp, cp=cp, pp=pp, vpp=vpp, dp=dp,
        micro_batch=micro_batch, global_batch=global_batch,
        global_batch_tokens=parse_count(global_batch_tokens, "--global-batch-tokens") if global_batch_tokens is not None else None,
        seq_len=seq_len, shard_group=shard_group, recompute=recompute,
        # --sharding takes a level or one of the stack's modes (stack_db runs.sharding, e.g.
        # fsdp2_no_reshard): a mode sets sharding_mode, whose level resolve reads
        **({"sharding_mode": sharding} if sharding is not None and sharding not in sharding_levels() else {"sharding": sharding}),
        sequence_parallel=sequence_parallel, precision=precision, schedule=schedule,
        bytes_per_param=bytes_per_param, activation_model=activation_model, attention=attention,
        causal_attention_flops=causal, headroom=headroom, reserve_GiB=reserve_gib,
        tokens=parse_count(tokens, "--tokens") if tokens is not None else None, rank_order=rank_order,
        calibration=str(calibration) if calibration else None, tp_comm_overlap=tp_comm_overlap,
        recompute_layers=recompute_layers, stack=stack, torch_compile=torch_compile, dp_comm_overlap=dp_comm_overlap,
        fp8_recipe=fp8_recipe, power_limit_w=power_limit_w,
        account_for_embedding_in_pipeline_split=split_emb, account_for_loss_in_pipeline_split=split_loss,
        ep=ep, moe_capacity_factor=moe_capacity_factor, ep_comm_overlap=ep_comm_overlap, etp=etp, mtp_layers=mtp_layers,
        loss_layers_in_pipeline_split=loss_layers, microbatch_group=microbatch_group, cp_comm_type=cp_comm_type,
        hierarchical_cp_sizes=parse_sizes(hierarchical_cp_sizes, "--hierarchical-context-parallel-sizes"),
        pp_p2p_overlap=pp_p2p_overlap, pp_p2p_overlap_warmup_flush=pp_p2p_overlap_warmup_flush,
        moe_rank_imbalance=moe_rank_imbalance, moe_load_balancing=moe_load_balancing,
        batch_size_schedule=parse_schedule(step_batch_size_schedule), moe_pad_to_capacity=moe_pad_to_capacity,
        **field_values(fields),
    )


def parse_schedule(text: Optional[str]) -> Optional[list]:
    """--step-batch-size-schedule in Megatron-LM's spelling ("0:512 252M:1024 2.87T:2048",
    planner/batch_ramp.py parse_megatron) as the job field batch_size_schedule; None where not given."""
    if text is None:
        return None
    from ..batch_ramp import parse_megatron

    return [{"from_tokens": float(t), "global_batch": b} for t, b in parse_megatron(text)]


def parse_sizes(text: Optional[str], flag: str) -> Optional[list]:
    """'2,2' or '2 2' as [2, 2]; None where not given (exit 2 on anything but whole numbers)."""
    if text is None:
        return None
    try:
        return [int(w) for w in text.replace(",", " ").split()]
    except ValueError:
        raise PlannerError(f"{flag} {text!r}: not whole numbers", f"e.g. {flag} 2,2") from None


def field_option_parameters() -> list[inspect.Parameter]:
    """One keyword parameter per FIELD_OPTIONS entry (planner/field_options.py), its typer option
    declared from the table: explain's and fit's (check, budget and export copy explain's)."""
    return [inspect.Parameter(o.field, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[_KIND_TYPES[o.kind]],
                              default=typer.Option(None, o.decl, help=o.help,
                                                   **({} if o.minimum is None else {"min": o.minimum})))
            for o in FIELD_OPTIONS]


_KIND_TYPES = {"bool": bool, "int": int, "float": float, "str": str, "words": str, "pairs": str}


def set_parameters(fn, params: list[inspect.Parameter]):
    """Give `fn` the signature `params` (typer reads the signature and the annotations)."""
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn


@functools.cache
def job_option_names() -> tuple[str, ...]:
    """job_options' own parameters and the FIELD_OPTIONS fields it takes as keywords (computed when
    budget, check or export registers: `planner fit` imports this module too and never reads it)."""
    return tuple(n for n, p in inspect.signature(job_options).parameters.items()
                 if p.kind != inspect.Parameter.VAR_KEYWORD) + FIELD_NAMES


def plan_parameters(app: typer.Typer) -> list[inspect.Parameter]:
    """explain's job-file argument and plan options (those job_options takes), as declared: the
    plan options of budget, check and export (each takes them from the registered explain command,
    so that they cannot drift apart; here, not in cli/budget.py, so that check and export do not
    import the budget's modules: start-up, issue 24)."""
    for cmd in app.registered_commands:
        if getattr(cmd.callback, "__name__", "") == "explain":
            sig = inspect.signature(cmd.callback, eval_str=True)
            return [p for name, p in sig.parameters.items()
                    if name in ("job_file", "from_fit", "row", "config_format", "quiet") or name in job_option_names()]
    raise RuntimeError("budget, check and export need the explain command registered first (core.register)")


def with_parameters(fn, before: list[inspect.Parameter]):
    """Give `fn(**kw)` a signature of `before` + fn's own keyword parameters, for typer."""
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    return set_parameters(fn, [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in before + own])


def with_field_options(fn):
    """A command `fn(..., **fields)` with the FIELD_OPTIONS options after its own parameters."""
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    return set_parameters(fn, own + field_option_parameters())


def field_values(given: dict) -> dict:
    """The job fields the FIELD_OPTIONS options gave (those not None), each checked against the
    schema.Job field's own type and bounds: a bad value is bad input (exit 2) naming the option.
    A words option (a list field) takes comma- or space-separated words."""
    from pydantic import ValidationError

    out = {}
    for o in FIELD_OPTIONS:
        v = given.get(o.field)
        if v is None:
            continue
        value = words_of(v, commas=True) if o.kind == "words" else _pairs(o.flag, v) if o.kind == "pairs" else v
        try:
            out[o.field] = _field_adapter(o.field).validate_python(value)
        except ValidationError as e:
            why = "; ".join(dict.fromkeys(err["msg"] for err in e.errors()))
            raise PlannerError(f"{o.flag} {v!r}: {why[:1].lower() + why[1:]}",
                               f"`planner explain --help` describes {o.flag}; `planner schema job` the job field "
                               f"{o.field}") from None
    return out


def _pairs(flag: str, text: str) -> dict:
    """A pairs option's 'KEY=N KEY=N' (or comma-separated) as {KEY: N}; N a count (5e8, 500M)."""
    out = {}
    for w in words_of(text, commas=True):
        key, eq, n = w.partition("=")
        if not eq or not key:
            raise PlannerError(f"{flag} {text!r}: {w!r} is not KEY=N", f"e.g. {flag} stage3_prefetch_bucket_size=0")
        x = parse_count(n, f"{flag} {key}")
        out[key] = int(x) if float(x).is_integer() else x
    return out


def _field_adapter(name: str):
    """A pydantic TypeAdapter of one Job field: its annotation with its constraints (ge, gt, pattern)."""
    from typing import Annotated

    from pydantic import TypeAdapter

    from ..schema import Job

    f = Job.model_fields[name]
    return TypeAdapter(Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation)


SplitEmbOption = typer.Option(
    None, "--account-for-embedding-in-pipeline-split/--no-account-for-embedding",
    help="count the embedding as a layer of the pipeline split (Megatron-Core; the first chunk holds a layer fewer) "
         "(default: the stack's: on for torchtitan, whose pipeline_parallel_first_stage_less_layers is 1, off elsewhere)")
MtpLayersOption = typer.Option(
    None, "--mtp-layers", min=0,
    help="multi-token prediction modules on the last pipeline stage (DeepSeek-V3 sec. 2.2; Megatron --mtp-num-layers) "
         "(default: the model recipe's where the stack trains them, else the model's)")
CapacityFactorOption = typer.Option(
    None, "--moe-capacity-factor",
    help="MoE capacity factor: an expert's tokens beyond this x the mean are dropped (Megatron "
         "--moe-expert-capacity-factor); caps the busiest rank's load (default: dropless)")
PadToCapacityOption = typer.Option(
    None, "--moe-pad-to-capacity/--no-moe-pad-to-capacity",
    help="MoE: pad every expert's input to the capacity (Megatron --moe-pad-expert-input-to-capacity; needs "
         "--moe-capacity-factor): the busiest rank's load is the capacity factor, and the alltoall / hybridep "
         "dispatchers skip the host synchronisation (no moe_host term) (default: off)")
RankImbalanceOption = typer.Option(
    None, "--moe-rank-imbalance",
    help="MoE routing imbalance: the busiest expert-parallel rank's routed tokens / the mean, as measured (1.0: "
         "balanced, Megatron --moe-router-force-load-balancing) (default: the rule of --moe-load-balancing, "
         "planner/imbalance.py)")
LoadBalancingOption = typer.Option(
    None, "--moe-load-balancing",
    help="MoE router balancing for the default imbalance rule: force|aux_loss|aux_loss_free|sinkhorn (default: "
         "aux_loss_free for a model with a router score bias, else aux_loss)")
EpOverlapOption = typer.Option(
    None, "--ep-comm-overlap/--no-ep-comm-overlap",
    help="MoE: hide the EP all-to-alls behind another micro-batch's compute (Megatron-Core "
         "--overlap-moe-expert-parallel-comm; needs ep > 1, vpp > 1 when pp > 1) (default: off)")
FitEpOverlapOption = typer.Option(
    None, "--ep-comm-overlap/--no-ep-comm-overlap",
    help="MoE: hide the EP all-to-alls behind another micro-batch's compute (Megatron-Core "
         "--overlap-moe-expert-parallel-comm) (default: on where the stack has it, priced on the plans it runs "
         "with: ep > 1, vpp > 1 when pp > 1, no full recompute)")
SplitLossOption = typer.Option(
    None, "--account-for-loss-in-pipeline-split/--no-account-for-loss",
    help="count the output layer and loss as a layer of the pipeline split (the last chunk holds a layer fewer) "
         "(default: the stack's: on for torchtitan, whose pipeline_parallel_last_stage_less_layers is 1, off elsewhere)")
MicrobatchGroupOption = typer.Option(
    None, "--microbatch-group",
    help="interleaved schedule: contiguous micro-batches per virtual stage, N in [pp, m] with m % N 0 or >= pp "
         "(Megatron --microbatch-group-size-per-virtual-pipeline-stage; Megatron stacks only) (default: pp, Megatron's)")
CpCommTypeOption = typer.Option(
    None, "--cp-comm-type",
    help="context parallelism's attention: p2p (the K/V ring) | all_gather (K/V all-gathered, exposed) | a2a (Ulysses "
         "all-to-alls of Q, K, V and the output, exposed; heads divisible by cp) | a2a+p2p (all-to-alls inside the "
         "first of --hierarchical-context-parallel-sizes, the ring across the second) (Megatron --cp-comm-type; "
         "Megatron stacks only) (default: p2p, Megatron's)")
PpP2pOverlapOption = typer.Option(
    None, "--pp-p2p-overlap/--no-pp-p2p-overlap",
    help="--no-pp-p2p-overlap: the pipeline's send/recv blocking (Megatron --no-overlap-p2p-communication; with vpp > 1 "
         "it needs pp > 2; Megatron stacks only) (default: the stack's, overlapped in the interleaved schedule)")
PpP2pWarmupFlushOption = typer.Option(
    None, "--pp-p2p-overlap-warmup-flush/--no-pp-p2p-overlap-warmup-flush",
    help="interleaved schedule: overlap the warm-up's and flush's send/recv too (Megatron "
         "--overlap-p2p-communication-warmup-flush; needs the p2p overlap; Megatron stacks only) (default: the stack's, "
         "waited on)")
HierCpOption = typer.Option(
    None, "--hierarchical-context-parallel-sizes",
    help="with --cp-comm-type a2a+p2p: the all-to-all group's and the ring's ranks, e.g. 2,2 (product cp; Megatron "
         "--hierarchical-context-parallel-sizes)")
StepBatchScheduleOption = typer.Option(
    None, "--step-batch-size-schedule",
    help="a batch-size ramp, Megatron-LM's spelling: 'THRESHOLD_TOKENS:GLOBAL_BATCH ...' (K/M/B/T suffixes), the first "
         "at 0, e.g. '0:512 252M:1024 2.87T:2048'; each phase priced at its own batch, the plan at the last "
         "(job field batch_size_schedule) (default: one batch)")
LossLayersOption = typer.Option(
    None, "--loss-layers-in-pipeline-split", min=0,
    help="count the last chunk's end (output layer, loss, MTP modules) as N layers of the pipeline split (a Megatron "
         "--pipeline-model-parallel-layout ending in 'm...L'; 1 = --account-for-loss-in-pipeline-split) (default: that flag's)")

def register(app: typer.Typer) -> None:
    @app.command()
    @cli_errors
    @with_field_options
    def explain(
        job_file: Optional[Path] = typer.Argument(None, help="job YAML (same fields as the options), or a torchtitan .toml / Megatron script / DeepSpeed .json", exists=False),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="catalog name, model YAML, or HF config.json / folder"),
        gpus: Optional[int] = typer.Option(None, "--gpus", "-g", help="GPU count"),
        hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog name or YAML path (default: h100-sxm)"),
        tp: Optional[int] = typer.Option(None, "--tp", help="tensor parallel degree (default: 1)"),
        cp: Optional[int] = typer.Option(None, "--cp", help="context parallel degree (default: 1)"),
        pp: Optional[int] = typer.Option(None, "--pp", help="pipeline stages (default: 1)"),
        vpp: Optional[int] = typer.Option(None, "--vpp", help="virtual stages per GPU (interleaved) (default: 1)"),
        dp: Optional[int] = typer.Option(None, "--dp", help="data parallel degree (default: gpus/(tp*cp*pp))"),
        micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="sequences per micro-batch (default: the stack's: 1, or the local batch / pp for torchtitan)"),
        global_batch: Optional[int] = typer.Option(None, "--global-batch", help="sequences per step"),
        global_batch_tokens: Optional[str] = typer.Option(None, "--global-batch-tokens", help="tokens per step (default: 16M = 2,048 x 8,192, the seed's)"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="tokens per sequence (default: the model's published pre-training length, training.seq_len, else at most 4096)"),
        sharding: Optional[str] = typer.Option(None, "--sharding", help="none|zero1|zero2|fsdp|hsdp, or a mode of the stack (`planner stacks`) (default: none)"),
        shard_group: Optional[int] = typer.Option(None, "--shard-group", help="hsdp: DP ranks per shard group; zero1 on megatron: dp / --num-distributed-optimizer-instances"),
        recompute: Optional[str] = typer.Option(None, "--recompute", help="none|selective|full (default: none)"),
        sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help=" (default: on when tp > 1, off on a stack whose code has no SP or never sums the norms' SP gradients over TP: stack_db runs.sequence_parallel)"),
        precision: Optional[str] = typer.Option(None, "--precision", help="bf16|fp8|nvfp4 (default: bf16; nvfp4 needs FP4 tensor cores: Blackwell)"),
        schedule: Optional[str] = typer.Option(None, "--schedule", help="1f1b|interleaved|gpipe|zb-h1|dualpipe (default: interleaved if vpp>1, else the stack's first schedule: 1f1b, dualpipe on deepseek)"),
        bytes_per_param: Optional[str] = typer.Option(None, "--bytes-per-param", help="mixed16 (16 B, seed) | megatron (18 B) | pure-bf16 | bf16-moments (14 B, DeepSeek-V3) (default: the stack's)"),
        activation_model: Optional[str] = typer.Option(None, "--activation-model", help="arch (shape-aware) | korthikanti (34 sbh, the seed's) (default: arch)"),
        attention: Optional[str] = typer.Option(None, "--attention", help="flash|eager (default: the stack's defaults.attention, what its code runs without an option: flash; eager on megatron-deepspeed, megatron-deepspeed-2021, megatron-deepspeed-bigscience)"),
        causal: Optional[bool] = typer.Option(None, "--causal-flops/--noncausal-flops", help="count attention FLOPs causal (default: non-causal, PaLM)"),
        headroom: Optional[float] = typer.Option(None, "--headroom", help="fraction of HBM kept free (default: 0.10)"),
        reserve_gib: Optional[float] = typer.Option(None, "--reserve-gib", help="CUDA context + NCCL GiB per GPU (default: 1.0)"),
        tokens: Optional[str] = typer.Option(None, "--tokens", help="training tokens, e.g. 15e12 or 15T"),
        rank_order: Optional[str] = typer.Option(None, "--rank-order", help="mesh axes innermost first (default: the stack's own order, e.g. Megatron's tp-cp-dp-pp)"),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="calibration profile from `planner calibrate`"),
        tp_comm_overlap: Optional[bool] = typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap", help="overlap TP collectives with GEMMs (needs SP) (default: the stack's)"),
        recompute_layers: Optional[int] = typer.Option(None, "--recompute-layers", help="with --recompute full: re-run only this many layers per stage (Megatron --recompute-num-layers) (default: all)"),
        stack: Optional[str] = typer.Option(None, "--stack", help="software stack: a catalog name (`planner stacks` lists them: megatron, megatron-bridge, torchtitan, torchtitan-0.3, llm-foundry, megatron-deepspeed, deepseek, ...) or a stack YAML (default: megatron)"),
        torch_compile: Optional[bool] = typer.Option(None, "--compile/--no-compile", help="torch.compile (stacks that have it) (default: the stack's)"),
        dp_comm_overlap: Optional[bool] = typer.Option(None, "--dp-comm-overlap/--no-dp-comm-overlap", help="overlap gradient reduction / parameter all-gather with compute (default: the stack's)"),
        fp8_recipe: Optional[str] = typer.Option(None, "--fp8-recipe", help="with --precision fp8: delayed|tensorwise|rowwise|mxfp8|blockwise (nvfp4: nvfp4) (default: the stack's)"),
        power_limit_w: Optional[float] = typer.Option(None, "--power-limit-w", help="GPU board power limit in W (default: the hardware's)"),
        split_emb: Optional[bool] = SplitEmbOption,
        split_loss: Optional[bool] = SplitLossOption,
        ep: Optional[int] = typer.Option(None, "--ep", help="expert parallel degree, folded into tp x dp x cp with etp (MoE models; Megatron --expert-model-parallel-size) (default: 1)"),
        etp: Optional[int] = typer.Option(None, "--etp", help="expert tensor parallel degree (MoE models; Megatron --expert-tensor-parallel-size, torchtitan expert_tensor_parallel_degree) (default: tp, Megatron's)"),
        moe_capacity_factor: Optional[float] = CapacityFactorOption,
        moe_pad_to_capacity: Optional[bool] = PadToCapacityOption,
        moe_rank_imbalance: Optional[float] = RankImbalanceOption,
        moe_load_balancing: Optional[str] = LoadBalancingOption,
        ep_comm_overlap: Optional[bool] = EpOverlapOption,
        mtp_layers: Optional[int] = MtpLayersOption,
        loss_layers: Optional[int] = LossLayersOption,
        microbatch_group: Optional[int] = MicrobatchGroupOption,
        cp_comm_type: Optional[str] = CpCommTypeOption,
        hierarchical_cp_sizes: Optional[str] = HierCpOption,
        pp_p2p_overlap: Optional[bool] = PpP2pOverlapOption,
        pp_p2p_overlap_warmup_flush: Optional[bool] = PpP2pWarmupFlushOption,
        step_batch_size_schedule: Optional[str] = StepBatchScheduleOption,
        from_fit: Optional[Path] = typer.Option(None, "--from-fit", help="a saved `planner fit --format json` file: explain one of its rows"),
        row: int = typer.Option(1, "--row", help="with --from-fit: the row, from 1"),
        config_format: Optional[str] = ConfigFormatOption,
        plot: Optional[Path] = typer.Option(None, "--plot", help="also draw the memory breakdown (stacked terms against the usable HBM) to FILE.png|svg|pdf"),
        fmt: Format = FormatOption,
        quiet: bool = QuietOption,
        **fields,
    ):
        """Memory, FLOPs, step time and MFU of one training plan, term by term. The job file
        is a planner job YAML or a trainer's own config (torchtitan TOML, Megatron launch
        script / argument file, DeepSpeed JSON with --model)."""
        from ..render.explain import emit_explain

        overrides = job_options(
            model, gpus, hardware, tp, cp, pp, vpp, dp, micro_batch, global_batch, global_batch_tokens, seq_len,
            sharding, shard_group, recompute, sequence_parallel, precision, schedule, bytes_per_param,
            activation_model, attention, causal, headroom, reserve_gib, tokens, rank_order, calibration, tp_comm_overlap,
            recompute_layers, stack, torch_compile, dp_comm_overlap, fp8_recipe, power_limit_w, split_emb, split_loss,
            ep, moe_capacity_factor, ep_comm_overlap, etp, mtp_layers, loss_layers, microbatch_group, cp_comm_type,
            hierarchical_cp_sizes, pp_p2p_overlap, pp_p2p_overlap_warmup_flush, moe_rank_imbalance, moe_load_balancing,
            step_batch_size_schedule, moe_pad_to_capacity, **fields)
        read: list = []  # the trainer config read, if the job file is one
        job, where = job_from_cli(job_file, overrides, from_fit, row, config_format, read)
        res, settings = explain_json(job, where, read[0] if read else None)
        warnings = res["warnings"]
        if plot is not None:
            from ..plot import memory_figure, save_figure

            p = res["plan"]
            save_figure(memory_figure([res], f"{p['model']} on {p['gpus']:,} x {p['hardware']}, stack {p['stack']}"), plot)
            sys.stderr.write(f"wrote {plot}\n")
        emit_explain(res, warnings, fmt, settings.inherited)

    @app.command()
    @cli_errors
    def models(fmt: Format = FormatOption):
        """List the model catalog (model_zoo/) and torchtitan's flavors (--model torchtitan:<code>/<flavor>)."""
        from ..catalog import list_model_names, load_model
        from ..params import count_params
        from ..render.catalog import emit_models
        from ..plan import default_seq_len
        from ..trainers.torchtitan_flavors import is_flavor_name

        rows = []
        for name in list_model_names():
            m = load_model(name)
            rows.append(dict(
                name=name, params=count_params(m).total, active=count_params(m).active,
                experts=f"{m.moe.num_experts} top-{m.moe.top_k}" if m.moe is not None else None,
                layers=m.num_layers, hidden=m.hidden_size,
                ffn=m.ffn_hidden_size, heads=m.num_attention_heads, kv_heads=m.kv_heads, vocab=m.vocab_size,
                mlp="gated" if m.gated_mlp else "plain", seq=m.max_seq_len,
                # the length a job without --seq-len trains (plan.default_seq_len: training.seq_len, else min(4,096, seq))
                train_seq=default_seq_len(m, recipe=True), description=m.description,
                # where the model comes from: its model_zoo file, or the flavor's registry lines at the stack's commit
                source=m.sources[0] if is_flavor_name(name) else f"model_zoo/{name}.yaml",
            ))
        emit_models(rows, fmt)

    @app.command("stacks")
    @cli_errors
    def stacks_cmd(fmt: Format = FormatOption):
        """List the software-stack catalog (stack_db/): kernels, recompute, overlap, fp8 recipes."""
        from ..catalog import list_stacks, load_stack
        from ..render.catalog import emit_stacks

        rows = []
        for name in list_stacks():
            st = load_stack(name)
            rows.append(dict(
                name=name, version=st.version, attention=st.attention_kernel,
                compile=st.compiled_kernels is not None, tp_comm_overlap=st.overlap.tp_comm_overlap_supported,
                grad_reduce_bytes=st.fsdp.grad_reduce_bytes, fp8_recipes=", ".join(st.fp8_recipes) or "-",
                reports=st.memory.reports, description=st.description,
            ))
        emit_stacks(rows, fmt)

    @app.command("hardware")
    @cli_errors
    def hardware_cmd(fmt: Format = FormatOption):
        """List the hardware catalog (hardware_db/)."""
        from ..catalog import list_hardware, load_hardware
        from ..render.catalog import emit_hardware

        rows = []
        for name in list_hardware():
            h = load_hardware(name)
            rows.append(dict(
                name=name, hbm_GB=h.hbm_GB, hbm_visible_GiB=h.hbm_visible_GiB, hbm_TBps=h.hbm_TBps, bf16_TFLOPS=h.bf16_TFLOPS, fp8_TFLOPS=h.fp8_TFLOPS,
                fp4_TFLOPS=h.fp4_TFLOPS,  # the table's FP4 TF column (before the 2026-12-07 audit5 never filled: blank on B200)
                tdp_W=h.tdp_W, gpus_per_node=h.gpus_per_node, nvlink_domain=h.nvlink_domain, nvlink_GBps=h.nvlink_GBps,
                network_Gbps=h.network_Gbps, pod_gpus=h.fabric.pod_gpus, oversubscription=h.fabric.oversubscription,
            ))
        emit_hardware(rows, fmt)
