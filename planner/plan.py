"""Resolve a Job (CLI options or job.yaml) into a validated plan.

`ParallelDims` checks tp * cp * pp * dp == gpus and lists every factor when it does not
(after torchtitan's ParallelDims). `PlanArrays` is the struct of arrays the cost models
take: one plan as 0-d values for `explain`, a million as 1-d arrays for `search`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional, get_args

import numpy as np

from .catalog import hardware_source, hf_assumed, load_hardware, load_model, load_stack, model_source
from .errors import PlannerError
from .recompute_modules import RC_FULL, RC_NONE, RC_SELECTIVE, apply_modules, moe_grouped_gemm_on  # noqa: F401 (the recompute codes: defined there)
from .cuda_graphs import cuda_graph_error
from .cp_comm_type import apply_cp_comm_type, exported_cp_comm_type, exported_hierarchical_sizes
from .cp_comm_type import ignored_at_cp1 as cp_variant_ignored
from .cp_rotate import apply_rotate_method, exported_rotate_method
from .cp_rotate import ignored_at_cp1 as rotate_ignored
from .cp_rotate import ignored_on_stack as rotate_ignored_on_stack
from .te_version import TE_OLDEST, TE_OLDEST_HINT, te_newer_note, te_release, te_too_old
from .comm import ORDER_NAMES, SIMPLE, nccl_algo_candidates, nccl_proto_protocols, order_code
from .pipeline import INTERLEAVED, SCHEDULE_CODES, SCHEDULE_NAMES, SPLIT_CODES, plan_stage_layers, stage_layers
from .power import DEEP_CAP_FRACTION, power_limit, power_rate_fraction
from .imbalance import rank_load
from .terms import isin
from .knobs import IDENTITY_KNOBS, RunKnobs  # planner/profile.py's pydantic models load only with a profile
from .offload import HOST_MEMORY_EFFICIENCY

if TYPE_CHECKING:
    from .profile import CalibrationProfile
from .schema import (BYTES_PER_PARAM_PRESETS, MAX_COUNT, MODE_SETTING_DEFAULTS, BytesPerParam, CPLoadBalancer, Hardware, Job,
                     ModelSpec, Stack, split_fields, ZERO3_KEYS)
from .startup import (BY_CODE, cluster_of, stack_lacks_sp, stack_sp_norm_grads_unreduced, CODES as BY_CODE_KEYS, layer_kinds_assumed, megatron_checks, model_code, model_code_assumed, model_code_compile_note, rules_for,
                      split_overdrawn, stack_order_ok)

# Integer codes, so that a search can hold choices in int64 arrays.
NONE, ZERO1, ZERO2, FSDP, HSDP = 0, 1, 2, 3, 4
SHARDING_CODES = {"none": NONE, "zero1": ZERO1, "zero2": ZERO2, "fsdp": FSDP, "hsdp": HSDP}
SHARDING_NAMES = {v: k for k, v in SHARDING_CODES.items()}
RECOMPUTE_CODES = {"none": RC_NONE, "selective": RC_SELECTIVE, "full": RC_FULL}
RECOMPUTE_NAMES = {v: k for k, v in RECOMPUTE_CODES.items()}
# precisions and low-precision recipes: the one vocabulary is planner/precisions.py
from .precisions import (BF16, FP8, FP8_RECIPE_CODES, FP8_RECIPES, NVFP4, PRECISION_CODES,  # noqa: E402,F401
                         RECIPE_PEAK, recipe_precision, recipe_unsupported)

DEFAULT_CAPACITY_FACTOR = 1.0  # MoE: perfectly balanced routing (planner/moe.py, "Load imbalance")
from .defaults import DEFAULT_GLOBAL_BATCH_TOKENS  # noqa: E402,F401 (the seed's batch, sec. 2.1: planner/defaults.py)
# The training length of a job that gives no seq_len (issue 24). A model's context (a Hugging Face
# config's max_position_embeddings, a model entry's max_seq_len) is the context it serves, often
# extended after pre-training, not the length it trains at: DeepSeek-V3's config says 163,840, its
# pre-training ran 4K sequences (DeepSeek-V3 Technical Report, arXiv:2412.19437, sec. 4.2
# "Hyper-Parameters": "We set the maximum sequence length to 4K during pre-training"); Gemma 3's
# serves 131,072 after pre-training at 32K (arXiv:2503.19786 sec. 5.3). The rule, one for every model
# source (plan._seq_len):
#   1. the job's seq_len (option, job file, trainer config, run record) always wins;
#   2. a job planned from options, a job file or code takes the length the developers published
#      for the main phase of pre-training, the model entry's training.seq_len (the recipe,
#      planner/recipe.py), listed as assumed with its citation; trainer configs and run records
#      never take the recipe (a trainer config without a length gets rule 3 when it is read:
#      trainers.default_trainer_seq);
#   3. otherwise the smaller of HF_DEFAULT_SEQ and the model's context: a context longer than
#      HF_DEFAULT_SEQ is not taken as a training length, and that default is listed as assumed.
# 4,096 is the main-phase pre-training length the developers of the catalog's long-context MoE models
# published (DeepSeek-V3 sec. 4.2; Qwen3 arXiv:2505.09388 sec. 3.2 stage S1; Kimi K2 arXiv:2507.20534
# sec. 2.5), each extending the context afterwards; it is a documented default, not a measurement.
HF_DEFAULT_SEQ = 4096


@dataclass(frozen=True)
class ParallelDims:
    gpus: int
    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int | None = None

    def resolved_dp(self, where: str = "") -> int:
        inner = self.tp * self.cp * self.pp
        factors = f"tp={self.tp} x cp={self.cp} x pp={self.pp}"
        if self.dp is not None:
            if inner * self.dp != self.gpus:
                raise PlannerError(
                    f"{where}{factors} x dp={self.dp} = {inner * self.dp}, not --gpus {self.gpus}",
                    "make the product of tp, cp, pp and dp equal the GPU count (or leave dp out to derive it)",
                )
            return self.dp
        if self.gpus % inner:
            raise PlannerError(
                f"{where}{factors} = {inner} does not divide --gpus {self.gpus}",
                f"tp*cp*pp must divide the GPU count; dp = gpus / (tp*cp*pp) (divisors of {self.gpus} near {inner}: "
                f"{', '.join(str(d) for d in _near_divisors(self.gpus, inner))})",
            )
        return self.gpus // inner


def _near_divisors(n: int, x: int) -> list[int]:
    divs = [d for d in range(1, min(n, 4 * x) + 1) if n % d == 0]
    return sorted(divs, key=lambda d: abs(d - x))[:4]


@dataclass
class PlanArrays:
    """One plan (0-d) or many (1-d), every field an integer array (int64)."""

    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    dp: np.ndarray
    mbs: np.ndarray  # sequences per micro-batch
    gbs: np.ndarray  # sequences per step
    seq: np.ndarray  # tokens per sequence
    sharding: np.ndarray  # SHARDING_CODES
    shard: np.ndarray  # DP ranks in one shard group (hsdp); = dp for fsdp
    recompute: np.ndarray  # RECOMPUTE_CODES
    sp: np.ndarray  # sequence parallel, 0/1
    schedule: np.ndarray  # pipeline.SCHEDULE_CODES
    precision: np.ndarray  # PRECISION_CODES
    order: np.ndarray = 0  # rank order code (comm.ORDER_CODES); 0 = tp-cp-pp-dp, TP innermost
    tpo: np.ndarray = 0  # TP communication overlap (Megatron --tp-comm-overlap, torchtitan async TP), 0/1
    compile: np.ndarray = 0  # torch.compile, 0/1
    dpo: np.ndarray = 1  # DP communication overlapped with compute, 0/1
    f8r: np.ndarray = 0  # fp8 recipe code (FP8_RECIPE_CODES), read where precision is fp8
    # MoE: the routed experts' grouped GEMMs run in the plan's low precision, 0/1 (job field fp8_grouped_experts, else
    # the stack's rule; fit searches it where the stack runs both, stack_db runs.fp8_grouped_experts; step.py [16]),
    # read where precision is fp8 / nvfp4 on an MoE model
    fge: np.ndarray = 1
    split_emb: np.ndarray = 0  # the embedding counts as a layer of the pipeline split, 0/1 (pipeline.stage_layers)
    split_loss: np.ndarray = 0  # layers of the split the output layer, loss and MTP count as, 0/1 or N (Job.loss_units)
    split_front: np.ndarray = 0  # the stack's split, pipeline.SPLIT_CODES: 0 trim_ends, 1 front, 2 bisection (Stack.pipeline_split)
    # transformer layers on the first / last pipeline stage, the rest equal over the middle stages (Job
    # first_stage_layers / last_stage_layers: Megatron-LM --decoder-first/last-pipeline-num-layers, pipeline.py [14]);
    # 0: the split above
    split_first: np.ndarray = 0
    split_last: np.ndarray = 0
    ep: np.ndarray = 1  # expert parallel degree (MoE models; planner/moe.py): etp x ep divides tp x dp x cp
    # which of the stack's sharding modes runs the plan (an index into stack_db runs.sharding; 0
    # for a stack without `runs`); the cost models price `sharding` (the mode's level) only
    smode: np.ndarray = 0
    etp: np.ndarray = 0  # expert tensor-parallel degree; 0 = tp (Megatron's default; planner/moe.py)
    # contiguous micro-batches per virtual stage, N (Job.microbatch_group: Megatron-LM's
    # --microbatch-group-size-per-virtual-pipeline-stage); 0 = the stack's rule (pipeline.microbatch_group)
    mbg: np.ndarray = 0
    # the MoE dispatcher each plan runs (dispatch.CODES), where fit's dispatcher search prices several in one
    # step_time call (search.step_times: the variant's dispatcher, Space.plans); -1: the Settings' moe_dispatcher.
    # Read by step.py and memory.py (dispatch_codes.dispatcher_rows and plan_dispatchers, with Settings.dispatcher_rows;
    # search._dispatchers_memory prices every dispatcher's memory in one call)
    disp: np.ndarray = -1

    def __post_init__(self):
        for name in _PLAN_FIELDS:
            v = getattr(self, name)
            if type(v) is not np.ndarray or v.dtype != np.int64:  # (np.asarray returns an int64 array as it is)
                setattr(self, name, np.asarray(v, dtype=np.int64))

    @property
    def microbatches(self) -> np.ndarray:
        """Micro-batches per pipeline per step, m = global batch / (dp * micro-batch)."""
        return self.gbs // (self.dp * self.mbs)

    def take(self, idx) -> "PlanArrays":
        n = np.shape(self.tp)
        idx = np.asarray(idx)
        if len(n) == 1 and idx.dtype.kind in "iu":
            # positions into 1-d columns (the search's blocks): the same values as below, by
            # take, and a scalar default filled rather than broadcast and indexed (faster); a constant
            # column (one value viewed n times, stride 0: space._constant, which take would first copy
            # whole) stays one, viewed at the positions (read-only, as the column it comes from)
            # (the dispatcher column `disp` left at its scalar default stays one value: every plan runs the
            # Settings' own dispatcher, which step.py and memory.py then read once (dispatch_codes), instead
            # of looking a column of -1s up)
            def at(v, name):
                if np.ndim(v) == 0:
                    return v if name == "disp" else np.full(idx.shape, v, dtype=np.int64)
                return np.broadcast_to(v[0], idx.shape) if v.strides == (0,) and len(v) else v.take(idx)

            return PlanArrays(**{f.name: at(getattr(self, f.name), f.name) for f in fields(self)})

        def at(v):  # a field left at its scalar default takes every candidate's value
            return (np.broadcast_to(v, n) if np.ndim(v) == 0 and len(n) else v)[idx]

        return PlanArrays(**{f.name: at(getattr(self, f.name)) for f in fields(self)})


_PLAN_FIELDS = tuple(f.name for f in fields(PlanArrays))  # (PlanArrays.__post_init__ converts each)

# ----------------------------------------------------------------- plan rules
OK = 0
(MESH, BATCH, HEADS, KV_HEADS, SEQ_CP, PP_LAYERS, VPP_SCHEDULE, INTERLEAVED_PP, INTERLEAVED_M, VPP_LAYERS,
 TP_OVERLAP_SP, SP_TP, HSDP_SHARD, SHARD_NOT_HSDP, TPO_COMPILE, SPLIT_UNITS) = range(1, 17)
EP_EXPERTS, EP_DPCP = 17, 18  # expert parallelism (planner/moe.py)
# what the stack can run (stack_db runs; issue 22), then its trainer's start-up rules
# (planner/startup.py, codes from startup.FIRST_CODE = 24)
STACK_SHARDING, STACK_SCHEDULE, STACK_ORDER, STACK_DEGREE, STACK_ETP = 19, 20, 21, 22, 23
# not a candidate rule: fit's recompute choices a job setting leaves (space._recompute_runnable), counted
# beside the rules; far above the start-up rules' codes (asserted below)
GRAPHS_FULL_RECOMPUTE = 999
REASONS = {
    MESH: "tp*cp*pp does not divide the GPU count",
    BATCH: "global batch does not divide into dp x micro-batch",
    HEADS: "tp does not divide the attention heads (or a mixer's heads or groups)",
    KV_HEADS: "tp and the KV heads do not divide one another",
    SEQ_CP: "cp does not divide the sequence length",
    PP_LAYERS: "more pipeline stages than layers",
    VPP_SCHEDULE: "vpp > 1 without the interleaved schedule",
    INTERLEAVED_PP: "interleaved schedule with pp < 2 or vpp < 2",
    INTERLEAVED_M: "interleaved schedule with micro-batches per step not divisible by pp",
    VPP_LAYERS: "pp*vpp exceeds the layers",
    TP_OVERLAP_SP: "TP-communication overlap without sequence parallelism",
    SP_TP: "sequence parallel with tp = 1",
    HSDP_SHARD: "hsdp shard group does not divide dp",
    SHARD_NOT_HSDP: "shard group without hsdp",
    TPO_COMPILE: "TP-communication overlap of this stack needs torch.compile",
    SPLIT_UNITS: "layers plus the embedding/loss counted in the split do not divide into pp*vpp chunks, or the first/last "
                 "stage layers (first_stage_layers / last_stage_layers) leave a split Megatron-Core refuses",
    EP_EXPERTS: "ep does not divide the routed experts (or the model has none)",
    EP_DPCP: "etp x ep does not divide tp x dp x cp (hsdp: tp x shard_group x cp): Megatron's folded expert grid",
    STACK_SHARDING: "the stack has no such sharding mode (stack_db runs.sharding)",
    STACK_SCHEDULE: "the stack does not run this pipeline schedule (stack_db runs.schedules)",
    STACK_ORDER: "the stack does not build this rank order (stack_db runs.rank_orders)",
    STACK_DEGREE: "a degree above the stack's largest (stack_db runs.max_*)",
    STACK_ETP: "an expert-TP degree other than tp on a stack without expert TP",
}


def _trainer_reasons() -> None:
    """fit's constraint counts name each start-up rule by its key and the file and function it
    cites (the source up to its quoted detail, which explain / check print in full when they
    refuse a job under the rule): one line in an 80-column terminal."""
    for code, r in BY_CODE.items():
        REASONS[code] = f"{r.text} ({r.key}: {r.source.split(' (')[0]})"


_trainer_reasons()
assert GRAPHS_FULL_RECOMPUTE not in REASONS
# planner/cuda_graphs.py _combination_error: the job's per-layer graphs refuse full recompute
REASONS[GRAPHS_FULL_RECOMPUTE] = ("full recompute with per-layer CUDA graphs (cuda_graph_impl local / transformer_engine): "
                                  "Megatron-Core runs full recompute with graphs only under full_iteration")
# not a candidate rule either: fit's tp that do not divide the job's padded_vocab_size (with_padded_vocab refuses it
# for one plan; search.vocab_mask counts the candidates under it), beside the rules
VOCAB_TP = 998
assert VOCAB_TP not in REASONS
REASONS[VOCAB_TP] = ("tp does not divide the job's padded_vocab_size: Megatron's vocab-parallel embedding splits the rows "
                     "evenly (tensor_parallel/utils.py VocabUtility, divide())")
# the rules that read only the mesh, the pipeline split and the micro-batch (not SP or sharding)
LAST_BATCH_RULE = VPP_LAYERS


def dp_overlap(stack, plan) -> np.ndarray:
    """The plan's DP overlap as it runs (0/1, vectorized): its dpo, except at pp > 1 on a stack whose pipeline runtime
    turns the overlap off (overlap.dp_comm_overlap_with_pp false: DeepSpeed's engine sets overlap_comm False for a
    PipelineModule, engine.py @38327e07 l. 1639-1642, stack_db megatron-deepspeed) and under a sharding mode whose
    optimizer has none (runs.sharding dp_comm_overlap_runs false: DeepSpeed's zero0 and bf16_optimizer, which never
    read overlap_comm, engine.py l. 1632, 1686, 1730, 1775). What memory ([zb]'s IPG buffers), step (the exposed DP
    time) and the plan's dp_comm_overlap read, so explain and fit price and show one value."""
    dpo = np.asarray(plan.dpo)
    if stack is None:
        return dpo
    if not stack.overlap.dp_comm_overlap_with_pp:  # a stack setting, not a searched quantity
        dpo = np.where(np.asarray(plan.pp) > 1, 0, dpo)
    runs = stack.runs
    if runs is not None and not all(m.dp_comm_overlap_runs for m in runs.sharding):
        col = np.array([m.dp_comm_overlap_runs for m in runs.sharding])
        dpo = np.where(~mode_at(plan, col, True), 0, dpo)  # a code no mode has: the plan's dpo
    return dpo


def mode_index(plan, col) -> np.ndarray:
    """Each plan's row of a per-mode column (its sharding mode, plan.smode; a negative code, no mode, takes the first
    and one past the stack's modes the last); `col` any sequence with a row a mode of runs.sharding (only its length
    is read). The cost models' lookup; mode_at reads a code outside the modes as no mode's (dp_overlap,
    optimizer_instances). Defined here, not in stacks.py (which re-exports it), as plan.py reads it and stacks imports plan."""
    return np.minimum(np.clip(np.asarray(plan.smode), 0, None), len(col) - 1)


def mode_at(plan, col, outside) -> np.ndarray:
    """Each plan's value of a per-mode column `col` (a row a mode of stack_db runs.sharding) at its sharding mode
    (plan.smode), `outside` where the code names none of the stack's modes (-1: the search found none, which rule_codes'
    STACK_SHARDING refuses): dp_overlap's and optimizer_instances' lookup. stacks.mode_index's (the cost models')
    differs there: it takes the first mode's row for a negative code and the last's for one past the modes.
    stack_rules' sharding rule reads its levels as this does (a code outside the modes breaks the rule), inline: a
    comparison with the plan's level, not a column's value."""
    smode = np.asarray(plan.smode)
    return np.where((smode >= 0) & (smode < len(col)), col[np.clip(smode, 0, len(col) - 1)], outside)


def mla_drops_tp_overlap(stack, model, trainer_date: Optional[str] = None) -> bool:
    """Whether the stack turns the TP overlap off for this model (a stack and model setting, not a searched
    quantity): the model has multi-head latent attention (`mla:`) and the stack's overlap.tp_comm_overlap_off_with_mla
    is a date no later than the job's trainer_date (none: the stack's own commit). Megatron-LM since 4e6ae3a2d2
    (2025-04-24): TELinear.__init__ sets the shared TransformerConfig's tp_comm_overlap False on the MLA projections'
    userbuffer names (megatron/core/extensions/transformer_engine.py @d98e8a64 l. 1176-1186; stack_db megatron)."""
    since = stack.overlap.tp_comm_overlap_off_with_mla if stack is not None else None
    return bool(since is not None and model is not None and model.mla is not None
                and (trainer_date is None or trainer_date >= since))


def tp_overlap(settings, plan) -> np.ndarray:
    """The plan's TP overlap as it runs (0/1, vectorized): its tpo, 0 where the stack turns it off for the model
    (mla_drops_tp_overlap). What step.tp_comm prices; memory's userbuffers ([ub]) read the plan's tpo, which Megatron-LM
    still allocates (initialize.py @d98e8a64 l. 164-166 reads args.tp_comm_overlap, which the model's config change
    leaves set), and the export writes the tpo the job asked for."""
    tpo = np.asarray(plan.tpo)
    if mla_drops_tp_overlap(settings.stack, settings.model, settings.trainer_date):
        return np.zeros_like(tpo)
    return tpo


def rule_codes(model: ModelSpec, gpus: int, stack: Stack, plan: PlanArrays, upto: int | None = None,
               after: int = 0, *, hardware: Hardware) -> np.ndarray:
    """The first plan rule each candidate breaks (OK = 0), vectorized, in the order `resolve`
    reports them (it raises from these codes; the search masks with them). `plan.dp` is 0
    where tp*cp*pp does not divide the GPU count (no dp). upto: check only codes <= upto.
    after: the caller knows that no candidate breaks a code <= after (the search's rows that
    passed those rules, space.build_space), which are not checked again: the first broken
    rule is the same. hardware: the GPU the job runs on, which the start-up rules that read the
    hardware (startup.Cluster: its compute capability, its NVLink domains) see with `gpus`."""
    L, a, k = model.num_layers, model.num_attention_heads, model.kv_heads
    tp, cp, pp, vpp, dp = plan.tp, plan.cp, plan.pp, plan.vpp, plan.dp  # (the micro-batch read only by its rules)
    dp_safe = np.maximum(dp, 1)
    inter = plan.schedule == INTERLEAVED
    units = L + plan.split_emb + plan.split_loss  # pipeline.stage_layers [6]: the ends may count as layers
    counted = (plan.split_emb + plan.split_loss) > 0
    n_experts = model.moe.num_experts if model.moe is not None else 1  # a dense model: ep 1 only
    etp = np.where(np.asarray(plan.etp) > 0, plan.etp, tp)
    instances = optimizer_instances(stack, plan)
    rules = [
        lambda: tp * cp * pp * dp != gpus,
        lambda: plan.gbs % (dp_safe * plan.mbs) != 0,
        lambda: np.logical_or.reduce([a % tp != 0] + [c % tp != 0 for _, c in model.tp_split_counts()]),
        lambda: (k % tp != 0) & (tp % k != 0),
        lambda: plan.seq % cp != 0,
        lambda: pp > units,
        lambda: (vpp > 1) & ~inter,
        lambda: inter & ((pp < 2) | (vpp < 2)),
        # Megatron-LM's group of N contiguous micro-batches per virtual stage (Stack runs.schedules microbatches
        # multiple_of_pp: N = pp, or the job's microbatch_group), torch's rounds (multiple_of_rounds), none where
        # the schedule takes any count
        lambda: inter & interleaved_m_broken(stack, plan.gbs // (dp_safe * plan.mbs), pp, plan.mbg),
        lambda: inter & (pp * vpp > units),
        lambda: (plan.tpo > 0) & (plan.sp == 0),
        lambda: (plan.sp > 0) & (tp == 1),
        lambda: ((plan.sharding == HSDP) | instances) & (dp_safe % np.maximum(plan.shard, 1) != 0),
        # a shard group smaller than dp: HSDP's, or a zero1 mode with optimizer instances (Megatron's
        # --num-distributed-optimizer-instances, stack_db runs.sharding optimizer_instances)
        lambda: (plan.sharding != HSDP) & (plan.shard != dp) & ~instances,
        lambda: (plan.tpo > 0) & (plan.compile == 0) & bool(stack.overlap.tp_comm_overlap_needs_compile),
        # a front-loaded split (torchtitan) places any count; its own check: each end's weight at most
        # floor(L' / (pp vpp)) (pipeline_parallel.py _generate_llm_fqn_per_model_part); DeepSpeed a12aaedc's
        # bisection (split code 2, pipeline.py [11]) too, checked so, an end stage it leaves without a transformer
        # layer being start-up rule DEEPSPEED_PP_SPLIT_ENDS's
        # a stack whose split need not divide (Stack.pipeline_split_divides false: Llama 3's) refuses only a
        # split that places layers the model lacks (startup.split_overdrawn)
        lambda: _split_units_broken(L, stack, plan, units, counted) | uneven_split_broken(L, plan),
        lambda: (plan.ep > 1) & (n_experts % plan.ep != 0),
        # Megatron-Core's expert grid: etp x ep x pp divides the world (parallel_state.py), i.e.
        # etp x ep divides tp x (dp or the shard group) x cp; with etp = tp: ep divides dp x cp
        lambda: (np.where(plan.sharding == HSDP, np.maximum(plan.shard, 1), dp_safe) * cp * tp) % (plan.ep * etp) != 0,
    ]
    rules += stack_rules(stack, plan)
    n = len(rules) if upto is None else min(upto, len(rules))
    codes = np.zeros(np.shape(tp), dtype=np.int64)
    for code in range(n, after, -1):  # last rule first, so that the first broken rule wins
        broken = rules[code - 1]()
        if _any(broken):  # (a rule no candidate breaks leaves the codes as they are)
            codes = np.where(broken, code, codes)
    if upto is None:
        ok = codes == OK
        startup = rules_for(stack)
        cluster = cluster_of(hardware, gpus) if any(r.reads_cluster for _, r in startup) else None
        for code, r in reversed(startup):
            broken = ok & r.check(model, stack, plan, cluster)
            if _any(broken):
                codes = np.where(broken, code, codes)
            # a start-up rule is reported only where no plan rule broke first
    return codes


def _any(x) -> bool:
    """np.any(x), without numpy's dispatch where x is one bool (a Python or numpy scalar: one plan, as
    explain and each fit row resolve it; about 30 rules a plan, 2 us each, issue 24)."""
    return bool(x) if type(x) in (bool, np.bool_) else bool(np.any(x))


def _split_units_broken(L: int, stack, plan: PlanArrays, units, counted) -> np.ndarray:
    """rule_codes' SPLIT_UNITS: where the pipeline split cannot place the layers plus the counted
    ends (its comments). Where no candidate counts an end, none breaks it; where none splits
    front-loaded or by bisection (split code > 0), only the other branch is computed (the same booleans as
    np.where on both)."""
    if not np.any(counted):
        return counted
    pp, vpp = plan.pp, plan.vpp
    # (a loss end of N layers, Job.loss_units, needs a last chunk of >= N units)
    rest = (((units % (pp * vpp) != 0) | (plan.split_loss > units // (pp * vpp))) if split_divides(stack)
            else split_overdrawn(L, plan))
    if not np.any(plan.split_front > 0):
        return counted & (pp > 1) & rest
    return counted & (pp > 1) & np.where(plan.split_front > 0,
                                         (units // (pp * vpp) < plan.split_emb) | (units // (pp * vpp) < plan.split_loss),
                                         rest)


# Megatron-Core's rules on --decoder-first/last-pipeline-num-layers (pipeline.py [14])
UNEVEN_SPLIT_SOURCE = ("NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/transformer_config.py __post_init__ l. "
                       "2229-2239 (not with account_for_*_in_pipeline_split), l. 2294-2368 (each > 0 and a multiple of "
                       "vpp; middle layers and middle ranks both or neither; the middle layers equal on the middle "
                       "ranks, each rank's a multiple of vpp); transformer_block.py get_num_layers_to_build l. 103-146")


def _uneven_parts(L: int, pp, vpp, first, last):
    """(middle ranks, layers they share, whether each broken rule holds) of an uneven split."""
    pp, vpp = np.asarray(pp, dtype=np.int64), np.maximum(np.asarray(vpp, dtype=np.int64), 1)
    f, l_ = np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64)
    left = pp - (f > 0) - (l_ > 0)
    rest = L - np.maximum(f, 0) - np.maximum(l_, 0)
    return left, rest, {
        "pp": pp < 2,
        "vpp": (f % vpp != 0) | (l_ % vpp != 0),
        # Megatron's `bool(num_layers) != bool(pipeline_parallel_size)` (l. 2338-2343): first + last > L with no
        # middle rank (-4 layers left for 0) raises too; a negative count with middle ranks (refused here as before)
        "ends": (rest < 0) | ((rest > 0) != (left > 0)),
        "middle": (left > 0) & (rest % np.maximum(left, 1) != 0),
        "middle_vpp": (left > 0) & ((rest // np.maximum(left, 1)) % vpp != 0),
    }


def uneven_split_broken(L: int, plan) -> np.ndarray:
    """Where a plan's first / last stage layers (PlanArrays.split_first / split_last, 0: none) break Megatron-Core's
    rules (UNEVEN_SPLIT_SOURCE), or stand beside the counted ends (account_for_*) or on a single stage (pp 1: no
    first and last stage to hold them). False where neither is set (a job's constants: the search's every candidate
    holds the same pair)."""
    f, l_ = np.asarray(getattr(plan, "split_first", 0)), np.asarray(getattr(plan, "split_last", 0))
    if not (np.any(f > 0) or np.any(l_ > 0)):
        return np.zeros(np.shape(plan.pp), dtype=bool)
    _, _, bad = _uneven_parts(L, plan.pp, plan.vpp, f, l_)
    counted = (np.asarray(plan.split_emb) + np.asarray(plan.split_loss)) > 0
    return ((f > 0) | (l_ > 0)) & (np.logical_or.reduce(list(bad.values())) | counted)


def uneven_split_error(L: int, job, stack, where: str = "", at_pp: bool = True) -> PlannerError | None:
    """The error for a job's first_stage_layers / last_stage_layers that Megatron-Core refuses at the job's pp and vpp
    (UNEVEN_SPLIT_SOURCE), that a stack placing the split by its own rule cannot take, or None. Names the field and
    what would be valid. at_pp False: only what holds whatever the pp (fit's: rule SPLIT_UNITS masks each candidate
    by uneven_split_broken)."""
    f, l_ = job.first_stage_layers, job.last_stage_layers
    if f is None and l_ is None:
        return None
    named = " and ".join(f"{k} {v}" for k, v in (("first_stage_layers", f), ("last_stage_layers", l_)) if v is not None)
    if stack is not None and (stack.pipeline_split != "trim_ends" or stack.pipeline_ends_as_layers):
        own = ("counts the embedding and the loss as layers of its split (stack_db pipeline_ends_as_layers)"
               if stack.pipeline_ends_as_layers else f"places the split by its own rule (stack_db pipeline_split "
                                                     f"{stack.pipeline_split})")
        return PlannerError(f"{where}{named}: Megatron-LM's --decoder-first/last-pipeline-num-layers; stack {stack.name} "
                            f"{own}", "leave first_stage_layers / last_stage_layers out, or price the plan on --stack megatron")
    if job.account_for_embedding_in_pipeline_split or job.loss_units:
        return PlannerError(f"{where}{named} with the embedding / loss counted in the pipeline split "
                            "(account_for_*_in_pipeline_split, loss_layers_in_pipeline_split): Megatron-Core refuses them "
                            f"together ({UNEVEN_SPLIT_SOURCE})", "give the end stages' layers or count the ends, not both")
    if not at_pp:
        return None
    pp, vpp = job.pp, job.vpp
    left, rest, bad = _uneven_parts(L, pp, vpp, f or 0, l_ or 0)
    left, rest = int(left), int(rest)
    valid = ""
    if pp >= 2:  # the counts Megatron accepts at this pp and vpp for the end given (the first where both are), the
        # other end as given
        which = "first" if f is not None else "last"
        ok = [n for n in range(vpp, L + 1, vpp)
              if not any(bool(b) for b in _uneven_parts(L, pp, vpp, n if which == "first" else (f or 0),
                                                        n if which == "last" else (l_ or 0))[2].values())]
        valid = (f"; {which}_stage_layers Megatron accepts here: {', '.join(map(str, ok[:12]))}"
                 f"{' ...' if len(ok) > 12 else ''}" if ok else f"; no {which}_stage_layers works with the other as given")
    why = ("pp 1 has no first and last stage to give them" if bool(bad["pp"]) else
           f"{'first' if (f or 0) % max(vpp, 1) else 'last'} stage's layers are not a multiple of vpp {vpp}"
           if bool(bad["vpp"]) else
           f"{rest} layers left for {left} middle stages" if bool(bad["ends"]) else
           f"the {rest} layers left do not divide equally over the {left} middle stages" if bool(bad["middle"]) else
           f"each of the {left} middle stages would hold {rest // max(left, 1)} layers, not a multiple of vpp {vpp}"
           if bool(bad["middle_vpp"]) else None)
    if why is None:
        return None
    if bool(bad["pp"]):  # Megatron-Core checks no pp here: its one rank, first and last, builds the last count only
        return PlannerError(f"{where}{named} with pp {pp}: {why} (Megatron-Core's one rank is first and last stage at "
                            "once and builds the last stage's count only: transformer_block.py @d98e8a64 "
                            "get_num_layers_to_build l. 142-146)", "leave them out at pp 1, or give pp >= 2")
    return PlannerError(f"{where}{named} on {L} layers, pp {pp}, vpp {vpp}: {why}: Megatron-Core refuses it "
                        f"({UNEVEN_SPLIT_SOURCE})",
                        "the middle stages share L - first - last layers equally, each a multiple of vpp, and each end's "
                        f"count is > 0 and a multiple of vpp{valid}")


# the source of INTERLEAVED_M (Megatron-LM's rule, every stack's unless its schedule says `any`)
INTERLEAVED_M_SOURCE = (
    "NVIDIA/Megatron-LM @d98e8a64 megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_"
    "interleaving l. 1160-1180: the N contiguous micro-batches of a virtual stage range in [pp, m] and m % N is 0 or "
    ">= pp; N defaults to pp (model_parallel_config.py l. 567-568 microbatch_group_size_per_vp_stage), so m % pp == 0 "
    "unless --microbatch-group-size-per-virtual-pipeline-stage sets N (the job's microbatch_group)")


def rule_reasons(stack, group: int = 0) -> dict:
    """REASONS with INTERLEAVED_M in the words of the stack's rule (interleaved_m_rule) and the job's
    micro-batch group: fit's count line names the rule the search applied."""
    rule = interleaved_m_rule(stack)
    text = ("interleaved schedule with micro-batches per step not a multiple of their rounds max(1, m // pp) "
            "(torch's ScheduleInterleaved1F1B)" if rule == "multiple_of_rounds" else
            f"interleaved schedule with micro-batch group {group} below pp or above m, or m % {group} in 1 .. pp - 1 "
            "(Megatron's --microbatch-group-size-per-virtual-pipeline-stage)" if group and rule == "multiple_of_pp" else
            REASONS[INTERLEAVED_M])
    # the stack's own entry in the words of the rules on its runs' feature fields (startup STACK_SEQUENCE_PARALLEL, _RECOMPUTE)
    named = {c: REASONS[c].replace("stack_db <stack>", stack.origin) for c in
             (BY_CODE_KEYS["STACK_SEQUENCE_PARALLEL"], BY_CODE_KEYS["STACK_RECOMPUTE"])} if stack is not None else {}
    # DeepEP's Hybrid-EP rules name the stack's trainer (StartupRule.text_for)
    named.update({c: f"{r.text_on(stack)} ({r.key}: {r.source.split(' (')[0]})" for c, r in BY_CODE.items()
                  if r.text_for is not None} if stack is not None else {})
    return {**REASONS, INTERLEAVED_M: text, **named}


# the source of torch's rule (microbatches: multiple_of_rounds)
TORCH_ROUNDS_SOURCE = (
    "torch.distributed.pipelining schedules.py ScheduleInterleaved1F1B.__init__: number_of_rounds = max(1, m // pp), "
    "microbatches_per_round = m // number_of_rounds, ValueError unless m % number_of_rounds == 0 (the class docstring: "
    "pp 4 runs m = 10 in 2 rounds of 5, and m = 3); torchtitan's build_pipeline_schedule only warns below pp x vpp")


def interleaved_m_rule(stack) -> str:
    """Which micro-batch counts the stack's interleaved schedule runs (stack_db runs.schedules
    microbatches): multiple_of_pp (Megatron-LM's default, and a stack that names none), multiple_of_rounds
    (torch's flexible interleaved 1F1B), any (Llama 3's, arXiv:2407.21783 sec. 3.3.2 'Batch size constraint')."""
    runs = stack.runs if stack is not None else None
    rules = [x.microbatches for x in runs.schedules if x.schedule == "interleaved"] if runs is not None else []
    return rules[0] if rules else "multiple_of_pp"


def interleaved_m_broken(stack, m, pp, group=0):
    """Where m micro-batches a step break the stack's interleaved rule (interleaved_m_rule); the
    groups its schedule runs are pipeline.microbatch_group's N (equal to torch's m / rounds for every
    count torch accepts: tests/test_plan.py enumerates pp 2-64, m below 40 pp). group: the job's N
    (PlanArrays.mbg, 0 = none; a multiple_of_pp stack's only, resolve refuses it elsewhere), under
    Megatron-LM's general rule (INTERLEAVED_M_SOURCE): N in [pp, m] and m % N is 0 or >= pp."""
    rule = interleaved_m_rule(stack)
    m = np.asarray(m, dtype=np.int64)
    p = np.maximum(np.asarray(pp, dtype=np.int64), 1)
    if rule == "any":  # a stack setting, not a searched quantity
        return np.zeros(np.broadcast(m, p).shape, dtype=bool)
    if rule == "multiple_of_rounds":
        return m % np.maximum(m // p, 1) != 0
    g = np.asarray(group, dtype=np.int64)
    if not np.any(g > 0):  # no job sets N (a job's setting, the same on every candidate): N = pp
        return m % p != 0
    rest = m % np.maximum(g, 1)
    return np.where(g > 0, (g < p) | (g > m) | ((rest > 0) & (rest < p)), m % p != 0)


def microbatch_group_error(stack, n: int, where: str = "") -> PlannerError | None:
    """The error for a job's microbatch_group on a stack whose interleaved schedule has no such
    setting (None where it has: Megatron-LM's, stack_db microbatches multiple_of_pp)."""
    runs = stack.runs if stack is not None else None
    if runs is None:  # a stack that names no schedules runs Megatron-LM's rule (interleaved_m_rule)
        return None
    inter = any(x.schedule == "interleaved" for x in runs.schedules)
    rule = interleaved_m_rule(stack)
    if inter and rule == "multiple_of_pp":
        return None
    flag = "Megatron-LM's --microbatch-group-size-per-virtual-pipeline-stage"
    why = {"multiple_of_rounds": f"groups its micro-batches by torch's rounds, N = m / max(1, m // pp), with no setting "
                                 f"for N ({TORCH_ROUNDS_SOURCE})",
           "any": "is Llama 3's, whose N the paper sets freely without publishing it or a setting for it (stack_db "
                  "runs.schedules microbatches: any; arXiv:2407.21783 sec. 3.3.2)"}.get(rule, "")
    why = f"the interleaved schedule of stack {stack.name} {why}" if inter else \
        f"stack {stack.name} has no interleaved schedule ({stack.origin} runs.schedules)"
    return PlannerError(f"{where}microbatch_group {n} is {flag}; {why}",
                        "leave microbatch_group (--microbatch-group) out, or price the plan on --stack megatron")


def split_divides(stack) -> bool:
    """The stack's split needs the layers plus the counted ends to divide into pp x vpp chunks
    (Stack.pipeline_split_divides; Megatron-Core's rule, the default)."""
    return stack is None or stack.pipeline_split_divides


def stack_rules(stack, plan: PlanArrays) -> list:
    """The rules of what the stack can run (STACK_SHARDING .. STACK_ETP), as rule_codes lambdas."""
    runs = stack.runs if stack is not None else None
    never = lambda: np.zeros(np.shape(plan.tp), dtype=bool)  # noqa: E731
    if runs is None:
        return [never] * 5
    levels = np.array([SHARDING_CODES[m.level] for m in runs.sharding], dtype=np.int64)
    sched = np.array([SCHEDULE_CODES[x.schedule] for x in runs.schedules], dtype=np.int64)
    smode = np.asarray(plan.smode)
    etp = np.where(np.asarray(plan.etp) > 0, plan.etp, plan.tp)

    def sharding():  # mode_at's rows (a code outside the modes: broken), compared with the plan's level
        valid = (smode >= 0) & (smode < len(levels))
        return ~valid | (levels[np.clip(smode, 0, len(levels) - 1)] != plan.sharding)

    def degree():
        bad = np.zeros(np.shape(plan.tp), dtype=bool)
        for ax, cap in (("tp", runs.max_tp), ("cp", runs.max_cp), ("pp", runs.max_pp), ("ep", runs.max_ep)):
            if cap is not None:
                bad |= np.asarray(getattr(plan, ax)) > cap
        return bad

    return [
        sharding,
        lambda: ~isin(plan.schedule, sched) & (plan.pp > 1),
        lambda: ~stack_order_ok(stack, plan.order, plan.tp, plan.cp, plan.pp, plan.dp),
        degree,
        # a stack without an expert-TP option runs expert TP = tp, or 1 under EP where its experts shard over the
        # EP mesh alone (runs.etp_one_under_ep: torchtitan 0.3.0; startup TORCHTITAN_ETP says which)
        lambda: (etp != plan.tp) & (runs.expert_tensor_parallel is None)
        & ~(runs.etp_one_under_ep & (np.asarray(plan.ep) > 1) & (etp == 1)),
    ]


def default_schedule(stack, vpp: int) -> str:
    """A plan's schedule where the job names none: interleaved with virtual stages, else the
    stack's first listed schedule that is not interleaved (1f1b where the stack does not say,
    or lists it first; dualpipe on the deepseek stack)."""
    if vpp > 1:
        return "interleaved"
    runs = stack.runs if stack is not None else None
    plain = [x.schedule for x in (runs.schedules if runs is not None else ()) if x.schedule != "interleaved"]
    return plain[0] if plain else "1f1b"


# the fusion switches a job turns off (Job fields, resolved into Settings): each one's key in
# kernel_bytes' dict is 1.0 where the job runs the unfused path, 0.0 where the stack's fused kernel
FUSION_SWITCHES = {"apply_rope_fusion": "unfused_rope", "bias_activation_fusion": "unfused_activation",
                   "bias_dropout_fusion": "unfused_bias_dropout", "gradient_accumulation_fusion": "unfused_wgrad",
                   "masked_softmax_fusion": "unfused_masked_softmax"}
# a switch's unfused figures: a stack whose entry leaves them null has no such switch (_check_output_layer_options refuses it)
FUSION_FIELDS = {"apply_rope_fusion": ("rope_scaled",), "bias_activation_fusion": ("mlp_activation_gated_unfused",
                                                                                   "expert_probs_unfused", "bias_unfused"),
                 "bias_dropout_fusion": ("bias_unfused",), "gradient_accumulation_fusion": ("wgrad_unfused",),
                 "masked_softmax_fusion": ("score_softmax_unfused", "score_softmax_unfused_bwd")}


@dataclass(frozen=True)
class Settings:
    """Everything that is not searched: model, hardware and conventions."""

    model: ModelSpec
    hardware: Hardware
    gpus: int
    bpp: BytesPerParam
    bpp_name: str
    activation_model: str  # "arch" | "korthikanti"
    attention: str  # "flash" | "eager"
    causal_attention_flops: bool
    headroom: float
    reserve_bytes: float
    tokens: float | None
    # the job's batch ramp, ((from_tokens, global_batch), ...) (Job.batch_size_schedule; explain.batch_ramp); () none
    batch_schedule: tuple = ()
    recompute_layers: int | None = None  # full recompute of at most this many layers per stage
    calibration: CalibrationProfile | None = None  # planner/profile.py: plain data the cost models read
    calibration_path: str | None = None
    stack: Stack | None = None  # the software stack (stack_db/); None only in hand-built test settings
    stack_name: str = "megatron"
    power_limit_source: str = "tdp"  # "job" | "hardware" (its power_limit_W) | "tdp"; the limit: power_limit_w
    split_emb: int = 0  # the job counts the embedding as a layer of the pipeline split (PlanArrays.split_emb)
    split_loss: int = 0  # ... and the loss (with the MTP modules: N layers, Job.loss_units)
    split_first: int = 0  # the job's first_stage_layers (PlanArrays.split_first); 0: none
    split_last: int = 0  # the job's last_stage_layers (PlanArrays.split_last); 0: none
    microbatch_group: int = 0  # the job's contiguous micro-batches per virtual stage (PlanArrays.mbg); 0: the stack's rule
    moe_capacity_factor: float = DEFAULT_CAPACITY_FACTOR  # MoE capacity factor (moe_token_drop: the job set one)
    moe_token_drop: bool = False  # the job sets a capacity factor: tokens beyond it dropped (planner/imbalance.py)
    moe_pad_to_capacity: bool = False  # ... and pads every expert's input to it
    moe_min_capacity: int = 0  # DeepSpeed-MoE's capacity floor (job moe_min_capacity, else stack moe_gating.min_capacity)
    moe_rank_imbalance: float = 0.0  # the job's busiest EP rank load / mean; 0: the rule of moe_load_balancing
    moe_load_balancing: str = "aux_loss"  # the router's balancing (planner/imbalance.py BALANCING)
    pipe_partitioned: bool = False  # DeepSpeed's partitioned pipe tensors (job field, default the stack's: step.py [25])
    ep_comm_overlap: bool = False  # MoE all-to-alls hidden by the combined 1F1B schedule (job field; planner/moe.py)
    # the shared experts on a side stream beside the dispatcher's all-to-alls (job field; step.py [38], memory.py [se])
    moe_shared_expert_overlap: bool = False
    defer_embedding_wgrad: int | None = None  # Megatron's wgrad deferral limit (0: all micro-batches); None: off
    padded_vocab_size: int | None = None  # the job's padded vocabulary (with_padded_vocab: model.vocab_size holds it); None: none
    # the stack's vocabulary padding (stack_db vocab_padding, vocab_divisor): the rows a multiple of vocab_divisor x tp,
    # model.vocab_size holding them at the plan's tp (fit: each space of one tp's rows, search.vocab_spaces); None: none
    vocab_divisor: int | None = None
    vocab_tokens: int = 0  # the model's own vocab_size (the tokenizer's), before any padding
    make_vocab_size_divisible_by: int | None = None  # the job's divisor (plan_dict); None: the stack's
    cross_entropy_fusion: bool = False  # the stack's fused cross-entropy (job field; memory.py, stack memory.fused_loss_extra_per_logit)
    cross_entropy_fusion_impl: str = "native"  # its implementation: native | te (stack memory.te_loss_per_logit)
    cuda_graph_impl: str = "none"  # Megatron's CUDA graphs (job field; planner/cuda_graphs.py: checked, memory [cg])
    cuda_graph_scope: tuple = ()  # ... the parts of each layer captured; empty: the whole layer
    fp8_param_gather: bool = False  # fp8 weights (job field; memory.py [11], stack memory.fp8_weight_cache)
    fp4_param_gather: bool = False  # NVFP4 weights (job field; memory.py [11], step.py [12])
    transformer_impl: str = "transformer_engine"  # Megatron --transformer-impl (job field; local: no TE workspace)
    moe_grouped_gemm: bool = False  # MoE experts as TE's grouped GEMM (job field; its multi-stream workspaces)
    local_core_attention: bool = False  # Megatron-Core's own core attention (memory.py [12])
    fp16: bool = False  # fp16 in place of bf16 (job field; priced as bf16, exported as Megatron --fp16)
    # the stack's fusion switches (job fields; False: the unfused path, FUSION_SWITCHES, step.py [11], memory.py [uf])
    apply_rope_fusion: bool = True
    bias_activation_fusion: bool = True
    bias_dropout_fusion: bool = True
    gradient_accumulation_fusion: bool = True
    masked_softmax_fusion: bool = True
    # the eager core attention's torch softmax in fp32 (job field; memory.py [sm]: its fp32 output saved)
    attention_softmax_in_fp32: bool = True
    attention_kernel: Optional[str] = None  # the job's attention kernel (compute.attention_kernel); None: the stack's
    attention_backend: Optional[str] = None  # the job's attention module (Job.attention_backend), where not the stack's default
    chunked_loss: bool = False  # the stack's chunked cross-entropy (job field; memory._chunked_loss, stack memory.chunked_loss_chunks)
    selective_recomputes_attention: bool = False  # the selective policy re-runs the attention core (job field; memory.selective_keeps)
    cp_load_balance: bool = True  # CP load-balances the causal mask (job field; step.cp_balance_factor)
    cp_load_balancer: Optional[str] = None  # the balancer by name (job field; startup.TORCHTITAN_CP_PTRR_MASK), priced balanced
    fsdp_symm_mem: bool = False  # torchtitan 0.3 parallelism.enable_fsdp_symm_mem (job field; startup.TORCHTITAN_FSDP_SYMM_MEM_SM90)
    spmd_typechecking: bool = False  # torchtitan 0.3 debug.spmd_typechecking (job field; startup.TORCHTITAN_SPMD_TYPECHECK_*)
    spmd_backend: str | None = None  # torchtitan 0.3 parallelism.spmd_backend (job field; None: the stack's runs.spmd_backends default; memory.py [sb])
    partition_activations: bool = False  # full recompute's kept inputs split over TP (job field; memory.layer_memory [pa], step.tp_comm)
    sync_tp_duplicated_parameters: bool = False  # the TP-duplicated parameters all-reduced each forward (job field; step.tp_comm [sy])
    recompute_modules: tuple = ()  # Megatron --recompute-modules (job field): settings.stack.selective is their policy (planner/recompute_modules.py)
    empty_unused_memory_level: int = 0  # Megatron --empty-unused-memory-level (job field; no priced figure moves: memory.py [13])
    mfsdp_double_buffer: bool = False  # Megatron-FSDP's fixed double-buffer pools (job field; memory.py [db])
    mfsdp_v2: bool = False  # Megatron-FSDP v2's buffers (job field; memory.py [v2]; start-up rule MEGATRON_FSDP_V2_LAYOUT)
    mfsdp_outer_optim: bool = False  # Megatron-FSDP's HSDP optimizer sharded over the replicas too (job field; memory.py [oo])
    mla_down_proj_fusion: bool = False  # MLA's fused TP-split down projection (job field; layers/attention.py MLA.down_fused)
    dummy_wgrads: str | None = None  # fused accumulation's dummy weight gradients (job field: a run's code version; None: the stack's)
    te_version: str | None = None  # the run's Transformer Engine release (job field; None: the stack's memory.te_version, memory.py [ub])
    trainer_date: str | None = None  # the run's trainer commit date (job field: older start-up checks, _deterministic_switches)
    cublas_workspace_config: str | None = None  # the run's CUBLAS_WORKSPACE_CONFIG (job field; None: the GPU's default workspace, memory.py [ws])
    deterministic_mode: bool = False  # Megatron --deterministic-mode (job field; its cuBLAS workspace: _cublas_workspace)
    use_flash_attn: bool = False  # Megatron-LM --use-flash-attn (job field; read by an older deterministic check: _deterministic_switches)
    attention_kernel_named: bool = False  # the config names the backend (job field; Bridge's deterministic check, the export)
    # the algorithms the run's NCCL_ALGO leaves each collective, by op code (job field nccl_algo: comm.nccl_algo_candidates,
    # read by step.Collectives); None: unset, NCCL's own choice among every algorithm the model has (comm.AUTO_CANDIDATES)
    nccl_algos: tuple | None = None
    nccl_algo: str | None = None  # the job's NCCL_ALGO as given (plan_dict, the exports)
    # the protocols the run's NCCL_PROTO leaves each collective, by op code (job field nccl_proto:
    # comm.nccl_proto_protocols, read by step.Collectives); None: unset, NCCL's default set on every collective
    nccl_protos: tuple | None = None
    nccl_proto: str | None = None  # the job's NCCL_PROTO as given (plan_dict, the exports)
    # the run's NCCL_NVLS_ENABLE (job field nccl_nvls_enable: 0, 1, 2; None unset): 0 prices every collective on
    # comm_params(nvls=False), NVLS and NVLS-tree out (step.Collectives, comm.nvls_enabled, comm.py [22])
    nccl_nvls_enable: int | None = None
    loss_logit_chunks: int | None = None  # PR #996's chunked cross-entropy of the materialised logits (job field; memory.py [ck])
    fsdp_root_unit: bool = False  # torchtitan's FSDP2 root unit before #1094 (job field: a row's code version; memory.py [tt10])
    # DeepSpeed ZeRO-3's gathering and bucket settings (DeepSpeed JSON keys -> parameters): the stack's fsdp.zero3_modules
    # with the job's deepspeed_zero3 over them; None on a stack whose FSDP gathers layer units (memory.py [z3])
    zero3: dict | None = None
    rope_cache: str | None = None  # the rotary tables kept (job field: a row's torchtitan version; None: the stack's memory.rope_cache)
    optimizer: str = "adam"  # the update rule (job field optimizer: adam | muon; memory.py [mu])
    optimizer_whole_tensors: bool = False  # Muon's layer-wise optimizer without its layout: whole tensors a rank [mu]
    muon_ns_steps: int = 5  # Muon's Newton-Schulz steps (job field; --muon-num-ns-steps, default 5: step.py [28])
    muon_split_qkv: bool = True  # Muon orthogonalizes q, k, v apart (job field; --muon-no-split-qkv: off; step.py [28])
    muon_tp_mode: str = "duplicated"  # Muon's TP mode (job field, else the stack's runs.optimizers muon_tp_mode: step.py [28])
    muon_fp32_matmul_prec: str = "medium"  # torch's fp32 matmul precision around Newton-Schulz (job field: step.py [28])
    optimizer_implementation: str | None = None  # the optimizer's implementation (job field, else the stack's memory.optimizer_default; memory.py [opt])
    early_step_in_backward: bool = False  # the optimizer steps each parameter in the backward (job field; memory.py [es])
    offload_optimizer: str = "none"  # "cpu": the optimizer partition in host memory, stepped by the CPU (job field; planner/offload.py)
    offload_param: str = "none"  # "cpu": the sharded parameters in host memory too (job field; planner/offload.py)
    offload_fraction: float = 1.0  # of the optimizer partition on the host (job field; Megatron's HybridDeviceOptimizer)
    offload_overlap: bool = False  # copies and CPU step pipelined (job field; Megatron --overlap-cpu-optimizer-d2h-h2d)
    # the stack's precision-aware optimizer runs (job field precision_aware_optimizer, else Adam's moments below fp32);
    # TE's FusedAdam holds the master weights and reads decoupled_grad (plan._bytes_per_param; memory.py [sg])
    precision_aware: bool = False
    te_master: bool = False
    # bpp.master is TE's FusedAdam's 16-bit remainders (2 B, plan._bytes_per_param): the job's master is 4 B under the
    # stack's runs.low_precision_moments.own_master_modes, where FusedAdam holds none (memory.master_bytes)
    remainders: bool = False
    host_fields: tuple = ()  # the job's host fields given (pcie_gbps, ...: _apply_host, in hardware); plan_dict reports them
    # the fraction of the host's DRAM peak its Adam sustains (planner/offload.py [cpu-adam]): the named assumption
    # offload.HOST_MEMORY_EFFICIENCY, or a profile's host_adam section (calibrate host-adam) where it applies
    host_adam_efficiency: float = HOST_MEMORY_EFFICIENCY
    host_adam_note: str | None = None  # the calibrated value's origin, or why a profile's section was not applied
    host_adam_calibrated: bool = False
    bf16_layers: tuple = (0, 0)  # fp8 / nvfp4: the first and last transformer layers kept in bf16 (step.bf16_end_layers)
    fp8_output_layer: bool = False  # fp8: the output layer's GEMMs in fp8 too (job field; step.head_time, _fp8_output_layer)
    filter_fqns: Optional[tuple] = None  # fp8 on torchtitan: the Linears kept bf16 (job field; step.py [18], _filter_fqns)
    fp8_allgather: Optional[bool] = None  # FSDP's fp8 weight all-gather (job field; step.gather_bytes, _fp8_allgather)
    fp8_precompute_scale: bool = False  # torchao's per-step amax all-reduce for FSDP's fp8 gather (job field; step.py [39])
    # the sharded optimizer's once-a-step parameter all-gather hidden behind the next forward (job field; None: tied to
    # the plan's DP overlap as it runs; step.ddp_traffic, _dp_param_gather_overlap)
    dp_param_gather_overlap: Optional[bool] = None
    fp8_grouped_experts: bool = True  # MoE: the routed experts' GEMMs in the low precision (job field, else the stack's; step.py [16])
    fp8_attention: bool = False  # the fused attention in fp8 (job field; step.fp8_core, memory.py [fa8], _fp8_attention)
    moe_dispatcher: str = "alltoall"  # MoE token dispatcher (job field, else the stack's; planner/dispatch.py)
    # fit's dispatcher search (search.search_one): ((dispatch code, ep_comm_overlap), ...) of every dispatcher a
    # plan's `disp` column may name, the only Settings fields that differ between the dispatchers' Settings
    # besides moe_dispatcher and the stack's defaults.moe_dispatcher (which step.py and memory.py do not read);
    # step.py and memory.py look each plan's up (dispatch_codes.dispatcher_rows, plan_dispatchers). (): every plan runs
    # moe_dispatcher (disp -1)
    dispatcher_rows: tuple = ()
    moe_fp8_dispatch: Optional[bool] = None  # the forward dispatch in fp8 (job field; None: the stack's recipe's, fp8_dispatch)
    # TE's fused MoE permutation / router kernels (job fields, else the stack's defaults; False: the unfused
    # torch ops' extra bytes, planner/layers/moe.py unfused_dispatch_bytes)
    moe_permute_fusion: bool = True
    moe_router_fusion: bool = True
    # Megatron-Core's routing-map padding for quantized grouped GEMMs and --enable-experimental (job fields,
    # _router_padding; planner/layers/moe.py padded_routing_map_bytes)
    moe_router_padding: bool = False
    enable_experimental: bool = False
    moe_route_nodes: int = 0  # node-limited routing: nodes a token reaches at most (0: no limit)
    # HybridEP's non-blocking dispatch (job moe_hybridep_capacity_factor; layers/moe.py [19]): the permuted rows
    # allocated a local token are ep x min(E / ep, top_k) x this; 0: the blocking dispatch (the rows routed)
    moe_hybridep_capacity_factor: float = 0.0
    # the router's path (job fields; planner/layers/moe.py router_saved_terms): an auxiliary loss computed, a
    # z-loss, softmax before the top-k
    moe_aux_loss_coeff: float = 0.0
    moe_z_loss_coeff: float = 0.0
    moe_router_pre_softmax: bool = False
    moe_router_dtype: str | None = None  # the router's logits dtype (None: the input's, bf16; "fp32", "fp64")
    inherited: tuple = ()  # settings taken from the stack's defaults: (field, value) pairs
    assumed: tuple = ()  # what the model's file left out and a documented rule filled in (HF config keys)
    seq_assumed: tuple = ()  # the job's training length where it gave none (_seq_len): the job's, not a plan's
    code_assumed: tuple = ()  # the trainer model code not checked (startup.model_code_assumed): the job's, not a plan's
    env_assumed: tuple = ()  # the run's environment the trainer sets where the job gave none (_nccl_algo, _cublas_workspace),
    # and what the model prices otherwise than the job's NCCL_PROTO says (_nccl_protos)
    sac_reruns_exchange: bool = False  # selective recompute re-runs the EP all-to-alls (the model code's save list: sac_reruns_exchange)
    code_compiles_blocks: bool = True  # the model code compiles its blocks where the plan compiles (code_compiles_blocks)
    model_file: str | None = None  # the files the model and hardware were read from (absolute), so
    hardware_file: str | None = None  # that a saved fit names what it used, not only a catalog name
    model_sha256: str | None = None  # their contents' hashes, read once here (plan_dict reports them per row)
    hardware_sha256: str | None = None
    knobs: RunKnobs = IDENTITY_KNOBS  # a profile's run calibration for this stack and hardware (profile.run_knobs)
    # a memo of collective times for callers that price one plan many times over with other
    # knobs (the run-calibration fit); None: none. A cache only: the numbers are the same.
    comm_memo: dict | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def power_limit_w(self) -> float:
        """The board power limit in force, W: the hardware's (resolve applies the job's
        power_limit_w to it as power_limit_W), else its tdp_W (power.power_limit)."""
        return power_limit(self.hardware)


def _apply_power_limit(hw: Hardware, job: Job, where: str, warnings: list[str]) -> tuple[Hardware, str]:
    """The hardware as the job runs it: the job's power_limit_w (else the hardware's
    power_limit_W, else its tdp_W) becomes hw.power_limit_W, which compute.py's power
    envelope reads. A limit above the rated power is refused (the board cannot draw it); one
    below DEEP_CAP_FRACTION of it warns (the cube-root rule is optimistic there)."""
    if job.power_limit_w is None:
        source = "hardware" if hw.power_limit_W else "tdp"
    else:
        source = "job"
        if job.power_limit_w > hw.tdp_W:
            raise PlannerError(
                f"{where}power_limit_w {job.power_limit_w:g} W exceeds the rated board power of {hw.name} "
                f"(tdp_W {hw.tdp_W:g} W)",
                f"give a power limit of at most {hw.tdp_W:g} W, or a hardware entry rated for more",
            )
        hw = hw.model_copy(update={"power_limit_W": float(job.power_limit_w)})
    p = hw.power_limit_W or hw.tdp_W
    if p < DEEP_CAP_FRACTION * hw.tdp_W:
        warnings.append(
            f"power limit {p:g} W is below {DEEP_CAP_FRACTION:.0%} of {hw.name}'s {hw.tdp_W:g} W: the clock-cubed "
            "power model is optimistic there (GB300 at 500 of 1400 W ran GEMMs at ~30% of full rate, triton PR #2023); "
            "calibrate with `planner calibrate gemm --sustained` at this limit"
        )
    return hw, source


# the job's host fields and the hardware fields each replaces (schema.Job pcie_gbps, host_memory_gbps, host_memory_gb)
HOST_FIELDS = (("pcie_gbps", "pcie_GBps"), ("host_memory_gbps", "host_memory_GBps"), ("host_memory_gb", "host_memory_GB"))
HOST_FLAGS = "--pcie-gbps, --host-memory-gbps, --host-memory-gb"


def _apply_host(hw: Hardware, job: Job, warnings: list[str]) -> Hardware:
    """The hardware as the job's servers have it: each host field the job gives (pcie_gbps, host_memory_gbps,
    host_memory_gb: a server with no fixed host, h100-pcie, or another than the entry's) replaces the hardware's figure
    of the same name, as power_limit_w replaces power_limit_W; one that differs from a figure the entry gives is
    noted."""
    update = {}
    for field, hw_field in HOST_FIELDS:
        v = getattr(job, field)
        if v is None:
            continue
        old = getattr(hw, hw_field)
        if old is not None and float(old) != float(v):
            warnings.append(f"{field} {v:g} replaces hardware {hw.name}'s {hw_field} {old:g} (the job's host)")
        update[hw_field] = float(v)
    return hw.model_copy(update=update) if update else hw


def _host_adam(calibration, path, hardware_name: str) -> dict:
    """Settings' host_adam_* fields: a profile's host_adam section (profile.host_adam_efficiency) in place of the
    assumption offload.HOST_MEMORY_EFFICIENCY, where the profile has one for this hardware; else the assumption, with
    the reason where a section was not applied."""
    if calibration is None or calibration.host_adam is None:
        return {}
    from .profile import host_adam_efficiency

    value, why = host_adam_efficiency(calibration, hardware_name)
    if value is None:
        return {"host_adam_note": f"profile {path}: host_adam section not applied ({why})"}
    return {"host_adam_efficiency": value, "host_adam_calibrated": True,
            "host_adam_note": f"profile {path}: host_adam {why}"}


def _run_knobs(calibration, stack_name: str, hardware_name: str) -> RunKnobs:
    """profile.run_knobs; without a profile its answer, the identity, without importing it."""
    if calibration is None:
        return IDENTITY_KNOBS
    from .profile import run_knobs

    return run_knobs(calibration, stack_name, hardware_name)


def _load_calibration(path, hw: Hardware | None = None):
    """The profile at `path`; its measured GEMM rates must not exceed `hw`'s dense peaks (a
    profile of another GPU, or a peak below its measurements, would give an MFU above 100%)."""
    if path is None:
        return None
    from .profile import load_profile

    prof = load_profile(path)
    gemm = getattr(prof, "gemm", None)
    if hw is not None and gemm is not None:
        check_gemm_peaks(gemm.rows, hw, f"{path}: field `gemm.rows`",
                         "use a profile measured on this GPU (planner calibrate gemm), or the hardware it was measured on")
    return prof


def check_gemm_peaks(rows, hw: Hardware, where: str, hint: str) -> None:
    """Every measured GEMM rate at most `hw`'s dense peak of its dtype (hardware_db): a rate
    above it is not a measurement of this GPU (a sparsity figure, wrong units, another GPU)
    and would give an MFU above 100%. Checked where a profile is read (_load_calibration)
    and where `calibrate gemm` writes one (issue 24: 5000 TFLOP/s bf16 was accepted there)."""
    for r in rows:
        peak_field = "fp8_TFLOPS" if r.dtype == "fp8" else "bf16_TFLOPS"
        peak = getattr(hw, peak_field)
        if peak is not None and r.tflops > peak:
            raise PlannerError(
                f"{where} ({r.M}x{r.N}x{r.K} {r.dtype}): tflops {r.tflops:g} is above the dense peak "
                f"{peak_field} {peak:g} of hardware {hw.name} ({r.tflops / peak:.0%} of peak)", hint)


def bytes_per_param(spec) -> tuple[BytesPerParam, str]:
    if isinstance(spec, BytesPerParam):
        return spec, "custom"
    return BYTES_PER_PARAM_PRESETS[spec], spec


def _interleaved_m_error(stack, m: int, pp: int, group: int | None = None) -> tuple[str, str]:
    """(error, hint) for INTERLEAVED_M under the stack's rule (interleaved_m_rule); group: the job's N."""
    name = stack.name if stack is not None else "megatron"
    if group:
        ok = [n for n in range(pp, m + 1) if m % n == 0 or m % n >= pp]
        near = ", ".join(str(n) for n in sorted(ok, key=lambda n: (abs(n - group), n))[:4])
        broken = (f"N={group} is below pp={pp}" if group < pp else f"N={group} exceeds m={m}" if group > m else
                  f"m % N = {m % group}: a last group of {m % group} micro-batches, fewer than pp={pp}")
        return (f"interleaved schedule on stack {name} with microbatch_group N={group} contiguous micro-batches per "
                f"virtual stage, m={m} micro-batches per pipeline, pp={pp}: {broken}; Megatron-LM needs N in [pp, m] and "
                f"m % N 0 or >= pp ({INTERLEAVED_M_SOURCE})",
                f"use microbatch_group (--microbatch-group) {near}" if ok else
                f"use a global batch of at least pp={pp} micro-batches per pipeline, or leave microbatch_group out")
    if interleaved_m_rule(stack) == "multiple_of_rounds":
        rounds = max(1, m // max(pp, 1))
        around = np.arange(max(m - 3 * pp, 1), m + 3 * pp + 1)
        ok = around[~interleaved_m_broken(stack, around, pp)]
        near = ", ".join(str(int(x)) for x in sorted(ok, key=lambda x: (abs(x - m), x))[:4])
        return (f"interleaved schedule on stack {name} splits {m} micro-batches per pipeline into max(1, {m} // pp={pp}) "
                f"= {rounds} rounds, and {m} is not a multiple of {rounds} ({TORCH_ROUNDS_SOURCE})",
                f"use a global batch whose micro-batches per pipeline divide into their rounds (near {m}: {near})")
    return (f"interleaved schedule needs micro-batches per pipeline ({m}) divisible by pp={pp} on stack {name} "
            f"({INTERLEAVED_M_SOURCE})",
            f"use a global batch whose micro-batches per pipeline are a multiple of {pp}, or a stack whose schedule "
            "runs any count (stack_db runs.schedules microbatches: any, e.g. llama3-meta)")


def _heads_error(tp: int, a: int, model: ModelSpec) -> tuple[str, str]:
    """The HEADS rule's message: the attention heads, or the mixer heads/groups tp does not divide."""
    if a % tp:
        return (f"tp={tp} does not divide the {a} attention heads of {model.name}",
                "choose tp among the divisors of the head count")
    what, n = next((w, c) for w, c in model.tp_split_counts() if c % tp)
    return (f"tp={tp} does not divide the {n} {what} of {model.name}",
            f"choose tp among the divisors of {n} (tensor parallelism splits whole heads and groups)")


def _rule_error(code: int, where: str, job: Job, model: ModelSpec, *, dp: int, gbs: int, seq: int, schedule: str,
                stack=None, plan=None, hw: Hardware | None = None) -> PlannerError:
    """The message and hint of a broken plan rule (rule_codes), with the job's values (a start-up rule's
    own figures where it gives them: StartupRule.detail, on the job's cluster)."""
    if code in BY_CODE:
        r = BY_CODE[code]
        figures = (f" ({r.detail(model, stack, plan, cluster_of(hw, job.gpus))})"
                   if r.detail is not None and plan is not None and hw is not None else "")
        who = ("the model" if r.model_level else  # every plan alike: no degrees to name (StartupRule.model_level)
               r.subject if r.subject is not None else  # what it reads instead of the degrees (StartupRule.subject)
               f"the plan (tp {job.tp}, cp {job.cp}, pp {job.pp}, vpp {job.vpp}, dp {dp}, ep {job.ep}, sharding "
               f"{job.sharding} as {job.sharding_mode}, rank order {job.rank_order})")
        return PlannerError(f"{where}{r.text_on(stack)}{figures}: {who} breaks start-up rule {r.key} of "
                            f"{r.trainer_on(stack)} ({r.source})",
                            r.hint(model, stack) if callable(r.hint) else r.hint)
    if code in (STACK_SHARDING, STACK_SCHEDULE, STACK_ORDER, STACK_DEGREE, STACK_ETP):
        return _stack_error(code, where, job, stack, dp)
    a, k, L, mbs = model.num_attention_heads, model.kv_heads, model.num_layers, job.micro_batch
    units = L + int(job.account_for_embedding_in_pipeline_split) + job.loss_units
    msg = {
        MESH: lambda: (f"tp={job.tp} x cp={job.cp} x pp={job.pp} x dp={dp} does not divide --gpus {job.gpus}",
                       "make the product of tp, cp, pp and dp equal the GPU count"),
        BATCH: lambda: (f"global batch {gbs:,} sequences does not divide into dp={dp} x micro_batch={mbs}",
                        f"use a global batch that is a multiple of {dp * mbs}, or change micro_batch / the mesh"),
        HEADS: lambda: _heads_error(job.tp, a, model),
        KV_HEADS: lambda: (f"tp={job.tp} and the {k} KV heads of {model.name} do not divide one another",
                           "choose tp that divides, or is a multiple of, the KV head count"),
        SEQ_CP: lambda: (f"cp={job.cp} does not divide seq_len={seq}", "choose cp among the divisors of the sequence length"),
        PP_LAYERS: lambda: (f"pp={job.pp} is more stages than the {L} layers of {model.name}"
                            + (f" (+{units - L} counted for the embedding/loss)" if units > L else ""),
                            "use pp <= num_layers"),
        VPP_SCHEDULE: lambda: (f"vpp={job.vpp} needs the interleaved schedule, not {schedule}",
                               "set schedule: interleaved or vpp: 1"),
        INTERLEAVED_PP: lambda: (f"the interleaved schedule needs pp >= 2 and vpp >= 2 (got pp={job.pp}, vpp={job.vpp})",
                                 "set vpp >= 2 with pp >= 2, or schedule: 1f1b"),
        INTERLEAVED_M: lambda: _interleaved_m_error(stack, gbs // (dp * mbs), job.pp, job.microbatch_group),
        VPP_LAYERS: lambda: (f"pp*vpp={job.pp * job.vpp} exceeds the {L} layers"
                             + (f" (+{units - L} counted for the embedding/loss)" if units > L else ""),
                             "lower vpp" + ("" if units > L else ", or count the embedding and loss as layers of the "
                                            "split (account_for_embedding_in_pipeline_split / _loss_)")),
        SPLIT_UNITS: lambda: ((f"{L} layers + {units - L} for the embedding/loss counted in the pipeline split = {units} "
                               + (f"do not divide into pp*vpp={job.pp * job.vpp} chunks" if units % (job.pp * job.vpp) else
                                  f"in pp*vpp={job.pp * job.vpp} chunks of {units // (job.pp * job.vpp)}: the loss end's "
                                  f"{job.loss_units} layers outweigh the last chunk"),
                               "Megatron-Core requires (layers + counted ends) % (pp*vpp) == 0: choose pp and vpp to match"
                               + ("" if units % (job.pp * job.vpp) else
                                  ", and a loss end (loss_layers_in_pipeline_split) of at most one chunk"))
                              if split_divides(stack) else
                              (f"{L} layers + {units - L} for the embedding/loss counted in the pipeline split = {units} "
                               f"on pp*vpp={job.pp * job.vpp} chunks leave more slots over than the end chunks hold: the "
                               "split would place layers the model does not have",
                               "choose pp x vpp with at most one chunk's worth of slots left over")),
        TP_OVERLAP_SP: lambda: ("tp_comm_overlap needs sequence parallelism with tp > 1",
                                "set sequence_parallel: true and tp > 1, or tp_comm_overlap: false"),
        TPO_COMPILE: lambda: (f"tp_comm_overlap on stack {job.stack} (async TP) needs torch_compile",
                              "set torch_compile: true (--compile), or tp_comm_overlap: false"),
        SP_TP: lambda: ("sequence_parallel needs tp > 1", "set tp > 1 or sequence_parallel: false"),
        HSDP_SHARD: lambda: (f"shard_group={job.shard_group} does not divide dp={dp}", f"choose a divisor of {dp}"),
        SHARD_NOT_HSDP: lambda: (f"shard_group is only used with sharding hsdp, or zero1 under a mode whose optimizer "
                                 f"shards over groups (stack_db runs.sharding optimizer_instances: Megatron's "
                                 f"distributed_optimizer) (got sharding {job.sharding}"
                                 f"{', mode ' + job.sharding_mode if job.sharding_mode else ''})",
                                 "remove shard_group or set sharding: hsdp"),
        EP_EXPERTS: lambda: ((f"ep={job.ep} does not divide the {model.moe.num_experts} routed experts of {model.name}"
                              if model.moe is not None else f"ep={job.ep} on {model.name}, which has no experts"),
                             "choose ep among the divisors of the expert count" if model.moe is not None
                             else "expert parallelism needs a mixture-of-experts model: set ep 1"),
        EP_DPCP: lambda: (f"etp={job.etp or job.tp} x ep={job.ep} does not divide the tp x "
                          f"{'shard_group' if job.sharding == 'hsdp' else 'dp'} x cp ranks "
                          f"({job.tp * (job.shard_group if job.sharding == 'hsdp' else dp) * job.cp})",
                          "Megatron-Core folds the expert grid (etp x ep x expert-dp) into the attention's tp x dp x cp "
                          "ranks (parallel_state.py): choose etp x ep dividing tp*dp*cp (etp defaults to tp)"),
    }[code]()
    return PlannerError(f"{where}{msg[0]}", msg[1])


DEFAULT_RANK_ORDER = "tp-cp-pp-dp"  # the planner's order for a job that names none on a stack without `runs`


def default_rank_order(stack) -> str:
    """The rank order of a job that names none: the stack's own (the first of stack_db
    runs.rank_orders: Megatron's parallel_state default 'tp-cp-ep-dp-pp' -> tp-cp-dp-pp), else the
    planner's DEFAULT_RANK_ORDER."""
    runs = stack.runs if stack is not None else None
    return runs.rank_orders[0].order if runs is not None else DEFAULT_RANK_ORDER


def named_mode(stack, mode: str | None) -> bool:
    """Whether a plan's sharding mode must be named to be reproduced: it is a mode of the
    stack that is not the first of its level (stack_db runs.sharding), which a job giving
    only the level gets (the fit table and `explain` arguments name it; issue 22)."""
    runs = stack.runs if stack is not None else None
    if runs is None or mode is None:
        return False
    names = [m.name for m in runs.sharding]
    if mode not in names:
        return False
    level = runs.sharding[names.index(mode)].level
    return next(m.name for m in runs.sharding if m.level == level) != mode


def _mode_level(stack, job: Job, where: str) -> str:
    """The sharding level of the job's sharding_mode (a mode of the stack's runs.sharding);
    a level the job also names must agree."""
    runs = stack.runs
    names = [m.name for m in runs.sharding] if runs is not None else []
    if job.sharding_mode not in names:
        raise PlannerError(f"{where}sharding_mode {job.sharding_mode!r} is not a mode of stack {stack.name}",
                           f"its modes ({stack.origin} runs.sharding): {', '.join(names) or 'none listed'}; or a level "
                           "(--sharding / sharding: none, zero1, zero2, fsdp, hsdp)")
    level = runs.sharding[names.index(job.sharding_mode)].level
    if "sharding" in job.model_fields_set and job.sharding != level:
        raise PlannerError(f"{where}sharding {job.sharding} contradicts sharding_mode {job.sharding_mode} (a {level} mode)",
                           "give one of them, or a mode of that level")
    return level


def _stack_choices(stack, model, job: Job, plan: PlanArrays, inherited: list, where: str,
                   hw: Hardware, defer: bool = False) -> tuple[PlanArrays, Job, int | None]:
    """The stack's sharding mode and rank order for a job that leaves them out: the first mode
    of the job's sharding level (stack_db runs.sharding, in order) and the stack's own rank
    order (default_rank_order), else the next of the stack's orders, that the stack and its
    trainer's start-up rules accept (when none does, the first is kept and rule_codes names the
    rule it breaks). Also the rule_codes code of the returned plan where it was computed here
    (the first trial is the fallback plan; OK where a trial passed), else None: resolve reuses it
    instead of computing it again for the same plan (about half of a fit row's resolve).
    defer: a job with one trial (its rank order and sharding mode given, as every fit row's job) is not checked
    here: its one trial is the plan returned whatever its code (the fallback is that trial), so the code only
    decides whether resolve raises, which resolve's caller then checks (resolve `rules`); None is returned."""
    runs = stack.runs
    if runs is None:
        return plan, job, None
    from dataclasses import replace as _replace

    orders = [job.rank_order] if job.rank_order is not None else [o.order for o in runs.rank_orders]
    # the job's mode (each plan below takes its smode from `modes`)
    modes = ([[m.name for m in runs.sharding].index(job.sharding_mode)] if job.sharding_mode is not None else
             [i for i, m in enumerate(runs.sharding) if m.level == job.sharding])
    if not modes:
        return _replace(plan, smode=-1), job, None  # rule_codes: STACK_SHARDING
    best, first = None, None
    if defer and len(orders) == 1 and len(modes) == 1:  # the one trial, the plan either way (docstring)
        best = (orders[0], modes[0])
    for o in orders if best is None else ():
        for i in modes:
            trial = _replace(plan, order=order_code(o), smode=i)
            code = int(rule_codes(model, job.gpus, stack, trial, hardware=hw))
            first = code if first is None else first
            if code == OK:
                best = (o, i)
                break
        if best is not None:
            break
    known = OK if first is not None else None
    if best is None:  # nothing runs: report the rule the stack's own order (or the job's) breaks
        best = (orders[0] if job.rank_order is not None else runs.rank_orders[0].order, modes[0])
        # the first trial's plan (orders[0] is the job's order, or the stack's first: runs.rank_orders), its code
        known = first if order_code(best[0]) == order_code(orders[0]) else None
    o, i = best
    plan = _replace(plan, order=order_code(o), smode=i)
    if job.rank_order is None:
        job = job.model_copy(update=dict(rank_order=o))
        if o != runs.rank_orders[0].order:
            inherited.append(("rank_order", o))
    if job.sharding_mode is None:
        job = job.model_copy(update=dict(sharding_mode=runs.sharding[i].name))
    return plan, job, known


def _stack_error(code: int, where: str, job: Job, stack, dp: int) -> PlannerError:
    runs = stack.runs
    src = "; ".join(runs.sources)
    if code == STACK_SHARDING:
        modes = ", ".join(f"{m.name} ({m.level})" for m in runs.sharding)
        return PlannerError(f"{where}stack {stack.name} has no {job.sharding} sharding mode ({stack.origin} runs.sharding: {modes}; "
                            f"{runs.sources[0]})",
                            f"choose a level the stack runs ({', '.join(dict.fromkeys(m.level for m in runs.sharding))})")
    if code == STACK_SCHEDULE:
        have = ", ".join(x.schedule for x in runs.schedules)
        return PlannerError(f"{where}stack {stack.name} does not run the {job.schedule or default_schedule(stack, job.vpp)} pipeline schedule "
                            f"({stack.origin} runs.schedules: {have}; {runs.schedules[0].sources[0]})",
                            f"use one of {have}" + ("" if "interleaved" in have else " (vpp 1)"))
    if code == STACK_ORDER:
        have = ", ".join(f"{o.order} ({o.spelling})" for o in runs.rank_orders)
        return PlannerError(f"{where}stack {stack.name} does not build rank order {job.rank_order} with tp {job.tp}, cp {job.cp}, "
                            f"pp {job.pp}, dp {dp} ({stack.origin} runs.rank_orders: {have}; {runs.rank_orders[0].sources[0]})",
                            f"use --rank-order {runs.rank_orders[0].order}, or leave it out (the stack's order)")
    if code == STACK_DEGREE:
        over = [f"{ax} {getattr(job, ax)} > {cap}" for ax, cap in (("tp", runs.max_tp), ("cp", runs.max_cp),
                                                                  ("pp", runs.max_pp), ("ep", runs.max_ep))
                if cap is not None and getattr(job, ax) > cap]
        return PlannerError(f"{where}stack {stack.name} runs at most {', '.join(over)} ({stack.origin} runs.max_*; {src})",
                            "lower the degree, or choose a stack that has it (planner stacks)")
    return PlannerError(f"{where}etp {job.etp} differs from tp {job.tp}, but stack {stack.name} has no expert tensor parallelism "
                        f"of its own ({stack.origin} runs.expert_tensor_parallel)", "leave etp out (it is tp) or choose --stack megatron")


def default_seq_len(model: ModelSpec, recipe: bool = False) -> int:
    """The training length of a job that gives none (the rule at HF_DEFAULT_SEQ): with `recipe`
    (a job planned from options, a job file or code; not a trainer config) the model's published
    training.seq_len where it has one; else the model's context where it is at most HF_DEFAULT_SEQ, else HF_DEFAULT_SEQ."""
    if recipe and model.training is not None and model.training.seq_len is not None:
        return model.training.seq_len
    return min(model.max_seq_len, HF_DEFAULT_SEQ)


def _seq_len(job: Job, model: ModelSpec, warnings: list) -> tuple[int, list[str]]:
    """The job's sequence length and what was assumed about it (the rule at HF_DEFAULT_SEQ); warns
    beyond the model's context. A job without seq_len (from options, a job file or code) takes the
    model's published training.seq_len, else default_seq_len; a trainer config without a length
    had the default laid in when it was read (trainers.default_trainer_seq: no recipe), and a run
    record states its own."""
    seq_assumed: list[str] = []
    published = model.training.seq_len if model.training is not None else None
    if job.seq_len is not None:
        seq = job.seq_len
    elif published is not None:
        seq = published
        from .recipe import _brief  # the citation up to its quoted detail (the entry holds it whole)

        seq_assumed.append(f"seq_len={seq:,}: the published pre-training length (model_zoo training.seq_len; "
                           f"{_brief(model.training.sources['seq_len'])})"
                           + (f"; its max_seq_len {model.max_seq_len:,} is the context the model serves"
                              if seq < model.max_seq_len else "") + " (pass --seq-len)")
    else:
        seq = default_seq_len(model)
        if seq < model.max_seq_len:
            what = ("a Hugging Face config's default training length (plan.HF_DEFAULT_SEQ); its max_position_embeddings"
                    if model_source(job.model).suffix == ".json" else
                    "the default training length (plan.HF_DEFAULT_SEQ) of a model entry that publishes no pre-training "
                    "length (training.seq_len); its max_seq_len")
            seq_assumed.append(f"seq_len={seq:,}: {what} {model.max_seq_len:,} is the context the model serves, not the "
                               "length it trains at (pass --seq-len)")
    ctx = model.max_seq_len_by_stack.get(job.stack or "", model.max_seq_len)  # as the job's stack builds it
    if seq > ctx:
        what = "max_seq_len" if ctx == model.max_seq_len else f"max_seq_len_by_stack {job.stack}"
        warnings.append(f"seq_len {seq:,} is beyond the {ctx:,}-token context of {model.name} (its "
                        f"{what}): the model was not trained at this length (position embeddings, RoPE scaling); "
                        "the figures assume the shapes scale")
    return seq, seq_assumed


def _global_batch(job: Job, seq: int, where: str) -> int:
    """Sequences per step: global_batch, or global_batch_tokens (default DEFAULT_GLOBAL_BATCH_TOKENS)
    in whole sequences."""
    if job.global_batch is not None and job.global_batch_tokens is not None:
        raise PlannerError(f"{where}both global_batch and global_batch_tokens are set", "give one of them")
    if job.global_batch is not None:
        gbs = job.global_batch
    elif job.batch_size_schedule:  # a ramp: the plan is its last phase's batch (planner/batch_ramp.py)
        gbs = job.batch_size_schedule[-1].global_batch
    else:
        tokens = job.global_batch_tokens or DEFAULT_GLOBAL_BATCH_TOKENS
        if tokens % seq:
            raise PlannerError(
                f"{where}global batch of {tokens:,.0f} tokens is not a whole number of {seq:,}-token sequences",
                "choose --global-batch-tokens as a multiple of --seq-len, or give --global-batch in sequences",
            )
        gbs = int(tokens // seq)
        if gbs > MAX_COUNT:
            raise PlannerError(f"{where}field `global_batch_tokens`: {tokens:,.0f} tokens are {gbs:,} sequences of {seq:,}, "
                               f"more than the {MAX_COUNT:,} a global batch may hold",
                               "give the tokens per step, e.g. 16M (--global-batch-tokens 16M)")
    return gbs


def _bytes_per_param(job: Job, stack, inherited: list, warnings: list, recipe: str | None = None,
                     where: str = "") -> tuple[BytesPerParam, str, bool, bool, bool]:
    """(BytesPerParam, preset name, precision-aware, TE master, remainders): the job's bytes, else the stack's default
    (inherited); warns without an fp32 master copy. The stack's precision-aware optimizer (stack_db
    runs.low_precision_moments; Megatron-LM --use-precision-aware-optimizer) runs where the job says so
    (precision_aware_optimizer), by default where the bytes keep Adam's moments below fp32 (the only way such a
    stack holds them: Megatron asserts fp32 states without it, optimizer_config.py @d98e8a64 l. 466-480). TE's
    FusedAdam then holds the master weights (te_master: Megatron's use_precision_aware_optimizer_no_fp8_or_ds_fp8,
    optimizer_config.py l. 407-413: main weights below fp32, or no fp8 recipe / delayed scaling; optimizer/__init__.py
    l. 576-588 hands it master_weights, use_decoupled_grad, master_weight_dtype, store_param_remainders) where the
    job's precision or recipe is one of runs.low_precision_moments.te_master or its master is below 4 B, and the job
    offloads no optimizer (HybridDeviceOptimizer: planner/offload.py prices its own fp32 states). Under a precision of
    master_remainders, with fp32 main weights beside bf16 ones, it keeps them as 16-bit remainders: master 2 B, said
    in a warning (optimizer_config.py l. 192: store_param_remainders True, no flag sets it; TransformerEngine
    @4329ff84 fused_adam.py l. 213-215, 612: master_weights, fp32 master and bf16 parameters; l. 414-415: an int16
    tensor). Not under the stack's own_master_modes (Megatron-FSDP at d98e8a64: FusedAdam's master_weights set False,
    optimizer/__init__.py l. 1147-1161; it steps Megatron-FSDP's fp32 main weight shards, whose fp32 parameters keep no
    remainders, fused_adam.py l. 612): the master is the job's 4 B there (remainders true: memory.master_bytes)."""
    bpp_spec = job.bytes_per_param
    if bpp_spec is None:
        bpp_spec = stack.defaults.bytes_per_param
        inherited.append(("bytes_per_param", bpp_spec))
    bpp, bpp_name = bytes_per_param(bpp_spec)
    runs = stack.runs if stack is not None else None
    if runs is not None and runs.bytes_per_param is not None and isinstance(bpp_spec, str) and bpp_spec not in runs.bytes_per_param:
        warnings.append(f"bytes_per_param {bpp_spec}: stack {stack.name} keeps {', '.join(runs.bytes_per_param)} ({stack.origin} "
                        f"runs.bytes_per_param); priced as asked, but its trainer files cannot say it (export refuses)")
    key = job.precision if job.precision != "fp8" else recipe
    lpm = runs.low_precision_moments if runs is not None else None
    pao = precision_aware(job, stack, bpp, where)
    te_master = bool(pao and job.offload_optimizer == "none" and (key in lpm.te_master or bpp.master < 4.0))
    remainders = bool(te_master and key in lpm.master_remainders and not job.fp16
                      and bpp.master == 4.0 and bpp.weights == 2.0)
    if remainders:
        bpp = bpp.model_copy(update={"master": 2.0})
        own = [m for m in lpm.own_master_modes if m in {x.name for x in runs.sharding}
               and m not in lpm.no_decoupled_grad_modes]  # those refused (PRECISION_AWARE_MFSDP: te_master)
        besides = (f", under sharding modes other than {', '.join(own)}, whose own fp32 main weights it steps (4 B: "
                   f"{stack.origin} runs.low_precision_moments.own_master_modes)" if own else "")
        warnings.append(f"bytes_per_param {bpp_name} with {key}: stack {stack.name}'s precision-aware optimizer keeps the fp32 "
                        "master weights as 16-bit remainders beside the bf16 weights (store_param_remainders): 2 B a "
                        f"parameter, not 4 ({stack.origin} runs.low_precision_moments.master_remainders){besides}")
    if bpp.master == 0:
        warnings.append(
            "bytes_per_param keeps no fp32 master copy of the weights: small updates vanish in bf16 "
            "(seed sec. 7.1: 1.0 + 1e-4 rounds back to 1.0 in bf16; Micikevicius et al. 2017 keep an fp32 master)"
        )
    return bpp, bpp_name, pao, te_master, remainders


def precision_aware(job: Job, stack, bpp: BytesPerParam | None = None, where: str = "") -> bool:
    """Whether the job runs the stack's precision-aware optimizer (stack_db runs.low_precision_moments): the job's
    precision_aware_optimizer, else Adam's moments below fp32 beside a master copy (`bpp`: the job's bytes, else the
    stack's default). Refused: the field on a stack without one; off with moments below fp32 on a stack that holds
    them only with it (Megatron asserts the state dtypes are fp32 without it, optimizer_config.py @d98e8a64
    l. 466-480)."""
    runs = stack.runs if stack is not None else None
    lpm = runs.low_precision_moments if runs is not None else None
    if bpp is None:
        bpp = bytes_per_param(job.bytes_per_param if job.bytes_per_param is not None else stack.defaults.bytes_per_param)[0]
    low = bpp.optimizer < 8.0 and bpp.master > 0.0
    given = job.precision_aware_optimizer
    if given and lpm is None:
        raise PlannerError(f"{where}precision_aware_optimizer true on stack {stack.name if stack else None}, which runs no "
                           f"precision-aware optimizer ({stack.origin if stack else 'stack_db'} runs.low_precision_moments)",
                           "leave precision_aware_optimizer out, or plan --stack megatron")
    if given is False and low and lpm is not None:
        raise PlannerError(f"{where}precision_aware_optimizer false with Adam moments of {bpp.optimizer:g} B: stack "
                           f"{stack.name} keeps moments below fp32 only with its precision-aware optimizer (Megatron "
                           "asserts 'exp_avg_dtype can only be fp32 when not using precision-aware optimizer', "
                           "megatron/core/optimizer/optimizer_config.py @d98e8a64 l. 475-480)",
                           "leave precision_aware_optimizer out, or keep fp32 moments (--bytes-per-param megatron)")
    return bool(given) if given is not None else (low and lpm is not None)


def _split_whose(stack: Stack | None, code: int) -> str | None:
    """Whose rule places the units a pipeline split does not divide evenly, by the stack's split code (Stack
    .pipeline_split, pipeline.SPLIT_CODES): the stack's front or bisection rule (L the units: the layers plus the
    ends counted), or None for trim_ends (the caller names the Megatron-Core / Llama 3 source)."""
    name = stack.name if stack else ""
    return {SPLIT_CODES["front"]: f"stack {name}'s split, stack_db pipeline_split front: the first L mod (pp vpp) "
                                  "chunks one layer more",
            SPLIT_CODES["bisection"]: f"stack {name}'s split, stack_db pipeline_split bisection: DeepSpeed a12aaedc's "
                                      "partition_balanced, ceil(L / pp) layers a stage from the first, "
                                      "planner/pipeline.py [11]"}.get(code)


def _per_stage(model: ModelSpec, job: Job, plan: PlanArrays) -> str:
    """The transformer layers each pipeline stage holds (pipeline.chunk_layers, chunk j on stage j mod pp), listed."""
    from .pipeline import chunk_layers

    chunks = chunk_layers(model.num_layers, job.pp, job.vpp, int(plan.split_emb), int(plan.split_loss), int(plan.split_front))
    return ", ".join(str(sum(chunks[s::job.pp])) for s in range(job.pp))


def _split_warnings(model: ModelSpec, job: Job, plan: PlanArrays, warnings: list, stack: Stack | None = None) -> None:
    """Say how the layers fall on the pipeline stages where the split is uneven or counts the
    embedding / loss as layers (pipeline.stage_layers), naming whose split it is: the stack's
    own (Stack.pipeline_ends_as_layers), Megatron-Core's flags, or the stack's front / bisection rule."""
    counted = int(plan.split_emb) + int(plan.split_loss)
    code = int(plan.split_front)
    if job.pp > 1 and (int(plan.split_first) or int(plan.split_last)):
        first, mid, last = (int(x) for x in plan_stage_layers(model.num_layers, plan))
        given = ", ".join(f"{k} {int(v)}" for k, v in (("first_stage_layers", plan.split_first),
                                                          ("last_stage_layers", plan.split_last)) if int(v))
        per = ", ".join(map(str, [first] + [mid] * (job.pp - 2) + [last]))
        warnings.append(f"{given}: {per} layers on the {job.pp} pipeline stages"
                        + (f", {job.vpp} model chunks a stage of 1/{job.vpp} each" if job.vpp > 1 else "")
                        + " (Megatron-LM --decoder-first/last-pipeline-num-layers, pipeline.py [14])")
    elif job.pp > 1 and counted:
        first, mid, last = (int(x) for x in stage_layers(model.num_layers, job.pp, job.vpp, plan.split_emb, plan.split_loss,
                                                         plan.split_front))
        n_loss = int(plan.split_loss)
        as_one = " and ".join(n for n, on in (("the embedding", plan.split_emb), ("the loss", n_loss == 1)) if on)
        ends = " and ".join(([f"{as_one} counted as a layer"] if as_one else [])
                            + ([f"the last chunk's end (output layer, loss, MTP) counted as {n_loss} layers"] if n_loss > 1 else []))
        units = model.num_layers + counted
        whose = _split_whose(stack, code)  # an uneven count placed by the stack's rule, not Megatron-Core's
        placed = f"; the {units} units placed by {whose}" if whose and units % (job.pp * job.vpp) else ""
        warnings.append(
            f"{ends} of the pipeline split: {model.num_layers} + {counted} units in pp*vpp="
            f"{job.pp * job.vpp} chunks; "
            + (f"the middle stages hold {mid} layers, the first {first} and the last {last} " if job.pp > 2 else
               f"the first stage holds {first} layers and the last {last} (no middle stage on pp 2) ")
            + (f"(stack {stack.name}'s own split: stack_db pipeline_ends_as_layers{placed})"
               if stack is not None and stack.pipeline_ends_as_layers else
               f"(Megatron-Core --pipeline-model-parallel-layout{placed})" if n_loss > 1 else
               f"({whose}, over the embedding and the output layer as a unit each: the trainer's end weights, by "
               f"default {stack.origin} defaults.account_for_*_in_pipeline_split; per stage {_per_stage(model, job, plan)})"
               if whose and stack is not None and (stack.defaults.account_for_embedding_in_pipeline_split
                                                   or stack.defaults.account_for_loss_in_pipeline_split) else
               f"({whose}, over the embedding and the output layer as a unit each: DeepSpeed's partition_method "
               "'type:transformer|embedding')" if whose else
               f"(Megatron-Core account_for_*_in_pipeline_split{placed})")
        )
    elif model.num_layers % (job.pp * job.vpp):
        first, mid, last = (int(x) for x in stage_layers(model.num_layers, job.pp, job.vpp, 0, 0, code))
        warnings.append(
            f"{model.num_layers} layers do not split evenly into pp*vpp={job.pp * job.vpp} chunks: "
            + (f"the middle stages hold {mid} layers, the first {first} and the last {last} " if job.pp > 2 else
               f"the first stage holds {first} layers and the last {last} (no middle stage on pp 2) ")
            + f"({_split_whose(stack, code) or 'Llama 3 sec. 3.3.2'})"
        )


def _check_output_layer_options(job: Job, stack, where: str) -> None:
    """The job's stack-option fields, in this order: those only some stacks have, Megatron-FSDP's, the kernel and loss
    switches (the three checks below), then the output layer's deferral without pipeline parallelism and fp8 / fp4
    weights without their training precision or a stack that keeps quantized weights (a plan without the distributed
    optimizer, which Megatron refuses them on, prices bf16 weights: memory.py [11])."""
    _check_stack_option_fields(job, stack, where)
    _check_mfsdp_fields(job, stack, where)
    _check_kernel_fields(job, stack, where)
    # quantized parameters: each needs TE's quantized weights and its own training precision
    for name, precision, why in (
            ("fp8_param_gather", "fp8", "Megatron refuses fp8 parameters without fp8 training (transformer_config.py)"),
            # NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 1103-1105
            ("fp4_param_gather", "nvfp4", "Megatron refuses '--fp4-param-gather must be used together with --fp4-format' "
                                          "(arguments.py l. 1104-1105)")):
        if getattr(job, name) and not stack.memory.fp8_weight_cache:
            raise PlannerError(f"{where}{name} is set but stack {stack.name} keeps no quantized weights "
                               f"({stack.origin} memory.fp8_weight_cache)", "leave it out, or choose --stack megatron")
        if getattr(job, name) and job.precision != precision:
            raise PlannerError(f"{where}{name} needs precision {precision} (got {job.precision}): {why}",
                               f"set precision: {precision}, or leave it out")
    if job.defer_embedding_wgrad is not None and job.pp == 1:
        # only the pipelined schedules clear and drain the buffers (Megatron-LM @d98e8a64
        # pipeline_parallel/schedules.py: clear_/finish_embedding_wgrad_compute are called from
        # forward_backward_pipelining_with/without_interleaving, not forward_backward_no_pipelining)
        raise PlannerError(f"{where}defer_embedding_wgrad needs pipeline parallelism (pp {job.pp}): Megatron drains the "
                           "deferred output-layer gradients only in its pipelined schedules", "leave it out, or set pp > 1")


def _check_stack_option_fields(job: Job, stack, where: str) -> None:
    """Job fields that name an option only some stacks have (the output layer's deferred weight gradients, the
    chunked loss, DeepSpeed's TP-duplicated sync and partitioned activations, SPMD backends, the selective policy,
    the optimizer implementation, ...): refused on a stack without it, naming the stack field."""
    if job.defer_embedding_wgrad is not None and stack.runs.defer_embedding_wgrad is None:
        raise PlannerError(f"{where}defer_embedding_wgrad is set but stack {stack.name} has no deferred output-layer "
                           f"weight gradients ({stack.origin} runs.defer_embedding_wgrad)", "leave it out, or choose --stack megatron")
    if job.loss_logit_chunks is not None and stack.memory.chunked_loss_chunks is None:
        raise PlannerError(f"{where}loss_logit_chunks is set but stack {stack.name} does not run torchtitan's loss "
                           f"component ({stack.origin} memory.chunked_loss_chunks: none; the field is torchtitan PR #996's "
                           "chunked_cross_entropy_loss, memory.py [ck])", "leave it out, or choose --stack torchtitan")
    if job.loss_logit_chunks is not None and job.chunked_loss:
        raise PlannerError(f"{where}loss_logit_chunks and chunked_loss are two losses (torchtitan PR #996's chunks of the "
                           "materialised logits; 0.3.0's ChunkedLossWrapper): a run computes one", "give one of them")
    if job.chunked_loss and stack.memory.chunked_loss_chunks is None:
        raise PlannerError(f"{where}chunked_loss is set but stack {stack.name} has no chunked cross-entropy "
                           f"({stack.origin} memory.chunked_loss_chunks)", "leave it out, or choose --stack torchtitan")
    if job.sync_tp_duplicated_parameters and (stack.runs is None or stack.runs.sync_tp_duplicated_parameters is None):
        raise PlannerError(f"{where}sync_tp_duplicated_parameters is set but stack {stack.name} does not all-reduce the "
                           f"TP-duplicated parameters in the forward ({stack.origin} runs.sync_tp_duplicated_parameters)",
                           "leave it out, or choose --stack megatron-deepspeed-bigscience")
    if job.partition_activations and (stack.runs is None or stack.runs.partition_activations is None):
        raise PlannerError(f"{where}partition_activations is set but stack {stack.name} does not split the checkpointed "
                           f"layer inputs over the TP ranks ({stack.origin} runs.partition_activations)",
                           "leave it out, or choose --stack megatron-deepspeed")
    spmd = stack.runs.spmd_backends if stack.runs is not None else None
    if job.spmd_backend is not None and (spmd is None or job.spmd_backend not in spmd.backends):
        raise PlannerError(f"{where}spmd_backend {job.spmd_backend} is set but stack {stack.name} "
                           + ("has no SPMD backend option" if spmd is None else
                              f"runs only {', '.join(spmd.backends)}") + f" ({stack.origin} runs.spmd_backends)",
                           "leave it out, or choose --stack torchtitan-0.3")
    sel = stack.selective
    if job.selective_recomputes_attention and (sel.recompute_attention_core or "attn_out" not in sel.keeps):
        raise PlannerError(f"{where}selective_recomputes_attention is set but stack {stack.name}'s selective policy "
                           f"does not save the attention output ({stack.origin} selective: attn_out kept, "
                           "recompute_attention_core false)", "leave it out, or choose --stack torchtitan")
    impls = stack.memory.optimizer_step_temporaries
    if job.optimizer_implementation is not None and job.optimizer_implementation not in impls:
        runs = ", ".join(impls) if impls else "its one fused optimizer only"
        raise PlannerError(f"{where}optimizer_implementation {job.optimizer_implementation} is not one stack {stack.name} "
                           f"runs ({stack.origin} memory.optimizer_step_temporaries: {runs})",
                           "leave it out (the stack's default), or choose --stack torchtitan")
    if job.empty_unused_memory_level and stack.runs.empty_unused_memory_level is None:
        raise PlannerError(f"{where}empty_unused_memory_level is set but stack {stack.name} has no such option "
                           f"({stack.origin} runs.empty_unused_memory_level)", "leave it out, or choose --stack megatron")
    if job.mla_down_proj_fusion and stack.runs.mla_down_proj_fusion is None:
        raise PlannerError(f"{where}mla_down_proj_fusion is set but stack {stack.name} has no such option "
                           f"({stack.origin} runs.mla_down_proj_fusion)", "leave it out, or choose --stack megatron")
    if job.mfsdp_outer_optim and not any(m.outer_optim for m in (stack.runs.sharding or [])):
        raise PlannerError(f"{where}mfsdp_outer_optim is set but stack {stack.name} runs no HSDP mode that shards the "
                           f"optimizer over the replicas ({stack.origin} runs.sharding outer_optim: none)",
                           "leave it out, or choose --stack megatron")


def _check_mfsdp_fields(job: Job, stack, where: str) -> None:
    """Megatron-FSDP's job fields: v2 (mfsdp_v2) on a stack with a v2 mode and without what v2 refuses, the double
    buffer on a stack with a Megatron-FSDP mode."""
    if job.mfsdp_v2:
        if not any(m.mfsdp_v2 for m in (stack.runs.sharding or [])):
            raise PlannerError(f"{where}mfsdp_v2 is set but stack {stack.name} runs no Megatron-FSDP v2 mode "
                               f"({stack.origin} runs.sharding mfsdp_v2: none)", "leave it out, or choose --stack megatron")
        for other, msg in (("mfsdp_double_buffer", "v2 reads no fsdp_double_buffer: its buffers are megatron_fsdp/"
                            "experimental/'s, allocated on demand (mcore_fsdp_adapter.py @d98e8a64 l. 489-703)"),
                           ("mfsdp_outer_optim", "Megatron raises 'MFSDP v2 does not currently support outer DP "
                            "sharding.' (mcore_fsdp_adapter.py @d98e8a64 l. 670-671)"),
                           ("fp16", "FullyShardedOptimizer raises 'MFSDP v2 does not currently support FP16 training' "
                            "(megatron/core/optimizer/fully_sharded_optimizer.py @d98e8a64 _validate_config)")):
            if getattr(job, other):
                raise PlannerError(f"{where}mfsdp_v2 with {other}: {msg}", f"leave {other} out, or mfsdp_v2 out")
        if job.gradient_accumulation_fusion is not False:  # (on by default on Megatron: arguments.py l. 2944-2948)
            raise PlannerError(f"{where}mfsdp_v2 with the gradient-accumulation fusion: Megatron raises 'MFSDP v2 does "
                               "not currently support gradient accumulation fusion.' (mcore_fsdp_adapter.py @d98e8a64 "
                               "l. 672-673; the fusion is on unless --no-gradient-accumulation-fusion)",
                               "set gradient_accumulation_fusion false, or leave mfsdp_v2 out")
        if job.cuda_graph_impl != "none":
            raise PlannerError(f"{where}mfsdp_v2 with cuda_graph_impl {job.cuda_graph_impl}: Megatron raises 'MFSDP v2 "
                               "does not currently support CUDA graphs.' (mcore_fsdp_adapter.py @d98e8a64 l. 678-679)",
                               "leave cuda_graph_impl none, or mfsdp_v2 out")
    if job.mfsdp_double_buffer and not any(m.reduce_queue_units is not None for m in (stack.runs.sharding or [])):
        raise PlannerError(f"{where}mfsdp_double_buffer is set but stack {stack.name} runs no Megatron-FSDP mode "
                           f"({stack.origin} runs.sharding reduce_queue_units: none)",
                           "leave it out, or choose --stack megatron")


def _check_kernel_fields(job: Job, stack, where: str) -> None:
    """Kernel and loss switches (Transformer Engine version, fused cross-entropy and its implementation, Megatron-Core's
    local attention and softmax switches, the kernel fusions): refused where the stack has no such switch or
    Megatron refuses the combination."""
    if job.te_version is not None:
        if stack.memory.te_version is None:
            raise PlannerError(f"{where}te_version is set but stack {stack.name} runs no Transformer Engine "
                               f"({stack.origin} memory.te_version)", "leave it out, or choose --stack megatron")
        if te_release(job.te_version) < TE_OLDEST:
            raise PlannerError(f"{where}{te_too_old(job.te_version)}", TE_OLDEST_HINT)
    if job.dummy_wgrads is not None and stack.kernels.wgrad_unfused is None:
        raise PlannerError(f"{where}dummy_wgrads is set but stack {stack.name} has no gradient-accumulation fusion switch "
                           f"({stack.origin} kernels.wgrad_unfused)", "leave it out, or choose --stack megatron")
    if job.cross_entropy_fusion and stack.memory.fused_loss_extra_per_logit is None:
        raise PlannerError(f"{where}cross_entropy_fusion is set but stack {stack.name} has no fused cross-entropy "
                           f"({stack.origin} memory.fused_loss_extra_per_logit)", "leave it out, or choose --stack megatron")
    if job.cross_entropy_fusion_impl == "te" and not job.cross_entropy_fusion:
        raise PlannerError(f"{where}cross_entropy_fusion_impl te is set without cross_entropy_fusion (Megatron-Core reads "
                           "the implementation only with cross_entropy_loss_fusion)", "set cross_entropy_fusion: true, or leave "
                           "cross_entropy_fusion_impl out")
    if job.cross_entropy_fusion_impl == "te" and stack.memory.te_loss_per_logit is None:
        raise PlannerError(f"{where}cross_entropy_fusion_impl te is set but stack {stack.name} has no Transformer Engine "
                           f"cross-entropy ({stack.origin} memory.te_loss_per_logit)", "leave it out, or choose --stack megatron")
    if (job.transformer_impl is not None or job.local_core_attention) and not stack.memory.global_memory_buffer:
        raise PlannerError(f"{where}transformer_impl / local_core_attention are Megatron-Core's; stack {stack.name} has "
                           f"neither ({stack.origin} memory.global_memory_buffer)", "leave them out, or choose --stack megatron")
    if (job.transformer_impl == "local" or job.local_core_attention) and job.attention != "eager":
        raise PlannerError(f"{where}Megatron-Core's local core attention keeps the softmax output (attention eager), "
                           f"not {job.attention}", "set attention: eager")
    if job.attention == "eager" and stack.kernels.score_softmax is None:
        raise PlannerError(f"{where}attention eager is set but stack {stack.name} does not say what its eager core attention "
                           f"moves ({stack.origin} kernels.score_softmax / score_dropout)", "choose --stack megatron, or attention flash")
    switch = stack.runs is not None and stack.runs.attention is not None and stack.runs.attention.eager_softmax_fusion_switch
    if job.masked_softmax_fusion is False and not (job.transformer_impl == "local" or job.local_core_attention or switch):
        raise PlannerError(f"{where}masked_softmax_fusion false without Megatron-Core's local core attention: only its "
                           "DotProductAttention reads TransformerConfig.masked_softmax_fusion (dot_product_attention.py "
                           "@d98e8a64 l. 100-109; Transformer Engine's attention runs its own kernels)",
                           "set transformer_impl: local (or local_core_attention: true), or leave masked_softmax_fusion out")
    if job.attention_softmax_in_fp32 is not None and stack.kernels.score_softmax_unfused is None:
        raise PlannerError(f"{where}attention_softmax_in_fp32 is set but stack {stack.name} runs no torch softmax in its "
                           f"eager core attention ({stack.origin} kernels.score_softmax_unfused null)",
                           "leave it out, or choose --stack megatron")
    if job.defer_embedding_wgrad is not None and job.gradient_accumulation_fusion is False:
        # Megatron-LM @d98e8a64 megatron/core/model_parallel_config.py l. 550-553
        raise PlannerError(f"{where}defer_embedding_wgrad with gradient_accumulation_fusion false: Megatron refuses it "
                           "('Cannot defer embedding wgrad compute when gradient accumulation fusion is not used')",
                           "leave one of the two out")
    for name, fields in FUSION_FIELDS.items():
        if getattr(job, name) is False and any(getattr(stack.kernels, f) is None for f in fields):
            raise PlannerError(f"{where}{name} false is set but stack {stack.name} has no such switch ({stack.origin} "
                               f"kernels {', '.join(fields)} null: its kernels are the ones priced)",
                               f"leave {name} out, or choose --stack megatron")


# torchtitan's refusals of the optimizer in the backward (pytorch/torchtitan @e347b1e5e
# torchtitan/components/optimizer.py build_optimizers l. 277-290: NotImplementedError with Expert
# Parallel, with Pipeline Parallel, with TorchFT); the planner prices no TorchFT
EARLY_STEP_SOURCE = "pytorch/torchtitan @e347b1e5e torchtitan/components/optimizer.py build_optimizers l. 277-290"
# eager core attention runs without context parallelism: Megatron-Core's own DotProductAttention (the eager core:
# --transformer-impl local / --attention-backend local) asserts it, and its 2021 code had no CP at all
EAGER_CP_SOURCE = ("NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/dot_product_attention.py DotProductAttention."
                   "__init__ l. 57-59 ('Context parallelism is only supported by TEDotProductAttention!')")


def _check_early_step(job: Job, stack, plan: PlanArrays, where: str, warnings: list) -> None:
    """early_step_in_backward (memory.py [es]): refused on a stack without it and, as torchtitan
    refuses it, with pipeline or expert parallelism; with more than one micro-batch a step the
    optimizer runs once per micro-batch (torchtitan does not refuse it: a warning)."""
    if not job.early_step_in_backward:
        return
    if not stack.memory.optimizer_in_backward:
        raise PlannerError(f"{where}early_step_in_backward is set but stack {stack.name} does not step the optimizer in "
                           f"the backward ({stack.origin} memory.optimizer_in_backward)", "leave it out, or choose --stack torchtitan")
    for name, deg, msg in (("pp", job.pp, "Pipeline Parallel"), ("ep", job.ep, "Expert Parallel")):
        if deg > 1:
            raise PlannerError(f"{where}early_step_in_backward with {name} {deg}: torchtitan refuses it ('Optimizers in "
                               f"backward is not supported with {msg}', {EARLY_STEP_SOURCE})",
                               f"set {name} 1, or leave early_step_in_backward out")
    m = int(np.asarray(plan.microbatches).max())
    if m > 1:
        warnings.append(f"early_step_in_backward with {m} micro-batches a step: each micro-batch's backward steps the "
                        "optimizer (torchtitan's post-accumulate-grad hooks fire on every reduce-scatter; it does not "
                        "refuse gradient accumulation), so the run takes one optimizer step per micro-batch")
    if job.sharding not in ("fsdp", "hsdp"):
        warnings.append("early_step_in_backward without FSDP: priced as without it (only FSDP2's sharded gradients, "
                        "stepped and freed as each unit's reduce-scatter ends, are modelled: memory.py [es])")


EMBEDDING_GRAD_SKIP_SOURCE = ("NVIDIA/Megatron-LM @d98e8a64 megatron/core/distributed/finalize_model_grads.py "
                              "_allreduce_word_embedding_grads l. 250-258: under use_megatron_fsdp the all-reduced tensor is "
                              "weight.grad._local_tensor, and with param.grad None (update_main_grads installs the shard as "
                              "decoupled_grad under --use-precision-aware-optimizer) l. 255-257 return before the all_reduce")


def _embedding_grad_skip_warning(job: Job, model: ModelSpec, stack, plan: PlanArrays, pao: bool, warnings: list) -> None:
    """The pipeline's word-embedding gradient all-reduce that the plan's sharding mode never runs under the job's
    precision-aware optimizer (stack_db runs.sharding embedding_grad_shard skipped_decoupled: Megatron-LM @d98e8a64's
    Megatron-FSDP, step.py [20], priced 0): at pp > 1 with a tied embedding (where the stack's pipeline all-reduces
    it, Stack.pipeline_tied_grad_allreduce) or the MTP stage's own embedding copy (stack memory.mtp_embedding_copy),
    the two copies' gradients are never summed, a trainer bug the planner prices and says, not fixes."""
    if job.pp <= 1 or not pao or stack.runs is None or not stack.runs.sharding:
        return
    tied = bool(stack.pipeline_tied_grad_allreduce and model.tied_embeddings)
    mtp = bool(stack.memory.mtp_embedding_copy and model.mtp_layers)
    mode = stack.runs.sharding[int(mode_index(plan, stack.runs.sharding))]  # the cost models' row of the plan's mode
    if not (tied or mtp) or mode.embedding_grad_shard is None or not mode.embedding_grad_shard.skipped_decoupled:
        return
    copies = "the tied input and output embeddings" if tied else "the first stage's and the MTP stage's word embeddings"
    warnings.append(f"{copies} at pp {job.pp} under {mode.name} with the precision-aware optimizer: stack {stack.name}'s "
                    f"trainer never sums the two copies' gradients, so they drift apart each step ({EMBEDDING_GRAD_SKIP_SOURCE}; "
                    f"{stack.origin} runs.sharding {mode.name} embedding_grad_shard skipped_decoupled); the all-reduce is priced "
                    "0 as it runs (step.py [20])")


def _check_offload(job: Job, stack, hw, where: str, warnings: list) -> None:
    """offload_optimizer / offload_param (planner/offload.py): refused on a stack without cpu_offload, on a GPU entry
    without its host link (pcie_GBps) or host DRAM bandwidth (host_memory_GBps), without the sharding the trainers offload under (DeepSpeed's ZeRO-Offload needs
    a ZeRO stage and its own ZeRO optimizer, not the BF16_Optimizer, engine.py @38327e07 _do_optimizer_sanity_check
    l. 1300-1350; offload_param ZeRO-3, deepspeed/runtime/zero/stage3.py; torchtitan applies CPUOffloadPolicy under
    FSDP / HSDP only, models/llama3/infra/parallelize.py @e347b1e5e l. 125-147), and where the stack moves parameters
    and optimizer together (FSDP2) but the job names one."""
    opt, par = job.offload_optimizer == "cpu", job.offload_param == "cpu"
    tuned = [k for k, on in (("offload_fraction", job.offload_fraction != 1.0), ("offload_overlap", job.offload_overlap))
             if on]
    if tuned and not opt:
        raise PlannerError(f"{where}{' and '.join(tuned)} without offload_optimizer cpu: nothing is offloaded",
                           "set offload_optimizer cpu, or leave " + " and ".join(tuned) + " out")
    if tuned and (stack.cpu_offload is None or stack.cpu_offload.transfers != "hybrid_device"):
        raise PlannerError(f"{where}{' and '.join(tuned)} on stack {stack.name}, which offloads the whole optimizer "
                           "partition with its own copies (DeepSpeed's Twin-Flow ratio is not modelled)",
                           "leave " + " and ".join(tuned) + " out, or use --stack megatron (HybridDeviceOptimizer: "
                           "--optimizer-offload-fraction, --overlap-cpu-optimizer-d2h-h2d)")
    if not (opt or par):
        return
    on = ", ".join(f"{k} cpu" for k, v in (("offload_optimizer", opt), ("offload_param", par)) if v)
    spec = stack.cpu_offload
    if spec is None:
        raise PlannerError(f"{where}{on}: stack {stack.name} does not offload model states to the host ({stack.origin} "
                           "cpu_offload)", "leave offload_optimizer / offload_param out, or choose --stack "
                           "megatron-deepspeed (ZeRO-Offload) or torchtitan (FSDP2 CPUOffloadPolicy)")
    if hw.pcie_GBps is None:
        raise PlannerError(f"{where}{on}: hardware {hw.name} gives no host link rate (pcie_GBps), which prices the "
                           "offload's copies", "give your server's with --pcie-gbps (job field pcie_gbps: GB/s per "
                           "direction, PCIe Gen5 x16: 64), or add pcie_GBps to the hardware file; the host's other "
                           f"figures: {HOST_FLAGS}")
    if hw.host_memory_GBps is None:
        raise PlannerError(f"{where}{on}: hardware {hw.name} gives no host memory bandwidth (host_memory_GBps), which "
                           "prices the host's Adam (memory-bound, planner/offload.py [cpu-adam])",
                           "give your server's with --host-memory-gbps (job field host_memory_gbps: the node's DRAM "
                           "peak, GB/s: channels x MT/s x 8 B x sockets, from the CPU's datasheet), or add "
                           f"host_memory_GBps to the hardware file; the host's other figures: {HOST_FLAGS}")
    if spec.params_with_optimizer and opt != par:
        raise PlannerError(f"{where}{on} alone: stack {stack.name} offloads the sharded parameters, gradients and "
                           "optimizer states together (FSDP2's CPUOffloadPolicy)", "set offload_optimizer and "
                           "offload_param both cpu (torchtitan [training] enable_cpu_offload = true)")
    if par and not opt:
        raise PlannerError(f"{where}offload_param cpu without offload_optimizer cpu is not modelled",
                           "set offload_optimizer cpu too, or leave offload_param out")
    if job.sharding == "none" or (spec.params_with_optimizer and job.sharding not in ("fsdp", "hsdp")):
        need = "FSDP / HSDP sharding" if spec.params_with_optimizer else "a ZeRO stage (sharding zero1, zero2 or fsdp)"
        raise PlannerError(f"{where}{on} with sharding {job.sharding}: the stack offloads under {need} only",
                           f"set sharding {'fsdp' if spec.params_with_optimizer else 'zero2'}, or leave the offload out")
    if par and job.sharding not in ("fsdp", "hsdp"):
        raise PlannerError(f"{where}offload_param cpu with sharding {job.sharding}: the parameters are offloaded under "
                           "ZeRO-3 / FSDP only (DeepSpeed reads offload_param at stage 3)", "set sharding fsdp")
    if job.sharding_mode in ("bf16_optimizer", "zero0"):
        raise PlannerError(f"{where}{on} with sharding_mode {job.sharding_mode}: DeepSpeed builds its ZeRO optimizer, "
                           "not the BF16 / FP16 optimizer, when it offloads (engine.py @38327e07 "
                           "_do_optimizer_sanity_check l. 1300-1350)", "use sharding_mode zero1 or zero2")
    if spec.transfers == "hybrid_device":
        _check_hybrid_device(job, stack, where, on)
    elif not spec.params_with_optimizer and job.sharding in ("fsdp", "hsdp"):
        warnings.append(f"{on} under ZeRO-3: priced as ZeRO-Offload's ZeRO-1/2 path (the partition's fp32 master, Adam "
                        "moments and fp32 gradients on the host, the gradients down once a step, the 16-bit partition "
                        "up); stage3.py's own offload buffers (sub-group swaps, its pinned gradient buffers) are not "
                        "modelled")


def _check_hybrid_device(job: Job, stack, where: str, on: str) -> None:
    """Megatron's HybridDeviceOptimizer (planner/offload.py hybrid_device): it offloads optimizer states only, and it
    runs under the distributed optimizer: --optimizer-cpu-offload needs --use-precision-aware-optimizer
    (megatron/training/arguments.py @d98e8a64 l. 1884-1888), which needs the distributed optimizer
    (megatron/core/optimizer/__init__.py l. 1057); Megatron-FSDP's optimizer is not the one priced."""
    if job.offload_param == "cpu":
        raise PlannerError(f"{where}offload_param cpu on stack {stack.name}: Megatron's --optimizer-cpu-offload moves the "
                           "optimizer states only (HybridDeviceOptimizer)", "leave offload_param out")
    if job.sharding_mode not in (None, "distributed_optimizer") or job.sharding != "zero1":
        mode = job.sharding_mode or job.sharding
        raise PlannerError(f"{where}{on} with sharding {mode}: Megatron offloads through the distributed optimizer "
                           "only (--optimizer-cpu-offload needs --use-precision-aware-optimizer, which needs "
                           "--use-distributed-optimizer: arguments.py @d98e8a64 l. 1884-1888, optimizer/__init__.py "
                           "l. 1057)", "set sharding zero1 (sharding_mode distributed_optimizer)")
    spec = job.bytes_per_param if job.bytes_per_param is not None else stack.defaults.bytes_per_param
    bpp, _ = bytes_per_param(spec)
    if (bpp.master, bpp.optimizer) != (4.0, 8.0):
        raise PlannerError(f"{where}{on} with bytes_per_param master {bpp.master:g} B, Adam {bpp.optimizer:g} B: "
                           "Megatron's HybridDeviceOptimizer keeps fp32 master copies (param_update_in_fp32) and torch's "
                           "fp32 moments whatever the state dtypes (megatron/core/optimizer/__init__.py @d98e8a64 "
                           "l. 519-546)", "use bytes_per_param megatron (or mixed16), or leave the offload out")


def _zero3_knobs(job: Job, stack: Stack) -> dict | None:
    """DeepSpeed ZeRO-3's gathering and bucket settings the run uses (memory.py [z3]): the stack's fsdp.zero3_modules
    (DeepSpeed's defaults at its commit) with the job's deepspeed_zero3 over them; None where the stack's FSDP gathers
    layer units. A job that sets them on such a stack is refused (nothing would read them)."""
    spec = stack.fsdp.zero3_modules
    if spec is None:
        if job.deepspeed_zero3:
            raise PlannerError(f"deepspeed_zero3 {dict(job.deepspeed_zero3)} on stack {stack.name}, whose FSDP does not "
                               "gather per submodule as DeepSpeed ZeRO-3 does",
                               "leave deepspeed_zero3 out, or use a DeepSpeed stack (stack_db fsdp.zero3_modules: "
                               "megatron-deepspeed)")
        return None
    if job.deepspeed_zero3.get("contiguous_gradients", 0) > 1:
        raise PlannerError(f"deepspeed_zero3 contiguous_gradients {job.deepspeed_zero3['contiguous_gradients']} is not "
                           "0 or 1", "1: DeepSpeed's contiguous gradient buffer (its default true), 0: false")
    return {k: int(job.deepspeed_zero3.get(k, getattr(spec, k))) for k in ZERO3_KEYS}


def exported_zero3(settings: "Settings") -> dict:
    """The job's DeepSpeed ZeRO-3 settings that differ from the stack's (the resolved plan's deepspeed_zero3)."""
    spec = settings.stack.fsdp.zero3_modules if settings.stack is not None else None
    if settings.zero3 is None or spec is None:
        return {}
    return {k: v for k, v in settings.zero3.items() if v != getattr(spec, k)}


def _fusion_settings(job: Job, model: ModelSpec, stack: Stack, inherited: list, where: str = "") -> dict:
    """The fusion switches (FUSION_SWITCHES) as the job sets them, else the stack's fused kernels;
    but a plain (GeLU) MoE on a stack with the switch runs its experts' activation unfused, as
    Megatron-Core must: TEGroupedMLP has no fused weighted GeLU and raises with bias_activation_fusion
    on (NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/experts.py l. 963-985), so the
    runnable setting, and the one exported, is off (an inherited setting); a job that sets it on for
    such a model is refused, as Megatron-Core raises (the local experts' MLP.forward likewise, mlp.py
    l. 275-297: 'Only support fusion of swiglu and quick_gelu with per_token_scale in MLP')."""
    switch = all(getattr(stack.kernels, f) is not None for f in FUSION_FIELDS["bias_activation_fusion"])
    plain_moe = model.moe is not None and not model.gated_mlp and switch
    if plain_moe and job.bias_activation_fusion is True:
        raise PlannerError(f"{where}bias_activation_fusion true with a plain (GeLU) MoE: Megatron-Core has no fused "
                           "weighted GeLU for the routed experts and raises ('Only support fusion of swiglu and "
                           "quick_gelu in TEGroupedMLP', NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/"
                           "experts.py l. 983-985; mlp.py l. 296-297)", "leave bias_activation_fusion out (--no-bias-gelu-fusion)")
    # a plain (non-gated: GeLU, squared ReLU) MLP without linear biases: Megatron-Core's fused bias-GeLU needs
    # the bias (transformer_config.py @d98e8a64 l. 2426-2434 raises), and Megatron-LM turns --bias-gelu-fusion
    # off without --add-bias-linear (arguments.py validate_args l. 1604-1606): what runs, and is exported
    # (--no-bias-gelu-fusion), is off
    plain_unbiased = not model.gated_mlp and not model.linear_bias and switch
    if plain_unbiased and job.bias_activation_fusion is True:
        raise PlannerError(f"{where}bias_activation_fusion true with a plain (non-gated) MLP without linear biases ({model.name}): "
                           "Megatron-Core raises ('When bias_activation_fusion is True, gated_linear_unit is False and "
                           "activation function is gelu, add_bias_linear must also be True.', NVIDIA/Megatron-LM @d98e8a64 "
                           "megatron/core/transformer/transformer_config.py l. 2426-2434) and Megatron-LM turns the fusion "
                           "off without --add-bias-linear (megatron/training/arguments.py validate_args l. 1604-1606)",
                           "leave bias_activation_fusion out (--no-bias-gelu-fusion)")
    # squared ReLU with linear biases: Megatron-Core fuses the bias with GeLU, SiLU (gated) or quick GeLU only
    # (transformer_config.py @d98e8a64 l. 2420-2424 raises 'When bias_activation_fusion is True, activation
    # function should be either gelu, swiglu, or quick_geglu'; mlp.py l. 318: 'Only support fusion of gelu and
    # swiglu'), so what runs, and is exported (--no-bias-gelu-fusion, which --squared-relu reads: argument_utils.py
    # l. 314-326), is off (without biases plain_unbiased above already says so)
    squared = model.mlp_activation == "squared_relu" and switch
    if squared and job.bias_activation_fusion is True:
        raise PlannerError(f"{where}bias_activation_fusion true with a squared-ReLU MLP ({model.name}): Megatron-Core "
                           "fuses the bias with gelu, swiglu or quick_geglu only and raises ('When bias_activation_fusion "
                           "is True, activation function should be either gelu, swiglu, or quick_geglu', "
                           "NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/transformer_config.py l. 2420-2424)",
                           "leave bias_activation_fusion out (--no-bias-gelu-fusion)")
    out = {name: getattr(job, name) is not False for name in FUSION_SWITCHES}
    if job.bias_activation_fusion is None and (plain_moe or plain_unbiased or squared):
        out["bias_activation_fusion"] = False
        inherited.append(("bias_activation_fusion", False))
    rope = _mla_rope_fusion(job, model, stack, inherited, where)
    if rope is not None:
        out["apply_rope_fusion"] = rope
    return out


def _mla_rope_fusion(job: Job, model: ModelSpec, stack: Stack, inherited: list, where: str):
    """apply_rope_fusion for an MLA model whose rotary embedding is not YaRN (model.rope_scaling) on a
    stack with the switch: Megatron-Core's MLA fuses RoPE only for YaRN (transformer_config.py
    @d98e8a64 MLATransformerConfig.__post_init__ l. 3345-3346 raises 'apply_rope_fusion for MLA only
    works with YARN RoPE.'), so it runs off (inherited; the export writes --rope-type rope
    --no-rope-fusion) and a job asking for it on is refused. None: the job's own setting stands."""
    if model.mla is None or model.rope_scaling == "yarn" \
            or any(getattr(stack.kernels, f) is None for f in FUSION_FIELDS["apply_rope_fusion"]):
        return None
    if job.apply_rope_fusion is True:
        raise PlannerError(f"{where}apply_rope_fusion true with MLA and rope_scaling {model.rope_scaling or 'none'} "
                           f"({model.name}): Megatron-Core fuses MLA's RoPE only for YaRN ('apply_rope_fusion for MLA only "
                           "works with YARN RoPE.', NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/"
                           "transformer_config.py l. 3345-3346)", "leave apply_rope_fusion out (--no-rope-fusion)")
    if job.apply_rope_fusion is None:
        inherited.append(("apply_rope_fusion", False))
    return False


def _settings(job: Job, model: ModelSpec, hw: Hardware, stack: Stack, plan: PlanArrays, bpp: tuple, power_source: str,
              inherited: list, seq_assumed: list, where: str, **vocab) -> Settings:
    """The resolved job's Settings (everything the search does not vary): the model, hardware
    and stack read, the calibration profile, the files' paths and hashes, the MoE options; `vocab`:
    resolve's vocabulary padding fields (vocab_divisor, vocab_tokens, make_vocab_size_divisible_by)."""
    calibration = _load_calibration(job.calibration, hw)
    nccl_algo, env_assumed = _nccl_algo(job, stack)
    return Settings(
        **_run_fields(job, model, hw, stack, plan, bpp, calibration, power_source),
        **_layer_option_fields(job, model, hw, stack, inherited, where),
        **_optimizer_fields(job, hw, stack, bpp[0], calibration, where),
        **_runtime_fields(job, model, stack, inherited, nccl_algo, env_assumed, where),
        nccl_nvls_enable=_nccl_nvls_enable(job.nccl_nvls_enable, hw, where),
        **_provenance_fields(job, model, hw, stack, calibration, inherited, seq_assumed),
        **vocab,
    )


def _run_fields(job: Job, model: ModelSpec, hw: Hardware, stack: Stack, plan: PlanArrays, bpp: tuple,
                calibration, power_source: str) -> dict:
    """_settings' run: the model, hardware and stack read, the bytes per parameter (resolve's tuple: bytes,
    name, precision-aware optimizer, TE master weights, remainders), the memory and attention models, the batch, the
    calibration profile and the plan's pipeline split."""
    bpp, bpp_name, pao, te_master, remainders = bpp
    return dict(
        model=model,
        hardware=hw,
        gpus=job.gpus,
        bpp=bpp,
        bpp_name=bpp_name,
        precision_aware=pao,
        te_master=te_master,
        remainders=remainders,
        activation_model=job.activation_model,
        attention=job.attention,
        attention_kernel=job.attention_kernel,
        # the job's attention module where it is not the stack's default (plan_dict: a file naming the default reads
        # back as the plan that leaves it out; the start-up rules read the resolved stack's defaults.attention_backend)
        attention_backend=(job.attention_backend if job.attention_backend != load_stack(job.stack).defaults.attention_backend
                           else None),
        causal_attention_flops=job.causal_attention_flops,
        headroom=job.headroom,
        reserve_bytes=job.reserve_GiB * 2**30,
        tokens=job.tokens,
        batch_schedule=tuple((float(p.from_tokens), int(p.global_batch)) for p in job.batch_size_schedule or ()),
        recompute_layers=job.recompute_layers,
        calibration=calibration,
        calibration_path=job.calibration,
        stack=stack,
        stack_name=job.stack,
        power_limit_source=power_source,
        split_emb=int(plan.split_emb),
        split_loss=int(plan.split_loss),
        split_first=int(plan.split_first),
        split_last=int(plan.split_last),
        microbatch_group=int(plan.mbg),
    )


def _layer_option_fields(job: Job, model: ModelSpec, hw: Hardware, stack: Stack, inherited: list, where: str) -> dict:
    """_settings' layer options, each checked against the model and the stack: MoE capacity and imbalance, the
    bf16 / fp8 layers, fusions, CUDA graphs, the loss, recompute modules, CP balancing and SPMD checks."""
    return dict(
        moe_capacity_factor=_capacity_factor(job, model, where),
        moe_min_capacity=_min_capacity(job, model, stack, where),
        **_imbalance_settings(job, model, stack, where),
        bf16_layers=_bf16_layers(job, model, stack, where),
        fp8_output_layer=_fp8_output_layer(job, model, stack, where),
        filter_fqns=_filter_fqns(job, model, stack, where),
        fp8_allgather=_fp8_allgather(job, stack, where),
        fp8_precompute_scale=_fp8_precompute_scale(job, stack, where),
        dp_param_gather_overlap=_dp_param_gather_overlap(job, stack, where),
        fp8_grouped_experts=_fp8_grouped_experts(job, model, stack, inherited, where),
        fp8_attention=_fp8_attention(job, stack, hw, where),
        ep_comm_overlap=ep_comm_overlap(job, model, stack, where),
        moe_shared_expert_overlap=moe_shared_expert_overlap(job, model, stack, where),
        pipe_partitioned=_pipe_partitioned(job, model, stack, where),
        defer_embedding_wgrad=job.defer_embedding_wgrad,
        padded_vocab_size=job.padded_vocab_size,
        cross_entropy_fusion=job.cross_entropy_fusion,
        cross_entropy_fusion_impl=job.cross_entropy_fusion_impl,
        cuda_graph_impl=job.cuda_graph_impl,
        cuda_graph_scope=tuple(job.cuda_graph_scope),
        fp8_param_gather=job.fp8_param_gather,
        fp4_param_gather=job.fp4_param_gather,
        transformer_impl=job.transformer_impl or "transformer_engine",
        local_core_attention=job.local_core_attention or job.transformer_impl == "local",
        fp16=job.fp16,
        **_fusion_settings(job, model, stack, inherited, where),
        chunked_loss=_chunked_loss(job, stack, inherited, model, where),
        selective_recomputes_attention=job.selective_recomputes_attention,
        spmd_backend=job.spmd_backend,
        fsdp_symm_mem=job.fsdp_symm_mem,
        cp_load_balance=job.cp_load_balance,
        cp_load_balancer=job.cp_load_balancer,
        spmd_typechecking=job.spmd_typechecking,
        partition_activations=job.partition_activations,
        sync_tp_duplicated_parameters=job.sync_tp_duplicated_parameters,
        recompute_modules=tuple(dict.fromkeys(job.recompute_modules or ())),
    )


def _optimizer_fields(job: Job, hw: Hardware, stack: Stack, bpp, calibration, where: str) -> dict:
    """_settings' optimizer: its kind and implementation, Muon's options, CPU offload and the host's Adam rate."""
    return dict(
        optimizer=_optimizer(job, stack, bpp, where),
        optimizer_whole_tensors=job.optimizer_whole_tensors,
        muon_ns_steps=job.muon_ns_steps,
        muon_tp_mode=job.muon_tp_mode or muon_tp_default(stack),
        muon_split_qkv=job.muon_split_qkv,
        muon_fp32_matmul_prec=_muon_matmul_prec(job, hw, where),
        optimizer_implementation=job.optimizer_implementation or stack.memory.optimizer_default,
        early_step_in_backward=job.early_step_in_backward,
        offload_optimizer=job.offload_optimizer,
        offload_param=job.offload_param,
        offload_fraction=job.offload_fraction,
        offload_overlap=job.offload_overlap,
        host_fields=tuple(f for f, _ in HOST_FIELDS if getattr(job, f) is not None),
        **_host_adam(calibration, job.calibration, hw.name),
    )


def _runtime_fields(job: Job, model: ModelSpec, stack: Stack, inherited: list, nccl_algo, env_assumed: list,
                    where: str) -> dict:
    """_settings' runtime switches: kernels, deterministic mode and NCCL_ALGO, ZeRO-3 knobs, the trainer's
    version and date, Megatron-FSDP options and the MoE dispatcher."""
    cublas, cublas_assumed = _cublas_workspace(job, stack, where)
    protos, proto_assumed = _nccl_protos(job.nccl_proto, where)
    return dict(
        rope_cache=job.rope_cache,
        fsdp_root_unit=job.fsdp_root_unit,
        loss_logit_chunks=job.loss_logit_chunks,
        cublas_workspace_config=cublas,
        deterministic_mode=bool(job.deterministic_mode),
        use_flash_attn=bool(job.use_flash_attn),
        attention_kernel_named=bool(job.attention_kernel_named),
        nccl_algos=_nccl_algos(nccl_algo, where),
        nccl_algo=nccl_algo,
        nccl_protos=protos,
        nccl_proto=job.nccl_proto,
        env_assumed=tuple(env_assumed) + tuple(cublas_assumed) + tuple(proto_assumed),
        zero3=_zero3_knobs(job, stack),
        dummy_wgrads=job.dummy_wgrads,
        te_version=job.te_version,
        trainer_date=job.trainer_date,
        empty_unused_memory_level=job.empty_unused_memory_level or 0,
        mfsdp_double_buffer=job.mfsdp_double_buffer,
        mfsdp_v2=job.mfsdp_v2,
        mfsdp_outer_optim=job.mfsdp_outer_optim,
        mla_down_proj_fusion=job.mla_down_proj_fusion,
        enable_experimental=_enable_experimental(job, stack, where),
        attention_softmax_in_fp32=job.attention_softmax_in_fp32 is not False,
        **moe_dispatch_settings(job, model, stack, inherited, where),
    )


def _provenance_fields(job: Job, model: ModelSpec, hw: Hardware, stack: Stack, calibration, inherited: list,
                       seq_assumed: list) -> dict:
    """_settings' provenance: what was inherited and assumed, the model code's notes, the files' paths and
    hashes, and the calibration's knobs."""
    model_file, hardware_file = str(model_source(job.model)), str(hardware_source(job.hardware))
    return dict(
        inherited=tuple(inherited),
        assumed=tuple(hf_assumed(job.model)),
        seq_assumed=tuple(seq_assumed),
        code_assumed=tuple(model_code_assumed(model, stack) + model_code_compile_note(model, stack)
                           + layer_kinds_assumed(model, stack)),
        sac_reruns_exchange=sac_reruns_exchange(model, stack),
        code_compiles_blocks=code_compiles_blocks(model, stack),
        model_file=model_file,
        hardware_file=hardware_file,
        model_sha256=file_sha256(model_file),
        hardware_sha256=file_sha256(hardware_file),
        knobs=_run_knobs(calibration, stack.name, hw.name),
    )


def given_setting(job: Job, name: str):
    """The job's own value of a ModeSetting's field (schema.ModeSetting), None where it leaves it
    out (a field it does not set, or sets to null)."""
    return getattr(job, name) if name in job.model_fields_set else None


def mode_setting_value(job: Job, x):
    """The job's value of ModeSetting x's setting as the mode reads it: the job's own (given_setting);
    where it leaves it out, the job's default under x.unset default (MODE_SETTING_DEFAULTS: megatron-deepspeed's
    zero0, a job saying nothing is bf16), None under unset switch (the mode runs it at x.value)."""
    v = given_setting(job, x.setting)
    return MODE_SETTING_DEFAULTS[x.setting] if v is None and x.unset == "default" else v


def stack_for_settings(job: Job, stack, where: str = ""):
    """The stack without the sharding modes whose trainer refuses a setting the job gives
    (stack_db runs.sharding job_settings, other refused: Megatron's --use-torch-fsdp2 with the
    gradient-accumulation fusion, its DDP with --fp8-param-gather; or the job's default where it
    leaves the setting out and the mode says unset default: DeepSpeed's zero0 for a job without
    fp16, mode_setting_value), each left-out mode's
    refusal cited first among the stack's sources, so `fit` never ranks it and `check` never
    suggests it; a job that names such a mode (sharding_mode, or a sharding level whose every
    mode refuses it) is refused, naming the trainer's check."""
    runs = stack.runs if stack is not None else None
    if runs is None:
        return stack
    keep, why = [], []
    for m in runs.sharding:
        bad = [x for x in m.job_settings if x.other == "refused" and mode_setting_value(job, x) not in (None, x.value)]
        if not bad:
            keep.append(m)
            continue
        x = bad[0]
        if x.instead is None and x.unset == "default":  # the job's default is the other value: leaving it out is no fix
            msg = (f"sharding mode {m.name} with {x.setting} {str(not x.value).lower()}: stack {stack.name}'s trainer runs "
                   f"the mode only with {x.setting} {str(x.value).lower()} ({x.source})")
            hint = (f"{x.setting} {str(x.value).lower()} (--{'' if x.value else 'no-'}{x.setting.replace('_', '-')}) for "
                    f"{m.name}, or choose another sharding mode")
        elif x.instead is None:
            msg = f"sharding mode {m.name} with {x.setting} {str(not x.value).lower()}: stack {stack.name}'s trainer refuses it ({x.source})"
            hint = f"leave {x.setting} out (the mode runs it {str(x.value).lower()}), or choose another sharding mode"
        else:  # the trainer builds another mode from the same settings (DeepSpeed: bf16 at stage 0, the BF16_Optimizer)
            msg = (f"sharding mode {m.name} with {x.setting} {str(not x.value).lower()}: stack {stack.name}'s trainer runs "
                   f"sharding mode {x.instead} in its place ({x.source})")
            hint = (f"--sharding {x.instead} (what the trainer runs with {x.setting} {str(not x.value).lower()}), or "
                    f"{x.setting} {str(x.value).lower()} (--{'' if x.value else 'no-'}{x.setting.replace('_', '-')}) "
                    f"for {m.name}")
        if job.sharding_mode == m.name:
            raise PlannerError(f"{where}{msg}", hint)
        why.append((m, msg, hint))
    if not why:
        return stack
    refused = [w for w in why if w[0].level == job.sharding]  # (none where the stack has no mode of that level: its
    # own refusal, "stack X has no such mode", follows; megatron-deepspeed-bigscience has no zero2)
    if job.sharding_mode is None and "sharding" in job.model_fields_set and not any(m.level == job.sharding for m in keep) and refused:
        _, msg, hint = refused[0]
        raise PlannerError(f"{where}sharding {job.sharding}: {msg}", hint)
    return stack.model_copy(update={"runs": runs.model_copy(update={
        "sharding": keep, "sources": [f"{msg} (left out of the search)" for _, msg, _ in why] + list(runs.sources)})})


def overridden_settings(job: Job, stack, smode: int) -> list[str]:
    """Notes for the settings the job gives that its plan's sharding mode runs otherwise (stack_db
    runs.sharding job_settings, other overridden: Megatron turns --fp8-param-gather off under
    --use-torch-fsdp2); the cost models price the mode's value (schema.ShardingMode._settings_priced)."""
    m = runs_mode(stack, smode)
    if m is None:
        return []
    return [f"{x.setting} {str(not x.value).lower()} under sharding mode {m.name}: the trainer runs it "
            f"{str(x.value).lower()} ({x.source}); priced and exported so"
            for x in m.job_settings if x.other == "overridden" and mode_setting_value(job, x) not in (None, x.value)]


def mode_run_settings(job: Job, stack, smode: int) -> list[tuple[str, bool]]:
    """(setting, value) for each setting the job leaves out that its plan's sharding mode runs away from the
    job's default (stack_db runs.sharding job_settings, unset switch: Megatron's torch_fsdp2 without the
    gradient-accumulation fusion), listed with the settings taken from the stack; none under unset default
    (DeepSpeed's zero0: a job leaving fp16 out is bf16, planned without the mode)."""
    m = runs_mode(stack, smode)
    if m is None:
        return []
    return [(x.setting, x.value) for x in m.job_settings
            if mode_setting_value(job, x) is None and x.value != MODE_SETTING_DEFAULTS[x.setting]]


def _stack_for_grad_bytes(job: Job, stack, where: str = ""):
    """The stack without the sharding modes whose trainer builds the main gradients in other bytes than the job's
    (stack_db runs.sharding main_grads_bytes: Megatron-FSDP under Megatron-Bridge, fp32 whatever grad_reduce_in_fp32
    says), each left-out mode cited first among the stack's sources, so `fit` never ranks it and `check` never
    suggests it; a job naming such a mode (sharding_mode, or a sharding level whose every mode is left out) is refused."""
    runs = stack.runs if stack is not None else None
    if runs is None or all(m.main_grads_bytes is None for m in runs.sharding):
        return stack
    bpp, name = bytes_per_param(job.bytes_per_param if job.bytes_per_param is not None else stack.defaults.bytes_per_param)
    out = [m for m in runs.sharding if m.main_grads_bytes is not None and m.main_grads_bytes != bpp.gradients]
    if not out:
        return stack
    keep = [m for m in runs.sharding if m not in out]

    def msg(m):
        return (f"sharding mode {m.name} with bytes_per_param {name} ({bpp.gradients:g}-byte gradients): stack "
                f"{stack.name}'s trainer builds its main gradients in {m.main_grads_bytes:g} bytes whatever the job says "
                f"({m.sources[-1] if m.sources else 'stack_db runs.sharding main_grads_bytes'})")
    hint = "give bytes_per_param with {g:g}-byte gradients (--bytes-per-param megatron), or choose another sharding mode"
    named = next((m for m in out if m.name == job.sharding_mode), None)
    if named is not None:
        raise PlannerError(f"{where}{msg(named)}", hint.format(g=named.main_grads_bytes))
    at_level = [m for m in out if m.level == job.sharding]
    if job.sharding_mode is None and "sharding" in job.model_fields_set and at_level and not any(
            m.level == job.sharding for m in keep):
        raise PlannerError(f"{where}sharding {job.sharding}: {msg(at_level[0])}", hint.format(g=at_level[0].main_grads_bytes))
    return stack.model_copy(update={"runs": runs.model_copy(update={
        "sharding": keep, "sources": [f"{msg(m)} (left out of the search)" for m in out] + list(runs.sources)})})


def stack_for_states(job: Job, stack, where: str = ""):
    """The stack as it runs the job's model states (job.bytes_per_param, else the stack's
    default): with its precision-aware optimizer (plan.precision_aware: the job's precision_aware_optimizer, else Adam
    moments below fp32, optimizer < 8 B, beside a master copy) on a stack that runs it under
    some sharding modes only (stack_db runs.low_precision_moments: Megatron's precision-aware
    optimizer needs the distributed optimizer, megatron/core/optimizer/__init__.py @d98e8a64
    l. 1057), only those modes, the restriction cited first among the stack's sources; else
    the stack itself. Its defaults.bytes_per_param is the job's (a preset name, or the job's own
    BytesPerParam), the model states the start-up rules read (startup.TORCHTITAN_FP32: torchtitan's
    training.dtype bfloat16, pure-bf16, trains in bf16 where its mixed precision is off); with the precision-aware
    optimizer, its defaults.precision_aware_fused_adam the job's (PRECISION_AWARE_MFSDP)."""
    stack = stack_for_settings(job, stack, where)
    stack = with_default(stack, "bytes_per_param", job.bytes_per_param)
    stack = _stack_for_grad_bytes(job, stack, where)
    # Muon's q / k / v split, where start-up rule MUON_QKV_SPLIT_TP reads it (job settings)
    stack = with_default(stack, "muon_qkv_split", True if job.optimizer == "muon" and job.muon_split_qkv else None)
    runs = stack.runs if stack is not None else None
    lpm = runs.low_precision_moments if runs is not None else None
    if lpm is None:
        return stack
    bpp, name = bytes_per_param(job.bytes_per_param if job.bytes_per_param is not None else stack.defaults.bytes_per_param)
    if not precision_aware(job, stack, bpp, where):  # fp32 Adam without the job's precision_aware_optimizer
        return stack
    # TE's FusedAdam on the GPU, where start-up rule PRECISION_AWARE_MFSDP reads it (the CPU offload runs Megatron's
    # HybridDeviceOptimizer instead, which reads decoupled_grad or grad: hybrid_optimizer.py @905c0e386 l. 91, 102)
    stack = with_default(stack, "precision_aware_fused_adam", job.offload_optimizer == "none")
    runs = stack.runs
    keep = [m for m in runs.sharding if m.name in lpm.sharding_modes]
    what = (f"bytes_per_param {name} keeps Adam moments below fp32 ({bpp.optimizer:g} B), which" if bpp.optimizer < 8.0 else
            "precision_aware_optimizer true: the precision-aware optimizer, which")
    why = (f"{what} stack {stack.name} runs only under sharding modes {', '.join(lpm.sharding_modes)} ({stack.origin} runs.low_precision_moments: {lpm.sources[0]})")
    return stack.model_copy(update={"runs": runs.model_copy(update={"sharding": keep, "sources": [why, *runs.sources]})})


def stack_for_job(job: Job, stack, where: str = ""):
    """The stack as it runs `job`'s model states and settings, the 16-bit dtype and core attention the job leaves out
    the stack's (apply_stack_features, then stack_for_states): the one test of which sharding modes a stack runs for a
    job. The search's candidate modes (space.settings_for) and check's sharding rungs (check._stack_levels) both read
    its runs.sharding, so check never tries a level whose every mode the search leaves out (megatron-bridge's
    Megatron-FSDP zero2 / hsdp for a job of 2-byte gradients: main_grads_bytes)."""
    return stack_for_states(apply_stack_features(job, stack, where)[0], stack, where)


_MTP_MODELS: dict = {}


def with_mtp(model: ModelSpec, mtp_layers) -> ModelSpec:
    """The model with the job's multi-token prediction modules (job field mtp_layers; None: the
    model's own mtp_layers). One copy per (model, count), so the layer lists cached by model
    (layers.layer_list) are built once."""
    if mtp_layers is None or mtp_layers == model.mtp_layers:
        return model
    key = (id(model), int(mtp_layers))
    hit = _MTP_MODELS.get(key)
    if hit is None or hit[0] is not model:
        hit = _MTP_MODELS[key] = (model, model.model_copy(update={"mtp_layers": int(mtp_layers)}))
    return hit[1]


_PADDED_MODELS: dict = {}


def vocab_divisor(job: Job, stack: Stack, where: str = "") -> int | None:
    """The multiple per tensor-parallel rank the stack pads the vocabulary to (stack_db vocab_padding.divisor, the job's
    make_vocab_size_divisible_by in its place: Megatron's --make-vocab-size-divisible-by); None where the stack pads
    none (torchtitan: nn.Embedding(vocab_size, dim), models/llama3/model/model.py @e347b1e5e). Refused: a divisor on
    a stack that pads nothing, or beside padded_vocab_size (which pins the rows)."""
    pad = stack.vocab_padding
    d = job.make_vocab_size_divisible_by
    if d is None:
        return pad.divisor if pad is not None else None
    if pad is None:
        raise PlannerError(f"{where}make_vocab_size_divisible_by {d} on stack {stack.name}, which pads no vocabulary "
                           f"({stack.origin} vocab_padding null): its embedding and output layer have the model's vocab_size "
                           "rows at every tp", "leave it out, or give padded_vocab_size: the rows the run builds")
    if job.padded_vocab_size is not None:
        raise PlannerError(f"{where}make_vocab_size_divisible_by {d} beside padded_vocab_size {job.padded_vocab_size:,}, "
                           "which pins the rows (Megatron pads no further, build_tokenizer.py _set_padded_vocab_size)",
                           "give one of the two")
    return int(d)


def padded_rows(tokens: int, tp, divisor: int):
    """Megatron's vocab_size_with_padding, vectorized over tp: the tokenizer's `tokens` rounded up to a multiple of
    divisor x tp (NVIDIA/Megatron-LM @d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py l. 133-146:
    ceil(after / multiple) x multiple; the Megatron-DeepSpeed forks' _vocab_size_with_padding the same, by a while
    loop). int64, one value per tp."""
    m = np.asarray(tp, dtype=np.int64) * np.int64(divisor)
    return -(-np.int64(tokens) // m) * m


def job_vocab_rows(job: Job, tokens: int, divisor: int | None):
    """The rows the job's plan builds: its padded_vocab_size, else the stack's padding of the tokens at the job's tp
    (padded_rows), else None (the model's own)."""
    if job.padded_vocab_size is not None:
        return job.padded_vocab_size
    return None if divisor is None else int(padded_rows(tokens, job.tp, divisor))


def with_padded_vocab(model: ModelSpec, rows, tp: int, where: str = "") -> ModelSpec:
    """The model with the job's padded_vocab_size rows in place of its vocab_size (schema.Job
    padded_vocab_size: the embedding and output layer as Megatron builds them, its vocab_size_with_padding,
    NVIDIA/Megatron-LM @d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py l. 133-146); None: the
    model as it is. Every cost model reads model.vocab_size, so the padded rows reach the weights, gradients,
    optimizer states, the logits and loss bytes per logit and the output GEMM at once; the model FLOPs (MFU)
    count them too, as Megatron's own throughput count does (megatron/training/training.py l. 1302:
    hidden_size x args.padded_vocab_size). Refused below the model's tokens (its tokenizer_vocab_size where the
    model's vocab_size pads beyond its tokenizer, as Qwen3's 151,936 rows hold 151,669 tokens; else its vocab_size:
    tokens without a row; rows between them are a smaller embedding, priced as built) and
    where tp does not divide the rows (VocabParallelEmbedding splits them evenly: tensor_parallel/utils.py
    VocabUtility.vocab_range_from_global_vocab_size, divide()). One copy per (model, rows), as with_mtp."""
    if rows is None:
        return model
    rows = int(rows)
    if rows % tp:  # (also where the rows are the model's own: Megatron --no-pad-vocab-size at a tp that does not divide them)
        raise PlannerError(f"{where}padded_vocab_size {rows:,} is not a multiple of tp {tp}: Megatron's vocab-parallel "
                           "embedding splits the rows evenly over the tensor-parallel ranks",
                           f"give a multiple of 128 x tp = {128 * tp:,} (Megatron's vocab_size_with_padding)")
    if rows == model.vocab_size:
        return model
    tokens = model.tokenizer_vocab_size or model.vocab_size
    if rows < tokens:
        what = (f"{model.name}'s tokenizer's {tokens:,} tokens (tokenizer_vocab_size)" if model.tokenizer_vocab_size
                else f"{model.name}'s vocab_size {model.vocab_size:,}")
        raise PlannerError(f"{where}padded_vocab_size {rows:,} is below {what}: tokens without an embedding row",
                           f"give at least {tokens:,} (Megatron pads up, to a multiple of 128 x tp)")
    key = (id(model), rows)
    hit = _PADDED_MODELS.get(key)
    if hit is None or hit[0] is not model:
        hit = _PADDED_MODELS[key] = (model, model.model_copy(update={"vocab_size": rows}))
    return hit[1]


def code_compiles_blocks(model, stack) -> bool:
    """Whether the model's code (stack_db runs.model_codes, startup.model_code) applies torch.compile to its
    transformer blocks where the plan compiles (ModelCode.compiles_blocks). False for torchtitan @e347b1e5e's
    gpt_oss, whose parallelize_gptoss (models/gpt_oss/infra/parallelize.py l. 61-172) calls no apply_compile:
    with compile on its blocks run eager (stacks.kernel_bytes prices their kernels eager, the loss's compiled;
    memory.py [gmm] and step.py re-run the routed experts' grouped GEMMs under selective recompute), listed
    as assumed (startup.model_code_compile_note). True where the stack maps no code or none lists the model
    (priced as the stack's compile runs: a port applying the stack's apply_compile)."""
    code = model_code(model, stack)
    return bool(code is None or code.compiles_blocks)


def sac_reruns_exchange(model, stack) -> bool:
    """Whether the model's code (stack_db runs.model_codes, startup.model_code) keeps the EP token
    exchange out of its selective save list (ModelCode.sac_saves_all_to_all false: torchtitan's qwen3,
    models/qwen3/infra/parallelize.py @e347b1e5e l. 39-54 without _c10d_functional.all_to_all_single,
    which llama4's l. 51-66, deepseek_v3's l. 33-48 and gpt_oss's l. 42-57 hold). ExpertParallel's
    dispatch and combine (distributed/expert_parallel.py l. 138, 175 all_to_all_single_autograd,
    whose autograd kernel redispatches to _c10d_functional::all_to_all_single: pytorch
    torch/csrc/distributed/c10d/Functional.cpp AllToAllSingle::forward) run inside the checkpointed
    TransformerBlock, so the policy (distributed/activation_checkpoint.py _custom_policy:
    PREFER_RECOMPUTE for an op off the list) re-runs both in the backward's recompute (early_stop
    False by default, config/job_config.py l. 675: the whole block's forward) and keeps neither
    output: step.ep_comm, memory.selective_drops. False where the stack maps no code or
    none lists the model (priced on the stack's policy, which keeps them) and for a dense model."""
    code = model_code(model, stack)
    return bool(code is not None and model is not None and model.moe is not None and not code.sac_saves_all_to_all)


def default_sequence_parallel(stack, tp, model=None) -> bool:
    """The sequence parallelism of a job that leaves it out: on where TP runs (tp > 1), off on a stack whose code
    has none (stack_db runs.sequence_parallel supported false: start-up rule STACK_SEQUENCE_PARALLEL), and off for an
    MoE model on a stack whose MoE layer cannot take a sequence shard (its start-up rules hold DEEPSPEED_MOE_SP:
    Megatron-DeepSpeed's DeepSpeed-MoE, whose own default is SP off, --sequence-parallel store_true), and off on a stack
    whose trainer never sums the SP-partial norm gradients over TP (runs.sequence_parallel norm_grads_reduced false:
    start-up rule STACK_SP_NORM_GRADS; Megatron-DeepSpeed under --deepspeed)."""
    moe_no_sp = model is not None and model.moe is not None and stack is not None and any(
        r.key == "DEEPSPEED_MOE_SP" for _, r in rules_for(stack))
    return bool(tp > 1) and not stack_lacks_sp(stack) and not stack_sp_norm_grads_unreduced(stack) and not moe_no_sp


def fit_attention(stack) -> str:
    """The core attention `fit` plans for a job that leaves attention out: the first of the stack's runs.attention
    cores (an entry lists them fastest first: flash, a fused kernel that keeps no s x s scores, before eager), else,
    where the entry does not list them, defaults.attention. It may differ from the core a job that says nothing runs
    under explain / check (defaults.attention: what the stack's code runs without an option, e.g. Megatron-DeepSpeed's
    CoreAttention unless --use-flash-attn* is given); the row then names it (explain_args --attention) and an
    exported script carries the flag that selects it (trainers/export.py), so the plan fit ranks is one the user
    runs (issue 22)."""
    if stack is None:
        return Job.model_fields["attention"].default
    cores = stack.runs.attention if stack.runs is not None else None
    return cores.cores[0] if cores is not None else stack.defaults.attention


def optimizer_instances(stack, plan) -> np.ndarray:
    """Per plan, whether its sharding mode's optimizer can shard over a group smaller than dp (stack_db runs.sharding
    optimizer_instances: Megatron's --num-distributed-optimizer-instances); False on a stack without runs."""
    runs = stack.runs if stack is not None else None
    if runs is None:
        return np.zeros(np.shape(plan.sharding), dtype=bool)
    col = np.array([m.optimizer_instances for m in runs.sharding])
    return mode_at(plan, col, False) & (np.asarray(plan.sharding) == ZERO1)


def apply_stack_features(job: Job, stack, where: str = "") -> tuple[Job, list]:
    """(job, inherited): the job with the core attention and the 16-bit dtype it leaves out taken from the stack's
    defaults (defaults.attention, defaults.fp16), listed as inherited where they are not the planner's own (flash,
    bf16); a job asking for a core or a dtype the stack's code lacks (runs.attention, runs.half_dtypes) is refused,
    naming the stack, the field and what the stack offers (issue 22)."""
    if stack is None:
        return job, []
    runs = stack.runs
    inherited, update = [], {}
    given = job.model_fields_set
    cores = runs.attention if runs is not None else None
    if "attention" in given:
        if cores is not None and job.attention not in cores.cores:
            raise PlannerError(f"{where}attention {job.attention} on stack {stack.name}, whose code runs the core "
                               f"attention {', '.join(cores.cores)} only ({stack.origin} runs.attention: "
                               f"{'; '.join(cores.sources)})",
                               f"leave attention out (the stack's {stack.defaults.attention}) or set --attention "
                               f"{' or '.join(cores.cores)}, or choose another --stack")
    elif stack.defaults.attention != job.attention:
        update["attention"] = stack.defaults.attention
        inherited.append(("attention", stack.defaults.attention))
    dtypes = runs.half_dtypes if runs is not None else None
    if "fp16" in given:
        half = "fp16" if job.fp16 else "bf16"
        if dtypes is not None and half not in dtypes.dtypes:
            raise PlannerError(f"{where}fp16 {str(job.fp16).lower()} ({half}) on stack {stack.name}, whose code trains "
                               f"in {', '.join(dtypes.dtypes)} only ({stack.origin} runs.half_dtypes: "
                               f"{'; '.join(dtypes.sources)})",
                               f"leave fp16 out (the stack's {'fp16' if stack.defaults.fp16 else 'bf16'}), or choose "
                               "another --stack")
    elif stack.defaults.fp16 != job.fp16:
        update["fp16"] = stack.defaults.fp16
        inherited.append(("fp16", stack.defaults.fp16))
    return (job.model_copy(update=update) if update else job), inherited


def _optimizer(job: Job, stack, bpp: BytesPerParam, where: str = "") -> str:
    """The job's update rule (Job.optimizer), refused where the stack's code builds no such optimizer (stack_db
    runs.optimizers; null: adam only) and, for muon, where Megatron-LM @d98e8a64 refuses it or the planner cannot
    price it: under FSDP (arguments.py l. 1739-1740: 'Emerging optimizer does not support Torch-FSDP2 / Megatron-FSDP
    for now'), with the precision-aware optimizer (optimizer/__init__.py l. 493-496: skip_megatron_wrapping, the
    layer-wise path's, 'is incompatible with use_precision_aware_optimizer'; Adam's moments below fp32 need it),
    with the optimizer offloaded (l. 497-498), and with fp16 (l. 774-775: 'emerging optimizer with fp16 is not
    supported')."""
    if job.optimizer_whole_tensors and (job.optimizer != "muon" or job.sharding != "zero1"):
        raise PlannerError(f"{where}optimizer_whole_tensors with optimizer {job.optimizer} and sharding {job.sharding}: "
                           "the whole-tensor shards are Megatron's layer-wise distributed optimizer's, which runs "
                           "muon at zero1 (--optimizer muon --use-distributed-optimizer, NVIDIA/Megatron-LM @d98e8a64 "
                           "megatron/training/arguments.py l. 1725-1737)",
                           "drop optimizer_whole_tensors, or set optimizer muon and sharding zero1")
    if job.muon_ns_steps != 5 and job.optimizer != "muon":
        raise PlannerError(f"{where}muon_ns_steps {job.muon_ns_steps} with optimizer {job.optimizer}: the Newton-Schulz "
                           "steps are Muon's (--muon-num-ns-steps, NVIDIA/Megatron-LM @d98e8a64 "
                           "megatron/training/arguments.py l. 2648-2649)", "drop muon_ns_steps, or set optimizer muon")
    if not job.muon_split_qkv and job.optimizer != "muon":
        raise PlannerError(f"{where}muon_split_qkv false with optimizer {job.optimizer}: the q / k / v split is Muon's "
                           "(--muon-no-split-qkv, NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py "
                           "l. 2630-2632)", "drop muon_split_qkv, or set optimizer muon")
    if job.muon_tp_mode is not None and job.optimizer != "muon":
        raise PlannerError(f"{where}muon_tp_mode {job.muon_tp_mode} with optimizer {job.optimizer}: the TP mode is "
                           "Muon's Newton-Schulz's (--muon-tp-mode, NVIDIA/Megatron-LM @d98e8a64 "
                           "megatron/training/arguments.py l. 2650-2651)", "drop muon_tp_mode, or set optimizer muon")
    if job.muon_fp32_matmul_prec != "medium" and job.optimizer != "muon":
        raise PlannerError(f"{where}muon_fp32_matmul_prec {job.muon_fp32_matmul_prec} with optimizer {job.optimizer}: the "
                           "precision is Muon's Newton-Schulz's (--muon-fp32-matmul-prec, NVIDIA/Megatron-LM @d98e8a64 "
                           "megatron/training/arguments.py l. 2640-2642)", "drop muon_fp32_matmul_prec, or set optimizer muon")
    if job.optimizer == "adam":
        return "adam"
    runs = stack.runs if stack is not None else None
    listed = runs.optimizers if runs is not None else None
    if listed is None or job.optimizer not in listed.optimizers:
        src = f" ({stack.origin} runs.optimizers: {'; '.join(listed.sources)})" if listed is not None else ""
        raise PlannerError(f"{where}optimizer {job.optimizer} on stack {stack.name if stack else None}, whose code builds "
                           f"{', '.join(listed.optimizers) if listed is not None else 'adam'} only{src}",
                           "leave optimizer out (adam), or plan --stack megatron")
    cite = "NVIDIA/Megatron-LM @d98e8a64"
    bad = [(job.sharding in ("zero2", "zero3", "fsdp", "hsdp"),
            f"sharding {job.sharding}: Megatron runs muon under DDP (sharding none) or its layer-wise distributed "
            f"optimizer (--use-distributed-optimizer, sharding zero1) only ({cite} megatron/training/arguments.py "
            "l. 1736-1740: no Torch-FSDP2, no Megatron-FSDP)"),
           (job.precision_aware_optimizer is True or bpp.optimizer < 8.0,
            f"the precision-aware optimizer (Adam's moments below fp32): {cite} megatron/core/optimizer/__init__.py "
            "l. 493-496 refuses it on the layer-wise path; the planner prices muon with fp32 states only"),
           (job.offload_optimizer != "none", f"offload_optimizer {job.offload_optimizer}: {cite} "
            "megatron/core/optimizer/__init__.py l. 497-498 refuses it on the layer-wise path; not priced"),
           (job.fp16, f"fp16: {cite} megatron/core/optimizer/__init__.py l. 774-775 ('emerging optimizer with fp16 is "
            "not supported')")]
    for hit, why in bad:
        if hit:
            raise PlannerError(f"{where}optimizer muon with {why}", "use optimizer adam, or drop the setting")
    every = listed.muon_ns_steps_multiple
    if every is not None and job.muon_ns_steps % every:
        raise PlannerError(f"{where}muon_ns_steps {job.muon_ns_steps} on stack {stack.name}: its Muon's Newton-Schulz "
                           f"wants a multiple of {every} steps ({stack.origin} runs.optimizers "
                           + "; ".join(x for x in listed.sources if x.startswith("muon_ns_steps_multiple:")) + ")",
                           f"use a multiple of {every} (Bridge: optimizer.muon_num_ns_steps; the default is 5), or "
                           "--stack megatron (Megatron-LM @d98e8a64 pins Emerging-Optimizers v0.3.0, pyproject.toml "
                           "l. 248, which takes any count)")
    if job.sharding == "zero1" and not job.optimizer_whole_tensors and not muon_param_layout(stack):
        raise PlannerError(f"{where}{muon_layout_missing(stack)}",
                           "add optimizer_whole_tensors (--optimizer-whole-tensors: each parameter whole on one rank, "
                           "as that code runs it), or set sharding none")
    return job.optimizer


def _muon_matmul_prec(job: Job, hw, where: str = "") -> str:
    """The job's muon_fp32_matmul_prec (step.py [28]), refused at low on hardware without an fp32 (non-tensor) peak:
    low is no precision torch knows, so Newton-Schulz keeps torch's default highest, fp32 GEMMs priced at
    Hardware.fp32_TFLOPS (step.muon_gemm_slowdown)."""
    prec = job.muon_fp32_matmul_prec
    if job.optimizer == "muon" and prec == "low" and hw.fp32_TFLOPS is None:
        raise PlannerError(f"{where}muon_fp32_matmul_prec low on hardware {hw.name}, which gives no fp32_TFLOPS: low keeps "
                           "torch's default float32 matmul precision highest (aten/src/ATen/Context.cpp "
                           "setFloat32MatmulPrecision: 'the current setFloat32MatmulPrecision call has no effect'), "
                           "fp32 GEMMs off the tensor cores, priced at the hardware's fp32 peak",
                           "add fp32_TFLOPS to the hardware file, or use muon_fp32_matmul_prec medium or high")
    return prec


def muon_param_layout(stack) -> bool:
    """Whether the stack's Megatron-Core has Muon's precomputed layer-wise parameter layout (stack runs.optimizers
    muon_param_layout: Megatron-LM @d98e8a64 yes; Bridge's pinned 905c0e386 no)."""
    runs = stack.runs if stack is not None else None
    return runs is None or runs.optimizers is None or bool(runs.optimizers.muon_param_layout)


def muon_tp_default(stack) -> str:
    """The stack's default Muon TP mode (runs.optimizers muon_tp_mode: Megatron-LM @d98e8a64 duplicated, Bridge's
    pinned 905c0e386 blockwise; step.py [28]); duplicated without an entry."""
    runs = stack.runs if stack is not None else None
    return "duplicated" if runs is None or runs.optimizers is None else runs.optimizers.muon_tp_mode


def muon_layout_missing(stack) -> str:
    """Why muon at zero1 with the layout is refused on a stack without it (plan._optimizer, space._sharding_choices)."""
    return (f"optimizer muon at sharding zero1 with the layer-wise parameter layout on stack {stack.name}: its "
            "Megatron-Core's layer-wise distributed optimizer hands each parameter whole to one rank and has no such "
            f"layout ({stack.origin} runs.optimizers muon_param_layout false: {'; '.join(stack.runs.optimizers.sources)})")


def _stack_mtp(job: Job, model: ModelSpec, stack, warnings: list, where: str) -> ModelSpec:
    """Multi-token prediction modules on a stack whose code trains none (stack_db runs.mtp false: torchtitan main
    @e347b1e5e, whose models build no MTP module): a job that asks for them (mtp_layers) is refused; a model that
    has them (a config.json's num_nextn_predict_layers) is priced without them, with a note, as that trainer would
    build it. A stack that does not say (runs.mtp null) prices them."""
    runs = stack.runs
    if not model.mtp_layers or runs is None or runs.mtp is not False:  # a stack setting
        return model
    if job.mtp_layers:
        raise PlannerError(f"{where}mtp_layers {job.mtp_layers}: stack {stack.name}'s code trains no multi-token "
                           f"prediction module ({stack.origin} runs.mtp false)",
                           "set mtp_layers 0 (--mtp-layers 0), or use a stack that trains them (--stack megatron, "
                           "deepseek or torchtitan-0.3)")
    warnings.append(f"{model.name}'s {model.mtp_layers} multi-token prediction module(s) priced as absent: stack "
                    f"{stack.name}'s code builds none ({stack.origin} runs.mtp false); --stack megatron, "
                    "deepseek or torchtitan-0.3 train them")
    return with_mtp(model, 0)


_CHUNKED_MODELS: dict = {}


def _stack_chunks(model: ModelSpec, stack, seq: int, warnings: list, cp: int = 1) -> ModelSpec:
    """The model as a stack whose code chunks every attention layer of a chunked model builds it (stack
    chunked_attention chunks_every_layer: Megatron-Bridge's Llama4SelfAttention on every layer): where the sequence
    is longer than the chunk, each global softmax-attention kind becomes a chunked one at the model's chunk (its
    position and output gate kept), with a warning that the model trained is not the model's own; and, where the
    stack pads the sequence to whole chunks (chunked_attention.pads_last_chunk: Bridge's chunkify), every chunked
    kind is marked padded (ChunkedAttention._padded: layers/attention.py [13], the last chunk run whole and the
    padded tensors saved). At seq <= chunk a chunked layer is a global one (layers/attention.py mean_causal_keys,
    span_keys) and the code does not chunkify: the model unchanged. Where the stack chunks by the CP rank's sequence
    (chunked_attention.cp_local_sequence: Bridge's query.shape[0] is s / cp), every chunked kind is marked so
    (ChunkedAttention._local): at cp > 1 and s / cp <= c it is priced global, per plan (Attention.chunk_at,
    layers/attention.py [14]); the warnings name the job's cp (`cp`: fit's rows are resolved each at its own). One
    copy per (model, chunk, padded, local), as with_mtp's. A model with no chunked layer, or more than one chunk size,
    is unchanged."""
    from .schema import ChunkedAttention, GlobalAttention

    run = getattr(stack, "chunked_attention", None)
    if run is None or not model.layer_kinds:  # a stack and a model setting
        return model
    chunks = {k.mixer.chunk for k in model.layer_kinds.values() if isinstance(k.mixer, ChunkedAttention)}
    glob = [n for n, k in model.layer_kinds.items() if isinstance(k.mixer, GlobalAttention)]
    pad, local = bool(run.pads_last_chunk), bool(run.cp_local_sequence)
    if len(chunks) != 1 or not (glob or pad or local) or seq <= next(iter(chunks)):
        return model
    c = next(iter(chunks))
    key = (id(model), c, pad, local)
    hit = _CHUNKED_MODELS.get(key)
    if hit is None or hit[0] is not model:
        def chunked(mixer):
            out = ChunkedAttention(kind="chunked", chunk=c, position=mixer.position, output_gate=mixer.output_gate)
            out._padded = pad  # the stack's chunked_attention.pads_last_chunk (a stack setting)
            out._local = local  # the stack's chunked_attention.cp_local_sequence (a stack setting)
            return out

        kinds = {n: (k.model_copy(update={"mixer": chunked(k.mixer)})
                     if isinstance(k.mixer, (GlobalAttention, ChunkedAttention)) else k)
                 for n, k in model.layer_kinds.items()}
        hit = _CHUNKED_MODELS[key] = (model, model.model_copy(update={"layer_kinds": kinds}))
    if local and cp > 1 and seq <= c * cp:  # the job's cp (fit resolves each row at its own)
        warnings.append(f"{model.name}'s attention layers priced as global attention at cp {cp}: stack {stack.name}'s "
                        f"code tests the CP rank's {seq // cp:,} tokens (seq {seq:,} / cp {cp}) against the chunk "
                        f"{c:,} and chunks no layer at or under it ({stack.origin} "
                        f"chunked_attention.cp_local_sequence), so every layer attends over the whole sequence through "
                        f"the context-parallel kernel, where {model.name}'s own code chunks "
                        f"{'them' if not glob else 'its chunked layers'}; cp 1 (or seq / cp > {c:,}) trains them "
                        "chunked")
        return hit[1]
    cp_note = (f" (under cp > 1 where seq / cp > {c:,}: at seq / cp <= {c:,} it chunks no layer, priced global)"
               if local else "")
    if glob:
        warnings.append(f"{model.name}'s global attention layers ({', '.join(glob)}) priced chunked at {c:,} tokens: "
                        f"stack {stack.name}'s code chunks every attention layer of a chunked model ("
                        f"{stack.origin} chunked_attention), so at seq {seq:,} > {c:,} it trains those layers within "
                        f"chunks, where {model.name}'s own code attends over the whole sequence{cp_note}")
    if pad and seq % c:
        n = -(-seq // c)
        warnings.append(f"seq {seq:,} is not a multiple of the attention chunk {c:,}: stack {stack.name}'s code pads it "
                        f"to {n} chunks ({n * c:,} tokens) and runs the last chunk whole, its {n * c - seq:,} padded "
                        f"tokens too ({stack.origin} chunked_attention.pads_last_chunk): priced as it runs, "
                        f"{n * c / seq:.3g}x the chunked layers' saved q, k, v and output; choose a multiple of {c:,} "
                        "to run none")
    return hit[1]


_FUSED_MLA_MODELS: dict = {}  # id(model) -> (model, its copy with the fused down projection): one object a model


def with_fused_mla(model: ModelSpec, job: Job, where: str = "") -> ModelSpec:
    """The model as the job's mla_down_proj_fusion builds it (Megatron --mla-down-proj-fusion): a copy whose MLA spec
    carries _down_fused (layers/attention.py MLA.down_fused: one TP-split linear_qkv_down_proj, FusedMLASelfAttention),
    the same object for the same model (layer_list builds once per model object); the model itself without it.
    Refused as Megatron refuses it: a model without MLA (arguments.py @d98e8a64 l. 1976-1977 asserts
    --multi-latent-attention), or without a q_lora_rank (multi_latent_attention.py l. 1271-1274 asserts it)."""
    if not job.mla_down_proj_fusion:  # a job setting
        return model
    if model.mla is None:
        raise PlannerError(f"{where}mla_down_proj_fusion with model {model.name}, which has no multi-latent attention: "
                           "Megatron-LM asserts '--mla-down-proj-fusion requires --multi-latent-attention' "
                           "(NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 1976-1977)",
                           "leave mla_down_proj_fusion out, or choose an MLA model (deepseek-v3, kimi-k2)")
    if model.mla.q_lora_rank is None:
        raise PlannerError(f"{where}mla_down_proj_fusion with model {model.name}, whose queries have no latent "
                           "(q_lora_rank null): FusedMLASelfAttention asserts 'FusedMLASelfAttention requires "
                           "q_lora_rank to be set' (NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/"
                           "multi_latent_attention.py l. 1271-1274)", "leave mla_down_proj_fusion out")
    hit = _FUSED_MLA_MODELS.get(id(model))
    if hit is None or hit[0] is not model:
        mla = model.mla.model_copy()
        mla._down_fused = True
        hit = _FUSED_MLA_MODELS[id(model)] = (model, model.model_copy(update={"mla": mla}))
    # Priced in full, so no warning: the weight TP-split and the GEMM at (r_q + r_kv + d_rope) / tp a rank
    # (layers/attention.py MLA.down_fused), its own TP collectives -- the normed input's SP all-gather, the q and kv
    # latents' all-gathers and their scatters' backward gathers -- in step.tp_comm (step.py [30], mla_fused_gathers);
    # the tensors it keeps are the unfused layer's shards: TE's LayerNormLinear saves its input and the normed input
    # before the gather (NVIDIA/TransformerEngine @4329ff84 layernorm_linear.py l. 440-446, 492-502: ln_out, re-gathered
    # in backward), and the latents are scattered back to their sequence shards (multi_latent_attention.py l. 1379, 755)
    return hit[1]


def resolve(job: Job, where: str = "", *, rules: list | None = None) -> tuple[Settings, PlanArrays, list[str]]:
    """Validate a job against its model and hardware; return settings, the plan and
    warnings. `where` prefixes error messages (a file name).
    rules: where given (fit's shown rows, search.rows_warnings), the plan's rules (rule_codes: the plan rules and
    the trainer's start-up rules, about half of a fit row's resolve) are not run on the plan here: it is appended
    to `rules` as (model, gpus, stack, plan, hardware), what rule_codes reads, and resolve goes on as if they passed.
    The caller runs them over many plans at once (rule_codes is vectorized) and resolves a plan they refuse again
    without `rules`: that call raises as resolve does. What resolve returns for a plan they pass is the same."""
    try:
        model = with_mtp(load_model(job.model), job.mtp_layers)
        hw = load_hardware(job.hardware)
    except PlannerError as e:  # name the job file the model / hardware came from
        if where and not e.message.startswith(where):
            raise type(e)(f"{where}{e.message}", e.hint) from None
        raise
    stack0 = load_stack(job.stack)  # the job's stack file, read once (apply_stack_features keeps job.stack)
    tokens, divisor = model.vocab_size, vocab_divisor(job, stack0, where)
    model = with_padded_vocab(model, job_vocab_rows(job, tokens, divisor), job.tp, where)
    warnings: list[str] = []
    hw, power_source = _apply_power_limit(hw, job, where, warnings)
    hw = _apply_host(hw, job, warnings)
    dp = ParallelDims(job.gpus, job.tp, job.cp, job.pp, job.dp).resolved_dp(where)
    seq, seq_assumed = _seq_len(job, model, warnings)
    gbs = _global_batch(job, seq, where)
    job, stack, model, features = _job_stack(job, stack0, model, hw, seq, warnings, where)
    schedule = job.schedule or default_schedule(stack, job.vpp)
    sp = job.sequence_parallel if job.sequence_parallel is not None else default_sequence_parallel(stack, job.tp, model)
    if job.sequence_parallel is None and job.tp > 1 and not sp:  # the stack's code has none (runs.sequence_parallel),
        # or not for an MoE model (DEEPSPEED_MOE_SP)
        features.append(("sequence_parallel", False))
    shard = job.shard_group if job.shard_group is not None else dp
    if job.ep > 1 and stack.expert_parallel is None:
        raise PlannerError(f"{where}ep={job.ep}: stack {stack.name} has no expert parallelism ({stack.origin} `expert_parallel`)",
                           "use ep 1, or a stack that has it (`planner stacks`: megatron, torchtitan, ...)")
    opts, inherited = stack_options(stack, job, where, tp=job.tp, sp=sp)
    inherited += features
    if job.attention_backend is None and job.cp > 1 and stack.defaults.attention_backend is not None:
        # the backend the start-up rules read under CP (startup.TORCHTITAN_VARLEN_CP), the stack's where the job leaves it
        inherited.append(("attention_backend", stack.defaults.attention_backend))
    job, mbs, level, shard = _job_defaults(job, model, stack, inherited, where, gbs=gbs, dp=dp, shard=shard)
    plan = PlanArrays(
        tp=job.tp, cp=job.cp, pp=job.pp, vpp=job.vpp, dp=dp, mbs=mbs, gbs=gbs, seq=seq,
        sharding=SHARDING_CODES[level], shard=shard, recompute=RECOMPUTE_CODES[job.recompute],
        sp=int(sp), schedule=SCHEDULE_CODES[schedule], precision=PRECISION_CODES[job.precision],
        order=order_code(job.rank_order or default_rank_order(stack)), split_emb=int(job.account_for_embedding_in_pipeline_split),
        split_loss=job.loss_units, split_front=SPLIT_CODES[stack.pipeline_split],
        split_first=job.first_stage_layers or 0, split_last=job.last_stage_layers or 0,
        ep=job.ep, etp=job.etp or 0, mbg=_microbatch_group(job, stack, where), **opts,
    )
    plan, job, known = _stack_choices(stack, model, job, plan, inherited, where, hw, defer=rules is not None)
    dpo_chosen = plan.dpo  # (_mode_dp_overlap may set it: the code _stack_choices found is then computed again)
    warnings += overridden_settings(job, stack, int(plan.smode))
    _mode_dp_overlap(job, stack, plan, opts, inherited, warnings)
    if opts["tpo"] and mla_drops_tp_overlap(stack, model, job.trainer_date):  # priced off (tp_overlap)
        warnings.append(_mla_tp_overlap_warning(stack, model))
    inherited += mode_run_settings(job, stack, int(plan.smode))
    err = uneven_split_error(model.num_layers, job, stack, where)  # Megatron's own words before SPLIT_UNITS'
    if err is not None:
        raise err
    if known is not None and plan.dpo == dpo_chosen:
        code = known
    elif rules is not None:  # the caller checks the plan (docstring)
        rules.append((model, job.gpus, stack, plan, hw))
        code = OK
    else:
        code = int(rule_codes(model, job.gpus, stack, plan, hardware=hw))
    if code != OK:
        raise _rule_error(code, where, job, model, dp=dp, gbs=gbs, seq=seq, schedule=schedule, stack=stack, plan=plan,
                          hw=hw)
    _check_batch_phases(job, model, stack, plan, where, dp=dp, seq=seq, schedule=schedule, hw=hw)
    _check_job_options(job, model, where, dp=dp, gbs=gbs, seq=seq, schedule=schedule)
    _check_plan_kernels(job, model, stack, plan, hw, where)
    bpp, bpp_name, pao, te_master, remainders = _bytes_per_param(job, stack, inherited, warnings,
                                                     FP8_RECIPES[int(plan.f8r)] if job.precision == "fp8" else None, where)
    _split_warnings(model, job, plan, warnings, stack)
    _check_output_layer_options(job, stack, where)
    if job.te_version is not None and (note := te_newer_note(job.te_version)):
        warnings.append(note)
    _check_early_step(job, stack, plan, where, warnings)
    if job.partition_activations and int(np.asarray(plan.tp).max()) == 1:  # nothing the user gave is silently dropped
        warnings.append("partition_activations at tp 1: nothing to split (DeepSpeed @38327e07 activation_checkpointing/"
                        "checkpointing.py l. 258-262, 280-286: the whole input kept, no all-gather at model-parallel "
                        "size 1), so it prices nothing here and an exported file does not carry it")
    if job.deepspeed_zero3 and job.sharding not in ("fsdp", "hsdp"):  # nothing the user gave is silently dropped
        # ZeRO-1/2's engine reads reduce_bucket_size, its IPG buffer (memory.py [zb]), in a mode with step_grads.ipg_buffer:
        # priced there (before the 2026-12-07 audit5 this warning said so of it too, and that an export drops them: the
        # DeepSpeed export writes each that differs from the stack's defaults, plan.exported_zero3, trainers/export.py)
        # (stacks.step_grads' ipg_buffer column, read here from the plan's modes: stacks imports plan)
        modes = ([stack.runs.sharding[int(i)] for i in np.unique(mode_index(plan, stack.runs.sharding))]
                 if stack.runs is not None and stack.runs.sharding else [])
        read = {"reduce_bucket_size"} if any(m.step_grads is not None and m.step_grads.ipg_buffer for m in modes) else set()
        unread = {k: v for k, v in job.deepspeed_zero3.items() if k not in read}
        if unread:
            warnings.append(f"deepspeed_zero3 {unread} at sharding {job.sharding}: DeepSpeed reads these in its "
                            "stage-3 engine only (memory.py [z3]), so they price nothing here (an exported DeepSpeed "
                            "JSON still writes those that differ from DeepSpeed's defaults, for it to ignore)")
    _embedding_grad_skip_warning(job, model, stack, plan, pao, warnings)
    _check_offload(job, stack, hw, where, warnings)
    if (err := cuda_graph_error(job, model, stack, where)) is not None:  # planner/cuda_graphs.py
        raise err
    if job.attention == "eager" and job.cp > 1:
        raise PlannerError(f"{where}attention eager with cp {job.cp}: the eager core attention runs without context "
                           f"parallelism ({EAGER_CP_SOURCE})", "set cp 1, or attention flash")
    settings = _settings(job, model, hw, stack, plan, (bpp, bpp_name, pao, te_master, remainders), power_source, inherited, seq_assumed,
                         where, vocab_divisor=divisor, vocab_tokens=tokens,
                         make_vocab_size_divisible_by=job.make_vocab_size_divisible_by)
    return settings, plan, warnings


def _job_stack(job: Job, stack0, model: ModelSpec, hw, seq, warnings: list, where: str):
    """(job, stack, model, features): the job's options that replace a part of the stack, applied once (the cost
    models read only the stack), and the model as the stack builds it (MTP, chunked attention, fused MLA);
    features: the stack settings the job inherits (apply_stack_features). Warnings appended to `warnings`."""
    # the job's options that replace a part of the stack, applied once here (the cost models read
    # only the stack): Megatron --recompute-modules as its selective policy (planner/recompute_modules.py),
    # torch CP's rotate method as its memory.cp_ring_backward and context_parallel (planner/cp_rotate.py),
    # Megatron's --cp-comm-type as its context_parallel (planner/cp_comm_type.py)
    job, features = apply_stack_features(job, stack0, where)  # the stack's attention and 16-bit dtype
    stack = apply_rotate_method(job, apply_modules(job, stack0, model, where), where)
    stack = apply_cp_comm_type(job, stack, where)
    if job.cp == 1:  # a CP variant without CP: the plan without it, listed (planner/cp_comm_type.py, cp_rotate.py)
        warnings += cp_variant_ignored(job) + rotate_ignored(job) + balance_ignored_at_cp1(job)
    warnings += rotate_ignored_on_stack(job, stack)  # a stack whose training never sets it (cp_rotate.py [4])
    stack = apply_pp_p2p_warmup_flush(job, apply_pp_p2p_overlap(job, stack, where), where)
    stack = apply_fp8_grouped_experts(job, apply_moe_dispatcher(job, stack_for_states(job, stack, where)))
    stack = apply_attention_backend(job, stack, where)
    job = apply_backend_kernel(job, stack, hw, features, where)
    stack = apply_startup_switches(job, stack, warnings, where, hw)
    warnings += fused_softmax_assert(job, stack, seq)
    model = _stack_chunks(_stack_mtp(job, model, stack, warnings, where), stack, seq, warnings, job.cp)
    model = with_fused_mla(model, job, where)
    # where start-up rule MEGATRON_MLA_FUSION_TP reads it (a job setting)
    stack = with_default(stack, "mla_down_proj_fusion", True if job.mla_down_proj_fusion else None)
    # where start-up rule MEGATRON_FSDP_V2_LAYOUT reads it (a job setting)
    stack = with_default(stack, "mfsdp_v2", True if job.mfsdp_v2 else None)
    # where start-up rules MEGATRON_TP_OVERLAP_QUANTIZER and MEGATRON_TE_RECIPE_RELEASE read it (te_version.run_te_version,
    # as memory.py [ub] does)
    stack = with_default(stack, "te_version", job.te_version)
    return job, stack, model, features


def _mla_tp_overlap_warning(stack, model: ModelSpec) -> str:
    """What explain says where the job asks for TP overlap on an MLA model that the stack's trainer runs without it
    (plan.tp_overlap prices it off)."""
    return (f"tp_comm_overlap on with multi-head latent attention: stack {stack.name}'s trainer turns the TP "
            f"overlap off for the whole model at its first MLA layer (NVIDIA/Megatron-LM @d98e8a64 "
            f"megatron/core/extensions/transformer_engine.py l. 1176-1186: TELinear sets the shared config's "
            f"tp_comm_overlap False on the userbuffer name 'q_down_proj' / 'q_proj' / 'kv_down_proj', since "
            f"4e6ae3a2d2, {stack.overlap.tp_comm_overlap_off_with_mla}; {stack.origin} "
            f"overlap.tp_comm_overlap_off_with_mla); priced off: every TP collective exposed (the first layer's "
            f"linear_proj keeps the overlap: 1 linear of {model.num_layers} layers, priced off too), the "
            f"userbuffers still allocated; the export writes the tp_comm_overlap asked for")


def _check_plan_kernels(job: Job, model: ModelSpec, stack, plan, hw, where: str) -> None:
    """The plan's kernels against the GPU: the fp8 / fp4 recipe's tensor cores (blockwise: Hopper only) and
    Megatron's grouped GEMM for MoE (compute capability 8.0 or newer)."""
    if job.precision != "bf16":
        hw.peak_flops(RECIPE_PEAK[FP8_RECIPES[int(plan.f8r)]], where)  # raises if the GPU lacks the recipe's tensor cores
        why = recipe_unsupported(FP8_RECIPES[int(plan.f8r)], hw)  # blockwise: Hopper only (precisions [5])
        if why is not None:
            raise PlannerError(f"{where}{why}", "use --fp8-recipe mxfp8 on Blackwell (or another recipe of the stack)")
    if moe_grouped_gemm_on(job, stack) and model.moe is not None and hw.capability is not None and hw.capability < (8, 0):
        raise PlannerError(f"{where}moe_grouped_gemm on {hw.name} (compute capability {hw.compute_capability}): Megatron "
                           "refuses it ('Unsupported compute capability for GroupedGEMM kernels', NVIDIA/Megatron-LM "
                           "@d98e8a64 megatron/training/arguments.py validate_args l. 1378-1380: capability >= 8.0)",
                           "leave moe_grouped_gemm out (--moe-grouped-gemm), or plan an Ampere or newer GPU")


def _loss_end_holds(job: Job, model: ModelSpec, where: str) -> None:
    """A loss end of N layers (loss_layers_in_pipeline_split) is held by the last of pp x vpp >= 2 chunks of
    U = L + e + N units (e: the embedding counted) only if N <= ceil(U / (pp vpp)) <= ceil(U / 2), that is N <= L + e + 1
    (the split rule SPLIT_UNITS: N <= U / (pp vpp) where the stack's split divides, a chunk's ceiling where it does not,
    pipeline.stage_layers); with pp 1 nothing is split and N counts nothing. A larger N is refused here, once: it fits
    no split, and its units would size the search's virtual stages and the pipeline's configuration key (before:
    `explain --loss-layers-in-pipeline-split 2147483647` at pp 1 asked numpy for a 42 GiB array; `fit` refused the
    search space as too large, naming vpp)."""
    most = model.num_layers + int(job.account_for_embedding_in_pipeline_split) + 1
    if job.loss_units > most:
        raise PlannerError(f"{where}loss_layers_in_pipeline_split {job.loss_units}: more than the {model.num_layers} "
                           f"layers of {model.name} + {most - model.num_layers}: no pipeline split of two or more chunks "
                           "holds a loss end of that many layers, and with pp 1 it counts nothing",
                           "count the last chunk's end as the layers it stands for (1: the output layer and loss; more "
                           "with multi-token prediction modules, Megatron's layout 'm...L')")


def _split_defaults(job: Job, stack, inherited: list) -> Job:
    """The job with the pipeline-split ends it leaves out taken from the stack's defaults
    (StackDefaults.account_for_*: torchtitan counts the embedding and the output layer as a layer
    each unless its config says 0, job_config.py @e347b1e5e l. 377, 383). A value the job gives,
    false included, is kept; the loss end is the job's where it gives loss_layers_in_pipeline_split.
    Listed as inherited where they place anything (pp > 1); at pp 1 they are carried unlisted, as
    torchtitan's config carries them unread (and as the TOML reader does)."""
    d, given = stack.defaults, job.model_fields_set
    update = {}
    if d.account_for_embedding_in_pipeline_split and "account_for_embedding_in_pipeline_split" not in given:
        update["account_for_embedding_in_pipeline_split"] = True
    if (d.account_for_loss_in_pipeline_split and "account_for_loss_in_pipeline_split" not in given
            and job.loss_layers_in_pipeline_split is None):
        update["account_for_loss_in_pipeline_split"] = True
    if not update:
        return job
    if job.pp > 1:
        inherited.extend(update.items())
    return job.model_copy(update=update)


def _job_defaults(job: Job, model: ModelSpec, stack, inherited: list, where: str, *, gbs: int, dp: int,
                  shard: int) -> tuple[Job, int, str, int]:
    """(job, micro-batch, sharding level, shard group) with what the job leaves out taken from the stack and listed
    as inherited: the stack's pipeline ends as layers, the expert-TP degree, the micro-batch, the sharding level
    (a named mode's, or the stack's first mode where it has no unsharded one)."""
    _loss_end_holds(job, model, where)
    if stack.pipeline_ends_as_layers:  # the stack's own split (Llama 3: one layer fewer on each end stage)
        if job.loss_units > 1:
            raise PlannerError(f"{where}loss_layers_in_pipeline_split {job.loss_units}: stack {stack.name} counts the loss "
                               f"as one layer of the split ({stack.origin} pipeline_ends_as_layers)",
                               "leave loss_layers_in_pipeline_split out, or use a stack that places the split as given")
        ends = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
        inherited.extend((f, True) for f in ends if not getattr(job, f))
        job = job.model_copy(update={f: True for f in ends})
    else:
        job = _split_defaults(job, stack, inherited)
    if model.moe is not None and job.etp is None and job.ep > 1 and stack.runs is not None and stack.runs.etp_one_under_ep:
        # the stack's experts shard over the EP mesh alone under EP (stack_db runs.etp_one_under_ep: torchtitan
        # 0.3.0's sparse mesh pp, dp_replicate, efsdp, ep has no expert-TP axis)
        job = job.model_copy(update=dict(etp=1))
        inherited.append(("etp", 1))
    elif (model.moe is None and job.etp is not None and job.etp != job.tp and stack.runs is not None
          and stack.runs.expert_tensor_parallel_moe_only):
        # no expert grid without MoE layers (stack_db runs.expert_tensor_parallel_moe_only: Megatron-DeepSpeed), so no
        # file of the stack holds this etp: its export read back as etp = tp (fuzz seed 98, job-fields)
        raise PlannerError(f"{where}etp {job.etp} differs from tp {job.tp}, but {model.name} has no experts and stack "
                           f"{stack.name} builds no expert grid without MoE layers ({stack.origin} "
                           "runs.expert_tensor_parallel_moe_only: DeepSpeed-MoE creates its expert groups in the MoE "
                           "layers alone, microsoft/DeepSpeed @38327e07 deepspeed/moe/layer.py l. 89-103)",
                           "leave etp out (it is tp for a model without experts)")
    elif model.moe is not None and job.etp is None:
        # assumed: Megatron's default, expert_tensor_parallel_size = tensor_model_parallel_size
        # (NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py validate_args)
        inherited.append(("etp", job.tp))
    d = stack.defaults
    if model.moe is not None and job.moe_capacity_factor is None and d.moe_capacity_factor is not None:
        # the trainer's own capacity when the job leaves it out (stack_db defaults: DeepSpeed-MoE's 1.0, padded)
        job = job.model_copy(update=dict(moe_capacity_factor=d.moe_capacity_factor))
        inherited.append(("moe_capacity_factor", d.moe_capacity_factor))
    if (model.moe is not None and job.moe_capacity_factor is not None and job.moe_pad_to_capacity is None
            and d.moe_pad_to_capacity is not None):
        job = job.model_copy(update=dict(moe_pad_to_capacity=d.moe_pad_to_capacity))
        inherited.append(("moe_pad_to_capacity", d.moe_pad_to_capacity))
    if model.moe is not None and stack.moe_gating is not None and job.moe_pad_to_capacity is False:
        # DeepSpeed-MoE (stack moe_gating) dispatches one [E, C, M] tensor, every expert padded to the capacity C,
        # whatever the job says: microsoft/DeepSpeed @38327e07 deepspeed/moe/sharded_moe.py MOELayer.forward l. 609
        # (einsum 'sec,sm->ecm'), C from _capacity l. 161-170 (drop_tokens) or the busiest expert's count over the EP
        # group (drop_tokens False, top1gating l. 214-225): no unpadded dispatch to price
        raise PlannerError(f"{where}moe_pad_to_capacity false on stack {stack.name}: DeepSpeed-MoE always pads every "
                           "expert's input to the capacity (microsoft/DeepSpeed @38327e07 deepspeed/moe/sharded_moe.py "
                           "MOELayer.forward l. 609: the dispatch einsum 'sec,sm->ecm' builds [experts, capacity, "
                           "hidden]; _capacity l. 161-170)",
                           "leave moe_pad_to_capacity out or set it true on this stack, or use --stack megatron for an "
                           "unpadded dispatch")
    mbs = job.micro_batch
    if mbs is None:
        mbs = default_micro_batch(stack, gbs, dp, job.pp, where)
        inherited.append(("micro_batch", mbs))
    job = job.model_copy(update=dict(micro_batch=mbs))
    level = job.sharding
    if job.sharding_mode is not None:
        level = _mode_level(stack, job, where)
        job = job.model_copy(update=dict(sharding=level))
        shard = job.shard_group if job.shard_group is not None else dp
    elif ("sharding" not in job.model_fields_set and stack.runs is not None
          and not any(m.level == level for m in stack.runs.sharding)):
        # a job that names no sharding, on a stack with no unsharded mode (deepseek: ZeRO-1 only;
        # llama3-meta: its FSDP only), runs the stack's first mode (stack_db runs.sharding, in
        # order), listed as assumed; a job that names a level the stack lacks is refused
        level = stack.runs.sharding[0].level
        job = job.model_copy(update=dict(sharding=level))
        inherited.append(("sharding", level))
    return job, mbs, level, shard


def _mode_dp_overlap(job: Job, stack, plan: PlanArrays, opts: dict, inherited: list, warnings: list) -> None:
    """The DP overlap the plan's mode runs: a job that leaves dp_comm_overlap out takes the trainer's default under
    the mode (mode_dp_overlap: DeepSpeed's ZeRO-3, overlap_comm true), in place of the stack's (plan.dpo, opts and
    the inherited list updated); one the stack's runtime turns off (dp_overlap) is warned of, priced off."""
    if job.dp_comm_overlap is None and (mode_dpo := mode_dp_overlap(stack, int(plan.smode))) is not None:
        # the trainer's default under the plan's mode (DeepSpeed's ZeRO-3: overlap_comm true), in place of the stack's
        plan.dpo = int(mode_dpo)
        opts["dpo"] = int(mode_dpo)
        inherited[:] = [(f, v) for f, v in inherited if f != "dp_comm_overlap"] + [("dp_comm_overlap", bool(mode_dpo))]
    if opts["dpo"] and not int(dp_overlap(stack, plan)):  # the stack's pipeline runtime turns it off (dp_overlap)
        mode = runs_mode(stack, int(plan.smode))
        if mode is not None and not mode.dp_comm_overlap_runs:
            warnings.append(f"dp_comm_overlap on under sharding mode {mode.name}: its optimizer has no overlapped "
                            "reduction (DeepSpeed reads overlap_comm only to build its ZeRO optimizer: microsoft/DeepSpeed "
                            "@38327e07 deepspeed/runtime/engine.py l. 1632, 1686, 1730, 1775; stack_db runs.sharding "
                            "dp_comm_overlap_runs); priced off: the gradient reduction after the last backward, exposed")
        else:
            warnings.append(f"dp_comm_overlap on with pp {job.pp}: stack {stack.name}'s pipeline runtime turns the DP "
                            "overlap off (DeepSpeed's engine sets overlap_comm False for a PipelineModule: "
                            "microsoft/DeepSpeed @38327e07 deepspeed/runtime/engine.py l. 1639-1642, stack_db "
                            "overlap.dp_comm_overlap_with_pp); priced off: the gradient reduction after the last "
                            "backward, exposed (ZeRO-1: one IPG buffer)")


# Job fields that only full recompute reads, and the value that leaves each out (_check_job_options refuses them at
# recompute none or selective): Megatron's block window (--recompute-method block --recompute-num-layers,
# memory.recomputed_layers) and DeepSpeed's partitioned checkpoint inputs (memory.py [pa]). The search's probe runs
# without them and fixes recompute full where a job sets one (space.settings_for, space.recompute_choices); a
# command-line recompute other than full drops a file's (cli/core.command_line_recompute)
FULL_ONLY_FIELDS = {"recompute_layers": None, "partition_activations": False}


def _check_job_options(job: Job, model: ModelSpec, where: str, *, dp: int, gbs: int, seq: int, schedule: str) -> None:
    """Job-level checks (not rules of a plan): hsdp's shard group, recompute_layers, the BigScience sync and
    DeepSpeed's partitioned checkpoints each against the settings they need."""
    if job.sharding == "hsdp" and job.shard_group is None:
        raise PlannerError(f"{where}sharding hsdp needs shard_group (DP ranks per shard group)", f"set shard_group to a divisor of dp={dp}")
    if job.sharding not in ("hsdp", "zero1") and job.shard_group is not None:  # zero1: the mode's rule SHARD_NOT_HSDP
        raise _rule_error(SHARD_NOT_HSDP, where, job, model, dp=dp, gbs=gbs, seq=seq, schedule=schedule)
    if job.recompute_layers is not None and job.recompute != "full":
        raise PlannerError(f"{where}recompute_layers needs recompute full (got {job.recompute})",
                           "set recompute: full, or remove recompute_layers")
    if job.sync_tp_duplicated_parameters and (model.moe is not None or model.mla is not None
                                              or model.layer_pattern is not None):  # step.tp_comm [sy]
        raise PlannerError(f"{where}sync_tp_duplicated_parameters: BigScience's Megatron-DeepSpeed fork, which has the "
                           "option, builds dense softmax-attention GPT layers only (its LayerNorm and RowParallelLinear "
                           "sync, bigscience-workshop/Megatron-DeepSpeed @8387ae17); the all-reduces of an MoE, MLA or "
                           "mixed-layer model's duplicated parameters are not modelled",
                           "remove sync_tp_duplicated_parameters, or a dense model")
    if job.partition_activations and job.recompute != "full":  # memory.py [pa]: it splits full recompute's kept inputs
        raise PlannerError(f"{where}partition_activations splits the layer inputs full recompute keeps: "
                           + ("under recompute selective DeepSpeed's checkpoint of the attention core would split its "
                              "inputs, not priced" if job.recompute == "selective" else
                              f"with recompute {job.recompute} there are none (no effect)"),
                           "set recompute: full, or remove partition_activations")


def _check_batch_phases(job: Job, model: ModelSpec, stack, plan: PlanArrays, where: str, *, dp: int, seq: int,
                        schedule: str, hw: Hardware) -> None:
    """A batch ramp's phases run as Megatron runs them (planner/batch_ramp.py): the thresholds still
    increase in samples (tokens // seq_len), and each phase's plan (its batch, the same micro-batch)
    passes the plan rules: the batch a multiple of micro_batch x dp (Megatron's consistency check
    as the phase starts, num_microbatches_calculator.py @d98e8a64 update), the interleaved schedule's
    micro-batch rule."""
    if not job.batch_size_schedule:
        return
    from .batch_ramp import phase_name, sample_thresholds

    phases = [(p.from_tokens, p.global_batch) for p in job.batch_size_schedule]
    thr = sample_thresholds(phases, seq)
    for (t0, s0), (t1, s1) in zip(zip(phases, thr), list(zip(phases, thr))[1:]):
        if not s1 > s0:
            raise PlannerError(f"{where}batch_size_schedule: {t0[0]:,.0f} and {t1[0]:,.0f} tokens are both {s0:,} samples of "
                               f"{seq:,} tokens: Megatron-LM refuses thresholds that do not strictly increase in samples "
                               "(num_microbatches_calculator.py @d98e8a64 _validate_schedule)",
                               "space the thresholds at least one sequence apart")
    for k, (t, b) in enumerate(phases[:-1]):
        code = int(rule_codes(model, job.gpus, stack, replace(plan, gbs=b), hardware=hw))
        if code != OK:
            e = _rule_error(code, "", job, model, dp=dp, gbs=b, seq=seq, schedule=schedule, stack=stack,
                            plan=replace(plan, gbs=b), hw=hw)
            # the phase named as fit's counts name it (search._reason_text)
            raise PlannerError(f"{where}batch_size_schedule {phase_name(k, phases)} cannot run: {e.message}", e.hint)


def _overlap_switch(job, stack, field: str, switch: str, what: str, where: str):
    """(the job's value of `field`, the stack's overlap spec): None where the job leaves it out; a
    job that sets it on a stack without the switch (overlap.`switch` null) is refused."""
    want = getattr(job, field, None)
    ov = stack.overlap
    if want is not None and getattr(ov, switch) is None:
        raise PlannerError(f"{where}{field} {str(want).lower()} is set but stack {stack.name} has no switch for {what} "
                           f"({stack.origin} overlap.{switch}; it runs pp_p2p_overlapped {ov.pp_p2p_overlapped})",
                           f"leave {field} out, or price the plan on --stack megatron")
    return want, ov


def apply_pp_p2p_overlap(job, stack, where: str = ""):
    """The stack with the job's pp_p2p_overlap laid on it: false prices the pipeline's p2p blocking
    (overlap.pp_p2p_overlapped never, as Megatron-LM runs it with --no-overlap-p2p-communication:
    each send/recv waited on, stack_db megatron overlap sources); true or None is the stack's own
    rule (Megatron overlaps with the interleaved schedule only and sets the overlap off without it,
    arguments.py @d98e8a64 l. 1010-1017). Refused on a stack without the switch
    (overlap.pp_p2p_overlap_switch)."""
    want, ov = _overlap_switch(job, stack, "pp_p2p_overlap", "pp_p2p_overlap_switch", "its pipeline p2p overlap", where)
    if want is None or want:
        return stack
    return stack.model_copy(update={"overlap": ov.model_copy(update={"pp_p2p_overlapped": "never"})})


def apply_pp_p2p_warmup_flush(job, stack, where: str = ""):
    """The stack with the job's pp_p2p_overlap_warmup_flush laid on it (applied after
    pp_p2p_overlap): true overlaps the interleaved schedule's warm-up and flush p2p too
    (overlap.pp_p2p_warmup_flush_blocking off, Megatron-LM --overlap-p2p-communication-warmup-flush),
    false keeps them waited on; refused on a stack without the switch, and with the p2p overlap
    off, as Megatron refuses it (model_parallel_config.py @d98e8a64 l. 570-575: 'only compatible
    with overlap_p2p_comm')."""
    want, ov = _overlap_switch(job, stack, "pp_p2p_overlap_warmup_flush", "pp_p2p_warmup_flush_switch", "it", where)
    if want is None:
        return stack
    if want and ov.pp_p2p_overlapped == "never":
        raise PlannerError(f"{where}pp_p2p_overlap_warmup_flush true with the pipeline p2p overlap off: Megatron refuses "
                           "it ('Pipeline parallel communication overlapping in warmup and flush is only compatible with "
                           "overlap_p2p_comm', model_parallel_config.py @d98e8a64 l. 570-575)",
                           "leave pp_p2p_overlap on, or pp_p2p_overlap_warmup_flush out")
    return stack.model_copy(update={"overlap": ov.model_copy(update={"pp_p2p_warmup_flush_blocking": not want})})


def exported_pp_p2p_warmup_flush(settings) -> bool | None:
    """True where the job overlapped the stack's warm-up and flush p2p (what export writes back:
    Megatron's --overlap-p2p-communication-warmup-flush), else None."""
    stack = settings.stack
    if stack is None or stack.overlap.pp_p2p_warmup_flush_switch is None:
        return None
    return True if not stack.overlap.pp_p2p_warmup_flush_blocking else None


def exported_pp_p2p_overlap(settings) -> bool | None:
    """False where the job turned the stack's pipeline p2p overlap off (what export writes back:
    Megatron's --no-overlap-p2p-communication), else None."""
    stack = settings.stack
    if stack is None or stack.overlap.pp_p2p_overlap_switch is None:
        return None
    return False if stack.overlap.pp_p2p_overlapped == "never" else None


def _microbatch_group(job: Job, stack, where: str) -> int:
    """The plan's mbg: the job's microbatch_group (0 where it gives none), refused on a stack whose
    interleaved schedule has no such setting (microbatch_group_error)."""
    if job.microbatch_group is None:
        return 0
    err = microbatch_group_error(stack, job.microbatch_group, where)
    if err is not None:
        raise err
    return int(job.microbatch_group)


def ep_overlap_applies(plan):
    """Where Megatron-Core runs --overlap-moe-expert-parallel-comm (planner/moe.py [8]): expert
    parallelism, one pipeline stage or the interleaved schedule (vpp > 1), no full recompute
    (the rules ep_comm_overlap refuses a job for; the search prices the overlap only there)."""
    return (plan.ep > 1) & ((plan.pp == 1) | (plan.vpp > 1)) & (plan.recompute != RC_FULL)


def mds_pipe_unpartitioned(model, tp: int, pp: int, sp: bool = False) -> bool:
    """Whether a Megatron-DeepSpeed job must run DeepSpeed's pipeline engine with its partitioned pipe tensors off: an
    MoE model at pp > 1 with tp > 1. GPTModelPipe then passes two tensors that need gradients between stages, the
    hidden states and the aggregated MoE loss (microsoft/Megatron-DeepSpeed @f4157bea megatron/model/gpt_model.py
    l. 386-394: input_ / return_aggregated_moe_loss; transformer.py l. 1525-1547), and asserts the JSON's
    pipeline.pipe_partitioned / grad_partitioned are not enabled (l. 376-384); the engine's partitioning handles one
    such tensor only (microsoft/DeepSpeed @38327e07 deepspeed/runtime/pipe/engine.py _exec_forward_pass l. 743-749:
    'TODO: Improve pipe partitioning to pass multiple tensors that require grads', an assert on the others), and both
    are true unless the JSON says false (deepspeed/runtime/config.py l. 467-468; engine.py l. 144-145: on wherever
    the grid has model parallelism).
    Or any model under Megatron's sequence parallelism at pp > 1 with tp > 1 (sp): the engine's partitioning splits
    each TP rank's stage output into tp parts, sends the rank's own part and all-gathers the parts on arrival
    (engine.py l. 737-761: PartitionedTensor over the slice group, topology.py l. 355-364: the 'model' axis, the TP
    ranks of a stage; l. 719-728: part_input.full()), and the same for the gradient (l. 826-851), which assumes the
    TP ranks hold the same output; under SP each holds its own 1 / tp of the sequence, so the rebuilt input mixes
    parts of different ranks' outputs (reported: microsoft/DeepSpeed#4196, microsoft/Megatron-DeepSpeed#227). The
    fork checks neither (megatron/arguments.py)."""
    return (model.moe is not None or sp) and pp > 1 and tp > 1


def _pipe_partitioned(job: Job, model: ModelSpec, stack, where: str = "") -> bool:
    """The job's pipe_partitioned, default the stack's pipeline_send_partitioned_default (step.py [25]), which the
    pricing applies where the plan runs it (step.pipe_partitioned: dense, pp > 1, tp > 1, no SP). Refused: true on a
    stack whose pipeline runtime has none; true at pp > 1 x tp > 1 with an MoE model or the job's sequence parallelism,
    which need it off (mds_pipe_unpartitioned, as the Megatron-DeepSpeed reader refuses the script); false on a stack
    whose runtime has no setting for it (Stack.pipeline_send_partitioned_switch false: DeepSpeed a12aaedc)."""
    default = stack is not None and stack.pipeline_send_partitioned_default
    if job.pipe_partitioned is None:
        return default
    fix = "set pipe_partitioned: false, or drop it"
    if not job.pipe_partitioned and default and not stack.pipeline_send_partitioned_switch:
        sends = ("1 / tp of the activations and the gradient whole" if not stack.pipeline_send_partitioned_grads
                 else "1 / tp of the activations and of the gradient")
        raise PlannerError(f"{where}pipe_partitioned false on stack {stack.name}: its pipeline runtime partitions the "
                           "stage outputs wherever the grid has TP and reads no setting that turns it off (stack "
                           "pipeline_send_partitioned_switch false, cited in the stack file: DeepSpeed before c2074b341, "
                           "2023-11, e.g. a12aaedc deepspeed/runtime/pipe/engine.py l. 112: is_pipe_partitioned = "
                           "is_model_parallel; its get_pipeline_config, runtime/config.py l. 373-384, keeps a JSON "
                           "pipeline.pipe_partitioned that nothing reads)",
                           "drop pipe_partitioned, or from a script the JSON's pipeline.pipe_partitioned / "
                           f"grad_partitioned, which that DeepSpeed does not read (its engine sends {sends}: step.py "
                           "[25]); or price it on --stack megatron-deepspeed")
    if job.pipe_partitioned and not default:
        raise PlannerError(f"{where}pipe_partitioned is set but stack {stack.name}'s pipeline runtime has no partitioned "
                           "pipe tensors (DeepSpeed's PipelineEngine only: stack pipeline_send_partitioned_default)",
                           "drop pipe_partitioned, or use a megatron-deepspeed stack")
    if job.pipe_partitioned and mds_pipe_unpartitioned(model, job.tp, job.pp, bool(job.sequence_parallel)):
        why = "an MoE model (GPTModelPipe sends two tensors that need gradients" if model.moe is not None else \
            "sequence parallelism (the TP ranks hold different sequence shards"
        raise PlannerError(f"{where}pipe_partitioned at pp {job.pp} and tp {job.tp} with {why}; the PipelineEngine's "
                           "partitioning assumes one, the same on every TP rank: microsoft/DeepSpeed @38327e07 "
                           "deepspeed/runtime/pipe/engine.py l. 719-761; plan.mds_pipe_unpartitioned)", fix)
    return bool(job.pipe_partitioned)


def ep_comm_overlap(job: Job, model: ModelSpec, stack, where: str = "", plan_checks: bool = True) -> bool:
    """The job's ep_comm_overlap (default off), refused where Megatron-Core refuses
    --overlap-moe-expert-parallel-comm (transformer_config.py: expert parallelism, an
    interleaved schedule when pp > 1, no full recompute) or the stack or model lacks it.
    plan_checks False: only the model and stack (the search applies it where a candidate
    allows it: moe.ep_overlap_applies)."""
    if not job.ep_comm_overlap:
        return False
    fix = "set ep_comm_overlap: false (--no-ep-comm-overlap)"
    if model.moe is None:
        raise PlannerError(f"{where}ep_comm_overlap is set but {model.name} has no experts", fix)
    if not stack.overlap.ep_comm_overlap_supported:
        raise PlannerError(f"{where}stack {stack.name} does not overlap the MoE all-to-alls with compute", fix)
    # Megatron-Core's own asserts of the overlap that read no searched quantity (transformer_config.py @d98e8a64
    # __post_init__ l. 3016-3019: the alltoall or flex dispatcher; l. 3043-3046: at most one MTP layer)
    dispatcher = job.moe_dispatcher or stack.defaults.moe_dispatcher
    if dispatcher == "allgather":
        raise PlannerError(f"{where}ep_comm_overlap with moe_dispatcher allgather: Megatron-Core refuses it ('overlap_moe_"
                           "expert_parallel_comm is supported with alltoall/flex token dispatcher', transformer_config.py "
                           "@d98e8a64 l. 3016-3019)", "use moe_dispatcher alltoall (or a flex one), or " + fix)
    if (model.mtp_layers or 0) > 1:
        raise PlannerError(f"{where}ep_comm_overlap with {model.mtp_layers} multi-token prediction layers: Megatron-Core "
                           "refuses it ('MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm', "
                           "transformer_config.py @d98e8a64 l. 3043-3046)", "set mtp_layers 0 or 1, or " + fix)
    if plan_checks:
        if job.ep <= 1:
            raise PlannerError(f"{where}ep_comm_overlap needs expert parallelism (ep {job.ep})", "set ep > 1, or " + fix)
        if job.pp > 1 and job.vpp <= 1:
            raise PlannerError(f"{where}ep_comm_overlap with pp {job.pp} needs the interleaved schedule (vpp {job.vpp})",
                               "set vpp > 1 (Megatron-Core requires virtual pipeline stages), or " + fix)
        if job.recompute == "full":
            raise PlannerError(f"{where}ep_comm_overlap does not run with full recompute",
                               "use recompute none or selective, or " + fix)
    return True


def moe_shared_expert_overlap(job: Job, model: ModelSpec, stack, where: str = "") -> bool:
    """The job's moe_shared_expert_overlap (Megatron-Core --moe-shared-expert-overlap, default off; step.py [38]),
    refused where Megatron-Core refuses it or the stack or model lacks it: a model without shared experts (the flag
    is "only effective when moe-shared-expert-intermediate-size is set", transformer_config.py @d98e8a64 l. 717-721:
    refused rather than dropped), a stack whose shared experts are not Megatron-Core's SharedExpertMLP (stack
    moe_shared_experts_tp_pair false: the overlap is that class's, shared_experts.py l. 163-198; stack
    moe_shared_expert_overlap_dispatchers null), a dispatcher the stack's list lacks (l. 1820-1826: alltoall or flex;
    905c0e386 l. 1213-1218, megatron-bridge's: alltoall only), the shared_experts recompute module and ep_comm_overlap (l. 3040-3041 'disable moe_shared_expert_overlap when enabling
    overlap_moe_expert_parallel_comm'). fit's dispatcher search prices it only on its alltoall and flex rows
    (step.shared_overlap_on)."""
    if not job.moe_shared_expert_overlap:
        return False
    fix = "set moe_shared_expert_overlap: false (drop --moe-shared-expert-overlap)"
    if model.moe is None or not model.moe.num_shared_experts:
        raise PlannerError(f"{where}moe_shared_expert_overlap is set but {model.name} has no shared experts "
                           "(transformer_config.py @d98e8a64 l. 717-721: only effective with "
                           "moe_shared_expert_intermediate_size)", fix)
    ok = stack.moe_shared_expert_overlap_dispatchers
    if not stack.moe_shared_experts_tp_pair or not ok:
        raise PlannerError(f"{where}stack {stack.name} does not run Megatron-Core's SharedExpertMLP overlapped (stack "
                           "moe_shared_experts_tp_pair, moe_shared_expert_overlap_dispatchers)", fix)
    dispatcher = job.moe_dispatcher or stack.defaults.moe_dispatcher
    if dispatcher not in ok:
        raise PlannerError(f"{where}moe_shared_expert_overlap with moe_dispatcher {dispatcher}: Megatron-Core refuses it "
                           "('moe_shared_expert_overlap only works with alltoall or flex token dispatcher.', "
                           "transformer_config.py @d98e8a64 l. 1820-1826; @905c0e386 l. 1213-1218 alltoall only: stack "
                           f"{stack.name}'s moe_shared_expert_overlap_dispatchers)",
                           f"use moe_dispatcher {' or '.join(ok)}, or " + fix)
    if "shared_experts" in (job.recompute_modules or []) and job.recompute == "selective":
        raise PlannerError(f"{where}recompute_modules shared_experts with moe_shared_expert_overlap: Megatron-Core refuses "
                           "it ('shared_experts recompute cannot work with --moe-shared-expert-overlap.', "
                           "transformer_config.py @905c0e386 l. 1355-1362)", "leave shared_experts out, or " + fix)
    if job.ep_comm_overlap:
        raise PlannerError(f"{where}moe_shared_expert_overlap with ep_comm_overlap: Megatron-Core refuses it ('disable "
                           "moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm', "
                           "transformer_config.py @d98e8a64 l. 3040-3041)", "set ep_comm_overlap: false, or " + fix)
    return True


def apply_moe_dispatcher(job: Job, stack):
    """The stack with the job's moe_dispatcher as its defaults.moe_dispatcher, the dispatcher
    the start-up rules read (startup.MEGATRON_DEEPEP_GROUP); a job that names none runs the
    stack's own (moe_dispatch_settings below validates either)."""
    return with_default(stack, "moe_dispatcher", job.moe_dispatcher)


def apply_attention_backend(job: Job, stack, where: str = ""):
    """The stack with the job's attention_backend (the attention module its model code builds: torchtitan's attn_type /
    attn_backend) as its defaults.attention_backend, which the start-up rules read (startup.TORCHTITAN_VARLEN_CP); a
    job that leaves it out runs the stack's. One the stack does not list (runs.attention_backends; a stack that lists
    none: Megatron's kernel is attention_kernel) is refused."""
    b = job.attention_backend
    have = stack.runs.attention_backends if stack is not None and stack.runs is not None else None
    if b is not None and (have is None or b not in have):
        what = (f"stack {stack.name} names no attention backend ({stack.origin} runs.attention_backends null)"
                if have is None else f"stack {stack.name} builds {', '.join(have)} ({stack.origin} runs.attention_backends)")
        raise PlannerError(f"{where}attention_backend {b}: {what}",
                           "leave attention_backend out (--attention-backend) or choose one the stack lists; the kernel "
                           "priced is attention_kernel (--attention-kernel)" if have is None else
                           f"use --attention-backend {' or '.join(have)}")
    return with_default(stack, "attention_backend", b)


def apply_backend_kernel(job: Job, stack, hw: Hardware, features: list, where: str = "") -> Job:
    """The kernel the job's attention module runs (stack_db runs.backend_kernels): a job that names the module and no
    kernel, where the stack's default kernel for the GPU is not one the module runs, is priced with the module's first
    (listed among the settings taken: torchtitan main's attn_type flex builds FlexAttention, priced as flex, not the
    stack's flash2); a job naming a kernel the module does not run is refused. The job itself where it names no
    module, or one the stack does not list."""
    table = stack.runs.backend_kernels if stack is not None and stack.runs is not None else None
    b = job.attention_backend
    if b is None or not table or b not in table:
        return job
    kernels = table[b]
    if job.attention_kernel is not None:
        if job.attention_kernel not in kernels:
            raise PlannerError(f"{where}attention_backend {b} with attention_kernel {job.attention_kernel}: stack "
                               f"{stack.name}'s {b} module runs {', '.join(kernels)} ({stack.origin} runs.backend_kernels)",
                               f"use --attention-kernel {' or '.join(kernels)} with --attention-backend {b}, or leave the "
                               "kernel out (the module's is priced)")
        return job
    if stack.attention_kernel_for(hw.capability) in kernels:
        return job
    features.append(("attention_kernel", kernels[0]))
    return job.model_copy(update={"attention_kernel": kernels[0]})


def balance_ignored_at_cp1(job: Job) -> list:
    """The job's cp_load_balance false or named cp_load_balancer where a plan runs at cp 1 (nothing split: nothing to
    balance), said once
    (resolve at cp 1; fit where its space holds cp 1: search.search_one; the probe leaves it out: space.py)."""
    return (([] if job.cp_load_balance else ["cp_load_balance false ignored at cp 1 (no sequence split: nothing to balance)"])
            + ([f"cp_load_balancer {job.cp_load_balancer} ignored at cp 1 (no sequence split: nothing to balance)"]
               if job.cp_load_balancer is not None else []))


def apply_startup_switches(job: Job, stack, warnings: list, where: str = "", hw=None):
    """The stack with the job's switches that only start-up rules read laid on its defaults: fsdp_symm_mem
    (torchtitan 0.3's parallelism.enable_fsdp_symm_mem, startup.TORCHTITAN_FSDP_SYMM_MEM_SM90) and spmd_typechecking
    where the run's spmd_backend is spmd_types (debug.spmd_typechecking, 'only effective under spmd_backend=spmd_types':
    configs.py l. 356-357, trainer.py l. 143-167 and 605-610; startup.TORCHTITAN_SPMD_TYPECHECK_PP / _SAC_FLEX), and the
    larger of bf16_layers_at_start / _end (defaults.bf16_layers_max: startup.MEGATRON_BF16_LAYERS_STAGE), and
    recompute_layers (defaults.recompute_layers_set: startup.MEGATRON_RECOMPUTE_LAYERS_VPP). A switch the stack
    has no option for is refused; what neither prices is said (warnings)."""
    runs = stack.runs if stack is not None else None
    for name, what in (("fsdp_symm_mem", "FSDP all-gathers on symmetric memory"),
                       ("spmd_typechecking", "SPMD type checking")):
        if getattr(job, name) and (runs is None or getattr(runs, name) is None):
            raise PlannerError(f"{where}{name} is set but stack {stack.name} has no option for {what} ({stack.origin} "
                               f"runs.{name})", "leave it out, or choose --stack torchtitan-0.3")
    if not job.cp_load_balance and (runs is None or runs.cp_no_load_balance is None):
        origin = f"{stack.origin} runs.cp_no_load_balance" if stack is not None else "no stack"
        raise PlannerError(f"{where}cp_load_balance false is set but stack {stack.name if stack is not None else None} "
                           "always load-balances context parallelism (each CP rank holds sequence chunks i and 2 cp - 1 - i; "
                           "Megatron-LM: NVIDIA/Megatron-LM @d98e8a64 megatron/core/utils.py "
                           f"_get_batch_on_this_cp_rank_per_sequence_balancing l. 2504-2557) and has no option to turn "
                           f"it off ({origin})", "leave cp_load_balance out, or choose --stack torchtitan or torchtitan-0.3")
    if job.cp_load_balancer is not None:
        have = runs.cp_load_balancers if runs is not None else None
        # a name torch's cp_shard does not build (neither headtail nor ptrr) is kept, as the trainer config states it,
        # for the start-up rule TORCHTITAN_CP_LOAD_BALANCER_NAME (refused at cp > 1, where torchtitan stops in the first
        # step; at cp 1 never read); a name torch builds that the stack's option lacks is refused here
        if have is None or (job.cp_load_balancer not in have and job.cp_load_balancer in get_args(CPLoadBalancer)):
            what = (f"has no option naming a CP load balancer ({stack.origin} runs.cp_load_balancers)" if have is None
                    else f"builds {', '.join(have)} ({stack.origin} runs.cp_load_balancers)")
            raise PlannerError(f"{where}cp_load_balancer {job.cp_load_balancer} is set but stack "
                               f"{stack.name if stack is not None else None} {what}",
                               "leave cp_load_balancer out, or choose --stack torchtitan or torchtitan-0.3")
        if not job.cp_load_balance:
            raise PlannerError(f"{where}cp_load_balancer {job.cp_load_balancer} with cp_load_balance false: the one names a "
                               "load balancer, the other runs none (torchtitan's context_parallel_load_balancer takes one "
                               "value: a name, or None)", "give one of them")
        # ptrr read by the start-up rule TORCHTITAN_CP_PTRR_MASK (its mask); headtail and ptrr are priced alike, balanced
        stack = with_default(stack, "cp_load_balancer", job.cp_load_balancer)
    stack = _deterministic_switches(job, stack, warnings, where, hw)
    if job.fsdp_symm_mem:
        stack = with_default(stack, "fsdp_symm_mem", True)
        warnings.append("fsdp_symm_mem: FSDP's all-gather staging buffers come from torch's symmetric-memory pool "
                        "(torchtitan release/0.3 @4f9e9a47d distributed/fsdp.py l. 44-51: set_symm_mem_for_comm), outside "
                        "the caching allocator's; their bytes and the all-gather's time are priced as the default "
                        "all-gather's (not modelled)")
    if job.spmd_typechecking:
        spmd = runs.spmd_backends if runs is not None else None
        backend = job.spmd_backend or (spmd.default if spmd is not None else None)
        if backend == "spmd_types":
            stack = with_default(stack, "spmd_typechecking", True)
            warnings.append("spmd_typechecking: the step runs under spmd_typecheck (torchtitan release/0.3 @4f9e9a47d "
                            "distributed/utils.py get_spmd_context l. 424-425), whose host-side checks are not priced")
        else:
            warnings.append(f"spmd_typechecking ignored: spmd_backend {backend} (torchtitan 0.3 runs the checks only under "
                            "spmd_types: trainer.py l. 605-610)")
    # the bf16 layers at the ends, read with each plan's pp by the start-up rule MEGATRON_BF16_LAYERS_STAGE (0: none)
    stack = with_default(stack, "bf16_layers_max", max(job.bf16_layers_at_start, job.bf16_layers_at_end) or None)
    # the block method's layers a GPU, read with each plan's vpp by the start-up rule MEGATRON_RECOMPUTE_LAYERS_VPP
    stack = with_default(stack, "recompute_layers_set", job.recompute_layers)
    # --overlap-param-gather as stated, read with each plan's DP overlap and sharding mode by MEGATRON_PARAM_GATHER
    stack = with_default(stack, "dp_param_gather_overlap_set", True if job.dp_param_gather_overlap else None)
    return stack


def _deterministic_switches(job: Job, stack, warnings: list, where: str = "", hw=None):
    """The job's deterministic_mode and the settings of the job it refuses (cross_entropy_fusion; attention_kernel
    flash2 where the config names the FlashAttention backend: Bridge's check reads model.attention_backend flash, the
    config's field, training/config.py @dc805f5cf l. 1454-1456, so on every GPU where the job says it is named
    (attention_kernel_named: the Bridge reader's model.attention_backend flash), else where flash2 is not the kernel TE
    picks on the GPU `hw` by itself, the one export._bridge_attention_backend writes as flash (a plan records the
    kernel it priced, TE's own choice too, which the export writes as null: auto, not refused); use_flash_attn,
    Megatron-LM's --use-flash-attn) laid on the stack's defaults, where the start-up
    rules MEGATRON_DETERMINISTIC_* read them (their own plans' TP overlap: PlanArrays.tpo; the model's experts:
    _MOE); the stack's runs.deterministic_refuses without the checks its trainer added after the job's trainer_date
    (each entry's since: a run of an older commit, such as a Megatron CI corpus row recorded before 3ab71eeb3e, ran
    without them) and without those it had removed by then (until: a job without a trainer_date is the stack's own
    commit, later than every until), each dropped check said where the job gives a date (warnings). use_flash_attn and
    attention_kernel_named on a stack whose list has no check of them (no trainer reads them for anything else) are
    refused, the latter without an attention_kernel too."""
    runs = stack.runs if stack is not None else None
    refs = list(runs.deterministic_refuses or ()) if runs is not None else []
    if job.attention_kernel_named and (job.attention_kernel is None
                                       or not any(r.setting == "flash_attention" for r in refs)):
        raise PlannerError(f"{where}attention_kernel_named says the config names its attention backend, which only "
                           "Megatron-Bridge's deterministic check reads (model.attention_backend flash: training/config.py "
                           "@dc805f5cf l. 1454-1456); " + ("no attention_kernel is given" if job.attention_kernel is None
                           else f"stack {stack.name} has no such check ({stack.origin} runs.deterministic_refuses)"),
                           "leave attention_kernel_named out, or give it with attention_kernel on --stack megatron-bridge")
    if job.use_flash_attn and not any(r.setting == "use_flash_attn" for r in refs):
        raise PlannerError(f"{where}use_flash_attn is Megatron-LM's --use-flash-attn, which only its deterministic mode's "
                           f"older check read; stack {stack.name if stack is not None else None} has no such check "
                           f"({stack.origin if stack is not None else 'no stack'} runs.deterministic_refuses)",
                           "leave use_flash_attn out (it picks no kernel), or price the plan on --stack megatron")
    day = job.trainer_date
    later = [r for r in refs if day is not None and r.since > day]
    gone = [r for r in refs if r.until is not None and (day is None or day >= r.until)]
    if later or gone:
        keep = [r for r in refs if r not in later and r not in gone] or None
        stack = stack.model_copy(update={"runs": runs.model_copy(update={"deterministic_refuses": keep})})
    if day is not None:
        held = [r for r in refs if r.until is not None and r not in later and r not in gone]
        said = ([("the trainer's deterministic mode did not yet refuse "
                  + ", ".join(f"{r.setting} (checked from {r.since})" for r in later))] if later else []) + (
            [("it no longer refused " + ", ".join(f"{r.setting} (checked from {r.since} to {r.until})" for r in gone
                                                   if r.since <= day))] if any(r.since <= day for r in gone) else []) + (
            [("it then refused " + ", ".join(f"{r.setting} (checked from {r.since} to {r.until})" for r in held))]
            if held else [])
        if said:
            warnings.append(f"trainer_date {day}: " + "; ".join(said) + f" ({stack.origin} runs.deterministic_refuses)")
        else:
            warnings.append(f"trainer_date {day}: no start-up check of stack {stack.name} is dated later "
                            f"({stack.origin} runs.deterministic_refuses); the plan is checked as the stack's own commit")
    if not job.deterministic_mode:
        return stack
    algo = job.nccl_algo
    refused = [name for name, on in (("cross_entropy_fusion", job.cross_entropy_fusion),
                                     ("flash_attention", job.attention_kernel == "flash2" and (
                                         job.attention_kernel_named or hw is None
                                         or stack.attention_kernel_for(hw.capability) != "flash2")),
                                     ("use_flash_attn", job.use_flash_attn),
                                     ("nccl_algo_tokens", algo is not None and not nccl_algo_tokens_ok(algo)),
                                     ("nccl_algo_choice", algo is not None and algo not in NCCL_ALGO_CHOICES)) if on]
    stack = with_default(stack, "deterministic_mode", True)
    return with_default(stack, "deterministic_refused", refused or None)


# The NCCL_ALGO values a trainer's deterministic mode takes (start-up rules MEGATRON_DETERMINISTIC_NCCL_ALGO / _CHOICE,
# codes 103-104, where the stack's runs.deterministic_refuses lists nccl_algo_tokens / nccl_algo_choice):
# NVIDIA/Megatron-LM @d98e8a64 megatron/training/determinism.py l. 48 ACCEPTED_NCCL_ALGO_TOKENS, each of the value's
# comma-separated tokens (stripped, empty ones dropped) among them, l. 88-93; its older validate_args (ac08742c96 to
# 3ab71eeb3e's parent 465264b7dd arguments.py l. 1513-1515) and NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
# training/config.py l. 1463-1466: the whole value one of all_reduce_choices
NCCL_ALGO_TOKENS = ("Ring", "CollnetDirect", "CollnetChain", "^NVLS")
NCCL_ALGO_CHOICES = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")


def nccl_algo_tokens_ok(algo: str) -> bool:
    """Whether determinism.py @d98e8a64 l. 88-93 takes NCCL_ALGO=`algo`: some token, each in NCCL_ALGO_TOKENS."""
    tokens = [t.strip() for t in algo.split(",") if t.strip()]
    return bool(tokens) and all(t in NCCL_ALGO_TOKENS for t in tokens)


def fused_softmax_assert(job: Job, stack, seq: int) -> list[str]:
    """A warning where the job's eager core attention with the fused softmax on (masked_softmax_fusion not false) runs a
    key length the stack's fused-softmax gate takes (kernels score_softmax_max_keys) but its causal kernel asserts
    against (kernels score_softmax_causal_max_keys): BigScience's Megatron-DeepSpeed @497aa1bf is_kernel_available
    passes 16 < sk <= 4096 (fused_softmax.py l. 165-184) and hands a causal layer to ScaledUpperTriangMaskedSoftmax,
    whose CUDA forward asserts seq_len <= 2048 (scaled_upper_triang_masked_softmax_cuda.cu l. 38): the job stops at its
    first forward where the gate's other terms hold (seq % 4, micro-batch x heads / tp % 4). Not refused (the gate's
    divisibility terms are not modelled, and where one fails the torch softmax runs); priced as the fused kernel."""
    kernels = stack.kernels if stack is not None else None
    top = kernels.score_softmax_causal_max_keys if kernels is not None else None
    if (top is None or job.attention != "eager" or job.masked_softmax_fusion is False
            or not top < seq <= (kernels.score_softmax_max_keys or seq)):
        return []
    return [f"attention eager at {seq:,} keys with the fused softmax: stack {stack.name}'s fused-softmax gate takes up to "
            f"{kernels.score_softmax_max_keys:,} keys but its causal kernel asserts {top:,} ({stack.origin} kernels "
            "score_softmax_causal_max_keys, with its source): where seq and micro-batch x heads / tp are multiples of 4 "
            "the job stops at its first forward (priced here as the fused kernel); masked_softmax_fusion false "
            "(--no-masked-softmax-fusion) runs the torch softmax"]


def with_default(stack, field: str, value):
    """The stack with `value` (a job's setting) as its defaults.<field>, where the start-up rules read
    it; the stack itself where the job leaves it (None) or it is the stack's already."""
    if value is None or stack is None or value == getattr(stack.defaults, field):
        return stack
    return stack.model_copy(update={"defaults": stack.defaults.model_copy(update={field: value})})


def _chunked_loss(job: Job, stack, inherited: list, model=None, where: str = "") -> bool:
    """The job's chunked_loss, else the stack's defaults.chunked_loss (listed as inherited where it is on: the
    torchtitan-0.3 configs' ChunkedLossWrapper, stack_db torchtitan-0.3.yaml defaults). With multi-token prediction
    modules on a stack whose chunked loss does not run beside them (runs.mtp_chunked_loss false: torchtitan 0.3's
    MTPDecoder.forward raises under ChunkedLossWrapper's _skip_lm_head, models/deepseek_v3/mtp.py l. 271-275, and its
    MTP config runs MTPLoss, the plain cross-entropy per depth) the plain loss is taken and a job asking the chunked
    one is refused."""
    runs = stack.runs
    mtp_plain = bool(model is not None and model.mtp_layers and runs is not None and runs.mtp_chunked_loss is False)
    if mtp_plain and job.chunked_loss:
        raise PlannerError(f"{where}chunked_loss with {model.mtp_layers} multi-token prediction module(s) on stack "
                           f"{stack.name}: its chunked loss does not run beside MTP ({stack.origin} "
                           "runs.mtp_chunked_loss false: torchtitan release/0.3 @4f9e9a47d models/deepseek_v3/mtp.py "
                           "MTPDecoder.forward l. 271-275 raises 'skip_lm_head is not supported with MTP decoder until "
                           "ChunkedLoss supports MTP outputs', and its MTP config runs MTPLoss, l. 323-409)",
                           "leave chunked_loss out or off (--no-chunked-loss) with mtp_layers, or set mtp_layers 0")
    if mtp_plain:
        return False
    if job.loss_logit_chunks is not None:  # PR #996's loss replaces the stack's default one (memory.py [ck])
        if model is not None and model.mtp_layers:
            raise PlannerError(f"{where}loss_logit_chunks with {model.mtp_layers} multi-token prediction module(s): "
                               "torchtitan PR #996's loss takes the main logits only (@f99bfc03 components/loss.py)",
                               "leave loss_logit_chunks out with mtp_layers")
        return False
    if job.chunked_loss is not None:
        return bool(job.chunked_loss)
    on = bool(stack.defaults.chunked_loss and stack.memory.chunked_loss_chunks is not None)
    if on:
        inherited.append(("chunked_loss", True))
    return on


def apply_fp8_grouped_experts(job: Job, stack):
    """The stack with the job's fp8_grouped_experts as its defaults.fp8_grouped_experts, what the
    start-up rules read (startup.TORCHTITAN_FP8_GROUPED_MM_PP_CP); a job that does not say runs the
    stack's rule (_fp8_grouped_experts validates either)."""
    value = None if job.fp8_grouped_experts is None else bool(job.fp8_grouped_experts)
    return with_default(stack, "fp8_grouped_experts", value)


def moe_dispatch_settings(job: Job, model: ModelSpec, stack, inherited: list, where: str = "") -> dict:
    """The job's MoE dispatcher fields as Settings keywords: moe_dispatcher (the job's, else the
    stack's defaults.moe_dispatcher, listed as inherited for an MoE model; one the stack does not
    run, stack_db runs.moe_dispatchers, is refused), moe_fp8_dispatch (None: the stack's fp8
    recipe's, fp8_dispatch below), moe_route_nodes (0: no limit); an error where a dense model
    sets them."""
    given = [f for f in ("moe_dispatcher", "moe_route_nodes", "moe_aux_loss_coeff", "moe_z_loss_coeff",
                         "moe_hybridep_capacity_factor") if getattr(job, f) is not None]
    given += [f for f in ("moe_fp8_dispatch", "moe_router_pre_softmax", "moe_router_dtype",
                                    "moe_router_padding") if getattr(job, f)]
    # the MoE kernels' switches, either way (--moe-permute-fusion / --no-moe-permute-fusion, --moe-grouped-gemm /
    # --no-moe-grouped-gemm; None: not given): on a dense model they fuse or group nothing (moe_fusion_settings and
    # moe_grouped_gemm run for an MoE model only), refused as the dispatcher is, not dropped
    given += [f for f in (*MOE_FUSIONS, "moe_grouped_gemm") if getattr(job, f) is not None]
    if model.moe is None:
        if given:
            raise PlannerError(f"{where}{', '.join(given)} set but {model.name} has no experts",
                               "remove them (they apply to mixture-of-experts models)")
        return {}
    name = job.moe_dispatcher
    if name is None:
        name = stack.defaults.moe_dispatcher
        inherited.append(("moe_dispatcher", name))
    runs = stack.runs
    if runs is not None and runs.moe_dispatchers is not None and name not in runs.moe_dispatchers:
        src = next((x for x in runs.sources if x.startswith("moe_dispatchers")), runs.sources[0])
        raise PlannerError(f"{where}moe_dispatcher {name}: stack {stack.name} runs {', '.join(runs.moe_dispatchers)} "
                           f"({stack.origin} runs.moe_dispatchers: {src[:240]})",
                           f"use one of {', '.join(runs.moe_dispatchers)}, or a stack that runs {name}")
    from .moe_padding import PAD_REFUSED

    if job.moe_pad_to_capacity and name in PAD_REFUSED:  # planner/dispatch.py [7]
        raise PlannerError(f"{where}moe_pad_to_capacity with moe_dispatcher {name}: Megatron refuses the padding on "
                           "DeepEP's backend (transformer_config.py @d98e8a64 l. 1754-1761)",
                           "use moe_dispatcher alltoall or hybridep, or remove moe_pad_to_capacity")
    if job.moe_fp8_dispatch and job.precision == "bf16":  # planner/dispatch.py [11]
        raise PlannerError(
            f"{where}moe_fp8_dispatch (--moe-fp8-dispatch) with precision bf16: an fp8 dispatch sends the tokens "
            "quantized for an fp8 up-projection (DeepSeek-V3 arXiv:2412.19437 sec. 3.3.3: 'compatible with FP8 Fprop in "
            "MoE up-projections'); without an fp8 recipe the planner would price the fp8 wire and none of the quantize "
            "and dequantize kernels around a bf16 GEMM, and no stack it prices runs one (Megatron-LM @d98e8a64 "
            "quantizes the wire only with --moe-dispatch-fwd-dtype mxfp8, which transformer_config.py l. 1776-1784 "
            "refuses on every dispatcher but the ncclep flex backend, not priced here; torchtitan @e347b1e5e "
            "dispatches the bf16 hidden states; the deepseek stack's fp8 dispatch is its fp8 recipe's)",
            "remove moe_fp8_dispatch (--moe-fp8-dispatch), or train in fp8 (--precision fp8)")
    if name == "hybridep" and job.moe_fp8_dispatch and megatron_checks(stack):  # planner/dispatch.py [10]
        raise PlannerError(f"{where}moe_fp8_dispatch with moe_dispatcher hybridep: Megatron-Core's HybridEP backend "
                           "dispatches bf16 only ('HybridEP dispatcher does not support fp8 dispatch now', "
                           "moe/fused_a2a.py @d98e8a64 init_hybrid_ep_buffer l. 327; HybridEPDispatch.forward l. 402 "
                           "sets fp8_dispatch = False)",
                           "remove moe_fp8_dispatch, or use moe_dispatcher deepep")
    hcf = _hybridep_capacity(job, stack, name, where, inherited)
    fusions = moe_fusion_settings(job, stack, inherited, where)
    _router_dtype_ok(job, stack, fusions["moe_router_fusion"], where)
    _router_padding_ok(job, stack, name, where)
    if job.moe_grouped_gemm is not None and stack.defaults.moe_grouped_gemm is None:
        # Megatron-Core's switch (Transformer Engine's GroupedLinear and its workspaces, the only stack setting that
        # prices them); elsewhere either value would change no figure: refused as moe_fusion_settings refuses, naming
        # what the stack's experts run (stack_db defaults.moe_experts_kernel)
        runs_instead = (f"{stack.defaults.moe_experts_kernel} ({stack.origin} defaults.moe_experts_kernel)"
                        if stack.defaults.moe_experts_kernel else "what its own code builds, priced without grouped-GEMM workspaces")
        flag = "--moe-grouped-gemm" if job.moe_grouped_gemm else "--no-moe-grouped-gemm"
        raise PlannerError(f"{where}moe_grouped_gemm {str(bool(job.moe_grouped_gemm)).lower()} ({flag}) is a Megatron-Core "
                           f"setting; stack {stack.name} has no such switch: its routed experts run {runs_instead}",
                           f"leave {flag} out, or price the plan on --stack megatron")
    if job.moe_grouped_gemm is None and stack.defaults.moe_grouped_gemm is not None:
        inherited.append(("moe_grouped_gemm", stack.defaults.moe_grouped_gemm))
    return dict(moe_dispatcher=name, moe_fp8_dispatch=job.moe_fp8_dispatch,
                moe_route_nodes=int(job.moe_route_nodes or 0), moe_hybridep_capacity_factor=hcf, **fusions,
                moe_grouped_gemm=moe_grouped_gemm_on(job, stack),
                moe_router_padding=job.moe_router_padding,
                **moe_router_settings(job, stack, inherited, where, model), moe_router_dtype=job.moe_router_dtype)


def _hybridep_capacity(job: Job, stack, name: str, where: str, inherited: list) -> float:
    """Settings.moe_hybridep_capacity_factor: the job's moe_hybridep_capacity_factor (0.0: the blocking dispatch), else
    on hybridep the stack's defaults.moe_hybridep_capacity_factor (torchtitan-0.3's 1.0: the factor its only HybridEP
    config functions build, config_registry.py l. 114 / 179; listed as inherited), else 0.0; a factor above 0 refused
    with another dispatcher or on a stack whose HybridEP has no non-blocking dispatch (runs.hybridep_non_blocking)."""
    f = job.moe_hybridep_capacity_factor
    if f is None:
        d = stack.defaults.moe_hybridep_capacity_factor
        if name != "hybridep" or d is None:
            return 0.0
        inherited.append(("moe_hybridep_capacity_factor", d))
        return float(d)
    if name != "hybridep":
        raise PlannerError(f"{where}moe_hybridep_capacity_factor {f:g} with moe_dispatcher {name}: it sizes HybridEP's "
                           "non-blocking dispatch (layers/moe.py [19]), which the job does not run",
                           "use moe_dispatcher hybridep, or remove moe_hybridep_capacity_factor")
    if f > 0 and (stack.runs is None or not stack.runs.hybridep_non_blocking):
        raise PlannerError(f"{where}moe_hybridep_capacity_factor {f:g} on stack {stack.name}: its HybridEP dispatcher has "
                           f"no non-blocking dispatch sized by a capacity factor ({stack.origin} runs.hybridep_non_blocking "
                           "false: Megatron-Core's _HybridEPManager takes no such setting)",
                           "remove moe_hybridep_capacity_factor (or give 0: the blocking dispatch), or use --stack "
                           "torchtitan-0.3")
    return float(f)


def _trainer_env_default(job: Job, stack, field: str):
    """The environment variable the stack's trainer sets under deterministic_mode where the launcher has not (stack
    runs.<field>, a DeterministicDefault: runs.deterministic_nccl_algo, runs.deterministic_cublas_workspace), dated:
    None where the job is not deterministic, the stack sets none, or the job's trainer_date is older than the commit
    that began to set it (a run of an older commit got none from its trainer); a job without a trainer_date is the
    stack's own commit, which sets it."""
    if not job.deterministic_mode or stack is None or stack.runs is None:
        return None
    d = getattr(stack.runs, field)
    if d is None or (job.trainer_date is not None and job.trainer_date < d.since):
        return None
    return d


def _cublas_workspace(job: Job, stack, where: str) -> tuple[str | None, list[str]]:
    """The run's CUBLAS_WORKSPACE_CONFIG and its assumed line: the job's; else, under deterministic_mode (Megatron
    --deterministic-mode), what the stack's trainer sets where the launcher has not (_trainer_env_default on stack
    runs.deterministic_cublas_workspace: Megatron-LM @d98e8a64's :4096:8, training/determinism.py l. 27-31, 114-116,
    since 3ab71eeb3e, 2026-07-08; none on Bridge's 905c0e386); else unset (the GPU's default, memory.py [ws]). A
    deterministic job dated before the trainer set it, giving none, is priced at the GPU's default, its line saying
    that PyTorch's deterministic algorithms (which the trainer turned on) need the launcher's :4096:8 or :16:8. A stack
    whose trainer is not Megatron-LM (megatron_checks) has no such switch and refuses deterministic_mode."""
    if job.deterministic_mode and not megatron_checks(stack):
        raise PlannerError(f"{where}deterministic_mode is Megatron-LM's --deterministic-mode; stack {stack.name} has "
                           "no such switch", "leave it out, or price the plan on --stack megatron")
    if job.cublas_workspace_config is not None or not job.deterministic_mode:
        return job.cublas_workspace_config, []
    d = _trainer_env_default(job, stack, "deterministic_cublas_workspace")
    if d is not None:
        return d.value, [f"cublas_workspace_config={d.value}: deterministic_mode with no CUBLAS_WORKSPACE_CONFIG given, "
                         f"which stack {stack.name}'s trainer sets to {d.value} where the launcher has not (since "
                         f"{d.since}: {stack.origin} runs.deterministic_cublas_workspace, {d.source}); its cuBLAS "
                         "workspaces priced at that size (memory.py [ws])"]
    later = stack.runs.deterministic_cublas_workspace if stack.runs is not None else None
    if later is None:
        return None, []
    return None, [f"cublas_workspace_config unset: deterministic_mode on a trainer dated {job.trainer_date}, before "
                  f"stack {stack.name}'s trainer set CUBLAS_WORKSPACE_CONFIG itself (since {later.since}: {stack.origin} "
                  "runs.deterministic_cublas_workspace); it turned on torch.use_deterministic_algorithms, under which "
                  "PyTorch raises at the first cuBLAS GEMM unless the launcher exports CUBLAS_WORKSPACE_CONFIG=:4096:8 "
                  "or :16:8 (aten/src/ATen/Context.cpp alertCuBLASConfigNotDeterministic): the GPU's default workspace "
                  "priced (memory.py [ws]); give the launcher's as cublas_workspace_config"]


def _nccl_algo(job: Job, stack) -> tuple[str | None, list[str]]:
    """The run's NCCL_ALGO and its assumed line: the job's (job field nccl_algo); else, under deterministic_mode, what
    the stack's trainer sets where the launcher has not (_trainer_env_default on stack runs.deterministic_nccl_algo:
    Megatron-LM @d98e8a64's Ring, training/determinism.py l. 27-31, 114-116, since 3ab71eeb3e, 2026-07-08), where the
    job's trainer_date is not older than that (a run of an older commit set none: NCCL's own choice); else unset."""
    if job.nccl_algo is not None:
        return job.nccl_algo, []
    d = _trainer_env_default(job, stack, "deterministic_nccl_algo")
    if d is None:
        return None, []
    return d.value, [f"nccl_algo={d.value}: deterministic_mode with no NCCL_ALGO given, which stack {stack.name}'s "
                     f"trainer sets to {d.value} where the launcher has not (since {d.since}: {stack.origin} "
                     f"runs.deterministic_nccl_algo, {d.source}); its collectives priced with the algorithms it leaves "
                     "them (comm.nccl_algo_candidates)"]


def _nccl_protos(nccl_proto: str | None, where: str) -> tuple[tuple | None, list[str]]:
    """The protocols the job's NCCL_PROTO (job field nccl_proto) leaves each collective (comm.nccl_proto_protocols,
    which refuses a value NCCL refuses or one leaving a collective no protocol; None where unset), and an assumed line
    where it leaves some collective no Simple: across NVLink domains the model prices Simple all the same (comm.py
    [19], LL_NETWORK_PRICED), where the run runs LL or LL128."""
    if nccl_proto is None:
        return None, []
    try:
        protos = nccl_proto_protocols(nccl_proto)
    except PlannerError as e:
        raise PlannerError(f"{where}nccl_proto: {e.message}", e.hint) from None
    if all(p is None or SIMPLE in p for p in protos):
        return protos, []
    return protos, [f"nccl_proto={nccl_proto}: leaves some collectives no Simple; those whose ranks span NVLink "
                    "domains are priced under Simple all the same (NCCL's network LL / LL128 figures understate the "
                    "measured small collectives: comm.py [19], LL_NETWORK_PRICED), LL / LL128 inside one domain"]


def _nccl_nvls_enable(value: int | None, hw: Hardware, where: str) -> int | None:
    """The job's NCCL_NVLS_ENABLE (job field nccl_nvls_enable) as priced (comm.nvls_enabled, comm.py [22]); 1 (NCCL
    forces nvlsSupport without asking the GPU: NVIDIA/nccl v2.20.3-1 src/transport/nvls.cc l. 248-255) on hardware
    whose switches do not reduce (hardware nvls false) is refused: NCCL's multicast object cannot be made there
    (v2.27.3-1 nvls.cc l. 282-284: 'Failed to bind NVLink SHARP (NVLS) Multicast memory ... Do not force-enable NVLS
    (NCCL_NVLS_ENABLE=1)'), and the model has no NVLS figure for it."""
    if value == 1 and not bool(getattr(hw, "nvls", False)):
        raise PlannerError(f"{where}nccl_nvls_enable: 1 forces NVLink SHARP on {hw.name}, whose hardware entry has "
                           "nvls: false (no NVLS switches): NCCL fails to bind the multicast memory (NVIDIA/nccl "
                           "v2.27.3-1 src/transport/nvls.cc l. 282-284)", "give 0 or 2, or leave nccl_nvls_enable out")
    return value


def _nccl_algos(nccl_algo: str | None, where: str) -> tuple | None:
    """The algorithms the run's NCCL_ALGO (job field nccl_algo, or the trainer's: _nccl_algo) leaves each collective
    (comm.nccl_algo_candidates, which refuses a value NCCL refuses or the model cannot price); None where unset."""
    if nccl_algo is None:
        return None
    try:
        return nccl_algo_candidates(nccl_algo)
    except PlannerError as e:
        raise PlannerError(f"{where}nccl_algo: {e.message}", e.hint) from None


def _enable_experimental(job: Job, stack, where: str) -> bool:
    """Megatron --enable-experimental (arguments.py @d98e8a64 l. 3643): a stack whose trainer is not Megatron-LM
    (megatron_checks) has no such switch and refuses it."""
    if job.enable_experimental and not megatron_checks(stack):
        raise PlannerError(f"{where}enable_experimental is Megatron-LM's --enable-experimental; stack {stack.name} has "
                           "no such switch", "leave it out, or price the plan on --stack megatron")
    return bool(job.enable_experimental)


def _router_padding_ok(job: Job, stack, dispatcher: str, where: str) -> None:
    """moe_router_padding is Megatron-Core's moe_router_padding_for_quantization (transformer_config.py @d98e8a64
    l. 771-778): refused on
    a stack without Megatron-Core's MoE switches (defaults.moe_permute_fusion null, as moe_fusion_settings refuses
    theirs), and where Megatron refuses it (TransformerConfig.__post_init__ l. 2649-2659: 'fp8/fp4 must be specified
    when moe_router_padding_for_quantization is True'; the allgather and alltoall_seq dispatchers 'do not support'
    it). An MoE model only (moe_dispatch_settings refuses it on a dense one)."""
    if not job.moe_router_padding:
        return
    if stack.defaults.moe_permute_fusion is None:
        raise PlannerError(f"{where}moe_router_padding is a Megatron-Core setting; stack {stack.name} "
                           "has no such switch", "leave it out, or price the plan on --stack megatron")
    if job.precision == "bf16":
        raise PlannerError(f"{where}moe_router_padding with precision bf16: Megatron refuses it ('fp8/fp4 "
                           "must be specified when moe_router_padding_for_quantization is True', transformer_config.py "
                           "@d98e8a64 l. 2649-2653)", "train in fp8 or nvfp4 (--precision), or leave the padding out")
    if dispatcher == "allgather":
        raise PlannerError(f"{where}moe_router_padding with moe_dispatcher allgather: Megatron refuses it "
                           "('allgather and alltoall_seq dispatcher does not support moe_router_padding_for_quantization', "
                           "transformer_config.py @d98e8a64 l. 2655-2659)",
                           "use moe_dispatcher alltoall (--moe-token-dispatcher-type alltoall) or a flex backend, or leave "
                           "the padding out")


def _router_dtype_ok(job: Job, stack, router_fused: bool, where: str) -> None:
    """moe_router_dtype is Megatron-Core's --moe-router-dtype (router.py @d98e8a64 l. 105-111): refused on a stack
    that does not price the router's saves (stack memory.moe_routing_saved; nothing there would read it), and fp64
    with the fused router: Transformer Engine's fused top-k takes no fp64 logits (TE @4329ff84
    transformer_engine/pytorch/router.py l. 7 'FP64 is currently not supported'; csrc/common.h
    GetTransformerEngineDType l. 476-500 has no double: 'Invalid type' at the first forward)."""
    if job.moe_router_dtype is None:
        return
    if not stack.memory.moe_routing_saved:  # a stack setting
        raise PlannerError(f"{where}moe_router_dtype {job.moe_router_dtype} is Megatron-Core's --moe-router-dtype; stack "
                           f"{stack.name} does not price the router's saved tensors it changes",
                           "leave moe_router_dtype out, or price the plan on --stack megatron")
    if job.moe_router_dtype == "fp64" and router_fused:
        raise PlannerError(f"{where}moe_router_dtype fp64 with moe_router_fusion: Transformer Engine's fused router "
                           "takes no fp64 logits (TE router.py 'FP64 is currently not supported'; csrc/common.h "
                           "GetTransformerEngineDType raises 'Invalid type' for double)",
                           "use moe_router_dtype fp32, or moe_router_fusion false (--no-moe-router-fusion)")


# Megatron-Core's top-1 softmax router (TransformerConfig.__post_init__ l. 2661-2669 at the commit below)
TOP1_PRE_SOFTMAX_SOURCE = ("NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/transformer_config.py "
                           "TransformerConfig.__post_init__ l. 2661-2669: moe_router_topk 1 with a softmax score and "
                           "neither moe_router_pre_softmax nor sinkhorn balancing raises 'Please use --moe-router-pre-softmax "
                           "when topk is 1.' (a softmax over one logit has a zero gradient)")


def _top1_pre_softmax(job: Job, model: ModelSpec, stack, inherited: list, where: str) -> bool:
    """moe_router_pre_softmax where Megatron-Core needs it (TOP1_PRE_SOFTMAX_SOURCE: a softmax top-1
    router on a stack running its start-up checks, balancing not sinkhorn): the job's, refused where
    it says false; true (listed as inherited) where it says nothing. Elsewhere the job's, else false."""
    needs = (model is not None and model.moe is not None and model.moe.top_k == 1 and model.moe.router == "softmax"
             and job.moe_load_balancing != "sinkhorn" and megatron_checks(stack))
    if not needs:
        return bool(job.moe_router_pre_softmax)
    if job.moe_router_pre_softmax is False:
        raise PlannerError(f"{where}moe_router_pre_softmax false with a top-1 softmax router ({model.name}): Megatron-Core "
                           f"refuses it ({TOP1_PRE_SOFTMAX_SOURCE})",
                           "set moe_router_pre_softmax true (--moe-router-pre-softmax), or moe_load_balancing sinkhorn")
    if job.moe_router_pre_softmax is None:
        inherited.append(("moe_router_pre_softmax", True))
    return True


def moe_router_settings(job: Job, stack, inherited: list, where: str = "", model: ModelSpec | None = None) -> dict:
    """The router's path of an MoE job (planner/layers/moe.py router_saved_terms [10]): moe_aux_loss_coeff (the
    job's; a planned job without one took its model's training recipe's, planner/recipe.py; else Megatron-LM's
    default 0.0, arguments.py @d98e8a64 --moe-aux-loss-coeff, listed as inherited where the stack prices the
    router's saves, stack memory.moe_routing_saved), moe_z_loss_coeff (default none: transformer_config.py
    moe_z_loss_coeff None), moe_router_pre_softmax (default false: moe_router_pre_softmax False)."""
    aux = job.moe_aux_loss_coeff
    if aux and job.moe_load_balancing == "sinkhorn" and megatron_checks(stack):
        raise PlannerError(f"{where}moe_aux_loss_coeff > 0 with moe_load_balancing sinkhorn: Megatron-Core refuses it ('Sinkhorn "
                           "routing does not support aux loss', moe/router.py @d98e8a64 l. 298)",
                           "set moe_aux_loss_coeff 0, or use another moe_load_balancing")
    if aux is None:
        aux = 0.0
        if stack.memory.moe_routing_saved:
            inherited.append(("moe_aux_loss_coeff", aux))
    return dict(moe_aux_loss_coeff=float(aux), moe_z_loss_coeff=float(job.moe_z_loss_coeff or 0.0),
                moe_router_pre_softmax=_top1_pre_softmax(job, model, stack, inherited, where))


MOE_FUSIONS = ("moe_permute_fusion", "moe_router_fusion")


def moe_fusion_settings(job: Job, stack, inherited: list, where: str = "") -> dict:
    """moe_permute_fusion / moe_router_fusion: the job's, else the stack's defaults (listed as
    inherited); a stack without the switch (defaults null) runs the fused kernels priced and
    refuses the job field, as Megatron-only fields are refused."""
    out = {}
    for f in MOE_FUSIONS:
        default = getattr(stack.defaults, f)
        if getattr(job, f) is not None and default is None:
            raise PlannerError(f"{where}{f} is a Megatron-Core setting; stack {stack.name} has no such switch "
                               "(its MoE permutation and router are priced as fused kernels)",
                               f"leave {f} out, or price the plan on --stack megatron")
        value = getattr(job, f)
        if value is None:
            value = True if default is None else default
            if default is not None:
                inherited.append((f, value))
        out[f] = bool(value)
    return out


def _capacity_factor(job: Job, model: ModelSpec, where: str) -> float:
    """The job's moe_capacity_factor (default moe.DEFAULT_CAPACITY_FACTOR); an error on a dense model."""
    if job.moe_capacity_factor is None:
        return DEFAULT_CAPACITY_FACTOR
    if model.moe is None:
        raise PlannerError(f"{where}moe_capacity_factor is set but {model.name} has no experts",
                           "remove moe_capacity_factor (it applies to mixture-of-experts models)")
    return float(job.moe_capacity_factor)


def _min_capacity(job: Job, model: ModelSpec, stack, where: str) -> int:
    """The capacity's floor of a stack that gates densely (stack moe_gating, DeepSpeed-MoE: layers/moe.py [18]): the
    job's moe_min_capacity, else the stack's moe_gating.min_capacity; 0 elsewhere. Set on a dense model, or on a
    stack without dense gating (Megatron-Core's capacity has no such flag), it is refused."""
    gating = stack.moe_gating if stack is not None else None
    if job.moe_min_capacity is not None and (model.moe is None or gating is None):
        why = (f"{model.name} has no experts" if model.moe is None else
               f"stack {stack.name if stack is not None else None} has no capacity floor (it is DeepSpeed-MoE's "
               "_capacity min_capacity, stack moe_gating)")
        raise PlannerError(f"{where}moe_min_capacity {job.moe_min_capacity} set but {why}",
                           "remove moe_min_capacity, or price DeepSpeed-MoE (--stack megatron-deepspeed)")
    if gating is None or model.moe is None:
        return 0
    return int(job.moe_min_capacity if job.moe_min_capacity is not None else gating.min_capacity)


def _imbalance_settings(job: Job, model: ModelSpec, stack, where: str) -> dict:
    """The job's MoE routing-imbalance fields as Settings keywords (planner/imbalance.py): whether
    a capacity factor drops tokens (and pads), the measured rank imbalance (0: the rule), the
    router's balancing (default imbalance.default_balancing); an error where a dense model or a
    job without a capacity factor sets what needs one."""
    from .imbalance import default_balancing

    given = [f for f in ("moe_rank_imbalance", "moe_load_balancing", "moe_pad_to_capacity") if getattr(job, f) is not None]
    if model.moe is None:
        if given:
            raise PlannerError(f"{where}{', '.join(given)} set but {model.name} has no experts",
                               "remove them (they apply to mixture-of-experts models)")
        return {}
    if job.moe_capacity_factor is not None and job.moe_load_balancing == "sinkhorn" and megatron_checks(stack):
        raise PlannerError(f"{where}moe_capacity_factor with moe_load_balancing sinkhorn: Megatron-Core refuses it "
                           "('moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss or none "
                           "load balancing', transformer_config.py @d98e8a64 l. 1836-1860)",
                           "use another moe_load_balancing, or leave moe_capacity_factor out (dropless)")
    if job.moe_pad_to_capacity and job.moe_capacity_factor is None:
        raise PlannerError(f"{where}moe_pad_to_capacity is set without moe_capacity_factor",
                           "set moe_capacity_factor (the capacity the inputs are padded to), or remove moe_pad_to_capacity")
    return dict(moe_token_drop=job.moe_capacity_factor is not None, moe_pad_to_capacity=bool(job.moe_pad_to_capacity),
                moe_rank_imbalance=float(job.moe_rank_imbalance or 0.0),
                moe_load_balancing=job.moe_load_balancing or default_balancing(model))


def stack_options(stack: Stack, job: Job, where: str = "", *, tp: int = 1, sp: bool = False) -> tuple[dict, list]:
    """The stack options of a job as PlanArrays fields (tpo, compile, dpo, f8r, fge), each from the
    job or, where it leaves it out, from the stack's defaults (listed in the second value as
    (field, value) pairs). A setting the stack cannot run is an error naming the stack. fge: the
    stack's defaults.fp8_grouped_experts, which carries the job's fp8_grouped_experts where it sets
    one (apply_fp8_grouped_experts; _fp8_grouped_experts validates and lists it)."""
    d, ov = stack.defaults, stack.overlap
    inherited: list = []
    name = job.stack

    def pick(field, default):
        v = getattr(job, field)
        if v is None:
            inherited.append((field, default))
            return default
        return v

    compile_ = pick("torch_compile", d.torch_compile)
    if compile_ and stack.compiled_kernels is None:
        raise PlannerError(f"{where}stack {name} has no torch.compile mode", "remove torch_compile / --compile, or choose --stack torchtitan")
    if job.tp_comm_overlap:
        if not ov.tp_comm_overlap_supported:
            raise PlannerError(f"{where}stack {name} does not overlap TP communication", "remove tp_comm_overlap, or choose a stack that has it (planner stacks)")
        tpo = True
    elif job.tp_comm_overlap is None:
        # the stack's default applies where the plan can run it (TP with SP, compile if needed)
        tpo = bool(d.tp_comm_overlap and ov.tp_comm_overlap_supported and tp > 1 and sp
                   and (compile_ or not ov.tp_comm_overlap_needs_compile))
        inherited.append(("tp_comm_overlap", tpo))
    else:
        tpo = False
    dpo = pick("dp_comm_overlap", d.dp_comm_overlap)
    if dpo and not ov.dp_comm_overlap_supported:
        raise PlannerError(f"{where}stack {name} does not overlap DP communication", "set dp_comm_overlap: false")
    recipe = _low_precision_recipe(stack, job, inherited, where)
    code = FP8_RECIPE_CODES[recipe] if recipe is not None else 0
    return dict(tpo=int(tpo), compile=int(compile_), dpo=int(dpo), f8r=code, fge=int(bool(d.fp8_grouped_experts))), inherited


def _bf16_layers(job: Job, model: ModelSpec, stack, where: str) -> tuple:
    """(first, last) transformer layers a low-precision job keeps in bf16 (Megatron-Core
    transformer_config.py first_last_layers_bf16 @d98e8a64: the layers outside are autocast;
    l. 1527-1530: not with fp8 delayed scaling)."""
    n = (job.bf16_layers_at_start, job.bf16_layers_at_end)
    if any(n) and job.precision == "bf16":
        raise PlannerError(f"{where}bf16_layers_at_start/end need precision fp8 or nvfp4 (got bf16)",
                           "remove them, or set precision: fp8 / nvfp4")
    recipe = job.fp8_recipe or (stack.defaults.fp8_recipe if stack is not None else None)
    if any(n) and job.precision == "fp8" and recipe == "delayed" and megatron_checks(stack):
        raise PlannerError(f"{where}bf16_layers_at_start/end with fp8 recipe delayed: Megatron-Core refuses it ('Delayed "
                           "scaling does not support first / last layer in BF16.', transformer_config.py @d98e8a64 "
                           "l. 1527-1530)", "use fp8_recipe tensorwise (or mxfp8, blockwise), or remove the bf16 layers")
    if sum(n) > model.num_layers:
        raise PlannerError(f"{where}bf16_layers_at_start + bf16_layers_at_end = {sum(n)} exceed the {model.num_layers} layers",
                           f"keep at most {model.num_layers} in bf16")
    return n


def _fp8_recipe_of(job: Job, stack: Stack, field: str, where: str):
    """(name, stack_db spec or None) of the fp8 recipe a job's fp8-only field applies to;
    refused without precision fp8."""
    if job.precision != "fp8":
        raise PlannerError(f"{where}{field} needs precision fp8 (got {job.precision})",
                           f"remove {field}, or set precision: fp8")
    recipe = job.fp8_recipe or stack.defaults.fp8_recipe
    return recipe, stack.fp8_recipes.get(recipe)


def _filter_fqns(job: Job, model: ModelSpec, stack: Stack, where: str):
    """The job's filter_fqns (step.py [18]) as a tuple: refused without precision fp8 or on a stack whose recipes
    convert no Linear module by name (Transformer Engine: stack_db fp8_recipes output_layer_convertible none), and
    where its 'output' entry disagrees with fp8_output_layer (the output layer's own field: 'output' named keeps it
    bf16, fp8_output_layer true converts it). None where it converts what the default list converts in every layer
    kind under every recipe (a dense model's ["output"], an MoE's ["output", "router.gate"]: one plan, one spelling)."""
    from .fp8_linears import converted_shares
    from .layers import layer_list
    from .precisions import FP8_RECIPES

    if job.filter_fqns is None:
        return None
    recipe, spec = _fp8_recipe_of(job, stack, "filter_fqns", where)
    if not any(r.output_layer_convertible for r in stack.fp8_recipes.values()):
        raise PlannerError(f"{where}filter_fqns is set but stack {stack.name} converts no Linear by name (Transformer "
                           "Engine runs every TE linear in fp8, the MoE router bf16)",
                           "remove filter_fqns, or choose --stack torchtitan")
    if any(f in "output" for f in job.filter_fqns if f) and job.fp8_output_layer:
        raise PlannerError(f"{where}filter_fqns names the output layer ('output') but fp8_output_layer is true",
                           "drop 'output' from filter_fqns, or fp8_output_layer")
    codes = np.arange(len(FP8_RECIPES))
    kinds = layer_list(model).kinds
    if all({n: v.tolist() for n, v in converted_shares(k.mixer, k.mlp, job.filter_fqns, codes).items()}
           == {n: v.tolist() for n, v in converted_shares(k.mixer, k.mlp, None, codes).items()} for k in kinds):
        return None
    return tuple(job.filter_fqns)


def _fp8_output_layer(job: Job, model: ModelSpec, stack: Stack, where: str) -> bool:
    """Whether a job's output layer runs in fp8 (job field fp8_output_layer): refused without fp8
    or with a recipe the stack keeps it bf16 in (stack_db fp8_recipes output_layer_convertible);
    False where vocab_size or hidden_size is not a multiple of 16, the Linears torchtitan's
    module_filter_fn leaves in bf16 (torchtitan/components/quantization/utils.py @e347b1e5e
    l. 19-22: 'All dims must be divisible by 16 due to float8 tensorcore hardware requirements')."""
    if not job.fp8_output_layer:
        return False
    recipe, spec = _fp8_recipe_of(job, stack, "fp8_output_layer", where)
    if spec is None or not spec.output_layer_convertible:
        raise PlannerError(f"{where}fp8_output_layer is set but stack {stack.name} keeps the output layer in bf16 with "
                           f"recipe {recipe} (stack_db fp8_recipes output_layer_convertible)",
                           "remove fp8_output_layer, or choose --stack torchtitan")
    return model.vocab_size % 16 == 0 and model.hidden_size % 16 == 0


def _fp8_grouped_experts(job: Job, model: ModelSpec, stack: Stack, inherited: list, where: str) -> bool:
    """Whether the routed experts' grouped GEMMs run in the plan's low precision (job field
    fp8_grouped_experts; step.py [16]): the job's, else the stack's rule (stack_db
    defaults.fp8_grouped_experts: torchtitan @e347b1e5e runs GroupedExperts in bf16 unless a
    [quantize.grouped_mm.*] converter names them, models/moe/moe.py l. 113-130; Megatron-Core's
    TEGroupedLinear runs under the layer's fp8 autocast), listed as inherited (assumed) for an
    fp8 / nvfp4 MoE job that does not say. Set on a dense model or a bf16 job: refused (nothing
    to convert)."""
    rule = bool(stack.defaults.fp8_grouped_experts)
    if job.fp8_grouped_experts is None:
        if model.moe is not None and job.precision != "bf16":
            inherited.append(("fp8_grouped_experts", rule))
        return rule
    if model.moe is None:
        raise PlannerError(f"{where}fp8_grouped_experts is set but {model.name} has no routed experts",
                           "remove fp8_grouped_experts (--fp8-grouped-experts)")
    if job.precision == "bf16":
        raise PlannerError(f"{where}fp8_grouped_experts needs precision fp8 or nvfp4 (got bf16)",
                           "remove fp8_grouped_experts (--fp8-grouped-experts), or set precision: fp8")
    return bool(job.fp8_grouped_experts)


def _grouped_experts_named(settings: Settings, fge: int, precision: int) -> bool:
    """Whether plan_dict names the plan's fp8_grouped_experts (export reads it back): on an MoE model,
    where it is not the catalog stack's rule (a job's value that changed it), or where the plan is fp8 /
    nvfp4 on a stack that runs both settings (stack_db runs.fp8_grouped_experts: fit searches it, so
    each row says which it has)."""
    if settings.stack is None or settings.model.moe is None:
        return False
    runs = settings.stack.runs
    if precision != BF16 and runs is not None and len(set(runs.fp8_grouped_experts or ())) > 1:
        return True
    return bool(fge) != bool(load_stack(settings.stack_name).defaults.fp8_grouped_experts)


def _fp8_allgather(job: Job, stack: Stack, where: str) -> Optional[bool]:
    """A job's fp8 FSDP weight all-gather (job field fp8_allgather; step.gather_bytes): None, the
    stack's recipe rule (stack_db fp8_recipes allgather_fp8); true or false only with precision fp8
    and a recipe that can gather fp8 (torchtitan's tensorwise: torchao Float8LinearConfig
    enable_fsdp_float8_all_gather, torchtitan/components/quantization/float8.py @9810191bb~1 l. 62-99,
    asserted off with any recipe_name, rowwise included; mxfp8 has no such option). Not Megatron's
    fp8_param_gather (fp8 parameters under the distributed optimizer, step.py [12])."""
    if job.fp8_allgather is None:
        return None
    recipe, spec = _fp8_recipe_of(job, stack, "fp8_allgather", where)
    if spec is None or not spec.allgather_fp8:
        raise PlannerError(f"{where}fp8_allgather is set but stack {stack.name}'s recipe {recipe} has no fp8 FSDP "
                           "all-gather (stack_db fp8_recipes allgather_fp8; Megatron's fp8 weights are fp8_param_gather)",
                           "remove fp8_allgather, or choose --stack torchtitan with fp8_recipe tensorwise")
    return bool(job.fp8_allgather)


def _fp8_precompute_scale(job: Job, stack: Stack, where: str) -> bool:
    """A job's fp8_precompute_scale (torchtitan [float8] precompute_float8_dynamic_scale_for_fsdp; step.py [39]):
    null false, torchtitan's default (job_config.py @e347b1e5e l. 735); true only with precision fp8, a recipe with
    FSDP's fp8 all-gather and the job's fp8_allgather not false (torchtitan reads it only with the fp8 all-gather,
    components/quantization/float8.py @e347b1e5e l. 95-99); false is always accepted (torchtitan's default)."""
    if not job.fp8_precompute_scale:
        return False
    recipe, spec = _fp8_recipe_of(job, stack, "fp8_precompute_scale", where)
    if spec is None or not spec.allgather_fp8 or job.fp8_allgather is False:
        raise PlannerError(f"{where}fp8_precompute_scale is true but the plan runs no fp8 FSDP all-gather (stack "
                           f"{stack.name}, recipe {recipe}, fp8_allgather {job.fp8_allgather}): torchtitan reads it only "
                           "with enable_fsdp_float8_all_gather (float8.py @e347b1e5e l. 95-99)",
                           "remove fp8_precompute_scale, or choose --stack torchtitan with fp8_recipe tensorwise and "
                           "fp8_allgather true")
    return True


def _dp_param_gather_overlap(job: Job, stack: Stack, where: str) -> Optional[bool]:
    """A job's dp_param_gather_overlap (Megatron --overlap-param-gather; step.py [5], step.ddp_traffic): None where the
    job leaves it out (tied to the plan's DP overlap as it runs: the stack's default rule before the field existed);
    true refused where the DP overlap is off, as Megatron asserts ('Must use --overlap-param-gather with
    --overlap-grad-reduce', megatron/training/arguments.py @d98e8a64 l. 1024-1029): on the megatron set by the start-up
    rule MEGATRON_PARAM_GATHER (code 108, per plan: its DP overlap and sharding mode, laid on the stack by
    apply_startup_switches), elsewhere here on the job's dp_comm_overlap, else the stack's defaults.dp_comm_overlap;
    false always accepted (the all-gather after the step, exposed). On a stack whose
    ZeRO-1/2 gathers synchronously after the step (overlap.dp_param_gather_overlap_supported false: DeepSpeed,
    step.py [40]) true is refused, and false is that stack's own behaviour: accepted and held as the stack's (None,
    priced exposed by step.ddp_traffic all the same; nothing for plan_dict to show or an export to refuse)."""
    if job.dp_param_gather_overlap is None:
        return None
    if not stack.overlap.dp_param_gather_overlap_supported:
        if job.dp_param_gather_overlap:
            raise PlannerError(f"{where}dp_param_gather_overlap is true but stack {stack.name} gathers the ZeRO-1/2 "
                               "parameters synchronously after the optimizer step whatever overlap_comm says "
                               "(DeepSpeed's overlap_comm overlaps only the gradient reduction: microsoft/DeepSpeed "
                               "@38327e07 deepspeed/runtime/zero/stage_1_and_2.py step l. 1927-1935, all_gather_dp_groups; "
                               "stack_db overlap.dp_param_gather_overlap_supported false, planner/step.py [40])",
                               "remove dp_param_gather_overlap (the stack prices the all-gather exposed), or plan on a "
                               "Megatron stack (--overlap-param-gather)")
        return None
    dpo = job.dp_comm_overlap if job.dp_comm_overlap is not None else stack.defaults.dp_comm_overlap
    # on the megatron set the start-up rule MEGATRON_PARAM_GATHER (code 108) refuses it per plan, with the sharding
    # mode Megatron's assert names too; elsewhere the job's DP overlap is checked here
    if job.dp_param_gather_overlap and not dpo and not _param_gather_rule_applies(stack):
        raise PlannerError(f"{where}dp_param_gather_overlap is true but dp_comm_overlap is off (stack {stack.name}): "
                           "the parameter all-gather overlaps only beside the overlapped gradient reduction (Megatron "
                           "asserts --overlap-param-gather with --overlap-grad-reduce, arguments.py @d98e8a64 l. 1024-1029)",
                           "set dp_comm_overlap: true, or remove dp_param_gather_overlap")
    return bool(job.dp_param_gather_overlap)


def _param_gather_rule_applies(stack) -> bool:
    """Whether the stack's start-up set holds MEGATRON_PARAM_GATHER (startup.rules_for: the megatron set)."""
    from .startup import rules_for

    return any(r.key == "MEGATRON_PARAM_GATHER" for _, r in rules_for(stack))


def fp8_attention_runs(spec, hw) -> bool:
    """Whether a recipe (stack_db FP8Recipe, or None) has an fp8 attention path on this GPU
    (fp8_attention's min_compute_capability; _fp8_attention)."""
    fa = spec.fp8_attention if spec is not None else None
    need = tuple(int(x) for x in fa.min_compute_capability.split(".")) if fa is not None else None
    return need is not None and hw is not None and hw.capability is not None and hw.capability >= need


def _fp8_attention(job: Job, stack: Stack, hw: Hardware, where: str) -> bool:
    """Whether a job's fused attention runs in fp8 (job field fp8_attention; Megatron-Core
    TransformerConfig.fp8_dot_product_attention, Transformer Engine's recipe fp8_dpa): refused
    without precision fp8, with a recipe the stack has no fp8 attention for (stack_db fp8_recipes
    fp8_attention: Megatron's blockwise recipe does not take fp8_dpa, fp8_utils.py @d98e8a64
    l. 781-784; torchtitan has none), without the fused kernel (attention eager, Megatron's local
    core attention) and on a GPU below the recipe's min_compute_capability (TE @4329ff84
    dot_product_attention/utils.py get_attention_backend l. 565-638: FP8 training runs only
    cuDNN's FusedAttention; current scaling and MXFP8 from sm100)."""
    if not job.fp8_attention:
        return False
    recipe, spec = _fp8_recipe_of(job, stack, "fp8_attention", where)
    fa = spec.fp8_attention if spec is not None else None
    if fa is None:
        raise PlannerError(f"{where}fp8_attention is set but stack {stack.name} has no fp8 attention with recipe {recipe} "
                           "(stack_db fp8_recipes fp8_attention)",
                           "remove fp8_attention" + (", or choose --stack megatron" if stack.name != "megatron" else
                                                     ", or set fp8_recipe delayed (Hopper) / tensorwise, mxfp8 (Blackwell)"))
    if job.attention == "eager" or job.local_core_attention or job.transformer_impl == "local":
        raise PlannerError(f"{where}fp8_attention needs Transformer Engine's fused attention (got attention "
                           f"{job.attention}{', local core attention' if job.local_core_attention or job.transformer_impl == 'local' else ''})",
                           "remove fp8_attention, or use the fused attention (attention: flash, transformer_impl "
                           "transformer_engine)")
    if not fp8_attention_runs(spec, hw):
        got = hw.compute_capability or "not given"
        raise PlannerError(f"{where}fp8_attention with recipe {recipe} needs compute capability {fa.min_compute_capability} "
                           f"or newer (hardware {hw.name}: {got}; TE's fused attention has no fp8 path below it)",
                           "remove fp8_attention" + (", or set fp8_recipe delayed" if recipe != "delayed" else ""))
    return True


def _low_precision_recipe(stack: Stack, job: Job, inherited: list, where: str) -> Optional[str]:
    """The fp8 / nvfp4 recipe of a job: its own, else the stack's default of that precision
    (fp8: defaults.fp8_recipe; nvfp4: the stack's nvfp4 recipe). Errors name the valid ones."""
    name, recipe = stack.name, job.fp8_recipe
    if job.precision == "bf16":
        if recipe is not None:
            raise PlannerError(f"{where}fp8_recipe {recipe!r} needs precision fp8 or nvfp4 (got bf16)",
                               "set precision: fp8 (--precision fp8), or remove fp8_recipe")
        return None
    mine = [r for r in stack.fp8_recipes if r in RECIPE_PEAK and recipe_precision(r) == job.precision]
    if recipe is None:
        recipe = stack.defaults.fp8_recipe if job.precision == "fp8" else (mine[0] if mine else None)
        if recipe is None:
            raise PlannerError(f"{where}stack {name} has no {job.precision} training recipe",
                               f"use --precision bf16, or a stack with {job.precision} recipes (planner stacks)")
        inherited.append(("fp8_recipe", recipe))
    if recipe not in mine:
        raise PlannerError(f"{where}fp8_recipe {recipe!r} is not a {job.precision} recipe of stack {name}",
                           f"valid: {', '.join(mine) or 'none'}")
    return recipe


def default_micro_batch(stack: Stack, gbs: int, dp: int, pp: int, where: str = "") -> int:
    """The micro-batch a job inherits from its stack when it gives none: 1 (Megatron's
    --micro-batch-size 1), or the local batch split into pp micro-batches (torchtitan: one
    micro-batch per pipeline stage unless pipeline_parallel_microbatch_size is set; with pp = 1
    the whole local batch is one micro-batch)."""
    if stack.defaults.microbatches_per_step == "from_micro_batch":
        return 1
    if gbs % (dp * pp):
        raise PlannerError(f"{where}stack {stack.name} splits the local batch ({gbs} / dp {dp}) into pp={pp} micro-batches, "
                           "which does not divide", "give micro_batch (--micro-batch) explicitly")
    return gbs // (dp * pp)


def fp8_dispatch(settings, plan) -> np.ndarray:
    """Whether each plan's forward dispatch moves fp8 tokens: the job's moe_fp8_dispatch where it
    gives one, else the fp8_dispatch of the stack's recipe the plan runs, under fp8 (stack_db
    fp8_recipes: the deepseek stack's blockwise, arXiv:2412.19437 sec. 3.3.3); planner/dispatch.py
    prices the bytes."""
    if settings.moe_fp8_dispatch is not None:
        return np.asarray(bool(settings.moe_fp8_dispatch))
    recipes = settings.stack.fp8_recipes
    table = np.array([bool(recipes[n].fp8_dispatch) if n in recipes else False for n in FP8_RECIPES])
    return (np.asarray(plan.precision) == FP8) & table[np.asarray(plan.f8r, dtype=np.int64)]


# the assumed line of a job that leaves dp_param_gather_overlap out, where the tie acts (param_gather_assumed)
PARAM_GATHER_TIED = ("dp_param_gather_overlap=true: left out, so it follows dp_comm_overlap (on as the plan runs), "
                     "the parameter all-gather after the step priced behind the next forward (step.py [40]); "
                     "Megatron's --overlap-param-gather is a flag of its own, off by default (arguments.py @d98e8a64 "
                     "l. 3148-3149): give false for a run without it")


def param_gather_assumed(settings: Settings, plan: PlanArrays, i=None) -> list[str]:
    """The assumed line of the job's dp_param_gather_overlap left out (PARAM_GATHER_TIED; _dp_param_gather_overlap
    holds it None, the documented rule tying it to the plan's DP overlap as it runs, step.ddp_traffic [40]), listed
    where the tie acts: at zero1 / zero2 under the DP overlap as it runs, on a stack whose ZeRO-1/2 gather can
    overlap (overlap.dp_param_gather_overlap_supported; elsewhere the stack's gather is exposed whatever the job says,
    and with the DP overlap off, or at another level, nothing hides it either way); [] elsewhere. plan_dict's
    dp_param_gather_overlap false is the job's other value, shown there; true is the job's own (no line).
    i indexes a 1-d PlanArrays (explain.to_json's rows)."""
    if settings.dp_param_gather_overlap is not None or not settings.stack.overlap.dp_param_gather_overlap_supported:
        return []
    return [PARAM_GATHER_TIED] if param_gather_acts(settings, plan, i) else []


def param_gather_acts(settings: Settings, plan: PlanArrays, i=None) -> bool:
    """Whether a plan's dp_param_gather_overlap acts on it (step.ddp_traffic [40]): the zero1 / zero2 levels under the
    DP overlap as it runs (param_gather_assumed's line, plan_dict's field). i indexes a 1-d PlanArrays."""
    def at(v):  # this plan's element of an array field
        return v if i is None else np.asarray(v)[i]

    return int(at(plan.sharding)) in (ZERO1, ZERO2) and bool(int(at(dp_overlap(settings.stack, plan))))


def plan_dict(plan: PlanArrays, settings: Settings, i=None) -> dict:
    """Every resolved setting of one plan, for JSON (i indexes a 1-d PlanArrays)."""
    def at(v):  # this plan's element of an array field
        return v if i is None else v[i]

    def g(name):
        return int(at(getattr(plan, name)))

    fixed = mode_settings(settings, g("smode"))
    return {
        "model": settings.model.name,
        "hardware": settings.hardware.name,
        "gpus": settings.gpus,
        "tp": g("tp"), "cp": g("cp"), "pp": g("pp"), "vpp": g("vpp"), "dp": g("dp"),
        "micro_batch": g("mbs"),
        "global_batch": g("gbs"),
        "global_batch_tokens": g("gbs") * g("seq"),
        # the job's batch ramp (Job.batch_size_schedule), where it gives one: the plan is its last batch
        **({"batch_size_schedule": [{"from_tokens": t, "global_batch": b} for t, b in settings.batch_schedule]}
           if settings.batch_schedule else {}),
        "microbatches_per_step": g("gbs") // (g("dp") * g("mbs")),
        "seq_len": g("seq"),
        "sharding": SHARDING_NAMES[g("sharding")],
        # the stack's mode that runs it (stack_db runs.sharding); None for a stack that lists none
        "sharding_mode": _mode_name(settings, g("smode")),
        # the mode in the stack's own words, where its stack_db entry gives them (runs.sharding label)
        **({"sharding_label": lbl} if (lbl := _mode_label(settings, g("smode"))) else {}),
        "shard_group": g("shard") if g("sharding") == HSDP or g("shard") != g("dp") else None,
        "recompute": RECOMPUTE_NAMES[g("recompute")],
        "sequence_parallel": bool(g("sp")),
        "schedule": SCHEDULE_NAMES[g("schedule")],
        # the job's micro-batch group (Megatron --microbatch-group-size-per-virtual-pipeline-stage), where it gives one
        **({"microbatch_group": g("mbg")} if g("mbg") > 0 else {}),
        "precision": {v: k for k, v in PRECISION_CODES.items()}[g("precision")],
        "rank_order": ORDER_NAMES[g("order")],
        "bytes_per_param": settings.bpp_name if settings.bpp_name != "custom" else settings.bpp.model_dump(),
        "mtp_layers": settings.model.mtp_layers,
        "activation_model": settings.activation_model,
        "attention": settings.attention,
        # the attention kernel priced (compute.attention_kernel: the job's, else the stack's for the GPU)
        "attention_kernel": _attention_kernel(settings),
        # the attention module the job names (Job.attention_backend, read by the start-up rules), where it is not the
        # stack's default (a file that names the default reads back as the plan that leaves it out)
        **({"attention_backend": settings.attention_backend} if settings.attention_backend is not None else {}),
        "causal_attention_flops": settings.causal_attention_flops,
        "headroom": settings.headroom,
        "reserve_GiB": settings.reserve_bytes / 2**30,
        "tokens": settings.tokens,
        "recompute_layers": settings.recompute_layers,
        "stack": settings.stack_name,
        "tp_comm_overlap": bool(g("tpo")),  # as asked (the export writes it); as it runs where that differs:
        **({"tp_comm_overlap_runs": False} if g("tpo") and not at(tp_overlap(settings, plan)) else {}),  # (MLA)
        "dp_comm_overlap": bool(at(dp_overlap(settings.stack, plan))),  # as it runs: off under PP where the stack says
        "torch_compile": bool(g("compile")),
        "fp8_recipe": FP8_RECIPES[g("f8r")] if g("precision") != BF16 else None,
        **({"bf16_layers_at_start": settings.bf16_layers[0], "bf16_layers_at_end": settings.bf16_layers[1]}
           if any(settings.bf16_layers) else {}),
        **({"fp8_output_layer": True} if settings.fp8_output_layer else {}),
        **({"filter_fqns": list(settings.filter_fqns)} if settings.filter_fqns is not None else {}),
        **({"fp8_allgather": settings.fp8_allgather} if settings.fp8_allgather is not None else {}),
        **({"fp8_precompute_scale": True} if settings.fp8_precompute_scale else {}),
        # the optimizer's all-gather exposed after the step (step.py [40]): shown where it acts, the zero1 / zero2
        # levels under the DP overlap as it runs (elsewhere it prices and exports as the tied default)
        **({"dp_param_gather_overlap": False} if settings.dp_param_gather_overlap is False
           and param_gather_acts(settings, plan, i) else {}),
        **({"fp8_grouped_experts": bool(g("fge"))} if _grouped_experts_named(settings, g("fge"), g("precision")) else {}),
        **({"fp8_attention": True} if settings.fp8_attention else {}),
        **split_fields(g("split_emb"), g("split_loss")),
        **{k: g(f) for k, f in (("first_stage_layers", "split_first"), ("last_stage_layers", "split_last")) if g(f) > 0},
        "ep": g("ep"),
        "etp": g("etp") or g("tp"),
        **_moe_plan_fields(plan, settings, at),
        **_job_switch_fields(settings, fixed, g("cp"), g("tp")),
        # the job's outer-DP optimizer sharding, on the plans it acts on: the HSDP ones (memory.py [oo])
        **({"mfsdp_outer_optim": True} if settings.mfsdp_outer_optim and g("sharding") == HSDP else {}),
        "power_limit_w": settings.power_limit_w,
        "power_limit_source": settings.power_limit_source,
        "tensor_rate_fraction": power_rate_fraction(settings.hardware),
        "calibration": None if settings.calibration_path is None else str(Path(settings.calibration_path).resolve()),
        # what was read, so that `explain --from-fit` uses the same files (not a catalog entry
        # of the same name) and can tell when one changed since
        "model_file": settings.model_file,
        "model_sha256": settings.model_sha256,
        "hardware_file": settings.hardware_file,
        "hardware_sha256": settings.hardware_sha256,
    }


def _moe_plan_fields(plan: PlanArrays, settings: Settings, at) -> dict:
    """plan_dict's MoE settings of one plan (at: its element of an array field); {} for a dense model."""
    if settings.model.moe is None:
        return {}
    return {
        "moe_capacity_factor": settings.moe_capacity_factor if settings.moe_token_drop else None,  # None: dropless
        "moe_pad_to_capacity": settings.moe_pad_to_capacity if settings.moe_token_drop else None,
        # DeepSpeed-MoE's capacity floor, where the stack gates densely (stack moe_gating, layers/moe.py [18])
        **({"moe_min_capacity": settings.moe_min_capacity} if settings.stack is not None and settings.stack.moe_gating is not None else {}),
        "moe_dispatcher": settings.moe_dispatcher,
        # the busiest EP rank's routed tokens / mean this plan is priced at (planner/imbalance.py)
        "moe_rank_load": float(at(np.broadcast_to(rank_load(settings, plan), np.shape(plan.tp)))),
        "moe_rank_imbalance": settings.moe_rank_imbalance or None,  # the job's measured one (None: the rule)
        "moe_load_balancing": settings.moe_load_balancing,
        "moe_aux_loss_coeff": settings.moe_aux_loss_coeff, "moe_z_loss_coeff": settings.moe_z_loss_coeff or None,
        "moe_router_pre_softmax": settings.moe_router_pre_softmax,
        "moe_router_dtype": settings.moe_router_dtype,
        "moe_fp8_dispatch": bool(at(np.broadcast_to(fp8_dispatch(settings, plan), np.shape(plan.tp)))),
        "moe_route_nodes": settings.moe_route_nodes or None,
        # HybridEP's capacity factor where the plan runs hybridep on a stack that has a non-blocking dispatch
        # (layers/moe.py [19]; 0.0: the blocking dispatch), so the row names which one it priced
        **({"moe_hybridep_capacity_factor": settings.moe_hybridep_capacity_factor}
           if settings.moe_dispatcher == "hybridep" and settings.stack is not None and settings.stack.runs is not None
           and settings.stack.runs.hybridep_non_blocking else {}),
        # on where the plan allows it (the search applies a job's overlap only there)
        "ep_comm_overlap": bool(settings.ep_comm_overlap and at(ep_overlap_applies(plan))),
        # the job's --moe-shared-expert-overlap, where on (step.py [38]; export writes it back)
        **({"moe_shared_expert_overlap": True} if settings.moe_shared_expert_overlap and settings.stack is not None
           and settings.moe_dispatcher in (settings.stack.moe_shared_expert_overlap_dispatchers or ()) else {}),
    }


def _job_switch_fields(settings: Settings, fixed: dict, cp: int, tp: int) -> dict:
    """plan_dict's job switches, each only where the job (or the plan's sharding mode, fixed: mode_settings)
    sets it away from the stack's default, in the order the JSON has always listed them."""
    return {
        **({"defer_embedding_wgrad": settings.defer_embedding_wgrad} if settings.defer_embedding_wgrad is not None else {}),
        **({"padded_vocab_size": settings.padded_vocab_size} if settings.padded_vocab_size is not None else {}),
        **({"make_vocab_size_divisible_by": settings.make_vocab_size_divisible_by}
           if settings.make_vocab_size_divisible_by is not None else {}),
        # the rows the stack's padding builds at the plan's tp (stack_db vocab_padding), where they are not the model's own
        **({"vocab_rows": settings.model.vocab_size}
           if settings.vocab_divisor is not None and settings.padded_vocab_size is None
           and settings.model.vocab_size != settings.vocab_tokens else {}),
        **({"cross_entropy_fusion": True} if settings.cross_entropy_fusion else {}),
        **({"cross_entropy_fusion_impl": "te"} if settings.cross_entropy_fusion_impl == "te" else {}),
        **({"cuda_graph_impl": settings.cuda_graph_impl, "cuda_graph_scope": list(settings.cuda_graph_scope)}
           if settings.cuda_graph_impl != "none" else {}),
        # as the plan's sharding mode runs them (stack_db runs.sharding job_settings: Megatron's --use-torch-fsdp2
        # turns --fp8-param-gather off and needs --no-gradient-accumulation-fusion)
        **({"fp8_param_gather": True} if settings.fp8_param_gather and fixed.get("fp8_param_gather") is not False else {}),
        **({"fp4_param_gather": True} if settings.fp4_param_gather else {}),
        **({"transformer_impl": "local"} if settings.transformer_impl == "local" else {}),
        **({"moe_grouped_gemm": True} if settings.moe_grouped_gemm else {}),
        **({f: getattr(settings, f) for f in MOE_FUSIONS}
           if settings.model.moe is not None and getattr(settings, "stack", None) is not None
           and settings.stack.defaults.moe_permute_fusion is not None else {}),
        **({"moe_router_padding": True} if settings.moe_router_padding else {}),
        **({"enable_experimental": True} if settings.enable_experimental else {}),
        **({"attention_softmax_in_fp32": False} if not settings.attention_softmax_in_fp32 else {}),
        **({"local_core_attention": True} if settings.local_core_attention else {}),
        # as the plan's sharding mode runs it (stack_db runs.sharding job_settings: DeepSpeed's zero0 is fp16's
        # FP16_Optimizer, planned only for a job that says fp16, unset default; priced as bf16 either way)
        **({"fp16": True} if fixed.get("fp16", settings.fp16) else {}),
        # DeepSpeed's partitioned pipe tensors, where the job turns the stack's default off (step.py [25])
        **({"pipe_partitioned": False} if not settings.pipe_partitioned and settings.stack is not None
           and settings.stack.pipeline_send_partitioned_default else {}),
        # the fusion switches a job turned off (the stack's fused kernels are the default)
        **{name: False for name in FUSION_SWITCHES if not getattr(settings, name) or fixed.get(name) is False},
        **({"chunked_loss": True} if settings.chunked_loss else {}),
        **({"selective_recomputes_attention": True} if settings.selective_recomputes_attention else {}),
        **({"spmd_backend": settings.spmd_backend} if settings.spmd_backend is not None else {}),
        **({"fsdp_symm_mem": True} if settings.fsdp_symm_mem else {}),
        # CP on contiguous chunks (step.cp_balance_factor); none at cp 1, where nothing is split
        **({"cp_load_balance": False} if not settings.cp_load_balance and cp > 1 else {}),
        # the CP load balancer named (startup.TORCHTITAN_CP_PTRR_MASK); none at cp 1, where nothing is split
        **({"cp_load_balancer": settings.cp_load_balancer} if settings.cp_load_balancer is not None and cp > 1 else {}),
        **({"spmd_typechecking": True} if settings.spmd_typechecking else {}),
        # DeepSpeed's partitioned checkpoint inputs; none at tp 1, where nothing is split: DeepSpeed @38327e07
        # activation_checkpointing/checkpointing.py l. 258-262 (a 1/mp_size partition, the whole input at mp_size 1)
        # and l. 280-286 (no all-gather where mp_size == 1), and the reader leaves the flag out at tp 1
        # (trainers/megatron_deepspeed.py: 'tensor-parallel size 1: nothing to split'), so an exported row reads back
        **({"partition_activations": True} if settings.partition_activations and tp > 1 else {}),
        **({"sync_tp_duplicated_parameters": True} if settings.sync_tp_duplicated_parameters else {}),
        **({"recompute_modules": list(settings.recompute_modules)} if settings.recompute_modules else {}),
        **({"rope_cache": settings.rope_cache} if settings.rope_cache is not None else {}),
        **({"fsdp_root_unit": True} if settings.fsdp_root_unit else {}),
        **({"loss_logit_chunks": settings.loss_logit_chunks} if settings.loss_logit_chunks is not None else {}),
        # only the DeepSpeed ZeRO-3 settings the job changed from the stack's (memory.py [z3])
        **({"deepspeed_zero3": z3} if (z3 := exported_zero3(settings)) else {}),
        **({"cublas_workspace_config": settings.cublas_workspace_config}
           if settings.cublas_workspace_config is not None else {}),
        **({"deterministic_mode": True} if settings.deterministic_mode else {}),
        **({"use_flash_attn": True} if settings.use_flash_attn else {}),
        **({"attention_kernel_named": True} if settings.attention_kernel_named else {}),
        **({"nccl_algo": settings.nccl_algo} if settings.nccl_algo is not None else {}),
        **({"nccl_proto": settings.nccl_proto} if settings.nccl_proto is not None else {}),
        **({"nccl_nvls_enable": settings.nccl_nvls_enable} if settings.nccl_nvls_enable is not None else {}),
        **({"dummy_wgrads": settings.dummy_wgrads} if settings.dummy_wgrads is not None else {}),
        **({"te_version": settings.te_version} if settings.te_version is not None else {}),
        **({"trainer_date": settings.trainer_date} if settings.trainer_date is not None else {}),
        **({"empty_unused_memory_level": settings.empty_unused_memory_level} if settings.empty_unused_memory_level else {}),
        **({"mfsdp_double_buffer": True} if settings.mfsdp_double_buffer else {}),
        **({"mfsdp_v2": True} if settings.mfsdp_v2 else {}),
        **({"mla_down_proj_fusion": True} if settings.mla_down_proj_fusion else {}),
        **({"early_step_in_backward": True} if settings.early_step_in_backward else {}),
        **({"offload_optimizer": settings.offload_optimizer} if settings.offload_optimizer != "none" else {}),
        **({"offload_param": settings.offload_param} if settings.offload_param != "none" else {}),
        **({"offload_fraction": settings.offload_fraction} if settings.offload_fraction != 1.0 else {}),
        **({"offload_overlap": True} if settings.offload_overlap else {}),
        # the precision-aware optimizer where the bytes do not imply it (Adam's moments in fp32)
        **({"precision_aware_optimizer": True} if settings.precision_aware and settings.bpp.optimizer >= 8.0 else {}),
        # the job's host (_apply_host: in settings.hardware), only where the job gave it
        **{f: getattr(settings.hardware, h) for f, h in HOST_FIELDS if f in settings.host_fields},
        **({"optimizer": settings.optimizer} if settings.optimizer != "adam" else {}),
        **({"optimizer_whole_tensors": True} if settings.optimizer_whole_tensors else {}),
        **({"muon_ns_steps": settings.muon_ns_steps} if settings.muon_ns_steps != 5 else {}),
        **({"muon_split_qkv": False} if not settings.muon_split_qkv else {}),
        **({"muon_fp32_matmul_prec": settings.muon_fp32_matmul_prec} if settings.muon_fp32_matmul_prec != "medium" else {}),
        # Muon's TP mode only where it is not the stack's default
        **({"muon_tp_mode": settings.muon_tp_mode}
           if settings.optimizer == "muon" and settings.muon_tp_mode != muon_tp_default(settings.stack) else {}),
        # only where it is not the stack's default (the resolved plan of a fused run is unchanged)
        **({"optimizer_implementation": settings.optimizer_implementation}
           if settings.optimizer_implementation != (settings.stack.memory.optimizer_default if settings.stack else None) else {}),
        # only where the job's changed the catalog stack's (planner/cp_rotate.py)
        # (none at cp 1, where no ring runs: the plan without it)
        **({"cp_rotate_method": rotate} if (rotate := exported_rotate_method(settings, cp)) is not None else {}),
        # only where the job's changed the stack's default (planner/cp_comm_type.py); none at cp 1, where
        # Megatron-Core runs no variant (the plan without it, as its readers read such a file back)
        **({"cp_comm_type": cct} if (cct := exported_cp_comm_type(settings, cp)) is not None else {}),
        **({"hierarchical_cp_sizes": hs} if (hs := exported_hierarchical_sizes(settings, cp)) is not None else {}),
        # only where the job turned the stack's p2p overlap off (apply_pp_p2p_overlap)
        **({"pp_p2p_overlap": False} if exported_pp_p2p_overlap(settings) is False else {}),
        **({"pp_p2p_overlap_warmup_flush": True} if exported_pp_p2p_warmup_flush(settings) else {}),
    }


def mode_settings(settings: Settings, smode: int) -> dict:
    """{job setting: the value the plan's sharding mode runs it at} (stack_db runs.sharding
    job_settings); empty for a mode that fixes none, or a stack that lists no modes."""
    m = runs_mode(settings.stack, smode)
    return {} if m is None else {x.setting: x.value for x in m.job_settings}


def mode_dp_overlap(stack, mode) -> Optional[bool]:
    """The DP overlap a job that leaves dp_comm_overlap out runs under the stack's sharding mode `mode` (its index in
    runs.sharding, or its name): the mode's dp_comm_overlap (stack_db runs.sharding; DeepSpeed's ZeRO-3 overlap_comm
    default true), else None (the stack's defaults.dp_comm_overlap)."""
    runs = stack.runs if stack is not None else None
    if runs is None:
        return None
    if isinstance(mode, str):
        found = [m for m in runs.sharding if m.name == mode]
        return found[0].dp_comm_overlap if found else None
    m = runs_mode(stack, mode)
    return m.dp_comm_overlap if m is not None else None


def runs_mode(stack, smode: int):
    """The stack's sharding mode of index smode (stack_db runs.sharding), None where there is none (mode_at's rule, for
    one plan)."""
    runs = stack.runs if stack is not None else None
    return runs.sharding[smode] if runs is not None and 0 <= smode < len(runs.sharding) else None


def _mode_label(settings: Settings, smode: int):
    """The plan's sharding mode in its stack's own words (stack_db runs.sharding label), None where it gives none."""
    m = runs_mode(settings.stack, smode)
    return m.label if m is not None else None


def _mode_name(settings: Settings, smode: int):
    m = runs_mode(settings.stack, smode)
    return m.name if m is not None else None


def file_sha256(path: str | None) -> str | None:
    """sha256 of a file's bytes (None for no file; held within files.held_lookups)."""
    if path is None:
        return None
    from .files import held

    return held(("sha256", path), lambda: _sha256(path))


def _sha256(path: str) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


__all__ = [n for n in dir() if not n.startswith("_")] + ["asdict"]


def _attention_kernel(settings: Settings) -> str:
    """The attention kernel a plan is priced with (compute.attention_kernel, Stack.attention_kernel_for)."""
    stack = settings.stack or load_stack("megatron")  # stacks.stack_of's default (stacks imports plan)
    return stack.attention_kernel_for(settings.hardware.capability, settings.attention_kernel)
