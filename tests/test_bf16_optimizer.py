"""DeepSpeed's BF16_Optimizer as the megatron-deepspeed sharding mode bf16_optimizer (issue 21).

microsoft/DeepSpeed @38327e07 builds it for bf16 at ZeRO stage 0 (fp32 accumulation, the default without
ZeRO) and for bf16 at stage 1 with data_types.grad_accum_dtype fp32 (engine.py get_data_types l. 1010-1025,
_do_optimizer_sanity_check l. 1300-1350). deepspeed/runtime/bf16_optimizer.py keeps the bf16 parameters whole,
the fp32 master as a partition over the data-parallel ranks (l. 146-157) with Adam's states over it (l. 196), an
fp32 gradient accumulation buffer over the whole model (l. 162) beside the bf16 gradients, which live until the
next backward's clear_lp_grads (l. 316-329, 445-453); the engine all-reduces the buffer cast to the model dtype
(engine.py allreduce_bucket l. 2491-2516) and the step all-gathers the updated bf16 partitions
(update_lp_params l. 423-436). So a parameter holds 2 + 2 + 4 = 8 B whole and 4 + 8 = 12 B / dp.
"""

from __future__ import annotations

import json

import pytest

from planner import comm
from planner.errors import PlannerError
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job, ShardingMode
from planner.step import Collectives, _context

# Llama 3 8B: 8,030,261,248 parameters (HF safetensors)
P = 8_030_261_248


def _run(**kw):
    job = dict(model="llama3-8b", gpus=16, micro_batch=1, seq_len=8192, global_batch=64, stack="megatron-deepspeed")
    job.update(kw)
    settings, plan, _ = resolve(Job(**job))
    return settings, plan, evaluate(settings, plan)


def test_states_bf16_whole_fp32_buffer_whole_master_and_adam_partitioned():
    """16 GPUs, pp 1: weights 2P, gradients 2P (bf16) + 4P (the fp32 buffer) = 6P, master 4P / 16, Adam 8P / 16;
    ZeRO-1 (mode zero1) the same but 2P of gradients; stage 0 (zero0, fp16's FP16_Optimizer) 4P and 8P replicated."""
    s, plan, b = _run(sharding_mode="bf16_optimizer")
    # zero1 level; the job leaves fp16 out (bf16), so its stack is planned without zero0: bf16_optimizer its fifth mode
    assert (int(plan.sharding), int(plan.smode)) == (1, 4)
    assert [m.name for m in s.stack.runs.sharding] == ["zero1", "zero2", "zero3", "zero3_mics", "bf16_optimizer"]
    m = b.memory
    assert (float(m["weights"]), float(m["gradients"]), float(m["master_weights"]), float(m["adam"])) == (
        2.0 * P, 6.0 * P, 4.0 * P / 16, 8.0 * P / 16)
    z = _run(sharding_mode="zero1")[2].memory
    assert float(z["gradients"]) == 2.0 * P and float(z["master_weights"]) == 4.0 * P / 16
    d = _run(sharding_mode="zero0", fp16=True)[2].memory
    assert (float(d["master_weights"]), float(d["adam"])) == (4.0 * P, 8.0 * P)
    # no step copies of the gradients: the step's fp32 gradient partition is a view of the buffer (step l. 297-301)
    assert float(m["step_grad_copies"]) == 0.0 and float(m["zero12_ipg_bucket"]) == 0.0


def test_dp_traffic_all_reduce_of_the_gradients_then_all_gather_of_the_weights():
    """No overlap (DeepSpeed's default overlap_comm false): the step's DP time is one all-reduce of the 2 B
    gradients over the 16 ranks plus one all-gather of the 2 B weights, each in the stack's DDP buckets, where
    ZeRO-1 reduce-scatters and all-gathers and stage 0 all-reduces only."""
    s, p, b = _run(sharding_mode="bf16_optimizer")
    sc = _context(s, p)
    coll = Collectives(sc)
    fs = s.stack.fsdp
    n_b = max(-(-P // max(fs.ddp_bucket_params, fs.ddp_bucket_params_per_dp_rank * 16)), 1)

    def one(op, per):
        return float(n_b * coll(op, P * per / n_b, 16, coll.strides["dp"]))

    ar = one(comm.ALL_REDUCE, fs.grad_reduce_bytes)
    ag = one(comm.ALL_GATHER, 2.0)
    rs = one(comm.REDUCE_SCATTER, fs.grad_reduce_bytes)
    assert float(b.time_extra["dp_comm_s"]) == pytest.approx(ar + ag, rel=1e-12)
    assert float(_run(sharding_mode="zero1")[2].time_extra["dp_comm_s"]) == pytest.approx(rs + ag, rel=1e-12)
    assert float(_run(sharding_mode="zero0", fp16=True)[2].time_extra["dp_comm_s"]) == pytest.approx(ar, rel=1e-12)
    assert ar > rs  # the all-reduce moves twice the reduce-scatter's bytes: the mode is not ZeRO-1 renamed


def test_fields_only_on_zero1_modes():
    """grad_accum_bytes on zero1 modes only; grad_allreduce on zero1 and fsdp ones (ZeRO-3 of April 2021, step.py
    [21]: stack megatron-deepspeed-2021), refused elsewhere."""
    with pytest.raises(ValueError, match="grad_accum_bytes is priced for zero1 modes only"):
        ShardingMode(name="x", level="zero2", grad_accum_bytes=4, spelling="s", sources=["s"])
    with pytest.raises(ValueError, match="grad_accum_bytes is priced for zero1 modes only"):
        ShardingMode(name="x", level="fsdp", grad_accum_bytes=4, spelling="s", sources=["s"])
    for level in ("none", "zero2", "hsdp"):
        with pytest.raises(ValueError, match="grad_allreduce is priced for zero1 modes"):
            ShardingMode(name="x", level=level, grad_allreduce=True, spelling="s", sources=["s"])
    assert ShardingMode(name="x", level="fsdp", grad_allreduce=True, spelling="s", sources=["s"]).grad_allreduce
    # allreduce_bucket_params: the all-reduce of an accumulation buffer's, so with both (memory.py [bo])
    for kw in ({"grad_accum_bytes": 4}, {"grad_allreduce": True}, {}):
        with pytest.raises(ValueError, match="allreduce_bucket_params is priced for a zero1 mode with grad_accum_bytes"):
            ShardingMode(name="x", level="zero1", allreduce_bucket_params=5e8, spelling="s", sources=["s"], **kw)
    assert ShardingMode(name="x", level="zero1", grad_accum_bytes=4, grad_allreduce=True, allreduce_bucket_params=5e8,
                        spelling="s", sources=["s"]).allreduce_bucket_params == 5e8


def test_fp16_refused_under_the_mode():
    """The BF16_Optimizer is bf16's only (engine.py l. 1300-1350): an fp16 job is refused under the mode."""
    with pytest.raises(PlannerError, match="fp16"):
        resolve(Job(model="llama3-8b", gpus=16, micro_batch=1, seq_len=8192, global_batch=64,
                    stack="megatron-deepspeed", sharding_mode="bf16_optimizer", fp16=True))


def test_exported_as_stage_0_bf16_and_read_back(tmp_path):
    """Exported as the JSON that builds the BF16_Optimizer (stage 0, bf16 enabled), read back as the same mode;
    stage 1 with grad_accum_dtype fp32 reads as it too; zero0 (replicated states) is fp16's FP16_Optimizer: an fp16
    job's, exported as stage 0 with fp16 enabled (tests/test_zero0_fp16.py), not bf16; a job leaving fp16 out is bf16,
    refused at level none."""
    from planner.cli.export import resolved_plan
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="llama3-8b", gpus=16, stack="megatron-deepspeed", sharding_mode="bf16_optimizer",
                             global_batch=64))
    text, _ = export_plan(plan, "deepspeed")
    data = json.loads(text)
    assert data["zero_optimization"]["stage"] == 0 and data["bf16"] == {"enabled": True}
    path = tmp_path / "ds.json"
    path.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(path, fmt="deepspeed", model="llama3-8b", gpus=16)
    assert (cfg.job["sharding"], cfg.job["sharding_mode"]) == ("zero1", "bf16_optimizer")
    back = resolved_plan(Job(**{**cfg.job, "model": "llama3-8b"}))
    assert back["sharding_mode"] == "bf16_optimizer"
    data["zero_optimization"]["stage"] = 1
    data["data_types"] = {"grad_accum_dtype": "fp32"}
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_trainer_config(path, fmt="deepspeed", model="llama3-8b", gpus=16).job["sharding_mode"] == "bf16_optimizer"
    zero0 = resolved_plan(Job(model="llama3-8b", gpus=16, stack="megatron-deepspeed", sharding="none", global_batch=64,
                              fp16=True))
    data = json.loads(export_plan(zero0, "deepspeed")[0])
    assert data["zero_optimization"]["stage"] == 0 and data["fp16"] == {"enabled": True} and "bf16" not in data
    with pytest.raises(PlannerError, match="runs sharding mode bf16_optimizer in its place"):
        resolved_plan(Job(model="llama3-8b", gpus=16, stack="megatron-deepspeed", sharding="none", global_batch=64))


def test_optimizer_time_adds_the_buffer_passes():
    """Beyond ZeRO-1's Adam over the same partition: per micro-batch (m = 64 / (1 x 16) = 4) the cast-and-add of
    every bf16 gradient into the fp32 buffer, 2 + 4 + 4 + 4 + 4 = 18 B a parameter (bf16_optimizer.py _update_hp_grad),
    and the step's zeroing, 4 B: P x (18 x 4 + 4) B over the stack's HBM bandwidth."""
    from planner.step import _context

    s, p, b = _run(sharding_mode="bf16_optimizer")
    z = _run(sharding_mode="zero1")[2]
    hbm = float(_context(s, p).hbm)
    extra = float(b.time["optimizer"]) - float(z.time["optimizer"])
    assert extra == pytest.approx(P * (18 * 4 + 4) / hbm, rel=1e-9)


# the engine's all-reduce bucket of the BF16_Optimizer's fp32 buffers (microsoft/DeepSpeed @38327e07 engine.py
# MEMORY_OPT_ALLREDUCE_SIZE, l. 111; allreduce_no_retain l. 2523-2534): elements
BUCKET = 500_000_000


def _stage_peak_parts(t):
    """What the backward's peak holds beyond the tensors kept after it, on a dense stage: the layers' activations,
    the output layer's and the recompute buffer (memory.py _stage_terms: allocated - kept)."""
    return float(t.layer_activations + t.output_activations + t.recompute_buffer)


def test_reduce_copy_llama3_8b_one_bucket_per_group():
    """memory.py [bo] bf16_reduce_copy, by hand. Llama 3 8B, 8 GPUs (tp 1, pp 1), seq 1,024, micro-batch 1, full
    recompute: the weight-decay buffer (every matrix: P less the 266,240 norm weights) passes 5e8 elements, so it is
    its own bucket: _flatten_dense_tensors of one tensor is its view, .to(bfloat16) a 2 B copy, P x 2 B =
    16,060,522,496 B beside the states (weights 2P, both gradients 6P, master and Adam 12P / 8); the activations, the
    loss's tensors and the recompute buffer are freed by then, so the term is the copy less them: 16.06 GB -
    (0.27 + 0.80 + 0.13) GB = 14.86 GB; the optimizer step (fused Adam, no temporaries) then adds nothing. ZeRO-1 on the
    same plan (the ZeRO optimizer's reduce_gradients, [zb]) has none."""
    s, p, b = _run(gpus=8, global_batch=8, seq_len=1024, recompute="full", sharding_mode="bf16_optimizer")
    m = b.memory
    assert float(m["weights"]) == 2.0 * P  # the stage's parameters a rank, whole
    copy = 2.0 * P
    assert copy == 16_060_522_496
    assert float(m["bf16_reduce_copy"]) == pytest.approx(copy - _stage_peak_parts(m), rel=1e-12)
    assert float(m["bf16_reduce_copy"]) == pytest.approx(14.86e9, abs=0.005e9)
    assert float(m["optimizer_step"]) == 0.0 and float(m["step_grad_copies"]) == 0.0
    z = _run(gpus=8, global_batch=8, seq_len=1024, recompute="full", sharding_mode="zero1")[2].memory
    assert float(z["bf16_reduce_copy"]) == 0.0


def test_reduce_copy_both_groups_in_one_bucket_below_the_threshold():
    """A stage under 5e8 elements a rank: Llama 3 8B at tp 8, pp 4 (2 data-parallel ranks, 64 GPUs): the weight-decay
    buffer does not pass the bucket, so the no-weight-decay one joins it and allreduce_bucket flattens both (a
    torch.cat, 4 B an element in fp32) and casts the flat (2 B): 6 B x the stage's parameters a rank, beyond the peak
    by the copies less the stage's freed activations, on every stage."""
    # Llama 3's own 128,256 rows pinned (the stack pads them to 129,024 at tp 8, stack_db vocab_padding)
    s, p, b = _run(gpus=64, tp=8, pp=4, global_batch=64, seq_len=1024, recompute="full", sharding_mode="bf16_optimizer",
                   padded_vocab_size=128256)
    # by hand: a layer a rank (4096 x 6144 + 4096 x 4096 + 3 x 4096 x 14336) / 8 + 2 x 4096 norm weights = 27,271,168;
    # 8 layers a stage, the first with the embedding's 128,256 x 4096 / 8 = 65,667,072, the last with the output
    # layer's and the final norm's 4,096
    layer, emb = (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336) // 8 + 2 * 4096, 128256 * 4096 // 8
    assert (layer, emb) == (27_271_168, 65_667_072)
    ns = sorted(float(t.weights) / 2.0 for t in b.stages.values())
    assert ns == [8 * layer, 8 * layer + emb, 8 * layer + emb + 4096]
    first = b.stages[0]
    assert float(first.weights) / 2.0 == 283_836_416
    assert float(first.bf16_reduce_copy) == pytest.approx(6.0 * 283_836_416 - _stage_peak_parts(first), rel=1e-12)
    seen = 0
    for t in b.stages.values():
        n = float(t.weights) / 2.0
        assert 0 < n < BUCKET
        copy = (4.0 + 2.0) * n
        assert float(t.bf16_reduce_copy) == pytest.approx(max(copy - _stage_peak_parts(t), 0.0), rel=1e-12)
        seen += float(t.bf16_reduce_copy) > 0
    assert seen >= 1
