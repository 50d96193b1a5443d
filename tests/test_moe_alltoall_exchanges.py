"""The alltoall dispatcher's own small exchanges beside the tokens' all-to-alls (planner/dispatch.py [12]; stack
moe_alltoall_exchanges), derived by hand from Megatron-LM @d98e8a64 token_dispatcher.py:

  - preprocess l. 543, 557, 570-575: each rank's int64 token counts per expert, E x 8 B, all-gathered over the
    tp_ep group (forward only; long tensors carry no gradient);
  - token_dispatch l. 718-723: the routing probabilities in an all-to-all of their own, one value a routed row in
    the router's dtype (bf16 without --moe-router-dtype, layers/moe.py ROUTER_DTYPE_BYTES), with the tokens'
    splits; mappings.py _AllToAll.backward l. 469-484: its gradient's all-to-all backward.

comm.py prices each as the tokens' (pairwise all-to-all: n - 1 rounds of the NVLink latency 3.4 us, (n - 1) / n of
the buffer at the ring's achievable NVLink bandwidth, H100: 450 GB/s x 0.8222 = 370 GB/s; the all-gather's ring the
same rounds, (n - 1) / n of its buffer).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import explain_job, h100_nvlink_ll_ring_s, h100_nvlink_ring_s

ROOT = Path(__file__).resolve().parent.parent


# comm.py's all-to-all (and ring all-gather) inside one NVLink domain: n - 1 rounds, (n - 1) / n of the buffer
_pairwise = h100_nvlink_ring_s


def _mixtral(**kw):
    base = dict(model="mixtral-8x7b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", bytes_per_param="megatron",
                global_batch=8, micro_batch=1, seq_len=4096, moe_rank_imbalance=1.0, stack="megatron")
    return explain_job(**{**base, **kw})


def _no_exchanges_stack(tmp_path: Path) -> str:
    """The megatron stack file without its moe_alltoall_exchanges block (the tokens' all-to-alls alone)."""
    text = (ROOT / "stack_db" / "megatron.yaml").read_text()
    head, _, rest = text.partition("\nmoe_alltoall_exchanges:")
    tail = rest[rest.index("\nmoe_host:\n"):]
    out = tmp_path / "megatron-noexchanges.yaml"
    out.write_text(head + tail)
    return str(out)


def test_probabilities_and_counts_by_hand():
    """Mixtral 8x7B (E 8, top-2, h 4096) on 8 H100s, EP 8 in one NVLink domain, dp 8: one micro-batch of
    T = 4096 tokens a rank, balanced routing, 32 MoE layers, no recompute.
      tokens' all-to-all: 4096 x 2 x 4096 x 2 B = 67,108,864 B, 4 a layer (dispatch, combine, their gradients);
      probabilities' all-to-all: 4096 x 2 rows x 2 B (bf16 router) = 16,384 B, 2 a layer (forward, backward):
        7 x 3.4 us + 7/8 x 16,384 / 370e9 = 23.8387 us;
      counts' all-gather: 8 ranks x 8 experts x 8 B = 512 B, 1 a layer, under NCCL's LL ring (comm.py "Protocols"):
        6.6 us + 7 x 0.6 us + 7/8 x 512 / 87.7e9 = 10.8051 us (Simple's 7 x 3.4 us + 7/8 x 512 / 370e9 = 23.8012 us).
    ep_comm = 32 x (4 t_tokens + 2 x 23.8387 us + 23.8012 us)."""
    _, _, _, js = _mixtral()
    t_tok = _pairwise(8, 4096 * 2 * 4096 * 2)
    t_p = _pairwise(8, 4096 * 2 * 2)
    t_c = h100_nvlink_ll_ring_s(8, 8 * 8 * 8)
    assert t_p == pytest.approx(23.8387e-6, rel=1e-5) and t_c == pytest.approx(10.8051e-6, rel=1e-5)
    m = js["moe"]
    assert m["probs_a2a_s"] == pytest.approx(32 * 2 * t_p, rel=1e-9)
    assert m["counts_gather_s"] == pytest.approx(32 * t_c, rel=1e-9)
    assert m["dispatch_s"] == pytest.approx(32 * 2 * t_tok, rel=1e-9)  # the tokens' alone, as before
    assert js["time"]["ep_comm_s"] == pytest.approx(32 * (4 * t_tok + 2 * t_p + t_c), rel=1e-9)


def test_router_dtype_sizes_the_probabilities():
    """--moe-router-dtype fp32: the probabilities' all-to-all moves 4 B a routed row (32,768 B); the counts'
    all-gather is unchanged."""
    _, _, _, js = _mixtral(moe_router_dtype="fp32")
    assert js["moe"]["probs_a2a_s"] == pytest.approx(32 * 2 * _pairwise(8, 4096 * 2 * 4), rel=1e-9)
    assert js["moe"]["counts_gather_s"] == pytest.approx(32 * h100_nvlink_ll_ring_s(8, 512), rel=1e-9)


def test_a_stack_without_them_prices_the_tokens_alone(tmp_path):
    """The same job on the megatron stack file without moe_alltoall_exchanges: ep_comm lower by exactly the two
    terms, both 0 in explain; nothing else in the step moves."""
    _, _, _, on = _mixtral()
    _, _, _, off = _mixtral(stack=_no_exchanges_stack(tmp_path))
    assert off["moe"]["probs_a2a_s"] == 0.0 and off["moe"]["counts_gather_s"] == 0.0
    extra = on["moe"]["probs_a2a_s"] + on["moe"]["counts_gather_s"]
    assert on["time"]["ep_comm_s"] - off["time"]["ep_comm_s"] == pytest.approx(extra, rel=1e-9)
    assert on["time"]["compute_s"] == off["time"]["compute_s"]


def test_flex_dispatchers_have_none():
    """DeepEP's and Hybrid-EP's kernels exchange their counts inside (their measured bandwidths): 0 for both."""
    for d in ("deepep", "hybridep"):
        _, _, _, js = _mixtral(moe_dispatcher=d)
        assert js["moe"]["probs_a2a_s"] == 0.0 and js["moe"]["counts_gather_s"] == 0.0


def test_counts_stay_exposed_under_the_a2a_overlap():
    """Qwen3-30B-A3B (E 128, top-8) on 8 B200, EP 8, pp 1, m = 8 micro-batches, 48 layers. With
    ep_comm_overlap the combined 1F1B hides the probabilities' all-to-alls with the tokens' (tests/test_moe.py
    test_ep_overlap_one_stage_by_hand: the first forward and last backward alone, 7 of 8 phases at the exposed
    share 0.189), but the counts' all-gather runs in the attention node on the compute stream
    (fine_grained_callables.py @d98e8a64 l. 126-129): exposed in full. Per layer and micro-batch, t the tokens'
    all-to-all, p the probabilities', c the counts':
      off: 8 x 48 x (4 t + 2 p + c);  on: 48 x (4 t + 2 p) (1 + 7 x 0.189) + 8 x 48 x c."""
    from conftest import explain_job as ej

    base = dict(model="qwen3-30b-a3b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", bytes_per_param="megatron",
                global_batch=64, micro_batch=1, seq_len=4096, hardware="b200", moe_rank_imbalance=1.0,
                moe_permute_fusion=True, moe_router_fusion=True, stack="megatron")
    _, _, _, off = ej(**base)
    _, _, _, on = ej(**base, ep_comm_overlap=True)
    m = off["moe"]
    four_t = (m["dispatch_s"] + m["combine_s"]) / (8 * 48)
    two_p = m["probs_a2a_s"] / (8 * 48)
    c = m["counts_gather_s"] / (8 * 48)
    assert c > 0 and two_p > 0
    assert off["time"]["ep_comm_s"] == pytest.approx(8 * 48 * (four_t + two_p + c), rel=1e-9)
    assert on["time"]["ep_comm_s"] == pytest.approx(48 * (four_t + two_p) * (1 + 7 * 0.189) + 8 * 48 * c, rel=1e-9)


def test_torchtitan_all_to_alls_its_float32_counts():
    """torchtitan main (stack moe_alltoall_exchanges counts ep_all_to_all, probs_all_to_all false): each rank's
    torch.histc counts, E float32 = 8 x 4 = 32 B, all-to-all'd over the EP group before the tokens' (forward, waited
    on; expert_parallel.py @e347b1e5e l. 112-132), and no probabilities' exchange. Mixtral 8x7B, EP 8 in one NVLink
    domain, 32 MoE layers, one micro-batch: 32 x (7 x 3.4 us + 7/8 x 32 / 370e9) = 32 x 23.8001 us."""
    _, _, _, js = _mixtral(stack="torchtitan", sharding="fsdp", bytes_per_param=None)
    t_c = _pairwise(8, 8 * 4)
    assert t_c == pytest.approx(23.8001e-6, rel=1e-5)
    assert js["moe"]["counts_gather_s"] == pytest.approx(32 * t_c, rel=1e-9)
    assert js["moe"]["probs_a2a_s"] == 0.0


def test_torchtitan_03_all_to_alls_its_int64_counts():
    """torchtitan release/0.3 (stack torchtitan-0.3, its own moe_alltoall_exchanges: counts ep_all_to_all,
    counts_dtype int64): AllToAllTokenDispatcher._token_count_exchange all-to-alls each rank's counts, the sum of the
    bool routing map (models/common/moe.py @4f9e9a47d l. 437: int64), E x 8 = 64 B, over the EP group before the
    tokens' all-to-all (token_dispatcher.py l. 245-314, waited on: wait_tensor, non_blocking=False); no probabilities'
    exchange (the scores multiply the outputs on the routing rank after the combine). Mixtral 8x7B, EP 8 in one
    NVLink domain, 32 MoE layers, one micro-batch: 32 x (7 x 3.4 us + 7/8 x 64 / 370e9) = 32 x 23.8002 us, twice
    torchtitan main's float32 counts' bytes (the latency the same)."""
    _, _, _, js = _mixtral(stack="torchtitan-0.3", sharding="fsdp", bytes_per_param=None)
    t_c = _pairwise(8, 8 * 8)
    assert t_c == pytest.approx(23.8002e-6, rel=1e-5)
    assert js["moe"]["counts_gather_s"] == pytest.approx(32 * t_c, rel=1e-9)
    assert js["moe"]["probs_a2a_s"] == 0.0
