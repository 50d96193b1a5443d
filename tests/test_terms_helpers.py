"""planner/terms.py's numpy helpers that stand in for numpy functions on the search's hot path
(issue 24): `select` for np.select (comm.py's collective pricing) and `isin` for np.isin (the
plan and start-up rules). Each must give numpy's values, dtype and shape: the figures the
search prints may not move."""

from __future__ import annotations

import numpy as np

from planner.terms import isin, select


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
