"""Per-GPU memory of a training plan: model states, activations, buffers. Units: bytes.

Every function takes a PlanArrays whose fields are 0-d (one plan) or 1-d (a search) and
returns Terms whose sum is the total; no Python `if` touches a searched quantity.

References
[1] Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
    Models", sec. 3 and Fig. 1: model states 2+2+K bytes/param (K=12 for mixed-precision
    Adam); stage 1 shards the optimizer (K/Nd), stage 2 also the gradients, stage 3 also
    the weights.
[2] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", sec. 4 and Table 2: activations per layer sbh(34 + 5as/h) with no parallelism,
    sbh(10 + 24/t + 5as/(ht)) with TP, sbh/t (34 + 5as/h) with TP + SP, 34sbh/t with
    selective recompute, 2sbh (layer input only) with full recompute; sec. 4.2.3 pipeline
    in-flight micro-batches.
[3] Dao et al. 2022, "FlashAttention": the s x s score and softmax tensors are never stored
    (they are recomputed from Q, K, V and the softmax statistics in the backward pass).
[4] Zhao et al. 2023, "PyTorch FSDP", sec. 3.3-3.4: each FSDP unit is all-gathered before
    use and freed after; backward prefetch keeps the next unit's all-gather in flight, so
    two unsharded units exist at once, plus the unsharded gradient of the unit being
    reduce-scattered.
[5] Megatron-LM core/tensor_parallel/cross_entropy.py (VocabParallelCrossEntropy): the loss
    casts the vocab-parallel logits to fp32 and saves the fp32 softmax for the backward
    pass.
[6] Narayanan et al. 2021 (Megatron-LM), sec. 2.2: pipeline stages; with tied embeddings the
    last stage keeps a copy of the word embedding when pp > 1.

Derivation of the architecture-aware per-layer coefficient (activation_model "arch"),
bytes stored per token per layer with 16-bit activations, following [2] sec. 4.1 term by
term and generalising the shapes (h hidden, a query heads, k KV heads, d head dim,
f FFN width, f1 = 2f for a gated MLP else f):
  replicated across TP unless SP ("rep"):
    norm inputs 2 x 2h; attention input (norm output) 2h; MLP input 2h; dropout masks
    1h after attention and 1h after the MLP when the model has dropout     [2]: 10h for GPT
  split across TP ("split"):
    Q 2ad, K and V 2 x 2kd, attention output (input of the output projection) 2ad,
    MLP first-linear output 2f1 (gate and up for SwiGLU, saved by Megatron's fused
    bias-SwiGLU, which recomputes the activation in backward), activation output 2f
                                                                          [2]: 24h for GPT
  eager attention only (no FlashAttention [3]): softmax output 2as, plus its dropout mask
    as and dropout output 2as when the model has dropout                  [2]: 5as for GPT
For GPT-3 shapes (a*d = h, k = a, f = 4h, plain MLP, dropout) rep + split = 10h + 24h =
34h, the coefficient of [2]; the seed's 34 bytes per token per unit width per layer.
FlashAttention also keeps the fp32 softmax log-sum-exp, 4a bytes per token (0.03 h for
GPT-3), left out here: below 0.1% of the layer.
"""

from __future__ import annotations

import numpy as np

from . import moe
from .params import ParamCounts, count_params
from .pipeline import inflight_microbatches, stage_layers
from .plan import FSDP, HSDP, RC_FULL, RC_NONE, RC_SELECTIVE, ZERO1, ZERO2, PlanArrays, Settings
from .schema import ModelSpec
from .stacks import kernel_bytes, stack_of
from .terms import Terms

ACT_BYTES = 2.0  # bf16/fp16 activations [2]; fp8 training keeps activations in bf16
LOGIT_BYTES_PER_VOCAB = 2.0 + 4.0  # bf16 logits + fp32 softmax kept for the loss backward [5]

STATE_TERMS = ("weights", "gradients", "master_weights", "adam")
ACTIVATION_TERMS = ("layer_activations", "output_activations", "recompute_buffer")
OTHER_TERMS = ("fsdp_buffers", "allocator_slack", "reserve")


def layer_coefficients(model: ModelSpec, activation_model: str = "arch", attention: str = "flash"):
    """(rep, split, kv, score): bytes per token per layer replicated across TP (unless SP),
    split across TP, the K and V projections (kept per KV head), and the eager-attention score
    term per token per token of sequence, for the tensors a layer keeps without recompute."""
    t = activation_tensors(model, activation_model, attention)
    by = {"rep": 0.0, "split": 0.0, "kv": 0.0, "score": 0.0}
    for name in STANDARD_TENSORS:
        b, kind = t[name]
        by[kind] += b
    return by["rep"], by["split"], by["kv"], by["score"]


# what a layer keeps without recompute (Korthikanti et al. 2022 sec. 4.1 [2]); "mlp_out" is
# kept only by stacks whose recompute policy saves it (torchtitan's per-op SAC)
STANDARD_TENSORS = ("input", "norm1_out", "q", "k", "v", "attn_out", "norm2_in", "norm2_out", "gate", "up",
                    "act_out", "dropout_masks", "scores")


def activation_tensors(model: ModelSpec, activation_model: str = "arch", attention: str = "flash") -> dict:
    """Every activation tensor of a layer (schema.ACTIVATION_TENSORS) -> (bytes per token, kind)
    with kind "rep" (replicated across TP unless SP), "split" (/tp), "kv" (per local KV head) or
    "score" (eager attention, per token per key). The "arch" derivation is the module
    docstring's; "korthikanti" scales each kind so that the standard set sums to GPT-3's
    10h + 24h + 5as of [2] on any shape (the seed's model)."""
    h, a, k, d, f = model.hidden_size, model.num_attention_heads, model.kv_heads, model.core_head_dim, model.ffn_hidden_size
    drop = 1.0 if model.dropout else 0.0
    t = {
        "input": (2.0 * h, "rep"), "norm1_out": (2.0 * h, "rep"), "norm2_in": (2.0 * h, "rep"),
        "norm2_out": (2.0 * h, "rep"), "dropout_masks": (2.0 * drop * h, "rep"), "mlp_out": (2.0 * h, "rep"),
        "q": (2.0 * a * d, "split"), "attn_out": (2.0 * a * d, "split"),
        "gate": (2.0 * f if model.gated_mlp else 0.0, "split"), "up": (2.0 * f, "split"), "act_out": (2.0 * f, "split"),
        "k": (2.0 * k * d, "kv"), "v": (2.0 * k * d, "kv"),
        "scores": ((2.0 + 3.0 * drop) * a if attention != "flash" else 0.0, "score"),
    }
    if activation_model == "korthikanti":
        # GPT-3 coefficients on any shape [2]: 10h replicated, 24h split (K and V included), 5a score
        std = {kind: sum(t[n][0] for n in STANDARD_TENSORS if t[n][1] == kind) for kind in ("rep", "split", "kv", "score")}
        target = {"rep": 10.0 * h, "split": 24.0 * h, "score": 5.0 * a if attention != "flash" else 0.0}
        split_all = std["split"] + std["kv"]
        scale = {"rep": target["rep"] / std["rep"] if std["rep"] else 0.0,
                 "split": target["split"] / split_all if split_all else 0.0,
                 "score": target["score"] / std["score"] if std["score"] else 0.0}
        scale["kv"] = scale["split"]
        # K and V count as split tensors (the seed's 24h/t has no KV-head floor)
        t = {n: (b * scale[kind], "split" if kind == "kv" else kind) for n, (b, kind) in t.items()}
    return t


def recomputed_layers(settings: Settings, plan: PlanArrays, layers):
    """How many of a stage's `layers` full recompute re-runs: all of them, or at most
    settings.recompute_layers (Megatron-LM --recompute-method block --recompute-num-layers:
    the first N layers of each stage recompute, the others keep their activations) [2]."""
    cap = settings.recompute_layers if settings.recompute_layers is not None else np.iinfo(np.int64).max
    return np.where(plan.recompute == RC_FULL, np.minimum(layers, cap), 0)


def recompute_fraction(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Share of a middle stage's layers that full recompute re-runs (1 for plain full)."""
    _, mid, _ = stage_layers(settings.model.num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    return recomputed_layers(settings, plan, mid) / mid


def per_layer_activation_bytes(model: ModelSpec, plan: PlanArrays, activation_model="arch", attention="flash",
                               keeps=STANDARD_TENSORS, gathered_input: bool = False):
    """Bytes one layer stores for one micro-batch on one GPU, for the tensors `keeps` (default:
    all a layer keeps without recompute). gathered_input: with SP, the attention and MLP inputs
    (norm outputs) are saved all-gathered, not sequence-sharded (DTensor TP)."""
    t = activation_tensors(model, activation_model, attention)
    tp = plan.tp.astype(np.float64)
    k = model.kv_heads
    tokens = plan.mbs * (plan.seq / plan.cp)  # CP splits the sequence
    rep_div = np.where(plan.sp > 0, tp, 1.0)
    kv_div = np.minimum(tp, float(k))  # per GPU: max(k/tp, 1) KV heads (they replicate when tp > k)
    total = np.zeros(np.broadcast(tp, tokens).shape)
    for name in keeps:
        b, kind = t[name]
        if kind == "rep":
            div = np.ones_like(tp) if (gathered_input and name in ("norm1_out", "norm2_out")) else rep_div
            total = total + b / div
        elif kind == "split":
            total = total + b / tp
        elif kind == "kv":
            total = total + b / kv_div
        else:  # eager scores: per token of the local sequence, heads split across TP; dropped by recompute
            total = total + np.where(plan.recompute == RC_NONE, b, 0.0) * (plan.seq / plan.cp) / tp
    return tokens * total


def selective_keeps(settings: Settings) -> tuple:
    """The tensors the stack's selective recompute keeps (plus nothing it recomputes)."""
    return tuple(stack_of(settings).selective.keeps)


def model_state_terms(pc: ParamCounts, bpp, plan: PlanArrays, params_per_gpu, shard_div=None) -> Terms:
    """Weights, gradients, fp32 master and Adam m, v per GPU under ZeRO/FSDP/HSDP [1].

    The shard degree is dp*cp (context-parallel ranks hold the same weights, and Megatron
    and torchtitan shard the optimizer over the combined dp x cp group); HSDP shards over
    shard_group*cp and replicates across groups. shard_div: the routed experts of an MoE
    model shard over that group / ep (planner/moe.py, the expert-data-parallel ranks).
    """
    d = np.where(plan.sharding == HSDP, plan.shard, plan.dp) * plan.cp
    if shard_div is not None:
        d = d // shard_div
    s = plan.sharding
    one = np.ones_like(d)
    return Terms(
        weights=params_per_gpu * bpp.weights / np.where(s >= FSDP, d, one),
        gradients=params_per_gpu * bpp.gradients / np.where(s >= ZERO2, d, one),
        master_weights=params_per_gpu * bpp.master / np.where(s >= ZERO1, d, one),
        adam=params_per_gpu * bpp.optimizer / np.where(s >= ZERO1, d, one),
    )


def stage_params(pc: ParamCounts, model: ModelSpec, plan: PlanArrays):
    """Parameters per GPU on the first and on the last pipeline stage (before sharding),
    with their layers from `stage_layers`.

    The first stage holds the input embedding (vocab-parallel: /tp) and any learned
    position table; the last the final norm and the output layer (/tp), or, with tied
    embeddings and pp > 1, a copy of the word embedding [6]. Norms are replicated across TP.
    """
    tp = plan.tp.astype(np.float64)
    n_first, _, n_last = stage_layers(model.num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    per_layer = pc.per_layer_tp_split / tp + pc.norms
    emb = pc.embedding / tp + pc.position
    out_params = pc.output if not model.tied_embeddings else np.where(plan.pp > 1, pc.embedding, 0)
    head = out_params / tp + pc.final_norm
    single = plan.pp == 1
    first = n_first * per_layer + emb + np.where(single, head, 0.0)
    last = n_last * per_layer + head + np.where(single, emb, 0.0)
    if model.moe is not None or model.mla is not None:  # MoE layers' shared experts and router, MLA (moe.py)
        c_first, _, c_last = moe.dense_stage_correction(pc, model, plan)
        first, last = first + c_first, last + c_last
    return first, last


STAGE_FIRST, STAGE_LAST, STAGE_MIDDLE = 0, 1, 2
STAGE_NAMES = {STAGE_FIRST: "first", STAGE_LAST: "last", STAGE_MIDDLE: "middle"}


def memory_terms(settings: Settings, plan: PlanArrays) -> tuple[Terms, np.ndarray]:
    """Per-GPU memory on the most loaded pipeline stage. Returns (terms, stage) where
    stage is STAGE_FIRST, STAGE_LAST or STAGE_MIDDLE (equal when pp == 1); the terms are
    all of that one stage, the stage with the largest total (stage_memory_terms)."""
    return heaviest_stage(stage_memory_terms(settings, plan))


def heaviest_stage(stages: dict) -> tuple[Terms, np.ndarray]:
    """(terms of the stage with the largest total, its stage code) from stage_memory_terms:
    every term of one stage, never the states of one and the activations of another."""
    first, last, middle = stages[STAGE_FIRST], stages[STAGE_LAST], stages[STAGE_MIDDLE]
    stage = np.where(last.total > first.total, STAGE_LAST, STAGE_FIRST)
    best = np.maximum(first.total, last.total)
    stage = np.where(middle.total > best, STAGE_MIDDLE, stage).astype(np.int64)
    chosen = Terms(**{k: np.where(stage == STAGE_LAST, last[k], np.where(stage == STAGE_MIDDLE, middle[k], first[k]))
                      for k in first})
    return chosen, stage


def stage_memory_terms(settings: Settings, plan: PlanArrays) -> dict[int, Terms]:
    """Per-GPU memory terms of the first stage, the first middle stage (stage 1, which holds
    the most micro-batches in flight of the middle stages and the middle stages' layer
    count; with pp <= 2 there is none and its terms are the first stage's) and the last
    stage. An uneven split (stage_layers) can make the middle one the heaviest: Llama 3
    405B's 126 layers on 16 stages put 7 layers x 16 in flight on stage 0 and 8 x 15 on
    stage 1."""
    model, bpp = settings.model, settings.bpp
    pc = count_params(model)
    tp = plan.tp.astype(np.float64)
    m = plan.microbatches
    n_first, n_mid, n_last = stage_layers(model.num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    has_mid = plan.pp > 2

    # --- model states, both ends of the pipeline and a middle stage (its layers only)
    p_first, p_last = stage_params(pc, model, plan)
    p_mid = np.where(has_mid, n_mid * (pc.per_layer_tp_split / tp + pc.norms), p_first)
    st_first = model_state_terms(pc, bpp, plan, p_first)
    st_last = model_state_terms(pc, bpp, plan, p_last)
    st_mid = model_state_terms(pc, bpp, plan, p_mid)
    if model.mla is not None or model.moe is not None:  # a middle stage's MLA / MoE corrections (moe.py)
        c_mid = moe.dense_stage_correction(pc, model, plan)[1]
        st_mid = _plus(st_mid, model_state_terms(pc, bpp, plan, np.where(has_mid, c_mid, 0.0)))
    if model.moe is not None:  # routed experts: / (tp ep), sharded over the expert-data-parallel ranks (moe.py)
        e_first, e_mid, e_last = moe.expert_stage_params(pc, model, plan)
        e_mid = np.where(has_mid, e_mid, e_first)
        st_first = _plus(st_first, model_state_terms(pc, bpp, plan, e_first, shard_div=plan.ep))
        st_last = _plus(st_last, model_state_terms(pc, bpp, plan, e_last, shard_div=plan.ep))
        st_mid = _plus(st_mid, model_state_terms(pc, bpp, plan, e_mid, shard_div=plan.ep))

    # --- activations [2]; what a layer keeps depends on the recompute mode and the stack
    stack = stack_of(settings)
    gathered = bool(stack.memory.tp_saves_gathered_input)
    am, at = settings.activation_model, settings.attention
    full_layer = per_layer_activation_bytes(model, plan, am, at, gathered_input=gathered)
    kept_sel = per_layer_activation_bytes(model, plan, am, at, keeps=selective_keeps(settings), gathered_input=gathered)
    # the selective policy's recomputed tensors exist for one layer at a time in backward
    sel_buffer = np.maximum(full_layer - per_layer_activation_bytes(
        model, plan, am, at, keeps=tuple(n for n in STANDARD_TENSORS if n in selective_keeps(settings) or n == "scores"),
        gathered_input=gathered), 0.0)
    full_layer = np.where(plan.recompute == RC_SELECTIVE, kept_sel, full_layer)
    # full recompute keeps only the inputs of the layers it re-runs [2]
    rep_div = np.where(plan.sp > 0, tp, 1.0)
    tokens = plan.mbs * (plan.seq / plan.cp)
    layer_input = tokens * ACT_BYTES * model.hidden_size / rep_div  # 2sbh (/t with SP) in either activation model [2]
    r_first = recomputed_layers(settings, plan, n_first)
    r_last = recomputed_layers(settings, plan, n_last)
    r_mid = recomputed_layers(settings, plan, n_mid)
    # it re-materialises one layer's activations during that layer's backward pass (the
    # seed's sec. 8.1: one layer's 34 sbh), all but the layer input, which is the checkpoint
    # already counted above (counting it twice made full recompute of one layer per stage
    # hold more than no recompute)
    every = per_layer_activation_bytes(model, plan, am, at, gathered_input=gathered)
    inflight_first = np.where(plan.pp == 1, 1.0, inflight_microbatches(plan.pp, m, plan.vpp, plan.schedule))
    inflight_last = np.where(plan.pp == 1, 1.0, inflight_microbatches(plan.pp, m, plan.vpp, plan.schedule, stage=plan.pp - 1))
    inflight_mid = np.where(plan.pp == 1, 1.0, inflight_microbatches(plan.pp, m, plan.vpp, plan.schedule, stage=1))
    # output layer: final-norm input 2h (/t under SP) and the logits + fp32 softmax [5]
    kb = kernel_bytes(stack, plan.compile)
    out_act = tokens * (ACT_BYTES * model.hidden_size / rep_div + kb["loss_saved_per_logit"] * model.vocab_size / tp)
    # kernels that save more than the standard set: eager RMSNorm keeps an fp32 copy of its input
    norm_extra = tokens * 2.0 * kb["norm_saved_extra"] * model.hidden_size / rep_div
    # (a selective policy that re-runs the elementwise kernels keeps none of it; full recompute
    # keeps it on the layers it does not re-run)
    keeps_norm = 0.0 if stack.selective.recompute_elementwise else 1.0
    full_layer = full_layer + np.where(plan.recompute == RC_SELECTIVE, keeps_norm, 1.0) * norm_extra
    # (with the kernels' extra saves, as the re-run forward saves them too)
    rematerialised = np.maximum(every + norm_extra - layer_input, 0.0)
    recompute_buffer = np.where(plan.recompute == RC_FULL, rematerialised,
                                np.where(plan.recompute == RC_SELECTIVE, sel_buffer, 0.0))
    if model.mla is not None:  # MLA keeps its latents and their norms (moe.py); q, k, v at the mean head dim
        full_layer = full_layer + moe.mla_latent_activation_bytes(model, plan)
    act_first = inflight_first * (r_first * layer_input + (n_first - r_first) * full_layer)
    act_last = inflight_last * (r_last * layer_input + (n_last - r_last) * full_layer)
    act_mid = np.where(has_mid, inflight_mid * (r_mid * layer_input + (n_mid - r_mid) * full_layer), act_first)
    if model.moe is not None:  # MoE layers keep the router logits, dispatched tokens and experts' tensors (moe.py)
        delta = moe.moe_layer_activation_delta(model, plan, settings.moe_capacity_factor)
        m_first, m_mid, m_last = moe.stage_moe_layers(model, plan)
        # the stage's MoE layers among those that keep their activations (full recompute: pro rata)
        act_first = act_first + inflight_first * m_first * (n_first - r_first) / np.maximum(n_first, 1) * delta
        act_last = act_last + inflight_last * m_last * (n_last - r_last) / np.maximum(n_last, 1) * delta
        act_mid = np.where(has_mid, act_mid + inflight_mid * m_mid * (n_mid - r_mid) / np.maximum(n_mid, 1) * delta,
                           act_first)
        recompute_buffer = recompute_buffer + np.where(plan.recompute == RC_FULL, delta, 0.0)
    out_first = np.where(plan.pp == 1, out_act, 0.0)
    out_last = inflight_last * out_act

    # --- buffers
    unit = np.maximum(pc.per_layer / tp, np.maximum(pc.embedding, pc.output) / tp)
    if model.moe is not None:
        unit = np.maximum(unit, moe.moe_unit_params(pc, plan))
    # two gathered units (the current and the prefetched) and the unsharded gradients of one,
    # in the dtype the stack reduces them in (FSDP2 and Composer: fp32) [4]
    fsdp_buf = np.where(plan.sharding >= FSDP, (2.0 * bpp.weights + stack.fsdp.grad_reduce_bytes) * unit, 0.0)
    reserve = np.full(np.shape(tp), settings.reserve_bytes, dtype=np.float64)

    # a run calibration's measured slack replaces the stack's (profile.RunKnobs)
    slack = stack.memory.allocator_slack if settings.knobs.allocator_slack is None else settings.knobs.allocator_slack

    def terms(st, act, out):
        allocated = sum((st[k] for k in STATE_TERMS), np.float64(0.0)) + act + out + recompute_buffer + fsdp_buf
        return Terms(
            **{k: st[k] for k in STATE_TERMS},
            layer_activations=act,
            output_activations=out,
            recompute_buffer=recompute_buffer,
            fsdp_buffers=fsdp_buf,
            allocator_slack=slack * allocated,  # the caching allocator's reserved - allocated at the peak
            reserve=reserve,
        )

    out_mid = np.where(has_mid, 0.0, out_first)
    return {STAGE_FIRST: terms(st_first, act_first, out_first), STAGE_LAST: terms(st_last, act_last, out_last),
            STAGE_MIDDLE: terms(st_mid, act_mid, out_mid)}


def _plus(a: Terms, b: Terms) -> Terms:
    return Terms(**{k: a[k] + b[k] for k in a})


def capacity(settings: Settings) -> tuple[float, float]:
    """(HBM bytes, usable bytes = HBM x (1 - headroom))."""
    cap = settings.hardware.hbm_bytes
    return cap, cap * (1.0 - settings.headroom)


def grouped(t: Terms) -> dict[str, np.ndarray]:
    """The stable JSON grouping: weights, gradients, optimizer (master + Adam),
    activations, other."""
    return {
        "weights_bytes": t.weights,
        "gradients_bytes": t.gradients,
        "optimizer_bytes": t.master_weights + t.adam,
        "activations_bytes": t.sum(*ACTIVATION_TERMS),
        "other_bytes": t.sum(*OTHER_TERMS),
        "total_bytes": t.total,
    }


def reported_bytes(settings: Settings, t: Terms) -> np.ndarray:
    """The peak memory the stack itself logs (stack_db memory.reports): PyTorch's max reserved
    excludes the CUDA context and NCCL's buffers (the `reserve` term, outside the caching
    allocator); max allocated also excludes the allocator's slack."""
    rep = stack_of(settings).memory.reports
    out = t.total - t.reserve
    return out - t.allocator_slack if rep == "max_allocated" else out
