"""The memory-bound passes Megatron-Core runs outside its fused kernels for gpt-oss (issue 23):
the YaRN-scaled rotary embedding (unfused: TE's fused RoPE takes no cos/sin factor), the
clamped SwiGLU's clamp (chunk, two clamps, cat before the fused activation) and the routed
experts' probability-weighted output bias (TEGroupedMLP._apply_bias, fp32). Byte figures:
stack_db/megatron.yaml `kernels` (rope_scaled, activation_clamp, expert_bias) and their
sources (Megatron-LM @0d8e0714)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner.catalog import load_model, load_stack, model_from_hf_config
from planner.layers import context, layer_list
from planner.plan import PlanArrays
from planner.stacks import kernel_bytes

ROOT = Path(__file__).resolve().parent.parent
YARN_32 = 0.1 * math.log(32) + 1.0  # transformers get_mscale(32) = Megatron _yarn_get_concentration_factor(32, None, None)


def _hf(name):
    path = ROOT / "tests/data/arch" / name / "config.json"
    return model_from_hf_config(json.loads(path.read_text()), str(path))


def _plan(tp=1, ep=64, mbs=4, seq=4096):
    return PlanArrays(tp=tp, cp=1, pp=1, vpp=1, dp=64 // tp, mbs=mbs, gbs=1280, seq=seq, sharding=1, shard=1,
                      recompute=0, sp=1 if tp > 1 else 0, schedule=0, precision=0, ep=ep)


def _kinds(model):
    ll = layer_list(model)
    return ll.kinds[0]


def _plain(model):
    """The same shape with none of the three: no clamp, factor 1, no biases."""
    return model.model_copy(update={"activation_clamp": None, "rope_attention_factor": 1.0, "linear_bias": False})


def test_zoo_and_hf_config_carry_the_clamp_and_the_yarn_factor():
    """config.json swiglu_limit 7.0 and rope_scaling yarn factor 32 (no attention_factor): the
    zoo entries and the HF reader agree."""
    for name in ("gpt-oss-120b", "gpt-oss-20b"):
        zoo = load_model(name)
        hf = _hf(name)
        assert zoo.activation_clamp == hf.activation_clamp == 7.0
        assert zoo.rope_attention_factor == pytest.approx(YARN_32, rel=1e-15)
        assert hf.rope_attention_factor == pytest.approx(YARN_32, rel=1e-15)
    # Kimi K2: yarn with mscale = mscale_all_dim = 1: factor 1 (nothing to scale)
    kimi = _hf("kimi-k2-instruct")
    assert kimi.rope_attention_factor == 1.0 and kimi.activation_clamp is None


def test_megatron_moe_bytes_by_hand():
    """gpt-oss-120b, one micro-batch of 4 x 4096 = 16,384 tokens, EP 64 (2 local experts, each
    row one of the top-4 copies): beyond the plain shape, per token 4 rows x (clamp over the
    gate+up output, 2 x 2880 elements, 8 B forward / 10 B backward; output bias over 2880
    elements, 28 B / 40 B). The biases' other kernels are 0 on this stack (`bias: 0`)."""
    kb = kernel_bytes(load_stack("megatron"), 0)
    assert (kb["activation_clamp"], kb["activation_clamp_bwd"], kb["expert_bias"], kb["expert_bias_bwd"]) == (8, 10, 28, 40)
    m = load_model("gpt-oss-120b")
    ctx = context(_plan())
    moe, plain = _kinds(m).mlp, _kinds(_plain(m)).mlp
    assert moe.clamp and not plain.clamp
    T = 16384
    for sfx, clamp, bias in (("", 8, 28), ("_bwd", 10, 40)):
        extra = float(moe.elementwise_bytes(ctx, kb, sfx) - plain.elementwise_bytes(ctx, kb, sfx))
        assert extra == pytest.approx(T * 4 * (clamp * 2 * 2880 + bias * 2880), rel=1e-12)


def test_megatron_scaled_rope_bytes_by_hand():
    """Megatron-Core runs the unfused rotary where the cos/sin carry YaRN's factor: per element
    of Q (64 heads x 64) and K (8 x 64), 24 B forward and 26 B backward instead of the fused 4 and
    4; with tp 2 the local heads halve (32 + 4)."""
    kb = kernel_bytes(load_stack("megatron"), 0)
    assert (kb["rope_scaled"], kb["rope_scaled_bwd"], kb["rope"], kb["rope_bwd"]) == (24, 26, 4, 4)
    m = load_model("gpt-oss-120b").model_copy(update={"linear_bias": False})
    plain = _plain(m)
    for tp, heads in ((1, 64 + 8), (2, 32 + 4)):
        ctx = context(_plan(tp=tp))
        a, p = _kinds(m).mixer, _kinds(plain).mixer
        assert a.rope_scaled and not p.rope_scaled
        for sfx, scaled in (("", 24 - 4), ("_bwd", 26 - 4)):
            extra = float(a.elementwise_bytes(ctx, kb, sfx) - p.elementwise_bytes(ctx, kb, sfx))
            assert extra == pytest.approx(16384 * heads * 64 * scaled, rel=1e-12)


def test_other_stacks_run_them_fused():
    """A stack that does not state these kernels prices none of them: torchtitan's figures are
    0 for the clamp and the expert bias, and its rope figure for the scaled rotary."""
    kb = kernel_bytes(load_stack("torchtitan"), 0)
    assert kb["activation_clamp"] == kb["activation_clamp_bwd"] == kb["expert_bias"] == kb["expert_bias_bwd"] == 0
    assert kb["rope_scaled"] == kb["rope"] and kb["rope_scaled_bwd"] == kb["rope_bwd"]


def test_gpt_oss_record_slower_by_these_passes(cli, tmp_path):
    """The Megatron-Bridge 26.02 GB300 row's layout: the three passes lengthen the step; the
    dense twin without them (same shapes) is faster, and a model without the clamp and factor
    but with biases lies between."""
    base = ["explain", "--hardware", "gb300-nvl72", "--gpus", "64", "--tp", "1", "--pp", "1", "--dp", "64",
            "--ep", "64", "--etp", "1", "--micro-batch", "4", "--global-batch", "1280", "--seq-len", "4096",
            "--stack", "megatron", "--format", "json", "-q"]
    m = load_model("gpt-oss-120b")
    steps = []
    for i, spec in enumerate((m, m.model_copy(update={"activation_clamp": None, "rope_attention_factor": 1.0}),
                              _plain(m))):
        p = tmp_path / f"m{i}.yaml"
        p.write_text(json.dumps(spec.model_dump()))
        r = cli(*base, "--model", str(p))
        assert r.exit_code == 0, r.stderr
        steps.append(json.loads(r.stdout)["time"]["step_s"])
    assert steps[0] > steps[1] > steps[2]


def test_explain_shows_the_passes_by_hand(cli):
    """explain's time.unfused_passes_s (inside compute_s) on the 26.02 GB300 layout: per layer and
    micro-batch of T = 16,384 tokens, the experts' 4 T rows x (clamp (8 + 10) B x 2 x 2,880 +
    bias (28 + 40) B x 2,880) and the rotary's T x (64 + 8) x 64 elements x ((24 - 4) + (26 - 4))
    B, over 36 layers x 5 micro-batches, at GB300's 8 TB/s x HBM_EFFICIENCY 0.9."""
    r = cli("explain", "--model", "gpt-oss-120b", "--hardware", "gb300-nvl72", "--gpus", "64", "--tp", "1",
            "--pp", "1", "--dp", "64", "--ep", "64", "--etp", "1", "--micro-batch", "4", "--global-batch", "1280",
            "--seq-len", "4096", "--stack", "megatron", "--moe-rank-imbalance", "1.0",  # the preset force-balances
            "--format", "json", "-q")
    assert r.exit_code == 0, r.stderr
    T = 16384
    per_layer = 4 * T * (18 * 2 * 2880 + 68 * 2880) + T * 72 * 64 * (20 + 22)
    want = 36 * 5 * per_layer / (8.0e12 * 0.9)
    assert json.loads(r.stdout)["time"]["unfused_passes_s"] == pytest.approx(want, rel=1e-9)
    r = cli("explain", "--model", "gpt-oss-120b", "--hardware", "gb300-nvl72", "--gpus", "64", "--ep", "64",
            "--micro-batch", "4", "--global-batch", "1280", "--seq-len", "4096", "--stack", "megatron", "-q")
    assert "elementwise passes outside its fused kernels" in r.stdout
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--format", "json", "-q")
    assert json.loads(r.stdout)["time"]["unfused_passes_s"] == 0.0


# -------------------------------------------------------------------------- saved tensors (issue 21)
ROWS_BYTES = 4 * 2 * 2 * 2880  # a token's 4 expert rows x the bf16 fc1 output (gate + up, 2 x 2,880) the clamps keep


def test_megatron_clamp_saved_bytes_by_hand():
    """What Megatron-Core's clamp keeps beyond the fused activation's saved input (stack_db
    megatron activation_clamp_saved 2, activation_clamp_unfused_saved 1): each clamp saves its
    input, a chunk view of the fc1 output, so the bf16 [rows, 2 x 2,880] fc1 output stays beside
    the clamped copy WeightedQuickGeGLUFunction saves: per token 4 rows x 2 x 2,880 elements x
    2 B = 46,080 B a layer; none under moe_act (the checkpoint runs the chain without grad and
    keeps the fc1 output alone, the table's gate/up). On the unfused path 1 B per element (the
    activation saves the clamped gate half: 2 B x 2,880 a row). No clamp, no bytes; torchtitan
    states none."""
    kb = kernel_bytes(load_stack("megatron"), 0)
    assert (kb["activation_clamp_saved"], kb["activation_clamp_unfused_saved"]) == (2, 1)
    m = load_model("gpt-oss-120b")
    ctx = context(_plan())
    moe, plain = _kinds(m).mlp, _kinds(_plain(m)).mlp
    T = 16384
    assert ROWS_BYTES == 46080
    assert float(moe.unfused_saved_bytes(ctx, kb) - plain.unfused_saved_bytes(ctx, kb)) == pytest.approx(T * ROWS_BYTES, rel=1e-12)
    assert float(moe.unfused_saved_bytes(ctx, kb, True)) == float(plain.unfused_saved_bytes(ctx, kb, True)) == 0.0
    unfused = {**kb, "unfused_activation": 1.0}
    extra = float(moe.unfused_saved_bytes(ctx, unfused) - plain.unfused_saved_bytes(ctx, unfused))
    assert extra == pytest.approx(T * 4 * 2 * 2880 * 1.0, rel=1e-12)
    tt = kernel_bytes(load_stack("torchtitan"), 0)
    assert tt["activation_clamp_saved"] == tt["activation_clamp_unfused_saved"] == 0


def test_clamp_saved_in_explain_by_hand(cli, tmp_path):
    """The 26.02 GB300 layout (EP 64, micro-batch 4 x 4,096, PP 1: one micro-batch in flight):
    against the same model without the clamp, the stored activations grow by 36 layers x 16,384
    tokens x 46,080 B = 27,179,089,920 B, and nothing else; with recompute_modules [layernorm,
    moe_act] nothing is stored more, and the one layer whose activation re-runs with grad in its
    backward holds the clamp's tensors once (16,384 x 46,080 = 754,974,720 B in the recompute
    buffer); under full recompute the same one layer."""
    m = load_model("gpt-oss-120b")
    plain = tmp_path / "noclamp.yaml"
    plain.write_text(json.dumps(m.model_copy(update={"activation_clamp": None}).model_dump()))
    job = {"hardware": "gb300-nvl72", "gpus": 64, "tp": 1, "pp": 1, "dp": 64, "ep": 64, "etp": 1, "micro_batch": 4,
           "global_batch": 1280, "seq_len": 4096, "stack": "megatron", "moe_grouped_gemm": True,  # (as the preset)
           "moe_rank_imbalance": 1.0}  # the Bridge preset force-balances (published_runs_moe.yaml)
    cases = (({}, {"layer_activations": 36 * 16384 * ROWS_BYTES}),
             ({"recompute": "selective", "recompute_modules": ["layernorm", "moe_act"]}, {"recompute_buffer": 16384 * ROWS_BYTES}),
             ({"recompute": "full"}, {"recompute_buffer": 16384 * ROWS_BYTES}))
    for i, (extra, want) in enumerate(cases):
        terms = []
        for j, model in enumerate(("gpt-oss-120b", str(plain))):
            p = tmp_path / f"job{i}{j}.yaml"
            p.write_text(json.dumps({**job, **extra, "model": model}))
            r = cli("explain", str(p), "--format", "json", "-q")
            assert r.exit_code == 0, r.stderr
            terms.append(json.loads(r.stdout)["memory"]["terms"])
        diff = {k: terms[0][k] - terms[1][k] for k in terms[0] if terms[0][k] != terms[1][k]}
        assert diff == pytest.approx(want, rel=1e-12)


# what the unfused router and permutation (Megatron's defaults) save a token and MoE layer (layers/moe.py [9] [10]):
# the int64 top-4 indices, the int64 argsort of the [n, 128] map and the int64 sorted indices, 8 x (4 + 128 + 4),
# and the softmax's fp32 output over the top-4 logits, 4 x 4, in place of the generic fp32 logits (4 x 128, inside
# the 134,144 of docs/gpt_oss_gap.md sec. 7)
ROUTING_BYTES = 8 * (4 + 128 + 4) + 4 * 4 - 4 * 128  # 592
# the bf16 routing probability the weighted activation saves per routed row, 2 B x top-4 (layers/moe.py [13])
PROBS_BYTES = 2 * 4  # 8
# the fused attention core's fp32 log-sum-exp, 4 B x 64 query heads (layers/attention.py [ls])
LSE_BYTES = 4 * 64  # 256
# a token's saved bytes a layer without recompute (docs/gpt_oss_gap.md sec. 7)
LAYER_BYTES = 134144 + ROWS_BYTES + ROUTING_BYTES + PROBS_BYTES + LSE_BYTES
# what the alltoall dispatcher keeps as attributes once a layer (not per micro-batch in flight), the bf16 dense [n, 128]
# probabilities and the unfused router's bool map, 2 x 128 + 128 B a token of one micro-batch (layers/moe.py [13])
HELD_BYTES = 2 * 128 + 128  # 384


@pytest.mark.parametrize("fields,layer_mbs,tokens,fits", [
    # the 25.11 H100 row as the table prints it: PP 4, MBS 4: the first stage holds 4 micro-batches x 9 layers
    (dict(hardware="h100-sxm", pp=4, dp=16, ep=8, micro_batch=4), 4 * 9, 16384, False),
    # as Megatron-Bridge v0.2.0's H100 preset runs it: MBS 1
    (dict(hardware="h100-sxm", pp=4, dp=16, ep=8, micro_batch=1), 4 * 9, 4096, True),
    # the 25.11 B200 row as printed (EP 8) and as its v0.2.0 preset runs it (EP 64): one micro-batch x 36 layers
    (dict(hardware="b200", pp=1, dp=64, ep=8, micro_batch=4), 36, 16384, False),
    (dict(hardware="b200", pp=1, dp=64, ep=64, micro_batch=4), 36, 16384, True),
])
def test_25_11_rows_fit_only_as_their_presets_ran(cli, tmp_path, fields, layer_mbs, tokens, fits):
    """No 25.11 gpt-oss run recomputed (Bridge v0.2.0 sets recompute_modules without selective
    granularity): every layer keeps 134,144 + 46,080 + 592 (the unfused routing's indices and softmax output,
    less the generic fp32 logits) + 8 (the per-row probabilities) + 256 (the attention core's fp32 log-sum-exp, 64
    heads x 4 B) = 181,080 B a token. The stored activations are
    layer-micro-batches x tokens x that, plus the dispatcher's attributes, the stage's layers x tokens x 384, by hand
    (106.7 GB at H100 MBS 4
    on the first stage,
    beside 40 GB of states: over 80 GB); `check`'s verdict (memory.fits) refuses the layouts as
    the table prints them and passes them as the presets ran them (published_runs_moe.yaml
    provenance), with the records' bf16 gradient buffer and TE loss."""
    job = {"model": "gpt-oss-120b", "gpus": 64, "tp": 1, "etp": 1, "global_batch": 512, "seq_len": 4096,
           "sharding": "zero1", "stack": "megatron", "cross_entropy_fusion": True, "cross_entropy_fusion_impl": "te",
           "moe_rank_imbalance": 1.0,  # the presets force-balance (published_runs_moe.yaml provenance)
           # the presets' bf16 gradient buffer (grad_reduce_in_fp32 False), as the records carry it
           "bytes_per_param": {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}, **fields}
    p = tmp_path / "job.yaml"
    p.write_text(json.dumps(job))
    r = cli("explain", str(p), "--format", "json", "-q")
    assert r.exit_code == 0, r.stderr
    mem = json.loads(r.stdout)["memory"]
    layers = 36 // fields["pp"]  # the first stage's layers, each holding one micro-batch's attributes
    assert mem["terms"]["layer_activations"] == pytest.approx(layer_mbs * tokens * LAYER_BYTES
                                                              + layers * tokens * HELD_BYTES, rel=1e-12)
    assert mem["fits"] is fits
