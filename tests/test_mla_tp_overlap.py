"""Megatron-LM turns TP communication overlap off for a model with multi-head latent attention (issue 22, mlatpo).

NVIDIA/Megatron-LM @d98e8a64 megatron/core/extensions/transformer_engine.py l. 1176-1186, TELinear.__init__:

    if self.config.tp_comm_overlap and tp_comm_buffer_name and \\
            tp_comm_buffer_name not in ["qkv", "proj", "fc1", "fc2"]:
        self.config.tp_comm_overlap = False

self.config is the TransformerConfig every module shares. MLASelfAttention.__init__ (multi_latent_attention.py
l. 505-600) builds linear_q_proj ('q_proj', a TEColumnParallelLinear, a TELinear) or linear_q_down_proj
('q_down_proj', TELinear) and always linear_kv_down_proj ('kv_down_proj'): at the first MLA layer the overlap goes off
for every module built after, its own MLP and every later layer; only that layer's linear_proj ('proj', built before
in MultiLatentAttention.__init__ l. 221-230) keeps it: 1 linear of L, priced off too (the named approximation). The
same check at 905c0e386, the Megatron-LM Megatron-Bridge @dc805f5cf pins (transformer_engine.py l. 722-732). Added by
4e6ae3a2d2 (2025-04-24). args.tp_comm_overlap stays set: initialize.py l. 164-166 still allocates TE's userbuffers,
24 T h bytes in bf16 (12 buffers of [T, h] bf16: test_memory_tp_overlap.py).

DeepSeek-V2-Lite (model_zoo): h 2,048, 27 layers, q_lora_rank null (the q_proj path). mbs 1, seq 4,096: T = 4,096,
the userbuffers 24 x 4,096 x 2,048 = 201,326,592 B."""

from __future__ import annotations

import pytest

from planner import catalog
from planner.errors import PlannerError
from planner.plan import mla_drops_tp_overlap, resolve
from planner.schema import Job
from planner.space import variant_choices
from planner.startup import CODES

LITE = dict(model="deepseek-v2-lite", gpus=8, tp=2, sequence_parallel=True, stack="megatron", global_batch=8,
            seq_len=4096, micro_batch=1)
UB_LITE = 24 * 4096 * 2048  # 201,326,592


def test_mla_overlap_priced_off_userbuffers_kept(explain):
    """tp 2, SP, overlap on vs off: the same TP time and step time (every collective exposed in both); the plan keeps
    what was asked (tp_comm_overlap true, tp_comm_overlap_runs false) and the userbuffers 24 T h = 201,326,592 B."""
    _, _, _, on = explain(**LITE, tp_comm_overlap=True)
    _, _, _, off = explain(**LITE, tp_comm_overlap=False)
    assert on["time"]["tp_comm_s"] == off["time"]["tp_comm_s"] > 0
    assert on["time"]["step_s"] == off["time"]["step_s"]
    assert on["plan"]["tp_comm_overlap"] is True and on["plan"]["tp_comm_overlap_runs"] is False
    assert off["plan"]["tp_comm_overlap"] is False and "tp_comm_overlap_runs" not in off["plan"]
    from planner.render.fit import stack_options_text

    assert stack_options_text(on["plan"]).startswith("TP overlap (priced off)")  # fit's column, a pinned overlap
    assert "TP overlap" not in stack_options_text(off["plan"])
    assert on["memory"]["terms"]["tp_overlap_buffers"] == UB_LITE == 201_326_592
    assert off["memory"]["terms"]["tp_overlap_buffers"] == 0.0


def test_before_the_commit_the_overlap_hides(explain):
    """A job whose trainer_date is before 4e6ae3a2d2 (2025-04-23) runs the overlap: its TP time is below the
    no-overlap twin's (the test above can fail: the overlap does hide something on this plan)."""
    old = dict(LITE, trainer_date="2025-04-23")
    _, _, _, on = explain(**old, tp_comm_overlap=True)
    _, _, _, off = explain(**old, tp_comm_overlap=False)
    assert on["time"]["tp_comm_s"] < off["time"]["tp_comm_s"]
    assert "tp_comm_overlap_runs" not in on["plan"]
    # from the commit's day on, off again
    _, _, _, same_day = explain(**dict(LITE, trainer_date="2025-04-24"), tp_comm_overlap=True)
    assert same_day["time"]["tp_comm_s"] == off["time"]["tp_comm_s"]


def test_warning_names_the_source():
    """explain's warning names Megatron's TELinear check, the commit and the stack field."""
    _, _, warnings = resolve(Job(**LITE, tp_comm_overlap=True))
    w = [x for x in warnings if x.startswith("tp_comm_overlap on with multi-head latent attention")]
    assert len(w) == 1
    assert "transformer_engine.py l. 1176-1186" in w[0] and "4e6ae3a2d2, 2025-04-24" in w[0]
    assert "overlap.tp_comm_overlap_off_with_mla" in w[0] and "1 linear of 27 layers" in w[0]
    assert not any("multi-head latent attention" in x for x in resolve(Job(**LITE, tp_comm_overlap=False))[2])


def test_stack_field_and_bridge_inherits():
    """megatron's overlap.tp_comm_overlap_off_with_mla is 2025-04-24; megatron-bridge extends megatron (905c0e386 has
    the same check); torchtitan's async TP has no such switch. Only an MLA model is touched."""
    mg, br, tt = (catalog.load_stack(n) for n in ("megatron", "megatron-bridge", "torchtitan"))
    assert mg.overlap.tp_comm_overlap_off_with_mla == br.overlap.tp_comm_overlap_off_with_mla == "2025-04-24"
    assert tt.overlap.tp_comm_overlap_off_with_mla is None
    v3, l8 = catalog.load_model("deepseek-v3"), catalog.load_model("llama3-8b")
    assert mla_drops_tp_overlap(mg, v3) and mla_drops_tp_overlap(br, v3, "2026-01-01")
    assert not mla_drops_tp_overlap(mg, v3, "2025-04-23") and not mla_drops_tp_overlap(mg, l8)
    assert not mla_drops_tp_overlap(tt, v3)


def test_fit_does_not_search_the_overlapped_twin():
    """variant_choices: an MLA model on megatron leaves only tpo 0 (its overlapped row would price the same with
    the userbuffers on top); a dense model keeps 0 and 1; a pinned --tp-comm-overlap stays the only choice."""
    mg = catalog.load_stack("megatron")
    v3, l8 = catalog.load_model("deepseek-v3"), catalog.load_model("llama3-8b")
    job = Job(model="deepseek-v3", gpus=64)
    assert sorted(set(variant_choices(mg, job, model=v3)[:, 0])) == [0]
    assert sorted(set(variant_choices(mg, Job(model="llama3-8b", gpus=64), model=l8)[:, 0])) == [0, 1]
    assert sorted(set(variant_choices(mg, job.model_copy(update=dict(trainer_date="2025-01-01")), model=v3)[:, 0])) == [0, 1]
    assert sorted(set(variant_choices(mg, job.model_copy(update=dict(tp_comm_overlap=True)), model=v3)[:, 0])) == [1]


def test_fused_down_projection_with_overlap_refused():
    """Rule 101: --mla-down-proj-fusion builds 'qkv_down_proj' as a TELayerNormColumnParallelLinear, which requests
    a userbuffer TE never registers (base.py initialize_ub l. 310-336, 539-545; get_ub l. 550-560): refused with the
    overlap at tp > 1, runs without it."""
    assert CODES["MEGATRON_MLA_FUSION_TP_OVERLAP"] == 101
    v3 = dict(model="deepseek-v3", gpus=256, tp=8, pp=16, ep=2, etp=1, hardware="h800-sxm", sequence_parallel=True,
              mla_down_proj_fusion=True)
    with pytest.raises(PlannerError, match="MEGATRON_MLA_FUSION_TP_OVERLAP"):
        resolve(Job(**v3, tp_comm_overlap=True))
    resolve(Job(**v3, tp_comm_overlap=False))


def test_export_writes_what_was_asked(explain):
    """DeepSeek-V3 (its YaRN numbers stated, so the megatron format writes it) tp 8, SP, --tp-comm-overlap: the
    script carries --tp-comm-overlap as asked (Megatron-LM turns it off itself at the first MLA layer), priced off."""
    from planner.trainers.export import export_plan

    v3 = dict(model="deepseek-v3", gpus=256, tp=8, pp=16, ep=2, etp=1, hardware="h800-sxm", sequence_parallel=True,
              stack="megatron")
    _, _, _, on = explain(**v3, tp_comm_overlap=True)
    _, _, _, off = explain(**v3, tp_comm_overlap=False)
    assert on["time"]["tp_comm_s"] == off["time"]["tp_comm_s"] > 0
    assert "--tp-comm-overlap" in export_plan(on["plan"], "megatron")[0].split()
    assert "--tp-comm-overlap" not in export_plan(off["plan"], "megatron")[0].split()


def test_check_fix_overlap_off_frees_memory_only():
    """`check`'s fix "TP communication overlap on -> off" on a plan whose trainer runs the overlap off anyway
    (DeepSeek-V2-Lite tp 2 SP, --tp-comm-overlap, megatron, zero1 to fit 8 GPUs) says it costs no time and ranks
    at CHANGE_COST 0; its step time is the job's (delta 0: every TP collective is priced exposed in both), and the
    memory it frees is the userbuffers 24 T h = 201,326,592 B (the tp_overlap_buffers term) plus the overlapped GEMMs'
    3 cuBLAS workspaces (stack_db megatron memory.tp_overlap_workspaces 3 x hardware_db h100-sxm te_workspace_MiB
    32 MiB + 1 KiB = 3 x 33,555,456 = 100,666,368 B, allocator_slack 0): 301,992,960 B in memory.total_bytes.
    The job's headroom is set so its usable memory is its own total less the userbuffers: it fails by them, the
    fix passes. A dense model (Llama 3 8B, tp 2 SP, overlap on) keeps the usual rung: cost 7, no such note."""
    from planner.check import Gates, check_job, evaluate_job, ladders

    job0 = Job(**LITE, sharding="zero1", tp_comm_overlap=True)
    res0 = evaluate_job(job0)
    total = res0["memory"]["total_bytes"]
    headroom = 1.0 - (total - UB_LITE) / res0["memory"]["capacity_bytes"]
    res = check_job(job0.model_copy(update=dict(headroom=headroom)), "", Gates())
    assert res["verdict"] == "fail"
    fix = [s for s in res["suggestions"] if s["changes"] == {"tp_comm_overlap": False}]
    assert len(fix) == 1
    fix = fix[0]
    assert fix["cost_rank"] == [0]
    assert fix["description"].startswith("TP communication overlap on -> off (frees its buffers only, no time")
    assert fix["step_s"] == res["time"]["step_s"]
    ws = 3 * (32 * 2**20 + 2**10)
    assert ws == 100_666_368
    assert total - fix["total_bytes"] == UB_LITE + ws == 301_992_960
    assert res["memory"]["terms"]["tp_overlap_buffers"] == UB_LITE and fix["plan"]["tp_comm_overlap"] is False

    dense = Job(model="llama3-8b", gpus=8, tp=2, sequence_parallel=True, stack="megatron", global_batch=8, seq_len=4096,
                micro_batch=1, tp_comm_overlap=True)
    rung = ladders(dense, evaluate_job(dense))["tp_comm_overlap"]
    assert [(c.text, c.cost) for c in rung] == [("TP communication overlap on -> off", 7)]
