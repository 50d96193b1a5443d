"""Megatron-FSDP's all-gather prefetch (planner/memory.py [pf], term fsdp_gathered_units; stack_db megatron
fsdp.gather_prefetch_share 0.5), derived by hand from NVIDIA/Megatron-LM @d98e8a64
megatron/core/distributed/fsdp/src/megatron_fsdp/: megatron_fsdp.py l. 420-444 sets suggested_AG_prefetch_size =
max(1e9, total_param_elements // total_fsdp_module * 2) // 2 for optim_grads_params (5e8 while the average
TransformerLayer is below 5e8 parameters); each unit's pre-forward / pre-backward all-gather (l. 793-811, 918-931)
appends the next FSDP units' bucket groups while the parameters already prefetched are below it
(param_and_grad_buffer.py l. 4487-4516): ceil(5e8 / u) units of u beside the current one. The current unit is
priced as the largest unit (the embedding here, as the stack's gathered_units_at_peak priced it), the prefetched
ones as the largest layer unit; the weights in bf16 (2 B)."""
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
    prefetched. E = 128,256 x 4,096 = 525,336,576 (the largest unit). (E + 3 u) x 2 = 2,359,345,152 B; before this
    change 2 units of E: 2,101,346,304 B."""
    u = _layer(4096, 1024, 14336) + 2 * 4096
    assert u == 218_112_000
    assert math.ceil(5e8 / u) == 3
    emb = 128_256 * 4096
    assert (emb + 3 * u) * 2 == 2_359_345_152
    for mode, sharding, extra in (("megatron_fsdp_optim_grads_params", "fsdp", {}),
                                  ("megatron_fsdp_hsdp", "hsdp", {"shard_group": 4})):
        assert float(_mem("llama3-8b", 8, 1, mode, sharding, **extra)["fsdp_gathered_units"]) == 2_359_345_152


@pytest.mark.parametrize("gpus", [8, 64])
def test_llama3_70b_tp8_prefetches_five_layers(gpus):
    """u = 855,638,016 / 8 + 2 x 8,192 = 106,971,136 a GPU; P = 5e8: ceil(4.67) = 5 prefetched (80 layers a chunk);
    E / 8 = 131,334,144. (E/8 + 5 u) x 2 = 1,332,379,648 B on 8 and 64 GPUs alike (a GPU's units do not depend on dp);
    before: 2 x E/8 x 2 = 525,336,576 B."""
    u = _layer(8192, 1024, 28672) // 8 + 2 * 8192
    assert u == 106_971_136 and math.ceil(5e8 / u) == 5
    assert (128_256 * 8192 // 8 + 5 * u) * 2 == 1_332_379_648
    assert float(_mem("llama3-70b", gpus, 8)["fsdp_gathered_units"]) == 1_332_379_648


def test_prefetch_bounded_by_the_chunk():
    """Llama 3 8B at pp 16 (2 layers a stage, one chunk): at most the chunk's 2 layers prefetched, not 3. On the first
    stage layer 1's backward gathers layer 1 and prefetches layer 0 (u < 5e8) then the embedding's bucket: E + 2 u;
    (E + 2 u) x 2 = 1,923,121,152 B (the term is stage-independent: a middle stage holds 2 u, priced E + 2 u)."""
    u = _layer(4096, 1024, 14336) + 2 * 4096
    assert (128_256 * 4096 + 2 * u) * 2 == 1_923_121_152
    assert float(_mem("llama3-8b", 16, 1, pp=16)["fsdp_gathered_units"]) == 1_923_121_152


def test_other_fsdp_modes_keep_two_units():
    """torch_fsdp2 in the same stack has no reduce-scatter queue (runs.sharding reduce_queue_units null): the stack's
    gathered_units_at_peak, 2 x E x 2 B = 2,101,346,304 B."""
    assert float(_mem("llama3-8b", 8, 1, "torch_fsdp2")["fsdp_gathered_units"]) == 2 * 525_336_576 * 2
