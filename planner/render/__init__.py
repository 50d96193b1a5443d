"""The one place that turns numbers into what a person or a machine reads.

Tables (rich) go to stdout for people; json, yaml and csv for machines; diagnostics to
stderr. Human units (GB, GiB, TFLOP/s, days) appear only here.

    common.py      the consoles (out, err, warn), Format, machine formats (emit, to_csv,
                   flatten) and the shared formatters (percent, seconds, bytes, GB/s,
                   money, counts, meshes)
    catalog.py     `planner models`, `planner hardware`
    explain.py     `planner explain` (and `fit --explain N`)
    fit.py         `planner fit`
    budget.py      `planner budget`
    check.py       `planner check`
    validate.py    `planner validate`
    collective.py  `planner collective`
    pipeline.py    `planner pipeline` (json, yaml, csv; the text timeline is planner/pipeline.py's)
    calibrate.py   `planner calibrate nccl|gemm`
"""

__all__ = [
    "GB", "GiB", "TIME_ROWS", "emit", "explain_table", "flatten", "gb", "gib", "human_count", "list_table",
    "time_table", "to_csv",
]
# where each name of __all__ lives: imported on first use (PEP 562), so that importing render.common (every command,
# and every command's --help) does not import catalog.py's and explain.py's rich tables (issue 24, start-up)
_HOME = {"list_table": "catalog", "TIME_ROWS": "explain", "explain_table": "explain", "time_table": "explain",
         **dict.fromkeys(("GB", "GiB", "emit", "flatten", "gb", "gib", "human_count", "to_csv"), "common")}


def __getattr__(name: str):
    if name in _HOME:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
