"""memory.py's stack-data shortcuts (branch memdisp, issues 23/24) give the numbers of the full computation, bit for
bit: the sharding modes' optimizer-step gradient copies (_step_grad_copies [sg]) are not priced where no mode of
the stack makes one (Megatron's modes state only the fp32 copy, the tensor itself on its default fp32 grad buffer),
and _largest_params, which only they read, is not computed there; and _step_excess returns the optimizer step's
term alone where no [zb], [z3s] or [sg] moment is priced (the others +0.0, as the full lines give)."""

from __future__ import annotations

import numpy as np
import pytest

from planner import memory as mem
from planner.plan import resolve
from planner.schema import Job
from planner.search import memory_totals
from planner.space import OK, SpaceOptions, build_space, settings_for


def _forced(monkeypatch):
    """_PerLayer with the shortcuts off: the copies priced wherever a mode states step_grads, as before them (and
    so _step_excess's full lines run)."""
    orig = mem._PerLayer._step_parts

    def full(self, settings, plan, pc, stack, ctx):
        orig(self, settings, plan, pc, stack, ctx)
        self.step_copies = self.step_grads is not None
        self.largest_params = mem._largest_params(pc, plan, ctx) if self.step_copies else None
    monkeypatch.setattr(mem._PerLayer, "_step_parts", full)


@pytest.mark.parametrize("job, shortcut", [
    (Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096), True),
    (Job(model="llama3-70b", gpus=512, sharding="zero1"), True),
    (Job(model="llama3-70b", gpus=512, sharding="zero1", bytes_per_param="mixed16"), False),  # bf16 grads: fp32 copy
])
def test_step_grad_copies_shortcut_is_exact(job, shortcut, monkeypatch):
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, job.precision, SpaceOptions(pp=(1, 4)))
    rows = np.flatnonzero(space.codes == OK)[::53][:200]
    b = np.repeat(rows, len(space.recompute))
    r = np.tile(np.arange(len(space.recompute)), len(rows))
    per = mem._PerLayer(settings, space.base.take(rows[:3]), mem.count_params(settings.model))
    assert per.step_grads is not None and per.step_copies is (not shortcut)
    fast = memory_totals(space, b, r)
    _, plan, _ = resolve(job.model_copy(update=dict(tp=8, pp=4)))
    fast_terms = mem.stage_memory_terms(settings, plan)
    _forced(monkeypatch)
    assert np.array_equal(memory_totals(space, b, r), fast)
    slow_terms = mem.stage_memory_terms(settings, plan)
    for stage in fast_terms:
        for k in fast_terms[stage].keys():
            assert np.array_equal(fast_terms[stage][k], slow_terms[stage][k]), (stage, k)
    if shortcut:  # what the full computation gives there: no copy on any stage
        assert all(bool(np.all(t["step_grad_copies"] == 0.0)) for t in slow_terms.values())


def test_blocks_take_the_rows_state_groups(monkeypatch):
    """search.memory_totals groups its rows by the model-state fields once (the states floor's Groups) and hands
    each block its rows' group numbers (memory_total's `states`): the same totals, bit for bit, as each block
    grouping its plans itself (DeepSeek-V3 / 2,048 H800, 3,000 rows x every recompute choice, several blocks)."""
    from planner import search

    job = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096)
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, job.precision, SpaceOptions())
    rows = np.flatnonzero(space.codes == OK)[::37][:3000]
    b = np.repeat(rows, len(space.recompute))
    r = np.tile(np.arange(len(space.recompute)), len(rows))
    monkeypatch.setattr(search, "CHUNK", 3 * 700)  # blocks of 700 rows
    given = []
    orig = mem.memory_total

    def spy(*a, **k):
        given.append(a[5] if len(a) > 5 else k.get("states"))
        return orig(*a, **k)
    monkeypatch.setattr(mem, "memory_total", spy)
    fast = memory_totals(space, b, r)
    usable = mem.capacity(settings)[1]
    fast_fit = search.fitting_memory(space, b, r, usable)[0]
    assert len(given) > 4 and all(g is not None for g in given)

    def own(*a, **k):
        return orig(*a[:5])  # each block groups its plans itself
    monkeypatch.setattr(mem, "memory_total", own)
    assert np.array_equal(memory_totals(space, b, r), fast)
    assert np.array_equal(search.fitting_memory(space, b, r, usable)[0], fast_fit)


def test_groups_from_given_numbers():
    """terms.Groups with the candidates' numbers given (a larger set's index): the same partition as ranking the
    fields, each group's plan the same field values."""
    from planner.terms import Groups, KeyedPlan

    rng = np.random.default_rng(3)
    cols = {"a": rng.integers(0, 3, 500), "b": rng.integers(5, 7, 500), "c": np.full(500, 4)}
    plan = KeyedPlan({**cols, "tp": np.ones(500, dtype=np.int64)})
    whole = Groups(plan, ("a", "b", "c"))
    sub = np.flatnonzero(rng.random(500) < 0.3)
    part = KeyedPlan({k: v[sub] for k, v in {**cols, "tp": np.ones(500, dtype=np.int64)}.items()})
    mine, given = Groups(part, ("a", "b", "c")), Groups(part, ("a", "b", "c"), code=whole.index[sub])
    assert given.size == mine.size
    for f in ("a", "b", "c"):  # every candidate's group holds its own values
        assert np.array_equal(getattr(given.plan, f)[given.index], cols[f][sub])
    # the same partition: two candidates share a group in one exactly where they do in the other
    assert np.array_equal(mine.index[:, None] == mine.index[None, :], given.index[:, None] == given.index[None, :])
