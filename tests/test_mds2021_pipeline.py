"""Issue 22 (mds2021pp): the pipeline of stack megatron-deepspeed-2021 as DeepSpeed a12aaedc (2021-04-29) runs it.

1. The split: a12aaedc's partition_balanced is a binary search for the least bottleneck over greedy probes
   (deepspeed/runtime/utils.py l. 352-418), not today's dynamic program (@38327e07 l. 583-621, the megatron-deepspeed
   entry's front rule). stack_db pipeline_split bisection; planner/pipeline.py [11] replays the search in closed form.
   The reference below is a12aaedc's own code, copied verbatim (prefix_sum_inc l. 324-335, partition_uniform
   l. 337-349, _lprobe l. 352-384, _rb_partition_balanced l. 387-400, partition_balanced l. 403-418).
2. The sends: a12aaedc's pipe engine partitions the activations under TP and never the gradient (pipe/engine.py
   l. 112-113), with no key to turn it off: stack pipeline_send_partitioned_grads / _switch false, step.py [25].
"""

from __future__ import annotations

from bisect import bisect_left
from math import floor
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from planner import comm
from planner.catalog import load_model, load_stack
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.pipeline import (SPLIT_BISECTION, SPLIT_CODES, SPLIT_FRONT, bisection_chunk_units, chunk_layers,
                              stage_layers)
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES, _deepspeed_split_ends
from planner.step import Collectives, _context

S21 = "megatron-deepspeed-2021"


# ------------------------------------------------- microsoft/DeepSpeed a12aaedc deepspeed/runtime/utils.py, verbatim
def prefix_sum_inc(weights):
    weights_ = [w for w in weights]
    for x in range(1, len(weights_)):
        weights_[x] += weights_[x - 1]
    return weights_


def partition_uniform(num_items, num_parts):
    parts = [0] * (num_parts + 1)
    # First check for the trivial edge case
    if num_items <= num_parts:
        for p in range(num_parts + 1):
            parts[p] = min(p, num_items)
        return parts

    chunksize = floor(num_items / num_parts)
    for p in range(num_parts):
        parts[p] = min(chunksize * p, num_items)
    parts[num_parts] = num_items
    return parts


def _lprobe(weights, num_parts, bottleneck):
    num_items = len(weights)
    total_weight = weights[-1]

    # initialize partitioning
    parts = [0] * (num_parts + 1)
    for p in range(1, num_parts + 1):
        parts[p] = num_items

    bsum = bottleneck  # running sum of target weight for pth partition
    chunksize = num_items // num_parts
    step = chunksize
    for p in range(1, num_parts):
        # Jump to the next bucket
        while (step < num_items) and (weights[step] < bsum):
            step += chunksize

        # Find the end index of partition p
        parts[p] = bisect_left(weights, bsum, lo=step - chunksize, hi=min(step, num_items))
        # Nothing more to partition, return early
        if parts[p] == num_items:
            # See if the current partition is overweight.
            part_size = weights[-1] - weights[parts[p - 1]]
            return parts, part_size < bottleneck

        # Next partition target
        bsum = weights[parts[p] - 1] + bottleneck

    return parts, bsum >= total_weight


def _rb_partition_balanced(weights, num_parts, eps):
    total_weight = weights[-1]
    lower = total_weight / num_parts  # best case heaviest partition
    upper = total_weight  # worst case heaviest partition

    # Do a binary search for the best partitioning
    while upper > lower + eps:
        mid = lower + ((upper - lower) / 2)
        parts, success = _lprobe(weights, num_parts, mid)
        if success:
            upper = mid
        else:
            lower = mid + eps
    return upper


def partition_balanced(weights, num_parts, eps=1e-3):
    num_items = len(weights)
    # First check for the trivial edge case
    if num_items <= num_parts:
        return partition_uniform(num_items, num_parts)

    weights_ = prefix_sum_inc(weights)

    # Find the smallest bottleneck (weight of heaviest partition)
    bottleneck = _rb_partition_balanced(weights_, num_parts, eps=eps)

    # Now compute that partitioning
    parts, success = _lprobe(weights_, num_parts, bottleneck)
    assert success

    return parts
# ------------------------------------------------------------------------------------------------------------------


def _gpt_model_pipe_2021(L: int, pp: int, lead: int = 3, trail: int = 4) -> list[int]:
    """Transformer layers a12aaedc's _partition_layers (pipe/module.py l. 353-382) gives each stage of the 2021
    GPTModelPipe (microsoft/Megatron-DeepSpeed b56b50bb megatron/model/gpt_model.py l. 168-253): weight 1 for the
    ParallelTransformerLayerPipe specs ('type:transformer'), 0 for _to_float16, the embedding and a transpose before
    them and a transpose, the final LayerNorm, the output embedding and float16_to_fp32 after."""
    w = [0] * lead + [1] * L + [0] * trail
    parts = partition_balanced(w, pp)
    return [sum(w[parts[s]:parts[s + 1]]) for s in range(pp)]


def test_hand_derived_splits():
    """By hand, on L unit weights and P stages: a part below a bottleneck B holds k = ceil(B) - 1 layers (_lprobe
    cuts before the first prefix sum >= the part's start + B), and B succeeds iff the last part's target (P - 1) k + B
    reaches L. 10 on 4: B in (2, 3] gives k = 2 and 6 + B < 10, fails; B in (3, 4) gives k = 3 and 9 + B >= 10: the
    search (lower 2.5, upper 10) settles just above 3: 3, 3, 3, 1 (today's 3, 3, 2, 2). 4 on 3: B = 2 exactly succeeds
    (k = 1, 2 + 2 >= 4) and the search lands on it (mid = 4/3 + (8/3 - 4/3) / 2 = 2.0): 1, 1, 2. 9 on 4: B in (3, 4)
    gives 3, 3, 3 and the fourth probe finds no unit left, the last stage empty: 3, 3, 3, 0. 30 on 4: k = 8 (24 + B >=
    30 for B > 6 only from k = 8): 8, 8, 8, 6. 70 on 12: k = ceil(70 / 12) = 6: eleven 6 and 4. 32 on 6: 6 x 5 and 2
    (today's 6, 6, 5, 5, 5, 5)."""
    cases = {(10, 4): [3, 3, 3, 1], (4, 3): [1, 1, 2], (9, 4): [3, 3, 3, 0], (30, 4): [8, 8, 8, 6],
             (70, 12): [6] * 11 + [4], (32, 6): [6, 6, 6, 6, 6, 2], (96, 8): [12] * 8}
    for (L, pp), want in cases.items():
        assert _gpt_model_pipe_2021(L, pp) == want == bisection_chunk_units(L, pp), (L, pp)
        first, mid, last = stage_layers(L, pp, 1, 0, 0, SPLIT_BISECTION)
        assert (int(first), int(mid), int(last)) == (want[0], want[1], want[-1])
        assert chunk_layers(L, pp, 1, 0, 0, SPLIT_BISECTION) == want
    # the two ends counted (12 units on 4: 3 each): the first stage the embedding and 2 layers, the last 2 and the loss
    assert chunk_layers(10, 4, 1, 1, 1, SPLIT_BISECTION) == [2, 3, 3, 2]
    assert [int(x) for x in stage_layers(10, 4, 1, 1, 1, SPLIT_BISECTION)] == [2, 3, 2]
    # today's split, the megatron-deepspeed entry's, is another placement
    assert chunk_layers(10, 4, 1, 0, 0, SPLIT_FRONT) == [3, 3, 2, 2]


@hsettings(max_examples=300, deadline=None)
@given(L=st.integers(2, 3000), pp=st.integers(2, 64), lead=st.integers(0, 4), trail=st.integers(0, 5),
       data=st.data())
def test_closed_form_matches_a12aaedc(L, pp, lead, trail, data):
    """The closed form (the binary search replayed in the same float arithmetic over an O(1) probe) is a12aaedc's
    partition_balanced on GPTModelPipe-like weights (zero-weight specs before and after the layers), and the two
    ends counted as units too (BigScience's 'type:transformer|embedding')."""
    pp = min(pp, L)
    want = _gpt_model_pipe_2021(L, pp, lead, trail)
    assert bisection_chunk_units(L, pp) == want
    first, mid, last = (int(x) for x in stage_layers(L, pp, 1, 0, 0, SPLIT_BISECTION))
    assert (first, mid, last) == (want[0], want[1], want[-1])
    e = data.draw(st.integers(0, 1))
    units = _gpt_model_pipe_2021(L + 2 * e, pp, lead, trail)
    assert chunk_layers(L, pp, 1, e, e, SPLIT_BISECTION) == [u - (e if j == 0 else 0) - (e if j == pp - 1 else 0)
                                                             for j, u in enumerate(units)]


def test_two_billion_layers_in_closed_form():
    """The fuzz reproducer's 2^31 - 1 layers (tests/data/fuzz_issue24/model-5-4.yaml) on 4 stages: k = ceil(L / 4) =
    2^29, 3 x 2^29 + B >= L only above 2^29 (at B = 2^29 exactly k = 2^29 - 1 leaves 2^31 - 1 - 3 (2^29 - 1) > 2^29),
    so 2^29, 2^29, 2^29 and the last 2^29 - 1; the search and the placement take no loop over the layers (an array of
    a million plans at once)."""
    L = 2 ** 31 - 1
    first, mid, last = stage_layers(L, np.array([4, 2, 4] * 1000), 1, 0, 0, SPLIT_BISECTION)
    assert (int(first[0]), int(mid[0]), int(last[0])) == (2 ** 29, 2 ** 29, 2 ** 29 - 1)
    assert int(first[1]) + int(last[1]) == L  # pp 2: the two stages hold every layer


def test_the_2021_stack_prices_the_bisection_split(tmp_path):
    """Megatron GPT 7.5B's 36 layers on pp 8, tp 1 (a GPT shape: the 2021 fork builds no Llama, mdsfork2): the 2021
    entry places k = ceil(36 / 8) = 5 a stage from the first, 5 x 7 = 35 and the last 1; the same entry with today's
    front rule 5, 5, 5, 5, 4, 4, 4, 4: the last stage holds 3 layers fewer, 3 x 201,379,840 parameters (a layer: 12 h^2
    + 13 h at h 4,096: query_key_value, dense, the two 4 h MLP matrices, their biases and two LayerNorms) x 2 B of
    16-bit weights less (the tied output layer on the last stage of both)."""
    assert load_stack(S21).pipeline_split == "bisection" and SPLIT_CODES["bisection"] == SPLIT_BISECTION
    text = (load_stack(S21).model_dump_json())
    import json

    d = json.loads(text)
    d["pipeline_split"], d["name"] = "front", "mds2021-front"
    p = tmp_path / "mds2021-front.yaml"
    import yaml

    p.write_text(yaml.safe_dump(d), encoding="utf-8")
    kw = dict(model="megatron-gpt-7.5b", gpus=8, tp=1, pp=8, sharding="zero1", global_batch=16, micro_batch=1,
              seq_len=2048)
    rows = {}
    for stack in (S21, str(p)):
        settings, plan, _ = resolve(Job(stack=stack, **kw))
        rows[stack] = to_json(settings, plan, evaluate(settings, plan))
    assert int(resolve(Job(stack=S21, **kw))[1].split_front) == SPLIT_BISECTION
    last21, last_front = (rows[s]["memory"]["stages"]["last"]["weights_bytes"] for s in (S21, str(p)))
    assert 12 * 4096 ** 2 + 13 * 4096 == 201_379_840
    assert last_front - last21 == 3 * 201_379_840 * 2
    first21, first_front = (rows[s]["memory"]["stages"]["first"]["weights_bytes"] for s in (S21, str(p)))
    assert first21 == first_front  # 5 layers and the embedding on both


def gpt32(folder) -> str:
    """Megatron GPT 1.7B with 32 layers (a GPT shape of Llama 3 8B's layer count: the 2021 fork builds no Llama's
    RMSNorm, SwiGLU, GQA, rotary, untied or bias-free layers, stack_db runs.layer_kinds global not_built, mdsfork2)."""
    import yaml

    spec = yaml.safe_load((Path(__file__).parents[1] / "model_zoo" / "megatron-gpt-1.7b.yaml").read_text())
    spec.update(name="gpt-32-layers", num_layers=32)
    p = Path(folder) / "gpt-32-layers.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


def test_an_empty_end_stage_is_refused(cli, tmp_path):
    """32 layers on pp 12: k = ceil(32 / 12) = 3, eleven stages take 3 x 10 + 2 and the twelfth none (3, ..., 3, 2,
    0): the fork's pipeline fails on a stage without a transformer layer (start-up rule DEEPSPEED_PP_SPLIT_ENDS, code
    76); pp 11 (3 x 10 + 2) runs; today's front rule places 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2 on pp 12."""
    assert CODES["DEEPSPEED_PP_SPLIT_ENDS"] == 76
    assert bisection_chunk_units(32, 12)[-2:] == [2, 0] and bisection_chunk_units(32, 11)[-1] == 2
    base = ["--model", gpt32(tmp_path), "--sharding", "zero1", "--global-batch", "24", "--micro-batch", "1"]
    r = cli("explain", *base, "--gpus", "12", "--pp", "12", "--stack", S21)
    assert r.exit_code == 2 and "DEEPSPEED_PP_SPLIT_ENDS" in r.stderr and "Traceback" not in r.stderr
    r = cli("explain", *base, "--gpus", "11", "--pp", "11", "--global-batch", "22", "--stack", S21)
    assert r.exit_code == 0, r.stderr
    assert "the first 3 and the last 2 (stack megatron-deepspeed-2021's split" in r.stdout + r.stderr
    r = cli("explain", *base, "--gpus", "12", "--pp", "12", "--stack", "megatron-deepspeed")
    assert r.exit_code == 0, r.stderr
    m = load_model("llama3-8b")
    p = NS(pp=np.array([12, 11, 12, 4]), vpp=1, split_emb=np.array([0, 0, 0, 1]), split_loss=np.array([0, 0, 0, 1]),
           split_front=np.array([2, 2, 1, 2]))
    assert _deepspeed_split_ends(m, p).tolist() == [True, False, False, False]
    # 9 layers on 4 stages: 3, 3, 3, 0
    assert _deepspeed_split_ends(NS(num_layers=9), NS(pp=4, vpp=1, split_emb=0, split_loss=0, split_front=2))
    assert not _deepspeed_split_ends(NS(num_layers=10), NS(pp=4, vpp=1, split_emb=0, split_loss=0, split_front=2))


# ------------------------------------------------------------------------------------------- the partitioned sends
def _row(stack=S21, **kw):
    settings, plan, _ = resolve(Job(stack=stack, **kw))
    return settings, plan, to_json(settings, plan, evaluate(settings, plan))


GPT = dict(model="megatron-gpt-7.5b", sharding="zero1", micro_batch=1, seq_len=2048)


def test_activations_only_sends_by_hand():
    """Megatron GPT 7.5B (its tied embedding's gradient all-reduce inside pp_comm_s, step.py [20]: once a step, the
    vocab-parallel shard's 51,200 / 2 x 4,096 fp16 gradients, 2 B, over the first and last stage), micro-batch 1 x 2,048 tokens, h 4,096, tp 2, no SP (the 2021 code has none): the stage output is
    T h = 8,388,608 elements, 16,777,216 B in 16 bits. a12aaedc per micro-batch (pipe/engine.py l. 112-113, 498-528,
    849-856, 914-924): forward the sender's 1 / tp part, 8,388,608 B; backward the whole gradient, 16,777,216 B;
    all-gathers of the whole 16,777,216 B over the 2 TP ranks: on a middle stage the received input (forward) and its
    own output rebuilt before the gradient arrives (backward), 2; the first stage the rebuild, the last stage the
    received input, one each. Each stage's own count is its time (issue 22 critstage2; the busiest stage's, 2 at
    pp 4, before): the critical stage is the last at pp 2 and 4 (its layers with the 51,200-word output layer and
    loss), one all-gather. pp_comm_s = m (send(8,388,608) + send(16,777,216) + n x all_gather(16,777,216)) +
    all_reduce(209,715,200 B over 2 ranks (pp - 1) pipeline strides apart), m = 64 / (dp x 1)."""
    for pp, n_ag in ((2, 1.0), (4, 1.0)):
        gpus = 2 * pp * 2  # dp 2
        settings, plan, row = _row(**GPT, gpus=gpus, tp=2, pp=pp, global_batch=64)
        assert settings.pipe_partitioned and not row["plan"]["sequence_parallel"]
        coll = Collectives(_context(settings, plan))
        fwd = float(coll(comm.SEND_RECV, 8_388_608.0, plan.pp, coll.strides["pp"]))
        bwd = float(coll(comm.SEND_RECV, 16_777_216.0, plan.pp, coll.strides["pp"]))
        ag = float(coll(comm.ALL_GATHER, 16_777_216.0, 2, coll.strides["tp"]))
        m = 64 // 2
        tied = float(coll(comm.ALL_REDUCE, 51200 / 2 * 4096 * 2.0, 2, (plan.pp - 1) * coll.strides["pp"]))
        assert row["time"]["critical_stage"]["stage"] == "last"
        assert row["time"]["pp_comm_s"] == pytest.approx(m * (fwd + bwd + n_ag * ag) + tied, rel=1e-12), pp
        assert fwd < bwd  # the two directions differ: half the bytes forward


def test_the_2021_engine_has_no_switch(cli, tmp_path):
    """pipe_partitioned false is refused on the 2021 stack (a12aaedc reads no key: engine.py l. 112,
    config.py get_pipeline_config l. 373-384 keeps the section in a dict nothing reads for it); today's entry takes it.
    A Megatron-DeepSpeed script whose JSON says pipeline.pipe_partitioned / grad_partitioned false is read (the reader
    sets pipe_partitioned false) and refused once --stack megatron-deepspeed-2021 prices it, naming the stack field."""
    with pytest.raises(PlannerError, match="pipe_partitioned false on stack megatron-deepspeed-2021") as e:
        resolve(Job(stack=S21, **GPT, gpus=8, tp=2, pp=2, global_batch=64, pipe_partitioned=False))
    assert "pipeline_send_partitioned_switch false" in e.value.message and "drop pipe_partitioned" in e.value.hint
    s = load_stack(S21)
    assert (s.pipeline_send_partitioned_default, s.pipeline_send_partitioned_grads,
            s.pipeline_send_partitioned_switch) == (True, False, False)
    t = load_stack("megatron-deepspeed")
    assert (t.pipeline_send_partitioned_default, t.pipeline_send_partitioned_grads,
            t.pipeline_send_partitioned_switch) == (True, True, True)
    r = cli("explain", "--model", "megatron-gpt-7.5b", "--gpus", "8", "--tp", "2", "--pp", "2", "--stack", S21,
            "--no-pipe-partitioned")
    assert r.exit_code == 2 and "pipeline_send_partitioned_switch" in r.stderr and "Traceback" not in r.stderr
    # the script: exported on today's stack with the section, then priced with --stack megatron-deepspeed-2021 (in
    # fp16, the 2021 stack's only half dtype: a bf16 script is refused there first, since the reader reads it on the
    # declared stack, mdsexport)
    r = cli("export", "--model", "megatron-gpt-7.5b", "--gpus", "8", "--tp", "2", "--pp", "2", "--stack", "megatron-deepspeed",
            "--sharding", "zero1", "--no-sequence-parallel", "--no-pipe-partitioned", "--fp16", "--format",
            "megatron-deepspeed")
    assert r.exit_code == 0, r.stderr
    assert '"pipe_partitioned": false' in r.stdout
    p = tmp_path / "run.sh"
    p.write_text(r.stdout, encoding="utf-8")
    r = cli("explain", str(p), "--stack", S21)
    assert r.exit_code == 2 and "pipe_partitioned false on stack megatron-deepspeed-2021" in r.stderr


def test_a_pp_plan_reads_back_on_the_2021_stack(tmp_path):
    """The round trip for a pp > 1 plan priced on the 2021 stack. export writes it in the 2021 fork's flags
    (microsoft/Megatron-DeepSpeed b56b50bb: no --normalization, no --vocab-size, GPT-2's vocabulary files; export.
    _fork_args, mdsexport), and a launch script does not name its DeepSpeed release, so it is read back through the
    Megatron-DeepSpeed reader with the stack the reader is told (--stack megatron-deepspeed-2021, as the CLI does;
    GPT-3 175B's shape, fp16, eager attention, tp 2, pp 4, no pipeline section, the 2021 engine's partitioning being
    on whatever the JSON says): the same plan signature (the split's stage layers, the 2021 bisection's for 96 layers
    on 4 stages, 24 each), memory and pipeline p2p time as the plan priced from options."""
    from planner.cli.export import _settings_plan
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan, plan_signature

    kw = dict(model="gpt3-175b", gpus=64, tp=2, pp=4, sharding="zero1", global_batch=64, micro_batch=1,
              attention="eager", fp16=True, sequence_parallel=False)
    settings, plan, row = _row(**kw)
    assert settings.pipe_partitioned and row["plan"]["stack"] == S21
    with pytest.raises(PlannerError, match="another release"):  # the DeepSpeed JSON alone is the 2022 fork's file
        export_plan(dict(row["plan"], tp=1, pp=1, dp=64), "deepspeed")
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    assert '"pipeline"' not in text and "--pipeline-model-parallel-size 4" in text
    assert "--normalization" not in text and "--vocab-size" not in text and "--vocab-file gpt2-vocab.json" in text
    p = tmp_path / "run.sh"
    p.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(p, fmt="megatron-deepspeed", model="gpt3-175b", gpus=64, hardware=row["plan"]["hardware"],
                              stack=S21)
    assert cfg.job["stack"] == S21
    # GPT-2's 50,257 tokens padded as the fork pads them: 128 x tp 2 = 256, ceil(50,257 / 256) = 197 -> 50,432 rows
    # (megatron_model.catalog_vocab_rows), the plan priced with those rows
    assert cfg.job["padded_vocab_size"] == 50432
    row = _row(**kw, padded_vocab_size=50432)[2]
    back = to_json(*_settings_plan(Job.model_validate(cfg.job)))
    assert plan_signature(back["plan"]) == plan_signature(row["plan"])
    assert plan_signature(row["plan"])["stage_layers"] == (24, 24, 24)
    assert back["memory"]["total_bytes"] == pytest.approx(row["memory"]["total_bytes"], rel=1e-12)
    assert back["time"]["pp_comm_s"] == pytest.approx(row["time"]["pp_comm_s"], rel=1e-12)


def test_counted_ends_name_the_split_that_places_them(tmp_path):
    """A GPT of 32 layers (gpt32: Llama 3 8B's count) with both ends counted (34 units) on pp 4 of the 2021 entry: a12aaedc's bisection places
    9, 9, 9, 7 units, so 8, 9, 9, 6 layers; the warning names that split beside the counting flags (review6: it named
    Megatron-Core's account_for_* alone, whose trim_ends rule would place 8, 9, 9, 8 less the trim: not this; the
    DeepSpeed stacks read no account_for_* flag, their partition_method counts the ends). An even count (32 + 2 on
    pp 2: 17 units each, 16 layers beside each end; no middle stage) names the split too."""
    kw = dict(model=gpt32(tmp_path), tp=1, stack=S21, sharding="zero1", micro_batch=1, seq_len=2048,
              account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    _, _, w = resolve(Job(gpus=4, pp=4, global_batch=8, **kw))
    (line,) = [x for x in w if "of the pipeline split" in x]
    assert "the middle stages hold 9 layers, the first 8 and the last 6" in line
    assert "(stack megatron-deepspeed-2021's split, stack_db pipeline_split bisection" in line
    assert "DeepSpeed's partition_method 'type:transformer|embedding')" in line and "Megatron-Core" not in line
    _, _, w = resolve(Job(gpus=2, pp=2, global_batch=8, **kw))
    (line,) = [x for x in w if "of the pipeline split" in x]
    assert "the first stage holds 16 layers and the last 16 (no middle stage on pp 2)" in line
    assert "pipeline_split bisection" in line and "Megatron-Core" not in line


def test_bisection_with_an_interleaved_schedule_is_refused_at_load(tmp_path):
    """review6: a custom stack with pipeline_split bisection and the interleaved schedule (torchtitan's, pp 7 vpp 2)
    left chunks 11-13 empty unrefused. The bisection split is DeepSpeed's PipelineModule partition, one chunk a
    stage: the stack file is refused, exit 2, naming the file and the field."""
    import yaml
    from typer.testing import CliRunner

    from planner.cli import app

    d = yaml.safe_load((Path(__file__).parents[1] / "stack_db" / "torchtitan.yaml").read_text())
    d.update(pipeline_split="bisection", name="tt-bisection")
    p = tmp_path / "tt-bisection.yaml"
    p.write_text(yaml.safe_dump(d))
    r = CliRunner().invoke(app, ["explain", "--model", "llama3-8b", "--gpus", "8", "--stack", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "pipeline_split bisection with runs.schedules interleaved" in r.output and str(p) in r.output
