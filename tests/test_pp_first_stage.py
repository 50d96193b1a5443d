"""The pipeline's critical stage is the heaviest of the first, a middle and the last (issue 22):
the first stage may hold more than a middle one (Megatron-LM --decoder-first-pipeline-num-layers,
job field first_stage_layers; an fp8 plan's bf16 first layers); DualPipe on 2 stages pairs both
stages on each rank; full recompute's layer cap (--recompute-num-layers) counted over every stage.

Llama 3 8B (model_zoo/llama3-8b.yaml: 32 layers, h 4,096, 32 heads of 128 with 8 KV heads, FFN
14,336 gated, vocab 128,256), one layer kind: a stage's compute is its layer count x one layer's
forward + backward (step.compute_time), the last stage's plus the head (output layer and loss).
GEMM MACs a token: a layer 4,096 x (4,096 + 2 x 1,024) + 4,096 x 4,096 + 3 x 4,096 x 14,336 =
25,165,824 + 16,777,216 + 176,160,768 = 218,103,808; the output layer 4,096 x 128,256 =
525,336,576 = 2.41 layers (priced with the loss and the layer's attention core: 2.58 layers in
bf16, 3.26 fp8 layers, the head staying bf16).
"""
from __future__ import annotations

import numpy as np
import pytest

from planner import step
from planner.explain import evaluate, to_json
from planner.memory import recompute_fraction
from planner.pipeline import SPLIT_BISECTION, SPLIT_FRONT, chunk_layers, stage_layer_table
from planner.plan import resolve
from planner.schema import Job

LLAMA = dict(model="llama3-8b", gpus=32, tp=2, pp=4, sharding="zero1", micro_batch=1, global_batch=64,
             stack="megatron")


def _pass(**kw):
    s, p, _ = resolve(Job(**kw))
    return (s, p) + step._compute_pass(s, p)


def _layer(lt, k=0):
    """One layer of kind k: forward + backward + what selective recompute re-runs (step.compute_time's base)."""
    return lt.fwd[k] + lt.bwd[k] + lt.sel[k]


def test_first_stage_heavier_than_the_middle_is_critical():
    """--decoder-first-pipeline-num-layers 11 --decoder-last-pipeline-num-layers 7 on 4 stages (Megatron-LM
    @d98e8a64 transformer_block.py get_num_layers_to_build l. 103-146): stage 0 holds 11 layers, the two middle
    stages (32 - 11 - 7) / 2 = 7 each, the last 7 and the head. Per micro-batch: first 11 t, middle 7 t, last
    7 t + head = 7 t + 2.58 t = 9.58 t (2.41 layers of GEMM MACs, module docstring), so the pipeline runs at the
    first stage's 11 t (it priced max(7 t, 9.58 t) before: 13% under). The step's compute is m = 64 / 4 = 16
    such micro-batches (dense: no MoE terms)."""
    s, p, sc, lt, comp = _pass(**LLAMA, first_stage_layers=11, last_stage_layers=7)
    assert {k: int(v) for k, v in sc.n.items()} == {"first": 11, "mid": 7, "last": 7}
    t = _layer(lt)
    assert 2.4 < comp.logits / t < 2.7 and 7 * t + comp.logits < 11 * t
    assert comp.mb == pytest.approx(11 * t, rel=1e-12)
    d = to_json(s, p, evaluate(s, p))
    assert int(p.microbatches) == 16
    assert d["time"]["compute_s"] == pytest.approx(16 * 11 * t, rel=1e-12)
    # the even split (8 a stage): the last stage, 8 t + the head, as before
    _, _, _, lt8, even = _pass(**LLAMA)
    assert even.mb == pytest.approx(8 * _layer(lt8) + even.logits, rel=1e-12)


def test_first_stage_with_its_bf16_layers():
    """fp8 (tensorwise) with --first-last-layers-bf16 --num-layers-at-start-in-bf16 2 (Megatron-Core
    transformer_config.py @d98e8a64 first_last_layers_bf16: layers 0 and 1 outside the fp8 autocast), 11 / 7 / 7 /
    7 layers as above: stage 0 runs 9 fp8 layers and 2 bf16 ones, 9 t8 + 2 t16 (t16 = the bf16 plan's layer, 1.27
    t8 here); the last 7 t8 + the bf16 head (3.26 t8) = 10.26 t8 < 11.53 t8. The first stage is the critical one;
    before, it was priced as a middle stage plus its bf16 layers, 7 t8 + 2 (t16 - t8), under the last."""
    fp8 = dict(LLAMA, precision="fp8", fp8_recipe="tensorwise", first_stage_layers=11, last_stage_layers=7)
    _, _, _, lt, comp = _pass(**fp8, bf16_layers_at_start=2)
    _, _, _, lt16, _ = _pass(**LLAMA, first_stage_layers=11, last_stage_layers=7)
    t8, t16 = _layer(lt), _layer(lt16)
    assert 1.2 < t16 / t8 < 1.35 and 7 * t8 + comp.logits < 9 * t8 + 2 * t16
    assert comp.mb == pytest.approx(9 * t8 + 2 * t16, rel=1e-12)


def test_dualpipe_on_two_stages_pairs_both_stages_on_each_rank():
    """DualPipe on pp 2, DeepSeek's stack (stack_db/deepseek.yaml), DeepSeek-V2-Lite (27 layers: layer 0 dense,
    FFN 10,944; 26 MoE, 6 of 64 routed experts of 1,408 and 2 shared; MLA, 16 heads; vocab 102,400): 27 layers on
    2 stages, ceil(27 / 2) = 14 a stage, the slack 1 off the first (pipeline.stage_layers): stage 0 = the
    embedding + 1 dense + 12 MoE layers, stage 1 = 14 MoE layers + the head. GEMM MACs a token: MLA 2,048 x 3,072
    (q) + 2,048 x 576 (kv down) + 512 x 4,096 (kv up) + 2,048 x 2,048 (out) = 13,762,560; the dense MLP 3 x 2,048
    x 10,944 = 67,239,936; the MoE MLP 8 x 3 x 2,048 x 1,408 + 2,048 x 64 = 69,337,088; the head 2,048 x 102,400 =
    209,715,200 = 2.52 MoE layers (priced: 2.88, with the loss). Under 1F1B the last stage (14 + 2.9 layer-times)
    would set the pace. DualPipe (deepseek-ai/DualPipe @3da1bbe examples/example_dualpipe.py l. 138: rank r holds
    full_modules[r] and full_modules[pp - 1 - r]; l. 145-150: the first rank feeds the first half of the inputs,
    the last rank the second half in the reverse direction) gives rank 0 stage 0 of the forward direction and
    stage 1 of the reverse one, rank 1 the mirror: each rank runs m / 2 micro-batches through each stage, m (s0 +
    s1) / 2 in all, so the step's micro-batch is (t_dense + 12 t_moe + 14 t_moe + head) / 2 on both ranks, its
    MoE permutations (12 + 14) / 2 = 13 MoE layers'. m = 64 / 8 = 8 (dualpipe.py l. 332-333: pp even, m even and
    >= 2 pp). Bubble (Table 2, README): (pp / 2 - 1)(F&B + B - 3W) = 0 on 2 stages."""
    job = dict(model="deepseek-v2-lite", gpus=16, hardware="h800-sxm", tp=1, pp=2, dp=8, ep=8, micro_batch=1,
               global_batch=64, seq_len=4096, sharding="zero1", precision="fp8", stack="deepseek",
               recompute="selective")
    s, p, sc, lt, comp = _pass(**job)
    assert p.schedule == 4 and int(p.microbatches) == 8 and s.bf16_layers == (0, 0) and sc.ll.mtp == 0
    assert {k: int(v) for k, v in sc.n.items()} == {"first": 13, "mid": 14, "last": 14}
    assert sc.counts["first"].tolist() == [1, 12] and sc.counts["last"].tolist() == [0, 14]
    t_dense, t_moe = _layer(lt, 0), _layer(lt, 1)
    perm_moe = lt.perm_fwd[1] + lt.perm_bwd[1]
    assert lt.perm_fwd[0] + lt.perm_bwd[0] == 0.0 and 2.7 < comp.logits / t_moe < 3.0
    s0, s1 = t_dense + 12 * t_moe, 14 * t_moe + comp.logits
    assert comp.mb == pytest.approx(0.5 * (s0 + s1), rel=1e-12)
    assert comp.mb < s1  # the pair is lighter than the last stage alone (1F1B's pace)
    assert comp.perm == pytest.approx(13 * perm_moe, rel=1e-12)
    t = to_json(s, p, evaluate(s, p))["time"]
    assert t["bubble_s"] == 0.0
    assert t["compute_s"] == pytest.approx(8 * (comp.mb - comp.perm), rel=1e-12)
    assert t["moe_permute_s"] == pytest.approx(8 * 13 * perm_moe, rel=1e-12)


def test_stage_layer_table_matches_the_chunks():
    """stage_layer_table sums chunk_layers' chunks per stage (chunk j on stage j mod pp) for every rule:
    trim_ends 32 on 4 x vpp 2 (8 chunks of 4): 8 each; 126 + 2 ends on 16 x 8: 7, 8 x 14, 7; the front rule 9
    on 4: 3, 2, 2, 2; bisection (DeepSpeed a12aaedc) 10 on 4: 3, 3, 3, 1; Megatron's uneven 11 / 7 on 4: 11, 7,
    7, 7; and 0 past a plan's pp in a vectorized call."""
    cases = [((32, 4, 2), {}), ((126, 16, 8, 1, 1), {}), ((9, 4, 1), {"split_front": SPLIT_FRONT}),
             ((10, 4, 1), {"split_front": SPLIT_BISECTION}), ((27, 2, 1), {}), ((61, 16, 1), {})]
    for args, kw in cases:
        L, p, v = args[:3]
        e, l_ = (args[3], args[4]) if len(args) > 3 else (0, 0)
        ch = chunk_layers(L, p, v, e, l_, kw.get("split_front", 0))
        want = [sum(ch[j] for j in range(s, p * v, p)) for s in range(p)]
        assert stage_layer_table(L, p, v, e, l_, **kw).tolist() == want, args
    assert stage_layer_table(126, 16, 8, 1, 1).tolist() == [7] + [8] * 14 + [7]
    assert stage_layer_table(9, 4, 1, split_front=SPLIT_FRONT).tolist() == [3, 2, 2, 2]
    assert stage_layer_table(10, 4, 1, split_front=SPLIT_BISECTION).tolist() == [3, 3, 3, 1]
    assert stage_layer_table(32, 4, 1, first=11, last=7).tolist() == [11, 7, 7, 7]
    got = stage_layer_table(32, np.array([1, 2, 4]), np.array([1, 2, 1]))
    assert got.tolist() == [[32, 0, 0, 0], [16, 16, 0, 0], [8, 8, 8, 8]]


@pytest.mark.parametrize("split, cap, share", [
    # 11 / 7 / 7 / 7, 8 a stage: 8 + 7 + 7 + 7 = 29 of 32 (a middle stage's share was 7 / 7 = 1)
    (dict(pp=4, first_stage_layers=11, last_stage_layers=7), 8, 29 / 32),
    # pp 2, 14 / 18: 8 + 8 = 16 of 32 (stage 1's share was 8 / 18)
    (dict(pp=2, first_stage_layers=14, last_stage_layers=18), 8, 16 / 32),
    # even 8 / 8 / 8 / 8, 2 a stage: 8 of 32
    (dict(pp=4), 2, 8 / 32),
    # no cap: every layer
    (dict(pp=4, first_stage_layers=11, last_stage_layers=7), None, 1.0),
])
def test_recompute_fraction_counts_every_stage(split, cap, share):
    """Megatron-LM's block method re-runs the first --recompute-num-layers n layers of each model chunk
    (megatron/core/recompute.py @d98e8a64 l. 167-181, over the chunk's own len(self.layers), transformer_block.py
    l. 334), so stage k re-runs min(s_k, n) of its s_k layers (vpp 1) and the model min(s_k, n) summed over the
    stages: the share the recomputation's FLOPs per token scale by (explain's flops, HFU), against full
    recompute's (no cap)."""
    job = dict(LLAMA, recompute="full", recompute_layers=cap, **split)
    s, p, _ = resolve(Job(**job))
    assert float(recompute_fraction(s, p)) == pytest.approx(share, rel=1e-15)
    flops = to_json(s, p, evaluate(s, p))["flops"]["recompute_flops_per_token"]
    s1, p1, _ = resolve(Job(**dict(job, recompute_layers=None)))
    full = to_json(s1, p1, evaluate(s1, p1))["flops"]["recompute_flops_per_token"]
    assert flops == pytest.approx(share * full, rel=1e-12)
