"""A torchtitan flavor carries the attention kernel torchtitan builds for it (issue 22, ttreg03).

`--model torchtitan:<code>/<flavor>` is main @e347b1e5e's registry entry (planner/torchtitan_registry.py). A flavor
whose attn_type is flex (llama3 8B_flex l. 60-70, deepseek_v3 16B / 236B / 671B, llama4's _irope flavors, every
gpt_oss flavor: model/args.py attn_type default "flex") builds FlexAttention; its generated model's `training:`
recipe says so (TrainingRecipe.attention_kernel), and planner/recipe.py takes it where the job names no kernel and
the job's stack lists it (stack_db runs.attention_kernels: torchtitan flash2 + flex, torchtitan-0.3 flex). A job's
own kernel wins, named in the note. varlen (8B_varlen l. 71-81: torch's varlen_attn over packed documents) has no
rate in the planner: its plan is priced with the stack's kernel and its export is refused, where it was written as
8B before. On the torchtitan-0.3 stack (release/0.3 @4f9e9a47d) a flavor of main's registry that 0.3.0 does not
ship, or builds with another default attention backend, is noted (torchtitan_flavors.RELEASE_FLAVORS).
"""

from __future__ import annotations

import json
import tomllib

import pytest

from planner.catalog import load_model, load_stack
from planner.trainers import load_trainer_config
from planner.trainers.torchtitan_flavors import RELEASE_FLAVORS, release_note

from conftest import assert_one_error

ARGS = ["--gpus", "8", "--seq-len", "8192", "--global-batch", "8", "--hardware", "h100-sxm", "--stack", "torchtitan"]
SRC_8B_FLEX = ("attention_kernel flex (what torchtitan @e347b1e5e builds: models/llama3/__init__.py llama3_args "
               "'8B_flex' l. 60-70, attn_type \"flex\")")


def _explain(cli, *args):
    r = cli("explain", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_the_stacks_list_the_kernels_their_code_runs():
    assert load_stack("torchtitan").runs.attention_kernels == ["flash2", "flex"]
    assert load_stack("torchtitan-0.3").runs.attention_kernels == ["flex"]
    assert load_stack("megatron").runs.attention_kernels is None


def test_the_generated_model_states_its_kernel():
    rec = load_model("torchtitan:llama3/8B_flex").training
    assert rec.attention_kernel == "flex"
    assert rec.sources["attention_kernel"] == ("what torchtitan @e347b1e5e builds: models/llama3/__init__.py llama3_args "
                                               "'8B_flex' l. 60-70, attn_type \"flex\"")
    assert rec.not_priced == ["attn_mask_type block_causal: 8B_flex attends within each document; priced as causal "
                              "attention over the whole sequence, an upper bound"]
    # gpt_oss sets no attn_type in its registry: its args' default is flex (model/args.py l. 67), the mask causal
    rec = load_model("torchtitan:gpt_oss/20b").training
    assert rec.attention_kernel == "flex" and rec.not_priced == []
    assert rec.sources["attention_kernel"] == ("what torchtitan @e347b1e5e builds: models/gpt_oss/__init__.py "
                                               "gptoss_configs '20b' l. 47-61, gpt_oss model/args.py l. 67 attn_type "
                                               "default \"flex\"")
    # sdpa (the stack's default kernel) gives none; varlen (no rate) no kernel, but its attention_backend, which the
    # start-up rules read (TORCHTITAN_VARLEN_CP, issue 22 varlencp; tests/test_torchtitan_varlen_cp.py)
    assert load_model("torchtitan:llama3/8B").training is None
    rec = load_model("torchtitan:llama3/8B_varlen").training
    assert (rec.attention_kernel, rec.attention_backend) == (None, "varlen")
    assert rec.sources["attention_backend"] == ("what torchtitan @e347b1e5e builds: models/llama3/__init__.py "
                                                "llama3_args '8B_varlen' l. 71-81, attn_type \"varlen\"")
    assert rec.not_priced == ["attn_type varlen: torch's varlen_attn has no rate of its own in the planner: 8B_varlen is "
                              "priced with the stack's kernel", "attn_mask_type block_causal: 8B_varlen attends within "
                              "each document; priced as causal attention over the whole sequence, an upper bound"]


def test_a_flex_flavor_plans_flexattention_without_the_flag(cli):
    """Before: torchtitan:llama3/8B_flex priced flash2 (step 1.0486 s here) unless --attention-kernel flex was given."""
    js, err = _explain(cli, "--model", "torchtitan:llama3/8B_flex", *ARGS)
    assert js["plan"]["attention_kernel"] == "flex"
    assert SRC_8B_FLEX in err
    assert "assumed from what torchtitan builds for the flavor" in err
    flagged, _ = _explain(cli, "--model", "torchtitan:llama3/8B_flex", *ARGS, "--attention-kernel", "flex")
    assert js["time"] == flagged["time"] and js["memory"] == flagged["memory"]
    sdpa, err = _explain(cli, "--model", "torchtitan:llama3/8B", *ARGS)  # the same shape with attn_type sdpa
    assert sdpa["plan"]["attention_kernel"] == "flash2" and "attention_kernel" not in err
    assert sdpa["time"]["step_s"] != js["time"]["step_s"]  # FlexAttention's rate is not FlashAttention-2's


def test_a_flag_wins_and_is_named(cli):
    js, err = _explain(cli, "--model", "torchtitan:llama3/8B_flex", *ARGS, "--attention-kernel", "flash2")
    assert js["plan"]["attention_kernel"] == "flash2"
    assert "attention_kernel flex not taken: the job gives flash2" in err
    sdpa, _ = _explain(cli, "--model", "torchtitan:llama3/8B", *ARGS)
    assert js["time"] == sdpa["time"]


def test_a_stack_that_does_not_list_it_does_not_take_it(cli):
    args = [a if a != "torchtitan" else "megatron" for a in ARGS]
    js, err = _explain(cli, "--model", "torchtitan:llama3/8B_flex", *args)
    assert js["plan"]["attention_kernel"] != "flex"
    assert "attention_kernel flex not taken: stack megatron does not list the attention kernels its model code runs" in err


def test_a_flex_flavor_exports_as_itself_and_reads_back(cli, tmp_path):
    """Before: the plan (flash2) was written as flavor 8B, silently."""
    out = tmp_path / "f.toml"
    r = cli("export", "--format", "torchtitan", "--model", "torchtitan:llama3/8B_flex", *ARGS, "--sharding", "fsdp",
            "-o", str(out))
    assert r.exit_code == 0, r.stderr
    d = tomllib.loads(out.read_text())
    assert (d["model"]["name"], d["model"]["flavor"]) == ("llama3", "8B_flex")
    planned, _ = _explain(cli, "--model", "torchtitan:llama3/8B_flex", *ARGS, "--sharding", "fsdp")
    back, _ = _explain(cli, str(out), "--gpus", "8", "--hardware", "h100-sxm")
    assert back["plan"]["attention_kernel"] == "flex"
    assert back["memory"]["total_bytes"] == planned["memory"]["total_bytes"] > 0
    assert back["time"] == planned["time"]


def test_a_flex_flavor_priced_with_flash2_exports_as_the_sdpa_flavor_noted(cli):
    r = cli("export", "--format", "torchtitan", "--model", "torchtitan:llama3/8B_flex", *ARGS, "--sharding", "fsdp",
            "--attention-kernel", "flash2")
    assert r.exit_code == 0, r.stderr
    assert tomllib.loads(r.stdout)["model"]["flavor"] == "8B"
    assert ("model torchtitan:llama3/8B_flex: priced with attention kernel flash2 (the job's), which torchtitan's "
            "8B_flex (attn_type 'flex') does not run: written as llama3 8B, the flavor of the same priced shape whose "
            "attn_type 'sdpa' runs it") in r.stderr


def test_8b_varlen_is_not_written_as_8b(cli, tmp_path):
    r = cli("export", "--format", "torchtitan", "--model", "torchtitan:llama3/8B_varlen", *ARGS, "--sharding", "fsdp")
    assert_one_error(r, "export torchtitan: model torchtitan:llama3/8B_varlen: torchtitan @e347b1e5e's llama3 8B_varlen "
                        "runs attn_type 'varlen' (models/llama3/__init__.py l. 71-81), which the planner has no rate for: "
                        "the plan was priced with flash2, which torchtitan runs as 8B, not as 8B_varlen",
                     "plan --model torchtitan:llama3/8B (the same priced shape with attn_type 'sdpa'), then export")
    # its TOML without --model reads as the flavor itself (not llama3-8b, whose export would write 8B)
    p = tmp_path / "v.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B_varlen"\n[training]\nseq_len = 8192\nlocal_batch_size = 1\n'
                 '[parallelism]\ndata_parallel_shard_degree = 8\n')
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["model"] == "torchtitan:llama3/8B_varlen" and "attention_kernel" not in cfg.job
    assert any("the flavor as torchtitan builds it: llama3-8b's priced shape, read as the flavor for its attn_type "
               "'varlen'" in a for a in cfg.assumed)
    assert any("which the planner has no rate for: priced as the stack's kernel (its export is refused" in a
               for a in cfg.assumed)
    r = cli("export", "--format", "torchtitan", str(p), "--hardware", "h100-sxm")
    assert r.exit_code == 2 and "runs attn_type 'varlen'" in r.stderr
    # with --model llama3-8b the file is priced as that model, and the line says what its export writes
    cfg = load_trainer_config(p, model="llama3-8b", hardware="h100-sxm")
    assert cfg.job["model"] == "llama3-8b"
    assert any("--model llama3-8b: its export writes the flavor of its shape that runs the stack's kernel" in a
               for a in cfg.assumed)
    # 8B_flex still reads as the catalog entry with its kernel (TORCHTITAN_ZOO)
    p.write_text(p.read_text().replace("8B_varlen", "8B_flex"))
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["model"] == "llama3-8b" and cfg.job["attention_kernel"] == "flex"


def test_fit_exports_a_flex_flavor_without_the_flag(cli, tmp_path):
    """Before: the plan priced flash2 and the export refused it ('price it with --attention-kernel flex')."""
    out = tmp_path / "g.toml"
    r = cli("fit", "--model", "torchtitan:gpt_oss/20b", "--gpus", "16", "--ep", "8", "--global-batch", "64",
            "--hardware", "h100-sxm", "--stack", "torchtitan", "--top", "1", "--export", "torchtitan", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert 'name = "gpt_oss"\nflavor = "20b"' in out.read_text()


# release/0.3 @4f9e9a47d torchtitan/models/<module>/__init__.py, read by hand: the registry dicts' keys and
# model_registry's attn_backend default
def test_the_0_3_registries_by_hand():
    t = RELEASE_FLAVORS["torchtitan-0.3"]
    assert sorted(t) == ["deepseek_v3", "gpt_oss", "kimi_k2_7", "llama3", "muse_glimmer", "qwen3", "qwen3_5"]
    assert t["llama3"][:2] == (("debugmodel", "1B", "3B", "8B", "70B", "405B"), "flex")
    assert t["deepseek_v3"][:2] == (("debugmodel", "16B", "236B", "671B"), "flex")
    assert t["gpt_oss"][:2] == (("debugmodel", "20b", "120b"), "varlen")
    assert len(t["qwen3"][0]) == 11 and "debugmodel_non_fused_qkv" in t["qwen3"][0]
    assert "llama4" not in t and "flux" not in t


@pytest.mark.parametrize("model, want", [
    ("torchtitan:llama3/8B_flex", "torchtitan:llama3/8B_flex: torchtitan release/0.3 @4f9e9a47d's llama3 registry "
                                  "(llama3/__init__.py l. 359-371) has no flavor '8B_flex' (its flavors: debugmodel, 1B, "
                                  "3B, 8B, 70B, 405B; the attention backend is a config argument there, default 'flex'): "
                                  "priced as main @e347b1e5e's llama3 8B_flex (models/llama3/__init__.py l. 60-70)"),
    ("torchtitan:llama4/17bx16e", "torchtitan:llama4/17bx16e: torchtitan release/0.3 @4f9e9a47d has no llama4 code"),
    ("torchtitan:gpt_oss/20b", "torchtitan:gpt_oss/20b: torchtitan release/0.3 @4f9e9a47d builds gpt_oss 20b with "
                               "attn_backend 'varlen' by default (gpt_oss/__init__.py l. 381-391), main @e347b1e5e with "
                               "attn_type 'flex': priced with the stack's kernel"),
    ("torchtitan:deepseek_v3/671B", None),  # the same name, flex in both
    ("llama3-8b", None),
])
def test_a_main_flavor_on_0_3_is_noted(model, want):
    got = release_note(model, "torchtitan-0.3")
    assert got == want if want is None or not want.endswith("llama4 code") else got.startswith(want)
    assert release_note(model, "torchtitan") is None  # main's own registry


def test_the_note_on_the_command_line(cli):
    js, err = _explain(cli, "--model", "torchtitan:llama3/8B_flex", "--gpus", "8", "--seq-len", "8192",
                       "--global-batch", "8", "--hardware", "h100-sxm", "--stack", "torchtitan-0.3")
    assert js["plan"]["attention_kernel"] == "flex"
    assert "has no flavor '8B_flex'" in err and SRC_8B_FLEX in err
