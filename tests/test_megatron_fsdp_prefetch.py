"""Megatron-FSDP's all-gather prefetch (planner/memory.py [pf], term fsdp_gathered_units; stack_db megatron
fsdp.gather_prefetch_share 0.5), derived by hand from NVIDIA/Megatron-LM @d98e8a64
megatron/core/distributed/fsdp/src/megatron_fsdp/: megatron_fsdp.py l. 420-444 sets suggested_AG_prefetch_size =
max(1e9, total_param_elements // total_fsdp_module * 2) // 2 for optim_grads_params (5e8 while the average
TransformerLayer is below 5e8 parameters); each unit's pre-forward / pre-backward all-gather (l. 793-811, 918-931)
appends the next FSDP units' bucket groups while the parameters already prefetched are below it
(param_and_grad_buffer.py l. 4487-4516): ceil(5e8 / u) units of u beside the current one, at most the chunk's layers;
the weights in bf16 (2 B).

The non-unit buckets (memory.py [nu], term fsdp_unsharded_ends): the FSDP units are TransformerLayer /
MoETransformerLayer / MambaLayer (mcore_fsdp_adapter.py l. 163-173); the embedding, output layer and final norm are
buckets of no unit, all-gathered by their modules' forward pre-hooks and never released (no post-forward or
post-backward release outside units, megatron_fsdp.py l. 977-1001, 684-705, 1074-1125; release_bucket's docstring
"Non-unit modules should remain persistently allocated", param_and_grad_buffer.py l. 4612-4650;
synchronize_param_gather's reset(preserve_non_fsdp_units=True) keeps their storage, l. 4339-4386), so the stage
holding them keeps them unsharded the whole step; the current unit is then a layer, not the embedding."""
from __future__ import annotations

import math

import pytest

from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job


def _layer(h, kv, f):
    """One Llama 3 layer's parameters: q, o (h x h), k, v (h x kv), gate, up, down (h x f)."""
    return 2 * h * h + 2 * h * kv + 3 * h * f


def _mem(model, gpus, tp, mode="megatron_fsdp_optim_grads_params", sharding="fsdp", **extra):
    s, p, _ = resolve(Job(model=model, gpus=gpus, tp=tp, sharding=sharding, sharding_mode=mode, stack="megatron",
                          global_batch=16, micro_batch=1, seq_len=4096, recompute="full", bytes_per_param="mixed16",
                          **extra))
    return evaluate(s, p).memory


def test_llama3_8b_tp1_prefetches_three_layers():
    """u = 218,103,808 + two norms 8,192 = 218,112,000; 2 u < 1e9 so P = 5e8: ceil(5e8 / u) = ceil(2.29) = 3
    prefetched beside the current layer: 4 u x 2 = 1,744,896,000 B. The non-unit buckets (pp 1: both ends) E = 128,256
    x 4,096 = 525,336,576 embedding, E untied output layer, 4,096 final norm: (2 E + 4,096) x 2 = 2,101,354,496 B.
    Together 3,846,250,496 B; before [nu] (E + 3 u) x 2 = 2,359,345,152 B (the embedding priced as the current unit,
    the output layer not at all): +1,486,905,344 B."""
    u = _layer(4096, 1024, 14336) + 2 * 4096
    assert u == 218_112_000
    assert math.ceil(5e8 / u) == 3
    emb = 128_256 * 4096
    assert 4 * u * 2 == 1_744_896_000 and (2 * emb + 4096) * 2 == 2_101_354_496
    assert 1_744_896_000 + 2_101_354_496 - (emb + 3 * u) * 2 == 1_486_905_344
    for mode, sharding, extra in (("megatron_fsdp_optim_grads_params", "fsdp", {}),
                                  ("megatron_fsdp_hsdp", "hsdp", {"shard_group": 4})):
        m = _mem("llama3-8b", 8, 1, mode, sharding, **extra)
        assert float(m["fsdp_gathered_units"]) == 1_744_896_000
        assert float(m["fsdp_unsharded_ends"]) == 2_101_354_496


@pytest.mark.parametrize("gpus", [8, 64])
def test_llama3_70b_tp8_prefetches_five_layers(gpus):
    """u = 855,638,016 / 8 + 2 x 8,192 = 106,971,136 a GPU; P = 5e8: ceil(4.67) = 5 prefetched (80 layers a chunk):
    6 u x 2 = 1,283,653,632 B; non-unit buckets E / 8 = 131,334,144 twice (untied) + the 8,192 final norm:
    (2 E/8 + 8,192) x 2 = 525,352,960 B; on 8 and 64 GPUs alike (a GPU's units do not depend on dp). Together
    1,809,006,592 B; before [nu] (E/8 + 5 u) x 2 = 1,332,379,648 B."""
    u = _layer(8192, 1024, 28672) // 8 + 2 * 8192
    assert u == 106_971_136 and math.ceil(5e8 / u) == 5
    assert 6 * u * 2 == 1_283_653_632 and (2 * 128_256 * 8192 // 8 + 8192) * 2 == 525_352_960
    m = _mem("llama3-70b", gpus, 8, padded_vocab_size=128256)  # E: the catalog's 128,256 rows (megatron pads 129,024)
    assert float(m["fsdp_gathered_units"]) == 1_283_653_632
    assert float(m["fsdp_unsharded_ends"]) == 525_352_960


def test_prefetch_bounded_by_the_chunk():
    """Llama 3 8B at pp 16 (2 layers a stage, one chunk): at most the chunk's 2 layers gathered, not 4: 2 u x 2 =
    872,448,000 B. The binding stage is the last: its output layer E and final norm (E + 4,096) x 2 = 1,050,681,344 B
    kept gathered (the first stage's embedding alone would be E x 2 = 1,050,673,152)."""
    u = _layer(4096, 1024, 14336) + 2 * 4096
    assert 2 * u * 2 == 872_448_000 and (128_256 * 4096 + 4096) * 2 == 1_050_681_344
    m = _mem("llama3-8b", 16, 1, pp=16)
    assert float(m["fsdp_gathered_units"]) == 872_448_000
    assert float(m["fsdp_unsharded_ends"]) == 1_050_681_344


def test_other_fsdp_modes_keep_two_units():
    """torch_fsdp2 in the same stack has no reduce-scatter queue (runs.sharding reduce_queue_units null): the stack's
    gathered_units_at_peak, 2 x E x 2 B = 2,101,346,304 B."""
    m = _mem("llama3-8b", 8, 1, "torch_fsdp2")
    assert float(m["fsdp_gathered_units"]) == 2 * 525_336_576 * 2
    assert float(m["fsdp_unsharded_ends"]) == 0.0  # the megatron stack's fsdp.unsharded_ends is empty
