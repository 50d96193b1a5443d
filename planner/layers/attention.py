"""Softmax attention mixers: global (MHA / GQA / MQA), sliding window, chunked, each with or
without rotary positions (NoPE) and Qwen3-Next's output gate; and multi-head latent attention
(MLA). Units: parameters, FLOPs, bytes, per micro-batch of T tokens on one GPU unless said.

Parameters (Vaswani et al. 2017; GQA after Ainslie et al. 2023 [1]): Q h (a d) (x2 with an
output gate: q_proj emits the query and a per-dimension gate [5]), K and V 2 h (k d), output
(a d) h; biases a d (2 a d gated) + 2 k d + h where the model has linear biases; one pre-norm.
MLA (DeepSeek-V2 sec. 2.1 [2]): q_a h r_q, q_b r_q a (d_nope + d_rope) (h a (d_nope + d_rope)
without a query latent), kv_a h (r_kv + d_rope), kv_b r_kv a (d_nope + d_v), output a d_v h,
an RMSNorm on each latent; the two down projections and the latent norms are replicated across
TP (Megatron-Core MLASelfAttention builds them "duplicated").

Attention core. A query at position i (0-based) of a causal layer attends to keys
  global    0 .. i                               i + 1 keys
  sliding   max(0, i - w + 1) .. i               min(i + 1, w)       (Mistral 7B sec. 2 [3])
  chunked   c floor(i / c) .. i                  (i mod c) + 1       (Llama 4 [4])
Forward core FLOPs per query are 4 a d x keys (QK^T and AV, 2 FLOPs per multiply-add;
PaLM App. B [6]). Over a sequence of s tokens the mean number of keys, taken continuous as
the global layer's s/2 is (the +1/2 per query is dropped everywhere alike), is
  global    s / 2
  sliding   w - w^2 / (2 s) for w < s, else s / 2       (the first w queries ramp up: w^2/2)
  chunked   (n c^2 + r^2) / (2 s), s = n c + r          (each chunk a small global layer)
which is what the causal kernel runs (FlashAttention skips masked blocks; sliding-window and
chunked masks skip the blocks outside the window). The model-FLOP convention counts keys
without the causal mask (PaLM's 12 L a d s per token): the key range a query's block spans,
s for global, min(s, w) sliding, min(s, c) chunked; `causal_attention_flops` counts the mean
above instead. MLA's core runs QK^T at d_nope + d_rope and AV at d_v: it is priced as a
global layer of one key/value head per query head at their mean (ModelSpec.core_head_dim).

Context parallelism (ring attention, Liu et al. 2023 [7]): each rank runs its queries against
every rank's keys, one kernel per ring step, while the local K and V travel round the CP ring
(cp - 1 steps after the first); the backward passes K, V and their gradients. How each stack
exchanges them, what the exchange runs beside and the merges it adds are the stack's
(schema.ContextParallelSpec, planner/step.py cp_comm); a layer says what moves (cp_ring).
A windowed layer needs only the ranks whose tokens lie within reach of its own (contiguous
sequence chunks of s / cp tokens): min(cp - 1, ceil((w - 1) / (s / cp))) sends for a window w
(chunk c: c - 1); a named approximation, since Megatron's load-balanced CP splits the
sequence into 2 cp pieces (the reach is then no shorter).

Eager core attention (attention: eager; Megatron-LM before FlashAttention, Megatron-Core's local
DotProductAttention [9]): a batched GEMM writes every score of the [b a/t, s, s] matrix (the
mask is applied after it: no causal skip), a scale-mask-softmax kernel and the attention
dropout each pass over it, a second batched GEMM reads it against V. The GEMMs, each over the
b a/t (query, key) matrices of the micro-batch on one GPU, taken as one GEMM of M = T a/t rows
(the same FLOPs and output tiles), at s = the sequence's keys and d = the head dim:
  forward   scores  Q K^T   [T a/t, s, d]       context  P V     [T a/t, d, s]
  backward  dP = dO V^T     [T a/t, s, d]       dV = P^T dO, dQ = dS K, dK = dS^T Q   [T a/t, d, s]
each 2 d FLOPs a score element; their time and the softmax's and dropout's bytes are
compute.eager_core_terms'. MLA is taken at its mean head dim (as its kernel FLOPs). With ALiBi
positions the forward's scores GEMM also takes the bias as its input ([12]: a copy into the score
buffer, 2 B a score element written, and the GEMM's read of it, 2 B a score element).

Activations (Korthikanti et al. 2022 sec. 4.1 [8], planner/memory.py's derivation): the
block input 2h and its norm output 2h (replicated unless SP), Q 2ad (with the gate 4ad), K
and V 2kd each (per local KV head), the core output 2ad; eager attention (no FlashAttention)
also the softmax output 2a and its dropout (3a) per key; dropout mask h where the model has
dropout; with a fused (flash) core its fp32 softmax statistics, 4 B a query head (softmax_lse, [ls]).

References
[1] Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from
    Multi-Head Checkpoints", arXiv:2305.13245.
[2] DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434, sec. 2.1 (MLA), eqs. 9-19.
[3] Jiang et al. 2023, "Mistral 7B", arXiv:2310.06825, sec. 2 (sliding window attention,
    W = 4096: "each hidden state can attend to at most W tokens of the previous layer").
[4] Meta, Llama 4 (transformers models/llama4/modeling_llama4.py, `attention_chunk_size`:
    chunked attention layers attend within fixed 8,192-token chunks; every fourth layer is a
    NoPE global layer, no_rope_layer_interval 4).
[5] Qwen Team 2025, Qwen3-Next model card and transformers models/qwen3_next
    (Qwen3NextAttention: q_proj out_features num_heads x head_dim x 2, query and gate;
    output = o_proj(attn x sigmoid(gate))).
[6] Chowdhery et al. 2022, "PaLM", Appendix B: 6N + 12 L H Q T FLOPs per token.
[7] Liu et al. 2023, "Ring Attention with Blockwise Transformers for Near-Infinite Context".
[8] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models".
[9] NVIDIA/Megatron-LM @50a4b5fa02 (2021-04-08) megatron/model/transformer.py
    ParallelAttention.forward l. 271-332 (torch.baddbmm of query [b np, sq, hn] and key
    [b np, hn, sk], scale_mask_softmax, attention_dropout, torch.bmm of the probabilities
    [b np, sq, sk] and value [b np, sk, hn]); the same at @d98e8a64
    megatron/core/transformer/dot_product_attention.py DotProductAttention.forward l. 189-239.
[11] A window as a dense additive mask (stack windowed_attention; litgpt v0.4.11 litgpt/model.py l. 269-287,
    313-315): the code builds one [s, s] mask in the activations' dtype for each windowed layer (the causal
    triangle and the window's band in one) and hands it to F.scaled_dot_product_attention with is_causal False.
    The kernel then runs every (query, key) pair of the square: forward FLOPs 4 T a d / t x s (twice the causal
    kernel's at s <= w, dense_mask_kernel_flops), hardware FLOPs per token 12 a d s (dense_mask_model_flops),
    the model-FLOP convention unchanged (a model property); and the kernel's backward keeps the mask, mask_bytes
    x s^2 per windowed layer and micro-batch (dense_mask_bytes: one mask, broadcast over the micro-batch's
    sequences and the heads).
[10] Query/key norms (ModelSpec.qk_norm): transformers models/qwen3/modeling_qwen3.py Qwen3Attention and
    models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeAttention (q_norm, k_norm = RMSNorm(head_dim), applied
    to the projected query and key per head before RoPE), models/gemma3 Gemma3Attention and
    models/qwen3_next Qwen3NextAttention alike; Megatron-Core --qk-layernorm (NVIDIA/Megatron-LM @d98e8a64
    megatron/core/transformer/attention.py l. 1707-1740: with qk_layernorm, q_layernorm / k_layernorm
    are TENorm (Transformer Engine's norm) of hidden_size_per_attention_head; SelfAttention.
    get_query_key_value_tensors l. 1932-1936: query = q_layernorm(query), key = k_layernorm(key) after
    the split of the QKV output, before the rotary). The norm saves its input for the backward (the
    split's Q and K: the rotary and the core save their own outputs) and its per-row fp32 inverse RMS
    (4 B a head a token, 4 / d B an element: 3% of the input at d 128, not counted). Timed at the
    stack's norm / norm_bwd bytes per element, the kernel its layer norms run.
[12] ALiBi in the eager core (Press et al. 2022, "Train Short, Test Long", arXiv:2108.12409: a per-head linear bias
    on the attention scores, no parameters), as the only eager core with ALiBi the planner prices runs it
    (Megatron-LM has none: BigScience's Megatron-DeepSpeed fork, which trained BLOOM):
    bigscience-workshop/Megatron-DeepSpeed @8387ae17 megatron/model/transformer.py l. 490-498 (each layer builds a
    [micro-batch x heads/tp, 1, s] bias in the parameters' dtype, _build_alibi_tensor l. 592-619) and l. 283-291,
    313-327 (the bias is the score buffer's input: matmul_result = alibi[...], torch.baddbmm(matmul_result, q, k^T,
    beta=1 (1 / layer number with query-key layer scaling), alpha=1 / norm_factor)); without ALiBi the same call
    takes an empty buffer with beta=0. PyTorch's CUDA baddbmm (pytorch/pytorch @002253ce
    aten/src/ATen/native/cuda/Blas.cpp baddbmm_out_cuda, baddbmm_out_cuda_impl): the input is expanded to
    [b a/t, s, s] and, beta != 0, copied into the result (result.copy_(self)), then cuBLAS's bgemm runs with that
    beta, reading C before writing it. So, per score element, 2 B written by the copy (its broadcast source, M
    elements, read once) and 2 B read by the GEMM (eager_core's alibi_copy and alibi_read: compute.eager_core_terms
    times the copy at the streaming rate and adds the read to the scores GEMM's traffic). The bias needs no
    gradient (a plain tensor attribute): the backward is unchanged. Not counted: the bias tensors themselves
    (2 B x b a/t x s a layer, 0.22 MiB for BLOOM-176B at TP 4, micro-batch 2).
[13] Padded chunks (stack chunked_attention.pads_last_chunk; Attention.chunk_padded, set by plan._stack_chunks where
    seq > c): NVIDIA-NeMo/Megatron-Bridge @dc805f5cf src/megatron/bridge/models/llama/llama4_utils.py
    Llama4SelfAttention.forward l. 294-302 runs chunkify (l. 78-122) on q, k and v wherever the sequence is longer
    than the chunk: torch.cat with zeros to n' = ceil(s / c) whole chunks (l. 98-104), reshape, transpose and
    reshape(...).contiguous() into [c, n' b, heads, d] (l. 113-120: the chunk and batch dims do not merge as a view,
    so a copy), handed to Transformer Engine's causal attention as n' b sequences of c. The kernel runs the last
    chunk whole (its zero-padded queries too; the causal mask keeps the real queries off the zero keys, which sit
    after them), so a sequence runs n' c^2 / 2 keys, mean keys n' c^2 / (2 s) a token (mean_causal_keys padded),
    against (n c^2 + r^2) / (2 s) for the real part (torchtitan's FlexAttention mask, get_fixed_block_mask_mod,
    runs no padding). Hardware FLOPs and the kernel's time count the padded chunk; the model-FLOP convention
    (MFU) does not (a model property). Saved: TE's FusedAttnFunc saves the q, k, v it is given and its output
    (NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/dot_product_attention/backends.py
    l. 1535-1569: f16_tensors = (q, k, v, out_f16) to ctx.save_for_backward): q (after the rotary on a RoPE layer,
    whose input, the chunkify copy, is then freed; the copy itself on a NoPE layer), k and v, each p = n' c / s
    times the unpadded tensor (chunk_pad_factor, Attention.tensors), and its output, p x 2 a d / t a token. The
    output is folded back (l. 417-426: reshape, transpose, reshape to [n' c, b, a d], a copy for the same reason,
    then [:s], a view of it) and that view is the output projection's input, which it saves (its storage p x) where
    it saves a bf16 input; under fp8 it saves its own quantized tensor of the s real tokens and the copy is freed.
    So beside attn_out's 2 a d / t a token (in Megatron the core's output and the projection's input are one tensor)
    the layer keeps TE's padded output and the copy's padding: memory.py [pc] (chunk_out_elements). The torch.cat
    copy (l. 104) is freed inside chunkify: a transient of one layer's forward, not priced. The packed (THD) path splits cu_seqlens
    at the chunk boundaries instead (l. 279-293), no padding: not priced (the planner prices no packed sequences).
[14] Chunking by the CP rank's sequence (stack chunked_attention.cp_local_sequence; Attention.chunk_local, set by
    plan._stack_chunks where seq > c): NVIDIA-NeMo/Megatron-Bridge @dc805f5cf llama4_utils.py Llama4SelfAttention.forward
    l. 294-302 tests original_seq_len = query.shape[0] against the chunk, and under context parallelism the query is
    the CP rank's s / cp tokens (the layer's hidden_states are [s / (cp t), b, h] under SP, [s / cp, b, h] without;
    the QKV projection gathers the TP shards, Megatron-Core's get_query_key_value_tensors). So at cp > 1 and
    s / cp <= c nothing is chunkified: q, k, v go whole to Transformer Engine's core attention, with attn_mask_type
    causal and the CP group, i.e. causal attention over the whole sequence through the CP ring, every layer global
    (the chunked RoPE layers and the NoPE ones). Priced so, per plan (cp is searched): Attention.chunk_at gives the
    sequence itself as the chunk there (np.where on cp), at which mean_causal_keys is s / 2, span_keys s,
    chunk_pad_factor 1 and cp_sends cp - 1: the global layer's FLOPs, saved tensors and ring. At cp 1, and at
    s / cp > c, the model's chunk; there the code asserts s / cp a multiple of 2 cp and s / (2 cp^2) a multiple of c
    (l. 304-307, start-up rule BRIDGE_CHUNK_CP), so no padding runs under cp > 1. Model FLOPs (MFU) follow the
    layer the code trains, as plan._stack_chunks' NoPE layers do: global where it runs global.
[ls] The fused core's saved softmax statistics (Attention.tensors, MLA.tensors: "softmax_lse"; issue 21). Every flash
    kernel a stack runs saves, beside q, k, v and its output, one fp32 log-sum-exp per query head and query token for
    its backward (which rebuilds the probabilities from it, FlashAttention [3] of planner/memory.py):
    FlashAttention-2: Dao-AILab/flash-attention @0251105a csrc/flash_attn/flash_api.cpp l. 464 (mha_fwd: softmax_lse
    = torch::empty({batch_size, num_heads, seqlen_q}, kFloat)) and flash_attn/flash_attn_interface.py l. 869
    (FlashAttnFunc.forward: ctx.save_for_backward(q, k, v, out_padded, softmax_lse, rng_state)); PyTorch SDPA's flash
    backend (torchtitan's SDPA flash, litgpt's SDPA), the same kernel: pytorch/pytorch @03b7c19d
    aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp mha_fwd (softmax_lse at::empty({batch_size,
    num_heads, seqlen_q}, kFloat), returned as _scaled_dot_product_flash_attention's logsumexp, which its backward
    takes); FlexAttention (torchtitan 0.3) saves the same fp32 logsumexp (stack_db torchtitan-0.3 attention_kernels);
    Transformer Engine's fused attention (Megatron): NVIDIA/TransformerEngine @4329ff84
    transformer_engine/common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu l. 1143-1150 (cuDNN's Stats, [b, h,
    s_q, 1] kFloat32; [t, h, 1] for THD) and fused_attn_fp8.cu l. 1129-1134 (the FP8 backend's M, [b, h, s_q, 1]
    kFloat32: one fp32 tensor as well), saved as aux_ctx_tensors (pytorch/attention/dot_product_attention/
    backends.py FusedAttnFunc.forward l. 1555-1569); TE's FlashAttention backend is flash-attn's. Per GPU: the local
    query heads (a / t; MLA's a) x 4 B x the local tokens (under CP each rank's s / cp: TE's CP attentions save one
    merged [b, a/t, s/cp] lse, or [b, a/(t cp), s] under a2a, the same count, planner/memory.py [cp5]), sliding and
    chunked layers alike (one statistic a query, whatever its keys); a padded chunked layer's p x [13]. Kept with the
    core's saved state: dropped where a selective policy re-runs the core (Megatron's core_attn, the run's
    selective_recomputes_attention), kept by torchtitan's op-level policy, which saves the SDPA op's outputs (memory.py
    selective_drops), re-made in the recompute buffer with the layer under full recompute. Eager cores save their
    softmax output instead ("scores"): no statistics. The rows' padding of two kernels: [ls2]. Not priced: TE's
    max_logit (read at @4329ff84: nothing saved, [ls2]) and the rng state (2 int64 a layer).
[ls2] Kernels that pad the statistics' rows (Ctx.lse_align, lse_align_windowed: stack memory.attention_lse_align,
    windowed_attention.lse_align; lse_rows_factor): each sequence's local queries s' rounded up to a multiple of m,
    ceil(s' / m) m rows a head, saved whole. PyTorch's memory-efficient SDPA kernel, which litgpt's windowed layers
    run (a float attn_mask rules out the flash backend, [11]): pytorch/pytorch @e129513e
    aten/src/ATen/native/transformers/cuda/attention.cu _efficient_attention_forward (logsumexp = at::empty({B,
    num_heads, compute_logsumexp ? ceil_div(max_seqlen_q, kAlignLSE) * kAlignLSE : 0}, kFloat), kAlignLSE =
    Kernel::kAlignLSE: 32, "block size of backward", in mem_eff_attention/kernel_forward.h, read in the public code
    index, not at a pinned commit; litgpt's stack pins no PyTorch), returned as the op's
    logsumexp and taken by _efficient_attention_backward: m 32. llm-foundry's Triton FlashAttention (attn_impl
    triton, the stack's kernel): mosaicml/llm-foundry @b2a43a147 llmfoundry/models/layers/flash_attn_triton.py
    _flash_attn_forward l. 617-618 (seqlen_q_rounded = math.ceil(seqlen_q / 128) * 128; lse = torch.empty((batch,
    nheads, seqlen_q_rounded), float32)), FlashAttnFunc.forward l. 819 (ctx.save_for_backward(q, k, v, o, lse,
    bias)): m 128 (its `tmp` buffer of the same shape is a forward transient, not saved). 0 at every sequence a
    multiple of m (4,096: none). TE's max_logit (Megatron's qk_clip / log_max_attention_logit, default off,
    transformer_engine.py @d98e8a64 l. 2219-2224; TE @4329ff84 DotProductAttention return_max_logit default False):
    when on, cpp_extensions/fused_attn.py l. 343-390 takes the Max tensor out of aux_ctx_tensors (Stats + rng_state
    only) and reduces it to [h] in the forward: nothing more saved for the backward, so nothing priced either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .common import ACT_BYTES, BlockParams, kv_local, shapes

SOFTMAX_LSE_BYTES = 4.0  # the fused core's fp32 log-sum-exp, one a query head and query token [ls]


def dense_windows(stack, mixer) -> bool:
    """Whether the stack runs this mixer's window as a dense [s, s] mask (stack windowed_attention [11]): a stack
    setting and the layer kind's window, never a searched quantity."""
    return (stack is not None and getattr(stack, "windowed_attention", None) is not None
            and getattr(mixer, "window", None) is not None)


def mean_causal_keys(seq, window=None, chunk=None, padded: bool = False):
    """Mean keys a query attends to over a causal sequence of `seq` tokens (module docstring); padded (a stack
    setting [13]): where seq > chunk the last, partial chunk runs whole, ceil(s / c) c^2 / (2 s)."""
    s = np.asarray(seq, dtype=np.float64)
    if window is not None:
        w = float(window)
        return np.where(w < s, w - w * w / (2.0 * s), s / 2.0)
    if chunk is not None:
        c = np.asarray(chunk, dtype=np.float64)  # per plan where the stack's chunking reads cp [14]
        n = np.floor(s / c)
        r = s - n * c
        real = (n * c * c + r * r) / (2.0 * s)
        if not padded:
            return real
        return np.where(s > c, np.ceil(s / c) * c * c / (2.0 * s), real)
    return s / 2.0


def chunk_pad_factor(seq, chunk, padded: bool):
    """Tokens a padded chunked layer runs per real token [13]: ceil(s / c) c / s where s > c, else 1 (no chunkify);
    1 for a layer that is not padded."""
    s = np.asarray(seq, dtype=np.float64)
    if not padded or chunk is None:
        return np.ones(s.shape)
    c = np.asarray(chunk, dtype=np.float64)
    return np.where(s > c, np.ceil(s / c) * c / s, 1.0)


def lse_rows_factor(ctx, align):
    """Log-sum-exp rows a kernel allocates per query over the queries [ls2]: ceil(s' / m) m / s' for a kernel that
    rounds each sequence's s' = s / cp local queries up to a multiple of m (PyTorch's memory-efficient SDPA kernel
    32, llm-foundry's Triton FlashAttention 128); 1 where m is 0 (the flash kernels: exactly s')."""
    m = np.asarray(align, dtype=np.float64)
    s = np.asarray(ctx.seq, dtype=np.float64) / np.asarray(ctx.cp, dtype=np.float64)
    mm = np.where(m > 0, m, 1.0)
    return np.where(m > 0, np.ceil(s / mm) * mm / s, 1.0)


def eager_core(T, heads_local, seq, d, alibi: bool = False) -> dict:
    """The eager core's score elements per micro-batch on one GPU (T tokens x local heads x the
    sequence's keys: the batched GEMMs compute every key) and its batched GEMMs [9] as
    [(GemmShape, count)] rows, forward and backward (module docstring); keys: the score rows'
    length (the softmax kernel the stack picks by it); traffic: each GEMM's
    compulsory bytes, the score matrix and two d-wide operands, 16-bit (compute.eager_core_terms).
    alibi (a model with ALiBi positions [12]): the forward's scores GEMM adds the bias through
    baddbmm's input, so also "alibi_copy", the bytes of the copy that expands the [b a/t, 1, s] bias
    into the score buffer (the bias read once, M elements, every score element written), and
    "alibi_read", the bytes the GEMM reads back as its beta term (every score element)."""
    seq = np.asarray(seq, dtype=np.float64)
    M = T * heads_local
    out = {"scores": M * seq, "keys": seq, "traffic": ACT_BYTES * M * (seq + 2.0 * d),
           "fwd": shapes([("eager_scores", M, seq, d, 1.0), ("eager_context", M, d, seq, 1.0)]),
           "bwd": shapes([("eager_scores", M, seq, d, 1.0), ("eager_context", M, d, seq, 3.0)])}
    if alibi:  # a model property (ModelSpec.position_embedding), not a searched quantity
        out["alibi_copy"] = ACT_BYTES * (M * seq + M)
        out["alibi_read"] = ACT_BYTES * M * seq
    return out


def span_keys(seq, window=None, chunk=None):
    """Keys a query's block spans without the causal mask (the model-FLOP convention)."""
    s = np.asarray(seq, dtype=np.float64)
    reach = window if window is not None else chunk
    return s if reach is None else np.minimum(s, np.asarray(reach, dtype=np.float64))


@dataclass(frozen=True)
class Attention:
    """Softmax attention: global (window = chunk = None), sliding (window) or chunked (chunk)."""

    h: int
    a: int  # query heads
    k: int  # key/value heads
    d: int  # head dim
    norm: int  # pre-norm parameters
    bias: bool = False
    rope: bool = True
    gate: bool = False
    dropout: bool = False  # the hidden dropout's mask after the block (ModelSpec.hidden_dropout_on)
    score_dropout: bool = False  # the attention dropout on the eager core's scores (ModelSpec.attention_dropout_on)
    window: Optional[int] = None
    chunk: Optional[int] = None
    rope_scaled: bool = False  # cos/sin carry a factor (ModelSpec.rope_attention_factor != 1): the stack's rope_scaled bytes
    qk_norm: bool = False  # an RMSNorm over each head's query and key (ModelSpec.qk_norm) [10]
    alibi: bool = False  # ALiBi positions (ModelSpec.position_embedding alibi): the eager core's bias path [12]
    chunk_padded: bool = False  # the stack pads the sequence to whole chunks (chunked_attention.pads_last_chunk) [13]
    chunk_local: bool = False  # the stack chunks by the CP rank's s / cp (chunked_attention.cp_local_sequence) [14]

    kind = "attention"
    has_core = True  # the attention core: FlashAttention rates, recomputed by selective recompute
    selective_core = True
    cp_overlaps_core = True  # ring attention's K/V sends run beside the core [7]
    tp_pairs = (1.0,)  # one TP collective pair (all-reduce, or RS + AG under SP) each way
    sp_input_gemm = "qkv"  # the column-parallel GEMM whose T h input the SP all-gather feeds (step.py [35])

    @property
    def tp_synced(self) -> float:
        """h-element tensors duplicated over TP that BigScience's --sync-tp-duplicated-parameters all-reduces each forward
        (step.tp_comm [sy]): the pre-norm's (LayerNorm: weight and bias; RMSNorm: weight) and the output projection's
        bias (the fork builds no query/key norms)."""
        return self.norm / self.h + (1.0 if self.bias else 0.0)

    @property
    def label(self) -> str:
        return self.label_at()

    def label_at(self, seq=None, cp=1) -> str:
        """label, for one plan (seq, cp: scalars; None: the model's own): a chunked layer that chunk_at runs global
        (the stack chunks by the CP rank's sequence and s / cp <= c at cp > 1 [14]) says so, "chunked(8192; run global
        at cp 2)", as it is priced."""
        chunk = self.chunk
        if chunk is not None and seq is not None and float(self.chunk_at(seq, cp)) != float(chunk):
            chunk = f"{chunk}; run global at cp {int(cp)}"
        base = "global" if self.window is None and self.chunk is None else (
            f"sliding({self.window})" if self.window is not None else f"chunked({chunk})")
        return base + ("" if self.rope else " nope") + (" gated" if self.gate else "")

    def chunk_at(self, seq, cp=1.0):
        """The chunk the layer runs, per plan: the model's chunk (None for a global or sliding layer), but, where the
        stack chunks by the CP rank's sequence (chunk_local, a stack setting) and s / cp <= c at cp > 1, the
        sequence itself: the code chunkifies nothing and the layer is global attention (mean_causal_keys, span_keys,
        chunk_pad_factor and cp_sends at c = s are the global layer's) [14]."""
        if self.chunk is None or not self.chunk_local:  # a model / stack setting, not a searched quantity
            return self.chunk
        s, cp = np.asarray(seq, dtype=np.float64), np.asarray(cp, dtype=np.float64)
        return np.where((cp > 1.0) & (s / cp <= float(self.chunk)), s, float(self.chunk))

    def chunk_of(self, ctx):
        """chunk_at for a plan's Ctx, at the plan's whole CP degree (ctx.plan.cp: the code tests the CP group's world
        size, which a2a+p2p's ring context, ctx.cp = the ring's ranks, does not change)."""
        return self.chunk_at(ctx.seq, ctx.plan.cp)

    # ------------------------------------------------------------------ parameters
    def params(self) -> BlockParams:
        h, a, k, d, g = self.h, self.a, self.k, self.d, 2 if self.gate else 1
        split = g * h * (a * d) + 2 * h * (k * d) + (a * d) * h
        col = g * a * d + 2 * k * d if self.bias else 0  # the QKV biases, split with their outputs
        row = h if self.bias else 0  # the output projection's, whole on every TP rank (common.py [rb])
        qk = 2 * d if self.qk_norm else 0  # q_norm and k_norm: one weight of head_dim each, shared by the heads [10]
        return BlockParams(split=split + col, replicated=self.norm + qk + row, split_bias=col, row_bias=row, qk_norm=qk)

    def muon_matrices(self, tp=None) -> tuple:
        """The whole 2-D matrices Megatron's Muon orthogonalizes one by one (common.py [mu], [ns]): (rows, cols, count,
        group: split, rep or expert). linear_qkv split per query group into q (a d rows; with the output gate a second a d) and k, v (k d
        each) under --muon-split-qkv, the default (emerging_optimizers.py @d98e8a64 _get_qkv_split_shapes l. 150-162,
        TensorParallelMuon.orthogonalize l. 404-430); linear_proj h x a d, listed transposed (split on a d, its input:
        common.py [ns]).

        tp (the plans' int64 degrees, or None: every TP rank holds whole query groups): Megatron tags linear_qkv
        for the split only where the TP rank's shard, (g a + 2 k) d / tp rows, is a whole number of query groups of
        (g a / k + 2) d rows (megatron/core/optimizer/__init__.py @d98e8a64 l. 790-803: param.shape[0] %
        sum(qkv_split_shapes) == 0, else 'Emerging optimizer QKV split skipped'), i.e. where tp divides k; at tp > k
        (attention.py l. 353-364: a rank holds part of one group, the layer all-gathers mixed_qkv, l. 1853-1870) the
        split is skipped and the shard is orthogonalized as one tensor (whole linear_qkv after the duplicated mode's
        gather, the rank's (g a + 2 k) d / tp rows under blockwise: muon_local), as under --muon-no-split-qkv.
        Vectorized: the q entry is the whole linear_qkv there and the k / v entry's count 0 (no matrix, no GEMM, no
        gather)."""
        h, ad, kd = self.h, self.a * self.d, self.k * self.d
        g = 2 if self.gate else 1
        if tp is None:
            return ((ad, h, g, "split"), (kd, h, 2, "split"), (ad, h, 1, "split"))
        whole = np.mod(self.k, np.asarray(tp, dtype=np.int64)) == 0  # the rank's shard holds whole query groups
        return ((np.where(whole, float(ad), float(g * ad + 2 * kd)), h, np.where(whole, float(g), 1.0), "split"),
                (kd, h, np.where(whole, 2.0, 0.0), "split"), (ad, h, 1, "split"))

    def muon_params(self) -> tuple:
        """The 2-D parameters Muon steps (LayerKind.muon_params): linear_qkv one tensor ((2 if the output gate) a d
        + 2 k d rows x h), which muon_matrices splits per query group, and linear_proj h x a d (listed transposed,
        common.py [ns]). Also the matrices Muon orthogonalizes under --muon-no-split-qkv (the job's muon_split_qkv
        false: TensorParallelMuon.orthogonalize runs linear_qkv whole, emerging_optimizers.py @d98e8a64 l. 407)."""
        h, ad, kd = self.h, self.a * self.d, self.k * self.d
        return (((2 if self.gate else 1) * ad + 2 * kd, h, 1, "split"), (ad, h, 1, "split"))

    # ------------------------------------------------------------------ compute
    def gemms(self, ctx):
        """Forward GEMMs: qkv [T, (g a/t + 2 max(k/t, 1)) d, h], attn_out [T, h, a d/t]."""
        tp, T, d = ctx.tp, ctx.T, self.d
        q = (2.0 if self.gate else 1.0) * self.a / tp
        return shapes([("qkv", T, (q + 2.0 * kv_local(self.k, tp)) * d, self.h, 1.0),
                       ("attn_out", T, self.h, self.a * d / tp, 1.0)])

    def projection_shares(self, ctx) -> dict:
        """Share of each forward GEMM that one projection is (selective recompute of projections)."""
        q = (2.0 if self.gate else 1.0) * self.a / ctx.tp
        kv = kv_local(self.k, ctx.tp)
        return {"q": ("qkv", q / (q + 2.0 * kv)), "k": ("qkv", kv / (q + 2.0 * kv)), "v": ("qkv", kv / (q + 2.0 * kv)),
                "o": ("attn_out", 1.0)}

    @property
    def core_rate_head_dim(self) -> int:
        """The head dim the attention kernel's rate is read at (compute.attention_head_dim_factor)."""
        return self.d

    def core_kernel_flops(self, ctx):
        """Forward FLOPs the causal kernel runs for one micro-batch on one GPU: 4 T a d / t x
        mean keys (the local queries of a CP rank attend, over the ring, to the keys a whole
        sequence's queries do)."""
        return 4.0 * ctx.T * self.a * self.d / ctx.tp * mean_causal_keys(ctx.seq, self.window,
                                                                          self.chunk_of(ctx),
                                                                          self.chunk_padded)

    def eager_core(self, ctx) -> dict:
        """Eager core attention's score elements and batched GEMMs (module docstring, [9])."""
        return eager_core(ctx.T, self.a / ctx.tp, ctx.seq, float(self.d), self.alibi)

    def dense_mask_kernel_flops(self, ctx):
        """Forward FLOPs of the kernel a dense mask runs [11]: every key of the sequence for every local query,
        4 T a d / t x s (no causal or window skip)."""
        return 4.0 * ctx.T * self.a * self.d / ctx.tp * np.asarray(ctx.seq, dtype=np.float64)

    def dense_mask_model_flops(self, seq):
        """FLOPs per token, forward and backward, of the kernel a dense mask runs [11]: 12 a d s."""
        return 12.0 * self.a * self.d * np.asarray(seq, dtype=np.float64)

    def dense_mask_bytes(self, ctx, mask_bytes: float):
        """Bytes of the one [s, s] mask a windowed layer keeps for its backward per micro-batch [11] (0 for a
        layer without a window)."""
        s = np.asarray(ctx.seq, dtype=np.float64)
        return (0.0 if self.window is None else 1.0) * mask_bytes * s * s

    def core_model_flops(self, seq, causal: bool, cp=1.0):
        """Model FLOPs per token, forward and backward (3x forward): 12 a d x keys [6]; cp: the plans' CP degree,
        which decides the chunk where the stack chunks by the CP rank's sequence (chunk_at [14])."""
        c = self.chunk_at(seq, cp)
        keys = mean_causal_keys(seq, self.window, c) if causal else span_keys(seq, self.window, c)
        return 12.0 * self.a * self.d * keys

    def padded_chunk_flops(self, seq, cp=1.0):
        """FLOPs per token, forward and backward, the causal kernel runs on a padded chunked layer [13]: 12 a d x
        ceil(s / c) c^2 / (2 s) where s > c (compute._core_flops with kernels: HFU's hardware FLOPs)."""
        return 12.0 * self.a * self.d * mean_causal_keys(seq, self.window, self.chunk_at(seq, cp), self.chunk_padded)

    def chunk_out_elements(self, ctx):
        """Elements per micro-batch on one GPU of the padded layer's output, T a d / t, where the stack runs it
        through chunkify (s > c, padded) and 0 elsewhere; with chunk_pad_factor, what memory.py [pc] prices of TE's
        padded output and its folded-back copy [13]."""
        if not self.chunk_padded:  # a stack setting on the layer kind, not a searched quantity
            return np.zeros(np.shape(ctx.seq))
        s = np.asarray(ctx.seq, dtype=np.float64)
        return np.where(s > self.chunk_of(ctx), ctx.T * self.a * self.d / ctx.tp, 0.0)

    def qk_norm_elements(self, ctx):
        """Elements of Q and K one GPU's query/key norms run over per micro-batch, T (a/t +
        max(k/t, 1)) d; 0 without them [10]."""
        return ctx.T * (self.a / ctx.tp + kv_local(self.k, ctx.tp)) * self.d * (1.0 if self.qk_norm else 0.0)

    def elementwise_bytes(self, ctx, kb, sfx):
        """Memory-bound bytes per micro-batch (sfx "" forward, "_bwd" backward): pre-norm,
        residual add, dropout, output bias (replicated unless SP), rotary on Q and K (the stack's
        rope_scaled figures where the cos/sin carry a factor: Megatron-Core runs its unfused rotary
        then, rope_utils.apply_rotary_pos_emb @0d8e0714 lines 279-284), QKV biases, and the
        query/key norms at the stack's norm bytes per element [10]."""
        h, tp, rope = self.h, ctx.tp, (1.0 if self.rope else 0.0)
        bias = kb["bias"] * (1.0 if self.bias else 0.0)
        drop = 1.0 if self.dropout else 0.0
        kv = kv_local(self.k, tp)
        return (ctx.T * ((kb["norm" + sfx] * h + kb["residual" + sfx] * h + kb["dropout" + sfx] * drop * h + bias * h)
                         / ctx.rep_div
                         + rope * kb["rope" + sfx] * (self.a / tp + kv) * self.d
                         + bias * (self.a / tp + 2.0 * kv) * self.d) + self.unfused_bytes(ctx, kb, sfx)
                + kb["norm" + sfx] * self.qk_norm_elements(ctx))

    def unfused_bytes(self, ctx, kb, sfx):
        """The part of elementwise_bytes the stack runs outside its fused kernels: the unfused
        rotary's bytes beyond the fused one's (rope_scaled - rope), where the cos/sin carry a
        factor or the job turns the rope fusion off (kb unfused_rope: Megatron-Core runs
        _apply_rotary_pos_emb_bshd either way); and, where the job turns the bias-dropout-add
        fusion off, the output projection's bias add (bias_unfused, forward; a model with linear
        biases only: without one the unfused path runs the kernels priced already)."""
        rope = (1.0 if self.rope else 0.0) * np.maximum(1.0 if self.rope_scaled else 0.0, kb["unfused_rope"])
        extra = rope * (kb["rope_scaled" + sfx] - kb["rope" + sfx])
        bda = kb["unfused_bias_dropout"] * kb["bias_unfused"] * (1.0 if self.bias and not sfx else 0.0)
        return ctx.T * (extra * (self.a / ctx.tp + kv_local(self.k, ctx.tp)) * self.d + bda * self.h / ctx.rep_div)

    def cast_elements(self, ctx):
        """fp8: elements cast per forward, the GEMM inputs (h into QKV, a d into the output
        projection) and the weights."""
        tp, h, a, d = ctx.tp, self.h, self.a, self.d
        return ctx.T * (h + a * d / tp) + (h * (a / tp + 2.0 * kv_local(self.k, tp)) * d + a * d / tp * h)

    # ------------------------------------------------------------------ memory
    def tensors(self, ctx, attention: str) -> dict:
        """Activation table, bytes per token (common.py kinds); with query/key norms, their bf16
        inputs (the projection's Q and K before the norm, a d and k d), which the norms save and
        the rotary and the core do not [10]."""
        h, a, k, d = self.h, self.a, self.k, self.d
        drop = 1.0 if self.dropout else 0.0
        sdrop = 1.0 if self.score_dropout else 0.0  # the attention dropout's mask and output (eager core)
        p = chunk_pad_factor(ctx.seq, self.chunk_of(ctx), self.chunk_padded)  # 1 but padded chunks [13]
        table = {
            "input": (2.0 * h, "rep"), "norm1_out": (2.0 * h, "rep"),
            "q": ((2.0 * p + (2.0 if self.gate else 0.0)) * a * d, "split"), "attn_out": (2.0 * a * d, "split"),
            "k": (2.0 * k * d * p, "kv"), "v": (2.0 * k * d * p, "kv"),
            "scores": ((2.0 + 3.0 * sdrop) * a if attention != "flash" else 0.0, "score"),
            "dropout_masks": (drop * h, "rep"),
            # [ls]; a kernel that pads its statistics' rows per sequence [ls2]: the stack's dense-mask (windowed) kernel
            # for a windowed layer (Ctx.lse_align_windowed), else its fused core's (Ctx.lse_align)
            "softmax_lse": (SOFTMAX_LSE_BYTES * a * p * lse_rows_factor(
                ctx, ctx.lse_align_windowed if self.window is not None else ctx.lse_align)
                            if attention == "flash" else 0.0, "split"),
        }
        if self.qk_norm:  # a model property, not a searched quantity
            table.update({"q_norm_in": (2.0 * a * d, "split"), "k_norm_in": (2.0 * k * d, "kv")})
        return table

    def score_keys(self, seq):
        """Keys of the eager core's saved score rows: the whole sequence, window or chunk alike (the
        batched GEMM writes every score of [b a/t, s, s] and the mask, a window's or a chunk's too, is
        applied in the softmax after it: Megatron-Core's DotProductAttention @d98e8a64 l. 93-108 passes
        the window to FusedScaleMaskSoftmax only; module docstring, eager_core)."""
        return np.asarray(seq, dtype=np.float64)

    @property
    def kv_heads(self) -> int:
        return self.k

    # ------------------------------------------------------------------ communication
    def cp_ring(self, ctx) -> dict:
        """Context parallelism's per-micro-batch quantities on one GPU (planner/step.py cp_comm,
        cp_pass_times, cp_kernel_factor): the local K and V (bf16 bytes, kv_bytes; their
        elements, kv_el), the ring steps after the first (sends), the elements of the core
        output (o_el) and of the query (q_el), T a d / t each, and the key lengths of the
        unsplit kernel (keys: the sequence, or the window's reach) and of the sequence (seq)."""
        kv_el = ctx.T * 2.0 * kv_local(self.k, ctx.tp) * self.d
        o_el = ctx.T * self.a * self.d / ctx.tp
        return {"kv_bytes": kv_el * ACT_BYTES, "kv_el": kv_el, "o_el": o_el, "q_el": o_el,
                "sends": self.cp_sends(ctx.cp, ctx.seq, self.chunk_of(ctx)),
                "keys": span_keys(ctx.seq, self.window, self.chunk_of(ctx)),
                "seq": np.asarray(ctx.seq, dtype=np.float64)}

    def cp_sends(self, cp, seq, chunk=None):
        """Ring sends forward (module docstring): cp - 1, or the ranks within a window's reach (a chunk's: `chunk`,
        the layer's chunk per plan, chunk_of; by default chunk_at at this cp: the sequence, so cp - 1, where the
        stack's code runs the layer global [14])."""
        reach = self.window if self.window is not None else (self.chunk_at(seq, cp) if chunk is None else chunk)
        cp = np.asarray(cp, dtype=np.float64)
        if reach is None:
            return cp - 1.0
        local = np.asarray(seq, dtype=np.float64) / cp
        return np.minimum(cp - 1.0, np.ceil((np.asarray(reach, dtype=np.float64) - 1.0) / local))


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) [2]."""

    h: int
    a: int
    q_lora_rank: Optional[int]
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    norm: int
    dropout: bool = False  # the hidden dropout's mask (ModelSpec.hidden_dropout_on)
    score_dropout: bool = False  # the attention dropout on the eager core's scores (ModelSpec.attention_dropout_on)
    # the job's mla_down_proj_fusion (Megatron --mla-down-proj-fusion, a job setting: plan.with_fused_mla):
    # FusedMLASelfAttention (multi_latent_attention.py @d98e8a64 l. 1241-1310) builds one linear_qkv_down_proj of
    # h -> r_q + r_kv + d_rope, a TELayerNormColumnParallelLinear with gather_output False (l. 1279-1310;
    # gpt_layer_specs.py l. 257-264: the input norm fused into it), so its weight is TP-split (rows / tp a rank) where
    # the unfused down projections are TELinear 'duplicated', whole on every rank (l. 524-600, gpt_layer_specs.py
    # l. 302-304: backend.linear()); its output is split per rank into r_q / tp and (r_kv + d_rope) / tp (l. 1353-1381,
    # q_lora_rank required: l. 1271-1274)
    down_fused: bool = False

    kind = "attention"
    has_core = True
    selective_core = True
    cp_overlaps_core = True
    tp_pairs = (1.0,)
    sp_input_gemm = None  # its column-parallel inputs are the latents, not T h (step.mla_regathers [35])
    rope = True
    bias = False
    label = "mla"

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def d(self) -> float:
        """The mean of the query/key and value head dims: the core's head dim [2]."""
        return (self.qk_head_dim + self.v_head_dim) / 2.0

    @property
    def core_rate_head_dim(self) -> int:
        """The head dim the attention kernel's rate is read at: the query/key head dim (192 for
        DeepSeek-V3), the larger of the two (the kernel's tiles hold it); above 128 the hardware
        entries' head-dim-128 rate holds (compute.attention_head_dim_factor)."""
        return max(self.qk_head_dim, self.v_head_dim)

    @property
    def kv_heads(self) -> int:
        return self.a  # one up-projected key/value head per query head

    def params(self) -> BlockParams:
        h, a, rq, rkv = self.h, self.a, self.q_lora_rank, self.kv_lora_rank
        q = h * a * self.qk_head_dim if rq is None else rq * a * self.qk_head_dim
        split = q + rkv * a * (self.qk_nope_head_dim + self.v_head_dim) + a * self.v_head_dim * h
        rep = (0 if rq is None else h * rq) + h * (rkv + self.qk_rope_head_dim) + (rq or 0) + rkv
        down = (0 if rq is None else h * rq) + h * (rkv + self.qk_rope_head_dim)  # 2-D: Muon's (common.py [mu])
        if self.down_fused:  # one TP-split linear_qkv_down_proj (down_fused): its weight among the split parameters
            return BlockParams(split=split + down, replicated=rep - down + self.norm)
        return BlockParams(split=split, replicated=rep + self.norm, rep_matrix=down)

    def muon_matrices(self) -> tuple:
        """Muon's whole matrices (common.py [ns]): the query (or its down and up projections), the key/value down
        (r_kv + d_rope) and up projections, the output; not split (Megatron tags linear_qkv only: optimizer/__init__.py
        @d98e8a64 l. 790-796, "TODO(deyuf): support MLA"); the output h x a d_v listed transposed ([ns])."""
        h, a, rq, rkv = self.h, self.a, self.q_lora_rank, self.kv_lora_rank
        up = ((a * (self.qk_nope_head_dim + self.v_head_dim), rkv, 1, "split"), (a * self.v_head_dim, h, 1, "split"))
        if self.down_fused:  # linear_qkv_down_proj: one matrix, TP-split on its rows (partition_dim 0: a column
            # linear's, common.py [ns]), not tagged is_qkv (optimizer/__init__.py l. 790: linear_qkv.weight only)
            return ((rq + rkv + self.qk_rope_head_dim, h, 1, "split"), (a * self.qk_head_dim, rq, 1, "split")) + up
        q = ((a * self.qk_head_dim, h, 1, "split"),) if rq is None else (
            (rq, h, 1, "rep"), (a * self.qk_head_dim, rq, 1, "split"))
        return q + ((rkv + self.qk_rope_head_dim, h, 1, "rep"),) + up

    def gemms(self, ctx):
        """q_a [T, r_q, h] (or q [T, a d_qk/t, h]), q_b [T, a d_qk/t, r_q], kv_a [T, r_kv + d_rope, h],
        kv_b [T, a (d_nope + d_v)/t, r_kv], output [T, h, a d_v/t]."""
        T, tp, h, a = ctx.T, ctx.tp, self.h, self.a
        if self.down_fused:  # one TP-split down GEMM, [T, (r_q + r_kv + d_rope) / t, h] (down_fused)
            rows = [("mla_qkv_down", T, (self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim) / tp, h, 1.0),
                    ("mla_q_up", T, a * self.qk_head_dim / tp, self.q_lora_rank, 1.0)]
        elif self.q_lora_rank is None:
            rows = [("mla_q", T, a * self.qk_head_dim / tp, h, 1.0)]
        else:
            rows = [("mla_q_down", T, self.q_lora_rank, h, 1.0),
                    ("mla_q_up", T, a * self.qk_head_dim / tp, self.q_lora_rank, 1.0)]
        if not self.down_fused:
            rows += [("mla_kv_down", T, self.kv_lora_rank + self.qk_rope_head_dim, h, 1.0)]
        rows += [("mla_kv_up", T, a * (self.qk_nope_head_dim + self.v_head_dim) / tp, self.kv_lora_rank, 1.0),
                 ("mla_out", T, h, a * self.v_head_dim / tp, 1.0)]
        return shapes(rows)

    def projection_shares(self, ctx) -> dict:
        kv_up = self.qk_nope_head_dim + self.v_head_dim
        q = "mla_q" if self.q_lora_rank is None else "mla_q_up"
        return {"q": (q, 1.0), "k": ("mla_kv_up", self.qk_nope_head_dim / kv_up),
                "v": ("mla_kv_up", self.v_head_dim / kv_up), "o": ("mla_out", 1.0)}

    def core_kernel_flops(self, ctx):
        return 4.0 * ctx.T * self.a * self.d / ctx.tp * mean_causal_keys(ctx.seq)

    def eager_core(self, ctx) -> dict:
        """As Attention.eager_core at the mean head dim (a named approximation, as core_kernel_flops)."""
        return eager_core(ctx.T, self.a / ctx.tp, ctx.seq, self.d)

    def core_model_flops(self, seq, causal: bool, cp=1.0):
        return 12.0 * self.a * self.d * (mean_causal_keys(seq) if causal else np.asarray(seq, dtype=np.float64))

    def elementwise_bytes(self, ctx, kb, sfx):
        """As a global layer of a heads of the mean head dim with one KV head per query head
        (the rotary bytes over the up-projected q and k; a named approximation)."""
        h, tp, a = self.h, ctx.tp, self.a
        drop = 1.0 if self.dropout else 0.0
        return ctx.T * ((kb["norm" + sfx] * h + kb["residual" + sfx] * h + kb["dropout" + sfx] * drop * h) / ctx.rep_div
                        + kb["rope" + sfx] * (a / tp + kv_local(a, tp)) * self.d)

    def cast_elements(self, ctx):
        """fp8 casts as an MHA of the mean head dim (a named approximation, planner/moe.py)."""
        tp, h, a, d = ctx.tp, self.h, self.a, self.d
        return ctx.T * (h + a * d / tp) + (h * (a / tp + 2.0 * kv_local(a, tp)) * d + a * d / tp * h)

    def tensors(self, ctx, attention: str) -> dict:
        """MLA's table at its own head dims [2]: the up-projected query a (d_nope + d_rope) and key
        a (d_nope + d_rope) (the shared rotary key broadcast to every head), the value a d_v and
        the core output a d_v (the output projection's input), 2 B each; plus, kept whole on
        every TP rank (the down projections are replicated [2]): the query and key/value latents
        (the inputs of their RMSNorms), the latents' norm outputs (the up-projections' inputs)
        and the shared rotary key, 2 B each. A stack's selective policy may re-run the latents'
        norms (selective.recomputes: mla_latent_norm_out; DeepSeek-V3 sec. 3.2.3)."""
        h, a = self.h, self.a
        drop = 1.0 if self.dropout else 0.0
        sdrop = 1.0 if self.score_dropout else 0.0  # the attention dropout's mask and output (eager core)
        latents = (self.q_lora_rank or 0) + self.kv_lora_rank
        return {
            "input": (2.0 * h, "rep"), "norm1_out": (2.0 * h, "rep"),
            "q": (2.0 * a * self.qk_head_dim, "split"), "attn_out": (2.0 * a * self.v_head_dim, "split"),
            "k": (2.0 * a * self.qk_head_dim, "kv"), "v": (2.0 * a * self.v_head_dim, "kv"),
            "scores": ((2.0 + 3.0 * sdrop) * a if attention != "flash" else 0.0, "score"),
            "dropout_masks": (drop * h, "rep"),
            "softmax_lse": (SOFTMAX_LSE_BYTES * a * lse_rows_factor(ctx, ctx.lse_align) if attention == "flash"
                            else 0.0, "split"),  # [ls], [ls2]
            "mla_latent_norm_in": (2.0 * latents, "full"),
            "mla_latent_norm_out": (2.0 * latents, "full"),
            "mla_k_rope": (2.0 * self.qk_rope_head_dim, "full"),
        }

    def score_keys(self, seq):
        return np.asarray(seq, dtype=np.float64)

    def cp_ring(self, ctx) -> dict:
        """As Attention.cp_ring, at MLA's head dims: the up-projected K (a d_qk) and V (a d_v)
        per token, the output a d_v and the query a d_qk (/ t)."""
        tp = ctx.tp
        kv_el = ctx.T * 2.0 * kv_local(self.a, tp) * self.d
        seq = np.asarray(ctx.seq, dtype=np.float64)
        return {"kv_bytes": kv_el * ACT_BYTES, "kv_el": kv_el, "o_el": ctx.T * self.a * self.v_head_dim / tp,
                "q_el": ctx.T * self.a * self.qk_head_dim / tp, "sends": np.asarray(ctx.cp, dtype=np.float64) - 1.0,
                "keys": seq, "seq": seq}
