"""Where each parallel group of a plan lands, and which tier its collectives use, for explain:
TP, CP, PP, DP (with CP: the DP x CP gradient group), and the folded expert grid's expert-TP,
EP and expert-data-parallel groups (moe.expert_strides),
each a group of `ranks` members `stride` apart in the rank order, placed by comm.group_link in
a job of settings.gpus GPUs (the hardware's NVLink domains filled in order or in segments:
comm.domain_in_use). The step-time model prices every collective at the same placement
(step.Collectives), so this report and the prices cannot disagree. Units: ranks, GPUs.
"""

from __future__ import annotations

import numpy as np

from . import comm, moe


def groups(settings, plan) -> dict:
    """{axis: (ranks, stride, traffic pattern)} of a plan (arrays)."""
    st = comm.strides_by_code(plan.order, tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    dp_stride = np.where(plan.cp > 1, np.minimum(st["dp"], st["cp"]), st["dp"])
    out = {"tp": (plan.tp, st["tp"], comm.PATTERN_RING), "cp": (plan.cp, st["cp"], comm.PATTERN_RING),
           "pp": (plan.pp, st["pp"], comm.PATTERN_RING), "dp": (plan.dp * plan.cp, dp_stride, comm.PATTERN_RING)}
    if settings.model.moe is not None:  # the folded expert grid (moe.expert_strides)
        e_st = moe.expert_strides(plan, st)
        out["etp"] = (moe.etp_of(plan), e_st["etp"], comm.PATTERN_RING)
        out["ep"] = (plan.ep, e_st["ep"], comm.PATTERN_ALL_PAIRS)
        out["expert_dp"] = (moe.expert_dp(plan), e_st["edp"], comm.PATTERN_RING)
    return out


def links(settings, plan) -> tuple:
    """(NVLink domain in use, {axis: (ranks, stride, comm.GroupLink)}) of plans (arrays): report's
    figures for every plan at once (search.rows_of: one group_link call per axis for all the rows,
    elementwise, instead of one per row and axis)."""
    params = comm.comm_params(settings.hardware)
    return _domain(settings, params), {axis: (ranks, stride, comm.group_link(ranks, stride, params, pattern=pattern,
                                                                             job_gpus=settings.gpus))
                                       for axis, (ranks, stride, pattern) in groups(settings, plan).items()}


def _domain(settings, params) -> int:
    return int(np.asarray(comm.domain_in_use(settings.gpus, params)))


def report(settings, plan, pick, placed=None) -> dict:
    """{axis: {ranks, stride, tier, nvlink_domains, members_per_domain}} for one plan (`pick`
    selects its element); a group of one rank has tier "none". placed: links(settings, plan),
    where the caller has them for every plan (each plan reads its element)."""
    if placed is None:  # this plan alone, placed at its own (scalar) group sizes
        params = comm.comm_params(settings.hardware)
        axes = {}
        for axis, (ranks, stride, pattern) in groups(settings, plan).items():
            r, s = int(pick(ranks)), int(pick(stride))
            axes[axis] = (r, s, comm.group_link(r, s, params, pattern=pattern, job_gpus=settings.gpus))
        placed = _domain(settings, params), axes
    domain, axes = placed
    out = {"nvlink_domain_in_use": domain}
    for axis, (ranks, stride, gl) in axes.items():
        r = int(pick(ranks))
        out[axis] = {"ranks": r, "stride": int(pick(stride)),
                     "tier": "none" if r == 1 else comm.LINK_NAMES[int(pick(gl.link))],
                     "nvlink_domains": int(pick(gl.domains)), "members_per_domain": int(pick(gl.local_ranks))}
    return out
