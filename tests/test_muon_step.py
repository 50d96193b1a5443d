"""Muon's optimizer step (step.py [28], memory.py [mu], layers/common.py [ns]): the Newton-Schulz iterations' GEMMs
in the step time (term muon_ns) and their temporaries at the optimizer step's moment, derived by hand from
NVIDIA-NeMo/Emerging-Optimizers v0.3.0 muon_utils.py (newton_schulz l. 176-220, newton_schulz_step l. 315-319,
newton_schulz_tp l. 272-278) as NVIDIA/Megatron-LM @d98e8a64 runs it (5 steps, bf16, TP mode duplicated)."""

from __future__ import annotations

import pytest

from planner import catalog
from planner.compute import gemm_epilogue_rate, gemm_mainloop, gemm_time, sm_count, wave_efficiency
from planner.explain import evaluate, to_json
from planner.layers import layer_list
from planner.memory import muon_step_temporaries
from planner.plan import resolve
from planner.schema import Job
from planner.step import MUON_NS_STEPS, newton_schulz_gemms

LLAMA = dict(model="llama3-8b", hardware="h100-sxm", gpus=8, stack="megatron", global_batch=64, micro_batch=1,
             seq_len=8192)


def _explain(**job):
    settings, plan, _ = resolve(Job.model_validate({**LLAMA, **job}))
    return to_json(settings, plan, evaluate(settings, plan))


@pytest.mark.parametrize("name", catalog.list_models())
def test_matrices_are_the_muon_parameters(name):
    """Every catalogued model's layer kinds: the whole matrices' elements (rows x cols x count) are the parameters the
    memory model prices a Muon momentum for (muon_per_gpu(1) for the split and rep groups, muon_experts_per_gpu(1, 1)
    for the experts), to the element."""
    for kind in layer_list(catalog.load_model(name)).kinds:
        p, mats = kind.params(), kind.muon_matrices()
        assert sum(r * c * n for r, c, n, g in mats if g != "expert") == p.muon_per_gpu(1), kind.label
        assert sum(r * c * n for r, c, n, g in mats if g == "expert") == p.muon_experts_per_gpu(1, 1), kind.label


def test_llama_attention_split_qkv():
    """Llama 3 8B (h 4096, 32 heads, 8 KV heads of 128): linear_qkv split per query group into q 4096 x 4096 and
    k, v 1024 x 4096 (emerging_optimizers.py @d98e8a64 _get_qkv_split_shapes: [4 x 128, 128, 128] per group), the
    output 4096 x 4096, fc1 (gate + up) 28672 x 4096, fc2 4096 x 14336 listed transposed, 14336 x 4096 (the dimension TP
    partitions first, its input: layers/common.py [ns])."""
    kind = layer_list(catalog.load_model("llama3-8b")).kinds[0]
    assert kind.muon_matrices() == ((4096, 4096, 1, "split"), (1024, 4096, 2, "split"), (4096, 4096, 1, "split"),
                                    (28672, 4096, 1, "split"), (14336, 4096, 1, "split"))


def test_one_matrix_flops_and_time():
    """fc2 of Llama 3 8B, 4096 x 14336: m 4096, n 14336. A step: X X^T 2 m^2 n, b A + c A A 2 m^3, a X + B X 2 m^2 n:
    4 m^2 n + 2 m^3 = 2^26 x 7 x 2^11 + 2 x 2^36 = 7 x 2^37 + 2^37 = 2^40 FLOPs; 5 steps 5 x 2^40 = 5.4976e12. At a
    GEMM plateau of 500 TFLOP/s on 128 SMs every shape fills whole waves of 128 x 256 tiles ([4096, 4096]: 512 tiles,
    4 waves; [4096, 14336]: 1792 tiles, 14 waves), so 5 x 2^40 / 5e14 = 10.995 ms."""
    rows = newton_schulz_gemms(4096, 14336)
    assert MUON_NS_STEPS == 5
    assert [(g.name, float(g.M), float(g.N), float(g.K), n) for g, n in rows] == [
        ("ns_gram", 4096.0, 4096.0, 14336.0, 5.0), ("ns_poly", 4096.0, 4096.0, 4096.0, 5.0),
        ("ns_update", 4096.0, 14336.0, 4096.0, 5.0)]
    assert sum(2.0 * g.M * g.N * g.K * n for g, n in rows) == 5 * 2.0 ** 40
    # the transpose: the 14336 x 4096 matrix runs the same GEMMs
    assert newton_schulz_gemms(14336, 4096) == rows
    t = sum(n * gemm_time(g.M, g.N, g.K, 500e12, 128) for g, n in rows)
    assert t == pytest.approx(5 * 2.0 ** 40 / 500e12, rel=1e-12)
    assert t == pytest.approx(0.010995116277760, rel=1e-12)


def test_step_term_llama_tp2_dp4():
    """Llama 3 8B on 8 H100s, tp 2, dp 4, zero1 (the layer-wise optimizer): every TP rank runs the whole matrices
    (duplicated mode), each dp rank 1 / 4 of the 32 layers'. The hand shapes of test_llama_attention_split_qkv, per
    step [m, m, n], [m, m, m], [m, n, m], on the bf16 GEMM model of compute.py (_ns_seconds); the adam job has
    no such term."""
    ns = _ns_seconds(resolve(Job.model_validate({**LLAMA, "optimizer": "muon", "sharding": "zero1", "tp": 2}))[0].hardware)
    layer = ns(4096, 4096) * 2 + ns(1024, 4096) * 2 + ns(4096, 28672) + ns(4096, 14336)
    want = 32 * layer / 4
    res = _explain(optimizer="muon", sharding="zero1", tp=2)
    assert res["time"]["muon_ns_s"] == pytest.approx(want, rel=1e-12)
    # about 6.4e14 FLOPs a step over the model, 1.6e14 a rank: a quarter second at some 650 TFLOP/s
    assert 0.2 < want < 0.3
    # tp 1, dp 8: each rank steps 1 / 8 (half as much); no 1 / tp under the duplicated mode
    assert _explain(optimizer="muon", sharding="zero1", tp=1)["time"]["muon_ns_s"] == pytest.approx(want / 2, rel=1e-12)
    # the step sums its terms with it
    t = res["time"]
    parts = ("compute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_exposed_s", "bubble_s", "optimizer_s", "muon_ns_s")
    assert sum(t[k] for k in parts) == pytest.approx(t["step_s"], rel=1e-12)
    assert "muon_ns_s" not in _explain(optimizer="adam", sharding="zero1", tp=2)["time"]


def _ns_seconds(hw, steps=MUON_NS_STEPS):
    """Seconds of `steps` (5) Newton-Schulz steps on one whole m x n matrix on hw's bf16 GEMM model (compute [5a]):
    each GEMM's K loop at the K-loop rate, then its bf16 output's write (2 B an element) at HBM x 0.9, over the wave
    efficiency; the hand shapes [m, m, n], [m, m, m], [m, n, m] (m <= n). On H100 SXM the K loop runs at
    810.545 x 0.85 TFLOP/s and the write at 3.015 TB/s (tests/test_gemm_epilogue.py)."""
    plat, sms, w = gemm_mainloop(hw, "bf16"), sm_count(hw), gemm_epilogue_rate(hw)

    def ns(m, n):
        return steps * sum((2.0 * M * N * K / plat + 2.0 * M * N / w) / wave_efficiency(M, N, sms)
                           for M, N, K in ((m, m, n), (m, m, m), (m, n, m)))
    return ns


def test_tp_gathers_llama_tp2_dp4():
    """The duplicated mode's all-gathers (newton_schulz_tp l. 273-274), inside tp_comm: one a TP-split matrix, of its
    fp32 momentum, the whole matrix's 4 B an element (the nccl-tests size), over the TP group of 2 (innermost: stride
    1), priced by comm.py; the rank's 1 / 4 of the 32 layers' q, k, v, o, fc1, fc2. None at tp 1; Adam's tp_comm is
    the rest of Muon's."""
    from planner import comm

    settings = resolve(Job.model_validate({**LLAMA, "optimizer": "muon", "sharding": "zero1", "tp": 2}))[0]
    cpar = comm.comm_params(settings.hardware)

    def ag(rows, cols):
        return float(comm.auto_collective_times(comm.ALL_GATHER, 4.0 * rows * cols, 2, 1, cpar, 8)[0])

    layer = 2 * ag(4096, 4096) + 2 * ag(1024, 4096) + ag(28672, 4096) + ag(4096, 14336)
    res = _explain(optimizer="muon", sharding="zero1", tp=2)
    assert res["time"]["tp_muon_gather_s"] == pytest.approx(32 * layer / 4, rel=1e-12)
    adam = _explain(optimizer="adam", sharding="zero1", tp=2)["time"]
    assert res["time"]["tp_comm_s"] == pytest.approx(adam["tp_comm_s"] + res["time"]["tp_muon_gather_s"], rel=1e-12)
    assert _explain(optimizer="muon", sharding="zero1", tp=1)["time"]["tp_muon_gather_s"] == 0.0
    assert "tp_muon_gather_s" not in adam


def test_step_term_mixtral_experts():
    """Mixtral 8x7B (32 layers; h 4096, 32 heads, 8 KV heads of 128; 8 experts of f 14336, gated) on 16 H100s, tp 1,
    ep 8, zero1: dp 16, the experts' data-parallel group 16 / 8 = 2. Dense: the attention's q, k, v, o and the router
    (8 x 4096) of 32 layers / 16 ranks; experts: each rank holds 8 / 8 = 1 expert a layer and steps half of them
    (1 / 2): 32 x (fc1 28672 x 4096 + fc2 4096 x 14336) / 2."""
    job = dict(model="mixtral-8x7b", gpus=16, optimizer="muon", sharding="zero1", tp=1, ep=8, etp=1, global_batch=64,
               seq_len=4096)
    hw = resolve(Job.model_validate({**LLAMA, **job}))[0].hardware
    ns = _ns_seconds(hw)
    dense = ns(4096, 4096) * 2 + ns(1024, 4096) * 2 + ns(8, 4096)
    experts = ns(4096, 28672) + ns(4096, 14336)
    want = 32 * dense / 16 + 32 * experts / 2
    assert _explain(**job)["time"]["muon_ns_s"] == pytest.approx(want, rel=1e-12)


def test_temporaries_bytes():
    """fc1 of Llama 3 8B, 28672 x 4096, e = 117,440,512 elements, m 4096: the TP gather's fp32 shards and cat 8 e, then
    max(6 e (fp32 X and its bf16 cast), 4 e + 4 m^2 (two bf16 X, bf16 A and B)) = 6 e: 14 e = 1,644,167,168 B. A router
    8 x 512 (rep: no gather): max(6 x 4096, 4 x 4096 + 4 x 64) = 24,576 B. A square 4096 x 4096 split matrix:
    8 e + max(6 e, 8 e) = 16 e. Of several, the largest's."""
    e = 28672 * 4096
    assert muon_step_temporaries(((28672, 4096, 1, "split"),)) == 14 * e == 1_644_167_168
    assert muon_step_temporaries(((8, 512, 1, "rep"),)) == 24_576
    assert muon_step_temporaries(((4096, 4096, 1, "split"),)) == 16 * 4096 * 4096
    # the largest of several (one matrix at a time): fc1's 14 e > the square's 16 x 2^24 = 268,435,456
    assert muon_step_temporaries(((4096, 4096, 1, "split"), (28672, 4096, 1, "split"))) == 14 * e
    assert muon_step_temporaries(()) == 0.0


def test_step_moment_sets_the_peak():
    """Llama 3 8B at tp 8, seq 512, full recompute: the backward's peak holds little beyond the kept tensors (the layer
    activations, the output layer's, one layer's recompute buffer), freed at the step; the step's moment holds the
    largest matrix's temporaries, fc1's 14 e = 1,644,167,168 B (test_temporaries_bytes), so the optimizer step term is
    those less what was freed. Adam's step (Megatron's fused optimizer: no temporaries) adds nothing."""
    job = dict(optimizer="muon", sharding="zero1", tp=8, global_batch=8, seq_len=512, recompute="full")
    t = _explain(**job)["memory"]["terms"]
    freed = t["layer_activations"] + t["output_activations"] + t["recompute_buffer"]
    assert t["optimizer_step"] == pytest.approx(1_644_167_168 - freed, rel=1e-12)
    assert t["optimizer_step"] > 1e9
    assert _explain(**{**job, "optimizer": "adam"})["memory"]["terms"]["optimizer_step"] == 0.0



def test_legacy_gather_moment():
    """The layer-wise optimizer's legacy path (optimizer_whole_tensors, --no-use-layer-wise-param-layout):
    allgather_params (layer_wise_optimizer.py @d98e8a64 l. 828-862) flattens the rank's own bf16 parameters and
    allocates a receive buffer for every other rank's: the stage's whole dense parameters x 2 B, after the step (the
    Newton-Schulz temporaries freed). Llama 3 8B at tp 8 (test_step_moment_sets_the_peak's plan): a GPU's parameters
    32 x 218,103,808 / 8 (the layers' linears) + 32 x 8,192 (their norms) + 2 x 129,024 x 4,096 / 8 (embedding and
    output, the vocabulary 128,256 padded to a multiple of 128 x tp = 1,024) + 4,096 (final norm) = 1,004,802,048;
    x 2 B = 2,009,604,096 B, above fc1's 1,644,167,168 B of Newton-Schulz
    temporaries: the step's moment is the gather's, less what was freed. With the layout (the default) DDP gathers
    into its own buffer in place: the temporaries' moment."""
    job = dict(optimizer="muon", sharding="zero1", tp=8, global_batch=8, seq_len=512, recompute="full")
    p = 32 * 218_103_808 // 8 + 32 * 8_192 + 2 * 129_024 * 4_096 // 8 + 4_096
    assert p == 1_004_802_048 and 129_024 == -(-128_256 // 1_024) * 1_024
    t = _explain(**job, optimizer_whole_tensors=True)["memory"]["terms"]
    freed = t["layer_activations"] + t["output_activations"] + t["recompute_buffer"]
    assert t["optimizer_step"] == pytest.approx(2 * p - freed, rel=1e-12)
    t = _explain(**job)["memory"]["terms"]
    freed = t["layer_activations"] + t["output_activations"] + t["recompute_buffer"]
    assert t["optimizer_step"] == pytest.approx(1_644_167_168 - freed, rel=1e-12)


def test_legacy_path_all_reduces_and_gathers_once():
    """DP traffic of Llama 3 8B on 8 H100s, tp 2, dp 4, zero1, DP overlap off (all exposed). With the layout (the
    default) DDP runs the distributed optimizer's reduce-scatter and bucketed all-gather of its buffer; on the legacy
    path (optimizer_whole_tensors) DDP has no distributed optimizer (dist_utils.py @d98e8a64 l. 322-334) and
    all-reduces its gradient buckets, and allgather_params gathers the flattened bf16 shards in one all_gather
    (l. 838-853). A GPU's parameters p = 32 x (218,112,000 - 8,192) / 2 + 32 x 8,192 + 525,336,576 (embedding and
    output / 2 each) + 4,096 = 4,015,263,744; Megatron's buckets max(40,000,000, 1,000,000 x dp 4): 101 of them;
    fp32 gradients 4 B, bf16 parameters 2 B; over the dp group of 4 at stride 2 (tp innermost), priced by comm.py."""
    from planner import comm

    settings = resolve(Job.model_validate({**LLAMA, "optimizer": "muon", "sharding": "zero1", "tp": 2}))[0]
    cpar = comm.comm_params(settings.hardware)

    def c(op, size):
        return float(comm.auto_collective_times(op, size, 4, 2, cpar, 8)[0])

    p, nb = 4_015_263_744, 101
    assert p == 32 * (218_112_000 - 8_192) // 2 + 32 * 8_192 + 525_336_576 + 4_096 and -(-p // 40_000_000) == nb
    job = dict(optimizer="muon", sharding="zero1", tp=2, dp_comm_overlap=False)
    layout = _explain(**job)["time"]
    legacy = _explain(**job, optimizer_whole_tensors=True)["time"]
    assert layout["dp_comm_s"] == pytest.approx(nb * c(comm.REDUCE_SCATTER, 4 * p / nb) + nb * c(comm.ALL_GATHER, 2 * p / nb),
                                                rel=1e-12)
    assert legacy["dp_comm_s"] == pytest.approx(nb * c(comm.ALL_REDUCE, 4 * p / nb) + c(comm.ALL_GATHER, 2 * p), rel=1e-12)
    assert legacy["dp_comm_exposed_s"] == legacy["dp_comm_s"] > layout["dp_comm_s"] * 1.4


def test_worst_rank_holds_the_largest_matrix():
    """Newton-Schulz time on the worst rank: the layer-wise optimizer never splits a parameter (_emit_bucket,
    _shard_params_ping_pong), so a rank steps at least the largest matrix whole. Llama 3 8B's 32 layers on pp 8 (4 a
    stage: 4 x 6 = 24 matrices, q, k, v, o, fc1, fc2) on dp 64 at tp 1 (512 GPUs): the mean share 4 x layer / 64 is
    below fc1's own time (4096 x 28672, the costliest), and under the layout's LPT each of the 24 matrices lands on an
    empty shard of the 64, fc1 on shard 0 alone: the term is fc1's (before: the mean)."""
    job = dict(optimizer="muon", sharding="zero1", tp=1, pp=8, gpus=512, global_batch=512)
    hw = resolve(Job.model_validate({**LLAMA, **job}))[0].hardware
    ns = _ns_seconds(hw)
    layer = ns(4096, 4096) * 2 + ns(1024, 4096) * 2 + ns(4096, 28672) + ns(4096, 14336)
    assert 4 * layer / 64 < ns(4096, 28672)
    assert _explain(**job)["time"]["muon_ns_s"] == pytest.approx(ns(4096, 28672), rel=1e-12)


def test_llama_muon_params_keep_qkv_whole():
    """The parameters the layer-wise optimizer places (LayerKind.muon_params): linear_qkv one tensor, (32 + 2 x 8) x 128
    = 6,144 rows x 4,096, where muon_matrices splits it; the output, fc1 and fc2 as muon_matrices."""
    kind = layer_list(catalog.load_model("llama3-8b")).kinds[0]
    assert kind.muon_params() == ((6144, 4096, 1, "split"), (4096, 4096, 1, "split"), (28672, 4096, 1, "split"),
                                  (14336, 4096, 1, "split"))  # fc2 transposed, as muon_matrices lists it
    assert sum(r * c * n for r, c, n, _ in kind.muon_params()) == sum(r * c * n for r, c, n, _ in kind.muon_matrices())


PP8 = dict(sharding="zero1", tp=1, pp=8, gpus=512, global_batch=512)


def test_layout_buffer_padding_and_worst_rank_states():
    """Llama 3 8B on 512 GPUs, tp 1, pp 8 (4 layers a stage), dp 64, zero1: the layer-wise optimizer's default layout
    (_compute_per_buffer_param_layout, layer_wise_optimizer.py @d98e8a64 l. 196-444). A stage's Muon parameters: 4
    layers x (qkv 25,165,824 + o 16,777,216 + fc1 117,440,512 + fc2 58,720,256) = 872,415,232 in 16 tensors, one
    bucket (pp rank > 0, or bucket_size max(40e6, 1e6 x 64) below the 0.9 x 64 x fc1 threshold, l. 396-403). The
    per-bucket cap 1.3 x 872,415,232 / 64 = 17.7e6 admits no tensor, so each goes to the emptiest shard (l. 325-326):
    16 shards of one tensor, 48 empty, padded_shard_size = fc1's 117,440,512 (l. 332). DDP's buffer, on every rank:
    64 x 117,440,512 = 7,516,192,768 elements, 6,643,777,536 of them padding: x 2 B bf16 parameters =
    13,287,555,072 B, x 4 B fp32 gradients = 26,575,110,144 B beyond Adam's (same plan, no layout). The rank holding
    fc1 steps it whole: 117,440,512 - 872,415,232 / 64 = 103,809,024 elements beyond the even share, x 4 B fp32 main
    parameters = 415,236,096 B; its momentum 4 B the same, less the Adam moments the even share saved (8 - 4 B x
    13,631,488): Muon's optimizer term is Adam's + 360,710,144 B."""
    muon, adam = _explain(optimizer="muon", **PP8)["memory"]["terms"], _explain(optimizer="adam", **PP8)["memory"]["terms"]
    M, fc1 = 4 * 218_103_808, 117_440_512
    pad, worst = 64 * fc1 - M, fc1 - M // 64
    assert (pad, worst) == (6_643_777_536, 103_809_024)
    assert muon["weights"] - adam["weights"] == 2 * pad == 13_287_555_072
    assert muon["gradients"] - adam["gradients"] == 4 * pad == 26_575_110_144
    assert muon["master_weights"] - adam["master_weights"] == 4 * worst == 415_236_096
    assert muon["adam"] - adam["adam"] == 4 * worst - 4 * (M // 64) == 360_710_144
    # the legacy path (whole tensors) allocates no padded buffer: DDP's own, the parameters' alone
    legacy = _explain(optimizer="muon", optimizer_whole_tensors=True, **PP8)["memory"]["terms"]
    assert legacy["weights"] == adam["weights"] and legacy["gradients"] == adam["gradients"]


def test_layout_padding_in_dp_traffic():
    """The same plan's DP traffic, overlap off: DDP reduce-scatters and all-gathers the padded buffer's buckets. The
    stage with the most, the last: the output layer 525,336,576 + 4 layers x 218,112,000 (with their norms) + the
    final norm 4,096 + the padding 6,643,777,536 = 8,041,566,208 elements; Megatron's buckets of
    max(40e6, 1e6 x 64) = 64e6: 126; fp32 gradients 4 B, bf16 parameters 2 B; dp 64 at stride 1 on 512 GPUs."""
    from planner import comm

    job = dict(optimizer="muon", dp_comm_overlap=False, **PP8)
    settings = resolve(Job.model_validate({**LLAMA, **job}))[0]
    cpar = comm.comm_params(settings.hardware)

    def c(op, size):
        return float(comm.auto_collective_times(op, size, 64, 1, cpar, 512)[0])

    p = 525_336_576 + 4 * 218_112_000 + 4_096 + 6_643_777_536
    assert p == 8_041_566_208 and -(-p // 64_000_000) == 126
    want = 126 * c(comm.REDUCE_SCATTER, 4 * p / 126) + 126 * c(comm.ALL_GATHER, 2 * p / 126)
    assert _explain(**job)["time"]["dp_comm_s"] == pytest.approx(want, rel=1e-12)


def test_layout_padding_per_model_chunk():
    """Each model chunk gets a layout of its own (dist_utils.py @d98e8a64 _ddp_wrap l. 354-396), so each chunk's
    buffer is padded on its own. Llama 3 8B on 16 GPUs, tp 1, pp 2, vpp 4 (16 layers a stage, 4 a chunk), dp 8: a
    stage's Muon parameters M = 16 x 218,103,808 = 3,489,660,928; each chunk's buffer at least 8 x fc1 =
    939,524,096 elements (its four layers' 872,415,232 fit below that), the four 3,758,096,384: 268,435,456 of
    padding, x 2 B = 536,870,912 B of bf16 parameters and x 4 B = 1,073,741,824 B of gradients beyond Adam's. One
    buffer for the stage (max(M, 8 x fc1) = M) would price none. The worst rank's states: each chunk's layout
    starts from empty compute loads (layer_wise_optimizer.py l. 256), and its LPT (cap 1.3 x 872,415,232 / 8 =
    141,767,475, l. 313-326) sends the chunk's four fc1 to shards 0-3 (the costliest first, to the first empty
    shard), the four fc2 to shards 4-7, q/k/v (fc1 + qkv 142,606,336 > the cap) and o to shards 4-7 (the lower
    compute loads): shard 0 holds fc1 alone, 117,440,512 > the chunk's even 109,051,904, in each of the four chunks,
    4 x fc1 = 469,762,048 where the even share is M / 8 = 436,207,616 (a port of _compute_per_buffer_param_layout on
    these 16 shapes a chunk gives the same: shards 0-3 469,762,048, 4-7 402,653,184). 33,554,432 elements x 4 B
    fp32 main parameters = 134,217,728 B beyond Adam's; Muon's momentum 4 B of the 469,762,048 where Adam keeps 8 B
    of M / 8 (one stage's whole layout would hold fc1 beside three more matrices, the even share, before)."""
    job = dict(sharding="zero1", tp=1, pp=2, vpp=4, gpus=16, global_batch=64)
    muon, adam = _explain(optimizer="muon", **job)["memory"]["terms"], _explain(optimizer="adam", **job)["memory"]["terms"]
    M, fc1 = 16 * 218_103_808, 117_440_512
    pad = 4 * 8 * fc1 - M
    assert pad == 268_435_456 and M > 8 * fc1
    assert muon["weights"] - adam["weights"] == 2 * pad == 536_870_912
    assert muon["gradients"] - adam["gradients"] == 4 * pad == 1_073_741_824
    worst = 4 * fc1
    assert worst - M // 8 == 33_554_432
    assert muon["master_weights"] - adam["master_weights"] == 4 * (worst - M // 8) == 134_217_728
    assert muon["adam"] - adam["adam"] == 4 * worst - 8 * M // 8 == -1_610_612_736


def test_legacy_middle_stage_holds_its_largest_matrix():
    """The legacy path (--no-use-layer-wise-param-layout: _shard_params_ping_pong, layer_wise_optimizer.py @d98e8a64
    l. 713-762) deals a stage's tensors whole, sorted by numel, in the ping-pong order over the dp ranks. Llama 3 8B
    at pp 8, dp 64 (PP8): a middle stage's 4 layers hold 24 tensors (q/k/v, o, fc1, fc2 and two norm weights a
    layer), fewer than the 64 ranks, so each rank holds one at most and the one holding an fc1 holds 117,440,512
    elements whole where the even share of the stage's 872,415,232 Muon elements is 13,631,488: 103,809,024 beyond it,
    x (4 B fp32 main + 4 B momentum) = 830,472,192 B. The even states: master 4 x 218,112,000 x 4 B / 64 =
    54,528,000 B, moments (872,415,232 x 4 B + the norms' 32,768 x 8 B) / 64 = 54,530,048 B. The middle stage's
    optimizer bytes 939,530,240 (before: the even 109,058,048); the same as the default layout's, whose LPT also
    leaves fc1 alone on its shard."""
    legacy = _explain(optimizer="muon", optimizer_whole_tensors=True, **PP8)["memory"]["stages"]["middle"]
    layout = _explain(optimizer="muon", **PP8)["memory"]["stages"]["middle"]
    even = 4 * 218_112_000 * 4 // 64 + (872_415_232 * 4 + 32_768 * 8) // 64
    assert even == 109_058_048
    assert (117_440_512 - 872_415_232 // 64) * 8 == 830_472_192
    assert legacy["optimizer_bytes"] == even + 830_472_192 == 939_530_240 == layout["optimizer_bytes"]


def test_muon_is_refused_with_dualpipe():
    """DualPipe (a rank holding two stages) runs on the deepseek stack only (stack_db/deepseek.yaml schedules), whose
    runs.optimizers lists no Muon (adam only): a Muon job there is refused (plan._optimizer), so the rank's two
    stages' Muon states are never priced together."""
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="optimizer muon on stack deepseek, whose code builds adam only"):
        resolve(Job.model_validate(dict(model="deepseek-v3", hardware="h800-sxm", gpus=2048, stack="deepseek",
                                        global_batch=15360, seq_len=4096, tp=1, pp=16, ep=64, optimizer="muon",
                                        schedule="dualpipe")))


def test_ns_time_sums_every_model_chunks_costliest():
    """The Newton-Schulz time of dp rank 0 with model chunks (step.py [28] _muon_stage_max): Llama 3 8B on 16 GPUs,
    tp 1, pp 2, vpp 4 (4 layers a chunk), dp 8, zero1 with the layout. Each chunk's layout sends its costliest
    matrix, fc1 (4096 x 28672), to shard 0 (test_layout_padding_per_model_chunk's assignment: shards 0-3 an fc1
    each, 4-7 fc2 + linear_qkv + o), so rank 0 runs four fc1 iterations, 4 ns(4096, 28672). A chunk's even share,
    4 layers / 8 = half a layer's time (q and o 4096 x 4096, k and v 1024 x 4096, fc1, fc2 4096 x 14336), is below
    one fc1's, and the stage's even share, 16 layers / 8 = two layers', is below 4 fc1: the term was the even share
    (two layers) before, and is 4 fc1 now."""
    job = dict(optimizer="muon", sharding="zero1", tp=1, pp=2, vpp=4, gpus=16, global_batch=64)
    hw = resolve(Job.model_validate({**LLAMA, **job}))[0].hardware
    ns = _ns_seconds(hw)
    layer = ns(4096, 4096) * 2 + ns(1024, 4096) * 2 + ns(4096, 28672) + ns(4096, 14336)
    assert layer / 2 < ns(4096, 28672) and 2 * layer < 4 * ns(4096, 28672)
    assert _explain(**job)["time"]["muon_ns_s"] == pytest.approx(4 * ns(4096, 28672), rel=1e-12)
    # the legacy path deals the stage's 96 tensors as one list: at least the even share, two layers' time
    legacy = _explain(optimizer_whole_tensors=True, **job)["time"]["muon_ns_s"]
    assert legacy == pytest.approx(2 * layer, rel=1e-12)


def test_ns_steps_from_the_job():
    """--muon-num-ns-steps (the job's muon_ns_steps; arguments.py @d98e8a64 l. 2648-2649): newton_schulz runs one
    step, three GEMMs, for each of `steps` coefficient sets (Emerging-Optimizers v0.3.0 muon_utils.py l. 199,
    216-217). Llama 3 8B, tp 2, dp 4, zero1 at 3 steps: 32 layers / 4 of the hand shapes' 3-step time (as
    test_step_term_llama_tp2_dp4 at 5)."""
    job = dict(optimizer="muon", sharding="zero1", tp=2)
    ns = _ns_seconds(resolve(Job.model_validate({**LLAMA, **job}))[0].hardware, steps=3)
    layer = ns(4096, 4096) * 2 + ns(1024, 4096) * 2 + ns(4096, 28672) + ns(4096, 14336)
    res = _explain(muon_ns_steps=3, **job)
    assert res["time"]["muon_ns_s"] == pytest.approx(32 * layer / 4, rel=1e-12)
    assert res["plan"]["muon_ns_steps"] == 3
    assert "muon_ns_steps" not in _explain(**job)["plan"]  # the default, 5, is not written
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="muon_ns_steps 3 with optimizer adam"):
        resolve(Job.model_validate({**LLAMA, "muon_ns_steps": 3}))


def test_legacy_expert_top_group():
    """The legacy path's experts (memory.whole_tensor_state_bytes): _shard_params_ping_pong deals the routed experts'
    tensors over the expert-data-parallel ranks apart (layer_wise_optimizer.py @d98e8a64 l. 727, 744-749). Mixtral
    8x7B at tp 1, pp 32 (one layer a stage), ep 2, dp 16: edp 16 / 2 = 8. A middle stage's experts: 8 / 2 = 4
    experts, 4 fc1 of 28,672 x 4,096 = 117,440,512 (the largest, k = 4 < 8: one a rank) and 4 fc2 of 58,720,256:
    M_e = 704,643,072, the even share 88,080,384, the fc1 rank 29,360,128 beyond it. Dense: linear_qkv 6,144 x 4,096
    = 25,165,824 whole on one of the 16 ranks, of M_d = 25,165,824 + o 16,777,216 + the router 8 x 4,096 =
    41,975,808 (even 2,623,488): 22,542,336 beyond. (22,542,336 + 29,360,128) x 4 B master and x 4 B momentum =
    207,609,856 B each."""
    import numpy as np

    from planner.memory import muon_params_of, muon_top_tensors, whole_tensor_state_bytes
    from planner.params import count_params

    settings, plan, _ = resolve(Job.model_validate(dict(
        model="mixtral-8x7b", hardware="h100-sxm", gpus=512, stack="megatron", optimizer="muon", sharding="zero1",
        optimizer_whole_tensors=True, tp=1, pp=32, ep=2, etp=1, global_batch=64, seq_len=4096, micro_batch=1)))
    pc = count_params(settings.model)
    counts = [np.int64(1)]
    (b_d, k_d), (b_e, k_e) = muon_top_tensors(pc, plan, counts)
    assert (b_d, k_d, b_e, k_e) == (25_165_824, 1, 117_440_512, 4)
    mu = muon_params_of(pc, settings.model, plan, counts, "mid")
    assert (mu[0], mu[1]) == (41_975_808, 704_643_072)
    add = whole_tensor_state_bytes(pc, settings.model, plan, counts, "mid", 1.0, 4.0, 8.0, mu)
    assert 25_165_824 - 41_975_808 / 16 == 22_542_336 and 117_440_512 - 704_643_072 / 8 == 29_360_128
    assert add["master_weights"] == add["adam"] == (22_542_336 + 29_360_128) * 4 == 207_609_856
