"""The attention kernel each stack runs (compute.py [7], [7a]): Transformer Engine picks cuDNN's
fused attention over FlashAttention on compute capability >= 9.0 (get_attention_backend @4329ff84),
so the megatron stack prices cuDNN's rates on Hopper and FlashAttention-2's on Ampere
(Blackwell stays on FlashAttention-2's until a cuDNN rate is measured there: stack uncertain);
a job's attention_kernel (Megatron --attention-backend flash | fused) overrides it. The
rates are the FlashAttention-3 paper's bar labels (tests/data/attention_kernels_h100.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.catalog import load_hardware, load_stack
from planner.compute import (
    ATTENTION_KERNELS, ATTN_BLOCK_KEYS, ATTN_BLOCK_TABLES, ATTN_BWD_FLOPS_RATIO, SUSTAINED_TENSOR_FRACTION,
    attention_block_rate, attention_kernel, attention_rates, gemm_plateau,
)
from planner.power import power_rate_fraction

DATA = yaml.safe_load((Path(__file__).parent / "data" / "attention_kernels_h100.yaml").read_text())


def test_tables_are_the_paper_figures():
    """compute.py's block tables are the figures' bar labels, and the hardware entries' cuDNN
    figures the means of the 2k-16k bars (617 609 600 595 -> 605.25; 465 499 518 516 -> 499.5)."""
    assert list(ATTN_BLOCK_KEYS) == DATA["seq_len"]
    for kernel in ("flash2", "cudnn"):
        fwd, bwd = ATTN_BLOCK_TABLES[kernel]
        assert list(fwd) == DATA["forward_tflops"][kernel]
        assert list(bwd) == DATA["backward_tflops"][kernel]
    assert sum(DATA["forward_tflops"]["cudnn"][2:]) / 4 == 605.25
    assert sum(DATA["backward_tflops"]["cudnn"][2:]) / 4 == 499.5
    for name in ("h100-sxm", "h100-sxm-96gb-hbm2e", "h200-sxm", "h800-sxm"):
        c = load_hardware(name).compute
        assert (c.attention_kernels["cudnn"].fwd_TFLOPS, c.attention_kernels["cudnn"].bwd_TFLOPS) == (605, 500), name
        assert (c.attention_fwd_TFLOPS, c.attention_bwd_TFLOPS) == (365, 310), name
    # the unmeasured-GPU ratios: the H100 figure over H100's GEMM plateau (794.5 TFLOP/s)
    assert ATTENTION_KERNELS["cudnn"] == (605 / 794.5, 500 / 794.5)


def test_block_rate_follows_each_kernels_curve():
    """Relative to 16k keys: FlashAttention-2 at 2k 362/370, cuDNN 617/595 (cuDNN's forward
    peaks at 2k); backward 291/322 and 465/516."""
    assert attention_block_rate(2048) == pytest.approx(362 / 370)
    assert attention_block_rate(2048, kernel="cudnn") == pytest.approx(617 / 595)
    assert attention_block_rate(2048, True, "cudnn") == pytest.approx(465 / 516)
    assert attention_block_rate(2 ** 11.5, True, "cudnn") == pytest.approx((465 + 499) / 2 / 516)  # log2 midpoint


@pytest.mark.parametrize("stack,hw,kernel", [
    ("megatron", "h100-sxm", "cudnn"),       # sm 9.0: TE prefers FusedAttention
    ("megatron", "h800-sxm", "cudnn"),
    ("megatron", "b200", "flash2"),          # sm 10.0: TE runs cuDNN, no measured rate (stack uncertain)
    ("megatron", "gb300-nvl72", "flash2"),
    ("megatron", "a100-sxm-80gb", "flash2"),  # sm 8.0: FlashAttention
    ("megatron", "mi300x", "flash2"),         # no CUDA compute capability
    ("torchtitan", "h100-sxm", "flash2"),     # PyTorch SDPA's flash backend: no rule
    ("megatron-deepspeed", "h100-sxm", "flash2"),
])
def test_kernel_by_stack_and_gpu(stack, hw, kernel):
    assert attention_kernel(load_stack(stack), load_hardware(hw)) == kernel


def test_rule_ranges():
    """A rule holds the compute capabilities between its ends (both inclusive, null open); a
    GPU whose capability is not known matches none."""
    from planner.schema import AttentionKernelRule

    te = AttentionKernelRule(kernel="cudnn", min_compute_capability="9.0")  # TE 2.x: >= (9, 0)
    assert [te.holds(c) for c in ((8, 0), (8, 9), (9, 0), (10, 0), (10, 3), None)] == [False, False, True, True, True, False]
    hopper = load_stack("megatron").attention_kernels[0]
    assert [hopper.holds(c) for c in ((8, 9), (9, 0), (10, 0))] == [False, True, False]


def test_job_kernel_overrides_the_stack():
    st, hw = load_stack("megatron"), load_hardware("h100-sxm")
    assert attention_kernel(st, hw, "flash2") == "flash2"
    assert attention_kernel(load_stack("torchtitan"), hw, "cudnn") == "cudnn"


def test_rates_measured_and_unmeasured():
    """H100: the entry's cuDNN figures at the sustained clock (x 0.85); B200 (no attention
    figure): its GEMM plateau x 605 / 794.5 forward, 500 / 794.5 backward."""
    h100 = load_hardware("h100-sxm")
    k = SUSTAINED_TENSOR_FRACTION * power_rate_fraction(h100)
    assert attention_rates(h100, "cudnn") == pytest.approx((605e12 * k, 500e12 * k))
    assert attention_rates(h100) == pytest.approx((365e12 * k, 310e12 * k))
    b200 = load_hardware("b200")
    plat = gemm_plateau(b200, "bf16")
    assert attention_rates(b200, "cudnn") == pytest.approx((plat * 605 / 794.5, plat * 500 / 794.5))


def test_core_time_moves_by_the_rate_ratio(explain):
    """Llama 3 8B on 8 H100, TP 1, no recompute, one pipeline stage: the job with FlashAttention-2
    (Megatron --attention-backend flash) and the default (cuDNN) differ only in the attention
    cores: per layer and micro-batch (one 8,192-token sequence) the causal kernel runs
    4 s^2 a d / 2 FLOPs forward and 2.5x that backward, at 365 / 310 against 605 / 500 TFLOP/s
    (x 0.85 sustained)."""
    job = dict(model="llama3-8b", gpus=8, tp=1, pp=1, global_batch=16, micro_batch=1, seq_len=8192, recompute="none",
               sharding="zero1")
    _, _, _, cud = explain(**job)
    _, _, _, fa2 = explain(**job, attention_kernel="flash2")
    assert cud["plan"]["attention_kernel"] == "cudnn" and fa2["plan"]["attention_kernel"] == "flash2"
    k = SUSTAINED_TENSOR_FRACTION
    flops = 4 * 8192 * 8192 * 32 * 128 / 2
    per_layer = (flops / (365e12 * k) - flops / (605e12 * k)
                 + ATTN_BWD_FLOPS_RATIO * flops * (1 / (310e12 * k) - 1 / (500e12 * k)))
    m, layers = 16 // 8, 32
    assert fa2["time"]["compute_s"] - cud["time"]["compute_s"] == pytest.approx(m * layers * per_layer, rel=1e-9)
    # 549.8 GFLOP a kernel: forward 1.772 - 1.069 ms, backward 5.216 - 3.234 ms; 2.685 ms x 64
    assert m * layers * per_layer == pytest.approx(0.1718, abs=0.0001)


def test_megatron_flags_and_export(tmp_path):
    """--attention-backend flash | fused name the kernel (job attention_kernel flash2 | cudnn),
    auto leaves it to the stack; the Megatron export writes the flag only where the plan's
    kernel is not what auto runs on its GPU, and reads back as the same kernel."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    fused = load_trainer_config("tests/data/trainer_configs/train_llama3_8b_h100_fp8.sh")  # --attention-backend fused
    assert fused.job["attention_kernel"] == "cudnn"
    job = dict(model="llama3-8b", gpus=8, tp=1, global_batch=16, micro_batch=1, seq_len=8192, sharding="zero1")
    auto = resolved_plan(Job(**job))
    assert auto["attention_kernel"] == "cudnn" and "--attention-backend" not in export_plan(auto, "megatron")[0]
    fa2 = resolved_plan(Job(**job, attention_kernel="flash2"))
    text = export_plan(fa2, "megatron")[0]
    assert "--attention-backend flash" in text
    p = tmp_path / "fa2.sh"
    p.write_text(text)
    back = load_trainer_config(p)
    assert back.job["attention_kernel"] == "flash2"
    assert resolved_plan(Job.model_validate(back.job))["attention_kernel"] == "flash2"


def test_head_dim_64_rates_are_the_paper_figures():
    """compute.py [7b]: the rate at head dim 64 over the rate at 128 is the ratio of the means of
    the 2k-16k bars of the head-dim-64 and head-dim-128 panels: FlashAttention-2 forward
    (318+321+322+324)/4 = 321.25 over 367.5 = 0.8741, backward 280.25 / 310.25 = 0.9033; cuDNN
    forward 407 / 605.25 = 0.6725, backward 419.25 / 499.5 = 0.8393."""
    from planner.compute import ATTN_HEAD_DIM_TABLES, attention_head_dim_factor

    hd = DATA["head_dim_64"]
    for kernel in ("flash2", "cudnn"):
        fwd, bwd = ATTN_HEAD_DIM_TABLES[kernel]
        assert fwd[0] == sum(hd["forward_tflops"][kernel][2:]) / 4
        assert bwd[0] == sum(hd["backward_tflops"][kernel][2:]) / 4
        assert fwd[1] == sum(DATA["forward_tflops"][kernel][2:]) / 4
        assert bwd[1] == sum(DATA["backward_tflops"][kernel][2:]) / 4
    assert attention_head_dim_factor(64, "flash2") == pytest.approx((0.87415, 0.90330), abs=5e-5)
    assert attention_head_dim_factor(64, "cudnn") == pytest.approx((0.67245, 0.83934), abs=5e-5)
    # linear in log2(head dim): 2^6.5 = 90.5 is the midpoint; held at the ends
    f64, b64 = attention_head_dim_factor(64, "cudnn")
    assert attention_head_dim_factor(2 ** 6.5, "cudnn") == pytest.approx(((1 + f64) / 2, (1 + b64) / 2))
    assert attention_head_dim_factor(32, "cudnn") == pytest.approx((f64, b64))
    for d in (128, 192, 256):  # MLA's 192: the head-dim-128 rate
        assert attention_head_dim_factor(d, "cudnn") == pytest.approx((1.0, 1.0))
    assert attention_head_dim_factor(None) == (1.0, 1.0)


def test_core_time_at_head_dim_64(explain):
    """gpt-oss-120b's 64-wide heads: on H100 with cuDNN (megatron) a global layer's causal core
    of one 4,096-token sequence runs 4 x 4096 x 64 x 64 x 2048 = 137.4 GFLOP forward at
    605 x 0.67245 x 0.85 TFLOP/s (0.3974 ms) and 2.5x that backward at 500 x 0.83934 x 0.85
    (0.9632 ms); with the head-dim-128 rates it was 0.2672 and 0.8084 ms."""
    import numpy as np
    from planner import step as S
    from planner.compute import attention_head_dim_factor

    settings, plan, _, _ = explain(model="gpt-oss-120b", gpus=8, tp=1, pp=1, global_batch=8, micro_batch=1,
                                   seq_len=4096, recompute="none", sharding="zero1", ep=8)
    sc = S._context(settings, plan)
    lt = S.layer_times(sc)
    glob = [i for i, k in enumerate(sc.ll.kinds) if k.mixer.window is None]
    assert len(glob) == 1
    i = glob[0]
    flops = 4 * 4096 * 64 * 64 * 2048
    f, b = attention_head_dim_factor(64, "cudnn")
    k = SUSTAINED_TENSOR_FRACTION
    assert float(np.ravel(lt.core_fwd[i])[0]) == pytest.approx(flops / (605e12 * f * k), rel=1e-9)
    assert float(np.ravel(lt.core_fwd[i])[0]) == pytest.approx(0.3974e-3, abs=5e-8)
    assert float(np.ravel(lt.core_bwd[i])[0]) == pytest.approx(2.5 * flops / (500e12 * b * k), rel=1e-9)
    assert float(np.ravel(lt.core_bwd[i])[0]) == pytest.approx(0.9632e-3, abs=5e-8)
