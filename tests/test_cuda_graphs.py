"""CUDA graphs (planner/cuda_graphs.py): Megatron's flags read into the job, written back, the
combinations Megatron-Core refuses (transformer_config.py @d98e8a64 __post_init__) refused, and
the stacks without CUDA graphs refusing the fields."""

from __future__ import annotations

import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.memory import STAGE_FIRST, stage_memory_terms
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

# Qwen3-30B-A3B (128 experts, every layer MoE, dropless) on 16 H100: TP 2, EP 8
MOE = dict(model="qwen3-30b-a3b", gpus=16, tp=2, ep=8, sharding="zero1", micro_batch=1, global_batch=64,
           stack="megatron")
DENSE = dict(model="llama3-8b", gpus=8, tp=2, sharding="zero1", micro_batch=1, global_batch=32, stack="megatron")
PRESET = ["attn", "moe_router", "moe_preprocess"]  # Megatron-Core's MoE guide's CPU-overhead fix (README l. 262)


def _read(tmp_path, flags: str) -> dict:
    p = tmp_path / "run.sh"
    # the model is the command line's (load_trainer_config model=): Megatron-LM has no --model flag (before 2026-12-07
    # the script gave one too, read as unknown to the planner; argparse refuses it)
    p.write_text("torchrun pretrain_gpt.py --tensor-model-parallel-size 2 "
                 "--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 "
                 "--use-distributed-optimizer --bf16 " + flags + "\n")
    return load_trainer_config(p, model="qwen3-30b-a3b", gpus=16).job


@pytest.mark.parametrize("flags, impl, scope", [
    ("--cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_router moe_preprocess",
     "transformer_engine", PRESET),
    # the deprecated spellings (arguments.py l. 611-641): --external-cuda-graph is transformer_engine,
    # --enable-cuda-graph local, --cuda-graph-scope the old name of --cuda-graph-modules
    ("--external-cuda-graph --cuda-graph-scope attn", "transformer_engine", ["attn"]),
    ("--enable-cuda-graph --cuda-graph-scope attn moe_router", "local", ["attn", "moe_router"]),
    # full alone is the whole layer (an empty list); full_iteration moves to the implementation
    ("--cuda-graph-impl local --cuda-graph-modules full", "local", None),
    ("--cuda-graph-modules full_iteration", "full_iteration", None),
    # modules without an implementation: no graphs in Megatron (cuda_graph_impl none), dropped
    ("--cuda-graph-modules attn", None, None),
    ("", None, None),
])
def test_reader_maps_megatron_flags(tmp_path, flags, impl, scope):
    job = _read(tmp_path, flags)
    assert job.get("cuda_graph_impl") == impl and job.get("cuda_graph_scope") == scope


@pytest.mark.parametrize("flags, words", [
    ("--enable-cuda-graph --cuda-graph-impl local", "beside --cuda-graph-impl"),
    ("--enable-cuda-graph --external-cuda-graph", "together"),
    ("--cuda-graph-impl local --cuda-graph-scope attn --cuda-graph-modules attn", "together"),
    ("--cuda-graph-impl local --cuda-graph-modules attn router", "not a module Megatron graphs"),
    ("--cuda-graph-impl eager", "--cuda-graph-impl: invalid choice: 'eager'"),  # argparse (megatron_argparse.py)
])
def test_reader_refuses_what_megatron_refuses(tmp_path, flags, words):
    with pytest.raises(PlannerError, match=words):
        _read(tmp_path, flags)


def test_export_round_trip(tmp_path):
    """A job with Megatron-Bridge's graphs writes --cuda-graph-impl / --cuda-graph-modules and
    reads back as the same fields."""
    plan = resolved_plan(Job(**MOE, cuda_graph_impl="transformer_engine", cuda_graph_scope=PRESET))
    assert plan["cuda_graph_impl"] == "transformer_engine" and plan["cuda_graph_scope"] == PRESET
    text, _ = export_plan(plan, "megatron")
    assert "--cuda-graph-impl transformer_engine " in text and "--cuda-graph-modules attn moe_router moe_preprocess " in text
    p = tmp_path / "exported.sh"
    p.write_text(text)
    back = resolved_plan(Job.model_validate(load_trainer_config(p).job))
    assert (back["cuda_graph_impl"], back["cuda_graph_scope"]) == ("transformer_engine", PRESET)
    # no graphs: nothing written, nothing in the plan
    plain = resolved_plan(Job(**MOE))
    assert "cuda_graph_impl" not in plain and "--cuda-graph" not in export_plan(plain, "megatron")[0]


def test_stack_without_cuda_graphs_refuses(explain):
    job = {**DENSE, "stack": "torchtitan", "sharding": "fsdp"}
    explain(**job)  # the job itself is fine there
    with pytest.raises(PlannerError, match="stack torchtitan has no CUDA graph option"):
        explain(**job, cuda_graph_impl="local", cuda_graph_scope=["attn"])


@pytest.mark.parametrize("base, kw, words", [
    (DENSE, dict(cuda_graph_scope=["attn"]), "without cuda_graph_impl"),
    (DENSE, dict(cuda_graph_impl="full_iteration", cuda_graph_scope=["attn"]), "must be empty"),
    (DENSE, dict(cuda_graph_impl="local", cuda_graph_scope=["moe_router"]), "the model has none"),
    (DENSE, dict(cuda_graph_impl="local", cuda_graph_scope=["attn"], recompute="full"), "full recompute"),
    (MOE, dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=["moe_preprocess"]), "only with moe_router"),
    (MOE, dict(cuda_graph_impl="local", cuda_graph_scope=["moe", "moe_router"]), "both moe and moe_router"),
    (MOE, dict(cuda_graph_impl="local", cuda_graph_scope=["mlp"]), "every layer of the model is MoE"),
    # the dropless MoE layer cannot be captured past its dispatch (token_dispatcher.py's sync);
    # Megatron graphs the moe scope only padded to capacity (more in tests/test_moe_padding.py)
    (MOE, dict(cuda_graph_impl="local", cuda_graph_scope=["moe"]), "only with drop-padding MoE"),
    (MOE, dict(cuda_graph_impl="transformer_engine"), "the whole layer captures the experts"),
    (MOE, dict(cuda_graph_impl="full_iteration"), "full_iteration captures the experts"),
])
def test_combinations_megatron_refuses(explain, base, kw, words):
    with pytest.raises(PlannerError, match=words):
        explain(**base, **kw)


def test_graphs_before_the_dispatch_keep_the_fitted_host_term(explain):
    """attn + moe_router + moe_preprocess on a dropless MoE: the synchronisation stays and the
    stack's moe_host constants are fitted on records with and without these graphs (the split
    is not identified: docs/moe_accuracy.md), so the step time is the one without them; a
    whole-layer graph on a dense model likewise."""
    _, _, _, eager = explain(**MOE)
    _, _, _, graphed = explain(**MOE, cuda_graph_impl="transformer_engine", cuda_graph_scope=PRESET)
    assert eager["time"]["moe_host_s"] > 0  # the term graphs would act on is there for this job
    assert graphed["time"] == eager["time"]
    assert explain(**DENSE, cuda_graph_impl="local")[3]["time"] == explain(**DENSE)[3]["time"]


def _layer_activations(explain, **kw) -> float:
    settings, plan, _, _ = explain(**MOE, **kw)
    return float(stage_memory_terms(settings, plan)[STAGE_FIRST].layer_activations)


def test_graph_static_outputs_by_hand(explain):
    """Transformer Engine graphs of moe_router + moe_preprocess with the alltoall dispatcher keep
    the permuted tokens of every MoE layer until its backward (planner/cuda_graphs.py [5]-[7]):
    Qwen3-30B-A3B at TP 2 with SP, micro-batch 1 x 4,096 tokens: 2,048 local tokens x top-8 x
    h 2,048 x 2 B = 67,108,864 B a layer, x 48 MoE layers, one micro-batch held (PP 1):
    3,221,225,472 B (3.0 GiB). The flex dispatchers' preprocess returns the norm output (saved
    anyway), attn alone the block's output (the pre-MLP norm's saved input), and the local
    implementation's own buffers are not priced: 0."""
    eager = _layer_activations(explain)
    graphed = _layer_activations(explain, cuda_graph_impl="transformer_engine", cuda_graph_scope=PRESET)
    assert graphed - eager == pytest.approx(48 * 2048 * 8 * 2048 * 2, rel=1e-12)
    for kw in (dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=["attn"]),
               dict(cuda_graph_impl="local", cuda_graph_scope=PRESET),
               dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=PRESET, moe_dispatcher="hybridep")):
        assert _layer_activations(explain, **kw) == pytest.approx(_layer_activations(explain, **{
            k: v for k, v in kw.items() if k == "moe_dispatcher"}), rel=1e-12)


def test_fit_leaves_full_recompute_out_under_per_layer_graphs(cli):
    """Megatron-Core runs full recompute with CUDA graphs only under full_iteration: fit with
    per-layer graphs searches recompute none and selective, and counts the full-recompute
    candidates it leaves out under the check (it ranked them before, then refused its own row,
    exit 2); a job that pins full recompute alone is refused with a hint about recompute."""
    from conftest import fit_table_and_rows

    # one search: the table and the rows --format json prints (conftest.fit_table_and_rows)
    r, rows = fit_table_and_rows(cli, "--model", "llama3-70b", "--gpus", "24", "--seq-len", "8192", "--global-batch",
                                 "512", "--cuda-graph-impl", "transformer_engine")  # before: a full-recompute row, exit 2
    assert r.exit_code == 0, r.stderr
    assert rows and all(p["plan"]["recompute"] != "full" for p in rows)
    assert r.exit_code == 0 and "full recompute with per-layer CUDA graphs" in r.stdout
    r = cli("fit", "--model", "llama3-70b", "--gpus", "24", "--seq-len", "8192", "--global-batch", "512",
            "--cuda-graph-impl", "local", "--recompute", "full")
    assert r.exit_code == 2, (r.stdout[-300:], r.stderr)
    assert "full recompute runs with CUDA graphs only under cuda_graph_impl full_iteration" in r.stderr
    assert "hint: use recompute none or selective" in r.stderr and "Traceback" not in r.stderr
