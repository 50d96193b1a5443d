"""The TP collectives outside the layers (planner/step.py [36], step.head_tp_seconds / loss_tp_seconds; explain's
time.tp_head_s, inside tp_comm_s), derived by hand.

Llama 3 8B (h 4,096, V 128,256) at TP 2 on 8 H100s, T = 4,096 tokens a micro-batch, m = 2, pp 1 (the one stage holds
the embedding, the output layer and the loss). comm.py inside one NVLink domain, 2 ranks (conftest.h100_nvlink_ring_s):
a reduce-scatter or all-gather of T h x 2 B = 33,554,432 B is 3.4 + 45.344 = 48.744 us, an all-reduce twice a ring
(2 x (n - 1) rounds, 2 (n - 1) / n of the buffer); the loss's all-reduce of T fp32 = 16,384 B: 2 x 3.422 = 6.844 us.
The output GEMM [4,096, 64,128, 4,096] is >= 2 x 4,096 x 64,128 x 4,096 / 989e12 = 2.17 ms at the H100's peak: every
async transfer beside it (the re-gather behind the dgrad GEMM, the input gradient's reduce-scatter or all-reduce behind
the wgrad GEMM, Megatron-LM @d98e8a64 tensor_parallel/layers.py l. 674-707) fits inside, so costs the stack's exposed
share 0.189 of itself (step._hide, stack_db/megatron.yaml overlap.overlapped_exposed_fraction).
"""

from __future__ import annotations

import pytest

from conftest import explain_job, h100_nvlink_ring_s as _ring
# the same Llama 3 8B TP 2 job (M = 2 micro-batches a step), T h bf16 message and exposed share as the re-gathers' tests
from test_tp_wgrad_regather import MSG, M, X, _job

AG = _ring(2, MSG)
LOSS_AR = 2 * _ring(2, 4 * 4096)  # one all-reduce of T fp32


def test_megatron_sp_by_hand():
    """Megatron with SP: the embedding's reduce-scatter forward and all-gather backward (2 x 48.744 us), the output
    layer's input all-gather forward (48.744 us, synchronous), its backward reduce-scatter and re-gather, each 0.189 x
    48.744 us behind the wgrad and dgrad GEMMs, and the loss's three all-reduces (3 x 6.844 us): 185.19 us a
    micro-batch, 370.38 us a step, inside tp_comm_s."""
    assert AG == pytest.approx(48.744e-6, rel=1e-4)
    assert LOSS_AR == pytest.approx(6.844e-6, rel=1e-3)
    assert 2.0 * 4096 * 64128 * 4096 / 989e12 > AG
    per = 2 * AG + AG + 2 * X * AG + 3 * LOSS_AR
    assert per == pytest.approx(185.19e-6, rel=1e-4)
    _, _, _, js = _job()
    t = js["time"]
    assert t["tp_head_s"] == pytest.approx(M * per, rel=1e-9)
    assert t["tp_head_s"] < t["tp_comm_s"]


def test_megatron_without_sp_by_hand():
    """Without SP: the embedding's all-reduce forward (2 x 48.744 us, identity backward), the output layer's input
    gradient all-reduce async beside its wgrad GEMM (0.189 x 97.488 us), no gather, no re-gather; the loss's three."""
    per = 2 * AG + X * 2 * AG + 3 * LOSS_AR
    _, _, _, js = _job(sequence_parallel=False)
    assert js["time"]["tp_head_s"] == pytest.approx(M * per, rel=1e-9)


def test_torchtitan_synchronous_and_no_regather():
    """torchtitan (DTensor: stack memory.tp_saves_gathered_input): the embedding's RowwiseParallel reduce-scatter and
    its backward all-gather, the output layer's ColwiseParallel all-gather forward and reduce-scatter backward, both
    synchronous (exposed whole), no re-gather; loss_parallel's three all-reduces."""
    per = 2 * AG + 2 * AG + 3 * LOSS_AR
    _, _, _, js = _job(stack="torchtitan", sharding="fsdp", bytes_per_param="mixed16")
    assert js["plan"]["sequence_parallel"]
    assert js["time"]["tp_head_s"] == pytest.approx(M * per, rel=1e-9)


@pytest.mark.parametrize("impl", ["native", "te"])
def test_fused_losses(impl):
    """cross_entropy_fusion native (fused_cross_entropy.py l. 94, 112-114): the max's all-reduce of 4 T B and the
    batched predicted logit and sum of exps' of 8 T B; te (TE @4329ff84 triton/cross_entropy.py l. 76-82): one
    all-gather of 12 T B a rank, 24 T B gathered over 2 ranks."""
    loss = (LOSS_AR + 2 * _ring(2, 8 * 4096)) if impl == "native" else _ring(2, 12 * 4096 * 2)
    per = 3 * AG + 2 * X * AG + loss
    _, _, _, js = _job(cross_entropy_fusion=True, cross_entropy_fusion_impl=impl)
    assert js["time"]["tp_head_s"] == pytest.approx(M * per, rel=1e-9)


def test_placed_on_the_end_stages():
    """At pp 2 the embedding's collectives are the first stage's, the output layer's and the loss's the last's
    (step.tp_comm's parts["head"]); at tp 1 none."""
    from planner import step

    settings, plan, _, _ = explain_job(model="llama3-8b", gpus=8, tp=2, pp=2, sharding="zero1",
                                       bytes_per_param="megatron", global_batch=8, micro_batch=1, seq_len=4096,
                                       stack="megatron", hardware="h100-sxm", precision="bf16")
    sc, lt, _ = step._compute_pass(settings, plan)
    parts = {}
    step.tp_comm(sc, step.Collectives(sc), lt, parts)
    assert float(parts["head"]["first"]) == pytest.approx(2 * AG, rel=1e-9)
    assert float(parts["head"]["last"]) == pytest.approx(AG + 2 * X * AG + 3 * LOSS_AR, rel=1e-9)
    _, _, est, js = explain_job(model="llama3-8b", gpus=8, tp=1, pp=1, sharding="zero1", bytes_per_param="megatron",
                                global_batch=8, micro_batch=1, seq_len=4096, stack="megatron", hardware="h100-sxm",
                                precision="bf16")
    assert "tp_head_s" not in js["time"]
    assert float(est.time_extra["tp_head_s"]) == 0.0
