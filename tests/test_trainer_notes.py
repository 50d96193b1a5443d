"""The readers' ignored / not_modelled / unmodelled lines as records (planner/trainers/report.py Note, listed,
listed_all, noted): a reader writes the setting, its value and the reason as data, the line the stderr note prints is
made from them, and `trainer_config` takes the record instead of reading the line back (no grammar reads those lists:
every reader writes records, tests/test_reader_notes_records.py). Every record of every trainer config under
tests/data (the Megatron CI corpus's argument files, the launch scripts, TOMLs, ds_configs, torchtitan 0.3 scripts)
is checked against its own fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.trainers import TrainerConfig, load_trainer_config
from planner.cli.core import group_by_reason
from planner.trainers.report import Note, _listed, config_report, listed, listed_all

DATA = Path(__file__).parent / "data"
CONFIGS = sorted([*(DATA / "trainer_configs").glob("*.*"), *(DATA / "torchtitan03").glob("*.sh"),
                  *(DATA / "bridge_yaml").glob("*.sh"), *(DATA / "megatron_ci" / "args").glob("*.args")])
CONFIGS = [p for p in CONFIGS if p.suffix != ".md"]


def _read(p: Path):
    for kw in ({}, {"model": "llama3-8b"}, {"model": "llama3-8b", "gpus": 8}):
        try:
            return load_trainer_config(p, **kw)
        except PlannerError:
            continue
    return None


def test_records_read_as_their_lines():
    """Each line of the ignored / not_modelled / unmodelled lists is a Note of the list's kind, and its JSON entries
    are its record (setting, value, reason, source, one a setting), never its text read back; the stderr note groups a
    `(reason)` record by its head and message, whose text they make. The corpus holds records of every reader (not a
    vacuous pass)."""
    seen, kinds = 0, set()
    for p in CONFIGS:
        cfg = _read(p)
        if cfg is None:
            continue
        for kind in ("ignored", "not_modelled", "unmodelled"):
            for line in getattr(cfg, kind):
                assert isinstance(line, Note) and line.kind == kind, (p.name, kind, str(line))
                got = _listed(cfg, [line], kind)
                assert [(e["setting"], e["value"], e["reason"], e["source"], e["line"]) for e in got] == [
                    (k, v, line.message, line.source or cfg.source, str(line)) for k, v in line.entries], str(line)
                if not line.ruled:
                    assert str(line) == line.head + (f" ({line.message})" if line.message else ""), str(line)
                    assert group_by_reason([line]) == [str(line)], (p.name, str(line))  # the stderr note's group
                seen += 1
                kinds.add((cfg.fmt, kind))
    assert seen > 500, seen
    assert {f for f, _ in kinds} >= {"megatron", "torchtitan", "deepspeed", "megatron-bridge", "torchtitan-0.3",
                                     "megatron-deepspeed"}, kinds


def test_a_record_keeps_what_the_grammar_would_split():
    """A value holding ', name=' is one setting to the record (a word of a Megatron flag such as --data-path 'a, b=c'
    was read back from the text as two settings, `a` and `b`, before every line was a record)."""
    cfg = TrainerConfig(job={}, fmt="megatron", source="x.sh")
    note = listed("ignored", "--data-path", "a, b=c", "data loading")
    assert str(note) == "--data-path=a, b=c (data loading)"
    assert [(e["setting"], e["value"]) for e in _listed(cfg, [note])] == [("--data-path", "a, b=c")]


def test_listed_values_and_text():
    """The line as fmt_ignored printed it; the value as the JSON gives it: a file's typed value kept, a word read
    (the Megatron reader's flags are words: --lr 1.5e-4 is 0.00015, --split 99,1,0 stays text)."""
    n = listed_all("ignored", [("--lr", "1.5e-4"), ("--split", "99,1,0"), ("--bf16", True), ("x", {"a": [1, 2]})],
                   "optimizer settings")
    assert str(n) == '--lr=1.5e-4, --split=99,1,0, --bf16=true, x={"a":[1,2]} (optimizer settings)'
    assert n.entries == (("--lr", 0.00015), ("--split", "99,1,0"), ("--bf16", True), ("x", {"a": [1, 2]}))
    assert n.message == "optimizer settings" and n.source is None
    lab = n.labeled("ds_config.json")
    assert str(lab) == "ds_config.json: " + str(n) and lab.source == "ds_config.json" and lab.entries == n.entries
    cfg = TrainerConfig(job={}, fmt="megatron-deepspeed", source="run.sh", ignored=[lab])
    assert {e["source"] for e in config_report(cfg)["ignored"]} == {"ds_config.json"}
    assert str(listed("not_modelled", "k", 3, None)) == "k=3"


@pytest.mark.parametrize("name", ["train_llama3_8b.sh", "llama3_8b.toml", "ds_config_zero3.json"])
def test_each_reader_writes_records(name):
    """The Megatron, torchtitan and DeepSpeed readers write their ignored lines as records (none by text)."""
    cfg = _read(DATA / "trainer_configs" / name)
    assert cfg is not None and cfg.ignored
    assert all(isinstance(x, Note) for x in cfg.ignored), [str(x) for x in cfg.ignored if not isinstance(x, Note)]


def test_a_bridge_yaml_override_names_its_file_as_source(cli):
    """Megatron-Bridge's YAML of overrides: its lines were written 'FILE: key=value (why)' and read back as one
    setting named 'FILE: key=value', value null, source the launch script (the grammar knows no such prefix unless
    line_sources names it, which the Bridge reader never did). As records (listed(..., source=FILE)): the key, its
    value, the YAML as source; the stderr line is unchanged. tests/data/bridge_yaml/override.yaml sets
    optimizer.lr: 3e-4 and model.foo_unknown: 3."""
    import json

    script = DATA / "bridge_yaml" / "launch_yaml.sh"
    r = cli("explain", str(script), "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    tc = json.loads(r.stdout)["trainer_config"]
    yaml_file = str(DATA / "bridge_yaml" / "override.yaml")
    lr = next(e for e in tc["ignored"] if e["setting"] == "optimizer.lr")
    assert (lr["value"], lr["source"]) == (0.0003, yaml_file)
    assert lr["line"].startswith(f"{yaml_file}: optimizer.lr=0.0003 (")
    foo = next(e for e in tc["not_modelled"] if e["setting"] == "model.foo_unknown")
    assert (foo["value"], foo["source"]) == (3, yaml_file)
    assert f"{yaml_file}: model.foo_unknown=3 (" in r.stderr


def test_a_record_copies_and_dumps_as_its_line(cli):
    """A Note survives copy / pickle with its record, and every output format carries its line as plain text:
    `budget CONFIG --format yaml` of train_llama3_8b.sh (whose --use-mcore-models is an ignored record) dumped it
    with yaml's safe dumper, which refused the str subclass (RepresenterError: the fuzzer's cli-options seed)."""
    import copy
    import pickle

    import yaml

    n = listed("ignored", "--lr", "1.5e-4", "optimizer settings").labeled("ds.json")
    for m in (copy.deepcopy(n), pickle.loads(pickle.dumps(n))):
        assert (str(m), m.entries, m.message, m.source, m.head) == (str(n), n.entries, n.message, n.source, n.head)
    r = cli("budget", str(DATA / "trainer_configs" / "train_llama3_8b.sh"), "--format", "yaml")
    assert r.exit_code in (0, 1) and "Traceback" not in r.stderr, r.stderr
    out = yaml.safe_load(r.stdout)
    lines = [e["line"] for e in out["trainer_config"]["ignored"]]
    assert any(x.startswith("--use-mcore-models=true (") for x in lines), lines
