"""fit searches where the layers a pipeline split leaves over go, on a stack whose trainer takes the end stages'
layers as settings (stack_db pipeline_stage_layers: Megatron-LM @d98e8a64 --decoder-first/last-pipeline-num-layers,
arguments.py l. 3095-3102; transformer_block.py get_num_layers_to_build l. 103-146): space.stage_placements, the
rows it adds, the explain command and the Megatron export of such a row (issue 22)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from planner.catalog import load_stack
from planner.space import stage_placements

JOB = ["--model", "llama3-70b", "--gpus", "96", "--hardware", "h100-sxm", "--tp", "8"]


def _settings(stack="megatron", layers=80, **ends):
    fields = dict(split_first=0, split_last=0, split_emb=0, split_loss=0) | ends
    return SimpleNamespace(stack=load_stack(stack), model=SimpleNamespace(num_layers=layers), **fields)


def test_placements_by_hand():
    """80 layers (llama3-70b), c = ceil(80 / pp), s = pp c - 80 slots left over:
    pp 3: c 27, s 1: choice 2 (27, 26); choice 1 is choice 0 itself at s = 1 (the stack's trim, ceil(1/2) = 1
      off the first stage: 26, 27, 27).
    pp 6: c 14, s 4: choice 1 (14 - 4 = 10, 14) where c > pp ceil(s/2): 14 > 6 x 2 = 12, yes; no choice 2 (s > 1).
    pp 7: c 12, s 4: 12 > 7 x 2 = 14 is false (the first stage's activations are not the peak): none.
    pp 9: c 9, s 1: choice 2 (9, 8). pp 4 and pp 2: s 0, none. pp 3 at vpp 2: none (one chunk a rank only).
    pp 1: none."""
    pp = np.array([3, 6, 7, 9, 4, 2, 3, 1])
    vpp = np.array([1, 1, 1, 1, 1, 1, 2, 1])
    allowed, first, last = stage_placements(_settings(), pp, vpp)
    assert allowed.tolist() == [[True, False, True], [True, True, False], [True, False, False], [True, False, True],
                                [True, False, False], [True, False, False], [True, False, False], [True, False, False]]
    assert first[0].tolist() == [0, 26, 27] and last[0].tolist() == [0, 27, 26]
    assert first[1, 1] == 10 and last[1, 1] == 14
    assert first[3, 2] == 9 and last[3, 2] == 8
    # pp 2 with s = 1 (DeepSeek-V3's 61 layers: c 31): choice 2 left out there (fit's speed, the docstring)
    a61, _, _ = stage_placements(_settings(layers=61), np.array([2, 31]), np.array([1, 1]))
    assert a61.tolist() == [[True, False, False], [True, False, True]]


def test_only_where_the_stack_and_the_job_allow():
    """None on torchtitan (its own front-loaded split, pipeline_split front), on Llama 3's (the ends counted as
    layers), beside the job's own first / last stage layers or account_for_*_in_pipeline_split (Megatron refuses
    them together, transformer_config.py l. 2229-2239); megatron-bridge inherits megatron's."""
    pp, vpp = np.array([3]), np.array([1])
    assert stage_placements(_settings("torchtitan"), pp, vpp) is None
    assert stage_placements(_settings("llama3-meta"), pp, vpp) is None
    assert stage_placements(_settings(split_first=26), pp, vpp) is None
    assert stage_placements(_settings(split_emb=1), pp, vpp) is None
    assert stage_placements(_settings("megatron-bridge"), pp, vpp) is not None


def _rows(cli, *args):
    r = cli("fit", *JOB, *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_fit_finds_the_faster_split_at_pp3(cli, tmp_path):
    """llama3-70b at tp 8, pp 3 on 96 H100: 80 layers, c 27, s 1. The stack's split is 26, 27, 27 with the
    output layer (8,192 x 128,256 = 1.05e9 weights, 2 x 1.05e9 FLOPs a token) and the loss on the last stage:
    a layer is 855.6e6 weights (2 x 855.6e6 FLOPs a token) plus attention 4 x seq x h = 4 x 8,192 x 8,192 = 268e6
    (non-causal, forward), 1.98e9 a token, so the output is 2.10 / 1.98 = 1.06 layers and the last stage the
    heaviest, 28.06 layers' worth. fit now also tries 27, 27, 26: the heaviest stage 27.06 (the last; the first
    is 27 and the embedding, a lookup), the step about 27.06 / 28.06 = 0.964 of the same plan on the stack's split
    (compute bound: every stage's passes scale with the slowest one's). Before, fit's best row was the stack's
    split (142.3 s at micro-batch 2); now its best is first 27, last 26."""
    top = _rows(cli, "--pp", "3", "--top", "1")[0]
    p = top["plan"]
    assert (p["first_stage_layers"], p["last_stage_layers"]) == (27, 26)
    same = ["--pp", "3", "--cp", "1", "--dp", str(p["dp"]), "--micro-batch", str(p["micro_batch"]), "--sharding",
            p["sharding"], "--recompute", p["recompute"], "--rank-order", p["rank_order"], "--global-batch",
            str(p["global_batch"]), "--seq-len", str(p["seq_len"]),
            "--tp-comm-overlap" if p.get("tp_comm_overlap") else "--no-tp-comm-overlap",
            "--sequence-parallel" if p["sequence_parallel"] else "--no-sequence-parallel"]
    r = cli("explain", *JOB, *same, "--format", "json")
    assert r.exit_code == 0, r.stderr
    even = json.loads(r.stdout)
    assert "first_stage_layers" not in even["plan"]
    ratio = top["time"]["step_s"] / even["time"]["step_s"]
    assert abs(ratio - 27.06 / 28.06) < 0.005, ratio
    # the row's explain command names the placement, and prices the same step
    r = cli("explain", *JOB, *same, "--first-stage-layers", "27", "--last-stage-layers", "26", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["time"]["step_s"] == top["time"]["step_s"]
    # the Megatron export writes it in Megatron's spelling and reads back as the plan priced (fit --export checks)
    out = tmp_path / "run.sh"
    r = cli("fit", *JOB, "--pp", "3", "--export", "megatron", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    assert "--decoder-first-pipeline-num-layers 27 " in text and "--decoder-last-pipeline-num-layers 26 " in text


def test_fit_by_memory_takes_the_lighter_first_stage(cli):
    """llama3-70b at tp 8, pp 6, micro-batch 2, no recompute, ranked by memory: 80 layers, c 14, s 4. The stack's
    split 12, 14 x 4, 12: under 1F1B the first stage holds pp = 6 micro-batches in flight, the second 5
    (pipeline.inflight_microbatches), 12 x 6 = 72 layer-micro-batches against 14 x 5 = 70: the first stage is the
    peak. All four slots off the first stage (10, 14 x 4, 14): 10 x 6 = 60, and the peak is the middle stage's,
    which neither placement changes (14 layers, 5 in flight), so the least-memory row holds first 10, last 14 and
    its peak is the middle stage's, below the stack's split's (its first stage)."""
    rows = _rows(cli, "--pp", "6", "--micro-batch", "2", "--recompute", "none", "--objective", "memory", "--top", "40")
    top = rows[0]
    p, st = top["plan"], top["memory"]["stages"]
    assert (p["first_stage_layers"], p["last_stage_layers"]) == (10, 14)
    assert st["first"]["total_bytes"] < st["middle"]["total_bytes"]
    even = next(x for x in rows if "first_stage_layers" not in x["plan"] and x["plan"]["sharding"] == p["sharding"]
                and x["plan"]["dp"] == p["dp"])
    assert even["memory"]["stages"]["middle"]["total_bytes"] == st["middle"]["total_bytes"]
    assert even["memory"]["stages"]["first"]["total_bytes"] > st["middle"]["total_bytes"]
