"""torchtitan 0.3.0's CUDA graphs against PP and EP (issue 22, rule85 item 3; planner/trainers/torchtitan03.py
cuda_graph_refusal).

pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/trainer.py: training.disable_cuda_graphs defaults to false (the
forward + backward step captured in a CUDA graph, l. 613-614), and Trainer.Config._validate_cuda_graphs (l. 179-210,
called by __post_init__ l. 141, which tyro runs on the config function's config with the command line laid over it,
config/manager.py parse_args, and again by Trainer.__init__ l. 359) raises ValueError
  - with pipeline_parallel_degree > 1: 'CUDA graphs do not support pipeline parallelism yet. Set
    --training.disable_cuda_graphs.' (l. 183-187);
  - with expert_parallel_degree > 1 and a token dispatcher other than HybridEP's non-blocking one (or MinimalAsyncEP,
    not priced): 'CUDA graphs support only expert parallel token dispatcher configurations without CPU
    synchronization' (l. 189-210).
torchtitan's own PP / EP tests pass --training.disable_cuda_graphs (tests/integration_tests/h100.py l. 57;
.github/workflows/integration_test_8gpu_features.yaml l. 147-148). So a launch line that leaves it on with either is
refused (exit 2), and the export writes it wherever the plan needs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.trainers import load_trainer_config
from planner.trainers.spelling import cuda_graph_conflict

from conftest import assert_one_error

H = ("--hardware", "h100-sxm")


def _line(tmp_path, text: str) -> Path:
    p = tmp_path / "run.sh"
    p.write_text("#!/usr/bin/bash\n" + text + "\n")
    return p


@pytest.mark.parametrize("line, needles", [
    ("MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --parallelism.pipeline_parallel_degree 2 "
     "--training.local_batch_size 2",
     ("pipeline_parallel_degree 2", "l. 183-187", "'CUDA graphs do not support pipeline parallelism yet",
      "training.disable_cuda_graphs default false")),
    ("MODULE=qwen3 CONFIG=qwen3_30b_a3b NGPU=8 ./run_train.sh --parallelism.expert_parallel_degree 8",
     ("expert_parallel_degree 8", "moe_dispatcher alltoall", "l. 189-210", "without CPU synchronization")),
    ("MODULE=qwen3 CONFIG=qwen3_30b_a3b NGPU=8 ./run_train.sh --parallelism.expert_parallel_degree 8 "
     "--training.no-disable-cuda-graphs",
     ("expert_parallel_degree 8", "training.disable_cuda_graphs false)")),
])
def test_refused_with_cuda_graphs_on(cli, tmp_path, line, needles):
    r = cli("check", _line(tmp_path, line), *H)
    assert_one_error(r, *needles, "trainer.py Trainer.Config._validate_cuda_graphs l. 179-210",
                     "add --training.disable_cuda_graphs")


@pytest.mark.parametrize("line", [
    # the flag given
    "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --parallelism.pipeline_parallel_degree 2 "
    "--training.local_batch_size 2 --training.disable_cuda_graphs",
    "MODULE=qwen3 CONFIG=qwen3_30b_a3b NGPU=8 ./run_train.sh --parallelism.expert_parallel_degree 8 "
    "--training.disable-cuda-graphs",
    # the config function's own: deepseek_v3_16b sets disable_cuda_graphs True beside its EP 8 (config_registry.py
    # l. 138-170)
    "MODULE=deepseek_v3 CONFIG=deepseek_v3_16b NGPU=8 ./run_train.sh",
    # HybridEP's non-blocking dispatch (non_blocking_capacity_factor 1.0) runs EP under CUDA graphs: deepseek_v3_16b_hybridep
    # leaves them on (l. 173-182)
    "MODULE=deepseek_v3 CONFIG=deepseek_v3_16b_hybridep NGPU=8 ./run_train.sh",
])
def test_read_where_torchtitan_starts(tmp_path, line):
    cfg = load_trainer_config(_line(tmp_path, line), hardware="h100-sxm")
    assert cfg.job["pp"] > 1 or cfg.job["ep"] > 1


def test_export_writes_the_flag_for_pp_only(cli, tmp_path):
    """A PP plan's launch line carries --training.disable-cuda-graphs and reads back; a plan without PP or EP leaves
    llama3_8b's CUDA graphs as they are (noted as not priced)."""
    args = ["export", "--format", "torchtitan", "--stack", "torchtitan-0.3", "--model", "llama3-8b", "--gpus", "8",
            "--global-batch", "16", "--sharding", "fsdp", *H]
    out = tmp_path / "pp.sh"
    r = cli(*args, "--pp", "2", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert "--training.disable-cuda-graphs" in out.read_text()
    assert "training.disable_cuda_graphs written: torchtitan 0.3 refuses pipeline_parallel_degree 2" in r.stderr
    back = load_trainer_config(out, hardware="h100-sxm")
    assert back.job["pp"] == 2
    assert "training.disable_cuda_graphs=true (no CUDA graph: the step as the planner prices it)" in back.ignored
    out1 = tmp_path / "flat.sh"
    r = cli(*args, "-o", out1)
    assert r.exit_code == 0, r.stderr
    assert "disable-cuda-graphs" not in out1.read_text()
    assert "leaves torchtitan 0.3's CUDA graph of the forward + backward step on" in r.stderr


def _plan(**k) -> dict:
    from planner.explain import evaluate, to_json
    from planner.plan import resolve
    from planner.schema import Job

    s, p, _ = resolve(Job(gpus=8, sharding="fsdp", stack="torchtitan-0.3", hardware="h100-sxm", **k))
    return to_json(s, p, evaluate(s, p))["plan"]


def test_check_spells_the_flag_with_the_axis():
    """check's fix in 0.3.0's options (spelling.spell): a change that brings PP, or EP under the all-to-all, carries
    --training.disable_cuda_graphs; one that keeps PP (already refused or flagged by the file), or EP under HybridEP's
    non-blocking dispatch (capacity factor 1.0, deepseek_v3_16b_hybridep's), does not."""
    from planner.trainers.spelling import spell

    def text(before, after, knob):
        return spell("torchtitan-0.3", [knob], before, after, {}).text("torchtitan-0.3")

    dense = dict(model="llama3-8b", global_batch=16)
    flat, pp2 = _plan(**dense), _plan(pp=2, **dense)
    assert "--training.disable_cuda_graphs (0.3.0 refuses PP" in text(flat, pp2, "pp")
    assert "disable_cuda_graphs" not in text(pp2, pp2, "pp")
    moe = dict(model="qwen3-30b-a3b", global_batch=16)
    assert "--training.disable_cuda_graphs (0.3.0 refuses this EP dispatch" in text(_plan(**moe), _plan(ep=8, **moe), "ep")
    hep = dict(moe, moe_dispatcher="hybridep", moe_hybridep_capacity_factor=1.0)  # HybridEP needs ep > 1 (rule 82)
    after = _plan(ep=8, **hep)
    assert after["moe_hybridep_capacity_factor"] == 1.0 and cuda_graph_conflict(1, 8, "hybridep", 1.0) is None
    assert "disable_cuda_graphs" not in text(_plan(ep=2, **hep), after, "ep")
    assert cuda_graph_conflict(1, 8, "hybridep", 0.0) == "ep" and cuda_graph_conflict(2, 8, "hybridep", 1.0) == "pp"
