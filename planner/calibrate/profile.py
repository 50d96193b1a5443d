"""Build and write calibration profiles (planner/profile.py holds the data models and
`load_profile`; the cost models read them from there).

`profile_from_calibration` turns `nccl.calibrate_logs()` output into a profile;
`with_gemm_section` and `keep_gemm_section` let `planner calibrate nccl -o P` and
`planner calibrate gemm -o P` build one profile together; `dump_profile` / `write_profile`
write the YAML (human units only in keys that name them: `latency_us`, `busbw_GBps`,
`time_us`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import yaml

from .. import __version__
from ..errors import PlannerError
from .. import files
from ..profile import (
    MODEL_FORMULA,
    CalibrationProfile,
    CommGroup,
    FitSettings,
    FittedRegime,
    GemmCalibration,
    HostAdamCalibration,
    Measurement,
    NcclCalibration,
    Residuals,
    RunCalibration,
    SourceFile,
    load_profile,
)
from .nccl import EVAL_MIN_BYTES, Calibration


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
        created=_created(created),
        hardware=hardware,
        nccl=NcclCalibration(fit=FitSettings(min_size_bytes=min_bytes), sources=sources, measurements=meas, groups=groups),
    )


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    """Lists of plain values in flow style ([1, 2, 3]) so the points stay readable. PyYAML's C
    emitter (libyaml) where PyYAML was built with it, the same text as the Python one: the
    Python emitter took 30 s for the 144k numbers of an 18k-row log (issue 24)."""


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
    for section in ("nccl", "gemm", "run", "host_adam"):
        if data[section] is None:  # an absent section is left out (a communication-only profile reads as before)
            data.pop(section)
    if profile.gemm is not None:  # unset optional fields and empty lists left out; one line per measured row
        data["gemm"] = _drop_empty(profile.gemm.model_dump(mode="json"))
        data["gemm"]["rows"] = [_FlowMap(r) for r in data["gemm"]["rows"]]
    if profile.run is not None:
        head += ("# run: knobs fitted to measured training runs (planner calibrate run); each applies to the stacks and "
                 "hardware named, value 1 / the stack's = uncalibrated.\n")
        data["run"] = _drop_empty(profile.run.model_dump(mode="json"))
        data["run"]["fit"]["baseline"] = dict(profile.run.fit.baseline)  # null = the section was absent
    if profile.host_adam is not None:
        head += f"# host_adam: the host Adam's fraction of the DRAM peak under CPU offload, {profile.host_adam.formula}.\n"
        data["host_adam"] = _drop_empty(profile.host_adam.model_dump(mode="json"))
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
    return head + body


def has_section(path: str | Path, section: str) -> bool:
    """Whether the profile already at `path` has a `section` (nccl, gemm) a write replaces."""
    p = Path(path)
    if not files.is_file(p):
        return False
    try:
        return getattr(load_profile(p), section) is not None
    except PlannerError:
        return False  # with_gemm_section / keep_gemm_section refuse such a file before it is written


def write_profile(profile: CalibrationProfile, path: str | Path, warn=None, section: Optional[str] = None) -> None:
    """Write the profile YAML atomically (files.write_atomic: a temporary file in the same
    folder, fsync, os.replace), so a failed write (disk full, interrupted) leaves the
    previous profile as it was. `section` (nccl or gemm) is the part this calibration wrote:
    `warn(message)` is told when the file at `path` already had one, which the write replaces."""
    p = Path(path)
    if warn is not None and section is not None and has_section(p, section):
        warn(f"{p}: replacing its {section} section with the new calibration")
    files.write_atomic(p, dump_profile(profile), what="-o", hint="choose a writable -o path with free space")


def _existing_profile(p: Path) -> Optional[CalibrationProfile]:
    """The profile already at `p` (None where no file is): a file there that is not a valid profile is an error, and
    is not overwritten (the with_*_section writers' rule)."""
    if not files.exists(p):
        return None
    try:
        return load_profile(p)
    except PlannerError as e:
        raise PlannerError(f"{p} exists and is not a calibration profile ({e.message})",
                           "choose another -o path, or remove the file") from None


def _created(created: Optional[datetime]) -> datetime:
    """A new profile's `created`: the caller's, else now (UTC, whole seconds)."""
    return created or datetime.now(timezone.utc).replace(microsecond=0)


def with_gemm_section(path: str | Path, gemm: GemmCalibration, hardware: Optional[str] = None,
                      created: Optional[datetime] = None) -> CalibrationProfile:
    """The profile to write to `path` with `gemm` as its GEMM section.

    A new file gets a new profile. An existing profile keeps its `nccl` section, its
    `created` time (when the file was first written; the gemm section records its own) and
    its `hardware`; the gemm section is replaced, not appended to. A file at `path` that is
    not a valid profile is an error (it is not overwritten), as is a `hardware` that differs
    from the profile's: one profile describes one kind of GPU."""
    p = Path(path)
    old = _existing_profile(p)
    if old is None:
        return CalibrationProfile(planner_version=__version__, created=_created(created), hardware=hardware, gemm=gemm)
    if hardware is not None and old.hardware is not None and hardware != old.hardware:
        raise PlannerError(f"{p}: the profile was calibrated on hardware {old.hardware!r}, not {hardware!r}",
                           "write the GEMM calibration to a separate -o file, or pass the same --hardware")
    return CalibrationProfile(planner_version=__version__, created=old.created, hardware=hardware or old.hardware,
                              nccl=old.nccl, gemm=gemm, run=old.run, host_adam=old.host_adam)


def keep_gemm_section(path: str | Path, new: CalibrationProfile) -> CalibrationProfile:
    """`new` (an nccl calibration) with the GEMM section of the profile already at `path`,
    so that `calibrate nccl -o P` and `calibrate gemm -o P` build one profile together. A
    file at `path` that is not a valid profile is an error (it is not overwritten)."""
    old = _existing_profile(Path(path))
    if old is None:
        return new
    return new.model_copy(update={"gemm": old.gemm, "run": old.run, "host_adam": old.host_adam})


def with_run_section(path: str | Path, run: RunCalibration, created: Optional[datetime] = None) -> CalibrationProfile:
    """The profile to write to `path` with `run` as its run section: an existing profile keeps
    its nccl and gemm sections (the run knobs were fitted over them: run.fit.baseline) and its
    `created`; a `hardware` it names must be the runs' (one profile describes one kind of GPU).
    A file at `path` that is not a valid profile is an error (it is not overwritten)."""
    p = Path(path)
    old = _existing_profile(p)
    if old is None:
        return CalibrationProfile(planner_version=__version__, created=_created(created), hardware=run.hardware, run=run)
    if old.hardware is not None and old.hardware != run.hardware:
        raise PlannerError(f"{p}: the profile was calibrated on hardware {old.hardware!r}, but the runs used {run.hardware!r}",
                           "write the run calibration to a separate -o file")
    return CalibrationProfile(planner_version=__version__, created=old.created, hardware=run.hardware,
                              nccl=old.nccl, gemm=old.gemm, run=run, host_adam=old.host_adam)


def with_host_adam_section(path: str | Path, host_adam: HostAdamCalibration,
                           created: Optional[datetime] = None) -> CalibrationProfile:
    """The profile to write to `path` with `host_adam` as its host_adam section: an existing profile keeps its other
    sections and its `created`; one calibrated on other `hardware` than the section's is refused (one profile
    describes one kind of node). A file at `path` that is not a valid profile is an error (it is not overwritten)."""
    p = Path(path)
    old = _existing_profile(p)
    if old is None:
        return CalibrationProfile(planner_version=__version__, created=_created(created), hardware=host_adam.hardware,
                                  host_adam=host_adam)
    if host_adam.hardware is not None and old.hardware is not None and old.hardware != host_adam.hardware:
        raise PlannerError(f"{p}: the profile was calibrated on hardware {old.hardware!r}, not {host_adam.hardware!r}",
                           "write the host Adam calibration to a separate -o file, or pass the same --hardware")
    return old.model_copy(update={"planner_version": __version__, "hardware": old.hardware or host_adam.hardware,
                                  "host_adam": host_adam})


__all__ = [
    "with_host_adam_section",
    "dump_profile", "keep_gemm_section", "has_section", "profile_from_calibration", "with_gemm_section",
    "with_run_section",
    "write_profile",
]
