"""What an MoE layer saves for its routing and token permutations (issue 21; planner/layers/moe.py [9],
routing_saved_bytes): Megatron-Core's alltoall dispatcher at d98e8a64 with Transformer Engine @4329ff84.
Per local token (n = T / tp under SP): the fused router's bool routing map (TE router.py l. 99: E x 1 B) or
the unfused router's int64 top-k indices (torch.topk / scatter: k x 8 B); the fused permutation's int32
row-id map [n, 2E + 1] (TE permutation.py l. 321 / 519, triton/permutation.py l. 52) or the unfused one's
int64 argsort of the [n E] map (moe_utils.py l. 473, kept through the probabilities' gather, l. 478) and
int64 sorted indices [n k] (l. 475); with more than one local expert the two fused chunk sorts' int32 maps
over the received rows (permutation.py l. 1250, triton/permutation.py l. 381). And the router's own saves
(issue 23; planner/layers/moe.py [10] router_saved_terms), which replace the generic fp32 logits (4 E B):
fused, TE's bool map E and fp32 [n, E] intermediate output 4 E (router.py FusedTopkScoreFunction); unfused
softmax after the top-k (Megatron's default), torch.topk's int64 indices 8 k and the fp32 [n, k] softmax output
4 k; before the top-k (pre-softmax) 8 k + 4 E; an auxiliary loss 4 E more (the fused score kernel's intermediate
output, or the unfused softmax's output); a z-loss the bf16 logits and logsumexp's output, 2 E + 2. By hand for
Mixtral 8x7B (E 8, top-2) at seq 4096, micro-batch 1, TP 2 with SP, balanced routing."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.layers import context
from planner.layers.moe import RouterPath, router_saved_terms
from planner.memory import layer_memory, moe_routing_saves
from planner.params import count_params
from tests.conftest import explain_job

T, E, K = 4096, 8, 2
KW = dict(model="mixtral-8x7b", gpus=64, hardware="h100-sxm", stack="megatron", precision="bf16", global_batch=64,
          seq_len=T, tp=2, pp=4, micro_batch=1, recompute="none", sharding="zero1", moe_rank_imbalance=1.0)


def _moe(**fields):
    settings, plan, _, _ = explain_job(**dict(KW, **fields))
    pc = count_params(settings.model)
    i = next(j for j, k in enumerate(pc.layers.kinds) if k.has_experts)
    return settings, plan, pc, i


N = T / 2  # local tokens (SP over TP 2)
FUSED_ROUTER, UNFUSED_ROUTER = 1 * E + 4 * E, 8 * K + 4 * K  # 40 B, 24 B a token
# the permuted probabilities the experts' weighted SwiGLU saves (layers/moe.py [13], fused_bias_swiglu.py @d98e8a64
# l. 270), one per row the rank receives: T k / tp x etp = T k rows (etp = tp 2), in the dispatcher's dtype (alltoall and
# allgather the router's, bf16 2 B unless --moe-router-dtype; DeepEP and HybridEP fp32 4 B)
ROWS = T * K  # 8,192 rows: 16,384 B in bf16, 32,768 B in fp32


@pytest.mark.parametrize("ep,fused,want", [
    (8, True, N * (FUSED_ROUTER + 4 * (2 * E + 1)) + 2 * ROWS),           # 237,568 B: one local expert, no chunk sort
    (8, False, N * (UNFUSED_ROUTER + 8 * (E + K)) + 2 * ROWS),             # 229,376 B
    # 4 local experts: two int32 chunk-sort maps over the received rows, top_k rows a token (etp = tp: T k / tp x tp)
    (2, True, N * (FUSED_ROUTER + 4 * (2 * E + 1)) + T * 2 * 4 * K * 2 / 2 + 2 * ROWS),  # 303,104 B
    (2, False, N * (UNFUSED_ROUTER + 8 * (E + K)) + 2 * ROWS),             # unfused chunk sorts (split + cat) keep nothing
])
def test_bytes_by_hand(ep, fused, want):
    settings, plan, pc, i = _moe(ep=ep, moe_permute_fusion=fused, moe_router_fusion=fused)
    assert float(moe_routing_saves(settings)(pc.layers.kinds[i], context(plan))) == want


@pytest.mark.parametrize("fields,router", [
    (dict(moe_router_fusion=False), 8 * K + 4 * K),                           # 24 B: Megatron's default path
    (dict(moe_router_fusion=False, moe_router_pre_softmax=True), 8 * K + 4 * E),  # 48 B
    (dict(moe_router_fusion=False, moe_aux_loss_coeff=1e-2), 8 * K + 4 * K + 4 * E),  # 56 B
    (dict(moe_router_fusion=True, moe_aux_loss_coeff=1e-2), 1 * E + 4 * E + 4 * E),  # 72 B
    (dict(moe_router_fusion=True, moe_z_loss_coeff=1e-3), 1 * E + 4 * E + 2 * E + 2),  # 58 B
    (dict(moe_router_fusion=False, moe_aux_loss_coeff=0.0, moe_z_loss_coeff=0.0), 8 * K + 4 * K),  # coefficients 0: none
])
def test_router_paths_by_hand(fields, router):
    settings, plan, pc, i = _moe(ep=8, moe_permute_fusion=True, **fields)
    permute = 4 * (2 * E + 1)
    assert float(moe_routing_saves(settings)(pc.layers.kinds[i], context(plan))) == N * (router + permute) + 2 * ROWS


def test_sigmoid_and_groups_by_hand():
    # a sigmoid router, unfused: its fp32 [n, E] output 4 E, the indices 8 k, the k > 1 division's operands 4 k + 4;
    # group-limited routing keeps masked_fill's bool mask E, except under the expert bias (its top-k is freed)
    _, _, pc, i = _moe()
    moe = pc.layers.kinds[i].mlp
    sig = dataclasses.replace(moe, sigmoid=True)
    assert router_saved_terms(sig, RouterPath()) == {"topk": 8 * K + 4 * E + 4 * K + 4, "groups": 0.0, "aux": 0.0,
                                                     "z_loss": 0.0}
    assert router_saved_terms(sig, RouterPath(aux_loss=True))["aux"] == 4 * E + 4  # the aux path's own sigmoid + sum
    grouped = dataclasses.replace(moe, expert_groups=4, groups_per_token=2)
    assert router_saved_terms(grouped, RouterPath())["groups"] == E
    assert router_saved_terms(dataclasses.replace(grouped, sigmoid=True, score_bias=True), RouterPath())["groups"] == 0
    assert router_saved_terms(grouped, RouterPath(fused=True)) == {"topk": 5 * E, "groups": 0.0, "aux": 0.0, "z_loss": 0.0}


def test_in_the_layer_activations():
    # kept beside the layer's tensors under no recompute, gone under full recompute (the layer re-runs); the
    # router's path replaces the generic fp32 logits (4 E a token) the layer's tensors count elsewhere
    settings, plan, pc, i = _moe(ep=8, moe_permute_fusion=True, moe_router_fusion=True)
    ctx = context(plan)
    mem = dataclasses.replace(settings.stack.memory, moe_routing_saved=False) if dataclasses.is_dataclass(
        settings.stack.memory) else settings.stack.memory.model_copy(update={"moe_routing_saved": False})
    without = dataclasses.replace(settings, stack=settings.stack.model_copy(update={"memory": mem}))
    assert moe_routing_saves(without) is None
    on, off = layer_memory(settings, plan, ctx, pc.layers)[0][i], layer_memory(without, plan, ctx, pc.layers)[0][i]
    # the map and the row-id map, and the bf16 per-row probabilities; the fp32 4 E in both
    assert float(on - off) == N * (1 * E + 4 * (2 * E + 1)) + 2 * ROWS


# the four dispatchers' routing saves of Mixtral 8x7B, TP 2 (etp 2), EP 8, fused router and permute, by hand from
# the constants above and layers/moe.py [11], [12], [15] (one local expert: no chunk sort; balanced routing)
@pytest.mark.parametrize("dispatcher,fields", [
    ("alltoall", dict()), ("alltoall", dict(moe_permute_fusion=False, moe_router_fusion=False)),
    ("allgather", dict()), ("deepep", dict()), ("hybridep", dict()),
])
@pytest.mark.parametrize("modules", [None, ["layernorm", "moe_act"]])
def test_selective_buffer_reruns_no_routing_save(monkeypatch, dispatcher, fields, modules):
    # memory.py [sr]: Megatron-Core's selective modules (the default core_attn; layernorm, moe_act) re-run no routing
    # tensor (transformer_layer.py @d98e8a64 l. 818-831 checkpoints the pre-MLP norm alone, experts.py l. 1019-1030
    # the bias + activation + weighting alone, the probabilities a kept input): the routing saves are in the
    # selective policy's kept tensors once and not in the one-layer re-run buffer, for every dispatcher
    import planner.memory as memory

    settings, plan, pc, i = _moe(ep=8, recompute="selective", moe_dispatcher=dispatcher, recompute_modules=modules,
                                 moe_grouped_gemm=True,
                                 **dict(dict(moe_permute_fusion=True, moe_router_fusion=True), **fields))
    ctx = context(plan)
    routing = float(moe_routing_saves(settings)(pc.layers.kinds[i], ctx))
    stored, buffers, _ = layer_memory(settings, plan, ctx, pc.layers)
    monkeypatch.setattr(memory, "moe_routing_saves", lambda s: (lambda kind, c: 0.0))
    stored0, buffers0, _ = layer_memory(settings, plan, ctx, pc.layers)
    assert routing > 0.0
    assert float(stored[i] - stored0[i]) == pytest.approx(routing, rel=1e-12)  # kept
    assert float(buffers[i]) == float(buffers0[i])  # not re-run (before [sr]: routing more)
    if (dispatcher, fields) == ("alltoall", dict()):
        assert routing == N * (FUSED_ROUTER + 4 * (2 * E + 1)) + 2 * ROWS  # 237,568 B, as test_bytes_by_hand


def test_dense_model_refuses_router_fields():
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="moe_aux_loss_coeff set but llama3-8b has no experts"):
        explain_job(model="llama3-8b", gpus=8, hardware="h100-sxm", global_batch=8, seq_len=4096, moe_aux_loss_coeff=1e-2)


# Hybrid-EP's handle (layers/moe.py [15]; deepseek-ai/DeepEP @94a9f8f csrc/hybrid_ep/executor/executor.cu l. 85-133),
# per local token over the flex group's R ranks, N NVLink domains, E / ep local experts (R E / ep = etp E):
# sparse_to_dense_map int32 4 R, rdma_to_attn_map N, attn_to_rdma_map N - 1, local_expert_routing_map bool etp E,
# dense_to_expert_map int32 4 etp E, dense_chunk_layout int32 4 R / 64
def _hybridep_handle(R, N, etp, E):
    return 4 * R + N + (N - 1) + etp * E + 4 * etp * E + 4 * R / 64


def test_hybridep_keeps_the_router_and_its_handle():
    # the router is the same TopKRouter under every dispatcher, and HybridEP's fp32 per-row probabilities are saved
    # (token_dispatcher.py @d98e8a64 l. 1141: token_probs.float()); Mixtral at TP 2 (SP), EP 8, etp 2 on H100s: R = 16
    # ranks over two 8-GPU NVLink domains, N = 2: 64 + 2 + 1 + 16 + 64 + 1 = 148 B a local token
    settings, plan, pc, i = _moe(ep=8, moe_dispatcher="hybridep", moe_router_fusion=False, moe_permute_fusion=True)
    assert _hybridep_handle(16, 2, 2, E) == 148
    assert float(moe_routing_saves(settings)(pc.layers.kinds[i], context(plan))) == N * (UNFUSED_ROUTER + 148) + 4 * ROWS


def test_hybridep_handle_qwen3_ep8_one_domain():
    # Qwen3-30B-A3B (E 128) at EP 8, TP 1 on one 8-GPU node: R = 8, N = 1: 32 + 1 + 0 + 128 + 512 + 0.5 = 673.5 B a token
    # (the handle is sized for every token of the group, n R rows, whatever the rank receives)
    settings, plan, _, _ = explain_job(model="qwen3-30b-a3b", gpus=8, tp=1, pp=1, ep=8, stack="megatron", precision="bf16",
                                       seq_len=4096, micro_batch=1, global_batch=8, moe_dispatcher="hybridep",
                                       moe_rank_imbalance=1.0)
    moe = next(k for k in count_params(settings.model).layers.kinds if k.has_experts).mlp
    assert _hybridep_handle(8, 1, 1, 128) == 673.5
    assert float(moe.hybridep_saved_bytes(context(plan), 8.0)) == 4096 * 673.5
    # N counts the group's domains: the same group over 2-GPU domains (N 4) adds 2 x 3 = 6 B a token
    assert float(moe.hybridep_saved_bytes(context(plan), 2.0)) == 4096 * (673.5 + 6)


@pytest.mark.parametrize("fused,dtype,want", [
    # the allgather dispatcher (layers/moe.py [12]) gathers the tokens of the tp_ep group, etp 2 x ep 8 = 16 ranks, one
    # local expert (E_l = 1): masked_select keeps the [E_l, 16 n] probabilities (2 B bf16) and mask (1 B), 16 x 3 = 48 B a
    # local token; the fused permute TE's int32 row-id map [16 n, 2 E_l + 1], 16 x 4 x 3 = 192 B a local token
    # (+ the per-row probabilities the activation saves, masked_select's output: 2 B a row, 4 B in fp32)
    (True, None, N * (FUSED_ROUTER + 48 + 192) + 2 * ROWS),      # 589,824 B
    # fp32 probabilities (--moe-router-dtype fp32): masked_select's saved input 4 B, 16 x 5 = 80 B a local token
    (True, "fp32", N * (FUSED_ROUTER + 80 + 192) + 4 * ROWS),    # 671,744 B
    # unfused permute: the int64 sorted indices, 8 B a row, T k / tp x etp = 2 rows per token of T (= 4 per local token)
    (False, None, N * (FUSED_ROUTER + 48) + T * 8 * 2 + 2 * ROWS),  # 262,144 B
])
def test_allgather_by_hand(fused, dtype, want):
    settings, plan, pc, i = _moe(ep=8, moe_dispatcher="allgather", moe_router_fusion=True, moe_permute_fusion=fused,
                                 moe_router_dtype=dtype)
    assert float(moe_routing_saves(settings)(pc.layers.kinds[i], context(plan))) == want


@pytest.mark.parametrize("ep,fused,want", [
    # per local token (T / 2): top-k indices 8 etp k (the manager's top-k over etp k columns) + is_token_in_rank over
    # ep x etp = 16 ranks, 32 + 16 B; a token
    # reaches 8 (1 - (7/8)^2) = 1.875 of the 8 EP ranks, the rank's rows per token T k / tp x etp = 2 of them:
    # 1.875 received tokens a token, each with its row-id map over 1 local expert, 4 (2 x 1 + 1) = 12 B; per row
    # the multihot's two int64 index pairs, 32 B. DeepEP's handle over 16 ranks (> 8: its internode kernels, 2 RDMA
    # ranks): send_rdma_head 4 x 2 = 8 B a local token, send_nvl_head 32 B x the 2 (1 - (1/2)^2) = 1.5 nodes a token
    # reaches = 48 B a local token, recv_src_meta 8 B a received token
    # (+ the fp32 per-row probabilities the activation saves, 4 B a row; + the handle's int32 prefix matrices, a
    # layer's: internode over 16 ranks, 2 RDMA ranks, 10 channels, 4 (2 + 16) (2 x 10 + 1) = 1,512 B)
    (8, True, N * FUSED_ROUTER + T * (48 / 2 + 56 / 2 + 1.875 * (12 + 8) + 2 * 32) + 4 * ROWS + 1512),    # 744,936 B
    # unfused: the argsort of the received [n_recv, 1] map 8 B a received token, and 8 B sorted indices a row
    (8, False, N * UNFUSED_ROUTER + T * (48 / 2 + 56 / 2 + 1.875 * (8 + 8) + 2 * 40) + 4 * ROWS + 1512),  # 746,984 B
    # ep 4 x etp 2 = 8 ranks: DeepEP's intranode kernels, send_head int32 [n, 8] 32 B a local token, recv_src_idx
    # 4 B a received token; 2 local experts, 4 (1 - (3/4)^2) = 1.75 received tokens a token, row-id map 4 (2 x 2 + 1);
    # the intranode prefix matrices [8, 8] + 2 x [8, 10] int32, 896 B
    (4, True, N * FUSED_ROUTER + T * ((32 + 8 + 32) / 2 + 1.75 * (20 + 4) + 2 * 32) + 4 * ROWS + 896),  # 697,216 B
])
def test_deepep_by_hand(ep, fused, want):
    settings, plan, pc, i = _moe(ep=ep, moe_dispatcher="deepep", moe_router_fusion=fused, moe_permute_fusion=fused)
    assert float(moe_routing_saves(settings)(pc.layers.kinds[i], context(plan))) == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------ Megatron's router flags (issue 23)
from tests.test_imbalance import ARGS  # noqa: E402  (a Mixtral-shaped Megatron script, alltoall dispatcher)


@pytest.mark.parametrize("extra, aux, z, pre", [
    ("", 0.0, None, False),                                               # Megatron's defaults
    ("--moe-aux-loss-coeff 1e-2", 1e-2, None, False),                     # the default type aux_loss takes it
    ("--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4", 1e-4, None, False),
    ("--moe-router-load-balancing-type none --moe-aux-loss-coeff 1e-2", 0.0, None, False),  # `none`: no aux loss
    ("--moe-router-load-balancing-type aux_loss none --moe-aux-loss-coeff 0.0 1e-3", 0.0, None, False),
    ("--moe-router-load-balancing-type none global_aux_loss --moe-aux-loss-coeff 0.0 1e-3", 1e-3, None, False),
    ("--moe-z-loss-coeff 1e-3 --moe-router-pre-softmax", 0.0, 1e-3, True),
])
def test_reader_reads_the_router_flags(tmp_path, extra, aux, z, pre):
    from planner.trainers import load_trainer_config

    p = tmp_path / "run.args"
    p.write_text(ARGS + " " + extra + "\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=16, model="mixtral-8x7b")
    assert (cfg.job["moe_aux_loss_coeff"], cfg.job.get("moe_z_loss_coeff"), cfg.job["moe_router_pre_softmax"]) == (aux, z, pre)
    assert not any("aux-loss" in x or "z-loss" in x or "pre-softmax" in x for x in cfg.not_modelled + cfg.ignored)
    assert any(a.startswith("moe_aux_loss_coeff: 0.0 (no --moe-aux-loss-coeff") for a in cfg.assumed) == (extra == "" or
                                                                                                        "z-loss" in extra)


def test_reader_balancing_type_and_coefficient_lists(tmp_path, cli):
    """The Megatron-LM reader's lists, read by the rule the Megatron-Bridge reader shares (megatron.router_balancing;
    tests/test_bridge_moe.py test_balancing_type_and_coefficient_lists), at Megatron-LM d98e8a64: both flags take
    nargs '+' (arguments.py l. 3532-3537) and a one-word list becomes its word (l. 1661-1664); transformer_config.py
    l. 1828-1834 asserts a list of types has a list of coefficients of its length; the router computes each auxiliary
    type's loss with its first entry's coefficient (router.py get_aux_loss_coeff l. 388-401, list.index) on the scores
    of one top-k routing (l. 771-830). So aux_loss seq_aux_loss with 1e-3 1e-4 routes as one auxiliary loss:
    moe_load_balancing aux_loss, moe_aux_loss_coeff 1e-3 (the largest), priced as aux_loss with 1e-3 alone."""
    from planner.trainers import load_trainer_config

    def read(extra):
        p = tmp_path / "run.args"
        p.write_text(ARGS + " " + extra + "\n")
        return load_trainer_config(p, fmt="megatron", gpus=16, model="mixtral-8x7b")

    both = read("--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1e-3 1e-4")
    assert (both.job["moe_load_balancing"], both.job["moe_aux_loss_coeff"]) == ("aux_loss", 1e-3)
    assert any(a.startswith("--moe-router-load-balancing-type aux_loss seq_aux_loss with --moe-aux-loss-coeff 0.001 "
                            "0.0001: priced as auxiliary-loss balancing") for a in both.assumed)
    # `none`'s coefficient is never read (is_aux_loss_enabled l. 403-408): 0.5 and 0.7 give no loss
    j = read("--moe-router-load-balancing-type none global_aux_loss none --moe-aux-loss-coeff 0.5 0 0.7").job
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"]) == ("aux_loss", 0.0)
    # the first entry of a type is its coefficient (list.index): seq_aux_loss 0 then 0.01 -> 0
    assert read("--moe-router-load-balancing-type seq_aux_loss seq_aux_loss --moe-aux-loss-coeff 0 0.01"
                ).job["moe_aux_loss_coeff"] == 0.0
    # the expert bias, then force, still decide the rule; the coefficient is the list's all the same
    j = read("--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1e-3 0 "
             "--moe-router-enable-expert-bias").job
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"]) == ("aux_loss_free", 1e-3)
    j = read("--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 0 2e-3 "
             "--moe-router-force-load-balancing").job
    assert (j["moe_rank_imbalance"], j["moe_aux_loss_coeff"], "moe_load_balancing" in j) == (1.0, 2e-3, False)
    # one type `none` beside a list of coefficients: never read, no loss (get_aux_loss_coeff returns 0.0)
    r = read("--moe-router-load-balancing-type none --moe-aux-loss-coeff 0 0.01")
    assert r.job["moe_aux_loss_coeff"] == 0.0 and any(a.startswith("--moe-aux-loss-coeff 0 0.01 beside") for a in r.assumed)
    # priced as the one type with the largest coefficient
    p = tmp_path / "a.args"
    p.write_text(ARGS + " --moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1e-3 1e-4\n")
    q = tmp_path / "b.args"
    q.write_text(ARGS + " --moe-aux-loss-coeff 1e-3\n")
    listed, own = (json.loads(cli("explain", str(f), "--gpus", "16", "--format", "json").stdout) for f in (p, q))
    assert (listed["time"], listed["memory"]) == (own["time"], own["memory"])
    assert listed["plan"]["moe_aux_loss_coeff"] == own["plan"]["moe_aux_loss_coeff"] == 1e-3


@pytest.mark.parametrize("extra, match", [
    # router.py l. 771-777 runs Sinkhorn and quantile balancing only where the type is that string
    ("--moe-router-load-balancing-type aux_loss sinkhorn --moe-aux-loss-coeff 1e-3 0", "sinkhorn in a list"),
    ("--moe-router-load-balancing-type quantile_balancing aux_loss --moe-aux-loss-coeff 0 1e-3",
     "quantile_balancing in a list"),
    # no coefficient (the default 0.0) or one (a one-word list becomes its word, arguments.py l. 1663-1664): not a list
    ("--moe-router-load-balancing-type aux_loss seq_aux_loss", "of the same length"),
    ("--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1e-3", "of the same length"),
    # one type (the default aux_loss) with a list: get_aux_loss_coeff returns the list, compared with 0
    ("--moe-aux-loss-coeff 1e-3 1e-4", "beside the one type aux_loss: a list of coefficients goes with a list of types"),
    ("--moe-router-load-balancing-type sinkhorn --moe-aux-loss-coeff 1e-2",
     "asserts a coefficient of 0 under Sinkhorn (router.py l. 298"),
])
def test_reader_refuses_lists_megatron_refuses(tmp_path, cli, extra, match):
    from tests.conftest import assert_one_error

    p = tmp_path / "run.args"
    p.write_text(ARGS + " " + extra + "\n")
    assert_one_error(cli("explain", str(p), "--gpus", "16"), match)


def test_reader_refuses_mismatched_coefficients(tmp_path, cli):
    from tests.conftest import assert_one_error

    p = tmp_path / "run.args"
    p.write_text(ARGS + " --moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1e-2 1e-3 1e-4\n")
    assert_one_error(cli("explain", str(p), "--gpus", "16"), "--moe-router-load-balancing-type aux_loss seq_aux_loss with "
                     "--moe-aux-loss-coeff 0.01 0.001 0.0001: Megatron-Core asserts a list of coefficients of the same "
                     "length (transformer_config.py l. 1828-1834 @d98e8a64)", "give --moe-aux-loss-coeff 2 numbers")


@pytest.mark.parametrize("extra, flag", [
    ("--moe-aux-loss-coeff -1e-2", "--moe-aux-loss-coeff '-1e-2' is negative"),
    ("--moe-router-load-balancing-type aux_loss none --moe-aux-loss-coeff 1e-2 -1e-3", "--moe-aux-loss-coeff '-1e-3' is negative"),
    ("--moe-z-loss-coeff -1e-3", "--moe-z-loss-coeff '-1e-3' is negative"),
])
def test_reader_refuses_negative_coefficients(tmp_path, cli, extra, flag):
    """A negative loss coefficient is refused with the flag named (exit 2), never clamped to 0 and run on."""
    from tests.conftest import assert_one_error

    p = tmp_path / "run.args"
    p.write_text(ARGS + " " + extra + "\n")
    assert_one_error(cli("explain", str(p), "--gpus", "16"), flag)


@pytest.mark.parametrize("fields", [dict(moe_aux_loss_coeff=0.01, moe_z_loss_coeff=0.001, moe_router_pre_softmax=True),
                                    dict(moe_aux_loss_coeff=0.0), {}])
def test_export_reads_back(fields):
    # the plan's router fields go out as Megatron's flags and come back as the same plan (exit 2 on a difference)
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    _, _, _, row = explain_job(model="mixtral-8x7b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", global_batch=8,
                               micro_batch=1, seq_len=4096, **fields)
    text = export_plan(row["plan"], "megatron")[0]
    assert ("--moe-aux-loss-coeff 0.01" in text, "--moe-z-loss-coeff 0.001" in text,
            "--moe-router-pre-softmax" in text) == ((True,) * 3 if fields.get("moe_z_loss_coeff") else (False,) * 3)
    check_readback(row, "megatron", text)


def test_recipe_then_megatrons_default():
    # a planned job without the field takes its model's published coefficient (DeepSeek-V3 sec. 4.2: 0.0001), a job's
    # own wins, and a model without one gets Megatron-LM's 0.0, listed as inherited on the stack that prices it
    from planner.recipe import apply

    data, notes = apply({"model": "deepseek-v3", "gpus": 1024})
    assert data["moe_aux_loss_coeff"] == 0.0001 and any(n.startswith("moe_aux_loss_coeff 0.0001 (arXiv:2412.19437")
                                                        for n in notes)
    assert apply({"model": "deepseek-v3", "gpus": 1024, "moe_aux_loss_coeff": 0.0})[0]["moe_aux_loss_coeff"] == 0.0
    assert "moe_aux_loss_coeff" not in apply({"model": "mixtral-8x7b", "gpus": 64})[0]
    settings, _, _, _ = _moe()
    assert settings.moe_aux_loss_coeff == 0.0 and ("moe_aux_loss_coeff", 0.0) in settings.inherited


# ------------------------------------------------------------------ --moe-router-dtype (issue 21)
# Of what the router saves, only the z-loss's tensors take the logits' dtype: torch.logsumexp keeps its input (the
# gating GEMM's output, in the router dtype: router.py @d98e8a64 l. 105-111) and its output (moe_utils.py z_loss_func
# l. 169-170). The score functions save fp32 outputs at any router dtype (softmax dtype=torch.float32, sigmoid of
# logits.float(): moe_utils.py l. 896-917), TE's fused kernel an fp32 intermediate output and a bool map (router.cpp
# @4329ff84 l. 63-66), torch.topk int64 indices.
@pytest.mark.parametrize("dtype,d", [(None, 2), ("fp32", 4), ("fp64", 8)])
@pytest.mark.parametrize("z", [0.0, 1e-3])
def test_router_dtype_by_hand(dtype, d, z):
    # the unfused router (fp64 takes no fused one): int64 indices 8 k, softmax output 4 k; a z-loss d (E + 1) more
    settings, plan, pc, i = _moe(ep=8, moe_permute_fusion=True, moe_router_fusion=False, moe_z_loss_coeff=z,
                                 moe_router_dtype=dtype)
    assert settings.moe_router_dtype == dtype
    # (+ the per-row probabilities in the router dtype, d B a row)
    want = N * (8 * K + 4 * K + (d * (E + 1) if z else 0) + 4 * (2 * E + 1)) + d * ROWS  # 80 + 9 d B a token with the z-loss
    assert float(moe_routing_saves(settings)(pc.layers.kinds[i], context(plan))) == want


@pytest.mark.parametrize("dtype,z_loss", [("fp32", 4 * 256 + 4), (None, 2 * 256 + 2)])
def test_router_dtype_deepseek_v3(dtype, z_loss):
    # DeepSeek-V3 (E 256, top-8, sigmoid with the expert score bias, group-limited) on TE's fused router: the map and
    # the fp32 intermediate output 5 E = 1,280 B a token whatever the dtype; the z-loss 4 (E + 1) = 1,028 B in fp32
    # against 2 (E + 1) = 514 B in bf16
    from planner.layers.moe import RouterPath, ROUTER_DTYPE_BYTES

    model = count_params(explain_job(model="deepseek-v3", gpus=2048, ep=64, pp=16, tp=1, micro_batch=1,
                                     global_batch=4096, seq_len=4096)[0].model)
    moe = next(k for k in model.layers.kinds if k.has_experts).mlp
    terms = router_saved_terms(moe, RouterPath(fused=True, z_loss=True, logit_bytes=ROUTER_DTYPE_BYTES[dtype]))
    assert terms == {"topk": 5 * 256, "groups": 0.0, "aux": 0.0, "z_loss": z_loss}


@pytest.mark.parametrize("fields,match", [
    (dict(moe_router_dtype="fp64", moe_router_fusion=True), "moe_router_dtype fp64 with moe_router_fusion"),
    (dict(moe_router_dtype="fp32", stack="torchtitan", sharding="fsdp", pp=1, ep=8), "is Megatron-Core's --moe-router-dtype"),
])
def test_router_dtype_refused(fields, match):
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match=match):
        explain_job(**dict(KW, **fields))


def test_dense_model_refuses_router_dtype():
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="moe_router_dtype set but llama3-8b has no experts"):
        explain_job(model="llama3-8b", gpus=8, hardware="h100-sxm", global_batch=8, seq_len=4096, moe_router_dtype="fp32")


@pytest.mark.parametrize("extra,want", [("", None), ("--moe-router-dtype fp32", "fp32"), ("--moe-router-dtype fp64", "fp64")])
def test_reader_reads_the_router_dtype(tmp_path, extra, want):
    from planner.trainers import load_trainer_config

    p = tmp_path / "run.args"
    p.write_text(ARGS + " " + extra + "\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=16, model="mixtral-8x7b")
    assert cfg.job.get("moe_router_dtype") == want
    assert not any("router-dtype" in x for x in cfg.not_modelled + cfg.ignored)


def test_reader_refuses_an_unknown_router_dtype(tmp_path, cli):
    from tests.conftest import assert_one_error

    p = tmp_path / "run.args"
    p.write_text(ARGS + " --moe-router-dtype bf16\n")
    assert_one_error(cli("explain", str(p), "--gpus", "16"), "--moe-router-dtype: invalid choice: 'bf16'",
                     "valid: fp32, fp64")  # argparse's refusal (megatron_argparse.py)


def test_router_dtype_exports_and_reads_back():
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    _, _, _, row = explain_job(model="mixtral-8x7b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", global_batch=8,
                               micro_batch=1, seq_len=4096, moe_router_dtype="fp32", moe_z_loss_coeff=1e-3)
    assert row["plan"]["moe_router_dtype"] == "fp32"
    text = export_plan(row["plan"], "megatron")[0]
    assert "--moe-router-dtype fp32" in text
    check_readback(row, "megatron", text)


def test_deepep_handle_deepseek_v3():
    # DeepSeek-V3 (top-8, 8 groups, 4 a token): at EP 64 DeepEP's internode kernels over 64 / 8 = 8 RDMA ranks; a token
    # reaches min(8 (1 - (7/8)^8) = 5.25, 4 x max(1, 8 / 8)) = 4 nodes: send_rdma_head 4 x 8 + send_nvl_head 32 x 4 =
    # 160 B a local token, recv_src_meta 8 B a received token; at EP 8 (intranode) send_head 32 B and recv_src_idx 4 B
    import numpy as np

    model = count_params(explain_job(model="deepseek-v3", gpus=2048, ep=64, pp=16, tp=1, micro_batch=1,
                                     global_batch=4096, seq_len=4096)[0].model)
    moe = next(k for k in model.layers.kinds if k.has_experts).mlp
    per_token, per_recv = moe.deepep_handle_bytes(np.array([64.0, 8.0]))
    assert per_token.tolist() == [160.0, 32.0] and per_recv.tolist() == [8.0, 4.0]


# ------------------------------------------------------------------ the dispatchers' attributes (issue 21)
# Megatron-LM @d98e8a64 token_dispatcher.py: MoEAlltoAllTokenDispatcher.dispatch_preprocess keeps self.probs (the
# dense [n, E] probabilities in the logits' dtype) and self.routing_map (bool [n, E]) until the layer's next forward
# (l. 641-643); neither is saved by autograd on the unfused router (zeros().scatter() keeps the int64 index only),
# TE's fused router saves the map (router.py l. 99), so there it is held beyond the saves only under full recompute.
# One micro-batch's per MoE layer, not per micro-batch in flight (layers/moe.py [13], memory.py [dh]).
def _held(model, dispatcher, dtype=None, fused=False, **fields):
    settings, plan, _, _ = explain_job(**dict(dict(model=model, stack="megatron", precision="bf16", seq_len=4096,
                                                   micro_batch=1, recompute="none", moe_rank_imbalance=1.0), **fields))
    moe = next(k for k in count_params(settings.model).layers.kinds if k.has_experts).mlp
    from planner.layers.moe import ROUTER_DTYPE_BYTES
    held, rc = moe.dispatcher_held_bytes(context(plan), dispatcher, ROUTER_DTYPE_BYTES[dtype], fused)
    return float(held), float(rc)


@pytest.mark.parametrize("model,dtype,fused,want", [
    # DeepSeek-V3 (E 256): 2 x 256 + 256 = 768 B a token in bf16 on the unfused router, 4 x 256 + 256 = 1,280 in fp32;
    # the fused router's map (256 B) only where its forward saved nothing (full recompute)
    ("deepseek-v3", None, False, (768, 0)), ("deepseek-v3", "fp32", False, (1280, 0)), ("deepseek-v3", None, True, (512, 256)),
    # Qwen3-30B-A3B (E 128): 2 x 128 + 128 = 384 B, fp64 8 x 128 + 128 = 1,152 B
    ("qwen3-30b-a3b", None, False, (384, 0)), ("qwen3-30b-a3b", "fp64", False, (1152, 0)),
])
def test_alltoall_held_by_hand(model, dtype, fused, want):
    gpus = dict(gpus=2048, ep=64, pp=16, tp=1, global_batch=4096) if model == "deepseek-v3" else dict(
        gpus=16, ep=8, pp=1, tp=1, global_batch=16)
    held, rc = _held(model, "alltoall", dtype, fused, moe_dispatcher="alltoall", moe_router_fusion=fused,
                     moe_router_dtype=dtype, **gpus)
    assert (held, rc) == (4096 * want[0], 4096 * want[1])  # 4,096 local tokens (tp 1, micro-batch 1)


def test_deepep_held_deepseek_v3():
    # DeepSeek-V3 at EP 64, etp 1: _DeepepManager keeps token_probs, fp32 [n, 8] (32 B a local token), and the
    # received multihot map, bool [n_recv, 256 / 64] (4 B a received token; a token reaches 64 (1 - (63/64)^8) =
    # 7.58 of the 64 ranks, top-8 rows a token at balanced routing); token_indices int64 [n, 8] (64 B) is saved by
    # torch.topk's backward, held beyond it only under full recompute
    reach = 64 * (1 - (63 / 64) ** 8)
    held, rc = _held("deepseek-v3", "deepep", gpus=2048, ep=64, pp=16, tp=1, global_batch=4096, moe_dispatcher="deepep")
    assert held == pytest.approx(4096 * (32 + 4 * reach), rel=1e-12) and rc == 4096 * 64


@pytest.mark.parametrize("fused,etp_tp,want", [
    # Qwen3-30B-A3B (E 128, top-8) at EP 8: _HybridEPManager keeps routing_map, bool [n, etp E], and token_probs, the fp32
    # [n, etp E] copy (4 etp E); the fused router saves its own map, which with etp 1 is the manager's (a view): held
    # beyond only under full recompute. dispatched_probs, fp32 per received row (top-8 rows a token at etp 1), is the
    # experts' activation's save: the recompute share too
    (False, 1, (128 + 512, 8 * 4)), (True, 1, (512, 128 + 8 * 4)),
    # TP 2 under SP, etp 2: n = T / 2 local tokens over etp E = 256 columns, a copy whatever the router (256 + 1,024 a
    # local token); 8 rows of T a token received (T k / tp x etp)
    (True, 2, (0.5 * (256 + 1024), 8 * 4)),
])
def test_hybridep_held_qwen3(fused, etp_tp, want):
    held, rc = _held("qwen3-30b-a3b", "hybridep", None, fused, gpus=16, ep=8, pp=1, tp=etp_tp, global_batch=16,
                     moe_dispatcher="hybridep", moe_router_fusion=fused, **({"sequence_parallel": True} if etp_tp > 1 else {}))
    assert (held, rc) == (4096 * want[0], 4096 * want[1])


def test_deepep_prefix_matrices():
    # DeepEP's handle's int32 prefix matrices, one set a layer (DeepEP @567632d csrc/deep_ep.cpp l. 594-595, 660,
    # 1097-1100, 1180-1181), C = 20 SMs / 2 = 10 channels: intranode R 8: [8, 8] + 2 x [8, 10] = 224 int32 = 896 B;
    # internode R 64 over 8 RDMA ranks: 2 x [8, 10] + [8] + 2 x [64, 10] + [64] = 1,512 int32 = 6,048 B
    import numpy as np
    from planner.layers.moe import MoEMLP

    assert MoEMLP.deepep_prefix_bytes(np.array([8.0, 64.0])).tolist() == [896.0, 6048.0]


def test_allgather_held():
    # Mixtral at TP 2 (SP), EP 8, etp 2: local_map [16 n, 1] bool, 16 B a local token; local_probs, the per-row
    # probabilities (2 B, T k / tp x etp = 2 rows a token of T), saved by the activation: held beyond only under full recompute
    settings, plan, pc, i = _moe(ep=8, moe_dispatcher="allgather")
    held, rc = pc.layers.kinds[i].mlp.dispatcher_held_bytes(context(plan), "allgather", 2.0, False)
    assert (float(held), float(rc)) == (N * 16, 2 * ROWS)


def _first_stage_activations(monkeypatch, off=False, **fields):
    from planner.layers.moe import MoEMLP

    if off:
        monkeypatch.setattr(MoEMLP, "dispatcher_held_bytes", lambda self, *a, **k: (0.0, 0.0))
    row = explain_job(**dict(dict(model="qwen3-30b-a3b", gpus=16, tp=1, pp=4, ep=4, stack="megatron", precision="bf16",
                                  seq_len=4096, micro_batch=1, global_batch=64, sharding="zero1", moe_dispatcher="alltoall",
                                  moe_rank_imbalance=1.0), **fields))[3]
    return row["memory"]["stages"]["first"]["activations_bytes"]


@pytest.mark.parametrize("fields,per_token", [
    (dict(recompute="none", moe_router_fusion=False), 384),  # the bf16 probabilities and the unfused router's map
    (dict(recompute="none", moe_router_fusion=True), 256),   # the fused map is one of the in-flight saves
    (dict(recompute="full", moe_router_fusion=True), 384),   # ... not under full recompute (saved nothing)
])
def test_held_once_a_layer_not_per_microbatch(monkeypatch, fields, per_token):
    # Qwen3-30B-A3B, PP 4: the first stage holds 12 MoE layers and 4 micro-batches in flight (1F1B); the attributes
    # count once a layer, 12 x 4,096 x per_token, not x 4
    on = _first_stage_activations(monkeypatch, **fields)
    off = _first_stage_activations(monkeypatch, off=True, **fields)
    assert on - off == 12 * 4096 * per_token


@pytest.mark.parametrize("dispatcher,dtype,per_row", [
    ("alltoall", None, 2), ("alltoall", "fp32", 4), ("allgather", "fp64", 8),
    ("deepep", None, 4), ("deepep", "fp32", 4), ("deepep", "fp64", 8),  # fp32 cast, back to fp64 (l. 1318, 1456)
    ("hybridep", "fp64", 4), ("deepep_ll", None, 0),
])
def test_expert_probs_by_dispatcher(dispatcher, dtype, per_row):
    # the per-row probabilities the weighted activation saves, T k / tp x etp = 2 rows a token of T (Mixtral, TP 2, etp 2)
    from planner.layers.moe import ROUTER_DTYPE_BYTES

    _, plan, pc, i = _moe(ep=8)
    got = pc.layers.kinds[i].mlp.expert_probs_saved_bytes(context(plan), dispatcher, ROUTER_DTYPE_BYTES[dtype])
    assert float(got) == ROWS * per_row


# ------------------------------------------------------------------ the MTP module under full recompute (issue 21)
# Megatron-LM @d98e8a64 multi_token_prediction.py MultiTokenPredictionLayer.forward l. 1705-1719, _checkpointed_forward
# l. 1621-1651: under --recompute-granularity full with the uniform method the module's projection and layer run under
# one checkpoint (its forward saves only its two inputs), the block method skips it ('not supported for MTP yet').
def _mtp(**fields):
    from planner.memory import _PerLayer

    settings, plan, _, _ = explain_job(**dict(dict(model="deepseek-v3", gpus=2048, ep=64, pp=16, tp=1, micro_batch=1,
                                                   global_batch=4096, seq_len=4096, stack="megatron", precision="bf16",
                                                   recompute="full", moe_dispatcher="alltoall", moe_router_fusion=True, mtp_layers=1,
                                                   moe_rank_imbalance=1.0), **fields))
    pc = count_params(settings.model)
    return _PerLayer(settings, plan, pc), pc.layers


@pytest.mark.parametrize("fields,recomputed", [(dict(), True), (dict(recompute_layers=2), False),
                                               # the block method covering every layer (61 / 16 -> at most 4 a stage)
                                               (dict(recompute_layers=61), False),
                                               (dict(recompute="selective"), False)])
def test_mtp_module_under_full_recompute(fields, recomputed):
    # DeepSeek-V3 (one MTP module, E 256), alltoall with TE's fused router: each MoE layer's dispatcher holds the bf16
    # probabilities (2 E = 512 B a token) and the fused map (E = 256 B) beyond its autograd save only where the forward
    # saved nothing: the MTP module's under uniform full recompute, 768 B a token; under the block method or selective
    # recompute its forward saved the map, 512 B
    per, ll = _mtp(**fields)
    assert float(per.mtp_held) == 4096 * (768 if recomputed else 512)
    # its activations: the checkpoint keeps the module's two inputs (2 x 2 h, h 7168) beside its output layer and
    # loss, and its layer's tensors (with the two halves) are the re-run buffer of the stage holding the loss
    # (memory.py [ml]: the output layer's hidden terms 2h + 2h and the loss's kept fp32 softmax, 4 B a logit, V 129,280
    # at tp 1: 4,096 x (28,672 + 517,120) = 2,235,564,032 B; the main loss's backward transients are out_act's alone)
    halves = 4096 * 2 * 2 * 7168
    loss = 4096 * (4 * 7168 + 4 * 129280)
    assert float(per.mtp_out_act) == loss == 2_235_564_032
    stored = per.stored[ll.mtp_kinds[0]]
    if recomputed:
        assert float(per.mtp) == pytest.approx(float(halves + loss), rel=1e-12)
        assert float(per.mtp_buffer) == pytest.approx(float(stored + halves), rel=1e-12)
    else:
        assert float(per.mtp) == pytest.approx(float(stored + halves + loss), rel=1e-12)
        assert float(per.mtp_buffer) == 0.0


def test_block_method_at_every_layer_runs_the_mtp_module_without_recompute():
    # Megatron-LM @d98e8a64 multi_token_prediction.py _checkpointed_forward l. 1630-1650: under the block method the
    # module runs without recompute whatever --recompute-num-layers, so a count covering every layer (4 a stage of
    # DeepSeek-V3's 61 at PP 16) is priced as uniform for the decoder layers and as no recompute for the MTP module
    block, _ = _mtp(recompute_layers=4)
    uniform, _ = _mtp()
    # the decoder layers: every layer of a stage re-run either way
    assert [float(x) for x in block.stored] == [float(x) for x in uniform.stored]
    # the module: its forward saved its tensors (and the fused map), 512 B a token held beyond them, not 768
    assert float(block.mtp_held) == 4096 * 512 and float(uniform.mtp_held) == 4096 * 768
    assert float(block.mtp_buffer) == 0.0 and float(uniform.mtp_buffer) > 0.0


@pytest.mark.parametrize("modules,act_rerun", [(None, False), (["layernorm", "moe_act"], True)])
def test_selective_buffer_reruns_only_the_unfused_saves_the_policy_drops(monkeypatch, modules, act_rerun):
    # memory.py [uf] with [sr]'s reasoning: with bias_activation_fusion off, the unfused activation's saves
    # (layers/moe.py unfused_saved_bytes) are kept by the selective policy (the routed experts' share re-run under
    # moe_act: experts.py @d98e8a64 l. 1019-1030 checkpoints the activation alone); the one-layer re-run buffer holds
    # the re-run share only: nothing under the default policy, the routed experts' share under moe_act (before:
    # the whole of them, every policy, beside the kept copy)
    import planner.memory as memory

    settings, plan, pc, i = _moe(ep=8, recompute="selective", recompute_modules=modules, moe_grouped_gemm=True,
                                 bias_activation_fusion=False)
    ctx = context(plan)
    kind = pc.layers.kinds[i]
    kb = memory.kernel_bytes(settings.stack, plan.compile, settings)
    every, kept = float(kind.mlp.unfused_saved_bytes(ctx, kb)), float(kind.mlp.unfused_saved_bytes(ctx, kb, act_rerun))
    assert every > 0.0 and (kept < every) == act_rerun
    stored, buffers, _ = layer_memory(settings, plan, ctx, pc.layers)
    monkeypatch.setattr(type(kind.mlp), "unfused_saved_bytes", lambda self, c, k, r=False: 0.0)
    stored0, buffers0, _ = layer_memory(settings, plan, ctx, pc.layers)
    assert float(stored[i] - stored0[i]) == pytest.approx(kept, rel=1e-12)  # the kept share
    assert float(buffers[i] - buffers0[i]) == pytest.approx(every - kept, rel=1e-12, abs=1e-6)  # the re-run share
