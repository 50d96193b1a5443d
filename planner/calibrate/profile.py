"""The calibration profile: what was measured, where and when, and the fitted figures.

`planner calibrate nccl LOG... -o profile.yaml` writes it; `load_profile(path)` reads and
validates it (pydantic, unknown keys are errors). The communication model asks it:

    prof = load_profile("profile.yaml")
    hit = prof.bandwidth_and_latency("all_reduce", "inter-node", 16)
    if hit is None:               # scope not calibrated: use the hardware defaults
        ...
    else:
        busbw, alpha = hit        # bytes/s, seconds (the bulk-transfer regime)

    prof.collective_time("all_reduce", "inter-node", 16, size_bytes)   # seconds, arrays ok

The compute model asks `prof.gemm_time(M, N, K, precision, hw)` (seconds, arrays ok; None
when the profile has no `gemm` section). `planner calibrate gemm ... -o profile.yaml` writes
that section (planner/calibrate/gemm.py), keeping an existing profile's nccl section.

Units: SI in code (bytes, seconds, bytes/s). The YAML uses human units only where the key
says so: `latency_us` (microseconds), `busbw_GBps` (1e9 bytes/s), `time_us`.

Meaning of a fitted group (see planner/calibrate/nccl.py for the model and the fit):
    t(S) = min_k (latency_k + S * factor(n) / busbw_k)
S is the nccl-tests `size` column (the bytes algbw counts: the per-rank buffer for
all_reduce, the whole gathered array for all_gather/reduce_scatter) and factor(n) the
nccl-tests bus bandwidth factor [1] (2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter and alltoall, 1 for broadcast and sendrecv). `regimes` are sorted by
bandwidth; the last one is the bulk-transfer regime, whose (busbw, latency) is what
`bandwidth_and_latency` returns. It is valid from its `from_bytes` up; below that the
full envelope (`collective_time`) is the better estimate, and below the group's
`fit_min_bytes` neither was fitted (extrapolation).

Lookups match (collective, scope, ranks) exactly: bus bandwidth is nearly independent of
n for ring algorithms [1] but latency is not, so the profile does not extrapolate across
rank counts; the caller decides what to do with an uncovered one (the defaults).

References
[1] NVIDIA nccl-tests, doc/PERFORMANCE.md (algbw, busbw and the bus bandwidth factors).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import __version__
from ..errors import PlannerError
from .gemm import GemmCalibration
from .nccl import (
    BUSBW_FACTORS,
    EVAL_MIN_BYTES,
    ROBUST_SCALE,
    SCOPES,
    Calibration,
    busbw_factor,
    envelope_time,
    Regime as _FitRegime,
)

Strict = ConfigDict(extra="forbid", frozen=True)
Scope = Literal["intra-node", "inter-node"]
MODEL_FORMULA = "t(S) = min_k(latency_k + S*factor(n)/busbw_k)"


def _check_collective(c: str) -> str:
    if c not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {c!r}; valid: {', '.join(BUSBW_FACTORS)}")
    return c


class SourceFile(BaseModel):
    """One log that went into the profile."""

    model_config = Strict
    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    lines: int = Field(ge=0)
    provenance: list[str] = Field(default_factory=list, description="'# source:' notes found in the file")
    unread_lines: list[int] = Field(default_factory=list, description="line numbers reported as warnings")


class Measurement(BaseModel):
    """One sweep (table) of a log: what the log and the options said, and the points."""

    model_config = Strict
    source: str
    first_line: int = Field(gt=0)
    collective: str
    collective_from: str
    ranks: int = Field(gt=0)
    ranks_from: str
    nodes: int = Field(gt=0)
    nodes_from: str
    scope: Scope
    scope_from: str
    hosts: list[str] = Field(default_factory=list, description="host names of the Rank lines seen")
    gpus: list[str] = Field(default_factory=list, description="device names of the Rank lines seen")
    nccl_version: Optional[str] = None
    dtypes: list[str] = Field(default_factory=list)
    redops: list[str] = Field(default_factory=list)
    min_time_us: float = Field(gt=0, description="smallest measured time of the sweep (not fitted)")
    size_bytes: list[int]
    time_us: list[float]
    busbw_GBps: list[Optional[float]]
    in_place: list[bool]

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
    latency_us: float = Field(ge=0)
    busbw_GBps: float = Field(gt=0)
    from_bytes: int = Field(ge=0, description="smallest measured size where this line is the cheaper one")
    to_bytes: int = Field(ge=0)

    @property
    def latency(self) -> float:
        return self.latency_us * 1e-6

    @property
    def busbw(self) -> float:
        return self.busbw_GBps * 1e9


class Residuals(BaseModel):
    """|busbw_model / busbw_measured - 1| over the measured points at or above min_size_bytes."""

    model_config = Strict
    min_size_bytes: int = Field(ge=0)
    points: int = Field(ge=0)
    busbw_median_abs_rel_err: Optional[float] = Field(default=None, ge=0)
    busbw_max_abs_rel_err: Optional[float] = Field(default=None, ge=0)


class CommGroup(BaseModel):
    """The fit of one (collective, scope, ranks)."""

    model_config = Strict
    collective: str
    scope: Scope
    ranks: int = Field(gt=0)
    nodes: list[int] = Field(min_length=1, description="node counts of the sweeps pooled here")
    fit_min_bytes: int = Field(ge=0)
    fit_max_bytes: int = Field(gt=0)
    points: int = Field(gt=1, description="measured points used by the fit")
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
        lines = [_FitRegime(r.latency, r.busbw, r.from_bytes, r.to_bytes) for r in self.regimes]
        s_eff = busbw_factor(self.collective, self.ranks) * np.asarray(size_bytes, dtype=np.float64)
        return envelope_time(lines, s_eff)


class FitSettings(BaseModel):
    model_config = Strict
    model: Literal["t(S) = min_k(latency_k + S*factor(n)/busbw_k)"] = MODEL_FORMULA
    residual: Literal["relative time error"] = "relative time error"
    loss: Literal["soft_l1"] = "soft_l1"
    f_scale: float = Field(default=ROBUST_SCALE, gt=0)
    min_size_bytes: int = Field(ge=0)


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


class CalibrationProfile(BaseModel):
    """A calibration profile file. `nccl` holds the communication fits, `gemm` the measured
    GEMM throughput (either may be absent)."""

    model_config = Strict
    planner_version: str
    created: datetime
    hardware: Optional[str] = Field(default=None, description="--hardware given when calibrating (catalog name or path)")
    nccl: Optional[NcclCalibration] = None
    # --- gemm: measured GEMM throughput (planner/calibrate/gemm.py: rows, provenance, and the
    # interpolation to other shapes); `gemm_time` below is what the compute model calls.
    gemm: Optional[GemmCalibration] = None

    # --- lookups for the compute model ---------------------------------------------
    def gemm_time(self, M, N, K, precision, hw):
        """Seconds of C[M,N] = A[M,K] @ B[K,N] from the GEMM calibration, or None when the
        profile has no `gemm` section (then use compute.gemm_time). precision: 'bf16' | 'fp8'
        or precision codes (planner.plan); arrays broadcast. Precisions the section has no
        rows for fall back to the uncalibrated model inside."""
        if self.gemm is None:
            return None
        from .gemm import calibrated_gemm_time

        return calibrated_gemm_time(M, N, K, precision, hw, self.gemm)

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


# ------------------------------------------------------------------------- build / write
def _r(x: float, nd: int = 6) -> float:
    return float(round(float(x), nd))


def profile_from_calibration(cal: Calibration, hardware: Optional[str] = None, created: Optional[datetime] = None) -> CalibrationProfile:
    """Turn `nccl.calibrate_logs()` output into a validated profile."""
    issues_by_file: dict = {}
    for log in cal.logs:
        issues_by_file[log.name] = sorted({i.line for i in log.issues})
    sources = [
        SourceFile(name=log.name, sha256=log.sha256, lines=log.lines, provenance=log.provenance,
                   unread_lines=issues_by_file[log.name])
        for log in cal.logs
    ]
    meas = []
    for sw in cal.sweeps:
        meas.append(
            Measurement(
                source=sw.path, first_line=sw.first_line, collective=sw.collective, collective_from=sw.collective_from,
                ranks=sw.ranks, ranks_from=sw.ranks_from, nodes=sw.nodes, nodes_from=sw.nodes_from, scope=sw.scope,
                scope_from=sw.scope_from, hosts=sw.hosts, gpus=sw.gpus, nccl_version=sw.ctx.nccl_version,
                dtypes=sorted(sw.dtypes), redops=sorted(sw.redops),
                min_time_us=_r(min(p.time for p in sw.points) / 1e-6),
                size_bytes=[p.size for p in sw.points], time_us=[_r(p.time / 1e-6) for p in sw.points],
                busbw_GBps=[None if p.busbw is None else _r(p.busbw / 1e9) for p in sw.points],
                in_place=[p.in_place for p in sw.points],
            )
        )
    groups = []
    min_bytes = None
    for key, fit in cal.fits.items():
        min_bytes = fit.min_bytes
        groups.append(
            CommGroup(
                collective=key[0], scope=key[1], ranks=key[2], nodes=sorted({sw.nodes for sw in cal.groups[key]}),
                fit_min_bytes=fit.min_bytes, fit_max_bytes=fit.max_bytes, points=fit.points,
                regimes=[
                    FittedRegime(latency_us=_r(ln.latency / 1e-6, 4), busbw_GBps=_r(ln.busbw / 1e9, 4),
                                 from_bytes=ln.from_bytes, to_bytes=ln.to_bytes)
                    for ln in fit.lines
                ],
                residuals=Residuals(
                    min_size_bytes=EVAL_MIN_BYTES, points=fit.eval_points,
                    busbw_median_abs_rel_err=None if fit.eval_points == 0 else _r(fit.median_abs_err),
                    busbw_max_abs_rel_err=None if fit.eval_points == 0 else _r(fit.max_abs_err),
                ),
            )
        )
    return CalibrationProfile(
        planner_version=__version__,
        created=created or datetime.now(timezone.utc).replace(microsecond=0),
        hardware=hardware,
        nccl=NcclCalibration(fit=FitSettings(min_size_bytes=min_bytes), sources=sources, measurements=meas, groups=groups),
    )


class _Dumper(yaml.SafeDumper):
    """Lists of plain values in flow style ([1, 2, 3]) so the points stay readable."""


def _repr_list(dumper, data):
    flow = all(isinstance(v, (int, float, bool, type(None))) for v in data) and len(data) > 0
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _repr_list)


def _drop_empty(d):
    if isinstance(d, dict):
        return {k: _drop_empty(v) for k, v in d.items() if v is not None and v != []}
    if isinstance(d, list):
        return [_drop_empty(v) for v in d]
    return d


class _FlowMap(dict):
    """A mapping written on one line ({M: 4096, N: 4096, ...}): the GEMM rows."""


_Dumper.add_representer(_FlowMap, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True))


def dump_profile(profile: CalibrationProfile) -> str:
    head = (
        "# planner calibration profile. Units: SI unless the key names one (latency_us, busbw_GBps, time_us).\n"
        f"# Model per group: {MODEL_FORMULA}; factor(n) = nccl-tests bus bandwidth factor.\n"
    )
    if profile.gemm is not None:
        head += ("# gemm rows: C[M,N] = A[M,K] @ B[K,N], tflops = 2*M*N*K / time in 1e12 FLOP/s; "
                 "other shapes: see planner/calibrate/gemm.py.\n")
    data = profile.model_dump(mode="json")
    for section in ("nccl", "gemm"):
        if data[section] is None:  # an absent section is left out (a communication-only profile reads as before)
            data.pop(section)
    if profile.gemm is not None:  # unset optional fields and empty lists left out; one line per measured row
        data["gemm"] = _drop_empty(profile.gemm.model_dump(mode="json"))
        data["gemm"]["rows"] = [_FlowMap(r) for r in data["gemm"]["rows"]]
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
    return head + body


def write_profile(profile: CalibrationProfile, path: str | Path) -> None:
    p = Path(path)
    try:
        p.write_text(dump_profile(profile), encoding="utf-8")
    except OSError as e:
        raise PlannerError(f"{p}: cannot write the profile ({e.strerror})", "choose a writable -o path") from None


def with_gemm_section(path: str | Path, gemm: GemmCalibration, hardware: Optional[str] = None,
                      created: Optional[datetime] = None) -> CalibrationProfile:
    """The profile to write to `path` with `gemm` as its GEMM section.

    A new file gets a new profile. An existing profile keeps its `nccl` section, its
    `created` time (when the file was first written; the gemm section records its own) and
    its `hardware`; the gemm section is replaced, not appended to. A file at `path` that is
    not a valid profile is an error (it is not overwritten), as is a `hardware` that differs
    from the profile's: one profile describes one kind of GPU."""
    p = Path(path)
    if not p.exists():
        return CalibrationProfile(planner_version=__version__, created=created or datetime.now(timezone.utc).replace(microsecond=0),
                                  hardware=hardware, gemm=gemm)
    try:
        old = load_profile(p)
    except PlannerError as e:
        raise PlannerError(f"{p} exists and is not a calibration profile ({e.message})",
                           "choose another -o path, or remove the file") from None
    if hardware is not None and old.hardware is not None and hardware != old.hardware:
        raise PlannerError(f"{p}: the profile was calibrated on hardware {old.hardware!r}, not {hardware!r}",
                           "write the GEMM calibration to a separate -o file, or pass the same --hardware")
    return CalibrationProfile(planner_version=__version__, created=old.created, hardware=hardware or old.hardware,
                              nccl=old.nccl, gemm=gemm)


def keep_gemm_section(path: str | Path, new: CalibrationProfile) -> CalibrationProfile:
    """`new` (an nccl calibration) with the GEMM section of the profile already at `path`,
    so that `calibrate nccl -o P` and `calibrate gemm -o P` build one profile together. A
    file at `path` that is not a valid profile is an error (it is not overwritten)."""
    p = Path(path)
    if not p.exists():
        return new
    try:
        old = load_profile(p)
    except PlannerError as e:
        raise PlannerError(f"{p} exists and is not a calibration profile ({e.message})",
                           "choose another -o path, or remove the file") from None
    if old.gemm is None:
        return new
    return new.model_copy(update={"gemm": old.gemm})


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read and validate a profile YAML; PlannerError names the file and the field."""
    from ..catalog import read_yaml, validate  # catalog imports schema only; no cycle

    p = Path(path)
    if not p.is_file():
        raise PlannerError(f"{p}: no such calibration profile", "write one with `planner calibrate nccl LOG... -o profile.yaml`")
    return validate(CalibrationProfile, read_yaml(p), str(p))


__all__ = [
    "CalibrationProfile", "CommGroup", "FittedRegime", "GemmCalibration", "Measurement", "NcclCalibration", "Residuals",
    "SourceFile", "dump_profile", "keep_gemm_section", "load_profile", "profile_from_calibration", "with_gemm_section", "write_profile",
]
