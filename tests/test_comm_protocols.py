"""NCCL's LL and LL128 protocols in comm.py (module docstring "Protocols", refs [17][18]): hand-derived
times from NVIDIA/nccl src/graph/tuning.cc at v2.20.3-1 (commit b6475625), the pinned Simple path, NCCL_PROTO's
reading, Simple alone across NVLink domains (comm.py [19]), and the per-size errors against the small rows of the nccl-tests logs in tests/data/nccl_logs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planner import comm as c
from planner.catalog import load_hardware as load_hw
from planner.errors import PlannerError

GB = 1e9
H100 = c.comm_params(load_hw("h100-sxm"))  # NVLink 450 GB/s x 370/450 = 370 GB/s, 8 x 400G NICs x 0.94, cc 9.0


def test_h100_params_enable_ll128_and_hopper_ll_cap():
    assert H100.ll128 and H100.ll_max_bandwidth == 87.7e9  # tuning.cc l. 89, 314-317 (case 90)
    b200 = c.comm_params(load_hw("b200"))
    # cc 10.0: v2.25.1-1's `case 100` (comm.py [21]; 2.20.3's untested default would leave it off); llMaxBw stays
    # 2.20.3's Hopper row (compCapIndex HOPPER for cc >= 9.0), not v2.25.1-1's Blackwell 282 GB/s
    assert b200.ll128 and b200.ll_max_bandwidth == 87.7e9
    assert c.ll128_default("8.0") and c.ll128_default("7.0") and not c.ll128_default(None)
    assert c.ll_max_bandwidth("7.0") == 39.0e9  # Volta's N1 row, l. 87


def test_ll128_default_rule_by_release_covering_the_capability():
    """comm.py [21]: each capability takes the LL128 default of the first NCCL release whose rule covers it, read
    from the hardware entry's compute_capability (never its name)."""
    rules = c.LL128_DEFAULT_RULES
    assert {cc: rel for cc, (_, rel, _) in rules.items()} == {
        "7.0": "v2.20.3-1", "8.0": "v2.20.3-1", "9.0": "v2.20.3-1",  # [17] l. 314-317
        "10.0": "v2.25.1-1", "12.0": "v2.25.1-1",  # l. 435-436: case 100, case 120
        "10.3": "v2.27.3-1"}  # l. 463: every capability from 7.0; v2.25.1-1 - v2.26.6-1's default left 10.3 off
    for cc in ("7.0", "8.0", "9.0", "10.0", "10.3", "12.0"):
        assert c.ll128_default(cc)
    for cc in ("7.5", "8.6", "8.9", "11.0", None):  # 2.20.3's `default: pEnable &= 0`, no later row taken
        assert not c.ll128_default(cc)
    for name, cc in (("b200", "10.0"), ("gb200-nvl72", "10.0"), ("gb300-nvl72", "10.3"), ("a100-sxm-80gb", "8.0")):
        hw = load_hw(name)
        assert hw.compute_capability == cc and c.comm_params(hw).ll128


def test_b200_ring_all_reduce_runs_ll128_under_the_blackwell_rule():
    """A 4 MiB all-reduce over one 8-B200 node under NCCL_ALGO=Ring (NVLS, the default's pick, excluded): NVLink
    740 GB/s (900 x 370/450), 2 x 7/8 x 4,194,304 = 7,340,032 B a rank. tuning.cc v2.20.3-1 (l. 57, 67, 181-182):
    ring LL128 14 + 14 steps x 1.9 = 40.6 us + 7,340,032 B / (0.92 x 740 GB/s = 680.8 GB/s) = 10.781 us: 51.381 us;
    ring Simple (the model's) 14 x 3.4 = 47.6 us + 7,340,032 / 740 GB/s = 9.919 us: 57.519 us; ring LL 6.6 + 14 x 0.6 =
    15.0 us + 7,340,032 / min(740 / 4, 87.7) GB/s = 83.695 us: 98.695 us. So LL128 (on at cc 10.0 from v2.25.1-1,
    comm.py [21]); under 2.20.3's rule (off) Simple's 57.519 us. LL128 wins over Simple from 14 x (3.4 - 1.9) = 21 us
    of latency against 7,340,032 x (1/680.8 - 1/740) GB/s^-1 = 0.862 us of bandwidth. Default candidates: NVLS."""
    b200 = c.comm_params(load_hw("b200"))
    ring = c.nccl_algo_candidates("Ring")[c.ALL_REDUCE]
    S, sent = 4.0 * 2**20, 2 * 7 / 8 * 4.0 * 2**20
    cost, link, algo = c.group_collective(c.ALL_REDUCE, S, 8, 1, b200, job_gpus=8, candidates=ring)
    assert float(link.bandwidth) == pytest.approx(740 * GB) and int(link.domains) == 1
    assert int(algo) == c.RING and int(cost.protocol) == c.LL128
    assert float(cost.latency_s) == pytest.approx(40.6e-6, rel=1e-12)
    assert float(cost.bandwidth_s) == pytest.approx(sent / (0.92 * 740e9), rel=1e-12)
    assert float(cost.time_s) == pytest.approx(51.381e-6, abs=1e-9)
    off, _, algo = c.group_collective(c.ALL_REDUCE, S, 8, 1, replace(b200, ll128=False), job_gpus=8, candidates=ring)
    assert int(algo) == c.RING and int(off.protocol) == c.SIMPLE
    assert float(off.time_s) == pytest.approx(47.6e-6 + sent / 740e9, rel=1e-12)
    assert float(off.time_s) == pytest.approx(57.519e-6, abs=1e-9)
    ll = c.collective_time(c.ALL_REDUCE, S, 8, 740 * GB, 3.4e-6, c.RING, local_ranks=8, protocol="LL")
    assert float(ll.time_s) == pytest.approx(15.0e-6 + sent / 87.7e9, rel=1e-12)
    default, _, algo = c.group_collective(c.ALL_REDUCE, S, 8, 1, b200, job_gpus=8)
    assert int(algo) == c.NVLS and int(default.protocol) == c.SIMPLE and float(default.time_s) < float(cost.time_s)


def test_gb200_rack_reduce_scatter_runs_ll128():
    """An 8 MiB reduce-scatter over 16 ranks of one GB200 NVL72 rack (one NCCL node, comm.py [20]), the default
    search: 15 steps. Ring LL128 14 + 15 x 1.9 = 42.5 us + 15/16 x 8,388,608 = 7,864,320 B / 680.8 GB/s = 11.552 us:
    54.052 us; ring Simple 15 x 3.4 = 51 us + 7,864,320 / 740 GB/s = 10.627 us: 61.627 us; ring LL 6.6 + 15 x 0.6 =
    15.6 us + 7,864,320 / 87.7 GB/s = 89.673 us."""
    gb200 = c.comm_params(load_hw("gb200-nvl72"))
    sent = 15 / 16 * 8.0 * 2**20
    cost, link, algo = c.group_collective(c.REDUCE_SCATTER, 8.0 * 2**20, 16, 1, gb200, job_gpus=72)
    assert int(link.domains) == 1 and int(algo) == c.RING and int(cost.protocol) == c.LL128
    assert float(cost.latency_s) == pytest.approx(42.5e-6, rel=1e-12)
    assert float(cost.time_s) == pytest.approx(42.5e-6 + sent / (0.92 * 740e9), rel=1e-12)
    simple, _, _ = c.group_collective(c.REDUCE_SCATTER, 8.0 * 2**20, 16, 1, gb200, job_gpus=72, protocols="Simple")
    assert float(simple.time_s) == pytest.approx(51e-6 + sent / 740e9, rel=1e-12)


def test_12_byte_all_reduce_over_8_nvlink_ranks():
    """Delayed scaling's 12 B amax all-reduce (step.py [34]) over one 8-GPU H100 node.
    Ring LL (tuning.cc l. 57, 67, 232-249): baseLat 6.6 us + 2 (8 - 1) = 14 steps x 0.6 us (NVLink) = 15.0 us;
    bandwidth: the ring moves 2 x 7/8 x 12 = 21 B at min(370 GB/s / 4, llMaxBw 87.7 GB/s) = 87.7 GB/s (l. 181):
    0.239 ns. Tree LL: 6.8 + 2 (7 x 0.6) = 15.2 us; ring LL128: 14 + 14 x 1.9 = 40.6 us; NVLS 23 us (Simple only,
    l. 173). The least: ring LL, 15.0 us + 21 B / 87.7 GB/s (the Simple model's pick was NVLS, 23 us)."""
    cost, _, algo = c.group_collective(c.ALL_REDUCE, 12.0, 8, 1, H100, job_gpus=8)
    assert int(algo) == c.RING and int(cost.protocol) == c.LL
    assert float(cost.latency_s) == pytest.approx(15.0e-6, rel=1e-12)
    assert float(cost.bandwidth_s) == pytest.approx(21.0 / 87.7e9, rel=1e-12)
    # the tree's and LL128's figures, asked for by name
    tree = c.collective_time(c.ALL_REDUCE, 12.0, 8, 370 * GB, 3.4e-6, c.TREE, local_ranks=8, protocol="LL")
    assert float(tree.latency_s) == pytest.approx(15.2e-6, rel=1e-12)
    ll128 = c.collective_time(c.ALL_REDUCE, 12.0, 8, 370 * GB, 3.4e-6, c.RING, local_ranks=8, protocol="LL128")
    assert float(ll128.latency_s) == pytest.approx(40.6e-6, rel=1e-12)
    # Simple pinned (NCCL_PROTO=Simple): the model as before, NVLS 23 us + 12 B / NVLS algbw
    simple, _, algo = c.group_collective(c.ALL_REDUCE, 12.0, 8, 1, H100, job_gpus=8, protocols="Simple")
    assert int(algo) == c.NVLS and int(simple.protocol) == c.SIMPLE
    assert float(simple.time_s) == pytest.approx(23e-6 + 12.0 / H100.nvls_algbw, rel=1e-12)


def test_12_byte_all_reduce_over_2_nodes():
    """The same 12 B all-reduce over 16 ranks on 2 H100 nodes (8 per node, N = 2 domains): a network hop, so Simple
    alone (comm.py [19], LL_NETWORK_PRICED False), whatever NCCL's tuner says. NVLS-tree (Simple): latency the NVLS
    23 us + 2 x log2 2 x 10 us network = 43 us; bandwidth max(12 B / NVLS algbw, 1 x 12 B / (8 x 47 GB/s)) with the
    NVLS algbw 480 / (2 x 7/8) = 274.3 GB/s (NVLS_ALGBW_PER_RING_BUSBW x 370 GB/s): 43.75 ps against 31.9 ps. The same as
    protocols="Simple" (the model before the protocols)."""
    cost, link, algo = c.group_collective(c.ALL_REDUCE, 12.0, 16, 1, H100, job_gpus=16)
    assert int(link.domains) == 2 and int(link.local_ranks) == 8
    assert int(algo) == c.NVLS_TREE and int(cost.protocol) == c.SIMPLE
    assert float(cost.latency_s) == pytest.approx(43e-6, rel=1e-12)
    assert float(cost.bandwidth_s) == pytest.approx(12.0 / (480e9 / 1.75), rel=1e-12)
    simple, _, s_algo = c.group_collective(c.ALL_REDUCE, 12.0, 16, 1, H100, job_gpus=16, protocols="Simple")
    assert int(s_algo) == c.NVLS_TREE and float(simple.time_s) == float(cost.time_s)
    # LL named across domains: still Simple's ring (30 steps at the link's 4.225 us), not NCCL's LL figure
    ring = c.collective_time(c.ALL_REDUCE, 12.0, 16, float(link.bandwidth), float(link.latency), c.RING,
                             **link.algorithm_kwargs(H100), protocol="LL")
    assert int(ring.protocol) == c.SIMPLE and float(ring.latency_s) == pytest.approx(30 * 4.225e-6, rel=1e-12)


def test_nvl72_rack_is_one_nccl_node():
    """GB200 NVL72 (comm.py [20]): NCCL's multi-node NVLink tunes a rack's clique as one node (v2.20.3-1 tuning.cc
    l. 135-136 nNodes = MNNVL ? 1 : nNodes; from v2.21.5-1 the clique's fused topology gives nNodes = 1). A 12 B
    all-reduce over 8 ranks 4 apart (one GPU on each of 8 compute trays of 4, in one 72-GPU rack): N = 1, not the 8
    hosts, so NCCL's LL ring: 6.6 us + 2 (8 - 1) = 14 steps x 0.6 us (NVLink) = 15.0 us; 2 x 7/8 x 12 = 21 B at
    min(740 GB/s / 4, llMaxBw 87.7 GB/s: cc 10.0 takes the Hopper row, compCapIndex >= 90, l. 141) = 87.7 GB/s. Tree
    LL 6.8 + 2 x 7 x 0.6 = 15.2 us, NVLS 23 us; ring LL128 (on at cc 10.0: comm.py [21]) 14 + 14 x 1.9 = 40.6 us.
    Counted as 8 nodes it would be
    Simple (comm.py [19]). A DP pair across two racks (stride 72 in a 144-GPU job): N = 2, Simple's ring, 2 rounds x
    10 us network latency + 12 B at 47 GB/s."""
    gb200 = c.comm_params(load_hw("gb200-nvl72"))
    assert gb200.nvlink_domain == 72 and gb200.ll128 and gb200.ll_max_bandwidth == 87.7e9
    for job in (72, 128):  # one whole rack, or one 64-GPU segment of a two-rack job ([16])
        cost, link, algo = c.group_collective(c.ALL_REDUCE, 12.0, 8, 4, gb200, job_gpus=job)
        assert int(link.domains) == 1 and int(link.local_ranks) == 8 and float(link.bandwidth) == pytest.approx(740 * GB)
        assert int(algo) == c.RING and int(cost.protocol) == c.LL
        assert float(cost.latency_s) == pytest.approx(15.0e-6, rel=1e-12)
        assert float(cost.bandwidth_s) == pytest.approx(21.0 / 87.7e9, rel=1e-12)
    cost, link, algo = c.group_collective(c.ALL_REDUCE, 12.0, 2, 72, gb200, job_gpus=144)
    assert int(link.domains) == 2 and int(algo) == c.RING and int(cost.protocol) == c.SIMPLE
    assert float(cost.latency_s) == pytest.approx(2 * 10e-6, rel=1e-12)
    assert float(cost.bandwidth_s) == pytest.approx(12.0 / 47e9, rel=1e-12)


def test_network_ll_figures_of_nccls_tuner(monkeypatch):
    """NCCL's own LL figures across domains (the evidence of comm.py [19], priced with LL_NETWORK_PRICED set):
    tree LL (l. 57, 67, 75, 251-253): 6.8 us + 2 ((8 - 1) x 0.6 + log2 2 x 5.0) = 25.2 us; bandwidth max(3.8 T,
    2 x 12 B / llMaxBw) with llMaxBw = 39.0 GB/s (two nodes, Intel row, l. 87, 143-146) and T = 2 x 12 B / 370 GB/s /
    0.92 = 70.5 ps: 24 B / 39.0 GB/s = 0.615 ns. Ring LL: 6.6 + 30 steps x (1/8 x 2.7 + 7/8 x max(0.6, 1.0 network
    overhead, l. 242-248)) = 42.975 us."""
    monkeypatch.setattr(c, "LL_NETWORK_PRICED", True)
    cost, link, algo = c.group_collective(c.ALL_REDUCE, 12.0, 16, 1, H100, job_gpus=16)
    assert int(algo) == c.TREE and int(cost.protocol) == c.LL
    assert float(cost.latency_s) == pytest.approx(25.2e-6, rel=1e-12)
    assert float(cost.bandwidth_s) == pytest.approx(24.0 / 39.0e9, rel=1e-12)
    ring = c.collective_time(c.ALL_REDUCE, 12.0, 16, float(link.bandwidth), float(link.latency), c.RING,
                             **link.algorithm_kwargs(H100), protocol="LL")
    assert float(ring.latency_s) == pytest.approx(6.6e-6 + 30 * (2.7e-6 / 8 + 7 / 8 * 1.0e-6), rel=1e-12)


def test_large_messages_stay_simple_and_sizes_vectorise():
    sizes = np.array([12.0, 4096.0, 2.0**20, 2.0**30])
    cost, _, algo = c.group_collective(c.ALL_REDUCE, sizes, 8, 1, H100, job_gpus=8)
    assert int(cost.protocol[-1]) == c.SIMPLE and int(algo[-1]) == c.NVLS
    for i, s in enumerate(sizes):  # elementwise: the same figures one by one
        one, _, a1 = c.group_collective(c.ALL_REDUCE, s, 8, 1, H100, job_gpus=8)
        assert float(one.time_s) == float(cost.time_s[i]) and int(a1) == int(algo[i])
        assert int(one.protocol) == int(cost.protocol[i])
    t = c.auto_collective_times(c.ALL_REDUCE, sizes, np.full(4, 8), np.ones(4, dtype=np.int64), H100, 8)[0]
    np.testing.assert_array_equal(t, cost.time_s)


def test_reduce_scatter_ll_takes_a_third_inside_a_node():
    """Ring LL for reduce-scatter inside one node: busBw / 3 (l. 181); 64 KiB over 8 ranks at 200 GB/s moves
    7/8 x 65536 B at 66.7 GB/s (below llMaxBw 87.7)."""
    r = c.collective_time(c.REDUCE_SCATTER, 65536.0, 8, 200 * GB, 3.4e-6, c.RING, local_ranks=8, protocol="LL")
    assert float(r.bandwidth_s) == pytest.approx(7 / 8 * 65536 / (200e9 / 3), rel=1e-12)
    assert float(r.latency_s) == pytest.approx(6.6e-6 + 7 * 0.6e-6, rel=1e-12)


def test_collective_time_defaults_to_simple_and_pins_fail_where_absent():
    base = c.collective_time(c.ALL_REDUCE, 12.0, 8, 370 * GB, 3.4e-6, c.RING)
    assert int(base.protocol) == c.SIMPLE and float(base.latency_s) == pytest.approx(14 * 3.4e-6, rel=1e-12)
    # NVLS runs Simple only (tuning.cc l. 173): LL pinned, it does not exist
    nv = c.collective_time(c.ALL_REDUCE, 12.0, 8, 370 * GB, 3.4e-6, c.NVLS, protocol="LL")
    assert np.isinf(float(nv.time_s))
    # NCCL_PROTO=LL128 enables LL128 even where the default does not (a B200 under 2.20.3's rule: ll128 off)
    b200 = replace(c.comm_params(load_hw("b200")), ll128=False)
    cost, _, _ = c.group_collective(c.ALL_REDUCE, 2.0**20, 8, 1, b200, job_gpus=8, protocols="LL128")
    assert int(cost.protocol) == c.LL128


def test_nccl_proto_reading():
    AR = c.ALL_REDUCE
    assert c.proto_mask(c.nccl_proto_protocols("Simple")[AR]) == c.PROTO_SIMPLE
    assert c.proto_mask(c.nccl_proto_protocols("ll,LL128")[AR]) == (1 << c.LL) | (1 << c.LL128)
    assert c.proto_mask(c.nccl_proto_protocols("^LL")[AR]) == (1 << c.LL128) | (1 << c.SIMPLE)
    with pytest.raises(PlannerError):
        c.nccl_proto_protocols("LL64")
    with pytest.raises(PlannerError):
        c.nccl_proto_protocols("^LL,LL128,Simple")
    assert c.proto_mask(None) == c.PROTO_DEFAULT and c.proto_mask(["LL", c.SIMPLE]) == 0b101


# Small rows (<= 64 KiB) of the reference logs, the model's time against the measured one (err = model / measured - 1,
# both placements), uncalibrated, placed as calibrate.nccl.compare_to_model places them: (log, hardware, options,
# signed median, median |err|) as the planner prices them: NCCL's LL ring inside one node (Simple alone, before the
# protocols: +0.440 / 0.440); across nodes Simple alone (the same as before; NCCL's tuner figures would give
# -0.846 / 0.846 and -0.371 / 0.371: comm.py [19], docs/nccl_small_sizes.md).
SMALL = [
    ("h100_8gpu_allreduce_aws-p5-batch.txt", "h100-sxm", dict(nodes=1), -0.057, 0.091),
    ("a100_16gpu_2node_allreduce_aws-p4de-efa.txt", "tests/data/hardware/aws-p4de.yaml", dict(nodes=2), -0.230, 0.230),
    ("h100_16gpu_2node_allreduce_dgx06-dgx07.txt", "h100-sxm", dict(), +0.070, 0.093),
]


@pytest.mark.parametrize("log, hw, opts, signed, med", SMALL, ids=[r[0] for r in SMALL])
def test_small_rows_of_reference_logs(log, hw, opts, signed, med):
    from planner.calibrate.nccl import calibrate_logs

    root = Path(__file__).parent.parent
    hardware = load_hw(str(root / hw) if hw.endswith(".yaml") else hw)
    cal = calibrate_logs([root / "tests/data/nccl_logs" / log], hardware=hardware, **opts)
    ((coll, _, n), sws), = cal.groups.items()
    pts = [p for sw in sws for p in sw.points if p.size <= 65536]
    s = np.array([p.size for p in pts], dtype=np.float64)
    t = np.array([p.time for p in pts])
    cost, _, _ = c.group_collective(c.op_code(coll), s, n, 1, c.comm_params(hardware), c.AUTO, job_gpus=n)
    err = cost.time_s / t - 1.0
    assert (float(np.median(err)), float(np.median(np.abs(err)))) == pytest.approx((signed, med), abs=5e-4)


def test_ll128_enable_moves_only_collectives_inside_one_domain():
    """comm.py [23]: NCCL's LL128 default also needs the GPU-to-NIC path (tuning.cc v2.20.3-1 l. 311; PXN / P2C behind
    NCCL_LL128_C2C from v2.27.3-1), which holds inside one node (the NICs trimmed: paths.cc l. 673-675) and which the
    hardware entries cannot express across nodes, where the model prices Simple alone (LL_NETWORK_PRICED False). So
    the enable (`ll128`, from the compute capability only) moves a collective inside one NVLink domain and none
    across. 100 MiB reduce-scatter over 64 GB200 of one rack's segment: LL128 ring, 14 us + 63 x 1.9 us + 63/64 x S /
    (0.92 x 740 GB/s) = 133.7 us + 151.61 us = 285.31 us; with LL128 off Simple's 63 x 3.4 us + 63/64 x S / 740 GB/s
    = 214.2 us + 139.49 us = 353.69 us. Over 128 GPUs (two segments) the same 585.49 us either way."""
    p = c.comm_params(load_hw("gb200-nvl72"))
    assert p.ll128 and p.nvlink_bandwidth == 740e9
    S = 100.0 * 2 ** 20

    def t(n, ll128):
        q = replace(p, ll128=ll128)
        return float(c.auto_collective_times(c.REDUCE_SCATTER, [S], [n], [1], q, n, c.AUTO_CANDIDATES)[0][0])

    assert t(64, True) == pytest.approx(14e-6 + 63 * 1.9e-6 + 63 / 64 * S / (0.92 * 740e9), rel=1e-12)
    assert t(64, True) == pytest.approx(285.31e-6, abs=1e-8)
    assert t(64, False) == pytest.approx(63 * 3.4e-6 + 63 / 64 * S / 740e9, rel=1e-12)
    assert t(64, False) == pytest.approx(353.69e-6, abs=1e-8)
    assert t(128, True) == t(128, False) == pytest.approx(585.49e-6, abs=1e-8)
