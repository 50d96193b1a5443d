"""Megatron-Bridge export of a model's MLP activation and dropout (issue 22: every setting the plan was priced with
is written in the trainer's spelling, or the export refuses naming what the format cannot say). The Bridge writer
exports a recipe matched by shape (megatron_bridge.recipes_for: layers, widths, heads, vocabulary, RoPE), which did
not look at the activation or the dropout, so a Llama-3-8B-shaped model priced with dropout 0.1 or a quick-GeGLU /
squared-ReLU MLP was written as llama3_8b_pretrain_config, whose provider trains SwiGLU without dropout
(NVIDIA-NeMo/Megatron-Bridge @dc805f5cf models/llama/llama_bridge.py l. 63 gated_linear_unit True, l. 65
hidden_dropout 0.0; config.json attention_dropout 0.0). Now refused, naming the setting; the recipe's own model
exports as before."""

from __future__ import annotations

import pytest
import yaml

from planner.catalog import load_model
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers.export import export_plan


def _plan(tmp_path, **model_fields):
    spec = load_model("llama3-8b").model_copy(update=model_fields)
    f = tmp_path / "model.yaml"
    f.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    s, p, _ = resolve(Job.model_validate(dict(model=str(f), gpus=8, stack="megatron-bridge", tp=1, pp=1, cp=1,
                                              sharding="zero1", micro_batch=1, global_batch=8, seq_len=8192)))
    return to_json(s, p, evaluate(s, p))["plan"]


def test_recipe_model_exports(tmp_path):
    text, _ = export_plan(_plan(tmp_path), "megatron-bridge")
    assert "llama3_8b_pretrain_config" in text


@pytest.mark.parametrize("fields, needle", [
    (dict(dropout=True), "hidden_dropout 0.1, attention_dropout 0.1"),  # null probabilities: Megatron's 0.1 each
    (dict(dropout=True, hidden_dropout=0.0, attention_dropout=0.2), "hidden_dropout 0.0, attention_dropout 0.2"),
    (dict(mlp_activation="quick_gelu"), "mlp_activation quick_gelu"),
    (dict(gated_mlp=False, mlp_activation="squared_relu"), "mlp_activation squared_relu, gated_mlp false"),
    (dict(gated_mlp=False), "mlp_activation gelu (plain MLP), gated_mlp false"),
])
def test_other_activation_or_dropout_refused(tmp_path, fields, needle):
    plan = _plan(tmp_path, **fields)
    with pytest.raises(PlannerError) as e:
        export_plan(plan, "megatron-bridge")
    assert needle in e.value.message and "llama3_8b_pretrain_config" in e.value.message
    text, _ = export_plan(plan, "megatron")  # Megatron-LM says it (export._megatron_args): no refusal there
    assert "--attention-dropout" in text
