"""torchtitan's fp8 converters as the stack's torchtitan @e347b1e5e takes them (issue 22).

At that commit (pytorch/torchtitan, the last TOML-configured one) the float8 and MX linear
converters are registered as "quantize.linear.float8" and "quantize.linear.mx"
(components/quantization/float8.py l. 238, mx.py l. 171; any other name is a KeyError in
protocols/model_converter.py l. 62) and their settings sit in JobConfig.quantize.linear.float8 /
.mx (config/job_config.py l. 731-836); a top-level [float8] / [mx] table is "Invalid field
names" (config/manager.py l. 160-168). That layout came with 8a2686c4a (2025-09-30, #1763);
before 5b5d46856 (2025-09-26) it was converters "float8" / "mx" with [float8] / [mx]. The export
wrote the old layout (every fp8 export unrunnable); the reader takes either layout, not a mix.

mx.py MXLinearConverter l. 46-52 asserts no TP under torch.compile of the model: rule
TORCHTITAN_MX_TP_COMPILE (code 53). deepseek_v3's 'float8 tensorwise TP is not tested'
(models/deepseek_v3/infra/parallelize.py l. 76-87) tests `"float8" in job_config.model.converters`,
a name @e347b1e5e does not register: it never fires on a file torchtitan starts, so no rule."""

from __future__ import annotations

import json
import tomllib

import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

from conftest import assert_one_error

# transcribed from pytorch/torchtitan @e347b1e5e torchtitan/config/job_config.py (l. 1000-1025 JobConfig,
# l. 721-836 Compile / Float8Linear / MXLinear) and the converter registry (float8.py l. 238-239, mx.py l. 171-172)
JOBCONFIG_SECTIONS = {"job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training", "parallelism",
                      "checkpoint", "activation_checkpoint", "compile", "quantize", "comm", "memory_estimation",
                      "fault_tolerance", "experimental", "validation", "debug"}
FLOAT8_LINEAR = {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "recipe_name",
                 "filter_fqns", "emulate"}
FLOAT8_RECIPES = {"tensorwise", "rowwise", "rowwise_with_gw_hp"}  # Literal[...] | None
MX_LINEAR = {"mxfp8_dim1_cast_kernel_choice", "recipe_name", "filter_fqns"}
COMPILE = {"enable", "components", "backend"}
REGISTERED = {"quantize.linear.float8", "quantize.grouped_mm.float8", "quantize.linear.mx", "quantize.grouped_mm.mx"}

BASE = dict(model="llama3-8b", seq_len=8192, stack="torchtitan", precision="fp8")


def _check_e347(text: str) -> dict:
    """What ConfigManager and build_model_converters @e347b1e5e check of the fp8 parts, on the text."""
    d = tomllib.loads(text)
    assert set(d) <= JOBCONFIG_SECTIONS, set(d) - JOBCONFIG_SECTIONS
    assert set(d["compile"]) <= COMPILE
    assert set(d["quantize"]) == {"linear"}
    (conv,) = d["model"]["converters"]
    assert conv in REGISTERED
    lin = d["quantize"]["linear"]
    assert set(lin) == {conv.split(".")[-1]}  # the converter's own table, nothing else
    body = lin[conv.split(".")[-1]]
    assert set(body) <= (FLOAT8_LINEAR if conv.endswith("float8") else MX_LINEAR)
    if "recipe_name" in body and conv.endswith("float8"):
        assert body["recipe_name"] in FLOAT8_RECIPES
        assert "enable_fsdp_float8_all_gather" not in body  # float8.py l. 65-69 asserts it off with a recipe_name
    return d


@pytest.mark.parametrize("kw, conv, body", [
    (dict(gpus=32, hardware="h200-sxm", global_batch=64, sharding="fsdp"), "quantize.linear.float8",
     {"enable_fsdp_float8_all_gather": True, "filter_fqns": ["output"]}),
    (dict(gpus=32, hardware="h200-sxm", global_batch=64, sharding="fsdp", fp8_recipe="rowwise"), "quantize.linear.float8",
     {"recipe_name": "rowwise", "filter_fqns": ["output"]}),
    (dict(gpus=8, hardware="b200", global_batch=64, tp=1, fp8_recipe="mxfp8"), "quantize.linear.mx",
     {"recipe_name": "mxfp8_cublas", "filter_fqns": ["output"]}),
])
def test_export_writes_the_quantize_layout_and_reads_back(tmp_path, kw, conv, body):
    plan = resolved_plan(Job(**BASE, **kw))
    text, _ = export_plan(plan, "torchtitan")
    d = _check_e347(text)
    assert d["model"]["converters"] == [conv]
    assert d["quantize"]["linear"][conv.split(".")[-1]] == body
    assert "\n[float8]" not in text and "\n[mx]" not in text
    p = tmp_path / "e.toml"
    p.write_text(text)
    job = load_trainer_config(p, model="llama3-8b").job
    assert (job["precision"], job["fp8_recipe"]) == ("fp8", kw.get("fp8_recipe", "tensorwise"))


TITAN = '[model]\nname = "llama3"\nflavor = "8B"\nconverters = {conv}\n{sec}[parallelism]\ndata_parallel_shard_degree = 8\n'


@pytest.mark.parametrize("conv, sec, needles", [
    ('["float8"]', '[quantize.linear.float8]\nrecipe_name = "rowwise"\n', ('converters "float8"', "[quantize.linear.float8]")),
    ('["quantize.linear.float8"]', '[float8]\nrecipe_name = "rowwise"\n', ("[float8]", 'converters "quantize.linear.float8"')),
    ('["mx"]', "[quantize.linear.mx]\nfilter_fqns = []\n", ('converters "mx"', "[quantize.linear.mx]")),
    ("[]", "[float8]\nfilter_fqns = []\n[quantize.linear.float8]\nfilter_fqns = []\n", ("[float8]", "[quantize.linear.float8]")),
])
def test_a_file_mixing_the_layouts_is_refused(cli, tmp_path, conv, sec, needles):
    """No torchtitan reads such a file: before 2025-09-30 there is no [quantize] table, since then no
    "float8" converter nor [float8] table."""
    p = tmp_path / "mix.toml"
    p.write_text(TITAN.format(conv=conv, sec=sec))
    r = cli("explain", str(p), "--hardware", "h100-sxm", "--gpus", "8")
    assert_one_error(r, *needles, "no torchtitan reads both")


@pytest.mark.parametrize("conv, sec", [
    ('["float8"]', '[float8]\nrecipe_name = "rowwise"\n'),
    ('["quantize.linear.float8"]', '[quantize.linear.float8]\nrecipe_name = "rowwise"\n'),
])
def test_either_layout_alone_reads_the_same(tmp_path, conv, sec):
    p = tmp_path / "one.toml"
    p.write_text(TITAN.format(conv=conv, sec=sec))
    job = load_trainer_config(p, gpus=8).job
    assert (job["precision"], job["fp8_recipe"]) == ("fp8", "rowwise")


# ------------------------------------------------------------------ TORCHTITAN_MX_TP_COMPILE
MX = dict(BASE, gpus=64, hardware="b200", global_batch=256, fp8_recipe="mxfp8", sharding="fsdp")


def test_mx_with_tp_under_compile_is_refused():
    assert CODES["TORCHTITAN_MX_TP_COMPILE"] == CODES["TORCHTITAN_FSDP_MESH"] + 1 == 53
    with pytest.raises(PlannerError) as e:
        resolve(Job(**MX, tp=2, sequence_parallel=True, torch_compile=True))
    assert "breaks start-up rule TORCHTITAN_MX_TP_COMPILE of torchtitan" in e.value.message
    assert "mx.py" in e.value.message and "@e347b1e5e" in e.value.message and "--no-compile" in e.value.hint
    # its neighbours run: tp 2 uncompiled, tp 1 compiled, tensorwise at tp 2 compiled
    for kw in (dict(tp=2, sequence_parallel=True, torch_compile=False), dict(tp=1, torch_compile=True),
               dict(tp=2, sequence_parallel=True, torch_compile=True, fp8_recipe="tensorwise")):
        resolve(Job(**{**MX, **kw}))


def test_fit_tries_mxfp8_at_tp_only_uncompiled(cli):
    """fit over the stack's recipes on B200 (compile on, not searched): mxfp8 is a variant beside
    tensorwise; at tp > 1 it is no longer picked (fit's top row at tp 2 was mxfp8 compiled, and
    explain of it then broke the rule). Pinned to mxfp8 at tp 2 only --no-compile fits."""
    args = ["--model", "llama3-70b", "--gpus", "64", "--hardware", "b200", "--stack", "torchtitan", "--precision", "fp8"]
    r = cli("fit", *args, "--tp", "2", "--top", "40", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = [x["plan"] for x in json.loads(r.stdout)]
    assert rows and all(not (p["fp8_recipe"] == "mxfp8" and p["torch_compile"] and p["tp"] > 1) for p in rows)
    r = cli("fit", *args, "--tp", "2", "--fp8-recipe", "mxfp8", "--top", "1")
    assert r.exit_code == 1 and "TORCHTITAN_MX_TP_COMPILE" in r.stderr  # no plan: every candidate counted under the rule
    r = cli("fit", *args, "--tp", "2", "--fp8-recipe", "mxfp8", "--no-compile", "--top", "1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert (row["plan"]["fp8_recipe"], row["plan"]["torch_compile"], row["plan"]["tp"]) == ("mxfp8", False, 2)


def test_deepseek_v3_float8_tensorwise_with_tp_has_no_rule():
    """torchtitan @e347b1e5e runs it (the NotImplementedError tests a converter name it does not
    register): resolved, and its export names the registered converter."""
    job = Job(model="deepseek-v3", gpus=512, hardware="h100-sxm", stack="torchtitan", global_batch=1024, seq_len=4096,
              tp=2, sequence_parallel=True, pp=1, sharding="fsdp", ep=64, etp=1, precision="fp8", fp8_recipe="tensorwise")
    resolve(job)
    text, _ = export_plan(resolved_plan(job), "torchtitan")
    assert tomllib.loads(text)["model"]["converters"] == ["quantize.linear.float8"]
