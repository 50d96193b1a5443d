"""The weight-gradient tensors a Megatron linear hands to autograd, each by hand from its source
(planner/memory.py [dw], [ow], [uf]): Transformer Engine's cached dummy weight gradients with
gradient-accumulation fusion, the per-call dummies of older code versions, and the output
layer's weight gradient without fusion.

Llama 3 70B at TP 8: h 8,192, 64 query heads and 8 KV heads of 128, SwiGLU f 28,672, vocabulary
128,256 (16,032 a TP rank). Per GPU the linears' weights are QKV (64 / 8 + 2) x 128 = 1,280 x 8,192,
the output projection 8,192 x 1,024, the up projection 2 x 28,672 / 8 = 7,168 x 8,192, the down
projection 8,192 x 3,584, and the output layer 16,032 x 8,192."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.memory import STAGE_FIRST, STAGE_LAST, stage_memory_terms

QKV, PROJ, UP, DOWN = 1280 * 8192, 8192 * 1024, 7168 * 8192, 8192 * 3584
OUT = 16032 * 8192


def _m70(explain, **kw):
    # the catalog's 128,256 rows pinned (16,032 a tp rank; megatron pads them to 129,024 at tp 8, stack_db vocab_padding)
    job = dict(model="llama3-70b", gpus=16, tp=8, pp=2, stack="megatron", micro_batch=1, global_batch=16,
               seq_len=4096, recompute="full", sequence_parallel=True, padded_vocab_size=128256)
    return explain(**{**job, **kw})


def _stages(explain, **kw):
    settings, plan, _, _ = _m70(explain, **kw)
    return stage_memory_terms(settings, plan)


def test_cached_dummies_one_per_weight_shape(explain):
    """TE @4329ff84 module/base.py get_dummy_wgrad caches one bf16 tensor per (shape, dtype) for the
    run: with fusion (Megatron's default) every rank holds one per distinct weight shape of its
    layers, 2 B x (QKV + proj + up + down) = 213,909,504 B on the first stage, and the last stage
    the output layer's too (Megatron's ColumnParallelLinear, layers.py l. 733-762): + 2 x 16,032 x
    8,192 = 476,577,792 B. However many layers share a shape, one tensor."""
    st = _stages(explain)
    layers = 2 * (QKV + PROJ + UP + DOWN)
    assert layers == 213_909_504
    assert float(st[STAGE_FIRST].dummy_wgrads) == layers
    assert float(st[STAGE_LAST].dummy_wgrads) == layers + 2 * OUT == 476_577_792


def test_no_cached_dummies_without_fusion_or_in_older_code(explain):
    """--no-gradient-accumulation-fusion: the GEMM writes a real bf16 gradient, no dummy kept; a run
    of Megatron-LM before 28766b55fb (2023-09-05) returned None (dummy_wgrads none); a per-call
    dummy (TE before #1651) is freed by the DDP hook: none of them is kept."""
    for kw in (dict(gradient_accumulation_fusion=False), dict(dummy_wgrads="none"), dict(dummy_wgrads="per_call")):
        st = _stages(explain, **kw)
        assert float(st[STAGE_FIRST].dummy_wgrads) == 0.0 and float(st[STAGE_LAST].dummy_wgrads) == 0.0


def test_per_call_dummy_is_one_linears_transient(explain):
    """A per-call dummy (torch.empty of the weight's shape each backward, freed by the DDP hook right
    after AccumulateGrad) lives in one layer's backward as the unfused weight gradient does [uf]: the
    largest linear's, the up projection, 2 B x 7,168 x 8,192 = 117,440,512 B in the recompute buffer."""
    none = _stages(explain, dummy_wgrads="none")[STAGE_FIRST]
    per = _stages(explain, dummy_wgrads="per_call")[STAGE_FIRST]
    assert float(per.recompute_buffer - none.recompute_buffer) == 2 * UP == 117_440_512


def test_experts_share_one_dummy(explain):
    """Mixtral 8x7B, TP 1, EP 2 (4 local experts of one shape each): QKV (32 + 16) x 128 x 4,096,
    projection 4,096^2, the experts' up 2 x 14,336 x 4,096 and down 4,096 x 14,336 once each (TE's
    GroupedLinear returns the cached dummy of its one shape for every expert, grouped_linear.py
    l. 1131-1158), the router (a torch parameter) none, the output layer 32,000 x 4,096."""
    settings, plan, _, _ = explain(model="mixtral-8x7b", gpus=8, tp=1, ep=2, stack="megatron", micro_batch=1,
                                   global_batch=8, seq_len=4096, recompute="full", moe_grouped_gemm=True)
    t = stage_memory_terms(settings, plan)[STAGE_LAST]
    el = 48 * 128 * 4096 + 4096 * 4096 + 2 * 14336 * 4096 + 4096 * 14336 + 32000 * 4096
    assert float(t.dummy_wgrads) == 2 * el == 698_351_616


def test_output_layer_weight_gradient_without_fusion(explain):
    """--no-gradient-accumulation-fusion, TP 8 with SP, one stage, micro-batch 1 x 1,024 tokens, no
    recompute (layers.py backward l. 637-810: grad_input [s, b, h] first, then grad_weight (V / t) x h
    bf16). At that GEMM the last stage holds beside its layers the final norm's input (2 h / 8) and
    output (the layer's saved input, sequence-sharded: 2 h / 8), the logits' bf16 gradient
    (2 x 16,032), the input gradient (2 h) and its reduce-scattered part (2 h / 8) a token, and the
    weight gradient 2 x 16,032 x 8,192: 1,024 x 54,592 + 262,668,288 = 318,570,496 B. The loss's
    peak holds 1,024 x (2 x 2 h / 8 + 6 x 16,032) = 102,694,912 and a layer's
    backward buffer the up projection's unfused gradient, 117,440,512 [uf]; the moment is above
    their sum by 98,435,072 B, the output activations' excess. With fusion there is no such tensor."""
    kw = dict(gpus=8, pp=1, global_batch=8, seq_len=1024, recompute="none")
    off = _stages(explain, gradient_accumulation_fusion=False, **kw)[STAGE_LAST]
    on = _stages(explain, **kw)[STAGE_LAST]
    moment = 1024 * (2 * 2 * 8192 // 8 + 2 * 16032 + 2 * 8192 + 2 * 8192 // 8) + 2 * OUT
    assert moment == 318_570_496
    assert float(off.recompute_buffer - on.recompute_buffer) == 2 * UP
    assert float(off.output_activations - on.output_activations) == moment - 102_694_912 - 2 * UP == 98_435_072
    # at 4,096 tokens the loss's peak (6 B a logit) is the larger: nothing added
    off4 = _stages(explain, gradient_accumulation_fusion=False, **{**kw, "seq_len": 4096})[STAGE_LAST]
    on4 = _stages(explain, **{**kw, "seq_len": 4096})[STAGE_LAST]
    assert float(off4.output_activations) == float(on4.output_activations)


def test_dummy_wgrads_refused_on_a_stack_without_the_switch(explain):
    with pytest.raises(PlannerError, match="dummy_wgrads is set but stack torchtitan"):
        explain(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", micro_batch=1, global_batch=8,
                seq_len=8192, dummy_wgrads="cached")


# ---- Megatron --empty-unused-memory-level (the job's empty_unused_memory_level; memory.py [13])
KW8 = dict(model="llama3-8b", gpus=8, stack="megatron", micro_batch=1, global_batch=8, seq_len=8192)


def test_empty_cache_level_moves_no_priced_figure(explain, cli, tmp_path):
    """torch.cuda.empty_cache() after the forward-backward (1) or the optimizer step too (2)
    (training.py @d98e8a64 l. 3149-3150, 3229-3230) frees only wholly free segments between
    phases: the allocated peak, the reserved point and the band's top are the same; explain says so
    beside the band."""
    import yaml

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({**KW8, "hardware": "h100-sxm", "empty_unused_memory_level": 1}))
    r = cli("explain", job)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "--empty-unused-memory-level 1: torch.cuda.empty_cache()" in r.stdout
    _, _, _, off = explain(**KW8)
    for level in (1, 2):
        _, _, _, on = explain(**KW8, empty_unused_memory_level=level)
        for k in ("allocated_bytes", "reserved_bytes", "reserved_high_bytes", "total_bytes"):
            assert on["memory"][k] == off["memory"][k]
        assert on["memory"]["fragmentation"]["empty_unused_memory_level"] == level
    assert "empty_unused_memory_level" not in off["memory"]["fragmentation"]


def test_empty_cache_level_reader_export_and_refusals(tmp_path):
    from planner.cli.export import resolved_plan
    from planner.plan import resolve
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan, plan_signature

    plan = resolved_plan(Job(**KW8, empty_unused_memory_level=2))
    text, _ = export_plan(plan, "megatron")
    assert "--empty-unused-memory-level 2" in text
    p = tmp_path / "e.sh"
    p.write_text(text)
    cfg = load_trainer_config(p)
    assert cfg.job["empty_unused_memory_level"] == 2
    assert plan_signature(resolved_plan(Job.model_validate(cfg.job))) == plan_signature(plan)
    a = tmp_path / "bad.args"
    a.write_text("--micro-batch-size 1 --global-batch-size 8 --seq-length 8192 --bf16 --empty-unused-memory-level 3\n")
    with pytest.raises(PlannerError, match="--empty-unused-memory-level: invalid choice: '3'") as e:  # argparse's
        load_trainer_config(a, fmt="megatron", model="llama3-8b", gpus=8)
    assert e.value.hint.startswith("valid: 0, 1, 2 (")
    with pytest.raises(PlannerError, match="empty_unused_memory_level is set but stack torchtitan"):
        resolve(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", empty_unused_memory_level=1))
    # a code version's dummies are no setting of the file
    with pytest.raises(PlannerError, match="dummy_wgrads per_call"):
        export_plan(resolved_plan(Job(**KW8, dummy_wgrads="per_call")), "megatron")


def test_megatron_fsdp_keeps_the_unfused_weight_gradient(explain):
    """Megatron-FSDP at its fsdp level (optim_grads_params) registers a post-accumulate-grad hook on every parameter
    (NVIDIA/Megatron-LM @d98e8a64 megatron_fsdp.py l. 1132-1143) whose _grad_acc (l. 635-680) copies the autograd
    gradient into the unit's unsharded bucket and deletes it, as Megatron's DDP hook does: without the fusion one
    linear's bf16 weight gradient lives in a layer's backward, the up projection's 2 x 7,168 x 8,192 = 117,440,512 B
    at TP 8 [uf] (0 before: priced as FSDP2's path). torch FSDP2 (--use-torch-fsdp2) keeps none in that term (its
    unsharded gradients are fsdp_unit_grads). Megatron-Bridge turns the fusion off under Megatron-FSDP whatever the
    job says (stack_db megatron-bridge job_settings, other overridden): its fsdp-level plan holds it with the job's
    fusion left on."""
    kw = dict(gpus=16, pp=1, sharding="fsdp", recompute="full")
    mf = {g: _stages(explain, sharding_mode="megatron_fsdp_optim_grads_params", gradient_accumulation_fusion=g,
                     **kw)[STAGE_FIRST] for g in (True, False)}
    assert float(mf[False].recompute_buffer - mf[True].recompute_buffer) == 2 * UP == 117_440_512
    t2 = {g: _stages(explain, sharding_mode="torch_fsdp2", gradient_accumulation_fusion=g, **kw)[STAGE_FIRST]
          for g in (False,)}
    assert float(t2[False].recompute_buffer) == float(mf[True].recompute_buffer)
    br = {s: _stages(explain, stack=s, sharding_mode="megatron_fsdp_optim_grads_params", **kw)[STAGE_FIRST]
          for s in ("megatron-bridge",)}
    assert float(br["megatron-bridge"].recompute_buffer) == float(mf[False].recompute_buffer)
