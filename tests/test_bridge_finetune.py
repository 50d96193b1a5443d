"""Megatron-Bridge fine-tuning (issue 22): the planner prices pre-training, every weight trained, so a PEFT adapter
(LoRA: frozen base weights, no gradients or optimizer states for them) is refused naming the key, never priced as
a full fine-tuning; the Llama SFT and PEFT recipes (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
src/megatron/bridge/recipes/llama/llama3.py l. 1203-2760: _sft_common / _peft_common, recipes/common.py l. 135-339)
are refused by name with why."""

from __future__ import annotations

import pytest

from conftest import assert_one_error

RUN = "scripts/training/run_recipe.py"
H100 = ["--hardware", "h100-sxm"]


def _launch(tmp_path, recipe, *overrides):
    f = tmp_path / "launch.sh"
    f.write_text(f"torchrun --nproc_per_node 8 {RUN} --recipe {recipe} {' '.join(overrides)}\n")
    return f


@pytest.mark.parametrize("recipe,line,kind,base", [
    ("llama3_8b_peft_config", 2183, "a PEFT recipe", "llama3_8b_pretrain_config"),
    ("llama31_405b_peft_config", 2647, "a PEFT recipe", "llama31_405b_pretrain_config"),
    ("llama32_1b_sft_config", 1203, "a full fine-tuning recipe", "llama32_1b_pretrain_config"),
    ("llama3_70b_sft_config", 1629, "a full fine-tuning recipe", "llama3_70b_pretrain_config"),
])
def test_llama_finetuning_recipes_refused_with_why(cli, tmp_path, recipe, line, kind, base):
    """Each names the recipe, its line in llama3.py @dc805f5cf, what it builds, and hints the pre-training recipe of
    the same model."""
    r = cli("check", _launch(tmp_path, recipe), *H100)
    assert_one_error(r, f"--recipe {recipe}: not a recipe the planner transcribes", f"llama3.py l. {line}: {kind}",
                     f"hint: use --recipe {base}")


@pytest.mark.parametrize("override,key", [
    # the dict Bridge instantiates (omegaconf_utils.py _apply_overrides l. 461-471): LoRA with its rank
    ("'+peft={_target_:megatron.bridge.peft.lora.LoRA,dim:32}'", "peft="),
    ("++peft.dim=16", "peft.dim=16"),
])
def test_a_peft_override_is_refused_naming_the_key(cli, tmp_path, override, key):
    """ConfigContainer.peft (training/config.py @dc805f5cf l. 1412) set on a pre-training recipe: refused (exit 2)
    naming the key, not listed as not modelled and priced as full training."""
    r = cli("explain", _launch(tmp_path, "llama3_8b_pretrain_config", override), *H100)
    assert_one_error(r, key, "frozen base weights", "hint: drop peft")


def test_peft_null_is_no_adapter(cli, tmp_path):
    """peft=null is the pre-training recipes' own value (recipes/common.py _pretrain_common: no peft): read, nothing
    refused, the plan the recipe's."""
    a = cli("explain", _launch(tmp_path, "llama3_8b_pretrain_config", "peft=null"), *H100, "--format", "json", "-q")
    assert a.exit_code == 0, a.stderr
