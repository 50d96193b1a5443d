"""Speed of `planner fit` (pytest-benchmark; not part of the default test run).

    python3 -m pytest benchmarks/ --benchmark-only

Each case is a whole search as `planner fit` runs it: build the space, constraint codes,
memory of every valid candidate, step time where it can still rank, the top 10 rows as
explain JSON. extra_info records the counts and candidates per second (considered / mean
wall time) so that the README table can be read off `--benchmark-json`.
"""

from __future__ import annotations

import pytest

from planner.comm import clear_collective_memo
from planner.schema import Job
from planner.search import fit

CASES = {
    "llama3-405b on 16,384 H100": dict(model="llama3-405b", gpus=16384),
    "llama3-70b on 4,096 H100": dict(model="llama3-70b", gpus=4096),
    "llama3-405b on 131,072 H100": dict(model="llama3-405b", gpus=131072),
    "deepseek-v3 on 2,048 H100 (ep searched)": dict(model="deepseek-v3", gpus=2048),
    # issue 23's bare DeepSeek-V3 command (published setup: 2,048 H800, 15,360 x 4,096 tokens)
    "deepseek-v3 on 2,048 H800, 15,360 x 4,096": dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm",
                                                     global_batch=15360, seq_len=4096),
    # the new-user audit's MoE and hybrid (Gated DeltaNet + attention) fits, each on 64 H100 at its defaults
    # (branch speed6): `planner fit --model qwen3-30b-a3b --gpus 64`, `planner fit --model qwen3-next-80b-a3b --gpus 64`
    "qwen3-30b-a3b on 64 H100": dict(model="qwen3-30b-a3b", gpus=64),
    "qwen3-next-80b-a3b on 64 H100": dict(model="qwen3-next-80b-a3b", gpus=64),
    # a batch ramp (planner/batch_ramp.py: each phase's step and memory priced, search.step_times):
    # Llama 3 405B's, 4M -> 8M tokens at 252M -> 16M at 2.87T of 15.6T (arXiv:2407.21783 sec. 3.4.1),
    # at 8,192-token sequences throughout (the planner keeps one length: Meta's first phase ran 4,096)
    "llama3-405b on 16,384 H100, Llama 3's batch ramp": dict(
        model="llama3-405b", gpus=16384, seq_len=8192, tokens=15.6e12,
        batch_size_schedule=[{"from_tokens": 0, "global_batch": 512}, {"from_tokens": 252e6, "global_batch": 1024},
                             {"from_tokens": 2.87e12, "global_batch": 2048}]),
    # DeepSeek-V3's ramp, 3,072 -> 15,360 sequences of 4,096 over the first 469B of 14.8T tokens
    # (arXiv:2412.19437 sec. 4.2: "gradually increased"; here in five equal steps, an assumption)
    "deepseek-v3 on 2,048 H800, a 5-step ramp to 15,360 x 4,096": dict(
        model="deepseek-v3", gpus=2048, hardware="h800-sxm", seq_len=4096, tokens=14.8e12,
        batch_size_schedule=[{"from_tokens": i * 117.25e9, "global_batch": 3072 * (i + 1)} for i in range(5)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fit_full_space(benchmark, case):
    job = Job(**CASES[case])
    fit(job)  # first call: imports, catalog loads
    # each round prices its collectives afresh (comm.auto_collective_times memoises them per process),
    # as one `planner fit` command does
    res = benchmark.pedantic(fit, args=(job,), rounds=5, iterations=1, warmup_rounds=1, setup=clear_collective_memo)
    c = res.counts
    assert c.considered == c.broke_constraint + c.did_not_fit + c.feasible
    assert len(res.rows) == 10 and all(r["memory"]["fits"] for r in res.rows)
    benchmark.extra_info.update(
        considered=c.considered, broke_constraint=c.broke_constraint, did_not_fit=c.did_not_fit,
        feasible=c.feasible, memory_evaluations=c.memory_evaluations, time_evaluations=c.time_evaluations,
        prefilter_dropped=c.prefilter_dropped,  # fitting candidates (with their rank orders, as feasible) search._prefilter dropped
    )
    if benchmark.stats is not None:  # None under --benchmark-disable (the function ran once, untimed)
        mean = benchmark.stats.stats.mean
        benchmark.extra_info.update(candidates_per_s=c.considered / mean,
                                    evaluations_per_s=(c.memory_evaluations + c.time_evaluations) / mean)
