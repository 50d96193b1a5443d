"""The shortcuts that make `planner fit`'s dispatcher search cheaper (issues 23 and 24) give the numbers
the plain computation gives:
- comm.auto_collective_times on stacked (K, n) collectives (step.cp_ring_comm's sends, handed down
  unflattened by comm.distinct below UNIQUE_MIN elements) goes through its memo and returns
  group_collective's figures, element for element, in the (K, n) shape;
- search._distinct is np.unique on small non-negative integers (and on none);
- stacks.fp8_recipe's per-stack columns: each figure is the stack's own recipe field (neutral where the
  stack lacks the recipe), read lazily, kept per stack object (a changed copy of a stack gets its own);
- layers.LayerList.prefix (its period table built once) counts each kind as a walk over the layers does.
"""

from __future__ import annotations

import numpy as np

from planner import comm
from planner.catalog import load_hardware, load_model, load_stack
from planner.layers import layer_list
from planner.plan import FP8_RECIPES, RECIPE_PEAK
from planner.search import _distinct
from planner.stacks import _grouped_figures, fp8_recipe


def test_stacked_collectives_go_through_the_memo_with_group_collectives_figures():
    params = comm.comm_params(load_hardware("h100-sxm"))
    # 3 x 5 = 15 elements (< comm.UNIQUE_MIN): one K/V size, one dK/dV size, both, over groups 2..16
    size = np.array([[1e6, 2e6, 4e6, 8e6, 3e5], [2e6, 4e6, 8e6, 1.6e7, 6e5], [3e6, 6e6, 1.2e7, 2.4e7, 9e5]])
    group = np.broadcast_to(np.array([2, 4, 8, 16, 2]), size.shape)
    stride = np.broadcast_to(np.array([1, 8, 1, 8, 64]), size.shape)
    comm.clear_collective_memo()
    got = comm.auto_collective_times(comm.SEND_RECV, size, group, stride, params, 2048)
    cost, link, _ = comm.group_collective(comm.SEND_RECV, size, group, stride, params, comm.AUTO, job_gpus=2048)
    want = (cost.time_s, cost.latency_s, cost.bandwidth_s, link.link)
    for g, w in zip(got, want):
        assert g.shape == size.shape
        assert np.array_equal(g, np.broadcast_to(w, size.shape))
    # priced once: a second call finds every tuple in the memo (the same figures)
    again = comm.auto_collective_times(comm.SEND_RECV, size, group, stride, params, 2048)
    assert all(np.array_equal(a, b) for a, b in zip(again, got))
    # keyed by the algorithms the run's NCCL_ALGO leaves the op too (comm.nccl_algo_candidates; default all), and by
    # the protocols it allows (comm.proto_mask; default NCCL's set, PROTO_DEFAULT)
    key = (params, 2048, comm.SEND_RECV, comm.AUTO_CANDIDATES, comm.PROTO_DEFAULT, "<f8", "<i8", "<i8")
    assert len(comm._AUTO_MEMO[key]) == 15


def test_distinct_is_np_unique_on_small_non_negative_integers():
    rng = np.random.default_rng(23)
    for hi, n in ((1, 1), (5, 40), (8, 3), (97635, 2000)):
        a = rng.integers(0, hi, size=n, dtype=np.int64)
        got = _distinct(a)
        assert got.dtype == np.int64 and np.array_equal(got, np.unique(a))
    empty = _distinct(np.zeros(0, dtype=np.int64))
    assert empty.dtype == np.int64 and len(empty) == 0


def test_fp8_recipe_figures_are_the_stacks_fields_per_code():
    stack = load_stack("megatron")
    codes = np.arange(len(FP8_RECIPES), dtype=np.int64)
    f = fp8_recipe(stack, codes)
    for c, name in enumerate(FP8_RECIPES):
        r = stack.fp8_recipes.get(name)
        assert f["cast_bytes"][c] == (float(r.cast_bytes_per_element) if r else 0.0)
        assert f["gemm_speed"][c] == (float(r.gemm_speed) if r else 1.0)
        assert bool(f["allgather_fp8"][c]) == (bool(r.allgather_fp8) if r else False)
        assert f["low_fwd"][c] == (float("fprop" in r.gemms) if r else 1.0)
        # the TP collectives' widths (step.py [33]): the recipe's tp_collective_bytes, 2 B (bf16) and no amax without
        t = r.tp_collective_bytes if r else None
        assert f["tp_grad_output_all_gather"][c] == (float(t.grad_output_all_gather) if t else 2.0)
        assert f["tp_amax"][c] == (float(t.amax_all_reduce_bytes) if t else 0.0)
        # delayed scaling's amax reductions (step.py [34]): the recipe's amax_reduction, 0 where it has none
        a = r.amax_reduction if r else None
        assert (f["amax_fwd"][c], f["amax_bwd"][c], f["amax_regions"][c]) == (
            (float(a.forward_bytes_per_gemm), float(a.backward_bytes_per_gemm), float(a.regions_per_chunk)) if a
            else (0.0, 0.0, 0.0))
    assert (f["amax_fwd"][FP8_RECIPES.index("delayed")], f["amax_bwd"][FP8_RECIPES.index("delayed")]) == (12.0, 8.0)
    # torchao float8's dynamic-scaling all-reduces (step.py [39]): torchtitan's tensorwise alone has them
    t = fp8_recipe(load_stack("torchtitan"), codes)
    tw = FP8_RECIPES.index("tensorwise")
    assert [(float(t["dt_amax"][c]), float(t["fsdp_amax"][c]), bool(t["f8_tp_styles"][c])) for c in codes] == [
        (8.0, 4.0, False) if c == tw else (0.0, 0.0, False) for c in codes]
    assert float(f["dt_amax"].max()) == float(f["fsdp_amax"].max()) == 0.0  # Megatron: Transformer Engine's own [33] [34]
    assert set(f) == {"gemm_speed", "cast_bytes", "allgather_fp8", "output_layer_bf16", "dpa_qkv", "dpa_qkv_cp", "dpa_out",
                      "cp_ring_kv", "cp_ring_dkv", "cp_merge_out", "cp_inputs_bf16", "low_fwd", "low_bwd",
                      "tp_input_all_gather", "tp_output_reduce_scatter", "tp_grad_output_all_gather",
                      "tp_grad_input_reduce_scatter", "tp_amax", "amax_fwd", "amax_bwd", "amax_regions",
                      "dt_amax", "fsdp_amax", "f8_tp_styles", "grouped_speed", "grouped_cast_bytes", "grouped_low_fwd", "grouped_low_bwd", "grouped_align"}
    # the routed experts' grouped figures: _grouped_figures' own numbers, the grouped recipe's speed at its own
    # peak ratio (mxfp8's dense peak over fp8's: 1.5 on a B200 made so; the catalog's GPUs list them equal)
    b200 = load_hardware("b200")
    hw = b200.model_copy(update={"mxfp8_TFLOPS": 1.5 * b200.fp8_TFLOPS})
    ratio = np.array([hw.mxfp8_TFLOPS / hw.fp8_TFLOPS if RECIPE_PEAK[n] == "mxfp8" else 1.0 for n in FP8_RECIPES])
    gemms = [stack.fp8_recipes[n].gemms if n in stack.fp8_recipes else ["fprop", "dgrad", "wgrad"] for n in FP8_RECIPES]
    for st in (stack, load_stack("torchtitan")):
        got, want = fp8_recipe(st, codes, hw), _grouped_figures(st, codes, ratio, gemms if st is stack else [
            st.fp8_recipes[n].gemms if n in st.fp8_recipes else ["fprop", "dgrad", "wgrad"] for n in FP8_RECIPES])
        for k, v in want.items():
            assert np.array_equal(got[k], v), k
        mx = FP8_RECIPES.index("mxfp8")
        assert got["grouped_speed"][mx] == 1.5 * float(st.fp8_recipes["mxfp8"].gemm_speed)  # its own recipe's
    # one plan's code: a scalar, as the columns indexed by a 0-d code give it
    one = fp8_recipe(stack, np.int64(FP8_RECIPES.index("blockwise")))
    assert np.ndim(one["cast_bytes"]) == 0
    assert one["cast_bytes"] == float(stack.fp8_recipes["blockwise"].cast_bytes_per_element)
    # a copy of the stack with another figure is its own stack, never the cached columns of the first
    name = next(iter(stack.fp8_recipes))
    changed = stack.model_copy(update={"fp8_recipes": {**stack.fp8_recipes, name: stack.fp8_recipes[name].model_copy(
        update={"cast_bytes_per_element": 7.5})}})
    assert fp8_recipe(changed, np.int64(FP8_RECIPES.index(name)))["cast_bytes"] == 7.5
    assert fp8_recipe(stack, np.int64(FP8_RECIPES.index(name)))["cast_bytes"] == float(
        stack.fp8_recipes[name].cast_bytes_per_element)


def test_layer_prefix_counts_each_kind_as_a_walk_over_the_layers():
    for model in ("nemotron-h-56b", "llama4-maverick", "deepseek-v3"):
        ll = layer_list(load_model(model))
        walk = np.zeros((len(ll.kinds), ll.num_layers + 1), dtype=np.int64)
        for i in range(ll.num_layers):
            walk[:, i + 1] = walk[:, i]
            walk[ll.kind_at(i), i + 1] += 1
        i = np.arange(ll.num_layers + 1)
        assert np.array_equal(ll.prefix(i), walk)
        assert np.array_equal(ll.prefix(i), walk)  # the second call, from the table built by the first


def test_collective_memo_table_cleared_at_its_limit_still_prices_the_tuples_it_had(monkeypatch):
    """A call that finds 1e6 and 2e6 in a table of 3 and brings 2 new tuples outgrows AUTO_MEMO_LIMIT 4: the table
    is cleared to the 2 new ones, and the found tuples still get their figures (the code before raised KeyError)."""
    params = comm.comm_params(load_hardware("h100-sxm"))
    monkeypatch.setattr(comm, "AUTO_MEMO_LIMIT", 4)
    comm.clear_collective_memo()
    size, group, stride = np.array([1e6, 2e6, 4e6]), np.array([8, 8, 8]), np.array([1, 1, 1])
    comm.auto_collective_times(comm.ALL_GATHER, size, group, stride, params, 2048)
    (table,) = comm._AUTO_MEMO.values()
    assert len(table) == 3
    size2, group2, stride2 = np.array([1e6, 8e6, 2e6, 16e6]), np.array([8, 8, 8, 8]), np.array([1, 1, 1, 1])
    got = comm.auto_collective_times(comm.ALL_GATHER, size2, group2, stride2, params, 2048)
    assert len(table) == 2
    cost, link, _ = comm.group_collective(comm.ALL_GATHER, size2, group2, stride2, params, comm.AUTO, job_gpus=2048)
    want = (cost.time_s, cost.latency_s, cost.bandwidth_s, link.link)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.broadcast_to(w, size2.shape))
    comm.clear_collective_memo()
