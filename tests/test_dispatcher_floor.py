"""search._dispatchers_floor (memory.activations_floor), the lower bound fit's dispatcher search uses to leave unpriced
the candidates no dispatcher can fit (issue 22, speed): a property test on every candidate the bound is applied to, and
on every candidate priced in full with ep > 1 of the same spaces, in two cases (megatron DeepSeek-V3 on 2,048 H800,
torchtitan 0.3 Qwen3-30B-A3B on 16 H100 with blocking HybridEP); the search's result does not depend on the bound; and
the check that falls back to pricing every candidate where the bound fails.

Why a bound of memory_total under every dispatcher: the floor is, on the first and on the last stage, the model states
and quantized weight copies (_stage_states', which read no dispatcher: memory.STATE_FIELDS) plus the layers'
activations the stage holds
(sum over kinds of layers x micro-batches held x ((1 - r) x stored + r x layer input), r the share full recompute
re-runs), each kind's stored and layer-input bytes the least layer_memory gives over the dispatchers. Every factor
(held, 1 - r, r) is non-negative and read no dispatcher, so the sum is at most the one priced with any dispatcher's
own figures; and a stage's total adds to those two terms others that hold bytes, as states_floor assumes (checked at
run time on every candidate priced, as states_floor is by fitting_memory)."""

from __future__ import annotations

import numpy as np
import pytest

from planner import search
from planner.schema import Job
from planner.search import fit
from planner.space import DISPATCHER_COLUMN, OK, SpaceOptions

DS_V3 = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096)
QWEN_TT = Job(model="torchtitan:qwen3/30B-A3B", gpus=16, stack="torchtitan-0.3", global_batch=32, seq_len=4096,
              hardware="h100-sxm", moe_hybridep_capacity_factor=0.0)
QWEN_OPTS = SpaceOptions(ep=(2, 4, 8, 16))
CASES = {"deepseek_v3_2048_h800": (DS_V3, SpaceOptions()), "torchtitan03_qwen3_30b_a3b_16_h100": (QWEN_TT, QWEN_OPTS)}


def _spaces(job, opts, monkeypatch):
    """Each space fit prices under other dispatchers, with the arguments of each _other_dispatchers call (the fit's
    result too)."""
    calls = []
    real = search._other_dispatchers

    def spy(space, bidx, rcidx, fm, usable, floor=True):
        calls.append((space, bidx, rcidx, fm, usable))
        return real(space, bidx, rcidx, fm, usable, floor)

    monkeypatch.setattr(search, "_other_dispatchers", spy)
    res = fit(job, opts=opts, top=10, search_dispatchers=True)
    monkeypatch.undo()
    return calls, res


def _codes(space):
    return sorted({int(x) for x in space.variants[:, DISPATCHER_COLUMN]})


@pytest.mark.parametrize("case", sorted(CASES))
def test_floor_is_at_most_the_least_memory_over_the_dispatchers(case, monkeypatch):
    """On every candidate _other_dispatchers was given (over usable with the default dispatcher), and on every valid
    candidate priced in full (fitting_memory's whole) with ep > 1 of the same spaces, the floor is at most the
    candidate's memory_totals under each dispatcher of the space (_dispatchers_memory, bit for bit memory_totals
    with that dispatcher's Settings), hence at most the least over those that run on it; and it leaves unpriced
    candidates in both cases (the bound is not vacuous)."""
    job, opts = CASES[case]
    calls, _ = _spaces(job, opts, monkeypatch)
    assert calls
    unpriced = 0
    for space, bidx, rcidx, fm, usable in calls:
        codes = _codes(space)
        assert len(codes) > 1
        low = search._dispatchers_floor(space, bidx, rcidx, codes)
        true = search._dispatchers_memory(space, codes, bidx, rcidx).min(axis=0)
        assert np.all(low <= true) and np.all(low <= fm)
        unpriced += int(np.sum(low > usable))
        # every valid candidate priced in full with ep > 1 (those that fit with the default dispatcher too)
        n_rc = len(space.recompute)
        rows = np.flatnonzero(space.codes == OK)
        b, r = np.repeat(rows, n_rc), np.tile(np.arange(n_rc), len(rows))
        _, _, whole = search.fitting_memory(space, b, r, usable, whole=True)
        ep = np.broadcast_to(np.asarray(space.base.ep), np.shape(space.base.tp))[b]
        b, r = b[whole & (ep > 1)], r[whole & (ep > 1)]
        low = search._dispatchers_floor(space, b, r, codes)
        true = search._dispatchers_memory(space, codes, b, r).min(axis=0)
        assert len(b) > len(bidx) and np.all(low <= true)
    assert unpriced > 0


def test_result_does_not_depend_on_the_floor(monkeypatch):
    """torchtitan 0.3 Qwen3-30B-A3B / 16 H100: fit with the floor (some candidates left unpriced) gives the rows and
    counts of fit with a floor of 0 (every candidate priced under every dispatcher, as before the floor)."""
    res = fit(QWEN_TT, opts=QWEN_OPTS, top=10, search_dispatchers=True)
    monkeypatch.setattr(search, "_dispatchers_floor", lambda space, bidx, rcidx, codes: np.zeros(len(bidx)))
    ref = fit(QWEN_TT, opts=QWEN_OPTS, top=10, search_dispatchers=True)
    assert res.rows == ref.rows
    assert vars(res.counts) == vars(ref.counts)


def test_a_floor_over_a_priced_memory_prices_every_candidate(monkeypatch):
    """A floor that exceeds a priced candidate's memory fails the check. Here every candidate's floor is the usable
    bytes: none is over usable (none left unpriced), and it exceeds the memory of each candidate another dispatcher
    fits (at most usable, below it on those of the first space that has one): _other_dispatchers then prices every
    candidate as without the floor and says so (held False), and fit's counts carry bound_fallback, its rows those of
    the search without it."""
    ref = fit(QWEN_TT, opts=QWEN_OPTS, top=10, search_dispatchers=True)
    calls, _ = _spaces(QWEN_TT, QWEN_OPTS, monkeypatch)
    for space, bidx, rcidx, fm, usable in calls:
        plain = search._other_dispatchers(space, bidx, rcidx, fm, usable, floor=False)
        if plain[0].any():
            break
    assert plain[0].any() and plain[-1] and not plain[5].any()
    at_usable = lambda space, bidx, rcidx, codes: np.full(len(bidx), usable)  # noqa: E731
    monkeypatch.setattr(search, "_dispatchers_floor", at_usable)
    got = search._other_dispatchers(space, bidx, rcidx, fm, usable)
    assert not got[-1] and not got[5].any()
    assert np.array_equal(got[0], plain[0]) and np.array_equal(got[3], plain[3]) and np.array_equal(got[4], plain[4])
    assert np.array_equal(got[1], plain[1], equal_nan=True)
    res = fit(QWEN_TT, opts=QWEN_OPTS, top=10, search_dispatchers=True)
    assert res.counts.bound_fallback and not ref.counts.bound_fallback and res.rows == ref.rows


def test_floor_with_one_dispatcher_is_the_states_copies_and_activations_at_pp_1(monkeypatch):
    """The floor's terms, against memory_terms' own: with the default dispatcher alone (codes [variant 0's]), on a
    plan with pp 1 (one stage, first and last: no stage output sent on, memory.py [tt4]) of torchtitan 0.3's
    Qwen3-30B-A3B (no MTP module, no embedding norm, no dispatcher attributes on this stack: _dispatcher_held's
    stack setting), the floor is exactly weights + gradients + master_weights + adam (the model states) +
    quantized_weights + layer_activations of memory_terms' heaviest stage, on every such candidate of the first space
    priced under the other dispatchers (with pp > 1 the heaviest stage may be another than the floor's larger end
    stage, and the stage output sent on is left out: at most the total only)."""
    from planner import memory as mem

    calls, _ = _spaces(QWEN_TT, QWEN_OPTS, monkeypatch)
    space, bidx, rcidx, _, _ = calls[0]
    d0 = int(space.variants[0, DISPATCHER_COLUMN])
    pp = np.broadcast_to(np.asarray(space.base.pp), np.shape(space.base.tp))[bidx]
    low = search._dispatchers_floor(space, bidx, rcidx, [d0])
    t = mem.memory_terms(space.settings, space.plans(bidx, rcidx))[0]
    parts = t.weights + t.gradients + t.master_weights + t.adam + t.quantized_weights + t.layer_activations
    one = pp == 1
    assert one.sum() > 10 and (~one).sum() > 10
    assert low[one] == pytest.approx(parts[one], rel=1e-12)
    assert np.all(low <= t.total)
