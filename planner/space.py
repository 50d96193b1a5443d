"""The search space of `planner fit`: every candidate plan as 1-d int64 arrays, and the
constraint check of `plan.resolve`, vectorized. Units: counts (degrees, sequences, tokens,
GPUs); nothing here computes a cost.

A candidate is one value of each axis (below). The space is built level by level with
array operations (a parent table, a boolean "which choices this row allows" matrix, and
`np.nonzero` to list the (row, choice) pairs), never with a Python loop over candidates.

Axes and their choice lists (an option such as `--tp 8` or `--max-pp 16` replaces or bounds a
list; a pinned value is taken as given, and the constraint check then says if it breaks a rule):
  tp         divisors of the hardware's NVLink domain (TP inside one NVLink domain [1] sec. 3.3)
  cp         divisors of the sequence length (each CP rank holds seq/cp tokens [2])
  pp         1 .. num_layers (uneven stages are allowed: the heaviest holds ceil(L/(pp vpp))
             layers per chunk, pipeline.layers_on_heaviest_stage)
             A mesh (tp, cp, pp) whose product does not divide the GPU count has no dp; it
             counts as one candidate that breaks a constraint and is not expanded further.
  dp         derived: gpus / (tp cp pp)
  ep         expert parallelism (MoE models): divisors of the routed experts; 1 for a dense model
  etp        expert tensor parallelism (MoE models, on a stack with its own expert TP: stack_db
             runs.expert_tensor_parallel): divisors of the NVLink domain (as tp), with etp x ep
             dividing tp*dp*cp (Megatron's folded expert grid, planner/moe.py); elsewhere tp
  vpp        1 when pp = 1 (no pipeline, no virtual stages); else 1 .. floor((L + e) / pp), e the end
             units the stack counts as layers (torchtitan: the embedding and the output, input_weight /
             output_weight 1 each by default; 0 elsewhere), e.g. vpp 17 at pp 2 for 32 layers
             (pp, vpp) such that pp*vpp chunks of ceil(L/(pp vpp)) layers hold at most
             `--max-layer-slack` (default 2) layers more than the model: an even split, or
             the first and the last stage one layer lighter each, as Llama 3 405B's 126
             layers on 16 stages of 8 ([4] sec. 3.3.2; those stages also hold the embedding
             and the output layer). Pinned pp or vpp values are filtered the same way.
  placement  where the layers a split leaves over go (first / last stage layers), on a stack with
             pipeline_stage_layers (Megatron's --decoder-first/last-pipeline-num-layers) at vpp 1:
             the stack's trim, or all of them off the first or the last stage (stage_placements)
  schedule   by default derived from vpp: 1f1b for vpp = 1, interleaved 1F1B for vpp >= 2;
             `--schedule` lists schedules to cross with vpp instead
  micro_batch  divisors of the global batch (sequences)
  sequence_parallel  on and off when tp > 1, off when tp = 1 (SP splits across TP ranks [3]); on a stack
             whose code has none (stack_db runs.sequence_parallel) start-up rule STACK_SEQUENCE_PARALLEL
             counts the SP-on candidates
  sharding   none, zero1, zero2, fsdp, and hsdp with every shard group s that divides dp,
             2 <= s < dp (s = dp is fsdp, and s = 1 keeps a full copy per rank like no
             sharding while paying FSDP's traffic: neither is a separate candidate, except
             s = 1 on a stack whose trainer runs FSDP over one rank, runs.fsdp_one_rank:
             torchtitan 0.3.0's replicate-only mesh); on a
             stack that lists its modes (stack_db runs.sharding) one candidate per mode
             priced distinctly (mode_heads: torchtitan's fsdp2 and fsdp2_no_reshard without
             PP; Megatron-FSDP optim is the distributed optimizer's candidate, and with fp32
             gradients optim_grads_params --use-torch-fsdp2's)
  recompute  none, selective, full; those the stack's code lacks (stack_db runs.recompute) dropped after
             the base rows, counted under start-up rule STACK_RECOMPUTE (_recompute_runnable)
  rank order by default the arrangements of the mesh axes that keep TP innermost ([4] sec.
             3.3.2: TP innermost, on NVLink); `all`: all 24. Arrangements that differ only in
             where a size-1 axis sits give the same strides to every axis that communicates,
             hence the same plan: only the first (lowest code, comm.ORDER_CODES) is kept.

Constraints (`constraint_codes`), in the order `plan.resolve` checks them and with its rules:
  MESH            tp*cp*pp*dp == gpus
  BATCH           global batch % (dp * micro_batch) == 0
  HEADS           heads % tp == 0
  KV_HEADS        kv_heads % tp == 0 or tp % kv_heads == 0
  SEQ_CP          seq % cp == 0
  PP_LAYERS       pp <= num_layers
  VPP_SCHEDULE    vpp > 1 only with the interleaved schedule
  INTERLEAVED_PP  interleaved needs pp >= 2 and vpp >= 2
  INTERLEAVED_M   interleaved needs micro-batches per step % pp == 0 (Megatron-LM; with the job's
                  microbatch_group N: N in [pp, m] and m % N 0 or >= pp; torch's: m % max(1,
                  m // pp) == 0; none on a stack whose schedule runs any count: stack_db runs.schedules)
  VPP_LAYERS      interleaved needs pp*vpp <= num_layers
  TP_OVERLAP_SP   TP-communication overlap (a setting) needs sequence parallelism
  SP_TP           sequence parallel needs tp > 1
  HSDP_SHARD      hsdp: shard group divides dp
  SHARD_NOT_HSDP  a shard group other than dp only with hsdp
  EP_EXPERTS      ep divides the routed experts (1 without experts)
  EP_DPCP         etp*ep divides tp*dp*cp (hsdp: tp*shard_group*cp)
tests/test_search.py checks that resolve raises exactly where a code is not OK, with the
message of that rule, on candidates built to break every rule. With a batch ramp (the job's
batch_size_schedule) BATCH and INTERLEAVED_M are checked at every phase's batch too, the
micro-batch and DP fixed (_phase_codes: Megatron-LM checks each phase as it starts,
planner/batch_ramp.py), a break counted under (phase, code).

The rules up to VPP_LAYERS read only the mesh, the pipeline split and the micro-batch, so they
are checked before SP and sharding are crossed in: a row that breaks one is counted with its
multiplicity (SP choices x sharding options x recompute x rank orders) and not expanded; a (mesh,
split, micro-batch) whose dp x micro-batch does not divide the batch (BATCH, the first rule after MESH)
is counted so before the micro-batch is crossed in, and is not listed at all. batch_divides asks
the same of the meshes alone (search.nearest_working, before building a space per try).
Counts are exact: `considered` = every candidate = broken + valid (tests/test_search.py
compares them with a plain loop over the same space).

References
[1] Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM", sec. 3.3 (tensor parallelism up to the GPUs of one server).
[2] Liu et al. 2023, "Ring Attention with Blockwise Transformers" (context parallelism).
[3] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", sec. 4.2.2 (sequence parallelism).
[4] Llama Team 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, sec. 3.3.2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields

import numpy as np

from .batch_ramp import phase_weights
from .comm import ORDERS, order_code, strides_by_code
from .errors import PlannerError
from .pipeline import INTERLEAVED, SPLIT_CODES, layers_on_heaviest_stage, schedule_code
from .stacks import stack_of
from .plan import (
    FSDP, FULL_ONLY_FIELDS, HSDP, PRECISION_CODES, RECOMPUTE_CODES, SHARDING_CODES, PlanArrays, Settings, default_schedule,
    ep_comm_overlap, muon_layout_missing, muon_param_layout, resolve,
)
from .catalog import load_stack
from .stacks import sharding_traits
from .terms import Groups, KeyedPlan, isin
from .startup import fsdp_one_rank
from .schema import MAX_COUNT, Job

# ----------------------------------------------------------------- constraint codes
# The rules live in plan.py (`rule_codes`), where `resolve` raises from them; re-exported here.
from .plan import BATCH, LAST_BATCH_RULE, MESH, OK, REASONS, rule_codes  # noqa: E402


def constraint_codes(settings: Settings, plan: PlanArrays, upto: int | None = None, after: int = 0) -> np.ndarray:
    """The first rule of `plan.resolve` that each candidate breaks (OK = 0): plan.rule_codes
    with the search's settings (upto, after: as rule_codes takes them)."""
    return rule_codes(settings.model, settings.gpus, settings.stack, plan, upto, after, hardware=settings.hardware)


VARIANT_FIELDS = ("tpo", "compile", "dpo", "f8r", "fge")
FGE_COLUMN = VARIANT_FIELDS.index("fge")  # the routed experts' grouped GEMMs converted (plan.fge)
# fit's dispatcher search appends a column to the variants: the MoE dispatcher's code (dispatch.CODES),
# priced through the variant's own Settings (Space.settings_of), not a plan field
DISPATCHER_COLUMN = len(VARIANT_FIELDS)


def variant_choices(stack, job: Job, where: str = "", hw=None, model=None) -> np.ndarray:
    """The stack options the search tries, as rows (tpo, compile, dpo, f8r, fge); row 0 is what a
    candidate gets unless another row is faster (and valid for it: TP overlap needs SP with
    tp > 1, and compile where the stack's overlap needs it).

    A pinned option (--compile, --tp-comm-overlap, --fp8-recipe, ...) is the only choice.
    Otherwise: TP overlap off and on where the stack has it (splitting a GEMM into tp chunks
    can cost more than the overlap saves), off only for an MLA model on a stack that turns it
    off (plan.mla_drops_tp_overlap: the overlapped row would price as its twin); every recipe of the stack of the job's precision
    (fp8 or nvfp4) whose tensor cores the hardware `hw` has (no mxfp8 on Hopper) and whose
    kernels it runs (no blockwise on Blackwell: precisions.recipe_unsupported) and, with the job's
    fp8_attention, that has an fp8 attention path on it (plan.fp8_attention_runs);
    torch.compile and DP overlap on where the stack has them, because neither can lengthen a
    step in the cost model (compiled kernels move no more bytes than eager ones: schema check;
    an overlapped transfer adds at most its blocking time: step._hide) -- a dominated choice
    is not searched (compile off is, where a start-up rule refuses the options compiled:
    uncompiled_choices, appended by the search); the routed experts' grouped GEMMs (fge) bf16 and
    converted where the job is fp8 / nvfp4 on an MoE model (`model`), leaves fp8_grouped_experts to the
    search and the stack runs both (stack_db runs.fp8_grouped_experts), the stack's rule first (row 0:
    torchtitan's bf16 experts); neither dominates (the converted GEMMs run faster, but pad each expert's
    token group to more rows and refuse pp > 1 and cp > 1 under float8: startup
    TORCHTITAN_FP8_GROUPED_MM_PP_CP, Space.variant_ok)."""
    from .plan import FP8_RECIPE_CODES, RECIPE_PEAK, fp8_attention_runs, mla_drops_tp_overlap, recipe_precision, recipe_unsupported, stack_options

    opts, _ = stack_options(stack, job.model_copy(update=dict(tp_comm_overlap=False if job.tp_comm_overlap is None else job.tp_comm_overlap)),
                            where, tp=2, sp=True)
    ov = stack.overlap
    compile_ = [int(job.torch_compile)] if job.torch_compile is not None else [int(stack.compiled_kernels is not None)]
    dpo = [int(job.dp_comm_overlap)] if job.dp_comm_overlap is not None else [int(ov.dp_comm_overlap_supported)]
    # an MLA model on a stack that turns the overlap off (plan.mla_drops_tp_overlap): the overlapped row would be
    # priced as its no-overlap twin (plan.tp_overlap) with the userbuffers' memory on top, so it is not searched
    tpo = [int(job.tp_comm_overlap)] if job.tp_comm_overlap is not None else (
        [0, 1] if ov.tp_comm_overlap_supported and not mla_drops_tp_overlap(stack, model, job.trainer_date) else [0])
    if job.precision != "bf16":
        have = hw.precisions() if hw is not None else list(set(RECIPE_PEAK.values()))
        f8r = [opts["f8r"]] if job.fp8_recipe is not None else [
            FP8_RECIPE_CODES[n] for n in stack.fp8_recipes
            if recipe_precision(n) == job.precision and RECIPE_PEAK[n] in have
            and (hw is None or recipe_unsupported(n, hw) is None)
            and (not job.fp8_attention or fp8_attention_runs(stack.fp8_recipes[n], hw))] or [opts["f8r"]]
    else:
        f8r = [0]
    runs = stack.runs.fp8_grouped_experts if stack.runs is not None else None
    fge = [opts["fge"] if job.fp8_grouped_experts is None else int(job.fp8_grouped_experts)]
    if (job.fp8_grouped_experts is None and job.precision != "bf16" and model is not None and model.moe is not None
            and runs is not None and len(set(runs)) > 1):
        fge = [opts["fge"], 1 - opts["fge"]]
    rows = [(t, c, dd, r, e) for t in tpo for c in compile_ for dd in dpo for r in f8r for e in fge]
    return np.array(rows, dtype=np.int64)


def uncompiled_choices(stack, job: Job, variants: np.ndarray) -> np.ndarray:
    """The compile-off twins fit tries beside variant_choices' rows `variants`: each compiled row
    (tpo, 1, dpo, f8r, fge) as (tpo, 0, dpo, f8r, fge), where the job leaves torch_compile to the search (a
    pinned --compile / --no-compile / job-file torch_compile is the only choice), the stack's
    start-up rules include one that reads compile (startup.COMPILE_RULES: torchtitan's
    TORCHTITAN_MX_TP_COMPILE, mxfp8 with TP under compile) and the stack runs the row uncompiled
    (not a TP overlap that needs compile: torchtitan's async TP). Compile off never shortens a step
    in the cost model (variant_choices), so a twin is tried only where its compiled row is broken by
    such a rule (Space.variant_ok, Space.uncompiled; uncompiled_space for the base rows whose own
    compiled row is): elsewhere it is dominated. None (an empty array) otherwise."""
    from .startup import COMPILE_RULES, rules_for

    none = np.zeros((0, variants.shape[1]), dtype=np.int64)
    if (job.torch_compile is not None or stack is None or stack.compiled_kernels is None
            or not any(r.key in COMPILE_RULES for _, r in rules_for(stack))):
        return none
    needs = bool(stack.overlap.tp_comm_overlap_needs_compile)
    seen = {tuple(r) for r in variants.tolist()}
    out = []
    for r in variants.tolist():
        t = [r[0], 0, *r[2:]]
        if r[1] and not (r[0] and needs) and tuple(t) not in seen:
            seen.add(tuple(t))
            out.append(t)
    return np.array(out, dtype=np.int64) if out else none


# the --rank-orders names and the layers a pipeline split may lack by default ([4] sec. 3.3.2): planner/defaults.py,
# which `planner fit --help` reads without importing this module
from .defaults import DEFAULT_LAYER_SLACK, RANK_ORDERS_ALL, RANK_ORDERS_TP_INNER  # noqa: E402,F401

SP_OFF_ON = np.array([1, 0], dtype=np.int64)  # searched SP values, on first


# ------------------------------------------------------------------------ options
@dataclass(frozen=True)
class SpaceOptions:
    """Pins (a tuple of allowed values; None = the axis' own list) and upper bounds."""

    tp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    max_tp: int | None = None
    max_cp: int | None = None
    max_pp: int | None = None
    max_vpp: int | None = None
    max_dp: int | None = None
    max_micro_batch: int | None = None
    ep: tuple[int, ...] | None = None
    max_ep: int | None = None
    etp: tuple[int, ...] | None = None
    max_etp: int | None = None
    sharding: tuple[str, ...] | None = None
    shard_group: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    sequence_parallel: bool | None = None
    schedule: tuple[str, ...] | None = None
    rank_orders: str | tuple[str, ...] = RANK_ORDERS_TP_INNER
    max_layer_slack: int = DEFAULT_LAYER_SLACK
    # (pp, vpp) splits searched whatever their layer slack (`fit CONFIG`: the file's own split, past the bound:
    # planner/cli/fit_config.widen_to_plan)
    splits: tuple[tuple[int, int], ...] = ()

    def __post_init__(self):
        for name in ("tp", "cp", "pp", "vpp", "dp", "micro_batch", "shard_group", "max_tp", "max_cp", "max_pp", "max_vpp",
                     "max_dp", "max_micro_batch", "max_layer_slack", "etp", "max_etp", "ep", "max_ep"):
            v = getattr(self, name)
            check_count(v if isinstance(v, tuple) else (v,), f"--{name.replace('_', '-')}",
                        minimum=0 if name == "max_layer_slack" else 1)


def check_count(values, option: str, minimum: int = 1) -> None:
    """PlannerError unless every value (None skipped) is a whole number in [minimum, MAX_COUNT]."""
    for v in values:
        if v is not None and not (minimum <= v <= MAX_COUNT):
            raise PlannerError(f"{option} {v}: not a whole number from {minimum} to {MAX_COUNT} (2**31 - 1)",
                               f"give {option} as a count such as 8")


# The most elements one level of the search may hold (a candidate table's rows, or a
# parent x choices matrix). The largest searches of the catalog reach about 1.6e5
# (gpt3-175b on 4,096 GPUs; llama3-405b on 16,384: 1.2e5), so 2**23 = 8.4e6 is 50 times
# that; a bigger space comes from a size no training run has (e.g. 32 million layers) and
# would need gigabytes: it is refused with the field that makes it big (_guard).
MAX_LEVEL_ELEMENTS = 2**23


def _guard(n: int, what: str, hint: str) -> None:
    if n > MAX_LEVEL_ELEMENTS:
        raise PlannerError(f"the search space is too large: {what} ({n:,} at one level, more than {MAX_LEVEL_ELEMENTS:,})",
                           hint)


def _divisors(n: int) -> np.ndarray:
    """The divisors of n, ascending, by trial division up to sqrt(n): 46,341 trials for the
    largest count a file may give (schema.MAX_COUNT)."""
    n = int(n)
    d = np.arange(1, math.isqrt(n) + 1, dtype=np.int64)
    small = d[n % d == 0]
    # small ascends and n // small descends; they meet at sqrt(n), once when n is a square
    # (not np.unique: numpy imports numpy.ma for it, ~10 ms of every command's start-up)
    large = (n // small)[::-1]
    return np.concatenate([small, large[1:] if len(small) and small[-1] == large[0] else large])


def _axis(natural: np.ndarray, pins, bound) -> np.ndarray:
    vals = np.asarray(sorted(set(pins)), dtype=np.int64) if pins else np.asarray(natural, dtype=np.int64)
    if bound is not None:
        vals = vals[vals <= bound]
    return vals


def layer_slack(num_layers: int, pp, vpp, counted: int = 0) -> np.ndarray:
    """Layers missing from a full split: pp*vpp chunks of ceil(L'/(pp*vpp)) layers hold this
    many more layers than the model has (0 = an even split); L' = L + `counted` ends (the
    embedding and/or the loss counted as layers of the split, pipeline.stage_layers)."""
    pp = np.asarray(pp, dtype=np.int64)
    return pp * layers_on_heaviest_stage(num_layers, pp, vpp, counted) - (num_layers + counted)


def order_choices(rank_orders) -> np.ndarray:
    """Rank-order codes searched: 'tp-inner' (TP innermost, 6), 'all' (24) or names."""
    if isinstance(rank_orders, str):
        key = rank_orders.strip().lower()
        if key == RANK_ORDERS_ALL:
            return np.arange(len(ORDERS), dtype=np.int64)
        if key in (RANK_ORDERS_TP_INNER, "tp-innermost"):
            return np.array([c for c, o in enumerate(ORDERS) if o[0] == "tp"], dtype=np.int64)
        rank_orders = tuple(p for p in key.split(",") if p.strip())
    return np.array(sorted({order_code(o) for o in rank_orders}), dtype=np.int64)


def distinct_orders(orders: np.ndarray, tp, cp, pp, dp) -> np.ndarray:
    """(meshes x orders) bool: True for the first order (in `orders`) of each class of
    arrangements that give every axis of size > 1 the same stride (the same placement of
    every group that communicates)."""
    tp, cp, pp, dp = (np.asarray(x, dtype=np.int64)[:, None] for x in (tp, cp, pp, dp))
    st = strides_by_code(orders[None, :], tp=tp, cp=cp, pp=pp, dp=dp)
    sig = np.stack([np.where(size > 1, st[ax], 0) for ax, size in (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp))], axis=-1)
    same = np.all(sig[:, :, None, :] == sig[:, None, :, :], axis=-1)  # (M, O, O)
    earlier = np.tril(np.ones((len(orders), len(orders)), dtype=bool), k=-1)  # [j, i]: i < j
    return ~np.any(same & earlier[None], axis=-1)


# ------------------------------------------------------------------------ the space
@dataclass
class Space:
    """The candidates that passed every rule at the level where it could be checked, as
    `base` rows (every axis but recompute and the rank order) crossed with `recompute`;
    rank orders are crossed in for the time model (memory reads the order only through NCCL's
    NVLS buffers: search.with_order_memory, `light` below). The candidates that broke a rule are
    only counted.

    base: PlanArrays (recompute 0, order 0); codes: constraint code of each base row (rows
    that reached the last level can still break the SP and sharding rules); order_ok:
    (base rows x orders) the distinct arrangements of each row's mesh; reasons: broken
    candidates by constraint code; considered: every candidate."""

    settings: Settings
    base: PlanArrays
    codes: np.ndarray
    recompute: np.ndarray
    orders: np.ndarray
    order_ok: np.ndarray
    reasons: dict
    considered: int
    slack_dropped: int = 0  # (pp, vpp) splits left out by --max-layer-slack
    variants: np.ndarray = None  # stack options tried (variant_choices): rows of VARIANT_FIELDS
    # fit's dispatcher search (search.dispatcher_settings): {dispatcher code: the Settings with that MoE
    # dispatcher}, the variants' column DISPATCHER_COLUMN naming each one's; None: the settings' own
    dispatchers: dict = None
    # the job's batch ramp, ((batch, weight), ...) (batch_ramp.phase_weights: the search prices each
    # phase's step at its batch and memory's peak over them); () without a ramp
    phases: tuple = ()
    # the variants that are compile-off twins (uncompiled_choices): tried only where the same options
    # compiled break a start-up rule that reads compile (startup.COMPILE_RULES; variant_ok)
    uncompiled: tuple = ()
    # the recompute choices asked for, before the start-up rules on recompute alone dropped some
    # (_recompute_runnable): what uncompiled_space counts the rows it revives with
    recompute_asked: np.ndarray = None
    # memory.placement_groups of every base row, computed once for the spaces of one parent (search.vocab_spaces:
    # the placement reads no vocabulary): (placed, each base row's group, groups); None: each memory call its own
    placement: tuple = None
    # NCCL's NVLS buffers at each rank order (search.with_order_memory; memory.py [nv]), by NVLS group (the base rows
    # of one mesh, base order and order_ok row): each base row's group (nvls_group), and per group its lightest order
    # (light: the distinct order of its order_ok whose memory.nvls_buffer_bytes is least, the first of ties; its
    # first order in the search), what its memory at that order adds to its memory at its own order (light_shift,
    # bytes, <= 0 where that order is one of its own), the term there (nvls_least) and at each of `orders`
    # (nvls_table, inf where the group runs no such order); None where no row's NVLS buffers differ between its
    # orders (the search then reads no rank order for memory, as before)
    nvls_group: np.ndarray = None
    light: np.ndarray = None
    light_shift: np.ndarray = None
    nvls_least: np.ndarray = None
    nvls_table: np.ndarray = None
    # variant_ok's (plan, {dispatcher code: where it runs}) of the last plan it was given (held, so that its
    # identity is not reused), the dispatcher's start-up rules evaluated once per plan and dispatcher
    _dispatcher_memo: tuple = field(default=None, init=False, repr=False, compare=False)

    def lightest(self, b) -> np.ndarray:
        """The lightest rank order of base rows b (search.with_order_memory; only where `light` is set)."""
        return self.light[self.nvls_group[b]]

    def light_shift_of(self, b) -> np.ndarray:
        """light_shift of base rows b (0 where `light` is not set)."""
        return np.zeros(np.shape(b)) if self.light is None else self.light_shift[self.nvls_group[b]]

    @property
    def n_orders(self) -> np.ndarray:
        return row_counts(self.order_ok)

    def plans(self, base_idx, rc_idx, order=None, var=None) -> PlanArrays:
        """Candidates (base row, recompute index[, order code[, variant index]]) as a
        PlanArrays."""
        p = self.base.take(base_idx)
        p.recompute = self.recompute[rc_idx]
        if order is not None:
            p.order = np.asarray(order, dtype=np.int64)
        if var is not None:
            var = np.broadcast_to(np.asarray(var, dtype=np.int64), np.shape(p.tp))
            for j, name in enumerate(VARIANT_FIELDS):
                setattr(p, name, self.variants[var, j])
            if self.dispatchers is not None:  # the variant's MoE dispatcher, which step_time reads per plan
                p.disp = self.variants[var, DISPATCHER_COLUMN]
        return p

    def settings_of(self, var: int) -> Settings:
        """The Settings variant `var` is priced with: its MoE dispatcher's (dispatchers), else the space's."""
        if self.dispatchers is None:
            return self.settings
        return self.dispatchers[int(self.variants[var, DISPATCHER_COLUMN])]

    def variant_ok(self, plan: PlanArrays, var: int) -> np.ndarray:
        """Where variant `var` can run: TP overlap only with SP and tp > 1 (and compile where
        the stack needs it); a dispatcher other than variant 0's only where an EP group exchanges
        tokens (ep > 1) and its start-up rules pass on the job's cluster (startup.dispatcher_broken: DeepEP's group
        sizes and GPU generation, Hybrid-EP's NVLink-domain and token limits);
        and none of the stack's start-up rules that read the variant's fields breaks it
        (startup.variant_broken: torchtitan's mxfp8 with compile and TP, its float8 grouped experts with
        pp > 1 or cp > 1); a compile-off twin (uncompiled) only where its options compiled break one of
        the rules that read compile (startup.compile_broken; uncompiled_choices:
        elsewhere the compiled row runs, never slower in the model)."""
        tpo, compile_ = self.variants[var, 0], self.variants[var, 1]
        ok = np.ones(np.shape(plan.tp), dtype=bool)
        if tpo:
            ok &= (plan.sp > 0) & (plan.tp > 1)
            if self.settings.stack.overlap.tp_comm_overlap_needs_compile and not compile_:
                ok &= False
        if self.dispatchers is not None and self.variants[var, DISPATCHER_COLUMN] != self.variants[0, DISPATCHER_COLUMN]:
            from .startup import cluster_of, dispatcher_broken

            code = int(self.variants[var, DISPATCHER_COLUMN])
            memo = self._dispatcher_memo
            if memo is None or memo[0] is not plan:  # variants sharing a dispatcher (TP overlap on / off) share
                memo = self._dispatcher_memo = (plan, {})  # its rules' mask on this plan (best_variants' loop)
            if code not in memo[1]:
                s = self.settings_of(var)
                memo[1][code] = (np.asarray(plan.ep) > 1) & ~dispatcher_broken(s.model, s.stack, plan, cluster_of(s.hardware, s.gpus))
            ok &= memo[1][code]
        if var:
            from .startup import cluster_of, compile_broken, variant_broken

            p = _with_variant(plan, self.variants[var])
            s = self.settings_of(var)
            cluster = cluster_of(s.hardware, s.gpus)
            ok &= ~variant_broken(s.model, s.stack, p, cluster)
            if var in self.uncompiled:
                p.compile = np.int64(1)
                ok &= compile_broken(s.model, s.stack, p, cluster)
        return ok


def _with_variant(plan: PlanArrays, row) -> PlanArrays:
    """A shallow copy of `plan` with the stack options of variant row `row` (VARIANT_FIELDS)."""
    from copy import copy

    p = copy(plan)
    for j, name in enumerate(VARIANT_FIELDS):
        setattr(p, name, np.int64(row[j]))
    return p


def fill_variant(plan: PlanArrays, row) -> PlanArrays:
    """`plan` (1-d, its own columns) with the stack options of variant row `row` (VARIANT_FIELDS) set in
    place as int64 columns, one value per candidate (constant columns, _constant); returned."""
    for j, name in enumerate(VARIANT_FIELDS):
        setattr(plan, name, _constant(len(plan.tp), row[j]))
    return plan


def _constant(n: int, value) -> np.ndarray:
    """A 1-d int64 column of n equal values as a read-only view of one value (np.broadcast_to: stride 0),
    not n copies: every read (take, indexing, arithmetic) gives what np.full(n, value) gives, and a write
    raises. The space's columns that hold one value on every base row (the batch, the sequence, the
    precision, the pipeline-split flags, the micro-batch group, recompute and order 0, variant 0's
    options: 14 of 27 columns) would otherwise take 14 x 8 B a row: 51 MB of DeepSeek-V3 / 2,048 H800's
    454,304 base rows, each page of them faulted in and zero-filled by the kernel first."""
    return np.broadcast_to(np.int64(value), (n,))


def uncompiled_space(space: Space) -> tuple[Space, "Space | None"]:
    """fit's compile-off search (uncompiled_choices) on a space built with the twins after the
    other variants (space.uncompiled): (space, the uncompiled space or None).

    The space keeps only the twins whose compiled row some valid base row breaks a start-up rule
    that reads compile with (startup.compile_broken; elsewhere variant_ok never lets one run: no
    cost spent on them). A base row whose own options (variant 0) compiled break such a rule is no
    candidate of the space at all (plan.rule_codes checks variant 0 on every base row); where the
    same row runs with variant 0's twin, it is a candidate of the uncompiled space: those rows alone,
    their sharding mode chosen again with compile off (choose_modes: the stack's first mode of the
    row's class that no rule refuses), variant 0 that twin and the space's other variants after it
    (a compiled one where it passes the rules, variant_ok; another twin where its compiled row is
    broken). Its candidates were counted as broken by the space: they move from that rule's count
    (space.reasons, changed in the returned copy) to the uncompiled space's memory and time counts,
    those of the recompute choices a start-up rule on recompute alone refuses to that rule, as
    build_space counts a valid row (_recompute_runnable). The uncompiled space adds nothing to
    `considered` (each candidate is counted once: its row is the space's)."""
    if not space.uncompiled:
        return space, None
    from .startup import cluster_of, compile_broken

    V = space.variants
    twins = set(int(v) for v in space.uncompiled)
    ok_rows = np.flatnonzero(space.codes == OK)
    valid = space.base.take(ok_rows) if len(ok_rows) else None
    keep = []
    for v in sorted(twins):  # a twin some valid row can need: its options compiled broken there
        st = space.settings_of(v)
        on = V[v].copy()
        on[1] = 1
        if valid is not None and compile_broken(st.model, st.stack, _with_variant(valid, on), cluster_of(st.hardware, st.gpus)).any():
            keep.append(v)
    idx = [v for v in range(len(V)) if v not in twins or v in keep]
    first = replace(space, variants=V[idx], uncompiled=tuple(i for i, v in enumerate(idx) if v in twins))

    # the uncompiled space: variant 0's twin, where it is one
    twin0 = V[0].copy()
    twin0[1] = 0
    t0 = next((v for v in sorted(twins) if np.array_equal(V[v], twin0)), None)
    bad = np.flatnonzero(space.codes != OK)
    if t0 is None or not len(bad):
        return first, None
    st = space.settings_of(0)
    on = V[0].copy()
    on[1] = 1
    sub = bad[compile_broken(st.model, st.stack, _with_variant(space.base.take(bad), on), cluster_of(st.hardware, st.gpus))]
    if not len(sub):
        return first, None
    base = fill_variant(space.base.take(sub), V[t0])  # a broken row keeps its class's head mode (choose_modes)
    codes = choose_modes(space.settings, base)
    run = np.flatnonzero(codes == OK)
    if not len(run):
        return first, None
    sub, base = sub[run], base.take(run)
    order_ok = space.order_ok[sub]
    n = row_counts(order_ok)
    reasons = dict(space.reasons)
    asked = space.recompute_asked if space.recompute_asked is not None else space.recompute
    was = space.codes[sub]
    for code in np.unique(was):  # each row's candidates (orders x recompute asked), as build_space counted them
        left = reasons.get(int(code), 0) - int((n[was == code] * len(asked)).sum())
        if left:
            reasons[int(code)] = left
        else:
            reasons.pop(int(code), None)
    rc = _recompute_runnable(space.settings, asked, reasons, int(n.sum()))
    assert np.array_equal(rc, space.recompute), "the uncompiled rows' recompute choices are the space's"
    first = replace(first, reasons=reasons)
    order2 = [t0] + [v for v in idx if v != t0]
    second = replace(space, base=base, codes=np.full(len(sub), OK, dtype=np.int64), order_ok=order_ok, reasons={},
                     considered=0, slack_dropped=0, variants=V[order2],
                     uncompiled=tuple(i for i, v in enumerate(order2) if v in twins))
    # only the variants some of its rows can run (variant_ok: the compiled ones are mostly refused there, as
    # the rows' own options are): the others would only lower the prefilter's floor (search.floor_variants)
    runs = [0] + [i for i in range(1, len(order2)) if second.variant_ok(base, i).any()]
    if len(runs) < len(order2):
        order2 = [order2[i] for i in runs]
        second = replace(second, variants=V[order2], uncompiled=tuple(i for i, v in enumerate(order2) if v in twins))
    return first, second


def stack_bounds(stack, opts: SpaceOptions) -> SpaceOptions:
    """The options bounded by what the stack runs (stack_db runs): its largest degrees; a
    pinned sharding level or schedule it lacks is an error naming the stack's own."""
    runs = stack.runs if stack is not None else None
    if runs is None:
        return opts
    levels = tuple(dict.fromkeys(m.level for m in runs.sharding))
    bad = [n for n in (opts.sharding or ()) if n in SHARDING_CODES and n not in levels]
    if bad:
        raise PlannerError(f"--sharding {','.join(bad)}: stack {stack.name} has no such mode ({stack.origin} runs.sharding: "
                           + ", ".join(f"{m.name} = {m.level}" for m in runs.sharding) + ")",
                           f"choose among {', '.join(levels)}, or another --stack")
    scheds = tuple(x.schedule for x in runs.schedules)
    bad = [n for n in (opts.schedule or ()) if n not in scheds]
    if bad:
        raise PlannerError(f"--schedule {','.join(bad)}: stack {stack.name} does not run it ({stack.origin} runs.schedules: "
                           f"{', '.join(scheds)})", f"choose among {', '.join(scheds)}")

    # a pinned degree above the stack's own largest is bad input naming the stack (before the 2026-12-07 audit5 the cap
    # below emptied the axis: `fit --stack llm-foundry --tp 2` answered "no plan ... (0 candidates)", exit 1, no reason)
    for flag, pins, limit in (("--tp", opts.tp, runs.max_tp), ("--cp", opts.cp, runs.max_cp), ("--pp", opts.pp, runs.max_pp),
                              ("--ep", opts.ep, runs.max_ep)):
        over = [v for v in (pins or ()) if limit is not None and v > limit]
        if over:
            key = flag[2:]
            raise PlannerError(f"{flag} {','.join(map(str, over))}: stack {stack.name} runs {key} {limit} at most "
                               f"({stack.origin} runs.max_{key})",
                               f"give {flag} {limit}{' (its code has no such parallelism)' if limit == 1 else ' or less'}, "
                               "or leave it out (fit searches what the stack runs), or choose another --stack")

    def cap(mx, limit):
        return limit if mx is None else (mx if limit is None else min(mx, limit))

    return replace(opts, max_tp=cap(opts.max_tp, runs.max_tp), max_cp=cap(opts.max_cp, runs.max_cp),
                   max_pp=cap(opts.max_pp, runs.max_pp), max_ep=cap(opts.max_ep, runs.max_ep))


def no_offload_search(settings: Settings) -> None:
    """fit does not search CPU offload (planner/offload.py): the job's offload_optimizer / offload_param are refused
    there, named, rather than priced on plans whose sharding the offload does not run under."""
    on = [k for k in ("offload_optimizer", "offload_param") if getattr(settings, k) != "none"]
    if on:
        raise PlannerError(f"{' and '.join(on)} cpu: fit does not search CPU offload",
                           "leave it out of fit, and price the plan fit ranks with it: planner explain / check "
                           f"{' '.join('--' + k.replace('_', '-') + ' cpu' for k in on)}")


def early_step_bounds(settings: Settings, opts: SpaceOptions) -> SpaceOptions:
    """With the job's early_step_in_backward, the search's pp and ep at 1: torchtitan refuses the
    optimizer in the backward with pipeline or expert parallelism (plan.EARLY_STEP_SOURCE); a
    pinned --pp or --ep above 1 is an error naming the rule."""
    if not settings.early_step_in_backward:
        return opts
    from .plan import EARLY_STEP_SOURCE

    for name in ("pp", "ep"):
        pinned = getattr(opts, name)
        if pinned and max(pinned) > 1:
            raise PlannerError(f"--{name} {','.join(map(str, pinned))} with early_step_in_backward: torchtitan refuses the "
                               f"optimizer in the backward with {'pipeline' if name == 'pp' else 'expert'} parallelism "
                               f"({EARLY_STEP_SOURCE})", f"pin --{name} 1, or leave early_step_in_backward out")
    return replace(opts, max_pp=1, max_ep=1)


def eager_cp_bounds(settings: Settings, opts: SpaceOptions) -> SpaceOptions:
    """With the job's eager core attention, the search's cp at 1 (plan.EAGER_CP_SOURCE: Megatron-Core's
    own core attention refuses context parallelism); a pinned --cp above 1 is an error naming it."""
    if settings.attention != "eager":
        return opts
    from .plan import EAGER_CP_SOURCE

    if opts.cp and max(opts.cp) > 1:
        raise PlannerError(f"--cp {','.join(map(str, opts.cp))} with attention eager: the eager core attention runs "
                           f"without context parallelism ({EAGER_CP_SOURCE})", "pin --cp 1, or attention flash")
    return replace(opts, max_cp=1)


def mode_decoupled(settings) -> dict:
    """{fp32_decoupled kind: no fp32 copy} for the job's settings (memory.decoupled_grad [sg])."""
    return {"precision_aware": bool(settings.precision_aware), "te_master": bool(settings.te_master)}


def mode_heads(stack, bpp=None, decoupled: dict | None = None, remainders: bool = False) -> np.ndarray:
    """(2, modes): for plans without and with pipeline parallelism, the first of the stack's
    sharding modes (stack_db runs.sharding, in order) priced exactly as each mode: the same
    level, the same traits (stacks.sharding_traits: when the gradients are reduced, the
    weights re-gathered, the replicas all-reduced) and, for the job's bytes_per_param `bpp`
    (None: the stack's default preset), the same gradient bytes reduced and queued
    (runs.sharding grads_in_job_dtype, memory.py [mg]; reduce_queue_units, [rs]) and the same optimizer-step copies of
    the gradients (step_grads, [sg]), and the same master bytes (`remainders`, Settings.remainders: TE's 2 B, but 4 B
    under runs.low_precision_moments.own_master_modes, memory.py [mw]). Such modes differ only in name (Megatron's distributed
    optimizer and Megatron-FSDP's optim; under PP, torchtitan's fsdp2 and its
    reshard_after_forward "never", which torchtitan's default already is there), so the search
    prices one candidate per head and choose_modes picks the member the stack runs."""
    from .plan import bytes_per_param

    runs = stack.runs
    n = len(runs.sharding)
    levels = np.array([SHARDING_CODES[m.level] for m in runs.sharding], dtype=np.int64)
    if bpp is None:
        bpp = bytes_per_param(stack.defaults.bytes_per_param)[0]
    fs, gb = stack.fsdp, float(bpp.gradients)
    # the modes' step_grads.fp32_decoupled that make no fp32 copy for the job (memory.decoupled_grad; None: the
    # bytes' default, the precision-aware optimizer where Adam's moments are below fp32, TE's master with it)
    if decoupled is None:
        low = bpp.optimizer < 8.0 and stack.runs.low_precision_moments is not None
        decoupled = {"precision_aware": low, "te_master": low}

    def bytes_key(m) -> tuple:  # (step.grad_reduce_bytes, memory's queue bytes, the [sg] copies) of a mode
        own, lvl = m.grads_in_job_dtype, SHARDING_CODES[m.level]
        reduce = gb if own else fs.grad_reduce_bytes if lvl >= FSDP else gb if fs.ddp_reduces_grad_buffer else fs.grad_reduce_bytes
        queue = (((gb if own else fs.zero2_reduce_queue_grad_bytes), m.reduce_queue_units)
                 if m.reduce_queue_units is not None and fs.zero2_reduce_queue_params else 0.0)
        sg = m.step_grads
        fp32 = sg is not None and sg.fp32 and gb < 4.0 and not (sg.fp32_decoupled is not None and decoupled[sg.fp32_decoupled])
        rest = () if sg is None else tuple(v for k, v in sg.model_dump().items() if k not in ("fp32", "fp32_decoupled", "sources"))
        own = bool(remainders and lpm is not None and m.name in lpm.own_master_modes)  # [mw]: 4 B, not TE's 2 B
        return reduce, queue, fp32, rest if any(rest) else (), own

    lpm = runs.low_precision_moments
    extra = [bytes_key(m) for m in runs.sharding]
    heads = np.zeros((2, n), dtype=np.int64)
    for c, pp in enumerate((1, 2)):
        probe = PlanArrays(tp=np.ones(n), cp=np.ones(n), pp=np.full(n, pp), vpp=np.ones(n), dp=np.ones(n), mbs=np.ones(n),
                           gbs=np.ones(n), seq=np.ones(n), sharding=levels, shard=np.ones(n), recompute=np.zeros(n),
                           sp=np.zeros(n), schedule=np.zeros(n), precision=np.zeros(n), smode=np.arange(n))
        tr = sharding_traits(stack, probe)
        keys = [(int(levels[i]),) + tuple(bool(tr[k][i]) for k in sorted(tr)) + extra[i] for i in range(n)]
        heads[c] = [keys.index(k) for k in keys]
    return heads


def choose_modes(settings: Settings, base: PlanArrays, key: np.ndarray | None = None, mbs_one: bool = False) -> np.ndarray:
    """Each candidate's sharding mode (PlanArrays.smode, set by the search to the head of its
    pricing class, mode_heads): the first member of that class (stack_db runs.sharding, in
    order) that breaks no rule, as plan.resolve chooses for a job; the constraint codes with
    that mode (with the head's where none passes). The base rows passed the rules up to
    LAST_BATCH_RULE before the sharding and SP axes were added (build_space), and none of those
    rules reads them: they are not checked again (rule_codes after). The rules run once per
    distinct tuple of mode_rule_fields (every field but the micro-batch), found from `key` where
    the caller gives one (build_space: pipeline row, sharding option, SP; rows with one key have
    the same fields but the micro-batch) and the stack's rules do not read the micro-batches, else
    by terms.Groups on the fields; either way the rules read a KeyedPlan of those fields. Rows that no
    rule of startup.ROWS_RULES breaks at micro-batch 1 pass them at every micro-batch: they are keyed
    without it and those rules read micro-batch 1 (mbs_one; _choose_split)."""
    runs = settings.stack.runs if settings.stack is not None else None
    n = len(base.tp)
    if runs is None:
        base.smode = np.zeros(n, dtype=np.int64)
        return constraint_codes(settings, base, after=LAST_BATCH_RULE)
    precisions = _precisions_of(base)
    fields = mode_rule_fields(settings.stack, precisions, rows_rules=not mbs_one)
    no_rows = fields if mbs_one or "mbs" not in fields else mode_rule_fields(settings.stack, precisions, rows_rules=False)
    if not mbs_one and "mbs" in fields and "mbs" not in no_rows:  # only the rows rules read the micro-batch
        from .startup import rows_rules_free

        free = rows_rules_free(settings.stack, base)  # rows no rows rule breaks at micro-batch 1: at any
        if free.all():
            mbs_one, fields = True, no_rows
        elif free.any():
            return _choose_split(settings, base, key, free)
    one_mbs = mbs_one and "mbs" not in fields  # the rows rules read micro-batch 1 (their verdict at every one)
    if key is not None and "microbatches" not in fields and "mbs" not in fields and n > 1:
        present = np.zeros(int(key.max()) + 1, dtype=bool)
        present[key] = True
        index = (np.cumsum(present) - 1)[key]  # each row's group
        first = np.empty(int(index.max()) + 1, dtype=np.int64)
        first[index[::-1]] = np.arange(n - 1, -1, -1)  # the first row of each group
        one = KeyedPlan({f: _column_at(getattr(base, f), n, first) for f in fields})
        if one_mbs:
            one.mbs = np.ones(len(first), dtype=np.int64)
        codes = _choose_modes(settings, one, runs)
        base.smode = one.smode.take(index)
        return codes.take(index)
    g = Groups(base, fields)  # the choice once per distinct tuple of what the rules read
    if not g.active:
        return _choose_modes(settings, base, runs)
    one = g.plan
    if one_mbs:
        one.mbs = np.ones(len(one.tp), dtype=np.int64)
    codes = _choose_modes(settings, one, runs)
    base.smode = g.expand(one.smode)
    return g.expand(codes)


# the plan fields rule_codes reads after LAST_BATCH_RULE (its rules, the stack's and the start-up
# rules): every field but the micro-batch, which only the batch rules read (<= LAST_BATCH_RULE).
# choose_modes evaluates its rules once per distinct tuple of them (terms.Groups; reading another
# field is an error): DeepSeek-V3 / 2,048 H800, 540,512 base rows, 23,420 tuples
# (nor the dispatcher column `disp`, which no rule reads: the start-up rules read the dispatcher's
# Settings, Space.variant_ok)
MODE_RULE_FIELDS = tuple(f.name for f in dataclass_fields(PlanArrays) if f.name not in ("mbs", "disp"))


def _precisions_of(plan) -> tuple:
    """The precisions (names) among a plan's rows: the job's one in the search (min == max: no sort of the rows)."""
    from .precisions import PRECISIONS

    p = np.asarray(plan.precision)
    if p.size == 0:
        return ()
    lo, hi = int(p.min()), int(p.max())
    return (PRECISIONS[lo],) if lo == hi else tuple(PRECISIONS[int(c)] for c in np.unique(p))


def _choose_split(settings: Settings, base: PlanArrays, key, free: np.ndarray) -> np.ndarray:
    """choose_modes where only the rows not `free` (rows_rules_free: a rows rule breaks them at micro-batch 1) need
    the micro-batch keyed: every row priced with the rows rules at micro-batch 1 (right for the free rows, no copy
    of the base), then the others again with their own micro-batches (a few rows: their copy is small); base.smode
    set in place, the codes returned in base's order."""
    codes = choose_modes(settings, base, key, mbs_one=True)
    rows = np.flatnonzero(~free)
    sub = base.take(rows)
    codes[rows] = choose_modes(settings, sub, None if key is None else key[rows])
    smode = np.array(base.smode, dtype=np.int64, copy=True)
    smode[rows] = sub.smode
    base.smode = smode
    return codes


def mode_rule_fields(stack, precisions=("bf16",), rows_rules=True) -> tuple:
    """MODE_RULE_FIELDS, and the micro-batches per step where one of the stack's start-up rules
    reads them (StartupRule.reads_microbatches: DualPipe's shape on the deepseek stack), and the
    micro-batch size where one reads it under the stack's dispatcher and the plans' precisions
    (names) (startup.reads_micro_batch: Hybrid-EP's tokens per rank, NVFP4's and FP8's rows; the
    rows rules, startup.ROWS_RULES, only with rows_rules)."""
    from .startup import reads_micro_batch, rules_for

    return (MODE_RULE_FIELDS + (("microbatches",) if any(r.reads_microbatches for _, r in rules_for(stack)) else ())
            + (("mbs",) if reads_micro_batch(stack, precisions, rows_rules) else ()))


def _column_at(v, n: int, idx) -> np.ndarray:
    """Column v of a plan of n rows (a scalar default, a constant column: _constant, or its own values) at
    the positions idx: the same values as np.broadcast_to(v, (n,)).take(idx), the one value filled where
    there is one (take copies a stride-0 column whole first)."""
    v = np.asarray(v)
    if v.ndim == 0 or (v.strides == (0,) and n):
        return np.full(np.shape(idx), v.flat[0], dtype=v.dtype)
    return v.take(idx)


def _take(plan, idx):
    """plan (PlanArrays or terms.KeyedPlan) at the positions idx."""
    if isinstance(plan, PlanArrays):
        return plan.take(idx)
    return KeyedPlan({f: np.asarray(v).take(idx) for f, v in vars(plan).items()})


def _choose_modes(settings: Settings, base, runs) -> np.ndarray:
    """choose_modes on base (a PlanArrays, or Groups.plan of one): sets base.smode, returns the codes."""
    n = len(base.tp)
    heads = mode_heads(settings.stack, settings.bpp, mode_decoupled(settings), bool(settings.remainders))
    k_modes = heads.shape[1]
    # a head's class in order; a mode that heads none (named by --sharding MODE) runs alone
    members = [[[j for j in range(k_modes) if heads[c, j] == h] if heads[c, h] == h else [h] for h in range(k_modes)]
               for c in (0, 1)]
    depth = max(len(x) for per in members for x in per)
    table = np.full((2, k_modes, depth), -1, dtype=np.int64)
    for c in (0, 1):
        for h in range(k_modes):
            table[c, h, :len(members[c][h])] = members[c][h]
    piped = (base.pp > 1).astype(np.int64)
    head = np.asarray(base.smode, dtype=np.int64).copy()
    chosen = np.full(n, -1, dtype=np.int64)
    first_codes = None
    codes = np.zeros(n, dtype=np.int64)
    for k in range(depth):
        trial = table[piped, head, k]
        todo = np.flatnonzero((chosen < 0) & (trial >= 0))
        if k == 0:
            base.smode = trial.copy()
            first_codes = constraint_codes(settings, base, after=LAST_BATCH_RULE)
            c = first_codes[todo]
        elif len(todo):
            sub = _take(base, todo)
            sub.smode = trial[todo]
            c = constraint_codes(settings, sub, after=LAST_BATCH_RULE)
        else:
            break
        win = todo[c == OK]
        chosen[win] = trial[win]
        codes[win] = OK
    lost = chosen < 0
    base.smode = np.where(lost, head, chosen)
    codes[lost] = first_codes[lost]
    return codes


def pairs(allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.nonzero of a 2-d mask (rows, choices), the same arrays in the same (row-major) order,
    from its flat positions: several times faster than nonzero's 2-d walk on the search's
    masks of few columns (270,000 x 2: 12.7 -> 2.1 ms, one measurement on the 2-core machine)."""
    k_ = allowed.shape[1]
    if not k_:
        return np.nonzero(allowed)
    flat = np.flatnonzero(allowed)
    r = flat // k_
    return r, flat - r * k_


def row_counts(mask: np.ndarray) -> np.ndarray:
    """mask.sum(axis=1) of a 2-d bool mask of few columns (int64, the same integers), column by
    column: numpy's reduction along a short last axis is slow (540,000 x 6: 42 -> 13 ms)."""
    out = np.zeros(mask.shape[0], dtype=np.int64)
    for j in range(mask.shape[1]):
        out += mask[:, j]
    return out


def _expand(cols: dict, allowed: np.ndarray, values: dict) -> dict:
    """Cross each row of `cols` with the choices `allowed[row]` (row-major: parents stay in
    order, children inner). values: name -> (K,) or (R, K) choice values."""
    r, k = pairs(allowed)
    out = {c: v.take(r, axis=0) for c, v in cols.items()}  # v[r], by take (faster than fancy indexing)
    for name, v in values.items():
        out[name] = v.take(k) if v.ndim == 1 else v[r, k]
    return out


def _probe_micro_batch(job: Job) -> int:
    """settings_for's probe micro-batch: 1, or under nvfp4 / fp8 the fewest sequences whose rows divide by the
    block Transformer Engine checks (startup.MEGATRON_NVFP4_TOKENS: 16; MEGATRON_MXFP8_ROWS: 32 with the job's
    fp8_recipe mxfp8; MEGATRON_FP8_ROWS: 8 under any other fp8 recipe, the stack's default: they read
    micro_batch x seq, and a sequence length not a multiple of the block trains at a larger micro-batch, which the
    search tries; the probe must not refuse the job for its own 1) where the global batch holds them and the job
    gives no micro-batch of its own."""
    from math import gcd

    from .startup import FP8_EXEC_ROWS, MXFP8_BLOCK, NVFP4_BLOCK

    block = {"nvfp4": NVFP4_BLOCK, "fp8": MXFP8_BLOCK if job.fp8_recipe == "mxfp8" else FP8_EXEC_ROWS}.get(job.precision)
    if block is None or job.seq_len is None or job.global_batch is None or job.micro_batch is not None:
        return 1
    m = block // gcd(int(job.seq_len), block)
    return m if int(job.global_batch) % m == 0 else 1


def full_recompute_fields(job: Job) -> tuple[str, ...]:
    """The FULL_ONLY_FIELDS a job sets (to other than the value that leaves it out)."""
    return tuple(k for k, off in FULL_ONLY_FIELDS.items() if getattr(job, k) != off)


def settings_for(job: Job, gpus: int | None = None, where: str = "") -> tuple[Settings, int, int, list[str]]:
    """Settings shared by every candidate, from a job's non-searched fields: resolve()
    itself run on a one-GPU plan (so the model, hardware, batch and precision rules and
    messages are resolve's), with the GPU count put back. Returns (settings, global batch
    in sequences, seq_len, warnings)."""
    from .plan import fit_attention, stack_for_job

    stack = load_stack(job.stack)
    if "attention" not in job.model_fields_set:  # the stack's fastest core (runs.attention's first), not explain's default
        job = job.model_copy(update=dict(attention=fit_attention(stack)))
    # the modes the job's model-state preset and settings run under (its 16-bit dtype the stack's where it leaves it out)
    runs = stack_for_job(job, stack, where).runs
    # a2a+p2p's sizes fix cp (start-up rule MEGATRON_HCP_SIZES), which the probe's cp 1 would break: the
    # probe resolves without the variant, laid on its stack after (planner/cp_comm_type.py), and the
    # search's rule masks every other cp
    hcp = dict(cp_comm_type=None, hierarchical_cp_sizes=None) if job.hierarchical_cp_sizes else {}
    # likewise the job's MoE dispatcher, whose start-up rules read ep (torchtitan's DeepEP refuses the probe's
    # ep 1, startup.TORCHTITAN_DEEPEP_EP): the probe runs the stack's, the job's is checked and laid on after
    disp = dict(moe_dispatcher=None, moe_hybridep_capacity_factor=None) if job.moe_dispatcher is not None else {}
    # the job's first / last stage layers (Megatron --decoder-first/last-pipeline-num-layers): not searched, every
    # candidate holds them; the probe's pp 1 has no end stages, so they are checked without it and laid on the
    # Settings after, rule SPLIT_UNITS masking the pp x vpp Megatron refuses them at (plan.uneven_split_broken)
    uneven = (dict(first_stage_layers=None, last_stage_layers=None)
              if job.first_stage_layers is not None or job.last_stage_layers is not None else {})
    # the probe's sharding: the stack's first level (DeepSeek's: ZeRO-1 only); zero1 for a job's optimizer_whole_tensors,
    # which plan._optimizer refuses at any other level (the search ranks zero1 only then: WHOLE_TENSOR_LEVELS)
    level = runs.sharding[0].level if runs is not None else "none"
    # a job's mfsdp_v2 runs its v2 mode only (start-up rule MEGATRON_FSDP_V2_LAYOUT): the probe runs it (a stack without
    # one is refused by resolve, naming it)
    v2 = next((m for m in (runs.sharding if runs is not None else []) if m.mfsdp_v2), None) if job.mfsdp_v2 else None
    mode = dict(sharding_mode=v2.name) if v2 is not None else {}
    # the job's full-recompute settings (recompute_layers: Megatron's block window; partition_activations: its kept
    # inputs split over TP): plan._check_job_options refuses them at any other recompute, the probe's none among
    # them, so the probe runs without them and they are laid on the Settings after; the search prices full
    # recompute only then (recompute_choices: the job fixes recompute full)
    full_only = full_recompute_fields(job)
    # the job's dp_param_gather_overlap true (--overlap-param-gather): the start-up rule MEGATRON_PARAM_GATHER refuses it
    # under the probe's sharding level where that shards no optimizer (megatron's ddp), so the probe runs without it and
    # it is laid on the Settings (and the stack, for the rule to mask the search's ddp / torch_fsdp2 rows) after
    gather = dict(dp_param_gather_overlap=None) if job.dp_param_gather_overlap else {}
    one = job.model_copy(update=dict(
        gpus=1, tp=1, cp=1, pp=1, vpp=1, dp=None, micro_batch=_probe_micro_batch(job),
        sharding=(WHOLE_TENSOR_LEVELS[0] if job.optimizer_whole_tensors else v2.level if v2 is not None else level),
        shard_group=None, **mode,
        recompute="none", sequence_parallel=None, schedule=None, rank_order="tp-cp-pp-dp", tp_comm_overlap=False, ep=1,
        ep_comm_overlap=False, **hcp, **disp, **uneven, **gather, **{k: FULL_ONLY_FIELDS[k] for k in full_only}))
    settings, plan, warnings = resolve(one, where)
    if gather:
        from .plan import _dp_param_gather_overlap, with_default

        settings = replace(settings, dp_param_gather_overlap=_dp_param_gather_overlap(job, settings.stack, where),
                           stack=with_default(settings.stack, "dp_param_gather_overlap_set", True))
    if full_only:
        if job.recompute != "full" and "recompute" in job.model_fields_set:  # the job's own recompute contradicts them
            raise PlannerError(f"{where}{' and '.join(full_only)} need{'s' if len(full_only) == 1 else ''} recompute full "
                               f"(got {job.recompute})", f"set recompute: full, or remove {' and '.join(full_only)}")
        from .plan import _check_stack_option_fields, with_default

        _check_stack_option_fields(job, settings.stack, where)  # a stack without partition_activations, before the search
        settings = replace(settings, recompute_layers=job.recompute_layers, partition_activations=job.partition_activations,
                           stack=with_default(settings.stack, "recompute_layers_set", job.recompute_layers))
        shown = " and ".join(f"{k} {getattr(job, k)}" if k == "recompute_layers" else k for k in full_only)
        warnings = warnings + [f"{shown}: {'a setting' if len(full_only) == 1 else 'settings'} of full recompute only, "
                               "so every plan searched runs recompute full"]
    if uneven:
        from .plan import uneven_split_error

        err = uneven_split_error(settings.model.num_layers, job, settings.stack, where, at_pp=False)
        if err is not None:
            raise err
        settings = replace(settings, split_first=int(job.first_stage_layers or 0), split_last=int(job.last_stage_layers or 0))
    # the probe's cp 1 lists the job's CP variant as run without CP (plan.resolve): whether a searched plan runs at
    # cp 1 is the search's to say (search.search_one), not the probe's
    from .cp_comm_type import ignored_at_cp1 as cp_variant_ignored
    from .cp_rotate import ignored_at_cp1 as rotate_ignored

    from .plan import balance_ignored_at_cp1

    probe_notes = cp_variant_ignored(one) + rotate_ignored(one) + balance_ignored_at_cp1(one)
    warnings = [w for w in warnings if w not in probe_notes]
    if hcp:
        from .cp_comm_type import apply_cp_comm_type

        settings = replace(settings, stack=apply_cp_comm_type(job, settings.stack, where))
    if disp:
        from .plan import apply_moe_dispatcher, moe_dispatch_settings

        d = moe_dispatch_settings(job, settings.model, settings.stack, [], where)  # the job's own, validated
        settings = replace(settings, moe_dispatcher=d["moe_dispatcher"], stack=apply_moe_dispatcher(job, settings.stack),
                           moe_hybridep_capacity_factor=d["moe_hybridep_capacity_factor"],
                           inherited=tuple((k, v) for k, v in settings.inherited if k != "moe_dispatcher"))
    # the MoE all-to-all overlap: the model and stack checked here, each candidate's ep, pp/vpp
    # and recompute in the cost model (moe.ep_overlap_applies). Not pinned: on for an MoE model
    # where the stack has it (Megatron-Core --overlap-moe-expert-parallel-comm), as DP overlap,
    # since an overlapped transfer adds at most its blocking time (step._hide) and the passes
    # without a partner keep theirs (moe.alone_pass_share): a plan without it is dominated. Not
    # with the allgather dispatcher, nor with more than one MTP layer, which Megatron-Core refuses
    # it with (plan.ep_comm_overlap: transformer_config.py @d98e8a64 l. 3016-3019, l. 3043-3046), nor beside the job's
    # moe_shared_expert_overlap (l. 3040-3041: plan.moe_shared_expert_overlap)
    if (job.ep_comm_overlap is None and settings.model.moe is not None and settings.stack.overlap.ep_comm_overlap_supported
            and settings.moe_dispatcher != "allgather" and (settings.model.mtp_layers or 0) <= 1
            and not settings.moe_shared_expert_overlap):  # Megatron-Core refuses the two together (plan.py)
        job = job.model_copy(update=dict(ep_comm_overlap=True))
    epo = ep_comm_overlap(job, settings.model, settings.stack, where, plan_checks=False)
    settings = replace(settings, gpus=int(gpus if gpus is not None else job.gpus), ep_comm_overlap=epo,
                       inherited=tuple((k, v) for k, v in settings.inherited if k not in ("micro_batch", "tp_comm_overlap")))
    return settings, int(plan.gbs), int(plan.seq), warnings


def _plan(cols: dict, gbs: int, seq: int, precision: int, settings: Settings) -> PlanArrays:
    n = len(cols["tp"])
    z = _constant(n, 0)  # (the columns one value fills: _constant)
    get = lambda name, default: cols[name] if name in cols else default  # noqa: E731
    return PlanArrays(
        tp=cols["tp"], cp=cols["cp"], pp=cols["pp"], vpp=cols["vpp"], dp=cols["dp"], mbs=cols["mbs"],
        gbs=_constant(n, gbs), seq=_constant(n, seq),
        sharding=get("sharding", z), shard=get("shard", cols["dp"]), recompute=z, sp=get("sp", z),
        schedule=cols["schedule"], precision=_constant(n, precision), order=z,
        split_emb=_constant(n, settings.split_emb), split_loss=_constant(n, settings.split_loss),
        split_front=_constant(n, SPLIT_CODES[stack_of(settings).pipeline_split]),
        split_first=get("split_first", _constant(n, settings.split_first)),
        split_last=get("split_last", _constant(n, settings.split_last)),
        ep=get("ep", _constant(n, 1)), etp=get("etp", z), smode=get("smode", z),
        mbg=_constant(n, settings.microbatch_group),
    )


def _count(reasons: dict, codes: np.ndarray, weights: np.ndarray) -> None:
    bad = codes != OK
    if bad.any():
        cnt = np.bincount(codes[bad], weights=weights[bad], minlength=len(REASONS) + 1)
        for code in np.flatnonzero(cnt):
            reasons[int(code)] = reasons.get(int(code), 0) + int(round(cnt[code]))


def _phase_codes(settings: Settings, rows: dict, gbs: int, seq: int, prec: int, reasons: dict,
                 weights: np.ndarray) -> np.ndarray:
    """Which rows (each valid at the last batch, gbs) run every phase of the job's batch ramp
    (Settings.batch_schedule): Megatron-LM checks each phase's batch as the phase starts, the
    batch a multiple of micro-batch x DP (planner/batch_ramp.py [1] update), and the interleaved
    schedule's micro-batch rule holds at each phase's count (plan.rule_codes up to
    LAST_BATCH_RULE, at the phase's batch). A row that breaks a rule at a phase is counted, with
    its multiplicity `weights`, under (phase index, code): the first phase it breaks, the first
    rule there (search_one names them: batch_ramp.phase_name)."""
    ok = np.ones(len(rows["tp"]), dtype=bool)
    for k, (_, b) in enumerate(settings.batch_schedule):
        if int(b) == gbs:
            continue
        codes = constraint_codes(settings, _plan(rows, int(b), seq, prec, settings), upto=LAST_BATCH_RULE)
        bad = ok & (codes != OK)
        if bad.any():
            cnt = np.bincount(codes[bad], weights=weights[bad].astype(np.float64), minlength=len(REASONS) + 1)
            for code in np.flatnonzero(cnt):
                reasons[(k, int(code))] = reasons.get((k, int(code)), 0) + int(round(cnt[code]))
        ok &= ~bad
    return ok


def _ep_choices(settings: Settings, opts: SpaceOptions) -> np.ndarray:
    """The EP axis: divisors of the routed experts (1 for a dense model, or where the stack has
    no expert parallelism and none is pinned)."""
    model = settings.model
    has_ep = settings.stack is None or settings.stack.expert_parallel is not None
    n_experts = model.moe.num_experts if model.moe is not None and (has_ep or opts.ep) else 1
    return _axis(_divisors(n_experts), opts.ep, opts.max_ep)


def _ep_ok(mesh: dict, EP: np.ndarray, opts: SpaceOptions) -> np.ndarray:
    """(mesh x ep) an EP degree that can fold into the mesh's tp*dp*cp ranks (with etp 1, the
    smallest expert TP); a pinned --ep is taken as given (resolve's rules say which divide)."""
    ok = (mesh["tp"] * mesh["dp"] * mesh["cp"])[:, None] % EP[None, :] == 0
    return ok | bool(opts.ep)


def _etp_choices(settings: Settings, opts: SpaceOptions) -> np.ndarray:
    """The expert-TP axis: a pinned --etp as given; on an MoE model whose stack has expert TP of
    its own (stack_db runs.expert_tensor_parallel) the divisors of the NVLink domain (as tp,
    kept to those dividing the mesh's tp by _etp_ok), else 0 (= tp)."""
    runs = settings.stack.runs if settings.stack is not None else None
    own = settings.model.moe is not None and runs is not None and runs.expert_tensor_parallel is not None
    if opts.etp:
        return np.asarray(sorted(set(opts.etp)), dtype=np.int64)
    if settings.model.moe is not None and runs is not None and runs.etp_one_under_ep:
        return np.array([0, 1], dtype=np.int64)  # tp without EP, 1 under EP (_etp_ok keeps one per mesh)
    if not own:
        return np.zeros(1, dtype=np.int64)
    return _axis(_divisors(settings.hardware.nvlink_domain), None, opts.max_etp)


def _etp_ok(mesh: dict, ETP: np.ndarray, opts: SpaceOptions, one_under_ep: bool = False) -> np.ndarray:
    """(mesh x etp) etp x ep divides tp*dp*cp; searched (not pinned) values also divide tp (the
    layouts the trainers' recipes use: expert TP 1 .. tp; a pinned --etp may be any value the
    rules allow: resolve's EP_DPCP rule, checked on every candidate, says which). one_under_ep
    (stack_db runs.etp_one_under_ep, _etp_choices' 0 and 1): 0 (= tp) without EP, 1 under EP, one
    candidate a mesh."""
    tp = mesh["tp"][:, None]
    etp = np.where(ETP[None, :] > 0, ETP[None, :], tp)
    if opts.etp:
        return np.ones((len(tp), len(ETP)), dtype=bool)
    if one_under_ep:
        return (ETP[None, :] == 1) == (mesh["ep"][:, None] > 1)
    ok = (tp * (mesh["dp"] * mesh["cp"])[:, None]) % (etp * mesh["ep"][:, None]) == 0
    return (ok | bool(opts.ep)) & (tp % etp == 0)  # a pinned --ep: resolve's EP_DPCP rule says which divide


def _recompute_runnable(settings: Settings, RC: np.ndarray, reasons: dict, valid: int) -> np.ndarray:
    """The recompute choices the trainer's start-up rules leave: the base rows are checked at
    recompute none, so a rule on the recompute mode alone (a job setting's, every row alike:
    startup.MEGATRON_MOE_ACT_GROUPED_GEMM, selective; the job's per-layer CUDA graphs, full:
    plan.GRAPHS_FULL_RECOMPUTE) drops its choice here, its `valid` base candidates (rows x
    orders) counted under the rule."""
    from .plan import GRAPHS_FULL_RECOMPUTE, RC_FULL, RC_SELECTIVE
    from .startup import CODES, moe_act_ungrouped, recompute_runs, rules_for, spmd_sac_flex

    # the job's per-layer CUDA graphs refuse full recompute (planner/cuda_graphs.py, Megatron-Core's check): the
    # search leaves it out; a job that pins full recompute alone is refused by resolve, naming the check
    if settings.cuda_graph_impl in ("local", "transformer_engine") and RC_FULL in RC and len(RC) > 1:
        if valid:
            reasons[GRAPHS_FULL_RECOMPUTE] = reasons.get(GRAPHS_FULL_RECOMPUTE, 0) + valid
        RC = RC[RC != RC_FULL]
    # the granularities the stack's code lacks (stack_db runs.recompute: Megatron-LM 2021 has no selective recompute),
    # start-up rule STACK_RECOMPUTE; a --recompute that names one is refused before (_check_features)
    have = recompute_runs(settings.stack)
    if have is not None:
        lacks = ~isin(RC, np.asarray([RECOMPUTE_CODES[g] for g in have], dtype=np.int64))
        if lacks.any():
            if valid:
                reasons[CODES["STACK_RECOMPUTE"]] = reasons.get(CODES["STACK_RECOMPUTE"], 0) + valid * int(lacks.sum())
            RC = RC[~lacks]
    # the rules on selective recompute alone: Megatron's moe_act without grouped GEMMs, torchtitan 0.3's SPMD type
    # checking over FlexAttention (startup.TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX)
    ours = dict(rules_for(settings.stack))
    for key, on in (("MEGATRON_MOE_ACT_GROUPED_GEMM", moe_act_ungrouped(settings.stack)),
                    ("TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX", spmd_sac_flex(settings.stack))):
        code = CODES[key]
        if not on or code not in ours or RC_SELECTIVE not in RC:
            continue
        if valid:
            reasons[code] = reasons.get(code, 0) + valid
        RC = RC[RC != RC_SELECTIVE]
    return RC


def _check_names(precision: str, opts: SpaceOptions, runs=None) -> int:
    """The precision's code; PlannerError for a precision, sharding or recompute name the
    planner does not know (a sharding name is a level or one of the stack's modes)."""
    if precision not in PRECISION_CODES:
        raise PlannerError(f"unknown --precision {precision!r}", f"valid: {', '.join(PRECISION_CODES)}")
    prec = PRECISION_CODES[precision]
    modes = [m.name for m in runs.sharding] if runs is not None else []
    for n in opts.sharding or ():
        if n not in SHARDING_CODES and n not in modes:
            raise PlannerError(f"unknown --sharding {n!r}", f"valid: {', '.join(list(SHARDING_CODES) + modes)}")
    for r in opts.recompute or ():
        if r not in RECOMPUTE_CODES:
            raise PlannerError(f"unknown --recompute {r!r}", f"valid: {', '.join(RECOMPUTE_CODES)}")
    return prec


def recompute_choices(settings: Settings, opts: SpaceOptions, where: str = "") -> tuple[str, ...]:
    """The recompute names the search tries: the pinned ones (--recompute), else every one; full only where the
    job sets a FULL_ONLY_FIELDS field (settings_for lays them on the Settings), which fixes recompute full: a pin
    naming another is refused (exit 2), since its rows would price the field at a recompute that never reads it."""
    full_only = [k for k in FULL_ONLY_FIELDS if getattr(settings, k) != FULL_ONLY_FIELDS[k]]
    if not full_only:
        return tuple(opts.recompute or RECOMPUTE_CODES)
    other = [r for r in opts.recompute or () if r != "full"]
    if other:
        shown = " and ".join(f"{k} {getattr(settings, k)}" if k == "recompute_layers" else k for k in full_only)
        raise PlannerError(f"{where}--recompute {','.join(opts.recompute)}: the job's {shown} "
                           f"{'is' if len(full_only) == 1 else 'are'} full recompute's "
                           f"(explain refuses it at recompute {other[0]}, as Megatron-LM refuses "
                           f"a --recompute-method at granularity selective: NVIDIA/Megatron-LM @d98e8a64 "
                           f"megatron/training/arguments.py l. 1425-1427): the job fixes recompute full",
                           f"use --recompute full, or leave --recompute out, or remove {' and '.join(full_only)}")
    return ("full",)


def _check_features(stack, opts: SpaceOptions) -> None:
    """PlannerError (exit 2) for a pinned --recompute granularity or --sequence-parallel the stack's code lacks
    (stack_db runs.recompute, runs.sequence_parallel: start-up rules STACK_RECOMPUTE, STACK_SEQUENCE_PARALLEL), naming
    the stack, the field and what it has; searched, fit counts such candidates instead."""
    from .startup import recompute_runs, stack_lacks_sp

    have = recompute_runs(stack)
    lacking = [r for r in opts.recompute or () if have is not None and r not in have]
    if lacking:
        raise PlannerError(f"--recompute {','.join(lacking)} on stack {stack.name}, whose code has recompute "
                           f"{', '.join(have)} only ({stack.origin} runs.recompute: "
                           f"{'; '.join(stack.runs.recompute.sources)})",
                           f"use --recompute {' or '.join(have)}, or leave --recompute out (fit searches those), or "
                           "choose another --stack")
    if opts.sequence_parallel and stack_lacks_sp(stack):
        raise PlannerError(f"--sequence-parallel on stack {stack.name}, whose code has no sequence parallelism "
                           f"({stack.origin} runs.sequence_parallel supported false: "
                           f"{'; '.join(stack.runs.sequence_parallel.sources)})",
                           "leave --sequence-parallel out (fit plans SP off on this stack), or choose another --stack")


def _mesh(settings: Settings, seq: int, opts: SpaceOptions, U: int, reasons: dict) -> dict:
    """The (tp, cp, pp, dp) meshes that divide the GPUs (tp: divisors of the NVLink domain, cp:
    of the sequence, pp up to the split units U), as arrays; the others counted in reasons."""
    hw, gpus, i64 = settings.hardware, settings.gpus, np.int64
    # ---- mesh (tp, cp, pp): product of three short lists; dp = gpus / (tp cp pp)
    T = _axis(_divisors(hw.nvlink_domain), opts.tp, opts.max_tp)
    C = _axis(_divisors(seq)[_divisors(seq) <= gpus], opts.cp, opts.max_cp)
    # pp runs 1 .. layers (+ the ends counted in the split); a pp above the GPU count never
    # divides it (a MESH candidate per (tp, cp)): those are counted, not listed, so a model of
    # many layers costs no memory
    p_top = min(U, opts.max_pp) if opts.max_pp is not None else U
    P = _axis(np.arange(1, min(p_top, gpus) + 1, dtype=i64), opts.pp, opts.max_pp)
    p_over = 0 if opts.pp else max(p_top - gpus, 0)
    _guard(len(T) * len(C) * len(P), f"{len(T):,} tp x {len(C):,} cp x {len(P):,} pp meshes "
           f"(tp: divisors of nvlink_domain {hw.nvlink_domain:,} of {hw.name}; cp: of seq_len {seq:,})", "pin --tp, --cp or --pp")
    tp, cp, pp = (x.ravel() for x in np.meshgrid(T, C, P, indexing="ij"))
    inner = tp * cp * pp
    divides = gpus % inner == 0
    if (~divides).any() or p_over:
        # one candidate per mesh: it has no dp to expand
        reasons[MESH] = int((~divides).sum()) + len(T) * len(C) * p_over
    dp = np.where(divides, gpus // inner, 0)
    keep = divides.copy()
    if opts.dp:
        keep &= isin(dp, np.asarray(opts.dp, dtype=i64))
    if opts.max_dp is not None:
        keep &= dp <= opts.max_dp
    mesh = {"tp": tp[keep], "cp": cp[keep], "pp": pp[keep], "dp": dp[keep]}
    return mesh


MUON_LEVELS = ("none", "zero1")  # the sharding levels Megatron-LM @d98e8a64 runs --optimizer muon under (plan._optimizer)
# the level optimizer_whole_tensors (--no-use-layer-wise-param-layout) runs at: Muon's layer-wise distributed optimizer
# (--optimizer muon --use-distributed-optimizer, arguments.py @d98e8a64 l. 1725-1737; plan._optimizer refuses it elsewhere)
WHOLE_TENSOR_LEVELS = ("zero1",)


def _sharding_choices(settings: Settings, opts: SpaceOptions, mesh: dict, runs):
    """Per mesh, the levels below the micro-batch: (SP values, SP allowed per mesh, sharding
    option codes, their modes, their shard groups per mesh, sharding option allowed per
    mesh). On a stack that lists its modes (stack_db runs.sharding) one option per mode that
    heads its pricing class (mode_heads) for the mesh's pp, else one per level; HSDP once per
    shard group that divides dp."""
    M, gpus, i64 = len(mesh["tp"]), settings.gpus, np.int64
    # per-mesh multiplicity of the levels below the micro-batch: SP choices x sharding options
    sp_vals = SP_OFF_ON if opts.sequence_parallel is None else np.array([int(opts.sequence_parallel)], dtype=i64)
    sp_ok = np.ones((M, len(sp_vals)), dtype=bool)
    if opts.sequence_parallel is None:
        sp_ok[:, 0] = mesh["tp"] > 1  # SP is searched where there is TP to split across
    names = opts.sharding or tuple(n for n in SHARDING_CODES if runs is None or any(m.level == n for m in runs.sharding))
    if getattr(settings, "optimizer", "adam") == "muon":  # a job setting: Megatron runs Muon under DDP or its layer-wise
        # distributed optimizer only (plan._optimizer: arguments.py @d98e8a64 l. 1739-1740), never FSDP
        names = tuple(n for n in names if n in MUON_LEVELS)
    if getattr(settings, "optimizer_whole_tensors", False):  # a job setting: its rows are the layer-wise optimizer's
        names = tuple(n for n in names if n in WHOLE_TENSOR_LEVELS)
    elif getattr(settings, "optimizer", "adam") == "muon" and not muon_param_layout(settings.stack):
        # a stack setting (runs.optimizers muon_param_layout false: Bridge's 905c0e386): its zero1 Muon is the
        # whole-tensor path only, the job's optimizer_whole_tensors (plan._optimizer refuses the layout there)
        if opts.sharding and set(opts.sharding) <= set(WHOLE_TENSOR_LEVELS):
            raise PlannerError(muon_layout_missing(settings.stack), "add --optimizer-whole-tensors (each parameter "
                               "whole on one rank, as that code runs it), or search --sharding none")
        names = tuple(n for n in names if n not in WHOLE_TENSOR_LEVELS)
    if runs is None:
        codes = np.array([SHARDING_CODES[n] for n in SHARDING_CODES if n in names], dtype=i64)
        modes, head_ok = np.zeros(len(codes), dtype=i64), np.ones((M, len(codes)), dtype=bool)
    else:
        # the heads of the levels named (or all), and any mode named itself (--sharding MODE)
        heads = mode_heads(settings.stack, settings.bpp, mode_decoupled(settings), bool(settings.remainders))
        named = np.array([m.name in names for m in runs.sharding])
        modes = np.array([i for i, m in enumerate(runs.sharding) if named[i] or (
            m.level in names and (heads[0, i] == i or heads[1, i] == i))], dtype=i64)
        codes = np.array([SHARDING_CODES[runs.sharding[i].level] for i in modes], dtype=i64)
        head_ok = (heads[(mesh["pp"] > 1).astype(i64)][:, modes] == modes[None, :]) | named[modes][None, :]
    plain = codes != HSDP
    if not (~plain).any():
        G = np.zeros(0, dtype=i64)
    elif opts.shard_group:
        G = np.asarray(sorted(set(opts.shard_group)), dtype=i64)
    else:
        G = _divisors(gpus)
    dpc = mesh["dp"][:, None]
    if opts.shard_group:
        g_ok = np.ones((M, len(G)), dtype=bool)  # pinned: resolve's rule says which divide dp
    else:
        # shard group 1 (replicas of FSDP over one rank) only where the stack's trainer runs FSDP over one rank
        # (stack_db runs.fsdp_one_rank: torchtitan 0.3.0's replicate-only mesh); elsewhere it is no sharding
        # paying FSDP's traffic, which no trainer runs
        least = 1 if fsdp_one_rank(settings.stack) else 2
        g_ok = (dpc % G[None, :] == 0) & (G[None, :] >= least) & (G[None, :] < dpc)
    hs = np.flatnonzero(~plain)  # each HSDP mode once per shard group
    opt_code = np.concatenate([codes[plain], np.repeat(codes[hs], len(G))])
    opt_mode = np.concatenate([modes[plain], np.repeat(modes[hs], len(G))])
    opt_group = np.concatenate([np.zeros(int(plain.sum()), dtype=i64), np.tile(G, len(hs))])
    opt_shard = np.where(opt_code[None, :] == HSDP, opt_group[None, :], dpc)
    sh_ok = np.concatenate([head_ok[:, plain]] + [head_ok[:, [h]] & g_ok for h in hs], axis=1)
    return sp_vals, sp_ok, opt_code, opt_mode, opt_shard, sh_ok


def _pipeline_rows(settings: Settings, opts: SpaceOptions, mesh: dict, U: int, counted: int, runs):
    """(rows of mesh x vpp (x schedule), vpp allowed per mesh, the splits dropped for their
    layer slack): vpp per pp within the split units U and the layer-slack bound, one chunk per
    rank on a stack without the interleaved schedule; the schedule pinned or the stack's."""
    model, M, i64 = settings.model, len(mesh["tp"]), np.int64
    L = model.num_layers
    # ---- pipeline split: vpp per pp (x schedule when listed)
    if opts.vpp:
        V = np.asarray(sorted(set(opts.vpp)), dtype=i64)
        v_ok = np.ones((M, len(V)), dtype=bool)
    else:
        piped = mesh["pp"][mesh["pp"] > 1]  # pp = 1 takes vpp = 1 only
        v_top = U // int(piped.min()) if len(piped) else 1
        if opts.max_vpp is not None:
            v_top = min(v_top, opts.max_vpp)
        _guard(M * v_top, f"{M:,} meshes x {v_top:,} virtual stages (vpp up to num_layers {L:,} of model {model.name} / pp)",
               "pin --vpp or --pp, or bound them with --max-vpp / --max-pp")
        V = np.arange(1, max(v_top, 1) + 1, dtype=i64)
        limit = np.where(mesh["pp"] == 1, 1, U // np.maximum(mesh["pp"], 1))
        v_ok = V[None, :] <= limit[:, None]
    if opts.max_vpp is not None:
        v_ok &= V[None, :] <= opts.max_vpp
    slack_ok = layer_slack(L, mesh["pp"][:, None], V[None, :], counted) <= opts.max_layer_slack
    if opts.pp:
        # a pinned pipeline split is the user's, not searched: offered however unevenly the layers
        # fall (explain prices any split, with a warning), with one chunk per rank unless --vpp is
        # pinned too; the slack bound prunes the splits the search chooses
        slack_ok |= (V[None, :] == 1) if not opts.vpp else True
    for p, v in opts.splits:  # the few splits searched past the slack bound (SpaceOptions.splits)
        slack_ok |= (mesh["pp"][:, None] == p) & (V[None, :] == v)
    slack_dropped = int((v_ok & ~slack_ok).sum())
    v_ok &= slack_ok
    if runs is not None and not any(x.schedule == "interleaved" for x in runs.schedules) and not opts.schedule:
        v_ok &= V[None, :] == 1  # no interleaved schedule on this stack: one model chunk per rank
    rows = _expand({"mesh": np.arange(M, dtype=i64)}, v_ok, {"vpp": V})
    placed = stage_placements(settings, mesh["pp"].take(rows["mesh"]), rows["vpp"])
    if placed is not None:  # where the layers left over go (stack_db pipeline_stage_layers)
        rows = _expand(rows, placed[0], {"split_first": placed[1], "split_last": placed[2]})
    if opts.schedule:
        S = np.asarray(sorted({schedule_code(x) for x in opts.schedule}), dtype=i64)
        rows = _expand(rows, np.ones((len(rows["vpp"]), len(S)), dtype=bool), {"schedule": S})
    else:
        # one chunk per rank: the stack's first listed schedule that is not interleaved (1F1B
        # where the stack does not say, or lists 1F1B first; DualPipe on the deepseek stack)
        plain = schedule_code(default_schedule(settings.stack, 1))
        rows["schedule"] = np.where(rows["vpp"] > 1, INTERLEAVED, plain).astype(i64)
    return rows, v_ok, slack_dropped


def stage_placements(settings: Settings, pp: np.ndarray, vpp: np.ndarray):
    """Where a pipeline row's left-over layers go, on a stack whose trainer takes the end stages' layers as settings
    (stack_db pipeline_stage_layers: Megatron-LM's --decoder-first/last-pipeline-num-layers, pipeline.py [14]):
    (allowed (R, 3), first_stage_layers (R, 3), last_stage_layers (R, 3)), or None where the job has no such choice.

    A split of L layers on pp stages of c = ceil(L / pp) leaves s = pp c - L slots empty. Choice 0 is the stack's own
    split (first = last = 0: pipeline.stage_layers takes ceil(s / 2) off the first stage and floor(s / 2) off the
    last, as Megatron spells it with these flags, export.megatron_split_args); choice 1 takes all s off the first
    stage (first c - s, last c), which holds the most micro-batches in flight (1F1B: pp, [Narayanan et al. 2021]
    sec. 2.2.1) and so the most activations; choice 2 all s off the last (first c, last c - s), the stage that also
    runs the output layer and the loss. The middle stages hold c each in all three (L - first - last = (pp - 2) c:
    Megatron-Core's rule that the middle ranks share the rest equally, transformer_config.py @d98e8a64 l.
    2294-2368), so the middle stages are the same in all three and only the end stages' memory and time move.

    Each is offered only where it can beat choice 0 (a placement beaten on both time and memory would only add rows
    to price, fit's speed): choice 2 where s = 1: choice 0 then trims the first stage and leaves the last c layers plus
    the output layer and the loss, the heaviest stage; choice 2 moves the slot there (c - 1 plus the output) and gives
    the first stage c plus the embedding, a lookup. At s >= 2 choice 0's last stage already holds c - floor(s / 2)
    layers plus the output, and choice 2 would only load the first stage (not searched: a model whose output layer
    weighs more than a transformer layer could gain). Choice 1 never runs faster than choice 0 (its last stage
    holds c layers plus the output), only lighter on the first stage: where s >= 2 and that stage's activations
    are the peak, 1F1B's pp micro-batches in flight on the first stage against pp - 1 on the second
    (pipeline.inflight_microbatches, [Narayanan et al. 2021] sec. 2.2.1): pp (c - ceil(s / 2)) > (pp - 1) c, i.e.
    c > pp ceil(s / 2). Choice 2 not at pp 2 (fit's speed, a choice of this search and not a cost argument: on
    DeepSeek-V3 / 2,048 H800 the pp 2 rows are most of the space, and the second placement made fit 18% slower;
    explain and check price it, --first-stage-layers / --last-stage-layers). Each where the trimmed stage keeps a layer
    (Megatron: each count > 0). One chunk per rank only (vpp 1): with vpp chunks the stack's split trims the end
    chunks, spelled as --pipeline-model-parallel-layout, and these flags need each end's count a multiple of vpp
    (l. 2302-2316). Not beside the ends counted as layers
    (account_for_*_in_pipeline_split: Megatron refuses both together, l. 2229-2239) nor the job's own first / last
    stage layers (held on every candidate: settings_for)."""
    stack = settings.stack
    if (stack is None or not stack.pipeline_stage_layers or settings.split_first or settings.split_last
            or settings.split_emb or settings.split_loss):
        return None
    L = np.int64(settings.model.num_layers)
    pp, vpp = np.asarray(pp, dtype=np.int64), np.asarray(vpp, dtype=np.int64)
    c = -(-L // np.maximum(pp, 1))
    s = pp * c - L
    split = (pp >= 2) & (vpp == 1) & (c - s >= 1)
    first_peak = c > pp * ((s + 1) // 2)  # the first stage's activations the peak (docstring)
    allowed = np.stack([np.ones(len(pp), dtype=bool), split & (s >= 2) & first_peak, split & (s == 1) & (pp >= 3)],
                       axis=1)
    zero = np.zeros(len(pp), dtype=np.int64)
    first = np.stack([zero, c - s, c], axis=1)
    last = np.stack([zero, c, c - s], axis=1)
    return allowed, first, last


def _bounded(settings: Settings, opts: SpaceOptions) -> SpaceOptions:
    """The options as build_space searches them: bounded by the stack (stack_bounds), early_step_in_backward and
    eager attention; a job setting fit does not search refused (no_offload_search)."""
    opts = stack_bounds(settings.stack, opts)
    no_offload_search(settings)
    return eager_cp_bounds(settings, early_step_bounds(settings, opts))


def batch_divides(settings: Settings, gbs: int, seq: int, opts: SpaceOptions = SpaceOptions()) -> bool:
    """Whether some (tp, cp, pp) mesh of build_space's (the same axes, pins and bounds) divides the GPUs with a dp
    that, times one of the searched micro-batches, divides the global batch gbs: false means every candidate of
    build_space(settings, gbs, seq, ..., opts) breaks MESH or BATCH (plan.rule_codes' first two rules), so it has
    no valid row, without building it (search.nearest_working tries up to 2 x NEAREST_TRIES GPU counts and
    batches; a few hundred microseconds a try against milliseconds for a space). A necessary condition only: true
    does not mean a valid plan exists (the other rules, expert parallelism and a batch ramp's phases are the
    space's to check)."""
    counted = settings.split_emb + settings.split_loss
    opts = _bounded(settings, opts)
    mesh = _mesh(settings, seq, opts, settings.model.num_layers + counted, {})
    MB = _axis(_divisors(gbs), opts.micro_batch, opts.max_micro_batch)
    return bool((gbs % (mesh["dp"][:, None] * MB[None, :]) == 0).any())


def build_space(settings: Settings, gbs: int, seq: int, precision: str = "bf16",
                opts: SpaceOptions = SpaceOptions(), variants: np.ndarray | None = None) -> Space:
    """Every candidate of the search (module docstring): the valid ones as arrays, the
    broken ones counted by the first rule they break."""
    counted = settings.split_emb + settings.split_loss  # ends counted as layers of the split
    U = settings.model.num_layers + counted  # pipeline split units (pipeline.stage_layers)
    i64 = np.int64
    prec = _check_names(precision, opts, settings.stack.runs if settings.stack is not None else None)
    _check_features(settings.stack, opts)
    RC = np.array(sorted({RECOMPUTE_CODES[r] for r in recompute_choices(settings, opts)}), dtype=i64)
    O = order_choices(opts.rank_orders)
    reasons: dict = {}
    runs = settings.stack.runs if settings.stack is not None else None
    opts = _bounded(settings, opts)

    mesh = _mesh(settings, seq, opts, U, reasons)
    # ---- expert parallelism: divisors of the routed experts that divide tp*dp*cp (1 for a dense
    # model; 1 also where the stack has no expert parallelism: stack_db `expert_parallel`), then
    # expert TP (0 = tp) with etp x ep dividing tp*dp*cp (Megatron's folded expert grid)
    EP, ETP = _ep_choices(settings, opts), _etp_choices(settings, opts)
    mesh = _expand(mesh, _ep_ok(mesh, EP, opts), {"ep": EP})
    one_under_ep = bool(settings.model.moe is not None and settings.stack is not None and settings.stack.runs is not None
                        and settings.stack.runs.etp_one_under_ep)
    mesh = _expand(mesh, _etp_ok(mesh, ETP, opts, one_under_ep), {"etp": ETP})
    mesh_orders = distinct_orders(O, mesh["tp"], mesh["cp"], mesh["pp"], mesh["dp"])
    # only the orders the stack builds for each mesh are candidates (stack_db runs.rank_orders,
    # and the trainer's order rule: rules.order_ok); the first one the stack lists stands in for
    # the order while the other rules are checked
    from .startup import order_ok as _order_ok

    mesh_orders &= _order_ok(settings.stack, O[None, :], *(mesh[k][:, None] for k in ("tp", "cp", "pp", "dp", "ep", "etp")))

    sp_vals, sp_ok, opt_code, opt_mode, opt_shard, sh_ok = _sharding_choices(settings, opts, mesh, runs)
    below = sp_ok.sum(axis=1) * sh_ok.sum(axis=1) * len(RC)  # candidates per (mesh, vpp, schedule, mbs), before orders
    per_mesh = below * mesh_orders.sum(axis=1)

    rows, v_ok, slack_dropped = _pipeline_rows(settings, opts, mesh, U, counted, runs)
    # each pipeline row (mesh, vpp, schedule): with the sharding option and SP below, it gives every
    # field of a base row but the micro-batch (choose_modes' key)
    rows["prow"] = np.arange(len(rows["vpp"]), dtype=i64)
    # the pipeline rows of each mesh (vpp x stage placement x schedule), each crossed with every micro-batch below
    splits = np.bincount(rows["mesh"], minlength=len(per_mesh))

    # ---- micro-batch; the rules that need no SP or sharding, counted with their multiplicity
    MB = _axis(_divisors(gbs), opts.micro_batch, opts.max_micro_batch)
    _guard(len(rows["vpp"]) * len(MB), f"{len(rows['vpp']):,} pipeline splits x {len(MB):,} micro-batch sizes "
           f"(divisors of the global batch {gbs:,})", "pin --micro-batch, --pp or --vpp")
    # BATCH, the first rule after MESH (which every mesh here passes): a (row, micro-batch) pair whose dp x
    # micro-batch does not divide the global batch breaks it whatever else the pair holds, so it is counted here,
    # with its multiplicity (per_mesh), and not listed: the other rules are checked on the pairs that divide only
    # (the same pairs in the same order as listing every one and dropping those the rules break)
    divides = gbs % (mesh["dp"].take(rows["mesh"])[:, None] * MB[None, :]) == 0
    n_batch = int((per_mesh.take(rows["mesh"]) * (len(MB) - row_counts(divides))).sum())
    if n_batch:
        reasons[BATCH] = reasons.get(BATCH, 0) + n_batch
    rows = _expand(rows, divides, {"mbs": MB})
    rows.update({k: v[rows["mesh"]] for k, v in mesh.items()})
    codes = constraint_codes(settings, _plan(rows, gbs, seq, prec, settings), upto=LAST_BATCH_RULE)
    _count(reasons, codes, per_mesh[rows["mesh"]].astype(np.float64))
    keep = codes == OK
    rows = {k: v[keep] for k, v in rows.items()}
    if settings.batch_schedule:  # a batch ramp: every phase's batch passes the batch rules too
        keep = _phase_codes(settings, rows, gbs, seq, prec, reasons, per_mesh[rows["mesh"]])
        rows = {k: v[keep] for k, v in rows.items()}

    # ---- sharding options, then SP; the mesh's columns (each row's mesh[k][rows["mesh"]]) are not
    # carried through the two expansions but read again from the mesh after them (the same values)
    for k in mesh:
        del rows[k]
    mid = rows["mesh"]
    _guard(int(sh_ok[mid].sum()) * len(sp_vals), f"{len(mid):,} plans x sharding options x SP",
           "pin --sharding, --micro-batch or --pp")
    rows = _expand(rows, sh_ok[mid], {"sharding": opt_code, "smode": opt_mode, "shard": opt_shard[mid],
                                      "shopt": np.arange(len(opt_code), dtype=i64)})
    rows = _expand(rows, sp_ok[rows["mesh"]], {"sp": sp_vals, "spopt": np.arange(len(sp_vals), dtype=i64)})
    rows.update({k: v.take(rows["mesh"]) for k, v in mesh.items()})
    base = _plan(rows, gbs, seq, prec, settings)
    if variants is None:  # the stack's defaults for a search without a job (tests): no TP overlap
        variants = np.array([[0, 0, 1, 0, int(settings.fp8_grouped_experts)]], dtype=np.int64)
    fill_variant(base, variants[0])  # variant 0 is every candidate's own setting
    if runs is not None:
        base.order = _constant(len(base.tp), order_code(runs.rank_orders[0].order))
    codes = choose_modes(settings, base, (rows["prow"] * len(opt_code) + rows["shopt"]) * len(sp_vals) + rows["spopt"])
    order_ok = mesh_orders[rows["mesh"]]
    from .startup import CODES as _CODES, mode_order_ok

    # the orders a row's sharding mode runs (STACK_MODE_TP_PP_DP): only on a stack with a mode that refuses some
    restricted = runs is not None and not all(m.tp_pp_dp_mapping for m in runs.sharding)
    by_mode = mode_order_ok(settings.stack, base, O) if restricted else None
    if by_mode is not None and not by_mode.all():
        dropped = row_counts(order_ok & ~by_mode) * (codes == OK)
        _count(reasons, np.full(len(dropped), _CODES["STACK_MODE_TP_PP_DP"]), (dropped * len(RC)).astype(np.float64))
        order_ok = order_ok & by_mode
    _count(reasons, codes, (row_counts(order_ok) * len(RC)).astype(np.float64))
    asked = RC
    RC = _recompute_runnable(settings, RC, reasons, int(row_counts(order_ok)[codes == OK].sum()))
    considered = int(reasons.get(MESH, 0)) + int((per_mesh * splits * len(MB)).sum())
    return Space(settings=settings, base=base, codes=codes, recompute=RC, orders=O, order_ok=order_ok,
                 reasons=reasons, considered=considered, slack_dropped=slack_dropped, variants=variants,
                 recompute_asked=asked, phases=phase_weights(settings.batch_schedule, gbs, seq, settings.tokens)
                 if settings.batch_schedule and settings.tokens else ())
