"""The sharding mode in the stack's own words everywhere a plan is shown (stack_db runs.sharding `label`, the JSON
plan's sharding_label): Megatron-LM's Megatron-FSDP levels are --data-parallel-sharding-strategy choices
(NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 3190-3192: no_shard, optim, optim_grads,
optim_grads_params), so "zero2" (DeepSpeed's ZeRO-2) and "fsdp" (torch FSDP, the fsdp level's other mode here) are
shown as "Megatron-FSDP optim_grads" and "Megatron-FSDP optim_grads_params": in check's suggested fixes, explain's
plan line, fit's sharding column, the JSON, and validate's table (its new sharding column, fit's cell)."""
from __future__ import annotations

import json

import pytest

from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job

LLAMA70 = "model: llama3-70b\ngpus: {gpus}\nstack: megatron\nsharding: {sharding}\ntp: 4\nglobal_batch: 64\nseq_len: 4096\nrecompute: full\n"


def _check(cli, tmp_path, gpus: int, sharding: str) -> dict:
    path = tmp_path / "job.yaml"
    path.write_text(LLAMA70.format(gpus=gpus, sharding=sharding))
    r = cli("check", path, "--format", "json")
    return json.loads(r.stdout)[0]


def test_check_suggestions_name_the_megatron_fsdp_strategy(cli, tmp_path):
    """Llama 3 70B at tp 4 with full recompute on megatron. On 64 GPUs (dp 16) the distributed optimizer does not fit
    (146% of HBM): the sharding rung zero2 resolves to the stack's one zero2 mode, megatron_fsdp_optim_grads, and the
    fix says so. On 32 GPUs at zero2 (dp 8: 94%) the rung fsdp is the stack's first fsdp mode,
    megatron_fsdp_optim_grads_params: both ends in Megatron's words. Before: 'sharding zero1 -> zero2'."""
    c = _check(cli, tmp_path, 64, "zero1")
    assert c["verdict"] == "fail"
    (s,) = [s for s in c["suggestions"] if "sharding" in s["changes"]]
    assert s["description"] == "sharding zero1 -> Megatron-FSDP optim_grads"
    assert s["changes"] == {"sharding": "zero2"} and s["plan"]["sharding_label"] == "Megatron-FSDP optim_grads"
    c = _check(cli, tmp_path, 32, "zero2")
    assert c["verdict"] == "fail" and c["plan"]["sharding_label"] == "Megatron-FSDP optim_grads"
    (s,) = [s for s in c["suggestions"] if "sharding" in s["changes"]]
    assert s["description"] == "sharding Megatron-FSDP optim_grads -> Megatron-FSDP optim_grads_params"
    assert s["plan"]["sharding_mode"] == "megatron_fsdp_optim_grads_params"


@pytest.mark.parametrize("stack", ["megatron", "megatron-bridge"])
def test_the_fsdp_level_is_megatron_fsdp_optim_grads_params(stack):
    """The megatron and megatron-bridge stacks' first fsdp mode carries its label into the JSON plan; torch FSDP2
    (the level's other mode, named by its mode name where picked) carries none."""
    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, stack=stack, sharding="fsdp", global_batch=64, seq_len=4096))
    plan = to_json(s, p, evaluate(s, p))["plan"]
    assert (plan["sharding"], plan["sharding_mode"]) == ("fsdp", "megatron_fsdp_optim_grads_params")
    assert plan["sharding_label"] == "Megatron-FSDP optim_grads_params"
    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, stack="megatron", sharding="fsdp", sharding_mode="torch_fsdp2",
                          global_batch=64, seq_len=4096))
    assert "sharding_label" not in to_json(s, p, evaluate(s, p))["plan"]


def test_explain_and_fit_show_the_label(cli):
    args = ["--model", "llama3-8b", "--gpus", "8", "--stack", "megatron", "--global-batch", "64", "--seq-len", "4096"]
    r = cli("explain", *args, "--sharding", "fsdp")
    assert r.exit_code == 0, r.stderr
    assert "  Megatron-FSDP optim_grads_params (level fsdp), micro-batch" in r.stdout
    r = cli("fit", *args, "--sharding", "fsdp", "--top", "3", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    assert "Megatron-FSDP optim_grads_params" in r.stdout
    r = cli("fit", *args, "--sharding", "megatron_fsdp_optim_grads_params", "--top", "1")
    assert r.exit_code == 0, r.stderr
    assert "Megatron-FSDP optim_grads_params" in r.stdout


def test_validate_shows_the_sharding_as_fit_does(tmp_path):
    """A 4-layer GPT-like record on 8 H100s (tests/test_validate.py's _record) on the megatron stack: sharding fsdp (a
    ZeRO-3 run), which the stack runs as Megatron-FSDP optim_grads_params; 'none' as ddp,
    the level's name. The table's sharding column is fit's cell (render/common.sharding_text); the JSON row's plan
    has the label."""
    import yaml
    from typer.testing import CliRunner

    from planner.cli import app

    rec = dict(model_name="GPT tiny", num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
               num_kv_heads=8, vocab_size=32000, seq_length=2048, global_batch_size=64, micro_batch_size=1,
               gpu_type="H100-SXM-80GB", hardware="h100-sxm", num_gpus=8, tp=1, pp=1, vpp=1, cp=1, recompute="none",
               sequence_parallel=False, precision="bf16", tokens_per_sec_per_gpu=1000.0, stack="megatron")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([dict(rec, id="zero3-run", sharding="fsdp", zero_fsdp_mode_text="ZeRO-3"),
                                    dict(rec, id="ddp-run", sharding="none")], sort_keys=False))
    runner = CliRunner()
    r = runner.invoke(app, ["validate", str(path), "--format", "json"])
    assert r.exit_code == 0, r.stderr
    rows = {row["id"]: row for row in json.loads(r.stdout)["runs"]}
    assert rows["zero3-run"]["plan"]["sharding_label"] == "Megatron-FSDP optim_grads_params"
    assert "sharding_label" not in rows["ddp-run"]["plan"]
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(ln for ln in lines if "mesh" in ln)
    assert [c.strip() for c in head.strip("┃").split("┃")][:4] == ["id", "hardware", "mesh", "sharding"]
    cells = {ln.split("│")[1].strip(): ln.split("│")[4].strip() for ln in lines if ln.startswith("│") and "-run" in ln}
    assert cells == {"zero3-run": "Megatron-FSDP optim_grads_params", "ddp-run": "none"}
