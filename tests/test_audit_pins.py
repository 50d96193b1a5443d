"""The 2026-12-07 audit5 leftovers (task pins): a model feature the stack's trainer cannot build is never ranked;
contradictory pins exit 2 at once; llama4-scout's context is its config's; a copy of a shipped stack file is told
what it lacks to export. Each test fails before its fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import assert_one_error
from planner.catalog import load_model, load_stack
from planner.startup import layer_gaps, unbuilt_layer_forms

ROOT = Path(__file__).resolve().parent.parent
ARCH = Path(__file__).parent / "data" / "arch"


def _export_refused(r, *needles):
    """fit --export's refusal: exit 2, its `warning: exporting row 1` line, then `error:` / `hint:`, every needle."""
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr and "\nerror: export " in "\n" + r.stderr
    for n in needles:
        assert n in r.stderr, n


# ------------------------------------------------------------ Gemma 3's post-norms on Megatron-LM
def test_megatron_refuses_post_norms_and_names_the_stack_that_builds_them(cli):
    # before: `fit --model gemma3-27b --stack megatron` ranked plans that `fit --export megatron` then refused (Megatron-LM
    # @d98e8a64's TransformerLayerSubmodules has no norm on a sub-block's output); now rule STACK_LAYER_KIND refuses it
    gemma = load_model("gemma3-27b")
    assert set(unbuilt_layer_forms(gemma, load_stack("megatron"))) == {"post_norms"}
    assert not layer_gaps(gemma, load_stack("megatron-bridge"))  # Bridge's gemma3_layer_spec builds them
    r = cli("fit", "--model", "gemma3-27b", "--stack", "megatron", "--gpus", "64")
    assert_one_error(r, "(post_norms), which stack megatron's code does not build", "STACK_LAYER_KIND",
                     "TransformerLayerSubmodules", "choose a stack that builds every layer of gemma3-27b: megatron-bridge")
    r = cli("explain", "--model", "gemma3-27b", "--stack", "megatron", "--gpus", "8", "--tp", "8")
    assert_one_error(r, "post_norms", "STACK_LAYER_KIND")


def test_a_bridge_plan_of_gemma_is_not_written_as_megatron_lm_flags(cli):
    # Bridge's plans are written as Megatron-LM's flags (export_format megatron) only where Megatron-LM builds the model
    r = cli("fit", "--model", "gemma3-27b", "--stack", "megatron-bridge", "--gpus", "64", "--seq-len", "4096",
            "--top", "1", "--export", "megatron")
    _export_refused(r, "export megatron: the plan was priced on stack megatron-bridge, whose layers the format's "
                        "trainer (stack megatron", "post_norms")


# ------------------------------------------------------------ pins that contradict the stack's or the trainer's rules
def test_fit_refuses_an_expert_grid_above_the_gpus(cli):
    # before: searched, then nearby GPU counts, exit 1 (11-14 s); rule EP_DPCP: etp x ep = 64 ranks on 8 GPUs
    r = cli("fit", "--model", "mixtral-8x7b", "--gpus", "8", "--ep", "8", "--etp", "8")
    assert_one_error(r, "--etp 8 x --ep 8 = 64 does not divide --gpus 8", "rule EP_DPCP", "leave --etp out")
    # a pair that folds is searched: etp 1 x ep 8 on 8 GPUs
    ok = cli("fit", "--model", "mixtral-8x7b", "--gpus", "8", "--ep", "8", "--etp", "1,8", "--seq-len", "4096",
             "--top", "1", "--format", "json", "-q")
    assert ok.exit_code in (0, 1), ok.stderr  # searched: a plan, or none that fits memory (not a refusal)
    assert "does not divide" not in ok.stderr


def test_fit_refuses_a_shard_group_no_dp_can_hold(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--sharding", "hsdp", "--shard-group", "3")
    assert_one_error(r, "--shard-group 3 does not divide --gpus 64", "rule HSDP_SHARD",
                     "give a divisor of --gpus 64: 1, 2, 4, 8, 16, 32, 64")
    r = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--sharding", "hsdp", "--shard-group", "16", "--dp", "8")
    assert_one_error(r, "--shard-group 16 does not divide --dp 8", "give a divisor of --dp 8: 1, 2, 4, 8")


def test_fit_refuses_async_tp_without_compile_on_torchtitan(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "64", "--stack", "torchtitan", "--no-compile", "--tp-comm-overlap")
    assert_one_error(r, "--tp-comm-overlap with --no-compile: tp_comm_overlap on stack torchtitan is async TP, which "
                        "needs torch_compile", "tensor_parallel.py l. 20-23", "drop --no-compile")


# ------------------------------------------------------------ llama4-scout's context
def test_llama4_contexts_are_their_configs_max_position_embeddings(cli):
    for name, arch in (("llama4-scout", "llama-4-scout-17b-16e-instruct"),
                       ("llama4-maverick", "llama-4-maverick-17b-128e-instruct")):
        cfg = json.loads((ARCH / arch / "config.json").read_text())["text_config"]
        assert load_model(name).max_seq_len == cfg["max_position_embeddings"]
    assert load_model("llama4-scout").max_seq_len == 10_485_760  # not RoPE scaling's original 8,192
    # before: a 32K job warned that it is beyond the 8,192-token context
    r = cli("explain", "--model", "llama4-scout", "--stack", "torchtitan", "--gpus", "64", "--ep", "8",
            "--sharding", "fsdp", "--seq-len", "32768", "--global-batch", "64", "--format", "json", "-q")
    assert r.exit_code in (0, 1), r.stderr
    assert "beyond the" not in r.stderr


# ------------------------------------------------------------ a user's copy of the shipped megatron stack file
def test_a_copy_of_the_megatron_stack_is_told_to_add_export_format(cli, tmp_path):
    # before: "another release of the trainer than the one this format's files are written for" (the same release)
    own = tmp_path / "my-megatron.yaml"
    shutil.copy(ROOT / "stack_db" / "megatron.yaml", own)
    args = ("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", own, "--top", "1", "--export", "megatron")
    r = cli(*args)
    _export_refused(r, f"stack file {own}", "runs the release this format's files are written for",
                     "gives no export_format", "add `export_format: megatron` to the stack file")
    assert "another release" not in r.stderr
    said = tmp_path / "my-megatron-said.yaml"  # (a new path: the catalog caches a stack file by its path)
    said.write_text(own.read_text() + "export_format: megatron\n")
    r = cli(*args[:6], said, *args[7:])
    assert r.exit_code == 0, r.stderr
    assert "--tensor-model-parallel-size" in r.stdout and "written as stack megatron's file" in r.stderr
