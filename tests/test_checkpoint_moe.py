"""Who writes a mixture-of-experts model's working weights under Megatron's torch_dist fully parallel save, and how many
bytes the heaviest rank writes (budget.weight_writes, budget.py [9]), by hand on Mixtral 8x7B (model_zoo/mixtral-8x7b:
h 4,096, 8 gated experts of F 14,336 a layer, 32 layers, GQA 32 / 8 heads of 128, untied vocab 32,000).

Plan A: 64 GPUs, tp 4, etp 1, ep 2, pp 4 (dp 4, cp 1), zero1 (the distributed optimizer), fp32 master and moments,
bf16 weights. A stage holds tp x dp = 16 ranks, local index r = 0 .. 15 (the last stage: global 48 + r):
- dense grid (tp innermost): TP rank r mod 4; the dp x cp groups {0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14},
  {3, 7, 11, 15} (the fully parallel save's groups);
- expert grid (etp 1 innermost, then ep, then edp; parallel_state.py l. 886-895): EP rank r mod 2, expert-DP rank
  r // 2, edp = 16 / 2 = 8. EP rank 0's 4 experts are held by r = 0, 2, ..., 14; their main replica (edp rank 0) is
  r = 0, in group {0, 4, 8, 12}, whose 4 ranks all hold them: w_e = edp gcd(tp, etp ep) / tp = 8 x 2 / 4 = 4 writers.
  EP rank 1's: r = 1, group {1, 5, 9, 13}. The groups {2, 6, 10, 14} and {3, 7, 11, 15} hold replicas only and write
  no expert weight.
- the last stage's local experts: 8 MoE layers x 4 experts x 3 ShardedTensors (fc1's w and v halves, fc2:
  apply_swiglu_sharded_factory) = 96 tensors of F h / etp = 58,720,256 elements; 24 per writer (round robin, fewest
  holders first), 1,409,286,144 elements. Then the dense tensors, the output layer's shard first (vocab padded to a
  multiple of 128 x tp = 512: 32,256 rows, / 4 = 8,064 x 4,096 = 33,030,144 elements), onto the least-loaded rank of
  the group (24 experts like the others): 1,442,316,288 elements = 2,884,632,576 B; the other dense tensors (the
  stage's 117,248,000 dense elements a TP rank less the output layer, 84,217,856) fit on the three other ranks below
  it. Before branch ckptmoe: the optimizer partition's elements, the experts over their optimizer shard d_e = 8:
  (117,248,000 / 4 + 5,637,144,576 / 8) x 2 = 1,467,910,144 B.
- the master and moments (each rank's own partition, every one a main replica): unchanged, 4 and 8 B x
  (29,312,000 + 704,643,072) = 2,935,820,288 and 5,871,640,576 B.

Plan B: the same at the default etp = tp = 4, ep 2 (edp 16 / 8 = 2): expert index r = etp rank + 4 EP rank + 8 edp
rank, so group {0, 4, 8, 12} holds the TP-rank-0 shards of EP rank 0 (r = 0, 8) and EP rank 1 (r = 4, 12), both main
replicas (r = 0, 4) in it: w_e = 2 x gcd(4, 8) / 4 = 2 = edp, every group writes its experts. 8 layers x 4 experts x 3
= 96 tensors of 14,336 x 4,096 / 4 = 14,680,064 elements, 48 a holder, 704,643,072, placed before the dense tensors
(2 holders of 4); the output layer's 33,030,144 joins one: 737,673,216 elements = 1,475,346,432 B of weights, above
the partition's mean (704,643,072 + 117,248,000 / 4) x 2 = 1,467,910,144 B, the figure before branch ckptmoe.

Plan C: 512 GPUs, tp 1, ep 2, pp 8 (dp 64, edp 32, w_e 32): 4 layers x 4 experts x 3 = 48 tensors of 58,720,256 on
32 holders: 16 ranks get 2, 16 get 1; the output layer (32,000 x 4,096 = 131,072,000, no padding at tp 1) joins a rank
holding 1: 189,792,256 elements = 379,584,512 B, where the partition's even share priced 2 x (48 x 58,720,256 / 32 +
299,012,096 / 64) = 185,504,896 B before (299,012,096: the stage's 4 layers' dense elements and the output layer).
"""
from __future__ import annotations

import json

import pytest

from planner.budget import checkpoint_shards, weight_writes
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job

S1 = 14_336 * 4_096  # one expert's fc1 half or fc2 at etp 1


def _plan(**kw):
    job = dict(model="mixtral-8x7b", stack="megatron", hardware="h100-sxm", sharding="zero1", seq_len=4096,
               global_batch=512, micro_batch=1, recompute="full")
    job.update(kw)
    s, plan, _ = resolve(Job(**job))
    est = evaluate(s, plan)
    return s, plan, est


def test_etp1_ep2_tp4_two_groups_write_the_experts():
    """Plan A (module docstring): w_e 4 of edp 8, 24 of 96 tensors a writer, the output layer beside them."""
    s, plan, est = _plan(gpus=64, tp=4, etp=1, ep=2, pp=4)
    assert int(est.stage) == 1  # the last stage (memory.STAGE_LAST) is explain's heaviest
    ww = weight_writes(s, plan, est)
    assert float(ww.writers) == 4.0 and float(ww.tensors) == 96.0 and float(ww.tensor) == S1
    assert float(ww.largest) == 8_064 * 4_096 == 33_030_144
    assert float(ww.floor) == 24 * S1 + 33_030_144 == 1_442_316_288
    sh = checkpoint_shards(s, plan, est)
    assert float(sh.size.extra_bytes) == 2 * 1_442_316_288 == 2_884_632_576
    assert float(sh.size.master_weights_bytes) == 4 * (29_312_000 + 704_643_072)
    assert float(sh.size.optimizer_bytes) == 8 * (29_312_000 + 704_643_072)


def test_default_etp_every_group_writes_its_experts():
    """Plan B: etp = tp, w_e = edp; 48 expert tensors a holder and the output layer's shard."""
    s, plan, est = _plan(gpus=64, tp=4, ep=2, pp=4)
    ww = weight_writes(s, plan, est)
    assert float(ww.writers) == 2.0 and float(ww.tensors) == 96.0 and float(ww.tensor) == S1 / 4
    assert float(ww.excess) == 0.0  # w_e = d_e: the writers' mean is the optimizer partition's
    sh = checkpoint_shards(s, plan, est)
    assert float(sh.size.extra_bytes) == 2 * (48 * S1 / 4 + 33_030_144) == 1_475_346_432


def test_whole_expert_tensors_on_more_holders_than_halves():
    """Plan C: 48 tensors on 32 holders, the output layer on a rank holding one."""
    s, plan, est = _plan(gpus=512, tp=1, ep=2, pp=8)
    ww = weight_writes(s, plan, est)
    assert (float(ww.writers), float(ww.tensors)) == (32.0, 48.0)
    sh = checkpoint_shards(s, plan, est)
    assert float(sh.size.extra_bytes) == 2 * (S1 + 131_072_000) == 379_584_512


def test_budget_reports_the_heaviest_writer(cli):
    """`planner budget` on plan A: the rank's weights 2,884,632,576 B, its host copy over PCIe Gen5 x16 (64 GB/s) that
    shard; one copy of the job, 14 B a parameter over the 2 TB/s storage, does not depend on who writes what."""
    r = cli("budget", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "4", "--etp", "1", "--ep", "2", "--pp", "4",
            "--sharding", "zero1", "--seq-len", "4096", "--global-batch", "512", "--micro-batch", "1",
            "--recompute", "full", "--tokens", "1e12", "--mc-runs", "0", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    ck = js["checkpoint"]
    assert ck["weights_bytes_per_gpu"] == 2_884_632_576
    total = 2_884_632_576 + 12 * (29_312_000 + 704_643_072)
    assert ck["bytes_per_gpu"] == total
    assert ck["copy_s"] == pytest.approx(total / 64e9, rel=1e-12)
    assert ck["job_bytes"] == 14 * js["params"]
    assert ck["write_s"] == pytest.approx(14 * js["params"] / 2e12, rel=1e-12)


def test_ddp_keeps_the_upper_bound():
    """Without a sharded optimizer the whole model-parallel part stays priced (budget.py [8]): no whole-tensor rule."""
    s, plan, est = _plan(gpus=64, tp=4, etp=1, ep=2, pp=4, sharding="none")
    sh = checkpoint_shards(s, plan, est)
    assert float(sh.size.extra_bytes) == pytest.approx(float(est.memory.weights), rel=1e-12)
