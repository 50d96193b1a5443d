"""The training precisions and low-precision recipes the planner models: the ONE vocabulary
that jobs, trainer configs, run records and the CLI read (a name not here is an error that
lists these, never a fall-back to bf16).

Precisions (integer codes, so a search holds them in int64 arrays):
  bf16   16-bit GEMMs at the hardware's bf16 dense peak (fp16 runs are priced as bf16: same
         2-byte width and tensor-core peak on every hardware_db entry)
  fp8    8-bit GEMMs (e4m3 / e5m2) at the fp8 dense peak, with a scaling recipe below
  nvfp4  4-bit e2m1 GEMMs with 1x16 blocks of e4m3 scales and a per-tensor fp32 scale, at
         Blackwell's FP4 dense peak (hardware_db fp4_TFLOPS) [1][2]

Recipes (stack_db `fp8_recipes` keys; a plan holds the code, the stack the figures, the
hardware entry whether its tensor cores run them):
  delayed     per-tensor scale from an amax history (TE DelayedScaling) [3]
  tensorwise  per-tensor scale from the current amax (TE Float8CurrentScaling) [3]
  rowwise     per-row scales (torchao float8 rowwise)
  mxfp8       1x32 blocks with e8m0 (power-of-two) scales, Blackwell tensor cores only
              (TE MXFP8BlockScaling) [1][3]
  blockwise   1x128 activation / 128x128 weight blocks with fp32 scales, DeepSeek-V3 style
              (TE Float8BlockScaling; Megatron: "for Hopper only") [3][4]
  nvfp4       the nvfp4 precision's recipe (TE NVFP4BlockScaling, Megatron --fp4-recipe nvfp4) [2][3]

[1] NVIDIA Blackwell architecture technical brief (2024): 2nd-generation Transformer Engine,
    micro-tensor scaling, FP4/FP6 and the OCP MX formats; OCP Microscaling Formats (MX) v1.0
    spec (2023): MXFP8 = 32 elements sharing one E8M0 scale.
[2] NVIDIA, 'Pretraining Large Language Models with NVFP4' (arXiv:2509.25149, 2025), sec. 2:
    NVFP4 = E2M1 values, one E4M3 scale per 16 elements and one FP32 scale per tensor.
[3] NVIDIA/TransformerEngine transformer_engine/common/recipe/__init__.py @d0067d0d:
    DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling,
    NVFP4BlockScaling.
[4] NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py @d98e8a64:
    fp8_recipe Literal['tensorwise', 'delayed', 'mxfp8', 'blockwise', 'custom'], fp4 'e2m1',
    fp4_recipe Literal['nvfp4', 'custom'] ('custom': a user quantizer, not modelled); Megatron-Bridge
    src/megatron/bridge/training/mixed_precision.py (commit c0b9a0003) MixedPrecisionConfig.fp8_recipe
    comment: '"mxfp8" (for Blackwell only), "blockwise" (for Hopper only)'.
[5] NVIDIA/TransformerEngine transformer_engine/pytorch/fp8.py (TE 2.x)
    check_fp8_block_scaling_support: Float8BlockScaling runs where the compute capability is
    at least 9.0 and below 10.0, else "FP8 block scaled GEMM requires Hopper and CUDA >= 12.9."
    (fp8_autocast asserts it); Blackwell's block-scaled fp8 is MXFP8 (MXFP8BlockScaling) [3].
"""

from __future__ import annotations

from typing import Literal, Optional

from .errors import PlannerError

BF16, FP8, NVFP4 = 0, 1, 2
PRECISIONS = ("bf16", "fp8", "nvfp4")
PRECISION_CODES = {n: i for i, n in enumerate(PRECISIONS)}
PRECISION_NAMES = dict(enumerate(PRECISIONS))
Precision = Literal["bf16", "fp8", "nvfp4"]

FP8_RECIPES = ("delayed", "tensorwise", "rowwise", "mxfp8", "blockwise", "nvfp4")
FP8_RECIPE_CODES = {n: i for i, n in enumerate(FP8_RECIPES)}
# the hardware dense peak a recipe's GEMMs run at (schema.Hardware.peak_flops); the
# precision a recipe belongs to follows from it (nvfp4 -> nvfp4, the others -> fp8)
RECIPE_PEAK = {"delayed": "fp8", "tensorwise": "fp8", "rowwise": "fp8", "mxfp8": "mxfp8", "blockwise": "fp8",
               "nvfp4": "nvfp4"}
RecipePeak = Literal["fp8", "mxfp8", "nvfp4"]


# the CUDA compute capabilities (lowest, first excluded) a recipe's kernels run on, where the
# hardware entry gives its compute_capability; a recipe not listed runs wherever its peak exists
RECIPE_COMPUTE_CAPABILITY = {"blockwise": ((9, 0), (10, 0))}  # Hopper only [5]


def recipe_unsupported(recipe: str, hw) -> Optional[str]:
    """Why hardware `hw` cannot run `recipe` (no tensor-core peak for it, or a compute
    capability outside RECIPE_COMPUTE_CAPABILITY), None where it can."""
    peak = RECIPE_PEAK[recipe]
    if peak not in hw.precisions():
        return f"hardware {hw.name!r} has no {peak} tensor-core peak"
    span, cc = RECIPE_COMPUTE_CAPABILITY.get(recipe), hw.capability
    if span is not None and cc is not None and not (span[0] <= cc < span[1]):
        return (f"fp8 recipe {recipe} runs on compute capability {span[0][0]}.{span[0][1]} up to below "
                f"{span[1][0]}.{span[1][1]} (Hopper), not on {hw.name} ({hw.compute_capability}): Transformer Engine's "
                f"check_fp8_block_scaling_support ('FP8 block scaled GEMM requires Hopper'); Blackwell's block-scaled fp8 "
                f"is mxfp8")
    return None


def recipe_precision(recipe: str) -> str:
    return "nvfp4" if RECIPE_PEAK[recipe] == "nvfp4" else "fp8"


def check_precision(name, where: str = "") -> str:
    """`name` if it is a precision the planner models, else an error listing them."""
    s = str(name).strip().lower()
    if s not in PRECISION_CODES:
        raise PlannerError(f"{where}precision {name!r} is not modelled",
                           f"valid: {', '.join(PRECISIONS)} (fp8 recipes: {', '.join(r for r in FP8_RECIPES if r != 'nvfp4')})")
    return s


# fp16 runs are priced as bf16 (a run record's precision_assumed, validate.py rule 7; schema.Job.fp16): the same
# 2-byte width and dense tensor-core peak. Before the 2026-12-07 audit4 validate.py rule 7 (and memory_rows.py M7
# until audit3) read run records' free-text precision by its leading term (PRECISION_TERMS, parse_precision_text);
# the records carry what that gave as explicit precision / fp8_recipe fields now.
SAME_PEAK = "fp16 and bf16 share the dense tensor-core peak on A100/H100 (hardware_db datasheet figures)"
