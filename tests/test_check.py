"""`planner check` (exit codes, overflow, checked suggestions, time gates) and `planner schema`.

Figures derived by hand here:
- usable memory on an H100 SXM with the default 10% headroom is 0.9 x 79.09 GiB = 71.18 GiB:
  the HBM is what the device reports to CUDA (hardware_db hbm_visible_GiB 79.09, torchtitan
  #1789's 73.32 GiB = 92.70%), not the datasheet's 80 GB = 80e9 B = 74.51 GiB (which gave
  0.9 x 80e9 = 72e9 B = 67.06 GiB); an H800 entry has no measurement and keeps the datasheet's;
- mixed16 model states without sharding: Adam m, v (8 B/param) = 2 x fp32 master (4 B)
  = 4 x bf16 weights (2 B) (ZeRO sec. 3.1, the seed sec. 1.2);
- ZeRO-2 over dp = 8 divides the gradients, master weights and Adam states by 8 and leaves
  the weights and activations: total drops by 7/8 of (gradients + master + Adam);
- Llama 3 70B has 70,553,706,496 parameters (model_zoo/llama3-70b.yaml, from the released
  checkpoint's size); 16 B each over 8 GPUs is 141.1 GB per GPU even fully sharded, more
  than the 72 GB usable, so no change on 8 H100s can make it fit.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from planner.check import Change, Evaluated, Gates, Suggestion, json_schema, ladders, rank
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job

GiB = 2.0**30
HBM_H100 = 79.09 * GiB  # hbm_visible_GiB (measured), 84.92e9 B
USABLE_H100 = 0.9 * HBM_H100  # 71.18 GiB
FIT = "model: llama3-8b\ngpus: 8\ntp: 8\n"
NOFIT = "model: llama3-70b\ngpus: 64\ntp: 8\n"  # 154 GiB: fixable by one change (sharding)
PAIR = "model: llama3-70b\ngpus: 64\n"  # fixable only by two changes together
HOPELESS = "model: llama3-70b\ngpus: 8\n"  # 1,129 GB of model states on 8 x 80 GB


def _explain_json(**fields) -> dict:
    settings, plan, _ = resolve(Job(**fields))
    return to_json(settings, plan, evaluate(settings, plan))




@pytest.fixture(scope="module")
def run():
    from planner.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def jobs(tmp_path):
    """Write job files: jobs(name=text, ...) -> {name: path}."""
    def write(**texts):
        out = {}
        for name, text in texts.items():
            p = tmp_path / f"{name}.yaml"
            p.write_text(text)
            out[name] = p
        return out
    return write


def _cli_options(changes: dict) -> list[str]:
    """A suggestion's `changes` as `planner explain` options (tests avoid hsdp)."""
    args = []
    for k, v in changes.items():
        assert v is not None, changes
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


def _errors_only(r, *needles):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith(("error: ", "hint: ", "warning: ")) for ln in lines), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


# ---------------------------------------------------------------------------- verdicts
def test_fitting_job_exits_0(run, jobs):
    p = jobs(fit=FIT)["fit"]
    r = run("check", p)
    assert r.exit_code == 0, r.output
    line = r.stdout.splitlines()[0]
    assert line.startswith(f"PASS {p}: ")
    assert "of 71.2 GiB usable" in line and "of 79.1 GiB HBM (measured, as CUDA reports it)" in line  # 0.9 x 79.09
    m = _explain_json(model="llama3-8b", gpus=8, tp=8)["memory"]
    total = m["total_bytes"]
    assert f"{total / GiB:,.1f} GiB of" in line
    # the gate is the allocator's reserved peak plus what lives outside it: the reserve (1 GiB by default) and
    # the TP group's NCCL NVLS buffers (8 ranks in the node: 16 x 2 x 1 MiB x 8 + 2 MiB = 258 MiB, memory.py [nv]);
    # the fragmentation band's top (memory.py [13]: the allocated peak x 1.45; megatron: allocated = reserved)
    outside = GiB + 258 * 2**20
    assert m["total_bytes"] - m["reserved_bytes"] == outside
    assert m["reserved_high_bytes"] == pytest.approx(1.45 * (total - outside))
    assert (f"(reserved peak {(total - outside) / GiB:,.1f} GiB (band to {1.45 * (total - outside) / GiB:,.1f}) "
            f"+ 1.3 GiB outside the allocator; ") in line
    assert "does not fit" not in r.stdout


def test_non_fitting_job_names_overflow_and_terms(run, jobs):
    p = jobs(nofit=NOFIT)["nofit"]
    r = run("check", p)
    assert r.exit_code == 1, r.output
    ref = _explain_json(model="llama3-70b", gpus=64, tp=8)
    m, t = ref["memory"], ref["memory"]["terms"]
    assert m["usable_bytes"] == pytest.approx(USABLE_H100, rel=1e-15)
    over = m["total_bytes"] - USABLE_H100
    assert over > 0
    assert r.stdout.startswith(f"FAIL {p}: ")
    assert f"exceeds the usable 71.2 GiB by {over / GiB:,.1f} GiB" in r.stdout
    # unsharded mixed16 states: Adam 8 B = 2 x master 4 B = 4 x weights 2 B per parameter
    assert t["adam"] == pytest.approx(2 * t["master_weights"], rel=1e-12)
    assert t["adam"] == pytest.approx(4 * t["weights"], rel=1e-12)
    # the terms are listed largest first, with their GiB
    order = [r.stdout.index(label) for label in ("Adam m and v", "fp32 master weights", "layer activations")]
    assert order == sorted(order)
    assert f"{t['adam'] / GiB:9,.2f} GiB" in r.stdout
    assert "changes that pass" in r.stdout


def test_suggestions_are_rechecked_by_explain(run, jobs):
    p = jobs(nofit=NOFIT)["nofit"]
    r = run("check", p, "--format", "json")
    assert r.exit_code == 1
    [res] = json.loads(r.stdout)
    assert res["verdict"] == "fail" and res["file"] == str(p)
    assert res["overflow_bytes"] == pytest.approx(res["memory"]["total_bytes"] - USABLE_H100, rel=1e-12)
    sugg = res["suggestions"]
    assert sugg
    for s in sugg:  # each one, run through `planner explain` independently, fits
        e = run("explain", p, *_cli_options(s["changes"]), "--format", "json")
        assert e.exit_code == 0, e.stderr
        ej = json.loads(e.stdout)
        assert ej["memory"]["fits"] is True
        assert ej["memory"]["total_bytes"] == pytest.approx(s["total_bytes"], rel=1e-12)
        assert s["fraction_of_hbm"] == pytest.approx(s["total_bytes"] / HBM_H100, rel=1e-12)
    # the sharding suggestion is the lowest ZeRO stage that fits: the one below it does not
    [shard] = [s for s in sugg if set(s["changes"]) == {"sharding"}]
    level = shard["changes"]["sharding"]
    assert level in ("zero1", "zero2", "fsdp")
    below = {"zero1": "none", "zero2": "zero1", "fsdp": "zero2"}[level]
    assert _explain_json(model="llama3-70b", gpus=64, tp=8, sharding=below)["memory"]["fits"] is False
    if level == "zero2":  # hand-derived: ZeRO-2 over dp=8 keeps 1/8 of grads, master and Adam, and adds
        # Megatron-FSDP optim_grads' queue of unsharded gradient buckets (memory.py [rs], by hand in
        # tests/test_megatron_fsdp_queue.py)
        t = res["memory"]["terms"]
        queue = _explain_json(model="llama3-70b", gpus=64, tp=8, sharding="zero2")["memory"]["terms"]["zero2_reduce_input"]
        assert queue > 0 and t["zero2_reduce_input"] == 0
        expect = res["memory"]["total_bytes"] - 7 / 8 * (t["gradients"] + t["master_weights"] + t["adam"]) + queue
        assert shard["total_bytes"] == pytest.approx(expect, rel=1e-12)
    # ranking: by predicted step time
    steps = [s["step_s"] for s in sugg]
    assert steps == sorted(steps)


def test_pairs_only_when_no_single_change_fits(run, jobs):
    p = jobs(pair=PAIR)["pair"]
    r = run("check", p, "--format", "json")
    assert r.exit_code == 1
    sugg = json.loads(r.stdout)[0]["suggestions"]
    assert sugg
    for s in sugg:
        e = json.loads(run("explain", p, *_cli_options(s["changes"]), "--format", "json").stdout)
        assert e["memory"]["fits"] is True
        singles = {k: v for k, v in s["changes"].items() if k != "dp"}
        assert len(singles) == 2
        for k, v in singles.items():  # minimal: neither change alone fits
            alone = json.loads(run("explain", p, *_cli_options({k: v}), "--format", "json").stdout)
            assert alone["memory"]["fits"] is False, (s["description"], k)


def test_hopeless_job_says_no_change_fits(run, jobs):
    p = jobs(hopeless=HOPELESS)["hopeless"]
    r = run("check", p, "--format", "json")
    assert r.exit_code == 1
    [res] = json.loads(r.stdout)
    assert res["suggestions"] == []
    assert res["params"]["total"] == 70_553_706_496
    # why: the model states alone, sharded over all 8 GPUs, exceed what is usable
    assert res["params"]["total"] * 16 / 8 > USABLE_H100
    r = run("check", p)
    assert "no single change, nor any pair of changes" in r.stdout
    assert "more TP (up to the NVLink domain), more CP (where the stack runs it), more PP" in r.stdout


def test_worst_exit_fail_beats_pass(run, jobs):
    j = jobs(fit=FIT, nofit=NOFIT)
    r = run("check", j["fit"], j["nofit"])
    assert r.exit_code == 1
    assert f"PASS {j['fit']}" in r.stdout and f"FAIL {j['nofit']}" in r.stdout
    assert "2 jobs: 1 pass, 1 fail, 0 invalid" in r.stdout


def test_headroom_override(run, jobs):
    p = jobs(fit=FIT)["fit"]
    r = run("check", p, "--headroom", "0.75", "--format", "json")
    assert r.exit_code == 1  # 21 GiB > 0.25 x 79.09 GiB = 19.8 GiB
    [res] = json.loads(r.stdout)
    assert res["memory"]["usable_bytes"] == pytest.approx(0.25 * HBM_H100, rel=1e-15)
    assert res["memory"]["headroom"] == 0.75
    _errors_only(run("check", p, "--headroom", "1.5"), "--headroom")
    assert run("check", p, "--headroom", "1.5").exit_code == 2


# ----------------------------------------------------------------------------- invalid
@pytest.mark.parametrize("name,text,needles", [
    ("bad_yaml", "model: llama3-8b\ngpus: 8\n  tp: [\n", ["invalid YAML", "line 3"]),
    ("unknown_field", "model: llama3-8b\ngpus: 8\ntensor_parallel: 2\n", ["tensor_parallel"]),
    ("degrees", "model: llama3-8b\ngpus: 64\ntp: 8\npp: 2\ndp: 8\n", ["tp=8", "pp=2", "dp=8", "128", "64"]),
    ("empty", "", ["expected a mapping"]),
    ("no_model", "gpus: 8\n", ["no model given"]),
    ("bad_heads", "model: llama3-8b\ngpus: 24\ntp: 3\n", ["tp=3", "32 attention heads"]),
])
def test_invalid_job_exits_2(run, jobs, name, text, needles):
    p = jobs(**{name: text})[name]
    r = run("check", p)
    assert r.exit_code == 2
    _errors_only(r, str(p), *needles)
    assert r.stderr.startswith(f"error: {p}")


def test_missing_file_exits_2(run, tmp_path):
    p = tmp_path / "nope.yaml"
    r = run("check", p)
    assert r.exit_code == 2
    _errors_only(r, str(p), "cannot read")


def test_mixed_list_checks_all_and_exits_2(run, jobs):
    j = jobs(fit=FIT, bad="model: llama3-8b\ngpus: 8\ntensor_parallel: 2\n", nofit=NOFIT)
    r = run("check", j["fit"], j["bad"], j["nofit"])
    assert r.exit_code == 2
    assert f"PASS {j['fit']}" in r.stdout and f"FAIL {j['nofit']}" in r.stdout
    assert f"error: {j['bad']}" in r.stderr
    assert "3 jobs: 1 pass, 1 fail, 1 invalid" in r.stdout
    r = run("check", j["fit"], j["bad"], j["nofit"], "--format", "json")
    assert r.exit_code == 2
    res = json.loads(r.stdout)
    assert [x["verdict"] for x in res] == ["pass", "error", "fail"]
    assert "tensor_parallel" in res[1]["error"]


# --------------------------------------------------------------------------- formats
def test_json_is_explain_plus_verdict(run, jobs):
    p = jobs(fit=FIT)["fit"]
    [res] = json.loads(run("check", p, "--format", "json").stdout)
    ex = json.loads(run("explain", p, "--format", "json").stdout)
    for k in ex:
        assert res[k] == ex[k], k
    assert res["verdict"] == "pass" and res["overflow_bytes"] == 0.0
    assert res["suggestions"] == [] and res["failures"] == []


def test_yaml_and_csv_formats(run, jobs):
    j = jobs(fit=FIT, nofit=NOFIT)
    r = run("check", j["fit"], j["nofit"], "--format", "yaml")
    assert r.exit_code == 1
    assert [x["verdict"] for x in yaml.safe_load(r.stdout)] == ["pass", "fail"]
    r = run("check", j["fit"], j["nofit"], "--format", "csv")
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and "verdict" in lines[0] and "sharding none ->" in lines[2]


# ------------------------------------------------------------------------- time gates
def test_time_gates(run, jobs):
    p = jobs(fit=FIT)["fit"]
    ref = _explain_json(model="llama3-8b", gpus=8, tp=8)
    step, u = ref["time"]["step_s"], ref["throughput"]["mfu"]
    assert run("check", p, "--max-step-time", str(2 * step)).exit_code == 0
    assert run("check", p, "--max-step-time", f"{2 * step}s", "--min-mfu", str(u / 2)).exit_code == 0
    r = run("check", p, "--max-step-time", str(step / 2))
    assert r.exit_code == 1 and "too slow" in r.stdout
    r = run("check", p, "--min-mfu", "1.0", "--format", "json")
    assert r.exit_code == 1
    [res] = json.loads(r.stdout)
    assert [f["kind"] for f in res["failures"]] == ["mfu"]
    assert res["failures"][0]["mfu"] == pytest.approx(u, rel=1e-12)


def test_time_gate_filters_suggestions(run, jobs):
    p = jobs(nofit=NOFIT)["nofit"]
    free = json.loads(run("check", p, "--format", "json").stdout)[0]["suggestions"]
    slowest = max(s["step_s"] for s in free)
    gated = json.loads(run("check", p, "--max-step-time", str(slowest), "--format", "json").stdout)[0]["suggestions"]
    assert [s["description"] for s in gated] == [s["description"] for s in free]
    fastest = min(s["step_s"] for s in free)
    gated = json.loads(run("check", p, "--max-step-time", str(fastest * (1 - 1e-9)), "--format", "json").stdout)[0]
    assert all(s["step_s"] <= fastest * (1 - 1e-9) for s in gated["suggestions"])
    assert free[0]["description"] not in [s["description"] for s in gated["suggestions"]]
    assert "memory" in {f["kind"] for f in gated["failures"]}


def test_without_time_keys(run, jobs, monkeypatch):
    """explain's JSON before the time model (no `time`, `throughput`): the gates are an
    input error and suggestions follow the documented cost order."""
    import planner.check as check

    def memory_only(*a, **k):
        res = to_json(*a, **k)
        res.pop("time", None), res.pop("throughput", None)
        return res

    monkeypatch.setattr(check, "to_json", memory_only)
    j = jobs(fit=FIT, nofit=NOFIT)
    r = run("check", j["fit"], j["nofit"], "--min-mfu", "0.4")
    assert r.exit_code == 2
    _errors_only(r, "--min-mfu", "time model", "unavailable")
    assert r.stderr.count("error: ") == 1
    r = run("check", j["nofit"], "--format", "json")
    sugg = json.loads(r.stdout)[0]["suggestions"]
    assert all(s["step_s"] is None for s in sugg)
    costs = [s["cost_rank"] for s in sugg]
    assert costs == sorted(costs, key=lambda c: (len(c), max(c), sum(c)))
    assert set(sugg[0]["changes"]) == {"sharding"}  # ZeRO before PP
    assert "ranked by the documented cost order" in run("check", j["nofit"]).stdout


@pytest.mark.parametrize("opt,val", [("--min-mfu", "1.5"), ("--min-mfu", "0"), ("--max-step-time", "soon"),
                                     ("--max-step-time", "0")])
def test_bad_gate_values_exit_2(run, jobs, opt, val):
    p = jobs(fit=FIT)["fit"]
    r = run("check", p, opt, val)
    assert r.exit_code == 2
    _errors_only(r, opt)


# ------------------------------------------------------------------------ calibration
def test_calibration_missing_profile_exits_2(run, jobs, tmp_path):
    p = jobs(fit=FIT)["fit"]
    r = run("check", p, "--calibration", tmp_path / "none.yaml")
    assert r.exit_code == 2
    _errors_only(r, "none.yaml", "calibration profile")


def test_calibration_leaves_memory_and_feeds_time(run, jobs, tmp_path):
    prof = tmp_path / "p5.yaml"
    r = run("calibrate", "nccl", "tests/data/nccl_logs/h100_8gpu_allreduce_aws-p5-batch.txt",
            "--collective", "all_reduce", "--nodes", "1", "-o", prof)
    assert r.exit_code == 0, r.stderr
    p = jobs(fit=FIT)["fit"]
    r = run("check", p, "--calibration", prof, "--format", "json")
    assert r.exit_code == 0
    assert "warning: this calibration profile affects time only" in r.stderr
    with_prof = json.loads(r.stdout)[0]
    without = json.loads(run("check", p, "--format", "json").stdout)[0]
    assert with_prof["memory"] == without["memory"]
    assert with_prof["calibration"]["profile"] == str(prof)
    # with a time gate the profile is used by the time model, and no warning is needed
    r = run("check", p, "--calibration", prof, "--min-mfu", "0.01", "--format", "json")
    assert r.exit_code == 0 and "warning" not in r.stderr
    assert json.loads(r.stdout)[0]["calibration"]["profile"] == str(prof)


# ----------------------------------------------------------------- library: ladders, rank
def test_tp_ladder_stays_in_nvlink_domain():
    def tps(**fields):
        job = Job(**fields)
        return [c.update["tp"] for c in ladders(job, _explain_json(**fields))["tp"]]

    assert tps(model="llama3-70b", gpus=64, tp=8) == []  # h100-sxm: nvlink_domain 8
    assert tps(model="llama3-70b", gpus=64, tp=2) == [4, 8]
    assert tps(model="llama3-70b", gpus=64, tp=8, hardware="gb200-nvl72") == [16, 32, 64]  # NVL72 domain


def test_ladders_follow_the_documented_steps():
    fields = dict(model="llama3-8b", gpus=64, micro_batch=4, sharding="zero1", recompute="selective", pp=2)
    lad = ladders(Job(**fields), _explain_json(**fields))
    assert [c.update["sharding"] for c in lad["sharding"]] == ["zero2", "fsdp"]
    assert [c.update["recompute"] for c in lad["recompute"]] == ["full"]
    assert [c.update["micro_batch"] for c in lad["micro_batch"]] == [2, 1]
    assert [c.update["pp"] for c in lad["pp"]] == [4, 8, 16, 32]  # llama3-8b has 32 layers
    hs = dict(model="llama3-8b", gpus=64, sharding="hsdp", shard_group=4)
    assert [c.update for c in ladders(Job(**hs), _explain_json(**hs))["sharding"]] == [{"sharding": "fsdp", "shard_group": None}]


def _fake(cost_and_knob, total, step=None):
    changes = tuple(Change(k, {k: 0}, k, c) for c, k in cost_and_knob)
    res = {"memory": {"total_bytes": total}, "plan": {"dp": 1}}
    if step is not None:
        res["time"] = {"step_s": step}
    return Suggestion(changes, Evaluated(None, res), 1)


def test_rank_documented_order_without_time_model():
    pp, fsdp, zero1, pair = (_fake([(8, "pp")], 1.0), _fake([(3, "sharding")], 2.0),
                             _fake([(1, "sharding")], 3.0), _fake([(1, "sharding"), (4, "micro_batch")], 0.5))
    assert rank([pp, pair, fsdp, zero1]) == [zero1, fsdp, pp, pair]


def test_rank_by_step_time_when_present():
    slow_cheap, fast_dear = _fake([(1, "sharding")], 1.0, step=9.0), _fake([(8, "pp")], 1.0, step=3.0)
    assert rank([slow_cheap, fast_dear]) == [fast_dear, slow_cheap]


def test_gates_validate():
    with pytest.raises(PlannerError):
        Gates(min_mfu=0.0)
    with pytest.raises(PlannerError):
        Gates(max_step_s=-1.0)
    assert not Gates().timed and Gates(min_mfu=0.5).timed


# ------------------------------------------------------------------------------ schema
def test_schema_is_the_job_schema(run):
    r = run("schema")
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert {"tp", "sharding"} <= set(s["properties"])
    assert set(s["properties"]) == set(Job.model_fields)
    assert set(s["required"]) == {"model", "gpus"}
    assert s["additionalProperties"] is False  # unknown fields are errors, as in explain
    assert s == json_schema("job")
    assert {"enum": ["none", "zero1", "zero2", "fsdp", "hsdp"], "type": "string"}.items() <= s["properties"]["sharding"].items()


def test_schema_validates_job_files(run):
    import jsonschema
    s = json.loads(run("schema").stdout)
    jsonschema.validate(yaml.safe_load(NOFIT + "sharding: fsdp\nrecompute: selective\nbytes_per_param: {weights: 2}\n"), s)
    for bad in ({"model": "llama3-8b", "gpus": 8, "tensor_parallel": 2},
                {"model": "llama3-8b", "gpus": 8, "sharding": "zero4"},
                {"model": "llama3-8b"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, s)


def _key_spellings(name: str):
    """Candidate keys for job field `name`, made without the loader's code: (key, separators
    are `-`/`_` only, every word as written or in lower case). Separators: each choice of `_`
    or `-` between the words, and `.` or ` ` in the first gap; case: each word as written or
    lower, or the whole key upper case."""
    import itertools

    words = name.split("_")
    gaps = len(words) - 1
    seps = [(s, True) for s in itertools.product("_-", repeat=gaps)]
    seps += [((odd,) + ("_",) * (gaps - 1), False) for odd in ". " if gaps]
    out = {}
    for sep, sep_ok in seps:
        def join(ws):
            return ws[0] + "".join(g + w for g, w in zip(sep, ws[1:]))
        for lower in itertools.product((False, True), repeat=len(words)):
            out[join([w.lower() if lo else w for w, lo in zip(words, lower)])] = (sep_ok, True)
        out.setdefault(join(words).upper(), (sep_ok, False))
    return out.items()


def test_schema_accepts_every_spelling_the_job_loader_reads(run):
    """`planner schema` and the job file loader (catalog.job_file_data, which `planner
    explain/check/budget job.yaml` use) agree on every key spelling: for each field and each
    candidate spelling (_key_spellings), the schema accepts a job holding it exactly when the
    loader reads it as that field and each word is as written or in lower case (the loader
    also reads any other case, `MICRO-BATCH`, which the schema's patterns leave out). Derived
    from the loader's behaviour, not from catalog.key_pattern, so neither can drift alone:
    e.g. `micro-batch`, `global_batch-tokens` and `reserve-gib` are read and accepted,
    `micro.batch` is neither, `MICRO-BATCH` is read only."""
    import jsonschema

    from planner.catalog import job_file_data

    s = json.loads(run("schema").stdout)
    check = jsonschema.Draft202012Validator(s)
    base = {"model": "llama3-8b", "gpus": 8}
    seen = {"dashed": 0, "upper": 0, "refused": 0}
    for name, f in Job.model_fields.items():
        value = base[name] if f.is_required() else f.get_default(call_default_factory=True)
        rest = {k: v for k, v in base.items() if k != name}
        for key, (sep_ok, case_ok) in _key_spellings(name):
            read = job_file_data({key: value}, None, Job.model_fields) == {name: value}
            assert read == sep_ok, key  # the loader: `-` and `_` alike, any case, nothing else
            assert check.is_valid({**rest, key: value}) == (read and case_ok), key
            seen["dashed"] += read and case_ok and "-" in key
            seen["upper"] += read and not case_ok
            seen["refused"] += not read
    assert min(seen.values()) > 20, seen  # each kind of spelling was tried
    # an alias is validated as its field: micro-batch 0 is refused like micro_batch 0
    assert check.is_valid({**base, "micro-batch": 2}) and not check.is_valid({**base, "micro-batch": 0})
    assert "^reserve[-_](GiB|gib)$" in s["patternProperties"]


def test_schema_other_kinds(run):
    assert "hbm_GB" in json.loads(run("schema", "hardware").stdout)["properties"]
    assert "num_layers" in json.loads(run("schema", "model").stdout)["properties"]
    r = run("schema", "plan")
    assert r.exit_code == 2
    _errors_only(r, "plan", "job")


def test_tp_overlap_off_is_a_suggested_fix():
    """Meta's 405B layout on the megatron stack with ZeRO-2 (Megatron-FSDP optim_grads) and TP
    overlap: Transformer Engine's userbuffers (24 T h B = 3 GiB at 8,192 tokens, h 16,384, outside
    the allocator: memory.py [ub]) push it over the usable HBM; turning the overlap off is a
    checked fix, its memory that of the same job without overlap, its step that job's, spelled
    in Megatron's flags."""
    from planner.check import evaluate_job, suggest
    from planner.trainers.spelling import spell_change

    base = dict(model="llama3-405b", gpus=16384, tp=8, cp=1, pp=16, vpp=8, micro_batch=1, global_batch=2048,
                seq_len=8192, sharding="zero2", account_for_embedding_in_pipeline_split=True,
                account_for_loss_in_pipeline_split=True, headroom=0.07)  # 73.55 GiB usable: 73.16 without overlap
    # (73.16: 71.68 + the Megatron-FSDP queue's one bucket in the job's fp32 main gradients, 4 u = 1.48 GiB, one layer
    # a model chunk: memory.py [rs], [mg])
    job = Job(**base, tp_comm_overlap=True)
    res = evaluate_job(job)
    assert res["memory"]["total_bytes"] > res["memory"]["usable_bytes"]
    lad = ladders(job, res)
    assert [c.update for c in lad["tp_comm_overlap"]] == [{"tp_comm_overlap": False}]
    off = [s for s in suggest(job, res, Gates()) if s.changes[0].knob == "tp_comm_overlap"]
    assert len(off) == 1 and len(off[0].changes) == 1
    plain = evaluate_job(Job(**base, tp_comm_overlap=False))
    assert off[0].ev.res["memory"]["total_bytes"] == plain["memory"]["total_bytes"] <= plain["memory"]["usable_bytes"]
    assert res["memory"]["total_bytes"] - plain["memory"]["total_bytes"] == pytest.approx(24 * 8192 * 16384 + 3 * (32 * 2**20 + 1024), rel=1e-9)
    assert off[0].ev.res["time"]["step_s"] == plain["time"]["step_s"]
    assert spell_change("megatron", "tp_comm_overlap", off[0].ev.res["plan"]) == "drop --tp-comm-overlap"
    # a plan without overlap has no such rung
    assert ladders(Job(**base), plain)["tp_comm_overlap"] == []


# ------------------------------------------------------------ context parallelism (issue 22)
# Llama 3 8B on 16 H100s, PP 2, 16,384 tokens, the distributed optimizer: 97.6 GiB a GPU, over the
# 71.2 usable; CP 2 halves each GPU's tokens (8,192), so its activations, and passes
CP_JOB = dict(model="llama3-8b", gpus=16, pp=2, seq_len=16384, global_batch=64, stack="megatron", sharding="zero1")


def _cps(**fields):
    job = Job(**fields)
    return [c.update["cp"] for c in ladders(job, _explain_json(**fields))["cp"]]


def test_cp_ladder_doubles_while_the_sequence_and_the_gpus_divide():
    """cp x 2 while cp divides the sequence, tp cp pp divides the GPUs and the stack runs the
    degree (stack_db runs.max_cp); a stack without CP (max_cp 1) has no rung."""
    assert _cps(**CP_JOB) == [2, 4, 8]  # 16 GPUs / pp 2: cp up to 8
    assert _cps(**{**CP_JOB, "gpus": 24, "global_batch": 48}) == [2, 4]  # 24 / (2 x 8) is not whole
    assert _cps(**{**CP_JOB, "seq_len": 16386}) == [2]  # 16,386 = 2 x 8,193
    assert _cps(**{**CP_JOB, "seq_len": 16385}) == []  # odd: no cp divides it
    assert _cps(**{**CP_JOB, "cp": 2, "seq_len": 16384}) == [4, 8]
    assert _cps(**{**CP_JOB, "stack": "megatron-deepspeed"}) == []  # max_cp 1: no context parallelism
    assert _cps(**{**CP_JOB, "stack": "llm-foundry", "pp": 1, "sharding": "fsdp"}) == []  # likewise (and max_pp 1)
    assert _cps(**{**CP_JOB, "stack": "torchtitan", "sharding": "fsdp"}) == [2, 4, 8]  # no max_cp
    # an explicit dp follows cp (dp = gpus / (tp cp pp)), as it follows tp and pp
    from planner.check import apply
    job = Job(**CP_JOB, dp=8)
    assert apply(job, (Change("cp", {"cp": 4}, "", 7),)).dp == 2


def test_cp_is_a_checked_fix_ranked_by_step_time():
    """The CP 2 suggestion is the job at cp 2 as `explain` prices it: activations halved (8,192
    tokens a GPU), model states unchanged (the distributed optimizer shards over dp x cp = 8
    either way), dp 8 -> 4; ranked with the others by predicted step time."""
    from planner.check import evaluate_job, suggest

    job = Job(**CP_JOB)
    res = evaluate_job(job)
    assert res["memory"]["total_bytes"] > res["memory"]["usable_bytes"]
    sugg = suggest(job, res, Gates())
    [cp] = [s for s in sugg if s.changes[0].knob == "cp"]
    assert cp.description == "CP 1 -> 2 (DP 8 -> 4)" and cp.as_dict()["changes"] == {"cp": 2}
    at2 = evaluate_job(Job(**CP_JOB, cp=2))
    assert cp.ev.res["memory"]["total_bytes"] == at2["memory"]["total_bytes"] <= at2["memory"]["usable_bytes"]
    assert cp.ev.res["time"]["step_s"] == at2["time"]["step_s"]
    t0, t2 = res["memory"]["terms"], at2["memory"]["terms"]
    assert t2["layer_activations"] == pytest.approx(t0["layer_activations"] / 2, rel=1e-12)
    assert t2["output_activations"] == pytest.approx(t0["output_activations"] / 2, rel=1e-12)
    for k in ("weights", "gradients", "master_weights", "adam"):
        assert t2[k] == t0[k]
    steps = [s.ev.res["time"]["step_s"] for s in sugg]
    assert steps == sorted(steps) and len(sugg) >= 3  # with TP 2 and full recompute


def test_no_cp_suggestion_where_the_stack_or_the_sequence_refuses_it():
    """No CP rung on a stack without CP; a cp the sequence does not divide as Megatron needs
    (seq % 2 cp, MEGATRON_CP_SEQ: 16,386 / 4 is not whole) is refused by resolve and not
    offered; nor where the core attention is eager (it runs without CP)."""
    from planner.check import evaluate_job, suggest

    def knobs(**fields):
        job = Job(**fields)
        return {c.knob for s in suggest(job, evaluate_job(job), Gates()) for c in s.changes}

    assert "cp" in knobs(**CP_JOB)
    assert "cp" not in knobs(**{**CP_JOB, "stack": "megatron-deepspeed"})
    short = {**CP_JOB, "seq_len": 16386}
    with pytest.raises(PlannerError, match="MEGATRON_CP_SEQ"):
        resolve(Job(**short, cp=2))
    assert "cp" not in knobs(**short)
    assert "cp" not in knobs(**CP_JOB, attention="eager")


def test_cp_under_tp_pp_dp_mapping_carries_the_rank_order():
    """Megatron's --use-tp-pp-dp-mapping (rank order tp-cp-pp-dp) with pp > 1 asserts equal
    attention and expert dp (MEGATRON_TP_PP_DP_MAPPING), so a dense model runs it only at cp 1:
    CP 2 and 4 (dp 4, 2) are refused and not offered; CP 8 leaves dp 1, where the order is the
    default tp-cp-dp-pp (equal up to size-1 axes), which the suggestion names as a rank-order
    change, and which `explain` prices the same."""
    from planner.check import evaluate_job, suggest

    fields = {**CP_JOB, "rank_order": "tp-cp-pp-dp"}
    job = Job(**fields)
    for cp in (2, 4):
        with pytest.raises(PlannerError, match="MEGATRON_TP_PP_DP_MAPPING"):
            resolve(Job(**fields, cp=cp))
    [cp] = [s for s in suggest(job, evaluate_job(job), Gates()) if s.changes[0].knob == "cp"]
    assert cp.description == "CP 1 -> 8 (DP 8 -> 1) (rank order tp-cp-pp-dp -> tp-cp-dp-pp)"
    assert cp.as_dict()["changes"] == {"cp": 8, "rank_order": "tp-cp-dp-pp"}
    default = evaluate_job(Job(**CP_JOB, cp=8))
    assert cp.ev.res["memory"]["total_bytes"] == default["memory"]["total_bytes"]
    assert cp.ev.res["time"]["step_s"] == pytest.approx(default["time"]["step_s"], rel=1e-12)


def test_cp_sits_beside_tp_in_the_documented_order():
    from planner.check import CHANGE_COST, KNOBS

    assert "cp" in KNOBS and CHANGE_COST[("cp", None)] == CHANGE_COST[("tp", None)] == 7
    assert CHANGE_COST[("recompute", "full")] < CHANGE_COST[("cp", None)] < CHANGE_COST[("pp", None)]
    full, cp, pp = _fake([(6, "recompute")], 1.0), _fake([(7, "cp")], 1.0), _fake([(8, "pp")], 1.0)
    assert rank([pp, cp, full]) == [full, cp, pp]
