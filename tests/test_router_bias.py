"""The router's two biases (issue 22, docs/megatron_validate_args.md "Megatron-Core's model-config
checks"): the aux-loss-free expert score bias (DeepSeek-V3 e_score_correction_bias, Megatron
--moe-router-enable-expert-bias, sigmoid scores only: transformer_config.py @d98e8a64
l. 2617-2625) and the router linear's own bias (gpt-oss GptOssTopKRouter, Megatron's router under
--add-bias-linear: moe/router.py l. 67-72). Each from its own source; only the first picks the
aux-loss-free balancing rule (planner/imbalance.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import assert_one_error, explain_job
from planner.catalog import load_model, model_from_hf_config

ROOT = Path(__file__).resolve().parent.parent


def _hf(name):
    path = ROOT / "tests/data/arch" / name / "config.json"
    return model_from_hf_config(json.loads(path.read_text()), str(path))


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gpt-oss-20b"])
def test_gpt_oss_has_a_router_linear_bias_not_a_score_bias(name):
    """The zoo entry and the Hugging Face config (GptOssTopKRouter's bias: no config key, every
    GptOssConfig has it) agree: a linear bias, no score bias; 128 / 32 router parameters more a
    layer than the weight alone (h E + E)."""
    for m in (load_model(name), _hf(name)):
        assert (m.moe.router_linear_bias, m.moe.expert_score_bias) == (True, False), m.name
        from planner.layers import layer_list

        kind = next(k for k in layer_list(m).kinds if k.mlp.kind == "mlp" and hasattr(k.mlp, "router_params"))
        E = m.moe.num_experts
        assert kind.mlp.router_params == 2880 * E + E


def test_score_bias_from_topk_method_noaux_tc():
    """Kimi K2's config.json topk_method noaux_tc (e_score_correction_bias): the score bias, no
    linear bias; the zoo's DeepSeek-V3 likewise."""
    m = _hf("kimi-k2-instruct")
    assert (m.moe.expert_score_bias, m.moe.router_linear_bias) == (True, False)
    assert load_model("deepseek-v3").moe.expert_score_bias and not load_model("deepseek-v3").moe.router_linear_bias


def test_default_balancing_keys_on_the_score_bias():
    """gpt-oss's softmax router with a linear bias balances with Megatron's default aux_loss
    (Megatron-Bridge's provider sets an auxiliary loss or none, never the expert bias): L = 1 +
    0.52 sqrt(ln 64 / (2 ln 64)) = 1 + 0.52 sqrt(1/2) with 128 experts on 64 ranks (n = 2);
    before the split it was aux_loss_free (1 + 0.04 sqrt(1/2))."""
    _, _, _, js = explain_job(model="gpt-oss-120b", gpus=64, ep=64, global_batch=1280, micro_batch=4, seq_len=4096,
                              hardware="b200")
    assert js["plan"]["moe_load_balancing"] == "aux_loss"
    assert js["plan"]["moe_rank_load"] == pytest.approx(1.0 + 0.52 * math.sqrt(0.5), rel=1e-12)


def _export_read_back(tmp_path, model, **job):
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    _, _, _, row = explain_job(model=model, **job)
    text = export_plan(row["plan"], "megatron")[0]
    p = tmp_path / "run.sh"
    p.write_text(text)
    return text, load_trainer_config(p, fmt="megatron", gpus=job["gpus"])


def test_export_writes_the_right_flags_and_reads_them_back(tmp_path):
    """gpt-oss: no --disable-bias-linear (linear biases, Megatron's default, the router's bias with them; before
    2026-12-07 the export wrote --add-bias-linear, which Megatron-LM's parser refuses), no --moe-router-enable-expert-bias
    (Megatron refuses it with a softmax score); read back without --model: the same two fields.
    DeepSeek-V3: --moe-router-enable-expert-bias beside --moe-router-score-function sigmoid and
    --disable-bias-linear; read back: the score bias only."""
    from planner.catalog import load_model as load

    text, cfg = _export_read_back(tmp_path, "gpt-oss-120b", gpus=64, ep=64, global_batch=1280, micro_batch=4,
                                  seq_len=4096, hardware="b200")
    assert "--disable-bias-linear" not in text and "--moe-router-enable-expert-bias" not in text
    assert "--add-bias-linear" not in text
    m = load(cfg.job["model"])
    assert (m.linear_bias, m.moe.router_linear_bias, m.moe.expert_score_bias) == (True, True, False)
    text, cfg = _export_read_back(tmp_path, "deepseek-v3", gpus=1024, pp=16, ep=64, global_batch=1024, micro_batch=1,
                                  seq_len=4096)
    assert "--moe-router-enable-expert-bias" in text and "--moe-router-score-function sigmoid" in text
    m = load(cfg.job["model"])
    assert (m.linear_bias, m.moe.router_linear_bias, m.moe.expert_score_bias) == (False, False, True)


ARGS = ("--num-layers 4 --hidden-size 1024 --ffn-hidden-size 2048 --num-attention-heads 16 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 16 --num-experts 8 --moe-router-topk 2 "
        "--swiglu --normalization RMSNorm --untie-embeddings-and-output-weights --bf16 --vocab-size 32000 "
        "--disable-bias-linear --position-embedding-type rope")


def test_reader_refuses_the_expert_bias_with_softmax(tmp_path, cli):
    """Megatron-Core refuses --moe-router-enable-expert-bias with the softmax score (its default);
    with sigmoid the neighbour reads as the score bias."""
    from planner.trainers import load_trainer_config

    p = tmp_path / "run.args"
    p.write_text(ARGS + " --moe-router-enable-expert-bias\n")
    assert_one_error(cli("explain", str(p), "--gpus", "8"), "--moe-router-enable-expert-bias", "2617-2625")
    p.write_text(ARGS + " --moe-router-enable-expert-bias --moe-router-score-function sigmoid\n")
    m = load_model(load_trainer_config(p, fmt="megatron", gpus=8).job["model"])
    assert (m.moe.expert_score_bias, m.moe.router_linear_bias) == (True, False)


def test_export_refuses_what_megatron_cannot_build(tmp_path, cli):
    """A score bias on a softmax router, and a router linear bias without the other linears'
    (Megatron ties both to --add-bias-linear), are refused by the Megatron export."""
    import yaml

    base = yaml.safe_load((ROOT / "model_zoo" / "mixtral-8x7b.yaml").read_text())
    for name, moe in (("softmax-score-bias", {"expert_score_bias": True}),
                      ("router-bias-only", {"router_linear_bias": True})):
        spec = {**base, "name": name, "moe": {**base["moe"], **moe}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        r = cli("export", "--model", str(path), "--gpus", "8", "--ep", "8", "--global-batch", "8", "--seq-len", "4096",
                "--format", "megatron")
        assert_one_error(r, "export megatron", "router_linear_bias" if "router" in name else "expert_score_bias")


def test_the_old_field_names_the_two(tmp_path, cli):
    import yaml

    base = yaml.safe_load((ROOT / "model_zoo" / "mixtral-8x7b.yaml").read_text())
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({**base, "moe": {**base["moe"], "router_bias": True}}))
    assert_one_error(cli("explain", "--model", str(path), "--gpus", "8", "--ep", "8", "--global-batch", "8",
                         "--seq-len", "4096"), "expert_score_bias", "router_linear_bias")
