"""DeepSpeed ZeRO-3's communication overlap as DeepSpeed runs it (issues 21, 22; z3overlap), and the pipeline engine's
tied-embedding gradient all-reduce.

- overlap_comm moves the gradient reduce-scatter only: its stream is a new one with overlap_comm, the default (compute)
  stream without (microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage3.py l. 268-269, reduce_scatter_coalesced
  async_op=False); the parameter all-gathers are prefetched asynchronously on the process group's NCCL stream either
  way (partitioned_param_coordinator.py fetch_sub_module, partition_parameters.py l. 94-95): stack_db megatron-deepspeed
  overlap.fsdp_gathers_overlap_always, step.py [19];
- a job that leaves dp_comm_overlap out runs DeepSpeed's stage-3 default, overlap_comm true (config.py l. 350-354):
  the zero3 / zero3_mics modes' dp_comm_overlap;
- at pp > 1 with tied embeddings, PipelineEngine._exec_reduce_tied_grads all-reduces the embedding's gradient between
  the first and the last stage once a step (pipe/engine.py l. 275-291): step.py [20], in pp_comm.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from planner.params import count_params
from planner.step import step_time

X = 0.189  # stack_db megatron-deepspeed overlap.overlapped_exposed_fraction (Lee et al. 2025)
Z3 = dict(model="llama3-8b", gpus=8, micro_batch=1, global_batch=8, seq_len=4096, hardware="h200-sxm",
          stack="megatron-deepspeed", sharding="fsdp", recompute="none")


def _dp(explain, **kw):
    s, p, est, js = explain(**{**Z3, **kw})
    t = js["time"]
    return s, p, t


def test_zero3_leaving_overlap_out_runs_deepspeeds_default(explain):
    """zero3 from options: dp_comm_overlap true (DeepSpeed's stage-3 default), listed among the stack's defaults; the
    job's false wins; zero1 keeps the stack's false."""
    s, p, t = _dp(explain)
    assert int(p.dpo) == 1 and ("dp_comm_overlap", True) in s.inherited
    s, p, t = _dp(explain, dp_comm_overlap=False)
    assert int(p.dpo) == 0
    s, p, t = _dp(explain, sharding="zero1")
    assert int(p.dpo) == 0 and ("dp_comm_overlap", False) in s.inherited


def test_zero3_overlap_off_exposes_the_reduce_scatter_only(explain):
    """One micro-batch, compute-bound (llama3-8b on one H200 node): the forward all-gather, the backward all-gather and
    the reduce-scatter are each c seconds (ring all-gather and reduce-scatter of the same bf16 bytes over the same 8
    ranks: the same alpha-beta figure), total 3c, in n_b = ceil(p / 5e7) buckets (stack_db fsdp_bucket_params).
    Every window outlasts its traffic, so an overlapped transfer t adds x t (x = 0.189) and the first bucket's gather
    and the last bucket's reduce-scatter (c / n_b each) never hide:
      overlap on:  x (c - c/n_b) [forward] + x (2c - c/n_b) [backward gather + reduce-scatter] + 2 c/n_b
      overlap off: x (c - c/n_b) [forward] + x c [backward gather] + c/n_b + c [the reduce-scatter, waited on]
    Before (gathers tied to dp_comm_overlap) off was 3c."""
    s, p, on = _dp(explain, dp_comm_overlap=True)
    _, _, off = _dp(explain, dp_comm_overlap=False)
    total = on["dp_comm_s"]
    assert off["dp_comm_s"] == pytest.approx(total, rel=1e-12)
    c = total / 3.0
    pc = count_params(s.model)
    n_b = math.ceil(pc.total / 5e7)
    assert on["dp_comm_exposed_s"] == pytest.approx(X * (3 * c - 2 * c / n_b) + 2 * c / n_b, rel=1e-9)
    assert off["dp_comm_exposed_s"] == pytest.approx(X * (2 * c - c / n_b) + c + c / n_b, rel=1e-9)
    assert off["dp_comm_exposed_s"] < total  # the gathers still hide
    # the step moves by the exposed difference alone: (1 - x) (c - c/n_b)
    assert off["step_s"] - on["step_s"] == pytest.approx((1 - X) * (c - c / n_b), rel=1e-9)


def test_stack_without_the_flag_exposes_everything(explain):
    """The same plan on a stack whose dp_comm_overlap moves every DP transfer (the flag off: the schema's default)
    prices all 3c exposed: the flag, not the sharding mode, decides."""
    s, p, _ = _dp(explain, dp_comm_overlap=False)
    st = s.stack.model_copy(update={"overlap": s.stack.overlap.model_copy(update={"fsdp_gathers_overlap_always": False})})
    terms, extra = step_time(dataclasses.replace(s, stack=st), p)
    assert float(terms.dp_comm_exposed) == pytest.approx(float(extra["dp_comm_s"]), rel=1e-12)


def _tied(explain, **kw):
    job = dict(model="megatron-gpt-1.7b", gpus=16, micro_batch=1, global_batch=32, seq_len=2048, hardware="h100-sxm",
               stack="megatron-deepspeed", sharding="zero1", tp=2, **kw)
    return explain(**job)


def test_tied_embedding_gradient_all_reduce_at_pp(explain):
    """pp 2, tp 2: one all-reduce of the embedding's vocab-parallel gradient, V / 2 x h bf16 elements, over the two
    ranks of the first and the last stage, added to pp_comm once a step; 0 at pp 1 (its group is the one rank)."""
    s, p, est, js = _tied(explain, pp=2)
    terms, extra = step_time(s, p)
    tied = float(extra["pp_tied_grads_s"])
    assert tied > 0
    model = s.model
    assert model.tied_embeddings
    elems = count_params(model).embedding / 2
    assert elems == model.vocab_size * model.hidden_size / 2  # vocab-parallel shard (no padding in the catalog entry)
    # the same all-reduce priced by the collective model directly: 2 B an element (mixed16 gradients), 2 ranks,
    # the first and the last stage one pipeline stride apart
    from planner import comm
    from planner.step import Collectives, _compute_pass
    sc, _, _ = _compute_pass(s, p)
    coll = Collectives(sc)
    want = float(coll(comm.ALL_REDUCE, elems * 2.0, np.asarray(2), coll.strides["pp"]))
    assert tied == pytest.approx(want, rel=1e-12)
    assert js["time"]["pp_comm_s"] == pytest.approx(float(terms.pp_comm), rel=1e-12)
    s1, p1, _, js1 = _tied(explain, pp=1)
    assert float(step_time(s1, p1)[1]["pp_tied_grads_s"]) == 0.0


def test_tied_all_reduce_moves_pp_comm_by_itself(explain):
    """The term is the whole pp_comm difference against the same stack without it (Stack.pipeline_tied_grad_allreduce
    false)."""
    s, p, _, _ = _tied(explain, pp=2)
    terms, extra = step_time(s, p)
    st = s.stack.model_copy(update={"pipeline_tied_grad_allreduce": False})
    terms0, extra0 = step_time(dataclasses.replace(s, stack=st), p)
    assert float(extra0["pp_tied_grads_s"]) == 0.0
    assert float(terms.pp_comm) - float(terms0.pp_comm) == pytest.approx(float(extra["pp_tied_grads_s"]), rel=1e-12)


@pytest.mark.parametrize("stack, section, key, value, match", [
    # a mode's dp_comm_overlap true on a stack that cannot overlap DP traffic
    ("megatron-deepspeed", "overlap", "dp_comm_overlap_supported", False, "zero3, zero3_mics: dp_comm_overlap true needs"),
    # the reuse distance that keeps re-run modules gathered is a zero3_modules setting: a stack without them ([23])
    ("torchtitan", "fsdp", "zero3_rerun_regathers", True, "zero3_rerun_regathers needs fsdp.zero3_modules"),
], ids=["a_mode_overlap_default_needs_the_stacks_overlap", "zero3_rerun_regathers_needs_zero3_modules"])
def test_stack_field_needs_its_prerequisite(stack, section, key, value, match):
    """A stack file whose field needs another the stack lacks is refused when the stack loads."""
    from planner.catalog import load_stack
    from planner.schema import Stack

    d = load_stack(stack).model_dump()
    d[section][key] = value
    with pytest.raises(ValueError, match=match):
        Stack.model_validate(d)


def test_megatron_lm_all_reduces_the_tied_embedding_gradient_too(explain):
    """Megatron-LM @d98e8a64 finalize_model_grads (l. 676) all-reduces the shared word embedding's main_grad over the
    embedding group, the first and last stage (stack_db/megatron.yaml pipeline_tied_grad_allreduce): pp 2, tp 2,
    V / 2 x h elements in fp32 main gradients (4 B: the megatron preset's gradients), the same collective as the
    DeepSpeed pipeline engine's, twice its bf16 bytes; 0 at pp 1 and for an untied model (llama3-8b)."""
    s, p, est, js = explain(model="megatron-gpt-1.7b", gpus=16, micro_batch=1, global_batch=32, seq_len=2048,
                            hardware="h100-sxm", stack="megatron", sharding="zero1", tp=2, pp=2)
    assert s.stack.pipeline_tied_grad_allreduce and s.model.tied_embeddings and s.bpp.gradients == 4.0
    terms, extra = step_time(s, p)
    elems = count_params(s.model).embedding / 2
    from planner import comm
    from planner.step import Collectives, _compute_pass
    sc, _, _ = _compute_pass(s, p)
    coll = Collectives(sc)
    want = float(coll(comm.ALL_REDUCE, elems * 4.0, np.asarray(2), coll.strides["pp"]))
    assert float(extra["pp_tied_grads_s"]) == pytest.approx(want, rel=1e-12) and want > 0
    s1, p1, _, _ = explain(model="megatron-gpt-1.7b", gpus=16, micro_batch=1, global_batch=32, seq_len=2048,
                           hardware="h100-sxm", stack="megatron", sharding="zero1", tp=2, pp=1)
    assert float(step_time(s1, p1)[1]["pp_tied_grads_s"]) == 0.0
    s2, p2, _, _ = explain(model="llama3-8b", gpus=16, micro_batch=1, global_batch=32, seq_len=2048,
                           hardware="h100-sxm", stack="megatron", sharding="zero1", tp=2, pp=2)
    assert not s2.model.tied_embeddings and float(step_time(s2, p2)[1]["pp_tied_grads_s"]) == 0.0


# ----------------------------------------------------------------------------- [23] the re-run forward's gathers
T2_768 = dict(model="gpt3-175b", gpus=768, hardware="a100-sxm-80gb", tp=1, pp=1, dp=768, micro_batch=2,
              global_batch=1536, seq_len=2048, sharding="fsdp", sharding_mode="zero3", recompute="full",
              stack="megatron-deepspeed-2021")


def _without_rerun(s):
    st = s.stack.model_copy(update={"fsdp": s.stack.fsdp.model_copy(update={"zero3_rerun_regathers": False})})
    return dataclasses.replace(s, stack=st)


def test_zero3_full_recompute_regathers_the_rerun(explain):
    """Narayanan et al. 2021 Table 2, ZeRO-3 174.6B on 768 A100s (mbs 2, global batch 1,536: one micro-batch a step),
    full recompute, DeepSpeed a12aaedc (step.py [23]). A GPT-3 layer's ZeRO-3 modules, h = 12,288: query_key_value
    3 h^2, dense h^2, dense_h_to_4h 4 h^2, dense_4h_to_h 4 h^2 (biases and norms are persistent, below 1e5 elements).
    From its re-run to its backward a module waits for 2 x the parameters after it (the rest of the re-run, then the
    backward down to it): qkv 2 x 9 h^2, dense 2 x 8 h^2, fc1 2 x 4 h^2 = 1.21e9, all at or above
    stage3_max_reuse_distance 1e9 (released, gathered again by the backward); fc2 0 (kept). So each layer gathers
    8 h^2 more than forward + backward: 96 x 8 x 12,288^2 = 115,964,116,992 of the 174,604,259,328 parameters,
    a share of 0.66415 of one pass's all-gather, which comm.py prices as ceil(P / 5e7) = 3,493 bucketed ring
    all-gathers of P x 2 B / 3,493 over the 768 ranks (the stack's fsdp_bucket_params, stride 1). The step's DP
    traffic grows by share x that pass, and all of it is exposed: the backward's window (~17.6 s) is already
    shorter than its gathers and all-reduces (13.3 + 7.7 s) before."""
    from planner import comm
    from planner.step import StepCtx  # noqa: F401 (the module under test)

    s, p, est, js = explain(**T2_768)
    P = count_params(s.model).total
    # GPT-3's 50,257 tokens as the fork pads them at tp 1 (stack_db megatron-deepspeed-2021 vocab_padding: 128 x 393 =
    # 50,304 rows): 47 x 12,288 = 577,536 more than the 174,604,259,328 of the catalog's 50,257
    assert P == 174_604_259_328 + 47 * 12288 == 174_604_836_864
    h = 12288
    share = 96 * 8 * h * h / P
    assert share == pytest.approx(0.664152, rel=1e-5)
    n_b = math.ceil(P / 5e7)
    assert n_b == 3493
    cost, _, _ = comm.group_collective(comm.ALL_GATHER, P * 2.0 / n_b, 768, 1, comm.comm_params(s.hardware), comm.AUTO,
                                       job_gpus=768)
    ag_pass = n_b * float(cost.time_s)
    on = js["time"]
    terms, extra = step_time(_without_rerun(s), p)
    assert on["dp_comm_s"] - float(extra["dp_comm_s"]) == pytest.approx(share * ag_pass, rel=1e-9)
    assert on["dp_comm_exposed_s"] - float(terms.dp_comm_exposed) == pytest.approx(share * ag_pass, rel=1e-9)
    assert share * ag_pass == pytest.approx(8.75, abs=0.05)  # seconds a step (mostly the buckets' ring latency)


def test_zero3_rerun_gathers_need_full_recompute(explain):
    """Selective recompute re-runs the attention core only (no parameters): no re-run gathers; nor without recompute.
    (Selective on megatron-deepspeed, which sets zero3_rerun_regathers too: the 2021 stack's code has none, rule 75.)"""
    for rc, stack in (("selective", "megatron-deepspeed"), ("none", T2_768["stack"])):
        s, p, est, js = explain(**{**T2_768, "recompute": rc, "micro_batch": 1, "gpus": 1536, "dp": 1536, "stack": stack})
        terms, extra = step_time(_without_rerun(s), p)
        assert js["time"]["dp_comm_s"] == pytest.approx(float(extra["dp_comm_s"]), rel=1e-12)
