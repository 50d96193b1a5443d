"""Eager core attention (attention: eager), timed as what Megatron-LM's local core attention runs
(planner/layers/attention.py [9], compute.eager_core_terms): two batched GEMMs forward and four
backward over the [b a/t, s, s] scores, each the longer of its GEMM-model time and its
compulsory traffic (roofline), plus the stack's scale-mask-softmax and dropout bytes a score
element. The figures below are worked by hand from the kernels' source (stack_db/megatron.yaml
sources) and the A100 entry's datasheet numbers, not from the functions under test.
"""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_hardware, load_stack
from planner.compute import eager_core_terms
from planner.errors import PlannerError
from planner.layers import context
from planner.layers.attention import Attention
from planner.plan import PlanArrays
from planner.stacks import kernel_bytes

def ctx_of(tp=1, seq=8):
    """One sequence of seq tokens on one GPU (T = seq), TP tp."""
    return context(PlanArrays(tp=tp, cp=1, pp=1, vpp=1, dp=1, mbs=1, gbs=1, seq=seq, sharding=0, shard=1,
                              recompute=0, sp=0, schedule=0, precision=0))


A100_HBM = 2.039e12 * 0.90  # hbm_TBps x HBM_EFFICIENCY (planner/efficiencies.py)
A100_PLATEAU = 271.2e12 * 0.85  # MAMF bf16 x SUSTAINED_TENSOR_FRACTION, at the 400 W TDP (power fraction 1)
# The K loop's rate (compute [5a]): the MAMF figure less its bf16 output's write at its K 5,120,
# 1 / (1/271.2e12 - 2 / (2 x 5120 x 1.8351e12)) = 279.26e12, x 0.85 = 237.37 TFLOP/s; a GEMM's time
# (2MNK / A100_LOOP + 2 B x MN / A100_HBM) / useful fraction (the write at the streaming rate).
A100_LOOP = 279.2606e12 * 0.85


def _gemm(m, n, k, useful):
    """compute.gemm_time by hand: the K loop, then the output's write, over the useful fraction."""
    return (2.0 * m * n * k / A100_LOOP + 2.0 * m * n / A100_HBM) / useful


@pytest.mark.parametrize("stack", ["megatron", "megatron-deepspeed"])
def test_score_bytes_per_element(stack):
    """Megatron-LM @50a4b5fa02 scaled_upper_triang_masked_softmax.h: the forward reads the row's
    unmasked half (2 B x 1/2) and writes the whole row (2): 3; the backward reads the gradient and
    the saved output on that half (4 x 1/2) and writes 2: 4. PyTorch's fused dropout reads 2, writes
    2 and a 1-byte mask: 5; its backward reads the gradient 2 and the mask 1, writes 2: 5. So the
    memory-bound kernels move 8 B a score element forward and 9 backward with dropout, 3 and 4
    without; the GEMMs add their own 2 B per pass over the scores (timed in the roofline)."""
    kb = kernel_bytes(load_stack(stack), 0)
    fwd = kb["score_softmax"] + kb["score_dropout"]
    bwd = kb["score_softmax_bwd"] + kb["score_dropout_bwd"]
    assert (fwd, bwd) == (8.0, 9.0)
    assert (kb["score_softmax"], kb["score_softmax_bwd"]) == (3.0, 4.0)


@pytest.mark.parametrize("stack,seq,fwd,bwd", [
    ("megatron", 4096, 3.0, 4.0),  # Megatron-Core's fused kernels take sk <= 4096
    ("megatron", 8192, 29.0, 33.0),  # forward_torch_softmax: .float() 6, masked_fill_ 9, softmax 8, cast back 6
    ("megatron-deepspeed-2021", 2048, 3.0, 4.0),  # the 2021 fork (b56b50bb fused_softmax.py l. 132): sk <= 2048
    ("megatron-deepspeed-2021", 4096, 37.0, 41.0),  # its fallback adds the query-key layer scaling multiply, 8 each way
    ("megatron-deepspeed", 4096, 3.0, 4.0),  # microsoft's fork @f4157bea is_kernel_available l. 158: sk <= 4096
    ("megatron-deepspeed", 8192, 37.0, 41.0),
    ("megatron-deepspeed-bigscience", 4096, 3.0, 4.0),  # BigScience's @497aa1bf l. 171: sk <= 4096
    ("megatron-deepspeed-bigscience", 8192, 37.0, 41.0),
])
def test_unfused_softmax_beyond_the_fused_kernels_keys(stack, seq, fwd, bwd):
    """The softmax the stack runs at this key length, bytes a score element (stack sources)."""
    hw = load_hardware("a100-sxm-80gb")
    kb = kernel_bytes(load_stack(stack), 0)
    core = Attention(h=1024, a=16, k=16, d=64, norm=2048).eager_core(ctx_of(seq=seq))
    f, b = eager_core_terms(core, kb, False, hw, A100_HBM)
    scores = seq * 16.0 * seq
    assert f.softmax == pytest.approx(fwd * scores / A100_HBM, rel=1e-12)
    assert b.softmax == pytest.approx(bwd * scores / A100_HBM, rel=1e-12)


def test_one_layer_memory_bound_by_hand():
    """One layer of 16 heads of d = 64, T = s = 2048, tp 1, on A100, with dropout.
    Scores: 2048 x 16 x 2048 = 67,108,864. Each GEMM's compulsory traffic: the score matrix and
    two d-wide operands, 2 B each: 2 x 32768 x (2048 + 2 x 64) = 142,606,336 B = 77.7 us at
    1.835 TB/s; its time on the GEMM model (_gemm): the K loop, 2 x 32768 x 2048 x 64 = 8.59 GFLOP
    at 237.37 TFLOP/s = 36.19 us, then the output's write at 1.835 TB/s, over the useful fraction
    M N / (waves x SMs x tm x tn) (compute.wave_efficiency, tile and wave quantization, the better of
    128 x 256 and 256 x 128 tiles):
    - QK^T [32768, 2048]: write 134,217,728 B = 73.14 us; 256 x 8 = 2048 tiles (either orientation,
      no partial tile) on 108 SMs in 19 waves: 67,108,864 / (19 x 108 x 32,768) = 0.998:
      (36.19 + 73.14) / 0.998 = 109.54 us, above 77.7: the compute side (before the write was
      priced [5a]: 37.3 us, memory-bound);
    - PV [32768, 64]: write 4,194,304 B = 2.29 us; 128 x 256 tiles: 256 x 1 = 256 tiles in 3 waves,
      2,097,152 / (3 x 108 x 32,768) = 0.198; 256 x 128 tiles: 128 x 1 = 128 tiles (each 128 columns
      wide for 64 useful) in 2 waves, 2,097,152 / (2 x 108 x 32,768) = 8/27 = 0.296, the better:
      (36.19 + 2.29) x 27/8 = 129.85 us, above 77.7, compute-bound.
    Forward: 109.54 + 129.85 us GEMMs + (3 + 5) B x 67.1 M / 1.835 TB/s (292.6 us) = 531.9 us;
    backward: 109.54 + 3 x 129.85 us + (4 + 5) B x 67.1 M / 1.835 TB/s = 828.2 us (before the write:
    496.0 and 784.1 us)."""
    hw = load_hardware("a100-sxm-80gb")
    kb = kernel_bytes(load_stack("megatron"), 0)
    att = Attention(h=1024, a=16, k=16, d=64, norm=2048, dropout=True)
    core = att.eager_core(ctx_of(seq=2048))
    scores = 2048 * 16 * 2048
    traffic = 2.0 * 32768 * (2048 + 2 * 64)
    assert core["scores"] == scores and core["traffic"] == traffic
    compute_qk = _gemm(32768, 2048, 64, (32768 * 2048) / (19 * 108 * 128 * 256))
    compute_pv = _gemm(32768, 64, 2048, (32768 * 64) / (2 * 108 * 256 * 128))
    g = traffic / A100_HBM
    assert g < compute_qk < compute_pv  # both on the roofline's compute side
    assert compute_qk == pytest.approx(109.54e-6, rel=1e-4) and compute_pv == pytest.approx(129.85e-6, rel=1e-4)
    f, b = eager_core_terms(core, kb, True, hw, A100_HBM)
    assert f.gemms == pytest.approx(compute_qk + compute_pv, rel=1e-6)
    assert b.gemms == pytest.approx(compute_qk + 3 * compute_pv, rel=1e-6)
    assert f.softmax == pytest.approx(3.0 * scores / A100_HBM, rel=1e-9)
    assert f.dropout == pytest.approx(5.0 * scores / A100_HBM, rel=1e-9)
    assert f.total == pytest.approx(compute_qk + compute_pv + 8.0 * scores / A100_HBM, rel=1e-6)
    assert f.total == pytest.approx(531.9e-6, rel=1e-3)
    assert b.total == pytest.approx(compute_qk + 3 * compute_pv + 9.0 * scores / A100_HBM, rel=1e-6)
    assert b.total == pytest.approx(828.2e-6, rel=1e-3)
    f0, b0 = eager_core_terms(core, kb, False, hw, A100_HBM)  # no dropout: no dropout kernels (p = 0)
    assert f0.dropout == 0.0
    assert b0.total == pytest.approx(compute_qk + 3 * compute_pv + 4.0 * scores / A100_HBM, rel=1e-6)


def test_alibi_bias_through_baddbmm_by_hand():
    """ALiBi (layers/attention.py [12]; BigScience's fork @8387ae17 transformer.py l. 283-327, PyTorch's CUDA baddbmm
    @002253ce Blas.cpp): the [b a/t, 1, s] bias is baddbmm's input with beta != 0, so PyTorch copies it, expanded,
    into the [b a/t, s, s] result (the bias read once, 2 B x 32768, every score element written, 2 B) and cuBLAS
    reads that buffer back as C (2 B a score element). The layer of test_one_layer_memory_bound_by_hand (16 heads of
    64, T = s = 2048, tp 1, A100): copy 2 x (67,108,864 + 32,768) B = 134,283,264 B = 73.2 us at 1.835 TB/s; the
    forward scores GEMM's traffic 142,606,336 + 134,217,728 B = 276,824,064 B = 150.85 us, now above its time on
    the GEMM model (109.54 us, that test's: the K loop and the write [5a]) where without the bias it was below:
    the bias adds 150.85 - 109.54 = 41.31 us to the forward GEMMs; the context GEMM and the backward unchanged:
    the context GEMM PV [32768, 64] compute-bound at 129.85 us (that test's), so the forward GEMMs 150.85 +
    129.85 = 280.7 us (276.6 us before the write was priced, when the bias added its whole 73.1 us read)."""
    hw = load_hardware("a100-sxm-80gb")
    kb = kernel_bytes(load_stack("megatron-deepspeed"), 0)
    plain = Attention(h=1024, a=16, k=16, d=64, norm=2048, rope=False)
    alibi = Attention(h=1024, a=16, k=16, d=64, norm=2048, rope=False, alibi=True)
    c0, c1 = plain.eager_core(ctx_of(seq=2048)), alibi.eager_core(ctx_of(seq=2048))
    scores = 2048 * 16 * 2048
    assert "alibi_copy" not in c0 and c1["alibi_copy"] == 2.0 * (scores + 32768) == 134_283_264
    assert c1["alibi_read"] == 2.0 * scores
    f0, b0 = eager_core_terms(c0, kb, False, hw, A100_HBM)
    f1, b1 = eager_core_terms(c1, kb, False, hw, A100_HBM)
    assert "alibi" not in f0.keys() and f1.alibi == pytest.approx(134_283_264 / A100_HBM, rel=1e-12)
    assert f1.alibi == pytest.approx(73.2e-6, rel=1e-3)
    pv = _gemm(32768, 64, 2048, (32768 * 64) / (2 * 108 * 256 * 128))
    qk = _gemm(32768, 2048, 64, (32768 * 2048) / (19 * 108 * 128 * 256))
    assert pv > 2.0 * 32768 * (2048 + 2 * 64) / A100_HBM  # the context GEMM on the compute side
    assert 2.0 * 32768 * (2048 + 2 * 64) / A100_HBM < qk < 276_824_064 / A100_HBM  # the scores GEMM: bias-bound
    assert f1.gemms == pytest.approx((276_824_064 / A100_HBM) + pv, rel=1e-6)
    assert f1.gemms == pytest.approx(280.7e-6, rel=1e-3)
    assert f1.gemms - f0.gemms == pytest.approx(276_824_064 / A100_HBM - qk, rel=1e-6)  # 41.31 us
    assert b1.alibi == 0.0 and b1.total == pytest.approx(b0.total, rel=1e-12)
    assert f1.total - f0.total == pytest.approx(134_283_264 / A100_HBM + 276_824_064 / A100_HBM - qk, rel=1e-6)


def test_alibi_model_field_reaches_the_core():
    """position_embedding alibi (a model field) builds attention without rotary and with the bias path; rope none."""
    from planner.catalog import load_model
    from planner.layers import layer_list

    m = load_model("megatron-gpt-1.7b")
    assert not layer_list(m).kinds[0].mixer.alibi
    a = layer_list(m.model_copy(update={"position_embedding": "alibi"})).kinds[0].mixer
    assert a.alibi and not a.rope


def test_compute_bound_head_dim_by_hand():
    """At d = 256 the GEMMs are on the compute side: per GEMM 2 x 32768 x 2048 x 256 = 34.4 GFLOP, a K loop of
    144.75 us at 237.37 TFLOP/s (_gemm); QK^T [32768, 2048] writes 134,217,728 B (73.14 us at 1.835 TB/s), over
    0.998: 218.32 us; PV [32768, 256] writes 16,777,216 B (9.14 us), 256 tiles either orientation in 3 waves
    (0.790): 194.77 us; against 2 x 32768 x (2048 + 512) / 1.835 TB/s = 91.4 us. Forward 413.1 us (338.2 before
    the write was priced [5a])."""
    hw = load_hardware("a100-sxm-80gb")
    kb = kernel_bytes(load_stack("megatron"), 0)
    core = Attention(h=4096, a=16, k=16, d=256, norm=8192).eager_core(ctx_of(seq=2048))
    flops = 2.0 * 32768 * 2048 * 256
    qk = _gemm(32768, 2048, 256, 2048 / (19 * 108))
    pv = _gemm(32768, 256, 2048, 256 / (3 * 108))
    assert flops / A100_LOOP == pytest.approx(144.75e-6, rel=1e-4)
    assert 2.0 * 32768 * (2048 + 512) / A100_HBM < pv < qk
    f, b = eager_core_terms(core, kb, False, hw, A100_HBM)
    assert f.gemms == pytest.approx(qk + pv, rel=1e-6)
    assert b.gemms == pytest.approx(qk + 3 * pv, rel=1e-6)
    assert f.gemms == pytest.approx(413.1e-6, rel=1e-3)


def test_tp_splits_the_heads():
    """TP 2 halves the local heads: half the scores, the same per-element bytes."""
    att = Attention(h=1024, a=16, k=16, d=64, norm=2048)
    one, two = att.eager_core(ctx_of(seq=2048)), att.eager_core(ctx_of(tp=2, seq=2048))
    assert two["scores"] == one["scores"] / 2 and two["traffic"] == one["traffic"] / 2


def test_step_prices_the_eager_core(explain):
    """In a step: the Megatron 1.7B (24 layers, 24 heads of 96, dropout) on one A100, micro-batch 1
    x 2048, full recompute: the eager cores take L x (2 forward + backward) per micro-batch, and
    flash attention has no such term. M = 2048 x 24 = 49,152 score rows; each GEMM's traffic
    2 x 49152 x (2048 + 192) B = 220.2 MB, 120.0 us at 1.835 TB/s. Each GEMM's K loop 19.33 GFLOP at
    237.37 TFLOP/s = 81.42 us (_gemm). The scores GEMM [49152, 2048] (K = 96) writes 201,326,592 B
    (109.71 us); 384 x 8 = 3072 tiles (either orientation, no partial tile) in ceil(3072 / 108) = 29
    waves, useful fraction 100,663,296 / (29 x 108 x 32,768) = 0.981: (81.42 + 109.71) / 0.981 =
    194.86 us, the compute side (once forward, once backward). The context GEMM [49152, 96] (K = 2048)
    writes 9,437,184 B (5.14 us); 128 x 256 tiles, 384 in 4 waves, 4,718,592 / (4 x 108 x 32,768) =
    1/3; 256 x 128 tiles, 192 in 2 waves, 4,718,592 / (2 x 108 x 32,768) = 2/3, the better: 129.87 us,
    the compute side (once forward, three times backward). A layer: 2 x (194.86 + 129.87) + 194.86 + 3 x
    129.87 = 3 x 194.86 + 5 x 129.87 = 1,233.9 us; 24 layers 29.61 ms (23.73 ms before the write was
    priced [5a], the scores GEMM then on the memory side at 120.0 us)."""
    job = dict(model="megatron-gpt-1.7b", hardware="a100-sxm-80gb", gpus=1, global_batch=1, micro_batch=1,
               seq_len=2048, recompute="full", sharding="none")
    _, _, _, j = explain(**job, attention="eager")
    t = j["time"]
    g = 2.0 * 49152 * (2048 + 2 * 96) / A100_HBM
    scores = 2048.0 * 24 * 2048
    flops = 2.0 * 49152 * 2048 * 96
    qk = _gemm(49152, 2048, 96, (49152 * 2048) / (29 * 108 * 128 * 256))
    pv = _gemm(49152, 96, 2048, (49152 * 96) / (2 * 108 * 256 * 128))
    assert flops / A100_LOOP == pytest.approx(81.42e-6, rel=1e-4)
    assert g < pv < qk
    assert t["eager_core_gemms_s"] == pytest.approx(24 * (2 * (qk + pv) + qk + 3 * pv), rel=1e-6)
    assert t["eager_core_gemms_s"] == pytest.approx(29.61e-3, rel=1e-3)
    assert t["eager_core_softmax_s"] == pytest.approx(24 * (2 * 3 + 4) * scores / A100_HBM, rel=1e-6)
    assert t["eager_core_dropout_s"] == pytest.approx(24 * (2 * 5 + 5) * scores / A100_HBM, rel=1e-6)
    _, _, _, fl = explain(**job)
    assert "eager_core_s" not in fl["time"] and fl["time"]["compute_s"] < t["compute_s"]


def test_eager_needs_the_stacks_score_kernels(explain):
    """A stack that does not say what its eager core moves refuses attention eager."""
    with pytest.raises(PlannerError, match="eager core attention"):
        explain(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", attention="eager")


@pytest.mark.parametrize("drop", ["score_dropout_bwd", "score_softmax_unfused"])
def test_stack_kernels_give_the_eager_figures_together(drop):
    """A stack file with part of the eager core's figures is refused (compute.eager_core_terms reads all)."""
    from pydantic import ValidationError

    from planner.schema import KernelBytes

    data = load_stack("megatron").kernels.model_dump()
    KernelBytes.model_validate(data)
    with pytest.raises(ValidationError, match="score_"):
        KernelBytes.model_validate({**data, drop: None})


def test_eager_core_attention_refuses_context_parallelism(cli):
    """Megatron-Core's own DotProductAttention (the eager core) asserts context_parallel_size == 1
    (plan.EAGER_CP_SOURCE): explain refuses cp 2 with attention eager, fit searches cp 1 only and
    refuses a pinned --cp 2, each exit 2 naming the source."""
    from conftest import assert_one_error

    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", 16, "--cp", 2, "--attention", "eager",
                         "--global-batch", 16), "attention eager with cp 2", "dot_product_attention.py")
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", 16, "--cp", 2, "--attention", "eager",
                         "--global-batch", 64), "--cp 2 with attention eager")
    r = cli("fit", "--model", "llama3-8b", "--gpus", 16, "--attention", "eager", "--global-batch", 64, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and all(row["plan"]["cp"] == 1 for row in rows)
