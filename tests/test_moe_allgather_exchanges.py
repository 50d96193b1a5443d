"""The allgather dispatcher's own exchanges beside the tokens' gather (planner/dispatch.py [13]; stack
moe_allgather_exchanges), derived by hand from Megatron-LM @d98e8a64 token_dispatcher.py
MoEAllGatherTokenDispatcher, each over the tp_ep group (etp x ep ranks):

  - token_dispatch l. 287-292: under torch.no_grad the bool routing map [tokens, E] all-gathered (1 B an entry),
    forward only;
  - l. 296: the routing probabilities [tokens, E] (dense) in the router's dtype all-gathered; their gradient
    reduce-scattered backward (mappings.py _GatherFromSequenceParallelRegion.backward l. 332-345);
  - token_combine l. 364-367: the combine's reduce-scatter moves hidden_states.to(self.local_probs.dtype), the
    probabilities' dtype (bf16 by default, fp32 under --moe-router-dtype fp32), and its gradient's all-gather too.

All on the compute stream (Megatron refuses the EP overlap with this dispatcher): exposed. comm.py's ring inside one
NVLink domain (H100): n - 1 rounds of 3.4 us, (n - 1) / n of the gathered bytes at 450 GB/s x 0.8222 = 370 GB/s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import explain_job, h100_nvlink_ll_ring_s, h100_nvlink_ring_fastest_s, h100_nvlink_ring_s

ROOT = Path(__file__).resolve().parent.parent


_ring = h100_nvlink_ring_s


def _mixtral(**kw):
    base = dict(model="mixtral-8x7b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", bytes_per_param="megatron",
                global_batch=8, micro_batch=1, seq_len=4096, moe_rank_imbalance=1.0, stack="megatron",
                moe_dispatcher="allgather")
    return explain_job(**{**base, **kw})


def test_routing_map_probabilities_and_combine_by_hand():
    """Mixtral 8x7B (E 8, h 4096) on 8 H100s, EP 8 (etp 1: tp_ep = the EP group) in one NVLink domain, T = 4096
    tokens a rank, one micro-batch, 32 MoE layers, bf16 router:
      tokens' all-gather (and each other transfer of theirs): 8 x 4096 x 4096 x 2 B = 268,435,456 B:
        7 x 3.4 us + 7/8 x 268,435,456 / 370e9 = 658.618 us;
      routing map: 8 x 4096 x 8 x 1 B = 262,144 B gathered, forward, under NCCL's LL ring (comm.py "Protocols": the
        fastest of Simple 24.420 us, LL128 27.974 us and LL): 6.6 + 7 x 0.6 us + 7/8 x 262,144 / 87.7e9 = 13.415 us;
      probabilities: 8 x 4096 x 8 x 2 B = 524,288 B gathered forward and reduce-scattered backward, LL: 16.031 us each
        (Simple 25.040 us).
    ep_comm = 32 x (4 x 658.618 + 2 x 16.031 + 13.415) us; explain: dispatch 32 x 2 x 658.618 us, probs_a2a_s 32 x 2 x
    16.031 us, counts_gather_s (the routing map's) 32 x 13.415 us."""
    _, _, _, js = _mixtral()
    t = _ring(8, 8 * 4096 * 4096 * 2)
    rmap, p = h100_nvlink_ring_fastest_s(8, 8 * 4096 * 8 * 1), h100_nvlink_ring_fastest_s(8, 8 * 4096 * 8 * 2)
    assert t == pytest.approx(658.618e-6, rel=1e-5) and t == h100_nvlink_ring_fastest_s(8, 8 * 4096 * 4096 * 2)
    assert rmap == pytest.approx(13.415e-6, rel=1e-4) and p == pytest.approx(16.031e-6, rel=1e-4)
    assert rmap == h100_nvlink_ll_ring_s(8, 262144) and p == h100_nvlink_ll_ring_s(8, 524288)
    m = js["moe"]
    assert m["dispatcher"] == "allgather"
    assert m["dispatch_s"] == pytest.approx(32 * 2 * t, rel=1e-9) and m["combine_s"] == pytest.approx(32 * 2 * t, rel=1e-9)
    assert m["probs_a2a_s"] == pytest.approx(32 * 2 * p, rel=1e-9)
    assert m["counts_gather_s"] == pytest.approx(32 * rmap, rel=1e-9)
    assert js["time"]["ep_comm_s"] == pytest.approx(32 * (4 * t + 2 * p + rmap), rel=1e-9)


def test_fp32_router_widens_the_combine_and_probabilities():
    """--moe-router-dtype fp32: the combine's reduce-scatter and its gradient's all-gather move the outputs as fp32,
    536,870,912 B: 23.8 us + 7/8 x 536,870,912 / 370e9 = 1293.436 us each; the probabilities 4 B an entry
    (1,048,576 B: NCCL's LL ring, 6.6 + 4.2 us + 7/8 x 1,048,576 / 87.7e9 = 21.262 us each way; Simple's 26.280 us);
    the tokens' gather and its reduce-scatter gradient stay bf16; the routing map stays 1 B."""
    _, _, _, js = _mixtral(moe_router_dtype="fp32")
    t, t32 = _ring(8, 8 * 4096 * 4096 * 2), _ring(8, 8 * 4096 * 4096 * 4)
    p, rmap = h100_nvlink_ring_fastest_s(8, 8 * 4096 * 8 * 4), h100_nvlink_ring_fastest_s(8, 8 * 4096 * 8 * 1)
    assert t32 == pytest.approx(1293.436e-6, rel=1e-5) and p == pytest.approx(21.262e-6, rel=1e-4)
    m = js["moe"]
    assert m["dispatch_s"] == pytest.approx(32 * (t + t32), rel=1e-9)  # the gather, the combine's gradient
    assert m["combine_s"] == pytest.approx(32 * (t32 + t), rel=1e-9)  # the combine, the gather's gradient
    assert m["probs_a2a_s"] == pytest.approx(32 * 2 * p, rel=1e-9)
    assert m["counts_gather_s"] == pytest.approx(32 * rmap, rel=1e-9)
    assert js["time"]["ep_comm_s"] == pytest.approx(32 * (2 * t + 2 * t32 + 2 * p + rmap), rel=1e-9)


def _no_gather_exchanges_stack(tmp_path: Path) -> str:
    """The megatron stack file without its moe_allgather_exchanges block (the tokens' gather and reduce-scatter)."""
    text = (ROOT / "stack_db" / "megatron.yaml").read_text()
    head, _, rest = text.partition("\nmoe_allgather_exchanges:")
    out = tmp_path / "megatron-nogather.yaml"
    out.write_text(head + rest[rest.index("\nmoe_host:\n"):])
    return str(out)


def test_a_stack_without_them_prices_the_tokens_alone(tmp_path):
    """The same job on the megatron stack file without moe_allgather_exchanges: the tokens' four transfers alone,
    32 x 4 x 658.618 us, nothing in the probabilities' or counts' keys; compute unchanged."""
    _, _, _, on = _mixtral()
    _, _, _, off = _mixtral(stack=_no_gather_exchanges_stack(tmp_path))
    t = _ring(8, 8 * 4096 * 4096 * 2)
    assert off["moe"]["probs_a2a_s"] == 0.0 and off["moe"]["counts_gather_s"] == 0.0
    assert off["time"]["ep_comm_s"] == pytest.approx(32 * 4 * t, rel=1e-9)
    assert on["time"]["ep_comm_s"] - off["time"]["ep_comm_s"] == pytest.approx(
        on["moe"]["probs_a2a_s"] + on["moe"]["counts_gather_s"], rel=1e-9)
    assert on["time"]["compute_s"] == off["time"]["compute_s"]
