"""A context-parallel variant through every exporter (issue 22): export -> read back -> the same plan and memory
(planner.cli.export.check_readback, fit --export's own check) for each variant each trainer spells, at cp 1 and
cp 2 (a2a+p2p also at cp 4 as 2 x 2). Without context parallelism no variant runs (Megatron-Core hands the attention
none: megatron/core/extensions/transformer_engine.py @d98e8a64 l. 2129-2153; torchtitan @e347b1e5e sets the rotate
method only under cp_enabled, components/validate.py l. 204-214), so a plan at cp 1 lists none and is priced as the
plan without it (planner/cp_comm_type.py, cp_rotate.py), as each reader reads such a file back (the variant ignored).
The plans are fixed by hand: Llama 3 8B on one HGX H100 (8 GPUs), tp 2, the variant and cp given."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers.export import export_plan

from conftest import assert_one_error

BASE = dict(model="llama3-8b", gpus=8, tp=2, hardware="h100-sxm", seq_len=8192, global_batch=8, micro_batch=1)
NOTE = "at cp 1: without context parallelism"

# torchtitan before 1e8f9acd1, whose training takes context_parallel_rotate_method (planner/cp_rotate.py [4])
TT_ROTATE_TRAINS = str(Path(__file__).parent / "data" / "stacks" / "torchtitan-rotate-trains.yaml")


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(**BASE, **kw))
    return to_json(settings, plan, evaluate(settings, plan))


def _round_trip(fmt: str, **kw) -> tuple[dict, str]:
    """The priced row of the job and its exported text, after the read-back check (raises on any difference)."""
    row = _row(**kw)
    text, _ = export_plan(row["plan"], fmt)
    check_readback(row, fmt, text)
    return row, text


# (cp_comm_type, hierarchical_cp_sizes, cp) -> (the plan's cp_comm_type, its hierarchical_cp_sizes, the written flags):
# p2p is the stack's default (listed and written as none); at cp 1 none runs; a2a+p2p with one a2a rank runs p2p and
# with one p2p rank a2a (Transformer Engine's attn_forward_func_with_cp, planner/cp_comm_type.py [2])
MEGATRON = [
    ("p2p", None, 1, None, None, None), ("a2a", None, 1, None, None, None), ("all_gather", None, 1, None, None, None),
    ("a2a+p2p", [1, 1], 1, None, None, None),
    ("p2p", None, 2, None, None, None), ("a2a", None, 2, "a2a", None, "--cp-comm-type a2a"),
    ("all_gather", None, 2, "all_gather", None, "--cp-comm-type all_gather"),
    ("a2a+p2p", [1, 2], 2, None, None, None), ("a2a+p2p", [2, 1], 2, "a2a", None, "--cp-comm-type a2a"),
    ("a2a+p2p", [2, 2], 4, "a2a+p2p", [2, 2], "--cp-comm-type a2a+p2p"),
]


@pytest.mark.parametrize("cct,sizes,cp,listed,listed_sizes,flag", MEGATRON)
def test_megatron_round_trip(cct, sizes, cp, listed, listed_sizes, flag):
    row, text = _round_trip("megatron", stack="megatron", cp=cp, cp_comm_type=cct, hierarchical_cp_sizes=sizes)
    assert (row["plan"]["cp"], row["plan"].get("cp_comm_type"), row["plan"].get("hierarchical_cp_sizes")) == \
        (cp, listed, listed_sizes)
    if flag is None:
        assert "--cp-comm-type" not in text and "--hierarchical-context-parallel-sizes" not in text
    else:
        assert f"{flag} " in text or text.rstrip().endswith(flag)
        assert ("--hierarchical-context-parallel-sizes 2 2" in text) == (listed_sizes is not None)
    if cp == 1:  # priced as the plan without it: the same plan, memory and time
        plain = _row(stack="megatron", cp=1)
        assert row["plan"] == plain["plan"]
        assert (row["memory"], row["time"]) == (plain["memory"], plain["time"])


BRIDGE = [(c, None, cp, c if cp > 1 and c != "p2p" else None, None) for c in ("p2p", "a2a", "all_gather") for cp in (1, 2)]
BRIDGE += [("a2a+p2p", [1, 1], 1, None, None), ("a2a+p2p", [2, 1], 2, "a2a", None), ("a2a+p2p", [1, 2], 2, None, None),
           ("a2a+p2p", [2, 2], 4, "a2a+p2p", [2, 2])]


@pytest.mark.parametrize("cct,sizes,cp,listed,listed_sizes", BRIDGE)
def test_megatron_bridge_round_trip(cct, sizes, cp, listed, listed_sizes):
    """Every recipe reads and writes model.cp_comm_type and model.hierarchical_context_parallel_sizes
    (megatron_bridge.COMMON: Megatron-Core 905c0e386's None, p2p): the Llama 3 8B recipe's here; at cp > 1 the plan's
    variant is written (p2p where the plan names none), a2a+p2p's sizes where it runs hierarchically; at cp 1
    nothing (the recipe's None stands)."""
    row, text = _round_trip("megatron-bridge", stack="megatron-bridge", cp=cp, cp_comm_type=cct,
                            hierarchical_cp_sizes=sizes)
    assert (row["plan"].get("cp_comm_type"), row["plan"].get("hierarchical_cp_sizes")) == (listed, listed_sizes)
    assert ("    model.cp_comm_type=" in text) == (cp > 1)
    if cp > 1:
        assert f"    model.cp_comm_type={listed or 'p2p'} \\\n" in text
    assert ("    model.hierarchical_context_parallel_sizes=[2,2] \\\n" in text) == (listed_sizes is not None)
    assert ("hierarchical_context_parallel_sizes" in text) == (listed_sizes is not None)


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
@pytest.mark.parametrize("cp", [1, 2])
def test_torchtitan_round_trip(rotate, cp):
    """torchtitan spells the ring's rotate method context_parallel_rotate_method, which the catalog torchtitan
    (@e347b1e5e) never hands to torch in training (planner/cp_rotate.py [4]): at every cp its plan lists none, its
    file holds none and its row is the one without the option. A stack whose training takes it (torchtitan before
    1e8f9acd1, tests/data/stacks/torchtitan-rotate-trains.yaml) lists and writes it where it is not the stack's
    allgather and cp > 1."""
    row, text = _round_trip("torchtitan", stack="torchtitan", sharding="fsdp", cp=cp, cp_rotate_method=rotate)
    assert "cp_rotate_method" not in row["plan"] and "context_parallel_rotate_method" not in text
    plain = _row(stack="torchtitan", sharding="fsdp", cp=cp)
    assert (row["plan"], row["memory"], row["time"]) == (plain["plan"], plain["memory"], plain["time"])
    trains = _row(stack=TT_ROTATE_TRAINS, sharding="fsdp", cp=cp, cp_rotate_method=rotate)
    listed = rotate if cp > 1 and rotate != "allgather" else None
    assert trains["plan"].get("cp_rotate_method") == listed
    assert ("context_parallel_rotate_method" in export_plan(trains["plan"], "torchtitan")[0]) == (listed is not None)


def test_megatron_deepspeed_has_no_variant(cli):
    """Megatron-DeepSpeed has no context parallelism (stack max_cp 1, no cp_comm_types): a variant is refused at
    resolve, named, before any file is written; its plans at cp 1 export and read back as before."""
    _round_trip("megatron-deepspeed", stack="megatron-deepspeed", sharding="zero1")
    args = ("export", "--format", "megatron-deepspeed", "--stack", "megatron-deepspeed", "--model", "llama3-8b",
            "--gpus", "8", "--cp", "1")
    assert_one_error(cli(*args, "--cp-comm-type", "a2a"), "cp_comm_type a2a is set but stack megatron-deepspeed")
    assert_one_error(cli(*args, "--cp-rotate-method", "alltoall"), "cp_rotate_method is set but stack megatron-deepspeed")


@pytest.mark.parametrize("fmt,stack,key,value", [
    ("megatron", "megatron", "cp_comm_type", "a2a"), ("megatron-bridge", "megatron-bridge", "cp_comm_type", "a2a"),
    ("torchtitan", "torchtitan", "cp_rotate_method", "alltoall")])
def test_every_exporter_refuses_a_variant_at_cp1_in_a_plan(fmt, stack, key, value):
    """A plan dict that holds a variant at cp 1 (none the planner lists: plan.plan_dict) is refused by every
    exporter alike, naming it, rather than written as a file that reads back without it."""
    extra = {"sharding": "fsdp"} if stack == "torchtitan" else {}
    plan = dict(_row(stack=stack, cp=1, **extra)["plan"], **{key: value})
    with pytest.raises(PlannerError, match=f"export {fmt}: {key} {value} at cp 1"):
        export_plan(plan, fmt)


def test_fit_export_at_cp1_with_a_variant(cli):
    """The issue's command: fit --cp 1 --cp-comm-type a2a --export megatron read back as another plan (cp_comm_type
    'a2a' priced, None read back). Now the plan at cp 1 lists none, the script holds none, and the variant is listed
    as run without CP; fit searching cp says it once, explain at cp 2 not at all."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--cp", "1", "--cp-comm-type", "a2a", "--export", "megatron")
    assert r.exit_code == 0, r.stderr
    assert "--cp-comm-type" not in r.stdout and "torchrun" in r.stdout
    assert r.stderr.count(f"warning: cp_comm_type a2a {NOTE}") == 1
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--cp", "2", "--cp-comm-type", "a2a", "--top", "1",
            "--format", "json")
    assert r.exit_code == 0 and NOTE not in r.stderr
    assert json.loads(r.stdout)[0]["plan"]["cp_comm_type"] == "a2a"
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--cp-comm-type", "all_gather", "--format", "json")
    assert r.exit_code == 0 and r.stderr.count(f"warning: cp_comm_type all_gather {NOTE}") == 1
    rows = json.loads(r.stdout)
    assert all(x["plan"].get("cp_comm_type") == ("all_gather" if x["plan"]["cp"] > 1 else None) for x in rows)
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--cp", "2", "--cp-comm-type", "a2a")
    assert r.exit_code == 0 and NOTE not in r.stderr


def test_bridge_llama_recipe_reads_model_cp_comm_type(tmp_path):
    """model.cp_comm_type is every recipe's key (megatron_bridge.COMMON, Megatron-Core 905c0e386's None): on the
    Llama 3 8B recipe (CP 2, llama3.py) it is the job's where not p2p, ignored at CP 1, never listed as not
    modelled; a2a+p2p takes model.hierarchical_context_parallel_sizes (ignored beside another variant); a per-layer list
    is refused, named."""
    from planner.trainers import load_trainer_config

    run = "torchrun --nproc_per_node 8 --nnodes 1 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config"
    f = tmp_path / "launch.sh"
    for over, want, ignored in (("model.context_parallel_size=2 model.cp_comm_type=a2a", "a2a", False),
                                ("model.context_parallel_size=2 model.cp_comm_type=all_gather", "all_gather", False),
                                ("model.context_parallel_size=2 model.cp_comm_type=p2p", None, False),
                                ("model.context_parallel_size=2", None, False),
                                ("model.context_parallel_size=1 model.cp_comm_type=a2a", None, True)):
        f.write_text(f"{run} {over}\n")
        cfg = load_trainer_config(f, hardware="h100-sxm")
        assert cfg.job.get("cp_comm_type") == want, over
        assert not any("cp_comm_type" in x for x in cfg.not_modelled)
        assert any(x.startswith("model.cp_comm_type=a2a (context_parallel_size 1") for x in cfg.ignored) == ignored
    f.write_text(f"{run} model.context_parallel_size=4 model.cp_comm_type=a2a+p2p "
                 "model.hierarchical_context_parallel_sizes=[2,2]\n")
    cfg = load_trainer_config(f, hardware="h100-sxm")
    assert (cfg.job["cp_comm_type"], cfg.job["hierarchical_cp_sizes"]) == ("a2a+p2p", [2, 2])
    f.write_text(f"{run} model.cp_comm_type=a2a model.hierarchical_context_parallel_sizes=[2,1]\n")
    cfg = load_trainer_config(f, hardware="h100-sxm")
    assert "hierarchical_cp_sizes" not in cfg.job and cfg.job["cp_comm_type"] == "a2a"
    assert any(x.startswith("model.hierarchical_context_parallel_sizes=[2,1] (read by") for x in cfg.ignored)
    for bad, what in (("model.cp_comm_type=[p2p,a2a]", "model.cp_comm_type="),
                      ("model.hierarchical_context_parallel_sizes=[2,0]", "model.hierarchical_context_parallel_sizes=")):
        f.write_text(f"{run} {bad}\n")
        with pytest.raises(PlannerError, match=re.escape(what)):
            load_trainer_config(f, hardware="h100-sxm")
