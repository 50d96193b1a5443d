"""Speed of `planner calibrate nccl` on dense logs and `calibrate run` on many records
(pytest-benchmark; not part of the default test run). Both are linear in their input since
issue 24 (an 18k-row log took > 5 min and 12.6 GiB; 2,000 records 148 s).

    python3 -m pytest benchmarks/test_calibrate_speed.py --benchmark-only

The inputs are generated: an all_reduce_perf table stepped by 1 MiB (nccl-tests -i) with
times from a latency-bandwidth line, and copies of tests/data/run_calibration's record over
8 GPU counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.calibrate.nccl import calibrate_logs
from planner.calibrate.run import fit_runs, record_runs
from planner.profile import RunInputFile

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests/data/run_calibration/megatron_h100_1.7b.yaml"
HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw  #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")


def dense_log(path: Path, rows: int) -> Path:
    """An 8-GPU all_reduce table, sizes 1 MiB apart; t = 20 us + S * 1.75 / 400 GB/s."""
    lines = [HEADER]
    for i in range(1, rows + 1):
        size = i * 2**20
        t = 20.0 + size * 1.75 / 400e9 * 1e6
        alg = size / (t * 1e-6) / 1e9
        row = f"{t:9.2f} {alg:7.2f} {alg * 1.75:7.2f}      0"
        lines.append(f"{size:>12d} {size // 4:>12d}     float     sum      -1 {row} {row}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("rows", [2_000, 18_000])
def test_calibrate_nccl_dense_log(benchmark, tmp_path, rows):
    log = dense_log(tmp_path / f"ar{rows}.txt", rows)
    cal = benchmark.pedantic(calibrate_logs, args=([log],), kwargs=dict(collective="all_reduce", nodes=1),
                             rounds=3, iterations=1)
    (fit,) = cal.fits.values()
    benchmark.extra_info.update(rows=rows, points=fit.points, lines=len(fit.lines))


@pytest.mark.parametrize("records", [200, 2_000])
def test_calibrate_run_records(benchmark, tmp_path, records):
    rec = yaml.safe_load(RECORD.read_text(encoding="utf-8"))[0]
    out = []
    for i in range(records):
        gpus = (8, 16, 24, 32, 48, 64, 96, 128)[i % 8]
        out.append({**rec, "id": f"rec-{i}", "num_gpus": gpus, "dp": gpus, "global_batch_size": 4 * gpus,
                    "tokens_per_sec_per_gpu": 36260.0 * (1 + 0.01 * ((i * 7) % 11 - 5)),
                    "iteration_time_s": None, "mfu": None, "tflops_per_gpu": None})
    path = tmp_path / "records.yaml"
    path.write_text(yaml.safe_dump(out, sort_keys=False), encoding="utf-8")
    files = [RunInputFile(name=str(path), sha256="0" * 64, kind="run-records")]

    def run():
        return fit_runs(record_runs(path), files)

    res = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(records=records, free=res.free)
