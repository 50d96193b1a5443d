"""The stack a job's torch context-parallel rotate method makes (job field cp_rotate_method).

torchtitan's [parallelism] context_parallel_rotate_method (pytorch/torchtitan
torchtitan/config/job_config.py @e347b1e5e Parallelism.context_parallel_rotate_method:
Literal["allgather", "alltoall"], default "allgather"; set_rotate_method in
torchtitan/distributed/utils.py) chooses how torch's ring attention passes K/V between the cp
ranks. A stack whose context parallelism is torch's names its default as memory.cp_ring_backward
(stack_db torchtitan: allgather); the job field replaces it here, once, when the job is resolved
(plan.resolve), as recompute_modules replaces the selective policy (planner/recompute_modules.py):
the cost models read only the stack.

  memory     memory.cp_ring_backward is the method: what the attention's ring backward holds
             (the all-gathered K/V of every cp rank, or the received and the next permuted K/V;
             memory.py [cp1], cp_attention_backward_extra).
  time       alltoall passes K/V as a ring [1]: _AllToAllRotater.exchange_buffers permutes the
             torch.cat([k, v]) to the next rank at every step but the last, waited at the next
             step's start, so the stack's context_parallel spec (schema.ContextParallelSpec) has
             fwd_kv and bwd_kv ring (the allgather rotater's one all-gather otherwise; the dK/dV
             exchange is an all-to-all permute with either method, the spec's dkv unchanged).
             A stack without a context_parallel spec of its own starts from the default stack's
             (step.cp_spec's named assumption).

Export writes the method back where it is not the catalog stack's (plan.plan_dict through
exported_rotate_method; torchtitan's exporter writes it as context_parallel_rotate_method). At cp 1
no ring runs: torchtitan hands the method to torch only where parallel_dims.cp_enabled [3] and the
ring's terms are zero at cp 1, so a plan at cp 1 lists none (what torchtitan's reader reads back:
the option ignored at context_parallel_degree 1), and resolve lists the job's as such
(ignored_at_cp1).

References
[1] pytorch/pytorch torch/distributed/tensor/experimental/_context_parallel/_attention.py (torch
    2.13): _AllToAllRotater, _AllGatherRotater, _templated_ring_attention(_backward).
[2] pytorch/torchtitan torchtitan/config/job_config.py @e347b1e5e
    Parallelism.context_parallel_rotate_method.
[3] pytorch/torchtitan @e347b1e5e torchtitan/components/validate.py l. 204-214: create_context_parallel_ctx
    (torchtitan/distributed/utils.py l. 200-222, set_rotate_method) called with
    context_parallel_rotate_method only under 'if parallel_dims.cp_enabled' (its one reader at that commit).
[4] Issue 22 (ttrotate): at pytorch/torchtitan @e347b1e5e [3] is the only call of set_rotate_method;
    train.py shards the batch (distributed/context_parallel.py prepare_context_parallel_input l. 89-135) and
    the attention runs torch's ring through apply_cp_to_attention_module (l. 27-86), which reads torch's
    process-global _cp_options.rotate_method, ALL_GATHER unless set (pytorch/pytorch
    torch/distributed/tensor/experimental/_context_parallel/_attention.py, stored version 09b101c5,
    _ContextParallelOptions l. 58-68, _create_rotater). The option changes training only after a validation
    pass under CP (not priced; the TOML reader lists it as not modelled then, as ignored otherwise). Such a
    stack says so in runs.cp_rotate_method_trains false (stack_db torchtitan, with its sources): the job's
    method is listed as ignored and the stack's memory.cp_ring_backward priced. torchtitan 0.3.0
    (release/0.3 @4f9e9a47d) has neither the option nor a call of set_rotate_method, and its language
    models run FlexAttention's all-gather, not the ring (stack torchtitan-0.3: memory.cp_ring_backward null,
    the job field refused).
"""

from __future__ import annotations

from .catalog import DEFAULT_STACK, load_stack
from .errors import PlannerError
from .schema import Stack


def apply_rotate_method(job, stack: Stack, where: str = "") -> Stack:
    """The stack with the job's cp_rotate_method (else the stack's memory.cp_ring_backward) as its
    memory.cp_ring_backward and, for alltoall, its context_parallel K/V exchange as a ring [1]
    (unchanged on a stack whose CP is not torch's). Refused on such a stack when the job sets it."""
    rotate = job.cp_rotate_method
    if rotate is not None and stack.memory.cp_ring_backward is None:
        raise PlannerError(f"{where}cp_rotate_method is set but stack {stack.name}'s context parallelism is not torch's "
                           f"ring attention ({stack.origin} memory.cp_ring_backward)", "leave it out, or choose --stack torchtitan")
    if not trains(stack):  # the trainer's training never hands the option to torch [4]: its default runs
        return stack
    rotate = rotate or stack.memory.cp_ring_backward
    update = {}
    if rotate != stack.memory.cp_ring_backward:
        update["memory"] = stack.memory.model_copy(update={"cp_ring_backward": rotate})
    if rotate == "alltoall":
        spec = stack.context_parallel or load_stack(DEFAULT_STACK).context_parallel  # stacks.default_stack's
        update["context_parallel"] = spec.model_copy(update={"fwd_kv": "ring", "bwd_kv": "ring"})
    return stack.model_copy(update=update) if update else stack


def trains(stack: Stack) -> bool:
    """Whether a job's rotate method reaches the training step's ring attention on `stack` (its
    runs.cp_rotate_method_trains; a stack without runs: yes)."""
    return stack.runs is None or stack.runs.cp_rotate_method_trains


def ignored_on_stack(job, stack: Stack) -> list[str]:
    """The job's cp_rotate_method at cp > 1 on a stack whose training never sets it [4], as resolve lists it:
    the plan is priced with the stack's memory.cp_ring_backward (torch's default); [] otherwise."""
    rotate = getattr(job, "cp_rotate_method", None)
    if rotate is None or getattr(job, "cp", 1) == 1 or trains(stack) or stack.memory.cp_ring_backward is None:
        return []
    return [f"cp_rotate_method {rotate}: stack {stack.name}'s training never hands it to torch (torchtitan @e347b1e5e "
            "calls set_rotate_method only in components/validate.py l. 204-214, not in train.py; "
            f"{stack.origin} runs.cp_rotate_method_trains false), so the plan is priced with torch's default "
            f"{stack.memory.cp_ring_backward} (memory.cp_ring_backward)"]


def exported_rotate_method(settings, cp: int) -> str | None:
    """The resolved stack's rotate method where it is not the catalog stack's (the job's
    cp_rotate_method that changed it: what a plan at `cp` lists and export writes back), else None;
    None at cp 1, where no ring runs [3]."""
    if settings.stack is None or cp <= 1:
        return None
    rotate = settings.stack.memory.cp_ring_backward
    return rotate if rotate != load_stack(settings.stack_name).memory.cp_ring_backward else None


def ignored_at_cp1(job) -> list[str]:
    """The job's cp_rotate_method where its cp is 1, as resolve lists it: no ring runs without
    context parallelism [3], so the plan is priced and listed as the one without it (the ring's
    terms are zero at cp 1); [] where the job sets none."""
    rotate = getattr(job, "cp_rotate_method", None)
    if rotate is None:
        return []
    return [f"cp_rotate_method {rotate} at cp 1: without context parallelism no ring attention runs (torchtitan "
            "@e347b1e5e hands the method to torch only where parallel_dims.cp_enabled, components/validate.py "
            "l. 204-214), so a plan at cp 1 is priced and listed as the one without it"]
