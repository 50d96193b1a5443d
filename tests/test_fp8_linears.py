"""Which linears the fp8 recipe converts (issue 22, planner/fp8_linears.py, step.py [18]): torchtitan's module filter
(filter_fqns by substring, dims of 16, torchao's auto_filter_small_kn thresholds per recipe), the MoE router bf16 by
default (the shipped MoE configs' filter_fqns ["output", "router.gate"]; Megatron's TopKRouter is no TE module), and
what a kept-bf16 linear costs: its GEMMs at the bf16 rate, none of the recipe's casts, its weight gathered at 2 B
under FSDP's fp8 all-gather."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_model
from planner.compute import price_gemms
from planner.errors import PlannerError
from planner.fp8_linears import converted_param_change, converted_shares, torchtitan_linears
from planner.layers import layer_list
from planner.layers.mamba import gemm_cast_elements
from planner.plan import resolve
from planner.precisions import FP8_RECIPE_CODES
from planner.schema import Job
from planner.step import _context, layer_times

TW, RW = FP8_RECIPE_CODES["tensorwise"], FP8_RECIPE_CODES["rowwise"]


def _kind(model, moe=False):
    ll = layer_list(load_model(model))
    return next(k for k in ll.kinds if k.has_experts == moe)


def test_auto_filter_thresholds_by_hand():
    """qwen3-30b-a3b (h 2,048, 32 heads and 4 KV heads of 128): weights [N, K] wq [4,096, 2,048], wk = wv [512, 2,048],
    wo [2,048, 4,096]. torchao @9cd41075 float8_linear_utils.py: tensorwise skips K <= 4,096 and N <= 1,024 (l. 203):
    wk, wv; rowwise skips N <= 2,048 (wk, wv, wo), K <= 1,024, or N <= 4,096 and K <= 2,048 (wq). QKV's converted
    share by out width: tensorwise 4,096 / 5,120 = 0.8, rowwise 0; wo 1 and 0. Without the flag every row converts."""
    k = _kind("qwen3-30b-a3b", moe=True)
    lins = torchtitan_linears(k.mixer, k.mlp)
    assert lins["qkv"] == [("attention.wq", 4096, 2048), ("attention.wk", 512, 2048), ("attention.wv", 512, 2048)]
    assert lins["router"] == [("moe.router.gate", 128, 2048)]
    codes = np.array([TW, RW])
    s = converted_shares(k.mixer, k.mlp, ["output", "router.gate", "auto_filter_small_kn"], codes)
    assert s["qkv"].tolist() == [0.8, 0.0] and s["attn_out"].tolist() == [1.0, 0.0]
    assert s["router"].tolist() == [0.0, 0.0]
    plain = converted_shares(k.mixer, k.mlp, ["output"], codes)
    assert plain["qkv"].tolist() == [1.0, 1.0] and plain["router"].tolist() == [1.0, 1.0]  # router.gate not named
    default = converted_shares(k.mixer, k.mlp, None, codes)  # the shipped MoE configs' list
    assert default["router"].tolist() == [0.0, 0.0] and default["qkv"].tolist() == [1.0, 1.0]


def test_substring_filter_and_dims_of_16():
    """`filter_fqn in fqn` (torchtitan components/quantization/utils.py l. 25): "attention.wq" names DeepSeek-V3's
    wq_a and wq_b too (the query down and up projections), not wkv_a; "w1" names feed_forward.w1 and the shared
    experts' w1. A weight dim not a multiple of 16 stays bf16 whatever the list (l. 19-22)."""
    k = _kind("deepseek-v3", moe=True)
    s = converted_shares(k.mixer, k.mlp, ["attention.wq", "w1"], np.array([TW]))
    assert s["mla_q_down"].tolist() == [0.0] and s["mla_q_up"].tolist() == [0.0]
    assert s["mla_kv_down"].tolist() == [1.0] and s["router"].tolist() == [1.0]
    assert s["shared_up"].tolist() == [0.5]  # w1 [2,048, 7,168] kept, w3 converted: half the out width
    dense = _kind("deepseek-v3", moe=False)
    assert converted_shares(dense.mixer, dense.mlp, ["w1"], np.array([TW]))["mlp_up"].tolist() == [0.5]
    gpt3 = _kind("gpt3-175b")  # h 12,288 = 16 x 768: every linear divides; a 50,257 vocabulary is the output's alone
    assert all(v.tolist() == [1.0] for v in converted_shares(gpt3.mixer, gpt3.mlp, [], np.array([TW])).values())


def test_converted_params_by_hand():
    """FSDP's fp8 all-gather gathers the converted linears at 1 B: against the TP-split matrices (the former
    count), qwen3-30b-a3b's default keeps the router [128, 2,048] bf16 (it was not counted: 0 added); converting it
    (filter_fqns ["output"]) adds 262,144 replicated elements; the tensorwise auto filter keeps wk and wv bf16:
    2 x 512 x 2,048 = 2,097,152 fewer split elements."""
    k = _kind("qwen3-30b-a3b", moe=True)
    c = np.array([TW])
    assert [x.tolist() for x in converted_param_change(k.mixer, k.mlp, None, c)] == [[0.0], [0.0]]
    assert [x.tolist() for x in converted_param_change(k.mixer, k.mlp, ["output"], c)] == [[0.0], [128 * 2048]]
    split, rep = converted_param_change(k.mixer, k.mlp, ["output", "router.gate", "auto_filter_small_kn"], c)
    assert (split.tolist(), rep.tolist()) == ([-2 * 512 * 2048], [0.0])


QWEN = dict(model="qwen3-30b-a3b", gpus=8, hardware="h100-sxm", stack="torchtitan", precision="fp8",
            fp8_recipe="tensorwise", ep=8, sharding="fsdp", seq_len=4096, global_batch=8, micro_batch=1)


def _moe_times(**kw):
    s, plan, _ = resolve(Job(**{**QWEN, **kw}))
    sc = _context(s, plan, placed=False)
    lt = layer_times(sc)
    k = next(i for i, kind in enumerate(sc.ll.kinds) if kind.has_experts)
    return sc, k, lt


def test_router_time_by_hand():
    """The router row [T, 128, 2,048] bf16 by default, fp8 where filter_fqns leaves router.gate out: the forward
    GEMM seconds differ by its bf16 - fp8 price (tensorwise: low_fwd 1, gemm_speed 1), and the forward casts by
    its input T x 2,048 and weight 128 x 2,048 elements at 5 B (cast_bytes_per_element) over the HBM."""
    sc_bf, k, bf = _moe_times()
    sc_f8, _, f8 = _moe_times(filter_fqns=["output"])
    row = [r for r in sc_bf.ll.kinds[k].mlp.gemms(sc_bf.ctx) if r[0].name == "router"]
    hw = sc_bf.settings.hardware
    t16 = float(np.ravel(price_gemms(row, hw, np.zeros_like(sc_bf.plan.precision))["router"])[0])
    t8 = float(np.ravel(price_gemms(row, hw, sc_bf.plan.precision)["router"])[0])
    assert float(np.ravel(bf.gemm_fwd[k])[0]) - float(np.ravel(f8.gemm_fwd[k])[0]) == pytest.approx(t16 - t8, rel=1e-9)
    T = float(np.ravel(sc_bf.ctx.T)[0])
    el = float(np.ravel(gemm_cast_elements(row))[0])
    assert el == T * 2048 + 128 * 2048
    cast = 5.0 * el / float(np.ravel(sc_bf.hbm)[0])
    d_fwd = float(np.ravel(f8.fwd[k])[0]) - float(np.ravel(bf.fwd[k])[0])
    assert d_fwd == pytest.approx(-(t16 - t8) + cast, rel=1e-9)


def test_megatron_router_bf16_and_filter_refused():
    """Megatron's TopKRouter is no TE module: its GEMM at the bf16 rate under an fp8 plan, no casts; a job's
    filter_fqns means nothing under Transformer Engine's autocast: refused."""
    base = dict(model="qwen3-30b-a3b", gpus=8, hardware="h100-sxm", precision="fp8", ep=8, sharding="zero1",
                seq_len=4096, global_batch=8, micro_batch=1)
    s, plan, _ = resolve(Job(**base))
    sc = _context(s, plan, placed=False)
    from planner.step import converted

    k = next(kind for kind in sc.ll.kinds if kind.has_experts)
    rows = k.mixer.gemms(sc.ctx) + k.mlp.gemms(sc.ctx)
    assert {n: float(v) for n, v in converted(sc, k.mixer, k.mlp, rows).items()} == {"router": 0.0}
    with pytest.raises(PlannerError, match="filter_fqns is set but stack megatron converts no Linear by name"):
        resolve(Job(**base, filter_fqns=["router.gate"]))
    with pytest.raises(PlannerError, match="filter_fqns needs precision fp8"):
        resolve(Job(**{**QWEN, "precision": "bf16", "fp8_recipe": None}, filter_fqns=["output"]))
    with pytest.raises(PlannerError, match="filter_fqns names the output layer"):
        resolve(Job(**QWEN, filter_fqns=["output"], fp8_output_layer=True))


def test_torchtitan_toml_without_filter_converts_the_router(tmp_path):
    """[quantize.linear.float8] without filter_fqns: torchtitan's default [] (job_config.py l. 741) converts the router
    gate too: the reader says filter_fqns=[] (assumed), the job prices it in fp8."""
    from planner.trainers import load_trainer_config

    p = tmp_path / "t.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["float8"]\n'
                 '[parallelism]\ndata_parallel_shard_degree = -1\n[float8]\n')
    cfg = load_trainer_config(p, gpus=8)
    assert cfg.job["filter_fqns"] == [] and cfg.job["fp8_output_layer"] is True
    assert any("filter_fqns=[]: the MoE router gate converted too" in a for a in cfg.assumed)


def test_mla_down_projections_gathered_in_fp8_by_hand():
    """torchtitan's float8 converter swaps DeepSeek-V3's MLA down projections (attention.wq_a [1,536, 7,168],
    attention.wkv_a [576, 7,168]: nn.Linear, dims of 16) too, so FSDP's fp8 all-gather gathers them at 1 B
    (memory.converted_linear_elems); filter_fqns naming them keeps them at 2 B. The all-gather pool holds the largest
    unit (the embedding, 129,280 x 7,168 elements) plus allgather_pool_units - 1 = 1 layer unit (stack_db torchtitan
    fsdp.allgather_pool_units 2): 7,168 x (1,536 + 576) = 15,138,816 elements, 1 B more each."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_torchtitan_grouped_mm import DSV3, explain_job

    a = explain_job(**DSV3)[3]["memory"]
    b = explain_job(**DSV3, filter_fqns=["output", "router.gate", "wq_a", "wkv_a"])[3]["memory"]
    assert b["total_bytes"] - a["total_bytes"] == 7168 * (1536 + 576) == 15_138_816
    assert b["terms"]["stream_pools"] - a["terms"]["stream_pools"] == 15_138_816


def test_router_rows_are_the_local_tokens():
    """The router GEMM's M is the layer's local tokens: under TP with sequence parallelism (Megatron's MoE with TP
    requires it, moe_layer.py l. 636-640) the router runs on the [s / tp, b, h] shard: 4,096 / 2 = 2,048 rows, where
    the shared experts' and attention's GEMMs run on the gathered 4,096."""
    s, plan, _ = resolve(Job(model="qwen3-30b-a3b", gpus=16, hardware="h100-sxm", precision="fp8", tp=2, ep=8,
                             sequence_parallel=True, sharding="zero1", seq_len=4096, global_batch=16, micro_batch=1))
    sc = _context(s, plan, placed=False)
    k = next(kind for kind in sc.ll.kinds if kind.has_experts)
    rows = {r[0].name: r[0] for r in k.mixer.gemms(sc.ctx) + k.mlp.gemms(sc.ctx)}
    assert float(np.ravel(rows["router"].M)[0]) == 2048.0
    assert float(np.ravel(rows["qkv"].M)[0]) == 4096.0
