"""planner/terms.py's numpy helpers that stand in for numpy functions on the search's hot path
(issue 24): `select` for np.select (comm.py's collective pricing) and `isin` for np.isin (the
plan and start-up rules). Each must give numpy's values, dtype and shape: the figures the
search prints may not move."""

from __future__ import annotations

import numpy as np

from planner.terms import KeyedPlan, isin, select, with_fields


def test_select_picks_the_first_condition_that_holds():
    # by hand: element 0 meets both conditions (the first wins), 1 only the second, 2 neither
    c1 = np.array([True, False, False])
    c2 = np.array([True, True, False])
    got = select([c1, c2], [np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])], np.inf)
    assert got.tolist() == [1.0, 20.0, np.inf]
    assert got.dtype == np.float64


def test_select_matches_np_select():
    rng = np.random.default_rng(24)
    n = 50
    conds = [rng.random(n) < 0.4 for _ in range(4)]
    cases = [
        ([rng.random(n) for _ in range(4)], np.inf),  # comm.py: float arrays, an infinite default
        ([rng.random(n) for _ in range(4)], np.nan),
        ([rng.integers(0, 9, n) for _ in range(4)], np.nan),  # integer rounds, a NaN default: float64
        ([rng.integers(0, 9, n) for _ in range(4)], 0),  # all integers: int64, as np.select
        ([2.0, rng.random(n), 3, rng.integers(0, 9, n)], 1.0),  # scalars among the choices
    ]
    for choices, default in cases:
        want = np.select(conds, choices, default)
        got = select(conds, choices, default)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want, equal_nan=True)
    # broadcasting: a (3, 1) condition against (4,) choices, and 0-d inputs
    c = np.array([[True], [False], [False]])
    want = np.select([c, ~c], [np.arange(4.0), 7.0], -1.0)
    got = select([c, ~c], [np.arange(4.0), 7.0], -1.0)
    assert got.shape == want.shape == (3, 4) and np.array_equal(got, want)
    assert select([np.bool_(False), np.bool_(True)], [1.0, 2.0], 3.0) == 2.0


def test_isin_matches_np_isin():
    x = np.array([[1, 2, 3], [4, 8, 16]])
    assert isin(x, (2, 8)).tolist() == [[False, True, False], [False, True, False]]
    assert isin(x, np.array([], dtype=np.int64)).tolist() == [[False] * 3] * 2  # no values: nothing is in
    for vals in ([1], [16, 4, 4], np.array([3, 99])):
        assert np.array_equal(isin(x, vals), np.isin(x, vals))
    assert bool(isin(np.int64(8), [2, 4, 8])) and not bool(isin(5, [2, 4, 8]))
    assert np.shape(isin(5, [2])) == np.shape(np.isin(5, [2])) == ()


def test_groups_fold_small_fields_in_place_in_lexicographic_order():
    """terms.Groups numbers the distinct tuples in the order of their values, field by field (issue 24's
    in-place folding of small-range fields: (a - 1) x 3 + (b - 5) here, by hand), each group's first
    candidate its `first`; a constant column (stride 0) adds no code; a wide field is ranked."""
    from planner.terms import Groups, KeyedPlan

    a = np.array([2, 1, 2, 1, 3, 1])
    b = np.array([5, 7, 5, 5, 6, 7])
    const = np.broadcast_to(np.int64(4), (6,))
    wide = np.array([10**7, 0, 10**7, 0, 10**7, 0])  # 2 values 10^7 apart: ranked, not value - min
    g = Groups(KeyedPlan({"tp": a, "a": a, "b": b, "c": const, "w": wide}), ("a", "c", "b", "w"))
    # tuples (a, b, w): (2,5,1e7) (1,7,0) (2,5,1e7) (1,5,0) (3,6,1e7) (1,7,0); in order: (1,5,0) (1,7,0) (2,5,1e7) (3,6,1e7)
    assert g.size == 4
    assert g.index.tolist() == [2, 1, 2, 0, 3, 1]
    assert g.first.tolist() == [3, 1, 0, 4]
    assert g.plan.b.tolist() == [5, 7, 5, 6] and g.plan.c.tolist() == [4, 4, 4, 4]


def test_distinct_runs_and_hash_order():
    """comm.distinct: each element's tuple index (runs of equal neighbours repeated over the run), the
    distinct tuples once, -0.0 apart from 0.0; expand gives back every element's value."""
    from planner.comm import UNIQUE_MIN, distinct

    size = np.array([1.0, 1.0, 2.0, 0.0, -0.0, 2.0] * UNIQUE_MIN)
    group = np.array([8, 8, 8, 4, 4, 8] * UNIQUE_MIN)
    d = distinct(size, group, 3)
    assert len(d.values[0]) == 4  # (1, 8), (2, 8), (0.0, 4), (-0.0, 4)
    got = {(np.signbit(s), float(s), int(g)) for s, g in zip(*d.values[:2])}
    assert got == {(False, 1.0, 8), (False, 2.0, 8), (False, 0.0, 4), (True, 0.0, 4)}
    assert (d.values[2] == 3).all()
    back = d.expand(d.values[0] * 10 + d.values[1])
    assert np.array_equal(back, size * 10 + group) and np.array_equal(np.signbit(back), np.signbit(size * 10 + group))
    assert np.array_equal(d.index[:6], d.index[6:12])  # the same tuples, the same indices
    assert d.index[0] == d.index[1] and d.index[2] == d.index[5] and d.index[3] != d.index[4]


def test_not_multiple_table_matches_the_modulo():
    """startup._not_multiple (MEGATRON_FP8_WIDTHS): on a column of 2,048 or more divisors the table of
    w % 1..max != 0 gives the modulo's booleans: 7,168 = 2^10 x 7 is a multiple of 16, 32 and 128 x 8
    (1,024) but not of 3, 96 or 2,048."""
    from planner.startup import _not_multiple

    d = np.array([16, 32, 1024, 3, 96, 2048, 1, 7] * 512)
    got = _not_multiple(7168, d)
    assert got[:8].tolist() == [False, False, False, True, True, True, False, False]
    assert np.array_equal(got, 7168 % d != 0) and got.dtype == bool
    assert _not_multiple(7168, d[:8]).tolist() == got[:8].tolist()  # below 2,048: the modulo itself


def test_with_fields_replaces_a_keyed_views_field():
    """with_fields on a KeyedPlan (the search's keyed floors hand step.bf16_end_layers one, which copied it with
    dataclasses.replace: a TypeError): the named field replaced, the other keyed fields the same objects, an unkeyed
    field still refused; on a PlanArrays, dataclasses.replace's copy."""
    import dataclasses

    import pytest

    from planner.plan import resolve
    from planner.schema import Job

    tp, prec = np.array([2, 4]), np.array([1, 1])
    k = with_fields(KeyedPlan({"tp": tp, "precision": prec}), precision=np.zeros(2, dtype=np.int64))
    assert k.precision.tolist() == [0, 0] and k.tp is tp
    with pytest.raises(KeyError):
        k.pp
    _, plan, _ = resolve(Job(model="llama3-8b", gpus=8, precision="fp8"))
    p16 = with_fields(plan, precision=np.zeros_like(plan.precision))
    assert dataclasses.is_dataclass(p16) and int(np.squeeze(p16.precision)) == 0 and p16.tp is plan.tp
