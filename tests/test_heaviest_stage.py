"""One argmax of the three priced stages (pipeline.heaviest_stage_index), read by memory's heaviest stage (bytes)
and step's critical stage (time), with one tie rule: the lower pipeline rank wins, the first, then the middle,
then the last (before: memory took the first, then the last, and the middle only when strictly larger; step the
middle, then the first). Tied stages hold the same bytes (take the same time), so the rule only names the stage.
"""
from __future__ import annotations

import numpy as np
import pytest

from planner import memory, step
from planner.pipeline import HEAVIEST_FIRST, HEAVIEST_LAST, HEAVIEST_MIDDLE, heaviest_stage_index
from planner.plan import resolve
from planner.schema import Job


def test_tie_rule_by_hand():
    """(first, middle, last) -> the largest, ties to the lower rank; -inf for a stage that does not exist."""
    f, m, la = (np.array(x, dtype=np.float64) for x in zip(
        (1, 1, 1), (1, 2, 2), (2, 2, 1), (0, 1, 1), (0, 0, 1), (3, 1, 2), (1, -np.inf, 1), (1, -np.inf, 2)))
    assert heaviest_stage_index(f, m, la).tolist() == [HEAVIEST_FIRST, HEAVIEST_MIDDLE, HEAVIEST_FIRST, HEAVIEST_MIDDLE,
                                                       HEAVIEST_LAST, HEAVIEST_FIRST, HEAVIEST_FIRST, HEAVIEST_LAST]


def test_memory_and_step_name_the_same_stage():
    """The same three figures give the same stage in both cost models: a middle stage tied with the last (memory
    named the last before) and one tied with the first (step named the middle before) both go to the lower rank."""
    first, mid, last = np.array([1.0, 2.0]), np.array([2.0, 2.0]), np.array([2.0, 1.0])
    assert memory._heaviest_code(first, last, mid).tolist() == [memory.STAGE_MIDDLE, memory.STAGE_FIRST]
    slots = step._heaviest(mid, first, last)
    assert [step.CRITICAL_STAGES[i] for i in slots] == ["mid", "first"]


def test_a_compute_tie_is_broken_by_the_middle_stage_s_extra_exchange():
    """Llama 3 8B on Megatron, pp 4 with --decoder-first-pipeline-num-layers 9 and -last- 5: the two middle
    stages hold (32 - 9 - 5) / 2 = 9 layers, as the first, and the last 5 plus the head (the output layer and loss,
    about 2.6 layers of bf16 GEMMs: test_pp_first_stage.py), so the first and the middle take the same compute a
    micro-batch (every term step_time reads: compute, permutation, host, unfused), above the last's. Their
    communication differs by one p2p exchange: Megatron batches a send with the receive from the same neighbour and
    an end stage skips the side it has no neighbour on (Stack.pipeline_p2p_batched, p2p_communication.py @d98e8a64
    l. 536-600), so the first stage makes 2 v - 1 = 1 exchange a micro-batch against a middle stage's 2: the middle
    is critical by one exchange less the first stage's embedding TP collectives (step.py [36], since branch headsp:
    by exactly one exchange before; the tie rule, lower rank first, decides only exact ties: the slots test above;
    this case tied before the end stages' exchanges were counted)."""
    s, p, _ = resolve(Job(model="llama3-8b", gpus=32, tp=2, pp=4, sharding="zero1", micro_batch=1, global_batch=64,
                          stack="megatron", first_stage_layers=9, last_stage_layers=5))
    seen = []
    orig = step.critical_stage

    def spy(comp, comms):
        crit, out = orig(comp, comms)
        seen.append((crit, comp, comms))
        return crit, out

    step.critical_stage = spy
    try:
        step.step_time(s, p)
    finally:
        step.critical_stage = orig
    crit, comp, comms = seen[-1]
    i_mid, i_first, i_last = (step.CRITICAL_STAGES.index(x) for x in ("mid", "first", "last"))
    for j in range(4):
        assert float(comp.stages[i_mid][j]) == float(comp.stages[i_first][j])
    comm = [sum(c[st] for c in comms) for st in step.CRITICAL_STAGES]
    tot = [comp.stages[i][0] + comm[i] for i in range(3)]
    assert float(tot[i_mid]) > float(tot[i_first]) and float(tot[i_mid]) > float(tot[i_last])
    assert int(crit) == i_mid
    # the difference: the middle's second exchange (half its 2 a micro-batch) less the first stage's embedding TP
    # collectives (step.py [36], head_tp_seconds: its reduce-scatter forward and all-gather backward under SP), the
    # only two terms that differ between the two stages
    diff = [c for c in comms if float(c["mid"]) != float(c["first"])]
    assert len(diff) == 2
    pp_c = next(c for c in diff if float(c["mid"]) == 2.0 * float(c["first"]) > 0.0)
    tp_c = next(c for c in diff if c is not pp_c)
    sc, _, _ = step._compute_pass(s, p)
    emb = float(step.head_tp_seconds(sc, step.Collectives(sc))["first"])
    assert float(tp_c["first"] - tp_c["mid"]) == pytest.approx(emb, rel=1e-9) and 0.0 < emb < float(pp_c["first"])
    assert float(tot[i_mid] - tot[i_first]) == pytest.approx(float(pp_c["first"]) - emb, rel=1e-9)
