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
GROUPED_MM = {"float8": {"fqns"}, "mx": {"recipe_name", "fqns"}}
REGISTERED = {"quantize.linear.float8", "quantize.grouped_mm.float8", "quantize.linear.mx", "quantize.grouped_mm.mx"}

BASE = dict(model="llama3-8b", seq_len=8192, stack="torchtitan", precision="fp8")


def _check_e347(text: str) -> dict:
    """What ConfigManager and build_model_converters @e347b1e5e check of the fp8 parts, on the text."""
    d = tomllib.loads(text)
    assert set(d) <= JOBCONFIG_SECTIONS, set(d) - JOBCONFIG_SECTIONS
    assert set(d["compile"]) <= COMPILE
    assert set(d["quantize"]) <= {"linear", "grouped_mm"}
    conv, *grouped = d["model"]["converters"]
    assert conv in REGISTERED and ".linear." in conv
    # the routed experts' grouped converter (step.py [16]) of the same type only (one quantization type per job,
    # components/quantization/__init__.py l. 37-55), its own table, job_config.py Float8GroupedMM l. 756-764 /
    # MXGroupedMM l. 794-811
    assert grouped in ([], [conv.replace(".linear.", ".grouped_mm.")])
    assert set(d["quantize"].get("grouped_mm", {})) == {g.split(".")[-1] for g in grouped}
    for g in grouped:
        assert set(d["quantize"]["grouped_mm"][g.split(".")[-1]]) <= GROUPED_MM[g.split(".")[-1]]
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


@pytest.mark.parametrize("conv, needles", [
    # torchtitan's TOML era registers no "nvfp4" converter (git log -G 'register_model_converter\(' to
    # @9810191bb~1): build_model_converters' _registry_model_converter_cls[name] is a KeyError at start-up; it was
    # listed among the settings with no effect and the job priced in bf16 (issue 23: never a silent fall-back)
    ('["nvfp4"]', ("'nvfp4' is not a converter torchtitan registers",
                   "valid: float8, mx, quantize.linear.float8, quantize.linear.mx, quantize.grouped_mm.float8, "
                   "quantize.grouped_mm.mx")),
    ('["quantize.linear.nvfp4"]', ("'quantize.linear.nvfp4' is not a converter",)),
    # 5b5d46856 (2025-09-26) to 8a2686c4a (2025-09-30): registered, but their [quantize.dense] tables are not read
    ('["quantize.dense.float8"]', ("2025-09-26 to 2025-09-30", "write 'quantize.linear.float8'")),
    ('["quantize.linear.float8", "quantize.moe.float8"]', ("'quantize.moe.float8'", "'quantize.grouped_mm.float8'")),
])
def test_an_unregistered_converter_is_refused(cli, tmp_path, conv, needles):
    p = tmp_path / "conv.toml"
    p.write_text(TITAN.format(conv=conv, sec=""))
    assert_one_error(cli("explain", str(p), "--hardware", "b200", "--gpus", "8"), *needles)


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


# the pipeline ends not counted as layers (torchtitan's default since branch ttends counts them): these tests are about
# the mxfp8 / compile rule, and their figures (the even 20-layer stages below) were derived for the even split
FIT_MX = ["--model", "llama3-70b", "--gpus", "64", "--hardware", "b200", "--stack", "torchtitan", "--precision", "fp8",
          "--no-account-for-embedding", "--no-account-for-loss"]


def _searched(stderr: str) -> str:
    """fit's counts line without its wall time."""
    line = next(x for x in stderr.splitlines() if "searched" in x)
    return line.split(" in ")[0] + line.split(" s:")[1]


def test_fit_never_ranks_mxfp8_compiled_at_tp(cli):
    """fit over the stack's recipes on B200: mxfp8 is a variant beside tensorwise; at tp > 1 it is never
    ranked compiled (fit's top row at tp 2 was mxfp8 compiled, and explain of it then broke the rule)."""
    r = cli("fit", *FIT_MX, "--tp", "2", "--top", "40", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = [x["plan"] for x in json.loads(r.stdout)]
    assert rows and all(not (p["fp8_recipe"] == "mxfp8" and p["torch_compile"] and p["tp"] > 1) for p in rows)


def test_fit_searches_mxfp8_at_tp_uncompiled(cli):
    """Issue 22: with compile left to the search, mxfp8 at tp 2 (every candidate refused compiled by
    TORCHTITAN_MX_TP_COMPILE: fit found no plan) is searched uncompiled (space.uncompiled_choices /
    uncompiled_space): the rows and counts are a pinned --no-compile search's, byte for byte."""
    r = cli("fit", *FIT_MX, "--tp", "2", "--fp8-recipe", "mxfp8", "--top", "5", "--format", "json")
    assert r.exit_code == 0, r.stderr
    pinned = cli("fit", *FIT_MX, "--tp", "2", "--fp8-recipe", "mxfp8", "--no-compile", "--top", "5", "--format", "json")
    assert pinned.exit_code == 0, pinned.stderr
    assert r.stdout == pinned.stdout and _searched(r.stderr) == _searched(pinned.stderr)
    # every candidate the rule refused compiled runs uncompiled: none is counted under the rule
    assert "TORCHTITAN_MX_TP_COMPILE" not in r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 5
    assert all((x["plan"]["fp8_recipe"], x["plan"]["torch_compile"], x["plan"]["tp"]) == ("mxfp8", False, 2) for x in rows)
    p = rows[0]["plan"]
    assert (p["cp"], p["pp"], p["dp"], p["vpp"], p["micro_batch"], p["sharding"], p["recompute"]) == (
        2, 4, 4, 1, 1, "fsdp", "none")
    # 88.7686 before GEMM tile quantization (compute.wave_efficiency: M N / (waves x SMs x tm x tn)). At tp 2, cp 2 a
    # micro-batch is T = 8192 / 2 = 4,096 tokens; the layers' GEMMs (N = 5,120, 8,192, 28,672, 8,192) fill whole tiles
    # either way, so only the output layer moves: [4096, 128256 / 2 = 64128] x K 8192, bf16 (the float8 filter keeps
    # the output layer), on 148 SMs. 128 x 256 tiles: 32 x ceil(250.5) = 8,032 tiles, 55 waves: 8,032 / 8,140 =
    # 0.98673 before, now 262,668,288 / (55 x 148 x 32,768) = 0.98477 (the last column of tiles half empty); 256 x
    # 128 tiles: 16 x 501 = 8,016 in 55 waves, 0.98477 both ways. So 4.3036e12 FLOP / (1745 x 0.85 TFLOP/s) goes
    # from / 0.98673 = 2.94045 ms to / 0.98477 = 2.94632 ms, x 3 (forward and backward, step.head_time) x 512
    # micro-batches on the last stage: compute +9.015 ms; with the bubble's +0.053 ms and the exposed DP
    # traffic's -0.010 ms the step 88.7686 -> 88.7777 s. The critical last stage then sends one exchange of 4,096 x
    # 8,192 x 2 B / tp 2 = 33,554,432 B a micro-batch over the inter-node PP link, not two (torch.distributed.pipelining
    # Schedule1F1B batches a send with the receive from the same neighbour, an end stage's other batch empty: stack_db
    # torchtitan.yaml pipeline_p2p_batched): pp_comm_s 0.74130 -> 0.37065 s (512 x 0.72392 ms); the bubble keeps the
    # fill's and drain's hops (3 micro-batches x the lost exchange, pp_fill_drain_s 2.17 ms, step.py [31]): the step
    # 88.7777 -> 88.4070 s. Each stage's DP traffic then hid behind its own passes (step.dp_windows, issue 22 critdp):
    # FSDP2 under PP reduce-scatters once a step, behind the last micro-batch's backward (stacks.sharding_traits
    # keep_pp); the first stage's (9.08204e9 parameters a GPU, its 0.2550 s of traffic) behind its own 0.10347 s
    # backward, not the critical last stage's 0.11024 s (with two thirds of the output layer). The reduce-scatter
    # outlasts either, so the exposure grows by the window's difference less the stack's exposed share 0.189 of it:
    # (0.11024 - 0.10347) x 0.811 = 5.49 ms, and the first stage is the step end's (0.10544 s against the last's
    # 0.09995 s): dp_comm_exposed_s 0.09995 -> 0.10544 s, the step 88.4070 -> 88.4125 s. The critical last stage's
    # output layer and loss TP collectives (step.py [36], branch headsp: DTensor's synchronous all-gather of the output
    # layer's input and reduce-scatter of its gradient, loss_parallel's three all-reduces of 4 T B, over tp 2) then
    # added tp_head_s 0.06039 s, with its share of the bubble's micro-batches: the step 88.4125 -> 88.4733 s
    assert rows[0]["time"]["pp_comm_s"] == pytest.approx(0.370649, rel=1e-5)
    assert rows[0]["time"]["pp_fill_drain_s"] == pytest.approx(3 * 0.370649 / 512, rel=1e-5)
    assert rows[0]["time"]["dp_comm_exposed_s"] == pytest.approx(0.09995 + (0.11024 - 0.10347) * (1 - 0.189), rel=1e-3)
    assert rows[0]["time"]["tp_head_s"] == pytest.approx(0.060392, rel=1e-4)
    assert rows[0]["time"]["step_s"] == pytest.approx(88.4733, rel=1e-5)
    # 128.5357 before SDPA's fp32 logsumexp was priced (planner/layers/attention.py [ls]): 20 layers x 4 micro-batches in
    # flight on the first stage x 4,096 local tokens x 32 heads a rank x 4 B = 40 MiB
    # and since branch nvlsmem NCCL's NVLS buffers outside the allocator (memory.py [nv]): one 8-rank communicator on
    # H100, 16 channels x 2 x 1 MiB x 8 heads + 2 MiB credits = 258 MiB
    nvls = 16 * 2 * 2**20 * 8 + 2 * 2**20
    assert rows[0]["memory"]["terms"]["nvls_buffers"] == nvls
    assert rows[0]["memory"]["total_bytes"] / 2**30 == pytest.approx(128.5357 + 20 * 4 * 4096 * 32 * 4 / 2**30
                                                                     + nvls / 2**30, rel=1e-5)


@pytest.mark.parametrize("recipe", [None, "mxfp8"])
def test_uncompiled_twins_run_only_where_compiled_is_refused(recipe):
    """space.uncompiled_choices: each compiled option row's compile-off twin, none for async TP (it needs
    compile: stack_db torchtitan overlap.tp_comm_overlap_needs_compile); uncompiled_space keeps a twin only
    where some valid row refuses it compiled, and it runs exactly there (tp > 1 for mxfp8). With the recipe
    pinned to mxfp8 variant 0 is refused at tp 2: those rows are the uncompiled space, variant 0 its twin."""
    import numpy as np

    from planner.precisions import FP8_RECIPE_CODES as R
    from planner.space import OK, SpaceOptions, build_space, settings_for, uncompiled_choices, uncompiled_space, variant_choices

    job = Job(model="llama3-70b", gpus=64, hardware="b200", stack="torchtitan", precision="fp8", fp8_recipe=recipe)
    s, gbs, seq, _ = settings_for(job)
    v = variant_choices(s.stack, job, "", s.hardware)
    t = uncompiled_choices(s.stack, job, v)
    recipes = [R["mxfp8"]] if recipe else [R["tensorwise"], R["rowwise"], R["mxfp8"]]
    # (tpo, compile, dpo, f8r, fge): no TP-overlap twin; fge 0, torchtitan's rule (a dense model: not searched)
    assert t.tolist() == [[0, 0, 1, r, 0] for r in recipes]
    assert uncompiled_choices(s.stack, job.model_copy(update={"torch_compile": True}), v).size == 0  # pinned
    space = build_space(s, gbs, seq, job.precision, SpaceOptions(tp=(1, 2)), np.concatenate([v, t]))
    space.uncompiled = tuple(range(len(v), len(v) + len(t)))
    first, second = uncompiled_space(space)
    ok = first.codes == OK
    if recipe is None:  # variant 0 (tensorwise compiled) runs everywhere: one space, the mxfp8 twin at tp 2 alone
        assert second is None and first.variants[list(first.uncompiled)].tolist() == [[0, 0, 1, R["mxfp8"], 0]]
        (i,) = first.uncompiled
        assert np.array_equal(first.variant_ok(first.base, i)[ok], first.base.tp[ok] > 1)
        assert first.reasons == space.reasons
        return
    assert first.uncompiled == () and set(first.base.tp[ok].tolist()) == {1}
    assert second.variants.tolist() == [[0, 0, 1, R["mxfp8"], 0]] and second.uncompiled == (0,)
    assert set(second.base.tp.tolist()) == {2} and set(second.base.compile.tolist()) == {0}
    code = CODES["TORCHTITAN_MX_TP_COMPILE"]
    assert code in space.reasons and code not in first.reasons  # every refused row runs uncompiled
    assert sum(first.reasons.values()) == sum(space.reasons.values()) - space.reasons[code]


def test_uncompiled_row_is_priced_uncompiled():
    """The row is the compile-off plan's explain, not the compiled plan's: the same plan compiled (which
    torchtitan refuses; priced here directly) saves less and runs faster. The activations differ by the
    eager RMSNorm's extra saved bytes alone (stack_db torchtitan kernels.norm_saved_extra 4 B an element,
    compiled_kernels 0): 2 norms a layer x 2,048 tokens a rank (8,192 / cp 2 / tp 2, SP) x h 8,192 x 4 B
    = 128 MiB a layer and micro-batch, x 20 layers on the first stage (80 / pp 4) x 4 micro-batches in
    flight there (1F1B, pp 4) = 10 GiB."""
    import copy

    from planner.explain import evaluate, to_json
    from planner.search import fit, row_job
    from planner.space import SpaceOptions

    job = Job(model="llama3-70b", gpus=64, hardware="b200", stack="torchtitan", precision="fp8", fp8_recipe="mxfp8")
    row = fit(job, opts=SpaceOptions(tp=(2,)), top=1).rows[0]
    settings, plan, _ = resolve(row_job(job, row))
    assert int(plan.compile) == 0
    off = to_json(settings, plan, evaluate(settings, plan))
    compiled = copy.copy(plan)
    compiled.compile = 1
    on = to_json(settings, compiled, evaluate(settings, compiled))
    assert off["time"] == row["time"] and off["memory"] == row["memory"]
    assert off["memory"]["activations_bytes"] - on["memory"]["activations_bytes"] == 2 * 2048 * 8192 * 4 * 20 * 4 == 10 * 2**30
    assert off["memory"]["total_bytes"] - on["memory"]["total_bytes"] == 10 * 2**30
    assert off["time"]["compute_s"] > on["time"]["compute_s"] and off["time"]["step_s"] > on["time"]["step_s"]


def test_uncompiled_row_says_so_and_exports(cli, tmp_path):
    """The table names compile off in the row's stack options and why; its explain command carries
    --no-compile and reproduces the row; the export writes [compile] enable = false."""
    r = cli("fit", *FIT_MX, "--tp", "2", "--fp8-recipe", "mxfp8", "--top", "2")
    assert r.exit_code == 0, r.stderr
    assert "no compile, fp8 mxfp8" in r.stdout
    assert "no compile (rows 1, 2): torch.compile off" in r.stdout and "TORCHTITAN_MX_TP_COMPILE" in r.stdout
    cmd = r.stdout.split("row 1 in full: planner explain ")[1].split("\n")[0].split()
    assert "--no-compile" in cmd
    e = cli("explain", *cmd, "--format", "json")
    assert e.exit_code == 0, e.stderr
    row = json.loads(cli("fit", *FIT_MX, "--tp", "2", "--fp8-recipe", "mxfp8", "--top", "1", "--format", "json").stdout)[0]
    assert json.loads(e.stdout)["time"] == row["time"]
    x = cli("fit", *FIT_MX, "--tp", "2", "--fp8-recipe", "mxfp8", "--export", "torchtitan")
    assert x.exit_code == 0, x.stderr
    toml = tomllib.loads(x.stdout)
    assert toml["compile"]["enable"] is False and toml["model"]["converters"] == ["quantize.linear.mx"]
    assert toml["parallelism"]["tensor_parallel_degree"] == 2


def test_pinned_compile_stays_pinned(cli, tmp_path):
    """--compile pins it: mxfp8 at tp 2 has no plan (every candidate counted under the rule), as before; a
    saved fit row explained with --compile (the flag beats the row's file) is refused, naming the rule."""
    r = cli("fit", *FIT_MX, "--tp", "2", "--fp8-recipe", "mxfp8", "--compile", "--top", "1")
    assert r.exit_code == 1 and "TORCHTITAN_MX_TP_COMPILE" in r.stderr and "7,434" in r.stderr
    rows = tmp_path / "rows.json"
    f = cli("fit", *FIT_MX, "--tp", "2", "--fp8-recipe", "mxfp8", "--top", "1", "--format", "json")
    rows.write_text(f.stdout)
    e = cli("explain", "--from-fit", str(rows), "--row", "1", "--compile")
    assert e.exit_code == 2 and "TORCHTITAN_MX_TP_COMPILE" in e.stderr
    assert cli("explain", "--from-fit", str(rows), "--row", "1").exit_code == 0


def test_no_plan_hint_counts_the_uncompiled_plans(cli):
    """The no-plan hint's GPU counts with valid plans (search.nearest_working) count a plan that runs
    uncompiled as fit searches it: 48 and 64 beside 63 (as with --no-compile); none with --compile. (54 was
    one before TORCHTITAN_FP32: its plans are tp 2 x pp 27 at dp 1, no FSDP, which torchtitan trains in fp32.)"""
    args = [("63" if a == "64" else a) for a in FIT_MX] + ["--tp", "2", "--fp8-recipe", "mxfp8"]
    assert "63" in args and "64" not in args
    for pin in ((), ("--no-compile",)):
        r = cli("fit", *args, *pin)  # --tp 2 cannot divide 63 GPUs: bad input (exit 2, audit2), the same suggestion
        assert r.exit_code == 2 and "--tp 2 does not divide --gpus 63" in r.stderr, r.stderr
        assert "GPU counts near 63 with valid plans: 48, 64" in r.stderr, r.stderr
    r = cli("fit", *args, "--compile")
    assert r.exit_code == 2 and "GPU counts near" not in r.stderr


def test_deepseek_v3_float8_tensorwise_with_tp_has_no_rule():
    """torchtitan @e347b1e5e runs it (the NotImplementedError tests a converter name it does not
    register): resolved, and its export names the registered converter."""
    job = Job(model="deepseek-v3", gpus=512, hardware="h100-sxm", stack="torchtitan", global_batch=1024, seq_len=4096,
              tp=2, sequence_parallel=True, pp=1, sharding="fsdp", ep=64, etp=1, precision="fp8", fp8_recipe="tensorwise",
              attention_kernel="flex")  # the 671B flavor's FlexAttention (the export names the flavor)
    resolve(job)
    text, _ = export_plan(resolved_plan(job), "torchtitan")
    assert tomllib.loads(text)["model"]["converters"] == ["quantize.linear.float8"]
