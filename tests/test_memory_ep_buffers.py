"""The MoE dispatcher's buffers in the memory model (planner/memory.py [ep], sizes
planner/ep_buffers.py, hand-derived in tests/test_ep_buffers.py): a term of its own, outside
the caching allocator (in the total the gate reads, not in the allocated or reserved peaks
Megatron logs), shown by explain and in its JSON; DeepSeek-V3's layout in
tests/test_deepseek_layout.py."""

from __future__ import annotations

import pytest

QWEN = dict(model="qwen3-30b-a3b", gpus=8, ep=8, micro_batch=1, global_batch=64, seq_len=4096)


def test_qwen3_30b_ep8_deepep_outside_the_allocator(explain):
    """Qwen3-30B-A3B, EP 8 in one node, DeepEP: 159,549,216 B (tests/test_ep_buffers.py), in the
    total and outside the peaks (NCCL's all-to-all has no such buffer: its own are the reserve's); Hybrid-EP at 4,096 tokens a rank: 32,768 rows of 2 x 2,048 +
    4 x 16 x 8 + 4 x 16 = 4,672 B + the routing map 128 x 4,096 x 8 = 157,286,400 B."""
    a = explain(**QWEN, moe_dispatcher="alltoall")[3]["memory"]
    d = explain(**QWEN, moe_dispatcher="deepep")[3]["memory"]
    h = explain(**QWEN, moe_dispatcher="hybridep")[3]["memory"]
    assert a["terms"]["ep_buffers"] == 0.0
    assert d["terms"]["ep_buffers"] == 159_549_216
    assert h["terms"]["ep_buffers"] == 32_768 * 4_672 + 128 * 4096 * 8 == 157_286_400
    # (the allocator's peaks differ by each dispatcher's own routing saves, layers/moe.py [9]-[11]:
    # DeepEP's handle tensors are priced, Hybrid-EP's not)
    # the 1 GiB reserve and NCCL's NVLS buffers of the DP group (8 ranks in the node, memory.py [nv]: 258 MiB)
    assert a["total_bytes"] - a["reserved_bytes"] == 2**30 + 258 * 2**20
    for m, b in ((d, 159_549_216), (h, 157_286_400)):
        assert m["total_bytes"] - m["reserved_bytes"] == pytest.approx(2**30 + 258 * 2**20 + b, rel=1e-12)


def test_no_dispatch_no_buffer(explain):
    """EP 1: no dispatch, no buffer, whatever the dispatcher; a dense model has none."""
    m = explain(**{**QWEN, "ep": 1}, moe_dispatcher="deepep")[3]["memory"]
    assert m["terms"]["ep_buffers"] == 0.0
    m = explain(model="llama3-8b", gpus=8, micro_batch=1, global_batch=64, seq_len=4096)[3]["memory"]
    assert m["terms"]["ep_buffers"] == 0.0


def test_explain_shows_the_row(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: qwen3-30b-a3b\ngpus: 8\nep: 8\nmicro_batch: 1\nglobal_batch: 64\nseq_len: 4096\n"
                   "moe_dispatcher: deepep\n", encoding="utf-8")
    r = cli("explain", str(job))
    assert r.exit_code == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "MoE dispatcher buffers (outside the allocator)" in ln)
    assert row.split("│")[-2].strip() == "0.15"  # GiB: 159,549,216 B
    assert "+ 1.40 GiB outside it" in r.stdout  # + the 1 GiB reserve + the DP group's 258 MiB of NVLS buffers
    job.write_text(job.read_text().replace("deepep", "alltoall"), encoding="utf-8")
    assert "MoE dispatcher buffers" not in cli("explain", str(job)).stdout  # the row only where it is priced


def test_only_stages_with_moe_layers_hold_it(explain):
    """A rank allocates the buffer at its first dispatch: DeepSeek-V3 (dense layers 0-2) on 31
    stages of 2 layers, 1F1B: stage 0 holds layers 0-1, dense, and no buffer; the others hold
    DeepEP's EP 64 buffer (778,783,136 B, tests/test_ep_buffers.py)."""
    job = dict(model="deepseek-v3", gpus=1984, hardware="h800-sxm", tp=1, pp=31, dp=64, ep=64, micro_batch=1,
               global_batch=1984, seq_len=4096, precision="fp8", sharding="zero1", recompute="full", schedule="1f1b")
    other = {}
    for d in ("alltoall", "deepep"):
        js = explain(**job, moe_dispatcher=d)[3]
        other[d] = {k: v["other_bytes"] for k, v in js["memory"]["stages"].items()}
    assert {k: other["deepep"][k] - other["alltoall"][k] for k in other["deepep"]} == pytest.approx(
        {"first": 0.0, "middle": 778_783_136, "last": 778_783_136}, rel=1e-12, abs=1e-3)


def test_expert_tp_group_sizes_the_buffer(explain):
    """Qwen3-30B-A3B on 8 GPUs, tp 2, etp 2, ep 4: the flex dispatcher's group is 8 ranks, so
    DeepEP's buffer is the EP 8 one (159,549,216 B) and Hybrid-EP's 89,128,960 B (2,048 tokens a
    rank, tests/test_ep_buffers.py); with etp 1 DeepEP's is the 4-rank one."""
    job = dict(model="qwen3-30b-a3b", gpus=8, tp=2, ep=4, micro_batch=1, global_batch=64, seq_len=4096)
    assert explain(**job, etp=2, moe_dispatcher="deepep")[3]["memory"]["terms"]["ep_buffers"] == 159_549_216
    assert explain(**job, etp=2, moe_dispatcher="hybridep")[3]["memory"]["terms"]["ep_buffers"] == 89_128_960
    assert explain(**job, etp=1, moe_dispatcher="deepep")[3]["memory"]["terms"]["ep_buffers"] < 159_549_216
