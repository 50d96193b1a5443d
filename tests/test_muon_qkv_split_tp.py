"""Muon's q / k / v split where tp does not divide the KV heads (issue 21, muonleft; layers/attention.py
Attention.muon_matrices, start-up rule MUON_QKV_SPLIT_TP), derived by hand from the code:

- Megatron-LM @d98e8a64 megatron/core/optimizer/__init__.py l. 790-803 tags a rank's linear_qkv.weight for the split
  only where its rows are a whole number of query groups: param.shape[0] % sum(qkv_split_shapes) == 0, with the split
  shapes [a / k x d, d, d] (emerging_optimizers.py l. 150-162). The TP shard has (a + 2 k) d / tp rows, a group
  (a / k + 2) d: divisible exactly where tp divides k. At tp > k (attention.py l. 353-364: one group over tp / k ranks)
  the split is skipped and TensorParallelMuon.orthogonalize (l. 438-439) runs the momentum as one tensor: under the
  duplicated mode gathered whole over TP, under blockwise the rank's own shard.
- Megatron-Core 905c0e386 (Bridge's pin) tags every linear_qkv (muon.py l. 249-250) and views the shard as
  rows // group rows = 0 groups (l. 144-147), which raises: the megatron-bridge stack refuses it (rule code 94).

Llama 3 8B: a 32, k 8, d 128, h 4096: linear_qkv (32 + 16) x 128 = 6,144 rows, one group (4 + 2) x 128 = 768 rows.
At tp 16 a rank holds 6,144 / 16 = 384 rows, half a group: 384 % 768 != 0, the split skipped."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner import catalog
from planner.errors import PlannerError
from planner.layers import layer_list
from planner.layers.common import muon_local
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES

from test_muon_step import LLAMA, _explain, _ns_seconds


def _attn_kind():
    return layer_list(catalog.load_model("llama3-8b")).kinds[0]


def test_matrices_by_tp():
    """tp 1, 2, 4, 8 divide k 8: q 4096 x 4096 (count 1), k and v 1024 x 4096 (count 2); tp 16: linear_qkv whole,
    6144 x 4096 (count 1), the k / v entry count 0. Blockwise (muon_local): at tp 8 q 512, k / v 128 rows each (one
    head, d); at tp 16 the shard 384 rows whole (before: q 256 and k / v 64 rows, less than a head, which no rank
    orthogonalizes)."""
    tp = np.array([1, 2, 4, 8, 16], dtype=np.int64)
    q, kv, o = _attn_kind().mixer.muon_matrices(tp)
    assert list(q[0]) == [4096.0] * 4 + [6144.0] and list(q[2]) == [1.0] * 5
    assert kv[0] == 1024 and list(kv[2]) == [2.0] * 4 + [0.0]
    assert o == (4096, 4096, 1, "split")
    (qr, _, _, _), (kr, _, kc, _), _ = muon_local((q, kv, o), tp, np.ones_like(tp), True)
    assert list(qr) == [4096.0, 2048.0, 1024.0, 512.0, 384.0]
    assert list(kr[:4]) == [1024.0, 512.0, 256.0, 128.0] and kc[4] == 0.0
    # the layer's elements at tp 16 are still linear_qkv's and linear_proj's: 6144 x 4096 + 4096 x 4096
    assert q[0][4] * 4096 * q[2][4] + kv[0] * 4096 * kv[2][4] + 4096 * 4096 == 6144 * 4096 + 4096 * 4096
    # no tp: the split as the module lists it (every kind's elements test, test_muon_step)
    assert _attn_kind().mixer.muon_matrices() == ((4096, 4096, 1, "split"), (1024, 4096, 2, "split"),
                                                  (4096, 4096, 1, "split"))


@pytest.mark.parametrize("mode", ["duplicated", "blockwise"])
def test_step_llama_tp16(mode):
    """Llama 3 8B on 16 H100s, tp 16, dp 1, sharding none (every rank steps the 32 layers' matrices): duplicated,
    the whole matrices, linear_qkv unsplit: 32 x (ns(4096, 6144) + ns(4096, 4096) + ns(4096, 28672) + ns(4096,
    14336)); blockwise, each rank's shard: 32 x (ns(384, 4096) + ns(256, 4096) + ns(1792, 4096) + ns(896, 4096))
    (fc1 28,672 / 16, fc2 14,336 / 16, linear_proj 4,096 / 16, transposed: [ns])."""
    job = dict(gpus=16, tp=16, sharding="none", optimizer="muon", tp_comm_overlap=False)
    ns = _ns_seconds(resolve(Job.model_validate({**LLAMA, **job}))[0].hardware)
    if mode == "duplicated":
        want = 32 * (ns(4096, 6144) + ns(4096, 4096) + ns(4096, 28672) + ns(4096, 14336))
        split = 32 * (ns(4096, 4096) + 2 * ns(1024, 4096) + ns(4096, 4096) + ns(4096, 28672) + ns(4096, 14336))
    else:
        want = 32 * (ns(384, 4096) + ns(256, 4096) + ns(1792, 4096) + ns(896, 4096))
        split = 32 * (ns(256, 4096) + 2 * ns(64, 4096) + ns(256, 4096) + ns(1792, 4096) + ns(896, 4096))
    got = _explain(muon_tp_mode=mode, **job)["time"]["muon_ns_s"]
    assert got == pytest.approx(want, rel=1e-12)
    assert got != pytest.approx(split, rel=1e-6)  # the old pricing (the split on a partial group)
    # --muon-no-split-qkv prices the same there: the split is skipped either way
    assert _explain(muon_tp_mode=mode, muon_split_qkv=False, **job)["time"]["muon_ns_s"] == got


def test_tp8_keeps_the_split():
    """At tp 8 (divides k 8) the split stays: duplicated 32 x (ns(4096, 4096) + 2 ns(1024, 4096) + ns(4096, 4096)
    + fc1 + fc2), more than linear_qkv whole would cost? No: the split costs less (test_muon_tp_mode
    test_no_split_qkv_llama_tp2_dp4), and the plan prices it."""
    job = dict(tp=8, sharding="none", optimizer="muon", tp_comm_overlap=False)
    ns = _ns_seconds(resolve(Job.model_validate({**LLAMA, **job}))[0].hardware)
    want = 32 * (ns(4096, 4096) + 2 * ns(1024, 4096) + ns(4096, 4096) + ns(4096, 28672) + ns(4096, 14336))
    assert _explain(**job)["time"]["muon_ns_s"] == pytest.approx(want, rel=1e-12)


def test_bridge_refuses_and_fit_masks(cli):
    """megatron-bridge (runs.optimizers muon_qkv_split_raises): tp 16 with the split refused by rule 94, accepted
    with --no-muon-split-qkv or at tp 8; the megatron stack prices it (skips the split). fit on megatron-bridge with
    Muon ranks no row whose tp does not divide 8."""
    assert CODES["MUON_QKV_SPLIT_TP"] == 94
    job = dict(model="llama3-8b", hardware="h100-sxm", gpus=16, tp=16, sharding="none", optimizer="muon",
               stack="megatron-bridge", global_batch=64, micro_batch=1, seq_len=8192, tp_comm_overlap=False)
    with pytest.raises(PlannerError, match="MUON_QKV_SPLIT_TP"):
        resolve(Job.model_validate(job))
    resolve(Job.model_validate({**job, "muon_split_qkv": False}))
    resolve(Job.model_validate({**job, "tp": 8}))
    resolve(Job.model_validate({**job, "stack": "megatron"}))
    resolve(Job.model_validate({**job, "optimizer": "adam"}))  # no Muon: no split
    # fit: qwen3-30b-a3b (4 KV heads) at tp 8 on megatron-bridge ranks nothing (every row breaks rule 94), on
    # megatron it ranks rows (the split skipped, priced); at tp 4 Bridge ranks rows
    fit = ["fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--optimizer", "muon", "--format", "json", "-q"]
    r = cli(*fit, "--tp", "8", "--stack", "megatron-bridge")
    assert r.exit_code != 0 and "MUON_QKV_SPLIT_TP" in r.stderr + r.stdout
    for extra in (["--tp", "8", "--stack", "megatron"], ["--tp", "4", "--stack", "megatron-bridge"]):
        r = cli(*fit, *extra)
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)
