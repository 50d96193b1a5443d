"""A launch script whose launch line's `\\` continuation a blank or commented line breaks (issue 24, robustness):
bash ends the torchrun command at the break and runs the next line as a command of its own, whose first word is a
flag ("--micro-batch-size: command not found", after the training ran without those flags). The Megatron readers
(planner/trainers/megatron.py command_words) refuse such a line, exit 2, naming it; before 2026-12-07 the flags after
the break were passed over silently (found by tests/ignored_keys.py on the Bridge reader, fuzz seed 189, and seen on
NVIDIA's train_llama3_8b_h100_fp8.sh). Case patterns (`--tp) TP=$2 ;;`) and every shipped script read as before."""

from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.trainers import load_trainer_config

ROOT = Path(__file__).resolve().parent.parent
FP8 = ROOT / "tests" / "data" / "trainer_configs" / "train_llama3_8b_h100_fp8.sh"
LAUNCH = "    ${MODEL_ARGS[@]} \\\n    ${TRAINING_ARGS[@]} \\\n"


def _variant(tmp_path, new: str) -> Path:
    text = FP8.read_text()
    assert text.count(LAUNCH) == 1
    p = tmp_path / "run.sh"
    p.write_text(text.replace(LAUNCH, new))
    return p


def test_the_script_as_written_reads_its_training_flags():
    job = load_trainer_config(FP8).job
    assert (job["global_batch"], job["micro_batch"]) == (128, 1)  # TRAINING_ARGS, after MODEL_ARGS


@pytest.mark.parametrize("brk", ["\n", "    # the training arguments\n"])
def test_a_broken_continuation_is_refused_naming_the_line(tmp_path, brk):
    # line 189 ends with `\`, the break (a blank line, or a comment, which also ends the command) follows, and
    # line 191 `${TRAINING_ARGS[@]} \` is a command of its own whose first word is --micro-batch-size
    p = _variant(tmp_path, "    ${MODEL_ARGS[@]} \\\n" + brk + "    ${TRAINING_ARGS[@]} \\\n")
    with pytest.raises(PlannerError, match=r"line 191: --micro-batch-size starts a command after the launch line") as e:
        load_trainer_config(p)
    assert "each line but the last ending with" in e.value.hint


def test_a_case_pattern_after_the_launch_line_is_not_a_flag_command(tmp_path):
    p = _variant(tmp_path, LAUNCH)
    p.write_text(p.read_text() + 'case "$1" in\n  --dry-run) echo dry ;;\nesac\n')
    assert load_trainer_config(p).job["global_batch"] == 128
