"""NCCL's NVLink SHARP (NVLS) buffers: device memory NCCL binds with cuMem, outside PyTorch's caching allocator,
for each communicator that runs an NVLS collective (memory.py [nv]).

References (NVIDIA/nccl, v2.27.3-1 = 72d24320 unless said otherwise; the model follows it):
[1] src/transport/nvls.cc ncclNvlsBufferSetup l. 316-342: nChannels = the communicator's NVLS channels (l. 333), buffSize =
    nvlsChunkSize x NCCL_STEPS, nvlsPerRankSize = nChannels x 2 x buffSize, nvlsTotalSize = nvlsPerRankSize x nHeads,
    allocated by nvlsAllocateMem (l. 342): cuMemCreate of that size, rounded up to the allocation granularity
    (l. 262, 267), the unicast memory of this GPU, then bound to the multicast object (cuMulticastBindMem); the
    multicast mapping is a virtual mapping of the bound memory, no second copy. Kept until the communicator is
    destroyed (ncclNvlsFree). The same formula v2.22.3-1 (l. 262-265) through v2.29.7-1 (l. 331-335).
[2] NCCL_NVLS_CHUNKSIZE, default 128 KiB (nvls.cc l. 152); NCCL_STEPS 8 (src/include/device.h l. 25): 1 MiB a
    buffer.
[3] nvlsChannels (ncclNvlsInit, nvls.cc l. 154-200: l. 179-198): 16 below compute capability 10.0 (NVLS_NCHANNELS_SM90,
    l. 147); from 10.0, 24 where the communicator is in one node or one MNNVL clique (NVLS_NCHANNELS_SM100_NVL,
    l. 149), else 32 (NVLS_NCHANNELS_SM100, l. 148); NCCL_NVLS_NCHANNELS overrides (not a job field: not modelled).
[4] nHeads (src/graph/connect.cc l. 254: the NVLS graph's channels): the NVLS search takes at most
    min(NCCL_MAX_NVLS_ARITY 32 (device.h l. 206), the communicator's GPUs in the node) heads (src/graph/search.cc
    l. 964) and, inside one node (no network), exactly that many (l. 969-971: minChannels = maxChannels); across
    nodes one head per GPU that reaches a NIC: taken as the same count (HGX/DGX: a NIC per GPU), an assumption.
[5] Which communicators: ncclNvlsInit returns with no NVLS where NCCL_NVLS_ENABLE is 0 or the communicator has
    2 GPUs or fewer in the node (nvls.cc l. 160, `gpuCount <= 2`; v2.29.7-1 l. 162 lowers it to `< 2`, not
    taken), and asks the GPU's multicast support (l. 168-171, the hardware's `nvls` flag: comm.nvls_enabled); the
    NVLS graph needs NVSwitches and compute capability >= 9.0 (search.cc l. 962).
[6] When: with NCCL_RUNTIME_CONNECT (default 1, src/init.cc l. 52; used where cuMem is, l. 1148) the buffers are
    set up at the first collective whose algorithm is NVLS or NVLS-tree (src/group.cc ncclCollPreconnect's NCCL_ALGO_NVLS
    case, l. 153-156, calls ncclNvlsBufferSetup), not at init (only the credits then: nvls.cc l. 405, 433, nChannels x 2 x 64 B x
    nHeads, rounded up to the granularity); without it at init (init.cc l. 1171). A training step's large
    all-reduce / all-gather / reduce-scatter inside an NVLink domain are NVLS's (the tuner's fastest there: comm.py
    [6]), run in the first step, so the buffers are held at every later step's peak. Before v2.22.3-1: [8].
[7] The credits' allocation: 16 x 2 x 64 B x 8 = 16 KiB, rounded up to the allocation granularity
    (CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, queried at run time, nvls.cc l. 261-262): taken as 2 MiB, NCCL's
    NVLS_MEM_ALIGN_SIZE (nvls.cc l. 146; v2.20.3-1 l. 228 used it as the flags' size), an assumption.
[8] Earlier releases (not modelled): ncclNvlsSetup set the buffers up at communicator init, nChannels
    (comm->nChannels) x 2 x (buffSize + NVLS_MEM_ALIGN_SIZE 2 MiB of head / tail flags) x nHeads: v2.18-v2.20
    with the Simple protocol's buffer, 4 MiB (v2.20.3-1 and v2.20.5-1 nvls.cc l. 291, 309-312: 6 x the figure
    here a channel and head, 1.5 GiB for an 8-GPU H100 communicator at 16 channels), v2.21.5-1 with NVLS_CHUNKSIZE
    128 KiB x 8 steps, 1 MiB (l. 233, 292, 310-314: 3 x). PyTorch's CUDA 12 wheels shipped releases before v2.22
    into 2025 (torch 2.1.0: 2.18.1, pytorch/pytorch#112285; the build pin was v2.21.5-1 until pytorch/pytorch
    #146073, 2025-01-30, moved it to v2.25.1-1: .ci/docker/common/install_cuda.sh '-NCCL_VERSION=v2.21.5-1'). The planner prices the
    v2.22+ figure everywhere and carries no NCCL release: a stack (stack_db) is a trainer, not a dated environment
    (the megatron stack prices 2021 to 2026 records), and a record names a container at most, not its NCCL; no
    measured figure in tests/data sees these buffers (the memory rows compare the allocator's reserved or allocated
    peak, which excludes them; the Megatron-Bridge release records run with NCCL_NVLS_ENABLE=0, validate.py rule
    13d), so a version rule could not be checked against any figure. An older NCCL's run is under-priced: an
    8-GPU H100 group at 16 channels bound 768 MiB (v2.21) or 1,536 MiB (v2.18-v2.20), priced 258 MiB.

The communicators a plan's GPU runs NVLS on: its TP group (tp), its gradient group (Megatron's data-parallel
group with CP, dp x cp; FSDP's shard group), and with MoE its expert-data-parallel group (tp cp dp / (etp ep)):
each counted where its members in the GPU's NVLink domain exceed 2. Not counted: PP's send / recv, CP's ring
(send / recv) and all-to-all, EP's all-to-all (no NVLS algorithm for them: NCCL_FUNCTION_ALGOS in comm.py), and
the small all-reduces of other groups (fp8 amax, the loss, the gradient norm: sizes where NVLS is not the tuner's
pick, an assumption).
"""

from __future__ import annotations

import numpy as np

NVLS_CHUNK_BYTES = 128 * 1024  # NCCL_NVLS_CHUNKSIZE default [2]
NCCL_STEPS = 8  # [2]
NVLS_BUFFER_BYTES = NVLS_CHUNK_BYTES * NCCL_STEPS  # one buffer, 1 MiB [1][2]
NVLS_CHANNELS_SM90 = 16  # [3]
NVLS_CHANNELS_SM100_NVL = 24  # [3] one node or MNNVL clique
NVLS_CHANNELS_SM100 = 32  # [3] across nodes
NVLS_MAX_HEADS = 32  # NCCL_MAX_NVLS_ARITY [4]
NVLS_MIN_LOCAL_RANKS = 3  # gpuCount <= 2: no NVLS [5]
NVLS_CREDIT_BYTES = 2 * 2**20  # the credits, one 2 MiB granule [7]


def nvls_comm_bytes(local_ranks, channels) -> np.ndarray:
    """Bytes of device memory one GPU binds for one NVLS communicator with `local_ranks` members in its NVLink
    domain and `channels` NVLS channels [1][7]: channels x 2 x 1 MiB x min(local_ranks, 32) + 2 MiB of credits;
    0 where local_ranks <= 2 [5]."""
    local = np.asarray(local_ranks, dtype=np.int64)
    heads = np.minimum(local, NVLS_MAX_HEADS).astype(np.float64)
    b = np.asarray(channels, dtype=np.float64) * 2.0 * NVLS_BUFFER_BYTES * heads + NVLS_CREDIT_BYTES
    return np.where(local >= NVLS_MIN_LOCAL_RANKS, b, 0.0)


def nvls_channels(compute_capability, spans_domains) -> np.ndarray:
    """NCCL's nvlsChannels [3] on a GPU of `compute_capability` ((major, minor), comm.gpu_capability; None: not
    given, taken as below 10.0, Hopper's rule, an assumption) for a communicator that spans NVLink domains or not
    (bool array)."""
    spans = np.asarray(spans_domains, dtype=bool)
    if compute_capability is None or tuple(compute_capability) < (10, 0):  # a hardware property, not a searched one
        return np.full(spans.shape, NVLS_CHANNELS_SM90, dtype=np.int64)
    return np.where(spans, NVLS_CHANNELS_SM100, NVLS_CHANNELS_SM100_NVL).astype(np.int64)
