"""`--format yaml` goes through libyaml's emitter (render.common.yaml_text: yaml.CSafeDumper where PyYAML was built
with libyaml) instead of yaml.safe_dump's pure-Python one: the text must stay what safe_dump wrote, byte for byte."""

import pytest
import yaml

import planner.render.common as rc

LIBYAML = getattr(yaml, "CSafeDumper", None) is not None


def test_the_dumper_is_libyamls_where_pyyaml_has_it():
    """Not vacuous: where PyYAML has libyaml the fast path is the one taken (else the tests below compare the
    Python emitter with itself)."""
    assert rc._YAML_DUMPER is (yaml.CSafeDumper if LIBYAML else yaml.SafeDumper)


def test_the_text_is_safe_dumps_on_awkward_values():
    """Strings the two emitters could quote, wrap or escape differently (non-ASCII, long lines past the 80-column
    width, a word longer than it, line breaks, a leading space, YAML-looking scalars, a tab), floats at the ends
    of the range, an int key, nested empties: yaml_text equals yaml.safe_dump(sort_keys=False) byte for byte and
    loads back to the same value."""
    data = {
        "unicode": "TP 8 \u00d7 CP 1 \u2014 \u00e9",
        "long": " ".join(["word"] * 60),
        "longword": "x" * 200,
        "lines": "line1\nline2\n",
        "empty": "",
        "colon": "a: b",
        "floats": [1e-10, 1.5e300, 0.1, 3.0, -0.0, 12345678901234567890],
        "nested": {"none": None, "true": True, "quote": "it's", "hash": "#x", "yes": "yes", "number": "1.0",
                   "lead": " lead", "tab": "a\tb"},
        "lists": [[], {}, [1, [2, [3]]]],
        3: "int key",
    }
    text = rc.yaml_text(data)
    assert text == yaml.safe_dump(data, sort_keys=False)
    assert yaml.safe_load(text) == data


@pytest.mark.parametrize("args", [
    ("fit", "--model", "llama3-8b", "--gpus", "64", "--top", "5"),
    ("explain", "--model", "deepseek-v3", "--gpus", "2048", "--hardware", "h800-sxm", "--tp", "1", "--pp", "16",
     "--ep", "64", "--sharding", "zero1"),
])
def test_the_commands_yaml_is_safe_dumps(cli, monkeypatch, args):
    """A fit's rows and an MoE explain, --format yaml: the same text with the Python emitter (yaml.SafeDumper,
    what safe_dump uses) as with the default."""
    fast = cli(*args, "--format", "yaml")
    assert fast.exit_code == 0, fast.stderr
    monkeypatch.setattr(rc, "_YAML_DUMPER", yaml.SafeDumper)
    slow = cli(*args, "--format", "yaml")
    assert slow.exit_code == 0, slow.stderr
    assert fast.stdout == slow.stdout
    assert len(fast.stdout) > 1000  # (a whole result, not an error line)
