"""State-space mixers: Mamba-2 (Dao & Gu 2024, SSD [1]) and Mamba (Gu & Dao 2023, selective
scan [2]). Units: parameters, FLOPs, bytes, per micro-batch of T tokens on one GPU unless said.
Symbols: h hidden, H heads, P head dim, d_i = H P (Mamba-2) or expand x h (Mamba), N state
size, G B/C groups, Q chunk length, w conv kernel, r dt rank, t TP ranks, c CP ranks, s the
sequence length.

Parameters (mamba_ssm Mamba2 / transformers NemotronHMamba2Mixer; Jamba for Mamba):
  Mamba-2  in_proj h (2 d_i + 2 G N + H) [z, x, B, C, dt], depthwise conv1d over the
           d_i + 2 G N channels of x, B, C (w each, + a bias each), dt_bias, A_log, D (H
           each), the gated RMSNorm d_i, out_proj d_i h; one pre-norm.
  Mamba    in_proj h 2 d_i [x, z], conv1d d_i (w + bias), x_proj d_i (r + 2N) [dt, B, C],
           dt_proj r d_i + d_i, A_log d_i N, D d_i, out_proj d_i h; Jamba adds RMSNorms on
           dt (r), B and C (N each); one pre-norm.

Tensor parallelism. Mamba-2 (Megatron-Core MambaMixer [3]): in_proj column-parallel, out_proj
row-parallel, heads (z, x, dt, conv channels, A, D, norm) split over t ranks, B and C by group
(Megatron asserts G % t == 0; past G ranks each keeps one group's B and C, as GQA's K/V do: a
named extension); one TP collective pair each way, as an attention block ([6]: "1 all-reduce
per layer, instead of 2"). Forward GEMMs in_proj [T, (2 d_i + H)/t + 2 N max(G/t, 1), h],
out_proj [T, h, d_i/t]. Mamba: no trainer in reach shards it; assumed Megatron-style, in_proj
column- and out_proj row-parallel over d_i, x_proj row-parallel over its d_i input, which
needs a second all-reduce of its r + 2N outputs per direction ([6]: Mamba-1 "requires 2
all-reduces per layer"): GEMMs in_proj [T, 2 d_i/t, h], x_proj [T, r + 2N, d_i/t], dt_proj
[T, d_i/t, r], out_proj [T, h, d_i/t]. dt, B and C, x_proj's r + 2N outputs, are then whole on
every rank, and so are Jamba's RMSNorms on them (r + 2N weights, `replicated`). Which trainer
runs Jamba: Hugging Face transformers' JambaMambaMixer (models/jamba/modeling_jamba.py: dt_layernorm
r, b_layernorm and c_layernorm N each) with no tensor-parallel plan (JambaConfig declares no
base_model_tp_plan), and no shipped stack builds Mamba-1 (below): the split of these norms matters
only to the assumed layout here, on a user's stack file.

Mamba-2 scan FLOPs (SSD, [1] sec. 6 and Listing 1, mamba_ssm/modules/ssd_minimal.py; the
Triton kernels of mamba_ssm/ops/triton/ssd_combined.py `_mamba_chunk_scan_combined_fwd`).
The sequence splits into chunks of Q tokens; 2 FLOPs per multiply-add. Per token, forward:
  CB        C B^T per chunk and group, [Q, N] x [N, Q]: 2 N Q per token per group
            (ssd_bmm `_bmm_chunk_fwd`, causal=False: the whole Q x Q tile is computed)
  diagonal  (CB o L) x per head, [Q, Q] x [Q, P]: 2 P Q/2 per token (ssd_chunk_scan
            `_chunk_scan_fwd`, IS_CAUSAL: the blocks above the diagonal are skipped; the mean
            causal reach of a token inside its chunk, continuous, as attention's s/2)
  states    B^T x per chunk and head, [N, Q] x [Q, P]: 2 N P per token (`_chunk_state_fwd`)
  passing   h_c = exp(A_c) h_{c-1} + s_c per chunk and head: 2 N P per chunk, 2 N P / Q per
            token (`_state_passing_fwd`, sequential over chunks)
  output    C h per head, [Q, N] x [N, P]: 2 N P per token (`_chunk_scan_fwd`, off-diagonal)
  F_SSD = G (2 N f) + H (2 P m + 4 N P + 2 N P n_c/s),  m = mean_causal_keys(s, chunk=Q)
          (Q/2 when Q divides s), f = 2 m (Q), n_c = ceil(s / Q) chunks.
Dropped (lower order, elementwise and memory-bound): the decay mask exp(segsum) (Q^2/2 exp
per chunk and head), dt softplus and the cumulative sum of dt A (H per token), the D skip and
the z gate (d_i per token: elementwise_bytes). With N = P = Q this is O(N^2) per token per head,
the O(T N^2) of [1] sec. 6. The model-FLOP convention (core_model_flops, causal=False) counts
CB and the diagonal block at the full chunk span min(s, Q), as PaLM's 12 L a d s counts
attention's keys without the causal mask; causal=True counts what the kernels run (F_SSD). Per
token the count is independent of s except through the chunking (a last partial chunk, s < Q):
the scan's work is linear in the sequence length.

Mamba scan FLOPs ([2] sec. 3.3: the selective scan is O(B L D N) work): 9 N forward per token
per channel, Gu's count in state-spaces/mamba issue #110 ("9BLDN"; the thread gives the
parallel scan 2 L associative operations). Our reading of the split: 3 N to discretise (dt A,
dt B, dt B u), 4 N for the scan (two associative operations, each a multiply-add, per state
element), 2 N for the readout y = C h. The D skip and z gate (d_i each) are dropped.

Kernel rate, Mamba-2 (the named assumption SCAN_AT_ATTENTION_RATES): step.py prices
core_kernel_flops at the hardware's FlashAttention rates (forward, and 2.5x the FLOPs backward
at the backward rate). The SSD chunk kernels are tensor-core GEMMs like FlashAttention's; [1]
sec. 9.3 (speed benchmarks) times SSD against FlashAttention-2 and finds it faster from 2K
tokens on, a comparison of wall times, not of achieved FLOP/s, and no measured SSD rate is in
the catalog.

Kernel rate, Mamba (SCAN_ROOFLINE): the selective scan runs no matrix instruction ([4]
csrc/selective_scan/selective_scan_fwd_kernel.cuh, selective_scan_bwd_kernel.cuh: fp32
arithmetic in registers, a cub BlockScan over the sequence per channel and state, one thread
block per (sequence, channel)), so the tensor cores' rate does not bound it ([7]: H100 989
TFLOP/s bf16 matmul against 67 TFLOP/s fp32). Each pass is priced at a roofline, the slower
of its FLOPs over the GPU's fp32 peak (schema.Hardware.fp32_TFLOPS, the datasheet's non-tensor
FP32 line) and its HBM bytes over the achievable bandwidth (HBM_EFFICIENCY, as the
memory-bound kernels): max(F / fp32, bytes / HBM). Per token and local channel (d_i/t):
  FLOPs  forward 9 N ([2] above). Backward 29 N, our count of the kernel's real-valued,
         variable-B/C path (selective_scan_bwd_kernel.cuh l. 251-300 at [4]), 2 per
         multiply-add as above: the forward recomputed from the chunk states, dt A, dt u B,
         dout C (4); the forward and the reverse scans (4 each, as the forward's); then
         dx B, du (1 + 2), a = x - dt u B (3), ddelta (5), dA (3), dB (2), dC (1).
  bytes  forward (MambaInnerFn calls selective_scan_cuda.fwd with z, [4]
         selective_scan_interface.py): reads u (the conv output), dt, z, writes out and the
         gated out_z, 2 B each: 10; the chunk states x written, fp32 2N per 2048 tokens
         (8 N ceil(s/2048)/s). Backward (selective_scan_cuda.bwd, recompute_out_z): reads u,
         dt, dout, z, out, writes du, ddelta, dz, out_z: 18; the chunk states read.
         Per token, once for all channels: B and C read (2 N x 2 B each), and in backward dB
         and dC written (fp32, 2 N x 4 B). Every channel's thread block reads the same B and
         C: counted once from HBM (SCAN_BC_FROM_L2: a sequence's B and C, 4 N s bytes, 256 KiB
         at N 16 and s 4096, sit in L2 while its channels' blocks run).
  Dropped: A, D and dt_bias (per channel, not per token), the softplus and the z gate's
  arithmetic (d_i per token), dB/dC's zero fill and the cast back to bf16, and what the
  roofline does not see: the exp2f per state on the special-function units (16 a clock per
  SM on sm_80/sm_90, against 64 / 128 FP32 lanes [8]), the BlockScan's shuffles and
  barriers, dB and dC's atomic adds into L2. The pass is therefore faster than the kernel runs: a bound, the
  named assumption SCAN_AT_FP32_PEAK (no measured scan rate is catalogued; tests/test_layers.py
  sets it beside [2] Fig. 8). The z gate's bytes are the scan's (fused): elementwise_bytes
  does not count them again. A hardware entry without fp32_TFLOPS prices the FLOPs at the
  attention rates (SCAN_AT_ATTENTION_RATES, optimistic).

Activations (what the autograd functions save, bytes per local token):
  Mamba-2, Megatron-Core MambaMixer._ssm_training (use_mamba_mem_eff_path, rmsnorm) [3] ->
  mamba_ssm MambaSplitConv1dScanCombinedFn.forward [4]: save_for_backward(zxbcdt, ...,
  out_x, ...) - the whole in_proj output 2 (2 d_i + 2 G N + H) and the scan output before the
  z gate 2 d_i (the chunk states, CB and the conv output are recomputed in backward); the
  grouped RMSNorm (mamba_ssm ops/triton/layernorm_gated.py LayerNormFn.forward: x, rstd)
  2 d_i + 4 G (fp32 rstd per group); out_proj its input 2 d_i. Total 4 h (input and norm
  output) + 10 d_i + 2 H + 4 G N + 4 G.
  Mamba, mamba_ssm MambaInnerFn.forward (checkpoint_lvl 1) [4]: xz 4 d_i, x_dbl 2 (r + 2N),
  B and C (contiguous copies) 4 N, the scan's chunk states (csrc/selective_scan/
  selective_scan.cpp: fp32 [batch, d_i, ceil(s/2048), 2N]) 8 N d_i ceil(s/2048)/s, the scan
  output 2 d_i (out_proj's input, out_z, is recomputed); the in_proj input (norm output) 2h.
Where the model has dropout, the hidden dropout after the mixer keeps its mask, 1 B a hidden element
(Megatron-Core MambaLayer.forward [3b]: mamba_bda(...)(mixer_out, residual, hidden_dropout), the
bias-dropout-add the attention and MLP blocks run; "dropout_masks", as theirs). Mamba (Mamba1Block) keeps
none: no stack the planner prices builds a Mamba-1 layer in Megatron-Core (MambaMixer is Mamba-2 only [3]),
and the layer it is read from, transformers' JambaMambaDecoderLayer.forward (models/jamba/modeling_jamba.py:
residual + mamba(input_layernorm(x)), then residual + feed_forward(pre_ff_layernorm(x))), applies no dropout.
Names other than "input", "norm1_out" and "dropout_masks" are not in schema.ACTIVATION_TENSORS: every
recompute policy but full keeps them (a selective policy names attention tensors only).

Context parallelism. Mamba-2: Megatron-Core's all-to-all CP [5] (MambaContextParallel
pre_conv_ssm / post_conv_ssm): after in_proj, z, x, B, C and dt each pass through an
all-to-all from sequence-sharded to head-sharded (a GPU then runs the whole sequence for
H/(t c) heads), the scan output one back; B and C are first repeated so that each of the c
ranks has its group's (max(G/t, c) N per local token). The backward runs the transposed
all-to-alls: 6 forward + 6 backward per layer. The scan's FLOPs per GPU are unchanged (T c
tokens x H/(t c) heads) but for CB, computed per group a rank holds: max(G/t, c). Mamba: no
trainer implements CP, and no shipped stack builds a Mamba-1 layer at all (stack_db runs.layer_kinds:
start-up rule STACK_LAYER_KIND refuses Jamba on every shipped stack, cp 1 or not). What follows prices
only a user's stack file that lists mamba1 or lists no layer kinds, and is listed as assumed there
(startup.layer_kinds_assumed): the minimal correct mechanism (MAMBA1_CP_STATE_PASSING):
contiguous sequence chunks, each rank receives the final scan state (d_i/t x N fp32 per
sequence) and the conv's last w - 1 inputs from the previous rank, and in backward sends
the state's gradient back: a sequential dependency of c - 1 hops each way.

References
[1] Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient Algorithms Through
    Structured State Space Duality", arXiv:2405.21060, sec. 6 (the SSD algorithm), Listing 1,
    sec. 9.3 (speed benchmarks).
[2] Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces",
    arXiv:2312.00752, sec. 3.3; sec. 4.5, Fig. 8 and App. E.5 (the scan's speed on an A100
    80GB PCIe against FlashAttention-2: faster beyond 2K tokens).
[3] NVIDIA Megatron-LM megatron/core/ssm/mamba_mixer.py (MambaMixer: nheads % tp, ngroups % tp
    asserts, in_proj ColumnParallel, out_proj RowParallel, _ssm_training), commit d98e8a64.
[3b] NVIDIA Megatron-LM megatron/core/ssm/mamba_layer.py MambaLayer.__init__ l. 88 (hidden_dropout =
    config.hidden_dropout), forward l. 176-179 (mamba_bda: get_bias_dropout_add, hybrid_layer_specs.py
    l. 119), commit d98e8a64.
[4] state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py (MambaSplitConv1dScanCombinedFn),
    ssd_bmm.py, ssd_chunk_scan.py, ssd_chunk_state.py, ssd_state_passing.py,
    ops/selective_scan_interface.py (MambaInnerFn), csrc/selective_scan/selective_scan.cpp,
    commit e9594ce1.
[5] NVIDIA Megatron-LM megatron/core/ssm/mamba_context_parallel.py (MambaContextParallel,
    _all_to_all_cp2hp / _all_to_all_hp2cp), commit d98e8a64.
[6] Dao & Gu 2024, "State Space Duality (Mamba-2) Part IV - The Systems" (tridao.me/blog/2024/
    mamba2-part4-systems):
    tensor parallelism, Mamba-2 one all-reduce per layer, Mamba-1 two.
[7] Dao & Gu 2024, "Mamba-2: Algorithms and Systems" (Princeton PLI blog,
    pli.princeton.edu/blog/2024/mamba-2-algorithms-and-systems): H100 989 TFLOP/s bf16
    matmul, 67 TFLOP/s fp32.
[8] NVIDIA CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table: per clock
    and SM, 16 results of exp2f / __log2f / rsqrt (compute capability 8.0 - 9.0) against 64
    (8.0) or 128 (8.6 - 9.0) fp32 add / multiply / multiply-add.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attention import mean_causal_keys, span_keys
from .common import ACT_BYTES, BlockParams, kv_local, shapes

FP32_BYTES = 4.0  # scan states, norm statistics
SELECTIVE_SCAN_CHUNK = 2048.0  # tokens per saved state chunk of the CUDA selective scan ([4] selective_scan.cpp)
SCAN_FLOPS_PER_STATE = 9.0  # Mamba forward FLOPs per token, channel and state (Gu, state-spaces/mamba #110)
SCAN_BWD_FLOPS_PER_STATE = 29.0  # Mamba backward, our count of selective_scan_bwd_kernel.cuh ([4], module docstring)
SCAN_FWD_BYTES_PER_CHANNEL = 10.0  # u, dt, z read, out, out_z written, bf16 ([4] selective_scan.cpp fwd)
SCAN_BWD_BYTES_PER_CHANNEL = 18.0  # u, dt, dout, z, out read, du, ddelta, dz, out_z written, bf16 ([4] bwd)


# ----------------------------------------------------------------------------- shared helpers
def chunk_reach(seq, chunk: int, kernel: bool):
    """(diagonal, full) per-token lengths a chunked scan's intra-chunk products run over. kernel:
    the causal kernel's mean reach m = mean_causal_keys(s, chunk) for a masked product whose
    blocks above the diagonal are skipped, and f = 2 m (Q when Q divides s; s when s < Q) for
    one computed as a whole tile; else both the chunk span min(s, Q) (the model-FLOP
    convention, no causal mask)."""
    if kernel:
        m = mean_causal_keys(seq, chunk=chunk)
        return m, 2.0 * m
    c = span_keys(seq, chunk=chunk)
    return c, c


def gemm_cast_elements(gemms) -> np.ndarray:
    """fp8: elements cast per forward, every GEMM's input M x K and weight N x K."""
    return sum((c * (g.M * g.K + g.N * g.K) for g, c in gemms), np.float64(0.0))


def ssd_flops(seq, heads, groups, head_dim: int, state: int, chunk: int, kernel: bool):
    """Forward FLOPs per token of the SSD scan over `heads` heads and `groups` B/C groups (module
    docstring F_SSD)."""
    s = np.asarray(seq, dtype=np.float64)
    m, f = chunk_reach(s, chunk, kernel)
    N, P = float(state), float(head_dim)
    passing = np.ceil(s / chunk) / s
    return groups * 2.0 * N * f + heads * (2.0 * P * m + 4.0 * N * P + 2.0 * N * P * passing)


def _micro_batch(ctx):
    """Sequences in one micro-batch: T c / s."""
    return ctx.T * ctx.cp / ctx.seq


# ----------------------------------------------------------------------------- Mamba-2
@dataclass(frozen=True)
class Mamba2Block:
    h: int
    heads: int
    head_dim: int
    state: int
    groups: int
    conv_kernel: int
    chunk: int
    norm: int
    conv_bias: bool = True
    proj_bias: bool = False
    dropout: bool = False  # the model's hidden dropout after the mixer (MambaLayer's bias-dropout-add [3b])

    kind = "mixer"
    has_core = True
    selective_core = False
    cp_overlaps_core = False
    tp_pairs = (1.0,)  # in_proj column-, out_proj row-parallel: one pair each way [3], [6]
    sp_input_gemm = "mamba_in"  # the column-parallel in_proj fed by the SP all-gather of T h (step.py [35])

    @property
    def label(self) -> str:
        return f"mamba2({self.heads}x{self.head_dim}, N={self.state})"

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim

    def params(self) -> BlockParams:
        h, di, gn, H = self.h, self.d_inner, self.groups * self.state, self.heads
        col = (2 * di + 2 * gn + H) if self.proj_bias else 0  # in_proj's bias, split with its outputs
        row = h if self.proj_bias else 0  # out_proj's, whole on every TP rank (common.py [rb])
        conv_ch = di + 2 * gn
        conv = conv_ch * self.conv_kernel + (conv_ch if self.conv_bias else 0)
        # conv1d, dt_bias, A_log, D (H each) and the gated norm (d_i): plain parameters, no linear's (common.py [pl])
        return BlockParams(split=h * (2 * di + 2 * gn + H) + col + conv + 3 * H + di + di * h,
                           replicated=self.norm + row, split_bias=col, row_bias=row, split_plain=conv + 3 * H + di,
                           no_muon=h * (2 * di + 2 * gn + H))  # in_proj's weight: use_muon False (common.py [mu])

    def muon_matrices(self) -> tuple:
        """Muon's whole matrices (common.py [ns]): out_proj h x d_i alone (in_proj use_muon False, [mu]), listed
        transposed (split on d_i, its input: [ns])."""
        return ((self.d_inner, self.h, 1, "split"),)

    # ------------------------------------------------------------------ widths per GPU
    def _groups_in(self, ctx):
        """B/C groups in_proj produces per local token: max(G/t, 1) (module docstring)."""
        return kv_local(self.groups, ctx.tp)

    def _groups_scan(self, ctx):
        """B/C groups a GPU holds per local token after the CP all-to-all: max(G/t, c) [5]."""
        return np.maximum(self._groups_in(ctx), ctx.cp)

    def _in_width(self, ctx):
        return (2.0 * self.d_inner + self.heads) / ctx.tp + 2.0 * self.state * self._groups_in(ctx)

    # ------------------------------------------------------------------ compute
    def gemms(self, ctx):
        """Forward GEMMs [3]: in_proj [T, (2 d_i + H)/t + 2 N max(G/t, 1), h], out_proj [T, h, d_i/t]."""
        T = ctx.T
        return shapes([("mamba_in", T, self._in_width(ctx), self.h, 1.0),
                       ("mamba_out", T, self.h, self.d_inner / ctx.tp, 1.0)])

    def projection_shares(self, ctx) -> dict:
        return {}  # selective recompute names attention projections only

    def core_kernel_flops(self, ctx):
        """Forward FLOPs of the SSD kernels for one micro-batch on one GPU: T x F_SSD with H/t
        heads and max(G/t, c) groups (module docstring), at the FlashAttention rates
        (SCAN_AT_ATTENTION_RATES)."""
        return ctx.T * ssd_flops(ctx.seq, self.heads / ctx.tp, self._groups_scan(ctx), self.head_dim, self.state,
                                 self.chunk, kernel=True)

    def core_model_flops(self, seq, causal: bool, cp=1.0):
        """Model FLOPs per token, forward and backward (3x forward): 3 F_SSD over all H heads and
        G groups; causal=False counts the intra-chunk products at the chunk span min(s, Q)."""
        return 3.0 * ssd_flops(seq, float(self.heads), float(self.groups), self.head_dim, self.state, self.chunk,
                               kernel=causal)

    def elementwise_bytes(self, ctx, kb, sfx):
        """Memory-bound bytes per micro-batch (sfx "" forward, "_bwd" backward): the pre-norm and
        the residual add (replicated unless SP); the depthwise causal conv1d + SiLU over the
        d_i/t + 2 N max(G/t, c) channels of x, B, C (read and write each element: the stack's
        plain-activation figure); the z gate y silu(z) inside the scan kernel (reads two, writes
        one: the gated-activation figure) and the grouped RMSNorm over d_i/t (the norm figure);
        in_proj and out_proj biases where the model has them."""
        h, tp, di = self.h, ctx.tp, self.d_inner
        bias = kb["bias"] * (1.0 if self.proj_bias else 0.0)
        drop = kb["dropout" + sfx] * (1.0 if self.dropout else 0.0)  # the hidden dropout's mask pass [3b]
        conv = di / tp + 2.0 * self.state * self._groups_scan(ctx)
        return ctx.T * ((kb["norm" + sfx] * h + kb["residual" + sfx] * h + bias * h + drop * h) / ctx.rep_div
                        + kb["mlp_activation_plain" + sfx] * conv
                        + (kb["mlp_activation_gated" + sfx] + kb["norm" + sfx]) * di / tp
                        + bias * self._in_width(ctx))

    def cast_elements(self, ctx):
        """fp8: each GEMM's input and weight, cast per forward."""
        return gemm_cast_elements(self.gemms(ctx))

    # ------------------------------------------------------------------ memory
    def tensors(self, ctx, attention: str) -> dict:
        """Activation table, bytes per local token (module docstring, [3] [4]). B and C are kept
        per group a GPU holds (max(G/t, c), computed here: kind "full")."""
        h, di, H, N = self.h, self.d_inner, self.heads, self.state
        drop = {"dropout_masks": (1.0 * h, "rep")} if self.dropout else {}  # 1 B a hidden element [3b]
        return {
            **drop,
            "input": (ACT_BYTES * h, "rep"), "norm1_out": (ACT_BYTES * h, "rep"),
            "mamba_zxdt": (ACT_BYTES * (2.0 * di + H), "split"),  # zxbcdt without B, C
            "mamba_bc": (ACT_BYTES * 2.0 * N * self._groups_scan(ctx), "full"),  # B, C of zxbcdt
            "mamba_scan_out": (ACT_BYTES * di, "split"),  # out_x
            "mamba_norm_in": (ACT_BYTES * di, "split"),  # LayerNormFn x
            "mamba_norm_rstd": (FP32_BYTES * kv_local(self.groups, ctx.tp), "full"),  # one per group
            "mamba_out_in": (ACT_BYTES * di, "split"),  # out_proj input
        }

    # ------------------------------------------------------------------ communication
    def cp_collectives(self, ctx):
        """[(op, bytes per rank, count per layer, forward and backward)]: Megatron-Core's CP
        all-to-alls [5], each rank's whole buffer (comm.py): z, x and the scan output
        T d_i/t x 2 B, B and C T N max(G/t, c) x 2 B, dt T H/t x 2 B; each once forward and once
        backward."""
        T, tp = ctx.T, ctx.tp
        return [("all_to_all", T * self.d_inner / tp * ACT_BYTES, 6.0),
                ("all_to_all", T * self.state * self._groups_scan(ctx) * ACT_BYTES, 4.0),
                ("all_to_all", T * self.heads / tp * ACT_BYTES, 2.0)]


# ----------------------------------------------------------------------------- Mamba
@dataclass(frozen=True)
class Mamba1Block:
    h: int
    d_inner: int
    state: int
    conv_kernel: int
    dt_rank: int
    norm: int
    conv_bias: bool = True
    proj_bias: bool = False
    inner_norms: bool = False

    kind = "mixer"
    has_core = True
    selective_core = False
    cp_overlaps_core = False
    sp_input_gemm = "mamba_in"  # in_proj, column-parallel on the gathered T h (x_proj's pair is an all-reduce's: step.py [35])

    @property
    def label(self) -> str:
        return f"mamba({self.d_inner}, N={self.state})"

    @property
    def tp_pairs(self):
        """The output projection's pair, and x_proj's all-reduce of its r + 2N outputs (in units
        of T h) [6] (module docstring; under SP priced as a reduce-scatter + all-gather pair, the
        same bytes on the wire)."""
        return (1.0, (self.dt_rank + 2.0 * self.state) / self.h)

    def params(self) -> BlockParams:
        h, di, N, r = self.h, self.d_inner, self.state, self.dt_rank
        col = 2 * di if self.proj_bias else 0  # in_proj's bias, split with its outputs
        row = h if self.proj_bias else 0  # out_proj's, whole on every TP rank (common.py [rb])
        conv = di * self.conv_kernel + (di if self.conv_bias else 0)
        x_proj = di * (r + 2 * N)
        dt_proj = r * di + di
        norms = (r + 2 * N) if self.inner_norms else 0  # Jamba's dt, B, C norms: whole on every TP rank (docstring)
        # dt_proj's bias (d_i) a column-parallel linear's; conv1d, A_log (d_i N), D (d_i) plain (common.py [pl])
        return BlockParams(split=h * 2 * di + col + conv + x_proj + dt_proj + di * N + di + di * h,
                           replicated=self.norm + row + norms, split_bias=col + di, row_bias=row,
                           split_plain=conv + di * N + di)

    def muon_matrices(self) -> tuple:
        """The 2-D matrices muon_per_gpu counts (common.py [ns]): in_proj 2 d_i x h, x_proj (r + 2N) x d_i,
        dt_proj d_i x r, out_proj h x d_i (x_proj and out_proj split on d_i, their input: listed transposed, [ns])."""
        h, di = self.h, self.d_inner
        return ((2 * di, h, 1, "split"), (di, self.dt_rank + 2 * self.state, 1, "split"), (di, self.dt_rank, 1, "split"),
                (di, h, 1, "split"))

    def gemms(self, ctx):
        """Forward GEMMs (module docstring): in_proj [T, 2 d_i/t, h], x_proj [T, r + 2N, d_i/t],
        dt_proj [T, d_i/t, r], out_proj [T, h, d_i/t]."""
        T, tp, di = ctx.T, ctx.tp, self.d_inner
        return shapes([("mamba_in", T, 2.0 * di / tp, self.h, 1.0),
                       ("mamba_x_proj", T, self.dt_rank + 2.0 * self.state, di / tp, 1.0),
                       ("mamba_dt_proj", T, di / tp, self.dt_rank, 1.0),
                       ("mamba_out", T, self.h, di / tp, 1.0)])

    def projection_shares(self, ctx) -> dict:
        return {}

    def core_kernel_flops(self, ctx):
        """Forward FLOPs of the selective scan for one micro-batch on one GPU: 9 N d_i/t per
        token [2] (priced by scan_times, not at the attention rates: module docstring)."""
        return ctx.T * SCAN_FLOPS_PER_STATE * self.state * self.d_inner / ctx.tp

    def scan_flops(self, ctx):
        """(forward, backward) FLOPs of the selective scan kernels per micro-batch on one GPU:
        T d_i/t N x (9, 29) (module docstring SCAN_ROOFLINE)."""
        per = ctx.T * self.state * self.d_inner / ctx.tp
        return SCAN_FLOPS_PER_STATE * per, SCAN_BWD_FLOPS_PER_STATE * per

    def scan_bytes(self, ctx):
        """(forward, backward) HBM bytes of the selective scan kernels per micro-batch on one
        GPU (module docstring SCAN_ROOFLINE): per local channel 10 / 18 B a token and the fp32
        chunk states 8 N ceil(s/2048)/s; per token B and C (4 N each pass) and in backward dB,
        dC in fp32 (8 N), once for all channels (SCAN_BC_FROM_L2)."""
        N = self.state
        states = 2.0 * N * FP32_BYTES * np.ceil(ctx.seq / SELECTIVE_SCAN_CHUNK) / ctx.seq
        ch = self.d_inner / ctx.tp
        bc = 2.0 * N * ACT_BYTES
        fwd = ctx.T * (ch * (SCAN_FWD_BYTES_PER_CHANNEL + states) + bc)
        bwd = ctx.T * (ch * (SCAN_BWD_BYTES_PER_CHANNEL + states) + bc + 2.0 * N * FP32_BYTES)
        return fwd, bwd

    def scan_times(self, ctx, rates, hbm):
        """(forward, backward) seconds of the selective scan per micro-batch: each pass's roofline
        max(FLOPs / rate, bytes / hbm) (SCAN_ROOFLINE; rates: the (forward, backward) FLOP/s,
        the GPU's fp32 peak both ways, SCAN_AT_FP32_PEAK; hbm: achievable bytes/s)."""
        (ff, fb), (bf, bb) = self.scan_flops(ctx), self.scan_bytes(ctx)
        return np.maximum(ff / rates[0], bf / hbm), np.maximum(fb / rates[1], bb / hbm)

    def core_model_flops(self, seq, causal: bool, cp=1.0):
        """Model FLOPs per token, forward and backward: 3 x 9 N d_i (no mask, no chunks: the same
        either convention)."""
        return np.full(np.shape(seq), 3.0 * SCAN_FLOPS_PER_STATE * self.state * self.d_inner)

    def elementwise_bytes(self, ctx, kb, sfx):
        """Memory-bound bytes per micro-batch: pre-norm and residual (replicated unless SP), the
        conv1d + SiLU over d_i/t (plain-activation figure), Jamba's RMSNorms on dt, B, C (r + 2N,
        whole on every rank), biases. The z gate runs inside the scan kernel: its bytes are the
        scan's (scan_bytes)."""
        h, tp, di = self.h, ctx.tp, self.d_inner
        bias = kb["bias"] * (1.0 if self.proj_bias else 0.0)
        inner = (self.dt_rank + 2.0 * self.state) if self.inner_norms else 0.0
        return ctx.T * ((kb["norm" + sfx] * h + kb["residual" + sfx] * h + bias * h) / ctx.rep_div
                        + kb["mlp_activation_plain" + sfx] * di / tp
                        + kb["norm" + sfx] * inner + bias * 2.0 * di / tp)

    def cast_elements(self, ctx):
        return gemm_cast_elements(self.gemms(ctx))

    def tensors(self, ctx, attention: str) -> dict:
        """Activation table, bytes per local token: MambaInnerFn's saves [4] (module docstring)."""
        h, di, N, r = self.h, self.d_inner, self.state, self.dt_rank
        chunks = np.ceil(ctx.seq / SELECTIVE_SCAN_CHUNK) / ctx.seq
        return {
            "input": (ACT_BYTES * h, "rep"), "norm1_out": (ACT_BYTES * h, "rep"),
            "mamba_xz": (ACT_BYTES * 2.0 * di, "split"),
            "mamba_x_dbl": (ACT_BYTES * (r + 2.0 * N), "full"),  # whole on every rank after the all-reduce
            "mamba_bc": (ACT_BYTES * 2.0 * N, "full"),  # contiguous copies of B and C
            "mamba_scan_states": (FP32_BYTES * 2.0 * N * di * chunks, "split"),
            "mamba_scan_out": (ACT_BYTES * di, "split"),
        }

    def cp_collectives(self, ctx):
        """MAMBA1_CP_STATE_PASSING (module docstring): per micro-batch the scan state
        mbs x d_i/t x N fp32 and the conv's last w - 1 inputs, c - 1 hops forward and the state
        gradient c - 1 back."""
        mbs, di = _micro_batch(ctx), self.d_inner / ctx.tp
        hops = ctx.cp - 1.0
        return [("send_recv", mbs * di * self.state * FP32_BYTES, 2.0 * hops),
                ("send_recv", mbs * (self.conv_kernel - 1.0) * di * ACT_BYTES, hops)]


def mamba_block(spec, m, norm: int):
    """The block of a schema.Mamba2 / schema.Mamba1 spec on model m."""
    if spec.kind == "mamba2":
        return Mamba2Block(h=m.hidden_size, heads=spec.num_heads, head_dim=spec.head_dim, state=spec.state_size,
                           groups=spec.n_groups, conv_kernel=spec.conv_kernel, chunk=spec.chunk_size, norm=norm,
                           conv_bias=spec.conv_bias, proj_bias=spec.proj_bias, dropout=m.hidden_dropout_on)
    return Mamba1Block(h=m.hidden_size, d_inner=spec.d_inner, state=spec.state_size, conv_kernel=spec.conv_kernel,
                       dt_rank=spec.dt_rank, norm=norm, conv_bias=spec.conv_bias, proj_bias=spec.proj_bias,
                       inner_norms=spec.inner_norms)
