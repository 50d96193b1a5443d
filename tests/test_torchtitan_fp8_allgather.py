"""FSDP's fp8 weight all-gather as a job setting (issues 21 / 23): torchtitan gathers the weights
of the Linears its float8 converter swapped in fp8 only with [float8] enable_fsdp_float8_all_gather
= true and recipe_name unset (torchtitan/components/quantization/float8.py @9810191bb~1 l. 62-99;
default false, torchtitan/config/job_config.py @e347b1e5e l. 732); the embedding, norms, routers,
routed experts and a bf16 output layer are gathered in bf16 either way (planner/step.py [15])."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.catalog import load_model, load_stack
from planner.errors import PlannerError
from planner.params import count_params
from planner.step import fp8_gather_share, gather_bytes

# Llama 3 8B (model_zoo llama3-8b: h 4096, 32 layers, ffn 14336, 32 heads, 8 KV heads of 128,
# vocab 128256, untied), parameters by hand:
LINEARS = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)  # wq wo wk wv w1 w2 w3: 6,979,321,856
NORMS = 32 * 2 * 4096 + 4096  # two RMSNorm weights a layer and the final norm
EMB = OUT = 128256 * 4096  # 525,336,576 each
TOTAL = LINEARS + NORMS + EMB + OUT  # 8,030,261,248


def _sc(allgather, fp8_out=False):
    settings = SimpleNamespace(fp8_allgather=allgather, fp8_output_layer=fp8_out, fp8_param_gather=False, filter_fqns=None,
                               fp4_param_gather=False, bpp=SimpleNamespace(gradients=4.0), stack=load_stack("torchtitan"))
    plan = SimpleNamespace(precision=np.array([1]), f8r=np.array([1]))  # fp8, tensorwise (precisions.FP8_RECIPES)
    return SimpleNamespace(plan=plan, settings=settings, stack=SimpleNamespace(fsdp=SimpleNamespace(param_gather_bytes=2.0)),
                           fp8=np.array([True]), recipe={"allgather_fp8": np.array([True])})


def test_hand_counts():
    assert TOTAL == 8_030_261_248 == count_params(load_model("llama3-8b")).total


@pytest.mark.parametrize("allgather,fp8_out,want", [
    # on, output layer bf16 (filter_fqns ["output"]): the linears at 1 B, the rest at 2 B
    (True, False, (LINEARS * 1 + (NORMS + EMB + OUT) * 2) / TOTAL),    # 1.13087 B a parameter
    (None, False, (LINEARS * 1 + (NORMS + EMB + OUT) * 2) / TOTAL),    # the tensorwise recipe's rule: on
    (True, True, ((LINEARS + OUT) * 1 + (NORMS + EMB) * 2) / TOTAL),  # the output layer converted too: 1.06545
    (False, False, 2.0),                                               # torchtitan's default: bf16 gathers
    (False, True, 2.0),
])
def test_gather_bytes_by_hand(allgather, fp8_out, want):
    sc = _sc(allgather, fp8_out)
    pc = count_params(load_model("llama3-8b"))
    got = gather_bytes(sc, np.array([False]), 0.0, fp8_gather_share(pc, sc.settings, sc.plan))
    assert got[0] == pytest.approx(want, rel=1e-12)


def test_experts_gather_bf16():
    # torchtitan's float8 Linear converter leaves GroupedExperts (not nn.Linear) to bf16 gathers [15]
    assert gather_bytes(_sc(True), np.array([False]), 1.0, 0.0)[0] == 2.0


KW = dict(model="llama3-8b", gpus=32, hardware="h200-sxm", stack="torchtitan", precision="fp8",
          global_batch=64, seq_len=8192, sharding="fsdp")


def test_off_gathers_more(explain):
    on = explain(**KW, fp8_allgather=True)[3]["time"]
    rule = explain(**KW)[3]["time"]
    off = explain(**KW, fp8_allgather=False)[3]["time"]
    assert on == rule
    assert off["dp_comm_s"] > on["dp_comm_s"] and off["compute_s"] == on["compute_s"]


@pytest.mark.parametrize("fields,match", [
    (dict(fp8_recipe="rowwise"), "recipe rowwise has no fp8 FSDP all-gather"),
    (dict(fp8_recipe="mxfp8", hardware="b200"), "recipe mxfp8 has no fp8 FSDP all-gather"),
    (dict(stack="megatron", fp8_recipe="delayed"), "stack megatron's recipe delayed has no fp8 FSDP all-gather"),
    (dict(precision="bf16"), "fp8_allgather needs precision fp8"),
])
def test_refused_where_it_means_nothing(explain, fields, match):
    for v in (True, False):
        with pytest.raises(PlannerError, match=match):
            explain(**dict(KW, **fields), fp8_allgather=v)


@pytest.mark.parametrize("fields,want", [
    (dict(), (LINEARS * 1 + (NORMS + EMB + OUT) * 2) / TOTAL),
    (dict(fp8_allgather=True, fp8_output_layer=True), ((LINEARS + OUT) * 1 + (NORMS + EMB) * 2) / TOTAL),
    (dict(fp8_allgather=False), 2.0),
    (dict(precision="bf16"), 2.0),
])
def test_gather_bytes_of_a_resolved_job(explain, fields, want):
    """The same bytes through the step's own context of a resolved torchtitan FSDP job."""
    from planner.step import _context

    settings, plan, _, _ = explain(**dict(KW, **fields))
    sc = _context(settings, plan)
    pc = count_params(load_model("llama3-8b"))
    got = gather_bytes(sc, np.zeros_like(plan.sharding, dtype=bool), 0.0, fp8_gather_share(pc, settings, plan))
    assert float(got) == pytest.approx(want, rel=1e-12)
