"""memory.states_floor, the model-states lower bound of memory_total, and search.fitting_memory,
which prices in full only the candidates whose floor is within the usable HBM (issue 24).

The property the search rests on: for every valid candidate of a real space, the floor of its base
row is at most its memory_total with each recompute choice, so a row dropped by the floor does not
fit with any; and fit's counts ("did not fit", "fit") and rows are those of pricing every candidate.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner.memory as mem
import planner.search as search
from planner.pipeline import dualpipe_pairs
from planner.plan import NONE as SHARD_NONE, ZERO1
from planner.schema import Job
from planner.space import SpaceOptions, build_space, settings_for, variant_choices
from planner.terms import KeyedPlan

# Llama 3 8B (model_zoo/llama3-8b.yaml: 32 layers, hidden 4,096, 8 KV heads of 128, MLP 14,336, vocab
# 128,256, untied output): per layer q, o 4,096 x 4,096, k, v 4,096 x 1,024, gate, up, down
# 4,096 x 14,336 (TP-split) and two RMSNorms of 4,096 (replicated); embedding and output 128,256 x
# 4,096; final norm 4,096
LAYER_SPLIT = 4096 * (2 * 4096 + 2 * 1024) + 3 * 4096 * 14336  # 218,103,808
LAYER_NORMS = 2 * 4096
VOCAB = 128256 * 4096  # 525,336,576
TOTAL = 32 * (LAYER_SPLIT + LAYER_NORMS) + 2 * VOCAB + 4096
# Megatron's bytes per parameter (plan.BYTES_PER_PARAM_PRESETS "megatron"): bf16 weights 2, fp32 main
# gradients 4, fp32 master 4, Adam m and v 8
MEGATRON = (2.0, 4.0, 4.0, 8.0)


def _space(job: Job):
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, job.precision, SpaceOptions(),
                        variant_choices(settings.stack, job, "", settings.hardware))
    rows = np.flatnonzero(space.codes == 0)
    n_rc = len(space.recompute)
    return settings, space, rows, np.repeat(rows, n_rc), np.tile(np.arange(n_rc), len(rows))


def _floor(settings, space, rows):
    b = space.base
    placed = mem.placement_groups(settings, KeyedPlan(search._columns(b, rows, mem.PIPELINE_FIELDS + ("tp",))))
    return mem.states_floor(settings, KeyedPlan(search._columns(b, rows, mem.STATE_FIELDS + ("schedule",))), placed)


def test_llama3_8b_parameter_count():
    assert TOTAL == 8_030_261_248  # count_params(llama3-8b).total, Meta's 8.03 B


def test_states_floor_hand_values_llama3_8b():
    # the floor is the larger of the first and last stages' weights + gradients + master + Adam
    settings, space, rows, _, _ = _space(Job(model="llama3-8b", gpus=64))
    assert (settings.bpp.weights, settings.bpp.gradients, settings.bpp.master, settings.bpp.optimizer) == MEGATRON
    floor = _floor(settings, space, rows)
    b = space.base

    def col(f):
        return np.broadcast_to(np.asarray(getattr(b, f)), np.shape(b.tp))[rows]

    one = (col("cp") == 1) & (col("vpp") == 1) & (col("split_emb") == 0) & (col("split_loss") == 0)
    # TP 1, PP 1, no sharding: every parameter at 18 B
    at = one & (col("tp") == 1) & (col("pp") == 1) & (col("sharding") == SHARD_NONE)
    assert at.any()
    np.testing.assert_array_equal(floor[at], 18.0 * TOTAL)  # 144,544,702,464 B
    assert 18.0 * TOTAL == 144_544_702_464
    # TP 1, PP 1, ZeRO-1 over DP 64: weights and gradients whole, master and Adam / 64
    at = one & (col("tp") == 1) & (col("pp") == 1) & (col("sharding") == ZERO1) & (col("dp") == 64)
    assert at.any()
    np.testing.assert_array_equal(floor[at], (2.0 + 4.0 + 12.0 / 64) * TOTAL)  # 49,687,241,472 B
    # TP 2, PP 2, no sharding: 16 layers a stage; the first holds the embedding / 2, the last the
    # output layer / 2 and the final norm: the last is the larger, 2,007,633,920 parameters
    last = 16 * (LAYER_SPLIT // 2 + LAYER_NORMS) + VOCAB // 2 + 4096
    assert last == 2_007_633_920
    at = one & (col("tp") == 2) & (col("pp") == 2) & (col("sharding") == SHARD_NONE)
    assert at.any()
    np.testing.assert_array_equal(floor[at], 18.0 * last)  # 36,137,410,560 B


@pytest.mark.parametrize("job", [
    Job(model="llama3-8b", gpus=64),
    Job(model="llama3-8b", gpus=64, stack="torchtitan"),  # FSDP2: no sharded weight copy, gradients freed
    Job(model="mixtral-8x7b", gpus=64),  # routed experts (their own shard group), pp > 2
    Job(model="mixtral-8x7b", gpus=64, stack="deepseek"),  # DualPipe: no floor claimed there
    Job(model="llama3-70b", gpus=512, precision="fp8"),  # fp8: TE's weight copies, the weight bytes fp8 saves
], ids=lambda j: f"{j.model}-{j.gpus}-{j.stack or 'megatron'}-{j.precision or 'bf16'}")
def test_floor_below_every_total_and_fitting_memory_is_memory_totals(job):
    settings, space, rows, bidx, rcidx = _space(job)
    n_rc = len(space.recompute)
    full = search.memory_totals(space, bidx, rcidx)
    floor = _floor(settings, space, rows)
    least = full.reshape(len(rows), n_rc).min(axis=1)  # each row's least total over the recompute choices
    assert np.all(floor <= least)
    dual = dualpipe_pairs(KeyedPlan(search._columns(space.base, rows, ("schedule", "pp"))))
    assert np.all(floor[dual] == 0.0) and np.all(floor[~dual] > 0.0)
    assert np.all(floor[~dual] >= 0.0005 * least[~dual])  # a floor, not zero
    usable = mem.capacity(settings)[1]
    got, held = search.fitting_memory(space, bidx, rcidx, usable)
    fits = full <= usable
    assert held
    np.testing.assert_array_equal(got <= usable, fits)
    np.testing.assert_array_equal(got[fits], full[fits])  # every figure within usable is memory_totals'
    dropped = np.repeat(floor > usable, n_rc)
    np.testing.assert_array_equal(got[dropped], np.repeat(floor, n_rc)[dropped])  # the floor stands for them
    np.testing.assert_array_equal(got[~dropped], full[~dropped])
    assert dropped.any() and not fits[dropped].any()


def test_floor_drops_rows_of_mixtral_space():
    # mixtral-8x7b on 64 H100 (megatron): 9,397 of its 57,340 valid base rows hold model states over
    # the usable 71.2 GiB alone, and none of their 28,191 candidates fits (56,945 rows before torch_fsdp2 became
    # its own candidate beside optim_grads_params, whose reduce-scatter queue it lacks: memory.py [rs]; none of the 395
    # added rows over the usable memory on its model states alone)
    settings, space, rows, bidx, rcidx = _space(Job(model="mixtral-8x7b", gpus=64))
    floor = _floor(settings, space, rows)
    usable = mem.capacity(settings)[1]
    assert (len(rows), int((floor > usable).sum())) == (57340, 9397)


def test_fitting_memory_falls_back_when_the_floor_fails(monkeypatch):
    # a "floor" of the usable bytes itself keeps every row, and is above the total of those that fit:
    # the check fails, every candidate is priced in full (held False), and fit reports the fallback
    # with the same rows and counts
    job = Job(model="llama3-8b", gpus=64)
    settings, space, rows, bidx, rcidx = _space(job)
    usable = mem.capacity(settings)[1]
    want = search.fit(job, top=5)
    monkeypatch.setattr(mem, "states_floor", lambda s, plan, placed, groups=None: np.full(np.size(plan.tp), usable))
    got, held = search.fitting_memory(space, bidx, rcidx, usable)
    assert not held
    np.testing.assert_array_equal(got, search.memory_totals(space, bidx, rcidx))
    res = search.fit(job, top=5)
    assert res.counts.bound_fallback and not want.counts.bound_fallback
    assert res.rows == want.rows
    assert {k: v for k, v in res.counts.as_dict().items() if k != "bound_fallback"} == \
        {k: v for k, v in want.counts.as_dict().items() if k != "bound_fallback"}


@pytest.mark.parametrize("job", [Job(model="mixtral-8x7b", gpus=64), Job(model="llama3-70b", gpus=512)],
                         ids=["mixtral-8x7b-64", "llama3-70b-512"])
def test_fit_counts_and_rows_as_without_the_floor(job, monkeypatch):
    # the same counts ("did not fit" included) and rows as a search that prices every candidate in
    # full (a floor of 0 drops nothing)
    want = search.fit(job, top=5)
    assert want.counts.did_not_fit > 0
    monkeypatch.setattr(mem, "states_floor", lambda s, plan, placed, groups=None: np.zeros(np.size(plan.tp)))
    got = search.fit(job, top=5)
    assert got.counts.as_dict() == want.counts.as_dict()
    assert got.rows == want.rows


def test_nothing_fits_closest_as_without_the_floor(monkeypatch):
    # llama3-405b on 8 GPUs: nothing fits, every row is dropped by its floor; the closest plan is
    # found among every candidate's full total, as before
    from planner.errors import NoFitError

    job = Job(model="llama3-405b", gpus=8)
    with pytest.raises(NoFitError) as want:
        search.fit(job)
    monkeypatch.setattr(mem, "states_floor", lambda s, plan, placed, groups=None: np.zeros(np.size(plan.tp)))
    with pytest.raises(NoFitError) as got:
        search.fit(job)
    assert str(got.value) == str(want.value)
    assert got.value.closest == want.value.closest
