"""Step-time model: hand-computed communication terms, exposure under overlap, the bubble,
MFU bookkeeping, the seed's sections 2.3/4.2 and 10.2 figures, and calibration profiles."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner import comm
from planner.compute import gemm_plateau, gemm_time
from planner.catalog import load_hardware, load_model, load_stack
from planner.params import count_params

H100 = load_hardware("h100-sxm")
NV_BW = 450e9 * comm.NVLINK_RING_EFFICIENCY  # achievable NVLink ring bandwidth
NV_LAT = comm.NVLINK_LATENCY_S

# torchtitan before 1e8f9acd1, whose training takes context_parallel_rotate_method (planner/cp_rotate.py [4])
TT_ROTATE_TRAINS = str(Path(__file__).parent / "data" / "stacks" / "torchtitan-rotate-trains.yaml")


def ring_allreduce(size, n, bw=NV_BW, lat=NV_LAT):
    return 2 * (n - 1) * lat + 2 * (n - 1) / n * size / bw


def nvls_allreduce(size):
    """NVLink SHARP all-reduce inside an HGX H100 (hardware_db nvls: true): one latency and
    S / algbw, algbw = NVLS_ALGBW_PER_RING_BUSBW x the ring's achievable bandwidth (comm.py)."""
    return comm.NVLS_LATENCY_S + size / (comm.NVLS_ALGBW_PER_RING_BUSBW * NV_BW)


def test_tp_allreduce_term_by_hand(explain):
    # llama3-8b, TP 8 without SP, one 8,192-token sequence per micro-batch, 2 micro-batches:
    # 4 all-reduces of T*h*2 bytes per layer per micro-batch, exposed.
    _, _, est, js = explain(model="llama3-8b", gpus=8, tp=8, sequence_parallel=False, global_batch=2, seq_len=8192)
    S = 8192 * 4096 * 2
    per = nvls_allreduce(S)  # NCCL picks NVLS over the ring on 8 H100s for this size
    assert per < ring_allreduce(S, 8)
    assert (js["time"]["tp_comm_s"] - js["time"].get("tp_head_s", 0.0)) == pytest.approx(2 * 32 * 4 * per, rel=1e-9)


def test_tp_sp_is_reduce_scatter_plus_all_gather(explain):
    _, _, _, js = explain(model="llama3-8b", gpus=8, tp=8, sequence_parallel=True, global_batch=2, seq_len=8192)
    S = 8192 * 4096 * 2
    rs = 7 * NV_LAT + 7 / 8 * S / NV_BW  # ring reduce-scatter / all-gather: (n-1) rounds, (n-1)/n S
    # plus, once a step, Megatron's all-reduce of the SP-partial norm gradients (step.py [27], spnorm): 32 x 2 x 4,096
    # + 4,096 fp32 main gradients = 1,064,960 B, NVLS on 8 H100s
    norms = nvls_allreduce((2 * 4096 * 32 + 4096) * 4)
    assert js["time"]["tp_sp_norm_grads_s"] == pytest.approx(norms, rel=1e-9)
    # and the backward's re-gathers of the QKV and fc1 inputs for their wgrad GEMMs (step.py [35]: 2 all-gathers of
    # T h a layer, each behind its dgrad GEMM at the stack's exposed share, tests/test_tp_wgrad_regather.py)
    rg = js["time"]["tp_wgrad_regather_s"]
    assert 0 < rg <= 2 * 32 * 2 * rs
    assert (js["time"]["tp_comm_s"] - js["time"].get("tp_head_s", 0.0)) == pytest.approx(2 * 32 * 4 * 2 * rs + norms + rg, rel=1e-9)


def test_full_recompute_repeats_forward_tp_collectives(explain):
    kw = dict(model="llama3-8b", gpus=8, tp=8, sequence_parallel=False, global_batch=2, seq_len=8192)
    a, b = ((lambda t: t["tp_comm_s"] - t.get("tp_head_s", 0.0))(explain(**x)[3]["time"])  # the layers' ([36] apart)
            for x in (kw, dict(kw, recompute="full")))
    assert b == pytest.approx(a * 6 / 4)


def test_pp_send_recv_by_hand(explain):
    """pp 2 on one node (tp 1), Megatron: both stages are ends, each with one neighbour. Per micro-batch the first
    stage's send_forward_recv_backward (its send forward and the gradient's receive, one exchange) and the last's
    send_backward_recv_forward (NVIDIA/Megatron-LM @d98e8a64 p2p_communication.py l. 536-600, schedules.py
    l. 2378-2448; stack_db megatron.yaml pipeline_p2p_batched): one exchange of T h x 2 B a micro-batch, where a
    middle stage makes two. m = 4: 4 x 1 sends."""
    _, _, _, js = explain(model="llama3-8b", gpus=2, pp=2, global_batch=4, seq_len=8192)
    send = NV_LAT + 8192 * 4096 * 2 / NV_BW
    assert js["time"]["pp_comm_s"] == pytest.approx(4 * 1 * send, rel=1e-9)


def test_pp_end_stage_sends_half_a_middle_stages(explain):
    """Llama 3 8B on 4 H100 of one node, pp 4 with --decoder-first-pipeline-num-layers 11 --decoder-last-pipeline-
    num-layers 7 (stages 11, 7, 7, 7): stage 0 is the critical one (11 layers against 7 + the head), and it makes one
    exchange of T h x 2 B a micro-batch (send forward with the gradient's receive), a middle stage two
    (p2p_communication.py @d98e8a64 l. 536-600). m = 16 / 1 = 16: pp_comm_s = 16 x 1 x send, not 16 x 2."""
    _, _, _, js = explain(model="llama3-8b", gpus=4, pp=4, global_batch=16, seq_len=8192, first_stage_layers=11,
                          last_stage_layers=7, stack="megatron")
    send = NV_LAT + 8192 * 4096 * 2 / NV_BW
    assert js["time"]["critical_stage"]["stage"] == "first"
    assert js["time"]["pp_comm_s"] == pytest.approx(16 * 1 * send, rel=1e-9)


def test_bubble_is_p_minus_1_over_vm_of_busy_time(explain):
    _, _, est, js = explain(model="llama3-8b", gpus=4, pp=4, global_batch=16, seq_len=8192)
    t = js["time"]
    busy = t["compute_s"] + t["tp_comm_s"] + t["cp_comm_s"] + t["pp_comm_s"]
    # plus, the critical stage being an end one (one exchange a micro-batch, a middle's two), the fill's and drain's
    # 2 (p - 1) hops its count lacks: (p - 1) = 3 sends (step.py [31]; tests/test_pp_fill_drain.py)
    assert t["critical_stage"]["stage"] in ("first", "last")
    assert t["bubble_s"] == pytest.approx(3 / 16 * busy + t["pp_fill_drain_s"])  # seed sec. 5.2: 3/16
    assert t["pp_fill_drain_s"] == pytest.approx(3 * (NV_LAT + 8192 * 4096 * 2 / NV_BW), rel=1e-9)
    _, _, est, js = explain(model="llama3-8b", gpus=4, pp=4, vpp=2, global_batch=16, seq_len=8192)
    t = js["time"]
    # the warm-up's and flush's waited-on p2p (step.py [13]) lie on the step, outside the busy time the bubble scales
    assert t["pp_warmup_flush_s"] > 0
    busy = t["compute_s"] + t["tp_comm_s"] + t["cp_comm_s"] + t["pp_comm_s"] - t["pp_warmup_flush_s"]
    assert t["bubble_s"] == pytest.approx(3 / 32 * busy + t.get("pp_fill_drain_s", 0.0))  # interleaving divides it by v


X = 0.189  # stack_db megatron.yaml overlap.overlapped_exposed_fraction (Lee et al. 2025)


def test_ddp_allreduce_hidden_behind_backward(explain):
    """DDP on one 8-GPU node: the gradient all-reduce (4 B x N: Megatron reduces its fp32 main
    grads, stack_db megatron.yaml fsdp.grad_reduce_bytes) overlaps the backward of the last
    micro-batch; the last bucket (1/buckets of it) stays exposed, and the overlapped part costs
    the stack's exposed share (NCCL slows the compute it runs beside)."""
    _, _, _, js = explain(model="llama3-8b", gpus=8, global_batch=64, seq_len=8192)
    n = count_params(load_model("llama3-8b")).total
    # one all-reduce per 40M-parameter bucket (megatron stack: ddp_bucket_params), each with
    # its own latency; NVLS inside the node (hardware_db h100-sxm nvls: true)
    nb = math.ceil(n / 40e6)
    total = nb * nvls_allreduce(4.0 * n / nb)
    assert js["time"]["dp_comm_s"] == pytest.approx(total, rel=1e-9)
    # the last bucket never hides; the other (nb - 1)/nb overlap at the exposed share X (the
    # last bucket is not counted on top of a full share: issue 12, exposed <= total)
    assert js["time"]["dp_comm_exposed_s"] == pytest.approx(total * (X * (1 - 1 / nb) + 1 / nb), rel=1e-9)
    # without overlap (--no-dp-comm-overlap) all of it waits
    _, _, _, js = explain(model="llama3-8b", gpus=8, global_batch=64, seq_len=8192, dp_comm_overlap=False)
    assert js["time"]["dp_comm_exposed_s"] == pytest.approx(total, rel=1e-9)


def test_fsdp_exposed_when_network_cannot_keep_up(explain):
    """FSDP of a 70B model over 1,024 GPUs with one short sequence per GPU: all-gathers
    (2 B x N / TP ... per micro-batch) take longer than the compute they hide behind."""
    _, _, _, js = explain(model="llama3-70b", gpus=1024, sharding="fsdp", global_batch=1024, seq_len=1024)
    t = js["time"]
    assert t["dp_comm_s"] > t["compute_s"]  # the network cannot keep up ...
    # ... so at least the excess is exposed, and never more than all of it
    assert t["dp_comm_s"] - t["compute_s"] <= t["dp_comm_exposed_s"] <= t["dp_comm_s"]


def test_step_is_sum_of_terms(explain):
    _, _, est, js = explain(model="llama3-70b", gpus=512, tp=8, pp=4, vpp=2, sharding="zero1", recompute="selective")
    t = js["time"]
    parts = ["compute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_exposed_s", "bubble_s", "optimizer_s"]
    assert t["step_s"] == pytest.approx(sum(t[k] for k in parts))


def test_gemm_time_uses_plateau_and_wave_quantisation():
    # 8192^3 on H100: 2048 tiles of 128x256 over 132 SMs = 16 waves (2112 slots)
    plat = gemm_plateau(H100, "bf16")
    assert plat == 794.5e12 * 0.85  # MAMF x the sustained-clock fraction
    t = float(gemm_time(8192, 8192, 8192, plat, 132))
    assert t == pytest.approx(2 * 8192**3 / (plat * 2048 / 2112))
    # 1024^3: 32 tiles on 132 SMs -> a quarter of the GPU (measured 176.6 TFLOP/s, zzc0721 #79)
    eff = 2 * 1024**3 / float(gemm_time(1024, 1024, 1024, plat, 132)) / 1e12
    assert eff == pytest.approx(794.5 * 0.85 * 32 / 132, rel=1e-9)
    assert abs(eff / 176.62 - 1) < 0.12


def test_mfu_and_throughput_bookkeeping(explain):
    _, _, _, js = explain(model="llama3-70b", gpus=4096, tp=8, sharding="fsdp", tokens=15e12)
    thr, fl, t = js["throughput"], js["flops"], js["time"]
    tokens = 2048 * 8192
    assert thr["tokens_per_s"] == pytest.approx(tokens / t["step_s"])
    assert thr["mfu"] == pytest.approx(fl["model_flops_per_token"] * thr["tokens_per_s"] / (4096 * 989e12))
    # no recompute: HFU counts what the kernels run, the causal half of the attention term
    hw_flops = fl["flops_per_token_6n"] + fl["attention_flops_per_token"] / 2
    assert thr["hfu"] == pytest.approx(hw_flops * thr["tokens_per_s"] / (4096 * 989e12))
    assert thr["mfu_6n"] < thr["hfu"] < thr["mfu"]
    days = 15e12 / tokens * t["step_s"] / 86400
    assert thr["training_days"] == pytest.approx(days)
    assert thr["gpu_hours"] == pytest.approx(days * 24 * 4096)


def test_seed_10_2_days_at_mfu():
    """45 days at 40% MFU on 4,096 H100s; 30% -> 60 days, 50% -> 36 (6N x 15e12)."""
    n = count_params(load_model("llama3-70b-paper")).total
    for mfu, days in ((0.4, 45), (0.3, 60), (0.5, 36)):
        assert round(6 * n * 15e12 / (4096 * 989e12 * mfu) / 86400) == days


def test_seed_4_2_tp_allreduce_vs_compute(explain, free_stack):
    """Seed sec. 4.2: 4 all-reduces of 134 MB per layer and sequence across 8 GPUs cost about
    15% of the layer's compute over NVLink (450 GB/s, compute at the seed's 40% MFU) and more
    than the compute over a 50 GB/s network link."""
    per_layer_flops = 6 * count_params(load_model("llama3-70b-paper")).as_dict()["per_layer"] * 8192 / 8
    compute = per_layer_flops / (0.4 * 989e12)
    ar = lambda bw: 4 * 2 * 7 / 8 * 134.2e6 / bw
    assert ar(450e9) / compute == pytest.approx(0.15, abs=0.02)
    assert ar(50e9) / compute > 1
    # the full model, TP inside a node vs TP spread over nodes by the rank order
    kw = dict(model="llama3-70b-paper", gpus=64, tp=8, sequence_parallel=False, sharding="fsdp", global_batch=8)
    t = explain(**kw)[3]["time"]
    assert 0.10 < t["tp_comm_s"] / t["compute_s"] < 0.35
    # no catalog stack builds DP innermost (stack_db runs.rank_orders): a stack file that does
    # not say what it runs prices it with megatron's figures
    assert explain(stack=free_stack, **kw)[3]["time"] == explain(**kw)[3]["time"]
    t = explain(rank_order="dp-tp-cp-pp", stack=free_stack, **kw)[3]["time"]
    assert t["tp_comm_s"] / t["compute_s"] > 1


def test_calibration_profile_changes_comm_in_measured_direction(cli, tmp_path):
    """The AWS p5 log measured 8-GPU all-reduce (NVLS) bus bandwidth; with its profile the TP
    all-reduce time moves from the default model's to the measured figure, in the direction
    the two bus bandwidths imply; unrelated terms don't move."""
    from planner.profile import load_profile

    prof = tmp_path / "p5.yaml"
    r = cli("calibrate", "nccl", "tests/data/nccl_logs/h100_8gpu_allreduce_aws-p5-batch.txt",
            "--collective", "all_reduce", "--nodes", "1", "-o", str(prof))
    assert r.exit_code == 0, r.stderr
    S = 8192 * 8192 * 2  # llama3-70b, one 8,192-token sequence: the TP all-reduce message
    measured = float(load_profile(prof).collective_time("all_reduce", "intra-node", 8, S))
    default = nvls_allreduce(S)
    args = ["explain", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--no-sequence-parallel", "--format", "json"]
    base = json.loads(cli(*args).stdout)
    cal = json.loads(cli(*args, "--calibration", str(prof)).stdout)
    assert (cal["time"]["tp_comm_s"] - cal["time"].get("tp_head_s", 0.0)) / (base["time"]["tp_comm_s"] - base["time"].get("tp_head_s", 0.0)) == pytest.approx(measured / default, rel=1e-9)
    assert measured != pytest.approx(default, rel=0.01)  # the profile does say something else
    assert cal["time"]["compute_s"] == base["time"]["compute_s"]
    assert cal["calibration"]["used"] == ["all_reduce/intra-node/8"]
    assert "calibration" not in base
    # a plan whose layers run no 8-rank all-reduce (SP: reduce-scatter + all-gather) uses it only for the once-a-step
    # all-reduce of the SP-partial norm gradients (step.py [27], spnorm): the layers' collectives are the default's
    sp = json.loads(cli(*args[:-3], "--format", "json", "--calibration", str(prof)).stdout)
    sp0 = json.loads(cli(*args[:-3], "--format", "json").stdout)
    assert sp["calibration"]["used"] == ["all_reduce/intra-node/8"]
    norms = 2 * 8192 * 80 + 8192  # llama3-70b's RMSNorms, fp32 main gradients
    assert sp["time"]["tp_sp_norm_grads_s"] == pytest.approx(
        float(load_profile(prof).collective_time("all_reduce", "intra-node", 8, norms * 4.0)), rel=1e-9)
    assert ((sp["time"]["tp_comm_s"] - sp["time"].get("tp_head_s", 0.0)) - sp["time"]["tp_sp_norm_grads_s"]
            == pytest.approx((sp0["time"]["tp_comm_s"] - sp0["time"].get("tp_head_s", 0.0)) - sp0["time"]["tp_sp_norm_grads_s"], rel=1e-12))


def test_every_model_has_finite_time_on_h100(explain, unlisted_stack):
    import planner.catalog as cat
    from planner.startup import missing_layer_features, unbuilt_layer_forms

    meg = cat.load_stack("megatron")
    for name in cat.list_models():
        m = cat.load_model(name)
        # a model whose layers megatron's code does not build (rule 73: Jamba's Mamba-1, Llama 4's chunked
        # attention; or a form it does not build, Gemma's post-norms) on the megatron entry without its layer_kinds list (conftest unlisted_stack)
        stack = {"stack": unlisted_stack} if (missing_layer_features(m, meg) or unbuilt_layer_forms(m, meg)) else {}
        for tp, pp, sh in ((8, 1, "fsdp"), (8, 4, "zero1"), (1, 1, "fsdp")):
            if m.num_attention_heads % tp or pp > m.num_layers:
                continue
            # biased experts (gpt-oss) run with expert TP 1 only on Megatron (startup MEGATRON_MOE_BIAS_ETP)
            etp = {"etp": 1} if m.moe is not None and m.linear_bias else {}
            _, _, est, js = explain(model=name, gpus=64 * tp, tp=tp, pp=pp, sharding=sh, global_batch=512,
                                    seq_len=min(m.max_seq_len, 4096), **etp, **stack)
            assert math.isfinite(js["time"]["step_s"]) and js["time"]["step_s"] > 0, name
            assert 0 < js["throughput"]["mfu"] < 1, name


def test_tp_comm_overlap_leaves_first_chunk_exposed(explain):
    """With TP-communication overlap the collectives hide behind the layer's GEMMs (they are
    shorter here), except the first of tp chunks: exposed = total / tp."""
    kw = dict(model="llama3-70b", gpus=512, tp=8, sharding="zero1")
    # less the once-a-step all-reduce of the SP-partial norm gradients (step.py [27]), which nothing overlaps, and the
    # backward's wgrad input re-gathers (step.py [35]), behind the dgrad GEMMs with or without the overlap: the same
    ts = [explain(**kw)[3]["time"], explain(tp_comm_overlap=True, **kw)[3]["time"]]
    plain, over = ((t["tp_comm_s"] - t.get("tp_head_s", 0.0)) - t["tp_sp_norm_grads_s"] - t["tp_wgrad_regather_s"] for t in ts)
    assert over == pytest.approx(plain / 8)
    assert ts[0]["tp_wgrad_regather_s"] == pytest.approx(ts[1]["tp_wgrad_regather_s"], rel=1e-12)
    assert ts[0]["tp_wgrad_regather_s"] > 0


def test_tp_comm_overlap_needs_sp(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--no-sequence-parallel", "--tp-comm-overlap")
    assert r.exit_code == 2 and "sequence parallel" in r.stderr


def test_partial_recompute_time_between_none_and_full(explain):
    kw = dict(model="llama3-8b", gpus=8, tp=8, sequence_parallel=False, global_batch=2, seq_len=8192)
    none = explain(**kw)[3]["time"]
    full = explain(recompute="full", **kw)[3]["time"]
    half = explain(recompute="full", recompute_layers=16, **kw)[3]["time"]  # 16 of 32 layers
    assert half["compute_s"] == pytest.approx((none["compute_s"] + full["compute_s"]) / 2)
    # TP: 4 collectives per layer, 6 for a recomputed one
    assert (half["tp_comm_s"] - half.get("tp_head_s", 0.0)) == pytest.approx((none["tp_comm_s"] - none.get("tp_head_s", 0.0)) * (16 * 4 + 16 * 6) / (32 * 4))


def test_zero_bubble_h1_bubble_uses_the_plans_pass_times(explain, free_stack):
    """ZB-H1 (Qi et al. 2023) shrinks 1F1B's (p-1)/m bubble; with this plan's own pass times
    (backward ~2x forward, W one forward's GEMMs) it lands between the paper's equal-pass
    (p-1)/(3m) and 1F1B's (p-1)/m of the busy time."""
    # no catalog stack runs ZB-H1 (stack_db runs.schedules): megatron's figures, as a stack file
    # that does not say what it runs
    kw = dict(model="llama3-70b", gpus=512, tp=8, pp=8, sharding="zero1", stack=free_stack)
    one = explain(**kw)[3]["time"]
    zb = explain(schedule="zb-h1", **kw)[3]["time"]
    busy = zb["compute_s"] + zb["tp_comm_s"] + zb["cp_comm_s"] + zb["pp_comm_s"]
    m = 2048 // (512 // 64)  # micro-batches per step: global batch / dp
    assert 7 / (3 * m) * busy < zb["bubble_s"] < 7 / m * busy
    assert zb["bubble_s"] < one["bubble_s"]


def _slow_nvlink_hw(tmp_path, gbps):
    src = open("hardware_db/h100-sxm.yaml").read().replace("nvlink_GBps: 450", f"nvlink_GBps: {gbps}")
    src = src.replace("name: h100-sxm", "name: h100-slow-nvlink")
    path = tmp_path / "h100-slow.yaml"
    path.write_text(src)
    return str(path)


# FlashAttention-2 on H100, head dim 128, by keys per block (FlashAttention-3 paper, Figs. 5-6:
# compute.ATTN_BLOCK_*): 2k, 4k, 8k forward 362, 368, 370; backward 291, 310, 318 TFLOP/s
FA2_FWD = {2048: 362.0, 4096: 368.0, 8192: 370.0}
FA2_BWD = {2048: 291.0, 4096: 310.0, 8192: 318.0}
# cuDNN's fused attention, the same figures' red bars (compute.ATTN_BLOCK_TABLES["cudnn"]), the
# kernel Transformer Engine runs on Hopper (the megatron stack's attention_kernels): 2k, 4k, 8k
# forward 617, 609, 600; backward 465, 499, 518 TFLOP/s
CUDNN_FWD = {2048: 617.0, 4096: 609.0, 8192: 600.0}
CUDNN_BWD = {2048: 465.0, 4096: 499.0, 8192: 518.0}


def _hide(t, window, x):
    over = max(t - window, 0.0)
    return over + (t - over) * x


@pytest.mark.parametrize("gbps", [450, 0.5])
def test_cp_ring_exchange_by_hand(explain, tmp_path, gbps):
    """Context parallelism as Megatron runs it (Transformer Engine's AttnFuncWithCPAndKVP2P),
    cp = 2 inside a node (tp 4), 8,192 tokens: per layer and micro-batch each rank runs two
    attention kernels a pass, each on half the core's FLOPs (the causal mask load-balanced
    over 4 chunks): the diagonal (4,096 keys a query block) and one off-diagonal block (2,048
    keys), at cuDNN's rate for those lengths relative to the unsplit 8,192-key kernel's (the
    kernel TE runs on Hopper: stack_db megatron attention_kernels). Forward: one send of the local K/V (4 MiB) beside the first kernel.
    Backward: K/V beside the first step's kernel, then dK/dV (bf16) alone beside the last's.
    Each is hidden as far as its kernel lasts, the stack's exposed share of the overlapped
    part exposed. The merges TE adds (bytes per element, stack_db megatron context_parallel):
    forward out 4 + 6 (cp - 1) and the K/V concatenation 4; backward dQ 4 + 6, dK/dV 5 + 3 and
    the K/V copy 4."""
    from planner.compute import ATTN_BWD_FLOPS_RATIO, HBM_EFFICIENCY, attention_rates

    hw_path = _slow_nvlink_hw(tmp_path, gbps)
    hw = load_hardware(hw_path)
    _, _, _, js = explain(model="llama3-8b", gpus=8, tp=4, cp=2, global_batch=2, seq_len=8192, hardware=hw_path)
    T = 8192 // 2  # tokens per micro-batch on one GPU
    kv_el = T * 2 * (8 // 4) * 128  # K and V, 2 KV heads per TP rank
    kv = kv_el * 2  # bf16: 4 MiB; dK/dV travel in bf16 too
    bw = gbps * 1e9 * comm.NVLINK_RING_EFFICIENCY
    send = comm.NVLINK_LATENCY_S + kv / bw
    m, layers = 2, 32  # global batch 2 over dp 1, one sequence per micro-batch
    assert js["time"]["cp_comm_total_s"] == pytest.approx(m * layers * 3 * send, rel=1e-9)
    fwd_rate, bwd_rate = attention_rates(hw, "cudnn")
    assert (fwd_rate, bwd_rate) == pytest.approx((605e12 * 0.85, 500e12 * 0.85))
    flops = 4 * T * 8192 * 32 * 128 / 4 / 2  # causal attention core, this rank's heads and queries
    k_f = 0.5 * CUDNN_FWD[8192] / CUDNN_FWD[4096] + 0.5 * CUDNN_FWD[8192] / CUDNN_FWD[2048]  # 0.97884
    k_b = 0.5 * CUDNN_BWD[8192] / CUDNN_BWD[4096] + 0.5 * CUDNN_BWD[8192] / CUDNN_BWD[2048]  # 1.07603
    core_f, core_b = flops / fwd_rate, ATTN_BWD_FLOPS_RATIO * flops / bwd_rate
    x = load_stack("megatron").overlap.overlapped_exposed_fraction
    exposed = _hide(send, k_f * core_f / 2, x) + 2 * _hide(send, k_b * core_b / 2, x)
    assert js["time"]["cp_comm_s"] == pytest.approx(m * layers * exposed, rel=1e-9, abs=1e-12)
    if gbps == 450:  # NVLink keeps ahead of attention: only the exposed share of the sends
        assert js["time"]["cp_comm_s"] == pytest.approx(x * js["time"]["cp_comm_total_s"], rel=1e-9)
    else:
        assert js["time"]["cp_comm_s"] > x * js["time"]["cp_comm_total_s"]
    # what CP adds to compute: the merges over HBM, and the per-step kernels' lower rate
    o_el = T * 32 * 128 / 4
    passes = (o_el * (4 + 6) + kv_el * 4 + o_el * (4 + 6) + kv_el * (5 + 3) + kv_el * 4) / (hw.hbm_bandwidth * HBM_EFFICIENCY)
    assert js["time"]["cp_compute_s"] == pytest.approx(
        m * layers * (passes + (k_f - 1) * core_f + (k_b - 1) * core_b), rel=1e-9)


def test_cp_torch_ring_by_hand(explain):
    """Context parallelism as torchtitan runs it (torch's _templated_ring_attention, rotate
    method allgather), cp = 2 inside a node: forward one all-gather of every rank's K/V beside
    the first step's kernel; backward the all-gather again beside the first step's kernel, and
    a send of the fp32 dK/dV after each step's kernel, the first beside the second step's
    kernel, the last (nothing after it) exposed. Its eager fp32 merges move more bytes than
    TE's: forward out 12 + 38 (cp - 1), K/V 4 + 4; backward dQ 20 + 10, dK/dV 28 + 21, K/V
    4 + 4 (stack_db torchtitan context_parallel)."""
    from planner.compute import ATTN_BWD_FLOPS_RATIO, HBM_EFFICIENCY, attention_rates

    hw = load_hardware("h100-sxm")
    job = dict(model="llama3-8b", gpus=8, tp=4, cp=2, global_batch=2, micro_batch=1, seq_len=8192, stack="torchtitan",
               sharding="fsdp")
    settings, _, _, js = explain(**job)
    T = 8192 // 2
    kv_el = T * 2 * 2 * 128
    kv = kv_el * 2
    ag = float(comm.group_collective(comm.ALL_GATHER, 2 * kv, 2, 4, comm.comm_params(hw), comm.AUTO, job_gpus=8)[0].time_s)
    dkv = NV_LAT + kv_el * 4 / NV_BW  # fp32 in transit
    m, layers = 2, 32
    assert js["time"]["cp_comm_total_s"] == pytest.approx(m * layers * (2 * ag + 2 * dkv), rel=1e-9)
    fwd_rate, bwd_rate = attention_rates(hw)
    flops = 4 * T * 8192 * 32 * 128 / 4 / 2
    k_f = 0.5 * FA2_FWD[8192] / FA2_FWD[4096] + 0.5 * FA2_FWD[8192] / FA2_FWD[2048]
    k_b = 0.5 * FA2_BWD[8192] / FA2_BWD[4096] + 0.5 * FA2_BWD[8192] / FA2_BWD[2048]
    speed = load_stack("torchtitan").attention_speed
    core_f, core_b = flops / fwd_rate / speed, ATTN_BWD_FLOPS_RATIO * flops / bwd_rate / speed
    x = load_stack("torchtitan").overlap.overlapped_exposed_fraction
    exposed = _hide(ag, k_f * core_f / 2, x) + _hide(ag, k_b * core_b / 2, x) + _hide(dkv, k_b * core_b / 2, x) + dkv
    assert js["time"]["cp_comm_s"] == pytest.approx(m * layers * exposed, rel=1e-9)
    o_el = T * 32 * 128 / 4
    passes = (o_el * (12 + 38) + kv_el * (4 + 4) + o_el * (20 + 10) + kv_el * (28 + 21) + kv_el * (4 + 4)) / (
        hw.hbm_bandwidth * HBM_EFFICIENCY)
    assert js["time"]["cp_compute_s"] == pytest.approx(
        m * layers * (passes + (k_f - 1) * core_f + (k_b - 1) * core_b), rel=1e-9)


def test_cp_rows_differ_with_their_traffic(explain):
    """issue 22: CP 2, 4 and 8 of the same job are priced apart. Llama 3 8B on 64 H100s at
    8,192 tokens, TP 1 (the CP ring inside a node up to cp 8): each doubling of cp doubles the
    ring's sends ((cp - 1) forward: 1, 3, 7) on half as many tokens, so the K/V traffic per
    layer grows as (cp - 1) / cp (1/2, 3/4, 7/8 of a sequence's K/V) plus a latency a send;
    the merges grow as (cp - 1) / cp too, and the per-step kernels slow down (FlashAttention-2
    at 512-2,048 keys a block). The step time rises with cp, and CP 1 has none of it."""
    rows = {}
    for cp in (1, 2, 4, 8):
        _, _, _, js = explain(model="llama3-8b", gpus=64, tp=1, cp=cp, global_batch=64, seq_len=8192)
        rows[cp] = js["time"]
    assert rows[1]["cp_comm_total_s"] == rows[1]["cp_compute_s"] == rows[1]["cp_comm_s"] == 0.0
    steps = [rows[c]["step_s"] for c in (1, 2, 4, 8)]
    assert steps == sorted(steps) and len(set(steps)) == 4
    for key in ("cp_comm_total_s", "cp_compute_s", "cp_comm_s"):
        v = [rows[c][key] for c in (2, 4, 8)]
        assert v[0] < v[1] < v[2], key
    # the bytes: 3 (cp - 1) sends of the local K/V (T = 8192 / cp tokens) per layer, with m =
    # 64 / (64 / cp) = cp micro-batches a step: 3 (cp - 1) x cp x (8192 / cp) K/V units
    kv_tok = 2 * 8 * 128 * 2  # bytes of K and V per token
    bw = 450e9 * comm.NVLINK_RING_EFFICIENCY
    for cp in (2, 4, 8):
        T = 8192 // cp
        n = cp - 1
        sends = n + 2 + (n - 1)  # forward n; backward K/V, dK/dV alone, n - 1 of both
        bytes_ = (n + 2 + 2 * (n - 1)) * T * kv_tok
        per_mb = sends * NV_LAT + bytes_ / bw
        assert rows[cp]["cp_comm_total_s"] == pytest.approx(cp * 32 * per_mb, rel=1e-9)


def test_hsdp_terms_by_hand(explain):
    """HSDP on two 8-GPU nodes, shard groups of 8 (one node each), 2 replicas: per
    micro-batch an all-gather of the bf16 weights forward and backward and a reduce-scatter of
    the bf16 gradients inside the node (rings over NVLink), then once per step an all-reduce
    of the 1/8 gradient shard between the two replicas over the network (a 2-rank ring)."""
    n = count_params(load_model("llama3-8b")).total
    _, _, _, js = explain(model="llama3-8b", gpus=16, sharding="hsdp", shard_group=8, global_batch=16, seq_len=8192)
    S, G = 2.0 * n, 4.0 * n  # bf16 weights; fp32 gradients (megatron stack: grad_reduce_bytes 4)
    L = 32  # one collective per FSDP unit, a layer (stack fsdp_bucket_params null), each with its latency
    ring_ag = L * 7 * NV_LAT + 7 / 8 * S / NV_BW
    ring_rs = L * 7 * NV_LAT + 7 / 8 * G / NV_BW
    net_bw = 400e9 / 8 * comm.NETWORK_EFFICIENCY
    ar = 2 * comm.NETWORK_LATENCY_S + G / 8 / net_bw  # 2 ranks: 2(n-1)/n = 1; one per step
    m = 1
    assert js["time"]["dp_comm_s"] == pytest.approx(m * (2 * ring_ag + ring_rs) + ar, rel=1e-9)


def test_zero1_reduce_scatter_and_all_gather_by_hand(explain):
    """ZeRO-1/2 (Megatron's distributed optimizer): once per step a reduce-scatter of the
    gradients and an all-gather of the updated bf16 weights, each hidden behind the backward /
    forward pass except its last / first bucket (1/layers)."""
    n = count_params(load_model("llama3-8b")).total
    _, _, _, js = explain(model="llama3-8b", gpus=8, sharding="zero1", global_batch=64, seq_len=8192)
    nb = math.ceil(n / 40e6)  # one collective per 40M-parameter bucket (megatron: ddp_bucket_params)
    ring_ag = nb * 7 * NV_LAT + 7 / 8 * 2.0 * n / NV_BW  # bf16 weights
    ring_rs = nb * 7 * NV_LAT + 7 / 8 * 4.0 * n / NV_BW  # fp32 gradients (megatron: grad_reduce_bytes 4)
    assert js["time"]["dp_comm_s"] == pytest.approx(ring_ag + ring_rs, rel=1e-9)
    assert js["time"]["dp_comm_exposed_s"] == pytest.approx((ring_ag + ring_rs) * (X * (1 - 1 / nb) + 1 / nb), rel=1e-9)


def test_zero1_reduces_the_gradient_buffer_dtype(explain):
    """Megatron's distributed optimizer reduce-scatters its gradient buffer itself, in the
    buffer's dtype (param_and_grad_buffer.py @d98e8a64 l. 924, 713-730: stack_db megatron.yaml
    fsdp.ddp_reduces_grad_buffer): with --grad-reduce-in-bf16 (bytes_per_param gradients 2,
    what Megatron-Bridge's performance presets run) the reduce-scatter moves 2 B a gradient;
    the all-gather of the bf16 weights does not change. torchtitan's FSDP keeps its own
    reduce dtype whatever the job's gradient bytes."""
    n = count_params(load_model("llama3-8b")).total
    bf16 = {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}
    _, _, _, js = explain(model="llama3-8b", gpus=8, sharding="zero1", global_batch=64, seq_len=8192,
                          bytes_per_param=bf16)
    nb = math.ceil(n / 40e6)
    ring_ag = nb * 7 * NV_LAT + 7 / 8 * 2.0 * n / NV_BW
    ring_rs = nb * 7 * NV_LAT + 7 / 8 * 2.0 * n / NV_BW  # bf16 gradients now
    assert js["time"]["dp_comm_s"] == pytest.approx(ring_ag + ring_rs, rel=1e-9)
    kw = dict(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", global_batch=64, seq_len=8192)
    assert (explain(**kw, bytes_per_param=bf16)[3]["time"]["dp_comm_s"]
            == explain(**kw, bytes_per_param="megatron")[3]["time"]["dp_comm_s"])


def test_cp_recompute_sends_the_forward_again(explain):
    """A fully recomputed layer runs its forward twice, its ring exchange too. At cp 2 the
    megatron stack sends the local K/V once forward and K/V, then dK/dV (bf16, the same size)
    backward: 3 equal sends a layer; with full recompute 4 (every layer recomputed): the
    traffic grows by 4/3. The merges of the forward run twice as well."""
    job = dict(model="llama3-8b", gpus=8, tp=4, cp=2, global_batch=2, seq_len=8192)
    _, _, _, none = explain(**job, recompute="none")
    _, _, _, full = explain(**job, recompute="full")
    assert full["time"]["cp_comm_total_s"] == pytest.approx(none["time"]["cp_comm_total_s"] * 4 / 3, rel=1e-12)
    assert full["time"]["cp_compute_s"] > none["time"]["cp_compute_s"]


@pytest.mark.parametrize("gbps", [450, 0.5])
def test_cp_torch_alltoall_ring_by_hand(explain, tmp_path, gbps):
    """torchtitan with [parallelism] context_parallel_rotate_method "alltoall" (job field
    cp_rotate_method): torch's _AllToAllRotater permutes the local K/V to the next rank at every
    step but the last, each waited at the next step's start, so each send hides behind one
    step's kernel (a ring), where the default all-gather rotater's one all-gather hides behind the
    first step's kernel alone. cp = 4 inside a node (tp 2), 8,192 tokens, m = 2: forward 3 K/V
    sends, backward 3 K/V sends and 4 fp32 dK/dV sends (the last exposed). At 450 GB/s both
    methods hide nearly all of it; on a 0.5 GB/s link (a hardware file) each send outlasts its
    step's kernel and the all-gather, held against one step only, exposes more."""
    from planner.compute import ATTN_BWD_FLOPS_RATIO, attention_block_rate, attention_rates

    hw_arg = _slow_nvlink_hw(tmp_path, gbps)
    hw = load_hardware(hw_arg)
    # torchtitan before 1e8f9acd1, whose training takes the option (tests/data/stacks/torchtitan-rotate-trains.yaml)
    job = dict(model="llama3-8b", gpus=8, tp=2, cp=4, global_batch=2, micro_batch=1, seq_len=8192,
               stack=TT_ROTATE_TRAINS, sharding="fsdp", hardware=hw_arg)
    _, _, _, ring = explain(**job, cp_rotate_method="alltoall")
    _, _, _, ag_js = explain(**job, cp_rotate_method="allgather")
    _, _, _, default = explain(**job)
    assert default["time"] == ag_js["time"]  # torchtitan's default rotate method
    assert ring["plan"]["cp_rotate_method"] == "alltoall" and "cp_rotate_method" not in ag_js["plan"]
    # the catalog torchtitan (@e347b1e5e) never hands the option to torch (planner/cp_rotate.py [4]): allgather priced
    _, _, _, titan = explain(**{**job, "stack": "torchtitan"}, cp_rotate_method="alltoall")
    assert titan["time"] == default["time"] and "cp_rotate_method" not in titan["plan"]
    cp, m, layers = 4, 2, 32
    T = 8192 // cp
    kv_el = T * 2 * (8 // 2) * 128  # K and V, 8 KV heads over tp 2, head dim 128
    p = comm.comm_params(hw)
    t_kv = float(comm.group_collective(comm.SEND_RECV, kv_el * 2, cp, 2, p, comm.AUTO, job_gpus=8)[0].time_s)
    t_dkv = float(comm.group_collective(comm.SEND_RECV, kv_el * 4, cp, 2, p, comm.AUTO, job_gpus=8)[0].time_s)
    ag = float(comm.group_collective(comm.ALL_GATHER, kv_el * 2 * cp, cp, 2, p, comm.AUTO, job_gpus=8)[0].time_s)
    fwd_rate, bwd_rate = attention_rates(hw)
    flops = 4 * T * 8192 * 32 * 128 / 2 / 2  # local queries x all keys, 32 heads over tp 2, causal
    speed = load_stack("torchtitan").attention_speed
    kf = [float(attention_block_rate(8192, b) * (0.25 / attention_block_rate(2048, b) + 0.75 / attention_block_rate(1024, b)))
          for b in (False, True)]
    core_f, core_b = flops / fwd_rate / speed, ATTN_BWD_FLOPS_RATIO * flops / bwd_rate / speed
    wf, wb = kf[0] * core_f / cp, kf[1] * core_b / cp  # one step's kernel
    x = load_stack("torchtitan").overlap.overlapped_exposed_fraction
    n = cp - 1
    exp_ring = n * _hide(t_kv, wf, x) + n * _hide(t_kv, wb, x) + n * _hide(t_dkv, wb, x) + t_dkv
    exp_ag = _hide(ag, wf, x) + _hide(ag, wb, x) + n * _hide(t_dkv, wb, x) + t_dkv
    assert ring["time"]["cp_comm_total_s"] == pytest.approx(m * layers * (2 * n * t_kv + cp * t_dkv), rel=1e-9)
    assert ring["time"]["cp_comm_s"] == pytest.approx(m * layers * exp_ring, rel=1e-9)
    assert ag_js["time"]["cp_comm_s"] == pytest.approx(m * layers * exp_ag, rel=1e-9)
    if gbps != 450:
        assert ring["time"]["cp_comm_s"] < ag_js["time"]["cp_comm_s"]
    # everything but the exchange is the same plan's
    assert ring["time"]["cp_compute_s"] == ag_js["time"]["cp_compute_s"]


def test_bf16_end_layers_priced_on_the_searchs_keyed_floor():
    """Megatron --first-last-layers-bf16 under `fit`: the search's compute floor (compute_floor, and
    search._prefilter's group_floor) prices a keyed view of the plan (terms.KeyedPlan), which bf16_end_layers
    copied with dataclasses.replace, a TypeError ("replace() should be called on dataclass instances") that
    crashed every fit of a job with bf16 layers. By hand, as test_lowprec's test_bf16_end_layers_by_hand: Llama 3
    8B on 8 B200s at pp 1, nvfp4, layers 1 + 2 kept bf16 (all on the one stage), micro-batch 1, global batch 64
    over dp 8: m = 8 micro-batches; each bf16 layer adds per = (fwd + bwd + sel at bf16) - (the same at nvfp4)
    to the micro-batch, so the floor (m x the stage's micro-batch compute) grows by exactly 8 x 3 x per."""
    import numpy as np

    from planner.plan import resolve
    from planner.schema import Job
    from planner.step import _context, compute_floor, layer_times
    from planner.terms import with_fields

    base = dict(model="llama3-8b", gpus=8, hardware="b200", tp=1, pp=1, micro_batch=1, global_batch=64, seq_len=8192,
                sharding="zero1", precision="nvfp4")
    settings, plan, _ = resolve(Job(**base, bf16_layers_at_start=1, bf16_layers_at_end=2))
    s0, p0, _ = resolve(Job(**base))
    lt = layer_times(_context(settings, plan))
    lt16 = layer_times(_context(s0, with_fields(plan, precision=np.zeros_like(plan.precision))))
    per = float(lt16.fwd[0] + lt16.bwd[0] + lt16.sel[0] - lt.fwd[0] - lt.bwd[0] - lt.sel[0])
    assert per > 0 and int(np.squeeze(plan.microbatches)) == 8
    grown = float(np.squeeze(compute_floor(settings, plan) - compute_floor(s0, p0)))
    assert grown == pytest.approx(8 * 3 * per, rel=1e-9)


def test_fit_of_a_job_with_bf16_layers_runs(cli, tmp_path):
    """The CLI path of the crash above: `fit` of an fp8 tensorwise job with one bf16 layer at the start exits 0
    (was a traceback), and its first row, priced again by explain of its reproduce line (search.explain_args), has
    the same time terms (DESIGN: explain and search use the same formula)."""
    import yaml

    from planner.schema import Job
    from planner.search import explain_args

    fields = {"model": "llama3-8b", "gpus": 8, "precision": "fp8", "fp8_recipe": "tensorwise", "bf16_layers_at_start": 1,
              "global_batch": 16, "seq_len": 4096}
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(fields))
    r = cli("fit", str(job), "--top", "1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)["rows"][0]  # fit JOB.yaml: {"rows": [...], ...}
    assert row["plan"]["bf16_layers_at_start"] == 1
    e = cli("explain", *explain_args(Job(**fields), row), "--format", "json")
    assert e.exit_code == 0, e.stderr
    got = json.loads(e.stdout)["time"]
    nested = ("critical_stage", "step_end_stages")  # (dicts: pytest.approx takes flat ones)
    assert all(got.pop(k) == row["time"][k] for k in nested)
    assert got == pytest.approx({k: v for k, v in row["time"].items() if k not in nested}, rel=1e-9)
