"""CUDA graphs a job captures (Megatron-Core --cuda-graph-impl / --cuda-graph-modules): which
combinations Megatron accepts, which the planner refuses, and what the planner prices of them.

What a graph changes, read at the code:
- A per-layer graph (impl local or transformer_engine) replays the captured part of a layer with
  one launch instead of the host issuing its kernels one by one [1][2]. The scopes [1]: attn
  (TransformerLayer._forward_attention), mlp (a dense layer's _forward_mlp), moe (an MoE layer's
  _forward_mlp), moe_router (_forward_mlp up to MoELayer.router(), with the shared experts where
  they are not overlapped), moe_preprocess (MoELayer.preprocess(), only with moe_router), mamba;
  an empty list: the whole layer. full_iteration: one graph for the forward-backward [1].
- A dropless MoE layer cannot be captured past its dispatch: the number of tokens each expert
  receives is known on the host only after a device-to-host copy and synchronisation in the
  token dispatcher [3], and the experts' shapes follow it. Megatron refuses the moe scope unless
  the experts are padded to capacity [1] (its MoE guide: "the resulting dynamic shapes make MoE
  layers uncapturable" [4]); with moe_preprocess graphed the dispatcher moves its device-to-host
  copy after the graph (cuda_dtoh_point before_ep_alltoall [3]), and the synchronisation stays;
  an alltoall dispatcher that drops tokens without padding synchronises in preprocess itself,
  and Megatron refuses moe_preprocess there [1]. Padded to capacity (moe_capacity_factor and
  moe_pad_to_capacity), every expert's input is a fixed size known on the host, and the alltoall
  and hybridep dispatchers copy nothing to the host [8]: the planner then accepts the moe scope,
  the whole layer and full_iteration, as Megatron does; otherwise (dropless, dropping without
  padding, or padded allgather, whose dispatch_postprocess calls .cpu() whatever the padding
  [8]) it refuses them on an MoE model.
- Time: a padded layer whose dispatcher does not synchronise exposes no host time
  (planner/step.py moe_host is 0 there, graphed or not); otherwise not priced apart. The host
  time a dropless MoE layer exposes is the stack's fitted moe_host
  (planner/step.py moe_host): its per-layer constant covers the kernels issued between two
  synchronisations, graphed (attention, router, preprocess) or not (dispatch, experts, combine),
  and the MoE records cannot say which part graphs remove (docs/moe_accuracy.md, "CUDA graphs
  read, checked": scripts/fit_moe_host.py --graph-split's third constant leaves the loss flat
  from 0 to 1.2 ms and the leave-one-out no better), so the graphed and the eager records share
  one constant.
- Priced, memory (held_output_bytes, in each MoE layer's saved activations: memory.py [cg]): a
  graph's outputs are static buffers in the graph pool, each kept from the layer's forward until
  its backward graph has run: Transformer Engine frees a callable's static outputs only once its
  backward is captured (weak references, so the pool reuses them in execution order [5]), and
  Megatron notes that an output "will be allocated a static buffer, thus not able to be
  released" [6]. With moe_router and moe_preprocess under transformer_engine the outputs are the
  layer's residual, the router's probabilities and routing metadata and what preprocess returns
  [6][7]; the alltoall dispatcher's preprocess returns the permuted tokens, top_k copies of each
  local token's hidden state (T / (tp under SP) x top_k x h x 2 B, bf16 [7]), which the eager
  layer frees after the dispatch all-to-all; the flex dispatchers (DeepEP, HybridEP) return the
  norm output itself, saved anyway [7]. The residual is the pre-MLP norm's input, saved anyway;
  the probabilities and metadata (top_k x 4 B and an E-byte bool map a token) are left out,
  under 0.5% of the permuted tokens (E 128, top-8, h 2,048: 160 B against 32,768 B). So the term: the permuted tokens, alltoall only. attn alone holds
  the attention block's output, the pre-MLP norm's saved input: nothing more. The local
  implementation's buffers (its own manager, cuda_graphs.py CudaGraphManager) and what a padded
  layer's moe scope or whole-layer graph holds are not priced.

References
[1] NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/transformer_config.py: cuda_graph_impl,
    cuda_graph_modules (l. 1075-1106) and __post_init__'s checks (l. 2698-2860: moe with
    moe_router, moe_preprocess without moe_router, moe/moe_router on a dense model, mlp on an
    all-MoE model, moe only with drop-padding, full_iteration with modules, full recompute only
    with full_iteration, CPU offloading); megatron/training/arguments.py l. 612-641 (--enable-cuda-graph
    -> local, --external-cuda-graph -> transformer_engine, --cuda-graph-scope the deprecated
    --cuda-graph-modules) and megatron/core/transformer/cuda_graph_config.py (full -> [],
    full_iteration -> cuda_graph_impl full_iteration).
[2] NVIDIA/TransformerEngine @d0067d0d transformer_engine/pytorch/graph.py _make_graphed_callables:
    one graph per callable and micro-batch (sample_args: layers x micro-batches), static buffers
    held for replay, all captures in one mempool.
[3] NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py
    MoEAlltoAllTokenDispatcher: preprocess l. 594-606 (the synchronisation before the
    all-to-all), cuda_dtoh_point l. 465-470.
[4] NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/README.md "CUDA Graph" (l. 501-514).
[5] NVIDIA/TransformerEngine @d0067d0d transformer_engine/pytorch/graph.py l. 800-905: with
    _reuse_graph_input_output_buffers (which Megatron sets from TE 2.7, cuda_graphs.py
    @d98e8a64 l. 2668-2671) the gradient-output buffers are shared by output signature and a
    callable's static outputs are weak-referenced after its backward graph is captured ("we
    just deallocate them and let PyTorch's memory allocator reuse them elsewhere").
[6] NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/transformer_layer.py l. 504-513
    (a cudagraph output "will be allocated a static buffer, thus not able to be released") and
    l. 937-950 (_forward_mlp under moe_router capture returns the MoE layer's outputs + the
    residual); moe/moe_utils.py l. 1550-1598 get_early_return_outputs (preprocess: the hidden
    states and probabilities preprocess returns, the dispatcher's cudagraph_attrs).
[7] NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py
    MoEAlltoAllTokenDispatcher.dispatch_preprocess l. 624-700 (permutation 1: the permuted
    tokens returned) and MoEFlexTokenDispatcher.dispatch_preprocess l. 1922-1945 (the hidden
    states reshaped, not permuted).
[8] planner/dispatch.py [7]: NVIDIA/Megatron-LM @d98e8a64 token_dispatcher.py, padded to capacity
    (drop_and_pad): MoEAlltoAllTokenDispatcher.preprocess l. 517-535 and
    _maybe_dtoh_and_synchronize l. 921-960 (no host copy, no synchronisation), _HybridEPManager
    l. 1113-1126 (the permuted size on the CPU), MoEAllGatherTokenDispatcher l. 320 (.cpu()
    unconditional); transformer_config.py l. 2838-2851 (moe only with drop-padding; moe_preprocess
    not with the alltoall dispatcher's capacity factor); l. 2870-2884 (attention dropout with the core
    attention recomputed in a graph) and l. 3063-3072 (--overlap-moe-expert-parallel-comm with
    transformer_engine graphs of moe or mlp): _job_graph_error.
"""

from __future__ import annotations

import numpy as np

from .moe_padding import host_synced
from .errors import PlannerError
from .layers.common import ACT_BYTES

IMPLS = ("none", "local", "transformer_engine", "full_iteration")  # [1] cuda_graph_impl
SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")  # [1] cuda_graph_modules


def _has_dense_mlp(model) -> bool:
    """Whether some layer keeps a dense MLP (Megatron's moe_layer_freq with a 0 [1]); a layer
    pattern is not read here (treated as having one: the check refuses only what is sure)."""
    moe = model.moe
    return (moe is None or moe.first_k_dense > 0 or moe.layer_freq != 1
            or getattr(model, "layer_pattern", None) is not None)


MC = " (Megatron-Core transformer_config.py @d98e8a64)"  # [1], named in the messages


def _combination_error(impl: str, scope: list, model, recompute: str, moe=(False, False, "alltoall")) -> str | None:
    """Why Megatron-Core [1] (or the planner, for an MoE layer whose dispatcher synchronises [3][4][8])
    refuses the combination; None: accepted. moe: (a capacity factor is set, the experts are padded
    to it, the dispatcher)."""
    drop, pad, dispatcher = moe
    if impl == "none":
        return "cuda_graph_scope is set without cuda_graph_impl (the modules are read only with a graph " \
               "implementation)" + MC if scope else None
    if impl == "full_iteration" and scope:
        return "cuda_graph_impl full_iteration captures the whole forward-backward: cuda_graph_scope must be empty" + MC
    if "moe" in scope and "moe_router" in scope:
        return "cuda_graph_scope must not contain both moe and moe_router" + MC
    if "moe_preprocess" in scope and "moe_router" not in scope and impl == "transformer_engine":
        return "moe_preprocess is graphed only with moe_router" + MC
    if model.moe is None and ({"moe", "moe_router", "moe_preprocess"} & set(scope)):
        return "the moe scopes capture an MoE layer; the model has none" + MC
    if model.moe is not None and "mlp" in scope and not _has_dense_mlp(model):
        return "mlp captures a dense layer's MLP; every layer of the model is MoE" + MC
    if model.moe is not None and "moe" in scope and not pad:
        return "the moe scope is graphed only with drop-padding MoE (moe_capacity_factor and moe_pad_to_capacity)" + MC
    # local graphs moe_preprocess with moe_router [1] (transformer_config.py l. 2805-2815)
    pre = "moe_preprocess" in scope or (impl == "local" and "moe_router" in scope)
    if model.moe is not None and pre and drop and not pad and dispatcher == "alltoall":
        return ("moe_preprocess is not graphed when the alltoall dispatcher drops tokens without padding (its "
                "preprocess copies the counts to the host and synchronises)" + MC)
    if model.moe is not None and (impl == "full_iteration" or not scope or "moe" in scope) and host_synced(pad, dispatcher):
        what = "full_iteration" if impl == "full_iteration" else ("the moe scope" if scope else "the whole layer")
        how = "padded to capacity" if pad else "not padded to capacity"
        return (f"{what} captures the experts, which an MoE layer with the {dispatcher} dispatcher, {how}, cannot"
                " (the dispatcher's device-to-host synchronisation and the experts' dynamic shapes: Megatron-Core "
                "token_dispatcher.py and its MoE README @d98e8a64); padded to capacity, alltoall and hybridep do not "
                "synchronise (planner/dispatch.py PAD_WITHOUT_SYNC)")
    if recompute == "full":
        return "full recompute runs with CUDA graphs only under cuda_graph_impl full_iteration" + MC
    return None


def _job_graph_error(job, model, impl: str, scope: list) -> str | None:
    """Megatron-Core's graph checks [1] that read the job's other settings: the core attention
    recomputed inside a graph with attention dropout (transformer_config.py l. 2870-2884: full_iteration,
    the whole layer or the attn scope, with core_attn among the selective modules, Megatron's default
    l. 1940-1941; the export writes --attention-dropout 0.1 for a model with dropout), and the EP
    all-to-all overlap with Transformer Engine graphs of the moe or mlp scope (l. 3063-3072)."""
    whole = impl == "full_iteration" or not scope
    modules = job.recompute_modules or ["core_attn"]
    if job.recompute == "selective" and model.dropout and "core_attn" in modules and (whole or "attn" in scope):
        return "attention dropout is not supported with graphed attention recomputation (the model's dropout with " \
               "core_attn recomputed)" + MC
    if job.ep_comm_overlap and impl == "transformer_engine" and {"moe", "mlp"} & set(scope):
        return "the moe and mlp scopes are not graphed by transformer_engine with ep_comm_overlap " \
               "(--overlap-moe-expert-parallel-comm)" + MC
    return None


def cuda_graph_error(job, model, stack, where: str = "") -> PlannerError | None:
    """The error for a job's CUDA graphs: on a stack without them (stack cuda_graphs), or a
    combination Megatron-Core refuses [1] or the planner cannot price [3][4][8]; None: fine."""
    impl, scope = job.cuda_graph_impl, list(job.cuda_graph_scope or [])
    if impl == "none" and not scope:
        return None
    if stack is not None and stack.cuda_graphs is None:
        return PlannerError(f"{where}cuda_graph_impl {impl} / cuda_graph_scope {scope}: stack {stack.name} has no CUDA "
                            "graph option (stack_db cuda_graphs)",
                            "leave cuda_graph_impl and cuda_graph_scope out, or choose --stack megatron")
    dispatcher = job.moe_dispatcher or (stack.defaults.moe_dispatcher if stack is not None else "alltoall")
    moe = (job.moe_capacity_factor is not None, bool(job.moe_pad_to_capacity), dispatcher)
    why = _combination_error(impl, scope, model, job.recompute, moe) or _job_graph_error(job, model, impl, scope)
    if why is None:
        return None
    if why.startswith("full recompute"):
        return PlannerError(f"{where}cuda_graph_impl {impl}, cuda_graph_scope {scope or '[] (the whole layer)'}: {why}",
                            "use recompute none or selective with these graphs, cuda_graph_impl full_iteration, or "
                            "leave cuda_graph_impl out")
    return PlannerError(f"{where}cuda_graph_impl {impl}, cuda_graph_scope {scope or '[] (the whole layer)'}: {why}",
                        "graph the parts before the dispatch only (cuda_graph_scope attn moe_router moe_preprocess) on an "
                        "MoE model, pad the experts to capacity (moe_capacity_factor, moe_pad_to_capacity) with the "
                        "alltoall or hybridep dispatcher, or leave cuda_graph_impl out")


def held_output_bytes(settings, kind, ctx) -> np.ndarray:
    """Bytes one MoE layer's graph keeps until its backward beyond what the layer saves anyway,
    per micro-batch (module docstring, memory.py [cg]): under transformer_engine graphs with
    moe_preprocess and the alltoall dispatcher, the permuted tokens, T / (tp under SP) x top_k x
    h x 2 B [3][5][6][7]; 0 otherwise (settings: the job's fields, not searched quantities)."""
    on = (settings.cuda_graph_impl == "transformer_engine" and "moe_preprocess" in settings.cuda_graph_scope
          and kind.has_experts and settings.moe_dispatcher == "alltoall")
    if not on:
        return np.float64(0.0)
    return ctx.T / ctx.rep_div * kind.mlp.top_k * settings.model.hidden_size * ACT_BYTES
