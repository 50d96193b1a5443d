"""Megatron-Core's --moe-shared-expert-overlap (job field moe_shared_expert_overlap; planner/step.py [38], memory.py
[se]): the shared experts on a side stream beside the token dispatcher's all-to-alls."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import explain_job

MS = 1e-3
# a DeepSeek-V3 job at TP 2 (SP on), EP 8, one micro-batch (dp 8, global batch 8), no recompute, no TP overlap
DSV3 = dict(model="deepseek-v3", gpus=16, tp=2, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096,
            moe_rank_imbalance=1.0, tp_comm_overlap=False, sharding="zero1", bytes_per_param="megatron")


def _segments(code):
    """shared_overlap_segments on one DSV3-like layer with round figures, seconds per micro-batch: TP 2 under SP, the
    side stream's all-gather of T h 2.0 ms and reduce-scatter 1.5 ms (the all-reduce's group is 1 under SP: 0 s);
    the shared fc1 3.0 ms and fc2 1.5 ms forward; the dispatch 4 ms and combine 5 ms forward, the combine's gradient
    (dispatch_bwd) 5 ms and the dispatch's (combine_bwd) 4 ms; the stack's exposed share x = 0.1."""
    from planner import comm, dispatch
    from planner.step import shared_overlap_segments

    fig = {comm.ALL_GATHER: 2.0 * MS, comm.REDUCE_SCATTER: 1.5 * MS, comm.ALL_REDUCE: 7.0 * MS}

    class Coll:
        strides = {"tp": 1}

        def __call__(self, op, size, group, stride):
            return np.where(np.asarray(group) > 1, fig[op], 0.0)

    one = np.array([1.0])
    sc = SimpleNamespace(plan=SimpleNamespace(sp=one, tp=2 * one), ctx=SimpleNamespace(T=4096.0),
                         settings=SimpleNamespace(model=SimpleNamespace(hidden_size=7168)), x=0.1)
    lt = SimpleNamespace(shared_gemms=[{"shared_up": 3.0 * MS, "shared_down": 1.5 * MS}])
    tr = SimpleNamespace(dispatch_fwd=4.0 * MS, combine_fwd=5.0 * MS, dispatch_bwd=5.0 * MS, combine_bwd=4.0 * MS,
                         probs_fwd=0.0, probs_bwd=0.0)
    return shared_overlap_segments(sc, Coll(), lt, 0, getattr(dispatch, code), tr, 8 * one)


def test_segments_by_hand_alltoall():
    """Each segment exposes _hide(A, G, x) of its all-to-all A beside the side stream's GEMMs G, and max(C - that, 0) of
    its TP collective C (it ends at max(A, C + G)). Forward: dispatch 4 beside the gather 2 and fc1 3: 1 + 0.1 x 3 =
    1.3, gather 2 - 1.3 = 0.7; combine 5 beside fc2 1.5 and the reduce-scatter 1.5: 3.5 + 0.15 = 3.65, RS 0. Backward:
    the combine's gradient 5 beside the all-gather 2 and fc2's backward 3: 2 + 0.3 = 2.3, AG 0; the dispatch's gradient
    4 beside fc1's backward 6 and the reduce-scatter 1.5: 0 + 0.4 = 0.4, RS 1.1. So forward 5.65 ms (0.7 of it TP),
    backward 3.8 ms (1.1 TP); without the overlap the same layer exposes 9 + 3.5 ms a way (the a2a whole, the pair
    AG + RS exposed): 25 ms against 9.45."""
    f, b, tf, tb = (float(np.asarray(v).ravel()[0]) for v in _segments("ALLTOALL"))
    assert (f, b, tf, tb) == pytest.approx((5.65 * MS, 3.8 * MS, 0.7 * MS, 1.1 * MS), rel=1e-12)
    assert 2 * (9.0 + 3.5) * MS - (f + b) == pytest.approx(15.55 * MS, rel=1e-12)


def test_segments_by_hand_flex():
    """The flex dispatcher runs fc2 and the reduce-scatter in combine_postprocess, after its combine returns
    (token_dispatcher.py @d98e8a64 l. 2029-2051): the forward combine 5 and the reduce-scatter 1.5 exposed whole,
    1.3 + 0.7 + 5 + 1.5 = 8.5 ms forward (2.2 TP); the backward as the alltoall's, 3.8 ms."""
    f, b, tf, tb = (float(np.asarray(v).ravel()[0]) for v in _segments("HYBRIDEP"))
    assert (f, b, tf, tb) == pytest.approx((8.5 * MS, 3.8 * MS, 2.2 * MS, 1.1 * MS), rel=1e-12)


def test_dsv3_tp2_with_and_without_the_overlap():
    """DeepSeek-V3 at TP 2, one micro-batch, 58 MoE layers (61, the first 3 dense): each layer's dispatch and combine
    all-to-alls (about 2.5 ms each way) outlast the shared experts' fc1 (0.186 ms) and fc2 (0.110 ms) GEMMs and their
    T h gather (58.7 MB over 2 NVLink ranks), so every segment exposes A - (1 - x) G and no TP remainder: ep_comm falls
    by 58 x (1 - x) x (fc1 + fc2) x 3 (forward 1x, backward 2x), x the stack's exposed share; tp_comm by the shared
    pair (tp_shared_experts_s, gone) and fc1's wgrad re-gather (its part of tp_wgrad_regather_s); the compute is the
    same GEMMs."""
    from planner.step import _context, layer_times

    s, p, _, off = explain_job(**DSV3)
    _, _, _, on = explain_job(moe_shared_expert_overlap=True, **DSV3)
    sc = _context(s, p)
    g = next(d for d in layer_times(sc).shared_gemms if d)
    f1, f2 = float(g["shared_up"]), float(g["shared_down"])
    assert (round(f1 * 1e6), round(f2 * 1e6)) == (186, 110)  # microseconds, the plan's GEMM rates
    t0, t1 = off["time"], on["time"]
    assert t0["ep_comm_s"] - t1["ep_comm_s"] == pytest.approx(58 * (1 - sc.x) * 3 * (f1 + f2), rel=1e-9)
    assert t1["ep_shared_experts_tp_s"] == 0.0 and "tp_shared_experts_s" not in t1
    assert t0["tp_comm_s"] - t1["tp_comm_s"] == pytest.approx(
        t0["tp_shared_experts_s"] + t0["tp_wgrad_regather_s"] - t1["tp_wgrad_regather_s"], rel=1e-9)
    assert t0["tp_wgrad_regather_s"] > t1["tp_wgrad_regather_s"] > 0
    assert t0["compute_s"] == t1["compute_s"]


def test_dsv3_tp2_memory_holds_the_gathered_fc1_input():
    """With the overlap the shared fc1 (parallel_mode None) saves the side stream's gathered input, T h at 2 B, where
    without it the column-parallel fc1 saves the SP shard, the router's norm2_out, already counted: 58 layers x 4,096 x
    7,168 x 2 B = 3,405,774,848 B more layer activations (one micro-batch in flight)."""
    _, _, _, off = explain_job(**DSV3)
    _, _, _, on = explain_job(moe_shared_expert_overlap=True, **DSV3)
    d = on["memory"]["terms"]["layer_activations"] - off["memory"]["terms"]["layer_activations"]
    assert d == 58 * 4096 * 7168 * 2 == 3_405_774_848


@pytest.mark.parametrize("recipe, without, with_", [("delayed", 0.5, 1.0), ("tensorwise", 0.0, 2.0)])
def test_fp8_fc1_saves(recipe, without, with_):
    """Under delayed scaling the shared fc1 keeps its own quantized copy of its input (1 B an element: Megatron sets
    save_original_input on it under the other recipes only, shared_experts.py @d98e8a64 l. 146-161): the SP shard
    without the overlap (T h / 2 at TP 2), the gathered input with it (T h); under tensorwise none without, the bf16
    gathered input with it (2 B). Bytes per layer over T h against the bf16 job's none, DeepSeek-V2-Lite (26 MoE
    layers, h 2,048)."""
    base = dict(DSV3, model="deepseek-v2-lite")
    th = 26 * 4096 * 2048
    _, _, _, bf = explain_job(**base)
    _, _, _, tw = explain_job(**base, precision="fp8", fp8_recipe="tensorwise")
    _, _, _, a = explain_job(**base, precision="fp8", fp8_recipe=recipe)
    _, _, _, b = explain_job(**base, precision="fp8", fp8_recipe=recipe, moe_shared_expert_overlap=True)
    act = lambda js: js["memory"]["terms"]["layer_activations"]  # noqa: E731
    assert (act(a) - act(tw)) / th == without
    assert (act(b) - act(a)) / th == with_ - without
    assert bf is not None


@pytest.mark.parametrize("fields, message", [
    (dict(model="llama3-8b", gpus=8, tp=2), "has no shared experts"),
    (dict(moe_dispatcher="allgather"), "moe_shared_expert_overlap only works with alltoall or flex"),
    (dict(ep_comm_overlap=True), "disable moe_shared_expert_overlap when enabling"),
    (dict(stack="torchtitan", sharding="fsdp", bytes_per_param=None), "SharedExpertMLP"),
    # Bridge's pinned Megatron-Core 905c0e386 runs it with alltoall only (stack moe_shared_expert_overlap_dispatchers)
    (dict(stack="megatron-bridge", moe_dispatcher="deepep"), "@905c0e386 l. 1213-1218 alltoall only"),
])
def test_refusals(fields, message):
    from planner.errors import PlannerError

    job = {k: v for k, v in {**DSV3, **fields, "moe_shared_expert_overlap": True}.items() if v is not None}
    if job["model"] == "llama3-8b":
        job = {k: v for k, v in job.items() if k not in ("ep", "moe_rank_imbalance")}
    with pytest.raises(PlannerError, match=message):
        explain_job(**job)


def test_megatron_args_read_and_export_writes_it(cli, tmp_path):
    """--moe-shared-expert-overlap on a Megatron-LM argument file with shared experts (Megatron-LM CI's gpt3_moe tp4 ep2
    etp2 pp2 test: alltoall, --moe-shared-expert-intermediate-size 512) is the job's field, priced (listed nowhere as
    unpriced), and `export megatron` writes it back; without the shared experts it is listed ignored."""
    import json
    from pathlib import Path

    from planner.trainers import load_trainer_config

    src = Path(__file__).parent / ("data/megatron_ci/args/moe__gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_"
                                   "dist_optimizer__dev_dgx_h100.args")
    f = tmp_path / "on.args"
    f.write_text(src.read_text().strip() + " --moe-shared-expert-overlap\n")
    cfg = load_trainer_config(f, hardware="h100-sxm", gpus=8)
    assert cfg.job["moe_shared_expert_overlap"] is True
    assert not any("moe-shared-expert-overlap" in x for x in list(cfg.not_modelled) + list(cfg.ignored))
    r = cli("explain", str(f), "--gpus", "8", "--hardware", "h100-sxm", "--format", "json", "-q")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["plan"]["moe_shared_expert_overlap"] is True and "ep_shared_experts_tp_s" in js["time"]
    out = tmp_path / "again.sh"
    r = cli("export", str(f), "--gpus", "8", "--hardware", "h100-sxm", "--format", "megatron", "-o", str(out), "-q")
    assert r.exit_code == 0, r.stderr
    assert "--moe-shared-expert-overlap" in out.read_text()
    g = tmp_path / "none.args"
    g.write_text(src.read_text().strip().replace("--moe-shared-expert-intermediate-size 512", "")
                 + " --moe-shared-expert-overlap\n")
    cfg = load_trainer_config(g, hardware="h100-sxm", gpus=8)
    assert "moe_shared_expert_overlap" not in cfg.job
    assert any(x.startswith("--moe-shared-expert-overlap") for x in cfg.ignored)
