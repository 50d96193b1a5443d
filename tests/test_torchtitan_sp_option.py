"""[parallelism] enable_sequence_parallel in a torchtitan TOML (issue 22, rule85 item 2; planner/trainers/torchtitan.py
[10], _sequence_parallel_option).

torchtitan main @e347b1e5e has no such option: its Parallelism dataclass (torchtitan/config/job_config.py l. 311-484)
has no enable_sequence_parallel field (git grep finds none in torchtitan/), its ConfigManager._dict_to_dataclass
(config/manager.py l. 160-171) raises ValueError 'Invalid field names' for a TOML key the dataclass lacks, and its TP
always applies SequenceParallel (models/llama3/infra/parallelize.py apply_tp; start-up rule TORCHTITAN_SP). So a main
TOML with the key, true or false, is refused (exit 2), as torchtitan refuses it.

torchtitan 0.3.0 (release/0.3 @4f9e9a47d, stack torchtitan-0.3, which leaves TORCHTITAN_SP out: runs.startup_rules_absent)
has it: torchtitan/config/configs.py l. 160 `enable_sequence_parallel: bool = True`. A TOML priced with --stack
torchtitan-0.3 reads false at tp > 1 as TP without SP (job field sequence_parallel false), the same job the command
line's --no-sequence-parallel makes, so the two price alike; at tp 1 the key has no effect (listed as ignored)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.trainers import load_trainer_config

from conftest import assert_one_error

BASE = Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml"


def _toml(tmp_path, tp: int, sp) -> Path:
    """llama3_8b.toml (FSDP over the leftover GPUs, seq 8192, local batch 1, selective op AC) at tensor_parallel_degree
    tp, with `enable_sequence_parallel = <sp>` (sp: a TOML literal; None: no key)."""
    text = BASE.read_text(encoding="utf-8").replace("tensor_parallel_degree = 1", f"tensor_parallel_degree = {tp}")
    assert f"tensor_parallel_degree = {tp}" in text
    if sp is not None:
        text = text.replace("[parallelism]\n", f"[parallelism]\nenable_sequence_parallel = {sp}\n")
        assert "enable_sequence_parallel" in text
    p = tmp_path / f"tp{tp}_{sp}.toml"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize("sp", ["false", "true"])
def test_main_refuses_the_key(cli, tmp_path, sp):
    """Stack torchtitan (the TOML's own): the key is one main's ConfigManager refuses, whatever its value."""
    r = cli("check", _toml(tmp_path, 2, sp), "--gpus", "64")
    assert_one_error(r, f"enable_sequence_parallel = {sp}", "has no such option", "'Invalid field names'",
                     "config/manager.py _dict_to_dataclass l. 160-171", "TORCHTITAN_SP", "--stack torchtitan-0.3")


def test_main_still_refuses_sp_off_by_flag(cli, tmp_path):
    """Without the key, TP without SP asked on the command line is TORCHTITAN_SP's refusal (the rule, unchanged)."""
    r = cli("check", _toml(tmp_path, 2, None), "--gpus", "64", "--no-sequence-parallel")
    assert_one_error(r, "TORCHTITAN_SP")


def test_03_reads_false_as_tp_without_sp(tmp_path):
    """--stack torchtitan-0.3: false at tp 2 -> sequence_parallel false, said as assumed with 0.3's source line;
    true -> sequence_parallel true."""
    off = load_trainer_config(_toml(tmp_path, 2, "false"), gpus=64, stack="torchtitan-0.3")
    assert off.job["sequence_parallel"] is False
    assert any(a.startswith("sequence_parallel=false: [parallelism] enable_sequence_parallel false (torchtitan "
                            "release/0.3 @4f9e9a47d configs.py l. 160") for a in off.assumed)
    assert not any("enable_sequence_parallel" in n for n in off.not_modelled)
    on = load_trainer_config(_toml(tmp_path, 2, "true"), gpus=64, stack="torchtitan-0.3")
    assert on.job["sequence_parallel"] is True


def test_03_key_at_tp_one_is_ignored(tmp_path):
    """tp 1: no TP, so no SP either way: listed as ignored, no job field."""
    cfg = load_trainer_config(_toml(tmp_path, 1, "false"), gpus=64, stack="torchtitan-0.3")
    assert "sequence_parallel" not in cfg.job
    assert "parallelism.enable_sequence_parallel=false (tensor_parallel_degree 1)" in cfg.ignored


def test_03_key_prices_as_the_flag(cli, tmp_path):
    """The key false prices the plan the command line's --no-sequence-parallel prices on the same file (one job field),
    and not the SP-on plan: without SP each TP rank holds the norms' inputs whole (Korthikanti et al. 2022 sec. 4.2.2),
    so the activations grow."""
    def mem(*args):
        r = cli("explain", *args, "--gpus", "64", "--stack", "torchtitan-0.3", "--format", "json")
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)["memory"]

    by_key = mem(_toml(tmp_path, 2, "false"))
    by_flag = mem(_toml(tmp_path, 2, None), "--no-sequence-parallel")
    sp_on = mem(_toml(tmp_path, 2, "true"))
    assert by_key["activations_bytes"] == by_flag["activations_bytes"]
    assert by_key["total_bytes"] == by_flag["total_bytes"]
    assert by_key["activations_bytes"] > sp_on["activations_bytes"]


def test_key_must_be_a_boolean(cli, tmp_path):
    r = cli("check", _toml(tmp_path, 2, '"no"'), "--gpus", "64", "--stack", "torchtitan-0.3")
    assert_one_error(r, "enable_sequence_parallel", "is not true or false")
