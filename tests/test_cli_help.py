"""Issue 24, "rough edges a new user hit": every command's --help reads in an 80-column
terminal, and one vocabulary across commands (`planner pipeline --pp`)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from planner.cli import app

from conftest import assert_one_error


def _commands(cmd, path=()):
    """(path, click command) of the root, every group and every command under it."""
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, path + (name,))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_every_command_is_listed():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"", "fit", "explain", "check", "budget", "export", "validate", "collective", "pipeline", "calibrate",
            "calibrate nccl", "calibrate gemm", "calibrate run", "models", "hardware", "schema", "stacks"} <= names


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "planner" for p, _ in COMMANDS])
def test_help_at_80_columns_shows_every_option_in_full(path, cmd):
    """COLUMNS=80: no line is wider than 80, every (visible) option name appears whole as a
    word of the help, none is cut with an ellipsis, and no flag shows a `<bool>` placeholder."""
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert "…" not in text and "<bool>" not in text
    words = set(text.replace(",", " ").replace("/", " ").split())
    for p in cmd.params:
        if getattr(p, "hidden", False) or p.param_type_name != "option":
            continue
        for name in [*p.opts, *p.secondary_opts]:
            assert name in words, (path, name)
    for name, sub in getattr(cmd, "commands", {}).items():  # a group lists every command with its description
        if not sub.hidden:
            assert any(ln.split()[:1] == [name] for ln in text.splitlines()), (path, name)


def test_fit_help_names_the_long_options_that_were_cut():
    text = CliRunner().invoke(app, ["fit", "--help"], env={"COLUMNS": "80"}).stdout
    for name in ("--max-micro-batch", "--global-batch-tokens", "--account-for-embedding-in-pipeline-split",
                 "--moe-capacity-factor", "--ep-comm-overlap / --no-ep-comm-overlap"):
        assert name in text


def test_pipeline_takes_pp_as_fit_and_explain_do(cli):
    """`--pp` is the pipeline stages in every command; `--stages` / `-p` still work (hidden),
    and `-m` no longer means micro-batches (it is the model elsewhere)."""
    new = cli("pipeline", "--pp", 4, "--microbatches", 8)
    assert new.exit_code == 0, new.stderr
    assert "stage 3:" in new.stdout
    assert cli("pipeline", "--stages", 4, "--microbatches", 8).stdout == new.stdout
    assert cli("pipeline", "-p", 4, "--microbatches", 8).stdout == new.stdout
    help_text = cli("pipeline", "--help").stdout
    assert "--pp" in help_text and "--stages" not in help_text and "-m," not in help_text
    assert_one_error(cli("pipeline", "-m", 8, "--pp", 4), "no such option")
    assert_one_error(cli("pipeline", "--microbatches", 8), "--pp")
    assert_one_error(cli("pipeline", "--pp", 4, "--stages", 2, "--microbatches", 8), "disagree")
