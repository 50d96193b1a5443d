"""torchtitan 0.3's TP collectives under op SAC (issue 21; stack selective.tp_collectives_kept 'compiled', memory.py [tk]).

pytorch/torchtitan release/0.3 @4f9e9a47d, default spmd_backend 'spmd_types' (config/configs.py l. 163-165), SP on
(l. 160): the row-parallel wo / w2 reduce-scatter through spmd_types 0.2.3 _ReduceScatterShard (c10d
dist.reduce_scatter_tensor, _collectives.py l. 648) and the block inputs all-gather through _AllGatherShard (c10d,
l. 307). The save list (distributed/activation_checkpoint.py l. 31-94) holds only _c10d_functional.reduce_scatter_tensor
(l. 62): eager, op SAC keeps neither reduce-scatter output and the recompute re-runs 4 TP collectives a layer (2
all-gathers + 2 reduce-scatters: 2 pairs), not 2 (1 pair). Compiled, dynamo's functional rewrite is assumed (stack
uncertain): both outputs kept, 2 collectives re-run, as the stack's other fields say."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.catalog import load_stack
from planner.explain import evaluate, to_json

JOB = dict(model="llama3-8b", stack="torchtitan-0.3", gpus=8, tp=2, pp=1, sharding="fsdp", micro_batch=1,
           seq_len=4096, global_batch=4)
# Llama 3 8B: h 4,096, 32 layers; T = mbs 1 x seq 4,096 tokens; 2 TP-split blocks (attention, MLP) a layer, each
# reduce-scatter output 2 B x h / t a token: 2 x 4,096 x 2 x 4,096 / 2 = 33,554,432 B a layer, x 32 layers (PP 1,
# one micro-batch in flight) = 1,073,741,824 B.
PER_LAYER = 2 * 4096 * 2 * 4096 // 2
TOTAL = 32 * PER_LAYER


def test_stack_field():
    assert load_stack("torchtitan-0.3").selective.tp_collectives_kept == "compiled"
    assert load_stack("torchtitan").selective.tp_collectives_kept == "always"


def _kept_always(settings, plan):
    st = settings.stack
    keep = replace(settings, stack=st.model_copy(update={"selective": st.selective.model_copy(
        update={"tp_collectives_kept": "always"})}))
    return to_json(keep, plan, evaluate(keep, plan))


def test_eager_keeps_neither_reduce_scatter_output(explain):
    """33,554,432 B a layer, 1,073,741,824 B over 32 layers less than the same eager job priced as keeping them
    ('always'), and less than the compiled job (the same 32 layers' reduce-scatter outputs kept)."""
    assert PER_LAYER == 33_554_432 and TOTAL == 1_073_741_824
    settings, plan, _, je = explain(recompute="selective", **JOB)
    assert int(plan.sp) == 1
    kept = _kept_always(settings, plan)
    assert kept["memory"]["activations_bytes"] - je["memory"]["activations_bytes"] == TOTAL
    _, _, _, jc = explain(recompute="selective", torch_compile=True, **JOB)
    assert jc["memory"]["activations_bytes"] - je["memory"]["activations_bytes"] == TOTAL


def test_eager_reruns_twice_the_tp_collectives(explain):
    """Without recompute a layer runs 2 pairs forward + 2 backward (tp_comm(none) = 4 p a layer, no TP overlap);
    selective re-runs 1 pair compiled (5 p) and 2 pairs eager (6 p): the re-run TP time doubles."""
    _, _, _, jn = explain(recompute="none", **JOB)
    p = (jn["time"]["tp_comm_s"] - jn["time"].get("tp_head_s", 0.0)) / 4.0
    assert p > 0.0
    settings, plan, _, je = explain(recompute="selective", **JOB)
    _, _, _, jc = explain(recompute="selective", torch_compile=True, **JOB)
    assert (jc["time"]["tp_comm_s"] - jc["time"].get("tp_head_s", 0.0)) == pytest.approx(5.0 * p, rel=1e-12)
    assert (je["time"]["tp_comm_s"] - je["time"].get("tp_head_s", 0.0)) == pytest.approx(6.0 * p, rel=1e-12)
    ka = _kept_always(settings, plan)["time"]
    assert ka["tp_comm_s"] - ka.get("tp_head_s", 0.0) == pytest.approx(5.0 * p, rel=1e-12)


def test_torchtitan_main_unchanged(explain):
    """On torchtitan main ('always') eager and compiled keep the same partials: no activation difference from them."""
    job = dict(JOB, stack="torchtitan")
    settings, plan, _, je = explain(recompute="selective", **job)
    assert _kept_always(settings, plan)["memory"]["activations_bytes"] == je["memory"]["activations_bytes"]
    _, _, _, jn = explain(recompute="none", **job)
    assert (je["time"]["tp_comm_s"] - je["time"].get("tp_head_s", 0.0)) == pytest.approx(1.25 * (jn["time"]["tp_comm_s"] - jn["time"].get("tp_head_s", 0.0)), rel=1e-12)


# TP without SP (parallelism.enable_sequence_parallel false, configs.py l. 160): rowwise_config(output_sp=False)
# (decoder_sharding.py l. 81-98) redistributes the row-parallel wo / w2 outputs P -> I, an all-reduce; no
# reduce-scatter runs, and _c10d_functional.all_reduce is on no save list (activation_checkpoint.py l. 31-94: of the
# collectives only reduce_scatter_tensor and all_to_all_single): nothing beyond the table is kept, eager or compiled.
# The table's mlp_out is the w2 mm output at its full length already (rep_div 1: 2h a token, not 2h / t).
# Before the fix the compiled job kept 2 x 2h / t (reduce-scatter outputs that do not exist) + 2h (1 - 1/t) (the w2
# partial counted twice): T (2 x 2 x 4,096 / 2 + 2 x 4,096 x 1/2) = 4,096 x 12,288 = 50,331,648 B a layer,
# 1,610,612,736 B over 32; the eager job the second part, 4,096 x 4,096 = 16,777,216 B a layer, 536,870,912 B.
NO_SP_RS = 32 * 4096 * (2 * 2 * 4096 // 2)
NO_SP_MLP = 32 * 4096 * (2 * 4096 // 2)


def _without_partials(settings, plan):
    st = settings.stack
    none = replace(settings, stack=st.model_copy(update={"selective": st.selective.model_copy(
        update={"saves_tp_partials": False})}))
    return to_json(none, plan, evaluate(none, plan))


@pytest.mark.parametrize("compiled", [False, True])
def test_without_sp_no_partial_kept(explain, compiled):
    """SP off, eager or compiled: the job's activations equal the same job priced with no TP partials at all
    (saves_tp_partials false), and eager equals compiled. SP on, compiled, the same comparison differs by the
    reduce-scatter outputs and the w2 partial's 2h (1 - 1/t): NO_SP_RS + NO_SP_MLP = 1,610,612,736 B (the figures
    the SP-off job carried before)."""
    assert NO_SP_RS == 1_073_741_824 and NO_SP_MLP == 536_870_912
    settings, plan, _, j = explain(recompute="selective", torch_compile=compiled, sequence_parallel=False, **JOB)
    assert int(plan.sp) == 0
    assert _without_partials(settings, plan)["memory"]["activations_bytes"] == j["memory"]["activations_bytes"]
    _, _, _, je = explain(recompute="selective", sequence_parallel=False, **JOB)
    assert je["memory"]["activations_bytes"] == j["memory"]["activations_bytes"]
    settings, plan, _, js = explain(recompute="selective", torch_compile=True, **JOB)
    assert int(plan.sp) == 1
    assert (js["memory"]["activations_bytes"] - _without_partials(settings, plan)["memory"]["activations_bytes"]
            == NO_SP_RS + NO_SP_MLP)


def test_without_sp_all_reduces_rerun(explain):
    """SP off a layer runs 2 all-reduces forward and 2 backward (tp_comm(none) = 4 a); eager op SAC's recompute
    (early_stop False) re-runs both forward all-reduces (6 a); compiled, the partitioner re-runs only what the backward
    needs: the attention all-reduce, whose sum h the ffn_norm backward reads (5 a; the w2 all-reduce feeds only the
    block output)."""
    _, _, _, jn = explain(recompute="none", sequence_parallel=False, **JOB)
    a = (jn["time"]["tp_comm_s"] - jn["time"].get("tp_head_s", 0.0)) / 4.0
    assert a > 0.0
    _, _, _, je = explain(recompute="selective", sequence_parallel=False, **JOB)
    _, _, _, jc = explain(recompute="selective", torch_compile=True, sequence_parallel=False, **JOB)
    assert (je["time"]["tp_comm_s"] - je["time"].get("tp_head_s", 0.0)) == pytest.approx(6.0 * a, rel=1e-12)
    assert (jc["time"]["tp_comm_s"] - jc["time"].get("tp_head_s", 0.0)) == pytest.approx(5.0 * a, rel=1e-12)
