"""Issue 12, "wrong or contradictory figures with exit 0": a test per failure fixed (the
invariants over many plans are in tests/test_invariants.py)."""

from __future__ import annotations

import warnings

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
