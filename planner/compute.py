"""FLOPs of a training step. Units: FLOPs (floating-point operations), per token or total.

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

import numpy as np

from .params import count_params
from .plan import RC_FULL, RC_SELECTIVE
from .schema import ModelSpec
from .terms import Terms


def flops_per_token(model: ModelSpec, seq, recompute, causal: bool = False) -> Terms:
    """Model FLOPs per token as named terms: dense (6N [1]) + attention (12*L*a*d*s [2],
    halved when counted causal). recompute (codes from plan) is only used by
    hardware_flops_per_token."""
    n = count_params(model).total
    L, a, d = model.num_layers, model.num_attention_heads, model.dhead
    cf = 0.5 if causal else 1.0
    seq = np.asarray(seq, dtype=np.float64)
    return Terms(dense=np.full(seq.shape, 6.0 * n), attention=12.0 * L * a * d * seq * cf)


def recompute_flops_per_token(model: ModelSpec, seq, recompute, causal: bool = False, fraction=1.0) -> np.ndarray:
    """Extra FLOPs per token that recomputation adds [3]: full = one more forward (2N + 4Lads),
    times the fraction of layers it re-runs (recompute_layers); selective = the attention
    core forward (4Lads)."""
    n = count_params(model).total
    L, a, d = model.num_layers, model.num_attention_heads, model.dhead
    cf = 0.5 if causal else 1.0
    seq = np.asarray(seq, dtype=np.float64)
    core = 4.0 * L * a * d * seq * cf
    recompute = np.asarray(recompute)
    full = np.asarray(fraction, dtype=np.float64) * (2.0 * n + core)
    return np.where(recompute == RC_FULL, full, np.where(recompute == RC_SELECTIVE, core, 0.0))


def flops_summary(model: ModelSpec, seq, recompute, causal: bool = False, tokens: float | None = None,
                  fraction=1.0) -> dict:
    """The `flops` object of explain's JSON."""
    t = flops_per_token(model, seq, recompute, causal)
    extra = recompute_flops_per_token(model, seq, recompute, causal, fraction)
    out = {
        "flops_per_token_6n": t.dense,
        "attention_flops_per_token": t.attention,
        "model_flops_per_token": t.total,
        "recompute_flops_per_token": extra,
        "hardware_flops_per_token": t.total + extra,
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
#     FlashAttention-2 figures, the kernel of PyTorch SDPA's flash backend and of most
#     published runs.

GEMM_TILE = (128, 256)  # output tile of Hopper-class cuBLAS/CUTLASS bf16 kernels [5]
DEFAULT_GEMM_EFFICIENCY = 794.5 / 989.0  # H100 SXM MAMF / dense peak [6]; for entries without a measurement
# FlashAttention when the hardware entry has no measured figure: the FlashAttention-2 /
# GEMM-plateau ratios measured on H100 SXM [7] (365 / 794.5 forward, 310 / 794.5 backward)
ATTN_FWD_EFFICIENCY = 365.0 / 794.5
ATTN_BWD_EFFICIENCY = 310.0 / 794.5
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
HBM_EFFICIENCY = 0.90  # achievable fraction of HBM bandwidth for streaming elementwise kernels
# (assumption: STREAM-style copies reach ~90% of HBM peak on H100/A100-class GPUs; a
# calibration profile replaces it)


def gemm_plateau(hw, precision: str) -> float:
    """Sustained dense GEMM FLOP/s on large, well-shaped matrices: the measured best-shape
    figure [6] at the sustained clock (SUSTAINED_TENSOR_FRACTION)."""
    peak = hw.peak_flops(precision)
    c = hw.compute
    measured = None
    if c is not None:
        measured = c.gemm_fp8_TFLOPS if precision == "fp8" else c.gemm_bf16_TFLOPS
    burst = measured * 1e12 if measured else peak * DEFAULT_GEMM_EFFICIENCY
    return burst * SUSTAINED_TENSOR_FRACTION


def wave_efficiency(M, N, sms):
    """Fraction of SM-time doing useful tiles, best of the two tile orientations [5]."""
    M = np.asarray(M, dtype=np.float64)
    N = np.asarray(N, dtype=np.float64)
    best = np.zeros(np.broadcast(M, N).shape)
    for tm, tn in (GEMM_TILE, GEMM_TILE[::-1]):
        tiles = np.ceil(M / tm) * np.ceil(N / tn)
        waves = np.ceil(tiles / sms)
        best = np.maximum(best, tiles / (waves * sms))
    return best


def gemm_time(M, N, K, plateau_flops, sms):
    """Seconds for C[M,N] = A[M,K] @ B[K,N]: 2MNK / (plateau x wave efficiency)."""
    flops = 2.0 * np.asarray(M, dtype=np.float64) * N * K
    return flops / (plateau_flops * wave_efficiency(M, N, sms))


def attention_rates(hw) -> tuple[float, float]:
    """(forward, backward) sustained FlashAttention FLOP/s on this hardware [7]."""
    c = hw.compute
    plat = gemm_plateau(hw, "bf16")  # already sustained
    k = SUSTAINED_TENSOR_FRACTION
    fwd = c.attention_fwd_TFLOPS * 1e12 * k if c is not None and c.attention_fwd_TFLOPS else plat * ATTN_FWD_EFFICIENCY
    bwd = c.attention_bwd_TFLOPS * 1e12 * k if c is not None and c.attention_bwd_TFLOPS else plat * ATTN_BWD_EFFICIENCY
    return fwd, bwd
