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
    # start-up with almost nothing else: imports, the app, three catalog files and one plan priced
    "planner explain --model llama3-8b --gpus 8": ["explain", "--model", "llama3-8b", "--gpus", "8"],
    "planner fit --model llama3-405b --gpus 16384": ["fit", "--model", "llama3-405b", "--gpus", "16384"],
    # issue 23: under 2 s whole process
    "planner fit --model deepseek-v3 --gpus 2048 --hardware h800-sxm --global-batch 15360 --seq-len 4096":
        ["fit", "--model", "deepseek-v3", "--gpus", "2048", "--hardware", "h800-sxm", "--global-batch", "15360",
         "--seq-len", "4096"],
    # issue 24: a record of 36 million layers is priced at once (planner/layers LayerList)
    "planner validate (a record of 36,000,000 layers)": ["validate", "LAYERS36M"],
}

RECORD_36M = """- id: layers-36m
  model_name: GPT tiny
  num_layers: 36000000
  hidden_size: 1024
  ffn_hidden_size: 4096
  num_attention_heads: 8
  num_kv_heads: 8
  vocab_size: 32000
  seq_length: 2048
  global_batch_size: 64
  micro_batch_size: 1
  gpu_type: H100-SXM-80GB
  hardware: h100-sxm
  num_gpus: 8
  tp: 1
  pp: 1
  vpp: 1
  cp: 1
  sharding: none
  recompute: none
  sequence_parallel: false
  precision: bf16
  tokens_per_sec_per_gpu: 0.0001
"""


@pytest.mark.parametrize("case", list(CASES))
def test_whole_process(benchmark, case, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    args = CASES[case]
    if "LAYERS36M" in args:  # a one-record runs file: the 4-layer GPT shape of tests/test_validate.py at 36M layers
        runs = tmp_path / "runs.yaml"
        runs.write_text(RECORD_36M)
        args = [str(runs) if a == "LAYERS36M" else a for a in args]

    def run():
        return subprocess.run([sys.executable, "-m", "planner", *args], env=env, capture_output=True, text=True)

    r = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    assert r.returncode == 0, r.stderr
    benchmark.extra_info.update(stdout_bytes=len(r.stdout))
