"""DeepSpeed ZeRO-3's gathered working set (planner/memory.py [z3]), derived by hand from
microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/partitioned_param_coordinator.py
(fetch_sub_module l. 285-418: the module's own parameters, then a prefetch while the prefetched
count is below min(max_live - gathered, prefetch_bucket); __params_to_release l. 523-554: a module
is kept where the trace reuses it within max_reuse_distance parameters) and stage3.py (l. 537-540
the contiguous IPG buffer of reduce_bucket_size elements; l. 1258-1290 a gradient larger than the
bucket stays its own tensor until the next gradient's hook reduce-scatters it).

Toy layer, four modules in forward order q 3, p 1, u 4, d 4 (parameters), settings L (max live) 10,
P (prefetch bucket) 1, R (reuse distance) 10, B (reduce bucket) 2.

Under full recompute the trace of one layer is the re-run forward q p u d, then the backward d u p q,
then the next layer's. Kept from the re-run to the backward: u (2 x the 4 after it = 8 < 10) and d
(0 < 10); not q (2 x 9) nor p (2 x 8). At each module: gathered = itself + kept + the prefetch of the
next not-gathered modules (each taken while the count so far < min(L - gathered, P) = 1: one module);
in the backward + its gradient + the previous backward module's where above B:
  re-run q: 3 + p 1                               = 4
  re-run p: 1 + u 4                               = 5
  re-run u: 4 + d 4                               = 8
  re-run d: 4 + kept u 4 + (backward u kept: 0) p 1 = 9
  back d:   4 + u 4 + p 1 = 9, gradients d 4 + q 3 (the layer above's, 3 > 2) = 7   -> 16, the peak
  back u:   4 + p 1 = 5, gradients 4 + d 4 = 8                                     -> 13
  back p:   1 + q 3 = 4, gradients 1 + u 4 = 5                                     -> 9
  back q:   3 + next layer's q 3 = 6, gradients 3 + (p 1 <= 2: in the bucket) = 3   -> 9
Without recompute (backward only, nothing kept): back d 4 + u 4 = 8, gradients 4 + 3 = 7 -> 15,
the peak; back u 5 + 8 = 13; back p 4 + 5 = 9; back q 3 + the next layer's d 4 = 7, + 3 = 10.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from planner.memory import FSDP_TERMS, zero3_layer_peak

TOY = dict(stage3_max_live_parameters=10, stage3_prefetch_bucket_size=1, stage3_max_reuse_distance=10,
           reduce_bucket_size=2, stage3_param_persistence_threshold=0)
MODS = [np.float64(3), np.float64(1), np.float64(4), np.float64(4)]


def test_toy_layer_full_recompute():
    g, d = zero3_layer_peak(MODS, True, TOY)
    assert (float(g), float(d)) == (9.0, 7.0)


def test_toy_layer_no_recompute():
    g, d = zero3_layer_peak(MODS, False, TOY)
    assert (float(g), float(d)) == (8.0, 7.0)


def test_toy_no_prefetch_and_no_reuse():
    """prefetch bucket 0 and reuse distance 0: each module alone (fetch_sub_module prefetches nothing
    with a 0 budget; __params_to_release keeps nothing): back u 4 + gradients 4 + d 4 = 12."""
    g, d = zero3_layer_peak(MODS, True, {**TOY, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0})
    assert (float(g), float(d)) == (4.0, 8.0)


# GPT-3 175B (h = 12,288, d_ff = 4h, biases, LayerNorm, tied output), tp 1: a layer's modules qkv 3h^2,
# proj h^2, fc1 = fc2 4h^2. DeepSpeed's defaults: L 1e9, P 5e7, R 1e9, B 5e8. Full recompute: only fc2 is
# kept from its re-run (2 x 4h^2 = 1.21e9 >= R for fc1). Back fc1: fc1 + the prefetched proj, gradients
# fc1 + fc2 (fc2 > B): 5 h^2 + 8 h^2 = 13 h^2, the peak (back fc2: fc2 + fc1 prefetched 8 h^2, gradients
# fc2 + qkv of the layer above, 453M < B: 4 h^2 -> 12 h^2). Persistent: 13 h a layer (biases 3h + h + 4h + h,
# two LayerNorms 2 x 2h; the widest, 4h = 49,152, within 1e5). IPG buffer: 2 B x 5e8.
H2 = 12288**2
PERSIST = 2 * 13 * 12288 * 96


def _gpt3(explain, **kw):
    job = dict(model="gpt3-175b", gpus=64, stack="megatron-deepspeed", sharding="fsdp", recompute="full",
               micro_batch=1, global_batch=64, hardware="a100-sxm-80gb")
    return explain(**{**job, **kw})[3]["memory"]["terms"]


def _z3(t):
    """The ZeRO-3 terms (working set, gradients awaiting their reduce-scatter, IPG bucket, persistent), and that
    FSDP's layer-unit terms are empty (DeepSpeed gathers per submodule instead)."""
    assert [t[k] for k in FSDP_TERMS if not k.startswith("zero3_")] == [0.0] * 6
    return t["zero3_working_set"], t["zero3_unreduced_grads"], t["zero3_ipg_bucket"], t["zero3_persistent"]


def test_gpt3_defaults(explain):
    """Back fc1: fc1 4 h^2 + the prefetched proj h^2 gathered, the gradients of fc1 and fc2 8 h^2."""
    assert _z3(_gpt3(explain)) == pytest.approx((2 * 5 * H2, 2 * 8 * H2, 2 * 5e8, PERSIST), rel=1e-12)


def test_gpt3_reduce_bucket_from_the_job(explain):
    """reduce_bucket_size 1e8 (job field deepspeed_zero3): the IPG buffer 2 B x 1e8, and qkv's gradient
    (3 h^2 = 4.5e8 > 1e8) now waits beside fc2's: back fc2 8 h^2 gathered + (4 + 3) h^2 = 15 h^2, the peak."""
    t = _gpt3(explain, deepspeed_zero3={"reduce_bucket_size": 100_000_000})
    assert _z3(t) == pytest.approx((2 * 8 * H2, 2 * 7 * H2, 2 * 1e8, PERSIST), rel=1e-12)


def test_gpt3_persistence_threshold_zero(explain):
    """stage3_param_persistence_threshold 0: no parameter is persistent (the biases and norms gathered
    with their modules, not priced apart)."""
    t = _gpt3(explain, deepspeed_zero3={"stage3_param_persistence_threshold": 0})
    assert _z3(t) == pytest.approx((2 * 5 * H2, 2 * 8 * H2, 2 * 5e8, 0.0), rel=1e-12)


def test_deepspeed_zero3_refused_on_a_stack_without_it(explain):
    from planner.errors import PlannerError
    with pytest.raises(PlannerError, match="deepspeed_zero3"):
        explain(model="gpt3-175b", gpus=64, stack="torchtitan", sharding="fsdp", micro_batch=1, global_batch=64,
                deepspeed_zero3={"reduce_bucket_size": 1})


def test_530b_record():
    """Narayanan et al. 2021 Table 2, ZeRO-3 529.6B on 640 A100s (h 20,480, 105 layers, tp 1, full
    recompute): back fc1, fc1 gathered (4h^2; proj is smaller than max-live but fc1 is not, so nothing is
    prefetched) and the gradients of fc1 and fc2: 12 h^2 x 2 B; + the IPG buffer 2 B x 5e8 + persistent
    2 B x 13 h x 105 = 11,122,240,000 B (10.36 GiB; FSDP's layer units priced 37.5 GiB). The gate: 64.2 GiB
    of the A100's 79.2 (81.0%); at 560 GPUs (the run the paper says ran out of memory) 65.9 GiB."""
    from planner import validate as V
    from planner.explain import evaluate, to_json

    path = Path(__file__).parent / "data" / "published_runs.yaml"
    rec = next(r for r in V.load_runs(path) if r.id == "narayanan2021-t2-zero3-529.6B-640gpu")
    h2 = 20480**2
    with tempfile.TemporaryDirectory() as d:
        s, p = V.prepare_record(rec, V.new_row(rec), Path(d), path.parent, str(path))
        m = to_json(s, p, evaluate(s, p))["memory"]
    assert _z3(m["terms"]) == pytest.approx((2 * 4 * h2, 2 * 8 * h2, 2 * 5e8, 2 * 13 * 20480 * 105), rel=1e-12)
    assert sum(m["terms"][k] for k in FSDP_TERMS) == 11_122_240_000
    assert m["total_bytes"] / 2**30 == pytest.approx(64.17, abs=0.01)


def test_explain_names_each_zero3_term(cli):
    """explain's table has a row for each ZeRO-3 term (2 B x 5 h^2 = 1.41 GiB gathered, 2 B x 8 h^2 = 2.25 GiB of
    gradients, the 2 B x 5e8 = 0.93 GiB bucket, 2 B x 13 h x 96 = 0.03 GiB persistent) and none for FSDP's layer
    units, which the plan does not hold; a ZeRO-1 plan shows no FSDP or ZeRO-3 row at all."""
    job = ["--model", "gpt3-175b", "--gpus", "64", "--stack", "megatron-deepspeed", "--recompute", "full",
           "--micro-batch", "1", "--global-batch", "64", "--hardware", "a100-sxm-80gb"]
    r = cli("explain", *job, "--sharding", "fsdp")
    assert r.exit_code == 0, r.output
    rows = {ln.split("│")[1].strip(): ln.split("│")[3].strip() for ln in r.stdout.splitlines() if ln.count("│") == 4}
    assert rows["ZeRO-3 working set (gathered, prefetched)"] == f"{2 * 5 * H2 / 2**30:.2f}" == "1.41"
    assert rows["ZeRO-3 gradients awaiting reduce-scatter"] == f"{2 * 8 * H2 / 2**30:.2f}" == "2.25"
    assert rows["ZeRO-3 IPG gradient bucket"] == "0.93"
    assert rows["ZeRO-3 persistent parameters"] == f"{PERSIST / 2**30:.2f}" == "0.03"
    assert not any(k.startswith("FSDP ") for k in rows)
    z1 = cli("explain", *job, "--sharding", "zero1")
    assert z1.exit_code == 0, z1.output
    assert "ZeRO-3 " not in z1.stdout and "FSDP " not in z1.stdout
