"""The norms beyond a layer's pre-norms. Post-norms (ModelSpec.post_norms; LayerKind.post_norm):
Gemma 2 and 3 norm each sub-block's output before its residual add. Query/key norms
(ModelSpec.qk_norm; planner/layers/attention.py [10]): Qwen3, Gemma 3 and
Qwen3-Next norm each head's query and key after the QKV projection (transformers q_norm /
k_norm = RMSNorm(head_dim); Megatron --qk-layernorm, TENorm). Priced as their 2 d parameters a
layer, the stack's norm kernel bytes over Q and K, and the norms' bf16 inputs saved for the
backward. Every figure by hand from Qwen3-30B-A3B's shapes: 32 query heads and 4 KV heads of
128; at TP 2 a GPU holds 16 query heads and 2 KV heads, (16 + 2) x 128 = 2,304 elements a token."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from planner.catalog import load_model, load_stack, model_from_hf_config
from planner.layers import context, layer_list
from planner.memory import kind_activation_bytes, layer_memory
from planner.params import count_params
from planner.plan import PlanArrays, resolve
from planner.precisions import BF16, FP8
from planner.schema import Job
from planner.stacks import kernel_bytes
from planner.trainers import load_trainer_config

T = 4096
QK_EL = (16 + 2) * 128  # Q and K elements a token on one GPU at TP 2
DATA = Path(__file__).parent / "data"


def _qwen3(qk: bool):
    return load_model("qwen3-30b-a3b").model_copy(update={"qk_norm": qk})


def _attention(qk: bool):
    return layer_list(_qwen3(qk)).kinds[0]


def _ctx(precision=BF16):
    return context(PlanArrays(tp=2, cp=1, pp=1, vpp=1, dp=8, mbs=1, gbs=1024, seq=T, sharding=1, shard=1,
                              recompute=0, sp=1, schedule=0, precision=precision, ep=8))


def test_catalog_models_state_it():
    """The Qwen3, Qwen3-Next and Gemma 3 entries have the norms; Llama 3 and DeepSeek-V3 (MLA) do not."""
    for name in ("qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "gemma3-27b"):
        assert load_model(name).qk_norm is True, name
    for name in ("llama3-8b", "deepseek-v3", "gpt-oss-120b"):
        assert load_model(name).qk_norm is False, name


def test_parameters_two_head_dims_a_layer():
    """q_norm and k_norm hold one weight of head_dim (128) each: 48 layers x 256 = 12,288."""
    assert count_params(_qwen3(True)).total - count_params(_qwen3(False)).total == 48 * 2 * 128


def test_kernel_bytes_on_q_and_k():
    """The megatron stack's norm (TE's fused RMSNorm) moves 4 B an element forward and 6 B
    backward (stack_db megatron kernels norm, norm_bwd): T x 2,304 x 4 and x 6 more."""
    kb = kernel_bytes(load_stack("megatron"), False)
    ctx = _ctx()
    for sfx, per in (("", 4.0), ("_bwd", 6.0)):
        with_qk = float(_attention(True).mixer.elementwise_bytes(ctx, kb, sfx))
        without = float(_attention(False).mixer.elementwise_bytes(ctx, kb, sfx))
        assert with_qk - without == T * QK_EL * per


@pytest.mark.parametrize("precision", [BF16, FP8])
def test_saved_inputs_bf16_in_every_precision(precision):
    """The norms save their bf16 inputs (the projection's Q and K), 2 B x 2,304 a token, in fp8
    as well: TENorm is not a quantizing linear."""
    ctx = _ctx(precision)
    keeps = ()  # the kind's own tensors only
    diff = float(kind_activation_bytes(_attention(True), ctx, keeps=keeps)) - float(
        kind_activation_bytes(_attention(False), ctx, keeps=keeps))
    assert diff == T * 2 * QK_EL


def _stored(qk: bool, stack: str, recompute: str):
    settings, plan, _ = resolve(Job(model="qwen3-30b-a3b", hardware="h100-sxm", gpus=16, tp=2, pp=1, dp=8, ep=8,
                                    micro_batch=1, global_batch=1024, seq_len=T, sharding="zero1" if stack == "megatron" else "fsdp",
                                    recompute=recompute, stack=stack, sequence_parallel=True))
    settings = dataclasses.replace(settings, model=_qwen3(qk))
    ll = layer_list(settings.model)
    stored, _, _ = layer_memory(settings, plan, context(plan, settings.moe_capacity_factor), ll)
    return float(stored[0])


def test_eager_norms_save_their_fp32_copies_too():
    """torchtitan's eager RMSNorm saves norm_saved_extra B an element beside its input
    (stack_db torchtitan kernels): T x 2,304 x (2 + extra) more a layer; megatron's TENorm
    2 B only. Selective recompute (core attention only) keeps them."""
    extra = load_stack("torchtitan").kernels.norm_saved_extra
    assert extra > 0
    assert _stored(True, "torchtitan", "none") - _stored(False, "torchtitan", "none") == T * QK_EL * (2 + extra)
    assert _stored(True, "megatron", "none") - _stored(False, "megatron", "none") == T * QK_EL * 2
    assert _stored(True, "megatron", "selective") - _stored(False, "megatron", "selective") == T * QK_EL * 2


def test_hugging_face_model_types():
    """Qwen3-Next's config.json (model_type qwen3_next) has them; Mistral 7B's does not."""
    for folder, want in (("qwen3-next-80b-a3b-thinking", True), ("mistral-7b-v0.1", False)):
        p = DATA / "arch" / folder / "config.json"
        assert model_from_hf_config(json.loads(p.read_text()), str(p)).qk_norm is want, folder


SMALL = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
         "--micro-batch-size 4 --global-batch-size 32 --bf16 --vocab-size 32000 --swiglu --normalization RMSNorm "
         "--disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights "
         "--attention-dropout 0 --hidden-dropout 0")


def _args(tmp_path, text):
    p = tmp_path / "run.args"
    p.write_text(text + "\n")
    return p


def test_megatron_flag_read_and_exported(tmp_path, cli):
    """--qk-layernorm is read into the model the flags define (not listed as not modelled);
    without it the model has none (Megatron's default); the export writes it back."""
    on = load_trainer_config(_args(tmp_path, SMALL + " --qk-layernorm"), gpus=8)
    assert load_model(on.job["model"]).qk_norm is True
    assert not any("--qk-layernorm" in x for x in on.not_modelled + on.ignored)
    off = load_trainer_config(_args(tmp_path, SMALL), gpus=8)
    assert load_model(off.job["model"]).qk_norm is False
    r = cli("export", "--model", "qwen3-30b-a3b", "--gpus", 16, "--tp", 2, "--ep", 8, "--global-batch", 64,
            "--micro-batch", 1, "--format", "megatron", "-o", str(tmp_path / "q.sh"))
    assert r.exit_code == 0, r.stderr
    assert "--qk-layernorm" in (tmp_path / "q.sh").read_text()


def test_megatron_args_without_the_flag_against_a_qwen3_model(tmp_path):
    """A Qwen3 model given with --model, arguments without --qk-layernorm: --model wins, with a
    note naming the contradiction."""
    qwen3 = ("--num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 --group-query-attention "
             "--num-query-groups 4 --kv-channels 128 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
             "--global-batch-size 64 --bf16 --swiglu --normalization RMSNorm --disable-bias-linear "
             "--position-embedding-type rope --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 "
             "--moe-ffn-hidden-size 768 --expert-model-parallel-size 8")
    cfg = load_trainer_config(_args(tmp_path, qwen3), gpus=8, model="qwen3-30b-a3b")
    assert any("(no --qk-layernorm) False contradicts" in a for a in cfg.assumed), cfg.assumed
    cfg = load_trainer_config(_args(tmp_path, qwen3 + " --qk-layernorm"), gpus=8, model="qwen3-30b-a3b")
    assert not any("qk-layernorm" in a for a in cfg.assumed), cfg.assumed


# ------------------------------------------------------------------ Gemma's post-norms
H3 = 5376  # Gemma 3 27B hidden size


def _gemma(post: bool):
    return load_model("gemma3-27b").model_copy(update={"post_norms": post})


def test_post_norm_parameters():
    """Two post-norms a layer of h weights each (RMSNorm): 62 x 2 x 5,376 = 666,624."""
    assert count_params(_gemma(True)).total - count_params(_gemma(False)).total == 62 * 2 * H3


def test_post_norm_bytes_and_saved_inputs():
    """Per micro-batch of T tokens at TP 2 under SP (replicated tensors / 2): the megatron stack's
    norm bytes over two h-wide outputs, T x 4 x 2 x 5,376 / 2 forward and x 6 backward; each saves
    its bf16 input, T x 2 x 2 x 5,376 / 2 bytes."""
    kb = kernel_bytes(load_stack("megatron"), False)
    ctx = _ctx()
    with_post, without = layer_list(_gemma(True)).kinds[0], layer_list(_gemma(False)).kinds[0]
    assert float(with_post.post_norm_bytes(ctx, kb, "")) == T * 4 * 2 * H3 / 2
    assert float(with_post.post_norm_bytes(ctx, kb, "_bwd")) == T * 6 * 2 * H3 / 2
    assert float(without.post_norm_bytes(ctx, kb, "")) == 0.0
    diff = float(kind_activation_bytes(with_post, ctx, keeps=())) - float(kind_activation_bytes(without, ctx, keeps=()))
    assert diff == T * 2 * 2 * H3 / 2
    assert (with_post.norms, without.norms) == (4, 2)


def test_post_norms_from_hugging_face():
    """Gemma 3's config.json (model_type gemma3, text_config gemma3_text) has them; Qwen3-Next's not."""
    for folder, want in (("gemma-3-27b-it", True), ("qwen3-next-80b-a3b-thinking", False)):
        p = DATA / "arch" / folder / "config.json"
        assert model_from_hf_config(json.loads(p.read_text()), str(p)).post_norms is want, folder


def test_megatron_export_refuses_post_norms(cli, tmp_path):
    """Megatron-LM's arguments cannot say them: the export refuses (exit 2) instead of writing a
    model without them."""
    from conftest import assert_one_error

    r = cli("export", "--model", "gemma3-27b", "--gpus", 8, "--tp", 8, "--global-batch", 8, "--micro-batch", 1,
            "--seq-len", 4096, "--format", "megatron", "-o", str(tmp_path / "g.sh"))
    assert_one_error(r, "post_norms")
