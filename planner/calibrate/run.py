"""`planner calibrate run`: fit the run-calibration knobs of a cluster to measured training runs.

Inputs (each a MeasuredRun: a resolved plan plus what was measured):
  - run records in the schema `planner validate` reads (validate.RunRecord): the published
    tokens/s per GPU or iteration time, and memory_per_gpu_gib where given (in the stack's
    `memory.reports` convention: max reserved or max allocated);
  - a torchtitan training log: the metrics lines of MetricsProcessor.log [1]
        step: 10  loss:  9.1234  grad_norm:  1.2345  memory: 38.52GiB(40.55%)  tps: 3,210  tflops: 150.12  mfu: 15.18%
    (colour codes stripped; older versions have no grad_norm or tflops, and 2024's call tps
    `wps` [1b]), where tps is tokens
    per second per GPU over the window since the previous line and memory the window's peak
    max_reserved; the world size from ParallelDims' "Building N-D device mesh with [names],
    [dims]" line [2] and the batch from "global batch size G, sequence length S" where logged;
  - a Megatron-LM log: training_log's iteration lines [3]
        iteration       20/     100 | consumed samples: ... | elapsed time per iteration (ms): 2345.6 |
        throughput per GPU (TFLOP/s/GPU): 401.2 | ... | global batch size:   128 | ...
    (the elapsed time is the mean over the log interval), report_memory's line [4]
        [Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... | max reserved: ...
    (MB = 2**20 bytes; peaks since the start; every data-parallel rank 0 prints one: the
    largest over ranks is the most loaded pipeline stage, which is what the memory model
    prices), and the world size from arguments.py's "using world size: N, data-parallel
    size: ..., tensor-model-parallel size: T, pipeline-model-parallel size: P" line [5].
  A log comes with the job it ran (a planner job file, --job); a log whose world size,
  parallel sizes or global batch disagree with it is an error naming the line and field.

Steady state. The first WARMUP_LINES metrics line(s) of a log are dropped: torchtitan logs
step 1 on its own line (should_log: step == 1 or step % log_freq == 0 [1]) and Megatron's
first interval contains the first iteration; either times lazy initialisation, NCCL
communicator set-up, torch.compile / autotuning and the caching allocator's first growth,
none of which repeat. The steady value is the median of the remaining lines, its spread
[min, max] / median - 1 is reported, and its relative 1-sigma is max(SD_FLOOR, 1.4826 MAD /
median) (the MAD's normal-consistent scale).

The fit. Each knob (profile.RUN_PARAMETERS: named, bounded, identity = the uncalibrated
model) is fitted in its transform's variable (ln value; ln(1 + value) for a slack) by
scipy.optimize.least_squares (trf, within the bounds) on the residuals
    r_i = ln(predicted_i / measured_i) / sd_i                  (each measurement)
    r_k = (theta_k - theta_k,prior) / PRIOR_SD                 (each free knob: the prior)
where predicted_i comes from the same explain.evaluate the planner prices plans with (the
knobs reach step.py and memory.py as RunKnobs; the fit evaluates many candidate values in
one call). Which knobs are free follows from what the inputs measure: the Jacobian
d ln predicted / d theta at the prior is taken over every knob; knobs are taken in the
order of RUN_PARAMETERS (the GEMM efficiency scale first: every step time measures it) and
kept when some measurement moves by at least SENSITIVITY_MIN per unit of the variable and
the column-normalised Jacobian of the kept knobs keeps its smallest singular value above
SEPARATION_MIN times the largest (the measurements tell it apart from those already
kept). So one step time frees one knob, a measured peak reserved memory frees the
allocator slack, and several runs that differ in their communication shares free more,
never more than the independent measurements. A knob asked for with --fit that the
inputs cannot determine is an error that says which measurement to add. The uncertainty
is the 1-sigma of each variable from (J^T J)^-1 at the solution (J the weighted residuals'
Jacobian, prior rows included).

Named assumptions: SD_FLOOR (a step time repeats to about 1% between runs; published
figures carry 2-3 significant digits), MEMORY_SD (peak memory repeats to about 1%),
PRIOR_SD = ln 1.5 (no one mechanism of the uncalibrated model is expected to be off by
more than 1.5x; with as many free knobs as measurements of 1% the prior moves the fit by
(0.01/0.405)^2 = 0.06% of the gap).

Units: seconds, bytes; tokens/s per GPU.

References
[1] pytorch/torchtitan torchtitan/components/metrics.py, MetricsProcessor.log and
    should_log (commit 00fbaafa6ea1b54dd1a9b451a648f196781e8b26, 2025).
[1b] pytorch/torchtitan train.py (commit 0011fb905e9561a51af0f265e35d989f7448b1d8, 2024): the same
    line before `tps` was named: `step: ...  loss: ...  memory: ...GiB(...%)  wps: ...  mfu: ...%`,
    wps = tokens since the last log / (seconds x model-parallel size), tokens/s per GPU.
[2] pytorch/torchtitan torchtitan/distributed/parallel_dims.py, ParallelDims._build_mesh
    ("Building {n}-D device mesh with {names}, {dims}").
[3] NVIDIA/Megatron-LM megatron/training/training.py, training_log (commit
    86df799dc4c78e4bd7fbae972b3ee743e8b14f02): " iteration {:8d}/{:8d} |", " elapsed time
    per iteration (ms): {:.1f} |", " throughput per GPU (TFLOP/s/GPU): {:.1f} |", " global
    batch size: {:5d} |"; report_memory after the first logged interval.
[4] NVIDIA/Megatron-LM megatron/training/utils.py, report_memory (commit
    d086a2e3b020ff78db9d29915f7cfe886e085f13): "[Rank {}] {name} memory (MB) | allocated: {}
    | max allocated: {} | reserved: {} | max reserved: {}", MB = 1024 * 1024 bytes.
[5] NVIDIA/Megatron-LM megatron/training/arguments.py, validate_args ("using world size:
    {}, data-parallel size: {}, context-parallel size: {}, ... tensor-model-parallel size:
    {}, pipeline-model-parallel size: {}").
"""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..catalog import read_yaml, validate
from .. import files
from ..files import check_name as _check_name, is_file as _is_file, read_bytes as _read_bytes
from ..errors import PlannerError
from ..explain import evaluate
from ..memory import outside_bytes
from ..plan import PlanArrays, Settings, resolve
from ..profile import (
    RUN_PARAMETERS, STACK_PARAMETERS, RunCalibration, RunFitSettings, RunInputFile, RunKnobs, RunMeasurement,
    RunParameterFit, baseline_digests,
)
from ..schema import Job

WARMUP_LINES = 1
SD_FLOOR = 0.01
MEMORY_SD = 0.01
PRIOR_SD = math.log(1.5)
SENSITIVITY_MIN = 0.01
SEPARATION_MIN = 0.1
FD_STEP = 1e-4  # finite-difference step of the fit variable
MiB = 2.0**20
GiB = 2.0**30
QUANTITY_UNIT = {"step_time": "s", "max_reserved": "bytes", "max_allocated": "bytes"}

# what to add when a knob cannot be determined
ADD_HINT = {
    "gemm_efficiency_scale": "a measured step time (tokens/s) of any run",
    "internode_bandwidth_scale": "a run whose traffic across nodes takes another share of the step "
                                 "(the same model on another node count, or another DP / PP size)",
    "nvlink_bandwidth_scale": "a run with another share of NVLink traffic (another TP degree, or a single-node run)",
    "memory_bound_efficiency_scale": "a run with another share of memory-bound work (another sequence length or "
                                     "micro-batch, or torch.compile on / off)",
    "overlapped_exposed_fraction": "a run with another share of overlapped DP / FSDP communication (another DP "
                                   "size, or dp_comm_overlap on / off)",
    "allocator_slack": "a measured peak reserved memory (torchtitan's memory: figure, Megatron's max reserved)",
}


# ============================================================================ inputs
@dataclass
class MeasuredRun:
    """One measured run: its resolved plan and what was measured (SI units)."""

    label: str
    settings: Settings
    plan: PlanArrays
    step_s: Optional[float] = None
    step_sd: float = SD_FLOOR
    reserved_bytes: Optional[float] = None
    allocated_bytes: Optional[float] = None
    steps: Optional[int] = None
    warmup_dropped: Optional[int] = None
    spread: Optional[tuple[float, float]] = None
    tokens_per_s_per_gpu: Optional[float] = None
    notes: list[str] = field(default_factory=list)
    memory_source: Optional[str] = None  # where the memory figures were read, when not `label`

    @property
    def stack(self) -> str:
        return self.settings.stack.name

    @property
    def hardware(self) -> str:
        return self.settings.hardware.name

    @property
    def tokens_per_step(self) -> float:
        return float(self.plan.gbs) * float(self.plan.seq)

    def measured(self) -> list[tuple[str, float, float]]:
        """(quantity, measured, relative sd) of each measured figure."""
        out = []
        if self.step_s is not None:
            out.append(("step_time", self.step_s, self.step_sd))
        if self.reserved_bytes is not None:
            out.append(("max_reserved", self.reserved_bytes, MEMORY_SD))
        if self.allocated_bytes is not None:
            out.append(("max_allocated", self.allocated_bytes, MEMORY_SD))
        return out


def sha256_file(path: Path) -> str:
    return hashlib.sha256(files.read_bytes(path)).hexdigest()  # regular, size-capped files only


def record_runs(path: Path, calibration: Optional[str] = None, records=None, tmpdir: Optional[Path] = None) -> list[MeasuredRun]:
    """MeasuredRuns of a runs file (validate's schema); a record that cannot be evaluated,
    or publishes nothing to fit, is an error naming it."""
    from .. import validate as v

    path = Path(path)
    recs = v.load_runs(path) if records is None else records
    runs = []
    with tempfile.TemporaryDirectory(prefix="planner-calibrate-") as d:
        tmp = Path(tmpdir or d)
        for rec in recs:
            runs.append(record_run(rec, tmp, path.resolve().parent, str(path), calibration))
    return runs


def record_run(rec, tmpdir: Path, base_dir: Path, label: str, calibration: Optional[str] = None) -> MeasuredRun:
    from .. import validate as v

    row = v.new_row(rec)
    where = f"{label}: record {rec.id!r}"
    try:
        settings, plan = v.prepare_record(rec, row, tmpdir, base_dir, label, calibration)
    except v.Skip as s:
        raise PlannerError(f"{where}: cannot be evaluated ({s})", "fix the record, or leave it out of the calibration") from None
    tok, _ = rec.published_tokens
    run = MeasuredRun(label=where, settings=settings, plan=plan, notes=list(row.assumed))
    if tok is not None:
        run.tokens_per_s_per_gpu = tok
        run.step_s = float(plan.gbs) * float(plan.seq) / (tok * settings.gpus)
    if rec.memory_per_gpu_gib is not None:
        hbm = settings.hardware.hbm_bytes / GiB
        if not rec.memory_per_gpu_gib <= hbm:  # 1e300 GiB would overflow to inf bytes: named as given
            raise PlannerError(f"{where}: field `memory_per_gpu_gib`: {rec.memory_per_gpu_gib:g} GiB is not possible on "
                               f"{settings.hardware.name} ({hbm:.4g} GiB of HBM)", "give the figure as measured (GiB per GPU)")
        b = rec.memory_per_gpu_gib * GiB
        if settings.stack.memory.reports == "max_allocated":
            run.allocated_bytes = b
        else:
            run.reserved_bytes = b
    if not run.measured():
        raise PlannerError(f"{where}: publishes no tokens/s, iteration time or memory to calibrate on",
                           "give tokens_per_sec_per_gpu, iteration_time_s or memory_per_gpu_gib")
    _physical(run, where, {"step": "tokens_per_sec_per_gpu", "memory": "memory_per_gpu_gib"})
    return run


def _physical(run: MeasuredRun, where: str, fields: dict) -> None:
    """A measurement the hardware cannot produce is an error naming it, not a point to fit
    (a tps of 1e308, a memory of 1e300 GiB or 0 sent the fit's start outside its bounds): a
    step time at which the GPUs would execute more FLOPs than their peak (HFU above 1,
    step.throughput: the FLOPs the kernels run, causal attention and recompute counted, over
    the datasheet peak of the plan's precision), and a peak memory that is not positive or
    exceeds the GPU's HBM (Hardware.hbm_bytes: what the device reports to CUDA where
    hardware_db gives hbm_visible_GiB, else the datasheet hbm_GB)."""
    from ..step import throughput

    hw = run.settings.hardware
    if run.step_s is not None:
        if not math.isfinite(run.step_s) or run.step_s < 0:
            raise PlannerError(f"{where}: field `{fields['step']}`: a step time of {run.step_s:g} s is not a measurement",
                               "give the figure as measured")
        hfu = math.inf if run.step_s == 0 else float(np.nanmax(np.atleast_1d(throughput(run.settings, run.plan, run.step_s)["hfu"])))
        if hfu > 1.0:
            tok = run.tokens_per_s_per_gpu
            raise PlannerError(f"{where}: field `{fields['step']}`: {tok:.6g} tokens/s per GPU (a {run.step_s:.3g} s step) "
                               f"would run the GPUs at {hfu:.3g}x {hw.name}'s peak FLOP rate (HFU {hfu:.0%})",
                               "the figure is not a measurement of this job: check its units, the model and the GPU count")
    # the least a step can hold: PyTorch's caching allocator rounds every block up to 512 B and
    # reserves segments of 2 MiB at the least (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize,
    # kSmallBuffer); a figure below is not a measurement (1e-308 GiB sent the residuals to inf)
    for name, b, least in (("peak reserved", run.reserved_bytes, 2.0 * 2**20), ("peak allocated", run.allocated_bytes, 512.0)):
        if b is not None and not (math.isfinite(b) and least <= b <= hw.hbm_bytes):
            raise PlannerError(f"{where}: field `{fields['memory']}`: a {name} memory of {b / GiB:.4g} GiB is not possible on "
                               f"{hw.name} (from {least:.0f} B, the caching allocator's smallest {name.split()[1]} "
                               f"block, to {hw.hbm_bytes / GiB:.4g} GiB of HBM)", "give the figure as measured (GiB per GPU)")


# ------------------------------------------------------------------------ log parsing
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUM = r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass
class LogFacts:
    """What a training log says: its metrics lines and the facts to check against the job."""

    path: Path
    fmt: str  # "torchtitan" | "megatron"
    lines: list[tuple[int, int, float]] = field(default_factory=list)  # (line no, step, value)
    quantity: str = "tps"  # torchtitan: tokens/s per GPU; megatron: ms per iteration
    memory: list[tuple[int, float]] = field(default_factory=list)  # torchtitan: (line, max reserved GiB)
    mem_ranks: list[tuple[int, dict]] = field(default_factory=list)  # megatron: (line, {allocated, max allocated, ...} MB)
    world: Optional[tuple[int, int, dict]] = None  # (line, world size, {axis: size})
    batch: Optional[tuple[int, int, Optional[int]]] = None  # (line, global batch, seq len)
    batch_lines: list[tuple[int, int]] = field(default_factory=list)  # megatron: (line, global batch size)
    extra: dict = field(default_factory=dict)  # cross-checks: tflops, mfu medians


def _short(text: str) -> str:
    r = repr(text)
    return r if len(r) <= 40 else f"a {len(text)}-character value"


def _num(text: str, path: Path, lineno: int, fieldname: str) -> float:
    """A finite number ('1e999' reads as inf, 'nan' as nan: neither is a measurement)."""
    try:
        x = float(text.replace(",", ""))
    except ValueError:
        raise PlannerError(f"{path}:{lineno}: field `{fieldname}`: {_short(text)} is not a number",
                           "a metrics line cut off or edited? give the log as the trainer wrote it") from None
    if not math.isfinite(x):
        raise PlannerError(f"{path}:{lineno}: field `{fieldname}`: {_short(text)} is not a finite number",
                           "give the log as the trainer wrote it")
    return x


def _count(text: str, path: Path, lineno: int, fieldname: str, minimum: int = 1) -> int:
    """A count in ASCII digits from `minimum` to 2**31 - 1 (schema.MAX_COUNT): a mesh size,
    world size, batch or step ('nan' or a 400-digit world size is an error, not a crash)."""
    from ..schema import MAX_COUNT

    t = text.strip().replace(",", "")
    if not re.fullmatch(r"[0-9]{1,10}", t) or not minimum <= int(t) <= MAX_COUNT:
        raise PlannerError(f"{path}:{lineno}: field `{fieldname}`: {_short(text.strip())} is not a count from {minimum} "
                           f"to {MAX_COUNT}", "give the log as the trainer wrote it")
    return int(t)


def _field(line: str, key: str, path: Path, lineno: int, pattern: str = _NUM) -> str:
    m = re.search(re.escape(key) + r"\s*(" + pattern + r")", line)
    if m is None:
        raise PlannerError(f"{path}:{lineno}: field `{key.rstrip(':').strip()}` missing or unreadable in a metrics line",
                           "a truncated or edited line? give the log as the trainer wrote it (every metrics line "
                           "has the same fields)")
    return m.group(1)


def sniff_format(path: Path, text: str) -> str:
    if re.search(r"elapsed time per iteration \(ms\)", text):
        return "megatron"
    if re.search(r"\bstep:\s*\d+.*\b[tw]ps:", text):
        return "torchtitan"
    raise PlannerError(f"{path}: not a torchtitan or Megatron-LM training log (no `step: ... tps: ...` or "
                       "`elapsed time per iteration (ms)` lines)",
                       "give the trainer's stdout log, or a runs file (YAML list of records)")


def parse_log(path: Path) -> LogFacts:
    path = Path(path)
    text = files.read_bytes(path, "give the trainer's stdout log").decode("utf-8", errors="replace")
    text = _ANSI.sub("", text)
    fmt = sniff_format(path, text)
    facts = LogFacts(path=path, fmt=fmt, quantity="tps" if fmt == "torchtitan" else "ms")
    tflops, mfu = [], []
    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if fmt == "torchtitan":
            m = re.search(r"Building (\d+)-D device mesh with \[([^\]]*)\], \[([^\]]*)\]", line)
            if m:
                names = [n.strip().strip("'\"") for n in m.group(2).split(",") if n.strip()]
                dims = [_count(d, path, i, "device mesh") for d in m.group(3).split(",") if d.strip()]
                if len(names) != len(dims) or len(dims) != int(m.group(1)):
                    raise PlannerError(f"{path}:{i}: field `device mesh`: {len(names)} names, {len(dims)} dims for a "
                                       f"{m.group(1)}-D mesh", "give the log as torchtitan wrote it")
                facts.world = (i, _count(str(math.prod(dims)), path, i, "device mesh (product)"), dict(zip(names, dims)))
                continue
            m = re.search(r"global batch size (\d+), sequence length (\d+)", line)
            if m:
                facts.batch = (i, _count(m.group(1), path, i, "global batch size"), _count(m.group(2), path, i, "sequence length"))
                continue
            if re.search(r"(?<!validate )\bstep:\s*\d+", line) and not re.search(r"validate step:", line):
                if not re.search(r"\b[tw]ps:|loss:", line):
                    continue
                step = _count(_field(line, "step:", path, i, r"\d+"), path, i, "step", minimum=0)
                _field(line, "loss:", path, i, r"\S+")
                mem = _num(_field(line, "memory:", path, i, _NUM + r"(?=GiB)"), path, i, "memory")
                key = "wps:" if re.search(r"\bwps:", line) else "tps:"  # wps: the 2024 name [1b]
                tps = _num(_field(line, key, path, i), path, i, key[:-1])
                m_t = re.search(r"\btflops:\s*(" + _NUM + ")", line)
                m_m = re.search(r"\bmfu:\s*(" + _NUM + r")%", line)
                if tps <= 0:
                    raise PlannerError(f"{path}:{i}: field `tps`: {tps:g} is not a positive throughput", "give the log as torchtitan wrote it")
                if mem <= 0:
                    raise PlannerError(f"{path}:{i}: field `memory`: {mem:g} GiB is not a peak reserved memory (a run "
                                       "holds its weights)", "give the log as torchtitan wrote it")
                if m_m is None:  # both layouts ([1], [1b]) end the line with `mfu: X%`: a line without it is cut off
                    raise PlannerError(f"{path}:{i}: field `mfu` missing: the metrics line is cut off (torchtitan ends "
                                       "every metrics line with `mfu: X%`)", "give the log as torchtitan wrote it (a "
                                       "truncated last line: leave it out)")
                facts.lines.append((i, step, tps))
                facts.memory.append((i, mem))
                if m_t:
                    tflops.append(_num(m_t.group(1), path, i, "tflops"))
                mfu.append(_num(m_m.group(1), path, i, "mfu"))
        else:
            if "using world size:" in line:
                ws = _count(_field(line, "using world size:", path, i, r"\d+"), path, i, "world size")
                sizes = {}
                for key, name in (("data-parallel size:", "dp"), ("tensor-model-parallel size:", "tp"),
                                  ("pipeline-model-parallel size:", "pp"), ("context-parallel size:", "cp")):
                    m = re.search(re.escape(key) + r"\s*(\d+)", line)
                    if m:
                        sizes[name] = _count(m.group(1), path, i, key.rstrip(":"))
                facts.world = (i, ws, sizes)
                continue
            if "memory (MB)" in line and "max reserved" in line:
                vals = {}
                for key in ("allocated", "max allocated", "reserved", "max reserved"):
                    vals[key] = _num(_field(line, f"| {key}:", path, i), path, i, key)
                for key in ("max allocated", "max reserved"):
                    if vals[key] <= 0:
                        raise PlannerError(f"{path}:{i}: field `{key}`: {vals[key]:g} MB is not a peak memory (a run holds "
                                           "its weights)", "give the log as Megatron-LM wrote it")
                facts.mem_ranks.append((i, vals))
                continue
            if "elapsed time per iteration (ms)" in line:
                it = _count(_field(line, "iteration", path, i, r"\d+"), path, i, "iteration", minimum=0)
                # training_log writes " elapsed time per iteration (ms): {:.1f} |" [3]: a value without its
                # closing bar is a line cut off mid-number
                ms = _num(_field(line, "elapsed time per iteration (ms):", path, i, _NUM + r"(?=\s*\|)"), path, i,
                          "elapsed time per iteration (ms)")
                if ms <= 0:
                    raise PlannerError(f"{path}:{i}: field `elapsed time per iteration (ms)`: {ms:g} is not positive",
                                       "give the log as Megatron-LM wrote it")
                m_t = re.search(r"throughput per GPU \(TFLOP/s/GPU\):\s*(" + _NUM + ")", line)
                if m_t:
                    tflops.append(_num(m_t.group(1), path, i, "throughput per GPU (TFLOP/s/GPU)"))
                m_b = re.search(r"global batch size:\s*(\d+)", line)
                if m_b:
                    facts.batch_lines.append((i, _count(m_b.group(1), path, i, "global batch size")))
                facts.lines.append((i, it, ms))
    if not facts.lines:
        raise PlannerError(f"{path}: no complete metrics lines", "give the trainer's stdout log")
    _cut_off_last_line(facts, text)
    if tflops:
        facts.extra["tflops_per_gpu_logged"] = float(np.median(tflops))
    if mfu:
        facts.extra["mfu_logged"] = float(np.median(mfu)) / 100.0
    return facts


def _cut_off_last_line(facts: LogFacts, text: str) -> None:
    """A log that ends without a newline was cut off while a line was being written: if that
    line is one the fit reads (a metrics, memory or world-size line), its last number may be
    cut short (`tps: 6` of `tps: 6,512`): an error naming it, as the README says."""
    if not text or text.endswith("\n"):
        return
    last = len(text.splitlines())
    read = {ln for ln, _, _ in facts.lines} | {ln for ln, _ in facts.mem_ranks} | {ln for ln, _ in facts.batch_lines}
    read |= {x[0] for x in (facts.world, facts.batch) if x is not None}
    if last in read:
        raise PlannerError(f"{facts.path}:{last}: the log ends mid-line (no newline after its last line): the line may "
                           "be cut off mid-number", "give the whole log, or leave the unfinished last line out")


def steady(values: Sequence[float], warmup: int) -> tuple[float, float, tuple[float, float], int]:
    """(median, relative sd, spread, count) of the values after the first `warmup`."""
    v = np.asarray(values[warmup:], dtype=np.float64)
    med = float(np.median(v))
    mad = float(np.median(np.abs(v - med)))
    sd = max(SD_FLOOR, 1.4826 * mad / med)
    return med, sd, (float(v.min() / med - 1.0), float(v.max() / med - 1.0)), int(v.size)


def log_run(path: Path, job: Job, job_label: str, *, warmup: int = WARMUP_LINES) -> MeasuredRun:
    """A MeasuredRun of a training log and the job it ran (errors name the line and field)."""
    facts = parse_log(path)
    path = Path(path)
    settings, plan, _ = resolve(job, where=f"{job_label}: ")
    n = len(facts.lines)
    if n <= warmup:
        raise PlannerError(f"{path}: {n} metrics line(s), all within the {warmup} warm-up line(s) dropped",
                           "give a log with more logged steps (or --warmup 0 if its first line is already steady)")
    # the log's facts against the job's
    if facts.world is not None:
        ln, ws, sizes = facts.world
        if ws != job.gpus:
            fieldname = "device mesh" if facts.fmt == "torchtitan" else "world size"
            raise PlannerError(f"{path}:{ln}: field `{fieldname}`: the log ran on {ws} GPUs, but {job_label} gives gpus {job.gpus}",
                               "give the job (config) this log was written by")
        axes = {"tp": int(plan.tp), "pp": int(plan.pp), "cp": int(plan.cp)}
        if facts.fmt == "megatron":
            axes["dp"] = int(plan.dp)
        for ax, val in axes.items():
            if facts.fmt == "torchtitan":
                logged = sizes.get(ax, 1)
            else:
                if ax not in sizes:
                    continue
                logged = sizes[ax]
            if logged != val:
                raise PlannerError(f"{path}:{ln}: field `{ax}`: the log ran {ax}={logged}, but {job_label} gives {ax}={val}",
                                   "give the job (config) this log was written by")
    gbs, seq = int(plan.gbs), int(plan.seq)
    if facts.batch is not None:
        ln, g, s = facts.batch
        if g != gbs or (s is not None and s != seq):
            raise PlannerError(f"{path}:{ln}: field `global batch size`: the log ran {g} x {s} tokens, but {job_label} "
                               f"gives {gbs} x {seq}", "give the job (config) this log was written by")
    for ln, g in facts.batch_lines:
        if g != gbs:
            raise PlannerError(f"{path}:{ln}: field `global batch size`: {g}, but {job_label} gives global_batch {gbs}",
                               "give the job (config) this log was written by")
    vals = [v for _, _, v in facts.lines]
    med, sd, spread, count = steady(vals, warmup)
    first, last = facts.lines[warmup][0], facts.lines[-1][0]
    label = f"{path}:{first}-{last}"
    run = MeasuredRun(label=label, settings=settings, plan=plan, step_sd=sd, steps=count, warmup_dropped=warmup,
                      notes=[f"{facts.fmt} log, {warmup} warm-up line(s) dropped (first logged window: initialisation, "
                             "communicator set-up, compilation, allocator growth)"])
    if facts.fmt == "torchtitan":
        run.tokens_per_s_per_gpu = med
        run.step_s = gbs * seq / (med * job.gpus)
        if spread[0] <= -1.0:  # min / median - 1 rounds to -1 (a ratio under about 1e-16): 1 + spread[0] is 0 below
            ln, _, v = min(facts.lines[warmup:], key=lambda x: x[2])
            raise PlannerError(f"{path}:{ln}: field `tps`: {v:g} tokens/s per GPU against the log's median {med:g}: "
                               "a step time some 1e16 times the median's is not a measurement", "give the log as torchtitan wrote it")
        run.spread = (-spread[1] / (1 + spread[1]), -spread[0] / (1 + spread[0]))  # of the step time
        mem = [m for _, m in facts.memory][warmup:]
        run.reserved_bytes = float(np.median(mem)) * GiB
    else:
        run.step_s = med / 1e3
        run.spread = spread
        run.tokens_per_s_per_gpu = gbs * seq / (run.step_s * job.gpus)
        if facts.mem_ranks:
            run.allocated_bytes = max(v["max allocated"] for _, v in facts.mem_ranks) * MiB
            run.reserved_bytes = max(v["max reserved"] for _, v in facts.mem_ranks) * MiB
            run.notes.append(f"memory: the largest of {len(facts.mem_ranks)} report_memory line(s) (most loaded stage)")
            run.memory_source = f"{path}:" + ",".join(str(ln) for ln, _ in facts.mem_ranks)
    for k, v in facts.extra.items():
        run.notes.append(f"{k} {v:.4g} (the trainer's own FLOP convention; not fitted)")
    step_field = "tps" if facts.fmt == "torchtitan" else "elapsed time per iteration (ms)"
    mem_field = "memory" if facts.fmt == "torchtitan" else "max allocated / max reserved"
    _physical(run, label, {"step": step_field, "memory": mem_field})
    return run


# ============================================================================ the model
def _var(name: str, value):
    return np.log1p(value) if RUN_PARAMETERS[name].transform == "log1p" else np.log(value)


def _val(name: str, var):
    return np.expm1(var) if RUN_PARAMETERS[name].transform == "log1p" else np.exp(var)


def prior_value(name: str, run: MeasuredRun) -> float:
    """The uncalibrated value of a knob for this run (the stack's figure for stack knobs)."""
    if name in STACK_PARAMETERS:
        sec, attr = STACK_PARAMETERS[name]
        return float(getattr(getattr(run.settings.stack, sec), attr))
    return 1.0


def _repeat(plan: PlanArrays, n: int) -> PlanArrays:
    return PlanArrays(**{k: np.full(n, int(v)) for k, v in vars(plan).items()})


def predict_many(run: MeasuredRun, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Predicted step time and peak memory of one run at P candidate knob values (arrays of
    length P per knob; knobs not given keep their uncalibrated value): one evaluate call."""
    n = len(next(iter(values.values()))) if values else 1
    knobs = RunKnobs(**{k: np.asarray(v, dtype=np.float64) for k, v in values.items()})
    if run.settings.comm_memo is None:  # the same collectives, priced again at every candidate
        run.settings = replace(run.settings, comm_memo={})
    est = evaluate(replace(run.settings, knobs=knobs), _repeat(run.plan, n))
    mem = est.memory
    reserved = np.broadcast_to(mem.total - outside_bytes(mem), (n,))
    return {"step_time": np.broadcast_to(est.time.total, (n,)), "max_reserved": reserved,
            "max_allocated": np.broadcast_to(reserved - mem.allocator_slack, (n,))}


def _batches(runs: list[MeasuredRun], idx) -> list[list[int]]:
    """The runs `idx` in groups whose Settings are equal (model, hardware, GPU count, stack,
    conventions, profile; only the plans differ), in order of first appearance: one evaluate
    call prices a group's plans together (`predict_batch`). Bucketed by a few fields first, so
    that grouping 2,000 records compares each with the few groups of its bucket, not all."""
    buckets: dict[tuple, list[tuple[Settings, list[int]]]] = {}
    order: list[list[int]] = []
    for i in idx:
        s = _priced(runs[i].settings)
        key = (s.model.name, s.hardware.name, s.gpus, s.stack_name, s.bpp_name, s.calibration_path)
        for rep, members in buckets.setdefault(key, []):
            if rep == s:
                members.append(i)
                break
        else:
            buckets[key].append((s, [i]))
            order.append(buckets[key][-1][1])
    return order


def _priced(s: Settings) -> Settings:
    """The Settings as the cost models read them: without the model's free-text description
    and the file it was read from (a runs file's records each get a model file named for the
    record, `shape of run record <id>`, identical in every figure)."""
    return replace(s, model=s.model.model_copy(update={"description": ""}), model_file=None, model_sha256=None)


def predict_batch(runs: list[MeasuredRun], members: list[int], values: dict[str, np.ndarray]) -> dict[int, dict[str, np.ndarray]]:
    """`predict_many` of several runs with equal Settings (`_batches`) in one evaluate call:
    their plans, each repeated for the P candidate knob values, side by side (issue 24: one
    call per run made 2,000 records take minutes). Every element is priced as it would be
    alone (the cost models are element-wise; comm.distinct prices each distinct collective
    once); a group of one is `predict_many` itself."""
    if len(members) == 1:
        return {members[0]: predict_many(runs[members[0]], values)}
    n = len(next(iter(values.values()))) if values else 1
    m = len(members)
    fields = vars(runs[members[0]].plan)
    plan = PlanArrays(**{k: np.repeat(np.array([int(getattr(runs[i].plan, k)) for i in members], dtype=np.int64), n)
                         for k in fields})
    knobs = RunKnobs(**{k: np.tile(np.asarray(v, dtype=np.float64), m) for k, v in values.items()})
    est = evaluate(replace(runs[members[0]].settings, knobs=knobs, comm_memo=None), plan)
    mem = est.memory
    total = n * m
    step = np.broadcast_to(est.time.total, (total,)).reshape(m, n)
    reserved = np.broadcast_to(mem.total - outside_bytes(mem), (total,))
    allocated = np.broadcast_to(reserved - mem.allocator_slack, (total,)).reshape(m, n)
    reserved = reserved.reshape(m, n)
    return {i: {"step_time": step[c], "max_reserved": reserved[c], "max_allocated": allocated[c]}
            for c, i in enumerate(members)}


@dataclass
class _Rows:
    run: list[int]
    quantity: list[str]
    measured: np.ndarray
    sd: np.ndarray


def _rows(runs: list[MeasuredRun]) -> _Rows:
    r, q, m, s = [], [], [], []
    for i, run in enumerate(runs):
        for quantity, val, sd in run.measured():
            r.append(i)
            q.append(quantity)
            m.append(val)
            s.append(sd)
    return _Rows(r, q, np.array(m, dtype=np.float64), np.array(s, dtype=np.float64))


def _ln_pred(runs, rows: _Rows, names: list[str], base: dict[str, float], thetas: np.ndarray) -> np.ndarray:
    """ln predicted of every row at each candidate theta (P x k, in the fit variables of
    `names`; other knobs at `base`): (P, rows)."""
    P = thetas.shape[0]
    out = np.empty((P, len(rows.run)))
    values = {k: np.full(P, base[k]) for k in base}
    for c, k in enumerate(names):
        values[k] = _val(k, thetas[:, c])
    pred: dict[int, dict[str, np.ndarray]] = {}
    for members in _batches(runs, dict.fromkeys(rows.run)):
        pred.update(predict_batch(runs, members, values))
    for j, (i, q) in enumerate(zip(rows.run, rows.quantity)):
        out[:, j] = np.log(pred[i][q])
    return out


def _jacobian(runs, rows, names, base, theta):
    """(ln predicted at theta, d ln predicted / d theta): forward differences, one evaluate per run."""
    k = len(names)
    pts = np.repeat(theta[None, :], k + 1, axis=0)
    for c in range(k):
        pts[c + 1, c] += FD_STEP
    lp = _ln_pred(runs, rows, names, base, pts)
    return lp[0], ((lp[1:] - lp[0]) / FD_STEP).T


def _separation(cols: np.ndarray) -> float:
    """Smallest / largest singular value of the column-normalised matrix (1: orthogonal)."""
    norm = np.linalg.norm(cols, axis=0)
    sv = np.linalg.svd(cols / norm, compute_uv=False)
    return float(sv[-1] / sv[0]) if sv[0] > 0 else 0.0


def _independent(J: np.ndarray, sens: np.ndarray) -> int:
    """How many independent measurements the rows make of the knobs they are sensitive to:
    the singular values of the column-normalised Jacobian within SEPARATION_MIN of the largest."""
    cols = np.flatnonzero(sens >= SENSITIVITY_MIN)
    if cols.size == 0:
        return 0
    sub = J[:, cols] / np.linalg.norm(J[:, cols], axis=0)
    sv = np.linalg.svd(sub, compute_uv=False)
    return int(np.sum(sv >= SEPARATION_MIN * sv[0]))


def _describe(runs, rows, j) -> str:
    return f"{rows.quantity[j].replace('_', ' ')} of {runs[rows.run[j]].label}"


@dataclass
class FitResult:
    section: RunCalibration
    runs: list[MeasuredRun]
    free: list[str]
    values: dict[str, float]


def fit_runs(runs: list[MeasuredRun], inputs: list[RunInputFile], *, free: Optional[list[str]] = None,
             baseline=None, created: Optional[datetime] = None) -> FitResult:
    """Fit the knobs to the runs (module docstring); errors name what to add."""
    from scipy.optimize import least_squares

    if not runs:
        raise PlannerError("no measured runs given", "give a runs file, or a training log with --job")
    hws = sorted({r.hardware for r in runs})
    if len(hws) > 1:
        by = "; ".join(f"{h}: {', '.join(r.label for r in runs if r.hardware == h)}" for h in hws)
        raise PlannerError(f"the runs use different hardware ({by}): one run calibration describes one kind of GPU",
                           "calibrate each hardware into its own profile (-o)")
    stacks = sorted({r.stack for r in runs})
    rows = _rows(runs)
    # priors; a stack knob whose stacks disagree on its uncalibrated value cannot be shared
    prior: dict[str, float] = {}
    for k in RUN_PARAMETERS:
        vals = {prior_value(k, r) for r in runs}
        if len(vals) == 1:
            prior[k] = vals.pop()
    if free is not None:
        bad = [k for k in free if k not in RUN_PARAMETERS]
        if bad:
            raise PlannerError(f"--fit: unknown parameter(s) {', '.join(bad)}", f"valid: {', '.join(RUN_PARAMETERS)}")
        shared = [k for k in free if k not in prior]
        if shared:
            raise PlannerError(f"--fit {shared[0]}: the runs' stacks ({', '.join(stacks)}) have different uncalibrated "
                               "values of it, so one fitted value cannot stand for them", "calibrate one stack at a time")
    cand = [k for k in RUN_PARAMETERS if k in prior]
    theta0_all = np.array([_var(k, prior[k]) for k in cand])
    lp0, J_all = _jacobian(runs, rows, cand, {}, theta0_all)
    sens = np.max(np.abs(J_all), axis=0)
    n_ind = _independent(J_all, sens)
    if free is None:
        chosen: list[int] = []
        for c, k in enumerate(cand):
            if sens[c] < SENSITIVITY_MIN:
                continue
            trial = chosen + [c]
            if len(trial) <= len(rows.run) and _separation(J_all[:, trial]) >= SEPARATION_MIN:
                chosen = trial
        if not chosen:
            raise PlannerError("the inputs measure none of the run-calibration knobs",
                               f"add {ADD_HINT['gemm_efficiency_scale']}")
        free = [cand[c] for c in chosen]
    else:
        free = list(dict.fromkeys(free))
        idx = [cand.index(k) for k in free]
        meas = ", ".join(_describe(runs, rows, j) for j in range(len(rows.run)))
        if len(free) > n_ind:
            raise PlannerError(f"--fit asks for {len(free)} free parameter(s) ({', '.join(free)}) but the inputs give "
                               f"{n_ind} independent measurement(s) ({meas})",
                               "fit fewer parameters, or add: " + "; ".join(f"for {k}, {ADD_HINT[k]}" for k in free[1:]))
        for c, k in zip(idx, free):
            if sens[c] < SENSITIVITY_MIN:
                raise PlannerError(f"--fit {k}: no measurement depends on it ({meas})", f"add {ADD_HINT[k]}")
        for n in range(2, len(idx) + 1):
            if _separation(J_all[:, idx[:n]]) < SEPARATION_MIN:
                raise PlannerError(f"--fit {free[n - 1]}: the measurements do not tell it apart from "
                                   f"{', '.join(free[:n - 1])} ({meas})", f"add {ADD_HINT[free[n - 1]]}")
    fcols = [cand.index(k) for k in free]
    used = np.flatnonzero(np.max(np.abs(J_all[:, fcols]), axis=1) > 1e-9)  # rows a free knob moves at all
    base: dict[str, float] = {}  # knobs not free keep their uncalibrated value
    x0 = theta0_all[fcols]
    lo = np.array([_var(k, RUN_PARAMETERS[k].lower) for k in free])
    hi = np.array([_var(k, RUN_PARAMETERS[k].upper) for k in free])
    ln_meas = np.log(rows.measured[used])
    w = 1.0 / rows.sd[used]
    sub = _Rows([rows.run[j] for j in used], [rows.quantity[j] for j in used], rows.measured[used], rows.sd[used])
    cache: dict[bytes, tuple] = {}

    def both(theta):
        key = theta.tobytes()
        if key not in cache:
            lp, J = _jacobian(runs, sub, free, base, theta)
            r = np.concatenate([(lp - ln_meas) * w, (theta - x0) / PRIOR_SD])
            Jw = np.vstack([J * w[:, None], np.eye(len(free)) / PRIOR_SD])
            cache[key] = (r, Jw, lp)
        return cache[key]

    # start from the Gauss-Newton step of the linearised problem at the prior (the Jacobian
    # already taken): the fit then converges in an iteration or two
    Jw0 = np.vstack([J_all[used][:, fcols] * w[:, None], np.eye(len(free)) / PRIOR_SD])
    r0 = np.concatenate([(lp0[used] - ln_meas) * w, np.zeros(len(free))])
    step = np.linalg.lstsq(Jw0, -r0, rcond=None)[0]
    start = np.clip(x0 + step, lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
    res = least_squares(lambda t: both(t)[0], start, jac=lambda t: both(t)[1], bounds=(lo, hi), method="trf")
    theta = res.x
    _, Jw, lp_fit = both(theta)
    try:
        cov = np.linalg.inv(Jw.T @ Jw)
        sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        sd = np.full(len(free), np.nan)
    values = {k: float(_val(k, theta[c])) for c, k in enumerate(free)}
    params = {}
    for c, k in enumerate(free):
        spec = RUN_PARAMETERS[k]
        v = min(max(values[k], spec.lower), spec.upper)
        values[k] = v
        s = float(sd[c]) if np.isfinite(sd[c]) else None
        freed_by = [_describe(runs, rows, j) for j in range(len(rows.run)) if abs(J_all[j, cand.index(k)]) >= SENSITIVITY_MIN]
        params[k] = RunParameterFit(
            value=_r(v), prior=_r(prior[k]), lower=spec.lower, upper=spec.upper,
            sd_fit_variable=None if s is None else _r(s),
            low_1sigma=None if s is None else _r(max(float(_val(k, theta[c] - s)), spec.lower)),
            high_1sigma=None if s is None else _r(min(float(_val(k, theta[c] + s)), spec.upper)),
            at_bound=bool(min(abs(theta[c] - lo[c]), abs(theta[c] - hi[c])) < 1e-3), freed_by=freed_by)
    if len(used) == len(rows.run):  # every row was fitted: the fit's own last evaluation
        after = np.exp(lp_fit)
    else:
        after = np.exp(_ln_pred(runs, rows, free, base, theta[None, :])[0])
    before = np.exp(lp0)
    fitted_rows = set(used.tolist())
    meas = []
    for j in range(len(rows.run)):
        run = runs[rows.run[j]]
        q = rows.quantity[j]
        meas.append(RunMeasurement(
            source=run.label if q == "step_time" or run.memory_source is None else run.memory_source, quantity=q, unit=QUANTITY_UNIT[q], measured=_r(rows.measured[j], 9),
            sd_rel=_r(rows.sd[j]), predicted_before=_r(before[j], 9), predicted_after=_r(after[j], 9),
            residual_before=_r(before[j] / rows.measured[j] - 1.0), residual_after=_r(after[j] / rows.measured[j] - 1.0),
            fitted=j in fitted_rows, stack=run.stack, hardware=run.hardware, gpus=run.settings.gpus,
            mesh=_mesh(run.plan), steps=run.steps if q == "step_time" else None,
            warmup_dropped=run.warmup_dropped, spread_rel=[_r(x) for x in run.spread] if (run.spread and q == "step_time") else None,
            tokens_per_s_per_gpu=_r(run.tokens_per_s_per_gpu, 6) if (run.tokens_per_s_per_gpu and q == "step_time") else None,
            notes=list(run.notes) if q == "step_time" or "step_time" not in [x[0] for x in run.measured()] else []))
    section = RunCalibration(
        hardware=hws[0], stacks=stacks, created=created or datetime.now(timezone.utc).replace(microsecond=0),
        parameters=params,
        fit=RunFitSettings(prior_sd=_r(PRIOR_SD), free=free, independent_measurements=max(n_ind, len(free)),
                           cost=_r(float(res.cost), 9), baseline=baseline or {"nccl": None, "gemm": None}),
        inputs=inputs, measurements=meas)
    return FitResult(section=section, runs=runs, free=free, values=values)


def _r(x: float, nd: int = 6) -> float:
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{nd}g}")


def _mesh(plan: PlanArrays) -> str:
    s = f"TP{int(plan.tp)} PP{int(plan.pp)} DP{int(plan.dp)}"
    if int(plan.cp) > 1:
        s += f" CP{int(plan.cp)}"
    if int(plan.vpp) > 1:
        s += f" v{int(plan.vpp)}"
    return s


# ============================================================================ the command
def is_runs_file(path: Path) -> bool:
    """A YAML list of mappings (validate's runs file), as opposed to a training log."""
    if Path(path).suffix.lower() not in (".yaml", ".yml", ".json"):
        return False
    head = _first_node(Path(path))
    if head is not None and (head == "-" or head.startswith(("- ", "-\t", "["))):
        return True  # a top-level sequence: load_runs reads (and checks) it once, not twice (2,000 records: a minute)
    data = read_yaml(Path(path))
    return isinstance(data, list)


def _first_node(path: Path) -> Optional[str]:
    """The first line of a YAML file that is not blank, a comment, a directive or `---`
    (None when the first 64 KiB hold none)."""
    try:
        with open(path, "rb") as f:
            chunk = f.read(65536).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in chunk.splitlines():
        s = line.strip()
        if s and not s.startswith(("#", "%")) and s != "---":
            return s
    return None


def _config_job(cfg: Path, log: Path, *, fmt: Optional[str], model: Optional[str], gpus: Optional[int],
                hardware: Optional[str]) -> tuple[dict, list[str]]:
    """Job fields of the trainer config a log ran (planner/trainers), and what was assumed. A
    config that leaves the GPU count to the launcher (torchtitan's data_parallel_shard_degree
    -1) takes the log's world size (its mesh / `using world size` line), listed as assumed."""
    from ..trainers import default_trainer_seq, load_trainer_config

    try:
        tc = load_trainer_config(cfg, fmt=fmt, model=model, gpus=gpus, hardware=hardware)
        default_trainer_seq(tc.job, tc.assumed)
        return tc.job, [str(x) for x in tc.assumed]  # the reader's records as their lines (plain text to dump)
    except PlannerError as first:
        facts = parse_log(log)
        if gpus is not None or facts.world is None:
            raise
        ln, ws, _ = facts.world
        try:
            tc = load_trainer_config(cfg, fmt=fmt, model=model, gpus=ws, hardware=hardware)
        except PlannerError as e:
            raise PlannerError(f"{e.message} (with gpus {ws} from {log}:{ln}; without it: {first.message})", e.hint) from None
        default_trainer_seq(tc.job, tc.assumed)
        return tc.job, [str(x) for x in tc.assumed] + [f"gpus={ws} (the log's world size, {log}:{ln})"]


def calibrate_inputs(inputs: list[Path], jobs: list[Path], *, output: Optional[Path] = None, hardware: Optional[str] = None,
                     free: Optional[list[str]] = None, warmup: int = WARMUP_LINES, configs: Sequence[Path] = (),
                     config_format: Optional[str] = None, model: Optional[str] = None,
                     gpus: Optional[int] = None) -> FitResult:
    """The whole of `planner calibrate run`: read the inputs, resolve them against the profile
    at `output` (its nccl and gemm sections apply; its run section does not), fit. Each log
    takes the job it ran from `jobs` (planner job files) or `configs` (trainer configs read
    by planner/trainers: torchtitan TOML, Megatron-LM launch script / arguments), paired in
    order, one serving every log."""
    if output is not None:
        _check_name(output)  # before the fit, not after it
    calibration = str(output) if output is not None and _is_file(output) else None
    if calibration is not None:
        from ..profile import load_profile

        prof = load_profile(calibration)
    else:
        prof = None
    runs: list[MeasuredRun] = []
    files: list[RunInputFile] = []
    logs = []
    for p in inputs:
        p = Path(p)
        if not _is_file(p):
            _read_bytes(p, "give run-record YAML files and training logs")  # names a folder, a name too long
            raise PlannerError(f"{p}: no such file", "give run-record YAML files and training logs")
        if is_runs_file(p):
            runs.extend(record_runs(p, calibration))
            files.append(RunInputFile(name=str(p), sha256=sha256_file(p), kind="run-records"))
        else:
            logs.append(p)
    if jobs and configs:
        raise PlannerError("give the logs' jobs as --job files or as --config files, not both",
                           "e.g. --config llama3_8b.toml, or --job job.yaml")
    given = list(jobs) or list(configs)
    opt = "--job" if jobs else "--config"
    if logs and not given:
        raise PlannerError(f"{logs[0]}: a training log needs the job it ran (--config TRAINER_CONFIG or --job JOB.yaml)",
                           "give --config (torchtitan TOML, Megatron launch script) or --job once per log, in the "
                           "same order (one serves every log)")
    if given and len(given) not in (1, len(logs)):
        raise PlannerError(f"{len(given)} {opt} files for {len(logs)} log(s)", f"give one {opt} per log, or one for all")
    for n, log in enumerate(logs):
        jp = Path(given[0] if len(given) == 1 else given[n])
        if not _is_file(jp):
            _read_bytes(jp, "give the job file or trainer config the log ran")
            raise PlannerError(f"{jp}: no such file", "give the job file or trainer config the log ran")
        notes: list[str] = []
        if configs:
            data, notes = _config_job(jp, log, fmt=config_format, model=model, gpus=gpus, hardware=hardware)
            kind = "trainer-config"
        else:
            raw = read_yaml(jp)
            if not isinstance(raw, dict):
                raise PlannerError(f"{jp}: expected a mapping of job fields", "see `planner schema` or the README's job files")
            data = dict(raw)
            kind = "job"
            if hardware is not None:
                data["hardware"] = hardware
        if "hardware" not in data:
            raise PlannerError(f"{jp}: does not say which GPUs ran {log} (no hardware)",
                               "pass --hardware (or set hardware: in the job file)")
        data["calibration"] = calibration
        job = validate(Job, data, str(jp))
        fmt = parse_log(log).fmt
        run = log_run(log, job, str(jp), warmup=warmup)
        run.notes.extend(notes)
        runs.append(run)
        files.append(RunInputFile(name=str(log), sha256=sha256_file(log), kind=f"{fmt}-log"))
        files.append(RunInputFile(name=str(jp), sha256=sha256_file(jp), kind=kind))
    # the knobs are fitted from the uncalibrated model over the profile's nccl and gemm sections
    from ..profile import IDENTITY_KNOBS

    runs = [replace(r, settings=replace(r.settings, knobs=IDENTITY_KNOBS)) for r in runs]
    if not runs:
        raise PlannerError("no inputs to calibrate on", "give a runs file or a training log with --job")
    return fit_runs(runs, files, free=free, baseline=baseline_digests(prof))


# ============================================================================ leave-one-out
def leave_one_out(records, base_dir: Path, label: str = "runs file", min_records: int = 4) -> dict:
    """For each source group with at least `min_records` records: calibrate on each record in
    turn (its step time; its memory where published) and predict the group's other records
    of the same stack and hardware (the calibration's scope); the tokens/s error before and
    after. Returns {group: {records, pairs, before/after medians, skipped}} with medians of the
    tokens/s error (|error| and signed) over the (calibration, prediction) pairs."""
    groups: dict[str, list] = {}
    for rec in records:
        if rec.source_group:
            groups.setdefault(rec.source_group, []).append(rec)
    out = {}
    with tempfile.TemporaryDirectory(prefix="planner-loo-") as d:
        for g, recs in sorted(groups.items()):
            if len(recs) < min_records:
                continue
            runs, skipped = [], []
            for rec in recs:
                try:
                    run = record_run(rec, Path(d), base_dir, label)
                except PlannerError as e:
                    skipped.append(f"{rec.id}: {e.message}")
                    continue
                if run.step_s is None:
                    skipped.append(f"{rec.id}: no published tokens/s or iteration time")
                else:
                    runs.append(run)
            out[g] = _loo_group(runs, skipped)
    return out


def _loo_group(runs: list[MeasuredRun], skipped: list[str]) -> dict:
    fits = []
    for run in runs:
        try:
            fits.append(fit_runs([run], [RunInputFile(name="loo", sha256="0" * 64, kind="run-records")]).values)
        except PlannerError as e:
            fits.append(None)
            skipped.append(f"{run.label}: {e.message}")
    before, after = [], []
    pairs = 0
    for j, target in enumerate(runs):
        cal = [i for i, r in enumerate(runs) if i != j and fits[i] is not None
               and r.stack == target.stack and r.hardware == target.hardware]
        if not cal:
            continue
        names = sorted({k for i in cal for k in fits[i] if RUN_PARAMETERS[k].kind == "time"})
        # one evaluation: the uncalibrated model first, then each calibration's knobs
        values = {k: np.array([prior_value(k, target)] + [fits[i].get(k, prior_value(k, target)) for i in cal])
                  for k in names}
        pred = predict_many(target, values)["step_time"]
        base, step = pred[0], pred[1:]
        # tokens/s error = predicted tokens/s / measured - 1 = measured step / predicted step - 1
        before.extend([target.step_s / base - 1.0] * len(cal))
        after.extend((target.step_s / step - 1.0).tolist())
        pairs += len(cal)
    b, a = np.abs(np.array(before)), np.abs(np.array(after))
    return {"records": len(runs), "pairs": pairs,
            "before_median_abs_error": float(np.median(b)) if b.size else None,
            "after_median_abs_error": float(np.median(a)) if a.size else None,
            "before_median_error": float(np.median(before)) if b.size else None,
            "after_median_error": float(np.median(after)) if a.size else None,
            "skipped": skipped}


__all__ = [
    "FitResult", "LogFacts", "MeasuredRun", "calibrate_inputs", "fit_runs", "leave_one_out", "log_run", "parse_log",
    "predict_many", "record_run", "record_runs", "steady",
]
