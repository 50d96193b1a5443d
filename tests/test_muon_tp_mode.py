"""Muon's TP mode and q / k / v split (the job's muon_tp_mode and muon_split_qkv, the stack's runs.optimizers muon_tp_mode; step.py [28], memory.py [mu],
layers/common.py [ns] muon_local): duplicated (Megatron-LM @d98e8a64's default, optimizer_config.py l. 282) all-gathers
each TP-split momentum and orthogonalizes the whole matrix on every TP rank; blockwise (Megatron-Core 905c0e386's
default, optimizer_config.py l. 277-278, which Megatron-Bridge pins) passes partition_dim None (muon.py @905c0e386
l. 133) so each TP rank runs newton_schulz on its own shard, no collective. Derived by hand below."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.layers.common import muon_local
from planner.memory import muon_step_temporaries
from planner.plan import resolve
from planner.schema import Job
from planner.step import newton_schulz_gemms
from planner.trainers import load_trainer_config

from test_muon_step import LLAMA, _explain, _ns_seconds


def _flops(rows):
    return sum(2.0 * float(g.M) * float(g.N) * float(g.K) * c for g, c in rows)


def test_shard_flops_against_the_whole_matrix():
    """Llama 3 8B's fc2 (h x f = 4096 x 14336, row-parallel: listed transposed, 14336 x 4096, the partitioned input
    first, [ns]). Duplicated: the whole matrix, m 4096, n 14336: a step 4 m^2 n + 2 m^3 = 2^40 FLOPs (test_muon_step
    test_one_matrix_flops_and_time), 5 steps 5 x 2^40 = 5,497,558,138,880. Blockwise at tp 4: the shard 3584 x 4096,
    m 3584, n 4096: 4 x 3584^2 x 4096 + 2 x 3584^3 = 210,453,397,504 + 92,073,361,408 = 302,526,758,912 a step,
    1,512,633,794,560 for 5: 27.5% of the whole (not 1 / 4: the Gram's m^2 n shrinks as m^2 with m the smaller side).
    At tp 8 the shard 1792 x 4096: 4 x 1792^2 x 4096 + 2 x 1792^3 = 52,613,349,376 + 11,509,170,176 = 64,122,519,552
    a step."""
    fc2 = ((14336, 4096, 1, "split"),)
    whole = muon_local(fc2, np.array([4, 8]), np.array([1, 1]), False)
    assert whole == fc2
    assert _flops(newton_schulz_gemms(*whole[0][:2])) == 5 * 2**40 == 5_497_558_138_880
    (rows, cols, count, group), = muon_local(fc2, np.array([4, 8]), np.array([1, 1]), True)
    assert list(rows) == [3584.0, 1792.0] and (cols, count, group) == (4096, 1, "split")
    f = [_flops(newton_schulz_gemms(r, cols)) for r in (3584.0, 1792.0)]
    assert f == [5 * 302_526_758_912, 5 * 64_122_519_552]
    # vectorized over the candidates: the same figures from the (2,) array
    g = newton_schulz_gemms(rows, cols)
    assert [sum(2.0 * gg.M[i] * gg.N[i] * gg.K[i] * c for gg, c in g) for i in (0, 1)] == f


def test_local_groups():
    """muon_local: a split matrix's rows / tp, an expert's rows / etp, a rep matrix (the router E x h) whole; under
    duplicated every matrix whole. Mixtral-like expert fc1 14336 x 4096 at etp 2: 7168 rows."""
    mats = ((8, 4096, 1, "rep"), (28672, 4096, 1, "split"), (14336, 4096, 8, "expert"))
    out = muon_local(mats, np.array([4]), np.array([2]), True)
    assert out[0] == (8, 4096, 1, "rep")
    assert list(out[1][0]) == [7168.0] and list(out[2][0]) == [7168.0] and out[2][2:] == (8, "expert")


def test_temporaries_no_gather_under_blockwise():
    """memory.py [mu]: Llama 3 8B's fc1 (28672 x 4096, e = 117,440,512). Duplicated: the gathered fp32 shards and
    their cat (8 B) + max(6 e, 4 e + 4 m^2) = 14 e = 1,644,167,168 B (test_muon_step). Blockwise at tp 4: the shard
    7168 x 4096, e = 29,360,128, m 4096: no gather, max(6 e = 176,160,768, 4 e + 4 m^2 = 117,440,512 + 67,108,864 =
    184,549,376) = 184,549,376 B; at tp 1 the whole matrix without the gather: 6 e = 704,643,072 B."""
    fc1 = ((28672, 4096, 1, "split"),)
    assert muon_step_temporaries(fc1) == 1_644_167_168
    local = muon_local(fc1, np.array([4, 1]), np.array([1, 1]), True)
    assert list(muon_step_temporaries(local, gathered=False)) == [184_549_376.0, 704_643_072.0]


def test_step_llama_tp2_blockwise():
    """Llama 3 8B on 8 H100s, tp 2, dp 4, zero1, --muon-tp-mode blockwise: each TP rank's shards, q 2048 x 4096,
    k and v 512 x 4096, the output 2048 x 4096 (a d / 2 its input), fc1 14336 x 4096, fc2 7168 x 4096 (f / 2); each dp
    rank 1 / 4 of the 32 layers' (as test_muon_step test_step_term_llama_tp2_dp4, whole matrices there); no TP
    all-gather (tp_muon_gather_s 0, > 0 under duplicated)."""
    job = dict(optimizer="muon", sharding="zero1", tp=2)
    ns = _ns_seconds(resolve(Job.model_validate({**LLAMA, **job}))[0].hardware)
    layer = ns(2048, 4096) * 2 + ns(512, 4096) * 2 + ns(4096, 14336) + ns(4096, 7168)
    blk = _explain(muon_tp_mode="blockwise", **job)
    dup = _explain(**job)
    assert blk["time"]["muon_ns_s"] == pytest.approx(32 * layer / 4, rel=1e-12)
    assert blk["time"]["muon_ns_s"] < dup["time"]["muon_ns_s"]
    assert blk["time"]["tp_muon_gather_s"] == 0.0 < dup["time"]["tp_muon_gather_s"]
    assert blk["plan"]["muon_tp_mode"] == "blockwise" and "muon_tp_mode" not in dup["plan"]  # the stack's default
    # the peak: the temporaries lose the gather and shrink to the shard's
    assert blk["memory"]["total_bytes"] <= dup["memory"]["total_bytes"]
    # at tp 1 the shard is the whole matrix: the same time
    one = dict(optimizer="muon", sharding="zero1", tp=1)
    assert _explain(muon_tp_mode="blockwise", **one)["time"]["muon_ns_s"] == _explain(**one)["time"]["muon_ns_s"]
    with pytest.raises(PlannerError, match="muon_tp_mode blockwise with optimizer adam"):
        resolve(Job.model_validate({**LLAMA, "muon_tp_mode": "blockwise"}))


def test_stack_defaults():
    """The stack's default (runs.optimizers muon_tp_mode): megatron duplicated (d98e8a64), megatron-bridge blockwise
    (905c0e386): Bridge's Muon at tp 2 prices the shards and no gather; its plan writes duplicated only where asked."""
    job = dict(optimizer="muon", sharding="none", tp=2)
    assert resolve(Job.model_validate({**LLAMA, **job}))[0].muon_tp_mode == "duplicated"
    assert resolve(Job.model_validate({**LLAMA, **job, "stack": "megatron-bridge"}))[0].muon_tp_mode == "blockwise"
    br = _explain(stack="megatron-bridge", **job)
    assert br["time"]["tp_muon_gather_s"] == 0.0 and "muon_tp_mode" not in br["plan"]
    mg = _explain(muon_tp_mode="blockwise", **job)
    assert br["time"]["muon_ns_s"] == mg["time"]["muon_ns_s"]
    bd = _explain(stack="megatron-bridge", muon_tp_mode="duplicated", **job)
    assert bd["plan"]["muon_tp_mode"] == "duplicated" and bd["time"]["tp_muon_gather_s"] > 0.0
    assert bd["time"]["muon_ns_s"] == _explain(**job)["time"]["muon_ns_s"]


SMALL = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
         "--micro-batch-size 1 --global-batch-size 8 --bf16 --tensor-model-parallel-size 2 "
         "--vocab-file ${DATA_PATH}/bpe/vocab.json --merge-file ${DATA_PATH}/bpe/merges.txt")


def _read(tmp_path, extra):
    p = tmp_path / "run.args"
    p.write_text(SMALL + " " + extra + "\n")
    return load_trainer_config(p, gpus=8)


def test_megatron_reader(tmp_path):
    """--muon-tp-mode (arguments.py @d98e8a64 l. 2650-2651, default duplicated): blockwise and distributed are the job's
    muon_tp_mode, duplicated the default (not written), under Adam ignored (listed)."""
    cfg = _read(tmp_path, "--optimizer muon --muon-tp-mode blockwise")
    assert cfg.job["muon_tp_mode"] == "blockwise" and not cfg.unmodelled
    assert "muon_tp_mode" not in _read(tmp_path, "--optimizer muon --muon-tp-mode duplicated").job
    cfg = _read(tmp_path, "--optimizer muon --muon-tp-mode distributed")
    assert cfg.job["muon_tp_mode"] == "distributed" and not cfg.unmodelled
    cfg = _read(tmp_path, "--muon-tp-mode blockwise")
    assert "muon_tp_mode" not in cfg.job and any("--muon-tp-mode" in str(i) for i in cfg.ignored)


def test_megatron_export_round_trip(cli, tmp_path):
    """export --format megatron of a blockwise Muon plan writes --muon-tp-mode blockwise, which reads back as the
    same plan (muon_tp_mode blockwise) with the same step."""
    job = ["--model", "llama3-8b", "--gpus", "8", "--stack", "megatron", "--optimizer", "muon", "--tp", "2",
           "--sharding", "none", "--muon-tp-mode", "blockwise"]
    out = tmp_path / "muon.sh"
    r = cli("export", *job, "--format", "megatron", "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    assert "--muon-tp-mode blockwise" in out.read_text()
    a = json.loads(cli("explain", *job, "--format", "json", "-q").stdout)
    b = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
    assert a["plan"]["muon_tp_mode"] == b["plan"]["muon_tp_mode"] == "blockwise"
    assert b["time"]["muon_ns_s"] == a["time"]["muon_ns_s"]


def test_bridge_reader_and_export(cli, tmp_path):
    """Megatron-Bridge's optimizer.muon_tp_mode (Megatron-Core 905c0e386 optimizer_config.py l. 277-278, default
    blockwise): duplicated is the job's muon_tp_mode, and export writes it back; a mode 905c0e386 does not run is
    refused (distributed is read: tests/test_muon_distributed.py)."""
    from test_bridge_muon import OFF, _launch

    f = _launch(tmp_path, "optimizer.optimizer=muon optimizer.muon_tp_mode=duplicated", OFF)
    assert load_trainer_config(f, hardware="h100-sxm").job["muon_tp_mode"] == "duplicated"
    assert "muon_tp_mode" not in load_trainer_config(_launch(tmp_path, "optimizer.optimizer=muon", OFF),
                                                     hardware="h100-sxm").job
    with pytest.raises(PlannerError, match="optimizer.muon_tp_mode='sharded'"):
        load_trainer_config(_launch(tmp_path, "optimizer.optimizer=muon optimizer.muon_tp_mode=sharded", OFF),
                            hardware="h100-sxm")
    job = ["--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge", "--optimizer", "muon", "--tp", "2",
           "--sharding", "none", "--no-tp-comm-overlap", "--muon-tp-mode", "duplicated"]
    out = tmp_path / "muon.sh"
    r = cli("export", *job, "--format", "megatron-bridge", "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    assert "    optimizer.muon_tp_mode=duplicated \\\n" in out.read_text()
    b = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
    assert b["plan"]["muon_tp_mode"] == "duplicated"


def test_no_split_qkv_llama_tp2_dp4():
    """--muon-no-split-qkv (the job's muon_split_qkv false; arguments.py @d98e8a64 l. 2630-2632): linear_qkv,
    (32 + 2 x 8) x 128 = 6144 x 4096, orthogonalized whole (emerging_optimizers.py l. 407 skips the split). Per step
    FLOPs: whole m 4096, n 6144: 4 m^2 n + 2 m^3 = 4096^2 x 32,768 = 549,755,813,888; split: q 6 x 4096^3 =
    412,316,860,416 and k, v 2 x (4 x 1024^2 x 4096 + 2 x 1024^3) = 38,654,705,664, 450,971,566,080 in all: the whole
    matrix costs more. Llama 3 8B tp 2 dp 4 zero1 duplicated: 32 layers / 4 of ns(4096, 6144) + ns(4096, 4096) (the
    output) + fc1 + fc2; blockwise: the shard 3072 x 4096 (the whole qkv's rows / 2)."""
    assert 4 * 4096**2 * 6144 + 2 * 4096**3 == 549_755_813_888
    assert 6 * 4096**3 + 2 * (4 * 1024**2 * 4096 + 2 * 1024**3) == 450_971_566_080
    job = dict(optimizer="muon", sharding="zero1", tp=2)
    ns = _ns_seconds(resolve(Job.model_validate({**LLAMA, **job}))[0].hardware)
    whole = _explain(muon_split_qkv=False, **job)
    want = 32 * (ns(4096, 6144) + ns(4096, 4096) + ns(4096, 28672) + ns(4096, 14336)) / 4
    assert whole["time"]["muon_ns_s"] == pytest.approx(want, rel=1e-12)
    assert whole["time"]["muon_ns_s"] > _explain(**job)["time"]["muon_ns_s"]
    assert whole["plan"]["muon_split_qkv"] is False and "muon_split_qkv" not in _explain(**job)["plan"]
    blk = _explain(muon_split_qkv=False, muon_tp_mode="blockwise", **job)
    want = 32 * (ns(3072, 4096) + ns(2048, 4096) + ns(4096, 14336) + ns(4096, 7168)) / 4
    assert blk["time"]["muon_ns_s"] == pytest.approx(want, rel=1e-12)
    with pytest.raises(PlannerError, match="muon_split_qkv false with optimizer adam"):
        resolve(Job.model_validate({**LLAMA, "muon_split_qkv": False}))


def test_no_split_qkv_readers_and_exports(cli, tmp_path):
    """--muon-no-split-qkv and Bridge's optimizer.muon_split_qkv=false (OptimizerConfig @905c0e386 l. 263) read as the
    job's muon_split_qkv false (under Adam the Megatron flag is ignored, listed); both exports write it back."""
    assert _read(tmp_path, "--optimizer muon --muon-no-split-qkv").job["muon_split_qkv"] is False
    cfg = _read(tmp_path, "--muon-no-split-qkv")
    assert "muon_split_qkv" not in cfg.job and any("--muon-no-split-qkv" in str(i) for i in cfg.ignored)
    from test_bridge_muon import OFF, _launch

    f = _launch(tmp_path, "optimizer.optimizer=muon optimizer.muon_split_qkv=false", OFF)
    assert load_trainer_config(f, hardware="h100-sxm").job["muon_split_qkv"] is False
    for stack, fmt, line in (("megatron", "megatron", "--muon-no-split-qkv"),
                             ("megatron-bridge", "megatron-bridge", "optimizer.muon_split_qkv=false")):
        job = ["--model", "llama3-8b", "--gpus", "8", "--stack", stack, "--optimizer", "muon", "--sharding", "none",
               "--no-tp-comm-overlap", "--no-muon-split-qkv"]
        out = tmp_path / f"{stack}.sh"
        r = cli("export", *job, "--format", fmt, "-o", out, "-q")
        assert r.exit_code == 0, r.stderr
        assert line in out.read_text()
        b = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
        assert b["plan"]["muon_split_qkv"] is False
