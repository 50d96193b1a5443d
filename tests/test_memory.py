"""Memory model: the seed's figures (sections 1.2, 3.1-3.3, 4.1-4.3, 6.3, 8.1) and
hand-derived cases for every sharding mode, recompute mode and pipeline schedule.

The seed (book chapter) uses the Llama 3 paper's shape with a 128,000 vocabulary and the
GPT-3 activation coefficient (34 bytes per token per unit width per layer): the
`llama3-70b-paper` entry and `activation_model="korthikanti"` reproduce it. The released
models (`llama3-70b`, vocab 128,256) and the shape-aware default are tested beside it.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.memory import FSDP_TERMS, layer_coefficients
from planner.params import count_params
from planner.catalog import load_model
from planner.schema import ModelSpec

GB = 1e9
# the seed counts 16 B of model state per parameter (sec. 1.2: bf16 weights and grads, fp32
# master, Adam); the megatron stack's own default is Megatron's 18 B (fp32 main grads)
SEED = dict(model="llama3-70b-paper", activation_model="korthikanti", seq_len=8192, bytes_per_param="mixed16")


def seed_one_sequence(explain, **kw):
    """One GPU, one 8,192-token sequence: the seed's sec. 1.2 script."""
    return explain(gpus=1, global_batch=1, **{**SEED, **kw})


# ------------------------------------------------------------------ seed sec. 1.2
def test_seed_1_2_parameters():
    n = count_params(load_model("llama3-70b-paper")).total
    assert f"{n / 1e9:.1f}" == "70.5"
    # the seed counts no norm weights: 80 layers x 2 RMSNorms x 8192 + the final norm
    seed_n = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 2 * 128_000 * 8192
    assert n - seed_n == 80 * 2 * 8192 + 8192


def test_seed_1_2_model_states(explain):
    _, _, est, js = seed_one_sequence(explain)
    t = est.memory
    assert f"{float(t.weights) / GB:,.0f}" == "141"
    assert f"{float(t.gradients) / GB:,.0f}" == "141"
    assert f"{float(t.master_weights) / GB:,.0f}" == "282"
    assert f"{float(t.adam) / 2 / GB:,.0f}" == "282"  # Adam m and v, 4 B each
    states = float(t.weights + t.gradients + t.master_weights + t.adam)
    assert f"{states / GB:,.0f}" == "1,129"
    # "846 GB together": the seed adds its three printed rows (3 x 282); exactly 12 N = 846.6 GB
    assert 3 * round(float(t.master_weights) / GB) == 846
    assert js["memory"]["optimizer_bytes"] == pytest.approx(12 * 70.5495e9, rel=1e-5)


def test_seed_1_2_activations_and_total(explain):
    _, _, est, _ = seed_one_sequence(explain)
    t = est.memory
    act = float(t.layer_activations)
    assert act == 34 * 8192 * 8192 * 80
    assert f"{act / GB:,.0f}" == "183"
    states = float(t.weights + t.gradients + t.master_weights + t.adam)
    assert f"{(states + act) / GB:,.0f}" == "1,311"
    assert f"{(states + act) / 80e9:.0f}" == "16"  # H100s' worth of HBM


def test_seed_1_2_flops_and_years(explain):
    _, _, _, js = explain(gpus=1, global_batch=1, tokens=15e12, **SEED)
    flops = js["flops"]["total_training_flops"]
    assert f"{flops:.2e}" == "6.35e+24"
    year = 365 * 24 * 3600
    assert f"{flops / 989e12 / year:,.0f}" == "204"
    assert f"{flops / (0.4 * 989e12) / year:,.0f}" == "509"


def test_seed_1_1_llama3_405b_flops(explain):
    _, _, _, js = explain(model="llama3-405b", gpus=1, global_batch=1, tokens=15.6e12)
    assert f"{js['flops']['total_training_flops']:.1e}" == "3.8e+25"


# ------------------------------------------------------------------ seed sec. 3
def test_seed_3_1_dp_copies(explain):
    """4,096 identical copies: about 4.6 PB holding one 1.1 TB thing."""
    _, _, est, js = explain(gpus=4096, global_batch=4096, **SEED)
    states = float(est.memory.weights + est.memory.gradients + est.memory.master_weights + est.memory.adam)
    assert f"{states * 4096 / 1e15:.1f}" == "4.6"


@pytest.mark.parametrize("sharding,expected_gb", [
    # hand-derived, N = 70.5495e9, d = 4096:
    ("zero1", 2 * 70.5495 + 2 * 70.5495 + 12 * 70.5495 / 4096),   # 282.4
    ("zero2", 2 * 70.5495 + 14 * 70.5495 / 4096),                 # 141.3
    ("fsdp", 16 * 70.5495 / 4096),                                # 0.276
])
def test_seed_3_1_zero_stages(explain, sharding, expected_gb):
    _, _, est, _ = explain(gpus=4096, global_batch=4096, sharding=sharding, **SEED)
    states = float(est.memory.weights + est.memory.gradients + est.memory.master_weights + est.memory.adam)
    assert states / GB == pytest.approx(expected_gb, rel=2e-4)


def test_seed_3_3_fsdp_4096(explain):
    for tp in (1, 8):  # FSDP over 4,096 GPUs, or TP 8 x FSDP 512
        _, _, est, _ = explain(gpus=4096, global_batch=4096, tp=tp, sharding="fsdp", **SEED)
        states = float(est.memory.weights + est.memory.gradients + est.memory.master_weights + est.memory.adam)
        assert f"{states / GB:.2f}" == "0.28"


def test_seed_6_3_hsdp_2048(explain):
    # TP 8 x HSDP (256-way shard groups x 2 replicas) = 4,096 GPUs: states / 2,048
    _, _, est, _ = explain(gpus=4096, tp=8, sharding="hsdp", shard_group=256, **SEED)
    states = float(est.memory.weights + est.memory.gradients + est.memory.master_weights + est.memory.adam)
    assert f"{states / GB:.2f}" == "0.55"
    _, _, est, _ = explain(gpus=4096, global_batch=4096, sharding="hsdp", shard_group=2048, **SEED)
    states = float(est.memory.weights + est.memory.gradients + est.memory.master_weights + est.memory.adam)
    assert f"{states / GB:.2f}" == "0.55"


# ------------------------------------------------------------------ seed sec. 4 and 8
def test_seed_4_1_tp8_sp_activations(explain):
    _, _, est, _ = explain(gpus=8, tp=8, sequence_parallel=True, global_batch=1, **SEED)
    assert f"{float(est.memory.layer_activations) / GB:.0f}" == "23"
    # the shape-aware default lands within 3% of the seed's "about 23 GB"
    _, _, est, _ = explain(gpus=8, tp=8, sequence_parallel=True, global_batch=1, model="llama3-70b-paper")
    assert float(est.memory.layer_activations) / GB == pytest.approx(23, rel=0.03)


def test_seed_4_2_layer_input_134mb():
    assert f"{8192 * 8192 * 2 / 1e6:.0f}" == "134"


def test_seed_8_1_full_recompute_saved_inputs(explain):
    _, _, est, _ = seed_one_sequence(explain, recompute="full")
    assert float(est.memory.layer_activations) == 80 * 8192 * 8192 * 2
    assert f"{float(est.memory.layer_activations) / GB:.0f}" == "11"
    # the recompute buffer holds one layer's activations while it is recomputed (the seed's
    # 34 sbh), less the layer input 2 sbh, which is the checkpoint already in
    # layer_activations: 32 sbh (issue 12: the input was counted twice)
    assert float(est.memory.recompute_buffer) == (34 - 2) * 8192 * 8192


def test_seed_4_3_llama3_405b_tp8(explain):
    _, _, est, _ = explain(model="llama3-405b-paper", activation_model="korthikanti", gpus=8, tp=8,
                           global_batch=1, seq_len=8192)
    assert f"{float(est.memory.layer_activations) / GB:.0f}" == "72"


# ------------------------------------------------------------------ the coefficient
def gpt3_like(**kw) -> ModelSpec:
    base = dict(name="gpt-test", num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
                vocab_size=1000, gated_mlp=False, norm="layernorm", tied_embeddings=True, max_seq_len=2048,
                position_embedding="learned", linear_bias=True, dropout=True, sources=["test"])
    base.update(kw)
    return ModelSpec(**base)


def test_arch_coefficient_reduces_to_34_for_gpt3_shape():
    m = load_model("gpt3-175b")
    rep, split, kv, score = layer_coefficients(m, "arch", "eager")
    h = m.hidden_size
    assert rep == 10 * h and split + kv == 24 * h  # Korthikanti Table 2: sbh(10 + 24/t)
    assert score == 5 * m.num_attention_heads  # 5as/h per unit sbh
    rep, split, kv, score = layer_coefficients(m, "arch", "flash")
    assert (rep + split + kv) / h == 34 and score == 0


def test_arch_coefficient_llama3_70b_by_hand():
    # rep: 8h (no dropout); split: Q 2h + O 2h + K,V 4*1024 + SwiGLU 2*2f + 2f
    m = load_model("llama3-70b")
    rep, split, kv, _ = layer_coefficients(m)
    assert rep == 8 * 8192
    assert split == 4 * 8192 + 6 * 28672
    assert kv == 4 * 1024
    assert (rep + split + kv) / 8192 == pytest.approx(33.5)


def test_tp_without_sp_matches_korthikanti_table2(explain):
    # sbh(10 + 24/t) per layer with TP and no SP, for t = 8
    _, _, est, _ = explain(gpus=8, tp=8, sequence_parallel=False, global_batch=1, **SEED)
    assert float(est.memory.layer_activations) == pytest.approx(8192 * 8192 * (10 + 24 / 8) * 80)


def test_eager_attention_adds_score_term(explain):
    s, h, a = 8192, 8192, 64
    # Korthikanti's 5as/h where the softmax saves a 16-bit output: at 8,192 keys Megatron-Core runs its torch
    # softmax (beyond the fused kernel's 4,096), in the input dtype without attention_softmax_in_fp32
    _, _, est, _ = seed_one_sequence(explain, attention="eager", attention_softmax_in_fp32=False)
    assert float(est.memory.layer_activations) == pytest.approx(s * h * (34 + 5 * a * s / h) * 80)
    # with it (TransformerConfig's default) the softmax's fp32 output is saved: 2 B a score more (memory.py [sm])
    _, _, est, _ = seed_one_sequence(explain, attention="eager")
    assert float(est.memory.layer_activations) == pytest.approx(s * h * (34 + 7 * a * s / h) * 80)
    # selective recompute removes the score term again (Korthikanti sec. 4.3)
    _, _, est, _ = seed_one_sequence(explain, attention="eager", recompute="selective")
    assert float(est.memory.layer_activations) == pytest.approx(34 * s * h * 80)


def test_cp_divides_sequence(explain):
    _, _, est1, _ = explain(gpus=8, tp=8, global_batch=1, **SEED)
    _, _, est2, _ = explain(gpus=16, tp=8, cp=2, global_batch=1, **SEED)
    assert float(est2.memory.layer_activations) == pytest.approx(float(est1.memory.layer_activations) / 2)


# ------------------------------------------------------------------ pipeline schedules
def test_pipeline_inflight_by_schedule(explain, free_stack):
    """llama3-70b-paper, pp=4 (20 layers a stage), m = 16 micro-batches, one sequence each
    (megatron's figures on a stack file that runs GPipe too: Megatron-LM has no GPipe schedule)."""
    per_layer = 34 * 8192 * 8192
    kw = dict(gpus=4, pp=4, global_batch=16, stack=free_stack, **SEED)
    _, _, est, _ = explain(**kw)  # 1F1B: min(m, p) = 4 in flight on stage 0
    assert float(est.memory.layer_activations) == pytest.approx(20 * 4 * per_layer)
    _, _, est, _ = explain(schedule="gpipe", **kw)  # GPipe: all 16
    assert float(est.memory.layer_activations) == pytest.approx(20 * 16 * per_layer)
    _, _, est, _ = explain(vpp=2, **kw)  # interleaved: 4 * (1 + 3/8)
    assert float(est.memory.layer_activations) == pytest.approx(20 * 4 * (1 + 3 / 8) * per_layer)


def test_pipeline_heaviest_stage_and_embeddings(explain):
    """pp=4: the first stage holds 20 layers + the input embedding; the last 20 layers + the
    output layer and final norm. Hand-derived parameter counts."""
    m = load_model("llama3-70b-paper")
    pc = count_params(m)
    _, plan, est, js = explain(gpus=4, pp=4, global_batch=16, **SEED)
    assert js["memory"]["heaviest_stage"] == "first"  # 4 micro-batches in flight vs 1
    first_params = 20 * pc.as_dict()["per_layer"] + 128_000 * 8192
    assert float(est.memory.weights) == pytest.approx(2 * first_params)


# ------------------------------------------------------------------ sharding by hand
@pytest.mark.parametrize("sharding,w,g,o", [
    ("none", 2, 2, 12), ("zero1", 2, 2, 12 / 64), ("zero2", 2, 2 / 64, 12 / 64), ("fsdp", 2 / 64, 2 / 64, 12 / 64),
])
def test_sharding_modes_small_model(explain, tmp_path, sharding, w, g, o):
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "name: tiny\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 256\nnum_attention_heads: 4\n"
        "vocab_size: 100\ngated_mlp: false\nnorm: layernorm\nmax_seq_len: 128\nsources: [test]\n")
    # padded_vocab_size 100: the model's own rows (megatron would pad them to 128 at tp 1, stack_db vocab_padding)
    _, _, est, _ = explain(model=str(path), gpus=64, sharding=sharding, global_batch=64, seq_len=128,
                           bytes_per_param="mixed16", padded_vocab_size=100)
    # 2 layers x (4*64*64 + 2*64*256 + 2 LN x 128) + emb 6400 + out 6400 + final LN 128
    n = 2 * (4 * 64 * 64 + 2 * 64 * 256 + 2 * 128) + 6400 + 6400 + 128
    assert float(est.memory.weights) == pytest.approx(n * w)
    assert float(est.memory.gradients) == pytest.approx(n * g)
    assert float(est.memory.master_weights + est.memory.adam) == pytest.approx(n * o)


def test_megatron_bytes_per_param(explain):
    """Megatron: fp32 grads, 18 B/param; distributed optimizer = 6 + 12/d."""
    _, _, est, _ = seed_one_sequence(explain, bytes_per_param="megatron")
    n = count_params(load_model("llama3-70b-paper")).total
    assert float(est.memory.total - est.memory.layer_activations - est.memory.output_activations - est.memory.reserve
                 - est.memory.workspaces - est.memory.model_buffers - est.memory.dummy_wgrads) == pytest.approx(18 * n)
    # TE's cached dummy weight gradients (memory.py [dw]), 2 B a weight element of each distinct shape: QKV
    # (64 + 16) x 128 x 8192, the projection 8192^2, the up projection 2 x 28,672 x 8,192, the down 8,192 x
    # 28,672 and the output layer 128,000 x 8,192 (the paper's vocabulary)
    shapes = 80 * 128 * 8192 + 8192**2 + 2 * 28672 * 8192 + 8192 * 28672 + 128_000 * 8192
    assert float(est.memory.dummy_wgrads) == 2 * shapes
    # Megatron's lru_cache'd rotary table (memory.py [mr]): fp32, 8,192 positions x head dim 128
    assert float(est.memory.model_buffers) == 4 * 8192 * 128
    # the GEMM libraries' workspaces on an H100: PyTorch's cuBLAS 32 MiB for each of 2 threads, TE's 32 MiB + 1 KiB
    assert float(est.memory.workspaces) == 96 * 2**20 + 1024
    _, _, est, _ = explain(gpus=64, sharding="zero1", **{**SEED, "bytes_per_param": "megatron"})
    states = float(est.memory.weights + est.memory.gradients + est.memory.master_weights + est.memory.adam)
    assert states == pytest.approx((6 + 12 / 64) * n)


def test_fsdp_buffers_and_reserve(explain):
    m = load_model("llama3-70b")
    pc = count_params(m)
    # the catalog's 128,256 rows pinned (megatron pads them to 129,024 at tp 8, stack_db vocab_padding)
    _, _, est, _ = explain(model="llama3-70b", gpus=4096, tp=8, sharding="fsdp", padded_vocab_size=128256)
    # the unsharded bf16 units (megatron's default fsdp mode, optim_grads_params: the current layer unit and the
    # layer units Megatron-FSDP's all-gather prefetches up to 5e8 parameters, memory.py [pf]:
    # ceil(5e8 / 106,971,136) = 5 layers of 855,638,016 / 8 + two norms 8,192 whole; the embedding and output layer
    # are non-unit buckets kept gathered, fsdp_unsharded_ends, [nu]: 2 x (2 x 131,334,144 + 8,192)) + one unsharded
    # gradient in the dtype the stack reduces it in (megatron: fp32, stack_db fsdp.grad_reduce_bytes 4); the largest
    # unit is the 1.05e9-parameter vocab matrix / 8 (larger than a 0.86e9-parameter layer / 8)
    unit = max(pc.as_dict()["per_layer"], pc.embedding) / 8
    assert unit == 131_334_144
    assert float(est.memory.fsdp_gathered_units) == pytest.approx(2 * 6 * 106_971_136)
    assert float(est.memory.fsdp_unsharded_ends) == 2 * (2 * unit + 8192)
    assert float(est.memory.fsdp_unit_grads) == pytest.approx(4 * unit)
    # nothing else of FSDP's on megatron without PP: no end-of-backward moment, no other kept end unit
    others = [k for k in FSDP_TERMS if k not in ("fsdp_gathered_units", "fsdp_unit_grads", "fsdp_unsharded_ends")]
    assert [float(est.memory[k]) for k in others] == [0.0] * len(others)
    assert float(est.memory.reserve) == 2**30


def test_logits_term(explain):
    # the catalog's 128,256 rows pinned (megatron pads them to 129,024 at tp 8: tests/test_fit_padded_vocab.py)
    _, _, est, _ = explain(model="llama3-70b", gpus=8, tp=8, global_batch=1, seq_len=8192, padded_vocab_size=128256)
    # final-norm input 2h/t (SP), its output saved by Megatron's output layer 2h/t (sequence-sharded:
    # stack_db megatron memory.output_saves_norm_out) + (2 + 4) bytes per vocab entry per token / t
    assert float(est.memory.output_activations) == pytest.approx(8192 * (2 * 2 * 8192 / 8 + 6 * 128256 / 8))


def test_fits_uses_headroom(explain):
    _, _, est, js = explain(model="llama3-8b", gpus=8, tp=8, headroom=0.0)
    hbm = 79.09 * 2**30  # H100 SXM as CUDA reports it (hardware_db hbm_visible_GiB), not 80e9
    assert js["memory"]["usable_bytes"] == hbm and js["memory"]["capacity_source"] == "measured"
    assert js["memory"]["fits"] == (js["memory"]["total_bytes"] <= hbm)


def test_capacity_is_the_hbm_the_device_reports_where_measured(explain):
    """H200 (hardware_db h200-sxm hbm_visible_GiB 139.80: torch's total_memory=143156 MiB =
    139.80 GiB): capacity 139.80 x 2^30 = 150,109,106,995.2 B, usable 0.9 x = 135,098,196,295.7 B
    = 125.82 GiB, where the datasheet's 141 GB (141e9 B = 131.32 GiB) gave 118.18 GiB. The
    H800 entry takes the H100 SXM5's measurement (the same 80 GB HBM3: hbm_visible_measured_on)
    and says so; the MI300X entry has none: its datasheet 192 GB = 192e9 B, usable 172.8e9 B."""
    _, _, _, h200 = explain(model="llama3-8b", gpus=8, hardware="h200-sxm")
    m = h200["memory"]
    assert m["capacity_source"] == "measured"
    assert m["capacity_bytes"] == pytest.approx(150_109_106_995.2, rel=1e-15)
    assert m["usable_bytes"] == pytest.approx(135_098_196_295.68, rel=1e-15)
    assert m["usable_bytes"] / 2**30 == pytest.approx(125.82, abs=1e-9)
    _, _, _, h800 = explain(model="llama3-8b", gpus=8, hardware="h800-sxm")
    m = h800["memory"]
    assert (m["capacity_source"], m["capacity_bytes"]) == ("measured on h100-sxm", pytest.approx(79.09 * 2**30, rel=1e-15))
    _, _, _, mi = explain(model="llama3-8b", gpus=8, hardware="mi300x")
    m = mi["memory"]
    assert (m["capacity_source"], m["capacity_bytes"], m["usable_bytes"]) == ("datasheet", 192e9, pytest.approx(172.8e9, rel=1e-15))


def test_explain_names_the_capacity_it_used(cli):
    """The verdict line says which HBM the percentage is of: the measured figure (H100: 79.09
    GiB as CUDA reports it; H800: the same, measured on the H100 SXM5) or the datasheet's (MI300X:
    192 GB = 178.8 GiB)."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--hardware", "h100-sxm")
    assert r.exit_code == 0 and "of 79.1 GiB HBM (measured, as CUDA reports it)" in r.stdout
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--hardware", "h800-sxm")
    assert r.exit_code == 0 and "of 79.1 GiB HBM (as CUDA reports it, measured on h100-sxm: the same HBM)" in r.stdout
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1", "--hardware", "mi300x")
    assert r.exit_code == 0 and "% HBM: share of 178.8 GiB HBM (datasheet 192 GB)" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------ arrays == scalars
def test_array_path_equals_scalar_path(explain, free_stack):
    from planner.explain import evaluate
    from planner.plan import PlanArrays

    jobs = [
        dict(gpus=64, tp=8, pp=1, sharding="fsdp", recompute="none"),
        dict(gpus=64, tp=4, pp=4, sharding="zero1", recompute="full"),
        dict(gpus=64, tp=2, pp=8, vpp=2, sharding="none", recompute="selective"),
        dict(gpus=64, tp=8, cp=2, sharding="hsdp", shard_group=2, micro_batch=2),
        dict(gpus=64, pp=4, schedule="gpipe", sharding="zero2"),
    ]
    # megatron's figures on a stack file that runs every plan (the GPipe row: Megatron-LM has none)
    # the catalog's 128,256 rows on every plan (tp 1 to 8 divide them): one model for the stacked plans (megatron pads
    # per tp, stack_db vocab_padding, which fit prices as one space a padded vocabulary: search.vocab_spaces)
    singles = [explain(model="llama3-70b", stack=free_stack, padded_vocab_size=128256, **j) for j in jobs]
    settings = singles[0][0]
    stacked = PlanArrays(**{f: np.array([getattr(s[1], f) for s in singles]) for f in singles[0][1].__dataclass_fields__})
    est = evaluate(settings, stacked)
    for i, (_, _, one, _) in enumerate(singles):
        for k in one.memory:
            assert est.memory[k][i] == pytest.approx(float(one.memory[k]), rel=1e-12), k
        assert bool(est.fits[i]) == bool(one.fits)


def test_uneven_stages_take_leftover_layers_off_the_ends():
    """Llama 3 405B: 126 layers on 16 stages of 8, one layer fewer on the first and the last
    stage (Llama 3 paper sec. 3.3.2); 80 layers on 3 stages: 26 + 27 + 27."""
    from planner.memory import stage_layers

    f, m, l = stage_layers(126, 16, 1)
    assert (int(f), int(m), int(l)) == (7, 8, 7)
    f, m, l = stage_layers(80, 3, 1)
    assert (int(f), int(m), int(l)) == (26, 27, 27)
    f, m, l = stage_layers(80, 4, 2)  # even split: 10 layers a chunk, 2 chunks
    assert (int(f), int(m), int(l)) == (20, 20, 20)
    f, m, l = stage_layers(80, 1, 1)
    assert (int(f), int(m), int(l)) == (80, 80, 80)


def test_llama3_405b_table4_plan_fits_with_uneven_stages(explain):
    """Table 4 of the Llama 3 paper: TP 8 x PP 16 x DP 128 at 8,192 tokens, 16 micro-batches
    per pipeline; with FSDP-sharded states it fits in 80 GB. The uneven split puts 7 layers
    on the first stage (16 micro-batches in flight: 112 layer-micro-batches) and 8 on each
    middle one (stage 1: 15 in flight, 120), so stage 1 is the heaviest (issue 12: the
    memory is every stage's, gated on the largest total)."""
    _, _, est, js = explain(model="llama3-405b", gpus=16384, tp=8, pp=16, global_batch=2048, seq_len=8192,
                            sharding="fsdp")
    assert js["memory"]["fits"]
    assert js["memory"]["heaviest_stage"] == "middle"
    st = js["memory"]["stages"]
    assert set(st) == {"first", "middle", "last"}
    assert js["memory"]["total_bytes"] == max(v["total_bytes"] for v in st.values()) == st["middle"]["total_bytes"]
    from planner.memory import per_layer_activation_bytes

    _, plan, _, _ = explain(model="llama3-405b", gpus=16384, tp=8, pp=16, global_batch=2048, seq_len=8192,
                            sharding="fsdp")
    per = float(per_layer_activation_bytes(load_model("llama3-405b"), plan))
    assert float(est.memory.layer_activations) == pytest.approx(8 * 15 * per)  # 8 layers x (p - 1) in flight
    first = st["first"]["activations_bytes"]
    assert first == pytest.approx(7 * 16 * per)  # the first stage: 7 layers x p (no output layer there)


def test_partial_full_recompute_by_hand(explain):
    """recompute full with recompute_layers 40 of 80 (Megatron --recompute-num-layers): 40
    layers keep only their 2sbh/t input, 40 keep everything (34 sbh/t, Korthikanti)."""
    kw = dict(gpus=8, tp=8, global_batch=1, recompute="full", **SEED)
    _, _, est, js = explain(recompute_layers=40, **kw)
    sbh = 8192 * 8192
    assert float(est.memory.layer_activations) == pytest.approx(40 * 2 * sbh / 8 + 40 * 34 * sbh / 8)
    n = count_params(load_model("llama3-70b-paper")).total
    core = 4 * 80 * 8192 * 8192 / 2  # the recomputed forward's causal cores, what the kernels run (4 h s / 2 a layer)
    assert js["flops"]["recompute_flops_per_token"] == pytest.approx(0.5 * (2 * n + core))
    _, _, est_all, _ = explain(**kw)  # default: every layer
    assert float(est_all.memory.layer_activations) == pytest.approx(80 * 2 * sbh / 8)


def test_recompute_layers_needs_full(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--recompute", "selective", "--recompute-layers", "4")
    assert r.exit_code == 2 and "recompute_layers needs recompute full" in r.stderr


def test_every_memory_term_has_a_label_and_a_row(explain):
    """The renderers name every term memory returns (render.common.TERM_LABELS, explain's table rows), FSDP's and
    ZeRO-3's buffers among them (memory.FSDP_TERMS), and the terms are STATE_TERMS + ACTIVATION_TERMS + OTHER_TERMS."""
    from planner.memory import ACTIVATION_TERMS, OTHER_TERMS, STATE_TERMS
    from planner.render.common import TERM_LABELS
    from planner.render.explain import _OTHER_TERMS, _STATE_TERMS

    _, _, est, js = explain(model="llama3-8b", gpus=8, sharding="fsdp")
    names = list(js["memory"]["terms"])
    assert sorted(names) == sorted(STATE_TERMS + ACTIVATION_TERMS + OTHER_TERMS)
    assert set(FSDP_TERMS) <= set(names) and "fsdp_buffers" not in names
    assert set(names) <= set(TERM_LABELS) and sorted(_STATE_TERMS + _OTHER_TERMS) == sorted(names)
