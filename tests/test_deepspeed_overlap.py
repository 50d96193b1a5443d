"""DeepSpeed's overlap_comm as DeepSpeed applies it (issues 21, 22; dsfollow), at microsoft/DeepSpeed @38327e07 and
microsoft/Megatron-DeepSpeed @f4157bea:

- the JSON's default per stage: DeepSpeedZeroConfig.overlap_comm None (deepspeed/runtime/zero/config.py l. 134), set
  by overlap_comm_valid (l. 350-354) to stage == 3: true at stage 3, false at 0-2 (trainers/deepspeed.py
  overlap_default), listed as assumed where absent or "auto";
- read only where the engine builds the ZeRO optimizer (engine.py _configure_zero_optimizer l. 1632, 1686, 1730, 1775):
  stage 0 and the BF16_Optimizer reduce after the backward, so a JSON's true there is listed as ignored;
- off under the pipeline engine: _configure_zero_optimizer l. 1639-1642 sets overlap_comm False for a PipelineModule,
  so on megatron-deepspeed (stack_db overlap.dp_comm_overlap_with_pp false) a plan at pp > 1 is priced and shown
  without it (plan.dp_overlap), explain warns, and fit ranks no overlapped PP row;
- a Megatron-DeepSpeed script with ZeRO-2/3 and without --no-pipeline-parallel builds GPTModelPipe (pretrain_gpt.py
  l. 51-56) for the PipelineEngine, which asserts stage < 2 (pipe/engine.py l. 77-78): refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.deepspeed import read as read_json

DATA = Path(__file__).parent / "data" / "trainer_configs"
MDS = DATA / "run_deepspeed_example.sh"


def _json(zero: dict, **top) -> str:
    return json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": zero, **top})


def _read(zero: dict, **top):
    return read_json(Path("ds.json"), _json(zero, **top), model="llama3-8b", gpus=8)


@pytest.mark.parametrize("stage, want", [(1, False), (2, False), (3, True)])
def test_overlap_comm_default_per_stage(stage, want):
    """Absent: DeepSpeed's default at the stage (true at 3 only), listed as assumed naming the validator; "auto" the
    same; stated, the JSON's, not listed."""
    for zero in ({"stage": stage}, {"stage": stage, "overlap_comm": "auto"}):
        cfg = _read(zero)
        assert cfg.job["dp_comm_overlap"] is want
        [line] = [a for a in cfg.assumed if a.startswith("dp_comm_overlap=")]
        assert line.startswith(f"dp_comm_overlap={str(want).lower()}: zero_optimization.overlap_comm")
        assert f"DeepSpeed's default at stage {stage}, {str(want).lower()}" in line and "overlap_comm_valid" in line
        assert cfg.stated["zero_optimization.overlap_comm"] is None
    for given in (True, False):
        cfg = _read({"stage": stage, "overlap_comm": given})
        assert cfg.job["dp_comm_overlap"] is given
        assert not any(a.startswith("dp_comm_overlap=") for a in cfg.assumed)


def test_mics_takes_stage_3s_default():
    """MiCS is ZeRO-3 in groups (stage 3): overlap_comm absent is true there too."""
    cfg = _read({"stage": 3, "mics_shard_size": 2})
    assert cfg.job["sharding_mode"] == "zero3_mics" and cfg.job["dp_comm_overlap"] is True


@pytest.mark.parametrize("zero, top, mode", [
    ({"stage": 0, "overlap_comm": True}, {"fp16": {"enabled": True}, "bf16": {"enabled": False}}, "zero0"),
    ({"stage": 0, "overlap_comm": True}, {}, "bf16_optimizer"),  # bf16 at stage 0: the BF16_Optimizer
    ({"stage": 1, "overlap_comm": True}, {"data_types": {"grad_accum_dtype": "fp32"}}, "bf16_optimizer"),
])
def test_overlap_comm_not_read_without_the_zero_optimizer(zero, top, mode):
    """Stage 0 (FP16_Optimizer) and the BF16_Optimizer never read overlap_comm: dp_comm_overlap false, the key listed
    as ignored naming the optimizer that runs."""
    cfg = _read(zero, **top)
    assert cfg.job["sharding_mode"] == mode and cfg.job["dp_comm_overlap"] is False
    [line] = [x for x in cfg.ignored if x.startswith("zero_optimization.overlap_comm")]
    assert "only to build the ZeRO optimizer" in line
    assert ("FP16_Optimizer" if mode == "zero0" else "BF16_Optimizer") in line


def test_zero3_json_without_overlap_comm_prices_as_with_it(explain):
    """The ZeRO-3 fixture (overlap_comm true) and the same JSON without the key read as one job: the same step."""
    text = json.loads((DATA / "ds_config_zero3.json").read_text())
    with_key = read_json(Path("a.json"), json.dumps(text), model="llama3-8b", gpus=8).job
    del text["zero_optimization"]["overlap_comm"]
    without = read_json(Path("b.json"), json.dumps(text), model="llama3-8b", gpus=8).job
    assert with_key == without and without["dp_comm_overlap"] is True
    a, b = (explain(**{**j, "seq_len": 2048})[3] for j in (with_key, without))
    assert a["time"] == b["time"] and a["memory"]["total_bytes"] == b["memory"]["total_bytes"]


# ---- the pipeline engine turns overlap_comm off (stack_db megatron-deepspeed overlap.dp_comm_overlap_with_pp)

def _mds(explain, **kw):
    job = dict(model="llama3-8b", gpus=16, stack="megatron-deepspeed", recompute="full", micro_batch=1,
               global_batch=16, seq_len=1024, hardware="h200-sxm", sharding="zero1")
    return explain(**{**job, **kw})


def _warnings(**kw) -> list:
    job = dict(model="llama3-8b", gpus=16, stack="megatron-deepspeed", recompute="full", micro_batch=1,
               global_batch=16, seq_len=1024, hardware="h200-sxm", sharding="zero1", dp_comm_overlap=True)
    return resolve(Job.model_validate({**job, **kw}))[2]


def test_pp_prices_and_shows_overlap_off(explain):
    """pp 2, ZeRO-1, dp_comm_overlap asked: the plan shows it off, the whole DP time is exposed, the last stage (the
    loss's, whose engine runs the optimizer's backward) holds one IPG buffer of 5e8 x 2 B = 1e9 B, not two, and
    every figure equals the job that leaves it off; explain warns naming DeepSpeed's engine."""
    on, off = (_mds(explain, pp=2, dp_comm_overlap=d) for d in (True, False))
    j = on[3]
    assert j["plan"]["dp_comm_overlap"] is False
    assert j["time"]["dp_comm_exposed_s"] == j["time"]["dp_comm_s"] > 0
    assert float(on[2].stages[1].zero12_ipg_bucket) == 1e9
    assert j["time"] == off[3]["time"] and j["memory"] == off[3]["memory"]
    assert any("dp_comm_overlap on with pp 2" in w and "engine.py l. 1639-1642" in w for w in _warnings(pp=2))
    assert not any("dp_comm_overlap on" in w for w in _warnings(pp=2, dp_comm_overlap=False))


def test_pp_1_keeps_the_overlap(explain):
    """At pp 1 the overlap runs: two IPG buffers (2e9 B) and part of the DP time hidden."""
    est, j = (lambda r: (r[2], r[3]))(_mds(explain, gpus=8, global_batch=8, dp_comm_overlap=True))
    assert j["plan"]["dp_comm_overlap"] is True
    assert float(est.memory.zero12_ipg_bucket) == 2e9
    assert j["time"]["dp_comm_exposed_s"] < j["time"]["dp_comm_s"]
    assert not any("dp_comm_overlap on" in w for w in _warnings(gpus=8, global_batch=8))


def test_other_stacks_overlap_under_pp(explain):
    """The field's default (true): Megatron-LM's overlapped reduction runs with PP, hiding part of the DP time."""
    j = explain(model="llama3-8b", gpus=16, pp=2, recompute="full", micro_batch=1, global_batch=16, seq_len=1024,
                hardware="h200-sxm", sharding="zero1", dp_comm_overlap=True)[3]
    assert j["plan"]["dp_comm_overlap"] is True
    assert j["time"]["dp_comm_exposed_s"] < j["time"]["dp_comm_s"]


def test_fit_ranks_no_overlapped_pp_row(cli, explain):
    """fit on megatron-deepspeed at pp 2 with --dp-comm-overlap: every row shows it off, and row 1's step is
    explain's of the same plan."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--stack", "megatron-deepspeed", "--pp", "2",
            "--global-batch", "64", "--seq-len", "2048", "--dp-comm-overlap", "--hardware", "h200-sxm", "--top", "5",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and all(x["plan"]["pp"] == 2 and x["plan"]["dp_comm_overlap"] is False for x in rows)
    p = rows[0]["plan"]
    j = explain(model="llama3-8b", gpus=16, stack="megatron-deepspeed", pp=2, tp=p["tp"], micro_batch=p["micro_batch"],
                global_batch=64, seq_len=2048, hardware="h200-sxm", sharding=p["sharding"],
                sharding_mode=p["sharding_mode"], recompute=p["recompute"], rank_order=p["rank_order"],
                dp_comm_overlap=True, attention=p["attention"])[3]  # (fit plans flash, the stack's fastest core)
    assert j["time"]["step_s"] == pytest.approx(rows[0]["time"]["step_s"], rel=1e-12)


# ---- Megatron-DeepSpeed: the pipeline model refuses ZeRO-2/3

def _script(tmp_path, stage: int, flag: bool, name: str = "run.sh") -> Path:
    text = MDS.read_text().replace("ZERO_STAGE=2", f"ZERO_STAGE={stage}")
    if not flag:
        text = text.replace('ds_args=" --no-pipeline-parallel ${ds_args}"', "")
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("stage", [2, 3])
def test_zero23_without_no_pipeline_parallel_refused(tmp_path, cli, stage):
    """ZeRO-2/3 without --no-pipeline-parallel: GPTModelPipe under the PipelineEngine, whose assertion stops the job;
    exit 2 with the hint to add the flag."""
    p = _script(tmp_path, stage, flag=False)
    with pytest.raises(PlannerError, match=rf"zero_optimization.stage {stage} without --no-pipeline-parallel") as e:
        load_trainer_config(p, gpus=8)
    assert "pipe/engine.py l. 77-78" in e.value.message and "add --no-pipeline-parallel" in e.value.hint
    r = cli("check", str(p), "--gpus", "8", "--hardware", "h100-sxm")
    assert r.exit_code == 2 and "add --no-pipeline-parallel" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("stage", [2, 3])
def test_zero23_with_no_pipeline_parallel_reads_as_gptmodel(tmp_path, stage):
    """With the flag: Megatron's GPTModel, no pipeline engine: the JSON's stage runs and its overlap_comm acts (absent:
    DeepSpeed's default, false at 2, true at 3); the flag listed as assumed, naming GPTModel."""
    cfg = load_trainer_config(_script(tmp_path, stage, flag=True), gpus=8)
    assert cfg.job["sharding"] == ("zero2" if stage == 2 else "fsdp")
    assert cfg.job["dp_comm_overlap"] is (stage == 3)
    assert any(a.startswith("--no-pipeline-parallel: Megatron's GPTModel") for a in cfg.assumed)
    assert not any("--no-pipeline-parallel" in x for x in cfg.ignored)


def test_zero01_without_the_flag_run_under_the_pipeline_engine(tmp_path):
    """ZeRO-0/1 run under the PipelineEngine: accepted, ZeRO-1's overlap_comm off (the earlier rule)."""
    for stage in (0, 1):
        cfg = load_trainer_config(_script(tmp_path, stage, flag=False, name=f"s{stage}.sh"), gpus=8)
        assert cfg.job["dp_comm_overlap"] is False


def test_tied_embedding_reduction_priced_at_pp(tmp_path):
    """BLOOM's script (pp 12, tied embeddings, GPTModelPipe, the BF16_Optimizer): the tied weight's gradient all-reduce
    between the first and the last stage (_exec_reduce_tied_grads) is priced (step.py [20]), no longer listed as not
    modelled: the fp32 _hp_grad, 4 B an element of the vocab-parallel shard, over the two end ranks."""
    import numpy as np

    from planner import comm
    from planner.params import count_params
    from planner.step import Collectives, _compute_pass, step_time

    cfg = load_trainer_config(DATA / "tr11-176B-ml.slurm", gpus=384)
    assert cfg.job["pp"] == 12 and cfg.job["sharding_mode"] == "bf16_optimizer"
    assert not any("_exec_reduce_tied_grads" in x for x in cfg.unmodelled)
    s, p, _ = resolve(Job(**cfg.job))
    tied = float(step_time(s, p)[1]["pp_tied_grads_s"])
    sc = _compute_pass(s, p)[0]
    coll = Collectives(sc)
    elems = count_params(s.model).embedding / cfg.job["tp"]
    assert tied == float(coll(comm.ALL_REDUCE, elems * 4.0, np.asarray(2), 11 * coll.strides["pp"])) > 0


# ---- no overlapped reduction without the ZeRO optimizer (runs.sharding dp_comm_overlap_runs false)

def test_bf16_optimizer_prices_overlap_off(explain):
    """DeepSpeed's BF16_Optimizer (mode bf16_optimizer) never reads overlap_comm: with dp_comm_overlap asked the plan
    shows it off, the whole DP time (its all-reduce and weight all-gather) is exposed, every figure equals the job
    that leaves it off, and explain warns naming the mode. ZeRO-1 (the ZeRO optimizer) at pp 1 keeps it."""
    kw = dict(gpus=8, global_batch=8, sharding="zero1", sharding_mode="bf16_optimizer")
    on, off = (_mds(explain, **kw, dp_comm_overlap=d)[3] for d in (True, False))
    assert on["plan"]["dp_comm_overlap"] is False
    assert on["time"]["dp_comm_exposed_s"] == on["time"]["dp_comm_s"] > 0
    assert on["time"] == off["time"] and on["memory"] == off["memory"]
    assert any("under sharding mode bf16_optimizer" in w and "engine.py l. 1632, 1686, 1730, 1775" in w
               for w in _warnings(**kw))


def test_fit_ranks_no_overlapped_row_without_the_zero_optimizer(cli):
    """fit on megatron-deepspeed at pp 1 tries DP overlap on (variant_choices): the ZeRO rows keep it, the
    bf16_optimizer (and zero0) rows show it off."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed", "--pp", "1",
            "--global-batch", "64", "--seq-len", "2048", "--hardware", "h200-sxm", "--top", "400", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    modes = {(x["plan"]["sharding_mode"], x["plan"]["dp_comm_overlap"]) for x in rows}
    assert ("bf16_optimizer", False) in modes and ("zero1", True) in modes
    assert not {m for m, on in modes if on} & {"zero0", "bf16_optimizer"}
