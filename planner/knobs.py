"""The run-calibration knobs the cost models read (RunKnobs on Settings), without the
calibration profile's pydantic models: plan.py and explain.py import this at start-up, and
planner/profile.py (which re-exports every name here) only where a profile is read or
written, so `planner fit` without --calibration does not build the profile's classes
(issue 24: start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Optional

from .efficiencies import HBM_EFFICIENCY

# ============================================================================= run section
# The knobs a measured training run calibrates (`planner calibrate run`,
# planner/calibrate/run.py fits them). Each is a named, bounded efficiency parameter that
# the cost models read as plain data (RunKnobs, on Settings); its identity value is the
# uncalibrated model's, so a profile without a `run` section prices every plan exactly as
# before. `transform` is the fit's variable: "log" fits ln(value), "log1p" ln(1 + value)
# (a slack whose uncalibrated value is 0). Bounds: the physically meaningful range, or,
# for a scale, a factor the model may be off by before its mechanism, not the cluster, is
# wrong (a fit that ends on a bound is reported as such).
class RunParameter(NamedTuple):
    name: str
    kind: Literal["time", "memory"]
    lower: float
    upper: float
    transform: Literal["log", "log1p"]
    meaning: str


RUN_PARAMETERS: dict[str, RunParameter] = {p.name: p for p in (
    RunParameter("gemm_efficiency_scale", "time", 0.3, 2.0, "log",
                 "multiplies the throughput of every GEMM and attention-core kernel (tensor-core work: the "
                 "sustained clock, kernel and library versions); 1 = hardware_db / gemm-section rates"),
    RunParameter("internode_bandwidth_scale", "time", 0.2, 2.0, "log",
                 "multiplies the bandwidth of every collective the model prices across NVLink domains "
                 "(InfiniBand / RoCE / EFA: congestion, rails, adapter firmware); latency unchanged; 1 = comm.py"),
    RunParameter("nvlink_bandwidth_scale", "time", 0.2, 2.0, "log",
                 "multiplies the bandwidth of every collective the model prices inside one NVLink domain; "
                 "latency unchanged; 1 = comm.py"),
    # the memory-bound scale may raise the achieved HBM bandwidth to the datasheet peak, never above it
    RunParameter("memory_bound_efficiency_scale", "time", 0.3, 1.0 / HBM_EFFICIENCY, "log",
                 "multiplies the achieved HBM bandwidth of memory-bound kernels (norms, activations, loss, "
                 "optimizer, FSDP copies); 1 = compute.HBM_EFFICIENCY of the datasheet bandwidth, at most the peak"),
    RunParameter("overlapped_exposed_fraction", "time", 0.01, 1.0, "log",
                 "share of overlapped communication time that still lands on the critical path (the stack's "
                 "overlap.overlapped_exposed_fraction replaced); default: the stack's value"),
    RunParameter("allocator_slack", "memory", 0.0, 1.0, "log1p",
                 "the caching allocator's reserved - allocated at the peak, as a fraction of allocated "
                 "(the stack's memory.allocator_slack replaced); default: the stack's value"),
)}
# the figures of explain's JSON each knob changes
RUN_PARAMETER_AFFECTS = {
    "gemm_efficiency_scale": ("time.compute_s", "time.bubble_s", "hidden communication windows"),
    "internode_bandwidth_scale": ("time.tp_comm_s", "time.cp_comm_s", "time.pp_comm_s", "time.dp_comm_s"),
    "nvlink_bandwidth_scale": ("time.tp_comm_s", "time.cp_comm_s", "time.pp_comm_s", "time.dp_comm_s"),
    "memory_bound_efficiency_scale": ("time.compute_s", "time.optimizer_s", "time.moe_permute_s"),
    "overlapped_exposed_fraction": ("time.dp_comm_exposed_s", "time.pp_comm_s", "time.ep_comm_s (with ep_comm_overlap)"),
    "allocator_slack": ("memory.terms.allocator_slack", "memory.total_bytes"),
}
# parameters whose uncalibrated value comes from the stack (RunKnobs None = the stack's)
STACK_PARAMETERS = {"overlapped_exposed_fraction": ("overlap", "overlapped_exposed_fraction"),
                    "allocator_slack": ("memory", "allocator_slack")}


@dataclass(frozen=True)
class RunKnobs:
    """The run-calibration knobs the cost models read (step.py, memory.py). Scalars, or,
    where the fit evaluates many candidate values at once, arrays that broadcast with the
    plan's. None: the stack's own figure. The identity (RunKnobs()) is the uncalibrated model."""

    gemm_efficiency_scale: Any = 1.0
    internode_bandwidth_scale: Any = 1.0
    nvlink_bandwidth_scale: Any = 1.0
    memory_bound_efficiency_scale: Any = 1.0
    overlapped_exposed_fraction: Any = None
    allocator_slack: Any = None
    applied: tuple = ()  # names set by a run calibration (for explain)
    not_applied: Optional[str] = None  # why a profile's run section does not apply here


IDENTITY_KNOBS = RunKnobs()
