"""Issue 24: the second audit's reproducers on the inputs added since issue 12 (trainer
configs, MoE configs, validate's records, several files to `check`), one test each.

The contract is the README's ("Robustness"): bad input exits 2 with `error: ...` naming the
file (or option) and the field, `hint: ...`, and no traceback; nothing is guessed silently
(what the planner infers is listed as assumed); no input makes it hang (the work is bounded).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import assert_one_error

DATA = Path(__file__).parent / "data"
TRAINERS = DATA / "trainer_configs"
TOML = TRAINERS / "llama3_8b.toml"
SH = TRAINERS / "train_llama3_8b.sh"
DS = TRAINERS / "ds_config_zero2.json"
INT64_OVER = "9223372036854775808"  # 2**63


def _variant(tmp_path, src: Path, old: str, new: str, name: str | None = None) -> Path:
    text = src.read_text()
    assert old in text, old
    p = tmp_path / (name or src.name)
    p.write_text(text.replace(old, new), encoding="utf-8")
    return p


def assert_error(r, *needles):
    """Exit 2, an `error:` line (after any note:/warning: lines a trainer config prints) that
    names each needle, a hint, and no traceback."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert errors, r.stderr
    for n in needles:
        assert n in errors[0], (n, errors[0])
    assert "hint: " in r.stderr


# ------------------------------------------------------------ integers beyond int64
@pytest.mark.parametrize("option", ["--ranks", "--stride", "--job-gpus"])
def test_collective_counts_beyond_int64_exit_2(cli, option):
    args = ["collective", "--op", "all-reduce", "--size", "8MiB", "--ranks", "8"]
    args += [option, INT64_OVER]
    assert_one_error(cli(*args), option, "64-bit")


@pytest.mark.parametrize("option", ["--ranks", "--stride", "--job-gpus"])
def test_collective_counts_are_counts(cli, option):
    """Within int64 but beyond a count (2**31 - 1), or zero: refused like every other count."""
    for v in ("4611686018427387904", "0"):
        r = cli("collective", "--op", "all-reduce", "--size", "8MiB", "--ranks", "8", option, v)
        assert_one_error(r, option)


def test_explain_ep_beyond_int64_exits_2(cli):
    r = cli("explain", "--model", "mixtral-8x7b", "--gpus", "24", "--ep", "99999999999999999999")
    assert_one_error(r, "--ep", "64-bit")
    assert_one_error(cli("explain", "--model", "mixtral-8x7b", "--gpus", "24", "--ep", "9999999999"), "ep", "2147483647")


def test_fit_max_ep_0_exits_2_like_the_other_max_options(cli):
    """It exited 1 ("tp*cp*pp does not divide the GPU count"), a wrong reason."""
    for opt in ("--max-ep", "--max-tp"):
        assert_one_error(cli("fit", "--model", "mixtral-8x7b", "--gpus", "8", opt, "0"), opt)
    assert_one_error(cli("fit", "--model", "mixtral-8x7b", "--gpus", "8", "--max-ep", INT64_OVER), "--max-ep")


# ------------------------------------------------------------ torchtitan TOML
def _toml_sub(tmp_path, old, new):
    return _variant(tmp_path, TOML, old, new)


TOML_CASES = [  # (id, old, new, what the error names)
    ("training-5", "[job]", "training = 5\n[job]", "[training] must be a table"),
    ("flavor-list", 'flavor = "8B"', 'flavor = ["8B"]', "[model] flavor"),
    ("schedule-list", "pipeline_parallel_degree = 1",
     'pipeline_parallel_degree = 2\npipeline_parallel_schedule = ["1F1B"]', "pipeline_parallel_schedule"),
    ("converters-5", 'flavor = "8B"', 'flavor = "8B"\nconverters = 5', "[model] converters"),
    ("parallelism-scalar", "[job]", "parallelism = 3\n[job]", "[parallelism] must be a table"),
    ("layers-per-stage-0", "pipeline_parallel_degree = 1",
     "pipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 0", "pipeline_parallel_layers_per_stage = 0"),
    ("microbatch-0", "pipeline_parallel_degree = 1",
     "pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 0", "pipeline_parallel_microbatch_size = 0"),
    ("local-batch-0", "local_batch_size = 1", "local_batch_size = 0", "local_batch_size = 0"),
    ("global-batch-0", "local_batch_size = 1", "local_batch_size = 1\nglobal_batch_size = 0", "global_batch_size = 0"),
    ("sac-superscript", 'selective_ac_option = "op"', 'selective_ac_option = "²"', "selective_ac_option '²'"),
    ("sac-5000-digits", 'selective_ac_option = "op"', 'selective_ac_option = "' + "9" * 5000 + '"', "selective_ac_option"),
    ("sac-5000-digit-int", 'selective_ac_option = "op"', "selective_ac_option = " + "9" * 5000, "invalid TOML"),
    ("components-5", "[job]", "[compile]\nenable = true\ncomponents = 5\n[job]", "[compile] components"),
    ("float8-scalar", "[float8]\n", "[float8_x]\n", "[float8] must be a table"),
    ("tp-int64", "tensor_parallel_degree = 1", "tensor_parallel_degree = 9223372036854775807", "tensor_parallel_degree"),
    ("ac-scalar", "[job]", "activation_checkpoint = 'full'\n[job]", "[activation_checkpoint] must be a table"),
]


@pytest.mark.parametrize("old,new,needle", [c[1:] for c in TOML_CASES], ids=[c[0] for c in TOML_CASES])
def test_torchtitan_wrong_types_sections_and_zeros_exit_2(cli, tmp_path, old, new, needle):
    if new == "[float8_x]\n":  # a scalar float8 next to the later layout's table
        p = _toml_sub(tmp_path, old, new)
        p.write_text("float8 = 3\n" + p.read_text())
    elif new.startswith(("training = 5", "parallelism = 3", "activation_checkpoint =")):
        section = new.split(" ")[0]
        p = _variant(tmp_path, TOML, f"[{section}]\n", f"[{section}_x]\n")  # the key replaces the section
        p.write_text(new.replace("[job]", "") + p.read_text())
    else:
        p = _toml_sub(tmp_path, old, new)
    r = cli("check", p, "--gpus", "8")
    assert_error(r, str(p), needle)
    assert len(r.stderr) < 2000  # a 5,000-digit value is not echoed
