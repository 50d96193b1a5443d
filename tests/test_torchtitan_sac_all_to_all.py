"""Selective AC under a torchtitan model code whose save list leaves the EP all-to-all out (issue 23).

torchtitan @e347b1e5e: llama4's, deepseek_v3's and gpt_oss's _op_sac_save_list (models/<code>/infra/
parallelize.py l. 51-66, 33-48, 42-57) hold torch.ops._c10d_functional.all_to_all_single.default, qwen3's
(l. 39-54) does not; ExpertParallel's dispatch / combine (distributed/expert_parallel.py l. 138, 175,
all_to_all_single_autograd -> _c10d_functional::all_to_all_single) run inside the checkpointed block, so under
selective AC qwen3 re-runs both forward all-to-alls in the backward and keeps neither output
(stack_db torchtitan runs.model_codes sac_saves_all_to_all)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.catalog import load_stack
from planner.explain import evaluate, to_json
from planner.layers import layer_list
from planner.stacks import plan_context

JOB = dict(gpus=8, stack="torchtitan", tp=1, ep=8, pp=1, sharding="fsdp", micro_batch=1, seq_len=4096,
           global_batch=8)


def test_stack_says_which_codes_save_the_all_to_all():
    codes = {c.code: c.sac_saves_all_to_all for c in load_stack("torchtitan").runs.model_codes}
    assert codes == {"llama3": False, "llama4": True, "deepseek_v3": True, "qwen3": False, "gpt_oss": True}


def _pair(explain, model):
    sel = explain(model=model, recompute="selective", **JOB)
    none = explain(model=model, recompute="none", **JOB)
    return sel, none


def test_qwen3_selective_reruns_the_forward_all_to_alls(explain):
    (_, _, est_s, js), (_, _, est_n, jn) = _pair(explain, "qwen3-30b-a3b")
    # without recompute: per MoE layer a dispatch + combine forward and their gradients backward (equal
    # bytes: the gradient all-to-all moves the same rows back), so the forward half is the tokens' ep_comm / 2; beside
    # them the token counts' all-to-all (torchtitan's _token_dispatch, forward only: moe.counts_gather_s)
    counts = jn["moe"]["counts_gather_s"]
    assert counts > 0
    fwd = (jn["time"]["ep_comm_s"] - counts) / 2.0
    assert jn["moe"]["sac_rerun_s"] == 0.0
    # selective: the 48 layers' forward dispatch + combine once more, exposed as the forward's, the counts' exchange
    # with them (the re-run forward calls _token_dispatch again)
    assert js["moe"]["sac_rerun_s"] == pytest.approx(fwd, rel=1e-12)
    assert js["moe"]["counts_gather_s"] == pytest.approx(2.0 * counts, rel=1e-12)
    assert js["time"]["ep_comm_s"] == pytest.approx(3.0 * fwd + 2.0 * counts, rel=1e-12)
    assert js["moe"]["dispatch_s"] + js["moe"]["combine_s"] == pytest.approx(3.0 * fwd, rel=1e-12)
    # the named terms still sum to the step
    assert float(est_s.time["ep_comm"]) == pytest.approx(js["time"]["ep_comm_s"], rel=1e-12)


def test_llama4_saves_the_all_to_all(explain):
    (_, _, _, js), (_, _, _, jn) = _pair(explain, "llama4-scout")
    assert js["moe"]["sac_rerun_s"] == 0.0
    assert js["time"]["ep_comm_s"] == pytest.approx(jn["time"]["ep_comm_s"], rel=1e-12)


def test_qwen3_selective_keeps_neither_all_to_all_output(explain):
    """The drop is the dispatch output (the experts' input rows, padded) and the combine's input rows:
    T x L x 2 B x h x rows (pad + 1), rows the busiest EP rank's copies of a token (layers/moe.py)."""
    settings, plan, est, js = explain(model="qwen3-30b-a3b", recompute="selective", **JOB)
    assert settings.sac_reruns_exchange
    saved = to_json(replace(settings, sac_reruns_exchange=False), plan,
                    evaluate(replace(settings, sac_reruns_exchange=False), plan))  # the saved-list pricing
    ctx = plan_context(settings, plan)
    moe = next(k for k in layer_list(settings.model).kinds if k.has_experts).mlp
    rows, pad = float(moe.token_copies(ctx)), float(moe.padded_rows(ctx))
    assert 8.0 <= rows < 9.0 and 1.0 <= pad < 1.01  # top_k 8 at the busiest rank's load; 16-row groups
    T, L, h = 4096, 48, 2048
    drop = T * L * 2.0 * h * rows * (pad + 1.0)
    assert saved["memory"]["activations_bytes"] - js["memory"]["activations_bytes"] == pytest.approx(drop, rel=1e-9)
    # and the saved-list pricing has no re-run
    assert saved["moe"]["sac_rerun_s"] == 0.0


def test_no_code_or_dense_model_reruns_nothing(explain):
    assert not explain(model="mixtral-8x7b", recompute="selective", **JOB)[0].sac_reruns_exchange  # no torchtitan code
    assert not explain(model="llama3-8b", recompute="selective", gpus=8, stack="torchtitan", sharding="fsdp",
                       micro_batch=1, seq_len=4096, global_batch=8)[0].sac_reruns_exchange  # dense


# torchtitan 0.3 (stack selective.exchange_kept 'compiled', memory.py [xk]): its one save list holds
# _c10d_functional.all_to_all_single (distributed/activation_checkpoint.py l. 61-63), but eager on the default
# spmd_types backend the AllToAllTokenDispatcher exchanges through spmd_types' _AllToAllUneven (c10d all_to_all and a
# cat, token_dispatcher.py l. 335-342, 363-370), which no save-list op matches: eager, op SAC re-runs both forward
# exchanges and keeps neither output; compiled (token_dispatcher.py l. 258-266, 325-333, 353-361: the functional op)
# keeps them. HybridEP's dispatch and combine ops are on the list whatever the mode.
JOB03 = dict(JOB, stack="torchtitan-0.3", model="qwen3-30b-a3b", moe_rank_imbalance=1.0)


def test_03_stack_field():
    assert load_stack("torchtitan-0.3").selective.exchange_kept == "compiled"
    assert load_stack("torchtitan").selective.exchange_kept == "always"


def test_03_eager_selective_reruns_the_forward_all_to_alls(explain):
    """As qwen3 on main: the forward dispatch + combine once more, (ep_comm(none) - counts) / 2, and 0.3's int64
    token counts' all-to-all with them (AllToAllTokenDispatcher._token_count_exchange, forward only, re-run by the
    recomputed forward: stack moe_alltoall_exchanges); none compiled."""
    _, _, _, jn = explain(recompute="none", **JOB03)
    counts = jn["moe"]["counts_gather_s"]
    assert counts > 0
    fwd = (jn["time"]["ep_comm_s"] - counts) / 2.0
    _, _, _, js = explain(recompute="selective", **JOB03)
    assert js["moe"]["sac_rerun_s"] == pytest.approx(fwd, rel=1e-12) and fwd > 0.0
    assert js["moe"]["counts_gather_s"] == pytest.approx(2.0 * counts, rel=1e-12)
    assert js["time"]["ep_comm_s"] == pytest.approx(3.0 * fwd + 2.0 * counts, rel=1e-12)
    _, _, _, jc = explain(recompute="selective", torch_compile=True, **JOB03)
    assert jc["moe"]["sac_rerun_s"] == 0.0
    _, _, _, jh = explain(recompute="selective", moe_dispatcher="hybridep", **JOB03)
    assert jh["moe"]["sac_rerun_s"] == 0.0


def test_03_eager_selective_keeps_neither_all_to_all_output(explain):
    """The drop against the same job priced as keeping them (exchange_kept 'always'): moe_expert_in and
    moe_expert_out, 2 B x h a received row each (0.3 pads no token group: no padded rows), R = 4,096 x 8 rows at a
    rank load of 1: 48 x 32,768 x 2 x 2,048 x 2 = 12,884,901,888 B."""
    settings, plan, est, js = explain(recompute="selective", **JOB03)
    st = settings.stack
    keep = replace(settings, stack=st.model_copy(update={"selective": st.selective.model_copy(
        update={"exchange_kept": "always"})}))
    saved = to_json(keep, plan, evaluate(keep, plan))
    assert 48 * 32_768 * 2 * 2048 * 2 == 12_884_901_888
    assert saved["memory"]["activations_bytes"] - js["memory"]["activations_bytes"] == 12_884_901_888
    assert saved["moe"]["sac_rerun_s"] == 0.0
