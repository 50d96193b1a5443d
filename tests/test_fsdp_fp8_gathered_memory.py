"""FSDP's fp8 all-gather in memory (issue 21; planner/memory.py [fa]): with torchtitan's
enable_fsdp_float8_all_gather (job field fp8_allgather) torchao's WeightWithDynamicFloat8CastTensor
casts each converted Linear's weight to float8 before the all-gather (pytorch/ao @36027d82
torchao/float8/fsdp_utils.py fsdp_pre_all_gather l. 228-251) and fsdp_post_all_gather wraps the
gathered uint8 data as the unsharded weight, a Float8TrainingTensor (l. 253-280): 1 B a weight
element, no bf16 copy. The Float8Linear's forward finds the weight already cast
(torchao/float8/float8_linear.py l. 68-69, tensor_already_casted_to_fp8). The embedding, the
norms and a bf16 output layer stay bf16 (2 B). Every figure below is derived by hand from the
Llama 3 8B shapes (model_zoo llama3-8b: h 4096, ffn 14336, 32 heads, 8 KV heads of 128, vocab
128256, untied)."""

from __future__ import annotations

import pytest

from planner.memory import _PerLayer, block_backward_extra, stage_memory_terms
from planner.params import count_params
from tests.conftest import explain_job

H, F, KV, V = 4096, 14336, 1024, 128256
LAYER_LINEARS = 2 * H * H + 2 * H * KV + 3 * H * F  # wq wo wk wv w1 w2 w3: 218,103,808
LAYER_NORMS = 2 * H  # attention_norm, ffn_norm
EMB = V * H  # 525,336,576

KW = dict(model="llama3-8b", gpus=32, hardware="h200-sxm", stack="torchtitan", precision="fp8",
          global_batch=64, seq_len=8192, sharding="fsdp")


def _per(**fields):
    settings, plan, _, _ = explain_job(**dict(KW, **fields))
    return settings, plan, _PerLayer(settings, plan, count_params(settings.model))


def test_hand_counts():
    assert LAYER_LINEARS == 218_103_808


@pytest.mark.parametrize("ag,want", [
    (True, LAYER_LINEARS * 1 + LAYER_NORMS * 2),   # 218,120,192 B: the converted Linears at 1 B, the norms bf16
    (False, (LAYER_LINEARS + LAYER_NORMS) * 2),    # 436,224,000 B: bf16 all-gather (torchtitan's default)
])
def test_one_block_gathered(ag, want):
    _, plan, per = _per(fp8_allgather=ag)
    assert int(plan.tp) == 1
    assert float(per.layer_gathered) == want


@pytest.mark.parametrize("ag,block", [(True, LAYER_LINEARS + 2 * LAYER_NORMS), (False, 2 * (LAYER_LINEARS + LAYER_NORMS))])
def test_allgather_pool(ag, block):
    # torchtitan's allgather_pool_units 2: the largest unit (the embedding, bf16 either way: 2 V h) beside a block's
    _, _, per = _per(fp8_allgather=ag)
    assert float(per.gather_pool) == 2 * EMB + block


@pytest.mark.parametrize("fp8_out,want", [(False, 2 * EMB), (True, 1 * EMB)])
def test_output_unit_kept_unsharded(fp8_out, want):
    # fully_shard([norm, output], reshard_after_forward=False): the output layer's weight, at 1 B where the job
    # converts it too (fp8_output_layer; the final norm is not in unit_params' count)
    _, _, per = _per(fp8_allgather=True, fp8_output_layer=fp8_out)
    assert float(per.ends["last"]) == want


def test_pipeline_stage_unsharded_weights():
    # FSDP2 under PP keeps the stage's units unsharded: 16 blocks a stage (pp 2), 1 B fewer per linear element
    got = {}
    for ag in (True, False):
        settings, plan, _, _ = explain_job(**KW, pp=2, fp8_allgather=ag)
        got[ag] = {k: float(t["fsdp_unsharded_stage"]) for k, t in stage_memory_terms(settings, plan).items()}
    assert all(got[False][k] - got[True][k] == 16 * LAYER_LINEARS for k in got[True])


def test_backward_transpose_dominated():
    """The fp8 weight's transpose for the grad-input GEMM (torchao/float8/float8_ops.py preprocess_addmm l. 344-345:
    a row-major second operand is copied column-major, b_data.t().contiguous().t()) is a 1 B copy of one Linear's weight
    during its dgrad, w2's the largest: h f. At that GEMM the block holds its output gradient (2 h T), its fp8 cast (1 h T),
    the copy and the grad input (2 f T); at the mul's backward that follows (block_backward_extra [tt5]) the output
    gradient, three 2 f T gradients and w2's bf16 weight gradient 2 h f: larger by T (4 f - h) + h f > 0, so no term."""
    settings, plan, per = _per(fp8_allgather=True)
    from planner.layers import context

    ctx = context(plan)
    T = float(ctx.T)
    kind = count_params(settings.model).layers.kinds[0]
    at_mul = float(block_backward_extra(kind, ctx, plan))
    at_dgrad = T * (2 * H + 1 * H + 2 * F) + 1 * H * F
    assert at_mul == T * (2 * H + 3 * 2 * F) + 2 * H * F
    assert at_mul > at_dgrad


@pytest.mark.parametrize("ag", [True, False])
def test_pipeline_stage_unsharded_output_layer(ag):
    from planner.memory import STAGE_FIRST, STAGE_LAST

    # issue 21: under PP FSDP2 keeps the last stage's output layer unsharded with its blocks (fsdp_unsharded_stage);
    # converted (fp8_output_layer) and gathered in fp8 it is a Float8TrainingTensor of 1 B an element as the layers'
    # Linears are (torchao fsdp_utils.py fsdp_post_all_gather l. 253-280): V h = 525,336,576 B fewer on the last stage
    # than the bf16 output layer, nothing on the first; without the fp8 all-gather it is gathered bf16 either way
    got = {}
    for fp8_out in (False, True):
        settings, plan, _, _ = explain_job(**KW, pp=2, fp8_allgather=ag, fp8_output_layer=fp8_out)
        got[fp8_out] = {k: float(t["fsdp_unsharded_stage"]) for k, t in stage_memory_terms(settings, plan).items()}
    assert got[False][STAGE_LAST] - got[True][STAGE_LAST] == (EMB if ag else 0)
    assert got[False][STAGE_FIRST] == got[True][STAGE_FIRST]
