"""MTP and the loss in the pipeline split (issue 23): the job field loss_layers_in_pipeline_split,
Megatron's --pipeline-model-parallel-layout read into it, the run records that state a layout,
and DualPipe's end ranks (stage 0 paired with stage p - 1).

Hand derivations: Megatron-Core's layout grammar (megatron/core/transformer/
pipeline_parallel_layer_layout.py @d98e8a64 parse_str_to_list, validate_layer_layout);
Megatron-Bridge's DeepSeek-V3 layouts (src/megatron/bridge/recipes/deepseek/deepseek_v3.py
@7af9601c l. 233-250); the planner's split rule (pipeline.chunk_layers: ceil(L'/S) units a
chunk, the last chunk N units of them the loss end); DualPipe's pairing (deepseek-ai/DualPipe
dualpipe.py @bb214e82, arXiv:2412.19437 sec. 3.2.1, Fig. 5).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from planner.errors import PlannerError
from planner.pipeline import ONE_F_ONE_B, chunk_layers, stage_layers
from planner.plan import resolve
from planner.schema import Job
from planner.trainers.megatron import parse_layout, split_of

BRIDGE_DSV3 = "Et*4|(t*4|)*14tmL"  # deepseek_v3.py @7af9601c l. 240 (16, 1) and l. 242 (4, 4), mtp_layers 1
DSV3 = SimpleNamespace(num_layers=61, mtp_layers=1)


# ----------------------------------------------------------------------------- the layout grammar
@pytest.mark.parametrize("text,pp,model,chunks", [
    # E + 4 t, 14 chunks of 4 t, then t m L: 4 + 56 + 1 = 61 layers in 16 chunks
    (BRIDGE_DSV3, 16, DSV3, [4] * 15 + [1]),
    (BRIDGE_DSV3, 4, DSV3, [4] * 15 + [1]),  # the same 16 chunks as pp 4 x vpp 4
    # commas are cosmetic; (..)*n and x*n repeat (Megatron's own docstring example, 61 layers)
    ("Ettt|(tt|)*29,m|L", 32, DSV3, [3] + [2] * 29 + [0, 0]),
    # Megatron-Bridge's GB300 preset (deepseek_llm_pretrain.py @7af9601c l. 164): 1 + 30 x 2 + 0 = 61
    ("Et|(tt|)*30mL", 16, DSV3, [1] + [2] * 30 + [0]),
    ("Et*3|t*4|t*4|t*3L", 4, SimpleNamespace(num_layers=14, mtp_layers=0), [3, 4, 4, 3]),
])
def test_layout_chunks_by_hand(text, pp, model, chunks):
    assert parse_layout(text, pp, model, "") == chunks


def test_layout_notes_mtp_off_the_last_chunk():
    """validate_layer_layout allows the MTP layers in another rank's last chunk ('MTP standalone');
    the planner prices them beside the loss on the last stage, with the MTP stage's embedding copy and its
    all-reduce (memory.py [me], step.py [20]), and says so."""
    notes: list[str] = []
    parse_layout("Ettt|(tt|)*29,m|L", 32, DSV3, "", notes)
    assert len(notes) == 1 and "MTP standalone" in notes[0] and "own embedding copy and its gradient all-reduce" in notes[0]
    notes.clear()
    parse_layout(BRIDGE_DSV3, 16, DSV3, "", notes)
    assert notes == []


@pytest.mark.parametrize("text,pp,why", [
    ("Et*4|(t*4|)*14tm", 16, "the loss"),  # no L
    ("t*4|E(t*4|)*14tmL", 16, "the embedding must come first"),
    ("Et*4|(t*4|)*14tmLL", 16, "once each"),
    ("Et*4|(t*4|)*14txL", 16, "unknown layer characters"),
    ("Et*4|(t*4|)*14tmL", 3, "not a multiple of"),  # 16 chunks on 3 ranks
    ("Et*4|(t*4|)*14ttmL", 16, "holds 62 transformer"),  # 62 t for 61 layers
    ("Et*4|(t*4|)*14tL", 16, "and 0 MTP layers"),  # the model trains one MTP module
])
def test_bad_layouts_are_refused_with_a_hint(text, pp, why):
    with pytest.raises(PlannerError, match=why) as e:
        parse_layout(text, pp, DSV3, "")
    assert e.value.hint


def test_bad_layout_exits_2_from_a_megatron_file(cli, tmp_path):
    p = tmp_path / "args.txt"
    p.write_text("--pipeline-model-parallel-size 16 --expert-model-parallel-size 8 --mtp-num-layers 1 "
                 "--global-batch-size 2048 --micro-batch-size 1 --seq-length 4096 --bf16\n"
                 "--pipeline-model-parallel-layout 'Et*4|(t*4|)*14tm'\n")
    r = cli("explain", str(p), "--model", "deepseek-v3", "--gpus", "256", "--hardware", "b200")
    assert r.exit_code == 2
    assert "error:" in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- the split it places
def test_split_of_the_bridge_layout():
    """61 layers + 3 units (t m L's chunk lacks 3 of 4) = 64 = 16 chunks of 4: the embedding not
    counted, the loss end counted as 3 layers; per GPU the first stage 4, a middle one 4, the
    last 1 (pp 16), or 16, 16 and 13 (pp 4 x vpp 4: 4 chunks of 4, the last one 1)."""
    chunks = parse_layout(BRIDGE_DSV3, 16, DSV3, "")
    assert split_of(61, 16, 1, chunks=chunks) == (0, 3)
    assert split_of(61, 4, 4, chunks=chunks) == (0, 3)
    assert chunk_layers(61, 16, 1, 0, 3) == [4] * 15 + [1]
    assert [int(x) for x in stage_layers(61, 16, 1, 0, 3)] == [4, 4, 1]
    assert [int(x) for x in stage_layers(61, 4, 4, 0, 3)] == [16, 16, 13]
    # 'Et|(tt|)*30mL': 61 + 1 (E) + 2 (m L, a chunk of no layer) = 64 = 32 chunks of 2
    assert split_of(61, 16, 2, chunks=parse_layout("Et|(tt|)*30mL", 16, DSV3, "")) == (1, 2)
    assert [int(x) for x in stage_layers(61, 32, 1, 1, 2)] == [1, 2, 0]
    # Megatron's docstring layout puts m and L on chunks of their own after 3 + 29 x 2: no
    # ceil(L'/S) split with one end chunk lighter places 3 layers first
    assert split_of(61, 32, 1, chunks=[3] + [2] * 29 + [0, 0]) is None


def test_job_field_prices_the_split_and_refuses_what_megatron_refuses():
    base = dict(model="deepseek-v3", gpus=256, hardware="b200", pp=16, ep=8, global_batch=2048, micro_batch=1,
                sharding="zero1", mtp_layers=1)
    s, plan, warnings = resolve(Job(**base, loss_layers_in_pipeline_split=3))
    assert int(plan.split_loss) == 3 and int(plan.split_emb) == 0
    assert any("counted as 3 layers" in w and "the first 4 and the last 1" in w for w in warnings)
    # 1 is account_for_loss_in_pipeline_split; both at once only where they agree
    assert Job(**base, loss_layers_in_pipeline_split=1).loss_units == 1
    assert Job(**base, account_for_loss_in_pipeline_split=True).loss_units == 1
    assert Job(**base, loss_layers_in_pipeline_split=1, account_for_loss_in_pipeline_split=True).loss_units == 1
    assert Job(**base).loss_units == 0
    with pytest.raises(ValueError, match="contradicts account_for_loss"):
        Job(**base, loss_layers_in_pipeline_split=3, account_for_loss_in_pipeline_split=True)
    # 61 + 2 = 63 units do not divide into 16 chunks (Megatron-Core's rule)
    with pytest.raises(PlannerError, match="do not divide into pp\\*vpp=16"):
        resolve(Job(**base, loss_layers_in_pipeline_split=2))
    # 61 + 19 = 80 = 16 chunks of 5: the loss end's 19 units outweigh the last chunk's 5
    with pytest.raises(PlannerError, match="outweigh the last chunk"):
        resolve(Job(**base, loss_layers_in_pipeline_split=19))


def test_megatron_round_trip_of_the_layout(tmp_path):
    """export writes the split as the layout, with the MTP module before the loss, and the reader
    reads it back as the same split."""
    from planner.cli.export import resolved_plan
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="deepseek-v3", gpus=256, hardware="gb200-nvl72", pp=4, vpp=4, ep=64,
                             sharding="zero1", global_batch=2048, stack="megatron", mtp_layers=1,
                             loss_layers_in_pipeline_split=3))
    assert plan["loss_layers_in_pipeline_split"] == 3 and plan["account_for_loss_in_pipeline_split"] is False
    text, _ = export_plan(plan, "megatron")
    assert "--pipeline-model-parallel-layout 'Et*4|" + "t*4|" * 14 + "tmL' " in text
    p = tmp_path / "x.sh"
    p.write_text(text)
    job = load_trainer_config(p).job
    assert (job["loss_layers_in_pipeline_split"], job["account_for_loss_in_pipeline_split"], job["vpp"]) == (3, False, 4)


# ----------------------------------------------------------------------------- DualPipe's end ranks
def test_dualpipe_end_rank_is_the_mean_of_stage_0_and_the_last():
    """DeepSeek-V3 on its layout: the end rank runs stage 0 (layers 0-1, dense, of 61 on 16 stages:
    4 a middle stage, 2 the first, 3 the last) for half the micro-batches and stage 15 (3 layers,
    the output layer, the loss, the MTP module) for the other half; its time per micro-batch is
    the mean of the two. Priced by hand from the same pass's stage times (1F1B: the last stage)."""
    from planner import step

    settings, plan, _ = resolve(Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", tp=1, pp=16, dp=128, ep=64,
                                    micro_batch=1, global_batch=15360, seq_len=4096, sharding="zero1", precision="fp8",
                                    stack="deepseek", recompute="selective", mtp_layers=1))
    sc, lt, dual = step._compute_pass(settings, plan)
    _, _, one = step._compute_pass(settings, dataclasses.replace(plan, schedule=ONE_F_ONE_B))
    base = [f + b + s for f, b, s in zip(lt.fwd, lt.bwd, lt.sel)]
    stage = {st: float(sc.n[st] * sc.mean(st, base) + sc.rc[st] * sc.mean(st, lt.fwd)) for st in ("first", "mid", "last")}
    assert (int(sc.n["first"]), int(sc.n["mid"]), int(sc.n["last"])) == (2, 4, 3)
    last = stage["last"] + float(dual.logits) + float(step.mtp_time(sc, lt, dual.logits))
    assert float(one.mb) == pytest.approx(max(stage["mid"], last), rel=1e-12)  # 1F1B: the last stage waits
    end = 0.5 * (stage["first"] + last)  # DualPipe's end rank: stage 0 (2 dense layers) beside stage 15
    assert last > end > stage["mid"]  # still the slowest rank here, by less: 0.210 s -> 0.133 s against 0.122 s
    assert float(dual.mb) == pytest.approx(end, rel=1e-12)


def test_dualpipe_end_rank_on_one_kind_of_layer():
    """32 equal layers on 4 stages of 8: 1F1B's last stage 8 T + H (H the output layer and the
    loss), DualPipe's end rank (8 T + 8 T + H) / 2 = 8 T + H / 2."""
    from planner import step

    settings, plan, _ = resolve(Job(model="llama3-8b", gpus=8, pp=4, micro_batch=1, global_batch=16, sharding="zero1",
                                    precision="fp8", stack="deepseek", mtp_layers=0))
    _, _, dual = step._compute_pass(settings, plan)
    _, _, one = step._compute_pass(settings, dataclasses.replace(plan, schedule=ONE_F_ONE_B))
    assert float(dual.mb) == pytest.approx(float(one.mb) - 0.5 * float(one.logits), rel=1e-12)


def test_deepseek_layout_rate_against_the_report():
    """With the recipe's MTP module, DeepSeek's layout on its stack: 1,569 tokens/s per GPU
    against the published 1,543.2 (Table 1: 14.8T tokens in 2,664K H800 GPU-hours): +1.7% with
    the busiest EP rank's load of its aux-loss-free router, L = 1.02 (planner/imbalance.py);
    1,576, +2.2%, at balanced routing (1,608, +4.2%, and 1,618, +4.8%, before a GEMM's output write
    was priced after its K loop, compute [5a]: the expert GEMMs' small K, 2,048 on the down projection).
    The pipeline is paced by a middle rank (4 MoE layers: its
    compute plus its own exposed all-to-alls, step.critical_stage), not the end ranks' pair (stage 0's
    2 dense layers, no all-to-all, with stage 15's 3 MoE layers, the head and the MTP module: heavier
    compute, half a middle rank's EP traffic); before each stage's traffic counted its own layers, the
    pair's compute was priced with a middle rank's traffic: 1,495, -3.1% (1,504, -2.6%, balanced); before
    the end ranks were paired: 1,015, -34%; with one stage's gradients reduced a rank: 1,512, -2.0%."""
    from planner.explain import evaluate, to_json

    settings, plan, _ = resolve(Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", tp=1, pp=16, dp=128, ep=64,
                                    micro_batch=1, global_batch=15360, seq_len=4096, sharding="zero1", precision="fp8",
                                    stack="deepseek", recompute="selective", mtp_layers=1))
    rate = to_json(settings, plan, evaluate(settings, plan))["throughput"]["tokens_per_s_per_gpu"]
    published = 14.8e12 / (2664e3 * 3600.0)
    assert rate / published - 1.0 == pytest.approx(0.017, abs=0.005)
    balanced, bplan, _ = resolve(Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", tp=1, pp=16, dp=128, ep=64,
                                     micro_batch=1, global_batch=15360, seq_len=4096, sharding="zero1", precision="fp8",
                                     stack="deepseek", recompute="selective", mtp_layers=1, moe_rank_imbalance=1.0))
    rate1 = to_json(balanced, bplan, evaluate(balanced, bplan))["throughput"]["tokens_per_s_per_gpu"]
    assert rate1 / published - 1.0 == pytest.approx(0.022, abs=0.005)


# ----------------------------------------------------------------------------- the records
def test_records_state_the_bridge_layout_and_the_mtp_module():
    from pathlib import Path

    from planner.validate import build_job, load_runs, _Assumed

    recs = {r.id: r for r in load_runs(Path(__file__).parent / "data" / "published_runs_moe.yaml")}
    assert recs["deepseek-v3-pretraining"].mtp_layers == 1  # arXiv:2412.19437 sec. 2.2, 4.2
    for rid, hw in (("megatron-bridge-25.11-dgx-b200-deepseek-v3", "b200"),
                    ("megatron-bridge-25.11-dgx-gb200-deepseek-v3", "gb200-nvl72")):
        rec = recs[rid]
        assert (rec.pipeline_layout, rec.mtp_layers) == (BRIDGE_DSV3, 1)
        fields = build_job(rec, "deepseek-v3", hw, _Assumed())
        assert fields["loss_layers_in_pipeline_split"] == 3 and not fields["account_for_loss_in_pipeline_split"]
        assert not fields["account_for_embedding_in_pipeline_split"]


def test_torchtitan_output_weight_is_the_loss_end(tmp_path):
    """torchtitan's pipeline_parallel_last_stage_less_layers N (generate_llm_fqn_per_model_part
    @e347b1e5e: Llama 3 8B's 32 layers + 0 + 2 = 34 effective on 8 stages, 4 each and one more on
    the first 2; the last stage 2 fewer): chunks 5, 5, 4 x 5, 2; per rank (chunks j and j + 4) 9,
    9, 6. A weight above the floor of (32 + N) / 8 is refused, as torchtitan refuses it: 4 runs
    (36 // 8 = 4), 5 does not (37 // 8 = 4)."""
    from pathlib import Path

    from planner.trainers import load_trainer_config

    src = (Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml").read_text()
    text = src.replace("local_batch_size = 1\n", "local_batch_size = 8\n").replace(
        "pipeline_parallel_degree = 1\n", 'pipeline_parallel_degree = 4\npipeline_parallel_schedule = "Interleaved1F1B"\n'
        "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 2\n")
    assert text.count("less_layers") == 2 and "local_batch_size = 8" in text
    p = tmp_path / "t.toml"
    p.write_text(text)
    j = load_trainer_config(p, gpus=16).job
    assert j["loss_layers_in_pipeline_split"] == 2 and not j["account_for_loss_in_pipeline_split"] and j["vpp"] == 2
    assert chunk_layers(32, 4, 2, 0, 2, 1) == [5, 5, 4, 4, 4, 4, 4, 2]
    assert [int(x) for x in stage_layers(32, 4, 2, 0, 2, 1)] == [9, 9, 6]
    _, plan, _ = resolve(Job.model_validate(j))
    assert int(plan.split_loss) == 2
    p.write_text(text.replace("less_layers = 2", "less_layers = 4"))
    assert int(resolve(Job.model_validate(load_trainer_config(p, gpus=16).job))[1].split_loss) == 4
    p.write_text(text.replace("less_layers = 2", "less_layers = 5"))
    with pytest.raises(PlannerError, match="split"):
        resolve(Job.model_validate(load_trainer_config(p, gpus=16).job))


def test_dualpipe_ranks_reduce_both_stages_gradients():
    """DualPipe's rank holds two stages (s and p - 1 - s: arXiv:2412.19437 sec. 3.2.1, 'DualPipe
    requires keeping two copies of the model parameters'), so its data-parallel traffic and
    optimizer step are over both: Llama 3 8B on pp 4 (8 layers a stage) holds, per GPU, the
    embedding + 8 layers beside 8 layers + the final norm + the output layer (the end rank) or
    16 layers (a middle rank): the end pair is the larger, and is what each DualPipe rank reduces
    (at most); 1F1B's rank each its own stage (dp_comm's slots). The four stages sum to the model's 8.03e9."""
    from planner import step
    from planner.memory import stage_param_split
    from planner.params import count_params

    settings, plan, _ = resolve(Job(model="llama3-8b", gpus=8, pp=4, micro_batch=1, global_batch=16, sharding="zero1",
                                    precision="fp8", stack="deepseek", mtp_layers=0))
    sc, _, comp = step._compute_pass(settings, plan)
    dual = step.dp_comm(sc, step.Collectives(sc), comp)
    split = stage_param_split(count_params(settings.model), settings.model, plan, sc.counts)
    first, last, mid = (float(split[s][0]) for s in ("first", "last", "mid"))
    assert first + last > 2 * mid  # the end pair (embedding and output layer) is the larger
    # dp_comm's slots (middle, first, last): DualPipe's end slots the pair, its middle slot two middle stages
    assert [float(x) for x in dual.p_local] == pytest.approx([2 * mid, first + last, first + last], rel=1e-15)
    one_plan = dataclasses.replace(plan, schedule=ONE_F_ONE_B)
    sc1, _, comp1 = step._compute_pass(settings, one_plan)
    one = step.dp_comm(sc1, step.Collectives(sc1), comp1)
    assert [float(x) for x in one.p_local] == pytest.approx([mid, first, last], rel=1e-15)
    # the llama3-8b total: embedding + output layer (2 x 128,256 x 4,096) + 32 layers + final norm
    assert first + last + 2 * mid == pytest.approx(8_030_261_248, rel=1e-15)
