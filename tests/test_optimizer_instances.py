"""Megatron-LM's --num-distributed-optimizer-instances N under the distributed optimizer (job field shard_group
dp / N under sharding zero1, stack_db megatron runs.sharding distributed_optimizer optimizer_instances): the optimizer
states over dp / N x cp ranks (memory.model_state_terms), the gradient shard all-reduced across the N instances
(step.dp_traffic ar_inst), the reader, the export and the refusals. The corpus row by hand:
tests/test_megatron_ci.py test_hand_computed_optimizer_instances_row."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.memory import STAGE_LAST, stage_memory_terms
from planner.plan import plan_dict, resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

BASE = dict(model="llama3-8b", gpus=16, stack="megatron", sharding="zero1")
P = 8_030_261_248  # Llama 3 8B's parameters (the catalog's count)


def _terms(job):
    s, p, _ = resolve(job)
    return s, p, stage_memory_terms(s, p)[STAGE_LAST]


def test_states_shard_over_the_instance():
    """dp 16, shard group 8 (N 2): the fp32 master 4 P / 8 and Adam's 8 P / 8, against / 16 with one instance;
    the weights and the whole fp32 gradients unchanged (ZeRO-1 keeps them whole)."""
    _, _, one = _terms(Job(**BASE))
    s, p, two = _terms(Job(**BASE, shard_group=8))
    assert float(two["master_weights"]) == pytest.approx(4 * P / 8, rel=1e-12)
    assert float(two["adam"]) == pytest.approx(8 * P / 8, rel=1e-12)
    assert float(one["adam"]) == pytest.approx(8 * P / 16, rel=1e-12)
    assert float(two["weights"]) == float(one["weights"]) and float(two["gradients"]) == float(one["gradients"])
    assert plan_dict(p, s)["shard_group"] == 8


def test_the_shard_all_reduce_is_priced():
    """The instances add an all-reduce of the 1 / 8 gradient shard across 2 groups: more DP traffic than the plan
    without it; a shard group of dp is the plain distributed optimizer (no all-reduce), the same plan."""
    from planner.step import step_time

    def dp_total(job):
        s, p, _ = resolve(job)
        return float(step_time(s, p)[1]["dp_comm_s"])  # the DP traffic a step, exposed or not

    assert dp_total(Job(**BASE, shard_group=8)) > dp_total(Job(**BASE))
    assert dp_total(Job(**BASE, shard_group=16)) == dp_total(Job(**BASE))


def test_refused_where_megatron_refuses_or_the_mode_has_none():
    with pytest.raises(PlannerError, match="shard_group=3 does not divide dp=16"):
        resolve(Job(**BASE, shard_group=3))
    with pytest.raises(PlannerError, match="optimizer_instances"):
        resolve(Job(**dict(BASE, stack="torchtitan"), shard_group=8))
    with pytest.raises(PlannerError, match="shard_group is only used"):
        resolve(Job(**dict(BASE, sharding="zero2"), shard_group=8))


def test_reader_and_export_round_trip(tmp_path):
    gpt = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
           "--micro-batch-size 4 --global-batch-size 32 --bf16 --tensor-model-parallel-size 2 "
           "--use-distributed-optimizer --vocab-file v.json --merge-file m.txt ")
    f = tmp_path / "a.args"
    f.write_text(gpt + "--num-distributed-optimizer-instances 2\n")
    cfg = load_trainer_config(f, gpus=8)
    assert cfg.job["shard_group"] == 2 and cfg.job["sharding_mode"] == "distributed_optimizer" and not cfg.unmodelled
    s, p, _ = resolve(Job.model_validate(cfg.job))
    assert plan_dict(p, s)["shard_group"] == 2  # dp 4 / 2 instances
    job = Job(**BASE, shard_group=4)
    s, p, _ = resolve(job)
    text, _ = export_plan(plan_dict(p, s), "megatron")
    assert "--num-distributed-optimizer-instances 4" in text


@pytest.mark.parametrize("sharding", ["--use-distributed-optimizer", "--use-megatron-fsdp"])
@pytest.mark.parametrize("pp, shard_group", [(64, None), (3, None), (1, 2)])
def test_reader_reads_no_shard_group_off_a_mesh_the_gpus_do_not_hold(tmp_path, cli, sharding, pp, shard_group):
    """tp 2 x pp 64 = 128 ranks on 8 GPUs gave dp 8 // 128 = 0, which 2 instances divide: shard group 0, refused as a
    bare schema field ("field `shard_group`: Input should be greater than 0"; megatron-recent fuzz seed 84, the
    corpus' multi_dist_optimizer_instances file with --pipeline-model-parallel-size 64). tp 2 x pp 3 = 6 leaves 8 // 6
    = 1 dp rank, which Megatron-FSDP's branch refused as '2 does not divide dp 1'. Neither mesh holds on 8 GPUs:
    the reader sets no shard group, and the plan's check names the mesh (2 x 1 x pp does not divide --gpus 8); at
    pp 1 dp 8 / 2 tp = 4, the shard group 4 / 2 instances = 2 (under Megatron-FSDP optim_grads_params: HSDP's)."""
    gpt = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
           "--micro-batch-size 4 --global-batch-size 32 --bf16 --tensor-model-parallel-size 2 --vocab-file v.json "
           f"--merge-file m.txt {sharding} --num-distributed-optimizer-instances 2 --pipeline-model-parallel-size {pp}\n")
    f = tmp_path / "a.args"
    f.write_text(gpt)
    assert load_trainer_config(f, gpus=8).job.get("shard_group") == shard_group
    r = cli("explain", f, "--gpus", 8)
    if shard_group is None:
        assert r.exit_code == 2 and f"error: {f}: tp=2 x cp=1 x pp={pp} = {2 * pp} does not divide --gpus 8" in r.stderr
    else:
        assert r.exit_code == 0, r.stderr
