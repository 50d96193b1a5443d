"""FLOPs of a training step; GEMM shapes and rates (measured rates when a profile has
them); attention and memory-bound rates. Units: FLOPs (floating-point operations), per
token or total; seconds; FLOP/s.

References
[1] Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1: training costs
    about 6N FLOPs per token (2N forward, 4N backward). The seed (sec. 1.1) and the Llama 3
    paper (3.8e25 = 6 x 405e9 x 15.6e12) use N = all parameters, embeddings included.
[2] Chowdhery et al. 2022, "PaLM", Appendix B: model FLOPs per token 6N + 12*L*H*Q*T
    (L layers, H heads, Q head dim, T sequence length), attention counted non-causal.
[3] Korthikanti et al. 2022, sec. 5: full recompute repeats the forward pass (8N, HFU);
    selective recompute repeats only the attention core (QK^T and AV: 4*L*H*Q*T forward).
[4] Chowdhery et al. 2022 sec. 4.1 / Appendix B: MFU counts model FLOPs only; HFU counts
    the recomputed FLOPs too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

import numpy as np

from .efficiencies import HBM_EFFICIENCY  # noqa: F401  (re-exported: compute.HBM_EFFICIENCY)
from .errors import PlannerError
from .layers import layer_list
from .layers.common import GemmShape, shapes
from .params import count_params
from .plan import FP8, NVFP4, PRECISION_CODES, RC_FULL, RC_SELECTIVE
from .power import power_rate_fraction
if TYPE_CHECKING:  # annotations only: the profile's pydantic models load with a profile (planner/knobs.py)
    from .profile import GemmCalibration, GemmRow
from .schema import ModelSpec
from .terms import Terms


def _core_flops(model: ModelSpec, seq, causal: bool, selective_only: bool = False, dense_windows: bool = False,
                kernels: bool = False, cp=1.0):
    """Model FLOPs per token of the layers' cores (attention, scans), forward and backward:
    each kind's module (planner/layers/: 12 a d x keys for attention [2], the state-space and
    linear-attention scans), times its layer count, and the multi-token-prediction layers.
    selective_only: the cores selective recompute re-runs (attention). dense_windows (counted
    causal, what the kernels run): a windowed layer as the stack's dense mask runs it, the
    whole square (layers/attention.py [11], stack windowed_attention). kernels (counted causal, what the kernels
    run: hardware FLOPs): a padded chunked layer's last chunk whole (layers/attention.py [13], stack
    chunked_attention.pads_last_chunk); the model-FLOP convention counts its real part. cp: the plans' CP degree
    (broadcast against seq), which decides whether a chunked layer of a stack that chunks by the CP rank's sequence
    runs chunked or global (layers/attention.py [14], stack chunked_attention.cp_local_sequence)."""
    ll = layer_list(model)
    seq = np.asarray(seq, dtype=np.float64)
    counts = ll.totals.copy()
    for k in ll.mtp_kinds:  # each module's layers, every run (layers/__init__.py)
        counts[k] += ll.mtp
    out = np.zeros(np.broadcast(seq, np.asarray(cp)).shape)
    for n, kind in zip(counts, ll.kinds):
        mixer = kind.mixer
        if mixer.has_core and (mixer.selective_core or not selective_only):
            dense = dense_windows and causal and getattr(mixer, "window", None) is not None  # a model / stack setting
            padded = kernels and causal and getattr(mixer, "chunk_padded", False)  # a stack setting [13]
            out = out + n * (mixer.dense_mask_model_flops(seq) if dense else
                             mixer.padded_chunk_flops(seq, cp) if padded else mixer.core_model_flops(seq, causal, cp))
    return out


def _dense_params(model: ModelSpec) -> float:
    """N of 6N: the active parameters, and each multi-token-prediction module's (with the
    output layer it runs again; DeepSeek-V3 sec. 2.2)."""
    pc = count_params(model)
    head = model.vocab_size * model.hidden_size if model.mtp_layers else 0
    runs = model.mtp_layers / pc.layers.mtp_built if model.mtp_layers else 0.0  # a shared module runs mtp_layers times
    return float(pc.active + runs * pc.mtp.active + model.mtp_layers * head)


def flops_per_token(model: ModelSpec, seq, recompute, causal: bool = False, dense_windows: bool = False,
                    kernels: bool = False, cp=1.0) -> Terms:
    """Model FLOPs per token as named terms: dense (6N [1]) + attention (the layers' cores: 12
    L a d s for global attention [2], halved when counted causal; a window or chunk fewer keys,
    the scans of state-space and linear-attention layers: planner/layers/). recompute (codes
    from plan) is only used by hardware_flops_per_token. Mixture-of-experts: N = the active
    parameters (planner/params.py); MLA: d = the mean of the query/key and value head dims. cp: the plans' CP
    degree (_core_flops)."""
    seq = np.asarray(seq, dtype=np.float64)
    return Terms(dense=np.full(np.broadcast(seq, np.asarray(cp)).shape, 6.0 * _dense_params(model)),
                 attention=_core_flops(model, seq, causal, dense_windows=dense_windows, kernels=kernels, cp=cp))


def recompute_flops_per_token(model: ModelSpec, seq, recompute, causal: bool = False, fraction=1.0,
                              dense_windows: bool = False, kernels: bool = False, cp=1.0) -> np.ndarray:
    """Extra FLOPs per token that recomputation adds [3]: full = one more forward (2N + the
    cores' forward, a third of their model FLOPs), times the fraction of layers it re-runs
    (recompute_layers); selective = the attention cores' forward."""
    n = _dense_params(model)
    seq = np.asarray(seq, dtype=np.float64)
    core = _core_flops(model, seq, causal, dense_windows=dense_windows, kernels=kernels, cp=cp) / 3.0
    recompute = np.asarray(recompute)
    full = np.asarray(fraction, dtype=np.float64) * (2.0 * n + core)
    sel = _core_flops(model, seq, causal, selective_only=True, dense_windows=dense_windows, kernels=kernels,
                      cp=cp) / 3.0
    return np.where(recompute == RC_FULL, full, np.where(recompute == RC_SELECTIVE, sel, 0.0))


def flops_summary(model: ModelSpec, seq, recompute, causal: bool = False, tokens: float | None = None,
                  fraction=1.0, dense_windows: bool = False, cp=1.0) -> dict:
    """The `flops` object of explain's JSON. model_flops_per_token is MFU's (the job's attention
    convention); recompute_flops_per_token and hardware_flops_per_token are what the kernels run,
    HFU's (step.throughput): causal attention cores (a window's or chunk's mean keys) and the
    recomputation, whatever convention MFU counts, so that hardware FLOPs x tokens/s is the
    executed TFLOP/s explain prints. cp: the plan's CP degree (_core_flops)."""
    t = flops_per_token(model, seq, recompute, causal, cp=cp)
    run = flops_per_token(model, seq, recompute, True, dense_windows=dense_windows, kernels=True, cp=cp)
    extra = recompute_flops_per_token(model, seq, recompute, True, fraction, dense_windows=dense_windows, kernels=True,
                                      cp=cp)
    out = {
        "flops_per_token_6n": t.dense,
        "attention_flops_per_token": t.attention,
        "model_flops_per_token": t.total,
        "recompute_flops_per_token": extra,
        "hardware_flops_per_token": run.total + extra,
        "attention_counted": "causal" if causal else "non-causal",
    }
    if tokens is not None:
        out["training_tokens"] = tokens
        out["total_training_flops"] = t.dense * tokens  # 6N x tokens, the seed's and Llama 3's convention
        out["total_training_flops_with_attention"] = t.total * tokens
    return out


# =============================================================================== time
# Kernel-time model. References (continued):
# [5] NVIDIA CUTLASS 3.x / cuBLAS Hopper kernels: warp-specialized GEMMs with 128x256 (or
#     256x128) output tiles, one tile per SM at a time; a GEMM runs in ceil(tiles / SMs)
#     waves and the last wave leaves SMs idle ("wave quantization", NVIDIA Deep Learning
#     Performance Guide, "Matrix Multiplication Background User's Guide", sec. on tile and
#     wave quantization).
# [6] stas00/ml-engineering "Maximum Achievable Matmul FLOPS" (MAMF) table: the best-shape
#     dense GEMM throughput per GPU (hardware_db `compute:` blocks). It is the plateau the
#     model scales by wave efficiency; square sweeps in tests/data/gemm_measurements.yaml
#     check the shape dependence.
# [7] Shah et al. 2024, "FlashAttention-3" (arXiv:2407.08608), Figs. 5-7 (H100 SXM5, head
#     dim 128, seq 2k-16k): FlashAttention-2 forward 362-370 TFLOP/s, backward 291-322;
#     cuDNN/FA3 600-650 and 465-560. Dao 2023, "FlashAttention-2": the backward pass runs 5
#     matmuls against the forward's 2 (2.5x the FLOPs). The hardware entries carry the
#     FlashAttention-2 figures (attention_fwd/bwd_TFLOPS), the kernel of PyTorch SDPA's flash
#     backend and of flash-attn, and cuDNN's (compute.attention_kernels.cudnn). The bar labels
#     of Figs. 5 (forward, without causal mask, head dim 128) and 6 (backward, head dim 128)
#     by sequence length are in tests/data/attention_kernels_h100.yaml with how they were read.
# [7b] The same paper, Figs. 5 and 6, head-dim-64 panels (H100 SXM5; forward without causal mask,
#     backward): the rates by head dim (ATTN_HEAD_DIM_TABLES below).
# [7a] Transformer Engine's backend choice (which kernel a stack runs is data: stack
#     attention_kernels, resolved by attention_kernel below). NVIDIA/TransformerEngine @4329ff84
#     (2.17.1) transformer_engine/pytorch/attention/dot_product_attention/utils.py
#     get_attention_backend: "Select FusedAttention for performance: if use_flash_attention and
#     use_fused_attention and device_compute_capability >= (9, 0): ... Disabling FlashAttention
#     to give FusedAttention preference on Hopper+" (l. 1542-1548; FlashAttention 2, 3 and 4
#     alike); the same rule (>= (9, 0), F16_arbitrary_seqlen = cuDNN's flash kernel) from v2.0,
#     and == (9, 0) in v1.0-v1.9 (transformer_engine/pytorch/attention.py @v1.7 l. 3849: "Select
#     FusedAttention on sm90 and FlashAttention on others"). Megatron-LM @d98e8a64
#     --attention-backend (default auto; megatron/core/transformer/enums.py AttnBackend;
#     language_module.py sets NVTE_FLASH_ATTN / NVTE_FUSED_ATTN from it): flash forces
#     FlashAttention, fused cuDNN, auto lets TE choose as above.
# [7c] fp8 attention (a job's fp8_attention: Transformer Engine's fp8_dpa, cuDNN's FP8 fused attention).
#     The same paper's FP8 forward figure (sec. 4.1, "Forward speed (FP8) on H100 SXM5": Triton, cuDNN and
#     FlashAttention-3 bars; Fig. 7 of the arXiv version), panels without causal mask, cuDNN's bar labels at
#     512 ... 16k: head dim 128  617 751 886 864 971 1005, head dim 64  344 398 447 413 431 438 TFLOP/s
#     (tests/data/attention_kernels_h100.yaml fp8_forward_tflops, with how they were read). The paper has
#     no FP8 backward figure.
# [7d] FlexAttention (torch.nn.attention.flex_attention, the Triton template torch.compile emits; the
#     kernel torchtitan 0.3.0's language models run: models/common/config_utils.py get_attention_config
#     l. 71-101, 'flex' the llama3 / qwen3 / deepseek_v3 default). No FlexAttention figure in the
#     reference data at head dim 128 by sequence length, so it is priced as FlashAttention-2's rate on
#     the same GPU times FlexAttention's published ratio to FlashAttention-2 (FLEX_OVER_FLASH2):
#     - compute capability 9.x (Hopper): forward 1.25, backward 1.03. PyTorch blog "PyTorch at GTC
#       2025" (pytorch.org/blog, 2025-03), session abstract "FlexAttention: The Flexibility of PyTorch
#       With the Performance of FlashAttention" (D. Guessous, Meta): "On H100 GPUs, FlexAttention's
#       forward performance averages 85% of FlashAttention3 and is ~25% faster than FlashAttention2,
#       while backward performance averages 76% of FlashAttention3 and is ~3% faster than
#       FlashAttention2" (the "~" figures as printed; head dim, mask and lengths not stated).
#     - any other GPU (Ampere measured; Blackwell, AMD and an unknown capability by assumption):
#       forward 0.90, backward 0.85. PyTorch blog "FlexAttention: The Flexibility of PyTorch with the
#       Performance of FlashAttention" (pytorch.org/blog/flexattention, 2024-08-07), sec. Performance:
#       causal attention on A100, "FlexAttention achieves 90% of FlashAttention2's performance in the
#       forward pass and 85% in the backward pass" (the backward "recomputes more intermediates than
#       FAv2"). Named assumption off Ampere: no FlexAttention measurement on Blackwell in the
#       reference data (meta-pytorch/attention-gym issue #172, 2025-10, reports it slower than
#       FlashAttention-2 on B200 without a figure of the ratio).
#     The curves by key length and head dim are FlashAttention-2's (ATTN_BLOCK_TABLES,
#     ATTN_HEAD_DIM_TABLES: named assumption, FlexAttention's kernel is a FlashAttention-2-style tiled
#     kernel and no per-length figure of it was read).

# [5a] The epilogue: a GEMM kernel writes each output tile (GEMM_OUTPUT_BYTES an element) after
#     the tile's K loop. Where the tensor cores wait for that write before the next tile's MMAs,
#     a tile costs its K loop plus its write, and a GEMM (2MNK / P + GEMM_OUTPUT_BYTES x MN / W)
#     / wave efficiency (gemm_time; P the K loop's rate, W the write's): the rate grows with K,
#     1/rate = 1/P + GEMM_OUTPUT_BYTES / (2 K W) at full waves. Per kernel family:
#     - DeepGEMM @327ec92 (the kernel of its README table, gemm_measurements.yaml `deepgemm`)
#       deep_gemm/include/deep_gemm/fp8_gemm.cuh l. 353-394: after the K loop both math warp
#       groups store the tile to shared memory (STSM), meet at a named barrier, and one thread
#       issues the TMA store and waits on it (tma_store_wait<0>) before the warp groups take
#       the next tile (l. 242-261); only the producer warp's loads of the next tile overlap it.
#     - CUTLASS 3.x Hopper kernels: the Persistent Cooperative design runs both consumer warp
#       groups on one tile; only the Ping-Pong design "allows for epilogue of one consumer warp
#       group to be overlapped with the math operations of the other" (NVIDIA/cutlass
#       @21779de5 media/docs/cpp/efficient_gemm.md, "Hopper Warp Specialization"). cuBLAS's
#       Hopper kernels in profiler traces, sm90_xmma_gemm_..._tilesize128x256x64_
#       warpgroupsize2x1x1_..., run two warp groups on one 128x256 tile, the cooperative layout
#       (named assumption: cuBLAS is closed). Ampere (non-persistent: one tile a thread block,
#       its epilogue at its end) and MI300X (hipBLASLt, not read): the same, named assumption.
#     - Blackwell data-centre parts (sm_100 / sm_103): a separate MMA warp and epilogue warps
#       joined by an accumulator pipeline in tensor memory (NVIDIA/cutlass @019c5c97
#       include/cutlass/gemm/kernel/sm100_gemm_tma_warpspecialized.hpp: WarpCategory MMA /
#       Epilogue, AccumulatorPipeline = PipelineUmmaAsync<AccumulatorPipelineStageCount>), so
#       the write overlaps the next tile's MMAs: GEMM_EPILOGUE_OVERLAPPED_CAPABILITIES, priced
#       as before (2MNK / (P x wave efficiency), P the measured figure).
#     W = HBM bandwidth x HBM_EFFICIENCY (gemm_epilogue_rate: the tiles of a wave write at once,
#     a streaming write; DeepGEMM's own table reports at most 2,668 GB/s achieved, 80% of the
#     H800's 3.35 TB/s). P is backed out of the measured best-shape figure R at its K_m
#     (hardware_db compute.gemm_*_K): 1/P = 1/R - GEMM_OUTPUT_BYTES / (2 K_m W_measured)
#     (gemm_mainloop), so that the model gives R back at that shape (wave efficiency aside, as
#     before): H100 SXM bf16 794.5 at K 13,312 -> 810.55, fp8 1,402.6 at K 14,336 -> 1,449.64
#     TFLOP/s (W = 3.35 x 0.9 TB/s). Evidence (docs/gemm_k.md, every row of
#     tests/data/gemm_measurements.yaml on a GPU with an entry): DeepGEMM H800 fp8 at M 4,096,
#     K 512 ... 16,384: measured 775 ... 1,520 TFLOP/s, before 1,360 at every K, now 725 ...
#     1,366; median |rate error| of the 57 Hopper rows (DeepGEMM's M <= 128 aside, where the
#     wave model errs by 50-75% either way) 12.8% before, 7.0% after; all 80 such rows 12.3%
#     -> 7.3%. An overlapped roofline, max(compute, traffic / W), leaves those rows as before.
GEMM_TILE = (128, 256)  # output tile of Hopper-class cuBLAS/CUTLASS bf16 kernels [5]
DEFAULT_GEMM_EFFICIENCY = 794.5 / 989.0  # H100 SXM MAMF / dense peak [6]; for entries without a measurement
# Bytes an output element [5a]: bf16 for every GEMM the planner prices; Transformer Engine's fp8
# GEMMs write the activations' dtype (NVIDIA/TransformerEngine @4329ff84
# transformer_engine/pytorch/module/linear.py l. 484 out_dtype=activation_dtype), as DeepGEMM's
# (fp8_gemm.cuh l. 53 __nv_bfloat16* gmem_d).
GEMM_OUTPUT_BYTES = 2.0
# DEFAULT_GEMM_EFFICIENCY's K loop [5a]: the H100 SXM MAMF shape's K (2048x2048x13312) and HBM
# (datasheet 3.35 TB/s) take the write out: 1 / (989 / 794.5 - 989e12 x 2 / (2 x 13312 x 3.35e12
# x 0.9)) = 810.55 / 989, for an entry without a measurement whose epilogue is serialized.
DEFAULT_GEMM_MAINLOOP_EFFICIENCY = 1.0 / (1.0 / DEFAULT_GEMM_EFFICIENCY
                                          - 989e12 * GEMM_OUTPUT_BYTES / (2.0 * 13312 * 3.35e12 * HBM_EFFICIENCY))
# Compute-capability ranges (both ends inclusive) whose GEMM epilogue overlaps the next tile's
# K loop [5a]: Blackwell.
GEMM_EPILOGUE_OVERLAPPED_CAPABILITIES = (((10, 0), (11, 9)),)  # sm_120 (RTX 50) has no tensor memory
# FlashAttention when the hardware entry has no measured figure: the FlashAttention-2 /
# GEMM-plateau ratios measured on H100 SXM [7] (365 / 794.5 forward, 310 / 794.5 backward)
ATTN_FWD_EFFICIENCY = 365.0 / 794.5
ATTN_BWD_EFFICIENCY = 310.0 / 794.5
# The attention kernels a stack can run ([7], [7a]): flash2 = FlashAttention-2 (flash-attn,
# PyTorch SDPA's flash backend), cudnn = cuDNN's fused flash attention (Transformer Engine's
# FusedAttention, sub-backend F16_arbitrary_seqlen). Per kernel, the (forward, backward) ratio
# to the H100 SXM GEMM plateau for a hardware entry that has no figure of the kernel (named
# assumption: the kernel reaches the same fraction of the GEMM plateau as on H100): cuDNN
# 605 / 794.5 and 500 / 794.5 (the means of Figs. 5-6's 2k-16k bars, as the entries' 365 / 310
# for FlashAttention-2). A cross-check on B200 (the megatron stack does not use it there, see
# stack_db megatron `uncertain`): FlashAttention-4 reaches up to 1605-1613 TFLOP/s bf16, "up to
# 1.3x faster than cuDNN version 9.13" (together.ai/blog/flashattention-4), so cuDNN's
# forward is near or above 1240; this ratio gives 1745 x 605 / 794.5 = 1329.
ATTENTION_KERNELS = {
    "flash2": (ATTN_FWD_EFFICIENCY, ATTN_BWD_EFFICIENCY),
    "cudnn": (605.0 / 794.5, 500.0 / 794.5),
}
# FlexAttention's (forward, backward) rate over FlashAttention-2's on the same GPU [7d]: the first
# rule whose compute-capability range (both ends inclusive) holds the GPU's, else the default.
FLEX_OVER_FLASH2_RULES = (((9, 0), (9, 9), (1.25, 1.03)),)  # H100: PyTorch at GTC 2025 abstract
FLEX_OVER_FLASH2_DEFAULT = (0.90, 0.85)                      # A100: pytorch.org/blog/flexattention
ATTN_BWD_FLOPS_RATIO = 2.5  # backward / forward FLOPs of FlashAttention [7]
# Sustained tensor-core throughput under the power limit. GEMM benchmarks (MAMF, square
# sweeps, FlashAttention papers) run seconds at a time; a training job runs tensor-core
# kernels back to back for hours at the board's power limit, and the firmware lowers the SM
# clock: on B200, 100 back-to-back event-timed FlashAttention iterations dropped the SM
# clock from 1965 to ~1580 MHz and throughput by up to 15% (flashinfer-ai/flashinfer PR
# #2899, 2026); on H100 "power throttling depending on the kernel" makes TFLOP/s cycle before
# reaching a steady state (triton-lang/triton PR #4493, 2024); stas00/ml-engineering PR #59
# (2024): the first, cold matmul is faster "but it's not sustainable". Named assumption, the
# B200 measurement's 15%; a GEMM calibration measured under sustained load replaces it.
SUSTAINED_TENSOR_FRACTION = 0.85
# HBM_EFFICIENCY (achievable fraction of HBM bandwidth for streaming elementwise kernels, a
# named assumption): planner/efficiencies.py, imported above (profile.py bounds a knob by it).


# The power envelope (board power limit -> tensor-core clock): planner/power.py.


def gemm_plateau(hw, precision: str) -> float:
    """Sustained dense GEMM FLOP/s on large, well-shaped matrices: the measured best-shape
    figure [6] at the sustained clock (SUSTAINED_TENSOR_FRACTION), under the board's power
    limit (power.power_rate_fraction). The rate a whole best-shape GEMM reaches, its output
    write included: what the attention kernels' ratios are taken against (attention_rates);
    GEMMs are priced at gemm_mainloop plus the write (gemm_time)."""
    return _burst(hw, precision) * SUSTAINED_TENSOR_FRACTION * power_rate_fraction(hw)


def _burst(hw, precision: str) -> float:
    """The measured best-shape figure [6], FLOP/s; where the entry has none, the dense peak
    times _unmeasured_efficiency."""
    c = hw.compute
    measured = None
    if c is not None:
        measured = {"fp8": c.gemm_fp8_TFLOPS, "nvfp4": c.gemm_fp4_TFLOPS}.get(precision, c.gemm_bf16_TFLOPS)
    return measured * 1e12 if measured else hw.peak_flops(precision) * _unmeasured_efficiency(hw, precision)


def gemm_epilogue_serialized(hw) -> bool:
    """Whether this GPU's GEMM kernels write each output tile after its K loop, with the tensor
    cores idle meanwhile [5a]: every compute capability except those of
    GEMM_EPILOGUE_OVERLAPPED_CAPABILITIES (a hardware property, not a searched quantity)."""
    cap = hw.capability
    return not any(cap is not None and lo <= cap <= hi for lo, hi in GEMM_EPILOGUE_OVERLAPPED_CAPABILITIES)


def gemm_epilogue_rate(hw) -> float:
    """Bytes/s at which a serialized epilogue's output write runs [5a]: HBM bandwidth x
    HBM_EFFICIENCY (the streaming rate of the planner's memory-bound kernels); inf where the
    epilogue overlaps the next tile's K loop (gemm_epilogue_serialized false)."""
    return hw.hbm_TBps * 1e12 * HBM_EFFICIENCY if gemm_epilogue_serialized(hw) else np.inf


def gemm_mainloop(hw, precision: str) -> float:
    """Sustained FLOP/s of a GEMM's K loop [5a]: _mainloop_burst (the measured best-shape figure
    less its output write, so that gemm_time at the measured shape gives the figure back, wave
    efficiency aside as before) at the sustained clock and under the power limit, as
    gemm_plateau (the write's HBM time is not clock-bound). Overlapped epilogue: gemm_plateau."""
    return _mainloop_burst(hw, precision) * SUSTAINED_TENSOR_FRACTION * power_rate_fraction(hw)


def _mainloop_burst(hw, precision: str) -> float:
    """gemm_mainloop at the benchmarks' clock (before SUSTAINED_TENSOR_FRACTION and the power
    envelope), FLOP/s [5a]: with a serialized epilogue, the measured figure R less its write at
    the measured shape's K_m (compute.gemm_*_K) and the measured GPU's HBM rate
    (gemm_measured_hbm_TBps, else the entry's), 1/P = 1/R - GEMM_OUTPUT_BYTES / (2 K_m x HBM x
    HBM_EFFICIENCY); K_m not recorded: R. No figure: nvfp4 at the fp8 figure's K-loop fraction
    of the fp8 peak (as _unmeasured_efficiency), else the peak times
    DEFAULT_GEMM_MAINLOOP_EFFICIENCY. Overlapped epilogue: the figure itself (_burst)."""
    if not gemm_epilogue_serialized(hw):
        return _burst(hw, precision)
    c = hw.compute
    measured = k = None
    if c is not None:
        measured = {"fp8": c.gemm_fp8_TFLOPS, "nvfp4": c.gemm_fp4_TFLOPS}.get(precision, c.gemm_bf16_TFLOPS)
        k = {"fp8": c.gemm_fp8_K, "nvfp4": c.gemm_fp4_K}.get(precision, c.gemm_bf16_K)
    if measured:
        if not k:
            return measured * 1e12
        bw = (c.gemm_measured_hbm_TBps or hw.hbm_TBps) * 1e12 * HBM_EFFICIENCY
        return 1.0 / (1.0 / (measured * 1e12) - GEMM_OUTPUT_BYTES / (2.0 * k * bw))
    if precision == "nvfp4" and c is not None and c.gemm_fp8_TFLOPS and hw.fp8_TFLOPS:
        return hw.peak_flops(precision) * _mainloop_burst(hw, "fp8") / (hw.fp8_TFLOPS * 1e12)
    return hw.peak_flops(precision) * DEFAULT_GEMM_MAINLOOP_EFFICIENCY


def _unmeasured_efficiency(hw, precision: str) -> float:
    """Fraction of the dense peak a precision with no measured GEMM reaches: for nvfp4, the
    same fraction as this GPU's measured fp8 GEMM (named assumption: no NVFP4 GEMM
    measurement in the reference data; the block-scaled FP4 MMA runs on the same tensor
    cores and tiles as FP8), else DEFAULT_GEMM_EFFICIENCY."""
    c = hw.compute
    if precision == "nvfp4" and c is not None and c.gemm_fp8_TFLOPS and hw.fp8_TFLOPS:
        return c.gemm_fp8_TFLOPS / hw.fp8_TFLOPS
    return DEFAULT_GEMM_EFFICIENCY


def wave_efficiency(M, N, sms):
    """Fraction of SM-time doing useful output elements, best of the two tile orientations [5]:
    tile quantization (the last tile of each dimension computed in full: ceil(M / tm) tm rows)
    times wave quantization (ceil(tiles / SMs) waves of SMs x tiles), i.e.
    M N / (waves x SMs x tm x tn). Both are the guide's ("Matrix Multiplication Background User's
    Guide", "Dimension Quantization Effects": tile quantization and wave quantization). With
    it the time 2MNK / (plateau x efficiency) = waves x (one tile's time) never falls as M or N
    grows (tests/test_compute_tiles.py); the wave factor alone let it fall by up to 1/ceil(M/tm)
    when M crossed a tile edge (a 1,281-row GEMM priced 9% faster than a 1,280-row one)."""
    M = np.asarray(M, dtype=np.float64)
    N = np.asarray(N, dtype=np.float64)
    best = np.zeros(np.broadcast(M, N).shape)
    for tm, tn in (GEMM_TILE, GEMM_TILE[::-1]):
        tiles = np.ceil(M / tm) * np.ceil(N / tn)
        waves = np.ceil(tiles / sms)
        best = np.maximum(best, (M * N) / (waves * sms * tm * tn))
    return best


def gemm_time(M, N, K, plateau_flops, sms, epilogue_bps=np.inf):
    """Seconds for C[M,N] = A[M,K] @ B[K,N]: (2MNK / K-loop rate + GEMM_OUTPUT_BYTES x MN /
    epilogue write rate) / wave efficiency [5a]: each wave's tiles run their K loop, then
    write their output with the tensor cores idle; epilogue_bps inf (the default, and
    gemm_epilogue_rate where the epilogue overlaps the next tile's K loop): 2MNK /
    (plateau x wave efficiency)."""
    M = np.asarray(M, dtype=np.float64)
    flops = 2.0 * M * N * K
    return (flops / plateau_flops + GEMM_OUTPUT_BYTES * M * N / epilogue_bps) / wave_efficiency(M, N, sms)


# FlashAttention-2 on H100 SXM5, head dim 128, without the causal mask, by sequence length
# (512, 1k, 2k, 4k, 8k, 16k; batch x sequence = 16k tokens, so the grid of thread blocks is
# the same at every length and what changes is the key loop each block runs) [7] (Figs. 5
# and 6, the bar labels; the 2k-16k ends are the hardware entries' 362-370 and 291-322):
# forward 309 350 362 368 370 370, backward 214 260 291 310 318 322 TFLOP/s.
# cuDNN's fused attention, the same figures' red bars [7]: forward 497 574 617 609 600 595,
# backward 305 408 465 499 518 516 TFLOP/s (tests/data/attention_kernels_h100.yaml).
ATTN_BLOCK_KEYS = np.array([512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0])
ATTN_BLOCK_FWD = np.array([309.0, 350.0, 362.0, 368.0, 370.0, 370.0])
ATTN_BLOCK_BWD = np.array([214.0, 260.0, 291.0, 310.0, 318.0, 322.0])
ATTN_BLOCK_TABLES = {
    "flash2": (ATTN_BLOCK_FWD, ATTN_BLOCK_BWD),
    "cudnn": (np.array([497.0, 574.0, 617.0, 609.0, 600.0, 595.0]), np.array([305.0, 408.0, 465.0, 499.0, 518.0, 516.0])),
}
ATTN_BLOCK_TABLES["flex"] = ATTN_BLOCK_TABLES["flash2"]  # FlashAttention-2's curve [7d] (named assumption)


def attention_block_rate(keys, backward: bool = False, kernel: str = "flash2"):
    """An attention kernel's rate at `keys` keys per query block relative to its rate at 16k
    [7] (tables above), linear in log2(keys) between the measured lengths, held at the ends
    beyond them. Used only as a ratio between two block sizes (the per-step blocks of context
    parallelism against the whole sequence's kernel: step.cp_kernel_factor), so the hardware
    entry's own figure stays the rate of an unsplit kernel."""
    table = ATTN_BLOCK_TABLES[kernel][1 if backward else 0]
    k = np.log2(np.clip(np.asarray(keys, dtype=np.float64), ATTN_BLOCK_KEYS[0], ATTN_BLOCK_KEYS[-1]))
    return np.interp(k, np.log2(ATTN_BLOCK_KEYS), table) / table[-1]


# Head dim [7b]: the same figures' head-dim-64 panels (Fig. 5 forward without causal mask, Fig. 6
# backward; H100 SXM5, batch x sequence = 16k tokens, hidden 2048 = 32 heads of 64), bar labels
# at 512 ... 16k: FlashAttention-2 forward 282 306 318 321 322 324, backward 198 238 264 279 287
# 291; cuDNN forward 335 373 395 408 412 413, backward 266 348 395 417 432 433 TFLOP/s
# (tests/data/attention_kernels_h100.yaml). A kernel's rate at head dim 64 relative to head dim
# 128 is the ratio of the means of the 2k-16k bars, the figures the hardware entries carry at
# 128: FlashAttention-2 321.25 / 367.5 forward, 280.25 / 310.25 backward; cuDNN 407 / 605.25
# and 419.25 / 499.5. Rule (named assumption): linear in log2(head dim) between 64 and 128,
# held at the ends beyond them (below 64: the 64 ratio; above 128, e.g. MLA's 192 / 128: the
# entries' head-dim-128 rate, no head-dim-256 backward panel read), the same ratio on every GPU
# (the H100 figures are the only per-head-dim measurement in the reference data).
ATTN_HEAD_DIMS = np.array([64.0, 128.0])
ATTN_HEAD_DIM_TABLES = {  # (forward, backward) mean 2k-16k TFLOP/s at ATTN_HEAD_DIMS
    "flash2": (np.array([(318 + 321 + 322 + 324) / 4.0, (362 + 368 + 370 + 370) / 4.0]),
               np.array([(264 + 279 + 287 + 291) / 4.0, (291 + 310 + 318 + 322) / 4.0])),
    "cudnn": (np.array([(395 + 408 + 412 + 413) / 4.0, (617 + 609 + 600 + 595) / 4.0]),
              np.array([(395 + 417 + 432 + 433) / 4.0, (465 + 499 + 518 + 516) / 4.0])),
}
ATTN_HEAD_DIM_TABLES["flex"] = ATTN_HEAD_DIM_TABLES["flash2"]  # FlashAttention-2's [7d] (named assumption)


def attention_head_dim_factor(head_dim, kernel: str = "flash2"):
    """(forward, backward) rate of an attention kernel at `head_dim` relative to its rate at
    head dim 128 (the hardware entries' figures) [7b]: linear in log2(head dim) between the
    measured 64 and 128, held at the ends. head_dim None (a scan, not softmax attention): 1."""
    if head_dim is None:
        return np.float64(1.0), np.float64(1.0)
    x = np.log2(np.clip(np.asarray(head_dim, dtype=np.float64), ATTN_HEAD_DIMS[0], ATTN_HEAD_DIMS[-1]))
    xs = np.log2(ATTN_HEAD_DIMS)
    fwd, bwd = ATTN_HEAD_DIM_TABLES[kernel]
    return np.interp(x, xs, fwd) / fwd[-1], np.interp(x, xs, bwd) / bwd[-1]


# fp8 attention's forward rate relative to the bf16 cuDNN kernel's at the same head dim [7c]: the means of the
# 2k-16k bars, FP8 over bf16 (ATTN_HEAD_DIM_TABLES cudnn), at head dims 64 and 128: (447 + 413 + 431 + 438) / 4
# / 407 = 1.062 and (886 + 864 + 971 + 1005) / 4 / 605.25 = 1.539. Named assumptions: linear in log2(head dim)
# between them, held at the ends (above 128 the 128 ratio, as the bf16 rates); the H100 ratio on every GPU (no
# FP8 attention figure for other GPUs in the reference data), applied to the bf16 forward rate the plan
# prices (cuDNN's on Hopper; on Blackwell the stack's rule prices FlashAttention-2's, stack_db megatron
# uncertain); the backward at the bf16 rate, although TE runs it in fp8 too (NVTE_FP8_DPA_BWD default 1,
# backends.py @4329ff84 l. 1362): no FP8 backward measurement to price it by.
FP8_ATTN_FWD_SPEEDUP = np.array([(447 + 413 + 431 + 438) / 4.0 / ((395 + 408 + 412 + 413) / 4.0),
                                 (886 + 864 + 971 + 1005) / 4.0 / ((617 + 609 + 600 + 595) / 4.0)])


def fp8_attention_speedup(head_dim):
    """fp8 attention's forward rate over the bf16 kernel's at `head_dim` [7c] (FP8_ATTN_FWD_SPEEDUP):
    linear in log2(head dim) between 64 and 128, held at the ends."""
    x = np.log2(np.clip(np.asarray(head_dim, dtype=np.float64), ATTN_HEAD_DIMS[0], ATTN_HEAD_DIMS[-1]))
    return np.interp(x, np.log2(ATTN_HEAD_DIMS), FP8_ATTN_FWD_SPEEDUP)


def attention_kernel(stack, hw, job_kernel: Optional[str] = None) -> str:
    """The attention kernel a job runs [7a]: the job's own (a trainer config's
    --attention-backend flash or fused), else the stack's first attention_kernels rule that
    holds the GPU's compute capability, else flash2 (also where the hardware entry gives no
    compute capability)."""
    return stack.attention_kernel_for(hw.capability, job_kernel)


def flex_over_flash2(capability: Optional[tuple[int, int]]) -> tuple[float, float]:
    """FlexAttention's (forward, backward) rate over FlashAttention-2's on a GPU of this compute
    capability [7d]: the first FLEX_OVER_FLASH2_RULES range that holds it, else the default
    (also where the hardware entry gives no capability)."""
    for lo, hi, ratio in FLEX_OVER_FLASH2_RULES:
        if capability is not None and lo <= capability <= hi:
            return ratio
    return FLEX_OVER_FLASH2_DEFAULT


def attention_rates(hw, kernel: str = "flash2") -> tuple[float, float]:
    """(forward, backward) sustained FLOP/s of an attention kernel (ATTENTION_KERNELS) on this
    hardware [7]: the entry's measured figure (flash2: attention_fwd/bwd_TFLOPS; others:
    compute.attention_kernels), else the kernel's H100 ratio to the GEMM plateau; flex:
    FlashAttention-2's times flex_over_flash2 [7d]."""
    if kernel == "flex":  # FlashAttention-2's rate on this GPU times FlexAttention's ratio to it [7d]
        fwd, bwd = attention_rates(hw, "flash2")
        rf, rb = flex_over_flash2(hw.capability)
        return fwd * rf, bwd * rb
    c = hw.compute
    plat = gemm_plateau(hw, "bf16")  # already sustained, under the power limit
    k = SUSTAINED_TENSOR_FRACTION * power_rate_fraction(hw)
    eff_f, eff_b = ATTENTION_KERNELS[kernel]
    if kernel == "flash2":
        mf = c.attention_fwd_TFLOPS if c is not None else None
        mb = c.attention_bwd_TFLOPS if c is not None else None
    else:
        r = c.attention_kernels.get(kernel) if c is not None else None
        mf, mb = (r.fwd_TFLOPS, r.bwd_TFLOPS) if r is not None else (None, None)
    fwd = mf * 1e12 * k if mf else plat * eff_f
    bwd = mb * 1e12 * k if mb else plat * eff_b
    return fwd, bwd

# =============================================================================== GEMMs
# GEMM shapes and rates, measured rates when a profile has them. References (continued):
# [8] Narayanan et al. 2021 (Megatron-LM), sec. 3: the TP split of the attention and MLP
#     GEMMs; step.py's docstring.
# [9] D. Shepard, "A two-dimensional interpolation function for irregularly-spaced data",
#     Proc. 23rd ACM National Conference (1968): inverse-distance weighting, exact at the data.
# [10] stas00/ml-engineering, training/performance "SwiGLU-based MLP" benchmark on H100: K =
#     10922 runs at 273 TFLOP/s, K = 10944 at 398 (reference gemm_measurements.yaml).
#
# Layer shapes (`layer_gemm_shapes`): the forward GEMMs C[M,N] = A[M,K] @ B[K,N] (K the
# reduction) of one transformer layer and of the output layer for T tokens per micro-batch
# on one GPU after the TP split t [8] (h hidden, a heads, k KV heads, d head dim, f FFN, V
# vocab, f1 = 2f for a gated MLP):
#     qkv           [T, (a/t + 2 max(k/t, 1)) d, h]
#     attn_out      [T, h, a d / t]
#     mlp_up        [T, f1 / t, h]
#     mlp_down      [T, h, f / t]
#     output_layer  [T, V / t, h]
# `forward_gemm_times` prices them: gemm_time (K loop and write [5a]) without a calibration, the
# measured rates below with one.
#
# GEMMs from measurements (`calibrated_gemm_rate`, `gemm_efficiency`). The model above
# prices a GEMM at plateau x wave_efficiency(M, N) (the uncalibrated model adds the output's
# write [5a]; a measured rate has it in already): the plateau is what the kernel sustains
# while every SM has a tile, and wave_efficiency the fraction of SM-time the last, partial
# wave of 128x256 output tiles wastes [5]. A measured rate R_i at shape i (a profile's
# `gemm` rows, planner/profile.py GemmCalibration) therefore gives the shape's own plateau
#     P_i = R_i / wave_efficiency(M_i, N_i)
# i.e. the throughput with the tile-count effect taken out; what remains depends smoothly
# on the sizes (operand reuse grows with them, the fixed prologue and epilogue of a tile
# weigh less as K grows, narrow shapes become memory-bound). The rate of a row is its
# tflops x 1e12, times SUSTAINED_TENSOR_FRACTION unless the calibration is
# `sustained: true`: the derating applied to the hardware entries' benchmark figures, so
# that rows equal to those figures predict what the uncalibrated model predicts, and a
# measurement under sustained load replaces the assumption. For a query shape q:
#   - a shape that was measured: its measured rate (the median where a shape has several
#     rows), exactly;
#   - any other shape: the P_i of the KNN = 4 measured shapes nearest to q in
#     (ln M, ln N, ln K), averaged with inverse-distance weights 1 / dist^2 (Shepard's
#     method [9]), times wave_efficiency(M_q, N_q) on the SMs of the GPU measured.
# Why this form: GEMM efficiency depends on ratios of sizes, not differences, hence the
# log axes (doubling T or halving N by TP is the same step everywhere); the weights make
# the interpolant exact at measured shapes and a convex combination elsewhere, so it never
# leaves the range of the neighbouring measurements (no extrapolated efficiency above or
# below what was measured nearby); the wave factor restores the one effect that is not
# smooth in the sizes, and it is the same model used without a calibration, so a profile
# with a single row scales the default prediction by one constant factor (measured
# plateau / default plateau) for every shape. Limits: shapes far from every measurement
# inherit the nearest ones' plateau (a decode-size M = 64 query next to M = 8192 rows is
# priced like them); alignment effects (a K that is not a multiple of 64 can cost 30%
# [10]) are known only where measured. `planner calibrate gemm --run` measures the model's
# own shapes, so the queries of a plan lie on or next to rows. A precision without rows
# uses the uncalibrated model (default_gemm_rate); bf16 uses fp16 rows when a calibration
# has no bf16 rows (the two formats have one dense tensor-core peak on A100, H100 and H200
# datasheets). The scheme's name is recorded in each profile (profile.INTERPOLATION).

TFLOPS = 1e12  # the `tflops` of a profile's rows: 1e12 FLOP/s
KNN = 4  # measured shapes an interpolated query averages over
IDW_POWER = 2.0  # Shepard's inverse-distance exponent [9]
DEFAULT_SMS = 132  # H100/H200 SXM5 (NVIDIA H100 whitepaper) when neither profile nor hardware says
GEMM_NAMES = ("qkv", "attn_out", "mlp_up", "mlp_down", "output_layer")
LAYER_GEMMS = GEMM_NAMES[:4]


def output_gemm_shape(model, tp, tokens_per_microbatch) -> list:
    """[(output_layer [T, V/t, h], 1)]."""
    tp = np.asarray(tp).astype(np.float64)
    return shapes([("output_layer", tokens_per_microbatch, model.vocab_size / tp, model.hidden_size, 1.0)])


def layer_gemm_shapes(model, tp, tokens_per_microbatch) -> list[GemmShape]:
    """The forward GEMMs (name, M, N, K) of the model's first layer (its blocks' own shapes,
    planner/layers/) plus the output layer, as step.py prices them and `planner calibrate gemm
    --run` times them; tp and tokens may be arrays (float64 results, broadcast together)."""
    from .layers import context
    from .plan import PlanArrays

    tp = np.asarray(tp).astype(np.float64)
    T = np.asarray(tokens_per_microbatch, dtype=np.float64)
    tp, T = np.broadcast_arrays(tp, T)
    ll = layer_list(model)
    kind = ll.kinds[ll.kind_at(0)]
    ctx = context(PlanArrays(tp=1, cp=1, pp=1, vpp=1, dp=1, mbs=1, gbs=1, seq=1, sharding=0, shard=1, recompute=0, sp=0,
                             schedule=0, precision=0))
    ctx = type(ctx)(**{**ctx.__dict__, "tp": tp, "T": T})
    rows = kind.mixer.gemms(ctx) + kind.mlp.gemms(ctx) + output_gemm_shape(model, tp, T)
    return [g for g, _ in rows]


def sm_count(hw) -> int:
    """SMs of a hardware entry (its `compute.sm_count`), DEFAULT_SMS when it has none."""
    return hw.compute.sm_count if getattr(hw, "compute", None) is not None else DEFAULT_SMS


@dataclass(frozen=True)
class _Table:
    shapes: np.ndarray  # (m, 3) float64 M, N, K of the distinct measured shapes
    rate: np.ndarray  # (m,) FLOP/s, median of the rows of each shape
    plateau: np.ndarray  # (m,) rate / wave_efficiency
    tree: Any  # scipy.spatial.cKDTree over ln(shapes)


def _table(rows: Sequence[GemmRow], sms: float, derate: float) -> _Table:
    from scipy.spatial import cKDTree  # here, so that importing this module stays light

    by_shape: dict[tuple[int, int, int], list[float]] = {}
    for r in rows:
        by_shape.setdefault((r.M, r.N, r.K), []).append(r.tflops * TFLOPS * derate)
    keys = sorted(by_shape)
    shapes = np.array(keys, dtype=np.float64).reshape(-1, 3)
    rate = np.array([float(np.median(by_shape[k_])) for k_ in keys], dtype=np.float64)
    plateau = rate / wave_efficiency(shapes[:, 0], shapes[:, 1], sms)
    return _Table(shapes, rate, plateau, cKDTree(np.log(shapes)))


def _distinct(m, n, kk):
    """(first, inverse): indices of the distinct (m, n, kk) triples and, per element, its
    triple's position among them. A search holds a million plans but a few dozen shapes."""
    key = np.zeros(m.shape, dtype=np.int64)
    for x in (m, n, kk):
        u, inv = np.unique(x, return_inverse=True)
        key = key * len(u) + inv.reshape(-1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _interpolate(table: _Table, M, N, K, sms):
    M, N, K = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (M, N, K)))
    shape = M.shape
    m, n, kk = M.ravel(), N.ravel(), K.ravel()
    ok = np.isfinite(m) & np.isfinite(n) & np.isfinite(kk)
    m, n, kk = (np.maximum(np.where(ok, x, 1.0), 1.0) for x in (m, n, kk))
    first, inverse = _distinct(m, n, kk)
    m, n, kk = m[first], n[first], kk[first]
    q = np.log(np.stack([m, n, kk], axis=1))
    k = min(KNN, len(table.rate))
    dist, idx = table.tree.query(q, k=k)
    dist = dist.reshape(len(q), k)
    idx = idx.reshape(len(q), k)
    exact = dist[:, 0] == 0.0
    with np.errstate(divide="ignore"):
        w = 1.0 / dist**IDW_POWER
    nearest_only = (np.arange(k) == 0).astype(np.float64)
    w = np.where(exact[:, None], nearest_only, w)
    plateau = (w * table.plateau[idx]).sum(axis=1) / w.sum(axis=1)
    rate = np.where(exact, table.rate[idx[:, 0]], plateau * wave_efficiency(m, n, sms))
    return np.where(ok, rate[inverse], np.nan).reshape(shape)


def default_gemm_rate(M, N, K, precision: str, hw):
    """The uncalibrated GEMM throughput, FLOP/s: 2MNK / gemm_time at the K-loop rate and the
    epilogue's write rate (NaN: no FP8 / FP4 peak)."""
    M, N, K = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (M, N, K)))
    if (precision == "fp8" and hw.fp8_TFLOPS is None) or (precision == "nvfp4" and hw.fp4_TFLOPS is None):
        return np.full(M.shape, np.nan)
    t = gemm_time(M, N, K, gemm_mainloop(hw, precision), sm_count(hw), gemm_epilogue_rate(hw))
    return 2.0 * M * N * K / t


def _rate_one(M, N, K, precision: str, hw, cal: GemmCalibration):
    rows = cal.rows_for(precision)
    if not rows:
        return default_gemm_rate(M, N, K, precision, hw)
    sms = cal.sm_count or sm_count(hw)
    return _interpolate(_table(rows, sms, calibration_derate(cal, hw)), M, N, K, sms)


def calibration_derate(cal: GemmCalibration, hw) -> float:
    """What a calibration's measured rates are multiplied by for `hw` at its power limit:
    burst rows like the hardware entries' figures (SUSTAINED_TENSOR_FRACTION, then the power
    envelope, planner/power.py); sustained rows only by the power envelope between the limit they were
    measured at (`power_limit_w`; unrecorded: the job's own, i.e. no scaling) and the job's."""
    job = power_rate_fraction(hw)
    if not cal.sustained:
        return SUSTAINED_TENSOR_FRACTION * job
    measured_at = job if cal.power_limit_w is None else power_rate_fraction(hw, cal.power_limit_w)
    return job / measured_at


def _precision(dtype) -> str:
    s = str(dtype).strip().lower()
    if s not in PRECISION_CODES:
        raise PlannerError(f"GEMM precision {dtype!r} is not modelled",
                           f"valid: {', '.join(PRECISION_CODES)} (or precision codes {', '.join(map(str, PRECISION_CODES.values()))})")
    return s


def calibrated_gemm_rate(M, N, K, dtype, hw, cal: GemmCalibration):
    """FLOP/s of C[M,N] = A[M,K] @ B[K,N] from a calibration ("GEMMs from measurements" above).

    dtype: 'bf16' | 'fp8', or an array of precision codes (planner.plan: 0 bf16, 1 fp8)
    broadcast with M, N, K. Shapes the calibration has no rows for in that precision get
    the uncalibrated rate (default_gemm_rate)."""
    if isinstance(dtype, str):
        return _rate_one(M, N, K, _precision(dtype), hw, cal)
    M, N, K, code = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (M, N, K)), np.asarray(dtype))
    m, n, kk = M.ravel(), N.ravel(), K.ravel()
    first, inverse = _distinct(*(np.where(np.isfinite(x), x, -1.0) for x in (m, n, kk)))
    m, n, kk = m[first], n[first], kk[first]  # both precisions priced on the distinct shapes only
    r8 = _rate_one(m, n, kk, "fp8", hw, cal)[inverse]
    r16 = _rate_one(m, n, kk, "bf16", hw, cal)[inverse]
    c = code.ravel()
    r4 = _rate_one(m, n, kk, "nvfp4", hw, cal)[inverse] if np.any(c == NVFP4) else np.nan
    return np.select([c == FP8, c == NVFP4], [r8, r4], r16).reshape(M.shape)


def calibrated_gemm_time(M, N, K, dtype, hw, cal: GemmCalibration):
    """Seconds for C[M,N] = A[M,K] @ B[K,N]: 2MNK / calibrated rate. Drop-in for
    gemm_time(M, N, K, plateau, sms) when a profile has a `gemm` section."""
    flops = 2.0 * np.asarray(M, dtype=np.float64) * N * K
    return flops / calibrated_gemm_rate(M, N, K, dtype, hw, cal)


def gemm_efficiency(cal: GemmCalibration, M, N, K, dtype, hw):
    """Calibrated throughput as a fraction of the hardware's dense peak for dtype (arrays ok)."""
    if isinstance(dtype, str):
        p = _precision(dtype)
        return calibrated_gemm_rate(M, N, K, p, hw, cal) / hw.peak_flops(p)
    peak8 = hw.fp8_TFLOPS * TFLOPS if hw.fp8_TFLOPS else np.nan
    peak4 = hw.fp4_TFLOPS * TFLOPS if hw.fp4_TFLOPS else np.nan
    d = np.asarray(dtype)
    peak = np.select([d == FP8, d == NVFP4], [peak8, peak4], hw.bf16_TFLOPS * TFLOPS)
    return calibrated_gemm_rate(M, N, K, dtype, hw, cal) / peak


def price_gemms(rows, hw, precision, cal: Optional[GemmCalibration] = None) -> dict:
    """{name: forward seconds x count} of [(GemmShape, count)] rows per micro-batch. cal=None:
    gemm_time at the K-loop rate and the epilogue's write rate [5a] (the per-expert shapes of a grouped GEMM get their own wave
    efficiency); otherwise calibrated_gemm_time. precision: 'bf16' | 'fp8' or precision codes."""
    out: dict = {}
    if cal is None:
        code = np.asarray(PRECISION_CODES[_precision(precision)] if isinstance(precision, str) else precision)
        plat = np.select([code == FP8, code == NVFP4],
                         [gemm_mainloop(hw, "fp8") if hw.fp8_TFLOPS else np.nan,
                          gemm_mainloop(hw, "nvfp4") if hw.fp4_TFLOPS else np.nan], gemm_mainloop(hw, "bf16"))
        sms, epi = sm_count(hw), gemm_epilogue_rate(hw)
        for g, count in rows:
            out[g.name] = out.get(g.name, 0.0) + count * gemm_time(g.M, g.N, g.K, plat, sms, epi)
        return out
    for g, count in rows:
        out[g.name] = out.get(g.name, 0.0) + count * calibrated_gemm_time(g.M, g.N, g.K, precision, hw, cal)
    return out


# Eager core attention (layers/attention.py [9]). References (continued):
# [11] Williams, Waterman and Patterson 2009, "Roofline: An Insightful Visual Performance Model
#     for Multicore Architectures" (CACM 52(4)): a kernel takes at least the longer of its
#     FLOPs over the compute rate and its compulsory memory traffic over the bandwidth.
# The batched GEMMs reduce over the head dim (K = d, 64-128) or write / read a score matrix of
# s x s per d-wide operand row: 2 d FLOPs per score element against 2 B of it, below the ridge
# point of A100 and H100 (the GEMM plateau over HBM bandwidth: about 125 and 225 FLOP/B), so
# each is timed as the longer of its time at the GEMM model's rate at its shape (price_gemms:
# gemm_time [5a], or a GEMM calibration's measured rates) and its compulsory traffic
# (each operand read once, the output written once: 2 M (s + 2 d) bytes, eager_core's
# "traffic") at the streaming rate (HBM bandwidth x HBM_EFFICIENCY) [11]; a named
# approximation (no measurement of these shapes in the reference data). The GEMMs run in the
# activations' 16-bit type whatever the plan's GEMM precision (fp8 recipes cast the linears'
# inputs only): EAGER_GEMM_PRECISION.
EAGER_GEMM_PRECISION = "bf16"


def eager_core_terms(core: dict, kb: dict, dropout: bool, hw, hbm, cal=None, gemm_scale=1.0) -> tuple[Terms, Terms]:
    """(forward, backward) seconds per micro-batch of an eager core attention (layers/attention.py
    eager_core: its score elements, batched GEMMs and their traffic) as named terms: gemms (the
    roofline of each GEMM [11], above), softmax (the stack's scale-mask-softmax bytes a score
    element, kb score_softmax; its unfused softmax's, score_softmax_unfused, where the keys exceed
    the fused kernel's score_softmax_max_keys or the job turns masked_softmax_fusion off, in the
    16-bit dtype, score_softmax_unfused_16bit, where the job's attention_softmax_in_fp32 is false)
    and dropout (kb score_dropout, models with dropout) over the streaming rate hbm (bytes/s). gemm_scale: a run calibration's GEMM efficiency scale. With ALiBi
    (core alibi_copy / alibi_read, layers/attention.py [12]) also alibi, the forward's copy of the bias
    into the score buffer at the streaming rate (0 backward), and the forward scores GEMM's traffic
    takes the read of that buffer (its beta term)."""
    drop = 1.0 if dropout else 0.0
    alibi = "alibi_copy" in core  # a model property (ALiBi positions), not a searched quantity
    out = []
    for sfx, rows in (("", core["fwd"]), ("_bwd", core["bwd"])):
        compute = price_gemms(rows, hw, EAGER_GEMM_PRECISION, cal)
        # the forward's scores GEMM reads the bias back with ALiBi (baddbmm's beta term, layers/attention.py [12])
        beta = {"eager_scores": core["alibi_read"]} if alibi and not sfx else {}
        gemms = sum((np.maximum(compute[g.name] / gemm_scale, (count * core["traffic"] + beta.get(g.name, 0.0)) / hbm)
                     for g, count in rows), np.float64(0.0))
        # beyond the fused kernel's keys, or with the job's masked_softmax_fusion false (kb unfused_masked_softmax 1):
        # the stack's unfused softmax (Megatron-Core fused_softmax.py forward_torch_softmax)
        # (kb score_softmax_unfused; in the 16-bit dtype, score_softmax_unfused_16bit, where the job's
        # attention_softmax_in_fp32 is false: kb softmax_16bit 1)
        fused = (np.asarray(core["keys"]) <= kb["score_softmax_max_keys"]) & (kb.get("unfused_masked_softmax", 0.0) == 0.0)
        unfused = np.where(kb.get("softmax_16bit", 0.0) > 0.0, kb["score_softmax_unfused_16bit" + sfx],
                           kb["score_softmax_unfused" + sfx])
        softmax = np.where(fused, kb["score_softmax" + sfx], unfused)
        bias = {"alibi": (0.0 if sfx else 1.0) * core["alibi_copy"] / hbm} if alibi else {}
        out.append(Terms(gemms=gemms, softmax=softmax * core["scores"] / hbm,
                         dropout=drop * kb["score_dropout" + sfx] * core["scores"] / hbm, **bias))
    return out[0], out[1]


def model_gemm_shapes(model, tp, tokens_per_microbatch, ep=1) -> list[GemmShape]:
    """Every distinct forward GEMM a step of the model runs: each layer kind's blocks' (the
    per-expert GEMMs at expert-parallel size ep, balanced routing) and the output layer, in
    order of first appearance; `planner calibrate gemm --run` times them."""
    from .layers import context
    from .plan import PlanArrays

    ctx = context(PlanArrays(tp=tp, cp=1, pp=1, vpp=1, dp=ep, mbs=tokens_per_microbatch, gbs=tokens_per_microbatch,
                             seq=1, sharding=0, shard=1, recompute=0, sp=0, schedule=0, precision=0, ep=ep))
    out, seen = [], set()
    rows = [r for kind in layer_list(model).kinds for block in kind.blocks for r in block.gemms(ctx)]
    for g, _ in rows + output_gemm_shape(model, tp, ctx.T):
        key = (g.name, float(g.M), float(g.N), float(g.K))
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def forward_gemm_times(model, hw, tp, tokens_per_microbatch, precision, cal: Optional[GemmCalibration] = None) -> Terms:
    """Forward seconds of each GEMM of `layer_gemm_shapes` (the first layer's, and the output
    layer), per micro-batch (price_gemms)."""
    return Terms(**price_gemms([(g, 1.0) for g in layer_gemm_shapes(model, tp, tokens_per_microbatch)], hw, precision, cal))
