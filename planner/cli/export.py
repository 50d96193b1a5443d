"""`planner export --format torchtitan|megatron|deepspeed|megatron-deepspeed|megatron-bridge`: a plan (explain's options, a job
file or trainer config, or a saved fit row: --from-fit FILE --row N) written as the
trainer's own config (planner/trainers/export.py). What the format cannot express goes to
stderr; the file goes to stdout or --output."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import cli_errors, warn
from .core import job_option_names, job_from_cli, job_options, plan_parameters, with_parameters
from .. import files
from ..errors import PlannerError
from ..explain import evaluate, to_json
from ..plan import resolve
from ..trainers import FORMATS


def resolved_plan(job, where: str = "") -> dict:
    """explain's `plan` (every resolved setting) for a job."""
    settings, plan, _ = resolve(job, where)
    return to_json(settings, plan, evaluate(settings, plan))["plan"]


def write_export(plan: dict, target: str, output: Optional[Path], readback: Optional[dict] = None) -> None:
    """Export `plan` as `target`, notes on stderr, the text to `output` or stdout. readback: the
    priced row (fit --export): the file is read back and must give the same plan and memory
    (issue 22), else exit 2 naming the difference."""
    from ..trainers.export import export_plan

    text, notes = export_plan(plan, target)
    if readback is not None:
        check_readback(readback, target, text)
    for n in notes:
        warn(f"export {target}: {n}")
    if output is None:
        typer.echo(text, nl=False)
    else:
        files.write_atomic(output, text, what="--output", hint="give a writable --output path")


def check_readback(row: dict, target: str, text: str) -> None:
    """Read the exported text back as the trainer's config and compare plan_signature and the
    memory total with the priced row; PlannerError (exit 2) naming the first difference."""
    import tempfile

    from ..schema import Job
    from ..trainers import load_trainer_config
    from ..trainers.export import _model, _written_as, plan_rows, plan_signature

    plan = row["plan"]
    # a plan on torchtitan 0.3.0 is exported as its launch line (trainers/torchtitan03.py), read back as one
    fmt = "torchtitan-0.3" if target == "torchtitan" and plan.get("stack") == "torchtitan-0.3" else target
    suffix = {"torchtitan": ".toml", "megatron": ".sh", "deepspeed": ".json", "megatron-deepspeed": ".sh",
              "torchtitan-0.3": ".sh", "megatron-bridge": ".sh"}[fmt]
    with tempfile.TemporaryDirectory(prefix="planner-export-") as d:
        path = Path(d) / f"exported{suffix}"
        files.write_atomic(path, text, what="fit --export read-back file")
        model = plan.get("model_file") or plan["model"]
        # the 2021 fork's script cannot name its stack (its flags are the later fork's): declared, as its header says
        declared = plan.get("stack") if plan.get("stack") == "megatron-deepspeed-2021" else None
        cfg = load_trainer_config(path, fmt=fmt, model=model, gpus=plan["gpus"],
                                  hardware=plan.get("hardware_file") or plan["hardware"], stack=declared)
        data = dict(cfg.job)
        # a plan of a stack whose plans the format's files carry (stack_db export_format: megatron-bridge as Megatron-LM
        # flags, export._written_as, which notes it) is read back on that stack: the reader names the format's own
        # (megatron), which the file cannot tell apart, and the settings the file holds are compared on the plan's stack
        if _written_as(plan, fmt, []):
            data["stack"] = plan["stack"]
        # what the format does not hold, as its notes say to pass when reading it back
        for k in ("seq_len", "recompute", "recompute_layers", "tokens", "headroom", "reserve_GiB", "activation_model",
                  "attention", "causal_attention_flops", "calibration", "power_limit_w", "cublas_workspace_config",
                  "pcie_gbps", "host_memory_gbps", "host_memory_gb",  # the job's host (plan._apply_host)
                  "te_version", "nccl_algo", "nccl_proto", "nccl_nvls_enable",
                  # the trainer commit's date (export's note: the file cannot hold it): the dated defaults it sets (a
                  # deterministic run's NCCL_ALGO Ring since 2026-07-08, plan._nccl_algo) read back as priced
                  "trainer_date"):
            if k in Job.model_fields and plan.get(k) is not None and (target == "deepspeed" or k not in data):
                data[k] = plan[k]
        # the vocabulary's rows: a plan priced at the model's rows that the file cannot hold (tp does not divide
        # them; the writers' vocabulary notes name the rows the trainer builds) is compared at those rows. Rows the file
        # reads back as the plan's (plan_rows: a job's make_vocab_size_divisible_by, which the writers spell as the
        # rows it pads to, --padded-vocab-size or the fork's divisor) are kept: dropped, they were priced at the
        # stack's default padding
        if plan.get("padded_vocab_size") is None and data.get("padded_vocab_size") != plan_rows(plan, _model(plan).vocab_size):
            data.pop("padded_vocab_size", None)
        if plan.get("power_limit_source") != "job":
            data.pop("power_limit_w", None)
        # MoE routing: a measured imbalance is no trainer flag (Megatron's force balancing, 1.0, is read back);
        # a reader that names no balancing takes the plan's (planner/imbalance.py)
        for k in ("moe_rank_imbalance", "moe_load_balancing"):
            if plan.get(k) is not None and k not in data and "moe_rank_imbalance" not in data:
                data[k] = plan[k]
        back = to_json(*_settings_plan(Job.model_validate(data)))
    a, b = plan_signature(plan), plan_signature(back["plan"])
    diff = [f"{k}: {a[k]!r} priced, {b[k]!r} read back" for k in a if a[k] != b.get(k)]
    m0, m1 = row["memory"]["total_bytes"], back["memory"]["total_bytes"]
    if abs(m0 - m1) > 1e-9 * max(m0, 1.0):
        diff.append(f"memory {m0 / 2**30:.2f} GiB priced, {m1 / 2**30:.2f} GiB read back")
    if diff:
        raise PlannerError(f"fit --export {target}: the exported file reads back as another plan: {'; '.join(diff)}",
                           "report it: the export or the reader misses a setting")


def _settings_plan(job):
    settings, plan, _ = resolve(job)
    return settings, plan, evaluate(settings, plan)


def register(app: typer.Typer) -> None:
    plan_params = plan_parameters(app)

    def export(
        target: str = typer.Option(..., "--format", "-f", help=f"the trainer's config format: {'|'.join(FORMATS)}"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the file here (default: stdout)"),
        **plan_kw,
    ):
        """Write a plan as a torchtitan TOML, a Megatron-LM launch script, a DeepSpeed JSON, a
        Megatron-DeepSpeed launch script (its ds_config JSON inside) or a Megatron-Bridge run_recipe.py launch;
        what the format cannot express is reported on stderr, never dropped."""
        if target not in FORMATS:
            raise PlannerError(f"--format {target!r} is not a trainer format", f"valid: {', '.join(FORMATS)}")
        job_file = plan_kw.pop("job_file", None)
        from_fit, row = plan_kw.pop("from_fit", None), plan_kw.pop("row", 1)
        config_format = plan_kw.pop("config_format", None)
        if output is not None:
            files.output_path(output, "--output")
            for src, opt in ((job_file, "the job file"), (from_fit, "--from-fit")):
                if src is not None and files.same_file(output, src):
                    raise PlannerError(f"--output {str(output)!r} is {opt} {str(src)!r}: writing it would destroy the input",
                                       "give another --output path")
        job, where = job_from_cli(job_file, job_options(**{k: plan_kw.get(k) for k in job_option_names()}), from_fit, row,
                                  config_format)
        plan = resolved_plan(job, where)
        if job.cp == 1:  # a CP variant without CP: the plan lists none and the file holds none (planner/cp_comm_type.py)
            from ..cp_comm_type import ignored_at_cp1 as cp_variant_ignored
            from ..cp_rotate import ignored_at_cp1 as rotate_ignored

            for w in cp_variant_ignored(job) + rotate_ignored(job):
                warn(f"export {target}: {w}")
        from ..catalog import load_stack
        from ..cp_rotate import ignored_on_stack as rotate_ignored_on_stack

        for w in rotate_ignored_on_stack(job, load_stack(job.stack)):  # the file leaves it out: training never sets it
            warn(f"export {target}: {w}; the file leaves context_parallel_rotate_method out")
        write_export(plan, target, output)

    app.command("export")(cli_errors(with_parameters(export, plan_params)))
