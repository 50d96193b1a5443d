"""The stack a job's context-parallel variant makes (job field cp_comm_type: Megatron-LM's --cp-comm-type).

Megatron-LM's --cp-comm-type [1] chooses which of Transformer Engine's context-parallel attentions
each layer runs [2]: p2p (AttnFuncWithCPAndKVP2P, the K/V ring, the default), all_gather
(AttnFuncWithCPAndKVAllGather: K and V all-gathered before the kernels and dK/dV
reduce-scattered after them, nothing beside either), a2a (AttnFuncWithCPAndQKVOA2A, Ulysses:
all-to-alls of Q, K and V before one kernel over the whole sequence with a / cp of the heads and
of the output after it, every all-to-all waited before the next kernel) or a2a+p2p (hierarchical,
AttnFuncWithCPAndKVP2P with cp_group = [a2a group, p2p group]: a2a's all-to-alls inside groups of
contiguous CP ranks, then the P2P ring across the groups; the sizes are the job's
hierarchical_cp_sizes, Megatron's --hierarchical-context-parallel-sizes [1]). A stack that runs
several names them as data (stack_db `cp_comm_types`: its default, the other variants'
ContextParallelSpec, any it refuses with the reason); the job field replaces the stack's
context_parallel with the named variant's here, once, when the job is resolved (plan.resolve), as
cp_rotate_method does for torch's ring (planner/cp_rotate.py): the cost models read only the
stack (a2a+p2p's sizes in its spec, hierarchical_sizes).

  time     the variant's spec: step.cp_ring_comm prices a2a as four exposed all-to-alls a pass
           (Q, K, V and the output forward; the output gradient, dQ, dK and dV backward) on the
           CP group's tier (comm.py placement), all_gather as the exposed all-gathers of K and of
           V and the reduce-scatters of dK and of dV; a2a+p2p as the all-to-alls over its a2a
           ranks (the CP stride) around p2p's ring over the p2p ranks (stride x a2a ranks: each
           rank then holds the sequence of cp / a2a ranks with 1 / a2a of the heads, the same
           elements; step.cp_split, cp_ring); the layout copies are the spec's pass bytes
           (step.cp_pass_times).
  memory   the P2P ring's forward merge (memory.cp_forward_merge, memory.py [cp3]) and its backward
           (memory.cp_p2p_backward, [cp4]) are kept for the variants that run the ring
           (cp_comm_types.forward_merge: p2p, a2a+p2p over its p2p ranks), off for the others; what the variant's layer holds while it runs is its spec's
           `held` and the all-to-all variants' second copy of the attention output their
           `saved_out_bytes` (memory.py [cp2]); under fp8 attention the q, k, v saved are the
           recipe's cp_qkv_saved_bytes (the CP function's own: MXFP8's bf16) but for the variants in
           cp_comm_types.fp8_kernel_saves_qkv (a2a: the kernel's, qkv_saved_bytes; memory.py [fa8]).
  rules    a variant that splits the heads (cp_comm_types.heads_divisible: a2a over cp, a2a+p2p
           over its a2a ranks) needs the query heads and the KV heads per TP rank divisible by
           them (startup rule MEGATRON_CP_A2A_HEADS, TE's assert [2]); a2a+p2p's sizes multiply
           to cp (MEGATRON_HCP_SIZES, Megatron's assert [1]). As TE does, sizes with one a2a rank
           run p2p and with one p2p rank a2a.

Megatron takes a per-layer list (--cp-comm-type p2p p2p a2a ...); the reader takes a list whose
entries are all one value as that value and refuses a mixed list (planner/trainers/megatron.py).
Export writes the variant back where it is not the stack's default (plan.plan_dict through
exported_cp_comm_type; the Megatron exporter writes --cp-comm-type, the Megatron-Bridge one
model.cp_comm_type).

  cp 1     without context parallelism no variant runs: Megatron-Core hands cp_comm_type to
           Transformer Engine only where context_parallel_size > 1 [3], so a job's variant at cp 1
           is the plan without it. The cost models price every variant's terms under np.where(cp > 1)
           (identical at cp 1), and a plan at cp 1 lists none (exported_cp_comm_type,
           exported_hierarchical_sizes: what explain's and fit's `plan` hold and export writes, as
           the trainers' readers read such a file back: the variant ignored at cp 1); resolve lists
           the job's as such (ignored_at_cp1), so nothing is dropped unsaid.

References
[1] NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 3221-3226 (--cp-comm-type),
    l. 580-585 (a2a+p2p needs --hierarchical-context-parallel-sizes); megatron/core/transformer/
    transformer_config.py l. 1030-1045 (cp_comm_type); transformer_layer.py l. 378-386.
    megatron/core/parallel_state.py create_hierarchical_groups (l. 378-430), l. 1127-1140.
[2] NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py: attn_forward_func_with_cp (l. 4630-4853; a2a+p2p l. 4726-4741),
    AttnFuncWithCPAndKVP2P (l. 1407-2990; the a2a group l. 1469-1470, 1537-1561, 2083-2096),
    AttnFuncWithCPAndKVAllGather (l. 3018-3876), AttnFuncWithCPAndQKVOA2A (l. 3877-4629;
    num_heads % cp_size, l. 3951-3954).
[3] NVIDIA/Megatron-LM @d98e8a64 megatron/core/extensions/transformer_engine.py TEDotProductAttention
    l. 2129-2153 ('if self.config.context_parallel_size > 1': cp_group, cp_stream and cp_comm_type
    handed to Transformer Engine there only); the same at Megatron-Bridge's pinned 905c0e386, l. 1433-1457.
"""

from __future__ import annotations

from .errors import PlannerError
from .schema import Stack


def apply_cp_comm_type(job, stack: Stack, where: str = "") -> Stack:
    """The stack with the job's cp_comm_type as its context_parallel (and the P2P forward merge
    [cp3] only for a variant that runs the ring, cp_comm_types.forward_merge); unchanged where the
    job gives none or the stack's default. a2a+p2p takes the job's hierarchical_cp_sizes (a2a ranks,
    p2p ranks) into its spec (hierarchical_sizes); as Transformer Engine does [2], one a2a rank runs
    p2p and one p2p rank runs a2a. Refused on a stack that names no variants, for a variant the
    stack refuses, and a2a+p2p without its sizes (Megatron's assert [1])."""
    name = getattr(job, "cp_comm_type", None)
    sizes = getattr(job, "hierarchical_cp_sizes", None)
    cct = stack.cp_comm_types
    if name is None and not sizes:
        return stack
    if cct is None:
        raise PlannerError(f"{where}cp_comm_type {name} is set but stack {stack.name} runs one context-parallel attention "
                           "only (stack_db cp_comm_types)",
                           "leave cp_comm_type (--cp-comm-type) out, or price the plan on --stack megatron")
    name = cct.default if name is None else name
    supported = [cct.default, *cct.variants]
    if name in cct.refused:
        raise PlannerError(f"{where}cp_comm_type {name}: {cct.refused[name]}",
                           f"use one of {', '.join(supported)} ({cct.option})")
    if name != cct.default and name not in cct.variants:
        raise PlannerError(f"{where}cp_comm_type {name} is not one of stack {stack.name}'s",
                           f"use one of {', '.join(supported)} ({cct.option})")
    spec = cct.variants.get(name)
    hierarchical = spec is not None and spec.hierarchical
    if sizes and not hierarchical:
        raise PlannerError(f"{where}hierarchical_cp_sizes {sizes} without a hierarchical cp_comm_type (a2a+p2p: the only "
                           "variant that reads them)", "leave hierarchical_cp_sizes (--hierarchical-context-parallel-sizes) "
                           "out, or set cp_comm_type a2a+p2p")
    if hierarchical and not sizes:
        raise PlannerError(f"{where}cp_comm_type {name} needs hierarchical_cp_sizes (the all-to-all group's and the ring's "
                           "ranks, product cp: Megatron-LM arguments.py @d98e8a64 l. 583-585 asserts "
                           "--hierarchical-context-parallel-sizes with a2a+p2p)",
                           "give --hierarchical-context-parallel-sizes A,P with A x P = cp (e.g. 2,2 for cp 4)")
    if hierarchical:
        a2a, p2p = int(sizes[0]), int(sizes[1])
        # TE's attn_forward_func_with_cp [2]: a one-rank a2a group runs p2p, a one-rank p2p group a2a;
        # the sizes stay in the spec for Megatron's product rule (MEGATRON_HCP_SIZES)
        name = cct.default if a2a == 1 else ("a2a" if p2p == 1 else name)
        base = stack.context_parallel if name == cct.default else cct.variants[name]
        spec = base.model_copy(update={"hierarchical_sizes": (a2a, p2p)})
    if spec is None:  # the default
        return stack
    ring = name in cct.forward_merge  # the P2P ring's variants: its forward merge [cp3] and its backward [cp4]
    memory = stack.memory.model_copy(update={"cp_forward_merge": stack.memory.cp_forward_merge and ring,
                                             "cp_p2p_backward": stack.memory.cp_p2p_backward if ring else []})
    return stack.model_copy(update={"context_parallel": spec, "memory": memory})


def cp_comm_type_of(stack: Stack) -> str | None:
    """The variant name of the resolved stack's context_parallel (stack_db cp_comm_types), None on
    a stack that names none."""
    cct = stack.cp_comm_types
    if cct is None or stack.context_parallel is None:
        return None if cct is None else cct.default
    mine = stack.context_parallel.model_copy(update={"hierarchical_sizes": None})
    for name, spec in cct.variants.items():
        if mine == spec:
            return name
    return cct.default


def hierarchical_sizes(stack) -> tuple[int, int] | None:
    """(a2a ranks, p2p ranks) the job gave the resolved stack's a2a+p2p context parallelism (also
    where one of them is 1 and it runs p2p or a2a), else None."""
    spec = None if stack is None else stack.context_parallel
    return None if spec is None else spec.hierarchical_sizes


def exported_hierarchical_sizes(settings, cp: int) -> list | None:
    """The sizes a plan at `cp` lists and export writes back: a2a+p2p's where it runs hierarchically
    (a one-rank level runs, and is written as, p2p or a2a); None at cp 1, where no variant runs [3]."""
    spec = None if settings.stack is None else settings.stack.context_parallel
    hier = spec is not None and spec.hierarchical and spec.hierarchical_sizes
    return list(spec.hierarchical_sizes) if hier and cp > 1 else None


def exported_cp_comm_type(settings, cp: int) -> str | None:
    """The resolved stack's variant where it is not the stack's default and the plan's `cp` is above
    1 (what a plan lists and export writes back), else None: at cp 1 Megatron-Core hands no variant
    to the attention [3], so the plan is the one without it."""
    stack = settings.stack
    if stack is None or stack.cp_comm_types is None or cp <= 1:
        return None
    name = cp_comm_type_of(stack)
    return name if name != stack.cp_comm_types.default else None


def ignored_at_cp1(job) -> list[str]:
    """The job's cp_comm_type (and hierarchical_cp_sizes) where its cp is 1, as resolve lists them:
    without context parallelism Megatron-Core runs no variant [3], so the plan is priced and listed
    as the one without it (the variant's terms are zero at cp 1); [] where the job sets none."""
    name, sizes = getattr(job, "cp_comm_type", None), getattr(job, "hierarchical_cp_sizes", None)
    if name is None and not sizes:
        return []
    what = " ".join(([f"cp_comm_type {name}"] if name is not None else [])
                    + ([f"hierarchical_cp_sizes {','.join(map(str, sizes))}"] if sizes else []))
    return [f"{what} at cp 1: without context parallelism Megatron-Core hands the attention no variant "
            "(megatron/core/extensions/transformer_engine.py @d98e8a64 l. 2129-2153: only where "
            "context_parallel_size > 1), so a plan at cp 1 is priced and listed as the one without it"]


def a2a_ranks(stack) -> int:
    """The ranks the attention heads are split over: the a2a group's of a2a+p2p, 0 where the
    stack's context parallelism splits none, -1 where it is cp itself (a2a)."""
    if not splits_heads(stack):
        return 0
    sizes = hierarchical_sizes(stack)
    return -1 if sizes is None or not stack.context_parallel.hierarchical else int(sizes[0])


def fp8_kernel_saves_qkv(stack) -> bool:
    """Whether, under fp8 attention and CP > 1, the stack's context-parallel variant saves the fused
    kernel's quantized q, k, v (cp_comm_types.fp8_kernel_saves_qkv: TE's a2a, AttnFuncWithCPAndQKVOA2A
    l. 4253 [2]) rather than its own (P2P ring, all-gather: fp8_recipes cp_qkv_saved_bytes, memory.py
    [fa8]); False on a stack that names no variants. A stack setting, not a searched one."""
    if stack is None or stack.cp_comm_types is None:
        return False
    return cp_comm_type_of(stack) in stack.cp_comm_types.fp8_kernel_saves_qkv


def splits_heads(stack) -> bool:
    """Whether the stack's context parallelism splits the attention heads over the cp ranks
    (its variant is one of cp_comm_types.heads_divisible): a stack setting, not a searched one."""
    if stack is None or stack.cp_comm_types is None:
        return False
    return cp_comm_type_of(stack) in stack.cp_comm_types.heads_divisible
