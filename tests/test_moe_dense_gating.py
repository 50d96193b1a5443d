"""DeepSpeed-MoE's dense gating on the megatron-deepspeed stack (stack moe_gating; layers/moe.py [18], memory.py [dg],
step.py [24]): the [S, E, C] one-hot tensors, the dispatch and combine einsums, what they save, by hand from
microsoft/DeepSpeed @38327e07 deepspeed/moe/sharded_moe.py (top2gating, MOELayer.forward).

The hand case (the task's): Mixtral 8x7B (h 4,096, 8 experts, top-2, 32 MoE layers), sequence 4,096, micro-batch 1,
capacity factor 1.0 (the stack's default), EP 8 on 64 GPUs, TP 1 (no SP): the gate runs on S = 4,096 tokens;
C = ceil(4,096 x 2 x 1.0 / 8) = 1,024 slots an expert (_capacity, above min_capacity 4), E C = 8,192.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import explain_each_row, explain_job
from planner.compute import HBM_EFFICIENCY, price_gemms
from planner.layers.common import shapes
from planner.layers.moe import MoEMLP
from planner.memory import memory_terms
from planner.stacks import stack_of

H, S, C, EC = 4096, 4096, 1024, 8 * 1024
LAYERS = 32


def _mixtral_mds(**kw):
    base = dict(model="mixtral-8x7b", gpus=64, tp=1, pp=1, ep=8, sharding="zero1", global_batch=64, micro_batch=1,
                seq_len=4096, stack="megatron-deepspeed", hardware="h100-sxm")
    return explain_job(**{**base, **kw})


def _without_gating(settings):
    """The same settings on the stack without dense gating (a dispatcher's permutations, the generic tensors)."""
    return replace(settings, stack=stack_of(settings).model_copy(update={"moe_gating": None}))


def test_capacity_tensors_and_einsum_flops_by_hand():
    """explain's moe.dense_gating: S 4,096, C 1,024; saved per layer and micro-batch: the gate's fp32 input 4 B x S x h
    (F.linear keeps it for the gate weight's gradient), top-2's two fp32 [S, C] location one-hots 2 x 4 B x S x C, the
    dispatch einsum's bf16 mask and the combine einsum's bf16 weights 2 B x S x E C each, the combine's bf16 expert
    output [E, C, h] 2 B x E C x h; forward transient: top-2's two fp32 products and their sum, 3 x 4 B x S x E C;
    backward: the weights' gradient bf16 + fp32 and a product's fp32 gradient, 10 B x S x E C. Einsums: 2 S E C h
    FLOPs each, two forward, three backward."""
    _, _, _, js = _mixtral_mds()
    g = js["moe"]["dense_gating"]
    assert (g["tokens"], g["capacity"]) == (4096, 1024)
    assert g["saved_bytes"] == {
        "moe_gate_input_fp32": 4 * S * H,  # 67,108,864
        "moe_gate_locations": 2 * 4 * S * C,  # 33,554,432
        "moe_dispatch_mask": 2 * S * EC,  # 67,108,864
        "moe_combine_weights": 2 * S * EC,
        "moe_combine_expert_out": 2 * EC * H,
    }
    assert sum(g["saved_bytes"].values()) == 301_989_888
    assert g["forward_transient_bytes"] == 12 * S * EC == 402_653_184
    assert g["backward_transient_bytes"] == 10 * S * EC == 335_544_320
    assert g["einsum_flops_forward"] == 2 * (2 * S * EC * H) == 549_755_813_888
    assert g["einsum_flops_backward"] == 3 * (2 * S * EC * H) == 824_633_720_832


def test_saved_tensors_replace_the_expert_output_in_the_layer_activations():
    """32 MoE layers, one micro-batch in flight (pp 1, no recompute): the dense gating's saves (301,989,888 B a layer)
    in place of the generic moe_expert_out the stack kept before (2 B x top-2 x h a token: 67,108,864 B)."""
    settings, plan, _, _ = _mixtral_mds()
    with_gating = memory_terms(settings, plan)[0].layer_activations
    without = memory_terms(_without_gating(settings), plan)[0].layer_activations
    assert float(with_gating - without) == LAYERS * (301_989_888 - 2 * 2 * H * S)


def test_full_recompute_keeps_the_input_and_rematerialises_the_gating():
    """Under full recompute a layer keeps its input alone; the recompute buffer re-materialises one layer with its
    gating saves and holds the backward transient beside them: buffer(with) - buffer(without) = saves - expert_out
    + 10 B x S x E C (the forward transient, 12 B x S x E C, is below that moment's peak here)."""
    settings, plan, _, _ = _mixtral_mds(recompute="full")
    a, b = memory_terms(settings, plan)[0], memory_terms(_without_gating(settings), plan)[0]
    assert float(a.layer_activations - b.layer_activations) == 0.0
    assert float(a.recompute_buffer - b.recompute_buffer) == (301_989_888 - 2 * 2 * H * S) + 10 * S * EC


def test_gating_time_by_hand():
    """moe_permute_s = m x 32 layers x (the gating's HBM bytes at the streaming rate + the einsums), m = 64 / 64 = 1
    micro-batch. Bytes a token of S, top-2 (layers/moe.py [18]): forward 6h + 48C + 34EC = 352,256 (+ the experts' cat,
    4 B x 2 routed rows x h a token), backward 10h + 8C + 30EC = 294,912. Einsums: the slower of each GEMM's priced time
    (bf16) and its traffic, at shapes [E C, h, S], [S, h, E C] forward and [S, h, E C], [S, E C, h], [E C, h, S]
    backward."""
    settings, plan, _, js = _mixtral_mds()
    hw = settings.hardware
    hbm = hw.hbm_bandwidth * HBM_EFFICIENCY
    fwd_bytes = S * (6 * H + 48 * C + 34 * EC) + 4 * S * 2 * H
    bwd_bytes = S * (10 * H + 8 * C + 30 * EC)
    assert S * (6 * H + 48 * C + 34 * EC) == S * 352_256 and S * (10 * H + 8 * C + 30 * EC) == S * 294_912
    rows = [("f1", EC, H, S), ("f2", S, H, EC), ("b1", S, H, EC), ("b2", S, EC, H), ("b3", EC, H, S)]
    priced = price_gemms(shapes([(n, m, nn, k, 1.0) for n, m, nn, k in rows]), hw, "bf16")
    einsum = sum(max(float(priced[n]), 2.0 * (m * k + k * nn + m * nn) / hbm) for n, m, nn, k in rows)
    per_layer = (fwd_bytes + bwd_bytes) / hbm + einsum
    assert js["time"]["moe_permute_s"] == pytest.approx(LAYERS * per_layer, rel=1e-12)
    assert js["time"]["moe_gating_einsum_s"] == pytest.approx(LAYERS * einsum, rel=1e-12)


def _ctx(T, tp=1.0, rep_div=1.0):
    return SimpleNamespace(T=np.float64(T), rep_div=np.float64(rep_div), tp=np.float64(tp), etp=np.float64(1.0),
                           cf=np.float64(1.0), expert_scale=np.float64(1.0))


def _moe(k, E=8, h=64):
    return MoEMLP(h=h, num_experts=E, top_k=k, fe=128, num_shared=0, fs=0, shared_gate=False, router_bias=0,
                  gated=True, norm=h)


def test_capacity_floor_and_the_three_gating_paths():
    """_capacity: C = max(ceil(S k cf / E), min_capacity): S 8, top-2, 8 experts, cf 1 -> ceil(2) = 2, floored to 4;
    S 100, top-1, cf 1.25 -> ceil(15.625) = 16. Top-1 (one [S, C] one-hot, one product), top-2 (two and their sum),
    top-k > 2 (the [S, E, C] int64 one-hot and its fp32 copy, saved): forward 6h + 24C + 18EC / 6h + 48C + 34EC /
    6h + 42EC, backward 10h + 4C + 18EC / 10h + 8C + 30EC / 10h + 22EC a token; saved locations 4C / 8C / 4EC."""
    assert float(_moe(2).gating_capacity(_ctx(8), 1.0, 4)) == 4.0
    assert float(_moe(2).gating_capacity(_ctx(8), 1.0, 0)) == 2.0
    assert float(_moe(1).gating_capacity(_ctx(100), 1.25, 4)) == 16.0
    h, T = 64, 64
    for k, f, b, loc in ((1, lambda c, ec: 24 * c + 18 * ec, lambda c, ec: 4 * c + 18 * ec, lambda c, ec: 4 * c),
                         (2, lambda c, ec: 48 * c + 34 * ec, lambda c, ec: 8 * c + 30 * ec, lambda c, ec: 8 * c),
                         (3, lambda c, ec: 42 * ec, lambda c, ec: 22 * ec, lambda c, ec: 4 * ec)):
        m = _moe(k, h=h)
        c = float(np.ceil(T * k / 8))
        ec = 8 * c
        fwd, bwd = m.gating_bytes(_ctx(T), 1.0, 4)
        assert float(fwd) == T * (6 * h + f(c, ec)) + 4 * T * k * h
        assert float(bwd) == T * (10 * h + b(c, ec))
        assert float(m.gating_saved_bytes(_ctx(T), 1.0, 4)["moe_gate_locations"]) == T * loc(c, ec)


def test_sequence_parallel_is_refused_and_tp_ranks_gate_every_token():
    """Without SP every TP rank gates all 8,192 tokens of the micro-batch (C = 2,048): the duplicate tokens MOELayer's
    drop_tokens / gather_tokens assume (sharded_moe.py l. 615-669). Under SP (tp 8) the fork hands the MoE the rank's
    [s / tp, b, h] slice (transformer.py l. 1429-1432), which those calls break: start-up rule 78 DEEPSPEED_MOE_SP."""
    from planner.errors import PlannerError
    from planner.startup import CODES

    no = _mixtral_mds(tp=8, sequence_parallel=False, micro_batch=2, global_batch=16)[3]["moe"]["dense_gating"]
    assert (no["tokens"], no["capacity"]) == (8192, 2048)
    assert CODES["DEEPSPEED_MOE_SP"] == 78
    with pytest.raises(PlannerError, match="DEEPSPEED_MOE_SP"):
        _mixtral_mds(tp=8, sequence_parallel=True, micro_batch=2, global_batch=16)
    # a job that leaves SP out takes it off for an MoE model here (the fork's default; plan.default_sequence_parallel)
    settings, plan, _, _ = _mixtral_mds(tp=8, micro_batch=2, global_batch=16)
    assert int(plan.sp) == 0


def test_other_stacks_keep_the_dispatcher_pricing():
    """The megatron stack (no moe_gating) shows no dense gating and no einsum term."""
    _, _, _, js = _mixtral_mds(stack="megatron")
    assert "dense_gating" not in js["moe"] and "moe_gating_einsum_s" not in js["time"]


def test_tp_all_gathers_of_the_capacity_by_hand():
    """tp 8 (no SP: DEEPSPEED_MOE_SP): MOELayer splits the capacity over the TP ranks before the dispatch all-to-all
    and all-gathers the combine's [E, C, h] back on every TP rank, and drop_tokens' gradient is that all-gather again
    (sharded_moe.py l. 659-664, mappings.py): tp_comm_s grows by 2 all-gathers of 2 B x E C h a layer and
    micro-batch, 32 layers, m = 1, at the TP group's place (S = 4,096 x 2 = 8,192, C = 2,048, 2 x 16,384 x 4,096 B
    = 128 MiB each)."""
    from planner import comm
    from planner.step import Collectives, _context, step_time

    settings, plan, _, js = _mixtral_mds(tp=8, sequence_parallel=False, micro_batch=2, global_batch=16)
    sc = _context(settings, plan)
    coll = Collectives(sc)
    gather = coll(comm.ALL_GATHER, 2.0 * 8 * 2048 * H, plan.tp, coll.strides["tp"])
    assert float(gather) > 0.0
    without = float(step_time(_without_gating(settings), plan)[0].tp_comm)
    assert js["time"]["tp_comm_s"] - without == pytest.approx(LAYERS * 2 * float(gather), rel=1e-9)


def test_fit_rows_and_explain_agree(cli):
    """explain and search price a plan alike: the dense-gating rows `fit` ranks (search.rows_of prices many plans as
    one 1-d PlanArrays) and `explain` of each row's reproduce line (search.explain_args: one 0-d plan) give the same
    time terms (moe_permute_s and its moe_gating_einsum_s, tp_comm_s with the capacity's TP all-gathers), memory
    terms (the gating's saves and transients) and moe.dense_gating block; with and without full recompute (the
    gating re-run and re-materialised), tp 2 (SP) and 1."""
    import json

    from planner.schema import Job

    base = ["--model", "mixtral-8x7b", "--gpus", "64", "--stack", "megatron-deepspeed", "--hardware", "h100-sxm",
            "--ep", "8", "--pp", "1", "--seq-len", "4096"]
    r = cli("fit", *base, "--tp", "1,2", "--recompute", "none,full", "--top", "40", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    seen = {(row["plan"]["tp"], row["plan"]["recompute"]) for row in rows}
    assert {(1, "none"), (2, "none"), (2, "full")} <= seen, seen
    job = Job(model="mixtral-8x7b", gpus=64, stack="megatron-deepspeed", hardware="h100-sxm", ep=8, pp=1, seq_len=4096)
    for row, one in explain_each_row(cli, job, rows):
        assert row["time"]["moe_gating_einsum_s"] > 0 and row["moe"]["dense_gating"]["capacity"] > 0
        assert one["time"] == row["time"], row["plan"]
        assert one["memory"]["terms"] == row["memory"]["terms"], row["plan"]
        assert one["moe"]["dense_gating"] == row["moe"]["dense_gating"], row["plan"]


def test_unpadded_experts_refused_alike_by_fit_explain_and_check(cli, tmp_path):
    """moe_pad_to_capacity false on megatron-deepspeed: DeepSpeed-MoE's dispatch einsum 'sec,sm->ecm' (sharded_moe.py
    MOELayer.forward l. 609) always builds [E, C, M], every expert padded to C: the job is refused at start-up (plan
    _job_defaults), so explain, fit and check all exit 2 naming it (before: explain priced unpadded experts and
    check passed; only export refused). The megatron stack prices it as given."""
    job = tmp_path / "job.yaml"
    job.write_text("model: mixtral-8x7b\ngpus: 64\nstack: megatron-deepspeed\nhardware: h100-sxm\nep: 8\npp: 1\ntp: 1\n"
                   "seq_len: 4096\nglobal_batch: 64\nmicro_batch: 1\nsharding: zero1\nmoe_pad_to_capacity: false\n")
    args = ["--model", "mixtral-8x7b", "--gpus", "64", "--stack", "megatron-deepspeed", "--hardware", "h100-sxm",
            "--ep", "8", "--pp", "1", "--tp", "1", "--seq-len", "4096", "--no-moe-pad-to-capacity"]
    for r in (cli("explain", *args, "--global-batch", "64", "--micro-batch", "1"), cli("fit", *args, "--top", "3"),
              cli("check", str(job))):
        assert r.exit_code == 2, r.stdout
        assert "moe_pad_to_capacity false on stack megatron-deepspeed: DeepSpeed-MoE always pads" in r.stderr
        assert "hint:" in r.stderr and "Traceback" not in r.stderr
    _mixtral_mds(moe_pad_to_capacity=True)  # true, or left out (the stack's), runs
    _mixtral_mds(stack="megatron", moe_capacity_factor=1.0, moe_pad_to_capacity=False)


def test_min_capacity_option_in_fit_rows_and_their_explain(cli):
    """--moe-min-capacity 2048 (the job's moe_min_capacity, Megatron-DeepSpeed's --moe-min-capacity): S 4,096, top-2,
    8 experts, cf 1: C = max(1,024, 2,048) = 2,048 in fit's row, and its reproduce line (search.explain_args) carries
    the option, so explain prices the same capacity and time."""
    import json

    from planner.schema import Job
    from planner.search import explain_args

    base = ["--model", "mixtral-8x7b", "--gpus", "64", "--stack", "megatron-deepspeed", "--hardware", "h100-sxm",
            "--ep", "8", "--pp", "1", "--tp", "1", "--seq-len", "4096", "--micro-batch", "1"]
    r = cli("fit", *base, "--moe-min-capacity", "2048", "--top", "1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert (row["moe"]["dense_gating"]["capacity"], row["plan"]["moe_min_capacity"]) == (2048, 2048)
    job = Job(model="mixtral-8x7b", gpus=64, stack="megatron-deepspeed", hardware="h100-sxm", ep=8, pp=1, tp=1,
              seq_len=4096, micro_batch=1, moe_min_capacity=2048)
    args = explain_args(job, row)
    assert "--moe-min-capacity" in args and args[args.index("--moe-min-capacity") + 1] == "2048"
    one = json.loads(cli("explain", *args, "--format", "json").stdout)
    assert one["moe"]["dense_gating"] == row["moe"]["dense_gating"] and one["time"] == row["time"]
