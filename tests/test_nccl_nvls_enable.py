"""NCCL_NVLS_ENABLE, the run's environment variable (job field nccl_nvls_enable, --nccl-nvls-enable; comm.py [22]):
NVIDIA/nccl v2.20.3-1 src/transport/nvls.cc l. 230-258 (0: nvlsSupport 0; 2, the default: the GPU's multicast
support; other values forced on), src/enqueue.cc l. 1466 (NVLS and NVLS_TREE skipped without nvlsSupport). Read from a
launch script's export (megatron.read_nccl_nvls_enable) and from the Megatron-LM CI corpus' environment
(megatron_ci.nccl_env; the CI's _run_training.sh @d98e8a64 l. 61 exports 0), both through
megatron.nccl_nvls_enable_value: a value other than 0, 1, 2 as NCCL reads it (C's strtoll, src/misc/param.cc).
Hand-derived cases below."""

from __future__ import annotations

import numpy as np
import pytest

from planner import comm
from planner.catalog import load_hardware
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.step import step_time
from planner.trainers import load_trainer_config
from planner.trainers.megatron import nccl_int, nccl_nvls_enable_value

AR = comm.ALL_REDUCE
H100_HW = load_hardware("h100-sxm")
S = 2.0 ** 30


def _params(nvls_enable):
    return comm.comm_params(H100_HW, nvls=comm.nvls_enabled(nvls_enable, H100_HW.nvls))


def _auto(params, n):
    t, latency, bandwidth, link = comm.auto_collective_times(AR, [S], [n], [1], params, n, comm.AUTO_CANDIDATES)
    _, _, algo = comm.group_collective(AR, S, n, 1, params, comm.AUTO, job_gpus=n)
    return float(t[0]), float(latency[0]), float(bandwidth[0]), comm.ALGO_NAMES[int(algo)]


def test_nvls_enabled_as_nccl_reads_the_variable():
    """0 off whatever the hardware; 2 (NCCL's default) and unset the hardware's flag; 1 forced (on NVLS hardware)."""
    assert [comm.nvls_enabled(v, True) for v in (None, 0, 1, 2)] == [True, False, True, True]
    assert [comm.nvls_enabled(v, False) for v in (None, 0, 2)] == [False, False, False]
    assert _params(0).nvls is False and _params(None).nvls is True and _params(2).nvls is True


def test_one_node_all_reduce_by_hand():
    """1 GiB all-reduce over the 8 H100 of one node. NCCL's default: NVLS, S / (NVLS_ALGBW_PER_RING_BUSBW x 370 GB/s)
    + 23 us = 2^30 / 274.29e9 + 23e-6 = 3.9377 ms. NCCL_NVLS_ENABLE=0: NVLS is no candidate, the ring wins (the tree's
    28 us hops and 0.92 efficiency lose at one node): 14 steps x 3.4 us + 1.75 x 2^30 / 370e9 = 47.6 us + 5.0785 ms =
    5.1261 ms, as under NCCL_ALGO=^NVLS."""
    t, lat, _, algo = _auto(_params(None), 8)
    assert algo == "nvls" and lat == pytest.approx(23e-6, rel=1e-12)
    assert t == pytest.approx(S / (370e9 * comm.NVLS_ALGBW_PER_RING_BUSBW) + 23e-6, rel=1e-12)
    assert t == pytest.approx(3.9377e-3, abs=1e-7)
    t, lat, bw, algo = _auto(_params(0), 8)
    assert algo == "ring" and lat == pytest.approx(14 * 3.4e-6, rel=1e-12)
    assert bw == pytest.approx(1.75 * S / 370e9, rel=1e-12)
    assert t == pytest.approx(5.1261e-3, abs=1e-7)
    no_nvls = comm.nccl_algo_candidates("^NVLS")[AR]
    assert t == float(comm.auto_collective_times(AR, [S], [8], [1], _params(None), 8, no_nvls)[0][0])


def test_two_node_all_reduce_by_hand():
    """1 GiB all-reduce over 16 H100 (2 nodes x 8, one NIC of 47 GB/s a GPU). NCCL's default: NVLS-tree,
    max(S / 274.29 GB/s, S / (8 x 47 GB/s)) + 23 us + 2 x ceil(log2 2) x 10 us = 3.9147 ms + 43 us = 3.9577 ms.
    NCCL_NVLS_ENABLE=0 takes NVLS-tree out too (NCCL_ALGO=^NVLS would not): the ring, over min(370, 8 x 47) = 370 GB/s,
    30 steps of (14 x 3.4 + 2 x 10) / 16 = 4.225 us and 1.875 x 2^30 / 370e9: 126.75 us + 5.4413 ms = 5.5680 ms (the
    tree's 2S / (0.92 x 370 GB/s) = 6.3 ms loses)."""
    t, lat, _, algo = _auto(_params(None), 16)
    assert algo == "nvls-tree" and lat == pytest.approx(23e-6 + 2 * 10e-6, rel=1e-12)
    assert t == pytest.approx(max(S / (370e9 * comm.NVLS_ALGBW_PER_RING_BUSBW), S / (8 * 47e9)) + 43e-6, rel=1e-12)
    assert t == pytest.approx(3.9577e-3, abs=1e-7)
    no_nvls = comm.nccl_algo_candidates("^NVLS")[AR]
    assert t == float(comm.auto_collective_times(AR, [S], [16], [1], _params(None), 16, no_nvls)[0][0])
    t, lat, bw, algo = _auto(_params(0), 16)
    assert algo == "ring" and lat == pytest.approx(30 * (14 * 3.4e-6 + 2 * 10e-6) / 16, rel=1e-12)
    assert bw == pytest.approx(1.875 * S / 370e9, rel=1e-12)
    assert t == pytest.approx(5.5680e-3, abs=1e-7)


BASE = dict(model="llama3-8b", tp=1, pp=1, cp=1, micro_batch=1, global_batch=32, seq_len=4096, sharding="none")


def _step(gpus, **kw):
    s, p, _ = resolve(Job(**BASE, gpus=gpus, **kw))
    return float(np.asarray(step_time(s, p)[0].total).reshape(-1)[0]), s, p


@pytest.mark.parametrize("gpus", [8, 16])
def test_plan_priced_with_the_variable(gpus):
    """Llama 3 8B, DDP over 8 H100 (one node) and 16 (two): the gradient all-reduce runs NVLS / NVLS-tree by NCCL's
    choice; NCCL_NVLS_ENABLE=0 prices it as NCCL_ALGO=^NVLS,NVLSTree does (ring or tree), a longer step (8 GPUs
    1.50841 -> 1.51609 s, 16 GPUs 0.80668 -> 0.81875 s); 2 and 1 price as unset. The plan carries the value."""
    plain, _, _ = _step(gpus)
    off, s, p = _step(gpus, nccl_nvls_enable=0)
    assert off == _step(gpus, nccl_algo="^NVLS,NVLSTree")[0] and off > plain
    assert (plain, off) == pytest.approx({8: (1.50841, 1.51609), 16: (0.80668, 0.81875)}[gpus], abs=1e-5)
    assert _step(gpus, nccl_nvls_enable=2)[0] == _step(gpus, nccl_nvls_enable=1)[0] == plain
    assert to_json(s, p, evaluate(s, p))["plan"]["nccl_nvls_enable"] == 0
    assert "nccl_nvls_enable" not in to_json(*_step(gpus)[1:], evaluate(*_step(gpus)[1:]))["plan"]


def test_forced_on_without_nvls_hardware_is_refused():
    with pytest.raises(PlannerError, match="nccl_nvls_enable: 1 forces NVLink SHARP on a100-sxm-80gb") as e:
        resolve(Job(**BASE, gpus=8, hardware="a100-sxm-80gb", nccl_nvls_enable=1))
    assert "give 0 or 2" in e.value.hint
    # 0 and 2 on hardware without NVLS: accepted, priced as unset (no NVLS to take out)
    a = [_step(8, hardware="a100-sxm-80gb", **kw)[0] for kw in ({}, {"nccl_nvls_enable": 0}, {"nccl_nvls_enable": 2})]
    assert a[0] == a[1] == a[2]


SCRIPT = ("#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n{env}"
          "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\\n"
          "    --tensor-model-parallel-size 2 --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
          "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16\n")


def _read(tmp_path, env: str):
    p = tmp_path / "run.sh"
    p.write_text(SCRIPT.format(env=env))
    return load_trainer_config(str(p), gpus=8)


@pytest.mark.parametrize("env, want", [
    ("export NCCL_NVLS_ENABLE=0\n", 0),
    ("NCCL_NVLS_ENABLE=0\n", None),  # assigned, not exported: no child sees it
    ("export NCCL_NVLS_ENABLE=\"${NCCL_NVLS_ENABLE:-0}\"\n", 0),  # Megatron-LM's CI line (_run_training.sh l. 61)
    ("export NCCL_NVLS_ENABLE=2\n", 2),
    ("export NCCL_NVLS_ENABLE=0\nunset NCCL_NVLS_ENABLE\n", None),
])
def test_megatron_reader_reads_the_launch_environment(tmp_path, env, want):
    cfg = _read(tmp_path, env)
    assert cfg.job.get("nccl_nvls_enable") == want
    assert any("nccl_nvls_enable" in str(a) for a in cfg.assumed) == (want is not None)


@pytest.mark.parametrize("text, n", [
    ("3", 3), ("-1", -1), ("+2", 2), (" 1", 1), ("\t0", 0),  # white space, a sign
    ("0x2", 2), ("0X1f", 31), ("010", 8), ("08", 0), ("0x", 0),  # base 0: hexadecimal, octal ("08" stops at the 8)
    ("2x", 2), ("1.5", 1), ("yes", 0), ("-", 0),  # read to the first non-digit; no digits: 0
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63),  # int64's ends
    ("9223372036854775808", None), ("99999999999999999999", None),  # ERANGE: NCCL keeps its default
])
def test_nccl_reads_the_text_as_strtoll(text, n):
    """NCCL reads NCCL_NVLS_ENABLE as C's strtoll(str, nullptr, 0) reads it (NVIDIA/nccl @5067397c src/misc/param.cc
    l. 93-99): cases worked by the C standard's rules (C11 7.22.1.4), each also glibc's strtoll (through ctypes) when
    written."""
    assert nccl_int(text) == n


@pytest.mark.parametrize("text, job, how", [
    ("0", 0, ""), ("1", 1, ""), ("2", 2, ""),
    ("3", 1, "NCCL reads '3' as 3: any number but 0 and 2 forces NVLS on, as 1 does"),
    ("-1", 1, "NCCL reads '-1' as -1: any number but 0 and 2 forces NVLS on, as 1 does"),
    ("010", 1, "NCCL reads '010' as 8: any number but 0 and 2 forces NVLS on, as 1 does"),
    ("yes", 0, "NCCL reads 'yes' as 0 (C's strtoll): NVLS off"),
    ("0x2", 2, "NCCL reads '0x2' as 2 (C's strtoll), its default"),
    ("99999999999999999999", 2,
     "NCCL reads '99999999999999999999' as out of range and keeps its default 2 (NVLS where the GPU supports it)"),
])
def test_value_as_nccl_runs_it(text, job, how):
    """ncclNvlsInit (src/transport/nvls.cc @5067397c l. 262-276): 0 off, 2 the GPU's multicast support, any other
    number forced on (the job field's 1). Nothing is refused: every text is a value NCCL runs with."""
    assert nccl_nvls_enable_value(text) == (job, how)


@pytest.mark.parametrize("text, want", [("3", 1), ("yes", 0), ("0x2", 2), ("-1", 1)])
def test_script_and_ci_corpus_read_a_value_alike(tmp_path, text, want):
    """A value outside 0, 1, 2 in a launch script (megatron.read_nccl_nvls_enable) and in the Megatron-LM CI corpus'
    environment (megatron_ci.nccl_env): the same job value and the same reading of it in the lines (before
    2026-12-07 the script was refused, exit 2, and the corpus row's variable left out with a shorter message)."""
    from planner.megatron_ci import nccl_env

    cfg = _read(tmp_path, f"export NCCL_NVLS_ENABLE={text}\n")
    how = nccl_nvls_enable_value(text)[1]
    assert cfg.job["nccl_nvls_enable"] == want and how
    assert f"nccl_nvls_enable={want}: the launch line's NCCL_NVLS_ENABLE (the script sets it; {how})" + (
        ": its all-reduces priced without NVLS and NVLS-tree" if want == 0 else "") in cfg.assumed
    fields, notes = nccl_env({"env": {"NCCL_NVLS_ENABLE": text, "source": "S"}})
    assert fields == {"nccl_nvls_enable": want}
    assert notes == [f"nccl_nvls_enable={want}: NCCL_NVLS_ENABLE={text} in the case's ENV_VARS (S) ({how})"]


@pytest.mark.parametrize("stack", ["megatron", "megatron-deepspeed", "megatron-bridge"])
def test_exported_launch_scripts_read_back_the_value(tmp_path, stack):
    from planner.trainers.export import export_plan

    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, global_batch=16, seq_len=2048, stack=stack, tp=2, pp=1, cp=1,
                          micro_batch=1, nccl_nvls_enable=0))
    row = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(row["plan"], stack)
    assert "export NCCL_NVLS_ENABLE=0" in text.splitlines()
    path = tmp_path / "run.sh"
    path.write_text(text)
    assert load_trainer_config(str(path), fmt=stack, gpus=8).job["nccl_nvls_enable"] == 0


def test_other_formats_note_it():
    from planner.trainers.export import export_plan

    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, global_batch=16, seq_len=2048, stack="torchtitan",
                          sharding="fsdp", nccl_nvls_enable=0))
    _, notes = export_plan(to_json(s, p, evaluate(s, p))["plan"], "torchtitan")
    assert any(n.startswith("nccl_nvls_enable 0: NCCL reads it from the environment; launch with "
                            "NCCL_NVLS_ENABLE=0") for n in notes)


def test_cli_option_and_error(cli):
    """--nccl-nvls-enable 0 on 8 H100 DDP: the step of test_plan_priced_with_the_variable; a bad value exits 2."""
    import json

    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--pp", "1", "--cp", "1", "--sharding",
            "none", "--global-batch", "32", "--micro-batch", "1", "--seq-len", "4096", "--format", "json"]
    r = cli(*base, "--nccl-nvls-enable", "0")
    assert r.exit_code == 0, r.output
    js = json.loads(r.stdout)
    assert js["plan"]["nccl_nvls_enable"] == 0 and js["time"]["step_s"] == pytest.approx(1.51609, abs=1e-5)
    r = cli(*base, "--nccl-nvls-enable", "3")
    assert r.exit_code == 2 and "Traceback" not in r.output and "error:" in r.output and "hint:" in r.output


def test_forced_value_other_than_1_on_hardware_without_nvls(cli, tmp_path):
    """NCCL_NVLS_ENABLE=3 in a script run on A100s (hardware nvls false): forced on, the job's 1, refused as 1 is
    (NCCL @5067397c nvls.cc l. 372-380 fails the communicator whose multicast bind fails, whatever the forcing value),
    exit 2, the assumed line saying how NCCL read 3 printed before the error."""
    p = tmp_path / "run.sh"
    p.write_text(SCRIPT.format(env="export NCCL_NVLS_ENABLE=3\n"))
    r = cli("explain", str(p), "--hardware", "a100-sxm-80gb")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "nccl_nvls_enable: 1 forces NVLink SHARP on a100-sxm-80gb" in r.output
    assert "NCCL reads '3' as 3: any number but 0 and 2 forces NVLS on, as 1 does" in r.output
