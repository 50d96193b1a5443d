"""Step time of a training plan, and MFU/HFU. Units: seconds, FLOPs, tokens/s.

step = compute + tp_comm + cp_comm (exposed) + pp_comm + dp_comm_exposed + bubble + optimizer
       (+ moe_permute + ep_comm for an MoE model: moe.py)

All terms are per GPU on the critical pipeline stage (the slower of a middle stage, with
ceil(L/(p v)) layers per chunk, and the last stage, with its layers plus the output layer
and the loss; pipeline.stage_layers), for one optimizer
step of m = global_batch / (dp x micro_batch) micro-batches. Every function takes a
PlanArrays of 0-d or 1-d arrays.

Compute, per layer and micro-batch of T = micro_batch x seq / cp tokens (after TP splits t):
  GEMMs  QKV [T, (a/t + 2 max(k/t, 1)) d, h], output [T, h, a d/t], MLP up [T, f1/t, h],
         MLP down [T, h, f/t] (f1 = 2f gated); output layer [T, V/t, h] on the last stage;
         forward 1x, backward 2x the forward FLOPs at the same shape's efficiency
         (dgrad + wgrad) [1]; time = FLOPs / (GEMM plateau x wave efficiency) (compute.py).
  attention core (FlashAttention, causal: the kernel skips masked blocks) 4 T s a d / t / 2
         FLOPs forward, 2.5x that backward, at its own efficiency (compute.py [7]).
  memory-bound work as bytes over HBM bandwidth (x HBM_EFFICIENCY): norms (read + write
         2h each, twice), residual adds (read 4h, write 2h, twice), rotary on Q and K
         (read + write), the MLP activation (SwiGLU reads 2 x 2f/t and writes 2f/t; GeLU
         reads and writes 2f/t), dropout where the model has it (read, write, mask);
         replicated terms /t only with SP; the backward moves twice the forward bytes;
         the loss reads and writes the logits (16 B per vocab entry per token, fwd + bwd).
  recompute: full repeats each layer's forward; selective its attention core [2].
Communication (comm.py, placement TP innermost, then CP, PP, DP [3]):
  TP  per layer and micro-batch 2 all-reduces forward and 2 backward of T h bytes x 2 (bf16),
      or with SP a reduce-scatter + all-gather pair each [2]; +2 with full recompute. Exposed
      (Megatron's default), or with tp_comm_overlap hidden behind the layer's GEMMs except
      the first of tp chunks [7].
  CP  ring attention: each layer passes K and V around the CP ring (cp-1 sends of the local
      chunk forward, K, V and their gradients backward: 3x); hidden behind the attention
      core as far as it lasts [4].
  PP  send/recv of T h x 2 bytes (/t under SP) per micro-batch and model chunk, forward and
      backward, on the PP link; counted exposed (Megatron's 1F1B p2p is blocking).
  DP  DDP: all-reduce of the gradients once per step; ZeRO-1/2: reduce-scatter of the
      gradients + all-gather of the updated bf16 weights; FSDP/HSDP: per micro-batch an
      all-gather of the weights in forward and in backward and a reduce-scatter of the
      gradients [5]; HSDP adds an all-reduce of the sharded gradients across replicas.
      Hidden behind compute: gradient traffic behind the backward pass (of the last
      micro-batch for DDP/ZeRO), weight all-gathers behind the forward (FSDP prefetch); the
      first unit's all-gather and the last unit's reduce-scatter (1/layers of it) never
      hide. dp_comm_s is the total, dp_comm_exposed_s what is left on the critical path.
Bubble: (p-1)/(v m) of the pipeline's busy time [6], i.e. (p-1)/v micro-batch times.
Optimizer: Adam over the local shard: reads fp32 master, m, v and the gradient, writes
  master, m, v and the bf16 weight (28 B/param with bf16 grads) over HBM bandwidth.
MFU (PaLM, Chowdhery et al. 2022 App. B) counts model FLOPs (6N + attention); HFU adds the
recompute; both over GPUs x the peak of the training precision.

References
[1] Narayanan et al. 2021 (Megatron-LM), sec. 3.5 / eq. 3: the backward pass costs twice the
    forward; activation recomputation adds one more forward.
[2] Korthikanti et al. 2022, sec. 4.2.2 (SP: all-reduce = reduce-scatter + all-gather) and
    sec. 5 (selective recompute re-runs only the attention core).
[3] The Llama 3 Herd of Models (arXiv:2407.21783) sec. 3.3.2: parallelism order TP, CP, PP, DP.
[4] Liu et al. 2023, "Ring Attention with Blockwise Transformers": K/V blocks circulate while
    attention on the current block computes; Llama 3 sec. 3.3.2 (all-gather based CP).
[5] Zhao et al. 2023, "PyTorch FSDP", sec. 3.2-3.4; Rajbhandari et al. 2019 (ZeRO) sec. 7:
    stage 3 moves 1.5x the data of an all-reduce; the seed sec. 3.1.
[6] Narayanan et al. 2021 sec. 2.2: bubble (p-1)/(v m).
[7] Wang et al. 2023, "Overlap Communication with Dependent Computation via Decomposition in
    Large Deep Learning Models" (ASPLOS '23): collectives split into per-rank chunks overlap
    the dependent GEMM; Megatron-LM --tp-comm-overlap (Transformer Engine userbuffers, needs
    sequence parallelism) and torchtitan's async TP implement it.
"""

from __future__ import annotations

import numpy as np

from . import comm, moe
from .compute import (
    ATTN_BWD_FLOPS_RATIO, HBM_EFFICIENCY, LAYER_GEMMS, attention_rates,
    flops_per_token, forward_gemm_times, recompute_flops_per_token,
)
from .memory import recompute_fraction, recomputed_layers, stage_params
from .params import count_params
from .pipeline import INTERLEAVED, bubble_fraction, stage_layers
from .plan import FP8, FSDP, HSDP, RC_SELECTIVE, ZERO1, PlanArrays, Settings
from .stacks import fp8_recipe, kernel_bytes, stack_of
from .terms import Terms

ACT_BYTES = 2.0  # bf16 activations / TP and PP messages
ADAM_BYTES_PER_PARAM = 4 + 4 + 4 + 4 + 4 + 4 + 2  # read master, m, v; write master, m, v, bf16 weight (+ grad below)
LOSS_BYTES_PER_LOGIT = 16.0  # cross-entropy fwd+bwd: read bf16, write fp32, read fp32, write grad bf16 (+ fp32 reread)

# profile collective names (nccl-tests) -> comm op codes
PROFILE_OPS = {"all_reduce": comm.ALL_REDUCE, "reduce_scatter": comm.REDUCE_SCATTER, "all_gather": comm.ALL_GATHER,
               "alltoall": comm.ALL_TO_ALL, "sendrecv": comm.SEND_RECV}

TIME_TERMS = ("compute", "tp_comm", "cp_comm", "pp_comm", "dp_comm_exposed", "bubble", "optimizer")


def _hide(total, window, exposed_fraction):
    """Time an overlapped transfer of `total` seconds adds behind a compute `window`: what
    outlasts the window, plus the stack's exposed share of the part that overlaps (NCCL
    kernels take SMs and HBM bandwidth from the compute they run beside). Never more than
    `total` (issue: exposed <= total)."""
    over = np.maximum(total - window, 0.0)
    return np.minimum(over + (total - over) * exposed_fraction, total)


def step_time(settings: Settings, plan: PlanArrays, calibration=None) -> tuple[Terms, dict]:
    """Named time terms (seconds) whose sum is the step time, plus informational extras."""
    model, hw, bpp = settings.model, settings.hardware, settings.bpp
    stack = stack_of(settings)
    pc = count_params(model)
    h, a, k, d, f, V = (model.hidden_size, model.num_attention_heads, model.kv_heads, model.dhead,
                        model.ffn_hidden_size, model.vocab_size)
    tp = plan.tp.astype(np.float64)
    cp = plan.cp.astype(np.float64)
    T = plan.mbs * plan.seq / cp  # tokens per micro-batch on one GPU
    moe_on = model.moe is not None or model.mla is not None
    if model.mla is not None:  # MLA: up-projected K and V per query head, at the mean head dim (moe.py)
        k, d = a, model.core_head_dim
    if model.moe is not None:  # the mean middle-stage layer's MLP width per token (top_k c f_e + shared)
        f = moe.token_ffn_width(model, plan, settings.moe_capacity_factor)
    m = plan.microbatches.astype(np.float64)
    _, n_mid, n_last = stage_layers(model.num_layers, plan.pp, plan.vpp, plan.split_emb, plan.split_loss)
    layers = n_mid.astype(np.float64)  # a middle stage's layers; the last stage adds the output layer
    kv_local = np.maximum(k / tp, 1.0)
    # a run calibration's knobs (profile.RunKnobs; the identity without one): scalars, or arrays
    # of candidate values broadcasting with the plan's (the fit)
    kn = settings.knobs
    hbm = hw.hbm_bandwidth * HBM_EFFICIENCY * kn.memory_bound_efficiency_scale
    gemm_scale = kn.gemm_efficiency_scale
    kb = kernel_bytes(stack, plan.compile)
    fp8 = plan.precision == FP8
    recipe = fp8_recipe(stack, plan.f8r)

    # ---------------------------------------------------------------- compute per layer
    # GEMM shapes and times: one definition shared with `planner calibrate gemm` (a
    # profile's measured GEMMs replace the plateau x wave model for the shapes it covers)
    prof = settings.calibration
    gemm_cal = None if prof is None else getattr(prof, "gemm", None)
    gt = forward_gemm_times(model, hw, plan.tp, T, plan.precision, gemm_cal)
    # fp8: the recipe's GEMM speed (rowwise scaling runs slower than tensorwise); the output
    # layer stays in bf16 where the recipe keeps it there (stack_db fp8_recipes)
    speed = np.where(fp8, recipe["gemm_speed"], 1.0) * gemm_scale
    g_fwd = gt.sum(*LAYER_GEMMS) / speed
    if moe_on:  # MLA projections; MoE router, shared and per-expert (grouped) GEMMs (moe.py)
        g_fwd = moe.layer_gemm_fwd(model, hw, plan, T, settings.moe_capacity_factor, gemm_cal, gt) / speed
    out_gemm = gt.output_layer / speed
    if np.any(fp8 & recipe["output_layer_bf16"]):
        gt16 = forward_gemm_times(model, hw, plan.tp, T, np.zeros_like(plan.precision), gemm_cal)
        out_gemm = np.where(fp8 & recipe["output_layer_bf16"], gt16.output_layer / gemm_scale, out_gemm)
    attn_flops_fwd = 4.0 * T * plan.seq * a * d / tp * 0.5  # causal kernel work
    attn_rate_fwd, attn_rate_bwd = attention_rates(hw)
    attn_fwd = attn_flops_fwd / (attn_rate_fwd * stack.attention_speed * gemm_scale)
    attn_bwd = ATTN_BWD_FLOPS_RATIO * attn_flops_fwd / (attn_rate_bwd * stack.attention_speed * gemm_scale)
    rep_div = np.where(plan.sp > 0, tp, 1.0)
    drop = 1.0 if model.dropout else 0.0
    rope = 1.0 if model.position_embedding == "rope" else 0.0
    mlp_act = kb["mlp_activation_gated"] if model.gated_mlp else kb["mlp_activation_plain"]
    f1 = 2.0 * f if model.gated_mlp else f
    bias = kb["bias"] * (1.0 if model.linear_bias else 0.0)
    # memory-bound kernels of one layer, forward, by the stack's bytes per element: two norms,
    # two residual adds, two dropouts (replicated across TP unless SP), rotary on Q and K, the
    # MLP activation, separate bias adds (QKV, output, up, down)
    def ew_bytes(sfx, mlp):  # forward (sfx "") or backward (sfx "_bwd") bytes of one layer's memory-bound kernels
        return T * (
            (2.0 * kb["norm" + sfx] * h + 2.0 * kb["residual" + sfx] * h + 2.0 * kb["dropout" + sfx] * drop * h
             + bias * 2.0 * h) / rep_div
            + rope * kb["rope" + sfx] * (a / tp + kv_local) * d
            + mlp * f / tp
            + bias * ((a / tp + 2.0 * kv_local) * d + f1 / tp)
        )

    ew_fwd_bytes = ew_bytes("", mlp_act)
    ew_bwd_bytes = ew_bytes("_bwd", kb["mlp_activation_gated_bwd"] if model.gated_mlp else kb["mlp_activation_plain_bwd"])
    # fp8: every GEMM input (activations and weights) is scaled and cast each forward, and the
    # output gradients in backward (twice the forward's elements: dgrad and wgrad inputs)
    gemm_in = T * (2.0 * h + a * d / tp + f / tp)  # activation inputs of QKV, output, up, down
    w_elems = (h * (a / tp + 2.0 * kv_local) * d + a * d / tp * h + h * f1 / tp + f / tp * h)
    cast_fwd = np.where(fp8, recipe["cast_bytes"] * (gemm_in + w_elems), 0.0)
    ew_fwd = (ew_fwd_bytes + cast_fwd) / hbm
    # MoE router top-k and token permutations (moe.dispatch_bytes): memory-bound, on the mean
    # layer's MoE share, forward and backward (each permutation's gradient is its inverse)
    perm_fwd = perm_bwd = np.float64(0.0)
    if model.moe is not None:
        pf_bytes, pb_bytes = moe.dispatch_bytes(model, plan, T, settings.moe_capacity_factor)
        moe_share = moe.middle_moe_share(model, plan)
        perm_fwd, perm_bwd = moe_share * pf_bytes / hbm, moe_share * pb_bytes / hbm
    layer_fwd = g_fwd + attn_fwd + ew_fwd + perm_fwd
    layer_bwd = 2.0 * g_fwd + attn_bwd + (ew_bwd_bytes + 2.0 * cast_fwd) / hbm + perm_bwd
    # selective recompute re-runs what the stack's policy does not keep: the attention core
    # (Megatron), the projections off its save list, the elementwise kernels (torchtitan's
    # per-op policy); full recompute re-runs the forward of the layers it covers
    sel = stack.selective
    proj_share = {  # share of each fused forward GEMM that one projection is
        "q": ("qkv", (a / tp) / (a / tp + 2.0 * kv_local)), "k": ("qkv", kv_local / (a / tp + 2.0 * kv_local)),
        "v": ("qkv", kv_local / (a / tp + 2.0 * kv_local)), "o": ("attn_out", 1.0),
        "gate": ("mlp_up", 0.5 if model.gated_mlp else 0.0), "up": ("mlp_up", 0.5 if model.gated_mlp else 1.0),
        "down": ("mlp_down", 1.0),
    }
    sel_gemm = sum((gt[proj_share[p][0]] * proj_share[p][1] for p in sel.recompute_projections), np.float64(0.0)) / speed
    sel_layer = (sel_gemm + (attn_fwd if sel.recompute_attention_core else 0.0)
                 + (ew_fwd if sel.recompute_elementwise else 0.0))
    sel_extra = np.where(plan.recompute == RC_SELECTIVE, sel_layer, 0.0)
    rc_mid = recomputed_layers(settings, plan, n_mid).astype(np.float64)
    rc_last = recomputed_layers(settings, plan, n_last).astype(np.float64)
    # output layer + loss on the last stage
    logits = 3.0 * out_gemm + T * V / tp * kb["loss_per_logit"] / hbm
    # the pipeline runs at its slowest stage: a middle one, or the last with the loss
    layer_base = layer_fwd + layer_bwd + sel_extra
    compute_mid = layers * layer_base + rc_mid * layer_fwd
    compute_last = n_last * layer_base + rc_last * layer_fwd + logits
    compute_mb = np.maximum(compute_mid, compute_last)
    # the MoE routing and permutation share of the critical stage's compute (its own term;
    # a full recompute re-runs the forward's)
    perm_mb = np.where(compute_mid >= compute_last, layers * (perm_fwd + perm_bwd) + rc_mid * perm_fwd,
                       n_last * (perm_fwd + perm_bwd) + rc_last * perm_fwd)

    # ---------------------------------------------------------------- communication
    cpar = comm.comm_params(hw)
    job = settings.gpus
    strides = comm.strides_by_code(plan.order, tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)

    groups = [] if prof is None or getattr(prof, "nccl", None) is None else prof.nccl.groups
    used: set[str] = set() if gemm_cal is None else {"gemm"}

    bw_nv, bw_in = kn.nvlink_bandwidth_scale, kn.internode_bandwidth_scale
    bw_arrays = np.ndim(bw_nv) > 0 or np.ndim(bw_in) > 0
    bw_scaled = bw_arrays or float(bw_nv) != 1.0 or float(bw_in) != 1.0

    def coll_all(op, size, group, stride, s_nv=bw_nv, s_in=bw_in):
        cost, link, _ = comm.group_collective(op, size, group, stride, cpar, comm.AUTO, job_gpus=job)
        t = cost.time_s
        if bw_scaled:  # a run calibration's bandwidth scale of the tier the group's traffic crosses
            t = cost.latency_s + cost.bandwidth_s / np.where(link.link == comm.LINK_NVLINK, s_nv, s_in)
        # a calibration profile replaces the default for the (collective, scope, ranks) it
        # measured; scope from placement: NVLink = intra-node, anything else inter-node
        for g in groups:
            if PROFILE_OPS.get(g.collective) != op:
                continue
            scope_ok = (link.link == comm.LINK_NVLINK) if g.scope == "intra-node" else (link.link != comm.LINK_NVLINK)
            hit = scope_ok & (np.asarray(group) == g.ranks)
            if np.any(hit):
                used.add(f"{g.collective}/{g.scope}/{g.ranks}")
                t = np.where(hit, g.time(size), t)
        return np.where(group > 1, t, 0.0)

    memo = settings.comm_memo

    def coll(op, size, group, stride):  # coll_all once per distinct (size, group, stride)
        if bw_arrays:  # candidate knob values of a fit: distinct per element too
            return comm.apply_unique(lambda s, g, st, a, b: coll_all(op, s, g, st, a, b), size, group, stride, bw_nv, bw_in)
        if memo is None:
            return comm.apply_unique(lambda s, g, st: coll_all(op, s, g, st), size, group, stride)
        args = [np.asarray(x).ravel() for x in np.broadcast_arrays(size, group, stride)]
        shape = np.broadcast(size, group, stride).shape
        if not all(a.size and (a == a[0]).all() for a in args):  # memo: one plan's collectives only
            return comm.apply_unique(lambda s, g, st: coll_all(op, s, g, st), size, group, stride)
        one = [a[:1] for a in args]
        key = (op, float(bw_nv), float(bw_in)) + tuple(a.dtype.str + a.tobytes().hex() for a in one)
        if key not in memo:
            before = set(used)
            memo[key] = (np.asarray(coll_all(op, *one))[0], used - before)
        t, added = memo[key]
        used.update(added)
        return np.full(shape, t)

    msg = T * h * ACT_BYTES
    # each plan pays only the collectives it runs (group 1 = no collective), so a
    # calibration profile is reported as used only where it changed a time
    sp_on = plan.sp > 0
    tp_ar = np.where(sp_on, 1, plan.tp)
    tp_sp = np.where(sp_on, plan.tp, 1)
    ar = coll(comm.ALL_REDUCE, msg, tp_ar, strides["tp"])
    rs_ag = coll(comm.REDUCE_SCATTER, msg, tp_sp, strides["tp"]) + coll(comm.ALL_GATHER, msg, tp_sp, strides["tp"])
    per_pair = np.where(plan.sp > 0, rs_ag, ar)  # one forward "all-reduce" worth
    tpo = plan.tpo > 0

    def tp_per_layer(pairs, gemm_passes):
        t = pairs * per_pair
        # TP-communication overlap [7]: each all-gather / reduce-scatter is split into tp
        # chunks that ring-exchange while the GEMM they feed computes on the chunks already
        # there; the first chunk and whatever outlasts the GEMMs stay exposed.
        hidden = np.maximum(t - gemm_passes * g_fwd, 0.0) + t / tp
        return np.where(tpo, np.minimum(hidden, t), t)

    # 4 per layer (2 forward, 2 backward); a recomputed layer repeats its forward 2; the
    # stack's selective policy may re-run some of a layer's forward collectives
    sel_tp = np.where(plan.recompute == RC_SELECTIVE, sel.recompute_tp_collectives / 2.0, 0.0)
    tp_comm_mb = ((layers - rc_mid) * tp_per_layer(4.0 + sel_tp, 3.0)
                  + rc_mid * tp_per_layer(6.0, 4.0))

    ep_mb = 0.0
    if model.moe is not None:
        # MoE layers (moe.py): the MLP's TP pair moves the top_k c dispatched copies of each
        # token (expert TP = TP), and dispatch + combine are all-to-alls over the EP group,
        # 2 forward and 2 backward per layer (+2 per recomputed layer)
        share = moe.middle_moe_share(model, plan)
        n_moe, rc_moe = layers * share, rc_mid * share
        xk = moe.expert_tokens_factor(model, settings.moe_capacity_factor)
        big = np.where(sp_on, coll(comm.REDUCE_SCATTER, msg * xk, tp_sp, strides["tp"])
                       + coll(comm.ALL_GATHER, msg * xk, tp_sp, strides["tp"]),
                       coll(comm.ALL_REDUCE, msg * xk, tp_ar, strides["tp"]))
        tp_comm_mb = tp_comm_mb + (2.0 * n_moe + rc_moe) * (big - per_pair)
        a2a = coll(comm.ALL_TO_ALL, moe.alltoall_bytes(model, plan, T, settings.moe_capacity_factor), plan.ep,
                   moe.ep_stride(plan, strides))
        ep_mb = (moe.A2A_PER_LAYER * n_moe + 2.0 * rc_moe) * a2a
        if settings.ep_comm_overlap:
            # the combined 1F1B schedule (moe.py [8]), where it applies: a layer's 2 forward
            # all-to-alls hide behind the partner micro-batch's backward of a layer, its 2
            # backward ones behind a layer's forward, at the stack's exposed share; the passes
            # that run alone keep theirs (moe.alone_pass_share)
            x_ov = (stack.overlap.overlapped_exposed_fraction if kn.overlapped_exposed_fraction is None
                    else kn.overlapped_exposed_fraction)
            half = 0.5 * moe.A2A_PER_LAYER * share * a2a  # a mean layer's forward (or backward) all-to-alls
            alone = moe.alone_pass_share(plan, m)
            paired = _hide(half, layer_bwd, x_ov) + _hide(half, layer_fwd, x_ov)
            ep_overlapped = layers * (alone * 2.0 * half + (1.0 - alone) * paired)
            ep_mb = np.where(moe.ep_overlap_applies(plan), ep_overlapped, ep_mb)

    kv_chunk = T * 2.0 * kv_local * d * ACT_BYTES  # local K and V
    cp_send = coll(comm.SEND_RECV, kv_chunk, plan.cp, strides["cp"])
    cp_total_layer = 3.0 * (cp - 1.0) * cp_send
    cp_exposed_layer = np.maximum(cp_total_layer - (attn_fwd + attn_bwd), 0.0)
    cp_mb = layers * cp_exposed_layer

    pp_msg = T * h * ACT_BYTES / rep_div
    pp_send = coll(comm.SEND_RECV, pp_msg, plan.pp, strides["pp"])
    # blocking p2p waits for every send; an overlapped one (Megatron's interleaved schedule)
    # hides behind the next model chunk's compute, at the stack's exposed share
    p2p = stack.overlap.pp_p2p_overlapped
    overlapped = (plan.schedule == INTERLEAVED) if p2p == "interleaved" else np.full(np.shape(plan.pp), p2p == "always")
    chunk = layers / plan.vpp * layer_fwd
    x = stack.overlap.overlapped_exposed_fraction if kn.overlapped_exposed_fraction is None else kn.overlapped_exposed_fraction
    pp_mb = 2.0 * plan.vpp * np.where(overlapped, _hide(pp_send, chunk, x), pp_send)

    # DP / sharding: gradients reduce over every rank that holds the same weights, dp x cp
    # (context-parallel ranks compute gradients of the same weights on other tokens); the
    # group's placement is taken at the finer of the two axes' strides
    p_first, p_last = stage_params(pc, model, plan)
    p_local = np.maximum(p_first, p_last)
    fs = stack.fsdp
    shard_n = np.where(plan.sharding == HSDP, plan.shard, plan.dp) * plan.cp
    dpcp = plan.dp * plan.cp
    dp_stride = np.where(plan.cp > 1, np.minimum(strides["dp"], strides["cp"]), strides["dp"])
    grad_b = p_local * fs.grad_reduce_bytes
    w_b = p_local * np.where(fp8 & recipe["allgather_fp8"], 1.0, fs.param_gather_bytes)
    fsdp = plan.sharding >= FSDP
    zero = (plan.sharding >= ZERO1) & ~fsdp
    sharded = plan.sharding >= ZERO1
    # the stack issues these as one collective per bucket (an FSDP unit = a layer, or a bucket of
    # parameters: Megatron DDP, DeepSpeed), each paying the collective's latency term
    fsdp_bucket = fs.fsdp_bucket_params if fs.fsdp_bucket_params is not None else p_local / layers
    ddp_bucket = np.maximum(fs.ddp_bucket_params, fs.ddp_bucket_params_per_dp_rank * dpcp)
    n_b = np.maximum(np.ceil(p_local / np.where(plan.sharding >= FSDP, fsdp_bucket, ddp_bucket)), 1.0)

    def bucketed(op, size, group):
        return n_b * coll(op, size / n_b, group, dp_stride)

    ag_w = bucketed(comm.ALL_GATHER, w_b, np.where(sharded, shard_n, 1))
    rs_g = bucketed(comm.REDUCE_SCATTER, grad_b, np.where(sharded, shard_n, 1))
    ar_g = bucketed(comm.ALL_REDUCE, grad_b, np.where(sharded, 1, dpcp))
    replicas = plan.dp // np.maximum(np.where(plan.sharding == HSDP, plan.shard, plan.dp), 1)
    ar_hsdp = np.where(plan.sharding == HSDP,
                       coll(comm.ALL_REDUCE, grad_b / shard_n, replicas, strides["dp"] * plan.shard), 0.0)
    fwd_mb = layers * (layer_fwd) + logits / 3.0
    bwd_mb = layers * (layer_bwd + sel_extra) + rc_mid * layer_fwd + logits * 2.0 / 3.0
    # FSDP: an all-gather of the weights in forward and one in backward and a reduce-scatter of
    # the gradients, per micro-batch [5]; a stack that keeps the weights unsharded under PP
    # gathers once per step and reduces once (no resharding, no sync until the last
    # micro-batch); one that accumulates without sync reduces once per step
    keep_pp = (plan.pp > 1) & (not fs.reshard_after_forward_with_pp)
    n_ag = np.where(keep_pp, 1.0, 2.0 * m)
    n_rs = np.where(keep_pp | (not fs.reduce_per_microbatch), 1.0, m)
    fsdp_total = n_ag * ag_w + n_rs * rs_g + ar_hsdp
    # the first unit's all-gather and the last unit's reduce-scatter (1/n_b of each: a layer,
    # or a bucket) never hide; the rest hides behind the forward (all-gathers) and the backward (the backward
    # all-gather and the reduce-scatter) passes of its micro-batch. A stack that issues the
    # backward all-gather only after the current unit's gradients (FSDP1 BACKWARD_POST) has
    # nothing to hide it behind: the next unit's backward waits for it.
    ag_edge, rs_edge = ag_w / n_b, rs_g / n_b  # never hide: taken out of what can hide
    ag_b = np.where(keep_pp, 0.0, ag_w)  # backward all-gather of one micro-batch
    per_mb = n_rs == m
    rs_b = np.where(per_mb, rs_g, 0.0)  # reduce-scatter of one micro-batch
    rs_b_last = np.where(per_mb, rs_g - rs_edge, 0.0)  # the last micro-batch's, less the last unit's

    def bwd_of(rs):  # exposed backward traffic of one micro-batch
        if stack.overlap.fsdp_backward_prefetch:
            return _hide(ag_b + rs, bwd_mb, x)  # both behind the micro-batch's backward
        return ag_b + _hide(rs, bwd_mb, x)

    fwd_ag = np.where(keep_pp, _hide(ag_w - ag_edge, m * fwd_mb, x),
                      _hide(ag_w - ag_edge, fwd_mb, x) + (m - 1.0) * _hide(ag_w, fwd_mb, x))
    fsdp_exposed = (fwd_ag + (m - 1.0) * bwd_of(rs_b) + bwd_of(rs_b_last)
                    + np.where(per_mb, 0.0, _hide(rs_g - rs_edge, bwd_mb, x)) + ag_edge + rs_edge + ar_hsdp)
    # each piece is at most its own traffic, so exposed <= total; the minimum only absorbs rounding
    fsdp_exposed = np.minimum(fsdp_exposed, fsdp_total)
    # the stack's copies into and out of the collective buffers (FSDP2 copy-in/copy-out, the
    # fp32 cast before the reduce-scatter) run on the GPU's HBM, per unsharded parameter
    fsdp_copies = np.where(fsdp, (n_ag * fs.allgather_copy_bytes + n_rs * fs.reduce_copy_bytes) * p_local / hbm, 0.0)
    # DDP / ZeRO-1/2: gradients once per step behind the last micro-batch's backward
    ddp_grad = np.where(zero, rs_g, ar_g)
    ddp_param = np.where(zero, ag_w, 0.0)
    ddp_total = ddp_grad + ddp_param
    # the last bucket's reduction and the first bucket's all-gather (1/n_b) never hide; the
    # rest hides behind the backward / forward pass (not the whole of it on top: exposed <= total)
    g_edge, p_edge = ddp_grad / n_b, ddp_param / n_b
    ddp_exposed = np.minimum(_hide(ddp_grad - g_edge, bwd_mb, x) + g_edge
                             + _hide(ddp_param - p_edge, fwd_mb, x) + p_edge, ddp_total)
    one_dp = dpcp == 1
    dp_total = np.where(one_dp, 0.0, np.where(fsdp, fsdp_total, ddp_total))
    # without overlap (dp_comm_overlap off) every DP transfer waits for, and is waited on by, compute
    dp_exposed = np.where(one_dp, 0.0, np.where(plan.dpo > 0, np.where(fsdp, fsdp_exposed, ddp_exposed), dp_total))
    if model.moe is not None:
        # routed-expert gradients (and FSDP/ZeRO weight gathers) over the expert-data-parallel
        # ranks, dp*cp/ep (shard group / ep), placed ep strides out (moe.py); they hide behind
        # what the dense traffic leaves of the same compute window
        # on the stage with the most of them: a middle stage can hold more MoE layers than the
        # first (DeepSeek's dense layers) or the last (the loss under split_loss)
        e_local = np.maximum.reduce(moe.expert_stage_params(pc, model, plan))
        e_shard, edp, e_st = shard_n // plan.ep, dpcp // plan.ep, moe.ep_stride(plan, strides) * plan.ep
        n_be = np.maximum(np.ceil(e_local / np.where(fsdp, fsdp_bucket, ddp_bucket)), 1.0)
        w_per = np.where(fp8 & recipe["allgather_fp8"], 1.0, fs.param_gather_bytes)

        def e_coll(op, size, group):
            return n_be * coll(op, size / n_be, group, e_st)

        ag_we = e_coll(comm.ALL_GATHER, e_local * w_per, np.where(sharded, e_shard, 1))
        rs_ge = e_coll(comm.REDUCE_SCATTER, e_local * fs.grad_reduce_bytes, np.where(sharded, e_shard, 1))
        ar_ge = e_coll(comm.ALL_REDUCE, e_local * fs.grad_reduce_bytes, np.where(sharded, 1, edp))
        e_total = np.where(fsdp, n_ag * ag_we + n_rs * rs_ge, np.where(zero, rs_ge + ag_we, ar_ge))
        window = np.where(fsdp, m * (fwd_mb + bwd_mb), fwd_mb + bwd_mb)
        left = np.maximum(window - dp_total, 0.0)
        dp_total = dp_total + e_total
        dp_exposed = dp_exposed + np.where(plan.dpo > 0, _hide(e_total, left, x), e_total)

    # ---------------------------------------------------------------- optimizer
    d_shard = np.where(plan.sharding == HSDP, plan.shard, plan.dp) * plan.cp
    local_shard = p_local / np.where(plan.sharding >= ZERO1, d_shard, 1)
    optimizer = local_shard * (ADAM_BYTES_PER_PARAM + bpp.gradients) / hbm
    if model.moe is not None:  # the routed experts' shard: over the expert-data-parallel ranks
        optimizer = optimizer + e_local / np.where(plan.sharding >= ZERO1, e_shard, 1) * (
            ADAM_BYTES_PER_PARAM + bpp.gradients) / hbm

    # ---------------------------------------------------------------- assemble
    compute = m * (compute_mb - perm_mb) + np.where(dpcp > 1, fsdp_copies, 0.0)
    tp_comm = m * tp_comm_mb
    cp_comm = m * cp_mb
    pp_comm = m * pp_mb
    t_mb = compute_mb + tp_comm_mb + cp_mb + pp_mb
    if model.moe is not None:
        t_mb = t_mb + ep_mb
    # (p-1)/(v m) of the busy time [6]; ZB-H1's bubble depends on the pass durations, here
    # this plan's own: backward / forward, and the weight-gradient GEMMs' share of backward
    # (one forward's worth of GEMMs, the dgrad being the other)
    bwd_ratio = bwd_mb / fwd_mb
    w_share = np.minimum(layers * g_fwd / bwd_mb, 1.0)
    bubble = bubble_fraction(plan.pp, m, plan.vpp, plan.schedule, bwd_ratio, w_share) * m * t_mb
    # MoE: router top-k + token permutations (memory-bound), and the all-to-alls (moe.py)
    ep_terms = {} if model.moe is None else {"moe_permute": m * perm_mb, "ep_comm": m * ep_mb}
    terms = Terms(compute=compute, tp_comm=tp_comm, cp_comm=cp_comm, pp_comm=pp_comm,
                  dp_comm_exposed=dp_exposed, bubble=bubble, optimizer=optimizer, **ep_terms)
    extra = {"dp_comm_s": dp_total, "cp_comm_total_s": m * layers * cp_total_layer, "calibrated": sorted(used)}
    return terms, extra


def throughput(settings: Settings, plan: PlanArrays, step_s) -> dict:
    """Tokens/s, MFU and HFU for a step time (PaLM's definitions)."""
    model, hw = settings.model, settings.hardware
    causal = settings.causal_attention_flops
    ft = flops_per_token(model, plan.seq, plan.recompute, causal)
    # HFU counts what the kernels run: causal attention (FlashAttention skips the masked
    # blocks) and the recomputation, whatever convention MFU uses
    ft_hw = flops_per_token(model, plan.seq, plan.recompute, True)
    rc = recompute_flops_per_token(model, plan.seq, plan.recompute, True, recompute_fraction(settings, plan))
    tokens = plan.gbs * plan.seq
    tps = tokens / step_s
    peak = np.where(plan.precision == 1, hw.fp8_TFLOPS or np.nan, hw.bf16_TFLOPS) * 1e12
    denom = settings.gpus * peak
    return {
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / settings.gpus,
        "mfu": ft.total * tps / denom,
        "mfu_6n": ft.dense * tps / denom,
        "hfu": (ft_hw.total + rc) * tps / denom,
        "tflops_per_gpu": ft.total * tps / settings.gpus / 1e12,
        # what the GPUs execute (causal attention, recompute): never above the hardware's GEMM rate
        "hardware_tflops_per_gpu": (ft_hw.total + rc) * tps / settings.gpus / 1e12,
        "peak_tflops": peak / 1e12,
    }
