"""One parser of multi-value settings (planner/trainers words_of): the Megatron reader's flags of
argparse nargs '*' / '+' (--recompute-modules, --cuda-graph-modules, --cp-comm-type,
--hierarchical-context-parallel-sizes, --moe-router-load-balancing-type, --moe-aux-loss-coeff),
the start-up rules (trainers/rules.py) and the command line's list options read their words
alike: a list of words, a quoted list, a bash array, `--flag=value`, and a repeated flag (the
last one counts, as argparse's store action keeps it)."""

from __future__ import annotations

import pytest

from planner.trainers import load_trainer_config, words_of
from planner.trainers.megatron import parse_flags
from planner.trainers.rules import megatron_errors

HEAD = ("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 "
        "--use-distributed-optimizer --bf16 --moe-grouped-gemm --recompute-granularity selective ")


def _job(tmp_path, text: str, **kw) -> dict:
    p = tmp_path / "run.sh"
    p.write_text(text)
    return load_trainer_config(p, model="qwen3-30b-a3b", **kw).job


@pytest.mark.parametrize("value, kw, want", [
    (None, {}, []),
    (True, {}, []),  # a flag given without a value
    (["core_attn", "moe_act"], {}, ["core_attn", "moe_act"]),  # parse_flags' list
    ("core_attn moe_act", {}, ["core_attn", "moe_act"]),  # one string: `--flag=...`, an unknown flag's words
    (["'a2a'", "[p2p],"], {"strip": "'\"[],"}, ["a2a", "p2p"]),  # an argument file's quotes and brackets
    (["2 2"], {"commas": True}, ["2", "2"]),  # a quoted list, one word
    ("2,2", {"commas": True}, ["2", "2"]),
    (["core_attn,", "moe_act"], {"commas": True}, ["core_attn", "moe_act"]),
])
def test_words_of(value, kw, want):
    assert words_of(value, **kw) == want


@pytest.mark.parametrize("modules, want", [
    ("--recompute-modules core_attn moe_act", ["core_attn", "moe_act"]),
    # a bash array, quoted: each element a word (the reader expands "${A[@]}" to its elements)
    ('--recompute-modules "${MODS[@]}"', ["core_attn", "moe_act"]),
    # --flag=value: one string of one word (before: read letter by letter, 'm', 'o', ...)
    ("--recompute-modules=moe_act", ["moe_act"]),
    # the flag given twice: the last one counts (argparse's store action)
    ("--recompute-modules core_attn --recompute-modules layernorm moe_act", ["layernorm", "moe_act"]),
])
def test_the_readers_list_forms(tmp_path, modules, want):
    job = _job(tmp_path, "MODS=(core_attn moe_act)\n" + HEAD + modules + "\n")
    assert job["recompute_modules"] == want


def test_a_bash_array_of_cuda_graph_modules(tmp_path):
    job = _job(tmp_path, 'SCOPE=(attn moe_router moe_preprocess)\n' + HEAD
               + '--cuda-graph-impl transformer_engine --cuda-graph-modules "${SCOPE[@]}"\n')
    assert job["cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]


def test_a_quoted_list_of_sizes(tmp_path):
    """--hierarchical-context-parallel-sizes quoted as one word "2 2" (an argument file's form) and
    given as words read alike; the start-up rule reads the same sizes."""
    base = HEAD.replace("--expert-model-parallel-size 8", "--context-parallel-size 4 --cp-comm-type a2a+p2p")
    for sizes in ('"2 2"', "2 2"):
        job = _job(tmp_path, base + f"--hierarchical-context-parallel-sizes {sizes}\n")
        assert job["hierarchical_cp_sizes"] == [2, 2], sizes
    flags, _ = parse_flags(["--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p",
                            "--hierarchical-context-parallel-sizes", "2 4"], "")
    assert flags["--hierarchical-context-parallel-sizes"] == ["2 4"]  # one quoted word, as shlex gave it
    errors = megatron_errors(flags, 8)
    assert any(code == "HCP_SIZES" and "2 4" in why for code, why in errors), errors


def test_a_repeated_nargs_flag_keeps_the_last():
    flags, _ = parse_flags(["--cp-comm-type", "p2p", "--cp-comm-type", "a2a"], "")
    assert flags["--cp-comm-type"] == ["a2a"]
