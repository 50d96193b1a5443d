"""Named terms whose sum is the total: what every cost function returns.

A Terms object maps names to numpy arrays (0-d for one plan, 1-d for a search). The
breakdown a user sees is the same arithmetic the search used.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np


def isin(x, values) -> np.ndarray:
    """np.isin(x, values) for a few values (a stack's schedules, a config table's sizes): x == v
    for each v, or-ed. Not np.isin: it sorts the values with np.unique, which imports numpy.ma,
    ~8 ms of a `planner fit` start-up (issue 24)."""
    x = np.asarray(x)
    out = np.zeros(x.shape, dtype=bool)
    for v in np.asarray(values).ravel():
        out |= x == v
    return out


def select(conds, choices, default) -> np.ndarray:
    """np.select(conds, choices, default): each element's choice of the first condition that
    holds there, else default; the same values, dtype (np.select's: the result type of the
    choices and the default as arrays) and broadcast shape, as a chain of np.where from the last
    condition to the first. Not np.select: on the few-element arrays of a collective's pricing
    (comm.py, a few hundred calls a search) its broadcasting and copies cost more than the
    pricing itself (issue 24)."""
    choices = [np.asarray(c) for c in choices]
    out = np.asarray(default)
    dtype = np.result_type(*choices, out)
    for cond, choice in zip(conds[::-1], choices[::-1]):
        out = np.where(cond, choice, out)
    return out.astype(dtype, copy=False)


class Terms:
    def __init__(self, **terms):
        self._t = {k: np.asarray(v, dtype=np.float64) for k, v in terms.items()}

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["_t"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> np.ndarray:
        return self._t[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._t)

    def items(self):
        return self._t.items()

    def keys(self):
        return self._t.keys()

    @property
    def total(self) -> np.ndarray:
        return sum(self._t.values(), np.float64(0.0))

    def sum(self, *names: str) -> np.ndarray:
        return sum((self._t[n] for n in names), np.float64(0.0))

    def take(self, idx) -> "Terms":
        return Terms(**{k: v[idx] for k, v in self._t.items()})

    def scalars(self) -> dict[str, float]:
        return {k: float(v) for k, v in self._t.items()}

    def __repr__(self) -> str:
        return "Terms(" + ", ".join(f"{k}={v!r}" for k, v in self._t.items()) + ")"


# ------------------------------------------------------------ once per distinct input
class KeyedPlan:
    """A view of a PlanArrays holding only the named fields (or properties, e.g.
    "microbatches"), for a function evaluated once per distinct tuple of them (Groups.plan).
    Reading any other field is an error, not a default, so the function cannot read a field
    its evaluation was not keyed on (getattr(plan, name, default) does not hide it)."""

    def __init__(self, values: dict):
        self.__dict__.update(values)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # Python's own probes (copy, pickle, inspect): not a plan field
            raise AttributeError(name)
        raise KeyError(f"Groups: plan.{name} was read, which is not among the keyed fields")


def with_fields(plan, **values):
    """The plan with the named fields replaced: a PlanArrays (dataclasses.replace) or a KeyedPlan (a new view holding
    the same keyed fields, the named ones replaced), as a cost function that prices a variant of its plan receives
    either (step.bf16_end_layers under search._prefilter's and compute_floor's keyed floors)."""
    if isinstance(plan, KeyedPlan):
        return KeyedPlan({**vars(plan), **values})
    import dataclasses

    return dataclasses.replace(plan, **values)


DENSE_LIMIT = 2**22  # the largest mixed-radix code Groups ranks with a table instead of a sort


SMALL_RANGE = 64  # a field whose values span at most this many integers is coded as value - min, unranked


def _codes(col: np.ndarray, small: bool = False) -> tuple[np.ndarray, int]:
    """(code of each value, number of codes) of a 1-d integer array: its dense rank (a
    presence table over its range where that is small, else a sort); small: value - min
    where the range spans at most SMALL_RANGE integers (codes that may go unused)."""
    lo, hi = int(col.min()), int(col.max())
    if lo == hi:
        return np.zeros(len(col), dtype=np.int64), 1
    if small and hi - lo < SMALL_RANGE:
        return col - lo, hi - lo + 1
    if hi - lo < DENSE_LIMIT:
        present = np.zeros(hi - lo + 1, dtype=bool)
        at = col - lo
        present[at] = True
        rank = np.cumsum(present)
        rank -= 1
        return rank.take(at), int(rank[-1]) + 1
    u, inv = np.unique(col, return_inverse=True)
    return inv.ravel(), len(u)


class Groups:
    """The candidates of a 1-d plan grouped by the distinct tuples of some of its integer
    fields (or properties), for functions that read only those fields and compute each
    candidate from its own inputs alone (elementwise; the cost models are): the caller
    evaluates such a function once per group, on `plan` (a KeyedPlan of one candidate per
    group) and `pick`'s arguments, and `expand` broadcasts the result back, the same numbers as
    on every candidate (no function is handed down here: the cost models are not called back). A search holds a million candidates but few distinct values of the fields a
    term reads (the model states do not depend on the micro-batch, SP or recompute; a
    layer's activations not on dp, pp or sharding): the term costs its groups, not its
    candidates. Each field's values are ranked (_codes) and the ranks combined in mixed
    radix, re-ranked whenever the product of the counts outgrows 4 n: no sort where the
    ranges are small."""

    def __init__(self, plan, fields: tuple, code=None):
        """code (optional): the candidates' tuples of `fields` already numbered (equal tuples, equal numbers;
        unequal tuples, unequal numbers: a larger set's Groups.index at these candidates), which then stands
        for the fields' own ranks (the same groups, numbered in the code's order)."""
        self.fields = fields
        cols = [np.asarray(getattr(plan, f)) for f in fields]
        self.n = n = int(np.size(plan.tp))
        self.active = np.ndim(plan.tp) == 1 and n > 1
        if not self.active:
            self.plan = KeyedPlan({f: c for f, c in zip(fields, cols)})
            return
        cols = [np.broadcast_to(c, (n,)).astype(np.int64, copy=False) for c in cols]
        ranked = cols
        if code is not None:  # the groups' numbers given: no field ranked
            code, card = _codes(np.asarray(code, dtype=np.int64))
            ranked = ()
        else:
            code, card = np.zeros(n, dtype=np.int64), 1
        limit = max(4 * n, 1024)  # the tables stay O(n)
        for c in ranked:
            if c.strides == (0,):  # one value viewed n times (a scalar, space._constant): one code, as _codes gives
                continue
            lo, hi = int(c.min()), int(c.max())
            if lo == hi:  # one code (_codes' m == 1)
                continue
            if hi - lo < SMALL_RANGE:  # _codes' small case, k = c - lo, folded into the code in place
                m = hi - lo + 1
                if card * m > limit:
                    code, card = _codes(code)
                if card == 1:  # every code 0: code * m + k is k
                    code = c - lo
                else:  # (code is this call's own array here: the zeros above, _codes' or this loop's result)
                    code *= m
                    code += c
                    code -= lo
                card = card * m
                continue
            k, m = _codes(c, small=True)
            if card * m > limit:
                code, card = _codes(code)
            code, card = code * m + k, card * m
        present = np.zeros(card, dtype=bool)
        present[code] = True
        rank = np.cumsum(present)
        rank -= 1
        self.index = rank.take(code)  # the group of each candidate
        self.size = u = int(self.index.max()) + 1 if n else 0
        first = np.empty(u, dtype=np.int64)
        first[self.index[::-1]] = np.arange(n - 1, -1, -1)  # the first candidate of each group
        self.first = first
        self.plan = KeyedPlan({f: c[first] for f, c in zip(fields, cols)})

    def pick(self, *arrays) -> list:
        """Each array (..., n), the candidates on its last axis, at one candidate of each group
        (for the function evaluated on `plan`); it must be constant in each group (checked: an
        error otherwise). Scalars stay."""
        if not self.active:
            return list(arrays)
        out = []
        for a in arrays:
            a = np.asarray(a)
            if np.ndim(a) == 0:
                out.append(a)
                continue
            one = a.take(self.first, axis=-1)
            if not np.array_equal(one.take(self.index, axis=-1), a):
                raise ValueError(f"Groups.pick: an argument varies inside a group of {', '.join(self.fields)}")
            out.append(one)
        return out

    def expand(self, r):
        """A result computed on `plan` (one per group) on the candidates: arrays with the groups
        on their last axis, possibly inside Terms, tuples, lists and dicts; scalars stay."""
        if not self.active:
            return r
        return gather(r, self.index, self.size)


def gather(r, index: np.ndarray, size: int):
    """Groups.expand with a given group index: a result with `size` groups on the last axis of
    its arrays (inside Terms, tuples, lists and dicts; scalars stay) at the groups `index`."""
    if isinstance(r, Terms):
        return Terms(**{key: gather(v, index, size) for key, v in r.items()})
    if isinstance(r, dict):
        return {key: gather(v, index, size) for key, v in r.items()}
    if isinstance(r, (tuple, list)):
        return type(r)(gather(v, index, size) for v in r)
    if np.ndim(r) == 0:
        return r
    r = np.asarray(r)
    if r.shape[-1] != size:
        raise ValueError(f"Groups: a result of shape {r.shape} lacks the {size} groups on its last axis")
    # take on the last axis: the same elements as r[..., index], without the fancy-index
    # machinery of an Ellipsis (2-4x faster on the search's arrays)
    return r.take(index, axis=-1)
