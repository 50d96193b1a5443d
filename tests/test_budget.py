"""`planner budget` (planner/budget.py, planner/cli/budget.py): the seed's sec. 9.2 and 10.2
figures through the command line, the checkpoint and failure terms by hand, the JSON
contract, the GPU sweep and bad input.

Figures: the seed chapter sec. 9.2 (Young's 27 min for a 30 s save and a 12 h MTBF; 95.0%
effective training time at 27 min with a 10 min restart), sec. 10.2 (45 days at 40% MFU on
4,096 H100s, 30% -> 60, 50% -> 36; Meta's 6.4 M H100-hours for Llama 3 70B on 15 T tokens
at ~28% MFU), the Llama 3 paper sec. 3.3.4 (419 unexpected interruptions in 54 days on
16,384 GPUs), the H100 datasheet (989 TFLOP/s dense BF16, 700 W). Hand derivations sit next
to the asserts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer

from planner import reliability as rel
from planner.budget import BudgetOptions, CheckpointShards, compute_budget
from planner.cli import app
from conftest import assert_one_error

PEAK = 989e12  # H100 SXM dense BF16 (datasheet; hardware_db/h100-sxm.yaml)
TDP_W = 700.0  # H100 SXM datasheet
# llama3-70b in the catalog (vocab 128,256: 70,553,706,496, tests/test_cli_explain.py's shape) as PLAN_70B builds it on
# megatron at tp 8: 129,024 rows (stack_db vocab_padding, 128 x 8 = 1,024 x 126), 768 x 8,192 x 2 (embedding and output)
# = 12,582,912 more parameters
N_70B = 70_553_706_496 + 768 * 8192 * 2
PLAN_70B = ("--model", "llama3-70b", "--gpus", "4096", "--tp", "8", "--sharding", "fsdp", "--tokens", "15e12")
SEED_9_2 = ("--mtbf-hours", "12", "--checkpoint-save-s", "30", "--restart-s", "600")


def _json(cli, *args, code=0):
    """budget's JSON; `code` 1 for a plan that does not fit (printed, exit 1)."""
    r = cli("budget", *args, "--format", "json")
    assert r.exit_code == code, r.stderr
    return json.loads(r.stdout)




# ---------------------------------------------------------------- seed sec. 9.2
def test_young_27_minutes_and_seed_goodput(cli):
    js = _json(cli, *PLAN_70B, "--mfu", "0.4", *SEED_9_2)
    ck, fl, iv, gp = js["checkpoint"], js["failures"], js["interval"], js["goodput"]
    assert ck["pause_s"] == pytest.approx(30.0, rel=1e-12)  # a 0.2 GB shard copies in 3 ms < 30 s
    assert fl["mtbf_hours"] == pytest.approx(12.0, rel=1e-12)
    assert fl["restart_s"] == 600.0
    # sqrt(2 x 30 x 43,200) = 1,609.97 s, "every 27 min"
    assert iv["young_s"] == pytest.approx(1609.9689, rel=1e-6)
    assert f"{iv['young_s'] / 60:.0f}" == "27"
    assert iv["used_s"] == iv["young_s"] and iv["rule"] == "young"
    # Daly eq. (37): x = 30/86,400; 1,609.97 (1 + sqrt(x)/3 + x/9) - 30 = 1,590.0 s
    young = np.sqrt(2 * 30 * 43200)
    assert iv["daly_s"] == pytest.approx(young * (1 + np.sqrt(30 / 86400) / 3 + 30 / 86400 / 9) - 30, rel=1e-12)
    # closed form at 1,610 s: 1,610 / (43,200 e^{600/43,200} (e^{1,640/43,200} - 1)) = 95.0%, the seed's figure
    assert gp["closed_form"] == pytest.approx(0.9499, abs=5e-4)
    # the seed's simulation (its loop and random stream) on this 45.4-day job: the seed prints 95.0%
    assert gp["monte_carlo_runs"] == 20
    assert gp["monte_carlo"] == pytest.approx(0.950, abs=0.005)
    # effective days = failure-free days / goodput (closed form's expected wall time)
    assert js["effective"]["days"] == pytest.approx(js["training"]["days"] / gp["closed_form"], rel=1e-9)


def test_young_27_minutes_in_the_table(cli):
    r = cli("budget", *PLAN_70B, "--mfu", "0.4", *SEED_9_2, "--mc-runs", "0")
    assert r.exit_code == 0, r.stderr
    assert "27 min (1,610 s)" in r.stdout
    assert "12.00 h" in r.stdout
    assert "Monte-Carlo" not in r.stdout  # --mc-runs 0 turns the simulation off


# ---------------------------------------------------------------- seed sec. 10.2
def test_llama3_70b_6_4_million_gpu_hours(cli):
    js = _json(cli, "--model", "llama3-70b-paper", "--gpus", "16384", "--tp", "8", "--sharding", "fsdp",
               "--tokens", "15e12", "--mfu", "0.28", "--mc-runs", "0")
    n = js["params"]
    assert n == pytest.approx(70.55e9, rel=1e-3)  # the seed's 70.5 billion
    t = js["training"]
    assert t["total_flops_6n"] == pytest.approx(6 * n * 15e12, rel=1e-12)  # 6.35e24
    # 6N T / (989e12 x 0.28) / 3,600 = 6.37e6 GPU-hours; Meta's model card: 6.4 M
    assert t["gpu_hours"] == pytest.approx(6 * n * 15e12 / (PEAK * 0.28) / 3600, rel=1e-12)
    assert t["gpu_hours"] == pytest.approx(6.37e6, rel=0.01)
    assert t["gpu_hours"] == pytest.approx(6.4e6, rel=0.01)
    assert t["mfu_source"] == "--mfu" and "6N" in t["flops_convention"]
    # and back: 6.4 M hours imply ~28% MFU (reliability.implied_mfu)
    assert rel.implied_mfu(t["total_flops_6n"], 6.4e6 * 3600, PEAK) == pytest.approx(0.28, abs=0.005)


def test_mfu_output_names_the_6n_convention(cli):
    r = cli("budget", *PLAN_70B, "--mfu", "0.28", "--mc-runs", "0")
    assert r.exit_code == 0, r.stderr
    assert "6N x tokens / (GPUs x peak x MFU)" in r.stdout
    assert "6N convention" in r.stdout


@pytest.mark.parametrize("mfu, days", [(0.4, 45), (0.3, 60), (0.5, 36)])
def test_seed_days_at_40_30_50_percent(cli, mfu, days):
    js = _json(cli, *PLAN_70B, "--mfu", str(mfu), "--mc-runs", "0")
    t = js["training"]
    # 6 x 70.57e9 x 15e12 / (4,096 x 989e12 x 0.4) / 86,400 = 45.4 days; 0.3 -> 60.5; 0.5 -> 36.3
    assert t["days"] == pytest.approx(6 * N_70B * 15e12 / (4096 * PEAK * mfu) / 86400, rel=1e-12)
    assert round(t["days"]) == days
    assert t["gpu_hours"] == pytest.approx(t["days"] * 24 * 4096, rel=1e-12)


def test_step_model_days_equal_explain(cli):
    """Without --mfu the budget's time is steps x step time, explain's training_days."""
    ex = json.loads(cli("explain", *PLAN_70B, "--format", "json").stdout)
    js = _json(cli, *PLAN_70B, "--mc-runs", "0")
    t = js["training"]
    assert t["mfu_source"] == "step-time model"
    assert t["mfu"] == pytest.approx(ex["throughput"]["mfu_6n"], rel=1e-12)
    assert t["days"] == pytest.approx(ex["throughput"]["training_days"], rel=1e-9)
    assert t["gpu_hours"] == pytest.approx(ex["throughput"]["gpu_hours"], rel=1e-9)
    assert t["step_s"] == pytest.approx(ex["time"]["step_s"], rel=1e-12)


# ---------------------------------------------------------------- cost, energy, failures
def test_cost_and_energy(cli):
    js = _json(cli, *PLAN_70B, "--mfu", "0.4", "--price-per-gpu-hour", "2.5", "--pue", "1.2", "--mc-runs", "0")
    t, ef = js["training"], js["effective"]
    assert t["cost"] == pytest.approx(2.5 * t["gpu_hours"], rel=1e-12)
    # GPU-hours x 700 W x PUE 1.2, in kWh: 4.459e6 h x 0.84 kW = 3.745e6 kWh
    assert t["energy_kwh"] == pytest.approx(t["gpu_hours"] * 0.7 * 1.2, rel=1e-12)
    assert ef["cost"] == pytest.approx(2.5 * ef["gpu_hours"], rel=1e-12)
    assert ef["gpu_hours"] > t["gpu_hours"]


def test_default_failure_rate_is_llama3_scaled_by_gpus(cli):
    # 54 days x 24 h x 16,384 GPUs / 419 = 50,678 GPU-hours per failure: 12.37 h on 4,096 GPUs
    # (the seed's "12 hours"), 3.09 h on 16,384 (the seed's "roughly every 3.1 hours")
    a = _json(cli, *PLAN_70B, "--mfu", "0.4", "--mc-runs", "0")["failures"]
    assert a["mtbf_hours"] == pytest.approx(54 * 24 * 16384 / 419 / 4096, rel=1e-12)
    assert a["failures_per_gpu_day"] == pytest.approx(419 / (54 * 16384), rel=1e-12)
    assert "Llama 3" in a["source"] and "419" in a["source"]
    b = _json(cli, "--model", "llama3-70b", "--gpus", "16384", "--tp", "8", "--sharding", "fsdp", "--tokens", "15e12",
              "--mfu", "0.4", "--mc-runs", "0")["failures"]
    assert b["mtbf_hours"] == pytest.approx(3.093, abs=1e-3)


def test_failures_per_gpu_day(cli):
    fl = _json(cli, *PLAN_70B, "--mfu", "0.4", "--failures-per-gpu-day", "0.001", "--mc-runs", "0")["failures"]
    assert fl["mtbf_hours"] == pytest.approx(24 / (0.001 * 4096), rel=1e-12)  # 5.86 h


# ---------------------------------------------------------------- checkpoints
def test_checkpoint_size_and_write_time(cli):
    ex = json.loads(cli("explain", *PLAN_70B, "--format", "json").stdout)
    ck = _json(cli, *PLAN_70B, "--mc-runs", "0")["checkpoint"]
    terms = ex["memory"]["terms"]
    # each GPU saves its fp32 master and Adam m, v shard: 4 + 8 B/param over 8 x 512 = 0.207 GB (seed: ~0.2 GB)
    assert ck["saved_terms"] == "master_weights + adam"
    assert ck["bytes_per_gpu"] == pytest.approx(terms["master_weights"] + terms["adam"], rel=1e-12)
    assert ck["bytes_per_gpu"] == pytest.approx(12 * N_70B / 4096, rel=2e-3)
    # one copy of the job's state: 12 B x 70.57e9 = 846.8 GB (seed: 846 GB); --sharding fsdp on the default megatron
    # stack is Megatron-FSDP, whose model state dict is its fp32 main weights (no bf16 copy: budget.py [8])
    assert ck["job_bytes"] == pytest.approx(12 * N_70B, rel=1e-12)
    # over Llama 3's 2 TB/s: 0.42 s
    assert ck["storage_Bps"] == 2e12
    assert ck["write_s"] == pytest.approx(12 * N_70B / 2e12, rel=1e-12)
    ck100 = _json(cli, *PLAN_70B, "--checkpoint-bandwidth", "100", "--mc-runs", "0")["checkpoint"]
    assert ck100["write_s"] == pytest.approx(12 * N_70B / 100e9, rel=1e-12)  # 8.47 s
    assert ck100["pause_s"] == ck100["write_s"]  # synchronous: the write is the slower stage


def test_replicated_states_are_written_once(cli):
    """DDP: every GPU holds the whole state, but one copy is written (DCP deduplication)."""
    a = _json(cli, "--model", "megatron-gpt-1.7b", "--gpus", "64", "--tokens", "1e12", "--mc-runs", "0")["checkpoint"]
    b = _json(cli, "--model", "megatron-gpt-1.7b", "--gpus", "512", "--tokens", "1e12", "--mc-runs", "0")["checkpoint"]
    assert a["job_bytes"] == b["job_bytes"] == a["bytes_per_gpu"] == b["bytes_per_gpu"]
    assert a["write_s"] == b["write_s"] == pytest.approx(a["job_bytes"] / 2e12, rel=1e-12)


def test_pure_bf16_saves_the_weights(cli):
    ck = _json(cli, "--model", "llama3-8b", "--gpus", "64", "--tp", "8", "--sharding", "fsdp", "--tokens", "1e12",
               "--bytes-per-param", "pure-bf16", "--mc-runs", "0")["checkpoint"]
    assert ck["saved_terms"] == "master_weights + adam + weights"
    assert ck["master_weights_bytes_per_gpu"] == 0.0 and ck["weights_bytes_per_gpu"] > 0
    # no fp32 master: bf16 weights 2 + bf16 Adam m, v 4 = 6 B per parameter, 8.03e9 parameters with megatron's
    # 129,024 rows at tp 8 (stack_db vocab_padding: 768 x 4,096 x 2 more than the catalog's 8,030,261,248)
    assert ck["job_bytes"] == pytest.approx(6 * (8_030_261_248 + 768 * 4096 * 2), rel=1e-12)


def test_async_checkpoint_pause_is_the_host_copy(cli):
    js = _json(cli, *PLAN_70B, "--mfu", "0.4", *SEED_9_2, "--async-checkpoint", "--mc-runs", "0")
    ck, iv = js["checkpoint"], js["interval"]
    # 0.207 GB over PCIe Gen5 x16, 64 GB/s device to host: 3.2 ms
    assert ck["pause_s"] == pytest.approx(ck["bytes_per_gpu"] / 64e9, rel=1e-12)
    assert ck["write_s"] == pytest.approx(30.0, rel=1e-12)
    # Young on a 3.2 ms pause and 12 h: sqrt(2 x 0.00323 x 43,200) = 16.7 s, shorter than the
    # 30 s background write, so the interval used is the write time
    assert iv["young_s"] == pytest.approx(np.sqrt(2 * ck["pause_s"] * 43200), rel=1e-12)
    assert iv["used_s"] == pytest.approx(30.0, rel=1e-12)
    assert any("asynchronous" in n for n in js["notes"])


# llama3-8b on 8 GPUs, tp 1, zero1 (megatron's distributed optimizer), fp32 Adam without the precision-aware optimizer:
# the rank's partition L8 = 8,030,261,248 / 8 = 1,003,782,656 parameters (vocab 128,256 = 128 x 1,002: no padding at
# tp 1), master 4 + moments 8 B each: 12 L8 = 12,045,391,872 B, wherever the optimizer holds it (budget.py [6]), and
# the rank's share of the model's bf16 weights, 2 L8, which stay on the GPU (budget.py [8]): 14 L8 a rank, 112 L8 a copy
OFFLOAD_8B = ("--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--stack", "megatron", "--sharding", "zero1",
              "--bytes-per-param", "megatron", "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024",
              "--recompute", "full", "--tokens", "1e12", "--mc-runs", "0")


@pytest.mark.parametrize("fraction, on_gpu", [("1", 0.0), ("0.5", 0.5)])
def test_offloaded_optimizer_is_checkpointed(cli, fraction, on_gpu):
    """CPU offload: the checkpoint writes the rank's whole partition, host part included (Megatron-LM @d98e8a64
    distrib_optimizer.py l. 1103-1105); only the GPU-held part crosses the host link. Before, the shard was the GPU's
    terms only, 0 B at fraction 1, and budget divided the job's bytes by it (ZeroDivisionError: fuzz seed 114)."""
    l8 = 8_030_261_248 // 8
    base = _json(cli, *OFFLOAD_8B)["checkpoint"]
    ck = _json(cli, *OFFLOAD_8B, "--offload-optimizer", "cpu", "--offload-fraction", fraction, "--async-checkpoint")[
        "checkpoint"]
    for c in (base, ck):
        assert c["master_weights_bytes_per_gpu"] == pytest.approx(4 * l8, rel=1e-12)
        assert c["optimizer_bytes_per_gpu"] == pytest.approx(8 * l8, rel=1e-12)
        assert c["weights_bytes_per_gpu"] == pytest.approx(2 * l8, rel=1e-12)
        assert c["job_bytes"] == pytest.approx(112 * l8, rel=1e-12)
    assert ck["write_s"] == base["write_s"] == pytest.approx(112 * l8 / 2e12, rel=1e-12)
    # the host copy: the GPU's share of the 12 L8 B of optimizer state and its 2 L8 of bf16 weights over 64 GB/s
    # (31.4 ms at fraction 1, 125.5 ms at 0.5); async pause = it
    assert ck["copy_s"] == pytest.approx((on_gpu * 12 + 2) * l8 / 64e9, rel=1e-12)
    assert ck["pause_s"] == ck["copy_s"]
    assert base["copy_s"] == pytest.approx(14 * l8 / 64e9, rel=1e-12)


ZERO_OFFLOAD_8B = ("--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--stack", "megatron-deepspeed", "--global-batch",
                   "8", "--micro-batch", "1", "--seq-len", "1024", "--recompute", "full", "--tokens", "1e12", "--mc-runs",
                   "0", "--async-checkpoint")


@pytest.mark.parametrize("sharding, weights", [("zero1", True), ("zero2", True), ("fsdp", False)])
def test_zero_offload_checkpoint_is_what_deepspeed_writes(cli, sharding, weights):
    """DeepSpeed's ZeRO-Offload (budget.py [7], microsoft/DeepSpeed @38327e07): every rank writes its optimizer file, the
    fp32 master partition (4 B) and DeepSpeedCPUAdam's fp32 moments (8 B), host tensors that cross no host link; at
    stages 1-2 data-parallel rank 0 also writes the module's bf16 weights (2 B of its model-parallel part, engine.py
    save_non_zero_checkpoint l. 1068-1069, _save_checkpoint l. 3492-3494), copied from the GPU; at stage 3 the module
    holds placeholders (partition_parameters.py free_param l. 282-291). Llama 3 8B, tp 1, dp 8 (L8 = N / 8): rank 0
    writes 4 L8 + 8 L8 + 16 L8 = 28 L8 B at stages 1-2, the job 14 N = 112 L8, the host copy 16 L8 over 64 GB/s
    (0.251 s); stage 3 12 L8 a rank, 96 L8 the job, no host copy. Before, every case was 12 L8 / 96 L8, assumed from
    Megatron's optimizer (no DeepSpeed source read), with no module file and no host copy at stages 1-2."""
    l8 = 8_030_261_248 // 8
    ck = _json(cli, *ZERO_OFFLOAD_8B, "--sharding", sharding, "--offload-optimizer", "cpu")["checkpoint"]
    assert ck["master_weights_bytes_per_gpu"] == pytest.approx(4 * l8, rel=1e-12)
    assert ck["optimizer_bytes_per_gpu"] == pytest.approx(8 * l8, rel=1e-12)
    assert ck["weights_bytes_per_gpu"] == pytest.approx(16 * l8 if weights else 0.0, rel=1e-12)
    assert ck["bytes_per_gpu"] == pytest.approx((28 if weights else 12) * l8, rel=1e-12)
    assert ck["job_bytes"] == pytest.approx((112 if weights else 96) * l8, rel=1e-12)
    assert ck["saved_terms"] == "master_weights + adam" + (" + weights" if weights else "")
    assert ck["write_s"] == pytest.approx((112 if weights else 96) * l8 / 2e12, rel=1e-12)
    assert ck["copy_s"] == pytest.approx((16 * l8 / 64e9) if weights else 0.0, rel=1e-12, abs=1e-15)
    assert ck["pause_s"] == ck["copy_s"]
    # without the offload the same files (stack_db megatron-deepspeed checkpoint, budget.py [8]): rank 0's module file
    # at stages 1-2, the moments in the job's dtype (fp32 here); before branch ckpt the module was left out (96 L8)
    base = _json(cli, *ZERO_OFFLOAD_8B, "--sharding", sharding)["checkpoint"]
    assert base["job_bytes"] == pytest.approx((112 if weights else 96) * l8, rel=1e-12)
    assert base["weights_bytes_per_gpu"] == pytest.approx(16 * l8 if weights else 0.0, rel=1e-12)


def test_monte_carlo_is_capped(cli):
    # 45.4 days checkpointed every second is 3.9 M segments per run: over the 5 M cap for 20 runs
    js = _json(cli, *PLAN_70B, "--mfu", "0.4", "--checkpoint-interval", "1s", "--checkpoint-save-s", "0.001")
    gp = js["goodput"]
    assert gp["monte_carlo_runs"] == 1
    assert gp["monte_carlo"] == pytest.approx(gp["closed_form"], abs=0.01)
    assert any("lowered from 20 to 1" in n for n in js["notes"])
    js = _json(cli, *PLAN_70B, "--mfu", "0.4", "--checkpoint-interval", "0.5s", "--checkpoint-save-s", "0.001")
    assert js["goodput"]["monte_carlo"] is None and js["goodput"]["monte_carlo_runs"] == 0
    assert any("skipped" in n for n in js["notes"])


# ---------------------------------------------------------------- contract
BUDGET_KEYS = {
    "training": {"tokens", "total_flops_6n", "mfu", "mfu_source", "wall_s", "days", "gpu_hours", "price_per_gpu_hour",
                 "cost", "tdp_W", "pue", "energy_J", "energy_kwh", "step_s", "steps"},
    "checkpoint": {"saved_terms", "contents", "bytes_per_gpu", "job_bytes", "storage_Bps", "write_s", "copy_s", "pause_s",
                   "async"},
    "failures": {"failures_per_gpu_day", "mtbf_s", "mtbf_hours", "restart_s", "source"},
    "interval": {"young_s", "daly_s", "used_s", "rule"},
    "goodput": {"closed_form", "closed_form_daly", "monte_carlo", "monte_carlo_std", "monte_carlo_runs"},
    "effective": {"wall_s", "days", "gpu_hours", "cost", "energy_kwh", "monte_carlo_days"},
}


def test_json_keys(cli):
    js = _json(cli, *PLAN_70B, "--price-per-gpu-hour", "2")
    assert {"plan", "params", "fits", "notes", "warnings"} | set(BUDGET_KEYS) <= set(js)
    for section, keys in BUDGET_KEYS.items():
        assert keys <= set(js[section]), section
    assert js["plan"]["dp"] == 512 and js["fits"] is True
    assert js["training"]["cost"] == pytest.approx(2 * js["training"]["gpu_hours"])


def test_job_yaml_equals_options(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-70b\ngpus: 4096\ntp: 8\nsharding: fsdp\ntokens: 15e12\n")
    a = _json(cli, str(job), "--mfu", "0.4")
    b = _json(cli, *PLAN_70B, "--mfu", "0.4")
    assert a == b  # the Monte-Carlo is seeded, so the whole object matches


def test_budget_takes_every_plan_option_of_explain():
    cmds = typer.main.get_command(app).commands
    names = lambda c: {p.name for p in cmds[c].params}  # noqa: E731
    plan_opts = names("explain") - {"fmt"}
    assert {"model", "gpus", "tp", "sharding", "tokens", "job_file", "rank_order"} <= plan_opts
    assert plan_opts <= names("budget")


# ---------------------------------------------------------------- sweep
def test_sweep_days_fall_with_gpus(cli):
    rows = _json(cli, *PLAN_70B, "--sweep-gpus", "1024,2048,4096,8192", "--price-per-gpu-hour", "2")
    assert [r["gpus"] for r in rows] == [1024, 2048, 4096, 8192]
    assert [r["dp"] for r in rows] == [128, 256, 512, 1024]  # tp 8 fixed, dp scales
    days = [r["days"] for r in rows]
    assert all(a > b for a, b in zip(days, days[1:]))
    assert all(r["effective_days"] > r["days"] for r in rows)
    assert all(r["cost"] == pytest.approx(2 * r["gpu_hours"]) for r in rows)
    # the 4,096 row is the single-plan budget
    single = _json(cli, *PLAN_70B, "--mc-runs", "0")
    assert rows[2]["days"] == pytest.approx(single["training"]["days"], rel=1e-12)
    assert rows[2]["goodput"] == pytest.approx(single["goodput"]["closed_form"], rel=1e-12)


def test_sweep_at_fixed_mfu_keeps_gpu_hours(cli):
    rows = _json(cli, *PLAN_70B, "--mfu", "0.4", "--mtbf-hours", "12", "--sweep-gpus", "2048,4096,8192")
    # days ~ 1 / GPUs at a fixed MFU: 90.7, 45.4, 22.7; GPU-hours 4.46 M each
    assert [r["days"] for r in rows] == pytest.approx([45.3638 * 2, 45.3638, 45.3638 / 2], rel=1e-5)
    assert rows[0]["gpu_hours"] == pytest.approx(rows[2]["gpu_hours"], rel=1e-12)
    # --mtbf-hours refers to --gpus 4,096 and scales as a per-GPU rate: 24 h, 12 h, 6 h
    assert [r["mtbf_hours"] for r in rows] == pytest.approx([24.0, 12.0, 6.0], rel=1e-12)


def test_sweep_mtbf_base_is_gpus_from_the_yaml_or_the_first_count(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-70b\ngpus: 4096\ntp: 8\nsharding: fsdp\ntokens: 15e12\n")
    rows = _json(cli, str(job), "--mfu", "0.4", "--mtbf-hours", "12", "--sweep-gpus", "2048,8192")
    assert [r["mtbf_hours"] for r in rows] == pytest.approx([24.0, 6.0], rel=1e-12)  # 12 h at the YAML's 4,096
    rows = _json(cli, "--model", "llama3-70b", "--tp", "8", "--sharding", "fsdp", "--tokens", "15e12", "--mfu", "0.4",
                 "--mtbf-hours", "12", "--sweep-gpus", "2048,8192")
    assert [r["mtbf_hours"] for r in rows] == pytest.approx([12.0, 3.0], rel=1e-12)  # 12 h at the first count


def test_sweep_table(cli):
    r = cli("budget", *PLAN_70B, "--sweep-gpus", "2048,4096", "--price-per-gpu-hour", "2")
    assert r.exit_code == 0, r.stderr
    assert "8x1x1x256" in r.stdout and "8x1x1x512" in r.stdout
    # days at 4,096 GPUs: the step-time model's, explain's training_days
    ex = json.loads(cli("explain", *PLAN_70B, "--format", "json").stdout)
    assert f"{ex['throughput']['training_days']:,.1f}" in r.stdout


def test_sweep_count_that_cannot_hold_the_mesh(cli):
    # a count the mesh or the batch cannot divide is left out, named on stderr and in its row; the others are priced
    # (before 2026-12-07 it failed the whole sweep, exit 2); only a sweep where no count runs is refused
    r = cli("budget", *PLAN_70B, "--sweep-gpus", "4096,1000", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["gpus"], x["dp"]) for x in rows] == [(4096, 512), (1000, None)]
    assert rows[1]["skipped"] == "global batch 2,048 sequences does not divide into dp=125 x micro_batch=1"
    assert rows[1]["days"] is None and rows[0]["skipped"] is None
    assert r.stderr.startswith("warning: --sweep-gpus 1,000 left out: global batch 2,048 sequences does not divide "
                               "into dp=125")
    r = cli("budget", *PLAN_70B, "--sweep-gpus", "4,4096", "--format", "json")
    assert r.exit_code == 0 and "warning: --sweep-gpus 4 left out: tp=8 x cp=1 x pp=1 = 8 does not divide" in r.stderr
    assert_one_error(cli("budget", *PLAN_70B, "--sweep-gpus", "4,1000"), "the plan runs at none of the counts",
                     "4: tp=8 x cp=1 x pp=1 = 8 does not divide", "1,000: global batch 2,048", "dp=125")
    assert_one_error(cli("budget", *PLAN_70B, "--sweep-gpus", "4096,abc"), "--sweep-gpus", "'abc'")


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "extra, needles",
    [
        (("--failures-per-gpu-day", "0.001", "--mtbf-hours", "12"), ("--failures-per-gpu-day", "--mtbf-hours")),
        (("--price-per-gpu-hour", "-1"), ("--price-per-gpu-hour", "-1")),
        (("--checkpoint-bandwidth", "100", "--checkpoint-save-s", "30"), ("--checkpoint-bandwidth",)),
        (("--mfu", "0"), ("--mfu",)),
        (("--mfu", "1.2"), ("--mfu",)),
        (("--mtbf-hours", "-3"), ("--mtbf-hours",)),
        (("--pue", "0.9"), ("--pue",)),
        (("--checkpoint-interval", "soon"), ("--checkpoint-interval",)),
        (("--restart-s", "-1"), ("--restart-s",)),
    ],
)
def test_bad_input_exits_2(cli, extra, needles):
    assert_one_error(cli("budget", *PLAN_70B, *extra), *needles)


def test_no_tokens(cli):
    assert_one_error(cli("budget", "--model", "llama3-70b", "--gpus", "4096", "--tp", "8"), "no training tokens")


# ---------------------------------------------------------------- library: arrays
def test_compute_budget_broadcasts_over_gpu_counts():
    """compute_budget takes arrays as well as scalars (reliability.py's functions broadcast)."""
    shards = CheckpointShards(size=rel.checkpoint_bytes_per_gpu(1e8, 2e8), job_bytes=846e9, distinct=846e9 / 3e8)
    opts = BudgetOptions(mfu=0.4, mc_runs=0)
    gpus = np.array([2048, 4096, 8192])
    vec, _ = compute_budget(n_params=N_70B, tokens=15e12, n_gpus=gpus, peak_flops=PEAK, mfu=0.4, tdp_W=TDP_W,
                            shards=shards, opts=opts)
    for i, g in enumerate(gpus):
        one, _ = compute_budget(n_params=N_70B, tokens=15e12, n_gpus=int(g), peak_flops=PEAK, mfu=0.4, tdp_W=TDP_W,
                                shards=shards, opts=opts)
        assert vec.time.wall_s[i] == pytest.approx(one.time.wall_s, rel=1e-15)
        assert vec.mtbf_s[i] == pytest.approx(one.mtbf_s, rel=1e-15)
        assert vec.closed.goodput[i] == pytest.approx(one.closed.goodput, rel=1e-15)
    # same write for every count: one 846 GB copy over 2 TB/s
    np.testing.assert_allclose(vec.ckpt.write_s, 846e9 / 2e12)


def test_budget_from_fit_row(cli, tmp_path):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--top", "2", "--format", "json")
    assert r.exit_code == 0
    saved = tmp_path / "fit.json"
    saved.write_text(r.stdout)
    row2 = json.loads(r.stdout)[1]
    b = _json(cli, "--from-fit", str(saved), "--row", "2", "--tokens", "1e12")
    assert b["plan"]["tp"] == row2["plan"]["tp"] and b["plan"]["sharding"] == row2["plan"]["sharding"]
    steps = 1e12 / row2["plan"]["global_batch_tokens"]
    assert b["training"]["wall_s"] == pytest.approx(steps * row2["time"]["step_s"], rel=1e-9)


def test_gpu_count_ranges_double():
    from planner.budget import parse_gpu_list
    from planner.errors import PlannerError

    assert parse_gpu_list("512..4096") == [512, 1024, 2048, 4096]
    assert parse_gpu_list("384..2000") == [384, 768, 1536]  # stops below the last
    assert parse_gpu_list("8,64..128") == [8, 64, 128]
    with pytest.raises(PlannerError, match="cannot read '64..8' as a range"):
        parse_gpu_list("64..8")
    with pytest.raises(PlannerError, match="64 is listed twice"):
        parse_gpu_list("64,32..64")


# ---------------------------------------------------------------- what was assumed, and the trainer config read
GEMMA2_NO_TIE = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584,
                 "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16,
                 "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000, "hidden_act": "gelu_pytorch_tanh",
                 "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
                 "attention_bias": False, "attention_dropout": 0.0}  # Gemma 2 9B's config.json less tie_word_embeddings


def test_budget_json_lists_what_was_assumed(cli, tmp_path):
    """budget's JSON (and table) has explain's `assumed` list (explain.assumed_lines, one function for both): a job YAML whose
    model is a config.json without tie_word_embeddings (transformers' PretrainedConfig default True, the model's
    default) and without a seq_len (plan.HF_DEFAULT_SEQ 4,096 below its 8,192 positions, the job's default), in that
    order; a job that leaves nothing to a default has no such key, in either command."""
    d = tmp_path / "gemma-2-9b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(GEMMA2_NO_TIE))
    job = tmp_path / "job.yaml"
    job.write_text(f"model: {d}\ngpus: 8\nglobal_batch: 8\ntokens: 1.0e9\nstack: megatron-bridge\n")  # post-norms: not megatron's
    b = _json(cli, str(job), "--mc-runs", "0", code=1)  # 9B unsharded on 8 GPUs does not fit: exit 1, all printed
    assert b["fits"] is False
    assert b["assumed"] == [
        "tie_word_embeddings absent: tied input/output embeddings (transformers' PretrainedConfig default: True)",
        "seq_len=4,096: a Hugging Face config's default training length (plan.HF_DEFAULT_SEQ); its "
        "max_position_embeddings 8,192 is the context the model serves, not the length it trains at (pass --seq-len)"]
    assert b["plan"]["seq_len"] == 4096 and b["params"] == 9_241_705_984  # tied: tests/test_newcomer.py's count
    ex = json.loads(cli("explain", str(job), "--format", "json").stdout)
    assert ex["assumed"] == b["assumed"] and "trainer_config" not in b
    # the table says them too, as explain's does (render.common.print_assumed)
    assert ("  assumed (what the model file and the job leave out): tie_word_embeddings absent"
            in cli("budget", str(job), "--mc-runs", "0").stdout)
    plain = tmp_path / "plain.yaml"
    plain.write_text("model: llama3-8b\ngpus: 8\nglobal_batch: 8\nseq_len: 8192\ntokens: 1.0e9\n")
    assert "assumed" not in _json(cli, str(plain), "--mc-runs", "0", code=1)  # 8B unsharded on 8: no fit, exit 1
    assert "assumed" not in json.loads(cli("explain", str(plain), "--format", "json").stdout)


def test_budget_json_has_the_trainer_config_block(cli):
    """A trainer config (tests/data/trainer_configs/train_llama3_8b.sh, a Megatron-LM launch script: 8 GPUs, global
    batch 128, seq 8,192, --train-iters 1000, no --tokens needed): budget's JSON has the `trainer_config` block and
    the reader's assumed lines after the job's, as explain's (trainers/report.with_config, one function for both).
    The tokens the reader derives: 1,000 x 128 x 8,192 = 1,048,576,000."""
    from pathlib import Path

    sh = str(Path(__file__).parent / "data" / "trainer_configs" / "train_llama3_8b.sh")
    b = _json(cli, sh, "--mc-runs", "0")
    tc = b["trainer_config"]
    assert tc["source"] == sh and tc["format"] == "megatron"
    assert [(e["setting"], e["value"]) for e in tc["assumed"]] == [
        ("model", "llama3-8b"), ("tokens", 1_000 * 128 * 8192), ("rank_order", "tp-cp-dp-pp"), ("attention", "flash")]
    assert b["assumed"] == [e["line"] for e in tc["assumed"]]
    assert b["training"]["tokens"] == 1_048_576_000 and b["plan"]["gpus"] == 8 and b["plan"]["tp"] == 2
    assert tc["not_modelled"] == [] and tc["unmodelled"] == [] and tc["ignored"]
    ex = json.loads(cli("explain", sh, "--format", "json").stdout)
    assert ex["trainer_config"] == tc and ex["assumed"] == b["assumed"]
