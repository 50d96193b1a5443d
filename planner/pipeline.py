"""Pipeline-parallel schedules: closed forms used by the cost models, and a simulator.

Units: counts of micro-batches and fractions (dimensionless); the simulator's durations are
in whatever time unit the caller uses (the seed uses "a forward pass takes 1 unit").
The closed forms take numpy arrays or scalars alike (no Python `if` on a searched value).

Schedule codes (integers so that a search can hold them in an int64 array):
    GPIPE = 0, ONE_F_ONE_B = 1, INTERLEAVED = 2, ZERO_BUBBLE_H1 = 3, DUALPIPE = 4

Closed forms (what the search uses) and what the simulator shows (tests/test_pipeline.py
checks each of these over a grid of p, m, v):
    bubble (idle / useful time of a stage)
        GPipe, 1F1B          (p-1)/m                                      [1][2]
        interleaved 1F1B     (p-1)/(v*m)                                  [2]
        ZB-H1                (p-1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W))  [4]
                             for m >= p and T_W <= min(T_F, T_B); in general the bubble
                             time is (p-1)(T_F + T_B) - (min(m,p) - 1) min(T_W, T_F, T_B) [5]
        DualPipe             (p/2 - 1)(T_F&B + T_B - 3 T_W) / (m (T_F + T_B))           [8]
                             T_B the full backward, T_F&B = T_F + T_B (assumed: the two
                             mutually overlapped chunks' compute adds up; their overlap hides
                             the communication, not compute)
    micro-batches whose activations stage s holds at its peak, in units of one
    micro-batch of a whole stage's L/p layers (a model chunk holds 1/v of a stage)
        GPipe                m                                            [1]
        1F1B                 min(m, p - s)                                [2]
        interleaved 1F1B     min(m*v, 2(p-s-1) + (v-1)p + 1) / v          [2][5]
                             stage 0: min(m, p + (p-1)/v) = p (1 + (p-1)/(p v)) for m >= 2p [3]
        ZB-H1                min(m, p) on every stage                     [4]
        DualPipe             min(m, p + 1) on every rank, which holds two stages'
                             parameters (stage s and stage p-1-s: 2x parameters)  [8]

The simulator (`simulate`) is a discrete-event list scheduler, the seed's section 5.3 script
generalised: each stage runs its own ordered list of passes; a pass starts when its stage
is free and the pass it depends on has finished (the previous virtual stage's forward of
the same micro-batch, the next virtual stage's backward, or, for a weight-gradient pass,
the same stage's input-gradient pass). Point-to-point transfers take no time, as in the
seed. Times are exact fractions, so a timeline in units of a forward pass is exact.

Text timeline notation (the seed's, extended):
    0-9   forward pass of micro-batch i (i mod 10)
    a-z   backward pass of micro-batch i (i mod 26); for ZB-H1 the input-gradient pass B
    A-Z   ZB-H1's weight-gradient pass W of micro-batch i (i mod 26)
    .     idle
    For v > 1 each stage row is followed by a `chunk:` row giving the model chunk (0..v-1)
    of the pass above each character; one character is the shortest pass's time unit
    (e.g. half a unit for v = 2 with T_F = 1), and the output says so.

References
[1] Huang et al. 2018, "GPipe", sec. 2.3: bubble (K-1)/(M+K-1) of the step, i.e. (p-1)/m of
    the useful time; every micro-batch's activations are held until the backward pass.
[2] Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM", sec. 2.2.1-2.2.2: 1F1B (PipeDream-Flush) bubble (p-1)/m with at most
    p micro-batches in flight; interleaved schedule bubble (p-1)/(v*m). Its implementation,
    Megatron-LM megatron/core/pipeline_parallel/schedules.py,
    `forward_backward_pipelining_with_interleaving`: warm-up forwards on rank r
    = 2(p-r-1) + (v-1)p (all m*v if that is more), virtual micro-batch k runs chunk
    (k mod pv) // p (reversed for backward) of micro-batch (k // pv) p + k mod p;
    it requires m % p == 0.
[3] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", sec. 4.2.3: the first stage of 1F1B holds p micro-batches of L/p layers, i.e. L
    layers' worth; interleaving multiplies that by (1 + (p-1)/(p*v)).
[4] Qi, Wan, Huang, Lin 2023, "Zero Bubble Pipeline Parallelism" (ICLR 2024), sec. 2.1
    (ZB-H1): the backward pass splits into B (gradient w.r.t. the input) and W (gradient
    w.r.t. the weights); each stage delays its W passes so that every stage has the same
    number of micro-batches in flight as 1F1B's first stage (p), and the bubble shrinks from
    1F1B's (p-1)(T_F + T_B + T_W) to (p-1)(T_F + T_B - T_W), one third of it when
    T_F = T_B = T_W. Table 1: FLOPs per layer F 24bsh^2 + 4bs^2h, B 24bsh^2 + 8bs^2h,
    W 24bsh^2, so W is about half the backward pass when s << h.
[5] This module's simulator (relations found with it and checked over a grid in
    tests/test_pipeline.py): the peak of [2]'s interleaved schedule on stage s is its warm-up
    count plus the one forward of the first steady-state step (or all m*v chunk passes when
    the warm-up covers them); [3]'s factor is the s = 0, m >= 2p case of it. ZB-H1's W passes
    hide (min(m,p) - 1) min(T_W, T_F, T_B) of 1F1B's (p-1)(T_F + T_B) bubble.
[6] Megatron-Core (NVIDIA/Megatron-LM, commit dc13771): TransformerConfig.__post_init__ with
    account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split adds one
    layer to num_layers for each and requires the sum to divide by pp (and by pp*vpp with
    virtual stages); transformer_layer.get_transformer_layer_offset then gives the first
    (last) chunk one transformer layer fewer. Megatron-Bridge recipes set both for Llama 3.1
    405B (126 layers + 2 = 128 chunks) and Qwen3-235B-A22B.
[7] NVIDIA Megatron-LM, megatron/core/transformer/transformer_layer.py
    get_transformer_layer_offset and megatron/core/pipeline_parallel/schedules.py
    (interleaved 1F1B): virtual stage j of pp x vpp runs on pipeline rank j mod pp and holds
    the next num_layers / (pp vpp) layers; with --account-for-embedding/loss-in-pipeline-split
    the first (last) virtual stage holds one layer fewer. A model of several kinds of layer
    (planner/layers/) gets each stage's count of each kind from that placement
    (stage_kind_counts).
[8] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv:2412.19437) sec. 3.2.1 and
    Table 2; deepseek-ai/DualPipe README.md @89f5de17 (the same table): DualPipe bubble
    (PP/2-1)(F&B + B - 3W), parameters 2x, activations PP+1 (1F1B: (PP-1)(F+B), 1x, PP),
    F&B the time of two mutually overlapped forward and backward chunks, B a full backward,
    W its weight part. deepseek-ai/DualPipe dualpipe/dualpipe.py @bb214e82 DualPipe.step:
    num_ranks even, num_chunks (micro-batches) even and >= 2 num_ranks, half of them fed from
    each end; rank r runs stage r of one direction and stage p-1-r of the other. The
    discrete-event simulator does not run it (closed forms only).
[9] Llama Team, AI @ Meta 2024, "The Llama 3 Herd of Models" (arXiv:2407.21783) sec. 3.3.2
    "Pipeline parallelism improvements", Figure 6: Meta's interleaved schedule runs N
    contiguous micro-batches per virtual stage with N set freely, so a step may hold any number
    m of micro-batches, fewer than the stages included (Megatron-LM's needs m % p == 0); the
    paper gives the bubble (PP - 1)/(V M). This module's simulator, run with N (simulate's
    `group`): the bubble is (p - 1)/(v m) for every m >= p and every N in [p, m] whose last
    group holds 0 or >= p micro-batches, and (p - 1 + (v - 1)(p - m))/(v m) for m < p (one
    group, N = m: each virtual stage waits p - m chunk slots for its micro-batches to come round
    the p ranks), the paper's formula plus that wait; the peak is min(2(p - s - 1) + (v - 1) N
    + 1, m v) chunk-micro-batches ([5] with N for p). tests/test_pipeline.py checks both over a
    grid. Which N Meta ran is not published: the planner takes microbatch_group's (the smallest
    N without dependency bubbles, the least memory).
[10] NVIDIA/Megatron-LM @d98e8a64: megatron/core/model_parallel_config.py l. 431-449
    microbatch_group_size_per_vp_stage (--microbatch-group-size-per-virtual-pipeline-stage, "the
    number of micro-batches that are executed at a time for a given virtual stage (both forward
    and backward)"), l. 567-568 (default pp); megatron/core/pipeline_parallel/schedules.py
    get_pp_rank_microbatches l. 929-975 (warm-up forwards on rank r: 2(p - r - 1) + (v - 1) N,
    all m v if that is more), get_schedule_table l. 989-1016 (groups of N micro-batches, each run
    through chunk 0 .. v - 1 in turn, the last group taking the rest),
    forward_backward_pipelining_with_interleaving l. 1160-1180 (N in [pp, m], and m % N is 0 or
    >= pp, else a ValueError / RuntimeError). With N for p the bubble stays (p - 1)/(v m) (the
    simulator's, [9]); the warm-up, and so the activations in flight, grows by (v - 1)(N - p)
    chunk-micro-batches on every stage.
[11] microsoft/DeepSpeed a12aaedc (2021-04-29, v0.3.16) deepspeed/runtime/utils.py: partition_balanced
    l. 403-418 (the specs' weights as inclusive prefix sums, prefix_sum_inc l. 324-335; num_items <=
    num_parts: partition_uniform), _rb_partition_balanced l. 387-400 (lower = total / parts, upper =
    total; while upper > lower + eps: mid = lower + (upper - lower) / 2, upper = mid where _lprobe
    succeeds, else lower = mid + eps; eps 1e-3) and _lprobe l. 352-384 (part p ends before the first
    prefix sum >= the previous part's end + the bottleneck, bisect_left over a window the loop walks
    chunksize at a time, the same index as over the whole list since the prefix sums rise; success:
    the last part's target reaches the total, or a part takes every item left, the parts after it
    empty). pipe/module.py _partition_layers l. 353-382 hands it the binary weights of
    partition_method 'type:...' (1 for each spec whose class matches, 0 else: Megatron-DeepSpeed's
    GPTModelPipe 'type:transformer', microsoft/Megatron-DeepSpeed b56b50bb megatron/model/gpt_model.py
    l. 168-253, zero-weight specs before and after the layers). On n unit weights a part below a
    bottleneck B holds k = ceil(B) - 1 units, and B succeeds iff (P - 1) k + B >= n (the float sum
    the code compares), so the search converges to B in [k*, k* + 2 eps]: k* = ceil(n / P) units on
    each part from the first, the last the rest, parts after the units run out empty (10 on 4:
    3, 3, 3, 1; 9 on 4: 3, 3, 3, 0); where the search lands exactly on the integer k* (it can: 4 on 3,
    mid = 4/3 + (8/3 - 4/3) / 2 = 2.0) k* - 1 each and the last the rest (1, 1, 2). The zero-weight
    specs change no unit count (a boundary falls just before a unit). Today's partition_balanced
    (@38327e07 utils.py l. 583-621) is a dynamic program for the least max - min instead (the front
    rule, stage_layers).
[12] Gradient reductions queued behind the schedule (reduce_queue_overrun; stack
    overlap.grad_reduce_queued, planner/step.py dp_comm): a mode that reduces every micro-batch's
    gradients issues the reduction of each chunk's gradients when that chunk's backward ends, on one
    communication stream (the reductions run one after another, in issue order), and the compute
    stream goes on with the schedule's next passes, forwards and backwards of other micro-batches,
    without waiting for them until the step's end. With one chunk's reduction taking d / v
    (d: a micro-batch's, a whole stage), the queue on a stage drains at
    Q = max over k of (t_k + (N - k) d / v), t_k the end of its k-th backward, N = v m; what
    outlasts the pipeline's compute, Q - T, is exposed. This module's simulator (uniform chunk
    times f = T_F / v, b = T_B / v) gives, for 1F1B and the interleaved schedule with any N:
    T = (v m + p - 1 + (v - 1) max(p - m, 0)) (f + b) (the bubble closed forms above); stage r's
    first backward ends at (p + (v - 1) max(N, p)) f + (p - r) b (micro-batch 0 crosses the p v
    virtual stages forward, N micro-batches a chunk on the first rank, then back to rank r) and its
    last at T - r b; between them its backwards end f + b apart while the stages after it are in
    their steady state and b apart once they are all in the flush: t_k = min(t_0 + k (f + b),
    T - r b - (N - 1 - k) b). t_k + (N - k) d / v is then concave in k, its maximum at k = 0, at
    k = N - 1 or where the two lines meet, and stage 0 (r = 0) drains last. Megatron's order on
    stage 0 with N = p groups and m >= 2p (p >= 4) adds p chunk-forwards after its second backward
    (t_2 = t_0 + (f + b) + p f, the pattern above starting again there) and, before the flush's
    (v - 1) p backwards, a run of 2p - 2 backwards that begins b apart (how many, the ratio b / f
    sets: not in the form). Checked against the simulator (tests/test_pipeline.py, a grid of p, m,
    v and f : b : d): exact for 1F1B and one stage, for every m in [p, 2p) (Table 4's layout,
    m = p = 16, v = 8, included), and for m >= 2p wherever d / v >= f + b (the queue never drains)
    or d / v <= b (it never waits); for m >= 2p with b < d / v < f + b an upper bound (that run
    drains the queue a little); for m < p (Llama 3's flexible N) within 6% of T either way.
[14] Megatron-LM's uneven split, NVIDIA/Megatron-LM @d98e8a64 --decoder-first-pipeline-num-layers /
    --decoder-last-pipeline-num-layers (megatron/training/arguments.py l. 3095-3102; TransformerConfig
    num_layers_in_first/last_pipeline_stage, transformer_config.py l. 103-109): the first (last) pipeline
    rank holds F (E) transformer layers and the other L - F - E divide equally over the ranks left
    (transformer_block.py get_num_layers_to_build l. 103-146; a flag left out makes its rank a middle one);
    with vpp model chunks a rank each of its chunks holds 1/vpp of the rank's layers, and the layers run
    round by round, the first rank's F/vpp, each middle rank's, the last rank's E/vpp
    (transformer_layer.py get_transformer_layer_offset l. 80-178, offset = vp_stage x (F + M + E)/vpp + ...,
    l. 155-166). Megatron-Core refuses (transformer_config.py __post_init__ l. 2229-2239, 2294-2368): either
    with account_for_embedding/loss_in_pipeline_split, either with --pipeline-model-parallel-layout, a count
    <= 0, a count vpp does not divide, middle layers without middle ranks or middle ranks without layers,
    middle layers the middle ranks do not divide, and a middle rank's layers vpp does not divide.
    stage_layers' and chunk_layers' `first` / `last` (0: the flag left out; PlanArrays.split_first /
    split_last, Job first_stage_layers / last_stage_layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import ceil, gcd

import numpy as np

from .errors import PlannerError

GPIPE, ONE_F_ONE_B, INTERLEAVED, ZERO_BUBBLE_H1, DUALPIPE = 0, 1, 2, 3, 4
SCHEDULE_CODES = {"gpipe": GPIPE, "1f1b": ONE_F_ONE_B, "interleaved": INTERLEAVED, "zb-h1": ZERO_BUBBLE_H1,
                  "dualpipe": DUALPIPE}
SCHEDULE_NAMES = {v: k for k, v in SCHEDULE_CODES.items()}
SCHEDULE_TITLES = {GPIPE: "GPipe", ONE_F_ONE_B: "1F1B", INTERLEAVED: "Interleaved 1F1B", ZERO_BUBBLE_H1: "ZB-H1",
                   DUALPIPE: "DualPipe"}
# schedules the discrete-event simulator runs (DualPipe: closed forms only)
SIMULATED = (GPIPE, ONE_F_ONE_B, INTERLEAVED, ZERO_BUBBLE_H1)

# How a pipeline split places the units it does not divide evenly (Stack.pipeline_split; PlanArrays.split_front
# holds the code): trim_ends (Megatron-Core, Llama 3), front (torchtitan, DeepSpeed @38327e07's
# partition_balanced), bisection (DeepSpeed a12aaedc's partition_balanced [11])
SPLIT_TRIM_ENDS, SPLIT_FRONT, SPLIT_BISECTION = 0, 1, 2
SPLIT_CODES = {"trim_ends": SPLIT_TRIM_ENDS, "front": SPLIT_FRONT, "bisection": SPLIT_BISECTION}
# DeepSpeed a12aaedc partition_balanced's eps (utils.py l. 403) and a bound on its binary search's steps: the
# interval (at most the unit count, below 2^63) at least halves each step, so it is under eps = 1e-3 after
# log2(2^63 / 1e-3) < 74 steps; the search itself stops once its interval is within eps
BISECTION_EPS = 1e-3
BISECTION_STEPS = 80

# Backward over forward time: the backward pass computes two GEMMs (gradient w.r.t. the input
# and w.r.t. the weights) for each forward GEMM, so it costs about twice the forward
# (Narayanan et al. 2021 sec. 5.1, eq. 3: 2x forward for backward; the seed's T_B = 2 T_F).
DEFAULT_BACKWARD_RATIO = 2.0
# Share of the backward pass that is the weight-gradient pass W: Qi et al. 2023 Table 1,
# W 24bsh^2 of B + W = 48bsh^2 + 8bs^2h, i.e. 1/2 when s << 6h (T_F = T_B = T_W with the default
# backward ratio, the paper's own simplifying assumption).
DEFAULT_W_FRACTION = 0.5

# Largest simulation accepted (passes in all); plain Python handles this in about a second.
MAX_PASSES = 200_000
# Widest text timeline, in characters per stage row.
MAX_TIMELINE_CHARS = 4000


# --------------------------------------------------------------------------- closed forms


def bubble_fraction(pp, m, vpp=1, schedule=ONE_F_ONE_B, backward_ratio=DEFAULT_BACKWARD_RATIO,
                    w_fraction=DEFAULT_W_FRACTION):
    """Idle time over useful time of a pipeline stage.

    GPipe, 1F1B, interleaved: (p-1)/(v*m) [1][2] (GPipe and 1F1B have v = 1); an interleaved
    schedule of m < p micro-batches (Llama 3's [9]) (p - 1 + (v-1)(p-m))/(v m) [9].
    ZB-H1: (p-1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W)) [4], with T_F = 1,
    T_B + T_W = backward_ratio and T_W = w_fraction * backward_ratio (defaults: the backward
    pass takes twice the forward and W is half of it, so T_F = T_B = T_W and the bubble is
    (p-1)/(3m)). ZB-H1 has one model chunk per stage: vpp is ignored for it.
    The paper's expression assumes m >= p and a W pass no longer than F or B (its own
    setting is T_F = T_B = T_W); in general the simulator finds the bubble time
    (p-1)(T_F + T_B) - (min(m, p) - 1) min(T_W, T_F, T_B)  [5],
    which is the paper's in its setting and is what this function returns (tested).

    Seed sec. 5.2: 4 stages and 16 micro-batches waste 3/16 of the useful time.
    """
    pp = np.asarray(pp, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    vpp = np.asarray(vpp, dtype=np.float64)
    schedule = np.asarray(schedule)
    r = np.asarray(backward_ratio, dtype=np.float64)
    w = np.asarray(w_fraction, dtype=np.float64)
    # [2]'s (p-1)/(v m), and with fewer micro-batches than stages (Llama 3's schedule [9]) the
    # (v-1)(p-m) chunk slots each virtual stage waits for its micro-batches to come round the p
    # ranks: (p - 1 + (v-1) max(p - m, 0))/(v m) [9] (0 where m >= p: every Megatron plan)
    megatron = (pp - 1.0 + (vpp - 1.0) * np.maximum(pp - m, 0.0)) / (vpp * m)
    t_w = r * w
    t_b = r - t_w
    # [4] sec. 2.1: (p-1)(T_F + T_B - T_W), generalised by [5] to every m and duration ratio.
    overlap = (np.minimum(m, pp) - 1.0) * np.minimum(t_w, np.minimum(1.0, t_b))
    zb = ((pp - 1.0) * (1.0 + t_b) - overlap) / (m * (1.0 + r))
    # [8] Table 2: (p/2 - 1)(F&B + B - 3W) with F = 1, B = r (the full backward), W = t_w and
    # F&B = F + B (assumed: overlapping the two chunks hides communication, not compute)
    # (one stage: no pipeline and no bubble)
    dual = np.maximum(pp / 2.0 - 1.0, 0.0) * ((1.0 + r) + r - 3.0 * t_w) / (m * (1.0 + r))
    return np.where(schedule == ZERO_BUBBLE_H1, zb, np.where(schedule == DUALPIPE, dual, megatron))


def reduce_queue_overrun(pp, m, vpp, group, t_f, t_b, d):
    """(seconds a stage's queued gradient reductions outlast the pipeline's compute, that compute's
    span T) [12]: the per-micro-batch reductions (d seconds a micro-batch, a whole stage's, on one
    stream in issue order) of the first stage, each chunk's issued as its backward ends, drained
    behind the passes that follow it, under 1F1B (vpp 1; one stage included) or the interleaved
    schedule (vpp > 1, `group` N its micro-batches a virtual stage: microbatch_group). t_f, t_b:
    a micro-batch's forward and backward through the stage, as the compute stream runs them (the
    bubble's unit). Arrays broadcast; every branch a mask (np.where / np.maximum)."""
    p = np.asarray(pp, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    v = np.asarray(vpp, dtype=np.float64)
    n = np.asarray(group, dtype=np.float64)
    f, b = np.asarray(t_f, dtype=np.float64) / v, np.asarray(t_b, dtype=np.float64) / v
    item = np.asarray(d, dtype=np.float64) / v
    N = v * m
    T = (N + p - 1.0 + (v - 1.0) * np.maximum(p - m, 0.0)) * (f + b)
    t0 = (p + (v - 1.0) * np.maximum(n, p)) * f + p * b
    # where the f + b paced backwards meet the flush's b paced ones (f > 0 for any compute)
    k = np.clip((T - t0 - (N - 1.0) * b) / np.where(f > 0.0, f, 1.0), 0.0, N - 1.0)
    q = np.maximum.reduce([t0 + N * item, T + item, t0 + k * (f + b) + (N - k) * item])
    # Megatron's order on the first stage with N = p groups and m >= 2p (p >= 4): its second
    # backward ends f + b after the first, its third p f after that (p chunk-forwards between), and
    # the pattern above starts again from there [12]
    quirk = (v > 1.0) & (n == p) & (m >= 2.0 * p) & (p >= 4.0)
    t2 = t0 + (f + b) + p * f
    k2 = np.clip((T - t2 - (N - 3.0) * b) / np.where(f > 0.0, f, 1.0), 0.0, N - 3.0)
    late = np.maximum.reduce([t0 + N * item, t0 + (f + b) + (N - 1.0) * item, t2 + (N - 2.0) * item, T + item,
                              t2 + k2 * (f + b) + (N - 2.0 - k2) * item])
    q = np.where(quirk, late, q)
    return np.maximum(q - T, 0.0), T


# the stages a cost model prices, in pipeline-rank order: heaviest_stage_index's answers
HEAVIEST_FIRST, HEAVIEST_MIDDLE, HEAVIEST_LAST = 0, 1, 2


def heaviest_stage_index(first, middle, last) -> np.ndarray:
    """Which of three per-plan figures of the first stage, the heaviest middle one and the last stage is the
    largest: HEAVIEST_FIRST, HEAVIEST_MIDDLE or HEAVIEST_LAST (int64, broadcast). The one argmax both cost models
    take (memory.heaviest_stage's bytes, step's critical stage by time), each then reading every term of that one
    stage. Ties go to the lower pipeline rank: the first, then the middle, then the last. Tied stages hold the same
    bytes (take the same time a micro-batch), so the rule only names the stage whose terms are shown: with one stage
    (all three equal) and where no middle stage exists (memory prices it as the first's) the first; and stage 0 is
    the rank whose log a torchtitan run shows (run_train.sh @e347b1e5e l. 29, 45: LOG_RANK 0 by default, global rank
    0 on pipeline stage 0, its mesh's outermost dimension), where Megatron-LM logs its memory from the last rank
    (training.py @d98e8a64 l. 3445: explain lists every stage). A missing stage is passed as -inf."""
    first, middle, last = (np.asarray(x) for x in (first, middle, last))
    return np.where(first >= np.maximum(middle, last), HEAVIEST_FIRST,
                    np.where(middle >= last, HEAVIEST_MIDDLE, HEAVIEST_LAST)).astype(np.int64)


def layers_on_heaviest_stage(num_layers: int, pp, vpp, split_emb=0, split_loss=0):
    """ceil(L' / (pp*vpp)) layers per model chunk, vpp chunks per GPU: what a middle stage
    holds. L' = L plus one for each end counted as a layer in the split (split_emb: the
    embedding, split_loss: the output layer and loss; Megatron-LM
    --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split [6])."""
    pp = np.asarray(pp, dtype=np.int64)
    vpp = np.asarray(vpp, dtype=np.int64)
    units = num_layers + np.asarray(split_emb, dtype=np.int64) + np.asarray(split_loss, dtype=np.int64)
    return (-(-units // (pp * vpp))) * vpp


def stage_layers(num_layers: int, pp, vpp, split_emb=0, split_loss=0, split_front=0, first=0, last=0):
    """(first, middle, last) layers per GPU of an uneven split: the middle stages hold
    ceil(L'/(pp v)) per chunk, and the layers that split leaves over come off the first and
    the last stage, which also hold the embedding and the output layer (Llama 3 405B: 126
    layers on 16 stages, "we reduce one Transformer layer each from the first and the last
    stages", The Llama 3 Herd of Models sec. 3.3.2). Each keeps at least one layer; with one
    stage all three are L; with two there is no middle stage and the "middle" is stage 1's (the
    last's) layers, whatever the rule and vpp (step.compute_time prices stage 0 there).

    With the embedding (split_emb = 1) or the loss (split_loss = 1) counted as a layer of the
    split [6], L' = L + split_emb + split_loss units divide into pp*vpp chunks, and the first
    (last) chunk holds one transformer layer fewer: Llama 3.1 405B's 126 layers + 2 on pp 16 x
    vpp 8 = 128 chunks of one unit, the first chunk the embedding alone, the last the loss
    alone. Such an end stage may then hold no transformer layer (pp = L + 2, vpp 1).

    split_front = 1 (torchtitan 0.3.0 distributed/pipeline_parallel.py
    _generate_llm_fqn_per_model_part): each of the S = pp vpp chunks holds floor(L'/S) units and
    the first L' mod S chunks one more; chunk j runs on stage j mod pp, so stage k holds
    vpp floor(L'/S) + clip(ceil((r - k) / pp), 0, vpp) units (r = L' mod S), the first less the
    embedding, the last less the loss; the heaviest middle stage is stage 1 (8 layers + 2 on
    4 stages: 2, 3, 2, 1).

    split_front = 2 (SPLIT_BISECTION, DeepSpeed a12aaedc's partition_balanced [11]): k units on
    each chunk from the first until they run out, the last chunk the rest (bisection_chunk_units);
    chunk j on stage j mod pp as above (10 layers on 4 stages: 3, 3, 3, 1; the heaviest middle
    stage is stage 1). An end stage may then hold no transformer layer (9 on 4: 3, 3, 3, 0),
    start-up rule DEEPSPEED_PP_SPLIT_ENDS's refusal.

    first / last > 0 (Megatron-LM's --decoder-first/last-pipeline-num-layers [14]): the first
    (last) stage holds that many layers and the L - first - last others divide equally over the
    stages left (12 layers on 4 stages, 2 and 2: 2, 4, 4, 2); with pp 2 the middle candidate is
    stage 1's (the last), as _stage_chunks'. 0 leaves that end to the rules above (a plan's
    fields; the rules refuse one set beside the counted ends, plan.uneven_split_broken)."""
    fs, ls_ = np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64)
    pp = np.asarray(pp, dtype=np.int64)
    vpp = np.asarray(vpp, dtype=np.int64)
    e = np.asarray(split_emb, dtype=np.int64)
    l_ = np.asarray(split_loss, dtype=np.int64)
    mid = layers_on_heaviest_stage(num_layers, pp, vpp, e, l_)
    slack = np.maximum(pp * mid - (num_layers + e + l_), 0)
    first = np.maximum(mid - e - (slack + 1) // 2, 1 - e)
    last = np.maximum(mid - l_ - slack // 2, 1 - l_)
    units, chunks = num_layers + e + l_, np.maximum(pp * vpp, 1)
    base, r = units // chunks, units % chunks

    def on(k):  # units on stage k under the front rule
        return vpp * base + np.clip(-((k - r) // np.maximum(pp, 1)), 0, vpp)

    code = np.asarray(split_front, dtype=np.int64)
    front = code == SPLIT_FRONT
    first, mid, last = (np.where(front, on(0) - e, first), np.where(front, on(1), mid),
                        np.where(front, on(pp - 1) - l_, last))
    if np.any(code == SPLIT_BISECTION):  # the stack's split (a constant of the job), not a searched quantity
        bis = code == SPLIT_BISECTION
        k = bisection_units_per_chunk(units, chunks)
        b0, b1, blast = (bisection_stage_units(units, pp, vpp, st, k) for st in (0, 1, pp - 1))
        first, mid, last = (np.where(bis, b0 - e, first), np.where(bis, b1, mid), np.where(bis, blast - l_, last))
    if np.any(fs > 0) or np.any(ls_ > 0):  # a job's fields (constants of the job), not searched quantities
        uneven, has_f, has_l = (fs > 0) | (ls_ > 0), fs > 0, ls_ > 0
        left = pp - has_f - has_l  # the middle ranks [14]
        each = np.where(left > 0, (num_layers - np.maximum(fs, 0) - np.maximum(ls_, 0)) // np.maximum(left, 1), 0)
        u_first, u_last = np.where(has_f, fs, each), np.where(has_l, ls_, each)
        u_mid = np.where(pp > 2, each, u_last)
        first, mid, last = (np.where(uneven, u_first, first), np.where(uneven, u_mid, mid),
                            np.where(uneven, u_last, last))
    # pp 2: both stages are ends (stage 0 holds chunk 0 with the embedding, stage 1 the last chunk with the loss,
    # whatever vpp), so there is no middle stage: the "middle" is stage 1's layers, as _stage_chunks' and the
    # uneven rule's above (ceil(L'/(2 v)) v would count a stage of L'/2 layers that does not exist: 40 layers + 2
    # ends on pp 2 hold 20 and 20, not 21)
    mid = np.where(pp == 2, last, mid)
    one = pp == 1
    return np.where(one, num_layers, first), np.where(one, num_layers, mid), np.where(one, num_layers, last)


def stage_layer_table(num_layers: int, pp, vpp, split_emb=0, split_loss=0, split_front=0, first=0, last=0):
    """Transformer layers on each pipeline stage k = 0 .. pp - 1, on a last axis of max(pp) entries (0 past a
    plan's own pp), of the split given by its fields (stage_layers' arguments): plan_stage_layer_table of those
    fields, the one per-stage table (stage_table: chunk_layers' chunks, chunk j on stage j mod pp [7])."""
    return plan_stage_layer_table(num_layers, _SplitFields(pp, vpp, split_emb, split_loss, split_front, first, last))


def plan_stage_layer_table(num_layers: int, plan):
    """Transformer layers on each pipeline stage k = 0 .. pp - 1 of a plan's own split fields, shaped as those
    fields broadcast plus a last axis of max(pp) entries (0 past a plan's own pp): stage_table gathered per plan.
    What a model-wide count reads (memory.recompute_fraction: the layers full recompute re-runs over every stage)."""
    return per_plan(*stage_table(num_layers, plan))


class _SplitFields:
    """A plan's split fields alone (what _Configs(microbatches=False) reads): stage_layer_table's arguments."""

    def __init__(self, pp, vpp, split_emb=0, split_loss=0, split_front=0, first=0, last=0):
        self.pp, self.vpp, self.split_emb, self.split_loss = pp, vpp, split_emb, split_loss
        self.split_front, self.split_first, self.split_last = split_front, first, last


def plan_stage_layers(num_layers: int, plan):
    """stage_layers of a plan's own split fields (pp, vpp, split_emb, split_loss, split_front,
    split_first, split_last)."""
    return stage_layers(num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss, getattr(plan, "split_front", 0),
                        getattr(plan, "split_first", 0), getattr(plan, "split_last", 0))


@lru_cache(maxsize=4096)
def _bisection_bottleneck(n: int, p: int) -> float:
    """a12aaedc's _rb_partition_balanced [11] on n unit weights and p parts, in its own Python float arithmetic:
    lower = n / p, upper = n; mid = lower + (upper - lower) / 2 kept as upper where the probe succeeds ((p - 1) k + mid
    >= n, k = ceil(mid) - 1 the units a part below mid holds), else lower = mid + eps. The interval at least halves a
    step: under 80 steps for n below 2^63 (BISECTION_STEPS)."""
    lower, upper = n / p, float(n)
    for _ in range(BISECTION_STEPS):
        if not upper > lower + BISECTION_EPS:
            break
        mid = lower + ((upper - lower) / 2)
        if (p - 1) * (ceil(mid) - 1) + mid >= n:
            upper = mid
        else:
            lower = mid + BISECTION_EPS
    return upper


def bisection_bottleneck(units, parts) -> np.ndarray:
    """The bottleneck B DeepSpeed a12aaedc's _rb_partition_balanced [11] settles on for `units` unit weights on
    `parts` parts, elementwise: _bisection_bottleneck once per distinct (units, parts) pair (a search's arrays hold a
    few: the pp values against one unit count), found through a dense table as _Configs does, else a sort. O(1) in
    the layer count. units > parts (the rule pp <= units; at units == parts it is 1 a part, as partition_uniform)."""
    units, parts = np.broadcast_arrays(np.asarray(units, dtype=np.int64), np.asarray(parts, dtype=np.int64))
    u, p = units.ravel(), np.maximum(parts.ravel(), 1)
    base, width = int(u.min(initial=0)), int(p.max(initial=1)) + 1
    key = (u - base) * width + p
    top = int(key.max(initial=0))
    if top < 1 << 22:  # a dense table over the small range, else a sort
        present = np.zeros(top + 1, dtype=bool)
        present[key] = True
        uniq = np.flatnonzero(present)
        inverse = (np.cumsum(present) - 1)[key]
    else:
        uniq, inverse = np.unique(key, return_inverse=True)
    b = np.array([_bisection_bottleneck(int(k // width + base), int(k % width)) for k in uniq], dtype=np.float64)
    return b[np.ravel(inverse)].reshape(units.shape)


def bisection_units_per_chunk(units, parts) -> np.ndarray:
    """k = ceil(B) - 1: the units each chunk below DeepSpeed a12aaedc's bottleneck B holds [11] (at least 1)."""
    return np.maximum(np.ceil(bisection_bottleneck(units, parts)).astype(np.int64) - 1, 1)


def bisection_stage_units(units, pp, vpp, stage, k=None) -> np.ndarray:
    """Units on pipeline stage `stage` under DeepSpeed a12aaedc's split [11] of `units` over S = pp vpp chunks
    (chunk j on stage j mod pp): k = ceil(B) - 1 units a chunk (B: bisection_bottleneck) on chunks 0 .. m - 1,
    m = min(units // k, S - 1), the rest units mod k on chunk units // k where that is below S - 1, and the
    last chunk units - (S - 1) k where positive. In closed form over the stage's vpp chunks. k: the per-chunk
    units where the caller has them (bisection_units_per_chunk), else computed."""
    units = np.asarray(units, dtype=np.int64)
    pp = np.maximum(np.asarray(pp, dtype=np.int64), 1)
    vpp = np.maximum(np.asarray(vpp, dtype=np.int64), 1)
    s = np.asarray(stage, dtype=np.int64)
    S = pp * vpp
    k = bisection_units_per_chunk(units, S) if k is None else np.asarray(k, dtype=np.int64)
    q, r = units // k, units % k
    m = np.minimum(q, S - 1)
    full = np.clip(-((s - m) // pp), 0, vpp)  # chunks j = s + i pp < m, i < vpp
    partial = np.where((q <= S - 2) & (q % pp == s), r, 0)
    last = np.where(s == pp - 1, np.maximum(units - (S - 1) * k, 0), 0)
    return k * full + partial + last


def bisection_chunk_units(units: int, parts: int) -> list[int]:
    """Units on each of the `parts` chunks under DeepSpeed a12aaedc's split [11] (bisection_stage_units per chunk,
    vpp 1): 10 on 4 -> [3, 3, 3, 1], 4 on 3 -> [1, 1, 2], 9 on 4 -> [3, 3, 3, 0]."""
    return [int(x) for x in bisection_stage_units(units, parts, 1, np.arange(parts))]


def stage_kind_counts(ll, plan) -> dict:
    """Layers of each kind on the pipeline stages: "first" and "last" (K, ...) for stage 0 and
    stage p - 1, and the middle stages' distinct compositions as candidates, "mid" (C, K, ...)
    with "mid_stage" (C, ...) the lowest stage index holding each (the one with the most
    micro-batches in flight); with pp <= 2 the one candidate is stage 1's composition. With
    one stage all are the whole model. The cost models take the heaviest candidate.

    Placement (Megatron-Core's virtual pipeline [7]): model chunk j = 0 .. p v - 1 runs on
    stage j mod p and holds c = ceil(L' / (p v)) consecutive layers (pipeline.stage_layers),
    except that the first chunk holds e + ceil(r / 2) fewer and the last l + floor(r / 2)
    fewer, where e, l are the embedding and the loss counted in the split and r the layers
    the split leaves over (the stage_layers rule). A model of one kind needs only the counts."""
    n_first, n_mid, n_last = plan_stage_layers(ll.num_layers, plan)
    if len(ll.kinds) == 1:
        out = {st: np.asarray(n, dtype=np.float64)[None] for st, n in (("first", n_first), ("last", n_last))}
        out["mid"] = np.asarray(n_mid, dtype=np.float64)[None, None]
        out["mid_stage"] = np.ones((1,) + np.shape(n_mid), dtype=np.int64)
        return out
    configs = _pipeline_configs(plan)
    per = [_stage_chunks(ll, *row) for row in configs.rows]
    return _gather(per, configs, len(ll.kinds), lambda chunks: chunks.sum(axis=0))


def stage_inflight_kinds(ll, plan) -> dict:
    """Layers of each kind times the micro-batches whose activations the stage holds at its
    peak, chunk by chunk (the quantity the activation memory multiplies): "first", "last"
    (K, ...), "mid" (C, K, ...) and "mid_stage" as in stage_kind_counts, and "loss" (...): the
    micro-batches whose output layer and loss the last stage holds at its peak.

    Micro-batches in flight per model chunk at the stage's peak (the moment before its first
    backward): GPipe m; 1F1B min(m, p - s) [2]; ZB-H1 min(m, p) [4]; interleaved 1F1B [2][5]:
    of the F = min(2 (p - s - 1) + (v - 1) N + 1, m v) forwards run by then, forward k runs
    chunk (k mod N v) // N (Megatron-Core's order, groups of N micro-batches: p, or the plan's
    mbg [10]), so chunk c holds (F // N v) N + min(max(F mod N v - c N, 0), N). The last chunk
    of the last stage, the one with the loss, holds 1 (Megatron: each last-chunk forward is
    followed by its backward once the warm-up is done; get_pp_rank_microbatches [7]); summed
    over equal chunks this is inflight_microbatches x the stage's layers. ZB-H1's loss counts 1: the loss's tensors are
    freed by the input-gradient pass. "outputs" {"first", "last" (...), "mid" (C, ...)}: the
    chunk-micro-batches in flight whose chunk sends its output to a next stage (every chunk but
    the last stage's last, the one with the loss; none with p = 1): the stage outputs a runtime
    that keeps them until their backward holds (torch.distributed.pipelining fwd_cache). "embedding" (...): the
    micro-batches in flight on the first stage's first chunk, the one holding the input embedding (memory.py [en])."""
    configs = _pipeline_configs(plan)
    per = [_stage_chunks(ll, *row) for row in configs.rows]
    m = np.broadcast_to(np.asarray(plan.microbatches, dtype=np.int64), configs.shape).ravel()
    sched = np.broadcast_to(np.asarray(plan.schedule, dtype=np.int64), configs.shape).ravel()
    # the job's micro-batch group N [10] (0: microbatch_group's rule), read by the interleaved schedule only:
    # its distinct values, a few (one job's), index the dedup key below
    group = np.where(sched == INTERLEAVED, np.broadcast_to(np.asarray(getattr(plan, "mbg", 0), dtype=np.int64),
                                                           configs.shape).ravel(), 0)
    groups, gi = np.unique(group, return_inverse=True)
    G = len(groups)
    K, C = len(ll.kinds), max(len(p["mid"]) for p in per)
    n = len(m)
    out = {"first": np.zeros((K, n)), "last": np.zeros((K, n)), "mid": np.zeros((C, K, n)),
           "mid_stage": np.ones((C, n), dtype=np.int64), "loss": np.ones(n),
           "out_first": np.zeros(n), "out_last": np.zeros(n), "out_mid": np.zeros((C, n)), "embedding": np.ones(n)}
    order = np.argsort(configs.inverse, kind="stable")  # the plans of each configuration, in one sort
    bounds = np.concatenate([[0], np.cumsum(np.bincount(configs.inverse, minlength=len(per)))])
    for u, chunks in enumerate(per):
        sel = order[bounds[u]:bounds[u + 1]]
        if not sel.size:
            continue
        p, v = configs.rows[u][0], configs.rows[u][1]
        # the distinct (micro-batches, schedule) of these plans: past (v + 2) p micro-batches (a
        # multiple of p) every schedule but GPipe holds the same (a dense key, one pass)
        mu, su, gu = m[sel], sched[sel], gi[sel]
        # (an interleaved count pp does not divide, Llama 3's schedule only, keeps its own: its group N
        # depends on it; with the job's N [10] every count from N + 2p holds the same: F < v (N + 2p))
        key = np.where((su == GPIPE) | ((su == INTERLEAVED) & (mu % p != 0)), mu, np.minimum(mu, (v + 2) * p))
        key = (np.where(groups[gu] > 0, np.minimum(mu, groups[gu] + 2 * p), key) * G + gu) * 8 + su
        srt = np.sort(key)  # the distinct keys by a sort (a count may be as large as a global batch)
        uk = srt[np.concatenate([[True], srt[1:] != srt[:-1]])]
        back = np.searchsorted(uk, key)
        mu, su, gu = uk // 8 // G, uk % 8, groups[uk // 8 % G]
        # each stage's micro-batches in flight per chunk, once per stage of this configuration (the
        # same function of the same arguments wherever it is read below), its group N once
        n_group = microbatch_group(p, mu, gu) if p > 1 else None
        held = {}

        def at(s, p=p, v=v, mu=mu, su=su, gu=gu, n_group=n_group, held=held):
            if s not in held:
                held[s] = _chunk_inflight(p, v, s, mu, su, gu, n_group)
            return held[s]

        out["first"][:, sel] = _weighted_chunks(chunks["first"], v, at(0))[:, back]
        out["last"][:, sel] = _weighted_chunks(chunks["last"], v, at(p - 1))[:, back]
        for c in range(C):
            i = c if c < len(chunks["mid"]) else 0  # padded as stage_kind_counts pads (_gather): with mid 0
            out["mid"][c][:, sel] = _weighted_chunks(chunks["mid"][i], v, at(chunks["mid_stage"][i]))[:, back]
            out["mid_stage"][c, sel] = chunks["mid_stage"][i]
        if p > 1:  # each chunk's output, sent on, but the last stage's last chunk's (the logits)
            out["out_first"][sel] = at(0).sum(axis=0)[back]
            out["out_last"][sel] = at(p - 1)[:v - 1].sum(axis=0)[back]
            for c in range(C):
                i = c if c < len(chunks["mid"]) else 0
                out["out_mid"][c, sel] = at(chunks["mid_stage"][i]).sum(axis=0)[back]
        out["embedding"][sel] = at(0)[0][back]  # the first stage's first chunk: the embedding's
        lo = at(p - 1)[v - 1]
        out["loss"][sel] = (np.where((su == INTERLEAVED) | (su == ONE_F_ONE_B) | (su == ZERO_BUBBLE_H1) | (su == DUALPIPE),
                                     np.minimum(lo, 1.0), lo) if p > 1 else np.ones(len(mu)))[back]
    shape = configs.shape
    return {"first": out["first"].reshape((K,) + shape), "last": out["last"].reshape((K,) + shape),
            "mid": out["mid"].reshape((C, K) + shape), "mid_stage": out["mid_stage"].reshape((C,) + shape),
            "loss": out["loss"].reshape(shape), "embedding": out["embedding"].reshape(shape),
            "outputs": {"first": out["out_first"].reshape(shape), "last": out["out_last"].reshape(shape),
                        "mid": out["out_mid"].reshape((C,) + shape)}}


def microbatch_group(pp, m, group=0) -> np.ndarray:
    """N, the contiguous micro-batches a virtual stage runs before the next [2][9]: the plan's
    `group` where it is > 0 (PlanArrays.mbg: Job.microbatch_group, Megatron-LM's
    --microbatch-group-size-per-virtual-pipeline-stage [10], as given: plan rule INTERLEAVED_M
    checks it); else pp where pp divides m (Megatron-LM's default, its only choice under the
    INTERLEAVED_M rule); m where m < 2 pp (one group: fewer than pp micro-batches included,
    Llama 3's schedule); else the smallest N in [pp, 2 pp] that leaves a last group of 0 or >= pp
    micro-batches (Megatron-LM schedules.py's rule for that flag: no dependency bubble; one
    exists there for every m >= 2 pp up to 40 pp, pp <= 129, by enumeration), or m where none
    does. The smallest such N holds the fewest micro-batches in flight (warm-up
    2(p - r - 1) + (v - 1) N). int64, broadcast over pp, m and group."""
    p, m, g = np.broadcast_arrays(np.asarray(pp, dtype=np.int64), np.asarray(m, dtype=np.int64),
                                  np.asarray(group, dtype=np.int64))
    p1 = np.maximum(p, 1)
    n = np.where(g > 0, g, np.where(m % p1 == 0, p1, m))
    hard = (m % p1 != 0) & (m >= 2 * p1) & (g <= 0)
    ps, ms = p1[hard][:, None], m[hard][:, None]
    J = np.arange(int(np.max(p1, initial=1)) + 1, dtype=np.int64)[None, :]
    N = ps + J
    ok = (J <= ps) & ((ms % N == 0) | (ms % N >= ps))
    pick = N[np.arange(len(N)), np.argmax(ok, axis=1)] if N.size else np.zeros(0, dtype=np.int64)
    n = n.copy()
    n[hard] = np.where(ok.any(axis=1), pick, ms[:, 0])
    return n


def _chunk_inflight(p: int, v: int, s: int, m, schedule, group=0, n_group=None) -> np.ndarray:
    """Micro-batches in flight per model chunk, (v, n) for chunks c = 0 .. v - 1, at stage s's
    peak (stage_inflight_kinds); array operations over the chunks, whatever v. Interleaved: F =
    min(2(p - s - 1) + (v - 1) N + 1, m v) forwards, in groups of N = microbatch_group(p, m,
    group) contiguous micro-batches [2][5][9][10] (N = p: Megatron-LM's default). Chunk c holds
    (F // N v) N + min(max(F mod N v - c N, 0), N): exact for a last group shorter than N, since
    F < v N + p (N >= p) reaches at most p - 1 forwards into the second group, all of its first
    chunk, and a group holds >= p micro-batches (the INTERLEAVED_M rule) [10]. n_group: that
    microbatch_group, where the caller has it (stage_inflight_kinds: once for every stage)."""
    m = np.asarray(m, dtype=np.float64)
    if p == 1:
        return np.ones((v,) + m.shape)
    N = (microbatch_group(p, m.astype(np.int64), group) if n_group is None else n_group).astype(np.float64)
    F = np.minimum(2.0 * (p - s - 1) + (v - 1.0) * N + 1.0, m * v)
    full, rem = np.floor(F / (N * v)), np.mod(F, N * v)
    c = np.arange(v, dtype=np.float64).reshape((v,) + (1,) * m.ndim)
    inter = full * N + np.clip(rem - c * N, 0.0, N)
    one = np.where(schedule == GPIPE, m, np.where(schedule == ZERO_BUBBLE_H1, np.minimum(m, p),
                                                  np.where(schedule == DUALPIPE, np.minimum(m, p + 1.0), np.minimum(m, p - s))))
    return np.where(schedule == INTERLEAVED, inter, one)


def _weighted_chunks(chunks, v: int, counts):
    """sum over chunks c of (micro-batches in flight in chunk c: counts (v, n), _chunk_inflight) x
    (its layers of each kind): (K, n). Summed chunk by chunk in order (a running sum along the
    chunk axis: the same additions as a loop over c from 0, in the same order)."""
    per_chunk = np.asarray(chunks, dtype=np.float64)[:v, :, None] * counts[:, None, :]  # (v, K, n)
    if v == 0:
        return np.zeros((np.shape(chunks)[1], np.shape(counts)[-1]))
    return np.cumsum(per_chunk, axis=0)[-1]


class _Configs:
    """The distinct (pp, vpp, split_emb, split_loss, split_front, split_first, split_last) of a plan
    array, found in one pass (a search holds a million plans but a few dozen configurations): a
    dense key over their small ranges (the first / last stage layers, a job's constants, by their
    few distinct values)."""

    def __init__(self, plan, microbatches: bool = True):
        # microbatches: the plans' shape read from plan.microbatches too (false: from the split's own fields alone, for
        # a caller on memory's keyed model-state groups, whose plan holds STATE_FIELDS only: stage_end_layers)
        front_ = getattr(plan, "split_front", 0)
        first_, last_ = getattr(plan, "split_first", 0), getattr(plan, "split_last", 0)
        self.shape = np.broadcast(plan.pp, plan.vpp, plan.split_emb, plan.split_loss, front_, first_, last_,
                                  *((plan.microbatches,) if microbatches else ())).shape
        pp, vpp, e, l_, f, fs, ls_ = (np.broadcast_to(np.asarray(x, dtype=np.int64), self.shape).ravel()
                                      for x in (plan.pp, plan.vpp, plan.split_emb, plan.split_loss, front_, first_, last_))
        V, N = int(vpp.max(initial=1)) + 1, int(l_.max(initial=1)) + 1  # split_loss may count N > 1 layers
        F = 3  # the split codes SPLIT_TRIM_ENDS, SPLIT_FRONT, SPLIT_BISECTION
        key = (((pp * V + vpp) * 2 + e) * N + l_) * F + f
        fv, fi = _distinct(fs)
        lv, li = _distinct(ls_)
        A, B = len(fv), len(lv)
        key = (key * A + np.ravel(fi)) * B + np.ravel(li)
        present = np.zeros(int(key.max(initial=0)) + 1, dtype=bool)
        present[key] = True
        uniq = np.flatnonzero(present)
        self.inverse = (np.cumsum(present) - 1)[key]
        rows = []
        for k in uniq:
            k, b = divmod(int(k), B)
            k, a = divmod(k, A)
            rows.append((k // F // N // 2 // V, k // F // N // 2 % V, k // F // N % 2, k // F % N, k % F,
                         int(fv[a]), int(lv[b])))
        self.rows = rows


def _distinct(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, each element's index among them) of a 1-d int64 array, without a sort where it
    holds one value (a job's first / last stage layers: every candidate's the same)."""
    lo, hi = (int(x.min()), int(x.max())) if x.size else (0, 0)
    if lo == hi:
        return np.array([lo], dtype=np.int64), np.zeros(x.shape, dtype=np.int64)
    return np.unique(x, return_inverse=True)


def _pipeline_configs(plan) -> _Configs:
    return _Configs(plan)


def _gather(per, configs, K, reduce_chunks) -> dict:
    """stage_kind_counts' arrays from each configuration's chunk kind counts."""
    shape = configs.shape
    C = max(len(p["mid"]) for p in per)
    inv = configs.inverse
    out = {st: np.stack([reduce_chunks(p[st]) for p in per], axis=1)[:, inv].reshape((K,) + shape)
           for st in ("first", "last")}
    mids = np.stack([np.stack([reduce_chunks(x) for x in p["mid"]] + [reduce_chunks(p["mid"][0])] * (C - len(p["mid"])))
                     for p in per], axis=2)  # (C, K, U)
    stages = np.array([p["mid_stage"] + [p["mid_stage"][0]] * (C - len(p["mid"])) for p in per], dtype=np.int64).T
    out["mid"] = mids[:, :, inv].reshape((C, K) + shape)
    out["mid_stage"] = stages[:, inv].reshape((C,) + shape)
    return out


def chunk_layers(num_layers: int, p: int, v: int, e: int = 0, l_: int = 0, front: int = 0, first: int = 0,
                 last: int = 0) -> list[int]:
    """Transformer layers of each model chunk j = 0 .. p v - 1 (chunk j runs on stage j mod p
    [7]): c = ceil(L' / (p v)) each, the first e + ceil(r / 2) fewer and the last l + floor(r / 2)
    fewer, r = p v c - L' the layers the split leaves over (stage_layers' rule, chunk by chunk).
    A negative entry means the split cannot place the layers (the caller refuses it). front: the
    split code (stage_layers' split_front): 1 the front-loaded rule, floor(L' / (p v)) each, one
    more on each of the first L' mod (p v) chunks, the first e and the last l fewer; 2 DeepSpeed
    a12aaedc's bisection [11] (bisection_stage_units), the first e and the last l fewer.
    first / last > 0: Megatron-LM's --decoder-first/last-pipeline-num-layers [14], each of a rank's v
    chunks 1/v of the rank's layers (stage_layers'), whatever e, l and front (the rules refuse them
    together)."""
    L = num_layers
    if first > 0 or last > 0:
        left = p - (first > 0) - (last > 0)
        each = (L - max(first, 0) - max(last, 0)) // left if left > 0 else 0
        rank = [first if s == 0 and first > 0 else last if s == p - 1 and last > 0 else each for s in range(p)]
        return [rank[j % p] // v for j in range(p * v)]
    if front == SPLIT_BISECTION:  # DeepSpeed a12aaedc's [11], chunk by chunk (chunk j on stage j mod p)
        per = bisection_chunk_units(L + e + l_, p * v)
        return [x - (e if j == 0 else 0) - (l_ if j == p * v - 1 else 0) for j, x in enumerate(per)]
    if front:
        base, r = divmod(L + e + l_, p * v)
        return [base + (j < r) - (e if j == 0 else 0) - (l_ if j == p * v - 1 else 0) for j in range(p * v)]
    c = -(-(L + e + l_) // (p * v))
    slack = max(p * v * c - (L + e + l_), 0)
    def_first, def_last = e + (slack + 1) // 2, l_ + slack // 2
    return [c - (def_first if j == 0 else 0) - (def_last if j == p * v - 1 else 0) for j in range(p * v)]


def layers_per_stage(units, stages) -> tuple:
    """(layers_per_stage, spelled): torchtitan's one-number split, ceil(units / stages) layers a stage (units the
    layers plus the ends the plan counts), and where it gives exactly `stages` stages (ceil(units / it) == stages,
    torchtitan distributed/pipeline_parallel.py generate_llm_fqn_per_model_part); elsewhere only per-stage module
    lists (module_fqns_per_model_part) spell the split. Ints or int64 arrays alike (export._torchtitan, start-up rule
    TORCHTITAN03_STAGE_LISTS)."""
    lps = -(-units // stages)
    return lps, -(-units // lps) == stages


def chunk_starts(num_layers: int, p: int, v: int, e: int = 0, l_: int = 0, front: int = 0, first: int = 0,
                 last: int = 0) -> np.ndarray:
    """Global index of each model chunk j = 0 .. p v - 1's first transformer layer, then L (p v + 1 entries, int64):
    chunk_layers' lengths laid one after another (chunk j on stage j mod p, transformer_layer.py l. 65-180
    get_transformer_layer_offset: vp-major order [7]), a negative length taken as 0 and every start clamped to L, so
    that chunk j holds the layers [start_j, start_j+1) the model has. With one stage the whole model (chunk 0 all
    of it). The one placement every per-stage count reads (stage_table, _stage_chunks).

    Where chunk_layers gives an end chunk fewer than no layers (a split that cannot place the model: startup.
    split_overdrawn, plan rule SPLIT_UNITS) the clamp keeps the L layers the model has, the last chunks short, where
    stage_layers' closed form floors each end stage at one layer (1 - e) and counts layers the model lacks."""
    if p == 1:
        return np.array([0] + [int(num_layers)] * v, dtype=np.int64)
    length = np.maximum(np.asarray(chunk_layers(num_layers, p, v, e, l_, front, first, last), dtype=np.int64), 0)
    return np.minimum(np.concatenate([[0], np.cumsum(length)]), int(num_layers))


def stage_table(num_layers: int, plan, ranges=None) -> tuple:
    """(configs, rows): the distinct pipeline configurations of a plan's split fields (_Configs(microbatches=False):
    pp, vpp, the counted ends, the split code, the first / last stage layers; a search's million candidates hold a
    few dozen) and rows (U, P) int64, the transformer layers stage k = 0 .. P - 1 of configuration u holds (P the
    largest pp; 0 past its own pp): chunk j = c p + s of chunk_starts on stage s [7], counting only the layers whose
    global index lies in one of `ranges` ((lo, hi) pairs, disjoint; None: every layer). The one per-stage layer
    table: memory.recompute_fraction, plan_stage_layer_table and stage_end_layers read it. A caller reduces the rows
    and gathers them per plan (per_plan: rows[configs.inverse]); a Python loop over the configurations, never over
    the plans."""
    L = int(num_layers)
    ranges = ((0, L),) if ranges is None else tuple((int(lo), int(hi)) for lo, hi in ranges)
    configs = _Configs(plan, microbatches=False)  # the split's fields only (memory's model-state groups call it too)
    P = max([row[0] for row in configs.rows] + [1])
    rows = np.zeros((len(configs.rows), P), dtype=np.int64)
    for u, (p, v, e, l_, front, first, last) in enumerate(configs.rows):
        start = chunk_starts(L, p, v, e, l_, front, first, last)
        a, b = start[:-1], start[1:]
        per = sum(np.clip(np.minimum(b, hi) - np.maximum(a, lo), 0, None) for lo, hi in ranges)
        rows[u, :p] = per.reshape(v, p).sum(axis=0)  # chunk j = c p + s on stage s
    return configs, rows


def per_plan(configs, rows) -> np.ndarray:
    """A stage_table's rows (U, ...) gathered per plan: configs.shape + rows.shape[1:]."""
    rows = np.asarray(rows)
    return rows[configs.inverse].reshape(configs.shape + rows.shape[1:])


def stage_end_layers(num_layers: int, plan, n0: int, n1: int) -> tuple:
    """(stage 0, the middle stage with the most, stage p - 1) of the layers whose global index is below n0 or at
    least L - n1 (Megatron-Core's bf16 layers of an fp8 / fp4 plan, --num-layers-at-start-in-bf16 n0 and
    -at-end- n1: megatron/core/fp8_utils.py @d98e8a64 l. 711-727 is_first_last_bf16_layer, on the *global*
    layer index transformer_block.py l. 343-356 passes), each stage holding the layers of its own model chunks:
    chunk j = 0 .. p v - 1 on stage j mod p holds chunk_layers' consecutive layers (transformer_layer.py l. 65-180
    get_transformer_layer_offset: vp-major order), so with vpp > 1, or a first chunk shorter than n0, some of
    the first n0 sit on stage 1 and later (32 layers on 4 x vpp 2, chunks of 4, n0 6: stage 0 holds 0-3 and
    16-19, 4 of them; stage 1 holds 4-7, 2). The middle entry is 0 with fewer than 3 stages; with one stage all
    three are the whole model's min(n0 + n1, L). The per-stage table (stage_table) over those two index ranges,
    reduced per distinct pipeline configuration and gathered per plan."""
    L = int(num_layers)
    lo_end = max(L - int(n1), int(n0))  # the end range [lo_end, L), less what the start range already holds
    configs, rows = stage_table(L, plan, ((0, int(n0)), (lo_end, L)))
    p = np.array([row[0] for row in configs.rows], dtype=np.int64)[:, None]
    k = np.arange(rows.shape[1], dtype=np.int64)[None, :]
    ends = np.stack([rows[:, 0], np.where((k >= 1) & (k < p - 1), rows, 0).max(axis=1),
                     np.take_along_axis(rows, p - 1, axis=1)[:, 0]], axis=1)
    return tuple(per_plan(configs, ends[:, i]) for i in range(3))


def stage_end_kinds(ll, plan, n0: int, n1: int, rerun: bool = False, cap=None) -> tuple:
    """stage_end_layers by layer kind: (stage 0, the middle stage with the most, stage p - 1) of (K, ...) counts of
    each kind among the layers whose global index is below n0 or at least L - n1 (the same ranges, chunk by chunk,
    fp8_utils.py @d98e8a64 l. 711-727), from the layer list's own placement of kinds (ll.count), so that a model
    whose first layers are of another kind (DeepSeek's first dense layers before its MoE ones) prices the bf16
    layers it really holds. The middle entry: the middle stage holding the most bf16 layers (the first such stage
    on ties), zeros with fewer than 3 stages; with one stage all three are the whole model's.

    rerun True: of those, the ones full recompute re-runs, on the same three stages (the middle one still the stage
    holding the most bf16 layers): Megatron-LM's block method checkpoints the layers at index below
    --recompute-num-layers n of each model chunk's own list (megatron/core/recompute.py @d98e8a64 l. 167-181,
    `layer_idx < recompute_num_layers` over the chunk's num_layers_per_pipeline_rank = len(self.layers),
    transformer_block.py l. 334), so a chunk's first n layers: cap is a GPU's recompute_layers (the readers' n x vpp,
    trainers/megatron.py), n = cap // vpp a chunk; cap None (the uniform method, l. 157-166: every layer, in groups
    of n) every bf16 layer. (Under fp8 / fp4 the block method shifts its window past layers whose input needs no
    gradient, l. 173-180: in training every chunk's input does, the embedding's output or the received tensor.)"""
    L = int(ll.num_layers)
    lo_end = max(L - int(n1), int(n0))
    configs = _Configs(plan, microbatches=False)
    K = len(ll.kinds)
    rows = []
    for p, v, e, l_, front, first, last in configs.rows:
        start = chunk_starts(L, p, v, e, l_, front, first, last)  # the one placement (stage_table's)
        a, b = start[:-1], start[1:]
        # (K, p v): each chunk's layers of each kind below n0, and at or above lo_end
        per = ll.count(a, np.minimum(b, n0)) + ll.count(np.maximum(a, lo_end), b)
        stage = per.reshape(K, v, p).sum(axis=1)  # chunk j = c p + s on stage s
        k_mid = 1 + int(np.argmax(stage[:, 1:p - 1].sum(axis=0))) if p > 2 else None
        if rerun and cap is not None:  # the block method's window: each chunk's first cap // v layers
            top = np.minimum(b, a + int(cap) // (v if p > 1 else 1))  # one stage: one chunk (chunk_starts)
            per = ll.count(a, np.minimum(top, n0)) + ll.count(np.maximum(a, lo_end), top)
            stage = per.reshape(K, v, p).sum(axis=1)
        mid = stage[:, k_mid] if p > 2 else np.zeros(K)
        rows.append((stage[:, 0], mid, stage[:, p - 1]))
    table = np.asarray(rows, dtype=np.float64)  # (U, 3, K)
    table = table[configs.inverse]
    return tuple(np.moveaxis(table[:, i, :], -1, 0).reshape((K,) + configs.shape) for i in range(3))


def _stage_chunks(ll, p: int, v: int, e: int, l_: int, front: int = 0, first: int = 0, last: int = 0) -> dict:
    """Per stage, the layers of each kind in each of its model chunks, (v, K): stage 0
    ("first"), stage p - 1 ("last"), and the middle stages' distinct chunk compositions ("mid",
    each first held by stage "mid_stage"; stage 1's with p <= 2), for one (pp, vpp, split_emb,
    split_loss) (stage_kind_counts' placement)."""
    L = ll.num_layers
    if p == 1:
        one = ll.totals[None] / v
        return {"first": one, "last": one, "mid": [one], "mid_stage": [1]}
    start = chunk_starts(L, p, v, e, l_, front, first, last)
    chunks = ll.count(start[:-1], start[1:]).T  # (p v, K)

    def stage(s):
        return chunks[s::p]

    mid: dict = {}
    for s in range(1, max(p - 1, 2)):
        mid.setdefault(stage(s).tobytes(), (s, stage(s)))
    return {"first": stage(0), "last": stage(p - 1), "mid": [x for _, x in mid.values()],
            "mid_stage": [s for s, _ in mid.values()]}


def dualpipe_pairs(plan) -> np.ndarray:
    """Where a plan runs DualPipe [8] on more than one stage: each rank then holds two stages,
    r and p - 1 - r (the memory's and the step's pairing; bool, broadcast over the plan)."""
    return (np.asarray(plan.schedule) == DUALPIPE) & (np.asarray(plan.pp) > 1)


def dualpipe_alone_share(pp, m):
    """Share of a DualPipe rank's forward (and backward) chunks that run without a partner
    chunk to overlap with [8]: dualpipe.py DualPipe.step on rank 0 (half_rank 0, the most):
    steps 1-3 run 2(p/2 - 1) + 2 + (p/2 - 1) forwards alone, steps 4-5 pair
    2(m/2 - p + 1) + (p/2 - 1) = m - 3p/2 + 1 forwards with backwards, so 3p/2 - 1 of its m
    forwards run alone (a middle rank: p + 1). At most all of them."""
    pp = np.asarray(pp, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    return np.minimum(1.5 * pp - 1.0, m) / np.maximum(m, 1.0)


def inflight_microbatches(pp, m, vpp, schedule, stage=0, group=0):
    """Micro-batches whose activations a stage holds at its peak, in units of one
    micro-batch of the stage's L/p layers (stage 0 by default, the most loaded one).

    GPipe: m [1]. 1F1B: min(m, p - s) [2]. ZB-H1: min(m, p) on every stage [4] (an upper
    bound: after its B pass a micro-batch keeps only W's inputs, [4] Table 1).
    Interleaved: min(m*v, 2(p-s-1) + (v-1)N + 1) / v chunk-micro-batches [2][5], N =
    microbatch_group(pp, m, group) (p where p divides m and no group is given [10]); with N = p,
    on stage 0 that is min(m, p + (p-1)/v), equal to Korthikanti's p (1 + (p-1)/(p v)) [3] once
    m >= 2p (at m = p Megatron runs every forward first and the peak is m = p).
    """
    pp = np.asarray(pp, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    vpp = np.asarray(vpp, dtype=np.float64)
    s = np.asarray(stage, dtype=np.float64)
    schedule = np.asarray(schedule)
    one_f = np.minimum(m, pp - s)
    N = microbatch_group(pp, m.astype(np.int64), group).astype(np.float64)  # pp where pp divides m [9], or the job's [10]
    inter = np.minimum(m * vpp, 2.0 * (pp - s - 1.0) + (vpp - 1.0) * N + 1.0) / vpp
    zb = np.minimum(m, pp)
    dual = np.where(pp > 1.0, np.minimum(m, pp + 1.0), np.minimum(m, 1.0))  # [8] Table 2: PP + 1
    return np.where(
        schedule == GPIPE,
        m,
        np.where(schedule == INTERLEAVED, inter, np.where(schedule == ZERO_BUBBLE_H1, zb,
                                                          np.where(schedule == DUALPIPE, dual, one_f))),
    )


# --------------------------------------------------------------------------- simulator


@dataclass(frozen=True)
class Pass:
    """One pass of one micro-batch through one model chunk on one stage."""

    stage: int
    kind: str  # "F" forward, "B" backward (input-gradient only when W is split off), "W" weight-gradient
    microbatch: int
    chunk: int
    start: Fraction
    end: Fraction


@dataclass(frozen=True)
class Simulation:
    """What a schedule does: every pass's start and end, and the per-stage summary.

    `peak_stored[s]` is in micro-batches of a whole stage's layers (a chunk pass counts 1/v);
    `peak_chunks[s]` counts chunk-micro-batches. `idle_fraction[s]` is idle time over the
    step; `bubble` is idle over useful time, the quantity `bubble_fraction` predicts.
    """

    schedule: int
    stages: int
    microbatches: int
    vpp: int
    t_f: Fraction
    t_b: Fraction
    t_w: Fraction  # 0 when the backward pass is not split
    passes: tuple[Pass, ...]
    step: Fraction
    busy: tuple[Fraction, ...]
    peak_chunks: tuple[int, ...]

    @property
    def step_time(self) -> float:
        return float(self.step)

    @property
    def idle_fraction(self) -> tuple[float, ...]:
        return tuple(float(1 - b / self.step) for b in self.busy)

    @property
    def peak_stored(self) -> tuple[Fraction, ...]:
        return tuple(Fraction(c, self.vpp) for c in self.peak_chunks)

    @property
    def bubble(self) -> float:
        """Idle over useful time on the busiest stage (all stages do the same work)."""
        b = max(self.busy)
        return float((self.step - b) / b)

    @property
    def title(self) -> str:
        return SCHEDULE_TITLES[self.schedule] + (f" (v={self.vpp})" if self.vpp > 1 else "")


def _exact(x, what: str) -> Fraction:
    """A duration as an exact fraction (1.3 -> 13/10, not the nearest binary float)."""
    if isinstance(x, Fraction):
        f = x
    elif isinstance(x, int):
        f = Fraction(x)
    else:
        try:
            f = Fraction(repr(float(x)))
        except (TypeError, ValueError, OverflowError):
            raise PlannerError(f"{what} must be a number, got {x!r}", f"give {what} as a positive number") from None
    if not f > 0:
        raise PlannerError(f"{what} must be positive, got {x}", f"give {what} as a time greater than 0")
    return f


def _positive_int(x, what: str, hint: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise PlannerError(f"{what} must be a positive integer, got {x!r}", hint)
    return int(x)


def schedule_code(name) -> int:
    """'1f1b' -> ONE_F_ONE_B; also accepts a code. Raises PlannerError naming the valid ones."""
    if isinstance(name, (int, np.integer)) and not isinstance(name, bool) and int(name) in SCHEDULE_NAMES:
        return int(name)
    key = str(name).strip().lower().replace("_", "-")
    key = {"zbh1": "zb-h1", "zb1p": "zb-h1", "interleaved-1f1b": "interleaved", "pipedream-flush": "1f1b"}.get(key, key)
    if key not in SCHEDULE_CODES:
        raise PlannerError(f"unknown pipeline schedule {name!r}", "--schedule must be one of: " + ", ".join(SCHEDULE_CODES))
    return SCHEDULE_CODES[key]


def _order_gpipe(p, m, s):
    """Every forward, then every backward [1] (seed sec. 5.3 `gpipe`)."""
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def _order_1f1b(p, m, s):
    """p-s-1 warm-up forwards, then one forward, one backward [2] (seed sec. 5.3 `one_f_one_b`)."""
    warm = min(p - s - 1, m)
    order = [("F", i, 0) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            order.append(("F", f, 0))
            f += 1
        order.append(("B", b, 0))
        b += 1
    return order


def _order_zbh1(p, m, s):
    """1F1B's order with each backward split into B then W, and stage s keeping s W passes
    pending (run later, in the tail bubble), so that every stage has p micro-batches in flight
    like 1F1B's first stage [4] sec. 2.1."""
    warm = min(p - s - 1, m)
    order = [("F", i, 0) for i in range(warm)]
    f = warm
    b = w = 0
    while b < m:
        if f < m:
            order.append(("F", f, 0))
            f += 1
        order.append(("B", b, 0))
        b += 1
        if b - w > s:
            order.append(("W", w, 0))
            w += 1
    order += [("W", i, 0) for i in range(w, m)]
    return order


def _order_interleaved(p, m, v, r, group=None):
    """Megatron-LM's interleaved 1F1B on rank r [2]: warm-up forwards, then one forward and
    one backward per step, then the remaining backwards; virtual micro-batch k maps to
    (micro-batch, chunk) in groups of N = `group` micro-batches per chunk (default p), the last
    group taking the rest (Megatron-LM schedules.py get_schedule_table and
    get_pp_rank_microbatches: warm-up 2(p - r - 1) + (v - 1) N; Llama 3's N set freely [9])."""
    n = p if group is None else group
    total = m * v
    warm = 2 * (p - r - 1) + (v - 1) * n
    warm = min(warm, total)
    table = []
    for lo in range(0, m, n):
        hi = m if lo + n >= m else lo + n
        table += [(mb, c) for c in range(v) for mb in range(lo, hi)]

    def fwd(k):
        return table[k]

    def bwd(k):
        mb, c = table[k]
        return mb, v - 1 - c

    order = [("F", *fwd(k)) for k in range(warm)]
    for k in range(total - warm):
        order.append(("F", *fwd(k + warm)))
        order.append(("B", *bwd(k)))
    order += [("B", *bwd(k)) for k in range(total - warm, total)]
    return order


def simulate(stages, microbatches, schedule="1f1b", vpp=1, t_f=1, t_b=2, t_w=None, group=None) -> Simulation:
    """Run a pipeline schedule and return every pass's timing and per-stage summary.

    stages: pipeline stages p; microbatches: m per step; vpp: model chunks per stage v
    (interleaved only, which needs p >= 2, v >= 2 and m % p == 0, as in Megatron-LM, unless
    `group` N, the contiguous micro-batches of a virtual stage, is given: then any 1 <= N <= m,
    Llama 3's schedule [9]);
    t_f, t_b: forward and whole backward time of one micro-batch through a whole stage (a
    chunk takes 1/v of it); t_w: ZB-H1's weight-gradient part of t_b (default
    t_b * DEFAULT_W_FRACTION). Raises PlannerError on an invalid combination.
    """
    code = schedule_code(schedule)
    p = _positive_int(stages, "--pp (pipeline stages)", "pass --pp 1 or more")
    m = _positive_int(microbatches, "--microbatches (micro-batches per step)", "pass --microbatches 1 or more")
    v = _positive_int(vpp, "--vpp (model chunks per stage)", "pass --vpp 1, or 2 or more with --schedule interleaved")
    tf = _exact(t_f, "--tf (forward time)")
    tb = _exact(t_b, "--tb (backward time)")
    if group is not None:
        group = _positive_int(group, "--group (contiguous micro-batches of a virtual stage)", "pass --group 1 to m")
        if code != INTERLEAVED or group > m:
            raise PlannerError(f"--group {group} needs the interleaved schedule and at most m={m} micro-batches",
                               "pass --group between 1 and the micro-batch count, with --schedule interleaved")
    _check_schedule(code, p, m, v, group)
    tw = _weight_gradient_time(code, tb, t_w)
    n_passes = p * m * v * (3 if code == ZERO_BUBBLE_H1 else 2)
    if n_passes > MAX_PASSES:
        raise PlannerError(
            f"the simulation would have {n_passes} passes (stages x micro-batches x chunks), more than {MAX_PASSES}",
            "use fewer stages, micro-batches or chunks; the closed forms need no simulation",
        )
    dur = {"F": tf / v, "B": (tb - tw) / v, "W": tw / v}
    passes, free, busy, peak = _run(code, _stage_orders(code, p, m, v, group), p, v, dur)
    return Simulation(
        schedule=code, stages=p, microbatches=m, vpp=v, t_f=tf, t_b=tb, t_w=tw,
        passes=tuple(sorted(passes, key=lambda x: (x.stage, x.start))),
        step=max(free), busy=tuple(busy), peak_chunks=tuple(peak),
    )


def _check_schedule(code: int, p: int, m: int, v: int, group=None) -> None:
    """PlannerError where the schedule cannot run p stages, m micro-batches, v chunks."""
    if code not in SIMULATED:
        raise PlannerError(
            f"the simulator does not run the {SCHEDULE_TITLES[code]} schedule (its bubble and memory are closed forms, "
            "planner/pipeline.py [8])",
            "use --schedule " + " | ".join(SCHEDULE_NAMES[c] for c in SIMULATED),
        )
    if v > 1 and code != INTERLEAVED:
        raise PlannerError(
            f"--vpp {v} needs the interleaved schedule, not {SCHEDULE_NAMES[code]}",
            "use --schedule interleaved with --vpp 2 or more, or --vpp 1",
        )
    if code == INTERLEAVED and (p < 2 or v < 2):
        raise PlannerError(
            f"the interleaved schedule needs --pp 2 or more and --vpp 2 or more (got --pp {p}, --vpp {v})",
            "give --vpp 2 or more model chunks per stage, or use --schedule 1f1b",
        )
    if code == INTERLEAVED and m % p and group is None:
        raise PlannerError(
            f"interleaved 1F1B needs --microbatches to be a multiple of --pp: m={m}, p={p}",
            f"Megatron-LM's interleaved schedule requires m % p == 0; try --microbatches {p * max(1, -(-m // p))}",
        )


def _weight_gradient_time(code: int, tb: Fraction, t_w) -> Fraction:
    """The W pass's time: ZB-H1's part of the backward (given, or DEFAULT_W_FRACTION of it),
    0 for the schedules that do not split the backward pass."""
    if code == ZERO_BUBBLE_H1:
        tw = tb * Fraction(DEFAULT_W_FRACTION).limit_denominator() if t_w is None else _exact(t_w, "--tw (weight-gradient time)")
        if not tw < tb:
            raise PlannerError(
                f"--tw (weight-gradient time) {float(tw):g} must be less than --tb (whole backward) {float(tb):g}",
                "--tb is the whole backward pass, B + W; give --tw between 0 and --tb",
            )
        return tw
    if t_w is not None:
        raise PlannerError(
            f"--tw splits the backward pass, which only the zb-h1 schedule does (got --schedule {SCHEDULE_NAMES[code]})",
            "drop --tw, or use --schedule zb-h1",
        )
    return Fraction(0)


def _stage_orders(code: int, p: int, m: int, v: int, group=None) -> list[list[tuple[str, int, int]]]:
    """Each stage's ordered (kind, micro-batch, chunk) passes under the schedule."""
    if code == GPIPE:
        return [_order_gpipe(p, m, s) for s in range(p)]
    if code == ONE_F_ONE_B:
        return [_order_1f1b(p, m, s) for s in range(p)]
    if code == ZERO_BUBBLE_H1:
        return [_order_zbh1(p, m, s) for s in range(p)]
    return [_order_interleaved(p, m, v, s, group) for s in range(p)]


def _run(code: int, orders, p: int, v: int, dur: dict):
    """The list scheduler: each stage starts its next pass once the stage is free and the pass
    it depends on has finished. Returns (passes, each stage's finish time, busy time, peak
    chunk-micro-batches held)."""
    last = p * v - 1  # the last virtual stage
    done: dict[tuple[str, int, int], Fraction] = {}
    free = [Fraction(0)] * p
    nxt = [0] * p
    live = [0] * p
    peak = [0] * p
    busy = [Fraction(0)] * p
    passes: list[Pass] = []
    releases = "W" if code == ZERO_BUBBLE_H1 else "B"  # the pass after which activations are freed
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for s in range(p):
            order = orders[s]
            while nxt[s] < len(order):
                kind, mb, c = order[nxt[s]]
                vs = c * p + s
                if kind == "F":
                    dep = ("F", vs - 1, mb) if vs > 0 else None
                elif kind == "B":
                    dep = ("B", vs + 1, mb) if vs < last else ("F", vs, mb)
                else:
                    dep = ("B", vs, mb)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep]) if dep is not None else free[s]
                end = start + dur[kind]
                free[s] = done[(kind, vs, mb)] = end
                busy[s] += dur[kind]
                passes.append(Pass(s, kind, mb, c, start, end))
                live[s] += 1 if kind == "F" else -1 if kind == releases else 0
                peak[s] = max(peak[s], live[s])
                nxt[s] += 1
                left -= 1
                progressed = True
        if not progressed:  # a schedule whose order waits on itself: a bug here, not bad input
            raise RuntimeError(f"{SCHEDULE_TITLES[code]} schedule deadlocked at passes {nxt}")
    return passes, free, busy, peak


# --------------------------------------------------------------------------- text timeline

_FWD = "0123456789"
_BWD = "abcdefghijklmnopqrstuvwxyz"
_WGT = _BWD.upper()


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


def _quantum(fracs) -> Fraction:
    """The largest time unit that divides every duration exactly."""
    num, den = 0, 1
    for f in fracs:
        if f == 0:
            continue
        # gcd(a/b, c/d) = gcd(a*d, c*b) / (b*d)
        num, den = gcd(num * f.denominator, f.numerator * den), den * f.denominator
        g = gcd(num, den)
        num, den = num // g, den // g
    return Fraction(num, den)


def timeline_text(sim: Simulation) -> str:
    """The seed's sec. 5.3 text timeline: a title line, one row per stage (plus a `chunk:` row
    per stage when v > 1) with its peak stored micro-batches, and the step summary line."""
    p, v = sim.stages, sim.vpp
    q = _quantum([sim.t_f / v, (sim.t_b - sim.t_w) / v, sim.t_w / v])
    width = int(sim.step / q)
    if width > MAX_TIMELINE_CHARS:
        raise PlannerError(
            f"the text timeline would be {width} characters wide (one character = {_fmt(q)} time units)",
            "use fewer micro-batches, durations that are small multiples of each other (e.g. --tf 1 --tb 2), or --plot",
        )
    rows = [["."] * width for _ in range(p)]
    chunks = [["."] * width for _ in range(p)]
    for x in sim.passes:
        a, b = int(x.start / q), int(x.end / q)
        ch = (_FWD[x.microbatch % 10] if x.kind == "F" else _BWD[x.microbatch % 26] if x.kind == "B"
              else _WGT[x.microbatch % 26])
        rows[x.stage][a:b] = [ch] * (b - a)
        chunks[x.stage][a:b] = [str(x.chunk % 10)] * (b - a)
    w = len(str(p - 1))
    lines = [sim.title]
    for s in range(p):
        label = f"  stage {s:>{w}}: "
        lines.append(f"{label}{''.join(rows[s])}   peak stored: {_fmt(sim.peak_stored[s])}")
        if v > 1:
            lines.append(f"{'chunk: ':>{len(label)}}{''.join(chunks[s])}")
    busy = max(sim.busy)
    total = sim.step
    lines.append(
        f"  step takes {_fmt(total)} units, each stage busy {_fmt(busy)}: idle {1 - float(busy) / float(total):.0%} of the time"
    )
    if q != 1:
        lines.append(f"  one character = {_fmt(q)} time units")
    if sim.schedule == ZERO_BUBBLE_H1:
        lines.append(
            f"  digits forward ({_fmt(sim.t_f)}), letters input-gradient B ({_fmt(sim.t_b - sim.t_w)}), "
            f"capitals weight-gradient W ({_fmt(sim.t_w)})"
        )
    if v > 1:
        lines.append(f"  chunk rows: the model chunk (0..{v - 1}) of each pass; peak stored counts a chunk as 1/{v} micro-batch")
    return "\n".join(lines)


def closed_form(sim: Simulation) -> dict:
    """The cost model's closed forms for the simulated schedule: the bubble's formula and value, and the peak stored
    micro-batches per stage (inflight_microbatches)."""
    code, p, m, v = sim.schedule, sim.stages, sim.microbatches, sim.vpp
    r = float(sim.t_b / sim.t_f)
    wf = float(sim.t_w / sim.t_b) if code == ZERO_BUBBLE_H1 else DEFAULT_W_FRACTION
    formula = {
        GPIPE: "(p-1)/m",
        ONE_F_ONE_B: "(p-1)/m",
        INTERLEAVED: "(p-1)/(v*m)",
        ZERO_BUBBLE_H1: "((p-1)(T_F+T_B) - (min(m,p)-1)min(T_W,T_F,T_B))/(m(T_F+T_B+T_W))",
    }[code]
    return {"bubble_formula": formula,
            "bubble": float(bubble_fraction(p, m, v, code, backward_ratio=r, w_fraction=wf)),
            "peak_stored": [float(inflight_microbatches(p, m, v, code, stage=s)) for s in range(p)]}


def simulation_report(sim: Simulation, with_closed_form: bool = False) -> dict:
    """`planner pipeline --format json|yaml`: the schedule, its durations and step (in the caller's time units, as
    --tf / --tb give them), per stage the busy time, idle fraction and peak stored micro-batches (a chunk pass counts
    1/v), every pass (stage, kind F / B / W, micro-batch, chunk, start, end), and with `with_closed_form` the cost
    model's closed forms. Exact fractions become floats."""
    rep = {"schedule": SCHEDULE_NAMES[sim.schedule], "pp": sim.stages, "microbatches": sim.microbatches,
           "vpp": sim.vpp, "tf_units": float(sim.t_f), "tb_units": float(sim.t_b), "tw_units": float(sim.t_w),
           "step_units": sim.step_time, "bubble": sim.bubble,
           "stages": [{"stage": s, "busy_units": float(sim.busy[s]), "idle_fraction": sim.idle_fraction[s],
                       "peak_stored": float(sim.peak_stored[s])} for s in range(sim.stages)],
           "passes": [{"stage": x.stage, "kind": x.kind, "microbatch": x.microbatch, "chunk": x.chunk,
                       "start_units": float(x.start), "end_units": float(x.end)} for x in sim.passes]}
    if with_closed_form:
        rep["closed_form"] = closed_form(sim)
    return rep


def closed_form_text(sim: Simulation) -> str:
    """The cost model's closed forms next to what the simulation found."""
    cf = closed_form(sim)
    formula, cf_bubble = cf["bubble_formula"], cf["bubble"]
    peaks = ",".join(f"{x:g}" for x in cf["peak_stored"])
    return (
        f"  bubble (idle / useful): simulated {sim.bubble:.4g}, closed form {formula} = {cf_bubble:.4g}\n"
        f"  peak stored per stage: simulated {','.join(_fmt(x) for x in sim.peak_stored)}, closed form {peaks}"
    )
