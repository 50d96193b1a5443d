"""`python -m planner` and the `planner` console script. `planner --version` answers before
anything heavy is imported (typer, numpy, pydantic: issue 24, start-up under 0.3 s)."""

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
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
