"""torchtitan's float8 converter and the output layer (issues 21 / 23): [float8] filter_fqns
defaults to [] (pytorch/torchtitan torchtitan/config/job_config.py @e347b1e5e l. 741, since
a6524d8a0, 2025-04-07), so a job file that leaves it out converts the output layer to fp8 too;
the shipped train_configs set filter_fqns = ["output"] (llama3_8b.toml @e7c0cae l. 62). The job
field fp8_output_layer prices that: its three GEMMs at the fp8 rate plus the recipe's casts
(planner/step.py [14]), its saved tensors unchanged."""

from __future__ import annotations

import tomllib

import pytest
import yaml

from planner.efficiencies import HBM_EFFICIENCY
from planner.errors import PlannerError
from planner.trainers import load_trainer_config

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
HBM = 3.35e12 * HBM_EFFICIENCY  # h100-sxm, as tests/test_stacks.py
FP8 = 'converters = ["float8"]\n[parallelism]\ndata_parallel_shard_degree = -1\n[float8]\n'
MX = 'converters = ["mx"]\n[parallelism]\ndata_parallel_shard_degree = -1\n[mx]\n'


def _titan(tmp_path, body: str):
    p = tmp_path / "t.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\n' + body)
    return load_trainer_config(p, gpus=8)


# ------------------------------------------------------------------ the reader
def test_filter_fqns_unset_converts_the_output_layer(tmp_path):
    cfg = _titan(tmp_path, FP8)
    assert cfg.job["fp8_output_layer"] is True
    assert any(a.startswith("fp8_output_layer=true: [float8] filter_fqns unset") for a in cfg.assumed)


@pytest.mark.parametrize("fqns,fp8_out,where", [
    ('["output"]', False, "assumed"),      # the shipped train_configs: the output layer bf16
    ('"output"', False, "assumed"),        # the command line's comma-separated string
    ("[]", True, "assumed"),               # the default written out: the output layer fp8, priced
    ('["output", "attention.wq"]', False, "assumed"),  # another Linear kept bf16: priced (step.py [18])
    ('["attention.wq"]', True, "assumed"),  # read and priced: assumed, not ignored (tests/ignored_keys.py)
    ('["output", "layers.1.attention"]', False, "not_modelled"),  # a filter of some layers by index: not priced
])
def test_filter_fqns_lists(tmp_path, fqns, fp8_out, where):
    cfg = _titan(tmp_path, FP8 + f"filter_fqns = {fqns}\n")
    assert cfg.job.get("fp8_output_layer", False) is fp8_out
    assert cfg.job["filter_fqns"] == ([fqns.strip('"')] if not fqns.startswith("[") else tomllib.loads(f"x = {fqns}")["x"])
    assert sum(x.startswith("float8.filter_fqns=") for x in getattr(cfg, where)) == 1
    assert not any(a.startswith("fp8_output_layer=") for a in cfg.assumed)  # no default's line: the file sets it


def test_mx_keeps_the_output_layer_bf16_by_default(tmp_path):
    # MXLinear.filter_fqns defaults to ["output"] (job_config.py @e347b1e5e); [] converts it
    assert "fp8_output_layer" not in _titan(tmp_path, MX).job
    cfg = _titan(tmp_path, MX + "filter_fqns = []\n")
    assert cfg.job["fp8_output_layer"] is True and cfg.job["fp8_recipe"] == "mxfp8"


def test_filter_fqns_without_converter_ignored(tmp_path):
    cfg = _titan(tmp_path, "[float8]\nfilter_fqns = []\n")
    assert "fp8_output_layer" not in cfg.job
    assert "float8.filter_fqns=[] (no float8 converter)" in cfg.ignored


# ------------------------------------------------------------------ the pricing
def _stack_file(tmp_path, edit):
    data = yaml.safe_load((ROOT / "stack_db" / "torchtitan.yaml").read_text())
    edit(data)
    path = tmp_path / "torchtitan-edited.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


KW = dict(model="llama3-8b", gpus=1, global_batch=1, micro_batch=1, seq_len=8192, precision="fp8",
          fp8_recipe="tensorwise")


def test_fp8_output_layer_time_by_hand(explain, tmp_path):
    """The output layer in fp8 runs its GEMMs at the fp8 rate and pays the tensorwise casts of
    its inputs: 5 B per element (stack_db torchtitan tensorwise cast_bytes_per_element) of the
    input T h and the weight V h forward, twice that backward. Against a stack whose casts cost
    nothing, the casts alone: 3 x 5 B x 4096 x (8192 + 128,256) = 8,383,365,120 B over the HBM."""
    def no_cast(d):
        d["fp8_recipes"]["tensorwise"]["cast_bytes_per_element"] = 0
    free = _stack_file(tmp_path, no_cast)
    a = explain(stack="torchtitan", **KW)[3]["time"]["compute_s"]
    b = explain(stack="torchtitan", fp8_output_layer=True, **KW)[3]["time"]["compute_s"]
    c = explain(stack=free, **KW)[3]["time"]["compute_s"]
    d = explain(stack=free, fp8_output_layer=True, **KW)[3]["time"]["compute_s"]
    assert c - d > 0  # the [8192, 128256, 4096] GEMM three times at the fp8 rate instead of bf16
    assert (c - d) - (a - b) == pytest.approx(8_383_365_120 / HBM, rel=1e-9)
    assert 3 * 5 * 4096 * (8192 + 128256) == 8_383_365_120


def test_fp8_output_layer_keeps_its_memory(explain):
    # torchao's Float8Linear saves its bf16 input and weight (step.py [14]): no memory term moves
    bf = explain(stack="torchtitan", **KW)[3]["memory"]["terms"]
    f8 = explain(stack="torchtitan", fp8_output_layer=True, **KW)[3]["memory"]["terms"]
    assert f8 == bf


def test_same_as_a_recipe_that_converts_the_output_layer(explain, tmp_path):
    # the job field prices what a recipe with output_layer_bf16 false prices
    def fp8_head(d):
        d["fp8_recipes"]["tensorwise"]["output_layer_bf16"] = False
    path = _stack_file(tmp_path, fp8_head)
    a = explain(stack=path, **KW)[3]["time"]["step_s"]
    b = explain(stack="torchtitan", fp8_output_layer=True, **KW)[3]["time"]["step_s"]
    assert a == pytest.approx(b, rel=1e-12)


def test_dims_not_multiple_of_16_stay_bf16(explain, tmp_path):
    # GPT-3's vocabulary, 50,257, is not a multiple of 16: torchtitan's module_filter_fn skips
    # the Linear (components/quantization/utils.py @e347b1e5e l. 19-22), priced bf16
    # (pure bf16, training.dtype bfloat16: at dp 1 with TP torchtitan trains a float32 model in fp32, start-up rule
    # TORCHTITAN_FP32). On Llama 3 8B's block with that vocabulary: torchtitan builds no GPT-3 block (learned
    # positions, LayerNorm, plain MLP: rule 73, docs/stack_models.md)
    from pathlib import Path

    d = yaml.safe_load((Path(__file__).resolve().parent.parent / "model_zoo" / "llama3-8b.yaml").read_text())
    d.update(name="llama3-8b-v50257", vocab_size=50_257)
    d.pop("training", None)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(d))
    kw = dict(KW, model=str(path), gpus=8, tp=8, seq_len=2048, bytes_per_param="pure-bf16")
    s, _, _, js = explain(stack="torchtitan", fp8_output_layer=True, **kw)
    assert s.fp8_output_layer is False and "fp8_output_layer" not in js["plan"]
    assert js["time"]["step_s"] == explain(stack="torchtitan", **kw)[3]["time"]["step_s"]


def test_refusals(explain):
    with pytest.raises(PlannerError, match="fp8_output_layer needs precision fp8"):
        explain(stack="torchtitan", **dict(KW, precision="bf16", fp8_recipe=None), fp8_output_layer=True)
    with pytest.raises(PlannerError, match="stack megatron keeps the output layer in bf16"):
        explain(stack="megatron", **dict(KW, fp8_recipe=None), fp8_output_layer=True)


# ------------------------------------------------------------------ export
def test_export_writes_filter_fqns_as_priced(tmp_path):
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan

    for fp8_out, want in ((False, ["output"]), (True, [])):
        job = Job(stack="torchtitan", fp8_output_layer=fp8_out, **dict(KW, gpus=8, global_batch=8))
        plan = resolved_plan(job)
        text, _ = export_plan(plan, "torchtitan")
        assert tomllib.loads(text)["quantize"]["linear"]["float8"]["filter_fqns"] == want
        p = tmp_path / "e.toml"
        p.write_text(text)
        back = load_trainer_config(p).job
        assert back.get("fp8_output_layer", False) is fp8_out


def test_tensorwise_export_writes_the_fp8_all_gather_as_priced(tmp_path):
    """torchtitan runs FSDP's fp8 weight all-gather only with recipe_name unset and
    enable_fsdp_float8_all_gather true (its default is false, job_config.py @e347b1e5e l. 732; a
    recipe_name turns it off, float8.py @9810191bb~1 l. 62-99): the export writes the plan's
    fp8_allgather (absent: the tensorwise recipe's rule, on) under FSDP and no key without sharding;
    the reader reads it back, and a job file that leaves it out is read as false, listed as assumed
    (tests/test_torchtitan_fp8_allgather.py prices it)."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan, plan_signature

    base = dict(model="llama3-8b", gpus=32, hardware="h200-sxm", stack="torchtitan", precision="fp8",
                global_batch=64, seq_len=8192)
    p = tmp_path / "fsdp.toml"
    for ag, want in ((None, True), (True, True), (False, False)):
        plan = resolved_plan(Job(**base, sharding="fsdp", **({} if ag is None else {"fp8_allgather": ag})))
        assert plan.get("fp8_allgather") is ag
        text, _ = export_plan(plan, "torchtitan")
        f8 = tomllib.loads(text)["quantize"]["linear"]["float8"]  # the layout of @e347b1e5e (export.py TT_QUANTIZE)
        assert f8 == {"enable_fsdp_float8_all_gather": want, "filter_fqns": ["output"]}
        p.write_text(text)
        cfg = load_trainer_config(p, model="llama3-8b")
        assert cfg.job["fp8_recipe"] == "tensorwise" and cfg.job["fp8_allgather"] is want
        assert not any("float8" in x for x in cfg.not_modelled)
        assert plan_signature(plan)["fp8_allgather"] is want
    p.write_text(text.replace("enable_fsdp_float8_all_gather = false\n", ""))
    cfg = load_trainer_config(p, model="llama3-8b")
    assert cfg.job["fp8_allgather"] is False
    assert any(x.startswith("fp8_allgather=false: float8.enable_fsdp_float8_all_gather unset (torchtitan's default")
               for x in cfg.assumed)
    text, _ = export_plan(resolved_plan(Job(**base, sharding="none")), "torchtitan")
    assert tomllib.loads(text)["quantize"]["linear"]["float8"] == {"filter_fqns": ["output"]}
