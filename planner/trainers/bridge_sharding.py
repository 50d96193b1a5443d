"""Megatron-Bridge's sharding modes as ConfigContainer overrides (issue 22): one table, read in both directions, and
the overrides of a mode, which the reader (megatron_bridge.py), the writer (export.py `_megatron_bridge`) and check's
suggestions (spelling.py `_bridge_knob`) share. Its own module so that spelling.py, which megatron_bridge.py imports,
need not import the reader. NVIDIA-NeMo/Megatron-Bridge @dc805f5cf, its Megatron-Core 905c0e386."""

from __future__ import annotations

# ddp.data_parallel_sharding_strategy under Megatron-FSDP -> (the stack's sharding mode, its level): Megatron-Core
# 905c0e386 distributed_data_parallel_config.py l. 82 data_parallel_sharding_strategy (default no_shard; megatron_fsdp.py
# l. 284, 668-671 read optim, optim_grads, optim_grads_params); stack_db megatron-bridge runs.sharding
MFSDP_MODES = {"optim": ("megatron_fsdp_optim", "zero1"), "optim_grads": ("megatron_fsdp_optim_grads", "zero2"),
               "optim_grads_params": ("megatron_fsdp_optim_grads_params", "fsdp")}
# HSDP: Megatron-FSDP within each of ddp.num_distributed_optimizer_instances instances (mcore_fsdp_adapter.py @905c0e386
# l. 228-300); the stack's megatron_fsdp_hsdp mode shards as optim_grads_params
HSDP_MODE, HSDP_STRATEGY = "megatron_fsdp_hsdp", "optim_grads_params"
# the other direction, which the writer and check's suggestions spell by: mode -> ddp.data_parallel_sharding_strategy
MFSDP_STRATEGY = {mode: strat for strat, (mode, _) in MFSDP_MODES.items()} | {HSDP_MODE: HSDP_STRATEGY}
# the sharding modes the writer spells, (distributed optimizer, torch FSDP2): the distributed optimizer's two flags,
# which Bridge keeps in step (training/config.py l. 1944-1966: either True sets both); Megatron-FSDP runs them as the
# recipes leave them, on
SHARDING_MODES = {"ddp": (False, False), "distributed_optimizer": (True, False), "torch_fsdp2": (False, True),
                  **{mode: (True, False) for mode in MFSDP_STRATEGY}}


def sharding_overrides(plan: dict) -> list[tuple[str, object]]:
    """The ConfigContainer overrides of the plan's sharding mode (one of SHARDING_MODES), as export's
    `_megatron_bridge` writes them and check's suggestions spell them (spelling._bridge_knob): the distributed
    optimizer's two flags; both Megatron-FSDP flags (either true turns it on: training/config.py l. 1537-1540); torch
    FSDP2 (Megatron-Core's TorchFullyShardedDataParallel, models/common/unimodal.py l. 217-222); Megatron-FSDP's
    strategy (no_shard, the default, otherwise); the checkpoint format the mode needs (torch_dist under FSDP2, the
    recipes' own, recipes/common.py l. 120, as Megatron-LM requires it with FSDP2; fsdp_dtensor, the only format
    Bridge saves or loads under Megatron-FSDP, training/config.py l. 1544-1548); the HSDP instances (dp / shard group:
    Megatron-Core 905c0e386's Megatron-FSDP shards within each and replicates across them, mcore_fsdp_adapter.py
    l. 228-300; Bridge's initialize.py l. 125), 1 otherwise. Under Muon the distributed optimizer's flags are off and
    optimizer.optimizer names the mode (muon, dist_muon), as Megatron-Core 905c0e386 builds it."""
    mode = plan["sharding_mode"]
    dist, fsdp2 = SHARDING_MODES[mode]
    strat = MFSDP_STRATEGY.get(mode)
    # Muon: Megatron-Core 905c0e386 raises beside the distributed optimizer's flags ('muon with dist optimizer is not
    # supported.', optimizer/muon.py l. 192-193); its layer-wise distributed optimizer is optimizer.optimizer dist_muon
    # (training/optim.py @dc805f5cf l. 69-84), plain Muon under DDP muon (megatron_bridge.BRIDGE_OPTIMIZERS)
    muon = plan.get("optimizer", "adam") == "muon"
    rule = [("optimizer.optimizer", "dist_muon" if dist else "muon")] if muon else []
    dist = dist and not muon
    return [("ddp.use_distributed_optimizer", dist), ("optimizer.use_distributed_optimizer", dist),
            ("ddp.use_megatron_fsdp", strat is not None), ("dist.use_megatron_fsdp", strat is not None),
            ("dist.use_torch_fsdp2", fsdp2), ("ddp.data_parallel_sharding_strategy", strat or "no_shard"),
            *([("checkpoint.ckpt_format", "torch_dist")] if fsdp2 else
              [("checkpoint.ckpt_format", "fsdp_dtensor")] if strat is not None else []),
            ("ddp.num_distributed_optimizer_instances", plan["dp"] // plan["shard_group"] if mode == HSDP_MODE else 1),
            *rule]

