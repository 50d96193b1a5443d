"""Megatron export of the MLP activation and the two dropout probabilities (issue 22): a launch with --squared-relu
or --quick-geglu, or with one dropout at 0, is exported in Megatron's spelling with the probabilities it was priced
with, and reads back as the same model (every ModelSpec field), plan and memory. Megatron-LM @d98e8a64:
argument_utils.py core_transformer_config_from_args l. 314-326 (--swiglu: SiLU gated; --squared-relu: squared_relu,
plain; --quick-geglu: quick_gelu, gated; bias_activation_fusion from --no-bias-gelu-fusion unless --swiglu);
TransformerConfig hidden_dropout / attention_dropout 0.1 each (megatron_model.py [2])."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cli.export import check_readback
from planner.explain import evaluate, to_json
from planner.layers import layer_list
from planner.memory import kind_activation_bytes
from planner.plan import resolve
from planner.schema import Job, ModelSpec
from planner.stacks import plan_context
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

BASE = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 "
        "--micro-batch-size 4 --global-batch-size 32 --bf16 ")
HYBRID = ("--hidden-size 1024 --num-attention-heads 16 --group-query-attention --num-query-groups 8 --seq-length 1024 "
          "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 --bf16 --linear-num-key-heads 4 "
          "--linear-num-value-heads 8 --linear-key-head-dim 64 --linear-value-head-dim 64 --mamba-num-heads 32 ")


def _resolved(path: Path):
    cfg = load_trainer_config(path, gpus=8)
    settings, plan, _ = resolve(Job.model_validate({**cfg.job, "hardware": "h100-sxm"}))
    return settings, plan


def _flag(text: str, flag: str):
    words = text.split()
    return words[words.index(flag) + 1] if flag in words else None


def _round_trip(tmp_path: Path, args: str):
    """read -> export -> read back (without --model: the model from the exported flags) -> the exported text and the
    two resolved jobs; check_readback (plan and memory) passes."""
    src = tmp_path / "in.args"
    src.write_text(args + "\n")
    s, p = _resolved(src)
    row = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(row["plan"], "megatron")
    check_readback(row, "megatron", text)
    out = tmp_path / "out.sh"
    out.write_text(text)
    s2, p2 = _resolved(out)
    return text, (s, p, row), (s2, p2, to_json(s2, p2, evaluate(s2, p2)))


def _same_model(a: ModelSpec, b: ModelSpec) -> None:
    da, db = a.model_dump(), b.model_dump()
    assert {k: (da[k], db[k]) for k in da if k not in ("name", "description", "sources") and da[k] != db[k]} == {}


@pytest.mark.parametrize("args, act, flags, absent", [
    # the case: a hybrid with G layers, --squared-relu, --attention-dropout 0.0 and no --hidden-dropout (0.1)
    (HYBRID + '--disable-bias-linear --squared-relu --attention-dropout 0.0 --hybrid-layer-pattern "G-G*"',
     "squared_relu", {"--squared-relu": None, "--attention-dropout": "0.0", "--hidden-dropout": "0.1"},
     ("--swiglu", "--quick-geglu")),
    (BASE + "--disable-bias-linear --squared-relu --attention-dropout 0.0 --attention-backend unfused",
     "squared_relu", {"--squared-relu": None, "--attention-dropout": "0.0", "--hidden-dropout": "0.1"},
     ("--swiglu", "--quick-geglu")),
    (BASE + "--quick-geglu --hidden-dropout 0.0 --attention-dropout 0.15",
     "quick_gelu", {"--quick-geglu": None, "--attention-dropout": "0.15", "--hidden-dropout": "0.0"},
     ("--swiglu", "--squared-relu")),
])
def test_activation_and_dropouts_written_as_read(tmp_path, args, act, flags, absent):
    """The activation in Megatron's spelling (--squared-relu / --quick-geglu, never --swiglu for them), the
    probabilities as the launch gave them (0.1 where it left one out), and the model, plan and memory read back equal."""
    text, (s, _, row), (s2, _, row2) = _round_trip(tmp_path, args)
    assert s.model.mlp_activation == act
    for flag, value in flags.items():
        assert flag in text.split() and (value is None or _flag(text, flag) == value)
    assert not any(f in text.split() for f in absent)
    _same_model(s.model, s2.model)
    assert row2["memory"]["total_bytes"] == row["memory"]["total_bytes"]


def test_default_dropouts_stay_megatrons(tmp_path):
    """No dropout flag: Megatron's 0.1 each, kept as the model's dropout alone (no probabilities stored), written
    0.1 each; both 0.0: no dropout, written 0.0 each."""
    text, (s, _, _), _ = _round_trip(tmp_path, BASE)
    assert s.model.dropout and (s.model.hidden_dropout, s.model.attention_dropout) == (None, None)
    assert (_flag(text, "--attention-dropout"), _flag(text, "--hidden-dropout")) == ("0.1", "0.1")
    text, (s, _, _), _ = _round_trip(tmp_path, BASE + "--attention-dropout 0.0 --hidden-dropout 0.0")
    assert not s.model.dropout
    assert (_flag(text, "--attention-dropout"), _flag(text, "--hidden-dropout")) == ("0.0", "0.0")


def test_a_zero_dropout_prices_no_mask(tmp_path):
    """One layer (h 1,024, 16 heads, s 1,024, b 4: T = 4,096 tokens a micro-batch) with the eager core
    (--attention-backend unfused, attention.py's table): the attention dropout's mask and output are 3 B a score
    element, a T x 16 x 1,024 scores: 3 x 4,096 x 16 x 1,024 = 201,326,592 B, gone at --attention-dropout 0.0; the
    hidden dropout's masks are 1 B a hidden element after the attention and after the MLP: 2 x 1,024 x 4,096 =
    8,388,608 B, gone at --hidden-dropout 0.0."""
    def layer_bytes(extra: str) -> float:
        src = tmp_path / "d.args"
        src.write_text(BASE + "--attention-backend unfused " + extra + "\n")
        s, p = _resolved(src)
        ll = layer_list(s.model)
        return float(kind_activation_bytes(ll.kinds[ll.kind_at(0)], plan_context(s, p), attention="eager"))

    both = layer_bytes("")
    assert both - layer_bytes("--attention-dropout 0.0") == 3 * 4096 * 16 * 1024 == 201_326_592
    assert both - layer_bytes("--hidden-dropout 0.0") == 2 * 1024 * 4096 == 8_388_608


@pytest.mark.parametrize("fields, message", [
    (dict(dropout=False, hidden_dropout=0.1), "dropout false"),
    (dict(dropout=True, hidden_dropout=0.0, attention_dropout=0.0), "set dropout false"),
    (dict(gated_mlp=True, mlp_activation="squared_relu"), "plain MLP"),
    (dict(gated_mlp=False, mlp_activation="quick_gelu"), "gated MLP"),
])
def test_model_fields_refuse_contradictions(fields, message):
    base = dict(name="m", num_layers=2, hidden_size=64, ffn_hidden_size=256, num_attention_heads=4, vocab_size=128,
                gated_mlp=False, norm="layernorm", max_seq_len=128, sources=["test"])
    with pytest.raises(ValueError, match=message):
        ModelSpec.model_validate({**base, **fields})


def _model_file(tmp_path: Path, **fields) -> str:
    import yaml

    spec = {**dict(name="act-test", num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
                   vocab_size=50304, gated_mlp=False, norm="layernorm", max_seq_len=1024, position_embedding="learned",
                   linear_bias=False, dropout=True, sources=["test"]), **fields}
    p = tmp_path / f"act-test-{fields.get('mlp_activation')}.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


def test_megatron_deepspeed_writes_squared_relu_and_refuses_quick_geglu(tmp_path):
    """microsoft/Megatron-DeepSpeed @f4157bea has --squared-relu (arguments.py l. 668; transformer.py ParallelMLP
    l. 142-145) and no --quick-geglu: the first is written and reads back as the same model, plan and memory; the
    second is refused naming the setting (exit 2 through the CLI's PlannerError)."""
    from planner.errors import PlannerError

    job = dict(stack="megatron-deepspeed", gpus=8, hardware="h100-sxm", global_batch=32, micro_batch=4, seq_len=1024)
    s, p, _ = resolve(Job.model_validate({**job, "model": _model_file(tmp_path, mlp_activation="squared_relu",
                                                                      attention_dropout=0.0, hidden_dropout=0.1)}))
    row = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    assert "--squared-relu" in text.split() and _flag(text, "--attention-dropout") == "0.0"
    check_readback(row, "megatron-deepspeed", text)
    s, p, _ = resolve(Job.model_validate({**job, "model": _model_file(tmp_path, gated_mlp=True,
                                                                      mlp_activation="quick_gelu")}))
    row = to_json(s, p, evaluate(s, p))
    with pytest.raises(PlannerError, match="mlp_activation quick_gelu: microsoft/Megatron-DeepSpeed @f4157bea has no"):
        export_plan(row["plan"], "megatron-deepspeed")


def test_torchtitan_refuses_a_flavor_of_another_activation(tmp_path):
    """Llama 3 8B's shape with a quick-GeLU gated MLP: torchtitan's llama3 8B flavors run SwiGLU (FeedForward's
    F.silu, no TOML setting changes it), so no flavor matches (torchtitan_flavors.PRICED: mlp_activation) and the
    export refuses naming the difference, where it wrote the SwiGLU 8B flavor before."""
    import yaml

    from planner.catalog import load_model
    from planner.errors import PlannerError

    spec = load_model("llama3-8b").model_dump(exclude_none=True)
    spec.update(name="llama3-8b-quick-geglu", mlp_activation="quick_gelu")
    p = tmp_path / "llama3-8b-quick-geglu.yaml"
    p.write_text(yaml.safe_dump(spec))
    s, pl, _ = resolve(Job.model_validate(dict(model=str(p), stack="torchtitan", gpus=8, hardware="h100-sxm",
                                               sharding="fsdp", global_batch=8, micro_batch=1, seq_len=8192)))
    row = to_json(s, pl, evaluate(s, pl))
    with pytest.raises(PlannerError, match="mlp_activation None / 'quick_gelu'"):
        export_plan(row["plan"], "torchtitan")


def test_nemotron_h_is_squared_relu_from_its_config_and_catalog():
    """Nemotron-H-56B's config.json (tests/data/arch) says mlp_hidden_act relu2 (transformers ACT2FN:
    ReLUSquaredActivation) on its plain MLP: the Hugging Face reader and the catalog entry both give mlp_activation
    squared_relu, so a Megatron export writes --squared-relu where it wrote Megatron's default GeLU."""
    import json

    from planner.catalog import load_model
    from planner.hf_config import read

    cfg = Path(__file__).parent / "data" / "arch" / "nemotron-h-56b-base-8k" / "config.json"
    data, _ = read(json.loads(cfg.read_text()), str(cfg))
    assert (data["gated_mlp"], data.get("mlp_activation")) == (False, "squared_relu")
    assert load_model("nemotron-h-56b").mlp_activation == "squared_relu"
    settings, plan, _ = resolve(Job(model="nemotron-h-56b", stack="megatron", gpus=64, hardware="h100-sxm", tp=4,
                                    pp=2, global_batch=256, micro_batch=1, seq_len=8192))
    text, _ = export_plan(to_json(settings, plan, evaluate(settings, plan))["plan"], "megatron")
    assert "--squared-relu" in text.split()


def test_squared_relu_with_biases_runs_unfused_or_is_refused(tmp_path):
    """--squared-relu with Megatron's default linear biases (add_bias_linear true): --squared-relu reads
    bias_gelu_fusion (argument_utils.py @d98e8a64 l. 314-326), default on, and TransformerConfig raises on a
    fused bias with squared ReLU ('When bias_activation_fusion is True, activation function should be either gelu,
    swiglu, or quick_geglu', transformer_config.py l. 2420-2424). So the launch without --no-bias-gelu-fusion is
    refused (exit 2 from the CLI: a PlannerError naming the source); with the flag it is priced unfused and
    exports the flag back; a job that leaves the fusion out runs it off (plan._fusion_settings, an inherited
    setting) and its export writes --no-bias-gelu-fusion, which reads back as the same plan and memory."""
    from planner.errors import PlannerError

    src = tmp_path / "fused.args"
    src.write_text(BASE + "--squared-relu\n")
    with pytest.raises(PlannerError, match="transformer_config.py l. 2420-2424"):
        _resolved(src)
    text, (s, p, row), (s2, p2, row2) = _round_trip(tmp_path, BASE + "--squared-relu --no-bias-gelu-fusion")
    assert s.model.mlp_activation == "squared_relu" and s.model.linear_bias
    assert row["plan"]["bias_activation_fusion"] is False and "--no-bias-gelu-fusion" in text.split()
    assert row2["memory"] == row["memory"]
    # the job without the switch: off, inherited, and exported as the flag
    model = load_trainer_config(tmp_path / "in.args", gpus=8).job["model"]  # the model file the reader wrote
    settings, plan, _ = resolve(Job(model=model, hardware="h100-sxm", gpus=8, seq_len=1024, micro_batch=4,
                                    global_batch=32, stack="megatron"))
    row = to_json(settings, plan, evaluate(settings, plan))
    assert row["plan"]["bias_activation_fusion"] is False
    text, _ = export_plan(row["plan"], "megatron")
    assert "--no-bias-gelu-fusion" in text.split() and "--squared-relu" in text.split()
    check_readback(row, "megatron", text)
    with pytest.raises(PlannerError, match="squared-ReLU MLP"):
        resolve(Job(model=model, hardware="h100-sxm", gpus=8, seq_len=1024, micro_batch=4, global_batch=32,
                    stack="megatron", bias_activation_fusion=True))
