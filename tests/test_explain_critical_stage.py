"""explain names the critical pipeline stage (issue 22, critstage): the stage whose micro-batch, its compute plus
its own exposed TP, CP, PP and EP communication, takes longest (step.critical_stage), whose terms the step table
is: time.critical_stage in the JSON (step.CRITICAL_STAGE_NAMES, the transformer layers it holds, what it holds
beside them) and one line under the step table (planner/render/explain.py time_table)."""
from __future__ import annotations

import json

from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job

LLAMA = dict(model="llama3-8b", gpus=32, tp=2, pp=4, sharding="zero1", micro_batch=1, global_batch=64,
             stack="megatron")


def _crit(**kw) -> dict:
    s, p, _ = resolve(Job(**kw))
    return to_json(s, p, evaluate(s, p))["time"]["critical_stage"]


def test_first_stage_named_with_its_layers_and_embedding():
    """--decoder-first-pipeline-num-layers 11 --decoder-last-pipeline-num-layers 7 on pp 4 (Megatron-LM @d98e8a64
    transformer_block.py l. 103-146): stages 11, 7, 7, 7; stage 0's 11 layers outweigh the last's 7 + the head
    (tests/test_pp_critical_comm.py), so the critical stage is the first, 11 layers + the embedding."""
    assert _crit(**LLAMA, first_stage_layers=11, last_stage_layers=7) == {
        "stage": "first", "layers": 11, "holds": ["embedding"]}


def test_middle_stage_named_where_its_traffic_makes_it_critical():
    """First / last 7 on pp 4, tp 8: stages 7, 9, 9, 7 + the head; by compute the last (7 t + head > 9 t), by
    compute + TP traffic the middle (tests/test_pp_critical_comm.py): a middle stage of 9 layers, nothing else."""
    assert _crit(**dict(LLAMA, tp=8), first_stage_layers=7, last_stage_layers=7) == {
        "stage": "middle", "layers": 9, "holds": []}


def test_one_stage_and_the_dualpipe_end_pair():
    """pp 1: the only stage, all 32 layers, the embedding and the output layer + loss. DualPipe on pp 2
    (DeepSeek-V2-Lite, 27 layers: 13 + 14, tests/test_pp_first_stage.py): both ranks run stage 0 and stage 1
    paired, the end pair, 27 layers, both ends' extras."""
    assert _crit(**dict(LLAMA, gpus=8, tp=8, pp=1)) == {
        "stage": "only", "layers": 32, "holds": ["embedding", "output layer + loss"]}
    job = dict(model="deepseek-v2-lite", gpus=16, hardware="h800-sxm", tp=1, pp=2, dp=8, ep=8, micro_batch=1,
               global_batch=64, seq_len=4096, sharding="zero1", precision="fp8", stack="deepseek",
               recompute="selective")
    assert _crit(**job) == {"stage": "end pair", "layers": 27, "holds": ["embedding", "output layer + loss"]}


def test_explain_prints_the_critical_stage(cli):
    """The text report names it under the step table, from the same JSON (the one renderer)."""
    args = ["explain", "--model", "llama3-8b", "--gpus", "32", "--tp", "2", "--pp", "4", "--sharding", "zero1",
            "--micro-batch", "1", "--global-batch", "64", "--first-stage-layers", "11", "--last-stage-layers", "7"]
    r = cli(*args)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert ("critical pipeline stage: first (11 layers + embedding), the slowest micro-batch by its compute plus "
            "its own TP, CP and PP communication") in " ".join(r.stdout.split())
    js = json.loads(cli(*args, "--format", "json").stdout)
    assert js["time"]["critical_stage"]["stage"] == "first"
