"""scripts/dense_groups.py: the per-group error medians of docs/dense_accuracy.md, on rows whose
errors are set by hand (the groups come from the records' own fields)."""
import sys
from pathlib import Path

import pytest

from planner.validate import load_runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import dense_groups  # noqa: E402

IDS = ("mosaic-mpt-7b-a100_40gb-8gpu-s2048-std", "mosaic-mpt-7b-a100_40gb-8gpu-s4096-std",
       "mosaic-mpt-7b-a100_80gb-8gpu-s2048-std")
PLAN = {"tp": 1, "pp": 1, "vpp": 1, "cp": 1, "dp": 8}


def _rows(errors):
    hw = ("a100-sxm-40gb", "a100-sxm-40gb", "a100-sxm-80gb")
    return [{"id": i, "stack": "llm-foundry", "hardware": h, "plan": PLAN, "error": e}
            for i, h, e in zip(IDS, hw, errors)]


def test_group_medians_by_hand() -> None:
    recs = [r for r in load_runs(ROOT / "tests/data/published_runs.yaml") if r.id in IDS]
    table = dense_groups.group_table(recs, _rows([-0.10, +0.20, +0.05]), min_n=1)
    g = {(t["axis"], t["group"]): t for t in table}
    # all three: |e| 0.05 0.10 0.20 -> median 0.10; signed -0.10 0.05 0.20 -> 0.05;
    # p90 (type 7): 0.10 + 0.8 x (0.20 - 0.10) = 0.18
    allf = g[("sharding", "fsdp")]
    assert allf["n"] == 3
    assert allf["median_abs"] == pytest.approx(0.10)
    assert allf["median_signed"] == pytest.approx(0.05)
    assert allf["p90_abs"] == pytest.approx(0.18)
    # the two 40 GB rows: median of -0.10 and +0.20 is +0.05, of 0.10 and 0.20 is 0.15
    a40 = g[("hardware", "a100-sxm-40gb")]
    assert (a40["n"], a40["median_signed"], a40["median_abs"]) == (2, pytest.approx(0.05), pytest.approx(0.15))
    assert g[("seq_length", "[4096, 8192) tokens")]["n"] == 1
    assert g[("pipeline", "PP1")]["n"] == 3 and g[("tp_vs_nvlink", "TP1")]["n"] == 3
    # min_n drops the groups of fewer records
    assert ("hardware", "a100-sxm-80gb") not in {(t["axis"], t["group"]) for t in
                                                  dense_groups.group_table(recs, _rows([0.1, 0.1, 0.1]), min_n=2)}
