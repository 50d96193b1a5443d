"""Tests of planner/comm.py (collective alpha-beta costs, placement) and `planner collective`.

Expected values are derived by hand in the comments, or are the seed chapter's printed
figures (sections 2.2, 2.3, 4.2, 6.2-6.3), or published nccl-tests measurements (source
named next to each number; copied here so the tests need nothing outside the repository).
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from planner import comm as c
from planner.cli import app
from planner.errors import PlannerError
from planner.catalog import load_hardware as load_hw
from planner.schema import Fabric, Hardware

GB = 1e9
S141 = 141e9  # the seed's 70B model's BF16 gradients (sec. 2.2)


def make_hw(**over) -> Hardware:
    """H100 SXM node as in the seed (sec. 4.2, 6.2): NVLink 450 GB/s, one 400 Gb/s NIC per GPU,
    8 GPUs per node, Llama 3 pods of 3,072 GPUs at 1:7."""
    d = dict(
        name="h100-test",
        hbm_GB=80,
        hbm_TBps=3.35,
        bf16_TFLOPS=989,
        tdp_W=700,
        gpus_per_node=8,
        nvlink_domain=8,
        nvlink_GBps=450,
        network_Gbps=400,
        fabric=Fabric(pod_gpus=3072, oversubscription=7, sources=["Llama 3 paper sec. 3.3.1"]),
        sources=["test"],
    )
    d.update(over)
    return Hardware(**d)


@pytest.fixture(scope="module")
def h100():
    return c.comm_params(make_hw())


# ----------------------------------------------------------------- seed sec. 2.2
def test_parameter_server_seed_2_2():
    # 8 ranks, 141 GB each: the server receives 7 x 141 = 987 GB ("about 990 GB"), and at
    # 50 GB/s the receiving takes 987/50 = 19.74 s ("about 20 seconds"); it sends as much back.
    r = c.collective_time(c.ALL_REDUCE, S141, 8, 50 * GB, 10e-6, c.PARAMETER_SERVER)
    assert float(r.bytes_received_per_rank) == pytest.approx(987e9, rel=1e-12)
    assert float(r.bytes_sent_per_rank) == pytest.approx(987e9, rel=1e-12)
    assert round(float(r.bytes_received_per_rank) / 1e9, -1) == 990
    assert float(r.bandwidth_s) == pytest.approx(19.74, rel=1e-12)
    assert float(r.rounds) == 2
    assert float(r.latency_s) == pytest.approx(20e-6)
    assert round(float(r.time_s)) == 20
    # 64 ranks push 63 copies through the one link
    r64 = c.collective_time(c.ALL_REDUCE, S141, 64, 50 * GB, 0.0, c.PARAMETER_SERVER)
    assert float(r64.bytes_received_per_rank) == pytest.approx(63 * S141)


# ----------------------------------------------------------------- seed sec. 2.3
def test_ring_sent_factors_seed_2_3():
    # "each sent ... = 1.000 / 1.500 / 1.750 / 1.875 x its gradient" at 2, 4, 8, 16 ranks
    r = c.collective_time(c.ALL_REDUCE, 3.84e6, np.array([2, 4, 8, 16]), 50 * GB, 10e-6)
    np.testing.assert_allclose(r.bytes_sent_per_rank / 3.84e6, [1.0, 1.5, 1.75, 1.875], rtol=1e-12)
    np.testing.assert_allclose(r.bytes_received_per_rank / 3.84e6, [1.0, 1.5, 1.75, 1.875], rtol=1e-12)
    np.testing.assert_array_equal(r.rounds, [2, 6, 14, 30])  # 2(n-1)
    # the seed's script: 3.84 MB per rank -> 3.84, 5.76, 6.72, 7.20 MB sent
    np.testing.assert_allclose(r.bytes_sent_per_rank / 1e6, [3.84, 5.76, 6.72, 7.20], rtol=1e-12)


def test_ring_latency_4096_ranks_seed_2_3():
    # 4,096 ranks, 2(n-1) = 8,190 rounds x 10 us = 81.9 ms ("about 80 ms")
    r = c.collective_time(c.ALL_REDUCE, S141, 4096, 50 * GB, 10e-6, c.RING)
    assert float(r.rounds) == 8190
    assert float(r.latency_s) == pytest.approx(0.0819, rel=1e-12)
    assert abs(float(r.latency_s) - 0.080) < 0.080 * 0.05


def test_141GB_all_reduce_seed_2_3_and_4_2():
    # ~2 x 141 GB per rank: 282/450 = 0.627 s ("about 0.6 s") and 282/50 = 5.64 s ("about 5.6")
    n = 4096
    r = c.collective_time(c.ALL_REDUCE, S141, n, np.array([450, 50]) * GB, 0.0)
    np.testing.assert_allclose(r.bandwidth_s, 2 * (n - 1) / n * S141 / (np.array([450, 50]) * GB), rtol=1e-12)
    assert round(float(r.bandwidth_s[0]), 1) == 0.6
    assert round(float(r.bandwidth_s[1]), 1) == 5.6
    # the seed's n -> infinity limit 2S/B, short by exactly 1/n
    limit = 2 * S141 / (np.array([450, 50]) * GB)
    np.testing.assert_allclose((limit - r.bandwidth_s) / limit, 1.0 / n, rtol=1e-9)


# ------------------------------------------------------------------ nccl-tests
def test_busbw_factors_and_ideal_ring_times():
    # nccl-tests doc/PERFORMANCE.md (planner reference nccl_busbw_factors.yaml):
    #   all-reduce ideal t = (S/B) * 2(n-1)/n, busbw = algbw * 2(n-1)/n
    #   reduce-scatter, all-gather: t = S(n-1)/(nB), busbw = algbw * (n-1)/n (S = total size)
    #   all-to-all (n-1)/n; send-recv factor 1.
    # With alpha = 0 a ring's busbw is the link bandwidth B exactly.
    S, B = 8 * 2**30, 370 * GB
    for n in (2, 3, 8, 64, 1000):
        ar = c.collective_time(c.ALL_REDUCE, S, n, B, 0.0, c.RING)
        assert float(ar.time_s) == pytest.approx(S / B * 2 * (n - 1) / n, rel=1e-12)
        assert float(ar.busbw) == pytest.approx(B, rel=1e-12)
        for op in (c.REDUCE_SCATTER, c.ALL_GATHER):
            r = c.collective_time(op, S, n, B, 0.0, c.RING)
            assert float(r.time_s) == pytest.approx(S * (n - 1) / (n * B), rel=1e-12)
            assert float(r.busbw) == pytest.approx(B, rel=1e-12)
            assert float(r.bytes_sent_per_rank) == pytest.approx(S * (n - 1) / n, rel=1e-12)
        a2a = c.collective_time(c.ALL_TO_ALL, S, n, B, 0.0)
        assert float(a2a.busbw) == pytest.approx(B, rel=1e-12)
        sr = c.collective_time(c.SEND_RECV, S, n, B, 0.0)
        assert float(sr.time_s) == pytest.approx(S / B, rel=1e-12)
        assert float(sr.busbw) == pytest.approx(B, rel=1e-12)
    # with latency: busbw = (S / time) * factor
    r = c.collective_time(c.ALL_REDUCE, 1e6, 8, B, 3.4e-6, c.RING)
    t = 1.75e6 / B + 14 * 3.4e-6
    assert float(r.time_s) == pytest.approx(t, rel=1e-12)
    assert float(r.algbw) == pytest.approx(1e6 / t, rel=1e-12)
    assert float(r.busbw) == pytest.approx(1e6 / t * 1.75, rel=1e-12)
    np.testing.assert_allclose(
        c.busbw_factor([c.ALL_REDUCE, c.REDUCE_SCATTER, c.ALL_GATHER, c.ALL_TO_ALL, c.SEND_RECV], 8),
        [1.75, 0.875, 0.875, 0.875, 1.0],
    )


def test_single_rank_costs_nothing():
    for op, algo in itertools.product(range(5), range(6)):
        r = c.collective_time(op, 1e9, 1, 50 * GB, 10e-6, algo)
        for k, v in r.as_dict().items():
            assert float(v) == (c.SIMPLE if k == "protocol" else 0.0), (op, algo, k)  # the protocol is a code
    r = c.collective_time(c.ALL_REDUCE, 1e9, np.array([1, 2]), 50 * GB, 10e-6)
    assert r.time_s[0] == 0 and r.time_s[1] == pytest.approx(1e9 / (50 * GB) + 2e-5)


def test_tree_hierarchical_and_auto():
    B, a = 47 * GB, 10e-6
    # flat tree (one rank per domain): 2 ceil(log2 4096) = 24 rounds, 2S at 92% of B (NCCL
    # tuning.cc), and NCCL's medium-size correction: 1 MB = 64 B x 2^13.9 -> bucket 13 -> 0.5
    r = c.collective_time(c.ALL_REDUCE, 1e6, 4096, B, a, c.TREE)
    assert float(r.rounds) == 24
    assert float(r.time_s) == pytest.approx(24e-5 + 2e6 / (0.92 * 0.5 * B), rel=1e-12)
    assert float(r.bytes_sent_per_rank) == 2e6
    assert float(c.collective_time(c.ALL_REDUCE, 1e6, 5, B, a, c.TREE).rounds) == 6  # ceil(log2 5) = 3
    # 1 MB over 4,096 ranks: ring 81.9 ms of latency, tree 0.33 ms -> tree; 141 GB: the ring's
    # 2(n-1)/n S / B = 6.00 s + 0.08 s beats the tree's 2S / (0.92 B) = 6.52 s -> ring
    best = c.best_algorithm(c.ALL_REDUCE, np.array([1e6, S141]), 4096, B, a)
    np.testing.assert_array_equal(best, [c.TREE, c.RING])
    # reduce-scatter / all-gather: recursive halving/doubling on request, ring under auto
    rs = c.collective_time(c.REDUCE_SCATTER, 1e6, 4096, B, a, c.TREE)
    assert float(rs.rounds) == 12
    assert float(c.best_algorithm(c.REDUCE_SCATTER, 1e6, 4096, B, a)) == c.RING
    # hierarchical, 2 nodes x 8, 1 GB: local RS and AG 2 x 7/8 GB over 370 GB/s, across nodes a
    # 2-rank ring on 1/8 GB over 47 GB/s: 4.7297 ms + 2.6596 ms = 7.3893 ms;
    # rounds 2*7 + 2*1 = 16; latency 14 x 3.4 us + 2 x 10 us = 67.6 us
    h = c.collective_time(
        c.ALL_REDUCE, 1e9, 16, B, a, c.HIERARCHICAL, local_ranks=8, local_bandwidth=370 * GB, local_latency=3.4e-6
    )
    assert float(h.bandwidth_s) == pytest.approx(2 * 7 / 8 * 1e9 / 370e9 + 2 * 0.5 * 0.125e9 / 47e9, rel=1e-12)
    assert float(h.bandwidth_s) == pytest.approx(7.3893e-3, rel=1e-4)
    assert float(h.rounds) == 16
    assert float(h.latency_s) == pytest.approx(67.6e-6, rel=1e-12)
    assert float(h.bytes_sent_per_rank) == pytest.approx(1.875e9, rel=1e-12)
    # hierarchical degenerates to a ring: all ranks local, or one per domain
    ring_local = c.collective_time(c.ALL_REDUCE, 1e9, 8, 370 * GB, 3.4e-6, c.RING)
    h8 = c.collective_time(c.ALL_REDUCE, 1e9, 8, B, a, c.HIERARCHICAL, local_ranks=8, local_bandwidth=370 * GB, local_latency=3.4e-6)
    assert float(h8.time_s) == pytest.approx(float(ring_local.time_s), rel=1e-12)
    h1 = c.collective_time(c.ALL_REDUCE, 1e9, 64, B, a, c.HIERARCHICAL, local_ranks=1, local_bandwidth=370 * GB)
    assert float(h1.time_s) == pytest.approx(float(c.collective_time(c.ALL_REDUCE, 1e9, 64, B, a).time_s), rel=1e-12)


# ------------------------------------------------------ NCCL's multi-node algorithms
def test_tree_across_domains_by_hand():
    """NCCL's tree [tuning.cc v2.20.3]: chains inside the domains, a double binary tree across.
    2 x 8 A100 on 4 x 100G EFA per node: B_nv 240 GB/s, B_x = 50 Gb/s x 0.94 = 5.875 GB/s per GPU,
    NCCL's 28 us per tree hop."""
    S, Bnv, Bx, hop = 2 * 2**30, 240 * GB, 5.875 * GB, 28e-6
    kw = dict(local_ranks=8, local_bandwidth=Bnv, local_latency=3.4e-6, inter_bandwidth=Bx,
              inter_latency=10e-6, tree_latency=hop)
    # N = 2 domains: each domain is the root of one tree and a leaf of the other, so it sends S
    # and receives S over its 8 NICs: S / (8 x 5.875) = S / 47 GB/s; the chain needs 2S / 240
    # = S / 120 GB/s -> the network binds. 2 GiB is past NCCL's correction (>= 512 MiB):
    # 2147483648 / (0.92 x 47e9) = 49.664 ms; latency 2 x (7 + 1) hops x 28 us = 448 us
    r = c.collective_time(c.ALL_REDUCE, S, 16, 999 * GB, 1e-3, c.TREE, **kw)
    assert float(r.bandwidth_s) == pytest.approx(S / (0.92 * 47e9), rel=1e-12)
    assert float(r.bandwidth_s) == pytest.approx(49.664e-3, rel=1e-4)
    assert float(r.latency_s) == pytest.approx(448e-6, rel=1e-12) and float(r.rounds) == 16
    # busbw 2 GiB / 50.112 ms x 1.875 = 80.35 GB/s: above the 47 GB/s any ring can draw from
    # the 4 NICs, as the AWS p4de log (78.3 GB/s) shows
    assert float(r.busbw) == pytest.approx(80.35e9, rel=1e-3)
    # N = 4: interior nodes move 2S each way -> 2S / 47 GB/s; one more level: 2 x (7 + 2) x 28 us
    r4 = c.collective_time(c.ALL_REDUCE, S, 32, 999 * GB, 1e-3, c.TREE, **kw)
    assert float(r4.bandwidth_s) == pytest.approx(2 * S / (0.92 * 47e9), rel=1e-12)
    assert float(r4.latency_s) == pytest.approx(504e-6, rel=1e-12)
    # 64 MiB = 64 B x 2^20: NCCL's correction bucket 20 -> 0.8
    r64 = c.collective_time(c.ALL_REDUCE, 2**26, 16, 999 * GB, 1e-3, c.TREE, **kw)
    assert float(r64.bandwidth_s) == pytest.approx(2**26 / (0.92 * 0.8 * 47e9), rel=1e-12)
    # 8 ranks in one domain: the chain binds, 2S / (0.92 B_nv); 2 x 7 hops
    r1 = c.collective_time(c.ALL_REDUCE, S, 8, 999 * GB, 1e-3, c.TREE, **kw)
    assert float(r1.bandwidth_s) == pytest.approx(2 * S / (0.92 * Bnv), rel=1e-12)
    assert float(r1.latency_s) == pytest.approx(14 * hop, rel=1e-12)


def test_nvls_tree_by_hand():
    """NVLS inside each 8-GPU H100 node (274.3 GB/s algbw), a tree across nodes on the reduced
    data, each GPU's 47 GB/s NIC carrying a 1/8 shard [tuning.cc v2.20.3: min(bwIntra,
    nNodes <= 2 ? bwInter : bwInter / 2)]."""
    S, Bv, Bx = 8 * 2**30, 480e9 / 1.75, 47 * GB
    kw = dict(local_ranks=8, local_bandwidth=370 * GB, inter_bandwidth=Bx, inter_latency=10e-6, nvls_bandwidth=Bv)
    # 2 nodes: network S / (8 x 47) = S / 376 GB/s, NVLS S / 274.3 -> NVLS binds; latency
    # 23 us (NVLS) + 2 x 1 level x 10 us = 43 us. busbw 8 GiB / 31.36 ms x 1.875 = 513.6 GB/s
    r = c.collective_time(c.ALL_REDUCE, S, 16, 370 * GB, 4e-6, c.NVLS_TREE, **kw)
    assert float(r.bandwidth_s) == pytest.approx(S / Bv, rel=1e-12)
    assert float(r.latency_s) == pytest.approx(43e-6, rel=1e-12)
    assert float(r.busbw) / GB == pytest.approx(513.6, abs=0.1)
    assert float(r.bytes_sent_per_rank) == pytest.approx(S + S / 8, rel=1e-12)
    # 4 nodes: 2S / 376 GB/s = S / 188 > S / 274.3 -> the network binds; 2 levels: 23 + 40 us
    r4 = c.collective_time(c.ALL_REDUCE, S, 32, 370 * GB, 4e-6, c.NVLS_TREE, **kw)
    assert float(r4.bandwidth_s) == pytest.approx(2 * S / (8 * Bx), rel=1e-12)
    assert float(r4.latency_s) == pytest.approx(63e-6, rel=1e-12)
    # one domain: NVLS-tree is NVLS
    r1 = c.collective_time(c.ALL_REDUCE, S, 8, 370 * GB, 4e-6, c.NVLS_TREE, **kw)
    nv = c.collective_time(c.ALL_REDUCE, S, 8, 370 * GB, 4e-6, c.NVLS, nvls_bandwidth=Bv)
    assert float(r1.time_s) == pytest.approx(float(nv.time_s), rel=1e-12)


def test_collnet_by_hand():
    """IB SHARP: the switches reduce, so a domain sends S and receives S whatever the node count."""
    S, Bv, Bx = 8 * 2**30, 480e9 / 1.75, 47 * GB
    # NVLS + SHARP (H100): max(S / 274.3, S / (8 x 47)) = S / 274.3 GB/s for 2 or 64 nodes;
    # latency 23 us + 2 x 10 us
    kw = dict(local_ranks=8, local_bandwidth=370 * GB, inter_bandwidth=Bx, inter_latency=10e-6,
              nvls_bandwidth=Bv, collnet_nvls=True)
    for n in (16, 512):
        r = c.collective_time(c.ALL_REDUCE, S, n, 370 * GB, 4e-6, c.COLLNET, **kw)
        assert float(r.bandwidth_s) == pytest.approx(S / Bv, rel=1e-12)
        assert float(r.latency_s) == pytest.approx(43e-6, rel=1e-12)
    # CollNet-direct (A100, 2 GPUs per 200G NIC): reduce-scatter + all-gather to the heads over
    # NVLink 2 x 7/8 S / 240 GB/s = S / 137.1; network S / (8 x 11.75) x (2 + 1)/2 = S / 62.7
    # -> the network binds; latency 2 x 7 x 3.4 us + 2 x 10 us = 67.6 us
    kw = dict(local_ranks=8, local_bandwidth=240 * GB, local_latency=3.4e-6, inter_bandwidth=11.75 * GB,
              inter_latency=10e-6, collnet_nvls=False, gpus_per_nic=2)
    r = c.collective_time(c.ALL_REDUCE, S, 64, 240 * GB, 4e-6, c.COLLNET, **kw)
    assert float(r.bandwidth_s) == pytest.approx(S / (8 * 11.75e9) * 1.5, rel=1e-12)
    assert float(r.latency_s) == pytest.approx(67.6e-6, rel=1e-12)


def test_pat_by_hand_and_its_crossover_with_the_ring():
    """PAT [NCCL >= 2.23 tuning.cc]: 75% of the ring's bandwidth, latency 8 us + log2(n) x 4 us
    + 2.8 us x n. All-gather over 64 nodes, one GPU each, 47 GB/s, 10 us a ring step."""
    B, a, n = 47 * GB, 10e-6, 64
    S = 32 * 2**20
    r = c.collective_time(c.ALL_GATHER, S, n, B, a, c.PAT)
    assert float(r.latency_s) == pytest.approx(8e-6 + 6 * 4e-6 + 64 * 2.8e-6, rel=1e-12)  # 211.2 us
    assert float(r.bandwidth_s) == pytest.approx(63 / 64 * S / (0.75 * B), rel=1e-12)
    # the ring pays 63 x 10 us = 630 us; PAT saves 418.8 us of latency and loses 1/3 of X / B
    # on X = 63/64 S: equal at X = 3 x 418.8 us x 47 GB/s = 59.05 MB, S = 59.99 MB
    sizes = np.array([32 * 2**20, 56e6, 64e6, 128 * 2**20])
    best = c.best_algorithm(c.ALL_GATHER, sizes, n, B, a, pat_ok=True)
    np.testing.assert_array_equal(best, [c.PAT, c.PAT, c.RING, c.RING])
    # without one GPU per node NCCL has no PAT
    assert np.all(c.best_algorithm(c.ALL_GATHER, sizes, n, B, a, pat_ok=False) == c.RING)


def test_auto_picks_what_exists_where_the_group_lands():
    h100 = c.comm_params(load_hw("h100-sxm"))
    GiB = 2**30
    # 2 x 8 H100: NVLS-tree at 8 GiB (273.9 GB/s algbw vs the ring's 370 / 1.875 = 197)
    cost, link, algo = c.group_collective(c.ALL_REDUCE, 8 * GiB, 16, 1, h100)
    assert int(algo) == c.NVLS_TREE and int(link.local_ranks) == 8
    # named where it does not exist: +inf (NVLS across nodes; NVLS-tree with one GPU per node;
    # CollNet without SHARP; PAT with 8 GPUs per node)
    for algo_, n, stride in ((c.NVLS, 16, 1), (c.NVLS_TREE, 16, 8), (c.COLLNET, 16, 1)):
        cost, _, _ = c.group_collective(c.ALL_REDUCE, GiB, n, stride, h100, algo_)
        assert math.isinf(float(cost.time_s)), (algo_, n, stride)
    cost, _, _ = c.group_collective(c.ALL_GATHER, GiB, 16, 1, h100, c.PAT)
    assert math.isinf(float(cost.time_s))
    # one GPU per node (stride 8): PAT for small all-gathers, the ring for large ones
    _, _, small = c.group_collective(c.ALL_GATHER, 2**20, 64, 8, h100)
    _, _, large = c.group_collective(c.ALL_GATHER, 4 * GiB, 64, 8, h100)
    assert (int(small), int(large)) == (c.PAT, c.RING)
    # the same cluster with SHARP: at 8 nodes NVLS-tree is network bound (2S / 376 GB/s) while
    # NVLS + SHARP keeps S / 274.3 GB/s -> CollNet
    sharp = c.comm_params(load_hw("h100-sxm"), sharp=True)
    cost, _, algo = c.group_collective(c.ALL_REDUCE, 8 * GiB, 64, 1, sharp)
    assert int(algo) == c.COLLNET
    assert float(cost.busbw) / GB == pytest.approx(8 * GiB / (8 * GiB / (480e9 / 1.75) + 43e-6) * 2 * 63 / 64 / GB, rel=1e-9)
    _, _, algo = c.group_collective(c.ALL_REDUCE, 8 * GiB, 64, 1, h100)
    assert int(algo) in (c.RING, c.NVLS_TREE)
    # crossover by size on 2 x 8 A100 (no NVLS): the ring below, the tree above the point
    # where the tree's 448 us of hops are paid back by its 2x network bandwidth
    a100 = c.comm_params(load_hw("a100-sxm-80gb"))
    cost, _, algos = c.group_collective(c.ALL_REDUCE, np.array([2**20, 8 * GiB]), 16, 1, a100)
    np.testing.assert_array_equal(algos, [c.RING, c.TREE])
    # across the two domains Simple alone, whatever NCCL's default protocols (comm.py [19])
    np.testing.assert_array_equal(cost.protocol, [c.SIMPLE, c.SIMPLE])


# Multi-node nccl-tests logs (tests/data/nccl_logs, sources in their first lines) against the
# model WITHOUT calibration, on the catalog entry of their GPU. The AWS p4de cluster differs
# from hardware_db's A100 node (4 x 100G EFA per node instead of 8 x 200G HDR), so the test
# describes it as a user would, with the fabric fields: tests/data/hardware/aws-p4de.yaml
# (network_Gbps 50, rails 4, sharp false). Options: only what each log does not say.
# (log, hardware, options, median |err|, max |err|, signed median at >= 64 MiB,
#  median |err| at >= 4 GiB or None, algorithm `auto` picks, the least max |err| any model of
#  NCCL's form / any monotone model could reach on the same points: calibrate.nccl's
#  nccl_form_bound / monotone_bound)
MULTI_NODE_LOGS = [
    ("a100_16gpu_2node_allreduce_aws-p4de-efa.txt", "tests/data/hardware/aws-p4de.yaml", dict(nodes=2),
     0.031, 0.109, +0.031, None, {"tree"}, 0.038, 0.002),
    ("b200_16gpu_2node_allgather_google-dranet.txt", "b200", dict(collective="all_gather"),
     0.917, 6.030, +0.917, 0.435, {"ring"}, 0.182, 0.071),
    ("h100_16gpu_2node_allreduce_dgx06-dgx07.txt", "h100-sxm", dict(),
     0.439, 7.771, +0.439, 0.106, {"nvls-tree"}, 0.265, 0.219),
    ("gb200_72gpu_nvl72_allreduce_coreweave.txt", "gb200-nvl72", dict(nodes=18),
     0.228, 0.605, +0.228, 0.125, {"nvls"}, 0.031, 0.031),
]


@pytest.mark.parametrize("log, hw, opts, med, mx, signed, plateau, algos, form, monotone", MULTI_NODE_LOGS,
                         ids=[r[0] for r in MULTI_NODE_LOGS])
def test_multi_node_reference_logs_uncalibrated(log, hw, opts, med, mx, signed, plateau, algos, form, monotone):
    """The uncalibrated busbw against every multi-node reference log at sizes >= 64 MiB
    (both placements; figures in the README). Goal of issue 11: every point within 15 %,
    median within 10 %. Met on the A100 EFA log (NCCL's tree: 2 nodes send S each way through
    their NICs, 448 us of tree hops, NCCL's medium-size correction). Cannot be met on the H100
    log by any model in which more bytes never take less time (21.9 % at best: its 64 MiB row
    takes 2,523 us, its 128 MiB row 1,616 us), nor on the B200 log by any model of NCCL's form
    (18.2 % at best, whatever its figures). Attainable on the GB200 rack (3.1 %) but not met.
    What the model lacks:
    - every log but A100's shows 0.6-1.4 ms of fixed time in its bulk regime (`calibrate nccl`
      fits alpha = 1,442 us on the H100 log, 1,342 us on B200's, 610 us on GB200's) that
      neither NCCL's tuning model nor this one has: the model is too fast below ~2 GiB;
    - at >= 4 GiB the H100 log is 10.6 % and the GB200 rack 12.5 % under the model (NVLS
      algbw 274 and 479 GB/s measured on 8 GPUs vs 252 and 423 here);
    - the B200 all-gather plateaus at 260 GB/s, 65 % of its nodes' 8 x 400G NICs, where a
      ring draws 376 GB/s from them: nothing in the model or the catalog explains the 35 %."""
    from pathlib import Path

    from planner.calibrate.nccl import calibrate_logs, compare_to_model

    root = Path(__file__).parent.parent
    hardware = load_hw(str(root / hw) if hw.endswith(".yaml") else hw)
    cal = calibrate_logs([root / "tests/data/nccl_logs" / log], hardware=hardware, **opts)
    (check,) = compare_to_model(cal, hardware)
    assert check.skipped is None and min(check.sizes) >= 64 * 2**20
    assert (check.median_abs_err, check.max_abs_err, check.median_err) == pytest.approx((med, mx, signed), abs=5e-4)
    assert set(check.algorithms) == algos
    big = np.abs(check.errors[np.asarray(check.sizes) >= 4 * 2**30])
    if plateau is None:
        assert big.size == 0
    else:
        assert float(np.median(big)) == pytest.approx(plateau, abs=5e-4)
    # what the log lets any model reach: no model of NCCL's form (the fastest of latency +
    # size / bandwidth algorithms, with any figures, even fitted to the log) comes within 15 %
    # of every point of the B200 or H100 log, and no model at all of the H100 log (its 64 MiB
    # row is slower than its 128 MiB row): there the goal cannot be met
    assert check.nccl_form == pytest.approx(form, abs=5e-4)
    assert check.monotone[0] == pytest.approx(monotone, abs=5e-4)
    assert check.max_abs_err >= check.nccl_form  # a bound no model beats, this one included
    if log.startswith("a100"):
        assert check.max_abs_err <= 0.15 and check.median_abs_err <= 0.10  # the goal


def test_unsupported_pairs_cost_infinity():
    assert bool(c.supported(c.ALL_REDUCE, c.NVLS))
    assert not bool(c.supported(c.ALL_GATHER, c.NVLS))
    assert not bool(c.supported(c.ALL_TO_ALL, c.RING))
    assert not bool(c.supported(c.SEND_RECV, c.TREE))
    r = c.collective_time(c.ALL_GATHER, 1e9, 8, 50 * GB, 1e-5, c.PARAMETER_SERVER)
    assert math.isinf(float(r.time_s)) and math.isnan(float(r.bytes_sent_per_rank))
    with pytest.raises(PlannerError):
        c.collective_time(7, 1e9, 8, 50 * GB, 1e-5)
    with pytest.raises(PlannerError):
        c.collective_time(c.ALL_REDUCE, 1e9, 0, 50 * GB, 1e-5)
    with pytest.raises(PlannerError):
        c.collective_time(c.ALL_REDUCE, 1e9, 8, 0.0, 1e-5)


def test_scalar_and_array_agree():
    rng = np.random.default_rng(0)
    ops, algos = np.meshgrid(np.arange(5), np.arange(6), indexing="ij")
    ops, algos = ops.ravel(), algos.ravel()
    k = ops.size
    sizes = rng.uniform(1e3, 2e11, k)
    ranks = rng.integers(1, 5000, k)
    bw = rng.uniform(10e9, 500e9, k)
    lat = rng.uniform(0, 2e-5, k)
    local = rng.integers(1, 9, k)
    arr = c.collective_time(ops, sizes, ranks, bw, lat, algos, local_ranks=local, local_bandwidth=370 * GB, local_latency=3.4e-6)
    for i in range(k):
        one = c.collective_time(
            int(ops[i]), float(sizes[i]), int(ranks[i]), float(bw[i]), float(lat[i]), int(algos[i]),
            local_ranks=int(local[i]), local_bandwidth=370 * GB, local_latency=3.4e-6,
        )
        for name, v in one.as_dict().items():
            np.testing.assert_equal(float(v), float(arr.as_dict()[name][i]), err_msg=f"{name} at {i}")
        assert np.ndim(one.time_s) == 0


# --------------------------------------------------------- published measurements
def test_nvls_against_published_h100_runs():
    # NVLS algbw = 0.741 x the ring's 370 GB/s = 274.3 GB/s at any n (derived from 480 busbw on
    # 8 H100s, nccl-tests#212). Independent checks:
    # (1) AWS p5 8 x H100 all_reduce_perf, 16 GiB, out-of-place 62,239 us, busbw 483.05
    #     (awsome-distributed-training micro-benchmarks/nccl-tests/aws-batch/README.md, 7217859)
    S = 17179869184
    r = c.collective_time(c.ALL_REDUCE, S, 8, 370 * GB, 3.4e-6, c.NVLS)
    assert float(r.time_s) == pytest.approx(62239e-6, rel=0.03)
    assert float(r.busbw) == pytest.approx(483.05e9, rel=0.03)
    # (2) nccl#1455: NVLS busbw 420 / 440 / 460 GB/s on 5 / 6 / 7 H100s
    rn = c.collective_time(c.ALL_REDUCE, 8 * 2**30, np.array([5, 6, 7]), 370 * GB, 3.4e-6, c.NVLS)
    np.testing.assert_allclose(rn.busbw / GB, [420, 440, 460], rtol=0.05)


def test_ring_against_published_runs(h100):
    # nccl#1047: 8 x H100 reduce_scatter_perf, ring, 8 GiB total: 20,754 us (busbw 362.16)
    S = 8589934592
    r = c.collective_time(c.REDUCE_SCATTER, S, 8, h100.nvlink_bandwidth, h100.nvlink_latency, c.RING)
    # 7/8 x S / 370 GB/s + 7 x 3.4 us = 20.338 ms
    assert float(r.time_s) == pytest.approx(20.338e-3, rel=1e-4)
    assert float(r.time_s) == pytest.approx(20754e-6, rel=0.05)
    # stas00/ml-engineering network/README.md: 8 x A100 all_reduce_perf 16 GiB, 127,997 us, busbw
    # 234.89. The H100-derived 370/450 efficiency applied to NVLink 3's 300 GB/s gives 246.7 GB/s:
    # the cross-generation assumption is within 6% here.
    a100 = c.comm_params(make_hw(name="a100-test", nvlink_GBps=300, network_Gbps=200))
    ra = c.collective_time(c.ALL_REDUCE, 17179869184, 8, a100.nvlink_bandwidth, a100.nvlink_latency, c.RING)
    assert float(ra.time_s) == pytest.approx(127997e-6, rel=0.06)


# --------------------------------------------------------------------- placement
def test_comm_params_from_hardware(h100):
    assert h100.nvlink_bandwidth == pytest.approx(370 * GB)  # 450 x 370/450
    assert h100.network_bandwidth == pytest.approx(47 * GB)  # 400 Gb/s = 50 GB/s x 0.94
    assert h100.nvlink_latency == 3.4e-6 and h100.network_latency == 10e-6
    raw = c.comm_params(make_hw(), nvlink_efficiency=1.0, network_efficiency=1.0)
    assert raw.nvlink_bandwidth == 450 * GB and raw.network_bandwidth == 50 * GB
    with pytest.raises(PlannerError):
        c.comm_params(make_hw(), network_efficiency=1.5)


def test_axis_strides():
    s = c.axis_strides(tp=8, cp=2, pp=4, dp=16)
    assert {k: int(v) for k, v in s.items()} == {"tp": 1, "cp": 8, "pp": 16, "dp": 64}
    s = c.axis_strides("dp-pp-cp-tp", tp=8, cp=2, pp=4, dp=16)
    assert {k: int(v) for k, v in s.items()} == {"dp": 1, "pp": 16, "cp": 64, "tp": 128}
    s = c.axis_strides(tp=np.array([8, 4]), cp=1, pp=np.array([2, 4]), dp=8)
    np.testing.assert_array_equal(s["dp"], [16, 16])
    np.testing.assert_array_equal(s["pp"], [8, 4])
    for bad in ("tp-pp-dp", "tp-cp-pp-xp", "tp-tp-pp-dp"):
        with pytest.raises(PlannerError):
            c.parse_order(bad)


def test_group_link_seed_6_3(h100):
    # TP 8 inside a node: NVLink
    tp = c.group_link(8, 1, h100)
    assert int(tp.link) == c.LINK_NVLINK
    assert float(tp.bandwidth) == pytest.approx(370 * GB) and float(tp.latency) == 3.4e-6
    # TP 8 x FSDP 512 (seed sec. 6.3): the DP groups have stride 8 and span 4,096 GPUs > 3,072
    stride = int(c.axis_strides(tp=8, dp=512)["dp"])
    assert stride == 8
    dp = c.group_link(512, stride, h100)
    assert int(dp.link) == c.LINK_CROSS_POD and bool(dp.crosses_pod)
    assert int(dp.local_ranks) == 1 and int(dp.domains) == 512 and int(dp.pods) == 2
    # a ring with gcd(4096, 3072)/8 = 128 >= 7 members per pod keeps the per-GPU NIC rate
    assert float(dp.bandwidth) == pytest.approx(47 * GB)
    assert float(dp.latency) == pytest.approx(10e-6)
    # worst case: all of it crosses the 1:7 layer
    worst = c.group_link(512, 8, h100, worst_case_pods=True)
    assert float(worst.bandwidth) == pytest.approx(47 * GB / 7)
    # 256 nodes (2,048 GPUs) stay in one pod...
    dp256 = c.group_link(256, 8, h100)
    assert int(dp256.link) == c.LINK_NETWORK and float(dp256.bandwidth) == pytest.approx(47 * GB)
    # ...unless the job is larger: the second block straddles the 3,072 boundary
    assert int(c.group_link(256, 8, h100, job_gpus=4096).link) == c.LINK_CROSS_POD
    # HSDP (seed sec. 6.3): the all-reduce between 2 replicas of 2,048 GPUs has one member per
    # pod and pays the full 1:7
    hsdp = c.group_link(2, 2048, h100)
    assert int(hsdp.link) == c.LINK_CROSS_POD
    assert float(hsdp.bandwidth) == pytest.approx(47 * GB / 7)
    assert float(hsdp.inter_bandwidth) == pytest.approx(47 * GB / 7)


def test_group_link_multi_node_groups(h100):
    # TP 16 over two 8-GPU nodes: 8 members per node, NCCL's channels use all 8 NICs:
    # min(370, 8 x 47 = 376) = 370 GB/s; latency 1/8 x 10 + 7/8 x 3.4 = 4.225 us
    g = c.group_link(16, 1, h100)
    assert int(g.link) == c.LINK_NETWORK and int(g.local_ranks) == 8 and int(g.domains) == 2
    assert float(g.bandwidth) == pytest.approx(370 * GB)
    assert float(g.latency) == pytest.approx(4.225e-6)
    # CP 2 over TP 4 (stride 4, span 8): one node, NVLink
    assert int(c.group_link(2, 4, h100).link) == c.LINK_NVLINK
    # all-to-all over 16: 8 of 15 peers are off-node: 47 x 15/8 = 88.125 GB/s
    a2a = c.group_link(16, 1, h100, pattern=c.PATTERN_ALL_PAIRS)
    assert float(a2a.bandwidth) == pytest.approx(88.125 * GB)
    assert float(a2a.latency) == pytest.approx(8 / 15 * 10e-6 + 7 / 15 * 3.4e-6)
    # TP 3 fits one node only if the job is 3 GPUs; in a 24-GPU job a group straddles nodes
    assert int(c.group_link(3, 1, h100).link) == c.LINK_NVLINK
    t3 = c.group_link(3, 1, h100, job_gpus=24)
    assert int(t3.link) == c.LINK_NETWORK and float(t3.bandwidth) == pytest.approx(47 * GB)
    # GB200 NVL72: 4 GPUs per tray but a 72-GPU NVLink domain
    nvl72 = c.comm_params(make_hw(gpus_per_node=4, nvlink_domain=72, nvlink_GBps=900))
    assert int(c.group_link(64, 1, nvl72).link) == c.LINK_NVLINK
    assert float(c.group_link(64, 1, nvl72).bandwidth) == pytest.approx(740 * GB)
    # in a 144-GPU job a 64-block straddles racks: gcd(64, 72) = 8 members per piece,
    # min(740, 8 x 47) = 376 GB/s
    g72 = c.group_link(64, 1, nvl72, job_gpus=144)
    assert int(g72.link) == c.LINK_NETWORK and float(g72.bandwidth) == pytest.approx(376 * GB)


def test_group_link_vectorized(h100):
    gs = np.array([1, 8, 16, 512, 2, 3, 64, 256])
    ss = np.array([1, 1, 1, 8, 2048, 1, 8, 8])
    pats = np.array([0, 1, 0, 0, 1, 0, 1, 0])
    arr = c.group_link(gs, ss, h100, pattern=pats, job_gpus=4096)
    for i in range(gs.size):
        one = c.group_link(int(gs[i]), int(ss[i]), h100, pattern=int(pats[i]), job_gpus=4096)
        for f in ("link", "bandwidth", "latency", "local_ranks", "inter_bandwidth", "domains", "pods", "crosses_pod"):
            assert float(getattr(one, f)) == float(getattr(arr, f)[i]), (f, i)


def test_group_collective(h100):
    # TP 8 all-reduce of 1 GB on NVLink: ring 1.75 GB / 370 GB/s + 14 x 3.4 us
    cost, link, algo = c.group_collective(c.ALL_REDUCE, 1e9, 8, 1, h100)
    assert int(algo) == c.RING and int(link.link) == c.LINK_NVLINK
    assert float(cost.time_s) == pytest.approx(1.75e9 / 370e9 + 14 * 3.4e-6, rel=1e-12)
    # with NVLink SHARP: NVLS, 1 GB / 274.3 GB/s + 23 us
    nv = c.comm_params(make_hw(), nvls=True)
    cost, _, algo = c.group_collective(c.ALL_REDUCE, 1e9, 8, 1, nv)
    assert int(algo) == c.NVLS
    assert float(cost.time_s) == pytest.approx(1e9 / (480e9 / 1.75) + 23e-6, rel=1e-12)
    # NVLS is not picked, and costs +inf if named, once the group leaves the NVLink domain
    cost, _, algo = c.group_collective(c.ALL_REDUCE, 1e9, 16, 1, nv)
    assert int(algo) != c.NVLS
    cost, _, _ = c.group_collective(c.ALL_REDUCE, 1e9, 16, 1, nv, c.NVLS)
    assert math.isinf(float(cost.time_s))
    # arrays agree with scalars
    ops = np.array([0, 1, 2, 3, 4, 0])
    gs = np.array([8, 512, 64, 16, 2, 2])
    ss = np.array([1, 8, 8, 1, 8, 2048])
    algos = np.array([c.AUTO, c.RING, c.AUTO, c.AUTO, c.DIRECT, c.PARAMETER_SERVER])
    cost, link, chosen = c.group_collective(ops, 1e8, gs, ss, h100, algos)
    for i in range(ops.size):
        one, _, a1 = c.group_collective(int(ops[i]), 1e8, int(gs[i]), int(ss[i]), h100, int(algos[i]))
        assert int(a1) == int(chosen[i])
        assert float(one.time_s) == pytest.approx(float(cost.time_s[i]), rel=1e-12)


def test_collective_report_errors(h100):
    with pytest.raises(PlannerError, match="ranks"):
        c.collective_report("all-reduce", 1e9, 0, params=h100)
    with pytest.raises(PlannerError, match="unknown --op"):
        c.collective_report("all-reduce-ish", 1e9, 8, params=h100)
    with pytest.raises(PlannerError, match="does not exist"):
        c.collective_report("all-to-all", 1e9, 8, algo="ring", params=h100)
    with pytest.raises(PlannerError, match="hardware"):
        c.collective_report("all-reduce", 1e9, 8, bandwidth=50e9)
    r = c.collective_report("ALL_REDUCE", S141, 4096, bandwidth=50e9, latency=10e-6)
    assert r["algorithm"] == "ring" and r["link"]["name"] == "given"
    assert r["time_s"] == pytest.approx(2 * 4095 / 4096 * S141 / 50e9 + 0.0819, rel=1e-12)


# --------------------------------------------------------------------------- CLI
runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["collective", *[str(a) for a in args]])


def test_cli_seed_ring_figures():
    r = run("--op", "all-reduce", "--size", "141GB", "--ranks", 4096, "--bandwidth", 50, "--latency", 10)
    assert r.exit_code == 0, r.output
    for s in ("8,190", "81.90 ms", "5.639 s", "5.721 s", "281.93 GB", "ring (default)", "as given"):
        assert s in r.stdout, s
    r = run("--op", "all-reduce", "--size", "141GB", "--ranks", 4096, "--bandwidth", 450, "--latency", 0)
    assert "626.51 ms" in r.stdout  # 2 x 4095/4096 x 141 / 450 = 0.62651 s
    assert "x 1.9995" in r.stdout  # busbw factor 2 x 4095/4096
    r = run("--op", "all-reduce", "--size", "3.84MB", "--ranks", 16, "--bandwidth", 50, "--latency", 10)
    assert "7.20 MB = 1.875 x size" in r.stdout


def test_cli_parameter_server_seed_2_2():
    r = run("--op", "all-reduce", "--size", "141GB", "--ranks", 8, "--algo", "parameter-server", "--bandwidth", 50, "--latency", 10)
    assert r.exit_code == 0, r.output
    for s in ("987.00 GB", "7 x size", "19.740 s", "the server"):
        assert s in r.stdout, s


def test_cli_json():
    r = run("--op", "reduce-scatter", "--size", "8GiB", "--ranks", 8, "--bandwidth", 370, "--latency", 0, "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    S = 8 * 2**30
    assert d["op"] == "reduce-scatter" and d["size_bytes"] == S
    assert d["time_s"] == pytest.approx(7 / 8 * S / 370e9, rel=1e-12)
    assert d["busbw_Bps"] == pytest.approx(370e9, rel=1e-12)
    assert d["busbw_factor"] == 0.875


def test_cli_default_hardware():
    # default h100-sxm from hardware_db: 8 ranks on NVLink at 450 x 370/450 = 370 GB/s
    r = run("--op", "all-reduce", "--size", "1GB", "--ranks", 8)
    assert r.exit_code == 0, r.output
    for s in ("NVLink on h100-sxm", "x 0.822", "370.0 GB/s", "3.40 us", "1.75 GB = 1.75 x size"):
        assert s in r.stdout, s
    # one rank per node over 512 nodes: across pods, per-GPU network 47 GB/s
    r = run("--op", "all-gather", "--size", "1GB", "--ranks", 512, "--stride", 8, "-f", "json")
    d = json.loads(r.stdout)
    assert d["link"]["name"] == "network across pods"
    assert d["link"]["bandwidth_Bps"] == pytest.approx(47e9)
    r = run("--op", "all-gather", "--size", "1GB", "--ranks", 512, "--stride", 8, "--worst-case-pods", "-f", "json")
    assert json.loads(r.stdout)["link"]["bandwidth_Bps"] == pytest.approx(47e9 / 7)
    r = run("--op", "all-reduce", "--size", "1GB", "--ranks", 8, "--line-rate", "-f", "json")
    assert json.loads(r.stdout)["link"]["bandwidth_Bps"] == pytest.approx(450e9)


def test_cli_hardware_file(tmp_path):
    # a user YAML: 200 Gb/s NICs -> 25 GB/s x 0.94 = 23.5 GB/s per GPU
    f = tmp_path / "mine.yaml"
    f.write_text(
        "name: mine\nhbm_GB: 80\nhbm_TBps: 2\nbf16_TFLOPS: 312\ntdp_W: 400\ngpus_per_node: 8\n"
        "nvlink_domain: 8\nnvlink_GBps: 300\nnetwork_Gbps: 200\n"
        "fabric: {pod_gpus: 1024, oversubscription: 4, sources: [test]}\nsources: [test]\n"
    )
    r = run("--op", "all-reduce", "--size", "1GB", "--ranks", 4, "--stride", 8, "--hardware", f, "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["link"]["name"] == "network" and d["link"]["bandwidth_Bps"] == pytest.approx(23.5e9)
    # 4 ranks ring: 1.5 GB / 23.5 GB/s + 6 x 10 us
    assert d["time_s"] == pytest.approx(1.5e9 / 23.5e9 + 60e-6, rel=1e-12)
    r = run("--op", "all-reduce", "--size", "1GB", "--ranks", 16, "--algo", "hierarchical", "--hardware", f)
    assert r.exit_code == 0 and "across domains 23.5 GB/s" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 0, "--bandwidth", 50, "--latency", 10),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", -3),
        ("--op", "broadcast-ish", "--size", "1GB", "--ranks", 8),
        ("--op", "all-reduce", "--size", "12 parsecs", "--ranks", 8),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 8, "--algo", "butterfly"),
        ("--op", "all-gather", "--size", "1GB", "--ranks", 8, "--algo", "nvls"),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 16, "--algo", "nvls"),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 16, "--algo", "collnet"),  # no SHARP in the default fabric
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 16, "--algo", "nvls-tree", "--hardware", "a100-sxm-80gb"),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 8, "--algo", "nvls-tree"),  # one NVLink domain
        ("--op", "all-gather", "--size", "1GB", "--ranks", 16, "--algo", "pat"),  # 8 GPUs per node
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 16, "--algo", "pat"),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 8, "--hardware", "no-such-gpu"),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 8, "--stride", 0),
        ("--op", "all-reduce", "--size", "1GB", "--ranks", 8, "--bandwidth", 0, "--latency", 1),
    ],
)
def test_cli_bad_input(args):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error:"), r.stderr
    assert "Traceback" not in r.output
