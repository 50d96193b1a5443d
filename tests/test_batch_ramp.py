"""A batch-size ramp (the job's batch_size_schedule, Megatron-LM --step-batch-size-schedule;
planner/batch_ramp.py, explain.batch_ramp), checked by hand against NVIDIA/Megatron-LM @d98e8a64:
num_microbatches_calculator.py (parser, _validate_schedule, update), training.py l. 2155-2170
(update_train_iters: whole steps at a phase's batch until the consumed samples reach the next
threshold) and arguments.py l. 698-701."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from planner.budget import BudgetOptions, plan_budget
from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature
from planner.trainers.rules import megatron_script_errors

GPT3_SH = Path(__file__).parent / "data" / "trainer_configs" / "train_gpt3_175b_distributed.sh"
# llama3-8b on 16 H100, tp 2 x pp 2 x dp 4, micro-batch 1, 4,096-token sequences
BASE = dict(model="llama3-8b", gpus=16, tp=2, pp=2, micro_batch=1, seq_len=4096, stack="megatron")
# 244,144 samples of 4,096 tokens
TOKENS = 244_144 * 4096
RAMP = [{"from_tokens": 0, "global_batch": 16}, {"from_tokens": 2e8, "global_batch": 64}]


def _json(job: Job) -> dict:
    s, p, _ = resolve(job)
    return to_json(s, p, evaluate(s, p))


def test_two_phase_ramp_by_hand():
    """2e8 tokens are 2e8 // 4,096 = 48,828 samples; at 16 a step Megatron runs ceil(48,828 / 16)
    = 3,052 steps (48,832 samples, past the threshold), then (244,144 - 48,832) / 64 = 3,051.75
    steps at 64. Each phase's step is the plan's at that batch (4 and 16 micro-batches)."""
    ramp = _json(Job(**BASE, tokens=TOKENS, batch_size_schedule=RAMP))
    s16 = _json(Job(**BASE, global_batch=16))["time"]["step_s"]
    flat = _json(Job(**BASE, global_batch=64, tokens=TOKENS))
    s64 = flat["time"]["step_s"]
    thr = ramp["throughput"]
    assert ramp["plan"]["global_batch"] == 64 and ramp["time"] == flat["time"]  # the plan is the last batch's
    assert [p["steps"] for p in thr["batch_ramp"]] == [3052, 3051.75]
    assert [p["microbatches_per_step"] for p in thr["batch_ramp"]] == [4, 16]
    assert thr["training_days_ramp"] == pytest.approx((3052 * s16 + 3051.75 * s64) / 86400, rel=1e-12)
    assert thr["training_steps_ramp"] == 6103.75
    # the constant-batch figures stay the last batch's: 244,144 / 64 steps
    assert thr["training_days"] == pytest.approx(244_144 / 64 * s64 / 86400, rel=1e-12)
    assert thr["training_days_ramp"] > thr["training_days"]  # the small batch's steps use the GPUs worse
    # the micro-batch is fixed: the smaller batch holds no more in memory than the last
    assert thr["batch_ramp"][0]["memory_bytes"] <= thr["batch_ramp"][1]["memory_bytes"] == ramp["memory"]["total_bytes"]
    # budget's wall time is the ramp's
    s, p, _ = resolve(Job(**BASE, tokens=TOKENS, batch_size_schedule=RAMP))
    b = plan_budget(s, p, BudgetOptions(mc_runs=0))
    assert b["training"]["wall_s"] == pytest.approx(3052 * s16 + 3051.75 * s64, rel=1e-9)
    assert b["training"]["steps"] == 6103.75
    # one phase at 0 is a constant batch: the same days
    one = _json(Job(**BASE, tokens=TOKENS, batch_size_schedule=[{"from_tokens": 0, "global_batch": 64}]))
    assert one["throughput"]["training_days_ramp"] == pytest.approx(flat["throughput"]["training_days"], rel=1e-12)


def test_gpt3_script_train_iters_at_the_ramps_batches():
    """NVIDIA's gpt3 script: --train-iters 500000 with "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232
    12B:1536" and 2,048-token sequences. Thresholds in samples 0, 1,171,875, 2,343,750, 3,515,625,
    4,687,500, 5,859,375; steps ceil(1,171,875 / 16) = 73,243 (1,171,888 samples), ceil(1,171,862 /
    320) = 3,663 (2,344,048), ceil(1,171,577 / 624) = 1,878 (3,515,920), ceil(1,171,580 / 928) =
    1,263 (4,687,984), ceil(1,171,391 / 1,232) = 951 (5,859,616), and the other 419,002 at 1,536."""
    steps = [73_243, 3_663, 1_878, 1_263, 951, 419_002]
    batches = [16, 320, 624, 928, 1232, 1536]
    assert sum(steps) == 500_000
    cfg = load_trainer_config(GPT3_SH, gpus=128)
    assert cfg.job["tokens"] == sum(n * b for n, b in zip(steps, batches)) * 2048
    assert [p["global_batch"] for p in cfg.job["batch_size_schedule"]] == batches
    assert not any("--step-batch-size-schedule" in x for x in cfg.not_modelled)
    thr = _json(Job.model_validate(cfg.job))["throughput"]
    assert [p["steps"] for p in thr["batch_ramp"]] == steps


@pytest.mark.parametrize("ramp, match", [
    ([{"from_tokens": 1e6, "global_batch": 16}], "first threshold is 1,000,000 tokens, not 0"),
    ([{"from_tokens": 0, "global_batch": 64}, {"from_tokens": 2e8, "global_batch": 16}], "its batch decreases"),
    ([{"from_tokens": 0, "global_batch": 16}, {"from_tokens": 0, "global_batch": 64}], "do not strictly increase"),
])
def test_job_refuses_what_megatron_refuses(ramp, match):
    with pytest.raises(ValidationError, match=match):
        Job(**BASE, batch_size_schedule=ramp)
    with pytest.raises(ValidationError, match="not the schedule's last batch 64"):
        Job(**BASE, global_batch=48, batch_size_schedule=RAMP)


def test_resolve_refuses_a_phase_megatron_cannot_run():
    # 6 sequences do not divide into dp 4 x micro-batch 1 (Megatron's consistency check as the phase starts)
    bad = [{"from_tokens": 0, "global_batch": 6}, {"from_tokens": 2e8, "global_batch": 64}]
    with pytest.raises(PlannerError, match=r"batch_size_schedule phase 1 \(batch 6 from 0 tokens\) cannot run: global batch 6 "):
        resolve(Job(**BASE, batch_size_schedule=bad))
    # 4,096 and 8,000 tokens are both 1 sample of 4,096: not increasing in samples
    close = [{"from_tokens": 0, "global_batch": 16}, {"from_tokens": 4096, "global_batch": 32},
             {"from_tokens": 8000, "global_batch": 64}]
    with pytest.raises(PlannerError, match="both 1 samples"):
        resolve(Job(**BASE, batch_size_schedule=close))


def test_cli_error_and_hint(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 16\ntp: 2\npp: 2\nseq_len: 4096\nbatch_size_schedule:\n"
                   "  - {from_tokens: 0, global_batch: 64}\n  - {from_tokens: 2e8, global_batch: 16}\n")
    r = cli("explain", job)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ") and "its batch decreases (64 then 16)" in r.stderr and "hint: " in r.stderr


def test_reader_parses_megatron_spelling_and_refuses(tmp_path):
    base = ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 --seq-length 4096 "
            "--bf16 ")

    def read(extra):
        p = tmp_path / "run.args"
        p.write_text(base + extra + "\n")
        return load_trainer_config(p, fmt="megatron", model="llama3-8b", gpus=16)

    # commas read as spaces, suffixes in any case, sorted by threshold (Megatron's _parse_schedule)
    cfg = read("--step-batch-size-schedule '0.2b:64,0:16 1.5K:32'")
    assert cfg.job["batch_size_schedule"] == [{"from_tokens": 0.0, "global_batch": 16},
                                              {"from_tokens": 1500.0, "global_batch": 32},
                                              {"from_tokens": 2e8, "global_batch": 64}]
    assert cfg.job["global_batch"] == 64
    with pytest.raises(PlannerError, match="Megatron-LM refuses the two together"):
        read("--step-batch-size-schedule '0:16 2e8:64' --global-batch-size 32")
    with pytest.raises(PlannerError, match="--decrease-batch-size-if-needed"):
        read("--step-batch-size-schedule '0:16 2e8:64' --decrease-batch-size-if-needed")
    with pytest.raises(PlannerError, match="is not THRESHOLD:BATCH_SIZE"):
        read("--step-batch-size-schedule '0:16 64'")


def test_export_writes_the_schedule_back(tmp_path):
    job = Job(**BASE, tokens=TOKENS, batch_size_schedule=RAMP, sharding="zero1")
    plan = resolved_plan(job)
    text, _ = export_plan(plan, "megatron")
    assert "--step-batch-size-schedule '0:16 200000000:64'" in text and "--global-batch-size" not in text
    assert "--train-samples 244144" in text and "--train-iters" not in text
    assert megatron_script_errors(text) == []
    f = tmp_path / "exported.sh"
    f.write_text(text)
    back = Job.model_validate(load_trainer_config(f).job)
    assert plan_signature(resolved_plan(back)) == plan_signature(plan)
    assert _json(back)["throughput"]["batch_ramp"] == _json(job)["throughput"]["batch_ramp"]
    tt = resolved_plan(Job(**{**BASE, "stack": "torchtitan"}, sharding="fsdp", batch_size_schedule=RAMP))
    with pytest.raises(PlannerError, match="export torchtitan: batch_size_schedule"):
        export_plan(tt, "torchtitan")


# ---------------------------------------------------------------- fit with a batch ramp
# llama3-8b on 16 H100, tp 2 x cp 1 x pp 2 (dp 4), 4,096-token sequences: the first phase's 8
# sequences are 2 per DP rank, the last phase's 64 are 16
FIT_RAMP = [{"from_tokens": 0, "global_batch": 8}, {"from_tokens": 2e8, "global_batch": 64}]
FIT_BASE = dict(model="llama3-8b", gpus=16, seq_len=4096, stack="megatron", tokens=TOKENS)


def _fit(top=10, keep=False, **pins):
    from planner.search import fit
    from planner.space import SpaceOptions

    ramp = pins.pop("ramp", FIT_RAMP)
    job = Job(**FIT_BASE, **({"batch_size_schedule": ramp} if ramp else {"global_batch": 64}))
    return fit(job, None, SpaceOptions(tp=(2,), cp=(1,), pp=(2,), **pins), top=top, keep_feasible=keep)


def test_fit_drops_a_plan_the_first_phase_breaks():
    """Micro-batch 4 on dp 4 runs the last phase (64 = 4 steps of 4 x 4 sequences) but not the
    first: 8 sequences are 2 per DP rank, less than one micro-batch of 4 (8 % (4 x 4) = 8:
    Megatron's consistency check as the phase starts). Without the ramp micro-batch-4 plans fit and
    rank; with it none is ranked, and every one is counted under phase 1's batch rule. The
    interleaved plans (pp 2, vpp >= 2) of micro-batch 2 run 1 micro-batch at the first phase, not
    a multiple of pp 2: counted under phase 1's interleaved rule."""
    four = _fit(top=3, micro_batch=(4,), ramp=None)
    assert four.rows and all(r["plan"]["micro_batch"] == 4 and r["memory"]["fits"] for r in four.rows)
    batch = "phase 1 (batch 8 from 0 tokens): global batch does not divide into dp x micro-batch"
    flat = _fit(top=3, micro_batch=(1, 2, 4), ramp=None)
    ramp = _fit(top=3, micro_batch=(1, 2, 4))
    reasons = ramp.counts.reasons
    # every micro-batch-4 candidate, those the flat search breaks too (torch_fsdp2 under PP, its own candidate since
    # optim_grads_params' reduce-scatter queue, memory.py [rs]) counted under the phase's rule first
    assert reasons[batch] == four.counts.considered
    inter = "phase 1 (batch 8 from 0 tokens): interleaved schedule with micro-batches per step not divisible by pp"
    two = _fit(top=3, micro_batch=(2,), ramp=None, vpp=(2, 4, 8, 16)).counts  # pp 2 x vpp: even chunks of the 32 layers
    assert reasons[inter] == two.considered
    assert ramp.counts.considered == flat.counts.considered  # the same space, more of it broken
    assert ramp.counts.broke_constraint == (flat.counts.broke_constraint + reasons[batch] + reasons[inter]
                                            - four.counts.broke_constraint - two.broke_constraint)
    # ranked among the flat search's first 40, never in the ramped search's
    assert any(r["plan"]["micro_batch"] == 4 for r in _fit(top=40, micro_batch=(1, 2, 4), ramp=None).rows)
    assert all(r["plan"]["micro_batch"] != 4 for r in _fit(top=40, micro_batch=(1, 2, 4)).rows)


def test_fit_gates_memory_at_every_phase(monkeypatch):
    """The memory model holds no more at a smaller batch with the micro-batch fixed (every stack's
    schedules: fewer micro-batches in flight), so the peak is the last batch's; the search still
    takes the largest over the phases (search._phase_peaks). Made to hold 200 GiB more at the first
    phase's batch, no plan fits; the same memory at the last batch only changes nothing."""
    from planner import memory as mem
    from planner.errors import NoFitError

    real = mem.memory_total
    base = [r["plan"] for r in _fit(top=3).rows]

    def heavier_at(batch):
        return lambda settings, plan, *a, **k: real(settings, plan, *a, **k) + np.where(plan.gbs == batch, 200 * 2.0**30, 0.0)

    monkeypatch.setattr(mem, "memory_total", heavier_at(7))  # no phase runs 7 sequences
    assert [r["plan"] for r in _fit(top=3).rows] == base
    monkeypatch.setattr(mem, "memory_total", heavier_at(8))
    with pytest.raises(NoFitError, match="nothing fits"):
        _fit(top=3)


def test_fit_ranks_by_the_ramped_run_by_hand():
    """2e8 tokens are 48,828 samples of 4,096: ceil(48,828 / 8) = 6,104 steps at 8 sequences
    (48,832 samples), then (244,144 - 48,832) / 64 = 3,051.75 steps at 64. Each row's run is
    6,104 x its step at batch 8 + 3,051.75 x its step at 64 (explain of the same plan at each
    batch, no ramp); the rows are ranked by it, which is not the last batch's step order (the
    first phase's 2 micro-batches per step weigh a pipeline bubble the last phase's 16 hide)."""
    from planner.search import row_job

    res = _fit(top=6)
    job = Job(**FIT_BASE, batch_size_schedule=FIT_RAMP)
    runs = []
    for row in res.rows:
        assert row["plan"]["batch_size_schedule"] == FIT_RAMP and row["plan"]["global_batch"] == 64
        fields = {**row_job(job, row).model_dump(), "batch_size_schedule": None, "tokens": None}
        s8 = _json(Job(**{**fields, "global_batch": 8}))["time"]["step_s"]
        s64 = _json(Job(**{**fields, "global_batch": 64}))["time"]["step_s"]
        thr = row["throughput"]
        assert [p["steps"] for p in thr["batch_ramp"]] == [6104, 3051.75]
        assert [p["step_s"] for p in thr["batch_ramp"]] == [s8, s64] and row["time"]["step_s"] == s64
        seconds = 6104 * s8 + 3051.75 * s64
        assert thr["training_days_ramp"] * 86400 == pytest.approx(seconds, rel=1e-12)
        assert thr["gpu_hours_ramp"] == pytest.approx(seconds * 16 / 3600, rel=1e-12)
        runs.append(seconds)
    assert runs == sorted(runs)
    # not the last phase's order: the full list (every order and variant, no bound) has a pair
    # whose last-batch steps rank the other way
    full = _fit(top=50, keep=True)
    steps = [r["time"]["step_s"] for r in full.rows]
    assert any(a > b for a, b in zip(steps, steps[1:]))
    assert [r["plan"] for r in full.rows[:6]] == [r["plan"] for r in res.rows]  # the bounds prune nothing that ranks


def test_fit_cli_ramp(cli, tmp_path):
    args = ["fit", "--model", "llama3-8b", "--gpus", "16", "--seq-len", "4096", "--tp", "2", "--cp", "1", "--pp", "2",
            "--step-batch-size-schedule", "0:8 200M:64", "--tokens", str(TOKENS)]
    r = cli(*args, "--top", "2")
    assert r.exit_code == 0, r.stderr
    assert "ranked by the whole run's time over the batch ramp" in r.stdout
    assert "batch ramp applied (--step-batch-size-schedule '0:8 200000000:64')" in r.stdout
    assert "--step-batch-size-schedule '0:8 200000000:64'" in r.stdout.split("row 1 in full:")[1]
    j = cli(*args, "--top", "2", "--format", "json")
    import json

    rows = json.loads(j.stdout)
    assert [p["global_batch"] for p in rows[0]["throughput"]["batch_ramp"]] == [8, 64]
    assert all("step_s" in p for p in rows[0]["throughput"]["batch_ramp"])
    days = f"{rows[0]['throughput']['training_days_ramp']:,.1f}"
    assert days in r.stdout.split("┃ days")[1].splitlines()[2]
    # the ramp needs the run's tokens: bad input
    bad = cli(*args[:-2])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ") and "hint: give --tokens" in bad.stderr
    # a format without a ramp refuses the plan, naming why; Megatron writes it
    tt = cli(*args[:-6], "--stack", "torchtitan", "--step-batch-size-schedule", "0:8 200M:64", "--tokens", str(TOKENS),
             "--export", "torchtitan")
    assert tt.exit_code == 2 and "the format has no batch-size ramp" in tt.stderr
    mg = cli(*args, "--export", "megatron")
    assert mg.exit_code == 0 and "--step-batch-size-schedule '0:8 200000000:64'" in mg.stdout
    # --plot places the rows on the search's axes: the run per last-batch step, the peak memory
    png = tmp_path / "ramp.png"
    assert cli(*args, "--top", "2", "--plot", str(png)).exit_code == 0 and png.stat().st_size > 0


def test_one_pass_over_the_phases_is_each_phase_priced_alone():
    """explain.ramp_estimates prices every phase in one evaluation (the plan tiled over the phases): each
    phase's step and memory are, bit for bit, the plan evaluated alone at that batch, for one plan (0-d)
    and for several (1-d, the search's rows)."""
    from planner.explain import ramp_estimates

    three = [{"from_tokens": 0, "global_batch": 16}, {"from_tokens": 1e8, "global_batch": 32},
             {"from_tokens": 2e8, "global_batch": 64}]
    s, p, _ = resolve(Job(**BASE, tokens=TOKENS, batch_size_schedule=three))
    got = ramp_estimates(s, p)
    assert [(t, b) for t, b, *_ in got] == [(0, 16), (1e8, 32), (2e8, 64)]
    for (_, b, _, step, memory) in got:
        alone = evaluate(s, replace_gbs(p, b))
        assert float(step) == float(alone.time.total) and float(memory) == float(alone.memory.total)
    # two plans (micro-batch 1 and 2) at once: plan j of phase k is element j of phase k's figures
    from planner.plan import PlanArrays
    from dataclasses import fields

    two = PlanArrays(**{f.name: np.stack([np.asarray(getattr(p, f.name))] * 2) for f in fields(p)})
    two.mbs = np.array([1, 2], dtype=np.int64)
    for (_, b, _, step, memory) in ramp_estimates(s, two):
        for j in (0, 1):
            one = PlanArrays(**{f.name: np.asarray(getattr(two, f.name))[j] for f in fields(two)})
            alone = evaluate(s, replace_gbs(one, b))
            assert step[j] == float(alone.time.total) and memory[j] == float(alone.memory.total)
    assert ramp_estimates(s, two)[0][3][0] != ramp_estimates(s, two)[0][3][1]  # the two plans differ


def replace_gbs(p, b):
    from dataclasses import replace

    return replace(p, gbs=np.asarray(b, dtype=np.int64))


def test_rampup_phases_by_hand():
    """batch_ramp.rampup_phases, the rule of --rampup-batch-size START INCREMENT SAMPLES in BigScience's
    Megatron-DeepSpeed and Megatron-LM before 532ad926b4: the batch at c consumed samples is
    START + int(c / per) x INCREMENT, per = SAMPLES / n, n = (global - START) / INCREMENT, the global
    batch once c > SAMPLES. 32 16 300,000 to 128: n = 3, per = 100,000: each phase from k x 100,000
    (the last at SAMPLES, where int(300,000 / 100,000) = 3 already gives 128). 16 16 10 to 64: per = 10/3,
    phase k from the least whole c >= k x 10/3: 4, 7, 10."""
    from planner.batch_ramp import rampup_phases

    assert rampup_phases(32, 32, 300_000, 128) == [(0, 32), (100_000, 64), (200_000, 96), (300_000, 128)]
    assert rampup_phases(16, 16, 10, 64) == [(0, 16), (4, 32), (7, 48), (10, 64)]
    # one increment over 5 samples: 16 from c = 5 (int(5 / 5.0) = 1)
    assert rampup_phases(8, 8, 5, 16) == [(0, 8), (5, 16)]


def test_cli_batch_option_over_the_files_other_spelling(cli, tmp_path):
    """`explain JOB.yaml --global-batch-tokens N` where the job file sets global_batch was refused ("both global_batch
    and global_batch_tokens are set", exit 2); found with the cli-options fuzz work (seed 78 session, by hand). Now the
    option's batch is the plan's, with a note naming the file's value: 1,048,576 tokens / 4,096 = 256 sequences. The
    same for a torchtitan TOML (global batch 8 = local batch 1 x dp 8) at 8,192 tokens: 128 sequences, and for a
    saved fit row (its global_batch) under --from-fit; --global-batch 64 over a schedule whose last batch is 32 runs 64
    without the ramp."""
    import json

    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 2\nsharding: zero1\nglobal_batch: 16\nseq_len: 4096\n")
    r = cli("explain", job, "--global-batch-tokens", "1048576", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["global_batch"] == 256
    assert (f"{job}: global_batch: the file's 16 is not kept: the command line's global_batch_tokens 1048576.0 "
            "replaces it") in r.stderr
    toml = Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml"
    r = cli("explain", toml, "--gpus", "8", "--global-batch-tokens", "1048576", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["global_batch"] == 128 and "global_batch: the file's 8 is not kept" in r.stderr
    fit = tmp_path / "fit.json"
    r = cli("fit", job, "--top", "1", "--format", "json")
    fit.write_text(r.stdout)
    r = cli("explain", "--from-fit", fit, "--global-batch-tokens", "1048576", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["global_batch"] == 256 and "global_batch: the file's 16 is not kept" in r.stderr
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 2\nsharding: zero1\nseq_len: 4096\nbatch_size_schedule:\n"
                   "  - {from_tokens: 0, global_batch: 16}\n  - {from_tokens: 1e6, global_batch: 32}\n")
    r = cli("explain", job, "--global-batch", "64", "--format", "json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["global_batch"] == 64 and plan.get("batch_size_schedule") is None
    assert 'batch_size_schedule: the file\'s "0:16 1M:32" is not kept' in r.stderr
