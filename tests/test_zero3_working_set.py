"""DeepSpeed ZeRO-3's gathered working set (planner/memory.py [z3]), derived by hand from
microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/partitioned_param_coordinator.py
(fetch_sub_module l. 285-418: the module's own parameters, then a prefetch while the prefetched
count is below min(max_live - gathered, prefetch_bucket); __params_to_release l. 523-554: a module
is kept where the trace reuses it within max_reuse_distance parameters) and stage3.py (l. 537-540
the contiguous IPG buffer of reduce_bucket_size elements; l. 1258-1290 a gradient larger than the
bucket stays its own tensor until the next gradient's hook reduce-scatters it).

Toy layer, four modules in forward order q 3, p 1, u 4, d 4 (parameters), settings L (max live) 10,
P (prefetch bucket) 1, R (reuse distance) 10, B (reduce bucket) 2.

Under full recompute the trace of one layer is the re-run forward q p u d, then the backward d u p q,
then the next layer's. Kept from the re-run to the backward: u (2 x the 4 after it = 8 < 10) and d
(0 < 10); not q (2 x 9) nor p (2 x 8). At each module: gathered = itself + kept + the prefetch of the
next not-gathered modules (each taken while the count so far < min(L - gathered, P) = 1: one module);
in the backward + its gradient + the previous backward module's where above B:
  re-run q: 3 + p 1                               = 4
  re-run p: 1 + u 4                               = 5
  re-run u: 4 + d 4                               = 8
  re-run d: 4 + kept u 4 + (backward u kept: 0) p 1 = 9
  back d:   4 + u 4 + p 1 = 9, gradients d 4 + q 3 (the layer above's, 3 > 2) = 7   -> 16, the peak
  back u:   4 + p 1 = 5, gradients 4 + d 4 = 8                                     -> 13
  back p:   1 + q 3 = 4, gradients 1 + u 4 = 5                                     -> 9
  back q:   3 + next layer's q 3 = 6, gradients 3 + (p 1 <= 2: in the bucket) = 3   -> 9
Without recompute (backward only, nothing kept): back d 4 + u 4 = 8, gradients 4 + 3 = 7 -> 15,
the peak; back u 5 + 8 = 13; back p 4 + 5 = 9; back q 3 + the next layer's d 4 = 7, + 3 = 10.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from planner.memory import FSDP_TERMS, zero3_flush_copies, zero3_layer_peak, zero3_reuse_kept

TOY = dict(stage3_max_live_parameters=10, stage3_prefetch_bucket_size=1, stage3_max_reuse_distance=10,
           reduce_bucket_size=2, stage3_param_persistence_threshold=0, sub_group_size=10)
MODS = [np.float64(3), np.float64(1), np.float64(4), np.float64(4)]


def test_toy_layer_full_recompute():
    """world 1 (the default): every gradient the reduce-scatter takes alone divides it, no copy [z3c]."""
    g, d, c = zero3_layer_peak(MODS, True, TOY)
    assert (float(g), float(d), float(c)) == (9.0, 7.0, 0.0)


def test_toy_layer_no_recompute():
    g, d, c = zero3_layer_peak(MODS, False, TOY)
    assert (float(g), float(d), float(c)) == (8.0, 7.0, 0.0)


def test_toy_no_prefetch_and_no_reuse():
    """prefetch bucket 0 and reuse distance 0: each module alone (fetch_sub_module prefetches nothing
    with a 0 budget; __params_to_release keeps nothing): back u 4 + gradients 4 + d 4 = 12."""
    g, d, c = zero3_layer_peak(MODS, True, {**TOY, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0})
    assert (float(g), float(d), float(c)) == (4.0, 8.0, 0.0)


def test_toy_bucket_copies_world_3():
    """DP world 3, bucket 2 (q 3, u 4, d 4 above it: each reduce-scattered alone at the next hook;
    reduce_scatter_coalesced copies one the world does not divide, padded to 3 x ceil(n / 3), and reduces
    one it divides in place). Backward d u p q, then the layer below's d: at u's hook d's 4 -> 6; at p's
    u's 4 -> 6; at q's p's 1 (alone: 1 is not a multiple of 3) -> 3; at the next d's q's 3 in place -> 0.
    Moments (the docstring's, + the copy): back d 16 + 0, back u 13 + 6 = 19 (the peak), back p 9 + 6,
    back q 9 + 3; without recompute back u 13 + 6 = 19 too."""
    assert [float(c) for c in zero3_flush_copies(MODS, 2.0, 3.0)] == [3.0, 6.0, 6.0, 0.0]
    for full in (True, False):
        g, d, c = zero3_layer_peak(MODS, full, TOY, 3.0)
        assert (float(g), float(d), float(c)) == (5.0, 8.0, 6.0)


# Megatron-DeepSpeed's hook order [z3h]: p, u and d (attn_out, mlp_up, mlp_down) add their bias outside the linear
# (skip_bias_add) or follow a LayerNorm module, so a small gradient's hook fires before their GEMM and flushes a big
# previous gradient then; q (qkv, its bias inside F.linear) sees none.
EARLY = [False, True, True, True]


def test_toy_early_hooks_full_recompute():
    """An early module has two moments: at its early hook the gathered set + the previous (backward) module's gradient
    where above B (being flushed) + its copy; at its GEMM the gathered set + its own gradient (+ the copy of a flush
    of small ones). World 1, full recompute (the gathered sets as in the module docstring):
      back d: 9 + q's 3 = 12 at the hook; 9 + 4 = 13 at the GEMM    -> 13, the peak (16 in hook-together order)
      back u: 5 + d's 4 = 9; 5 + 4 = 9
      back p: 4 + u's 4 = 8; 4 + 1 = 5
      back q (not early): 6 + 3 (p 1 in the bucket) = 9
    Without recompute back d 8 + 3 = 11, 8 + 4 = 12: the peak (15 before)."""
    g, d, c = zero3_layer_peak(MODS, True, TOY, 1.0, EARLY)
    assert (float(g), float(d), float(c)) == (9.0, 4.0, 0.0)
    g, d, c = zero3_layer_peak(MODS, False, TOY, 1.0, EARLY)
    assert (float(g), float(d), float(c)) == (8.0, 4.0, 0.0)


def test_toy_early_hooks_world_3():
    """World 3 (copies at the hooks of q, p, u, d: 3, 6, 6, 0, test_toy_bucket_copies_world_3): back u's early hook
    flushes d's 4 through the torch.cat, 6, beside u's gathered 5 and d's gradient 4 = 15, the peak (19 before: u's
    own gradient is not yet computed then); back p's hook 4 + 4 + 6 = 14; back d 9 + 4 = 13 at its GEMM."""
    for full in (True, False):
        g, d, c = zero3_layer_peak(MODS, full, TOY, 3.0, EARLY)
        assert (float(g), float(d), float(c)) == (5.0, 4.0, 6.0)


def test_toy_bucket_of_several_gradients():
    """Bucket 5, modules q 3, p 1, u 4, d 6, world 1: d (above 5) leaves alone at u's hook (in place); u 4 and
    p 1 fill the contiguous buffer to 5, and q's hook (5 + 3 > 5) flushes the two: a torch.cat of 5 elements."""
    mods = [np.float64(3), np.float64(1), np.float64(4), np.float64(6)]
    assert [float(c) for c in zero3_flush_copies(mods, 5.0, 1.0)] == [5.0, 0.0, 0.0, 0.0]


def test_toy_bucket_without_a_large_gradient_is_its_bound():
    """Bucket 20 above every module: the buffer fills across layers, flushed at any module's hook with at most 20."""
    assert [float(c) for c in zero3_flush_copies(MODS, 20.0, 3.0)] == [20.0] * 4


def test_toy_reuse_kept():
    """Reuse distance 40, output layer 2, a layer 12 (q 3, p 1, u 4, d 4), 10 layers. Without recompute module j
    of the layer i below the last is kept where 2 (A_j + 12 i) + 2 < 40 (A_j the parameters after it: q 9, p 8,
    u 4, d 0): q and p of the last layer only (20, 18; 44, 42 the layer below), u and d of the last two (10, 34;
    2, 26): kept 3 + 1 + 2 x 4 + 2 x 4 = 20, of the layers below the last 8. Under full recompute (12 - m_j) +
    36 i + 2 < 40 (to its re-run): the last layer's four (11, 13, 10, 10; the layer below's 47 and up): 12, 0."""
    k, b = zero3_reuse_kept(MODS, np.asarray(False), 2.0, 10, 40.0)
    assert (float(k), float(b)) == (20.0, 8.0)
    k, b = zero3_reuse_kept(MODS, np.asarray(True), 2.0, 10, 40.0)
    assert (float(k), float(b)) == (12.0, 0.0)
    k, b = zero3_reuse_kept(MODS, np.asarray(False), 2.0, 1, 40.0)  # one layer: only its own
    assert (float(k), float(b)) == (12.0, 0.0)


# GPT-3 175B (h = 12,288, d_ff = 4h, biases, LayerNorm, tied output), tp 1: a layer's modules qkv 3h^2,
# proj h^2, fc1 = fc2 4h^2. DeepSpeed's defaults: L 1e9, P 5e7, R 1e9, B 5e8. Full recompute: only fc2 is
# kept from its re-run (2 x 4h^2 = 1.21e9 >= R for fc1). The tied word embedding (50,304 x h = 618,135,552, TIED: the padded rows) is
# gathered all through the backward [z3t] and counts in __n_available_params, so the prefetch budget at a module is
# min(L - its parameters - TIED, P): negative at fc2, fc1 (4h^2 = 604M) and qkv (3h^2 = 453M), 5e7 at proj (151M,
# which prefetches qkv whole). In Megatron-DeepSpeed's hook order [z3h] fc1's bias hook (bias-GeLU) flushes fc2's
# gradient (> B) before fc1's GEMM: back fc1 4 h^2 gathered + fc2's 4 h^2 at its hook, + its own 4 h^2 at its GEMM
# (12 h^2 in hook-together order, fc2's beside both); back fc2's GEMM 4 h^2 gathered (fc1 no longer prefetched: 12 h^2
# untied) + its gradient 4 h^2 (qkv of the layer above, 453M < B, is in the buffer); back proj's hook 4 h^2 (+ qkv)
# + fc1's 4 h^2. The peak 8 h^2, first at back fc2's GEMM; beside it the tied weight and its held gradient,
# 2 x TIED (zero3_tied_output). Persistent: 13 h a layer (biases 3h + h + 4h + h, two LayerNorms 2 x 2h; the widest,
# 4h = 49,152, within 1e5). IPG buffer: 2 B x 5e8.
H2 = 12288**2
PERSIST = 2 * 13 * 12288 * 96
TIED = 50304 * 12288  # GPT-3's 50,257 tokens padded to 128 x 393 at tp 1 (stack_db megatron-deepspeed vocab_padding)


def _gpt3(explain, **kw):
    job = dict(model="gpt3-175b", gpus=64, stack="megatron-deepspeed", sharding="fsdp", recompute="full",
               micro_batch=1, global_batch=64, hardware="a100-sxm-80gb")
    return explain(**{**job, **kw})[3]["memory"]["terms"]


def _z3(t):
    """The ZeRO-3 terms (working set, gradients awaiting their reduce-scatter, IPG bucket, persistent), and that
    FSDP's layer-unit terms are empty (DeepSpeed gathers per submodule instead; Megatron-FSDP's double-buffer pools,
    mfsdp_double_buffer, too: seven terms)."""
    others = [k for k in FSDP_TERMS if not k.startswith("zero3_")]
    assert len(others) == 7 and [t[k] for k in others] == [0.0] * 7
    return t["zero3_working_set"], t["zero3_unreduced_grads"], t["zero3_ipg_bucket"], t["zero3_persistent"]


def _z3_new(t):
    """The three ZeRO-3 terms priced since issue 21's z3pieces: the bucket's torch.cat copy [z3c], the last layers
    kept gathered [z3r], the optimizer step's excess [z3s]."""
    return t["zero3_bucket_copy"], t["zero3_reuse_kept"], t["zero3_step_grads"]


def test_gpt3_defaults(explain):
    """Back fc2's GEMM: fc2 4 h^2 gathered (the tied weight leaves no prefetch budget), fc2's gradient 4 h^2; the tied
    weight and its held gradient beside them, 2 B x 2 x 618,135,552."""
    t = _gpt3(explain)
    assert _z3(t) == pytest.approx((2 * 4 * H2, 2 * 4 * H2, 2 * 5e8, PERSIST), rel=1e-12)
    assert t["zero3_tied_output"] == 2 * 2 * TIED


def test_gpt3_reduce_bucket_from_the_job(explain):
    """reduce_bucket_size 1e8 (job field deepspeed_zero3): the IPG buffer 2 B x 1e8, and qkv's gradient
    (3 h^2 = 4.5e8 > 1e8) now waits for the next hook, but the layer LayerNorm's hooks and fc2's bias hook flush it
    before fc2's GEMM [z3h]: back fc2 4 h^2 gathered + qkv's 3 h^2 at the hook (7 h^2), + its own 4 h^2 at the
    GEMM (8 h^2, the peak; 11 h^2 in hook-together order; 12 h^2 untied, fc1 prefetched); back qkv 3 h^2 + its own
    and proj's (h^2 = 1.5e8 > 1e8 now) 7 h^2; back proj's hook 4 h^2 + fc1's 4 h^2, the same 8 h^2 later."""
    t = _gpt3(explain, deepspeed_zero3={"reduce_bucket_size": 100_000_000})
    assert _z3(t) == pytest.approx((2 * 4 * H2, 2 * 4 * H2, 2 * 1e8, PERSIST), rel=1e-12)


def test_gpt3_persistence_threshold_zero(explain):
    """stage3_param_persistence_threshold 0: no parameter is persistent (the biases and norms gathered
    with their modules, not priced apart)."""
    t = _gpt3(explain, deepspeed_zero3={"stage3_param_persistence_threshold": 0})
    assert _z3(t) == pytest.approx((2 * 4 * H2, 2 * 4 * H2, 2 * 5e8, 0.0), rel=1e-12)


def test_deepspeed_zero3_refused_on_a_stack_without_it(explain):
    from planner.errors import PlannerError
    with pytest.raises(PlannerError, match="deepspeed_zero3"):
        explain(model="llama3-70b", gpus=64, stack="torchtitan", sharding="fsdp", micro_batch=1, global_batch=64,
                deepspeed_zero3={"reduce_bucket_size": 1})


def test_530b_record():
    """Narayanan et al. 2021 Table 2, ZeRO-3 529.6B on 640 A100s (h 20,480, 105 layers, tp 1, full
    recompute): a module's gathered 4 h^2 (fc2 or fc1: larger than max-live, so nothing is prefetched) and one
    4 h^2 gradient, 8 h^2 x 2 B, at several moments [z3h]: back fc2's GEMM (qkv's 3 h^2 of the layer above flushed by
    the LayerNorm's and fc2's bias hooks before it), fc1's bias hook (fc2's gradient flushed, fc1's not computed
    yet), fc1's GEMM (fc2's freed); proj's bias hook (proj h^2, fc1's 4 h^2 flushed) no longer prefetches qkv, the
    tied weight (51,200 x h = 1,048,576,000 > L) holding the prefetch budget [z3t]; 12 h^2 in hook-together order
    (fc1's and fc2's gradients beside fc1's weights). + the tied weight gathered and its gradient held beside them,
    2 B x 2 x 1,048,576,000 = 4,194,304,000 B (3.906 GiB) + the IPG buffer 2 B x 5e8 + persistent 2 B x 13 h x 105 =
    11,961,100,800 B (11.14 GiB; FSDP's layer units priced 37.5 GiB). The gate: 64.955 GiB of the A100's 79.2 (61.05
    before [z3t], 64.17 before the hook order)."""
    from planner import validate as V
    from planner.explain import evaluate, to_json

    path = Path(__file__).parent / "data" / "published_runs.yaml"
    rec = next(r for r in V.load_runs(path) if r.id == "narayanan2021-t2-zero3-529.6B-640gpu")
    h2 = 20480**2
    with tempfile.TemporaryDirectory() as d:
        s, p = V.prepare_record(rec, V.new_row(rec), Path(d), path.parent, str(path))
        m = to_json(s, p, evaluate(s, p))["memory"]
    assert _z3(m["terms"]) == pytest.approx((2 * 4 * h2, 2 * 4 * h2, 2 * 5e8, 2 * 13 * 20480 * 105), rel=1e-12)
    # 640 = 2^7 x 5 divides every large gradient (4 h^2 = 2^26 x 25, 3 h^2 = 3 x 2^24 x 25; proj's h^2 = 2^24 x 25
    # leaves alone too): no copy [z3c]; a layer's 5.03e9 parameters and the output layer's 1.05e9 are beyond the
    # reuse distance 1e9: none kept [z3r]; the step (16 + 6 B x 0.83e9 local parameters) is far below [z3s]
    assert _z3_new(m["terms"]) == (0.0, 0.0, 0.0)
    assert m["terms"]["zero3_tied_output"] == 2 * 2 * 51200 * 20480
    assert sum(m["terms"][k] for k in FSDP_TERMS) == 7_766_796_800 + 4_194_304_000
    assert m["total_bytes"] / 2**30 == pytest.approx(64.955, abs=0.001)


def _record_560(rec):
    """The 530B ZeRO-3 run the paper says ran out of memory: 560 GPUs, micro-batch 4, batch 2240 (Table 2's
    starred 2560 row was enlarged from it), every other field the 640-GPU record's."""
    return rec.model_copy(update=dict(id=rec.id.replace("640gpu", "560gpu"), num_gpus=560, dp=560, global_batch_size=2240))


def test_530b_record_on_560_gpus():
    """560 = 2^4 x 5 x 7 divides none of the large gradients: at fc1's bias hook (bias-GeLU's, before fc1's GEMM [z3h])
    fc2's 4 h^2 gradient goes through reduce_scatter_coalesced's torch.cat, 560 x ceil(4 h^2 / 560) = 1,677,721,920
    elements (2 B: 3.125 GiB), beside fc1's gathered weights and fc2's gradient: 12 h^2 + the padding, the peak (proj's
    bias hook flushing fc1's 9 h^2 + the padding, qkv not prefetched beside the tied weight [z3t]; back fc2's hook 10 h^2
    with qkv's 3 h^2 and its copy; 16 h^2 in hook-together order, fc1's own gradient beside them); the tied weight and
    its held gradient beside it (3.906 GiB, as on 640). The gate 64.955 -> 69.842 GiB of the A100's 79.2 (65.94 before
    [z3t], 69.06 before the hook order): fits, the paper's OOM not reproduced (see docs/memory_mechanisms.md)."""
    from planner import validate as V
    from planner.explain import evaluate, to_json

    path = Path(__file__).parent / "data" / "published_runs.yaml"
    rec = _record_560(next(r for r in V.load_runs(path) if r.id == "narayanan2021-t2-zero3-529.6B-640gpu"))
    h2 = 20480**2
    with tempfile.TemporaryDirectory() as d:
        s, p = V.prepare_record(rec, V.new_row(rec), Path(d), path.parent, str(path))
        m = to_json(s, p, evaluate(s, p))["memory"]
    assert _z3(m["terms"]) == pytest.approx((2 * 4 * h2, 2 * 4 * h2, 2 * 5e8, 2 * 13 * 20480 * 105), rel=1e-12)
    assert _z3_new(m["terms"]) == (2 * 560 * 2_995_932, 0.0, 0.0)
    assert m["terms"]["zero3_tied_output"] == 2 * 2 * 51200 * 20480
    assert m["total_bytes"] / 2**30 == pytest.approx(69.842, abs=0.001)
    assert m["fits"]


# Llama 3 8B (h 4,096, 32 layers, GQA 8 x 128, d_ff 14,336 SwiGLU, vocab 128,256, untied), tp 1: a layer's modules
# qkv 4,096 x 6,144 = 25,165,824, proj 16,777,216, gate-up 117,440,512, down 58,720,256 (P = 218,103,808, all below
# the 5e8 bucket); the output layer 525,336,576 (its moment, 2 x 525,336,576, the largest).
P8B, OUT8B = 218_103_808, 525_336_576


def _8b(explain, **kw):
    job = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="fsdp", recompute="full", micro_batch=1,
               global_batch=8, seq_len=1024, hardware="a100-sxm-80gb")
    return explain(**{**job, **kw})[3]["memory"]


def test_8b_reuse_kept_full_recompute(explain):
    """Full recompute: module j of the last layer is kept from its first forward to its re-run where (P - m_j) + out
    < 1e9 (256,559,616 + m_j + ... : (1e9 - out - P + m_j) / 3P in (0, 1): one layer, the layer below's beyond): the
    last layer's P beside the output layer's moment, 2 B x 218,103,808. The output layer's moment is the largest, so
    no layer moment (nor its bucket copy) is."""
    m = _8b(explain)
    assert _z3(m["terms"])[:2] == (2 * OUT8B, 2 * OUT8B)
    assert m["terms"]["zero3_reuse_kept"] == 2 * P8B
    assert m["terms"]["zero3_bucket_copy"] == 0.0


def test_8b_reuse_kept_no_recompute(explain):
    """Without recompute 2 (A_j + i P) + out < 1e9: down (A 0) of the last two layers (2 x 58.7M + out, 2 x 276.8M +
    out), the other three of the last only: P + down = 276,824,064 parameters beside the output layer's moment."""
    m = _8b(explain, recompute="none")
    assert m["terms"]["zero3_reuse_kept"] == 2 * (P8B + 58_720_256)


def test_8b_step_fp32_gradients(explain):
    """The optimizer step [z3s]: the local partition 8,030,261,248 / 8 = 1,003,782,656 parameters is above
    sub_group_size 1e9, so the largest sub-group (at least 1e9) flattens 2 B and converts 4 B x 1e9 at once = 6e9 B,
    beside the states (16 B a local parameter), the IPG buffer 1e9 B, the layers' persistent norms (2 B x 64 x 4,096) and the
    step-long buffers: that moment is the stage's allocated peak. With sub_group_size 1e8 (job) 6e8 B: below the
    backward's peak, no excess."""
    m = _8b(explain)
    t = m["terms"]
    held = sum(t[k] for k in ("weights", "gradients", "master_weights", "adam", "workspaces", "mpu_buffer",
                              "model_buffers", "quantized_weights", "dummy_wgrads"))
    assert t["zero3_step_grads"] > 0
    assert m["allocated_bytes"] == pytest.approx(held + 6e9 + 1e9 + 2 * 64 * 4096, rel=1e-12)
    assert _8b(explain, deepspeed_zero3={"sub_group_size": 100_000_000})["terms"]["zero3_step_grads"] == 0.0


def test_8b_bucket_copy_bound_tp2(explain):
    """tp 2 (dp 4): every module below the bucket and the output layer's moment 2 x 262,668,288 smaller than a layer's
    with the bucket: the contiguous buffer fills across layers and is copied whole at some module's hook, priced at
    its bound, reduce_bucket_size elements: 2 B x 5e8."""
    m = _8b(explain, tp=2)
    assert m["terms"]["zero3_bucket_copy"] == 2 * 5e8


def test_explain_names_each_zero3_term(cli):
    """explain's table has a row for each ZeRO-3 term (2 B x 4 h^2 = 1.12 GiB gathered, 2 B x 4 h^2 = 1.12 GiB of
    gradients, the tied weight and its gradient 2 B x 2 x 618,135,552 = 2.30 GiB, the 2 B x 5e8 = 0.93 GiB bucket,
    2 B x 13 h x 96 = 0.03 GiB persistent) and none for FSDP's layer units, which the plan does not hold; a ZeRO-1
    plan shows no FSDP or ZeRO-3 row at all."""
    job = ["--model", "gpt3-175b", "--gpus", "64", "--stack", "megatron-deepspeed", "--recompute", "full",
           "--micro-batch", "1", "--global-batch", "64", "--hardware", "a100-sxm-80gb"]
    r = cli("explain", *job, "--sharding", "fsdp")
    assert r.exit_code == 0, r.output
    rows = {ln.split("│")[1].strip(): ln.split("│")[3].strip() for ln in r.stdout.splitlines() if ln.count("│") == 4}
    assert rows["ZeRO-3 working set (gathered, prefetched)"] == f"{2 * 4 * H2 / 2**30:.2f}" == "1.12"
    assert rows["ZeRO-3 tied output layer (weight + held gradient)"] == f"{4 * TIED / 2**30:.2f}" == "2.30"
    assert rows["ZeRO-3 gradients awaiting reduce-scatter"] == f"{2 * 4 * H2 / 2**30:.2f}" == "1.12"
    assert rows["ZeRO-3 IPG gradient bucket"] == "0.93"
    assert rows["ZeRO-3 persistent parameters"] == f"{PERSIST / 2**30:.2f}" == "0.03"
    assert not any(k.startswith("FSDP ") for k in rows)
    z1 = cli("explain", *job, "--sharding", "zero1")
    assert z1.exit_code == 0, z1.output
    assert "ZeRO-3 " not in z1.stdout and "FSDP " not in z1.stdout


def test_530b_mics_shard_group_is_the_reduce_scatter_world(explain):
    """MiCS reduce-scatters within the shard group (mics.py l. 415: dp_process_group = param_shard_group), so the world
    that must divide a gradient is the group's: the 530B catalog model on 1,920 GPUs (2^7 x 3 x 5) copies fc2's 4 h^2 =
    2^26 x 25 gradient, 1,920 x ceil(4 h^2 / 1,920) = 1,677,722,880 elements (2 B); with MiCS groups of 640 none."""
    job = dict(model="megatron-gpt-529.6b", gpus=1920, global_batch=1920, stack="megatron-deepspeed", recompute="full",
               micro_batch=1, seq_len=2048, hardware="a100-sxm-80gb")
    assert explain(**job, sharding="fsdp")[3]["memory"]["terms"]["zero3_bucket_copy"] == 2 * 1920 * 873_814
    mics = explain(**job, sharding="hsdp", sharding_mode="zero3_mics", shard_group=640)[3]["memory"]["terms"]
    assert mics["zero3_bucket_copy"] == 0.0


def _stack_without(tmp_path, *fields):
    """stack_db/megatron-deepspeed.yaml with the named fsdp fields left out (their default: no rows)."""
    import yaml
    stack = yaml.safe_load((Path(__file__).parents[1] / "stack_db" / "megatron-deepspeed.yaml").read_text())
    for f in fields:
        del stack["fsdp"][f]
    path = tmp_path / f"md-without-{'-'.join(fields)}.yaml"  # a name per file (stacks are loaded once per path)
    path.write_text(yaml.safe_dump(stack))
    return str(path)


def test_gpt3_hook_order_is_the_stacks_data(explain, tmp_path):
    """The hook order comes from the stack [z3h]. Without its rows (the hook-together order) GPT-3's worst moment is
    back fc1: fc1 4 h^2 gathered (no prefetch budget beside the tied weight [z3t]), fc1's and fc2's gradients 8 h^2
    (12 h^2). With the norm rows only (a bias-free reading: proj and fc2 follow a LayerNorm, fc1 does not) fc1's GEMM
    still holds fc2's gradient: the same 12 h^2. With the bias rows only, fc1's bias hook flushes fc2's gradient and
    fc2's own bias hook precedes its GEMM: back fc2's GEMM 4 h^2 gathered + 4 h^2, as the shipped stack
    (test_gpt3_defaults)."""
    both = _stack_without(tmp_path, "zero3_bias_hook_gemms", "zero3_norm_hook_gemms")
    assert _z3(_gpt3(explain, stack=both))[:2] == pytest.approx((2 * 4 * H2, 2 * 8 * H2), rel=1e-12)
    norms = _stack_without(tmp_path, "zero3_bias_hook_gemms")
    assert _z3(_gpt3(explain, stack=norms))[:2] == pytest.approx((2 * 4 * H2, 2 * 8 * H2), rel=1e-12)
    import yaml
    p = Path(_stack_without(tmp_path, "zero3_norm_hook_gemms"))
    assert _z3(_gpt3(explain, stack=str(p)))[:2] == pytest.approx((2 * 4 * H2, 2 * 4 * H2), rel=1e-12)
    assert "zero3_norm_hook_gemms" not in yaml.safe_load(p.read_text())["fsdp"]
