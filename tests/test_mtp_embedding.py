"""The multi-token-prediction stage's own word embedding and the MTP modules' non-unit parameters under Megatron-FSDP
(planner/memory.py [me]), and DualPipe's end rank holding both ends (memory.py _stages, [9]).

Hand derivations from NVIDIA/Megatron-LM @d98e8a64:
- megatron/core/models/gpt/gpt_model.py l. 166-181: `if self.pre_process or self.mtp_process: self.embedding =
  LanguageModelEmbedding(...)`; mtp_process is the last pipeline stage without a custom layout
  (transformer/multi_token_prediction.py l. 788-828). language_module.py setup_embeddings_and_output_layer
  l. 253-305: with mtp_num_layers and pp > 1 that copy is zero-filled, marked shared_embedding and all-reduced with
  the first stage's: a trainable parameter of the last stage (weights, gradients, optimizer states). With one stage
  the MTP modules use the one embedding (pre_process).
- Megatron-FSDP's units are TransformerLayer / MoETransformerLayer / MambaLayer (distributed/fsdp/mcore_fsdp_adapter.py
  l. 163-173): an MTP module's mtp_model_layer is one; its eh_proj [2h -> h] and enorm, hnorm, final_layernorm
  (multi_token_prediction.py l. 1157-1174, 1247), and the MTP stage's embedding copy, are non-unit buckets kept
  gathered the whole step (memory.py [nu]).
Llama 3 8B (model_zoo/llama3-8b.yaml): h 4,096, kv 1,024, f 14,336, V 128,256 (a multiple of Megatron's 128 x tp at
tp 1: no padding), RMSNorm (h parameters a norm). One MTP module = one layer (218,112,000 with its two norms) + eh_proj
2 x 4,096 x 4,096 = 33,554,432 + three norms 12,288 = 251,678,720; E = 128,256 x 4,096 = 525,336,576.
"""
from __future__ import annotations

import pytest

from planner import memory as M
from planner.plan import resolve
from planner.schema import Job

H, E = 4096, 128_256 * 4096
LAYER = 2 * H * H + 2 * H * 1024 + 3 * H * 14336 + 2 * H
MTP = LAYER + 2 * H * H + 3 * H
NON_UNIT = 2 * H * H + 3 * H


def _last(pp, mtp, sharding="zero1", mode=None, stack="megatron"):
    extra = {"sharding_mode": mode} if mode else {}
    s, p, _ = resolve(Job(model="llama3-8b", gpus=8 * pp, tp=1, pp=pp, sharding=sharding, stack=stack,
                          global_batch=16, micro_batch=1, seq_len=4096, recompute="full", mtp_layers=mtp, **extra))
    first, last, *_ = M._stages(s, p)
    return first, last


def test_hand_counts():
    assert (LAYER, MTP, NON_UNIT, E) == (218_112_000, 251_678_720, 33_566_720, 525_336_576)


@pytest.mark.parametrize("pp, extra", [(1, 0), (2, E)])
def test_distributed_optimizer_last_stage(pp, extra):
    """Distributed optimizer (zero1) over dp 8, megatron bytes_per_param (bf16 weights 2, fp32 main gradients 4, fp32
    master 4 and Adam 8 sharded over dp): one MTP module adds MTP parameters to the last stage, and at pp 2 the MTP
    stage's embedding copy E too; the first stage is unchanged."""
    f0, l0 = _last(pp, 0)
    f1, l1 = _last(pp, 1)
    n = MTP + extra
    want = {"weights": 2 * n, "gradients": 4 * n, "master_weights": 4 * n / 8, "adam": 8 * n / 8}
    for k, v in want.items():
        assert float(l1[k]) - float(l0[k]) == pytest.approx(v, rel=1e-12), k
        if pp > 1:
            assert float(f1[k]) == float(f0[k]), k


@pytest.mark.parametrize("pp, extra", [(1, 0), (2, E)])
def test_megatron_fsdp_keeps_the_non_unit_pieces_gathered(pp, extra):
    """Megatron-FSDP optim_grads_params: the non-unit buckets kept gathered (fsdp_unsharded_ends, 2 B a parameter)
    grow by eh_proj and the three norms (33,566,720 x 2 = 67,133,440 B), and at pp 2 by the embedding copy
    (+ 525,336,576 x 2 = 1,050,673,152 B: 1,117,806,592 B); before [me] they grew by 0."""
    _, l0 = _last(pp, 0, "fsdp", "megatron_fsdp_optim_grads_params")
    _, l1 = _last(pp, 1, "fsdp", "megatron_fsdp_optim_grads_params")
    assert float(l1["fsdp_unsharded_ends"]) - float(l0["fsdp_unsharded_ends"]) == 2 * (NON_UNIT + extra)
    assert 2 * (NON_UNIT + E) == 1_117_806_592


def test_dualpipe_end_rank_holds_both_ends_once():
    """DeepSeek-V3's own layout (stack deepseek: DualPipe, PP 16, tests/test_deepseek_layout.py LAYOUT) with its one
    MTP module: each end rank holds stage 0 (the embedding) and stage 15 (the output layer, the loss and the MTP
    module: arXiv:2412.19437 sec. 3.2.3, 'the shallowest layers (including the embedding layer) and deepest layers
    (including the output head) of the model on the same PP rank'; deepseek-ai/DualPipe @bb214e82 dualpipe.py
    _forward_compute_chunk l. 75-82: rank 0 runs phase 0 as the first stage and phase 1 as the last, whose loss it
    computes). So the end rank's model states are the first stage's plus the last stage's, its output layer and loss
    activations the last stage's, and no embedding copy (stack memory.mtp_embedding_copy false: one rank holds
    both)."""
    layout = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", tp=1, pp=16, dp=128, ep=64, micro_batch=1,
                  global_batch=15360, seq_len=4096, sharding="zero1", precision="fp8", stack="deepseek",
                  recompute="selective", mtp_layers=1)
    s, p, _ = resolve(Job(**layout))
    first, last, _, dual, _ = M._stages(s, p)
    assert dual is not None and bool(dual[0])
    ends = dual[1]
    for k in ("weights", "gradients", "master_weights", "adam"):
        assert float(ends[k]) == pytest.approx(float(first[k]) + float(last[k]), rel=1e-12), k
    assert float(ends["output_activations"]) == float(last["output_activations"]) > 0.0
    assert float(first["output_activations"]) == 0.0


def test_which_stacks_build_the_copy():
    """stack memory.mtp_embedding_copy: Megatron-Core builds it (gpt_model.py l. 173-181), Megatron-Bridge runs
    Megatron-Core (905c0e386 gpt_model.py l. 150, the same statement; stack_db megatron-bridge extends megatron);
    DeepSeek's DualPipe end rank holds the embedding itself (sec. 3.2.3); torchtitan 0.3 refuses MTP under PP
    (models/deepseek_v3/mtp.py l. 199-209) and its entry leaves the field unset."""
    from planner.catalog import load_stack

    names = ("megatron", "megatron-bridge", "deepseek", "torchtitan-0.3")
    got = {n: load_stack(n).memory.mtp_embedding_copy for n in names}
    assert got == {"megatron": True, "megatron-bridge": True, "deepseek": False, "torchtitan-0.3": False}


def _step(model, pp, mtp, tp=1, stack="megatron"):
    from planner.step import step_time

    s, p, _ = resolve(Job(model=model, gpus=8 * pp, tp=tp, pp=pp, sharding="zero1", stack=stack, hardware="h100-sxm",
                          global_batch=16, micro_batch=1, seq_len=4096, recompute="full", mtp_layers=mtp))
    terms, extra = step_time(s, p)
    return s, terms, extra


def test_the_copys_gradient_all_reduce_is_priced_in_pp_comm():
    """The MTP stage's embedding copy is all-reduced with the first stage's every step (step.py [20]):
    Megatron-LM @d98e8a64 finalize_model_grads.py l. 671-680 -> _allreduce_word_embedding_grads, whose
    _get_shared_word_embedding_weight (l. 132-148) returns the copy where mtp_num_layers, tied or not; _allreduce_
    embedding_grad (l. 204-259) all-reduces its main_grad over the embedding group (pretrain_gpt.py get_embedding_ranks
    l. 493-505: the first stage and the MTP stage, the last one here), blocking, before the step.
    By hand, Llama 3 8B (untied) on 16 H100s, tp 1, pp 2 (dp 8, the default order: the two ends 8 ranks apart, on two
    nodes): E = 525,336,576 elements of fp32 main gradients (the megatron preset's 4 B) = 2,101,346,304 B, a 2-rank
    ring all-reduce over the network (hardware_db/h100-sxm.yaml: 50 GB/s line x 0.94 = 47 GB/s, 10 us a round):
    2 (n - 1) = 2 rounds x 10 us + 2 (n - 1) / n x 2,101,346,304 B / 47e9 B/s = 0.044729496 s. Without MTP the
    untied model has no embedding group (size 1: 0); at pp 1 no copy (0)."""
    size = 4 * E
    assert size == 2_101_346_304
    want = 2 * 10e-6 + size / 47e9
    s0, t0, x0 = _step("llama3-8b", 2, 0)
    s1, t1, x1 = _step("llama3-8b", 2, 1)
    assert s1.bpp.gradients == 4.0 and not s1.model.tied_embeddings
    assert float(x0["pp_tied_grads_s"]) == 0.0
    assert float(x1["pp_tied_grads_s"]) == pytest.approx(want, rel=1e-12)
    assert float(x1["pp_tied_grads_s"]) == pytest.approx(0.044729496, rel=1e-8)
    # a named term of pp_comm: the MTP module adds no pipeline send of its own, so pp_comm moves by the all-reduce alone
    assert float(t1.pp_comm) - float(t0.pp_comm) == pytest.approx(want, rel=1e-9)
    _, _, x = _step("llama3-8b", 1, 1)
    assert float(x["pp_tied_grads_s"]) == 0.0


def test_tied_and_mtp_share_one_all_reduce():
    """With tied embeddings the last stage's shared weight is the MTP copy itself (language_module.py l. 345-357:
    shared_embedding_or_output_weight returns the embedding on the mtp_process stage), so one tensor is all-reduced,
    tied or not: Gemma 3 27B (tied, rotary) at pp 2 costs the same all-reduce with and without an MTP module. Megatron-
    Bridge runs Megatron-Core (its entry extends megatron): the same there (its own vocabulary padding, so its own
    figure)."""
    for stack in ("megatron-bridge",):  # megatron builds no post-norms (stack_db runs.layer_kinds)
        _, _, x0 = _step("gemma3-27b", 2, 0, stack=stack)
        _, _, x1 = _step("gemma3-27b", 2, 1, stack=stack)
        assert float(x0["pp_tied_grads_s"]) > 0.0
        assert float(x1["pp_tied_grads_s"]) == float(x0["pp_tied_grads_s"]), stack
