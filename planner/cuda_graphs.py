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
  copy after the graph (cuda_dtoh_point before_ep_alltoall [3]), and the synchronisation stays.
  The planner prices dropless MoE only (moe_capacity_factor is a load imbalance, not padding), so
  on an MoE model it refuses the moe scope, the whole layer and full_iteration.
- Priced: nothing yet. The host time a dropless MoE layer exposes is the stack's fitted moe_host
  (planner/step.py moe_host): its per-layer constant covers the kernels issued between two
  synchronisations, graphed (attention, router, preprocess) or not (dispatch, experts, combine),
  and the MoE records cannot say which part graphs remove (docs/moe_accuracy.md, "CUDA graphs
  read, checked": scripts/fit_moe_host.py --graph-split's third constant leaves the loss flat
  from 0 to 1.2 ms and the leave-one-out no better), so the graphed and the eager records share
  one constant. The memory graphs hold (Transformer Engine make_graphed_callables' static
  outputs and gradient buffers per graphed callable and captured micro-batch slot [2], in one
  graph memory pool; with moe_preprocess the permuted tokens, about T k h x 2 B a layer) is not
  priced either: what eager holds anyway and what TE's buffer reuse gives back is not settled,
  and no graphed record publishes its memory (the same section).

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
"""

from __future__ import annotations

from .errors import PlannerError

IMPLS = ("none", "local", "transformer_engine", "full_iteration")  # [1] cuda_graph_impl
SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")  # [1] cuda_graph_modules


def _has_dense_mlp(model) -> bool:
    """Whether some layer keeps a dense MLP (Megatron's moe_layer_freq with a 0 [1]); a layer
    pattern is not read here (treated as having one: the check refuses only what is sure)."""
    moe = model.moe
    return (moe is None or moe.first_k_dense > 0 or moe.layer_freq != 1
            or getattr(model, "layer_pattern", None) is not None)


MC = " (Megatron-Core transformer_config.py @d98e8a64)"  # [1], named in the messages


def _combination_error(impl: str, scope: list, model, recompute: str) -> str | None:
    """Why Megatron-Core [1] (or the planner, for a dropless MoE [3][4]) refuses the combination;
    None: accepted."""
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
    if model.moe is not None and (impl == "full_iteration" or not scope or "moe" in scope):
        what = "full_iteration" if impl == "full_iteration" else ("the moe scope" if scope else "the whole layer")
        return (f"{what} captures the experts, which a dropless MoE layer cannot (the dispatcher's device-to-host "
                "synchronisation and the experts' dynamic shapes: Megatron-Core token_dispatcher.py and its MoE "
                "README @d98e8a64); Megatron graphs them only padded to capacity, which the planner does not price")
    if recompute == "full":
        return "full recompute runs with CUDA graphs only under cuda_graph_impl full_iteration" + MC
    return None


def cuda_graph_error(job, model, stack, where: str = "") -> PlannerError | None:
    """The error for a job's CUDA graphs: on a stack without them (stack cuda_graphs), or a
    combination Megatron-Core refuses [1] or the planner cannot price [3][4]; None: fine."""
    impl, scope = job.cuda_graph_impl, list(job.cuda_graph_scope or [])
    if impl == "none" and not scope:
        return None
    if stack is not None and stack.cuda_graphs is None:
        return PlannerError(f"{where}cuda_graph_impl {impl} / cuda_graph_scope {scope}: stack {stack.name} has no CUDA "
                            "graph option (stack_db cuda_graphs)",
                            "leave cuda_graph_impl and cuda_graph_scope out, or choose --stack megatron")
    why = _combination_error(impl, scope, model, job.recompute)
    if why is None:
        return None
    return PlannerError(f"{where}cuda_graph_impl {impl}, cuda_graph_scope {scope or '[] (the whole layer)'}: {why}",
                        "graph the parts before the dispatch only (cuda_graph_scope attn moe_router moe_preprocess) on an "
                        "MoE model, or leave cuda_graph_impl out")
