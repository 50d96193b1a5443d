"""`python -m planner` and the `planner` console script. `planner --version` answers before
anything heavy is imported (typer, numpy, pydantic: issue 24, start-up under 0.3 s).

The process's start-up runs with Python's cyclic garbage collector off, and what it leaves
(modules, classes, pydantic schemas, the typer app: some 10^5 objects that live until exit) is
then frozen (gc.freeze: moved to a generation later collections never scan) before the command
runs with the collector on again. Without it the collector scans those objects again and again
while they are created and while the search allocates: `planner fit --model llama3-405b --gpus
16384` spent 0.77 s CPU (median of 10) with the collector as it is and 0.66 s so (issue 24).
Only cyclic garbage made during start-up is never freed, a few MB at most (peak RSS 130 MB
either way). Library callers (planner.cli.main, CliRunner) are not touched.

The command also holds on to the memory the search frees (glibc's malloc, `_keep_freed_memory`):
numpy takes each array over glibc's mmap threshold (128 KiB at start, raised only as such blocks are
freed) from the kernel as fresh pages and hands it back when freed, so every large temporary of the
search (a column of 454,304 base rows is 3.6 MB) is page-faulted in again, zero-filled by the kernel:
`planner fit --model deepseek-v3 --gpus 2048 --hardware h800-sxm --global-batch 15360 --seq-len 4096`
took 129,389 minor page faults and 0.23-0.25 s of system time beside 1.25 s of user time (2026-12-04,
/usr/bin/time, this machine). With arrays up to 32 MiB (the most glibc's own dynamic threshold
rises to, DEFAULT_MMAP_THRESHOLD_MAX on 64-bit) taken from the heap and the heap's freed top kept (trim
threshold 1 GiB), freed blocks are reused: 68,305 faults, 0.11-0.14 s system time, the same user
time, peak RSS 295 -> 303 MB; `planner fit --model llama3-405b --gpus 16384` 42,394 -> 24,966 faults,
0.07-0.09 -> 0.04-0.07 s system time. The same arithmetic on the same numbers: only where the bytes live
changes. Elsewhere than glibc (no `mallopt`) nothing is done.
"""

import gc
import os
import sys


def _keep_freed_memory() -> bool:
    """glibc's malloc told to serve blocks up to 32 MiB from the heap and to keep the heap's freed top
    (module docstring; mallopt(3): M_MMAP_THRESHOLD -3, M_TRIM_THRESHOLD -1); whether the C library took
    both (mallopt returns 1). Nothing where it has no mallopt (macOS, Windows)."""
    try:
        import ctypes  # (imported by the commands' own imports anyway)

        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    except (ImportError, OSError, TypeError):  # pragma: no cover - depends on the platform
        return False
    if mallopt is None:  # pragma: no cover - depends on the platform
        return False
    # M_MMAP_THRESHOLD (a fixed value also ends glibc's dynamic threshold), then M_TRIM_THRESHOLD
    return mallopt(-3, 32 * 1024 * 1024) == 1 and mallopt(-1, 1 << 30) == 1


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from . import __version__

        sys.stdout.write(f"planner {__version__}\n")
        return
    # numpy's OpenBLAS starts a thread per core at import; nothing the planner runs is BLAS
    # work (elementwise array arithmetic, small scipy fits), so one thread: less CPU at start-up
    # (issue 24). A value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _keep_freed_memory()
    args = sys.argv[1:]
    gc.disable()  # start-up (module docstring)
    try:
        from .cli import app_for

        app = app_for(args)
    finally:
        gc.freeze()
        gc.enable()
    app(args=args, prog_name="planner")


if __name__ == "__main__":
    main()
