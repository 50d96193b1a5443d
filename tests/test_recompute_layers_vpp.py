"""Megatron's block recompute window is a model chunk's (issue 22 critstage3): --recompute-num-layers n
re-runs the first n layers of each model chunk (NVIDIA/Megatron-LM @d98e8a64 megatron/core/recompute.py
l. 167-181, `layer_idx < recompute_num_layers` over num_layers_per_pipeline_rank = len(self.layers), the
chunk's own block: transformer_block.py l. 334), so a GPU re-runs n x vpp layers of equal chunks (the readers'
recompute_layers = n x vpp). A job recompute_layers that vpp does not divide is no --recompute-num-layers:
start-up rule MEGATRON_RECOMPUTE_LAYERS_VPP (code 102) refuses it on the megatron set (fit never searches
recompute_layers: fit_config.PLAN_FIELDS), and the step prices the window it does run."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job

JOB = dict(model="llama3-8b", gpus=8, sharding="zero1", global_batch=64, seq_len=4096, pp=4, vpp=2, recompute="full")


def test_recompute_layers_not_a_multiple_of_vpp_is_refused(cli):
    """Llama 3 8B (32 layers) at pp 4, vpp 2: 8 layers a GPU in two chunks of 4. recompute_layers 6 is
    --recompute-num-layers 3 (6 = 3 x 2): accepted; 5 is no n (2 x 2 = 4, 3 x 2 = 6): refused naming the rule
    (exit 2, hint, no traceback). At vpp 1 5 is n = 5; torchtitan (every n-th layer, no per-chunk window)
    takes 5 at vpp 2."""
    from planner.startup import CODES

    assert resolved_plan(Job(**JOB, recompute_layers=6))["recompute_layers"] == 6
    with pytest.raises(PlannerError, match="MEGATRON_RECOMPUTE_LAYERS_VPP") as e:
        resolve(Job(**JOB, recompute_layers=5))
    assert "recompute.py l. 167-181" in e.value.message and "multiple of vpp" in e.value.hint
    assert resolved_plan(Job(**{**JOB, "vpp": 1}, recompute_layers=5))["recompute_layers"] == 5
    assert resolved_plan(Job(**{**JOB, "stack": "torchtitan", "sharding": "fsdp"}, recompute_layers=5))["vpp"] == 2
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--pp", "4", "--vpp", "2", "--recompute", "full",
            "--recompute-layers", "5", "--global-batch", "64", "--seq-len", "4096")
    assert r.exit_code == 2 and "MEGATRON_RECOMPUTE_LAYERS_VPP" in r.stderr and "hint:" in r.stderr
    assert "Traceback" not in r.stderr
    assert CODES["MEGATRON_RECOMPUTE_LAYERS_VPP"] == 102  # FIXED_CODE_RULES (critstage3)


def test_priced_window_is_n_per_chunk():
    """What the step and HFU price at recompute_layers 6, pp 4, vpp 2 (chunks of 4 layers, n = 3 a chunk): each
    stage re-runs 3 + 3 = 6 of its 8 layers (min(4, 3) per chunk, = min(8, 6)), the model 24 of 32
    (recompute_fraction 0.75); at 4 (n = 2) 4 of 8 a stage, 16 of 32 (0.5)."""
    from planner.memory import recompute_fraction
    from planner.plan import resolve as _resolve
    from planner.step import _context

    for cap, per_stage, share in ((6, 6.0, 0.75), (4, 4.0, 0.5)):
        settings, plan = _resolve(Job(**JOB, recompute_layers=cap))[:2]
        sc = _context(settings, plan)
        assert [float(np.asarray(sc.rc[st]).ravel()[0]) for st in ("first", "mid", "last")] == [per_stage] * 3
        assert float(np.asarray(recompute_fraction(settings, plan)).ravel()[0]) == share
