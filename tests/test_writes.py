"""Every file the planner writes is written atomically (issue 24): a temporary file in the
target's folder, fsync, os.replace (planner/files.py write_atomic). Under a file-size limit
(RLIMIT_FSIZE, as `ulimit -f` sets it; SIGXFSZ ignored so the write fails with EFBIG instead
of killing the process) the command exits 2 with `error:` naming the file, and the file that
was there before is byte for byte the same; no temporary file is left behind.

Also: `export -o` refuses to overwrite its own input, --output names longer than NAME_MAX,
and two `calibrate` commands writing one profile at once keep both sections (files.locked).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NCCL_LOG = ROOT / "tests/data/nccl_logs/h100_8gpu_allreduce_aws-p5-batch.txt"
GEMM_ROWS = ROOT / "tests/data/gemm_measurements.yaml"


def _planner(*args, cwd: Path, limit: int | None = None) -> subprocess.CompletedProcess:
    def _limit():  # runs in the child before exec; an ignored signal stays ignored across exec
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "planner", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, preexec_fn=_limit if limit is not None else None, timeout=120)


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 2\n", encoding="utf-8")
    return job


WRITERS = {
    "export -o good.sh": lambda t: (["export", "--format", "megatron", _job(t), "-o", "good.sh"], "good.sh"),
    "export -o good.toml": lambda t: (["export", "--format", "torchtitan", _job(t), "--stack", "torchtitan", "--sharding", "fsdp", "-o", "good.toml"], "good.toml"),
    "explain --plot good.png": lambda t: (["explain", "--model", "llama3-8b", "--gpus", "8", "--plot", "good.png"], "good.png"),
    "explain --plot good.svg": lambda t: (["explain", "--model", "llama3-8b", "--gpus", "8", "--plot", "good.svg"], "good.svg"),
    "explain --plot good.pdf": lambda t: (["explain", "--model", "llama3-8b", "--gpus", "8", "--plot", "good.pdf"], "good.pdf"),
    "pipeline --plot good.pdf": lambda t: (["pipeline", "--stages", "4", "--microbatches", "8", "--plot", "good.pdf"], "good.pdf"),
    "calibrate nccl -o prof.yaml": lambda t: (["calibrate", "nccl", NCCL_LOG, "--collective", "all_reduce", "--nodes", "1",
                                               "-o", "prof.yaml"], "prof.yaml"),
    "calibrate gemm -o prof.yaml": lambda t: (["calibrate", "gemm", "--from", GEMM_ROWS, "--gpu-filter", "H100 80GB HBM3",
                                               "--hardware", "h100-sxm", "-o", "prof.yaml"], "prof.yaml"),
}


@pytest.mark.parametrize("case", list(WRITERS))
def test_a_failed_write_keeps_the_old_file(tmp_path, case, cli, monkeypatch):
    args, out = WRITERS[case](tmp_path)
    monkeypatch.chdir(tmp_path)  # the file that is there before: the same command, in-process (conftest's cli)
    first = cli(*args)
    assert first.exit_code == 0, first.stderr
    before = (tmp_path / out).read_bytes()
    r = _planner(*args, cwd=tmp_path, limit=len(before) // 2)  # the same output again crosses the limit half-way
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("error:") or "\nerror:" in r.stderr
    assert out in r.stderr and "File too large" in r.stderr and "unchanged" in r.stderr
    assert (tmp_path / out).read_bytes() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_write_atomic_keeps_mode_and_follows_links(tmp_path):
    from planner import files

    target = tmp_path / "real.sh"
    target.write_text("old\n")
    target.chmod(0o750)
    link = tmp_path / "link.sh"
    link.symlink_to(target.name)
    files.write_atomic(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o750


def test_export_refuses_to_overwrite_its_input(tmp_path):
    job = _job(tmp_path)
    before = job.read_bytes()
    for out in ("job.yaml", "./job.yaml", str(job)):
        r = _planner("export", "--format", "megatron", "job.yaml", "-o", out, cwd=tmp_path)
        assert r.returncode == 2 and "would destroy the input" in r.stderr, r.stderr
    (tmp_path / "alias.yaml").symlink_to("job.yaml")
    r = _planner("export", "--format", "megatron", "alias.yaml", "-o", "job.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "would destroy the input" in r.stderr, r.stderr
    assert job.read_bytes() == before


@pytest.mark.parametrize("args", [
    ["export", "--format", "megatron", "--model", "llama3-8b", "--gpus", "8", "-o"],
    ["explain", "--model", "llama3-8b", "--gpus", "8", "--plot"],
    ["calibrate", "nccl", NCCL_LOG, "--collective", "all_reduce", "--nodes", "1", "-o"],
    ["calibrate", "run", ROOT / "tests/data/run_calibration", "-o"],
])
def test_output_names_over_name_max(tmp_path, args):
    name = "a" * 300 + (".png" if "--plot" in args else ".yaml")
    r = _planner(*args, name, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "over the 255 a file system takes" in r.stderr, r.stderr


def _sections(path: Path) -> set[str]:
    from planner.profile import load_profile

    prof = load_profile(path)
    return {s for s in ("nccl", "gemm", "run") if getattr(prof, s) is not None}


NCCL_ARGS = ["calibrate", "nccl", NCCL_LOG, "--collective", "all_reduce", "--nodes", "1", "-o"]
GEMM_ARGS = ["calibrate", "gemm", "--from", GEMM_ROWS, "--gpu-filter", "H100 80GB HBM3", "--hardware", "h100-sxm", "-o"]


def test_concurrent_calibrations_keep_every_section(tmp_path):
    """nccl and gemm calibrations started together on one profile, 4 times: each profile
    ends with both sections (without the lock, one in 12-21 such pairs lost one)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    procs = []
    for trial in range(4):
        prof = tmp_path / f"p{trial}.yaml"
        for args in (NCCL_ARGS, GEMM_ARGS):
            procs.append(subprocess.Popen([sys.executable, "-m", "planner", *map(str, args), prof], cwd=tmp_path, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
    for trial in range(4):
        assert _sections(tmp_path / f"p{trial}.yaml") == {"nccl", "gemm"}


def test_a_calibration_waits_for_the_profile_lock(tmp_path):
    """While this process holds the profile's lock and writes an nccl section, a `calibrate
    gemm` on the same profile waits, then reads that section and keeps it."""
    from planner import files
    from planner.calibrate.nccl import calibrate_logs
    from planner.calibrate.profile import profile_from_calibration, write_profile

    prof = tmp_path / "p.yaml"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    with files.locked(prof):
        proc = subprocess.Popen([sys.executable, "-m", "planner", *map(str, GEMM_ARGS), prof], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            proc.wait(timeout=8)  # time to start and ingest (about 1.5 s); it must still be waiting for the lock
        except subprocess.TimeoutExpired:
            pass
        assert proc.returncode is None, proc.stderr.read()
        cal = calibrate_logs([NCCL_LOG], collective="all_reduce", nodes=1)
        write_profile(profile_from_calibration(cal), prof)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert _sections(prof) == {"nccl", "gemm"}


def test_calibrate_nccl_without_output_prints_the_profile(tmp_path):
    r = _planner("calibrate", "nccl", NCCL_LOG, "--collective", "all_reduce", "--nodes", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import yaml

    data = yaml.safe_load(r.stdout)
    assert data["nccl"]["groups"][0]["collective"] == "all_reduce" and data["nccl"]["groups"][0]["ranks"] == 8
    assert "profile on stdout" in r.stderr
    assert list(tmp_path.iterdir()) == []
