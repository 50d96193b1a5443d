"""DeepSpeed ZeRO-3 with contiguous_gradients false (planner/memory.py [z3g]; job deepspeed_zero3 contiguous_gradients
0, the DeepSpeed JSON's key), by hand from microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage3.py: no IPG buffer
is allocated (l. 537-540) and __add_grad_to_ipg_bucket (l. 1275-1289) leaves each small gradient its own tensor in the
bucket, so the backward holds the bucket's pending gradients (at most reduce_bucket_size elements, priced at that
bound) in place of the buffer, and the step, after the epilogue has reduced them, holds neither."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.trainers import load_trainer_config

DS3 = Path(__file__).parent / "data" / "trainer_configs" / "ds_config_zero3.json"
STATES = ("weights", "gradients", "master_weights", "adam", "workspaces", "mpu_buffer", "model_buffers",
          "quantized_weights", "dummy_wgrads")


def _8b(explain, **kw):
    job = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="fsdp", recompute="full", micro_batch=1,
               global_batch=8, seq_len=1024, hardware="a100-sxm-80gb")
    return explain(**{**job, **kw})[3]["memory"]


def test_step_without_the_buffer(explain):
    """Llama 3 8B on 8 GPUs (test_zero3_working_set.test_8b_step_fp32_gradients): the step's moment is the stage's
    allocated peak, the states + the largest sub-group's 6 B x 1e9 + the IPG buffer 1e9 B + the persistent norms
    2 B x 64 x 4,096; without contiguous gradients the buffer is not there: 1e9 B less, the step's term 1e9 B less. The
    backward's pending gradients stay at their bound, 2 B x 5e8."""
    for contiguous, buffer in ((1, 1e9), (0, 0.0)):
        m = _8b(explain, deepspeed_zero3={"contiguous_gradients": contiguous})
        t = m["terms"]
        assert t["zero3_ipg_bucket"] == 1e9
        assert m["allocated_bytes"] == pytest.approx(sum(t[k] for k in STATES) + 6e9 + buffer + 2 * 64 * 4096,
                                                     rel=1e-12)
    on, off = (_8b(explain, deepspeed_zero3={"contiguous_gradients": c})["terms"] for c in (1, 0))
    assert on["zero3_step_grads"] - off["zero3_step_grads"] == 1e9


def test_not_zero_or_one_refused(explain):
    with pytest.raises(PlannerError, match="contiguous_gradients 2 is not 0 or 1"):
        _8b(explain, deepspeed_zero3={"contiguous_gradients": 2})


def _json(tmp_path, stage: int, contiguous) -> Path:
    data = json.loads(DS3.read_text())
    data["zero_optimization"].update(stage=stage, contiguous_gradients=contiguous)
    if stage != 3:
        data["zero_optimization"] = {k: v for k, v in data["zero_optimization"].items() if not k.startswith("stage3")
                                     and k != "sub_group_size"}
    f = tmp_path / f"ds{stage}.json"
    f.write_text(json.dumps(data))
    return f


def test_json_key_read_at_stage_3(tmp_path):
    """The JSON's false is read into deepspeed_zero3 (0), true into 1, not listed as not modelled; the string "false"
    as DeepSpeed's pydantic model reads it (lax: false, readers2), a string it refuses refused."""
    for v, want in ((False, 0), (True, 1), ("false", 0)):
        cfg = load_trainer_config(_json(tmp_path, 3, v), gpus=8, model="llama3-8b")
        assert cfg.job["deepspeed_zero3"]["contiguous_gradients"] == want
        assert not any("contiguous_gradients" in n for n in cfg.not_modelled)
    with pytest.raises(PlannerError, match="contiguous_gradients"):
        load_trainer_config(_json(tmp_path, 3, "maybe"), gpus=8, model="llama3-8b")


def test_json_false_listed_at_stage_2(tmp_path):
    """ZeRO-1/2 without the buffers is not priced: the key is listed as not modelled, with what it changes."""
    cfg = load_trainer_config(_json(tmp_path, 2, False), gpus=8, model="llama3-8b")
    assert "contiguous_gradients" not in cfg.job.get("deepspeed_zero3", {})
    assert any(n.startswith("zero_optimization.contiguous_gradients=false (ZeRO-1/2 without the IPG buffers")
               for n in cfg.not_modelled)


def test_export_writes_a_json_boolean(cli, tmp_path):
    """A plan with contiguous_gradients 0 exports zero_optimization.contiguous_gradients false, and the JSON reads back
    as the same setting."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--stack", "megatron-deepspeed", "--sharding", "fsdp",
            "--micro-batch", 1, "--global-batch", 8, "--seq-len", 1024, "--deepspeed-zero3", "contiguous_gradients=0",
            "--format", "json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["plan"]
    assert plan["deepspeed_zero3"] == {"contiguous_gradients": 0}
    from planner.trainers.export import export_plan
    text, _ = export_plan(plan, "deepspeed")
    assert json.loads(text)["zero_optimization"]["contiguous_gradients"] is False
    f = tmp_path / "exported.json"
    f.write_text(text)
    assert load_trainer_config(f, gpus=8, model="llama3-8b").job["deepspeed_zero3"]["contiguous_gradients"] == 0
