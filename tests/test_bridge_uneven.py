"""Megatron-Bridge's uneven pipeline split (issue 22): the ConfigContainer's model.num_layers_in_first_pipeline_stage /
model.num_layers_in_last_pipeline_stage (Megatron-Core 905c0e386 TransformerConfig l. 77-83, which Bridge's
GPTModelProvider is; Bridge @dc805f5cf mlm_compat/arguments.py l. 74-75 maps Megatron-LM's
--decoder-first/last-pipeline-num-layers onto them) read into the job's first_stage_layers / last_stage_layers and
written back by the Bridge export. Megatron-Core's rules are the same at 905c0e386 as at d98e8a64 (pipeline.py [14]):
__post_init__ l. 1417-1427 (not with account_for_*), l. 1430-1447 (not with a layout), l. 1482-1556 (each > 0 and a
multiple of vpp, the middle layers equal on the middle ranks, each a multiple of vpp); get_num_layers_to_build
(transformer_block.py l. 77-151) and get_transformer_layer_offset (transformer_layer.py l. 45-160) the same code.
Before, the MoE recipes' reader refused the fields, a Llama recipe listed them as not modelled, and the export refused
a plan holding them.
"""

from __future__ import annotations

import pytest

from planner.cli.export import _settings_plan, check_readback
from planner.errors import PlannerError
from planner.explain import to_json
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature

LAUNCH = ("#!/bin/bash\ntorchrun --nproc_per_node=8 --nnodes={nodes} scripts/training/run_recipe.py \\\n"
          "  --recipe {recipe} {overrides}\n")


def _read(tmp_path, recipe: str, overrides: str, nodes: int = 4):
    f = tmp_path / "launch.sh"
    f.write_text(LAUNCH.format(nodes=nodes, recipe=recipe, overrides=overrides))
    return load_trainer_config(f, hardware="h100-sxm")


def test_llama_recipe_reads_the_end_stages(tmp_path):
    """llama3_70b_pretrain_config (80 layers, PP 4, VP 5: llama3.py @dc805f5cf l. 658-745) with 10 layers on the first
    and the last stage: the middle ranks hold (80 - 10 - 10) / 2 = 30 each, 30 / 5 = 6 a chunk; 10 / 5 = 2 a chunk on
    the ends. The job's fields, priced as placed: stages (10, 30, 30, 10) layers."""
    cfg = _read(tmp_path, "llama3_70b_pretrain_config",
                "model.num_layers_in_first_pipeline_stage=10 model.num_layers_in_last_pipeline_stage=10")
    j = cfg.job
    assert (j["pp"], j["vpp"], j["first_stage_layers"], j["last_stage_layers"]) == (4, 5, 10, 10)
    assert not any("num_layers_in" in n for n in cfg.not_modelled)
    row = to_json(*_settings_plan(Job.model_validate(j)))
    assert plan_signature(row["plan"])["stage_layers"] == (10, 30, 10)  # first, middle, last


@pytest.mark.parametrize("overrides, needle", [
    # Megatron-Core l. 2303-2316 @d98e8a64 = l. 1490-1506 @905c0e386: 11 is not a multiple of vp 5
    ("model.num_layers_in_first_pipeline_stage=11", "model.num_layers_in_first/last_pipeline_stage 11: must be > 0 and "
                                                    "a multiple of vpp 5"),
    # first 10, last 15: 55 layers on 2 middle ranks, which do not share them equally (l. 1536-1543)
    ("model.num_layers_in_first_pipeline_stage=10 model.num_layers_in_last_pipeline_stage=15",
     "leave 55 layers for 2 middle ranks: not equal multiples of vpp 5"),
    # beside account_for_* (l. 1417-1427)
    ("model.num_layers_in_first_pipeline_stage=10 model.account_for_loss_in_pipeline_split=true",
     "with model.account_for_*_in_pipeline_split: Megatron-Core refuses them together"),
])
def test_counts_megatron_core_refuses(tmp_path, overrides, needle):
    """On llama3_70b_pretrain_config's 80 layers at PP 4 x VP 5, in Bridge's names, citing Megatron-Core 905c0e386."""
    with pytest.raises(PlannerError) as e:
        _read(tmp_path, "llama3_70b_pretrain_config", overrides)
    assert needle in e.value.message
    assert "905c0e386" in e.value.message + e.value.hint


def test_moe_recipe_refuses_them_beside_its_layout(tmp_path):
    """deepseek_v3_pretrain_config holds a layout (deepseek_v3.py l. 29-49, 101): the fields beside it are refused as
    Megatron-Core refuses them (l. 1430-1447), where the reader used to refuse the fields themselves."""
    with pytest.raises(PlannerError, match="with model.num_layers_in_first/last_pipeline_stage: Megatron-Core refuses them"):
        _read(tmp_path, "deepseek_v3_pretrain_config", "model.num_layers_in_first_pipeline_stage=5", nodes=256)


def _row(**kw) -> dict:
    return to_json(*_settings_plan(Job.model_validate(kw)))


def test_a_count_that_is_no_positive_number(tmp_path):
    with pytest.raises(PlannerError, match="model.num_layers_in_first_pipeline_stage=0: not a positive count"):
        _read(tmp_path, "llama3_70b_pretrain_config", "model.num_layers_in_first_pipeline_stage=0")


@pytest.mark.parametrize("model, gpus, kw, stages, lines", [
    # Llama 3 70B, pp 6 x vpp 5, 10 / 10: (80 - 20) / 4 = 15 a middle stage (3 a chunk)
    ("llama3-70b", 96, dict(tp=8, pp=6, vpp=5, schedule="interleaved", global_batch=1536, seq_len=8192),
     (10, 15, 10), ["model.virtual_pipeline_model_parallel_size=5"]),
    # Qwen3-30B-A3B (48 layers) on a MoE recipe, pp 4, 10 / 10: 14 a middle stage; the recipe's layout written null
    ("qwen3-30b-a3b", 32, dict(tp=1, pp=4, ep=8, global_batch=256, seq_len=4096), (10, 14, 10),
     ["model.pipeline_model_parallel_layout=null"]),
])
def test_export_writes_them_and_reads_back(tmp_path, model, gpus, kw, stages, lines):
    row = _row(model=model, gpus=gpus, hardware="h100-sxm", stack="megatron-bridge", sharding="zero1",
               first_stage_layers=10, last_stage_layers=10, **kw)
    assert plan_signature(row["plan"])["stage_layers"] == stages
    text, _ = export_plan(row["plan"], "megatron-bridge")
    for line in ["model.num_layers_in_first_pipeline_stage=10", "model.num_layers_in_last_pipeline_stage=10",
                 "model.account_for_embedding_in_pipeline_split=false", *lines]:
        assert f"    {line} \\\n" in text
    check_readback(row, "megatron-bridge", text)  # fit --export's check: the same plan and memory
    f = tmp_path / "run.sh"
    f.write_text(text)
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["first_stage_layers"], j["last_stage_layers"]) == (10, 10)
