"""NCCL_PROTO, the run's environment variable (job field nccl_proto, --nccl-proto): read from a launch script's
environment as NCCL_ALGO is (tests/test_nccl_algo.py), parsed as NCCL parses it (NVIDIA/nccl @5067397c
src/graph/tuning.cc parseList l. 36-119, NCCL_PROTO l. 442-457: `;` entries, an optional function prefix, `^` to
exclude, case-insensitive names LL, LL128, Simple; src/enqueue.cc l. 2052-2064: a function left no protocol fails), and
every collective priced under the protocols it leaves it (comm.nccl_proto_protocols -> step.Collectives ->
comm.auto_collective_times protocols). Megatron-LM's CI exports NCCL_PROTO=simple where the launcher has not
(tests/functional_tests/shell_test_utils/_run_training.sh @d98e8a64 l. 58)."""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner.catalog import load_hardware
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.step import Collectives, _compute_pass, amax_group, fp8_amax_comm, step_time
from planner.trainers import load_trainer_config

AR, RS, AG, A2A, P2P = comm.ALL_REDUCE, comm.REDUCE_SCATTER, comm.ALL_GATHER, comm.ALL_TO_ALL, comm.SEND_RECV
LL, LL128, SIMPLE = comm.LL, comm.LL128, comm.SIMPLE
H100 = comm.comm_params(load_hardware("h100-sxm"))


def test_protocols_as_nccl_parses_the_variable():
    """By hand from parseList: Simple -> Simple for the three collectives; ^LL -> LL128 and Simple (LL128 named by
    the exclusion: enabled whatever the GPU, l. 442-447); `Simple;allreduce:LL,ll128` -> the all-reduce LL and LL128,
    the others Simple; `allreduce:Simple` -> the all-reduce Simple, the others NCCL's default (None); `^` alone ->
    every protocol. The all-to-all and send/recv keep NCCL's default (point-to-point: not NCCL_PROTO's)."""
    got = comm.nccl_proto_protocols("Simple")
    assert got == ((SIMPLE,), (SIMPLE,), (SIMPLE,), None, None)
    assert got[A2A] is None and got[P2P] is None
    got = comm.nccl_proto_protocols("^LL")
    assert (got[AR], got[RS], got[AG]) == ((LL128, SIMPLE),) * 3
    got = comm.nccl_proto_protocols("Simple;allreduce:LL,ll128")
    assert (got[AR], got[RS], got[AG]) == ((LL, LL128), (SIMPLE,), (SIMPLE,))
    got = comm.nccl_proto_protocols("allreduce:Simple")
    assert (got[AR], got[RS], got[AG]) == ((SIMPLE,), None, None)
    assert comm.nccl_proto_protocols("^")[AR] == (LL, LL128, SIMPLE)
    assert comm.nccl_proto_protocols("simple")[AR] == (SIMPLE,)  # case-insensitive, as NCCL's strcasecmp


@pytest.mark.parametrize("text, says", [
    ("LL64", "unknown protocol ll64"),
    ("^LL,LL128,Simple", "leaves all-gather no protocol"),
    ("Simple;LL", "every entry but the first needs a function prefix"),
    ("send:LL", "unknown function 'send'"),
    ("^^LL", r"unknown protocol \^ll"),  # one ^ only (parseList: elemList++ once)
    ("Simple;reducescatter:", "leaves reduce-scatter no protocol"),
])
def test_values_nccl_refuses_are_refused(text, says):
    with pytest.raises(PlannerError, match=says):
        comm.nccl_proto_protocols(text)
    with pytest.raises(PlannerError, match="nccl_proto: NCCL_PROTO="):
        resolve(Job(model="llama3-8b", gpus=8, global_batch=16, seq_len=2048, nccl_proto=text))


def test_schema_pattern_refuses_spaces_and_quotes():
    from pydantic import ValidationError

    for bad in ("LL, Simple", "'Simple'", ""):
        with pytest.raises(ValidationError):
            Job(model="llama3-8b", gpus=8, nccl_proto=bad)


def test_12_byte_all_reduce_over_8_nvlink_ranks_simple_vs_default():
    """The 12 B all-reduce of tests/test_comm_protocols.py over one 8-H100 node, through the search's entry point with
    the run's NCCL_PROTO: by default NCCL's ring LL, 6.6 us + 14 x 0.6 us = 15.0 us + 2 x 7/8 x 12 B / 87.7 GB/s
    (tuning.cc @v2.20.3-1 l. 57, 67, 181); under NCCL_PROTO=Simple the Simple model's pick, NVLS: 23 us + 12 B / NVLS
    algbw (480 / 1.75 = 274.29 GB/s) = 23.0000437 us. ^Simple leaves LL and LL128: the ring LL again; LL128 alone the
    ring LL128, 14 us + 14 x 1.9 us = 40.6 us + 21 B / (0.92 x 370 GB/s)."""
    def t(text):
        protos = comm.nccl_proto_protocols(text)[AR] if text else None
        return float(comm.auto_collective_times(AR, [12.0], [8], [1], H100, 8, comm.AUTO_CANDIDATES, protos)[0][0])

    default = 15.0e-6 + 21.0 / 87.7e9
    assert t(None) == pytest.approx(default, rel=1e-12)
    assert t(None) == pytest.approx(15.0002e-6, abs=1e-10)
    simple = 23e-6 + 12.0 / H100.nvls_algbw
    assert H100.nvls_algbw == pytest.approx(480e9 / 1.75, rel=1e-12)
    assert t("Simple") == pytest.approx(simple, rel=1e-12)
    assert t("Simple") == pytest.approx(23.0000437e-6, abs=1e-12)
    assert t("^Simple") == pytest.approx(default, rel=1e-12)
    assert t("LL128") == pytest.approx(31.5e-6 + 24.0 / (370e9 * 0.92 * 7.0 / 9.0), rel=1e-12)
    # the memo keeps each protocol set's figures apart (keyed by the mask)
    assert t(None) == pytest.approx(default, rel=1e-12) and t("Simple") == pytest.approx(simple, rel=1e-12)


def test_across_nodes_simple_whatever_the_variable():
    """Over 2 nodes (16 ranks) the model prices Simple alone (comm.py [19]). By default NVLS-tree (Simple), 43 us + 12 B
    / NVLS algbw. NCCL_PROTO=LL leaves NVLS-tree (Simple only, tuning.cc l. 173) out, and NCCL would run a ring or tree
    under LL; the model prices the ring under Simple all the same: 2 (16 - 1) = 30 steps at the link's 4.225 us =
    126.75 us (+ 22.5 B at the network's bandwidth, below 1 ns). The plan's assumed lines say so; under Simple none."""
    def t(protos):
        return float(comm.auto_collective_times(AR, [12.0], [16], [1], H100, 16, comm.AUTO_CANDIDATES, protos)[0][0])

    assert t(None) == pytest.approx(43e-6 + 12.0 / H100.nvls_algbw, rel=1e-12)
    assert t((LL,)) == pytest.approx(126.75e-6, abs=1e-9)
    s, p, _ = resolve(Job(model="llama3-8b", gpus=16, global_batch=32, seq_len=2048, nccl_proto="LL"))
    assert any(a.startswith("nccl_proto=LL: leaves some collectives no Simple") for a in s.env_assumed)
    s, p, _ = resolve(Job(model="llama3-8b", gpus=16, global_batch=32, seq_len=2048, nccl_proto="Simple"))
    assert not any("nccl_proto" in a for a in s.env_assumed)


# A small GPT under delayed scaling on one 8-H100 node, tp 2 x dp 4 (the amax group TP x DP: 8 ranks, stride 1)
SCRIPT = ("#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n{env}"
          "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\\n"
          "    --tensor-model-parallel-size 2 --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
          "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
          "--fp8-format hybrid --fp8-recipe delayed --transformer-impl transformer_engine\n")


def _read(tmp_path, env: str):
    p = tmp_path / "run.sh"
    p.write_text(SCRIPT.format(env=env))
    return load_trainer_config(str(p), gpus=8)


def test_megatron_script_prices_the_amax_all_reduce_at_simples_time(tmp_path):
    """`export NCCL_PROTO=Simple` in the launch script: the job's nccl_proto (an assumed line says so), and delayed
    scaling's amax all-reduces (step.py [34]: 4 layers x 4 fp8 GEMMs = 16, forward 16 x 3 x 4 B = 192 B, backward
    16 x 2 x 4 B = 128 B, over the 8 ranks of TP x DP) priced under Simple: NVLS, (23 us + 192 B / 274.29 GB/s) +
    (23 us + 128 B / 274.29 GB/s) = 46.0012 us a micro-batch, where NCCL's default set gives the ring LL,
    (15.0 us + 1.75 x 192 B / 87.7 GB/s) + (15.0 us + 1.75 x 128 B / 87.7 GB/s) = 30.0064 us; x 2 micro-batches
    (global 8 / dp 4) in tp_fp8_amax_s."""
    cfg = _read(tmp_path, "export NCCL_PROTO=Simple\n")
    assert cfg.job["nccl_proto"] == "Simple"
    assert any("nccl_proto" in str(a) and "NCCL_PROTO" in str(a) for a in cfg.assumed)
    base = _read(tmp_path, "")
    assert "nccl_proto" not in base.job

    def amax(job):
        s, p, _ = resolve(Job.model_validate(job))
        sc, _, _ = _compute_pass(s, p)
        coll = Collectives(sc)
        size, stride = amax_group(sc, coll)
        assert (int(size), int(stride), int(p.tp), int(p.dp), int(p.microbatches)) == (8, 1, 2, 4, 2)
        _, extra = step_time(s, p)
        return float(fp8_amax_comm(sc, coll)["last"]), float(extra["tp_fp8_amax_s"]), s, p

    simple_mb = (23e-6 + 192.0 / H100.nvls_algbw) + (23e-6 + 128.0 / H100.nvls_algbw)
    ll_mb = (15.0e-6 + 1.75 * 192.0 / 87.7e9) + (15.0e-6 + 1.75 * 128.0 / 87.7e9)
    assert simple_mb == pytest.approx(46.0012e-6, abs=1e-10) and ll_mb == pytest.approx(30.0064e-6, abs=1e-10)
    mb, total, s, p = amax(cfg.job)
    assert mb == pytest.approx(simple_mb, rel=1e-12) and total == pytest.approx(2 * simple_mb, rel=1e-12)
    mb0, total0, _, _ = amax(base.job)
    assert mb0 == pytest.approx(ll_mb, rel=1e-12) and total0 == pytest.approx(2 * ll_mb, rel=1e-12)
    # the plan carries it, the Megatron export writes it back, and the file reads back as the same plan
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    row = to_json(s, p, evaluate(s, p))
    assert row["plan"]["nccl_proto"] == "Simple"
    text, _ = export_plan(row["plan"], "megatron")
    assert "export NCCL_PROTO=Simple" in text.splitlines()
    check_readback(row, "megatron", text)


@pytest.mark.parametrize("env, want", [
    ("NCCL_PROTO=Simple\n", None),  # assigned, not exported: no child sees it
    ("NCCL_PROTO=^LL128\nexport NCCL_PROTO\n", "^LL128"),
    ("export NCCL_PROTO=\"${NCCL_PROTO:-simple}\"\n", "simple"),  # Megatron-LM's CI line (_run_training.sh l. 58)
    ("export NCCL_PROTO=Simple\nunset NCCL_PROTO\n", None),
])
def test_megatron_reader_reads_the_launch_environment(tmp_path, env, want):
    cfg = _read(tmp_path, env)
    assert cfg.job.get("nccl_proto") == want


def test_bad_value_in_a_script_is_refused_naming_the_field(tmp_path):
    cfg = _read(tmp_path, "export NCCL_PROTO=LL64\n")
    with pytest.raises(PlannerError, match="nccl_proto: NCCL_PROTO=LL64: unknown protocol ll64") as e:
        resolve(Job.model_validate(cfg.job))
    assert "LL, LL128, Simple" in e.value.message


def test_cli_option_and_error(cli):
    """--nccl-proto: the plan's collectives priced under it (explain's JSON carries it); a bad value exits 2 with
    error / hint, no traceback."""
    import json

    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--pp", "1", "--cp", "1",
            "--global-batch", "32", "--micro-batch", "1", "--seq-len", "4096", "--precision", "fp8",
            "--fp8-recipe", "delayed", "--stack", "megatron", "--format", "json"]
    r = cli(*base, "--nccl-proto", "Simple")
    assert r.exit_code == 0, r.output
    js = json.loads(r.stdout)
    assert js["plan"]["nccl_proto"] == "Simple"
    # tests/test_fp8_amax.py: 368.07 us a step under Simple (NVLS), 240.41 us under NCCL's default set (ring LL)
    assert js["time"]["tp_fp8_amax_s"] == pytest.approx(368.07e-6, rel=1e-4)
    r = cli(*base, "--nccl-proto", "LL64")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "error:" in r.output and "unknown protocol ll64" in r.output and "hint:" in r.output


@pytest.mark.parametrize("stack", ["megatron", "megatron-deepspeed", "megatron-bridge"])
def test_exported_launch_scripts_read_back_the_value(tmp_path, stack):
    """Each launch-script export writes `export NCCL_PROTO=...` (as priced), and its reader reads it back into the job
    (megatron.read_nccl_proto): the job field, not check_readback's fill-in of what a file cannot hold."""
    from planner.trainers.export import export_plan

    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, global_batch=16, seq_len=2048, stack=stack, tp=2, pp=1, cp=1,
                          micro_batch=1, nccl_proto="^LL128"))
    row = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(row["plan"], stack)
    assert "export NCCL_PROTO=^LL128" in text.splitlines()
    path = tmp_path / "run.sh"
    path.write_text(text)
    cfg = load_trainer_config(str(path), fmt=stack, gpus=8)
    assert cfg.job["nccl_proto"] == "^LL128"


def test_other_formats_note_it():
    from planner.trainers.export import export_plan

    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, global_batch=16, seq_len=2048, stack="torchtitan",
                          sharding="fsdp", nccl_proto="Simple"))
    _, notes = export_plan(to_json(s, p, evaluate(s, p))["plan"], "torchtitan")
    assert any(n.startswith("nccl_proto Simple: NCCL reads it from the environment; launch with NCCL_PROTO=Simple")
               for n in notes)
