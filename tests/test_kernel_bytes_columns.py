"""stacks.kernel_bytes on a column of plans (branch memdisp: the compile column reduced once, not once per
field): each plan's figure is the stack's compiled kernel figure where it compiles and the field is one the
compile reaches (the loss's always, the layers' where the model code compiles its blocks), the eager figure
elsewhere; one value where every plan agrees, per plan otherwise; no plans: the compiled figures (np.all of
nothing), as before."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.catalog import load_stack
from planner.stacks import KERNEL_FIELDS, LOSS_FIELDS, _field, kernel_bytes


@pytest.mark.parametrize("blocks", [True, False])
@pytest.mark.parametrize("compile_", [[0, 0, 0], [1, 1, 1], [0, 1, 1], [1, 0, 0], []])
def test_kernel_bytes_per_plan(compile_, blocks):
    stack = load_stack("torchtitan")
    assert stack.compiled_kernels is not None
    settings = SimpleNamespace(code_compiles_blocks=blocks)
    c = np.asarray(compile_, dtype=np.int64)
    kb = kernel_bytes(stack, c, settings)
    differ = 0
    for f in KERNEL_FIELDS:
        reached = f in LOSS_FIELDS or blocks
        comp, eager = _field(stack.compiled_kernels, f), _field(stack.kernels, f)
        want = np.array([comp if (reached and x > 0) else eager for x in compile_], dtype=np.float64)
        got = np.broadcast_to(np.asarray(kb[f]), c.shape)
        assert np.array_equal(got, want, equal_nan=True), f
        if len(compile_) and (len(set(compile_)) == 1 or not reached):
            assert np.ndim(kb[f]) == 0, f  # one value where every plan agrees
        if not len(compile_):  # no plans: the compiled figures
            assert np.array_equal(np.asarray(kb[f]), np.float64(comp), equal_nan=True), f
        differ += comp != eager
    assert differ  # torchtitan's compiled figures differ from its eager ones: the test can fail
