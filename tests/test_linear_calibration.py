"""Issue 24: calibrate nccl and calibrate run are linear in their input, with the same
results as the quadratic forms they replace; `fit --calibration` says which profile entries
its rows used; `planner --version` answers without loading the CLI. (Speed itself is
measured in benchmarks/, not asserted here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.calibrate import nccl as N
from planner.calibrate import run as R

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30


def _all_pairs_bound(sizes, busbw):
    """The definition: max over pairs i != j with S_i <= S_j of (t_i - t_j) / (t_i + t_j),
    the first (least i, then least j) pair that reaches it."""
    t = np.asarray(sizes, float) / np.asarray(busbw, float)
    s = np.asarray(sizes, float)
    best, pair = 0.0, None
    for i in range(t.size):
        for j in range(t.size):
            if i != j and s[i] <= s[j]:
                g = (t[i] - t[j]) / (t[i] + t[j])
                if g > best:
                    best, pair = g, (i, j)
    return best, pair


def test_monotone_bound_is_the_all_pairs_definition():
    """On 3,000 random tables with repeated sizes and equal times (ties), the O(n log n) form
    gives the all-pairs value and pair exactly."""
    rng = np.random.default_rng(24)
    for _ in range(3000):
        n = int(rng.integers(1, 10))
        s = rng.integers(1, 5, size=n).astype(float) * GiB
        t = rng.integers(1, 6, size=n).astype(float)
        assert N.monotone_bound(s, s / t) == _all_pairs_bound(s, s / t)


def test_dense_log_fit_recovers_its_line(tmp_path):
    """A 600-row table 1 MiB apart (more splits than MAX_CUT_STARTS: the thinned search, then
    the refit on all points) of t = 20 us + S * 1.75 / 400 GB/s: the bulk regime's bus
    bandwidth is 400 GB/s and its latency 20 us, to the log's printed precision."""
    rows = []
    for i in range(1, 601):
        size = i * 2**20
        t = 20.0 + size * 1.75 / 400e9 * 1e6
        alg = size / (t * 1e-6) / 1e9
        cells = f"{t:9.2f} {alg:7.2f} {alg * 1.75:7.2f}      0"
        rows.append(f"{size:>12d} {size // 4:>12d}     float     sum      -1 {cells} {cells}\n")
    log = tmp_path / "ar.txt"
    log.write_text("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw  #wrong\n"
                   + "".join(rows))
    cal = N.calibrate_logs([log], collective="all_reduce", nodes=1)
    (fit,) = cal.fits.values()
    assert fit.points == 2 * 600  # every size is >= 1 MiB; both placements
    bulk = fit.lines[-1]
    assert bulk.busbw == pytest.approx(400e9, rel=1e-3)
    assert bulk.latency == pytest.approx(20e-6, rel=2e-2)
    assert fit.max_abs_err < 1e-3


def _varied(tmp_path: Path) -> Path:
    import yaml

    rec = yaml.safe_load((ROOT / "tests/data/run_calibration/megatron_h100_1.7b.yaml").read_text())[0]
    out = []
    for i, (tp, pp, mbs) in enumerate((tp, pp, mbs) for tp in (1, 2, 4) for pp in (1, 2) for mbs in (1, 2)):
        out.append({**rec, "id": f"v{i}", "tp": tp, "pp": pp, "dp": 48 // (tp * pp), "micro_batch_size": mbs,
                    "tokens_per_sec_per_gpu": 30000.0 + 100 * i, "iteration_time_s": None, "mfu": None, "tflops_per_gpu": None})
    path = tmp_path / "varied.yaml"
    path.write_text(yaml.safe_dump(out, sort_keys=False))
    return path


def test_runs_of_one_model_are_priced_together_and_alike(tmp_path):
    """12 records of one model on one GPU count, different meshes: one batch (their model files
    differ only in the record id in the description), and each run's predictions at three
    candidate knob values equal predict_many's for that run alone, bit for bit."""
    runs = R.record_runs(_varied(tmp_path))
    groups = R._batches(runs, range(len(runs)))
    assert groups == [list(range(12))]
    values = {"gemm_efficiency_scale": np.array([1.0, 0.9, 1.1]), "internode_bandwidth_scale": np.array([1.0, 1.5, 0.7])}
    batch = R.predict_batch(runs, groups[0], values)
    for i, run in enumerate(runs):
        alone = R.predict_many(run, values)
        for q in alone:
            assert np.array_equal(np.asarray(alone[q]), batch[i][q])


def _planner(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "planner", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_version_loads_no_cli(tmp_path):
    code = "import sys, runpy; sys.argv = ['planner', '--version']; runpy.run_module('planner', run_name='__main__'); " \
           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'numpy', 'pydantic', 'planner')))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    from planner import __version__

    first, mods = r.stdout.splitlines()
    assert first == f"planner {__version__}"
    assert set(eval(mods)) <= {"planner", "planner.__main__"}  # no typer, numpy, pydantic or CLI module


def test_a_command_loads_only_its_module(tmp_path):
    """`planner collective ...` builds the app with collective's module alone: calibrate's and
    validate's are not imported; a typo still lists every command."""
    code = ("import sys; from planner.cli import main\n"
            "try:\n    main(['collective', '--op', 'all-reduce', '--size', '8MiB', '--ranks', '8'])\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print(sorted(m for m in sys.modules if m.startswith('planner.cli.')))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    mods = eval(r.stdout.splitlines()[-1])
    assert "planner.cli.collective" in mods and "planner.cli.calibrate" not in mods and "planner.cli.validate" not in mods
    r = _planner("fitt", cwd=tmp_path)
    assert r.returncode == 2 and "no such command 'fitt'" in r.stderr


def test_fit_says_which_profile_entries_it_used(tmp_path):
    """A 2-node (16-rank inter-node) all-reduce profile on a 16-GPU fit limited to TP 8, DP 2:
    no row runs a 16-rank collective, and stderr says the entry was not used."""
    prof = tmp_path / "p.yaml"
    r = _planner("calibrate", "nccl", ROOT / "tests/data/nccl_logs/h100_16gpu_2node_allreduce_dgx06-dgx07.txt", "-o", prof,
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _planner("fit", "--model", "llama3-8b", "--gpus", "16", "--tp", "8", "--pp", "1", "--cp", "1", "--calibration", prof,
                 "--top", "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "not used by any of the 3 row(s) shown: all_reduce/inter-node/16" in r.stderr
    # a 1.7B model on DP 16 (TP 1, no sharding) all-reduces gradients over the 16 ranks on two nodes: used
    r = _planner("fit", "--model", "megatron-gpt-1.7b", "--gpus", "16", "--tp", "1", "--pp", "1", "--cp", "1",
                 "--sharding", "none", "--calibration", prof, "--top", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "used all_reduce/inter-node/16 (rows 1, 2)" in r.stderr, r.stderr
