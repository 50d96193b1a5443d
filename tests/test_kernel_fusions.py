"""Megatron's kernel-fusion switches priced (issue 22: flags that change memory or time are
modelled, never listed as ignored): --no-rope-fusion, --no-bias-swiglu-fusion /
--no-bias-gelu-fusion, --no-bias-dropout-fusion and --no-gradient-accumulation-fusion are the
job's apply_rope_fusion, bias_activation_fusion, bias_dropout_fusion and
gradient_accumulation_fusion; --no-masked-softmax-fusion and --no-persist-layer-norm are ignored
where Transformer Engine's kernels run. Byte figures: stack_db/megatron.yaml `kernels`
(rope_scaled, mlp_activation_gated_unfused*, bias_unfused, wgrad_unfused) and their sources
(Megatron-LM @d98e8a64, TransformerEngine @4329ff84); derivations in each test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.catalog import load_stack
from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.layers import context
from planner.layers.attention import Attention
from planner.layers.mlp import DenseMLP
from planner.memory import unfused_wgrad_transient
from planner.plan import FSDP, PlanArrays, resolve
from planner.schema import Job
from planner.stacks import kernel_bytes
from planner.step import wgrad_add_bytes
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature

MEGATRON = load_stack("megatron")
FUSED = SimpleNamespace()  # settings that turn nothing off
H, F, A, K, D = 1024, 2816, 16, 4, 64  # a small GQA model: 16 query heads, 4 KV heads of 64
T = 2 * 512  # micro-batch 2 x 512 tokens


def _ctx(tp=2, sharding=1, sp=0):
    return context(PlanArrays(tp=tp, cp=1, pp=1, vpp=1, dp=4, mbs=2, gbs=64, seq=512, sharding=sharding, shard=1,
                              recompute=0, sp=sp, schedule=0, precision=0, ep=1))


def _off(**names):
    return kernel_bytes(MEGATRON, 0, SimpleNamespace(**{n: False for n in names}))


def _extra(block, kb, sfx, ctx):
    return float(block.elementwise_bytes(ctx, kb, sfx) - block.elementwise_bytes(ctx, kernel_bytes(MEGATRON, 0, FUSED),
                                                                                  sfx))


def test_stack_figures():
    """The unfused figures as stack_db/megatron.yaml derives them: SwiGLU's silu (4) + the scalar
    add x_linear + 0.0 (4) + the product (6) = 14 B forward per output element against the fused
    6; backward the product's two multiplies (12), silu_backward (6), the chunk's cat (8) = 26
    against 10; 4 B more saved (two f-wide bf16 factors); a bias add 4 B (read 2, write 2); the
    unfused weight gradient 2 B (bf16). The switches' keys are 1 only where a setting is False."""
    kb = kernel_bytes(MEGATRON, 0, FUSED)
    assert (kb["mlp_activation_gated_unfused"], kb["mlp_activation_gated_unfused_bwd"]) == (14, 26)
    assert (kb["mlp_activation_gated"], kb["mlp_activation_gated_bwd"]) == (6, 10)
    assert (kb["mlp_activation_gated_unfused_saved"], kb["bias_unfused"], kb["wgrad_unfused"]) == (4, 4, 2)
    # the routed experts' probability multiply (bf16 probabilities): 4 B forward, 12 B backward, 2 B kept
    assert (kb["expert_probs_unfused"], kb["expert_probs_unfused_bwd"], kb["expert_probs_unfused_saved"]) == (4, 12, 2)
    assert all(kb[k] == 0.0 for k in ("unfused_rope", "unfused_activation", "unfused_bias_dropout", "unfused_wgrad"))
    assert _off(bias_dropout_fusion=1)["unfused_bias_dropout"] == 1.0 and _off(bias_dropout_fusion=1)["unfused_rope"] == 0.0
    # other stacks have no switch: their unfused figures are 0 (and a job that sets one is refused, below)
    tt = kernel_bytes(load_stack("torchtitan"), 0, FUSED)
    assert tt["mlp_activation_gated_unfused"] == tt["bias_unfused"] == tt["wgrad_unfused"] == 0.0


def test_unfused_swiglu_bytes_and_saved_tensors_by_hand():
    """Gated MLP h 1024, f 2816, tp 2 (1408 local), 1024 tokens, no biases: with
    bias_activation_fusion off, forward 1024 x (14 - 6) x 1408 = 11,534,336 B more, backward
    1024 x (26 - 10) x 1408 = 23,068,672 B more, and the layer saves 1024 x 4 x 1408 =
    5,767,168 B more (silu(x_glu) and x_linear + 0.0, bf16, for the product's backward)."""
    mlp, ctx, kb = DenseMLP(h=H, f=F, gated=True, norm=H), _ctx(), _off(bias_activation_fusion=1)
    assert _extra(mlp, kb, "", ctx) == 11_534_336
    assert _extra(mlp, kb, "_bwd", ctx) == 23_068_672
    assert float(mlp.unfused_saved_bytes(ctx, kb)) == 5_767_168
    assert float(mlp.unfused_saved_bytes(ctx, kernel_bytes(MEGATRON, 0, FUSED))) == 0.0
    assert float(mlp.unfused_bytes(ctx, kb, "")) == 11_534_336  # the unfused share explain reports


def test_unfused_gelu_and_bias_dropout_add_by_hand():
    """A plain GeLU MLP runs the same activation bytes unfused (F.gelu reads and writes each
    element once, as the fused bias-GeLU): only a bias add moves, forward 4 B per element of the
    up-projection's output (1024 x 4 x 1408 = 5,767,168 B) and, with the bias-dropout-add fusion
    off, of the down-projection's (1024 x 4 x 1024 = 4,194,304 B; / tp under SP); without linear
    biases nothing changes (the unfused dropout and residual add are the kernels priced)."""
    ctx = _ctx()
    gelu = DenseMLP(h=H, f=F, gated=False, norm=H, bias=True)
    assert _extra(gelu, _off(bias_activation_fusion=1), "", ctx) == 5_767_168
    assert _extra(gelu, _off(bias_activation_fusion=1), "_bwd", ctx) == 0.0
    assert float(gelu.unfused_saved_bytes(ctx, _off(bias_activation_fusion=1))) == 0.0
    assert _extra(gelu, _off(bias_dropout_fusion=1), "", ctx) == 4_194_304
    assert _extra(gelu, _off(bias_dropout_fusion=1), "", _ctx(sp=1)) == 4_194_304 / 2
    plain = DenseMLP(h=H, f=F, gated=False, norm=H)
    assert _extra(plain, _off(bias_activation_fusion=1, bias_dropout_fusion=1), "", ctx) == 0.0
    # the attention's output projection bias, likewise
    att = Attention(h=H, a=A, k=K, d=D, norm=H, bias=True, rope=False)
    assert _extra(att, _off(bias_dropout_fusion=1), "", ctx) == 4_194_304
    assert _extra(att, _off(bias_dropout_fusion=1), "_bwd", ctx) == 0.0


def test_unfused_rope_bytes_by_hand():
    """With the rope fusion off Megatron-Core runs _apply_rotary_pos_emb_bshd (the rope_scaled
    figures, 24 B forward and 26 B backward per element of Q and K against the fused 4 and 4):
    tp 2 keeps 8 query and 2 KV heads of 64, 1024 x 20 x 10 x 64 = 13,107,200 B more forward
    and 1024 x 22 x 10 x 64 = 14,417,920 B backward. A model whose cos/sin carry a factor runs
    it unfused already: turning the fusion off adds nothing there. No rotary, no change."""
    ctx, kb = _ctx(), _off(apply_rope_fusion=1)
    att = Attention(h=H, a=A, k=K, d=D, norm=H)
    assert _extra(att, kb, "", ctx) == 13_107_200
    assert _extra(att, kb, "_bwd", ctx) == 14_417_920
    scaled = Attention(h=H, a=A, k=K, d=D, norm=H, rope_scaled=True)
    assert _extra(scaled, kb, "", ctx) == 0.0
    assert _extra(Attention(h=H, a=A, k=K, d=D, norm=H, rope=False), kb, "", ctx) == 0.0


def test_unfused_gradient_accumulation_by_hand():
    """Without gradient-accumulation fusion every micro-batch's backward adds each linear's bf16
    weight gradient into the fp32 main gradient: weights per GPU at tp 2, QKV (8 + 2 x 2) x 64 x
    1024 = 786,432, output 1024 x 512 = 524,288, up 2816 x 1024 = 2,883,584, down 1024 x 1408 =
    1,441,792: 5,636,096 x (2 + 4 + 4) = 56,360,960 B; 0 under FSDP. The transient is the
    largest linear's gradient, the up-projection's 2,883,584 x 2 B = 5,767,168 B."""
    att, mlp = Attention(h=H, a=A, k=K, d=D, norm=H), DenseMLP(h=H, f=F, gated=True, norm=H)
    kb = _off(gradient_accumulation_fusion=1)
    settings = SimpleNamespace(bpp=SimpleNamespace(gradients=4.0), moe_grouped_gemm=False, gradient_accumulation_fusion=False)
    for sharding, want in ((1, 56_360_960), (FSDP, 0.0)):
        ctx = _ctx(sharding=sharding)
        sc = SimpleNamespace(kb=kb, plan=ctx.plan, settings=settings)
        assert float(wgrad_add_bytes(sc, att.gemms(ctx) + mlp.gemms(ctx))) == want
    ctx = _ctx()
    kind = SimpleNamespace(mixer=att, mlp=mlp)
    assert float(unfused_wgrad_transient(settings, ctx.plan, ctx, kb)(kind)) == 5_767_168
    assert float(unfused_wgrad_transient(settings, ctx.plan, ctx, kernel_bytes(MEGATRON, 0, FUSED))(kind)) == 0.0


def test_plan_prices_the_switches():
    """Llama 3 8B on 8 H100 (tp 2, 4,096 tokens a micro-batch): bias_activation_fusion off adds
    32 layers x 4,096 x 4 x 7,168 = 3,758,096,384 B of saved activations; gradient-accumulation
    fusion off adds one up-projection's bf16 gradient, 14,336 x 4,096 x 2 = 117,440,512 B; each
    switch off makes the step slower, its unfused passes named."""
    base = dict(model="llama3-8b", gpus=8, tp=2, global_batch=64, seq_len=4096, stack="megatron")

    def run(**kw):
        settings, plan, _ = resolve(Job(**base, **kw))
        return to_json(settings, plan, evaluate(settings, plan))

    b = run()
    act = run(bias_activation_fusion=False)
    wg = run(gradient_accumulation_fusion=False)
    assert act["memory"]["activations_bytes"] - b["memory"]["activations_bytes"] == 3_758_096_384
    assert wg["memory"]["activations_bytes"] - b["memory"]["activations_bytes"] == 117_440_512
    assert b["time"]["unfused_passes_s"] == 0.0
    for kw in (dict(apply_rope_fusion=False), dict(bias_activation_fusion=False), dict(gradient_accumulation_fusion=False)):
        r = run(**kw)
        assert r["time"]["step_s"] > b["time"]["step_s"] and r["time"]["unfused_passes_s"] > 0.0, kw
        assert r["plan"][next(iter(kw))] is False
    # Llama has no linear biases: the unfused bias-dropout-add runs the kernels priced already
    assert run(bias_dropout_fusion=False)["time"]["step_s"] == b["time"]["step_s"]


def test_other_stacks_refuse_the_switches():
    for name in ("apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion", "gradient_accumulation_fusion"):
        with pytest.raises(PlannerError, match=f"{name} false is set but stack torchtitan has no such switch"):
            resolve(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", **{name: False}))


ARGS = ("--tensor-model-parallel-size 2 --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights --vocab-size 128256 "
        "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 --use-distributed-optimizer ")


def _read(tmp_path, extra, gpus=8):
    p = tmp_path / "a.args"
    p.write_text(ARGS + extra)
    return load_trainer_config(p, gpus=gpus)


def test_reader_maps_the_flags(tmp_path):
    cfg = _read(tmp_path, "--no-rope-fusion --no-bias-swiglu-fusion --no-bias-dropout-fusion "
                          "--no-gradient-accumulation-fusion")
    assert {k: cfg.job.get(k) for k in ("apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion",
                                        "gradient_accumulation_fusion")} == dict.fromkeys(
        ("apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion", "gradient_accumulation_fusion"), False)
    assert not [n for n in cfg.not_modelled if "fusion" in n]
    none = _read(tmp_path, "")
    assert not any(k in none.job for k in ("apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion",
                                           "gradient_accumulation_fusion"))


def test_reader_lists_flags_with_no_effect_as_ignored(tmp_path):
    """--no-bias-gelu-fusion with --swiglu (bias_activation_fusion follows the SwiGLU flag,
    argument_utils.py), --no-masked-softmax-fusion and --no-persist-layer-norm with Transformer
    Engine's attention and norms: ignored, each with its reason; with the local layers the first is
    masked_softmax_fusion false, the second not modelled."""
    cfg = _read(tmp_path, "--no-bias-gelu-fusion --no-masked-softmax-fusion --no-persist-layer-norm")
    assert "bias_activation_fusion" not in cfg.job
    ign = " ".join(cfg.ignored)
    assert "--no-bias-gelu-fusion=true (bias_activation_fusion follows --no-bias-swiglu-fusion with --swiglu" in ign
    assert "--no-masked-softmax-fusion=true (read only by Megatron-Core's own DotProductAttention" in ign
    assert "--no-persist-layer-norm=true (read only by Megatron-Core's FusedLayerNorm" in ign
    local = _read(tmp_path, "--no-masked-softmax-fusion --no-persist-layer-norm --transformer-impl local")
    # with the local layers --no-persist-layer-norm is not modelled (a slower kernel, the same bytes) and
    # --no-masked-softmax-fusion is the job's masked_softmax_fusion (planner/memory.py [sm], tests/test_megatron_softmax.py)
    assert not any("--no-masked-softmax-fusion" in n for n in local.not_modelled + local.ignored)
    assert sum(n.startswith("--no-persist-layer-norm") for n in local.not_modelled) == 1
    assert local.job["masked_softmax_fusion"] is False
    p = tmp_path / "learned.args"  # no rotary embedding: Megatron turns the fusion off itself (arguments.py)
    p.write_text(ARGS.replace("--position-embedding-type rope", "--position-embedding-type learned_absolute "
                              "--max-position-embeddings 4096") + "--no-rope-fusion")
    learned = load_trainer_config(p, gpus=8)
    assert "apply_rope_fusion" not in learned.job
    assert any(i.startswith("--no-rope-fusion=true (the model has no rotary embedding") for i in learned.ignored)


def test_reader_under_torch_fsdp2_leaves_gradient_accumulation_to_fsdp(tmp_path):
    p = tmp_path / "f.args"
    p.write_text(ARGS.replace("--use-distributed-optimizer ", "--use-torch-fsdp2 --ckpt-format torch_dist ")
                 + "--no-gradient-accumulation-fusion")
    cfg = load_trainer_config(p, gpus=8)
    assert "gradient_accumulation_fusion" not in cfg.job
    assert any(a.startswith("gradient_accumulation_fusion: --no-gradient-accumulation-fusion is what sharding mode "
                            "torch_fsdp2 requires") for a in cfg.assumed)


def test_round_trip_megatron_with_fusions_off(tmp_path):
    """A plan with every switch off exports the four flags and reads back as the same plan."""
    job = dict(model="llama3-8b", gpus=16, tp=2, sharding="zero1", global_batch=64, seq_len=4096, stack="megatron",
               rank_order="tp-cp-dp-pp", apply_rope_fusion=False, bias_activation_fusion=False,
               bias_dropout_fusion=False, gradient_accumulation_fusion=False)
    plan = resolved_plan(Job(**job))
    text, _ = export_plan(plan, "megatron")
    for flag in ("--no-rope-fusion", "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion",
                 "--no-gradient-accumulation-fusion"):
        assert f"{flag} " in text or text.rstrip().endswith(flag) or f"{flag}\n" in text, flag
    p = tmp_path / "exported.sh"
    p.write_text(text)
    back = resolved_plan(Job.model_validate(load_trainer_config(p).job))
    assert plan_signature(back) == plan_signature(plan)
    assert all(back[k] is False for k in ("apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion",
                                          "gradient_accumulation_fusion"))


def test_deferred_output_wgrad_needs_the_fusion():
    """Megatron refuses --defer-embedding-wgrad-compute without gradient-accumulation fusion
    (model_parallel_config.py @d98e8a64 l. 550-553): so does the plan."""
    with pytest.raises(PlannerError, match="defer_embedding_wgrad with gradient_accumulation_fusion false"):
        resolve(Job(model="llama3-8b", gpus=8, pp=2, stack="megatron", defer_embedding_wgrad=0,
                    gradient_accumulation_fusion=False))


def test_unfused_moe_activation_by_hand():
    """TEGroupedMLP's unfused activation (experts.py bias_act_func; a GeLU MoE has no fused
    weighted kernel, so Megatron's GeLU MoE runs it): the activation, then the bf16 routing
    probability multiplied in (4 B forward, 12 B backward per element, the activation output
    kept for the probabilities' gradient: 2 B). 8 experts of 2816, top-2, tp 1, 1024 tokens:
    2 x 2816 = 5632 routed activation elements a token. Plain GeLU: 1024 x 5632 x 2 =
    11,534,336 B more saved, 1024 x 5632 x 4 = 23,068,672 B forward, x 12 = 69,206,016 B
    backward. Gated (SwiGLU): + the unfused SwiGLU's 4 B saved, 8 B forward, 16 B backward
    beyond the fused kernel: 34,603,008 B saved, 69,206,016 B forward, 161,480,704 B backward.
    A policy that re-runs the experts' activation (--recompute-modules moe_act) keeps none."""
    from planner.layers.moe import MoEMLP

    ctx, kb = _ctx(tp=1), _off(bias_activation_fusion=1)
    for gated, saved, fwd, bwd in ((False, 11_534_336, 23_068_672, 69_206_016),
                                   (True, 34_603_008, 69_206_016, 161_480_704)):
        moe = MoEMLP(h=H, num_experts=8, top_k=2, fe=F, num_shared=0, fs=0, shared_gate=False, router_bias=0,
                     gated=gated, norm=H)
        assert float(moe.unfused_saved_bytes(ctx, kb)) == saved
        assert float(moe.unfused_saved_bytes(ctx, kb, recomputes_act=True)) == 0.0
        assert _extra(moe, kb, "", ctx) == fwd and _extra(moe, kb, "_bwd", ctx) == bwd
        assert float(moe.unfused_saved_bytes(ctx, kernel_bytes(MEGATRON, 0, FUSED))) == 0.0


def test_a_gelu_moe_runs_its_experts_activation_unfused_by_default():
    """Megatron-Core's TEGroupedMLP has no fused weighted GeLU (experts.py l. 963-985 raise with
    bias_activation_fusion on), so a plain MoE on the megatron stack is priced and exported with
    the fusion off, and a job that turns it on is refused as Megatron-Core raises; a SwiGLU MoE
    keeps the fused kernel; a stack without the switch keeps its own kernels."""
    from planner.errors import PlannerError
    from planner.catalog import load_model
    from planner.plan import _fusion_settings

    gelu = load_model("mixtral-8x7b").model_copy(update={"gated_mlp": False})
    inherited: list = []
    assert _fusion_settings(Job(model="mixtral-8x7b", gpus=8), gelu, MEGATRON, inherited)["bias_activation_fusion"] is False
    assert inherited == [("bias_activation_fusion", False)]
    with pytest.raises(PlannerError, match="Only support fusion of swiglu and quick_gelu in TEGroupedMLP"):
        _fusion_settings(Job(model="mixtral-8x7b", gpus=8, bias_activation_fusion=True), gelu, MEGATRON, [])
    swiglu = load_model("mixtral-8x7b")
    assert _fusion_settings(Job(model="mixtral-8x7b", gpus=8), swiglu, MEGATRON, [])["bias_activation_fusion"] is True
    assert _fusion_settings(Job(model="mixtral-8x7b", gpus=8), gelu, load_stack("torchtitan"), [])[
        "bias_activation_fusion"] is True


def test_megatron_fsdp_hook_copies_the_unfused_weight_gradient_by_hand():
    """Megatron-FSDP's fsdp levels (optim_grads_params) with gradient-accumulation fusion off: the
    post-accumulate-grad hook copies each linear's bf16 autograd gradient into the unit's unsharded
    bucket (megatron_fsdp.py @d98e8a64 _grad_acc l. 647-662, `param.main_grad.copy_(param.grad)`):
    the gradient read (2 B) and the bucket written once (bytes_per_param.gradients, 4 B here), no
    read of the bucket as below FSDP's add: the toy layer's 5,636,096 weights a GPU at tp 2 (above)
    x (2 + 4) = 33,816,576 B a micro-batch. Fused: 0; torch FSDP2 (no such hook priced): 0; the
    megatron-bridge stack's Megatron-FSDP mode turns the fusion off whatever the job says (stack_db
    job_settings), so its job's default (fused) still pays the copy."""
    att, mlp = Attention(h=H, a=A, k=K, d=D, norm=H), DenseMLP(h=H, f=F, gated=True, norm=H)

    def add_bytes(**kw):
        settings, plan, _ = resolve(Job(model="llama3-8b", gpus=8, tp=2, sharding="fsdp", global_batch=64, seq_len=4096,
                                        **kw))
        assert settings.bpp.gradients == 4.0
        ctx = context(plan)
        sc = SimpleNamespace(kb=kernel_bytes(settings.stack, 0, settings), plan=plan, settings=settings)
        return float(wgrad_add_bytes(sc, att.gemms(ctx) + mlp.gemms(ctx)))

    mfsdp = dict(stack="megatron", sharding_mode="megatron_fsdp_optim_grads_params")
    assert add_bytes(**mfsdp, gradient_accumulation_fusion=False) == 5_636_096 * (2 + 4) == 33_816_576
    assert add_bytes(**mfsdp, gradient_accumulation_fusion=True) == 0.0
    assert add_bytes(stack="megatron", sharding_mode="torch_fsdp2", gradient_accumulation_fusion=False) == 0.0
    assert add_bytes(stack="megatron-bridge", sharding_mode="megatron_fsdp_optim_grads_params") == 33_816_576
