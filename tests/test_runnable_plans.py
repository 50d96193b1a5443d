"""Issue 22: `fit --export` writes a file that reads back as the same plan with the same memory
(cli/export.py check_readback), across stacks; the stack's space limits the search."""

from __future__ import annotations

import pytest

CASES = [
    ("megatron", ["--model", "llama3-70b", "--gpus", "512"]),
    ("torchtitan", ["--model", "llama3-8b", "--gpus", "64", "--stack", "torchtitan"]),
    ("deepspeed", ["--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed", "--max-tp", "1", "--max-pp", "1"]),
    ("megatron", ["--model", "deepseek-v3", "--gpus", "2048", "--hardware", "h800-sxm"]),
    ("torchtitan", ["--model", "llama3-405b", "--gpus", "16384", "--stack", "torchtitan"]),
]


@pytest.mark.parametrize("fmt,args", CASES)
def test_fit_export_reads_back_as_the_priced_plan(cli, fmt, args):
    r = cli("fit", *args, "--export", fmt)
    assert r.exit_code == 0, r.stderr
    assert "reads back as another plan" not in r.stderr


def test_megatron_stack_never_ranks_a_mode_it_lacks(cli):
    import json

    r = cli("fit", "--model", "llama3-70b", "--gpus", "512", "--format", "json", "--top", "20")
    assert r.exit_code == 0, r.stderr
    from planner.catalog import load_stack

    modes = {m.name: m.level for m in load_stack("megatron").runs.sharding}
    for row in json.loads(r.stdout):
        p = row["plan"]
        assert modes[p["sharding_mode"]] == p["sharding"]
        # Megatron builds tp-cp-dp-pp, or tp-cp-pp-dp only without CP (dense) under PP
        assert not (p["rank_order"] == "tp-cp-pp-dp" and p["pp"] > 1 and p["dp"] > 1 and p["cp"] > 1)
