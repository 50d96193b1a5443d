"""The selective-recompute policy a list of Megatron-Core --recompute-modules makes.

Megatron-Core's selective recompute (--recompute-granularity selective) re-runs the modules
named in --recompute-modules (TransformerConfig.recompute_modules, default ["core_attn"]:
megatron/core/transformer/transformer_config.py @d98e8a64 lines 560-585, 1940-1941). The job
field recompute_modules replaces the stack's selective policy (stack_db selective, which is
Megatron's default [core_attn]) with the one below, where the plan's recompute is selective.
Each module, as the code at NVIDIA/Megatron-LM @d98e8a64 runs it:

  core_attn    attention.py l. 394 (_checkpointed_attention_forward): the attention core
               (QK^T, softmax, AV) is checkpointed and re-run in the backward; its saved state is
               not kept. The stack's recompute_attention_core.
  layernorm    transformer_layer.py l. 470-531: CheckpointWithoutOutput around input_layernorm
               and pre_mlp_layernorm where they are modules of their own (not IdentityOp): the
               norm output is discarded after the next module has used it and re-run before that
               module's backward. With Transformer Engine (gpt_layer_specs.py l. 244-340) the
               input norm of standard attention is fused into linear_qkv (TELayerNormColumnParallel-
               Linear keeps its normalised input) and a dense MLP's pre-MLP norm into linear_fc1, so
               only MLA's input_layernorm (a TENorm unless mla_down_proj_fusion, default False,
               transformer_config.py l. 3338) and an MoE layer's pre_mlp_layernorm (a TENorm before
               the router) are re-run: recompute_norm_outputs mla_input and moe_pre_mlp.
  moe_act      moe/experts.py l. 269-272, 1019-1030: CheckpointWithoutOutput around the grouped
               experts' bias + activation (+ clamp) + probability weighting; its output, linear_fc2's
               input, is discarded once fc2 has run and re-run before fc2's backward: the kind
               tensor moe_expert_act_out (layers/moe.py), and the activation's kernels re-run.
  mla_up_proj  multi_latent_attention.py l. 171-174: CheckpointWithoutOutput around the q and kv
               up-projections and the rotary application: their outputs q, k, v are not kept
               and the up-projections' forward GEMMs re-run (recompute_projections q, k, v, MLA's
               up-projection shares: layers/attention.py MLA.projection_shares).

  mlp          transformer_layer.py l. 537-539, 992-1010 (_run_mlp): on a layer without experts
               (is_moe_layer false) tensor_parallel.checkpoint (te_checkpoint under fp8 / fp4) around
               the whole MLP module, its input the pre-MLP norm's: with Transformer Engine the norm is
               fused into linear_fc1 (gpt_layer_specs.py l. 244-340), so the checkpoint keeps the
               layer's hidden state (norm2_in, kept anyway) and none of the MLP's saves: the norm
               output, gate, up, the activation output (norm2_out, gate, up, act_out: block_drops).
               The backward re-runs the norm, fc1, the activation, fc2 and their TP collectives (the
               SP all-gather into fc1, the reduce-scatter out of fc2). The output (mlp_out) and the
               bias-dropout-add are outside the checkpoint.
  moe          moe_layer.py l. 247-251, 658-719: tensor_parallel.checkpoint (te_checkpoint under
               fp8 / fp4) around custom_forward, the whole MoE forward: the shared experts, the
               router, the preprocess (permutation), the dispatch all-to-all, the routed experts,
               the combine all-to-all and the postprocess, from the block's input (the pre-MLP
               TENorm's output, norm2_out, kept: it is the checkpoint's input). None of the block's
               own saves is kept: the router's and the permutations' (routing_saved_bytes, the
               unfused activation's saves), the kind tensors MOE_BLOCK_TENSORS; the backward re-runs
               the block's forward GEMMs (router, shared and routed experts), its memory-bound
               kernels (activation, permutation), its expert-TP collectives and the dispatch and
               combine (step.ep_comm). Not a dense layer's module: an MoE layer ignores mlp (l. 537-539).
               Under cuda_graph_impl local with partial MoE graphs the checkpoint moves to the layer
               (transformer_layer.py l. 2034-2038, 2225-2245) and also holds the pre-MLP norm, whose
               output it then drops too: not priced apart (priced as the module's checkpoint).
  shared_experts  moe_layer.py l. 252-255, 507-531: the shared experts module checkpointed from the
               block's input (norm2_out, which the router keeps anyway): their gate/up and activation
               outputs (moe_shared_gate_up, moe_shared_act_out) are not kept and their two GEMMs
               re-run. Megatron-Core refuses it with --moe-shared-expert-overlap
               (transformer_config.py l. 1991-1998), which the planner does not model.
Nested checkpoints run as Megatron runs them: moe with moe_act re-runs the activation in the block's re-run
forward and again before fc2's backward; moe with shared_experts re-runs the shared GEMMs twice. The same at
Megatron-LM 905c0e386 (Megatron-Bridge's pin): moe_layer.py l. 179-188, 388-400, 494-553; transformer_layer.py
l. 471-473, 781.

Megatron's other modules (gdn_*, gdp_*, mhc) are not priced: schema.RecomputeModule refuses them.
What a module's re-run forward costs is priced by step.layer_times (the GEMM shares, the
attention core, the memory-bound kernels of the re-run norms and activation); what it frees by
memory.layer_memory (the tensors dropped from the policy's keeps and the kinds' tables).
"""

from __future__ import annotations

import numpy as np

from .errors import PlannerError
from .schema import SelectiveRecompute, Stack

# the plan's recompute codes (plan.RECOMPUTE_CODES; here, a leaf, so that startup's rules read them
# without importing plan, which imports startup)
RC_NONE, RC_SELECTIVE, RC_FULL = 0, 1, 2

SOURCE = ("NVIDIA/Megatron-LM @d98e8a64: megatron/core/transformer/transformer_config.py recompute_modules (l. 560-585, "
          "1940-2025); attention.py l. 394 (core_attn); transformer_layer.py l. 470-531 (layernorm: input_layernorm and "
          "pre_mlp_layernorm where not IdentityOp); moe/experts.py l. 269-272, 1019-1030 (moe_act); "
          "multi_latent_attention.py l. 171-174 (mla_up_proj); transformer_layer.py l. 537-539, 992-1010 (mlp); "
          "moe/moe_layer.py l. 247-255, 507-531, 658-719 (moe, shared_experts); models/gpt/gpt_layer_specs.py "
          "l. 244-340 (which norms are fused into Transformer Engine's LayerNormLinear)")

# the up-projections' outputs mla_up_proj does not keep (the deepseek stack names the same three)
MLA_UP_PROJ_TENSORS = ("q", "k", "v")

# the modules that checkpoint a whole block (schema.SelectiveRecompute.recompute_blocks)
BLOCK_MODULES = ("mlp", "moe", "shared_experts")
# what a dense MLP checkpointed by mlp does not keep: the fused pre-MLP norm's output and fc1's and the
# activation's outputs (layers/mlp.py DenseMLP.tensors); its input norm2_in is the checkpoint's
DENSE_MLP_TENSORS = ("norm2_out", "gate", "up", "act_out")
# an MoE layer's own tensors (layers/moe.py MoE.tensors) inside moe's checkpoint (its input norm2_out is kept)
MOE_BLOCK_TENSORS = ("moe_router_logits", "moe_expert_in", "moe_expert_out", "moe_expert_gate_up", "moe_expert_act_out",
                     "moe_shared_gate_up", "moe_shared_act_out")
SHARED_EXPERT_TENSORS = ("moe_shared_gate_up", "moe_shared_act_out")


def modules_policy(modules, base: SelectiveRecompute) -> SelectiveRecompute:
    """The selective policy of Megatron-Core's `modules` (a list of schema.RecomputeModule),
    from the stack's Megatron default `base` (what it keeps without any module's re-run)."""
    mods = set(modules)
    keeps = [t for t in base.keeps if not ("mla_up_proj" in mods and t in MLA_UP_PROJ_TENSORS)]
    return SelectiveRecompute(
        description="--recompute-granularity selective --recompute-modules " + " ".join(modules)
                    + ": re-runs " + ", ".join(sorted(mods)) + " (planner/recompute_modules.py)",
        keeps=keeps,
        recompute_attention_core="core_attn" in mods,
        recompute_projections=list(MLA_UP_PROJ_TENSORS) if "mla_up_proj" in mods else [],
        recompute_elementwise=False,
        recompute_tp_collectives=0.0,
        recomputes=["moe_expert_act_out"] if "moe_act" in mods else [],
        recompute_norm_outputs=["mla_input", "moe_pre_mlp"] if "layernorm" in mods else [],
        recompute_blocks=[m for m in BLOCK_MODULES if m in mods],
        saves_tp_partials=False,
        sources=[SOURCE],
    )


def apply_modules(job, stack: Stack, model, where: str = "") -> Stack:
    """The stack with the job's recompute_modules as its selective policy (unchanged without
    them). Refused on a stack without the option, mla_up_proj on a model without MLA, as
    Megatron-Core refuses it (transformer_config.py l. 1969-1973), and moe_act / layernorm under fp8
    delayed scaling (l. 2000-2005). moe_act without moe_grouped_gemm (l. 1964-1967) is refused
    where the plan's recompute is selective (the only granularity that reads the modules): the
    policy's ungrouped_moe_act, start-up rule MEGATRON_MOE_ACT_GROUPED_GEMM (planner/startup.py)."""
    modules = job.recompute_modules
    if not modules:
        return stack
    if stack.recompute_modules is None:
        raise PlannerError(f"{where}recompute_modules is set but stack {stack.name} has no option that names the modules "
                           "selective recompute re-runs (stack_db recompute_modules)",
                           "leave it out, or choose --stack megatron")
    if "mla_up_proj" in modules and model.mla is None:
        raise PlannerError(f"{where}recompute_modules mla_up_proj needs multi-latent attention; model {model.name} has "
                           "none (Megatron-Core refuses it: transformer_config.py @d98e8a64 l. 1969)",
                           "leave mla_up_proj out")
    recipe = job.fp8_recipe or stack.defaults.fp8_recipe
    if job.precision == "fp8" and recipe == "delayed" and {"moe_act", "layernorm"} & set(modules):
        raise PlannerError(f"{where}recompute_modules {' '.join(sorted({'moe_act', 'layernorm'} & set(modules)))} with fp8 "
                           "recipe delayed: Megatron-Core refuses it ('Delayed scaling does not support moe_act and "
                           "layernorm recompute for fp8.', transformer_config.py @d98e8a64 l. 2000-2005)",
                           "use fp8_recipe tensorwise (or mxfp8, blockwise), or leave moe_act and layernorm out")
    policy = modules_policy(list(dict.fromkeys(modules)), stack.selective)
    if "moe_act" in modules and not moe_grouped_gemm_on(job, stack):  # Megatron-Core refuses it (l. 1964-1967): the plans with
        policy = policy.model_copy(update={"ungrouped_moe_act": True})  # recompute selective break a start-up rule
    return stack.model_copy(update={"selective": policy})


def moe_grouped_gemm_on(job, stack: Stack) -> bool:
    """The job's moe_grouped_gemm, else the stack's defaults.moe_grouped_gemm (Megatron-LM's false,
    stack_db/megatron.yaml), else off (a stack without the switch: no grouped-GEMM workspaces priced).
    Priced for an MoE model only: plan.moe_dispatch_settings refuses a given value on a dense model."""
    if job.moe_grouped_gemm is not None:
        return bool(job.moe_grouped_gemm)
    return bool(stack.defaults.moe_grouped_gemm)


def _is_mla(kind) -> bool:
    from .layers.attention import MLA

    return isinstance(kind.mixer, MLA)


def norm_drops(sel: SelectiveRecompute, kind) -> tuple:
    """The norm outputs of one layer kind that the policy discards and re-runs
    (recompute_norm_outputs): MLA's input norm output (norm1_out), an MoE layer's pre-MLP norm
    output (norm2_out, the router's and the dispatcher's input)."""
    out = ()
    if "mla_input" in sel.recompute_norm_outputs and _is_mla(kind):
        out += ("norm1_out",)
    if "moe_pre_mlp" in sel.recompute_norm_outputs and kind.has_experts:
        out += ("norm2_out",)
    return out


# the stack kernel figures of the routed experts' activation function (moe/experts.py
# bias_act_func: the clamp, the activation, the probability weighting in one checkpoint)
MOE_ACT_KERNELS = ("mlp_activation_gated", "mlp_activation_plain", "activation_clamp")


def rerun_kernel_bytes(sel: SelectiveRecompute, kind, ctx, kb: dict):
    """HBM bytes of the memory-bound kernels a policy that does not re-run every elementwise
    kernel (recompute_elementwise false) re-runs in one layer's backward for one micro-batch:
    the forward of each norm in norm_drops (the kind's own elementwise_bytes with the norm
    figure alone) and, where it discards moe_expert_act_out, the routed experts' activation
    (the MoE block's elementwise_bytes with MOE_ACT_KERNELS' figures alone)."""
    zero = {f: np.zeros_like(v) for f, v in kb.items()}  # each figure's shape (a null eager figure is NaN or inf)
    total = np.zeros(np.shape(ctx.T))
    if sel.recompute_elementwise:
        return total
    norm = {**zero, "norm": kb["norm"]}
    drops = norm_drops(sel, kind)
    if "norm1_out" in drops:
        total = total + kind.mixer.elementwise_bytes(ctx, norm, "")
    if "norm2_out" in drops:
        total = total + kind.mlp.elementwise_bytes(ctx, norm, "")
    if "moe_expert_act_out" in sel.recomputes and kind.has_experts:
        total = total + kind.mlp.elementwise_bytes(ctx, {**zero, **{k: kb[k] for k in MOE_ACT_KERNELS}}, "")
    return total


def block_drops(sel: SelectiveRecompute, kind) -> tuple:
    """The tensors of one layer kind that the policy's whole-block checkpoints (recompute_blocks)
    do not keep: a dense layer's MLP under mlp (DENSE_MLP_TENSORS; a kind without an MLP has
    none of them), an MoE layer's block under moe (MOE_BLOCK_TENSORS), its shared experts under
    shared_experts (SHARED_EXPERT_TENSORS). Kind and policy data, no searched quantity."""
    out = ()
    blocks = set(sel.recompute_blocks)
    if "mlp" in blocks and not kind.has_experts:
        out += DENSE_MLP_TENSORS
    if "moe" in blocks and kind.has_experts:
        out += MOE_BLOCK_TENSORS
    if "shared_experts" in blocks and kind.has_experts:
        out += tuple(t for t in SHARED_EXPERT_TENSORS if t not in out)
    return out


def reruns_moe_block(sel: SelectiveRecompute, kind) -> bool:
    """Whether the policy re-runs this kind's whole MoE block (moe): its routing and permutation saves
    (memory.moe_routing_saves, the unfused activation's saves) are not kept, and its dispatch and combine
    run again in the backward (step.ep_comm)."""
    return "moe" in sel.recompute_blocks and bool(kind.has_experts)


def reruns_dense_mlp(sel: SelectiveRecompute, kind) -> bool:
    """Whether the policy re-runs this kind's dense MLP (mlp; a kind without experts)."""
    return "mlp" in sel.recompute_blocks and not kind.has_experts


def block_rerun_times(sel: SelectiveRecompute, kind, ctx, kb: dict, times: dict, speed, hbm, permute_fwd):
    """Seconds one layer's backward spends re-running the forward of its checkpointed blocks for
    one micro-batch (collectives aside: step.tp_comm, step.ep_comm): under mlp a dense layer's fc1
    and fc2 (mlp_up, mlp_down: their priced forward seconds `times` over the stack's speed) and
    its kernels inside the checkpoint (the fused pre-MLP norm, the activation, the biases:
    elementwise_bytes without the residual add and dropout, outside it); under moe the MoE block's
    GEMMs (router, shared_up/down, expert_up/down), its kernels (elementwise_bytes without the norm,
    the residual add and the dropout, outside the checkpoint) and the permutation (permute_fwd:
    the forward's moe_dispatch_bytes and gating seconds); under shared_experts the shared experts'
    two GEMMs (their activation kernel is not split from the routed one's: not priced)."""
    total = np.zeros(np.shape(ctx.T))
    blocks = set(sel.recompute_blocks)
    if not blocks:
        return total
    zero = {f: np.zeros_like(v) for f, v in kb.items()}
    outside = {**kb, "residual": zero["residual"], "dropout": zero["dropout"]}

    def gemms(names):
        return sum((times[n] for n in names if n in times), np.float64(0.0)) / speed

    if reruns_dense_mlp(sel, kind):
        total = total + gemms(("mlp_up", "mlp_down")) + kind.mlp.elementwise_bytes(ctx, outside, "") / hbm
    if reruns_moe_block(sel, kind):
        total = (total + gemms(("router", "shared_up", "shared_down", "expert_up", "expert_down"))
                 + kind.mlp.elementwise_bytes(ctx, {**outside, "norm": zero["norm"]}, "") / hbm + permute_fwd)
    if "shared_experts" in blocks and kind.has_experts:
        total = total + gemms(("shared_up", "shared_down"))
    return total
