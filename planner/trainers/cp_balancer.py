"""torchtitan's parallelism.context_parallel_load_balancer, read by both releases' readers (torchtitan03: 0.3.0's
launch line, release/0.3 @4f9e9a47d config/configs.py l. 235; torchtitan: main's TOML, @e347b1e5e config/job_config.py
l. 431): one function, each caller passing its release's sources (BalancerSource).

torch's CP load balancers both releases build (0.3: distributed/context_parallel/api.py cp_shard l. 217-264; main
@e347b1e5e: distributed/context_parallel.py cp_shard l. 138-246, the balancer l. 183-211): headtail
(_HeadTailLoadBalancer) and ptrr (_PTRRLoadBalancer, over the BlockMask); None disables load balancing; any other
name raises ValueError ("Invalid load_balancer_type ... Must be one of: 'headtail', 'ptrr', or None") in the first
step's prepare_context_parallel_input (only where cp is enabled); "" raises at start-up (0.3 configs.py
ParallelismConfig.__post_init__ l. 262-266; main job_config.py Parallelism.__post_init__ l. 439-444).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlannerError
from . import fmt_ignored
from .report import listed

CP_LOAD_BALANCERS = ("headtail", "ptrr")


@dataclass(frozen=True)
class BalancerSource:
    """Where one torchtitan release reads parallelism.context_parallel_load_balancer, for load_balancer's messages."""
    release: str       # "torchtitan 0.3" / "torchtitan @e347b1e5e"
    empty_cite: str    # where "" is refused at start-up
    shard_cite: str    # where the balancer is built (an unknown name raises there, in the first step)
    key: str           # the key as the reader's messages name it
    none_hint: str     # how the user gives None (no load balancing) in this format
    quote: bool = False  # echo a name quoted (a TOML string) rather than as a launch line spells it


def load_balancer(where: str, v, stated: bool, job: dict, assumed: list, ignored: list, not_modelled: list,
                  src: BalancerSource, run_cp: int | None = None) -> None:
    """parallelism.context_parallel_load_balancer (0.3: configs.py l. 235; main @e347b1e5e: config/job_config.py
    l. 431; default "headtail" in both): "" refused as both refuse it at start-up; a name torch's cp_shard does not
    build kept as the job's cp_load_balancer, refused where CP runs by the start-up rule TORCHTITAN_CP_LOAD_BALANCER_NAME (it
    raises in the first step) and listed as ignored at cp 1; None (no load balancing: contiguous sequence chunks, the
    causal mask's work piled on the last CP rank) read as the job field cp_load_balance false where CP runs (the
    attention core at the last rank's share, step.cp_balance_factor); the default and ptrr are the balanced split
    (step.cp_kernel_factor). One function for both releases' readers (torchtitan03's option loop with LB_03,
    torchtitan.read_sections with _lb_main()); src names the release's sources. run_cp: the degree CP runs at (the
    command line's over the file's: the key is read where that CP runs, issue 22 "flags beat files"); None: the job's."""
    cp = run_cp if run_cp is not None else job.get("cp", 1)
    key = "parallelism.context_parallel_load_balancer"
    if v == "":
        raise PlannerError(f"{where}{src.key}'': {src.release} stops at start-up ({src.empty_cite}: "
                           "'context_parallel_load_balancer cannot be an empty string. Use None to disable load "
                           "balancing.')", src.none_hint)
    if v is not None and v not in CP_LOAD_BALANCERS:
        # a name torch's cp_shard does not build: the job's cp_load_balancer as stated, refused at cp > 1 by the start-up
        # rule TORCHTITAN_CP_LOAD_BALANCER_NAME (code 105: ValueError 'Invalid load_balancer_type' in the first step),
        # so fit's CP rows are masked as explain of their reproduce lines (the file read again at --cp) refuses them
        job["cp_load_balancer"] = v
        if cp == 1:
            ignored.append(listed("ignored", key, v, "context_parallel_degree 1: never read; a plan at cp > 1 (fit's CP "
                                  f"rows, or --cp) would stop in {src.release}'s first step, refused by start-up rule "
                                  f"TORCHTITAN_CP_LOAD_BALANCER_NAME ({src.shard_cite}: ValueError 'Invalid "
                                  "load_balancer_type')"))
        return
    name = fmt_ignored(key, v)
    if cp == 1 and stated and (v is None or v == "ptrr"):  # nothing split here, but the run's setting where CP runs:
        # fit's CP rows (and their reproduce lines, which read the file again at their --cp) run with it, priced and
        # checked so (plan.resolve says it is ignored at cp 1: balance_ignored_at_cp1)
        if v is None:
            job["cp_load_balance"] = False
            assumed.append(listed("assumed", "cp_load_balance", False, f"{name} (no load balancing) where CP runs: "
                                  "context_parallel_degree 1 here splits nothing; a plan at cp > 1 (fit's CP rows, or "
                                  "--cp) runs each CP rank's one contiguous sequence chunk, the causal mask's work on "
                                  f"the last rank, priced so (step.cp_balance_factor; {src.shard_cite}, load_balancer "
                                  "None)"))
        else:
            job["cp_load_balancer"] = v
            assumed.append(listed("assumed", "cp_load_balancer", v, f"torch's {v} load balancer where CP runs: "
                                  "context_parallel_degree 1 here splits nothing; a plan at cp > 1 (fit's CP rows, or "
                                  "--cp) shards with it, priced balanced and checked by its start-up rule "
                                  f"(startup.TORCHTITAN_CP_PTRR_MASK; {src.shard_cite})"))
    elif cp == 1:
        if stated:
            ignored.append(listed("ignored", key, v, "context_parallel_degree 1"))
    elif v is None:  # the job field cp_load_balance false: priced (step.cp_balance_factor)
        job["cp_load_balance"] = False
        assumed.append(listed("assumed", "cp_load_balance", False, f"{name} (no load balancing: each CP rank holds "
                              f"one contiguous sequence chunk, so under the causal mask the last of the {cp} ranks runs "
                              f"(2 cp - 1) / cp = {(2 * cp - 1) / cp:g}x the balanced share of a global layer's attention "
                              "core, priced so; a sliding-window layer its own share, a chunked layer priced balanced: "
                              f"step.cp_balance_factor; {src.shard_cite}, load_balancer None)"))
    elif stated:  # (the default, headtail, is the split priced: said nowhere, as before)
        if v == "ptrr":  # the job field cp_load_balancer: its mask checked at start-up (startup.TORCHTITAN_CP_PTRR_MASK)
            job["cp_load_balancer"] = v
        assumed.append(listed("assumed", key, v, f"torch's {v} load balancer shares the causal mask's work evenly over "
                              f"the CP ranks, as priced ({src.shard_cite})"))
