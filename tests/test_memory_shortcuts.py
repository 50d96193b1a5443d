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
