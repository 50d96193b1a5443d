"""search.rows_of prices the memory's groups (weights, optimizer, activations, total, allocated, reserved, the high
band, the reported peak, every stage's) once over every row (explain.memory_groups) and each row's to_json reads its
element; to_json without them sums the row's own terms. The two must be the same numbers: the groups are elementwise
sums, taken over the same terms in the same order."""

import numpy as np

from planner import memory as mem
from planner.explain import evaluate, memory_groups, to_json
from planner.schema import Job
from planner.search import search_one
from planner.space import SpaceOptions


def _ranked():
    """llama3-70b's 48 best plans on 512 H100 (pipelines of 2 to 16 stages: a middle stage where pp > 2)."""
    ranked, *_ = search_one(Job(model="llama3-70b", gpus=512), SpaceOptions(), top=48)
    return ranked[0]


def test_every_rows_memory_is_its_own_sum():
    r = _ranked()
    plan = r.space.plans(r.base, r.rc, r.order, r.var)
    est = evaluate(r.settings, plan)
    groups = memory_groups(r.settings, est)
    assert np.any(np.asarray(plan.pp) > 2)  # (not vacuous: rows with a middle stage's groups)
    for i in range(len(r.base)):
        shared = to_json(r.settings, plan, est, i, groups=groups)["memory"]
        own = to_json(r.settings, plan, est, i)["memory"]
        assert shared == own, i
        assert shared["total_bytes"] == float(est.memory.total[i])


def test_the_groups_are_memory_grouped_of_every_plan():
    """memory_groups' arrays are memory.grouped's and reported_bytes' over the plans (one element a row), and one
    group per stage the estimate prices."""
    r = _ranked()
    plan = r.space.plans(r.base, r.rc, r.order, r.var)
    est = evaluate(r.settings, plan)
    grouped, reported, stages = memory_groups(r.settings, est)
    assert np.shape(grouped["total_bytes"]) == (len(r.base),)
    assert np.array_equal(grouped["reserved_bytes"], mem.reserved_bytes(est.memory))
    assert np.array_equal(reported, mem.reported_bytes(r.settings, est.memory))
    assert set(stages) == set(est.stages)


def test_the_layers_listing_is_built_once_and_handed_out_new():
    """LayerList.described keeps its list per (seq, cp) (rows_of asks once a row): DeepSeek-V3's (3 dense layers,
    then 58 MoE, an MTP module) is the listing built afresh, in new dicts a call (a row may change its own)."""
    from planner.catalog import load_model
    from planner.layers import layer_list

    layers = layer_list(load_model("deepseek-v3"))
    first = layers.described(4096, 2)
    again = layers.described(4096, 2)
    assert first == again == layers._describe(4096, 2)
    assert first is not again and all(a is not b for a, b in zip(first, again))
    assert [d["count"] for d in first[:2]] == [3, 58]
    again[0]["count"] = -1
    assert layers.described(4096, 2)[0]["count"] == 3
    assert layers.described(8192, 1) == layers._describe(8192, 1)
