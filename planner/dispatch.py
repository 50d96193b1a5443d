"""MoE token dispatchers: how the routed tokens reach their experts and come back, and what
each costs. Units: bytes, seconds, B/s. Pure numpy on 0-d or 1-d arrays.

A dispatcher (job field moe_dispatcher; default the stack's defaults.moe_dispatcher; read from
Megatron's --moe-token-dispatcher-type, --moe-enable-deepep, --moe-flex-dispatcher-backend):

  alltoall     Megatron-Core's MoEAlltoAllTokenDispatcher [1]: NCCL all-to-all over the EP
               group, each routed copy of a token sent (top_k c copies; no merging of copies
               bound for one rank), bf16, priced by comm.py's all-to-all model at the group's
               placement (planner/moe.py alltoall_bytes).
  allgather    MoEAllGatherTokenDispatcher [1]: every EP rank gathers all the group's tokens
               (all-gather of ep x its tokens x h x 2 B) and the combine reduce-scatters the
               outputs back (the same size); priced by comm.py at the group's placement.
  deepep       DeepEP's normal kernels (Megatron flex dispatcher, backend deepep) [2][3]:
               a token goes once to each rank (inside an NVLink domain) or once to each node
               (across domains, then forwarded over NVLink) holding one of its experts; the
               time is those bytes over the achieved bandwidth DeepEP's README measures on
               H800: 153 GB/s dispatch and 158 GB/s combine over NVLink (EP8), 43 / 58 / 51 GB/s
               dispatch and 43 / 57 / 50 GB/s combine over RDMA (EP16 / 32 / 64, per 400 Gb/s
               CX7 NIC), taken as fractions of H800's NVLink (200 GB/s per direction,
               hardware_db h800-sxm) and NIC (50 GB/s) line rates and applied to this
               hardware's. Its NVLink path joins at most 8 peers [6]: a larger EP group, even
               inside one NVL72 domain, runs the RDMA path between 8-GPU groups.
  deepep_ll    DeepEP's low-latency kernels [2]: pure RDMA, every routed copy sent (no merging),
               at the README's measured RDMA bandwidth per EP size (128 tokens, 7168 hidden,
               top-8: dispatch 98 / 63 / 48 / 43 / 39 / 39 GB/s, combine 127 / 74 / 53 / 46 / 39 /
               40 GB/s at EP 8 / 16 / 32 / 64 / 128 / 256), as fractions of the 50 GB/s NIC.
  hybridep     NVIDIA's Hybrid-EP (flex dispatcher, backend hybridep) [4]: bytes as DeepEP's
               normal kernels; achieved "algorithm bandwidth" through the Torch API with 16 SMs,
               inside an NVLink domain from its GB200 table (ranks 8 / 16 / 24 / 32 / 36:
               dispatch fp8 421.67 / 397.33 / 281.73 / 236.33 / 215.36, bf16 550.10 / 472.84 /
               441.89 / 485.50 / 469.96, combine 538.44 / 474.48 / 444.40 / 423.19 / 418.27 GB/s
               over GB200's 900 GB/s NVLink), across domains from its H100 table (ranks 16 / 32 /
               64 over InfiniBand: dispatch fp8 48.26 / 42.10 / 35.01, bf16 54.47 / 47.36 / 41.24,
               combine 53.35 / 52.53 / 46.57 GB/s over a 50 GB/s NIC). Megatron-Core's backend
               dispatches bf16 only: a job with moe_fp8_dispatch and hybridep on a Megatron stack
               is refused (plan.moe_dispatch_settings) [10].

Bandwidth between the measured EP sizes: linear in log2(ep), held at the end values outside.

Bytes per element: bf16 2; fp8 dispatch (plan.fp8_dispatch: the job field moe_fp8_dispatch, else
the stack's fp8 recipe's fp8_dispatch under fp8 -- the deepseek stack's blockwise, DeepSeek-V3
sec. 3.3.3 dispatches fp8 and combines bf16 [5]; DeepEP's tests) 1 B + a 4-byte scale per 128
elements, +16 B of per-token metadata for DeepEP's kernels (DeepEP tests/test_low_latency.py:
num_fp8_bytes = hidden + hidden / 128 * 4 + 16). The combine and both backward transfers (the
dispatch's gradient is a combine, the combine's a dispatch) move bf16; NCCL's all-to-all
moves the fp8 dispatch at 1 B + its scales per element.

Merging copies. With top_k experts drawn uniformly from E experts spread evenly over n ranks
(or nodes), a token reaches n (1 - (1 - 1/n)^k) distinct ones on average (k draws with
replacement: an approximation, named). Group-limited routing caps the nodes: a model whose
experts form G groups of which a token uses M (schema.MoESpec expert_groups, groups_per_token:
DeepSeek-V3 8 and 4, its "node-limited routing" [5] sec. 2.1.2) reaches at most M max(1, n / G)
of the n nodes its EP group spans, the experts laid on the ranks in order (a group on n / G
whole nodes, or G / n groups on one); the job field moe_route_nodes caps it further. DeepEP's
and Hybrid-EP's bytes per rank are counted as their benchmarks count them (the rank's or
node's own share included, which is how the RDMA figures can pass the NIC's 50 GB/s): across
NVLink domains its tokens x the nodes they reach x h x bytes, inside one its tokens x the
ranks they reach x h x bytes; the low-latency kernels' every routed copy (tokens x top_k).
A "node" is the group's members in one NVLink domain (comm.group_link).

Expert TP. Megatron's flex dispatcher (deepep, hybridep; deepep_ll taken alike) runs its kernels
over the tp_ep group, etp x ep ranks [8] (group_size): the routing map is expanded over the etp
ranks of each EP rank ("each TP ranks in a TP group should receive the same tokens"), top_k
becomes etp top_k over etp E experts, and each of those ranks receives the token's whole hidden
state (h x bytes, not h / etp); no expert-TP all-gather follows and no reduce-scatter precedes
the combine, which sums the etp ranks' partial outputs (the experts' linears leave their TP
reduction to the dispatcher, explicit_expert_comm [8]); so step.etp_pair prices nothing there.
A rank's T / rep_div tokens (distinct on each of the etp ranks: Megatron needs SP with TP [8])
then reach etp x n (1 - (1 - 1/n)^k) ranks inside a domain (n = ep) and, across, the nodes
of the group (m members a node) holding the EP ranks they reach, each EP rank's etp ranks side
by side (the tp_ep group is etp-innermost [9]): ep / max(m / etp, 1) node-sets drawn k times,
x max(etp / m, 1) nodes a set. The measured bandwidths are read at the group's size, its
placement is the folded grid's tp_ep group (moe.expert_strides). With etp 1 all is as above.

Approximations (named): the H800 efficiencies of DeepEP applied to other GPUs' line rates
(Hybrid-EP's README measures DeepEP on GB200 at 24 SMs lower: 351 / 513 / 426 GB/s fp8 /
bf16 / combine at 8 ranks, 51-75% of the H800 fractions); Hybrid-EP's H100 and GB200 fractions
likewise; the tables' token counts (4096 normal, 128 low-latency) for every token count.
Not modelled: DeepEP's SM budget's effect on the compute beside it; the pod layer for
DeepEP's RDMA traffic. The dispatchers' host synchronisation and the launch time it exposes
are priced apart, by step.moe_host (the same for every dispatcher that synchronises).

Padded to capacity (job moe_pad_to_capacity, Megatron --moe-pad-expert-input-to-capacity [7]):
every expert receives capacity tokens from every rank, a count the host computes from the
shapes alone, so alltoall and hybridep copy nothing to the host and do not synchronise
(PAD_WITHOUT_SYNC); allgather still copies its local counts to the host (.cpu()) whatever the
padding; Megatron refuses the padding on DeepEP's backend (deepep, deepep_ll here) [7].

References
[1] NVIDIA Megatron-LM megatron/core/transformer/moe/token_dispatcher.py (commit 0014f137):
    MoEAllGatherTokenDispatcher, MoEAlltoAllTokenDispatcher, MoEFlexTokenDispatcher;
    megatron/training/arguments.py --moe-token-dispatcher-type {allgather, alltoall, flex}
    (default allgather; "We recommend using 'alltoall' when applying expert parallelism"),
    --moe-enable-deepep, --moe-flex-dispatcher-backend {deepep, hybridep}.
[2] deepseek-ai/DeepEP README.md (commit 0aaa6744), "Performance": normal kernels on H800
    (~160 GB/s NVLink, CX7 400 Gb/s ~50 GB/s RDMA, 4096 tokens, 7168 hidden, top-4 groups,
    top-8 experts, FP8 dispatch, BF16 combine) and low-latency kernels (128 tokens).
[3] NVIDIA Megatron-LM megatron/core/transformer/moe/fused_a2a.py: the flex dispatcher's
    DeepEP Buffer dispatch / combine.
[4] deepseek-ai/DeepEP docs/README_Hybrid-EP.md (commit 5fbafce2), "Performance Results":
    H100 and GB200 tables (4096 tokens, 7168 hidden, top-8, uniform router, 8 local experts).
[5] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437, sec. 2.1.2
    (node-limited routing, M = 4), sec. 3.2.2 (all-to-all kernels), sec. 3.3.2 (FP8
    dispatch, BF16 combine).
[6] deepseek-ai/DeepEP csrc/kernels/configs.cuh (commit 9e6c4ef5): NUM_MAX_NVL_PEERS 8 (a
    DeepEP "node" is at most 8 NVLink peers; rdma_rank = rank / NUM_MAX_NVL_PEERS); NVIDIA
    Megatron-LM docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md
    (commit b6bf017a) sec. 2.2.1: "DeepEP still does not officially support scenarios where the
    NVLink domain is larger than 8"; with a community PR EP32 on GB200 reached ~400 GB/s
    dispatch and ~190 GB/s combine (24 SMs).
[7] NVIDIA Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py:
    MoEAlltoAllTokenDispatcher.preprocess l. 517-535 (drop_and_pad: tokens_per_expert and the
    splits torch.full on the host from the capacity, returned before any
    _maybe_update_cuda_sync_point) and _maybe_dtoh_and_synchronize l. 921-960 (no copy, no
    synchronisation "if not self.drop_and_pad" fails); _HybridEPManager l. 1113-1126 and
    l. 1175-1178 (drop_and_pad: num_permuted_tokens computed on the CPU, so the
    tokens_per_expert.sum() host sync is skipped); MoEAllGatherTokenDispatcher
    dispatch_postprocess l. 320 (tokens_per_expert ... .cpu(), unconditional);
    megatron/core/transformer/transformer_config.py l. 1754-1761 ("Flex token dispatcher with
    deepep backend does not support moe_pad_expert_input_to_capacity") and l. 1862-1866
    ("moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity");
    moe/experts.py l. 737 (the grouped GEMM's tokens_per_expert.tolist(): a host tensor when padded).
[8] NVIDIA Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py
    MoEFlexTokenDispatcher.__init__ l. 1835-1867 (_DeepepManager / _HybridEPManager / _NCCLEPManager
    over group=self.tp_ep_group with router_topk = tp_size x moe_router_topk and num_experts =
    tp_size x num_moe_experts, tp_size the expert-TP group's, MoETokenDispatcher l. 84-89),
    _initialize_metadata l. 1893-1919 (routing map and probs expanded over the tp_size ranks),
    dispatch_postprocess l. 1983-2000 and token_combine (no gather or reduce-scatter over the
    expert-TP group); moe/fused_a2a.py get_hidden_bytes (x.size(1): the whole hidden state);
    extensions/transformer_engine.py l. 2459 (explicit_expert_comm = is_expert and (tp_size > 1
    or expert_parallel): the expert linears' TP communication left to the dispatcher);
    moe/moe_layer.py l. 636-640 (training with attention TP > 1 needs sequence parallelism);
    transformer_config.py __post_init__ (no check refuses expert TP > 1 with the flex dispatcher).
[9] planner/moe.py [9]: the expert RankGenerator's 'tp-ep' group, expert-TP ranks innermost.
[10] NVIDIA Megatron-LM @d98e8a64 megatron/core/transformer/moe/fused_a2a.py init_hybrid_ep_buffer
    l. 327 (assert not fp8_dispatch, "HybridEP dispatcher does not support fp8 dispatch now") and
    HybridEPDispatch.forward l. 402 (fp8_dispatch = False: "Currently, we do not support fp8 dispatch").
[11] fp8 dispatch without an fp8 recipe (a bf16 job's moe_fp8_dispatch: refused, plan.moe_dispatch_settings).
    An fp8 dispatch moves the tokens already quantized for an fp8 up-projection ([5] sec. 3.3.3: "we
    quantize the activation before MoE up-projections into FP8 and then apply dispatch components, which
    is compatible with FP8 Fprop"): under an fp8 recipe the quantization the GEMM needs anyway moves
    before the dispatch, so only the wire bytes change (what this module prices). Under bf16 a quantize
    before and a dequantize after the dispatch would be new kernels the planner does not price, and no
    stack it prices runs one: NVIDIA Megatron-LM @d98e8a64 quantizes the wire only with
    --moe-dispatch-fwd-dtype mxfp8 (TransformerConfig moe_dispatch_fwd_dtype l. 997-1002, an argument
    through arguments.py's ArgumentGroupFactory; fp8_utils.py get_fp8_recipe_for_a2a: "independent of the
    compute recipe", so Megatron itself does not refuse it under bf16), which transformer_config.py
    __post_init__ l. 1776-1790 refuses on every dispatcher but the ncclep flex backend (not priced here;
    its alltoall, allgather, DeepEP and HybridEP paths dispatch the hidden states as they are:
    token_dispatcher.py l. 281-304, 682-727, 1305-1330; [10]); pytorch/torchtitan @e347b1e5e has no fp8
    dispatch (distributed/deepep/deepep.py dispatch_tokens l. 393-455 hands DeepEP the hidden states as
    they are; get_hidden_bytes l. 288-291 only sizes the buffer for either). The Megatron reader refuses --moe-dispatch-fwd-dtype / --moe-combine-bwd-dtype
    other than bf16 for the same check (every backend it prices is refused there).
[12] The alltoall dispatcher's small exchanges (Transfers.probs_fwd / probs_bwd / counts_fwd; issue 22, the MoE
    step's optimistic bias). NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py
    MoEAlltoAllTokenDispatcher: preprocess l. 543 (num_local_tokens_per_expert = routing_map.sum(dim=0).long(), int64
    [E]) and l. 570-575 (gather_from_sequence_parallel_region of those counts over self.tp_ep_group, the expert-TP x
    EP ranks, "when ep_size > 1 or tp_size > 1", l. 557): an all-gather of E x 8 B a rank, forward only (long
    tensors carry no gradient), run before the device-to-host copy of the splits, which waits for it; token_dispatch
    l. 705-711 (the tokens' all_to_all) and l. 718-723 (a second all_to_all of permuted_probs over the same EP group
    with the same splits: one probability per routed row, in the router's dtype, layers/moe.py ROUTER_DTYPE_BYTES);
    megatron/core/tensor_parallel/mappings.py _AllToAll.backward l. 469-484 (the gradient's all_to_all with the splits
    swapped): so a third NCCL all-to-all per layer backward. Each is priced by comm.py's model at its group's
    placement like the tokens' (its bytes are a 1 / h share, so its latency is what it adds: e.g. 63 rounds at
    EP 64). Under the all-to-all overlap (ep_comm_overlap) the probabilities' all-to-all runs in the dispatch
    node with the tokens' and hides as they do; the counts' all-gather runs in the layer's pre-dispatch part
    (moe_layer.py preprocess, called by fine_grained_callables.py @d98e8a64 l. 126-129 in the attention node, on
    the compute stream), so step.ep_comm keeps it exposed. Priced where the stack says its code runs them (stack
    moe_alltoall_exchanges: megatron, and megatron-bridge, which extends it; Megatron-LM 905c0e386, the commit
    Bridge pins, has the same calls, token_dispatcher.py l. 513, 527, 541, 671-674). A count's bytes are the stack's counts_dtype
    (COUNT_DTYPE_BYTES). torchtitan all-to-alls its counts over the EP group instead (counts ep_all_to_all: main
    @e347b1e5e distributed/expert_parallel.py l. 102-132, float32 histc counts; release/0.3 @4f9e9a47d
    models/common/token_dispatcher.py AllToAllTokenDispatcher l. 245-314, int64 sums of the bool routing map,
    models/common/moe.py l. 437), forward, waited on before the tokens' all-to-all, exposed. The allgather
    dispatcher's: [13]. Not priced here: the flex dispatchers' count exchanges, inside DeepEP's and Hybrid-EP's
    kernels (their measured bandwidths).
[13] The allgather dispatcher's exchanges beside the tokens' gather (GatherExchanges; stack moe_allgather_exchanges).
    NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py MoEAllGatherTokenDispatcher
    .token_dispatch l. 285-301, "if self.tp_size > 1 or self.ep_size > 1", each over self.tp_ep_group (the expert-TP
    x EP ranks, etp x ep): (a) under torch.no_grad the routing map [tokens, E], torch.bool (1 B), all-gathered
    (l. 287-292): g x T / rep_div x E x 1 B gathered, forward only; (b) the routing probabilities [tokens, E] (dense:
    zeros off the top-k) in the router's dtype all-gathered (l. 296), whose backward reduce-scatters their gradient
    (mappings.py _GatherFromSequenceParallelRegion.backward l. 332-345, tensor_parallel_output_grad): g x T / rep_div
    x E x the router's bytes each way; (c) the tokens' gather (l. 299-301, priced as before). token_combine l. 364-367
    reduce-scatters hidden_states.to(self.local_probs.dtype): the outputs cast to the probabilities' dtype (the same
    bf16 by default, 4 B under --moe-router-dtype fp32), and its gradient's all-gather moves that dtype too. Where
    they sit: all on the compute stream, between the router and the experts (the dispatcher's own calls, no side
    stream: Megatron refuses --overlap-moe-expert-parallel-comm with this dispatcher, transformer_config.py l.
    3016-3019, plan.ep_comm_overlap), so exposed; the routing map's gather is priced with the counts (counts_fwd:
    forward, and in each recompute re-run), the probabilities' with the probs (probs_fwd / probs_bwd). Megatron-LM
    905c0e386 (the commit Bridge pins) has the same calls (l. 265-276, 340-341). Priced where the tokens' gather is
    (ep > 1; with ep 1 the dispatcher's gathers run over the etp ranks alone, where the planner prices expert TP's
    pair, step.etp_pair, and not these: named).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import comm
from .layers.common import ACT_BYTES, distinct_draws as distinct  # noqa: F401 (a leaf: layers/moe.py reads it too)

# the codes, and each plan's dispatcher (a leaf module: memory.py reads it too)
from .dispatch_codes import (ALLGATHER, ALLTOALL, CODES, DEEPEP, DEEPEP_LL, HYBRIDEP, NAMES,  # noqa: F401
                             dispatcher_rows, table_rows)
FLEX = (DEEPEP, DEEPEP_LL, HYBRIDEP)  # kernels run over the etp x ep group, no expert-TP gather [3]
# padded to capacity: which dispatchers skip the host synchronisation, which refuse padding [7]
# (a leaf module, so that plan.py and cuda_graphs.py read them without an import cycle)
from .moe_padding import PAD_REFUSED, PAD_WITHOUT_SYNC, host_synced  # noqa: E402,F401


# what each dispatcher is, in no trainer's spelling: the stacks name them differently (Megatron
# --moe-token-dispatcher-type / --moe-flex-dispatcher-backend, torchtitan expert_parallel_comm_backend);
# the exporters write each trainer's own flags
DESCRIPTIONS = {
    "alltoall": "NCCL all-to-all",
    "allgather": "all-gather + reduce-scatter",
    "deepep": "DeepEP normal kernels, NVLink + RDMA",
    "deepep_ll": "DeepEP low-latency kernels, pure RDMA",
    "hybridep": "Hybrid-EP kernels",
}

# [12] a token count's bytes by the stack's moe_alltoall_exchanges.counts_dtype: int64 where the code sums a bool routing
# map (Megatron-Core token_dispatcher.py @d98e8a64 l. 543 routing_map.sum(dim=0).long(); torchtitan release/0.3
# @4f9e9a47d models/common/moe.py l. 437 routing_map_BLE.sum), float32 where it counts with torch.histc (torchtitan
# @e347b1e5e models/moe/moe.py l. 348)
COUNT_DTYPE_BYTES = {"int64": 8.0, "float32": 4.0}
ROUTING_MAP_BYTES = 1.0  # [13] the allgather dispatcher's routing map: a torch.bool [tokens, E] tensor (router.py)
FP8_SCALE_BYTES_PER_ELEMENT = 4.0 / 128.0  # one fp32 scale per 128 elements [2] tests
FP8_TOKEN_EXTRA_BYTES = 16.0  # DeepEP tests/test_low_latency.py: + 16 B per fp8 token
H800_NVLINK_Bps = 200e9  # hardware_db h800-sxm nvlink_GBps (per direction)
CX7_NIC_Bps = 50e9  # 400 Gb/s; DeepEP README "~50 GB/s maximum bandwidth"
GB200_NVLINK_Bps = 900e9  # hardware_db gb200-nvl72 nvlink_GBps
DEEPEP_MAX_NVL_PEERS = 8  # DeepEP csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS [6]
# (EP sizes, dispatch GB/s, combine GB/s) [2]
DEEPEP_NVLINK = ((8,), (153.0,), (158.0,))
DEEPEP_RDMA = ((16, 32, 64), (43.0, 58.0, 51.0), (43.0, 57.0, 50.0))
DEEPEP_LL_RDMA = ((8, 16, 32, 64, 128, 256), (98.0, 63.0, 48.0, 43.0, 39.0, 39.0), (127.0, 74.0, 53.0, 46.0, 39.0, 40.0))
# Hybrid-EP [4], Torch API, 16 SMs: (ranks, dispatch fp8, dispatch bf16, combine) GB/s
HYBRIDEP_NVLINK = ((8, 16, 24, 32, 36), (421.67, 397.33, 281.73, 236.33, 215.36),
                   (550.10, 472.84, 441.89, 485.50, 469.96), (538.44, 474.48, 444.40, 423.19, 418.27))
HYBRIDEP_RDMA = ((16, 32, 64), (48.26, 42.10, 35.01), (54.47, 47.36, 41.24), (53.35, 52.53, 46.57))


def _interp(ep, sizes, values) -> np.ndarray:
    """values measured at EP sizes, linear in log2(ep) between them, the end values outside."""
    return np.interp(np.log2(np.maximum(np.asarray(ep, dtype=np.float64), 1.0)), np.log2(sizes), values)


def element_bytes(fp8) -> np.ndarray:
    """Bytes per element of a dispatch: fp8 1 + its scales, else bf16."""
    return np.where(np.asarray(fp8, dtype=bool), 1.0 + FP8_SCALE_BYTES_PER_ELEMENT, float(ACT_BYTES))


@dataclass
class Transfers:
    """Seconds per MoE layer and micro-batch on one GPU: the forward dispatch and combine and
    their gradients in backward; `tier` the EP group's link (comm.LINK_*)."""

    dispatch_fwd: np.ndarray
    combine_fwd: np.ndarray
    dispatch_bwd: np.ndarray  # the combine's gradient (a dispatch, bf16)
    combine_bwd: np.ndarray  # the dispatch's gradient (a combine, bf16)
    tier: np.ndarray
    # [12] the alltoall dispatcher's own small exchanges (0 for the others): the routing probabilities' all-to-all
    # beside the tokens' (forward, and its gradient backward), and the token counts' all-gather before it (forward)
    probs_fwd: np.ndarray = 0.0
    probs_bwd: np.ndarray = 0.0
    counts_fwd: np.ndarray = 0.0

    @property
    def fwd(self):
        """The forward's transfers the all-to-all overlap may hide: the tokens' and the probabilities' (the
        counts' all-gather runs in the layer's pre-dispatch part, on the compute stream: counts_fwd, apart)."""
        return self.dispatch_fwd + self.combine_fwd + self.probs_fwd

    @property
    def bwd(self):
        return self.dispatch_bwd + self.combine_bwd + self.probs_bwd


def group_size(kind: int, ep, etp) -> np.ndarray:
    """The ranks the dispatcher `kind` (a job-wide code) exchanges tokens over: ep for the NCCL
    dispatchers, etp x ep for DeepEP's and Hybrid-EP's kernels (Megatron's flex dispatcher's
    tp_ep group [3]; module docstring, "Expert TP")."""
    ep = np.asarray(ep, dtype=np.float64)
    return ep * np.asarray(etp, dtype=np.float64) if kind in FLEX else ep


def group_stride(kind: int, plan, strides: dict) -> np.ndarray:
    """The stride in the global rank order of the group the dispatcher `kind` exchanges tokens over:
    the folded grid's tp_ep group for DeepEP's and Hybrid-EP's kernels [3], the EP group otherwise
    (moe.expert_strides, moe.ep_stride)."""
    from . import moe

    return moe.expert_strides(plan, strides, ("tp_ep",))["tp_ep"] if kind in FLEX else moe.ep_stride(plan, strides)


def group_link(kind: int, plan, strides: dict, cpar, job_gpus):
    """(group, link): the ranks the dispatcher `kind` exchanges tokens over (group_size) and the link
    its all-pairs exchange crosses (comm.group_link), placed at group_stride; what step.ep_comm prices.
    Across NVLink domains the link's members per domain are the smallest piece of any group (a rank's
    group members in its domain): the ranks of that group move the most over the network, and every
    step waits for them. Hybrid-EP's kernels run each group with its own ranks' piece (each rank
    detects its piece: memory.dispatcher_buffer_bytes), so the slowest group is the one with the
    smallest; on every placement start-up rule MEGATRON_HYBRIDEP_DOMAIN admits (each piece divides
    the group) that smallest piece is comm.domain_pieces' smallest counted rank by rank
    (tests/test_hybridep_pieces.py)."""
    from . import moe

    group = group_size(kind, plan.ep, moe.etp_of(plan))
    stride = group_stride(kind, plan, strides)
    return group, comm.group_link(group, stride, cpar, pattern=comm.PATTERN_ALL_PAIRS, job_gpus=job_gpus)


def _merged_bytes(tokens, block, ep, local, route_nodes, etp=1.0):
    """(NVLink, RDMA) elements a rank's tokens move when copies to one rank (inside a domain) or
    one node (across) merge, its own rank or node included as DeepEP's benchmarks count them
    (tests/test_intranode.py: the received tokens; tests/test_internode.py: the tokens sent per
    RDMA rank); the nodes a token reaches capped by the model's group-limited routing and the
    job's route_nodes (0: no cap); with expert TP each EP rank's etp ranks all receive the token
    and sit side by side in the etp x ep group (module docstring, "Expert TP")."""
    h, k = block.h, block.top_k
    etp = np.asarray(etp, dtype=np.float64)
    m = np.minimum(local, ep * etp).astype(np.float64)
    per_node = np.maximum(m / etp, 1.0)  # EP ranks per node (1 where an EP rank's etp ranks span nodes)
    span = np.maximum(etp / np.maximum(m, 1.0), 1.0)  # nodes one EP rank's etp ranks span
    nodes = np.maximum(ep / per_node, 1.0)
    reach = distinct(nodes, k)
    if block.expert_groups:
        reach = np.minimum(reach, block.groups_per_token * np.maximum(1.0, nodes / block.expert_groups))
    reach = np.where(np.asarray(route_nodes) > 0, np.minimum(reach, np.maximum(route_nodes, 1)), reach)
    return tokens * h * etp * distinct(ep, k), tokens * h * reach * span


def kernel_time(kind: int, tokens, block, ep, link, params: comm.CommParams, fp8, route_nodes, etp=1):
    """(dispatch at its element bytes, dispatch bf16, combine bf16) seconds of one DeepEP /
    Hybrid-EP / DeepEP low-latency transfer of the MoE layer `block` over the etp x ep group
    whose comm.GroupLink is `link` (module docstring)."""
    h, k = block.h, block.top_k
    inside = link.link == comm.LINK_NVLINK
    ep = np.asarray(ep, dtype=np.float64)
    group = group_size(kind, ep, etp)  # the tables' "EP size" is the kernels' group [2][4]
    local = link.local_ranks
    if kind == DEEPEP:  # at most 8 NVLink peers: beyond, 8-GPU "nodes" joined over RDMA [6]
        inside = inside & (group <= DEEPEP_MAX_NVL_PEERS)
        local = np.minimum(local, DEEPEP_MAX_NVL_PEERS)
    nv_b, rd_b = _merged_bytes(tokens, block, ep, local, route_nodes, etp)
    b8 = element_bytes(fp8)
    extra = np.where(np.asarray(fp8, dtype=bool), FP8_TOKEN_EXTRA_BYTES / h, 0.0)  # per element
    nv_line, net_line = params.nvlink_line_rate, params.network_line_rate
    if kind == DEEPEP_LL:
        sizes, d_bw, c_bw = DEEPEP_LL_RDMA
        copies = tokens * h * k * np.asarray(etp, dtype=np.float64)  # every selection, x its etp ranks
        bw_d = _interp(group, sizes, d_bw) * 1e9 / CX7_NIC_Bps * net_line
        bw_c = _interp(group, sizes, c_bw) * 1e9 / CX7_NIC_Bps * net_line
        return copies * (b8 + extra) / bw_d, copies * ACT_BYTES / bw_d, copies * ACT_BYTES / bw_c
    if kind == DEEPEP:
        s_nv, d_nv, c_nv = DEEPEP_NVLINK
        s_rd, d_rd, c_rd = DEEPEP_RDMA
        nv = [_interp(group, s_nv, v) * 1e9 / H800_NVLINK_Bps * nv_line for v in (d_nv, d_nv, c_nv)]
        rd = [_interp(group, s_rd, v) * 1e9 / CX7_NIC_Bps * net_line for v in (d_rd, d_rd, c_rd)]
    else:  # HYBRIDEP
        s_nv, f8_nv, b16_nv, c_nv = HYBRIDEP_NVLINK
        s_rd, f8_rd, b16_rd, c_rd = HYBRIDEP_RDMA
        nv = [_interp(group, s_nv, v) * 1e9 / GB200_NVLINK_Bps * nv_line for v in (f8_nv, b16_nv, c_nv)]
        rd = [_interp(group, s_rd, v) * 1e9 / CX7_NIC_Bps * net_line for v in (f8_rd, b16_rd, c_rd)]
        nv[0] = np.where(np.asarray(fp8, dtype=bool), nv[0], nv[1])
        rd[0] = np.where(np.asarray(fp8, dtype=bool), rd[0], rd[1])
    byte = (b8 + extra, float(ACT_BYTES), float(ACT_BYTES))
    lat = np.where(inside, params.nvlink_latency, params.network_latency)
    out = []
    for i in range(3):
        # inside a domain the NVLink carries the merged copies; across domains the RDMA leg is
        # the bottleneck DeepEP's and Hybrid-EP's tables measure [2][4]
        t = np.where(inside, nv_b * byte[i] / nv[i], rd_b * byte[i] / rd[i])
        out.append(np.where(group > 1, lat + t, 0.0))
    return tuple(out)


@dataclass(frozen=True)
class GatherExchanges:
    """The allgather dispatcher's exchanges beside the tokens' gather, where the stack's code runs them (stack
    moe_allgather_exchanges) [13]: group / stride, the tp_ep group's size and stride (etp x ep ranks); probs_bytes, the
    routing probabilities' dtype bytes (the router's: layers/moe.py ROUTER_DTYPE_BYTES); routing_map, probs: whether
    the bool routing map and the probabilities are all-gathered; combine_probs: whether the combine's reduce-scatter
    (and its gradient's all-gather) moves the expert outputs cast to the probabilities' dtype."""
    group: object
    stride: object
    probs_bytes: float
    routing_map: bool
    probs: bool
    combine_probs: bool


def _batch(coll, calls) -> list:
    """[coll(*c) for c in calls], through coll.batch where coll has one (step.Collectives: each op's calls priced
    together, the same values); a plain pricing function (tests, explain) call by call."""
    batch = getattr(coll, "batch", None)
    return batch(calls) if batch is not None else [coll(*c) for c in calls]


def transfers(kind: int, block, ctx, coll, ep, stride, group_link, params, *, fp8, route_nodes, etp=1,
              probs_bytes=None, counts_group=None, counts_a2a_bytes=None, counts_bytes=8.0,
              gather: GatherExchanges | None = None) -> Transfers:
    """The four transfers of one MoE layer `block` per micro-batch (module docstring) for
    dispatcher `kind`: coll prices a collective at its placement (step.Collectives: op, size,
    group, stride -> seconds), ep and stride the EP group's size and stride, group_link the
    comm.GroupLink (its tier and members per domain) of the group the dispatcher runs over
    (group_size: the EP group, or the etp x ep group of DeepEP's and Hybrid-EP's kernels),
    params the comm.CommParams, ctx the layers.Ctx. fp8: the forward dispatch moves fp8
    (plan.fp8_dispatch); route_nodes: the job's node-limited routing cap M (0: none); etp the
    expert-TP degree. The alltoall dispatcher's small exchanges where the stack's code runs them (stack
    moe_alltoall_exchanges) [12]: probs_bytes, the routing probabilities' bytes per routed row (the router's
    logits dtype: layers/moe.py ROUTER_DTYPE_BYTES; None: no probabilities' all-to-all); counts_group, the
    (size, stride) of the tp_ep group that all-gathers the token counts (None: no such all-gather), counts_bytes the
    bytes of one count there (COUNT_DTYPE_BYTES); counts_a2a_bytes, the bytes of a count where the EP group
    all-to-alls them instead (torchtitan main: float32 histc counts, 0.3: int64; None: no such all-to-all). gather:
    the allgather dispatcher's own exchanges [13] (None: the tokens' gather and reduce-scatter alone)."""
    from .moe import alltoall_bytes
    tokens = ctx.T / ctx.rep_div * ctx.cf  # the busiest rank's tokens (its load L: planner/imbalance.py)
    tier = group_link.link
    if kind == ALLTOALL:
        size = alltoall_bytes(block, ctx)
        calls = [(comm.ALL_TO_ALL, size, ep, stride), (comm.ALL_TO_ALL, size * element_bytes(True) / ACT_BYTES, ep, stride)]
        if probs_bytes is not None:  # a stack setting: one probability per routed row, all-to-all'd with the tokens' splits [12]
            calls.append((comm.ALL_TO_ALL, size / (block.h * ACT_BYTES) * probs_bytes, ep, stride))
        if counts_group is not None:  # a stack setting: the int64 [E] counts of each tp_ep rank all-gathered [12]
            g, g_stride = counts_group
            g = np.asarray(g, dtype=np.float64)
            calls.append((comm.ALL_GATHER, g * block.num_experts * counts_bytes, g, g_stride))
        if counts_a2a_bytes is not None:  # a stack setting: each rank's [E] counts all-to-all'd, E / ep to each [12]
            calls.append((comm.ALL_TO_ALL, block.num_experts * counts_a2a_bytes, ep, stride))
        t = _batch(coll, calls)  # one pricing an op where the pricing allows (step.Collectives.batch: the same values)
        a = t[0]
        a8 = np.where(np.asarray(fp8, dtype=bool), t[1], a)
        p = t[2] if probs_bytes is not None else np.float64(0.0)
        counts = t[-1] if counts_group is not None or counts_a2a_bytes is not None else np.float64(0.0)
        return Transfers(a8, a, a, a, tier, probs_fwd=p, probs_bwd=p, counts_fwd=counts)
    if kind == ALLGATHER:
        size = ep * ctx.T / ctx.rep_div * block.h * ACT_BYTES
        if gather is None:
            ag, rs = _batch(coll, [(comm.ALL_GATHER, size, ep, stride), (comm.REDUCE_SCATTER, size, ep, stride)])
            return Transfers(ag, rs, ag, rs, tier)
        # [13] the combine's reduce-scatter moves the outputs cast to the probabilities' dtype (a stack setting), and so
        # does its gradient's all-gather (the dispatch backward: the combine's gradient)
        c_bytes = gather.probs_bytes if gather.combine_probs else float(ACT_BYTES)
        g = np.asarray(gather.group, dtype=np.float64)
        rows = g * ctx.T / ctx.rep_div  # the tp_ep group's tokens, each rank's T / rep_div, gathered [13]
        on = np.asarray(ep, dtype=np.float64) > 1.0  # priced where the tokens' gather is (etp alone: etp_pair's)
        calls = [(comm.ALL_GATHER, size, ep, stride), (comm.REDUCE_SCATTER, size, ep, stride),
                 (comm.REDUCE_SCATTER, size * c_bytes / ACT_BYTES, ep, stride),
                 (comm.ALL_GATHER, size * c_bytes / ACT_BYTES, ep, stride)]
        if gather.probs:  # a stack setting: [tokens, E] probabilities all-gathered, their gradient reduce-scattered
            calls += [(comm.ALL_GATHER, rows * block.num_experts * gather.probs_bytes, g, gather.stride),
                      (comm.REDUCE_SCATTER, rows * block.num_experts * gather.probs_bytes, g, gather.stride)]
        if gather.routing_map:  # a stack setting: the bool [tokens, E] routing map all-gathered, forward only
            calls.append((comm.ALL_GATHER, rows * block.num_experts * ROUTING_MAP_BYTES, g, gather.stride))
        t = _batch(coll, calls)  # one pricing an op where the pricing allows (step.Collectives.batch: the same values)
        ag, rs, rs_c, ag_c = t[:4]
        p_f, p_b = (t[4], t[5]) if gather.probs else (np.float64(0.0), np.float64(0.0))
        rmap = np.where(on, t[-1], 0.0) if gather.routing_map else np.float64(0.0)
        return Transfers(ag, rs_c, ag_c, rs, tier, probs_fwd=p_f, probs_bwd=p_b, counts_fwd=rmap)
    d8, d16, c16 = kernel_time(kind, tokens, block, ep, group_link, params, fp8, route_nodes, etp)
    return Transfers(d8, c16, d16, c16, tier)
