"""Which MoE token dispatchers synchronise with the host, padded to capacity or not (job fields
moe_pad_to_capacity and moe_dispatcher: settings, not searched quantities). A leaf module (no
planner imports) so that plan.py, step.py and cuda_graphs.py read one rule without an import
cycle through dispatch.py and moe.py. The code reading is planner/dispatch.py [7]: NVIDIA/Megatron-LM
@d98e8a64 megatron/core/transformer/moe/token_dispatcher.py (alltoall preprocess l. 517-535 and
_maybe_dtoh_and_synchronize l. 921-960; hybridep l. 1113-1126, 1175-1178; allgather's .cpu() l. 320
runs padded or not) and transformer_config.py l. 1754-1761 (padding refused on DeepEP's backend)."""

from __future__ import annotations

PAD_WITHOUT_SYNC = ("alltoall", "hybridep")  # padded, these never synchronise with the host
PAD_REFUSED = ("deepep", "deepep_ll")  # Megatron refuses the padding on DeepEP's backend


def host_synced(pad_to_capacity: bool, dispatcher: str, non_blocking: bool = False) -> bool:
    """Whether the dispatcher copies the token counts to the host and synchronises each MoE
    layer forward: every dropless or dropping one; padded to capacity, all but PAD_WITHOUT_SYNC;
    HybridEP's non-blocking dispatch (job moe_hybridep_capacity_factor: `non_blocking`) never
    (pytorch/torchtitan release/0.3 @4f9e9a47d distributed/deepep/hybridep.py l. 1-20, 176-183:
    "no D2H sync is allowed", the output sized on the host from the shapes)."""
    return not ((pad_to_capacity and dispatcher in PAD_WITHOUT_SYNC) or (non_blocking and dispatcher == "hybridep"))
