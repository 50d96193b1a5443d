"""The rules' shortcuts for the search's many candidates (issue 24, start-up and search speed)
give the booleans of the general computation, element for element:

- startup.split_overdrawn on (n,) pipeline splits with one pair of counted ends is computed once
  per (pp, vpp) of a table and looked up (startup._per_split);
- startup.stack_order_ok and uses_tp_pp_dp_mapping on candidates that all have one rank order
  (space.choose_modes' base rows: the stack's first order) answer without the strides.

The general path is forced by one extra candidate of another shape or order; the shortcut must
agree with it on every other candidate.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from planner.catalog import load_stack
from planner.comm import ORDER_CODES, order_code
from planner.startup import _per_split, _Split, _split_overdrawn, split_overdrawn, stack_order_ok, uses_tp_pp_dp_mapping


def test_split_overdrawn_by_table_is_the_direct_rule():
    rng = np.random.default_rng(24)
    n = 8192
    for layers in (1, 5, 40, 61, 126):
        for e, l_ in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 3)):
            pp, vpp = rng.integers(1, 40, n), rng.integers(1, 12, n)
            for ends in ((e, l_), (np.full(n, e), np.full(n, l_))):
                plan = _Split(pp, vpp, *ends)
                assert _per_split(plan) is not None  # the table is taken
                fast = split_overdrawn(layers, plan)
                assert fast.dtype == bool and fast.shape == (n,)
                assert np.array_equal(fast, _split_overdrawn(layers, plan)), (layers, e, l_)
    # llama2-13b's 40 layers on pp 16 (one chunk each): 1 + 14 x 3 + 1 = 44 layers, overdrawn; pp 8 places 5 each
    plan = _Split(np.array([16] * 4096 + [8] * 4096), np.ones(8192, dtype=np.int64), 0, 0)
    got = split_overdrawn(40, plan)
    assert got[:4096].all() and not got[4096:].any()


def test_split_overdrawn_keeps_the_direct_rule_for_mixed_ends():
    pp = np.arange(1, 8193) % 17 + 1
    plan = _Split(pp, np.ones(8192, dtype=np.int64), np.arange(8192) % 2, 0)  # ends that differ: no table
    assert _per_split(plan) is None
    assert np.array_equal(split_overdrawn(61, plan), _split_overdrawn(61, plan))


def _sizes(n, rng):
    return {ax: rng.choice([1, 2, 4, 8], n) for ax in ("tp", "cp", "pp", "dp")}


def test_one_listed_order_for_every_candidate_is_the_general_answer():
    rng = np.random.default_rng(7)
    stack = load_stack("megatron")
    n = 5000
    s = _sizes(n + 1, rng)
    other = ORDER_CODES["dp-pp-cp-tp"]
    for name in ("tp-cp-dp-pp", "tp-cp-pp-dp"):
        code = order_code(name)
        order = np.full(n + 1, code)
        order[-1] = other  # one candidate of another order: the general path
        general = stack_order_ok(stack, order, **s)[:n]
        fast = stack_order_ok(stack, order[:n], **{k: v[:n] for k, v in s.items()})
        assert np.array_equal(fast, general), name
        plan = SimpleNamespace(order=order, **s)
        general = uses_tp_pp_dp_mapping(plan)[:n]
        fast = uses_tp_pp_dp_mapping(SimpleNamespace(order=order[:n], **{k: v[:n] for k, v in s.items()}))
        assert np.array_equal(fast, general), name
    # Megatron builds its default order everywhere; tp-cp-pp-dp needs the mapping where pp and dp both exceed 1
    assert stack_order_ok(stack, np.full(n, order_code("tp-cp-dp-pp")), **{k: v[:n] for k, v in s.items()}).all()
    need = uses_tp_pp_dp_mapping(SimpleNamespace(order=np.full(n, order_code("tp-cp-pp-dp")), **{k: v[:n] for k, v in s.items()}))
    assert np.array_equal(need, (s["pp"][:n] > 1) & (s["dp"][:n] > 1))
