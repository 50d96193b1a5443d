"""scripts/qwen3_pp_replay.py, the dependency replay behind docs/qwen3_pp_gap.md "Re-checked (branch qwen30)": a
hand-derived case, and the figures the note quotes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from qwen3_pp_replay import interleaved_step  # noqa: E402


@pytest.mark.parametrize("rendezvous", [False, True])
def test_one_chunk_is_1f1b(rendezvous):
    """p 2, one chunk, 4 micro-batches, forward 1, backward 2, no hop, by hand: rank 1 runs F0 [1, 2], B0 [2, 4],
    F1 [4, 5], B1 [5, 7], F2 [7, 8], B2 [8, 10], F3 [10, 11], B3 [11, 13]; rank 0 F0 F1 [0, 2], F2 [2, 3], B0 [4, 6],
    F3 [6, 7], B1 [7, 9], B2 [10, 12], B3 [13, 15]: 15 = (m + p - 1)(f + b), each rank busy 12."""
    step, busy = interleaved_step(2, 1, 4, 2, lambda r, c: 1.0, lambda r, c: 2.0, 0.0, rendezvous=rendezvous)
    assert step == pytest.approx(15.0)
    assert busy == pytest.approx([12.0, 12.0])


def test_hop_on_the_path():
    """the same with a hop of 0.5 (warm-up sends waited whole, steady ones not, x = 0), by hand: rank 0 F0 [0, 1],
    F1 [1.5, 2.5] (F0's send waited), F2 [3, 4] (F1's too), B0 [5, 7] (rank 1's B0 ends 4.5), F3 [7, 8], B1 [8, 10],
    B2 [11, 13], B3 [14, 16]; rank 1 F0 [1.5, 2.5], B0 [2.5, 4.5], F1 [4.5, 5.5], B1 [5.5, 7.5], F2 [7.5, 8.5],
    B2 [8.5, 10.5], F3 [10.5, 11.5], B3 [11.5, 13.5]: 16, two hops on the step's path."""
    step, _ = interleaved_step(2, 1, 4, 2, lambda r, c: 1.0, lambda r, c: 2.0, 0.5)
    assert step == pytest.approx(16.0)


@pytest.mark.parametrize("rendezvous", [False, True])
def test_the_notes_figures(rendezvous):
    """docs/qwen3_pp_gap.md: the 25.11 layout (p 2, v 24, m 32, N 2), chunk forward 9.28 ms / backward 7.46 ms, the
    head 8 / 17 ms on rank 1's last chunk, a 0.7 ms hop: step 13.743 s against the busiest rank's 13.660 s (the last,
    with the head), with or without the rendezvous."""
    f = (6.39 / 3 + 3.53 + (2.07 + 0.87) / 2) / 768
    b = (2 * 6.39 / 3 + (2.07 + 0.87) / 2) / 768
    step, busy = interleaved_step(2, 24, 32, 2, lambda r, c: f + (8e-3 if (r, c) == (1, 23) else 0.0),
                                  lambda r, c: b + (17e-3 if (r, c) == (1, 23) else 0.0), 0.7e-3, rendezvous=rendezvous)
    assert max(busy) == pytest.approx(busy[1]) and busy[1] == pytest.approx(768 * (f + b) + 32 * 25e-3)
    assert step == pytest.approx(13.743, abs=5e-4)
    assert step / max(busy) == pytest.approx(1.0060, abs=5e-4)
