"""A model as an ordered list of layers, each a mixer sub-block and an MLP sub-block, each
sub-block costed by the module of its kind. Units: parameters (counts), bytes, FLOPs.

Kinds (schema.py's specs, the modules here):
  mixers   global / sliding-window / chunked softmax attention, with or without rotary
           positions, with or without an output gate (attention.py); multi-head latent
           attention (attention.MLA); Gated DeltaNet linear attention (linear_attention.py);
           Mamba-2 and Mamba state-space mixers (mamba.py); none
  MLPs     dense, gated or plain (mlp.py); mixture-of-experts (moe.py); none
Every block has one pre-norm when present (RMSNorm h or LayerNorm 2h) and is a frozen
dataclass with the same methods (each takes a Ctx, the per-micro-batch quantities of a plan
as 0-d or 1-d arrays): params(), gemms(ctx) (the forward GEMMs with their counts),
projection_shares(ctx), elementwise_bytes(ctx, kernel_bytes, "" | "_bwd"),
cast_elements(ctx), tensors(ctx, attention) (the activation table, common.py), and mixers
core_kernel_flops(ctx) / core_model_flops(seq, causal, cp), cp_ring(ctx) (attention: what its
context-parallel ring moves) or cp_collectives(ctx) (the others); tp_pairs says
which TP collective pairs the block runs each way, sp_input_gemm which of its GEMM rows is the
column-parallel linear on the SP-gathered T h input (None: none; step.py [35] prices its
backward re-gather for the wgrad GEMM). A mixer whose core runs on the CUDA cores
(Mamba's selective scan) adds scan_times(ctx, rates, hbm), its own roofline, which step.py
prices in place of the attention rates.

Which layer is which (`layer_list`):
  - a model YAML with `layer_pattern` names a kind from `layer_kinds` for each layer, the
    pattern repeated from the start until num_layers are listed; a kind that leaves out its
    mixer gets the model's default (MLA with `mla:`, else global attention), one that leaves
    out its MLP the MoE MLP with `moe:`, else the dense MLP;
  - otherwise every layer has the default mixer, and the MLP is the MoE MLP on layer i
    (0-based) when i >= moe.first_k_dense and i % moe.layer_freq == 0 (transformers
    DeepseekV3DecoderLayer), the dense MLP elsewhere.
Identical layers form one kind; the cost models evaluate each kind once per plan and weight
it by how many layers of that kind a pipeline stage holds (pipeline.stage_kind_counts: each
model chunk of the virtual pipeline holds its own consecutive layers, so an interleaved stage
holds layers from all over the model).

Multi-token prediction (DeepSeek-V3 sec. 2.2, `mtp_layers`): each module is an RMSNorm on
the hidden state and one on the embedding of the next token, a projection [2h -> h] and one
layer of the last layer's kind, sharing the input embedding and the output head; it runs on
the last pipeline stage after the main model's layers, its own output head and loss included.
With `mtp_layer_pattern` a module runs those layers in order instead (a hybrid stack's MTP
pattern, Megatron-LM @d98e8a64 multi_token_prediction.py l. 1197-1212: the module's layers a
HybridStack of the pattern, one layer a symbol, between eh_proj and its final_layernorm); with
`mtp_repeated_layer` the modules are one module run mtp_layers times (l. 1960-1970: one layer
built, l. 2048-2049: layer_idx 0 every depth): weights once (LayerList.mtp_built), compute and
activations per run.

"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..schema import (
    ChunkedAttention, DenseMLP as DenseSpec, GatedDeltaNet, GlobalAttention, Mamba1, Mamba2, MLAAttention,
    ModelSpec, MoEMLP as MoESpecKind, NoMixer, NoMLP, SlidingAttention,
)
from .attention import MLA, Attention
from .common import BlockParams, etp_of, gathered_tokens, mb_tokens, norm_params, rep_div
from .mlp import DenseMLP, NoBlock
from .moe import MoEMLP


@dataclass(frozen=True)
class LayerKind:
    mixer: Any
    mlp: Any
    # Gemma 2 / 3's sandwich norms (ModelSpec.post_norms): each present sub-block's output is normed
    # before its residual add (transformers Gemma3DecoderLayer.forward: post_attention_layernorm,
    # post_feedforward_layernorm): a second norm of the block's width, its h weights, the stack's norm
    # bytes, and its input (the block's output, 2 h a token, replicated unless SP) saved for the backward
    post_norm: bool = False

    @property
    def label(self) -> str:
        return self.label_at()

    def label_at(self, seq=None, cp=1) -> str:
        """label, for one plan (seq, cp: scalars; None: the model's own): an attention mixer's as priced at them
        (Attention.label_at)."""
        parts = [b.label_at(seq, cp) if isinstance(b, Attention) else b.label
                 for b in (self.mixer, self.mlp) if b.label != "none"]
        return " + ".join(parts) or "none"

    @property
    def blocks(self) -> tuple:
        return (self.mixer, self.mlp)

    def params(self) -> BlockParams:
        post = sum(b.norm for b in self.present) if self.post_norm else 0  # a post-norm as wide as its pre-norm
        return self.mixer.params() + self.mlp.params() + BlockParams(replicated=post)

    def muon_matrices(self, split_qkv: bool = True, tp=None) -> tuple:
        """(rows, cols, count, group) of every whole 2-D matrix Megatron's Muon orthogonalizes in one layer
        (common.py [ns]): the mixer's and the MLP's; split_qkv False (the job's muon_split_qkv, --muon-no-split-qkv):
        linear_qkv whole (muon_params). tp: the plans' TP degrees, where an attention mixer's split depends on them
        (Attention.muon_matrices: skipped where tp does not divide the KV heads); None: the split as at tp 1."""
        if not split_qkv:
            return self.muon_params()
        mixer = self.mixer.muon_matrices(tp) if isinstance(self.mixer, Attention) else self.mixer.muon_matrices()
        return mixer + self.mlp.muon_matrices()

    def muon_params(self) -> tuple:
        """(rows, cols, count, group) of every 2-D parameter Megatron's Muon steps in one layer, whole (common.py [ns]):
        muon_matrices, but where a block's parameter is one tensor Muon splits before orthogonalizing (the attention's
        linear_qkv, Attention.muon_params) that tensor, as the layer-wise optimizer places it on a rank whole."""
        return tuple(m for b in (self.mixer, self.mlp)
                     for m in (b.muon_params() if hasattr(b, "muon_params") else b.muon_matrices()))

    @property
    def present(self) -> tuple:
        """The sub-blocks the layer has (Nemotron-H's have one)."""
        return tuple(b for b in self.blocks if b.label != "none")

    @property
    def norms(self) -> int:
        """Norms of the layer's width: one pre-norm per present sub-block, and a post-norm each
        with post_norm."""
        return len(self.present) * (2 if self.post_norm else 1)

    def post_norm_bytes(self, ctx, kb, sfx):
        """Memory-bound bytes of the post-norms per micro-batch (sfx "" forward, "_bwd" backward):
        the stack's norm bytes over each present block's output, T h / rep_div; 0 without them."""
        width = sum(b.h for b in self.present) if self.post_norm else 0
        return ctx.T * kb["norm" + sfx] * width / ctx.rep_div

    def post_norm_tensors(self) -> dict:
        """The post-norms' saved inputs, bytes per token (common.py kinds): 2 h a present block."""
        return {"post_norm_in": (2.0 * sum(b.h for b in self.present), "rep")} if self.post_norm else {}

    @property
    def has_experts(self) -> bool:
        return isinstance(self.mlp, MoEMLP)

    def qk_norm_elements(self, ctx):
        """Elements the mixer's query/key norms run over per micro-batch (attention.py [10]); 0
        for a mixer without them."""
        f = getattr(self.mixer, "qk_norm_elements", None)
        return f(ctx) if f is not None else 0.0


@dataclass(frozen=True)
class LayerList:
    """The layers as a head and a period, so that nothing here grows with the layer count
    (a model of 36 million layers costs what one of 36 does): layers [0, head) are kind
    head_kind (an MoE model's first_k_dense dense layers), layer i >= head is kind
    period[i % P] (a layer pattern, or where layer_freq places the MoE layers)."""

    kinds: tuple  # distinct LayerKinds, in order of first appearance
    num_layers: int
    head: int  # layers before the period starts
    head_kind: int
    period: np.ndarray  # (P,) int64: the kind of layer i >= head is period[i % P]
    mtp: int = 0  # multi-token prediction modules (each runs the layers of mtp_kinds)
    mtp_kinds: tuple = ()  # the kinds of the layers one MTP module runs, in order (the last layer's kind by default)
    mtp_shared: bool = False  # the modules are one module run mtp times (ModelSpec.mtp_repeated_layer)

    @property
    def has_experts(self) -> bool:
        """Whether any layer of the model is a mixture-of-experts layer (an moe: block whose
        pattern places none leaves a dense model)."""
        return any(k.has_experts for k in self.kinds)

    def kind_at(self, i: int) -> int:
        """The kind index of layer i (0 <= i < num_layers)."""
        return self.head_kind if i < self.head else int(self.period[i % len(self.period)])

    @property
    def index(self) -> np.ndarray:
        """(L,) int64: the kind of each layer. Materialises every layer: for tests and
        listings of a real model, never on a cost path."""
        i = np.arange(self.num_layers, dtype=np.int64)
        return np.where(i < self.head, self.head_kind, self.period[i % len(self.period)])

    @functools.cached_property
    def _within(self) -> np.ndarray:
        """(K, P + 1) int64: layers of each kind among the first j of the period (prefix's table), built once
        per LayerList (frozen; a search's cost models call prefix a few hundred times on one)."""
        K = len(self.kinds)
        onehot = (self.period[None, :] == np.arange(K)[:, None]).astype(np.int64)  # (K, P)
        return np.concatenate([np.zeros((K, 1), dtype=np.int64), np.cumsum(onehot, axis=1)], axis=1)  # (K, P + 1)

    def prefix(self, i) -> np.ndarray:
        """(K, ...) int64: layers of each kind among the first i (0 <= i <= L; arrays)."""
        i = np.asarray(i, dtype=np.int64)
        K, P = len(self.kinds), len(self.period)
        col = (K,) + (1,) * i.ndim
        within = self._within

        def periodic(x):  # (K, ...) layers j < x with period[j % P] == each kind
            return (x // P)[None] * within[:, P].reshape(col) + within[:, x % P]

        tail = periodic(np.maximum(i, self.head)) - periodic(np.full_like(i, self.head))
        return np.where(np.arange(K).reshape(col) == self.head_kind, np.minimum(i, self.head)[None], 0) + tail

    def count(self, lo, hi) -> np.ndarray:
        """(K, ...) layers of each kind among indices [lo, hi) (arrays broadcast)."""
        L = self.num_layers
        lo, hi = np.broadcast_arrays(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64))
        lo = np.clip(lo, 0, L)
        hi = np.clip(hi, lo, L)
        return (self.prefix(hi) - self.prefix(lo)).astype(np.float64)

    @property
    def totals(self) -> np.ndarray:
        return self.prefix(self.num_layers).astype(np.float64)

    @property
    def mtp_built(self) -> int:
        """MTP modules whose weights exist: one where the modules share one (mtp_shared), else mtp."""
        return min(self.mtp, 1) if self.mtp_shared else self.mtp

    def runs(self):
        """(kind, first, last) of each run of consecutive layers of one kind, in order; lazily.
        A run inside the period is shorter than the period (one as long would make the period
        constant, and a constant period is one entry: _build), so each costs at most P steps."""
        L, j = self.num_layers, 0
        while j < L:
            k, e = self.kind_at(j), max(j + 1, self.head)  # the head is one kind
            if e < L and len(self.period) == 1 and int(self.period[0]) == k:
                e = L
            while e < L and self.kind_at(e) == k:
                e += 1
            yield k, j, e - 1
            j = e

    @functools.cached_property
    def _described(self) -> dict:
        """described's lists by (seq, cp), built once per LayerList (search.rows_of asks one per row, for the same
        two or three keys: llama3-70b / 512 H100's 2,100 best rows 0.36 -> 0.33 ms of CPU a row, median of 5)."""
        return {}

    def described(self, seq=None, cp=1) -> list[dict]:
        """Each kind with its count and its layers as index ranges (explain's `layers`); past
        DESCRIBED_RUNS ranges of a kind the rest are counted, not listed (the listing stays a
        line whatever the layer count; no catalogued model comes near it). seq, cp: one plan's (scalars), whose
        kinds are labelled as priced there (LayerKind.label_at). A new list of new dicts each call (a caller may
        change its own), their values the ones built the first time for (seq, cp) (_described)."""
        key = (seq, cp)
        if key not in self._described:
            self._described[key] = self._describe(seq, cp)
        return [dict(d) for d in self._described[key]]

    def _describe(self, seq, cp) -> list[dict]:
        """described's list for (seq, cp), built."""
        totals, L = self.totals, self.num_layers
        listed: list[list[str]] = [[] for _ in self.kinds]
        seen = [0] * len(self.kinds)
        periodic = {self.kind_at(i) for i in range(self.head, min(L, self.head + len(self.period)))}
        cut = False
        for k, a, b in self.runs():
            seen[k] += 1
            if len(listed[k]) < DESCRIBED_RUNS:
                listed[k].append(f"{a}" if a == b else f"{a}-{b}")
            if b + 1 >= self.head and b + 1 < L and all(len(listed[i]) >= DESCRIBED_RUNS for i in periodic):
                cut = True  # every kind still to come has its ranges listed: count the rest
                break
        out = []
        for k, kind in enumerate(self.kinds):
            text = ", ".join(listed[k])
            n = self._run_count(k) if cut else seen[k]
            if n > len(listed[k]):
                text += f", ... ({n:,} ranges in all)"
            out.append({"kind": kind.label_at(seq, cp), "count": int(totals[k]), "layers": text})
        for k in (self.mtp_kinds if self.mtp else ()):
            out.append({"kind": self.kinds[k].label_at(seq, cp), "count": self.mtp,
                        "layers": "multi-token prediction (after the last layer)"
                                  + (f", one shared module run {self.mtp} times" if self.mtp_shared else "")})
        return out

    def _run_count(self, k: int) -> int:
        """Runs of kind k: the layers of kind k whose predecessor is another kind (or none)."""
        L, P = self.num_layers, len(self.period)
        starts = int(self.kind_at(0) == k)
        if self.head and self.head < L:
            starts += int(self.kind_at(self.head) == k and self.head_kind != k)
        lo = self.head + 1 if self.head else 1  # j in [lo, L): period[j % P] == k != period[(j - 1) % P]
        first = (self.period == k) & (np.roll(self.period, 1) != k)  # (P,) by j % P
        if lo < L:
            cum = np.concatenate([[0], np.cumsum(first)])
            per = lambda x: (x // P) * int(cum[P]) + int(cum[x % P])  # noqa: E731
            starts += per(L) - per(lo)
        return starts


DESCRIBED_RUNS = 64  # index ranges listed per kind in `described` (explain's `layers` text)


# ----------------------------------------------------------------------------- resolution
def _mixer(spec, m: ModelSpec):
    norm = norm_params(m)
    if spec is None:
        spec = MLAAttention(kind="mla") if m.mla is not None else GlobalAttention()
    if isinstance(spec, (GlobalAttention, SlidingAttention, ChunkedAttention)):
        pos = spec.position or ("rope" if m.position_embedding == "rope" else "nope")
        return Attention(h=m.hidden_size, a=m.num_attention_heads, k=m.kv_heads, d=m.dhead, norm=norm,
                         bias=m.linear_bias, rope=pos == "rope", gate=spec.output_gate, dropout=m.hidden_dropout_on,
                         score_dropout=m.attention_dropout_on,
                         window=getattr(spec, "window", None), chunk=getattr(spec, "chunk", None),
                         rope_scaled=m.rope_attention_factor != 1.0, qk_norm=m.qk_norm,
                         alibi=spec.position is None and m.position_embedding == "alibi",
                         chunk_padded=bool(getattr(spec, "_padded", False)),  # plan._stack_chunks (a stack setting)
                         chunk_local=bool(getattr(spec, "_local", False)))  # likewise (chunked_attention.cp_local_sequence)
    if isinstance(spec, MLAAttention):
        ml = m.mla
        return MLA(h=m.hidden_size, a=m.num_attention_heads, q_lora_rank=ml.q_lora_rank, kv_lora_rank=ml.kv_lora_rank,
                   qk_rope_head_dim=ml.qk_rope_head_dim, qk_nope_head_dim=ml.qk_nope_head_dim,
                   v_head_dim=ml.v_head_dim, norm=norm, dropout=m.hidden_dropout_on,
                   score_dropout=m.attention_dropout_on,
                   down_fused=bool(ml._down_fused))  # the job's mla_down_proj_fusion (plan.with_fused_mla)
    if isinstance(spec, GatedDeltaNet):
        from .linear_attention import GatedDeltaNetBlock
        return GatedDeltaNetBlock.from_spec(spec, m, norm)
    if isinstance(spec, (Mamba2, Mamba1)):
        from .mamba import mamba_block
        return mamba_block(spec, m, norm)
    assert isinstance(spec, NoMixer)
    return NoBlock()


def _mlp(spec, m: ModelSpec, moe_layer: bool):
    norm = norm_params(m)
    if spec is None:
        spec = MoESpecKind(kind="moe") if moe_layer else DenseSpec()
    if isinstance(spec, DenseSpec):
        return DenseMLP(h=m.hidden_size, f=spec.ffn_hidden_size or m.ffn_hidden_size,
                        gated=m.gated_mlp if spec.gated is None else spec.gated, norm=norm, bias=m.linear_bias,
                        dropout=m.hidden_dropout_on)
    if isinstance(spec, MoESpecKind):
        e = m.moe
        fe = e.expert_ffn_hidden_size or m.ffn_hidden_size
        return MoEMLP(h=m.hidden_size, num_experts=e.num_experts, top_k=e.top_k, fe=fe,
                      num_shared=e.num_shared_experts, fs=e.shared_expert_ffn_hidden_size or fe,
                      shared_gate=e.shared_expert_gate, router_bias=int(e.expert_score_bias) + int(e.router_linear_bias), score_bias=e.expert_score_bias,
                      gated=m.gated_mlp, norm=norm,
                      bias=m.linear_bias, dropout=m.hidden_dropout_on, dense_f=m.ffn_hidden_size,
                      expert_groups=e.expert_groups or 0, groups_per_token=e.groups_per_token or 0,
                      clamp=m.activation_clamp is not None and m.gated_mlp, sigmoid=e.router == "sigmoid",
                      route_norm=e.route_norm)
    assert isinstance(spec, NoMLP)
    return NoBlock()


def _build(m: ModelSpec) -> LayerList:
    """The head and period (LayerList) of the module docstring's rules, in O(pattern)."""
    L = m.num_layers
    if m.layer_pattern is not None:
        P, head, per_name = len(m.layer_pattern), 0, {}
        for n in dict.fromkeys(m.layer_pattern):
            per_name[n] = LayerKind(_mixer(m.layer_kinds[n].mixer, m), _mlp(m.layer_kinds[n].mlp, m, m.moe is not None),
                                    post_norm=m.post_norms)
        at_period = [per_name[n] for n in m.layer_pattern]
        head_kind = None
    else:
        mixer = _mixer(None, m)
        dense, moe = _mlp(None, m, False), (_mlp(None, m, True) if m.moe is not None else None)
        if moe is None:
            P, head, at_period, head_kind = 1, 0, [LayerKind(mixer, dense, m.post_norms)], None
        else:  # layer i is MoE iff i >= first_k_dense and i % layer_freq == 0 (module docstring)
            # i % layer_freq == 0 for i < L holds where i % min(layer_freq, L) == 0: the same layers, a period of at
            # most L (a Hugging Face moe_layer_freq past the depth, 2**31 - 1, built no larger than the model)
            P, head = min(m.moe.layer_freq, max(L, 1)), min(m.moe.first_k_dense, L)
            at_period = [LayerKind(mixer, moe if r == 0 else dense, m.post_norms) for r in range(P)]
            head_kind = LayerKind(mixer, dense, m.post_norms)
    # kinds in order of first appearance: layer 0 (the head's, if any), then the period's from `head` on
    seen = ([0] if head else []) + list(range(head, min(L, head + P)))
    kinds: list = []
    for i in seen:
        k = head_kind if i < head else at_period[i % P]
        if k not in kinds:
            kinds.append(k)
    period = np.array([kinds.index(k) if k in kinds else 0 for k in at_period], dtype=np.int64)
    if np.all(period == period[0]):  # one kind from `head` on (LayerList.runs needs it as one entry)
        period = period[:1]
    ll = LayerList(kinds=tuple(kinds), num_layers=L, head=head, head_kind=kinds.index(head_kind) if head else 0,
                   period=period, mtp=m.mtp_layers, mtp_shared=m.mtp_repeated_layer)
    if m.mtp_layer_pattern is not None:  # the kinds the module's layers are (schema: each one layer_pattern uses)
        return dataclasses.replace(ll, mtp_kinds=tuple(kinds.index(per_name[n]) for n in m.mtp_layer_pattern))
    return dataclasses.replace(ll, mtp_kinds=(ll.kind_at(L - 1),))


def per_model(build, size: int = 256):
    """`build(m)` cached per model object: a ModelSpec is frozen, so what is built from one is built
    once (layer_list, params.count_params: a fit asks for them tens of times on one model). The
    entries hold their model, so an id cannot be reused while it is cached; the oldest of `size`
    entries goes first."""
    cache: "OrderedDict[int, tuple[ModelSpec, Any]]" = OrderedDict()

    def get(m: ModelSpec):
        hit = cache.get(id(m))
        if hit is not None and hit[0] is m:
            cache.move_to_end(id(m))
            return hit[1]
        out = build(m)
        cache[id(m)] = (m, out)
        while len(cache) > size:
            cache.popitem(last=False)
        return out

    return get


_layer_list = per_model(lambda m: _build(m))


def layer_list(m: ModelSpec) -> LayerList:
    """The model's layers (module docstring), built once per model object (per_model)."""
    return _layer_list(m)


# ----------------------------------------------------------------------------- per plan
@dataclass(frozen=True)
class Ctx:
    """Per-micro-batch quantities of a plan that every block reads (0-d or 1-d arrays)."""

    plan: Any
    tp: np.ndarray  # float64
    T: np.ndarray  # tokens of one micro-batch on one GPU
    seq: np.ndarray  # float64 tokens per sequence
    cp: np.ndarray  # float64
    ep: np.ndarray  # float64
    rep_div: np.ndarray  # tp under SP, else 1
    cf: Any  # MoE: the busiest EP rank's routed tokens / the mean (imbalance.rank_load; 1.0 balanced)
    etp: Any = 1.0  # float64 expert tensor-parallel degree (common.etp_of)
    gather: Any = 1.0  # ranks' tokens an expert-TP group gathers (common.gathered_tokens)
    # an expert tensor's bytes per GPU over what it would be as a TP-split tensor of the
    # micro-batch's T tokens: the rank's rows T / rep_div x gather, split over etp not tp,
    # gather / rep_div x tp / etp; 1 with etp = tp (planner/moe.py)
    expert_scale: Any = 1.0
    # MoE: the rows each local expert's token group is padded to a multiple of (stacks.token_group_align:
    # torchtitan's TOKEN_GROUP_ALIGN_SIZE_M, 8 bf16, 16 float8, 32 mxfp8; layers/moe.py [14]); 0 none
    group_align: Any = 0.0
    # MoE: the permuted rows a local token allocates where the dispatcher sizes its output by a capacity, not by the
    # rows routed (HybridEP's non-blocking dispatch: ep x min(E / ep, top_k) x its capacity factor, layers/moe.py
    # [19]); 0: the rows routed
    capacity_rows: Any = 0.0
    # the multiple of queries a sequence's fused-core log-sum-exp rows are rounded up to, by the stack's kernel
    # (layers/attention.py [ls2]: stack memory.attention_lse_align; a dense-mask windowed layer's kernel,
    # windowed_attention.lse_align); 0: the queries as they are
    lse_align: Any = 0.0
    lse_align_windowed: Any = 0.0


def context(plan, rank_load=1.0, group_align=0.0, capacity_rows=0.0, lse_align=0.0, lse_align_windowed=0.0) -> Ctx:
    """The plan's Ctx; rank_load: the busiest EP rank's routed tokens / mean (planner/imbalance.py
    rank_load: the routing imbalance composed with the capacity factor), a number or an array
    over the plan's candidates; group_align: Ctx.group_align (stacks.token_group_align), likewise;
    capacity_rows: Ctx.capacity_rows (stacks.capacity_rows), likewise; lse_align, lse_align_windowed: the stack's
    (stacks.lse_aligns)."""
    tp, etp, gather, rd = plan.tp.astype(np.float64), etp_of(plan).astype(np.float64), gathered_tokens(plan), rep_div(plan)
    return Ctx(plan=plan, tp=tp, T=mb_tokens(plan), seq=plan.seq.astype(np.float64),
               cp=plan.cp.astype(np.float64), ep=plan.ep.astype(np.float64), rep_div=rd,
               cf=np.asarray(rank_load, dtype=np.float64), etp=etp, gather=gather, expert_scale=gather / rd * (tp / etp),
               group_align=np.asarray(group_align, dtype=np.float64),
               capacity_rows=np.asarray(capacity_rows, dtype=np.float64), lse_align=float(lse_align),
               lse_align_windowed=float(lse_align_windowed))


def weighted(counts: np.ndarray, values: list) -> np.ndarray:
    """sum_k counts[k] x values[k] (values: one array per kind)."""
    return sum((counts[i] * v for i, v in enumerate(values)), np.float64(0.0))


def mean_layer(counts: np.ndarray, values: list, n=None) -> np.ndarray:
    """The mean over a stage's layers of a per-kind quantity (0 where the stage holds none):
    sum_k (counts[k] / n) x values[k], so that a stage of one kind gets its value exactly.
    n: the stage's layers, max(counts.sum(axis=0), 1) (layer_count(counts)), when the caller has it."""
    if len(values) == 1:  # one kind: its value (what a stage of no layers multiplies by 0 layers)
        return values[0] + np.zeros(np.shape(counts)[1:])
    n = layer_count(counts) if n is None else n
    return sum(((counts[i] / n) * v for i, v in enumerate(values)), np.float64(0.0))


def layer_count(counts: np.ndarray) -> np.ndarray:
    """The layers a stage holds, at least 1: mean_layer's divisor."""
    return np.maximum(counts.sum(axis=0), 1.0)
