"""The TP collectives of a low-precision layer at the widths Transformer Engine moves them (planner/step.py [33];
stack_db megatron fp8_recipes tp_collective_bytes), derived by hand from NVIDIA/TransformerEngine @4329ff84
transformer_engine/pytorch:

  - under SP a column-parallel linear (LayerNormLinear QKV, LayerNormMLP / LayerNormLinear FC1) quantizes its input
    before the all-gather (module/layernorm_linear.py l. 207-290, gather_along_first_dim with the quantizer row-wise
    only); delayed and current scaling gather the fp8 data alone, 1 B an element (distributed.py _all_gather_fp8
    l. 982-1072, the scale not gathered);
  - the row-parallel output (the projection, FC2) is reduce-scattered from the GEMM's bf16 output (distributed.py
    reduce_scatter_along_first_dim l. 928-950), 2 B;
  - backward the row-parallel output gradient is quantized and all-gathered (module/base.py grad_output_preprocess
    l. 1610-1631), 1 B under delayed / current scaling, and the column-parallel input gradient reduce-scattered in
    bf16, 2 B;
  - current scaling (tensorwise) all-reduces the local amax (one fp32) over the TP group before each quantized gather
    (layernorm_linear.py l. 1902-1947; csrc/quantizer.cpp l. 919-926).

Llama 3 8B (h 4,096, 32 layers, an attention and an MLP block each) at TP 2 with SP on 8 H100s, T = 4,096 tokens a
micro-batch (micro-batch 1, seq 4,096), m = 2 micro-batches, no recompute, TP overlap off (the megatron stack's
default). A bf16 collective moves T h x 2 B = 33,554,432 B; comm.py inside one NVLink domain, 2 ranks
(conftest.h100_nvlink_ring_s): 1 round of 3.4 us and 1/2 of the buffer at 450 GB/s x 0.8222 = 370 GB/s:
  RS or AG of 33,554,432 B: 3.4 + 45.344 = 48.744 us;  AG of 16,777,216 B (1 B an element): 3.4 + 22.672 = 26.072 us.
"""

from __future__ import annotations

import pytest

from conftest import explain_job, h100_nvlink_ring_s
from planner.catalog import load_stack

_ring = h100_nvlink_ring_s
MSG = 4096 * 4096 * 2  # T h x 2 B
M, L = 2, 32  # micro-batches a step, layers


def _tp(**kw):
    base = dict(model="llama3-8b", gpus=8, tp=2, pp=1, sharding="zero1", bytes_per_param="megatron", global_batch=8,
                micro_batch=1, seq_len=4096, stack="megatron", hardware="h100-sxm")
    _, _, _, js = explain_job(**{**base, **kw})
    assert js["plan"]["microbatches_per_step"] == M
    t = js["time"]
    # tp_comm_s less delayed scaling's amax all-reduces over TP x DP (step.py [34], tests/test_fp8_amax.py) and the
    # backward's wgrad input re-gathers (step.py [35], their own key: tests/test_tp_wgrad_regather.py): the pairs'
    return ((t["tp_comm_s"] - t.get("tp_head_s", 0.0)) - t.get("tp_fp8_amax_s", 0.0) - t.get("tp_wgrad_regather_s", 0.0),
            t.get("tp_sp_norm_grads_s", 0.0), js)


def test_bf16_pairs_unchanged_by_hand():
    """bf16, SP on: per layer 2 blocks x 2 ways x (RS + AG) of 33,554,432 B = 8 x 48.744 = 389.951 us; m x L x that
    = 24.957 ms, plus the SP norm gradients' all-reduce once a step (step.py [27], its own key). Without SP: per
    layer 2 blocks x 2 ways x AR(33,554,432 B), AR = 2 rounds + 2 x 1/2 of the buffer = 2 x 48.744 us: the same
    24.957 ms."""
    per_layer = 2 * 2 * (_ring(2, MSG) + _ring(2, MSG))
    assert per_layer == pytest.approx(389.951e-6, rel=1e-5)
    tp, norm, js = _tp(precision="bf16")
    assert js["plan"]["sequence_parallel"]
    assert tp - norm == pytest.approx(M * L * per_layer, rel=1e-12)
    assert M * L * per_layer == pytest.approx(24.957e-3, rel=1e-4)
    tp_nosp, norm_nosp, _ = _tp(precision="bf16", sequence_parallel=False)
    assert tp_nosp - norm_nosp == pytest.approx(M * L * per_layer, rel=1e-12)


def test_delayed_tp2_sp_layer_by_hand():
    """fp8 delayed, SP on: per block forward RS(2 B) 48.744 + AG(1 B) 26.072, backward AG(1 B, the output gradient)
    26.072 + RS(2 B, the input gradient) 48.744 = 149.631 us; per layer (2 blocks) 299.263 us against bf16's 389.951:
    90.688 us less, m x L x 90.688 us = 5.804 ms less a step. The SP norm gradients' all-reduce is the same."""
    per_layer = 2 * (2 * _ring(2, MSG) + 2 * _ring(2, MSG / 2))
    assert per_layer == pytest.approx(299.263e-6, rel=1e-5)
    assert _ring(2, MSG / 2) == pytest.approx(26.072e-6, rel=1e-4)
    tp, norm, js = _tp(precision="fp8", fp8_recipe="delayed")
    assert js["plan"]["sequence_parallel"]
    assert tp - norm == pytest.approx(M * L * per_layer, rel=1e-12)
    # beside them in tp_comm_s: the amax buffers' all-reduces over the 8 ranks of TP x DP, 1,536 B and 1,024 B (32
    # layers x 4 GEMMs x 3 / 2 fp32), 15.0306 + 15.0204 us a micro-batch (NCCL's LL ring, comm.py "Protocols": 6.6 +
    # 14 x 0.6 us + 1.75 S / 87.7 GB/s; tests/test_fp8_amax.py)
    assert js["time"]["tp_fp8_amax_s"] == pytest.approx(M * 30.0511e-6, rel=1e-5)
    tp16, norm16, _ = _tp(precision="bf16")
    assert norm == norm16
    assert tp16 - tp == pytest.approx(M * L * 4 * (_ring(2, MSG) - _ring(2, MSG / 2)), rel=1e-9)
    assert tp16 - tp == pytest.approx(5.804e-3, rel=1e-3)


def test_fp8_without_sp_keeps_bf16_all_reduces():
    """Without SP a TE linear pair all-reduces the GEMMs' bf16 outputs (linear.py l. 517-521 allreduce; the input
    gradient's l. 1044): fp8 delayed moves what bf16 moves."""
    tp8, _, _ = _tp(precision="fp8", fp8_recipe="delayed", sequence_parallel=False)
    tp16, _, _ = _tp(precision="bf16", sequence_parallel=False)
    assert tp8 == tp16


def test_tensorwise_amax_all_reduce():
    """Current scaling (tensorwise): the widths of delayed, and before each of the layer's 4 quantized gathers (2 blocks
    x the forward input and the backward output gradient) an all-reduce of one fp32 amax over the 2 TP ranks: 2 rounds
    of 3.4 us and 2 x 1/2 x 4 B at 370 GB/s = 6.800 us; m x L x 4 x 6.800 us = 1.741 ms more than delayed."""
    amax = 2 * 3.4e-6 + 4 / (450e9 * 0.8222222222222222)
    assert amax == pytest.approx(6.800e-6, rel=1e-4)
    tw, _, _ = _tp(precision="fp8", fp8_recipe="tensorwise")
    dl, _, _ = _tp(precision="fp8", fp8_recipe="delayed")
    assert tw - dl == pytest.approx(M * L * 4 * amax, rel=1e-9)
    assert tw - dl == pytest.approx(1.741e-3, rel=1e-3)


def test_bf16_end_layers_pay_bf16_widths():
    """Megatron --first-last-layers-bf16 (1 and 1; tensorwise: delayed refuses it) keeps layers 0 and 31 outside the
    fp8 autocast: their TP collectives at bf16, 389.951 us a layer; the other 30 at tensorwise's, 299.263 us + 4
    amax all-reduces of 6.800 us. m x (30 x 326.463 + 2 x 389.951) us = 21.147 ms."""
    amax = 2 * 3.4e-6 + 4 / (450e9 * 0.8222222222222222)
    fp8_layer = 2 * (2 * _ring(2, MSG) + 2 * _ring(2, MSG / 2)) + 4 * amax
    bf16_layer = 2 * 2 * 2 * _ring(2, MSG)
    tp, norm, _ = _tp(precision="fp8", fp8_recipe="tensorwise", bf16_layers_at_start=1, bf16_layers_at_end=1)
    assert tp - norm == pytest.approx(M * (30 * fp8_layer + 2 * bf16_layer), rel=1e-9)
    assert M * (30 * fp8_layer + 2 * bf16_layer) == pytest.approx(21.147e-3, rel=1e-4)


def test_torchtitan_tp_stays_bf16():
    """torchtitan @e347b1e5e applies torchao's Float8ColwiseParallel / Float8RowwiseParallel only where "float8" is a
    member of model.converters (models/llama3/infra/parallelize.py l. 76-94), a name that commit does not register
    ("quantize.linear.float8"): its TP collectives stay bf16 under the float8 recipes (no tp_collective_bytes). The
    tensorwise casts' amax all-reduces on the TP-sharded DTensors (step.py [39], tp_fp8_dynamic_amax_s) are all the
    fp8 plan's tp_comm adds (issue ttamax: before it the two were equal)."""
    base = dict(model="llama3-8b", gpus=8, tp=2, pp=1, sharding="fsdp", global_batch=8, micro_batch=1, seq_len=4096,
                stack="torchtitan", hardware="h100-sxm")
    _, _, _, js8 = explain_job(**base, precision="fp8", fp8_recipe="tensorwise")
    _, _, _, js16 = explain_job(**base, precision="bf16")
    t8, t16 = js8["time"], js16["time"]
    assert t8["tp_fp8_dynamic_amax_s"] > 0 and "tp_fp8_dynamic_amax_s" not in t16
    assert (t8["tp_comm_s"] - t8.get("tp_head_s", 0.0) - t8["tp_fp8_dynamic_amax_s"]) == pytest.approx(
        t16["tp_comm_s"] - t16.get("tp_head_s", 0.0), rel=1e-12)
    st = load_stack("torchtitan")
    assert all(r.tp_collective_bytes is None for r in st.fp8_recipes.values())


def test_megatron_table_widths():
    """The megatron entry's table by recipe (stack_db/megatron.yaml, with its sources): delayed and tensorwise 1 B (the
    fp8 data alone); MXFP8 1 B + one e8m0 (1 B) scale per 32 = 1.03125 B for the row-wise input, the output gradient
    row- and column-wise 2.0625 B; blockwise 1 B + one fp32 (4 B) scale per 128 = 1.03125 B, 2.0625 B; NVFP4 0.5 B +
    one e4m3 (1 B) scale per 16 = 0.5625 B, 1.125 B; reduce-scatters 2 B; amax all-reduces 4 B (tensorwise), 8 B
    (NVFP4: the row- and column-wise amax coalesced), none for the others."""
    t = {n: r.tp_collective_bytes for n, r in load_stack("megatron").fp8_recipes.items()}
    want = {"delayed": (1.0, 1.0, 0.0), "tensorwise": (1.0, 1.0, 4.0), "mxfp8": (1 + 1 / 32, 2 * (1 + 1 / 32), 0.0),
            "blockwise": (1 + 4 / 128, 2 * (1 + 4 / 128), 0.0), "nvfp4": (0.5 + 1 / 16, 2 * (0.5 + 1 / 16), 8.0)}
    assert set(t) == set(want)
    for n, (ag, go, amax) in want.items():
        assert (t[n].input_all_gather, t[n].grad_output_all_gather, t[n].amax_all_reduce_bytes) == (ag, go, amax), n
        assert t[n].output_reduce_scatter == t[n].grad_input_reduce_scatter == 2.0, n


def test_dsv3_mla_latents_at_fp8_widths():
    """DeepSeek-V3 on the megatron stack (the latents' gathers, step.py [32]; tests/test_mla_tp_collectives.py's job:
    tp 2 with SP, 8 H100s, T = 4,096, m = 2), fp8 delayed against bf16. The up projections are Transformer Engine
    column-parallel linears (TEColumnParallelLinear: input quantized, then gathered) and linear_proj a row-parallel
    one (its output gradient quantized, then gathered); the rotary key's gather is Megatron's own mapping (bf16) and
    the reduce-scatters bf16. Per MLA layer: AG(T r_q) 20.404 -> 11.902 us, AG(T r_kv) 9.068 -> 6.234 us, and
    backward AG(T h) 82.752 -> 43.076 us: 51.012 us less; the 3 dense layers' MLP pair, its forward input and backward
    output-gradient gathers 82.752 -> 43.076 us: 79.352 us less; the 58 MoE layers' shared experts' own pair (step.py
    [37]: TE column- / row-parallel linears, as a dense MLP's) the same 79.352 us less; the expert-TP pair bf16 (etp 1:
    none). m x (61 x 51.012 + (3 + 58) x 79.352) us = 15.904 ms less a step."""
    from test_mla_tp_collectives import _job

    col = 4096 * 2
    mla = ((_ring(2, col * 1536) - _ring(2, col * 768)) + (_ring(2, col * 512) - _ring(2, col * 256))
           + (_ring(2, col * 7168) - _ring(2, col * 3584)))
    dense = 2 * (_ring(2, col * 7168) - _ring(2, col * 3584))
    assert (mla, dense) == (pytest.approx(51.012e-6, rel=1e-4), pytest.approx(79.352e-6, rel=1e-4))
    _, _, _, b16 = _job("deepseek-v3")
    _, _, _, f8 = _job("deepseek-v3", precision="fp8", fp8_recipe="delayed")
    # fp8's tp_comm_s also holds delayed scaling's amax all-reduces over TP x DP (step.py [34]; tests/test_fp8_amax.py);
    # both hold the backward's wgrad input re-gathers (step.py [35]), apart
    amax = f8["time"]["tp_fp8_amax_s"]
    assert amax > 0 and "tp_fp8_amax_s" not in b16["time"]
    pairs = [(t["tp_comm_s"] - t.get("tp_head_s", 0.0)) - t["tp_wgrad_regather_s"] for t in (b16["time"], f8["time"])]
    assert pairs[0] - (pairs[1] - amax) == pytest.approx(2 * (61 * mla + (3 + 58) * dense), rel=1e-9)
    assert 2 * (61 * mla + (3 + 58) * dense) == pytest.approx(15.904e-3, rel=1e-4)
