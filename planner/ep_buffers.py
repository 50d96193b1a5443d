"""The MoE dispatchers' communication buffers: the bytes per GPU that DeepEP and Hybrid-EP
allocate once at start-up and keep all run, outside PyTorch's caching allocator (cudaMalloc,
cuMemCreate, NVSHMEM's symmetric heap), so in the memory total beside the CUDA context and
NCCL reserve (memory.py OUTSIDE_TERMS), not in the allocated or reserved peaks the stacks log.
Units: bytes. Pure numpy on 0-d or 1-d arrays. The NCCL dispatchers (alltoall, allgather)
hold none of their own (their NCCL buffers are in the reserve).

Inputs: h the hidden size, ep the dispatcher's group's size (etp x ep: "Expert TP" below),
tokens the rank's tokens a dispatch sends (T / rep_div: the micro-batch's tokens on the rank,
planner/dispatch.py), experts the routed experts of a layer (x etp), per_domain the group's
members in the rank's own NVLink domain, its piece (comm.domain_pieces: Hybrid-EP's rank sizes its
buffers with the count it detects itself, memory.py [ep], which takes the heaviest rank's).

deepep (normal kernels). Megatron-Core sizes one Buffer for the group [1]: num_nvl_bytes and
num_rdma_bytes the larger of the dispatch and combine configs' hints [2] at hidden_bytes =
h x max(element size, 2) = 2h (an fp8 dispatch is sized as bf16), with 20 SMs (C = 10 channels,
Megatron's default); a DeepEP "node" is 8 NVLink peers (NUM_MAX_NVL_PEERS), whatever the
hardware: n_nvl = min(ep, 8), n_rdma = max(ep / 8, 1), so the RDMA buffer exists exactly when
ep > 8 (the group crosses DeepEP's nodes), whatever the placement:
  nvl  = ceil128(C n_nvl (2 n_rdma + 3) 4 + C n_nvl R_nvl (2h + 8 + 128 x 8 + 128 x 4 + 128 x 4))
         (per received token: its hidden bytes, an 8-byte SourceMeta, 128 int64 top-k indices,
         128 fp32 top-k weights and 128 fp32 scales: kNumMaxTopK, kNumMaxScales)
  rdma = ceil128(C n_rdma 18 x 2 x 4 + 2 C n_rdma R_rdma (2h + 8 + 1024 + 512 + 512 + 16)), ep > 8
  plus, per Buffer, the NVLink buffer's barrier signals and pointer tables (8 x 4 + 8 x 8 + 8 x 8
  = 160 B) and a 32 MiB workspace (NUM_WORKSPACE_BYTES).
  R_nvl, R_rdma: the configs' num_max_nvl_chunked_recv_tokens and num_max_rdma_chunked_recv_tokens
  (the latter rounded up to a multiple of the send chunk by Config's constructor), the larger of
  the dispatch and combine configs' at the group size (DEEPEP_RECV_TOKENS).
deepep_ll (low-latency kernels; Megatron @d98e8a64 does not run them): one RDMA buffer of
  get_low_latency_rdma_size_hint(tokens, h, ep, experts) [2]: two send buffers of
  max(tokens x m_d, experts x tokens x m_c), two receive buffers of experts x tokens x
  max(m_d, m_c) and two signalling buffers of ceil128(4 experts), rounded up past 128, with
  m_d = 16 + max(2h, h + 4 h / 128) and m_c = 4 h / 128 + 2h bytes a message; + the workspace.
hybridep (Hybrid-EP, DeepEP's hybrid-ep branch) [3]: HybridEPBuffer(hidden_dim, max tokens per
  rank = the first dispatch's tokens, at least 512 and padded to 64 [1] (the caller's token count,
  memory.hybridep_tokens, holds the Configurer's floor), num_local_experts = experts / ep, bf16)
  with n = per_domain ranks per NVLink domain and N = ep / n domains:
  NVLink: the worst case of every token of the group at one rank, M = tokens x ep rows: bf16
          tokens 2h, fp32 probabilities of the domain's experts 4 (experts / ep) n and the
          dispatch's fp32 scales 4 h / 128 (allocated even in bf16), per row (the dispatch shares
          the combine's token and probability buffers: use_shared_buffer);
  RDMA (N > 1): per token, the dispatch's attention-side copy (2h, the group's experts' probs
          4 experts, scales 4 h / 128) and (N - 1) inter-node copies (2h + 4 (experts / ep) n +
          4 h / 128), the combine's (N - 1) reduction and (N - 1) inter-node copies (2h + 4
          (experts / ep) n each);
  the custom all-gather's routing map, 1 B per expert per token of the group: experts x tokens x
  ep (allocated whether the custom all-gather is on or not).

Approximations (named): an EP size DeepEP's config tables do not list (DeepEP asserts; the
megatron stack refuses such a plan, start-up rule MEGATRON_DEEPEP_GROUP, planner/startup.py; the
deepseek stack's own kernels are not DeepEP's release) takes the next listed size's chunk counts
(held at 160's above); the small flags, counters and
preprocessing scratch of Hybrid-EP (a few KiB) and the pinned host counters are not priced;
NVSHMEM's own heap beyond the RDMA buffer (its granularity, NVSHMEM_CUMEM_GRANULARITY 512 MiB
set by DeepEP, and its internal state) is not priced, nor the allocation granularity of
cuMemCreate under MNNVL; every stack that runs deepep is taken to size its Buffer as Megatron
does (the DeepSeek stack's own buffer is not published).

Expert TP. Megatron's flex dispatcher builds its DeepEP Buffer and its HybridEPBuffer over the
tp_ep group, expert-TP x EP ranks [4], so every size above is taken at that group's size
etp x ep ("ep" in the formulas), its members per NVLink domain (per_domain), and its expert
columns etp x experts (the dispatcher's num_experts = tp_size x num_moe_experts, whose
num_local_experts = experts / ep per rank are unchanged); with etp 1 the EP group.

References
[1] NVIDIA Megatron-LM @d98e8a64 megatron/core/transformer/moe/fused_a2a.py: get_hidden_bytes
    l. 24-34 (x.size(1) x max(element size, 2)), get_buffer l. 36-70 (Buffer(group, num_nvl_bytes,
    num_rdma_bytes): normal mode, the max over get_dispatch_config / get_combine_config's hints),
    init_hybrid_ep_buffer l. 285-350 and HybridEPDispatch.forward (max_num_of_tokens_per_rank =
    x.shape[0] of the first dispatch, use_fp8 False), HYBRIDEP_TOKEN_ALIGNMENT 64;
    token_dispatcher.py l. 1288-1292 (set_deepep_num_sms(moe_flex_dispatcher_num_sms, else 20));
    docker/Dockerfile.ci.dev l. 100 (DEEPEP_COMMIT de0dd118, HYBRID_EP_MULTINODE=1: not in the
    stored snapshot; read at [2]).
[2] deepseek-ai/DeepEP @94a9f8f (hybrid-ep branch, 2026-07-10) csrc/config.hpp Config (l. 31-48:
    the RDMA receive chunk aligned up to the send chunk), get_nvl_buffer_size_hint,
    get_rdma_buffer_size_hint, LowLatencyLayout, get_low_latency_rdma_size_hint;
    deep_ep/buffer.py num_sms 20, get_dispatch_config / get_combine_config l. 241-278;
    csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS 8, NUM_WORKSPACE_BYTES 32 MiB,
    NUM_BUFFER_ALIGNMENT_BYTES 128; csrc/kernels/internode.cu SourceMeta (two ints, 8 B);
    csrc/deep_ep.cpp Buffer::Buffer (cudaMalloc of num_nvl_bytes + the barrier signals and
    pointer tables, the workspace) and Buffer::sync (internode::alloc: nvshmem_malloc of
    num_rdma_bytes).
[4] NVIDIA Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py
    MoEFlexTokenDispatcher.__init__ l. 1835-1867 (_DeepepManager / _HybridEPManager
    (group=self.tp_ep_group, num_experts=self.tp_size x num_moe_experts, router_topk=self.tp_size
    x moe_router_topk), tp_size the expert-TP group's), _initialize_metadata l. 1894-1919 (the
    routing map [tokens, ep, 1, local experts] expanded over the tp_size ranks: "each TP ranks in
    a TP group should receive the same tokens").
[3] deepseek-ai/DeepEP @94a9f8f csrc/hybrid_ep/buffer/intranode.cu NVLCoordinator::init (max
    tokens = tokens per rank x ranks per node x nodes), allocate_combine_buffers /
    allocate_dispatch_buffers (remote_allocator: cuMemCreate, else cudaMalloc,
    allocator/allocator.cu); buffer/internode_doca.cu RDMACoordinator::allocate_dispatch_buffers
    l. 383-430, allocate_combine_buffers l. 557-592 (cudaMalloc); extension/allgather.cu
    CustomAllgather::allocate_ag_buffer l. 142-147; hybrid_ep.cu allocate_buffer (the all-gather
    buffer allocated unconditionally); deep_ep/hybrid_ep_buffer.py (use_shared_buffer True).
"""

from __future__ import annotations

import numpy as np

DEEPEP_SMS = 20  # Megatron's default for set_deepep_num_sms [1]; DeepEP's Buffer.num_sms [2]
NVL_PEERS = 8  # NUM_MAX_NVL_PEERS [2]
WORKSPACE_BYTES = 32 * 2**20  # NUM_WORKSPACE_BYTES [2]
NVL_META_BYTES = NVL_PEERS * (4 + 8 + 8)  # barrier signals (int) + buffer and signal pointers [2]
ALIGN = 128  # the hints' rounding; NUM_BUFFER_ALIGNMENT_BYTES [2]
SOURCE_META_BYTES = 8  # internode.cu SourceMeta: two ints [2]
MAX_TOPK = MAX_SCALES = 128  # kNumMaxTopK, kNumMaxScales [2]
HYBRIDEP_TOKEN_ALIGNMENT = 64  # Megatron pads HybridEP's tokens to 64-token chunks [1]
# deep_ep/buffer.py @94a9f8f [2]: (EP size, nvl receive chunk, rdma receive chunk) the larger of the
# dispatch and combine configs', the rdma one aligned up to its send chunk (Config's constructor):
# dispatch (send, recv) rdma 16 (20, 128) -> 140, 24 (32, 128), 32 (32, 128), 64 (28, 128) -> 140,
# 128 (32, 128), 144 / 160 (12, 128) -> 132; combine 16 (12, 128) -> 132, 64 (20, 128) -> 140,
# 128 (12, 128) -> 132, the others (8, 128) -> 128, (6, 128) -> 132 at 2-8 (no RDMA buffer there)
DEEPEP_RECV_TOKENS = ((2, 4, 8, 16, 24, 32, 64, 128, 144, 160),
                      (256, 256, 256, 288, 288, 288, 288, 560, 720, 720),
                      (132, 132, 132, 140, 128, 128, 140, 132, 132, 132))


def _ceil(x, a) -> np.ndarray:
    return np.ceil(np.asarray(x, dtype=np.float64) / a) * a


def _recv_tokens(ep):
    """(R_nvl, R_rdma) of the config tables at the listed EP size at or above ep (module docstring)."""
    sizes, nvl, rdma = (np.asarray(v, dtype=np.float64) for v in DEEPEP_RECV_TOKENS)
    i = np.minimum(np.searchsorted(sizes, np.asarray(ep, dtype=np.float64), side="left"), len(sizes) - 1)
    return nvl[i], rdma[i]


def deepep_normal(h, ep) -> tuple[np.ndarray, np.ndarray]:
    """(NVLink, RDMA) bytes per GPU of DeepEP's normal-mode Buffer as Megatron sizes it [1][2];
    the NVLink one with its metadata and the workspace, the RDMA one 0 for ep <= 8."""
    ep = np.asarray(ep, dtype=np.float64)
    c = DEEPEP_SMS // 2
    n_nvl, n_rdma = np.minimum(ep, NVL_PEERS), np.maximum(np.floor(ep / NVL_PEERS), 1.0)
    r_nvl, r_rdma = _recv_tokens(ep)
    hb = 2.0 * np.asarray(h, dtype=np.float64)  # get_hidden_bytes: max(element size, 2) [1]
    per_token = hb + SOURCE_META_BYTES + MAX_TOPK * 8 + MAX_TOPK * 4 + MAX_SCALES * 4
    nvl = _ceil(c * n_nvl * (2 * n_rdma + 3) * 4 + c * n_nvl * r_nvl * per_token, ALIGN)
    rdma = _ceil(c * n_rdma * (NVL_PEERS * 2 + 2) * 2 * 4 + 2 * c * n_rdma * r_rdma * (per_token + 16), ALIGN)
    return nvl + NVL_META_BYTES + WORKSPACE_BYTES, np.where(ep > NVL_PEERS, rdma, 0.0)


def deepep_low_latency(h, tokens, experts) -> np.ndarray:
    """Bytes per GPU of DeepEP's low-latency Buffer (get_low_latency_rdma_size_hint) [2] and its
    workspace, for `tokens` dispatched per rank."""
    h, t, e = (np.asarray(v, dtype=np.float64) for v in (h, tokens, experts))
    scales = np.floor(h / 128.0)
    m_d = 16.0 + np.maximum(2.0 * h, h + 4.0 * scales)
    m_c = 4.0 * scales + 2.0 * h
    send = np.maximum(t * m_d, e * t * m_c)
    recv = e * t * np.maximum(m_d, m_c)
    total = 2.0 * send + 2.0 * recv + 2.0 * _ceil(4.0 * e, 128)
    return np.floor((total + ALIGN) / ALIGN) * ALIGN + WORKSPACE_BYTES


def hybridep(h, ep, tokens, experts, per_domain) -> tuple[np.ndarray, np.ndarray]:
    """(NVLink + all-gather, RDMA) bytes per GPU of Hybrid-EP's buffer [3] (module docstring)."""
    h, ep, e = (np.asarray(v, dtype=np.float64) for v in (h, ep, experts))
    t = _ceil(tokens, HYBRIDEP_TOKEN_ALIGNMENT)
    n = np.maximum(np.minimum(np.asarray(per_domain, dtype=np.float64), ep), 1.0)
    nodes = np.maximum(ep / n, 1.0)
    probs = 4.0 * e / np.maximum(ep, 1.0) * n  # fp32, the domain's experts
    scales = 4.0 * np.floor(h / 128.0)
    nvl = t * ep * (2.0 * h + probs + scales) + e * t * ep
    rdma = t * ((2.0 * h + 4.0 * e + scales) + (nodes - 1.0) * (2.0 * h + probs + scales)
                + 2.0 * (nodes - 1.0) * (2.0 * h + probs))
    return nvl, np.where(nodes > 1.0, rdma, 0.0)


def buffer_bytes(dispatcher: str, h, ep, tokens, experts, per_domain, etp=1) -> np.ndarray:
    """Bytes per GPU the job's dispatcher (a job-wide name, planner/dispatch.py) keeps outside
    the caching allocator, its kernels run over the etp x ep group (per_domain: that group's
    members in the rank's NVLink domain) with etp x experts columns (module docstring, "Expert TP");
    0 where the group is one rank (no dispatch) or the dispatcher allocates none."""
    group = np.asarray(ep, dtype=np.float64) * np.asarray(etp, dtype=np.float64)
    experts = np.asarray(experts, dtype=np.float64) * np.asarray(etp, dtype=np.float64)
    if dispatcher == "deepep":
        b = sum(deepep_normal(h, group))
    elif dispatcher == "deepep_ll":
        b = deepep_low_latency(h, tokens, experts)
    elif dispatcher == "hybridep":
        b = sum(hybridep(h, group, tokens, experts, per_domain))
    else:
        b = np.zeros(np.shape(group))
    return np.where(group > 1, b, 0.0)
