"""A torchtitan TOML's [model] name is the model code torchtitan builds (issue 22): read through an
explicit table (planner/trainers/torchtitan.py TORCHTITAN_NAME_CODES, per stack), checked against the
code the start-up rules take for the priced model (stack_db runs.model_codes by its hf_model_type,
startup.model_code), and listed as assumed. Hand-written TOMLs; every expected name and code read by hand
from torchtitan's registry:

  @e347b1e5e torchtitan/models/__init__.py l. 7-9 _supported_models = deepseek_v3, flux, gpt_oss, llama3,
    llama3_ft, llama4, qwen3; protocols/train_spec.py l. 71-87 get_train_spec(name) imports
    torchtitan.models.<name>; models/llama3_ft/__init__.py l. 17-33 builds llama3's Transformer with
    llama3_args, parallelize_llama and pipeline_llm; config/job_config.py l. 101 Model.name = "llama3".
  release/0.3 @4f9e9a47d torchtitan/models/__init__.py l. 7-18 _supported_models = deepseek_v3, flux,
    gpt_oss, kimi_k2_7, llama3, muse_glimmer, qwen3, qwen3_5 (config/manager.py l. 94-110: --module).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.catalog import load_stack
from planner.errors import PlannerError
from planner.trainers import load_trainer_config
from planner.trainers.torchtitan import TORCHTITAN_NAME_CODES

from conftest import assert_one_error

# by hand from the registries above: the language-model packages whose code the stack lists (flux: FLUX.1, a
# diffusion transformer; kimi_k2_7, muse_glimmer, qwen3_5: packages stack_db torchtitan-0.3 lists no code for)
WANT = {
    "torchtitan": {"deepseek_v3": "deepseek_v3", "gpt_oss": "gpt_oss", "llama3": "llama3", "llama3_ft": "llama3",
                   "llama4": "llama4", "qwen3": "qwen3", "flux": None},
    "torchtitan-0.3": {"deepseek_v3": "deepseek_v3", "gpt_oss": "gpt_oss", "llama3": "llama3", "qwen3": "qwen3",
                       "flux": None},
}

BODY = """
[training]
local_batch_size = 1
seq_len = 4096

[parallelism]
data_parallel_shard_degree = -1
"""


def _toml(tmp_path, name=None, flavor=None, body=BODY):
    head = "[model]\n" + (f'name = "{name}"\n' if name else "") + (f'flavor = "{flavor}"\n' if flavor else "")
    p = tmp_path / "job.toml"
    p.write_text((head if name or flavor else "") + body, encoding="utf-8")
    return p


def _code_lines(cfg):
    return [a for a in cfg.assumed if a.startswith("model code")]


def test_the_table_is_the_registry_and_the_stacks_codes():
    """The table is the registry read by hand, and every code it names is one the stack lists (so the
    start-up rules' code and the name's can be compared)."""
    assert TORCHTITAN_NAME_CODES == WANT
    for stack, table in TORCHTITAN_NAME_CODES.items():
        codes = {c.code for c in load_stack(stack).runs.model_codes}
        assert {c for c in table.values() if c} <= codes, stack


def test_llama3_name_is_the_llama3_code(tmp_path):
    """torchtitan's own preset (name llama3, flavor 8B): the model llama3-8b from the flavor, its model_type
    llama is trained by the llama3 code, the code the name builds: stated."""
    cfg = load_trainer_config(_toml(tmp_path, "llama3", "8B"), gpus=8)
    assert cfg.job["model"] == "llama3-8b"
    assert _code_lines(cfg) == ["model code llama3: [model] name 'llama3', the code stack_db torchtitan runs.model_codes "
                                "gives llama3-8b's model_type 'llama'"]


def test_llama3_ft_builds_the_llama3_code(tmp_path):
    cfg = load_trainer_config(_toml(tmp_path, "llama3_ft", "8B"), model="llama3-8b", gpus=8)
    assert _code_lines(cfg)[0].startswith("model code llama3: [model] name 'llama3_ft'")


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-0.3"])
def test_qwen3_name_with_a_qwen3_model(tmp_path, stack):
    """name qwen3 with a model of the 30B-A3B flavor's shape (qwen3-30b-a3b with torchtitan's expert bias:
    tests/data/torchtitan_flavors; model_type qwen3_moe, the qwen3 code at both commits)."""
    tt = str(Path(__file__).parent / "data" / "torchtitan_flavors" / "qwen3-30b-a3b-torchtitan.yaml")
    cfg = load_trainer_config(_toml(tmp_path, "qwen3", "30B-A3B"), model=tt, gpus=8, stack=stack)
    assert _code_lines(cfg) == [f"model code qwen3: [model] name 'qwen3', the code stack_db {stack} runs.model_codes "
                                f"gives {tt}'s model_type 'qwen3_moe'"]


def test_a_name_of_another_code_is_refused(tmp_path, cli):
    """name llama3 with --model qwen3-30b-a3b: torchtitan would build the llama3 code, the planner would price
    qwen3's: a contradiction, exit 2, naming both codes and the fix. The same without a flavor (the shape
    check cannot catch it then), and deepseek_v3's name with a qwen3 model."""
    p = _toml(tmp_path, "llama3")
    with pytest.raises(PlannerError) as e:
        load_trainer_config(p, model="qwen3-30b-a3b", gpus=8)
    assert e.value.message == (f"{p}: [model] name 'llama3' builds torchtitan's llama3 code (model_type llama), but --model "
                               "qwen3-30b-a3b is model_type 'qwen3_moe', which torchtitan trains with its qwen3 code "
                               "(stack_db torchtitan runs.model_codes)")
    assert e.value.hint.startswith('set [model] name = "qwen3"')
    r = cli("check", _toml(tmp_path, "llama3", "8B"), "--model", "qwen3-30b-a3b", "--gpus", "8")
    assert_one_error(r, "[model] name 'llama3' builds torchtitan's llama3 code", "qwen3 code")
    with pytest.raises(PlannerError, match="deepseek_v3 code \\(model_type deepseek_v3, kimi_k2\\)"):
        load_trainer_config(_toml(tmp_path, "deepseek_v3"), model="qwen3-30b-a3b", gpus=8)


def test_a_model_type_no_code_trains_is_refused_under_a_named_code(tmp_path):
    """name llama3 with --model mistral-7b (model_type mistral: torchtitan has no code for it): the llama3 code
    trains model_type llama only."""
    with pytest.raises(PlannerError, match="model_type 'mistral', which no torchtitan code trains"):
        load_trainer_config(_toml(tmp_path, "llama3"), model="mistral-7b", gpus=8)


def test_flux_is_no_language_model(tmp_path, cli):
    r = cli("explain", _toml(tmp_path, "flux"), "--model", "llama3-8b", "--gpus", "8")
    assert_one_error(r, "[model] name 'flux' is no language model")


def test_a_model_without_hf_model_type_takes_the_named_code_as_stated(tmp_path):
    """gpt3-175b gives no hf_model_type: nothing to contradict; the line says the rules do not read the llama3
    code's limits for it (priced on the stack's runs alone, as startup.model_code_assumed also says)."""
    cfg = load_trainer_config(_toml(tmp_path, "llama3"), model="gpt3-175b", gpus=8)
    assert _code_lines(cfg) == ["model code llama3: [model] name 'llama3'; gpt3-175b gives no hf_model_type, so the start-up "
                                "rules do not read the llama3 code's limits (stack_db torchtitan runs.model_codes: priced "
                                "on the stack's runs alone)"]


def test_no_name_is_torchtitans_default_noted_not_refused(tmp_path):
    """No [model] name: torchtitan's default llama3 (a default, not a statement): with a llama model it is
    the code; with qwen3-30b-a3b the rules take qwen3's code and the line says what to set."""
    cfg = load_trainer_config(_toml(tmp_path), model="llama3-8b", gpus=8)
    assert _code_lines(cfg) == ["model code llama3: no [model] name, torchtitan's default 'llama3' (job_config.py Model.name), "
                                "the code stack_db torchtitan runs.model_codes gives llama3-8b's model_type 'llama'"]
    cfg = load_trainer_config(_toml(tmp_path), model="qwen3-30b-a3b", gpus=8)
    assert _code_lines(cfg) == ["model code qwen3: qwen3-30b-a3b's model_type 'qwen3_moe' (stack_db torchtitan runs.model_codes); "
                                "the TOML gives no [model] name, whose torchtitan default 'llama3' (job_config.py Model.name) "
                                "builds the llama3 code: set [model] name = \"qwen3\" for torchtitan to build the model priced"]


def test_a_name_the_stack_does_not_ship_is_noted(tmp_path):
    """An experiment's name at @e347b1e5e, and llama4 at release/0.3 (no such package there)."""
    cfg = load_trainer_config(_toml(tmp_path, "simple_fsdp.llama3"), model="llama3-8b", gpus=8)
    assert _code_lines(cfg) == ["model code: [model] name 'simple_fsdp.llama3' is no model package of torchtitan @e347b1e5e "
                                "(an experiment or a TrainSpec registered outside torchtitan): the start-up rules take "
                                "llama3-8b's code llama3 (model_type 'llama', stack_db torchtitan runs.model_codes)"]
    cfg = load_trainer_config(_toml(tmp_path, "llama4"), model="llama4-scout", gpus=8, stack="torchtitan-0.3")
    assert _code_lines(cfg)[0].startswith("model code: [model] name 'llama4' is no model package of torchtitan release/0.3 "
                                          "@4f9e9a47d")


def test_the_command_line_stack_chooses_the_table(tmp_path, cli):
    """A TOML priced on --stack megatron: torchtitan's names mean nothing there (no line, no check); explain
    shows the line of the stack it prices (torchtitan-0.3 here)."""
    cfg = load_trainer_config(_toml(tmp_path, "llama3"), model="qwen3-30b-a3b", gpus=8, stack="megatron")
    assert _code_lines(cfg) == []
    r = cli("explain", _toml(tmp_path, "qwen3"), "--model", "qwen3-30b-a3b", "--gpus", "8", "--stack", "torchtitan-0.3",
            "--ep", "8")
    assert "model code qwen3: [model] name 'qwen3', the code stack_db torchtitan-0.3 runs.model_codes" in r.stderr, r.stderr
