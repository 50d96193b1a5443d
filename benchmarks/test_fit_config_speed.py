"""Speed of `planner fit CONFIG` on a mixture-of-experts model (pytest-benchmark; not part of the default run).

    python3 -m pytest benchmarks/test_fit_config_speed.py --benchmark-only

tests/data/trainer_configs/deepseek_v3_2048_h800.yaml: DeepSeek-V3's published layout (PP 16, EP 64, ZeRO-1) on
2,048 H800, 15,360 x 4,096 tokens, megatron, the MoE dispatchers searched. Three cases, each as planner/cli/fit.py
runs it (the job read by fit_config.config_jobs, once, outside the timing):

- "fit CONFIG": the file's own plan priced by explain's path (fit_config.price_config) and ranked by a search whose
  bounds are widened to its keys (search.fit around=; search.rank_config), its space widened to the file's PP 16
  split (fit_config.widen_to_plan; the other two search the default space without it);
- "plain search": the same job's search without the file's plan, what `fit --model ...` with the file's settings
  runs;
- "every fitting plan": the rank counted among every fitting plan's step (keep_feasible), how fit CONFIG first
  ranked it (cf6eaf1).

extra_info records the rank, the counts and the steps priced. A speed change is measured, never asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.comm import clear_collective_memo
from planner.search import fit, rank_config, row_objective

CONFIG = Path(__file__).resolve().parent.parent / "tests" / "data" / "trainer_configs" / "deepseek_v3_2048_h800.yaml"


def _jobs():
    from planner.cli.fit_config import config_jobs

    job, own, where, trainer = config_jobs(CONFIG, {}, {}, None)
    return job, own, where, trainer


def _fit_config(job, own, where, trainer):
    from planner.cli.fit_config import price_config, widen_to_plan
    from planner.space import SpaceOptions

    res, why = price_config(own, where, trainer, False)
    assert why is None, why
    # the layer slack widened to the file's PP 16 split, as fit.py widens it (no bound given on the command line)
    opts, _ = widen_to_plan(SpaceOptions(), res["plan"], job, set(), where)
    result = fit(job, opts=opts, search_dispatchers=True, around=row_objective(res, "time"))
    return result, rank_config(result, res)


def _plain(job, own, where, trainer):
    return fit(job, search_dispatchers=True), None


def _every(job, own, where, trainer):
    from planner.cli.fit_config import price_config

    res, _ = price_config(own, where, trainer, False)
    result = fit(job, search_dispatchers=True, keep_feasible=True)
    return result, rank_config(result, res)


CASES = {"fit CONFIG": _fit_config, "plain search": _plain, "every fitting plan": _every}


@pytest.mark.parametrize("case", list(CASES))
def test_fit_config_deepseek_v3(benchmark, case):
    args = _jobs()
    CASES[case](*args)  # first call: imports, catalog loads
    result, rank = benchmark.pedantic(CASES[case], args=args, rounds=3, iterations=1, warmup_rounds=0,
                                      setup=clear_collective_memo)
    c = result.counts
    assert c.considered == c.broke_constraint + c.did_not_fit + c.feasible
    benchmark.extra_info.update(considered=c.considered, feasible=c.feasible, time_evaluations=c.time_evaluations,
                                prefilter_dropped=c.prefilter_dropped, **(rank or {}))
