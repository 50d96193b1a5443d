"""What a trainer config's reader inferred, and what it read and did not price, as data: the
`trainer_config` block of `explain --format json` and of each `check --format json` result, and
the reader's assumed lines added to their `assumed` list (README "Trainer configs").

Every line of a TrainerConfig's four lists is a record, a Note: a str that is the line as the stderr notes print it
and carries its kind, its settings with their values, its reason (or rule) and the file it was read from. The readers
(torchtitan.py, torchtitan03.py, megatron.py, megatron_model.py, megatron_deepspeed.py, deepspeed.py,
megatron_bridge.py, bridge_moe.py, cp_balancer.py and the shared helpers of __init__.py) and the command line's
laying of options over a file (cli/core.py load_job, field_options.command_line_spellings) make each with listed,
listed_all or noted; config_report and the stderr note (cli/core.py) take the record and never read the text back,
and a reader that drops or replaces a line an earlier reading left finds it by its fields (about), never by its text
(tests/test_reader_notes_records.py walks the readers' source for a line built or matched as text):

- assumed: `HEAD: RULE` (inferred by that rule); unmodelled: `HEAD: how it is priced`, or `HEAD (how)` (ruled
  False). HEAD is `name=value`, `name=value, name=value`, `name value` (spaced: a flag as a script writes it), a
  setting alone (noted), or none (a line that is all rule: setting null).
- ignored / not_modelled: `name=value, name=value (reason)`, or `HEAD: RULE` where ruled.
- A record read from another file than the config (a Megatron-DeepSpeed script's ds_config, a Megatron-Bridge YAML
  of overrides) has that file as source, its line prefixed `SOURCE: ` (Note.labeled).

An entry's `field` is the planner's Job field its setting is (explicit membership in schema.Job's fields, never a
substring match), else null (a trainer key the planner has no field for: torchtitan's data_parallel_shard_degree,
DeepSpeed's communication_data_type). Its `value`: the record's, as the reader gave it (a file's typed value, a word
read by read_value: true / false, a whole number with or without thousands separators, a number, JSON, else the
text), so that `tokens=1.04858e+09` carries the exact 1,048,576,000 the job holds; an assumed setting that is a Job
field given no value of its own (noted) takes the job's value.
"""

from __future__ import annotations

import json
import re
from typing import Optional

_INT = re.compile(r"^-?\d{1,3}(?:,\d{3})+$|^-?\d+$")


# the kinds of a record, and the list of TrainerConfig each sits in: ignored / not_modelled lines read
# `head (message)`, assumed / unmodelled lines `head: message` (RULED)
KINDS = ("ignored", "not_modelled", "assumed", "unmodelled")
RULED = ("assumed", "unmodelled")


def _text(head: Optional[str], message: Optional[str], ruled: bool) -> str:
    if ruled:
        return ": ".join(x for x in (head, message) if x)
    return (head or "") + (f" ({message})" if message else "")


def cut(text: str, n: int) -> str:
    """`text` whole up to n characters, else its first n - 3 and "..." (n in all): how the readers' messages cut what a
    file gave (short_value: 60 of the repr; megatron_argparse._shown: 80 of the words, then quoted)."""
    return text if len(text) <= n else text[:n - 3] + "..."


def short_value(v) -> str:
    """A value as the file gave it, cut to 60 characters (a 5,000-digit number is not echoed): the readers' messages."""
    r = repr(v) if not isinstance(v, int) or isinstance(v, bool) or abs(v) < 10**40 else f"a {len(str(abs(v)))}-digit number"
    return cut(r, 60)

class Note(str):
    """A reader's line as the stderr note prints it (the str itself) with its record: `kind` (ignored, not_modelled,
    assumed or unmodelled), `entries` ((setting, value) pairs, the value as the JSON gives it; a setting None: a line
    that is all rule), `message` (the reason or rule; None where the line has none), `head` (the settings as printed;
    None: no head) and `source` (the file it was read from where not the config's: a Megatron-DeepSpeed script's
    ds_config; None: the config's). The text is `head (message)`, or `head: message` where `ruled` (an assumed or
    unmodelled line's default). config_report and the stderr note (cli/core.py) take the record, never the text."""

    __slots__ = ("kind", "entries", "message", "head", "source", "ruled")

    def __new__(cls, head: Optional[str], kind: str, entries: tuple, message: Optional[str],
                source: Optional[str] = None, ruled: Optional[bool] = None):
        assert kind in KINDS, kind
        ruled = kind in RULED if ruled is None else ruled
        self = super().__new__(cls, _text(head, message, ruled))
        self.kind, self.entries, self.message, self.head, self.source = kind, tuple(entries), message, head, source
        self.ruled = ruled
        return self

    def __reduce__(self):  # copy / pickle: rebuilt from its record
        return Note, (self.head, self.kind, self.entries, self.message, self.source, self.ruled)

    def reworded(self, old: str, new: str) -> "Note":
        """The same record with `old` replaced by `new` in its head and its message (each apart: a reader that says a
        line in another release's terms, torchtitan03._in_03_terms); its settings and values as they were."""
        head = None if self.head is None else self.head.replace(old, new)
        msg = None if self.message is None else self.message.replace(old, new)
        return Note(head, self.kind, self.entries, msg, self.source, self.ruled)

    def labeled(self, label: str) -> "Note":
        """The same record read from the file `label` names, the line prefixed 'LABEL: ' as the note prints it."""
        if self.head is None:  # all rule: the label heads it
            return Note(label, self.kind, self.entries, self.message, label, self.ruled)
        return Note(f"{label}: {self.head}", self.kind, self.entries, self.message, label, self.ruled)


def shown_value(value) -> str:
    """A setting's value as a line prints it: true / false, JSON for a list or mapping, else str()."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return f"{value}"


def json_value(value):
    """A setting's value as the JSON gives it: a file's typed value (bool, a finite number, list, mapping) as it is;
    a word (a flag's or an override's text, or anything else) read as read_value reads one; None: null."""
    if value is None:
        return None
    if isinstance(value, (bool, int, list, dict)) or (isinstance(value, float) and value == value
                                                       and abs(value) != float("inf")):
        return value
    return read_value(shown_value(value))


def listed(kind: str, key: str, value, reason: Optional[str], show=None, source: Optional[str] = None,
           spaced: bool = False, ruled: Optional[bool] = None) -> Note:
    """The line `key=value (reason)` of the config's `kind` list (ignored: no effect on memory or time;
    not_modelled: it changes them, not priced), or `key=value: rule` (assumed: inferred by that rule; unmodelled:
    priced as the rule says), as a Note. show: how the trainer spells the value where not as shown_value does: a
    function (Megatron-Bridge's Hydra overrides: spelling.hydra_value; the value then that word read, read_value, as
    the JSON gave it) or the text itself (a count as `4,096`, a float to 6 significant figures; the value kept as
    given). source: the file the setting was read from where not the config (the line prefixed 'SOURCE: ';
    Megatron-Bridge's YAML of overrides); None or empty: the config's. spaced: `key value` (a Megatron flag as a
    script writes it) for `key=value`. ruled: the text's form where not the kind's (an unmodelled `key=value
    (reason)`)."""
    if show is None:
        note = listed_all(kind, [(key, value)], reason, spaced=spaced, ruled=ruled)
    else:
        text, v = (show, json_value(value)) if isinstance(show, str) else (show(value), read_value(show(value)))
        note = Note(f"{key}{' ' if spaced else '='}{text}", kind, ((key, v),), reason or None, ruled=ruled)
    return note.labeled(source) if source else note


def noted(kind: str, setting: Optional[str], reason: Optional[str], ruled: Optional[bool] = None) -> Note:
    """The line `setting (reason)` (`setting: rule` where ruled, an assumed / unmodelled line's default): a setting
    read with no value of its own (a flag of no argument, a stray word, a Job field whose value the job holds), its
    value null (an assumed line's Job field: the job's, config_report). setting None: a line that is all rule."""
    return Note(setting, kind, ((setting, None),), reason or None, ruled=ruled)


def listed_all(kind: str, pairs: list, reason: Optional[str], spaced: bool = False,
               ruled: Optional[bool] = None) -> Note:
    """The line `key=value, key=value (reason)` (`...: rule` where ruled): settings (key, value) read and not priced,
    or inferred, for one reason. A pair's value a str of its own shown: ((key, value, shown)) triples take it. spaced:
    `key value key value` (command-line options as a launch line writes them)."""
    def show(p):
        return p[2] if len(p) > 2 else shown_value(p[1])

    head = (" " if spaced else ", ").join(f"{p[0]}{' ' if spaced else '='}{show(p)}" for p in pairs)
    return Note(head, kind, tuple((p[0], json_value(p[1])) for p in pairs), reason or None, ruled=ruled)


def about(line, key: Optional[str], *values) -> bool:
    """Whether `line` is a record whose first setting is `key` (None: a line that is all rule, noted(kind, None, ...)),
    its value one of `values` where any is given (as the record holds it, json_value's: True is not 1): how a reader
    finds a line an earlier reading left, to drop or replace it, by the record's fields, never by the line's text. A
    str that is no record: False."""
    if not isinstance(line, Note) or not line.entries:
        return False
    k, v = line.entries[0]
    return k == key and (not values or any(v == x and isinstance(v, bool) == isinstance(x, bool) for x in values))


def _job_fields() -> frozenset:
    from ..schema import Job

    return frozenset(Job.model_fields)


def read_value(text: str):
    """A value as a line writes it: true / false, a whole number (thousands separators allowed), a
    number, JSON (a list or mapping), else the text itself."""
    t = text.strip()
    if t in ("true", "false"):
        return t == "true"
    if _INT.match(t):
        return int(t.replace(",", ""))
    try:
        x = float(t)
    except ValueError:
        pass
    else:
        if x == x and abs(x) != float("inf"):
            return x
    if t[:1] in "[{":
        try:
            return json.loads(t)
        except ValueError:
            pass
    return t


def _source_of(line: str, cfg) -> str:
    """The file a line was read from: a record's source where it names one (a Megatron-DeepSpeed script's ds_config, a
    Megatron-Bridge YAML of overrides), else the config's own path."""
    return (line.source if isinstance(line, Note) else None) or cfg.source


def _record_entries(line: Note, src: str, job: dict, fields: frozenset) -> list[dict]:
    """An assumed record's entries: its settings and values as the reader gave them; a Job field given no value of its
    own (noted) takes the job's (as the grammar reads a lone field name)."""
    return [{"setting": k, "field": k if k in fields else None,
             "value": job.get(k) if v is None and k in fields else v, "rule": line.message if line.ruled else None,
             "source": src, "line": str(line)} for k, v in line.entries]


def assumed_entries(cfg, job: Optional[dict] = None) -> list[dict]:
    """The config's assumed lines as structured entries: setting, field, value, rule, source, line, one a setting of
    the record (module docstring). job: the reader's job fields a Job field given no value takes (cfg.job by
    default)."""
    job = cfg.job if job is None else job
    fields = _job_fields()
    return [e for line in cfg.assumed for e in _record_entries(_record(line, "assumed"), _source_of(line, cfg), job,
                                                                fields)]


def _record(line, kind: str) -> Note:
    """A line of a list as its record: every reader and the command line write one (listed, noted); a str from
    elsewhere is one setting, its whole text, with no value or reason (never read back by a grammar)."""
    return line if isinstance(line, Note) else noted(kind, str(line), None)


def _listed(cfg, lines: list[str], kind: str = "ignored") -> list[dict]:
    """ignored / not_modelled / unmodelled lines as entries: setting, value, reason (for unmodelled: how it is
    priced), source, line, one a setting of the record."""
    out = []
    for line in lines:
        note = _record(line, kind)
        out += [{"setting": k, "value": v, "reason": note.message, "source": _source_of(note, cfg), "line": str(note)}
                for k, v in note.entries]  # the line a plain str: YAML's safe dumper takes no str subclass
    return out


def config_report(cfg, job: Optional[dict] = None) -> dict:
    """The `trainer_config` block of a job read from a trainer config: its path and format, the
    assumed entries, and what it read and did not price (ignored: no effect on memory or time;
    not_modelled: changes them, left out of the price; unmodelled: priced as something else)."""
    return {"source": cfg.source, "format": cfg.fmt, "assumed": assumed_entries(cfg, job),
            "ignored": _listed(cfg, cfg.ignored, "ignored"), "not_modelled": _listed(cfg, cfg.not_modelled, "not_modelled"),
            "unmodelled": _listed(cfg, cfg.unmodelled, "unmodelled")}


def with_config(res: dict, cfg, job: Optional[dict] = None) -> dict:
    """explain's (or a check result's) JSON with the trainer config's block, and its assumed lines
    after the job's own in `assumed` (the lines the stderr note prints, in its order). In place; returns res."""
    if cfg is None:
        return res
    block = config_report(cfg, job)
    if cfg.param_gather is True:
        # the tie of a dp_param_gather_overlap left out is the file's, not assumed (plan.param_gather_assumed), where
        # the file states the gather hidden (TrainerConfig.param_gather): a Megatron script's --overlap-param-gather,
        # a Bridge config's ddp. (and, under dist_muon, optimizer.) overlap_param_gather true, for whatever sharding
        # mode the command line runs. A file that states it false has the job's false where it acts (the reader's,
        # or cli/core.command_line_param_gather's under a command line that makes it act); one that does not state it
        # (a Megatron script without the flag, torchtitan, DeepSpeed) keeps the line
        from ..plan import PARAM_GATHER_TIED

        res["assumed"] = [a for a in res.get("assumed", ()) if a != PARAM_GATHER_TIED]
        if not res["assumed"]:
            del res["assumed"]
    if cfg.assumed:
        # the lines as plain text: YAML's safe dumper takes no str subclass (a Note)
        res["assumed"] = list(res.get("assumed", ())) + [str(x) for x in cfg.assumed]
    res["trainer_config"] = block
    return res
