"""One per-stage layer table (pipeline.stage_table), read by memory.recompute_fraction, plan_stage_layer_table
and stage_end_layers alike: chunk_layers' chunks laid one after another (pipeline.chunk_starts), chunk j on stage
j mod pp (Megatron-Core get_transformer_layer_offset, vp-major order: pipeline.py [7]).

It differs from the former closed form (stage_layers' first / middle / last spread over the stages) only on
degenerate splits, which the rules refuse; there the closed form counted layers the model does not have (its
floor of one layer per end stage) and the table places the model's L layers:
- trim_ends with more slack than the end chunks hold (startup.split_overdrawn: MEGATRON_PP_SPLIT, SPLIT_UNITS):
  5 layers on pp 4, c = ceil(5 / 4) = 2, slack 4 x 2 - 5 = 3, the first chunk 2 - ceil(3 / 2) = 0, the last
  2 - floor(3 / 2) = 1: [0, 2, 2, 1] (the closed form: [1, 2, 2, 1], 6 layers);
- Megatron's uneven split on pp 2 with first + last > L (Megatron-LM @d98e8a64 transformer_config.py l. 2338-2343,
  "Mismatch: ... middle layers remaining but 0 middle PP stages"; plan rule SPLIT_UNITS, uneven_split_broken):
  8 layers, first 7, last 5: [7, 1] (was [7, 5]);
- the front rule with an end weight above floor(L' / S) (SPLIT_UNITS); DeepSpeed's bisection with an end stage
  left without a layer (DEEPSPEED_PP_SPLIT_ENDS) or at vpp > 1 (no bisection stack runs interleaved).
"""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
from planner.memory import RC_FULL, recompute_fraction
from planner.plan import uneven_split_broken
from planner.pipeline import SPLIT_BISECTION, SPLIT_FRONT, chunk_layers, stage_end_layers, stage_layer_table, stage_table


class _Split:
    def __init__(self, pp, vpp, e=0, l_=0, front=0, first=0, last=0):
        self.pp, self.vpp, self.split_emb, self.split_loss = pp, vpp, e, l_
        self.split_front, self.split_first, self.split_last = front, first, last


def _grid():
    for L, p, v in itertools.product((1, 2, 5, 9, 10, 13, 32, 61), (1, 2, 3, 4, 8), (1, 2, 3)):
        if p == 1 and v > 1:
            continue
        for e, l_, front in itertools.product((0, 1), (0, 1), (0, SPLIT_FRONT, SPLIT_BISECTION)):
            yield L, p, v, e, l_, front, 0, 0
        for first, last in ((1, 0), (0, 2), (3, 5), (7, 5)):
            yield L, p, v, 0, 0, 0, first, last


def test_every_split_places_exactly_the_model_layers():
    """Whatever the split, degenerate ones included, the stages hold no layer the model lacks (a sum <= L, each a
    count >= 0; the closed form's 5 on 4: 1 + 2 + 2 + 1 = 6): exactly its L layers under the trim, front and
    bisection rules (their chunks sum to L before the clamp) and under every uneven split Megatron-Core takes
    (plan.uneven_split_broken false; a refused one may leave layers out, first 1 on vpp 2: 1 // 2 a chunk); and stage
    s holds chunk_layers' chunks s, s + p, ... where those are a placement (no negative chunk, a sum of L)."""
    for L, p, v, e, l_, front, first, last in _grid():
        row = stage_layer_table(L, p, v, e, l_, front, first, last).tolist()
        takes = not (first or last) or not bool(uneven_split_broken(L, _Split(p, v, e, l_, front, first, last)))
        assert len(row) == p and min(row) >= 0 and sum(row) <= L, (L, p, v, e, l_, front, first, last, row)
        assert sum(row) == L or not takes, (L, p, v, e, l_, front, first, last, row)
        ch = chunk_layers(L, p, v, e, l_, front, first, last)
        if p > 1 and min(ch) >= 0 and sum(ch) == L:
            assert row == [sum(ch[s::p]) for s in range(p)]


def test_degenerate_splits_by_hand():
    """The two cases of the module docstring: trim_ends 5 on pp 4 -> [0, 2, 2, 1]; Megatron's uneven 7 / 5 of 8
    on pp 2 -> chunk lengths [7, 5] laid from layer 0 and clamped to 8 -> [7, 1]; and 9 layers on pp 4 by
    DeepSpeed's bisection (3 a chunk from the first: 3, 3, 3, 0), DEEPSPEED_PP_SPLIT_ENDS's refusal."""
    assert stage_layer_table(5, 4, 1).tolist() == [0, 2, 2, 1]
    assert stage_layer_table(8, 2, 1, first=7, last=5).tolist() == [7, 1]
    assert stage_layer_table(9, 4, 1, split_front=SPLIT_BISECTION).tolist() == [3, 3, 3, 0]


def test_stage_end_layers_reads_the_same_table():
    """stage_end_layers over the whole index range [0, L) (n0 = L) is the table's stage 0, its heaviest stage
    between the ends (0 with fewer than 3 stages) and its stage p - 1, on every split of the grid, vectorized over
    the plans (one row per distinct split)."""
    rows = list(_grid())
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows)]
    for L in sorted(set(cols[0].tolist())):
        sel = cols[0] == L
        plan = _Split(*(c[sel] for c in cols[1:]))
        f, m, la = stage_end_layers(L, plan, L, 0)
        configs, table = stage_table(L, plan)
        for i, (p, *_rest) in enumerate(zip(*(c[sel] for c in cols[1:]))):
            want = table[configs.inverse[i]]
            assert int(f[i]) == want[0] and int(la[i]) == want[p - 1]
            assert int(m[i]) == (int(want[1:p - 1].max()) if p > 2 else 0)


def test_recompute_fraction_on_an_overdrawn_split():
    """Full recompute capped at 1 layer a stage (Megatron's block method, --recompute-num-layers 1) on the
    table's 5 layers on pp 4, [0, 2, 2, 1]: min(s_k, 1) = 0 + 1 + 1 + 1 = 3 of 5 layers re-run, 0.6 (the closed
    form's [1, 2, 2, 1]: 4 of 6); and 32 layers on the same pp, 8 a stage: 4 of 32. Priced directly on the
    fields recompute_fraction reads (the rules refuse the 5-layer split: split_overdrawn)."""
    plan = _Split(np.array([4, 4]), np.array([1, 1]))
    plan.recompute = np.array([RC_FULL, RC_FULL])
    for L, share in ((5, 3 / 5), (32, 4 / 32)):
        settings = SimpleNamespace(model=SimpleNamespace(num_layers=L), recompute_layers=1)
        assert recompute_fraction(settings, plan).tolist() == [share, share]
