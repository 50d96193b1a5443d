"""Communication costs: alpha-beta models of collectives, and where a group lands.

Units: bytes, seconds, B/s (bytes per second per GPU per direction). Every function takes
numpy arrays or scalars alike and returns arrays (0-d for scalars); operations and
algorithms are integer codes so that a search can hold them in int64 arrays.

Size convention (the one nccl-tests prints in its `size` column [4]):
    all-reduce      S = the per-rank buffer (every rank holds S and ends with the sum of S)
    reduce-scatter  S = the total array: each rank contributes S and keeps a shard of S/n
    all-gather      S = the total gathered size: each rank contributes S/n, ends with S
    all-to-all      S = each rank's whole send buffer: S/n goes to every rank
    send-recv       S = the message each rank sends to its neighbour

Cost model [1]: time = rounds * alpha + bandwidth term, where alpha is the latency of one
round (one message crossing one link, NCCL's per-step latency [5]) and the bandwidth term
is the bytes the busiest rank moves over its link divided by the link's bandwidth B.
Links are full duplex and collectives are pipelined in chunks (as NCCL does [5]), so a rank
that sends and receives X bytes each way needs X / B, not 2X / B.

Per collective and algorithm, n ranks (bytes sent = bytes received per rank unless noted).
Algorithms that treat the NVLink domain and the network apart see m ranks per domain, N = n/m
domains, B_nv the NVLink, B_x the network per GPU (its share of the node's NICs, after pod
contention), a_nv and a_x their per-round latencies; k_N = 1 for N = 2 and 2 for N > 2 (a
node of a double binary tree over N > 2 domains is interior in one tree and a leaf in the
other: 2S each way; with N = 2 each domain is the root of one tree: S each way) [5][8]:
    all-reduce  ring [2][3]        2(n-1) rounds, 2(n-1)/n * S, time 2(n-1)/n * S / B
                tree [5][8]        NCCL's double binary tree across domains, a chain inside:
                                   bandwidth max(2S / B_nv [m > 1], k_N S / (m B_x) [N > 1])
                                   / (0.92 c(S)), 0.92 = TREE_BANDWIDTH_EFFICIENCY, c(S) NCCL's
                                   medium-size correction TREE_CORRECTION; latency 2((m-1) +
                                   ceil(log2 N)) hops of TREE_HOP_LATENCY_S (default: a_nv, a_x).
                                   With m = 1: the flat tree, 2S / (0.92 c B) over n > 2 ranks
                parameter-server   2 rounds; the server receives (n-1)S and sends (n-1)S back
                  [3, sec. 2.2]    (pipelined: (n-1)S / B; the seed's "about 20 s" receive)
                hierarchical       reduce-scatter inside the NVLink domain (g local ranks) on S,
                                   ring all-reduce across domains (n/g ranks) on S/g over the
                                   network, all-gather inside the domain on S; rounds
                                   2(g-1) + 2(n/g-1)
                nvls [6][11]       NVLink SHARP (NVSwitch reduces and multicasts) inside one
                                   domain: S / B_nvls + NVLS_LATENCY_S, B_nvls the hardware's
                                   measured NVLS algbw (nvls_algbw_GBps) or
                                   NVLS_ALGBW_PER_RING_BUSBW x B_nv whatever n [5]
                nvls-tree [5][15]  NVLS inside each domain, a tree across domains on the
                                   reduced data, each rank's NIC carrying a 1/m shard:
                                   max(S / B_nvls, k_N S / (m B_x)) + NVLS_LATENCY_S +
                                   2 ceil(log2 N) a_x. Needs NVLS switches and m >= 2
                                   (NVLS and NVLS-tree: and a run whose NCCL_NVLS_ENABLE is not 0,
                                   job field nccl_nvls_enable, `nvls_enabled` [22])
                collnet [5]        the switches reduce (IB SHARP): each domain sends S and
                                   receives S whatever N. Inside the domain NVLS (NCCL's
                                   NVLS + SHARP on NVLS hardware: S / B_nvls + NVLS_LATENCY_S)
                                   or CollNet-direct (reduce-scatter and all-gather to the NIC
                                   heads over NVLink, 2(m-1)/m S / B_nv, 2(m-1) a_nv, and NCCL's
                                   GPU/NIC penalty (r+1)/2 on the network for r GPUs per NIC);
                                   network S / (m B_x) and 2 a_x. Needs fabric sharp
    reduce-scatter, all-gather
                ring [1][4]        n-1 rounds, (n-1)/n * S
                pat [10][13]       NCCL's PAT (one rank per domain): (n-1)/n * S at
                                   PAT_BANDWIDTH_EFFICIENCY of B; latency 8 us + log2(n) x
                                   4 us + 2.8 us x n (NCCL's model, linear part included)
                tree               recursive halving / doubling [1]: ceil(log2 n) rounds, same
                                   bytes as the ring (by name only)
    all-to-all  direct             pairwise exchange [1]: n-1 rounds, (n-1)/n * S
    send-recv   direct             1 round, S
Protocols [17][18][19]. NCCL runs each (algorithm, protocol) it enables and picks the least
predicted time. The formulas above are the Simple protocol's (NCCL's choice for the messages
of training: gradient buckets, parameter shards, activations). Inside one NVLink domain (the
collective's ranks in one domain, N = 1: no network hop; a GB200 / GB300 NVL72 rack is one
domain, as NCCL's multi-node NVLink tunes it [20]) ring and tree also run LL and
LL128 (NVLS, NVLS-tree, CollNet and PAT Simple only; the model's parameter server,
hierarchical all-reduce, recursive reduce-scatter / all-gather and the point-to-point
all-to-all and send/recv are priced with Simple only), with NCCL 2.20.3's figures:
    ring  LL / LL128 latency  baseLat + rounds x (f hwLat_NET + (1-f) hwLat_NVLink), f = 1/m
                              the share of steps leaving a domain (0 inside one), an NVLink step
                              at least NET_OVERHEAD_S in a ring across domains; baseLat 6.6 /
                              14 us, hwLat NVLink 0.6 / 1.9 us, network 2.7 / 4.0 us
          LL bandwidth        the bytes at min(B/4, llMaxBw) (a third of B for reduce-scatter
                              and all-gather inside one domain); LL128 at 0.92 B (0.7 B with one
                              rank per domain)
    tree  LL / LL128 latency  baseLat + 2((m-1) hwLat_NVLink + ceil(log2 N) hwLat_NET);
                              baseLat 6.8 / 14 us, hwLat NVLink 0.6 / 1.25, network 5.0 / 8.5 us
          bandwidth           from the Simple tree's busBw term T (before its correction):
                              LL max(3.8 T, 2S / llMaxBw), LL128 T / (7/9 in one domain, 120/128
                              across), each over NCCL's medium-size correction for the protocol
llMaxBw: 87.7 GB/s inside one domain (39.0 on Volta), 39.0 GB/s across two domains and 20.4
across more (NCCL's Intel-CPU rows: assumed). LL128 runs where NCCL enables it by default
(`ll128_default`: compute capability 7.0, 8.0, 9.0 as 2.20.3 does; 10.0 and 12.0 as v2.25.1-1,
the first release with Blackwell, does; 10.3 as v2.27.3-1 does: [21]; NCCL's other LL128
conditions, the GPU-to-NIC path among them, hold inside one domain and are moot across: [23])
or where the caller names it.
Who picks: `group_collective`, `auto_collective_times` (the search) and `best_algorithm` /
`collective_time` given protocol=None price every (algorithm, protocol) the run allows and
take the fastest; `collective_time` prices Simple alone unless told otherwise (the seed's
alpha-beta figures), as does a run whose NCCL_PROTO is Simple (`nccl_proto_protocols`: job field
nccl_proto, the protocols passed per op by step.Collectives).
Across domains (N > 1: a network hop) every collective is priced with Simple alone, whatever
the protocols allowed (LL_NETWORK_PRICED False) [19]: NCCL's network LL / LL128 latencies
(2.7 us a ring step, 5.0 us a tree hop) rank its protocols but understate the measured small
collectives of tests/data/nccl_logs, which the Simple figures meet better (signed medians of
the 8 B - 64 KiB rows, Simple -> LL / LL128: 2x8 H100 +7.0% -> -37.1%, 2x8 A100 EFA -23.0%
-> -84.6%, 2x8 B200 all-gather -77.9% -> -91.1%; one 8-H100 node +44.0% -> -5.7%). The
network rows of the table above (hwLat NET, llMaxBw across nodes, NET_OVERHEAD_S, LL128 with
one rank per domain) are kept as NCCL's figures, unused while that rule holds.
Not modelled: NCCL's per-channel caps (no channel count here), the Simple protocol's base
latency (8.4 us a ring) and the plateau factor of multi-node rings (l. 440-443), p2p LL.
ranks == 1 costs zero. An (operation, algorithm) pair that does not exist costs +inf time
and NaN bytes, so that a search's argmin never picks it (see `supported`).

busbw is what nccl-tests would print [4]: algbw = S / time, busbw = algbw * factor(n) with
factor 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter, all-gather and all-to-all, 1 for
send-recv. With alpha = 0 a ring's busbw equals B exactly.

Placement (`group_link`): ranks are numbered with the innermost parallel axis fastest (TP,
then CP, PP, DP by default [9, sec. 3.3.2]; see `axis_strides`), and consecutive ranks fill an
NVLink domain, then a pod. A group's members are `stride` ranks apart and its block spans
group_size * stride consecutive ranks. A block inside one NVLink domain uses NVLink. Otherwise
each GPU reaches other domains through its own NIC [3, sec. 4.2, 6.2]; NCCL spreads a ring's
channels over the NICs of a node, so a group with m members per domain gets
min(B_nvlink, m * B_net) (m = 1 for a DP or PP group: the per-GPU network bandwidth) [12].
A block larger than a pod (or straddling a pod boundary) crosses the oversubscribed layer
[3, sec. 6.2-6.3][9, sec. 3.3.1]; see `group_link` for the contention model. Where the
hardware allocates a job in segments (GB200/GB300 NVL72: 64 GPUs of a 72-GPU rack for a
128-GPU job [16]), the domain a job fills is the segment (`domain_in_use`).

References
[1] Thakur, Rabenseifner, Gropp 2005, "Optimization of Collective Communication Operations in
    MPICH", Int. J. High Performance Computing Applications 19(1): the alpha-beta (latency-
    bandwidth) cost model; ring and recursive-doubling allgather, recursive-halving
    reduce-scatter, pairwise-exchange alltoall.
[2] Patarasuk, Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", J. Parallel Distrib. Comput. 69(2): ring all-reduce sends 2(n-1)/n * S.
[3] The seed chapter this project reproduces: sec. 2.2 parameter server
    (7 x 141 GB ~ 990 GB, ~20 s at 50 GB/s), sec. 2.3 ring (1.0/1.5/1.75/1.875 x S at 2/4/8/16
    ranks; 4,096 ranks x 10 us a round ~ 80 ms; 141 GB all-reduce ~0.6 s at 450 GB/s, ~5.6 s at
    50 GB/s), sec. 4.2 NVLink 450 GB/s and one 400 Gb/s NIC per GPU, sec. 6.2-6.3 pods of
    3,072 GPUs joined at 1:7.
[4] NVIDIA/nccl-tests doc/PERFORMANCE.md and src/*.cu `*GetBw`: algbw and busbw factors.
[5] NVIDIA/nccl src/graph/tuning.cc at v2.20.3-1 (commit b6475625), Simple protocol:
    per-step hwLat Ring/NVLink 3.4 us, Ring/NET 14 us, NVLS/NVLink 23 us, Tree 28 us per hop
    (NVLink and NET); tree busBw x .92 and algbw = busBw / 2; NVLS-tree bw = min(bwIntra,
    nNodes <= 2 ? bwInter : bwInter / 2) and latency intraLat + 2 log2(nNodes) interLat;
    CollNet-direct GPU/NIC factor (r - (r-1)/2); treeCorrectionFactor for 64 B to 256 MiB;
    ring latency = steps x per-step latency, the inter-node steps at the network figure.
[6] S. Jeaugey (NCCL maintainer), github.com/NVIDIA/nccl-tests/issues/212: effective NVLink4
    bandwidth ~370 GB/s of 450 for rings (or any non-all-reduce collective); NVLS all-reduce
    ~480 GB/s busbw (~275 algbw) on 8 H100s. github.com/NVIDIA/nccl/issues/1442: ~30% gain
    for all-reduce with NVLS.
[7] D. Addison (AddyLaddy, NCCL), github.com/NVIDIA/nccl-tests/issues/290: an NDR 400 Gb/s NIC
    reaches 46-48 GB/s of its 50 GB/s line rate.
[8] Sanders, Speck, Traeff 2009, "Two-tree algorithms for full bandwidth broadcast, reduction
    and scan", Parallel Computing 35(12); NCCL 2.4's double binary trees (S. Jeaugey, NVIDIA
    developer blog 2019, "Massively Scale Your Deep Learning Training with NCCL 2.4").
[9] Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783: sec. 3.3.1 (3,072-GPU pods with
    full bisection bandwidth, 1:7 oversubscription above them, topology-aware placement to
    minimize cross-pod traffic, latency up to tens of microseconds), sec. 3.3.2 (parallelism
    order TP, CP, PP, DP from innermost).
[10] NVIDIA developer blog 2024, "New Scaling Algorithm and Initialization with NVIDIA
    Collective Communications Library 2.23": PAT, logarithmic all-gather / reduce-scatter
    for one GPU per node.
[11] github.com/NVIDIA/nccl/issues/1455: on H100/H200 NCCL uses rings for 2-4 GPUs (~365-370
    GB/s busbw) and NVLS for 5-8 GPUs (420/440/460/480 GB/s busbw), i.e. ~262-274 GB/s algbw.
[12] nccl-tests all_reduce_perf on 2 x 8 H100 with 8 x 400G NICs per node: 472 GB/s busbw at
    16 GiB (planner reference data nccl_logs/h100_16gpu_2node_allreduce_dgx06-dgx07.txt), ten
    times one NIC's 47 GB/s: a multi-node group uses all the NICs of its nodes.
[13] NVIDIA/nccl src/graph/tuning.cc of the releases with PAT (2.23 and later; the copy read
    has the Blackwell tables): PAT busBw x .75 and latency 8 + log2(nNodes) x interLat/3.5 +
    2.8 x nRanks us, PAT only with one GPU per node (ncclPatEnable); Tree/Simple hwLat cut to
    4 us (NVLink) / 14 us (network) with an 8.4 us base.
[14] Multi-node nccl-tests logs the model is checked against without calibration
    (tests/test_comm.py::test_multi_node_reference_logs_uncalibrated, README): 2 x 8 A100 on
    AWS p4de (4 x 100G EFA per node), 2 x 8 B200 all-gather on GKE A4, 2 x 8 H100 DGX, and
    one GB200 NVL72 rack.
[15] Two-node (16-GPU) all-reduce busbw with 8 x 400G NICs per node: 465-487 GB/s on H100 and
    482-486 GB/s on H200 over RoCE without SHARP (planner reference hardware.yaml, measured),
    above the 8 x 47 = 376 GB/s a ring can draw from the NICs: NCCL runs NVLS-tree.
[16] NVIDIA-NeMo/Megatron-Bridge scripts/performance/utils/executors.py (commit f02b14e6)
    slurm_executor: "add --segment flag to sbatch if job uses GB200 and goes beyond one rack":
    with 4 GPUs per node and more than 18 nodes, segment = the first of 18, 17, ..., 1 that
    divides the node count, passed to run.SlurmExecutor(segment=...) (SLURM sbatch --segment:
    the nodes of each segment in one topology block, here one NVL72 rack).
[17] NVIDIA/nccl src/graph/tuning.cc at v2.20.3-1 (commit b6475625), LL and LL128: baseLat
    l. 54-59 (Tree {6.8, 14.0, 0}, Ring {6.6, 14.0, 8.4} us for LL, LL128, Simple); hwLat
    l. 61-78 (NVLink Tree {.6, 1.25, 28}, Ring {.6, 1.9, 3.4}; NET Tree {5.0, 8.5, 28}, Ring
    {2.7, 4.0, 14.0}); llMaxBws l. 85-90 and its index l. 140-146; network overhead
    l. 108-118 and its floor on a multi-node ring's steps l. 242-249; LL / LL128 bandwidth
    l. 181-185; NVLS and NVLS-tree Simple only l. 173, CollNet l. 187-188; protocol enable
    (NCCL_PROTO, LL128's default) l. 269-323; treeCorrectionFactor l. 413-419. The LL and
    LL128 figures are the same in v2.29.7-1's tuning.cc (l. 144-166), whose LL128 default
    covers every capability from 7.0 (l. 494) and whose PAT runs Simple only (l. 283).
    Protocol codes: src/include/nccl_common.h l. 39-41 (LL 0, LL128 1, Simple 2).
[18] NVIDIA/nccl src/enqueue.cc at v2.20.3-1 topoGetAlgoInfo l. 1448-1500: every algorithm
    and protocol's ncclTopoGetAlgoTime (tuning.cc l. 421-448, latency + bytes / bandwidth),
    the least kept (a strict `<`: ties go to the earlier algorithm, then protocol).
[19] Measurement: the 8 B - 64 KiB rows of the nccl-tests logs in tests/data/nccl_logs against
    this model uncalibrated, placed as calibrate.nccl.compare_to_model places them
    (scripts/nccl_small_sizes.py, docs/nccl_small_sizes.md), model / measured - 1, signed
    median, Simple alone -> NCCL's protocols at tuning.cc's figures:
    h100_8gpu_allreduce_aws-p5-batch.txt (one node) +44.0% -> -5.7% (median |err| 44.0% ->
    9.1%); h100_16gpu_2node_allreduce_dgx06-dgx07.txt +7.0% -> -37.1%;
    a100_16gpu_2node_allreduce_aws-p4de-efa.txt -23.0% -> -84.6%;
    b200_16gpu_2node_allgather_google-dranet.txt -77.9% -> -91.1%. Hence LL / LL128 are priced
    inside one NVLink domain only (LL_NETWORK_PRICED). Against it inside one node: the two rows
    (32 and 64 KiB) of a100_8gpu_allreduce_stas00-mlengineering-TRIMMED.txt go +5.9% -> -63.8%
    under the LL ring: no tuner figure explains them (the log names no NCCL version and no
    environment; NVLink, its 235 GB/s busBw; every tuning.cc from v2.7.8-1 to v2.30.7-1 puts
    the LL ring at 10.2-15.0 us + 0.7-1.3 us there, LL128 at 36.6-40.6 us, Simple at 56 us),
    and the command, all_reduce_perf -g 8, drives the 8 GPUs from one thread (nccl-tests'
    ncclGroupStart / 8 launches / ncclGroupEnd an iteration), unlike a training job's process
    per GPU: docs/nccl_small_sizes.md. The rule stays; the rows are reported, not fitted.
[20] NCCL counts a multi-node NVLink (MNNVL) clique, an NVL72 rack's NVLink partition, as one
    node for tuning. NVIDIA/nccl v2.20.3-1 (b6475625, the first release with MNNVL) tuning.cc
    l. 135-136 "MNNVL support - treat as a single NVLink connected node": nNodes = comm->MNNVL
    ? 1 : comm->nNodes, read by every nNodes term below it (llMaxBw's row l. 143-146, hw[]
    NVLink l. 156, the ring's inter-node steps l. 162-164 and network overhead l. 243-248, the
    tree's log2(nNodes) l. 252-253, LL128's 7/9 l. 185), with MNNVL only where the whole
    communicator is in one clique (init.cc l. 881-917: cliqueSize == nRanks); NVLS off under
    MNNVL there (tuning.cc l. 285-293, transport/nvls.cc l. 239-240). From v2.21.5-1
    (ab2b89c4) the special case is gone because the clique's topologies are fused into one
    system (graph/topo.cc l. 748-766, MNNVL = clique size > 1: init.cc l. 872), so the ring
    search runs over the clique's GPUs and nNodes counts distinct first ring ranks (init.cc
    l. 1110-1120): one per clique. Same at v2.30.7-1 (73cf1122): graph/topo.cc l. 1887-1920,
    connect.cc ncclTopoPreset l. 22, 48 (ringRecv = the fused system's first ring GPU),
    init.cc l. 1285-1297, tuning.cc l. 259-286 (nNodes = comm->nNodes), NVLS allowed under
    MNNVL (only buffer registration off: transport/nvls.cc l. 627-628). The model's N = 1
    for a group inside one NVLink domain (`nvlink_domain` 72, or the job's segment: [16])
    is NCCL's nNodes = 1. Across racks v2.20.3 turns MNNVL off and counts hosts (trays of 4),
    later releases count cliques (the model's domains); either way N > 1: Simple ([19]).
[21] NCCL's LL128 default for GPUs newer than 2.20.3 (whose newest build target is sm_90:
    makefiles/common.mk l. 39; its switch [17] l. 314-319 leaves 10.0 in `default: pEnable &= 0`,
    "Other cases are not tested", a rule for an unknown GPU, and no Blackwell run used 2.20.3).
    The first release with Blackwell is v2.25.1-1 (80f6bda4, "Add Blackwell/SM100 support";
    makefiles/common.mk l. 42-43 build sm_100 and sm_120; v2.24.3-1 has neither): tuning.cc
    l. 425-439 enables LL128 by default for `case 100` and `case 120` (l. 435-436), the rest as
    2.20.3 (NVLink inside, one capability). v2.26.2-1 to v2.26.6-1 the same (l. 426-440); from
    v2.27.3-1 (72d24320) l. 457-464 every capability from 7.0 (`!(minCompCap < 70 || ...)`, so
    10.3, which v2.25.1-1 to v2.26.6-1 left in the untested default); v2.28.3-1 l. 480-494 and
    v2.29.7-1 (b91894bd) l. 481-495 the same (LL128 over C2C / PXN behind NCCL_LL128_C2C, default
    1); v2.30.7-1 (73cf1122) l. 518-536 also across capabilities from 9.0 (l. 533). So the model
    takes, per compute capability, the rule of the first release covering it
    (LL128_DEFAULT_RULES): 7.0 / 8.0 / 9.0 2.20.3's, 10.0 / 12.0 v2.25.1-1's, 10.3 v2.27.3-1's,
    all on. The B200 and GB200 logs of tests/data/nccl_logs ran 2.26.6 and 2.26.2 (LL128 on at
    10.0). What the Blackwell releases change besides, not taken (the model keeps 2.20.3's
    formulas): baseLat and hwLat have no per-architecture rows and keep the LL / LL128 figures of
    [17] (v2.25.1-1 l. 120-142; v2.30.7-1 l. 151, 159, 171); llMaxBws gain a Blackwell row, one
    node 2 x 141.0 = 282 GB/s (v2.25.1-1 l. 151-156, v2.30.7-1 l. 178-183; Hopper's 141.0 since
    v2.21.5-1, 87.7 in 2.20.3) with the LL ring at min(llMaxBw, busBw x .5) (v2.21.5-1 on;
    v2.25.1-1 l. 255) instead of 2.20.3's quarter / third, and LL128's ring without the 0.7 for
    one rank a node (l. 256); the per-channel caps, not modelled (no channel count), have
    Blackwell rows: perChMaxRingLL128Bws 2 x 36.7 (v2.25.1-1 l. 162; v2.28.3-1 l. 179), 34.5
    (v2.29.2-1 l. 179), 40.0 GB/s (v2.29.7-1 l. 180, v2.30.7-1 l. 189) against Hopper's 36.7;
    perChMaxTreeLL128Bws 2 x 36.7 / 2 x 29.0 (v2.25.1-1 l. 168), {55.6, 31.67, 20.0} from
    v2.28.3-1 (l. 185; v2.30.7-1 l. 196); perChMaxTreeBws 2 x 38.7 (v2.25.1-1 l. 174), {70.0, 42.8,
    24.0} from v2.28.3-1 (l. 191; v2.30.7-1 l. 203).
[22] NCCL_NVLS_ENABLE, NVIDIA/nccl src/transport/nvls.cc at v2.20.3-1 (b6475625): l. 230
    NCCL_PARAM(NvlsEnable, "NVLS_ENABLE", 2), read as an integer (src/misc/param.cc l. 70,
    strtoll); ncclNvlsInit l. 233-259 leaves nvlsSupport 0 and no NVLS channels where it is 0
    (l. 240, as where the node has 2 GPUs or fewer), asks the GPU's
    CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED where it is 2 (l. 248-252) and forces support
    otherwise (l. 253-255). src/enqueue.cc topoGetAlgoInfo l. 1466 skips NVLS and NVLS_TREE for
    every collective where nvlsSupport != 1, so the tuner picks among the rest (ring, tree,
    CollNet); NCCL's NVLS across nodes with CollNet (NVLS + SHARP, l. 1467) goes with it, which
    the model's CollNet over NVLS inside the domain (collnet_nvls) stands for: CollNet-direct
    there instead. ncclNvlsSetup (l. 262-263) returns before NVLS's buffers: each GPU binds
    nChannels x 2 x (Simple buffSize 4 MiB + 2 MiB) x nHeads bytes of device memory a
    communicator (l. 297, 309-312; cuMemCreate l. 147; DEFAULT_BUFFSIZE init.cc l. 543),
    outside PyTorch's allocator (from v2.22.3-1 1 MiB steps, set up at the first NVLS
    collective: planner/nvls_buffers.py), priced as the memory term nvls_buffers (memory.py
    [nv], releases from v2.22.3-1), which NCCL_NVLS_ENABLE=0 removes. Same variable, default and skip through v2.29.7-1 (b91894bd: nvls.cc l. 153, 162,
    170), the 2-GPU floor there `gpuCount < 2`; from v2.27.3-1 a forced 1 that cannot bind the
    multicast memory fails the communicator ('Do not force-enable NVLS (NCCL_NVLS_ENABLE=1)',
    nvls.cc l. 282-284), hence plan._nccl_nvls_enable refuses 1 on hardware without NVLS. The
    job field nccl_nvls_enable (read from a launch script's export: trainers/megatron.py
    read_nccl_nvls_enable; Megatron-LM's CI exports 0, tests/functional_tests/shell_test_utils/
    _run_training.sh @d98e8a64 l. 61) reaches the step's collectives through `nvls_enabled`.
[23] NCCL's LL128 default beyond the compute capability, src/graph/tuning.cc: at v2.20.3-1
    l. 308-320 LL128 is on only where the graph's typeInter <= PATH_PXB, or <= PATH_PXN on
    capability >= 9.0 (l. 311), typeIntra <= PATH_NVB (l. 312) and one capability (l. 313);
    the same condition at v2.21.5-1 l. 308, v2.22.3-1 l. 306, v2.24.3-1 l. 423, v2.25.1-1
    l. 428, v2.26.6-1 l. 429 (path codes src/graph/topo.h l. 55-82: LOC 0, NVL 1, NVB 2, PIX 3,
    PXB 4, PXN 5, PHB 6, SYS 7); v2.27.3-1 l. 460 raises the Hopper+ bound to PATH_P2C where
    NCCL_LL128_C2C (l. 211, default 1) is set (topo.h l. 62-98 adds C2C 3 and P2C 7: PIX 4,
    PXB 5, PXN 6); v2.28.3-1 l. 482-489 and v2.29.7-1 l. 483-490 (param l. 221, 222): with
    NCCL_LL128_C2C and capability >= 9.0 typeInter <= PATH_PXN (topo.h at v2.28.3-1 reorders
    P2C 6 before PXN 7), else <= PATH_PXB ('Don't enable LL128 over PxN'). typeInter is the path
    from a GPU to the NIC its ring or tree leaves the node by (PIX: same PCIe switch; PXB:
    several; PXN: through a peer GPU over NVLink; P2C: over a Grace C2C link; PHB / SYS: through
    the CPU); typeIntra the GPU-to-GPU path inside the node. Inside one node NCCL drops the
    NICs from the communicator's system (src/graph/paths.cc ncclTopoTrimSystem l. 673-675: all
    ranks local, or MNNVL), so the search keeps its starting typeInter PATH_PIX
    (src/graph/search.cc l. 859; raised only with NICs present, l. 966-967) and the condition
    holds; typeIntra is NVL / NVB for the GPUs of an NVLink domain, the model's only place for
    LL / LL128, and a job runs one GPU type, so inside one domain the capability rule
    (LL128_DEFAULT_RULES) is NCCL's whole default. Across domains typeInter is the hardware's
    GPU-NIC PCIe placement and PXN use (NCCL_PXN_DISABLE, NCCL_P2P_PXN_LEVEL), which the hardware
    entries do not describe (fabric.rails gives NICs per node, not where they hang: PIX on a
    DGX H100 / HGX with a NIC a GPU on its switch, P2C on GB200's Grace-attached NICs), nor the
    run's NCCL_LL128_C2C. Not transcribed: there the model prices Simple alone whatever LL128's
    enable (LL_NETWORK_PRICED False, [19]), so the condition could move no figure; it becomes
    an input (a per-hardware GPU-NIC path type and the NCCL release) the day network LL / LL128
    are priced.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from .errors import PlannerError
from .terms import select

# ------------------------------------------------------------------------- codes
ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, SEND_RECV = 0, 1, 2, 3, 4
OP_CODES = {
    "all-reduce": ALL_REDUCE,
    "reduce-scatter": REDUCE_SCATTER,
    "all-gather": ALL_GATHER,
    "all-to-all": ALL_TO_ALL,
    "send-recv": SEND_RECV,
}
OP_NAMES = {v: k for k, v in OP_CODES.items()}

RING, TREE, PARAMETER_SERVER, HIERARCHICAL, NVLS, DIRECT, NVLS_TREE, COLLNET, PAT = 0, 1, 2, 3, 4, 5, 6, 7, 8
AUTO = -1  # only for `best_algorithm` / `group_collective`: the fastest supported algorithm
ALGO_CODES = {
    "ring": RING,
    "tree": TREE,
    "parameter-server": PARAMETER_SERVER,
    "hierarchical": HIERARCHICAL,
    "nvls": NVLS,
    "direct": DIRECT,
    "nvls-tree": NVLS_TREE,
    "collnet": COLLNET,
    "pat": PAT,
}
ALGO_NAMES = {v: k for k, v in ALGO_CODES.items()}

# The algorithm each operation uses when none is named (index = op code).
DEFAULT_ALGO = np.array([RING, RING, RING, DIRECT, DIRECT], dtype=np.int64)

# Which (op, algo) pairs exist: SUPPORTED[op, algo].
SUPPORTED = np.zeros((len(OP_CODES), len(ALGO_CODES)), dtype=bool)
SUPPORTED[ALL_REDUCE, [RING, TREE, PARAMETER_SERVER, HIERARCHICAL, NVLS, NVLS_TREE, COLLNET]] = True
SUPPORTED[REDUCE_SCATTER, [RING, TREE, PAT]] = True
SUPPORTED[ALL_GATHER, [RING, TREE, PAT]] = True
SUPPORTED[ALL_TO_ALL, DIRECT] = True
SUPPORTED[SEND_RECV, DIRECT] = True

# What `best_algorithm` may pick, AUTO_OK[op, algo]: the algorithms NCCL's tuner chooses
# among [5][13]. All-reduce: ring, tree, NVLS (inside one NVLink domain), NVLS-tree and
# CollNet (across domains; CollNet only where the fabric reduces in the switches, IB SHARP).
# Reduce-scatter and all-gather: ring, and PAT where every rank sits in its own NVLink
# domain (NCCL enables PAT only with one GPU per node [10][13]). The parameter server, the
# planner's own hierarchical all-reduce and the recursive-halving TREE for reduce-scatter /
# all-gather are available by name, never picked.
AUTO_OK = np.zeros_like(SUPPORTED)
AUTO_OK[ALL_REDUCE, [RING, TREE, NVLS, NVLS_TREE, COLLNET]] = True
AUTO_OK[REDUCE_SCATTER, [RING, PAT]] = True
AUTO_OK[ALL_GATHER, [RING, PAT]] = True
AUTO_OK[ALL_TO_ALL, DIRECT] = True
AUTO_OK[SEND_RECV, DIRECT] = True
AUTO_CANDIDATES = (RING, TREE, NVLS, NVLS_TREE, COLLNET, PAT, DIRECT)
# Algorithms that exist only where the hardware and the placement offer them (see
# `availability`): NVLS inside one NVLink domain of a switch that reduces; NVLS-tree across
# domains of such switches, with two or more ranks per domain; CollNet across domains of a
# fabric that reduces (IB SHARP); PAT with one rank per domain.
CONDITIONAL = (NVLS, NVLS_TREE, COLLNET, PAT)

# NCCL_ALGO, the run's environment variable (job field nccl_algo), read as NCCL reads it (NVIDIA/nccl @5067397c
# src/graph/tuning.cc parseList l. 36-119, called l. 457-461): `;`-separated entries, each an optional function
# prefix (`allreduce:`; only the first entry may lack one, and it applies to every function) and a `,`-list of
# algorithms, case-insensitive, a leading `^` excluding them instead; an unknown name is an error (ncclInvalidUsage).
# Its names (src/init.cc ncclAlgoStr) as the model's codes: NCCL's two CollNet variants are the model's one COLLNET.
NCCL_FUNCTIONS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")  # src/init.cc ncclFuncStr
NCCL_ALGOS = {"tree": TREE, "ring": RING, "collnetdirect": COLLNET, "collnetchain": COLLNET, "nvls": NVLS,
              "nvlstree": NVLS_TREE, "pat": PAT}
# what NCCL runs each function with (tuning.cc l. 293-298): all-gather and reduce-scatter ring, PAT, NVLS and
# CollNetDirect; all-reduce every algorithm but PAT
NCCL_FUNCTION_ALGOS = {"allgather": ("ring", "pat", "nvls", "collnetdirect"),
                       "reducescatter": ("ring", "pat", "nvls", "collnetdirect"),
                       "allreduce": ("tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree")}
NCCL_FUNCTION_OPS = {"allgather": ALL_GATHER, "reducescatter": REDUCE_SCATTER, "allreduce": ALL_REDUCE}


def _nccl_parse_list(text: str, var: str, elems, noun: str, nccl_names: str, example: str) -> dict:
    """NCCL's parseList (NVIDIA/nccl @5067397c src/graph/tuning.cc l. 36-119) over `text`, the value of `var`
    (NCCL_ALGO, NCCL_PROTO): {function: the set of `elems` (lower-case names) it enables, or None where no entry
    names the function (NCCL's own default for it)}. `;`-separated entries, each an optional function prefix
    (`allreduce:`; only the first entry may lack one, and it applies to every function) and a `,`-list of names,
    case-insensitive, a leading `^` enabling every name but those; an unknown name or function is an error, as NCCL's
    ncclInvalidUsage (PlannerError)."""
    where = f"{var}={text}"
    enabled: dict = {f: None for f in NCCL_FUNCTIONS}
    for i, entry in enumerate(text.split(";")):
        if not entry:
            continue
        prefix, sep, names = entry.partition(":")
        if not sep:
            if i:
                raise PlannerError(f"{where}: every entry but the first needs a function prefix (NCCL's parseList: "
                                   "'All entries except the first must have a prefix')",
                                   f"write e.g. {example}")
            prefix, names = None, entry
        funcs = [f for f in NCCL_FUNCTIONS if prefix is None or f == prefix.lower()]
        if not funcs:
            raise PlannerError(f"{where}: unknown function {prefix!r} (NCCL's: Broadcast, Reduce, AllGather, "
                               "ReduceScatter, AllReduce)", "name one of them, or give no prefix")
        negate = names.startswith("^")
        listed = {n.lower() for n in names[1:].split(",") if n} if negate else {n.lower() for n in names.split(",") if n}
        unknown = sorted(listed - set(elems))
        if unknown:
            raise PlannerError(f"{where}: unknown {noun} {', '.join(unknown)} (NCCL's: {nccl_names})",
                               f"name NCCL's {noun}s, comma-separated")
        for f in funcs:
            enabled[f] = set(elems) - listed if negate else listed
    return enabled


def nccl_algo_candidates(text: str) -> tuple[tuple[int, ...], ...]:
    """The algorithms `best_algorithm` may pick for each op code under NCCL_ALGO=`text`: AUTO_CANDIDATES for the
    all-to-all and send/recv (point-to-point, which NCCL_ALGO does not choose), and for all-reduce, reduce-scatter
    and all-gather those of the model's candidates (AUTO_OK) the variable enables (_nccl_parse_list). Refused
    (PlannerError): a text NCCL refuses (an unknown name or function, a later entry without a function, a second
    `^`); a function left with no algorithm
    NCCL runs it with (NCCL fails its first such collective: enqueue.cc l. 2052-2064 'No algorithm/protocol available
    for function ... NCCL_ALGO was set to ...', ncclInvalidUsage); one left only with algorithms the model prices
    where the hardware and the group's placement offer them (NVLS, NVLS-tree, CollNet, PAT: `availability`), or not
    at all (NVLS and CollNet for reduce-scatter / all-gather), where NCCL would fail or run a kernel not priced."""
    where = f"NCCL_ALGO={text}"
    parsed = _nccl_parse_list(text, "NCCL_ALGO", NCCL_ALGOS, "algorithm",
                              "Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT", "Ring;allreduce:Tree,Ring")
    enabled = {f: set(NCCL_ALGOS) if v is None else v for f, v in parsed.items()}
    out = [tuple(AUTO_CANDIDATES)] * len(OP_CODES)
    for func, op in NCCL_FUNCTION_OPS.items():
        runs = [a for a in NCCL_FUNCTION_ALGOS[func] if a in enabled[func]]
        if not runs:
            raise PlannerError(f"{where} leaves {OP_NAMES[op]} no algorithm NCCL runs it with (NVIDIA/nccl @5067397c "
                               "src/graph/tuning.cc l. 293-298: all-gather and reduce-scatter run ring, PAT, NVLS or "
                               "CollNetDirect): NCCL fails its first one ('No algorithm/protocol available', "
                               "src/enqueue.cc l. 2052-2064)", "add Ring")
        codes = tuple(c for c in AUTO_CANDIDATES if AUTO_OK[op, c] and any(NCCL_ALGOS[a] == c for a in runs))
        if not any(c not in CONDITIONAL for c in codes):
            raise PlannerError(f"{where} leaves {OP_NAMES[op]} only {', '.join(runs)}, which the model prices only "
                               "where the hardware and the group's placement offer them, or not at all (NVLS and "
                               "CollNet for reduce-scatter / all-gather): not modelled", "add Ring")
        out[op] = codes
    return tuple(out)

LINK_NVLINK, LINK_NETWORK, LINK_CROSS_POD = 0, 1, 2
LINK_NAMES = {LINK_NVLINK: "NVLink", LINK_NETWORK: "network", LINK_CROSS_POD: "network across pods"}

# Traffic patterns for the placement model: who talks to whom.
PATTERN_RING, PATTERN_ALL_PAIRS = 0, 1  # neighbours on a ring / tree; every rank to every rank

# ------------------------------------------------------------------- assumptions
# Achievable fraction of the NVLink line rate for a ring (and any non-all-reduce collective):
# 370 of 450 GB/s on NVLink 4 [6]. Measured 8-GPU rings agree: H100 reduce-scatter 362 GB/s
# busbw at 8 GB (nccl#1047), H200 all-reduce ring 365.6-367.6 (reference hardware.yaml).
# Applied to every NVLink generation as an assumption (A100 rings reach ~235 of 300 = 0.78,
# reference nccl_logs/a100_8gpu_allreduce: 234.9 busbw).
NVLINK_RING_EFFICIENCY = 370.0 / 450.0
# Achievable fraction of a NIC's line rate: 47 of 50 GB/s for NDR 400 Gb/s [7] (46-48; 200G HDR
# ~24 of 25 and 100G ~12 of 12.5 per S. Jeaugey, nccl-tests#119, are about the same fraction).
NETWORK_EFFICIENCY = 47.0 / 50.0
# Latency of one ring step over NVLink: NCCL's Ring/Simple hwLat for NVLink, 3.4 us [5].
NVLINK_LATENCY_S = 3.4e-6
# Latency of one round across the network: the seed's 10 us a round [3, sec. 2.3]; Llama 3
# reports "up to tens of microseconds" [9, sec. 3.3.1]; NCCL's tuning model uses 14 us per
# inter-node Ring/Simple step [5] (9.6 us in an older tuning.cc, commit 01afd20a).
NETWORK_LATENCY_S = 10e-6
# NVLS all-reduce: measured algbw over the ring's achievable bus bandwidth on 8 H100s:
# (480 / (2 * 7/8)) / 370 = 274.3 / 370 = 0.741 [6]. The algbw stays ~262-274 GB/s from 5 to 8
# GPUs [11], so NVLS time is modelled as S / (this * B) at any n (a ~30% gain over the ring
# at 8 GPUs, as [6] says).
NVLS_ALGBW_PER_RING_BUSBW = (480.0 / (2.0 * 7.0 / 8.0)) / 370.0
# NVLS latency: NCCL's hwLat NVLink/NVLS/Simple, 23 us per collective (baseLat 0) [5].
NVLS_LATENCY_S = 23e-6
# NCCL's tuning model credits a tree with 92% of the bus bandwidth a ring gets on the same
# channels (tuning.cc: `if (a == NCCL_ALGO_TREE) busBw = std::min(busBw*.92, ...)`) [5].
TREE_BANDWIDTH_EFFICIENCY = 0.92
# Latency of one hop of NCCL's tree (Simple protocol), over NVLink and over the network
# alike: hwLat Tree/Simple = 28 us in NCCL 2.20.3's tuning model [5], "the latency of a
# 256kB chunk" (comment of the older tuning.cc, commit 01afd20a), i.e. one pipeline chunk
# per hop. A tree over N domains of m ranks has 2((m-1) + log2 N) hops (up and down) [5].
# NCCL 2.23 and later cut it to 4 us (NVLink) and 14 us (network) plus an 8.4 us base [13].
TREE_HOP_LATENCY_S = 28e-6
# NCCL's own correction of its tree bandwidth at medium sizes ("Trees are not perfectly
# sticking to the model for medium sizes", tuning.cc treeCorrectionFactor, Simple protocol
# [5]): the factor for sizes of 64 B x 2^i, i = 0..22 (64 B to 256 MiB); 1 from 512 MiB on.
TREE_CORRECTION = np.array(
    [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9]
)
# PAT (reduce-scatter, all-gather with one GPU per node) [10][13]: NCCL credits it with 75%
# of the ring's bus bandwidth (`if (a == NCCL_ALGO_PAT) busBw *= .75`) and a latency of
# 8 us + log2(N) x interLat/3.5 + 2.8 us per rank ("still a linear part"), interLat = the
# 14 us network tree hop latency of the same tuning model.
PAT_BANDWIDTH_EFFICIENCY = 0.75
PAT_BASE_LATENCY_S = 8e-6
PAT_LOG_LATENCY_S = 14e-6 / 3.5
PAT_RANK_LATENCY_S = 2.8e-6

# ------------------------------------------------------------------- protocols
# NCCL's three protocols [17] (src/include/nccl_common.h l. 39-41: NCCL_PROTO_LL 0, LL128 1, SIMPLE 2): LL sends 4
# bytes of data with a 4-byte flag in each 8-byte store (the lowest latency, a quarter or a third of the bandwidth),
# LL128 120 bytes of 128 (NVLink only), Simple whole chunks behind a fence (the full bandwidth, the highest latency).
LL, LL128, SIMPLE = 0, 1, 2
PROTO_CODES = {"ll": LL, "ll128": LL128, "simple": SIMPLE}
PROTO_NAMES = {v: k for k, v in PROTO_CODES.items()}
# Protocol sets are bit masks (bit p: protocol p allowed), so that a search holds them in int64 arrays.
PROTO_ALL = (1 << LL) | (1 << LL128) | (1 << SIMPLE)
PROTO_SIMPLE = 1 << SIMPLE
PROTO_DEFAULT = -1  # NCCL's default set: LL, Simple, and LL128 where ll128_default
# Which algorithms run other protocols than Simple [17]: ring and tree run LL, LL128 and Simple; NVLS, NVLS-tree
# (l. 173) and CollNet (l. 187-188) Simple only; PAT Simple only (v2.29.7-1 tuning.cc l. 283). The model's own
# parameter server, hierarchical all-reduce and recursive reduce-scatter / all-gather, and the point-to-point
# all-to-all and send/recv, are priced with Simple only (NCCL's p2p LL below NCCL_P2P_LL_THRESHOLD is not modelled).
# Latencies [17] l. 54-78, in s: baseLat[algorithm][protocol] once a collective, hwLat[NVLink / NET][algorithm]
# [protocol]
# a ring step or a tree hop. Rows: ring, tree; columns: LL, LL128 (Simple keeps the model's own figures: see
# NVLINK_LATENCY_S, NETWORK_LATENCY_S, TREE_HOP_LATENCY_S).
PROTO_BASE_LATENCY_S = np.array([[6.6e-6, 14.0e-6], [6.8e-6, 14.0e-6]])  # l. 57: Ring {6.6, 14.0}, Tree {6.8, 14.0}
PROTO_NVLINK_LATENCY_S = np.array([[0.6e-6, 1.9e-6], [0.6e-6, 1.25e-6]])  # l. 67: Ring {.6, 1.9}, Tree {.6, 1.25}
PROTO_NETWORK_LATENCY_S = np.array([[2.7e-6, 4.0e-6], [5.0e-6, 8.5e-6]])  # l. 75: Ring {2.7, 4.0}, Tree {5.0, 8.5}
# A ring across nodes launches every step's network post: its NVLink steps take at least NCCL's network overhead,
# 1 us on Intel x86 CPUs (2 us on AMD; assumed Intel: the catalog has no CPU vendor) [17] l. 111-118, 242-248.
NET_OVERHEAD_S = 1.0e-6
# LL's bandwidth: a ring's LL bus bandwidth is a quarter of Simple's (all-reduce, or any ring across nodes) or a third
# (reduce-scatter / all-gather inside a node), at most llMaxBw [17] l. 181; a tree's LL 1/3.8 of its Simple bus
# bandwidth, at most llMaxBw (l. 184). llMaxBw (l. 86-90, 143-146), GB/s: one node by GPU architecture (Volta 39.0,
# Ampere 87.7, Hopper and later 87.7: `ll_max_bandwidth`), across nodes by CPU vendor and node count (Intel: 39.0 for
# 2 nodes, 20.4 for more; assumed Intel, as NET_OVERHEAD_S).
LL_RING_BW_FRACTION = 1.0 / 4.0
LL_RING_RSAG_ONE_NODE_BW_FRACTION = 1.0 / 3.0
LL_TREE_BW_FRACTION = 1.0 / 3.8
LL_MAX_BW_VOLTA = 39.0e9
LL_MAX_BW_AMPERE_HOPPER = 87.7e9
LL_MAX_BW_TWO_NODES = 39.0e9
LL_MAX_BW_MORE_NODES = 20.4e9
# LL128's bandwidth [17]: a ring's 0.92 (120 of 128 bytes) of Simple's bus bandwidth, 0.7 where a node holds fewer
# than two of the ring's ranks (l. 182); a tree's 7/9 of its Simple bus bandwidth in one node, 120/128 across (l. 185).
# NCCL's per-channel caps (perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws) are not modelled: the model
# has no channel count (on Hopper they allow 36.7 GB/s a channel, above a ring's share of NVLink at 16+ channels).
LL128_RING_BW_FRACTION = 0.92
LL128_RING_ONE_PER_NODE_BW_FRACTION = 0.7
LL128_TREE_ONE_NODE_BW_FRACTION = 7.0 / 9.0
LL128_TREE_BW_FRACTION = 120.0 / 128.0
# The tree's medium-size correction of LL and LL128 [17] l. 415-419 (Simple's is TREE_CORRECTION).
TREE_CORRECTION_LL = np.array(
    [1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0]
)
TREE_CORRECTION_LL128 = np.array(
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0]
)
# NCCL's default LL128 enable by compute capability (the hardware entry's compute_capability field; only over NVLink,
# with every GPU of one capability; NCCL_PROTO naming LL128 enables it anywhere, [17] l. 274-277), each the rule of
# the first NCCL release whose rule covers the capability [21]: 2.20.3's switch for the GPUs it builds for (sm_90 its
# newest: makefiles/common.mk l. 39) [17] l. 308-319; for a newer GPU, which 2.20.3's `default: pEnable &= 0` ("Other
# cases are not tested") leaves off and which no Blackwell run used, the first release naming it: v2.25.1-1 for 10.0
# and 12.0 (`case 100` / `case 120`), v2.27.3-1 for 10.3 (every capability from 7.0; v2.25.1-1 to v2.26.6-1 would run
# a 10.3 GPU on their sm_100 code, CUDA's cubin compatibility within a major capability, with 10.3 in the same
# untested default, off). A capability not listed: off (2.20.3).
# (enabled, release, where). The rest of the LL / LL128 figures stay 2.20.3's ([21]: what later releases change).
LL128_DEFAULT_RULES = {
    "7.0": (True, "v2.20.3-1", "src/graph/tuning.cc l. 315 (case 70)"),
    "8.0": (True, "v2.20.3-1", "src/graph/tuning.cc l. 316 (case 80)"),
    "9.0": (True, "v2.20.3-1", "src/graph/tuning.cc l. 317 (case 90)"),
    "10.0": (True, "v2.25.1-1", "src/graph/tuning.cc l. 435 (case 100)"),
    "10.3": (True, "v2.27.3-1", "src/graph/tuning.cc l. 463 (!(minCompCap < 70 ...))"),
    "12.0": (True, "v2.25.1-1", "src/graph/tuning.cc l. 436 (case 120)"),
}
LL128_DEFAULT_CAPABILITIES = tuple(cc for cc, (on, _, _) in LL128_DEFAULT_RULES.items() if on)
# Where LL and LL128 are priced [19]: only for a collective whose ranks all sit in one NVLink domain (no network hop).
# Across domains NCCL's tuner figures above rank NCCL's (algorithm, protocol) pairs; as absolute times they understate
# the measured small-size collectives of tests/data/nccl_logs (model / measured - 1, signed median of the 8 B - 64 KiB
# rows, Simple -> NCCL's LL / LL128: h100_16gpu_2node_allreduce_dgx06-dgx07.txt +7.0% -> -37.1%,
# a100_16gpu_2node_allreduce_aws-p4de-efa.txt -23.0% -> -84.6%, b200_16gpu_2node_allgather_google-dranet.txt -77.9%
# -> -91.1%), while inside one node they meet it (h100_8gpu_allreduce_aws-p5-batch.txt +44.0% -> -5.7%). So a
# collective with a network hop is priced with Simple alone (the seed's figures), whatever protocols are allowed: a
# rule from the measured logs, not a fitted factor. The network LL / LL128 terms are kept for the record (False here).
LL_NETWORK_PRICED = False


def proto_mask(protocol) -> int:
    """A protocol set as a bit mask (PROTO_SIMPLE, ...; bit p: protocol code p): a code (LL, LL128, SIMPLE), a name
    ('LL', 'LL128', 'Simple', any case) or an iterable of them. None: PROTO_DEFAULT, NCCL's own set (LL and Simple,
    LL128 where the hardware enables it by default: `ll128_default`)."""
    if protocol is None:
        return PROTO_DEFAULT
    if isinstance(protocol, str):
        key = protocol.strip().lower()
        if key not in PROTO_CODES:
            raise PlannerError(f"unknown protocol {protocol!r}", "valid: LL, LL128, Simple")
        return 1 << PROTO_CODES[key]
    if isinstance(protocol, (int, np.integer)):
        p = int(protocol)
        if p not in PROTO_NAMES:
            raise PlannerError(f"unknown protocol code {p}", f"valid codes: {PROTO_NAMES}")
        return 1 << p
    mask = 0
    for p in protocol:
        mask |= proto_mask(p)
    if not mask:
        raise PlannerError("no protocol given", "name LL, LL128 or Simple")
    return mask


def nccl_proto_protocols(text: str) -> tuple:
    """The protocols NCCL_PROTO=`text` leaves each op code, as group_collective's `protocols` (a tuple of protocol
    codes; None: NCCL's default set, LL128 where the hardware enables it, `ll128_default`), read as NCCL reads it
    (NVIDIA/nccl @5067397c src/graph/tuning.cc parseList l. 36-119, NCCL_PROTO read l. 442-457: `_nccl_parse_list`,
    the grammar NCCL_ALGO's; a plain `,`-list with an optional leading `^` as NCCL 2.20.3 [17] l. 34-52, 269-277,
    which ignored an unknown name where 5067397c refuses it, as here). A function no entry names keeps NCCL's default
    (None); one an entry names gets exactly the protocols it enables (naming LL128, or `^` without it, enables LL128
    whatever the GPU: l. 442-447, 518-535). The all-to-all and send/recv keep None (NCCL's point-to-point protocol
    follows NCCL_P2P_LL_THRESHOLD, not NCCL_PROTO; priced Simple: not modelled). Refused (PlannerError): a text NCCL
    refuses, and one leaving all-reduce, reduce-scatter or all-gather no protocol (NCCL fails its first such
    collective: src/enqueue.cc l. 2052-2064 'No algorithm/protocol available ... NCCL_PROTO was set to ...',
    ncclInvalidUsage). Ring and tree, which NCCL_ALGO always leaves (nccl_algo_candidates), run every protocol, so a
    value accepted here leaves every collective an (algorithm, protocol) pair."""
    parsed = _nccl_parse_list(text, "NCCL_PROTO", PROTO_CODES, "protocol", "LL, LL128, Simple", "Simple;allreduce:LL,Simple")
    out: list = [None] * len(OP_CODES)
    for func, op in NCCL_FUNCTION_OPS.items():
        names = parsed[func]
        if names is None:
            continue
        if not names:
            raise PlannerError(f"NCCL_PROTO={text} leaves {OP_NAMES[op]} no protocol: NCCL fails its first one ('No "
                               "algorithm/protocol available', NVIDIA/nccl @5067397c src/enqueue.cc l. 2052-2064)",
                               "name LL, LL128 or Simple")
        out[op] = tuple(sorted(PROTO_CODES[n] for n in names))
    return tuple(out)


def gpu_capability(hw) -> tuple[int, int] | None:
    """The GPU's compute capability as (major, minor), read from its hardware entry's `compute_capability` field
    ('9.0', schema.Hardware); None where the entry (or a stand-in without the field) does not give it. The one
    reading of the field for NCCL's rules: the protocols here (ll128_default, ll_max_bandwidth through comm_params)
    and the NVLS channels of memory.py [nv] (nvls_buffers.nvls_channels)."""
    return _capability(getattr(hw, "compute_capability", None))


def _capability(compute_capability) -> tuple[int, int] | None:
    """(major, minor) of a compute capability given as '9.0' or as (9, 0); None stays None."""
    if compute_capability is None or isinstance(compute_capability, tuple):
        return compute_capability
    major, minor = str(compute_capability).split(".")
    return int(major), int(minor)


def ll128_default(compute_capability) -> bool:
    """NCCL's default LL128 enable for a GPU of this compute capability ((9, 0) or '9.0'; None: unknown, off): the rule
    of the first release covering it, `LL128_DEFAULT_RULES` [17][21] (2.20.3's for 7.0 - 9.0, v2.25.1-1's for 10.0 and
    12.0, v2.27.3-1's for 10.3); a capability not listed is off, as in 2.20.3."""
    cc = _capability(compute_capability)
    return cc is not None and LL128_DEFAULT_RULES.get(f"{cc[0]}.{cc[1]}", (False,))[0]


def ll_max_bandwidth(compute_capability) -> float:
    """NCCL 2.20.3's llMaxBw inside one node, B/s [17] l. 86-90, 140: Volta's below capability 8.0, Ampere / Hopper's
    (equal) from 8.0; an unknown capability takes Ampere / Hopper's. A Blackwell GPU takes 2.20.3's Hopper row as
    2.20.3 indexes it (compCapIndex = HOPPER for capability >= 9.0), not v2.25.1-1's Blackwell row (282 GB/s), which
    comes with that release's other LL bandwidth rule ([21])."""
    cc = _capability(compute_capability)
    if cc is None:
        return LL_MAX_BW_AMPERE_HOPPER
    return LL_MAX_BW_VOLTA if cc[0] < 8 else LL_MAX_BW_AMPERE_HOPPER


# ------------------------------------------------------------------------ results
@dataclass(frozen=True)
class CollectiveCost:
    """What one collective costs, per element of the (broadcast) inputs.

    time_s = latency_s + bandwidth_s. Bytes are those of the busiest rank (for the
    parameter server: the server). algbw and busbw follow nccl-tests [4] (B/s). protocol:
    the NCCL protocol priced (LL, LL128, SIMPLE; int64).
    """

    bytes_sent_per_rank: np.ndarray
    bytes_received_per_rank: np.ndarray
    rounds: np.ndarray
    latency_s: np.ndarray
    bandwidth_s: np.ndarray
    time_s: np.ndarray
    algbw: np.ndarray
    busbw: np.ndarray
    protocol: np.ndarray

    def as_dict(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def take(self, idx) -> "CollectiveCost":
        return CollectiveCost(**{k: v[idx] for k, v in self.as_dict().items()})


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _i(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _check_codes(op: np.ndarray, algo: np.ndarray) -> None:
    if np.any((op < 0) | (op >= len(OP_CODES))):
        raise PlannerError(f"unknown collective code in {np.unique(op).tolist()}", f"valid codes: {OP_NAMES}")
    if np.any((algo < 0) | (algo >= len(ALGO_CODES))):
        raise PlannerError(f"unknown algorithm code in {np.unique(algo).tolist()}", f"valid codes: {ALGO_NAMES}")


def supported(op, algo) -> np.ndarray:
    """True where the (operation, algorithm) pair exists in this model."""
    op, algo = np.broadcast_arrays(_i(op), _i(algo))
    ok = (op >= 0) & (op < len(OP_CODES)) & (algo >= 0) & (algo < len(ALGO_CODES))
    return ok & SUPPORTED[np.where(ok, op, 0), np.where(ok, algo, 0)]


def busbw_factor(op, ranks) -> np.ndarray:
    """nccl-tests' bus bandwidth factor [4]: 2(n-1)/n, (n-1)/n or 1."""
    op = _i(op)
    n = _f(ranks)
    return np.where(op == ALL_REDUCE, 2.0 * (n - 1.0) / n, np.where(op == SEND_RECV, 1.0, (n - 1.0) / n))


def collective_time(
    op,
    size_bytes,
    ranks,
    bandwidth,
    latency,
    algo=None,
    *,
    local_ranks=1,
    local_bandwidth=None,
    local_latency=None,
    inter_bandwidth=None,
    inter_latency=None,
    nvls_bandwidth=None,
    nvls_latency=None,
    tree_latency=None,
    collnet_nvls=False,
    gpus_per_nic=1.0,
    protocol=SIMPLE,
    ll128=False,
    ll_max_bandwidth=LL_MAX_BW_AMPERE_HOPPER,
) -> CollectiveCost:
    """Alpha-beta cost of one collective (see the module docstring for every formula).

    op, algo: integer codes (OP_CODES, ALGO_CODES); algo None = DEFAULT_ALGO of the op.
    size_bytes: S in the nccl-tests convention (module docstring). ranks: n >= 1.
    bandwidth (B/s per rank per direction) and latency (s per round): the link the flat
    algorithms (ring, parameter server, NVLS, PAT, direct) run on.
    The algorithms that treat NVLink domains and the network apart (hierarchical, tree,
    NVLS-tree, CollNet) read: local_ranks m per NVLink domain (n/m domains), local_bandwidth
    and local_latency (NVLink; default bandwidth, latency), inter_bandwidth and
    inter_latency (the network, per GPU; default bandwidth, latency). With m = 1 and the
    defaults a tree is the flat double binary tree over n ranks.
    nvls_bandwidth: NVLS all-reduce algbw inside one domain (default NVLS_ALGBW_PER_RING_BUSBW
    x the NVLink bandwidth: `bandwidth` for NVLS, local_bandwidth for NVLS-tree and CollNet).
    nvls_latency: default NVLS_LATENCY_S. tree_latency: seconds per tree hop (default: the
    local latency inside a domain, the inter latency across). collnet_nvls: CollNet reduces
    inside the domain with NVLS (NCCL's NVLS + SHARP) rather than NCCL's CollNet-direct over
    NVLink; gpus_per_nic: GPUs sharing one NIC (CollNet-direct's GPU/NIC penalty).
    protocol: the NCCL protocols the algorithm may run (`proto_mask`: a code, a name, an iterable
    of them, or None for NCCL's default set, LL128 only where ll128; an int64 array of masks for
    one each element); the fastest of them is priced [17], LL / LL128 only inside one NVLink
    domain (across domains Simple, whatever the mask: [19]). Default Simple alone: the alpha-beta
    cost of the module docstring. An algorithm none of whose protocols is allowed costs +inf.
    ll_max_bandwidth: NCCL's LL bandwidth cap inside one node (`ll_max_bandwidth`).
    """
    return _pick_algorithm(*_costed(
        op, size_bytes, ranks, bandwidth, latency, algo, local_ranks=local_ranks, local_bandwidth=local_bandwidth,
        local_latency=local_latency, inter_bandwidth=inter_bandwidth, inter_latency=inter_latency,
        nvls_bandwidth=nvls_bandwidth, nvls_latency=nvls_latency, tree_latency=tree_latency,
        collnet_nvls=collnet_nvls, gpus_per_nic=gpus_per_nic, protocol=protocol, ll128=ll128,
        ll_max_bandwidth=ll_max_bandwidth))


def _costed(op, size_bytes, ranks, bandwidth, latency, algo=None, *, local_ranks=1, local_bandwidth=None,
            local_latency=None, inter_bandwidth=None, inter_latency=None, nvls_bandwidth=None, nvls_latency=None,
            tree_latency=None, collnet_nvls=False, gpus_per_nic=1.0, protocol=SIMPLE, ll128=False,
            ll_max_bandwidth=LL_MAX_BW_AMPERE_HOPPER) -> tuple["_Inputs", list]:
    """(inputs, algorithm table) of `collective_time` (same arguments). The table's costs do
    not depend on the algorithm asked for, only its masks do (`_pick_algorithm`), so one
    table prices every algorithm (`best_algorithm`, `group_collective`)."""
    x = _collective_inputs(
        op, size_bytes, ranks, bandwidth, latency, algo, local_ranks, local_bandwidth, local_latency,
        inter_bandwidth, inter_latency, nvls_bandwidth, nvls_latency, tree_latency, collnet_nvls, gpus_per_nic,
        protocol, ll128, ll_max_bandwidth,
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        table = _algorithm_table(x)
    return x, table


class _Inputs(NamedTuple):
    """collective_time's arguments as equal-shape arrays, defaults filled in: S bytes, n ranks,
    B and a the flat link; gl = m ranks per NVLink domain, Bl and al the NVLink, Bi and ai
    the network; Bv the NVLS algbw (NaN: from the NVLink's), av the NVLS latency; at the
    tree hop latency (NaN: the link's own); cn CollNet over NVLS; gpn GPUs per NIC; pm the
    protocol mask (`proto_mask`, PROTO_DEFAULT: NCCL's set), l128 LL128 on by default, llbw
    NCCL's LL cap inside one node."""

    op: np.ndarray
    algo: np.ndarray
    S: np.ndarray
    n: np.ndarray
    B: np.ndarray
    a: np.ndarray
    gl: np.ndarray
    Bl: np.ndarray
    al: np.ndarray
    Bi: np.ndarray
    ai: np.ndarray
    Bv: np.ndarray
    av: np.ndarray
    at: np.ndarray
    cn: np.ndarray
    gpn: np.ndarray
    pm: np.ndarray
    l128: np.ndarray
    llbw: np.ndarray


def _collective_inputs(op, size_bytes, ranks, bandwidth, latency, algo, local_ranks, local_bandwidth,
                       local_latency, inter_bandwidth, inter_latency, nvls_bandwidth, nvls_latency,
                       tree_latency, collnet_nvls, gpus_per_nic, protocol=SIMPLE, ll128=False,
                       ll_max_bandwidth=LL_MAX_BW_AMPERE_HOPPER) -> _Inputs:
    """collective_time's arguments with their defaults, checked (PlannerError on a bad one)
    and broadcast together."""
    op = _i(op)
    algo = DEFAULT_ALGO[np.clip(op, 0, len(OP_CODES) - 1)] if algo is None else _i(algo)
    _check_codes(op, algo)
    S, n, B, a = _f(size_bytes), _i(ranks), _f(bandwidth), _f(latency)
    gl = _i(local_ranks)
    Bl = B if local_bandwidth is None else _f(local_bandwidth)
    al = a if local_latency is None else _f(local_latency)
    Bi = B if inter_bandwidth is None else _f(inter_bandwidth)
    ai = a if inter_latency is None else _f(inter_latency)
    Bv = np.nan if nvls_bandwidth is None else _f(nvls_bandwidth)
    av = _f(NVLS_LATENCY_S if nvls_latency is None else nvls_latency)
    at = np.nan if tree_latency is None else _f(tree_latency)
    cn, gpn = np.asarray(collnet_nvls, dtype=bool), _f(gpus_per_nic)
    pm = _i(protocol) if isinstance(protocol, np.ndarray) else _i(proto_mask(protocol))  # an array: masks already
    l128, llbw = np.asarray(ll128, dtype=bool), _f(ll_max_bandwidth)
    if np.any(n < 1):
        raise PlannerError("ranks must be at least 1", "give the number of ranks taking part in the collective")
    if np.any(S < 0) or np.any(~np.isfinite(S)):
        raise PlannerError("collective size must be a finite number of bytes >= 0")
    if np.any(B <= 0) or np.any(Bl <= 0) or np.any(Bi <= 0) or np.any(Bv <= 0):
        raise PlannerError("link bandwidth must be > 0 B/s")
    if np.any(a < 0) or np.any(al < 0) or np.any(ai < 0) or np.any(av < 0) or np.any(at < 0):
        raise PlannerError("link latency must be >= 0 s")
    if np.any(gl < 1):
        raise PlannerError("local_ranks must be at least 1")
    if np.any(gpn < 1):
        raise PlannerError("gpus_per_nic must be at least 1")
    if np.any(llbw <= 0):
        raise PlannerError("ll_max_bandwidth must be > 0 B/s")
    return _Inputs(*np.broadcast_arrays(op, algo, S, n, B, a, gl, Bl, al, Bi, ai, Bv, av, at, cn, gpn, pm, l128, llbw))


class _Cost(NamedTuple):
    """One algorithm's terms: bytes the busiest rank sends, rounds, latency and bandwidth (s)."""

    sent: np.ndarray
    rounds: np.ndarray
    latency: np.ndarray
    bandwidth: np.ndarray


class _Shared(NamedTuple):
    """Terms several algorithms share (see `_shared`)."""

    nf: np.ndarray
    log_n: np.ndarray
    rs_ag: np.ndarray
    g: np.ndarray
    n_inter: np.ndarray
    h_local: np.ndarray
    multi: np.ndarray
    k_tree: np.ndarray
    levels: np.ndarray
    inter_tree: np.ndarray
    Bv_loc: np.ndarray


def _shared(x: _Inputs, all_reduce: bool = True) -> _Shared:
    """nf = n as floats, g = m ranks per domain (at most n), N = n/m domains, and the terms
    of the ring, the hierarchical all-reduce, the trees and NVLS that others reuse. all_reduce
    False (no element is an all-reduce): the flat terms alone (nf, log_n, rs_ag), the others None,
    which only the all-reduce's algorithms read."""
    nf = x.n.astype(np.float64)
    log_n = np.ceil(np.log2(nf))
    rs_ag = (nf - 1.0) / nf * x.S  # ring / recursive reduce-scatter, all-gather, all-to-all
    if not all_reduce:
        return _Shared(nf, log_n, rs_ag, *(None,) * (len(_Shared._fields) - 3))
    g = np.minimum(x.gl, x.n).astype(np.float64)
    # hierarchical: local reduce-scatter + all-gather on S, inter-domain ring on S/g
    n_inter = nf / g
    h_local = 2.0 * (g - 1.0) / g * x.S
    # trees across N = n/m domains [5][8]: a node of a double binary tree over N > 2
    # domains sends 2S and receives 2S (interior in one tree, leaf in the other); with
    # N = 2 each domain is the root of one tree and a leaf of the other: S each way.
    # The domain's m ranks share that traffic over their m NICs.
    multi = n_inter > 1.0 + 1e-9
    k_tree = np.where(n_inter <= 2.0 + 1e-9, 1.0, 2.0)
    levels = np.ceil(np.log2(np.maximum(n_inter, 1.0)))
    inter_tree = np.where(multi, k_tree * x.S / (g * x.Bi), 0.0)
    # NVLS inside a domain (one reduce-scatter + all-gather through the switch) [6][11],
    # here for NVLS-tree and CollNet
    Bv_loc = np.where(np.isnan(x.Bv), NVLS_ALGBW_PER_RING_BUSBW * x.Bl, x.Bv)
    return _Shared(nf, log_n, rs_ag, g, n_inter, h_local, multi, k_tree, levels, inter_tree, Bv_loc)


def _algorithm_table(x: _Inputs) -> list[tuple[np.ndarray, int, _Cost, object]]:
    """(op mask, algorithm code, cost, protocol) for every (operation, algorithm) pair that
    exists: the pair applies where the op mask holds and the element asks for the algorithm;
    `cost` is its terms computed for every element (they do not depend on x.algo), under the
    fastest protocol the element allows (`protocol`: its codes, int64, or SIMPLE for the
    algorithms NCCL runs with Simple only, +inf where Simple is not allowed) [17]. The pairs of
    an operation no element asks for are left out (their mask holds nowhere, so no element
    could take their terms: the same values, without pricing them), but for an empty op array."""
    op = x.op
    is_ar = op == ALL_REDUCE
    is_rsag = (op == REDUCE_SCATTER) | (op == ALL_GATHER)
    is_a2a, is_p2p = op == ALL_TO_ALL, op == SEND_RECV
    on = [bool(m.any()) or not op.size for m in (is_ar, is_rsag, is_a2a, is_p2p)]
    c = _shared(x, on[0])
    S, nf = x.S, c.nf
    simple_only = bool((x.pm == PROTO_SIMPLE).all())  # a pinned Simple (the default of collective_time): no LL terms
    simple_ok = _allowed(x, SIMPLE)
    s_only = (lambda cost: cost) if bool(simple_ok.all()) else (lambda cost: cost._replace(
        latency=np.where(simple_ok, cost.latency, np.inf)))
    out = []
    if on[0]:
        ring_rounds, ring_sent = 2.0 * (nf - 1.0), 2.0 * c.rs_ag
        ring = _flat(x, ring_rounds, ring_sent)
        tree, tree_core, corr_i = _tree(x, c)
        out += [
            (is_ar, RING, *(_simple(ring) if simple_only else _ring_protocols(x, ring, LL_RING_BW_FRACTION))),
            (is_ar, TREE, *(_simple(tree) if simple_only else _tree_protocols(x, c, tree, tree_core, corr_i))),
            (is_ar, PARAMETER_SERVER, s_only(_flat(x, 2.0, (nf - 1.0) * S)), SIMPLE),
            (is_ar, HIERARCHICAL, s_only(_hierarchical(x, c)), SIMPLE),
            (is_ar, NVLS, s_only(_nvls(x)), SIMPLE),
            (is_ar, NVLS_TREE, s_only(_nvls_tree(x, c)), SIMPLE),
            (is_ar, COLLNET, s_only(_collnet(x, c)), SIMPLE),
        ]
    if on[1]:
        ring = _flat(x, nf - 1.0, c.rs_ag)
        out += [
            (is_rsag, RING, *(_simple(ring) if simple_only else _ring_protocols(x, ring, None))),
            (is_rsag, TREE, s_only(_flat(x, c.log_n, c.rs_ag)), SIMPLE),
            (is_rsag, PAT, s_only(_pat(x, c)), SIMPLE),
        ]
    if on[2]:
        out.append((is_a2a, DIRECT, s_only(_flat(x, nf - 1.0, c.rs_ag)), SIMPLE))
    if on[3]:
        out.append((is_p2p, DIRECT, s_only(_Cost(S, 1.0, x.a, S / x.B)), SIMPLE))
    return out


def _simple(cost: _Cost) -> tuple[_Cost, int]:
    return cost, SIMPLE


def _allowed(x: _Inputs, p: int) -> np.ndarray:
    """Where protocol p may run: the element's protocol mask has bit p; under NCCL's default set
    (PROTO_DEFAULT) LL and Simple everywhere, LL128 where the hardware enables it by default [17]
    l. 271, 306-319."""
    return np.where(x.pm < 0, x.l128 if p == LL128 else True, ((x.pm >> p) & 1) == 1)


def _domains(x: _Inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(g ranks per domain, N domains, N > 1) as NCCL's tuning model sees them: nRanks / nNodes and nNodes."""
    nf = x.n.astype(np.float64)
    g = np.minimum(x.gl, x.n).astype(np.float64)
    N = nf / g
    return g, N, N > 1.0 + 1e-9


def _ll_max_bw(x: _Inputs, N: np.ndarray, multi: np.ndarray) -> np.ndarray:
    """NCCL's llMaxBw [17] l. 143-146: the GPU's inside one node, the (Intel) CPU's across 2 or more nodes."""
    return np.where(multi, np.where(N <= 2.0 + 1e-9, LL_MAX_BW_TWO_NODES, LL_MAX_BW_MORE_NODES), x.llbw)


def _fastest(x: _Inputs, ll: _Cost, ll128: _Cost, simple: _Cost, multi: np.ndarray) -> tuple[_Cost, np.ndarray]:
    """The allowed protocol of least time, per element (NCCL's least (algorithm, protocol) time [17] [18]; a tie goes
    to the lower protocol code, as NCCL's loop over LL, LL128, Simple with a strict `<`), and its code. Bytes and
    rounds are the same under every protocol. LL and LL128 only where the collective has no network hop (~multi:
    its ranks in one NVLink domain); Simple alone across domains, whatever the mask allows (LL_NETWORK_PRICED, [19])."""
    net = multi & (not LL_NETWORK_PRICED)  # across domains: Simple, even where the mask leaves only LL / LL128
    lat = [np.where(np.where(net, p == SIMPLE, _allowed(x, p)), t.latency, np.inf)
           for p, t in enumerate((ll, ll128, simple))]
    t_ll, t_128, t_s = (l_ + t.bandwidth for l_, t in zip(lat, (ll, ll128, simple)))
    use_ll = (t_ll <= t_128) & (t_ll <= t_s)
    use_128 = ~use_ll & (t_128 <= t_s)
    latency = np.where(use_ll, lat[LL], np.where(use_128, lat[LL128], lat[SIMPLE]))
    bandwidth = np.where(use_ll, ll.bandwidth, np.where(use_128, ll128.bandwidth, simple.bandwidth))
    proto = np.where(use_ll, LL, np.where(use_128, LL128, SIMPLE)).astype(np.int64)
    return simple._replace(latency=latency, bandwidth=bandwidth), proto


def _all_net(multi: np.ndarray, simple: _Cost) -> bool:
    """Every element's collective leaves its NVLink domain, where _fastest prices Simple alone (LL_NETWORK_PRICED
    False, [19]) whatever the mask, and Simple's time is below +inf on each (so no tie with LL's masked +inf): the
    LL and LL128 terms are read by no element."""
    return (not LL_NETWORK_PRICED and multi.size > 0 and bool(multi.all())
            and not bool(np.any(simple.latency + simple.bandwidth == np.inf)))


def _simple_everywhere(simple: _Cost, multi: np.ndarray) -> tuple[_Cost, np.ndarray]:
    """_fastest's result where _all_net: Simple's terms on every element and the code SIMPLE."""
    shape = np.broadcast_shapes(multi.shape, np.shape(simple.latency), np.shape(simple.bandwidth))
    lat, bw = (np.broadcast_to(np.asarray(v, dtype=np.float64), shape).copy() for v in (simple.latency, simple.bandwidth))
    return simple._replace(latency=lat, bandwidth=bw), np.full(shape, SIMPLE, dtype=np.int64)


def _ring_protocols(x: _Inputs, simple: _Cost, ll_fraction) -> tuple[_Cost, np.ndarray]:
    """A ring's terms under its fastest protocol [17]: LL and LL128 latency = baseLat + every step at hwLat, the
    share 1/m of a ring's steps that leave a domain (group_link's f) at the network figure and the others at the
    NVLink one (at least NET_OVERHEAD_S where the ring leaves its domain, l. 242-249); LL's bandwidth
    min(B x ll_fraction, llMaxBw) (ll_fraction None: a quarter across domains, a third inside one, reduce-scatter
    and all-gather, l. 181), LL128's B x 0.92, x 0.7 with one rank per domain (l. 182)."""
    g, N, multi = _domains(x)
    if _all_net(multi, simple):
        return _simple_everywhere(simple, multi)
    w = np.where(multi, 1.0 / g, 0.0)
    B = x.B
    terms = []
    for p in (LL, LL128):
        intra = np.where(multi, max(PROTO_NVLINK_LATENCY_S[0, p], NET_OVERHEAD_S), PROTO_NVLINK_LATENCY_S[0, p])
        step = w * PROTO_NETWORK_LATENCY_S[0, p] + (1.0 - w) * intra
        terms.append(PROTO_BASE_LATENCY_S[0, p] + simple.rounds * step)
    frac = (np.where(multi, LL_RING_BW_FRACTION, LL_RING_RSAG_ONE_NODE_BW_FRACTION) if ll_fraction is None
            else ll_fraction)
    ll_bw = simple.sent / np.minimum(B * frac, _ll_max_bw(x, N, multi))
    ll128_bw = simple.sent / (B * np.where(g < 2.0, LL128_RING_ONE_PER_NODE_BW_FRACTION, LL128_RING_BW_FRACTION))
    return _fastest(x, simple._replace(latency=terms[0], bandwidth=ll_bw),
                    simple._replace(latency=terms[1], bandwidth=ll128_bw), simple, multi)


def _tree_protocols(x: _Inputs, c: _Shared, simple: _Cost, core: np.ndarray,
                    corr_i: np.ndarray) -> tuple[_Cost, np.ndarray]:
    """The tree's terms under its fastest protocol [17]: LL and LL128 latency = baseLat + 2 (m - 1) NVLink hops + 2
    log2 N network hops at their hwLat (l. 251-253); bandwidth from the Simple tree's `core` seconds (its busBw,
    before NCCL's correction): LL's max(3.8 x core, 2S / llMaxBw) (l. 184), LL128's core / (7/9 in one domain,
    120/128 across) (l. 185), each over its own medium-size correction (l. 415-419)."""
    g, multi = c.g, c.multi
    if _all_net(multi, simple):
        return _simple_everywhere(simple, multi)
    N = c.n_inter
    k = len(TREE_CORRECTION_LL)
    idx = np.clip(corr_i, 0, k - 1).astype(np.int64)
    inside = corr_i < k
    lat = [PROTO_BASE_LATENCY_S[1, p] + 2.0 * ((g - 1.0) * PROTO_NVLINK_LATENCY_S[1, p]
                                               + c.levels * PROTO_NETWORK_LATENCY_S[1, p]) for p in (LL, LL128)]
    corr_ll = np.where(inside, TREE_CORRECTION_LL[idx], 1.0)
    corr_128 = np.where(inside, TREE_CORRECTION_LL128[idx], 1.0)
    ll_bw = np.maximum(core / LL_TREE_BW_FRACTION, 2.0 * x.S / _ll_max_bw(x, N, multi)) / corr_ll
    ll128_bw = core / np.where(multi, LL128_TREE_BW_FRACTION, LL128_TREE_ONE_NODE_BW_FRACTION) / corr_128
    return _fastest(x, simple._replace(latency=lat[0], bandwidth=ll_bw),
                    simple._replace(latency=lat[1], bandwidth=ll128_bw), simple, multi)


def _flat(x: _Inputs, rounds, sent) -> _Cost:
    """An algorithm on the flat link: `rounds` latencies a, `sent` bytes at B."""
    return _Cost(sent, rounds, rounds * x.a, sent / x.B)


def _hierarchical(x: _Inputs, c: _Shared) -> _Cost:
    """Reduce-scatter in the domain, ring all-reduce across domains on S/g, all-gather."""
    g, n_inter = c.g, c.n_inter
    h_inter = 2.0 * (n_inter - 1.0) / n_inter * x.S / g
    h_sent = c.h_local + h_inter
    h_bw = c.h_local / x.Bl + h_inter / x.Bi
    h_rounds = 2.0 * (g - 1.0) + 2.0 * (n_inter - 1.0)
    h_lat = 2.0 * (g - 1.0) * x.al + 2.0 * (n_inter - 1.0) * x.ai
    return _Cost(h_sent, h_rounds, h_lat, h_bw)


def _tree(x: _Inputs, c: _Shared) -> tuple[_Cost, np.ndarray, np.ndarray]:
    """NCCL's tree all-reduce [5][8] under Simple; with the seconds of its bandwidth term before
    NCCL's medium-size correction and the correction's index (the other protocols' start)."""
    S, g = x.S, c.g
    t_hop_l = np.where(np.isnan(x.at), x.al, x.at)
    t_hop_i = np.where(np.isnan(x.at), x.ai, x.at)
    # tree: a chain through the m ranks of a domain (each sends S up and S down), the
    # double binary tree across domains; NCCL's 0.92 and medium-size correction [5]
    chain = np.where(g > 1.0, 2.0 * S / x.Bl, 0.0)
    corr_i = np.floor(np.log2(np.maximum(S / 64.0, 1.0)))
    k_corr = len(TREE_CORRECTION)
    corr = np.where(corr_i < k_corr, TREE_CORRECTION[np.clip(corr_i, 0, k_corr - 1).astype(np.int64)], 1.0)
    core = np.maximum(chain, c.inter_tree) / TREE_BANDWIDTH_EFFICIENCY
    tree_bw = core / corr
    tree_rounds = 2.0 * ((g - 1.0) + c.levels)
    tree_lat = 2.0 * ((g - 1.0) * t_hop_l + c.levels * t_hop_i)
    tree_sent = np.where(g > 1.0, 2.0 * S, np.where(c.multi, c.k_tree * S, 0.0))
    return _Cost(tree_sent, tree_rounds, tree_lat, tree_bw), core, corr_i


def _nvls(x: _Inputs) -> _Cost:
    # NVLS inside a domain (one reduce-scatter + all-gather through the switch) [6][11]
    Bv_flat = np.where(np.isnan(x.Bv), NVLS_ALGBW_PER_RING_BUSBW * x.B, x.Bv)
    return _Cost(x.S, 2.0, x.av, x.S / Bv_flat)


def _nvls_tree(x: _Inputs, c: _Shared) -> _Cost:
    # NVLS-tree [5]: NVLS inside each domain, a tree across domains on the reduced data;
    # each rank of a domain carries a 1/m shard of it through its own NIC
    S = x.S
    nt_bw = np.maximum(S / c.Bv_loc, c.inter_tree)
    nt_rounds = 2.0 + 2.0 * c.levels
    nt_lat = x.av + 2.0 * c.levels * x.ai
    nt_sent = S + np.where(c.multi, c.k_tree * S / c.g, 0.0)
    return _Cost(nt_sent, nt_rounds, nt_lat, nt_bw)


def _collnet(x: _Inputs, c: _Shared) -> _Cost:
    # CollNet [5]: inside the domain NVLS (NCCL's NVLS + SHARP) or a direct reduce-scatter /
    # all-gather to the NIC heads over NVLink (CollNet-direct, with NCCL's GPU/NIC penalty
    # (r + 1)/2 for r GPUs per NIC); across domains the switches reduce: each domain sends
    # S and receives S whatever N
    S, g, cn = x.S, c.g, x.cn
    cd_penalty = (x.gpn + 1.0) / 2.0
    cn_intra = np.where(cn, S / c.Bv_loc, np.where(g > 1.0, c.h_local / x.Bl, 0.0))
    cn_inter = np.where(c.multi, S / (g * x.Bi) * np.where(cn, 1.0, cd_penalty), 0.0)
    cn_bw = np.maximum(cn_intra, cn_inter)
    cn_rounds = np.where(cn, 1.0, 2.0 * (g - 1.0)) + 2.0
    cn_lat = np.where(cn, x.av, 2.0 * (g - 1.0) * x.al) + 2.0 * x.ai
    cn_sent = np.where(cn, S, c.h_local) + np.where(c.multi, S / g, 0.0)
    return _Cost(cn_sent, cn_rounds, cn_lat, cn_bw)


def _pat(x: _Inputs, c: _Shared) -> _Cost:
    # PAT [10][13]: log-depth reduce-scatter / all-gather, 75% of the ring's bandwidth
    pat_bw = c.rs_ag / (PAT_BANDWIDTH_EFFICIENCY * x.B)
    pat_lat = PAT_BASE_LATENCY_S + c.log_n * PAT_LOG_LATENCY_S + c.nf * PAT_RANK_LATENCY_S
    return _Cost(c.rs_ag, c.log_n, pat_lat, pat_bw)


def _pick_algorithm(x: _Inputs, table: list[tuple[np.ndarray, int, _Cost, object]]) -> CollectiveCost:
    """Each element's own (operation, algorithm) terms from `table`: NaN bytes and +inf time
    where the pair does not exist, nothing for one rank; algbw and busbw as nccl-tests [4]."""
    where = [w & (x.algo == a) for w, a, _, _ in table]
    sent = select(where, [t.sent for _, _, t, _ in table], np.nan)
    rounds = select(where, [t.rounds for _, _, t, _ in table], np.nan)
    latency_s = select(where, [t.latency for _, _, t, _ in table], np.inf)
    bandwidth_s = select(where, [t.bandwidth for _, _, t, _ in table], np.inf)
    protocol = select(where, [p for _, _, _, p in table], SIMPLE).astype(np.int64)
    # One rank: nothing to communicate.
    single = x.n == 1
    sent = np.where(single, 0.0, sent)
    rounds = np.where(single, 0.0, rounds)
    latency_s = np.where(single, 0.0, latency_s)
    bandwidth_s = np.where(single, 0.0, bandwidth_s)
    protocol = np.where(single, SIMPLE, protocol)  # NCCL: one rank, Ring / Simple (enqueue.cc l. 1450-1453)
    time_s = np.asarray(latency_s + bandwidth_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((time_s > 0) & np.isfinite(time_s), x.S / time_s, 0.0)
    busbw = np.asarray(algbw * busbw_factor(x.op, x.n))
    return CollectiveCost(
        bytes_sent_per_rank=sent,
        bytes_received_per_rank=sent.copy(),
        rounds=rounds,
        latency_s=latency_s,
        bandwidth_s=bandwidth_s,
        time_s=time_s,
        algbw=algbw,
        busbw=busbw,
        protocol=np.broadcast_to(protocol, time_s.shape),
    )


def best_algorithm(
    op,
    size_bytes,
    ranks,
    bandwidth,
    latency,
    *,
    nvls_ok=False,
    nvls_tree_ok=False,
    collnet_ok=False,
    pat_ok=False,
    candidates=AUTO_CANDIDATES,
    **link,
) -> np.ndarray:
    """The fastest algorithm of `candidates` that AUTO_OK allows for the op, per element
    (int64 codes), as NCCL's tuner picks the least predicted time by its own cost model [5].
    The conditional algorithms are candidates only where their flag is true (`availability`
    gives them for a placed group): NVLS where nvls_ok, NVLS-tree where nvls_tree_ok, CollNet
    where collnet_ok, PAT where pat_ok. `link`: the keywords of `collective_time` past
    `algo`, `protocol` among them: each algorithm is timed under its fastest allowed protocol
    (collective_time's default Simple alone; None: NCCL's set [17]). Ties go to the earlier
    candidate."""
    return _best(op, size_bytes, ranks, bandwidth, latency, nvls_ok=nvls_ok, nvls_tree_ok=nvls_tree_ok,
                 collnet_ok=collnet_ok, pat_ok=pat_ok, candidates=candidates, **link)[0]


def _best(op, size_bytes, ranks, bandwidth, latency, *, nvls_ok, nvls_tree_ok, collnet_ok, pat_ok, candidates,
          **link) -> tuple[np.ndarray, "_Inputs", list]:
    """`best_algorithm`'s codes, with the inputs and algorithm table (`_costed`) that priced
    them, so that the caller prices the chosen algorithm from the same table."""
    op = _i(op)
    allowed = {NVLS: nvls_ok, NVLS_TREE: nvls_tree_ok, COLLNET: collnet_ok, PAT: pat_ok}
    times = []
    x, table = _costed(op, size_bytes, ranks, bandwidth, latency, np.full_like(op, candidates[0]), **link)
    _check_codes(op, np.asarray(candidates, dtype=np.int64))
    present = {a for _, a, _, _ in table}
    for c in candidates:
        if c not in present:  # no pair of the table is algorithm c: _algorithm_time's +inf on every element
            times.append(np.full(x.n.shape, np.inf))
            continue
        t = _algorithm_time(x, table, c)
        t = np.where(AUTO_OK[np.clip(op, 0, len(OP_CODES) - 1), c], t, np.inf)
        if c in allowed:
            t = np.where(np.asarray(allowed[c], dtype=bool), t, np.inf)
        times.append(t)
    times = np.stack(np.broadcast_arrays(*times))
    return np.asarray(candidates, dtype=np.int64)[np.argmin(times, axis=0)], x, table


def _algorithm_time(x: _Inputs, table: list[tuple[np.ndarray, int, _Cost, object]], algo: int) -> np.ndarray:
    """`_pick_algorithm(x with every element asking for algo, table).time_s` alone (the same
    sums): latency + bandwidth seconds of each element's (operation, algo), +inf where the
    pair does not exist, 0 for one rank. Only the table rows of algo can apply."""
    rows = [(w, t) for w, a, t, _ in table if a == algo]
    latency_s = select([w for w, _ in rows], [t.latency for _, t in rows], np.inf) if rows else np.full(x.n.shape, np.inf)
    bandwidth_s = select([w for w, _ in rows], [t.bandwidth for _, t in rows], np.inf) if rows else latency_s
    single = x.n == 1
    return np.asarray(np.where(single, 0.0, latency_s) + np.where(single, 0.0, bandwidth_s))


# ---------------------------------------------------------------- hardware view
@dataclass(frozen=True)
class CommParams:
    """The communication side of a Hardware entry, at achievable (not line-rate) speeds.

    Bandwidths in B/s per GPU per direction, latencies in s per round. nvls_bandwidth: the
    NVLS all-reduce algbw inside one NVLink domain (None: NVLS_ALGBW_PER_RING_BUSBW x
    nvlink_bandwidth). sharp: the scale-out fabric reduces in its switches (IB SHARP, NCCL
    CollNet). gpus_per_nic: GPUs per scale-out NIC (gpus_per_node / rails). tree_hop_latency:
    seconds per hop of NCCL's tree (TREE_HOP_LATENCY_S). ll128: NCCL enables LL128 by default
    on the GPU (`ll128_default` of its compute_capability); ll_max_bandwidth: NCCL's LL
    bandwidth cap inside one node (`ll_max_bandwidth`) [17].
    """

    name: str
    nvlink_bandwidth: float
    nvlink_latency: float
    network_bandwidth: float
    network_latency: float
    gpus_per_node: int
    nvlink_domain: int
    pod_gpus: int
    oversubscription: float
    nvls: bool
    nvlink_line_rate: float
    network_line_rate: float
    nvlink_efficiency: float
    network_efficiency: float
    nvls_bandwidth: float | None = None
    sharp: bool = False
    gpus_per_nic: float = 1.0
    tree_hop_latency: float = TREE_HOP_LATENCY_S
    segments: bool = False  # the hardware's nvlink_domain_allocation is "segments" (domain_in_use)
    ll128: bool = False
    ll_max_bandwidth: float = LL_MAX_BW_AMPERE_HOPPER

    @property
    def nvls_algbw(self) -> float:
        """NVLS all-reduce algbw inside one NVLink domain (B/s)."""
        return self.nvls_bandwidth if self.nvls_bandwidth is not None else NVLS_ALGBW_PER_RING_BUSBW * self.nvlink_bandwidth


def nvls_enabled(nccl_nvls_enable, hardware_nvls) -> bool:
    """Whether NCCL runs NVLink SHARP under the run's NCCL_NVLS_ENABLE (job field nccl_nvls_enable) on hardware whose
    `nvls` flag is hardware_nvls [22]: 0 never (ncclNvlsInit returns with nvlsSupport 0); 2, NCCL's default, or None
    (unset) where the GPU reports multicast support, the hardware's flag; 1 forces it (plan._nccl_nvls_enable refuses
    it on hardware without NVLS, so the hardware's flag too)."""
    return bool(hardware_nvls) and nccl_nvls_enable != 0


def comm_params(
    hw,
    *,
    nvlink_efficiency: float = NVLINK_RING_EFFICIENCY,
    network_efficiency: float = NETWORK_EFFICIENCY,
    nvlink_latency: float = NVLINK_LATENCY_S,
    network_latency: float = NETWORK_LATENCY_S,
    nvls: bool | None = None,
    sharp: bool | None = None,
) -> CommParams:
    """CommParams of a schema.Hardware. Efficiencies 1.0 give raw line rates (the seed's
    figures). nvls, sharp None: the hardware's `nvls` flag and its fabric's `sharp` flag
    (False where the schema lacks them). The NVLS bandwidth is the hardware's measured
    `nvls_algbw_GBps` where it has one; the NIC count per node its fabric's `rails`
    (default one per GPU)."""
    if nvls is None:
        nvls = bool(getattr(hw, "nvls", False))
    fabric = getattr(hw, "fabric", None)
    if sharp is None:
        sharp = bool(getattr(fabric, "sharp", False))
    for name, v in (("nvlink_efficiency", nvlink_efficiency), ("network_efficiency", network_efficiency)):
        if not 0 < v <= 1:
            raise PlannerError(f"{name} must be in (0, 1], got {v}")
    nvls_GBps = getattr(hw, "nvls_algbw_GBps", None)
    rails = getattr(fabric, "rails", None) or int(hw.gpus_per_node)
    return CommParams(
        name=hw.name,
        nvlink_bandwidth=hw.nvlink_bandwidth * nvlink_efficiency,
        nvlink_latency=float(nvlink_latency),
        network_bandwidth=hw.network_bandwidth * network_efficiency,
        network_latency=float(network_latency),
        gpus_per_node=int(hw.gpus_per_node),
        nvlink_domain=int(hw.nvlink_domain),
        pod_gpus=int(hw.fabric.pod_gpus),
        oversubscription=float(hw.fabric.oversubscription),
        nvls=bool(nvls),
        nvlink_line_rate=hw.nvlink_bandwidth,
        network_line_rate=hw.network_bandwidth,
        nvlink_efficiency=float(nvlink_efficiency),
        network_efficiency=float(network_efficiency),
        nvls_bandwidth=None if nvls_GBps is None else float(nvls_GBps) * 1e9,
        sharp=bool(sharp),
        gpus_per_nic=max(1.0, int(hw.gpus_per_node) / int(rails)),
        segments=getattr(hw, "nvlink_domain_allocation", "in_order") == "segments",
        ll128=ll128_default(gpu_capability(hw)),
        ll_max_bandwidth=ll_max_bandwidth(gpu_capability(hw)),
    )


# ---------------------------------------------------------------------- placement
AXES = ("tp", "cp", "pp", "dp")
DEFAULT_ORDER = "tp-cp-pp-dp"


def parse_order(order: str) -> tuple[str, ...]:
    """'tp-cp-pp-dp' (innermost first) -> ('tp', 'cp', 'pp', 'dp'); any permutation of the
    four axes, separated by '-' or ','."""
    parts = tuple(p.strip().lower() for p in str(order).replace(",", "-").split("-") if p.strip())
    if sorted(parts) != sorted(AXES):
        raise PlannerError(
            f"rank order {order!r} is not an arrangement of tp, cp, pp and dp",
            f"write all four axes once, innermost first, e.g. {DEFAULT_ORDER}",
        )
    return parts


def axis_strides(order: str = DEFAULT_ORDER, *, tp=1, cp=1, pp=1, dp=1) -> dict[str, np.ndarray]:
    """Distance in the global rank order between neighbours of each axis' groups: the product
    of the sizes of the axes inner to it. Default order TP innermost, then CP, PP, DP [9]."""
    sizes = {"tp": _i(tp), "cp": _i(cp), "pp": _i(pp), "dp": _i(dp)}
    stride = np.int64(1)
    out = {}
    for ax in parse_order(order):
        out[ax] = np.asarray(stride, dtype=np.int64)
        stride = stride * sizes[ax]
    return out


# Rank orders as integer codes (a search holds them in an int64 array): every arrangement of
# the four axes, innermost first; code 0 is the default tp-cp-pp-dp.
ORDERS: tuple[tuple[str, ...], ...] = tuple(itertools.permutations(AXES))
ORDER_CODES = {"-".join(o): i for i, o in enumerate(ORDERS)}
ORDER_NAMES = {i: n for n, i in ORDER_CODES.items()}
_POS = np.array([[o.index(ax) for ax in AXES] for o in ORDERS], dtype=np.int64)  # [code, axis] -> position


def order_code(order: str) -> int:
    return ORDER_CODES["-".join(parse_order(order))]


def strides_by_code(order, *, tp=1, cp=1, pp=1, dp=1) -> dict[str, np.ndarray]:
    """axis_strides for arrays of order codes (ORDER_CODES): the stride of an axis is the
    product of the sizes of the axes placed inside it."""
    order = _i(order)
    sizes = [_i(tp), _i(cp), _i(pp), _i(dp)]
    if order.size and (order.ndim == 0 or bool((order == order.flat[0]).all())):
        # one order for every element (a stack's own order, a plan's): the running product of
        # the sizes in that order, innermost first (the same integers, without the masks)
        shape = np.broadcast(order, *sizes).shape
        out, stride = {}, np.ones((), dtype=np.int64)
        for ax in ORDERS[int(order.flat[0])]:
            out[ax] = np.broadcast_to(stride, shape)
            stride = stride * sizes[AXES.index(ax)]
        return {ax: out[ax] for ax in AXES}
    pos = _POS[order]  # (..., 4)
    out = {}
    for a, ax in enumerate(AXES):
        st = np.ones(np.broadcast(order, *sizes).shape, dtype=np.int64)
        for b in range(4):
            if b != a:
                st = st * np.where(pos[..., b] < pos[..., a], sizes[b], 1)
        out[ax] = st
    return out


@dataclass(frozen=True)
class GroupLink:
    """Which links a group of ranks uses (arrays).

    link: LINK_NVLINK / LINK_NETWORK / LINK_CROSS_POD.
    bandwidth, latency: what a flat algorithm (ring, tree, direct, ...) over the whole group
        gets per rank (B/s per direction, s per round).
    local_ranks, local_bandwidth, local_latency: members per NVLink domain and the NVLink.
    inter_bandwidth, inter_latency: per GPU across domains (the hierarchical inter phase).
    domains: NVLink domains the group spans; pods: pods it spans; crosses_pod: bool.
    """

    link: np.ndarray
    bandwidth: np.ndarray
    latency: np.ndarray
    local_ranks: np.ndarray
    local_bandwidth: np.ndarray
    local_latency: np.ndarray
    inter_bandwidth: np.ndarray
    inter_latency: np.ndarray
    domains: np.ndarray
    pods: np.ndarray
    crosses_pod: np.ndarray

    def collective_kwargs(self) -> dict[str, np.ndarray]:
        """The hierarchical keywords of collective_time."""
        return dict(
            local_ranks=self.local_ranks,
            local_bandwidth=self.local_bandwidth,
            local_latency=self.local_latency,
            inter_bandwidth=self.inter_bandwidth,
            inter_latency=self.inter_latency,
        )

    def algorithm_kwargs(self, params: "CommParams") -> dict:
        """All keywords of collective_time past `algo` for this placed group: the
        hierarchical ones, NVLS bandwidth and latency, NCCL's tree hop latency, and how
        CollNet reduces inside a domain."""
        return dict(
            self.collective_kwargs(),
            nvls_bandwidth=params.nvls_algbw,
            nvls_latency=NVLS_LATENCY_S,
            tree_latency=params.tree_hop_latency,
            collnet_nvls=params.nvls,
            gpus_per_nic=params.gpus_per_nic,
            ll128=params.ll128,
            ll_max_bandwidth=params.ll_max_bandwidth,
        )

    def availability(self, params: "CommParams", group_size) -> dict[str, np.ndarray]:
        """Where each conditional algorithm exists (bool arrays, the flags of
        `best_algorithm`): NVLS inside one NVLink domain whose switches reduce
        (params.nvls); NVLS-tree across such domains with two or more ranks in each; CollNet
        across domains of a fabric that reduces (params.sharp); PAT with one rank per
        domain [13]."""
        g = _i(group_size)
        inside = self.link == LINK_NVLINK
        across = ~inside & (g > 1)
        return dict(
            nvls_ok=params.nvls & inside,
            nvls_tree_ok=params.nvls & across & (self.local_ranks >= 2),
            collnet_ok=params.sharp & across,
            pat_ok=across & (self.local_ranks == 1),
        )


def group_link(
    group_size,
    stride,
    params: CommParams,
    *,
    pattern=PATTERN_RING,
    job_gpus=None,
    worst_case_pods: bool = False,
) -> GroupLink:
    """Where a group of `group_size` ranks, `stride` apart in the global rank order, lands.

    The group's block spans span = group_size * stride consecutive ranks; ranks fill NVLink
    domains (params.nvlink_domain GPUs) and pods (params.pod_gpus GPUs) in order, the job
    starting at a pod boundary. job_gpus (default: span, i.e. this axis is outermost) decides
    whether blocks smaller than a domain or pod but not dividing it straddle a boundary.

    Inside one NVLink domain: NVLink, achievable bandwidth, NVLink latency.

    Across domains, m = members per domain (the smallest piece any block has: gcd(domain,
    span) / stride, at least 1). Each GPU has its own NIC and NCCL lays a ring's channels over
    all of them, so a ring gets min(B_nvlink, m * B_net) [12]. In general a fraction f of a
    rank's traffic leaves its domain: f = 1/m on a ring (one hop in m leaves the domain) and
    f = (g-m)/(g-1) for all-pairs traffic (all-to-all; also the parameter server's busiest
    rank). The network then allows B_net / f. Latency per round: f * alpha_net +
    (1 - f) * alpha_nvlink (NCCL's ring latency sums intra- and inter-node steps [5]).

    Across pods (span > pod, or a block straddling a pod boundary): contention model. The
    layer above a pod offers each GPU B_net / o (1:o oversubscription [3, sec. 6.2][9]). All
    groups of the axis run at once, one per set of members, so the pod's uplinks carry, per
    GPU, the fraction f_pod of its traffic that leaves the pod: f_pod = 1/m_pod on a ring laid
    out pod by pod (a ring visiting k pods crosses a pod boundary k times, each crossing
    carrying the ring's full rate) and (g - m_pod)/(g - 1) for all-pairs traffic, where m_pod =
    gcd(pod, span) / stride (at least 1) members per pod. The pod layer allows
    B_net / (o * f_pod). Consequence: a ring with at least o members per pod (TP 8 x DP 512's
    DP rings have 128-384 per pod) is barely slowed, while one member per pod (the HSDP
    replica all-reduce of the seed's sec. 6.3) pays the full 1:o. worst_case_pods=True takes
    f_pod = 1 (all traffic crosses the oversubscribed layer): bandwidth B_net / o.
    """
    g, s = _i(group_size), _i(stride)
    if np.any(g < 1) or np.any(s < 1):
        raise PlannerError("group size and stride must be at least 1")
    pattern = _i(pattern)
    g, s, pattern = np.broadcast_arrays(g, s, pattern)
    span = g * s
    job = span if job_gpus is None else np.broadcast_to(_i(job_gpus), span.shape)
    return _placed_link_speeds(g, span, pattern, _place(g, s, span, job, params), params, worst_case_pods)


class _Placement(NamedTuple):
    """Where a group's blocks fall (`_place`)."""

    inside: np.ndarray  # the block sits in one NVLink domain
    m_local: np.ndarray  # members per NVLink domain
    crosses: np.ndarray  # the block crosses the oversubscribed layer above the pods
    m_pod: np.ndarray  # members per pod


def domain_in_use(job, params: CommParams) -> np.ndarray:
    """GPUs of each NVLink domain a job of `job` GPUs fills (int64 array): the whole domain
    (params.nvlink_domain) where ranks fill domains in order, or where the job fits in one.
    Under segment allocation (hardware nvlink_domain_allocation "segments") a job larger than
    one domain is given equal segments of whole nodes, each inside one domain: the most nodes
    k <= nvlink_domain / gpus_per_node that divide the job's node count, k x gpus_per_node GPUs
    per domain. That is the rule of NVIDIA's Megatron-Bridge launcher for GB200 (4 GPUs per
    node, 18 nodes per NVL72 rack): `segment` = the largest of 18..1 dividing the node count,
    passed to SLURM's --segment when the job has more than 18 nodes [16]; 128 or 256 GPUs
    (32 or 64 nodes) run in 64-GPU segments, 144 in whole racks. A job whose GPU count is not
    a whole number of nodes keeps whole domains."""
    D, n = params.nvlink_domain, params.gpus_per_node
    job = _i(job)
    if not params.segments or D <= n:
        return np.full(job.shape, D, dtype=np.int64)
    nodes = job // n
    k = np.arange(1, D // n + 1, dtype=np.int64)
    seg = np.max(np.where(nodes[..., None] % k == 0, k, 1), axis=-1)
    return np.where((job > D) & (job % n == 0), seg * n, D).astype(np.int64)


def folded_stride(size, sigma, plan, strides):
    """A stride that places a group of `size` ranks `sigma` apart in the expert grid's index
    j (planner/moe.py docstring, "Where the expert groups sit") in the global rank order: the group
    spans j in [0, size sigma); past the first axis of j it covers ceil(size sigma / P)
    neighbours of the axis it ends in (P: the product of the axes of j inside it, s that
    axis's global stride), so its global span is ceil(size sigma / P) s and it is placed as
    size ranks span / size apart (the same span and members per NVLink domain as the true
    group, group_link). Exact for a group inside one axis."""
    cp_in = (plan.cp > 1) & (strides["cp"] < strides["dp"])
    n = [plan.tp, np.where(cp_in, plan.cp, plan.dp), np.where(cp_in, plan.dp, plan.cp)]
    s = [strides["tp"], np.where(cp_in, strides["cp"], strides["dp"]), np.where(cp_in, strides["dp"], strides["cp"])]
    reach = np.asarray(size * sigma, dtype=np.int64)
    inner = np.ones_like(reach)
    span = np.zeros_like(reach)
    for i, (n_ax, s_ax) in enumerate(zip(n, s)):  # the axis it ends in: the first whose block holds it
        here = (span == 0) & ((reach <= inner * n_ax) | (i == len(n) - 1))
        span = np.where(here, -(-reach // inner) * s_ax, span)
        inner = inner * n_ax
    return np.maximum(span // np.maximum(size, 1), 1)


def domain_pieces(group_size, stride, params: CommParams, job_gpus) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of NVLink domains that groups of `group_size` ranks `stride` apart land in, each piece
    what one member sees (its group's members in its own domain): the `group_link` placement (blocks of
    group_size x stride consecutive ranks tiling the job of job_gpus GPUs, which fills domains of
    `domain_in_use` GPUs in order), counted rank by rank rather than as group_link's smallest piece:
    a 32-rank block on 72-GPU domains falls in pieces of 32 and of 8 and 24 (ranks 64-95). Returns
    (every piece divides group_size, the gcd of the pieces, some piece is below group_size: a group
    spans domains), bool / int64 / bool arrays of the broadcast shape. Exact: the placement repeats
    every lcm(block, domain) ranks, so one period and the job's remainder are counted, once per
    distinct (group_size, stride) and looked up (_piece_sets)."""
    shape, index, sizes, sets = _piece_sets(group_size, stride, params, job_gpus)
    div = np.array([all(g % p == 0 for p in ps) for g, ps in zip(sizes, sets)], dtype=bool)
    gcd = np.array([int(np.gcd.reduce(np.asarray(ps, dtype=np.int64))) for ps in sets], dtype=np.int64)
    spans = np.array([ps[0] < g for g, ps in zip(sizes, sets)], dtype=bool)
    return div[index].reshape(shape), gcd[index].reshape(shape), spans[index].reshape(shape)


def domain_piece_columns(group_size, stride, params: CommParams, job_gpus) -> np.ndarray:
    """Every piece domain_pieces counts, one column each: an int64 array of the broadcast shape of
    group_size and stride plus a last axis of k columns, each row its (group_size, stride)'s
    distinct pieces in ascending order, the largest repeated to fill the k columns (k the most
    distinct pieces of any row). For a cost that each rank sizes by its own piece (Hybrid-EP's
    buffers, memory.dispatcher_buffer_bytes): evaluate it on every column and take the largest,
    the heaviest rank's, without a Python branch on a searched quantity."""
    shape, index, _, sets = _piece_sets(group_size, stride, params, job_gpus)
    k = max(len(ps) for ps in sets)
    table = np.array([list(ps) + [ps[-1]] * (k - len(ps)) for ps in sets], dtype=np.int64)
    return table[index].reshape(shape + (k,))


def domain_piece_sizes(group_size: int, stride: int, params: CommParams, job_gpus: int) -> list[int]:
    """The distinct pieces domain_pieces counts for one group size and stride (an error message's figures)."""
    return list(_piece_sets(group_size, stride, params, job_gpus)[3][0])


def _piece_sets(group_size, stride, params: CommParams, job_gpus):
    """(broadcast shape, each element's index into the distinct (group_size, stride) pairs, their group
    sizes, their distinct pieces ascending): domain_pieces' count, once per distinct pair (a size or
    stride below 1 taken as 1)."""
    g, s = np.broadcast_arrays(_i(group_size), _i(stride))
    job = int(np.max(_i(job_gpus)))
    D = int(np.max(domain_in_use(job, params)))
    g1, s1 = np.maximum(g.ravel(), 1), np.maximum(s.ravel(), 1)
    width = int(s1.max(initial=1)) + 1
    keys, index = np.unique(g1 * width + s1, return_inverse=True)  # one key per (group_size, stride)
    sizes, sets = [], []
    for key in keys.tolist():
        gk, sk = divmod(int(key), width)
        sizes.append(gk)
        sets.append(_piece_set(gk, sk, D, job))
    return g.shape, np.asarray(index).ravel(), sizes, sets


@functools.lru_cache(maxsize=1024)
def _piece_set(g: int, s: int, D: int, job: int) -> tuple[int, ...]:
    """The distinct pieces (ascending) of groups of g ranks s apart on a job of `job` GPUs in domains
    of D: the placement repeats every lcm(g s, D) ranks, so one period and the job's remainder (kept:
    a search's start-up rules and memory model ask for the same few pairs). Members s >= D apart (or a group of
    one) sit one a domain, the domains being blocks of D consecutive ranks: (1,), without the count."""
    if s >= D or g == 1:
        return (1,)
    period = int(np.lcm(g * s, D))
    pieces = np.concatenate([_pieces(g, s, D, min(job, period)),
                             _pieces(g, s, D, job % period) if job > period else np.zeros(0, dtype=np.int64)])
    return tuple(int(p) for p in np.flatnonzero(np.bincount(pieces)))  # the distinct counts (each >= 1), ascending


def _pieces(g: int, s: int, D: int, n: int) -> np.ndarray:
    """domain_pieces' count for the first n ranks: each rank's group (block r // (g s), offset r % s)
    members in its domain (r // D), counted in closed form: the ranks congruent to r mod s in
    [lo, hi), lo the later of its block's and its domain's starts, hi the earliest of their ends and n
    (r itself, (hi - 1 - r) // s after it, (r - lo) // s before it)."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    r = np.arange(n, dtype=np.int64)
    block, dom = (r // (g * s)) * (g * s), (r // D) * D
    lo = np.maximum(block, dom)
    hi = np.minimum(np.minimum(block + g * s, dom + D), n)
    return (hi - 1 - r) // s + 1 + (r - lo) // s


def _place(g, s, span, job, params: CommParams) -> _Placement:
    """Blocks of `span` consecutive ranks, members `s` apart, in a job of `job` GPUs filling
    NVLink domains (the `domain_in_use` GPUs of each) and pods in order from a pod boundary
    (`group_link`)."""
    D, P = domain_in_use(job, params), params.pod_gpus
    inside = (g == 1) | ((span <= D) & ((D % span == 0) | (job <= D)))
    m_local = np.where(inside, g, np.clip(np.gcd(span, D) // s, 1, g))
    crosses = ~inside & ((span > P) | ((P % span != 0) & (job > P)))
    m_pod = np.clip(np.gcd(span, P) // s, 1, g)
    return _Placement(inside, m_local, crosses, m_pod)


def _placed_link_speeds(g, span, pattern, pl: _Placement, params: CommParams, worst_case_pods: bool) -> GroupLink:
    """The GroupLink of a placed group (`group_link`'s model): the shares f_node and f_pod of
    a rank's traffic that leave its domain and its pod set its bandwidth and latency."""
    inside, m_local, crosses, m_pod = pl
    P, o = params.pod_gpus, params.oversubscription
    B_nv, B_net = params.nvlink_bandwidth, params.network_bandwidth
    a_nv, a_net = params.nvlink_latency, params.network_latency
    gf = g.astype(np.float64)
    all_pairs = pattern == PATTERN_ALL_PAIRS
    with np.errstate(divide="ignore", invalid="ignore"):
        f_node = np.where(all_pairs, (gf - m_local) / (gf - 1.0), 1.0 / m_local)
        f_pod = np.where(all_pairs, (gf - m_pod) / (gf - 1.0), 1.0 / m_pod)
        f_pod = np.where(worst_case_pods, 1.0, f_pod)
        node_bw = B_net / f_node
        pod_bw = np.where(crosses, B_net / (o * f_pod), np.inf)
        # hierarchical inter phase: m_local sub-rings of one member per domain, each with
        # m_pod / m_local members per pod
        inter_bw = np.where(
            crosses,
            np.minimum(B_net, B_net * np.where(worst_case_pods, 1.0, m_pod / m_local) / o),
            B_net,
        )
    bandwidth = np.where(inside, B_nv, np.minimum(np.minimum(B_nv, node_bw), pod_bw))
    latency = np.where(inside, a_nv, f_node * a_net + (1.0 - f_node) * a_nv)
    link = np.where(inside, LINK_NVLINK, np.where(crosses, LINK_CROSS_POD, LINK_NETWORK))
    domains = np.where(inside, 1, -(-g // m_local))
    pods = np.where(crosses, -(-span // P) + ((P % span != 0) & (span < P)), 1)
    return GroupLink(
        link=link.astype(np.int64),
        bandwidth=bandwidth.astype(np.float64),
        latency=latency.astype(np.float64),
        local_ranks=m_local.astype(np.int64),
        local_bandwidth=np.full(g.shape, B_nv),
        local_latency=np.full(g.shape, a_nv),
        inter_bandwidth=inter_bw.astype(np.float64),
        inter_latency=np.full(g.shape, a_net),
        domains=domains.astype(np.int64),
        pods=pods.astype(np.int64),
        crosses_pod=crosses,
    )


def traffic_pattern(op, algo) -> np.ndarray:
    """PATTERN_ALL_PAIRS for all-to-all and the parameter server, else PATTERN_RING (rings,
    trees, NVLS and point-to-point talk to neighbours)."""
    op, algo = np.broadcast_arrays(_i(op), _i(algo))
    return np.where((op == ALL_TO_ALL) | (algo == PARAMETER_SERVER), PATTERN_ALL_PAIRS, PATTERN_RING)


def group_collective(
    op,
    size_bytes,
    group_size,
    stride,
    params: CommParams,
    algo=AUTO,
    *,
    job_gpus=None,
    worst_case_pods: bool = False,
    candidates=AUTO_CANDIDATES,
    protocols=None,
) -> tuple[CollectiveCost, GroupLink, np.ndarray]:
    """Cost of one collective over a placed group: placement (`group_link`), then the named
    algorithm or, where algo == AUTO, the fastest one that exists there (`best_algorithm`
    with `GroupLink.availability`: NVLS inside one NVLink domain, NVLS-tree and CollNet
    across domains, PAT with one rank per domain; of `candidates`, those the run's NCCL_ALGO leaves:
    nccl_algo_candidates). A named algorithm that does not exist for
    the group (e.g. NVLS across domains) costs +inf. Returns (cost, link, algorithm codes).
    protocols: the NCCL protocols allowed (`proto_mask`; None: NCCL's default set on this
    hardware; a run's NCCL_PROTO: `nccl_proto_protocols`); each algorithm is priced under its
    fastest allowed protocol (cost.protocol) [17], LL / LL128 only where the group has no
    network hop (Simple alone across NVLink domains, [19]).

    The search's entry point: every argument but params may be an array.
    """
    op = _i(op)
    algo = _i(algo)
    op, algo, g = np.broadcast_arrays(op, algo, _i(group_size))
    auto = algo == AUTO
    base = np.where(auto, np.where(op == ALL_TO_ALL, DIRECT, RING), algo)
    link = group_link(g, stride, params, pattern=traffic_pattern(op, base), job_gpus=job_gpus, worst_case_pods=worst_case_pods)
    kw = link.algorithm_kwargs(params)
    avail = link.availability(params, g)
    best, x, table = _best(op, size_bytes, g, link.bandwidth, link.latency, candidates=candidates,
                           protocol=_i(proto_mask(protocols)), **avail, **kw)
    chosen = np.where(auto, best, algo)
    _check_codes(op, chosen)
    cost = _pick_algorithm(x._replace(algo=np.broadcast_to(chosen, x.op.shape)), table)  # = collective_time(..., chosen)
    bad = ~exists(chosen, avail) & (g > 1)
    if np.any(bad):
        cost = CollectiveCost(**{k: v if k == "protocol" else np.where(bad, np.inf if k.endswith("_s") else np.nan, v)
                                 for k, v in cost.as_dict().items()})
    return cost, link, chosen


# (params, job_gpus, op, dtypes) -> {(size, group, stride) bit patterns: (time_s, latency_s, bandwidth_s, link)}
_AUTO_MEMO: dict = {}
AUTO_MEMO_LIMIT = 1 << 18  # tuples kept per (params, job, op): a table is cleared when it would outgrow this
AUTO_MEMO_TABLES = 64  # tables kept (hardware x job x op): all are cleared when one more would exceed this


def auto_collective_times(op, size, group, stride, params: CommParams, job_gpus=None, candidates=AUTO_CANDIDATES,
                          protocols=None):
    """(time_s, latency_s, bandwidth_s, link code) of group_collective(op, size, group, stride,
    params, AUTO, job_gpus=job_gpus), each distinct (op, size, group, stride) priced once per
    process for these params and job: group_collective is elementwise, so a tuple's figures
    do not depend on the tuples priced beside it. A search asks for the same collectives in
    every step_time call (the orders and stack variants it prices after the first pass, the
    rows it explains), and a call that finds every tuple here costs no pricing at all. candidates: the algorithms
    the run's NCCL_ALGO leaves the op (nccl_algo_candidates; default every one); protocols: group_collective's."""
    candidates = tuple(candidates)
    size, group, stride = np.broadcast_arrays(np.asarray(size), np.asarray(group), np.asarray(stride))
    if np.ndim(op) == 0 and size.ndim > 1 and size.size:
        # (K, n) stacked sends (step.cp_ring_comm's), which comm.distinct hands down unflattened below
        # UNIQUE_MIN elements: priced flat through the memo (elementwise: the same figures), reshaped
        out = auto_collective_times(op, size.ravel(), group.ravel(), stride.ravel(), params, job_gpus, candidates,
                                    protocols)
        return tuple(x.reshape(size.shape) for x in out)
    if np.ndim(op) != 0 or size.ndim != 1 or not size.size:
        cost, link, _ = group_collective(op, size, group, stride, params, AUTO, job_gpus=job_gpus,
                                         candidates=candidates, protocols=protocols)
        return cost.time_s, cost.latency_s, cost.bandwidth_s, link.link
    flat = (size, group, stride)
    key = (params, job_gpus, int(op), candidates, proto_mask(protocols)) + tuple(a.dtype.str for a in flat)
    if key not in _AUTO_MEMO and len(_AUTO_MEMO) >= AUTO_MEMO_TABLES:
        _AUTO_MEMO.clear()
    memo = _AUTO_MEMO.setdefault(key, {})
    keys = list(zip(*(_bits(a).tolist() for a in flat)))
    miss = list({k: i for i, k in enumerate(keys) if k not in memo}.values())
    rows = None
    if miss:
        idx = np.asarray(miss, dtype=np.int64)
        cost, link, _ = group_collective(op, size[idx], group[idx], stride[idx], params, AUTO, job_gpus=job_gpus,
                                         candidates=candidates, protocols=protocols)
        got = [np.broadcast_to(np.asarray(x), idx.shape).tolist()
               for x in (cost.time_s, cost.latency_s, cost.bandwidth_s, link.link)]
        new = dict(zip((keys[i] for i in miss), zip(*got)))
        if len(memo) + len(miss) > AUTO_MEMO_LIMIT:
            # the tuples found here take their figures before the table is cleared to the new ones
            rows = [new[k] if k in new else memo[k] for k in keys]
            memo.clear()
        memo.update(new)
    if rows is None:
        rows = [memo[k] for k in keys]
    t, lat, bw, lk = zip(*rows)
    return (np.array(t, dtype=np.float64), np.array(lat, dtype=np.float64), np.array(bw, dtype=np.float64),
            np.array(lk, dtype=np.int64))


def clear_collective_memo() -> None:
    """Forget auto_collective_times' priced collectives (a benchmark round that should price
    its collectives afresh, as one `planner` command does)."""
    _AUTO_MEMO.clear()


def exists(algo, avail: dict) -> np.ndarray:
    """False where `algo` is a conditional algorithm (CONDITIONAL) that `avail` (the flags
    of `GroupLink.availability`) rules out."""
    algo = _i(algo)
    ok = np.ones(algo.shape, dtype=bool)
    for code, key in ((NVLS, "nvls_ok"), (NVLS_TREE, "nvls_tree_ok"), (COLLNET, "collnet_ok"), (PAT, "pat_ok")):
        ok = ok & ((algo != code) | np.asarray(avail[key], dtype=bool))
    return ok


# ------------------------------------------------------- many collectives, deduplicated
UNIQUE_MIN = 64  # below this many elements the function is simply called


def _bits(a: np.ndarray) -> np.ndarray:
    """A 1-d array's values as uint64 bit patterns (one-to-one for floats, ints, bools)."""
    if a.dtype.kind == "f":  # (no copy of a float64 or int64 array: a view of its bits)
        return a.astype(np.float64, copy=False).view(np.uint64)
    if a.dtype.kind in "iub":
        return a.astype(np.int64, copy=False).view(np.uint64)
    raise TypeError(f"distinct: unsupported dtype {a.dtype}")


def apply_unique(fn, *args) -> np.ndarray:
    """fn(*args) for an elementwise fn of equal-shape (broadcast) arrays, evaluated once per
    distinct tuple of argument values and broadcast back: the same numbers as fn(*args),
    with as many evaluations as there are distinct tuples (`distinct`). fn may raise on bad
    values: it sees the same set of values either way.

    A caller that would hand its own function down here can instead call `distinct` and
    evaluate the distinct values itself, so that the cost models are not called back."""
    d = distinct(*args)
    return d.expand(fn(*d.values))


@dataclass(frozen=True)
class Distinct:
    """The distinct tuples of equal-shape arrays (`distinct`). values: one 1-d array per
    argument, each distinct tuple once (below UNIQUE_MIN elements: the broadcast arguments
    themselves); `expand` maps a result per tuple of `values` back to the arguments' shape."""

    values: tuple[np.ndarray, ...]
    index: np.ndarray | None  # the tuple of `values` each element has; None: values are the arguments
    shape: tuple[int, ...]

    def expand(self, out) -> np.ndarray:
        out = np.asarray(out)
        # take on the first axis: out[index]'s elements, without fancy indexing's machinery
        return out if self.index is None else out.take(self.index, axis=0).reshape(self.shape)


def distinct(*args) -> Distinct:
    """The distinct tuples of argument values of equal-shape (broadcast) arrays.

    A search asks for the same collective (size, group, stride) over and over; this is how
    `step.step_time` stays cheap on a million plans. Distinct tuples are found in two passes:
    runs of equal consecutive tuples (one comparison per element), then a sort of the run
    heads by a hash of their bit patterns, the tuples then compared bit for bit (0.0 and
    -0.0 stay apart)."""
    arrays = np.broadcast_arrays(*[np.asarray(a) for a in args])
    shape = arrays[0].shape
    n = arrays[0].size
    if n < UNIQUE_MIN:
        return Distinct(tuple(arrays), None, shape)
    flat = [np.ascontiguousarray(a).ravel() for a in arrays]
    # bit patterns: 0.0 and -0.0 are equal but need not give the same result
    bits = [_bits(a) for a in flat]
    change = np.empty(n, dtype=bool)
    change[0] = True
    np.not_equal(bits[0][1:], bits[0][:-1], out=change[1:])
    differs = np.empty(n - 1, dtype=bool)
    for b in bits[1:]:
        np.not_equal(b[1:], b[:-1], out=differs)
        change[1:] |= differs
    heads = np.flatnonzero(change)
    lengths = np.diff(heads, append=n)  # each run's elements
    vals = [a.take(heads) for a in flat]
    if len(heads) >= UNIQUE_MIN:
        hb = [b.take(heads) for b in bits]
        # sort the run heads by a hash of the tuple; equal tuples become neighbours (a hash
        # collision only leaves a duplicate, evaluated twice: never a wrong value)
        h = np.zeros(len(heads), dtype=np.uint64)
        for j, b in enumerate(hb):  # h = h * C + b + j (uint64, wrapping), in place
            h *= np.uint64(0x9E3779B97F4A7C15)
            h += b
            h += np.uint64(j)
        order = np.argsort(h)
        new = np.empty(len(order), dtype=bool)
        new[0] = True
        new[1:] = False
        for b in hb:
            sb = b.take(order)
            new[1:] |= sb[1:] != sb[:-1]
        uid = np.empty(len(order), dtype=np.int64)
        uid[order] = np.cumsum(new) - 1
        firsts = order[new]
        # each element's tuple: its run's, repeated over the run (the run index cumsum(change) - 1, gathered)
        return Distinct(tuple(v.take(firsts) for v in vals), np.repeat(uid, lengths), shape)
    return Distinct(tuple(vals), np.repeat(np.arange(len(heads)), lengths), shape)


# ------------------------------------------------------------- one collective, told
DEFAULT_HARDWARE = "h100-sxm"


def _algo_code(algo) -> int:
    if algo is None:
        return -2
    if isinstance(algo, str):
        key = algo.strip().lower().replace("_", "-")
        if key == "auto":
            return AUTO
        if key not in ALGO_CODES:
            raise PlannerError(f"unknown --algo {algo!r}", f"valid: {', '.join(ALGO_CODES)}, auto")
        return ALGO_CODES[key]
    return int(algo)


def op_code(op) -> int:
    """'all-reduce', 'all_reduce', 'allreduce' (nccl-tests' names too) -> ALL_REDUCE, ..."""
    if not isinstance(op, str):
        return int(op)
    key = op.strip().lower().replace("_", "").replace("-", "")
    for name, code in OP_CODES.items():
        if key == name.replace("-", ""):
            return code
    raise PlannerError(f"unknown --op {op!r}", f"valid: {', '.join(OP_CODES)}")


def collective_report(
    op,
    size_bytes: float,
    ranks: int,
    *,
    algo=None,
    params: CommParams | None = None,
    bandwidth: float | None = None,
    latency: float | None = None,
    stride: int = 1,
    job_gpus: int | None = None,
    worst_case_pods: bool = False,
) -> dict:
    """Everything `planner collective` prints about one collective, as plain numbers (SI).

    The link comes from `params` placed with `group_link` (ranks members, `stride` apart);
    `bandwidth` (B/s) and `latency` (s per round) replace the link's figures (and those of
    the network phase of a hierarchical all-reduce), e.g. the seed's raw 50 GB/s and 10 us.
    With both given, params may be None (no placement; NEEDS_PLACEMENT algorithms need
    params). algo: a name, a code, None (the op's default: ring, or direct for all-to-all
    and send-recv) or 'auto' (the fastest that exists where the group lands, as
    `group_collective`); a named algorithm that does not exist there is an error saying why.
    `alternatives_s`: the time of every algorithm `auto` could pick there. Protocols [17]: `auto`
    prices each algorithm under the fastest protocol NCCL allows on the hardware (`proto_mask`
    None; LL and LL128 at NCCL's own latencies, whatever `latency` says, inside one NVLink
    domain only: Simple across domains, [19]); a named or default
    algorithm is priced under Simple (the alpha-beta formulas of the module docstring).
    """
    op = op_code(op)
    code = _algo_code(algo)
    how = "default" if code == -2 else "auto" if code == AUTO else "given"
    if code == -2:
        code = int(DEFAULT_ALGO[op])
    _check_report_args(op, code, ranks, stride, bandwidth, latency)
    needs_params = bandwidth is None or latency is None or code in NEEDS_PLACEMENT
    if needs_params and params is None:
        raise PlannerError("no hardware to take the link from", "give --hardware, or both --bandwidth and --latency")

    if params is not None and needs_params:
        B, a, kw, avail, link_info = _placed_link(op, code, ranks, stride, params, job_gpus, worst_case_pods)
    else:
        B, a, kw, avail, link_info = float(bandwidth), float(latency), {}, {}, dict(name="given")
    B, a = _given_link(B, a, kw, link_info, bandwidth, latency)

    if code == AUTO:
        kw["protocol"] = None  # NCCL's own protocol set
    alternatives: dict = {}
    if avail:
        for cand in AUTO_CANDIDATES:
            if AUTO_OK[op, cand] and bool(exists(cand, avail)):
                alternatives[ALGO_NAMES[cand]] = float(collective_time(op, size_bytes, ranks, B, a, cand, **kw).time_s)
    if code == AUTO:
        code = int(best_algorithm(op, size_bytes, ranks, B, a, **avail, **kw))
    if avail and ranks > 1 and not bool(exists(code, avail)):
        raise PlannerError(*_missing(code, ranks, params, link_info))
    cost = collective_time(op, size_bytes, ranks, B, a, code, **kw)
    if code in (HIERARCHICAL, TREE, NVLS_TREE, COLLNET) and kw:
        link_info["inter_bandwidth_Bps"] = kw.get("inter_bandwidth", B)
        link_info["inter_latency_s"] = kw.get("inter_latency", a)
    return _report_dict(op, code, how, ranks, stride, size_bytes, link_info, cost, alternatives)


def _check_report_args(op: int, code: int, ranks, stride, bandwidth, latency) -> None:
    """collective_report's PlannerError for a bad count, stride, link figure or algorithm."""
    if ranks < 1:
        raise PlannerError(f"--ranks must be at least 1, got {ranks}", "give the number of ranks in the group, e.g. --ranks 8")
    if stride < 1:
        raise PlannerError(f"--stride must be at least 1, got {stride}", "1 = consecutive ranks; 8 = one rank per 8-GPU node")
    if bandwidth is not None and not bandwidth > 0:
        raise PlannerError(f"--bandwidth must be > 0, got {bandwidth / 1e9:g} GB/s",
                           "give GB/s per rank per direction, e.g. --bandwidth 50, or leave it out for the hardware's")
    if latency is not None and not latency >= 0:
        raise PlannerError(f"--latency must be >= 0, got {latency * 1e6:g} us",
                           "give microseconds a round, e.g. --latency 10, or leave it out for the hardware's")
    if code != AUTO and not bool(supported(op, code)):
        ok = [ALGO_NAMES[a] for a in range(len(ALGO_CODES)) if SUPPORTED[op, a]]
        raise PlannerError(
            f"--algo {ALGO_NAMES[code]} does not exist for {OP_NAMES[op]} in this model",
            f"for {OP_NAMES[op]} use: {', '.join(ok)} (or auto)",
        )


def _placed_link(op: int, code: int, ranks, stride, params: CommParams, job_gpus, worst_case_pods: bool):
    """(bandwidth, latency, collective_time keywords, availability flags, link description)
    of the group placed with `group_link`, as plain Python numbers."""
    pattern = traffic_pattern(op, code if code != AUTO else int(DEFAULT_ALGO[op]))
    gl = group_link(ranks, stride, params, pattern=pattern, job_gpus=job_gpus, worst_case_pods=worst_case_pods)
    B, a = float(gl.bandwidth), float(gl.latency)
    kw = {k: (float(v) if not isinstance(v, bool) else v) for k, v in gl.algorithm_kwargs(params).items()}
    avail = {k: bool(v) for k, v in gl.availability(params, ranks).items()}
    link_info = dict(
        name=LINK_NAMES[int(gl.link)],
        hardware=params.name,
        members_per_nvlink_domain=int(gl.local_ranks),
        nvlink_domains=int(gl.domains),
        pods=int(gl.pods),
        crosses_pod=bool(gl.crosses_pod),
        nvlink_line_rate_Bps=params.nvlink_line_rate,
        nvlink_efficiency=params.nvlink_efficiency,
        nvlink_Bps=params.nvlink_bandwidth,
        nvlink_latency_s=params.nvlink_latency,
        network_line_rate_Bps=params.network_line_rate,
        network_efficiency=params.network_efficiency,
        network_Bps=params.network_bandwidth,
        network_latency_s=params.network_latency,
        pod_gpus=params.pod_gpus,
        oversubscription=params.oversubscription,
        worst_case_pods=bool(worst_case_pods),
        nvls=bool(params.nvls),
        nvls_algbw_Bps=params.nvls_algbw,
        sharp=bool(params.sharp),
        gpus_per_nic=params.gpus_per_nic,
        tree_hop_latency_s=params.tree_hop_latency,
    )
    return B, a, kw, avail, link_info


def _given_link(B: float, a: float, kw: dict, link_info: dict, bandwidth, latency) -> tuple[float, float]:
    """The link's (bandwidth, latency) with the given figures in their place (and in the
    network phase's keywords), recorded in link_info."""
    if bandwidth is not None:
        B = float(bandwidth)
        if kw:
            kw["inter_bandwidth"] = B
    if latency is not None:
        a = float(latency)
        if kw:
            kw["inter_latency"] = a
    link_info.update(bandwidth_Bps=B, latency_s=a, bandwidth_given=bandwidth is not None, latency_given=latency is not None)
    return B, a


def _report_dict(op: int, code: int, how: str, ranks, stride, size_bytes, link_info: dict,
                 cost: CollectiveCost, alternatives: dict) -> dict:
    """collective_report's answer: the collective, its link and its cost as plain numbers."""
    c = {k: float(v) for k, v in cost.as_dict().items() if k != "protocol"}
    return dict(
        op=OP_NAMES[op],
        algorithm=ALGO_NAMES[code],
        protocol={LL: "LL", LL128: "LL128", SIMPLE: "Simple"}[int(cost.protocol)],
        algorithm_from=how,
        ranks=int(ranks),
        stride=int(stride),
        size_bytes=float(size_bytes),
        link=link_info,
        bytes_sent_per_rank=c["bytes_sent_per_rank"],
        bytes_received_per_rank=c["bytes_received_per_rank"],
        sent_over_size=c["bytes_sent_per_rank"] / size_bytes if size_bytes > 0 else 0.0,
        rounds=c["rounds"],
        latency_s=c["latency_s"],
        bandwidth_s=c["bandwidth_s"],
        time_s=c["time_s"],
        algbw_Bps=c["algbw"],
        busbw_factor=float(busbw_factor(op, ranks)),
        busbw_Bps=c["busbw"],
        alternatives_s=alternatives,
    )


# Algorithms whose cost depends on where the group lands (NVLink domains, NICs, fabric).
NEEDS_PLACEMENT = (HIERARCHICAL, NVLS, NVLS_TREE, COLLNET, AUTO)


def _missing(code: int, ranks: int, params: CommParams, link_info: dict) -> tuple[str, str]:
    """(message, hint) for a named algorithm that does not exist for this group."""
    domains = link_info.get("nvlink_domains", 1)
    where = f"{ranks} ranks over {domains} NVLink domain(s) of {params.nvlink_domain} GPUs ({params.name})"
    if code == NVLS:
        return (f"NVLS needs the ranks inside one NVLink domain: {where}",
                "use --algo ring, tree, nvls-tree or hierarchical, or fewer ranks / a smaller --stride")
    if code == NVLS_TREE:
        why = "switches without NVLink SHARP (hardware nvls: false)" if not params.nvls else (
            "one NVLink domain" if domains <= 1 else "one rank per NVLink domain")
        return (f"NVLS-tree needs NVLink SHARP switches and two or more ranks in each of several NVLink domains: {where}, {why}",
                "use --algo ring or tree (or nvls inside one domain)")
    if code == COLLNET:
        why = "a fabric without in-switch reduction (fabric sharp: false)" if not params.sharp else "one NVLink domain"
        return (f"CollNet needs several NVLink domains on a fabric whose switches reduce (IB SHARP): {where}, {why}",
                "set fabric: sharp: true in a hardware YAML for a SHARP fabric, or use --algo ring or tree")
    return (f"PAT runs with one rank per NVLink domain only (NCCL: one GPU per node): {where}",
            "use --algo ring, or a --stride of at least the domain size")
