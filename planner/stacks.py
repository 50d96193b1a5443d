"""The software stack as data the cost functions read (stack_db/*.yaml, schema.Stack).

Units: bytes per element (KernelBytes), dimensionless speeds and fractions. Every function
takes plan fields as 0-d or 1-d int64 arrays (PlanArrays.compile, .f8r, ...) and returns
float64 arrays of the same shape, so that explain and search read a stack the same way.
There is no `if stack == ...` anywhere in a cost model: what differs between stacks is
the numbers in their catalog entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from .catalog import DEFAULT_STACK, load_stack
from .plan import FP8_RECIPES, FUSION_SWITCHES, RECIPE_PEAK, mode_index  # mode_index: plan.py's (plan reads it; stacks imports plan)
from .schema import Stack

KERNEL_FIELDS = ("norm", "norm_bwd", "residual", "residual_bwd", "rope", "rope_bwd", "mlp_activation_gated",
                 "mlp_activation_gated_bwd", "mlp_activation_plain", "mlp_activation_plain_bwd", "dropout", "dropout_bwd",
                 "bias", "loss_per_logit", "loss_saved_per_logit", "loss_pool_per_logit", "loss_saved_input_per_logit", "norm_saved_extra",
                 "loss_parallel_saved_per_logit", "loss_transient_per_logit", "loss_parallel_transient_per_logit", "rope_scaled", "rope_scaled_bwd", "activation_clamp",
                 "activation_clamp_bwd", "activation_clamp_saved", "activation_clamp_unfused_saved", "expert_bias",
                 "expert_bias_bwd", "score_softmax", "score_softmax_bwd",
                 "score_dropout", "score_dropout_bwd", "score_softmax_max_keys", "score_softmax_unfused",
                 "score_softmax_unfused_bwd", "score_softmax_unfused_16bit", "score_softmax_unfused_16bit_bwd",
                 "mlp_activation_gated_unfused",
                 "mlp_activation_gated_unfused_bwd", "mlp_activation_gated_unfused_saved", "bias_unfused", "wgrad_unfused",
                 "expert_probs_unfused", "expert_probs_unfused_bwd", "expert_probs_unfused_saved")
# the loss's figures: torchtitan compiles the loss on its own (components/loss.py, compile.components "loss"),
# whether or not the model's code compiles its blocks (kernel_bytes)
LOSS_FIELDS = ("loss_per_logit", "loss_saved_per_logit", "loss_pool_per_logit", "loss_saved_input_per_logit",
               "loss_parallel_saved_per_logit",
               "loss_transient_per_logit", "loss_parallel_transient_per_logit")
UNFUSED_FIELDS = ("mlp_activation_gated_unfused", "mlp_activation_gated_unfused_bwd", "mlp_activation_gated_unfused_saved",
                  "bias_unfused", "wgrad_unfused", "expert_probs_unfused", "expert_probs_unfused_bwd",
                  "expert_probs_unfused_saved")


@lru_cache(maxsize=1)
def default_stack() -> Stack:
    return load_stack(DEFAULT_STACK)


def stack_of(settings) -> Stack:
    """The settings' stack (hand-built test settings without one get the default)."""
    return settings.stack if getattr(settings, "stack", None) is not None else default_stack()


def kernel_bytes(stack: Stack, compile_, settings=None) -> dict[str, np.ndarray]:
    """Bytes per element of each memory-bound kernel: the compiled figures where the plan
    compiles (torch.compile), the stack's default kernels elsewhere; the layers' kernels eager
    with compile on where the model's code compiles no block (Settings.code_compiles_blocks:
    torchtitan @e347b1e5e's gpt_oss), the loss's (LOSS_FIELDS) compiled as the plan says. And,
    from the settings' fusion switches (job settings, not searched), FUSION_SWITCHES' keys: 1.0
    where the job runs the unfused path (the layers add its figures: planner/layers/ unfused_bytes); softmax_16bit:
    1.0 where the job's attention_softmax_in_fp32 is false (compute.eager_core_terms)."""
    loss_on = np.asarray(compile_) > 0
    blocks = settings is None or getattr(settings, "code_compiles_blocks", True)
    comp = stack.compiled_kernels or stack.kernels
    off = {key: np.float64(0.0 if settings is None or getattr(settings, name, True) else 1.0)
           for name, key in FUSION_SWITCHES.items()}
    # the job's attention_softmax_in_fp32 false: the eager core's unfused softmax in the 16-bit dtype (compute.py
    # eager_core_terms: kernels score_softmax_unfused_16bit(_bwd)); a job setting, not searched
    fp32 = settings is None or getattr(settings, "attention_softmax_in_fp32", True)
    off["softmax_16bit"] = np.float64(0.0 if fp32 else 1.0)
    out = {}
    # the plans' compile column reduced once, not once per field (41 fields: ~0.35 ms a call on 10^5 plans, 51 calls
    # in a DeepSeek-V3 fit); a field the compile does not reach is off on every plan (np.zeros: any() False, all()
    # True only where there are no plans)
    loss_any, loss_all, none_all = bool(loss_on.any()), bool(loss_on.all()), loss_on.size == 0
    for f in KERNEL_FIELDS:
        reached = f in LOSS_FIELDS or blocks
        on_any, on_all = (loss_any, loss_all) if reached else (False, none_all)
        if not on_any or on_all:  # one value for every plan (the search's common case): scalars broadcast
            out[f] = np.float64(_field(comp if on_all else stack.kernels, f))
        else:  # (reached: the other case has no plan on)
            out[f] = np.where(loss_on, _field(comp, f), _field(stack.kernels, f))
    return {**out, **off}


def _field(kernels, f: str) -> float:
    """A KernelBytes figure; loss_parallel_saved_per_logit null: the loss holds the same under TP
    (loss_parallel_transient_per_logit null: its transient is the same, loss_transient_per_logit);
    rope_scaled(_bwd) null: the rotary kernel's own figure (it takes the cos/sin factor); the eager
    score kernels null: NaN (the stack describes no eager core attention; plan.py refuses such a job),
    but score_softmax_max_keys null: inf (the fused softmax at every length), score_softmax_unfused_16bit(_bwd) null:
    score_softmax_unfused(_bwd)'s figure."""
    v = getattr(kernels, f)
    if v is None and f.startswith("rope_scaled"):  # null: the stack's rotary kernel takes the factor
        return float(getattr(kernels, "rope" + f[len("rope_scaled"):]))
    if v is None and f == "score_softmax_max_keys":  # null: the fused kernel at every length
        return float("inf")
    if v is None and f.startswith("score_softmax_unfused_16bit"):  # null: the fp32 path's figures (score_softmax_unfused)
        return _field(kernels, "score_softmax_unfused" + f[len("score_softmax_unfused_16bit"):])
    if v is None and f.startswith("score_"):
        return float("nan")
    if v is None and f in UNFUSED_FIELDS:  # null: the stack has no such switch (plan.py refuses a job that sets it)
        return 0.0
    if v is None and f == "loss_parallel_transient_per_logit":
        return float(kernels.loss_transient_per_logit)
    return float(kernels.loss_saved_per_logit if v is None else v)


def _recipe_column(stack: Stack, attr: str, missing: float) -> np.ndarray:
    return np.array([float(getattr(stack.fp8_recipes[n], attr)) if n in stack.fp8_recipes else missing
                     for n in FP8_RECIPES], dtype=np.float64)


def _dpa_column(stack: Stack, attr: str, none: float = 2.0) -> np.ndarray:
    """A recipe's fp8 attention figure (FP8Attention `attr`) per recipe code; `none` (2 B, bf16) where it has none."""
    specs = [stack.fp8_recipes[n].fp8_attention if n in stack.fp8_recipes else None for n in FP8_RECIPES]
    return np.array([float(getattr(f, attr)) if f is not None else none for f in specs], dtype=np.float64)


# the TP collectives of a layer's linear pair a recipe's tp_collective_bytes prices (schema.TPCollectiveBytes)
TP_COLLECTIVES = ("input_all_gather", "output_reduce_scatter", "grad_output_all_gather", "grad_input_reduce_scatter")


def _tp_column(stack: Stack, attr: str, none=None) -> np.ndarray:
    """A recipe's TP collective figure (TPCollectiveBytes `attr`) per recipe code; `none` (None: ACT_BYTES, 2 B,
    bf16) where the recipe has no table, or the stack lacks the recipe."""
    from .layers.common import ACT_BYTES

    none = ACT_BYTES if none is None else none
    specs = [stack.fp8_recipes[n].tp_collective_bytes if n in stack.fp8_recipes else None for n in FP8_RECIPES]
    return np.array([float(getattr(t, attr)) if t is not None else none for t in specs], dtype=np.float64)


def _amax_column(stack: Stack, attr: str) -> np.ndarray:
    """A recipe's amax_reduction figure (schema.AmaxReduction `attr`) per recipe code; 0 where the recipe has none."""
    specs = [stack.fp8_recipes[n].amax_reduction if n in stack.fp8_recipes else None for n in FP8_RECIPES]
    return np.array([float(getattr(a, attr)) if a is not None else 0.0 for a in specs], dtype=np.float64)


def fp8_recipe(stack: Stack, code, hw=None) -> dict[str, np.ndarray]:
    """The figures of the low-precision recipe `code` (plan.FP8_RECIPE_CODES) on this stack:
    GEMM speed relative to the precision's plateau (times, with `hw`, the recipe's dense peak
    over the fp8 one: MXFP8 vs FP8 tensor-core rate), cast bytes per GEMM input element,
    whether FSDP gathers fp8 weights, whether the output layer stays bf16, and the share of
    the forward (fprop) and backward (dgrad, wgrad) GEMMs run at the low rate. A recipe the
    stack lacks gets neutral figures (resolve refuses it before any cost is computed)."""
    code = np.asarray(code, dtype=np.int64)
    peak_ratio = np.ones(len(FP8_RECIPES))
    if hw is not None and hw.fp8_TFLOPS and hw.mxfp8_TFLOPS:
        peak_ratio = np.array([hw.mxfp8_TFLOPS / hw.fp8_TFLOPS if RECIPE_PEAK[n] == "mxfp8" else 1.0 for n in FP8_RECIPES])
    return _RecipeFigures(_recipe_tables(stack), code, peak_ratio)


class _RecipeFigures(Mapping):
    """fp8_recipe's figures of the codes `code`, each indexed from its per-stack column (_recipe_tables) when
    first read (a caller reads one to five of them): the column at the codes, gemm_speed times the peak
    ratio at the codes, grouped_speed times it at the grouped recipe's codes (_grouped_figures' numbers)."""

    def __init__(self, tables: dict, code: np.ndarray, peak_ratio: np.ndarray):
        self._t, self._code, self._peak, self._got = tables, code, peak_ratio, {}

    def __getitem__(self, k: str):
        if k not in self._got:
            col, c = self._t[k], self._code  # (KeyError for an unknown figure, as the dict gave)
            if k == "gemm_speed":
                self._got[k] = col[c] * self._peak[c]
            elif k == "grouped_speed":  # the grouped recipe's speed at its own peak ratio
                self._got[k] = col[c] * self._peak[self._t["_grouped_codes"]][c]
            else:
                self._got[k] = col[c]
        return self._got[k]

    def __iter__(self):
        return (k for k in self._t if not k.startswith("_"))

    def __len__(self) -> int:
        return sum(1 for _ in self)


# id(stack) -> (stack, fp8_recipe's columns per recipe code): a step_time or memory_total call reads
# fp8_recipe a few times, and a search calls them a few dozen times on the same stack (stacks are frozen
# pydantic models; each entry holds its stack, so that its id is not reused while it is kept)
_RECIPE_TABLES: dict = {}


def _recipe_tables(stack: Stack) -> dict[str, np.ndarray]:
    """fp8_recipe's figures per recipe code (precisions.FP8_RECIPES) on this stack, built once per stack: each
    figure's column, indexed by the plans' codes (the grouped GEMMs' columns composed with _grouped_codes:
    column[grouped[code]] = (column[grouped])[code], _grouped_figures' numbers)."""
    hit = _RECIPE_TABLES.get(id(stack))
    if hit is not None and hit[0] is stack:
        return hit[1]
    gemms = [stack.fp8_recipes[n].gemms if n in stack.fp8_recipes else ["fprop", "dgrad", "wgrad"] for n in FP8_RECIPES]
    speed, cast = _recipe_column(stack, "gemm_speed", 1.0), _recipe_column(stack, "cast_bytes_per_element", 0.0)
    low_fwd = np.array([float("fprop" in g) for g in gemms])
    low_bwd = np.array([(("dgrad" in g) + ("wgrad" in g)) / 2.0 for g in gemms])
    g = _grouped_codes(stack)
    bf16_align = float(stack.memory.moe_token_group_align)
    tables = {
        "gemm_speed": speed,
        "cast_bytes": cast,
        "allgather_fp8": _recipe_column(stack, "allgather_fp8", 0.0) > 0,
        "output_layer_bf16": _recipe_column(stack, "output_layer_bf16", 1.0) > 0,
        # the fp8 fused attention's saved q, k, v and output, bytes an element (memory.py [fa8]; bf16 where none)
        "dpa_qkv": _dpa_column(stack, "qkv_saved_bytes"),
        # under CP > 1, the q, k, v TE's context-parallel attention saves itself (P2P ring, all-gather: MXFP8's bf16)
        "dpa_qkv_cp": _dpa_column(stack, "cp_qkv_saved_bytes"),
        "dpa_out": _dpa_column(stack, "out_saved_bytes"),
        # TE's P2P context-parallel ring under the recipe's fp8 attention (memory.py [cp3]; bf16 figures where none)
        "cp_ring_kv": _dpa_column(stack, "cp_ring_kv_bytes"),
        "cp_ring_dkv": _dpa_column(stack, "cp_ring_dkv_bytes"),
        "cp_merge_out": _dpa_column(stack, "cp_merge_out_bytes", 0.0),
        "cp_inputs_bf16": _dpa_column(stack, "cp_inputs_bf16_bytes", 0.0),
        "low_fwd": low_fwd,
        "low_bwd": low_bwd,
        # each TP collective's bytes an element under SP (tp_collective_bytes, step.py [33]; bf16 where none)
        **{f"tp_{k}": _tp_column(stack, k) for k in TP_COLLECTIVES},
        "tp_amax": _tp_column(stack, "amax_all_reduce_bytes", 0.0),
        # torchao float8's per-cast amax all-reduce over TP on a sharded DTensor (step.py [39]; 0 where none)
        "dt_amax": np.array([float(stack.fp8_recipes[n].dtensor_amax_bytes) if n in stack.fp8_recipes else 0.0
                             for n in FP8_RECIPES], dtype=np.float64),
        "fsdp_amax": np.array([float(stack.fp8_recipes[n].fsdp_amax_bytes) if n in stack.fp8_recipes else 0.0
                               for n in FP8_RECIPES], dtype=np.float64),
        "f8_tp_styles": np.array([bool(stack.fp8_recipes[n].float8_tp_styles) if n in stack.fp8_recipes else False
                                  for n in FP8_RECIPES]),
        # delayed scaling's per-region amax buffer all-reduce (amax_reduction, step.py [34]; 0 where none)
        **{f"amax_{k}": _amax_column(stack, a) for k, a in (("fwd", "forward_bytes_per_gemm"),
                                                            ("bwd", "backward_bytes_per_gemm"),
                                                            ("regions", "regions_per_chunk"))},
        # the routed experts' grouped GEMMs run converted (_grouped_figures, step.py [16])
        "grouped_speed": speed[g],
        "grouped_cast_bytes": cast[g],
        "grouped_low_fwd": low_fwd[g],
        "grouped_low_bwd": low_bwd[g],
        "grouped_align": np.array([float(stack.fp8_recipes[n].grouped_experts_align or bf16_align)
                                   if n in stack.fp8_recipes else bf16_align for n in FP8_RECIPES]),
        "_grouped_codes": g,
    }
    if len(_RECIPE_TABLES) >= 64:  # a handful of stacks in a process; tests build many
        _RECIPE_TABLES.clear()
    _RECIPE_TABLES[id(stack)] = (stack, tables)
    return tables


def _grouped_codes(stack: Stack) -> np.ndarray:
    """Per recipe code, the code of the recipe whose figures price the routed experts' grouped GEMMs
    where they run converted under it (fp8_recipes grouped_experts_recipe; itself where null or absent)."""
    from .plan import FP8_RECIPE_CODES

    return np.array([FP8_RECIPE_CODES[stack.fp8_recipes[n].grouped_experts_recipe or n] if n in stack.fp8_recipes else c
                     for c, n in enumerate(FP8_RECIPES)], dtype=np.int64)


def _grouped_figures(stack: Stack, code, peak_ratio, gemms) -> dict:
    """fp8_recipe's figures of the routed experts' grouped GEMMs run converted (step.py [16]): the
    grouped_experts_recipe's GEMM speed, cast bytes and low-precision shares (torchtitan's float8
    grouped converter: rowwise under every float8 linear recipe), and the rows each local expert's
    token group is padded to a multiple of (grouped_experts_align, else memory.moe_token_group_align;
    layers/moe.py [12])."""
    g = _grouped_codes(stack)[code]
    bf16_align = float(stack.memory.moe_token_group_align)
    align = np.array([float(stack.fp8_recipes[n].grouped_experts_align or bf16_align) if n in stack.fp8_recipes
                      else bf16_align for n in FP8_RECIPES])
    return {
        "grouped_speed": _recipe_column(stack, "gemm_speed", 1.0)[g] * peak_ratio[g],
        "grouped_cast_bytes": _recipe_column(stack, "cast_bytes_per_element", 0.0)[g],
        "grouped_low_fwd": np.array([float("fprop" in x) for x in gemms])[g],
        "grouped_low_bwd": np.array([(("dgrad" in x) + ("wgrad" in x)) / 2.0 for x in gemms])[g],
        "grouped_align": align[code],
    }


def token_group_align(stack: Stack, plan) -> np.ndarray:
    """The rows each local expert's token group is padded to a multiple of (layers/moe.py [12]), per plan:
    the recipe's grouped_experts_align where the plan's routed experts run converted (fp8 / nvfp4 with
    plan.fge), else the stack's memory.moe_token_group_align (bf16 grouped GEMMs); 0: no padding."""
    from .plan import BF16

    bf16_align = float(stack.memory.moe_token_group_align)
    if not bf16_align and not any(r.grouped_experts_align for r in stack.fp8_recipes.values()):
        return np.zeros(np.shape(plan.tp))  # a stack that pads nothing (a stack's data, not a searched quantity)
    code = np.asarray(plan.f8r, dtype=np.int64)
    on = (np.asarray(plan.precision) != BF16) & (np.asarray(plan.fge) > 0)
    conv = _grouped_figures(stack, code, np.ones(len(FP8_RECIPES)), [["fprop"]] * len(FP8_RECIPES))["grouped_align"]
    return np.where(on, conv, bf16_align) + np.zeros(np.shape(plan.tp))


def cp_backward_moments(stack: Stack, code=None) -> list[tuple[np.ndarray, ...]] | None:
    """The moments of Transformer Engine's P2P ring backward (memory.py [cp4]), each (q fixed, q per rank,
    kv fixed, kv per rank) bytes an element: the stack's bf16 ones (memory.cp_p2p_backward) where `code` is
    None, else under fp8 attention the recipe's (fp8_attention cp_backward) per recipe code as arrays over the
    plans, a recipe's list padded with its last moment (the largest is what counts); None where the stack
    prices none."""
    bf16 = stack.memory.cp_p2p_backward
    if not bf16:
        return None
    if code is None:
        return [(m.q.fixed, m.q.per_rank, m.kv.fixed, m.kv.per_rank) for m in bf16]
    lists = [stack.fp8_recipes[n].fp8_attention.cp_backward
             if n in stack.fp8_recipes and stack.fp8_recipes[n].fp8_attention is not None else bf16 for n in FP8_RECIPES]
    depth = max(len(m) for m in lists)
    code = np.asarray(code, dtype=np.int64)
    rows = []
    for i in range(depth):
        picked = [m[min(i, len(m) - 1)] for m in lists]
        rows.append(tuple(np.array([float(getattr(getattr(m, part), f)) for m in picked])[code]
                          for part, f in (("q", "fixed"), ("q", "per_rank"), ("kv", "fixed"), ("kv", "per_rank"))))
    return rows


def _mode_column(stack: Stack, pick) -> np.ndarray | None:
    runs = stack.runs
    if runs is None:
        return None
    return np.array([pick(m) for m in runs.sharding], dtype=np.float64)


def mode_row(plan, col, absent) -> np.ndarray:
    """Each plan's value of a per-mode column (_mode_column) at its row (mode_index), or `absent` at every plan (an
    array of plan.sharding's shape) where the stack has no runs (`col` None)."""
    return np.full(np.shape(plan.sharding), absent) if col is None else col[mode_index(plan, col)]


def mode_value(stack: Stack, plan, setting: str, given: bool) -> np.ndarray:
    """The value of job setting `setting` each plan runs, a boolean array of the plan's shape: its
    sharding mode's where the mode fixes it (stack_db runs.sharding job_settings, schema.ModeSetting:
    Megatron runs --use-torch-fsdp2 without the gradient-accumulation fusion whatever the job leaves
    out), else `given`, the job's resolved setting (a job that sets the other value of a refused one
    never reaches the cost models: plan.stack_for_settings)."""
    nan = float("nan")
    col = _mode_column(stack, lambda m: next((float(x.value) for x in m.job_settings if x.setting == setting), nan))
    if col is None or bool(np.isnan(col).all()):  # a stack setting: no mode fixes it
        return np.full(np.shape(plan.tp), bool(given))
    v = col[mode_index(plan, col)]
    return np.where(np.isnan(v), bool(given), v > 0)


def outer_optim(stack: Stack, plan, on: bool) -> np.ndarray:
    """Per plan, whether its optimizer states shard over the replicas too (the job's mfsdp_outer_optim, `on`, under an
    HSDP mode stating runs.sharding outer_optim: Megatron-FSDP's --outer-dp-sharding-strategy optim, memory.py [oo]):
    a boolean array of the plan's shape; all False where the job leaves it off or the stack has no runs."""
    from .plan import HSDP

    col = _mode_column(stack, lambda m: float(m.outer_optim))
    if not on or col is None:  # a job setting, stack data
        return np.zeros(np.shape(plan.sharding), dtype=bool)
    return (col[mode_index(plan, col)] > 0) & (np.asarray(plan.sharding) == HSDP)


def mfsdp_v2(stack: Stack, plan, on: bool) -> np.ndarray:
    """Per plan, whether it runs Megatron-FSDP v2 (the job's mfsdp_v2, `on`, under a mode stating runs.sharding mfsdp_v2:
    Megatron's optim_grads_params, memory.py [v2]): a boolean array of the plan's shape; all False where the job leaves
    it off or the stack has no runs (start-up rule MEGATRON_FSDP_V2_LAYOUT refuses the job's other plans)."""
    col = _mode_column(stack, lambda m: float(m.mfsdp_v2))
    if not on or col is None:  # a job setting, stack data
        return np.zeros(np.shape(plan.sharding), dtype=bool)
    return col[mode_index(plan, col)] > 0


def sharding_traits(stack: Stack, plan) -> dict[str, np.ndarray]:
    """When the plan's sharding mode (stack_db runs.sharding[plan.smode]) moves its states,
    as boolean arrays of the plan's shape; a field the mode leaves out (schema.ShardingMode)
    takes its level's default, and FSDP's the stack's FSDPSpec:
      reduce_mb   the gradients are reduced after every micro-batch's backward (else once
                  per step): ZeRO-2 by default, FSDP per fsdp.reduce_per_microbatch;
      reshard     FSDP frees each unit's weights after its forward and re-gathers them for its
                  backward (else keeps them unsharded from the forward to the backward);
                  by default true, under PP fsdp.reshard_after_forward_with_pp;
      keep_pp     FSDP under PP without resharding: every unit stays unsharded over the step's
                  micro-batches, gathered and reduced once per step (torch.distributed.pipelining
                  turns resharding and gradient sync off until the last micro-batch's backward);
      replica_mb  HSDP's all-reduce across the replicas runs with every reduce-scatter (else
                  once per step, at the last micro-batch);
      regather_pp FSDP under PP that reshards after forward on a stack whose pipeline runtime
                  turns gradient sync and resharding after backward off (fsdp.pp_runtime_no_sync:
                  torch.distributed.pipelining): a unit is gathered for every pass whose previous
                  pass on it was a forward (resharded) and stays gathered after a backward, so a
                  step gathers it once per forward (each forward's successor on the unit) plus
                  once for its first pass, m + 1 (in units of the stage's weights: m v + v chunk
                  gathers, whatever the schedule's order, as the last pass on a chunk is a
                  backward); the gradients accumulate unsharded and are reduced once; the
                  stage's units are all gathered at the end of each backward (memory.py [7]);
      allreduce   a zero1 mode that all-reduces the whole gradients (not a reduce-scatter) and
                  all-gathers the updated weights (schema.ShardingMode.grad_allreduce: DeepSpeed's
                  BF16_Optimizer);
      accum       the mode keeps a gradient accumulation buffer beside the gradients
                  (grad_accum_bytes > 0, memory.py [bo])."""
    from .plan import FSDP, ZERO2

    fs = stack.fsdp
    level = np.asarray(plan.sharding)
    fsdp_on = level >= FSDP
    level_reduce = np.where(fsdp_on, fs.reduce_per_microbatch, level == ZERO2)
    nan = float("nan")
    col = _mode_column(stack, lambda m: nan if m.grad_reduce is None else float(m.grad_reduce == "microbatch"))
    given = mode_row(plan, col, nan)
    reduce_mb = np.where(np.isnan(given), level_reduce, given > 0)
    col = _mode_column(stack, lambda m: nan if m.reshard_after_forward is None else float(m.reshard_after_forward))
    given = mode_row(plan, col, nan)
    piped = np.asarray(plan.pp) > 1
    reshard = np.where(np.isnan(given), ~piped | fs.reshard_after_forward_with_pp, given > 0) | ~fsdp_on
    keep_pp = fsdp_on & piped & ~reshard
    regather_pp = fsdp_on & piped & reshard & bool(fs.pp_runtime_no_sync)
    col = _mode_column(stack, lambda m: float(m.replica_reduce != "step"))
    replica_mb = mode_row(plan, col, 1.0) > 0
    col = _mode_column(stack, lambda m: float(m.grad_allreduce))
    allreduce = mode_row(plan, col, 0.0) > 0
    return {"reduce_mb": reduce_mb & ~keep_pp & ~regather_pp, "reshard": reshard, "keep_pp": keep_pp,
            "replica_mb": replica_mb, "regather_pp": regather_pp, "allreduce": allreduce,
            "accum": grad_accum_bytes(stack, plan) > 0}


def grad_accum_bytes(stack: Stack | None, plan) -> np.ndarray:
    """The plan's sharding mode's gradient accumulation buffer, bytes a parameter of the stage, never sharded
    (stack_db runs.sharding grad_accum_bytes; memory.py [bo]), a float array of the plan's shape (0 where the mode,
    or the stack, keeps none)."""
    shape = np.shape(plan.sharding)
    col = None if stack is None else _mode_column(stack, lambda m: float(m.grad_accum_bytes))
    return mode_row(plan, col, 0.0) * np.ones(shape)


def main_grad_bytes(stack: Stack | None, plan, job_bytes: float, default) -> np.ndarray:
    """Bytes a main gradient that the plan's sharding mode holds and reduces: the job's gradient bytes (`job_bytes`,
    bytes_per_param.gradients) where the mode keeps its own main gradients in the job's dtype (stack_db runs.sharding
    grads_in_job_dtype: Megatron-FSDP, memory.py [mg]), else `default` (a scalar or an array of the plan's shape: the
    stack's fsdp.grad_reduce_bytes, the DDP buffer's bytes, ...), a float array of the plan's shape."""
    shape = np.shape(plan.sharding)
    col = None if stack is None else _mode_column(stack, lambda m: float(m.grads_in_job_dtype))
    if col is None or not col.any():  # stack data: no mode keeps its own
        return np.asarray(default, dtype=np.float64) * np.ones(shape)
    own = col[mode_index(plan, col)] > 0
    return np.where(own, float(job_bytes), default) * np.ones(shape)


def own_master(stack: Stack | None, plan) -> np.ndarray:
    """Where the plan's sharding mode steps its own main weights, TE's FusedAdam holding no master (stack_db
    runs.low_precision_moments.own_master_modes: Megatron-FSDP at Megatron-LM @d98e8a64), a boolean array of the plan's
    shape (false on a stack that names none)."""
    shape = np.shape(plan.sharding)
    lpm = stack.runs.low_precision_moments if stack is not None and stack.runs is not None else None
    if lpm is None or not lpm.own_master_modes:  # stack data
        return np.zeros(shape, dtype=bool)
    col = _mode_column(stack, lambda m: float(m.name in lpm.own_master_modes))
    return (col[mode_index(plan, col)] > 0) & np.ones(shape, dtype=bool)


def embedding_grad_shard(stack: Stack | None, plan, precision_aware: bool) -> tuple[np.ndarray, np.ndarray]:
    """(shard, skipped), boolean arrays of the plan's shape, for the pipeline's word-embedding gradient all-reduce
    (step.py [20]): shard where the plan's sharding mode all-reduces the rank's shard of the optimizer's gradient
    (stack_db runs.sharding embedding_grad_shard: Megatron-FSDP), skipped where it runs none at all for this job
    (embedding_grad_shard skipped_decoupled, under the job's precision-aware optimizer, `precision_aware`)."""
    shape = np.shape(plan.sharding)
    col = None if stack is None else _mode_column(stack, lambda m: float(m.embedding_grad_shard is not None))
    if col is None or not col.any():  # stack data: no mode shards it
        return np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    skip = _mode_column(stack, lambda m: float(m.embedding_grad_shard is not None and precision_aware
                                               and m.embedding_grad_shard.skipped_decoupled))
    idx = mode_index(plan, col)
    return (col[idx] > 0) & np.ones(shape, dtype=bool), (skip[idx] > 0) & np.ones(shape, dtype=bool)


def reduce_queue_units(stack: Stack | None, plan) -> np.ndarray:
    """The plan's sharding mode's reduce-scatter queue (stack_db runs.sharding reduce_queue_units: Megatron-FSDP's
    GradReducePipeline, memory.py [rs]): the average layer units its capacity is at least, a float array of the
    plan's shape, NaN where the mode (or the stack) runs no queue."""
    shape = np.shape(plan.sharding)
    nan = float("nan")
    col = None if stack is None else _mode_column(stack, lambda m: nan if m.reduce_queue_units is None else float(m.reduce_queue_units))
    return mode_row(plan, col, nan) * np.ones(shape)


def allreduce_bucket_params(stack: Stack | None, plan) -> np.ndarray:
    """The plan's sharding mode's all-reduce bucket of its gradient accumulation buffers, elements (stack_db
    runs.sharding allreduce_bucket_params; memory.py [bo]), a float array of the plan's shape (0 where the mode, or the
    stack, states none)."""
    shape = np.shape(plan.sharding)
    col = None if stack is None else _mode_column(stack, lambda m: float(m.allreduce_bucket_params))
    return mode_row(plan, col, 0.0) * np.ones(shape)


def step_grads(stack: Stack, plan) -> dict[str, np.ndarray] | None:
    """What the plan's sharding mode's optimizer step does with the gradients (stack_db runs.sharding step_grads,
    schema.StepGrads; memory.py [sg], [zb]) as float arrays of the plan's shape: flat, fp32, flat_fp32, partition_only, norm_fp64,
    ipg_buffer, fp32_decoupled's precision_aware and te_master (decoupled_precision_aware, decoupled_te_master) and the reduction's backward / after_backward as 0/1, moe_group_params in elements (0 where the mode states
    none); None where no mode of the stack states it."""
    if stack.runs is None or all(m.step_grads is None for m in stack.runs.sharding):
        return None
    smode = mode_index(plan, stack.runs.sharding)  # every column has a row a mode
    out = {f: _mode_column(stack, lambda m: float(m.step_grads is not None and getattr(m.step_grads, f)))[smode]
           for f in ("flat", "fp32", "flat_fp32", "partition_only", "norm_fp64", "ipg_buffer")}
    for d in ("precision_aware", "te_master"):  # memory.py [sg]: no fp32 copy where the optimizer reads decoupled_grad
        out[f"decoupled_{d}"] = _mode_column(stack, lambda m: float(m.step_grads is not None
                                                                     and m.step_grads.fp32_decoupled == d))[smode]
    for r in ("backward", "after_backward"):  # memory.py [zb]
        out[r] = _mode_column(stack, lambda m: float(m.step_grads is not None and m.step_grads.reduction == r))[smode]
    out["moe_group_params"] = _mode_column(
        stack, lambda m: float(m.step_grads.moe_group_params or 0.0) if m.step_grads is not None else 0.0)[smode]
    return out


def reshard_by_default(stack: Stack, plan) -> np.ndarray:
    """Where the plan's FSDP mode leaves reshard_after_forward to the stack (torchtitan's
    fsdp_reshard_after_forward "default": a mode without its own reshard_after_forward), as a
    boolean array of the plan's shape; what the root unit of torchtitan before #1094 reads
    (memory.py [tt10]: "default" keeps the last block gathered after its forward)."""
    from .plan import FSDP

    col = _mode_column(stack, lambda m: float("nan") if m.reshard_after_forward is None else 0.0)
    return np.isnan(mode_row(plan, col, np.nan)) & (np.asarray(plan.sharding) >= FSDP)


def te_loss(settings) -> bool:
    """The job runs Transformer Engine's fused cross-entropy (cross_entropy_fusion with
    cross_entropy_fusion_impl te; stack_db memory.te_loss_per_logit): a job setting."""
    return bool(settings.cross_entropy_fusion) and settings.cross_entropy_fusion_impl == "te"


def ring_ranks(spec, cp):
    """(the all-to-all group's ranks, the ring's ranks) of a context-parallel spec at cp: a2a+p2p's
    hierarchical sizes (the all-to-alls inside contiguous ranks, the ring across them:
    planner/cp_comm_type.py), else (1, cp). What step's ring pricing and memory's ring merge read."""
    sizes = spec.hierarchical_sizes if spec is not None and spec.hierarchical else None
    return (1.0, cp) if sizes is None else (float(sizes[0]), cp / float(sizes[0]))


def plan_context(settings, plan):
    """layers.context of a plan with the settings' MoE figures: the busiest EP rank's load
    (imbalance.rank_load) and, on an MoE model, the token-group alignment (token_group_align)."""
    from .imbalance import rank_load
    from .layers import context

    la, lw = lse_aligns(stack_of(settings))
    if settings.model.moe is None:  # a model property
        return context(plan, rank_load(settings, plan), 0.0, lse_align=la, lse_align_windowed=lw)
    return context(plan, rank_load(settings, plan), token_group_align(stack_of(settings), plan),
                   capacity_rows(settings, plan), lse_align=la, lse_align_windowed=lw)


def lse_aligns(stack) -> tuple:
    """(Ctx.lse_align, Ctx.lse_align_windowed) of a stack (layers/attention.py [ls2]): the multiple its fused core rounds
    a sequence's log-sum-exp rows up to for the layers without a window (memory.attention_lse_align; 0 none), and the
    one of the kernel a windowed layer runs (windowed_attention.lse_align: litgpt's dense-mask kernel; 0 elsewhere:
    a window runs in a flash kernel, llm-foundry's in flash-attn 2's, never its Triton core)."""
    wa = stack.windowed_attention
    return float(stack.memory.attention_lse_align or 0), float(wa.lse_align or 0) if wa is not None else 0.0


def capacity_rows(settings, plan) -> np.ndarray:
    """Ctx.capacity_rows of each plan of an MoE model: HybridEP's non-blocking dispatch (job moe_hybridep_capacity_factor
    f > 0; layers/moe.py [19]) allocates int(n x ep x min(E / ep, k) x f) rows for n local tokens (pytorch/torchtitan
    release/0.3 @4f9e9a47d torchtitan/distributed/deepep/hybridep.py _num_permuted_tokens_for_non_blocking l. 80-109,
    pad_multiple None: no alignment), ep x min(E / ep, k) x f a local token (the int() truncation, under one row of
    n x ep x k, left out), where the plan runs hybridep and ep > 1; 0 elsewhere (the rows routed)."""
    from .dispatch_codes import HYBRIDEP, dispatcher_rows

    f = float(settings.moe_hybridep_capacity_factor)
    if not f:  # a job setting
        return np.zeros(np.shape(plan.tp))
    moe = settings.model.moe
    ep = np.asarray(plan.ep, dtype=np.float64)
    codes, _ = dispatcher_rows(settings, plan)
    rows = ep * np.minimum(moe.num_experts / ep, float(moe.top_k)) * f
    return np.where((np.asarray(codes) == HYBRIDEP) & (ep > 1), rows, 0.0) + np.zeros(np.shape(plan.tp))
