"""TP communication overlap's memory (planner/memory.py [ub]), by hand from the stacks' code.

Megatron --tp-comm-overlap = Transformer Engine userbuffers: Megatron-LM @d98e8a64
training/initialize.py _initialize_tp_communicators passes initialize_ub the shape
[seq x micro-batch / cp, hidden]; TE @4329ff84 module/base.py initialize_ub registers one buffer
of that shape per GEMM name of its default methods (12), bf16, or uint8 under fp8 for the 8
all-gather layers (the 4 reduce-scatter layers stay bf16), with register_user_buffer_collective
(comm_gemm_overlap.cpp: cuMemCreate / cudaMalloc, outside the caching allocator). Per GPU:
(8 x 2 + 4 x 2) T h = 24 T h bytes in bf16, (8 x 1 + 4 x 2) T h = 16 T h with fp8, T = mbs x seq / cp.
Beside them the overlapped GEMMs' cuBLAS workspace, through the allocator: _NUM_MAX_UB_STREAMS
(3) x (32 MiB + 1 KiB) on sm >= 9 (cpp_extensions/gemm.py get_cublas_workspace(ub=True)).

torchtitan's async TP: torch 2.13 _symmetric_memory get_symm_mem_workspace, one per TP group,
the largest request a reduce-scatter's two output chunks of T / t rows in bf16: 4 T h / t bytes."""

from __future__ import annotations

import numpy as np
import pytest

from planner import memory as mem
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions

GiB = 2**30
H70, T8K = 8192, 8192  # Llama 3 70B hidden size; 8192 tokens (mbs 1, seq 8192, cp 1)
UB_WORKSPACE_H100 = 3 * (32 * 2**20 + 1024)  # 3 x get_cublas_workspace_size_bytes() on sm 9.0


def _mg(explain, **kw):
    job = dict(model="llama3-70b", gpus=64, tp=8, pp=4, micro_batch=1, global_batch=64, seq_len=8192,
               tp_comm_overlap=True)
    return explain(**{**job, **kw})


def test_userbuffers_bytes_by_hand_bf16_and_fp8(explain):
    """llama3-70b TP 8, mbs 1, seq 8192: 24 x 8192 x 8192 = 1,610,612,736 B (1.5 GiB) in bf16,
    16 x 8192 x 8192 = 1,073,741,824 B (1 GiB) in fp8; the TE workspace 3 x 33,555,456 B more
    in the workspaces term (allocated), and nothing of either without the overlap."""
    _, _, _, on = _mg(explain)
    _, _, _, off = _mg(explain, tp_comm_overlap=False)
    _, _, _, f8 = _mg(explain, precision="fp8")
    t, t0 = on["memory"]["terms"], off["memory"]["terms"]
    assert t["tp_overlap_buffers"] == 24 * H70 * T8K == 1_610_612_736
    assert f8["memory"]["terms"]["tp_overlap_buffers"] == 16 * H70 * T8K == GiB
    assert t0["tp_overlap_buffers"] == 0.0
    assert t["workspaces"] - t0["workspaces"] == UB_WORKSPACE_H100
    # outside the allocator: in the total (the gate), not in the reserved or allocated peaks
    m, m0 = on["memory"], off["memory"]
    assert m["total_bytes"] - m0["total_bytes"] == pytest.approx(24 * H70 * T8K + UB_WORKSPACE_H100, rel=1e-12)
    assert m["reserved_bytes"] - m0["reserved_bytes"] == pytest.approx(UB_WORKSPACE_H100, rel=1e-9)
    assert m["allocated_bytes"] - m0["allocated_bytes"] == pytest.approx(UB_WORKSPACE_H100, rel=1e-9)
    # + the 1 GiB reserve + the TP group's NCCL NVLS buffers (8 ranks in the node: 258 MiB, memory.py [nv])
    assert m["total_bytes"] - m["reserved_bytes"] == pytest.approx(24 * H70 * T8K + 1.0 * GiB + 258 * 2**20, rel=1e-12)


def test_userbuffers_shape_follows_tokens_not_tp(explain):
    """The buffer is the gathered [seq x mbs / cp, h] on every rank of the TP group: doubles with
    the micro-batch, halves with cp 2, does not shrink with tp; a second (bf16) set under fp8
    with bf16 layers (Megatron appends quantization mode NONE): (16 + 24) T h."""
    ub = lambda js: js["memory"]["terms"]["tp_overlap_buffers"]  # noqa: E731
    assert ub(_mg(explain, micro_batch=2)[3]) == 24 * H70 * 2 * T8K
    assert ub(_mg(explain, cp=2, pp=2)[3]) == 24 * H70 * T8K / 2
    assert ub(_mg(explain, tp=4, pp=8)[3]) == 24 * H70 * T8K
    # (tensorwise: Megatron-Core refuses bf16 layers with delayed scaling, transformer_config.py l. 1527-1530)
    assert ub(_mg(explain, precision="fp8", fp8_recipe="tensorwise", bf16_layers_at_start=1,
                  bf16_layers_at_end=1)[3]) == 40 * H70 * T8K


def test_userbuffers_by_transformer_engine_release(explain):
    """TE's initialize_ub by release (planner/te_version.py, read at the tags): v1.6-v2.6 make 10 buffers
    (ring_exchange 4, pipeline 2, bulk 4; all-gather 6: qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad, qkv_dgrad,
    fc1_dgrad), from v2.7 12 (external proj_wgrad, fc2_wgrad: 8 all-gather); up to v2.9 the overlapped GEMMs'
    3 workspaces replace the plain one (_cublas_workspace = get_workspace().repeat(3)), from v2.10 they sit
    beside it. llama3-70b TP 8, mbs 1, seq 8192 (T h = 8192 x 8192):
      1.8   bf16 (6 x 2 + 4 x 2) T h = 20 T h = 1,342,177,280 B; fp8 (6 x 1 + 4 x 2) = 14 T h = 939,524,096 B;
            workspaces 2 x 33,555,456 B beyond the run without the overlap (3 in all, the plain one replaced)
      2.9   24 T h and 16 T h (12 buffers), workspaces 2 x 33,555,456 B more
      2.10  and the stack's 2.17.1: 24 T h, 3 x 33,555,456 B more (as test_userbuffers_bytes_by_hand_bf16_and_fp8)"""
    def terms(version=None, **kw):
        extra = {} if version is None else {"te_version": version}
        on = _mg(explain, **extra, **kw)[3]["memory"]["terms"]
        off = _mg(explain, **extra, **kw, tp_comm_overlap=False)[3]["memory"]["terms"]
        return on["tp_overlap_buffers"], on["workspaces"] - off["workspaces"]

    ws = 32 * 2**20 + 1024  # get_cublas_workspace_size_bytes() on sm 9.0 (H100)
    assert terms("1.8") == (20 * H70 * T8K, 2 * ws) == (1_342_177_280, 67_110_912)
    assert terms("1.8", precision="fp8")[0] == 14 * H70 * T8K == 939_524_096
    assert terms("2.6") == terms("1.6") == terms("1.8.0") == terms("1.8")
    assert terms("2.9") == (24 * H70 * T8K, 2 * ws)
    assert terms("2.9", precision="fp8")[0] == 16 * H70 * T8K
    assert terms("2.10") == terms("2.17.1") == terms() == (24 * H70 * T8K, 3 * ws) == (1_610_612_736, 100_666_368)
    # the stack's release where the job names none: megatron's memory.te_version
    from planner.catalog import load_stack
    assert load_stack("megatron").memory.te_version == "2.17.1"


def test_te_version_data_by_release():
    """planner/te_version.py: the spans' boundaries, and releases before 1.6 refused (nothing clamped)."""
    from planner.errors import PlannerError
    from planner.te_version import te_userbuffers

    assert te_userbuffers("1.6") == te_userbuffers("2.6.1") == (6, 4, False)
    assert te_userbuffers("2.7") == te_userbuffers("2.9") == (8, 4, False)
    assert te_userbuffers("2.10") == te_userbuffers("2.17.1") == te_userbuffers("3.0") == (8, 4, True)
    with pytest.raises(PlannerError, match="older than Transformer Engine 1.6"):
        te_userbuffers("1.5")


def test_te_version_refused_where_it_cannot_apply():
    """A job's te_version needs a stack that runs Transformer Engine (stack memory.te_version), and 1.6 or
    later; a stack whose TP overlap registers userbuffers must name its release (schema)."""
    from planner.catalog import load_stack
    from planner.errors import PlannerError
    from planner.plan import resolve

    with pytest.raises(PlannerError, match="runs no Transformer Engine"):
        resolve(Job(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", te_version="2.9"))
    with pytest.raises(PlannerError, match="older than Transformer Engine 1.6"):
        resolve(Job(model="llama3-8b", gpus=8, te_version="1.5"))
    st = load_stack("megatron")
    with pytest.raises(ValueError, match="needs te_version"):
        type(st.memory).model_validate({**st.memory.model_dump(), "te_version": None})
    # a stack file's release before 1.6 is refused as its field (review6: it was refused at pricing, the message and
    # hint naming a job's te_version)
    with pytest.raises(ValueError, match="te_version 1.2 is older than Transformer Engine 1.6"):
        type(st.memory).model_validate({**st.memory.model_dump(), "te_version": "1.2"})


def test_symmetric_memory_workspace_torchtitan(explain):
    """torchtitan async TP (compile): 4 x 8192 x 8192 / 8 = 33,554,432 B (32 MiB) outside the
    allocator, no workspace of its own (Inductor's fused ops use PyTorch's cuBLAS handle)."""
    kw = dict(model="llama3-70b", gpus=64, tp=8, sharding="fsdp", stack="torchtitan", micro_batch=1,
              global_batch=8, seq_len=8192, recompute="full", torch_compile=True)
    _, _, _, on = explain(**kw, tp_comm_overlap=True)
    _, _, _, off = explain(**kw, tp_comm_overlap=False)
    assert on["memory"]["terms"]["tp_overlap_buffers"] == 4 * H70 * T8K / 8 == 32 * 2**20
    assert on["memory"]["terms"]["workspaces"] == off["memory"]["terms"]["workspaces"]
    # torchtitan logs max reserved: the workspace is not in it
    assert on["memory"]["reserved_bytes"] == off["memory"]["reserved_bytes"]


def test_tp_overlap_total_is_what_memory_total_adds(explain):
    """memory.tp_overlap_total (what the search adds to variant 0's memory) is the difference
    memory_total makes, on every stage (the heaviest stays the heaviest)."""
    s, plan, _, on = _mg(explain)
    _, plan0, _, off = _mg(explain, tp_comm_overlap=False)
    assert float(mem.tp_overlap_total(s, plan)) == 24 * H70 * T8K + UB_WORKSPACE_H100
    assert float(mem.tp_overlap_total(s, plan0)) == 0.0
    d = float(mem.memory_total(s, plan)) - float(mem.memory_total(s, plan0))
    assert d == pytest.approx(float(mem.tp_overlap_total(s, plan)), rel=1e-12)
    for st in ("first", "middle", "last"):
        a, b = on["memory"]["stages"][st]["total_bytes"], off["memory"]["stages"][st]["total_bytes"]
        assert a - b == pytest.approx(24 * H70 * T8K + UB_WORKSPACE_H100, rel=1e-12)


# the mesh of the gate tests: llama3-70b on 64 H100, TP 8 PP 4 DP 2, no sharding, mbs 1
GATE = SpaceOptions(tp=(8,), cp=(1,), pp=(4,), vpp=(1,), micro_batch=(1,), sharding=("none",), recompute=("none",),
                    sequence_parallel=True)


def _gate_job(reserve):
    return Job(model="llama3-70b", gpus=64, hardware="h100-sxm", global_batch=64, seq_len=8192, reserve_GiB=reserve)


def test_search_gates_the_tp_overlap_variant_on_its_buffers(explain):
    """With the 1 GiB reserve the overlap is faster and fits: fit chooses it and reports its
    memory (with the 1.5 GiB of userbuffers). With a reserve that leaves room for the plan
    without the overlap but not with it (usable 71.18 GiB; the overlap adds 1.5 GiB + 96 MiB),
    fit chooses the plan without it, which fits; explain says the overlap plan does not."""
    on = fit(_gate_job(1.0), opts=GATE, top=1).rows[0]
    assert on["plan"]["tp_comm_overlap"] and on["memory"]["fits"]
    assert on["memory"]["terms"]["tp_overlap_buffers"] == 24 * H70 * T8K
    _, _, _, js_on = _mg(explain, reserve_GiB=1.0, sharding="none", rank_order=on["plan"]["rank_order"])
    assert on["memory"]["total_bytes"] == js_on["memory"]["total_bytes"]
    # the reserve that puts the overlap plan 0.25 GiB over and the plain one under
    usable = js_on["memory"]["usable_bytes"]
    extra = 24 * H70 * T8K + UB_WORKSPACE_H100
    reserve = (usable - js_on["memory"]["total_bytes"] + 1.0 * GiB + 0.25 * GiB) / GiB
    assert js_on["memory"]["total_bytes"] - extra + (reserve - 1.0) * GiB < usable  # the plain plan fits
    got = fit(_gate_job(reserve), opts=GATE, top=1).rows[0]
    assert not got["plan"]["tp_comm_overlap"] and got["memory"]["fits"]
    assert got["memory"]["terms"]["tp_overlap_buffers"] == 0.0
    assert got["time"]["step_s"] > on["time"]["step_s"]  # the faster variant was refused, not slower
    _, _, _, js = _mg(explain, reserve_GiB=reserve, sharding="none", rank_order=on["plan"]["rank_order"])
    assert not js["memory"]["fits"]
    assert js["memory"]["total_bytes"] - usable == pytest.approx(0.25 * GiB, rel=1e-9)


def test_explain_and_check_show_the_term(cli, tmp_path):
    r = cli("explain", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4", "--micro-batch", "1",
            "--global-batch", "64", "--seq-len", "8192", "--tp-comm-overlap")
    assert r.exit_code == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "TP overlap buffers (outside the allocator)" in ln)
    assert row.split("│")[-2].strip() == "1.50"  # GiB
    assert "+ 2.75 GiB outside it" in r.stdout  # 1.5 GiB of userbuffers + the 1 GiB reserve + TP's 258 MiB of NVLS
    r0 = cli("explain", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4", "--micro-batch", "1",
             "--global-batch", "64", "--seq-len", "8192", "--no-tp-comm-overlap")
    assert "TP overlap buffers" not in r0.stdout  # the row only where the plan has the overlap
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-70b\ngpus: 64\ntp: 8\npp: 4\nmicro_batch: 1\nglobal_batch: 64\nseq_len: 8192\n"
                   "reserve_GiB: 11\ntp_comm_overlap: true\n", encoding="utf-8")
    r = cli("check", str(job))
    assert r.exit_code == 1
    assert "+ 12.8 GiB outside the allocator" in r.stdout  # 11 GiB reserve + 1.5 GiB userbuffers + TP's 258 MiB of NVLS
    assert "TP overlap buffers (outside the allocator)       1.50 GiB" in r.stdout
    r = cli("check", str(job), "--no-tp-comm-overlap")
    assert r.exit_code == 0, r.stdout


def test_megatron_ci_tp_overlap_rows():
    """Megatron logs max allocated (mem-max-allocated-bytes): the userbuffers are not in it, the
    UB GEMMs' workspace is. The CI's two --tp-comm-overlap rows (TP2 PP2 native fp8, hidden 512,
    mbs 2 x seq 1024, H100 and GB200): userbuffers 16 x 512 x 2048 = 16 MiB, reported apart; the
    workspaces 2 x 32 MiB (PyTorch) + 32 MiB + 1 KiB (TE) + 3 x (32 MiB + 1 KiB) (TE's UB GEMMs).
    Their end-of-step allocated bytes (after the optimizer step, no activation alive) beside the
    priced persistent terms were 101 MiB (docs/megatron_ci_gap.md), now under 5 MiB; the peak's
    error -12.5 / -12.8% before, within -2% now."""
    from pathlib import Path

    from planner.megatron_ci import load_corpus, report_corpus

    corpus_path = Path(__file__).parent / "data" / "megatron_ci" / "corpus.json"
    corpus = {r["row_id"]: r for r in load_corpus(corpus_path)["rows"]}
    case = "gpt__gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap__dev_dgx_"
    rep = report_corpus(corpus_path, ids=[case + "h100", case + "gb200"])
    assert len(rep["rows"]) == 2
    persistent = ("weights", "gradients", "master_weights", "adam", "quantized_weights", "workspaces", "mpu_buffer")
    for r in rep["rows"]:
        t = r["terms"]
        assert t["tp_overlap_buffers"] == 16 * 512 * 2 * 1024
        assert t["workspaces"] == 2 * 32 * 2**20 + 4 * (32 * 2**20 + 1024)
        last = corpus[r["row_id"]]["ground_truth"]["mem_allocated_bytes_last_step"]
        beside = last - sum(t[k] for k in persistent)
        assert 0 < beside < 5 * 2**20, beside / 2**20
        assert -0.02 < r["error"] < 0.0, r["error"]


def test_a_release_past_the_newest_read_is_noted(tmp_path):
    """te_version 3.0 (past v2.18, the newest tag te_version.py read): priced as the last span's layout (2.10 on:
    12 userbuffers, the workspaces beside the plain one), with a note; 2.18 itself gives none."""
    from planner.te_version import te_newer_note, te_userbuffers

    assert te_userbuffers("3.0") == te_userbuffers("2.18") == (8, 4, True)
    assert te_newer_note("2.18") is None and te_newer_note("2.18.3") is None
    assert "newer than Transformer Engine 2.18" in te_newer_note("3.0")
