"""Transformer Engine's P2P context-parallel ring under fp8 attention (step.py cp_ring_comm [17];
stack_db megatron fp8_recipes fp8_attention cp_ring_kv_bytes, cp_ring_dkv_bytes), derived by hand
from TransformerEngine @4329ff84 context_parallel.py AttnFuncWithCPAndKVP2P:

  bf16 ring (fp8 attention off): forward cp - 1 sends of the local K/V (2 B an element); backward
      the K/V (first step), K/V with the dK/dV partials in one buffer (middle steps), the dK/dV
      alone (last step), all bf16 (dkv_bytes 2).
  fp8 attention, delayed scaling: forward cp - 1 sends of the fp8 K/V (1 B: q, k, v quantized before
      the ring, l. 1579-1583, 1741, 1757); backward cp - 1 sends of the fp8 K/V alone and, at the last
      step, one all-to-all of the (cp, local K/V) uint8 dK/dV buffer (l. 2416-2421, 2528-2535).

On one HGX H100 every transfer is on NVLink: a send is NV_LAT + bytes / NV_BW, an all-to-all of a
buffer S over n ranks (n - 1) NV_LAT + (n - 1) / n S / NV_BW (comm.py, direct). TP 2: 4 of the
8 KV heads (head dim 128) a rank, so K and V hold 2 x 4 x 128 = 1,024 elements a local token."""

from __future__ import annotations

import pytest

from planner import comm
from planner.catalog import load_stack

NV_BW = 450e9 * comm.NVLINK_RING_EFFICIENCY  # H100 NVLink, achievable (hardware_db h100-sxm nvlink_GBps 450)
NV_LAT = comm.NVLINK_LATENCY_S
SEQ, M = 8192, 2  # one 8,192-token sequence a micro-batch, two micro-batches (global batch 2, dp 1)
LAYERS = {"llama3-8b": 32, "llama3-70b": 80}


def send(b):
    return NV_LAT + b / NV_BW


def a2a(size, n):
    return (n - 1) * NV_LAT + (n - 1) / n * size / NV_BW


def ring_by_hand(cp: int, fp8: bool) -> float:
    """Seconds of one layer's ring transfers per micro-batch, forward and backward."""
    kv_el = SEQ // cp * 2 * 4 * 128  # the local K and V
    n = cp - 1
    if not fp8:
        kv, dkv = 2 * kv_el, 2 * kv_el
        return n * send(kv) + (send(kv) + send(dkv) + (n - 1) * send(kv + dkv))
    kv = 1 * kv_el
    return n * send(kv) + (n * send(kv) + a2a(cp * kv_el * 1, cp))


def _job(model, cp, fp8):
    job = dict(model=model, gpus=2 * cp, tp=2, cp=cp, global_batch=M, micro_batch=1, seq_len=SEQ,
               stack="megatron")
    if fp8:
        job.update(precision="fp8", fp8_recipe="delayed", fp8_attention=True)
    return job


@pytest.mark.parametrize("model", ["llama3-8b", "llama3-70b"])
@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("fp8", [False, True])
def test_ring_bytes_by_hand(explain, model, cp, fp8):
    _, _, _, js = explain(**_job(model, cp, fp8))
    assert js["plan"]["recompute"] == "none"  # no forward runs twice: no K/V exchange again
    total = M * LAYERS[model] * ring_by_hand(cp, fp8)
    assert js["time"]["cp_comm_total_s"] == pytest.approx(total, rel=1e-9)
    # every transfer fits in its step's kernel: only the stack's exposed share of it shows
    x = load_stack("megatron").overlap.overlapped_exposed_fraction
    assert js["time"]["cp_comm_s"] == pytest.approx(x * total, rel=1e-9)


def test_fp8_ring_moves_fewer_bytes():
    """cp 4, 8B: forward 3 x 2 MiB in place of 3 x 4 MiB; backward 3 x 2 MiB and a 6 MiB all-to-all
    (3/4 of the 8 MiB buffer) in place of 4 + 4 + 2 x 8 MiB."""
    kv_el = SEQ // 4 * 1024
    assert kv_el == 2 * 2**20
    fp8_bytes = 3 * kv_el + 3 * kv_el + 3 / 4 * 4 * kv_el
    bf16_bytes = 3 * 2 * kv_el + (2 * kv_el + 2 * kv_el + 2 * 4 * kv_el)
    assert (fp8_bytes / 2**20, bf16_bytes / 2**20) == (18.0, 36.0)
    assert ring_by_hand(4, True) < ring_by_hand(4, False)


def test_all_gather_and_a2a_unchanged_by_fp8_attention(explain):
    """Transformer Engine's all_gather and a2a CP exchange before the quantization (the a2a: l. 1543,
    bf16): fp8 attention leaves their transfers as they are."""
    for kind in ("all_gather", "a2a"):
        _, _, _, off = explain(**_job("llama3-8b", 4, False), cp_comm_type=kind)
        _, _, _, on = explain(**_job("llama3-8b", 4, True), cp_comm_type=kind)
        assert on["time"]["cp_comm_total_s"] == pytest.approx(off["time"]["cp_comm_total_s"], rel=1e-12)


@pytest.mark.parametrize("cp", [2, 4])
def test_mxfp8_rings_bf16_kv_and_a_uint8_dkv_all_to_all(explain, cp):
    """MXFP8 on one B200 node (fp8 attention from sm100): the K/V stay bf16 (2 B, quantized per step,
    l. 976-979, 2370), the backward's dK/dV one all-to-all of the (cp, local K/V) uint8 buffer (1 B),
    each priced by comm.group_collective at the CP stride (tp 2)."""
    from planner.catalog import load_hardware

    hw = load_hardware("b200")
    cpar = comm.comm_params(hw)
    kv_el = SEQ // cp * 1024

    def coll(op, size):
        return float(comm.group_collective(op, size, cp, 2, cpar, comm.AUTO, job_gpus=2 * cp)[0].time_s)

    n = cp - 1
    by_hand = n * coll(comm.SEND_RECV, 2 * kv_el) + n * coll(comm.SEND_RECV, 2 * kv_el) + coll(comm.ALL_TO_ALL, cp * kv_el)
    job = dict(_job("llama3-8b", cp, False), hardware="b200", precision="fp8", fp8_recipe="mxfp8", fp8_attention=True)
    _, _, _, js = explain(**job)
    assert js["time"]["cp_comm_total_s"] == pytest.approx(M * 32 * by_hand, rel=1e-9)
