"""Every line a trainer config's reader lists (TrainerConfig.assumed, ignored, not_modelled, unmodelled) is a
report.Note record made with listed / listed_all / noted (planner/trainers/report.py), never a string built in the
reader: the JSON's `trainer_config` entries come from the record's settings, values, reason and source, and no
line is read back from its text (issue 22 code health). The walk below reads the readers' source (planner/trainers/
*.py but report.py, and the command line's notes in cli/core.py and field_options.py) and fails on a str literal or f-string handed to one of those lists (append / extend / insert /
+= / a list literal assigned to one), so that such a line cannot come back; and the corpus check holds each record's
JSON entries to what its own fields say."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from planner.trainers import TrainerConfig
from planner.trainers.report import Note, about, assumed_entries, config_report, listed, listed_all, noted

ROOT = Path(__file__).resolve().parents[1]
# the readers, and the command line's notes laid over a file (cli/core.py load_job's helpers, field_options.py
# command_line_spellings), whose lines join the reader's assumed list
# (there its lists of lines are named `lines` too; export.py's `lines` are a file's, not notes)
READERS = sorted(p for p in (ROOT / "planner" / "trainers").glob("*.py") if p.name != "report.py") + [
    ROOT / "planner" / "cli" / "core.py", ROOT / "planner" / "field_options.py"]
LISTS = {"assumed", "ignored", "not_modelled", "unmodelled", "split_unmodelled"}
COMMAND_LINE = {"core.py", "field_options.py"}
DATA = Path(__file__).parent / "data"


def _is_text(node) -> bool:
    """A str built in place: a literal, an f-string, a concatenation or `%` of them, a conditional of either."""
    if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return True
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.IfExp):
        return _is_text(node.body) or _is_text(node.orelse)
    return False


def _items(node):
    """The values a list operation adds: a list / tuple literal's elements, a comprehension's element."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return list(node.elts)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return [node.elt]
    return [node]


def _name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # assumed[:] = [...]
        return _name(node.value)
    return None


def text_lines(src: str, lists: frozenset = frozenset(LISTS)) -> list[tuple[int, str]]:
    """(line, source) of each str literal / f-string a reader hands to one of its lists (named in `lists`)."""
    out = []
    for node in ast.walk(ast.parse(src)):
        added = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _name(node.func.value) in lists:
            if node.func.attr in ("append", "insert") and node.args:
                added = [node.args[-1]]
            elif node.func.attr == "extend" and node.args:
                added = _items(node.args[0])
        elif isinstance(node, ast.AugAssign) and _name(node.target) in lists:
            added = _items(node.value)
        elif isinstance(node, ast.Assign) and any(_name(t) in lists for t in node.targets):
            added = _items(node.value) if isinstance(node.value, (ast.List, ast.ListComp, ast.GeneratorExp)) else []
        out += [(a.lineno, ast.get_source_segment(src, a)[:80]) for a in added if _is_text(a)]
    return sorted(out)


def test_the_walk_finds_a_line_built_as_text():
    """The check itself: each way a reader could add a line of text is caught, a record is not."""
    src = '''
assumed.append(f"tp={tp}: the file's")
cfg.ignored.append("x (why)")
not_modelled += [f"{k}={v} (why)" for k, v in xs]
unmodelled.extend(["a: b"])
assumed[:] = [a if a else "sequence_parallel=true: rule" for a in assumed]
ignored.append(("x" if c else "y") + " (why)")
assumed.append(listed("assumed", "tp", tp, f"the file's"))
ignored.append(noted("ignored", "x", "why"))
other.append("not a reader's list")
'''
    assert [n for n, _ in text_lines(src)] == [2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name)
def test_readers_write_records(path):
    """No reader module hands a line of text to the lists a TrainerConfig reports."""
    lists = frozenset(LISTS | ({"lines"} if path.name in COMMAND_LINE else set()))
    assert text_lines(path.read_text(), lists) == []


_TEXT_METHODS = {"startswith", "endswith"}


def text_filters(src: str, lists: frozenset = frozenset(LISTS)) -> list[int]:
    """The lines where a comprehension over one of the lists (named in `lists`) reads its lines' text: the element's
    startswith / endswith, a regular expression on it, `'...' in` it, or == / != against it (a record is matched by its
    fields: report.about, its message)."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            continue
        names = {g.target.id for g in node.generators if isinstance(g.target, ast.Name) and _name(g.iter) in lists}
        for part in [node.elt] + [c for g in node.generators for c in g.ifs]:
            for n in ast.walk(part):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                    if n.func.attr in _TEXT_METHODS and _name(n.func.value) in names and isinstance(n.func.value,
                                                                                                   ast.Name):
                        out.append(n.lineno)
                    elif _name(n.func.value) == "re" and any(isinstance(a, ast.Name) and a.id in names for a in n.args):
                        out.append(n.lineno)
                elif isinstance(n, ast.Compare):
                    sides = [n.left] + list(n.comparators)
                    text_op = any(isinstance(o, (ast.In, ast.NotIn, ast.Eq, ast.NotEq)) for o in n.ops)
                    if text_op and any(isinstance(x, ast.Name) and x.id in names for x in sides):
                        out.append(n.lineno)
    return sorted(set(out))


def test_the_filter_walk_finds_a_line_read_as_text():
    """The check itself: each way a comprehension over a reader's list can read a line's text is caught; matching a
    record's fields (about, its message), or the text of something else, is not."""
    src = '''
assumed[:] = [a for a in assumed if not a.startswith("tp=")]
cfg.assumed = [x for x in cfg.assumed if not re.match(r"vocab_size=", x)]
keep = any("block_causal" in a for a in cfg.assumed)
unmodelled[:] = [u for u in unmodelled if u != SP_OFF]
ok = [a.labeled(l) if a.endswith(")") else a for a in dcfg.not_modelled]
assumed[:] = [a for a in assumed if not about(a, "tp", 1)]
keep = any(isinstance(a, Note) and a.message == RULE for a in cfg.assumed)
words = [w for w in words if w.startswith("--")]
'''
    assert text_filters(src) == [2, 3, 4, 5, 6]


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name)
def test_readers_match_records_by_their_fields(path):
    """No reader drops or replaces a line of its lists by the line's text (a prefix, a pattern, a word in it, the
    whole line): a record says its settings, values and rule apart (report.about)."""
    assert text_filters(path.read_text()) == []


def test_about_reads_the_record():
    """report.about: the record's first setting, and its value as the record holds it (json_value's: True is not
    1); a line that is all rule has the setting None; a record read from another file keeps its fields; a str that is
    no record is never one."""
    sp = listed("assumed", "sequence_parallel", True, "parallelism.enable_sequence_parallel default true")
    assert about(sp, "sequence_parallel") and about(sp, "sequence_parallel", True)
    assert not about(sp, "sequence_parallel", False) and not about(sp, "tp")
    assert about(sp.labeled("ds.json"), "sequence_parallel", True)
    mbs = listed("assumed", "micro_batch", 1, "--micro-batch-size absent")
    assert about(mbs, "micro_batch", 1) and not about(mbs, "micro_batch", True)
    assert about(listed("assumed", "bytes_per_param", "megatron", "r", show="megatron (2+4+4+8 B)", spaced=True),
                 "bytes_per_param", "megatron")
    assert about(noted("assumed", None, "batch keys read at DeepSpeed's world size"), None)
    assert not about(noted("assumed", "moe_dispatcher", "allgather (no flag)"), None)
    two = listed_all("assumed", [("tp", 1), ("pp", 1), ("cp", 1)], "a DeepSpeed JSON has no model parallelism")
    assert about(two, "tp", 1) and not about(two, "pp")
    assert not about("sequence_parallel=true: rule", "sequence_parallel")


def test_record_text_and_entries():
    """An assumed record prints `head: rule`, its entries the values as given: `tokens=1.04858e+09` (6 significant
    figures shown) carries the job's exact 1,048,576,000; a spaced head prints `key value`; a line of rule alone has
    no setting; an unmodelled record may keep the `(reason)` form (ruled=False)."""
    t = listed("assumed", "tokens", 1048576000.0, "steps 1000 x global batch 256 x 4096", show="1.04858e+09")
    assert str(t) == "tokens=1.04858e+09: steps 1000 x global batch 256 x 4096"
    assert t.entries == (("tokens", 1048576000.0),) and t.message == "steps 1000 x global batch 256 x 4096"
    m = listed_all("assumed", [("--module", "llama3"), ("--config", "llama3_8b")], "rule", spaced=True)
    assert str(m) == "--module llama3 --config llama3_8b: rule" and m.entries == (("--module", "llama3"),
                                                                                  ("--config", "llama3_8b"))
    r = noted("assumed", None, "script lines 3, 4 inside if blocks were not evaluated")
    assert str(r) == "script lines 3, 4 inside if blocks were not evaluated" and r.entries == ((None, None),)
    u = listed("unmodelled", "--use-nccl-ub", True, "the same bytes", ruled=False)
    assert str(u) == "--use-nccl-ub=true (the same bytes)"
    lab = listed("assumed", "pipeline", {"pipe_partitioned": False}, "read, priced", source="ds.json")
    assert str(lab) == 'ds.json: pipeline={"pipe_partitioned":false}: read, priced' and lab.source == "ds.json"
    cfg = TrainerConfig(job={"tokens": 1048576000.0, "attention_backend": "flash"}, fmt="torchtitan", source="a.toml",
                        assumed=[t, noted("assumed", "attention_backend", "the start-up rules read its default"), lab],
                        unmodelled=[u])
    rep = config_report(cfg)
    tok, backend, pipe = rep["assumed"]
    assert (tok["setting"], tok["field"], tok["value"], tok["source"]) == ("tokens", "tokens", 1048576000.0, "a.toml")
    # a Job field named without a value of its own: the job's (as the grammar reads a lone field name)
    assert (backend["field"], backend["value"], backend["rule"]) == ("attention_backend", "flash",
                                                                     "the start-up rules read its default")
    assert (pipe["value"], pipe["source"]) == ({"pipe_partitioned": False}, "ds.json")
    assert rep["unmodelled"] == [{"setting": "--use-nccl-ub", "value": True, "reason": "the same bytes",
                                  "source": "a.toml", "line": "--use-nccl-ub=true (the same bytes)"}]
    # reworded (torchtitan 0.3's terms): head and rule apart, the settings kept
    w = listed("assumed", "model code", "llama3", "[model] name 'llama3', the code", spaced=True)
    w2 = w.reworded("[model] name 'llama3',", "--module llama3,")
    assert (str(w2), w2.entries) == ("model code llama3: --module llama3, the code", w.entries)


from test_trainer_notes import _read  # noqa: E402 (each config read as the notes test reads it)

CONFIGS = sorted([*(DATA / "trainer_configs").glob("*.*"), *(DATA / "torchtitan03").glob("*.sh"),
                  *(DATA / "bridge_yaml").glob("*.sh")])
CONFIGS = [p for p in CONFIGS if p.suffix != ".md"]


def test_every_corpus_line_is_a_record():
    """Every line of every reader over tests/data's trainer configs (TOMLs, launch scripts, ds_configs, torchtitan
    0.3 scripts, Bridge launches) is a Note of its list's kind; its assumed entries read the record (setting, value
    and rule from its fields, not from its text); each format has records (not a vacuous pass)."""
    fmts, seen = set(), 0
    for p in CONFIGS:
        cfg = _read(p)
        if cfg is None:
            continue
        for kind in ("assumed", "ignored", "not_modelled", "unmodelled"):
            for line in getattr(cfg, kind):
                assert isinstance(line, Note), (p.name, kind, str(line))
                assert line.kind == kind, (p.name, kind, str(line))
                seen += 1
                fmts.add(cfg.fmt)
        for line in cfg.assumed:
            got = assumed_entries(replace(cfg, assumed=[line]))
            assert [(e["setting"], e["rule"]) for e in got] == [(k, line.message) for k, _ in line.entries], str(line)
    assert seen > 200, seen
    assert fmts >= {"megatron", "torchtitan", "deepspeed", "megatron-bridge", "torchtitan-0.3", "megatron-deepspeed"}
