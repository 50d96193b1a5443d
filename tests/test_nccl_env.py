"""The run's NCCL environment in one table (planner/trainers/megatron.py NCCL_ENV_FIELDS: the job fields nccl_algo,
nccl_proto, nccl_nvls_enable and their variables NCCL_ALGO, NCCL_PROTO, NCCL_NVLS_ENABLE), which every writer and
reader takes: the Megatron-LM, Megatron-DeepSpeed and Megatron-Bridge launch scripts and torchtitan 0.3.0's launch line
write it (megatron.nccl_exports; Bridge's lines commented) and read it back (megatron.read_nccl_env; torchtitan03's
parse_launch), the other formats note it, and the Megatron-LM CI corpus' environment is read by it
(megatron_ci.nccl_env). Before 2026-12-07 three copies of the mapping stood beside the table (megatron_ci.NCCL_FIELDS,
torchtitan03.NCCL_ENV, the Bridge writer's three commented blocks); these tests fail where a writer or reader leaves
out or renames a variable of the table."""

from __future__ import annotations

import pytest

from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan
from planner.trainers.megatron import NCCL_ENV_FIELDS

ENV = {"nccl_algo": "Ring", "nccl_proto": "simple", "nccl_nvls_enable": 0}
EXPORTS = ["export NCCL_ALGO=Ring", "export NCCL_PROTO=simple", "export NCCL_NVLS_ENABLE=0"]


def _plan(stack: str, **kw) -> dict:
    base = dict(model="llama3-8b", gpus=8, global_batch=16, seq_len=2048, stack=stack, micro_batch=1)
    base.update(dict(sharding="fsdp") if stack.startswith("torchtitan") else dict(tp=2, pp=1, cp=1))
    s, p, _ = resolve(Job(**{**base, **kw}))
    return to_json(s, p, evaluate(s, p))["plan"]


def test_the_table():
    """Three fields, each with its variable (NCCL's own names: NVIDIA/nccl @5067397c src/graph/tuning.cc l. 453-458,
    src/transport/nvls.cc l. 159 NCCL_PARAM(NvlsEnable, "NVLS_ENABLE")) and the cost model's function that prices it."""
    assert NCCL_ENV_FIELDS == (("nccl_algo", "NCCL_ALGO", "comm.nccl_algo_candidates"),
                               ("nccl_proto", "NCCL_PROTO", "comm.nccl_proto_protocols"),
                               ("nccl_nvls_enable", "NCCL_NVLS_ENABLE", "comm.nvls_enabled"))


@pytest.mark.parametrize("stack, fmt, name", [("megatron", "megatron", "run.sh"),
                                              ("megatron-deepspeed", "megatron-deepspeed", "run.sh"),
                                              ("torchtitan-0.3", "torchtitan", "run.sh")])
def test_launch_scripts_write_every_variable_and_read_it_back(tmp_path, stack, fmt, name):
    """A plan priced with all three: the export lines, in the table's order, and the file read back with all three."""
    text, notes = export_plan(_plan(stack, **ENV), fmt)
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith("export NCCL_")] == EXPORTS
    assert not any("NCCL reads it from the environment" in n for n in notes)
    path = tmp_path / name
    path.write_text(text)
    job = load_trainer_config(str(path), fmt=stack, gpus=8).job
    assert {f: job.get(f) for f, _, _ in NCCL_ENV_FIELDS} == ENV


def test_bridge_launch_comments_each_variable():
    """Megatron-Bridge's launch: each export after a comment naming the plan field and the function that priced it;
    under deterministic mode the NCCL_ALGO comment adds Bridge's start-up assertion (export._BRIDGE_NCCL_NOTE). The lines
    as the writer wrote them before the table served it (export._megatron_bridge, 2026-12-06)."""
    head = ["# NCCL_ALGO: as priced (the plan's nccl_algo: comm.nccl_algo_candidates)", "export NCCL_ALGO=Ring",
            "# NCCL_PROTO: as priced (the plan's nccl_proto: comm.nccl_proto_protocols)", "export NCCL_PROTO=simple",
            "# NCCL_NVLS_ENABLE: as priced (the plan's nccl_nvls_enable: comm.nvls_enabled)", "export NCCL_NVLS_ENABLE=0"]
    for det, first in ((False, head[0]), (True, head[0] + "; Bridge's deterministic mode asserts it set, to one of Tree, "
                                           "Ring, CollnetDirect, CollnetChain, ^NVLS (training/config.py @dc805f5cf "
                                           "l. 1463-1466)")):
        text, _ = export_plan(_plan("megatron-bridge", deterministic_mode=det, **ENV), "megatron-bridge")
        lines = text.splitlines()
        at = lines.index(head[1]) - 1
        assert lines[at:at + 6] == [first] + head[1:]
        assert lines[at + 6] == "" and lines[at + 7].startswith("torchrun ")
    # a field the plan leaves unset: neither its comment nor its export
    text, _ = export_plan(_plan("megatron-bridge", nccl_nvls_enable=0), "megatron-bridge")
    assert [ln for ln in text.splitlines() if "NCCL_" in ln] == head[4:]


def test_bridge_reads_every_variable_back(tmp_path):
    text, _ = export_plan(_plan("megatron-bridge", **ENV), "megatron-bridge")
    path = tmp_path / "run.sh"
    path.write_text(text)
    job = load_trainer_config(str(path), fmt="megatron-bridge", gpus=8).job
    assert {f: job.get(f) for f, _, _ in NCCL_ENV_FIELDS} == ENV


def test_other_formats_note_every_variable():
    """torchtitan's TOML and the DeepSpeed JSON cannot hold the environment: one note a variable, in the table's
    order."""
    for stack, fmt, tp in (("torchtitan", "torchtitan", {}), ("megatron-deepspeed", "deepspeed", {"tp": 1})):
        _, notes = export_plan(_plan(stack, **ENV, **tp), fmt)
        assert [n[:n.index(":")] for n in notes if "NCCL reads it from the environment" in n] == [
            "nccl_algo Ring", "nccl_proto simple", "nccl_nvls_enable 0"]


def test_ci_corpus_reads_every_variable_as_a_launch_script_does(tmp_path):
    """A Megatron-LM CI row whose case sets all three (megatron_ci.nccl_env) and a Megatron launch script exporting the
    same: the same job fields."""
    from planner.megatron_ci import nccl_env

    fields, notes = nccl_env({"env": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "simple", "NCCL_NVLS_ENABLE": "0",
                                      "source": "S"}})
    assert fields == ENV
    assert notes == ["nccl_algo=Ring: NCCL_ALGO in the case's ENV_VARS (S)",
                     "nccl_proto=simple: NCCL_PROTO in the case's ENV_VARS (S)",
                     "nccl_nvls_enable=0: NCCL_NVLS_ENABLE in the case's ENV_VARS (S)"]
    text, _ = export_plan(_plan("megatron", **ENV), "megatron")
    path = tmp_path / "run.sh"
    path.write_text(text)
    job = load_trainer_config(str(path), gpus=8).job
    assert {f: job[f] for f in fields} == fields
