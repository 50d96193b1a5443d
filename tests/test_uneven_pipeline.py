"""Megatron-LM's uneven pipeline split, --decoder-first-pipeline-num-layers /
--decoder-last-pipeline-num-layers (the job's first_stage_layers / last_stage_layers,
planner/pipeline.py [14]): the placement as Megatron-LM @d98e8a64 builds it
(transformer_block.py get_num_layers_to_build l. 103-146, transformer_layer.py
get_transformer_layer_offset l. 80-178), Megatron-Core's rules on it (transformer_config.py
__post_init__ l. 2229-2239, 2294-2368) as exit-2 errors, the memory and time of the stages it
makes, the Megatron reader and export, and fit, which holds them on every plan it ranks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_one_error
from planner.pipeline import chunk_layers, stage_layers

JOB = ["--model", "llama3-70b", "--gpus", "96", "--tp", "8", "--pp", "6", "--hardware", "h100-sxm"]


def test_stage_and_chunk_layers_as_megatron_places_them():
    """get_num_layers_to_build: the first (last) rank the given count, the L - F - E others equally over
    the ranks left; with vpp chunks each chunk 1/vpp of its rank's, round by round
    (get_transformer_layer_offset: offset = vp_stage (F + M + E)/vpp + ...).
    12 on pp 4 with 2 / 2: 2, (12 - 4)/2 = 4, 4, 2. 24 on pp 4 x vpp 2 with 2 / 2: the middle ranks
    (24 - 4)/2 = 10 each, 5 a chunk; the end ranks 1 a chunk: chunks 1, 5, 5, 1, 1, 5, 5, 1.
    The first only, 12 on pp 3 with 2: the last rank is a middle one, (12 - 2)/2 = 5. pp 2 with both:
    no middle rank, the middle candidate is stage 1's (the last), as _stage_chunks takes it."""
    assert [int(x) for x in stage_layers(12, 4, 1, first=2, last=2)] == [2, 4, 2]
    assert chunk_layers(12, 4, 1, first=2, last=2) == [2, 4, 4, 2]
    assert [int(x) for x in stage_layers(24, 4, 2, first=2, last=2)] == [2, 10, 2]
    assert chunk_layers(24, 4, 2, first=2, last=2) == [1, 5, 5, 1, 1, 5, 5, 1]
    assert [int(x) for x in stage_layers(12, 3, 1, first=2)] == [2, 5, 5]
    assert chunk_layers(12, 3, 1, first=2) == [2, 5, 5]
    assert [int(x) for x in stage_layers(12, 2, 1, first=5, last=7)] == [5, 7, 7]
    # vectorized over the searched pp (the fields a job's constants): 80 layers, 10 / 10 on pp 6 and pp 8
    # ((80 - 20)/4 = 15, (80 - 20)/6 = 10); 0 leaves the planner's own split (pp 5: 16 each)
    f, m, l_ = stage_layers(80, np.array([6, 8, 5]), 1, first=np.array([10, 10, 0]), last=np.array([10, 10, 0]))
    assert f.tolist() == [10, 10, 16] and m.tolist() == [15, 10, 16] and l_.tolist() == [10, 10, 16]


def _explain(cli, *args):
    r = cli("explain", *JOB, *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_explain_prices_the_stages_it_places(cli):
    """llama3-70b on pp 6: the planner's split is 12, 14 x 4, 12; with 10 / 10, 10, 15 x 4, 10. A
    Llama 3 layer is 855,654,400 parameters (q, o 8192^2, k, v 8192 x 1024, the MLP 3 x 8192 x 28,672,
    two RMSNorms 2 x 8192), at TP 8 the 855,638,016 of its linears split, the 16,384 norm weights
    whole: 2 B x 106,971,136 = 213,942,272 B of bf16 weights a layer. The middle stage (the heaviest)
    holds one layer more, the first and the last two fewer; the step, which the slowest stage sets,
    grows about 15/14 (compute bound)."""
    even, _ = _explain(cli)
    uneven, err = _explain(cli, "--first-stage-layers", "10", "--last-stage-layers", "10")
    w = {k: (uneven["memory"]["stages"][k]["weights_bytes"] - even["memory"]["stages"][k]["weights_bytes"])
         for k in ("first", "middle", "last")}
    layer = 2 * ((855_654_400 - 16_384) // 8 + 16_384)
    assert layer == 213_942_272
    assert w == {"first": -2 * layer, "middle": layer, "last": -2 * layer}
    assert uneven["plan"]["first_stage_layers"] == 10 and uneven["plan"]["last_stage_layers"] == 10
    assert "first_stage_layers" not in even["plan"]
    assert any("10, 15, 15, 15, 15, 10 layers on the 6 pipeline stages" in w for w in uneven["warnings"])
    assert 1.05 < uneven["time"]["step_s"] / even["time"]["step_s"] < 15 / 14 + 1e-3


@pytest.mark.parametrize("args, needles", [
    # 80 - 11 = 69 layers on 5 middle stages; with the last as given (none), 5, 10, 15, ... divide
    (["--first-stage-layers", "11"], ["first_stage_layers 11 on 80 layers, pp 6, vpp 1",
                                      "69 layers left do not divide equally over the 5 middle stages",
                                      "first_stage_layers Megatron accepts here: 5, 10, 15, 20"]),
    # vpp 2 does not divide 5 (transformer_config.py l. 2302-2316)
    (["--first-stage-layers", "5", "--vpp", "2", "--global-batch", "1536"], ["not a multiple of vpp 2"]),
    # pp 2 with both: no middle stage for the 80 - 20 left
    (["--pp", "2", "--gpus", "16", "--first-stage-layers", "10", "--last-stage-layers", "10"],
     ["60 layers left for 0 middle stages"]),
    # pp 2 with ends holding more than the 80 layers (70 + 20): -10 left for no middle stage, which Megatron refuses
    # (transformer_config.py l. 2339-2344: bool(-10) != bool(0)); fit ranked such a plan (fuzz99, seed 105: tiny-fit's
    # 4 layers with first 16 / last 2) and explain priced it, its export not reading back
    (["--pp", "2", "--gpus", "16", "--first-stage-layers", "70", "--last-stage-layers", "20"],
     ["-10 layers left for 0 middle stages"]),
    (["--first-stage-layers", "10", "--account-for-loss-in-pipeline-split"], ["Megatron-Core refuses them together"]),
    (["--pp", "1", "--gpus", "16", "--first-stage-layers", "10"], ["pp 1 has no first and last stage"]),
    (["--first-stage-layers", "0"], ["--first-stage-layers"]),
])
def test_megatron_rules_refuse_with_the_field_named(cli, args, needles):
    assert_one_error(cli("explain", *JOB, *args), *needles)


def test_a_stack_with_its_own_split_refuses_them(cli):
    """torchtitan places its split front-loaded (stack_db pipeline_split front) and has no count of a
    stage's layers: the fields are refused, naming the stack's rule."""
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--pp", "4", "--stack", "torchtitan",
                         "--micro-batch", "1", "--first-stage-layers", "8"),
                     "first_stage_layers 8", "stack torchtitan places the split by its own rule")


def test_megatron_reader_reads_both_flags(tmp_path):
    """--decoder-first/last-pipeline-num-layers into the job's fields (no longer 'not modelled'); with
    --num-layers-per-virtual-pipeline-stage Megatron-LM asks for --num-virtual-stages-per-pipeline-rank
    (arguments.py l. 954-956)."""
    from planner.errors import PlannerError
    from planner.trainers import load_trainer_config

    base = ("--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention "
            "--num-query-groups 8 --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
            "--position-embedding-type rope --vocab-size 128256 --seq-length 8192 --micro-batch-size 1 "
            "--global-batch-size 96 --bf16 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 6 "
            "--use-distributed-optimizer --decoder-first-pipeline-num-layers 10 --decoder-last-pipeline-num-layers 10")
    p = tmp_path / "run.args"
    p.write_text(base)
    cfg = load_trainer_config(p, gpus=96)
    assert cfg.job["first_stage_layers"] == 10 and cfg.job["last_stage_layers"] == 10
    assert not any("decoder-first" in u for u in cfg.unmodelled)
    p.write_text(base.replace("--pipeline-model-parallel-size 6", "--pipeline-model-parallel-size 6 "
                                                                   "--num-layers-per-virtual-pipeline-stage 5"))
    with pytest.raises(PlannerError, match="with --num-layers-per-virtual-pipeline-stage") as e:
        load_trainer_config(p, gpus=96)
    assert "--num-virtual-stages-per-pipeline-rank" in e.value.hint


def test_fit_holds_them_and_its_export_reads_back(cli, tmp_path):
    """fit does not search the fields: every row holds them, at a pp x vpp Megatron accepts (the others
    counted under the split rule), and `fit --export megatron` writes them (vpp 5 beside them:
    --num-virtual-stages-per-pipeline-rank) and checks the file reads back as the plan it priced."""
    r = cli("fit", "--model", "llama3-70b", "--gpus", "96", "--hardware", "h100-sxm", "--first-stage-layers", "10",
            "--last-stage-layers", "10", "--format", "json", "--top", "20")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and all(x["plan"]["first_stage_layers"] == 10 == x["plan"]["last_stage_layers"] for x in rows)
    for x in rows:  # Megatron's rules on every row's pp and vpp
        p, v = x["plan"]["pp"], x["plan"]["vpp"]
        assert p > 2 and 10 % v == 0 and (80 - 20) % (p - 2) == 0 and ((80 - 20) // (p - 2)) % v == 0
    out = tmp_path / "run.sh"
    r = cli("fit", "--model", "llama3-70b", "--gpus", "96", "--hardware", "h100-sxm", "--pp", "6", "--vpp", "5",
            "--global-batch", "1536",
            "--first-stage-layers", "10", "--last-stage-layers", "10", "--export", "megatron", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    assert "--decoder-first-pipeline-num-layers 10 " in text and "--decoder-last-pipeline-num-layers 10 " in text
    assert "--num-virtual-stages-per-pipeline-rank 5 " in text and "--account-for" not in text


def test_interleaved_uneven_chunks_hold_their_own_micro_batches():
    """Llama 3 8B's 32 layers on pp 4 x vpp 2 with 4 / 4 on the ends: the middle ranks (32 - 8)/2 = 12
    each, 6 a chunk; the end ranks 2 a chunk (chunks 2, 6, 6, 2, 2, 6, 6, 2). Megatron's interleaved
    1F1B, m = 8, N = p = 4 (pipeline.py [2][5]): before its first backward stage s has run
    F = min(2 (p - s - 1) + (v - 1) N + 1, m v) forwards, forward k on chunk (k mod N v) // N, so chunk c
    holds (F // N v) N + min(max(F mod N v - c N, 0), N) micro-batches. Stage 0: F = 11, chunks 7 and 4:
    7 x 2 + 4 x 2 = 22 layer-micro-batches; stage 1: F = 9, 5 and 4: 5 x 6 + 4 x 6 = 54; stage 3: F = 5,
    4 and 1: 4 x 2 + 1 x 2 = 10 (the planner's even split, 4 a chunk: 44, 36 and 20)."""
    from planner.catalog import load_model
    from planner.layers import layer_list
    from planner.pipeline import stage_inflight_kinds
    from planner.plan import PlanArrays

    ll = layer_list(load_model("llama3-8b"))

    def held(first, last):
        return stage_inflight_kinds(ll, PlanArrays(tp=1, cp=1, pp=4, vpp=2, dp=1, mbs=1, gbs=8, seq=4096, sharding=0,
                                                   shard=1, recompute=0, sp=0, schedule=2, precision=0,
                                                   split_first=first, split_last=last))

    h = held(4, 4)
    assert (h["first"].tolist(), h["mid"][0].tolist(), h["last"].tolist()) == ([22.0], [54.0], [10.0])
    h = held(0, 0)
    assert (h["first"].tolist(), h["mid"][0].tolist(), h["last"].tolist()) == ([44.0], [36.0], [20.0])


def test_layer_kinds_follow_the_placement():
    """DeepSeek-V3: 61 layers, the first 3 dense. pp 4 with 13 / 16: the middle ranks (61 - 29)/2 = 16
    each. Stage 0 holds layers 0-12 (3 dense, 10 MoE), stage 1 13-28 (16 MoE), stage 3 45-60 (16 MoE)."""
    from planner.catalog import load_model
    from planner.layers import layer_list
    from planner.pipeline import stage_kind_counts
    from planner.plan import PlanArrays

    ll = layer_list(load_model("deepseek-v3"))
    dense = 0 if not ll.kinds[0].has_experts else 1
    c = stage_kind_counts(ll, PlanArrays(tp=1, cp=1, pp=4, vpp=1, dp=1, mbs=1, gbs=64, seq=4096, sharding=0, shard=1,
                                         recompute=0, sp=0, schedule=1, precision=0, split_first=13, split_last=16))
    assert c["first"][dense].tolist() == 3.0 and c["first"][1 - dense].tolist() == 10.0
    assert c["last"][1 - dense].tolist() == 16.0 and c["last"][dense].tolist() == 0.0
    assert [m[1 - dense].tolist() for m in c["mid"]] == [16.0] and c["mid_stage"].ravel().tolist() == [1]
