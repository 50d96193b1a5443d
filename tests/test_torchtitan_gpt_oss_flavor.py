"""torchtitan's gpt_oss flavors in the export / read-back table (issue 22/24 audit).

torchtitan @e347b1e5e trains gpt-oss with its own model code and flavors: torchtitan/models/gpt_oss/
__init__.py gptoss_configs "20b" (n_layers 24, 32 experts, top 4) and "120b" (36 layers, 128 experts,
top 4) over GptOssModelArgs' defaults (model/args.py: dim 2880, moe_inter_dim 2880, 64 heads of 64,
8 KV heads, vocab 201088, sliding_window_size 128), the window on the even layers (model/model.py
l. 274 use_sliding_attention = layer_id % 2 == 0). Before, the planner's table held llama3's flavors
only: `planner fit --model gpt-oss-20b --stack torchtitan --export torchtitan` left [model] out (torchtitan's
default, job_config.py Model name "llama3" flavor "debugmodel", is another model), and `planner check`
of the file stopped ("[model] name None flavor None is not a flavor the planner knows")."""

from __future__ import annotations

import tomllib

import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

JOB = dict(gpus=64, stack="torchtitan", sharding="fsdp", ep=4, global_batch=256, seq_len=4096, micro_batch=2)


@pytest.mark.parametrize("model, flavor", [("gpt-oss-20b", "20b"), ("gpt-oss-120b", "120b")])
def test_export_names_the_flavor_and_reads_back(tmp_path, model, flavor):
    text, notes = export_plan(resolved_plan(Job(model=model, **JOB)), "torchtitan")
    assert tomllib.loads(text)["model"] == {"name": "gpt_oss", "flavor": flavor}
    assert not any("no torchtitan flavor" in n or "rope_scaling" in n for n in notes)
    path = tmp_path / "job.toml"
    path.write_text(text)
    cfg = load_trainer_config(path)
    assert cfg.job["model"] == model
    assert any(f"torchtitan [model] name 'gpt_oss' flavor '{flavor}'" in a for a in cfg.assumed)


def test_a_flavor_that_contradicts_the_model_is_refused(tmp_path):
    text, _ = export_plan(resolved_plan(Job(model="gpt-oss-20b", **JOB)), "torchtitan")
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(PlannerError, match=r"\[model\] gpt_oss 20b n_layers 24 contradicts --model gpt-oss-120b"):
        load_trainer_config(path, model="gpt-oss-120b")
