"""Megatron's --cp-comm-type (job field cp_comm_type, planner/cp_comm_type.py): the all_gather and
a2a variants priced as Transformer Engine @4329ff84 runs them (stack_db megatron cp_comm_types),
the head-divisibility rule, the refusals, the reader and the export round trip. Every figure is
derived by hand from the shapes below and the stack's bytes per element."""

from __future__ import annotations

import json

import pytest

from planner import comm
from planner.catalog import load_hardware
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature

NV_BW = 450e9 * comm.NVLINK_RING_EFFICIENCY  # H100 NVLink, achievable (hardware_db h100-sxm nvlink_GBps 450)
NV_LAT = comm.NVLINK_LATENCY_S

# Llama 3 8B (32 heads, 8 KV heads, head dim 128, 32 layers) on one HGX H100: tp 2 x cp 4, 8,192 tokens,
# one sequence a micro-batch, two micro-batches (global batch 2, dp 1)
JOB = dict(model="llama3-8b", gpus=8, tp=2, cp=4, global_batch=2, micro_batch=1, seq_len=8192, stack="megatron")
T = 8192 // 4  # tokens of a micro-batch on one GPU
Q_EL = T * 32 * 128 // 2  # the query (and output) elements on one GPU: 16 heads a TP rank
KV_EL = T * 2 * (8 // 2) * 128  # K and V: 4 KV heads a TP rank
M, LAYERS = 2, 32


def a2a(size, n=4):
    """comm.py's all-to-all (direct): n - 1 rounds and (n - 1) / n of the send buffer S."""
    return (n - 1) * NV_LAT + (n - 1) / n * size / NV_BW


def test_a2a_bytes_and_time_by_hand(explain):
    """a2a (AttnFuncWithCPAndQKVOA2A): forward all-to-alls of Q (8 MiB), K and V (2 MiB each)
    before the kernel and of the output (8 MiB) after it; backward of the output gradient
    (8 MiB) before, dQ (8 MiB), dK, dV (bf16, 2 MiB each) after; each waited: all exposed. Its
    layout copies (bytes per element): forward Q, K/V and the output 8 each (contiguous copy +
    index_select), backward the output gradient, dQ and dK/dV 8 each. The kernel is the unsplit
    one on a / cp heads (no per-step rate)."""
    from planner.compute import HBM_EFFICIENCY

    assert (Q_EL * 2, KV_EL) == (8 * 2**20, 2 * 2**20)  # Q 8 MiB; K, V 2 MiB each in bf16
    _, _, _, js = explain(**JOB, cp_comm_type="a2a")
    per_layer = 2 * (a2a(Q_EL * 2) + 2 * a2a(KV_EL) + a2a(Q_EL * 2))  # forward + backward, the same sizes
    assert js["time"]["cp_comm_total_s"] == pytest.approx(M * LAYERS * per_layer, rel=1e-9)
    assert js["time"]["cp_comm_s"] == pytest.approx(js["time"]["cp_comm_total_s"], rel=1e-12)  # all exposed
    hbm = load_hardware("h100-sxm").hbm_bandwidth * HBM_EFFICIENCY
    passes = 2 * (Q_EL * 8 + KV_EL * 8 + Q_EL * 8) / hbm  # forward and backward
    assert js["time"]["cp_compute_s"] == pytest.approx(M * LAYERS * passes, rel=1e-9)
    assert js["plan"]["cp_comm_type"] == "a2a"


def test_all_gather_bytes_and_time_by_hand(explain):
    """all_gather (AttnFuncWithCPAndKVAllGather): forward all-gathers of K, then of V (each rank
    holds 2 MiB of K and ends with the 8 MiB of the 4 ranks: S = 8 MiB each) before the two
    kernels, exposed; backward the same two all-gathers and the reduce-scatters of dK and of dV
    (bf16, 8 MiB each gathered) after them, exposed. Copies (bytes per element): forward the
    output 4, K/V index_select 4 cp; backward dQ 4, dK/dV 12 cp + 3, K/V 4 cp."""
    from planner.compute import HBM_EFFICIENCY

    hw = load_hardware("h100-sxm")
    _, _, _, js = explain(**JOB, cp_comm_type="all_gather")
    cpar = comm.comm_params(hw)
    one = KV_EL // 2 * 2  # K (or V) of one rank, bf16: 2 MiB
    ag = float(comm.group_collective(comm.ALL_GATHER, 4 * one, 4, 2, cpar, comm.AUTO, job_gpus=8)[0].time_s)
    rs = float(comm.group_collective(comm.REDUCE_SCATTER, 4 * one, 4, 2, cpar, comm.AUTO, job_gpus=8)[0].time_s)
    per_layer = 2 * ag + (2 * ag + 2 * rs)
    assert js["time"]["cp_comm_total_s"] == pytest.approx(M * LAYERS * per_layer, rel=1e-9)
    assert js["time"]["cp_comm_s"] == pytest.approx(js["time"]["cp_comm_total_s"], rel=1e-12)
    cp = 4
    passes = (Q_EL * 4 + KV_EL * 4 * cp + Q_EL * 4 + KV_EL * (12 * cp + 3) + KV_EL * 4 * cp) / (hw.hbm_bandwidth * HBM_EFFICIENCY)
    assert js["time"]["cp_compute_s"] == pytest.approx(M * LAYERS * passes, rel=1e-9)
    # the exposed all-gathers cost more than the ring's hidden sends on this NVLink: a slower step
    _, _, _, p2p = explain(**JOB)
    assert js["time"]["cp_comm_s"] > p2p["time"]["cp_comm_s"]
    assert "cp_comm_type" not in p2p["plan"]  # the stack's default is not written


def test_memory_of_each_variant_by_hand(explain):
    """What each variant holds (stack_db megatron cp_comm_types, memory.py [cp2]), per layer being
    run, beyond the saved tensors, in the recompute buffer: all_gather's backward (7 cp + 1) B a
    local K/V element and 2 B a query element (the larger pass); a2a's backward 4 B a K/V
    element, 6 B a query element and 2 B an output element. a2a also saves its kernel's output
    beside the output projection's input: 2 B an output element a layer more, not under selective
    recompute (Megatron's re-runs the core). p2p's forward merge [cp3] is off for both."""
    cp = 4
    _, _, _, ag = explain(**JOB, cp_comm_type="all_gather")
    _, _, _, a2 = explain(**JOB, cp_comm_type="a2a")
    _, _, _, p2p = explain(**JOB)
    mt = lambda js, k: js["memory"]["terms"][k]  # noqa: E731
    assert mt(ag, "recompute_buffer") == KV_EL * (7 * cp + 1) + Q_EL * 2
    assert mt(a2, "recompute_buffer") == KV_EL * 4 + Q_EL * 6 + Q_EL * 2
    # saved activations: the same as p2p's for all_gather, 2 B x the output more a layer for a2a
    in_flight = mt(p2p, "layer_activations") / mt(ag, "layer_activations")
    assert in_flight == 1.0
    assert mt(a2, "layer_activations") - mt(p2p, "layer_activations") == LAYERS * 2 * Q_EL
    _, _, _, a2_sel = explain(**JOB, cp_comm_type="a2a", recompute="selective")
    _, _, _, p2p_sel = explain(**JOB, recompute="selective")
    assert mt(a2_sel, "layer_activations") == mt(p2p_sel, "layer_activations")
    # full recompute: the one re-materialised layer's buffer carries the second output copy
    _, _, _, a2_full = explain(**JOB, cp_comm_type="a2a", recompute="full")
    _, _, _, ag_full = explain(**JOB, cp_comm_type="all_gather", recompute="full")
    assert mt(a2_full, "recompute_buffer") - mt(ag_full, "recompute_buffer") == pytest.approx(
        (KV_EL * 4 + Q_EL * 8 + 2 * Q_EL) - (KV_EL * (7 * cp + 1) + Q_EL * 2), abs=0.5)


def test_a2a_heads_rule(cli):
    """a2a splits the heads over the cp ranks: TE asserts num_heads % cp_size == 0 for Q and for
    K/V (startup rule MEGATRON_CP_A2A_HEADS). Llama 3 8B at tp 2 has 16 query and 4 KV heads a
    TP rank: cp 4 runs, cp 8 is refused (4 KV heads), exit 2 with error and hint, no traceback;
    all_gather and p2p run cp 8."""
    base = ["--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--seq-len", "32768", "--global-batch", "16"]
    r = cli("explain", *base, "--cp", "8", "--cp-comm-type", "a2a")
    assert r.exit_code == 2
    assert "MEGATRON_CP_A2A_HEADS" in r.stderr and "error:" in r.stderr and "hint:" in r.stderr
    assert "Traceback" not in r.stderr
    for ok in (["--cp", "4", "--cp-comm-type", "a2a"], ["--cp", "8", "--cp-comm-type", "all_gather"], ["--cp", "8"]):
        r = cli("explain", *base, *ok, "--format", "json")
        assert r.exit_code == 0, r.stderr
    # fit masks the cp the rule refuses: no row with cp 8 (or 16) under a2a
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--seq-len", "32768", "--global-batch", "16",
            "--cp-comm-type", "a2a", "--format", "json", "--top", "200")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and all(
        row["plan"]["cp"] == 1 or ((32 // row["plan"]["tp"]) % row["plan"]["cp"] == 0
                                   and max(8 // row["plan"]["tp"], 1) % row["plan"]["cp"] == 0) for row in rows)
    assert any(row["plan"]["cp"] > 1 and row["plan"].get("cp_comm_type") == "a2a" for row in rows)


@pytest.mark.parametrize("args, match", [
    (["--cp-comm-type", "a2a+p2p"], "a2a\\+p2p needs hierarchical_cp_sizes"),
    (["--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2,4"], "MEGATRON_HCP_SIZES"),
    (["--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "1,8"], "MEGATRON_HCP_SIZES"),
    (["--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2 x"], "not whole numbers"),
    (["--hierarchical-context-parallel-sizes", "2,2"], "without a hierarchical cp_comm_type"),
    (["--cp-comm-type", "a2a", "--stack", "torchtitan", "--sharding", "fsdp"], "runs one context-parallel attention"),
    (["--cp-comm-type", "ring"], "cp_comm_type"),
])
def test_refusals(cli, args, match):
    """a2a+p2p without its sizes (Megatron's assert), sizes whose product is not cp (rule
    MEGATRON_HCP_SIZES), sizes without a2a+p2p, a stack without variants, an unknown value: exit 2,
    error and hint, no traceback."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--cp", "4", "--seq-len", "8192", *args)
    assert r.exit_code == 2
    assert "error:" in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr
    import re

    assert re.search(match, r.stderr)


def test_reader_and_export_round_trip(tmp_path, cli):
    """The Megatron reader reads --cp-comm-type into the job (a list of one value as that value;
    several values refused; cp 1 ignores it); the export writes it; the file reads back as the
    same plan with the same memory; a command-line --cp-comm-type replaces the file's, with a note."""
    from planner.cli.export import resolved_plan
    from planner.explain import evaluate

    job = Job(**JOB, cp_comm_type="a2a")
    settings, plan, _ = resolve(job)
    pd = resolved_plan(job)
    text, _ = export_plan(pd, "megatron")
    assert "--cp-comm-type a2a " in text or text.rstrip().endswith("--cp-comm-type a2a")
    f = tmp_path / "exported.sh"
    f.write_text(text)
    cfg = load_trainer_config(f)
    assert cfg.job["cp_comm_type"] == "a2a"
    assert not any("cp-comm-type" in x for x in cfg.not_modelled + cfg.ignored)
    back = Job.model_validate(cfg.job)
    s2, p2, _ = resolve(back)
    assert plan_signature(resolved_plan(back)) == plan_signature(pd)
    assert float(evaluate(settings, plan).memory.total) == float(evaluate(s2, p2).memory.total)
    r = cli("explain", f, "--cp-comm-type", "all_gather", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["cp_comm_type"] == "all_gather"
    assert "cp_comm_type=all_gather: the command line replaces the file's a2a" in r.stderr
    # a per-layer list: one value is that value, several are refused
    for value, want in (("a2a a2a a2a", "a2a"), ("p2p a2a", None)):
        g = tmp_path / "list.sh"
        g.write_text(text.replace("--cp-comm-type a2a", f"--cp-comm-type {value}"))
        if want:
            assert load_trainer_config(g).job["cp_comm_type"] == want
        else:
            with pytest.raises(PlannerError, match="per-layer context-parallel variants"):
                load_trainer_config(g)
    g = tmp_path / "allgather.sh"
    g.write_text(text.replace("--cp-comm-type a2a", "--cp-comm-type allgather"))
    with pytest.raises(PlannerError, match="Unsupported communication type") as e:
        load_trainer_config(g)
    assert "all_gather" in e.value.hint
    # cp 1: the layers ignore it (transformer_layer.py), listed as ignored
    g = tmp_path / "cp1.sh"
    g.write_text(text.replace("--context-parallel-size 4", "--context-parallel-size 1"))
    cfg1 = load_trainer_config(g, gpus=2)
    assert "cp_comm_type" not in cfg1.job and any("--cp-comm-type" in x for x in cfg1.ignored)


def test_a2a_p2p_by_hand(explain):
    """a2a+p2p with --hierarchical-context-parallel-sizes 2 2 (cp 4): all-to-alls of Q, K, V and the
    output inside pairs of contiguous CP ranks (the CP stride, tp 2: NVLink), then TE's P2P ring over
    the 2 p2p ranks (stride 2 x 2): after the all-to-alls each rank holds half the sequence with
    half its heads (the same 2 MiB of K and of V), so the ring is cp 2's: one K/V send (4 MiB)
    forward beside the first kernel, K/V and then dK/dV backward, each hidden behind a step's
    kernel (450 GB/s: only the exposed share). Kernels at cuDNN's rates for 4,096- and
    2,048-key blocks over the unsplit 8,192 (cp 2's). Copies: p2p's merges at one ring step after
    the first plus the all-to-alls' 8 B an element each way."""
    from planner.compute import ATTN_BWD_FLOPS_RATIO, HBM_EFFICIENCY, attention_rates
    from planner.catalog import load_stack

    hw = load_hardware("h100-sxm")
    _, _, _, js = explain(**JOB, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[2, 2])
    assert (js["plan"]["cp_comm_type"], js["plan"]["hierarchical_cp_sizes"]) == ("a2a+p2p", [2, 2])
    a2a_pass = a2a(Q_EL * 2, 2) + 2 * a2a(KV_EL, 2) + a2a(Q_EL * 2, 2)  # Q, K, V, O (or dO, dQ, dK, dV)
    send = NV_LAT + 2 * KV_EL / NV_BW  # the local K and V, 4 MiB; dK/dV the same in bf16
    assert js["time"]["cp_comm_total_s"] == pytest.approx(M * LAYERS * (2 * a2a_pass + 3 * send), rel=1e-9)
    fwd_rate, bwd_rate = attention_rates(hw, "cudnn")
    flops = 4 * T * 16 * 128 * 8192 / 2  # causal core: this rank's 2,048 tokens x 16 heads (as 4,096 x 8 after the all-to-all)
    cudnn_f, cudnn_b = {2048: 617.0, 4096: 609.0, 8192: 600.0}, {2048: 465.0, 4096: 499.0, 8192: 518.0}
    k_f = 0.5 * cudnn_f[8192] / cudnn_f[4096] + 0.5 * cudnn_f[8192] / cudnn_f[2048]
    k_b = 0.5 * cudnn_b[8192] / cudnn_b[4096] + 0.5 * cudnn_b[8192] / cudnn_b[2048]
    core_f, core_b = flops / fwd_rate, ATTN_BWD_FLOPS_RATIO * flops / bwd_rate
    x = load_stack("megatron").overlap.overlapped_exposed_fraction
    assert send < k_f * core_f / 2  # hidden behind a step's kernel: the exposed share only
    exposed = 2 * a2a_pass + x * 3 * send
    assert js["time"]["cp_comm_s"] == pytest.approx(M * LAYERS * exposed, rel=1e-9)
    hbm = hw.hbm_bandwidth * HBM_EFFICIENCY
    passes = (Q_EL * (12 + 6) + KV_EL * 12 + Q_EL * 8 + Q_EL * (12 + 6) + KV_EL * (13 + 3) + KV_EL * 4 + Q_EL * 8) / hbm
    assert js["time"]["cp_compute_s"] == pytest.approx(
        M * LAYERS * (passes + (k_f - 1) * core_f + (k_b - 1) * core_b), rel=1e-9)
    # it saves the pre-all-to-all output beside the returned one, as a2a: 2 B an output element a layer
    _, _, _, p2p = explain(**JOB)
    assert js["memory"]["terms"]["layer_activations"] - p2p["memory"]["terms"]["layer_activations"] == LAYERS * 2 * Q_EL
    # one rank in a level is the other variant, as TE runs it: [1, 4] is p2p, [4, 1] a2a
    _, _, _, one = explain(**JOB, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[1, 4])
    assert one["time"]["cp_comm_total_s"] == p2p["time"]["cp_comm_total_s"]
    _, _, _, four = explain(**JOB, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[4, 1])
    _, _, _, plain = explain(**JOB, cp_comm_type="a2a")
    assert four["time"]["cp_comm_total_s"] == plain["time"]["cp_comm_total_s"]


def test_ci_rows_a2a_p2p_read_and_priced(tmp_path):
    """The Megatron-LM CI corpus' four a2a+p2p rows (cp 4 as 2 x 2: --hierarchical-context-parallel-sizes
    quoted "2 2" in the argument file) read as a2a+p2p with sizes [2, 2] and are priced as such; the
    export writes both flags and reads back as the same plan."""
    from pathlib import Path

    from planner.cli.export import resolved_plan
    from planner.megatron_ci import report_corpus

    rid = "gpt__gpt3_mcore_te_tp1_pp2_cp4_a2a_p2p_nondeterministic__dev_dgx_a100"
    base = Path(__file__).parent / "data" / "megatron_ci"
    cfg = load_trainer_config(base / "args" / f"{rid}.args", fmt="megatron", gpus=8)
    assert (cfg.job["cp_comm_type"], cfg.job["hierarchical_cp_sizes"]) == ("a2a+p2p", [2, 2])
    data = report_corpus(base / "corpus.json", ids=[rid])
    (row,) = data["rows"]
    assert row["skipped"] is None and abs(row["error"]) < 0.05
    job = Job(**JOB, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[2, 2])
    pd = resolved_plan(job)
    text, _ = export_plan(pd, "megatron")
    assert "--cp-comm-type a2a+p2p" in text and "--hierarchical-context-parallel-sizes 2 2" in text
    f = tmp_path / "h.sh"
    f.write_text(text)
    back = Job.model_validate(load_trainer_config(f).job)
    assert plan_signature(resolved_plan(back)) == plan_signature(pd)


def test_exported_arguments_pass_megatron_rules():
    """The exported a2a script passes the argument-level start-up checks (planner/trainers/rules.py),
    and the same script at cp 8 (4 KV heads a TP rank) fails CP_A2A_HEADS, as TE's assert would."""
    from planner.cli.export import resolved_plan
    from planner.trainers.rules import megatron_script_errors

    text, _ = export_plan(resolved_plan(Job(**JOB, cp_comm_type="a2a")), "megatron")
    assert megatron_script_errors(text) == []
    bad = text.replace("--context-parallel-size 4", "--context-parallel-size 8").replace(
        "--nproc_per_node 8", "--nproc_per_node 16").replace("--nproc-per-node 8", "--nproc-per-node 16")
    keys = [k for k, _ in megatron_script_errors(bad)]
    assert "CP_A2A_HEADS" in keys
    # a2a+p2p: the exported script passes; sizes whose product is not cp, or none, fail HCP_SIZES
    text, _ = export_plan(resolved_plan(Job(**JOB, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[2, 2])), "megatron")
    assert megatron_script_errors(text) == []
    assert "HCP_SIZES" in [k for k, _ in megatron_script_errors(text.replace("sizes 2 2", "sizes 2 4"))]
    assert "HCP_SIZES" in [k for k, _ in megatron_script_errors(text.replace(" --hierarchical-context-parallel-sizes 2 2", ""))]


def test_fit_with_a2a_p2p_ranks_only_the_sizes_cp(cli):
    """fit with a2a+p2p and sizes 2,2: Megatron asserts cp = 2 x 2 (MEGATRON_HCP_SIZES), so every
    ranked plan has cp 4 and runs the variant; the row's explain command carries both options."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--seq-len", "32768", "--global-batch", "16",
            "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2,2", "--format", "json", "--top", "50")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and all(row["plan"]["cp"] == 4 and row["plan"]["hierarchical_cp_sizes"] == [2, 2] for row in rows)
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--seq-len", "32768", "--global-batch", "16",
            "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2,2", "--top", "1")
    assert "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2,2" in r.stdout


def test_a_stack_file_that_refuses_a_variant(tmp_path, cli):
    """A user stack file may name variants it does not run (cp_comm_types.refused, with the
    reason): a job asking for one is refused with that reason and the variants it has, exit 2."""
    import yaml

    from planner.catalog import stack_source
    from conftest import assert_one_error

    data = yaml.safe_load(stack_source("megatron").read_text(encoding="utf-8"))
    cct = data["cp_comm_types"]
    del cct["variants"]["a2a"]
    cct["heads_divisible"] = [v for v in cct["heads_divisible"] if v != "a2a"]
    cct["fp8_kernel_saves_qkv"] = [v for v in cct["fp8_kernel_saves_qkv"] if v != "a2a"]
    cct["refused"] = {"a2a": "this cluster's Transformer Engine build has no all-to-all context parallelism"}
    path = tmp_path / "no-a2a.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    r = cli("explain", "--model", "llama3-8b", "--gpus", 16, "--tp", 2, "--cp", 4, "--global-batch", 16,
            "--stack", str(path), "--cp-comm-type", "a2a")
    assert_one_error(r, "cp_comm_type a2a: this cluster's Transformer Engine build", "p2p")
    assert cli("explain", "--model", "llama3-8b", "--gpus", 16, "--tp", 2, "--cp", 4, "--global-batch", 16,
               "--stack", str(path), "--cp-comm-type", "all_gather").exit_code == 0
