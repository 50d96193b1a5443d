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
    calibrate.py   `planner calibrate nccl|gemm`
"""

from .catalog import list_table
from .common import GB, GiB, emit, flatten, gb, gib, human_count, to_csv
from .explain import TIME_ROWS, explain_table, time_table

__all__ = [
    "GB", "GiB", "TIME_ROWS", "emit", "explain_table", "flatten", "gb", "gib", "human_count", "list_table",
    "time_table", "to_csv",
]
