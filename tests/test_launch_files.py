"""The one lookup of a file a launch script names (planner/trainers/launch_files.py), read by the Megatron-DeepSpeed
reader (--deepspeed_config) and the Megatron-Bridge reader (--config-file): the script's own heredoc for the name
(megatron.command_words collects the top-level `cat <<EOT > F` bodies, expanded with the script's variables), else
the file resolved relative to the script's folder; a variable the script does not set, or no such file, is refused
(exit 2) naming the field, the name and where it looked. Each case is a hand-made script; the expected values are
read off the script text (line numbers 1-based, as the readers print them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.trainers.launch_files import Naming, launch_file
from planner.trainers.megatron import command_words

NAMING = Naming(noun="script", field="--cfg", in_heredoc="the file {name} written at line {line}",
                unset_hint="set them", missing_hint="put it beside the script", read_hint="give the file")
LAUNCH = "torchrun --nproc_per_node=8 pretrain_gpt.py --cfg {name}\n"
MDS = Path(__file__).parent / "data" / "trainer_configs" / "run_deepspeed_example.sh"


def _heredocs(script: Path) -> dict:
    heredocs: dict = {}
    command_words(script.read_text(), f"{script}: ", [], heredocs)
    return heredocs


def _script(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "launch.sh"
    p.write_text(text)
    return p


def test_heredoc_found_and_expanded(tmp_path):
    """CONF=ds.json and STAGE=2 set on lines 1-2; `cat <<EOT > $CONF` on line 3 writes ds.json with the body
    '{"stage": $STAGE}' expanded by bash to '{"stage": 2}'. Shown as '<script> (line 3: ds.json)'; the heredoc wins
    over a file of the same name beside the script (bash writes the file before the launch reads it)."""
    p = _script(tmp_path, 'CONF=ds.json\nSTAGE=2\ncat <<EOT > $CONF\n{"stage": $STAGE}\nEOT\n' + LAUNCH.format(name="$CONF"))
    (tmp_path / "ds.json").write_text('{"stage": 3}')
    assert launch_file("ds.json", p, _heredocs(p), "w: ", NAMING) == (f"{p} (line 3: ds.json)", '{"stage": 2}')


def test_quoted_delimiter_keeps_the_body_as_written(tmp_path):
    """`cat > c.yaml <<'EOF'` (line 1): a quoted delimiter, so bash does not expand the body: '$X' stays, and the
    unset $X is no refusal."""
    p = _script(tmp_path, "cat > c.yaml <<'EOF'\nkey: $X\nEOF\n" + LAUNCH.format(name="c.yaml"))
    assert launch_file("c.yaml", p, _heredocs(p), "w: ", NAMING) == (f"{p} (line 1: c.yaml)", "key: $X")


def test_heredoc_with_an_unset_variable_refused(tmp_path):
    """The body uses $UNSET and $ALSO, which the script does not set: refused naming the file, its line (2) and both
    variables, sorted."""
    p = _script(tmp_path, "A=1\ncat <<EOT > ds.json\n{$UNSET: $A, $ALSO: 1}\nEOT\n" + LAUNCH.format(name="ds.json"))
    with pytest.raises(PlannerError) as e:
        launch_file("ds.json", p, _heredocs(p), "w: ", NAMING)
    assert e.value.message == "w: the file ds.json written at line 2 uses $ALSO, $UNSET, which the script does not set"
    assert e.value.hint == "set them"


def test_file_beside_the_script(tmp_path):
    """No heredoc: 'conf/c.yaml' resolved against the script's folder (tmp/run/conf/c.yaml), not the working
    directory; an absolute name is taken as given."""
    run = tmp_path / "run"
    p = _script(run, LAUNCH.format(name="conf/c.yaml"))
    (run / "conf").mkdir()
    (run / "conf" / "c.yaml").write_text("a: 1\n")
    assert launch_file("conf/c.yaml", p, _heredocs(p), "w: ", NAMING) == (str(run / "conf" / "c.yaml"), "a: 1\n")
    other = tmp_path / "elsewhere.yaml"
    other.write_text("b: 2\n")
    assert launch_file(str(other), p, {}, "w: ", NAMING) == (str(other), "b: 2\n")


def test_missing_file_names_field_name_and_path(tmp_path):
    """No heredoc and no file: the refusal names the field (--cfg), the name and the path it resolved (the script's
    folder / name); says_no_heredoc adds that the script writes none."""
    p = _script(tmp_path / "run", LAUNCH.format(name="nope.json"))
    want = f"w: --cfg nope.json: no such file ({tmp_path / 'run' / 'nope.json'}; resolved relative to the script)"
    with pytest.raises(PlannerError) as e:
        launch_file("nope.json", p, {}, "w: ", NAMING)
    assert (e.value.message, e.value.hint) == (want, "put it beside the script")
    with pytest.raises(PlannerError) as e:
        launch_file("nope.json", p, {}, "w: ", NAMING._replace(says_no_heredoc=True))
    assert e.value.message == want + " and no `cat <<EOT > nope.json` in the script"


def test_unset_variable_in_the_name_refused(tmp_path):
    """`--cfg $DIR/c.json` with DIR never set: the name still holds '$'; no file is guessed."""
    p = _script(tmp_path, LAUNCH.format(name="$DIR/c.json"))
    with pytest.raises(PlannerError) as e:
        launch_file("$DIR/c.json", p, {}, "w: ", NAMING)
    assert (e.value.message, e.value.hint) == ("w: --cfg $DIR/c.json: the script does not set its variables",
                                               "set them at the script's top level, or write the file's name")


def test_missing_file_exit_2_in_both_readers(cli, tmp_path):
    """Through the CLI, both readers that share the lookup: exit 2, `error:` naming the field and the file, a hint,
    no traceback. Megatron-Bridge: pretrain_quantized_llama3_8b.py --config-file missing.yaml beside the launch.
    Megatron-DeepSpeed: the example script with its `cat <<EOT > $DS_CONFIG` heredoc (lines 22-39) cut out, so
    --deepspeed_config ds_config.json names a file that is not beside the script."""
    bridge = _script(tmp_path / "bridge", "torchrun --nproc_per_node=8 examples/quantization/"
                     "pretrain_quantized_llama3_8b.py --config-file missing.yaml\n")
    text = MDS.read_text()
    start = text.index("cat <<EOT")
    end = text.index("EOT\n", start + 10) + 4
    mds = _script(tmp_path / "mds", text[:start] + text[end:])
    for p, field, name, noun in ((bridge, "--config-file", "missing.yaml", "launch"),
                                 (mds, "--deepspeed_config", "ds_config.json", "script")):
        r = cli("explain", p, "--gpus", "8", "--hardware", "h100-sxm")
        assert r.exit_code == 2, r.stdout + r.stderr
        assert f"{field} {name}: no such file ({p.parent / name}; resolved relative to the {noun})" in r.stderr
        assert "error:" in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr
