"""planner/megatron_ci.py: the Megatron-LM functional-test corpus (tests/data/megatron_ci/, a copy
of the reference data with its sources in its README) as a memory validation: rows parsed,
tiers counted, skip reasons, two rows' predictions computed by hand, the figure the harness
compares is explain's last-stage allocated memory, and the CLI. `pytest -s` prints the current
accuracy table. The records validate; nothing is fitted to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.megatron_ci import HARDWARE_BY_GPU, load_corpus, report_corpus
from tests.conftest import assert_one_error

DATA = Path(__file__).parent / "data" / "megatron_ci"
CORPUS = DATA / "corpus.json"
GIB = 2.0**30

# the GPT-2 vocabulary padded to a multiple of 128 x tp 1 (megatron_model.py [4][6])
V = 50304
H, S, MBS = 512, 1024, 4  # the CI's small GPT: --hidden-size 512, --seq-length 1024, --micro-batch-size 4
T = S * MBS  # tokens per micro-batch


@pytest.fixture(scope="module")
def report(megatron_ci_report):
    """report_corpus(CORPUS): conftest's megatron_ci_report, the same call, run once a session."""
    return megatron_ci_report


@pytest.fixture(scope="module")
def rows(report):
    return {r["row_id"]: r for r in report["rows"]}


def test_corpus_rows_and_tiers(report):
    data = load_corpus(CORPUS)
    assert len(data["rows"]) == 497 and data["source"]["commit"] == "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
    s = report["summary"]
    assert s["n_rows"] == 497
    assert s["rows_by_tier"] == {"A": 123, "B": 254, "C": 120}  # the corpus README's trust tiers, this half
    # every row is compared or skipped with its reason, never both, never neither
    assert all((r["error"] is None) != (r["skipped"] is None) for r in report["rows"])
    assert s["n_skipped"] + s["all"]["n"] == 497
    assert sum(st["n"] for st in s["by_tier"].values()) == s["all"]["n"]
    assert s["by_tier"]["A"]["n"] >= 90  # the GPT rows of tier A the reader expresses
    # every args file the corpus names is in the copy
    assert all((DATA / r["args_file"]).is_file() for r in data["rows"] if r["args_file"])
    assert set(HARDWARE_BY_GPU.values()) <= {p.stem for p in (Path(__file__).parents[1] / "hardware_db").glob("*.yaml")}


def test_skip_reasons(rows):
    def skip(rid):
        return rows[rid]["skipped"]

    assert skip("bert__bert_mcore_tp1_pp2__dev_dgx_a100").startswith("examples/bert/pretrain_bert.py: a BERT encoder")
    assert skip("t5__t5_11b_mcore_tp4_pp1__dev_dgx_a100").startswith("examples/t5/pretrain_t5.py: a T5 encoder-decoder")
    assert skip("gpt__gpt_static_inference_tp1_pp1_583m_logitsmatch__dev_dgx_h100") == "not a training row (inference)"
    assert skip("gpt__gpt3_15b_8t_release_sm__dev_dgx_h100") == "no argument file: GPU count unknown (no recipe match)"
    assert skip("hybrid__hybrid_mr_mcore_te_tp1_pp1_cp1_dgx_a100_1N8G__dev_dgx_a100").startswith("no measured peak")
    # 12 layers as 2 + 4 + 4 + 2 on pp 4 (--decoder-first/last-pipeline-num-layers 2/2): priced as Megatron places
    # them (the job's first_stage_layers / last_stage_layers, pipeline.py [14]), no longer skipped
    uneven = [rid for rid in rows if "_uneven_pipeline__" in rid]
    assert len(uneven) == 7 and [rid for rid in uneven if skip(rid)] == ["gpt__gpt3_mcore_te_tp1_pp4_vp1_uneven_pipeline__lts"]
    assert skip("gpt__gpt3_mcore_te_tp1_pp4_vp1_uneven_pipeline__lts") == "no argument file: GPU count unknown (no recipe match)"
    assert "distillation teacher" in skip("gpt__gpt3_mcore_te_tp2_pp1_modelopt_distill_resume__dev_dgx_gb200")


def test_hand_computed_unfused_row(rows):
    """TP1 PP1 DP8, the distributed optimizer, unfused attention (--attention-backend unfused),
    GPT-2 vocabulary: the 12-layer h-512 model of 64,109,568 parameters (embedding V h, learned
    positions s h, per layer 12h^2 + 13h with biases and two LayerNorms, final LayerNorm 2h),
    states 2 + 4 + 12/8 B a parameter, per layer and micro-batch 34 s b h (Korthikanti et al.
    2022 with dropout) + 5 a s^2 b (the stored softmax, its dropout mask and output), the
    final norm's saved input and the output layer's saved input (the norm's output), 2 s b h each,
    the logits 6 s b V (memory.py [5]), and the GEMM libraries' workspaces on an H100:
    PyTorch's cuBLAS 32 MiB for each of 2 threads and Transformer Engine's 32 MiB + 1 KiB
    (docs/megatron_ci_gap.md); and, with --no-gradient-accumulation-fusion, the largest linear's
    bf16 weight gradient during a layer's backward, the up-projection's 4h x h x 2 B (memory.py [uf])."""
    r = rows["gpt__gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files__dev_dgx_h100"]
    P = V * H + S * H + 12 * (12 * H * H + 13 * H) + 2 * H
    assert P == 64_109_568
    states = P * (2 + 4) + P * 12 / 8
    acts = 12 * T * (34 * H + 5 * 8 * S)
    logits = T * (2 * H + 2 * H + 6 * V)  # the final norm's saved input and output, the logits
    workspaces = (2 * 32 + 32) * 2**20 + 1024
    wgrad = 4 * H * H * 2
    assert r["predicted_bytes"] == pytest.approx(states + acts + logits + workspaces + wgrad, rel=1e-12) == 4_697_146_880
    assert r["measured_bytes"] == 4_702_430_720 and r["tier"] == "A" and r["mesh"] == "TP1 PP1 DP8 mbs4 gbs32"
    assert r["error"] == pytest.approx(4_697_146_880 / 4_702_430_720 - 1)
    assert any(a.startswith("vocab_size=50,304: GPT2BPETokenizer's 50,257 tokens") for a in r["assumed"])
    assert any(a.startswith("attention=eager: --attention-backend unfused") for a in r["assumed"])


def test_hand_computed_muon_rows(rows):
    """The MoE Muon rows (--optimizer muon, memory.py [mu]): 12 layers, h 512, 8 heads, --disable-bias-linear,
    LayerNorm, tied GPT-2 embeddings, learned positions (s 1,024), 8 experts of f 1,024 (GeLU: 2 h f each) on EP 8,
    TP1 PP1 DP8. Per GPU, Adam steps what Megatron's _is_muon_excluded routes to it (emerging_optimizers.py
    @d98e8a64 l. 140-147): the word embedding V h (is_embedding_or_output_parameter) and the 1-D norms, two LayerNorms
    a layer (4 h) and the final one (2 h); Muon the 2-D rest: the position table s h (untagged), a layer's QKV and
    output projections 4 h^2 and router 8 h, and the GPU's one expert a layer, 2 h f. Adam keeps 8 B (two fp32
    moments), Muon 4 B (its fp32 momentum_buffer, Emerging-Optimizers v0.3.0 orthogonalized_optimizer.py l. 145).
    Without --use-distributed-optimizer every rank holds every state; with it (the layer-wise optimizer) the dense
    states shard over dp 8 and the experts' over their data-parallel ranks, tp dp / ep = 1, and, with
    --no-use-layer-wise-param-layout (the job's optimizer_whole_tensors), the word embedding lands whole on one rank
    (layer_wise_optimizer.py _shard_params_ping_pong: 88 dense tensors sorted by size, the embedding the 88th, in
    the 16-slot loop 0..7, 7..0 slot 8: dp rank 7, the last rank, which Megatron logs): its 4 + 8 B an element
    there whole, 7 / 8 of them beyond the 1 / 8 share. The measured rows show it: the plain H100 row holds
    100,798,976 B (0.094 GiB) more than the dist one (GB200: 100,930,048 B), the planner 0.086 GiB (the last rank's
    other tensors priced at 1 / 8 of the rest); sharding the embedding too would have predicted 0.338 GiB."""
    adam = V * H + 12 * 4 * H + 2 * H
    muon_dense = S * H + 12 * (4 * H * H + 8 * H)
    muon_experts = 12 * 2 * H * 1024
    assert (adam, muon_dense, muon_experts) == (25_781_248, 13_156_352, 12_582_912)
    plain = rows["moe__gpt3_moe_mcore_te_ep8_resume_torch_dist_muon__dev_dgx_h100"]
    assert plain["mesh"] == "TP1 PP1 DP8 EP8 mbs4 gbs32" and plain["skipped"] is None
    assert plain["terms"]["adam"] == 8 * adam + 4 * (muon_dense + muon_experts) == 309_207_040
    assert plain["terms"]["master_weights"] == 4 * (adam + muon_dense + muon_experts)
    dist = rows["moe__gpt3_moe_mcore_te_ep8_resume_torch_dist_dist_muon__dev_dgx_h100"]
    emb = V * H  # whole on the last rank: 7 / 8 beyond its share
    assert dist["terms"]["adam"] == pytest.approx((8 * adam + 4 * muon_dense) / 8 + 4 * muon_experts + 8 * emb * 7 / 8,
                                                  rel=1e-12)
    assert dist["terms"]["master_weights"] == pytest.approx(4 * (adam + muon_dense) / 8 + 4 * muon_experts
                                                            + 4 * emb * 7 / 8, rel=1e-12)
    assert plain["measured_bytes"] - dist["measured_bytes"] == 100_798_976
    # the rest of the rank's memory is the same plan's: the two rows differ by their optimizer states only
    assert plain["predicted_bytes"] - dist["predicted_bytes"] == pytest.approx(
        sum(plain["terms"][k] - dist["terms"][k] for k in ("adam", "master_weights")), rel=1e-12)


def test_hand_computed_optimizer_instances_row(rows):
    """TP2 PP1 DP2 with the distributed optimizer and --num-distributed-optimizer-instances 2: the optimizer shards
    over dp / 2 = 1 rank (the job's shard_group 1, parallel_state.py @d98e8a64 l. 922-929), so each rank holds its
    states whole: 4 + 8 B a parameter, not 12 / 2. The GPU's parameters: the GPT-2 vocabulary padded to a multiple of
    128 x tp 2 (50,432 rows) / tp, the learned positions s h, per layer 12 h^2 / tp, the column-parallel biases
    (3 h + 4 h) / tp, the row-parallel ones 2 h and two LayerNorms 4 h whole, the final LayerNorm 2 h."""
    r = rows["gpt__gpt3_mcore_te_tp2_pp1_resume_torch_dist_multi_dist_optimizer_instances_1node__dev_dgx_gb200"]
    P = 50432 * H // 2 + S * H + 12 * (12 * H * H // 2 + 7 * H // 2 + 2 * H + 4 * H) + 2 * H
    assert P == 32_368_640 and r["skipped"] is None and r["tier"] == "A"
    assert (r["terms"]["weights"], r["terms"]["master_weights"], r["terms"]["adam"]) == (2 * P, 4 * P, 8 * P)


def test_hand_computed_last_pipeline_stage(rows):
    """TP1 PP4 DP2, no distributed optimizer, --disable-bias-linear, tied embeddings: the
    last stage holds 3 layers (12h^2 + 4h: two LayerNorms), the word-embedding copy of the
    tied output layer and the final norm, 18 B a parameter; one micro-batch in flight on the
    last 1F1B stage (34 s b h a layer, flash attention), the final norm's input and output
    (the output layer's saved input) and the logits; the up-projection's bf16
    weight gradient, 4h x h x 2 B (--no-gradient-accumulation-fusion, memory.py [uf]); and each layer's fused
    attention core's fp32 log-sum-exp, 4 B x 8 heads a token (planner/layers/attention.py [ls])."""
    r = rows["gpt__gpt3_mcore_te_tp1_pp4_resume_torch_dist_disable_bias_linear__dev_dgx_h100"]
    P = 3 * (12 * H * H + 4 * H) + V * H + 2 * H
    assert P == 35_200_000
    expected = 18 * P + 3 * 34 * T * H + T * (2 * H + 2 * H + 6 * V) + (2 * 32 + 32) * 2**20 + 1024  # + H100 workspaces
    expected += 4 * H * H * 2  # the unfused weight gradient
    expected += 3 * T * 4 * 8  # the attention cores' log-sum-exp
    assert r["predicted_bytes"] == expected == 2_195_323_904
    assert r["terms"]["weights"] == 2 * P and r["terms"]["output_activations"] == T * (2 * H + 2 * H + 6 * V)


def test_hand_computed_uneven_pipeline_row(rows):
    """TP1 PP4 DP2 with --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 2
    (Megatron-LM @d98e8a64 transformer_block.py get_num_layers_to_build l. 103-146: the first and the
    last rank 2 layers each, the 12 - 2 - 2 = 8 left over the 2 middle ranks, 4 each: 2, 4, 4, 2;
    the planner's own split would put 3 on every stage). The CI compares the last stage (the last
    global rank, planner/megatron_ci.py [1][2]): 2 layers with biases (12h^2 + 13h), the untied output
    layer (V h) and the final LayerNorm (2h), 18 B a parameter (no distributed optimizer); one
    micro-batch in flight on the last 1F1B stage, 34 s b h + 5 a s^2 b a layer (unfused attention: the
    stored softmax, its dropout mask and output); the final norm's input and output and the logits
    (6 s b V); the H100's workspaces (cuBLAS 2 x 32 MiB, TE 32 MiB + 1 KiB) and the up-projection's
    bf16 weight gradient (4h x h x 2 B, --no-gradient-accumulation-fusion). Measured 2,415,566,336 B:
    -0.53% (priced as the planner's 3 layers a stage, before: 2,698,496,000 B, +11.7%)."""
    r = rows["gpt__gpt3_mcore_te_tp1_pp4_vp1_uneven_pipeline__dev_dgx_h100"]
    P = 2 * (12 * H * H + 13 * H) + V * H + 2 * H
    assert P == 32_061_440
    acts = 2 * T * (34 * H + 5 * 8 * S)
    expected = 18 * P + acts + T * (2 * H + 2 * H + 6 * V) + (2 * 32 + 32) * 2**20 + 1024 + 4 * H * H * 2
    assert r["predicted_bytes"] == expected == 2_402_677_760
    assert r["mesh"] == "TP1 PP4 DP2 mbs4 gbs32" and r["tier"] == "A" and r["skipped"] is None
    assert r["error"] == pytest.approx(2_402_677_760 / 2_415_566_336 - 1)  # -0.53%
    # one layer fewer than the planner's even split's last stage: 12h^2 + 13h parameters at 18 B and one
    # layer-micro-batch of activations
    even = expected + 18 * (12 * H * H + 13 * H) + T * (34 * H + 5 * 8 * S)
    assert even == 2_698_496_000


def test_hand_computed_microbatch_group_row(rows):
    """TP1 PP4 DP2 with 1 layer a virtual stage (vpp 3), global batch 40 of micro-batch 4: m 5, with
    --microbatch-group-size-per-virtual-pipeline-stage 5 (refused before the planner read the flag:
    m % pp = 1). The last stage (s 3) warms up with 2(p - s - 1) + (v - 1) N = 10 forwards and runs
    one more before its first backward: chunks 0 and 1 hold the 5 micro-batches of the one group,
    the last chunk (the loss's) 1: 11 layer-micro-batches of 34 s b h + 5 a s^2 b (unfused
    attention); 3 layers with biases (12h^2 + 13h), the tied output layer's copy of the embedding
    and the final LayerNorm, 18 B a parameter (no distributed optimizer), the logits of one
    micro-batch, the H100's workspaces and the up-projection's bf16 weight gradient (4h x h x 2 B,
    --no-gradient-accumulation-fusion)."""
    r = rows["gpt__gpt3_mcore_te_tp1_pp4_vp1_tunable_overlap__dev_dgx_h100"]
    P = 3 * (12 * H * H + 13 * H) + V * H + 2 * H
    assert P == 35_213_824
    acts = (5 + 5 + 1) * T * (34 * H + 5 * 8 * S)
    expected = 18 * P + acts + T * (2 * H + 2 * H + 6 * V) + (2 * 32 + 32) * 2**20 + 1024 + 4 * H * H * 2
    assert r["predicted_bytes"] == expected == 4_611_098_624
    assert r["mesh"] == "TP1 PP4 DP2 v3 mbs4 gbs40" and r["tier"] == "A"
    assert r["error"] == pytest.approx(4_611_098_624 / 4_622_615_552 - 1)  # -0.25%


def test_native_fp8_rows_hold_fp8_weights_and_their_transposes(rows):
    """--fp8-param-gather with per-tensor current scaling (memory.py [11]), the CI's 12-layer
    h-512 GPT at TP4 CP2: each GPU holds 12 x 12 h^2 / 4 = 9,437,184 weight-matrix elements in
    fp8 (1 B instead of 2) and, on an H100 only (fp8 GEMMs TN only), their transposes (1 B).
    The measured end-of-step allocated bytes (after the optimizer step, no activation alive) of
    the H100 row exceed the GB200 row's by exactly those transposes, and on both rows what
    persists beside the priced states, transposes and GEMM workspaces is the same 2.25 MiB
    (priced as bf16 weights it would be negative)."""
    corpus = {r["row_id"]: r for r in load_corpus(CORPUS)["rows"]}
    case = "gpt__gpt3_weekly_mcore_tp4_cp2_current_scaling_native_fp8_tp_sp_cp_tp_overlap__dev_dgx_"
    elems = 12 * 12 * H * H // 4
    assert elems == 9_437_184
    h100, gb200 = rows[case + "h100"], rows[case + "gb200"]
    assert h100["terms"]["quantized_weights"] == elems and gb200["terms"]["quantized_weights"] == 0.0
    last = {g: corpus[case + g]["ground_truth"]["mem_allocated_bytes_last_step"] for g in ("h100", "gb200")}
    assert last["h100"] - last["gb200"] == elems
    persistent = ("weights", "gradients", "master_weights", "adam", "quantized_weights", "workspaces")
    left = {g: last[g] - sum(r["terms"][k] for k in persistent) for g, r in (("h100", h100), ("gb200", gb200))}
    assert left["h100"] == left["gb200"] and 0 < left["h100"] < 2.5 * 2**20
    assert left["h100"] - elems < 0  # the same rows with 2-byte weights


def test_local_rows_hold_the_global_memory_buffer_and_no_te_workspace(rows):
    """--transformer-impl local, fp16, TP1 PP1 DP8, the distributed optimizer (memory.py [12]):
    Megatron's global memory buffer holds the local attention's baddbmm input b a s s x 2 B =
    4 x 8 x 1024 x 1024 x 2 = 64 MiB, and no Transformer Engine GEMM runs (2 cuBLAS workspaces,
    64 MiB). The measured end-of-step allocated bytes beside the priced states, W and the buffer
    are the distributed optimizer's fp32 copies of the fp16 gradient shard (distrib_optimizer.py
    shard_main_param.grad = shard_model_grad.float(): the size of the fp32 master shard, alive
    from the step to the next zero_grad, not at the peak), to 0.02 MiB."""
    corpus = {r["row_id"]: r for r in load_corpus(CORPUS)["rows"]}
    rid = "gpt__gpt3_mcore_tp1_pp1_resume_torch_dist_dist_optimizer_overlap_grad_reduce_param_gather__dev_dgx_h100"
    t = rows[rid]["terms"]
    assert t["mpu_buffer"] == 4 * 8 * 1024 * 1024 * 2 and t["workspaces"] == 2 * 32 * 2**20
    last = corpus[rid]["ground_truth"]["mem_allocated_bytes_last_step"]
    beside = last - sum(t[k] for k in ("weights", "gradients", "master_weights", "adam", "workspaces", "mpu_buffer"))
    assert abs(beside - t["master_weights"]) < 0.02 * 2**20


def test_grouped_gemm_moe_rows_hold_te_multi_stream_workspaces(rows):
    """--moe-grouped-gemm with TE layers (memory.py [12]): TE's GroupedLinear asks
    get_cublas_workspace(grouped_gemm=True) for one 32 MiB + 1 KiB workspace per compute stream
    (4) beside the plain one. The TP4 ETP2 EP2 PP2 row (-15.3% before) holds W = 2 x 32 MiB +
    5 x (32 MiB + 1 KiB) = 224 MiB + 5 KiB; its end-of-step allocated bytes beside the priced
    states and W are 2.44 MiB on H100 and on GB200 (128 MiB without the grouped workspaces).
    The peak was under by 5.8% (H100) and 6.3% (GB200): -3.6% and -4.1% while the megatron stack
    counted the experts' outputs before the combine (24 MiB of this row's layer activations),
    which Megatron-Core does not keep (memory.py [14]); what the MoE layer's backward holds at the
    peak is not priced (docs/qwen3_pp_gap.md). With --no-bias-gelu-fusion (a GeLU MoE has no fused
    weighted activation) the routed experts' GeLU output is kept for the routing probabilities'
    gradient (memory.py [uf]): under by 3.4% (H100) and 4.0% (GB200); with the busiest EP rank's
    routed tokens of its aux-loss router (planner/imbalance.py: L = 1.106 at EP2 of 8 experts) by
    2.5% and 3.0%."""
    corpus = {r["row_id"]: r for r in load_corpus(CORPUS)["rows"]}
    case = "moe__gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_dist_optimizer__dev_dgx_"
    for gpu in ("h100", "gb200"):
        t = rows[case + gpu]["terms"]
        assert t["workspaces"] == 2 * 32 * 2**20 + 5 * (32 * 2**20 + 1024)
        last = corpus[case + gpu]["ground_truth"]["mem_allocated_bytes_last_step"]
        beside = last - sum(t[k] for k in ("weights", "gradients", "master_weights", "adam", "workspaces", "mpu_buffer"))
        assert 0 < beside < 2.5 * 2**20
        assert -0.035 < rows[case + gpu]["error"] < -0.02


def test_the_figure_is_explains_last_stage_allocated(rows):
    """The harness compares what `planner explain --format json` reports for the last stage:
    memory.stages.last.allocated_bytes when the memory model gives it, else the stage total
    less the reserve (and the megatron stack's zero allocator slack)."""
    from planner.cli.core import load_job
    from planner.explain import evaluate, to_json
    from planner.plan import resolve

    rid = "gpt__gpt3_mcore_te_tp1_pp4_resume_torch_dist_disable_bias_linear__dev_dgx_h100"
    job, _ = load_job(DATA / "args" / f"{rid}.args", {"gpus": 8, "hardware": "h100-sxm"}, "megatron")
    settings, plan, _ = resolve(job)
    res = to_json(settings, plan, evaluate(settings, plan))
    last = res["memory"]["stages"]["last"]
    want = last.get("allocated_bytes", last["total_bytes"] - job.reserve_GiB * GIB - res["memory"]["terms"]["allocator_slack"])
    assert res["memory"]["heaviest_stage"] == "last"
    assert rows[rid]["predicted_bytes"] == pytest.approx(want, rel=1e-12)


def test_accuracy_table(report, capsys):
    """The current accuracy (printed with -s): per tier n, median |error|, signed median, p90,
    worst under-prediction."""
    s = report["summary"]
    with capsys.disabled():
        print("\nMegatron CI corpus, last-stage peak allocated memory, predicted / measured - 1:")
        print(f"{'tier':5s}{'n':>5s}{'median|e|':>11s}{'signed':>9s}{'p90|e|':>9s}{'worst under':>13s}  row")
        for t, st in list(s["by_tier"].items()) + [("all", s["all"])]:
            if not st["n"]:
                continue
            wu = f"{100 * st['worst_under_error']:+.1f}%" if st["worst_under_error"] is not None else "-"
            print(f"{t:5s}{st['n']:5d}{100 * st['median_abs_error']:10.1f}%{100 * st['median_error']:+8.1f}%"
                  f"{100 * st['p90_abs_error']:8.1f}%{wu:>13s}  {st['worst_under'] or ''}")
        print(f"skipped {s['n_skipped']} of {s['n_rows']}: " + ", ".join(f"{k} {v}" for k, v in s["skipped_by_reason"].items()))
    for st in list(s["by_tier"].values()) + [s["all"]]:
        if st["n"]:
            assert 0 <= st["median_abs_error"] <= st["p90_abs_error"] and abs(st["median_error"]) <= st["p90_abs_error"]


def test_cli_validate_corpus(cli, tmp_path):
    ids = "gpt__gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files__dev_dgx_h100,bert__bert_mcore_tp1_pp2__dev_dgx_a100"
    r = cli("validate", CORPUS, "--ids", ids, "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    got = {x["row_id"]: x for x in data["rows"]}
    assert sorted(got) == sorted(ids.split(","))
    assert got[ids.split(",")[0]]["predicted_bytes"] == 4_697_146_880 and got[ids.split(",")[1]]["skipped"]
    assert data["summary"]["by_tier"]["A"]["n"] == 1
    r = cli("validate", CORPUS, "--tier", "A", "--ids", ids.split(",")[0])
    assert r.exit_code == 0, r.stderr
    assert "by memory trust tier" in r.stdout and "-0.1%" in r.stdout
    assert_one_error(cli("validate", CORPUS, "--tier", "D"), "--tier D")
    assert_one_error(cli("validate", CORPUS, "--group", "x"), "--group", "not of the Megatron CI corpus")
    assert_one_error(cli("validate", CORPUS, "--ids", "nope"), "no row 'nope'")
    bad = tmp_path / "other.json"
    bad.write_text('{"rows": [1, 2]}')
    assert_one_error(cli("validate", bad), "not a Megatron CI corpus")
    assert_one_error(cli("validate", Path(__file__).parent / "data" / "published_runs.yaml", "--tier", "A"), "--tier")


def test_defer_rows_hold_te_dummy_weight_gradients(rows):
    """The --defer-embedding-wgrad-compute rows are the corpus' only ones with gradient-accumulation
    fusion: Transformer Engine caches one bf16 dummy weight gradient per weight shape for the run
    (memory.py [dw]). TP2, h 512, GPT MLP 4h: QKV 3h x h / 2, projection h x h / 2, fc1 4h x h / 2,
    fc2 h x 4h / 2 (12 h^2 / 2 elements), and the output layer's (50,432 / 2) x h, the GPT-2
    vocabulary padded to a multiple of 128 x tp 2: 28,966,912 B on the last stage."""
    r = rows["gpt__gpt3_mcore_te_tp2_pp2_resume_torch_dist_defer_embedding_wgrad_compute__dev_dgx_h100"]
    assert r["terms"]["dummy_wgrads"] == 2 * (12 * H * H / 2 + 50432 / 2 * H) == 28_966_912
    fused_off = rows["gpt__gpt3_mcore_te_tp1_pp4_resume_torch_dist_disable_bias_linear__dev_dgx_h100"]
    assert fused_off["terms"]["dummy_wgrads"] == 0.0


def test_cublas_workspace_config_sizes_pytorchs_workspaces(rows):
    """PyTorch's cuBLAS workspace (memory.py [ws]): CublasHandlePool.cpp parseChosenWorkspaceSize sums
    SIZE KiB x COUNT over CUBLAS_WORKSPACE_CONFIG's ':SIZE:COUNT' pairs; its off-Hopper default
    ':4096:2:16:8' is 4096 x 1024 x 2 + 16 x 1024 x 8 = 8,519,680 B. The CI's A100 TE TP1 PP1 row
    runs with ':4096:8' in its ENV_VARS (the row's env): 2 threads x 32 MiB + TE's 4 MiB (sm 8.0)
    = 68 MiB, not the A100 default's 2 x 8.125 + 4 = 20.25 MiB; its end-of-step allocated bytes
    beside the priced states and those workspaces are 3,584 B (docs/megatron_ci_gap.md). A row
    whose case sets no CUBLAS_WORKSPACE_CONFIG keeps the GPU's default."""
    from planner.memory import cublas_workspace_bytes

    assert cublas_workspace_bytes(":4096:8") == 33_554_432
    assert cublas_workspace_bytes(":4096:2:16:8") == 8_519_680 == 8.125 * 2**20
    corpus = {r["row_id"]: r for r in load_corpus(CORPUS)["rows"]}
    rid = "gpt__gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files__lts_dgx_a100"
    assert corpus[rid]["env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    t = rows[rid]["terms"]
    assert t["workspaces"] == 2 * 32 * 2**20 + 4 * 2**20
    last = corpus[rid]["ground_truth"]["mem_allocated_bytes_last_step"]
    assert last - sum(t[k] for k in ("weights", "gradients", "master_weights", "adam", "workspaces")) == 3584
    # no CUBLAS_WORKSPACE_CONFIG in the case (non-deterministic): the GPU's default, A100 8.125 MiB
    rid = "gpt__gpt3_mcore_te_tp2_pp2_cp2_etp4_nondeterministic_dp_last__lts_dgx_a100"
    assert corpus[rid]["env"]["CUBLAS_WORKSPACE_CONFIG"] is None
    assert rows[rid]["terms"]["workspaces"] == 2 * 8_519_680 + 4 * 2**20


def test_deterministic_rows_carry_their_cases_workspace():
    """Every deterministic corpus row with an argument file was recorded before 3ab71eeb3e (2026-07-08), when
    Megatron-LM set no CUBLAS_WORKSPACE_CONFIG itself (plan._cublas_workspace prices none then): its value is the
    case's ENV_VARS at the recording commit, :4096:8 for all of them (scripts/megatron_ci_env.py), so none is priced
    at a GPU default that PyTorch's deterministic algorithms would have refused. 176 rows' cases were renamed since
    and are found by their golden file's blob at the recording commit: 137 deterministic (131 A100, 6 H100), and of
    the 39 others 10 with :4096:8, 29 with none."""
    rows = [r for r in load_corpus(CORPUS)["rows"] if r.get("args_file")]
    det = [r for r in rows if "--deterministic-mode" in (DATA / r["args_file"]).read_text().split()]
    early = [r for r in det if r["source"]["golden_recording_commit_date"][:10] < "2026-07-08"]
    assert {(r.get("env") or {}).get("CUBLAS_WORKSPACE_CONFIG") for r in early} == {":4096:8"}
    found = [r for r in rows if "found_by" in (r.get("env") or {})]
    assert len(found) == 176 and sum(r in det for r in found) == 137
    assert sorted(str(r["env"]["CUBLAS_WORKSPACE_CONFIG"]) for r in found if r not in det) == [":4096:8"] * 10 + ["None"] * 29


def test_reference_corpus_env_is_the_ci_environment_name(tmp_path):
    """The project's reference corpus (the file this copy was trimmed from) has `env` as the CI
    environment's name, "dev" or "lts" (golden_values_{env}_{platform}.json), where this copy has
    scripts/megatron_ci_env.py's ENV_VARS mapping. `planner validate` reads the reference file as it
    is: a name carries no ENV_VARS, so the row is priced as one whose case sets none (it raised an
    AttributeError traceback before). Both rows get the A100 default, 2 x 8.125 MiB + 4 MiB, as with
    `env` null: the non-deterministic one by its case; the deterministic one (recorded 2026-04-14, its
    trainer_date) because Megatron-LM sets CUBLAS_WORKSPACE_CONFIG :4096:8 itself only from 3ab71eeb3e,
    2026-07-08 (stack runs.deterministic_cublas_workspace since; plan._cublas_workspace), and the name
    carries no launcher's value: the line says PyTorch needed one (this copy's env holds the case's
    :4096:8: 2 x 32 MiB + 4 MiB, test_cublas_workspace_config_sizes_pytorchs_workspaces)."""
    ids = ("gpt__gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files__lts_dgx_a100",
           "gpt__gpt3_mcore_te_tp2_pp2_cp2_etp4_nondeterministic_dp_last__lts_dgx_a100")
    data = load_corpus(CORPUS)
    keep = [dict(r, env="lts") for r in data["rows"] if r["row_id"] in ids]
    (tmp_path / "args").mkdir()
    for r in keep:
        (tmp_path / r["args_file"]).write_text((DATA / r["args_file"]).read_text())
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(dict(data, rows=keep)))
    got = {r["row_id"]: r for r in report_corpus(path)["rows"]}
    assert got[ids[0]]["skipped"] is None and got[ids[1]]["skipped"] is None
    assert got[ids[0]]["terms"]["workspaces"] == got[ids[1]]["terms"]["workspaces"] == 2 * 8_519_680 + 4 * 2**20
    assert [a[:62] for a in got[ids[0]]["assumed"] if a.startswith("cublas_workspace_config")] == [
        "cublas_workspace_config unset: deterministic_mode on a trainer"]
    assert not any(a.startswith("cublas_workspace_config") for a in got[ids[1]]["assumed"])
    assert not any("CUBLAS_WORKSPACE_CONFIG in the case's ENV_VARS" in a for r in got.values() for a in r["assumed"])


def test_nccl_environment_of_ci_rows(rows):
    """The rows' NCCL_ALGO / NCCL_PROTO (megatron_ci.nccl_env; scripts/megatron_ci_env.py): the case's ENV_VARS win over
    what the CI's training script exports first, which it does from ef1888bc5c (2026-04-20: _run_training.sh
    `export NCCL_PROTO="${NCCL_PROTO:-simple}"`, NCCL_ALGO Ring, NCCL_NVLS_ENABLE 0; l. 42-45 there, l. 58-61 at
    d98e8a64); between 4e85d74ae9 and it only the GitHub launcher set them (unknown: NCCL's default); a Tree the model
    refuses for all-gather is left out. Counts over the 404 rows with an argument file: 191 with the case's
    NCCL_ALGO Ring alone (43 of them in the launcher-unknown window) and 17 with ^NVLS alone, 2 with ^NVLS and the
    case's NCCL_NVLS_ENABLE 0, 120 + 10 with the launcher's NCCL_PROTO simple and NCCL_NVLS_ENABLE 0 too, 12 Tree rows
    not priced, 52 with neither (21 in the window)."""
    import collections

    from planner.megatron_ci import nccl_env

    corpus = {r["row_id"]: r for r in load_corpus(CORPUS)["rows"] if r.get("args_file")}
    kinds = collections.Counter()
    for r in corpus.values():
        fields, notes = nccl_env(r)
        kinds[(tuple(sorted(fields.items())), any(" not priced (NCCL's own choice" in n for n in notes))] += 1
    nv = ("nccl_nvls_enable", 0)
    assert len(corpus) == 404 and kinds == {
        ((("nccl_algo", "Ring"),), False): 191, ((("nccl_algo", "Ring"), nv, ("nccl_proto", "simple")), False): 120,
        ((("nccl_algo", "^NVLS"),), False): 17, ((("nccl_algo", "^NVLS"), nv), False): 2,
        ((("nccl_algo", "^NVLS"), nv, ("nccl_proto", "simple")), False): 10, ((), True): 12, ((), False): 52}
    # recorded after ef1888bc5c, case NCCL_ALGO Ring: the launcher's NCCL_PROTO simple and NCCL_NVLS_ENABLE 0 (its
    # source line named)
    rid = "bert__bert_mcore_tp1_pp2__dev_dgx_h100"
    assert nccl_env(corpus[rid])[0] == {"nccl_algo": "Ring", "nccl_proto": "simple", "nccl_nvls_enable": 0}
    assert corpus[rid]["env"]["launcher"]["source"].endswith("tests/functional_tests/shell_test_utils/_run_training.sh l. 42-45")
    # recorded at 4e85d74ae9 (the GitHub launcher's window): the case's Ring, NCCL's default protocol, a note says why
    rid = "gpt__gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files__lts_dgx_a100"
    fields, notes = nccl_env(corpus[rid])
    assert fields == {"nccl_algo": "Ring"} and corpus[rid]["source"]["golden_recording_commit"].startswith("4e85d74ae9")
    assert any(n.startswith("NCCL's default where the case sets no NCCL_ALGO / NCCL_PROTO") for n in notes)
    # NCCL_ALGO=Tree: the model refuses it (all-gather left no algorithm), so NCCL's own choice, and the row is
    # still compared (memory does not depend on it)
    rid = "gpt__gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer_no_mmap_bin_files__lts_dgx_a100"
    assert corpus[rid]["env"]["NCCL_ALGO"] == "Tree" and nccl_env(corpus[rid])[0] == {}
    assert rows[rid]["skipped"] is None
    assert any(a.startswith("NCCL_ALGO=Tree in the case's ENV_VARS") for a in rows[rid]["assumed"])
    # a compared H100 row recorded at 5fe3f06658 (after ef1888bc5c): the plan prices ring alone, Simple alone, for the
    # all-reduce, reduce-scatter and all-gather (comm codes RING 0, SIMPLE 2); without the environment NCCL's choice
    from planner.megatron_ci import CIRow, resolve_row

    rid = "gpt__gpt3_mcore_te_tp4_pp1_resume_torch_dist_dist_optimizer_overlap_grad_reduce_param_gather__dev_dgx_h100"
    assert rows[rid]["skipped"] is None
    assert [a[:60] for a in rows[rid]["assumed"] if a.startswith(("nccl_algo=", "nccl_proto="))] == [
        "nccl_algo=Ring: NCCL_ALGO in the case's ENV_VARS (5fe3f06658",
        "nccl_proto=simple: NCCL_PROTO exported by the CI's training "]
    for nccl, algos, protos in ((True, ((0,),) * 3, ((2,),) * 3), (False, None, None)):
        settings, _ = resolve_row(corpus[rid], DATA, CIRow(rid), nccl=nccl)
        assert (settings.nccl_algos and settings.nccl_algos[:3], settings.nccl_protos and settings.nccl_protos[:3]) == (
            algos, protos)


MFSDP_ROWS = ["gpt__gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor_1node__dev_dgx_gb200"] + [
    "moe__gpt3_mcore_te_tp2_zp_z3_resume_torch_dist_te_8experts2parallel_top2router__" + p
    for p in ("dev_dgx_a100", "dev_dgx_gb200", "dev_dgx_h100", "dev_dgx_h100_2nd", "lts_dgx_a100")]


def test_megatron_fsdp_rows_are_compared(report, rows):
    """The six --use-megatron-fsdp (optim_grads_params) rows with a measured peak are priced from Megatron-FSDP's own
    buffers (trainers/megatron.py _megatron_fsdp_buffers; the seventh has no mem-max-allocated-bytes series): none
    is skipped, each names the mode in its assumed list; 'not modelled' skips 23 -> 17."""
    for rid in MFSDP_ROWS:
        r = rows[rid]
        assert r["skipped"] is None and r["error"] is not None, rid
        assert any(a.startswith("sharding_mode=megatron_fsdp_optim_grads_params: --use-megatron-fsdp "
                                "(optim_grads_params) priced from Megatron-FSDP's own buffers") for a in r["assumed"])
    # 23 "not modelled" before this session: 6 Megatron-FSDP rows (here), 7 Muon and 1 optimizer-instances row
    # (tests/test_muon.py, test_optimizer_instances.py) and 6 uneven-split rows (test_uneven_pipeline.py) now compared
    assert report["summary"]["skipped_by_reason"]["not modelled"] == 3


def test_hand_computed_megatron_fsdp_buffers(rows):
    """gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor_1node on 4 GB200: TP 2, DP 2, --use-megatron-fsdp
    --data-parallel-sharding-strategy optim_grads_params, --megatron-fsdp-main-params-dtype fp32,
    --megatron-fsdp-main-grads-dtype fp32, --megatron-fsdp-grad-comm-dtype fp32, --bf16, tied embeddings, LayerNorm,
    linear biases. NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/:
    the TP-local parameters: the word embedding V/t x h with V = 50,257 padded to 128 x tp 2 = 50,432, so 25,216 x 512
    = 12,910,592; the learned positions 1,024 x 512 = 524,288; a layer (3h x h + h x h + 4h x h + h x 4h) / 2 = 1,572,864
    weights, biases 3h/2 + h + 4h/2 + h = 2,816 (the row-parallel biases whole), two LayerNorms 4h = 2,048: 1,577,728;
    the final LayerNorm 1,024: P = 12,910,592 + 524,288 + 12 x 1,577,728 + 1,024 = 32,368,640.
    param_and_grad_buffer.py _init_each_parameter_group_buffers (l. 2324-3127) at optim_grads_params
    (l. 2342-2345: all three distributed) over the DP group of 2:
    - model weight buffer (l. 2653-2667, bf16) shard: 2 B x P / 2 = 32,368,640 B (weights);
    - main weight buffer (l. 2688-2706, fp32) shard: 4 B x P / 2 = 64,737,280 B (master_weights);
    - main gradient buffer (l. 2708-2731, fp32 by --megatron-fsdp-main-grads-dtype) shard: 64,737,280 B (gradients);
    - Adam's exp_avg and exp_avg_sq over the main weight shards: 8 B x P / 2 = 129,474,560 B (adam);
    - the non-unit buckets (embedding, positions, final norm: outside TransformerLayer, mcore_fsdp_adapter.py
      l. 163-173), all-gathered by their module's pre-forward hook and never released (memory.py [nu]):
      2 B x (12,910,592 + 524,288 + 1,024) = 26,871,808 B (fsdp_unsharded_ends);
    - the layer units' gathered bf16 buckets at the backward's peak, the current unit and the prefetched ones
      ([pf]: suggested_AG_prefetch_size = max(1e9, 2 x the average unit) // 2 = 5e8 parameters, ceil(5e8 / u) above
      the 11 other layers: all prefetched): 12 x 1,577,728 x 2 B = 37,865,472 B (fsdp_gathered_units);
    - one unit's unsharded fp32 gradient bucket (main_grad_getter l. 3094-3117, the largest unit, the embedding's:
      [mg] fsdp_unit_grads): 4 B x 12,910,592 = 51,642,368 B; the reduce-scatter queue's excess ([rs]: at most
      min(k + 2, 12) layer buckets, 4 B x 1,577,728 each, less the freed activations) minus that is below 0:
      zero2_reduce_input 0;
    - no fp32 gradient copy at the step (the main gradients are fp32: .to(fp32) is the tensor itself,
      update_main_grads l. 3377-3381): step_grad_copies 0;
    - with --no-gradient-accumulation-fusion, the largest linear's bf16 autograd weight gradient during a layer's
      backward, until the parameter's post-accumulate-grad hook copies it into the bucket and deletes it
      (megatron_fsdp.py l. 1132-1143, _grad_acc l. 635-680; memory.py [uf], in the recompute buffer term, which is
      otherwise 0 without recompute): fc1's 4h x h / 2 x 2 B = 1,048,576 B (0 before: priced as FSDP2's path)."""
    t = rows[MFSDP_ROWS[0]]["terms"]
    layer = (3 * H * H + H * H + 4 * H * H + H * 4 * H) // 2 + (3 * H // 2 + H + 4 * H // 2 + H) + 4 * H
    assert layer == 1_577_728
    E = 50_432 // 2 * H
    P = E + S * H + 12 * layer + 2 * H
    assert P == 32_368_640
    assert t["weights"] == 2 * P / 2 == 32_368_640
    assert t["master_weights"] == t["gradients"] == 4 * P / 2 == 64_737_280
    assert t["adam"] == 8 * P / 2 == 129_474_560
    assert t["fsdp_unsharded_ends"] == 2 * (E + S * H + 2 * H) == 26_871_808
    assert t["fsdp_gathered_units"] == 12 * layer * 2 == 37_865_472
    assert t["fsdp_unit_grads"] == 4 * E == 51_642_368
    assert t["zero2_reduce_input"] == 0 and t["step_grad_copies"] == 0
    assert t["recompute_buffer"] == 4 * H * H // 2 * 2 == 1_048_576
    # the MoE twin (8 experts, ep 2, etp 2, --moe-grouped-gemm: TE's GroupedLinear returns its 4 local experts' weight
    # gradients at once): 4 x 4h x h / 2 x 2 B
    assert rows[MFSDP_ROWS[1]]["terms"]["recompute_buffer"] == 4 * (4 * H * H // 2) * 2 == 4_194_304
