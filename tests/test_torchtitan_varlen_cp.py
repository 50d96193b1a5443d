"""torchtitan refuses context parallelism over varlen attention (issue 22, varlencp): start-up rule TORCHTITAN_VARLEN_CP
(code 86) on the job field attention_backend, which the torchtitan readers set from what the file builds.

Sources, read at each commit:
  main @e347b1e5e        torchtitan/models/llama3/model/args.py update_from_config l. 57-65: context_parallel_degree > 1
                         and attn_type == "varlen" raises NotImplementedError ('Varlen attention is not supported with
                         CP'); torchtitan/distributed/context_parallel.py apply_cp_to_attention_module l. 69-72 (case
                         "varlen": 'Variable-length attention CP is not yet supported'); l. 54-68 apply CP to flex and
                         sdpa. The 8B_varlen flavor (models/llama3/__init__.py l. 71-81) sets attn_type "varlen", 8B_flex
                         "flex", 8B none (args.py l. 45: "sdpa").
  release/0.3 @4f9e9a47d torchtitan/models/llama3/model.py l. 75-82 and models/qwen3/model.py l. 91-97 raise the same
                         NotImplementedError where the inner attention is VarlenAttention.Config; llama3/config_registry.py
                         llama3_debugmodel_varlen_attn l. 73-77 and qwen3/config_registry.py sft_qwen3_8b_math l. 449-498
                         pass attn_backend "varlen" to model_registry, llama3_debugmodel the default "flex"
                         (llama3/__init__.py l. 369-371); context_parallel/api.py l. 103-104 refuses varlen under CP.
                         get_attention_config (models/common/config_utils.py l. 71-104) raises for sdpa.
Before: the three varlen reproductions with cp 2 passed `planner check` (varlen priced as flex / the stack's kernel,
ATTN_PRICED), and fit ranked CP > 1 rows for a varlen job.
"""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_error
from planner.catalog import load_stack
from planner.startup import CODES
from planner.trainers import load_trainer_config

RULE = "TORCHTITAN_VARLEN_CP"
MAIN_SRC = "torchtitan/models/llama3/model/args.py update_from_config l. 57-65"
REL_SRC = "torchtitan/models/qwen3/model.py l. 91-97"


def _line(tmp_path, config: str, extra: str = "", module: str = "llama3", name: str = "run.sh"):
    p = tmp_path / name
    p.write_text(f"#!/usr/bin/bash\nMODULE={module} CONFIG={config} NGPU=8 ./run_train.sh {extra}\n")
    return p


def _toml(tmp_path, flavor: str, cp: int):
    """main's TOML: 8 GPUs = shard 8 / cp x cp; seq 8192 (a multiple of tp x 2 cp = 4, TORCHTITAN_SEQ_DIVISOR)."""
    p = tmp_path / f"{flavor}_cp{cp}.toml"
    p.write_text(f'[model]\nname = "llama3"\nflavor = "{flavor}"\n[training]\nseq_len = 8192\nlocal_batch_size = 1\n'
                 f'[parallelism]\ndata_parallel_shard_degree = {8 // cp}\ncontext_parallel_degree = {cp}\n')
    return p


def test_code_and_stack_data():
    """Code 86 follows TORCHTITAN_SEQ_SP_CP (85); main builds sdpa (its default), flex, varlen; 0.3.0 flex (its default)
    and varlen, sdpa refused for language models; Megatron names none (its kernel is attention_kernel)."""
    assert CODES[RULE] == 86
    main, rel, mg = load_stack("torchtitan"), load_stack("torchtitan-0.3"), load_stack("megatron")
    assert (main.defaults.attention_backend, main.runs.attention_backends) == ("sdpa", ["sdpa", "flex", "varlen"])
    assert (rel.defaults.attention_backend, rel.runs.attention_backends) == ("flex", ["flex", "varlen"])
    assert (mg.defaults.attention_backend, mg.runs.attention_backends) == (None, None)


@pytest.mark.parametrize("config, module", [("llama3_debugmodel_varlen_attn", "llama3"), ("sft_qwen3_8b_math", "qwen3")])
def test_0_3_varlen_functions_with_cp_are_refused(cli, tmp_path, config, module):
    """The two 0.3 reproductions: the config function's attn_backend "varlen" reaches the job, and cp 2 is refused
    (exit 2, naming the rule and both versions' sources); the same line without CP passes."""
    p = _line(tmp_path, config, "--parallelism.context_parallel_degree 2", module)
    assert load_trainer_config(p, hardware="h100-sxm").job["attention_backend"] == "varlen"
    r = cli("check", str(p), "--hardware", "h100-sxm")
    assert_one_error(r, f"breaks start-up rule {RULE} of torchtitan", MAIN_SRC, REL_SRC, "use cp 1 with varlen attention")
    r = cli("check", str(_line(tmp_path, config, module=module, name="nocp.sh")), "--hardware", "h100-sxm")
    assert r.exit_code in (0, 1) and RULE not in r.stderr, r.stderr


def test_main_8b_varlen_toml_with_cp_is_refused(cli, tmp_path):
    """The main reproduction: [model] llama3 8B_varlen with context_parallel_degree 2."""
    p = _toml(tmp_path, "8B_varlen", 2)
    assert load_trainer_config(p, hardware="h100-sxm").job["attention_backend"] == "varlen"
    assert_one_error(cli("check", str(p), "--hardware", "h100-sxm"), f"breaks start-up rule {RULE}", MAIN_SRC)
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), f"breaks start-up rule {RULE}")
    r = cli("check", str(_toml(tmp_path, "8B_varlen", 1)), "--hardware", "h100-sxm")
    assert r.exit_code in (0, 1) and RULE not in r.stderr, r.stderr


@pytest.mark.parametrize("flavor, backend", [("8B_flex", "flex"), ("8B", "sdpa")])
def test_main_flex_and_sdpa_with_cp_run(cli, tmp_path, flavor, backend):
    """torchtitan main applies CP to flex and sdpa attention (context_parallel.py l. 54-68): not refused. The flavor's
    attn_type is the job's attention_backend; the plan names it only where it is not the stack's default (sdpa)."""
    p = _toml(tmp_path, flavor, 2)
    assert load_trainer_config(p, hardware="h100-sxm").job["attention_backend"] == backend
    r = cli("explain", str(p), "--hardware", "h100-sxm", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["cp"] == 2 and plan.get("attention_backend") == (None if backend == "sdpa" else backend)


def test_0_3_flex_with_cp_runs(cli, tmp_path):
    """llama3_debugmodel builds model_registry's default "flex": 0.3.0 runs CP over FlexAttention (api.py
    apply_cp_to_forward), so cp 2 is not refused; the plan names no backend (flex is the stack's default)."""
    p = _line(tmp_path, "llama3_debugmodel", "--parallelism.context_parallel_degree 2")
    r = cli("explain", str(p), "--hardware", "h100-sxm", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["cp"] == 2 and "attention_backend" not in plan


def test_the_varlen_flavor_as_a_model(cli):
    """--model torchtitan:llama3/8B_varlen: its generated model's recipe gives attention_backend varlen (listed as
    assumed), so --cp 2 is refused as the TOML is; a job's own backend replaces the recipe's, noted."""
    base = ["explain", "--model", "torchtitan:llama3/8B_varlen", "--gpus", "8", "--global-batch", "16", "--seq-len",
            "8192", "--sharding", "fsdp", "--stack", "torchtitan", "--cp", "2"]
    assert_one_error(cli(*base), f"breaks start-up rule {RULE}", "attention_backend varlen (what torchtitan @e347b1e5e "
                     "builds: models/llama3/__init__.py llama3_args '8B_varlen' l. 71-81")
    r = cli(*base, "--attention-backend", "sdpa")
    assert r.exit_code in (0, 1) and "attention_backend varlen not taken: the job gives sdpa" in r.stderr, r.stderr


def test_the_option_on_each_stack(cli):
    """--attention-backend varlen with --cp 2 is refused on both torchtitan stacks, runs at cp 1 and with flex; a
    stack that does not build it refuses the field (0.3.0 sdpa, Megatron any), naming the stack's list."""
    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--seq-len", "8192",
            "--sharding", "fsdp"]
    for stack in ("torchtitan", "torchtitan-0.3"):
        assert_one_error(cli(*base, "--stack", stack, "--cp", "2", "--attention-backend", "varlen"), RULE)
        for extra in (["--attention-backend", "varlen"], ["--cp", "2", "--attention-backend", "flex"]):
            r = cli(*base, "--stack", stack, *extra)
            assert r.exit_code in (0, 1), (stack, extra, r.stderr)
    assert_one_error(cli(*base, "--stack", "torchtitan-0.3", "--attention-backend", "sdpa"),
                     "attention_backend sdpa: stack torchtitan-0.3 builds flex, varlen")
    assert_one_error(cli(*base, "--attention-backend", "varlen"), "stack megatron names no attention backend")


def test_the_stack_default_is_listed_under_cp(cli):
    """A job that leaves the backend out runs the stack's (sdpa on main), listed among the stack's defaults where the
    rule reads it (cp > 1)."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--seq-len", "8192",
            "--sharding", "fsdp", "--stack", "torchtitan", "--cp", "2")
    assert r.exit_code in (0, 1), r.stderr
    assert "attention_backend sdpa" in r.stdout


def test_fit_never_ranks_cp_for_varlen(cli):
    """fit searches CP: at seq 32,768 on 16 H100 the flex job's top 500 rows include cp 2-16, the varlen job's none
    (every cp > 1 candidate masked by the rule), and its rows carry the backend."""
    def rows(backend):
        r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "16", "--seq-len", "32768",
                "--stack", "torchtitan", "--attention-backend", backend, "--top", "500", "--format", "json")
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)

    varlen, flex = rows("varlen"), rows("flex")
    assert varlen and {row["plan"]["cp"] for row in varlen} == {1}
    assert {row["plan"]["attention_backend"] for row in varlen} == {"varlen"}
    assert max(row["plan"]["cp"] for row in flex) > 1


def test_fit_on_a_varlen_launch_line(cli, tmp_path):
    """fit on the 0.3 line with cp 2: the file's own plan is not ranked (naming the rule) and no row has cp > 1."""
    p = _line(tmp_path, "llama3_debugmodel_varlen_attn", "--parallelism.context_parallel_degree 2")
    r = cli("fit", str(p), "--hardware", "h100-sxm", "--top", "300", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert RULE in r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert rows and {row["plan"]["cp"] for row in rows} == {1}


def test_export_keeps_the_backend(cli, tmp_path):
    """export writes a file that builds the backend priced, or refuses: main has no flavor of llama3-8b's shape running
    varlen at a priced kernel (8B_varlen's is unpriced); 0.3.0's qwen3 8B function is sft_qwen3_8b_math (varlen)."""
    base = ["export", "--format", "torchtitan", "--gpus", "8", "--sharding", "fsdp", "--hardware", "h100-sxm"]
    assert_one_error(cli(*base, "--model", "llama3-8b", "--stack", "torchtitan", "--attention-backend", "varlen",
                         "-o", str(tmp_path / "a.toml")), "attention_backend varlen", "8B_varlen (attn_type 'varlen')")
    assert_one_error(cli(*base, "--model", "llama3-8b", "--stack", "torchtitan-0.3", "--attention-backend", "varlen",
                         "-o", str(tmp_path / "b.sh")), "(attention_backend varlen)")
    out = tmp_path / "c.sh"
    r = cli(*base, "--model", "torchtitan:qwen3/8B", "--global-batch", "8", "--seq-len", "2048", "--stack",
            "torchtitan-0.3", "--attention-backend", "varlen", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert "--config sft_qwen3_8b_math" in out.read_text()
