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
    assert nvls_channels((9, 0), np.array([False, True])).tolist() == [16, 16]
    assert nvls_channels((10, 0), np.array([False, True])).tolist() == [24, 32]
    assert nvls_channels(None, np.array([False, True])).tolist() == [16, 16]  # not given: Hopper's rule


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


def test_bridge_release_records_run_without_nvls():
    """Megatron-Bridge's performance launcher exports NCCL_NVLS_ENABLE=0 for every Slurm run (scripts/performance/
    utils/executors.py PERF_ENV_VARS, l. 42 at v0.2.0, l. 43 at v0.3.0-v0.5.0): each release-table record states
    nccl_nvls_enable 0 with that line, and prices no NVLS buffers. The same record without the field (NCCL's default)
    binds them by hand: DeepSeek-V3 on GB200 NVL72 (25.11, EP 64 in one rack, 64 GPUs: the expert-data-parallel group
    is 1, the gradient group dp 64 in one 72-GPU domain, 32 heads at most, 24 channels) 24 x 2 x 1 MiB x 32 + 2 MiB =
    1,538 MiB; gpt-oss 120B on H100 (dp 16 over two 8-GPU nodes, 8 a node, 16 channels) 16 x 2 x 8 + 2 = 258 MiB."""
    import tempfile
    from pathlib import Path

    from planner import memory
    from planner.validate import load_runs, new_row, prepare_record

    data = Path(__file__).parent / "data"
    recs = [r for f in ("published_runs_lowprec.yaml", "published_runs_moe.yaml") for r in load_runs(data / f)
            if r.source_group.startswith("megatron_bridge_perf_")]
    assert len(recs) == 46
    for r in recs:
        assert r.nccl_nvls_enable == 0, r.id
        assert "executors.py PERF_ENV_VARS l. 4" in r.provenance["nccl_nvls_enable"], r.id
    by_id = {r.id: r for r in recs}

    def nvls(rec):
        with tempfile.TemporaryDirectory() as d:
            s, p = prepare_record(rec, new_row(rec), Path(d), data)
        return s.nccl_nvls_enable, float(memory.nvls_buffer_bytes(s, p))

    for rid, mib in (("megatron-bridge-25.11-dgx-gb200-deepseek-v3-bf16", 1538),
                     ("megatron-bridge-25.11-dgx-h100-gpt-oss-120b-bf16", 258)):
        assert nvls(by_id[rid]) == (0, 0.0)
        assert nvls(by_id[rid].model_copy(update={"nccl_nvls_enable": None})) == (None, mib * MIB), rid


def test_rank_order_explain_and_fit_agree(cli, explain):
    """The NVLS groups are placed at the plan's rank order, in fit and explain alike (search.order_extra): tiny-fit,
    TP 2 PP 2 DP 4 on 16 H100s (8 a node). Megatron's default tp-cp-dp-pp: TP {r, r+1} (2 a node: none), DP 4 ranks 2
    apart, {0, 2, 4, 6} in one node, 4 heads: 16 x 2 x 1 MiB x 4 + 2 MiB = 130 MiB. --use-tp-pp-dp-mapping's
    tp-cp-pp-dp: DP ranks tp x pp = 4 apart, {0, 4, 8, 12}, 2 a node: no NVLS, 0 B (before: 130 MiB there too,
    over-priced). fit's row of each order and explain of that row agree to the byte, and their totals differ by
    exactly the 130 MiB."""
    import json

    tiny = "tests/data/tiny-fit.yaml"
    r = cli("fit", "--model", tiny, "--gpus", "16", "--hardware", "h100-sxm", "--global-batch", "16", "--top", "4000",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    key = dict(tp=2, cp=1, pp=2, dp=4, vpp=1, micro_batch=1, sharding="none", recompute="none", sequence_parallel=True)
    rows = [x for x in json.loads(r.stdout) if all(x["plan"].get(k) == v for k, v in key.items())]
    assert sorted(x["plan"]["rank_order"] for x in rows) == ["tp-cp-dp-pp", "tp-cp-pp-dp"]
    want = {"tp-cp-dp-pp": 130 * MIB, "tp-cp-pp-dp": 0.0}
    total = {}
    for row in rows:
        p = row["plan"]
        js = explain(model=tiny, gpus=16, hardware="h100-sxm", global_batch=16, seq_len=p["seq_len"], tp=2, pp=2,
                     micro_batch=1, sharding="none", recompute="none", sequence_parallel=True,
                     schedule=p["schedule"], tp_comm_overlap=p["tp_comm_overlap"], rank_order=p["rank_order"])[3]
        assert row["memory"]["terms"]["nvls_buffers"] == js["memory"]["terms"]["nvls_buffers"] == want[p["rank_order"]]
        assert row["memory"]["total_bytes"] == js["memory"]["total_bytes"], p["rank_order"]
        total[p["rank_order"]] = row["memory"]["total_bytes"]
    assert total["tp-cp-dp-pp"] - total["tp-cp-pp-dp"] == 130 * MIB

def test_lightest_order_and_order_extra():
    """search.with_order_memory / order_extra on tiny-fit's space on 16 H100s (megatron: orders tp-cp-dp-pp, the base
    rows' own, and tp-cp-pp-dp): the TP 2 PP 2 DP 4 rows hold DP 4 ranks 2 apart in one node at tp-cp-dp-pp (130 MiB)
    and 4 apart, 2 a node (0 B) at tp-cp-pp-dp, so their lightest order is tp-cp-pp-dp, light_shift -130 MiB, and
    tp-cp-dp-pp adds 130 MiB; a TP 4 PP 2 DP 2 row's buffers are the same at both orders (TP 4 a node: 16 x 2 x 4 + 2 =
    130 MiB; DP 2 a node or 1: none): light its first distinct order, no shift. memory_totals (at the lightest order) plus order_extra is
    memory_total of the plan at each order."""
    import planner.memory as mem
    import planner.search as search
    from planner.comm import order_code
    from planner.schema import Job
    from planner.space import SpaceOptions, build_space, settings_for, variant_choices

    job = Job(model="tests/data/tiny-fit.yaml", gpus=16, hardware="h100-sxm", global_batch=16)
    settings, gbs, seq, _ = settings_for(job)
    space = search.with_order_memory(build_space(settings, gbs, seq, job.precision, SpaceOptions(),
                                                 variant_choices(settings.stack, job, "", settings.hardware)))
    b = space.base
    default, mapping = order_code("tp-cp-dp-pp"), order_code("tp-cp-pp-dp")
    ok = space.codes == 0
    row = np.flatnonzero(ok & (b.tp == 2) & (b.pp == 2) & (b.dp == 4) & (b.cp == 1))[0]
    assert int(np.asarray(b.order).flat[row]) == default  # the stack's first order: the base rows'
    assert space.lightest(row) == mapping and space.light_shift_of(row) == -130 * MIB
    assert search.order_extra(space, [row, row], [default, mapping]).tolist() == [130 * MIB, 0.0]
    tp4 = np.flatnonzero(ok & (b.tp == 4) & (b.pp == 2) & (b.dp == 2) & (b.cp == 1))[0]
    assert space.order_ok[tp4].sum() == 2 and space.lightest(tp4) == mapping  # (the first distinct order: every one ties)
    assert space.light_shift_of(tp4) == 0.0 and search.order_extra(space, [tp4, tp4], [default, mapping]).tolist() == [0, 0]
    p = space.plans(np.array([tp4]), np.array([0]), np.array([mapping]))
    assert float(np.asarray(mem.nvls_buffer_bytes(settings, p)).ravel()[0]) == 130 * MIB
    got = search.memory_totals(space, np.array([row]), np.array([0]))[0]
    for code in (default, mapping):
        p = space.plans(np.array([row]), np.array([0]), np.array([code]))
        want = float(np.asarray(mem.memory_total(settings, p)).ravel()[0])
        assert got + search.order_extra(space, row, code) == pytest.approx(want, rel=1e-12), code
