"""The stack a job's context-parallel variant makes (job field cp_comm_type: Megatron-LM's --cp-comm-type).

Megatron-LM's --cp-comm-type [1] chooses which of Transformer Engine's context-parallel attentions
each layer runs [2]: p2p (AttnFuncWithCPAndKVP2P, the K/V ring, the default), all_gather
(AttnFuncWithCPAndKVAllGather: K and V all-gathered before the kernels and dK/dV
reduce-scattered after them, nothing beside either), a2a (AttnFuncWithCPAndQKVOA2A, Ulysses:
all-to-alls of Q, K and V before one kernel over the whole sequence with a / cp of the heads and
of the output after it, every all-to-all waited before the next kernel) or a2a+p2p (hierarchical:
not priced, refused). A stack that runs several names them as data (stack_db `cp_comm_types`:
its default, the other variants' ContextParallelSpec, the refused ones with the reason); the job
field replaces the stack's context_parallel with the named variant's here, once, when the job is
resolved (plan.resolve), as cp_rotate_method does for torch's ring (planner/cp_rotate.py): the cost
models read only the stack.

  time     the variant's spec: step.cp_ring_comm prices a2a as four exposed all-to-alls a pass
           (Q, K, V and the output forward; the output gradient, dQ, dK and dV backward) on the
           CP group's tier (comm.py placement), all_gather as the exposed all-gathers of K and of
           V and the reduce-scatters of dK and of dV; the layout copies are the spec's pass bytes
           (step.cp_pass_times).
  memory   the P2P ring's forward merge (memory.cp_forward_merge, memory.py [cp3]) is p2p's only:
           off for the others; what the variant's layer holds while it runs is its spec's `held`
           and a2a's second copy of the attention output its `saved_out_bytes` (memory.py [cp2]).
  rules    a variant that splits the heads (cp_comm_types.heads_divisible: a2a) needs the query
           heads and the KV heads per TP rank divisible by cp (startup rule CP_A2A_HEADS, TE's
           assert [2]).

Megatron takes a per-layer list (--cp-comm-type p2p p2p a2a ...); the reader takes a list whose
entries are all one value as that value and refuses a mixed list (planner/trainers/megatron.py).
Export writes the variant back where it is not the stack's default (plan.plan_dict through
exported_cp_comm_type; the Megatron exporter writes --cp-comm-type).

References
[1] NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 3221-3226 (--cp-comm-type),
    l. 580-585 (a2a+p2p needs --hierarchical-context-parallel-sizes); megatron/core/transformer/
    transformer_config.py l. 1030-1045 (cp_comm_type); transformer_layer.py l. 378-386.
[2] NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py: attn_forward_func_with_cp (l. 4630-4853), AttnFuncWithCPAndKVAllGather
    (l. 3018-3876), AttnFuncWithCPAndQKVOA2A (l. 3877-4629; num_heads % cp_size, l. 3951-3954).
"""

from __future__ import annotations

from .errors import PlannerError
from .schema import Stack


def apply_cp_comm_type(job, stack: Stack, where: str = "") -> Stack:
    """The stack with the job's cp_comm_type as its context_parallel (and, off p2p, no P2P forward
    merge [cp3]); unchanged where the job gives none or the stack's default. Refused on a stack
    that names no variants, and for a variant the stack refuses (a2a+p2p), with the reason."""
    name = getattr(job, "cp_comm_type", None)
    if name is None:
        return stack
    cct = stack.cp_comm_types
    if cct is None:
        raise PlannerError(f"{where}cp_comm_type {name} is set but stack {stack.name} runs one context-parallel attention "
                           "only (stack_db cp_comm_types)",
                           "leave cp_comm_type (--cp-comm-type) out, or price the plan on --stack megatron")
    supported = [cct.default, *cct.variants]
    if name in cct.refused:
        raise PlannerError(f"{where}cp_comm_type {name}: {cct.refused[name]}",
                           f"use one of {', '.join(supported)} ({cct.option})")
    if name == cct.default:
        return stack
    if name not in cct.variants:
        raise PlannerError(f"{where}cp_comm_type {name} is not one of stack {stack.name}'s",
                           f"use one of {', '.join(supported)} ({cct.option})")
    memory = stack.memory.model_copy(update={"cp_forward_merge": False})
    return stack.model_copy(update={"context_parallel": cct.variants[name], "memory": memory})


def cp_comm_type_of(stack: Stack) -> str | None:
    """The variant name of the resolved stack's context_parallel (stack_db cp_comm_types), None on
    a stack that names none."""
    cct = stack.cp_comm_types
    if cct is None:
        return None
    for name, spec in cct.variants.items():
        if stack.context_parallel == spec:
            return name
    return cct.default


def exported_cp_comm_type(settings) -> str | None:
    """The resolved stack's variant where it is not the stack's default (what export writes
    back), else None."""
    stack = settings.stack
    if stack is None or stack.cp_comm_types is None:
        return None
    name = cp_comm_type_of(stack)
    return name if name != stack.cp_comm_types.default else None


def splits_heads(stack) -> bool:
    """Whether the stack's context parallelism splits the attention heads over the cp ranks
    (its variant is one of cp_comm_types.heads_divisible): a stack setting, not a searched one."""
    if stack is None or stack.cp_comm_types is None:
        return False
    return cp_comm_type_of(stack) in stack.cp_comm_types.heads_divisible
