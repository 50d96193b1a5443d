"""The step's end is one stage's own work, not each term's largest stage (issue 22 critstage3; step.step_end_stage).

Megatron-LM @d98e8a64: after its schedule each stage finishes its own DP gradient sync and all-reduces its own
SP-partial gradients over its TP group (megatron/core/distributed/finalize_model_grads.py l. 637-677); the optimizer
step then all-reduces the gradient norm over every stage (megatron/core/optimizer/clip_grads.py get_grad_norm_fp32
l. 127-134, the grad-stats group: optimizer.py l. 322-339), the one wait across stages, and only then steps the
stage's own parameters. So the step holds the largest of the stages' (DP exposed + SP all-reduce) and, after the
norm, the largest of the stages' optimizer steps: each one stage's whole work. Before, the DP traffic was the stage
with the most dense parameters', the SP all-reduce the stage with the most replicated parameters' (two stages, an
upper bound), and the optimizer the larger END stage's (a middle stage with more parameters left out)."""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner.plan import resolve
from planner.schema import Job
from planner.step import (CRITICAL_STAGES, Collectives, _compute_pass, dp_comm, sp_partial_stages, step_time)

# Llama 3 8B (32 layers, h 4,096, 8 KV heads of 128, FFN 14,336, vocabulary 128,256, untied) at tp 2 with SP, zero1
# over dp 2, on H100 SXM, the megatron preset's fp32 main gradients and Adam states (bytes_per_param 2 / 4 / 4 / 8)
BASE = dict(model="llama3-8b", tp=2, micro_batch=1, global_batch=32, seq_len=4096, sharding="zero1", stack="megatron",
            hardware="h100-sxm")
# one layer's parameters a GPU at tp 2: (q 4,096 x 4,096 + k, v 4,096 x 1,024 each + o 4,096 x 4,096 + gate, up, down
# 3 x 4,096 x 14,336) / 2 = 109,051,904, + its two RMSNorms whole (2 x 4,096) = 109,060,096
LAYER = (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336) // 2 + 2 * 4096
EMB = 128256 * 4096 // 2  # the input embedding's (and the output layer's) vocabulary-parallel shard: 262,668,288


def _parts(**job):
    s, p, _ = resolve(Job(**{**BASE, **job}))
    sc, _, comp = _compute_pass(s, p)
    return s, p, sc, Collectives(sc), comp


def test_sp_all_reduce_is_the_dp_stages_own():
    """pp 5 split 6 / 8 / 8 / 8 / 2 (Megatron --decoder-first-pipeline-num-layers 6 --decoder-last-... 2): the first
    stage holds the most dense parameters, 262,668,288 + 6 x 109,060,096 = 917,028,864 (a middle one 8 x 109,060,096 =
    872,480,768, the last 2 layers + the output layer + the final norm 480,792,576), a middle stage the most
    SP-partial ones (8 layers x 2 norms x 4,096 = 65,536; the first 6 x 8,192 = 49,152; the last 2 x 8,192 + 4,096 =
    20,480). The step ends after the first stage: its DP exposure plus its own SP all-reduce, 49,152 fp32 gradients =
    196,608 B over the 2 TP ranks, not the middle stage's 262,144 B beside the first stage's DP traffic."""
    s, p, sc, coll, comp = _parts(gpus=20, pp=5, first_stage_layers=6, last_stage_layers=2)
    assert {k: int(v) for k, v in sc.n.items()} == {"first": 6, "mid": 8, "last": 2} and s.bpp.gradients == 4.0
    assert LAYER == 109_060_096 and EMB == 262_668_288
    dp = dp_comm(sc, coll, comp)
    first, mid, last = CRITICAL_STAGES.index("first"), CRITICAL_STAGES.index("mid"), CRITICAL_STAGES.index("last")
    assert float(dp.p_local[first]) == EMB + 6 * LAYER == 917_028_864
    assert float(dp.p_local[mid]) == 8 * LAYER == 872_480_768
    assert float(dp.p_local[last]) == 2 * LAYER + EMB + 4096 == 480_792_576
    sp = [float(x) for x in sp_partial_stages(sc)]
    assert sp[mid] == 8 * 2 * 4096 == 65_536 and sp[first] == 6 * 2 * 4096 == 49_152 and sp[last] == 20_480
    t, extra = step_time(s, p)
    ar = {n: float(coll(comm.ALL_REDUCE, np.float64(n * 4.0), np.asarray(2), coll.strides["tp"])) for n in (49_152, 65_536)}
    assert ar[65_536] > ar[49_152] > 0
    assert float(extra["tp_sp_norm_grads_s"]) == pytest.approx(ar[49_152], rel=1e-12)
    assert float(t.dp_comm_exposed) == pytest.approx(float(dp.exposed[first]), rel=1e-12)
    assert float(dp.exposed[first]) + ar[49_152] > float(dp.exposed[mid]) + ar[65_536]


def test_optimizer_step_is_the_largest_stages_middle_included():
    """pp 4 split 6 / 10 / 10 / 6: a middle stage holds 10 x 109,060,096 = 1,090,600,960 dense parameters, more than
    either end (the first 917,028,864, the last 917,032,960, with the output layer and the final norm). Its Adam step
    over the zero1 shard (/ dp 2 = 545,300,480) reads master 4 + moments 8 + fp32 gradient 4 B and writes master 4 +
    moments 8 + the bf16 weight 2 B: 30 B a parameter over H100 SXM's 3.35e12 B/s x 0.9, 5.4259e-3 s; the larger end
    stage's (what was priced) 917,032,960 / 2 x 30 / 3.015e12 = 4.5624e-3 s."""
    s, p, sc, coll, comp = _parts(gpus=16, pp=4, first_stage_layers=6, last_stage_layers=6)
    assert {k: int(v) for k, v in sc.n.items()} == {"first": 6, "mid": 10, "last": 6}
    assert sc.hbm == pytest.approx(3.35e12 * 0.9, rel=1e-12)
    t, _ = step_time(s, p)
    want = 10 * LAYER / 2 * 30.0 / (3.35e12 * 0.9)
    assert float(t.optimizer) == pytest.approx(want, rel=1e-12) and want == pytest.approx(5.4259e-3, rel=1e-4)
    end = (6 * LAYER + EMB + 4096) / 2 * 30.0 / (3.35e12 * 0.9)
    assert end == pytest.approx(4.5624e-3, rel=1e-4) and float(t.optimizer) > end


def test_muon_step_is_one_stages_whole_optimizer_step():
    """Muon (issue 22 critdp): its Newton-Schulz iterations and TP all-gathers run in each stage's optimizer step,
    after the gradient norm's all-reduce, beside the elementwise update (step.muon_stage_terms), so the step holds
    the stage whose sum is the largest, all of its terms. pp 4 split 7 / 9 / 9 / 7 at sharding none (dp 1, 8 GPUs:
    every rank steps all of its stage's matrices). The elementwise update reads and writes 30 B a parameter (as
    above) over every parameter, the embedding and output layer included: the first stage 262,668,288 +
    7 x 109,060,096 = 1,026,088,960, a middle one 9 x 109,060,096 = 981,540,864, the last 1,026,093,056 (with the
    final norm), so the last stage's update is the longest, 1,026,093,056 x 30 / 3.015e12 = 1.02099e-2 s, the middle's
    9.7666e-3 s. Muon's matrices are the layers' (the embedding and output layer are Adam's), so at sharding none a
    stage's Newton-Schulz and gathers scale with its layers: the middle's 9 / 7 of the first's and the last's, whose
    2 extra layers' iterations outweigh the 0.44 ms of update. The step takes the middle stage's update, iterations
    and gathers; before, the last stage's update beside the middle's iterations (two stages)."""
    s, p, sc, coll, comp = _parts(gpus=8, pp=4, first_stage_layers=7, last_stage_layers=7, optimizer="muon",
                                  sharding="none")
    assert {k: int(v) for k, v in sc.n.items()} == {"first": 7, "mid": 9, "last": 7}
    from planner.step import muon_stage_terms, optimizer_time
    dp = dp_comm(sc, coll, comp)
    mid, first, last = CRITICAL_STAGES.index("mid"), CRITICAL_STAGES.index("first"), CRITICAL_STAGES.index("last")
    opt = optimizer_time(sc, dp)
    hbm = 3.35e12 * 0.9
    assert float(opt[mid]) == pytest.approx(9 * LAYER * 30.0 / hbm, rel=1e-12)
    assert float(opt[last]) == pytest.approx((7 * LAYER + EMB + 4096) * 30.0 / hbm, rel=1e-12)
    assert float(opt[last]) > float(opt[first]) > float(opt[mid])
    mu = muon_stage_terms(sc, coll, dp)
    for k in ("muon_ns", "gather"):
        assert float(mu[k][mid]) == pytest.approx(9 / 7 * float(mu[k][first]), rel=1e-12)
        assert float(mu[k][last]) == pytest.approx(float(mu[k][first]), rel=1e-12)
    assert float(mu["muon_ns"][mid] - mu["muon_ns"][last]) > float(opt[last] - opt[mid])
    t, extra = step_time(s, p)
    assert float(t.optimizer) == pytest.approx(9 * LAYER * 30.0 / hbm, rel=1e-12)
    assert float(t.optimizer) == pytest.approx(9.7666e-3, rel=1e-4)
    assert float(t.muon_ns) == pytest.approx(float(mu["muon_ns"][mid]), rel=1e-12)
    assert float(extra["tp_muon_gather_s"]) == pytest.approx(float(mu["gather"][mid]), rel=1e-12)
