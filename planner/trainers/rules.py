"""Megatron-LM's start-up checks on an argument list, transcribed from the trainer's own code
at NVIDIA/Megatron-LM @d98e8a64 (2026-08-22): what `validate_args`, `TransformerConfig.
__post_init__`, `initialize_model_parallel`, the micro-batch calculator and the interleaved
schedule assert about the flags a launch script gives (the parallel sizes, the batch, the
pipeline split, the sharding modes, the environment they need). Each check reads Megatron's
own argument names and defaults, not the planner's plan, so running it on the scripts
`planner export --format megatron` writes tests the export against the trainer's rules
independently of the vectorized plan rules (planner/startup.py), which price and mask plans
in `fit`.

`megatron_errors(flags, world, env)` -> [(key, message)], empty when Megatron would start;
`megatron_script_errors(text)` reads a launch script first (planner/trainers/megatron.py's
parser: the torchrun counts give the world size, the launch line's environment as the reader evaluates the
script, ScriptWords.env, the environment).

Sources (file @d98e8a64, what is asserted):
  WORLD          megatron/training/arguments.py validate_args: world size % (tp pp cp) == 0
  EXPERT_GRID    megatron/core/parallel_state.py initialize_model_parallel: world % (etp ep pp)
                 == 0 ('world_size ... is not divisible by expert_tensor_model_pipeline_parallel size')
  TP_PP_DP_MAP   parallel_state.py: with order tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping) and pp > 1,
                 world / (etp ep pp) == world / (tp cp pp) ('When not using pp-last rank ordering, ...')
  HEADS          megatron/core/transformer/transformer_config.py __post_init__: heads % tp == 0;
                 query groups % tp == 0 or tp % query groups == 0
  CP_SEQ         arguments.py: seq_length % (2 cp) == 0 when cp > 1
  CP_A2A_HEADS   --cp-comm-type a2a with cp > 1: the query heads and the query groups (KV heads) per
                 TP rank divisible by cp (NVIDIA/TransformerEngine @4329ff84 context_parallel.py
                 AttnFuncWithCPAndQKVOA2A.forward l. 3951-3954, which Megatron runs); a2a+p2p: by the
                 first hierarchical size (the all-to-all group)
  CP_SLIDING_WINDOW  --window-size (not -1,0 / -1,-1) with cp > 1: --cp-comm-type a2a or all_gather
                 (NVIDIA/TransformerEngine @4329ff84 context_parallel.py attn_forward_func_with_cp
                 l. 4763-4769, which Megatron runs; transformer_engine.py l. 2163-2171 passes the window);
                 a per-layer list of several values is not checked
  HCP_SIZES      arguments.py l. 580-585: prod(--hierarchical-context-parallel-sizes) == cp, and the
                 sizes given with --cp-comm-type a2a+p2p
  MAX_POSITIONS  arguments.py: max_position_embeddings >= seq_length
  BATCH          megatron/core/num_microbatches_calculator.py: global batch % (micro x dp) == 0
  TP_OVERLAP     arguments.py: --tp-comm-overlap needs --sequence-parallel
  PARAM_GATHER   arguments.py l. 1024-1029: --overlap-param-gather needs the distributed optimizer,
                 Megatron-FSDP or --optimizer dist_muon, and --overlap-grad-reduce (the plan rule:
                 startup.MEGATRON_PARAM_GATHER, code 108)
  TORCH_FSDP2    arguments.py: --use-torch-fsdp2 with pp 1, ep 1, no distributed optimizer, no
                 gradient-accumulation fusion, --ckpt-format torch_dist|torch_dcp, untied
                 embeddings, CUDA_DEVICE_MAX_CONNECTIONS != 1
  MEGATRON_FSDP  arguments.py: --use-megatron-fsdp with --ckpt-format fsdp_dtensor and
                 CUDA_DEVICE_MAX_CONNECTIONS != 1; --data-parallel-sharding-strategy in
                 no_shard|optim|optim_grads|optim_grads_params; --ckpt-format fsdp_dtensor only
                 with Megatron-FSDP
  DISTOPT_INST   parallel_state.py: (dp cp) % --num-distributed-optimizer-instances == 0
  MAX_CONN       arguments.py: tp or cp > 1 before Blackwell, without FSDP or
                 --overlap-moe-expert-parallel-comm, needs CUDA_DEVICE_MAX_CONNECTIONS=1
  EXPERTS        arguments.py: --num-experts % --expert-model-parallel-size == 0
  MOE_SP         megatron/core/transformer/moe/moe_layer.py MoELayer.forward: training an MoE
                 model with tp > 1 raises without --sequence-parallel
  VPP_ARGS       arguments.py: at most one of --num-layers-per-virtual-pipeline-stage,
                 --num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout;
                 parallel_state.py: virtual stages need pp > 1
  SPLIT          transformer_config.py __post_init__ and transformer_block.py
                 get_num_layers_to_build: the layout excludes --decoder-first/last and
                 --account-for-*, which exclude each other; uneven first/last stages > 0, multiples
                 of vpp, the middle ranks equal and multiples of vpp; else (layers + counted ends)
                 % pp == 0 and the layers per rank % vpp == 0
  LAYOUT         megatron/core/transformer/pipeline_parallel_layer_layout.py: entries % pp == 0,
                 the embedding first and the loss last once each, num_layers decoder layers, the
                 MTP layers (validate_layer_layout)
  INTERLEAVED    megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_
                 interleaving: micro-batches M >= the group size (default pp), and M % pp == 0
  P2P_OVERLAP    arguments.py l. 1000-1009: virtual stages with --no-overlap-p2p-communication need
                 pp > 2
  MTP_POSITION   arguments.py l. 882-886: --mtp-num-layers > 0 with --position-embedding-type rope or
                 none (the default is learned_absolute, l. 2397)
  FP8_PARAMS     arguments.py l. 1095-1097: --fp8-param-gather needs the distributed optimizer,
                 --use-torch-fsdp2 or --use-megatron-fsdp
  DETERMINISTIC  training/determinism.py l. 24, 141-148 (from validate_args l. 1708-1711):
                 --deterministic-mode without --tp-comm-overlap and --cross-entropy-loss-fusion
  DETERMINISTIC_ENV  determinism.py l. 87-108: under --deterministic-mode, NCCL_ALGO's tokens among
                 Ring, CollnetDirect, CollnetChain, ^NVLS; NVTE_ALLOW_NONDETERMINISTIC_ALGO 0;
                 CUBLAS_WORKSPACE_CONFIG :4096:8 or :16:8 (each where the environment sets it)
  FP4            arguments.py l. 1100-1105: --fp4-format excludes --fp8-format; --fp4-param-gather
                 needs --fp4-format
  NVFP4_TOKENS   --fp4-format (NVFP4BlockScaling): Transformer Engine @4329ff84 (Megatron's TE 2.17.1)
                 pytorch/csrc/quantizer.cpp l. 1814-1815: each quantized input's rows, micro-batch x
                 seq / cp (/ tp under --sequence-parallel), divisible by 16 (planner/startup.py
                 MEGATRON_NVFP4_TOKENS, rule 64)
  FP8_ROWS       --fp8-format (any --fp8-recipe): Transformer Engine @4329ff84 pytorch/utils.py
                 assert_dim_for_fp8_exec l. 613-623: the same rows divisible by 8 (planner/startup.py
                 MEGATRON_FP8_ROWS, rule 69)
  MXFP8_ROWS     --fp8-format with --fp8-recipe mxfp8: TE @4329ff84 pytorch/csrc/quantizer.cpp
                 l. 1395-1397: the same rows divisible by 32 (planner/startup.py MEGATRON_MXFP8_ROWS, rule 70)
  FP8_WIDTHS     --fp8-format / --fp4-format: TE @4329ff84 assert_dim_for_fp8_exec and the MXFP8 / NVFP4
                 quantizers on each TE linear's widths per tp (the routed experts' per etp): hidden, attention
                 proj input and QKV out, MLA's up and down projections (q_lora_rank, kv_lora_rank + rope), the
                 dense, shared and routed experts' ffn (planner/startup.py MEGATRON_FP8_WIDTHS, rule 71)
  RECOMPUTE      arguments.py l. 1410-1428: --distribute-saved-activations needs tp > 1, full
                 recompute and a --recompute-method; selective recompute takes no method
  KV_CHANNELS    arguments.py l. 1331-1333: without --kv-channels the hidden size divides by the heads
  TORCH_DCP      arguments.py l. 1667-1672: --ckpt-format torch_dcp only with --use-torch-fsdp2, tp 1, pp 1
  CE_TE          arguments.py l. 1697-1702: --cross-entropy-loss-fusion with --cross-entropy-fusion-impl te
  MLA_GQA        arguments.py l. 1973-1974: --multi-latent-attention excludes --group-query-attention
  ATTN_LOCAL     arguments.py l. 436-437: --attention-backend local only with --spec local
  DEEPEP_GROUP   --moe-token-dispatcher-type flex with the DeepEP backend (--moe-flex-dispatcher-backend
                 deepep, its default, or --moe-enable-deepep) on an MoE model: the expert-TP x EP group
                 (token_dispatcher.py MoEFlexTokenDispatcher's tp_ep group) one of the sizes DeepEP's
                 config tables list, fused_a2a.py get_buffer l. 47-50 (deepseek-ai/DeepEP @94a9f8f
                 deep_ep/buffer.py l. 252, 280; planner/startup.py MEGATRON_DEEPEP_GROUP)
  HYBRIDEP_*     --moe-flex-dispatcher-backend hybridep (planner/startup.py MEGATRON_HYBRIDEP_*, deepseek-ai/DeepEP
                 @94a9f8f): the hidden size % 16 (config.cuh l. 89); with the job's GPUs per NVLink domain
                 (gpus_per_domain, which no launch script states: the caller's hardware) the expert-TP x
                 EP group, etp x ep consecutive ranks (parallel_state.py l. 885-895: the expert
                 RankGenerator's order keeps tp and ep innermost, cp 1; l. 1388 get_ranks('tp-ep')),
                 counted rank by rank in domains filled in order: divisible by each rank's piece
                 (hybrid_ep_buffer.py l. 74-76), experts per rank x piece % 4 (config.cuh l. 91), and
                 across domains 3 x tokens + 1 < 65,536 (config.cuh l. 18-50, tokens max(T, 512) padded
                 to 64); with the GPU's compute capability (capability) 9.0+ (TMA)
  DEEPEP_GPU     the DeepEP backend with the GPU's compute capability: 8.0+, and below 9.0 (no NVSHMEM)
                 max(1, group // 8) == 1 (DeepEP @567632d README l. 43-49, setup.py l. 57-66,
                 csrc/deep_ep.cpp l. 166-168; planner/startup.py MEGATRON_DEEPEP_GPU)
  (TORCH_FSDP2 also: l. 1046-1047, not with --fp16)
  MOE_BIAS_ETP   megatron/core/transformer/transformer_config.py __post_init__ l. 2612-2615: --num-experts
                 with linear biases (no --disable-bias-linear) needs --expert-tensor-parallel-size 1 (it defaults to tp)
  MOE_ACT_GROUPED transformer_config.py __post_init__ l. 1964-1967: under selective recompute,
                 moe_act in --recompute-modules needs --moe-grouped-gemm
  EXPERT_BIAS    transformer_config.py __post_init__ l. 2617-2625: --moe-router-enable-expert-bias needs
                 --moe-router-score-function sigmoid or sqrtsoftplus (the default is softmax)
  TOP1_PRE_SOFTMAX transformer_config.py __post_init__ l. 2661-2669: --moe-router-topk 1 with the softmax
                 score needs --moe-router-pre-softmax unless --moe-router-load-balancing-type sinkhorn
  MLA_ROPE_FUSION transformer_config.py MLATransformerConfig.__post_init__ l. 3345-3346: with
                 --multi-latent-attention the rope fusion (on unless --no-rope-fusion, and with rotary
                 position embeddings, arguments.py l. 1628-1629) needs --rope-type yarn (MLA's default,
                 l. 3306)
"""

from __future__ import annotations

import math
import re

from . import words_of

COMMIT = "NVIDIA/Megatron-LM @d98e8a64"
SOURCES = {
    "DETERMINISTIC": "megatron/training/determinism.py l. 24 ARG_VALUES_REQUIRED_FOR_DETERMINISM, apply_determinism_to_args "
                     "l. 141-148, from arguments.py validate_args l. 1708-1711",
    "DETERMINISTIC_ENV": "megatron/training/determinism.py apply_determinism_env l. 87-108 (ACCEPTED_NCCL_ALGO_TOKENS "
                         "l. 48, ACCEPTED_ENV_VAR_VALUES l. 60-63)",
    "WORLD": "megatron/training/arguments.py validate_args",
    "EXPERT_GRID": "megatron/core/parallel_state.py initialize_model_parallel",
    "TP_PP_DP_MAP": "megatron/core/parallel_state.py initialize_model_parallel",
    "HEADS": "megatron/core/transformer/transformer_config.py __post_init__",
    "CP_SEQ": "megatron/training/arguments.py validate_args",
    "CP_A2A_HEADS": "Transformer Engine @4329ff84 context_parallel.py AttnFuncWithCPAndQKVOA2A.forward (run by Megatron)",
    "HCP_SIZES": "megatron/training/arguments.py validate_args",
    "CP_SLIDING_WINDOW": "Transformer Engine @4329ff84 context_parallel.py attn_forward_func_with_cp l. 4763-4769 (run by Megatron)",
    "MAX_POSITIONS": "megatron/training/arguments.py validate_args",
    "BATCH": "megatron/core/num_microbatches_calculator.py",
    "TP_OVERLAP": "megatron/training/arguments.py validate_args",
    "PARAM_GATHER": "megatron/training/arguments.py validate_args l. 1024-1029",
    "TORCH_FSDP2": "megatron/training/arguments.py validate_args",
    "MEGATRON_FSDP": "megatron/training/arguments.py validate_args",
    "DISTOPT_INST": "megatron/core/parallel_state.py initialize_model_parallel",
    "MAX_CONN": "megatron/training/arguments.py validate_args",
    "EXPERTS": "megatron/training/arguments.py validate_args",
    "MOE_SP": "megatron/core/transformer/moe/moe_layer.py MoELayer.forward",
    "VPP_ARGS": "megatron/training/arguments.py validate_args; megatron/core/parallel_state.py",
    "SPLIT": "megatron/core/transformer/transformer_config.py __post_init__; transformer_block.py get_num_layers_to_build",
    "LAYOUT": "megatron/core/transformer/pipeline_parallel_layer_layout.py validate_layer_layout",
    "INTERLEAVED": "megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving",
    "P2P_OVERLAP": "megatron/training/arguments.py validate_args l. 1000-1009",
    "MTP_POSITION": "megatron/training/arguments.py validate_args l. 882-886",
    "FP8_PARAMS": "megatron/training/arguments.py validate_args l. 1095-1097",
    "FP4": "megatron/training/arguments.py validate_args l. 1100-1105",
    "NVFP4_TOKENS": "Transformer Engine @4329ff84 (TE 2.17.1, Megatron's pin) pytorch/csrc/quantizer.cpp "
                    "NVFP4Quantizer::create_tensor l. 1814-1815 ('First dim for NVFP4 must be divisible by 16')",
    "FP8_ROWS": "Transformer Engine @4329ff84 (TE 2.17.1, Megatron's pin) pytorch/utils.py assert_dim_for_fp8_exec "
                "l. 613-623 ('FP8 execution requires the product of all dimensions except the last to be divisible by 8')",
    "MXFP8_ROWS": "Transformer Engine @4329ff84 (TE 2.17.1, Megatron's pin) pytorch/csrc/quantizer.cpp "
                  "MXFP8Quantizer::create_tensor l. 1395-1397 ('MXFP8 requires tensor dims that are divisible by 32')",
    "FP8_WIDTHS": "Transformer Engine @4329ff84 (TE 2.17.1, Megatron's pin) pytorch/utils.py assert_dim_for_fp8_exec "
                  "l. 613-623 (an input's last dim % 16, a weight's out dim % 8), csrc/quantizer.cpp "
                  "MXFP8Quantizer::create_tensor l. 1395-1397 (% 32), NVFP4Quantizer::create_tensor l. 1814-1819 (% 16), "
                  "module/grouped_linear.py l. 208-221; megatron/core/transformer/multi_latent_attention.py l. 526-607 "
                  "(the duplicated down projections)",
    "RECOMPUTE": "megatron/training/arguments.py validate_args l. 1410-1428",
    "KV_CHANNELS": "megatron/training/arguments.py validate_args l. 1331-1333",
    "TORCH_DCP": "megatron/training/arguments.py validate_args l. 1667-1672",
    "CE_TE": "megatron/training/arguments.py validate_args l. 1697-1702",
    "MLA_GQA": "megatron/training/arguments.py validate_args l. 1973-1974",
    "ATTN_LOCAL": "megatron/training/arguments.py validate_args l. 436-437",
    "MOE_BIAS_ETP": "megatron/core/transformer/transformer_config.py __post_init__ l. 2612-2615",
    "DEEPEP_GROUP": "megatron/core/transformer/moe/fused_a2a.py get_buffer l. 47-50 (Buffer.get_dispatch_config(group.size()), "
                    "deepseek-ai/DeepEP @94a9f8f deep_ep/buffer.py l. 252, 280: 'Unsupported number of EP ranks')",
    "HYBRIDEP_DOMAIN": "megatron/core/parallel_state.py l. 1388 (the tp-ep group), deepseek-ai/DeepEP @94a9f8f "
                       "deep_ep/hybrid_ep_buffer.py HybridEPBuffer.__init__ l. 74-76",
    "HYBRIDEP_EXPERTS": "deepseek-ai/DeepEP @94a9f8f csrc/hybrid_ep/config.cuh BufferConfig::is_valid l. 84-95",
    "HYBRIDEP_TOKENS": "megatron/core/transformer/moe/fused_a2a.py HybridEPDispatch.forward l. 400-402, deepseek-ai/DeepEP "
                       "@94a9f8f csrc/hybrid_ep/config.cuh hybrid_ep_token_capacity_is_valid l. 18-50",
    "HYBRIDEP_GPU": "deepseek-ai/DeepEP @94a9f8f csrc/hybrid_ep/backend/hybrid_ep_backend.cuh (cp.async.bulk: sm_90)",
    "DEEPEP_GPU": "deepseek-ai/DeepEP @567632d README.md l. 43-49, setup.py l. 57-66, csrc/deep_ep.cpp l. 166-168",
    "MOE_ACT_GROUPED": "megatron/core/transformer/transformer_config.py __post_init__ l. 1964-1967",
    "EXPERT_BIAS": "megatron/core/transformer/transformer_config.py __post_init__ l. 2617-2625",
    "TOP1_PRE_SOFTMAX": "megatron/core/transformer/transformer_config.py __post_init__ l. 2661-2669",
    "MLA_ROPE_FUSION": "megatron/core/transformer/transformer_config.py MLATransformerConfig.__post_init__ l. 3345-3346",
}


def _i(flags: dict, name: str, default=None):
    v = flags.get(name, default)
    return v if v is None else int(v)


def layout_chunks(text: str) -> list[str]:
    """--pipeline-model-parallel-layout as one string of layer characters per model chunk
    (parse_str_to_list: commas cosmetic, '(..)*n' and 'x*n' repeat, '|' ends a chunk)."""
    s = text.replace(",", "")
    for pat in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pat, lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


def megatron_errors(flags: dict, world: int, env: dict | None = None, *, before_blackwell: bool = True,
                    gpus_per_domain: int | None = None, capability: tuple[int, int] | None = None) -> list[tuple[str, str]]:
    """The start-up checks Megatron-LM @d98e8a64 would fail on these arguments, [(key, message)].
    gpus_per_domain, capability: the hardware's GPUs per NVLink domain (as the job fills them) and
    compute capability, which no argument states; the checks that read them (HYBRIDEP_DOMAIN, _EXPERTS,
    _TOKENS, _GPU, DEEPEP_GPU) run only where the caller gives them."""
    env = env or {}
    out: list[tuple[str, str]] = []

    def bad(key: str, msg: str) -> None:
        out.append((key, f"{msg} ({COMMIT} {SOURCES[key]})"))

    tp, pp, cp = (_i(flags, f, 1) for f in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                            "--context-parallel-size"))
    ep = _i(flags, "--expert-model-parallel-size", 1)
    etp = _i(flags, "--expert-tensor-parallel-size", tp)
    L = _i(flags, "--num-layers")
    heads = _i(flags, "--num-attention-heads")
    groups = _i(flags, "--num-query-groups", 1) if "--group-query-attention" in flags else heads
    seq = _i(flags, "--seq-length")
    mbs = _i(flags, "--micro-batch-size", 1)
    fsdp2, mfsdp = "--use-torch-fsdp2" in flags, "--use-megatron-fsdp" in flags
    distopt = "--use-distributed-optimizer" in flags or mfsdp  # Megatron-FSDP v1 turns the distributed optimizer on
    ckpt = flags.get("--ckpt-format", "torch_dist")
    conn = env.get("CUDA_DEVICE_MAX_CONNECTIONS")

    if world % (tp * pp * cp):
        bad("WORLD", f"world size {world} is not divisible by tp x pp x cp = {tp * pp * cp}")
        return out  # the other sizes are not defined
    dp = world // (tp * pp * cp)
    if world % (etp * ep * pp):
        bad("EXPERT_GRID", f"world size {world} is not divisible by etp x ep x pp = {etp * ep * pp}")
    elif "--use-tp-pp-dp-mapping" in flags and pp > 1 and world // (etp * ep * pp) != dp:
        bad("TP_PP_DP_MAP", f"--use-tp-pp-dp-mapping with pp {pp}: the expert data-parallel size {world // (etp * ep * pp)} "
                            f"differs from the data-parallel size {dp}")
    if heads is not None and heads % tp:
        bad("HEADS", f"--num-attention-heads {heads} is not divisible by tp {tp}")
    if groups is not None and groups % tp and tp % groups:
        bad("HEADS", f"--num-query-groups {groups} and tp {tp} do not divide one another")
    if cp > 1 and seq is not None and seq % (2 * cp):
        bad("CP_SEQ", f"--seq-length {seq} is not a multiple of 2 x cp = {2 * cp}")
    types = words_of(flags.get("--cp-comm-type"))
    hcp = [int(w) for w in words_of(flags.get("--hierarchical-context-parallel-sizes"), strip="'\"[]", commas=True)
           if w.isdigit()]
    if hcp and math.prod(hcp) != cp:
        bad("HCP_SIZES", f"--hierarchical-context-parallel-sizes {' '.join(map(str, hcp))}: the product is not cp {cp}")
    if cp > 1 and "a2a+p2p" in types and not hcp:
        bad("HCP_SIZES", "--cp-comm-type a2a+p2p without --hierarchical-context-parallel-sizes")
    split = cp if "a2a" in types else (hcp[0] if "a2a+p2p" in types and hcp else 1)
    if cp > 1 and heads is not None and split > 1:
        kv = heads if "--multi-latent-attention" in flags or groups is None else groups
        if (heads // tp) % split or max(kv // tp, 1) % split:
            bad("CP_A2A_HEADS", f"--cp-comm-type {' '.join(types)}: {heads // tp} query heads and {max(kv // tp, 1)} KV "
                                f"heads per TP rank are not both divisible by the {split} ranks the heads are split over")
    window = [w.strip() for w in str(flags.get("--window-size") or "").strip("'\"()[] ").split(",")]
    if cp > 1 and "--window-size" in flags and window not in (["-1", "0"], ["-1", "-1"]) and len(set(types)) <= 1:
        kind = types[0] if types else "p2p"  # one value for every layer (a mixed per-layer list is not checked)
        if kind == "a2a+p2p" and len(hcp) == 2 and 1 in hcp:  # TE: a one-rank level runs the other variant
            kind = "p2p" if hcp[0] == 1 else "a2a"
        if kind not in ("a2a", "all_gather"):
            bad("CP_SLIDING_WINDOW", f"--window-size {flags['--window-size']} with cp {cp} and --cp-comm-type {kind}: "
                                     "Transformer Engine runs sliding-window attention under CP only with a2a or all_gather")
    maxpos = _i(flags, "--max-position-embeddings")
    if maxpos is not None and seq is not None and maxpos < seq:
        bad("MAX_POSITIONS", f"--max-position-embeddings {maxpos} < --seq-length {seq}")
    gbs = _i(flags, "--global-batch-size", mbs * dp)
    if gbs % (mbs * dp):
        bad("BATCH", f"--global-batch-size {gbs} is not divisible by micro-batch {mbs} x dp {dp}")
    sp = "--sequence-parallel" in flags and tp > 1  # Megatron turns SP off with tp 1
    if "--tp-comm-overlap" in flags and not sp:
        bad("TP_OVERLAP", "--tp-comm-overlap without sequence parallelism")
    if "--overlap-param-gather" in flags:
        if not distopt and flags.get("--optimizer") != "dist_muon":  # l. 1025-1027: dist_muon passes (before l. 1727)
            bad("PARAM_GATHER", "--overlap-param-gather without the distributed optimizer, Megatron-FSDP or dist_muon")
        if "--overlap-grad-reduce" not in flags:
            bad("PARAM_GATHER", "--overlap-param-gather without --overlap-grad-reduce")
    if fsdp2:
        why = [w for w, broken in (
            ("pp > 1", pp > 1), ("ep > 1", ep > 1), ("--use-distributed-optimizer", "--use-distributed-optimizer" in flags),
            ("gradient-accumulation fusion on", "--no-gradient-accumulation-fusion" not in flags),
            (f"--ckpt-format {ckpt}", ckpt not in ("torch_dist", "torch_dcp")),
            ("tied embeddings", "--untie-embeddings-and-output-weights" not in flags), ("--fp16", "--fp16" in flags),
            ("CUDA_DEVICE_MAX_CONNECTIONS=1", conn == "1")) if broken]
        if why:
            bad("TORCH_FSDP2", f"--use-torch-fsdp2 with {', '.join(why)}")
    if mfsdp:
        strategy = flags.get("--data-parallel-sharding-strategy", "optim_grads_params")
        if strategy not in ("no_shard", "optim", "optim_grads", "optim_grads_params"):
            bad("MEGATRON_FSDP", f"--data-parallel-sharding-strategy {strategy}")
        if ckpt != "fsdp_dtensor":
            bad("MEGATRON_FSDP", f"--use-megatron-fsdp with --ckpt-format {ckpt} (needs fsdp_dtensor)")
        if conn == "1":
            bad("MEGATRON_FSDP", "--use-megatron-fsdp with CUDA_DEVICE_MAX_CONNECTIONS=1")
    elif ckpt == "fsdp_dtensor":
        bad("MEGATRON_FSDP", "--ckpt-format fsdp_dtensor without --use-megatron-fsdp")
    inst = _i(flags, "--num-distributed-optimizer-instances", 1)
    if (dp * cp) % inst:
        bad("DISTOPT_INST", f"dp x cp = {dp * cp} is not divisible by --num-distributed-optimizer-instances {inst}")
    if before_blackwell and (tp > 1 or cp > 1) and not (fsdp2 or mfsdp) \
            and "--overlap-moe-expert-parallel-comm" not in flags and conn != "1":
        bad("MAX_CONN", f"tp {tp} / cp {cp} without FSDP needs CUDA_DEVICE_MAX_CONNECTIONS=1 (got {conn})")
    if ep > 1:
        experts = _i(flags, "--num-experts")
        if experts is None or experts % ep:
            bad("EXPERTS", f"--num-experts {experts} is not a multiple of --expert-model-parallel-size {ep}")
    if "--fp4-format" in flags and seq is not None and (mbs * seq) % (cp * (tp if sp else 1) * 16):
        rows = f"{mbs} x {seq} / cp {cp}" + (f" / tp {tp}" if sp else "")
        bad("NVFP4_TOKENS", f"--fp4-format with micro-batch x seq / cp{' / tp (SP)' if sp else ''} = {rows} rows, not a "
                            "multiple of 16")
    # --fp8-recipe's default is delayed (transformer_config.py @d98e8a64 l. 594-596)
    for key, block, on in (("FP8_ROWS", 8, "--fp8-format" in flags),
                           ("MXFP8_ROWS", 32, "--fp8-format" in flags and flags.get("--fp8-recipe") == "mxfp8")):
        if on and seq is not None and (mbs * seq) % (cp * (tp if sp else 1) * block):
            rows = f"{mbs} x {seq} / cp {cp}" + (f" / tp {tp}" if sp else "")
            bad(key, f"--fp8-format{' --fp8-recipe mxfp8' if block == 32 else ''} with micro-batch x seq / cp"
                     f"{' / tp (SP)' if sp else ''} = {rows} rows, not a multiple of {block}")
    out += _fp8_width_errors(flags, tp, etp, heads, groups)
    if _i(flags, "--num-experts") is not None and tp > 1 and not sp:
        bad("MOE_SP", f"an MoE model (--num-experts) with tp {tp} needs --sequence-parallel in training")
    # linear biases are the default (add_bias_linear True, transformer_config.py l. 212): on without --disable-bias-linear
    # (before 2026-12-07 this read --add-bias-linear, a flag Megatron-LM never defined)
    if _i(flags, "--num-experts") is not None and "--disable-bias-linear" not in flags and etp != 1:
        bad("MOE_BIAS_ETP", f"an MoE model (--num-experts) with linear biases (no --disable-bias-linear) and expert TP "
                            f"{etp} (needs 1)")
    out += _option_errors(flags, tp, pp, heads, fsdp2, distopt, ckpt)
    if "--deterministic-mode" in flags:
        out += _deterministic_errors(flags, env)
    out += _dispatcher_errors(flags, ep, etp)
    out += _hybridep_errors(flags, world, ep, etp, tokens=-(-mbs * (seq or 0) // cp) // (tp if sp else 1),
                            gpus_per_domain=gpus_per_domain, capability=capability)
    if capability is not None:
        out += _deepep_gpu_errors(flags, ep, etp, capability)
    out += _split_errors(flags, world, pp, dp, mbs, gbs, L)
    return out


def _fp8_widths(flags, heads, groups) -> list[tuple[str, int, str, str]]:
    """(name, width, split 'tp' / 'etp' / '', role 'in' / 'out' / 'grouped') of the TE-quantized GEMM operands the
    script's model flags define (FP8_WIDTHS): the hidden size; attention's proj input heads x kv_channels and QKV out
    (heads + 2 groups (+ heads with --attention-output-gate)) x kv_channels, or under --multi-latent-attention
    (arguments.py l. 3548-3556 defaults: --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64,
    --v-head-dim 128) the proj input heads x v, q_up (or q_proj) out heads x (qk + rope), kv_up out heads x (qk + v),
    and the duplicated down projections' out q_lora_rank and kv_lora_rank + rope and the up projections' inputs
    q_lora_rank and kv_lora_rank; the dense MLP's --ffn-hidden-size (default 4 h) unless every layer is MoE, the shared
    experts' --moe-shared-expert-intermediate-size, the routed experts' --moe-ffn-hidden-size over etp."""
    h = _i(flags, "--hidden-size")
    if h is None or heads is None:
        return []
    out = [("hidden_size", h, "", "in")]
    if "--multi-latent-attention" in flags:
        q, kv = _i(flags, "--q-lora-rank"), _i(flags, "--kv-lora-rank", 32)
        nope, rope, v = _i(flags, "--qk-head-dim", 128), _i(flags, "--qk-pos-emb-head-dim", 64), _i(flags, "--v-head-dim", 128)
        out += [("attention proj input heads x v_head_dim", heads * v, "tp", "in"),
                ("MLA q_up out heads x qk_head_dim", heads * (nope + rope), "tp", "out"),
                ("MLA kv_up out heads x (qk_nope + v_head_dim)", heads * (nope + v), "tp", "out")]
        if q is not None:
            out += [("MLA q_down out q_lora_rank", q, "", "out"), ("MLA q_up input q_lora_rank", q, "", "in")]
        out += [("MLA kv_down out kv_lora_rank + qk_rope_head_dim", kv + rope, "", "out"),
                ("MLA kv_up input kv_lora_rank", kv, "", "in")]
    else:
        d = _i(flags, "--kv-channels", h // heads)
        gate = heads if "--attention-output-gate" in flags else 0
        out += [("attention proj input heads x head_dim", heads * d, "tp", "in"),
                ("QKV out (heads + 2 kv_heads) x head_dim", (heads + gate + 2 * groups) * d, "tp", "out")]
    ffn, experts = _i(flags, "--ffn-hidden-size", 4 * h), _i(flags, "--num-experts")
    if experts is None or flags.get("--moe-layer-freq", "1") != "1":
        out.append(("ffn_hidden_size", ffn, "tp", "in"))
    if experts is not None:
        if _i(flags, "--moe-shared-expert-intermediate-size"):
            out.append(("shared experts' ffn", _i(flags, "--moe-shared-expert-intermediate-size"), "tp", "in"))
        out.append(("expert ffn", _i(flags, "--moe-ffn-hidden-size", ffn), "etp", "grouped"))
    return out


def _fp8_width_errors(flags, tp, etp, heads, groups) -> list[tuple[str, str]]:
    """FP8_WIDTHS (planner/startup.py MEGATRON_FP8_WIDTHS, rule 71, on a script): --fp8-format checks an input's last
    dim % 16 and a weight's out dim % 8 (TE utils.py assert_dim_for_fp8_exec), --fp8-recipe mxfp8 every dim % 32 (the
    routed experts' grouped weights too), --fp4-format every dim % 16 (NVFP4Quantizer), each width over its split."""
    fp8, fp4 = "--fp8-format" in flags, "--fp4-format" in flags
    if not (fp8 or fp4):
        return []
    q = 32 if fp8 and flags.get("--fp8-recipe") == "mxfp8" else 16 if fp4 else 0
    blocks = {"in": max(16, q), "out": max(8, q), "grouped": q}
    msgs = []
    for name, w, axis, role in _fp8_widths(flags, heads, groups):
        split = tp if axis == "tp" else etp if axis == "etp" else 1
        blk = blocks[role]
        if blk and w % (split * blk):
            msgs.append(f"{name} {w}" + (f" / {axis} {split}" if axis else "") + f" not a multiple of {blk}")
    if not msgs:
        return []
    return [("FP8_WIDTHS", f"{'--fp4-format' if fp4 else '--fp8-format'}"
                           f"{' --fp8-recipe mxfp8' if q == 32 else ''}: {'; '.join(msgs)} ({COMMIT} {SOURCES['FP8_WIDTHS']})")]


# determinism.py @d98e8a64 l. 48: the NCCL_ALGO tokens accepted under --deterministic-mode; l. 60-63: the exact values
DETERMINISTIC_NCCL_ALGOS = ("Ring", "CollnetDirect", "CollnetChain", "^NVLS")
DETERMINISTIC_ENV_VALUES = {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": ("0",), "CUBLAS_WORKSPACE_CONFIG": (":4096:8", ":16:8")}


def _deterministic_errors(flags, env) -> list[tuple[str, str]]:
    """--deterministic-mode's checks (DETERMINISTIC, DETERMINISTIC_ENV): the options it requires off
    (--tp-comm-overlap, --cross-entropy-loss-fusion) and the environment it accepts (an unset variable is fine:
    it sets the default, l. 114-116)."""
    out: list[tuple[str, str]] = []

    def bad(key, msg):
        out.append((key, f"{msg} ({COMMIT} {SOURCES[key]})"))

    for f in ("--tp-comm-overlap", "--cross-entropy-loss-fusion"):
        if f in flags:
            bad("DETERMINISTIC", f"--deterministic-mode with {f}")
    algo = env.get("NCCL_ALGO")
    if algo is not None:
        tokens = [t.strip() for t in str(algo).split(",") if t.strip()]
        if not tokens or any(t not in DETERMINISTIC_NCCL_ALGOS for t in tokens):
            bad("DETERMINISTIC_ENV", f"--deterministic-mode with NCCL_ALGO={algo} (each token one of "
                                     f"{', '.join(DETERMINISTIC_NCCL_ALGOS)})")
    for name, accepted in DETERMINISTIC_ENV_VALUES.items():
        if env.get(name) is not None and str(env[name]) not in accepted:
            bad("DETERMINISTIC_ENV", f"--deterministic-mode with {name}={env[name]} (one of {', '.join(accepted)})")
    return out


def _option_errors(flags, tp, pp, heads, fsdp2, distopt, ckpt) -> list[tuple[str, str]]:
    """validate_args' checks of single options against the plan (MTP_POSITION .. MLA_GQA)."""
    out: list[tuple[str, str]] = []

    def bad(key, msg):
        out.append((key, f"{msg} ({COMMIT} {SOURCES[key]})"))

    pos = flags.get("--position-embedding-type", "learned_absolute")
    if (_i(flags, "--mtp-num-layers", 0) or 0) > 0 and pos not in ("rope", "none"):
        bad("MTP_POSITION", f"--mtp-num-layers with --position-embedding-type {pos}")
    if "--fp8-param-gather" in flags and not (distopt or fsdp2):
        bad("FP8_PARAMS", "--fp8-param-gather without the distributed optimizer, --use-torch-fsdp2 or --use-megatron-fsdp")
    if "--fp4-format" in flags and "--fp8-format" in flags:
        bad("FP4", "--fp4-format with --fp8-format")
    if "--fp4-param-gather" in flags and "--fp4-format" not in flags:
        bad("FP4", "--fp4-param-gather without --fp4-format")
    granularity = flags.get("--recompute-granularity", "selective" if "--recompute-activations" in flags else None)
    if "--distribute-saved-activations" in flags and (tp <= 1 or granularity != "full" or "--recompute-method" not in flags):
        bad("RECOMPUTE", "--distribute-saved-activations needs tp > 1, --recompute-granularity full and --recompute-method")
    if granularity == "selective" and "--recompute-method" in flags:
        bad("RECOMPUTE", "--recompute-method with selective recompute")
    hidden = _i(flags, "--hidden-size")
    if "--kv-channels" not in flags and hidden is not None and heads and hidden % heads:
        bad("KV_CHANNELS", f"--hidden-size {hidden} is not divisible by --num-attention-heads {heads} (no --kv-channels)")
    if ckpt == "torch_dcp" and (not fsdp2 or tp > 1 or pp > 1):
        bad("TORCH_DCP", f"--ckpt-format torch_dcp needs --use-torch-fsdp2 with tp 1 and pp 1 (tp {tp}, pp {pp})")
    if "--cross-entropy-loss-fusion" in flags and flags.get("--cross-entropy-fusion-impl", "native") == "te":
        bad("CE_TE", "--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te")
    if "--multi-latent-attention" in flags and "--group-query-attention" in flags:
        bad("MLA_GQA", "--multi-latent-attention with --group-query-attention")
    if flags.get("--attention-backend") == "local" and words_of(flags.get("--spec"))[:1] != ["local"]:
        bad("ATTN_LOCAL", "--attention-backend local without --spec local")
    if granularity == "selective" and "moe_act" in words_of(flags.get("--recompute-modules")) and "--moe-grouped-gemm" not in flags:
        bad("MOE_ACT_GROUPED", "--recompute-modules moe_act under selective recompute without --moe-grouped-gemm")
    score = flags.get("--moe-router-score-function", "softmax")
    if "--moe-router-enable-expert-bias" in flags and score not in ("sigmoid", "sqrtsoftplus"):
        bad("EXPERT_BIAS", f"--moe-router-enable-expert-bias with --moe-router-score-function {score}")
    balancing = words_of(flags.get("--moe-router-load-balancing-type")) or ["aux_loss"]
    if _i(flags, "--num-experts") is not None and _i(flags, "--moe-router-topk", 2) == 1 and score == "softmax" \
            and "--moe-router-pre-softmax" not in flags and "sinkhorn" not in balancing:
        bad("TOP1_PRE_SOFTMAX", "--moe-router-topk 1 with the softmax score without --moe-router-pre-softmax")
    rope_on = "--no-rope-fusion" not in flags and flags.get("--position-embedding-type", "learned_absolute") == "rope"
    if "--multi-latent-attention" in flags and rope_on and (flags.get("--rope-type") or "yarn") != "yarn":
        bad("MLA_ROPE_FUSION", f"--multi-latent-attention with the rope fusion on and --rope-type {flags.get('--rope-type')}")
    return out


def _dispatcher_errors(flags, ep, etp) -> list[tuple[str, str]]:
    """DEEPEP_GROUP: the flex dispatcher's DeepEP Buffer over etp x ep ranks, at a size DeepEP's
    config tables list (a group of one rank: no dispatch, left to MoEFlexTokenDispatcher's own assert)."""
    from ..startup import DEEPEP_GROUP_SIZES

    deepep = "--moe-enable-deepep" in flags or (flags.get("--moe-token-dispatcher-type") == "flex"
                                               and (flags.get("--moe-flex-dispatcher-backend") or "deepep") == "deepep")
    group = etp * ep
    if not deepep or _i(flags, "--num-experts") is None or group <= 1 or group in DEEPEP_GROUP_SIZES:
        return []
    return [("DEEPEP_GROUP", f"DeepEP's Buffer over etp x ep = {group} ranks: its config tables list "
                             f"{', '.join(map(str, DEEPEP_GROUP_SIZES))} ({COMMIT} {SOURCES['DEEPEP_GROUP']})")]


def _flex_backend(flags) -> str | None:
    """The flex dispatcher's backend (deepep, its default, or hybridep), None for another dispatcher."""
    if "--moe-enable-deepep" in flags:
        return "deepep"
    if flags.get("--moe-token-dispatcher-type") != "flex":
        return None
    return flags.get("--moe-flex-dispatcher-backend") or "deepep"


def _hybridep_errors(flags, world, ep, etp, *, tokens, gpus_per_domain, capability) -> list[tuple[str, str]]:
    """HYBRIDEP_*: Hybrid-EP's HybridEPBuffer over the etp x ep consecutive ranks (module docstring)."""
    experts, hidden = _i(flags, "--num-experts"), _i(flags, "--hidden-size")
    group = etp * ep
    if _flex_backend(flags) != "hybridep" or experts is None or group <= 1:
        return []
    out: list[tuple[str, str]] = []

    def bad(key, msg):
        out.append((key, f"{msg} ({COMMIT} {SOURCES[key]})"))

    if capability is not None and tuple(capability) < (9, 0):
        bad("HYBRIDEP_GPU", f"Hybrid-EP on compute capability {capability[0]}.{capability[1]} (needs 9.0+)")
    if hidden is not None and hidden % 16:
        bad("HYBRIDEP_EXPERTS", f"--hidden-size {hidden} is not a multiple of 16")
    if gpus_per_domain is None:
        return out
    count: dict[tuple[int, int], int] = {}
    for r in range(world):  # each rank's group (a block of `group` ranks) and NVLink domain
        count[(r // group, r // gpus_per_domain)] = count.get((r // group, r // gpus_per_domain), 0) + 1
    pieces = set(count.values())
    local = experts // ep
    if any(group % n for n in pieces):
        bad("HYBRIDEP_DOMAIN", f"etp x ep = {group} ranks meet {sorted(pieces)} of their group in an NVLink domain of "
                               f"{gpus_per_domain}: not all divide {group}")
    elif any(local * n % 4 for n in pieces):
        bad("HYBRIDEP_EXPERTS", f"{local} experts per rank x {sorted(pieces)} ranks per NVLink domain: not all "
                                "multiples of 4")
    padded = -(-max(tokens, 512) // 64) * 64
    if min(pieces) < group and 3 * padded + 1 >= 65536:
        bad("HYBRIDEP_TOKENS", f"{tokens} tokens per rank (padded {padded}) across NVLink domains: 3 x {padded} + 1 >= "
                               "65,536")
    return out


def _deepep_gpu_errors(flags, ep, etp, capability) -> list[tuple[str, str]]:
    """DEEPEP_GPU: DeepEP's Buffer over etp x ep ranks on a GPU of this compute capability."""
    group = etp * ep
    if _flex_backend(flags) != "deepep" or _i(flags, "--num-experts") is None or group <= 1:
        return []
    cc = tuple(capability)
    if cc < (8, 0) or (cc < (9, 0) and max(1, group // 8) > 1):
        return [("DEEPEP_GPU", f"DeepEP over etp x ep = {group} ranks on compute capability {cc[0]}.{cc[1]} (8.0+, and "
                               f"within 8 ranks below 9.0) ({COMMIT} {SOURCES['DEEPEP_GPU']})")]
    return []


def _split_errors(flags, world, pp, dp, mbs, gbs, L) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def bad(key, msg):
        out.append((key, f"{msg} ({COMMIT} {SOURCES[key]})"))

    layout = flags.get("--pipeline-model-parallel-layout")
    lpv, vps = _i(flags, "--num-layers-per-virtual-pipeline-stage"), _i(flags, "--num-virtual-stages-per-pipeline-rank")
    if sum(x is not None for x in (lpv, vps, layout)) > 1:
        bad("VPP_ARGS", "more than one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, "
                        "--pipeline-model-parallel-layout")
        return out
    first, last = _i(flags, "--decoder-first-pipeline-num-layers"), _i(flags, "--decoder-last-pipeline-num-layers")
    e = "--account-for-embedding-in-pipeline-split" in flags
    l_ = "--account-for-loss-in-pipeline-split" in flags
    vpp = 1
    if layout is not None:
        chunks = layout_chunks(str(layout))
        if len(chunks) % pp:
            bad("LAYOUT", f"{len(chunks)} layout entries are not divisible by pp {pp}")
            return out
        vpp = len(chunks) // pp
        if first is not None or last is not None or e or l_:
            bad("SPLIT", "--pipeline-model-parallel-layout with --decoder-first/last-pipeline-num-layers or --account-for-*")
        flat = "".join(chunks)
        mtp = _i(flags, "--mtp-num-layers", 0) or 0
        if set(flat) - set("ELtm"):
            bad("LAYOUT", f"unknown layer characters {sorted(set(flat) - set('ELtm'))}")
        elif not (flat[:1] == "E" and flat[-1:] == "L" and flat.count("E") == 1 and flat.count("L") == 1):
            bad("LAYOUT", "the embedding must be the first and the loss the last layer, once each")
        elif L is not None and flat.count("t") != L:
            bad("LAYOUT", f"{flat.count('t')} decoder layers in the layout, --num-layers {L}")
        elif flat.count("m") != mtp or ("m" in flat and "t" in flat[flat.index("m"):]):
            bad("LAYOUT", f"{flat.count('m')} MTP layers in the layout (after every decoder layer), --mtp-num-layers {mtp}")
    else:
        if lpv is not None:
            units = (L or 0) + e + l_
            if units % pp or (units // pp) % lpv:
                bad("SPLIT", f"--num-layers-per-virtual-pipeline-stage {lpv} does not divide the {units} layers per pp {pp}")
                return out
            vpp = units // pp // lpv
        elif vps is not None:
            vpp = vps
        if vpp > 1 and pp == 1:
            bad("VPP_ARGS", "virtual pipeline stages with pp 1")
        if pp > 1 and L is not None:
            if first is not None or last is not None:
                if e or l_:
                    bad("SPLIT", "--decoder-first/last-pipeline-num-layers with --account-for-*-in-pipeline-split")
                rest, ranks = L, pp
                for n in (first, last):
                    if n is not None:
                        if n <= 0 or n % vpp:
                            bad("SPLIT", f"first/last stage layers {n}: must be > 0 and a multiple of vpp {vpp}")
                        rest, ranks = rest - n, ranks - 1
                if bool(rest) != bool(ranks) or (ranks and (rest % ranks or (rest // ranks) % vpp)):
                    bad("SPLIT", f"{rest} middle layers on {ranks} middle ranks: not equal multiples of vpp {vpp}")
            else:
                units = L + e + l_
                if units % pp or (units // pp) % vpp:
                    bad("SPLIT", f"{units} layers (with the counted ends) are not pp {pp} x vpp {vpp} equal chunks")
    if vpp > 1 and "--no-overlap-p2p-communication" in flags and pp <= 2:
        bad("P2P_OVERLAP", f"the interleaved schedule (vpp {vpp}) with --no-overlap-p2p-communication on pp {pp}: pp must "
                           "be > 2")
    if vpp > 1 and pp > 1:
        m = gbs // (mbs * dp) if mbs * dp else 0
        group = _i(flags, "--microbatch-group-size-per-virtual-pipeline-stage", pp)
        if group > m or group < pp or 0 < m % group < pp:
            bad("INTERLEAVED", f"{m} micro-batches with groups of {group} on pp {pp}")
    return out


def megatron_script_errors(text: str, where: str = "", *, gpus_per_domain: int | None = None,
                           capability: tuple[int, int] | None = None) -> list[tuple[str, str]]:
    """megatron_errors for a launch script: its torchrun line's arguments and GPU count, and
    the environment that line runs in as the reader evaluates the script (ScriptWords.env: the names exported
    when the launch line runs, `export -n` / `declare +x` / `unset` taking an export back, exports in constant `if`
    branches only where the branch is taken, `NCCL_ALGO=... torchrun`) (gpus_per_domain, capability: the hardware's,
    as megatron_errors takes them). A script the reader cannot split (an unbalanced quote) or without the
    launcher's counts is bad input (PlannerError), as the Megatron reader refuses it."""
    from ..errors import PlannerError
    from .megatron import _launcher_gpus, parse_flags, read_script_words

    split = read_script_words(None, text, where, "")
    launch, words = split.launch, split.words
    flags, _ = parse_flags(words, where)
    # the launch line's environment as the reader evaluates it, the one the Megatron reader's job takes
    # (read_nccl_algo, _exported_cublas): no `export NAME=value` text match, which counted an export taken back or in
    # a branch not taken (tests/test_megatron_script_shell.py)
    env = dict(split.env)
    world = _launcher_gpus(list(launch), where)
    if world is None:
        raise PlannerError(f"{where}no torchrun --nproc_per_node/--nnodes to give the world size",
                           "give the launch line torchrun's --nproc_per_node and --nnodes")
    return megatron_errors(flags, world, env, gpus_per_domain=gpus_per_domain, capability=capability)


__all__ = ["megatron_errors", "megatron_script_errors", "layout_chunks", "SOURCES", "COMMIT"]
