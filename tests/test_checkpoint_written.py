"""The checkpoint's bytes under the precision-aware optimizer (budget.checkpoint_bytes_per_param, budget.py [5]): what
Megatron-LM @d98e8a64 writes, against what the memory model holds (memory.master_bytes [mw]).

Read at the pinned commits (budget.py [5]):
- distributed optimizer, --ckpt-format torch_dist (default), sharding type dp_reshardable (checkpointing.py l. 558):
  _get_main_param_and_optimizer_states (distrib_optimizer.py l. 1090-1117) reads TE FusedAdam.get_unscaled_state for each
  state under use_precision_aware_optimizer_no_fp8_or_ds_fp8 (l. 1108) and saves master_param as "param" (l. 1109),
  each tensor at its own dtype (l. 1977). TransformerEngine @4329ff84 fused_adam.py get_unscaled_state returns the
  int16 remainders as they are (l. 334-341: the fp32 master is NOT reconstructed) and a bf16 moment as .float()
  (l. 344-349): master 2 B, Adam's m and v 4 + 4 B, and the bf16 weights (the model's own state dict), without which the
  remainders restore nothing (fused_adam.py l. 98-101): 2 B. 2 + 8 + 2 = 12 B a parameter.
- Megatron-FSDP, --ckpt-format fsdp_dtensor (required, arguments.py l. 1169-1170): the optimizer writes its raw state
  (sharded_param_state_fsdp_dtensor, distrib_optimizer.py l. 1635-1657: bf16 m, v, 2 + 2 B) and the model's state dict
  holds the fp32 main weight shards (megatron_fsdp.py l. 1168-1173, 1408-1427): 4 B, no bf16 weights. 4 + 4 = 8 B.
Before, the job's copy was P x (bpp.master 2 + bpp.optimizer 4) = 6 B a parameter for both, and the per-GPU shard under
Megatron-FSDP came from the memory terms (4 + 4 = 8 B over 8), so their ratio (the distinct shards) was 6, not 8.

By hand, Llama 3 8B, P = 8,030,261,248 (vocab 128,256 = 128 x 1,002: no padding at tp 1), 8 GPUs, DP 8, zero1,
bf16-moments (weights 2, gradients 4, master 4 -> 2 as TE's remainders, moments 2 x 2), L8 = P / 8 = 1,003,782,656:
- distributed_optimizer: job 12 P = 96,363,134,976 B; per GPU master 2 L8 = 2,007,565,312, moments 8 L8 =
  8,030,261,248, weights 2 L8 = 2,007,565,312: zero1 holds the whole bf16 weights (explain's `weights` term, 2 P), but
  Megatron's fully parallel save (on by default) shares the replicated weights' write among the 8 data-parallel ranks
  (budget.py [8]), each about its partition's L8 elements. Before branch ckpt the shard counted the whole 2 P.
- megatron_fsdp_optim: job 8 P = 64,242,089,984 B; per GPU master 4 L8 = 4,015,130,624, moments 4 L8 = 4,015,130,624,
  no weights; distinct shards 8 P / 8 L8 = 8 (the DP degree).
- fp32 Adam (--bytes-per-param megatron, no precision-aware optimizer): the distributed optimizer 4 + 8 and the model's
  bf16 weights 2 = 14 B (budget.py [8]; 12 B before branch ckpt), Megatron-FSDP 4 + 8 = 12 B (its model state dict
  holds the fp32 main weights, no bf16 copy beside them).
"""
from __future__ import annotations

import json

import pytest

from planner.budget import checkpoint_bytes_per_param, checkpoint_shards

P = 8_030_261_248
L8 = P // 8


def _job(**kw):
    job = dict(model="llama3-8b", gpus=8, tp=1, stack="megatron", hardware="h100-sxm", global_batch=8, micro_batch=1,
               seq_len=1024, recompute="full", bytes_per_param="bf16-moments", sharding="zero1")
    job.update(kw)
    return job


@pytest.mark.parametrize("mode, master, moments, weights, job", [
    ("distributed_optimizer", 2 * L8, 8 * L8, 2 * L8, 12 * P),
    ("megatron_fsdp_optim", 4 * L8, 4 * L8, 0, 8 * P),
])
def test_precision_aware_checkpoint_bytes(explain, mode, master, moments, weights, job):
    """What each mode writes for Llama 3 8B with bf16 moments (module docstring)."""
    s, plan, est, out = explain(**_job(sharding_mode=mode))
    assert s.te_master and s.remainders
    sh = checkpoint_shards(s, plan, est)
    assert float(sh.size.master_weights_bytes) == pytest.approx(master, rel=1e-12)
    assert float(sh.size.optimizer_bytes) == pytest.approx(moments, rel=1e-12)
    assert float(sh.size.extra_bytes) == pytest.approx(weights, rel=1e-12)
    assert sh.job_bytes == pytest.approx(job, rel=1e-12)
    # the memory model holds the moments at 2 B each either way; the master as memory.master_bytes says
    t = out["memory"]["terms"]
    assert t["adam"] == pytest.approx(4 * L8, rel=1e-12)
    assert t["master_weights"] == pytest.approx(master, rel=1e-12)


def test_megatron_fsdp_distinct_shards_is_dp():
    """Megatron-FSDP: one copy is the 8 GPUs' shards exactly (8 P / 8 L8), not 6 as with the job-level 2 B master."""
    from planner.explain import evaluate
    from planner.plan import resolve
    from planner.schema import Job

    s, plan, _ = resolve(Job(**_job(sharding_mode="megatron_fsdp_optim")))
    assert checkpoint_shards(s, plan, evaluate(s, plan)).distinct == pytest.approx(8.0, rel=1e-12)


@pytest.mark.parametrize("mode, weights", [("distributed_optimizer", 2.0), ("megatron_fsdp_optim", 0.0)])
def test_fp32_adam(explain, mode, weights):
    """fp32 Adam without the precision-aware optimizer: master 4 + moments 8 B a parameter, and under torch_dist the
    model's bf16 weights, 2 B (budget.py [8]); Megatron-FSDP's model state dict is its fp32 main weights."""
    s, plan, _, _ = explain(**_job(sharding_mode=mode, bytes_per_param="megatron"))
    assert not s.te_master
    ck = checkpoint_bytes_per_param(s, plan)
    assert (float(ck.master), float(ck.optimizer), float(ck.weights)) == (4.0, 8.0, weights)


def test_budget_cli_reports_the_written_bytes(cli):
    """`planner budget` on the distributed optimizer: job 12 P, the bf16 weights among the saved terms, the rank's share
    of them (2 L8) in its shard."""
    r = cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--sharding", "distributed_optimizer",
            "--bytes-per-param", "bf16-moments", "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024",
            "--recompute", "full", "--tokens", "1e9", "--mc-runs", "0", "--format", "json")
    assert r.exit_code == 0, r.stderr
    ck = json.loads(r.stdout)["checkpoint"]
    assert ck["saved_terms"] == "master_weights + adam + weights"
    assert ck["job_bytes"] == pytest.approx(12 * P, rel=1e-12)
    assert ck["bytes_per_gpu"] == pytest.approx(2 * L8 + 8 * L8 + 2 * L8, rel=1e-12)
