"""CPU offload of the model states (job fields offload_optimizer, offload_param; stack_db cpu_offload): what leaves
the GPU, what the host holds, what crosses the host link and what the CPU's optimizer step costs. Units: bytes,
seconds. Every function is numpy-vectorised over the plan's arrays; the job's offload switches are settings (0 / 1
factors), not searched quantities.

What leaves the GPU (memory.model_state_terms, [off] in memory.py):
  offload_optimizer cpu: the fp32 master partition and Adam's moments, and the gradient partition (ZeRO-2, FSDP: the
    sharded gradient; ZeRO-1 keeps its whole gradients on the GPU until the step, as without offload).
    DeepSpeed ZeRO-1/2 (microsoft/DeepSpeed @38327e07 deepspeed/runtime/zero/stage_1_and_2.py): the optimizer's
    device is the CPU (l. 185), the fp32 partition single_partition_of_fp32_groups is cloned there and pinned
    (l. 399-407), its fp32 gradient is a pinned CPU tensor of the partition (initialize_optimizer_states l. 683-689),
    the GPU's 16-bit gradient partition grads_in_partition is never allocated (copy_grads_in_partition returns before
    it, l. 1329-1341), and the GPU keeps one staging buffer of the largest parameter in the model dtype
    (temp_grad_buffer_for_gpu_offload, l. 485-487; its pinned twin temp_grad_buffer_for_cpu_offload on the host,
    l. 477-482). With gradient accumulation each parameter of the partition has a 16-bit host accumulation buffer
    (accumulated_grads_in_cpu, buffer_to_accumulate_to_in_cpu l. 1203-1205: param.numel() in param.dtype).
    The optimizer's step temporaries and the step's gradient copies run on the CPU: none on the GPU.
  offload_param cpu (DeepSpeed ZeRO-3 offload_param; FSDP2's CPUOffloadPolicy): the sharded parameters too.
    torchtitan @e347b1e5e torchtitan/models/llama3/infra/parallelize.py l. 137, 315-317 (apply_fsdp: offload_policy
    CPUOffloadPolicy() when training.enable_cpu_offload; job_config.py l. 270-273 'CPU offloading of parameters,
    gradients, and optimizer states in FSDP'), applied under FSDP / HSDP only (l. 125-147): FSDP2's sharded
    parameter is the fp32 master (memory.py [7]), its sharded gradient fp32, both in host memory.

Host memory (host_bytes): a rank's optimizer partition L (elements) x (master + Adam bytes + HOST_GRAD_BYTES), plus
its 16-bit parameter shard where offload_param moves a separate one (DeepSpeed ZeRO-3), plus DeepSpeed's 16-bit
accumulation buffers (L x the gradient bytes, with more than one micro-batch a step). Per node: x the node's ranks
(min(GPUs, gpus_per_node)). Gated against hardware host_memory_GB where the entry gives it.

Step time (step_parts): the optimizer term of an offloading plan is the CPU's Adam over the rank's partition, shared
by the node's ranks over the node's host memory bandwidth ([cpu-adam]: host_adam_bytes a parameter over hardware
host_memory_GBps x HOST_MEMORY_EFFICIENCY, a named assumption, or a profile's calibrated fraction), plus the host-link copies that are not hidden:
  zero_offload (DeepSpeed ZeRO-1/2/3): the gradient partition down once a step in fp32 (stage_1_and_2.py
    async_inplace_copy_grad_to_fp32_buffer_from_gpu l. 1271-1284: src_tensor.float() on the GPU, copied to the
    pinned fp32 buffer: 4 B an element); with gradient accumulation the 16-bit accumulation copies
    (async_accumulate_grad_in_cpu_via_gpu l. 1193-1237: the first micro-batch's gradient down, each later
    reduction's accumulated one up, 2 B each); and the updated partition up after the CPU step: ZeRO-1/2 in fp32
    (l. 1879-1882, the offload branch: bit16_partitions[partition_id].data.copy_(fp32_partition.to(device).data), the
    fp32 partition copied to the GPU and converted there, 4 B an element; l. 1917-1919 is the branch without offload),
    ZeRO-3 in the model dtype (stage3.py _reassign_or_swap_out_partitioned_parameters l. 2069-2072: the GPU's 16-bit
    flat partition .copy_ from the host's fp32 one, converted on the CPU as torch does for CPU-GPU copies, Copy.cu
    below: 2 B an element). The ZeRO-1/2 copy's fp32 partition on the GPU (4 B x the parameter group's partition,
    freed with the statement) is a moment of the step, with the activations freed: memory.py [ocb] prices it
    (copy_back_gpu_bytes). With offload_param (ZeRO-3) each all-gather's 16-bit partition up from the host
    first (n_ag x L x 2 B, beside the gathers). The gradient copies run in the reduction's hooks (reduce_ipg_grads
    l. 1382-1390): on the reduction stream with overlap_comm (hidden behind the backward, what outlasts it
    exposed), on the compute stream without it (exposed); ZeRO-1 reduces after the backward (exposed). The CPU
    step and the parameter copy follow the backward, before the all-gather (l. 1912-1932): exposed.
  fsdp2 (torchtitan): each all-gather's fp32 shard up (n_ag x L x 4 B) and each reduce-scatter's fp32 gradient shard
    down (n_rs x L x 4 B), on FSDP's own streams: hidden behind the step's compute where the plan overlaps its
    data-parallel traffic, what outlasts it exposed (an assumption: the copy engines run beside the kernels
    without slowing them); exposed without overlap.
  hybrid_device (Megatron-LM @d98e8a64 megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py,
    HybridDeviceOptimizer, built by megatron/core/optimizer/__init__.py l. 503-546 for --optimizer-cpu-offload with
    torch.optim.AdamW(fused=True) on the host, the GPU's FusedAdam beside it, param_update_in_fp32): the distributed
    optimizer's shard parameters are split in order, whole tensors, until offload_fraction of the shard's elements are
    on the host (_get_sub_optimizer_param_groups l. 251-302: a pinned fp32 copy each, l. 274-281; priced as the exact
    fraction, the last tensor's overshoot not); at step() their main gradients are copied down into pinned fp32 host
    buffers (_set_sub_optimizer_grads l. 103-117, on the d2h stream), the CPU optimizers step, and a post-step hook
    copies each updated fp32 host parameter into the GPU's model-dtype parameter (l. 121-130). torch converts a
    CPU-GPU copy's dtype on the CPU (pytorch/pytorch aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: 'Type
    conversions are performed on the CPU for CPU-GPU copies'): the gradients cross in the grad buffer's dtype, the
    parameters in the model dtype. The GPU's optimizer steps the rest (1 - fraction) at the same time (step() l.
    160-174). Without --overlap-cpu-optimizer-d2h-h2d (offload_overlap) every copy runs on the compute stream: the
    gradients' copy, then the GPU's and the CPU's steps side by side, then the parameters' copy; with it one CPU
    optimizer a parameter (build_cpu_optimizer_list l. 227-249) and the copies on their own streams, each parameter
    stepped as its gradient lands and copied back as its step ends: priced as the longest of the copies down, the CPU
    step, the copies up and the GPU's step (an assumption: a pipeline over many parameters, its fill and drain, one
    parameter each, not priced).
The link: hardware pcie_GBps per direction per GPU (each GPU its own x16 link to the host, as in HGX H100 nodes),
both directions at once. The hardware's pcie_GBps, host_memory_GBps and host_memory_GB are the job's where it gives
its own (job fields pcie_gbps, host_memory_gbps, host_memory_gb: plan._apply_host puts them in settings.hardware).

ZeRO-Offload's one-step delayed parameter update (DPU, arXiv:2101.06840 sec. 5.2) is not a DeepSpeed config key at
@38327e07 (no such field in deepspeed/runtime/zero/offload_config.py): not modelled.
"""

from __future__ import annotations

import numpy as np

# [cpu-adam] The host's Adam is memory-bound: one pass over the partition that reads the fp32 master, both moments and
# the fp32 gradient and writes the master and both moments back, at the node's host memory bandwidth (hardware
# host_memory_GBps, the DRAM's datasheet peak: channels x MT/s x 8 B x sockets) times a named achievable fraction.
#   DeepSpeedCPUAdam (optimizer_step deepspeed_cpu_adam): microsoft/DeepSpeed @38327e07 csrc/includes/cpu_adam.h
#     Adam_Optimizer::Step_AVX l. 159-168 (simd_load of grads, _exp_avg, _exp_avg_sq, _params) and l. 189-191
#     (simd_store of _params, _exp_avg, _exp_avg_sq), one pass under "#pragma omp parallel for" (l. 156); the 16-bit
#     copy is not written by the kernel at this commit (ds_adam_step takes params, grads, exp_avg, exp_avg_sq only,
#     cpu_adam.h l. 207-218; the ZeRO optimizer copies the fp32 partition to the GPU's 16-bit one after the step,
#     stage_1_and_2.py l. 1917-1919, the host link's up copy).
#   torch's fused Adam on CPU tensors (optimizer_step torch_cpu_adam; torchtitan's [optimizer] implementation
#     defaults to "fused", @e347b1e5e torchtitan/config/job_config.py l. 151, components/optimizer.py l. 299-303):
#     pytorch/pytorch @000510a6 aten/src/ATen/native/cpu/FusedAdamKernel.cpp adam_fused_step_impl: loadu of
#     param, grad, exp_avg, exp_avg_sq and store of exp_avg, exp_avg_sq, param in one at::parallel_for pass: the
#     same bytes. (DeepSpeed's "5.1x to 6.5x" over torch-adam, docs/_pages/training.md @38327e07 l. 378-383, was
#     measured against torch's unfused per-op Adam of 2020, which takes several passes; torchtitan's "foreach" /
#     "for-loop" implementations are such multi-pass loops and are not what this prices.)
# Bytes an element, with the job's bpp (fp32 master 4, Adam 8, fp32 gradient HOST_GRAD_BYTES 4): read 16, write 12:
# 28 B. The figure that was here before, a rate transcribed from ZeRO-Offload's (arXiv:2101.06840) Table 3 without
# the paper at hand (10e9 parameters in 2.57 s, torch's 14.12 s), could not be re-read and was dropped.
# HOST_MEMORY_EFFICIENCY: a named assumption, one place, replaced by a profile's measured fraction where one applies
# (`planner calibrate host-adam`, planner/calibrate/host_adam.py: profile section host_adam, read by plan.resolve into
# Settings.host_adam_efficiency, which step.offload_parts prices with): the fraction of the datasheet
# DRAM bandwidth the host's Adam sustains while the node's ranks step their partitions at once. No measurement of CPU
# Adam on these hosts is at hand; 0.5 is a round stated guess (the kernel interleaves a square root and a division
# an element and an OpenMP barrier a TILE with its streams, and the D2H / H2D copies land in the same DRAM), not
# fitted to anything.
HOST_MEMORY_EFFICIENCY = 0.5
HOST_ADAM_SOURCE = ("memory-bound: 28 B an element (DeepSpeed cpu_adam.h @38327e07 Step_AVX; torch FusedAdamKernel.cpp) "
                    "over hardware host_memory_GBps x offload.HOST_MEMORY_EFFICIENCY")


def host_adam_bytes(bpp) -> float:
    """Host DRAM bytes the CPU's Adam moves an element of the partition ([cpu-adam]): master, moments and the fp32
    gradient read, master and moments written."""
    return (bpp.master + bpp.optimizer + HOST_GRAD_BYTES) + (bpp.master + bpp.optimizer)


# the fp32 gradient partition in host memory (DeepSpeed single_partition_of_fp32_groups[i].grad, stage_1_and_2.py
# l. 683-689; FSDP2's sharded fp32 gradient under CPUOffloadPolicy)
HOST_GRAD_BYTES = 4.0
# bytes an element of the gradient partition moves down once a step (async_inplace_copy_grad_to_fp32_buffer_from_gpu:
# .float() on the GPU first); FSDP2's gathered shard and reduced gradient: fp32
FP32_BYTES = 4.0


def copy_back_gpu_bytes(settings, stack) -> float:
    """GPU bytes an element of a parameter group's optimizer partition holds while DeepSpeed ZeRO-1/2 copies the
    updated partition back after the CPU step (memory.py [ocb]), a job setting: stage_1_and_2.py @38327e07 l. 1879-1882
    (the offload branch of step) runs bit16_partitions[partition_id].data.copy_(fp32_partition.to(device).data): the
    host's fp32 partition copied to the GPU first, FP32_BYTES an element, a temporary freed with the statement, then
    converted into the 16-bit partition in place. FP32_BYTES x the offloaded fraction on a zero_offload stack (the
    caller applies it below FSDP only: ZeRO-3's copy converts on the CPU, stage3.py l. 2069-2072 and the module
    docstring), 0 elsewhere (FSDP2 steps its shard on the host in place; Megatron's HybridDeviceOptimizer copies each
    fp32 host parameter into the model-dtype one, converted on the CPU)."""
    spec = stack.cpu_offload
    if spec is None or spec.transfers != "zero_offload":
        return 0.0
    return switches(settings)[0] * FP32_BYTES


def switches(settings) -> tuple[float, float]:
    """(offload_optimizer, offload_param) as factors (job settings, not searched quantities): the optimizer's, the
    fraction of the rank's partition on the host (offload_fraction: 1 but on Megatron's HybridDeviceOptimizer), 0
    without offload; the parameters' 0 / 1."""
    return (float(settings.offload_fraction) if settings.offload_optimizer == "cpu" else 0.0,
            1.0 if settings.offload_param == "cpu" else 0.0)


def node_ranks(settings) -> float:
    """The ranks that share one node's host: min(GPUs, gpus_per_node)."""
    return float(min(settings.gpus, settings.hardware.gpus_per_node))


def host_bytes(settings, local, weights_local, m, stack) -> np.ndarray:
    """Host bytes a rank holds (module docstring): local, its optimizer partition (elements); weights_local, its
    16-bit parameter shard (elements) where offload_param moves one; m, micro-batches a step."""
    opt, par = switches(settings)
    bpp = settings.bpp
    spec = stack.cpu_offload
    states = local * (bpp.master + bpp.optimizer + HOST_GRAD_BYTES)
    # DeepSpeed's 16-bit accumulation buffers with gradient accumulation (accumulated_grads_in_cpu)
    accum = 0.0 if spec is None or spec.transfers != "zero_offload" else np.where(m > 1, local * bpp.gradients, 0.0)
    sep = 0.0 if spec is None or spec.params_with_optimizer else 1.0  # FSDP2's shard is the fp32 master already
    return opt * (states + accum) + par * sep * weights_local * bpp.weights


def transfer_bytes(settings, local, m, n_red, n_ag, n_rs, stack, params_sharded=False) -> tuple:
    """(down, up, up_after) bytes a rank's host link moves a step (module docstring): down and up beside the
    backward (the gradient hooks' copies; FSDP2's gathers and reductions), up_after after the CPU step (DeepSpeed's
    updated partition: fp32 at ZeRO-1/2, the model dtype at ZeRO-3, params_sharded). n_red: gradient reductions a
    step (DeepSpeed: m at ZeRO-2, 1 at ZeRO-1); n_ag, n_rs: FSDP's all-gathers and reduce-scatters a step."""
    opt, _ = switches(settings)
    spec = stack.cpu_offload
    zero = 0.0 * local
    if spec is None:
        return zero, zero, zero
    g = settings.bpp.gradients
    if spec.transfers == "hybrid_device":
        # Megatron's HybridDeviceOptimizer, at step() (module docstring): the offloaded fraction's main gradients down
        # in the grad buffer's dtype, after the CPU step its parameters up in the model dtype; nothing beside the
        # backward (step.offload_parts prices the two after it)
        return opt * local * g, zero, opt * local * settings.bpp.weights
    if spec.transfers == "fsdp2":
        return opt * n_rs * local * FP32_BYTES, opt * n_ag * local * FP32_BYTES, zero
    many = m > 1
    # the accumulation copies: the first micro-batch's gradient down (ZeRO-2, whose hooks reduce every micro-batch),
    # each later reduction's accumulated one up (ZeRO-2: m - 1; ZeRO-1: its one reduction after the last micro-batch)
    acc_down = np.where(many & (n_red > 1), 1.0, 0.0) * local * g
    acc_up = np.where(many, np.where(n_red > 1, n_red - 1.0, 1.0), 0.0) * local * g
    # DeepSpeed ZeRO-3 offload_param: each all-gather's 16-bit partition copied up from the host first
    par_up = switches(settings)[1] * n_ag * local * settings.bpp.weights
    # the updated partition up after the CPU step (module docstring): fp32 at ZeRO-1/2 (stage_1_and_2.py l. 1879-1882),
    # the model dtype at ZeRO-3 (stage3.py l. 2069-2072)
    after = np.where(params_sharded, settings.bpp.weights, FP32_BYTES)
    return opt * (local * FP32_BYTES + acc_down), opt * acc_up + par_up, opt * local * after
