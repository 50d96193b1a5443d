"""explain's hardware FLOPs per token are what the kernels run (issue 22/24 audit): causal attention
cores and the recomputation, the count HFU and "TFLOP/s per GPU executed" use (step.throughput).
Before, flops.hardware_flops_per_token added the recomputation to the MFU-convention model FLOPs
(non-causal by default), so explain's two lines disagreed: gemma3-27b on 64 H100 at 32K printed
"hardware (with recompute) 1.808e+11" per token beside "514 TFLOP/s per GPU executed" at 2,977
tokens/s per GPU, which is 1.727e+11 per token.

By hand, mistral-7b (32 layers, 32 heads x 128, window 4,096) at seq 8,192: the causal kernel's
mean keys w - w^2 / (2 s) = 4,096 - 4,096^2 / 16,384 = 3,072 (planner/layers/attention.py), the
non-causal span min(s, w) = 4,096; 12 a d = 12 x 4,096 FLOPs a key (PaLM App. B). Full recompute
adds one forward: 2N + the cores' forward, a third of 12 a d x 3,072 a layer."""

from __future__ import annotations

import pytest

JOB = dict(model="mistral-7b", gpus=8, seq_len=8192, global_batch=8, micro_batch=1, sharding="zero1")


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_hardware_flops_are_the_causal_kernels_and_the_recompute(explain, recompute):
    *_, js = explain(**JOB, recompute=recompute)
    fl, thr = js["flops"], js["throughput"]
    n = js["params"]["active"]
    causal, span = 32 * 12 * 4096 * 3072.0, 32 * 12 * 4096 * 4096.0
    assert fl["attention_counted"] == "non-causal"
    assert fl["model_flops_per_token"] == pytest.approx(6 * n + span, rel=1e-12)
    rc = (2 * n + causal / 3) if recompute == "full" else 0.0
    assert fl["recompute_flops_per_token"] == pytest.approx(rc, rel=1e-12)
    assert fl["hardware_flops_per_token"] == pytest.approx(6 * n + causal + rc, rel=1e-12)
    # the same count as the executed rate and HFU
    assert fl["hardware_flops_per_token"] * thr["tokens_per_s_per_gpu"] / 1e12 == pytest.approx(
        thr["hardware_tflops_per_gpu"], rel=1e-12)
    assert thr["hfu"] == pytest.approx(thr["hardware_tflops_per_gpu"] / thr["peak_tflops"], rel=1e-12)
