"""`--format json` goes through render.common.json_text (issue 22): json.dumps(indent=2) runs json's pure-Python
encoder (JSONEncoder.iterencode takes the C one only where indent is None), about a third of `fit --top 2000
--format json`'s CPU; json_text has the C encoder write the containers of plain leaves, one call each, and walks the
rest. The text must stay json.dumps(data, indent=2)'s, byte for byte, and refuse what json refuses, as json does."""

import collections
import enum
import json
import math

import pytest

import planner.render.common as rc


def test_the_fast_path_is_taken():
    """Not vacuous: where CPython has its C encoder (json.encoder.c_make_encoder), json_text writes the containers of
    plain leaves through it rather than handing the value to json.dumps: a document of one plain list at depth 1 is
    written by the depth-0 encoder, whose item separator is `,` + line break + two spaces."""
    assert rc._C_ENCODER is not None
    w = rc._Indent2()
    w.write({"a": [1, "x"]}, 0)
    assert len(w.levels) == 3  # (the list at depth 1: encoders for depths 0 to 2 made)
    assert "".join(w.parts) == '{\n  "a": [\n    1,\n    "x"\n  ]\n}'


class _StrEnum(str, enum.Enum):
    a = 'qu"ote \u00e9'


class _IntEnum(enum.IntEnum):
    one = 1


class _Dict(dict):
    pass


_Pair = collections.namedtuple("_Pair", "a b")

AWKWARD = {
    "unicode": "TP 8 \u00d7 CP 1 \u2014 \u00e9 \U0001f600 \udfff",
    "floats": [1e-7, 1e16, -0.0, 0.0, 0.1, 1.5e300, 5e-324, 1e22, 123456789.123456789, -2.5e-308],
    "ints": [2**53, 2**53 + 1, -(2**70), 0, -1, True, False, None],
    "empties": [[], {}, [[]], [{}], {"a": {}}, {"b": []}, ()],
    "quotes": 'say "hi" \\ back\\slash / slash',
    "controls": "\x00\x01\x1f\x7f\b\f\n\r\t end",
    "nested": {"a": [1, [2, [3, [4, {"deep": {"deeper": [None]}}]]]], "b": {"c": {"d": {}}}},
    "mixed": [1, "two", 3.0, [4], {"five": 5}, None, [], {}],
    "keys": {3: "int key", 1.5: "float key", True: "bool key", None: "none key", -0.0: "negative zero"},
    "subclasses": [_StrEnum.a, _IntEnum.one, _Pair(1, "b"), _Dict(x=1), _Dict(), (1, 2), {"e": _StrEnum.a}],
    "mixed keys": {"leaf": 1, 7: [1, 2]},
    "": "",
}


@pytest.mark.parametrize("value", [
    AWKWARD,
    [AWKWARD, AWKWARD],
    [],
    {},
    [[], {}],
    (1, 2),
    "top-level \u00e9",
    1e-7,
    -0.0,
    2**64,
    None,
    [float("nan"), math.inf, -math.inf, {"k": math.inf}, {"nan": [float("nan")]}],
    {math.inf: 1, "x": [1]},
])
def test_the_text_is_json_dumps_indent_2(value):
    """Strings json escapes (a quote, a backslash, control characters, DEL, non-ASCII, an astral-plane emoji and a lone
    surrogate as \\u escapes), floats whose repr changes form (1e-07, 1e+16, -0.0, 5e-324, 1e+22), ints past 2**53,
    nested empties (`[]` / `{}` on one line), dict keys of every kind json takes (int, float, bool, None: written as
    strings), subclasses (a str enum, an IntEnum, a namedtuple, a dict subclass), the non-finite floats json writes as
    NaN / Infinity, a top-level leaf: json_text's text equals json.dumps(value, indent=2) byte for byte."""
    assert rc.json_text(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("value, error", [
    ({"a": [1, object()]}, TypeError),
    ({"a": {(1, 2): 3}}, TypeError),
    ({"a": [{(1,): 3}, 1]}, TypeError),
    ([1, {"set": {1}}], TypeError),
])
def test_what_json_refuses_it_refuses(value, error):
    """A value json cannot write (an object, a set, a tuple key) raises what json.dumps raises, with its message."""
    with pytest.raises(error) as fast:
        rc.json_text(value)
    with pytest.raises(error) as slow:
        json.dumps(value, indent=2)
    assert str(fast.value) == str(slow.value)


def test_a_circular_reference_is_refused_as_json_does():
    """A list inside itself: json's ValueError("Circular reference detected"), not a RecursionError."""
    loop: list = [1]
    loop.append({"again": loop})
    with pytest.raises(ValueError, match="Circular reference detected"):
        rc.json_text([loop])


def test_a_value_shared_twice_is_not_circular():
    """The same dict at two places (not inside itself) is written twice, as json.dumps writes it."""
    shared = {"a": [1, 2], "b": {"c": 3}}
    value = [shared, {"again": shared}, [shared, shared]]
    assert rc.json_text(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("args", [
    ("fit", "--model", "llama3-8b", "--gpus", "64", "--top", "20"),
    ("explain", "--model", "deepseek-v3", "--gpus", "2048", "--hardware", "h800-sxm", "--tp", "1", "--pp", "16",
     "--ep", "64", "--sharding", "zero1"),
])
def test_the_commands_json_is_json_dumps(cli, monkeypatch, args):
    """A fit's rows and an MoE explain, --format json: the same text as with json.dumps(indent=2) itself (emit
    patched to it), and the fast path did write it (the C encoder was called)."""
    calls = []
    real = rc._C_ENCODER

    def counting(*a):
        enc = real(*a)
        return lambda o, level: calls.append(1) or enc(o, level)

    monkeypatch.setattr(rc, "_C_ENCODER", counting)
    fast = cli(*args, "--format", "json")
    assert fast.exit_code == 0, fast.stderr
    assert len(calls) > 10
    monkeypatch.setattr(rc, "json_text", lambda data: json.dumps(data, indent=2))
    slow = cli(*args, "--format", "json")
    assert slow.exit_code == 0, slow.stderr
    assert fast.stdout == slow.stdout
    assert len(fast.stdout) > 1000  # (a whole result, not an error line)
    json.loads(fast.stdout)
