"""The loss under torch.distributed.pipelining on torchtitan (memory.py [lp]): the bf16 logits the pipeline keeps and
the loss saves priced once; the allocator's loss pool (the training loop's freed logits) none under PP, each MTP
depth's without it.

The schedule hands the loss the last stage's output, the tensor fwd_cache keeps to the stage backward (pytorch/pytorch
@00722e648 torch/distributed/pipelining/schedules.py _maybe_compute_loss -> _compute_loss; stage.py forward_one_chunk,
[tt4]): 2 B a logit a held micro-batch (pp_logits). torchtitan's compiled loss (components/loss.py @e347b1e5e l. 20-35)
saves that input by reference: stack compiled_kernels loss_saved_input_per_logit 2, so pp_logits = T (2 - 2) V = 0
compiled, T 2 V eager (the eager loss saves its fp32 log-softmax, not its input).
The pool (kernels loss_pool_per_logit 2 eager) is the loop's bf16 logits freed by `del pred` (train.py @e347b1e5e,
trainer.py release/0.3 l. 814-828): under PP the loop holds none and fwd_cache keeps them, the freed block is the
eager loss's fp32 copy (4 B a logit), which the backward's fp32 gradients reuse: 0. Before [lp] _stage_terms charged
losses x T 2 V in stream_pools (m = 4 under GPipe).

llama3.2-1b on torchtitan, FSDP, tp 1, pp 2, 4 GPUs (dp 2), global batch 8, micro-batch 1 x 4,096 tokens: m = 4.
T = 4,096, h = 2,048, V = 128,256 (no padding at tp 1). T 2 V = 4,096 x 256,512 = 1,050,673,152 B.
  eager, pp 1 (8 GPUs, dp 8): pool T 2 V = 1,050,673,152 B (as before)
  eager, pp 2, GPipe: pool 0 (before: 4 x 1,050,673,152 = 4,202,692,608 B)
  eager, pp 2, 1F1B:  pool 0 (before: 1 x 1,050,673,152 B)
  compiled, pp 2, 1F1B, the last stage's output_activations: the saved T (4h + 2 V) = 4,096 x 264,704 =
    1,084,227,584 B, the transient T 2 V = 1,050,673,152 B, the kept logits 0: 2,134,900,736 B
    (before [lp]: + 1,050,673,152 = 3,185,573,888 B)
torchtitan-0.3 with one MTP module (D = 1, no PP: refused there, mtp.py l. 199-204), eager: `del pred` frees the main
and the depth's bf16 logits, MTPDecoder.forward l. 246-278 returning both: pool (1 + 1) x T 2 V = 2,101,346,304 B
(before: 1,050,673,152 B, the main's alone).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.memory import _PerLayer, _stages
from planner.params import count_params
from planner.plan import resolve
from planner.schema import Job

T, H, V = 4096, 2048, 128_256
LOGITS = 1_050_673_152.0  # T 2 V
JOB = dict(model="llama3.2-1b", stack="torchtitan", gpus=4, hardware="h100-sxm", tp=1, pp=2, global_batch=8,
           micro_batch=1, seq_len=4096, recompute="none", sharding="fsdp")


def _f(x) -> float:
    return float(np.ravel(x)[0])


def _last(**kw):
    settings, plan, _ = resolve(Job(**{**JOB, **kw}))
    _, last, _, _, _ = _stages(settings, plan)
    return plan, last, _PerLayer(settings, plan, count_params(settings.model))


def test_logits_block_is_t_2_v():
    assert T * 2.0 * V == LOGITS


@pytest.mark.parametrize("schedule, m", [("gpipe", 4), ("1f1b", 4)])
def test_no_loss_pool_under_pp(schedule, m):
    plan, last, per = _last(schedule=schedule)
    assert int(np.ravel(plan.microbatches)[0]) == m
    assert _f(per.loss_pool) == 0.0
    assert _f(per.pp_logits) == LOGITS  # eager: fwd_cache's logits are not what the loss saved


def test_loss_pool_without_pp_is_the_freed_logits():
    _, _, per = _last(pp=1, gpus=8)
    assert _f(per.loss_pool) == LOGITS and _f(per.pp_logits) == 0.0


def test_compiled_loss_and_fwd_cache_hold_the_logits_once():
    _, last, per = _last(schedule="1f1b", torch_compile=True)
    assert _f(per.pp_logits) == 0.0
    assert _f(per.out_act) == T * (4.0 * H + 4.0 * V) and _f(per.out_transient) == LOGITS
    assert _f(last["output_activations"]) == 1_084_227_584.0 + LOGITS == 2_134_900_736.0


def test_mtp_pool_counts_every_depths_logits():
    settings, plan, _ = resolve(Job(**{**JOB, "stack": "torchtitan-0.3", "pp": 1, "gpus": 8, "mtp_layers": 1}))
    per = _PerLayer(settings, plan, count_params(settings.model))
    assert _f(per.loss_pool) == 2.0 * LOGITS == 2_101_346_304.0
    settings, plan, _ = resolve(Job(**{**JOB, "stack": "torchtitan-0.3", "pp": 1, "gpus": 8, "mtp_layers": 1,
                                       "torch_compile": True}))
    assert _f(_PerLayer(settings, plan, count_params(settings.model)).loss_pool) == 0.0  # compiled: no pool


def test_a_saved_input_larger_than_what_the_loss_saves_is_refused(tmp_path, cli):
    from conftest import assert_one_error
    p = tmp_path / "mine.yaml"
    p.write_text("extends: torchtitan\nname: x\nversion: mine\nkernels:\n  loss_saved_input_per_logit: 5\n")
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", str(p))
    assert_one_error(r, f"{p}:", "loss_saved_input_per_logit is a part of what the loss saves")


def test_the_pool_is_held_once_whatever_the_losses_in_flight(tmp_path):
    """A stack whose pipeline runtime does not keep the logits (stack memory.pipeline_keeps_logits false: torchtitan
    extended so) keeps its loss pool under PP: T 2 V = 1,050,673,152 B on the last stage, once, however many
    micro-batches' losses it holds (GPipe: m = 4; 1F1B: 1): each loss frees its bf16 logits block before the next
    micro-batch's same-sized logits reuse it, so the allocator caches one block (before: losses x the pool, 4 x T 2 V
    under GPipe, 3,152,019,456 B more than under 1F1B). The other pools (the sharded gradients', FSDP's all-gather)
    read no schedule: the first stage's are the same under both, and so is the last stage's total."""
    p = tmp_path / "keepsnot.yaml"
    p.write_text("extends: torchtitan\nname: keepsnot\nversion: mine\nmemory:\n  pipeline_keeps_logits: false\n")
    got = {}
    for schedule in ("gpipe", "1f1b"):
        settings, plan, _ = resolve(Job(**{**JOB, "stack": str(p), "schedule": schedule}))
        first, last, _, _, _ = _stages(settings, plan)
        assert _f(_PerLayer(settings, plan, count_params(settings.model)).loss_pool) == LOGITS
        got[schedule] = (_f(first["stream_pools"]), _f(last["stream_pools"]))
    assert got["gpipe"] == got["1f1b"]
    assert got["gpipe"][1] >= LOGITS
