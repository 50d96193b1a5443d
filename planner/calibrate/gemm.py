"""GEMM calibration: time the model's GEMM shapes on a GPU, or ingest measurements, and
turn them into the `gemm` section of a calibration profile (planner/profile.py
GemmCalibration), the measured throughput the compute model uses.

Units: FLOPs, seconds and FLOP/s inside. Files and the profile YAML give throughput as
`tflops` (1e12 FLOP/s) = 2 M N K / time, for C[M,N] = A[M,K] @ B[K,N] (K = reduction).

What is measured
    compute.model_gemm_shapes(model, tp, T, ep) lists the forward GEMMs of every kind of
    layer the model has (planner/layers/) and of the output layer for T tokens per
    micro-batch on one GPU after the TP split t, exactly the shapes step.py prices. `benchmark_shapes`
    collects the distinct integer shapes of models x TP sizes x sequence lengths x
    micro-batches; a fractional dimension is rounded up [1].
    `run_gemm_benchmark` times them with PyTorch (an optional extra, `pip install .[gpu]`):
    bf16 through torch.mm(A, W.t()), the nn.Linear layout (weight W[N, K] row-major), and
    fp8 e4m3 through torch._scaled_mm with per-tensor scales of 1 and a bf16 output, on
    GPUs with FP8 tensor cores. Inputs are torch.randn (random data: zeros or constants run
    faster than real data [3]); several input sets rotate so that the operands of one call
    are not in L2 from the call before (at least twice the L2 size in all, at most 8 sets)
    [3]. After `warmup` untimed calls each of `repeats` calls is timed with its own pair of
    torch.cuda.Event records [2]; a row keeps the median time (robust to a stray slow
    call) and the fastest and slowest ones as `tflops_best` / `tflops_worst`. Method after
    mamf-finder [4] (warm-up, repeats, CUDA events, torch.mm / torch._scaled_mm), which
    times a mean over a loop with one event pair instead.
    Benchmarks like these run a few seconds and see boost clocks; a training job runs the
    tensor cores for hours at the power limit (compute.py SUSTAINED_TENSOR_FRACTION and its
    sources). With `sustained=True` (`--sustained`) the sweep first heats the GPU for
    SUSTAINED_HEAT_S seconds of back-to-back GEMMs on the largest shape, and each shape then
    runs back to back for at least SUSTAINED_WARM_S seconds before its timed calls, so that
    the clock is the one the power limit allows under continuous load (an assumption: the
    clock drops within about a hundred back-to-back kernels in the measurement compute.py
    cites; the thermal steady state of an hours-long job may lie lower still). The profile
    then says `sustained: true`; nvidia-smi's SM clock, power and temperature after the
    sweep go into its provenance.

From measurements to any shape
    compute.py ("GEMMs from measurements": calibrated_gemm_rate, calibrated_gemm_time,
    forward_gemm_times) prices any shape from the rows; the scheme's name is recorded in the
    profile (`interpolation`).

Ingesting (`ingest`)
    CSV with a header (M, N, K, dtype, tflops; optional gpu, batch, source, name, method),
    JSON or YAML: a list of rows, or a mapping whose `measurements:` (or `rows:`) holds the
    list (the project's reference gemm_measurements.yaml, whose rows carry extra keys), or a
    planner profile's `gemm:` section. Rows without a numeric M, N and K (best-of-sizes
    summaries, grouped GEMMs), batched rows (batch != 1), precisions the planner does not
    model (tf32, fp32, int8) and rows of other GPUs (--gpu-filter) are skipped, each with a
    reason; a row whose fields are present but wrong is an error naming the file, the line
    (YAML, CSV) or row (JSON) and the field.

References
[1] Narayanan et al. 2021 (Megatron-LM), sec. 3: the TP split of the attention and MLP
    GEMMs; step.py's docstring. Megatron-LM pads the vocabulary to a multiple of
    128 x tp (`--make-vocab-size-divisible-by`), so V/t is rounded up for the benchmark.
[2] PyTorch documentation, torch.cuda.Event.elapsed_time: "Returns the time elapsed in
    milliseconds after the event was recorded and before the end_event was recorded."
[3] Azure AI-benchmarking-guide GEMM runs (project reference gemm_measurements.yaml,
    source azure_aibg: random / trigonometric init, rotating 512 MB buffers, notes citing
    Horace He on predictable data running faster).
[4] stas00/ml-engineering, benchmarks/mamf-finder.py: torch.mm for bf16, torch._scaled_mm
    for fp8, warm-up iterations, then CUDA-event timing.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence


from .. import __version__
from ..compute import TFLOPS, model_gemm_shapes, sm_count
from ..errors import PlannerError
from ..schema import MAX_COUNT
from ..files import compose_yaml, parse_json, parse_yaml, read_bytes
from ..profile import GemmCalibration, GemmProvenance, GemmRow, GemmSourceFile

DEFAULT_WARMUP = 10
DEFAULT_REPEATS = 30
SUSTAINED_HEAT_S = 30.0  # --sustained: heat-up before the sweep (assumption, see the module docstring)
SUSTAINED_WARM_S = 1.0  # --sustained: back-to-back running of each shape before it is timed
L2_ROTATION = 2.0  # input sets cover at least this many L2 sizes [3]
MAX_INPUT_SETS = 8
FP8_ALIGN = 16  # torch._scaled_mm needs K and N divisible by 16 (PyTorch ScaledBlas checks)


# ============================================================================= benchmark shapes
@dataclass
class BenchShape:
    """One integer GEMM shape to time and the model GEMMs that have it."""

    M: int
    N: int
    K: int
    layers: list[str] = field(default_factory=list)

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K


def benchmark_shapes(models, tps: Sequence[int], seq_lens: Sequence[Optional[int]], micro_batches: Sequence[int],
                     eps: Sequence[int] = (1,)) -> list[BenchShape]:
    """Distinct integer shapes of every model x tp x seq x micro-batch (sorted by M, N, K).

    seq_lens may hold None: the model's training length as a planned job takes it
    (plan.default_seq_len with the recipe: training.seq_len, else at most plan.HF_DEFAULT_SEQ).
    A TP size must divide the attention heads (Megatron-LM's rule); other fractional dimensions
    (V/t, f/t) are rounded up [1].
    Every layer kind's GEMMs are listed (compute.model_gemm_shapes: attention, MLA, dense and
    expert MLPs, the mixers' projections), the per-expert GEMMs at each expert-parallel size of
    `eps`, which must divide the routed experts (balanced routing)."""
    from ..plan import default_seq_len

    found: dict[tuple[int, int, int], BenchShape] = {}
    if any(ep != 1 for ep in eps) and not any(m.moe is not None for m in models):
        raise PlannerError(f"--ep {','.join(str(e) for e in eps)}: none of the models has experts",
                           "expert-parallel sizes apply to mixture-of-experts models; leave --ep out")
    for model in models:
        for ep in eps:
            if model.moe is not None and model.moe.num_experts % ep:
                raise PlannerError(f"--ep {ep} does not divide the {model.moe.num_experts} routed experts of {model.name}",
                                   "choose expert-parallel sizes among the divisors of the expert count")
        for t in tps:
            if model.num_attention_heads % t:
                raise PlannerError(
                    f"--tp {t} does not divide the {model.num_attention_heads} attention heads of {model.name}",
                    "tensor parallelism splits whole heads: use a divisor of the head count",
                )
            for s in seq_lens:
                seq = default_seq_len(model, recipe=True) if s is None else s
                for b in micro_batches:
                    T = seq * b
                    gemms = [g._replace(name=f"{g.name} ep={ep}") if model.moe is not None else g
                             for ep in (eps if model.moe is not None else (1,))
                             for g in model_gemm_shapes(model, t, T, ep)]
                    for g in gemms:
                        dims = []
                        notes = []
                        for axis, v in zip("MNK", (g.M, g.N, g.K)):
                            v = float(v)
                            iv = int(math.ceil(v - 1e-9))
                            if abs(iv - v) > 1e-9:
                                notes.append(f"{axis} {v:.2f} rounded up")
                            dims.append(iv)
                        key = tuple(dims)
                        label = f"{model.name} tp={t} T={T} {g.name}" + (f" ({', '.join(notes)})" if notes else "")
                        found.setdefault(key, BenchShape(*key)).layers.append(label)
    return [found[k] for k in sorted(found)]


# ============================================================================= benchmark (torch)
@dataclass
class BenchmarkResult:
    rows: list[GemmRow]
    skipped: list[str]
    env: dict  # GemmProvenance fields: device, driver, library versions, clocks
    sm_count: Optional[int]
    fp8_supported: bool
    sustained: bool = False


def _try(fn: Callable[[], Any]) -> Optional[str]:
    try:
        v = fn()
    except Exception:  # noqa: BLE001 - provenance is best effort; a missing tool leaves the field empty
        return None
    return None if v is None else str(v).strip() or None


def _nvidia_smi(index: int, query: str) -> Optional[str]:
    out = subprocess.run(
        ["nvidia-smi", f"--id={index}", f"--query-gpu={query}", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=20, check=True,
    ).stdout.strip()
    return out.splitlines()[0].strip() if out else None


def _package_version(*names: str) -> Optional[str]:
    from importlib import metadata

    for n in names:
        try:
            return f"{n} {metadata.version(n)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def _import_torch():
    try:
        import torch  # noqa: PLC0415 - optional extra
    except ImportError:
        raise PlannerError(
            "PyTorch is not installed: `calibrate gemm --run` times GEMMs with PyTorch on the local GPU",
            "pip install '.[gpu]' (PyTorch with CUDA or ROCm), or ingest measurements with --from FILE",
        ) from None
    if not torch.cuda.is_available():
        raise PlannerError(
            "PyTorch sees no GPU (torch.cuda.is_available() is False): `calibrate gemm --run` needs a CUDA or ROCm GPU",
            "run it on the GPU machine (check the driver with nvidia-smi and that torch is a CUDA build), "
            "or ingest measurements with --from FILE",
        )
    return torch


def run_gemm_benchmark(shapes: Sequence[BenchShape], dtypes: Sequence[str] = ("bf16", "fp8"),
                       warmup: int = DEFAULT_WARMUP, repeats: int = DEFAULT_REPEATS, device: int = 0,
                       sustained: bool = False, heat_s: float = SUSTAINED_HEAT_S, warm_s: float = SUSTAINED_WARM_S,
                       progress: Optional[Callable[[str], None]] = None) -> BenchmarkResult:
    """Time each shape in each dtype on one GPU with PyTorch (see the module docstring).

    Raises PlannerError without PyTorch or without a GPU. A shape that fails (out of
    memory, a shape the library rejects) is skipped with its reason."""
    torch = _import_torch()
    props = torch.cuda.get_device_properties(device)
    cap = (int(props.major), int(props.minor))
    hip = getattr(torch.version, "hip", None)
    arch = str(getattr(props, "gcnArchName", ""))
    f8 = getattr(torch, "float8_e4m3fnuz", None) if (hip and "gfx94" in arch) else getattr(torch, "float8_e4m3fn", None)
    # FP8 tensor cores: NVIDIA compute capability 8.9 (Ada) and 9.0+ (Hopper, Blackwell); AMD gfx94x/95x (MI300, MI355)
    has_fp8_units = ("gfx94" in arch or "gfx95" in arch) if hip else cap >= (8, 9)
    fp8_ok = f8 is not None and hasattr(torch, "_scaled_mm") and has_fp8_units
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    env = dict(
        device_name=str(props.name),
        compute_capability=f"{cap[0]}.{cap[1]}",
        driver_version=_try(lambda: _nvidia_smi(device, "driver_version")),
        torch_version=str(torch.__version__),
        cuda_version=_try(lambda: torch.version.cuda),
        hip_version=_try(lambda: hip),
        cublas_version=_try(lambda: _package_version("nvidia-cublas-cu12", "nvidia-cublas-cu13", "nvidia-cublas-cu11", "nvidia-cublas")),
    )
    dev = f"cuda:{device}"
    rows: list[GemmRow] = []
    skipped: list[str] = []
    if sustained and shapes:
        big = max(shapes, key=lambda s: s.flops)
        if progress is not None:
            progress(f"heating the GPU for {heat_s:g} s on {big.M}x{big.N}x{big.K} bf16 (--sustained)")
        try:
            _run_for(torch, *_operands(torch, dev, big, "bf16", None, l2), heat_s)
        except Exception as e:  # noqa: BLE001
            skipped.append(f"heat-up on {big.M}x{big.N}x{big.K}: {type(e).__name__}: {_first_line(e)}")
        _free(torch)
    for dt in dtypes:
        if dt == "fp8" and not fp8_ok:
            skipped.append(f"fp8: {props.name} (compute capability {cap[0]}.{cap[1]}) has no FP8 GEMM in this PyTorch")
            continue
        for s in shapes:
            tag = f"{s.M}x{s.N}x{s.K} {dt}"
            if dt == "fp8" and (s.K % FP8_ALIGN or s.N % FP8_ALIGN):
                skipped.append(f"{tag}: torch._scaled_mm needs K and N divisible by {FP8_ALIGN}")
                continue
            try:
                call, n_sets = _operands(torch, dev, s, dt, f8, l2)
                times = _time_calls(torch, call, n_sets, warmup, repeats, warm_s if sustained else 0.0)
            except Exception as e:  # noqa: BLE001 - out of memory or an unsupported shape: report, go on
                skipped.append(f"{tag}: {type(e).__name__}: {_first_line(e)}")
                _free(torch)
                continue
            _free(torch)
            med = statistics.median(times)
            rows.append(GemmRow(
                M=s.M, N=s.N, K=s.K, dtype=dt, tflops=round(s.flops / med / TFLOPS, 3),
                source=f"measured on {props.name}" + (" (sustained)" if sustained else ""),
                gpu=str(props.name),
                method="torch.mm(A, W.t()), bf16" if dt == "bf16" else "torch._scaled_mm(A, W.t()), e4m3, scales 1, bf16 out",
                layers=list(s.layers), repeats=repeats,
                tflops_best=round(s.flops / min(times) / TFLOPS, 3),
                tflops_worst=round(s.flops / max(times) / TFLOPS, 3),
            ))
            if progress is not None:
                progress(f"{tag}: {rows[-1].tflops:,.1f} TFLOP/s (median of {repeats})")
    env["clocks_after"] = _try(lambda: _nvidia_smi(device, "clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"))
    return BenchmarkResult(rows, skipped, env, int(props.multi_processor_count), fp8_ok, sustained)


def _first_line(e: Exception) -> str:
    t = str(e).strip()
    return t.splitlines()[0][:160] if t else ""


def _free(torch) -> None:
    try:
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


def _operands(torch, dev: str, s: BenchShape, dt: str, f8, l2_bytes: int):
    """(call(i), n_sets): one GEMM on input set i; the sets rotate past the L2 cache [3]."""
    elt = 1 if dt == "fp8" else 2
    set_bytes = (s.M * s.K + s.N * s.K) * elt
    n_sets = max(1, min(MAX_INPUT_SETS, math.ceil(L2_ROTATION * l2_bytes / max(set_bytes, 1))))
    a_list, w_list = [], []
    for _ in range(n_sets):
        a = torch.randn(s.M, s.K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(s.N, s.K, device=dev, dtype=torch.bfloat16)  # nn.Linear weight [out, in]
        if dt == "fp8":
            a, w = a.to(f8), w.to(f8)
        a_list.append(a)
        w_list.append(w)
    if dt == "fp8":
        one = torch.tensor(1.0, device=dev, dtype=torch.float32)

        def call(i):
            r = torch._scaled_mm(a_list[i], w_list[i].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            return r[0] if isinstance(r, tuple) else r  # torch < 2.4 returned (out, amax)
    else:
        def call(i):
            return torch.mm(a_list[i], w_list[i].t())

    return call, n_sets


def _run_for(torch, call, n_sets: int, seconds: float) -> None:
    """Call back to back until `seconds` of wall time have passed (synchronizing every 8 calls)."""
    if seconds <= 0:
        return
    t0 = time.perf_counter()
    i = 0
    while True:
        call(i % n_sets)
        i += 1
        if i % 8 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - t0 >= seconds:
                return


def _time_calls(torch, call, n_sets: int, warmup: int, repeats: int, warm_s: float) -> list[float]:
    """Seconds of each of `repeats` calls, each between its own pair of CUDA events [2]."""
    for i in range(warmup):
        call(i % n_sets)
    _run_for(torch, call, n_sets, warm_s)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for i, (start, end) in enumerate(events):
        start.record()
        call(i % n_sets)
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) * 1e-3 for start, end in events]  # elapsed_time is in ms [2]
    bad = [t for t in times if not t > 0]
    if bad:
        raise RuntimeError(f"non-positive event time {bad[0]!r} s")
    return times


def calibration_from_run(res: BenchmarkResult, hw=None, models: Sequence[str] = (), tps: Sequence[int] = (),
                         seq_lens: Sequence[int] = (), micro_batches: Sequence[int] = (), warmup: int = DEFAULT_WARMUP,
                         repeats: int = DEFAULT_REPEATS, notes: Sequence[str] = (), created: Optional[datetime] = None,
                         heat_s: float = SUSTAINED_HEAT_S, warm_s: float = SUSTAINED_WARM_S) -> GemmCalibration:
    if not res.rows:
        raise PlannerError(
            "no GEMM could be timed: " + ("; ".join(res.skipped[:3]) or "no shapes"),
            "check free GPU memory and the --dtype list",
        )
    timing = (f"torch.cuda.Event pair around each call; median of {repeats} timed calls after {warmup} warm-up "
              "calls; torch.randn inputs rotating over enough sets to cover 2x L2")
    if res.sustained:
        timing += f"; sustained: {heat_s:g} s heat-up, then each shape back to back for {warm_s:g} s before timing"
    return GemmCalibration(
        gpu=res.env["device_name"],
        sm_count=res.sm_count,
        peak_bf16_TFLOPS=hw.bf16_TFLOPS if hw is not None else None,
        peak_fp8_TFLOPS=hw.fp8_TFLOPS if hw is not None else None,
        sustained=res.sustained,
        power_limit_w=power_limit_from_smi(res.env.get("clocks_after")),
        rows=res.rows,
        provenance=GemmProvenance(
            method="measured", created=created or _now(), planner_version=__version__, skipped=res.skipped,
            timing=timing, warmup=warmup, repeats=repeats, models=list(models), tp=list(tps), seq_len=list(seq_lens),
            micro_batch=list(micro_batches), notes=list(notes), **res.env,
        ),
    )


def power_limit_from_smi(clocks_after: Optional[str]) -> Optional[float]:
    """The power.limit field (W) of the `clocks_after` nvidia-smi line ("clocks.sm,
    clocks.max.sm, power.draw, power.limit, temperature.gpu"), or None when absent."""
    if not clocks_after:
        return None
    cells = [c.strip() for c in clocks_after.split(",")]
    if len(cells) < 4:
        return None
    try:
        w = float(cells[3].split()[0])
    except (ValueError, IndexError):
        return None
    return w if w > 0 and w == w and w != float("inf") else None


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


# ============================================================================= ingest
_COLUMN_ALIASES = {
    "m": "M", "n": "N", "k": "K",
    "dtype": "dtype", "type": "dtype", "precision": "dtype",
    "tflops": "tflops", "tflop/s": "tflops", "tflops/s": "tflops",
    "gpu": "gpu", "device": "gpu", "batch": "batch", "source": "source", "name": "name", "method": "method",
}
_REQUIRED = ("M", "N", "K", "dtype", "tflops")
_DTYPE_16 = {"bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
             "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16"}
_NOT_MODELLED = {"tf32", "fp32", "float32", "float", "torch.float32", "fp64", "float64", "double",
                 "int8", "i8", "int4", "fp4", "nvfp4", "mxfp4", "fp6", "mxfp6"}
DTYPE_HINT = "valid: bf16, fp16, fp8 (fp8_e4m3, fp8_e5m2, e4m3, float8_e4m3fn, ...); tf32, fp32 and int8 rows are skipped"


def normalize_dtype(text: Any) -> tuple[Optional[str], Optional[str]]:
    """('bf16' | 'fp16' | 'fp8', None), or (None, why it is skipped); raises ValueError if unknown."""
    s = str(text).strip().lower().replace("-", "_")
    if s in _DTYPE_16:
        return _DTYPE_16[s], None
    if s.startswith(("fp8", "float8", "torch.float8")) or s in ("e4m3", "e5m2", "e4m3fn", "e4m3fnuz"):
        return "fp8", None
    if s in _NOT_MODELLED or s.startswith("mx") or s.startswith("int"):
        return None, f"dtype {text!r} is not a training precision the planner models (bf16, fp8)"
    raise ValueError(s)


@dataclass
class IngestResult:
    rows: list[GemmRow]
    skipped: list[str]  # 'file:where: reason'
    other_gpus: int  # rows dropped by the GPU filter
    files: list[GemmSourceFile]


def _positive_int(where: str, key: str, v: Any) -> int:
    x: Any = None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        x = v
    elif isinstance(v, str):
        try:
            x = float(v.strip().replace("_", "").replace(",", ""))
        except ValueError:
            x = None
    if x is not None and math.isfinite(x) and 0 < x <= MAX_COUNT and float(x) == int(x):
        return int(x)
    raise PlannerError(f"{where}: field `{key}`: {v!r} is not a positive integer up to {MAX_COUNT:,}",
                       f"`{key}` is a GEMM dimension, e.g. 4096")


def _positive_float(where: str, key: str, v: Any) -> float:
    x = None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        x = float(v)
    elif isinstance(v, str):
        try:
            x = float(v.strip().replace(",", ""))
        except ValueError:
            x = None
    if x is None or not math.isfinite(x) or x <= 0:
        raise PlannerError(f"{where}: field `{key}`: {v!r} is not a positive number",
                           "tflops is the measured throughput 2*M*N*K/time in 1e12 FLOP/s, e.g. 794.5")
    return x


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _row(where: str, raw: Any, gpu_filter: Optional[str]) -> tuple[Optional[GemmRow], Optional[str], bool]:
    """(row, None, False) | (None, skip reason, is_other_gpu)."""
    if not isinstance(raw, dict):
        raise PlannerError(f"{where}: expected a mapping with M, N, K, dtype, tflops, got {type(raw).__name__}",
                           "one row per GEMM: {M: 4096, N: 4096, K: 4096, dtype: bf16, tflops: 790}")
    gpu = raw.get("gpu")
    gpu = None if _blank(gpu) else str(gpu).strip()
    if gpu_filter is not None:
        if gpu is None:
            return None, f"no gpu field to match --gpu-filter {gpu_filter!r}", False
        if gpu_filter.lower() not in gpu.lower():
            return None, f"gpu {gpu!r} does not match --gpu-filter", True
    missing = [k for k in ("M", "N", "K") if _blank(raw.get(k))]
    if missing:
        other_keys = [k for k in raw if k in ("shape", "M_per_group", "groups")]
        what = f" (has {', '.join(other_keys)})" if other_keys else ""
        return None, f"no numeric {'/'.join(missing)}{what}: not a single GEMM shape", False
    dims = [_positive_int(where, k, raw[k]) for k in ("M", "N", "K")]
    batch = raw.get("batch")
    if not _blank(batch):
        b = _positive_int(where, "batch", batch)
        if b != 1:
            return None, f"batched GEMM (batch {b}): the planner's layer GEMMs are single products", False
    if _blank(raw.get("dtype")):
        raise PlannerError(f"{where}: field `dtype`: missing", DTYPE_HINT)
    try:
        dtype, why = normalize_dtype(raw["dtype"])
    except ValueError:
        raise PlannerError(f"{where}: field `dtype`: unknown precision {raw['dtype']!r}", DTYPE_HINT) from None
    if dtype is None:
        return None, why, False
    if _blank(raw.get("tflops")):
        raise PlannerError(f"{where}: field `tflops`: missing", "give the measured throughput in TFLOP/s (1e12 FLOP/s)")
    tflops = _positive_float(where, "tflops", raw["tflops"])
    src = where + (f" ({raw['source']})" if not _blank(raw.get("source")) else "")
    method = raw.get("method")
    name = raw.get("name")
    return GemmRow(
        M=dims[0], N=dims[1], K=dims[2], dtype=dtype, tflops=tflops, source=src, gpu=gpu,
        dtype_as_given=None if str(raw["dtype"]).strip() == dtype else str(raw["dtype"]).strip(),
        method=None if _blank(method) else str(method),
        layers=[] if _blank(name) else [str(name)],
    ), None, False


def _yaml_rows(text: str, p: Path) -> list[tuple[str, Any]]:
    data = parse_yaml(text, str(p))
    node = compose_yaml(text, str(p))
    items, seq_node, key = _row_list(data, p)
    if seq_node is None:
        seq_node = node
        for k_ in key:
            seq_node = next(v for kn, v in seq_node.value if kn.value == k_)
    lines = [n.start_mark.line + 1 for n in seq_node.value]
    return [(f"{p.name}:{ln}", raw) for ln, raw in zip(lines, items)]


def _row_list(data: Any, p: Path) -> tuple[list, Any, tuple[str, ...]]:
    """The rows of a parsed YAML/JSON document and the key path to them."""
    if isinstance(data, list):
        return data, None, ()
    if isinstance(data, dict):
        for key in (("measurements",), ("rows",), ("gemm", "rows")):
            v = data
            for k_ in key:
                v = v.get(k_) if isinstance(v, dict) else None
            if isinstance(v, list):
                return v, None, key
    raise PlannerError(f"{p}: no list of GEMM rows found",
                       "give a list of rows, or a mapping with a `measurements:` (or `rows:`) list; "
                       "each row: M, N, K, dtype, tflops")


def _csv_fields(line: str, p: Path, lineno: int) -> list[str]:
    """The fields of one CSV line; PlannerError naming the line for what the csv module
    rejects (e.g. a field longer than its limit, csv.field_size_limit(): 131,072 characters)."""
    try:
        return next(csv.reader(io.StringIO(line)), [])
    except csv.Error as e:
        raise PlannerError(f"{p.name}:{lineno}: unreadable CSV line ({e})", "one row per line: M,N,K,dtype,tflops, ...") from None


def _csv_rows(text: str, p: Path) -> tuple[list[tuple[str, Any]], list[str]]:
    provenance, body = [], []
    for i, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            if re.match(r"^\s*#\s*source\s*:", line, re.IGNORECASE):
                provenance.append(line.strip().lstrip("#").strip())
            continue
        if line.strip():
            body.append((i, line))
    if not body:
        raise PlannerError(f"{p}: no CSV header or rows", "first line: M,N,K,dtype,tflops (optional: gpu, batch, source)")
    header_line, header = body[0]
    cols = _csv_fields(header, p, header_line)
    names = []
    for c in cols:
        key = _COLUMN_ALIASES.get(c.strip().lower())
        names.append(key if key is not None else c.strip())
    for req in _REQUIRED:
        if req not in names:
            raise PlannerError(f"{p}:{header_line}: the CSV header has no `{req}` column (header: {header.strip()!r})",
                               "header: M,N,K,dtype,tflops (optional: gpu, batch, source, name, method)")
    out = []
    for ln, line in body[1:]:
        vals = _csv_fields(line, p, ln)
        if len(vals) != len(names):
            raise PlannerError(f"{p.name}:{ln}: {len(vals)} fields where the header (line {header_line}) has {len(names)}",
                               "one value per header column; quote fields that contain commas")
        out.append((f"{p.name}:{ln}", dict(zip(names, (v.strip() for v in vals)))))
    return out, provenance


def ingest(path: str | Path, gpu_filter: Optional[str] = None) -> IngestResult:
    """Read GEMM measurements from a CSV, JSON or YAML file (see the module docstring)."""
    p = Path(path)
    raw_bytes = read_bytes(p, "give a CSV, JSON or YAML file of GEMM measurements")
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerError(f"{p}: not a text file", "give a CSV, JSON or YAML file of GEMM measurements") from None
    suffix = p.suffix.lower()
    provenance: list[str] = []
    if suffix == ".csv":
        items, provenance = _csv_rows(text, p)
    elif suffix == ".json":
        data = parse_json(text, str(p))
        rows, _, _ = _row_list(data, p)
        items = [(f"{p.name}: row {i}", r) for i, r in enumerate(rows, start=1)]
    elif suffix in (".yaml", ".yml"):
        items = _yaml_rows(text, p)
        provenance = [ln.strip().lstrip("#").strip() for ln in text.splitlines()
                      if re.match(r"^\s*#\s*source\s*:", ln, re.IGNORECASE)]
    else:
        raise PlannerError(f"{p}: unknown file type {p.suffix!r}", "name the file .csv, .json or .yaml (.yml)")
    rows, skipped, other = [], [], 0
    for where, raw in items:
        row, why, is_other = _row(where, raw, gpu_filter)
        if row is not None:
            rows.append(row)
        elif is_other:
            other += 1
        else:
            skipped.append(f"{where}: {why}")
    if not rows:
        reason = (f"{other} row(s) of other GPUs" if other else "") + ("; " if other and skipped else "") + (
            f"{len(skipped)} skipped" if skipped else "")
        raise PlannerError(
            f"{p}: no usable GEMM rows ({reason or 'the file lists none'})",
            "check --gpu-filter (a case-insensitive part of the gpu field) and that rows have M, N, K, dtype (bf16, fp16, fp8) and tflops",
        )
    src = GemmSourceFile(name=p.name, sha256=hashlib.sha256(raw_bytes).hexdigest(), rows_used=len(rows),
                         rows_skipped=len(skipped) + other, provenance=provenance)
    return IngestResult(rows, skipped, other, [src])


def ingest_files(paths: Sequence[str | Path], gpu_filter: Optional[str] = None) -> IngestResult:
    """ingest() each file; rows from more than one GPU need --gpu-filter (a profile is one GPU's)."""
    res = IngestResult([], [], 0, [])
    for p in paths:
        r = ingest(p, gpu_filter)
        res.rows += r.rows
        res.skipped += r.skipped
        res.other_gpus += r.other_gpus
        res.files += r.files
    gpus = sorted({r.gpu for r in res.rows if r.gpu})
    if gpu_filter is None and len(gpus) > 1:
        shown = ", ".join(repr(g) for g in gpus[:6]) + (f" and {len(gpus) - 6} more" if len(gpus) > 6 else "")
        raise PlannerError(
            f"{', '.join(str(p) for p in paths)}: rows from {len(gpus)} GPUs ({shown}); a profile describes one GPU",
            "choose one with --gpu-filter TEXT (a case-insensitive part of the gpu field, e.g. --gpu-filter 'H100 SXM')",
        )
    return res


def calibration_from_ingest(res: IngestResult, hw=None, gpu_filter: Optional[str] = None, notes: Sequence[str] = (),
                            created: Optional[datetime] = None) -> GemmCalibration:
    gpus = sorted({r.gpu for r in res.rows if r.gpu})
    gpu = " | ".join(gpus) if gpus else (hw.name if hw is not None else "unspecified")
    return GemmCalibration(
        gpu=gpu,
        sm_count=sm_count(hw) if hw is not None and hw.compute is not None else None,
        peak_bf16_TFLOPS=hw.bf16_TFLOPS if hw is not None else None,
        peak_fp8_TFLOPS=hw.fp8_TFLOPS if hw is not None else None,
        rows=res.rows,
        provenance=GemmProvenance(
            method="ingested", created=created or _now(), planner_version=__version__, files=res.files,
            gpu_filter=gpu_filter, rows_of_other_gpus=res.other_gpus, skipped=res.skipped, notes=list(notes),
        ),
    )


__all__ = [
    "BenchShape", "BenchmarkResult", "IngestResult", "benchmark_shapes", "calibration_from_ingest",
    "calibration_from_run", "ingest", "ingest_files", "normalize_dtype", "run_gemm_benchmark",
]
