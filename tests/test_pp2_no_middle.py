"""pp 2 has no middle stage (issue 22): with the ends counted in the split, stage_layers' "middle" at
pp 2 is stage 1's layers, and the step prices the heavier of the two real stages."""
from __future__ import annotations

import numpy as np

from planner.explain import evaluate, to_json
from planner.pipeline import SPLIT_FRONT, stage_layers
from planner.plan import resolve
from planner.schema import Job

TITAN = dict(model="llama2-13b", gpus=128, tp=2, pp=2, sharding="hsdp", shard_group=16, global_batch=256,
             stack="torchtitan", torch_compile=True)  # tests/snapshot_cases.py DENSE_PLANS[4]


def test_stage_layers_pp2_middle_is_stage_one():
    """40 layers + the embedding + the loss = 42 units on pp 2 (Megatron-LM
    --account-for-embedding/loss-in-pipeline-split): 21 units a stage, stage 0 the embedding + 20
    layers, stage 1 20 layers + the loss, so the "middle" (stage 1) holds 20, not ceil(42/2) = 21.
    vpp 2: 4 chunks of ceil(42/4) = 11, slack 2, chunk 0 11 - 1 - 1 = 9, chunk 3 11 - 1 - 1 = 9:
    stage 0 9 + 11 = 20, stage 1 11 + 9 = 20 (not 22). torchtitan's front rule, 42 on 2: 21 and 21,
    less the embedding / the loss: 20, 20. pp 4 keeps its middle: ceil(42/4) = 11, slack 2, first
    11 - 1 - 1 = 9, middle 11, last 9."""
    assert [int(x) for x in stage_layers(40, 2, 1, 1, 1)] == [20, 20, 20]
    assert [int(x) for x in stage_layers(40, 2, 2, 1, 1)] == [20, 20, 20]
    assert [int(x) for x in stage_layers(40, 2, 1, 1, 1, SPLIT_FRONT)] == [20, 20, 20]
    assert [int(x) for x in stage_layers(40, 4, 1, 1, 1)] == [9, 11, 9]
    # the loss alone counted, 41 layers: 42 units, 21 a stage: stage 0 21 layers, stage 1 20 + the loss
    assert [int(x) for x in stage_layers(41, 2, 1, 0, 1)] == [21, 20, 20]



def _step_compute(**fields):

    s, p, _ = resolve(Job(**fields))
    return to_json(s, p, evaluate(s, p))["time"]["compute_s"]


def test_torchtitan_pp2_prices_the_real_stages():
    """torchtitan counts both ends in its split (its default): 40 + 2 = 42 units on pp 2, 21 a stage:
    stage 0 = embedding + 20 layers, stage 1 = 20 layers + output layer and loss. The same layers
    per stage as with the ends not counted (40 on 2: 20, 20), so the step's compute (the heavier
    stage: the last, 20 layers + the head) is that plan's exactly; before the fix it priced a
    21-layer stage, 21/20 of the layers (+2.8% compute)."""
    counted = _step_compute(**TITAN)
    plain = _step_compute(**TITAN, account_for_embedding_in_pipeline_split=False,
                          account_for_loss_in_pipeline_split=False)
    assert counted == plain


def test_megatron_pp2_account_for_ends():
    """Megatron-LM with --account-for-embedding-in-pipeline-split and
    --account-for-loss-in-pipeline-split on pp 2: 40 + 2 units, 21 a stage, 20 layers on each stage
    (arguments.py's rule, pipeline.py [6]), the same as without the flags (40 on 2: 20, 20): the
    compute is the unflagged job's."""
    job = dict(model="llama2-13b", gpus=64, tp=4, pp=2, sharding="zero1", global_batch=64, micro_batch=1,
               stack="megatron")
    flagged = _step_compute(**job, account_for_embedding_in_pipeline_split=True,
                            account_for_loss_in_pipeline_split=True)
    assert flagged == _step_compute(**job)
