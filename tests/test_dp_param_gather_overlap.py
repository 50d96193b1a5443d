"""The sharded optimizer's parameter all-gather apart from the gradient reduction's overlap (the Job's
dp_param_gather_overlap, planner/step.py [40]): Megatron's --overlap-param-gather beside --overlap-grad-reduce
(arguments.py @d98e8a64 l. 1024-1029 requires the latter). Without it DistributedOptimizer.step_with_ready_grads
(distrib_optimizer.py l. 3168-3198) all-gathers the updated weights synchronously after the step: exposed whole.
Left out, the gather follows dp_comm_overlap (nothing moves)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.step import DPColls, ddp_traffic
from planner.trainers import load_trainer_config

from conftest import explain_job

JOB = dict(model="llama3-8b", gpus=8, global_batch=64, micro_batch=1, seq_len=8192, stack="megatron")
MEGATRON_8B = "tests/data/trainer_configs/train_llama3_8b.sh"  # --use-distributed-optimizer, both overlap flags
RUN = "scripts/training/run_recipe.py"


def _traffic(gather_overlap, supported=True):
    """ddp_traffic over a zero1 plan's collectives (seconds from bytes by the ring formulas, the test's own inputs):
    a stage of 1e9 parameters on 8 ranks over a 400 GB/s link, 4 buckets; the reduce-scatter of 4 B fp32 gradients
    (4e9 B) and the all-gather of the 2 B bf16 weights (2e9 B), each (n - 1) / n x S / B."""
    bw, n = 400e9, 8
    rs = (n - 1) / n * 4e9 / bw  # 8.75 ms
    ag = (n - 1) / n * 2e9 / bw  # 4.375 ms
    assert (rs, ag) == pytest.approx((8.75e-3, 4.375e-3), rel=1e-15)
    c = DPColls(ag=np.float64(ag), rs=np.float64(rs), ar=0.0, rep=0.0, inst=0.0)
    edge = DPColls(*(x / 4 for x in c.parts()))  # the first bucket's gather, the last bucket's reduction
    sc = SimpleNamespace(m=4, x=0.1, settings=SimpleNamespace(dp_param_gather_overlap=gather_overlap),
                         stack=SimpleNamespace(overlap=SimpleNamespace(grad_reduce_queued=False,
                                                                       dp_param_gather_overlap_supported=supported)))
    comp = SimpleNamespace(fwd_mb=np.float64(0.1), bwd_mb=np.float64(0.2))  # windows far longer than the transfers
    tr = {"reduce_mb": np.array(False)}  # zero1: reduced once a step
    n_red, _, total, exposed, _ = ddp_traffic(sc, comp, tr, (np.array(True), np.array(False)), c, edge)
    return float(n_red), float(total), float(exposed), rs, ag


def test_exposed_all_gather_by_hand():
    """Overlapped, each transfer but its edge bucket hides behind its window, the stack's exposed share 0.1 of it
    left: 0.1 x 3/4 + 1/4 = 0.325 of each. Without the gather's overlap the all-gather is exposed whole: the
    exposed time rises by 0.675 x 4.375 ms = 2.953125 ms; the total does not move."""
    n_red, total, on, rs, ag = _traffic(None)
    assert n_red == 1.0
    assert total == pytest.approx(8.75e-3 + 4.375e-3, rel=1e-15)
    assert on == pytest.approx(0.325 * (8.75e-3 + 4.375e-3), rel=1e-12)
    assert _traffic(True)[2] == on  # true: as left out (hidden)
    _, total_off, off, _, _ = _traffic(False)
    assert total_off == total
    assert off == pytest.approx(0.325 * 8.75e-3 + 4.375e-3, rel=1e-12)
    assert off - on == pytest.approx(2.953125e-3, rel=1e-12)


def test_explain_prices_and_shows_it_at_zero1_only():
    """At zero1 the field false adds exposed DP time (the gather's, at most the whole DP traffic) to the step and is
    shown in the plan; at sharding none (no gather) and under FSDP (per-unit gathers: the FSDP path, dp_comm_overlap's)
    nothing moves and the plan leaves it out."""
    _, _, _, on = explain_job(**JOB, sharding="zero1")
    _, _, _, off = explain_job(**JOB, sharding="zero1", dp_param_gather_overlap=False)
    assert "dp_param_gather_overlap" not in on["plan"]
    assert off["plan"]["dp_param_gather_overlap"] is False
    d = off["time"]["dp_comm_exposed_s"] - on["time"]["dp_comm_exposed_s"]
    assert 0 < d < off["time"]["dp_comm_s"] == on["time"]["dp_comm_s"]
    assert off["time"]["step_s"] > on["time"]["step_s"]
    for sharding, stack in (("none", "megatron"), ("fsdp", "torchtitan")):
        job = {**JOB, "stack": stack, "sharding": sharding}
        _, _, _, a = explain_job(**job)
        _, _, _, b = explain_job(**job, dp_param_gather_overlap=False)
        assert a["time"]["step_s"] == b["time"]["step_s"]
        assert "dp_param_gather_overlap" not in b["plan"]


def test_true_needs_the_dp_overlap():
    """On the megatron set start-up rule MEGATRON_PARAM_GATHER (code 108) refuses it (Megatron's validate_args,
    arguments.py @d98e8a64 l. 1024-1029), with a sharding mode that shards no optimizer too; elsewhere plan.resolve."""
    from planner.startup import CODES

    assert CODES["MEGATRON_PARAM_GATHER"] == 108
    for kw in (dict(sharding="zero1", dp_comm_overlap=False), dict(sharding="none"),
               dict(sharding="fsdp", sharding_mode="torch_fsdp2")):
        with pytest.raises(PlannerError, match="MEGATRON_PARAM_GATHER") as e:
            explain_job(**{**JOB, **kw}, dp_param_gather_overlap=True)
        assert "arguments.py validate_args l. 1024-1029" in e.value.message and "--overlap-grad-reduce" in e.value.hint
    for kw in (dict(sharding="zero1"), dict(sharding="zero2", sharding_mode="megatron_fsdp_optim_grads"),
               dict(sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params")):
        explain_job(**{**JOB, **kw}, dp_param_gather_overlap=True)  # Megatron starts: the distributed optimizer / M-FSDP
    with pytest.raises(PlannerError, match="MEGATRON_PARAM_GATHER"):
        explain_job(**{**JOB, "stack": "megatron-bridge"}, sharding="zero1", dp_comm_overlap=False,
                    dp_param_gather_overlap=True)
    with pytest.raises(PlannerError, match="dp_param_gather_overlap is true but dp_comm_overlap is off"):
        explain_job(**{**JOB, "stack": "torchtitan"}, sharding="fsdp", dp_comm_overlap=False,
                    dp_param_gather_overlap=True)
    _, _, _, h = explain_job(**JOB, sharding="zero1", dp_comm_overlap=False, dp_param_gather_overlap=False)
    assert h["plan"]["dp_comm_overlap"] is False and "dp_param_gather_overlap" not in h["plan"]


def _megatron(tmp_path, drop=(), add=()):
    text = open(MEGATRON_8B).read()
    for f in drop:
        assert f"    {f}\n" in text
        text = text.replace(f"    {f}\n", "")
    text = text.replace("    --use-mcore-models\n", "    --use-mcore-models\n" + "".join(f"    {f}\n" for f in add))
    p = tmp_path / "train.sh"
    p.write_text(text)
    return load_trainer_config(p, hardware="h100-sxm")


def test_megatron_reader_each_combination(tmp_path):
    """--overlap-grad-reduce with --overlap-param-gather: left out (tied, on); without it: false; neither: the DP
    overlap off, the field left out; --overlap-param-gather alone (Megatron asserts): listed as ignored, as before."""
    both = _megatron(tmp_path)
    assert both.job["dp_comm_overlap"] is True and "dp_param_gather_overlap" not in both.job
    grad = _megatron(tmp_path, drop=("--overlap-param-gather",))
    assert grad.job["dp_comm_overlap"] is True and grad.job["dp_param_gather_overlap"] is False
    neither = _megatron(tmp_path, drop=("--overlap-param-gather", "--overlap-grad-reduce"))
    assert neither.job["dp_comm_overlap"] is False and "dp_param_gather_overlap" not in neither.job
    param = _megatron(tmp_path, drop=("--overlap-grad-reduce",))  # as stated: refused at resolve (rule 108, below)
    assert param.job["dp_comm_overlap"] is False and param.job["dp_param_gather_overlap"] is True
    assert not any("--overlap-param-gather" in i for i in param.ignored)
    ddp = _megatron(tmp_path, drop=("--overlap-param-gather", "--use-distributed-optimizer"))
    assert ddp.job["sharding"] == "none" and "dp_param_gather_overlap" not in ddp.job  # no gather to overlap


@pytest.mark.parametrize("drop, add, mode", [(("--overlap-grad-reduce",), (), "distributed_optimizer"),
                                             (("--use-distributed-optimizer",), (), "ddp"),
                                             (("--use-distributed-optimizer",), ("--use-torch-fsdp2",), "torch_fsdp2")])
def test_megatron_reader_refuses_what_megatron_asserts(tmp_path, cli, drop, add, mode):
    """--overlap-param-gather without --overlap-grad-reduce, or without the distributed optimizer / Megatron-FSDP /
    dist_muon (plain DDP, torch FSDP2): Megatron's validate_args asserts (arguments.py @d98e8a64 l. 1024-1029), so
    the script is refused at resolve by start-up rule MEGATRON_PARAM_GATHER (code 108): exit 2 with its hint, no
    traceback (it was listed as ignored before)."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job

    if "--use-torch-fsdp2" in add:  # torch FSDP2 wants untied embeddings, no gradient-accumulation fusion
        add = add + ("--no-gradient-accumulation-fusion",)
    cfg = _megatron(tmp_path, drop=drop, add=add)
    assert cfg.job["dp_param_gather_overlap"] is True and cfg.job["sharding_mode"] == mode
    with pytest.raises(PlannerError, match="MEGATRON_PARAM_GATHER"):
        resolved_plan(Job(**cfg.job))
    r = cli("explain", str(tmp_path / "train.sh"), "--hardware", "h100-sxm")
    assert r.exit_code == 2, r.output
    assert "MEGATRON_PARAM_GATHER" in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr


def test_megatron_reader_dist_muon_passes(tmp_path):
    """--optimizer dist_muon with --overlap-param-gather and --overlap-grad-reduce but no --use-distributed-optimizer
    passes Megatron's assert (l. 1025-1027 names dist_muon; the Muon conversion comes later, l. 1724-1737): read as
    the distributed optimizer's level, the flag as the tie (field left out), nothing refused."""
    cfg = _megatron(tmp_path, drop=("--use-distributed-optimizer",), add=("--optimizer dist_muon",))
    assert cfg.job["sharding"] == "zero1" and "dp_param_gather_overlap" not in cfg.job


def _bridge(tmp_path, *overrides):
    f = tmp_path / "launch.sh"
    f.write_text(f"torchrun --nproc_per_node 8 {RUN} --recipe llama3_8b_pretrain_config model.context_parallel_size=1 "
                 f"{' '.join(overrides)}\n")
    return load_trainer_config(f, hardware="h100-sxm")


def test_bridge_reader_each_combination(tmp_path):
    """ddp.overlap_grad_reduce / ddp.overlap_param_gather under the recipe's distributed optimizer (the
    CommOverlapConfig's own defaults on at dp > 1: training/comm_overlap.py)."""
    both = _bridge(tmp_path)
    assert both.job["dp_comm_overlap"] is True and "dp_param_gather_overlap" not in both.job
    grad = _bridge(tmp_path, "ddp.overlap_param_gather=false")
    assert grad.job["dp_comm_overlap"] is True and grad.job["dp_param_gather_overlap"] is False
    neither = _bridge(tmp_path, "ddp.overlap_param_gather=false", "ddp.overlap_grad_reduce=false")
    assert neither.job["dp_comm_overlap"] is False and "dp_param_gather_overlap" not in neither.job


@pytest.mark.parametrize("fmt, spelled", [("megatron", "--overlap-param-gather"),
                                          ("megatron-bridge", "ddp.overlap_param_gather")])
def test_export_round_trip(tmp_path, fmt, spelled):
    """A zero1 plan with the gather exposed exports --overlap-grad-reduce without --overlap-param-gather (Bridge:
    ddp.overlap_param_gather false) and reads back as the same plan; the tied plan writes the gather overlapped."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan, plan_signature

    job = dict(model="llama3-8b", gpus=8, global_batch=512, micro_batch=1, seq_len=8192, sharding="zero1",
               stack="megatron" if fmt == "megatron" else "megatron-bridge", tp=1, pp=1, cp=1)
    plan = resolved_plan(Job(**job, dp_param_gather_overlap=False))
    assert plan["dp_param_gather_overlap"] is False
    text, _ = export_plan(plan, fmt)
    tied, _ = export_plan(resolved_plan(Job(**job)), fmt)
    if fmt == "megatron":
        assert "--overlap-grad-reduce" in text and spelled not in text and spelled in tied
    else:
        assert f"{spelled}=false" in text and f"{spelled}=true" in tied
    p = tmp_path / "x.sh"
    p.write_text(text)
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["dp_param_gather_overlap"] is False
    back = resolved_plan(Job(**{**cfg.job, "model": "llama3-8b", "gpus": 8}))
    assert plan_signature(back) == plan_signature(plan)


def test_other_formats_refuse_it():
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan

    # a megatron-deepspeed job's false is its stack's own (left out of the plan: the DeepSpeed tests below); a plan
    # file that names it is refused by the DeepSpeed formats, which have no such setting
    plan = resolved_plan(Job(model="llama3-8b", gpus=8, global_batch=64, micro_batch=1, seq_len=8192, sharding="zero1",
                             stack="megatron-deepspeed", tp=1, pp=1, cp=1, dp_comm_overlap=True,
                             dp_param_gather_overlap=False))
    assert "dp_param_gather_overlap" not in plan
    export_plan(plan, "deepspeed")
    with pytest.raises(PlannerError, match="dp_param_gather_overlap false"):
        export_plan({**plan, "dp_param_gather_overlap": False}, "deepspeed")


# ---- DeepSpeed ZeRO-1/2: the all-gather after the step is synchronous whatever overlap_comm (step.py [40]; stack_db
# megatron-deepspeed* overlap.dp_param_gather_overlap_supported false)

DS = ("megatron-deepspeed", "megatron-deepspeed-2021", "megatron-deepspeed-bigscience")


@pytest.mark.parametrize("name", DS)
def test_deepspeed_stacks_never_overlap_the_gather(name):
    from planner.catalog import load_stack

    assert load_stack(name).overlap.dp_param_gather_overlap_supported is False
    assert load_stack("megatron").overlap.dp_param_gather_overlap_supported is True


def test_deepspeed_gather_exposed_by_hand():
    """The same collectives on a stack whose gather is never overlapped (DeepSpeed's stage_1_and_2.py step,
    all_gather_dp_groups after the optimizer step): the job's field left out, the gather is exposed whole, as the
    Megatron job's false: 0.325 x 8.75 ms + 4.375 ms = 7.21875 ms exposed of 13.125 ms."""
    _, total, exposed, rs, ag = _traffic(None, supported=False)
    assert total == pytest.approx(13.125e-3, rel=1e-15)
    assert exposed == pytest.approx(0.325 * 8.75e-3 + 4.375e-3, rel=1e-12)
    assert exposed == pytest.approx(7.21875e-3, rel=1e-12)
    assert exposed == _traffic(False)[2]


def _ds_job(**kw):
    return dict(model="llama3-8b", gpus=8, global_batch=64, micro_batch=1, seq_len=8192, stack="megatron-deepspeed",
                sharding="zero1", sharding_mode="zero1", tp=1, pp=1, cp=1, dp_comm_overlap=True, **kw)


def test_deepspeed_explain_exposes_the_gather_of_its_bytes():
    """End to end, Llama 3 8B on 8 GPUs, megatron-deepspeed ZeRO-1 at pp 1 with overlap_comm (dp_comm_overlap true):
    8,030,261,248 parameters x 2 B gathered over the 8 DP ranks in ceil(8,030,261,248 / 5e8) = 17 buckets (stack_db
    megatron-deepspeed fsdp.ddp_bucket_params 500,000,000, per-DP-rank 0), ag = 17 x one bucket's all-gather (the
    step's own collective model). Against the same plan on the stack with the gather overlappable (what the planner
    priced before), the exposed DP time is higher by the hidden part, (16/17) ag (1 - x); the total does not move."""
    import dataclasses

    from planner import comm
    from planner.explain import evaluate, to_json
    from planner.step import Collectives, _context

    p = 8_030_261_248
    n_b = -(-p // 500_000_000)
    assert n_b == 17
    settings, plan, _, ds = explain_job(**_ds_job())
    assert settings.stack.fsdp.ddp_bucket_params == 500_000_000 and settings.stack.fsdp.ddp_bucket_params_per_dp_rank == 0
    assert ds["plan"]["dp_comm_overlap"] is True and "dp_param_gather_overlap" not in ds["plan"]
    st = settings.stack
    s_hidden = dataclasses.replace(settings, stack=st.model_copy(
        update={"overlap": st.overlap.model_copy(update={"dp_param_gather_overlap_supported": True})}))
    hidden = to_json(s_hidden, plan, evaluate(s_hidden, plan))
    sc = _context(settings, plan)
    coll = Collectives(sc)
    ag = n_b * float(coll(comm.ALL_GATHER, 2.0 * p / n_b, 8, coll.strides["dp"]))
    x = float(sc.x)
    assert 0 < x < 1 and ag < ds["time"]["dp_comm_s"] == hidden["time"]["dp_comm_s"]
    d = ds["time"]["dp_comm_exposed_s"] - hidden["time"]["dp_comm_exposed_s"]
    assert d == pytest.approx(ag * (n_b - 1) / n_b * (1 - x), rel=1e-9)
    # the job's false is the stack's own: priced the same, nothing shown or refused at export
    _, _, _, f = explain_job(**_ds_job(dp_param_gather_overlap=False))
    assert f["time"]["step_s"] == ds["time"]["step_s"] and "dp_param_gather_overlap" not in f["plan"]


def test_deepspeed_refuses_the_gather_overlapped():
    with pytest.raises(PlannerError, match="gathers the ZeRO-1/2 parameters synchronously after the optimizer step"):
        explain_job(**_ds_job(dp_param_gather_overlap=True))


def test_fit_rows_say_so_and_reproduce():
    """A fit's job value holds for every row (not searched): a zero1 / zero2 row's stack options say the gather is
    exposed, and its reproduce line carries the option (a job that leaves it out: none)."""
    from planner.render.fit import stack_options_text
    from planner.search import job_field_args  # the reproduce line's job options (search.explain_args)
    from planner.schema import Job

    _, _, _, off = explain_job(**JOB, sharding="zero1", dp_param_gather_overlap=False)
    assert stack_options_text(off["plan"]) == "param gather exposed"
    _, _, _, on = explain_job(**JOB, sharding="zero1")
    assert stack_options_text(on["plan"]) == "-"
    assert job_field_args(Job(**JOB, dp_param_gather_overlap=False)) == ["--no-dp-param-gather-overlap"]
    assert job_field_args(Job(**JOB)) == []


def test_explain_exposes_the_gather_of_its_bytes():
    """End to end, Llama 3 8B on 8 GPUs at zero1 (tp, pp, cp 1: DP 8, stride 1): the weights' all-gather is
    8,030,261,248 parameters x 2 B (bf16) in ceil(8,030,261,248 / max(40e6, 1e6 x 8)) = 201 buckets (stack_db megatron
    fsdp ddp_bucket_params, ddp_bucket_params_per_dp_rank), each an all-gather of 2 x 8,030,261,248 / 201 B over 8
    ranks (priced by the step's own collective model: ag = 201 x one bucket's). Overlapped, all but the first bucket
    hides behind a forward far longer than it, the stack's exposed share x of it left: (200/201) ag x; exposed, ag
    whole: the exposed DP time rises by (200/201) ag (1 - x)."""
    from planner import comm
    from planner.step import Collectives, _context

    p = 8_030_261_248
    n_b = -(-p // 40_000_000)
    assert n_b == 201
    settings, plan, _, on = explain_job(**JOB, sharding="zero1", tp=1, pp=1, cp=1)
    _, _, _, off = explain_job(**JOB, sharding="zero1", tp=1, pp=1, cp=1, dp_param_gather_overlap=False)
    sc = _context(settings, plan)
    coll = Collectives(sc)
    ag = n_b * float(coll(comm.ALL_GATHER, 2.0 * p / n_b, 8, coll.strides["dp"]))
    x = float(sc.x)
    assert 0 < x < 1 and ag < on["time"]["dp_comm_s"]
    d = off["time"]["dp_comm_exposed_s"] - on["time"]["dp_comm_exposed_s"]
    assert d == pytest.approx(ag * (n_b - 1) / n_b * (1 - x), rel=1e-9)


def test_check_spells_the_gather_flag_with_the_distributed_optimizer():
    """`planner check` moving a DDP script with --overlap-grad-reduce to the distributed optimizer spells
    --overlap-param-gather too (the plan checked hides the gather; without the flag the script would read back with it
    exposed); a script that states it, or a plan that exposes the gather, gets no such setting."""
    from planner.check import evaluate_job
    from planner.schema import Job
    from planner.trainers.spelling import spell

    base = dict(model="llama3-8b", gpus=8, seq_len=4096, stack="megatron")
    before = evaluate_job(Job(**base, sharding="none"))["plan"]
    after = evaluate_job(Job(**base, sharding="zero1"))["plan"]
    keys = [s.key for s in spell("megatron", ["sharding"], before, after, {}).settings]
    assert "--use-distributed-optimizer" in keys and "--overlap-param-gather" in keys
    keys = [s.key for s in spell("megatron", ["sharding"], before, after, {"--overlap-param-gather": True}).settings]
    assert "--overlap-param-gather" not in keys
    exposed = evaluate_job(Job(**base, sharding="zero1", dp_param_gather_overlap=False))["plan"]
    assert "--overlap-param-gather" not in [s.key for s in spell("megatron", ["sharding"], before, exposed, {}).settings]


def test_fit_with_the_gather_overlapped_ranks_no_ddp_row(cli):
    """A fit job's dp_param_gather_overlap true (--overlap-param-gather) holds for every row: rule MEGATRON_PARAM_GATHER
    (code 108) masks the rows Megatron would refuse (ddp, torch_fsdp2), which the same search without it ranks; the
    probe (dp 1 at the stack's first level, ddp) is resolved without it (space.settings_for)."""
    import json

    args = ["fit", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--global-batch", "64", "--format", "json",
            "--top", "400"]
    r = cli(*args, "--dp-param-gather-overlap")
    assert r.exit_code == 0, r.output
    modes = {row["plan"]["sharding_mode"] for row in json.loads(r.stdout)}
    assert modes and not modes & {"ddp", "torch_fsdp2"} and "distributed_optimizer" in modes
    plain = {row["plan"]["sharding_mode"] for row in json.loads(cli(*args).stdout)}
    assert "ddp" in plain


# ---- Muon's layer-wise distributed optimizer: its all-gather follows --overlap-param-gather as the distributed
# optimizer's does (Megatron-LM @d98e8a64 layer_wise_optimizer.py step_with_ready_grads l. 965-987; Megatron-Core
# 905c0e386 muon.py l. 347-354, async_allgather=config.overlap_param_gather): priced, read and written alike

@pytest.mark.parametrize("fmt", ["megatron", "megatron-bridge"])
@pytest.mark.parametrize("exposed", [False, True])
def test_muon_round_trip(tmp_path, fmt, exposed):
    """A zero1 Muon plan (Bridge: dist_muon, whole tensors, Megatron-Core 905c0e386's layer-wise optimizer) exports the
    gather as priced: hidden (the field left out) with --overlap-param-gather (Bridge: ddp. and optimizer.
    overlap_param_gather true), exposed (false) without (both false); each reads back as the same plan, and the
    exposed one prices more exposed DP time."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan, plan_signature

    job = dict(model="llama3-8b", gpus=8, global_batch=512, micro_batch=1, seq_len=8192, sharding="zero1",
               stack="megatron" if fmt == "megatron" else "megatron-bridge", tp=1, pp=1, cp=1, optimizer="muon",
               dp_comm_overlap=True, **({} if fmt == "megatron" else {"optimizer_whole_tensors": True}))
    plan = resolved_plan(Job(**job, **({"dp_param_gather_overlap": False} if exposed else {})))
    assert plan["optimizer"] == "muon" and plan.get("dp_param_gather_overlap", None) is (False if exposed else None)
    text, _ = export_plan(plan, fmt)
    if fmt == "megatron":
        assert "--overlap-grad-reduce" in text and ("--overlap-param-gather" in text) is not exposed
    else:
        v = "false" if exposed else "true"
        assert f"ddp.overlap_param_gather={v}" in text and f"optimizer.overlap_param_gather={v}" in text
    p = tmp_path / "x.sh"
    p.write_text(text)
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job.get("dp_param_gather_overlap") is (False if exposed else None)
    back = resolved_plan(Job(**{**cfg.job, "model": "llama3-8b", "gpus": 8}))
    assert plan_signature(back) == plan_signature(plan)
    if exposed:
        _, _, _, hid = explain_job(**{k: v for k, v in job.items()})
        _, _, _, exp = explain_job(**job, dp_param_gather_overlap=False)
        assert exp["time"]["dp_comm_exposed_s"] > hid["time"]["dp_comm_exposed_s"]
        if fmt == "megatron":  # the layout's bucketed gather either way
            assert exp["time"]["dp_comm_s"] == hid["time"]["dp_comm_s"]
        else:  # whole tensors (legacy path): allgather_params' one all-gather in place of the forward's per-bucket
            # ones (step._layerwise_gather), one latency term in place of one a bucket
            assert exp["time"]["dp_comm_s"] < hid["time"]["dp_comm_s"]


def test_bridge_kimi_style_muon_reads_exposed(tmp_path):
    """NVIDIA's Kimi-K2 Muon recipe's DDP settings (recipes/kimi/kimi_k2.py @dc805f5cf l. 190-199: the distributed
    optimizer and overlap_param_gather off, overlap_grad_reduce on) under dist_muon: the gather after the step,
    synchronous (layer_wise_optimizer.py @905c0e386 l. 280-288), read as dp_param_gather_overlap false. ddp.
    overlap_param_gather alone (no optimizer.overlap_param_gather: async_allgather stays off, Bridge's
    CommOverlapConfig sets it only under the distributed optimizer, comm_overlap.py l. 631-640) is what the recipe's
    'Muon requires both off' avoids: nothing checks it, but DDP's forward pre-hook starts the layer-wise all-gather on
    buckets whose per-rank lists only the async path sets (param_and_grad_buffer.py @905c0e386 l. 318-336, 427-446;
    layer_wise_optimizer.py l. 67-72): a TypeError at the first forward, so refused (before: read as false), unless the
    command line re-chooses what it depends on (Adam at zero1, the job's own dp_param_gather_overlap)."""
    common = ("optimizer.optimizer=dist_muon", "ddp.use_distributed_optimizer=false",
              "optimizer.use_distributed_optimizer=false")
    kimi = _bridge(tmp_path, *common, "ddp.overlap_param_gather=false")
    assert kimi.job["sharding"] == "zero1" and kimi.job["dp_comm_overlap"] is True
    assert kimi.job["dp_param_gather_overlap"] is False
    with pytest.raises(PlannerError, match="ddp.overlap_param_gather=true under dist_muon without optimizer.overlap_"
                                           "param_gather .*: the run fails at its first forward") as e:
        _bridge(tmp_path, *common, "ddp.overlap_param_gather=true")
    assert "recipes/kimi/kimi_k2.py @dc805f5cf l. 190-199" in e.value.message
    assert e.value.hint == ("add ddp.overlap_param_gather=false (or optimizer.overlap_param_gather=true: the gather "
                            "deferred to the forward)")
    f = tmp_path / "launch.sh"  # the half file, as _bridge wrote it
    for opts in ({"optimizer": "adam", "sharding": "zero1"}, {"dp_param_gather_overlap": False},
                 {"stack": "megatron"}):
        load_trainer_config(f, hardware="h100-sxm", overrides=opts)  # re-chosen: not refused
    for opts in ({"sharding": "zero1"}, {"optimizer": "adam", "sharding": "none"}, {"stack": "megatron-bridge"}):
        with pytest.raises(PlannerError, match="the run fails at its first forward"):
            load_trainer_config(f, hardware="h100-sxm", overrides=opts)
    both = _bridge(tmp_path, *common, "ddp.overlap_param_gather=true", "optimizer.overlap_param_gather=true")
    assert "dp_param_gather_overlap" not in both.job


# ---------------------------------------------- the tie listed as assumed; the stack's exposed gather shown
TIED = "dp_param_gather_overlap=true: left out, so it follows dp_comm_overlap"


def _stack_line(r) -> str:
    return next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("stack "))


def _explain(cli, job: dict, tmp_path, name: str):
    import yaml

    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(job))
    r = cli("explain", str(p))
    assert r.exit_code == 0, r.stderr
    return r


def test_left_out_is_listed_as_assumed_where_it_acts(cli, tmp_path):
    """A Megatron zero1 job under the DP overlap that leaves the field out: explain's assumed line names the tie (the
    gather priced hidden, Megatron's flag of its own); set false: no such line, the DP option says the gather is
    exposed; set true: the job's own, no line. Where the tie acts on nothing (sharding none, the DP overlap off, FSDP)
    nothing is listed; the JSON's `assumed` holds the same line."""
    job = {**JOB, "sharding": "zero1", "dp_comm_overlap": True}
    left = _explain(cli, job, tmp_path, "left")
    assumed = next(ln for ln in left.stdout.splitlines() if ln.lstrip().startswith("assumed ("))
    assert TIED in assumed and "--overlap-param-gather is a flag of its own" in assumed
    assert _stack_line(left).split(": ", 1)[1].startswith("TP overlap off, DP overlap on, torch.compile")
    off = _explain(cli, {**job, "dp_param_gather_overlap": False}, tmp_path, "off")
    assert TIED not in off.stdout and "DP overlap on (parameter all-gather exposed)" in _stack_line(off)
    on = _explain(cli, {**job, "dp_param_gather_overlap": True}, tmp_path, "on")
    assert TIED not in on.stdout and "exposed" not in _stack_line(on)
    _, _, _, js = explain_job(**job)
    assert [a for a in js["assumed"] if a.startswith("dp_param_gather_overlap")] == [
        next(a for a in js["assumed"] if a.startswith(TIED))]
    for kw in (dict(sharding="none"), dict(dp_comm_overlap=False), dict(stack="torchtitan", sharding="fsdp")):
        _, _, _, js = explain_job(**{**job, **kw})
        assert not any(a.startswith("dp_param_gather_overlap") for a in js.get("assumed", ())), kw


def test_trainer_config_stating_the_flag_lists_no_tie(tmp_path):
    """The Megatron reader leaves the field out where the script gives --overlap-param-gather (the tie is the file's):
    with_config drops the line; without the flag the reader's false is the job's (no line either); a script that
    states no flag (DDP) planned at zero1 keeps it."""
    from planner.trainers.report import with_config

    both = _megatron(tmp_path)
    _, _, _, js = explain_job(**{**both.job, "hardware": "h100-sxm"})
    assert any(a.startswith(TIED) for a in js["assumed"])  # the plan alone: left out
    assert not any(a.startswith(TIED) for a in with_config(js, both).get("assumed", ()))
    grad = _megatron(tmp_path, drop=("--overlap-param-gather",))
    _, _, _, js = explain_job(**{**grad.job, "hardware": "h100-sxm"})
    assert not any(a.startswith("dp_param_gather_overlap") for a in js.get("assumed", ()))
    # a DDP script (no gather, no flag) planned at zero1 from the command line: the tie is not the file's, kept
    ddp = _megatron(tmp_path, drop=("--overlap-param-gather", "--use-distributed-optimizer"))
    assert "--overlap-param-gather" not in ddp.stated and "dp_param_gather_overlap" not in ddp.job
    job = {k: v for k, v in ddp.job.items() if k != "sharding_mode"}
    _, _, _, js = explain_job(**{**job, "hardware": "h100-sxm", "sharding": "zero1"})
    assert any(a.startswith(TIED) for a in with_config(js, ddp)["assumed"])


def test_deepspeed_says_the_gather_is_exposed(cli, tmp_path):
    """On megatron-deepspeed ZeRO-1 with overlap_comm the plan carries no field (the stack's gather is synchronous
    whatever the job says, stack_db overlap.dp_param_gather_overlap_supported false): explain's DP option and fit's
    row text say it is exposed from the stack fact, and no tie is listed; at the DP overlap off neither."""
    from planner.render.fit import stack_options_text

    r = _explain(cli, _ds_job(), tmp_path, "ds")
    assert "DP overlap on (parameter all-gather exposed)" in _stack_line(r) and TIED not in r.stdout
    _, _, _, js = explain_job(**_ds_job())
    assert "dp_param_gather_overlap" not in js["plan"] and not any(
        a.startswith("dp_param_gather_overlap") for a in js.get("assumed", ()))
    assert stack_options_text(js["plan"]) == "param gather exposed"
    _, _, _, off = explain_job(**{**_ds_job(), "dp_comm_overlap": False})
    assert stack_options_text(off["plan"]) == "no DP overlap"
    r = _explain(cli, {**_ds_job(), "dp_comm_overlap": False}, tmp_path, "ds_off")
    assert "DP overlap off," in _stack_line(r) and "exposed" not in _stack_line(r)


def test_validate_lists_the_tie_in_the_assumed_column(tmp_path):
    """A record that leaves the field out (Megatron-LM README's 1.7B H100 run: the distributed optimizer, the DP
    overlap as the megatron stack's default) lists the tie as assumed, abbreviated 'pg' in the table; the same record
    stating false lists nothing, and its prediction moves by the exposed gather only."""
    import yaml

    from planner.render.validate import _abbrev
    from planner.validate import evaluate_record, load_runs

    src = yaml.safe_load(open("tests/data/published_runs.yaml"))
    recs = src if isinstance(src, list) else src["runs"]
    rec = next(r for r in recs if r["id"] == "megatron-readme-h100-1.7B")
    assert "dp_param_gather_overlap" not in rec
    rows = {}
    for v in (None, False, True):
        p = tmp_path / f"runs_{v}.yaml"
        p.write_text(yaml.safe_dump([dict(rec, **({} if v is None else {"dp_param_gather_overlap": v}))]))
        (one,) = load_runs(p)
        rows[v] = evaluate_record(one, tmp_path, tmp_path)
    (line,) = [a for a in rows[None].assumed if a.startswith("dp_param_gather_overlap")]
    assert line.startswith("dp_param_gather_overlap=true (not published; follows dp_comm_overlap")
    assert "pg" in _abbrev(rows[None].assumed).split()
    for v in (False, True):
        assert not any(a.startswith("dp_param_gather_overlap") for a in rows[v].assumed)
    assert rows[True].predicted_step_s == rows[None].predicted_step_s < rows[False].predicted_step_s


# ---- a trainer config under command-line options that move where the gather acts (sharding, mode, DP overlap, stack):
# the tie is listed as assumed exactly where it acts and the file does not state the setting (TrainerConfig.param_gather,
# report.with_config); a file that states it false keeps its false (cli/core.command_line_param_gather); an option that
# sets the field itself beats the file, with a note

PG = "dp_param_gather_overlap"


def _cli_json(cli, *args):
    import json

    r = cli(*args, "--hardware", "h100-sxm", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr  # check: 1 where the plan does not fit
    d = json.loads(r.stdout)
    return d[0] if isinstance(d, list) else d


def _pg_lines(d):
    return [a for a in d.get("assumed", ()) if a.startswith(PG)]


def _launch(tmp_path, name, *overrides):
    f = tmp_path / f"{name}.sh"
    f.write_text(f"torchrun --nproc_per_node 8 {RUN} --recipe llama3_8b_pretrain_config model.context_parallel_size=1 "
                 f"{' '.join(overrides)}\n")
    return str(f)


DDP = ("ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false")


@pytest.mark.parametrize("command", ["explain", "check"])
def test_bridge_ddp_config_stating_false_under_zero1_keeps_false(cli, tmp_path, command):
    """`planner explain|check launch.sh --sharding zero1` on a Bridge DDP config that states ddp.overlap_param_gather
    false (the Kimi-K2 / Gemma recipes' DDP settings): the file's false holds at the distributed optimizer's level
    (Megatron-Core reads the ddp config's field there; no CommOverlapConfig here to replace it, comm_overlap.py
    @dc805f5cf l. 631-640), priced exposed as the job's false, named once, no tie. Before, the reader left the field out
    (nothing gathers under DDP) and with_config dropped the tie's line for every Bridge config: the gather priced
    hidden with nothing listed."""
    f = _launch(tmp_path, "ddp_false", *DDP, "ddp.overlap_param_gather=false")
    d = _cli_json(cli, command, f, "--sharding", "zero1")
    assert d["plan"]["sharding_mode"] == "distributed_optimizer" and d["plan"]["dp_comm_overlap"] is True
    assert d["plan"][PG] is False
    (line,) = _pg_lines(d)
    assert line.startswith("dp_param_gather_overlap=False: the file's ddp.overlap_param_gather false, kept under the "
                           "command line's sharding zero1")
    same = _cli_json(cli, command, f, "--sharding", "zero1", "--no-dp-param-gather-overlap")
    assert same["time"]["step_s"] == d["time"]["step_s"] and not _pg_lines(same)  # the option agrees with the file
    tied = _cli_json(cli, command, _launch(tmp_path, "ddp_true", *DDP), "--sharding", "zero1")
    assert tied["time"]["dp_comm_exposed_s"] < d["time"]["dp_comm_exposed_s"]
    # the file's own DDP plan: nothing gathers, nothing listed or shown
    own = _cli_json(cli, command, f)
    assert own["plan"]["sharding"] == "none" and PG not in own["plan"] and not _pg_lines(own)


def test_bridge_ddp_config_stating_true_under_zero1_is_the_files(cli, tmp_path):
    """The recipe's ddp.overlap_param_gather true (recipes/common.py; the reader lists it ignored under DDP) states
    the gather hidden for the distributed optimizer: `explain launch.sh --sharding zero1` runs the tie as the file's
    (no line); `--no-dp-param-gather-overlap` replaces the file's true, named."""
    f = _launch(tmp_path, "ddp_true", *DDP)
    d = _cli_json(cli, "explain", f, "--sharding", "zero1")
    assert d["plan"]["sharding"] == "zero1" and PG not in d["plan"] and not _pg_lines(d)
    off = _cli_json(cli, "explain", f, "--sharding", "zero1", "--no-dp-param-gather-overlap")
    assert off["plan"][PG] is False
    assert _pg_lines(off) == ["dp_param_gather_overlap=False: the command line replaces the file's "
                              "ddp.overlap_param_gather true"]


def test_bridge_dp_overlap_from_the_command_line(cli, tmp_path):
    """`explain launch.sh --dp-comm-overlap` on a distributed-optimizer config without overlap_grad_reduce: stating
    ddp.overlap_param_gather false, the file's false (named); stating it true (the recipe's), the tie is the file's.
    Under dist_muon without both overlap_param_gather fields (the Kimi-K2 recipe's ddp one false) the same false."""
    f = _launch(tmp_path, "nogr_false", "ddp.overlap_grad_reduce=false", "ddp.overlap_param_gather=false")
    d = _cli_json(cli, "explain", f, "--dp-comm-overlap")
    assert d["plan"]["sharding"] == "zero1" and d["plan"][PG] is False
    (line,) = _pg_lines(d)
    assert "kept under the command line's dp_comm_overlap True" in line
    t = _cli_json(cli, "explain", _launch(tmp_path, "nogr_true", "ddp.overlap_grad_reduce=false"), "--dp-comm-overlap")
    assert PG not in t["plan"] and not _pg_lines(t)
    muon = _launch(tmp_path, "muon", "optimizer.optimizer=dist_muon", *DDP, "ddp.overlap_grad_reduce=false",
                   "ddp.overlap_param_gather=false")
    m = _cli_json(cli, "explain", muon, "--dp-comm-overlap")
    assert m["plan"]["optimizer"] == "muon" and m["plan"][PG] is False
    (line,) = _pg_lines(m)
    assert line.startswith("dp_param_gather_overlap=False: the file's ddp. and optimizer.overlap_param_gather false")


def test_megatron_script_under_command_line_options(cli, tmp_path):
    """The Megatron reader: --overlap-param-gather states the gather hidden (no line at any level; `--sharding none`:
    nothing acts; `--no-dp-param-gather-overlap` replaces the flag, named); a script without it states nothing, so
    `--sharding zero1` on a DDP script lists the tie as assumed (Megatron's default off: the line says so)."""
    d = _cli_json(cli, "explain", MEGATRON_8B, "--sharding", "megatron_fsdp_optim_grads")
    assert d["plan"]["sharding"] == "zero2" and not _pg_lines(d)
    d = _cli_json(cli, "explain", MEGATRON_8B, "--sharding", "none")
    assert PG not in d["plan"] and not _pg_lines(d)
    d = _cli_json(cli, "explain", MEGATRON_8B, "--no-dp-param-gather-overlap")
    assert _pg_lines(d) == ["dp_param_gather_overlap=False: the command line replaces the file's --overlap-param-gather "
                            "true"]
    _megatron(tmp_path, drop=("--overlap-param-gather", "--use-distributed-optimizer"))
    d = _cli_json(cli, "explain", str(tmp_path / "train.sh"), "--sharding", "zero1")
    assert d["plan"]["sharding"] == "zero1" and PG not in d["plan"]
    (line,) = _pg_lines(d)
    assert line.startswith(TIED) and "--overlap-param-gather is a flag of its own" in line


def test_torchtitan_and_deepspeed_configs_on_a_megatron_stack(cli):
    """torchtitan and DeepSpeed state no such setting (TrainerConfig.param_gather None): planned on the megatron stack
    at zero1 from the command line the tie is listed; on their own stacks nothing acts (FSDP2; DeepSpeed's ZeRO-2
    gathers synchronously whatever the job says)."""
    toml, ds = "tests/data/trainer_configs/llama3_8b.toml", "tests/data/trainer_configs/ds_config_zero2.json"
    t = _cli_json(cli, "explain", toml, "--gpus", "8", "--stack", "megatron", "--sharding", "zero1")
    assert t["plan"]["sharding"] == "zero1" and [a[:len(TIED)] for a in _pg_lines(t)] == [TIED]
    assert not _pg_lines(_cli_json(cli, "explain", toml, "--gpus", "8"))
    d = _cli_json(cli, "explain", ds, "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron", "--sharding",
                  "zero1", "--dp-comm-overlap")
    assert [a[:len(TIED)] for a in _pg_lines(d)] == [TIED]
    own = _cli_json(cli, "explain", ds, "--model", "llama3-8b", "--gpus", "8")
    assert own["plan"]["sharding"] == "zero2" and not _pg_lines(own) and PG not in own["plan"]


def test_fit_rows_of_a_bridge_config_stating_false(cli, tmp_path):
    """`planner fit launch.sh` on the DDP config stating ddp.overlap_param_gather false: its zero1 rows carry the
    file's false (as `explain launch.sh --sharding distributed_optimizer`, their reproduce line, prices them); the
    DDP / FSDP rows show nothing."""
    import json

    r = cli("fit", _launch(tmp_path, "ddp_false", *DDP, "ddp.overlap_param_gather=false"), "--hardware", "h100-sxm",
            "--format", "json", "--top", "60")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    zero1 = [p for p in (row["plan"] for row in rows) if p["sharding"] == "zero1"]
    assert zero1 and all(p[PG] is False for p in zero1)
    assert all(PG not in row["plan"] for row in rows if row["plan"]["sharding"] != "zero1")


def test_bridge_ddp_with_the_recipes_gather_overlap_is_refused(cli, tmp_path):
    """`planner explain launch.sh` / `planner fit launch.sh` on a Bridge config that turns the distributed optimizer off
    but keeps the recipe's ddp.overlap_param_gather true (recipes/common.py; no CommOverlapConfig sets it under DDP):
    Megatron-Core 905c0e386's DDP registers the forward pre-hooks, whose parameter all-gather takes the layer-wise path
    without its per-rank lists: the run fails at its first forward (megatron_bridge._hooks_without_gather; before,
    listed as ignored, 'nothing to gather'). Exit 2 with the hint, no traceback; the same config with the field false,
    or planned at zero1 from the command line (the file's true is then the gather hidden, the tie the file's), reads."""
    f = _launch(tmp_path, "ddp_true", *DDP)
    for args in (("explain", f, "--hardware", "h100-sxm"), ("fit", f, "--hardware", "h100-sxm", "--top", "1"),
                 ("explain", f, "--hardware", "h100-sxm", "--sharding", "ddp")):
        r = cli(*args)
        assert r.exit_code == 2, r.output
        assert ("ddp.overlap_param_gather=true without the distributed optimizer (ddp.use_distributed_optimizer false): "
                "the run fails at its first forward") in r.stderr
        assert ("hint: add ddp.overlap_param_gather=false (or use the distributed optimizer: "
                "ddp.use_distributed_optimizer=true)") in r.stderr and "Traceback" not in r.output
    assert cli("explain", _launch(tmp_path, "ddp_false", *DDP, "ddp.overlap_param_gather=false"), "--hardware",
               "h100-sxm").exit_code == 0
    assert cli("explain", f, "--hardware", "h100-sxm", "--sharding", "zero1").exit_code == 0


def test_bridge_comm_overlap_sets_the_dp_overlap_only_under_the_distributed_optimizer(tmp_path):
    """Bridge's CommOverlapConfig.setup applies its data-parallel overlap (overlap_grad_reduce / overlap_param_gather
    on at dp > 1, bucket_size 128 Mi) only where ddp.use_distributed_optimizer is true (comm_overlap.py @dc805f5cf
    l. 631-640): a DDP config keeps its own fields. Before, the reader laid them on every config, so a DDP config with
    both fields false read with the DP overlap on (and, now, would be refused for the gather it never asked for)."""
    co = "'comm_overlap={_target_:megatron.bridge.training.comm_overlap.CommOverlapConfig,tp_comm_overlap:false}'"
    ddp = _bridge(tmp_path, *DDP, "ddp.overlap_grad_reduce=false", "ddp.overlap_param_gather=false", co)
    assert ddp.job["sharding"] == "none" and ddp.job["dp_comm_overlap"] is False and ddp.param_gather is False
    assert any("not the data-parallel overlap, which it sets only under ddp.use_distributed_optimizer" in str(a)
               for a in ddp.assumed)
    dist = _bridge(tmp_path, "ddp.overlap_grad_reduce=false", "ddp.overlap_param_gather=false", co)
    assert dist.job["sharding"] == "zero1" and dist.job["dp_comm_overlap"] is True and dist.param_gather is True
    assert "dp_param_gather_overlap" not in dist.job  # the CommOverlapConfig's own, on at dp 8: the tie the file's
