"""The calibration profile: what was measured, where and when, and the fitted figures.

Plain data that the cost models receive: `load_profile(path)` reads and validates a
profile YAML (pydantic, unknown keys are errors) into these models. planner/calibrate/
measures, parses and fits, and writes them (`planner calibrate nccl LOG... -o
profile.yaml`, `planner calibrate gemm ... -o profile.yaml`: planner/calibrate/profile.py);
nothing here imports planner/calibrate/. The time model (step.py) asks a profile:

    prof = load_profile("profile.yaml")
    hit = prof.bandwidth_and_latency("all_reduce", "inter-node", 16)
    if hit is None:               # scope not calibrated: use the hardware defaults
        ...
    else:
        busbw, alpha = hit        # bytes/s, seconds (the bulk-transfer regime)

    prof.collective_time("all_reduce", "inter-node", 16, size_bytes)   # seconds, arrays ok

The compute model receives the `gemm` section (`GemmCalibration`, measured GEMM rows):
compute.forward_gemm_times(..., prof.gemm) and compute.calibrated_gemm_time price any
shape from them (seconds, arrays ok); without the section the uncalibrated model applies.

The `run` section (`RunCalibration`; planner/calibrate/run.py fits it to measured training
runs) holds the run-calibration knobs of RUN_PARAMETERS, and the stacks and hardware they
were fitted for; `run_knobs(profile, stack, hardware)` gives the `RunKnobs` the cost models
read (Settings.knobs, set by plan.resolve): the fitted values inside that scope, the
identity (the uncalibrated model) outside it or after the nccl / gemm sections it was fitted
over changed (`baseline` digests).

Units: SI in code (bytes, seconds, bytes/s). The YAML uses human units only where the key
says so: `latency_us` (microseconds), `busbw_GBps` (1e9 bytes/s), `time_us`.

Meaning of a fitted group (planner/calibrate/nccl.py fits it; its docstring says how):
    t(S) = min_k (latency_k + S * factor(n) / busbw_k)
S is the nccl-tests `size` column (the bytes algbw counts: the per-rank buffer for
all_reduce, the whole gathered array for all_gather/reduce_scatter) and factor(n) the
nccl-tests bus bandwidth factor [1] (2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter and alltoall, 1 for broadcast and sendrecv). `regimes` are sorted by
bandwidth; the last one is the bulk-transfer regime, whose (busbw, latency) is what
`bandwidth_and_latency` returns. It is valid from its `from_bytes` up; below that the
full envelope (`collective_time`) is the better estimate, and below the group's
`fit_min_bytes` neither was fitted (extrapolation).
The bus bandwidth factors (`BUSBW_FACTORS`, `busbw_factor`) and the envelope
(`envelope_time`) are defined here, with the figures they give meaning to; the fit uses
the same ones.

Lookups match (collective, scope, ranks) exactly: bus bandwidth is nearly independent of
n for ring algorithms [1] but latency is not, so the profile does not extrapolate across
rank counts; the caller decides what to do with an uncovered one (the defaults).

References
[1] NVIDIA nccl-tests, doc/PERFORMANCE.md (algbw, busbw and the bus bandwidth factors).
[2] NVIDIA nccl-tests, src/<collective>.cu `<Coll>GetBw()` (busbw factor per test, e.g.
    sendrecv factor 1).
[3] NVIDIA NCCL, src/graph/tuning.cc `ncclTopoGetAlgoTime()`: time = latency +
    size / bandwidth per (algorithm, protocol); the enqueue picks the least time.
[4] R. W. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko CS-2",
    Parallel Computing 20(3), 1994: t(n) = t0 + n / r_inf.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Callable, Literal, Optional

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from .catalog import read_yaml, validate
from .errors import PlannerError
from . import files
from .schema import Bool, Real, _not_bool

Strict = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)  # .inf / .nan are errors
# Integers of a profile (sizes in bytes, counts, line numbers) are at most 2**53: exact in a
# float64, in which the cost models use them (16 GiB, the largest nccl-tests size commonly
# swept, is 2**34). A boolean is no integer (schema._not_bool).
Int = Annotated[int, Field(le=2**53), BeforeValidator(_not_bool)]
Scope = Literal["intra-node", "inter-node"]
SCOPES = ("intra-node", "inter-node")
MODEL_FORMULA = "t(S) = min_k(latency_k + S*factor(n)/busbw_k)"
# soft_l1 f_scale of the fit: relative residual below which the loss is quadratic
# (planner/calibrate/nccl.py, whose docstring says why 2 %)
ROBUST_SCALE = 0.02
# Name of the GEMM interpolation scheme (compute.py, "GEMMs from measurements"), recorded in
# each profile so that a later, different scheme cannot silently reinterpret old rows.
INTERPOLATION = "shepard-k4-log-mnk-x-wave"


# --------------------------------------------------------------------- bus bandwidth factors
def _ring(n):
    n = np.asarray(n, dtype=np.float64)
    return (n - 1.0) / n


def _allreduce(n):
    n = np.asarray(n, dtype=np.float64)
    return 2.0 * (n - 1.0) / n


def _one(n):
    return np.ones_like(np.asarray(n, dtype=np.float64))


# busbw = algbw * factor(n), n = total ranks. nccl-tests doc/PERFORMANCE.md and
# src/<coll>.cu GetBw() [1, 2]; tests/data/nccl_busbw_factors.yaml holds the same table.
BUSBW_FACTORS: dict[str, Callable] = {
    "all_reduce": _allreduce,  # 2(n-1)/n, algbw bytes = per-rank buffer
    "reduce_scatter": _ring,  # (n-1)/n, algbw bytes = count * typesize * n
    "all_gather": _ring,  # (n-1)/n, algbw bytes = count * typesize * n
    "alltoall": _ring,  # (n-1)/n
    "gather": _ring,  # (n-1)/n
    "scatter": _ring,  # (n-1)/n
    "broadcast": _one,  # 1
    "reduce": _one,  # 1
    "sendrecv": _one,  # 1 (src/sendrecv.cu)
}


def busbw_factor(collective: str, n):
    """factor(n) with busbw = algbw * factor(n) [1, 2]; arrays or scalars."""
    return BUSBW_FACTORS[collective](n)


def envelope_time(lines, s_eff):
    """min_k (latency_k + s_eff / busbw_k) for arrays of effective bytes [3, 4]."""
    s_eff = np.asarray(s_eff, dtype=np.float64)
    t = np.full(s_eff.shape, np.inf)
    for ln in lines:
        t = np.minimum(t, ln.latency + s_eff / ln.busbw)
    return t


# ============================================================================= nccl section
def _check_collective(c: str) -> str:
    if c not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {c!r}; valid: {', '.join(BUSBW_FACTORS)}")
    return c


class SourceFile(BaseModel):
    """One log that went into the profile."""

    model_config = Strict
    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    lines: Int = Field(ge=0)
    provenance: list[str] = Field(default_factory=list, description="'# source:' notes found in the file")
    unread_lines: list[Int] = Field(default_factory=list, description="line numbers reported as warnings")


class Measurement(BaseModel):
    """One sweep (table) of a log: what the log and the options said, and the points."""

    model_config = Strict
    source: str
    first_line: Int = Field(gt=0)
    collective: str
    collective_from: str
    ranks: Int = Field(gt=0)
    ranks_from: str
    nodes: Int = Field(gt=0)
    nodes_from: str
    scope: Scope
    scope_from: str
    hosts: list[str] = Field(default_factory=list, description="host names of the Rank lines seen")
    gpus: list[str] = Field(default_factory=list, description="device names of the Rank lines seen")
    nccl_version: Optional[str] = None
    dtypes: list[str] = Field(default_factory=list)
    redops: list[str] = Field(default_factory=list)
    min_time_us: Real = Field(gt=0, description="smallest measured time of the sweep (not fitted)")
    size_bytes: list[Int]
    time_us: list[Real]
    busbw_GBps: list[Optional[Real]]
    in_place: list[Bool]

    @model_validator(mode="after")
    def _check(self) -> "Measurement":
        _check_collective(self.collective)
        n = len(self.size_bytes)
        if not (len(self.time_us) == len(self.busbw_GBps) == len(self.in_place) == n) or n == 0:
            raise ValueError("size_bytes, time_us, busbw_GBps and in_place must be non-empty lists of equal length")
        return self


class FittedRegime(BaseModel):
    """One alpha-beta line of the envelope."""

    model_config = Strict
    latency_us: Real = Field(ge=0)
    busbw_GBps: Real = Field(gt=0)
    from_bytes: Int = Field(ge=0, description="smallest measured size where this line is the cheaper one")
    to_bytes: Int = Field(ge=0)

    @property
    def latency(self) -> float:
        return self.latency_us * 1e-6

    @property
    def busbw(self) -> float:
        return self.busbw_GBps * 1e9


class Residuals(BaseModel):
    """|busbw_model / busbw_measured - 1| over the measured points at or above min_size_bytes."""

    model_config = Strict
    min_size_bytes: Int = Field(ge=0)
    points: Int = Field(ge=0)
    busbw_median_abs_rel_err: Optional[Real] = Field(default=None, ge=0)
    busbw_max_abs_rel_err: Optional[Real] = Field(default=None, ge=0)


class CommGroup(BaseModel):
    """The fit of one (collective, scope, ranks)."""

    model_config = Strict
    collective: str
    scope: Scope
    ranks: Int = Field(gt=0)
    nodes: list[Int] = Field(min_length=1, description="node counts of the sweeps pooled here")
    fit_min_bytes: Int = Field(ge=0)
    fit_max_bytes: Int = Field(gt=0)
    points: Int = Field(gt=1, description="measured points used by the fit")
    regimes: list[FittedRegime] = Field(min_length=1, max_length=3)
    residuals: Residuals

    @model_validator(mode="after")
    def _check(self) -> "CommGroup":
        _check_collective(self.collective)
        bws = [r.busbw_GBps for r in self.regimes]
        if bws != sorted(bws):
            raise ValueError("regimes must be sorted by busbw_GBps (the bulk regime last)")
        return self

    @property
    def bulk(self) -> FittedRegime:
        return self.regimes[-1]

    @property
    def bandwidth(self) -> float:
        """Bus bandwidth of the bulk-transfer regime, bytes/s."""
        return self.bulk.busbw

    @property
    def latency(self) -> float:
        """Latency (alpha) of the bulk-transfer regime, seconds."""
        return self.bulk.latency

    def time(self, size_bytes):
        """Seconds for one operation of nccl-tests size S (bytes), scalar or array."""
        s_eff = busbw_factor(self.collective, self.ranks) * np.asarray(size_bytes, dtype=np.float64)
        return envelope_time(self.regimes, s_eff)


class FitSettings(BaseModel):
    model_config = Strict
    model: Literal["t(S) = min_k(latency_k + S*factor(n)/busbw_k)"] = MODEL_FORMULA
    residual: Literal["relative time error"] = "relative time error"
    loss: Literal["soft_l1"] = "soft_l1"
    f_scale: Real = Field(default=ROBUST_SCALE, gt=0)
    min_size_bytes: Int = Field(ge=0)


class NcclCalibration(BaseModel):
    """The nccl-tests part of a profile."""

    model_config = Strict
    fit: FitSettings
    sources: list[SourceFile] = Field(min_length=1)
    measurements: list[Measurement] = Field(min_length=1)
    groups: list[CommGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "NcclCalibration":
        keys = [(g.collective, g.scope, g.ranks) for g in self.groups]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"groups repeat (collective, scope, ranks) {sorted(dup)}")
        return self


# ============================================================================= gemm section
class GemmRow(BaseModel):
    """One measured GEMM."""

    model_config = Strict
    M: Int = Field(gt=0, description="rows of A and C (tokens for a layer GEMM)")
    N: Int = Field(gt=0, description="columns of B and C")
    K: Int = Field(gt=0, description="reduction dimension")
    dtype: Literal["bf16", "fp16", "fp8"]
    tflops: Real = Field(gt=0, description="2 M N K / time, 1e12 FLOP/s")
    source: str = Field(description="file:line of an ingested row, or how it was measured")
    gpu: Optional[str] = None
    dtype_as_given: Optional[str] = None
    method: Optional[str] = None
    layers: list[str] = Field(default_factory=list, description="model GEMMs of this shape (--run)")
    repeats: Optional[Int] = Field(default=None, gt=0)
    tflops_best: Optional[Real] = Field(default=None, gt=0, description="from the fastest timed call")
    tflops_worst: Optional[Real] = Field(default=None, gt=0, description="from the slowest timed call")


class GemmSourceFile(BaseModel):
    model_config = Strict
    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    rows_used: Int = Field(ge=0)
    rows_skipped: Int = Field(ge=0)
    provenance: list[str] = Field(default_factory=list, description="'# source:' lines found in the file")


class GemmProvenance(BaseModel):
    """Where the rows come from: files ingested, or the machine and libraries that timed them."""

    model_config = Strict
    method: Literal["measured", "ingested"]
    created: datetime
    planner_version: str
    files: list[GemmSourceFile] = Field(default_factory=list)
    gpu_filter: Optional[str] = None
    rows_of_other_gpus: Int = Field(default=0, ge=0)
    skipped: list[str] = Field(default_factory=list, description="rows or shapes not used, with the reason")
    device_name: Optional[str] = None
    compute_capability: Optional[str] = None
    driver_version: Optional[str] = None
    torch_version: Optional[str] = None
    cuda_version: Optional[str] = None
    hip_version: Optional[str] = None
    cublas_version: Optional[str] = None
    clocks_after: Optional[str] = Field(default=None, description="nvidia-smi clocks.sm, clocks.max.sm, power.draw, power.limit, temperature.gpu after the sweep")
    timing: Optional[str] = None
    warmup: Optional[Int] = Field(default=None, ge=0)
    repeats: Optional[Int] = Field(default=None, gt=0)
    models: list[str] = Field(default_factory=list)
    tp: list[Int] = Field(default_factory=list)
    seq_len: list[Int] = Field(default_factory=list)
    micro_batch: list[Int] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class GemmCalibration(BaseModel):
    """The GEMM part of a calibration profile."""

    model_config = Strict
    gpu: str = Field(description="the GPU measured (device name, or the gpu field of the rows)")
    sm_count: Optional[Int] = Field(default=None, gt=0, description="its SMs: the wave size of the interpolation")
    peak_bf16_TFLOPS: Optional[Real] = Field(default=None, gt=0, description="dense peak of --hardware, for the efficiencies shown")
    peak_fp8_TFLOPS: Optional[Real] = Field(default=None, gt=0)
    sustained: Bool = Field(
        default=False,
        description="rows measured at the sustained (power-limited) clock; false: benchmark bursts, "
                    "derated by compute.SUSTAINED_TENSOR_FRACTION like the hardware entries' figures")
    power_limit_w: Optional[Real] = Field(
        default=None, gt=0,
        description="board power limit the rows were measured at, W (nvidia-smi power.limit); with sustained: "
                    "true the rates hold at this limit and compute.py's power envelope scales them to a job's limit")
    interpolation: Literal["shepard-k4-log-mnk-x-wave"] = Field(
        default=INTERPOLATION,
        description="exact measured shapes; else inverse-distance (k=4, power 2) mean of rate/wave_efficiency over "
                    "the nearest measured shapes in (ln M, ln N, ln K), times the query's wave_efficiency")
    rows: list[GemmRow] = Field(min_length=1)
    provenance: GemmProvenance

    def rows_for(self, precision: str) -> list[GemmRow]:
        """Rows that price `precision` (bf16 falls back to fp16 rows: compute.py, "GEMMs from
        measurements")."""
        rows = [r for r in self.rows if r.dtype == precision]
        if not rows and precision == "bf16":
            rows = [r for r in self.rows if r.dtype == "fp16"]
        return rows


# ============================================================================= run section
# RunParameter, RUN_PARAMETERS, RUN_PARAMETER_AFFECTS, STACK_PARAMETERS, RunKnobs and
# IDENTITY_KNOBS live in planner/knobs.py (no pydantic: imported at start-up), re-exported here.
from .knobs import (IDENTITY_KNOBS, RUN_PARAMETER_AFFECTS, RUN_PARAMETERS, STACK_PARAMETERS, RunKnobs,  # noqa: E402,F401
                    RunParameter)


class RunParameterFit(BaseModel):
    """One fitted knob: its value, the prior it was regularized toward, and the 1-sigma
    uncertainty from the fit's Jacobian (in the fit variable, see RunParameter.transform)."""

    model_config = Strict
    value: Real
    prior: Real
    lower: Real
    upper: Real
    sd_fit_variable: Optional[Real] = Field(default=None, ge=0, description="1-sigma of ln(value) (log1p: ln(1+value))")
    low_1sigma: Optional[Real] = None
    high_1sigma: Optional[Real] = None
    at_bound: Bool = False
    freed_by: list[str] = Field(default_factory=list, description="the measurements that determine it")


class RunInputFile(BaseModel):
    model_config = Strict
    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    kind: Literal["run-records", "torchtitan-log", "megatron-log", "trainer-config", "job"]


class RunMeasurement(BaseModel):
    """One measured figure of one run and the model's prediction before and after the fit."""

    model_config = Strict
    source: str = Field(description="file: record id, or file:first-last line of the steady-state window")
    quantity: Literal["step_time", "max_reserved", "max_allocated"]
    unit: Literal["s", "bytes"]
    measured: Real = Field(gt=0)
    sd_rel: Real = Field(gt=0, description="relative 1-sigma the fit weights it by")
    predicted_before: Real
    predicted_after: Real
    residual_before: Real = Field(description="predicted_before / measured - 1")
    residual_after: Real = Field(description="predicted_after / measured - 1")
    fitted: Bool = Field(description="false: no free parameter moves it (reported, not fitted)")
    stack: str
    hardware: str
    gpus: Int = Field(gt=0)
    mesh: str
    steps: Optional[Int] = Field(default=None, ge=1, description="log lines in the steady-state median")
    warmup_dropped: Optional[Int] = Field(default=None, ge=0)
    spread_rel: Optional[list[Real]] = Field(default=None, description="[min, max] of the steady lines / median - 1")
    tokens_per_s_per_gpu: Optional[Real] = Field(default=None, gt=0)
    notes: list[str] = Field(default_factory=list)


class RunFitSettings(BaseModel):
    model_config = Strict
    method: Literal["scipy.optimize.least_squares (trf, bounded) on ln(predicted/measured), prior-regularized"] = \
        "scipy.optimize.least_squares (trf, bounded) on ln(predicted/measured), prior-regularized"
    prior_sd: Real = Field(gt=0, description="1-sigma of each fit variable around its prior")
    free: list[str] = Field(min_length=1)
    independent_measurements: Int = Field(ge=1)
    cost: Real = Field(ge=0)
    baseline: dict[str, Optional[str]] = Field(
        default_factory=dict,
        description="sha256 of the profile's nccl and gemm sections the fit was made over (null: absent); the run "
                    "knobs are relative to them and are not applied over other sections")


class RunCalibration(BaseModel):
    """The `run` section: knobs fitted to measured training runs of one cluster."""

    model_config = Strict
    hardware: str = Field(description="catalog name of the GPUs the runs used: the knobs apply to it only")
    stacks: list[str] = Field(min_length=1, description="stack_db names of the runs: the knobs apply to them only")
    created: datetime
    parameters: dict[str, RunParameterFit] = Field(min_length=1)
    fit: RunFitSettings
    inputs: list[RunInputFile] = Field(min_length=1)
    measurements: list[RunMeasurement] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> "RunCalibration":
        bad = [k for k in self.parameters if k not in RUN_PARAMETERS]
        if bad:
            raise ValueError(f"unknown run parameter(s) {', '.join(bad)}; valid: {', '.join(RUN_PARAMETERS)}")
        for k, p in self.parameters.items():
            spec = RUN_PARAMETERS[k]
            if not (spec.lower <= p.value <= spec.upper):
                raise ValueError(f"{k} = {p.value} is outside its bounds [{spec.lower}, {spec.upper}]")
        return self


# ============================================================================= host_adam section
# The host's Adam under CPU offload (planner/offload.py [cpu-adam]) is priced as host_adam_bytes an element over the
# node's DRAM peak (hardware host_memory_GBps) x a fraction, the named assumption offload.HOST_MEMORY_EFFICIENCY; this
# section holds that fraction measured (planner/calibrate/host_adam.py):
#     efficiency = processes x params x bytes_per_param / (seconds x host_memory_GBps x 1e9)
HOST_ADAM_FORMULA = "efficiency = processes x params x bytes_per_param / (seconds x host_memory_GBps x 1e9)"


class HostAdamInput(BaseModel):
    model_config = Strict
    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    kind: Literal["record", "deepspeed-zero-log", "deepspeed-adam-test"]


class HostAdamMeasurement(BaseModel):
    """One timed host Adam step: what the input said, what was subtracted, the efficiency it gives."""

    model_config = Strict
    source: str = Field(description="file:line (a log's first-last steady line)")
    optimizer: Literal["deepspeed_cpu_adam", "torch_fused_adam"]
    params: Real = Field(gt=0, description="elements each process steps")
    processes: Int = Field(gt=0, description="processes of the node stepping at once (sharing its DRAM)")
    bytes_per_param: Real = Field(gt=0, description="host DRAM bytes an element (offload.host_adam_bytes, fp32 states: 28)")
    seconds_measured: Real = Field(gt=0, description="as the input gives it (a log: the median of its steady lines)")
    copy_seconds: Real = Field(default=0.0, ge=0, description="subtracted: the copy the timer spans besides the step")
    seconds: Real = Field(gt=0, description="the host Adam's own: seconds_measured - copy_seconds")
    host_memory_GBps: Real = Field(gt=0, description="the node's DRAM peak the fraction is of")
    efficiency: Real = Field(gt=0, le=1)
    steps: Optional[Int] = Field(default=None, ge=1, description="a log's steady lines in the median")
    notes: list[str] = Field(default_factory=list)


class HostAdamCalibration(BaseModel):
    """The `host_adam` section: the host Adam's fraction of the DRAM peak, measured (calibrate host-adam)."""

    model_config = Strict
    formula: Literal["efficiency = processes x params x bytes_per_param / (seconds x host_memory_GBps x 1e9)"] = \
        HOST_ADAM_FORMULA
    efficiency: Real = Field(gt=0, le=1, description="the median of the measurements' efficiencies")
    hardware: Optional[str] = Field(default=None, description="the hardware entry it applies to (--hardware); null: every")
    created: datetime
    inputs: list[HostAdamInput] = Field(min_length=1)
    measurements: list[HostAdamMeasurement] = Field(min_length=1)


def host_adam_efficiency(profile: Optional["CalibrationProfile"], hardware_name: str) -> tuple[Optional[float], str]:
    """(the calibrated fraction, how) for a plan on `hardware_name`; (None, why not) where the profile has no
    host_adam section or one for other hardware (the assumption offload.HOST_MEMORY_EFFICIENCY applies)."""
    sec = None if profile is None else profile.host_adam
    if sec is None:
        return None, "no host_adam section"
    if sec.hardware is not None and sec.hardware != hardware_name:
        return None, f"measured for hardware {sec.hardware}, not {hardware_name}"
    return sec.efficiency, (f"{sec.efficiency:.4g} measured (median of {len(sec.measurements)} host Adam step(s), "
                            "planner calibrate host-adam)")


# ============================================================================= the profile
class CalibrationProfile(BaseModel):
    """A calibration profile file. `nccl` holds the communication fits, `gemm` the measured
    GEMM throughput (either may be absent)."""

    model_config = Strict
    planner_version: str
    created: datetime
    hardware: Optional[str] = Field(default=None, description="--hardware given when calibrating (catalog name or path)")
    nccl: Optional[NcclCalibration] = None
    # --- gemm: measured GEMM throughput (rows and provenance; planner/calibrate/gemm.py
    # measures or ingests them, compute.py's GEMM model interpolates them to other shapes)
    gemm: Optional[GemmCalibration] = None
    # --- run: efficiency knobs fitted to measured training runs (planner/calibrate/run.py)
    run: Optional[RunCalibration] = None
    # --- host_adam: the host Adam's fraction of the DRAM peak under CPU offload (planner/calibrate/host_adam.py)
    host_adam: Optional[HostAdamCalibration] = None

    # --- lookups for the communication model --------------------------------------
    def group(self, collective: str, scope: str, ranks: int) -> Optional[CommGroup]:
        if self.nccl is None:
            return None
        for g in self.nccl.groups:
            if g.collective == collective and g.scope == scope and g.ranks == int(ranks):
                return g
        return None

    def covered(self) -> list[tuple[str, str, int]]:
        """(collective, scope, ranks) triples this profile has fitted figures for."""
        return [] if self.nccl is None else [(g.collective, g.scope, g.ranks) for g in self.nccl.groups]

    def bandwidth_and_latency(self, collective: str, scope: str, ranks: int) -> Optional[tuple[float, float]]:
        """(bus bandwidth B/s, latency s) of the bulk regime, or None if not calibrated.

        Bus bandwidth in the nccl-tests sense [1]: time = latency + S * factor(n) / busbw.
        """
        if scope not in SCOPES:
            raise PlannerError(f"unknown scope {scope!r}", "valid: " + ", ".join(SCOPES))
        g = self.group(collective, scope, ranks)
        return None if g is None else (g.bandwidth, g.latency)

    def collective_time(self, collective: str, scope: str, ranks: int, size_bytes):
        """Envelope time (s) of the fitted regimes for nccl-tests size(s) S, or None."""
        g = self.group(collective, scope, ranks)
        return None if g is None else g.time(size_bytes)


def section_digest(section) -> Optional[str]:
    """sha256 of a profile section's JSON (None for an absent section): what a run calibration
    was fitted over."""
    if section is None:
        return None
    return hashlib.sha256(json.dumps(section.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def baseline_digests(profile: Optional["CalibrationProfile"]) -> dict[str, Optional[str]]:
    if profile is None:
        return {"nccl": None, "gemm": None}
    return {"nccl": section_digest(profile.nccl), "gemm": section_digest(profile.gemm)}


def run_knobs(profile: Optional[CalibrationProfile], stack_name: str, hardware_name: str) -> RunKnobs:
    """The knobs of a profile's `run` section for a plan on `stack_name` and `hardware_name`:
    its fitted values where the section was calibrated for that stack and hardware (over the
    same nccl and gemm sections), the identity elsewhere (with the reason in not_applied)."""
    run = None if profile is None else profile.run
    if run is None:
        return IDENTITY_KNOBS
    if hardware_name != run.hardware:
        return RunKnobs(not_applied=f"the run calibration is for hardware {run.hardware}, not {hardware_name}")
    if stack_name not in run.stacks:
        return RunKnobs(not_applied=f"the run calibration is for stack(s) {', '.join(run.stacks)}, not {stack_name}")
    base = run.fit.baseline
    now = baseline_digests(profile)
    changed = [k for k in ("nccl", "gemm") if base.get(k) != now[k]]  # a missing key: the section was absent
    if changed:
        return RunKnobs(not_applied=f"the profile's {' and '.join(changed)} section changed after the run calibration "
                                    "(re-run planner calibrate run)")
    vals = {k: p.value for k, p in run.parameters.items()}
    return RunKnobs(**vals, applied=tuple(sorted(vals)))


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read and validate a profile YAML; PlannerError names the file and the field."""
    p = Path(path)
    if not files.exists(p):  # anything else that is not a regular file: read_yaml says what it is
        raise PlannerError(f"{p}: no such calibration profile", "write one with `planner calibrate nccl LOG... -o profile.yaml`")
    return validate(CalibrationProfile, read_yaml(p), str(p))


__all__ = [
    "BUSBW_FACTORS", "INTERPOLATION", "MODEL_FORMULA", "ROBUST_SCALE", "SCOPES", "CalibrationProfile", "CommGroup",
    "FitSettings", "FittedRegime", "GemmCalibration", "GemmProvenance", "GemmRow", "GemmSourceFile", "Measurement",
    "NcclCalibration", "Residuals", "SourceFile", "busbw_factor", "envelope_time", "load_profile",
    "IDENTITY_KNOBS", "RUN_PARAMETERS", "RUN_PARAMETER_AFFECTS", "STACK_PARAMETERS", "RunCalibration", "RunFitSettings", "RunInputFile",
    "RunKnobs", "RunMeasurement", "RunParameter", "RunParameterFit", "baseline_digests", "run_knobs", "section_digest",
    "HOST_ADAM_FORMULA", "HostAdamCalibration", "HostAdamInput", "HostAdamMeasurement", "host_adam_efficiency",
]
