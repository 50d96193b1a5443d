"""Megatron-LM's Muon (job field optimizer muon, memory.py [mu], layers/common.py [mu]): which parameters it steps,
its one fp32 momentum in place of Adam's two moments, what the Megatron reader reads, and what the planner refuses
as Megatron-LM @d98e8a64 does. The corpus rows' states by hand: tests/test_megatron_ci.py
test_hand_computed_muon_rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.layers.common import BlockParams
from planner.memory import MUON_MOMENTUM_BYTES, model_state_terms
from planner.plan import resolve
from planner.schema import BYTES_PER_PARAM_PRESETS, Job
from planner.trainers import load_trainer_config

SMALL_MOE = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
             "--micro-batch-size 4 --global-batch-size 32 --bf16 --disable-bias-linear --num-experts 8 "
             "--expert-model-parallel-size 8 --moe-ffn-hidden-size 1024 --moe-router-topk 2 --moe-grouped-gemm "
             "--vocab-file ${DATA_PATH}/bpe/vocab.json --merge-file ${DATA_PATH}/bpe/merges.txt")


def _read(tmp_path, extra: str, gpus: int = 8):
    p = tmp_path / "run.args"
    p.write_text(SMALL_MOE + " " + extra + "\n")
    return load_trainer_config(p, gpus=gpus)


def test_block_split_follows_megatrons_rule():
    """_is_muon_excluded (emerging_optimizers.py @d98e8a64 l. 140-147): 2-D and not the embedding / output layer.
    An MLP block of h 4, f 8 with biases: its 2 h f matrix elements are Muon's; its biases (f column, h row) and
    norm are not. The MoE router's E x h weight is a replicated matrix; Mamba's in_proj is kept off (use_muon False,
    mamba_mixer.py l. 309)."""
    mlp = BlockParams(split=2 * 4 * 8 + 8, replicated=2 * 4 + 4, split_bias=8, row_bias=4)
    assert mlp.muon_per_gpu(2) == 2 * 4 * 8 / 2
    router = BlockParams(replicated=4 * 16 + 8, rep_matrix=4 * 16, expert=16 * 2 * 4 * 8, expert_bias=0)
    assert router.muon_per_gpu(2) == 64 and router.muon_experts_per_gpu(1, 4) == 16 * 2 * 4 * 8 / 4
    mamba = BlockParams(split=100 + 30 + 40, split_plain=30, no_muon=100)
    assert mamba.muon_per_gpu(1) == 40


def test_state_bytes_formula():
    """P parameters of which M Muon's, shard d under zero1: (8 (P - M) + 4 M) / d; under none every rank all of it."""
    from planner.plan import PlanArrays  # noqa: F401  (the arrays the formula reads)

    class P:
        sharding = np.array([0, 1])  # none, zero1
        dp = np.array([8, 8])
        cp = np.array([1, 1])
        shard = np.array([8, 8])

    bpp = BYTES_PER_PARAM_PRESETS["megatron"]
    t = model_state_terms(bpp, P, 1000.0, muon=600.0)
    assert MUON_MOMENTUM_BYTES == 4.0
    assert list(t["adam"]) == [8 * 400 + 4 * 600, (8 * 400 + 4 * 600) / 8]
    assert list(t["master_weights"]) == [4000.0, 500.0]


def test_reader_prices_muon(tmp_path):
    cfg = _read(tmp_path, "--optimizer muon --muon-momentum 0.9 --muon-num-ns-steps 5")
    assert cfg.job["optimizer"] == "muon" and cfg.job["sharding_mode"] == "ddp" and not cfg.unmodelled
    settings, _, _ = resolve(Job.model_validate(cfg.job))
    assert settings.optimizer == "muon"
    assert "muon_ns_steps" not in cfg.job  # the default 5
    cfg = _read(tmp_path, "--optimizer muon --muon-num-ns-steps 8 --muon-coefficient-type polar_express")
    assert cfg.job["muon_ns_steps"] == 8 and not cfg.unmodelled  # the coefficient type: the same GEMMs (ignored)
    assert any("--muon-coefficient-type" in str(i) for i in cfg.ignored)
    cfg = _read(tmp_path, "--muon-num-ns-steps 8")  # Adam runs no Newton-Schulz step
    assert "muon_ns_steps" not in cfg.job and any("--muon-num-ns-steps" in str(i) for i in cfg.ignored)
    with pytest.raises(PlannerError, match="--muon-num-ns-steps '0' is not a whole number from 1"):
        _read(tmp_path, "--optimizer muon --muon-num-ns-steps 0")
    # with --use-distributed-optimizer, or the deprecated dist_muon, the layer-wise optimizer: the zero1 level
    for extra in ("--optimizer muon --use-distributed-optimizer --no-use-layer-wise-param-layout", "--optimizer dist_muon"):
        cfg = _read(tmp_path, extra)
        assert cfg.job["optimizer"] == "muon" and cfg.job["sharding"] == "zero1", extra
    cfg = _read(tmp_path, "--optimizer muon --use-distributed-optimizer --no-use-layer-wise-param-layout")
    assert cfg.job["optimizer_whole_tensors"] is True
    cfg = _read(tmp_path, "--optimizer muon --use-distributed-optimizer")  # the layout (the default): byte-sharded
    assert "optimizer_whole_tensors" not in cfg.job
    cfg = _read(tmp_path, "--no-use-layer-wise-param-layout")  # no layer-wise optimizer without muon
    assert "optimizer_whole_tensors" not in cfg.job and any("--no-use-layer-wise-param-layout" in i for i in cfg.ignored)
    # the scalar parameters on Lion: one moment, not priced
    cfg = _read(tmp_path, "--optimizer muon --muon-scalar-optimizer lion")
    assert any(u.startswith("--muon-scalar-optimizer lion") for u in cfg.unmodelled)
    # LayerWiseDistributedOptimizer asserts a single optimizer instance (layer_wise_optimizer.py l. 537-541)
    with pytest.raises(PlannerError, match="does not support num_distributed_optimizer_instances"):
        _read(tmp_path, "--optimizer muon --use-distributed-optimizer --num-distributed-optimizer-instances 2")


@pytest.mark.parametrize("job, words", [
    (dict(stack="torchtitan", sharding="fsdp"), "whose code builds adam only"),
    (dict(stack="megatron", sharding="fsdp"), "sharding fsdp"),
    (dict(stack="megatron", sharding="zero1", fp16=True), "fp16"),
    (dict(stack="megatron", sharding="zero1", bytes_per_param="bf16-moments"), "precision-aware"),
    (dict(stack="megatron", sharding="zero1", offload_optimizer="cpu"), "offload_optimizer cpu"),
    (dict(stack="megatron", sharding="none", optimizer_whole_tensors=True), "optimizer_whole_tensors"),
])
def test_refused_as_megatron_refuses(job, words):
    with pytest.raises(PlannerError, match=words):
        resolve(Job(model="llama3-8b", gpus=8, optimizer="muon", **job))


def test_muon_lowers_only_the_optimizer_states():
    """Llama 3 8B on 8 GPUs, zero1: the states term falls by 4 B / 8 a Muon-stepped parameter, nothing else moves."""
    from planner.memory import stage_memory_terms, STAGE_LAST

    base = Job(model="llama3-8b", gpus=8, stack="megatron", sharding="zero1")
    s0, p0, _ = resolve(base)
    s1, p1, _ = resolve(base.model_copy(update={"optimizer": "muon"}))
    t0, t1 = stage_memory_terms(s0, p0)[STAGE_LAST], stage_memory_terms(s1, p1)[STAGE_LAST]
    # Llama 3 8B: 32 layers of 4096^2 (2 + 2 x 1024/4096) + 3 x 4096 x 14336 matrices; the embedding and output
    # layer (128,256 x 4096 each, untied) and the norms stay on Adam
    muon = 32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert float(t0["adam"] - t1["adam"]) == pytest.approx(muon * (8 - 4) / 8, rel=1e-12)
    assert all(float(t0[k]) == float(t1[k]) for k in t0.keys() if k != "adam")


def test_fit_searches_only_what_megatron_runs_muon_under(cli):
    """fit with --optimizer muon ranks DDP and the (layer-wise) distributed optimizer only: Megatron refuses muon
    under Torch-FSDP2 and Megatron-FSDP (arguments.py @d98e8a64 l. 1739-1740; space.MUON_LEVELS), and every row's
    reproduce line carries the optimizer."""
    import json

    r = cli("fit", "--model", "llama3-8b", "--gpus", 16, "--stack", "megatron", "--optimizer", "muon", "--top", 50,
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and {row["plan"]["sharding"] for row in rows} <= {"none", "zero1"}
    assert all(row["plan"].get("optimizer") == "muon" for row in rows)



def test_fit_with_whole_tensors_ranks_the_layer_wise_optimizer_only(cli):
    """optimizer_whole_tensors (--no-use-layer-wise-param-layout) is the layer-wise distributed optimizer's (zero1;
    plan._optimizer refuses it at any other level, arguments.py @d98e8a64 l. 1725-1737): fit ranks zero1 rows only
    (space.WHOLE_TENSOR_LEVELS) and probes the job at zero1 (space.settings_for). fit refused every such job, even with
    --sharding zero1, because its probe resolved at the stack's first level, none (fuzz megatron-recent seed: the
    corpus' dist_muon MoE argument file, `fit FILE --gpus 8`). Row 1 (tp 2, dp 4, pp 1) holds on one rank the larger
    of the untied embedding and output layer whole: 128,256 / 2 x 4,096 = 262,668,288 elements, of which the shard's
    1 / 4 is priced anyway, so (1 - 1/4) x 262,668,288 x (4 B fp32 master + 8 B Adam m, v) = 2,364,014,592 B more
    than the same row with the layout."""
    import json

    r = cli("fit", "--model", "llama3-8b", "--gpus", 8, "--stack", "megatron", "--optimizer", "muon",
            "--optimizer-whole-tensors", "--top", 20, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and {row["plan"]["sharding"] for row in rows} == {"zero1"}
    assert all(row["plan"].get("optimizer_whole_tensors") is True for row in rows)
    p = rows[0]["plan"]
    assert (p["tp"], p["dp"], p["pp"]) == (2, 4, 1)
    line = ["explain", "--model", "llama3-8b", "--gpus", 8, "--stack", "megatron", "--optimizer", "muon", "--tp", 2,
            "--dp", 4, "--micro-batch", p["micro_batch"], "--global-batch", p["global_batch"], "--sharding", "zero1",
            "--format", "json"]
    e = cli(*line)
    assert e.exit_code == 0, e.stderr
    t0, t1 = json.loads(e.stdout)["memory"]["terms"], rows[0]["memory"]["terms"]
    assert t1["adam"] + t1["master_weights"] - t0["adam"] - t0["master_weights"] == pytest.approx(
        0.75 * 128256 // 2 * 4096 * 12, rel=1e-12)

def test_budget_checkpoint_writes_one_momentum_a_muon_parameter(cli):
    """The job's checkpoint (budget's checkpoint.job_bytes): P x (2 bf16 model weights + 4 master + 8 Adam) under Adam
    (Megatron's torch_dist writes the model's weights beside the optimizer's: budget.py [8]; 12 P before branch ckpt);
    under Muon its 6,979,321,856 matrix elements of Llama 3 8B (32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x
    14336)) write one 4 B momentum, not 8 B."""
    import json

    def job_bytes(opt):
        r = cli("budget", "--model", "llama3-8b", "--gpus", 8, "--stack", "megatron", "--sharding", "zero1",
                "--optimizer", opt, "--tokens", "1T", "--format", "json")
        assert r.exit_code == 1, r.stderr  # zero1 on 8 GPUs does not fit (106.1 GB a GPU under Adam): printed, exit 1
        return json.loads(r.stdout)["checkpoint"]["job_bytes"]

    P, M = 8_030_261_248, 6_979_321_856
    assert job_bytes("adam") == 14 * P
    assert job_bytes("muon") == 14 * P - 4 * M


def test_explain_names_the_states_term(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--stack", "megatron", "--sharding", "zero1",
            "--optimizer", "muon")
    assert r.exit_code == 0, r.stderr
    assert "Adam m, v + Muon momentum" in r.stdout and "Adam m and v" not in r.stdout


def test_export_writes_the_ns_steps(tmp_path):
    """A Megatron launch at --muon-num-ns-steps 8 exports with the flag (export._megatron_args) and reads back as the
    same plan and memory (check_readback); its Newton-Schulz term is 8 / 5 of the default's (the same GEMMs a step)."""
    from planner.cli.export import check_readback
    from planner.explain import evaluate, to_json
    from planner.trainers.export import export_plan

    rows = []
    for steps in (8, 5):
        cfg = _read(tmp_path, f"--optimizer muon --use-distributed-optimizer --muon-num-ns-steps {steps}")
        settings, plan, _ = resolve(Job.model_validate({**cfg.job, "hardware": "h100-sxm"}))
        rows.append(to_json(settings, plan, evaluate(settings, plan)))
    text, _ = export_plan(rows[0]["plan"], "megatron")
    words = text.split()
    assert words[words.index("--muon-num-ns-steps") + 1] == "8"
    check_readback(rows[0], "megatron", text)
    assert rows[0]["time"]["muon_ns_s"] == pytest.approx(rows[1]["time"]["muon_ns_s"] * 8 / 5, rel=1e-12)
    assert "--muon-num-ns-steps" not in export_plan(rows[1]["plan"], "megatron")[0]
