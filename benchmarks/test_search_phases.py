"""The phases of one search, each on its own (pytest-benchmark; not part of the default run):
where `planner fit --model llama3-405b --gpus 16384` and issue 23's DeepSeek-V3 search (`planner fit
--model deepseek-v3 --gpus 2048 --hardware h800-sxm --global-batch 15360 --seq-len 4096`) spend their
time after the imports.

    python3 -m pytest benchmarks/test_search_phases.py --benchmark-only

Phases (planner/search.py's module docstring): the space (space.build_space: constraint codes,
sharding modes), the memory of every valid candidate (search.memory_totals; search.fitting_memory, what fit
runs, prices in full only the rows whose model states fit), the compute floor
of every fitting candidate (search.candidate_floors: step.compute_floor per distinct tuple, search._prefilter's bound) and the step time of
the candidates the prefilter keeps (search.step_times, variant 0 at the first order), and the
explain rows of the top 10 (search.rows_of). extra_info gives the candidates each phase prices.
No timed asserts: speed is measured, never a pass/fail test.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner.search as search
from planner.comm import clear_collective_memo
from planner.schema import Job
from planner.space import SpaceOptions, build_space, settings_for, variant_choices

JOBS = {
    "llama3-405b on 16,384 H100": dict(model="llama3-405b", gpus=16384),
    # issue 23's DeepSeek-V3 command: its space (540,512 base rows) costs as much as its memory
    "deepseek-v3 on 2,048 H800, 15,360 x 4,096": dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm",
                                                     global_batch=15360, seq_len=4096),
}


@pytest.fixture(scope="module", params=list(JOBS))
def captured(request):
    """The space and the candidate arrays one fit of each job hands to each phase."""
    job = Job(**JOBS[request.param])
    got = {}
    real_mem, real_pre = search.fitting_memory, search._prefilter

    def mem(space, bidx, rcidx, usable, **k):  # (whole=True: fit's dispatcher search, search._other_dispatchers)
        got["space"], got["bidx"], got["rcidx"], got["usable"] = space, bidx, rcidx, usable
        return real_mem(space, bidx, rcidx, usable, **k)

    def pre(space, fb, fr, fm, first_order, *a, **k):
        got["fit"] = (fb, fr, first_order)
        out = real_pre(space, fb, fr, fm, first_order, *a, **k)
        got["keep"] = out[0] if out is not None else np.ones(len(fb), dtype=bool)
        return out

    search.fitting_memory, search._prefilter = mem, pre
    try:
        res = search.fit(job)
    finally:
        search.fitting_memory, search._prefilter = real_mem, real_pre
    got["job"], got["res"] = job, res
    return got


def _run(benchmark, fn, n):
    benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1, setup=clear_collective_memo)
    benchmark.extra_info.update(candidates=int(n))
    if benchmark.stats is not None:  # None under --benchmark-disable (the function ran once, untimed)
        benchmark.extra_info.update(candidates_per_s=n / benchmark.stats.stats.mean)


def test_build_space(benchmark, captured):
    job = captured["job"]
    settings, gbs, seq, _ = settings_for(job)
    variants = variant_choices(settings.stack, job, "", settings.hardware)
    _run(benchmark, lambda: build_space(settings, gbs, seq, job.precision, SpaceOptions(), variants),
         captured["res"].counts.considered)


def test_memory_totals(benchmark, captured):
    space, b, r = captured["space"], captured["bidx"], captured["rcidx"]
    _run(benchmark, lambda: search.memory_totals(space, b, r), len(b))


def test_fitting_memory(benchmark, captured):
    # what fit runs: memory_totals only where the model states alone (memory.states_floor) fit
    space, b, r, usable = captured["space"], captured["bidx"], captured["rcidx"], captured["usable"]
    _run(benchmark, lambda: search.fitting_memory(space, b, r, usable), len(b))


def test_compute_floor(benchmark, captured):
    space = captured["space"]
    fb, fr, _ = captured["fit"]
    _run(benchmark, lambda: search.candidate_floors(space, fb, fr), len(fb))


def test_step_times_of_the_kept(benchmark, captured):
    space = captured["space"]
    fb, fr, fo = (x[captured["keep"]] for x in captured["fit"])
    _run(benchmark, lambda: search.step_times(space, fb, fr, fo), len(fb))


def test_rows_of_top_10(benchmark, captured):
    res = captured["res"]
    job = captured["job"]
    (ranked, *_), *_ = search.search_one(job, SpaceOptions())  # one space (no compile-off search on this job)
    _run(benchmark, lambda: search.rows_of(ranked), len(res.rows))
