"""The loss's bytes split into what each held micro-batch's loss saves until its backward and the transient of one
loss backward, counted once (memory.py [lt], stack_db kernels loss_transient_per_logit).

torch.distributed.pipelining ScheduleGPipe (torchtitan's `gpipe`) runs every micro-batch's forward, and on the last
stage its loss, before the first backward: the last stage holds m losses (pipeline.py stage_inflight_kinds "loss").
torchtitan's eager loss (F.cross_entropy on the fp32 copy) saves the fp32 log-softmax (4 B a logit) to the backward;
the nll gradient and the log-softmax gradient (4 + 4 B) exist only inside one micro-batch's loss backward, and the
micro-batches' backwards run one after another. So the last stage's output_activations at its peak are
m x (hidden terms + 4 V) T + 8 V T + m x 2 V T (the bf16 logits each micro-batch's fwd_cache keeps, [tt4]).

llama3.2-1b on torchtitan, FSDP, tp 1, pp 2, 4 GPUs (dp 2), global batch 8, micro-batch 1 x 4,096 tokens: m = 4.
T = 4,096, h = 2,048, V = 128,256 (no padding at tp 1). The output layer's hidden terms: the final norm's input 2h
and the output layer's saved input (the norm's output) 2h = 4h = 8,192 B a token.
  saved a micro-batch:       T (4h + 4 V)  = 4,096 x (8,192 + 513,024)   = 4,096 x 521,216   = 2,134,900,736 B
  transient, once:           T 8 V          = 4,096 x 1,026,048                                = 4,202,692,608 B
  the logits fwd_cache keeps: T 2 V         = 4,096 x 256,512                                  = 1,050,673,152 B
  GPipe (4 held): 4 x 2,134,900,736 + 4,202,692,608 + 4 x 1,050,673,152 = 8,539,602,944 + 4,202,692,608
                  + 4,202,692,608 = 16,944,988,160 B
  (before [lt]: 4 x (2,134,900,736 + 4,202,692,608) + 4,202,692,608 = 29,553,065,984 B, 3 transients more:
  12,608,077,824 B)
  1F1B (1 held, unchanged): 6,337,593,344 + 1,050,673,152 = 7,388,266,496 B
Compiled (torch_compile: the loss compiled, compiled_kernels loss_saved_per_logit 4, loss_transient_per_logit 2:
the graph saves the bf16 logits, its backward writes their bf16 gradient):
  saved T (4h + 2 V) = 4,096 x 264,704 = 1,084,227,584 B; transient T 2 V = 1,050,673,152 B
  the saved bf16 logits are the loss's input, fwd_cache's tensor itself (compiled_kernels loss_saved_input_per_logit
  2, memory.py [lp]): the logits fwd_cache keeps add T (2 - 2) V = 0
  GPipe: 4 x 1,084,227,584 + 1,050,673,152 + 0 = 4,336,910,336 + 1,050,673,152 = 5,387,583,488 B
  (before [lp]: 9,590,276,096 B, the 4 x 1,050,673,152 = 4,202,692,608 B of logits counted twice)
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.memory import _PerLayer, _stages
from planner.params import count_params
from planner.plan import resolve
from planner.schema import Job

T, H, V = 4096, 2048, 128_256
JOB = dict(model="llama3.2-1b", stack="torchtitan", gpus=4, hardware="h100-sxm", tp=1, pp=2, global_batch=8,
           micro_batch=1, seq_len=4096, recompute="none", sharding="fsdp")


def _f(x) -> float:
    return float(np.ravel(x)[0])


def _last(**kw):
    settings, plan, _ = resolve(Job(**{**JOB, **kw}))
    _, last, _, _, _ = _stages(settings, plan)
    return settings, plan, last, _PerLayer(settings, plan, count_params(settings.model))


@pytest.mark.parametrize("compiled, saved, transient, kept, total", [
    (False, 2_134_900_736.0, 4_202_692_608.0, 2.0, 16_944_988_160.0),
    (True, 1_084_227_584.0, 1_050_673_152.0, 0.0, 5_387_583_488.0),
])
def test_gpipe_last_stage_keeps_four_saved_losses_and_one_transient(compiled, saved, transient, kept, total):
    _, plan, last, per = _last(schedule="gpipe", torch_compile=compiled)
    assert int(np.ravel(plan.microbatches)[0]) == 4
    assert _f(per.out_act) - _f(per.out_transient) == saved
    assert _f(per.out_transient) == transient
    assert _f(per.pp_logits) == T * kept * V
    assert _f(last["output_activations"]) == 4 * saved + transient + 4 * T * kept * V == total


def test_1f1b_holds_one_loss_as_before():
    _, _, last, per = _last(schedule="1f1b")
    assert _f(per.out_act) == T * (4.0 * H + 12.0 * V) == 6_337_593_344.0
    assert _f(last["output_activations"]) == 7_388_266_496.0


@pytest.mark.parametrize("fused, transient", [(False, 2.0), (True, 6.0)])
def test_megatron_loss_transient(fused, transient):
    """Megatron-LM @d98e8a64 (stack_db megatron kernels): the unfused loss keeps its fp32 softmax (4 B, cross_entropy.py
    l. 181) and its backward's bf16 gradient cast (2 B) is the transient; --cross-entropy-loss-fusion adds the compiled
    calculate_gradients' fp32 buffer (fused_loss_extra_per_logit 4), transient too: 2 + 4 = 6. Kept per micro-batch
    either way: T (4h + 4 V) = 2,134,900,736 B (as each MTP module's, memory.mtp_loss_kept_per_logit 4)."""
    settings, plan, _ = resolve(Job(model="llama3.2-1b", stack="megatron", gpus=8, hardware="h100-sxm", tp=1, pp=1,
                                    global_batch=8, micro_batch=1, seq_len=4096, recompute="none",
                                    cross_entropy_fusion=fused))
    per = _PerLayer(settings, plan, count_params(settings.model))
    assert _f(per.out_transient) == transient * T * V
    assert _f(per.out_act) - _f(per.out_transient) == 2_134_900_736.0


def test_te_loss_has_no_transient():
    """TE's loss writes the logits' gradient over the saved logits (memory.py [te]): all of its 2 B a logit kept."""
    settings, plan, _ = resolve(Job(model="llama3.2-1b", stack="megatron", gpus=8, hardware="h100-sxm", tp=1, pp=1,
                                    global_batch=8, micro_batch=1, seq_len=4096, recompute="none",
                                    cross_entropy_fusion=True, cross_entropy_fusion_impl="te"))
    per = _PerLayer(settings, plan, count_params(settings.model))
    assert _f(per.out_transient) == 0.0 and _f(per.out_act) == T * (4.0 * H + 2.0 * V)


def test_a_transient_larger_than_what_the_loss_holds_is_refused(tmp_path, cli):
    from conftest import assert_one_error
    p = tmp_path / "mine.yaml"
    p.write_text("extends: megatron\nname: x\nversion: mine\nkernels:\n  loss_transient_per_logit: 7\n")
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", str(p))
    assert_one_error(r, f"{p}:", "loss_transient_per_logit is a part of loss_saved_per_logit")
