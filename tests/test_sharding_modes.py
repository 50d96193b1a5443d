"""Issue 22: each sharding mode a stack runs is priced from its own source (stack_db
runs.sharding grad_reduce / reshard_after_forward / replica_reduce; planner/stacks.py
sharding_traits), not as a stand-in level:

- torchtitan fsdp_reshard_after_forward "never" (fsdp2_no_reshard): every unit stays gathered
  (bf16) from its forward to its backward, one all-gather per micro-batch instead of two;
- Megatron-FSDP optim = the distributed optimizer (gradients reduced once per step); optim_grads
  reduce-scatters after every micro-batch and gathers the weights once per step; optim_grads_params
  reduce-scatters after every micro-batch too (grad_reduce_every_bprop); its HSDP all-reduces
  across the instances once per step;
- DeepSpeed MiCS (zero3_mics): ZeRO-3 within the shard group, the replicas' all-reduce only at the
  accumulation boundary; torchtitan's HSDP all-reduces with every reduce-scatter.

The counts per step are derived by hand from the sources; the bytes of one collective are the
comm model's (step.Collectives), so each test checks the mechanism, not a fitted number. `fit`
prices one candidate per distinctly priced mode (space.mode_heads) and the rows it ranks
export and read back as the same mode."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner import comm
from planner.explain import evaluate
from planner.memory import FSDP_TERMS
from planner.plan import resolve
from planner.schema import Job
from planner.step import Collectives, _context

# Llama 3 8B: 8,030,261,248 parameters (HF safetensors), of which the untied output layer is
# vocab 128,256 x hidden 4,096 = 525,336,576
LLAMA3_8B = 8_030_261_248
LLAMA3_8B_OUTPUT = 128_256 * 4_096


def _run(**kw):
    job = dict(model="llama3-8b", gpus=16, micro_batch=1, seq_len=8192)
    job.update(kw)
    settings, plan, _ = resolve(Job(**job))
    return settings, plan, evaluate(settings, plan)


def _dp_total(**kw) -> float:
    return float(_run(**kw)[2].time_extra["dp_comm_s"])


def _one_pass(settings, plan, op, bytes_per_param, group, layers=True):
    """One collective over the whole model's parameters (pp 1, tp 1), issued per layer unit
    (FSDP: one per block, n_b = layers) or in the stack's DDP buckets, as step.dp_comm does."""
    sc = _context(settings, plan)
    coll = Collectives(sc)
    p = float(LLAMA3_8B)
    fs = settings.stack.fsdp
    n_b = 32.0 if layers else max(np.ceil(p / max(fs.ddp_bucket_params, fs.ddp_bucket_params_per_dp_rank * 16)), 1.0)
    return float(n_b * coll(op, p * bytes_per_param / n_b, group, coll.strides["dp"]))


def test_torchtitan_never_keeps_every_unit_gathered_to_the_backward():
    """fsdp_reshard_after_forward "never" (pp 1): the peak holds all 8.03e9 bf16 weights where
    "default" holds only the output layer (torchtitan's fully_shard([norm, output],
    reshard_after_forward=False)); the optimizer states and the reduce pool are the same."""
    _, _, d = _run(stack="torchtitan", sharding_mode="fsdp2", global_batch=64)
    _, _, n = _run(stack="torchtitan", sharding_mode="fsdp2_no_reshard", global_batch=64)
    assert float(n.memory["fsdp_unsharded_stage"]) == pytest.approx(2.0 * LLAMA3_8B, rel=1e-12)
    assert float(d.memory["fsdp_unsharded_ends"]) == pytest.approx(2.0 * LLAMA3_8B_OUTPUT, rel=1e-12)
    # and nothing else of FSDP's: no unit gathered at the peak, no end unit apart from the whole model under "never"
    assert [float(n.memory[k]) for k in FSDP_TERMS if k != "fsdp_unsharded_stage"] == [0.0] * (len(FSDP_TERMS) - 1)
    assert [float(d.memory[k]) for k in FSDP_TERMS if k != "fsdp_unsharded_ends"] == [0.0] * (len(FSDP_TERMS) - 1)
    for k in ("weights", "gradients", "master_weights", "adam", "stream_pools", "activations"):
        if k in d.memory:
            assert float(n.memory[k]) == pytest.approx(float(d.memory[k]), rel=1e-12), k


def test_torchtitan_never_gathers_once_per_micro_batch():
    """Per step, m = 4 micro-batches: "default" all-gathers each unit in forward and again in
    backward (2m) and reduce-scatters m times; "never" gathers in forward only (m). So the
    difference is m all-gathers of the bf16 weights over the 16 FSDP ranks."""
    s, p, _ = _run(stack="torchtitan", sharding_mode="fsdp2", global_batch=64)
    ag = _one_pass(s, p, comm.ALL_GATHER, 2.0, 16)
    rs = _one_pass(s, p, comm.REDUCE_SCATTER, s.stack.fsdp.grad_reduce_bytes, 16)
    default = _dp_total(stack="torchtitan", sharding_mode="fsdp2", global_batch=64)
    never = _dp_total(stack="torchtitan", sharding_mode="fsdp2_no_reshard", global_batch=64)
    assert default == pytest.approx(4 * (2 * ag + rs), rel=1e-9)
    assert never == pytest.approx(4 * (ag + rs), rel=1e-9)


def test_torchtitan_never_is_default_under_pp():
    """Under PP torchtitan's "default" is already reshard_after_forward=False (apply_fsdp:
    not pp_enabled), so the two modes price alike."""
    a = _run(model="llama3-70b", gpus=64, tp=8, pp=2, global_batch=64, stack="torchtitan", sharding_mode="fsdp2")[2]
    b = _run(model="llama3-70b", gpus=64, tp=8, pp=2, global_batch=64, stack="torchtitan",
             sharding_mode="fsdp2_no_reshard")[2]
    assert float(a.memory.total) == float(b.memory.total)
    assert float(a.time.total) == float(b.time.total)


def test_llm_foundry_shard_grad_op_gathers_every_micro_batch():
    """PyTorch FSDP's SHARD_GRAD_OP (llm-foundry's fsdp_config.sharding_strategy; stack_db
    llm-foundry shard_grad_op: level fsdp, reshard_after_forward false) unshards before each
    forward and reshards only after the backward: per step, m = 4 micro-batches, m all-gathers of
    the bf16 weights and m fp32 reduce-scatters (the stack reduces every micro-batch) over the 16
    ranks, one per block. It was priced as ZeRO-2, which gathers the weights once a step: 3 fewer
    all-gathers."""
    s, p, _ = _run(model="mpt-7b", stack="llm-foundry", sharding_mode="shard_grad_op", global_batch=64)
    sc = _context(s, p)
    coll = Collectives(sc)
    n = float(sc.settings.model.num_layers)
    from planner.params import count_params

    P = float(count_params(s.model).total)
    ag = n * float(coll(comm.ALL_GATHER, P * 2.0 / n, 16, coll.strides["dp"]))
    rs = n * float(coll(comm.REDUCE_SCATTER, P * s.stack.fsdp.grad_reduce_bytes / n, 16, coll.strides["dp"]))
    got = _dp_total(model="mpt-7b", stack="llm-foundry", sharding_mode="shard_grad_op", global_batch=64)
    assert got == pytest.approx(4 * (ag + rs), rel=1e-9)


def test_validate_prices_a_records_sharding_mode(cli, tmp_path):
    """A record's FSDP SHARD_GRAD_OP run is `sharding: fsdp` with its stack's FSDP mode that keeps the
    weights from the forward to the backward as `sharding_mode:` (llm-foundry shard_grad_op, torchtitan
    fsdp2_no_reshard; validate rule 6); a mode the record's stack does not run is skipped with the reason."""
    import yaml

    from pathlib import Path

    runs = yaml.safe_load((Path(__file__).parent / "data" / "published_runs.yaml").read_text())
    base = dict(next(r for r in runs if r["id"] == "mosaic-mpt-7b-h100_80gb-8gpu-s2048-std"),
                sharding="fsdp", zero_fsdp_mode_text="FSDP SHARD_GRAD_OP")
    recs = [dict(base, id="foundry", stack="llm-foundry", sharding_mode="shard_grad_op"),
            dict(base, id="titan", stack="torchtitan", model="llama3-8b", vocab_size=128_256, sharding_mode="fsdp2_no_reshard"),  # (MPT: learned positions,
            # not built on torchtitan: rule 73)
            
            dict(base, id="meg", stack="megatron", sharding_mode="shard_grad_op")]
    f = tmp_path / "runs.yaml"
    f.write_text(yaml.safe_dump(recs))
    r = cli("validate", str(f), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    assert rows["foundry"]["plan"]["sharding_mode"] == "shard_grad_op" and rows["foundry"]["plan"]["sharding"] == "fsdp"
    assert rows["titan"]["plan"]["sharding_mode"] == "fsdp2_no_reshard"
    assert "shard_grad_op" in rows["meg"]["skipped"] and "megatron" in rows["meg"]["skipped"], rows["meg"]["skipped"]


def test_megatron_fsdp_optim_is_the_distributed_optimizer():
    """Megatron-FSDP optim: the main (fp32) weights and optimizer states sharded, the model
    weights and gradients whole, the reduce-scatter once at the last micro-batch
    (is_delay_grad_reduce), the weights gathered once per step: the distributed optimizer's."""
    a = _run(stack="megatron", sharding_mode="distributed_optimizer", global_batch=64)[2]
    b = _run(stack="megatron", sharding_mode="megatron_fsdp_optim", global_batch=64)[2]
    assert float(a.memory.total) == float(b.memory.total) and float(a.time.total) == float(b.time.total)


def test_megatron_fsdp_optim_grads_reduces_every_micro_batch():
    """optim_grads (grad_reduce_every_bprop): m reduce-scatters and one all-gather of the
    updated weights per step (DDP buckets); the distributed optimizer one of each."""
    s, p, _ = _run(stack="megatron", sharding_mode="megatron_fsdp_optim_grads", global_batch=64)
    ag = _one_pass(s, p, comm.ALL_GATHER, 2.0, 16, layers=False)
    rs = _one_pass(s, p, comm.REDUCE_SCATTER, s.stack.fsdp.grad_reduce_bytes, 16, layers=False)
    assert _dp_total(stack="megatron", sharding_mode="megatron_fsdp_optim_grads", global_batch=64) == pytest.approx(
        4 * rs + ag, rel=1e-9)
    assert _dp_total(stack="megatron", sharding_mode="distributed_optimizer", global_batch=64) == pytest.approx(
        rs + ag, rel=1e-9)
    m = _run(stack="megatron", sharding_mode="megatron_fsdp_optim_grads", global_batch=64)[2].memory
    assert float(m["gradients"]) == pytest.approx(4.0 * LLAMA3_8B / 16, rel=1e-12)  # fp32 main grads / dp
    assert float(m["weights"]) == pytest.approx(2.0 * LLAMA3_8B, rel=1e-12)  # the model weights whole


def test_megatron_fsdp_optim_grads_params_reduces_every_micro_batch():
    """optim_grads_params: per micro-batch a forward and a backward all-gather of each unit
    and a reduce-scatter (grad_reduce_every_bprop), 4 micro-batches = 4x one."""
    s, p, _ = _run(stack="megatron", sharding_mode="megatron_fsdp_optim_grads_params", global_batch=64)
    ag = _one_pass(s, p, comm.ALL_GATHER, 2.0, 16)
    rs = _one_pass(s, p, comm.REDUCE_SCATTER, s.stack.fsdp.grad_reduce_bytes, 16)
    assert _dp_total(stack="megatron", sharding_mode="megatron_fsdp_optim_grads_params", global_batch=64) == \
        pytest.approx(4 * (2 * ag + rs), rel=1e-9)


@pytest.mark.parametrize("stack,mode,replica_per_mb", [
    ("megatron", "megatron_fsdp_hsdp", False),  # outer_fsdp_group_grad_reduce at the last micro-batch only
    ("megatron-deepspeed", "zero3_mics", False),  # allreduce_mics_shard_grads at the accumulation boundary
    ("torchtitan", "hsdp", True),  # FSDP2 foreach_reduce all-reduces with every reduce-scatter
])
def test_hsdp_replica_all_reduce_per_step_or_per_micro_batch(stack, mode, replica_per_mb):
    """Shard groups of 8 of the 16 DP ranks, 2 replicas, m = 4: 2m all-gathers and m
    reduce-scatters in the group, and the sharded gradients (fp32, 1/8 of them) all-reduced
    across the 2 replicas once per step (Megatron-FSDP HSDP, MiCS) or m times (torchtitan)."""
    s, p, _ = _run(stack=stack, sharding_mode=mode, shard_group=8, global_batch=64)
    fs = s.stack.fsdp
    sc = _context(s, p)
    coll = Collectives(sc)
    n_b = 32.0 if fs.fsdp_bucket_params is None else max(np.ceil(LLAMA3_8B / fs.fsdp_bucket_params), 1.0)

    def group(op, per_param, g, stride):
        return float(n_b * coll(op, LLAMA3_8B * per_param / n_b, g, stride))

    ag = group(comm.ALL_GATHER, 2.0, 8, coll.strides["dp"])
    rs = group(comm.REDUCE_SCATTER, fs.grad_reduce_bytes, 8, coll.strides["dp"])
    ar = float(coll(comm.ALL_REDUCE, LLAMA3_8B * fs.grad_reduce_bytes / 8, 2, coll.strides["dp"] * 8))
    want = 4 * (2 * ag + rs) + (4 if replica_per_mb else 1) * ar
    assert _dp_total(stack=stack, sharding_mode=mode, shard_group=8, global_batch=64) == pytest.approx(want, rel=1e-9)


def test_mode_heads_price_each_distinct_mode_once():
    """The search's candidates: one per distinctly priced mode, for plans without and with PP."""
    from planner.catalog import load_stack
    from planner.space import mode_heads

    mg = load_stack("megatron")
    names = [m.name for m in mg.runs.sharding]
    heads = mode_heads(mg)
    # ddp, distributed_optimizer, megatron_fsdp_optim (= distributed_optimizer), optim_grads,
    # optim_grads_params, torch_fsdp2 (its own: optim_grads_params' gradients wait in the reduce-scatter queue,
    # runs.sharding reduce_queue_units, memory.py [rs]), hsdp
    assert [names[i] for i in heads[0]] == [names[i] for i in heads[1]] == [
        "ddp", "distributed_optimizer", "distributed_optimizer", "megatron_fsdp_optim_grads",
        "megatron_fsdp_optim_grads_params", "torch_fsdp2", "megatron_fsdp_hsdp"]
    tt = load_stack("torchtitan")
    names = [m.name for m in tt.runs.sharding]
    heads = mode_heads(tt)
    # "always" is fsdp2 without PP and its own class under PP (stacks.sharding_traits regather_pp)
    assert [names[i] for i in heads[0]] == ["ddp", "fsdp2", "fsdp2_no_reshard", "fsdp2", "hsdp"]
    assert [names[i] for i in heads[1]] == ["ddp", "fsdp2", "fsdp2", "fsdp2_reshard_always", "hsdp"]
    ds = load_stack("megatron-deepspeed")  # ZeRO 0-3 and MiCS: each its own candidate
    assert (mode_heads(ds) == np.arange(len(ds.runs.sharding))[None, :]).all()


def test_fit_ranks_both_torchtitan_fsdp_modes_and_exports_never(cli, tmp_path):
    """fit on torchtitan (pp 1) ranks fsdp2 and fsdp2_no_reshard as two candidates, names the
    latter in its table and explain arguments, exports it as fsdp_reshard_after_forward =
    "never", and the file reads back as the same mode and memory; under PP only one of them."""
    args = ["--model", "llama3-8b", "--gpus", "16", "--stack", "torchtitan", "--tp", "1", "--cp", "1", "--global-batch",
            "64"]
    r = cli("fit", *args, "--pp", "1", "--top", "40", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    modes = {row["plan"]["sharding_mode"] for row in rows}
    assert {"fsdp2", "fsdp2_no_reshard"} <= modes
    never = next(row for row in rows if row["plan"]["sharding_mode"] == "fsdp2_no_reshard")
    from planner.search import explain_args

    e = explain_args(Job(model="llama3-8b", gpus=16), never)
    assert e[e.index("--sharding") + 1] == "fsdp2_no_reshard"
    r = cli("explain", *e, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["memory"]["total_bytes"] == pytest.approx(never["memory"]["total_bytes"], rel=1e-12)
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    text, _ = export_plan(never["plan"], "torchtitan")
    assert 'fsdp_reshard_after_forward = "never"' in text
    path = tmp_path / "never.toml"
    path.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(path, fmt="torchtitan", model="llama3-8b", gpus=16)
    assert cfg.job["sharding_mode"] == "fsdp2_no_reshard" and cfg.job["sharding"] == "fsdp"
    r = cli("fit", *args, "--pp", "2", "--top", "200", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert "fsdp2_no_reshard" not in {row["plan"]["sharding_mode"] for row in json.loads(r.stdout)}


@pytest.mark.parametrize("mode,flags", [
    ("megatron_fsdp_optim", "--data-parallel-sharding-strategy optim"),
    ("megatron_fsdp_optim_grads", "--data-parallel-sharding-strategy optim_grads"),
    ("megatron_fsdp_optim_grads_params", "--data-parallel-sharding-strategy optim_grads_params"),
])
def test_megatron_fsdp_levels_export_and_read_back(tmp_path, mode, flags):
    """Each Megatron-FSDP level exports as --use-megatron-fsdp with its strategy and reads back
    as the same mode with the same memory."""
    from planner.cli.export import resolved_plan
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="llama3-8b", gpus=16, stack="megatron", sharding_mode=mode, global_batch=64))
    text, _ = export_plan(plan, "megatron")
    assert "--use-megatron-fsdp" in text and flags in text
    path = tmp_path / "run.sh"
    path.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(path, fmt="megatron", model="llama3-8b", gpus=16)
    assert cfg.job["sharding_mode"] == mode
    back = resolved_plan(Job(**{**cfg.job, "model": "llama3-8b"}))
    assert back["sharding_mode"] == mode
    # the plan's fp32 gradients (the megatron preset) are written as Megatron-FSDP's two dtype flags, whose default
    # (auto: the parameters' bf16, arguments.py @d98e8a64 l. 3691-3698) is not what is priced; read back as priced
    assert "--megatron-fsdp-main-grads-dtype fp32" in text and "--megatron-fsdp-grad-comm-dtype fp32" in text
    assert not any("megatron-fsdp-main-grads-dtype" in n or "megatron-fsdp-grad-comm-dtype" in n
                   for n in cfg.unmodelled)
    # a plan with bf16 gradients (mixed16: --grad-reduce-in-bf16) runs Megatron-FSDP's default: no dtype flag
    bf16 = resolved_plan(Job(model="llama3-8b", gpus=16, stack="megatron", sharding_mode=mode, global_batch=64,
                             bytes_per_param="mixed16"))
    assert "--megatron-fsdp-main-grads-dtype" not in export_plan(bf16, "megatron")[0]


def test_mics_exports_its_shard_size_and_reads_back(tmp_path):
    from planner.cli.export import resolved_plan
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="llama3-8b", gpus=16, stack="megatron-deepspeed", sharding="hsdp", shard_group=8,
                             global_batch=64))
    assert plan["sharding_mode"] == "zero3_mics"
    text, _ = export_plan(plan, "deepspeed")
    zero = json.loads(text)["zero_optimization"]
    assert zero["stage"] == 3 and zero["mics_shard_size"] == 8
    path = tmp_path / "ds.json"
    path.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(path, fmt="deepspeed", model="llama3-8b", gpus=16)
    assert cfg.job["sharding_mode"] == "zero3_mics" and cfg.job["shard_group"] == 8


def test_fit_sharding_takes_a_mode_name(cli):
    """`fit --sharding MODE` searches that mode alone, even one priced like another
    (torch_fsdp2 like Megatron-FSDP optim_grads_params), and names it in the rows' explain
    arguments; an unknown name lists the levels and the stack's modes."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--tp", "1", "--cp", "1", "--pp", "1", "--global-batch", "64",
            "--sharding", "torch_fsdp2", "--top", "5", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and {row["plan"]["sharding_mode"] for row in rows} == {"torch_fsdp2"}
    from planner.search import explain_args

    e = explain_args(Job(model="llama3-8b", gpus=16), rows[0])
    assert e[e.index("--sharding") + 1] == "torch_fsdp2"
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--sharding", "foo")
    assert r.exit_code == 2 and "unknown --sharding 'foo'" in r.stderr and "megatron_fsdp_optim_grads" in r.stderr


# Llama 3 70B on tp 8, pp 2: the last stage's parameters a GPU (the stage dp_comm prices, the
# larger): 40 layers of (2 h^2 + 2 h kv + 3 h f) / 8 + 2 h (the norms whole on each TP rank), the
# output layer 128,256 x h / 8 and the final norm h (h 8,192, kv 1,024, f 28,672)
P70_LAST = 40 * ((2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) // 8 + 2 * 8192) + 128_256 * 8192 // 8 + 8192
P70_FIRST = P70_LAST - 8192  # the embedding instead of the output layer and the final norm


def test_torchtitan_always_regathers_every_micro_batch_under_pp(tmp_path):
    """fsdp_reshard_after_forward "always" under PP (torchtitan apply_fsdp @e347b1e5e: resharded
    after every forward; torch.distributed.pipelining leaves each unit gathered after its
    backward and reduces once): m + 1 all-gathers of the stage's bf16 weights a step where
    "default" (no resharding under PP) gathers once, the same single reduce-scatter; so the DP
    traffic differs by m x one gather of the 4,410,187,776 stage parameters over the 4 FSDP
    ranks in 40 units (a block each), at m = 4 and m = 8. The memory: a unit is gathered from its
    backward to its next forward (stacks.sharding_traits regather_pp), so the peak holds the
    stage's weights less one micro-batch's activations, if more. A TOML with
    "always" and pp 2 reads as the mode and exports back as "always"; with pp 1 it is fsdp2."""
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    assert P70_LAST == 4_410_187_776
    for gb, m in ((16, 4), (32, 8)):
        kw = dict(model="llama3-70b", gpus=64, tp=8, pp=2, global_batch=gb, stack="torchtitan")
        s, p, a = _run(**kw, sharding_mode="fsdp2_reshard_always")
        d = _run(**kw, sharding_mode="fsdp2")[2]
        sc = _context(s, p)
        coll = Collectives(sc)
        ag = 40 * float(coll(comm.ALL_GATHER, P70_LAST * 2.0 / 40, 4, coll.strides["dp"]))
        diff = float(a.time_extra["dp_comm_s"]) - float(d.time_extra["dp_comm_s"])
        assert diff == pytest.approx(m * ag, rel=1e-9)
        # memory: the heaviest stage is the first (40 blocks and the embedding), which holds min(m, p)
        # = 2 micro-batches in flight; "always" gathers its weights only as a backward frees a
        # micro-batch's activations, so the peak drops by min(its bf16 weights, one micro-batch's
        # activations): at 8,192 tokens the weights (8.2 GiB) are the smaller
        a_mb = float(d.memory["layer_activations"]) / 2
        assert a_mb > 2 * P70_FIRST
        assert float(d.memory.total) - float(a.memory.total) == pytest.approx(2 * P70_FIRST, rel=1e-9)
        assert float(a.time.total) > float(d.time.total)
    # at 1,024 tokens one micro-batch's activations (2.7 GiB) are the smaller
    kw = dict(model="llama3-70b", gpus=64, tp=8, pp=2, global_batch=16, seq_len=1024, stack="torchtitan")
    a1, d1 = _run(**kw, sharding_mode="fsdp2_reshard_always")[2], _run(**kw, sharding_mode="fsdp2")[2]
    a_mb = float(d1.memory["layer_activations"]) / 2
    assert a_mb < 2 * P70_FIRST
    assert float(d1.memory.total) - float(a1.memory.total) == pytest.approx(a_mb, rel=1e-9)
    from planner.plan import plan_dict

    plan = plan_dict(p, s)
    assert plan["sharding_mode"] == "fsdp2_reshard_always"
    text, _ = export_plan(plan, "torchtitan")
    assert 'fsdp_reshard_after_forward = "always"' in text
    path = tmp_path / "always.toml"
    path.write_text(text, encoding="utf-8")
    cfg = load_trainer_config(path, fmt="torchtitan", model="llama3-70b", gpus=64)
    assert cfg.job["sharding_mode"] == "fsdp2_reshard_always"
    path.write_text(text.replace("pipeline_parallel_degree = 2", "pipeline_parallel_degree = 1"), encoding="utf-8")
    assert load_trainer_config(path, fmt="torchtitan", model="llama3-70b", gpus=32).job["sharding_mode"] == "fsdp2"


def test_fsdp_unit_count_is_the_layer_count():
    """FSDP issues one all-gather and one reduce-scatter a layer unit (step.dp_comm, no fs.fsdp_bucket_params): the
    count is the stage's layer count itself. Llama 3 405B on torchtitan, tp 2, pp 1, 64 GPUs (dp 32): p = (2 x
    128,256 x 16,384 + 126 x 3,187,671,040) / 2 + 126 x 2 x 16,384 + 16,384 = 202,928,766,976 parameters a GPU (the
    TP-split matrices / 2, the norms whole); the float round trip ceil(p / (p / 126)) the count took before gave 127
    (p / (p / 126) = 126.00000000000001): one collective's latency too many each direction."""
    import math

    p = (2 * 128_256 * 16_384 + 126 * 3_187_671_040) // 2 + 126 * 2 * 16_384 + 16_384
    assert p == 202_928_766_976 and math.ceil(p / (p / 126)) == 127
    s, pl, ev = _run(model="llama3-405b", gpus=64, tp=2, stack="torchtitan", sharding="fsdp", global_batch=64,
                     seq_len=4096)
    sc = _context(s, pl)
    coll = Collectives(sc)
    assert int(pl.dp) == 32 and int(pl.pp) == 1

    def per_unit(op, per_param):
        return float(126 * coll(op, p * per_param / 126, 32, coll.strides["dp"]))

    ag = per_unit(comm.ALL_GATHER, s.stack.fsdp.param_gather_bytes)
    rs = per_unit(comm.REDUCE_SCATTER, s.stack.fsdp.grad_reduce_bytes)
    m = int(pl.microbatches)
    assert float(ev.time_extra["dp_comm_s"]) == pytest.approx(m * (2 * ag + rs), rel=1e-9)
