"""`python -m planner` and the `planner` console script. `planner --version` answers before
anything heavy is imported (typer, numpy, pydantic: issue 24, start-up under 0.3 s)."""

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from . import __version__

        sys.stdout.write(f"planner {__version__}\n")
        return
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
