"""Issue 22: `explain`, `fit` and `export` run one check and agree on torchtitan plans. Cases
hand-picked from scripts/export_sweep.py (every zoo model x 8, 64, 512, 2,048 H100 on the
torchtitan, megatron and megatron-deepspeed stacks, fit's top 3 rows exported and read back):
each failed before the fix it names and must keep passing.

- export re-ran the start-up rules on its own PlanArrays, which lacked split_front: DeepSeek-V3
  on torchtitan pp 8 (61 layers on 8 stages, torchtitan's front-loaded split) passed `explain`
  and was refused by export under TORCHTITAN_PP_SPLIT. Export now resolves the plan's job
  again (plan.resolve), the check `explain` runs.
- fit ranked FSDP modes over dp x cp = 1 rank on torchtitan, which applies FSDP only where
  dp_shard x cp > 1 (parallel_dims.py @e347b1e5e l. 334-335): the TOML read back as ddp
  (Llama 3 70B on 64 GPUs, tp 8 pp 8 dp 1 fsdp2_reshard_always: 62.74 GiB priced, 57.83 GiB
  read back). Rule TORCHTITAN_FSDP_MESH; and the reader now reads dp_shard 1 with cp > 1 as
  FSDP over the cp ranks (Llama 3 405B on 512, tp 8 cp 4 pp 16 dp 1 fsdp2: read back as ddp,
  65.45 -> 83.25 GiB).
- export refused interleaved splits no pipeline_parallel_layers_per_stage spells (Llama 3
  405B: 126 layers on 16 x 4 stages; Gemma 3 27B: 62 on 2 x 16): it now writes torchtitan's own
  stage lists (module_fqns_per_model_part) and the reader takes them back.
"""

from __future__ import annotations

import pytest

from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers.export import export_plan
from planner.trainers.torchtitan import fqns_per_model_part


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(stack="torchtitan", **kw))
    return to_json(settings, plan, evaluate(settings, plan))


def _round_trip(**kw) -> str:
    row = _row(**kw)
    text, _ = export_plan(row["plan"], "torchtitan")
    check_readback(row, "torchtitan", text)  # PlannerError if the file reads back as another plan or memory
    return text


def test_deepseek_v3_pp8_explain_and_export_agree():
    """61 layers on pp 8 with the ends uncounted (end weights 0: --no-account-for-*): torchtitan's stages hold 8, 8,
    8, 8, 8, 7, 7, 7 layers (generate_llm_fqn_per_model_part: 61 // 8 = 7, the first 61 % 8 = 5 one more), what the
    planner prices and what layers_per_stage 8 (ceil(61 / 8) = 8 stages) spells. With torchtitan's default weights
    1 and 1 (the stack's default, stack_db torchtitan defaults.account_for_*): 63 units, 63 // 8 = 7, the first
    63 % 8 = 7 stages one more, the first and the last one layer less: 7, 8, 8, 8, 8, 8, 8, 6; layers_per_stage 8
    (ceil(63 / 8) = 8 stages) again."""
    job = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", pp=8, sharding="fsdp", ep=64,
               attention_kernel="flex")  # the 671B flavor's FlexAttention
    text = _round_trip(**job, account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False)
    assert "pipeline_parallel_layers_per_stage = 8\n" in text
    assert "pipeline_parallel_first_stage_less_layers = 0\n" in text
    assert [len(p) - (k == 0) - 2 * (k == 7) for k, p in enumerate(fqns_per_model_part(8, 61, 0, 0))] == [8] * 5 + [7] * 3
    text = _round_trip(**job)
    assert "pipeline_parallel_layers_per_stage = 8\n" in text
    assert "pipeline_parallel_first_stage_less_layers = 1\n" in text and "last_stage_less_layers = 1\n" in text
    assert [len(p) - (k == 0) - 2 * (k == 7) for k, p in enumerate(fqns_per_model_part(8, 61, 1, 1))] == \
        [7] + [8] * 6 + [6]


def test_fsdp_over_one_rank_is_refused_where_torchtitan_runs_it_unsharded():
    job = dict(model="llama3-70b", gpus=64, tp=8, pp=8, global_batch=2048, micro_batch=1)
    with pytest.raises(PlannerError, match="TORCHTITAN_FSDP_MESH") as e:
        resolve(Job(stack="torchtitan", sharding="fsdp", sharding_mode="fsdp2_reshard_always", **job))
    assert "parallel_dims.py l. 334-335" in e.value.message
    # the plan torchtitan runs there: unsharded, in fp32 with TP x PP (training.dtype float32, start-up rule
    # TORCHTITAN_FP32, refused), in bf16 with training.dtype bfloat16 (pure-bf16)
    with pytest.raises(PlannerError, match="TORCHTITAN_FP32"):
        resolve(Job(stack="torchtitan", sharding="none", **job))
    text = _round_trip(sharding="none", bytes_per_param="pure-bf16", **job)
    assert "data_parallel_shard_degree = 1\n" in text and "fsdp_reshard_after_forward" not in text
    assert 'dtype = "bfloat16"\n' in text
    with pytest.raises(PlannerError, match="TORCHTITAN_FSDP_MESH"):  # and export runs the same check
        export_plan({**_row(sharding="none", bytes_per_param="pure-bf16", **job)["plan"], "sharding": "fsdp",
                     "sharding_mode": "fsdp2"}, "torchtitan")


def test_fsdp_over_the_cp_ranks_reads_back_as_fsdp():
    """dp 1 with cp 4: torchtitan shards over the 4 cp ranks (fsdp_enabled = dp_shard > 1 or cp > 1),
    as the planner prices fsdp (shard degree dp x cp); sharding none there is refused."""
    job = dict(model="llama3-405b", gpus=512, tp=8, cp=4, pp=16, global_batch=2048, micro_batch=1)
    text = _round_trip(sharding="fsdp", **job)
    assert "data_parallel_shard_degree = 1\n" in text and "context_parallel_degree = 4\n" in text
    assert 'fsdp_reshard_after_forward = "default"' in text
    with pytest.raises(PlannerError, match="TORCHTITAN_FSDP_MESH"):
        resolve(Job(stack="torchtitan", sharding="none", **job))


@pytest.mark.parametrize("job,stages", [
    # 126 layers, the ends uncounted (with torchtitan's default weights, 128 units, layers_per_stage 2 spells it)
    (dict(model="llama3-405b", gpus=2048, tp=8, cp=4, pp=16, vpp=4, sharding="fsdp", global_batch=2048, micro_batch=1,
          account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False), 64),
    # 80 layers + 2 ends on 32 stages: no layers_per_stage spells it (ceil(80 / 2) = 40, ceil(80 / 3) = 27 stages)
    (dict(model="llama3-70b", gpus=512, tp=8, pp=2, vpp=16, sharding="fsdp", global_batch=512, micro_batch=1,
          recompute="selective"), 32),
])
def test_interleaved_splits_layers_per_stage_cannot_spell_are_written_as_stage_lists(job, stages):
    text = _round_trip(**job)
    assert "module_fqns_per_model_part = [[" in text and "pipeline_parallel_layers_per_stage" not in text
    assert text.count('"tok_embeddings"') == 1 and text.count("], [") == stages - 1


def test_fqns_per_model_part_is_torchtitans_placement():
    """torchtitan's docstring example, by hand (3 layers + weights 2 and 2 = 7 units on 2 stages:
    3 each, the first one more; 4 - 2 = 2 layers, then 3 - 2 = 1), and the memory oracle's 8-layer
    pp 4 split (2, 3, 2, 1 blocks: stack_db/torchtitan.yaml pipeline_split front)."""
    assert fqns_per_model_part(2, 3, 2, 2) == [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "norm", "output"]]
    blocks = [sum(n.startswith("layers.") for n in p) for p in fqns_per_model_part(4, 8, 1, 1)]
    assert blocks == [2, 3, 2, 1]


def test_the_reader_refuses_stage_lists_torchtitan_would_not_generate(tmp_path):
    from planner.trainers import load_trainer_config

    text = _round_trip(model="llama3-70b", gpus=512, tp=8, pp=2, vpp=16, sharding="fsdp", global_batch=512,
                       micro_batch=1, recompute="selective")
    # 80 layers + the default end weights 1, 1 = 82 units on 32 stages: 82 // 32 = 2, the first 18 one more; the
    # first stage 3 - 1 = 2 layers beside the embedding
    bad = text.replace('["tok_embeddings", "layers.0", "layers.1"]', '["tok_embeddings", "layers.0"]')
    assert bad != text
    p = tmp_path / "bad.toml"
    p.write_text(bad)
    with pytest.raises(PlannerError, match="a placement other than torchtitan's generated one"):
        load_trainer_config(p, fmt="torchtitan", model="llama3-70b", gpus=512)


def test_torchtitan_deepep_with_tp_is_refused_and_never_ranked():
    """torchtitan @e347b1e5e: DeepEPMoE sets moe.reorderer to None (moe_deepep.py l. 36-37), so under
    TP nothing splits the all-gathered MoE input again (apply_moe_ep_tp l. 517-556): every TP rank
    dispatches every token and the Partial routed outputs sum tp copies. Refused
    (TORCHTITAN_DEEPEP_TP); fit's dispatcher search, which ranked DeepSeek-V3 at tp 8 with deepep on
    2,048 H800 before, ranks deepep rows at tp 1 only, and the alltoall backend keeps tp > 1."""
    from planner.search import fit
    from planner.space import SpaceOptions

    job = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", stack="torchtitan", pp=2, sharding="fsdp", ep=64)
    with pytest.raises(PlannerError, match="TORCHTITAN_DEEPEP_TP"):
        resolve(Job(tp=8, etp=1, moe_dispatcher="deepep", **job))
    resolve(Job(tp=8, etp=1, moe_dispatcher="alltoall", **job))
    resolve(Job(tp=1, moe_dispatcher="deepep", **job))
    rows = fit(Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", stack="torchtitan", precision="fp8"), [2048],
               SpaceOptions(), "time", 3, search_dispatchers=True).rows
    assert rows and all(r["plan"]["tp"] == 1 for r in rows if r["plan"]["moe_dispatcher"] == "deepep")
