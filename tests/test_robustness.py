"""Bad and extreme input never crashes (issue 12): one test per failure the fuzz audit found.

Each reproduces the input the audit gave and asserts the contract: exit 2, a one-line
`error:` naming the file (or option) and field, `hint:`, no traceback; a valid but huge
size is refused by the search with the field that makes it huge, not by MemoryError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from planner import files
from planner.errors import PlannerError
from conftest import assert_one_error

DATA = Path(__file__).parent / "data"
NCCL = DATA / "nccl_logs" / "h100_8gpu_allreduce_aws-p5-batch.txt"
BIG = 99999999999999999999  # > 2**63
HF = dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
          num_key_value_heads=8, vocab_size=128256, hidden_act="silu", max_position_embeddings=8192,
          rms_norm_eps=1e-5, rope_theta=5e5, tie_word_embeddings=False)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _job(tmp_path, name="job.yaml", **fields):
    return _write(tmp_path, name, yaml.safe_dump({"model": "llama3-8b", "gpus": 8, **fields}))


# ------------------------------------------------------------ integers beyond int64
@pytest.mark.parametrize("args,needle", [
    # issue 24: an option's integer beyond int64 is refused by its spelling (cli/common.py) before any field
    (["explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", str(BIG)], "--global-batch"),
    (["explain", "--model", "llama3-8b", "--gpus", str(BIG)], "gpus"),
    (["explain", "--model", "llama3-8b", "--gpus", "8", "--micro-batch", str(BIG)], "--micro-batch"),
    (["fit", "--model", "llama3-8b", "--gpus", str(BIG)], "gpus"),
    (["fit", "--model", "llama3-8b", "--gpus", f"8,{BIG}"], "--gpus"),
    (["fit", "--model", "llama3-8b", "--gpus", "8", "--micro-batch", str(BIG)], "--micro-batch"),
    (["fit", "--model", "llama3-8b", "--gpus", "8", "--max-pp", str(BIG)], "--max-pp"),
    (["fit", "--model", "llama3-8b", "--gpus", "8", "--global-batch", str(BIG)], "--global-batch"),
])
def test_integers_beyond_int64_in_options_exit_2(cli, args, needle):
    r = cli(*args)
    assert_one_error(r, needle, "2147483647")


def test_check_with_a_huge_batch_reports_it_after_a_good_job(cli, tmp_path):
    ok = _job(tmp_path, "ok.yaml", tp=8, global_batch=64)
    big = _job(tmp_path, "big.yaml", global_batch=BIG)
    r = cli("check", ok, big)
    assert_one_error(r, "big.yaml", "global_batch")
    assert r.stdout.startswith(f"PASS {ok}")
    r = cli("check", ok, big, "--format", "json")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    rows = json.loads(r.stdout)
    assert [x["verdict"] for x in rows] == ["pass", "error"] and "global_batch" in rows[1]["error"]


def test_huge_integer_in_a_model_and_a_hardware_file(cli, tmp_path):
    m = yaml.safe_load((DATA / "tiny-fit.yaml").read_text())
    p = _write(tmp_path, "m.yaml", yaml.safe_dump({**m, "vocab_size": 2**64}))
    assert_one_error(cli("explain", "--model", p, "--gpus", "8"), "m.yaml", "vocab_size")
    hw = yaml.safe_load((DATA / "hardware" / "aws-p4de.yaml").read_text())
    p = _write(tmp_path, "hw.yaml", yaml.safe_dump({**hw, "gpus_per_node": 2**70}))
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", p), "hw.yaml", "gpus_per_node")


def test_non_finite_numbers_are_refused(cli, tmp_path):
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--tokens", "1e400"), "tokens", "finite")
    assert_one_error(cli("explain", _job(tmp_path, headroom=float("nan"))), "headroom", "finite")


# --------------------------------------------------------------- valid but huge sizes
def test_max_seq_len_of_1e12_is_refused_with_the_field(cli, tmp_path):
    m = yaml.safe_load((DATA / "tiny-fit.yaml").read_text())
    p = _write(tmp_path, "long.yaml", yaml.safe_dump({**m, "max_seq_len": 10**12}))
    assert_one_error(cli("fit", "--model", p, "--gpus", "8"), "long.yaml", "max_seq_len")


def test_nvlink_domain_of_8e9_is_refused_with_the_field(cli, tmp_path):
    hw = yaml.safe_load((DATA / "hardware" / "aws-p4de.yaml").read_text())
    p = _write(tmp_path, "hw.yaml", yaml.safe_dump({**hw, "nvlink_domain": 8 * 10**9}))
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "8", "--hardware", p), "hw.yaml", "nvlink_domain")


def test_32_million_layers_fit_refuses_the_space_and_explain_works(cli, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**HF, "num_hidden_layers": 32_000_000}))
    r = cli("fit", "--model", p, "--gpus", "8")
    assert_one_error(r, "search space is too large", "num_layers 32,000,000", "--vpp")
    r = cli("fit", "--model", p, "--gpus", "8", "--max-vpp", "1")  # bounded: the search runs (nothing fits)
    assert r.exit_code == 1 and "Traceback" not in r.stderr, r.stderr
    r = cli("explain", "--model", p, "--gpus", "8", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["memory"]["fits"] is False


def test_pp_above_the_gpu_count_is_counted_not_listed(tmp_path):
    """The pp values above the GPU count are MESH candidates, counted (one per tp x cp)
    without an array of them: the count equals a plain loop over tp x cp x pp."""
    from planner.plan import MESH
    from planner.schema import Job
    from planner.space import _divisors, build_space, settings_for

    hw = str(DATA / "hardware" / "aws-p4de.yaml")  # nvlink_domain 8
    job = Job(model=str(DATA / "tiny-fit.yaml"), gpus=2, hardware=hw, global_batch=8)  # 4 layers, seq 1024
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq)
    T, C, P = [1, 2, 4, 8], [1, 2], [1, 2, 3, 4]
    assert list(_divisors(8)) == T
    broken = sum(1 for t in T for c in C for p in P if 2 % (t * c * p))
    assert broken == 28  # only (1,1,1), (2,1,1), (1,2,1), (1,1,2) divide 2 GPUs
    assert space.reasons[MESH] == broken


def test_divisors_by_trial_division_up_to_the_square_root():
    from planner.schema import MAX_COUNT
    from planner.space import _divisors

    assert list(_divisors(1)) == [1]
    assert list(_divisors(36)) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert list(_divisors(MAX_COUNT)) == [1, MAX_COUNT]  # 2**31 - 1 is a Mersenne prime
    assert len(_divisors(2**30)) == 31


# ------------------------------------------------------------------ YAML and JSON
@pytest.mark.parametrize("text,needle", [
    ("[" * 1000 + "]" * 1000, "job.yaml"),
    ("model: !!float \"[]\"\ngpus: 8\n", "`!!` tag"),
    ("model: !!timestamp abc\ngpus: 8\n", "`!!` tag"),
    ("a: " + "{b: " * 20000 + "}" * 20000 + "\n", "job.yaml"),
])
def test_yaml_errors_other_than_yamlerror_exit_2(cli, tmp_path, text, needle):
    p = _write(tmp_path, "job.yaml", text)
    assert_one_error(cli("explain", p), "job.yaml", needle)


def test_yaml_constructor_errors_are_planner_errors():
    for text in ('x: !!float "[]"', "x: !!timestamp abc", "x: !!int 1e", "- " * 50000, "[" * 100000):
        with pytest.raises(PlannerError, match="f.yaml"):
            files.parse_yaml(text, "f.yaml")


def test_json_nested_2000_deep_exits_2(cli, tmp_path):
    p = _write(tmp_path, "config.json", "[" * 2000 + "]" * 2000)
    assert_one_error(cli("explain", "--model", p, "--gpus", "8"), "config.json", "nested too deeply")
    p = _write(tmp_path, "fit.json", "[" * 2000 + "]" * 2000)
    r = cli("explain", "--from-fit", p)
    assert_one_error(r, "fit.json")


@pytest.mark.parametrize("field,value", [("attention_dropout", [0.1]), ("model_type", ["llama"]),
                                          ("hidden_act", {"a": 1}), ("tie_word_embeddings", "yes")])
def test_hf_config_field_of_the_wrong_type_exits_2(cli, tmp_path, field, value):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**HF, field: value}))
    assert_one_error(cli("explain", "--model", p, "--gpus", "8"), "config.json", f"`{field}`")


def test_the_c_yaml_loader_is_used_when_present():
    assert files.YAML_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert files.parse_yaml("a: [1, 2.5, x]\nb: {c: null}\n", "t") == {"a": [1, 2.5, "x"], "b": {"c": None}}


# ----------------------------------------------------- unreadable, FIFO, device files
def _deny(monkeypatch, path):
    real = open

    def fake_open(p, *a, **k):
        if Path(p) == Path(path):
            raise PermissionError(13, "Permission denied", str(p))
        return real(p, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)


def _every_reader(tmp, p):
    """Each CLI reader given path p: (args, ...)."""
    return [
        ["explain", p],
        ["explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", p],
        ["explain", "--model", "llama3-8b", "--gpus", "8", "--stack", p],
        ["explain", "--model", "llama3-8b", "--gpus", "8", "--calibration", p],
        ["explain", "--from-fit", p],
        ["check", p],
        ["budget", p],
        ["validate", p],
        ["calibrate", "nccl", p, "-o", tmp / "prof.yaml"],
        ["calibrate", "gemm", "--from", p, "-o", tmp / "prof.yaml"],
    ]


def test_a_permission_denied_file_exits_2_in_every_reader(cli, tmp_path, monkeypatch):
    for name in ("x.yaml", "x.json", "x.csv", "x.txt"):
        p = _write(tmp_path, name, "model: llama3-8b\ngpus: 8\n")
        _deny(monkeypatch, p)
        for args in _every_reader(tmp_path, p):
            r = cli(*args)
            assert r.exit_code == 2 and "Traceback" not in r.stderr, (args, r.stderr)
            if str(p) in r.stderr:  # the readers that open it (a path that is no catalog name)
                assert "Permission denied" in r.stderr, (args, r.stderr)
        monkeypatch.undo()
    p = _write(tmp_path, "m.yaml", "x")
    _deny(monkeypatch, p)
    assert_one_error(cli("explain", "--model", p, "--gpus", "8"), "m.yaml", "Permission denied")
    p = _write(tmp_path, "config.json", "{}")
    _deny(monkeypatch, p)
    assert_one_error(cli("explain", "--model", p, "--gpus", "8"), "config.json", "Permission denied")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_dev_zero_is_refused_without_blocking(cli, tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for p in (fifo, Path("/dev/zero")):
        if not p.exists():
            continue
        for args in _every_reader(tmp_path, p):
            r = cli(*args)  # a reader that opened it would block (FIFO) or fill memory (/dev/zero)
            assert r.exit_code == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        assert_one_error(cli("explain", p), "not a regular file")
        assert_one_error(cli("calibrate", "nccl", p, "-o", tmp_path / "p.yaml"), "not a regular file")
        assert_one_error(cli("calibrate", "gemm", "--from", p, "-o", tmp_path / "p.yaml"), "not a regular file")


def test_reading_is_capped(tmp_path, monkeypatch):
    p = _write(tmp_path, "big.yaml", "a: 1\n" * 100)
    with pytest.raises(PlannerError, match="500 bytes, more than the 100 a planner input may have"):
        files.read_bytes(p, max_bytes=100)
    assert files.read_text(p, max_bytes=500) == "a: 1\n" * 100
    d = tmp_path / "folder.yaml"
    d.mkdir()
    with pytest.raises(PlannerError, match="is a folder"):
        files.read_bytes(d)


# --------------------------------------------------------------------- nccl-tests
def _nccl_with(tmp_path, col: int, value: str, line: int = 36) -> Path:
    lines = NCCL.read_text().splitlines()
    prefix, rest = lines[line - 1].split(">:", 1)
    toks = rest.split()
    toks[col] = value
    lines[line - 1] = prefix + ">:  " + "  ".join(toks)
    p = tmp_path / f"log_{col}.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("col,value,needle", [(5, "1e400", "time '1e400'"), (6, "1e400", "algbw '1e400'"),
                                               (5, "1e-308", "below the 0.01 us")])
def test_nccl_cells_out_of_range_are_reported_by_line_not_crashing(cli, tmp_path, col, value, needle):
    p = _nccl_with(tmp_path, col, value)
    r = cli("calibrate", "nccl", p, "--nodes", "1", "-o", tmp_path / "prof.yaml")
    assert r.exit_code == 0, r.stderr
    assert f"{p.name}:36: " in r.stderr and needle in r.stderr


def test_nccl_busbw_of_1e308_is_reported_by_line(cli, tmp_path):
    p = _nccl_with(tmp_path, 7, "1e308")  # 1e308 GB/s is beyond a double in B/s
    r = cli("calibrate", "nccl", p, "--nodes", "1", "-o", tmp_path / "prof.yaml")
    assert r.exit_code == 0, r.stderr
    assert f"{p.name}:36: out-of-place busbw 1e+308 GB/s is out of range; not used" in r.stderr


def test_nccl_busbw_over_algbw_beyond_the_limit_names_the_line(tmp_path):
    from planner.calibrate.nccl import parse_log, ranks_from_ratio

    p = _nccl_with(tmp_path, 7, "1e6")  # (1e6 - 5e5 half a digit) / 276.03 = 1811 > 2, all_reduce's 2(n-1)/n -> 2
    with pytest.raises(PlannerError, match="line 36: busbw/algbw = 1811.36 is at or above 2"):
        ranks_from_ratio("all_reduce", parse_log(p).sweeps[0].points)


def test_nccl_number_tolerance_does_not_overflow():
    from planner.calibrate.nccl import _num

    assert _num("1.5e300") == (1.5e300, pytest.approx(5e298))
    assert _num("12.34") == (12.34, pytest.approx(0.005))
    for bad in ("1e400", "-1e999"):
        with pytest.raises(ValueError):
            _num(bad)


def test_gemm_csv_field_over_the_csv_limit_names_the_line(cli, tmp_path):
    p = _write(tmp_path, "g.csv", "M,N,K,dtype,tflops\n1,2,3,bf16,\"" + "x" * 140_000 + "\"\n")
    assert_one_error(cli("calibrate", "gemm", "--from", p, "-o", tmp_path / "p.yaml"), "g.csv:2", "field larger")


# ----------------------------------------------------------- click's usage errors
@pytest.mark.parametrize("args,needle", [
    (["explain", "--model", "llama3-8b", "--gpus", "abc"], "--gpus"),
    (["explain", "--bogus"], "no such option: --bogus"),
    (["check"], "missing argument"),
    (["calibrate", "nccl"], "missing argument"),
    (["bogus"], "no such command 'bogus'"),
    (["fit", "--top"], "--top"),
])
def test_click_usage_errors_are_one_line(cli, args, needle):
    r = cli(*args)
    assert_one_error(r, needle, "--help")
    assert "╭" not in r.stderr and "Usage:" not in r.stderr


def test_help_still_works(cli):
    r = cli("--help")
    assert r.exit_code == 0 and "fit" in r.stdout
    r = cli("explain", "--help")
    assert r.exit_code == 0 and "--gpus" in r.stdout
    r = cli()
    assert "Usage" in r.stdout + r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------ profiles: atomic write
def _calibrate_nccl(cli, out):
    return cli("calibrate", "nccl", NCCL, "--nodes", "1", "-o", out)


def _calibrate_gemm(cli, out):
    return cli("calibrate", "gemm", "--from", DATA / "gemm_measurements.yaml", "--gpu-filter", "h100", "-o", out)


def test_a_failed_profile_write_leaves_the_old_profile_intact(cli, tmp_path, monkeypatch):
    out = tmp_path / "profile.yaml"
    assert _calibrate_nccl(cli, out).exit_code == 0
    before = out.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)  # the temporary file fails before the rename
    r = _calibrate_gemm(cli, out)
    assert r.exit_code == 2 and "No space left on device" in r.stderr and "Traceback" not in r.stderr
    assert out.read_bytes() == before  # not truncated, not half-written
    # no temporary file left behind (the empty lock file the calibrations take turns on stays: planner/files.py locked)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.yaml", "profile.yaml.lock"]
    monkeypatch.undo()
    from planner.profile import load_profile

    assert load_profile(out).nccl is not None and load_profile(out).gemm is None


def test_profile_write_goes_through_a_rename_in_the_same_folder(tmp_path, monkeypatch):
    from planner.calibrate import profile as cp
    from planner.profile import load_profile

    src = tmp_path / "a.yaml"
    from typer.testing import CliRunner

    from planner.cli import app

    assert CliRunner().invoke(app, ["calibrate", "nccl", str(NCCL), "--nodes", "1", "-o", str(src)]).exit_code == 0
    prof = load_profile(src)
    seen = []
    real = os.replace

    def spy(a, b):
        seen.append((Path(a).parent, Path(b)))
        return real(a, b)

    monkeypatch.setattr(os, "replace", spy)
    dst = tmp_path / "b.yaml"
    cp.write_profile(prof, dst)
    assert seen == [(tmp_path, dst)]
    assert load_profile(dst) == prof
    from planner import files

    assert oct(dst.stat().st_mode & 0o777) == oct(0o666 & ~files._umask())


def test_replacing_a_section_says_so_on_stderr(cli, tmp_path):
    out = tmp_path / "profile.yaml"
    r = _calibrate_nccl(cli, out)
    assert "replacing" not in r.stderr  # a new file
    r = _calibrate_gemm(cli, out)
    assert r.exit_code == 0 and "replacing" not in r.stderr  # adds a gemm section, keeps nccl
    r = _calibrate_nccl(cli, out)
    assert r.exit_code == 0 and f"warning: {out}: replacing its nccl section" in r.stderr
    assert "gemm section" not in r.stderr  # kept
    r = _calibrate_gemm(cli, out)
    assert f"warning: {out}: replacing its gemm section" in r.stderr and "nccl section" not in r.stderr


# ------------------------------------------------------------- found by the fuzz harness
def test_global_batch_tokens_beyond_a_count_of_sequences_exits_2(cli, tmp_path):
    """tests/fuzzing.py, job seed job-titan.yaml: global_batch_tokens 4.2e26 made a global
    batch of 5e22 sequences and numpy overflowed in budget."""
    p = _job(tmp_path, global_batch_tokens=4.194304e26, tokens=1.5e13)
    for cmd in ("budget", "explain", "check"):
        assert_one_error(cli(cmd, p), "global_batch_tokens", "2,147,483,647")


def test_gemm_dimension_beyond_a_count_exits_2(cli, tmp_path):
    """tests/fuzzing.py, gemm.json seed: K = 1e308 passed the row check and failed the
    profile's GemmRow validation with a traceback."""
    p = _write(tmp_path, "g.json", json.dumps([{"M": 4096, "N": 4096, "K": 1e308, "dtype": "bf16", "tflops": 700}]))
    assert_one_error(cli("calibrate", "gemm", "--from", p, "-o", tmp_path / "p.yaml"), "g.json: row 1", "`K`")


def test_quantities_beyond_a_double_are_refused():
    from planner.units import parse_bytes, parse_count, parse_seconds

    for parse, text in ((parse_count, "1e400"), (parse_bytes, "1e400GB"), (parse_seconds, "1e400s"), (parse_count, "1e306P")):
        with pytest.raises(PlannerError, match="not a finite number"):
            parse(text, "--x")
    assert parse_count("1e306") == 1e306


@pytest.mark.parametrize("option", ["--model", "--hardware", "--stack", "--calibration"])
def test_a_name_longer_than_a_file_name_may_be_exits_2(cli, option):
    """tests/fuzzing.py, fit-json seed: a 5,000-character model name made Path.is_file()
    raise ENAMETOOLONG (Python < 3.12)."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", option, "x" * 5000)
    assert_one_error(r)


def test_a_saved_fit_row_with_a_name_too_long_exits_2(cli, tmp_path):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "2", "--format", "json")
    rows = json.loads(r.stdout)
    rows[1]["plan"]["model"] = "x" * 5000
    rows[1]["plan"]["model_file"] = "/" + "x" * 5000  # the file the fit read (issue 12: --from-fit reads it)
    p = _write(tmp_path, "fit.json", json.dumps(rows))
    assert_one_error(cli("explain", "--from-fit", p, "--row", "2"), "model file")
    assert files.exists("x" * 5000) is False and files.is_file("x" * 5000) is False and files.is_dir("a\0b") is False


def test_a_path_with_a_nul_byte_is_bad_input(tmp_path):
    with pytest.raises(PlannerError, match="NUL byte"):
        files.read_bytes("a\0b.yaml")
    with pytest.raises(PlannerError, match="no such file"):
        files.read_text(tmp_path / "absent.yaml")


@pytest.mark.parametrize("args,where", [
    (["fit", "--model", "llama3-8b", "--shard-group"], "planner fit"),
    (["explain", "--model"], "planner explain"),
    (["calibrate", "nccl", "--output"], "planner calibrate nccl"),
])
def test_option_missing_its_value_names_the_subcommand(args, where):
    """An option with no value after it: click's parser raises 'Option ... requires an argument.' with no context
    (parser._get_value_from_state), so the error named the group: 'error: planner: option '--shard-group' requires an
    argument' and 'planner --help'. Now the command the words name (cli._command_path), as click's other usage errors
    (no such option) already did. Run through planner.cli.main, the `planner` entry point (prog_name 'planner')."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent  # this checkout's planner, not another install's
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-m", "planner", *args], cwd=root, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr
    opt = args[-1]
    assert r.stderr.splitlines()[0] == f"error: {where}: option '{opt}' requires an argument."
    assert r.stderr.splitlines()[1] == f"hint: `{where} --help` lists the arguments and options"


def test_option_missing_its_value_in_process_names_the_subcommand(cli):
    """The same through typer's CliRunner (the tests' cli fixture): the subcommand is named."""
    r = cli("fit", "--model", "llama3-8b", "--shard-group")
    assert_one_error(r, " fit: option '--shard-group' requires an argument", " fit --help`")
