"""Megatron-FSDP's HSDP with the outer-DP optimizer sharding (the job's mfsdp_outer_optim; planner/memory.py [oo],
step.py [29]; Megatron --outer-dp-sharding-strategy optim, Megatron-Bridge ddp.outer_dp_sharding_strategy), its
--megatron-fsdp-version 2 refusals, and Megatron-Bridge's ddp.fsdp_double_buffer / ddp.nccl_ub, derived by hand from
NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py:

- should_create_hfsdp_helper_buffers (hybrid FSDP and outer_dp_sharding_strategy != no_shard, l. 2498-2501) builds
  the main weight buffer (fp32) over DP-Outer x DP-Shard (get_dp_group, l. 2596-2598), allocated at its own size
  (l. 2881-2884): 4 B x P / (dp x cp) a rank; the model weight buffer and the main gradient buffer are views into the
  shard-group helper buffers (l. 2738-2764, 3754-3800), which own the storage: 2 B x P / shard group, as under
  no_shard; Adam's moments follow the optimizer's parameters, the main weight buffer's shards: 8 B x P / (dp x cp);
- the replicas' gradient all-reduce (no_shard, l. 4200-4207) becomes a reduce-scatter into the dp x cp shard
  (l. 4180-4199), and the 16-bit weights are all-gathered across the replicas at the first micro-batch
  (l. 4543-4563).

Llama 3 8B: P = 8,030,261,248 parameters."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

P8B = 8_030_261_248


def _eval(outer, stack="megatron", bpp="mixed16", gpus=64, shard=8):
    s, p, _ = resolve(Job(model="llama3-8b", gpus=gpus, tp=1, sharding="hsdp", shard_group=shard, stack=stack,
                          global_batch=256, micro_batch=1, seq_len=4096, recompute="full", bytes_per_param=bpp,
                          gradient_accumulation_fusion=False, mfsdp_outer_optim=outer))
    return s, p, evaluate(s, p)


def test_states_by_hand():
    """64 GPUs, tp 1, shard group 8 (8 replicas), bf16 weights and gradients (mixed16: 2+2+4+8 B). no_shard: every
    state over the shard group, master 4 P / 8 = 4,015,130,624 B, Adam 8 P / 8 = 8,030,261,248 B; optim: master
    4 P / 64 = 501,891,328 B, Adam 8 P / 64 = 1,003,782,656 B; the weights 2 P / 8 = 2,007,565,312 B and the gradients
    2 P / 8 the same under both."""
    _, _, off = _eval(False)
    _, _, on = _eval(True)
    assert float(off.memory["master_weights"]) == 4 * P8B / 8 == 4_015_130_624
    assert float(off.memory["adam"]) == 8 * P8B / 8 == 8_030_261_248
    assert float(on.memory["master_weights"]) == 4 * P8B / 64 == 501_891_328
    assert float(on.memory["adam"]) == 8 * P8B / 64 == 1_003_782_656
    for k in ("weights", "gradients"):
        assert float(on.memory[k]) == float(off.memory[k]) == 2 * P8B / 8 == 2_007_565_312


def test_fsdp_plan_unchanged():
    """The setting acts on HSDP plans only (stacks.outer_optim: the level hsdp): a plan at the fsdp level prices the
    same with it on or off, and plan_dict writes it on HSDP plans alone."""
    rows = []
    for outer in (False, True):
        s, p, _ = resolve(Job(model="llama3-8b", gpus=8, tp=1, sharding="fsdp", stack="megatron", global_batch=16,
                              micro_batch=1, seq_len=4096, recompute="full", bytes_per_param="mixed16",
                              gradient_accumulation_fusion=False, mfsdp_outer_optim=outer))
        rows.append(to_json(s, p, evaluate(s, p)))
    assert rows[0]["memory"]["total_bytes"] == rows[1]["memory"]["total_bytes"]
    assert "mfsdp_outer_optim" not in rows[1]["plan"]
    s, p, r = _eval(True)
    assert to_json(s, p, r)["plan"]["mfsdp_outer_optim"] is True


def test_replica_traffic_by_hand():
    """The replicas' exchange (step.py [29]): under no_shard an all-reduce of the shard-group gradient shard (g P / 8
    B) across the 8 replicas, a ring's 2 x 7/8 of it on each rank; under optim a reduce-scatter of the same shard
    (7/8 g P / 8) and an all-gather of the 16-bit weights' shard (7/8 x 2 P / 8), once a step each, as many ring steps
    as the all-reduce's. At 2-byte gradients (mixed16) the two move the same bytes in the same steps: the DP totals
    are equal. At 4-byte gradients (megatron) optim moves 7/8 x (4 + 2) P / 8 in place of 7/8 x 8 P / 8: 7/8 x 2 P / 8
    = 1,756,619,648 B less a rank, across the nodes (the replicas 8 ranks apart, one node each), at most at the
    h100-sxm NIC's 400 Gb/s = 50 GB/s (hardware_db network_Gbps): at least 35.1 ms less."""
    tot = {}
    for bpp in ("mixed16", "megatron"):
        for outer in (False, True):
            s, p, r = _eval(outer, bpp=bpp)
            tot[bpp, outer] = to_json(s, p, r)["time"]["dp_comm_s"]
    assert tot["mixed16", True] == pytest.approx(tot["mixed16", False], rel=1e-12)
    saved = tot["megatron", False] - tot["megatron", True]
    less = 7 / 8 * 2 * P8B / 8
    assert less == 1_756_619_648
    assert less / 50e9 <= saved <= less / 25e9  # the bytes at the NIC's rate, or at no less than half of it


def test_stack_without_the_mode_refuses():
    with pytest.raises(PlannerError, match="mfsdp_outer_optim is set but stack torchtitan"):
        resolve(Job(model="llama3-8b", gpus=8, stack="torchtitan", sharding="hsdp", shard_group=4,
                    mfsdp_outer_optim=True))


ARGS = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --seq-length 4096 --max-position-embeddings 8192 --micro-batch-size 1 "
        "--global-batch-size 256 --bf16 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
        "--ckpt-format fsdp_dtensor --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 "
        "--untie-embeddings-and-output-weights --disable-bias-linear --padded-vocab-size 128256 "
        "--no-gradient-accumulation-fusion --recompute-granularity full --recompute-method uniform "
        "--recompute-num-layers 1")


def _args(tmp_path, extra):
    f = tmp_path / "run.args"
    f.write_text((ARGS + " " + extra).replace(" --", "\n--") + "\n")
    return f


def test_megatron_reader_and_export_round_trip(tmp_path):
    """--outer-dp-sharding-strategy optim with 8 instances on 64 GPUs is the job's mfsdp_outer_optim (read, no longer
    listed as not modelled): the optimizer 12 B x P / 64 = 1,505,673,984 B; export --format megatron writes the flag
    back and the script reads back as the same plan and memory."""
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    cfg = load_trainer_config(_args(tmp_path, "--use-distributed-optimizer --num-distributed-optimizer-instances 8 "
                                              "--outer-dp-sharding-strategy optim"), gpus=64)
    assert cfg.job["mfsdp_outer_optim"] is True and cfg.job["sharding_mode"] == "megatron_fsdp_hsdp"
    assert not any("outer-dp" in str(u) for u in cfg.unmodelled)
    r = CliRunner().invoke(app, ["explain", str(_args(tmp_path, "--use-distributed-optimizer "
                                 "--num-distributed-optimizer-instances 8 --outer-dp-sharding-strategy optim")),
                                 "--gpus", "64", "--hardware", "h100-sxm", "--format", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)
    assert row["memory"]["optimizer_bytes"] == 12 * P8B / 64 == 1_505_673_984
    text, _ = export_plan(row["plan"], "megatron")
    assert "--outer-dp-sharding-strategy optim" in text
    check_readback(row, "megatron", text)
    with pytest.raises(PlannerError, match="only Megatron-FSDP's HSDP reads"):
        export_plan({**row["plan"], "sharding": "fsdp", "sharding_mode": "megatron_fsdp_optim_grads_params",
                     "shard_group": None}, "megatron")
    s, p, r2 = _eval(True)
    assert to_json(s, p, r2)["memory"]["optimizer_bytes"] == row["memory"]["optimizer_bytes"]


@pytest.mark.parametrize("extra,match", [
    ("--tensor-model-parallel-size 2", "tp=2"),
    ("--outer-dp-sharding-strategy optim --num-distributed-optimizer-instances 2", "outer DP sharding"),
    ("--calculate-per-token-loss", "per-token loss"),
    ("--use-nccl-ub", "fsdp_manual_registration"),
    ("--megatron-fsdp-max-pool-double-buffer", "megatron_fsdp_max_pool_double_buffer"),
    ("--delay-wgrad-compute", "delay_wgrad_compute"),
])
def test_v2_refusals(tmp_path, extra, match):
    """--megatron-fsdp-version 2: what FullyShardedDataParallelV2._validate_config raises on at model build
    (mcore_fsdp_adapter.py @d98e8a64 l. 603-705) is refused, exit 2, no traceback; --use-nccl-ub sets
    fsdp_manual_registration under Megatron-FSDP (arguments.py l. 1172-1177), which v2 refuses (l. 688-689)."""
    r = CliRunner().invoke(app, ["explain", str(_args(tmp_path, "--megatron-fsdp-version 2 " + extra)), "--gpus", "8",
                                 "--hardware", "h100-sxm"])
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output, r.output


def test_v2_gradient_accumulation_fusion_refused(tmp_path):
    """v2 refuses the gradient-accumulation fusion (l. 672-673), on unless --no-gradient-accumulation-fusion
    (arguments.py l. 2944-2948)."""
    f = _args(tmp_path, "--megatron-fsdp-version 2")
    f.write_text(f.read_text().replace("--no-gradient-accumulation-fusion\n", ""))
    r = CliRunner().invoke(app, ["explain", str(f), "--gpus", "8", "--hardware", "h100-sxm"])
    assert r.exit_code == 2 and "gradient accumulation fusion" in r.output, r.output


def test_v2_ignores_the_instances(tmp_path):
    """v2 shards over the whole dp x cp group (its DeviceMesh is pg_collection.dp_cp, l. 554): with 8 instances on 64
    GPUs the plan is optim_grads_params over dp 64 (optimizer 12 B x P / 64), the instances listed as ignored, v2 the
    job's mfsdp_v2 (memory.py [v2])."""
    cfg = load_trainer_config(_args(tmp_path, "--megatron-fsdp-version 2 --num-distributed-optimizer-instances 8"),
                              gpus=64)
    assert cfg.job["sharding_mode"] == "megatron_fsdp_optim_grads_params" and "shard_group" not in cfg.job
    assert any(str(i).startswith("--num-distributed-optimizer-instances=8 (Megatron-FSDP v2") for i in cfg.ignored)
    assert not any("num-distributed-optimizer-instances" in str(u) for u in cfg.unmodelled)
    assert cfg.job["mfsdp_v2"] is True and not any("megatron-fsdp-version" in str(u) for u in cfg.unmodelled)


BRIDGE = ("torchrun --nproc_per_node=8 --nnodes=8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config "
          "model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 "
          "model.virtual_pipeline_model_parallel_size=null model.context_parallel_size=1 model.sequence_parallel=false "
          "train.global_batch_size=256 ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params "
          "model.gradient_accumulation_fusion=false")


def _bridge(tmp_path, extra):
    f = tmp_path / "launch.sh"
    f.write_text(BRIDGE + " " + extra + "\n")
    return load_trainer_config(f, hardware="h100-sxm")


def test_bridge_reads_double_buffer_and_outer(tmp_path):
    """Megatron-Bridge (Megatron-Core 905c0e386, distributed_data_parallel_config.py l. 100, 117, 142):
    ddp.fsdp_double_buffer=true, or ddp.nccl_ub=true which sets it under Megatron-FSDP (param_and_grad_buffer.py
    l. 1663-1670), is the job's mfsdp_double_buffer (FixedPoolAllocator of two, l. 1969-2003, as d98e8a64's);
    ddp.outer_dp_sharding_strategy=optim under HSDP (8 instances) the job's mfsdp_outer_optim, without HSDP ignored
    (l. 1946-1949); neither is listed as an override the planner does not read."""
    for extra in ("ddp.fsdp_double_buffer=true", "ddp.nccl_ub=true"):
        c = _bridge(tmp_path, extra)
        assert c.job["mfsdp_double_buffer"] is True
        assert not any("does not read" in str(u) for u in c.not_modelled)
    c = _bridge(tmp_path, "ddp.outer_dp_sharding_strategy=optim ddp.num_distributed_optimizer_instances=8")
    assert c.job["mfsdp_outer_optim"] is True and c.job["sharding_mode"] == "megatron_fsdp_hsdp"
    c = _bridge(tmp_path, "ddp.outer_dp_sharding_strategy=optim")
    assert "mfsdp_outer_optim" not in c.job
    assert any(str(i).startswith("ddp.outer_dp_sharding_strategy=optim (no HSDP") for i in c.ignored)
    with pytest.raises(PlannerError, match="not one of Megatron-Core's values"):
        _bridge(tmp_path, "ddp.outer_dp_sharding_strategy=optim_grads")


def test_bridge_export_round_trip():
    """export --format megatron-bridge writes ddp.fsdp_double_buffer=true and ddp.outer_dp_sharding_strategy=optim
    (it used to refuse the double buffer) and reads back as the same plan and memory: the optimizer 12 B x P / 64
    (fp32 gradients, the Bridge mode's 4 B: --bytes-per-param megatron)."""
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    s, p, _ = resolve(Job(model="llama3-8b", gpus=64, tp=1, sharding="hsdp", shard_group=8, stack="megatron-bridge",
                          global_batch=256, micro_batch=1, seq_len=4096, recompute="full", bytes_per_param="megatron",
                          gradient_accumulation_fusion=False, mfsdp_outer_optim=True, mfsdp_double_buffer=True))
    row = to_json(s, p, evaluate(s, p))
    assert row["memory"]["optimizer_bytes"] == 12 * P8B / 64
    text, _ = export_plan(row["plan"], "megatron-bridge")
    assert "ddp.fsdp_double_buffer=true" in text and "ddp.outer_dp_sharding_strategy=optim" in text
    check_readback(row, "megatron-bridge", text)


def test_fit_row_command_names_it_on_hsdp_rows_only():
    """fit --mfsdp-outer-optim (issue 21 muonleft): a row's explain command (search.explain_args) names the option only
    where the row is HSDP (its plan records mfsdp_outer_optim, plan_dict); a zero2 / zero1 row's command leaves it out,
    as that row was priced without it (stacks.outer_optim: the level hsdp). Before, every row's command echoed it."""
    from planner.search import explain_args

    job = Job(model="llama3-8b", gpus=64, stack="megatron", mfsdp_outer_optim=True)
    row = {"plan": {**_row_plan(False), "mfsdp_outer_optim": True}}
    assert "--mfsdp-outer-optim" in explain_args(job, row)
    assert "--mfsdp-outer-optim" not in explain_args(job, {"plan": _row_plan(True)})
    r = CliRunner().invoke(app, ["fit", "--model", "llama3-8b", "--gpus", "64", "--mfsdp-outer-optim", "--top", "3"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if "row 1 in full" in x)
    assert ("--mfsdp-outer-optim" in line) == ("--sharding hsdp" in line)


def _row_plan(fsdp_level: bool) -> dict:
    """A priced row's plan: HSDP shard group 8 (the option on), or the fsdp level (the option off there)."""
    kw = dict(sharding="fsdp") if fsdp_level else dict(sharding="hsdp", shard_group=8)
    s, p, _ = resolve(Job(model="llama3-8b", gpus=64, tp=1, stack="megatron", global_batch=256, micro_batch=1,
                          seq_len=4096, mfsdp_outer_optim=True, **kw))
    return to_json(s, p, evaluate(s, p))["plan"]
