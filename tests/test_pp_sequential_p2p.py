"""DeepSpeed's pipeline sends and receives one after another, blocking (Stack.pipeline_p2p_sequential:
microsoft/DeepSpeed @38327e07 deepspeed/runtime/pipe/p2p.py send / recv l. 46-84, async_op refused;
pipe/schedule.py TrainSchedule.steps l. 214-223): a middle stage makes 4 one-way transfers a micro-batch (the
forward step's SendGrad and RecvActivation, the backward step's RecvGrad and SendActivation), stage 0 and stage
p - 1 two each. Megatron-Core batches a send with the receive from the same neighbour (Stack.pipeline_p2p_batched,
p2p_communication.py @d98e8a64 l. 536-600): a middle stage 2 exchanges, an end stage 1.

By hand, Llama 2 13B, tp 1 (no partitioned sends), pp 4, one H100 node per stage pair, the same send S (T h bf16 over
the PP link) on both stacks: Megatron first / middle / last = S, 2 S, S; DeepSpeed 2 S, 4 S, 2 S."""

from __future__ import annotations

import pytest

from planner import step
from planner.plan import resolve
from planner.schema import Job


def stage_comms(s, p) -> tuple:
    """The per-stage communication step_time hands critical_stage ([tp, cp, pp (, ep)], each first / mid / last,
    seconds a micro-batch), caught by a spy on step.critical_stage."""
    seen = []
    orig = step.critical_stage

    def spy(comp, comms):
        seen.append(comms)
        return orig(comp, comms)

    step.critical_stage = spy
    try:
        step.step_time(s, p)
    finally:
        step.critical_stage = orig
    return seen[-1]


def _pp(stack: str) -> dict:
    s, p, _ = resolve(Job(model="llama2-13b", gpus=32, tp=1, pp=4, stack=stack, global_batch=64, micro_batch=1,
                          seq_len=4096))
    pp = [c for c in stage_comms(s, p) if float(c["first"]) > 0 and float(c["mid"]) == 2.0 * float(c["first"])]
    assert len(pp) == 1
    return {k: float(v) for k, v in pp[0].items()}


def test_deepspeed_middle_stage_sends_four_times_megatron_end_stage():
    meg, ds = _pp("megatron"), _pp("megatron-deepspeed")
    send = meg["first"]  # one exchange of T h bf16 = 4,096 x 5,120 x 2 B = 41,943,040 B over the PP link
    assert send > 0
    assert meg["mid"] == pytest.approx(2.0 * send, rel=1e-12) and meg["last"] == pytest.approx(send, rel=1e-12)
    assert ds["first"] == pytest.approx(2.0 * send, rel=1e-12) and ds["last"] == pytest.approx(2.0 * send, rel=1e-12)
    assert ds["mid"] == pytest.approx(4.0 * send, rel=1e-12)
