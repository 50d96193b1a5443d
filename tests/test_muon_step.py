"""Muon's optimizer step (step.py [28], memory.py [mu], layers/common.py [ns]): the Newton-Schulz iterations' GEMMs
in the step time (term muon_ns) and their temporaries at the optimizer step's moment, derived by hand from
NVIDIA-NeMo/Emerging-Optimizers v0.3.0 muon_utils.py (newton_schulz l. 176-220, newton_schulz_step l. 315-319,
newton_schulz_tp l. 272-278) as NVIDIA/Megatron-LM @d98e8a64 runs it (5 steps, bf16, TP mode duplicated)."""

from __future__ import annotations

import pytest

from planner import catalog
from planner.compute import gemm_plateau, gemm_time, sm_count, wave_efficiency
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
    output 4096 x 4096, fc1 (gate + up) 28672 x 4096, fc2 4096 x 14336."""
    kind = layer_list(catalog.load_model("llama3-8b")).kinds[0]
    assert kind.muon_matrices() == ((4096, 4096, 1, "split"), (1024, 4096, 2, "split"), (4096, 4096, 1, "split"),
                                    (28672, 4096, 1, "split"), (4096, 14336, 1, "split"))


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
    step [m, m, n], [m, m, m], [m, n, m], at the bf16 GEMM plateau and wave efficiency of compute.py; the adam job has
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


def _ns_seconds(hw):
    """Seconds of the 5 Newton-Schulz steps on one whole m x n matrix at hw's bf16 GEMM plateau and wave efficiency
    (compute.py): the hand shapes [m, m, n], [m, m, m], [m, n, m] (m <= n)."""
    plat, sms = gemm_plateau(hw, "bf16"), sm_count(hw)

    def ns(m, n):
        return MUON_NS_STEPS * sum(2.0 * M * N * K / (plat * wave_efficiency(M, N, sms))
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

