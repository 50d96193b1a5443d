"""Failures, checkpoints and goodput; training time, GPU-hours, energy and cost.

Pure functions for the `budget` command. Units are SI throughout: seconds, bytes, B/s,
FLOPs, FLOP/s, watts, joules. The only exceptions carry their unit in the name:
`price_per_gpu_hour` (currency per GPU-hour, the unit every cloud price list uses) and the
`days`, `gpu_hours`, `kwh` properties meant for output formatting.
Functions take numpy arrays or scalars alike (the Monte-Carlo simulation loops over the
broadcast elements in Python, since it must replay the seed's random stream exactly).

Failure model: interruptions of the whole job arrive as a Poisson process with mean time
between failures M (`mtbf_s`); one GPU's failure stops a synchronous job, so the job's
failure rate is the per-GPU rate times the GPU count (the seed chapter's sec. 9.2 assumption).

References
[1] J. W. Young, "A first order approximation to the optimum checkpoint interval",
    Communications of the ACM 17(9), 530-531, 1974: tau_opt = sqrt(2 * delta * M).
[2] J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
    dumps", Future Generation Computer Systems 22(3), 303-312, 2006 (online 2004,
    doi:10.1016/j.future.2004.11.016). Optimum interval, eq. (37):
    tau_opt = sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + delta/(9 * 2M)] - delta for
    delta < 2M, else M (as implemented in LLNL SCR, scripts/python/scr_ckpt_interval.py).
    Its figs. 3-5 quote tau_opt = 117, 57 and 9.1 min for delta = 5 min and M = 24 h, 6 h
    and 15 min. Expected wall-clock time of the higher-order model, exponential failures
    that may also strike during a checkpoint or a restart:
    T_w = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau.
[3] A. Grattafiori et al. (Meta), "The Llama 3 Herd of Models", arXiv:2407.21783, 2024,
    sec. 3.3.4 and Table 5: 466 job interruptions in a 54-day snapshot of Llama 3 405B
    pre-training on up to 16,384 H100 GPUs, 47 planned and 419 unexpected; "higher than
    90% effective training time".
[4] The seed chapter (book chapter this project reproduces), sec. 9.2: Young's rule gives
    27 min for a 30 s save and a 12 h MTBF; its Monte-Carlo script (45 days of work,
    10 min restart, 20 runs per interval) prints 78.8, 93.2, 95.0, 93.7, 86.6, 63.1 %
    effective training time at 2, 10, 27, 60, 180, 600 min. Sec. 10.2: 45 days at 40% MFU
    on 4,096 H100s (30% -> 60, 50% -> 36); Meta's 6.4 M H100-hours for Llama 3 70B on
    15 T tokens imply ~28% MFU.
[5] J. Kaplan et al., "Scaling Laws for Neural Language Models", arXiv:2001.08361, 2020,
    sec. 2.1: training compute C ~ 6 N per token (forward 2N, backward 4N).
[6] NVIDIA H100 Tensor Core GPU datasheet: SXM5 700 W max TDP, "PCIe Gen5: 128 GB/s"
    (both directions together, i.e. 64 GB/s each way for an x16 link; PCI-SIG PCIe 5.0
    base spec: 32 GT/s per lane, 128b/130b encoding).
[7] Meta, Llama 3 model card (github.com/meta-llama/llama3, MODEL_CARD.md, April 2024):
    Llama 3 70B pre-training took 6.4 M GPU-hours of H100-80GB at 700 W TDP.
[8] PyTorch Distributed Checkpoint, `torch.distributed.checkpoint.async_save`: stages the
    state into CPU memory, then writes it to storage in a background thread while training
    continues.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from .errors import PlannerError

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
JOULES_PER_KWH = 3.6e6

# --- failure record --------------------------------------------------------------------
# Llama 3 paper [3], sec. 3.3.4 / Table 5: 419 unexpected interruptions in 54 days on up to
# 16,384 H100s. "Up to" makes 16,384 an upper bound on the GPUs in service, so the per-GPU
# rate derived here is, if anything, a slight underestimate. Planned interruptions (47:
# firmware upgrades, configuration changes) are excluded: an operator schedules them, and a
# job checkpoints before them.
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_WINDOW_S = 54 * SECONDS_PER_DAY
LLAMA3_GPUS = 16_384
LLAMA3_FAILURES_PER_GPU_S = LLAMA3_UNEXPECTED_INTERRUPTIONS / (LLAMA3_WINDOW_S * LLAMA3_GPUS)
LLAMA3_FAILURES_PER_GPU_DAY = LLAMA3_FAILURES_PER_GPU_S * SECONDS_PER_DAY  # ~4.74e-4, for display

# --- host link for asynchronous checkpoints ----------------------------------------------
# PCIe Gen5 x16: 128 GB/s both directions together [6], 64 GB/s device-to-host. A nominal
# link rate: a measured pinned-memory copy reaches less, so the pause is a lower bound.
PCIE_GEN5_X16_BPS = 64e9


# --- helpers ---------------------------------------------------------------------------
def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _out(x):
    """0-d arrays back to numpy scalars so that scalar callers get scalars."""
    x = np.asarray(x)
    return x[()] if x.ndim == 0 else x


def _show(value) -> str:
    """A value for a message: 12.5, nan, [1.0, inf] (never `np.float64(nan)`)."""
    v = np.asarray(value)
    if v.ndim == 0:
        return f"{float(v):g}" if v.dtype.kind in "fiub" else str(value)
    return "[" + ", ".join(f"{float(x):g}" for x in v.ravel()[:6]) + (", ...]" if v.size > 6 else "]")


def _require(ok, message: str, hint: str) -> None:
    if not bool(np.all(ok)):
        raise PlannerError(message, hint)


def _positive(name: str, value, hint: str):
    v = _f64(value)
    _require(np.isfinite(v) & (v > 0), f"{name} must be a finite number > 0, got {_show(value)}", hint)
    return v


def _nonnegative(name: str, value, hint: str):
    v = _f64(value)
    _require(np.isfinite(v) & (v >= 0), f"{name} must be a finite number >= 0, got {_show(value)}", hint)
    return v


# --- training time, GPU-hours, energy, cost ------------------------------------------------
def dense_training_flops(n_params, tokens):
    """Model FLOPs to train a dense transformer, 6 N T [5] (attention's extra term ignored)."""
    return 6.0 * _f64(n_params) * _f64(tokens)


@dataclass(frozen=True)
class TrainingTime:
    """Failure-free training time. `wall_s` is what passes; `gpu_s` what is billed."""

    wall_s: np.ndarray | float
    gpu_s: np.ndarray | float

    @property
    def days(self):
        return self.wall_s / SECONDS_PER_DAY

    @property
    def gpu_hours(self):
        return self.gpu_s / SECONDS_PER_HOUR


def training_time(total_flops, n_gpus, peak_flops, mfu) -> TrainingTime:
    """Time to do `total_flops` of model FLOPs on `n_gpus` GPUs at `mfu` of `peak_flops` each.

    wall = F / (G * peak * MFU); GPU-seconds = G * wall = F / (peak * MFU), which does not
    depend on G. MFU as PaLM (Chowdhery et al. 2022) defines it: model FLOPs per second
    over peak, so recomputation does not count [4, sec. 10.1].
    """
    f = _nonnegative("total FLOPs", total_flops, "use 6 * parameters * tokens")
    g = _positive("GPU count", n_gpus, "use --gpus with a positive integer")
    p = _positive("peak FLOP/s per GPU", peak_flops, "check the hardware entry's dense peak")
    m = _f64(mfu)
    _require(np.isfinite(m) & (m > 0) & (m <= 1), f"MFU must be in (0, 1], got {mfu!r}", "write e.g. 0.4 for 40%")
    gpu_s = f / (p * m)
    return TrainingTime(wall_s=_out(gpu_s / g), gpu_s=_out(gpu_s))


def implied_mfu(total_flops, gpu_s, peak_flops):
    """MFU that `gpu_s` GPU-seconds imply for `total_flops` of model FLOPs: F / (gpu_s * peak).

    Seed sec. 10.2: 6.35e24 FLOPs over 6.4 M H100-hours at 989 TFLOP/s is about 28%.
    """
    f = _nonnegative("total FLOPs", total_flops, "use 6 * parameters * tokens")
    s = _positive("GPU-seconds", gpu_s, "give the GPU time the run took")
    p = _positive("peak FLOP/s per GPU", peak_flops, "check the hardware entry's dense peak")
    return _out(f / (s * p))


@dataclass(frozen=True)
class Energy:
    """Energy in joules: GPUs at TDP, plus the facility's overhead (PUE - 1); gpu + overhead = total."""

    gpu_J: np.ndarray | float
    overhead_J: np.ndarray | float
    total_J: np.ndarray | float

    @property
    def total_kwh(self):
        return self.total_J / JOULES_PER_KWH

    @property
    def gpu_kwh(self):
        return self.gpu_J / JOULES_PER_KWH


def energy(gpu_s, tdp_W, pue=1.0) -> Energy:
    """Energy of `gpu_s` GPU-seconds with every GPU drawing its TDP.

    Assumption, named: a GPU draws its TDP for the whole run (an upper bound for the GPU
    board; the Llama 3 model card [7] prices its emissions the same way, GPU-hours x 700 W).
    CPUs, memory, NICs and switches are not counted unless the PUE is raised to cover them.
    PUE (power usage effectiveness) = facility energy / IT energy >= 1.
    """
    s = _nonnegative("GPU-seconds", gpu_s, "give the GPU time")
    w = _positive("TDP", tdp_W, "check the hardware entry's tdp_W")
    u = _f64(pue)
    _require(
        np.isfinite(u) & (u >= 1.0),
        f"PUE must be >= 1, got {pue!r}",
        "1.0 counts the GPUs alone; data centres report 1.1-1.6",
    )
    gpu = s * w
    over = gpu * (u - 1.0)
    return Energy(gpu_J=_out(gpu), overhead_J=_out(over), total_J=_out(gpu + over))


def cost(gpu_s, price_per_gpu_hour):
    """Rental cost: GPU-hours x price per GPU-hour (currency of the price)."""
    s = _nonnegative("GPU-seconds", gpu_s, "give the GPU time")
    p = _nonnegative("price per GPU-hour", price_per_gpu_hour, "use --price-per-gpu-hour, e.g. 2.5")
    return _out(s / SECONDS_PER_HOUR * p)


# --- failure rate --------------------------------------------------------------------------
def mtbf_s(n_gpus, failures_per_gpu_s=LLAMA3_FAILURES_PER_GPU_S):
    """Job mean time between interruptions: 1 / (rate per GPU x GPUs).

    Default rate from Llama 3 [3]: 419 / (54 days x 16,384 GPUs). It gives 3.09 h at 16,384
    GPUs (the seed's "roughly every 3.1 hours") and 12.4 h at 4,096, the seed's 12 h.
    """
    g = _positive("GPU count", n_gpus, "use --gpus with a positive integer")
    r = _positive("failure rate per GPU", failures_per_gpu_s, "use --failures-per-gpu-day R or --mtbf-hours H")
    return _out(1.0 / (r * g))


def failures_per_gpu_s_from_mtbf(job_mtbf_s, n_gpus):
    """The per-GPU failure rate a job MTBF implies on `n_gpus` GPUs (inverse of mtbf_s)."""
    m = _positive("MTBF", job_mtbf_s, "use --mtbf-hours with a positive number")
    g = _positive("GPU count", n_gpus, "use --gpus with a positive integer")
    return _out(1.0 / (m * g))


# --- checkpoints -------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointSize:
    """Bytes one GPU writes per checkpoint; master_weights + optimizer + extra = total."""

    master_weights_bytes: np.ndarray | float
    optimizer_bytes: np.ndarray | float
    extra_bytes: np.ndarray | float
    total_bytes: np.ndarray | float


def checkpoint_bytes_per_gpu(master_weights_bytes, optimizer_bytes, extra_bytes=0.0) -> CheckpointSize:
    """What one GPU saves: its shard of the FP32 master weights and of the optimizer state.

    The BF16 working weights and the gradients are not saved: the master copy regenerates the
    former, and a checkpoint is taken between steps, when gradients are spent (seed sec. 9.2:
    "the FP32 master weights and Adam's two averages", 846 GB for Llama 3 70B, ~0.2 GB per
    GPU on 4,096). The step, data position and RNG states are small; pass them as
    `extra_bytes`. The per-GPU shard sizes come from the memory model.
    """
    w = _nonnegative("master weight bytes", master_weights_bytes, "pass the per-GPU shard size")
    o = _nonnegative("optimizer bytes", optimizer_bytes, "pass the per-GPU shard size")
    e = _nonnegative("extra checkpoint bytes", extra_bytes, "pass 0 if unknown")
    return CheckpointSize(_out(w), _out(o), _out(e), _out(w + o + e))


@dataclass(frozen=True)
class CheckpointTime:
    """Seconds per checkpoint.

    write_s: the whole job's bytes over the storage system's aggregate write bandwidth.
    copy_s:  one GPU's shard (its GPU-held part under CPU offload) over its host link (device to CPU memory).
    pause_s: what training waits for: max(write_s, copy_s) when saving synchronously (the two
             stages are pipelined, the slower one sets the pace); copy_s when saving
             asynchronously [8], with write_s running in the background, which must finish
             before the next checkpoint (so the interval should be >= write_s).
    """

    write_s: np.ndarray | float
    copy_s: np.ndarray | float
    pause_s: np.ndarray | float


def checkpoint_time(
    bytes_per_gpu, n_gpus, storage_Bps, async_save=False, host_Bps=PCIE_GEN5_X16_BPS, copy_bytes=None
) -> CheckpointTime:
    """Checkpoint write time and training pause; `storage_Bps` is the aggregate write
    bandwidth the job gets from its storage (for scale, Llama 3 [3] sec. 3.3.1: Tectonic,
    7,500 servers, 2 TB/s sustained and 7 TB/s peak, shared by everything on the cluster).
    `async_save` may be a bool array (np.where, no branch). `copy_bytes`: what of the shard
    crosses the host link, where part of it is in host memory already (CPU offload); None:
    the whole shard.
    """
    b = _nonnegative("checkpoint bytes per GPU", bytes_per_gpu, "pass the per-GPU shard size")
    c = b if copy_bytes is None else _nonnegative("checkpoint bytes copied to the host", copy_bytes,
                                                  "pass the GPU-held part of the shard")
    g = _positive("GPU count", n_gpus, "use --gpus with a positive integer")
    s = _positive("storage bandwidth", storage_Bps, "use --checkpoint-bandwidth in GB/s, e.g. 100")
    h = _positive("host link bandwidth", host_Bps, "PCIe Gen5 x16 gives 64e9 B/s each way")
    write = b * g / s
    copy = c / h
    pause = np.where(np.asarray(async_save, dtype=bool), copy, np.maximum(write, copy))
    return CheckpointTime(write_s=_out(write), copy_s=_out(copy), pause_s=_out(pause))


# --- checkpoint interval -----------------------------------------------------------------
def young_interval(save_s, mtbf_s):
    """Young's first-order optimum compute time between checkpoints, sqrt(2 delta M) [1].

    Seed sec. 9.2: 30 s save, 12 h MTBF -> 1,610 s, "every 27 min".
    """
    d = _nonnegative("checkpoint save time", save_s, "use --checkpoint-save-s or --checkpoint-bandwidth")
    m = _positive("MTBF", mtbf_s, "use --mtbf-hours or --failures-per-gpu-day")
    return _out(np.sqrt(2.0 * d * m))


def daly_interval(save_s, mtbf_s):
    """Daly's higher-order optimum compute time between checkpoints, [2] eq. (37):

    sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + delta/(9 (2M))] - delta   for delta < 2M,
    M                                                                       otherwise.
    """
    d = _nonnegative("checkpoint save time", save_s, "use --checkpoint-save-s or --checkpoint-bandwidth")
    m = _positive("MTBF", mtbf_s, "use --mtbf-hours or --failures-per-gpu-day")
    x = d / (2.0 * m)
    with np.errstate(over="ignore", invalid="ignore"):  # the d >= 2M branch is M; overflow is checked below
        series = np.sqrt(2.0 * d * m) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - d
    out = np.where(d < 2.0 * m, series, m)
    _require(np.isfinite(out), f"the checkpoint interval overflows (save {_show(d)} s, MTBF {_show(m)} s)",
             "give a checkpoint save time and an MTBF within range (--checkpoint-save-s, --mtbf-hours)")
    return _out(out)


# --- goodput: closed form ----------------------------------------------------------------
@dataclass(frozen=True)
class ExpectedGoodput:
    """Expected wall-clock time of a job under exponential failures, split into terms
    whose sum is `wall_s`; `goodput` = compute_s / wall_s (Meta's "effective training time").

    compute_s:    useful training, the input work.
    checkpoint_s: pauses of the checkpoints that succeed.
    lost_s:       time in attempts a failure cut short (work and partial saves redone).
    restart_s:    restart phases, including restarts a further failure cut short.
    failures:     expected number of interruptions.
    """

    compute_s: np.ndarray | float
    checkpoint_s: np.ndarray | float
    lost_s: np.ndarray | float
    restart_s: np.ndarray | float
    wall_s: np.ndarray | float
    goodput: np.ndarray | float
    failures: np.ndarray | float


def expected_goodput(interval_s, save_s, restart_s, mtbf_s, work_s=1.0) -> ExpectedGoodput:
    """Daly's expected wall time [2], T_w = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau,
    split into terms. tau = interval_s (compute between checkpoints), delta = save_s,
    R = restart_s, M = mtbf_s, T_s = work_s. Goodput T_s / T_w does not depend on T_s.

    Derivation (renewal argument, memoryless failures): a segment of x = tau + delta
    completes with probability p = e^{-x/M}, so it takes 1/p - 1 = e^{x/M} - 1 failed
    attempts on average, each lasting E[t | t < x] = M - x p/(1-p): the failed attempts of
    a segment take M(e^{x/M} - 1) - x. Each failure is followed by a restart of length R
    that a failure can also cut short, so it takes M(e^{R/M} - 1) on average. Summing
    over T_s/tau segments gives Daly's T_w exactly. Like [2], it treats T_s/tau as
    continuous (no special last segment).

    The seed's simulation [4] lets no failure strike during a restart; its restart term is
    then R per failure instead of M(e^{R/M} - 1), a difference of about R^2/(2M) per
    failure (4 s for R = 10 min, M = 12 h).
    """
    tau = _positive("checkpoint interval", interval_s, "use a positive interval in seconds")
    d = _nonnegative("checkpoint save time", save_s, "use --checkpoint-save-s or --checkpoint-bandwidth")
    r = _nonnegative("restart time", restart_s, "use --restart-s with a number >= 0")
    m = _positive("MTBF", mtbf_s, "use --mtbf-hours or --failures-per-gpu-day")
    ts = _nonnegative("work", work_s, "the failure-free training time in seconds")
    segments = ts / tau
    x = tau + d
    # a segment far longer than the MTBF fails almost surely: e^{x/M} overflows; that is an
    # answer (the job never finishes), said below in one line, not as numpy warnings
    with np.errstate(over="ignore", invalid="ignore"):
        e_seg = np.expm1(x / m)  # failed attempts per segment
        failures_compute = segments * e_seg
        compute = ts + 0.0 * e_seg
        checkpoint = segments * d + 0.0 * e_seg
        lost = segments * (m * e_seg - x)
        restart = failures_compute * m * np.expm1(r / m)
        wall = compute + checkpoint + lost + restart
        failures = failures_compute * np.exp(r / m)  # failures during restarts: e^{R/M} - 1 each
        goodput = tau / (m * np.exp(r / m) * e_seg)  # T_s / T_w, finite also for T_s = 0
    _require(np.isfinite(wall) & np.isfinite(goodput) & np.isfinite(failures),
             f"the expected wall-clock time is beyond any finite figure: a checkpoint segment of {_show(x)} s "
             f"(interval + save) and restarts of {_show(r)} s against an MTBF of {_show(m)} s almost never complete",
             "raise the MTBF (--mtbf-hours, --failures-per-gpu-day), or shorten --checkpoint-interval / "
             "--checkpoint-save-s / --restart-s")
    return ExpectedGoodput(
        compute_s=_out(compute),
        checkpoint_s=_out(checkpoint),
        lost_s=_out(lost),
        restart_s=_out(restart),
        wall_s=_out(wall),
        goodput=_out(goodput),
        failures=_out(failures),
    )


# --- goodput: Monte-Carlo ----------------------------------------------------------------
@dataclass(frozen=True)
class GoodputSimulation:
    """Monte-Carlo averages over `runs` seeded runs, each element of the broadcast inputs.

    goodput: mean of work / wall over the runs (the seed's figure).
    goodput_std: standard deviation of work / wall over the runs (population, ddof=0).
    wall_s: mean wall-clock time. failures: mean number of interruptions.
    """

    goodput: np.ndarray | float
    goodput_std: np.ndarray | float
    wall_s: np.ndarray | float
    failures: np.ndarray | float


# Refuse inputs whose expected loop count would hang the simulation: the job almost never
# completes a segment once (tau + delta) is many MTBFs.
_MAX_EXPECTED_ATTEMPTS = 2e7


def _simulate_run(work: float, interval: float, save: float, restart: float, mtbf: float, seed: int):
    """One run, the seed's sec. 9.2 loop verbatim: same RNG, same draws, same order."""
    rng = random.Random(seed)
    done = wall = 0.0
    failures = 0
    next_fail = rng.expovariate(1 / mtbf)
    while done < work:
        chunk = min(interval, work - done)  # train until the next checkpoint
        if wall + chunk + save <= next_fail:
            wall += chunk + save  # reached the checkpoint safely
            done += chunk
        else:
            wall = next_fail + restart  # crash: everything since the last checkpoint is lost
            next_fail = wall + rng.expovariate(1 / mtbf)
            failures += 1
    return wall, failures


def simulate_goodput(work_s, interval_s, save_s, restart_s, mtbf_s, runs=20, seed=0) -> GoodputSimulation:
    """Effective training time by simulating failures, the seed's sec. 9.2 algorithm [4].

    Each run draws exponential times to failure from random.Random(s).expovariate(1/M),
    s = seed .. seed + runs - 1; work proceeds in chunks of `interval_s` each followed by a
    `save_s` pause; a failure before the chunk and its save end loses the chunk, costs
    `restart_s`, and the next failure time is drawn from the end of the restart (so no
    failure strikes during a restart). Run r's goodput is work / wall; the result averages
    the runs. With the seed's inputs it reproduces its printed figures exactly.
    Array inputs broadcast; each element is simulated in turn.
    """
    n_runs = int(runs)
    _require(n_runs >= 1, f"runs must be >= 1, got {runs!r}", "use 20, as the seed does")
    w = _positive("work", work_s, "the failure-free training time in seconds")
    tau = _positive("checkpoint interval", interval_s, "use a positive interval in seconds")
    d = _nonnegative("checkpoint save time", save_s, "use --checkpoint-save-s or --checkpoint-bandwidth")
    r = _nonnegative("restart time", restart_s, "use --restart-s with a number >= 0")
    m = _positive("MTBF", mtbf_s, "use --mtbf-hours or --failures-per-gpu-day")
    w, tau, d, r, m = np.broadcast_arrays(w, tau, d, r, m)
    # expected loop iterations per run ~ segments x e^{(tau+delta)/M}; compare in log space
    log_attempts = np.log(np.ceil(w / tau)) + (tau + d) / m
    _require(
        log_attempts <= math.log(_MAX_EXPECTED_ATTEMPTS),
        "checkpoint interval plus save time is too long for the MTBF: the simulated job would "
        f"need over {_MAX_EXPECTED_ATTEMPTS:.0e} attempts",
        "shorten the interval (try young_interval) or raise the MTBF",
    )
    shape = w.shape
    good = np.empty(shape)
    std = np.empty(shape)
    wall = np.empty(shape)
    fails = np.empty(shape)
    for idx in np.ndindex(shape):
        args = (float(w[idx]), float(tau[idx]), float(d[idx]), float(r[idx]), float(m[idx]))
        results = [_simulate_run(*args, seed=s) for s in range(int(seed), int(seed) + n_runs)]
        walls = np.array([res[0] for res in results])
        ratios = args[0] / walls
        # sum()/n in run order, as the seed does, so the mean matches its print to the last bit
        good[idx] = sum(float(q) for q in ratios) / n_runs
        std[idx] = float(np.std(ratios))
        wall[idx] = float(np.mean(walls))
        fails[idx] = float(np.mean([res[1] for res in results]))
    return GoodputSimulation(goodput=_out(good), goodput_std=_out(std), wall_s=_out(wall), failures=_out(fails))
