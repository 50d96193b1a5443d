"""Megatron-FSDP's step gradient on the two Megatron stacks (stack_db runs.sharding step_grads, memory.py [mg], [sg])
and the warning on Megatron-LM's skipped embedding all-reduce (plan._embedding_grad_skip_warning, step.py [20]).

What the code does with the optimizer's gradient (update_main_grads: the rank's shard of the main gradient buffer,
.to(param.dtype), the fp32 main weight's, where a main weight buffer exists):
- NVIDIA/Megatron-LM @d98e8a64 (stack megatron) param_and_grad_buffer.py l. 3351-3381: under use_decoupled_grad
  (--use-precision-aware-optimizer, training.py l. 2649-2650) the shard itself goes to param.decoupled_grad, no
  conversion: step_grads fp32_decoupled precision_aware.
- Megatron-Core 905c0e386 (stack megatron-bridge) l. 2813-2875: the conversion and param.grad are skipped only where the
  buffer's use_precision_aware_optimizer attribute is set (l. 2845, 2872), which nothing at 905c0e386 sets: no
  fp32_decoupled. The copy is made wherever the main gradients are narrower than fp32; Bridge's buffer is fp32 whatever
  the job says (mcore_fsdp_adapter.py l. 73-75, 92-97: main_grads_bytes 4), so .to(fp32) is the tensor itself: no copy
  at any level, with the precision-aware optimizer or without. No figure moves.

By hand, Llama 3 8B (P = 8,030,261,248) on 4 GPUs, optim_grads_params, L4 = P / 4 = 2,007,565,312: with bf16 weights,
fp32 main gradients and bf16 Adam moments (the precision-aware optimizer on by default, Adam's moments below fp32) the
megatron stack's states are 2 L4 + 4 L4 + 4 L4 + 4 L4: the master is Megatron-FSDP's own fp32 main weight shard, 4 B,
not TE's 2 B remainders (d98e8a64 optimizer/__init__.py l. 1147-1161 sets FusedAdam's master_weights False under
Megatron-FSDP; runs.low_precision_moments.own_master_modes, memory.py [mw]), and the step copies nothing
(step_grad_copies 0: 4 B gradients, .to(fp32) the tensor itself). On megatron-bridge (905c0e386) the same job does not
train: FusedAdam reads decoupled_grad, which that Megatron-FSDP never sets (start-up rule PRECISION_AWARE_MFSDP,
tests/test_precision_aware_mfsdp.py); with fp8 tensorwise (FusedAdam reads param.grad) it runs, decoupling nothing.
"""
from __future__ import annotations

import pytest

from planner.catalog import load_stack
from planner.memory import decoupled_grad
from planner.plan import resolve
from planner.schema import Job

P = 8_030_261_248
L4 = P // 4
MFSDP = ("megatron_fsdp_optim", "megatron_fsdp_optim_grads", "megatron_fsdp_optim_grads_params", "megatron_fsdp_hsdp")
BF16_MOMENTS_FP32_GRADS = {"weights": 2, "gradients": 4, "master": 4, "optimizer": 4}


def test_stack_data_per_commit():
    """megatron (d98e8a64) decouples under the precision-aware optimizer; megatron-bridge (905c0e386) never."""
    for name, kind in (("megatron", "precision_aware"), ("megatron-bridge", None)):
        modes = {m.name: m for m in load_stack(name).runs.sharding}
        for mode in MFSDP:
            sg = modes[mode].step_grads
            assert sg.fp32 and not sg.flat and not sg.partition_only, (name, mode)
            assert sg.fp32_decoupled == kind, (name, mode)
    bridge = {m.name: m for m in load_stack("megatron-bridge").runs.sharding}
    assert all(bridge[m].main_grads_bytes == 4 for m in MFSDP)
    assert all("@905c0e386" in bridge[m].step_grads.sources[0] for m in MFSDP)


@pytest.mark.parametrize("stack, decoupled, extra", [("megatron", True, {}),
                                                    ("megatron-bridge", False, dict(precision="fp8", fp8_recipe="tensorwise"))])
def test_precision_aware_decouples_on_megatron_lm_only(explain, stack, decoupled, extra):
    """The job's precision-aware optimizer (on: bf16 moments) decouples the shard only where the stack's mode says so
    (on megatron-bridge only with an fp8 recipe whose FusedAdam reads param.grad: bf16 is PRECISION_AWARE_MFSDP's)."""
    s, p, _, out = explain(model="llama3-8b", gpus=4, tp=1, stack=stack, sharding="fsdp",
                           sharding_mode="megatron_fsdp_optim_grads_params", recompute="full", micro_batch=1,
                           global_batch=4, seq_len=512, bytes_per_param=BF16_MOMENTS_FP32_GRADS, **extra)
    mode = s.stack.runs.sharding[int(p.smode)]
    assert s.precision_aware and mode.name == "megatron_fsdp_optim_grads_params"
    assert decoupled_grad(s, mode.step_grads.fp32_decoupled) is decoupled
    t = out["memory"]["terms"]
    # the master: Megatron-FSDP's fp32 main weight shard, 4 B (bf16 on megatron: TE would hold 2 B remainders under
    # the distributed optimizer, te_master, but holds no master here, memory.py [mw]; tensorwise: no TE master at all)
    assert s.te_master is decoupled and s.remainders is decoupled
    assert (t["weights"], t["gradients"], t["master_weights"], t["adam"]) == pytest.approx(
        (2 * L4, 4 * L4, 4 * L4, 4 * L4), rel=1e-12)
    # fp32 main gradients: .to(fp32) is the tensor itself, decoupled or not
    assert t["step_grad_copies"] == 0.0


def _job(**kw):
    job = dict(model="llama3-8b", gpus=16, tp=1, pp=2, stack="megatron", hardware="h100-sxm", global_batch=16,
               micro_batch=1, seq_len=4096, recompute="full", mtp_layers=1, sharding="fsdp",
               sharding_mode="megatron_fsdp_optim_grads_params", precision_aware_optimizer=True)
    job.update(kw)
    return resolve(Job(**job))[2]


def _skip_warnings(ws):
    return [w for w in ws if "never sums the two copies' gradients" in w]


def test_warns_where_megatron_lm_skips_the_embedding_all_reduce():
    """Megatron-LM @d98e8a64, Megatron-FSDP, pp 2, an MTP module, --use-precision-aware-optimizer: finalize_model_grads
    l. 255-257 return before the all-reduce (param.grad None), the two embedding copies drift apart: one warning that
    names the line."""
    w = _skip_warnings(_job())
    assert len(w) == 1
    assert "the first stage's and the MTP stage's word embeddings at pp 2 under megatron_fsdp_optim_grads_params" in w[0]
    assert "finalize_model_grads.py _allreduce_word_embedding_grads l. 250-258" in w[0]
    assert "l. 255-257" in w[0] and "@d98e8a64" in w[0]


def test_warns_for_a_tied_embedding():
    w = _skip_warnings(_job(model="megatron-gpt-1.7b", mtp_layers=0, tp=2, global_batch=32, seq_len=2048,
                            sharding="zero1", sharding_mode="megatron_fsdp_optim"))
    assert len(w) == 1 and w[0].startswith("the tied input and output embeddings at pp 2 under megatron_fsdp_optim ")


@pytest.mark.parametrize("kw", [
    dict(precision_aware_optimizer=False),  # param.grad set: the all-reduce runs
    # 905c0e386 sets param.grad whatever the optimizer (tensorwise: FusedAdam reads it; bf16 is PRECISION_AWARE_MFSDP's)
    dict(stack="megatron-bridge", bytes_per_param="megatron", precision="fp8", fp8_recipe="tensorwise"),
    dict(pp=1, gpus=8, global_batch=8),  # one stage: no embedding group
    dict(mtp_layers=0),  # llama3-8b untied, no MTP: no second copy
    dict(sharding="zero1", sharding_mode=None),  # the distributed optimizer all-reduces main_grad
])
def test_no_warning_elsewhere(kw):
    assert _skip_warnings(_job(**kw)) == []


def test_check_prints_it(cli, tmp_path):
    """planner check on the job file: the warning reaches the command's output (explain and fit rows resolve alike)."""
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 16\ntp: 1\npp: 2\nstack: megatron\nmtp_layers: 1\nsharding: fsdp\n"
                   "sharding_mode: megatron_fsdp_optim_grads_params\nprecision_aware_optimizer: true\n"
                   "global_batch: 16\nmicro_batch: 1\nseq_len: 4096\nrecompute: full\n")
    r = cli("check", str(job))
    assert r.exit_code in (0, 1), r.output
    assert "never sums the two copies' gradients" in r.output


def test_fit_names_the_rows(cli):
    """fit: each row resolves as explain does (search.fit), and the rows meeting the combination are named once."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--stack", "megatron", "--mtp-layers", "1",
            "--precision-aware-optimizer", "--sharding", "fsdp", "--pp", "2", "--top", "3", "--seq-len", "4096")
    assert r.exit_code == 0, r.output
    w = [x for x in r.output.splitlines() if "never sums the two copies' gradients" in x]
    assert len(w) == 1 and w[0].startswith("warning: rows 1, 2, 3: the first stage's and the MTP stage's")
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--stack", "megatron", "--mtp-layers", "1",
            "--sharding", "fsdp", "--pp", "2", "--top", "3", "--seq-len", "4096")
    assert r.exit_code == 0, r.output
    assert "never sums the two copies' gradients" not in r.output
