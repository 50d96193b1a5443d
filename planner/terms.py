"""Named terms whose sum is the total: what every cost function returns.

A Terms object maps names to numpy arrays (0-d for one plan, 1-d for a search). The
breakdown a user sees is the same arithmetic the search used.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np


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
