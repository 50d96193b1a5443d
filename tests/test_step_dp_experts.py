"""The routed experts' DP traffic splits into a per-micro-batch part and a step-end part as the dense traffic does
(step.dp_comm, dp_exposure, dp_expert_comm; DPTraffic e_total / e_exposed / e_mb). Before, all of it was step-end part,
hidden behind what the dense traffic left of one micro-batch's window (a named approximation), so ZeRO-2's m
reduce-scatters of the experts' gradients a step hid behind one backward, and none of them lay on the stage's path.

The stacks reduce the experts' gradients when they reduce the dense ones: Megatron-LM @d98e8a64 distributed_data_
parallel.py puts the expert parameters in their own buffers over the expert-data-parallel group (l. 284-329) and bucket
groups (l. 342-355), reduced from the same backward hook (l. 553-587); Megatron-FSDP reduces each unit's expert
parameter group every backward under optim_grads (megatron_fsdp.py l. 707-787, grad_reduce_every_bprop); torchtitan
@e347b1e5e wraps the routed experts as their own FSDP2 unit over the edp mesh (models/llama4/infra/parallelize.py
l. 381-409).

The plan: a tiny MoE (2 layers, h 64, 8 routed experts of 3 x 64 x 128 = 24,576 parameters, top 2) on the megatron
stack, 8 H100 SXM, tp 1, pp 2 (one layer a stage), dp 4, ep 2 (expert DP 2, the experts' ZeRO shard group 2), global
batch 16 at micro-batch 1 (m = 4). Each stage holds 8 / 2 = 4 experts a GPU, 98,304 expert parameters; Megatron's
bucket max(40e6, 1e6 x dp) parameters holds each stage's dense and expert parameters in one bucket each (n_b 1).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm, moe, step
from planner.plan import resolve
from planner.schema import Job

TINY = ("name: tiny-moe\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 256\nnum_attention_heads: 4\n"
        "vocab_size: 100\ngated_mlp: true\nnorm: rmsnorm\nmax_seq_len: 128\n"
        "moe: {num_experts: 8, top_k: 2, expert_ffn_hidden_size: 128}\nsources: [test]\n")
E_LOCAL = 4 * 3 * 64 * 128  # 4 local experts of 24,576: 98,304 a GPU on each stage
M = 4
ENDS = (step.CRITICAL_STAGES.index("first"), step.CRITICAL_STAGES.index("last"))


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny-moe.yaml"
    path.write_text(TINY)
    return str(path)


def _parts(model, **job):
    s, p, _ = resolve(Job(**{**dict(model=model, gpus=8, tp=1, pp=2, ep=2, etp=1, sharding="zero2", stack="megatron",
                                    hardware="h100-sxm", global_batch=16, micro_batch=1, seq_len=128), **job}))
    sc, lt, comp = step._compute_pass(s, p, picked=False)
    return s, p, sc, lt, comp, step.dp_comm(sc, step.Collectives(sc), comp, lt)


def _expert_colls(sc, p):
    """One pass's expert reduce-scatter (4 B a gradient element: Megatron's fp32 gradient buffer) and the weights'
    all-gather (2 B) over the expert shard group of 2 at the expert-DP stride, one bucket each."""
    coll = step.dp_collectives(sc, step.Collectives(sc))
    e_st = moe.expert_strides(p, coll.strides, ("edp",))["edp"]
    rs = float(coll(comm.REDUCE_SCATTER, np.float64(E_LOCAL * 4.0), np.asarray(2), e_st))
    ag = float(coll(comm.ALL_GATHER, np.float64(E_LOCAL * 2.0), np.asarray(2), e_st))
    return rs, ag


def test_zero2_expert_reduce_scatters_are_per_microbatch_part(tiny):
    """DP overlap off (every transfer waited on whole): each micro-batch's expert reduce-scatter R_e, m - 1 of them on
    the stage's path, DPTraffic.e_mb = 3/4 R_e (inside DPTraffic.mb), and the step end's the last R_e and the weights'
    all-gather A_e: e_exposed = e_total = 4 R_e + A_e. step_time's experts' exposure m x e_mb + that end = 4 R_e + A_e,
    of dp_comm_exposed. Before: e_mb 0 (all step-end part)."""
    s, p, sc, lt, comp, dp = _parts(tiny, dp_comm_overlap=False)
    assert float(sc.m) == M and int(p.dp) == 4 and int(moe.expert_dp(p)) == 2 and int(moe.expert_shard(p)) == 2
    assert s.stack.fsdp.grad_reduce_bytes == 4.0 and s.stack.fsdp.param_gather_bytes == 2.0
    assert bool(step.sharding_traits(s.stack, p)["reduce_mb"])  # ZeRO-2: reduced every micro-batch
    rs, ag = _expert_colls(sc, p)
    assert rs > 0 and ag > 0
    for i in ENDS:
        assert float(dp.e_local[i]) == E_LOCAL
        assert float(dp.e_mb[i]) == pytest.approx((M - 1) / M * rs, rel=1e-12)
        assert float(dp.e_exposed[i]) == pytest.approx(M * rs + ag, rel=1e-12)
        assert float(dp.e_total[i]) == pytest.approx(M * rs + ag, rel=1e-12)
        assert float(dp.mb[i]) >= float(dp.e_mb[i]) * (1.0 + 1e-9)  # the dense part's beside it
    t, extra = step.step_time(s, p)
    assert float(extra["dp_comm_experts_exposed_s"]) == pytest.approx(M * rs + ag, rel=1e-12)
    assert float(extra["dp_comm_experts_s"]) == pytest.approx(M * rs + ag, rel=1e-12)
    assert float(t.dp_comm_exposed) > float(extra["dp_comm_experts_exposed_s"])


def test_zero2_expert_reduce_scatter_hides_behind_the_backward_the_dense_bucket_leaves(tiny):
    """DP overlap on: the stage's one dense bucket's reduction is its last, never hidden (the edge), so the whole
    backward is left to the experts' reduce-scatter, which hides with the stack's exposed share x:
    e_mb = 3/4 x _hide(R_e, backward, x) = 3/4 x R_e x (R_e well below the backward). The dense part's unchanged by
    the experts (DPTraffic.mb - e_mb: the dense bucket's whole reduction a micro-batch)."""
    s, p, sc, lt, comp, dp = _parts(tiny, dp_comm_overlap=True)
    assert float(step.dp_overlap(s.stack, p)) > 0
    rs, ag = _expert_colls(sc, p)
    coll = step.dp_collectives(sc, step.Collectives(sc))
    for i in ENDS:
        bwd = float(comp.passes[i][1])  # the stage's own backward (dp_windows at pp 2)
        assert rs < bwd
        assert float(dp.e_mb[i]) == pytest.approx((M - 1) / M * rs * float(sc.x), rel=1e-9)
        assert float(dp.e_mb[i]) == pytest.approx((M - 1) / M * float(step._hide(rs, bwd, sc.x)), rel=1e-9)
        # the dense bucket's reduce-scatter over the 4 DP ranks, 4 B a gradient, exposed whole (the edge) each
        g = float(coll(comm.REDUCE_SCATTER, np.float64(float(dp.p_local[i]) * 4.0), np.asarray(4), coll.strides["dp"]))
        assert float(dp.mb[i]) - float(dp.e_mb[i]) == pytest.approx((M - 1) / M * g, rel=1e-9)


def test_zero1_expert_reductions_stay_at_the_step_end(tiny):
    """ZeRO-1 reduces once a step (on the last micro-batch, Megatron's is_last_microbatch): no per-micro-batch part,
    dense or experts', all of it the step end's."""
    s, p, sc, lt, comp, dp = _parts(tiny, sharding="zero1", dp_comm_overlap=False)
    rs, ag = _expert_colls(sc, p)
    for i in ENDS:
        assert float(dp.e_mb[i]) == 0.0 and float(dp.mb[i]) == 0.0
        assert float(dp.e_exposed[i]) == pytest.approx(rs + ag, rel=1e-12)


def test_fsdp_expert_unit_gathers_and_reduce_scatters_are_per_microbatch_part(tiny):
    """FSDP (megatron's, resharding after forward under pp 2: each unit gathered in the forward and again in the
    backward, its gradients reduce-scattered every micro-batch), DP overlap off: the stage's one expert unit (its MoE
    layer) moves X_e = 2 A_e + R_e a micro-batch, e_mb = 3/4 X_e and e_exposed = 4 X_e (before: e_mb 0)."""
    s, p, sc, lt, comp, dp = _parts(tiny, sharding="fsdp", dp_comm_overlap=False)
    tr = step.sharding_traits(s.stack, p)
    assert bool(tr["reshard"]) and bool(tr["reduce_mb"]) and not bool(tr["keep_pp"] | tr["regather_pp"])
    assert not s.stack.overlap.fsdp_gathers_overlap_always and s.stack.fsdp.fsdp_bucket_params is None
    rs, ag = _expert_colls(sc, p)
    for i in ENDS:
        assert float(dp.e_mb[i]) == pytest.approx((M - 1) / M * (2.0 * ag + rs), rel=1e-12)
        assert float(dp.e_exposed[i]) == pytest.approx(M * (2.0 * ag + rs), rel=1e-12)
