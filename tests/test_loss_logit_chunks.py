"""torchtitan PR #996's chunked cross-entropy, the job field loss_logit_chunks (planner/memory.py [ck]),
by hand from the code.

pytorch/torchtitan @f99bfc03 (refs/pull/996/head) torchtitan/components/loss.py
chunked_cross_entropy_loss(logits, labels, num_output_chunks=8): the whole bf16 logits [b, s, V] are
materialised, logits.chunk(n, dim=1), and each chunk runs F.cross_entropy(chunk.flatten(0, 1).float(), ...)
in turn, eagerly; train.py then `del pred` and loss.backward(). Per ATen (tools/autograd/derivatives.yaml):
the .float() cast and the chunk views save nothing, log_softmax saves its fp32 output. So, in bytes a logit:

  forward, the last chunk:   2 (bf16 logits) + 4 (every chunk's log-softmax) + 4 / n (the chunk's upcast)
  backward, the first chunk: 4 (the log-softmaxes) + 4 / n (nll grad) + 4 / n (log-softmax grad)
                             (12 / n under TP: loss_parallel's zeros_like, exp and their sum)

n = 8: the forward's 6.5 against the plain loss's 12 at its backward, whose freed bf16 logits block (2) the
fp32 gradient cannot reuse (stack kernels loss_pool_per_logit); the chunks' 0.5 B requests can, so no pool.
Llama 3 8B at seq 8192, b 1 (T V = 8,192 x 128,256 logits): reserved -7.5 x T V B = -7.34 GiB, the PR's
measured -7.32 GiB (49.58 -> 42.26).
"""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.memory import logit_chunk_loss_bytes

TV = 8192 * 128_256  # Llama 3 8B's logits at one sequence of 8,192 tokens


@pytest.mark.parametrize("n, tp, pp, keeps, peak", [
    (8, 1, 1, True, 6.5),    # forward: 2 + 4 + 0.5 (backward 4 + 1 = 5)
    (8, 2, 1, True, 6.5),    # backward under loss_parallel 4 + 1.5 = 5.5 < 6.5
    (2, 1, 1, True, 8.0),    # forward 2 + 4 + 2 = 8 = backward 4 + 4
    (2, 2, 1, True, 10.0),   # backward 4 + 6 under loss_parallel
    (8, 1, 2, True, 5.0),    # under PP the logits are the pipeline's (pp_logits): forward 4.5 < backward 5
    (8, 1, 2, False, 6.5),   # a stack whose runtime does not keep them: the loss's own 2 B
])
def test_bytes_a_logit_by_hand(n, tp, pp, keeps, peak):
    got, transient = logit_chunk_loss_bytes(n, tp, pp, keeps)
    assert float(got) == peak and float(transient) == peak - 4.0  # the 4 B log-softmaxes kept per micro-batch


def _tt(explain, **kw):
    job = dict(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", recompute="selective",
               micro_batch=1, global_batch=8, seq_len=8192, fsdp_root_unit=True, rope_cache="model")
    return explain(**{**job, **kw})[3]["memory"]


def test_pr996_rows_differ_by_the_loss_alone(explain):
    """PR #996's two runs (tests/data/memory, tt_pr996_*): the loss's peak 12 -> 6.5 B a logit (the
    output_activations term) and its freed logits block 2 -> 0 (stream_pools); nothing else moves."""
    base, ck = _tt(explain), _tt(explain, loss_logit_chunks=8)
    b, c = base["terms"], ck["terms"]
    assert b["output_activations"] - c["output_activations"] == pytest.approx(5.5 * TV, rel=1e-12)
    assert base["allocated_bytes"] - ck["allocated_bytes"] == pytest.approx(5.5 * TV, rel=1e-12)
    assert base["reserved_bytes"] - ck["reserved_bytes"] == pytest.approx(7.5 * TV, rel=1e-12)
    assert 7.5 * TV / 2**30 == pytest.approx(7.339, abs=1e-3)  # measured: 49.58 - 42.26 = 7.32 GiB
    for k in ("layer_activations", "master_weights", "adam", "fsdp_unsharded_ends", "fsdp_gathered_units"):
        assert b[k] == c[k], k


def test_refusals(explain):
    with pytest.raises(PlannerError, match="does not run torchtitan's loss"):
        explain(model="llama3-8b", gpus=8, stack="megatron", global_batch=8, seq_len=8192, loss_logit_chunks=8)
    with pytest.raises(PlannerError, match="two losses"):
        _tt(explain, loss_logit_chunks=8, chunked_loss=True)
    # torchtitan-0.3's default ChunkedLossWrapper gives way to the job's loss (no refusal, the wrapper off)
    settings = explain(model="llama3-8b", gpus=8, stack="torchtitan-0.3", global_batch=8, seq_len=8192,
                       loss_logit_chunks=8)[0]
    assert settings.chunked_loss is False and settings.loss_logit_chunks == 8


def test_loss_logit_chunks_is_not_exported():
    """A code version's loss function: no trainer file holds it, so the export refuses it."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", global_batch=8,
                             seq_len=8192, loss_logit_chunks=8))
    assert plan["loss_logit_chunks"] == 8
    with pytest.raises(PlannerError, match="export torchtitan: loss_logit_chunks"):
        export_plan(plan, "torchtitan")


def test_rule_m9_sets_the_field(tmp_path):
    """planner/memory_rows.py rule M9: the PR #996 chunked row becomes a job with loss_logit_chunks 8 (the
    PR's num_output_chunks default) and the baseline's code-version fields; the baseline keeps the stack's loss."""
    from pathlib import Path

    from planner import memory_rows as mr

    rows = {r.id: r for r in mr.load(Path(__file__).parent / "data" / "memory" / "measured_memory.yaml").memory_rows}
    ck, _ = mr.measured_job(rows["tt_pr996_llama3_8b_fsdp8_chunked_ce"], mr.Result(id="c", group=""), tmp_path)
    base, _ = mr.measured_job(rows["tt_pr996_llama3_8b_fsdp8_baseline"], mr.Result(id="b", group=""), tmp_path)
    assert ck["loss_logit_chunks"] == 8 and "loss_logit_chunks" not in base
    assert {k: v for k, v in ck.items() if k != "loss_logit_chunks"} == base


def test_compiled_pipeline_keeps_the_logits_beside_the_eager_chunks():
    """Under PP the last stage's bf16 logits are the pipeline's (pp_logits, 2 B a logit a held micro-batch): the
    compiled plain loss saves them by reference (kernels loss_saved_input_per_logit 2: pp_logits 0), PR #996's eager
    chunks do not, so with torch_compile on its job keeps them in pp_logits as without compile; the loss's own
    figure (5 B a logit under PP: the first chunk's backward, 4 + 8 / 8) does not depend on the flag either."""
    import numpy as np

    from planner import memory as mem
    from planner.plan import resolve
    from planner.schema import Job

    job = dict(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", pp=2, micro_batch=1, global_batch=8,
               seq_len=8192, loss_logit_chunks=8)
    per = {}
    for compiled in (False, True):
        settings, plan, _ = resolve(Job(**job, torch_compile=compiled))
        per[compiled] = mem._PerLayer(settings, plan, mem.count_params(settings.model))
    for p in per.values():
        assert float(np.asarray(p.pp_logits)) == 2.0 * TV and float(np.asarray(p.loss_pool)) == 0.0
    assert float(np.asarray(per[True].out_act)) == float(np.asarray(per[False].out_act))
