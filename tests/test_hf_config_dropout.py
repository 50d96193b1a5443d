"""Hugging Face configs' dropout probabilities kept (issue 22; planner/hf_config.py _dropout_probabilities): the
reader set ModelSpec.dropout where attention_dropout or hidden_dropout was above 0 but kept neither probability, so
the model was priced and exported with Megatron's 0.1 for both (export._dropout), a hidden (residual) dropout the
transformers model does not run included. Now attention_dropout is the config's and hidden_dropout the config's
where it gives one (Nemotron-H), else 0 (Llama-style decoder layers add their outputs with no dropout)."""

from __future__ import annotations

import json
from pathlib import Path

from planner.catalog import load_model
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers.export import export_plan

LLAMA = Path(__file__).parent / "data" / "arch" / "llama-3.1-8b" / "config.json"


def _config(tmp_path: Path, **keys) -> Path:
    cfg = json.loads(LLAMA.read_text())
    cfg.update(keys)
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d / "config.json"


def test_llama_attention_dropout_kept_no_hidden_dropout(tmp_path):
    m = load_model(str(_config(tmp_path, attention_dropout=0.2)))
    assert (m.dropout, m.attention_dropout, m.hidden_dropout) == (True, 0.2, 0.0)
    assert m.attention_dropout_on and not m.hidden_dropout_on
    # the shipped config (attention_dropout 0.0): no dropout, the probabilities left null as before
    plain = load_model(str(LLAMA))
    assert (plain.dropout, plain.attention_dropout, plain.hidden_dropout) == (False, None, None)


def test_hidden_dropout_key_kept(tmp_path):
    m = load_model(str(_config(tmp_path, attention_dropout=0.0, hidden_dropout=0.05)))
    assert (m.dropout, m.attention_dropout, m.hidden_dropout) == (True, 0.0, 0.05)


def test_megatron_export_writes_the_configs_probabilities(tmp_path):
    """Was --attention-dropout 0.1 --hidden-dropout 0.1 (null probabilities: Megatron's default); now the config's
    0.2 and 0.0, and no hidden dropout masks priced: at tp 8, sp, micro-batch 1, seq 4,096 the hidden masks are 1 B a
    hidden element a sub-block, 2 a layer (memory.py [dm]): 2 x 4,096 x 4,096 / 8 = 4,194,304 B a layer less than
    the same model at hidden_dropout 0.1, whose activations are otherwise the same: x 32 layers = 134,217,728 B."""
    f = _config(tmp_path, attention_dropout=0.2)
    job = dict(model=str(f), gpus=8, tp=8, pp=1, cp=1, sequence_parallel=True, micro_batch=1, global_batch=8,
               seq_len=4096, sharding="zero1", recompute="none", stack="megatron")
    s, p, _ = resolve(Job.model_validate(job))
    row = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(row["plan"], "megatron")
    words = text.split()
    assert words[words.index("--attention-dropout") + 1] == "0.2"
    assert words[words.index("--hidden-dropout") + 1] == "0.0"
    spec = load_model(str(f)).model_copy(update={"hidden_dropout": 0.1})
    y = tmp_path / "hd.yaml"
    import yaml

    y.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    s2, p2, _ = resolve(Job.model_validate({**job, "model": str(y)}))
    row2 = to_json(s2, p2, evaluate(s2, p2))
    assert row2["memory"]["total_bytes"] - row["memory"]["total_bytes"] == 32 * 2 * 4096 * 4096 // 8


def _gpt2_style(tmp_path: Path, **keys) -> Path:
    """The Llama config with GPT-2's dropout keys instead of attention_dropout (GPT2Config spells the same
    probabilities attn_pdrop / resid_pdrop; hf_config.GPT2_DROPOUTS)."""
    import tempfile

    cfg = json.loads(LLAMA.read_text())
    cfg.pop("attention_dropout")
    cfg.update(keys)
    d = Path(tempfile.mkdtemp(dir=tmp_path))  # a folder a config (load_model keeps what it read by path)
    (d / "config.json").write_text(json.dumps(cfg))
    return d / "config.json"


def test_gpt2_dropout_keys_read_as_the_models_dropouts(tmp_path):
    """transformers GPT2Config / modeling_gpt2.py: attn_pdrop drops the softmax output (GPT2Attention.attn_dropout:
    Megatron's attention_dropout), resid_pdrop the attention's and the MLP's projected outputs before the residual add
    (GPT2Attention.resid_dropout, GPT2MLP.dropout: Megatron's hidden_dropout). Was: `field resid_pdrop: not
    understood`, an error."""
    m = load_model(str(_gpt2_style(tmp_path, attn_pdrop=0.2, resid_pdrop=0.1)))
    assert (m.dropout, m.attention_dropout, m.hidden_dropout) == (True, 0.2, 0.1)
    m = load_model(str(_gpt2_style(tmp_path, attn_pdrop=0.0, resid_pdrop=0.0)))
    assert m.dropout is False


def test_gpt2_and_llama_spelling_must_agree(tmp_path):
    import pytest

    from planner.errors import PlannerError

    with pytest.raises(PlannerError) as e:
        load_model(str(_config(tmp_path, attn_pdrop=0.1)))  # beside the config's attention_dropout 0.0
    assert "`attn_pdrop`" in e.value.message and "attention_dropout is 0.0" in e.value.message
    m = load_model(str(_config(tmp_path, attention_dropout=0.1, attn_pdrop=0.1)))
    assert m.attention_dropout == 0.1


def test_embd_pdrop_listed_not_modelled(tmp_path):
    """GPT2Model.drop (embd_pdrop) on the embeddings' sum: the planner prices no embedding dropout, so it is said as
    not modelled among the model's assumed lines (explain prints them; the report grammar reads the head
    `embd_pdrop=0.05` as the setting and its value), and the model has no dropout from it. Was: an error."""
    from planner.catalog import hf_assumed

    path = _gpt2_style(tmp_path, embd_pdrop=0.05)
    assert load_model(str(path)).dropout is False
    lines = [a for a in hf_assumed(str(path)) if "embd_pdrop" in a]
    assert lines == ["embd_pdrop=0.05: not modelled: the embedding dropout (transformers GPT2Model.drop) keeps a mask "
                     "the planner does not price"]
    assert not any("embd_pdrop" in a for a in hf_assumed(str(_gpt2_style(tmp_path, embd_pdrop=0.0))))


def test_resid_pdrop_prices_the_hidden_masks_by_hand(tmp_path):
    """resid_pdrop 0.1 against 0.0 (attn_pdrop 0.2 both): the hidden masks, 1 B a hidden element after each of the
    two sub-blocks (memory.py [dm]); tp 8 with SP, micro-batch 1, seq 4,096, hidden 4,096: 2 x 4,096 x 4,096 / 8 =
    4,194,304 B a layer, x 32 layers = 134,217,728 B; and the GPT-2 spelling prices as the Llama one."""
    job = dict(gpus=8, tp=8, pp=1, cp=1, sequence_parallel=True, micro_batch=1, global_batch=8, seq_len=4096,
               sharding="zero1", recompute="none", stack="megatron")

    def total(path):
        s, p, _ = resolve(Job.model_validate({**job, "model": str(path)}))
        return to_json(s, p, evaluate(s, p))["memory"]["total_bytes"]

    on = total(_gpt2_style(tmp_path, attn_pdrop=0.2, resid_pdrop=0.1))
    assert on - total(_gpt2_style(tmp_path, attn_pdrop=0.2, resid_pdrop=0.0)) == 32 * 2 * 4096 * 4096 // 8
    assert on == total(_config(tmp_path, attention_dropout=0.2, hidden_dropout=0.1))
