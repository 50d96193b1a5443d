"""Issue 12, "wrong or contradictory figures with exit 0": a test per failure fixed (the
invariants over many plans are in tests/test_invariants.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.catalog import hardware_dir, load_model
from planner.memory import ACT_BYTES, per_layer_activation_bytes

from conftest import assert_one_error

MODEL = ["--model", "llama3-8b", "--gpus", "8"]


# ------------------------------------------------------------------ exposed DP <= total
def test_fully_exposed_dp_is_not_inflated_by_the_edge_share(explain):
    """A tiny global batch over many DP ranks: the gradient traffic far outlasts the one
    micro-batch's backward, so nearly all of it is exposed; the never-hiding last bucket must
    not come on top (it did: exposed = total + total/buckets, a negative "hidden" time)."""
    _, _, _, js = explain(model="llama3-70b", gpus=1024, tp=8, global_batch=128, seq_len=1024, micro_batch=1)
    t = js["time"]
    assert 0.0 < t["dp_comm_exposed_s"] <= t["dp_comm_s"]
    _, _, _, js = explain(model="llama3-70b", gpus=1024, tp=8, global_batch=128, seq_len=1024, sharding="fsdp")
    t = js["time"]
    assert 0.0 < t["dp_comm_exposed_s"] <= t["dp_comm_s"]


def test_explain_never_prints_negative_hidden_dp_time(cli):
    for extra in ([], ["--sharding", "fsdp"], ["--sharding", "zero1"], ["--no-dp-comm-overlap"]):
        r = cli("explain", "--model", "llama3-70b", "--gpus", "1024", "--tp", "8", "--global-batch", "128",
                "--seq-len", "1024", *extra)
        assert r.exit_code == 0, r.stderr
        line = next(ln for ln in r.stdout.splitlines() if "DP traffic" in ln)
        hidden = float(line.split("s per step, ")[1].split(" s of it")[0].replace(",", ""))
        assert hidden >= 0.0, line


# ------------------------------------------------------------------ full recompute memory
def test_full_recompute_one_layer_per_stage_by_hand(explain):
    """One layer per stage (pp = layers), one micro-batch. No recompute keeps the layer's
    activations A (its input 2sbh among them). Full recompute keeps the input 2sbh as the
    checkpoint and re-materialises the rest, A - 2sbh, for the backward: A in all, never more
    (it was A + 2sbh: the input counted twice)."""
    kw = dict(model="llama3-8b", gpus=32, pp=32, global_batch=1, micro_batch=1, seq_len=4096)
    _, plan, none, _ = explain(**kw)
    _, _, full, _ = explain(recompute="full", **kw)
    m = load_model("llama3-8b")
    A = float(per_layer_activation_bytes(m, plan))  # one layer, one micro-batch (megatron: no extra saves)
    inp = 4096 * ACT_BYTES * m.hidden_size  # 2sbh
    assert float(none.memory.layer_activations) == pytest.approx(A)  # 1 layer x 1 in flight
    assert float(full.memory.layer_activations) == pytest.approx(inp)
    assert float(full.memory.recompute_buffer) == pytest.approx(A - inp)
    act = lambda e: float(e.memory.layer_activations + e.memory.recompute_buffer)  # noqa: E731
    assert act(full) == pytest.approx(act(none))
    assert act(full) <= act(none) * (1 + 1e-12)


# ------------------------------------------------------------------ non-finite input
@pytest.mark.parametrize("args,needle", [
    (["--reserve-gib", "1e308"], "reserve_GiB"),
    (["--reserve-gib", "inf"], "--reserve-gib"),
    (["--tokens", "1e400"], "--tokens"),
    (["--headroom", "nan"], "--headroom"),
    (["--power-limit-w", "inf"], "--power-limit-w"),
    (["--global-batch-tokens", "1e400"], "--global-batch-tokens"),
])
def test_non_finite_options_exit_2(cli, args, needle):
    assert_one_error(cli("explain", *MODEL, *args), needle, "finite")


@pytest.mark.parametrize("bw", ["inf", "nan", "1e308"])
def test_collective_bandwidth_must_be_finite(cli, bw):
    assert_one_error(cli("collective", "--op", "all-reduce", "--size", "1GB", "--ranks", "8", "--bandwidth", bw),
                     "--bandwidth", "finite")


def test_non_finite_in_a_job_file(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\nheadroom: .nan\n")
    assert_one_error(cli("explain", job), "job.yaml", "headroom")
    job.write_text("model: llama3-8b\ngpus: 8\ntokens: .inf\n")
    assert_one_error(cli("explain", job), "job.yaml", "tokens")


# ------------------------------------------------------------------ hardware cross-check
def _hw_copy(tmp_path, **changes):
    data = yaml.safe_load((hardware_dir() / "h100-sxm.yaml").read_text())
    for k, v in changes.items():
        if k.startswith("compute."):
            data["compute"][k.split(".", 1)[1]] = v
        else:
            data[k] = v
    p = tmp_path / "my-gpu.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_hardware_peak_below_its_measured_gemm_is_refused(cli, tmp_path):
    """h100-sxm measures 794.5 TFLOP/s bf16 GEMMs; a copy that states a 500 TFLOP/s peak would
    give an MFU above 100%."""
    p = _hw_copy(tmp_path, bf16_TFLOPS=500)
    assert_one_error(cli("explain", *MODEL, "--hardware", p), "my-gpu.yaml", "compute.gemm_bf16_TFLOPS", "bf16_TFLOPS")
    p = _hw_copy(tmp_path, fp8_TFLOPS=None)
    assert_one_error(cli("explain", *MODEL, "--hardware", p), "compute.gemm_fp8_TFLOPS", "fp8_TFLOPS")
    p = _hw_copy(tmp_path, **{"compute.attention_fwd_TFLOPS": 2000})
    assert_one_error(cli("explain", *MODEL, "--hardware", p), "compute.attention_fwd_TFLOPS")


def test_a_measured_figures_k_too_small_for_its_write_is_refused(cli, tmp_path):
    """compute [5a] backs the K loop's rate out of 794.5 TFLOP/s at K: 1/794.5 - 1/(K x 3.35 x 0.9)
    (in 1/TFLOP/s) is 1/810.55 at K 13,312, but negative at K 100 (1/301.5 > 1/794.5) and 1/1,078.8
    at K 1,000 (1/794.5 - 1/3,015: above the 989 peak): both refused."""
    for k in (100, 1000):
        p = _hw_copy(tmp_path, **{"compute.gemm_bf16_K": k})
        assert_one_error(cli("explain", *MODEL, "--hardware", p), "compute.gemm_bf16_TFLOPS", f"at K {k}",
                         "gemm_bf16_K")
    p = _hw_copy(tmp_path, **{"compute.gemm_bf16_K": 4000})  # 1/794.5 - 1/12,060 = 1/850.5: below the peak
    assert cli("explain", *MODEL, "--hardware", p).exit_code == 0


def test_every_catalog_entry_passes_the_cross_check():
    from planner.catalog import list_hardware, load_hardware

    for name in list_hardware():
        hw = load_hardware(name)
        if hw.compute and hw.compute.gemm_bf16_TFLOPS:
            assert hw.compute.gemm_bf16_TFLOPS <= hw.bf16_TFLOPS


def test_mfu_stays_below_one_on_the_catalog(explain):
    for model, gpus in (("llama3-8b", 8), ("llama3-70b", 64)):
        _, _, _, js = explain(model=model, gpus=gpus, tp=8, global_batch=gpus * 4)
        assert 0.0 < js["throughput"]["mfu"] < 1.0
        assert js["throughput"]["hfu"] < 1.0


# ------------------------------------------------------------------ budget errors
@pytest.mark.parametrize("args", [["--mtbf-hours", "1e-300"], ["--checkpoint-save-s", "1e300"]])
def test_budget_overflow_is_one_clean_error(cli, args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail the test
        r = cli("budget", *MODEL, "--tokens", "1e12", *args)
    assert_one_error(r, "wall-clock", "MTBF")
    assert "np.float64" not in r.stderr and "RuntimeWarning" not in r.stderr


def test_reliability_messages_show_plain_numbers():
    from planner.errors import PlannerError
    from planner.reliability import young_interval

    with pytest.raises(PlannerError) as e:
        young_interval(30.0, np.float64("nan"))
    assert "got nan" in e.value.message and "np.float64" not in e.value.message


# ------------------------------------------------------------------ fit: ranking, command, --from-fit
def test_rank_key_makes_last_bit_differences_ties():
    from planner.search import _top, rank_key

    a = 0.1 + 0.2  # 0.30000000000000004
    b = 0.3
    assert a != b and rank_key(a) == rank_key(b)
    assert rank_key(1.0) != rank_key(1.0 + 1e-8)  # a real difference stays one
    assert rank_key(0.0) == 0.0 and rank_key(-2.5) == -2.5
    step = np.array([a, b, 0.4])
    memory = np.array([2e9, 1e9, 0.5e9])
    # exact floats rank a after b only by time; the rounded key ties them and the lower memory wins
    order = _top(tuple(rank_key(k) for k in (step, memory)), 3)
    assert list(order) == [1, 0, 2]


def test_fit_rows_tied_on_time_are_ordered_by_memory(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "10", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    from planner.search import rank_key

    keys = [(float(rank_key(x["time"]["step_s"])), float(rank_key(x["memory"]["total_bytes"]))) for x in rows]
    assert keys == sorted(keys)


@pytest.fixture(scope="module")
def nccl_profile(tmp_path_factory):
    from pathlib import Path

    from typer.testing import CliRunner

    from planner.cli import app

    out = tmp_path_factory.mktemp("prof") / "p.yaml"
    log = Path(__file__).parent / "data" / "nccl_logs" / "h100_8gpu_allreduce_aws-p5-batch.txt"
    r = CliRunner().invoke(app, ["calibrate", "nccl", str(log), "--nodes", "1", "--hardware", "h100-sxm", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    return out


def test_fit_command_and_from_fit_keep_the_calibration(cli, tmp_path, nccl_profile):
    args = ["fit", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--no-sequence-parallel", "--top", "3",
            "--calibration", nccl_profile]  # TP all-reduces over the 8 ranks the profile measured
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "row 1 in full" in ln)
    assert f"--calibration {nccl_profile.resolve()}" in line
    r = cli(*args, "--format", "json")
    rows = json.loads(r.stdout)
    assert rows[0]["calibration"]["used"], "the profile must change a time for this test to mean something"
    saved = tmp_path / "fit.json"
    saved.write_text(r.stdout)
    e = cli("explain", "--from-fit", saved, "--row", "1", "--format", "json")
    assert e.exit_code == 0, e.stderr
    got = json.loads(e.stdout)
    assert got["time"] == rows[0]["time"] and got["calibration"] == rows[0]["calibration"]


def test_from_fit_uses_the_files_the_fit_read(cli, tmp_path):
    """An edited copy named like a catalog entry: --from-fit must use the copy (it used the
    catalog entry of the same name), and refuse once the copy changed."""
    spec = yaml.safe_load((hardware_dir().parent / "model_zoo" / "llama3-8b.yaml").read_text())
    spec["num_layers"] = 16  # same name, other shape
    mine = tmp_path / "llama3-8b.yaml"
    mine.write_text(yaml.safe_dump(spec))
    r = cli("fit", "--model", mine, "--gpus", "8", "--top", "2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows[0]["plan"]["model"] == "llama3-8b" and rows[0]["plan"]["model_file"] == str(mine.resolve())
    saved = tmp_path / "fit.json"
    saved.write_text(r.stdout)
    e = cli("explain", "--from-fit", saved, "--row", "1", "--format", "json")
    assert e.exit_code == 0, e.stderr
    got = json.loads(e.stdout)
    assert got["params"] == rows[0]["params"] and got["memory"] == rows[0]["memory"]
    spec["num_layers"] = 20
    mine.write_text(yaml.safe_dump(spec))
    assert_one_error(cli("explain", "--from-fit", saved, "--row", "1"), "model file", "changed since the fit", "--model")
    mine.unlink()
    assert_one_error(cli("explain", "--from-fit", saved, "--row", "1"), "no longer exists")
    # an explicit --model still wins
    e = cli("explain", "--from-fit", saved, "--row", "1", "--model", "llama3-8b")
    assert e.exit_code == 0, e.stderr


# ------------------------------------------------------------------ finite inputs, overflowing results
@pytest.mark.parametrize("cmd", [
    ["budget", *MODEL, "--tokens", "1e12", "--price-per-gpu-hour", "1e308"],
    ["budget", *MODEL, "--tokens", "1e12", "--pue", "1e308"],
    ["explain", *MODEL, "--tokens", "1e300"],
    ["budget", *MODEL, "--tokens", "1e300"],
])
def test_a_result_that_overflows_is_refused_not_printed(cli, cmd):
    for fmt in ("table", "json"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            r = cli(*cmd, "--format", fmt)
        assert_one_error(r, "inf")
        assert r.stdout == "" and "RuntimeWarning" not in r.stderr


def test_check_marks_an_overflowing_job_invalid(cli, tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("model: llama3-8b\ngpus: 8\ntokens: 1e300\n")
    ok = tmp_path / "ok.yaml"
    ok.write_text("model: llama3-8b\ngpus: 8\ntp: 8\nglobal_batch: 64\n")
    r = cli("check", ok, big, "--format", "json")
    assert r.exit_code == 2
    verdicts = {Path(x["file"]).name: x["verdict"] for x in json.loads(r.stdout)}
    assert verdicts == {"ok.yaml": "pass", "big.yaml": "error"}
