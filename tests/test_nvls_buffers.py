"""NCCL's NVLS buffers in the memory model (planner/nvls_buffers.py, memory.py [nv]): a term outside the caching
allocator, per GPU and communicator nvlsChannels x 2 x (128 KiB x 8 steps) x nHeads + a 2 MiB credit granule
(NVIDIA/nccl v2.27.3-1 src/transport/nvls.cc l. 316-342, 403-433), nHeads the communicator's GPUs in the NVLink domain,
none at 2 or fewer (l. 160)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.nvls_buffers import nvls_channels, nvls_comm_bytes

MIB = 2**20


def test_bytes_per_communicator_by_hand():
    """Hopper, 16 channels: 8 local ranks 16 x 2 x 1 MiB x 8 + 2 MiB = 258 MiB; 4 ranks 130 MiB; 2 or 1 ranks none
    (gpuCount <= 2); 64 ranks in one NVL72 domain, Blackwell's 24 channels, heads capped at 32: 24 x 2 x 32 + 2 =
    1,538 MiB; across domains (32 channels) 18 ranks a domain: 32 x 2 x 18 + 2 = 1,154 MiB."""
    got = nvls_comm_bytes(np.array([8, 4, 3, 2, 1]), 16) / MIB
    assert got.tolist() == [258.0, 130.0, 98.0, 0.0, 0.0]
    assert float(nvls_comm_bytes(64, 24)) == 1538 * MIB
    assert float(nvls_comm_bytes(18, 32)) == 1154 * MIB


def test_channels_by_capability():
    """16 below compute capability 10.0 (NVLS_NCHANNELS_SM90); Blackwell 24 inside one domain, 32 across."""
    assert nvls_channels(9.0, np.array([False, True])).tolist() == [16, 16]
    assert nvls_channels(10.0, np.array([False, True])).tolist() == [24, 32]


def test_llama3_8b_tp8_on_8_h100(explain):
    """Llama 3 8B, TP 8 on one 8-GPU H100 node (dp 1): one NVLS communicator, TP's, 258 MiB outside the allocator
    beside the 1 GiB reserve; NCCL_NVLS_ENABLE=0 (job nccl_nvls_enable 0) none; an A100 node (no NVSwitch SHARP)
    none."""
    job = dict(model="llama3-8b", gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=8192)
    m = explain(**job, hardware="h100-sxm")[3]["memory"]
    assert m["terms"]["nvls_buffers"] == 258 * MIB
    assert m["total_bytes"] - m["reserved_bytes"] == pytest.approx(2**30 + 258 * MIB, rel=1e-12)
    off = explain(**job, hardware="h100-sxm", nccl_nvls_enable=0)[3]["memory"]
    assert off["terms"]["nvls_buffers"] == 0.0
    assert off["reserved_bytes"] == m["reserved_bytes"]  # the allocator's peak does not move
    assert explain(**job, hardware="a100-sxm-80gb")[3]["memory"]["terms"]["nvls_buffers"] == 0.0


def test_groups_by_their_ranks_in_the_domain(explain):
    """16 H100s (2 nodes), tp-cp-dp-pp: TP 2 (too few ranks) + DP 8 with 4 a node: 130 MiB; TP 4 + DP 4 with 2 a
    node: 130 MiB (TP's); TP 1 + DP 16 with 8 a node: 258 MiB."""
    job = dict(model="llama3-8b", gpus=16, micro_batch=1, global_batch=16, seq_len=8192, hardware="h100-sxm")
    for tp, mib in ((2, 130), (4, 130), (1, 258)):
        assert explain(**job, tp=tp)[3]["memory"]["terms"]["nvls_buffers"] == mib * MIB, tp


def test_blackwell_rack(explain):
    """Llama 3 70B TP 4 on 144 GB200s (two NVL72 racks): TP in one domain, 24 channels, 24 x 2 x 4 + 2 = 194 MiB; the
    DP group of 36 spans the racks, 18 a rack, 32 channels: 1,154 MiB; 1,348 MiB in all."""
    m = explain(model="llama3-70b", gpus=144, tp=4, hardware="gb200-nvl72", micro_batch=1, global_batch=144,
                seq_len=8192)[3]["memory"]
    assert m["terms"]["nvls_buffers"] == (194 + 1154) * MIB


def test_explain_shows_the_row(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 8\nmicro_batch: 1\nglobal_batch: 8\nseq_len: 8192\n"
                   "hardware: h100-sxm\n", encoding="utf-8")
    r = cli("explain", str(job))
    assert r.exit_code == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "NCCL NVLS buffers (outside the allocator)" in ln)
    assert row.split("│")[-2].strip() == "0.25"  # GiB: 258 MiB
    job.write_text(job.read_text() + "nccl_nvls_enable: 0\n", encoding="utf-8")
    assert "NCCL NVLS buffers" not in cli("explain", str(job)).stdout  # the row only where it is priced
