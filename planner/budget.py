"""Training budget of one plan: days, GPU-hours, cost, energy, checkpoints, failures, goodput.

This module composes explain's estimate (planner.explain.evaluate: memory terms, step time,
MFU) with the closed forms of planner.reliability; it adds no formula of its own where
reliability.py has one. Units are SI: seconds, bytes, B/s, FLOPs, FLOP/s, watts, joules.
Human units appear only in option names that say so (`price_per_gpu_hour`) and in
rendering (days, hours, MWh).

How each figure is made:
  training time   reliability.training_time(6 N T, G, peak, MFU) [1]. By default MFU is the
                  step-time model's MFU in the 6N convention (throughput["mfu_6n"]), so that
                  the wall time equals steps x step time exactly; with a batch ramp (the job's
                  batch_size_schedule) it is scaled so that the wall time is each phase's steps
                  x its own step time (explain.batch_ramp); `mfu` replaces it with a
                  given figure (the seed's sec. 10.2 arithmetic, 6N x tokens / (G x peak x MFU)).
  GPU-hours, cost G x wall; reliability.cost (price per GPU-hour).
  energy          reliability.energy: every GPU at its TDP, times the PUE.
  checkpoint      each GPU holds its shard of the fp32 master weights and Adam's m and v
                  (explain's memory terms `master_weights` + `adam`; also `weights` when the
                  plan keeps no fp32 master, since the bf16 weights are then the only copy,
                  or keeps it as TE's 16-bit remainders, which restore it only with the bf16
                  weights [5], or when the stack's checkpoint writes the model's working weights
                  beside the master [8]: Megatron's torch_dist, DeepSpeed's module file), at the
                  bytes the checkpoint writes (checkpoint_bytes_per_param [5]: the memory model's
                  master_bytes, but Adam's moments in fp32 where Megatron's distributed optimizer
                  saves them through TE's get_unscaled_state). The gradients are never saved; the
                  working weights not otherwise (the seed's convention, sec. 9.2, for a stack that
                  does not say: reliability.checkpoint_bytes_per_gpu). One full copy of the job's
                  state is N x (those bytes per parameter) (seed sec. 9.2: 846 GB for Llama 3 70B at
                  12 B, torchtitan's and Megatron-FSDP's; 14 B, 988 GB, under Megatron's distributed
                  optimizer [8]); replicas (DDP, HSDP across groups) write it once, as PyTorch
                  DCP deduplicates replicated tensors [3]. Write time = that copy over the
                  aggregate storage bandwidth; host copy = one GPU's shard over PCIe
                  (reliability.checkpoint_time, with n = copy / shard distinct shards). The
                  host copy counts the GPU's whole shard, what async_save stages [3]; for
                  replicated states saved synchronously it is an upper bound, as each
                  replica then writes only its deduplicated part. Megatron's replicas write
                  whole tensors [9]; a stack that gathers the full state dict to global rank 0
                  writes the whole copy there [10]; a stack that checkpoints only when told to
                  is priced as if enabled, and says so [10].
  failures        reliability.mtbf_s: Llama 3's 419 unexpected interruptions in 54 days on
                  16,384 H100s [2], scaled by the GPU count, unless a rate or an MTBF is given.
  interval        reliability.young_interval (and daly_interval) on the training pause.
  goodput         reliability.expected_goodput (closed form) and reliability.simulate_goodput
                  (the seed's sec. 9.2 Monte-Carlo, capped; see MC_MAX_ITERATIONS).

References
[1] The seed chapter sec. 10.2 and Kaplan et al. 2020 sec. 2.1: 6 N FLOPs per token.
[2] Grattafiori et al., "The Llama 3 Herd of Models", arXiv:2407.21783, sec. 3.3.4 / Table 5
    (failures) and sec. 3.3.1 (storage: Tectonic, 7,500 servers, 2 TB/s sustained, 7 TB/s
    peak).
[3] PyTorch Distributed Checkpoint: DefaultSavePlanner deduplicates tensors replicated
    across ranks (`dedup_save_plans`), so each replicated item is written by one rank;
    `async_save` stages the local state dict in CPU memory and writes in the background.
[4] The seed chapter sec. 9.2: restart (detect, swap the node, reload, warm up) 10 min;
    its simulation averages 20 runs.
[5] What Megatron's checkpoint writes under the precision-aware optimizer (--use-precision-aware-optimizer, TE's
    FusedAdam; Settings.te_master / remainders), NVIDIA/Megatron-LM @d98e8a64 (the same code at 905c0e386,
    megatron-bridge's pin) and NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/optimizers/fused_adam.py:
    - the distributed optimizer (--ckpt-format torch_dist, the default: training/config/training_config.py l. 486;
      sharding type dp_reshardable, training/checkpointing.py l. 558): get_parameter_state_dp_reshardable
      (optimizer/distrib_optimizer.py l. 1227-1260) takes each parameter's tensors from
      _get_main_param_and_optimizer_states (l. 1090-1117), which under use_precision_aware_optimizer_no_fp8_or_ds_fp8
      (the planner's te_master) reads FusedAdam.get_unscaled_state for every state (l. 1108) and saves master_param as
      "param" (l. 1109); sharded_param_state_dp_reshardable writes each tensor at its own dtype (ShardedTensor
      tensors[key].dtype, l. 1977). get_unscaled_state (fused_adam.py l. 306-352) returns the int16 remainders as they
      are (l. 334-341: no fp32 master is reconstructed) and every moment below fp32 as .float() (bf16 l. 344-349, fp16
      l. 330-332, fp8 l. 328-329): Adam's m and v are written 4 B each whatever their dtype in memory, the master 2 B
      (remainders) or 4 B (an fp32 master; a 16-bit master without remainders, .float(), is 4 B too). The remainders
      restore the master only beside the bf16 weights (fused_adam.py l. 98-101, load_state_dict l. 535-541), which the
      model's own sharded state dict writes: priced as the `weights` term, 2 B. Not under the CPU offload:
      HybridDeviceOptimizer's states are taken as held (l. 1103-1105).
    - Megatron-FSDP (--ckpt-format fsdp_dtensor, required: training/arguments.py l. 1169-1170): the optimizer writes
      its raw state (sharded_param_state_fsdp_dtensor, distrib_optimizer.py l. 1635-1657: self.state, the moments at
      their dtype in memory), and the model's state dict holds the optimizer's parameters, the fp32 main weight shards
      (megatron_fsdp.py l. 1168-1173, a state_dict pre-hook, and l. 1408-1427, _replace_param_with_distributed_if_needed:
      pg_buffer.optimizer_named_parameters; param_and_grad_buffer.py _init_distributed_params l. 3249-3259, the main
      weight buffer), 4 B: memory.master_bytes [mw]; the bf16 weights are not written beside them.
    Llama 3 8B (8,030,261,248 parameters), bf16-moments (tests/test_checkpoint_written.py): 12 B a parameter under the
    distributed optimizer (2 + 2 + 8), 8 B under Megatron-FSDP (4 + 4), against 6 B (2 + 4) for both before.
[6] CPU offload (job fields offload_optimizer / offload_param, planner/offload.py): the checkpoint writes the rank's
    whole optimizer partition wherever the optimizer holds it (Megatron-LM @d98e8a64
    megatron/core/optimizer/distrib_optimizer.py l. 1103-1105: HybridDeviceOptimizer's states, host ones included, as
    held), so the per-GPU shard is priced from the memory terms with nothing offloaded (memory.memory_terms of the
    settings with offload_optimizer / offload_param none: the master, Adam's moments and, where they are saved, the
    weights the offload moves off the GPU), and only what the GPU holds crosses the host link (the host copy's bytes:
    explain's terms as priced). Before, the shard counted the GPU's terms only: 0 B of master and moments at the
    default offload fraction 1, and `planner budget` of any such plan divided by it (ZeroDivisionError; fuzz seed 114,
    cli-options: `budget train_llama3_8b.sh --offload-optimizer cpu`).
[7] DeepSpeed's ZeRO-Offload (the stack's cpu_offload.transfers zero_offload with the job's offload_optimizer cpu:
    Megatron-DeepSpeed), read at microsoft/DeepSpeed @38327e07. engine.py save_checkpoint (l. 3218-3317) has every
    rank run _save_checkpoint and, as save_zero_checkpoint (l. 1071-1076: param_rank == dp_rank, every rank of the
    data-parallel group), _save_zero_checkpoint; both write through the TorchCheckpointEngine (_configure_checkpointing
    l. 1049-1050; checkpoint_engine/torch_checkpoint_engine.py save l. 20-24: torch.save).
    - Every rank writes zero_pp_rank_<dp>_mp_rank_<mp>_optim_states.pt, optimizer_state_dict = the ZeRO optimizer's
      state_dict (_save_zero_checkpoint l. 3637-3640). At stages 1-2 (stage_1_and_2.py state_dict l. 2144-2183): the
      base optimizer's state_dict (l. 2170: DeepSpeedCPUAdam's exp_avg and exp_avg_sq, fp32 whatever the model dtype,
      fp32_optimizer_states True by default, ops/adam/cpu_adam.py l. 25, 150-157) and the fp32 master partition
      without its alignment padding (SINGLE_PARTITION_OF_FP32_GROUPS, l. 2173-2174; built .float() and pinned on the
      host under cpu_offload, l. 399-409). At stage 3 (stage3.py _rigid_state_dict l. 2548-2561): the base
      optimizer's state_dict and the fp32 flat partitions (FP32_FLAT_GROUPS, on the host under offload_optimizer,
      l. 901-903). So 4 B a parameter of master and 8 B of moments, the rank's partition, whatever the job's
      bytes_per_param; these tensors are host tensors already, so none crosses the host link (torch.save serialises
      them where they are).
    - The data-parallel rank 0 of each model-parallel group (save_non_zero_checkpoint, l. 1068-1069) also writes the
      module's state dict (_save_checkpoint l. 3453-3494, saved only there, l. 3492-3494; module_state_dict l.
      2701-2712, or under the pipeline engine PipelineModule.save_state_dict, pipe/module.py l. 590-620: data-parallel
      rank 0 writes every layer of its stage unless checkpoint_parallel_write_pipeline, off by default): the 16-bit
      weights the GPU holds, 2 B a parameter of its model-parallel part, copied from the GPU to the host to be written.
      At stage 3 that dict holds each partitioned parameter's placeholder (partition_parameters.py free_param l.
      282-291: param.data = torch.empty(0)): no weights (the persistent small parameters aside).
    So a ZeRO-Offload rank's shard is the memory terms with nothing offloaded at 4 B of master and 8 B of moments, plus
    at stages 1-2 the `weights` term (the heaviest rank, data-parallel rank 0); the job writes N x (4 + 8 + 2) B at
    stages 1-2, N x 12 B at stage 3; the host copy is that weights term alone (the GPU's bf16 weights). Without the
    offload the same files are written (the moments in the job's dtype, from the GPU): [8].
[8] What each stack's checkpoint writes beside the optimizer's master and moments, stack data (stack_db `checkpoint:`,
    schema.CheckpointSpec; model_weights_written, replicas_share_weights): the sharding modes under which the model's
    own state dict adds the working weights (model_weights_modes), at the job's weights dtype, and who writes replicas
    of them (model_weights_writer). A stack without the section keeps the seed's convention (sec. 9.2: master and
    moments only), listed as assumed (checkpoint_assumed).
    - Megatron-LM @d98e8a64, --ckpt-format torch_dist (the default): generate_state_dict (training/checkpointing.py l.
      1576-1595) writes the model's sharded state dict, the module's parameters, 16-bit under Float16Module
      (training/training.py l. 2468-2470; an fp8 parameter of --fp8-param-gather dequantize()d before it is written,
      core/dist_checkpointing/strategies/filesystem_async.py l. 146-161), beside the optimizer's (l. 1597-1624): the
      distributed optimizer's fp32 main param shard as "param" with exp_avg and exp_avg_sq
      (optimizer/distrib_optimizer.py l. 1090-1117, dp_reshardable l. 1227-1260), or under ddp and torch_fsdp2
      Float16OptimizerWithFloat16Params' fp32_from_fp16_params (optimizer/optimizer.py l. 1138-1215). Mixed precision:
      2 + 4 + 8 = 14 B a parameter. Replicated tensors are written once, their write shared by the dp x cp group's
      ranks (fully parallel save, on by default: training/config/training_config.py l. 511; checkpointing.py l.
      862-875; dist_checkpointing/exchange_utils.py distribute_shards_to_ranks l. 121-175, each shard to the
      least-loaded replica): a rank's share of the weights is priced at its optimizer partition's elements (the
      master term's), the whole model-parallel part where the optimizer is not sharded (ddp: the upper bound the
      master and the moments take there too [3]); whole tensors, the routed experts' as their main replica's group
      writes them [9]. Megatron-FSDP (--ckpt-format fsdp_dtensor) writes its fp32 main weights in the model's state
      dict instead [5]: 12 B, no working weights.
    - torchtitan @e347b1e5e (components/checkpoint.py l. 202-203, save l. 478-540, _flattened_model_states_sd l.
      737-747): DCP of the model parts' state dict, FSDP2's sharded parameters, fp32 (MixedPrecisionPolicy casts to
      bf16 only for compute: they are the planner's master term), and the optimizers' exp_avg, exp_avg_sq: 4 + 8 =
      12 B. The last step's save under last_save_model_only (default true; config/job_config.py l. 566-588) writes the
      model alone in export_dtype (float32 by default): a final export, not a periodic checkpoint, not priced.
    - DeepSpeed @38327e07 [7]: data-parallel rank 0 writes the module's 16-bit weights of its model-parallel part
      (the heaviest shard: model_weights_writer dp_rank0), every rank its optimizer partition, the fp32 master and
      the base optimizer's moments; at ZeRO-3 the module holds placeholders. 2 + 4 + 8 = 14 B at stages 0-2, 12 B at
      stage 3.
    Llama 3 8B, 8 GPUs, tp 1, zero1, fp32 Adam (tests/test_checkpoint_written.py): Megatron 14 P (4 + 8 + 2 L8 = 14 L8
    a rank), DeepSpeed 14 P (28 L8 on rank 0), torchtitan FSDP 12 P; before branch ckpt 12 P on every stack.
[9] Who writes the working weights' whole tensors, the routed experts' among them, under Megatron's torch_dist fully
    parallel save (the stacks whose checkpoint.model_weights_writer is replicas_share [8]; WeightWrites,
    weight_writes), NVIDIA/Megatron-LM
    @d98e8a64:
    - Each local expert's weights are ShardedTensors of their own, replicated over the expert-data-parallel group only:
      TEGroupedMLP.sharded_state_dict (core/transformer/moe/experts.py l. 1049-1089) through TE's
      _sharded_state_dict_grouped (core/extensions/transformer_engine.py l. 2805-2888: one tensor per expert,
      replica_id (pp, tp, expt_dp rank), l. 2876-2887), SequentialMLP the same (experts.py l. 1526-1566: replica_id's
      data-parallel entry the expert-DP rank, l. 1557-1564); a gated fc1 split by apply_swiglu_sharded_factory
      (core/transformer/mlp.py l. 427-486: torch.chunk into its w and v halves, l. 479), factories built before the
      save (dist_checkpointing/state_dict_utils.py save_preprocess l. 40). So k = 3 tensors an expert and layer
      (gated) or 2, each F_e h / etp elements.
    - The fully parallel save distributes within the dp x cp group (--ckpt-fully-parallel-save-process-group dp, the
      default: training/config/training_config.py l. 559; training/checkpointing.py l. 862-868) only the shards whose
      main replica (replica_id all zeros, dist_checkpointing/mapping.py is_main_replica l. 286-300) is in that group
      (exchange_utils.py _build_shard_distribution l. 236-292, l. 278 and 286), each to the least-loaded of the
      group's ranks that hold it, the shards of fewest holders first, then the largest (distribute_shards_to_ranks l.
      121-175; fully_parallel.py l. 486-542 sets replica_id 0 on the chosen rank alone).
    - The expert grid places etp innermost, then ep, then the expert-DP ranks (core/parallel_state.py l. 886-895,
      the order "tp-cp-ep-dp-pp" of l. 617 with cp 1), the dense one tp innermost: a rank's dense tensor-parallel rank
      is its index mod tp. An expert shard's edp holders lie at the stride etp ep, so the main replica's dp x cp group
      holds w_e = edp gcd(tp, etp ep) / tp of them: edp where tp divides etp ep (the default etp = tp), fewer where
      etp ep < tp (etp 1, ep 2, tp 4: 2 of the 4 TP ranks' groups write every expert, the others none).
    - The optimizer's expert states are each rank's own partition over the expert-DP group, every one a main
      replica (distrib_optimizer.py sharded_param_state_dp_reshardable l. 1838-1986, replica_id (instance, 0, 0), l.
      1984): the memory model's master and moments as held.
    So the rank's working-weight share is priced at the larger of its optimizer partition's elements with the experts'
    at 1 / w_e in place of their optimizer shard's 1 / d_e (the writers' mean; never below the partition's, as the
    dense weights' share, where the optimizer shards over fewer ranks than dp x cp), and the greedy's first
    placements: the most whole expert tensors one holder gets, ceil(n_t / w_e) s (n_t its local experts' tensors,
    placed first: fewest holders), and the stage's largest dense tensor B (the word embedding's or the output layer's
    V / tp x h, one ShardedTensor a TP rank, written whole by one rank) on the least-loaded rank, beside the floor(n_t
    / w_e) s of experts that rank holds where they were placed before it. A lower bound of the greedy's heaviest rank,
    exact where the other dense tensors fit under it; not priced: a middle stage's largest layer tensor, the experts'
    biases (small tensors after the weights), rank orders that do not put tp innermost, the tensor-replicated norms'
    write (only the TP rank 0 group's: small). Mixtral 8x7B, 64 GPUs, tp 4, etp 1, ep 2, pp 4, zero1
    (tests/test_checkpoint_moe.py): the last stage's 4 local experts x 8 layers x 3 = 96 tensors of 58,720,256
    elements on w_e = 4 writers (edp 8): 24 each, and the output layer's 8,064 x 4,096 rows on one of them: 2 x
    (1,409,286,144 + 33,030,144) = 2,884,632,576 B of weights a rank, where the partition's even share (experts over
    8) priced 1,467,910,144 B before. Llama 3 70B, tp 8, dp 512: 264,241,152 B (the embedding's shard), not 34,456,196
    B.
[10] Whether and how the stack writes its periodic checkpoint (stack_db checkpoint.state_dict, checkpoint.enabled_by;
    full_state_dict, checkpoint_enabled):
    - full_rank0: the whole state gathered to global rank 0, which alone writes it. Composer v0.17.2 (llm-foundry's pin,
      mosaicml/llm-foundry @5e85bd62d setup.py: mosaicml>=0.17.2,<0.18): fsdp_config state_dict_type defaults 'full'
      (composer/trainer/dist_strategy.py l. 149), read under FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
      and FullOptimStateDictConfig the same (composer/core/state.py l. 79-87; State.state_dict l. 891-903: the model's
      state dict and fsdp_get_optim_state_dict), and save_checkpoint writes the monolithic file on global rank 0 only
      (composer/utils/checkpoint.py l. 961-965). Lightning Fabric's FSDPStrategy under state_dict_type 'full' (litgpt
      v0.4.11 litgpt/pretrain.py l. 134: FSDPStrategy(..., state_dict_type="full", sharding_strategy="HYBRID_SHARD"))
      gathers the model's state dict and FSDP.optim_state_dict in its full-state context and torch.saves them on global
      rank 0 (lightning/fabric/strategies/fsdp.py save_checkpoint, read in the public code index at no pinned version).
      Torch FSDP1 unshards for the state dict in full precision (FlatParamHandle._force_full_precision under
      SUMMON_FULL_PARAMS: the fp32 flat parameters, not their bf16 compute copies). Priced: the rank's shard is one
      whole copy of the job (N x the bytes a parameter [5]), one shard (distinct 1), all of it through rank 0's host
      link (the write over the aggregate storage bandwidth as for every stack: one rank's own network link is not
      modelled).
    - enabled_by: the stack writes no periodic checkpoint unless a setting says so: torchtitan [checkpoint] enable
      defaults false (pytorch/torchtitan @e347b1e5e torchtitan/config/job_config.py l. 487-489; release/0.3 @4f9e9a47d
      components/checkpointer/base.py l. 222-227, the checkpoint managers' Config), llm-foundry saves only with a
      save_folder (scripts/train/train.py @5e85bd62d l. 313-316, default None; the pretrain YAMLs leave it commented
      out), lightning-thunder's benchmark_litgpt.py @69ee6a218 saves nothing (no save or state_dict call). A training
      budget prices the run as it must run to survive its failures, with checkpoints: the figures are kept, as if
      enabled, and `budget` says so (its assumed list, checkpoint.written_by_default false, the table's note), rather
      than priced at 0 B, which would make Young's interval 0 and the goodput that of a run whose failures cost
      nothing. A torchtitan TOML whose [checkpoint] enable is true (TrainerConfig.checkpoint_enable) runs that
      checkpoint: the line goes (config_checkpoint; checkpoint.enabled_in_config); other readers state none
      (Megatron's --save / --save-interval are not read for it).
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import reliability as rel
from .errors import PlannerError
from .explain import Estimate, assumed_lines, evaluate, to_json
from .params import count_params
from .plan import PRECISION_CODES, PlanArrays, Settings, plan_dict, resolve
from .schema import MAX_COUNT, Job

# Aggregate checkpoint write bandwidth when none is given: Llama 3's storage, 2 TB/s
# sustained ([2] sec. 3.3.1), shared there by a 16K-GPU job and everything else on the
# cluster. A named assumption: a real job gets what its storage system gives it.
DEFAULT_CHECKPOINT_BPS = 2e12
# Restart time when none is given: the seed's 10 minutes to detect a failure, swap the
# server and reload [4].
DEFAULT_RESTART_S = 600.0
# Monte-Carlo runs per estimate when none is given: the seed's 20 [4].
DEFAULT_MC_RUNS = 20
# Cap on simulated loop iterations (checkpoint segments + failed attempts, all runs
# together) so that `budget` answers in about a second: the seed's Python loop runs ~3-5
# million iterations per second on one core. A 45-day job checkpointing every 3 minutes
# is ~22,000 segments a run, 20 runs = 0.44 M. Above the cap the run count is lowered to
# fit (and the output says so); if one run alone exceeds it the simulation is skipped.
MC_MAX_ITERATIONS = 5e6


@dataclass(frozen=True)
class BudgetOptions:
    """Everything `budget` takes besides the plan, in SI units. None means "default"."""

    mfu: float | None = None  # replaces the step-time model's MFU (6N convention)
    price_per_gpu_hour: float | None = None
    currency: str = "USD"  # the price's currency, an ISO 4217 code: labels every cost (issue 24)
    pue: float = 1.0
    failures_per_gpu_s: float | None = None  # per-GPU interruption rate
    job_mtbf_s: float | None = None  # job MTBF at the base GPU count (exclusive with the rate)
    mtbf_gpus: int | None = None  # the GPU count job_mtbf_s refers to (default: the plan's)
    checkpoint_Bps: float | None = None  # aggregate storage write bandwidth
    checkpoint_save_s: float | None = None  # write time of one checkpoint (exclusive with Bps)
    restart_s: float = DEFAULT_RESTART_S
    async_save: bool = False
    host_Bps: float = rel.PCIE_GEN5_X16_BPS
    interval_s: float | None = None  # checkpoint interval; default Young's
    mc_runs: int = DEFAULT_MC_RUNS
    mc_seed: int = 0

    def check(self) -> None:
        """Raise PlannerError for contradictory or out-of-range options (CLI names in messages)."""
        if self.failures_per_gpu_s is not None and self.job_mtbf_s is not None:
            raise PlannerError(
                "both --failures-per-gpu-day and --mtbf-hours are given",
                "give one: a per-GPU rate (scaled by the GPU count) or the job's MTBF",
            )
        if self.checkpoint_Bps is not None and self.checkpoint_save_s is not None:
            raise PlannerError(
                "both --checkpoint-bandwidth and --checkpoint-save-s are given",
                "give one: the storage bandwidth (the save time follows from the shard sizes) or the save time",
            )
        _positive_opt("--mfu", self.mfu, "write e.g. 0.4 for 40%", upper=1.0)
        _positive_opt("--failures-per-gpu-day", self.failures_per_gpu_s, "Llama 3 saw ~4.7e-4 per GPU-day")
        _positive_opt("--mtbf-hours", self.job_mtbf_s, "e.g. 12 (the seed's 4,096-GPU job)")
        _positive_opt("--checkpoint-bandwidth", self.checkpoint_Bps, "aggregate GB/s, e.g. 2000 (Llama 3's 2 TB/s)")
        _positive_opt("--checkpoint-save-s", self.checkpoint_save_s, "seconds per checkpoint, e.g. 30 (the seed's)")
        _positive_opt("--checkpoint-interval", self.interval_s, "e.g. 27min; leave out for Young's interval")
        if self.price_per_gpu_hour is not None:
            _finite_nonneg("--price-per-gpu-hour", self.price_per_gpu_hour, "a price per GPU-hour, e.g. 2.5")
        if not (isinstance(self.currency, str) and re.fullmatch(r"[A-Z]{3}", self.currency)):
            raise PlannerError(f"--currency {self.currency!r} is not a currency code",
                               "give the ISO 4217 code of the price's currency, e.g. USD, EUR, GBP")
        _finite_nonneg("--restart-s", self.restart_s, "seconds to detect, swap and reload, e.g. 600 (the seed's)")
        if not (np.isfinite(self.pue) and self.pue >= 1.0):
            raise PlannerError(f"--pue must be >= 1, got {self.pue:g}", "1.0 counts the GPUs alone; data centres report 1.1-1.6")
        if self.mc_runs < 0:
            raise PlannerError(f"--mc-runs must be >= 0, got {self.mc_runs}", "20 is the seed's; 0 turns the simulation off")


def _positive_opt(name: str, v, hint: str, upper: float | None = None) -> None:
    if v is None:
        return
    ok = np.isfinite(v) and v > 0 and (upper is None or v <= upper)
    if not ok:
        rng = f"in (0, {upper:g}]" if upper is not None else "> 0"
        raise PlannerError(f"{name} must be a finite number {rng}, got {float(v):g}", hint)


def _finite_nonneg(name: str, v, hint: str) -> None:
    if not (np.isfinite(v) and v >= 0):
        raise PlannerError(f"{name} must be a finite number >= 0, got {float(v):g}", hint)


# ---------------------------------------------------------------- checkpoint shards
@dataclass(frozen=True)
class CheckpointShards:
    """What one GPU holds for a checkpoint (`size`, by term) and one full copy of the job's
    state (`job_bytes`); `distinct` = job_bytes / size.total_bytes, the number of shards of that
    size one copy takes (the GPU count under ZeRO/FSDP, fewer when states are replicated);
    `device_bytes` what of `size` the GPU holds, the host copy's bytes, where CPU offload keeps the rest in host
    memory already [6] (None: all of it)."""

    size: rel.CheckpointSize
    job_bytes: float
    distinct: float
    device_bytes: object = None


CHECKPOINT_MOMENT_BYTES = 4.0  # FusedAdam.get_unscaled_state: a moment below fp32 as .float() (fused_adam.py @4329ff84 l. 328-349) [5]
CHECKPOINT_MASTER_BYTES = 4.0  # get_unscaled_state: a master that is not remainders, fp32 (l. 334-343, .float() otherwise) [5]
ADAM_MOMENTS = 2  # Adam's m and v (schema.BytesPerParam.optimizer: both)
# ZeRO-Offload's optimizer file [7]: the fp32 master partition (DeepSpeed @38327e07 stage_1_and_2.py l. 399-409 .float(),
# stage3.py l. 901-903) and DeepSpeedCPUAdam's moments, fp32 by default (ops/adam/cpu_adam.py l. 25, 150-157)
ZERO_OFFLOAD_MASTER_BYTES = 4.0
ZERO_OFFLOAD_MOMENT_BYTES = 4.0


def zero_offload(settings: Settings) -> bool:
    """Whether the job runs DeepSpeed's ZeRO-Offload (its offload_optimizer cpu on a stack whose cpu_offload.transfers
    is zero_offload: Megatron-DeepSpeed), whose checkpoint [7] describes."""
    from .stacks import stack_of

    spec = stack_of(settings).cpu_offload
    return settings.offload_optimizer == "cpu" and spec is not None and spec.transfers == "zero_offload"


@dataclass(frozen=True)
class CheckpointBytes:
    """Bytes a parameter the checkpoint writes [5], arrays of the plan's shape: the master (the memory model's
    memory.master_bytes, or 4 B where get_unscaled_state widens a 16-bit master), Adam's moments, and the bf16 weights
    where they are the master's only full copy or its other half (pure bf16: no master; TE's remainders)."""

    master: object
    optimizer: object
    weights: object


def checkpoint_bytes_per_param(settings: Settings, plan: PlanArrays) -> CheckpointBytes:
    """What one parameter costs the checkpoint, by term [5]: the memory model's bytes (memory.master_bytes: TE's 2 B
    remainders under the distributed optimizer, Megatron-FSDP's 4 B fp32 main weights under its own modes), but where
    Megatron's distributed optimizer saves through TE's FusedAdam.get_unscaled_state (te_master, not a mode that steps
    its own master, no CPU offload) the moments are written fp32 (4 B each) and a master that is not remainders fp32;
    the bf16 weights are written with the remainders (they restore the fp32 master together) and in pure bf16. Under
    DeepSpeed's ZeRO-Offload what its files hold [7]: 4 B of master, 8 B of moments and, at ZeRO stages 1-2, the
    16-bit weights data-parallel rank 0 writes."""
    from .memory import master_bytes
    from .stacks import own_master, stack_of

    bpp = settings.bpp
    shape = np.shape(plan.sharding)
    held = np.asarray(master_bytes(settings, plan), dtype=np.float64) * np.ones(shape)
    module = model_weights_written(settings, plan)  # the model's state dict adds the working weights [8]
    if zero_offload(settings):  # a job setting and stack data, not searched: what DeepSpeed's ZeRO-Offload writes [7]
        return CheckpointBytes(master=np.where(held > 0, ZERO_OFFLOAD_MASTER_BYTES, 0.0) * np.ones(shape),
                               optimizer=ADAM_MOMENTS * ZERO_OFFLOAD_MOMENT_BYTES * np.ones(shape),
                               weights=np.where(module, bpp.weights, 0.0) * np.ones(shape))
    own = own_master(stack_of(settings), plan)
    unscaled = bool(settings.te_master and settings.offload_optimizer != "cpu") & ~own
    remainders = bool(settings.remainders) & ~own  # the master held as int16 remainders (memory.master_bytes)
    master = np.where(unscaled & ~remainders & (bpp.master > 0), CHECKPOINT_MASTER_BYTES, held)
    optimizer = np.where(unscaled & (bpp.optimizer > 0), ADAM_MOMENTS * CHECKPOINT_MOMENT_BYTES, bpp.optimizer)
    weights = np.where((bpp.master == 0) | remainders | module, bpp.weights, 0.0)
    return CheckpointBytes(master=master, optimizer=optimizer * np.ones(shape), weights=weights * np.ones(shape))


def model_weights_written(settings: Settings, plan: PlanArrays) -> np.ndarray:
    """Where the stack's checkpoint writes the model's working weights beside the optimizer's master [8], a boolean
    array of the plan's shape: the plan's sharding mode is one of the stack's checkpoint.model_weights_modes (stack
    data); false everywhere on a stack without a checkpoint section, or without runs to name the plan's mode (the
    seed's convention, listed as assumed: checkpoint_assumed)."""
    from .stacks import mode_index, stack_of

    stack = stack_of(settings)
    shape = np.shape(plan.sharding)
    ck = stack.checkpoint
    if ck is None or stack.runs is None or not ck.model_weights_modes:  # stack data: no mode writes them
        return np.zeros(shape, dtype=bool)
    col = np.array([m.name in ck.model_weights_modes for m in stack.runs.sharding])
    return col[mode_index(plan, col)] & np.ones(shape, dtype=bool)


def replicas_share_weights(settings: Settings) -> bool:
    """Whether the stack's replicas of the working weights share their write (checkpoint.model_weights_writer
    replicas_share: Megatron's fully parallel save) rather than data-parallel rank 0 writing them all (dp_rank0:
    DeepSpeed) [8]; stack data, not searched."""
    from .stacks import stack_of

    ck = stack_of(settings).checkpoint
    return ck is not None and ck.model_weights_writer == "replicas_share"


def checkpoint_shards(settings: Settings, plan: PlanArrays, est: Estimate) -> CheckpointShards:
    """Checkpoint bytes per GPU from explain's memory terms (heaviest pipeline stage) at the bytes a parameter the
    checkpoint writes (checkpoint_bytes_per_param [5]: each term's elements, its bytes over the bytes held, times the
    bytes written; DeepSpeed's ZeRO-Offload [7]), and for the whole job from the parameter count at the same bytes;
    see the module docstring."""
    from .memory import master_bytes

    bpp = settings.bpp
    ck = checkpoint_bytes_per_param(settings, plan)
    held = np.asarray(master_bytes(settings, plan), dtype=np.float64)

    share = replicas_share_weights(settings)
    safe = np.where(held > 0, held, 1.0)
    # Megatron's whole tensors and expert replicas [9], where the stack's replicas share a write of working weights
    ww = weight_writes(settings, plan, est) if share and np.any(ck.weights > 0) else None

    def shard(t, whole=None):  # the terms' bytes at the bytes a parameter the checkpoint writes [5]
        master = np.where(held > 0, t.master_weights / safe * ck.master, 0.0)
        adam = t.adam * (ck.optimizer / bpp.optimizer if bpp.optimizer > 0 else 0.0)
        # the working weights [8]: where replicas share their write, the rank's share, its optimizer partition's
        # elements (of the terms with nothing offloaded, `whole`: the partition wherever the optimizer holds it [6]),
        # no more than the GPU holds; else (data-parallel rank 0 writing them all; no master to size a partition by)
        # the weights the GPU holds
        part = np.where(held > 0, (t if whole is None else whole).master_weights / safe * ck.weights, 0.0)
        if ww is not None:  # whole tensors; the routed experts' written by their main replica's dp x cp group [9]
            part = np.where(ww.sharded, np.maximum(part + ww.excess * ck.weights, ww.floor * ck.weights), part)
        part = part if whole is None else np.minimum(part, t.weights)
        weights = np.where(share & (held > 0), part, t.weights)
        return rel.checkpoint_bytes_per_gpu(master, adam, np.where(ck.weights > 0, weights, 0.0))

    size, device = shard(est.memory), None
    if settings.offload_optimizer != "none" or settings.offload_param != "none":  # job settings, not searched [6]
        from dataclasses import replace

        from .memory import memory_terms

        whole = memory_terms(replace(settings, offload_optimizer="none", offload_param="none"), plan)[0]
        device = shard(est.memory, whole).total_bytes  # what the GPU holds of it: the host copy's bytes
        size = shard(whole)
    pc = count_params(settings.model)
    n = float(pc.total)
    job = float(n * (ck.master + ck.optimizer + ck.weights))
    muon = 0.0
    if settings.optimizer == "muon":  # a job setting: Muon's parameters write one fp32 momentum, not Adam's two [mu]
        from .memory import MUON_MOMENTUM_BYTES, muon_param_total

        muon = float(muon_param_total(pc) * (ck.optimizer - MUON_MOMENTUM_BYTES))
        job -= muon
    if full_state_dict(settings):  # stack data: global rank 0 gathers and writes the whole state [10]
        size = rel.checkpoint_bytes_per_gpu(n * ck.master, n * ck.optimizer - muon, n * ck.weights)
        return CheckpointShards(size=size, job_bytes=job, distinct=1.0, device_bytes=None)
    return CheckpointShards(size=size, job_bytes=job, distinct=job / float(size.total_bytes), device_bytes=device)


def full_state_dict(settings: Settings) -> bool:
    """Whether the stack's checkpoint gathers the full state dict to global rank 0, which writes it alone
    (checkpoint.state_dict full_rank0: Composer's and Lightning Fabric's FSDP state_dict_type 'full') [10]; stack
    data, not searched."""
    from .stacks import stack_of

    ck = stack_of(settings).checkpoint
    return ck is not None and ck.state_dict == "full_rank0"


@dataclass(frozen=True)
class WeightWrites:
    """Who writes the working weights' whole tensors under Megatron's fully parallel save [9], for the heaviest
    pipeline stage (explain's), arrays of the plan's shape, in elements a GPU (multiply by the bytes written):
    `writers` the ranks of an expert shard's main-replica dp x cp group that hold it (w_e), `tensors` the
    ShardedTensors of a rank's local routed experts (n_t), `tensor` one's elements (s), `largest` the stage's largest
    dense tensor (B: the word embedding's or the output layer's V / tp x h rows on an end stage, 0 on a middle one),
    `floor` what the rank given the most whole tensors writes at least (max(ceil(n_t / w_e) s, B + the experts the
    least-loaded rank holds)), `excess` the local experts' elements x max(1 / w_e - 1 / d_e, 0), what the writers'
    mean share adds to the optimizer partition's (d_e the experts' optimizer shard, moe.optimizer_shards), `sharded` where
    the optimizer is sharded (the partition prices the weights' share: zero1 and above)."""

    writers: object
    tensors: object
    tensor: object
    largest: object
    floor: object
    excess: object
    sharded: object


def weight_writes(settings: Settings, plan: PlanArrays, est: Estimate) -> WeightWrites:
    """The whole tensors behind a rank's working-weight write under Megatron's fully parallel save [9], of the heaviest
    stage (est.stage; a middle stage: its composition with the most expert parameters): the routed experts
    (memory.params_of's, their biases left out: small tensors written after the weights) as ShardedTensors of
    s = F_e h / etp elements, k = 3 an expert and layer where the MLP is gated (fc1's two halves apart, and fc2) or 2,
    n_t = (the local experts' weight elements) / s of them, of which w_e = edp gcd(tp, etp ep) / tp holders in the
    main replica's dp x cp group write ceil(n_t / w_e) s at most, the first placed (fewest holders); then the dense
    tensors, the largest first onto the least-loaded rank, which holds floor(n_t / w_e) s of experts where the experts
    have fewer holders than the dp x cp ranks or as many and s >= B (else B is placed before them: B alone priced).
    No experts: n_t = s = 0, the floor B."""
    from dataclasses import replace

    from .layers import weighted
    from .memory import STAGE_LAST, STAGE_MIDDLE, params_of, stage_kind_counts
    from .moe import etp_of, expert_dp, optimizer_shards
    from .plan import ZERO1
    from .stacks import stack_of

    model = settings.model
    shape = np.shape(plan.sharding)
    ones = np.ones(shape)
    pc = count_params(model)
    stage = np.asarray(est.stage)
    tp = np.asarray(plan.tp, dtype=np.int64)
    single = np.asarray(plan.pp) == 1
    # the largest dense tensor of an end stage: the vocabulary-parallel word embedding (first) and output layer (last;
    # with tied embeddings the last stage's copy of the embedding where pp > 1), V / tp x h, V as padded (pc's) [9]
    out_rows = pc.output if not model.tied_embeddings else np.where(single, 0.0, pc.embedding)
    first_b, last_b = pc.embedding / tp, out_rows / tp
    largest = np.where(stage == STAGE_MIDDLE, 0.0, np.where(
        single, np.maximum(first_b, last_b), np.where(stage == STAGE_LAST, last_b, first_b))) * ones
    on = (np.asarray(plan.sharding) >= ZERO1) & np.ones(shape, dtype=bool)
    if model.moe is None or not any(p.expert for p in pc.kind_params):  # model data: no routed experts
        zero = np.zeros(shape)
        return WeightWrites(writers=ones, tensors=zero, tensor=zero, largest=largest, floor=largest, excess=zero,
                            sharded=on)
    # the routed experts' weight matrices alone (each expert's biases left out)
    bare = replace(pc, kind_params=tuple(replace(p, expert=p.expert - p.expert_bias, expert_row_bias=0, expert_bias=0)
                                         for p in pc.kind_params),
                   mtp=replace(pc.mtp, expert=pc.mtp.expert - pc.mtp.expert_bias, expert_row_bias=0, expert_bias=0))
    counts = stage_kind_counts(model, plan)
    experts = [p.expert for p in pc.kind_params]
    mid = counts["mid"][0]
    for cand in counts["mid"][1:]:  # the middle composition with the most expert parameters (step.py's rule)
        mid = np.where(weighted(cand, experts) > weighted(mid, experts), cand, mid)
    mtp_copy = bool(stack_of(settings).memory.mtp_embedding_copy)
    stages = (("first", counts["first"]), ("mid", mid), ("last", counts["last"]))
    local = {st: params_of(bare, model, plan, c, st, mtp_copy=mtp_copy)[1] for st, c in stages}
    held = {st: params_of(pc, model, plan, c, st, mtp_copy=mtp_copy)[1] for st, c in stages}

    def pick(d):
        return np.where(stage == STAGE_LAST, d["last"], np.where(stage == STAGE_MIDDLE, d["mid"], d["first"])) * ones

    etp = np.asarray(etp_of(plan), dtype=np.int64)
    f_e = model.moe.expert_ffn_hidden_size or model.ffn_hidden_size
    s = float(f_e) * float(model.hidden_size) / etp * ones  # one expert's fc1 half or fc2, split over etp
    n_t = np.round(pick(local) / s)
    w_e = np.maximum(expert_dp(plan) * np.gcd(tp, etp * np.asarray(plan.ep, dtype=np.int64)) // tp, 1).astype(np.float64)
    d_e = np.maximum(np.asarray(optimizer_shards(stack_of(settings), plan, on)[1], dtype=np.float64), 1.0)
    dpcp = np.asarray(plan.dp * plan.cp, dtype=np.float64)
    # the experts on the rank the largest dense tensor joins: placed before it where they have fewer holders, or as
    # many and are no smaller (distribute_shards_to_ranks' order: holders, then size) [9]
    least = np.where((w_e < dpcp) | (s >= largest), np.floor(n_t / w_e + 1e-9) * s, 0.0)
    floor = np.maximum(np.ceil(n_t / w_e - 1e-9) * s, largest + least)
    # not below the partition's share: the dense weights' share is priced at the partition too, an upper bound where
    # the optimizer shards over fewer ranks than the dp x cp group that shares the write (its distributed optimizer
    # instances, moe.optimizer_shards)
    excess = pick(held) * np.maximum(1.0 / w_e - 1.0 / d_e, 0.0)
    return WeightWrites(writers=w_e * ones, tensors=n_t, tensor=s, largest=largest, floor=floor, excess=excess,
                        sharded=on)


SEED_CONVENTION = ("the seed's convention (sec. 9.2): the master weights and Adam's moments, the working weights only "
                   "where there is no fp32 master")


def checkpoint_contents(settings: Settings) -> str:
    """What writes the checkpoint, as the stack's checkpoint section names it [8], or the seed's convention."""
    from .stacks import stack_of

    ck = stack_of(settings).checkpoint
    return ck.format if ck is not None else SEED_CONVENTION + ", assumed"


def checkpoint_enabled(settings: Settings) -> dict:
    """budget JSON's checkpoint fields on who writes and whether the stack writes by default [10]:
    `written_by_default` (false where checkpoint.enabled_by names the setting that turns it on, `enabled_by`) and
    `writer` (every rank its shard, or global rank 0 the full state dict)."""
    from .stacks import stack_of

    ck = stack_of(settings).checkpoint
    on = ck.enabled_by if ck is not None else None
    return {"written_by_default": on is None, "enabled_by": on,
            "writer": "global rank 0, the full state dict" if full_state_dict(settings) else "every rank, its shard"}


def checkpoint_assumed(settings: Settings) -> list[str]:
    """budget's assumed lines where the stack does not say what its checkpoint writes [8], and where it writes none
    unless told to (checkpoint.enabled_by [10])."""
    from .stacks import stack_of

    stack = stack_of(settings)
    ck = stack.checkpoint
    if ck is None:
        return [f"checkpoint contents: {stack.origin} has no checkpoint section: {SEED_CONVENTION}"]
    out = []
    if stack.runs is None and ck.model_weights_modes:  # model_weights_written: no mode to look the plan's up in
        out.append(f"checkpoint contents: {stack.origin} has no runs.sharding to find the plan's mode among "
                   f"checkpoint.model_weights_modes: {SEED_CONVENTION}")
    if ck.enabled_by is not None:
        out.append(f"checkpoint enabled: {stack.origin} writes no periodic checkpoint unless told to (on with: "
                   f"{ck.enabled_by}); {CHECKPOINT_IF_ENABLED}")
    return out


def config_checkpoint(res: dict, enable: bool | None) -> dict:
    """budget's JSON after a trainer config that states the periodic checkpoint's switch (TrainerConfig.
    checkpoint_enable: torchtitan's [checkpoint] enable) [10]: checkpoint.enabled_in_config as stated (None: not
    stated), and where the file turns it on, the assumed "checkpoint enabled:" line dropped (the figures are the run's,
    not an "if enabled" one). In place; returns res."""
    res["checkpoint"]["enabled_in_config"] = enable
    if enable is True and "assumed" in res:
        res["assumed"] = [a for a in res["assumed"] if not a.startswith("checkpoint enabled:")]
        if not res["assumed"]:
            del res["assumed"]
    return res


# what budget does where the stack writes no checkpoint unless told to [10]
CHECKPOINT_IF_ENABLED = ("priced as if enabled: without checkpoints every failure restarts the run from its first step, "
                         "which the goodput figures do not model")


# ---------------------------------------------------------------- the budget
@dataclass(frozen=True)
class Budget:
    """Every figure of one budget; arrays broadcast over plans (0-d for one plan)."""

    total_flops: object  # 6 N T
    mfu: object  # MFU used, 6N convention
    peak_flops: object
    time: rel.TrainingTime  # failure-free
    energy: rel.Energy  # failure-free GPU time at TDP x PUE
    cost: object  # failure-free; None without a price
    shards: CheckpointShards
    storage_Bps: object
    ckpt: rel.CheckpointTime
    failures_per_gpu_s: object
    mtbf_s: object
    young_s: object
    daly_s: object
    interval_s: object  # the interval used for goodput
    interval_rule: str  # "young" | "given", with ", raised to the write time" (async)
    closed: rel.ExpectedGoodput  # at interval_s, work = failure-free wall time
    closed_daly: rel.ExpectedGoodput  # at Daly's interval (async: at least the write time)
    effective_energy: rel.Energy  # GPU time of the expected wall time
    effective_cost: object
    mc: rel.GoodputSimulation | None
    mc_runs: int
    notes: list = field(default_factory=list)


def _out(x):
    """0-d arrays back to numpy scalars (as reliability.py returns them)."""
    x = np.asarray(x, dtype=np.float64)
    return x[()] if x.ndim == 0 else x


def _failure_rate(opts: BudgetOptions, n_gpus):
    """Per-GPU interruption rate and where it comes from."""
    if opts.failures_per_gpu_s is not None:
        return opts.failures_per_gpu_s, "--failures-per-gpu-day"
    if opts.job_mtbf_s is not None:
        base = opts.mtbf_gpus if opts.mtbf_gpus is not None else n_gpus
        return rel.failures_per_gpu_s_from_mtbf(opts.job_mtbf_s, base), f"--mtbf-hours (at {int(np.max(base)):,} GPUs)"
    return rel.LLAMA3_FAILURES_PER_GPU_S, (
        "Llama 3 (arXiv:2407.21783 sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384 H100s, "
        "scaled by the GPU count"
    )


def compute_budget(*, n_params, tokens, n_gpus, peak_flops, mfu, tdp_W, shards: CheckpointShards,
                   opts: BudgetOptions) -> tuple[Budget, dict]:
    """The budget for given plan figures (scalars or equal-length arrays, except `opts`).
    Returns (Budget, sources) where sources names where each assumption came from."""
    opts.check()
    notes: list[str] = []
    flops = rel.dense_training_flops(n_params, tokens)
    tt = rel.training_time(flops, n_gpus, peak_flops, mfu)
    en = rel.energy(tt.gpu_s, tdp_W, opts.pue)
    price = opts.price_per_gpu_hour
    cost = rel.cost(tt.gpu_s, price) if price is not None else None

    # checkpoint: the write of one full copy over the storage bandwidth; the save time, if
    # given, fixes that bandwidth (copy / time) so that reliability.checkpoint_time applies
    if opts.checkpoint_save_s is not None:
        storage = shards.job_bytes / opts.checkpoint_save_s
        storage_src = "--checkpoint-save-s"
    elif opts.checkpoint_Bps is not None:
        storage, storage_src = opts.checkpoint_Bps, "--checkpoint-bandwidth"
    else:
        storage = DEFAULT_CHECKPOINT_BPS
        storage_src = "Llama 3 storage, 2 TB/s sustained (arXiv:2407.21783 sec. 3.3.1), assumed"
    ck = rel.checkpoint_time(shards.size.total_bytes, shards.distinct, storage, opts.async_save, opts.host_Bps,
                             copy_bytes=shards.device_bytes)

    rate, rate_src = _failure_rate(opts, n_gpus)
    mtbf = rel.mtbf_s(n_gpus, rate)
    young = rel.young_interval(ck.pause_s, mtbf)
    daly = rel.daly_interval(ck.pause_s, mtbf)
    if opts.interval_s is not None:
        interval, rule = np.full(np.shape(young), opts.interval_s, dtype=np.float64), "given"
    else:
        interval, rule = young, "young"
    daly_used = daly
    if opts.async_save:
        # the background write must finish before the next checkpoint starts (reliability.CheckpointTime)
        if np.any(np.asarray(interval) < ck.write_s):
            notes.append("asynchronous save: the interval used is raised to the background write time, "
                         "which must end before the next checkpoint")
            rule += ", raised to the write time"
        interval = np.maximum(interval, ck.write_s)
        daly_used = np.maximum(daly, ck.write_s)
    interval = _out(interval)
    closed = rel.expected_goodput(interval, ck.pause_s, opts.restart_s, mtbf, work_s=tt.wall_s)
    closed_daly = rel.expected_goodput(daly_used, ck.pause_s, opts.restart_s, mtbf, work_s=tt.wall_s)
    eff_gpu_s = closed.wall_s * np.asarray(n_gpus, dtype=np.float64)
    eff_energy = rel.energy(eff_gpu_s, tdp_W, opts.pue)
    eff_cost = rel.cost(eff_gpu_s, price) if price is not None else None

    mc, runs = None, 0
    if opts.mc_runs > 0:
        # expected loop iterations of one run (of every broadcast element together):
        # checkpoint segments + failed attempts (closed form)
        per_run = float(np.sum(np.asarray(tt.wall_s) / np.asarray(interval) + np.asarray(closed.failures)))
        runs = min(opts.mc_runs, int(MC_MAX_ITERATIONS // max(per_run, 1.0)))
        if runs < 1:
            notes.append(f"Monte-Carlo skipped: one run would simulate ~{per_run:,.0f} segments "
                         f"(cap {MC_MAX_ITERATIONS:,.0f}); lengthen the interval or rely on the closed form")
            runs = 0
        else:
            if runs < opts.mc_runs:
                notes.append(f"Monte-Carlo runs lowered from {opts.mc_runs} to {runs} to stay under "
                             f"{MC_MAX_ITERATIONS:,.0f} simulated segments")
            mc = rel.simulate_goodput(tt.wall_s, interval, ck.pause_s, opts.restart_s, mtbf, runs=runs, seed=opts.mc_seed)

    b = Budget(
        total_flops=flops, mfu=_out(mfu), peak_flops=peak_flops, time=tt,
        energy=en, cost=cost, shards=shards, storage_Bps=storage, ckpt=ck, failures_per_gpu_s=rate, mtbf_s=mtbf,
        young_s=young, daly_s=_out(daly), interval_s=interval, interval_rule=rule, closed=closed,
        closed_daly=closed_daly, effective_energy=eff_energy, effective_cost=eff_cost, mc=mc, mc_runs=runs,
        notes=notes,
    )
    return b, {"failure_rate": rate_src, "checkpoint_bandwidth": storage_src}


# ---------------------------------------------------------------- one plan, as JSON
def _f(x):
    return None if x is None else float(x)


def precision_name(plan: PlanArrays) -> str:
    return {v: k for k, v in PRECISION_CODES.items()}[int(plan.precision)]


def plan_budget(settings: Settings, plan: PlanArrays, opts: BudgetOptions, est: Estimate | None = None) -> dict:
    """Evaluate one resolved plan and return the budget's stable JSON object."""
    if settings.tokens is None:
        raise PlannerError("no training tokens given", "pass --tokens, e.g. 15e12 or 15T, or set `tokens:` in the job YAML")
    est = est if est is not None else evaluate(settings, plan)
    ex = to_json(settings, plan, est)
    thr = ex["throughput"]
    precision = precision_name(plan)
    peak = settings.hardware.peak_flops(precision)
    mfu = opts.mfu if opts.mfu is not None else thr["mfu_6n"]
    if opts.mfu is None and "training_days_ramp" in thr:
        # a batch ramp (explain.batch_ramp): the run's 6N MFU is the last batch's scaled by its time over the
        # ramp's, so that the wall time is the phases' steps x their step times
        mfu = thr["mfu_6n"] * thr["training_days"] / thr["training_days_ramp"]
    shards = checkpoint_shards(settings, plan, est)
    # 6N on the parameters a token passes through: the active ones of an MoE model (planner/moe.py),
    # and each multi-token prediction module's with the output layer it runs again: the N of the
    # step model's MFU (compute._dense_params), so that the days are steps x step time
    from .compute import _dense_params
    from .params import count_params

    n = ex["params"].get("active", ex["params"]["total"]) + _dense_params(settings.model) - count_params(settings.model).active
    b, src = compute_budget(n_params=n, tokens=settings.tokens, n_gpus=settings.gpus,
                            peak_flops=peak, mfu=mfu, tdp_W=settings.hardware.tdp_W, shards=shards, opts=opts)
    return budget_json(settings, plan, ex, b, src, opts)


NO_FIT = "the plan does not fit"  # the start of budget_json's warning (cli/budget.py adds the way to a plan that fits)


def budget_json(settings: Settings, plan: PlanArrays, ex: dict, b: Budget, src: dict, opts: BudgetOptions) -> dict:
    thr = ex["throughput"]
    sz = b.shards.size
    warnings = []
    if not ex["memory"]["fits"]:
        warnings.append(
            f"{NO_FIT}: {ex['memory']['total_bytes'] / 1e9:,.1f} GB per GPU against "
            f"{ex['memory']['usable_bytes'] / 1e9:,.1f} GB usable ({ex['memory']['total_bytes'] / ex['memory']['usable_bytes']:.0%} "
            "of it; `planner explain` with the same options shows where the memory goes)"
        )
    mc = b.mc
    return {
        # explain's list (explain.assumed_lines); a trainer config's lines and block follow (cli/budget.py, with_config)
        **({"assumed": assumed} if (assumed := assumed_lines(settings, plan) + checkpoint_assumed(settings)) else {}),
        "plan": plan_dict(plan, settings),
        "params": ex["params"]["total"],
        "fits": bool(ex["memory"]["fits"]),
        "training": {
            "tokens": float(settings.tokens),
            "total_flops_6n": float(b.total_flops),
            "flops_convention": "6N per token (Kaplan et al. 2020; the seed), attention not counted"
                                + ("; N = the active parameters (mixture-of-experts)" if "active" in ex["params"] else ""),
            "peak_flops": float(b.peak_flops),
            "mfu": float(b.mfu),
            "mfu_source": "--mfu" if opts.mfu is not None else (
                "step-time model, each batch-ramp phase at its own batch" if "batch_ramp" in thr else "step-time model"),
            "step_model_mfu_6n": float(thr["mfu_6n"]),
            "step_model_mfu": float(thr["mfu"]),
            "step_s": float(ex["time"]["step_s"]),
            "steps": float(thr.get("training_steps_ramp", thr["training_steps"])),
            **({"batch_ramp": thr["batch_ramp"]} if "batch_ramp" in thr else {}),
            "wall_s": float(b.time.wall_s),
            "days": float(b.time.days),
            "gpu_hours": float(b.time.gpu_hours),
            "price_per_gpu_hour": _f(opts.price_per_gpu_hour),
            "currency": opts.currency if opts.price_per_gpu_hour is not None else None,
            "cost": _f(b.cost),
            "tdp_W": float(settings.hardware.tdp_W),
            "pue": float(opts.pue),
            "energy_J": float(b.energy.total_J),
            "energy_kwh": float(b.energy.total_kwh),
        },
        "checkpoint": {
            "saved_terms": "master_weights + adam" + (" + weights" if float(sz.extra_bytes) > 0 else ""),
            "contents": checkpoint_contents(settings),
            **checkpoint_enabled(settings),
            "bytes_per_gpu": float(sz.total_bytes),
            "master_weights_bytes_per_gpu": float(sz.master_weights_bytes),
            "optimizer_bytes_per_gpu": float(sz.optimizer_bytes),
            "weights_bytes_per_gpu": float(sz.extra_bytes),
            "job_bytes": float(b.shards.job_bytes),
            "storage_Bps": float(b.storage_Bps),
            "storage_source": src["checkpoint_bandwidth"],
            "async": bool(opts.async_save),
            "host_Bps": float(opts.host_Bps),
            "write_s": float(b.ckpt.write_s),
            "copy_s": float(b.ckpt.copy_s),
            "pause_s": float(b.ckpt.pause_s),
        },
        "failures": {
            "failures_per_gpu_day": float(b.failures_per_gpu_s) * rel.SECONDS_PER_DAY,
            "source": src["failure_rate"],
            "mtbf_s": float(b.mtbf_s),
            "mtbf_hours": float(b.mtbf_s) / rel.SECONDS_PER_HOUR,
            "restart_s": float(opts.restart_s),
        },
        "interval": {
            "young_s": float(b.young_s),
            "daly_s": float(b.daly_s),
            "used_s": float(b.interval_s),
            "rule": b.interval_rule,
        },
        "goodput": {
            "closed_form": float(b.closed.goodput),
            "closed_form_daly": float(b.closed_daly.goodput),
            "expected_failures": float(b.closed.failures),
            "monte_carlo": None if mc is None else float(mc.goodput),
            "monte_carlo_std": None if mc is None else float(mc.goodput_std),
            "monte_carlo_runs": b.mc_runs,
            "monte_carlo_failures": None if mc is None else float(mc.failures),
        },
        "effective": {
            "wall_s": float(b.closed.wall_s),
            "days": float(b.closed.wall_s) / rel.SECONDS_PER_DAY,
            "gpu_hours": float(b.closed.wall_s) * settings.gpus / rel.SECONDS_PER_HOUR,
            "cost": _f(b.effective_cost),
            "energy_kwh": float(b.effective_energy.total_kwh),
            "monte_carlo_wall_s": None if mc is None else float(mc.wall_s),
            "monte_carlo_days": None if mc is None else float(mc.wall_s) / rel.SECONDS_PER_DAY,
        },
        "notes": list(b.notes),
        "warnings": warnings,
    }


# ---------------------------------------------------------------- sweep over cluster sizes
def gpu_range(part: str, option: str = "--sweep-gpus") -> list[int]:
    """'512..4096' -> [512, 1024, 2048, 4096]: the first count doubled up to the last."""
    a_text, b_text = part.split("..", 1)
    try:
        a, b = float(a_text), float(b_text)
    except ValueError:
        a = b = float("nan")
    if not (np.isfinite(a) and np.isfinite(b) and 1 <= a <= b and a == int(a) and b == int(b)):
        raise PlannerError(f"{option}: cannot read {part!r} as a range of GPU counts",
                           "write FIRST..LAST with whole numbers, FIRST <= LAST, e.g. 512..4096 (doubling)")
    if b > MAX_COUNT:  # a count the search's int64 arithmetic holds (schema.MAX_COUNT)
        raise PlannerError(f"{option}: {part!r} goes beyond {MAX_COUNT} GPUs",
                           f"write GPU counts from 1 to {MAX_COUNT}, e.g. 512..4096 (doubling)")
    out, g = [], int(a)
    while g <= b:
        out.append(g)
        g *= 2
    return out


def parse_gpu_list(text: str, option: str = "--sweep-gpus", warn: Callable[[str], None] | None = None) -> list[int]:
    """'1024,2048,4096' -> [1024, 2048, 4096] (ints > 0, no repeats); 'A..B' doubles A up to
    B ('512..4096' -> 512, 1024, 2048, 4096). One number written with thousands separators
    ('1,024') is refused; a list that could be one ('64,128,256') is read as a list and
    warn(message) is told so, once the list has parsed (units.refuse_thousands_separator)."""
    from .units import refuse_repeat, refuse_thousands_separator

    note = refuse_thousands_separator(text, option)
    out: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        if ".." in part:
            for g in gpu_range(part, option):
                refuse_repeat(g, out, option)
                out.append(g)
            continue
        try:
            g = float(part)
        except ValueError:
            g = float("nan")
        if not (np.isfinite(g) and g >= 1 and g == int(g)):
            raise PlannerError(f"{option}: cannot read {part!r} as a GPU count", "write positive integers separated by commas, e.g. 1024,2048,4096")
        if g > MAX_COUNT:  # before: accepted, then an OverflowError traceback in the sweep's int64 arrays (audit 2026-12-07)
            raise PlannerError(f"{option}: {part!r} is more than {MAX_COUNT} GPUs",
                               f"write GPU counts from 1 to {MAX_COUNT}, separated by commas, e.g. 1024,2048,4096")
        refuse_repeat(int(g), out, option)
        out.append(int(g))
    if not out:
        raise PlannerError(f"{option} is empty", "write GPU counts separated by commas, e.g. 1024,2048,4096")
    if note and warn is not None:
        warn(note)
    return out


# a --sweep-gpus row's keys (a count left out has them all null but gpus, skipped and hint)
SWEEP_COLUMNS = ("gpus", "tp", "cp", "pp", "dp", "microbatches_per_step", "fits", "mfu", "step_s", "days", "gpu_hours",
                 "cost", "currency", "energy_kwh", "checkpoint_bytes_per_gpu", "pause_s", "mtbf_hours", "interval_s",
                 "goodput", "effective_days", "effective_gpu_hours", "effective_cost", "skipped", "hint")


def sweep(job: Job, gpu_counts: list[int], opts: BudgetOptions, where: str = "", progress=None) -> list[dict]:
    """Re-resolve the plan at each GPU count with dp derived (tp, cp, pp and the global batch
    fixed), evaluate it and return one flat row per count. A job MTBF (opts.job_mtbf_s) is
    taken at the job's own GPU count and scaled as a per-GPU rate. The Monte-Carlo runs only
    for the single-plan budget; rows carry the closed-form goodput. A count the plan cannot run at
    is a row with `skipped` (the reason) and `hint`, every figure None; the caller refuses a sweep
    in which every count is skipped. progress(done, total, gpus): called after each count."""
    o = BudgetOptions(**{**opts.__dict__, "mc_runs": 0, "mtbf_gpus": opts.mtbf_gpus or job.gpus})
    o.check()
    rows = []
    for g in gpu_counts:
        try:
            settings, plan, warnings = resolve(job.model_copy(update={"gpus": g, "dp": None}), where)
        except PlannerError as e:
            # a count the plan cannot run at (the mesh or the batch does not divide it, a start-up rule): left out,
            # its row says why (every figure null), the others priced; the command refuses the sweep only when no
            # count runs (before 2026-12-07 one such count failed the whole sweep, exit 2)
            rows.append({**dict.fromkeys(SWEEP_COLUMNS), "gpus": g, "skipped": e.message, "hint": e.hint})
            if progress is not None:
                progress(len(rows), len(gpu_counts), g)
            continue
        js = plan_budget(settings, plan, o)
        p, t, ck, fl, gp, ef = (js[k] for k in ("plan", "training", "checkpoint", "failures", "goodput", "effective"))
        rows.append({
            "gpus": g, "tp": p["tp"], "cp": p["cp"], "pp": p["pp"], "dp": p["dp"],
            "microbatches_per_step": p["microbatches_per_step"], "fits": js["fits"],
            "mfu": t["mfu"], "step_s": t["step_s"], "days": t["days"], "gpu_hours": t["gpu_hours"],
            "cost": t["cost"], "currency": t["currency"], "energy_kwh": t["energy_kwh"],
            "checkpoint_bytes_per_gpu": ck["bytes_per_gpu"], "pause_s": ck["pause_s"],
            "mtbf_hours": fl["mtbf_hours"], "interval_s": js["interval"]["used_s"],
            "goodput": gp["closed_form"], "effective_days": ef["days"], "effective_gpu_hours": ef["gpu_hours"],
            "effective_cost": ef["cost"], "skipped": None, "hint": None,
        })
        if progress is not None:
            progress(len(rows), len(gpu_counts), g)
    return rows
