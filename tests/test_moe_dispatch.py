"""Issue 23, MoE mechanisms 1-2: where EP groups land (NVLink domains filled in segments,
comm.domain_in_use) and the token dispatchers (planner/dispatch.py), with explain's MoE terms.
Expected values are derived by hand from the cited figures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from planner import comm, dispatch
from planner.catalog import load_hardware
from planner.cli import app
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

GB200 = load_hardware("gb200-nvl72")
H800 = load_hardware("h800-sxm")


def _params(hw, **update):
    return comm.comm_params(hw.model_copy(update=update) if update else hw)


# ---------------------------------------------------------------- 1. placement
@pytest.mark.parametrize("job, used", [(64, 72), (72, 72), (96, 48), (128, 64), (144, 72), (256, 64), (512, 64),
                                       (576, 72), (1152, 72)])
def test_gb200_segments_follow_megatron_bridge_rule(job, used):
    """Megatron-Bridge executors.py: nodes = job / 4; segment = the first of 18..1 dividing it
    (only beyond one 18-node rack). 96 GPUs = 24 nodes -> 12 nodes = 48 GPUs per rack; 1152 =
    288 nodes -> 18 (whole racks); 64 GPUs fit one rack."""
    assert int(comm.domain_in_use(job, _params(GB200))) == used


def test_in_order_and_eight_gpu_nodes_keep_whole_domains():
    assert int(comm.domain_in_use(128, _params(GB200, nvlink_domain_allocation="in_order"))) == 72
    assert int(comm.domain_in_use(1024, _params(H800))) == 8  # nvlink_domain = gpus_per_node: nothing to segment


def test_ep64_on_gb200_segments_is_priced_on_nvlink():
    """EP64 (stride 1) of a 128-GPU job: racks hold 64 GPUs each, the group is one rack."""
    p = _params(GB200)
    gl = comm.group_link(64, 1, p, pattern=comm.PATTERN_ALL_PAIRS, job_gpus=128)
    assert int(gl.link) == comm.LINK_NVLINK and int(gl.domains) == 1
    assert float(gl.bandwidth) == pytest.approx(p.nvlink_bandwidth)
    # the same all-to-all: 64 MB per rank, (63/64) of it over NVLink at the achievable rate
    cost, _, _ = comm.group_collective(comm.ALL_TO_ALL, 64e6, 64, 1, p, job_gpus=128)
    assert float(cost.bandwidth_s) == pytest.approx(64e6 * 63 / 64 / p.nvlink_bandwidth)


def test_ep64_straddling_racks_is_priced_on_the_nic():
    """Filled in order, 72-GPU racks: ranks 64-127 (the second EP64 group) span two racks; the
    model takes the smallest piece, gcd(64, 72) = 8 members per domain: (64-8)/63 of the
    all-pairs traffic leaves the domain, at the NIC rate over that share."""
    p = _params(GB200, nvlink_domain_allocation="in_order")
    gl = comm.group_link(64, 1, p, pattern=comm.PATTERN_ALL_PAIRS, job_gpus=128)
    assert int(gl.link) == comm.LINK_NETWORK and int(gl.local_ranks) == 8
    assert float(gl.bandwidth) == pytest.approx(min(p.nvlink_bandwidth, p.network_bandwidth / (56 / 63)))
    # whole racks (144 GPUs = 36 nodes, segment 18): the same straddle under segments too
    gl = comm.group_link(64, 1, _params(GB200), pattern=comm.PATTERN_ALL_PAIRS, job_gpus=144)
    assert int(gl.link) == comm.LINK_NETWORK


# ---------------------------------------------------------------- 2. dispatchers
class _Link:
    def __init__(self, link, local):
        self.link, self.local_ranks = np.asarray(link), np.asarray(local)


class _Block:
    """An MoE layer's shape as kernel_time reads it: hidden, top-k, group-limited routing."""

    def __init__(self, h=7168, top_k=8, expert_groups=0, groups_per_token=0):
        self.h, self.top_k, self.expert_groups, self.groups_per_token = h, top_k, expert_groups, groups_per_token


B = _Block()


def test_deepep_low_latency_dispatch_reproduces_its_table():
    """DeepEP README (low-latency, H800, 128 tokens, 7168 hidden, top-8, fp8 dispatch): EP8
    dispatch 77 us at 98 GB/s, combine 114 us at 127 GB/s. Bytes as its test counts them:
    128 x 8 x (7168 + 7168/128 x 4 + 16) = 7,585,792 B; 7,585,792 / 98e9 = 77.4 us. Combine
    128 x 8 x 7168 x 2 / 127e9 = 115.6 us (the table: 114)."""
    p = _params(H800)
    d8, d16, c16 = dispatch.kernel_time(dispatch.DEEPEP_LL, 128.0, B, 8, _Link(comm.LINK_NETWORK, 1), p,
                                        True, 0)
    assert float(d8) == pytest.approx(128 * 8 * (7168 + 224 + 16) / 98e9)
    assert float(d8) == pytest.approx(77e-6, rel=0.01)
    assert float(c16) == pytest.approx(114e-6, rel=0.02)
    assert float(d16) == pytest.approx(128 * 8 * 7168 * 2 / 98e9)


def test_deepep_normal_intranode_from_its_table():
    """EP8 inside an H800 node: 4096 tokens reach 8 (1 - (7/8)^8) = 5.2504 ranks on average;
    bf16 dispatch at 153 GB/s (fraction 153/200 of H800's 200 GB/s NVLink) plus one NVLink
    round of latency."""
    p = _params(H800)
    _, d16, c16 = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, B, 8, _Link(comm.LINK_NVLINK, 8), p, False, 0)
    reach = 8 * (1 - (7 / 8) ** 8)
    assert float(d16) == pytest.approx(p.nvlink_latency + 4096 * reach * 7168 * 2 / 153e9)
    assert float(c16) == pytest.approx(p.nvlink_latency + 4096 * reach * 7168 * 2 / 158e9)


def test_node_limited_routing_cuts_rdma_bytes():
    """EP64 over 8 H800 nodes, top-8: unlimited a token reaches 8 (1 - (7/8)^8) = 5.25 nodes;
    DeepSeek-V3's M = 4 caps it at 4. RDMA at 51 GB/s (EP64) for dispatch, 50 for combine."""
    p = _params(H800)
    link = _Link(comm.LINK_NETWORK, 8)
    free = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, B, 64, link, p, True, 0)
    capped = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, B, 64, link, p, True, 4)
    per_el = 1 + 4 / 128 + 16 / 7168
    assert float(capped[0]) == pytest.approx(p.network_latency + 4096 * 4 * 7168 * per_el / 51e9)
    assert float(free[2]) == pytest.approx(p.network_latency + 4096 * 8 * (1 - (7 / 8) ** 8) * 7168 * 2 / 50e9)
    assert float(capped[2]) < float(free[2])
    # the same cap from the model's group-limited routing (8 groups, 4 per token: DeepSeek-V3's
    # n_group / topk_group), each group on one of the 8 nodes: 4 x max(1, 8/8) = 4 nodes
    grouped = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, _Block(expert_groups=8, groups_per_token=4), 64, link, p,
                                   True, 0)
    assert [float(x) for x in grouped] == pytest.approx([float(x) for x in capped])
    # 16 nodes (EP128): a group spans 2 nodes, a token at most 4 x 2 = 8 of them (no cap at 5.25)
    g16 = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, _Block(expert_groups=8, groups_per_token=4), 128, link, p,
                               False, 0)
    f16 = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, B, 128, link, p, False, 0)
    assert float(g16[2]) == pytest.approx(float(f16[2]))


def test_hybridep_interpolates_in_log2_ranks():
    """GB200 table, bf16 dispatch: 550.10 GB/s at 8 ranks, 472.84 at 16; at 11.31 ranks (log2
    midway) the mean, 511.47 GB/s."""
    bw = dispatch._interp(2 ** 3.5, *dispatch.HYBRIDEP_NVLINK[::2][:2])
    assert float(bw) == pytest.approx((550.10 + 472.84) / 2)


def _job(**kw):
    base = dict(model="qwen3-30b-a3b", hardware="gb200-nvl72", gpus=128, global_batch=512, seq_len=4096, tp=1, pp=1,
                ep=64, micro_batch=1)
    return Job.model_validate({**base, **kw})


def test_dispatcher_is_a_job_field_with_a_stack_default():
    s, _, _ = resolve(_job())
    assert s.moe_dispatcher == "alltoall" and ("moe_dispatcher", "alltoall") in s.inherited
    s, _, _ = resolve(_job(moe_dispatcher="deepep", moe_fp8_dispatch=True, moe_route_nodes=4, precision="fp8"))
    assert (s.moe_dispatcher, s.moe_fp8_dispatch, s.moe_route_nodes) == ("deepep", True, 4)
    assert all(k != "moe_dispatcher" for k, _ in s.inherited)
    with pytest.raises(PlannerError, match="has no experts"):
        resolve(Job.model_validate(dict(model="llama3-8b", hardware="h100-sxm", gpus=8, global_batch=8, seq_len=4096,
                                        moe_dispatcher="deepep")))


@pytest.mark.parametrize("flags, kind", [
    ("--moe-token-dispatcher-type alltoall", "alltoall"),
    ("", "allgather"),  # Megatron-LM's argparse default
    ("--moe-token-dispatcher-type flex", "deepep"),  # flex's default backend
    ("--moe-enable-deepep", "deepep"),
    ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", "hybridep"),
])
def test_megatron_flags_name_the_dispatcher(tmp_path, flags, kind):
    p = tmp_path / "args.txt"
    p.write_text(f"--tensor-model-parallel-size 1 --num-experts 128 --expert-model-parallel-size 8 --seq-length 4096 --micro-batch-size 1 "
                 f"--global-batch-size 256 {flags}\n")
    cfg = load_trainer_config(p, gpus=64, model="qwen3-30b-a3b")
    assert cfg.job["moe_dispatcher"] == kind
    if not flags:
        assert any(a.startswith("moe_dispatcher: allgather") for a in cfg.assumed)


def test_a_faster_dispatcher_shortens_the_ep_term():
    """On the same plan the EP term follows the dispatcher: allgather moves every token to every
    EP rank (slower than the all-to-all at EP64); DeepEP's normal kernels leave the rack's
    NVLink for their RDMA path beyond 8 peers, Hybrid-EP stays on it."""
    from planner.explain import evaluate

    t = {}
    for kind in ("alltoall", "allgather", "deepep", "hybridep"):
        s, plan, _ = resolve(_job(moe_dispatcher=kind))
        t[kind] = float(evaluate(s, plan).time["ep_comm"])
    assert t["allgather"] > t["alltoall"] and t["deepep"] > t["hybridep"]
    assert all(math.isfinite(v) and v > 0 for v in t.values())


# ---------------------------------------------------------------- 3. explain
def test_explain_shows_the_moe_terms(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: qwen3-30b-a3b\nhardware: gb200-nvl72\ngpus: 128\nglobal_batch: 512\nseq_len: 4096\n"
                   "tp: 1\npp: 1\nep: 64\nmicro_batch: 1\nmoe_dispatcher: deepep\n")
    r = CliRunner().invoke(app, ["explain", str(job), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["placement"]["ep"] == {"ranks": 64, "stride": 1, "tier": "NVLink", "nvlink_domains": 1,
                                    "members_per_domain": 64}
    assert d["placement"]["nvlink_domain_in_use"] == 64
    m = d["moe"]
    assert m["dispatcher"] == "deepep" and m["ep_tier"] == "NVLink"
    assert m["dispatch_s"] > 0 and m["combine_s"] > 0 and 0 < m["grouped_gemm_efficiency"] < 1
    assert "fixed_overhead_s" in m
    r = CliRunner().invoke(app, ["explain", str(job)], terminal_width=400)
    assert r.exit_code == 0, r.output
    for words in ("placement (NVLink domains of 64 GPUs in use): EP64 NVLink", "MoE dispatcher deepep",
                  "MoE grouped GEMM: 2 local experts", "fixed MoE overhead"):
        assert words in r.output, words


def test_deepep_joins_at_most_eight_nvlink_peers():
    """DeepEP's NUM_MAX_NVL_PEERS = 8: EP64 inside one GB200 rack still runs its RDMA path
    between 8 groups of 8 GPUs (51 GB/s at EP64 on H800's 50 GB/s NIC, GB200's NIC 50 GB/s too);
    Hybrid-EP uses the rack's NVLink."""
    p = _params(GB200)
    link = _Link(comm.LINK_NVLINK, 64)
    _, d16, _ = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, B, 64, link, p, False, 0)
    reach = 8 * (1 - (7 / 8) ** 8)
    assert float(d16) == pytest.approx(p.network_latency + 4096 * reach * 7168 * 2 / 51e9)
    _, h16, _ = dispatch.kernel_time(dispatch.HYBRIDEP, 4096.0, B, 64, link, p, False, 0)
    assert float(h16) < float(d16) / 5


def test_a_record_says_its_dispatcher_else_it_is_assumed(tmp_path):
    """validate: a runs-file record's moe_dispatcher reaches the job; without one the stack's
    default is priced and listed as assumed."""
    import yaml

    from planner.validate import load_runs, evaluate_record

    src = yaml.safe_load(open("tests/data/published_runs_moe.yaml"))
    recs = src if isinstance(src, list) else src["runs"]
    rec = next(r for r in recs if r["id"] == "megatron-bridge-25.11-dgx-gb300-deepseek-v3-bf16")  # states no dispatcher
    rows = {}
    for kind in (None, "hybridep"):
        r = dict(rec, **({"moe_dispatcher": kind} if kind else {}))
        p = tmp_path / f"runs_{kind}.yaml"
        p.write_text(yaml.safe_dump([r]))
        (one,) = load_runs(p)
        rows[kind] = evaluate_record(one, tmp_path, tmp_path)
    assert any(a.startswith("moe_dispatcher=alltoall") for a in rows[None].assumed)
    assert not any(a.startswith("moe_dispatcher") for a in rows["hybridep"].assumed)
    assert rows["hybridep"].predicted_step_s != rows[None].predicted_step_s


# ---------------------------------------------------------------- 3. expert TP (the flex dispatcher's etp x ep group)
QWEN_MOE = _Block(h=2048, top_k=8)


def test_deepep_etp2_sends_each_token_to_both_expert_tp_ranks_over_nvlink():
    """Qwen3-30B-A3B (h 2048, top-8), etp 2 x ep 4 = DeepEP's group of 8 in one H800 node
    (Megatron's flex dispatcher over the tp_ep group, routing map expanded over the etp ranks,
    the whole hidden state to each): a rank's 2,048 tokens (4,096 / tp 2 under SP) reach
    4 (1 - (3/4)^8) = 3.5995 EP ranks, x 2 expert-TP ranks = 7.1991 ranks, at the EP8 figure
    153 GB/s (dispatch) and 158 GB/s (combine); etp 1 (the 4-rank EP group) moves half."""
    p = _params(H800)
    link = _Link(comm.LINK_NVLINK, 8)
    _, d16, c16 = dispatch.kernel_time(dispatch.DEEPEP, 2048.0, QWEN_MOE, 4, link, p, False, 0, etp=2)
    ranks = 2 * 4 * (1 - 0.75 ** 8)
    assert ranks == pytest.approx(7.19910, abs=1e-5)
    assert float(d16) == pytest.approx(p.nvlink_latency + 2048 * ranks * 2048 * 2 / 153e9)
    assert float(c16) == pytest.approx(p.nvlink_latency + 2048 * ranks * 2048 * 2 / 158e9)
    _, e16, _ = dispatch.kernel_time(dispatch.DEEPEP, 2048.0, QWEN_MOE, 4, _Link(comm.LINK_NVLINK, 4), p, False, 0)
    assert float(d16) - p.nvlink_latency == pytest.approx(2 * (float(e16) - p.nvlink_latency))


def test_deepep_etp2_ep32_is_a_64_rank_group_across_8_nodes():
    """DeepSeek-V3 (h 7168, top-8), etp 2 x ep 32 over 8-GPU H800 nodes: DeepEP's group is 64
    ranks, 8 nodes of 4 EP ranks x 2 expert-TP ranks; a token reaches 8 (1 - (7/8)^8) = 5.2511
    nodes over RDMA (its 2 expert-TP copies merge into one node's), at the EP64 figures 51 GB/s
    dispatch and 50 combine. With etp 1 the 32-rank group spans 4 nodes: 4 (1 - (3/4)^8) =
    3.5995 at the EP32 figures 58 / 57 GB/s. DeepSeek-V3's node-limited routing (8 groups, 4
    a token) caps the 8 nodes at 4 x max(1, 8/8) = 4."""
    p = _params(H800)
    link = _Link(comm.LINK_NETWORK, 8)
    _, d16, c16 = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, B, 32, link, p, False, 0, etp=2)
    assert float(d16) == pytest.approx(p.network_latency + 4096 * 8 * (1 - (7 / 8) ** 8) * 7168 * 2 / 51e9)
    assert float(c16) == pytest.approx(p.network_latency + 4096 * 8 * (1 - (7 / 8) ** 8) * 7168 * 2 / 50e9)
    _, e16, _ = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, B, 32, link, p, False, 0)
    assert float(e16) == pytest.approx(p.network_latency + 4096 * 4 * (1 - 0.75 ** 8) * 7168 * 2 / 58e9)
    _, g16, _ = dispatch.kernel_time(dispatch.DEEPEP, 4096.0, _Block(expert_groups=8, groups_per_token=4), 32, link,
                                     p, False, 0, etp=2)
    assert float(g16) == pytest.approx(p.network_latency + 4096 * 4 * 7168 * 2 / 51e9)


def test_deepep_low_latency_etp2_sends_every_copy_to_both_ranks():
    """The low-latency kernels under the flex dispatcher's expansion (top_k -> etp top_k): 128
    tokens x 8 x 2 copies at the EP16 figure (98 -> 63 GB/s: the group etp 2 x ep 8 = 16)."""
    p = _params(H800)
    _, d16, _ = dispatch.kernel_time(dispatch.DEEPEP_LL, 128.0, B, 8, _Link(comm.LINK_NETWORK, 1), p, False, 0, etp=2)
    assert float(d16) == pytest.approx(128 * 8 * 2 * 7168 * 2 / 63e9)


def test_flex_dispatchers_run_over_etp_x_ep_and_drop_the_expert_tp_pair(explain):
    """Qwen3-30B-A3B on 8 H100s, tp 2, etp 2, ep 4: under DeepEP and Hybrid-EP no expert-TP
    all-gather / reduce-scatter (the TP time is etp 1's: the attention's TP pairs alone), the
    alltoall dispatcher keeps its pair (more TP time); the DeepEP group is 8 ranks on NVLink,
    and at ep 1 (etp 2) the flex dispatcher still runs over the 2 expert-TP ranks."""
    job = dict(model="qwen3-30b-a3b", gpus=8, tp=2, ep=4, micro_batch=1, global_batch=64, seq_len=4096)
    tp1 = {d: explain(**job, etp=1, moe_dispatcher=d)[3]["time"]["tp_comm_s"] for d in ("alltoall", "deepep")}
    for d in ("deepep", "hybridep"):
        js = explain(**job, etp=2, moe_dispatcher=d)[3]
        assert js["time"]["tp_comm_s"] == pytest.approx(tp1["deepep"], rel=1e-12)
        assert js["moe"]["ep_tier"] == "NVLink"
    assert explain(**job, etp=2, moe_dispatcher="alltoall")[3]["time"]["tp_comm_s"] > 2 * tp1["alltoall"]
    one = explain(**{**job, "ep": 1}, etp=2, moe_dispatcher="deepep")[3]
    assert one["time"]["ep_comm_s"] > 0.0 and one["moe"]["ep_tier"] == "NVLink"
