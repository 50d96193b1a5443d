"""Megatron-FSDP's fixed double-buffer pools (the job's mfsdp_double_buffer, planner/memory.py [db], term
mfsdp_double_buffer; the Megatron reader's --fsdp-double-buffer / --use-nccl-ub /
--megatron-fsdp-max-pool-double-buffer, and its --megatron-fsdp-version / --outer-dp-sharding-strategy), derived by
hand from NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py:

- with fsdp_double_buffer (arguments.py l. 1172-1181: set by --fsdp-double-buffer, --use-nccl-ub and
  --megatron-fsdp-max-pool-double-buffer) the weight and the gradient buckets of the layer units come from a
  FixedPoolAllocator of size 2 (l. 2524-2576), each buffer a GlobalMemoryBuffer tensor (utils.py l. 769-803:
  allocated at its first use, never freed): two layer units' gathered weights (2 B) where the weights are sharded
  (optim_grads_params) and two layer units' gradient buckets (the main gradients' dtype) where the gradients are
  (optim_grads, optim_grads_params);
- the all-gather prefetch stops at the second unit (need_skip_prefetch, l. 4475-4484) and the gradient queue keeps
  at most two units' buckets (_enforce_double_buffer_limit l. 3956-3977, called from main_grad_getter l. 3099): no
  prefetched layer units beyond the pool (fsdp_gathered_units 0) and no queue beyond the peak (zero2_reduce_input 0);
- the non-unit buckets (embedding, output layer: fsdp_unit_id None) are outside the pools (l. 781, 835-845, backup
  allocator): the end's gradient bucket the backward's peak holds stays fsdp_unit_grads (g x V h / t)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import PlannerError
from planner.explain import evaluate
from planner.memory import allocated_bytes
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

DATA = Path(__file__).parent / "data" / "megatron_ci" / "args"
ROW = DATA / "gpt__gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor_1node__dev_dgx_gb200.args"
U8B = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096  # Llama 3 8B layer + its two norms


def _mem(mode, sharding, db, recompute="full", bpp="mixed16"):
    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, tp=1, sharding=sharding, sharding_mode=mode, stack="megatron",
                          global_batch=16, micro_batch=1, seq_len=4096, recompute=recompute, bytes_per_param=bpp,
                          mfsdp_double_buffer=db))
    return evaluate(s, p).memory


def test_optim_grads_params_pools_by_hand():
    """Llama 3 8B, 8 GPUs, tp 1, full recompute, bf16 gradients (mixed16). u = 218,112,000 a GPU.
    Without the double buffer ([pf], [rs]): 4 units gathered (the current one and 3 prefetched: P = 5e8) = 8 u B,
    and the queue's excess 12 u - 5 a - 2 x 525,336,576 (a = 2 h T = 33,554,432 B).
    With it: the pools 2 units x 2 B (weights) + 2 units x 2 B (gradients) = 8 u = 1,744,896,000 B; no layer unit
    gathered beyond them, no queue excess; the end's gradient bucket 2 x 525,336,576 B as before."""
    assert U8B == 218_112_000
    off, on = _mem("megatron_fsdp_optim_grads_params", "fsdp", False), _mem("megatron_fsdp_optim_grads_params", "fsdp", True)
    a = 2 * 4096 * 4096
    assert float(off["fsdp_gathered_units"]) == 8 * U8B
    assert float(off["zero2_reduce_input"]) == pytest.approx(12 * U8B - 5 * a - 2 * 525_336_576, rel=1e-12)
    assert float(off["mfsdp_double_buffer"]) == 0.0
    assert float(on["mfsdp_double_buffer"]) == 8 * U8B == 1_744_896_000
    assert float(on["fsdp_gathered_units"]) == 0.0 and float(on["zero2_reduce_input"]) == 0.0
    assert float(on["fsdp_unit_grads"]) == float(off["fsdp_unit_grads"]) == 2 * 525_336_576
    # the allocated peak: the prefetched units and the queue's excess out, the pools in
    assert float(allocated_bytes(on)) - float(allocated_bytes(off)) == pytest.approx(
        8 * U8B - 8 * U8B - (12 * U8B - 5 * a - 2 * 525_336_576), rel=1e-12)


def test_optim_grads_gradient_pool_by_hand():
    """optim_grads (zero2 level: the weights whole, no weight pool; fetch_bucket returns the whole buffer's slice,
    l. 1328-1336): the gradient pool alone, 2 units x 2 B = 4 u = 872,448,000 B, in place of the queue's
    12 u - 5 a = 2,449,571,840 B; with fp32 main gradients (the megatron preset) 2 x 4 u = 1,744,896,000 B."""
    off, on = _mem("megatron_fsdp_optim_grads", "zero2", False), _mem("megatron_fsdp_optim_grads", "zero2", True)
    a = 2 * 4096 * 4096
    assert float(off["zero2_reduce_input"]) == pytest.approx(12 * U8B - 5 * a, rel=1e-12)
    assert float(on["zero2_reduce_input"]) == 0.0
    assert float(on["mfsdp_double_buffer"]) == 4 * U8B == 872_448_000
    assert float(on["fsdp_gathered_units"]) == float(on["fsdp_unit_grads"]) == 0.0
    fp32 = _mem("megatron_fsdp_optim_grads", "zero2", True, bpp="megatron")
    assert float(fp32["mfsdp_double_buffer"]) == 8 * U8B == 1_744_896_000


def test_other_modes_hold_no_pool():
    """The distributed optimizer (no Megatron-FSDP queue) and Megatron-FSDP optim (no sharded buffer to pool:
    the weights and gradients whole) hold none; a stack without Megatron-FSDP refuses the field."""
    assert float(_mem("distributed_optimizer", "zero1", True)["mfsdp_double_buffer"]) == 0.0
    assert float(_mem("megatron_fsdp_optim", "zero1", True)["mfsdp_double_buffer"]) == 0.0
    with pytest.raises(PlannerError, match="mfsdp_double_buffer is set but stack torchtitan"):
        resolve(Job(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", mfsdp_double_buffer=True))


def _explain(path, *extra):
    r = CliRunner().invoke(app, ["explain", str(path), "--gpus", "4", "--hardware", "gb200-nvl72", "--format", "json",
                                 *extra])
    return r


def _row(tmp_path, *lines):
    f = tmp_path / "row.args"
    f.write_text(ROW.read_text() + "".join(l + "\n" for l in lines))
    return f


@pytest.mark.parametrize("flag", ["--fsdp-double-buffer", "--use-nccl-ub", "--megatron-fsdp-max-pool-double-buffer"])
def test_ci_row_with_double_buffer_by_hand(tmp_path, flag):
    """gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor_1node (4 GB200, TP 2, DP 2, optim_grads_params, fp32 main
    gradients) with each flag that sets fsdp_double_buffer: its layer unit u = 1,577,728 a GPU
    (tests/test_megatron_ci.py test_hand_computed_megatron_fsdp_buffers): the pools 2 u x 2 B + 2 u x 4 B =
    18,932,736 B, in place of the 12 gathered layer units (all prefetched: 12 u x 2 B = 37,865,472 B); the end's
    gradient bucket 4 B x 12,910,592 = 51,642,368 B (fsdp_unit_grads) and the non-unit buckets 26,871,808 B
    (fsdp_unsharded_ends) unchanged; the allocated peak 37,865,472 - 18,932,736 = 18,932,736 B lower. NCCL's pool
    (--use-nccl-ub) is a private pool of the caching allocator: the same allocated bytes, nothing moved outside."""
    base, db = _explain(ROW), _explain(_row(tmp_path, flag))
    assert base.exit_code == 0 and db.exit_code == 0, db.output
    b = json.loads(base.stdout)["memory"]
    d = json.loads(db.stdout)["memory"]
    u = 1_577_728
    assert b["terms"]["fsdp_gathered_units"] == 12 * u * 2 == 37_865_472
    assert d["terms"]["fsdp_gathered_units"] == 0.0
    assert d["terms"]["mfsdp_double_buffer"] == 2 * u * 2 + 2 * u * 4 == 18_932_736
    assert d["terms"]["fsdp_unit_grads"] == b["terms"]["fsdp_unit_grads"] == 4 * 12_910_592
    assert d["terms"]["fsdp_unsharded_ends"] == b["terms"]["fsdp_unsharded_ends"] == 26_871_808
    assert b["allocated_bytes"] - d["allocated_bytes"] == 18_932_736
    assert b["total_bytes"] - b["reserved_bytes"] == d["total_bytes"] - d["reserved_bytes"]  # the outside terms
    assert "mfsdp_double_buffer=true: " + flag in db.stderr
    assert "unknown to the planner" not in db.stderr  # read, not listed as not modelled


def test_reader_refusals_and_lists(tmp_path):
    """--megatron-fsdp-version 2 with --use-distributed-optimizer (the row has it): Megatron asserts (arguments.py
    l. 1124-1126), so does the reader (exit 2); without it, at the row's TP 2 v2's _validate_config raises
    (tests/test_megatron_fsdp_outer_optim.py); at TP 1 it is the job's mfsdp_v2 (memory.py [v2]). --outer-dp-sharding-strategy
    optim without HSDP is ignored (read only under Hybrid FSDP, l. 2498-2501); with HSDP at optim_grads Megatron
    raises (l. 2502-2512); --fsdp-double-buffer without --use-megatron-fsdp is ignored."""
    r = _explain(_row(tmp_path, "--megatron-fsdp-version 2"))
    assert r.exit_code == 2 and "not compatible with --use-distributed-optimizer" in r.output and "Traceback" not in r.output
    text = ROW.read_text().replace("--use-distributed-optimizer\n", "") + "--megatron-fsdp-version 2\n"
    f = tmp_path / "v2.args"
    f.write_text(text)
    r = _explain(f)  # the row's TP 2: v2's _validate_config raises (mcore_fsdp_adapter.py l. 627-648)
    assert r.exit_code == 2 and "tp=2" in r.output and "Traceback" not in r.output
    text = (text.replace("--tensor-model-parallel-size 2\n", "").replace("--calculate-per-token-loss\n", "")
            .replace("--sequence-parallel\n", ""))
    f.write_text(text)
    r = _explain(f)  # at TP 1 without per-token loss (l. 674-675) it runs: the job's mfsdp_v2 (memory.py [v2])
    assert r.exit_code == 0 and "mfsdp_v2=true: --megatron-fsdp-version 2" in r.stderr
    assert "--megatron-fsdp-version=2" not in r.stderr  # no longer listed as not modelled
    cfg = load_trainer_config(_row(tmp_path, "--outer-dp-sharding-strategy optim"), gpus=4)
    assert any(i.startswith("--outer-dp-sharding-strategy=optim (no HSDP") for i in cfg.ignored)
    assert not cfg.unmodelled or not any("outer-dp" in u for u in cfg.unmodelled)
    text = (ROW.read_text().replace("optim_grads_params", "optim_grads")
            + "--outer-dp-sharding-strategy optim\n--num-distributed-optimizer-instances 2\n")
    f.write_text(text)
    r = CliRunner().invoke(app, ["explain", str(f), "--gpus", "8", "--hardware", "gb200-nvl72"])
    assert r.exit_code == 2 and "only supported with full-sharding on DP-Shard" in r.output
    text = ROW.read_text().replace("--use-megatron-fsdp\n", "") + "--fsdp-double-buffer\n"
    f.write_text(text)
    cfg = load_trainer_config(f, gpus=4)
    assert any(i.startswith("--fsdp-double-buffer=true (no --use-megatron-fsdp") for i in cfg.ignored)
    assert "mfsdp_double_buffer" not in cfg.job


def test_export_writes_the_flag_and_reads_back():
    """export --format megatron writes --fsdp-double-buffer for a plan with the pools, and the script reads back as
    the same plan and memory (planner.cli.export.check_readback); another mode is refused, as is the Bridge writer."""
    from planner.cli.export import check_readback
    from planner.explain import to_json
    from planner.trainers.export import export_plan

    job = dict(model="llama3-8b", gpus=8, stack="megatron", sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params",
               recompute="full", global_batch=16, micro_batch=1, seq_len=4096, mfsdp_double_buffer=True)
    s, p, _ = resolve(Job(**job))
    row = to_json(s, p, evaluate(s, p))
    assert row["plan"]["mfsdp_double_buffer"] is True
    text, _ = export_plan(row["plan"], "megatron")
    assert "--fsdp-double-buffer" in text.split()
    check_readback(row, "megatron", text)
    with pytest.raises(PlannerError, match="only Megatron-FSDP reads"):
        export_plan({**row["plan"], "sharding": "zero1", "sharding_mode": "distributed_optimizer"}, "megatron")


def test_virtual_chunks_share_one_pool():
    """pp 2 with 2 virtual chunks a rank: each chunk is its own Megatron-FSDP module, but the pools' buffers are
    GlobalMemoryBuffer tensors named by the pool (fsdp_params / fsdp_grads, buffer, offset: l. 2534, 2554, 855-858),
    one buffer set a process (utils.py l. 798-803): still 2 x 2 B + 2 x 2 B = 8 u a rank, not 8 u a chunk (the
    chunk's 8 layers >= 2)."""
    s, p, _ = resolve(Job(model="llama3-8b", gpus=8, tp=1, pp=2, vpp=2, sharding="fsdp",
                          sharding_mode="megatron_fsdp_optim_grads_params", stack="megatron", global_batch=16,
                          micro_batch=1, seq_len=4096, recompute="full", bytes_per_param="mixed16",
                          mfsdp_double_buffer=True))
    assert float(evaluate(s, p).memory["mfsdp_double_buffer"]) == 8 * U8B  # the heaviest stage's
