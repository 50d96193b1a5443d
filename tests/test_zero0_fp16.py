"""DeepSpeed's ZeRO stage 0 is fp16's (issue 22, "fit never ranks a mode the stack lacks").

microsoft/DeepSpeed @38327e07 deepspeed/runtime/engine.py: without ZeRO, get_data_types (l. 1010-1025) accumulates
bf16 in fp32 by default, and _do_optimizer_sanity_check (l. 1300-1350) builds the BF16_Optimizer for it (l. 1346-1347:
the megatron-deepspeed mode bf16_optimizer, fp32 master and Adam partitioned); only fp16 with fp16 accumulation runs
the FP16_Optimizer (l. 1344-1345), whose fp32 master is a whole clone of the weights with Adam over it
(fp16/fused_optimizer.py l. 77-86): the replicated states the stack's zero0 prices. So zero0 runs fp16 only
(stack_db megatron-deepspeed runs.sharding job_settings: fp16 true, refused otherwise, bf16_optimizer instead, unset
default): an fp16 job runs zero0 (priced as bf16, written and exported so); a job that leaves fp16 out is bf16, the
planner's default precision (DeepSpeed enables fp16 only where the config says so: config.py @38327e07
get_fp16_enabled l. 160-164, FP16_ENABLED_DEFAULT False), as a bf16 job (fp16 false) is: planned without zero0, and
refused where it names it.
"""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job, ModeSetting, ShardingMode, StackRuns

# Llama 3 8B: 8,030,261,248 parameters (HF safetensors)
P = 8_030_261_248
# (attention flash: --use-flash-attn-v2; left out, the stack prices Megatron-DeepSpeed's default CoreAttention, eager)
JOB = dict(model="llama3-8b", gpus=16, micro_batch=1, seq_len=8192, global_batch=64, stack="megatron-deepspeed",
           attention="flash")


def test_the_stack_marks_zero0_fp16_only():
    from planner.catalog import load_stack

    [x] = next(m for m in load_stack("megatron-deepspeed").runs.sharding if m.name == "zero0").job_settings
    assert (x.setting, x.value, x.other, x.instead, x.unset) == ("fp16", True, "refused", "bf16_optimizer", "default")
    assert "l. 1344-1345" in x.source and "get_fp16_enabled l. 160-164" in x.source
    # every other mode of every catalog stack takes a left-out setting as the mode's value (the default, switch):
    # Megatron's torch_fsdp2 runs a job that says nothing about the fusion without it
    from planner.catalog import list_stacks

    others = [(st, m.name, y.setting) for st in list_stacks() for m in load_stack(st).runs.sharding
              for y in m.job_settings if y.unset != "switch"]
    # BigScience's fork (DeepSpeed 77b649d16): bf16 runs at stage 0 only, so its zero1 is fp16's too; Megatron-Bridge
    # runs Megatron-FSDP's optim / optim_grads without the gradient-accumulation fusion (training/config.py
    # l. 1554-1557), priced per job below FSDP: a job leaving the fusion on is planned without them
    assert others == [("megatron-bridge", "megatron_fsdp_optim", "gradient_accumulation_fusion"),
                      ("megatron-bridge", "megatron_fsdp_optim_grads", "gradient_accumulation_fusion"),
                      ("megatron-deepspeed", "zero0", "fp16"), ("megatron-deepspeed-2021", "zero0", "fp16"),
                      ("megatron-deepspeed-bigscience", "zero0", "fp16"), ("megatron-deepspeed-bigscience", "zero1", "fp16")]


def test_fp16_may_be_fixed_below_fsdp_other_settings_may_not():
    """fp16 is priced as bf16 (no cost model reads it): a mode below FSDP may run it at true; the gradient-accumulation
    fusion, priced per job below FSDP, still may not be fixed off there."""
    fp16 = ModeSetting(setting="fp16", value=True, other="refused", source="s")
    assert ShardingMode(name="x", level="none", job_settings=[fp16], spelling="s", sources=["s"]).job_settings == [fp16]
    with pytest.raises(ValueError, match="only an fsdp or hsdp mode may"):
        ShardingMode(name="x", level="none", spelling="s", sources=["s"], job_settings=[
            ModeSetting(setting="gradient_accumulation_fusion", value=False, other="refused", source="s")])
    with pytest.raises(ValueError, match="instead names the mode run in place of a refused one"):
        ModeSetting(setting="fp16", value=True, other="overridden", instead="y", source="s")


def test_unset_default_is_validated():
    """unset: switch by default; default only for a refused setting at a value other than the job's default (a job
    leaving it out then counts as that default: with it at the mode's value, or with an overridden setting, the field
    would change nothing a job runs); any other word is refused. A refused setting with unset default never runs a
    job away from its own value, so a mode below FSDP may fix a priced one (the fusion off) that way, not with switch."""
    assert ModeSetting(setting="fp16", value=True, other="refused", source="s").unset == "switch"
    assert ModeSetting(setting="fp16", value=True, other="refused", unset="default", source="s").unset == "default"
    for bad in (dict(setting="fp16", value=False, other="refused"),  # false is the job's default already
                dict(setting="fp16", value=True, other="overridden"),
                dict(setting="gradient_accumulation_fusion", value=True, other="refused")):
        with pytest.raises(ValueError, match="unset default"):
            ModeSetting(**bad, unset="default", source="s")
    with pytest.raises(ValueError):
        ModeSetting(setting="fp16", value=True, other="refused", unset="off", source="s")
    fusion_off = ModeSetting(setting="gradient_accumulation_fusion", value=False, other="refused", unset="default",
                             source="s")
    assert ShardingMode(name="x", level="none", job_settings=[fusion_off], spelling="s", sources=["s"]).job_settings == [
        fusion_off]


def test_instead_names_another_mode_that_takes_the_value():
    from planner.catalog import load_stack

    runs = load_stack("megatron-deepspeed").runs.model_dump()
    zero0 = next(m for m in runs["sharding"] if m["name"] == "zero0")
    for bad, why in (("zero9", "is not another sharding mode"), ("zero0", "is not another sharding mode")):
        zero0["job_settings"][0]["instead"] = bad
        with pytest.raises(ValueError, match=why):
            StackRuns.model_validate(runs)
    zero0["job_settings"][0]["instead"] = "bf16_optimizer"
    bf16 = next(m for m in runs["sharding"] if m["name"] == "bf16_optimizer")
    bf16["job_settings"][0]["value"] = True  # a mode that refuses fp16 false too cannot run in zero0's place
    with pytest.raises(ValueError, match="which refuses fp16 false too"):
        StackRuns.model_validate(runs)


def test_an_fp16_job_runs_zero0_priced_as_bf16():
    """16 GPUs, pp 1: the FP16_Optimizer's states whole on every rank, weights 2P, gradients 2P, master 4P, Adam 8P
    (mixed16); the plan says fp16, the job's own (not listed as the stack's: the mode takes no setting the job leaves
    out), and prices exactly as the bf16 job's zero1 weights and gradients (fp16 priced as bf16)."""
    from planner.plan import plan_dict

    s, p, _ = resolve(Job(**JOB, sharding_mode="zero0", fp16=True))
    m = evaluate(s, p).memory
    assert (float(m["weights"]), float(m["gradients"]), float(m["master_weights"]), float(m["adam"])) == (
        2.0 * P, 2.0 * P, 4.0 * P, 8.0 * P)
    d = plan_dict(p, s)
    assert (d["sharding"], d["sharding_mode"], d["fp16"]) == ("none", "zero0", True)
    assert not [x for x in s.inherited if x[0] == "fp16"]
    # bf16_optimizer leaves fp16 as the job has it: no fp16 in its plan
    s3, p3, _ = resolve(Job(**JOB, sharding_mode="bf16_optimizer"))
    assert "fp16" not in plan_dict(p3, s3)
    # zero1 in fp16 and in bf16 (fp16 left out) price alike: 2P weights and gradients whole, 12P / 16 states
    a, b = (evaluate(*resolve(Job(**JOB, sharding_mode="zero1", **kw))[:2]) for kw in ({"fp16": True}, {}))
    assert {k: float(v) for k, v in a.memory.items()} == {k: float(v) for k, v in b.memory.items()}
    assert {k: float(v) for k, v in a.time.items()} == {k: float(v) for k, v in b.time.items()}


@pytest.mark.parametrize("fp16", [dict(fp16=False), {}], ids=["fp16-false", "fp16-left-out"])
@pytest.mark.parametrize("pin", [dict(sharding_mode="zero0"), dict(sharding="none")])
def test_a_bf16_job_naming_zero0_is_refused_naming_the_bf16_optimizer(pin, fp16):
    """A job that leaves fp16 out is bf16 (unset default): refused at zero0 as the job that says fp16 false is."""
    with pytest.raises(PlannerError) as e:
        resolve(Job(**JOB, **fp16, **pin))
    assert "sharding mode zero0 with fp16 false: stack megatron-deepspeed's trainer runs sharding mode bf16_optimizer " \
           "in its place" in e.value.message and "BF16_Optimizer" in e.value.message
    assert e.value.hint == "--sharding bf16_optimizer (what the trainer runs with fp16 false), or fp16 true (--fp16) for zero0"


def test_cli_refuses_zero0_on_a_bf16_job(cli):
    """--no-fp16, or nothing said: exit 2, the hint naming both ways out; --fp16: explain runs zero0."""
    args = ["--model", "llama3-8b", "--gpus", "16", "--stack", "megatron-deepspeed", "--global-batch", "64"]
    for cmd, pin in (("explain", "zero0"), ("explain", "none"), ("fit", "zero0"), ("fit", "none")):
        for fp16 in (["--no-fp16"], []):
            r = cli(cmd, *args, "--sharding", pin, *fp16)
            assert r.exit_code == 2, (cmd, pin, fp16, r.stdout)
            assert "sharding mode zero0 with fp16 false" in r.stderr and "BF16_Optimizer" in r.stderr
            assert "hint: --sharding bf16_optimizer (what the trainer runs with fp16 false), or fp16 true (--fp16) " \
                   "for zero0" in r.stderr
            assert "Traceback" not in r.stderr
    r = cli("explain", *args, "--sharding", "zero0", "--fp16", "--format", "json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert (plan["sharding"], plan["sharding_mode"], plan["fp16"]) == ("none", "zero0", True)


def test_fit_ranks_zero0_in_fp16_only(cli):
    """A job leaving fp16 out is bf16: no zero0 row and no fp16 row, the BF16_Optimizer's rows kept, the very rows of
    the bf16 job (--no-fp16); an fp16 job gets zero0 and no bf16_optimizer row."""
    args = ["--model", "llama3-8b", "--gpus", "16", "--stack", "megatron-deepspeed", "--global-batch", "64", "--pp", "1",
            "--top", "400", "--format", "json"]
    r = cli("fit", *args)
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    modes = {row["plan"]["sharding_mode"] for row in rows}
    assert "zero0" not in modes and {"zero1", "bf16_optimizer"} <= modes
    assert not any(row["plan"].get("fp16") for row in rows)
    r = cli("fit", *args, "--no-fp16")
    assert r.exit_code == 0, r.stderr
    assert [row["plan"] for row in json.loads(r.stdout)] == [row["plan"] for row in rows]
    # --sharding none without --fp16, beside zero1 too: a pinned level whose one mode is zero0 is refused, as with
    # --no-fp16 (search.check_pins), not searched empty
    for fp16 in ([], ["--no-fp16"]):
        r = cli("fit", *args, "--sharding", "none,zero1", *fp16)
        assert r.exit_code == 2 and "hint: --sharding bf16_optimizer" in r.stderr, (fp16, r.stderr)
    r = cli("fit", *args, "--fp16")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    modes = {row["plan"]["sharding_mode"] for row in rows}
    assert "zero0" in modes and "bf16_optimizer" not in modes and all(row["plan"]["fp16"] for row in rows)
    from planner.render.fit import stack_options_text

    zero0 = next(row for row in rows if row["plan"]["sharding_mode"] == "zero0")
    assert stack_options_text(zero0["plan"]).split(", ")[0] == "fp16"


def test_zero0_exports_fp16_and_reads_back(tmp_path):
    """Exported as stage 0 with fp16 enabled (no bf16 key), read back as sharding none, zero0, fp16 true: the plan
    exported; a plan dict without fp16 at zero0 (written before zero0 ran fp16 only) is a bf16 job's, refused by the
    export's re-resolve (export._check_runnable) with resolve's message and hint, and by the DeepSpeed writer."""
    from planner.cli.export import resolved_plan
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(**JOB, sharding_mode="zero0", fp16=True))
    text, _ = export_plan(plan, "deepspeed")
    data = json.loads(text)
    assert data["zero_optimization"]["stage"] == 0 and data["fp16"] == {"enabled": True} and "bf16" not in data
    path = tmp_path / "ds.json"
    path.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(path, fmt="deepspeed", model="llama3-8b", gpus=16)
    assert (cfg.job["sharding"], cfg.job["sharding_mode"], cfg.job["fp16"]) == ("none", "zero0", True)
    back = resolved_plan(Job(**{**cfg.job, "model": "llama3-8b", "seq_len": 8192}))
    assert {k: back.get(k) for k in ("sharding", "sharding_mode", "fp16", "dp", "micro_batch", "global_batch")} == {
        "sharding": "none", "sharding_mode": "zero0", "fp16": True, "dp": 16, "micro_batch": 1, "global_batch": 64}
    old = {k: v for k, v in plan.items() if k != "fp16"}
    with pytest.raises(PlannerError, match="export: the plan breaks a rule of stack megatron-deepspeed: sharding mode "
                                           "zero0 with fp16 false") as e:
        export_plan(old, "deepspeed")
    assert "--sharding bf16_optimizer" in e.value.hint and "--fp16" in e.value.hint
    from planner.trainers.export import _deepspeed

    with pytest.raises(PlannerError, match="sharding none \\(mode zero0\\) in bf16: DeepSpeed runs bf16 at "
                                           "zero_optimization.stage 0 as its BF16_Optimizer") as e:
        _deepspeed(old, [])
    assert "--sharding bf16_optimizer" in e.value.hint and "--fp16" in e.value.hint
    # fp16 at a ZeRO stage exports too (the ZeRO optimizer in fp16), read back as the job's fp16
    z1 = resolved_plan(Job(**JOB, sharding_mode="zero1", fp16=True))
    data = json.loads(export_plan(z1, "deepspeed")[0])
    assert data["zero_optimization"]["stage"] == 1 and data["fp16"] == {"enabled": True}
    with pytest.raises(PlannerError, match="export torchtitan"):
        export_plan(z1, "torchtitan")


def test_the_json_reader_gives_the_jobs_fp16(tmp_path):
    """bf16.enabled reads as fp16 false (a bf16 job: zero0 left out of its search), fp16.enabled as true; neither
    leaves it out."""
    from planner.trainers import deepspeed

    f = tmp_path / "ds.json"
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}
    for extra, want in (({"bf16": {"enabled": True}}, False), ({"fp16": {"enabled": True}}, True), ({}, None)):
        f.write_text(json.dumps({**base, **extra}))
        assert deepspeed.read(f, model="llama3-8b", gpus=16).job.get("fp16") == want, extra


def test_check_offers_no_level_none_to_a_bf16_job():
    """check's sharding rungs come from the modes the stack runs for the job (plan.stack_for_settings): a bf16 job on
    megatron-deepspeed, fp16 false or left out, has no level none (zero0 is fp16's); an fp16 job has it."""
    from planner.check import _stack_levels

    for fp16 in ({"fp16": False}, {}):
        levels = _stack_levels(Job(model="llama3-8b", gpus=16, stack="megatron-deepspeed", **fp16))
        assert "none" not in levels and {"zero1", "zero2", "fsdp", "hsdp"} <= set(levels)
    assert "none" in _stack_levels(Job(model="llama3-8b", gpus=16, stack="megatron-deepspeed", fp16=True))


def test_check_suggestions_keep_the_jobs_dtype():
    """An fp16 job at zero0 on 8 H100s (Llama 3 8B: 16 B a parameter replicated, 128 GB of states alone) fails, and
    every suggestion keeps fp16: ZeRO-2, and TP 4 / PP 4 still at zero0 (the job's mode, fp16's); the same job leaving
    fp16 out is bf16 and is refused at level none (exit 2 from check's CLI: the error verdict), not checked as fp16."""
    from planner.check import Gates, check_job

    job = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="none", micro_batch=1, global_batch=64,
               seq_len=8192, attention="flash")
    res = check_job(Job(**job, fp16=True), "", Gates())
    assert res["verdict"] == "fail"
    got = {tuple(sorted(s["changes"].items())): (s["plan"]["sharding_mode"], s["plan"].get("fp16"))
           for s in res["suggestions"]}
    assert got == {(("sharding", "zero2"),): ("zero2", True), (("tp", 4),): ("zero0", True),
                   (("pp", 4),): ("zero0", True)}
    with pytest.raises(PlannerError, match="sharding none: sharding mode zero0 with fp16 false"):
        check_job(Job(**job), "", Gates())


def test_the_fp16_optimizers_step_copies():
    """FP16_Optimizer.step (fp16/fused_optimizer.py @38327e07 l. 285-291): every fp16 gradient's fp32 copy and their fp32
    flat cat at once, over the whole replicated group: 8 B x L beside the states, L = the rank's parameters (TP 4: the
    fp32 master's 4 B x L). At the step the activations are freed, so the term (its excess over the backward's peak) is
    8 L - the backward's activations: Llama 3 8B on TP 4 x DP 4, 4,096 tokens, micro 1, SP off (the stack's only SP
    state at tp > 1 since mdscheck, start-up rule STACK_SP_NORM_GRADS; the 8,192 tokens of this test's SP-on plan,
    9,126,805,504 + 1,592,786,944 B, would hold 15,569,256,448 + 1,643,118,592 B without SP, past the copies, leaving
    no excess), 16,062,119,936 B of copies against 7,788,822,528 (7,784,628,224, half the 8,192-token figure, and the
    flash cores' fp32 log-sum-exp, 32 layers x 4,096 tokens x 8 heads x 4 B = 4,194,304: planner/layers/attention.py
    [ls]) + 821,559,296 B of activations: 7,451,738,112 B (6.94 GiB)."""
    # Llama 3's own 128,256 rows (megatron-deepspeed pads them to 128,512 at tp 4, stack_db vocab_padding)
    s, p, _ = resolve(Job(**{**JOB, "tp": 4, "seq_len": 4096, "padded_vocab_size": 128256}, sharding_mode="zero0", fp16=True))
    assert int(p.sp) == 0
    m = evaluate(s, p).memory
    L = float(m["master_weights"]) / 4
    assert L == pytest.approx(P / 4, rel=2e-4)  # the rank's quarter (norms replicated over TP)
    acts = float(m["layer_activations"]) + float(m["output_activations"])
    assert (float(m["layer_activations"]), float(m["output_activations"])) == (7_784_628_224 + 32 * 4096 * 8 * 4,
                                                                               821_559_296)
    assert float(m["step_grad_copies"]) == 8 * L - acts == 7_451_738_112
    # ZeRO-1 at the same plan: the partition's flat bf16 copy and its fp32 copy, 6 B x L / 4, under the activations
    assert float(resolve_memory(sharding_mode="zero1")["step_grad_copies"]) == 0.0


def resolve_memory(**kw):
    s, p, _ = resolve(Job(**{**JOB, "tp": 4}, **kw))
    return evaluate(s, p).memory


def test_a_stage_0_json_without_fp16_is_a_bf16_job(tmp_path):
    """A DeepSpeed JSON at stage 0 with fp16.enabled reads as zero0 in fp16; one that enables neither dtype (fp32, or
    "auto") leaves fp16 out: a bf16 job, so level none (zero0) is refused, exit 2 naming the BF16_Optimizer; --fp16
    makes it zero0's fp16 job, and --sharding bf16_optimizer replaces the file's level none with the mode's zero1
    (the command line's mode chooses its level, listed as assumed) rather than contradicting it."""
    from planner.cli.core import load_job

    f = tmp_path / "ds.json"
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 0}}
    cli = {"model": "llama3-8b", "gpus": 16, "seq_len": 8192}
    f.write_text(json.dumps({**base, "fp16": {"enabled": True}}))
    s, p, _ = resolve(load_job(f, cli)[0])
    assert (s.stack.runs.sharding[int(p.smode)].name, s.fp16) == ("zero0", True)
    for extra in ({}, {"fp16": {"enabled": "auto"}}):
        f.write_text(json.dumps({**base, **extra}))
        job, where = load_job(f, cli)
        assert (job.sharding, "fp16" in job.model_fields_set) == ("none", False)
        with pytest.raises(PlannerError, match="ds.json: sharding mode zero0 with fp16 false: stack megatron-deepspeed's "
                                               "trainer runs sharding mode bf16_optimizer in its place") as e:
            resolve(job, where)
        assert e.value.hint.startswith("--sharding bf16_optimizer")
        s, p, _ = resolve(load_job(f, {**cli, "fp16": True})[0])
        assert (s.stack.runs.sharding[int(p.smode)].name, s.fp16) == ("zero0", True)
        read: list = []
        job, _ = load_job(f, {**cli, "sharding_mode": "bf16_optimizer"}, None, read)
        assert ("sharding" in job.model_fields_set, job.sharding_mode) == (False, "bf16_optimizer")
        assert "sharding: the file's none is not kept: the command line's sharding mode bf16_optimizer chooses its " \
               "level, zero1" in read[0].assumed
        s, p, _ = resolve(job)
        assert (s.stack.runs.sharding[int(p.smode)].name, int(p.sharding)) == ("bf16_optimizer", 1)  # zero1


def test_megatron_reader_keeps_a_value_the_mode_says_unset_default_for(monkeypatch):
    """trainers.megatron._mode_settings drops a script's setting that its mode runs anyway (unset switch: left out, the
    mode's value) but keeps it under unset default, where a left-out setting counts as the job's default: a mode
    fixing fp16 true that way keeps the script's --fp16 in the job (else the job would be refused at its own mode)."""
    import planner.catalog as catalog
    from planner.trainers.megatron import _mode_settings

    real = catalog.load_stack("megatron")
    for unset, want in (("default", {"sharding_mode": "ddp", "fp16": True}), ("switch", {"sharding_mode": "ddp"})):
        x = ModeSetting(setting="fp16", value=True, other="refused", unset=unset, source="s")
        modes = [m.model_copy(update={"job_settings": [x]}) if m.name == "ddp" else m for m in real.runs.sharding]
        fake = real.model_copy(update={"runs": real.runs.model_copy(update={"sharding": modes})})
        monkeypatch.setattr(catalog, "load_stack", lambda name, _f=fake: _f)
        job, assumed = {"sharding_mode": "ddp", "fp16": True}, []
        _mode_settings({"--fp16": None}, job, assumed)
        assert job == want, unset
        job = {"sharding_mode": "ddp"}
        _mode_settings({}, job, [])
        assert job == {"sharding_mode": "ddp", "fp16": False}  # refused: kept, so resolve names the check
