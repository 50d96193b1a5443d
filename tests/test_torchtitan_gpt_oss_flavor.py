"""torchtitan's gpt_oss flavors and the catalog's gpt-oss entries (issue 22/24 audit, then ttflavors).

torchtitan @e347b1e5e trains gpt-oss with its own model code and flavors: torchtitan/models/gpt_oss/
__init__.py gptoss_configs "20b" (n_layers 24, 32 experts, top 4) and "120b" (36 layers, 128 experts,
top 4) over GptOssModelArgs' defaults (model/args.py: dim 2880, moe_inter_dim 2880, 64 heads of 64,
8 KV heads, vocab 201088, sliding_window_size 128), the window on the even layers. Its MoE also
balances by an expert score bias (MoEArgs load_balance_coeff 1e-3, models/moe/moe.py; see
planner/trainers/torchtitan_flavors.py), which the catalog's gpt-oss entries (OpenAI's config.json)
do not have and which changes the planner's imbalance rule: the export of a catalog gpt-oss plan is
refused naming the nearest flavor and the difference, and a model of the flavor's own shape
(tests/data/torchtitan_flavors/gpt-oss-20b-torchtitan.yaml) exports as [model] gpt_oss 20b and reads
back as the plan checked (priced with FlexAttention, the flavor's attn_type)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

JOB = dict(gpus=64, stack="torchtitan", sharding="fsdp", ep=4, global_batch=256, seq_len=4096, micro_batch=2)
FLAVOR_20B = Path(__file__).parent / "data" / "torchtitan_flavors" / "gpt-oss-20b-torchtitan.yaml"


@pytest.mark.parametrize("model, flavor", [("gpt-oss-20b", "20b"), ("gpt-oss-120b", "120b")])
def test_catalog_gpt_oss_export_is_refused_naming_the_flavor(model, flavor):
    with pytest.raises(PlannerError, match=rf"the nearest, {flavor}, differs in .*score_bias True / False"):
        export_plan(resolved_plan(Job(model=model, **JOB)), "torchtitan")


def test_the_flavor_shape_exports_and_reads_back(tmp_path):
    text, _ = export_plan(resolved_plan(Job(model=str(FLAVOR_20B), attention_kernel="flex", **JOB)), "torchtitan")
    assert tomllib.loads(text)["model"]["name"] == "gpt_oss" and tomllib.loads(text)["model"]["flavor"] == "20b"
    path = tmp_path / "job.toml"
    path.write_text(text)
    cfg = load_trainer_config(path, model=str(FLAVOR_20B))
    assert cfg.job["model"] == str(FLAVOR_20B)
    with pytest.raises(PlannerError, match=r"gpt-oss-120b"):
        load_trainer_config(path, model="gpt-oss-120b")
