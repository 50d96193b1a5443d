"""The Megatron-LM reader against Megatron-LM's own argparse parser (issue argparse).

tests/data/megatron_argparse_cases.json is scripts/argparse_rule_check.py's record (Megatron-LM @d98e8a64's
definitions, read from arguments.py and the ArgumentGroupFactory dataclasses by AST; argparse run on each case): for
each flag of megatron_argparse.DEFINITIONS (the flags the reader prices and every other whose value argparse can
refuse, 770 in all), a valid value, a wrong-typed value, a value outside the choices, a value given to a
store_true flag, a missing value, the flag misspelt, each on top of a base argument file that reads. Each case's
reader verdict is checked here, and every case argparse refuses is refused by the reader with argparse's reason
(planner/trainers/megatron_argparse.py): a misspelt (unknown) flag, argparse's "unrecognized arguments", as an
unrecognized argument with the nearest defined flag as the hint (before 2026-12-07 read and listed as unknown to the
planner, the one gap left). The record also holds every option string Megatron's parser defines (flag_names) and each
entry script's extra_args_provider flags (entry_scripts), which megatron_argparse.FLAG_NAMES / ENTRY_SCRIPTS are."""

import json
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.trainers import megatron
from planner.trainers import megatron_argparse
from planner.trainers.megatron_argparse import DEFINITIONS, ENTRY_FLAGS, ENTRY_SCRIPTS, FLAG_NAMES

FIXTURE = Path(__file__).parent / "data" / "megatron_argparse_cases.json"
DATA = json.loads(FIXTURE.read_text())
CASES = DATA["cases"]
REASONS = ("invalid int value", "invalid float value", "invalid choice", "ignored explicit argument", "expected ")


def _read(words):
    return megatron.read(Path("case.args"), text="\n".join(DATA["base"] + words) + "\n", gpus=8, hardware="h100-sxm")


def test_the_record_and_the_table_agree():
    assert DATA["commit"] == "d98e8a64"
    assert DATA["summary"]["cases"] == len(CASES) == 2938
    # the table the reader checks against is the definitions the record was made with
    assert set(DEFINITIONS) == set(DATA["definitions"])
    assert {f: d[4] for f, d in DEFINITIONS.items()} == DATA["definitions"]
    # every option string of Megatron's parser, and each entry script's own flags beyond them
    assert sorted(FLAG_NAMES) == DATA["flag_names"] and DATA["flags_defined"] == len(FLAG_NAMES) == 878
    assert set(ENTRY_SCRIPTS) == set(DATA["entry_scripts"])
    for script, e in DATA["entry_scripts"].items():
        ignore, key, source = ENTRY_SCRIPTS[script]
        assert (ignore, source) == (e["ignore_unknown"], e["source"])
        assert set(ENTRY_FLAGS[key]) == set(e["flags"]) - FLAG_NAMES
    # argparse's verdict is what the case predicts: every valid value parses, every bad one is refused
    for c in CASES:
        assert c["argparse"] == ("parsed" if c["case"] == "valid" else "refused"), c


def test_no_gap_left():
    # before 2026-12-07 the 827 misspelt flags were the gap (read, listed as unknown to the planner)
    assert DATA["summary"]["gaps"] == 0
    assert not [c for c in CASES if c["argparse"] == "refused" and c["reader"] == "read"]
    misspelt = [c for c in CASES if c["case"] == "misspelt"]
    assert len(misspelt) == len(DEFINITIONS)
    assert all(c["reader"] == "refused" and "unrecognized arguments" in c["argparse_message"] for c in misspelt)


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(c["words"]))
def test_reader_verdict(case):
    if case["reader"] == "read":
        _read(case["words"])
        return
    with pytest.raises(PlannerError) as e:
        _read(case["words"])
    assert e.value.exit_code == 2
    if "reader_message" in case:  # a value argparse parses, refused by the reader for its own reason
        assert str(e.value).split(": ", 1)[-1][:200] == case["reader_message"]
    if case["case"] == "misspelt":  # argparse's "unrecognized arguments", the flag named and the one meant hinted
        assert str(e.value).startswith(f"case.args: {case['words'][0]}: unrecognized argument (")
        assert e.value.hint.startswith(f"did you mean {case['flag']}?")
        return
    if case["argparse"] == "refused":
        # argparse's reason, the flag and the file named; the valid values in the hint
        reason = case["argparse_message"].split(": ", 1)[1]
        assert str(e.value).startswith("case.args: " + case["flag"] + ": ")
        assert reason.split(":")[0] in str(e.value)
        assert "valid: " in e.value.hint


def test_an_unknown_tokenizer_name_is_refused_with_megatrons_choices():
    # the known gap of the brief: before, read as a tokenizer whose files the planner does not read
    with pytest.raises(PlannerError, match=r"case.args: --tokenizer-type: invalid choice: 'Gpt2Tokenizer'") as e:
        _read(["--tokenizer-type", "Gpt2Tokenizer"])
    assert "GPT2BPETokenizer" in e.value.hint and "NullTokenizer" in e.value.hint
    assert "training_config.py TokenizerConfig.tokenizer_type" in e.value.hint


def test_hand_derived_refusals():
    with pytest.raises(PlannerError, match=r"--bf16: ignored explicit argument '1'"):
        _read(["--bf16=1"])
    with pytest.raises(PlannerError, match=r"--micro-batch-size: invalid int value: '1.5'"):
        _read(["--micro-batch-size", "1.5"])
    with pytest.raises(PlannerError, match=r"--rampup-batch-size: expected 3 arguments, given 2"):
        _read(["--rampup-batch-size", "16", "16"])
    with pytest.raises(PlannerError, match=r"--recompute-granularity: invalid choice: 'Full'") as e:
        _read(["--recompute-granularity", "Full"])
    assert e.value.hint.startswith("valid: full, selective (")
    with pytest.raises(PlannerError, match=r"--moe-aux-loss-coeff: invalid float value: 'x'"):
        _read(["--moe-aux-loss-coeff", "1e-2", "x"])  # nargs '+': each word converted


def test_values_argparse_takes_still_read():
    job = _read(["--micro-batch-size", "2", "--global-batch-size", "16"]).job
    assert (job["micro_batch"], job["global_batch"]) == (2, 16)
    _read(["--tokenizer-type", "NullTokenizer", "--vocab-size", "32000"])


def test_a_value_from_an_unread_substitution_is_left_to_the_substitution_rules():
    # `$TP` unset: the reader's substitution rule refuses naming it, not argparse's type (megatron_argparse.UNEXPANDED)
    with pytest.raises(PlannerError) as e:
        _read(["--tensor-model-parallel-size", "$TP"])
    assert "invalid int value" not in str(e.value)


def test_a_list_flag_of_nargs_star_may_stand_alone(monkeypatch):
    # argparse takes `--flag` of nargs '*' alone ([]); nargs '+' needs a word ("expected at least one argument").
    # No flag of the table is nargs '*' at @d98e8a64 (--data-path is, a str without choices: not in it), so one is
    # put in for the rule's sake
    from planner.trainers import megatron_argparse
    monkeypatch.setitem(megatron_argparse.DEFINITIONS, "--star", ("int", None, None, "*", "a test"))
    megatron_argparse.check({"--star": True, "--recompute-modules": ["core_attn"]}, "x: ")
    with pytest.raises(PlannerError, match=r"x: --star: invalid int value: 'a'"):
        megatron_argparse.check({"--star": "1 a"}, "x: ")
    with pytest.raises(PlannerError, match=r"x: --cp-comm-type: expected at least one argument"):
        megatron_argparse.check({"--cp-comm-type": True}, "x: ")


def test_an_argument_files_quoted_list_is_read_as_the_ci_hands_it_on():
    # Megatron's CI argument files quote a YAML list as one value ("2 2"): two words on the command line, as the
    # reader reads them (words_of); the two CI rows that hold it still read (before the fix here they were refused)
    rows = sorted((Path(__file__).parent / "data" / "megatron_ci" / "args").glob("*tp1_pp2_cp4_a2a_p2p_nondeterministic*"))
    assert len(rows) == 2
    for p in rows:
        assert '--hierarchical-context-parallel-sizes "2 2"' in p.read_text()
        megatron.read(p, gpus=8, hardware="h100-sxm")
    with pytest.raises(PlannerError, match=r"--hierarchical-context-parallel-sizes: invalid int value: 'a'"):
        _read(["--hierarchical-context-parallel-sizes", '"2 a"'])
