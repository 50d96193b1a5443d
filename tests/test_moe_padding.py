"""MoE padded to capacity (job moe_pad_to_capacity, Megatron --moe-pad-expert-input-to-capacity):
the alltoall and hybridep dispatchers then know every split on the host and do not synchronise
(planner/dispatch.py [7]: Megatron-LM @d98e8a64 token_dispatcher.py), so step.moe_host's exposed
host time is 0 there and the experts can be graphed (transformer_config.py l. 2838-2844); the
allgather dispatcher's .cpu() stays; DeepEP's backend refuses the padding; the CLI option, the
fit row's reproduce line and the refusal without a capacity factor."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import assert_one_error
from planner.dispatch import host_synced
from planner.errors import PlannerError
from planner.schema import Job
from planner.search import explain_args
from planner.step import moe_host

# Qwen3-30B-A3B (128 experts, every layer MoE) on 16 H100: TP 2, EP 8 (tests/test_cuda_graphs.py's)
MOE = dict(model="qwen3-30b-a3b", gpus=16, tp=2, ep=8, sharding="zero1", micro_batch=1, global_batch=64,
           stack="megatron")
PAD = dict(moe_capacity_factor=1.25, moe_pad_to_capacity=True)


def _sc(pad: bool, dispatcher: str, ep):
    """A step context with the issue constants 0.7 ms per layer + 0.44 ms per local expert (the
    megatron stack's fitted moe_host at the time of writing, given here by hand)."""
    mh = SimpleNamespace(per_layer_s=0.7e-3, per_local_expert_s=0.44e-3)
    return SimpleNamespace(stack=SimpleNamespace(moe_host=mh), plan=SimpleNamespace(ep=np.asarray(ep)),
                           settings=SimpleNamespace(moe_pad_to_capacity=pad, moe_dispatcher=dispatcher,
                                                    moe_hybridep_capacity_factor=0.0))


KIND = SimpleNamespace(mlp=SimpleNamespace(num_experts=128))


def test_host_term_by_hand():
    """128 experts at EP 8: 16 local, issue 0.7 + 0.44 x 16 = 7.74 ms; a 1 ms forward leaves
    6.74 ms exposed; at EP [8, 64] (2 local: 1.58 ms) 0.58 ms. Padded, alltoall and hybridep
    expose nothing; padded allgather (its .cpu(), l. 320) and every unpadded one the same 6.74 ms."""
    for disp in ("alltoall", "allgather", "hybridep", "deepep"):
        assert float(moe_host(_sc(False, disp, 8), KIND, 1e-3)) == pytest.approx(6.74e-3, rel=1e-12)
    assert np.allclose(moe_host(_sc(False, "alltoall", [8, 64]), KIND, 1e-3), [6.74e-3, 0.58e-3], rtol=1e-12)
    assert float(moe_host(_sc(True, "allgather", 8), KIND, 1e-3)) == pytest.approx(6.74e-3, rel=1e-12)
    for disp in ("alltoall", "hybridep"):
        assert float(moe_host(_sc(True, disp, 8), KIND, 1e-3)) == 0.0
        assert not host_synced(True, disp) and host_synced(False, disp)
    assert host_synced(True, "allgather")


def test_padding_drops_the_host_term_in_the_step(explain):
    """The whole estimate: the unpadded job (dropless, or dropping at 1.25) exposes host time;
    padded with the alltoall dispatcher none; padded allgather keeps it."""
    t_dropless = explain(**MOE)[3]["time"]["moe_host_s"]
    t_drop = explain(**MOE, moe_capacity_factor=1.25)[3]["time"]["moe_host_s"]
    t_pad = explain(**MOE, **PAD)[3]["time"]["moe_host_s"]
    t_ag = explain(**MOE, **PAD, moe_dispatcher="allgather")[3]["time"]["moe_host_s"]
    assert t_dropless > 0 and t_drop > 0 and t_ag > 0
    assert t_pad == 0.0


def test_padding_refused_without_capacity_factor_or_on_deepep(explain):
    with pytest.raises(PlannerError, match="moe_pad_to_capacity is set without moe_capacity_factor"):
        explain(**MOE, moe_pad_to_capacity=True)
    with pytest.raises(PlannerError, match="Megatron refuses the padding on DeepEP's backend"):
        explain(**MOE, **PAD, moe_dispatcher="deepep")


def test_cli_option(cli):
    base = ["explain", "--model", "qwen3-30b-a3b", "--gpus", "16", "--tp", "2", "--ep", "8", "--global-batch", "64",
            "--format", "json"]
    off = cli(*base, "--moe-capacity-factor", "1.25")
    on = cli(*base, "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity")
    no = cli(*base, "--moe-capacity-factor", "1.25", "--no-moe-pad-to-capacity")
    for r in (off, on, no):
        assert r.exit_code == 0, r.stderr
    j_off, j_on, j_no = (json.loads(r.stdout) for r in (off, on, no))
    assert j_on["plan"]["moe_pad_to_capacity"] is True and j_off["plan"]["moe_pad_to_capacity"] is False
    assert j_on["time"]["moe_host_s"] == 0.0 and j_off["time"]["moe_host_s"] > 0
    assert j_no["time"] == j_off["time"]
    # Megatron's rule (transformer_config.py l. 1862-1866): padding needs a capacity factor
    assert_one_error(cli(*base, "--moe-pad-to-capacity"), "moe_pad_to_capacity", "moe_capacity_factor")
    # check takes explain's options
    r = cli("check", "--help")
    assert "--moe-pad-to-capacity" in r.stdout


def test_fit_takes_the_option_and_explain_repeats_the_row(cli):
    """fit --moe-pad-to-capacity prices the padded rows (no host term) and the row's reproduce
    line (search.explain_args) carries the flag, so explain gives the same step time."""
    r = cli("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--tp", "2", "--pp", "1", "--top", "1",
            "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity", "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["time"]["moe_host_s"] == 0.0
    args = explain_args(Job(model="qwen3-30b-a3b", gpus=16, **PAD), row)
    assert "--moe-pad-to-capacity" in args and args[args.index("--moe-capacity-factor") + 1] == "1.25"
    again = json.loads(cli("explain", *args, "--format", "json").stdout)
    assert again["time"]["step_s"] == row["time"]["step_s"]
    assert "--moe-pad-to-capacity" not in explain_args(Job(model="qwen3-30b-a3b", gpus=16, moe_capacity_factor=1.25),
                                                       row)


@pytest.mark.parametrize("kw", [dict(cuda_graph_impl="local", cuda_graph_scope=["moe"]),
                                dict(cuda_graph_impl="transformer_engine"),
                                dict(cuda_graph_impl="full_iteration")])
def test_graphs_of_the_experts_allowed_padded(explain, kw):
    """Padded, alltoall: the moe scope, the whole layer and full_iteration are accepted (Megatron
    accepts moe with drop-padding, transformer_config.py l. 2838-2844); dropless they are refused;
    padded allgather is refused (its dispatch_postprocess .cpu() would run inside the capture)."""
    explain(**MOE, **PAD, **kw)
    explain(**MOE, **PAD, **kw, moe_dispatcher="hybridep")
    with pytest.raises(PlannerError, match="captures the experts|only with drop-padding"):
        explain(**MOE, **kw)
    with pytest.raises(PlannerError, match="allgather dispatcher, padded to capacity, cannot"):
        explain(**MOE, **PAD, **kw, moe_dispatcher="allgather")


def test_moe_scope_needs_padding_not_only_a_capacity_factor(explain):
    with pytest.raises(PlannerError, match="only with drop-padding MoE"):
        explain(**MOE, moe_capacity_factor=1.25, cuda_graph_impl="local", cuda_graph_scope=["moe"])


def test_preprocess_graph_refused_when_alltoall_drops_unpadded(explain):
    """transformer_config.py l. 2845-2852: alltoall with a capacity factor and no padding
    synchronises in preprocess, so moe_preprocess is refused (local adds it to moe_router);
    padded, or dropless, it is accepted."""
    graphs = dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=["attn", "moe_router", "moe_preprocess"])
    with pytest.raises(PlannerError, match="moe_preprocess is not graphed"):
        explain(**MOE, moe_capacity_factor=1.25, **graphs)
    with pytest.raises(PlannerError, match="moe_preprocess is not graphed"):
        explain(**MOE, moe_capacity_factor=1.25, cuda_graph_impl="local", cuda_graph_scope=["moe_router"])
    explain(**MOE, **PAD, **graphs)
    explain(**MOE, **graphs)
