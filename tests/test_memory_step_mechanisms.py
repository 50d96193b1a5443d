"""More of issue 21's memory mechanisms, each by hand from its source (docs/memory_mechanisms.md
(f), (r), (d); planner/memory.py [opt], [tt9], [tt4]).

Llama 3 8B: P = 8,030,261,248 parameters; the output layer 128,256 x 4,096 = 525,336,576."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from planner.errors import PlannerError

P = 8_030_261_248
OUT = 128_256 * 4096

# torchtitan before 1e8f9acd1, whose training takes context_parallel_rotate_method (planner/cp_rotate.py [4])
TT_ROTATE_TRAINS = str(Path(__file__).parent / "data" / "stacks" / "torchtitan-rotate-trains.yaml")


def _tt(explain, **kw):
    job = dict(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", recompute="selective",
               micro_batch=1, global_batch=8, seq_len=8192)
    return explain(**{**job, **kw})


# ---- (f) the optimizer step's temporaries
def test_foreach_adamw_step_is_its_own_moment(explain):
    """torch 2.13 _multi_tensor_adam (foreach AdamW): exp_avg_sq_sqrt, one fp32 tensor the size
    of the local (sharded) parameters, 4 P / 8, at the step, beside the fp32 sharded parameters
    (4 P / 8), Adam m, v (8 P / 8), every fp32 sharded gradient (4 P / 8) and the GEMM
    workspaces; the activations are freed. 8B, FSDP 8, b 1, s 2048, full AC: the end of the
    backward's 16 P / 8 + 6 B x the embedding (memory.py [tt7]) is below that moment, 20 P / 8,
    by 4 P / 8 - 6 x 525,336,576 B: that is the optimizer_step term. Reserved is unchanged:
    the step's default-stream tensors (16 P / 8) stay under the loss moment's, and the
    sharded gradients it allocates were already reserved in the reduce-scatter pool. Fused
    (torchtitan's default): none."""
    _, _, _, fused = _tt(explain, recompute="full", seq_len=2048)
    _, _, _, fe = _tt(explain, recompute="full", seq_len=2048, optimizer_implementation="foreach")
    f, m = fused["memory"], fe["memory"]
    ws, rope = m["terms"]["workspaces"], 32 * 2048 * 64 * 8  # the RoPE tables live at every moment
    assert f["terms"]["optimizer_step"] == 0.0
    assert f["allocated_bytes"] == pytest.approx(16 * P / 8 + 6 * OUT + ws + rope, rel=1e-12)
    assert m["terms"]["optimizer_step"] == pytest.approx(4 * P / 8 - 6 * OUT, rel=1e-12)
    assert m["allocated_bytes"] == pytest.approx(20 * P / 8 + ws + rope, rel=1e-12)
    assert m["reserved_bytes"] == pytest.approx(f["reserved_bytes"], rel=1e-12)


def test_foreach_step_below_the_backward_peak_changes_nothing(explain):
    """8B, FSDP 8, s 8192, SAC: the foreach step holds 20 P / 8 B = 18.7 GiB, far below the
    loss's backward peak (about 40 GiB): every figure is the fused run's (docs (f))."""
    _, _, _, fused = _tt(explain)
    _, _, _, fe = _tt(explain, optimizer_implementation="foreach")
    assert fe["memory"]["terms"]["optimizer_step"] == 0.0
    assert fe["memory"]["allocated_bytes"] == fused["memory"]["allocated_bytes"]
    assert fe["memory"]["reserved_bytes"] == fused["memory"]["reserved_bytes"]
    assert 20 * P / 8 < fused["memory"]["allocated_bytes"]


def test_optimizer_implementation_only_where_the_stack_runs_it(explain):
    """Megatron's optimizer is TE / Apex FusedAdam: the stack lists no implementations."""
    with pytest.raises(PlannerError, match="optimizer_implementation foreach is not one stack megatron runs"):
        explain(model="llama3-8b", gpus=8, optimizer_implementation="foreach")


def test_torchtitan_toml_optimizer_implementation(tmp_path):
    """[optimizer] implementation is read into the job field (torchtitan job_config.py
    @e347b1e5e l. 151), refused when not one of torchtitan's three, left to the stack's
    default (fused) when absent; the export writes it back."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    base = ('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
            '[parallelism]\ndata_parallel_shard_degree = 8\n')
    p = tmp_path / "a.toml"
    p.write_text(base + '[optimizer]\nname = "AdamW"\nimplementation = "foreach"\n')
    assert load_trainer_config(p).job["optimizer_implementation"] == "foreach"
    p.write_text(base)
    assert "optimizer_implementation" not in load_trainer_config(p).job
    p.write_text(base + '[optimizer]\nimplementation = "apex"\n')
    with pytest.raises(PlannerError, match="implementation 'apex'"):
        load_trainer_config(p)
    plan = resolved_plan(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", global_batch=8,
                             seq_len=8192, optimizer_implementation="foreach"))
    assert plan["optimizer_implementation"] == "foreach"
    text, _ = export_plan(plan, "torchtitan")
    assert tomllib.loads(text)["optimizer"]["implementation"] == "foreach"
    fused = resolved_plan(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", global_batch=8,
                              seq_len=8192, optimizer_implementation="fused"))
    assert "optimizer_implementation" not in fused  # the stack's default: the resolved plan as before


# ---- (r) the RoPE tables
def test_rope_cache_per_layer_and_per_model_part(explain):
    """torchtitan 0.3.0 (02d24f017, 2026-06-05 on): every attention layer registers its own
    complex64 table of max_seq_len x head_dim / 2: 8B (head dim 4,096 / 32 = 128) at seq 8192,
    8192 x 64 x 8 B = 4 MiB a layer, 32 layers = 128 MiB (the oracle's 'Buffer' 0.125 GiB);
    70B (128) 80 x 4 MiB. Before it one freqs_cis per model part: 4 MiB (job field rope_cache
    model); under PP with vpp 2 a rank holds two model parts. Megatron: its lru_cache'd fp32 table of
    seq x head dim, 4 B x 8192 x 128, the same 4 MiB (memory.py [mr]); the stacks that keep none: 0."""
    mib4 = 8192 * 64 * 8
    assert mib4 == 4 * 2**20
    _, _, _, js = _tt(explain)
    assert js["memory"]["terms"]["model_buffers"] == 32 * mib4 == 2**27
    _, _, _, js = _tt(explain, rope_cache="model")
    assert js["memory"]["terms"]["model_buffers"] == mib4
    _, _, _, js = _tt(explain, model="llama3-70b", gpus=64, global_batch=64)
    assert js["memory"]["terms"]["model_buffers"] == 80 * mib4
    _, _, _, js = explain(model="llama3-8b", gpus=8, micro_batch=1, global_batch=8, seq_len=8192)
    assert js["memory"]["terms"]["model_buffers"] == mib4  # megatron: one fp32 table per model chunk
    _, _, _, js = explain(model="llama3-8b", gpus=8, micro_batch=1, global_batch=8, seq_len=8192, stack="llm-foundry")
    assert js["memory"]["terms"]["model_buffers"] == 0.0  # a stack that keeps none priced


def test_rope_cache_is_not_exported():
    """rope_cache prices a code version's buffers: no trainer file holds it, so a plan with it
    is refused by the export (its read-back would price the stack's own tables)."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", global_batch=8,
                             seq_len=8192, rope_cache="model"))
    assert plan["rope_cache"] == "model"
    with pytest.raises(PlannerError, match="export torchtitan: rope_cache model"):
        export_plan(plan, "torchtitan")


def test_rope_cache_on_each_pipeline_stage(explain):
    """8B on PP 4 (torchtitan's split counting the embedding and the output as a layer each:
    34 units on 4 stages, 9, 9, 8, 8 -> 8, 9, 8, 7 blocks): each stage's tables are its own
    layers' (4 MiB each); per model part: one on every stage, two with vpp 2."""
    from planner.memory import STAGE_FIRST, STAGE_LAST, STAGE_MIDDLE, stage_memory_terms

    mib4 = 8192 * 64 * 8
    job = dict(gpus=8, pp=4, account_for_embedding_in_pipeline_split=True,
               account_for_loss_in_pipeline_split=True)
    settings, plan, _, _ = _tt(explain, **job)
    st = stage_memory_terms(settings, plan)
    got = [float(st[k].model_buffers) / mib4 for k in (STAGE_FIRST, STAGE_MIDDLE, STAGE_LAST)]
    assert got == [8.0, 9.0, 7.0]
    settings, plan, _, _ = _tt(explain, rope_cache="model", **job)
    st = stage_memory_terms(settings, plan)
    assert [float(st[k].model_buffers) for k in (STAGE_FIRST, STAGE_MIDDLE, STAGE_LAST)] == [mib4] * 3


# ---- (d) the stage outputs a pipeline runtime keeps until their backward
def _without_stage_outputs(settings):
    import dataclasses

    st = settings.stack
    mem = st.memory.model_copy(update={"pipeline_keeps_stage_outputs": False})
    return dataclasses.replace(settings, stack=st.model_copy(update={"memory": mem}))


def _outputs_held(explain, **kw):
    """Each stage's layer activations with the torchtitan stack less the same without the stage
    outputs, in units of one output: 2 B x T x h / (t under SP), T = 8192 (b 1)."""
    from planner.memory import STAGE_FIRST, STAGE_LAST, STAGE_MIDDLE, stage_memory_terms

    settings, plan, _, _ = _tt(explain, **kw)
    on, off = stage_memory_terms(settings, plan), stage_memory_terms(_without_stage_outputs(settings), plan)
    one = 2 * 8192 * 4096 / kw.get("tp", 1)
    return [float(on[k].layer_activations - off[k].layer_activations) / one for k in (STAGE_FIRST, STAGE_MIDDLE, STAGE_LAST)]


def test_pipeline_stage_outputs_kept_until_their_backward(explain):
    """torch.distributed.pipelining keeps every forward output in fwd_cache until that
    micro-batch's backward: per stage, one [T, h] bf16 output per chunk-micro-batch in flight
    whose chunk sends on. 1F1B, pp 4, m 8: stage s holds min(m, pp - s): 4 on stage 0, 3 on
    stage 1; the last stage sends nothing (its output, the logits, is priced apart).
    Interleaved, pp 4, v 2, m 8: stage s ran F = min(2 (pp - s - 1) + (v - 1) pp + 1, m v)
    forwards: stage 0 11 (chunk 0: 4 + 3, chunk 1: 4), stage 1 9 (5 + 4), the last stage 5, of
    which its chunk 0 holds 4 (its chunk 1 is the loss's). Under TP with SP the output is sequence-sharded:
    tp 2, pp 2, m 8: stage 0 holds 2, each 2 T h / 2."""
    assert _outputs_held(explain, gpus=8, pp=4, global_batch=16) == [4.0, 3.0, 0.0]
    assert _outputs_held(explain, gpus=8, pp=4, vpp=2, global_batch=16, schedule="interleaved") == [11.0, 9.0, 4.0]
    assert _outputs_held(explain, gpus=8, tp=2, pp=2, global_batch=16)[0] == 2.0


def test_megatron_frees_sent_outputs(explain):
    """Megatron-LM @d98e8a64 deallocate_output_tensor: no stage output kept (stack field false)."""
    from planner.catalog import load_stack

    assert load_stack("megatron").memory.pipeline_keeps_stage_outputs is False
    assert load_stack("torchtitan").memory.pipeline_keeps_stage_outputs is True


# ---- (e) context parallel: the ring attention's backward
def _without_cp_ring(settings, rotate=None):
    import dataclasses

    st = settings.stack
    mem = st.memory.model_copy(update={"cp_ring_backward": rotate})
    return dataclasses.replace(settings, stack=st.model_copy(update={"memory": mem}))


def test_cp_ring_attention_backward_by_hand(explain):
    """torchtitan CP 2 on 8B (PP 2 so that the first stage's peak is a block's backward, not the
    loss), SAC, b 1, s 8192: T = 4,096 local tokens, the local query Q = 4,096 x 32 x 128 and
    key K = 4,096 x 8 x 128 elements. At the MLP's backward (memory.py [tt5]) the block holds
    T (2h + 3 x 2f + 2ad + 2ad) + 2hf = 570,425,344 B; at the attention's ring backward [cp1]
    T (2h + 2ad + 2ad) = 100,663,296 (output gradient, attention output gradient, re-run q) +
    2 (3 h f + h a d) = 385,875,968 (the MLP's and wo's unsharded bf16 weight gradients) + the
    ring's 6 Q + (4 + 24 + 4 + 4 cp) K = 268,435,456: 754,974,720 B, the larger; the recompute
    buffer grows by the difference, 184,549,376 B. At CP 4 (T 2,048) the all-gathered K/V is
    4 cp = 16 B a local K element against alltoall's 8: 8 x 2,097,152 B more."""
    from planner.memory import STAGE_FIRST, stage_memory_terms

    settings, plan, _, _ = _tt(explain, cp=2, pp=2, global_batch=8)
    on = stage_memory_terms(settings, plan)[STAGE_FIRST].recompute_buffer
    off = stage_memory_terms(_without_cp_ring(settings), plan)[STAGE_FIRST].recompute_buffer
    assert float(on - off) == 754_974_720 - 570_425_344 == 184_549_376
    settings, plan, _, _ = _tt(explain, cp=4, pp=2, global_batch=8)
    ag = stage_memory_terms(settings, plan)[STAGE_FIRST].recompute_buffer
    a2a = stage_memory_terms(_without_cp_ring(settings, "alltoall"), plan)[STAGE_FIRST].recompute_buffer
    assert float(ag - a2a) == 8 * 2048 * 1024
    # the job field (torchtitan's context_parallel_rotate_method) chooses it the same way, on a stack whose training
    # takes it (torchtitan before 1e8f9acd1); the catalog torchtitan's never does (planner/cp_rotate.py [4])
    settings, plan, _, _ = _tt(explain, cp=4, pp=2, global_batch=8, cp_rotate_method="alltoall", stack=TT_ROTATE_TRAINS)
    assert settings.stack.memory.cp_ring_backward == "alltoall"
    assert float(stage_memory_terms(settings, plan)[STAGE_FIRST].recompute_buffer) == float(a2a)
    settings, plan, _, _ = _tt(explain, cp=4, pp=2, global_batch=8, cp_rotate_method="alltoall")
    assert settings.stack.memory.cp_ring_backward == "allgather"
    assert float(stage_memory_terms(settings, plan)[STAGE_FIRST].recompute_buffer) == float(ag)
    # without CP nothing moves
    settings, plan, _, _ = _tt(explain, pp=2, global_batch=8)
    t = stage_memory_terms(settings, plan)[STAGE_FIRST].recompute_buffer
    assert float(t) == float(stage_memory_terms(_without_cp_ring(settings), plan)[STAGE_FIRST].recompute_buffer)


def test_cp_rotate_method_memory_by_hand_and_export(tmp_path):
    """The rotate method's K/V in torch's ring-attention backward [cp1]: the all-gathered K/V
    of every cp rank (4 cp B per element of the local K, bf16 K and V) or the received and the
    next permute output (alltoall: 8 B). Llama 3 8B, tp 1, cp 8, 131,072 tokens: T = 16,384
    local tokens, K elements 16,384 x 8 KV heads x 128 = 16,777,216; the all-gather holds
    (32 - 8) B x that = 402,653,184 B (0.375 GiB) more. On a stack whose training takes the option
    (torchtitan before 1e8f9acd1) the export writes the method back and the TOML reads back the same plan;
    the catalog torchtitan's (@e347b1e5e) never hands it to torch, so it prices, lists and writes none."""
    import numpy as np

    from planner.cli.export import resolved_plan
    from planner.layers import context, layer_list
    from planner.memory import cp_attention_backward_extra
    from planner.plan import resolve
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    job = Job(model="llama3-8b", gpus=8, cp=8, seq_len=131072, global_batch=1, stack=TT_ROTATE_TRAINS, sharding="fsdp",
              cp_rotate_method="alltoall")
    settings, plan, _ = resolve(job)
    ctx, kind = context(plan), layer_list(settings.model).kinds[0]
    got = {r: float(np.ravel(cp_attention_backward_extra(kind, ctx, plan, r))[0]) for r in ("allgather", "alltoall")}
    assert got["allgather"] - got["alltoall"] == 24 * 16384 * 8 * 128 == 402_653_184
    rp = resolved_plan(job)
    assert rp["cp_rotate_method"] == "alltoall"
    text, _ = export_plan(rp, "torchtitan")
    assert 'context_parallel_rotate_method = "alltoall"' in text
    p = tmp_path / "cp.toml"
    p.write_text(text)
    assert load_trainer_config(p, stack=TT_ROTATE_TRAINS).job["cp_rotate_method"] == "alltoall"
    # the default method is the stack's and is not written
    assert "context_parallel_rotate_method" not in export_plan(resolved_plan(job.model_copy(update={"cp_rotate_method": None})), "torchtitan")[0]
    # the catalog torchtitan: the job's alltoall priced as allgather, not listed, not written
    titan = job.model_copy(update={"stack": "torchtitan"})
    rp = resolved_plan(titan)
    assert "cp_rotate_method" not in rp
    assert "context_parallel_rotate_method" not in export_plan(rp, "torchtitan")[0]
    settings, _, warnings = resolve(titan)
    assert settings.stack.memory.cp_ring_backward == "allgather"
    assert [w for w in warnings if "rotate" in w] == [
        "cp_rotate_method alltoall: stack torchtitan's training never hands it to torch (torchtitan @e347b1e5e calls "
        "set_rotate_method only in components/validate.py l. 204-214, not in train.py; stack_db torchtitan "
        "runs.cp_rotate_method_trains false), so the plan is priced with torch's default allgather (memory.cp_ring_backward)"]


# ---- [ws] PyTorch's cuBLAS workspaces under CUBLAS_WORKSPACE_CONFIG
def test_cublas_workspace_config_job_field(explain):
    """Megatron on an A100 (sm 8.0): two PyTorch cuBLAS workspaces (the forward's thread, the
    autograd engine's) at PyTorch's off-Hopper default 4096 KiB x 2 + 16 KiB x 8 = 8,519,680 B each,
    and Transformer Engine's 4 MiB; with CUBLAS_WORKSPACE_CONFIG=:4096:8 (job field
    cublas_workspace_config) each is 4096 x 1024 x 8 = 33,554,432 B: 2 x (33,554,432 - 8,519,680) B
    more, every other term unchanged. The resolved plan keeps the field; the export says the
    variable belongs to the launch environment. A value PyTorch's ':SIZE:COUNT' regex cannot
    parse is refused."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan

    job = dict(model="llama3-8b", gpus=8, hardware="a100-sxm-80gb", stack="megatron", micro_batch=1, global_batch=8,
               seq_len=2048, recompute="full")
    _, _, _, base = explain(**job)
    _, _, _, env = explain(**job, cublas_workspace_config=":4096:8")
    assert base["memory"]["terms"]["workspaces"] == 2 * 8_519_680 + 4 * 2**20
    assert env["memory"]["terms"]["workspaces"] == 2 * 33_554_432 + 4 * 2**20
    assert env["memory"]["allocated_bytes"] - base["memory"]["allocated_bytes"] == 2 * (33_554_432 - 8_519_680)
    plan = resolved_plan(Job(**job, cublas_workspace_config=":4096:8"))
    assert plan["cublas_workspace_config"] == ":4096:8"
    text, _ = export_plan(plan, "megatron")  # the script's own environment line (exportfix 41f23a6), read back
    assert "export CUBLAS_WORKSPACE_CONFIG=:4096:8" in text.splitlines()
    with pytest.raises(Exception, match="cublas_workspace_config"):
        Job(**job, cublas_workspace_config="4096")


def test_megatron_output_layer_saves_the_final_norms_output(explain):
    """Megatron's output layer (its own ColumnParallelLinear) saves its input, the final norm's
    output, for its weight gradient (tensor_parallel/layers.py @d98e8a64 l. 604), beside the
    norm's own saved input (TE ops/basic/layer_norm.py l. 221): under SP the input as received,
    sequence-sharded (re-gathered in the backward). Llama 3 8B, TP 2 with SP, b 1, s 2048: the
    last stage's output activations hold 2 B x 2048 x 4096 / 2 = 8 MiB for it, 2 x 8 MiB for the
    norm's input and output beside the logits' 6 B x 2048 x 128,256 / 2."""
    import dataclasses

    from planner import memory as mem

    settings, plan, _, _ = explain(model="llama3-8b", gpus=8, tp=2, stack="megatron", micro_batch=1, global_batch=8,
                                   seq_len=2048, recompute="full")
    stack = settings.stack
    off = dataclasses.replace(settings, stack=stack.model_copy(
        update={"memory": stack.memory.model_copy(update={"output_saves_norm_out": False})}))
    on_t = mem.stage_memory_terms(settings, plan)[mem.STAGE_LAST]
    off_t = mem.stage_memory_terms(off, plan)[mem.STAGE_LAST]
    assert float(on_t.output_activations - off_t.output_activations) == 2 * 2048 * 4096 / 2
    assert float(on_t.output_activations) == 2048 * (2 * 2 * 4096 / 2 + 6 * 128_256 / 2)
