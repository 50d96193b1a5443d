"""The precision-aware optimizer (--use-precision-aware-optimizer, TE's FusedAdam) under Megatron-FSDP, per pinned commit
(issue 22, pamfsdp).

Megatron-LM @d98e8a64 (stack megatron) trains it:
- training.py l. 2649-2650 hands Megatron-FSDP megatron_fsdp_use_decoupled_grad = --use-precision-aware-optimizer, and
  update_main_grads installs the gradient shard as decoupled_grad (param_and_grad_buffer.py l. 3404-3407);
- get_megatron_optimizer builds FusedAdam with master_weights / use_decoupled_grad (optimizer/__init__.py l. 576-588)
  and then, under Megatron-FSDP v1, sets master_weights False and use_decoupled_grad True (l. 1147-1161): FusedAdam
  steps the optimizer's parameters, Megatron-FSDP's fp32 main weight shards (_init_distributed_params l. 3224-3293;
  --megatron-fsdp-main-params-dtype fp32, arguments.py l. 3687), and keeps no master of its own and no 16-bit
  remainder (TE @4329ff84 fused_adam.py l. 452-469, 612: remainders only beside a bf16 parameter).
  So the master is 4 B a parameter under the Megatron-FSDP modes (runs.low_precision_moments.own_master_modes,
  memory.py [mw]), 2 B (TE's remainders) under the distributed optimizer. Before this change both were priced 2 B.
Megatron-LM 905c0e386 (Megatron-Bridge @dc805f5cf's pin, stack megatron-bridge) does not: FusedAdam gets
use_decoupled_grad True where use_precision_aware_optimizer_no_fp8_or_ds_fp8 (bf16, delayed fp8: optimizer/__init__.py
l. 522-529, optimizer_config.py l. 355-362), reads p.decoupled_grad only and skips a parameter without one (TE
@28777046, v2.13.0, Bridge's uv.lock: fused_adam.py l. 571-577), and Megatron-FSDP sets decoupled_grad only under a
buffer attribute nothing sets (param_and_grad_buffer.py l. 2844-2846, 2870-2875): no parameter is updated, nothing
refuses it. Start-up rule PRECISION_AWARE_MFSDP (code 84) refuses it (runs.low_precision_moments
no_decoupled_grad_modes); with another fp8 recipe (tensorwise: FusedAdam reads param.grad) or the CPU offload
(HybridDeviceOptimizer reads decoupled_grad or grad, hybrid_optimizer.py l. 91, 102) it runs.

By hand, Llama 3 8B, P = 8,030,261,248 parameters, 8 GPUs, DP 8, bytes_per_param bf16-moments (2 B weights, 4 B
gradients, 4 B master, 2 x 2 B moments), the optimizer sharded over 8: L8 = P / 8 = 1,003,782,656.
- distributed_optimizer: master 2 B x L8 = 2,007,565,312 B; Adam 4 x L8 = 4,015,130,624 B;
- megatron_fsdp_optim: master 4 B x L8 = 4,015,130,624 B; Adam the same.
The optimizer step's HBM bytes a parameter (step.adam_bytes_per_param, 2 (master + moments) + weights + gradients, + the
weights re-read beside a master below 4 B): 2 (2 + 4) + 2 + 4 + 2 = 20 under the distributed optimizer,
2 (4 + 4) + 2 + 4 = 22 under Megatron-FSDP: the optimizer time 22 / 20 = 1.1 times the other's (the same shard, HBM).
"""
from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_stack
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job, StackDefaults
from planner.space import mode_heads
from planner.startup import CODES, LATER_RULES, te_decoupled

P = 8_030_261_248
L8 = P // 8
MFSDP = {"megatron_fsdp_optim": "zero1", "megatron_fsdp_optim_grads": "zero2",
         "megatron_fsdp_optim_grads_params": "fsdp", "megatron_fsdp_hsdp": "hsdp"}


def _job(**kw):
    job = dict(model="llama3-8b", gpus=8, tp=1, stack="megatron", hardware="h100-sxm", global_batch=8, micro_batch=1,
               seq_len=1024, recompute="full", bytes_per_param="bf16-moments")
    job.update(kw)
    return Job(**job)


def test_rule_code_and_stack_data():
    """Code 84 (85, TORCHTITAN_SEQ_SP_CP, follows); the data per commit: megatron (d98e8a64) names every Megatron-FSDP mode own-master and none
    without decoupled_grad; megatron-bridge (905c0e386) inherits the former and names all four in the latter."""
    assert CODES["PRECISION_AWARE_MFSDP"] == 84 and CODES["TORCHTITAN_SEQ_SP_CP"] == 85 and CODES["TORCHTITAN_VARLEN_CP"] == 86  # the newest code: tests/test_startup_codes.py; detmode: 91-93, fuzz99: 96, 97: TORCHTITAN03_STAGE_LISTS (FIXED_CODE_RULES)  # rule87: 87-89 follow, ttchecks: 90, muonleft: 94, 95 (FIXED_CODE_RULES)  # rule85
    assert LATER_RULES[-10].key == "PRECISION_AWARE_MFSDP"  # then TORCHTITAN_SEQ_SP_CP (85), TORCHTITAN_VARLEN_CP (86), 87-89 (rule87), 90 (ttchecks), 91-93 (detmode)
    m = load_stack("megatron").runs.low_precision_moments
    b = load_stack("megatron-bridge").runs.low_precision_moments
    assert set(m.own_master_modes) == set(b.own_master_modes) == set(MFSDP)
    assert m.no_decoupled_grad_modes == [] and set(b.no_decoupled_grad_modes) == set(MFSDP)
    assert any("@905c0e386" in x and "fused_adam.py step l. 571-577" in x for x in b.sources)
    assert any("l. 1147-1161" in x for x in m.sources)


def test_stack_file_cannot_set_the_job_flag():
    """defaults.precision_aware_fused_adam is laid from the job (plan.stack_for_states), never read from a file."""
    with pytest.raises(ValueError, match="not a stack file's setting"):
        StackDefaults(torch_compile=False, tp_comm_overlap=False, dp_comm_overlap=True, bytes_per_param="megatron",
                      microbatches_per_step="from_micro_batch", precision_aware_fused_adam=True, sources=["x"])


@pytest.mark.parametrize("mode, level", [("distributed_optimizer", "zero1"), ("megatron_fsdp_optim", "zero1")])
def test_master_bytes_per_mode_on_megatron(explain, mode, level):
    """The master: TE's 2 B remainders under the distributed optimizer, Megatron-FSDP's fp32 shard (4 B) under its own
    mode; Adam's bf16 moments 4 B either way (module docstring)."""
    s, _, _, out = explain(**_job(sharding=level, sharding_mode=mode).model_dump(exclude_unset=True))
    assert s.precision_aware and s.te_master and s.remainders and s.bpp.master == 2.0
    t = out["memory"]["terms"]
    want = 2 * L8 if mode == "distributed_optimizer" else 4 * L8
    assert t["master_weights"] == pytest.approx(want, rel=1e-12)
    assert t["adam"] == pytest.approx(4 * L8, rel=1e-12)


def test_optimizer_time_follows_the_master(explain):
    """The step's HBM bytes a parameter: 20 under the distributed optimizer, 22 under Megatron-FSDP (module docstring)."""
    t = {}
    for mode in ("distributed_optimizer", "megatron_fsdp_optim"):
        t[mode] = explain(**_job(sharding="zero1", sharding_mode=mode).model_dump(exclude_unset=True))[3]["time"]["optimizer_s"]
    assert t["megatron_fsdp_optim"] / t["distributed_optimizer"] == pytest.approx(22.0 / 20.0, rel=1e-12)


def test_fp32_moments_master_unchanged(explain):
    """Without the remainders (fp32 Adam, no precision-aware optimizer) both modes hold a 4 B master: nothing moves."""
    for mode in ("distributed_optimizer", "megatron_fsdp_optim"):
        s, _, _, out = explain(**_job(sharding="zero1", sharding_mode=mode, bytes_per_param="megatron").model_dump(
            exclude_unset=True))
        assert not s.remainders and out["memory"]["terms"]["master_weights"] == pytest.approx(4 * L8, rel=1e-12)


def test_mode_heads_split_the_two_zero1_modes():
    """distributed_optimizer and megatron_fsdp_optim price alike but for the master under TE's remainders: with them the
    two head their own classes (the search prices each), without them one class."""
    stack = load_stack("megatron")
    names = [m.name for m in stack.runs.sharding]
    i, j = names.index("distributed_optimizer"), names.index("megatron_fsdp_optim")
    from planner.plan import bytes_per_param

    bpp = bytes_per_param("bf16-moments")[0]
    dec = {"precision_aware": True, "te_master": True}
    same = mode_heads(stack, bpp, dec, remainders=False)
    split = mode_heads(stack, bpp, dec, remainders=True)
    assert same[0, j] == same[0, i] == i  # one class at pp 1 without the remainders
    assert split[0, i] == i and split[0, j] == j


@pytest.mark.parametrize("mode", sorted(MFSDP))
@pytest.mark.parametrize("prec", [dict(), dict(precision="fp8", fp8_recipe="delayed")])
def test_bridge_refuses_where_fused_adam_reads_decoupled_grad(mode, prec):
    """megatron-bridge, bf16 or delayed fp8 (te_master), every Megatron-FSDP mode: refused, naming the rule and the
    905c0e386 / TE lines (the fusion off, as Bridge runs Megatron-FSDP: its job_settings)."""
    kw = dict(shard_group=4) if mode == "megatron_fsdp_hsdp" else {}
    with pytest.raises(PlannerError) as e:
        resolve(_job(stack="megatron-bridge", sharding=MFSDP[mode], sharding_mode=mode, gradient_accumulation_fusion=False,
                     **kw, **prec))
    msg = str(e.value)
    assert "PRECISION_AWARE_MFSDP" in msg and "@905c0e386" in msg and "fused_adam.py step l. 571-577" in msg


@pytest.mark.parametrize("kw", [
    dict(stack="megatron-bridge", sharding="zero1", sharding_mode="distributed_optimizer"),  # param.grad -> decoupled
    dict(stack="megatron", sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params"),  # d98e8a64 sets it
    dict(stack="megatron-bridge", sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params",
         precision="fp8", fp8_recipe="tensorwise"),  # FusedAdam without use_decoupled_grad reads param.grad
    dict(stack="megatron-bridge", sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params",
         bytes_per_param="megatron"),  # fp32 Adam: no precision-aware optimizer
])
def test_runs_elsewhere(kw):
    settings, plan, _ = resolve(_job(**kw))
    assert settings.stack.runs.sharding[int(plan.smode)].name == kw["sharding_mode"]


def test_te_decoupled_reads_the_job_and_the_plan():
    """te_decoupled: the job's precision-aware optimizer on the GPU (no CPU offload) and the plan's precision / recipe
    among te_master (bf16, delayed), per candidate."""
    from types import SimpleNamespace

    from planner.precisions import FP8_RECIPE_CODES, PRECISION_CODES

    stack = load_stack("megatron-bridge")
    prec = np.array([PRECISION_CODES["bf16"], PRECISION_CODES["fp8"], PRECISION_CODES["fp8"], PRECISION_CODES["fp8"]])
    f8r = np.array([0, FP8_RECIPE_CODES["delayed"], FP8_RECIPE_CODES["tensorwise"], FP8_RECIPE_CODES["blockwise"]])
    plan = SimpleNamespace(tp=np.ones(4, dtype=np.int64), precision=prec, f8r=f8r)
    assert not te_decoupled(stack, plan).any()  # the file's stack: no job laid on it
    on = stack.model_copy(update={"defaults": stack.defaults.model_copy(update={"precision_aware_fused_adam": True})})
    assert te_decoupled(on, plan).tolist() == [True, True, False, False]
    off = stack.model_copy(update={"defaults": stack.defaults.model_copy(update={"precision_aware_fused_adam": False})})
    assert not te_decoupled(off, plan).any()  # the CPU offload: HybridDeviceOptimizer


def test_fit_on_bridge_never_ranks_megatron_fsdp(cli):
    """fit, megatron-bridge, bf16 moments: every row's sharding mode is the distributed optimizer (the Megatron-FSDP
    modes break PRECISION_AWARE_MFSDP); on megatron the Megatron-FSDP modes stay in the search."""
    import json

    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge", "--bytes-per-param",
            "bf16-moments", "--seq-len", "1024", "--top", "20", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert rows and {row["plan"]["sharding_mode"] for row in rows} == {"distributed_optimizer"}
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron", "--bytes-per-param",
            "bf16-moments", "--seq-len", "1024", "--top", "20", "--format", "json")
    assert r.exit_code == 0, r.output
    assert any(row["plan"]["sharding_mode"].startswith("megatron_fsdp") for row in json.loads(r.stdout))


def test_check_refuses_the_job_file(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 1\nstack: megatron-bridge\nbytes_per_param: bf16-moments\n"
                   "sharding: fsdp\nsharding_mode: megatron_fsdp_optim_grads_params\nglobal_batch: 8\nmicro_batch: 1\n"
                   "seq_len: 1024\nrecompute: full\n")
    r = cli("check", str(job))
    assert r.exit_code in (1, 2), r.output
    assert "PRECISION_AWARE_MFSDP" in r.output


def test_bridge_launch_with_megatron_fsdp_is_refused(cli, tmp_path):
    """A Bridge launch as a user writes it (Qwen3 30B-A3B's recipe, whose optimizer is fp32 Adam, with the precision-aware
    optimizer's bf16 moments and Megatron-FSDP optim_grads_params): explain exits 2 naming the rule and its source."""
    f = tmp_path / "launch.sh"
    f.write_text("torchrun --nproc_per_node=8 --nnodes=4 scripts/training/run_recipe.py --recipe qwen3_30b_a3b_pretrain_config "
                 "ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params "
                 "optimizer.use_precision_aware_optimizer=true optimizer.exp_avg_dtype=torch.bfloat16 "
                 "optimizer.exp_avg_sq_dtype=torch.bfloat16\n")
    r = cli("explain", f, "--hardware", "h100-sxm")
    assert r.exit_code == 2, r.output
    assert "breaks start-up rule PRECISION_AWARE_MFSDP" in r.output and "@905c0e386" in r.output
    assert "Traceback" not in r.output
