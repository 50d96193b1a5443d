"""The MoE token dispatchers' codes and each plan's dispatcher (job field moe_dispatcher; fit's dispatcher search:
the plans' `disp` column with Settings.dispatcher_rows). A leaf module (no planner imports), so that memory.py,
below dispatch.py in the call order (tests/test_structure.py RANKS), reads each plan's dispatcher without calling
up; dispatch.py re-exports its names."""

from __future__ import annotations

import numpy as np

ALLTOALL, ALLGATHER, DEEPEP, DEEPEP_LL, HYBRIDEP = 0, 1, 2, 3, 4
NAMES = {ALLTOALL: "alltoall", ALLGATHER: "allgather", DEEPEP: "deepep", DEEPEP_LL: "deepep_ll", HYBRIDEP: "hybridep"}
CODES = {v: k for k, v in NAMES.items()}


def table_rows(settings) -> tuple:
    """Settings.dispatcher_rows (a test's stand-in settings without the field: none)."""
    return getattr(settings, "dispatcher_rows", ())


def dispatcher_rows(settings, plan) -> tuple:
    """(dispatcher code, ep_comm_overlap) of each plan: the Settings' moe_dispatcher and ep_comm_overlap
    (scalars) where every plan runs them (Settings.dispatcher_rows empty: explain, and every search but fit's
    dispatcher search), else per plan from its `disp` column (-1: the Settings' own), each code's
    ep_comm_overlap looked up in the table Settings.dispatcher_rows (search.search_one builds it from each
    dispatcher's Settings; a code it lacks is an error, not a default). step.py and memory.py read it."""
    own = CODES[settings.moe_dispatcher]
    if not table_rows(settings):
        return own, bool(settings.ep_comm_overlap)
    d = np.asarray(plan.disp)
    codes = np.where(d < 0, own, d)
    known = np.zeros(len(NAMES), dtype=bool)
    epo = np.zeros(len(NAMES), dtype=bool)
    for c, e in table_rows(settings) + ((own, settings.ep_comm_overlap),):
        known[c], epo[c] = True, bool(e)
    if not known[codes].all():
        raise ValueError(f"dispatcher codes {sorted(set(codes[~known[codes]].tolist()))} not in Settings.dispatcher_rows")
    return codes, epo[codes]


def plan_dispatchers(settings, plan) -> tuple:
    """((dispatcher name, the plans that run it: a bool mask, or None for every plan), ...) of the dispatchers the
    plans run (dispatcher_rows): the Settings' moe_dispatcher alone (None) where Settings.dispatcher_rows is empty
    or one dispatcher is run by every plan, else each present one with its mask (a dispatcher no plan runs is not
    listed: its figures would be taken nowhere). memory.py prices its dispatcher terms per plan so ([ep], [dh], the
    routing saves), as step.ep_comm prices the transfers."""
    if not table_rows(settings):
        return ((settings.moe_dispatcher, None),)
    codes, _ = dispatcher_rows(settings, plan)
    present = np.zeros(len(NAMES), dtype=bool)
    present[codes] = True
    kinds = np.flatnonzero(present)
    if len(kinds) == 1:
        return ((NAMES[int(kinds[0])], None),)
    return tuple((NAMES[int(k)], codes == k) for k in kinds)
