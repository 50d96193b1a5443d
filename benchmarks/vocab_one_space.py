"""What `planner fit` would print as "N of them priced by their compute alone" if the padded vocabulary's
spaces (search.vocab_spaces: one space per distinct row count the stack pads the vocabulary to at the
candidates' tp) were searched as ONE space, each candidate still priced with its own rows. Not a test: it
shows why the one-space design cannot give fit's output byte for byte (branch vocab1).

    PYTHONPATH=. python benchmarks/vocab_one_space.py [MODEL GPUS [HARDWARE]]   (default: llama3-405b 16384)

search_one searches the spaces in turn, largest tp first: the first seeds its prefilter with its own
PREFILTER_SEED lowest compute floors, each later one is bounded by the k-th best objective of the spaces
before it (search._prefilter's bound); the counts line prints the sum of what each drops. One space seeds
the PREFILTER_SEED lowest floors of every vocabulary at once and bounds with their k-th best: another K0,
another count. Here every space of fit's own run is taken as fit built it (its settings hold the model
padded to its rows), each candidate's memory, floor and seed step are priced in its own space (the numbers
a per-candidate row count would give), and the one space's prefilter is applied to them all. Jobs without
a dispatcher search or a stack variant beside TP overlap only (the seed priced as _prefilter prices it
there: best_variants at the first order, each variant where variant_memory lets it fit).
llama3-405b / 16,384 H100 at 32e5edf: 58,687 printed, 59,200 from one space.
"""

from __future__ import annotations

import sys

import numpy as np


def main(argv: list[str]) -> int:
    from planner import memory as mem
    from planner import search
    from planner.schema import Job
    from planner.space import OK

    model, gpus = (argv[0], int(argv[1])) if len(argv) >= 2 else ("llama3-405b", 16384)
    job = Job(model=model, gpus=gpus, **({"hardware": argv[2]} if len(argv) > 2 else {}))
    top = 10
    spaces = []
    own = search._search_space

    def keep_space(space, *a, **k):
        spaces.append(space)
        return own(space, *a, **k)

    search._search_space = keep_space
    try:
        result = search.fit(job, top=top)
    finally:
        search._search_space = own
    print(f"{model} on {gpus:,} GPUs: {len(spaces)} vocabulary space(s), rows "
          f"{[sp.settings.model.vocab_size for sp in spaces]}; fit prints {result.counts.prefilter_dropped:,}")
    if any(sp.dispatchers is not None for sp in spaces):
        print("a dispatcher search: not handled here")
        return 2
    per = []
    for sp in spaces:
        n_rc = len(sp.recompute)
        valid = np.flatnonzero(sp.codes == OK)
        b, r = np.repeat(valid, n_rc), np.tile(np.arange(n_rc), len(valid))
        usable = mem.capacity(sp.settings)[1]
        m, _ = search.fitting_memory(sp, b, r, usable)
        fits = m <= usable
        fb, fr, fm = b[fits], r[fits], m[fits]
        first = sp.orders[np.argmax(sp.order_ok[fb], axis=1)]
        low = search.candidate_floors(sp, fb, fr, search.floor_variants(sp))
        per.append((sp, fb, fr, fm, first, low, search._objective("time", sp.settings, sp, low, fm, fb), sp.n_orders[fb]))
    low = np.concatenate([p[5] for p in per])
    low_obj = np.concatenate([p[6] for p in per])
    n_ord = np.concatenate([p[7] for p in per])
    space_of = np.concatenate([np.full(len(p[1]), i) for i, p in enumerate(per)])
    at = np.concatenate([np.arange(len(p[1])) for p in per])
    if len(low) <= 2 * search.PREFILTER_SEED:
        print("one space: no prefilter (too few fitting candidates)")
        return 0
    seed = np.argpartition(low, search.PREFILTER_SEED - 1)[:search.PREFILTER_SEED]
    objs = []
    for i, (sp, fb, fr, fm, first, *_rest) in enumerate(per):
        s = at[seed[space_of[seed] == i]]
        if not len(s):
            continue
        fit = None
        if len(sp.variants) > 1:
            fit = fm[s] + search.variant_memory(sp, fb[s], fr[s], fm[s]) <= mem.capacity(sp.settings)[1]
        _, step, *_ = search.best_variants(sp, fb[s], fr[s], first[s], fit=fit)
        objs.append(search._objective("time", sp.settings, sp, step, fm[s], fb[s]))
    k0 = np.partition(np.concatenate(objs), top - 1)[top - 1]
    keep = low_obj <= k0 * (1.0 + search.BOUND_MARGIN)
    print(f"one space would print {int(n_ord[~keep].sum()):,} (its seed per space: "
          f"{np.bincount(space_of[seed], minlength=len(per)).tolist()})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
