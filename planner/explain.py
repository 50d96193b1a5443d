"""One evaluation path for one plan or a million: `evaluate` runs every cost model on a
PlanArrays and `to_json` turns one row into the stable JSON contract (DESIGN.md):
plan, params, memory, flops, time and throughput.
`explain` and `search` both call `evaluate`, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from . import comm, dispatch, offload, placement
from . import memory as mem
from .compute import flops_summary, price_gemms
from .layers import layer_list
from .params import count_params
from .plan import FP8, PlanArrays, Settings, fp8_dispatch, param_gather_assumed, plan_dict
from .knobs import RUN_PARAMETER_AFFECTS
from .stacks import capacity_rows, plan_context, stack_of
from .step import CRITICAL_STAGE_NAMES, step_time, throughput
from .terms import Terms


@dataclass
class Estimate:
    memory: Terms  # per-GPU bytes on the heaviest stage, by term
    stage: np.ndarray  # memory.STAGE_FIRST, STAGE_LAST, STAGE_MIDDLE
    capacity: float  # HBM bytes
    usable: float  # HBM x (1 - headroom)
    fits: np.ndarray  # bool
    flops: dict  # per-token FLOPs by convention
    time: Terms  # seconds per step, by term (sum = step time)
    time_extra: dict  # informational: total DP traffic time, ...
    throughput: dict  # tokens/s, MFU, HFU
    stages: dict | None = None  # memory.STAGE_* -> Terms of that stage (explain's per-stage report)

    @property
    def step_s(self) -> np.ndarray:
        return self.time.total

    def take(self, idx) -> "Estimate":
        return Estimate(
            memory=self.memory.take(idx),
            stage=self.stage[idx],
            capacity=self.capacity,
            usable=self.usable,
            fits=self.fits[idx],
            flops=_take(self.flops, idx),
            time=self.time.take(idx),
            time_extra=_take(self.time_extra, idx),
            throughput=_take(self.throughput, idx),
            stages=None if self.stages is None else {k: t.take(idx) for k, t in self.stages.items()},
        )


def _take(d: dict, idx) -> dict:
    return {k: (v[idx] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in d.items()}


def calibration_report(settings: Settings, est: Estimate) -> dict | None:
    """Which measured figures the time model used (None without a profile)."""
    if settings.calibration is None:
        return None
    covered = [f"{c}/{s}/{n}" for c, s, n in settings.calibration.covered()]
    if getattr(settings.calibration, "gemm", None) is not None:
        covered.append("gemm")
    used = list(est.time_extra.get("calibrated", []))
    out = {"profile": settings.calibration_path, "covered": covered, "used": used,
           "defaults_for": "every collective not listed in `used` (hardware_db figures and comm.py "
                           "efficiencies); GEMMs use the hardware_db plateau unless `gemm` is used"}
    run = settings.calibration.run
    if run is not None:
        kn = settings.knobs
        out["run"] = {
            "stacks": list(run.stacks), "hardware": run.hardware,
            "applied": {k: float(getattr(kn, k)) for k in kn.applied},
            "affects": sorted({f for k in kn.applied for f in RUN_PARAMETER_AFFECTS[k]}),
            **({"not_applied": kn.not_applied} if kn.not_applied else {}),
        }
    host = settings.calibration.host_adam
    if host is not None:  # calibrate host-adam: the host Adam's fraction of the DRAM peak (planner/offload.py [cpu-adam])
        out["host_adam"] = {"efficiency": host.efficiency, "hardware": host.hardware,
                            "applied": settings.host_adam_calibrated,
                            **({} if settings.host_adam_calibrated else {"not_applied": settings.host_adam_note})}
    return out


def evaluate(settings: Settings, plan: PlanArrays) -> Estimate:
    stages = mem.stage_memory_terms(settings, plan)
    terms, stage = mem.heaviest_stage(stages)
    cap, usable = mem.capacity(settings)
    flops = flops_summary(settings.model, plan.seq, plan.recompute, settings.causal_attention_flops, settings.tokens,
                          mem.recompute_fraction(settings, plan),
                          dense_windows=stack_of(settings).windowed_attention is not None,  # attention.py [11]
                          cp=plan.cp)  # the chunking Bridge runs reads cp (attention.py [14])
    time, extra = step_time(settings, plan)
    thr = throughput(settings, plan, time.total)
    return Estimate(memory=terms, stage=stage, capacity=cap, usable=usable, fits=terms.total <= usable, flops=flops,
                    time=time, time_extra=extra, throughput=thr, stages=stages)


def _num(v):
    v = np.asarray(v)
    if v.dtype.kind in "iu":
        return int(v)
    if v.dtype.kind == "b":
        return bool(v)
    return float(v)


def _picked(t: Terms, pick) -> Terms:
    """The named terms of one plan (pick reads its element), for the sums of terms to_json reports: each row's
    own elements summed, the same elementwise arithmetic as over every plan. Summing every plan's arrays for each
    row and then picking one (as before) made search.rows_of, one to_json a row, quadratic in the rows: `fit
    --top 2147483647` of 2,875 rows spent about 7 of its 11 s of to_json in memory.grouped."""
    return Terms(**{k: pick(v) for k, v in t.items()})


def memory_groups(settings: Settings, est: Estimate) -> tuple:
    """(memory.grouped of the plans' terms, memory.reported_bytes of them, {stage code: memory.grouped of that
    stage's terms} or None) over every plan at once, for to_json's rows to read their element of (search.rows_of):
    every figure is elementwise over the plans, so each row's is the number grouped gives its own terms
    (_memory_json without them). Each row's own sums were most of a row's JSON (grouped sums every term for the total
    five times: total, allocated, reserved and the high band): search.rows_of on llama3-70b / 512 H100's 2,100 best
    rows 1.04 -> 0.36 ms of CPU a row (median of 5)."""
    stages = None if est.stages is None else {c: mem.grouped(t) for c, t in est.stages.items()}
    return mem.grouped(est.memory), mem.reported_bytes(settings, est.memory), stages


def _memory_json(settings: Settings, plan: PlanArrays, est: Estimate, pick, groups=None) -> dict:
    """to_json's "memory": the grouped and named terms, the capacity and its fit, the host's share under CPU
    offload, and every pipeline stage's own total (pick reads one plan's element; groups: memory_groups of every
    plan where the caller has them, else this plan's own are summed)."""
    terms = _picked(est.memory, pick)
    if groups is None:
        grouped, reported = mem.grouped(terms), mem.reported_bytes(settings, terms)
    else:
        grouped, reported = {k: pick(v) for k, v in groups[0].items()}, pick(groups[1])
    memory = {k: _num(v) for k, v in grouped.items()}
    memory.update(
        capacity_bytes=float(est.capacity),
        capacity_source=settings.hardware.hbm_capacity_source,  # measured (hbm_visible_GiB) | datasheet (hbm_GB)
        usable_bytes=float(est.usable),
        headroom=settings.headroom,
        fits=bool(pick(est.fits)),
        heaviest_stage=mem.STAGE_NAMES[int(pick(est.stage))],
        reported_bytes=_num(reported),
        reported_as=stack_of(settings).memory.reports,
        # the reserved peak's band [reserved_bytes, reserved_high_bytes] (memory.py [13])
        fragmentation={"reserved_over_allocated_max": mem.RESERVED_OVER_ALLOCATED_MAX,
                       "allocator": stack_of(settings).memory.allocator,
                       # Megatron --empty-unused-memory-level, where the job sets it (no figure moves: memory.py [13])
                       **({"empty_unused_memory_level": settings.empty_unused_memory_level}
                          if settings.empty_unused_memory_level else {})},
        terms={k: _num(v) for k, v in terms.items()},
    )
    if "offload_host_bytes_per_rank" in est.time_extra:  # CPU offload (planner/offload.py): what the host holds
        node = _num(pick(est.time_extra["offload_host_bytes_per_node"]))
        cap_gb = settings.hardware.host_memory_GB
        memory["host"] = {"bytes_per_rank": _num(pick(est.time_extra["offload_host_bytes_per_rank"])),
                          "bytes_per_node": node, "ranks_per_node": int(offload.node_ranks(settings)),
                          "capacity_bytes_per_node": None if cap_gb is None else cap_gb * 1e9,
                          "fits": None if cap_gb is None else bool(node <= cap_gb * 1e9),
                          # the host Adam's fraction of host_memory_GBps: assumed, or a profile's (calibrate host-adam)
                          "adam_efficiency": settings.host_adam_efficiency,
                          "adam_efficiency_calibrated": settings.host_adam_calibrated,
                          "adam_efficiency_source": (settings.host_adam_note if settings.host_adam_calibrated else
                                                     "assumed: offload.HOST_MEMORY_EFFICIENCY")}
    if est.stages is not None:
        # every stage's own total; `fits` gates on the largest (the terms above are that stage's)
        pp = int(pick(plan.pp))
        names = [mem.STAGE_FIRST] + ([mem.STAGE_MIDDLE] if pp > 2 else []) + ([mem.STAGE_LAST] if pp > 1 else [])
        stage = ((lambda c: mem.grouped(_picked(est.stages[c], pick))) if groups is None else
                 (lambda c: {k: pick(v) for k, v in groups[2][c].items()}))
        memory["stages"] = {mem.STAGE_NAMES[c]: {k: _num(v) for k, v in stage(c).items()} for c in names}
    return memory


def _time_json(est: Estimate, pick) -> dict:
    """to_json's "time": the step's named terms and the parts inside them (pick reads one plan's element)."""
    t = {f"{k}_s": _num(pick(v)) for k, v in est.time.items()}
    time = {
        "compute_s": t["compute_s"], "tp_comm_s": t["tp_comm_s"], "cp_comm_s": t["cp_comm_s"],
        "pp_comm_s": t["pp_comm_s"],
        # inside tp_comm_s, where priced (Megatron, SP, tp > 1): the once-a-step TP all-reduce of the gradients SP leaves
        # partial, the norms', row-parallel biases', routers' (step.py [27])
        **({"tp_sp_norm_grads_s": _num(pick(est.time_extra["tp_sp_norm_grads_s"]))}
           if float(pick(est.time_extra.get("tp_sp_norm_grads_s", 0.0))) > 0 else {}),
        # inside tp_comm_s under delayed fp8 scaling: the per-region amax all-reduces over TP x DP x CP (step.py [34])
        **({"tp_fp8_amax_s": _num(pick(est.time_extra["tp_fp8_amax_s"]))} if "tp_fp8_amax_s" in est.time_extra else {}),
        # inside tp_comm_s under torchao float8 tensorwise at tp > 1: each cast's amax all-reduced over TP (step.py [39])
        # (where the plan has them: a search batch prices them on its tp 1 plans too, as 0 s)
        **({"tp_fp8_dynamic_amax_s": _num(pick(est.time_extra["tp_fp8_dynamic_amax_s"]))}
           if float(pick(est.time_extra.get("tp_fp8_dynamic_amax_s", 0.0))) > 0 else {}),
        # inside tp_comm_s, where priced (SP, tp > 1, a stack whose SP linears save their shard): the backward's
        # re-gathers of the column-parallel linears' inputs for their wgrad GEMMs, exposed past the dgrad GEMMs (step.py [35])
        **({"tp_wgrad_regather_s": _num(pick(est.time_extra["tp_wgrad_regather_s"]))}
           if float(pick(est.time_extra.get("tp_wgrad_regather_s", 0.0))) > 0 else {}),
        # inside tp_comm_s, where priced (tp > 1): the embedding's, the output layer's and the vocab-parallel loss's TP
        # collectives on the critical stage (step.py [36])
        **({"tp_head_s": _num(pick(est.time_extra["tp_head_s"]))}
           if float(pick(est.time_extra.get("tp_head_s", 0.0))) > 0 else {}),
        # inside tp_comm_s, where priced (a stack whose shared experts run their own TP pair, tp > 1): the MoE layers'
        # shared experts' all-gather / reduce-scatter (all-reduce without SP) each way, exposed (step.py [37])
        **({"tp_shared_experts_s": _num(pick(est.time_extra["tp_shared_experts_s"]))}
           if float(pick(est.time_extra.get("tp_shared_experts_s", 0.0))) > 0 else {}),
        # inside tp_comm_s under Muon: the duplicated TP mode's all-gathers of the momenta (step.py [28])
        **({"tp_muon_gather_s": _num(pick(est.time_extra["tp_muon_gather_s"]))} if "tp_muon_gather_s" in est.time_extra else {}),
        # inside tp_comm_s under Muon: the distributed TP mode's Gram all-reduces (step.py [28])
        **({"tp_muon_gram_s": _num(pick(est.time_extra["tp_muon_gram_s"]))} if "tp_muon_gram_s" in est.time_extra else {}),
        # inside pp_comm_s: the interleaved schedule's warm-up and flush p2p the stack waits on (step.py [13])
        "pp_warmup_flush_s": _num(pick(est.time_extra["pp_warmup_flush_s"])),
        "dp_comm_s": _num(pick(est.time_extra["dp_comm_s"])),
        "dp_comm_exposed_s": t["dp_comm_exposed_s"],
        # of dp_comm_s and dp_comm_exposed_s, a MoE model's: the routed experts' over their expert-data-parallel ranks
        # (step.dp_expert_comm; its per-micro-batch part and step-end part with the dense ones', the same stages')
        **({k: _num(pick(est.time_extra[k])) for k in ("dp_comm_experts_s", "dp_comm_experts_exposed_s")}
           if "dp_comm_experts_s" in est.time_extra else {}),
        "bubble_s": t["bubble_s"],
        # inside bubble_s, where priced: the fill's and drain's p2p hops an end critical stage's own count lacks (step.py [31])
        **({"pp_fill_drain_s": _num(pick(est.time_extra["pp_fill_drain_s"]))}
           if float(pick(est.time_extra.get("pp_fill_drain_s", 0.0))) > 0 else {}),
        "optimizer_s": t["optimizer_s"], "step_s": _num(_picked(est.time, pick).total),
        "cp_comm_total_s": _num(pick(est.time_extra["cp_comm_total_s"])),
        # inside compute_s: the stack's elementwise passes outside its fused kernels (a scaled rotary,
        # an activation clamp, a router-weighted expert bias, a fusion the job turned off: layers' unfused_bytes,
        # and without gradient-accumulation fusion the weight gradients' adds: step.py [11]), on the critical stage
        "unfused_passes_s": _num(pick(est.time_extra["unfused_passes_s"])),
        # context parallelism's own GPU work, inside compute_s: merges, accumulations, per-step kernels
        "cp_compute_s": _num(pick(est.time_extra["cp_compute_s"])),
        # inside compute_s, attention eager: the critical stage's eager cores, their named terms and sum (step.eager_core_time)
        **{k: _num(pick(v)) for k, v in est.time_extra.items() if k.startswith("eager_core_")},
        # inside compute_s: the critical stage's Mamba selective scans, fp32 / HBM roofline (step.mamba_scan_time)
        **({"mamba_scan_s": _num(pick(est.time_extra["mamba_scan_s"]))} if "mamba_scan_s" in est.time_extra else {}),
        # of cp_comm_total_s (and all exposed): the state-space / linear-attention layers' CP exchanges, not the
        # attention layers' K/V ring (step.cp_comm); a model with such layers only
        **({"cp_scan_comm_s": _num(pick(est.time_extra["cp_scan_comm_s"]))} if "cp_scan_comm_s" in est.time_extra else {}),
        **({"ep_comm_s": t["ep_comm_s"]} if "ep_comm_s" in t else {}),  # MoE dispatch/combine all-to-alls
        # inside ep_comm_s under --moe-shared-expert-overlap: the shared experts' side-stream TP collectives' exposed
        # remainder beside the all-to-alls (step.py [38])
        **({"ep_shared_experts_tp_s": _num(pick(est.time_extra["ep_shared_experts_tp_s"]))}
           if "ep_shared_experts_tp_s" in est.time_extra else {}),
        # MoE router top-k + token permutations (memory-bound compute, its own term: moe.dispatch_bytes)
        **({"moe_permute_s": t["moe_permute_s"]} if "moe_permute_s" in t else {}),
        # of moe_permute_s, the critical stage's: DeepSpeed-MoE's dispatch and combine einsums (stack moe_gating, step.py [24])
        **({"moe_gating_einsum_s": _num(pick(est.time_extra["moe_gating_einsum_s"]))}
           if "moe_gating_einsum_s" in est.time_extra else {}),
        # MoE: the host issue time the dispatcher's synchronisation exposes (step.moe_host)
        **({"moe_host_s": t["moe_host_s"]} if "moe_host_s" in t else {}),
        # Muon (job field optimizer muon): the Newton-Schulz iterations' bf16 GEMMs at the optimizer step (step.py [28])
        **({"muon_ns_s": t["muon_ns_s"]} if "muon_ns_s" in t else {}),
        # CPU offload (planner/offload.py): optimizer_s is the CPU's Adam (Megatron's HybridDeviceOptimizer: the longer
        # of it and the GPU's Adam over the rest) plus the host link's exposed copies
        **{k: _num(pick(est.time_extra[k])) for k in ("offload_cpu_adam_s", "offload_gpu_adam_s", "offload_link_s",
                                                       "offload_link_exposed_s")
           if k in est.time_extra},
    }
    return time


def critical_stage_json(settings: Settings, est: Estimate, pick) -> dict:
    """The pipeline stage the step's terms are (step.critical_stage: the slowest micro-batch by its compute plus its
    own TP, CP, PP and EP communication): its name (step.CRITICAL_STAGE_NAMES: first, middle, last; only without a
    pipeline; end pair under DualPipe, stage 0 and stage p - 1 on the same ranks), the transformer layers it holds,
    and what it holds beside them (the embedding on the first stage, the output layer and the loss, and the
    multi-token prediction modules, on the last)."""
    name = CRITICAL_STAGE_NAMES[int(pick(est.time_extra["critical_stage"]))]
    first, last = name in ("first", "only", "end pair"), name in ("last", "only", "end pair")
    mtp = int(layer_list(settings.model).mtp)  # the modules step.mtp_time prices on the last stage
    holds = (["embedding"] if first else []) + (["output layer + loss"] if last else []) + (
        [f"{mtp} multi-token prediction module{'s' if mtp > 1 else ''}"] if last and mtp else [])
    return {"stage": name, "layers": int(pick(est.time_extra["critical_stage_layers"])), "holds": holds}


def step_end_json(est: Estimate, pick) -> dict:
    """The stages whose step-end work the time terms hold (step.step_end_extras; step.step_end_stage picks each as the
    largest of the stages' own, not the critical stage's): `gradients`, the stage whose DP gradient sync and
    SP-gradient all-reduce end the step (dp_comm_s, dp_comm_exposed_s, the DP copies in compute_s, tp_sp_norm_grads_s
    in tp_comm_s), `optimizer`, the stage whose optimizer step does (optimizer_s); step.CRITICAL_STAGE_NAMES."""
    return {k: CRITICAL_STAGE_NAMES[int(pick(est.time_extra[key]))]
            for k, key in (("gradients", "step_end_grads_stage"), ("optimizer", "step_end_optimizer_stage"))}


def _throughput_json(settings: Settings, plan: PlanArrays, est: Estimate, pick, step_s, i, ramp) -> dict:
    """to_json's "throughput": the estimate's rates and, where the job sets tokens, the run's steps, days and
    GPU-hours (each ramp phase's where the job ramps its batch)."""
    thr = {k: _num(pick(v)) for k, v in est.throughput.items()}
    if settings.tokens:
        steps = settings.tokens / (int(pick(plan.gbs)) * int(pick(plan.seq)))
        seconds = steps * step_s
        thr.update(training_steps=steps, training_days=seconds / 86400.0,
                   gpu_hours=seconds * settings.gpus / 3600.0)
        if settings.batch_schedule:  # a batch ramp: each phase's steps at its own batch
            thr.update(batch_ramp(settings, plan, i, ramp))
    return thr


def assumed_lines(settings: Settings, plan: PlanArrays, i=None) -> list[str]:
    """The plan's `assumed` list (explain's and budget's JSON, a fit row's): what the model's file left out and a
    documented rule filled in (settings.assumed: HF config keys), the training length where the job gave none
    (seq_assumed), the trainer model code not checked (code_assumed), the run's environment the trainer sets where
    the job gave none (env_assumed: plan._nccl_algo) and the job's dp_param_gather_overlap left out where its tie to
    the DP overlap acts on this plan (plan.param_gather_assumed; i indexes a 1-d PlanArrays); a trainer config's own
    assumed lines follow them (trainers/report.with_config)."""
    return (list(settings.assumed) + list(settings.seq_assumed) + list(settings.code_assumed)
            + list(settings.env_assumed) + param_gather_assumed(settings, plan, i))


def to_json(settings: Settings, plan: PlanArrays, est: Estimate, i=None, ramp=None, moe=None, placed=None,
            groups=None) -> dict:
    """The JSON object of one plan (i indexes 1-d arrays; None for 0-d). ramp: ramp_estimates of
    the plans where the caller has them (search.rows_of prices every row's phases at once); moe:
    moe_arrays of the plans likewise (each row reads its element); placed: placement.links of the
    plans likewise; groups: memory_groups of the plans likewise."""
    def pick(v):
        v = np.asarray(v)
        return v if (i is None or v.ndim == 0) else v[i]

    pc = count_params(settings.model)
    memory = _memory_json(settings, plan, est, pick, groups)
    flops = {k: (_num(pick(v)) if not isinstance(v, str) else v) for k, v in est.flops.items()}
    time = _time_json(est, pick)
    time["critical_stage"] = critical_stage_json(settings, est, pick)
    time["step_end_stages"] = step_end_json(est, pick)
    thr = _throughput_json(settings, plan, est, pick, time["step_s"], i, ramp)
    out_cal = calibration_report(settings, est)
    # a model with an moe: block whose layer pattern places no MoE layer (a Hugging Face
    # moe_layer_freq past the depth) is priced as the dense model it is: no moe block
    moe_out = moe_report(settings, plan, est, pick, moe) if layer_list(settings.model).has_experts else None
    return {
        **({"calibration": out_cal} if out_cal else {}),
        **({"assumed": assumed} if (assumed := assumed_lines(settings, plan, i)) else {}),
        "plan": plan_dict(plan, settings, i),
        "params": pc.as_dict(),
        "layers": pc.layers.described(_num(pick(plan.seq)), _num(pick(plan.cp))),  # labelled as priced at the row's cp
        "memory": memory,
        "flops": flops,
        "time": time,
        "throughput": thr,
        "placement": placement.report(settings, plan, pick, placed),
        **({"moe": moe_out} if moe_out else {}),
    }


def ramp_estimates(settings: Settings, plan: PlanArrays) -> list:
    """[(from_tokens, batch, steps, step_s, memory_bytes), ...] of the job's batch ramp
    (planner/batch_ramp.py): the plans (one or many, the same sequence length) evaluated at each
    phase's batch, the micro-batch and everything else theirs (Megatron keeps the micro-batch and
    runs fewer micro-batches a step); steps: batch_ramp.phase_steps of the run's tokens; step_s
    and memory_bytes (the heaviest stage's total) shaped as plan.gbs. One evaluation prices every
    phase of every plan: the plans tiled over the phases (phase-major, phase_plans), each phase's
    figures a slice of the result, the same elementwise arithmetic as one evaluation per phase."""
    from .batch_ramp import phase_steps

    seq = int(np.asarray(plan.seq).flat[0])
    steps = phase_steps(settings.batch_schedule, seq, settings.tokens)
    shape = np.shape(plan.gbs)
    n = int(np.prod(shape, dtype=np.int64))
    est = evaluate(settings, phase_plans(plan, [b for _, b in settings.batch_schedule]))
    step, memory = np.asarray(est.time.total), np.asarray(est.memory.total)
    return [(t, b, k_steps, step[k * n:(k + 1) * n].reshape(shape), memory[k * n:(k + 1) * n].reshape(shape))
            for k, ((t, b), k_steps) in enumerate(zip(settings.batch_schedule, steps))]


def phase_plans(plan: PlanArrays, batches) -> PlanArrays:
    """The plans (0-d or 1-d, n of them) at each of the batches, as one 1-d PlanArrays of
    len(batches) x n plans, phase-major (element k x n + j: plan j at batches[k]); only gbs differs
    from the plans'."""
    shape = np.shape(plan.gbs)
    n = int(np.prod(shape, dtype=np.int64))
    k = len(batches)

    def tiled(v):
        return np.tile(np.broadcast_to(v, shape).reshape(n), k)

    cols = {f.name: tiled(getattr(plan, f.name)) for f in fields(plan)}
    cols["gbs"] = np.repeat(np.asarray([int(b) for b in batches], dtype=np.int64), n)
    return PlanArrays(**cols)


def batch_ramp(settings: Settings, plan: PlanArrays, i=None, ramp=None) -> dict:
    """The run's time with the job's batch ramp (planner/batch_ramp.py) of plan i (None: a 0-d
    plan): each phase's steps (batch_ramp.phase_steps) times the step of the plan at that phase's
    batch (ramp_estimates, or `ramp` where the caller has them). Memory: each phase's peak beside
    its step, and the largest over the phases (memory_peak_bytes_ramp: what `fit` gates on; a
    phase's smaller batch has fewer micro-batches in flight with the same micro-batch). Returns the
    throughput block's extras: training_steps_ramp, training_days_ramp, gpu_hours_ramp,
    memory_peak_bytes_ramp and the phases."""
    pick = (lambda v: np.asarray(v)) if i is None else (lambda v: np.asarray(v)[i] if np.ndim(v) else np.asarray(v))
    seq = int(pick(plan.seq))
    phases, seconds = [], 0.0
    for t, b, n, step_s, memory_bytes in (ramp if ramp is not None else ramp_estimates(settings, plan)):
        step = float(pick(step_s))
        seconds += n * step
        phases.append({"from_tokens": t, "global_batch": b,
                       "microbatches_per_step": int(b // (pick(plan.dp) * pick(plan.mbs))),
                       "steps": n, "tokens": n * b * seq, "step_s": step, "days": n * step / 86400.0,
                       "memory_bytes": float(pick(memory_bytes))})
    return {"training_steps_ramp": float(sum(p["steps"] for p in phases)), "training_days_ramp": seconds / 86400.0,
            "gpu_hours_ramp": seconds * settings.gpus / 3600.0,
            "memory_peak_bytes_ramp": max(p["memory_bytes"] for p in phases), "batch_ramp": phases}


def moe_arrays(settings: Settings, plan: PlanArrays, est: Estimate) -> dict:
    """The figures of moe_report that are priced on the plans (arrays, one element per plan): what
    the routing imbalance adds to the step and to the heaviest stage's memory over balanced routing
    (the same plans priced at moe_rank_imbalance 1.0, the capacity factor kept), the routed
    experts' grouped-GEMM efficiency, tokens per expert and the busiest EP rank's load. Priced once
    for many plans (search.rows_of), each row reads its element, as moe_report on one plan would."""
    balanced = replace(settings, moe_rank_imbalance=1.0)
    imb_s = est.time.total - step_time(balanced, plan)[0].total
    imb_b = est.memory.total - mem.heaviest_stage(mem.stage_memory_terms(balanced, plan))[0].total
    kind = next(k for k in layer_list(settings.model).kinds if k.has_experts)
    ctx = plan_context(settings, plan)
    rows = [(g, c) for g, c in kind.mlp.gemms(ctx) if g.name.startswith("expert_")]
    times = price_gemms(rows, settings.hardware, plan.precision)
    flops = sum(2.0 * g.M * g.N * g.K * c for g, c in rows)
    peak = np.where(plan.precision == FP8, settings.hardware.fp8_TFLOPS or np.nan, settings.hardware.bf16_TFLOPS) * 1e12
    return {"imbalance_s": imb_s, "imbalance_bytes": imb_b, "grouped_gemm_efficiency": flops / sum(times.values()) / peak,
            "tokens_per_expert": kind.mlp.expert_tokens(ctx), "rank_load": np.broadcast_to(ctx.cf, np.shape(plan.ep)),
            "fp8_dispatch": fp8_dispatch(settings, plan)}


def dense_gating_report(settings: Settings, plan: PlanArrays, pick) -> dict:
    """DeepSpeed-MoE's dense gating of one plan, one MoE layer and micro-batch on one GPU (layers/moe.py [18]): the
    gate's tokens S and the capacity C, the bytes it saves for the backward by tensor (memory.py [dg]), its forward
    and backward transients, the einsums' FLOPs forward and backward (two GEMMs and three of 2 S E C M each)."""
    kind = next(k for k in layer_list(settings.model).kinds if k.has_experts)
    ctx = plan_context(settings, plan)
    cf, floor = settings.moe_capacity_factor, settings.moe_min_capacity
    fwd, bwd = kind.mlp.gating_einsum_rows(ctx, cf, floor)
    t_f, t_b = kind.mlp.gating_transient_bytes(ctx, cf, floor)
    return {
        "tokens": _num(pick(kind.mlp.gating_tokens(ctx))),
        "capacity": _num(pick(kind.mlp.gating_capacity(ctx, cf, floor))),
        "saved_bytes": {k: _num(pick(v)) for k, v in kind.mlp.gating_saved_bytes(ctx, cf, floor).items()},
        "forward_transient_bytes": _num(pick(t_f)),
        "backward_transient_bytes": _num(pick(t_b)),
        "einsum_flops_forward": _num(pick(sum(2.0 * g.M * g.N * g.K * c for g, c in fwd))),
        "einsum_flops_backward": _num(pick(sum(2.0 * g.M * g.N * g.K * c for g, c in bwd))),
    }


def moe_report(settings: Settings, plan: PlanArrays, est: Estimate, pick, arrays: dict | None = None) -> dict:
    """explain's MoE terms of one plan: the dispatcher (planner/dispatch.py) with its dispatch
    and combine seconds per step on the critical stage before any overlap (their exposed share
    is time.ep_comm_s) and the EP group's tier; the routed experts' grouped GEMMs' efficiency
    (their forward FLOPs over the GEMM model's time, against the dense peak of the precision;
    compute.py prices each expert's GEMM at its own shape, so few tokens per expert show
    here); the fixed MoE overhead per step (the host issue time the dispatcher's synchronisation
    exposes, time.moe_host_s) the model adds; the busiest EP rank's load (planner/imbalance.py) and
    what the routing imbalance adds to the step and to the heaviest stage's memory over balanced
    routing (moe_arrays; `arrays`: theirs where the caller priced them for many plans at once)."""
    x = est.time_extra
    a = moe_arrays(settings, plan, est) if arrays is None else arrays
    e_local = settings.model.moe.num_experts / int(pick(plan.ep))
    return {
        "dispatcher": settings.moe_dispatcher,
        "dispatcher_description": dispatch.DESCRIPTIONS[settings.moe_dispatcher],
        "fp8_dispatch": bool(pick(a["fp8_dispatch"])),
        "route_nodes": int(settings.moe_route_nodes) or None,
        # HybridEP's non-blocking dispatch: the permuted rows a local token allocates (layers/moe.py [19]), where set
        **({"capacity_rows": _num(pick(capacity_rows(settings, plan)))} if settings.moe_hybridep_capacity_factor else {}),
        # group-limited routing (the model's; planner/dispatch.py caps the nodes a token reaches)
        "route_groups": ([settings.model.moe.expert_groups, settings.model.moe.groups_per_token]
                         if settings.model.moe.expert_groups else None),
        "dispatch_s": _num(pick(x["moe_dispatch_s"])),
        "combine_s": _num(pick(x["moe_combine_s"])),
        # the dispatcher's own small exchanges where the stack's code runs them, beside dispatch_s and combine_s, before
        # any overlap: alltoall (stack moe_alltoall_exchanges, planner/dispatch.py [12]) the probabilities' all-to-alls
        # (forward and backward) and the token counts' all-gather or all-to-all (forward, never hidden by the all-to-all
        # overlap); allgather (stack moe_allgather_exchanges, [13]) the probabilities' all-gather and its gradient's
        # reduce-scatter, and the routing map's all-gather (forward), all exposed
        "probs_a2a_s": _num(pick(x["moe_probs_a2a_s"])),
        "counts_gather_s": _num(pick(x["moe_counts_gather_s"])),
        # of those, the forward all-to-alls selective recompute re-runs (a model code whose save list
        # leaves them out: torchtitan's qwen3; step.ep_comm, plan.sac_reruns_exchange; Megatron-Core's
        # recompute_modules moe, whose checkpoint holds them: planner/recompute_modules.py)
        "sac_rerun_s": _num(pick(x["moe_sac_rerun_s"])),
        # the dispatcher's group: EP, or etp x ep for DeepEP's and Hybrid-EP's kernels (planner/dispatch.py)
        "ep_tier": ("none" if int(pick(dispatch.group_size(dispatch.CODES[settings.moe_dispatcher], plan.ep,
                                                            mem.etp_of(plan)))) == 1
                    else comm.LINK_NAMES[int(pick(x["ep_tier"]))]),
        "rank_load": _num(pick(a["rank_load"])),
        "load_balancing": (f"measured {settings.moe_rank_imbalance:g}" if settings.moe_rank_imbalance
                           else f"{settings.moe_load_balancing} rule"),
        "imbalance_s": _num(pick(a["imbalance_s"])),
        "imbalance_bytes": _num(pick(a["imbalance_bytes"])),
        "tokens_per_expert": _num(pick(a["tokens_per_expert"])),
        "local_experts": e_local,
        "grouped_gemm_efficiency": _num(pick(a["grouped_gemm_efficiency"])),
        # where the stack's code runs the routed experts as a Python loop of per-expert GEMMs (stack moe_experts,
        # layers/moe.py [16]), not a token dispatcher with grouped GEMMs: experts per_expert_loop
        **({"experts": "per_expert_loop"} if stack_of(settings).moe_experts is not None else {}),
        # where the stack gates densely (DeepSpeed-MoE, stack moe_gating): its tensors, one MoE layer and micro-batch
        **({"dense_gating": dense_gating_report(settings, plan, pick)} if stack_of(settings).moe_gating is not None
           else {}),
        "fixed_overhead_s": _num(pick(est.time["moe_host"])),
        "fixed_overhead": "host issue time per step the dispatcher's synchronisation exposes (step.moe_host)"
                          if stack_of(settings).moe_host is not None else "not modelled for this stack",
    }
