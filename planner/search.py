"""`planner fit`: build the space (space.py), evaluate it with the cost functions `explain`
uses, drop what breaks a constraint or does not fit, rank. Units: bytes, seconds, tokens.

There is no formula here. Memory is `memory.memory_terms`, time is `step.step_time`, the
rows are `explain.evaluate` + `explain.to_json` on the winning plans, so every row is what
`planner explain` prints for the same settings (tests/test_search.py checks it row by row).

Order of work (every step an array operation over many candidates; the only Python loops
run over blocks of CHUNK candidates, to keep the arrays in cache, and over the K rows shown):
 1. constraint codes for every base row (space.constraint_codes, resolve's rules);
 2. memory of every valid (base row, recompute) candidate; fits = total <= usable HBM.
    One memory term reads the rank order, NCCL's NVLS buffers (memory.py [nv]): a candidate's
    memory is priced once, at its lightest order (with_order_memory: the term once per distinct
    mesh at each order, added to the base-order total), so fits means it fits at some order;
    each other order adds order_extra (>= 0), and a (candidate, order) pair fits, is priced and
    counted only where that total fits (_other_order_mask, _fit_orders). The
    layers' activations (memory.layer_memory) are priced once per distinct tuple of the fields
    they read over all the candidates (layer_memory_groups), each block of memory_totals
    gathering its candidates' share (terms.gather). row_groups groups candidates (base row,
    recompute index) by grouping their distinct base rows (cheaper than the candidates), as the
    prefilter's compute floors are priced too (candidate_floors). memory_totals prices the
    distinct base rows against every recompute choice at once (the plan's fields (n,), its
    recompute (R, 1)): what reads no recompute (states, placement, buffers) is priced once per
    row and broadcast against the (R, n) terms that read it;
 3. step time of each fitting candidate at its first rank order (its lightest: _first_order), and of its stack
    variants (best_variants). A variant that differs from variant 0 only in TP overlap
    changes only TPO_TERMS (tp_comm, bubble) of variant 0's terms, so its step is at least
    variant 0's step without them: it is tried only where that can reach the k-th best of
    variant 0 (with a relative margin BOUND_MARGIN); elsewhere the choice is deferred and
    made, as an unbounded search makes it, only for the candidates whose other orders step 4
    evaluates. The premise is checked bit for bit on every variant evaluated (if it fails,
    the bound is dropped: Counts.bound_fallback). A variant is tried only where it fits: the
    memory of step 2 plus what the variant adds (variant_memory: TP overlap's buffers and
    workspaces, memory.tp_overlap_total; an fp8 recipe whose weight copies differ from
    variant 0's, memory.weight_copy_bytes: that recipe's memory in full), and a candidate's
    memory is then its chosen variant's;
 4. the other rank orders, only where they can still reach the top K (branch and bound):
    a placement changes where groups communicate, never the compute or the optimizer step,
    and every time term is >= 0, so step >= compute + optimizer for every order. A
    candidate whose compute + optimizer exceeds the K-th best step time already found
    cannot enter the top K. Both facts are checked on every pair the search evaluates
    (the same compute + optimizer for every order of a candidate, step >= it); if either
    fails, because the cost model changed, every order is evaluated instead
    (Counts.bound_fallback). tests/test_search.py checks the facts and that the ranking
    equals an exhaustive evaluation's;
 5. rank by the objective (time: step time; cost: GPU-seconds per token, gpus x step /
    tokens per step, which orders like time for one GPU count and compares GPU counts;
    memory: bytes per GPU), ties broken by lower memory (then by time); every key rounded to
    9 significant digits (rank_key: values equal to relative 1e-9 are ties, so a last-bit
    difference of the sums cannot defeat the tie-break). Orders that give
    a candidate the same step time are one row: the first of them (comm.ORDER_CODES).

A batch ramp (the job's batch_size_schedule, planner/batch_ramp.py; Space.phases): the plan is
the last phase's batch, and a candidate must run every phase (space._phase_codes: each phase's
batch passes the batch rules, counted under that phase). Its memory (step 2) is the largest of
memory_total at each phase's batch, the micro-batch fixed (memory_totals, _phase_peaks: the
layers' activations read no batch and are priced once; the other phases only where the last
batch fits). Its "step" (steps 3-5) is the run's time per last-batch step:
sum over the phases of weight x step_time at that phase's batch (step_times;
batch_ramp.phase_weights: the phase's steps x last batch x seq / tokens), so the time objective
ranks by the whole run's time and cost (GPU-seconds per token) is the run's GPU-seconds over its
tokens; the compute floors and the rest without TPO_TERMS are the same weighted sums
(candidate_floors, step_times), and each fact the bounds rest on holds phase by phase with
weights >= 0, so it holds for the sums (rounding is monotone). One step_time call per block prices
every phase (the block's plans tiled over the phases, explain.phase_plans; blocks of TIME_CHUNK
plan-phases), and one memory_total call per block every phase but the last (_tile_phases); the
weighted sums and the peaks are taken phase by phase on the slices, the same additions in the same
order as one call per phase (the figures bit for bit those). A job without a ramp runs the code it
ran before.

The MoE dispatcher (`planner fit` without --moe-dispatcher: fit(search_dispatchers=True)) is a stack
variant too, one Settings per dispatcher the stack runs (dispatcher_settings; Space.settings_of): the
variants cross the stack options with the dispatchers, variant 0 the stack's default (one no start-up
rule restricts, so every candidate runs it); another is tried where ep > 1 and its start-up rules pass
(Space.variant_ok), where it fits (its buffers and saved permutations: variant_memory), and under
best_variants' bound as a TP-overlap variant is (it changes only DISPATCHER_TERMS besides TPO_TERMS,
checked bit for bit), the bound tightened on the best steps found so far and on the prefilter's k-th
(_seed_steps, _first_orders' cap). Each row is priced with its dispatcher's Settings (rows_of). The
step time reads each candidate's dispatcher per plan (the plans' `disp` column, Space.plans; the space's
Settings.dispatcher_rows, step.dispatcher_rows): one step_time call prices every dispatcher, the same
numbers as each dispatcher's Settings (tests/test_dispatch_rows.py). best_variants still runs one
dispatcher at a time (_variant_groups), tightening its bound after each. Memory reads the dispatcher per
plan too (memory._per_dispatcher, dispatch_codes.plan_dispatchers: the buffers [ep], the held attributes [dh], the routing
saves; the layers grouped by `disp`, memory.LAYER_FIELDS): a variant's memory is priced for every
dispatcher but variant 0's in one memory_totals call (_dispatchers_memory: the candidates' base rows
alone, once per dispatcher, each copy's `disp` its code; memory_totals pays per call for every base
row of its space), where _LazyFit first needs one of them on a candidate; the same bytes as each
dispatcher's own Settings, every term (tests/test_dispatch_rows.py). _first_orders defers no candidate that has another
distinct rank order (best_variants' eager mask): its choice would otherwise be re-run before its other
orders are priced, one more step_time and memory_totals call per dispatcher.
A candidate over the usable HBM with variant 0's dispatcher that another fits is a candidate too
(_other_dispatchers; issue 22: torchtitan 0.3's blocking HybridEP row of Qwen3-30B-A3B / 16 H100 at tp 1,
ep 8 holds 70.5 GiB where its all-to-all twin needs 76 GiB): the candidates priced in full (not by their
model states' floor, which reads no dispatcher) with ep > 1 are priced under every other dispatcher that
runs on them (with variant 0's other options, which hold the least, as variant_memory assumes of variant
0), in one memory_totals call, where their compute floor over floor_variants can reach _prefilter's K0 as
a fitting candidate's must (every one where no prefilter applies); those it fits join the fitting ones,
their variant 0 left out (best_variants takes variant 0 only where it fits: their step starts at inf, so
the first fitting variant tried is taken, a strictly faster one after it; one no variant of which is
tried, its step inf, makes no row and no other order). Their bytes under each dispatcher are the
_LazyFit's (_LazyFit.seed: not priced again). Counted once: a candidate fits (Counts.feasible) where
variant 0 or another dispatcher fits it, else did not fit; of those, Counts.dispatcher_unpriced (fit's
counts line says how many) are the ones whose other dispatchers were not priced (their floor ranks them
below the top rows: whether one fits is not known). Where nothing fits, the closest plan is the least
memory over the dispatchers (with that dispatcher's Settings). fit(around=...) prices every such candidate
(rank_config's `of` is Counts.feasible, which must not depend on the bounds there). The cost (branch
dispsearch against main f2f2cc6, DeepSeek-V3 / 2,048 H800): whole-process user time, median of 3 run
alternately, 1.61 -> 1.94 s; instructions (cachegrind, PYTHONHASHSEED=0) 11.82e9 -> 14.56e9: 29,793 to
41,937 candidates a vocabulary space priced under three more dispatchers (their floors within K0), of
which 73 fit and none ranks; their excess over the usable HBM has a median of 120-140 GiB against a
largest saving of 3.3 GiB. So a candidate whose lower bound of memory_total over the dispatchers
(_dispatchers_floor, memory.activations_floor: the end stages' model states and quantized weight copies
plus their layers' activations, each layer kind's figures the least over the dispatchers) exceeds the
usable HBM is not priced under them: it fits with none, is counted as did not fit and not as unpriced,
and is never the closest plan where one fits (in a space where none fits it is priced as before, for the
closest plan); the bound is checked on every candidate priced (tests/test_dispatcher_floor.py on every
such candidate of this case and of torchtitan 0.3's Qwen3-30B-A3B / 16 H100). It leaves 25,384-37,499 of
those 29,793-41,937 candidates unpriced: instructions 12.97e9 (main 2933a1e) -> 11.86e9 (llama3-405b /
16,384 H100, no dispatcher search: 4.288e9 both); the rows, counts and closest plans unchanged. A dense
model (no dispatcher search) runs the code it ran before (llama3-405b / 16,384
H100: 0.85 -> 0.86 s user).

Compile off (space.uncompiled_choices, space.uncompiled_space): where the job leaves torch.compile to the
search and a start-up rule reads it (startup.COMPILE_RULES: torchtitan's mxfp8 with TP under compile),
each compiled variant's compile-off twin is a variant too, tried only where its compiled row is refused
(Space.variant_ok; elsewhere compile on is never slower in the model, so the twin is dominated) and
priced in full (variant_memory: the layers' saved bytes read compile; floor_variants: its own floor).
A base row whose own options (variant 0) are refused compiled is no candidate of the space; where it
runs with variant 0's twin it is searched in a second space of those rows alone, variant 0 the twin
(_search_space on each; fit merges their Ranked as it merges GPU counts). Its candidates move from the
rule's count to the memory and time counts; `considered` counts each once.

The routed experts' grouped GEMMs (plan.fge; space.variant_choices: an fp8 MoE job on a stack that runs
both, stack_db runs.fp8_grouped_experts) are a stack variant too: variant 0 the stack's rule, the other
tried where its start-up rules pass (Space.variant_ok: torchtitan's float8 grouped converter at pp = cp =
1), priced in full (variant_memory: the token-group padding moves the layers' saved bytes; its own
compute floor, floor_variants).

Priced once: the candidates _prefilter prices for its bound (its seed) keep their variant-0
step, floor and rest at the first order; _first_orders takes them from the seed (_kept_v0)
instead of pricing those candidates again (the same function of the same candidate). With a
dispatcher search, the seed's candidates whose every variant _seed_steps priced (those its bounded
run deferred nothing of) keep their choice too (_seed_steps' known, _first_orders').

Ranking a given plan (`planner fit CONFIG`'s own, priced by explain's path: fit(around=its row_objective)):
each bound above prunes only what sorts after both the k-th best and that plan (the prefilter keeps a
candidate whose floor's objective is at most the plan's, with BOUND_MARGIN for rank_key's rounding; the
variants' reach and bound and the rank orders' bound take the larger of the two), so that every row that
sorts before it or ties with it is priced as an unbounded search prices it, and is counted
(rows_before: Counts.around_before, around_same; rank_config). One exception spares work and not
exactness: a candidate of one distinct rank order whose step so far already sorts before the plan, and
which cannot reach the k-th best, tries no more bounded variants (whatever it chooses, it is one row
before the plan). The rows are those of the same search without it; the count equals the one taken over
every fitting candidate's step at every order (keep_feasible; tests/test_fit_config.py).

Counts: considered = broke a constraint + did not fit + fit, every candidate of the space
(space.py) counted once, a rank order being part of a candidate; prefilter_dropped: of the
fitting ones, those _prefilter left unpriced (fit's counts line says how many).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field, fields, replace
from typing import NamedTuple

import numpy as np

from . import files
from . import memory as mem
from . import placement
from .errors import NoFitError, PlannerError
from .explain import evaluate, memory_groups, moe_arrays, phase_plans, ramp_estimates, to_json
from .catalog import load_stack
from .comm import nvls_enabled
from .plan import (FP8_RECIPES, FSDP, SHARDING_NAMES, RECOMPUTE_NAMES, HSDP, PlanArrays, Settings, named_mode,
                   VOCAB_TP, mode_dp_overlap, padded_rows, resolve, rule_codes, rule_reasons, stack_options,
                   with_padded_vocab)
from .schema import Job
from .space import (DISPATCHER_COLUMN, FGE_COLUMN, OK, VARIANT_FIELDS, Space, SpaceOptions, batch_divides, build_space, check_count, fill_variant, pairs, row_counts,
                    settings_for, uncompiled_choices, uncompiled_space, variant_choices)
from .layers import layer_list
from .params import count_params
from .stacks import plan_context, stack_of
from .terms import Groups, KeyedPlan, gather
from .step import FLOOR_FIELDS, _wgrad_field, group_floor, step_time

# Candidates per evaluation block. Memory: 32,768 (15 int64 columns of 256 KiB stay in cache;
# measured 5x faster than one block of a million). Step time: 262,144, because each
# step_time call pays a fixed cost for its collectives (comm.apply_unique, group_collective)
# that a larger block spreads thinner (measured on the 2-core CI machine).
CHUNK = 32768
TIME_CHUNK = 262144
OBJECTIVES = ("time", "memory", "cost")
GiB = 2.0**30


@dataclass
class Counts:
    considered: int = 0
    broke_constraint: int = 0
    did_not_fit: int = 0
    feasible: int = 0
    reasons: dict = field(default_factory=dict)  # reason text -> candidates
    memory_evaluations: int = 0  # candidates whose memory was computed
    time_evaluations: int = 0  # candidates whose step time was computed
    bound_fallback: bool = False  # the branch-and-bound's facts failed: every order was evaluated
    slack_dropped: int = 0  # (mesh, pp, vpp) splits left out of the space by --max-layer-slack
    prefilter_dropped: int = 0  # fitting candidates (x rank orders, as feasible) _prefilter's compute floor dropped before pricing communication
    # fit's dispatcher search: of did_not_fit, the candidates (x rank orders) that do not fit with the stack's default
    # dispatcher and whose other dispatchers' memory was not priced, their compute alone ranking them below the top
    # rows (_other_dispatchers): whether another dispatcher fits them is not known
    dispatcher_unpriced: int = 0
    # fit's dispatcher search (dispatcher_settings): the dispatchers tried, and those left out with why
    dispatchers: tuple = ()
    dispatchers_left: tuple = ()
    # fit(around=keys) (`planner fit CONFIG`'s own plan): the table rows whose ranking keys sort before those
    # keys (rows_before), and whether one has the same keys
    around_before: int = 0
    around_same: bool = False

    def add(self, o: "Counts") -> None:
        for k in ("considered", "broke_constraint", "did_not_fit", "feasible", "memory_evaluations", "time_evaluations",
                  "slack_dropped", "prefilter_dropped", "dispatcher_unpriced", "around_before"):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        self.bound_fallback |= o.bound_fallback
        self.around_same |= o.around_same
        self.dispatchers = self.dispatchers or o.dispatchers
        self.dispatchers_left = self.dispatchers_left or o.dispatchers_left
        for k, v in o.reasons.items():
            self.reasons[k] = self.reasons.get(k, 0) + v

    def as_dict(self) -> dict:
        return dict(considered=self.considered, broke_constraint=self.broke_constraint, did_not_fit=self.did_not_fit,
                    feasible=self.feasible, broke_by_reason=dict(self.reasons),
                    memory_evaluations=self.memory_evaluations, time_evaluations=self.time_evaluations,
                    bound_fallback=self.bound_fallback)


@dataclass
class Ranked:
    """The ranked candidates of one GPU count (arrays, best first) and what they need to
    become rows."""

    settings: Settings
    space: Space
    base: np.ndarray  # base row
    rc: np.ndarray  # recompute index
    order: np.ndarray  # rank-order code
    objective: np.ndarray
    memory: np.ndarray
    step: np.ndarray
    var: np.ndarray = None  # stack variant index (space.variants)


@dataclass
class FitResult:
    rows: list  # explain JSON objects, best first
    counts: Counts
    objective: str
    gpus: list
    wall_s: float
    warnings: list
    feasible: list = field(default_factory=list)  # optional: every feasible candidate (tests, fit --plot)
    best: list = field(default_factory=list)  # the best row of each GPU count that has one, in count order
    # what the job left out and was assumed (its training length): printed once by fit; a row is
    # the explain of its own command, which names the length (--seq-len), so rows do not carry it
    assumed: list = field(default_factory=list)
    around: tuple = None  # the ranking keys fit(around=...) counted the rows before (rank_config)


def _blocks(n: int, chunk: int = CHUNK):
    for a in range(0, n, chunk):
        yield slice(a, min(a + chunk, n))


def memory_totals(space: Space, bidx: np.ndarray, rcidx: np.ndarray, f8r=None) -> np.ndarray:
    """Per-GPU bytes (memory.memory_terms total: memory.memory_total) of candidates (base row, recompute index);
    f8r: with that fp8 recipe (precisions.FP8_RECIPE_CODES) instead of variant 0's.

    Priced over the distinct base rows among the candidates, each against every recompute
    choice at once: the plan's fields are the rows' (n,) and its recompute the choices (R, 1),
    so what reads no recompute (the model states, the placement, the buffers: most of the
    work) is priced once per row and numpy broadcasts it against the (R, n) terms that do
    (the layers' activations and recompute buffer: layer_memory_groups, gathered (R, n)); each
    candidate reads its (recompute, row) element. Broadcasting repeats an operand, never
    reorders an operation, so each element is the number memory_total gives that candidate
    alone. A (row, recompute) pair no candidate has is priced beside the others and dropped.
    Each candidate's memory is its own (memory_terms works element by element), so the blocks
    may take the rows in any order: sorted by pipeline split (pp, vpp), a block holds a
    few of the splits whose per-split work (pipeline.stage_inflight_kinds, stage_kind_counts)
    each block would otherwise repeat for every split of the space; that per-split work itself
    (memory._placement) is priced once over all the rows (memory.placement_groups) and each block
    gathers its share, as the layers' activations."""
    return _memory_totals(space, bidx, rcidx, f8r)[0]


def fitting_memory(space: Space, bidx: np.ndarray, rcidx: np.ndarray, usable: float, whole: bool = False) -> tuple:
    """(memory_totals of the candidates, held) where a candidate is priced in full only if it can
    fit: a base row whose model states alone (memory.states_floor, a lower bound of memory_total)
    exceed `usable` bytes does not fit with any recompute choice, and its candidates get that
    floor, itself over `usable`, instead of their total (every figure at most `usable` is
    memory_totals', and so is every fits = total <= usable). Each row priced in full is checked
    to hold the bound (its floor at most each of its totals); where one does not (held False),
    every candidate is priced in full, as memory_totals prices them. On llama3-405b on 16,384
    H100 the floor keeps 47,834 of 71,557 base rows. whole: a third item, the bool mask of the
    candidates priced in full (False: given their row's floor; the model states read no MoE
    dispatcher, memory.STATE_FIELDS, so such a candidate fits with none: _other_dispatchers)."""
    out, held, floored = _memory_totals(space, bidx, rcidx, None, usable)
    if not whole:
        return out, held
    mask = np.zeros(np.size(space.base.tp), dtype=bool)
    mask[floored] = True
    return out, held, ~mask[bidx]


def with_order_memory(space: Space) -> Space:
    """The space with its rows' lightest rank orders (Space.nvls_group, light, light_shift, nvls_least, nvls_table),
    where NCCL's NVLS buffers [nv], the one memory term that reads the order, differ between a valid row's distinct
    orders or between its lightest order and its own (base) order; else the space unchanged. memory_totals prices a
    candidate at its lightest order (its base-order total plus light_shift, the term being the same on every stage
    and in every moment: additive), so step 2's `fits` is "fits at some order with variant 0", and each other order
    adds order_extra (>= 0). The term reads the mesh and the order only (memory.NVLS_FIELDS): the valid rows are
    grouped by their mesh, base order and order_ok row (packed), and the term priced once per group at each order it
    runs and at its base order."""
    st = space.settings
    if space.light is not None or not np.size(space.base.tp):
        return space
    if not nvls_enabled(st.nccl_nvls_enable, getattr(st.hardware, "nvls", False)):  # job / hardware settings: no term
        return space
    rows = np.flatnonzero(space.codes == OK)
    if not len(rows):
        return space
    fields_ = tuple(f for f in mem.NVLS_FIELDS if f != "order") + ("order",)
    cols = _columns(space.base, rows, fields_)
    packed = np.packbits(space.order_ok[rows], axis=1)  # each row's distinct orders, 8 a byte
    for j in range(packed.shape[1]):
        cols[f"ok{j}"] = packed[:, j].astype(np.int64)
    keys = fields_ + tuple(f"ok{j}" for j in range(packed.shape[1]))
    g = Groups(KeyedPlan(cols), keys)
    if g.active:
        plan, index, size, first = g.plan, g.index, g.size, rows[g.first]
    else:
        plan, index, size, first = KeyedPlan(cols), np.zeros(len(rows), dtype=np.int64), 1, rows[:1]
    n_o = len(space.orders)
    ok = space.order_ok[first]  # (groups, orders)
    need = np.flatnonzero(ok.ravel())
    # the (group, order) pairs its rows run and each group's own (base) order, in one call (the term's cost is per
    # distinct group placement, comm.domain_piece_columns)
    cols = {f: np.r_[np.broadcast_to(np.asarray(getattr(plan, f)), (size,))[need // n_o],
                     np.broadcast_to(np.asarray(getattr(plan, f)), (size,))] for f in fields_}
    cols["order"][:len(need)] = space.orders[need % n_o]
    both = np.broadcast_to(mem.nvls_buffer_bytes(st, KeyedPlan(cols)), (len(need) + size,))
    table = np.full(size * n_o, np.inf)  # inf where the group runs no such order
    table[need] = both[:len(need)]
    table, own = table.reshape(size, n_o), both[len(need):]
    col = np.argmin(table, axis=1)  # the least, the first of ties (argmin's first): the first distinct order if all tie
    least = table[np.arange(size), col]
    shift = least - own
    if not np.any(shift) and np.all((table == least[:, None]) | ~ok):  # no row's memory reads its order
        return space
    group = np.zeros(np.size(space.base.tp), dtype=np.int64)
    group[rows] = index
    return replace(space, nvls_group=group, light=space.orders[col], light_shift=shift, nvls_least=least,
                   nvls_table=table)


def order_extra(space: Space, bidx, order) -> np.ndarray:
    """What the memory of base rows bidx at rank-order codes `order` (the space's orders, broadcast against bidx) adds
    to their memory_totals (priced at their lightest order, with_order_memory): NCCL's NVLS buffers there less at the
    lightest order (Space.nvls_table, nvls_least), >= 0 at the orders of order_ok; 0 where the space's memory reads no
    order."""
    bidx = np.asarray(bidx, dtype=np.int64)
    order = np.asarray(order, dtype=np.int64)
    shape = np.broadcast(bidx, order).shape
    if space.light is None:
        return np.zeros(shape)
    g = space.nvls_group[bidx]
    return space.nvls_table[g, np.searchsorted(space.orders, order)] - space.nvls_least[g]


def _memory_totals(space: Space, bidx: np.ndarray, rcidx: np.ndarray, f8r=None, cap=None) -> tuple:
    """(memory_totals, held, the base rows given fitting_memory's floor): memory_totals' work, with
    fitting_memory's floor where cap is given."""
    out = np.empty(len(bidx))
    if not len(bidx):
        return out, True, bidx[:0]
    b, rc = space.base, space.recompute
    n_base, n_rc = np.size(b.tp), len(rc)
    present = np.zeros(n_base, dtype=bool)
    present[bidx] = True
    rows = np.flatnonzero(present)  # the base rows among the candidates
    rows = rows[np.lexsort(tuple(np.broadcast_to(getattr(b, f), np.shape(b.tp))[rows]
                                 for f in ("split_loss", "split_emb", "vpp", "pp")))]
    # the pipeline placement, once per distinct tuple of the fields it reads over all the rows (the
    # columns it and the floor both read taken once)
    pipe, state = mem.PIPELINE_FIELDS + ("tp",), mem.STATE_FIELDS + ("schedule",)
    cols = _columns(b, rows, tuple(dict.fromkeys(pipe + state)))
    if space.placement is not None:  # (vocab_spaces': the parent's rows placed once for all its spaces)
        placed, p_index, p_size = space.placement[0], space.placement[1][rows], space.placement[2]
    else:
        placed, p_index, p_size = mem.placement_groups(space.settings, KeyedPlan({f: cols[f] for f in pipe}))
    # the rows' model-state groups, once over all of them: the states floor's, and each block's (memory_total's
    # `states`: _PerLayer.state_groups numbers its block's groups by them instead of ranking the fields again)
    sg = Groups(KeyedPlan({f: cols[f] for f in mem.STATE_FIELDS}), mem.STATE_FIELDS)
    s_index = sg.index if sg.active else None
    floor, dropped = None, rows[:0]
    if cap is not None:  # fitting_memory: the rows whose model states alone exceed cap are not priced
        floor = mem.states_floor(space.settings, KeyedPlan({f: cols[f] for f in state}),
                                 (placed, p_index, p_size), sg)
        kept = floor <= cap
        dropped, dropped_floor = rows[~kept], floor[~kept]
        rows, floor = rows[kept], floor[kept]
        if p_index is not None:
            p_index = p_index[kept]
        if s_index is not None:
            s_index = s_index[kept]
    n = len(rows)
    totals = np.empty((n_rc, n))
    if n:
        # the rows grouped by the layer fields but recompute: the layers' activations and TE's dummy
        # weight-gradient shapes are priced once per group
        base = _base_groups(space, rows, LAYER_BASE_FIELDS)
        # every (row, recompute) pair, recompute-major: pair (rows[i], r) at r * n + i; every row has every
        # recompute choice, so row_groups' pairs are every (group, recompute) pair, group-major: the pair of
        # row i (its group base[1][i]) and r is group x n_rc + r (_all_pairs)
        layers, index, size = layer_memory_groups(space, None, None, pairs=_all_pairs(space, base))
        index = base[1][None, :] * n_rc + np.arange(n_rc)[:, None]
        # and TE's cached dummy weight-gradient shapes (they read the layer fields, not recompute): priced on
        # the same groups' one row each and gathered onto the rows (each row's numbers are its tuple's)
        dummies = gather(mem.dummy_wgrad_shapes(space.settings, base[0]), base[1], base[2])
        for s in _blocks(n, max(CHUNK // n_rc, 1)):
            p = b.take(rows[s])
            p.recompute = rc[:, None]
            if f8r is not None:
                p.f8r = np.full(s.stop - s.start, f8r, dtype=np.int64)
            totals[:, s] = mem.memory_total(space.settings, p, gather(layers, index[:, s], size),
                                            (placed, None if p_index is None else p_index[s], p_size),
                                            mem.take_dummies(dummies, s), None if s_index is None else s_index[s])
        if space.light is not None:  # at each row's lightest rank order (with_order_memory)
            totals += space.light_shift_of(rows)
        if space.phases:  # a batch ramp: the peak over its phases (module docstring, step 2)
            _phase_peaks(space, rows, index, layers, size, totals, f8r)
    if floor is not None:
        if not np.all(floor <= totals):  # the bound failed: price every candidate (fitting_memory)
            return _memory_totals(space, bidx, rcidx, f8r)[0], False, rows[:0]
        if len(dropped):  # their floor, over cap, stands for each of their totals
            rows = np.concatenate([rows, dropped])
            totals = np.concatenate([totals, np.broadcast_to(dropped_floor, (n_rc, len(dropped)))], axis=1)
    at = np.empty(n_base, dtype=np.int64)
    at[rows] = np.arange(len(rows))
    return totals[rcidx, at[bidx]], True, dropped


def _phase_peaks(space: Space, rows, index, layers, size, totals, f8r=None) -> None:
    """memory_totals' (recompute, row) totals at the last batch raised, in place, to their peak over
    the batch ramp's other phases (memory_total at each phase's batch, the micro-batch fixed; the
    layers' activations read no batch: the same groups). Priced only for the rows with a
    recompute choice that fits at the last batch: the peak is at least the last batch's, so a
    pair over the usable memory there is over it at its peak too (its total stays the last
    batch's, a lower bound, which only the closest-plan message of a search where nothing fits
    reads)."""
    b, rc = space.base, space.recompute
    last = int(np.asarray(b.gbs).flat[0]) if np.size(b.gbs) else 0
    batches = [bb for bb, _ in space.phases if bb != last]  # _phase_plans' phases: the last batch's is priced
    if not batches:
        return
    k = len(batches)
    cols = np.flatnonzero((totals <= mem.capacity(space.settings)[1]).any(axis=0))
    # every other phase of a block in one memory_total call: the rows tiled over the phases on the last
    # axis (phase-major, _tile_phases), blocks of CHUNK (recompute, row, phase) triples
    for s in _blocks(len(cols), max(CHUNK // (len(rc) * k), 1)):
        c = cols[s]
        m = len(c)
        p = b.take(rows[c])
        if f8r is not None:
            p.f8r = np.full(m, f8r, dtype=np.int64)
        q = _tile_phases(p, m, batches)
        q.recompute = rc[:, None]
        at = mem.memory_total(space.settings, q, gather(layers, np.tile(index[:, c], (1, k)), size))
        if space.light is not None:  # (at the rows' lightest order, as the last batch's totals)
            at = at + np.tile(space.light_shift_of(rows[c]), k)
        at = np.broadcast_to(at, (len(rc), k * m))
        for j in range(k):  # the peak: np.maximum, exact in any order
            totals[:, c] = np.maximum(totals[:, c], at[:, j * m:(j + 1) * m])


def _tile_phases(p: PlanArrays, m: int, batches) -> PlanArrays:
    """The m plans p (1-d fields of m, or scalars, which stay) at each of the batches: fields of
    len(batches) x m, phase-major (element j x m + i: plan i at batches[j]); only gbs differs."""
    cols = {f.name: (np.tile(v, len(batches)) if np.ndim(v) else v)
            for f in fields(p) for v in (getattr(p, f.name),)}
    cols["gbs"] = np.repeat(np.asarray([int(x) for x in batches], dtype=np.int64), m)
    return PlanArrays(**cols)


def _columns(b: PlanArrays, rows: np.ndarray, fields: tuple) -> dict:
    """{field: int64 values at the base rows `rows`} of the base plans b (fields or properties)."""
    def col(v):  # by take; a scalar default or a constant column (space._constant) stays one value, viewed at
        v = np.asarray(v, dtype=np.int64)  # every row (the same values as broadcast and indexed, without the copies)
        if v.ndim == 0 or (v.strides == (0,) and len(v)):
            return np.broadcast_to(v.flat[0], (len(rows),))
        return v.take(rows)

    # PlanArrays.microbatches, a property over every base row, from the rows' own columns (the same integers)
    return {f: (col(b.gbs) // (col(b.dp) * col(b.mbs)) if f == "microbatches" else col(getattr(b, f))) for f in fields}


def _base_groups(space: Space, rows: np.ndarray, fields: tuple) -> tuple:
    """(KeyedPlan of one row per group, each row's group, groups) of the base rows `rows` grouped by
    `fields` (terms.Groups; one row: its own group)."""
    cols = _columns(space.base, rows, fields)
    g = Groups(KeyedPlan(cols), fields)
    return (g.plan, g.index, g.size) if g.active else (g.plan, np.zeros(len(rows), dtype=np.int64), len(rows))


def row_groups(space: Space, bidx: np.ndarray, rcidx: np.ndarray, fields: tuple) -> tuple:
    """(KeyedPlan of one candidate per group, each candidate's group, groups) of candidates (base
    row, recompute index) grouped by `fields` (columns of the base rows) and their recompute
    index: the distinct base rows among the candidates are grouped (terms.Groups), and a group is
    (such a tuple, a recompute choice) that some candidate has. Cheaper than grouping the
    candidates themselves (a base row stands for each of its recompute choices), for a function
    that reads only `fields` and the recompute mode and is elementwise (the Groups contract):
    priced on the KeyedPlan and gathered back (terms.gather), each candidate gets its numbers."""
    b, rc = space.base, space.recompute
    n_base = np.size(b.tp)
    present = np.zeros(n_base, dtype=bool)
    present[bidx] = True
    at = (np.cumsum(present) - 1)[bidx]  # each candidate's place among the base rows present
    plan, index, size = _base_groups(space, np.flatnonzero(present), fields)
    pair = index[at] * len(rc) + rcidx  # (row group i, recompute r) at i * len(rc) + r
    used = np.zeros(size * len(rc), dtype=bool)
    used[pair] = True  # the pairs some candidate has
    kept = np.flatnonzero(used)
    keyed = KeyedPlan({**{f: np.asarray(getattr(plan, f)).take(kept // len(rc)) for f in fields},
                       "recompute": rc.take(kept % len(rc))})
    return keyed, (np.cumsum(used) - 1)[pair], len(kept)


def _all_pairs(space: Space, base: tuple) -> tuple:
    """row_groups' (KeyedPlan, -, groups) where the candidates are every base row of _base_groups' `base`
    with every recompute choice: every (group, recompute) pair is some candidate's, group-major (pair
    (i, r) at i x R + r, as row_groups numbers them); no candidate index (None): the caller's rows
    read theirs from base's group index."""
    plan, _, size = base
    rc = space.recompute
    keyed = KeyedPlan({**{f: np.repeat(np.asarray(getattr(plan, f)), len(rc)) for f in LAYER_BASE_FIELDS},
                       "recompute": np.tile(rc, size)})
    return keyed, None, size * len(rc)


# the fields a layer's activations read but recompute (memory.LAYER_FIELDS): base-row columns
LAYER_BASE_FIELDS = tuple(f for f in mem.LAYER_FIELDS if f != "recompute")


def layer_memory_groups(space: Space, bidx: np.ndarray, rcidx: np.ndarray, pairs=None) -> tuple:
    """(memory.layer_memory per group, each candidate's group, groups) of candidates (base row,
    recompute index): layer_memory priced once per distinct tuple of memory.LAYER_FIELDS over
    all the candidates (row_groups), not once per block of them (memory_totals hands each block
    its share, terms.gather): each candidate gets the numbers memory_total's own grouping gives it.
    pairs: row_groups' result where the caller has it (memory_totals: _all_pairs)."""
    settings = space.settings
    keyed, index, size = row_groups(space, bidx, rcidx, LAYER_BASE_FIELDS) if pairs is None else pairs
    pc = count_params(settings.model)
    layers = mem.layer_memory(settings, keyed, plan_context(settings, keyed), pc.layers)
    return layers, index, size


def step_times(space: Space, bidx, rcidx, order, var=None, rest: bool = False):
    """(step seconds, compute + optimizer (+ moe_permute + moe_host) seconds) from step.step_time; with
    rest, also the step without the terms a TP-overlap variant changes (TPO_TERMS), summed in
    the same order as the total (so step >= rest in floating point where those terms are >= 0)."""
    n = len(bidx)
    step, floor, without = np.empty(n), np.empty(n), np.empty(n)
    var = np.zeros(n, dtype=np.int64) if var is None else np.broadcast_to(np.asarray(var, dtype=np.int64), (n,))
    # a batch ramp prices every phase of a block in one call (_phase_parts): blocks of TIME_CHUNK plan-phases
    for s in _blocks(n, max(TIME_CHUNK // max(len(space.phases), 1), 1)):
        # (fit's dispatcher search: each candidate with its variant's dispatcher, the plans' `disp` column
        # (Space.plans), which step_time looks up in the space's Settings.dispatcher_rows: one call for all)
        p = space.plans(bidx[s], rcidx[s], order[s], var[s])
        step[s], floor[s], w = _phase_parts(space, space.settings, p, rest)
        if rest:
            without[s] = w
    return (step, floor, without) if rest else (step, floor)


def _distinct(a: np.ndarray) -> np.ndarray:
    """np.unique of a 1-d array of small non-negative integers (dispatcher and variant codes, a _LazyFit's
    candidate positions): the same sorted values, from a presence table over 0..max instead of numpy's
    hash table (numpy 2.4 hashes every element, npy_fnv1a: 21 M instructions of DeepSeek-V3 / 2,048 H800's
    dispatcher search, cachegrind)."""
    a = np.asarray(a)
    if not a.size:
        return a[:0].copy()
    present = np.zeros(int(a.max()) + 1, dtype=bool)
    present[a] = True
    return np.flatnonzero(present).astype(a.dtype, copy=False)


def _phase_parts(space: Space, settings: Settings, p, rest: bool) -> tuple:
    """_step_parts of plans p with `settings`; with a batch ramp each phase's at its batch, weighted
    (batch_ramp.phase_weights): one _step_parts call on the plans tiled over the phases
    (explain.phase_plans, phase-major), the weighted sum taken phase by phase on its slices in the
    phases' order (the same additions as one call per phase)."""
    if not space.phases:
        return _step_parts(settings, p, rest, _bound_terms(space))
    n = int(np.size(p.gbs))
    a, f, r = _step_parts(settings, phase_plans(p, [b for b, _ in space.phases]), rest, _bound_terms(space))
    step = floor = 0.0
    w = 0.0 if rest else None
    for k, (_, wk) in enumerate(space.phases):
        s = slice(k * n, (k + 1) * n)
        step = step + wk * a[s]
        floor = floor + wk * f[s]
        if rest:
            w = w + wk * r[s]
    return step, floor, w


def _bound_terms(space: Space) -> tuple:
    """The step terms a variant bounded by best_variants may change: TPO_TERMS, and with a dispatcher
    search DISPATCHER_TERMS too."""
    return TPO_TERMS + (DISPATCHER_TERMS if space.dispatchers is not None else ())


def _step_parts(settings: Settings, p: PlanArrays, rest: bool, skip: tuple = None) -> tuple:
    """(step, compute + optimizer (+ moe_permute + moe_host), step without TPO_TERMS or None) of
    step.step_time on plans p: step_times' three numbers for one batch."""
    t, extra = step_time(settings, p)
    # the compute-heaviest stage's micro-batches (with the MoE routing/permutation and host-issue shares: compute too,
    # no stack variant changes them), the DP copies and the optimizer step: the same at every rank order, where
    # the critical stage's compute (t.compute) is not (critical_stage weighs each stage's traffic at the order)
    floor = extra["order_floor_s"]
    skip = TPO_TERMS if skip is None else skip
    return t.total, floor, (t.sum(*(k for k in t.keys() if k not in skip)) if rest else None)


def _phase_plans(space: Space, p, every: bool = False):
    """The plans p (at the last batch) at each phase's batch of the job's ramp (space.phases):
    the phases whose batch is not the last one's, or every phase (every=True); none without a
    ramp. Only the batch changes: Megatron keeps the micro-batch and runs fewer micro-batches a
    step (explain.batch_ramp)."""
    last = int(np.asarray(space.base.gbs).flat[0]) if np.size(space.base.gbs) else 0
    for b, _ in space.phases:
        if every or b != last:
            yield replace(p, gbs=np.full(np.shape(p.gbs), b, dtype=np.int64))


# The step-time terms a variant that differs from variant 0 only in TP overlap may change:
# overlap hides TP communication behind the layer's GEMMs (step.tp_comm), and the pipeline
# bubble is a share of the micro-batch time that includes it (step.step_time). The search
# checks on every such variant it evaluates that the other terms are variant 0's, bit for bit.
TPO_TERMS = ("tp_comm", "bubble")
# The terms a variant that differs from variant 0 only in TP overlap and the MoE dispatcher may change
# besides (fit's dispatcher search): the dispatch and combine (step.ep_comm), the expert-TP pair the flex
# dispatchers do without (step.etp_pair, in tp_comm), the host synchronisation (step.moe_host, which
# differs between dispatchers only padded to capacity), the bubble that holds them, and the pipeline's
# blocking warm-up and flush sends (step.pp_warmup_flush, in pp_comm: one more forward chunk with the
# EP overlap, plan.ep_comm_overlap, which allgather runs without: Qwen3-30B-A3B / 128 B200 fp8's
# interleaved plans; without it there the check failed and every variant was priced unbounded);
# checked bit for bit as TPO_TERMS are.
DISPATCHER_TERMS = ("ep_comm", "moe_host", "pp_comm")
BOUND_MARGIN = 1e-6  # relative: a bound prunes only what lies this far past the k-th (far beyond rank_key's 1e-9)


def variant_memory(space: Space, bidx: np.ndarray, rcidx=None, fm=None, dispatchers: bool = True) -> np.ndarray:
    """(variants, candidates) bytes each stack variant adds to the memory fm priced with variant
    0 (memory_totals of (bidx, rcidx)): through TP overlap's buffers and workspaces
    (memory.tp_overlap_total: its difference between the variant and variant 0; 0 for a
    variant with variant 0's TP overlap), additive: the same bytes on every pipeline stage,
    outside the allocator or in every moment of _stage_terms (workspaces); and through an fp8
    recipe whose quantized weight copies differ from variant 0's (memory.weight_copy_bytes: on
    a stack with memory.fp8_weight_cache, where the plan does not shard with FSDP, which keeps
    no copies: memory.quantized_weight_terms): that recipe's memory_totals less fm, priced in
    full on those candidates (the copies differ by stage, so the heaviest stage may change).
    TP overlap reads no recipe (memory.TP_OVERLAP_FIELDS), so the two add. Measured without the
    second part (the search before it): on B200 the megatron stack's mxfp8 copies hold 2 x
    1.03125 B a linear weight element against delayed scaling's 1 B (no transposes on
    Blackwell), and the search chose mxfp8 on llama3-405b / 256 GPUs for candidates gated
    24.8 GiB below their memory; on Hopper blockwise holds 2 x 4 / 128^2 B more than delayed.
    A candidate that does not fit with variant 0 is not tried with a recipe whose copies are
    smaller (none in the catalog: the first recipe a stack lists holds the least,
    tests/test_search.py). A variant whose torch.compile differs from variant 0's (the compile-off
    twins: space.uncompiled_choices) is priced in full with all its options (_options_memory) where
    it can run (Space.variant_ok), that figure replacing the two parts above. Uncompiled saves no
    less than compiled (the schema's check on compiled_kernels), so a candidate that does not fit
    compiled would not fit uncompiled either; in the uncompiled space (variant 0 the twin) a compiled
    variant that runs there is, like a smaller recipe, not tried where the twin does not fit (none in
    the catalog: torchtitan lists mxfp8 last, so that space arises only with the recipe pinned, and
    its compiled variants are then refused on every one of its rows)."""
    b, n = space.base, len(bidx)
    cols = {f: np.broadcast_to(np.asarray(getattr(b, f)), np.shape(b.tp))[bidx]
            for f in mem.TP_OVERLAP_FIELDS if f != "tpo"}
    out = np.zeros((len(space.variants), n))
    t0 = int(space.variants[0, 0])
    totals = {}  # tp_overlap_total at each TP-overlap setting, priced once (a dispatcher search repeats them)

    def total(t):
        if t not in totals:
            totals[t] = mem.tp_overlap_total(space.settings, KeyedPlan({**cols, "tpo": np.full(n, t)}))
        return totals[t]

    for v in range(1, len(space.variants)):
        tv = int(space.variants[v, 0])
        if tv != t0:
            out[v] = total(tv) - total(t0)
    # a variant whose torch.compile differs from variant 0's (fit's compile-off twins, space.uncompiled_choices,
    # and the compiled variants of the uncompiled space): the kernels' saved bytes differ in every layer
    # (stacks.kernel_bytes), so its memory is memory_totals with all its options less fm, priced in full where
    # it can run (Space.variant_ok: a twin only where its compiled row is refused), in place of the TP-overlap
    # part above and the recipe part below (both are in that figure); so too a variant whose experts' grouped
    # GEMMs differ from variant 0's (fge: each expert's token group padded to another multiple, layers/moe.py
    # [12], and TE's quantized expert weights, memory.quantized_weight_terms)
    whole = (space.variants[:, 1] != space.variants[0, 1]) | (space.variants[:, FGE_COLUMN] != space.variants[0, FGE_COLUMN])
    if rcidx is not None and whole.any():
        plan = space.plans(bidx, rcidx)
        for v in np.flatnonzero(whole):
            ok = np.flatnonzero(space.variant_ok(plan, int(v)))
            out[v] = 0.0
            if len(ok):
                out[v, ok] = _options_memory(space, int(v), bidx[ok], rcidx[ok]) - fm[ok]
    if dispatchers and space.dispatchers is not None and rcidx is not None:
        _dispatcher_memory(space, bidx, rcidx, fm, out)
    settings, r0 = space.settings, int(space.variants[0, 3])
    same = mem.weight_copy_bytes(settings, r0)
    if rcidx is None or not stack_of(settings).memory.fp8_weight_cache:
        return out
    on = None
    for r in {int(x) for x in space.variants[:, 3]} - {r0}:
        if all(np.array_equal(x, y) for x, y in zip(mem.weight_copy_bytes(settings, r), same)):
            continue  # the same copies (delayed and tensorwise scaling: one Float8Tensor each)
        if on is None:
            on = np.flatnonzero(np.broadcast_to(np.asarray(b.sharding), np.shape(b.tp))[bidx] < FSDP)
        d = np.zeros(n)
        d[on] = memory_totals(space, bidx[on], rcidx[on], f8r=r) - fm[on]
        out[(space.variants[:, 3] == r) & ~whole] += d
    return out


def _options_memory(space: Space, v: int, bidx, rcidx) -> np.ndarray:
    """memory_totals of candidates (bidx, rcidx) with every stack option of variant v (VARIANT_FIELDS: its
    TP overlap, compile, DP overlap and fp8 recipe; the space's Settings, so variant 0's MoE dispatcher), on a
    space of their base rows alone (_few_memory): the layers' activations read compile, so the base rows
    themselves take the options (memory_totals' f8r= replaces the recipe after the layers are priced)."""
    rows, at = np.unique(bidx, return_inverse=True)
    sub = replace(space, base=fill_variant(space.base.take(rows), space.variants[v]), dispatchers=None,
                  placement=_placement_at(space, rows), **_light_at(space, rows))
    return memory_totals(sub, np.reshape(at, -1), rcidx)


def _dispatcher_memory(space: Space, bidx, rcidx, fm, out) -> None:
    """variant_memory's dispatcher part, added to `out` in place: a variant whose MoE dispatcher is not
    variant 0's holds that dispatcher's buffers (memory.dispatcher_buffer_bytes) and permutation saves
    (layers/moe.py routing_saved_bytes) instead, so its memory is memory_totals under that dispatcher
    less fm (every dispatcher in one call: _dispatchers_memory), priced in full on the candidates it can
    run on (ep > 1: variant_ok)
    and added to what its TP overlap and fp8 recipe add (taken as additive: the recipe's copies and
    the dispatcher's bytes are priced each against variant 0's)."""
    d0 = int(space.variants[0, DISPATCHER_COLUMN])
    on = np.flatnonzero(np.broadcast_to(np.asarray(space.base.ep), np.shape(space.base.tp))[bidx] > 1)
    codes = sorted({int(x) for x in space.variants[:, DISPATCHER_COLUMN]} - {d0})
    priced = _dispatchers_memory(space, codes, bidx[on], rcidx[on])  # every dispatcher in one call
    for code, m in zip(codes, priced):
        d = np.zeros(len(bidx))
        d[on] = m - fm[on]
        out[space.variants[:, DISPATCHER_COLUMN] == code] += d


class _LazyFit:
    """Where each stack variant fits (variant 0's memory fm + variant_memory <= usable) for fit's
    dispatcher search, variant_memory priced only on the candidates best_variants tries a variant
    on, each once (caches shared by every view `take` gives): its dispatcher part (_dispatcher_memory:
    memory_totals in full under that dispatcher, priced for every dispatcher but variant 0's at once:
    _dispatchers_memory) and the rest (TP overlap, fp8 recipes: variant_memory without it). The same
    bytes as variant_memory's, where priced."""

    def __init__(self, space: Space, fb, fr, fm, usable, root=None, at=None):
        self.space, self.usable = space, usable
        if root is None:
            self.fb, self.fr, self.fm = fb, fr, fm
            self.fixed = np.full((len(space.variants), len(fb)), np.nan)
            self.cache = {int(c): np.full(len(fb), np.nan) for c in set(space.variants[:, DISPATCHER_COLUMN].tolist())}
            self.ep = np.broadcast_to(np.asarray(space.base.ep), np.shape(space.base.tp))[fb]
            root, at = self, np.arange(len(fb))
        self.root, self.at = root, at

    def take(self, idx) -> "_LazyFit":
        return _LazyFit(self.space, None, None, None, self.usable, self.root, self.at[idx])

    def __len__(self):
        return len(self.at)

    def extra(self, v: int, idx) -> np.ndarray:
        """variant_memory's bytes of variant v on this view's candidates idx."""
        r, pos = self.root, self.at[idx]
        need = _distinct(pos[np.isnan(r.fixed[0, pos])])
        if len(need):  # (each candidate's bytes are its own: variant_memory works element by element)
            r.fixed[:, need] = variant_memory(self.space, r.fb[need], r.fr[need], r.fm[need], dispatchers=False)
        out = r.fixed[v, pos].copy()
        code, d0 = int(self.space.variants[v, DISPATCHER_COLUMN]), int(self.space.variants[0, DISPATCHER_COLUMN])
        if code == d0:
            return out
        cache = r.cache[code]
        need = _distinct(pos[np.isnan(cache[pos]) & (r.ep[pos] > 1)])
        if len(need):
            # every dispatcher but variant 0's on these candidates, in one call (best_variants tries the others
            # on much the same candidates; memory_totals' cost is mostly per call)
            others = sorted(c for c in r.cache if c != d0)
            for c, m in zip(others, _dispatchers_memory(self.space, others, r.fb[need], r.fr[need])):
                r.cache[c][need] = m - r.fm[need]
        return out + np.where(r.ep[pos] > 1, np.nan_to_num(cache[pos]), 0.0)

    def fits(self, v: int, idx) -> np.ndarray:
        return self.root.fm[self.at[idx]] + self.extra(v, idx) <= self.usable

    def fits0(self) -> np.ndarray:
        """Where variant 0 fits on this view's candidates (its extra is 0: fm <= usable); False only on the candidates
        _other_dispatchers let in (another dispatcher fits them)."""
        return self.root.fm[self.at] <= self.usable

    def seed(self, pos, codes, extra) -> None:
        """The dispatcher bytes _other_dispatchers priced (extra (codes, len(pos)), NaN where one does not run) of the
        root's candidates pos, taken as extra would price them (the same memory_totals figures less fm)."""
        for code, e in zip(codes, extra):
            self.root.cache[int(code)][pos] = e

    def chosen(self, fv) -> np.ndarray:
        """Each candidate's bytes with its chosen variant fv."""
        out = np.zeros(len(self.at))
        for v in _distinct(fv):
            i = np.flatnonzero(fv == v)
            out[i] = self.extra(int(v), i)
        return out


def _few_memory(space: Space, settings: Settings, bidx, rcidx) -> np.ndarray:
    """memory_totals with `settings` of a few candidates, on a space of their base rows alone:
    memory_totals pays on every call for every base row of its space (its row masks and columns:
    ~18 ms on DeepSeek-V3 / 2,048 H800's 2.8M rows, whatever the candidates), and each candidate's
    memory is its own (memory_totals' docstring), so the numbers are the same."""
    rows, at = np.unique(bidx, return_inverse=True)
    sub = replace(space, base=space.base.take(rows), settings=settings, dispatchers=None, placement=_placement_at(space, rows),
                  **_light_at(space, rows))
    return memory_totals(sub, np.reshape(at, -1), rcidx)


def _dispatchers_memory(space: Space, codes, bidx, rcidx) -> np.ndarray:
    """(len(codes), n) memory_totals of candidates (bidx, rcidx) under each MoE dispatcher code of fit's
    dispatcher search, in one call: a space of their base rows alone (as _few_memory), once per code, each
    copy's `disp` column its code, priced with the space's Settings, whose dispatcher_rows memory.py looks
    each plan's dispatcher up in (dispatch_codes.plan_dispatchers); the same bytes as memory_totals with that dispatcher's
    own Settings (tests/test_dispatch_rows.py: every memory term, bit for bit)."""
    rows, at = np.unique(bidx, return_inverse=True)
    k, n = len(codes), len(rows)
    if not k or not len(bidx):
        return np.zeros((k, len(bidx)))
    base = space.base.take(np.tile(rows, k))
    base.disp = np.repeat(np.asarray(codes, dtype=np.int64), n)
    sub = replace(space, base=base, dispatchers=None, placement=_placement_at(space, np.tile(rows, k)),
                  **_light_at(space, np.tile(rows, k)))
    at = np.reshape(at, -1)
    out = memory_totals(sub, (np.arange(k)[:, None] * n + at[None, :]).ravel(), np.tile(rcidx, k))
    return out.reshape(k, len(bidx))


def _other_dispatchers(space: Space, bidx, rcidx, fm, usable, floor: bool = True) -> tuple:
    """fit's dispatcher search on candidates (bidx, rcidx) that do not fit with variant 0 (the stack's default
    dispatcher; fm its memory_totals, over `usable`): (bool mask of those another dispatcher fits, (codes, n) bytes
    each such dispatcher adds to fm (NaN where it does not run or was not priced), the codes, each candidate's least
    memory over the dispatchers that run on it (inf where none, or not priced) and that dispatcher's code (the
    closest plan's), the bool mask of the candidates left unpriced by the floor, whether the floor held). Each
    dispatcher but variant 0's, with variant 0's other options (its TP overlap, compile, recipe: the variant of that
    dispatcher that holds the least, as variant_memory assumes of variant 0 itself), where it runs
    (Space.variant_ok: ep > 1, its start-up rules), priced in full: memory_totals under it, every dispatcher in
    one call (as _dispatchers_memory: each dispatcher's copies of the base rows it runs on, their `disp` its
    code). It fits where fm + (its memory - fm) <= usable: the figure _LazyFit.fits compares, so that a candidate
    counted as fitting here is one best_variants may try (its other variants gated each by its own memory).
    floor: a candidate whose _dispatchers_floor (a lower bound of its memory under every dispatcher, variant 0's
    too) exceeds usable fits with none and is not priced (DeepSeek-V3 / 2,048 H800: about 88% of them, a median
    120-140 GiB over usable where a dispatcher saves at most 3.3 GiB); the floor is checked on every candidate
    priced (at most fm and each priced memory), and where it is not, every candidate is priced (held False), as
    fitting_memory checks states_floor."""
    d0 = int(space.variants[0, DISPATCHER_COLUMN])
    rest = np.delete(space.variants, DISPATCHER_COLUMN, axis=1)
    same = np.flatnonzero(np.all(rest == rest[0], axis=1))  # variant 0's options, one variant per dispatcher
    vs = [int(v) for v in same if int(space.variants[v, DISPATCHER_COLUMN]) != d0]
    codes = [int(space.variants[v, DISPATCHER_COLUMN]) for v in vs]
    n = len(bidx)
    extra = np.full((len(codes), n), np.nan)
    least, least_code = np.full(n, np.inf), np.full(n, d0, dtype=np.int64)
    fits, floored = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    if not n or not codes:
        return fits, extra, codes, least, least_code, floored, True
    if floor:  # (FLOOR_MARGIN: the floor and the total sum their terms in different orders)
        low = _dispatchers_floor(space, bidx, rcidx, [d0] + codes)
        floored = low > usable * (1.0 + FLOOR_MARGIN)
    keep = np.flatnonzero(~floored)
    kb, kr = bidx[keep], rcidx[keep]
    plan = space.plans(kb, kr)
    oks = np.array([space.variant_ok(plan, v) for v in vs]).reshape(len(vs), len(keep))
    # one memory_totals call: each dispatcher's copies of the base rows it runs on (as _dispatchers_memory)
    rows_of = [np.unique(kb[ok]) for ok in oks]
    base = space.base.take(np.concatenate(rows_of))
    base.disp = np.repeat(np.asarray(codes, dtype=np.int64), [len(r) for r in rows_of])
    sub = replace(space, base=base, dispatchers=None, placement=_placement_at(space, np.concatenate(rows_of)),
                  **_light_at(space, np.concatenate(rows_of)))
    start = np.cumsum([0] + [len(r) for r in rows_of])
    at = [start[j] + np.searchsorted(rows_of[j], kb[ok]) for j, ok in enumerate(oks)]
    priced = memory_totals(sub, np.concatenate(at), np.concatenate([kr[ok] for ok in oks]))
    held = not floor or bool(np.all(low[keep] <= fm[keep]))
    for j, m in enumerate(np.split(priced, np.cumsum([len(a) for a in at])[:-1])):  # (one dispatcher at a time)
        ok = keep[oks[j]]
        if floor:
            held &= bool(np.all(low[ok] <= m))
        extra[j, ok] = m - fm[ok]
        fits[ok] |= fm[ok] + extra[j, ok] <= usable
        lower = m < least[ok]
        least[ok[lower]], least_code[ok[lower]] = m[lower], codes[j]
    if not held:  # the floor failed: every candidate priced
        return _other_dispatchers(space, bidx, rcidx, fm, usable, floor=False)[:6] + (False,)
    return fits, extra, codes, least, least_code, floored, True


# relative: _other_dispatchers leaves a candidate unpriced only where its floor exceeds usable by this much (the floor
# and memory_total add their terms in different orders: a few ulps apart, far below this)
FLOOR_MARGIN = 1e-12


def _dispatchers_floor(space: Space, bidx, rcidx, codes) -> np.ndarray:
    """A lower bound of each candidate's memory_totals under every MoE dispatcher of `codes`
    (memory.activations_floor): its end stages' model states plus their layers' activations, each layer kind's
    stored bytes and full-recompute inputs the least layer_memory gives over the codes (priced once per distinct
    tuple of LAYER_FIELDS of the candidates' base rows, each with each code as its `disp`, and each recompute
    choice: layer_memory_groups over _all_pairs, as memory_totals prices them)."""
    rows, at = np.unique(bidx, return_inverse=True)
    k, n, n_rc = len(codes), len(rows), len(space.recompute)
    # the rows' layer fields, once per code (code-major), `disp` the code: grouped as _base_groups groups them
    cols = {f: np.tile(v, k) for f, v in _columns(space.base, rows, LAYER_BASE_FIELDS).items()}
    cols["disp"] = np.repeat(np.asarray(codes, dtype=np.int64), n)
    g = Groups(KeyedPlan(cols), LAYER_BASE_FIELDS)
    groups = (g.plan, g.index, g.size) if g.active else (g.plan, np.zeros(k * n, dtype=np.int64), k * n)
    layers, _, size = layer_memory_groups(space, None, None, pairs=_all_pairs(space, groups))
    index = groups[1][None, :] * n_rc + np.arange(n_rc)[:, None]  # (recompute, code-major copies of the rows)
    stored, _, layer_input = gather(layers, index, size)

    def least(per_kind):  # each kind's least over the codes, (recompute, rows)
        return [np.broadcast_to(x, (n_rc, k * n)).reshape(n_rc, k, n).min(axis=1) for x in per_kind]

    b = space.base
    pipe = mem.PIPELINE_FIELDS + ("tp",)  # (as memory_totals places its rows)
    cols = _columns(b, rows, tuple(dict.fromkeys(pipe + mem.STATE_FIELDS + ("schedule",))))
    if space.placement is not None:
        placed = (space.placement[0], space.placement[1][rows], space.placement[2])
    else:
        placed = mem.placement_groups(space.settings, KeyedPlan({f: cols[f] for f in pipe}))
    floor = mem.activations_floor(space.settings, KeyedPlan({f: cols[f] for f in mem.STATE_FIELDS + ("schedule",)}),
                                  placed, space.recompute[:, None], (least(stored), least(layer_input)))
    floor = np.broadcast_to(floor, (n_rc, n))
    return floor[rcidx, np.reshape(at, -1)]


def _chosen(extra, fv) -> np.ndarray:
    """variant_memory's bytes of each candidate's chosen variant fv (an array of (variants, n), or a _LazyFit)."""
    if isinstance(extra, np.ndarray):
        return extra[fv, np.arange(len(fv))]
    return extra.chosen(fv)


def _sub(fit, idx):
    """A fit mask (variants, n) or _LazyFit at the candidates idx (None stays None)."""
    if fit is None:
        return None
    return fit[:, idx] if isinstance(fit, np.ndarray) else fit.take(idx)


def best_variants(space: Space, bidx, rcidx, order, reach=None, bound=None, can=None, v0=None, fit=None, eager=None):
    """(variant index, step, floor, extra evaluations, deferred, bound held, can) of each candidate's
    fastest stack variant (space.variants) at the given rank order; variant 0 unless another
    valid one is strictly faster.

    reach(step, floor) -> bool mask (optional): the candidates that can still rank. A variant
    that differs from variant 0 only in TP overlap changes neither the compute nor the
    optimizer step (step.py: overlap only hides TP communication), so its step is >= variant
    0's floor; it is tried only where reach(step0, floor0) holds (the search passes "floor
    within the k-th best step of variant 0", the branch and bound of the module docstring).
    `can` gives that mask directly (a re-run on some of the candidates).
    bound(step, rest) -> bool mask (optional), tighter: such a variant changes only TPO_TERMS
    of variant 0's terms, so its step is >= variant 0's step without them (`rest`); where
    reach holds but bound does not, the variant is not tried at this order and the candidate
    is `deferred`: its variant 0 cannot rank at this order, and the caller re-runs this (with
    the same `can`, no bound) for any deferred candidate it evaluates at another order, so
    that every variant choice is the one an unbounded search makes. The facts are checked on
    every variant evaluated (bound held False: they failed, and nothing was deferred).
    Other variants (fp8 recipes) are tried everywhere they are valid.
    v0 (step, floor, rest) of variant 0 at this order, where the caller has them (the re-run
    for deferred candidates: the first run priced variant 0 there), else computed here. The
    last item returned, beside `can`, is that (step, floor, rest) of variant 0.
    fit (variants, candidates) bool (optional): where each variant fits in memory (variant 0's
    memory + variant_memory); a variant is tried only there.
    eager (bool mask, optional): candidates the bound never defers (every variant tried where reach
    holds, as unbounded): those whose choice the caller would otherwise re-run (_first_orders)."""
    var = np.zeros(len(bidx), dtype=np.int64)
    evaluated = 0
    if v0 is None:
        v0 = step_times(space, bidx, rcidx, order, var, rest=True)
    step, floor, rest0 = (np.array(x, dtype=np.float64) for x in v0)
    if fit is not None:  # variant 0 too only where it fits (fit's dispatcher search: _other_dispatchers' candidates
        fits0 = fit[0] if isinstance(fit, np.ndarray) else fit.fits0()  # do not): there the step starts at inf,
        if not fits0.all():  # and a fitting variant, any, is strictly faster; none tried, it stays inf (no row)
            step[~fits0] = np.inf
    if can is None:
        can = np.ones(len(bidx), dtype=bool) if reach is None else reach(step, floor)
    tight = can if bound is None else can & bound(step, rest0)
    if eager is not None:
        tight = tight | (can & eager)
    deferred = np.zeros(len(bidx), dtype=bool)
    # the variants the bound applies to: those that differ from variant 0 only in TP overlap (and, with a
    # dispatcher search, the dispatcher): they change only _bound_terms
    cols = [0] + ([DISPATCHER_COLUMN] if space.dispatchers is not None else [])
    only_tpo = lambda v: bool(np.array_equal(np.delete(space.variants[v], cols), np.delete(space.variants[0], cols)))  # noqa: E731
    plan = space.plans(bidx, rcidx)
    for group in _variant_groups(space, int(np.count_nonzero(can))):
        if bound is not None and space.dispatchers is not None and any(only_tpo(v) for v in group):
            # the bound on the best steps found so far (real steps of these candidates: their k-th
            # is still >= the final k-th), tighter after each group that lowered some
            tight = can & bound(step, rest0)
            if eager is not None:
                tight = tight | (can & eager)
        at = []
        for v in group:
            ok = space.variant_ok(plan, v)
            if isinstance(fit, np.ndarray):
                ok &= fit[v]
            if only_tpo(v):
                deferred |= ok & can & ~tight
                ok &= tight
            ok = np.flatnonzero(ok)
            if fit is not None and not isinstance(fit, np.ndarray):  # a _LazyFit: priced on these candidates only
                ok = ok[fit.fits(v, ok)]
            at.append(ok)
        vv = np.repeat(np.asarray(group, dtype=np.int64), [len(a) for a in at])
        ok = np.concatenate(at)
        if not len(ok):
            continue
        s2, f2, r2 = step_times(space, bidx[ok], rcidx[ok], order[ok], vv, rest=True)
        m = np.isin(vv, [v for v in group if only_tpo(v)])
        if bound is not None and not (np.array_equal(r2[m], rest0[ok[m]]) and np.all(s2[m] >= r2[m])):
            # the cost model no longer has the facts the bound rests on: no bound
            out = best_variants(space, bidx, rcidx, order, can=can, v0=v0, fit=fit)
            return out[:5] + (False, can, v0)
        evaluated += len(ok)
        for v in group:  # in variant order, so that the first strictly faster wins, as one variant at a time
            i = np.flatnonzero(vv == v)
            better = s2[i] < step[ok[i]]
            j = ok[i[better]]
            var[j], step[j], floor[j] = v, s2[i[better]], f2[i[better]]
    return var, step, floor, evaluated, deferred, True, can, v0


# best_variants' candidates (those that can still rank, `can`) at or below which a dispatcher search's variants are
# priced in one step_times call (_variant_groups): a step_times call's fixed cost (its collectives, whatever the
# candidates) is about as much as 2,000 candidates' own (qwen3-30b-a3b / 64 H100, `planner fit`'s dispatcher search:
# ~10 ms a call of 9-45 candidates, ~39 ms one of 5,810: process_time, branch speed6). One call saves each later
# run's call (~2,000 candidates' worth) and prices at most what the bound would have spared there, a run's
# variants (2 in that search: a dispatcher's TP-overlap pair) of these candidates: 1,024 at most, under 2,000
ONE_CALL_CANDIDATES = 512


def _variant_groups(space: Space, candidates: int = ONE_CALL_CANDIDATES + 1) -> list:
    """best_variants' order of work: the stack variants after variant 0, one at a time, or with a
    dispatcher search in runs of one dispatcher (its TP-overlap and fp8-recipe variants), each run priced
    by one step_times call (each step_time call pays a fixed cost for its collectives, TIME_CHUNK's
    comment: measured ~13 ms on DeepSeek-V3 / 2,048 H800). step_time reads the dispatcher per plan
    (step.dispatcher_rows), so all the runs could be one call, but the bound is tightened after each run
    (best_variants), and that prunes more than the calls cost: one run for every dispatcher, measured
    (branch disprow, the same output), took DeepSeek-V3 / 2,048 H800's whole process from 8.987e9 to
    9.113e9 instructions (+1.4%, cachegrind, PYTHONHASHSEED=0). Not so for few candidates (`candidates`:
    best_variants' that can still rank): at most ONE_CALL_CANDIDATES of them, every variant is one run, one
    call (the bound's pruning saves less than a call costs; the choices are the same, as the bound only defers)."""
    if space.dispatchers is not None and len(space.variants) > 1 and candidates <= ONE_CALL_CANDIDATES:
        return [list(range(1, len(space.variants)))]
    if space.dispatchers is None:
        return [[v] for v in range(1, len(space.variants))]
    codes = space.variants[:, DISPATCHER_COLUMN]
    out = []
    for v in range(1, len(space.variants)):
        if out and codes[v] == codes[out[-1][-1]]:
            out[-1].append(v)
        else:
            out.append([v])
    return out


def _objective(kind: str, settings: Settings, space: Space, step, memory, bidx) -> np.ndarray:
    if kind == "time":
        return step
    if kind == "memory":
        return memory
    tokens = space.base.gbs[bidx] * space.base.seq[bidx]
    return settings.gpus * step / tokens  # GPU-seconds per token


RANK_DIGITS = 9  # significant digits of the ranking keys: relative 1e-9 (module docstring, step 5)


def rank_key(v):
    """`v` rounded to RANK_DIGITS significant digits, the key fit ranks on: two step times
    (or GPU-seconds per token, or bytes) that differ only in the last bits of a float, from
    summing the same terms in another order, are a tie and fall through to the next key
    (memory, then time), as the ranking says. Relative 1e-9 of a step time is far below
    anything the cost model resolves."""
    v = np.asarray(v, dtype=np.float64)
    mag = np.abs(v)
    safe = np.where(np.isfinite(mag) & (mag > 0), mag, 1.0)
    scale = 10.0 ** (RANK_DIGITS - 1 - np.floor(np.log10(safe)))
    return np.where(np.isfinite(mag) & (mag > 0), np.round(v * scale) / scale, v)


def _top(keys: tuple, k: int) -> np.ndarray:
    """Indices of the k best by the lexicographic keys (first key most significant), with
    every candidate tied with the k-th on the first key kept before the final sort."""
    first = keys[0]
    if len(first) > 4 * k:
        kth = np.partition(first, k - 1)[k - 1]
        idx = np.flatnonzero(first <= kth)
    else:
        idx = np.arange(len(first))
    order = np.lexsort(tuple(key[idx] for key in reversed(keys)) if len(keys) > 1 else (first[idx],))
    return idx[order][:k]


def _first_orders(space: Space, fb, fr, fm, first_order, objective: str, top: int, keep_feasible: bool, c: Counts,
                  extra=None, v0=None, cap=np.inf, known=None, around=None):
    """Steps 3 and 4 of the module docstring, up to the other orders' evaluation: each fitting
    candidate's variant, step and floor at its first distinct order (best_variants, with its
    bounds unless every feasible candidate is kept; a variant only where it fits, fm + extra
    <= usable HBM, extra: variant_memory), and the (candidate, order) mask of the other orders
    that can still reach the top k. A candidate whose variant choice was deferred
    (best_variants' bound) is resolved before any other order of it is evaluated. v0: variant
    0's (step, floor, rest) at the first order where the caller has them (_prefilter's seed,
    search_one), else priced here (best_variants). known (optional, with v0 and the bounds): (exact,
    variant, step, floor) of candidates whose choice is already made as an unbounded best_variants makes
    it (_seed_steps' exact ones): taken, not priced again (the same function of the same candidate).
    around (fit's, optional): the rank_key-rounded objective of a plan whose rows before are counted: every
    candidate and order whose objective can be at most it (reach_to: with BOUND_MARGIN, for rank_key's
    rounding) is priced as an unbounded search prices it, each bound pruning only beyond the larger of it
    and the k-th best; but a stack variant's bound (best_variants' `bound`) spares a candidate of one
    distinct rank order whose step so far already sorts before it (its rounded objective below around's:
    whatever variant it chooses, its best step is at most that one) and that cannot reach the k-th best:
    it is deferred, as one beyond the k-th is, and is one row before around whatever its variant. (One of
    several orders is not spared: its other orders need its variant, and re-running it costs more.)"""
    settings = space.settings
    reach = bound = None
    reach_to = -np.inf if around is None else around * (1.0 + BOUND_MARGIN)
    single = None if around is None else row_counts(space.order_ok[fb]) == 1  # one distinct rank order
    if not keep_feasible and objective != "memory":
        obj = lambda x: _objective(objective, settings, space, x, fm, fb)  # noqa: E731

        def kth0(step0):  # (cap: a k-th best the caller found among these candidates' real steps, or inf)
            k = min(top, len(step0))
            return min(np.partition(obj(step0), k - 1)[k - 1], cap)

        def reach(step0, floor0):
            return obj(floor0) <= max(kth0(step0), reach_to)

        def bound(step0, rest0):
            o = obj(rest0)
            b = o <= kth0(step0) * (1.0 + BOUND_MARGIN)
            if around is None:
                return b
            return b | ((o <= reach_to) & ~(single & (rank_key(obj(step0)) < around)))
    fit = None if extra is None else (fm + extra <= mem.capacity(settings)[1] if isinstance(extra, np.ndarray) else extra)
    priced = len(fb) if v0 is None else 0  # variant 0 at the first order, priced by best_variants
    if known is not None and reach is not None:  # the known candidates start at their best, left out of the run
        done, reach0 = known[0], reach
        v0 = tuple(np.array(x, dtype=np.float64) for x in v0)
        v0[0][done], v0[1][done] = known[2][done], known[3][done]
        reach = lambda st, fl: reach0(st, fl) & ~done  # noqa: E731
    # a candidate with another distinct rank order is never deferred: were it deferred, its choice would be
    # re-run below (a best_variants call: a step_time call, and with a dispatcher search a step_time and a
    # memory_totals call per dispatcher, each with its fixed cost) if that order can rank; so it is priced in
    # this run (DeepSeek-V3 / 2,048 H800: the 1,215 kept candidates with two orders, every one re-run before;
    # llama3-405b / 16,384 H100, one per vocabulary space: 238 + 70 + 41 candidates re-run in three calls
    # before, 986 + 606 + 498 variant prices in the first run against 748 + 536 + 457)
    eager = row_counts(space.order_ok[fb]) > 1 if bound is not None else None
    fv, step1, floor1, evals, deferred, held, can, v0 = best_variants(space, fb, fr, first_order, reach, bound, fit=fit,
                                                                      v0=v0, eager=eager)
    if known is not None and reach is not None:
        fv[done] = known[1][done]
    c.time_evaluations = priced + evals
    c.bound_fallback |= not held
    if extra is not None:  # the chosen variant's memory (memory: no bound, nothing deferred)
        fm = fm + _chosen(extra, fv)
    obj1 = fm if objective == "memory" else _objective(objective, settings, space, step1, fm, fb)
    k = min(top, len(fb))
    kth = max(np.partition(obj1, k - 1)[k - 1], reach_to)  # the k-th best of real candidates: >= the final k-th
    resolved = ~deferred
    others = _other_order_mask(space, fb, first_order, fm)
    while True:
        ok = others.copy()
        if not keep_feasible:
            ok &= ((fm if objective == "memory" else _objective(objective, settings, space, floor1, fm, fb)) <= kth)[:, None]
        need = np.flatnonzero(~resolved & (row_counts(ok) > 0))
        if not len(need):
            if isinstance(fit, _LazyFit):  # a candidate no variant of which fits or was tried (step inf): no other order
                ok &= np.isfinite(step1)[:, None]
            return fv, step1, floor1, ok
        # a deferred candidate evaluated at another order: its variant as an unbounded search chooses it
        # (variant 0 was priced there by the first run: its figures are reused)
        v2, s2, f2, e2, *_ = best_variants(space, fb[need], fr[need], first_order[need], can=can[need],
                                           v0=tuple(x[need] for x in v0), fit=_sub(fit, need))
        fv[need], step1[need], floor1[need] = v2, s2, f2
        c.time_evaluations += e2
        resolved[need] = True


# Candidates whose step time _prefilter prices first (the lowest compute floors), for its bound:
# on llama3-405b / 16,384 GPUs 8,192 keep 30,356 of 101,702 (2,048: 58,873; the exact k-th: 29,127),
# and the in-process search is 0.80 s against 0.88-0.92 s with 2,048 (CPU, min of 5)
PREFILTER_SEED = 8192


# Whether the prefilter's floor on an MoE model adds step_time's moe_permute and moe_host terms
# (step.compute_floor moe=True: still a lower bound, checked on every candidate priced; the rows do
# not move). It prunes more (DeepSeek-V3 / 2,048 H800: the kept candidates' step times 0.26 -> 0.18 s
# CPU); only the fit counts line's "N of them priced by their compute alone" grows (there 175,495 ->
# 195,031). False gives the plain compute floor (tests compare the two).
PREFILTER_MOE_FLOOR = True


def _prefilters(n: int, objective: str, top: int, keep_feasible: bool, bound: float = np.inf) -> bool:
    """Whether _prefilter bounds n fitting candidates (else it returns None)."""
    n_seed = PREFILTER_SEED if not np.isfinite(bound) else top
    return not (keep_feasible or objective == "memory" or n <= 2 * n_seed or top > PREFILTER_SEED // 2)


def _prefilter(space: Space, fb, fr, fm, first_order, objective: str, top: int, keep_feasible: bool, c: Counts,
               extra_of=None, reach_to=-np.inf, bound: float = np.inf, low=None):
    """Before step 3: (keep mask, floors, seed evaluations, seed, seed's variant 0) of the fitting
    candidates that can still rank, or None where no bound applies (seed: the indices of the
    candidates priced; seed's variant 0: best_variants' (step, floor, rest) of variant 0 at the
    first order, which _first_orders reuses for the seed candidates it keeps). Each candidate's
    compute floor (step.compute_floor: step_time's compute term without the DP copies, and on an
    MoE model its moe_permute and moe_host terms where PREFILTER_MOE_FLOOR; no communication
    priced) is a lower bound on its step time at every rank order and every stack variant that
    differs from variant 0 only in TP overlap (overlap changes only TPO_TERMS); with variants
    that change more (the fp8 recipes a stack tries, which change the compute), the least of the
    floors over floor_variants bounds every variant (candidate_floors). The PREFILTER_SEED candidates with the lowest
    floors are priced (best_variants at the first order, unbounded, each variant only where it
    fits: extra_of(indices), variant_memory of those candidates, as _first_orders gates it); their k-th best objective
    K0 is >= the final k-th best (more candidates only lower it), so a candidate whose floor's
    objective exceeds K0 (1 + BOUND_MARGIN) cannot rank: it is dropped before step 3. Every
    candidate that can rank is kept, so the k-th best variant-0 step _first_orders bounds with
    on the rest is still >= the final k-th (its bounds stay exact; they may prune a little less
    than on all). bound: the k-th best objective of the spaces of the same GPU count searched before (vocab_spaces'
    other vocabularies, search_one), >= the final k-th too, so K0 is the lesser of the two; with one, the seed is k
    candidates (the bound needs no seed of its own: a space's seed of PREFILTER_SEED is priced once a GPU count), priced
    at variant 0 in one step_times call with every candidate the bound keeps (a superset of those kept: K0 <= bound),
    whose figures _kept_v0 then reuses (returned as the seed: each step_times call pays a fixed cost, about 2.5 ms
    on llama3-405b / 16,384 H100, and DeepSeek-V3's seed took five and a memory call a space); the seed's stack
    variants are priced only where _bound_k0 cannot show that K0 is the bound. The fact step >= floor is checked on the
    seed here and on every kept candidate by the caller (search_one); where it fails, nothing is
    dropped (Counts.bound_fallback). reach_to (fit(around=...)): a candidate whose floor's objective is
    at most it is kept too, whatever K0."""
    n = len(fb)
    # with another space's bound, a seed of k candidates (the bound is K0 already, or a lower one of theirs)
    n_seed = PREFILTER_SEED if not np.isfinite(bound) else top
    if not _prefilters(n, objective, top, keep_feasible, bound):
        return None  # (a seed of fewer than k candidates has no k-th best to bound with)
    settings = space.settings
    if low is None:  # (low: the caller's, the same candidate_floors: _search_space's, with the other dispatchers')
        low = candidate_floors(space, fb, fr, floor_variants(space))
    seed = np.argpartition(low, n_seed - 1)[:n_seed]
    low_obj = _objective(objective, settings, space, low, fm, fb)
    v0 = None
    if np.isfinite(bound):
        # another space's bound: the candidates it keeps (k0 <= bound: a superset of those kept below) and the seed
        # priced at variant 0 in one step_times call (each call pays a fixed cost: _kept_v0 then prices none of them)
        own = seed
        seed = np.union1d(own, np.flatnonzero(low_obj <= max(bound, reach_to) * (1.0 + BOUND_MARGIN)))
        v0 = step_times(space, fb[seed], fr[seed], first_order[seed], rest=True)
        at = np.searchsorted(seed, own)  # the k seed candidates among them
        k0 = _bound_k0(space, objective, top, bound, low[seed[at]], fm[seed[at]], fb[seed[at]], tuple(x[at] for x in v0))
        if k0 is not None:  # the seed's own k-th best cannot undercut the bound: its stack variants not priced
            keep = low_obj <= max(k0, reach_to) * (1.0 + BOUND_MARGIN)
            return keep, low, len(seed), seed, v0, k0, None
    # the seed's own candidates (the k lowest floors, where v0 priced more)
    own, priced = (seed, None) if v0 is None else (seed[at], seed)
    sv0 = None if v0 is None else tuple(x[at] for x in v0)
    # a variant only where it fits (variant 0's memory + variant_memory), as _first_orders tries it
    fit = None if extra_of is None else extra_of(own)
    fit = fm[own] + fit <= mem.capacity(settings)[1] if isinstance(fit, np.ndarray) else fit
    if space.dispatchers is None:
        _, s0, *_, seed_v0 = best_variants(space, fb[own], fr[own], first_order[own], fit=fit, v0=sv0)
        seed_best = None
    else:
        s0, seed_v0, seed_best = _seed_steps(space, fb[own], fr[own], fm[own], first_order[own], objective, top, fit, v0=sv0)
    if not np.all(s0 >= low[own]):
        c.bound_fallback = True
        return None  # the cost model no longer has the fact the bound rests on
    k = top
    k0 = np.partition(_objective(objective, settings, space, s0, fm[own], fb[own]), k - 1)[k - 1]
    k0 = min(k0, bound)  # another space's k-th best, searched before (search_one: the same GPU count's other vocabularies)
    keep = low_obj <= max(k0, reach_to) * (1.0 + BOUND_MARGIN)
    if priced is None:
        return keep, low, len(own), own, seed_v0, k0, seed_best
    # every candidate priced at variant 0 (the seed's among them: the same figures) handed on; the seed's known
    # choices (_seed_steps) at their places, none elsewhere
    if seed_best is not None:
        seed_best = tuple(_placed(x, at, len(priced)) for x in seed_best)
    return keep, low, len(priced), priced, v0, k0, seed_best


def _placed(x, at, n: int) -> np.ndarray:
    """x (one value per seed candidate) at positions `at` of an array of n (zeros / False elsewhere)."""
    x = np.asarray(x)
    out = np.zeros(n, dtype=x.dtype)
    out[at] = x
    return out


def _bound_k0(space: Space, objective: str, top: int, bound: float, low, m, b, v0) -> float | None:
    """_prefilter's K0 where another space's bound is given, without pricing the seed's stack variants, or None
    where that cannot be shown: the seed's k candidates' best steps (over every variant) are at least
    min(variant 0's step, its rest): a variant that differs from variant 0 only in TP overlap (and, with a
    dispatcher search, the dispatcher) changes only _bound_terms, so its step is >= variant 0's step without them
    (best_variants' bound, whose facts it checks wherever it prices such a variant). Where the least objective of
    those lower bounds' k-th (k = the seed: its largest) is at least the bound, K0 = min(seed's k-th, bound) is the
    bound, as pricing the variants finds it. Also checked here, as _prefilter checks it on the priced seed: those
    lower bounds are >= the compute floors (else None: the seed priced as before). Other variants (an fp8 recipe,
    torch.compile, whose compute differs): None."""
    cols = [0] + ([DISPATCHER_COLUMN] if space.dispatchers is not None else [])
    rest_of = np.delete(space.variants, cols, axis=1)
    if not np.all(rest_of == rest_of[0]):
        return None
    step0, _, rest0 = v0
    lower = np.minimum(step0, rest0) if len(space.variants) > 1 else step0
    if not np.all(lower >= low):
        return None
    k0 = np.partition(_objective(objective, space.settings, space, lower, m, b), top - 1)[top - 1]
    return float(bound) if k0 >= bound else None


def _seed_steps(space: Space, b, r, m, order, objective: str, top: int, fit, v0=None) -> tuple:
    """(best step, variant 0's (step, floor, rest), known) of the seed's candidates at their first order, with
    a dispatcher search (where every dispatcher but variant 0's is a variant best_variants bounds): the seed
    with best_variants' bounds at the k-th best found so far (a variant that changes only _bound_terms
    cannot bring a candidate below it where variant 0's rest already exceeds it, so the seed's k-th best is
    the unbounded one's; a candidate left at variant 0's step there has a best step above it). known:
    (exact, variant, step, floor): where exact, the candidate's choice as best_variants makes it unbounded
    (_first_orders reuses it). No probe first (the dispatcher search's first version priced the 512 seed
    candidates of the lowest floors with every variant for a k-th to start from): since best_variants
    tightens its bound after each dispatcher, the probe's extra step_times and memory_totals calls
    (a fixed cost each) cost more than its tighter start saved (instruction counts, whole process, the
    same output: DeepSeek-V3 / 2,048 H800 8.93 G -> 8.61 G; Qwen3-30B-A3B / 128 B200 fp8 16.95 G -> 16.44 G)."""
    settings = space.settings
    v0 = step_times(space, b, r, order, rest=True) if v0 is None else v0  # (v0: _prefilter priced them)
    obj = lambda x: _objective(objective, settings, space, x, m, b)  # noqa: E731
    kth = lambda step0: np.partition(obj(step0), top - 1)[top - 1]  # noqa: E731
    var, s0, f0, _, deferred, _, can, _ = best_variants(
        space, b, r, order, fit=fit, v0=v0, reach=lambda st, fl: obj(fl) <= kth(st),
        bound=lambda st, rest0: obj(rest0) <= kth(st) * (1.0 + BOUND_MARGIN))
    # exact: the candidates whose every variant that runs and fits was priced (those the bounded run
    # tried and deferred nothing of): their choice is an unbounded run's
    return s0, v0, (can & ~deferred, var, s0, f0)


def floor_variants(space: Space) -> tuple:
    """The stack variants whose compute floors bound every variant's step (_prefilter): variant 0,
    and the first variant of each other setting of the options besides TP overlap (an fp8 recipe,
    torch.compile: they may change the compute; the MoE dispatcher only padded to capacity). A variant that differs from one of these only in
    TP overlap changes only TPO_TERMS (best_variants), so its step is >= that one's floor."""
    firsts = {}
    # a dispatcher changes the floor only through moe_host, whose synchronisation differs between
    # dispatchers only padded to capacity (dispatch.host_synced): else the floor reads none of it
    st = space.settings
    synced_alike = not (st.moe_pad_to_capacity or st.moe_hybridep_capacity_factor > 0)
    cols = [0] + ([DISPATCHER_COLUMN] if space.dispatchers is not None and synced_alike else [])
    for v in range(len(space.variants)):
        firsts.setdefault(tuple(np.delete(space.variants[v], cols)), v)
    return tuple(firsts.values())


def candidate_floors(space: Space, fb: np.ndarray, fr: np.ndarray, variants: tuple = (0,)) -> np.ndarray:
    """step.compute_floor (moe=PREFILTER_MOE_FLOOR) of candidates (base row, recompute index) with
    stack variant 0, or the least of it over `variants` (floor_variants: a lower bound on the step
    of every variant), priced once per distinct tuple of the fields it reads (row_groups: variant
    0's options are the base rows' own, another's replace them; the rank order is not read), in
    blocks of TIME_CHUNK groups (step.group_floor) and gathered back: the same numbers as
    compute_floor on the candidates (the least over the variants' plans)."""
    # the base-row columns the floor reads (its recompute index apart, its micro-batch count from them), the sharding
    # level among them where gradient-accumulation fusion is off (step._wgrad_field)
    keyed, index, size = row_groups(space, fb, fr, tuple(f for f in FLOOR_FIELDS if f not in ("recompute", "microbatches"))
                                    + _wgrad_field(space.settings))
    low = None
    for var in variants:
        opts = {f: np.full(size, space.variants[var, j], dtype=np.int64)
                for j, f in enumerate(VARIANT_FIELDS) if f in FLOOR_FIELDS and var}
        floor = np.zeros(size)
        for b, w in space.phases or ((None, None),):  # a batch ramp: each phase's floor at its batch, weighted as step_times
            gbs = keyed.gbs if b is None else np.full(np.shape(keyed.gbs), b, dtype=np.int64)
            cols = {**vars(keyed), **opts, "gbs": gbs, "microbatches": gbs // (keyed.dp * keyed.mbs)}  # PlanArrays.microbatches
            for s in _blocks(size, TIME_CHUNK):
                f = group_floor(space.settings_of(var), KeyedPlan({f: v[s] for f, v in cols.items()}), moe=PREFILTER_MOE_FLOOR)
                if w is None:
                    floor[s] = f
                else:
                    floor[s] += w * f
        low = floor if low is None else np.minimum(low, floor)
    return low.take(index)


def _kept_v0(space: Space, keep, kb, kr, ko, seed, seed_v0, seed_best=None) -> tuple:
    """Variant 0's (step, floor, rest) at the first order of the candidates _prefilter keeps:
    its seed's figures where it priced them (the same function of the same candidate: the same
    numbers), step_times on the others; how many of them step_times priced; and seed_best (_seed_steps'
    known: exact, variant, step, floor) at the kept candidates, exact False where not seeded (or None)."""
    at = np.full(len(keep), -1, dtype=np.int64)
    at[seed] = np.arange(len(seed))
    at = at[keep]  # each kept candidate's place in the seed, -1 where it was not seeded
    new = np.flatnonzero(at < 0)
    priced = step_times(space, kb[new], kr[new], ko[new], rest=True)
    out = tuple(np.empty(len(kb)) for _ in seed_v0)
    for o, s, p in zip(out, seed_v0, priced):
        o[at >= 0] = np.asarray(s)[at[at >= 0]]
        o[new] = p
    known = None
    if seed_best is not None:
        known = tuple(np.zeros(len(kb), dtype=np.asarray(x).dtype) for x in seed_best)
        for o, s in zip(known, seed_best):
            o[at >= 0] = np.asarray(s)[at[at >= 0]]
    return out, len(new), known


def _reason_text(key, reasons: dict, settings: Settings) -> str:
    """A rule's words; a batch ramp's phase rule (space._phase_codes: (phase, code)) names its phase:
    'phase 1 (batch 512 from 0 tokens): global batch does not divide into dp x micro-batch'."""
    if np.ndim(key) == 0:
        return reasons[key]
    from .batch_ramp import phase_name

    return f"{phase_name(key[0], settings.batch_schedule)}: {reasons[key[1]]}"


def dispatcher_settings(job: Job, settings: Settings, where: str = "") -> tuple:
    """fit's MoE dispatcher search: ({dispatcher code: Settings with it}, names left out with why) for an
    MoE model on a stack that lists more than one dispatcher it runs (stack_db runs.moe_dispatchers), or
    (None, []) where there is nothing to search. The stack's default dispatcher first (variant 0: every
    candidate is priced with it, so it must be one no start-up rule restricts, startup.DISPATCHER_RULES;
    else no search), then the others in the stack's order. Each is the job with that dispatcher, resolved
    (space.settings_for): one the job's own settings refuse (allgather with the EP overlap pinned on,
    deepep padded to capacity, hybridep with fp8 dispatch: plan.moe_dispatch_settings, plan.ep_comm_overlap)
    is left out, named with its reason."""
    from . import dispatch
    from .catalog import load_stack
    from .errors import PlannerError
    from .startup import DISPATCHER_RULES, model_code

    runs = settings.stack.runs
    if settings.model.moe is None or runs is None or not runs.moe_dispatchers or len(runs.moe_dispatchers) < 2:
        return None, []
    default = load_stack(job.stack).defaults.moe_dispatcher
    restricted = {d for names in DISPATCHER_RULES.values() for d in names}
    if default in restricted or default not in runs.moe_dispatchers:
        return None, []
    out, left = {}, []
    code = model_code(settings.model, settings.stack)  # the trainer's model code: the dispatchers it builds
    for name in [default] + [n for n in runs.moe_dispatchers if n != default]:
        if code is not None and code.moe_dispatchers is not None and name not in code.moe_dispatchers:
            left.append((name, f"{settings.stack.name}'s model code {code.code} (model_type {settings.model.hf_model_type}) "
                               "does not build it (start-up rule TORCHTITAN_MODEL_DISPATCHER)"))
            continue
        try:  # a job's HybridEP capacity factor sizes the hybridep rows only (the other dispatchers refuse one)
            st, *_ = settings_for(job.model_copy(update={"moe_dispatcher": name, "moe_hybridep_capacity_factor":
                                                         job.moe_hybridep_capacity_factor if name == "hybridep" else None}),
                                  where=where)
        except PlannerError as e:
            left.append((name, e.message))
            continue
        out[dispatch.CODES[name]] = replace(st, seq_assumed=(), code_assumed=(), env_assumed=())
    if len(out) < 2 or dispatch.NAMES[next(iter(out))] != default:
        return None, left
    return out, left


def _capacity_rows_only(job: Job, search_dispatchers: bool) -> bool:
    """A job's moe_hybridep_capacity_factor with the dispatcher searched (fit without --moe-dispatcher): it sizes the
    hybridep rows only (dispatcher_settings)."""
    return bool(search_dispatchers and job.moe_dispatcher is None and job.moe_hybridep_capacity_factor is not None)


def _searched_base(job: Job, search_dispatchers: bool) -> Job:
    """The job the search's base (the stack's default dispatcher) resolves: without a capacity factor that sizes the
    hybridep rows only (_capacity_rows_only)."""
    return job.model_copy(update={"moe_hybridep_capacity_factor": None}) if _capacity_rows_only(job, search_dispatchers) else job


def _capacity_without_hybridep(job: Job, left: list, where: str):
    """A job's moe_hybridep_capacity_factor with the dispatcher searched where no hybridep row is: the reason the job
    with moe_dispatcher hybridep is refused, else the search's (PlannerError; the factor would size nothing)."""
    from .errors import PlannerError

    settings_for(job.model_copy(update={"moe_dispatcher": "hybridep"}), where=where)  # raises the job's own reason
    why = next((w for n, w in left if n == "hybridep"), "the stack searches no other dispatcher beside it")
    raise PlannerError(f"{where}moe_hybridep_capacity_factor {job.moe_hybridep_capacity_factor:g}: it sizes HybridEP's "
                       f"rows, and the dispatcher search prices none here (hybridep: {why})",
                       "remove moe_hybridep_capacity_factor, or pin --moe-dispatcher hybridep")


def search_one(job: Job, opts: SpaceOptions, objective: str = "time", top: int = 10,
               keep_feasible: bool = False, where: str = "", search_dispatchers: bool = False, around: tuple = None):
    """Search one GPU count. Returns (Ranked list, Counts, closest, warnings, feasible list). search_dispatchers:
    the MoE dispatcher is a searched stack option (dispatcher_settings), each priced with its own Settings.
    Where torch.compile is the search's to choose and a start-up rule refuses some options compiled
    (space.uncompiled_choices: torchtitan's mxfp8 with TP), their compile-off twins are variants too, and
    the base rows whose own options are refused compiled are searched uncompiled in a second space
    (space.uncompiled_space): one Ranked per space, best first in each (fit merges them). around: fit's."""
    hcf_rows = _capacity_rows_only(job, search_dispatchers)
    settings, gbs, seq, warnings = settings_for(_searched_base(job, search_dispatchers), where=where)
    settings = replace(settings, seq_assumed=(), code_assumed=(), env_assumed=())  # the job's (FitResult.assumed): each row's command gives --seq-len
    sizes = job.hierarchical_cp_sizes
    if (opts.cp is None or 1 in opts.cp) and not (sizes and int(np.prod(sizes)) > 1):  # (a2a+p2p's sizes fix cp)
        # the plans at cp 1 run the job's CP variant as none (planner/cp_comm_type.py, cp_rotate.py): said once
        from .cp_comm_type import ignored_at_cp1 as cp_variant_ignored
        from .cp_rotate import ignored_at_cp1 as rotate_ignored

        from .plan import balance_ignored_at_cp1

        warnings = warnings + [w for w in cp_variant_ignored(job) + rotate_ignored(job) + balance_ignored_at_cp1(job)
                               if w not in warnings]
    if opts.cp is None or any(c > 1 for c in opts.cp):  # a stack whose training never sets the rotate method
        from .cp_rotate import ignored_on_stack as rotate_ignored_on_stack  # (cp_rotate.py [4]): said once

        notes = rotate_ignored_on_stack(job.model_copy(update={"cp": None}), settings.stack)
        warnings = warnings + [w for w in notes if w not in warnings]
    variants = variant_choices(settings.stack, job, where, settings.hardware, settings.model)
    twins = uncompiled_choices(settings.stack, job, variants)
    twin = np.r_[np.zeros(len(variants), dtype=bool), np.ones(len(twins), dtype=bool)]
    variants = np.concatenate([variants, twins])
    disp, left = dispatcher_settings(job, settings, where) if search_dispatchers else (None, [])
    from . import dispatch

    if hcf_rows and (disp is None or dispatch.CODES["hybridep"] not in disp):
        _capacity_without_hybridep(job, left, where)
    if disp is not None:  # variant 0 the stack's default dispatcher, which every candidate runs
        # (with every dispatcher's ep_comm_overlap, which step_time looks up per plan: step.dispatcher_rows), and
        # hybridep's capacity factor, which only the hybridep rows read (stacks.capacity_rows, step.host_synced_rows)
        settings = replace(next(iter(disp.values())),
                           dispatcher_rows=tuple((int(c), bool(s.ep_comm_overlap)) for c, s in disp.items()),
                           moe_hybridep_capacity_factor=max(s.moe_hybridep_capacity_factor for s in disp.values()))
        variants = np.array([list(r) + [c] for c in disp for r in variants], dtype=np.int64)
        twin = np.tile(twin, len(disp))
    space = build_space(settings, gbs, seq, job.precision, opts, variants)
    space.dispatchers = disp
    space.uncompiled = tuple(int(v) for v in np.flatnonzero(twin))
    space, second = uncompiled_space(space)
    space, second = vocab_mask(space, second)
    c = Counts(considered=space.considered, slack_dropped=space.slack_dropped,
               dispatchers=tuple(s.moe_dispatcher for s in disp.values()) if disp else (), dispatchers_left=tuple(left))
    c.broke_constraint = int(sum(space.reasons.values()))
    reasons = rule_reasons(settings.stack, settings.microbatch_group)  # INTERLEAVED_M in the stack's rule's words
    c.reasons = {_reason_text(k, reasons, settings): v
                 for k, v in sorted(space.reasons.items(), key=lambda kv: (-1,) + kv[:1] if np.ndim(kv[0]) == 0 else kv[0])}
    ranked, closest, feasible = [], None, []
    for parent in (space, second):
        if parent is None:
            continue
        bound = np.inf  # the k-th best objective of the parent's vocabulary spaces searched so far (vocab_spaces)
        for sp in vocab_spaces(parent):
            cl, bound = _vocab_space(sp, objective, top, keep_feasible, bound, c, ranked, feasible, around)
            if cl is not None and (closest is None or cl[4] < closest[4]):
                closest = cl
    return ranked, c, closest, warnings, feasible


def _vocab_space(sp: Space, objective: str, top: int, keep_feasible: bool, bound: float, c: Counts, ranked: list,
                 feasible: list, around: tuple = None) -> tuple:
    """search_one's search of one space (one vocabulary's: vocab_spaces), its results added to c, ranked and
    feasible; returns its closest plan (_search_space's) and the bound for the next space of the same parent: the k-th best
    objective ranked so far, which bounds the final k-th best of the GPU count (fit keeps the top k over every
    space), so the next space's prefilter drops what cannot rank with it (_prefilter's bound)."""
    r, cs, cl, fz = _search_space(sp, objective, top, keep_feasible, around, bound)
    c.add(cs)
    if r is not None and len(r.base):  # (none where the bound dropped every candidate)
        ranked.append(r)
        if len(r.objective) >= top:
            bound = min(bound, float(np.sort(r.objective)[top - 1]))
    if fz is not None:
        feasible.append(fz)
    return cl, bound


def vocab_mask(space: Space, second):
    """fit with the job's padded_vocab_size (settings.padded_vocab_size: every candidate builds those rows): the valid
    rows whose tp does not divide them refused, as explain refuses such a plan (plan.with_padded_vocab), counted under
    plan.VOCAB_TP in the space's reasons (those of the uncompiled space too, whose rows the space counts). Returns
    (space, second), copies where a row was refused."""
    if space.settings.padded_vocab_size is None:
        return space, second
    rows = np.int64(space.settings.padded_vocab_size)
    reasons, out = dict(space.reasons), []
    for sp in (space, second):
        if sp is None:
            out.append(None)
            continue
        bad = (sp.codes == OK) & (rows % np.asarray(sp.base.tp, dtype=np.int64) != 0)
        if bad.any():
            reasons[VOCAB_TP] = reasons.get(VOCAB_TP, 0) + int(row_counts(sp.order_ok[bad]).sum()) * len(sp.recompute)
            sp = replace(sp, codes=np.where(bad, VOCAB_TP, sp.codes))
        out.append(sp)
    return replace(out[0], reasons=reasons), out[1]


def vocab_spaces(space: Space) -> list:
    """The space as spaces of one vocabulary each, where the stack pads it per tp (stack_db vocab_padding; Megatron's
    vocab_size_with_padding: the rows a multiple of divisor x tp, plan.padded_rows): every cost model reads the rows
    from the model (model.vocab_size: params, memory, step, compute, the model FLOPs), so each space's settings hold
    the model with its rows (plan.with_padded_vocab, as explain pads a plan of that tp) and explain and fit price one
    figure. The rows are computed over the base rows at once (int64); the spaces are one per distinct value (a handful:
    tp's few values), the valid rows of each, the broken rows (only counted) in the first with the space's counts.
    One space where the stack pads nothing, the job pins the rows (vocab_mask) or every valid row builds the same."""
    s = space.settings
    if s.vocab_divisor is None or s.padded_vocab_size is not None:
        return [space]
    rows = padded_rows(s.vocab_tokens, space.base.tp, s.vocab_divisor)
    ok = space.codes == OK
    values = np.unique(rows[ok])
    if len(values) <= 1:
        r = int(values[0]) if len(values) else int(rows[0]) if len(rows) else s.model.vocab_size
        return [_with_rows(space, r)]
    out = []
    # the pipeline placement (memory.placement_groups: stage layers and micro-batches in flight, no vocabulary) of
    # the valid rows, once for every space: each space's memory calls would place their own rows, the same
    # (pp, vpp, micro-batches, schedule) groups in each (llama3-405b / 16,384 H100: three times)
    placement = None
    if ok.sum() > 1:
        valid = np.flatnonzero(ok)
        cols = _columns(space.base, valid, mem.PIPELINE_FIELDS + ("tp",))
        placed, index, size = mem.placement_groups(s, KeyedPlan(cols))
        if index is not None:
            at = np.zeros(len(ok), dtype=np.int64)
            at[valid] = index
            placement = (placed, at, size)
    for i, r in enumerate(values[::-1]):  # one space a padded vocabulary (not a loop over candidates), the largest
        # tp's first (the rows grow with tp): on a large model its rows rank best, and their k-th best bounds the others'
        pick = np.flatnonzero((ok & (rows == r)) | (~ok if i == 0 else False))
        sub = replace(space, base=space.base.take(pick), codes=space.codes[pick], order_ok=space.order_ok[pick],
                      placement=None if placement is None else (placement[0], placement[1][pick], placement[2]),
                      **_light_at(space, pick))
        if i:
            sub = replace(sub, reasons={}, considered=0, slack_dropped=0)
        out.append(_with_rows(sub, int(r)))
    return out


def _light_at(space: Space, rows) -> dict:
    """Space.nvls_group at the base rows `rows` (a space of those rows: memory_totals prices them at the same
    lightest orders; the groups' own arrays are shared), as replace() keywords; none where the space has none."""
    if space.light is None:
        return {}
    return {"nvls_group": space.nvls_group[rows]}


def _placement_at(space: Space, rows) -> tuple | None:
    """space.placement for a space of the base rows `rows` of this one (the same settings' pipeline: a variant's,
    a dispatcher's), or None."""
    p = space.placement
    return None if p is None else (p[0], p[1][rows], p[2])


def _with_rows(space: Space, rows: int) -> Space:
    """The space priced with `rows` vocabulary rows (its settings' model and its dispatchers' with them)."""
    def pad(st):
        return replace(st, model=with_padded_vocab(st.model, rows, 1))

    if rows == space.settings.model.vocab_size and space.dispatchers is None:
        return space
    disp = None if space.dispatchers is None else {k: pad(v) for k, v in space.dispatchers.items()}
    return replace(space, settings=pad(space.settings), dispatchers=disp)


def _other_orders(space: Space, fb, fr, fv, ok, first_order, fm, step1=None):
    """Every rank order of the candidates (fb, fr, chosen variants fv, memory fm at their first order) not yet priced
    (neither their first order nor one in `ok`) where they fit (_other_order_mask), for when the bound on the orders
    fails: (their candidate index, order index, step time). step1 given (fit's dispatcher search let candidates in): a
    candidate whose step is inf (no variant of it fits or was tried) gets no order."""
    rest = _other_order_mask(space, fb, first_order, fm)
    rest &= ~ok
    if step1 is not None:
        rest &= np.isfinite(step1)[:, None]
    oi2, ri2 = pairs(rest.T)
    step3, _ = step_times(space, fb[ri2], fr[ri2], space.orders[oi2], fv[ri2])
    return ri2, oi2, step3


def _closest(space: Space, bidx, rcidx, memory, other, least, least_code):
    """The closest plan (settings, space, base row, recompute index, bytes) of the candidates (bidx, rcidx) by their
    memory (None where there are none), or, where another dispatcher holds less (fit's dispatcher search: `least`,
    `least_code` of the candidates `other`; where none fits every other candidate was priced: no prefilter), that
    dispatcher's plan with its own Settings."""
    if not len(bidx):
        return None
    j = int(np.argmin(memory))
    closest = (space.settings, space, int(bidx[j]), int(rcidx[j]), float(memory[j]))
    if len(other) and np.min(least) < closest[4]:
        j = int(np.argmin(least))
        closest = (space.dispatchers[int(least_code[j])], space, int(bidx[other[j]]), int(rcidx[other[j]]),
                   float(least[j]))
    return closest


def _fit_orders(space: Space, bidx, memory, n_ord) -> np.ndarray:
    """Of candidates (bidx, their memory_totals: at the lightest order), how many distinct rank orders fit the usable
    HBM with variant 0 (memory + order_extra <= usable): the counts' candidates x rank orders (Counts.feasible);
    every distinct order (n_ord) where the space's memory reads no order."""
    if space.light is None or not len(bidx):
        return n_ord[bidx]
    rows, at = np.unique(bidx, return_inverse=True)
    extra = order_extra(space, rows[:, None], space.orders[None, :])[np.reshape(at, -1)]
    return row_counts(space.order_ok[bidx] & (memory[:, None] + extra <= mem.capacity(space.settings)[1]))


class _Cands(NamedTuple):
    """The candidates of _search_space's steps 3-5: base rows b, recompute indices r, memory m (variant 0's; the
    chosen variant's once step 3 has chosen) and first distinct rank order."""
    b: np.ndarray
    r: np.ndarray
    m: np.ndarray
    order: np.ndarray

    def take(self, idx) -> "_Cands":
        return _Cands(*(x[idx] for x in self))

    def joined(self, more: "_Cands") -> "_Cands":
        return _Cands(*(np.r_[x, y] for x, y in zip(self, more)))


def _first_order(space: Space, b) -> np.ndarray:
    """The first rank order the search prices for each base row b: its lightest (Space.light: where its memory is
    least, the order its memory_totals is priced at) where the space's memory reads the order, else its first
    distinct order (the lightest too then: every order ties)."""
    if space.light is not None:
        return space.lightest(b)
    return space.orders[np.argmax(space.order_ok[b], axis=1)]


def _other_order_mask(space: Space, fb, first_order, fm) -> np.ndarray:
    """(candidates, orders) bool: each candidate's distinct rank orders (order_ok) but its first, where its memory
    there (fm, at the first order, plus order_extra) fits the usable HBM. A candidate's stack variant is chosen at its
    first order (best_variants), where it fits; at an order whose NVLS buffers add more, a variant that no longer fits
    makes no row there (its variant 0 would: not tried, an assumption of the per-candidate choice)."""
    ok = space.order_ok[fb].copy()
    ok[np.arange(len(fb)), np.searchsorted(space.orders, first_order)] = False
    if space.light is not None:
        extra = order_extra(space, fb[:, None], space.orders[None, :])
        ok &= (np.asarray(fm)[:, None] + extra) <= mem.capacity(space.settings)[1]
    return ok


def _candidate_memory(space: Space, c: Counts, lazy: bool) -> tuple:
    """Step 2 of the module docstring on one space: (base rows, recompute indices, memory, whole, usable HBM) of
    every valid candidate (base row x recompute); whole (fit's dispatcher search: lazy) where the memory is priced
    in full, not by the model states' floor (fitting_memory), else None. Sets c's memory_evaluations and
    bound_fallback."""
    vrows = np.flatnonzero(space.codes == OK)
    n_rc = len(space.recompute)
    bidx = np.repeat(vrows, n_rc)
    rcidx = np.tile(np.arange(n_rc), len(vrows))
    usable = mem.capacity(space.settings)[1]
    # (a candidate whose model states alone exceed usable is not priced in full: fitting_memory)
    if lazy:
        memory, held, whole = fitting_memory(space, bidx, rcidx, usable, whole=True)
    else:
        (memory, held), whole = fitting_memory(space, bidx, rcidx, usable), None
    c.bound_fallback |= not held
    c.memory_evaluations = len(bidx)
    return bidx, rcidx, memory, whole, usable


@dataclass
class _Others:
    """fit's dispatcher search on one space (_search_space; module docstring), as state: of the space's candidates
    (bidx, rcidx, memory: step 2's; fits: where variant 0 fits, the nf fitting ones), `other`, those over usable
    with variant 0's dispatcher that another may fit (priced in full, ep > 1: _other_dispatchers), in the _LazyFit
    `root` after the fitting ones; of other: unpriced (not priced under the other dispatchers), least and
    least_code (their least memory over those and its dispatcher: the closest plan's), floored (over usable with
    every dispatcher by their floor, unpriced) and rescued (the positions another dispatcher fits, in the order
    they were let in). Outside a dispatcher search other is empty and root None."""
    space: Space
    bidx: np.ndarray
    rcidx: np.ndarray
    memory: np.ndarray
    usable: float
    fits: np.ndarray
    n_ord: np.ndarray  # each base row's rank orders (Space.n_orders: the counts are in candidates x rank orders)
    fit_ord: np.ndarray  # each fitting candidate's rank orders where variant 0 fits (_fit_orders), in fits' order
    other: np.ndarray
    root: _LazyFit | None
    unpriced: np.ndarray
    least: np.ndarray
    least_code: np.ndarray
    floored: np.ndarray
    rescued: np.ndarray

    @classmethod
    def start(cls, space: Space, bidx, rcidx, memory, whole, usable) -> "_Others":
        """The state before any other dispatcher is priced (whole None: no dispatcher search, no `other`)."""
        fits = memory <= usable
        other, root = bidx[:0], None
        if whole is not None:
            ep = np.broadcast_to(np.asarray(space.base.ep), np.shape(space.base.tp))[bidx]
            other = np.flatnonzero(~fits & whole & (ep > 1))
            at = np.r_[np.flatnonzero(fits), other]
            root = _LazyFit(space, bidx[at], rcidx[at], memory[at], usable)
        n = len(other)
        n_ord = space.n_orders
        return cls(space, bidx, rcidx, memory, usable, fits, n_ord, _fit_orders(space, bidx[fits], memory[fits], n_ord),
                   other, root, np.ones(n, dtype=bool),
                   np.full(n, np.inf), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), other[:0])

    def mult(self, cands: _Cands) -> np.ndarray:
        """The rank orders each of cands counts for (Counts: candidates x rank orders): fit_ord for the fitting ones
        (cands' first nf), every distinct order for those another dispatcher let in (appended)."""
        return np.r_[self.fit_ord, self.n_ord[cands.b[self.nf:]]]

    @property
    def nf(self) -> int:
        return int(np.count_nonzero(self.fits))

    def fitting(self) -> _Cands:
        """The candidates variant 0 fits (memory <= usable), in the space's order."""
        b = self.bidx[self.fits]
        return _Cands(b, self.rcidx[self.fits], self.memory[self.fits], _first_order(self.space, b))

    def floors(self, cands: _Cands, objective: str, top: int, keep_feasible: bool, bound: float, around) -> tuple:
        """(cands' compute floors, other's) in one candidate_floors call (one grouping of their rows), over
        floor_variants (a bound on every variant's step), where _prefilter bounds and there are others (not for
        fit(around=...), which prices every other one); else (None, None)."""
        if not (len(self.other) and around is None and _prefilters(len(cands.b), objective, top, keep_feasible, bound)):
            return None, None
        o = self.other
        low = candidate_floors(self.space, np.r_[cands.b, self.bidx[o]], np.r_[cands.r, self.rcidx[o]],
                               floor_variants(self.space))
        return low[:len(cands.b)], low[len(cands.b):]

    def can_rank(self, objective: str, pre, low_o, reach_to: float) -> np.ndarray:
        """The positions of other priced under the other dispatchers: where they can rank, their floor within the
        prefilter's K0 (pre[5]), as _prefilter keeps a fitting candidate; every one where no prefilter applies, and for
        fit(around=...) (rank_config's `of` counts every fitting plan: Counts.feasible may not depend on the bounds)."""
        if pre is None or low_o is None:
            return np.arange(len(self.other))
        o = self.other
        can = (_objective(objective, self.space.settings, self.space, low_o, self.memory[o], self.bidx[o])
               <= max(pre[5], reach_to) * (1.0 + BOUND_MARGIN))
        return np.flatnonzero(can)

    def rescue(self, at, c: Counts, floor: bool = True) -> np.ndarray:
        """_other_dispatchers on other[at], its bytes seeded in the root: the positions (in other) it fits."""
        if not len(at):  # (nothing to price: _other_dispatchers' empty answer)
            return at
        o = self.other[at]
        f, e, codes, m, mc, fl, held = _other_dispatchers(self.space, self.bidx[o], self.rcidx[o], self.memory[o],
                                                          self.usable, floor)
        c.bound_fallback |= not held
        self.root.seed(self.nf + at, codes, e)
        self.unpriced[at], self.least[at], self.least_code[at], self.floored[at] = False, m, mc, fl
        return at[f]

    def let_in(self, at, c: Counts) -> np.ndarray:
        """rescue(at), the positions it fits added to rescued, and the counts taken again: returns those positions."""
        more = self.rescue(at, c)
        self.rescued = np.r_[self.rescued, more]
        self.count(c)
        return more

    def count(self, c: Counts) -> None:
        """A candidate (x its rank orders) fits where variant 0 or another dispatcher fits it (rescued): once."""
        mult = self.n_ord[self.bidx]
        c.feasible = int(self.fit_ord.sum() + mult[self.other[self.rescued]].sum())
        c.did_not_fit = int(mult.sum()) - c.feasible
        c.dispatcher_unpriced = int(mult[self.other[self.unpriced]].sum())

    def closest(self, c: Counts):
        """_closest's plan of the space; where none fits (with any dispatcher) it reads every candidate's total, and
        the least over the dispatchers of those their floor left unpriced (none fits those: _other_dispatchers)."""
        if len(self.bidx) and not self.nf and not len(self.rescued):
            self.memory = memory_totals(self.space, self.bidx, self.rcidx)
            if self.floored.any():
                self.rescue(np.flatnonzero(self.floored), c, floor=False)
        return _closest(self.space, self.bidx, self.rcidx, self.memory, self.other, self.least, self.least_code)

    def appended(self, cands: _Cands, at) -> tuple:
        """(cands with other[at] appended (variant 0's memory, over usable: best_variants takes variant 0 only where
        it fits), the _LazyFit view of them all's take: the fitting ones, then other[rescued])."""
        o = self.other[at]
        more = _Cands(self.bidx[o], self.rcidx[o], self.memory[o], _first_order(self.space, self.bidx[o]))
        return cands.joined(more), self.root.take(np.r_[np.arange(self.nf), self.nf + self.rescued]).take

    def with_rescued(self, pre, low_o):
        """_prefilter's result with the rescued candidates appended as kept, with their floors."""
        if pre is None:
            return None
        o = self.other[self.rescued]
        low_r = (low_o[self.rescued] if low_o is not None
                 else candidate_floors(self.space, self.bidx[o], self.rcidx[o], floor_variants(self.space)))
        return (np.r_[pre[0], np.ones(len(self.rescued), dtype=bool)], np.r_[pre[1], low_r]) + tuple(pre[2:])


def _extra_of(space: Space, cands: _Cands, root):
    """What a stack variant adds to the memory of candidates cands[i] (TP overlap's buffers, an fp8 recipe's weight
    copies: variant_memory), as a function of i: priced only on the candidates that need it (the prefilter's seed
    and those it keeps; each candidate's figure is its own, memory_totals); fit's dispatcher search: the _LazyFit's
    views (root.take); None where one variant runs."""
    if space.dispatchers is None:
        return lambda i: variant_memory(space, cands.b[i], cands.r[i], cands.m[i])
    return root.take if len(space.variants) > 1 else None


def _kept_first_orders(space: Space, cands: _Cands, extra_of, pre, objective: str, top: int, keep_feasible: bool,
                       c: Counts, around, n_ord):
    """Steps 3 and 4 (_first_orders) on the candidates _prefilter keeps, its bounds and seed reused: (the kept
    candidates, their extra, _first_orders' (fv, step1, floor1, ok)), or None where the fact the prefilter rests on
    (step >= floor) fails (c.bound_fallback: every candidate is priced, as without it). n_ord: each candidate's rank
    orders as the counts take them (_Others.mult)."""
    keep, low, seeded, seed, seed_v0, k0, seed_best = pre
    kept = cands.take(keep)
    ke = None if extra_of is None else extra_of(np.flatnonzero(keep))
    v0, priced, known = _kept_v0(space, keep, kept.b, kept.r, kept.order, seed, seed_v0, seed_best)
    first = _first_orders(space, *kept, objective, top, keep_feasible, c, ke, v0,
                          cap=k0 * (1.0 + BOUND_MARGIN) if space.dispatchers is not None else np.inf,
                          known=known, around=None if around is None else float(around[0]))
    c.time_evaluations += seeded + priced
    if not np.all(first[1] >= low[keep]):
        c.bound_fallback = True
        return None
    c.prefilter_dropped = int(n_ord[~keep].sum())  # in candidates with their rank orders, as c.feasible
    return kept, ke, first


def _search_space(space: Space, objective: str, top: int, keep_feasible: bool, around: tuple = None,
                  bound: float = np.inf):
    """Steps 2-5 of the module docstring on one space: (Ranked | None, Counts of the memory and time
    evaluations, closest (settings, space, base row, recompute index, bytes) or None, feasible or None).
    around (fit's): ranking keys whose rows before are counted (Counts.around_before, around_same).
    With fit's dispatcher search (_Others) the candidates are the fitting ones, then those only another dispatcher
    fits (_other_dispatchers, module docstring), each counted once: feasible where one dispatcher fits, did_not_fit
    else (dispatcher_unpriced among them: not priced under the others), in candidates x rank orders."""
    c = Counts()
    # every candidate and order whose objective is at most around's (the margin: rank_key's rounding) is priced
    # as without the bounds, so that the rows before it are all found (fit's around)
    reach_to = -np.inf if around is None else float(around[0]) * (1.0 + BOUND_MARGIN)
    lazy = space.dispatchers is not None and len(space.variants) > 1  # fit's dispatcher search (_LazyFit)
    space = with_order_memory(space)  # memory priced at each row's lightest rank order, the others adding theirs
    d = _Others.start(space, *_candidate_memory(space, c, lazy))
    cands = d.fitting()
    extra_of = _extra_of(space, cands, d.root)
    # ---- step 3's prefilter; the other dispatchers priced where their candidates can rank (d.can_rank)
    low, low_o = d.floors(cands, objective, top, keep_feasible, bound, around)
    pre = (_prefilter(space, *cands, objective, top, keep_feasible, c, extra_of, reach_to, bound, low)
           if d.nf else None)
    d.let_in(d.can_rank(objective, pre, low_o, reach_to), c)
    closest = d.closest(c)
    if not d.nf and not len(d.rescued):
        return None, c, closest, None
    if len(d.rescued):
        cands, extra_of = d.appended(cands, d.rescued)
        pre = d.with_rescued(pre, low_o)
    if pre is not None and not pre[0].any():  # another space's bound (vocab_spaces) leaves none that can rank
        c.time_evaluations += pre[2]
        c.prefilter_dropped = int(d.mult(cands).sum())
        return None, c, closest, None
    # ---- steps 3 and 4: each candidate's variant and step at its first order; which other orders can still rank
    first = None if pre is None else _kept_first_orders(space, cands, extra_of, pre, objective, top, keep_feasible, c,
                                                        around, d.mult(cands))
    if first is None:
        if pre is not None and d.unpriced.any():  # the bound failed: the other dispatchers too, where the floor left
            cands, extra_of = d.appended(cands, d.let_in(np.flatnonzero(d.unpriced), c))  # them unpriced
        extra = None if extra_of is None else extra_of(np.arange(len(cands.b)))
        first = cands, extra, _first_orders(space, *cands, objective, top, keep_feasible, c, extra,
                                            around=None if around is None else float(around[0]))
    cands, extra, (fv, step1, floor1, ok) = first
    if extra is not None:  # each candidate's memory with its chosen variant
        cands = cands._replace(m=cands.m + _chosen(extra, fv))
    ranked, feasible = _priced_rows(space, objective, top, keep_feasible, around, c, cands, fv, step1, floor1, ok,
                                    len(d.rescued) > 0)
    return ranked, c, closest, feasible


def _priced_rows(space: Space, objective: str, top: int, keep_feasible: bool, around, c: "Counts", cands: _Cands, fv,
                 step1, floor1, ok, rescued: bool):
    """Step 5 of _search_space: the other rank orders _first_orders left that can still rank priced (every one where
    the bound's facts fail), the rows of every priced (candidate, order) pair, and the top ranked (Ranked, feasible
    or None). rescued: some candidates are in only because another dispatcher fits them (their untried rows dropped)."""
    fb, fr, fm, first_order = cands
    feasible = None
    oi, ri = pairs(ok.T)  # order-major, so that equal collectives stay neighbours (comm.apply_unique)
    pb, pr, po, pv = fb[ri], fr[ri], space.orders[oi], fv[ri]
    step2, floor2 = step_times(space, pb, pr, po, pv)
    c.time_evaluations += len(pb)
    if not keep_feasible and not (np.array_equal(floor2, floor1[ri]) and np.all(step1 >= floor1) and np.all(step2 >= floor2)):
        # the cost model no longer has the two facts the bound rests on: evaluate every order
        ri2, oi2, step3 = _other_orders(space, fb, fr, fv, ok, first_order, fm, step1 if rescued else None)
        c.time_evaluations += len(ri2)
        ri, pb, pr, po, pv = (np.concatenate([ri, ri2]), np.concatenate([pb, fb[ri2]]), np.concatenate([pr, fr[ri2]]),
                              np.concatenate([po, space.orders[oi2]]), np.concatenate([pv, fv[ri2]]))
        step2 = np.concatenate([step2, step3])
        c.bound_fallback = True
    all_b = np.concatenate([fb, pb])
    all_r = np.concatenate([fr, pr])
    all_o = np.concatenate([first_order, po])
    all_v = np.concatenate([fv, pv])
    all_s = np.concatenate([step1, step2])
    all_m = np.concatenate([fm, fm[ri] + order_extra(space, pb, po)])  # (the first order: the lightest, extra 0)
    live = None
    if rescued:  # a candidate let in by another dispatcher whose every fitting variant was left untried (bounded:
        live = np.isfinite(all_s)  # it cannot rank) or that none fits (its step inf) makes no row
    if space.light is not None:  # an other order where the chosen variant does not fit (its NVLS buffers; a deferred
        # choice resolved after _other_order_mask read variant 0's memory) makes no row (_other_order_mask)
        fits = np.r_[np.ones(len(fb), dtype=bool), all_m[len(fb):] <= mem.capacity(space.settings)[1]]
        live = fits if live is None else live & fits
    if live is not None:
        all_b, all_r, all_o, all_v, all_s, all_m = (x[live] for x in (all_b, all_r, all_o, all_v, all_s, all_m))
    all_obj = _objective(objective, space.settings, space, all_s, all_m, all_b)
    if keep_feasible:
        feasible = dict(base=all_b, rc=all_r, order=all_o, var=all_v, step=all_s, memory=all_m, space=space)
    if around is not None:
        # every pair that can sort before `around` or tie with it was priced (reach_to); the others sort after it
        c.around_before, c.around_same = rows_before(space, objective, all_b, all_r, all_s, all_m, around)
    return _ranked_rows(space, objective, top, all_b, all_r, all_o, all_v, all_s, all_m, all_obj), feasible


def _ranked_rows(space: Space, objective: str, top: int, all_b, all_r, all_o, all_v, all_s, all_m, all_obj) -> Ranked:
    """Step 5 of the module docstring: the `top` rows of the priced (candidate, order, variant) pairs by the ranking
    keys (objective, memory[, step]), one row per candidate and result: an order that gives the same step time as a
    better ranked order of the same candidate is the same row (the first order listed is kept)."""
    keys = (all_obj, all_m, all_s) if objective == "memory" else (all_obj, all_m)
    window = _top(tuple(rank_key(k) for k in keys), min(top * len(space.orders), len(all_obj)))
    seen, idx = set(), []
    window_steps = rank_key(all_s[window])  # (rank_key is elementwise: one call, not one a window entry)
    for i, step_key in zip(window, window_steps):
        key = (int(all_b[i]), int(all_r[i]), float(step_key))
        if key not in seen:
            seen.add(key)
            idx.append(i)
            if len(idx) == top:
                break
    idx = np.asarray(idx, dtype=np.int64)
    return Ranked(settings=space.settings, space=space, base=all_b[idx], rc=all_r[idx], order=all_o[idx],
                  objective=all_obj[idx], memory=all_m[idx], step=all_s[idx], var=all_v[idx])


def plan_job_fields(row_plan: dict) -> dict:
    """The plan_dict keys of a row that are Job fields (not global_batch_tokens: the row
    gives the batch in sequences). power_limit_w is the limit in force; it is a job field
    only where the job set it (power_limit_source "job"), not the hardware's own limit."""
    keys = set(Job.model_fields) - {"global_batch_tokens"}
    d = {k: v for k, v in row_plan.items() if k in keys}
    if row_plan.get("power_limit_source", "job") != "job":
        d["power_limit_w"] = None
    return d


def _job_fields(job: Job, row_plan: dict) -> dict:
    """The Job fields of one row (plan_job_fields), with the model and hardware named as the
    user named them (a path stays a path)."""
    d = plan_job_fields(row_plan)
    d.update(model=job.model, hardware=job.hardware)
    return d


def row_job(job: Job, row: dict) -> Job:
    """The Job that `planner explain` takes to reproduce a fit row."""
    return Job(**_job_fields(job, row["plan"]))


def explain_args(job: Job, row: dict) -> list[str]:
    """`planner explain` command-line arguments that reproduce a fit row (options left at
    the Job defaults, which explain shares, are left out)."""
    d = _job_fields(job, row["plan"])
    defaults = {k: f.default for k, f in Job.model_fields.items()}
    from .catalog import load_stack
    from .plan import default_sequence_parallel

    st = load_stack(d["stack"]) if d.get("stack") else None
    if d["sequence_parallel"] == default_sequence_parallel(st, d["tp"]):  # (off where the stack's code has none)
        d["sequence_parallel"] = None
    if st is not None and d.get("attention") == st.defaults.attention:  # what explain takes without --attention
        d["attention"] = None
    if d["schedule"] == ("interleaved" if d["vpp"] > 1 else "1f1b"):
        d["schedule"] = None
    if d.get("etp") == d["tp"]:  # what explain assumes without it (Megatron's default: etp = tp)
        d["etp"] = None

    if named_mode(load_stack(d["stack"]) if d.get("stack") else None, d.get("sharding_mode")):
        d["sharding"] = d["sharding_mode"]  # --sharding takes the stack's mode by name
    flags = [("tp", "--tp"), ("cp", "--cp"), ("pp", "--pp"), ("vpp", "--vpp"), ("dp", "--dp"),
             ("micro_batch", "--micro-batch"), ("global_batch", "--global-batch"), ("seq_len", "--seq-len"),
             ("sharding", "--sharding"), ("shard_group", "--shard-group"), ("recompute", "--recompute"),
             ("precision", "--precision"), ("schedule", "--schedule"), ("rank_order", "--rank-order"),
             ("activation_model", "--activation-model"), ("attention", "--attention"),
             ("headroom", "--headroom"), ("reserve_GiB", "--reserve-gib"), ("tokens", "--tokens"),
             ("calibration", "--calibration"), ("ep", "--ep"), ("etp", "--etp"), ("moe_capacity_factor", "--moe-capacity-factor"),
             ("moe_rank_imbalance", "--moe-rank-imbalance"),
             ("mtp_layers", "--mtp-layers"), ("microbatch_group", "--microbatch-group"),
             ("cp_comm_type", "--cp-comm-type"), ("hierarchical_cp_sizes", "--hierarchical-context-parallel-sizes"),
             ("moe_aux_loss_coeff", "--moe-aux-loss-coeff"), ("moe_z_loss_coeff", "--moe-z-loss-coeff"),
             ("first_stage_layers", "--first-stage-layers"), ("last_stage_layers", "--last-stage-layers"),
             ("recompute_layers", "--recompute-layers")]
    args = ["--model", str(d["model"]), "--gpus", str(d["gpus"])]
    if d.get("batch_size_schedule"):  # the row's batch ramp (its global_batch is the last phase's)
        from .batch_ramp import to_megatron

        args += ["--step-batch-size-schedule", to_megatron([(p["from_tokens"], p["global_batch"])
                                                            for p in d["batch_size_schedule"]])]
    if d["hardware"] != defaults["hardware"]:
        args += ["--hardware", str(d["hardware"])]
    for key, flag in flags:
        v = d.get(key)
        # (attention: None above where it is the stack's default, which explain takes; else named, even flash)
        if v is None or (key not in ("tp", "cp", "pp", "dp", "global_batch", "seq_len", "micro_batch", "attention")
                         and v == defaults.get(key)):
            continue
        if key == "mtp_layers" and not v and not _mtp_default(d):  # none, and none is what explain takes without it
            continue
        if key == "moe_aux_loss_coeff" and v == (_recipe_value(d, key) or 0.0):  # what explain takes without it
            continue
        if isinstance(v, float):
            v = int(v) if v.is_integer() and abs(v) < 2**53 else repr(v)
        if isinstance(v, (list, tuple)):  # --hierarchical-context-parallel-sizes A,P
            v = ",".join(map(str, v))
        args += [flag, str(v)]
    for key, on, off in (("sequence_parallel", "--sequence-parallel", "--no-sequence-parallel"),
                         ("causal_attention_flops", "--causal-flops", "--noncausal-flops"),
                         ("ep_comm_overlap", "--ep-comm-overlap", "--no-ep-comm-overlap")):
        v = d.get(key)
        if key == "ep_comm_overlap" and not v:  # off is what explain assumes without it
            continue
        if v is not None and v != defaults.get(key):
            args.append(on if v else off)
    disp = d.get("moe_dispatcher")
    if disp is not None and disp != (_recipe_value(d, "moe_dispatcher") or load_stack(d["stack"]).defaults.moe_dispatcher):
        args += ["--moe-dispatcher", disp]  # not what explain takes without it (the recipe's where the stack runs it, else the stack's)
    hcf = d.get("moe_hybridep_capacity_factor")  # the row's (a hybridep row only), where not the stack's default
    if hcf is not None and hcf != load_stack(d["stack"]).defaults.moe_hybridep_capacity_factor:
        args += ["--moe-hybridep-capacity-factor", repr(float(hcf))]
    if job.moe_load_balancing is not None:  # the job's router balancing (else the model's default: imbalance.py)
        args += ["--moe-load-balancing", job.moe_load_balancing]
    if job.moe_pad_to_capacity:  # the experts padded to the capacity (off is what explain assumes without it)
        args.append("--moe-pad-to-capacity")
    if d.get("pp_p2p_overlap") is False:  # the job turned the stack's p2p overlap off (plan.apply_pp_p2p_overlap)
        args.append("--no-pp-p2p-overlap")
    half_default = st is not None and st.defaults.fp16  # the stack's 16-bit dtype (plan.apply_stack_features)
    for key, flag in (("fp8_attention", "--fp8-attention"), ("fp16", "--fp16"),
                      ("moe_router_pre_softmax", "--moe-router-pre-softmax"), ("fsdp_root_unit", "--fsdp-root-unit")):
        if key == "fp16" and bool(d.get(key)) == half_default:  # what explain takes without it
            continue
        if d.get(key):  # on (off is what explain assumes without it)
            args.append(flag)
        elif key == "fp16":  # bf16 on a stack whose default is fp16
            args.append("--no-fp16")
    # the job's outer-DP optimizer sharding acts on HSDP rows only, whose plans record it (plan.plan_dict); another
    # row's command leaves it out, as explain prices that row without it
    args += job_field_args(job, skip=_ROW_FIELDS + (() if row["plan"].get("mfsdp_outer_optim") else
                                                    ("mfsdp_outer_optim",)))
    if d.get("pp_p2p_overlap_warmup_flush"):  # the job overlapped the warm-up / flush p2p (plan.apply_pp_p2p_warmup_flush)
        args.append("--pp-p2p-overlap-warmup-flush")
    stack = load_stack(d["stack"])
    if d["bytes_per_param"] != stack.defaults.bytes_per_param:
        if not isinstance(d["bytes_per_param"], str):
            raise PlannerError("a custom bytes_per_param has no explain option", "use a job YAML with the row's plan")
        args += ["--bytes-per-param", d["bytes_per_param"]]
    return args + stack_args(d, stack)


def config_explain_args(path: str, job: Job, row: dict, axes: tuple = ()) -> list[str]:
    """`planner explain CONFIG` arguments that price a row of `planner fit CONFIG` (the file, whose
    non-plan settings every row took): the row's GPU count and every plan axis fit searched, each
    named (an option beats the file's value: none of the file's plan is kept), then the stack options
    where the row's differ from what resolve infers (stack_args; TP overlap is named above, the stack
    is the file's). The job options given to the fit itself (--seq-len, --hardware, ...) are the
    caller's to repeat. axes: the expert axes (ep, etp) the file or a pin sets (fit_config.file_axes), named on a
    dense row too, where `explain CONFIG` would otherwise keep the file's (a torchtitan job's etp 4 at the row's
    tp 2 is refused)."""
    d = _job_fields(job, row["plan"])
    args = [str(path), "--gpus", str(d["gpus"])]
    for key, flag in (("tp", "--tp"), ("cp", "--cp"), ("pp", "--pp"), ("vpp", "--vpp"), ("dp", "--dp"),
                      ("micro_batch", "--micro-batch")):
        args += [flag, str(d[key])]
    args += ["--sharding", str(d.get("sharding_mode") or d["sharding"])]
    if d["sharding"] == "hsdp":
        args += ["--shard-group", str(d["shard_group"])]
    args += ["--recompute", str(d["recompute"]), "--sequence-parallel" if d["sequence_parallel"] else "--no-sequence-parallel",
             "--schedule", str(d["schedule"]), "--rank-order", str(d["rank_order"])]
    if d.get("recompute_layers") is not None:  # the row's block window (fit_config.fixed_by_pins), where a reader would
        args += ["--recompute-layers", str(d["recompute_layers"])]  # work it out anew at the row's pp (torchtitan's)
    if "moe_capacity_factor" in row["plan"]:  # a mixture-of-experts model: its expert axes
        args += ["--ep", str(d["ep"]), "--etp", str(d.get("etp") or d["tp"])]
    else:  # a dense row: the expert axes the file sets, as the row has them (ep 1, etp its tp)
        args += [a for k, flag in (("ep", "--ep"), ("etp", "--etp")) if k in axes
                 for a in (flag, str(d.get(k) or (d["tp"] if k == "etp" else 1)))]
    args.append("--tp-comm-overlap" if d.get("tp_comm_overlap") else "--no-tp-comm-overlap")
    # fit CONFIG holds the file's global batch (as `explain CONFIG` with fit's options reads it) on every row; a
    # torchtitan config (the stack's start-up rules are torchtitan's: stack_db runs.startup_rules) leaves its
    # global_batch_size -1 to the mesh, which `explain CONFIG` works out at the row's (torchtitan.read_sections:
    # local_batch_size x dp, train.py @e347b1e5e l. 196-200), so the row's batch is named
    st = load_stack(d["stack"])
    if (st.runs is not None and st.runs.startup_rules == "torchtitan" and job.global_batch_tokens is None
            and job.batch_size_schedule is None and d.get("global_batch") is not None):
        args += ["--global-batch", str(d["global_batch"])]
    # the row's core attention, where not what `explain CONFIG` takes: the file's, else the stack's defaults.attention
    # (fit plans plan.fit_attention for a job that leaves it out: flash on megatron-deepspeed, whose default is eager)
    file_attention = job.attention if "attention" in job.model_fields_set else load_stack(d["stack"]).defaults.attention
    if d.get("attention") is not None and d["attention"] != file_attention:
        args += ["--attention", str(d["attention"])]
    disp = d.get("moe_dispatcher")  # the row's, where not what `explain CONFIG` takes (the file's, else the recipe's or stack's)
    if disp is not None and disp != (job.moe_dispatcher or _recipe_value(d, "moe_dispatcher")
                                     or load_stack(d["stack"]).defaults.moe_dispatcher):
        args += ["--moe-dispatcher", disp]
    eo = d.get("ep_comm_overlap")  # the row's EP overlap (fit plans it on where it runs), where not the file's (explain: off without it)
    if eo and not job.ep_comm_overlap:
        args.append("--ep-comm-overlap")
    elif eo is False and job.ep_comm_overlap:
        args.append("--no-ep-comm-overlap")
    rest = stack_args(d, load_stack(d["stack"]))
    i = 0
    while i < len(rest):
        if rest[i] == "--stack":
            i += 2
            continue
        if rest[i] not in ("--tp-comm-overlap", "--no-tp-comm-overlap"):
            args.append(rest[i])
        i += 1
    return args


# the FIELD_OPTIONS fields explain_args reads from the row itself (above); the others from the job
_ROW_FIELDS = ("fp8_attention", "fp16", "moe_router_pre_softmax", "fsdp_root_unit", "moe_aux_loss_coeff",
               "moe_z_loss_coeff", "moe_dispatcher", "fp8_grouped_experts", "moe_hybridep_capacity_factor")


def job_field_args(job: Job, skip: tuple = ()) -> list[str]:
    """The FIELD_OPTIONS options (planner/field_options.py) of the job fields a fit's job set and
    every row took as they are: each the job sets to other than its default, as the option."""
    from .field_options import FIELD_OPTIONS

    args: list[str] = []
    for o in FIELD_OPTIONS:
        v = getattr(job, o.field)
        if (o.field in skip or o.field not in job.model_fields_set or v in (None, [], {})
                or v == Job.model_fields[o.field].default):
            continue
        if o.kind == "bool":
            args.append(o.flag if v else "--no-" + o.flag[2:])
        else:
            v = ",".join(f"{k}={n}" for k, n in v.items()) if isinstance(v, dict) else v
            args += [o.flag, ",".join(map(str, v)) if isinstance(v, list) else str(v)]
    return args


def _mtp_default(d: dict) -> int:
    """The MTP modules explain takes without --mtp-layers: the model recipe's (recipe.apply, where the
    stack trains them), else the model's own."""
    recipe = _recipe_value(d, "mtp_layers")
    if recipe is not None:
        return int(recipe)
    from .catalog import load_model

    return int(load_model(d.get("model_file") or d["model"]).mtp_layers or 0)


def _recipe_value(d: dict, field: str):
    """The model recipe's value of `field` that explain takes for a row's job without the option
    (recipe.apply on the row's model, hardware, stack and GPU count); None where it takes none."""
    from .recipe import apply

    data, _ = apply({"model": d.get("model_file") or d["model"], "hardware": d["hardware"], "stack": d["stack"],
                     "gpus": d["gpus"]})
    return data.get(field)


def stack_args(d: dict, stack) -> list[str]:
    """The stack flags of a plan (plan_dict fields): --stack unless the default, and each
    option only where it differs from what `plan.resolve` infers when it is left out."""
    args = [] if d["stack"] == Job.model_fields["stack"].default else ["--stack", str(d["stack"])]
    probe = Job(model="-", gpus=1, precision=d["precision"], stack=d["stack"])
    inferred, _ = stack_options(stack, probe, tp=d["tp"], sp=d["sequence_parallel"])
    if (mode_dpo := mode_dp_overlap(stack, d.get("sharding_mode"))) is not None:  # the mode's default (plan.resolve)
        inferred["dpo"] = int(mode_dpo)
    for key, field, on, off in (("tpo", "tp_comm_overlap", "--tp-comm-overlap", "--no-tp-comm-overlap"),
                                ("compile", "torch_compile", "--compile", "--no-compile"),
                                ("dpo", "dp_comm_overlap", "--dp-comm-overlap", "--no-dp-comm-overlap")):
        # an uncompiled plan on a stack that compiles says so: fit takes compile on there (space.variant_choices)
        # and searches it off only where a start-up rule refuses the options compiled (uncompiled_choices)
        explicit = key == "compile" and not d[field] and stack.compiled_kernels is not None
        if bool(inferred[key]) != bool(d[field]) or explicit:
            args.append(on if d[field] else off)
    if d["precision"] != "bf16" and d.get("fp8_recipe") and FP8_RECIPES[inferred["f8r"]] != d["fp8_recipe"]:
        args += ["--fp8-recipe", d["fp8_recipe"]]
    fge = d.get("fp8_grouped_experts")  # the row's routed experts (fit searches them: space.variant_choices)
    if fge is not None and bool(fge) != bool(stack.defaults.fp8_grouped_experts):
        args.append("--fp8-grouped-experts" if fge else "--no-fp8-grouped-experts")
    for key, flag, off in (("account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split",
                            "--no-account-for-embedding"),
                           ("account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split",
                            "--no-account-for-loss")):
        # where it differs from the stack's default (StackDefaults.account_for_*: torchtitan's end weights 1, which
        # plan._split_defaults gives a job that leaves them out); a loss end of more layers is its own option below
        if key.startswith("account_for_loss") and (d.get("loss_layers_in_pipeline_split") or 0) > 1:
            continue
        if bool(d.get(key)) != bool(getattr(stack.defaults, key)):
            args.append(flag if d.get(key) else off)
    for key, flag in (("first_stage_layers", "--first-stage-layers"), ("last_stage_layers", "--last-stage-layers")):
        if d.get(key):  # the row's placement of the left-over layers (space.stage_placements), or the job's
            args += [flag, str(d[key])]
    if d.get("loss_layers_in_pipeline_split"):  # > 1 (plan_dict: 0 / 1 are the flag above)
        args += ["--loss-layers-in-pipeline-split", str(d["loss_layers_in_pipeline_split"])]
    if d.get("power_limit_w") is not None:  # the job's limit (plan_job_fields: None where the hardware's is in force)
        args += ["--power-limit-w", repr(d["power_limit_w"])]
    return args


def rows_of(ranked: Ranked) -> list[dict]:
    """explain's JSON for the ranked candidates: evaluate + to_json on those plans (with a dispatcher
    search, each row with its own dispatcher's Settings: Space.settings_of)."""
    space = ranked.space
    if space.dispatchers is not None:
        codes = space.variants[ranked.var, DISPATCHER_COLUMN]
        rows = [None] * len(ranked.base)
        for code in _distinct(codes):
            i = np.flatnonzero(codes == code)
            st = space.dispatchers[int(code)]
            sub = Ranked(settings=st, space=replace(space, settings=st, dispatchers=None), base=ranked.base[i],
                         rc=ranked.rc[i], order=ranked.order[i], objective=ranked.objective[i], memory=ranked.memory[i],
                         step=ranked.step[i], var=ranked.var[i])
            for j, row in zip(i, rows_of(sub)):
                rows[j] = row
        return rows
    plan = ranked.space.plans(ranked.base, ranked.rc, ranked.order, ranked.var)
    est = evaluate(ranked.settings, plan)
    # a batch ramp: every row's phases priced at once (explain.ramp_estimates), each row's read from them
    ramp = ramp_estimates(ranked.settings, plan) if ranked.settings.batch_schedule and ranked.settings.tokens else None
    # an MoE model: moe_report's figures priced once for every row (explain.moe_arrays), each row reads its own
    moe = moe_arrays(ranked.settings, plan, est) if layer_list(ranked.settings.model).has_experts else None
    # and the placement report's group links (placement.links)
    placed = placement.links(ranked.settings, plan) if len(ranked.base) > 1 else None
    # and the memory's groups (explain.memory_groups: every row's sums at once)
    groups = memory_groups(ranked.settings, est) if len(ranked.base) > 1 else None
    rows = [to_json(ranked.settings, plan, est, i, ramp, moe, placed, groups) for i in range(len(ranked.base))]
    if ranked.settings.calibration is not None and len(rows) > 1:
        # which measured figures a row used is its own: the batch's list is the union over every row
        from .explain import calibration_report

        for i, row in enumerate(rows):
            one = PlanArrays(**{k: (np.asarray(v)[i] if np.ndim(v) else v) for k, v in vars(plan).items()})
            row["calibration"] = calibration_report(ranked.settings, evaluate(ranked.settings, one))
    return rows


def check_pins(job: Job, opts: SpaceOptions, where: str = "", gpus_list: list[int] | None = None) -> tuple:
    """A pinned value that no plan of this model can use is bad input (exit 2), not "no plan
    fits" (exit 1): tp must divide the attention heads and divide, or be a multiple of, the
    KV heads; cp must divide the sequence length; pp at most the layers. Returns what the job
    left out and was assumed (its training length: plan._seq_len), the job's, not a row's. A
    pinned sharding mode whose trainer refuses a setting the job gives is refused naming the
    check (plan.stack_for_settings), not reported as unknown. With `gpus_list`, the pinned degrees are checked
    against the GPU counts, the global batch and the model's experts too (_check_pin_arithmetic)."""
    from .catalog import load_stack
    from .plan import SHARDING_CODES, stack_for_settings

    # pinned options that contradict each other on every plan: refused as explain refuses them (rule TP_OVERLAP_SP), not
    # searched (before the 2026-12-07 audit5 `fit --tp 1 --tp-comm-overlap` searched every plan, then tried the GPU
    # counts nearby for 40 s, to answer "no plan satisfies the constraints", exit 1)
    if job.tp_comm_overlap:
        why = ("--tp 1" if opts.tp is not None and max(opts.tp) == 1 else
               "--no-sequence-parallel" if opts.sequence_parallel is False else None)
        if why is not None:
            raise PlannerError(f"{where}--tp-comm-overlap with {why}: tp_comm_overlap needs sequence parallelism with "
                               "tp > 1", "pin --tp above 1 with sequence parallelism, or drop --tp-comm-overlap")
    # rule TPO_COMPILE: a stack whose TP overlap is async TP under torch.compile (stack_db overlap
    # tp_comm_overlap_needs_compile: torchtitan @e347b1e5e torchtitan/distributed/tensor_parallel.py l. 16-23,
    # maybe_enable_async_tp raises 'Async TP requires 'model' in --compile.components and --compile.enable'); before
    # 2026-12-07 `fit --stack torchtitan --no-compile --tp-comm-overlap` searched every plan and the GPU counts nearby
    if job.tp_comm_overlap and job.torch_compile is False:
        ov = getattr(load_stack(job.stack), "overlap", None)
        if ov is not None and ov.tp_comm_overlap_needs_compile:
            raise PlannerError(f"{where}--tp-comm-overlap with --no-compile: tp_comm_overlap on stack {job.stack} is "
                               "async TP, which needs torch_compile (stack_db overlap tp_comm_overlap_needs_compile; "
                               "torchtitan @e347b1e5e torchtitan/distributed/tensor_parallel.py l. 20-23 raises 'Async "
                               "TP requires 'model' in --compile.components and --compile.enable')",
                               "drop --no-compile (or give --compile), or drop --tp-comm-overlap")
    if opts.sequence_parallel and opts.tp is not None and max(opts.tp) == 1:  # rule SP_TP
        raise PlannerError(f"{where}--sequence-parallel with --tp 1: sequence_parallel needs tp > 1",
                           "pin --tp above 1, or drop --sequence-parallel")
    if opts.schedule is not None and set(opts.schedule) == {"interleaved"} and (
            (opts.pp is not None and max(opts.pp) < 2) or (opts.vpp is not None and max(opts.vpp) < 2)):
        pins = "--pp " + ",".join(map(str, opts.pp)) if opts.pp is not None and max(opts.pp) < 2 else \
            "--vpp " + ",".join(map(str, opts.vpp))
        raise PlannerError(f"{where}--schedule interleaved with {pins}: the interleaved schedule needs pp >= 2 and "
                           "vpp >= 2", "pin --pp and --vpp at 2 or more, or another --schedule")
    for n in opts.sharding or ():
        if job.sharding_mode is None:  # a level (none, zero1, ...) whose every mode refuses the job, or a refusing mode
            key = "sharding" if n in SHARDING_CODES else "sharding_mode"
            stack_for_settings(job.model_copy(update={key: n}), load_stack(job.stack), where)
    settings, gbs, seq, _ = settings_for(job, where=where)
    m = settings.model
    a, k, L = m.num_attention_heads, m.kv_heads, m.num_layers
    checks = [
        ("--tp", opts.tp, lambda t: a % t == 0 and (k % t == 0 or t % k == 0),
         f"the {a} attention heads ({k} KV heads) of {m.name}", [t for t in range(1, a + 1) if a % t == 0 and (k % t == 0 or t % k == 0)]),
        ("--cp", opts.cp, lambda c: seq % c == 0, f"seq_len {seq:,}", [c for c in (1, 2, 4, 8, 16, 32) if seq % c == 0]),
        ("--pp", opts.pp, lambda p: p <= L, f"the {L} layers of {m.name}", None),
    ]
    for flag, pins, ok, what, valid in checks:
        bad = [v for v in (pins or ()) if not ok(v)]
        if bad:
            shown = f"valid: {', '.join(map(str, valid))}" if valid else f"use {flag} 1 to {L}"
            raise PlannerError(f"{where}{flag} {', '.join(map(str, bad))} does not fit {what}", shown)
    if gpus_list is not None:
        _check_pin_arithmetic(job, settings, gbs, opts, gpus_list, where)
    return settings.seq_assumed + settings.code_assumed + settings.env_assumed


def _check_pin_arithmetic(job: Job, settings, gbs: int, opts: SpaceOptions, gpus_list: list[int],
                          where: str = "") -> None:
    """(check_pins' second half, on its resolved settings and global batch) A pinned degree that no plan can use by plain arithmetic with --gpus, the global batch or the model is bad
    input (exit 2, naming the option), as `explain` refuses the same values (plan.rule_codes MESH, BATCH, EP_EXPERTS,
    the interleaved schedule's pp >= 2), not "no plan satisfies the constraints" (exit 1, which stays for plans that
    were searched and did not fit, or that other rules refuse):
      - each --tp / --cp / --pp / --dp / --ep value must divide one of the GPU counts; the product of the pinned
        tp x cp x pp (x dp) of single values must divide one of them (with every one of the four pinned: equal one);
      - --ep above 1 needs a mixture-of-experts model whose routed experts it divides;
      - --vpp above 1 needs a --pp of at least 2 where pp is pinned;
      - each --micro-batch must divide the global batch (sequences; with one --dp pinned, dp x micro-batch must),
        unless the job has a batch ramp (its phases' batches are the search's to check)."""
    model = settings.model
    counts = ", ".join(f"{g:,}" for g in gpus_list)
    one = len(gpus_list) == 1

    def near() -> str:
        """The no-plan message's suggestion (nearest_working): GPU counts near the one given with a valid plan."""
        if not one:
            return ""
        g_ok, _ = nearest_working(job.model_copy(update=dict(gpus=gpus_list[0])), opts, where)
        return f"; GPU counts near {gpus_list[0]:,} with valid plans: {', '.join(f'{g:,}' for g in g_ok)}" if g_ok else ""

    def divisors_hint(flag: str) -> str:
        if one:
            g = gpus_list[0]
            return f"{flag} must divide --gpus {g:,}: {', '.join(str(d) for d in _small_divisors(g))}{near()}"
        return f"{flag} must divide one of the GPU counts ({counts})"

    for flag, pins in (("--tp", opts.tp), ("--cp", opts.cp), ("--pp", opts.pp), ("--dp", opts.dp), ("--ep", opts.ep)):
        bad = [v for v in (pins or ()) if not any(g % v == 0 for g in gpus_list)]
        if bad:
            raise PlannerError(f"{where}{flag} {', '.join(map(str, bad))} does not divide --gpus {counts}",
                               divisors_hint(flag))
    single = {n: v[0] for n, v in (("tp", opts.tp), ("cp", opts.cp), ("pp", opts.pp), ("dp", opts.dp))
              if v is not None and len(v) == 1}
    if len(single) > 1:
        prod = int(np.prod(list(single.values())))
        text = " x ".join(f"--{n} {v}" for n, v in single.items())
        if len(single) == 4 and prod not in gpus_list:
            raise PlannerError(f"{where}{text} = {prod:,}, not --gpus {counts}",
                               "make the product of tp, cp, pp and dp equal the GPU count (or leave --dp out to derive it)"
                               + near())
        if not any(g % prod == 0 for g in gpus_list):
            raise PlannerError(f"{where}{text} = {prod:,} does not divide --gpus {counts}",
                               "the pinned degrees multiply into the mesh: their product must divide the GPU count" + near())
    ep_bad = [e for e in (opts.ep or ()) if e > 1]
    if ep_bad:
        if model.moe is None:
            raise PlannerError(f"{where}--ep {', '.join(map(str, ep_bad))} on {model.name}, which has no experts",
                               "expert parallelism needs a mixture-of-experts model: leave --ep out or give --ep 1")
        n = model.moe.num_experts
        bad = [e for e in ep_bad if n % e]
        if bad:
            raise PlannerError(f"{where}--ep {', '.join(map(str, bad))} does not divide the {n} routed experts of "
                               f"{model.name}", f"valid: {', '.join(str(d) for d in _small_divisors(n))}")
    # rule EP_DPCP (plan.rule_codes): Megatron-Core folds the expert grid etp x ep x expert-dp into one pipeline stage's
    # tp x dp x cp ranks (hsdp: tp x shard_group x cp; parallel_state.py), GPU count / pp of them: a pinned etp x ep
    # that divides no GPU count over a pinned pp fits no plan. Refused only where no pair of the pinned lists can
    # (a list that keeps one is searched); before 2026-12-07 `fit --gpus 8 --ep 8 --etp 8` searched for 11-14 s
    if opts.etp is not None and opts.ep is not None:
        pps = opts.pp or (1,)
        fits = [(t, e) for t in opts.etp for e in opts.ep
                if any(g % p == 0 and (g // p) % (t * e) == 0 for g in gpus_list for p in pps)]
        if not fits:
            pairs = ", ".join(f"{t * e:,}" for t in opts.etp for e in opts.ep)
            stages = f" / --pp {', '.join(map(str, opts.pp))}" if opts.pp is not None else ""
            raise PlannerError(f"{where}--etp {', '.join(map(str, opts.etp))} x --ep {', '.join(map(str, opts.ep))} = "
                               f"{pairs} does not divide --gpus {counts}{stages}: the expert grid (etp x ep x expert-dp) "
                               "folds into a pipeline stage's tp x dp x cp ranks (Megatron-Core parallel_state.py; "
                               "rule EP_DPCP)", "give --etp x --ep dividing the GPU count per stage, or leave --etp out "
                               "(etp defaults to tp)")
    # rule HSDP_SHARD / SHARD_NOT_HSDP: a shard group divides dp (or is dp), and dp divides the GPU count: a pinned
    # group that divides no GPU count (no pinned dp) fits no plan; before 2026-12-07 `fit --gpus 64 --sharding hsdp
    # --shard-group 3` searched for 11-14 s, then answered exit 1
    if opts.shard_group:
        dps = opts.dp
        bad = [s for s in opts.shard_group
               if not any(g % s == 0 for g in gpus_list) or (dps is not None and not any(d % s == 0 for d in dps))]
        if bad:
            whose = f"--dp {', '.join(map(str, dps))}" if dps is not None and any(g % s == 0 for g in gpus_list
                                                                                   for s in bad) else f"--gpus {counts}"
            raise PlannerError(f"{where}--shard-group {', '.join(map(str, bad))} does not divide {whose}: a shard "
                               "group divides the data-parallel degree (rule HSDP_SHARD), which divides the GPU count",
                               (f"give a divisor of --dp {dps[0]}: {', '.join(map(str, _small_divisors(dps[0])))}"
                                if dps is not None and len(dps) == 1 else
                                f"give a divisor of --gpus {gpus_list[0]:,}: {', '.join(map(str, _small_divisors(gpus_list[0])))}"
                                if one else f"give a divisor of one of the GPU counts ({counts})"))
    if opts.vpp is not None and opts.pp is not None and min(opts.vpp) > 1 and max(opts.pp) < 2:
        raise PlannerError(f"{where}--vpp {', '.join(map(str, opts.vpp))} with --pp {', '.join(map(str, opts.pp))}: the "
                           "interleaved schedule needs pp >= 2 and vpp >= 2",
                           "give --pp 2 or more, or --vpp 1")
    if opts.micro_batch is not None and not settings.batch_schedule:
        dp = single.get("dp", 1)
        bad = [m for m in opts.micro_batch if gbs % (dp * m)]
        if bad:
            what = f"--dp {dp} x --micro-batch" if "dp" in single else "--micro-batch"
            raise PlannerError(f"{where}{what} {', '.join(map(str, bad))} does not divide the global batch of "
                               f"{gbs:,} sequences",
                               f"give a micro-batch {'whose product with dp' if 'dp' in single else 'that'} divides "
                               f"{gbs:,}, or change --global-batch")


def _small_divisors(n: int, most: int = 12) -> list[int]:
    """The divisors of n, at most `most` of them (the smallest), for a hint."""
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out.append(d)
            if len(out) == most:
                break
    return out


NEAREST_TRIES = 512  # values tried on each side when looking for a GPU count / global batch with a valid plan


def _nearest_valid(x: int, valid) -> list[int]:
    """The nearest value below and the nearest above x (>= 1) for which valid(v) holds, trying
    at most NEAREST_TRIES on each side (each try builds one search space: about a millisecond)."""
    below = next((v for v in range(x - 1, max(x - 1 - NEAREST_TRIES, 0), -1) if valid(v)), None)
    above = next((v for v in range(x + 1, x + 1 + NEAREST_TRIES) if valid(v)), None)
    return [v for v in (below, above) if v is not None]


def nearest_working(job: Job, opts: SpaceOptions, where: str = "") -> tuple[list[int], list[int]]:
    """(GPU counts near job.gpus, global batches in sequences near the job's) for which the
    search space has at least one plan that breaks no rule (space.constraint codes), with the
    job's pins: what to suggest when a count such as 1,000 does not factor."""
    settings, gbs, seq, _ = settings_for(job, where=where)
    variants = variant_choices(settings.stack, job, where, settings.hardware, settings.model)
    twins = uncompiled_choices(settings.stack, job, variants)

    def ok(s: Settings, g: int) -> bool:
        if not batch_divides(s, g, seq, opts):  # no mesh x micro-batch divides the batch: no valid row (cheap)
            return False
        space = build_space(s, g, seq, job.precision, opts, np.concatenate([variants, twins]))
        if np.any(space.codes == OK):
            return True
        space.uncompiled = tuple(range(len(variants), len(variants) + len(twins)))  # rows that run uncompiled (search_one)
        return uncompiled_space(space)[1] is not None

    counts = _nearest_valid(job.gpus, lambda g: ok(replace(settings, gpus=g), gbs))
    batches = _nearest_valid(gbs, lambda b: ok(settings, b))
    return counts, batches


def _no_fit(job: Job, closests: list, counts: Counts, gpus_list: list, opts: SpaceOptions = SpaceOptions(),
            where_file: str = "") -> NoFitError:
    closests = [x for x in closests if x is not None]
    where = f"{job.model} on {', '.join(f'{g:,}' for g in gpus_list)} x {job.hardware}"
    if not closests:
        reasons = sorted(counts.reasons.items(), key=lambda kv: -kv[1])
        text = "".join(f"; {r}: {n:,}" for r, n in reasons[:4])
        slack = (f"; {counts.slack_dropped:,} pipeline splits (pp, vpp) left out because the layers do not split "
                 f"evenly enough (--max-layer-slack)") if counts.slack_dropped else ""
        near = ""
        if len(gpus_list) == 1:
            g_ok, b_ok = nearest_working(job.model_copy(update=dict(gpus=gpus_list[0])), opts, where_file)
            if g_ok:
                near += f"; GPU counts near {gpus_list[0]:,} with valid plans: {', '.join(f'{g:,}' for g in g_ok)}"
            if b_ok:
                near += (f"; global batches near this one that divide on {gpus_list[0]:,} GPUs: "
                         f"{', '.join(f'--global-batch {b:,}' for b in b_ok)} sequences")
        return NoFitError(
            f"no plan for {where} satisfies the constraints ({counts.considered:,} candidates{text}{slack})",
            "relax the pinned axes, or change --gpus, --global-batch or --seq-len so the mesh and batch divide"
            + (", or raise --max-layer-slack" if slack else "") + near,
        )
    settings, space, b, r, total = min(closests, key=lambda x: x[4])
    # at its lightest rank order, where its total was priced (with_order_memory; else the base row's own)
    plan = space.plans(np.array([b]), np.array([r]), None if space.light is None else space.lightest([b]))
    terms, _ = mem.memory_terms(settings, plan)
    cap, usable = mem.capacity(settings)
    grouped = {k: float(v[0]) for k, v in mem.grouped(terms).items() if k in mem.COMPONENTS}
    top_term, top_bytes = max(grouped.items(), key=lambda kv: kv[1])
    raw = {k: float(v[0]) for k, v in terms.items()}
    raw_term, raw_bytes = max(raw.items(), key=lambda kv: kv[1])
    p = {f: int(getattr(plan, f)[0]) for f in ("tp", "cp", "pp", "vpp", "dp", "mbs", "sharding", "shard", "recompute")}
    shard = SHARDING_NAMES[p["sharding"]] + (f" (shard group {p['shard']})" if p["sharding"] == HSDP or p["shard"] != p["dp"] else "")
    desc = (f"TP {p['tp']} x CP {p['cp']} x PP {p['pp']} x DP {p['dp']}" + (f" (vpp {p['vpp']})" if p["vpp"] > 1 else "")
            + f", {shard}, micro-batch {p['mbs']}, recompute {RECOMPUTE_NAMES[p['recompute']]}, on {settings.gpus:,} "
            + ("GPU" if settings.gpus == 1 else "GPUs"))
    over = total - usable
    hints = {
        "weights_bytes": "shard the weights (--sharding fsdp), add GPUs, or use a GPU with more HBM",
        "gradients_bytes": "shard the gradients (zero2/fsdp), add GPUs, or use a GPU with more HBM",
        "optimizer_bytes": "shard the optimizer state (zero1 and up) over more GPUs, or use a GPU with more HBM",
        # the closest plan already recomputing fully is not told to allow it (audit5)
        "activations_bytes": ("" if RECOMPUTE_NAMES[p["recompute"]] == "full" else "allow full recompute, ")
        + "more TP/CP/PP, a shorter --seq-len or a GPU with more HBM",
        "other_bytes": "lower --reserve-gib or use a GPU with more HBM",
    }
    e = NoFitError(
        f"nothing fits {where}: the smallest plan found, {desc}, needs {total / GiB:,.1f} GiB per GPU, "
        f"{over / GiB:,.1f} GiB over the usable {usable / GiB:,.1f} GiB (HBM {cap / GiB:,.1f} GiB x "
        f"(1 - headroom {settings.headroom:g})); largest component: {top_term.replace('_bytes', '')} "
        f"{top_bytes / GiB:,.1f} GiB (largest term {raw_term} {raw_bytes / GiB:,.1f} GiB). "
        f"Searched {counts.considered:,} candidates: {counts.broke_constraint:,} broke a constraint, "
        f"{counts.did_not_fit:,} did not fit"
        # the splits --max-layer-slack dropped are named here too, as where no plan satisfies the constraints (above):
        # before the 2026-12-07 audit5 DeepSeek-V3 on its own stack and 2,048 H800s (61 layers in 16 stages: slack 3)
        # read as "nothing fits ... PP 1" with a hint to shard the gradients, its PP 16 plan never priced
        + (f"; {counts.slack_dropped:,} pipeline splits (pp, vpp) left out because the layers do not split evenly "
           "enough (--max-layer-slack)" if counts.slack_dropped else ""),
        hints[top_term] + ("; or raise --max-layer-slack to price the deeper pipelines left out" if counts.slack_dropped
                           else ""),
    )
    e.closest = to_json(settings, plan, evaluate(settings, plan), 0)  # explain's JSON of the closest plan
    e.overflow_bytes = over
    e.largest_component = top_term.replace("_bytes", "")
    return e


def fit(job: Job, gpus_list: list[int] | None = None, opts: SpaceOptions = SpaceOptions(), objective: str = "time",
        top: int = 10, keep_feasible: bool = False, where: str = "", progress=None,
        search_dispatchers: bool = False, around: tuple = None) -> FitResult:
    """Search every GPU count of gpus_list (default: job.gpus), rank, return the top rows
    (explain JSON, best first) and the best row of each count. Raises NoFitError (exit 1)
    when nothing fits. progress(done, total, gpus): called after each GPU count.
    search_dispatchers: the job's moe_dispatcher is not fixed (`planner fit` without --moe-dispatcher):
    every dispatcher the stack runs is tried (dispatcher_settings), as a stack option.
    around: the ranking keys (row_objective) of a plan to rank among the rows (`planner fit CONFIG`'s own
    plan; one GPU count): the bounds prune only what sorts after both the k-th best and it, so that every
    row before it is priced and counted (Counts.around_before; rank_config), without pricing every
    fitting plan as keep_feasible does."""
    if objective not in OBJECTIVES:
        raise PlannerError(f"unknown --objective {objective!r}", f"valid: {', '.join(OBJECTIVES)}")
    if top < 1:
        raise PlannerError(f"--top must be at least 1, got {top}", "e.g. --top 10")
    if job.batch_size_schedule and not job.tokens:
        raise PlannerError(f"{where}a batch ramp (batch_size_schedule) is ranked by the whole run's time: the search needs "
                           "the run's tokens to count each phase's steps (planner/batch_ramp.py)",
                           "give --tokens, e.g. --tokens 15T")
    t0 = _time.perf_counter()
    gpus_list = list(gpus_list or [job.gpus])
    check_count(gpus_list, "--gpus")
    if around is not None and len(gpus_list) > 1:
        raise ValueError("fit(around=...) ranks a plan among the rows of one GPU count")
    job_assumed = check_pins(_searched_base(job, search_dispatchers), opts, where, gpus_list)
    counts = Counts()
    ranked_all, closests, warnings, feasible = [], [], [], []
    per_count = []  # each GPU count's Ranked (one per space it searched: search_one)
    for g in gpus_list:  # a handful of GPU counts, each a whole vectorized search
        ranked, c, closest, w, fz = search_one(job.model_copy(update=dict(gpus=g)), opts, objective, top,
                                              keep_feasible, where, search_dispatchers, around)
        counts.add(c)
        warnings += [x for x in w if x not in warnings]
        closests.append(closest)
        ranked_all += ranked
        if ranked:
            per_count.append(ranked)
        feasible += fz
        if progress is not None:
            progress(len(closests), len(gpus_list), g)
    if not ranked_all:
        raise _no_fit(_searched_base(job, search_dispatchers), closests, counts, gpus_list, opts, where)
    # merge the GPU counts: best objective, then memory (then time for --objective memory)
    # each Ranked's keys rounded in one rank_key call a column (elementwise: the numbers one call an entry gives)
    keys = [tuple(rank_key(x).tolist() for x in (r.objective, r.memory, r.step)) for r in ranked_all]
    cand = [(o, m, s, n, i) for n, (obj, mem_, stp) in enumerate(keys) for i, (o, m, s) in enumerate(zip(obj, mem_, stp))]
    cand.sort(key=lambda x: (x[0], x[1], x[2]) if objective == "memory" else (x[0], x[1]))
    cand = cand[:top]
    rows = []
    for n, r in enumerate(ranked_all):
        pick = [i for (_, _, _, nn, i) in cand if nn == n]
        if not pick:
            continue
        sub = Ranked(settings=r.settings, space=r.space, base=r.base[pick], rc=r.rc[pick], order=r.order[pick],
                     objective=r.objective[pick], memory=r.memory[pick], step=r.step[pick], var=r.var[pick])
        rows += [(keys[n][0][i], keys[n][1][i], keys[n][2][i], row) for i, row in zip(pick, rows_of(sub))]
    rows.sort(key=lambda x: (x[0], x[1], x[2]) if objective == "memory" else (x[0], x[1]))
    out = [row for _, _, _, row in rows]
    for row, w in zip(out, rows_warnings(job, out, where)):  # the explain path accepts the row
        row["warnings"] = w
    best = []
    if len(per_count) > 1:
        for ranked in per_count:  # each space's ranked candidates are best first: the count's best is the best first
            key = lambda r: ((float(rank_key(r.objective[0])), float(rank_key(r.memory[0])), float(rank_key(r.step[0])))  # noqa: E731
                             if objective == "memory" else (float(rank_key(r.objective[0])), float(rank_key(r.memory[0]))))
            r = min(ranked, key=key)
            sub = Ranked(settings=r.settings, space=r.space, base=r.base[:1], rc=r.rc[:1], order=r.order[:1],
                         objective=r.objective[:1], memory=r.memory[:1], step=r.step[:1], var=r.var[:1])
            best += rows_of(sub)
    else:
        best = out[:1]
    return FitResult(rows=out, counts=counts, objective=objective, gpus=gpus_list,
                     wall_s=_time.perf_counter() - t0, warnings=warnings, feasible=feasible, best=best,
                     assumed=list(job_assumed), around=around)


def rows_warnings(job: Job, rows: list[dict], where: str = "") -> list[list[str]]:
    """Each row's warnings as `planner explain` gives them for its job (row_job): resolve(row_job(job, row))'s,
    raising as the first row that resolve refuses raises. The plan rules and start-up rules of the rows (rule_codes,
    about half of a row's resolve when run one plan at a time: 0.57 of 1.1 ms, llama3-70b on 512 GPUs) run once
    over the rows that share what rule_codes reads besides the plan (model, GPU count, stack, hardware: resolve
    `rules`), in one vectorized call; a row they refuse (or whose resolve raised) is resolved again as explain
    does, which raises resolve's own error, the rows before it checked first (and the rows after a row whose
    resolve raised are resolved one at a time, as explain does)."""
    pending: list[tuple] = []  # resolve's (model, gpus, stack, plan, hardware) for each row it deferred
    at: list[int] = []  # the row of each
    out: list[list[str]] = []
    failed = None
    with files.held_lookups():  # the job's files looked up and hashed once for every row
        for n, row in enumerate(rows):
            before = len(pending)
            try:
                _, _, w = resolve(row_job(job, row), where, rules=pending)
            except Exception:  # (resolved again below, after the rows before it: its own error, or an earlier row's)
                failed = n
                break
            at += [n] * (len(pending) - before)
            out.append(w)
    refused = sorted({at[k] for k in np.flatnonzero(deferred_codes(pending) != OK).tolist()})
    for n in refused:
        out[n] = resolve(row_job(job, rows[n]), where)[2]  # raises as explain does
    if failed is not None:  # the rows from the one whose resolve raised, one at a time: it raises as explain does
        out += [resolve(row_job(job, row), where)[2] for row in rows[failed:]]
    return out


def deferred_codes(pending: list[tuple]) -> np.ndarray:
    """rule_codes of each plan resolve deferred (its `rules`: (model, gpus, stack, plan, hardware) each), one
    vectorized call for the plans whose model, GPU count, stack and hardware are equal (resolve copies a stack it
    changes: each row its own copy, equal to the others'): the codes rule_codes gives each plan alone."""
    groups: list[list[int]] = []
    for k, (model, gpus, stack, _, hw) in enumerate(pending):
        for ks in groups:
            m, g, st, _, h = pending[ks[0]]
            if g == gpus and (m is model or m == model) and (st is stack or st == stack) and (h is hw or h == hw):
                ks.append(k)
                break
        else:
            groups.append([k])
    codes = np.zeros(len(pending), dtype=np.int64)
    for ks in groups:
        model, gpus, stack, _, hw = pending[ks[0]]
        plans = [pending[k][3] for k in ks]
        many = PlanArrays(**{f.name: np.array([getattr(p, f.name) for p in plans], dtype=np.int64)
                             for f in fields(PlanArrays)})
        codes[ks] = rule_codes(model, gpus, stack, many, hardware=hw)
    return codes


def row_objective(row: dict, objective: str) -> tuple:
    """The ranking keys of one plan priced by explain (its to_json `row`), as _search_space ranks a
    candidate: (objective, memory) for time and cost, (memory, memory, step) for memory, each
    rank_key-rounded. The step is the row's step time, or over a batch ramp the run's time per
    last-batch step (batch_ramp.phase_weights: each phase's steps x gbs x seq / tokens times its step,
    the figure step_times ranks on); the memory the heaviest stage's total, or the ramp's peak."""
    p, th = row["plan"], row["throughput"]
    step = row["time"]["step_s"]
    memory = th.get("memory_peak_bytes_ramp", row["memory"]["total_bytes"])
    if th.get("batch_ramp"):
        scale = float(p["global_batch"]) * float(p["seq_len"]) / float(p["tokens"])
        step = 0.0
        for ph in th["batch_ramp"]:
            step += ph["steps"] * scale * ph["step_s"]
    obj = {"time": step, "memory": memory, "cost": p["gpus"] * step / (p["global_batch"] * p["seq_len"])}[objective]
    keys = (obj, memory, step) if objective == "memory" else (obj, memory)
    return tuple(float(rank_key(k)) for k in keys)


def rows_before(space: Space, objective: str, b, r, step, memory, keys: tuple) -> tuple:
    """(the rows that sort before `keys`, whether a row has `keys`) among priced (candidate, order) pairs of one
    space (base rows b, recompute indices r, their steps and memory): each counted as the table counts a row,
    one per candidate and distinct rounded step (orders that give it the same step are one row), by its
    ranking keys as _search_space ranks it ((objective, memory); (memory, memory, step) for memory, each
    rank_key-rounded) against `keys` (row_objective's)."""
    step = rank_key(step)
    _, first = np.unique(np.stack([b, r, step.view(np.int64)]), axis=1, return_index=True)
    memory, step, b = memory[first], step[first], b[first]
    mem_k = rank_key(memory)
    obj = rank_key(_objective(objective, space.settings, space, step, memory, b))
    ks = (obj, mem_k, step) if objective == "memory" else (obj, mem_k)
    lt = np.zeros(len(first), dtype=bool)
    eq = np.ones(len(first), dtype=bool)
    for k, o in zip(ks, keys):
        lt |= eq & (k < o)
        eq &= k == o
    return int(lt.sum()), bool(eq.any())


def rank_config(result: FitResult, row: dict) -> dict:
    """Where a plan priced by explain (`planner fit CONFIG`'s own plan, its to_json `row`) ranks among
    the plans of a one-count search: rank = 1 + the table rows whose ranking keys (row_objective) sort
    before its own (rows_before: one per candidate and distinct rounded step, as the table lists them),
    of `of` = the plans that fit as the counts line counts them (Counts.feasible: every fitting candidate
    at each of its distinct rank orders; the table lists two orders that give a candidate the same step
    as one row, so `of` may exceed the rows an all-rows table would list). The rows before it come from
    a search run with around=row_objective(row) (fit: its bounds keep every plan that can sort before it,
    and price no other plan for it) or, where the search ran with keep_feasible (fit --plot), from every
    fitting candidate's step at every order: the same count (tests/test_fit_config.py).
    `searched`: a searched plan has the same keys (the file's plan is among the candidates, or one
    priced the same); where none has (the search chose a stack option of that plan otherwise, e.g.
    the faster TP overlap, or the plan is outside the searched space: a pin, a --max-* bound), `of`
    counts it too."""
    own = row_objective(row, result.objective)
    if result.feasible:
        better, same = 0, False
        for f in result.feasible:
            n, s = rows_before(f["space"], result.objective, f["base"], f["rc"], f["step"], f["memory"], own)
            better += n
            same |= s
    elif result.around is not None and tuple(result.around) == own:
        better, same = result.counts.around_before, result.counts.around_same
    else:
        raise ValueError("rank_config needs a fit run with around=row_objective(row) or keep_feasible")
    return {"rank": better + 1, "of": result.counts.feasible + (0 if same else 1), "searched": same}


def load_fit_rows(path) -> list[dict]:
    """The rows of `planner fit --format json|yaml` saved to a file."""
    from . import files

    hint = "save the fit with: planner fit ... --format json > fit.json"
    text = files.read_text(path, hint)
    try:
        data = files.parse_json(text, str(path), hint)
    except PlannerError:
        data = files.parse_yaml(text, str(path))  # `--format yaml`
    if isinstance(data, dict) and isinstance(data.get("rows"), list) and "config_plan" in data:
        data = data["rows"]  # `planner fit CONFIG --format json`: the rows beside the file's own plan
    if not isinstance(data, list) or not all(isinstance(r, dict) and isinstance(r.get("plan"), dict) for r in data):
        raise PlannerError(f"{path}: not the output of `planner fit --format json`", "save it with: planner fit ... --format json > fit.json")
    return data


def fit_row_job(rows: list[dict], n: int, where: str = "", **overrides) -> Job:
    """The Job of row n (from 1) of a saved fit, for `planner explain --from-fit FILE --row N`;
    overrides (e.g. model=PATH when the fit used a model file) replace plan fields."""
    if not 1 <= n <= len(rows):
        raise PlannerError(f"{where}row {n} does not exist: the fit has {len(rows)} rows", f"choose a row from 1 to {len(rows)}")
    from .catalog import validate

    plan = rows[n - 1]["plan"]
    if not isinstance(plan, dict):
        raise PlannerError(f"{where}row {n}: `plan` is not a mapping", "save the fit with: planner fit ... --format json > fit.json")
    fields = plan_job_fields(plan)
    given = {k: v for k, v in overrides.items() if v is not None}
    from .catalog import hardware_source, model_source
    from .field_options import command_line_spellings

    command_line_spellings(fields, given)  # an option's spelling of a setting replaces the row's (core.job_from_cli's note)

    for key, source in (("model", model_source), ("hardware", hardware_source)):
        if key not in given:
            fields[key] = _row_file(plan, key, source, f"{where}row {n}: ")
    fields.update(given)
    return validate(Job, fields, f"{where}row {n}")


def _row_file(plan: dict, key: str, source, where: str) -> str:
    """The file a saved fit row read its model / hardware from (plan `model_file`,
    `model_sha256`): that file while its content is unchanged, or the catalog entry of the
    row's name when it has the same content; anything else is an error, never a silent
    swap for a catalog entry of the same name. A fit saved before these keys existed gives
    the name only."""
    path, sha = plan.get(f"{key}_file"), plan.get(f"{key}_sha256")
    if path is None:
        return plan.get(key)
    from pathlib import Path

    from .plan import file_sha256

    from . import files

    here = Path(str(path))
    if files.is_file(here) and (sha is None or file_sha256(str(here)) == sha):
        return str(here)
    try:
        alt = source(str(plan.get(key)))
    except PlannerError:
        alt = None
    if alt is not None and sha is not None and file_sha256(str(alt)) == sha:
        return str(alt)
    state = "has changed since the fit (sha256 differs)" if files.is_file(here) else "no longer exists"
    raise PlannerError(f"{where}the {key} file the fit used, {path}, {state}",
                       f"pass --{key} to choose the {key} explicitly, or re-run `planner fit`")
