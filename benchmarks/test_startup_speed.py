"""Whole-process start-up of the `planner` command (pytest-benchmark; not part of the default
test run; issue 24's targets: `planner --version` under 0.3 s, `planner fit --model
llama3-405b --gpus 16384` under 1 s on the CI machine).

    python3 -m pytest benchmarks/test_startup_speed.py --benchmark-only

Each round is a fresh interpreter (subprocess), as a user's shell runs it: imports, catalog
reads, the search and the table. Measure what the imports cost with
`python -X importtime -m planner fit ...`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "planner --version": ["--version"],
    "planner fit --model llama3-405b --gpus 16384": ["fit", "--model", "llama3-405b", "--gpus", "16384"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_whole_process(benchmark, case):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run():
        return subprocess.run([sys.executable, "-m", "planner", *CASES[case]], env=env, capture_output=True, text=True)

    r = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    assert r.returncode == 0, r.stderr
    benchmark.extra_info.update(stdout_bytes=len(r.stdout))
