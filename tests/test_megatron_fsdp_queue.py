"""Megatron-FSDP optim_grads' reduce-scatter queue (planner/memory.py [rs], term zero2_reduce_input; stack_db
megatron fsdp.zero2_reduce_queue_params, zero2_reduce_queue_grad_bytes), derived by hand from
NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/: each TransformerLayer's unsharded
gradient bucket (bf16: main_grads_dtype 'auto') is allocated at its backward's first weight gradient and
reduce-scattered at its post-backward, after GradReducePipeline.wait_for_previous_grad_reduce has drained the
queue to at most 1e9 parameters (megatron_fsdp.py l. 420-443: max(1e9, the bucket size)); _root_post_backward's
reset frees every bucket at the end of the micro-batch's backward. So during the i-th layer's backward
min(i, k + 2) buckets of u parameters are live (k = floor(1e9 / u)), (i - 1) layer-micro-batches' activations a
freed: max(2 u, 2 m u - (m - 1) a), m = min(k + 2, the chunk's layers). The buckets hold the job's gradient bytes
(runs.sharding grads_in_job_dtype, memory.py [mg]): the jobs here keep 2-byte gradients (mixed16, Megatron-FSDP's
default); with fp32 ones (--megatron-fsdp-main-grads-dtype fp32: the megatron preset) each bucket is 4 u B."""
from __future__ import annotations

import pytest

from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job

GIB = 2**30


def _layer(h, kv, f):
    """One Llama 3 layer's parameters: q, o (h x h), k, v (h x kv), gate, up, down (h x f)."""
    return 2 * h * h + 2 * h * kv + 3 * h * f


def _mem(model, gpus, tp, recompute, mode="megatron_fsdp_optim_grads", sharding="zero2", bpp="mixed16"):
    s, p, _ = resolve(Job(model=model, gpus=gpus, tp=tp, sharding=sharding, sharding_mode=mode, stack="megatron",
                          global_batch=16, micro_batch=1, seq_len=4096, recompute=recompute, bytes_per_param=bpp))
    return evaluate(s, p).memory


def test_llama3_8b_queue_by_hand():
    """Llama 3 8B, 8 GPUs, tp 1, 4,096 tokens. u = 218,103,808 + the two norms 8,192 = 218,112,000 a GPU;
    k = floor(1e9 / u) = 4, m = min(6, 32) = 6. Full recompute: a = the layer's input, 2 h T = 33,554,432 B:
    12 u - 5 a = 2,449,571,840 B (2.28 GiB). No recompute: a = 570,949,632 B (the activation table's layer, 1/32
    of the stage's: 570,425,344 B and the fused attention core's fp32 log-sum-exp, 4,096 x 32 heads x 4 B =
    524,288 B, planner/layers/attention.py [ls]) > 2 u, so the first layer's bucket beside the peak: 2 u =
    436,224,000 B (0.41 GiB)."""
    u = _layer(4096, 1024, 14336) + 2 * 4096
    assert u == 218_112_000
    mem = _mem("llama3-8b", 8, 1, "full")
    a = 2 * 4096 * 4096
    assert float(mem["layer_activations"]) == 32 * a  # the stage's 32 layer inputs, one micro-batch
    assert float(mem["zero2_reduce_input"]) == pytest.approx(12 * u - 5 * a, rel=1e-12)
    assert 12 * u - 5 * a == 2_449_571_840
    mem = _mem("llama3-8b", 8, 1, "none")
    a = float(mem["layer_activations"]) / 32
    assert a == 570_425_344 + 4096 * 32 * 4 == 570_949_632
    assert float(mem["zero2_reduce_input"]) == pytest.approx(2 * u, rel=1e-12)


def test_llama3_8b_fp32_buckets_by_hand():
    """The same full-recompute plan with fp32 main gradients (the megatron preset; Megatron-FSDP with
    --megatron-fsdp-main-grads-dtype fp32, the bucket fetched in the main gradients' dtype, param_and_grad_buffer.py
    l. 3107-3111): m g u - (m - 1) a = 6 x 4 u - 5 a = 5,066,915,840 B (4.72 GiB)."""
    u, a = _layer(4096, 1024, 14336) + 2 * 4096, 2 * 4096 * 4096
    assert 24 * u - 5 * a == 5_066_915_840
    mem = _mem("llama3-8b", 8, 1, "full", bpp="megatron")
    assert float(mem["zero2_reduce_input"]) == pytest.approx(24 * u - 5 * a, rel=1e-12)


def test_llama3_70b_queue_by_hand():
    """Llama 3 70B, 16 GPUs, tp 8 (SP), dp 2, 4,096 tokens. u = 855,638,016 / 8 + 2 x 8,192 = 106,971,136;
    k = 9, m = min(11, 80) = 11. Full recompute: a = 2 h T / 8 = 8,388,608 B: 22 u - 10 a = 2,269,478,912 B
    (2.11 GiB). No recompute: a = 140,640,256 B (140,509,184 and the attention core's log-sum-exp, 4,096 x 8 heads
    x 4 B = 131,072, planner/layers/attention.py [ls]): 22 u - 10 a = 946,962,432 B (0.88 GiB)."""
    u = _layer(8192, 1024, 28672) // 8 + 2 * 8192
    assert u == 106_971_136
    mem = _mem("llama3-70b", 16, 8, "full")
    a = 2 * 8192 * 4096 // 8
    assert float(mem["layer_activations"]) == 80 * a
    assert float(mem["zero2_reduce_input"]) == pytest.approx(22 * u - 10 * a, rel=1e-12)
    assert 22 * u - 10 * a == 2_269_478_912
    mem = _mem("llama3-70b", 16, 8, "none")
    a = float(mem["layer_activations"]) / 80
    assert a == 140_509_184 + 4096 * 8 * 4 == 140_640_256
    assert float(mem["zero2_reduce_input"]) == pytest.approx(22 * u - 10 * a, rel=1e-12)
    assert 22 * u - 10 * a == 946_962_432


def test_queue_not_in_the_step_reducing_modes():
    """The distributed optimizer and optim reduce once a step into the whole gradient buffer: no queue; nor does
    --use-torch-fsdp2 (FSDP2's own terms: fsdp_unit_grads)."""
    for mode, sharding in (("distributed_optimizer", "zero1"), ("megatron_fsdp_optim", "zero1"), ("torch_fsdp2", "fsdp")):
        assert float(_mem("llama3-8b", 8, 1, "full", mode, sharding)["zero2_reduce_input"]) == 0.0


# optim_grads_params and its HSDP run the same GradReducePipeline (megatron_fsdp.py l. 707-787: grad_reduce_every_bprop
# for both; l. 867-901 the root post-backward's reset), their capacity max(1e9, twice the average FSDP unit) (l. 420-443;
# 2 u < 1e9 for both models here, so k is optim_grads'). The backward's peak already holds one unit's gradient at the
# job's bytes, fsdp_unit_grads = g x the largest unit (the embedding's / output layer's where larger): the queue's
# term is the excess over it. The unit's gathered weights (released at its post-backward, l. 684-705, after its
# bucket is queued) are fsdp_gathered_units' already; HSDP's replica all-reduce runs in place on the sharded main
# gradients (param_and_grad_buffer.py l. 4134-4220: no buffer without a custom grad-comm dtype).
EMB_8B = 128_256 * 4_096  # 525,336,576 > u: the largest unit of 8B at tp 1
EMB_70B_TP8 = 128_256 * 8_192 // 8  # 131,334,144 > u = 106,971,136


@pytest.mark.parametrize("mode,sharding,extra", [("megatron_fsdp_optim_grads_params", "fsdp", {}),
                                                 ("megatron_fsdp_hsdp", "hsdp", {"shard_group": 4})])
def test_optim_grads_params_queue_by_hand(mode, sharding, extra):
    """Llama 3 8B tp 1 (8 GPUs; HSDP 2 x 4): full recompute, 12 u - 5 a - 2 x 525,336,576 = 1,398,898,688 B (was 0:
    fsdp_unit_grads alone, 1,050,673,152 B); no recompute, max(2 u, ...) - 2 E < 0: 0. Llama 3 70B tp 8 (16 GPUs; HSDP
    2 x 8): full, 22 u - 10 a - 2 x 131,334,144 = 2,006,810,624 B; none, 946,962,432 - 262,668,288 = 684,294,144 B."""
    u8, a8 = _layer(4096, 1024, 14336) + 2 * 4096, 2 * 4096 * 4096
    u70, a70 = _layer(8192, 1024, 28672) // 8 + 2 * 8192, 2 * 8192 * 4096 // 8
    assert 12 * u8 - 5 * a8 - 2 * EMB_8B == 1_398_898_688
    assert 22 * u70 - 10 * a70 - 2 * EMB_70B_TP8 == 2_006_810_624
    for model, gpus, tp, rc, want in (("llama3-8b", 8, 1, "full", 1_398_898_688), ("llama3-8b", 8, 1, "none", 0.0),
                                      ("llama3-70b", 16, 8, "full", 2_006_810_624),
                                      ("llama3-70b", 16, 8, "none", 684_294_144)):
        gs = {"shard_group": gpus // 2 // tp} if extra else {}
        s, p, _ = resolve(Job(model=model, gpus=gpus, tp=tp, sharding=sharding, sharding_mode=mode, stack="megatron",
                              global_batch=16, micro_batch=1, seq_len=4096, recompute=rc, bytes_per_param="mixed16",
                              padded_vocab_size=128256, **gs))  # E: Llama 3's own 128,256 rows (megatron pads per tp)
        mem = evaluate(s, p).memory
        assert float(mem["fsdp_unit_grads"]) == 2 * (EMB_8B if model == "llama3-8b" else EMB_70B_TP8)
        assert float(mem["zero2_reduce_input"]) == pytest.approx(want, rel=1e-12, abs=1e-3)
    # no recompute on 70B: a = 140,640,256 B, as optim_grads' test reads it
    assert 22 * u70 - 10 * 140_640_256 - 2 * EMB_70B_TP8 == 684_294_144


def test_optim_grads_params_capacity_twice_the_average_unit():
    """Llama 3 405B at tp 4 (8 GPUs), full recompute: u = 3,187,671,040 / 4 + 2 x 16,384 = 796,950,528 a GPU, twice
    it 1,593,901,056 > 1e9, so optim_grads_params' queue keeps k = floor(2 u / u) = 2 buckets after a drain (optim_grads'
    1e9: k = 1): m = 4, a = 2 h T / 4 = 33,554,432 B, the peak's fsdp_unit_grads 2 u (the layer the largest unit):
    8 u - 3 a - 2 u = 4,681,039,872 B; optim_grads (zero2, m = 3): 6 u - 2 a = 4,714,594,304 B."""
    u, a = _layer(16384, 1024, 53248) // 4 + 2 * 16384, 2 * 16384 * 4096 // 4
    assert u == 796_950_528 and 2 * u > 1e9 > u
    assert 6 * u - 3 * a == 4_681_039_872 and 6 * u - 2 * a == 4_714_594_304
    mem = _mem("llama3-405b", 8, 4, "full", "megatron_fsdp_optim_grads_params", "fsdp")
    assert float(mem["fsdp_unit_grads"]) == 2 * u
    assert float(mem["zero2_reduce_input"]) == pytest.approx(6 * u - 3 * a, rel=1e-12)
    mem = _mem("llama3-405b", 8, 4, "full")
    assert float(mem["zero2_reduce_input"]) == pytest.approx(6 * u - 2 * a, rel=1e-12)
