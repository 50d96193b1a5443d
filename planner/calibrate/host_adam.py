"""`planner calibrate host-adam`: the fraction of the host's DRAM peak its Adam sustains under CPU offload,
measured, in place of the named assumption offload.HOST_MEMORY_EFFICIENCY (planner/offload.py [cpu-adam]).

The model prices the host's Adam as memory-bound: offload.host_adam_bytes an element (fp32 master, both moments and
the fp32 gradient read, master and moments written: 28 B) over the node's DRAM peak (hardware host_memory_GBps) x a
fraction. A timed step gives that fraction:

    efficiency = processes x params x bytes_per_param / (seconds x host_memory_GBps x 1e9)

with params the elements each process steps, processes the processes of one node stepping at once (under ZeRO-Offload
every rank of the node steps its own partition at the same time, sharing the DRAM), seconds the step's own time. The
section's value is the median over the measurements. An efficiency above 1 moves more bytes than the DRAM peak allows:
the inputs disagree (the element count, the processes or the bandwidth), and are refused.

Inputs (detected by content, one or more files):
  record     a YAML file, a list of records or a mapping with `measurements:` holding one; each record's keys:
               optimizer        deepspeed_cpu_adam | torch_fused_adam (the one-pass kernels the model prices:
                                DeepSpeed cpu_adam.h Step_AVX, torch FusedAdamKernel.cpp; offload.py [cpu-adam])
               params           elements each process steps (a count: 1.004e9, 1G)
               processes        processes of the node stepping at once (default 1)
               seconds          the step's wall time, the Adam alone, seconds
               host_memory_GBps the node's DRAM peak, GB/s (default: --host-memory-gbps, else --hardware's)
               source           free text: how it was measured (optional)
  deepspeed-zero-log
             DeepSpeed's wall-clock breakdown of a ZeRO-1/2 run (`"wall_clock_breakdown": true`), the line the ZeRO
             optimizer logs each step [1]:
               [Rank 0] time (ms) | optimizer_allgather: 52.81 | optimizer_gradients: 10.53 | optimizer_step: 912.40
             SynchronizedWallClockTimer.log [2] writes "time (ms)" and each timer as "| name: %.2f" (ms, summed over
             the step's parameter groups). With offload_optimizer cpu the optimizer_step timer spans the CPU Adam
             (_optimizer_step) and the copy of the updated fp32 partition to the GPU, `fp32_partition.to(device)`,
             into the 16-bit partition [1]: that copy (params x 4 B over the host link, --pcie-gbps or --hardware's
             pcie_GBps) is subtracted. The log does not say the partition's size nor the node's ranks: --params (a
             rank's partition, elements: the model's parameters / the data-parallel size at ZeRO-1/2) and --processes
             (the ranks of one node) are required. The first --warmup line(s) are dropped (the first step allocates
             and pins the host buffers); lines of 0.00 (an overflow step skips the update, l. 1850-1853) are left
             out; the median of the rest is the step. A ZeRO-3 line (optimizer_step without optimizer_gradients) is
             refused: stage3.py's timer spans its sub-groups' preparation, swaps and parameter copies too.
  deepspeed-adam-test
             the output of DeepSpeed's CPU Adam benchmarks [3], one process on a node of its own:
               tests/perf/adam_test1.py   "Elapsed Time is  0.91"  (DeepSpeedCPUAdam, one 1024**3-element fp32 tensor
                                           with an fp32 gradient; the mean of 100 steps, seconds)
               tests/perf/adam_test.py    "Step time: torch_time=5.1 ds_time=0.93"  (1024**3 + 274,432 elements;
                                           ds_time read; torch_time, torch.optim.Adam's multi-pass loop, is not what
                                           the model prices: left out, noted)

References
[1] microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage_1_and_2.py l. 40-41 (OPTIMIZER_STEP_TIMER
    'optimizer_step', OPTIMIZER_TIMERS), l. 1865-1884 (the cpu_offload branch: the timer around _optimizer_step and
    bit16_partitions[partition_id].data.copy_(fp32_partition.to(device).data)), l. 1941 (self.timers.log
    (OPTIMIZER_TIMERS)); deepspeed/runtime/engine.py l. 1553 (the ZeRO optimizer gets the engine's timers only with
    wall_clock_breakdown, else NoopTimer).
[2] microsoft/DeepSpeed @38327e07 deepspeed/utils/timer.py SynchronizedWallClockTimer.log ('time (ms)' and
    ' | {}: {:.2f}'), deepspeed/utils/logging.py log_dist ('[Rank {}] {}').
[3] microsoft/DeepSpeed @38327e07 tests/perf/adam_test1.py (model_size = 1 * 1024**3, the mean of 100 steps printed
    as "Elapsed Time is ", avg / 100) and tests/perf/adam_test.py (group_size = [model_size, 274432], print
    f"Step time: {torch_time=} {ds_time=}").
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Optional

from .. import files
from ..errors import PlannerError
from ..offload import FP32_BYTES, HOST_GRAD_BYTES
from ..units import parse_count

# host DRAM bytes an element of the one-pass fp32 Adam (offload.host_adam_bytes with fp32 master 4 B and Adam 8 B:
# master, moments and the fp32 gradient read, master and moments written)
FP32_ADAM_BYTES = (4.0 + 8.0 + HOST_GRAD_BYTES) + (4.0 + 8.0)
OPTIMIZERS = ("deepspeed_cpu_adam", "torch_fused_adam")
RECORD_KEYS = {"optimizer", "params", "processes", "seconds", "host_memory_GBps", "source"}
# DeepSpeed's benchmarks [3]
ADAM_TEST1_PARAMS = 1024**3
ADAM_TEST_PARAMS = 1024**3 + 274432
WARMUP_LINES = 1

# a timer's or a benchmark's value: any word (not only digits), so that a line DeepSpeed wrote with nan or inf is read
# and refused by the number checks below rather than passed over
_ZERO_LINE = re.compile(r"time \(ms\)((?:\s*\|\s*[A-Za-z_]+:\s*[^\s|]+)+)")
_TIMER = re.compile(r"\|\s*([A-Za-z_]+):\s*([^\s|]+)")
_TEST1 = re.compile(r"^\s*Elapsed Time is\s+(\S+)\s*$")
_TEST = re.compile(r"Step time:\s*torch_time=(\S+)\s+ds_time=(\S+)")


@dataclass
class Options:
    """What the command line adds to the inputs: the node's DRAM peak and host link (GB/s), a ZeRO log's partition
    (elements) and ranks, the warm-up lines dropped."""

    host_memory_GBps: Optional[float] = None
    pcie_GBps: Optional[float] = None
    params: Optional[float] = None
    processes: Optional[int] = None
    warmup: int = WARMUP_LINES
    hardware: Optional[str] = None  # the entry the figures came from (the section's scope)
    warnings: list = field(default_factory=list)


def _bandwidth(given, opts: Options, where: str) -> float:
    bw = given if given is not None else opts.host_memory_GBps
    if bw is None:
        raise PlannerError(f"{where}: no host DRAM bandwidth for this measurement",
                           "pass --host-memory-gbps (the node's DRAM peak, GB/s: channels x MT/s x 8 B x sockets), or "
                           "--hardware with an entry that has host_memory_GBps, or give host_memory_GBps in the record")
    return bw


def _measurement(source: str, optimizer: str, params: float, processes: int, seconds_measured: float,
                 copy_seconds: float, bw: float, steps=None, notes=()) -> dict:
    """One measurement's record (profile.HostAdamMeasurement's fields); an efficiency above 1 refused."""
    seconds = seconds_measured - copy_seconds
    if not seconds > 0:
        raise PlannerError(f"{source}: the step {seconds_measured:g} s is not longer than the copy it spans "
                           f"({copy_seconds:g} s)", "check --params and --pcie-gbps (the fp32 partition's copy to "
                                                    "the GPU is subtracted from DeepSpeed's optimizer_step)")
    eff = processes * params * FP32_ADAM_BYTES / (seconds * bw * 1e9)
    if not (0 < eff <= 1):
        raise PlannerError(
            f"{source}: {processes} x {params:g} elements x {FP32_ADAM_BYTES:g} B in {seconds:g} s is "
            f"{processes * params * FP32_ADAM_BYTES / seconds / 1e9:,.1f} GB/s, {eff:.3g} x the host's "
            f"{bw:g} GB/s DRAM peak", "an efficiency above 1 cannot be: check the elements a process steps (--params), "
                                      "the processes stepping at once (--processes) and the DRAM peak")
    return dict(source=source, optimizer=optimizer, params=float(params), processes=int(processes),
                bytes_per_param=FP32_ADAM_BYTES, seconds_measured=float(seconds_measured),
                copy_seconds=float(copy_seconds), seconds=float(seconds), host_memory_GBps=float(bw),
                efficiency=float(eff), steps=steps, notes=list(notes))


def _positive(value, what: str, where: str, count: bool = False) -> float:
    try:
        v = parse_count(value, what) if count else float(value)
    except (TypeError, ValueError):
        raise PlannerError(f"{where}: {what} {value!r} is not a number", f"give {what} as a positive number") from None
    except PlannerError as e:
        raise PlannerError(f"{where}: {e.message}", e.hint) from None
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise PlannerError(f"{where}: {what} {value!r} must be a positive finite number", f"give {what} as a positive number")
    return v


def _records(data, name: str, opts: Options) -> list[dict]:
    rows = data.get("measurements") if isinstance(data, dict) else data
    if isinstance(data, dict) and set(data) - {"measurements"}:
        raise PlannerError(f"{name}: unknown key(s) {', '.join(sorted(set(data) - {'measurements'}))}",
                           "a host Adam record file is a list of records, or a mapping with `measurements:`")
    if not isinstance(rows, list) or not rows:
        raise PlannerError(f"{name}: no host Adam records", "give a list of records (optimizer, params, processes, "
                                                           "seconds, host_memory_GBps) or `measurements:` holding one")
    out = []
    for i, r in enumerate(rows, 1):
        where = f"{name}: record {i}"
        if not isinstance(r, dict):
            raise PlannerError(f"{where} is not a mapping", "each record: optimizer, params, processes, seconds, "
                                                             "host_memory_GBps")
        bad = set(r) - RECORD_KEYS
        if bad:
            raise PlannerError(f"{where}: unknown key(s) {', '.join(sorted(map(str, bad)))}",
                               "valid: " + ", ".join(sorted(RECORD_KEYS)))
        missing = [k for k in ("optimizer", "params", "seconds") if k not in r]
        if missing:
            raise PlannerError(f"{where}: missing {', '.join(missing)}", "each record needs optimizer, params and seconds")
        if r["optimizer"] not in OPTIMIZERS:
            raise PlannerError(f"{where}: optimizer {r['optimizer']!r} is not a one-pass fp32 Adam the model prices",
                               "valid: " + ", ".join(OPTIMIZERS) + " (torch's foreach / for-loop Adam take several "
                               "passes: planner/offload.py [cpu-adam])")
        params = _positive(r["params"], "params", where, count=True)
        procs = r.get("processes", 1)
        if isinstance(procs, bool) or not isinstance(procs, int) or procs < 1:
            raise PlannerError(f"{where}: processes {procs!r} is not a positive integer", "e.g. processes: 8")
        seconds = _positive(r["seconds"], "seconds", where)
        bw = _positive(r["host_memory_GBps"], "host_memory_GBps", where) if "host_memory_GBps" in r else None
        notes = [str(r["source"])] if r.get("source") else []
        out.append(_measurement(where, r["optimizer"], params, procs, seconds, 0.0, _bandwidth(bw, opts, where),
                                notes=notes))
    return out


def _zero_log(lines: list[str], name: str, opts: Options) -> list[dict]:
    steps = []  # (line number, optimizer_step ms)
    for n, line in enumerate(lines, 1):
        m = _ZERO_LINE.search(line)
        if not m:
            continue
        timers = dict(_TIMER.findall(m.group(1)))
        if "optimizer_step" not in timers:
            continue  # the engine's own breakdown (fwd, bwd, step)
        if "optimizer_gradients" not in timers:
            raise PlannerError(f"{name}:{n}: optimizer_step without optimizer_gradients: a ZeRO-3 line",
                               "give a ZeRO-1/2 run's log (stage_1_and_2.py's OPTIMIZER_TIMERS), or a record of the "
                               "Adam step alone: ZeRO-3's optimizer_step spans its sub-groups' copies too")
        try:
            ms = float(timers["optimizer_step"])
        except ValueError:
            raise PlannerError(f"{name}:{n}: optimizer_step {timers['optimizer_step']!r} is not a number",
                               "the line as DeepSpeed writes it: ... | optimizer_step: 912.40") from None
        if not math.isfinite(ms) or ms < 0:
            raise PlannerError(f"{name}:{n}: optimizer_step {ms:g} ms", "a time in ms, at least 0")
        steps.append((n, ms))
    if opts.params is None or opts.processes is None:
        raise PlannerError(f"{name}: a DeepSpeed ZeRO log does not say the partition a rank steps nor the node's ranks",
                           "pass --params (a rank's optimizer partition, elements: parameters / data-parallel size) "
                           "and --processes (the ranks of one node)")
    kept = steps[opts.warmup:]
    skipped = [n for n, ms in kept if ms == 0.0]
    kept = [(n, ms) for n, ms in kept if ms > 0.0]
    if not kept:
        raise PlannerError(f"{name}: no optimizer_step line after the {opts.warmup} warm-up line(s)"
                           + (f" and {len(skipped)} overflow line(s) of 0.00" if skipped else ""),
                           "log more steps (wall_clock_breakdown: true), or lower --warmup")
    if opts.pcie_GBps is None:
        raise PlannerError(f"{name}: DeepSpeed's optimizer_step spans the fp32 partition's copy to the GPU: the host "
                           "link's rate is needed to subtract it", "pass --pcie-gbps (GB/s per direction, PCIe Gen5 "
                                                                   "x16: 64), or --hardware with pcie_GBps")
    med = median(ms for _, ms in kept) / 1e3
    copy = opts.params * FP32_BYTES / (opts.pcie_GBps * 1e9)
    notes = [f"optimizer_step median of {len(kept)} line(s), {opts.warmup} warm-up line(s) dropped"
             + (f", {len(skipped)} overflow line(s) of 0.00 left out" if skipped else ""),
             f"subtracted: the fp32 partition's copy to the GPU, {opts.params:g} x {FP32_BYTES:g} B over "
             f"{opts.pcie_GBps:g} GB/s (stage_1_and_2.py @38327e07 l. 1879-1882)"]
    return [_measurement(f"{name}:{kept[0][0]}-{kept[-1][0]}", "deepspeed_cpu_adam", opts.params, opts.processes, med,
                         copy, _bandwidth(None, opts, name), steps=len(kept), notes=notes)]


def _adam_test(lines: list[str], name: str, opts: Options) -> list[dict]:
    out = []
    for n, line in enumerate(lines, 1):
        if (m := _TEST1.match(line)):
            secs, params, script = m.group(1), ADAM_TEST1_PARAMS, "adam_test1.py"
        elif (m := _TEST.search(line)):
            secs, params, script = m.group(2), ADAM_TEST_PARAMS, "adam_test.py"
            opts.warnings.append(f"{name}:{n}: torch_time {m.group(1)} s left out (torch.optim.Adam's multi-pass loop is "
                                 "not the one-pass Adam the model prices)")
        else:
            continue
        where = f"{name}:{n}"
        s = _positive(secs, "the step time", where)
        out.append(_measurement(where, "deepspeed_cpu_adam", params, 1, s, 0.0, _bandwidth(None, opts, where),
                                notes=[f"DeepSpeed tests/perf/{script}: one process, {params:,} elements, the mean of "
                                       "100 steps"]))
    return out


def read_input(path: Path, opts: Options) -> tuple[str, list[dict]]:
    """(kind, measurements) of one input file: a YAML record file, a DeepSpeed ZeRO log or a DeepSpeed benchmark's
    output (module docstring)."""
    name = str(path)
    text = files.read_text(path)
    lines = text.splitlines()
    if any(_ZERO_LINE.search(ln) and "optimizer_step" in ln for ln in lines):
        return "deepspeed-zero-log", _zero_log(lines, name, opts)
    if any(_TEST1.match(ln) or _TEST.search(ln) for ln in lines):
        return "deepspeed-adam-test", _adam_test(lines, name, opts)
    from ..catalog import read_yaml

    try:
        data = read_yaml(path)
    except PlannerError:
        data = None
    if isinstance(data, (list, dict)):
        return "record", _records(data, name, opts)
    raise PlannerError(f"{name}: neither host Adam records nor a DeepSpeed log with optimizer_step timings",
                       "give a YAML list of records (optimizer, params, processes, seconds, host_memory_GBps), a "
                       "DeepSpeed ZeRO-1/2 log with wall_clock_breakdown, or tests/perf/adam_test1.py's output")


def calibrate(paths: list[Path], opts: Options):
    """The host_adam section (profile.HostAdamCalibration) from the inputs."""
    from ..profile import HostAdamCalibration

    if not paths:
        raise PlannerError("no input files", "e.g. planner calibrate host-adam ds.log --params 1.004e9 --processes 8 "
                                             "--hardware h100-sxm -o profile.yaml")
    inputs, meas = [], []
    for p in paths:
        if not files.is_file(Path(p)):
            raise PlannerError(f"{p}: no such file", "give a host Adam record YAML or a DeepSpeed log")
        kind, rows = read_input(Path(p), opts)
        inputs.append({"name": str(p), "sha256": hashlib.sha256(files.read_bytes(Path(p))).hexdigest(), "kind": kind})
        meas += rows
    return HostAdamCalibration(
        efficiency=float(median(m["efficiency"] for m in meas)), hardware=opts.hardware,
        created=datetime.now(timezone.utc).replace(microsecond=0), inputs=inputs, measurements=meas)


__all__ = ["ADAM_TEST1_PARAMS", "ADAM_TEST_PARAMS", "FP32_ADAM_BYTES", "OPTIMIZERS", "Options", "calibrate", "read_input"]
