"""The trainers' own start-up checks that touch a plan, cited at a commit, vectorized like
plan.rule_codes: each rule says where a candidate breaks it (a boolean array over 0-d or 1-d
PlanArrays), so `fit` masks them (a plan the trainer would refuse is never ranked), `resolve`
refuses a job that breaks one (exit 2, naming the rule and its source) and `export` refuses
to write one.

A stack names its rule set (stack_db `runs.startup_rules`); the rules of the other sets do
not apply to it. Rules that every stack shares (divisibility, the interleaved schedule's
micro-batches, TP overlap needing SP, async TP needing compile) are plan.rule_codes' own.
What a stack can run at all (its sharding modes, schedules, rank orders, largest degrees) is
its `runs` entry, checked in plan.rule_codes before these.

Megatron-LM @d98e8a64 (NVIDIA/Megatron-LM, 2026-08-22) [M]:
  MEGATRON_TORCH_FSDP2      megatron/training/arguments.py validate_args: --use-torch-fsdp2
                            asserts pipeline_model_parallel_size == 1 and
                            expert_model_parallel_size == 1
  MEGATRON_TP_PP_DP_MAPPING megatron/core/parallel_state.py initialize_model_parallel: with
                            --use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp, not pp-last) and pp > 1
                            the expert data-parallel size world/(etp ep pp) must equal the
                            data-parallel size world/(tp cp pp), i.e. etp x ep == tp x cp
                            (a dense model: ep = 1, etp = tp, so CP must be 1)
  MEGATRON_CP_SEQ           arguments.py validate_args: seq_length % (2 x context_parallel_size)
                            == 0 when cp > 1 (load-balanced causal chunks)
  MEGATRON_PP_SPLIT         transformer_config.py __post_init__ (uneven PP, account_for_*): the
                            planner's uneven split lightens the first and the last model chunk
                            (pipeline.stage_layers), which is Megatron's placement with the
                            embedding / loss counted as a layer (--account-for-*: (layers +
                            counted) % (pp vpp) == 0) when each end is at most one layer lighter
                            (end_weights <= 1), or, with one chunk per rank, --decoder-first/last-
                            pipeline-num-layers when the middle stages hold equal layers
torchtitan @e347b1e5e (pytorch/torchtitan, 2026-02-15, the last TOML-configured commit) [T]:
  TORCHTITAN_SEQ_DIVISOR    models/llama3/infra/parallelize.py parallelize_llama asserts
                            seq_len % parallel_dims.seq_len_divisor == 0, seq_len_divisor =
                            tp x 2 cp (distributed/parallel_dims.py)
  TORCHTITAN_DDP_1D         parallelize.py: 'DDP has not supported > 1D parallelism' (pure DDP
                            only without TP, CP or PP)
  TORCHTITAN_SP             parallelize.py apply_tp: TP always shards the norms' sequence
                            dimension (SequenceParallel): a TP plan without SP is not what runs
  TORCHTITAN_ETP            distributed/parallel_dims.py: with ep > 1, 'Currently we only support
                            ETP=TP or ETP=1'
  TORCHTITAN_PP_SPLIT       distributed/pipeline_parallel.py: stages = ceil((layers + first +
                            last stage weights) / pipeline_parallel_layers_per_stage), and
                            generate_llm_fqn_per_model_part gives the remainder layers to the
                            first stages; the planner's split is torchtitan's when the end
                            weights (pipeline_parallel_first/last_stage_less_layers, default 1
                            each) make it even; the planner writes and reads weights 0 and 1
                            (account_for_* off / on), so an end lighter by more is refused
DeepSpeed @38327e07 (microsoft/DeepSpeed, 2025-02-21) [D]:
  DEEPSPEED_PP_ZERO         deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: 'ZeRO-2 and
                            ZeRO-3 are incompatible with pipeline parallelism'
  (the batch identity train_batch_size == micro x accumulation x dp, runtime/config.py
  _batch_assertion, is plan.rule_codes' BATCH rule)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

MEGATRON_COMMIT = "NVIDIA/Megatron-LM @d98e8a64"
TORCHTITAN_COMMIT = "pytorch/torchtitan @e347b1e5e"
DEEPSPEED_COMMIT = "microsoft/DeepSpeed @38327e07"

# plan.rule_codes numbers these rules from FIRST_CODE on, in RULES order
FIRST_CODE = 24


@dataclass(frozen=True)
class StartupRule:
    key: str
    trainer: str  # stack_db runs.startup_rules
    text: str  # what breaks it (fit's table of reasons)
    source: str  # file and commit
    hint: str
    broken: Callable  # (model, stack, plan) -> bool array


def mode_is(stack, plan, *names) -> np.ndarray:
    """Where the plan's sharding mode (PlanArrays.smode, an index into stack.runs.sharding) is
    one of `names`."""
    idx = [i for i, m in enumerate(stack.runs.sharding) if m.name in names] if stack.runs is not None else []
    return np.isin(np.asarray(plan.smode), np.asarray(idx, dtype=np.int64))


def level_of(plan) -> np.ndarray:
    return np.asarray(plan.sharding)


def etp_of(plan) -> np.ndarray:
    """The expert tensor-parallel degree (PlanArrays.etp; 0 = tp)."""
    etp = np.asarray(plan.etp)
    return np.where(etp > 0, etp, np.asarray(plan.tp))


def uses_tp_pp_dp_mapping(plan) -> np.ndarray:
    """Where the plan's rank order needs Megatron's --use-tp-pp-dp-mapping: it places pp inside
    dp (tp-cp-pp-dp) and is not the default order tp-cp-dp-pp up to size-1 axes."""
    from ..comm import order_code, strides_by_code

    default = order_code("tp-cp-dp-pp")
    st = strides_by_code(np.asarray(plan.order), tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    sd = strides_by_code(np.full(np.shape(plan.tp), default), tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    same = np.ones(np.shape(plan.tp), dtype=bool)
    for ax in ("tp", "cp", "pp", "dp"):
        size = np.asarray(getattr(plan, ax))
        same &= (size <= 1) | (st[ax] == sd[ax])
    return ~same


def end_weights(num_layers: int, plan):
    """(first, last) end weights that make the planner's pipeline split an even one: the
    embedding (loss) counted as a layer where the plan counts it (account_for_*), plus the
    layers the split leaves over, taken off the first stage first (pipeline.stage_layers:
    first = mid - e - ceil(slack/2), last = mid - l - floor(slack/2)). Megatron's
    --account-for-*-in-pipeline-split and torchtitan's pipeline_parallel_first/last_stage_less_layers
    are such weights of 1 (0 or 1 for Megatron, whole numbers for torchtitan)."""
    from ..pipeline import layers_on_heaviest_stage

    pp, vpp = np.asarray(plan.pp), np.asarray(plan.vpp)
    e, l_ = np.asarray(plan.split_emb), np.asarray(plan.split_loss)
    units = num_layers + e + l_
    slack = np.maximum(pp * layers_on_heaviest_stage(num_layers, pp, vpp, e, l_) - units, 0)
    return e + (slack + 1) // 2, l_ + slack // 2


def _megatron_split(model, stack, plan):
    from ..pipeline import stage_layers

    L = model.num_layers
    pp, vpp = np.asarray(plan.pp), np.asarray(plan.vpp)
    wf, wl = end_weights(L, plan)
    counted = (np.asarray(plan.split_emb) + np.asarray(plan.split_loss)) > 0
    first, mid, last = stage_layers(L, np.maximum(pp, 1), np.ones_like(pp))
    middle_equal = (np.asarray(first) + np.asarray(last) + np.asarray(mid) * np.maximum(pp - 2, 0)) == L
    by_first_last = (vpp == 1) & ~counted & middle_equal  # --decoder-first/last-pipeline-num-layers
    return (pp > 1) & ((wf > 1) | (wl > 1)) & ~by_first_last


def _torchtitan_split(model, stack, plan):
    pp = np.asarray(plan.pp)
    wf, wl = end_weights(model.num_layers, plan)
    return (pp > 1) & ((wf > 1) | (wl > 1))


RULES: tuple[StartupRule, ...] = (
    StartupRule(
        "MEGATRON_TORCH_FSDP2", "megatron",
        "Megatron's --use-torch-fsdp2 with pipeline or expert parallelism, or tied embeddings",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args ('--use-torch-fsdp2 is not supported with "
        "pipeline parallelism' / 'with expert parallelism' / 'requires --untie-embeddings-and-output-weights')",
        "use sharding_mode megatron_fsdp_optim_grads_params (Megatron-FSDP runs with PP and EP), or pp 1 and ep 1",
        lambda m, s, p: mode_is(s, p, "torch_fsdp2") & ((np.asarray(p.pp) > 1) | (np.asarray(p.ep) > 1)
                                                         | bool(m is not None and m.tied_embeddings))),
    StartupRule(
        "MEGATRON_TP_PP_DP_MAPPING", "megatron",
        "Megatron's --use-tp-pp-dp-mapping (rank order tp-cp-pp-dp) with pp > 1 needs expert-TP x EP = TP x CP (no CP on a dense model)",
        f"{MEGATRON_COMMIT} megatron/core/parallel_state.py initialize_model_parallel ('When not using pp-last rank "
        "ordering, the data parallel size of the attention and moe layers must be the same')",
        "use Megatron's default rank order tp-cp-dp-pp (--rank-order tp-cp-dp-pp)",
        lambda m, s, p: uses_tp_pp_dp_mapping(p) & (np.asarray(p.pp) > 1)
        & (etp_of(p) * np.asarray(p.ep) != np.asarray(p.tp) * np.asarray(p.cp))),
    StartupRule(
        "MEGATRON_CP_SEQ", "megatron",
        "Megatron needs the sequence length divisible by 2 x cp",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args ('seq-length should be a multiple of 2 * "
        "context-parallel-size if context-parallel-size > 1')",
        "choose cp so that 2 x cp divides the sequence length",
        lambda m, s, p: (np.asarray(p.cp) > 1) & (np.asarray(p.seq) % (2 * np.asarray(p.cp)) != 0)),
    StartupRule(
        "MEGATRON_PP_SPLIT", "megatron",
        "Megatron cannot place this pipeline split (more than one layer off an end stage, beyond --account-for-* and --decoder-first/last-pipeline-num-layers)",
        f"{MEGATRON_COMMIT} megatron/core/transformer/transformer_config.py __post_init__ (uneven PP: "
        "num_layers_in_first/last_pipeline_stage multiples of vpp, middle stages equal)",
        "choose pp x vpp dividing the layers, or count the embedding and loss as layers of the split "
        "(--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split)",
        _megatron_split),
    StartupRule(
        "TORCHTITAN_SEQ_DIVISOR", "torchtitan",
        "torchtitan needs the sequence length divisible by tp x 2 cp",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama3/infra/parallelize.py parallelize_llama (seq_len % "
        "parallel_dims.seq_len_divisor, = tp * (cp * 2), distributed/parallel_dims.py)",
        "choose tp and cp so that tp x 2 cp divides the sequence length",
        lambda m, s, p: np.asarray(p.seq) % (np.asarray(p.tp) * 2 * np.asarray(p.cp)) != 0),
    StartupRule(
        "TORCHTITAN_DDP_1D", "torchtitan",
        "torchtitan's DDP (no sharding) runs only without TP, CP or PP",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama3/infra/parallelize.py ('DDP has not supported > 1D parallelism')",
        "shard over the data-parallel ranks (fsdp or hsdp), or use DDP with tp = cp = pp = 1",
        lambda m, s, p: (level_of(p) == 0) & (np.asarray(p.dp) > 1)
        & (np.asarray(p.tp) * np.asarray(p.cp) * np.asarray(p.pp) > 1)),
    StartupRule(
        "TORCHTITAN_SP", "torchtitan",
        "torchtitan's TP always runs sequence parallelism",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama3/infra/parallelize.py apply_tp (SequenceParallel on the norms)",
        "set sequence_parallel on (--sequence-parallel) with tp > 1",
        lambda m, s, p: (np.asarray(p.tp) > 1) & (np.asarray(p.sp) == 0)),
    StartupRule(
        "TORCHTITAN_ETP", "torchtitan",
        "torchtitan supports expert TP equal to TP or 1 only",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/parallel_dims.py ('Currently we only support ETP=TP or ETP=1')",
        "set etp to tp or 1",
        lambda m, s, p: (np.asarray(p.ep) > 1) & (etp_of(p) != np.asarray(p.tp)) & (etp_of(p) != 1)),
    StartupRule(
        "TORCHTITAN_PP_SPLIT", "torchtitan",
        "torchtitan cannot place this pipeline split with end-stage weights of 0 or 1",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/pipeline_parallel.py (stages = ceil((layers + first/last stage "
        "weights) / layers_per_stage); generate_llm_fqn_per_model_part gives the remainder to the first stages)",
        "choose pp x vpp dividing the layers, or count the embedding and loss as layers of the split "
        "(--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split: torchtitan's default weights 1 and 1)",
        _torchtitan_split),
    StartupRule(
        "DEEPSPEED_PP_ZERO", "deepspeed",
        "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3",
        f"{DEEPSPEED_COMMIT} deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ ('ZeRO-2 and ZeRO-3 are "
        "incompatible with pipeline parallelism')",
        "use ZeRO stage 0 or 1 with pp > 1, or pp 1",
        lambda m, s, p: (np.asarray(p.pp) > 1) & (level_of(p) >= 2)),
)
CODES = {r.key: FIRST_CODE + i for i, r in enumerate(RULES)}
BY_CODE = {FIRST_CODE + i: r for i, r in enumerate(RULES)}


def order_ok(stack, order, tp, cp, pp, dp, ep=1, etp=0) -> np.ndarray:
    """Where the rank order (codes, broadcast against the mesh arrays) is one the stack builds
    (stack_db runs.rank_orders, up to size-1 axes) and its trainer accepts for the mesh (the
    order-dependent start-up rule MEGATRON_TP_PP_DP_MAPPING): the search's rank-order axis."""
    from types import SimpleNamespace

    from ..plan import stack_order_ok

    ok = stack_order_ok(stack, order, tp, cp, pp, dp)
    if stack is not None and stack.runs is not None and stack.runs.startup_rules == "megatron":
        shape = ok.shape
        b = lambda x: np.broadcast_to(np.asarray(x, dtype=np.int64), shape)  # noqa: E731
        p = SimpleNamespace(order=b(order), tp=b(tp), cp=b(cp), pp=b(pp), dp=b(dp), ep=b(ep), etp=b(etp))
        rule = next(r for r in RULES if r.key == "MEGATRON_TP_PP_DP_MAPPING")
        ok &= ~rule.broken(None, stack, p)
    return ok


def rules_for(stack) -> list[tuple[int, StartupRule]]:
    """(code, rule) of the stack's start-up rule set (none for a stack that names none)."""
    name = stack.runs.startup_rules if stack is not None and stack.runs is not None else None
    return [(CODES[r.key], r) for r in RULES if r.trainer == name]


__all__ = ["RULES", "CODES", "BY_CODE", "FIRST_CODE", "StartupRule", "rules_for", "mode_is", "uses_tp_pp_dp_mapping"]
