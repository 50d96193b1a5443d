"""Megatron's routing map padded for quantized grouped GEMMs and --enable-experimental (issue 21; job fields
moe_router_padding and enable_experimental; planner/layers/moe.py [17] padded_routing_map_bytes,
memory.py [dh]). NVIDIA/Megatron-LM @d98e8a64: MoEAlltoAllTokenDispatcher.dispatch_preprocess (token_dispatcher.py
l. 643-655) keeps self.routing_map until the layer's next forward; with the padding, is_experimental_enabled() and
moe_permute_fusion it is fused_pad_routing_map's output (fusions/fused_pad_routing_map.py l. 88-100: int32 [E, tokens]
transposed, a new tensor), 4 B a cell in place of the router's bool map (1 B); without --enable-experimental
pad_routing_map writes into the bool map in place (moe_utils.py l. 731-763): nothing more kept. DeepEP's
dispatched_routing_map likewise (l. 1393-1436); and under --enable-experimental with moe_permute_fusion DeepEP's
received map comes from fused_indices_to_multihot, which saves only its int32 position map [n_recv, E / ep]
(fusions/fused_indices_converter.py l. 211-213, 232) in place of the unfused conversion's int64 index pairs."""

from __future__ import annotations

import pytest

from planner.layers import context
from planner.memory import fused_multihot, moe_routing_saves, padded_routing_map
from planner.params import count_params
from tests.conftest import assert_one_error, explain_job

T = 4096
DSV3 = dict(model="deepseek-v3", gpus=2048, ep=64, pp=16, tp=1, global_batch=4096, stack="megatron", precision="fp8",
            seq_len=T, micro_batch=1, recompute="none", moe_rank_imbalance=1.0, moe_permute_fusion=True)
PAD = dict(moe_router_padding=True, enable_experimental=True)


def _held(dispatcher, fused_router, **fields):
    settings, plan, _, _ = explain_job(**dict(DSV3, moe_dispatcher=dispatcher, moe_router_fusion=fused_router, **fields))
    moe = next(k for k in count_params(settings.model).layers.kinds if k.has_experts).mlp
    held, rc = moe.dispatcher_held_bytes(context(plan), dispatcher, 2.0, fused_router, padded_routing_map(settings))
    return float(held), float(rc)


@pytest.mark.parametrize("fields,want", [
    (dict(moe_router_padding=True, enable_experimental=True, moe_permute_fusion=True), True),
    (dict(moe_router_padding=True, enable_experimental=False, moe_permute_fusion=True), False),
    (dict(moe_router_padding=True, enable_experimental=True, moe_permute_fusion=False), False),
    (dict(moe_router_padding=False, enable_experimental=True, moe_permute_fusion=True), False),
])
def test_the_int32_copy_needs_all_three(fields, want):
    # token_dispatcher.py l. 649-654: fused_pad_routing_map only where is_experimental_enabled() and moe_permute_fusion
    settings = explain_job(**dict(DSV3, moe_dispatcher="alltoall", **fields))[0]
    assert padded_routing_map(settings) is want


@pytest.mark.parametrize("fused_router,want", [
    # DeepSeek-V3 (E 256), 4,096 local tokens (tp 1, micro-batch 1): the bf16 probabilities 2 x 256 = 512 B a token
    # and the padded int32 map 4 x 256 = 1,024 B (4 MiB a layer), which replaces the unfused router's bool map (256 B)
    (False, (512 + 1024, 0)),
    # the fused router's bool map (TE saves it) is no longer the dispatcher's: nothing held beyond the saves under
    # full recompute (unpadded: (512, 256), tests/test_moe_routing_saved.py test_alltoall_held_by_hand)
    (True, (512 + 1024, 0)),
])
def test_alltoall_padded_map_deepseek_v3_by_hand(fused_router, want):
    assert _held("alltoall", fused_router, **PAD) == (T * want[0], T * want[1])
    assert T * 4 * 256 == 4 * 2**20  # the int32 map: 4 MiB an MoE layer


def test_alltoall_without_experimental_keeps_the_bool_map():
    # pad_routing_map pads the bool map in place: the held bytes are the unpadded plan's
    assert _held("alltoall", False, moe_router_padding=True) == (T * 768, 0)
    assert _held("alltoall", True, moe_router_padding=True) == (T * 512, T * 256)


def test_deepep_padded_map_deepseek_v3_by_hand():
    # DeepEP at EP 64: token_probs fp32 [n, 8] (32 B a local token) and the received map, now int32 [n_recv, 256 / 64]:
    # 16 B a received token (bool: 4 B), a token reaching 64 (1 - (63/64)^8) = 7.58 ranks; rc: torch.topk's int64 indices
    reach = 64 * (1 - (63 / 64) ** 8)
    held, rc = _held("deepep", False, **PAD)
    assert held == pytest.approx(T * (32 + 16 * reach), rel=1e-12) and rc == T * 64


# Mixtral 8x7B (E 8, top-2) at TP 2 with SP, EP 8 over 8 ranks, as tests/test_moe_routing_saved.py test_deepep_by_hand:
# one local expert, 1.875 received tokens and 2 rows a token of T
MIXTRAL = dict(model="mixtral-8x7b", gpus=64, hardware="h100-sxm", stack="megatron", precision="bf16", global_batch=64,
               seq_len=T, tp=2, pp=4, ep=8, micro_batch=1, recompute="none", sharding="zero1", moe_rank_imbalance=1.0,
               moe_dispatcher="deepep", moe_router_fusion=True, moe_permute_fusion=True)


def _deepep_saved(**fields):
    settings, plan, _, _ = explain_job(**dict(MIXTRAL, **fields))
    pc = count_params(settings.model)
    kind = next(k for k in pc.layers.kinds if k.has_experts)
    return float(moe_routing_saves(settings)(kind, context(plan))), settings


def test_deepep_fused_multihot_saves_the_position_map():
    # fused_indices_to_multihot saves int32 [n_recv, 1]: 4 B a received token (1.875 a token), in place of the int64
    # index pairs of probs[mask] and the index_put_ (2 x 16 B a row, 2 rows a token)
    off, s_off = _deepep_saved()
    on, s_on = _deepep_saved(enable_experimental=True)
    assert (fused_multihot(s_off), fused_multihot(s_on)) == (False, True)
    assert on - off == pytest.approx(T * (1.875 * 4 - 2 * 32), rel=1e-12)  # -232,448 B a layer
    # the unfused permutation runs the unfused conversion whatever the flag (l. 1425: `and self.permute_fusion`)
    assert _deepep_saved(enable_experimental=True, moe_permute_fusion=False)[0] == _deepep_saved(moe_permute_fusion=False)[0]


def _first_stage(**fields):
    row = explain_job(**dict(dict(model="qwen3-30b-a3b", gpus=16, tp=1, pp=4, ep=4, stack="megatron", precision="fp8",
                                  seq_len=T, micro_batch=1, global_batch=64, sharding="zero1", moe_dispatcher="alltoall",
                                  moe_rank_imbalance=1.0, moe_permute_fusion=True), **fields))[3]
    return row["memory"]["stages"]["first"]["activations_bytes"]


@pytest.mark.parametrize("fields,per_token", [
    (dict(recompute="none", moe_router_fusion=False), 3 * 128),  # int32 map in place of the unfused router's bool map
    (dict(recompute="none", moe_router_fusion=True), 4 * 128),   # the fused router's map is one of the in-flight saves
    (dict(recompute="full", moe_router_fusion=True), 3 * 128),   # ... which full recompute's dispatcher held before
])
def test_once_a_layer_on_the_stage(fields, per_token):
    # Qwen3-30B-A3B (E 128), PP 4: the first stage's 12 MoE layers each keep one micro-batch's map (not x the 4 in flight)
    assert _first_stage(**fields, **PAD) - _first_stage(**fields) == 12 * T * per_token


@pytest.mark.parametrize("fields,needle", [
    (dict(DSV3, moe_dispatcher="alltoall", precision="bf16", moe_router_padding=True),
     "fp8/fp4 must be specified"),
    (dict(DSV3, moe_dispatcher="allgather", moe_router_padding=True), "allgather and alltoall_seq"),
    (dict(model="llama3-8b", gpus=8, precision="fp8", moe_router_padding=True), "has no experts"),
    (dict(model="qwen3-30b-a3b", gpus=8, ep=8, stack="torchtitan", sharding="fsdp", precision="fp8",
          moe_router_padding=True), "Megatron-Core setting"),
    (dict(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", enable_experimental=True),
     "Megatron-LM's --enable-experimental"),
])
def test_refused_where_megatron_refuses(fields, needle):
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match=needle.replace("(", r"\(")):
        explain_job(**fields)


# ------------------------------------------------------------------ the Megatron reader and export
from tests.test_imbalance import ARGS  # noqa: E402  (a Mixtral-shaped Megatron script, alltoall dispatcher)

FP8_ARGS = ARGS + " --fp8-format hybrid --fp8-recipe tensorwise --moe-permute-fusion"


@pytest.mark.parametrize("extra,padding,experimental,assumed", [
    ("", None, None, "moe_router_padding=false: no --moe-router-padding-for-quantization"),
    ("--moe-router-padding-for-quantization", True, None, "enable_experimental=false: no --enable-experimental"),
    ("--moe-router-padding-for-quantization --enable-experimental", True, True, None),
    ("--moe-router-padding-for-fp8 --enable-experimental", True, True,
     "moe_router_padding=true: --moe-router-padding-for-fp8, the older spelling"),
])
def test_reader_reads_the_flags(tmp_path, extra, padding, experimental, assumed):
    from planner.trainers import load_trainer_config

    p = tmp_path / "run.args"
    p.write_text(FP8_ARGS + " " + extra + "\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=16, model="mixtral-8x7b")
    assert (cfg.job.get("moe_router_padding"), cfg.job.get("enable_experimental")) == (padding, experimental)
    assert not any("padding" in x or "experimental" in x for x in cfg.not_modelled + cfg.unmodelled + cfg.ignored)
    assert (assumed is None and not any("padding" in a or "experimental" in a for a in cfg.assumed)) or any(
        a.startswith(assumed) for a in cfg.assumed)


def test_reader_ignores_the_padding_on_a_dense_model(tmp_path):
    from planner.trainers import load_trainer_config

    dense = ARGS.replace("--expert-model-parallel-size 8 --num-experts 8 --moe-router-topk 2 ", "").replace(
        " --moe-token-dispatcher-type alltoall", "")
    p = tmp_path / "run.args"
    p.write_text(dense + " --fp8-format hybrid --moe-router-padding-for-quantization --enable-experimental\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=8)
    assert "moe_router_padding" not in cfg.job and cfg.job["enable_experimental"] is True
    assert any(x.startswith("--moe-router-padding-for-quantization") and "no --num-experts" in x for x in cfg.ignored)


def test_reader_bf16_padding_exits_2(tmp_path, cli):
    p = tmp_path / "run.args"
    p.write_text(ARGS + " --moe-router-padding-for-quantization\n")
    assert_one_error(cli("explain", str(p), "--gpus", "16"), "fp8/fp4 must be specified")


@pytest.mark.parametrize("fields", [PAD, dict(enable_experimental=True), {}])
def test_export_reads_back(fields):
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    _, _, _, row = explain_job(model="mixtral-8x7b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", global_batch=8,
                               micro_batch=1, seq_len=T, precision="fp8", moe_dispatcher="alltoall",
                               moe_permute_fusion=True, **fields)
    text = export_plan(row["plan"], "megatron")[0]
    assert ("--moe-router-padding-for-quantization" in text, "--enable-experimental" in text) == (
        bool(fields.get("moe_router_padding")), bool(fields.get("enable_experimental")))
    check_readback(row, "megatron", text)
