"""fp8 attention under context parallelism: the q, k, v Transformer Engine's CP attention saves (issue 21/22,
memory.py [fa8], stack_db megatron fp8_recipes fp8_attention cp_qkv_saved_bytes, cp_comm_types
fp8_kernel_saves_qkv). NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py: AttnFuncWithCPAndKVP2P.forward (p2p, a2a+p2p) saves its own q and
kv, under MXFP8 the bf16 ones (q_fp8 None, l. 1536; f16_tensors = (q, kv, out_f16), l. 2153-2154), under
delayed and current scaling the fp8 data (l. 2150); AttnFuncWithCPAndKVAllGather.forward the same (MXFP8
f16_tensors = (q, k, v, out_f16), l. 3418; else q_fp8_save, ... l. 3404-3413); AttnFuncWithCPAndQKVOA2A.forward
the kernel's quantized q_part, k_part, v_part (MXFP8 row- and column-wise, used_in_backward, l. 4092-4099,
4253), as FusedAttnFunc without CP (2.0625 B). Derived from code; no record in tests/data runs fp8 attention."""

from __future__ import annotations

import pytest

# Llama 3 8B on one B200 node (MXFP8 and current scaling train fp8 attention from sm100): tp 1, so every head is
# local: q, k, v elements a token (a + 2 k) d = (32 + 16) x 128 = 6,144; one 8k sequence a micro-batch, T = 8192 / cp
# local tokens, no recompute, pp 1: all 32 layers' saved tensors of one micro-batch in layer_activations
JOB = dict(model="llama3-8b", gpus=8, stack="megatron", precision="fp8", seq_len=8192, global_batch=64,
           micro_batch=1, tp=1, pp=1, recompute="none", hardware="b200")
QKV, L = (32 + 2 * 8) * 128, 32


def _delta(explain, cp, recipe, **kw):
    """fp8 attention's change to the saved layer activations, bytes a local token a layer."""
    job = dict(JOB, cp=cp, fp8_recipe=recipe, **kw)
    off = explain(**job)[3]["memory"]["terms"]["layer_activations"]
    on = explain(**job, fp8_attention=True)[3]["memory"]["terms"]["layer_activations"]
    return (on - off) / (8192 // cp) / L


@pytest.mark.parametrize("cp", [2, 4])
def test_mxfp8_ring_saves_bf16_qkv(explain, cp):
    """p2p: the bf16 q, kv (2 B, as bf16 attention's), not the 2.0625 B MXFP8 copies: 0 B a token a layer where
    the non-CP kernel saves 384 B more (6,144 x 0.0625; before this change 384 B at every cp)."""
    assert _delta(explain, 1, "mxfp8") == pytest.approx(QKV * 0.0625, rel=1e-12)  # 384
    assert _delta(explain, cp, "mxfp8") == pytest.approx(0.0, abs=1e-9)
    assert _delta(explain, cp, "mxfp8", cp_comm_type="all_gather") == pytest.approx(0.0, abs=1e-9)


def test_mxfp8_hierarchical_runs_the_ring(explain):
    """a2a+p2p (2 x 2) is AttnFuncWithCPAndKVP2P: the bf16 q, kv saved."""
    d = _delta(explain, 4, "mxfp8", cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[2, 2])
    assert d == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("cp", [2, 4])
def test_mxfp8_a2a_saves_the_kernels_copies(explain, cp):
    """a2a's one kernel saves its quantized q_part, k_part, v_part row- and column-wise: 384 B a token a layer
    more than bf16, as without CP (cp_comm_types fp8_kernel_saves_qkv)."""
    assert _delta(explain, cp, "mxfp8", cp_comm_type="a2a") == pytest.approx(QKV * 0.0625, rel=1e-12)


@pytest.mark.parametrize("cct", [None, "a2a", "all_gather"])
def test_current_scaling_saves_fp8_data_under_cp(explain, cct):
    """current scaling: every variant saves the fp8 data, 1 B: 6,144 B a token a layer less, as at cp 1."""
    kw = {} if cct is None else {"cp_comm_type": cct}
    assert _delta(explain, 2, "tensorwise", **kw) == pytest.approx(-QKV * 1.0, rel=1e-12)
    assert _delta(explain, 1, "tensorwise") == pytest.approx(-QKV * 1.0, rel=1e-12)


def test_hand_figure_mxfp8_cp2(explain):
    """cp 2, fp8 attention on: a2a saves 384 B a token a layer more q, k, v than the ring (2.0625 against 2 B) and
    its kernel's head-split output beside the all-to-all's (context_parallel.saved_out_bytes 2 B x a d = 8,192 B,
    memory.py [cp2]): 4,096 local tokens x 32 layers x 8,576 B = 1,124,073,472 B; before this change the ring
    priced the same 384 B and the difference was 8,192 B alone (1,073,741,824 B)."""
    job = dict(JOB, cp=2, fp8_recipe="mxfp8", fp8_attention=True)
    ring = explain(**job)[3]["memory"]["terms"]["layer_activations"]
    a2a = explain(**job, cp_comm_type="a2a")[3]["memory"]["terms"]["layer_activations"]
    assert a2a - ring == 4096 * 32 * (QKV * 0.0625 + 2 * 32 * 128) == 1_124_073_472
