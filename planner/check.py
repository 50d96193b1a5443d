"""`planner check`: does a job fit (and meet optional time gates), and if not, what is the
cheapest change that would make it. Units: bytes and seconds inside; GiB only in messages.

Nothing here is a cost formula. A job is resolved with `plan.resolve` and evaluated with
`explain.evaluate` / `explain.to_json`, exactly as `planner explain` does; every suggested
change is a modified Job that went through the same two calls and passed. A suggestion is
therefore a checked result of the model, never a guess.

Verdict of one job
    pass   memory.total_bytes (with a batch ramp and --tokens: the largest of its phases',
           explain.batch_ramp, as fit gates on it) <= memory.usable_bytes (HBM x (1 - headroom); the HBM is
           memory.capacity_bytes, what the GPU reports to CUDA where hardware_db measured it,
           else the datasheet's: memory.capacity_source, named on the PASS/FAIL line) and, when
           given, time.step_s <= --max-step-time and throughput.mfu >= --min-mfu;
    fail   otherwise (exit 1);
    error  the file or a field is invalid (PlannerError, exit 2).
The overflow is total_bytes - usable_bytes (0 when it fits). total_bytes is the caching
allocator's peak reserved bytes (memory.reserved_bytes: the allocated peak and the pools it
holds) plus what lives outside it (the reserve: CUDA context, NCCL); the PASS/FAIL line says so.

Changes tried (each a ladder of rungs above the job's current value; the gpu count, the
model, the global batch in sequences and everything else stay as they are)
    sharding   none -> zero1 -> zero2 -> fsdp (hsdp -> fsdp: shard over the whole DP group)
    micro_batch  halved down to 1; the global batch is kept, so the micro-batches per
               step double each time
    recompute  none -> selective -> full
    tp         doubled while <= the hardware's nvlink_domain (TP inside one NVLink domain
               [3]); resolve rejects a tp that does not divide the heads or the GPU count.
               Sequence parallelism as the config asks it at the new TP: a Megatron script's
               --sequence-parallel, which Megatron turns off at tp 1 only (arguments.py
               @d98e8a64 l. 1433-1439), is on at every TP rung ("TP 1 -> 2 with sequence
               parallelism"), unless the command line says --no-sequence-parallel
               (sequence_parallel_asked); a job file's unset sequence_parallel is resolve's
               default at the new TP (on when tp > 1), torchtitan's TP always runs it
    cp         doubled while <= the stack's runs.max_cp (stack_db; 1, no rung, on a stack
               without context parallelism), cp divides the sequence length and tp cp pp
               divides the GPU count (dp = gpus / (tp cp pp) shrinks, as with tp and pp);
               resolve refuses a cp the stack's start-up rules refuse, so its rung is not
               offered: the sequence as the stack splits it (Megatron seq % 2 cp,
               startup.MEGATRON_CP_SEQ; torchtitan seq % tp 2 cp, TORCHTITAN_SEQ_DIVISOR;
               torchtitan 0.3.0 seq % (tp under SP) (2 cp with cp > 1), TORCHTITAN_SEQ_SP_CP),
               torchtitan's varlen attention (attention_backend varlen, TORCHTITAN_VARLEN_CP),
               an attention that runs without CP (eager, plan.EAGER_CP_SOURCE), heads that
               --cp-comm-type a2a or Gated DeltaNet cannot split (MEGATRON_CP_A2A_HEADS,
               MEGATRON_GDN_HEADS), a rank order the stack does not build with CP
               (MEGATRON_TP_PP_DP_MAPPING: --use-tp-pp-dp-mapping with pp > 1 needs cp 1 on
               a dense model), torchtitan's DDP with cp > 1 (TORCHTITAN_FSDP_MESH)
    pp         doubled while <= num_layers; dp = gpus / (tp cp pp) shrinks with tp, cp and pp
    ep         mixture-of-experts models: doubled while <= the routed experts (expert states
               shard over more ranks, planner/moe.py); resolve rejects an ep that does not
               divide the experts, or whose etp x ep does not divide tp*dp*cp
    tp_comm_overlap  on -> off, where the plan overlaps TP communication: its buffers
               (Transformer Engine's userbuffers, torch's symmetric memory: memory.py [ub])
               are freed and the TP collectives are exposed; where the plan asks for the
               overlap but the trainer runs it off (plan tp_comm_overlap_runs false: Megatron
               with multi-head latent attention, stack overlap.tp_comm_overlap_off_with_mla,
               plan.mla_drops_tp_overlap) the collectives are exposed already, so the change
               frees the buffers and their GEMM workspaces only and costs no time (it says so)
A change whose mesh makes the stack build another of its rank orders than the job's
(startup.built_order: orders equal up to size-1 axes are one order) says so and carries it,
`(rank order A -> B)`, in the trainer's words too: under Megatron's --use-tp-pp-dp-mapping with
pp > 1 a dense model passes MEGATRON_TP_PP_DP_MAPPING at cp > 1 only where dp is 1, where the
order is the default tp-cp-dp-pp and the script must drop the flag (Suggestion.order_change).
An HSDP job whose dp a tp, cp or pp change shrinks to its shard group (one replica) is checked
as FSDP with the stack's mode of that level (apply), as a trainer builds it. A job read from a
trainer config has each suggestion spelled in the file's own keys, with every key that moves with
it (the DP degrees, the global batch, the accumulation; a change the file cannot hold says so):
planner/trainers/spelling.py.
A single change is one knob moved to the lowest rung that passes. Only when no single change
passes are pairs of knobs tried; a pair is kept only if neither of its rungs passes alone and
no lower rung of either knob, with the same other rung, passes too (the Pareto-minimal pairs).

Ranking ("cheapest first")
    When the evaluated JSON carries `time.step_s` (the step-time model), suggestions are
    ranked by predicted step time, shortest first. Otherwise by this documented order of
    expected throughput cost, `CHANGE_COST`, lowest first; ties by fewer knobs, then the
    costliest knob, then the sum, then the smaller memory total:
      1 zero1, 2 zero2   same traffic as plain data parallelism: a reduce-scatter of the
                         gradients plus an all-gather of the parameters is the volume of one
                         all-reduce, 2 Psi [1] sec. 7.2.1
      3 fsdp             1.5x that traffic, 3 Psi, an all-gather in forward and in backward
                         [1] sec. 7.2.2, mostly hidden behind compute by prefetch [4]
      4 micro-batch      smaller GEMMs run further from the tensor-core peak [3] sec. 3.4
      5 selective        recomputes the attention core only: over 90% less recompute time
                         than full [2], the seed sec. 8.2
      6 full recompute   one more forward pass: 8N instead of 6N FLOPs per token, a third
                         more arithmetic [2], the seed sec. 8.1
      7 more TP          per-layer all-reduces (reduce-scatter/all-gather) that are not
                         hidden; use TP up to the NVLink domain first [3] sec. 3.3
      7 more CP          the K/V exchange round the CP ring, cp - 1 sends of a rank's K/V
                         chunk a layer forward and again backward with their gradients [5]
                         sec. 3, overlapped with the blockwise attention compute where a
                         step's kernel outlasts its transfer; every other module runs on
                         seq/cp tokens unchanged; Megatron's own guide sets CP beside TP as
                         the alternative to recompute and more TP for long sequences [6]
                         (l. 32-34: TP "can make compute in layers such as Linear too short
                         to hide communication latency"; CP "scales down both compute and
                         communication by the CP degree"), so beside TP in the order
      8 more PP          pipeline bubble (p-1)/(v m) of the busy time, and m shrinks as pp
                         takes GPUs from dp at a fixed batch [3] sec. 2.2; the seed sec. 5.2
      9 more EP          the dispatch/combine all-to-alls span more ranks, across nodes once
                         tp x ep exceeds the NVLink domain (planner/moe.py)
      7 TP overlap off   the TP collectives are exposed, as with more TP [7 above]
      0 TP overlap off   where the trainer runs it off anyway (tp_comm_overlap_runs false):
                         frees memory only, the collectives are priced exposed already
    The order is a documented prior, not a measurement; the time model supersedes it.

References
[1] Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
    Models", sec. 7.2 (communication volume of P_os, P_os+g: 2 Psi as in DP; P_os+g+p: 3 Psi).
[2] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    sec. 5 and 6 (selective recomputation removes over 90% of the recompute overhead).
[3] Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM", sec. 2.2 (bubble (p-1)/(v m)), sec. 3.3 takeaway 1 (TP up to the
    GPUs of one server, then PP), sec. 3.4 (micro-batch size and GEMM efficiency).
[4] Zhao et al. 2023, "PyTorch FSDP", sec. 3.3-3.4 (forward and backward prefetch).
[5] Liu, Zaharia and Abbeel 2023, "Ring Attention with Blockwise Transformers for Near-Infinite
    Context", arXiv:2310.01889, sec. 3 (K/V blocks passed round a ring of hosts, the transfer
    overlapped with the blockwise attention of the block held).
[6] NVIDIA/Megatron-LM @d98e8a64 docs/user-guide/features/context_parallel.md l. 19-34 (the K/V
    all-gather / reduce-scatter as ring point-to-point sends; CP against full recompute and
    larger TP for long sequences).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Optional

from pydantic import BaseModel

from .errors import PlannerError
from .explain import evaluate, to_json
from .plan import resolve
from .schema import Hardware, Job, ModelSpec

SHARDING_LADDER = ("none", "zero1", "zero2", "fsdp")
RECOMPUTE_LADDER = ("none", "selective", "full")

# The documented cost order of a change (module docstring, "Ranking"): lower is cheaper.
CHANGE_COST = {
    ("sharding", "zero1"): 1,
    ("sharding", "zero2"): 2,
    ("sharding", "fsdp"): 3,
    ("micro_batch", None): 4,
    ("recompute", "selective"): 5,
    ("recompute", "full"): 6,
    ("tp", None): 7,
    ("cp", None): 7,
    ("pp", None): 8,
    ("ep", None): 9,
    ("tp_comm_overlap", False): 7,
    ("tp_comm_overlap", "buffers"): 0,  # where the trainer runs the overlap off anyway (plan tp_comm_overlap_runs false)
}
KNOBS = ("sharding", "micro_batch", "recompute", "tp", "cp", "pp", "ep", "tp_comm_overlap")

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"  # what pydantic v2 emits
SCHEMAS: dict[str, type[BaseModel]] = {"job": Job, "model": ModelSpec, "hardware": Hardware}


class TimeModelUnavailable(PlannerError):
    """A time gate was asked for but the evaluated JSON has no `time`/`throughput`."""


@dataclass(frozen=True)
class Gates:
    """Optional performance gates; None = not checked."""

    max_step_s: Optional[float] = None
    min_mfu: Optional[float] = None

    def __post_init__(self):
        if self.max_step_s is not None and not (self.max_step_s > 0 and math.isfinite(self.max_step_s)):
            raise PlannerError(f"--max-step-time {self.max_step_s} is not a positive time", "give seconds, e.g. 12 or 12s or 1.5min")
        if self.min_mfu is not None and not (0.0 < self.min_mfu <= 1.0):
            raise PlannerError(f"--min-mfu {self.min_mfu} is not a fraction in (0, 1]", "give MFU as a fraction, e.g. 0.4 for 40%")

    @property
    def timed(self) -> bool:
        return self.max_step_s is not None or self.min_mfu is not None


@dataclass(frozen=True)
class Change:
    """One knob moved to one rung of its ladder."""

    knob: str
    update: dict  # Job fields to set
    text: str  # "sharding none -> zero2"
    cost: int  # CHANGE_COST


@dataclass
class Evaluated:
    job: Job
    res: dict  # explain's JSON (+ "warnings")
    failures: list[dict] = field(default_factory=list)

    @property
    def passes(self) -> bool:
        return not self.failures


# ------------------------------------------------------------------------- evaluation
def evaluate_job(job: Job, where: str = "") -> dict:
    """explain's JSON of one job (the same calls as `planner explain`), plus its warnings."""
    settings, plan, warnings = resolve(job, where)
    res = to_json(settings, plan, evaluate(settings, plan))
    res["warnings"] = warnings
    return res


def step_seconds(res: dict) -> Optional[float]:
    v = (res.get("time") or {}).get("step_s")
    return float(v) if v is not None and math.isfinite(v) else None


def mfu(res: dict) -> Optional[float]:
    v = (res.get("throughput") or {}).get("mfu")
    return float(v) if v is not None and math.isfinite(v) else None


def peak_bytes(res: dict) -> float:
    """memory.total_bytes, or with a batch ramp (explain.batch_ramp) the largest over its phases,
    as fit gates on it (search.memory_totals)."""
    ramp = (res.get("throughput") or {}).get("memory_peak_bytes_ramp")
    return max(float(res["memory"]["total_bytes"]), float(ramp)) if ramp is not None else float(res["memory"]["total_bytes"])


def overflow_bytes(res: dict) -> float:
    return max(0.0, peak_bytes(res) - float(res["memory"]["usable_bytes"]))


def failures(res: dict, gates: Gates, where: str = "") -> list[dict]:
    """What fails in one evaluated job: memory (at any phase of a batch ramp), step time, MFU
    (empty = pass)."""
    out: list[dict] = []
    m = res["memory"]
    if not m["fits"] or peak_bytes(res) > m["usable_bytes"]:
        out.append({"kind": "memory", "overflow_bytes": overflow_bytes(res),
                    "total_bytes": peak_bytes(res), "usable_bytes": m["usable_bytes"]})
    host = m.get("host")
    if host is not None and host["fits"] is False:  # CPU offload's host bytes over the node's memory (offload.py)
        out.append({"kind": "host_memory", "bytes_per_node": host["bytes_per_node"],
                    "capacity_bytes_per_node": host["capacity_bytes_per_node"],
                    "overflow_bytes": host["bytes_per_node"] - host["capacity_bytes_per_node"]})
    if gates.max_step_s is not None:
        t = step_seconds(res)
        if t is None:
            raise _no_time_model("--max-step-time", where)
        if t > gates.max_step_s:
            out.append({"kind": "step_time", "step_s": t, "max_step_s": gates.max_step_s})
    if gates.min_mfu is not None:
        u = mfu(res)
        if u is None:
            raise _no_time_model("--min-mfu", where)
        if u < gates.min_mfu:
            out.append({"kind": "mfu", "mfu": u, "min_mfu": gates.min_mfu})
    return out


def _no_time_model(option: str, where: str) -> TimeModelUnavailable:
    key = "time.step_s" if option == "--max-step-time" else "throughput.mfu"
    return TimeModelUnavailable(
        f"{where}{option} needs the step-time model, which is unavailable: explain's JSON has no `{key}`",
        "drop the time gates to check memory only, or use a planner version with the time model",
    )


def _try(job: Job, gates: Gates) -> Optional[Evaluated]:
    """Evaluate a candidate job; None if the candidate itself is not a valid plan."""
    try:
        res = evaluate_job(job)
    except TimeModelUnavailable:
        raise
    except PlannerError:
        return None
    return Evaluated(job, res, failures(res, gates))


# ------------------------------------------------------------------------ the ladders
def ladders(job: Job, res: dict, sp_asked: bool = False) -> dict[str, list[Change]]:
    """For each knob, the rungs above the job's current setting (module docstring); sp_asked: the
    job asks for sequence parallelism wherever TP runs (sequence_parallel_asked), so each TP rung runs it."""
    p = res["plan"]
    hw = _hardware(job)  # cached by catalog
    out: dict[str, list[Change]] = {k: [] for k in KNOBS}

    levels = _stack_levels(job)  # only the modes the stack runs (stack_db runs.sharding; issue 22)
    if job.sharding == "hsdp":
        if "fsdp" in levels:
            out["sharding"].append(Change("sharding", {"sharding": "fsdp", "shard_group": None},
                                          f"sharding hsdp (shard group {job.shard_group}) -> fsdp", CHANGE_COST[("sharding", "fsdp")]))
    else:
        for s in SHARDING_LADDER[SHARDING_LADDER.index(job.sharding) + 1:]:
            if s in levels:
                out["sharding"].append(Change("sharding", {"sharding": s}, f"sharding {job.sharding} -> {s}",
                                              CHANGE_COST[("sharding", s)]))

    mbs0 = mbs = int(p["micro_batch"])
    while mbs > 1:
        mbs //= 2
        out["micro_batch"].append(Change(
            "micro_batch", {"micro_batch": mbs},
            f"micro-batch {mbs0} -> {mbs} (global batch kept at {p['global_batch']:,} sequences)",
            CHANGE_COST[("micro_batch", None)]))

    for r in RECOMPUTE_LADDER[RECOMPUTE_LADDER.index(job.recompute) + 1:]:
        out["recompute"].append(Change("recompute", {"recompute": r}, f"recompute {job.recompute} -> {r}", CHANGE_COST[("recompute", r)]))

    # the config's sequence parallelism where TP runs it: a Megatron script's --sequence-parallel at tp 1
    # (off there, arguments.py @d98e8a64 l. 1433-1439; the reader reads it so) is on at every TP rung
    sp = {"sequence_parallel": True} if sp_asked and job.sequence_parallel is not True else {}
    tp = job.tp * 2
    while tp <= hw.nvlink_domain:
        out["tp"].append(Change("tp", {"tp": tp} | sp, f"TP {job.tp} -> {tp}" + (" with sequence parallelism" if sp else ""),
                                CHANGE_COST[("tp", None)]))
        tp *= 2

    max_cp = _stack_max_cp(job)
    seq = int(p["seq_len"])
    cp = job.cp * 2
    while (max_cp is None or cp <= max_cp) and seq % cp == 0 and job.gpus % (job.tp * cp * job.pp) == 0:
        out["cp"].append(Change("cp", {"cp": cp}, f"CP {job.cp} -> {cp}", CHANGE_COST[("cp", None)]))
        cp *= 2

    pp = job.pp * 2
    while pp <= _model(job).num_layers:
        out["pp"].append(Change("pp", {"pp": pp}, f"PP {job.pp} -> {pp}", CHANGE_COST[("pp", None)]))
        pp *= 2

    if p.get("tp_comm_overlap"):
        if p.get("tp_comm_overlap_runs") is False:  # the trainer runs it off anyway (MLA on Megatron): buffers only
            out["tp_comm_overlap"].append(Change(
                "tp_comm_overlap", {"tp_comm_overlap": False},
                "TP communication overlap on -> off (frees its buffers only, no time: the trainer already runs it off "
                "with multi-head latent attention)", CHANGE_COST[("tp_comm_overlap", "buffers")]))
        else:
            out["tp_comm_overlap"].append(Change("tp_comm_overlap", {"tp_comm_overlap": False}, "TP communication overlap on -> off",
                                                 CHANGE_COST[("tp_comm_overlap", False)]))

    moe = _model(job).moe
    ep = job.ep * 2
    while moe is not None and ep <= moe.num_experts:
        out["ep"].append(Change("ep", {"ep": ep}, f"EP {job.ep} -> {ep}", CHANGE_COST[("ep", None)]))
        ep *= 2
    return out


def _stack_levels(job: Job) -> tuple[str, ...]:
    """The sharding levels the job's stack runs for the job (all for a stack file that lists none), by the test the
    search uses for its candidate modes (plan.stack_for_job, as space.settings_for): a level whose every mode the
    trainer runs otherwise for the job's settings is none of them (DeepSpeed's zero0 is fp16's FP16_Optimizer, so a
    job on megatron-deepspeed that does not say fp16 has no level none), nor one whose every mode builds other
    gradient bytes than the job's (megatron-bridge's Megatron-FSDP zero2 and hsdp, fp32 main gradients, for a
    mixed16 job) or refuses its low-precision moments."""
    from .catalog import load_stack
    from .plan import stack_for_job

    runs = stack_for_job(job, load_stack(job.stack)).runs
    return SHARDING_LADDER + ("hsdp",) if runs is None else tuple(dict.fromkeys(m.level for m in runs.sharding))


def _stack_max_cp(job: Job) -> Optional[int]:
    """The largest cp the job's stack runs (stack_db runs.max_cp; None: no limit of the stack's own,
    as for a stack file that lists no `runs`)."""
    from .catalog import load_stack

    runs = load_stack(job.stack).runs
    return None if runs is None else runs.max_cp


def _hardware(job: Job) -> Hardware:
    from .catalog import load_hardware

    return load_hardware(job.hardware)


def _model(job: Job) -> ModelSpec:
    from .catalog import load_model

    return load_model(job.model)


def _dp(job: Job, tp: Optional[int] = None, pp: Optional[int] = None, cp: Optional[int] = None) -> Optional[int]:
    inner = (tp or job.tp) * (cp or job.cp) * (pp or job.pp)
    return job.gpus // inner if job.gpus % inner == 0 else None


def apply(job: Job, changes: tuple[Change, ...]) -> Job:
    """The job with the changes laid over it; an explicit dp follows tp, cp and pp. HSDP whose dp
    shrinks to its shard group (one replica) becomes FSDP with the stack's mode of that level, as
    the hsdp -> fsdp rung does: a trainer builds FSDP there (torchtitan's dp_replicate 1 is not
    HSDP, parallel_dims.py @e347b1e5e), and the two price alike (one replica: no replica
    all-reduce)."""
    update: dict = {}
    for c in changes:
        update.update(c.update)
    if "sharding" in update:  # the stack's mode of the new level (resolve chooses it)
        update.setdefault("sharding_mode", None)
    if job.dp is not None and ("tp" in update or "pp" in update or "cp" in update):
        dp = _dp(job, update.get("tp"), update.get("pp"), update.get("cp"))
        if dp is not None:
            update["dp"] = dp
    if update.get("sharding", job.sharding) == "hsdp" and ("tp" in update or "pp" in update or "cp" in update):
        dp = _dp(job, update.get("tp"), update.get("pp"), update.get("cp"))
        if dp is not None and dp == job.shard_group:  # one replica: FSDP over the whole group, as a trainer builds it
            update.update(sharding="fsdp", shard_group=None, sharding_mode=None)  # (torchtitan: dp_replicate 1)
    # (the job's own fields only: a default it leaves out stays the stack's to choose, plan.apply_stack_features)
    return Job.model_validate({**job.model_dump(exclude_unset=True), **update})


# -------------------------------------------------------------------------- suggestions
@dataclass
class Suggestion:
    changes: tuple[Change, ...]
    ev: Evaluated
    dp_before: int  # the job's resolved dp, to say how tp/cp/pp changes shrink it
    trainer: Optional[str] = None  # the trainer format the job was read from: the change in its own keys
    order_before: Optional[str] = None  # the rank order the stack builds for the job (built_order)
    stated: Optional[dict] = None  # the trainer file's batch and DP keys as stated (TrainerConfig.stated)
    plan_before: Optional[dict] = None  # explain's `plan` of the job, for the keys that move with the change

    @property
    def order_change(self) -> Optional[tuple[str, str]]:
        """(before, after) where the checked plan's mesh makes the stack build another of its rank
        orders than the job's (startup.built_order: orders equal up to size-1 axes are one): a
        change to dp 1 under Megatron's --use-tp-pp-dp-mapping is the default order, which the
        script must then ask for (the flag with pp > 1 asserts equal attention and expert dp,
        parallel_state.py; MEGATRON_TP_PP_DP_MAPPING). None where the order stays."""
        after = _built_order(self.ev.res["plan"])
        if self.order_before is None or after is None or after == self.order_before:
            return None
        return self.order_before, after

    def change_text(self, c: Change) -> str:
        """A change's text, a sharding change's levels in the stack's own words where it gives them (stack_db
        runs.sharding label, explain's plan sharding_label: 'sharding zero1 -> Megatron-FSDP optim_grads', the mode the
        checked plan runs, where 'zero2' would read as DeepSpeed's ZeRO-2)."""
        if c.knob != "sharding":
            return c.text
        before, after = self.plan_before or {}, self.ev.res["plan"]
        head, _, tail = c.text.partition(" -> ")
        if before.get("sharding_label") and head == f"sharding {before['sharding']}":
            head = f"sharding {before['sharding_label']}"
        return f"{head} -> {after.get('sharding_label') or tail}"

    @property
    def description(self) -> str:
        text = " + ".join(self.change_text(c) for c in self.changes)
        dp = self.ev.res["plan"]["dp"]
        text += f" (DP {self.dp_before} -> {dp})" if dp != self.dp_before else ""
        if self.plan_before is not None and self.plan_before["sharding"] == "hsdp" and self.ev.res["plan"]["sharding"] == "fsdp" \
                and not any(c.knob == "sharding" for c in self.changes):
            text += f" (one HSDP replica of shard group {self.plan_before['shard_group']}: FSDP)"
        order = self.order_change
        text += f" (rank order {order[0]} -> {order[1]})" if order is not None else ""
        spelled = self.spelling()
        if spelled is not None:
            text += f" [{self.trainer}: {spelled.text(self.trainer)}]"
        return text

    def spelling(self):
        """The change in the trainer's file, every key that moves with it (trainers/spelling.py);
        None for a job not read from a trainer config."""
        if self.trainer is None:
            return None
        from .trainers.spelling import spell

        return spell(self.trainer, [c.knob for c in self.changes], self.plan_before or self.ev.res["plan"],
                     self.ev.res["plan"], self.stated, self.order_change)

    def doc_key(self) -> tuple:
        costs = [c.cost for c in self.changes]
        return (len(costs), max(costs), sum(costs), self.ev.res["memory"]["total_bytes"])

    def as_dict(self) -> dict:
        m = self.ev.res["memory"]
        order = self.order_change
        d: dict[str, Any] = {
            "changes": {k: v for c in self.changes for k, v in c.update.items()} | ({"rank_order": order[1]} if order else {}),
            "description": self.description,
            "cost_rank": [c.cost for c in self.changes],
            "total_bytes": m["total_bytes"],
            "usable_bytes": m["usable_bytes"],
            "capacity_bytes": m["capacity_bytes"],
            "fraction_of_hbm": m["total_bytes"] / m["capacity_bytes"],
            "step_s": step_seconds(self.ev.res),
            "mfu": mfu(self.ev.res),
            "plan": self.ev.res["plan"],
        }
        spelled = self.spelling()
        if spelled is not None:  # the settings to write (value null: drop the flag or key), in the trainer's keys
            d["trainer_settings"] = [{"key": st.key, "value": st.value} for st in spelled.settings]
            d["trainer_notes"] = spelled.notes
            d["trainer_unspellable"] = spelled.unspellable
        return d


def _built_order(plan: dict) -> Optional[str]:
    """The stack's name of the rank order a resolved plan (explain's `plan`) builds (startup.built_order)."""
    from .catalog import load_stack
    from .startup import built_order

    return built_order(load_stack(plan["stack"]), plan["rank_order"], plan["tp"], plan["cp"], plan["pp"], plan["dp"])


def rank(suggestions: list[Suggestion]) -> list[Suggestion]:
    """By predicted step time when the JSON has `time.step_s`, else by the documented cost
    order (module docstring); the documented order breaks ties."""
    def key(s: Suggestion):
        t = step_seconds(s.ev.res)
        return (t is None, t if t is not None else 0.0, s.doc_key())

    return sorted(suggestions, key=key)


def suggest(job: Job, res: dict, gates: Gates, trainer: Optional[str] = None,
            stated: Optional[dict] = None, sp_asked: bool = False) -> list[Suggestion]:
    """Checked changes that make the job pass, cheapest first (module docstring); `trainer`:
    the format the job was read from, whose own keys each suggestion names (`stated`: what the
    file states of the keys that move with a change, TrainerConfig.stated); sp_asked: TP rungs
    run sequence parallelism (sequence_parallel_asked)."""
    lad = ladders(job, res, sp_asked)
    dp0, order0 = res["plan"]["dp"], _built_order(res["plan"])
    found: list[Suggestion] = []
    passes_alone: dict[str, int] = {}  # knob -> index of its lowest passing rung
    for knob in KNOBS:
        for i, ch in enumerate(lad[knob]):
            ev = _try(apply(job, (ch,)), gates)
            if ev is not None and ev.passes:
                found.append(Suggestion((ch,), ev, dp0, trainer, order0, stated, res["plan"]))
                passes_alone[knob] = i
                break
    if found:
        return rank(found)
    # no single change passes: Pareto-minimal pairs of two knobs
    for ka, kb in combinations(KNOBS, 2):
        best_b = len(lad[kb])  # lowest rung of kb that passed with a lower rung of ka
        for a in lad[ka]:
            for j, b in enumerate(lad[kb][:best_b]):
                ev = _try(apply(job, (a, b)), gates)
                if ev is not None and ev.passes:
                    found.append(Suggestion((a, b), ev, dp0, trainer, order0, stated, res["plan"]))
                    best_b = j
                    break
            if best_b == 0:
                break
    return rank(found)


# ------------------------------------------------------------------------------ check
def sequence_parallel_asked(trainer: Optional[str], stated: Optional[dict], given: Optional[bool] = None) -> bool:
    """Whether a job asks for sequence parallelism wherever TP runs, though its own TP may turn it off:
    the command line's --[no-]sequence-parallel where given (`given`), else a Megatron script's stated
    --sequence-parallel (Megatron turns it off at tp 1 only: arguments.py @d98e8a64 l. 1433-1439, and
    the reader reads it so; at tp > 1 it runs). A job file leaves it unset or sets it itself (resolve:
    unset is on when tp > 1, what the stacks do), and torchtitan runs SP with every TP (the reader's
    TORCHTITAN_SP): neither needs it."""
    if given is not None:
        return given
    from .trainers.spelling import asks_sequence_parallel

    return trainer is not None and asks_sequence_parallel(trainer, stated)


def check_job(job: Job, where: str, gates: Gates, trainer: Optional[str] = None, stated: Optional[dict] = None,
              sp_given: Optional[bool] = None) -> dict:
    """explain's JSON of the job plus `verdict`, `failures`, `overflow_bytes` and
    `suggestions` (checked changes that would make it pass, cheapest first; in the trainer's
    own keys too where the job came from a trainer config, `trainer` its format, `stated` what
    the file states of the keys that move with a change: trainers/spelling.py; sp_given: the
    command line's --[no-]sequence-parallel, None where not given: sequence_parallel_asked)."""
    res = evaluate_job(job, where)
    fails = failures(res, gates, where)
    res["verdict"] = "fail" if fails else "pass"
    res["failures"] = fails
    res["overflow_bytes"] = overflow_bytes(res)
    sp = sequence_parallel_asked(trainer, stated, sp_given)
    res["suggestions"] = [s.as_dict() for s in suggest(job, res, gates, trainer, stated, sp)] if fails else []
    return res


def worst_exit(codes: list[int]) -> int:
    """2 (invalid input) > 1 (does not fit / gate failed) > 0."""
    return max(codes, default=0)


_BOUND_KEYWORDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}


def _number_keywords(node):
    """pydantic's JSON Schema with a number's bounds as JSON Schema keywords: a field's own bounds on a type that
    refuses a boolean first (schema.Count, Real, Int: a before-validator) come out as pydantic's `gt` / `ge` / `lt` /
    `le`, which a JSON Schema validator ignores; each becomes exclusiveMinimum / minimum / exclusiveMaximum / maximum
    (only in a node whose `type` is integer or number, so no property named `gt` is touched)."""
    if isinstance(node, list):
        return [_number_keywords(x) for x in node]
    if not isinstance(node, dict):
        return node
    num = node.get("type") in ("integer", "number")
    return {(_BOUND_KEYWORDS[k] if num and k in _BOUND_KEYWORDS else k): _number_keywords(v) for k, v in node.items()}


def json_schema(what: str = "job") -> dict:
    """The JSON Schema (draft 2020-12, pydantic v2) of a job, model or hardware file. A job's
    `patternProperties` are the spellings the job file loader also reads as each field
    (catalog.key_pattern: `micro-batch` for micro_batch), each validated as that field."""
    if what not in SCHEMAS:
        raise PlannerError(f"no schema named {what!r}", f"choose one of {', '.join(SCHEMAS)}")
    out = {"$schema": JSON_SCHEMA_DIALECT, **_number_keywords(SCHEMAS[what].model_json_schema())}
    if what == "job":
        from .catalog import key_pattern

        out["patternProperties"] = {pattern: {"$ref": f"#/properties/{name}"}
                                    for name in out["properties"] if (pattern := key_pattern(name))}
    return out
