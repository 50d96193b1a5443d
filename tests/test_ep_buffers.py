"""The MoE dispatchers' communication buffers (planner/ep_buffers.py), by hand from DeepEP's and
Hybrid-EP's code (deepseek-ai/DeepEP @94a9f8f, hybrid-ep branch) as Megatron-Core @d98e8a64
sizes them (fused_a2a.py get_buffer, init_hybrid_ep_buffer).

DeepEP normal mode, 20 SMs (C = 10 channels), hidden_bytes 2h, per received token 2h + 8
(SourceMeta) + 128 x 8 (int64 top-k indices) + 128 x 4 (top-k weights) + 128 x 4 (scales):
  NVLink ceil128(C n_nvl (2 n_rdma + 3) 4 + C n_nvl R_nvl (2h + 2,056)) + 160 B + 32 MiB
  RDMA   ceil128(C n_rdma 144 + 2 C n_rdma R_rdma (2h + 2,072)), only past 8 ranks."""

from __future__ import annotations

import numpy as np
import pytest

from planner import ep_buffers as eb

MiB = 2**20


def test_deepep_deepseek_v3_ep64_across_8_nodes():
    """DeepSeek-V3 (h 7168), EP 64 = 8 DeepEP nodes of 8: R_nvl 288 (both configs at 64), R_rdma
    140 (dispatch send 28, combine send 20: 128 aligned up to either is 140).
    NVLink 10 x 8 x 19 x 4 = 6,080 + 10 x 8 x 288 x 16,392 = 377,671,680 -> 377,677,760, ceil128
    377,677,824, + 160 + 33,554,432 = 411,232,416; RDMA 10 x 8 x 144 = 11,520 + 2 x 10 x 8 x 140 x
    16,408 = 367,539,200 -> 367,550,720 (a multiple of 128): 778,783,136 B (742.7 MiB) per GPU."""
    nvl, rdma = eb.deepep_normal(7168, 64)
    assert float(nvl) == 377_677_824 + 160 + 32 * MiB == 411_232_416
    assert float(rdma) == 367_550_720
    assert float(eb.buffer_bytes("deepep", 7168, 64, 4096, 256, 8)) == 778_783_136


def test_deepep_qwen3_30b_ep8_one_node():
    """Qwen3-30B-A3B (h 2048), EP 8 in one node: R_nvl 256; NVLink 10 x 8 x 5 x 4 = 1,600 +
    10 x 8 x 256 x 6,152 = 125,992,960 -> 125,994,560, ceil128 125,994,624, + 160 + 32 MiB =
    159,549,216 B (152.2 MiB); no RDMA buffer (DeepEP's legacy intranode mode), whatever the
    tokens or the experts."""
    nvl, rdma = eb.deepep_normal(2048, 8)
    assert float(nvl) == 125_994_624 + 160 + 32 * MiB == 159_549_216
    assert float(rdma) == 0.0
    for tokens in (1024, 16384):
        assert float(eb.buffer_bytes("deepep", 2048, 8, tokens, 128, 8)) == 159_549_216


def test_deepep_rdma_only_past_eight_ranks_and_config_rows():
    """The RDMA buffer appears at 16 ranks (2 DeepEP nodes; R_nvl 288, R_rdma 140): RDMA
    ceil128(10 x 2 x 144 + 2 x 10 x 2 x 140 x (2h + 2,072)); an EP size the tables lack (48)
    takes the next listed one's (64) chunks; EP 1: nothing (no dispatch)."""
    h = 2048
    _, rdma16 = eb.deepep_normal(h, 16)
    assert float(rdma16) == np.ceil((10 * 2 * 144 + 2 * 10 * 2 * 140 * (2 * h + 2072)) / 128) * 128
    assert float(eb.deepep_normal(h, 4)[1]) == 0.0
    nvl48, _ = eb.deepep_normal(h, 48)
    assert float(nvl48) == np.ceil((10 * 8 * 15 * 4 + 10 * 8 * 288 * (2 * h + 2056)) / 128) * 128 + 160 + 32 * MiB
    assert float(eb.buffer_bytes("deepep", h, 1, 4096, 128, 8)) == 0.0
    assert float(eb.buffer_bytes("alltoall", h, 8, 4096, 128, 8)) == 0.0


def test_deepep_low_latency_deepseeks_decoding_example():
    """get_low_latency_rdma_size_hint(128 tokens, 7168, 256 experts): dispatch message 16 +
    14,336 = 14,352 B, combine 56 x 4 + 14,336 = 14,560 B; sends max(128 x 14,352, 256 x 128 x
    14,560) = 477,102,080, receives 256 x 128 x 14,560 = 477,102,080, signals ceil128(1,024):
    4 x 477,102,080 + 2,048 = 1,908,410,368, rounded past 128: 1,908,410,496; + 32 MiB. It grows
    as experts x tokens: 32 times the tokens, 32 times the buffers."""
    got = eb.deepep_low_latency(7168, 128, 256)
    assert float(got) == 1_908_410_496 + 32 * MiB == 1_941_964_928
    big = eb.buffer_bytes("deepep_ll", 7168, 64, 4096, 256, 8)
    assert float(big) - 32 * MiB == pytest.approx(32 * 4 * 477_102_080, rel=1e-6)


def test_hybridep_one_domain_and_across_domains():
    """Hybrid-EP, bf16, 4,096 tokens a rank. DeepSeek-V3 on GB200 NVL72, EP 64 in one domain
    (4 experts a rank): rows 4,096 x 64 = 262,144 of 2 x 7,168 + 4 x 4 x 64 + 4 x 56 = 15,584 B
    = 4,085,252,096, + the all-gather's routing map 256 x 4,096 x 64 = 67,108,864: 4,152,360,960
    B (3.87 GiB), no RDMA. Qwen3-30B-A3B (h 2048, 128 experts) EP 16 over two 8-GPU nodes: rows
    65,536 x (4,096 + 4 x 8 x 8 + 64) = 289,406,976 + 128 x 4,096 x 16 = 8,388,608 on NVLink;
    RDMA 4,096 x ((4,096 + 512 + 64) + (4,096 + 256 + 64) + 2 x (4,096 + 256)) = 72,876,032."""
    nvl, rdma = eb.hybridep(7168, 64, 4096, 256, 64)
    assert (float(nvl), float(rdma)) == (4_152_360_960, 0.0)
    nvl, rdma = eb.hybridep(2048, 16, 4096, 128, 8)
    assert (float(nvl), float(rdma)) == (297_795_584, 72_876_032)
    # tokens padded to Megatron's 64-token chunks: 4,000 tokens are sized as 4,032
    assert float(eb.hybridep(2048, 16, 4000, 128, 8)[1]) == 72_876_032 / 4096 * 4032


def test_arrays_broadcast():
    """A search prices many plans at once: EP sizes as an array."""
    got = eb.buffer_bytes("deepep", 7168, np.array([1, 8, 64]), 4096, 256, 8)
    assert got.shape == (3,) and got[0] == 0.0 and got[2] == 778_783_136


def test_expert_tp_sizes_the_buffers_over_etp_x_ep():
    """Megatron's flex dispatcher builds DeepEP's Buffer and Hybrid-EP's over the tp_ep group:
    DeepSeek-V3 etp 2 x ep 32 is DeepEP's 64-rank buffer (778,783,136 B, above), Qwen3-30B-A3B
    etp 2 x ep 4 its 8-rank one (159,549,216 B). Hybrid-EP, Qwen3-30B-A3B etp 2 x ep 4 in one
    8-GPU domain, 2,048 tokens a rank (4,096 / tp 2): 8 ranks, 128 / 4 = 32 local experts, the
    routing map's 2 x 128 = 256 expert columns: 2,048 x 8 = 16,384 rows of 2 x 2,048 + 4 x 32 x 8
    + 4 x 16 = 5,184 B = 84,934,656, + 256 x 2,048 x 8 = 4,194,304: 89,128,960 B."""
    assert float(eb.buffer_bytes("deepep", 7168, 32, 4096, 256, 8, etp=2)) == 778_783_136
    assert float(eb.buffer_bytes("deepep", 2048, 4, 4096, 128, 8, etp=2)) == 159_549_216
    assert float(eb.buffer_bytes("deepep", 2048, 4, 4096, 128, 8)) != 159_549_216  # the 4-rank buffer
    assert float(eb.buffer_bytes("hybridep", 2048, 4, 2048, 128, 8, etp=2)) == 89_128_960
    assert float(eb.buffer_bytes("deepep", 2048, 1, 4096, 128, 8, etp=2)) > 0.0  # ep 1: the 2 expert-TP ranks
