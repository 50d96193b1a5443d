"""explain names the stages whose step-end work the time terms hold (issue 22, critstage3 follow-up): the compute and
TP / CP / PP / EP terms are the critical stage's (step.critical_stage), but the DP gradient sync with the SP-gradient
all-reduce, and the optimizer step, are each the largest of the stages' own (step.step_end_stage: Megatron-LM
@d98e8a64 finalize_model_grads.py l. 637-677 runs each stage's own sync, optimizer.py step l. 816-851 each stage's
own step after the gradient norm's all-reduce). time.step_end_stages in the JSON (step.step_end_extras, from the
slots step_time already picks, so the search's same arithmetic) and the critical-stage line under the step table."""
from __future__ import annotations

import json

from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job

# Llama 3 8B (32 layers) at tp 8, pp 4 on 32 GPUs (dp 1), first / last stage 7 layers: stages 7, 9, 9, 7
SPLIT = dict(model="llama3-8b", gpus=32, tp=8, pp=4, sharding="zero1", micro_batch=1, global_batch=64, stack="megatron",
             first_stage_layers=7, last_stage_layers=7)
ARGS = ["explain", "--model", "llama3-8b", "--gpus", "32", "--tp", "8", "--pp", "4", "--sharding", "zero1",
        "--micro-batch", "1", "--global-batch", "64", "--first-stage-layers", "7", "--last-stage-layers", "7"]


def _time(**kw) -> dict:
    s, p, _ = resolve(Job(**kw))
    return to_json(s, p, evaluate(s, p))["time"]


def test_step_end_stages_differ_from_the_critical_stage():
    """The critical stage is the middle (9 layers: tests/test_explain_critical_stage.py, by compute + TP traffic). By
    hand, per GPU (tp 8 divides each alike), a Llama 3 8B layer holds 218,112,000 parameters (4,096 x (4,096 + 2 x 1,024
    + 4,096) attention + 3 x 4,096 x 14,336 MLP + 2 x 4,096 norms) and 8,192 of them in its two RMSNorms, which SP
    leaves partial on each TP rank; the embedding and the output layer 128,256 x 4,096 = 525,336,576 each, the final
    norm 4,096. The optimizer step reads each stage's parameters: middle 9 x 218,112,000 = 1,963,008,000, first
    7 x 218,112,000 + 525,336,576 = 2,052,120,576, last the same + 4,096 = 2,052,124,672: the last's step is the
    step's. At dp 1 there is no DP traffic, and the SP-partial norm gradients are middle 9 x 8,192 = 73,728,
    first 7 x 8,192 = 57,344, last 57,344 + 4,096 = 61,440: the middle's all-reduce is the step's."""
    t = _time(**SPLIT)
    assert t["critical_stage"]["stage"] == "middle"
    assert t["step_end_stages"] == {"gradients": "middle", "optimizer": "last"}
    assert t["dp_comm_s"] == 0.0 and t["tp_sp_norm_grads_s"] > 0


def test_one_stage_everything_the_only_stage():
    """pp 1: one stage, whose every term is (step_end_extras: 3, the only)."""
    t = _time(**dict(SPLIT, gpus=8, pp=1, first_stage_layers=None, last_stage_layers=None))
    assert t["step_end_stages"] == {"gradients": "only", "optimizer": "only"}


def test_explain_prints_the_step_end_stages(cli):
    """The text names them under the step table, from the same JSON: at dp 1 no DP traffic is named."""
    r = cli(*ARGS)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert ("the compute and communication terms above are that stage's, but for the step's end (each stage's own, "
            "the largest counted): the SP-gradient all-reduce (in TP) is the middle stage's, the optimizer step the last "
            "stage's") in " ".join(r.stdout.split())
    js = json.loads(cli(*ARGS, "--format", "json").stdout)
    assert js["time"]["step_end_stages"] == {"gradients": "middle", "optimizer": "last"}
    # dp 2 on 64 GPUs: each stage's exposed DP traffic joins its SP all-reduce, the stage whose sum is the largest
    # counted (here the last, whose 2,052,124,672 parameters' gradients outweigh the middle's 1,963,008,000 by far
    # more than the middle's 12,288 more SP-partial norm elements)
    r = cli(*[a if a != "32" else "64" for a in ARGS])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert ("but for the step's end (each stage's own, the largest counted): the DP / sharding communication, the "
            "SP-gradient all-reduce (in TP) and the optimizer step are the last stage's") in " ".join(r.stdout.split())
