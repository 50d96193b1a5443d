"""The fixed MoE overhead (planner/step.py moe_host): the host issue time Megatron-Core's
dropless dispatcher synchronisation exposes, with the megatron stack's fitted constants
(stack_db/megatron.yaml moe_host, scripts/fit_moe_host.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import load_stack

ROOT = Path(__file__).resolve().parent.parent
MOE_RUNS = ROOT / "tests" / "data" / "published_runs_moe.yaml"
# Megatron-Bridge 25.11 B200 Qwen3-30B-A3B's layout: 128 experts over EP 8, 16 local
QWEN_B200 = ["--model", "qwen3-30b-a3b", "--hardware", "b200", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8",
             "--ep", "8", "--etp", "1", "--micro-batch", "1", "--global-batch", "512", "--seq-len", "4096",
             "--precision", "fp8", "--fp8-recipe", "mxfp8", "--stack", "megatron"]


def _fit():
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_moe_host

    return fit_moe_host


def test_stored_constants_are_the_fit_on_the_records():
    """The constants live in one place (stack_db/megatron.yaml) and are what the script fits on
    tests/data/published_runs_moe.yaml: change the model or the records and this fails until
    the fit is re-run (scripts/fit_moe_host.py --write)."""
    f = _fit()
    rows = f.prepared(MOE_RUNS)
    assert len(rows) == 31  # every record but DeepSeek's own (its stack has no moe_host)
    g = f.grid(rows)
    i, j = f.best(g)
    mh = load_stack("megatron").moe_host
    assert (f.PER_LAYER[i], f.PER_EXPERT[j]) == pytest.approx((mh.per_layer_s, mh.per_local_expert_s), abs=1e-12)
    assert "leave-one-out" in mh.fit and "31 records" in mh.fit
    # the figures the stack's `fit` text states are the fit's on the records as they stand (in-sample, then
    # leave-one-out: each record predicted with the constants fitted on the other 30), so they cannot go stale
    fit_err = np.expm1(g[:, i, j])
    loo = [np.expm1(g[r, ii, jj]) for r in range(len(rows)) for ii, jj in [f.best(np.delete(g, r, axis=0))]]
    assert f"in-sample {f.summary(fit_err)} " in mh.fit and f"leave-one-out {f.summary(np.array(loo))} " in mh.fit


def test_the_other_families_alone_fit_nearly_the_same_constants():
    """docs/gpt_oss_gap.md sec. 3.1: the gpt-oss rows do not set the host constants. Fitted on
    the 19 records of the other families (the file without the 12 gpt-oss-120b rows), the grid
    lands at 0.4 ms and 0.44 ms, the 31 records' own constants (since a GEMM's output write is priced
    after its K loop, compute [5a]; before, 0.8 ms and 0.42 ms against 0.6 ms and 0.44 ms):
    per_layer_s is barely identified (the 31 records' least mean |log error| is 0.1440 at 0.2 ms,
    0.1438 at 0.4 ms, 0.1445 at 0.6 ms, 0.1457 at 0.8 ms, each at its best per_local_expert_s), so
    the two fits may land up to 3 and 2 grid steps apart (0.3 ms, 0.04 ms). What the claim needs: the
    three H100 gpt-oss rows (EP 8, 16 local experts, where the term is a fifth of the step) predicted
    with the constants fitted without any gpt-oss row are within 6% of their published tokens/s
    (+2.8%, -0.3%, +1.7%, the same at the stored constants; +4.2%, +1.0%, +3.0% and +3.5%, +0.3%,
    +2.4% before the write), so their agreement is not a fit to them."""
    f = _fit()
    rows = f.prepared(MOE_RUNS, keep=lambda rec: rec.model != "gpt-oss-120b")
    assert len(rows) == 31 - 12
    i, j = f.best(f.grid(rows))
    mh = load_stack("megatron").moe_host
    assert abs(f.PER_LAYER[i] - mh.per_layer_s) <= 3e-4 + 1e-12
    assert abs(f.PER_EXPERT[j] - mh.per_local_expert_s) <= 4e-5 + 1e-12
    h100 = f.prepared(MOE_RUNS, keep=lambda rec: rec.model == "gpt-oss-120b" and "H100" in rec.gpu_type)
    assert len(h100) == 3
    for _, settings, plan, pub in h100:
        tok = float(np.asarray(f.tokens_per_gpu(settings, plan, f.PER_LAYER[i], f.PER_EXPERT[j])).ravel()[0])
        assert abs(tok / pub - 1.0) < 0.06


def _no_host_stack(tmp_path: Path) -> Path:
    """The megatron stack file without its moe_host block (a user stack that does not model it)."""
    text = (ROOT / "stack_db" / "megatron.yaml").read_text()
    out = tmp_path / "megatron-nohost.yaml"
    out.write_text(text.partition("\nmoe_host:\n")[0] + "\n")
    return out


def test_host_term_by_hand(cli, tmp_path):
    """16 local experts: issue = 0.4 ms + 16 x 0.44 ms = 7.44 ms per MoE layer forward; the
    exposed share is what outlasts the layer's forward GPU time, on 48 layers x 64
    micro-batches, as its own time row, and explain's moe block shows it. With pp 1 (no
    bubble) it adds to the step exactly and moves no other term."""
    mh = load_stack("megatron").moe_host
    issue = mh.per_layer_s + 16 * mh.per_local_expert_s
    assert issue == pytest.approx(0.0004 + 16 * 0.00044)
    r = cli("explain", *QWEN_B200, "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    off_argv = [a if a != "megatron" else str(_no_host_stack(tmp_path)) for a in QWEN_B200]
    r = cli("explain", *off_argv, "--format", "json")
    assert r.exit_code == 0, r.stderr
    off = json.loads(r.stdout)
    host = js["time"]["moe_host_s"]
    assert host > 0 and js["moe"]["fixed_overhead_s"] == host
    assert js["time"]["step_s"] - off["time"]["step_s"] == pytest.approx(host, rel=1e-9)
    for k in ("compute_s", "moe_permute_s", "ep_comm_s", "dp_comm_exposed_s", "optimizer_s"):
        assert off["time"][k] == pytest.approx(js["time"][k], rel=1e-9), k
    # the layer's forward GPU time the host outlasts, from the step's own figures
    gpu_fwd = issue - host / (48 * 64)
    assert 0 < gpu_fwd < issue
    assert off["time"]["moe_host_s"] == 0.0 and off["moe"]["fixed_overhead_s"] == 0.0
    assert "not modelled" in off["moe"]["fixed_overhead"]


def test_no_host_term_where_the_gpu_outlasts_the_issue(cli):
    """DeepSeek-V3 on 64 GB200 GPUs with EP 64 (4 local experts): issue 0.6 + 4 x 0.44 =
    2.36 ms, less than the layer's forward (7168-wide MLA attention and experts at 4,096
    tokens): nothing is exposed."""
    r = cli("explain", "--model", "deepseek-v3", "--hardware", "gb200-nvl72", "--gpus", "256", "--tp", "1",
            "--pp", "4", "--vpp", "4", "--dp", "64", "--ep", "64", "--micro-batch", "1", "--global-batch", "2048",
            "--seq-len", "4096", "--stack", "megatron", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["time"]["moe_host_s"] == 0.0


def test_moe_records_accuracy(cli):
    """validate on the 32 MoE records (issue 23's bar: median |error| <= 15%). Measured with the
    fitted term: median 6.8% in-sample over the megatron stack's 31 (leave-one-out 7.2%), the
    signed median positive (+5.2% over the 32: the gpt-oss-120b rows on Blackwell, +19% to +60%
    after their unfused passes and recompute_modules are priced, are mechanisms this term does not cover:
    docs/moe_accuracy.md)."""
    r = cli("validate", str(MOE_RUNS), "--format", "json")
    assert r.exit_code == 0, r.stderr
    err = np.array([x["error"] for x in json.loads(r.stdout)["runs"] if x["error"] is not None])
    assert len(err) == 32
    assert np.median(np.abs(err)) <= 0.15
    assert 0 < np.median(err) < 0.10


def test_gpt_oss_forward_host_bound_on_h100_not_on_nvl72():
    """docs/moe_gpt_oss.md sec. 3: the 26.04 gpt-oss records as the planner prices them. H100 (EP 8, 16 local
    experts, 4,096 tokens a micro-batch) and B200 (EP 8) take each MoE layer's forward at the host's issue time,
    0.4 ms + 16 x 0.44 ms = 7.44 ms, the GPU's share below it (H100: 3.5-3.9 ms, so up to 3.55 ms of forward GPU
    time the planner might lack would not change those rows); GB200 and GB300 (EP 64, 2 local experts: issue
    1.28 ms) are GPU-bound, nothing exposed (their forward 4.6-5.7 ms at 16,384 tokens)."""
    from planner.step import _context, layer_times

    f = _fit()
    mh = load_stack("megatron").moe_host
    rows = {rid: (s, p) for rid, s, p, _ in f.prepared(
        MOE_RUNS, keep=lambda rec: rec.model == "gpt-oss-120b" and rec.id.startswith("megatron-bridge-26.04"))}
    assert len(rows) == 4
    for gpu, local in (("h100", 16), ("b200", 16), ("gb200", 2), ("gb300", 2)):
        s, p = rows[f"megatron-bridge-26.04-dgx-{gpu}-gpt-oss-120b-bf16"]
        lt = layer_times(_context(s, p))
        issue = mh.per_layer_s + local * mh.per_local_expert_s
        for fwd, host in zip(lt.fwd, lt.host_fwd):  # the sliding-window and the global layer kinds
            fwd, host = float(np.ravel(fwd)[0]), float(np.ravel(host)[0])
            if local == 16:
                assert fwd == pytest.approx(issue, rel=1e-9) and host > 0, gpu
            else:
                assert host == 0.0 and fwd > issue, gpu
    s, p = rows["megatron-bridge-26.04-dgx-h100-gpt-oss-120b-bf16"]
    lt = layer_times(_context(s, p))
    hidden = min(float(np.ravel(h)[0]) for h in lt.host_fwd)
    assert hidden == pytest.approx(3.55e-3, abs=0.01e-3)
