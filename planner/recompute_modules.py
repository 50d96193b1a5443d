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

Megatron's other modules (mlp, moe, shared_experts: checkpoints that keep their output and
re-run the whole block; gdn_*, gdp_*, mhc) are not priced: schema.RecomputeModule refuses them.
What a module's re-run forward costs is priced by step.layer_times (the GEMM shares, the
attention core, the memory-bound kernels of the re-run norms and activation); what it frees by
memory.layer_memory (the tensors dropped from the policy's keeps and the kinds' tables).
"""

from __future__ import annotations

import numpy as np

from .errors import PlannerError
from .schema import SelectiveRecompute, Stack

SOURCE = ("NVIDIA/Megatron-LM @d98e8a64: megatron/core/transformer/transformer_config.py recompute_modules (l. 560-585, "
          "1940-2025); attention.py l. 394 (core_attn); transformer_layer.py l. 470-531 (layernorm: input_layernorm and "
          "pre_mlp_layernorm where not IdentityOp); moe/experts.py l. 269-272, 1019-1030 (moe_act); "
          "multi_latent_attention.py l. 171-174 (mla_up_proj); models/gpt/gpt_layer_specs.py l. 244-340 (which norms "
          "are fused into Transformer Engine's LayerNormLinear)")

# the up-projections' outputs mla_up_proj does not keep (the deepseek stack names the same three)
MLA_UP_PROJ_TENSORS = ("q", "k", "v")


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
    if "moe_act" in modules and not job.moe_grouped_gemm:  # Megatron-Core refuses it (l. 1964-1967): the plans with
        policy = policy.model_copy(update={"ungrouped_moe_act": True})  # recompute selective break a start-up rule
    return stack.model_copy(update={"selective": policy})


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
