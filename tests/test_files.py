"""planner/files.py: reading the user's files (regular files only, size-capped), each refusal with a hint."""

from __future__ import annotations

import pytest

from planner import files
from planner.errors import PlannerError


def test_a_refused_read_gives_a_hint_where_the_caller_gives_none(tmp_path):
    """A path that names nothing, or a folder, read by a caller that passes no hint of its own (sniff_format reading a
    job file or trainer config, planner/trainers/__init__.py) still gives `hint:` (README: exit 2 is `error: ... /
    hint: ...`). Found by the cli-options fuzz kind, seed 69: `explain --model llama3-8b --gpus 8 -- --tp` printed
    `error: --tp: cannot read (no such file)` and no hint. A caller's own hint still wins."""
    with pytest.raises(PlannerError, match="no such file") as e:
        files.read_text(tmp_path / "absent.yaml")
    assert e.value.hint == files.MISSING_HINT
    with pytest.raises(PlannerError, match="is a folder, not a file") as e:
        files.read_bytes(tmp_path)
    assert e.value.hint == "give the path of a file in it, not the folder"
    with pytest.raises(PlannerError) as e:
        files.read_bytes(tmp_path / "absent.yaml", "give a job YAML")
    assert e.value.hint == "give a job YAML"


def test_a_missing_job_file_exits_2_with_error_and_hint(cli, tmp_path):
    """The command line of the fuzz find: the stray argument after `--` is read as the job file."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--", "--tp")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == ["error: --tp: cannot read (no such file)", f"hint: {files.MISSING_HINT}"]
    r = cli("check", str(tmp_path), "--format", "json")
    assert r.exit_code == 2 and f"error: {tmp_path}: is a folder, not a file\nhint: give the path" in r.stderr
