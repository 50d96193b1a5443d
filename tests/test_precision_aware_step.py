"""Megatron-LM's precision-aware optimizer at the step (planner/memory.py [sg], [mg]; plan._bytes_per_param; stack_db
megatron runs.low_precision_moments te_master, runs.sharding step_grads fp32_decoupled), by hand from NVIDIA/Megatron-LM
@d98e8a64 and NVIDIA/TransformerEngine @4329ff84:

- optimizer_config.py l. 407-413: use_precision_aware_optimizer_no_fp8_or_ds_fp8 = --use-precision-aware-optimizer and
  (--main-params-dtype below fp32, or no fp8 recipe / delayed scaling, or the CPU offload).
- Where it holds, optimizer/__init__.py l. 576-588 builds TE's FusedAdam with master_weights, use_decoupled_grad,
  master_weight_dtype and store_param_remainders (optimizer_config.py l. 192: True, no flag) and the distributed
  optimizer hands it the grad buffer's shard itself as decoupled_grad (distrib_optimizer.py l. 2784-2790): no fp32
  copy, whatever the main gradients' and the moments' dtypes; FusedAdam keeps an fp32 master of bf16 parameters as
  int16 remainders (fused_adam.py l. 213-215, 612, 414-415): 2 B.
- Elsewhere (fp8 blockwise, tensorwise, mxfp8 with fp32 main weights) Megatron keeps its own fp32 master and
  shard_main_param.grad = shard_model_grad.float() (l. 2792): a 4 B copy of the shard where the buffer is bf16.

Llama 3 8B: P = 8,030,261,248 parameters; on 8 GPUs the distributed optimizer's shard L = P / 8. HELD: what every
moment beside the states holds (tests/test_memory_step_grads.py)."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError

P = 8_030_261_248
L = P / 8
HELD = ("workspaces", "mpu_buffer", "model_buffers", "quantized_weights", "dummy_wgrads")
BF16_MOMENTS_BF16_GRADS = {"weights": 2, "gradients": 2, "master": 4, "optimizer": 4}


def _8b(explain, **kw):
    job = dict(model="llama3-8b", gpus=8, stack="megatron", sharding="zero1", recompute="full", micro_batch=1,
               global_batch=8, seq_len=1024, hardware="h100-sxm")
    s, _, _, j = explain(**{**job, **kw})
    return s, j["memory"]


def _held(t):
    return sum(t[k] for k in HELD)


def test_bf16_main_grads_bf16_moments_no_fp32_copy(explain):
    """--main-grads-dtype bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, bf16 training: the states are 2 P (bf16
    weights) + 2 P (the bf16 grad buffer) + 2 L (the master's remainders) + 4 L (m, v in bf16). Before, the step was
    priced with a 4 L fp32 copy of the shard: 4 P + 10 L + HELD = 43,746,940,928 B allocated, term 2,807,695,360 B.
    Now no copy: the term is 0 and the peak is the backward's, exactly 4 L below the same job's with fp32 moments
    (2+2+2+8: both without copy, the same activations)."""
    s, m = _8b(explain, bytes_per_param=BF16_MOMENTS_BF16_GRADS)
    t = m["terms"]
    assert (s.precision_aware, s.te_master) == (True, True)
    assert (t["weights"], t["gradients"], t["master_weights"], t["adam"]) == pytest.approx((2 * P, 2 * P, 2 * L, 4 * L),
                                                                                          rel=1e-12)
    assert t["step_grad_copies"] == 0.0
    assert m["allocated_bytes"] < 4 * P + 10 * L + _held(t)  # the old step moment is gone
    _, m8 = _8b(explain, bytes_per_param="mixed16", precision_aware_optimizer=True)
    assert m8["terms"]["step_grad_copies"] == 0.0 and m8["terms"]["master_weights"] == pytest.approx(2 * L, rel=1e-12)
    assert m8["allocated_bytes"] - m["allocated_bytes"] == pytest.approx(4 * L, rel=1e-12)


def test_fp32_moments_with_bf16_main_grads(explain):
    """--use-precision-aware-optimizer --main-grads-dtype bf16 with fp32 moments (the bytes of mixed16): TE's FusedAdam
    holds the master (2 B remainders) and reads the bf16 shard: the step holds 2 P + 2 P + 2 L + 8 L, no copy. The same
    bytes without the precision-aware optimizer (--grad-reduce-in-bf16) keep Megatron's fp32 master and copy the shard:
    4 P + 16 L + HELD (tests/test_memory_step_grads.py)."""
    s, m = _8b(explain, bytes_per_param="mixed16", precision_aware_optimizer=True)
    t = m["terms"]
    assert (s.precision_aware, s.te_master, s.bpp.master) == (True, True, 2.0)
    assert (t["master_weights"], t["adam"], t["step_grad_copies"]) == pytest.approx((2 * L, 8 * L, 0.0), rel=1e-12)
    s0, m0 = _8b(explain, bytes_per_param="mixed16")
    assert (s0.precision_aware, s0.te_master) == (False, False)
    assert m0["terms"]["step_grad_copies"] > 0
    assert m0["allocated_bytes"] == pytest.approx(4 * P + 16 * L + _held(m0["terms"]), rel=1e-12)
    # fp32 main gradients: the same remainders, and .float() of an fp32 buffer is no copy either way
    _, m32 = _8b(explain, bytes_per_param="megatron", precision_aware_optimizer=True)
    assert m32["terms"]["master_weights"] == pytest.approx(2 * L, rel=1e-12) and m32["terms"]["step_grad_copies"] == 0.0


def test_fp8_recipes_where_megatron_keeps_the_master(explain):
    """Delayed scaling keeps TE's master (no copy, remainders); blockwise with fp32 main weights is Megatron's own fp32
    master and its .float() copy of the bf16 shard: 2 P + 2 P + 4 L + 4 L + 4 L = 4 P + 12 L + HELD at the step."""
    s, m = _8b(explain, bytes_per_param=BF16_MOMENTS_BF16_GRADS, precision="fp8", fp8_recipe="delayed")
    assert (s.te_master, s.bpp.master, m["terms"]["step_grad_copies"]) == (True, 2.0, 0.0)
    s, m = _8b(explain, bytes_per_param=BF16_MOMENTS_BF16_GRADS, precision="fp8", fp8_recipe="blockwise")
    t = m["terms"]
    assert (s.precision_aware, s.te_master, s.bpp.master) == (True, False, 4.0)
    assert t["step_grad_copies"] > 0
    assert m["allocated_bytes"] == pytest.approx(4 * P + 12 * L + _held(t), rel=1e-12)


def test_fp16_training_keeps_the_fp32_master(explain):
    """--fp16: TE's FusedAdam holds the master (no fp8 recipe) but keeps remainders of bf16 parameters only
    (fused_adam.py l. 612): master 4 B, and no copy (decoupled_grad)."""
    s, m = _8b(explain, bytes_per_param={"weights": 2, "gradients": 4, "master": 4, "optimizer": 4}, fp16=True)
    assert (s.te_master, s.bpp.master, m["terms"]["step_grad_copies"]) == (True, 4.0, 0.0)


def test_explicit_field_refusals():
    """precision_aware_optimizer true on a stack without one, and false with moments below fp32 on Megatron, where
    its optimizer asserts fp32 states without it (optimizer_config.py l. 475-480)."""
    from planner.plan import resolve
    from planner.schema import Job

    base = dict(model="llama3-8b", gpus=8, hardware="h100-sxm")
    with pytest.raises(PlannerError, match="runs no precision-aware optimizer"):
        resolve(Job(**base, stack="torchtitan", precision_aware_optimizer=True))
    with pytest.raises(PlannerError, match="precision_aware_optimizer false"):
        resolve(Job(**base, stack="megatron", bytes_per_param="bf16-moments", precision_aware_optimizer=False))


def test_fit_ranks_only_distributed_optimizer_modes_and_explain_agrees(cli):
    """With the field the plan needs the distributed optimizer (optimizer/__init__.py l. 1057): fit keeps no ddp row,
    the plan's JSON says the field (its bytes do not imply it), no row copies the shard, and explain of each row's
    reproduce line prices the same memory terms."""
    from conftest import explain_each_row
    from planner.schema import Job

    job = Job(model="llama3-8b", gpus=8, hardware="h100-sxm", stack="megatron", bytes_per_param="mixed16",
              precision_aware_optimizer=True, recompute="full", global_batch=8, seq_len=1024)
    args = ["--model", "llama3-8b", "--gpus", "8", "--hardware", "h100-sxm", "--stack", "megatron", "--bytes-per-param",
            "mixed16", "--precision-aware-optimizer", "--recompute", "full", "--global-batch", "8", "--seq-len", "1024",
            "--format", "json"]
    r = cli("fit", *args)
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) >= 2
    assert all(row["plan"]["sharding_mode"] != "ddp" for row in rows)
    assert all(row["plan"].get("precision_aware_optimizer") is True for row in rows)
    assert all(row["memory"]["terms"]["step_grad_copies"] == 0.0 for row in rows)
    for row, one in explain_each_row(cli, job, rows):
        assert one["memory"]["terms"] == row["memory"]["terms"], row["plan"]


def test_reader_sets_the_field_and_export_writes_it_back(cli, tmp_path):
    """The Megatron reader's --use-precision-aware-optimizer --main-grads-dtype bf16 (fp32 moments): the job keeps
    mixed16's bytes and says precision_aware_optimizer; priced with the remainders and no copy; the export writes the
    two flags back (not --grad-reduce-in-bf16)."""
    from pathlib import Path

    from planner.plan import resolve
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import _megatron_state_flags

    sh = Path(__file__).parent / "data" / "trainer_configs" / "train_llama3_8b_h100_fp8.sh"
    text = sh.read_text()
    assert "    --grad-reduce-in-bf16\n" in text
    p = tmp_path / sh.name
    p.write_text(text.replace("    --grad-reduce-in-bf16\n", "    --use-distributed-optimizer --use-precision-aware-optimizer "
                                                                "--main-grads-dtype bf16\n"))
    cfg = load_trainer_config(p)
    assert cfg.job["precision_aware_optimizer"] is True and cfg.job["bytes_per_param"] == "mixed16"
    settings, _, warnings = resolve(Job(**cfg.job))
    assert (settings.precision_aware, settings.bpp.master) == (True, 2.0)  # delayed fp8, the script's recipe
    assert any("16-bit remainders" in w for w in warnings)
    plan = {"bytes_per_param": "mixed16", "precision_aware_optimizer": True}
    assert _megatron_state_flags(plan, "distributed_optimizer", []) == [
        ("--use-precision-aware-optimizer", None), ("--main-grads-dtype", "bf16")]
    assert _megatron_state_flags({**plan, "bytes_per_param": "megatron"}, "distributed_optimizer", []) == [
        ("--use-precision-aware-optimizer", None)]
    with pytest.raises(PlannerError, match="only with the distributed optimizer"):
        _megatron_state_flags(plan, "ddp", [])
