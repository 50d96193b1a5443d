"""Megatron-LM flags that were listed "not modelled" (issue 22), each checked at NVIDIA/Megatron-LM
@d98e8a64: --no-overlap-p2p-communication priced (the job's pp_p2p_overlap), its start-up rule, the
reader and the export; the flags that no longer exist, or never did, said for what they are; the
ones kept "not modelled" with what they change, cited."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planner import comm
from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve, rule_codes
from planner.schema import Job
from planner.startup import CODES
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature
from planner.trainers.rules import megatron_errors, megatron_script_errors

NV_BW = 450e9 * comm.NVLINK_RING_EFFICIENCY  # H100 NVLink, achievable (hardware_db h100-sxm nvlink_GBps 450)
NV_LAT = comm.NVLINK_LATENCY_S
X = 0.189  # stack_db megatron.yaml overlap.overlapped_exposed_fraction (Lee et al. 2025)
# llama3-8b on 8 H100 (one node: the pp link is NVLink), pp 4 x vpp 2, dp 2, global batch 8: m = 4
KW = dict(model="llama3-8b", gpus=8, pp=4, vpp=2, global_batch=8, seq_len=8192, stack="megatron")


def _json_of(job: Job) -> dict:
    s, p, _ = resolve(job)
    return to_json(s, p, evaluate(s, p))


def _time(**kw):
    return _json_of(Job(**kw))


def test_p2p_blocking_by_hand():
    """With the overlap off each send/recv of a model chunk is waited on (arguments.py @d98e8a64
    l. 3118-3120, argument_utils.py l. 307, p2p_communication.py l. 607-649): per micro-batch and
    model chunk one send forward and one backward of T h x 2 B, here 8,192 x 4,096 x 2 =
    67,108,864 B at NVLink's achievable rate plus its latency; m 4 x vpp 2 x 2 = 16 of them on a middle stage. The
    critical stage is the last (4 chunks of 4 layers a stage, the last with the output layer), which sends no
    activation from its last model chunk and receives no gradient for it (p2p_communication.py l. 536-567, the last
    virtual stage's side skipped; stack_db megatron.yaml pipeline_p2p_batched): 2 v - 1 = 3 exchanges a micro-batch,
    m 4 x 3 = 12. With the overlap on (Megatron's default) only the stack's exposed share 0.189 of each lands on the
    step."""
    send = NV_LAT + 8192 * 4096 * 2 / NV_BW
    off = _time(pp_p2p_overlap=False, **KW)
    # the warm-up and flush overlapped too (pp_p2p_overlap_warmup_flush): every chunk's p2p overlapped
    on = _time(pp_p2p_overlap_warmup_flush=True, **KW)
    assert off["time"]["pp_comm_s"] == pytest.approx(12 * send, rel=1e-9)
    assert on["time"]["pp_comm_s"] == pytest.approx(X * 12 * send, rel=1e-9)
    # the bubble, (p - 1) / (v m) x m = 1.5 micro-batches of the critical stage (compute + its p2p), and the fill's and
    # drain's hops, whole either way (step.py [31], pp_fill_drain). Off: the bubble's 1.5 x 3 sends and 1.5 x 1 more
    # for the fill's 2 (p - 1) = 6 hops = 6 S; the wrap-around round trips of the later chunk fit the lockstep of the
    # blocking sends. On (warm-up and flush overlapped too): the bubble's 1.5 x 3 X S, the fill's difference
    # 1.5 x (4 - 3 X) S, and (v - 1) = 1 later round each way whose first micro-batch comes round the p = 4 ranks
    # whole (N = p = 4: no slack), 2 x 4 S = 8 S: 6 S + 8 S = 14 S = 2 (p v - 1) S. off - on = 6 S - 14 S = -8 S
    d_bubble = off["time"]["bubble_s"] - on["time"]["bubble_s"]
    assert d_bubble == pytest.approx(-8 * send, rel=1e-6)
    assert on["time"]["pp_fill_drain_s"] == pytest.approx((1.5 * (4 - 3 * X) + 8) * send, rel=1e-9)
    assert off["time"]["pp_fill_drain_s"] == pytest.approx(1.5 * send, rel=1e-9)
    assert off["plan"]["pp_p2p_overlap"] is False and "pp_p2p_overlap" not in on["plan"]
    # true is the stack's rule: the same plan as none
    assert _time(pp_p2p_overlap=True, **KW)["time"] == _time(**KW)["time"]


def test_warmup_and_flush_p2p_waited_on_by_default():
    """Without --overlap-p2p-communication-warmup-flush (Megatron's default, model_parallel_config.py
    @d98e8a64 l. 422-429) the interleaved schedule's warm-up forwards and flush backwards wait on
    their p2p (schedules.py l. 1572-1660, 1971-2058; step.py [13]). The step waits on the last stage's warm-up
    (step.pp_warmup_flush: the other stages' extra 2 (p - r - 1) run in their bubble): W = (vpp - 1) N forwards
    (l. 964-965 at r = p - 1), N = pp = 4, and as many cool-down backwards, each a whole send: 2 W = 8 whole S over
    the critical stage's (the last's, test_p2p_blocking_by_hand) steady share. With m 4: its 2 v - 1 = 3 exchanges
    a micro-batch, 12 at X, plus 8 x (1 - X): (8 + 4 X) S (before issue 22 ppedges: the first stage's W = min(6 + 4,
    8) = 8, scaled 3/4, all 12 whole); with m 16 (global batch 32), 48 X + 8 (1 - X) = (8 + 40 X) S (before: 15 whole
    + 33 X); with the flag all 48 at X."""
    send = NV_LAT + 8192 * 4096 * 2 / NV_BW
    assert _time(**KW)["time"]["pp_comm_s"] == pytest.approx((8 + 4 * X) * send, rel=1e-9)
    kw = {**KW, "global_batch": 32}
    assert _time(**kw)["time"]["pp_comm_s"] == pytest.approx((8 + 40 * X) * send, rel=1e-9)
    flush = _time(pp_p2p_overlap_warmup_flush=True, **kw)
    assert flush["time"]["pp_comm_s"] == pytest.approx(48 * X * send, rel=1e-9)
    assert flush["plan"]["pp_p2p_overlap_warmup_flush"] is True
    # without virtual stages nothing changes (the 1F1B schedule's p2p is blocking either way)
    assert _time(**{**kw, "vpp": 1})["time"] == _time(pp_p2p_overlap_warmup_flush=True, **{**kw, "vpp": 1})["time"]


def test_warmup_flush_refusals_and_round_trip(tmp_path):
    """Megatron refuses the warm-up/flush overlap without the p2p overlap (model_parallel_config.py
    l. 570-575); a stack without the switch refuses the field; the reader reads the flag and the
    export writes it back."""
    with pytest.raises(PlannerError, match="only compatible with overlap_p2p_comm"):
        resolve(Job(**KW, pp_p2p_overlap=False, pp_p2p_overlap_warmup_flush=True))
    with pytest.raises(PlannerError, match="has no switch for it"):
        resolve(Job(**{**KW, "stack": "torchtitan", "sharding": "fsdp"}, pp_p2p_overlap_warmup_flush=True))
    plan = resolved_plan(Job(**{**KW, "global_batch": 32}, pp_p2p_overlap_warmup_flush=True))
    text, _ = export_plan(plan, "megatron")
    assert "--overlap-p2p-communication-warmup-flush" in text
    p = tmp_path / "w.sh"
    p.write_text(text)
    cfg = load_trainer_config(p)
    assert cfg.job["pp_p2p_overlap_warmup_flush"] is True
    assert not any("warmup-flush" in u for u in cfg.not_modelled + cfg.unmodelled)
    assert plan_signature(resolved_plan(Job.model_validate(cfg.job))) == plan_signature(plan)


def test_p2p_flag_without_virtual_stages_changes_nothing():
    """Without virtual stages Megatron sets the overlap off itself (arguments.py @d98e8a64 l. 1010-1017):
    the 1F1B schedule's p2p already blocks, so the flag prices the same step."""
    kw = {**KW, "vpp": 1}
    assert _time(pp_p2p_overlap=False, **kw)["time"] == _time(**kw)["time"]


def test_p2p_overlap_off_needs_pp_above_2():
    """arguments.py @d98e8a64 l. 1000-1009: the interleaved schedule with the overlap off asserts
    pp > 2. resolve refuses the job naming the rule and its source; the search's rule codes mask
    the pp 2 row and keep the pp 4 one; with the overlap on pp 2 runs."""
    with pytest.raises(PlannerError) as e:
        resolve(Job(**{**KW, "gpus": 4, "pp": 2}, pp_p2p_overlap=False))
    assert "MEGATRON_P2P_OVERLAP_PP" in e.value.message and "arguments.py validate_args l. 1000-1009" in e.value.message
    assert "pp > 2" in e.value.hint
    resolve(Job(**{**KW, "gpus": 4, "pp": 2}))  # the default overlap: accepted
    s, p, _ = resolve(Job(**KW, pp_p2p_overlap=False))
    rows = replace(p, **{k: np.array([2, 4]) if k == "pp" else np.array([4, 2]) if k in ("dp", "shard") else
                         np.broadcast_to(getattr(p, k), (2,)).copy() for k in p.__dataclass_fields__})
    codes = rule_codes(s.model, 8, s.stack, rows, hardware=s.hardware)
    assert list(codes) == [CODES["MEGATRON_P2P_OVERLAP_PP"], 0]


def test_p2p_overlap_rule_on_the_cli(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 4\npp: 2\nvpp: 2\nglobal_batch: 8\nstack: megatron\npp_p2p_overlap: false\n")
    r = cli("explain", job)
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and "MEGATRON_P2P_OVERLAP_PP" in r.stderr and "l. 1000-1009" in r.stderr
    assert "hint: use pp > 2" in r.stderr and "Traceback" not in r.stderr
    # the same from the command line's option
    r = cli("explain", "--model", "llama3-8b", "--gpus", 4, "--pp", 2, "--vpp", 2, "--global-batch", 8,
            "--no-pp-p2p-overlap")
    assert r.exit_code == 2 and "MEGATRON_P2P_OVERLAP_PP" in r.stderr and "hint: " in r.stderr
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--pp", 4, "--vpp", 2, "--global-batch", 8,
            "--no-pp-p2p-overlap", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["pp_p2p_overlap"] is False
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--stack", "torchtitan", "--sharding", "fsdp",
            "--no-pp-p2p-overlap")
    assert r.exit_code == 2 and "error: pp_p2p_overlap false is set but stack torchtitan has no switch" in r.stderr


def test_other_stacks_refuse_the_field():
    """Only a stack with the switch (stack_db overlap.pp_p2p_overlap_switch: megatron) takes it."""
    for stack, extra in (("torchtitan", dict(sharding="fsdp")), ("deepseek", {})):
        with pytest.raises(PlannerError, match=f"stack {stack} has no switch for its pipeline p2p overlap"):
            resolve(Job(model="llama3-8b", gpus=8, stack=stack, pp_p2p_overlap=False, **extra))


def test_argument_rule_p2p_overlap():
    """rules.py's transcription of the same assert, on Megatron's own argument names."""
    base = {"--num-layers": "32", "--hidden-size": "4096", "--num-attention-heads": "32", "--seq-length": "8192",
            "--max-position-embeddings": "8192", "--micro-batch-size": "1", "--global-batch-size": "64",
            "--num-virtual-stages-per-pipeline-rank": "2", "--no-overlap-p2p-communication": True}
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    keys = lambda pp, **f: [k for k, _ in megatron_errors({**base, "--pipeline-model-parallel-size": str(pp), **f}, 8, env)]  # noqa: E731
    assert keys(2) == ["P2P_OVERLAP"]
    assert keys(4) == []
    del base["--no-overlap-p2p-communication"]
    assert keys(2) == []


ARGS = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 "
        "--micro-batch-size 1 --global-batch-size 48 --seq-length 8192 --bf16 --use-distributed-optimizer")


def _read(tmp_path, extra: str, name="run.args", trainer_date=None):
    p = tmp_path / name
    p.write_text(ARGS + " " + extra + "\n")
    return load_trainer_config(p, fmt="megatron", model="llama3-8b", gpus=16,
                               overrides={"trainer_date": trainer_date} if trainer_date else None)


def _listed(cfg, flag):
    return [x for x in cfg.not_modelled + cfg.ignored if flag in x]


def test_reader_maps_each_flag(tmp_path):
    cfg = _read(tmp_path, "--no-overlap-p2p-communication")
    assert cfg.job["pp_p2p_overlap"] is False and not _listed(cfg, "overlap-p2p")
    # the older store_true spelling of today's default (Megatron-LM f9283c5a8a .. 4eeff55d1f): @d98e8a64's parser
    # refuses it; read for a --trainer-date in its dates (megatron_argparse.OLDER_FLAGS)
    with pytest.raises(PlannerError, match="--overlap-p2p-communication: unrecognized argument") as e:
        _read(tmp_path, "--overlap-p2p-communication")
    assert "between 2023-05-31 and 2023-10-12" in e.value.hint
    cfg = _read(tmp_path, "--overlap-p2p-communication", trainer_date="2023-08-01")
    assert "pp_p2p_overlap" not in cfg.job and not _listed(cfg, "overlap-p2p")
    assert any("older spelling" in a and "4eeff55d1f" in a for a in cfg.assumed)
    assert any("read for the command line's --trainer-date 2023-08-01" in a for a in cfg.assumed)
    with pytest.raises(PlannerError, match="--overlap-p2p-communication: unrecognized argument"):
        _read(tmp_path, "--overlap-p2p-communication", trainer_date="2023-10-12")  # the day it was replaced
    # ignored by Megatron-LM since 2024, removed in 639c08ab82 (2026-01-29): refused at @d98e8a64, read before
    with pytest.raises(PlannerError, match="--no-async-tensor-model-parallel-allreduce: unrecognized argument"):
        _read(tmp_path, "--no-async-tensor-model-parallel-allreduce")
    cfg = _read(tmp_path, "--no-async-tensor-model-parallel-allreduce", trainer_date="2025-06-01")
    [x] = _listed(cfg, "--no-async-tensor-model-parallel-allreduce")
    assert x in " ".join(cfg.ignored) and "639c08ab82" in x
    # never a Megatron-LM flag: refused whatever the date
    for flag in ("--bf16-reduce", "--add-bias-linear"):
        with pytest.raises(PlannerError, match=f"{flag}: unrecognized argument"):
            _read(tmp_path, flag, trainer_date="2023-08-01")
    # TE's fused MoE kernels: on an MoE launch (--num-experts) the job's moe_permute_fusion / moe_router_fusion
    # (read, not listed); absent, the fields stay unset (the stack's default: Megatron-LM's off,
    # plan.moe_fusion_settings); on this dense launch (no --num-experts) listed as ignored, as the router padding is
    from tests.test_imbalance import ARGS as MOE_ARGS  # a Mixtral-shaped launch

    def _moe(extra):
        p = tmp_path / "moe.args"
        p.write_text(MOE_ARGS + " " + extra + "\n")
        return load_trainer_config(p, fmt="megatron", model="mixtral-8x7b", gpus=16)

    cfg = _moe("--moe-permute-fusion --moe-router-fusion --micro-batch-size 2")
    assert cfg.job["micro_batch"] == 2  # store_true: the next flag is read, not taken as their value
    assert cfg.job["moe_permute_fusion"] is True and cfg.job["moe_router_fusion"] is True
    for flag in ("--moe-permute-fusion", "--moe-router-fusion"):
        assert not _listed(cfg, flag)
    # store_true: a value is argparse's "ignored explicit argument", exit 2 (before 2026-12-07 `=false` read as off)
    with pytest.raises(PlannerError, match=r"--moe-permute-fusion: ignored explicit argument 'false'"):
        _moe("--moe-permute-fusion=false")
    assert "moe_router_fusion" not in _moe("--moe-permute-fusion").job
    cfg = _read(tmp_path, "--moe-permute-fusion --moe-router-fusion --micro-batch-size 2")
    assert cfg.job["micro_batch"] == 2 and not {"moe_permute_fusion", "moe_router_fusion"} & set(cfg.job)
    for flag in ("--moe-permute-fusion", "--moe-router-fusion"):
        [x] = _listed(cfg, flag)
        assert x in " ".join(cfg.ignored) and "no --num-experts" in x
    # kept "not modelled", each with what it changes at the code
    cfg = _read(tmp_path, "--empty-unused-memory-level 1 --manual-gc --manual-gc-interval 100")
    # read since: the job's empty_unused_memory_level (tests/test_memory_dummy_wgrads.py)
    assert cfg.job["empty_unused_memory_level"] == 1 and not _listed(cfg, "--empty-unused-memory-level")
    assert any("--manual-gc" in x and "l. 4402-4411" in x for x in cfg.not_modelled)
    assert any("--manual-gc-interval=100" in x for x in cfg.not_modelled)
    assert cfg.job["global_batch"] == 48
    cfg = _read(tmp_path, "--overlap-p2p-communication-warmup-flush --microbatch-group-size-per-virtual-pipeline-stage 4")
    assert cfg.job["microbatch_group"] == 4  # a store_true: the next flag is read, not taken as its value
    assert cfg.job["pp_p2p_overlap_warmup_flush"] is True and not _listed(cfg, "warmup-flush")  # priced: step.py [13]
    p = tmp_path / "sched.args"
    p.write_text(ARGS.replace("--global-batch-size 48", "--step-batch-size-schedule '0:16 2.4B:48'") + "\n")
    cfg = load_trainer_config(p, fmt="megatron", model="llama3-8b", gpus=16)
    assert cfg.job["global_batch"] == 48  # the last batch; the ramp is the job's (tests/test_batch_ramp.py)
    assert cfg.job["batch_size_schedule"] == [{"from_tokens": 0.0, "global_batch": 16},
                                              {"from_tokens": 2.4e9, "global_batch": 48}]
    assert not _listed(cfg, "--step-batch-size-schedule")


def test_export_round_trip(tmp_path):
    """The plan with the overlap off exports --no-overlap-p2p-communication, which passes rules.py's
    start-up checks and reads back as the same plan with the same step time and memory; on pp 2
    the same file breaks P2P_OVERLAP."""
    job = Job(model="llama3-8b", gpus=16, pp=4, vpp=2, micro_batch=1, global_batch=48, sharding="zero1",
              stack="megatron", pp_p2p_overlap=False)
    plan = resolved_plan(job)
    assert plan["pp_p2p_overlap"] is False
    text, _ = export_plan(plan, "megatron")
    assert "--no-overlap-p2p-communication" in text
    assert megatron_script_errors(text) == []
    f = tmp_path / "exported.sh"
    f.write_text(text)
    back = Job.model_validate(load_trainer_config(f).job)
    assert back.pp_p2p_overlap is False
    assert plan_signature(resolved_plan(back)) == plan_signature(plan)
    a, b = (_json_of(j) for j in (job, back))
    assert a["memory"] == b["memory"] and a["time"] == b["time"]
    # the default plan writes no flag
    assert "overlap-p2p" not in export_plan(resolved_plan(job.model_copy(update={"pp_p2p_overlap": None})), "megatron")[0]
    assert [k for k, _ in megatron_script_errors(text.replace("--pipeline-model-parallel-size 4",
                                                               "--pipeline-model-parallel-size 2"))].count("P2P_OVERLAP") == 1


def test_explain_json_names_the_setting(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("".join(f"{k}: {v}\n" for k, v in KW.items()) + "pp_p2p_overlap: false\n")
    r = cli("explain", job, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["pp_p2p_overlap"] is False
    r = cli("explain", job)
    assert r.exit_code == 0, r.stderr
    assert "PP p2p overlap off (blocking)" in r.stdout


def test_fp8_dot_product_attention_is_refused_as_megatron_refuses_it(tmp_path):
    """--fp8-dot-product-attention: no flag of Megatron-LM @d98e8a64 (TransformerConfig.fp8_dot_product_attention is
    excluded from the generated flags, arguments.py l. 2333): refused, as argparse refuses it (before 2026-12-07 read
    as a store_true flag, ignored without --fp8-format)."""
    with pytest.raises(PlannerError, match="--fp8-dot-product-attention: unrecognized argument") as e:
        _read(tmp_path, "--fp8-dot-product-attention --microbatch-group-size-per-virtual-pipeline-stage 4")
    assert e.value.hint.startswith("TransformerConfig.fp8_dot_product_attention has no flag")


def test_rampup_batch_size_is_ignored_as_megatron_lm_ignores_it(tmp_path):
    """--rampup-batch-size at Megatron-LM @d98e8a64: parsed (nargs 3, training_config.py l. 20-29,
    'Deprecated. Use step_batch_size_schedule instead.'), passed to no calculator (global_vars.py
    l. 148-157): the run steps at --global-batch-size, and the reader says so, spelling the ramp as the
    --step-batch-size-schedule that runs it (batch_ramp.rampup_phases). 16 16 96 to 48 (ARGS' batch):
    n = 2, per = 48 samples: phases from 0, 48, 96 samples; x --seq-length 8192: 0, 393,216, 786,432
    tokens. A run of 1,000 samples: ceil(48 / 16) = 3 steps, ceil(48 / 32) = 2 steps (to 112 samples,
    past 96: Megatron checks the batch before each step), then (1,000 - 112) / 48 = 18.5 steps."""
    from planner.batch_ramp import parse_megatron, phase_steps

    p = tmp_path / "ramp.args"
    p.write_text(ARGS + " --rampup-batch-size 16 16 96\n")
    cfg = load_trainer_config(p, fmt="megatron", model="llama3-8b", gpus=16)
    assert cfg.job["global_batch"] == 48 and "batch_size_schedule" not in cfg.job
    (note,) = [x for x in cfg.ignored if x.startswith("--rampup-batch-size")]
    assert "the run steps at --global-batch-size 48" in note and "3 phases" in note
    sched = note.split("--step-batch-size-schedule '")[1].split("'")[0]
    assert sched == "0:16 393216:32 786432:48"
    assert phase_steps(parse_megatron(sched), 8192, 1000 * 8192) == [3.0, 2.0, 18.5]
    # beside --step-batch-size-schedule: the schedule is the ramp Megatron-LM runs, the job's
    p.write_text(ARGS.replace("--global-batch-size 48", "--step-batch-size-schedule '0:16 2.4B:48'")
                 + " --rampup-batch-size 16 16 96\n")
    cfg = load_trainer_config(p, fmt="megatron", model="llama3-8b", gpus=16)
    assert [b["global_batch"] for b in cfg.job["batch_size_schedule"]] == [16, 48]
    assert any(x.startswith("--rampup-batch-size=16 16 96") and "--step-batch-size-schedule is the ramp" in x
               for x in cfg.ignored)
    # a ramp that does not reach the batch: still ignored (Megatron-LM runs it), without a schedule
    p.write_text(ARGS + " --rampup-batch-size 16 20 96\n")
    cfg = load_trainer_config(p, fmt="megatron", model="llama3-8b", gpus=16)
    (note,) = [x for x in cfg.ignored if x.startswith("--rampup-batch-size")]
    assert note.endswith("the run steps at --global-batch-size)") and "batch_size_schedule" not in cfg.job
