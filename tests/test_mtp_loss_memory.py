"""Each multi-token-prediction module's output layer and loss as Megatron-Core holds them (memory.py [ml], stack_db
megatron memory.mtp_loss_kept_per_logit 4).

NVIDIA/Megatron-LM @d98e8a64: gpt_model.py _postprocess runs process_mtp_loss (l. 746) before the main output layer
(l. 807) and loss (l. 839); multi_token_prediction.py l. 1012-1066, per depth: the output layer's bf16 logits (the
linear saves its input, not its output) go to compute_language_model_loss (l. 1027), then MTPLossAutoScaler saves the
[b, s] loss alone (l. 902), and the next depth's assignment / the return (l. 1068) drop the logits. The loss keeps
what it saved: the fp32 softmax exp_logits (tensor_parallel/cross_entropy.py l. 181 unfused, fusions/
fused_cross_entropy.py l. 119 with --cross-entropy-loss-fusion), 4 B a logit. The main loss's backward runs first
(its nodes are the last created), so its backward transients are counted once, in the main loss's out_act (unfused:
loss_saved_per_logit 6; fused: 6 + fused_loss_extra_per_logit 4 = 10), beside every module's 4. With
cross_entropy_fusion_impl te the loss saves the bf16 logits themselves (te_loss_per_logit[0] = 2), the main's figure.

llama3.2-1b on the megatron stack, tp 1 (no SP: rep_div 1, vocabulary divisor 1), micro-batch 1 x 4,096 tokens:
T = 4,096, h = 2,048, V = 128,256 (a multiple of 128: no padding). The output layer's hidden terms: the final norm's
input 2h and the output layer's saved input (the norm's output) 2h = 4h = 8,192 B a token.
  a module's output + loss:  T (4h + 4 V) = 4,096 x (8,192 + 513,024) = 4,096 x 521,216 = 2,134,900,736 B
  the main loss's, unfused:  T (4h + 6 V) = 4,096 x (8,192 + 769,536) = 4,096 x 777,728 = 3,185,573,888 B
  the main loss's, fused:    T (4h + 10 V) = 4,096 x (8,192 + 1,282,560) = 4,096 x 1,290,752 = 5,286,920,192 B
  with TE's loss, both:      T (4h + 2 V) = 4,096 x (8,192 + 256,512) = 4,096 x 264,704 = 1,084,227,584 B
Before [ml] a module was charged the main's figure: 1,050,673,152 B more a module unfused (2 T V), 3,152,019,456 B
fused (6 T V).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.memory import _PerLayer, mtp_stored
from planner.params import count_params
from planner.plan import resolve
from planner.schema import Job
from planner.stacks import plan_context

JOB = dict(model="llama3.2-1b", stack="megatron", gpus=8, hardware="h100-sxm", tp=1, pp=1, global_batch=8,
           micro_batch=1, seq_len=4096, recompute="none")
MODULE_LOSS = 2_134_900_736.0
MAIN = {False: 3_185_573_888.0, True: 5_286_920_192.0}
TE = 1_084_227_584.0


def _per(**kw):
    settings, plan, _ = resolve(Job(**{**JOB, **kw}))
    pc = count_params(settings.model)
    return settings, plan, pc, _PerLayer(settings, plan, pc)


def _f(x) -> float:
    return float(np.ravel(x)[0])


@pytest.mark.parametrize("fused", [False, True])
def test_a_module_keeps_its_softmax_the_main_loss_its_backward_peak(fused):
    _, _, _, per = _per(mtp_layers=1, cross_entropy_fusion=fused)
    assert _f(per.mtp_out_act) == MODULE_LOSS
    assert _f(per.out_act) == MAIN[fused]
    assert _f(per.out_act) - _f(per.mtp_out_act) == (6.0 if fused else 2.0) * 4096 * 128_256


@pytest.mark.parametrize("fused", [False, True])
def test_one_and_two_modules_by_hand(fused):
    """per.mtp (what the modules hold on the stage holding the loss, one micro-batch) = modules x (the module
    layer's saved activations + the projection's two normed halves 2 x 2h T + the output layer and loss above):
    the halves 2 x 2 x 2,048 x 4,096 = 33,554,432 B; the layer's own share read from mtp_stored (its kind's
    activations, checked in test_mtp_recompute / test_mtp_split)."""
    halves = 2.0 * 2.0 * 2048 * 4096
    for n in (1, 2):
        settings, plan, pc, per = _per(mtp_layers=n, cross_entropy_fusion=fused)
        layer = _f(mtp_stored(settings, plan, pc, per.stored))
        assert layer > 0
        assert _f(per.mtp) == pytest.approx(n * (layer + halves + MODULE_LOSS), rel=1e-12)
        # the main loss is charged once, whatever the modules
        assert _f(per.out_act) == MAIN[fused]


def test_te_loss_keeps_the_logits_for_every_loss():
    _, _, _, per = _per(mtp_layers=2, cross_entropy_fusion=True, cross_entropy_fusion_impl="te")
    assert _f(per.mtp_out_act) == TE and _f(per.out_act) == TE


def test_a_stack_that_does_not_say_charges_what_the_main_loss_saves():
    """torchtitan 0.3 (memory.mtp_loss_kept_per_logit null), eager loss: each module keeps what its loss saved, the
    main loss's out_act less its one-at-a-time transient (memory.py [lt]): torchtitan release/0.3 @4f9e9a47d
    models/deepseek_v3/mtp.py MTPLoss.__call__ (l. 339-409) runs cross_entropy_loss (F.cross_entropy on the fp32 copy)
    on every depth's logits; each keeps its fp32 log-softmax (4 B a logit) to the backward, and the losses' backwards
    run one at a time (their nodes all after every lm_head call), so the nll and log-softmax gradients (kernels
    loss_transient_per_logit 8) are counted once, in the main loss's out_act (loss_saved_per_logit 12).
    Same shape as above (T 4,096, h 2,048, V 128,256; torchtitan's output layer also saves the norm's output: 4h):
      a module:  T (4h + 4 V) = 4,096 x 521,216 = 2,134,900,736 B (MODULE_LOSS, Megatron's figure by coincidence)
      the main:  T (4h + 12 V) = 4,096 x (8,192 + 1,539,072) = 4,096 x 1,547,264 = 6,337,593,344 B
    Before [lt] a module was charged the main's 6,337,593,344 B: 4,202,692,608 B (T 8 V) more a module."""
    _, _, _, per = _per(mtp_layers=1, stack="torchtitan-0.3", sharding="fsdp")
    assert _f(per.out_act) == 6_337_593_344.0
    assert _f(per.mtp_out_act) == MODULE_LOSS
    assert _f(per.out_act) - _f(per.mtp_out_act) == _f(per.out_transient) == 8.0 * 4096 * 128_256


def test_the_stage_total_moves_by_the_module_loss(explain):
    """explain's layer_activations term (which holds the MTP modules on the stage holding the loss): two modules
    against one, the same job, differ by one module's layer + halves + 2,134,900,736 B of output and loss."""
    s1, p1, _, j1 = explain(**JOB, mtp_layers=1)
    s2, p2, _, j2 = explain(**JOB, mtp_layers=2)
    pc = count_params(s1.model)
    per = _PerLayer(s1, p1, pc)
    layer = _f(mtp_stored(s1, p1, pc, per.stored))
    d = j2["memory"]["terms"]["layer_activations"] - j1["memory"]["terms"]["layer_activations"]
    assert d == pytest.approx(layer + 2.0 * 2.0 * 2048 * 4096 + MODULE_LOSS, rel=1e-9)


def test_torchtitan_compiled_and_loss_parallel_modules():
    """torchtitan 0.3 compiled (compiled_kernels loss_saved_per_logit 4, loss_transient_per_logit 2): a module keeps
    the bf16 logits its compiled loss saved, T (4h + 2 V) = 4,096 x 264,704 = 1,084,227,584 B (TE's figure above);
    the main adds its bf16 gradient once, T (4h + 4 V) = 2,134,900,736 B. Under TP 2 with loss_parallel (kernels
    loss_parallel_saved_per_logit 16, loss_parallel_transient_per_logit 12; V / 2 = 64,128 logits a token; the
    hidden terms: the norm's input 2h / 2 under SP and the output linear's saved input all-gathered, 2h (stack
    memory.tp_saves_gathered_input [tt1]): 2,048 + 4,096 = 6,144 B): a module keeps the fp32 log-softmax, T (6,144 +
    4 x 64,128) = 4,096 x 262,656 = 1,075,838,976 B; the main T (6,144 + 16 x 64,128) = 4,096 x 1,032,192 =
    4,227,858,432 B."""
    _, _, _, per = _per(mtp_layers=1, stack="torchtitan-0.3", sharding="fsdp", torch_compile=True)
    assert _f(per.mtp_out_act) == TE and _f(per.out_act) == MODULE_LOSS
    _, _, _, per = _per(mtp_layers=1, stack="torchtitan-0.3", sharding="fsdp", tp=2)
    assert _f(per.mtp_out_act) == 1_075_838_976.0 and _f(per.out_act) == 4_227_858_432.0
