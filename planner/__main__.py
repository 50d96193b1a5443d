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
"""

import gc
import os
import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from . import __version__

        sys.stdout.write(f"planner {__version__}\n")
        return
    # numpy's OpenBLAS starts a thread per core at import; nothing the planner runs is BLAS
    # work (elementwise array arithmetic, small scipy fits), so one thread: less CPU at start-up
    # (issue 24). A value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
