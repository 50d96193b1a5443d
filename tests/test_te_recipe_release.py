"""Which fp8 / fp4 recipes a Transformer Engine release builds, and which its userbuffers carry under TP overlap,
at the boundary releases (planner/te_version.py, recipes and quantizers; start-up rules 107
MEGATRON_TE_RECIPE_RELEASE and 106 MEGATRON_TP_OVERLAP_QUANTIZER).

Read at NVIDIA/TransformerEngine's tags (transformer_engine/common/recipe/__init__.py): MXFP8BlockScaling from v2.0
(l. 165), Float8CurrentScaling (tensorwise) from v2.2 (l. 187; absent at v2.1), Float8BlockScaling from v2.3 (l. 298;
absent at v2.2), NVFP4BlockScaling from v2.8 (l. 381; absent at v2.7). NVIDIA/Megatron-LM @d98e8a64
megatron/core/fp8_utils.py get_fp8_recipe asserts the delayed recipe below TE 2.1.0 (l. 770, 798-804), so mxfp8
starts at 2.1 under Megatron, not 2.0. Userbuffers: v2.0-v2.1 delayed only (v2.0 module/linear.py l. 120-126, v2.1
l. 130-136), v2.2-v2.3 delayed and tensorwise (v2.2 l. 134-140, v2.3 l. 149-155), mxfp8 from v2.4 (ce0b46c4d),
blockwise and nvfp4 never (4329ff84 module/base.py l. 720).

Llama 3 405B, TP 8 with SP, PP 16 on 1,024 GPUs (tests/test_tp_overlap_quantizer.py's L405), megatron stack."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES
from planner.te_version import TE_RECIPE_FIRST, TE_UB_RECIPE_FIRST, recipe_missing, ub_refuses

L405 = dict(model="llama3-405b", gpus=1024, tp=8, pp=16, sequence_parallel=True, stack="megatron", global_batch=1024,
            seq_len=8192, micro_batch=1)
HW = {"tensorwise": "h100-sxm", "blockwise": "h100-sxm", "delayed": "h100-sxm", "mxfp8": "b200", "nvfp4": "b200"}


def _job(recipe, te, overlap, stack="megatron"):
    prec = dict(precision="nvfp4") if recipe == "nvfp4" else dict(precision="fp8", fp8_recipe=recipe)
    return Job(**dict(L405, stack=stack), **prec, hardware=HW[recipe], te_version=te, tp_comm_overlap=overlap)


def test_tables_hold_the_read_releases():
    """The tables as read (module docstring): a changed entry must be re-read at the tags, not edited to pass."""
    assert TE_RECIPE_FIRST == {"tensorwise": (2, 2), "mxfp8": (2, 1), "blockwise": (2, 3), "nvfp4": (2, 8)}
    assert TE_UB_RECIPE_FIRST == {"tensorwise": (2, 2), "mxfp8": (2, 4), "blockwise": None, "nvfp4": None}
    assert recipe_missing("tensorwise", "2.1") and not recipe_missing("tensorwise", "2.2.1")
    assert not recipe_missing("delayed", "1.6") and not recipe_missing("mxfp8", None)
    assert ub_refuses("mxfp8", "2.3") and not ub_refuses("mxfp8", "2.4") and ub_refuses("blockwise", None)
    assert not ub_refuses("delayed", "2.0") and not ub_refuses("mxfp8", None)


@pytest.mark.parametrize("stack", ["megatron", "megatron-bridge"])
@pytest.mark.parametrize("recipe, before, first", [
    ("tensorwise", "2.1", "2.2"),
    ("mxfp8", "2.0", "2.1"),
    ("blockwise", "2.2", "2.3"),
    ("nvfp4", "2.7", "2.8"),
])
def test_recipe_refused_before_its_first_release(stack, recipe, before, first):
    """Rule 107 refuses the recipe at the release before its first one, with or without TP overlap (naming the recipe,
    the release and the first one), and not rule 106 there; at its first release without TP overlap it resolves."""
    for overlap in (False, True):
        with pytest.raises(PlannerError, match="MEGATRON_TE_RECIPE_RELEASE") as e:
            resolve(_job(recipe, before, overlap, stack))
        assert "MEGATRON_TP_OVERLAP_QUANTIZER" not in str(e.value)
        what = "nvfp4" if recipe == "nvfp4" else f"fp8 recipe {recipe}"
        assert f"{what} on Transformer Engine {before} (first built on {first})" in str(e.value)
    resolve(_job(recipe, first, False, stack))


@pytest.mark.parametrize("tp, pp", [(8, 16), (4, 32)])
def test_recipe_refusal_names_what_it_reads_not_the_degrees(tp, pp):
    """Rule 107 reads the recipe and the release alone (_te_recipe_release: no degree): its message names the
    recipe, the run's release and the first release that builds it, and no plan's degrees, the same at tp 8 pp 16
    and tp 4 pp 32. It named the first refused plan's '(tp 8, cp 1, pp 16, ...)' before, as if they were the cause."""
    job = _job("tensorwise", "2.1", False).model_copy(update={"tp": tp, "pp": pp})
    with pytest.raises(PlannerError) as e:
        resolve(job)
    msg = str(e.value)
    assert ("(fp8 recipe tensorwise on Transformer Engine 2.1 (first built on 2.2)): the recipe on that Transformer "
            "Engine release breaks start-up rule MEGATRON_TE_RECIPE_RELEASE of megatron (") in msg
    assert "the plan (" not in msg and f"tp {tp}" not in msg and f"pp {pp}" not in msg


@pytest.mark.parametrize("recipe, refused, passes", [
    ("delayed", None, "1.6"),        # delayed-only userbuffers of v2.0-v2.1 and TE 1.x carry it
    ("tensorwise", None, "2.2"),     # v2.2 linear.py l. 134-140: per-tensor current scaling passes
    ("mxfp8", "2.3", "2.4"),         # v2.1-v2.3 raise NotImplementedError; ce0b46c4d (v2.4) adds the branch
    ("blockwise", "2.3", None),      # from its first release on: no userbuffers branch
    ("nvfp4", "2.8", None),
])
def test_overlap_by_release(recipe, refused, passes):
    """Rule 106 with TP overlap at the boundary releases of each recipe the release builds."""
    if refused is not None:
        with pytest.raises(PlannerError, match="MEGATRON_TP_OVERLAP_QUANTIZER") as e:
            resolve(_job(recipe, refused, True))
        assert "MEGATRON_TE_RECIPE_RELEASE" not in str(e.value)
        resolve(_job(recipe, refused, False))
    if passes is not None:
        resolve(_job(recipe, passes, True))


def test_mxfp8_overlap_at_2_1_is_the_userbuffers_rule():
    """mxfp8 at TE 2.1: Megatron builds the recipe (107 passes without overlap) but v2.1's userbuffers are delayed
    only (linear.py l. 130-136): 106 refuses the overlap."""
    resolve(_job("mxfp8", "2.1", False))
    with pytest.raises(PlannerError, match=f"MEGATRON_TP_OVERLAP_QUANTIZER"):
        resolve(_job("mxfp8", "2.1", True))
    assert CODES["MEGATRON_TE_RECIPE_RELEASE"] == 107


def _at(te):
    """The megatron stack with the job's te_version laid on its defaults, as plan.resolve lays it."""
    from planner.catalog import load_stack

    stack = load_stack("megatron")
    return stack.model_copy(update={"defaults": stack.defaults.model_copy(update={"te_version": te})})


def test_variant_rows_masked_by_release():
    """The variant mask fit applies to the recipe column (startup.variant_broken: VARIANT_RULES lists 106 and 107):
    one row per recipe, tp 8, overlap off then on. At TE 2.1 without overlap only tensorwise, blockwise and nvfp4 are
    refused (107); with overlap mxfp8 too (106: v2.1 userbuffers delayed only). At 2.17.1 (the stack's) without
    overlap none; with overlap blockwise and nvfp4 (106)."""
    from types import SimpleNamespace

    from planner.precisions import FP8, FP8_RECIPE_CODES, NVFP4
    from planner.startup import VARIANT_RULES, _broken_of

    keys = ("MEGATRON_TE_RECIPE_RELEASE", "MEGATRON_TP_OVERLAP_QUANTIZER")
    assert set(keys) <= set(VARIANT_RULES)

    names = ["delayed", "tensorwise", "mxfp8", "blockwise", "nvfp4"]
    f8r = np.array([FP8_RECIPE_CODES[n] for n in names] * 2, dtype=np.int64)
    prec = np.array([NVFP4 if n == "nvfp4" else FP8 for n in names] * 2, dtype=np.int64)
    tpo = np.array([0] * 5 + [1] * 5, dtype=np.int64)
    plan = SimpleNamespace(tp=np.full(10, 8, dtype=np.int64), tpo=tpo, precision=prec, f8r=f8r)

    def refused(te):
        bad = _broken_of(None, _at(te), plan, keys, None)
        return [n for n, b in zip(names, bad[:5]) if b], [n for n, b in zip(names, bad[5:]) if b]

    assert refused("2.1") == (["tensorwise", "blockwise", "nvfp4"], ["tensorwise", "mxfp8", "blockwise", "nvfp4"])
    assert refused("2.3") == (["nvfp4"], ["mxfp8", "blockwise", "nvfp4"])
    assert refused("2.17.1") == ([], ["blockwise", "nvfp4"])


def test_fit_with_a_recipe_the_release_lacks(cli):
    """fit of Llama 3 70B on 64 H100 with --fp8-recipe tensorwise on the megatron stack: at --te-version 2.1 no row
    can run (exit 2 naming rule 107, the release and the first one), at 2.2 every ranked row runs tensorwise."""
    base = ("fit", "--model", "llama3-70b", "--gpus", "64", "--precision", "fp8", "--fp8-recipe", "tensorwise",
            "--hardware", "h100-sxm", "--stack", "megatron", "--format", "json", "--top", "5")
    r = cli(*base, "--te-version", "2.1")
    assert r.exit_code == 2
    assert "MEGATRON_TE_RECIPE_RELEASE" in r.stderr and "tensorwise on Transformer Engine 2.1 (first built on 2.2)" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli(*base, "--te-version", "2.2")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    rows = d["rows"] if isinstance(d, dict) else d
    assert rows and {x["plan"]["fp8_recipe"] for x in rows} == {"tensorwise"}
