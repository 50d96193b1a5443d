"""Mixture-of-experts models, multi-head latent attention and expert parallelism
(planner/moe.py, params.py, catalog.py's HF reader).

Published figures the parameter counts are checked against (the cards round or truncate to
the printed digit: DeepSeek-V3's 37.55B active prints as "37B"):
  DeepSeek-V3 report (arXiv:2412.19437) abstract: 671B total, 37B activated per token.
  Mixtral 8x7B model card / announcement: 46.7B total, 12.9B per token.
  Mixtral 8x22B announcement: 141B total, 39B active.
  Qwen3-30B-A3B model card: 30.5B total, 3.3B activated; Qwen3-235B-A22B: 235B / 22B.
"""

from __future__ import annotations

import json
import math

import pytest

from planner.catalog import load_model, model_from_hf_config
from planner.compute import flops_per_token
from planner.errors import PlannerError
from planner.layers import context, layer_list
from planner.params import moe_layer_count
from planner.params import count_params
from planner.schema import ModelSpec


def _moe_block(model):
    """The model's MoE MLP block (planner/layers/moe.py)."""
    return next(k.mlp for k in layer_list(model).kinds if k.has_experts)


@pytest.mark.parametrize("name,total,active,digits", [
    ("deepseek-v3", 671, 37, 0),  # report: 671B / 37B (truncated)
    ("mixtral-8x7b", 46.7, 12.9, 1),
    ("mixtral-8x22b", 141, 39, 0),
    ("qwen3-30b-a3b", 30.5, 3.3, 1),
    ("qwen3-235b-a22b", 235, 22, 0),
])
def test_total_and_active_parameters_match_the_model_cards(name, total, active, digits):
    """The published figure is the count rounded (Mixtral: 12.88 -> 12.9) or truncated
    (DeepSeek-V3: 37.55 -> 37; Qwen3-30B-A3B: 3.353 -> 3.3) to its last printed digit."""
    pc = count_params(load_model(name))
    unit = 10.0 ** -digits
    for got, card in ((pc.total / 1e9, total), (pc.active / 1e9, active)):
        assert card - unit / 2 <= got < card + unit, (name, got, card)


def test_mixtral_8x7b_count_by_hand():
    """Per layer: attention 4096*4096*2 + 2*4096*1024 = 41,943,040; 8 experts of 3*4096*14336
    = 176,160,768; router 4096*8; two RMSNorms 2*4096. 32 layers + 2 embeddings of
    32000*4096 + the final norm."""
    pc = count_params(load_model("mixtral-8x7b"))
    layer = 41_943_040 + 8 * 176_160_768 + 32_768 + 8_192
    assert pc.total == 32 * layer + 2 * 32_000 * 4096 + 4096 == 46_702_792_704
    active_layer = 41_943_040 + 2 * 176_160_768 + 32_768 + 8_192
    assert pc.active == 32 * active_layer + 2 * 32_000 * 4096 + 4096 == 12_879_925_248
    assert pc.routed_experts == 32 * 8 * 176_160_768


def test_deepseek_v3_mla_and_dense_layers_by_hand():
    """MLA per layer: q_a 7168*1536, q_b 1536*128*192, kv_a 7168*(512+64), kv_b 512*128*256,
    output 128*128*7168; latent norms 1536 + 512. Dense layers (3): MLP 3*7168*18432. MoE
    layers (58): 256 + 1 shared experts of 3*7168*2048, router 256*7168 + 256 bias."""
    pc = count_params(load_model("deepseek-v3"))
    d = pc.as_dict()
    assert d["attention_per_layer"] == 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    assert d["attention_replicated_per_layer"] == 7168 * 1536 + 7168 * 576 + 1536 + 512
    assert pc.moe_layers == 58 and pc.num_layers - pc.moe_layers == 3
    assert [k["layers"] for k in d["layer_kinds"]] == [3, 58]
    assert d["expert"] == 3 * 7168 * 2048 and d["shared_experts_per_layer"] == 3 * 7168 * 2048
    assert d["router_per_layer"] == 256 * 7168 + 256
    attn = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168 + 7168 * 1536 + 7168 * 576 + 1536 + 512 + 2 * 7168
    total = 61 * attn + 3 * 3 * 7168 * 18432 + 58 * (257 * 3 * 7168 * 2048 + 256 * 7168 + 256) + 2 * 129280 * 7168 + 7168
    assert pc.total == total == 671_026_419_200


def test_moe_layer_pattern():
    m = load_model("deepseek-v3").moe
    assert int(moe_layer_count(m, 0, 61)) == 58
    assert int(moe_layer_count(m, 0, 3)) == 0 and int(moe_layer_count(m, 0, 4)) == 1
    assert list(moe_layer_count(m, [0, 2, 10], [2, 5, 20])) == [0, 2, 10]
    every_other = m.model_copy(update=dict(first_k_dense=1, layer_freq=2))
    # layers 2, 4, 6, 8 of [0, 10) (i >= 1 and i % 2 == 0)
    assert int(moe_layer_count(every_other, 0, 10)) == 4


def test_model_flops_use_the_active_parameters_and_mla_head_dims():
    """6N with N active; attention 12 L a d s with d = (192 + 128) / 2 for DeepSeek-V3's MLA,
    i.e. 6 L a (d_qk + d_v) s."""
    m = load_model("deepseek-v3")
    pc = count_params(m)
    t = flops_per_token(m, 4096, 0)
    assert float(t.dense) == 6.0 * pc.active
    assert float(t.attention) == 6.0 * 61 * 128 * (192 + 128) * 4096
    dense = load_model("llama3-70b")
    assert float(flops_per_token(dense, 8192, 0).dense) == 6.0 * count_params(dense).total


def test_moe_spec_validation():
    base = dict(load_model("mixtral-8x7b").model_dump())
    bad = dict(base, moe=dict(num_experts=8, top_k=9))
    with pytest.raises(Exception, match="top_k"):
        ModelSpec(**bad)
    with pytest.raises(Exception, match="num_kv_heads"):
        ModelSpec(**dict(load_model("deepseek-v3").model_dump(), num_kv_heads=8))


# ------------------------------------------------------------------ Hugging Face configs
MIXTRAL_HF = {  # mistralai/Mixtral-8x7B-v0.1 config.json (the fields the reader uses)
    "model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1e6, "tie_word_embeddings": False,
    "num_local_experts": 8, "num_experts_per_tok": 2,
}
DEEPSEEK_V3_HF = {  # deepseek-ai/DeepSeek-V3 config.json
    "model_type": "deepseek_v3", "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
    "rope_theta": 10000, "tie_word_embeddings": False, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "num_nextn_predict_layers": 1, "n_group": 8, "topk_group": 4, "norm_topk_prob": True,
}
QWEN3_MOE_HF = {  # Qwen/Qwen3-30B-A3B config.json
    "model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
    "tie_word_embeddings": False, "norm_topk_prob": True,
}


@pytest.mark.parametrize("cfg,zoo", [(MIXTRAL_HF, "mixtral-8x7b"), (DEEPSEEK_V3_HF, "deepseek-v3"),
                                     (QWEN3_MOE_HF, "qwen3-30b-a3b")])
def test_hf_configs_load_with_the_zoo_parameter_counts(cfg, zoo):
    m = model_from_hf_config(cfg, "config.json")
    pc, ref = count_params(m), count_params(load_model(zoo))
    assert (pc.total, pc.active) == (ref.total, ref.active)
    assert m.moe == load_model(zoo).moe
    assert m.mla == load_model(zoo).mla


def test_hf_qwen2_moe_shared_expert():
    """Qwen2-MoE: one shared expert of shared_expert_intermediate_size with a sigmoid gate (h)."""
    cfg = dict(QWEN3_MOE_HF, model_type="qwen2_moe", shared_expert_intermediate_size=5632, moe_intermediate_size=1408,
               num_experts=60, num_experts_per_tok=4)
    m = model_from_hf_config(cfg, "config.json")
    d = count_params(m).as_dict()
    assert d["shared_experts_per_layer"] == 3 * 2048 * 5632 + 2048
    assert d["expert"] == 3 * 2048 * 1408 and m.moe.num_experts == 60 and m.moe.top_k == 4


def test_hf_qwen_moe_placement_keys_become_a_layer_pattern():
    """Qwen2/3-MoE place experts with decoder_sparse_step and mlp_only_layers (transformers
    Qwen3MoeDecoderLayer: MoE iff i not in mlp_only_layers and (i + 1) % step == 0, else the dense
    Qwen3MoeMLP of intermediate_size); once refused, now a layer pattern. By hand for Qwen3-30B-A3B's
    shape: one expert 3 x 2048 x 768, the dense MLP 3 x 2048 x 6144 = 8 experts' worth."""
    from planner.layers import layer_list

    m = model_from_hf_config(dict(QWEN3_MOE_HF, decoder_sparse_step=2), "config.json")
    ll = layer_list(m)
    moe_at = [i for i in range(48) if ll.kinds[ll.index[i]].has_experts]
    assert moe_at == list(range(1, 48, 2))  # (i + 1) % 2 == 0: the odd layers
    base = count_params(model_from_hf_config(QWEN3_MOE_HF, "config.json"))
    pc = count_params(m)
    router, expert, dense = 2048 * 128, 3 * 2048 * 768, 3 * 2048 * 6144
    assert base.total - pc.total == 24 * (128 * expert + router - dense)
    m = model_from_hf_config(dict(QWEN3_MOE_HF, mlp_only_layers=[0, 5]), "config.json")
    ll = layer_list(m)
    assert [i for i in range(48) if not ll.kinds[ll.index[i]].has_experts] == [0, 5]
    with pytest.raises(PlannerError, match="num_experts_per_tok"):
        model_from_hf_config({k: v for k, v in MIXTRAL_HF.items() if k != "num_experts_per_tok"}, "c.json")


def test_hf_qwen_moe_index_outside_the_model_is_an_error(tmp_path, cli):
    from conftest import assert_one_error

    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(QWEN3_MOE_HF, mlp_only_layers=[0, 48])))
    assert_one_error(cli("explain", "--model", str(p), "--gpus", "8", "--seq-len", "4096"), str(p),
                     "`mlp_only_layers`", "48 is outside 0..47")


# ------------------------------------------------------------------ expert parallelism: memory
def _mixtral(**kw):
    from conftest import explain_job

    base = dict(model="mixtral-8x7b", gpus=16, tp=1, pp=1, sharding="zero1", bytes_per_param="megatron",
                global_batch=16, micro_batch=1, seq_len=4096)
    return explain_job(**{**base, **kw})


MIXTRAL_DENSE_PER_GPU = 32 * (41_943_040 + 8_192 + 32_768) + 2 * 32_000 * 4096 + 4096  # attention, norms, router, ends
MIXTRAL_EXPERTS = 32 * 8 * 176_160_768  # every routed expert


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_ep_memory_by_hand(ep):
    """Megatron (18 B: bf16 weight 2, fp32 grad 4, fp32 master 4, Adam 8), ZeRO-1 over dp = 16:
    experts / ep per GPU; their master and Adam states shard over the 16 / ep expert-data-
    parallel ranks, the dense part's over all 16."""
    _, _, est, js = _mixtral(ep=ep)
    dense, experts = MIXTRAL_DENSE_PER_GPU, MIXTRAL_EXPERTS / ep
    t = js["memory"]["terms"]
    assert t["weights"] == pytest.approx(2 * (dense + experts), rel=1e-12)
    assert t["gradients"] == pytest.approx(4 * (dense + experts), rel=1e-12)
    assert t["master_weights"] == pytest.approx(4 * (dense / 16 + experts / (16 / ep)), rel=1e-12)
    assert t["adam"] == pytest.approx(8 * (dense / 16 + experts / (16 / ep)), rel=1e-12)
    assert js["plan"]["ep"] == ep


def test_ep_memory_with_fsdp_and_tp():
    """FSDP over dp*cp = 8 (tp 2): weights (dense + experts / ep) / tp, sharded over 8 for the
    dense part and 8 / ep = 2 for the experts (ep 4); attention and the MLP split across TP,
    norms and the router replicated."""
    _, _, _, js = _mixtral(gpus=16, tp=2, ep=4, sharding="fsdp", global_batch=8)
    dense = 32 * ((41_943_040) / 2 + 8_192 + 32_768) + 2 * 32_000 * 4096 / 2 + 4096
    experts = MIXTRAL_EXPERTS / (2 * 4)
    assert js["memory"]["terms"]["weights"] == pytest.approx(2 * (dense / 8 + experts / 2), rel=1e-12)


def test_moe_activations_by_hand():
    """One MoE layer of Mixtral at tp 2 with SP, T = 4096 tokens, c = 1.25, keeps beyond a dense
    layer of the same shape: the unfused router's fp32 softmax output over the top-2 logits (in place of
    the generic fp32 logits, layers/moe.py [10]) 4 B x 2 / 2 (SP), expert inputs
    2 B x top-2 x c x 4096 (gathered over TP; their outputs before the combine are not kept by
    Megatron-Core, memory.py [14]), expert gate/up/act 2 B x 3 x 14336 x 2 x c / 2, less the
    dense MLP's 2 B x 3 x 14336 / 2, and the routing Megatron-Core saves on its unfused paths (the
    megatron stack's defaults): the router's int64 top-2 indices, the permutation's int64 argsort of the
    [T, 8] map and its int64 sorted indices, 8 x (2 + 8 + 2) B / 2 (SP) (layers/moe.py [9]); the alltoall
    dispatcher's attributes, the bf16 dense [n, 8] probabilities and the unfused router's bool map, (2 x 8 + 8) / 2
    (SP), and the bf16 per-row probabilities the weighted SwiGLU saves, 2 B x top-2 x c (layers/moe.py [13]); 32
    layers, one micro-batch in flight (pp 1)."""
    from dataclasses import replace

    from planner.memory import memory_terms

    settings, plan, _, _ = _mixtral(tp=2, ep=8, moe_capacity_factor=1.25)
    dense_twin = replace(settings, model=settings.model.model_copy(update={"moe": None}))
    moe_act = memory_terms(settings, plan)[0].layer_activations
    dense_act = memory_terms(dense_twin, plan)[0].layer_activations
    c = 1.25
    per_token = (4 * 2 / 2 + 2 * 2 * c * 4096 + 2 * 3 * 14336 * 2 * c / 2 - 2 * 3 * 14336 / 2 + 8 * (2 + 8 + 2) / 2
                 + (2 * 8 + 8) / 2 + 2 * 2 * c)
    assert float(moe_act - dense_act) == pytest.approx(32 * 4096 * per_token, rel=1e-12)


def test_ep_rules_are_errors_naming_the_values(cli):
    from conftest import assert_one_error

    base = ["explain", "--model", "mixtral-8x7b", "--gpus", "16", "--global-batch", "16"]
    assert_one_error(cli(*base, "--ep", "3"), "ep=3", "8 routed experts")
    assert_one_error(cli(*base, "--ep", "8", "--tp", "4"), "etp=4 x ep=8", "tp x dp x cp ranks (16)")
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--ep", "2"), "no experts")
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--moe-capacity-factor", "1.2"),
                     "moe_capacity_factor")
    assert_one_error(cli(*base, "--moe-capacity-factor", "0.5"), "moe_capacity_factor")


# ------------------------------------------------------------------ all-to-all time
def _a2a_by_hand(n, size, bw, lat):
    """Pairwise all-to-all (comm.py, nccl-tests alltoall): n-1 rounds, (n-1)/n of the buffer."""
    return (n - 1) * lat + (n - 1) / n * size / bw


def test_alltoall_time_inside_a_node_by_hand():
    """Mixtral on 8 H100s, ep 8 (one NVLink domain), 1 micro-batch of T = 4096 tokens: each
    dispatch/combine sends T x top-2 x c x h x 2 B; 4 per layer (2 forward, 2 backward) x 32
    layers, over NVLink at the achievable ring bandwidth and per-round latency of comm.py. Beside
    them the megatron stack's alltoall dispatcher moves the probabilities (T x top-2 x c rows x 2 B, bf16
    router) in an all-to-all of their own, forward and backward, and all-gathers the int64 token counts,
    8 ranks x 8 experts x 8 B, forward (planner/dispatch.py [12]; 512 B: NCCL's LL ring, comm.py "Protocols": 6.6 us
    + 7 steps of 0.6 us + 7/8 x 512 B at min(370 GB/s / 3, 87.7 GB/s), tuning.cc @v2.20.3-1 l. 57, 67, 181):
    ep_comm = 32 x (4 a2a + 2 probs + counts)."""
    from planner import comm
    from planner.catalog import load_hardware

    hw = load_hardware("h100-sxm")
    bw = hw.nvlink_bandwidth * comm.NVLINK_RING_EFFICIENCY
    for c in (1.0, 1.25):
        _, _, _, js = _mixtral(gpus=8, ep=8, global_batch=8, moe_capacity_factor=c)
        size = 4096 * 2 * c * 4096 * 2
        probs = _a2a_by_hand(8, 4096 * 2 * c * 2, bw, comm.NVLINK_LATENCY_S)
        counts = 6.6e-6 + 7 * 0.6e-6 + 7 / 8 * 512 / 87.7e9
        assert js["time"]["ep_comm_s"] == pytest.approx(
            32 * (4 * _a2a_by_hand(8, size, bw, comm.NVLINK_LATENCY_S) + 2 * probs + counts), rel=1e-9)


def test_alltoall_across_nodes_uses_the_network():
    """tp 2 x ep 8 spans two 8-GPU nodes (the EP group is 2 ranks apart, the DP stride): the
    all-to-all runs at the network's share of the all-pairs traffic (comm.group_link) and costs
    more than ep 4, which stays inside one node; each rank sends its T/tp tokens (SP). Full
    recompute adds the 2 forward all-to-alls of each re-run layer (6 per layer). Beside them (planner/dispatch.py
    [12]) the probabilities' all-to-all over the same group (T/tp x top-2 rows x 2 B), forward and backward, and the
    token counts' all-gather over the tp_ep group (etp = tp = 2 x ep 8 = 16 ranks, 16 x 8 x 8 B), forward; full
    recompute re-runs the forward ones: 3 probabilities' all-to-alls and 2 all-gathers a layer."""
    from planner import comm
    from planner.catalog import load_hardware

    params = comm.comm_params(load_hardware("h100-sxm"))
    _, _, _, js = _mixtral(gpus=16, tp=2, ep=8, global_batch=8, moe_rank_imbalance=1.0)  # dp 8: one micro-batch; balanced
    size = 4096 / 2 * 2 * 4096 * 2
    cost, link, _ = comm.group_collective(comm.ALL_TO_ALL, size, 8, 2, params)
    probs, _, _ = comm.group_collective(comm.ALL_TO_ALL, 4096 / 2 * 2 * 2, 8, 2, params)
    counts, _, _ = comm.group_collective(comm.ALL_GATHER, 16 * 8 * 8, 16, 1, params)
    t, p, c = float(cost.time_s), float(probs.time_s), float(counts.time_s)
    assert int(link.link) != comm.LINK_NVLINK
    assert js["time"]["ep_comm_s"] == pytest.approx(32 * (4 * t + 2 * p + c), rel=1e-12)
    _, _, _, inside = _mixtral(gpus=16, tp=2, ep=4, global_batch=8, moe_rank_imbalance=1.0)
    assert js["time"]["ep_comm_s"] > 2 * inside["time"]["ep_comm_s"]
    _, _, _, full = _mixtral(gpus=16, tp=2, ep=8, global_batch=8, recompute="full", moe_rank_imbalance=1.0)
    assert full["time"]["ep_comm_s"] == pytest.approx(32 * (6 * t + 3 * p + 2 * c), rel=1e-12)


def test_expert_gemms_at_per_expert_shapes():
    """The MoE layer's expert GEMMs are priced at t_e = T top_k c ep / E tokens per expert
    (E / ep of them): with ep 8 each of Mixtral's 8 experts on its own rank gets T x 2 tokens
    (one GEMM of 8192 rows), with ep 1 eight GEMMs of 1024 rows; same FLOPs, and the smaller
    ones never run faster (wave efficiency <= 1). Each at the bf16 K-loop rate with its output's write
    (compute [5a]: gemm_mainloop, gemm_epilogue_rate)."""
    from planner.compute import gemm_epilogue_rate, gemm_mainloop, gemm_time, price_gemms, sm_count

    def moe_mlp_gemm_fwd(settings, plan):
        ctx = context(plan, 1.0)
        return sum(price_gemms(_moe_block(settings.model).gemms(ctx), settings.hardware, plan.precision).values())

    settings, plan, _, _ = _mixtral(gpus=8, ep=8, global_batch=8)
    hw, m = settings.hardware, settings.model
    t8 = moe_mlp_gemm_fwd(settings, plan)
    plat, sms, w = gemm_mainloop(hw, "bf16"), sm_count(hw), gemm_epilogue_rate(hw)
    by_hand = (gemm_time(8192, 2 * 14336, 4096, plat, sms, w) + gemm_time(8192, 4096, 14336, plat, sms, w)
               + gemm_time(4096, 8, 4096, plat, sms, w))
    assert float(t8) == pytest.approx(float(by_hand), rel=1e-12)
    settings1, plan1, _, _ = _mixtral(gpus=8, ep=1, global_batch=8)
    t1 = moe_mlp_gemm_fwd(settings1, plan1)
    assert float(t1) >= float(t8)


# ------------------------------------------------------------------ search
def test_fit_deepseek_v3_on_2048_gpus_uses_ep(cli):
    r = cli("fit", "--model", "deepseek-v3", "--gpus", "2048", "--top", "5", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 5 and all(row["plan"]["ep"] > 1 for row in rows)
    for row in rows:
        p = row["plan"]
        assert 256 % p["ep"] == 0 and (p["dp"] * p["cp"]) % p["ep"] == 0 and row["memory"]["fits"]
        assert row["time"]["ep_comm_s"] > 0


def test_fit_pinned_ep_and_explain_repeats_the_row(cli):
    r = cli("fit", "--model", "mixtral-8x7b", "--gpus", "64", "--ep", "8", "--tp", "2", "--pp", "1", "--top", "1",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["plan"]["ep"] == 8
    from planner.schema import Job
    from planner.search import explain_args

    args = explain_args(Job(model="mixtral-8x7b", gpus=64), row)
    assert "--ep" in args
    again = json.loads(cli("explain", *args, "--format", "json").stdout)
    assert again["time"]["step_s"] == row["time"]["step_s"]


# ------------------------------------------------------------------ validate
MOE_RUNS = __import__("pathlib").Path(__file__).parent / "data" / "published_runs_moe.yaml"


def test_validate_evaluates_the_deepseek_v3_record(cli):
    """DeepSeek-V3 pre-training: 14.8T tokens in 2,664K H800 GPU-hours (report Table 1) =
    1,543 tokens/s per GPU. The planner prices the record's DualPipe layout at 1,569, +1.7% (1,608, +4.2%, before a
    GEMM's output write was priced after its K loop, compute [5a])
    (tests/test_mtp_split.py test_deepseek_layout_rate_against_the_report: a middle rank's compute
    and its own all-to-alls pace the pipeline), and records the error."""
    r = cli("validate", str(MOE_RUNS), "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)["runs"][0]
    assert row["skipped"] is None
    assert row["published_tokens_per_s_per_gpu"] == pytest.approx(14.8e12 / (2664e3 * 3600), abs=0.05)
    assert row["plan"]["ep"] == 64 and row["plan"]["pp"] == 16 and row["mesh"] == "TP1 PP16 DP128 EP64"
    assert row["hardware"] == "h800-sxm"
    assert row["error"] == pytest.approx(0.017, abs=0.005)


def test_validate_moe_record_shape_must_match_its_model(cli, tmp_path):
    import yaml

    rec = yaml.safe_load(MOE_RUNS.read_text())[0]
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([dict(rec, num_layers=60)]))
    r = cli("validate", str(p))
    assert r.exit_code == 2 and "deepseek-v3" in r.stderr and "model" in r.stderr
    p.write_text(yaml.safe_dump([{k: v for k, v in rec.items() if k != "model"}]))
    row = json.loads(cli("validate", str(p), "--format", "json").stdout)["runs"][0]
    assert "dense models only" in row["skipped"]


def test_ep_group_placement_over_cp_and_dp():
    """EP takes the inner of CP and DP first: cp 4 (stride 1) x ep 32 needs 8 DP ranks. With
    pp between them (tp-cp-pp-dp, pp 2: DP stride 8) they are 8 apart: the group's 32 ranks
    span 64, placed 2 apart (4 per 8-GPU node, as the true cp-block x dp-stride group);
    with tp-cp-dp-pp (DP stride 4) they are contiguous."""
    from planner import comm, moe
    from planner.plan import PlanArrays

    for order, want in (("tp-cp-pp-dp", 2), ("tp-cp-dp-pp", 1)):
        plan = PlanArrays(tp=1, cp=4, pp=2, vpp=1, dp=256, mbs=1, gbs=4096, seq=4096, sharding=0, shard=256,
                          recompute=0, sp=0, schedule=0, precision=0, order=comm.order_code(order), ep=32)
        st = comm.strides_by_code(plan.order, tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
        assert int(moe.ep_stride(plan, st)) == want


def test_check_suggests_more_ep_for_an_moe_job_that_does_not_fit(cli, tmp_path):
    """Mixtral 8x7B on 64 GPUs at tp 2 without EP holds every expert on each GPU (about 45B x 6 B
    of bf16 weights and fp32 gradients / tp) and does not fit; EP 4 (experts / 4, checked with the
    same model as explain) is a passing change, and the fastest one here. The ladder stops
    at the expert count; a dense model gets no EP rung."""
    job = tmp_path / "job.yaml"
    job.write_text("model: mixtral-8x7b\ngpus: 64\ntp: 2\nsharding: zero1\nglobal_batch: 256\nseq_len: 4096\n")
    r = cli("check", str(job), "--format", "json")
    assert r.exit_code == 1
    res = json.loads(r.stdout)[0]
    assert res["verdict"] == "fail"
    assert {"ep": 4} in [s["changes"] for s in res["suggestions"]]
    from planner.check import ladders
    from planner.schema import Job

    assert [c.update["ep"] for c in ladders(Job(model="mixtral-8x7b", gpus=64), res)["ep"]] == [2, 4, 8]
    assert ladders(Job(model="llama3-8b", gpus=64), res)["ep"] == []


def test_mla_activations():
    """DeepSeek-V3's MLA at its own head dims: q and k 2 B x 128 x (128 + 64), v and the core output
    2 B x 128 x 128 per token (split across TP; their sum is the mean-head-dim table's 4 x 2 x 128 x
    160); plus the latents and their norm outputs 2 B x (1536 + 512) each and the rotary key
    2 B x 64 per token on every TP rank."""
    from planner.memory import activation_tensors

    m = load_model("deepseek-v3")
    t = activation_tensors(m)
    assert t["q"] == (2.0 * 128 * 192, "split") and t["k"] == (2.0 * 128 * 192, "kv")
    assert t["v"] == (2.0 * 128 * 128, "kv") and t["attn_out"] == (2.0 * 128 * 128, "split")
    assert sum(t[n][0] for n in ("q", "k", "v", "attn_out")) == 4 * 2.0 * 128 * 160
    # per token, kept whole on every TP rank (kind "full"): x 2 x 2048 tokens of a micro-batch (mbs 2, cp 2)
    assert t["mla_latent_norm_in"] == t["mla_latent_norm_out"] == (2.0 * (1536 + 512), "full")
    assert t["mla_k_rope"] == (2.0 * 64, "full")


def test_budget_counts_6n_on_the_active_parameters(cli):
    """DeepSeek-V3's budget: 6 x (37.55B active + the recipe's MTP module: 2h x h projection, three
    norms (enorm, hnorm, the norm before the shared head), the MoE layer's 232,997,120 non-routed and 8 x 3 x 7168 x 2048 routed active
    parameters, and the output layer again, 129,280 x 7168) x 14.8T tokens, and the training
    time equals steps x the step-time model's step (the MFU it divides by is in the same
    convention)."""
    r = cli("budget", "--model", "deepseek-v3", "--gpus", "2048", "--pp", "16", "--ep", "64", "--tokens", "14.8T",
            "--hardware", "h800-sxm", "--precision", "fp8", "--sharding", "zero1", "--global-batch", "15360",
            "--seq-len", "4096", "--format", "json")
    assert r.exit_code == 1, r.stderr  # this plan does not fit (112.7 GB a GPU): the budget printed, exit 1
    t = json.loads(r.stdout)["training"]
    h = 7168
    mtp = 2 * h * h + 3 * h + 232_997_120 + 8 * 3 * h * 2048 + 129_280 * h
    assert t["total_flops_6n"] == pytest.approx(6 * (37_552_297_472 + mtp) * 14.8e12, rel=1e-12)
    assert t["days"] == pytest.approx(t["steps"] * t["step_s"] / 86400, rel=1e-9)


def test_validate_megatron_bridge_moe_records(cli):
    """Megatron-Bridge's MoE rows (25.11 first and final tables, 26.02, 26.04, 26.06; H100, B200,
    GB200, GB300; force-balanced, dropless: capacity factor 1): every record is evaluated with
    its EP, its expert TP (1 where the recipes' base config says so: MoE parallel folding, the
    Qwen3-235B EP 64 over TP 2 x DP 32 on GB200 and EP 32 over TP 2 x DP 16 on H100 included)
    and Megatron's rank order (pipeline outermost)."""
    r = cli("validate", str(MOE_RUNS), "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    rows = {x["id"]: x for x in js["runs"]}
    bridge = [x for k, x in rows.items() if k.startswith("megatron-bridge")]
    assert len(bridge) == 30
    assert not [x["id"] for x in bridge if x["skipped"]]
    for x in bridge:
        assert x["plan"]["ep"] > 1 and x["plan"]["rank_order"] == "tp-cp-dp-pp" and x["error"] is not None
    folded = [x for x in bridge if "qwen3-235b" in x["id"] and x["plan"]["tp"] == 2]
    assert folded and all(x["plan"]["etp"] == 1 for x in folded)
    assert js["summary"]["n"] == 32 and js["summary"]["n_skipped"] == 0  # + the Megatron-Core README Mixtral row


def test_validate_carries_the_megatron_moe_settings_a_record_states(cli, tmp_path):
    """A record's etp (equal to tp here) and account_for_* splits reach the job; the dispatcher's
    Megatron names set the job's moe_dispatcher (validate rule 13, listed as assumed). The 26.02 H100
    Qwen3-30B-A3B row states the deepep flex dispatcher and moe_a2a_overlap (ep_comm_overlap)
    from its Megatron-Bridge v0.3.0 preset."""
    import yaml

    recs = {r["id"]: r for r in yaml.safe_load(MOE_RUNS.read_text())}
    rec = recs["megatron-bridge-26.02-dgx-h100-qwen3-30b-a3b-fp8"]
    assert (rec["etp"], rec["moe_token_dispatcher_type"], rec["moe_flex_dispatcher_backend"], rec["ep_comm_overlap"]) \
        == (1, "flex", "deepep", True)
    assert rec["provenance"]["etp"].startswith("reported: scripts/performance/configs/qwen/")
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([rec]))
    row = json.loads(cli("validate", str(p), "--format", "json").stdout)["runs"][0]
    assert row["skipped"] is None
    assert any(a.startswith("moe_dispatcher=deepep") for a in row["assumed"]) and row["plan"]["moe_dispatcher"] == "deepep"
    assert row["plan"]["ep_comm_overlap"] in (True, 1)
    q = dict(recs["megatron-bridge-25.11-dgx-gb300-qwen3-235b-a22b-bf16"])
    assert q["account_for_embedding_in_pipeline_split"] and q["account_for_loss_in_pipeline_split"]
    from planner.validate import RunRecord, _Assumed, build_job

    job = build_job(RunRecord.model_validate(q), "qwen3-235b-a22b", "gb300-nvl72", _Assumed())
    assert job["account_for_embedding_in_pipeline_split"] and job["account_for_loss_in_pipeline_split"]
    assert build_job(RunRecord.model_validate(dict(q, etp=1)), "qwen3-235b-a22b", "gb300-nvl72", _Assumed())["etp"] == 1


def test_calibrate_gemm_times_the_moe_and_mla_shapes(cli):
    """`planner calibrate gemm --run` lists the shapes step.py prices for MoE and MLA models:
    Qwen3-30B-A3B's experts at T = 4096, top-8 of 128: 4096 x 8 x ep / 128 rows each (256 at
    ep 1, 2048 at ep 8), [M, 2 x 768, 2048] and [M, 2048, 768]; DeepSeek-V3's MLA down/up
    projections; --ep must divide the experts and needs a model that has them."""
    from planner.calibrate.gemm import benchmark_shapes

    shapes = {(s.M, s.N, s.K) for s in benchmark_shapes([load_model("qwen3-30b-a3b")], [1], [4096], [1], [1, 8])}
    assert {(256, 1536, 2048), (256, 2048, 768), (2048, 1536, 2048), (2048, 2048, 768), (4096, 128, 2048)} <= shapes
    ds = {(s.M, s.N, s.K) for s in benchmark_shapes([load_model("deepseek-v3")], [1], [4096], [1], [64])}
    assert {(4096, 1536, 7168), (4096, 128 * 192, 1536), (4096, 576, 7168), (4096, 128 * 256, 512),
            (4096, 7168, 128 * 128), (4096 * 8 * 64 // 256, 2 * 2048, 7168)} <= ds
    with pytest.raises(PlannerError, match="does not divide the 128 routed experts"):
        benchmark_shapes([load_model("qwen3-30b-a3b")], [1], [4096], [1], [3])
    r = cli("calibrate", "gemm", "--run", "--model", "llama3-8b", "--ep", "8", "--dry-run")
    from conftest import assert_one_error

    assert_one_error(r, "none of the models has experts")


def test_expert_gradient_traffic_is_the_busiest_stages(monkeypatch):
    """The step waits for the stage whose own gradient work is the largest (step.step_end_stage: each stage's dense
    plus routed-expert traffic, one stage's sum), first, middle or last: a middle stage can hold more MoE layers than
    either end (DeepSeek-V3's 61 layers on pp 4: 14 layers on the first stage, 3 of them dense, so 11 MoE; 16 on a
    middle stage; 15 on the last). With 1e9 expert parameters on one stage and 1e8 on the others, that stage is the
    one waited for, whichever it is: doubling its experts adds the same seconds at every placement (the dense part
    cancels). What is left differs by the stage's own dense traffic (until issue 22 critstage3 each term took its
    own largest stage, so the three placements priced the same): DeepSeek-V3's dense parameters a stage, by hand
    (attention 7,168 x 1,536 + 1,536 x 128 x 192 + 7,168 x 576 + 512 x 128 x 256 + 128 x 128 x 7,168 = 187.1 M a
    layer; shared expert 3 x 7,168 x 2,048 = 44.0 M; dense MLP 3 x 7,168 x 18,432 = 396.4 M; embedding / output
    129,280 x 7,168 = 926.7 M): first 14 x 187.1 + 3 x 396.4 + 11 x 44.0 + 926.7 = 5,217 M, last (15 + its MTP
    layer's) x (187.1 + 44.0) + 926.7 >= 4,393 M, middle 16 x (187.1 + 44.0) = 3,698 M: first > last > middle."""
    import numpy as np
    from conftest import explain_job

    from planner import step
    from planner.memory import stage_kind_counts, stage_param_split

    job = dict(model="deepseek-v3", gpus=256, tp=1, pp=4, ep=8, sharding="zero1", bytes_per_param="megatron",
               global_batch=512, micro_batch=1, seq_len=4096)
    _, plan, est, _ = explain_job(**job)
    counts = stage_kind_counts(load_model("deepseek-v3"), plan)  # kinds: [dense, MoE]; "mid": candidates
    first, mid, last = float(counts["first"][1]), float(counts["mid"][0][1]), float(counts["last"][1])
    assert counts["mid"].shape[0] == 1 and int(counts["mid_stage"][0]) == 1  # stages 1 and 2 hold 16 MoE layers each
    assert (first, mid, last) == (11.0, 16.0, 15.0)
    real = float(est.time_extra["dp_comm_s"])
    big, small = 1e9, 1e8

    def run(order):
        def split(*a):
            out = stage_param_split(*a)
            return {st: (out[st][0], np.full(plan.tp.shape, v)) for st, v in zip(("first", "mid", "last"), order)}

        monkeypatch.setattr(step, "stage_param_split", split)
        return float(explain_job(**job)[2].time_extra["dp_comm_s"])

    at_first, at_mid, at_last = run((big, small, small)), run((small, big, small)), run((small, small, big))
    twice = [run((2 * big, small, small)) - at_first, run((small, 2 * big, small)) - at_mid,
             run((small, small, 2 * big)) - at_last]
    assert twice[0] > 0 and twice[1] == pytest.approx(twice[0], rel=1e-9) and twice[2] == pytest.approx(twice[0], rel=1e-9)
    assert at_first > at_last > at_mid
    assert run((small, small, small)) < at_mid and real > 0


# ------------------------------------------------------------------ routing and token permutation
def _qwen3(**kw):
    from conftest import explain_job

    base = dict(model="qwen3-30b-a3b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", bytes_per_param="megatron",
                global_batch=8, micro_batch=1, seq_len=4096, hardware="b200",
                moe_rank_imbalance=1.0,  # balanced routing: the hand counts' rows (tests/test_imbalance.py prices the rest)
                moe_permute_fusion=True, moe_router_fusion=True)  # TE's fused kernels, the hand counts' (test_moe_fusions.py: off)
    return explain_job(**{**base, **kw})


# Qwen3-30B-A3B (h 2048, E 128, k 8), bf16 tokens A = 2, fp32 probabilities P = 4, int32 maps I = 4;
# row map per token I (2k + 1) = 68 (moe.dispatch_bytes):
#   forward, per local token: router 3 P E + E = 1,664; row-id map E + 4 I E + I (2E + 1) = 3,204;
#     permutation 1 A h + k A h + 2 P k + 68 = 4,096 + 32,768 + 64 + 68 = 36,996;
#     unpermutation 1 k A h + A h + 68 = 36,932                                  -> 78,796
#   forward, per expert row: sort 2 I + 2 A h + 2 P = 8,208, unsort 2 I + 2 A h = 8,200, the
#     weighted SwiGLU's probability P = 4                                        -> 16,412
#   backward, per local token: 36,932 (unpermutation 1's gradient) + 37,476 (permutation 1's:
#     k A h + P k + A h + P E + 68) + 1,664 (router: E + 3 P E)                  -> 76,072
#   backward, per expert row: 8,204 + 8,196 + 2 P                                -> 16,408
QWEN3_FWD_TOKEN, QWEN3_FWD_ROW, QWEN3_BWD_TOKEN, QWEN3_BWD_ROW = 78_796, 16_412, 76_072, 16_408


def test_dispatch_bytes_qwen3_30b_a3b_by_hand():
    """One micro-batch of T = 4096 tokens on one GPU, tp 1: n = 4096 local tokens and
    R = T k c = 32,768 expert rows. ep 8 (16 local experts) runs permutation 2 and its
    inverse: forward 4096 x 78,796 + 32,768 x 16,412 = 860,536,832 B, backward
    4096 x 76,072 + 32,768 x 16,408 = 849,248,256 B. ep 128 (one expert per rank, gpus 128)
    drops both sorts: only the SwiGLU's probabilities stay per row (4 B forward, 8 B
    backward). c 1.25 scales the rows, not the local tokens. Under SP with tp 2 each rank
    permutes its T/2 = 2048 local tokens, and its experts get the T k rows gathered across TP."""
    def dispatch(model, plan, cf):
        return _moe_block(model).dispatch_bytes(context(plan, cf))

    settings, plan, _, _ = _qwen3()
    fwd, bwd = dispatch(settings.model, plan, 1.0)
    assert float(fwd) == 4096 * QWEN3_FWD_TOKEN + 32_768 * QWEN3_FWD_ROW == 860_536_832
    assert float(bwd) == 4096 * QWEN3_BWD_TOKEN + 32_768 * QWEN3_BWD_ROW == 849_248_256
    fwd_c, _ = dispatch(settings.model, plan, 1.25)
    assert float(fwd_c) == pytest.approx(4096 * QWEN3_FWD_TOKEN + 1.25 * 32_768 * QWEN3_FWD_ROW, rel=1e-15)
    s128, p128, _, _ = _qwen3(gpus=128, ep=128, global_batch=128)
    f128, b128 = dispatch(s128.model, p128, 1.0)
    assert float(f128) == 4096 * QWEN3_FWD_TOKEN + 32_768 * 4
    assert float(b128) == 4096 * QWEN3_BWD_TOKEN + 32_768 * 8
    s_sp, p_sp, _, _ = _qwen3(gpus=16, tp=2, sequence_parallel=True)
    f_sp, _ = dispatch(s_sp.model, p_sp, 1.0)
    assert float(f_sp) == 2048 * QWEN3_FWD_TOKEN + 32_768 * QWEN3_FWD_ROW


def test_moe_permute_term_is_the_dispatch_bytes_over_hbm(monkeypatch):
    """explain's moe_permute row: 48 MoE layers (Qwen3: every layer) x (forward + backward
    bytes) / (B200's 8 TB/s x HBM_EFFICIENCY 0.9), one micro-batch; a full recompute adds
    the forward bytes once more. The compute term does not hold them: with the permutation
    bytes set to zero it is unchanged to the last digit, and a dense model has no such term."""
    from planner.compute import HBM_EFFICIENCY
    from planner.layers.moe import MoEMLP

    settings, _, _, js = _qwen3()
    hbm = settings.hardware.hbm_bandwidth * HBM_EFFICIENCY
    fwd, bwd = 4096 * QWEN3_FWD_TOKEN + 32_768 * QWEN3_FWD_ROW, 4096 * QWEN3_BWD_TOKEN + 32_768 * QWEN3_BWD_ROW
    assert js["time"]["moe_permute_s"] == pytest.approx(48 * (fwd + bwd) / hbm, rel=1e-12)
    monkeypatch.setattr(MoEMLP, "dispatch_bytes", lambda *a: (0.0, 0.0))
    _, _, _, none = _qwen3()
    assert none["time"]["moe_permute_s"] == 0.0
    assert none["time"]["compute_s"] == pytest.approx(js["time"]["compute_s"], rel=1e-12)
    monkeypatch.undo()
    _, _, _, full = _qwen3(recompute="full")
    assert full["time"]["moe_permute_s"] - js["time"]["moe_permute_s"] == pytest.approx(48 * fwd / hbm, rel=1e-9)
    from conftest import explain_job

    _, _, _, dense = explain_job(model="llama3-8b", gpus=8, global_batch=8, micro_batch=1, seq_len=4096)
    assert "moe_permute_s" not in dense["time"]


def test_explain_shows_the_moe_permute_row(cli):
    r = cli("explain", "--model", "qwen3-30b-a3b", "--gpus", "8", "--ep", "8", "--hardware", "b200",
            "--global-batch", "8", "--seq-len", "4096")
    assert r.exit_code == 0, r.stderr
    assert "MoE router top-k + token permutation" in r.stdout


# ------------------------------------------------------------------ EP all-to-all overlap (combined 1F1B)
def test_ep_overlap_one_stage_by_hand():
    """Qwen3-30B-A3B on 8 B200, ep 8, pp 1, m = 64 / (8 x 1) = 8 micro-batches. Without the
    overlap each of the 48 layers' 4 all-to-alls (time t) is exposed: ep_comm = 8 x 48 x 4 t.
    With it (moe.py [8]) the first micro-batch's forward and the last one's backward run
    alone (1/m of the passes each: 2 t per layer exposed, twice), and in the other 7 phases a
    layer's 2 t of forward all-to-alls hide behind the partner's backward of a layer, its 2 t
    of backward ones behind a layer's forward, each leaving the stack's exposed share 0.189
    (Megatron: overlapped_exposed_fraction) as the windows are longer (a layer's forward
    alone is > 2 t here, checked): ep_comm = 48 x (4 t + 7 x 2 x 2 t x 0.189)
    = 48 x 4 t (1 + 7 x 0.189) = ep_off (1 + 1.323) / 8. The probabilities' all-to-alls (planner/dispatch.py
    [12]) ride with the tokens' (in t here); the token counts' all-gather, 8 x 48 x c a step, runs on the compute
    stream and stays exposed (tests/test_moe_alltoall_exchanges.py derives each), so it is taken off both sides."""
    _, _, _, off = _qwen3(global_batch=64)
    _, _, _, on = _qwen3(global_batch=64, ep_comm_overlap=True)
    counts = off["moe"]["counts_gather_s"]
    assert counts > 0 and on["moe"]["counts_gather_s"] == counts
    t = (off["time"]["ep_comm_s"] - counts) / (8 * 48 * 4)
    assert off["time"]["compute_s"] / (8 * 48 * 3) > 2 * t  # a layer's forward outlasts its 2 t
    assert on["time"]["ep_comm_s"] - counts == pytest.approx((off["time"]["ep_comm_s"] - counts) * (1 + 7 * 0.189) / 8,
                                                             rel=1e-12)
    assert on["plan"]["ep_comm_overlap"] is True and off["plan"]["ep_comm_overlap"] is False
    assert on["time"]["compute_s"] == off["time"]["compute_s"]


def test_ep_overlap_alone_passes_interleaved():
    """The alone passes on the step's critical path (moe.alone_pass_share): the last stage's warm-up
    W = (v - 1) N + 1 forwards (Megatron-LM @d98e8a64 schedules.py l. 964-970, r = p - 1: no 2 (p - r - 1)
    term; + 1 for the overlap; N = p) and as many cool-down backwards, plus the fill's and the drain's
    p - 1 chunk passes (warm-up / cool-down passes of their ranks), over the path's m v + p - 1 passes
    (step_time: m micro-batches plus the bubble's (p - 1) / v, one figure a micro-batch):
    pp 4, vpp 2, m 8: W = 4 + 1 = 5, (5 + 3) / (16 + 3) = 8/19 (the first stage's 2 x 3 + 5 = 11 of
    16 before: its 6 extra warm-ups sit in the bubble). pp 4, vpp 2, m 4: W = min(5, 8) = 5,
    (5 + 3) / (8 + 3) = 8/11 (1.0 before). pp 2, vpp 2, m 8: W = 2 + 1 = 3, (3 + 1) / 17 = 4/17.
    pp 1: 1 of m."""
    from planner import moe

    _, p48, _, _ = _qwen3(gpus=32, pp=4, vpp=2, global_batch=64)  # dp 8, m 8
    assert float(moe.alone_pass_share(p48, 8)) == 8 / 19
    _, p22, _, _ = _qwen3(gpus=32, pp=2, vpp=2, global_batch=128)  # dp 16, m 8
    assert float(moe.alone_pass_share(p22, 8)) == 4 / 17
    _, p42, _, _ = _qwen3(gpus=32, pp=4, vpp=2, global_batch=32)
    assert float(moe.alone_pass_share(p42, 4)) == 8 / 11
    _, p1, _, _ = _qwen3(global_batch=64)
    assert float(moe.alone_pass_share(p1, 8)) == 1 / 8


@pytest.mark.parametrize("extra,needle", [
    (["--ep", "1"], "needs expert parallelism"),
    (["--pp", "2"], "needs the interleaved schedule"),
    (["--recompute", "full"], "full recompute"),
    # sharding fsdp: torchtitan runs EP only beside FSDP (start-up rule TORCHTITAN_EP_FSDP refuses ep 8 under ddp first)
    (["--stack", "torchtitan", "--sharding", "fsdp"], "does not overlap the MoE all-to-alls"),
])
def test_ep_overlap_where_megatron_refuses_it_is_an_error(cli, extra, needle):
    from conftest import assert_one_error

    base = ["explain", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--ep-comm-overlap", "--global-batch", "64"]
    r = cli(*base, *extra)
    assert_one_error(r, needle)
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--ep-comm-overlap"), "has no experts")


def test_ep_overlap_in_fit_applies_where_the_plan_allows_it(cli):
    """fit with --ep-comm-overlap prices the overlap on the candidates Megatron-Core runs it on
    (ep > 1, pp 1 or interleaved, no full recompute) and reports it per row; explain repeats
    the row (the flag in its arguments) to the same step time."""
    r = cli("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "b200", "--ep-comm-overlap", "--top", "3",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    for row in rows:
        p = row["plan"]
        assert p["ep_comm_overlap"] == (p["ep"] > 1 and (p["pp"] == 1 or p["vpp"] > 1) and p["recompute"] != "full")
    from planner.schema import Job
    from planner.search import explain_args

    args = explain_args(Job(model="qwen3-30b-a3b", gpus=16, hardware="b200"), rows[0])
    assert ("--ep-comm-overlap" in args) == rows[0]["plan"]["ep_comm_overlap"]
    again = json.loads(cli("explain", *args, "--format", "json").stdout)
    assert again["time"]["step_s"] == rows[0]["time"]["step_s"]


def test_ep_overlap_from_a_megatron_script_and_a_record(tmp_path):
    """--overlap-moe-expert-parallel-comm in a Megatron launch script turns it on and the
    Megatron export writes it; a runs-file record turns it on only with an explicit
    `ep_comm_overlap: true` (the published records say nothing: off)."""
    import yaml

    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan
    from planner.validate import load_runs, validate_runs

    plan = resolved_plan(Job(model="qwen3-30b-a3b", gpus=8, ep=8, global_batch=64, micro_batch=1, seq_len=4096,
                             sharding="zero1", ep_comm_overlap=True))
    assert plan["ep_comm_overlap"] is True
    text, _ = export_plan(plan, "megatron")
    assert "--overlap-moe-expert-parallel-comm" in text
    (tmp_path / "run.sh").write_text(text)
    assert load_trainer_config(tmp_path / "run.sh").job.get("ep_comm_overlap") is True
    recs = yaml.safe_load(MOE_RUNS.read_text())
    rec = next(r for r in recs if r["id"] == "megatron-bridge-25.11-dgx-b200-qwen3-30b-a3b")
    assert "ep_comm_overlap" not in rec
    on = dict(rec, id="with-overlap", ep_comm_overlap=True)
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([rec, on]))
    rows = validate_runs(load_runs(path), base_dir=MOE_RUNS.parent)
    by_id = {r.id: r for r in rows}
    assert by_id["with-overlap"].predicted_tokens_per_s_per_gpu > by_id[rec["id"]].predicted_tokens_per_s_per_gpu
