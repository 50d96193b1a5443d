"""`planner calibrate ...`: fit cost figures to measurements (nccl-tests logs, GEMM timings, training runs, a timed
CPU Adam step: planner/calibrate/host_adam.py).

Commands only parse options, call planner.calibrate and hand the results to
planner/render/calibrate.py; the fit lives in planner/calibrate/nccl.py, the GEMM
calibration in planner/calibrate/gemm.py, the profile format in planner/profile.py and
its writing in planner/calibrate/profile.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import cli_errors, warn
from .. import files
from ..errors import PlannerError
from ..render.calibrate import (print_gemm_report, print_host_adam_report, print_nccl_report, print_run_report,
                                print_shapes, progress)
from ..profile import RUN_PARAMETERS
from ..render.common import Format, emit
from .common import FormatOption
from .helpfmt import HelpGroup
from ..units import parse_bytes

calibrate_app = typer.Typer(
    name="calibrate",
    help="Fit communication and GEMM figures, and the host's CPU Adam, to your own measurements; writes a profile YAML.",
    no_args_is_help=True,
    cls=HelpGroup,
    rich_markup_mode=None,  # click's plain help: readable at 80 columns (helpfmt.py)
)


@calibrate_app.command("nccl")
@cli_errors
def nccl(
    logs: list[Path] = typer.Argument(..., help="nccl-tests output files (all_reduce_perf, all_gather_perf, ...)", exists=False),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="profile YAML to write (default: print it on stdout, the report on stderr)"),
    collective: Optional[str] = typer.Option(None, "--collective", help="all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|... when the log does not name it"),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="rank count when neither Rank lines nor busbw/algbw tell it"),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="servers (trays on GB200 NVL72) when the log lacks a complete set of Rank lines"),
    scope: Optional[str] = typer.Option(None, "--scope", help="intra-node|inter-node (default: intra-node if the ranks share one NVLink domain: one server, or up to 18 trays of a GB200 NVL72 with --hardware)"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog name or YAML path of the GPUs and fabric measured: NVLink domains for the scope, and the uncalibrated model's busbw beside the log's (recorded in the profile)"),
    min_size: str = typer.Option("1MiB", "--min-size", help="smallest message size fitted, e.g. 1MiB, 256KiB, 8MB"),
) -> None:
    """Fit latency and bus bandwidth per (collective, scope, ranks) to nccl-tests logs."""
    from ..calibrate.nccl import calibrate_logs, compare_to_model
    from ..calibrate.profile import keep_gemm_section, profile_from_calibration, write_profile

    if output is not None:
        files.output_path(output, "-o")
    hw = None
    if hardware is not None:
        from ..catalog import load_hardware

        hw = load_hardware(hardware)
    min_bytes = int(parse_bytes(min_size, "--min-size"))
    cal = calibrate_logs(logs, collective=collective, ranks=ranks, nodes=nodes, scope=scope, min_bytes=min_bytes, warn=warn,
                         hardware=hw)
    prof = profile_from_calibration(cal, hardware=hw.name if hw else None)
    if output is None:
        from ..calibrate.profile import dump_profile

        typer.echo(dump_profile(prof), nl=False)
    else:
        with files.locked(output, "-o"):  # another calibrate writing this profile waits: no section is lost
            prof = keep_gemm_section(output, prof)
            write_profile(prof, output, warn=warn, section="nccl")
    checks = compare_to_model(cal, hw) if hw is not None else []
    print_nccl_report(prof, cal, output, checks)


# --- gemm ---------------------------------------------------------------------------
def _check_peaks(cal, hw, from_files) -> None:
    """Rows above the dense peak are refused here, not first by `explain --calibration`
    (issue 24): against --hardware's peak; without --hardware, against the fastest GPU of the
    catalog (a rate above every catalog GPU's peak is no GPU's the planner can price)."""
    from ..catalog import list_hardware, load_hardware
    from ..plan import check_gemm_peaks

    where = ", ".join(map(str, from_files)) if from_files else "the timed GEMMs"
    hint = "a measured rate cannot exceed the dense peak: check for a sparsity figure, the units (TFLOP/s), the dtype"
    if hw is not None:
        check_gemm_peaks(cal.rows, hw, where, hint + ", or --hardware")
        return
    catalog = [load_hardware(n) for n in list_hardware()]
    for field in ("bf16_TFLOPS", "fp8_TFLOPS"):
        fastest = max((h for h in catalog if getattr(h, field) is not None), key=lambda h: getattr(h, field), default=None)
        if fastest is not None:
            rows = [r for r in cal.rows if r.dtype in ({"fp8"} if field == "fp8_TFLOPS" else {"bf16", "fp16"})]
            check_gemm_peaks(rows, fastest, where + " (no --hardware: the fastest catalog GPU's peak)", hint)


def _int_list(text: str, what: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).replace(" ", "").split(",") if v]
    except ValueError:
        vals = []
    if not vals or any(v <= 0 for v in vals):
        raise PlannerError(f"{what}: {text!r} is not a list of positive integers", f"e.g. {what} 1,2,4,8")
    return vals


def _split(values: Optional[list[str]]) -> list[str]:
    return [v.strip() for item in (values or []) for v in item.split(",") if v.strip()]


@calibrate_app.command("gemm")
@cli_errors
def gemm(
    from_files: Optional[list[Path]] = typer.Option(None, "--from", help="measurements to ingest: CSV (header M,N,K,dtype,tflops), JSON or YAML rows; repeatable"),
    run: bool = typer.Option(False, "--run", help="time the --model layer GEMM shapes with PyTorch on the local GPU (needs the gpu extra: PyTorch)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="profile YAML to write; an existing profile keeps its nccl section, its gemm section is replaced"),
    gpu_filter: Optional[str] = typer.Option(None, "--gpu-filter", help="--from: keep rows whose gpu field contains this text (case-insensitive)"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog name or YAML of the GPU measured: records its dense peaks and SM count, shows efficiencies"),
    sustained: bool = typer.Option(False, "--sustained", help="--run: heat the GPU and run each shape back to back before timing; --from: the file's rows were measured that way"),
    model: Optional[list[str]] = typer.Option(None, "--model", help="--run: model(s) whose GEMMs to time (repeatable or comma-separated)"),
    tp: str = typer.Option("1", "--tp", help="--run: tensor-parallel sizes, e.g. 1,2,4,8"),
    seq_len: Optional[str] = typer.Option(None, "--seq-len", help="--run: sequence length(s) (default: each model's training length, as a planned job's)"),
    micro_batch: str = typer.Option("1", "--micro-batch", help="--run: sequences per micro-batch (list ok); M = seq_len x micro_batch tokens"),
    ep: str = typer.Option("1", "--ep", help="--run: expert-parallel sizes of MoE models (list ok): the per-expert GEMMs each gives"),
    dtype: str = typer.Option("bf16,fp8", "--dtype", help="--run: bf16 and/or fp8 (fp8 is skipped on GPUs without FP8 tensor cores)"),
    warmup: int = typer.Option(10, "--warmup", min=0, help="--run: untimed calls per shape"),
    repeats: int = typer.Option(30, "--repeats", min=1, help="--run: timed calls per shape (the median is kept)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="--run: list the shapes it would time and exit (needs no GPU)"),
    note: Optional[list[str]] = typer.Option(None, "--note", help="free text for the profile's provenance (repeatable)"),
) -> None:
    """Measured GEMM throughput: time the model's shapes (--run) or ingest measurements (--from)."""
    from ..calibrate import gemm as g
    from ..calibrate.profile import with_gemm_section, write_profile
    from ..profile import GemmCalibration

    if bool(from_files) == bool(run):
        raise PlannerError("give either --from FILE (ingest measurements) or --run (time GEMMs on this GPU)",
                           "e.g. planner calibrate gemm --from gemm.csv -o profile.yaml, or "
                           "planner calibrate gemm --run --model llama3-8b --tp 1,2,4,8 -o profile.yaml")
    if output is None and not dry_run:
        raise PlannerError("-o/--output is required: the profile YAML to write", "e.g. -o profile.yaml")
    if output is not None:
        files.output_path(output, "-o")
    hw = None
    if hardware is not None:
        from ..catalog import load_hardware

        hw = load_hardware(hardware)
    notes = list(note or [])
    if from_files:
        ignored = [o for o, v in (("--model", model), ("--dry-run", dry_run)) if v]
        for o in ignored:
            warn(f"{o} is for --run; ignored with --from")
        res = g.ingest_files(from_files, gpu_filter)
        for s in res.skipped:
            warn(f"skipped {s}")
        if res.other_gpus:
            warn(f"skipped {res.other_gpus} row(s) of other GPUs (--gpu-filter {gpu_filter!r})")
        cal = g.calibration_from_ingest(res, hw, gpu_filter, notes)
        if sustained:
            cal = GemmCalibration.model_validate({**cal.model_dump(), "sustained": True})
    else:
        if gpu_filter is not None:
            warn("--gpu-filter is for --from; ignored with --run")
        names = _split(model)
        if not names:
            raise PlannerError("--run needs --model (the model whose GEMM shapes to time)", "e.g. --model llama3-8b --tp 1,2,4,8")
        from ..catalog import load_model

        models = [load_model(n) for n in names]
        tps = _int_list(tp, "--tp")
        seqs = _int_list(seq_len, "--seq-len") if seq_len is not None else [None]
        mbs = _int_list(micro_batch, "--micro-batch")
        dtypes = _split([dtype])
        bad = [d for d in dtypes if d not in ("bf16", "fp8")]
        if bad or not dtypes:
            raise PlannerError(f"--dtype: {', '.join(bad) or repr(dtype)} is not bf16 or fp8", "e.g. --dtype bf16,fp8")
        shapes = g.benchmark_shapes(models, tps, seqs, mbs, _int_list(ep, "--ep"))
        if dry_run:
            print_shapes(shapes, dtypes, warmup, repeats, sustained, hw)
            return
        res = g.run_gemm_benchmark(shapes, dtypes, warmup, repeats, sustained=sustained, progress=progress)
        for s in res.skipped:
            warn(f"not timed: {s}")
        from ..plan import default_seq_len

        seq_used = sorted({default_seq_len(m, recipe=True) if s is None else s for m in models for s in seqs})
        cal = g.calibration_from_run(res, hw, [m.name for m in models], tps, seq_used, mbs, warmup, repeats, notes)
    _check_peaks(cal, hw, from_files)
    with files.locked(output, "-o"):  # another calibrate writing this profile waits: no section is lost
        prof = with_gemm_section(output, cal, hardware=hw.name if hw is not None else None)
        write_profile(prof, output, warn=warn, section="gemm")
    print_gemm_report(prof, cal, hw, output, from_files)


# --- run ------------------------------------------------------------------------------
@calibrate_app.command("run")
@cli_errors
def run(
    inputs: list[Path] = typer.Argument(..., help="run-record YAML files (planner validate's schema) and/or training logs "
                                                  "(torchtitan, Megatron-LM)", exists=False),
    output: Path = typer.Option(..., "--output", "-o", help="profile YAML to write; an existing profile keeps its nccl "
                                                            "and gemm sections, its run section is replaced"),
    config: Optional[list[Path]] = typer.Option(None, "--config", help="the trainer config a log ran: torchtitan TOML, "
                                                                       "Megatron-LM launch script / arguments (one per "
                                                                       "log, in order; one serves every log)"),
    config_format: Optional[str] = typer.Option(None, "--config-format", help="torchtitan|megatron|deepspeed (default: detected)"),
    job: Optional[list[Path]] = typer.Option(None, "--job", help="instead of --config: the planner job file a log ran"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="the GPUs the logs ran on (configs do not say)"),
    model: Optional[str] = typer.Option(None, "--model", help="--config: the model, where the config does not name a catalog shape"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="--config: GPUs, where the config leaves them to the launcher "
                                                            "(default: the log's world size)"),
    fit: Optional[str] = typer.Option(None, "--fit", help="comma-separated knobs to free (default: chosen from what the "
                                                          "inputs measure): " + ", ".join(RUN_PARAMETERS)),
    warmup: int = typer.Option(1, "--warmup", min=0, help="metrics lines dropped at the start of each log (the first "
                                                          "window times initialisation and compilation)"),
    fmt: Format = FormatOption,
) -> None:
    """Fit the cluster's efficiency knobs (GEMM, bandwidth, overlap, allocator) to measured training runs."""
    from ..calibrate.profile import with_run_section, write_profile
    from ..calibrate.run import calibrate_inputs

    free = _split([fit]) if fit else None
    files.output_path(output, "-o")
    with files.locked(output, "-o"):  # the fit reads the profile's sections as its baseline: held to the write
        res = calibrate_inputs(list(inputs), list(job or []), output=output, hardware=hardware, free=free, warmup=warmup,
                               configs=list(config or []), config_format=config_format, model=model, gpus=gpus)
        prof = with_run_section(output, res.section)
        write_profile(prof, output)
    emit(res.section.model_dump(mode="json"), fmt, lambda: print_run_report(res.section, output))


# --- host-adam ------------------------------------------------------------------------
@calibrate_app.command("host-adam")
@cli_errors
def host_adam(
    inputs: list[Path] = typer.Argument(..., help="host Adam record YAML files, DeepSpeed ZeRO-1/2 logs with "
                                                  "wall_clock_breakdown (optimizer_step), or DeepSpeed's "
                                                  "tests/perf/adam_test1.py output", exists=False),
    output: Path = typer.Option(..., "--output", "-o", help="profile YAML to write; an existing profile keeps its other "
                                                            "sections, its host_adam section is replaced"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="the hardware entry of the node measured: its "
                                                                    "host_memory_GBps and pcie_GBps, and the plans the "
                                                                    "section applies to (default: every hardware)"),
    host_memory_gbps: Optional[float] = typer.Option(None, "--host-memory-gbps", help="the node's DRAM peak, GB/s "
                                                     "(channels x MT/s x 8 B x sockets), in place of --hardware's"),
    pcie_gbps: Optional[float] = typer.Option(None, "--pcie-gbps", help="a DeepSpeed log: the GPU's host link, GB/s per "
                                              "direction, in place of --hardware's (the copy the timer spans)"),
    params: Optional[str] = typer.Option(None, "--params", help="a DeepSpeed log: the elements of a rank's optimizer "
                                                                "partition (parameters / data-parallel size), e.g. 1.004e9"),
    processes: Optional[int] = typer.Option(None, "--processes", min=1, help="a DeepSpeed log: the ranks of one node, "
                                                                             "stepping their partitions at once"),
    warmup: int = typer.Option(1, "--warmup", min=0, help="a DeepSpeed log: optimizer_step lines dropped at its start"),
    fmt: Format = FormatOption,
) -> None:
    """The host Adam's fraction of the DRAM peak under CPU offload, from a timed step (in place of 0.5)."""
    from ..calibrate.host_adam import Options, calibrate
    from ..calibrate.profile import with_host_adam_section, write_profile
    from ..units import finite

    files.output_path(output, "-o")
    for opt, v in (("--host-memory-gbps", host_memory_gbps), ("--pcie-gbps", pcie_gbps)):
        if v is not None and not (finite(v, opt) > 0):
            raise PlannerError(f"{opt} {v:g} must be positive", f"e.g. {opt} 563.2")
    opts = Options(host_memory_GBps=host_memory_gbps, pcie_GBps=pcie_gbps, processes=processes, warmup=warmup)
    if params is not None:
        from ..units import parse_count

        opts.params = parse_count(params, "--params")
        if not opts.params > 0:
            raise PlannerError(f"--params {params}: must be positive", "e.g. --params 1.004e9")
    if hardware is not None:
        from ..catalog import load_hardware

        hw = load_hardware(hardware)
        opts.hardware = hw.name
        opts.host_memory_GBps = host_memory_gbps if host_memory_gbps is not None else hw.host_memory_GBps
        opts.pcie_GBps = pcie_gbps if pcie_gbps is not None else hw.pcie_GBps
    section = calibrate(list(inputs), opts)
    for w in opts.warnings:
        warn(w)
    if not any(i.kind == "deepspeed-zero-log" for i in section.inputs):  # nothing silently dropped
        unused = [o for o, v in (("--params", params), ("--processes", processes), ("--pcie-gbps", pcie_gbps),
                                 ("--warmup", warmup != 1)) if v not in (None, False)]
        if unused:
            warn(f"{', '.join(unused)}: for a DeepSpeed ZeRO log; ignored (no such input: records and DeepSpeed's "
                 "benchmarks say their own elements and processes)")
    with files.locked(output, "-o"):  # another calibrate writing this profile waits: no section is lost
        prof = with_host_adam_section(output, section)
        write_profile(prof, output, warn=warn, section="host_adam")
    emit(section.model_dump(mode="json"), fmt, lambda: print_host_adam_report(section, output))


def register(app: typer.Typer) -> None:
    app.add_typer(calibrate_app, name="calibrate")
