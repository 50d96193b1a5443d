"""The vocabulary spaces' shared work (branch vocabspeed): fit splits a space into one space per padded row count
(search.vocab_spaces); what reads no vocabulary is computed once for all of them, and a later space's prefilter
takes the earlier spaces' k-th best without pricing its seed's stack variants where that seed cannot undercut it
(search._bound_k0). Each shortcut is compared here with the search without it: the same rows, the same counts."""

from __future__ import annotations

import types

import numpy as np
import pytest

import planner.search as S
from planner.schema import Job
from planner.search import fit


def _space(variants, dispatchers=None):
    return types.SimpleNamespace(variants=np.asarray(variants, dtype=np.int64), dispatchers=dispatchers, settings=None)


def test_bound_k0_by_hand():
    # two variants differing only in TP overlap (column 0): each seed candidate's best step is at least
    # min(variant 0's step, its rest); the k = 3 lower bounds 5.0, 6.0, 7.0 (their largest, 7.0, is the seed's k-th)
    sp = _space([[0, 0, 0, 0, 0], [1, 0, 0, 0, 0]])
    low = np.array([4.0, 4.0, 4.0])
    step0, rest0 = np.array([5.5, 6.0, 7.5]), np.array([5.0, 6.5, 7.0])
    v0 = (step0, low, rest0)
    m = b = np.zeros(3)
    assert S._bound_k0(sp, "time", 3, 6.9, low, m, b, v0) == 6.9  # 7.0 >= 6.9: K0 is the bound
    assert S._bound_k0(sp, "time", 3, 7.0, low, m, b, v0) == 7.0
    assert S._bound_k0(sp, "time", 3, 7.1, low, m, b, v0) is None  # the seed might undercut 7.1: priced
    # one variant: the step itself (7.5) bounds
    assert S._bound_k0(_space([[0, 0, 0, 0, 0]]), "time", 3, 7.4, low, m, b, v0) == 7.4
    # a lower bound below a compute floor (the fact the bound rests on fails): priced
    assert S._bound_k0(sp, "time", 3, 6.9, np.array([4.0, 4.0, 7.2]), m, b, v0) is None
    # a variant that changes more than TP overlap (an fp8 recipe, column 3): priced
    assert S._bound_k0(_space([[0, 0, 0, 0, 0], [0, 0, 0, 1, 0]]), "time", 3, 1.0, low, m, b, v0) is None


def _rows_and_counts(res):
    c = res.counts
    return ([(r["plan"], r["memory"], r["time"]) for r in res.rows],
            (c.feasible, c.did_not_fit, c.prefilter_dropped, c.broke_constraint, c.bound_fallback))


@pytest.mark.parametrize("kw, disp", [(dict(model="llama3-405b", gpus=16384), False),
                                      (dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360,
                                            seq_len=4096), True)])
def test_shortcuts_change_nothing(kw, disp, monkeypatch):
    """Llama 3 405B on 16,384 H100 and DeepSeek-V3 on 2,048 H800 with its dispatchers searched (three spaces each:
    tp 1-2, 4, 8) on megatron: the fit with the shortcuts and the fit without them (every later space's seed priced
    with its variants, every memory call placing its own rows): the same rows and the same counts, "priced by their
    compute alone" among them."""
    job = Job(**kw)
    got = fit(job, top=10, search_dispatchers=disp)
    monkeypatch.setattr(S, "_bound_k0", lambda *a, **k: None)
    seeded = fit(job, top=10, search_dispatchers=disp)
    real = S.vocab_spaces
    monkeypatch.setattr(S, "vocab_spaces", lambda space: [S.replace(s, placement=None) for s in real(space)])
    plain = fit(job, top=10, search_dispatchers=disp)
    assert _rows_and_counts(got) == _rows_and_counts(seeded) == _rows_and_counts(plain)
    assert got.counts.prefilter_dropped > 0 and not got.counts.bound_fallback


def test_spaces_share_the_placement():
    """vocab_spaces hands each space the placement of its own rows: memory_totals with it and without it (each
    call placing its rows) give the same bytes on every candidate."""
    from planner.space import OK, SpaceOptions, build_space, settings_for

    job = Job(model="llama3-8b", gpus=64, seq_len=8192, global_batch=256)
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, job.precision, SpaceOptions())
    spaces = S.vocab_spaces(space)
    assert len(spaces) == 3 and all(sp.placement is not None for sp in spaces)
    for sp in spaces:
        b = np.repeat(np.flatnonzero(sp.codes == OK), len(sp.recompute))
        r = np.tile(np.arange(len(sp.recompute)), len(b) // len(sp.recompute))
        assert np.array_equal(S.memory_totals(sp, b, r), S.memory_totals(S.replace(sp, placement=None), b, r))
