"""Megatron-Bridge export of a model's MLP activation and dropout (issue 22: every setting the plan was priced with
is written in the trainer's spelling, or the export refuses naming what the format cannot say). The Bridge writer
exports a recipe matched by shape (megatron_bridge.recipes_for: layers, widths, heads, vocabulary, RoPE), which did
not look at the activation or the dropout, so a Llama-3-8B-shaped model priced with dropout 0.1 or a quick-GeGLU /
squared-ReLU MLP was written as llama3_8b_pretrain_config, whose provider trains SwiGLU without dropout
(NVIDIA-NeMo/Megatron-Bridge @dc805f5cf models/llama/llama_bridge.py l. 63 gated_linear_unit True, l. 65
hidden_dropout 0.0; config.json attention_dropout 0.0). An activation the provider does not build is refused, naming
it; a dropout is written as the provider's own fields, model.hidden_dropout / model.attention_dropout (Megatron-Core
@905c0e386 transformer_config.py l. 152, 155), which the Bridge reader reads back against the model priced (issue 22,
detmode); the recipe's own model exports as before."""

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
    (dict(mlp_activation="quick_gelu"), "mlp_activation quick_gelu"),
    (dict(gated_mlp=False, mlp_activation="squared_relu"), "mlp_activation squared_relu, gated_mlp false"),
    (dict(gated_mlp=False), "mlp_activation gelu (plain MLP), gated_mlp false"),
])
def test_other_activation_refused(tmp_path, fields, needle):
    plan = _plan(tmp_path, **fields)
    with pytest.raises(PlannerError) as e:
        export_plan(plan, "megatron-bridge")
    assert needle in e.value.message and "llama3_8b_pretrain_config" in e.value.message
    text, _ = export_plan(plan, "megatron")  # Megatron-LM says it (export._megatron_args): no refusal there
    assert "--attention-dropout" in text


@pytest.mark.parametrize("fields, written, refused", [
    # null probabilities: Megatron-Core's 0.1 each (export._dropout); the reader checks hidden_dropout first
    (dict(dropout=True), ("0.1", "0.1"), "model.hidden_dropout=0.1"),
    (dict(dropout=True, hidden_dropout=0.0, attention_dropout=0.2), ("0.0", "0.2"), "model.attention_dropout=0.2"),
])
def test_dropout_written_and_read_back(tmp_path, fields, written, refused):
    """The overrides are the probabilities priced; the script reads back as the same plan with the same memory
    (check_readback, with the model file priced); read with the recipe's catalog model instead (no dropout: the
    provider's 0.0) it is refused naming the override, not priced without it."""
    from planner.cli.export import check_readback
    from planner.trainers import load_trainer_config

    model = tmp_path / "model.yaml"
    plan = _plan(tmp_path, **fields)
    text, _ = export_plan(plan, "megatron-bridge")
    lines = [ln.strip(" \\") for ln in text.splitlines()]
    assert f"model.hidden_dropout={written[0]}" in lines and f"model.attention_dropout={written[1]}" in lines
    row = to_json(*_resolved(model))
    check_readback(row, "megatron-bridge", text)
    out = tmp_path / "run.sh"
    out.write_text(text)
    back = load_trainer_config(out, fmt="megatron-bridge", model=str(model), gpus=8)
    assert back.job["model"] == str(model)
    with pytest.raises(PlannerError) as e:
        load_trainer_config(out, fmt="megatron-bridge", gpus=8)
    assert f"{refused} contradicts the recipe's model llama3-8b" in e.value.message


def test_recipe_model_writes_no_dropout(tmp_path):
    """A model without dropout: no override written (the provider's 0.0 is the plan's)."""
    text, _ = export_plan(_plan(tmp_path), "megatron-bridge")
    assert "model.hidden_dropout" not in text and "model.attention_dropout" not in text


def _resolved(model_file):
    s, p, _ = resolve(Job.model_validate(dict(model=str(model_file), gpus=8, stack="megatron-bridge", tp=1, pp=1, cp=1,
                                              sharding="zero1", micro_batch=1, global_batch=8, seq_len=8192)))
    return s, p, evaluate(s, p)
