"""Transformer Engine releases a run used, and what of TP overlap's memory each one allocates
(job field te_version, stack memory.te_version; memory.py [ub]).

Megatron-LM's --tp-comm-overlap (and NeMo's ub_tp_comm_overlap) calls Transformer Engine's
initialize_ub with one [seq x micro-batch / cp, hidden] shape. What it allocates changed twice
between the releases the published records ran (NVIDIA/TransformerEngine, read at every release
tag from v1.6 to v2.18 and at the stack's pinned 4329ff84 = 2.17.1):

  buffers     transformer_engine/pytorch/module/base.py initialize_ub, the default methods: from
              v1.6 to v2.6 ring_exchange qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; pipeline
              proj_fprop, fc2_fprop; bulk qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad: 10 buffers,
              the 6 of layers_all_gather_overlap uint8 under fp8 (fp8_buf), the 4 reduce-scatter
              ones in the activation dtype (v1.8 l. 88-103, 163-166: torch.empty(shape, dtype=uint8
              if use_fp8 and fp8_buf), csrc/comm_gemm_overlap.h l. 160-166, 637-653:
              register_user_buffer_collective of the sample's bytes; no reduce-scatter ring-exchange
              among the defaults, so no 2 t - 1 chunks). From v2.7 (077e26c31, 2025-08-09, 'Use
              userbuffers for MXFP8 wgrad all-gather overlap', #1982) the method "external" adds
              proj_wgrad and fc2_wgrad to the all-gather layers: 12 buffers, 8 all-gather
              (@4329ff84 l. 311-334).
  workspaces  the overlapped GEMMs' cuBLAS workspace, _NUM_MAX_UB_STREAMS = 3 workspaces: up to
              v2.9 initialize_ub replaces the module's one workspace with it
              (`_cublas_workspace = get_workspace().repeat(_NUM_MAX_UB_STREAMS)`, v1.8 l. 85,
              v2.9 l. 280-286: every GEMM then uses that one tensor, the plain workspace freed);
              from v2.10 (cpp_extensions/gemm.py l. 40-49 get_cublas_workspace(device, ub,
              grouped_gemm), lru_cache'd; on main since e1edaaec2, 2025-11-17, 'Reduce CPU
              overheads', #2377; base.py no longer repeats) the overlapped GEMMs' 3 workspaces are a
              tensor of their own beside the plain one (@4329ff84 gemm.py l. 42-61).

  quantizers  which quantized tensors the overlapped GEMMs' userbuffers carry (start-up rule
              MEGATRON_TP_OVERLAP_QUANTIZER): up to v2.3 each TE linear refuses a userbuffers
              overlap under any fp8 recipe but the per-tensor ones with NotImplementedError
              'Comm+GEMM overlap is only supported with FP8 delayed scaling or per-tensor current
              scaling' (v2.3 module/linear.py l. 149-155, layernorm_linear.py l. 164-170,
              layernorm_mlp.py l. 209-215: recipe.float8_per_tensor_scaling(), DelayedScaling or
              Float8CurrentScaling; v2.0-v2.1 delayed only), MXFP8BlockScaling (since v2.0)
              included. ce0b46c4d (2025-05-07, first tagged v2.4, 'MXFP8 support in Userbuffers',
              #1711) replaced that check with fill_userbuffers_buffer_for_all_gather, whose
              MXFP8Quantizer branch (v2.4 module/base.py l. 424-557, the branch l. 487) carries
              MXFP8 tensors: TE_UB_MXFP8. Float8BlockQuantizer (blockwise) and NVFP4Quantizer have
              no branch in any release read: 'Unsupported quantizer for Userbuffers' at v2.4
              l. 557, 4329ff84 (2.17.1) l. 720, v2.18 l. 730 and main d0067d0d (2026-08-22) l. 754.
              By release (TE_UB_RECIPE_FIRST): v2.0-v2.1 delayed scaling only (`not
              get_fp8_recipe().delayed()` raises 'Comm+GEMM overlap is only supported with FP8
              delayed scaling': v2.0 module/linear.py l. 120-126, v2.1 l. 130-136); v2.2-v2.3 the
              per-tensor recipes (float8_per_tensor_scaling(): v2.2 linear.py l. 134-140, v2.3
              l. 149-155); from v2.4 mxfp8 too.

  recipes     which fp8 / fp4 recipes a release builds at all (start-up rule
              MEGATRON_TE_RECIPE_RELEASE; TE_RECIPE_FIRST), read in
              transformer_engine/common/recipe/__init__.py at each tag: DelayedScaling in every
              release read (v1.13 l. 54); MXFP8BlockScaling from v2.0 (l. 165; 544dd14b4);
              Float8CurrentScaling (planner's tensorwise) from v2.2 (l. 187; 77fa1e596, #1471);
              Float8BlockScaling (blockwise) from v2.3 (l. 298; a8f0fe03b, #1559);
              NVFP4BlockScaling from v2.8 (l. 381; 3f5b47549, #2177; absent at v2.7). Megatron-LM
              @d98e8a64 builds them through megatron/core/fp8_utils.py get_fp8_recipe l. 752-810:
              below TE 2.1.0 it asserts the delayed recipe (l. 770, 798-804), so mxfp8 needs 2.1 there
              although TE 2.0 has the class; tensorwise is gated at 2.2.0.dev0 (l. 777), blockwise
              at 2.3.0.dev0 (l. 781), else ValueError (l. 792-797); nvfp4 through
              megatron/core/fp4_utils.py get_fp4_recipe l. 219-245 (ValueError below 2.7.0.dev0,
              and where the class is missing, AttributeError -> ValueError l. 223-232: so 2.8).

TE_USERBUFFERS holds the three spans: (first release, all-gather buffers, reduce-scatter buffers,
whether the overlapped GEMMs' workspaces sit beside the plain one). Releases before 1.6 are
refused (initialize_ub's lists are not read there). Versions compare as (major, minor); a patch
release changes none of these.
"""

from __future__ import annotations

from .errors import PlannerError

# (first release, all-gather userbuffers, reduce-scatter userbuffers, overlapped GEMMs' workspaces
# beside the plain one): module docstring
TE_USERBUFFERS = (
    ((1, 6), 6, 4, False),
    ((2, 7), 8, 4, False),
    ((2, 10), 8, 4, True),
)
TE_OLDEST = TE_USERBUFFERS[0][0]
# the newest release tag read (module docstring: v1.6 to v2.18); a later one is priced as the last span, with a note
TE_NEWEST_READ = (2, 18)


# the first release whose userbuffers carry each recipe's tensors under TP overlap (module docstring, quantizers);
# None: no release read does (no branch in fill_userbuffers_buffer_for_all_gather up to v2.18 / main d0067d0d); a
# recipe not listed (delayed) from the oldest release read. Tensorwise's coincides with the recipe's first release
# (TE_RECIPE_FIRST): v2.0-v2.1 refuse it only in the sense that they lack it
TE_UB_RECIPE_FIRST = {"tensorwise": (2, 2), "mxfp8": (2, 4), "blockwise": None, "nvfp4": None}
# the first release whose userbuffers all-gather MXFP8 tensors (module docstring, quantizers: ce0b46c4d, v2.4)
TE_UB_MXFP8 = TE_UB_RECIPE_FIRST["mxfp8"]

# the first release Megatron-LM @d98e8a64 builds each recipe on (module docstring, recipes: the later of the TE
# recipe class's first release and Megatron's own version gate); a recipe not listed (delayed): every release read
TE_RECIPE_FIRST = {"tensorwise": (2, 2), "mxfp8": (2, 1), "blockwise": (2, 3), "nvfp4": (2, 8)}


def recipe_missing(recipe: str, version: str | None) -> bool:
    """Whether the Transformer Engine release `version` (None: no Transformer Engine, nothing to refuse) predates
    `recipe` (TE_RECIPE_FIRST)."""
    first = TE_RECIPE_FIRST.get(recipe)
    return version is not None and first is not None and te_release(version) < first


def ub_refuses(recipe: str, version: str | None) -> bool:
    """Whether the userbuffers of release `version` refuse `recipe`'s tensors under TP overlap, the recipe being one
    the release builds (TE_UB_RECIPE_FIRST; None version: the recipes no release read carries)."""
    if recipe not in TE_UB_RECIPE_FIRST:
        return False
    first = TE_UB_RECIPE_FIRST[recipe]
    return first is None or (version is not None and te_release(version) < first)


def run_te_version(te_version: str | None, stack) -> str | None:
    """The run's Transformer Engine release: the job's te_version where it gives one, else the stack's
    memory.te_version (None: the stack runs no Transformer Engine). What memory.py [ub] prices the userbuffers at
    and start-up rule MEGATRON_TP_OVERLAP_QUANTIZER reads (the job's laid on stack defaults.te_version)."""
    return te_version or (stack.memory.te_version if stack is not None else None)


def te_release(version: str) -> tuple[int, int]:
    """(major, minor) of a MAJOR.MINOR[.PATCH] version string (the schema's pattern)."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def te_userbuffers(version: str) -> tuple[int, int, bool]:
    """(all-gather buffers, reduce-scatter buffers, workspaces beside the plain one) of the
    Transformer Engine release `version` (TE_USERBUFFERS: the last span it reaches)."""
    release = te_release(version)
    if release < TE_OLDEST:
        raise PlannerError(te_too_old(version), TE_OLDEST_HINT)
    _, ag, rs, beside = [row for row in TE_USERBUFFERS if release >= row[0]][-1]
    return ag, rs, beside


def te_too_old(version: str) -> str:
    return (f"te_version {version} is older than Transformer Engine {TE_OLDEST[0]}.{TE_OLDEST[1]}, the oldest release "
            "whose TP-overlap userbuffers the planner reads (planner/te_version.py)")


TE_OLDEST_HINT = "give te_version 1.6 or later, or leave it out (the stack's pinned release)"


def te_newer_note(version: str) -> str | None:
    """A note for a te_version past the newest release read (TE_NEWEST_READ): priced as the last span's layout."""
    if te_release(version) <= TE_NEWEST_READ:
        return None
    return (f"te_version {version} is newer than Transformer Engine {TE_NEWEST_READ[0]}.{TE_NEWEST_READ[1]}, the newest "
            "release whose TP-overlap userbuffers the planner has read (planner/te_version.py): priced as that "
            "release's (12 userbuffers, the overlapped GEMMs' workspaces beside the plain one)")
