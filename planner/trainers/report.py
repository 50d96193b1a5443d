"""What a trainer config's reader inferred, and what it read and did not price, as data: the
`trainer_config` block of `explain --format json` and of each `check --format json` result, and
the reader's assumed lines added to their `assumed` list (README "Trainer configs").

The readers (torchtitan.py, torchtitan03.py, megatron.py, megatron_deepspeed.py, deepspeed.py) and
the command line's laying of options over a file (cli/core.py load_job) write each line once, as the
stderr notes print it; this module reads those lines back by the grammar every reader writes them in
and never changes them:

- assumed: `[SOURCE: ]HEAD: RULE`. SOURCE is there where the line was read from another file than the
  config (a Megatron-DeepSpeed script's ds_config JSON: TrainerConfig.line_sources names it, the
  prefix is never guessed). HEAD is what precedes the first ': ' outside parentheses, brackets and
  quotes; a line without one is all rule (setting null). A HEAD of assignments, `name=value`,
  `a=b=c=value` (one value for several names) or `name=value, name=value`, gives one entry per name;
  `name value` gives one where the name is a Job field (schema.Job) or a --flag and the value one word;
  a lone Job field name gives that field (its value the job's where the reader set it, else null: resolve
  derives it and the JSON's `plan` gives it); any other HEAD is the entry's setting as written, value null.
- ignored / not_modelled: `name=value, name=value (reason)` (the trailing balanced parenthesis is the
  reason, cli/core.py split_reason): one entry per `name=value`.
- unmodelled: `SETTING: how it is priced` (HEAD and RULE as for assumed, the rule as the reason).

An entry's `field` is the planner's Job field its name is (explicit membership in schema.Job's
fields, never a substring match), else null (a trainer key the planner has no field for: torchtitan's
data_parallel_shard_degree, DeepSpeed's communication_data_type). Its `value`: the job's own value of
the field where the line shows that value (as the readers print it: true/false, thousands separated,
6 significant figures for a float), so that `tokens=1.04858e+09` is the exact 1,048,576,000 the job
holds; else the line's text read as true / false, a whole number (thousands separators allowed), a
number, JSON (a list or mapping as the readers write them), or the text itself.

The ignored / not_modelled lines are records: a reader writes each as a Note (listed, listed_all, noted), a
str that is the line as printed and carries its kind, its settings with their values, its reason and the file it
was read from; config_report and the stderr note (cli/core.py) take the record and never read it back. The
grammar above reads what is still written as text: the assumed and unmodelled lines, the command line's notes
(cli/core.py), and the few ignored / not_modelled lines of no `setting (reason)` shape (the DeepSpeed reader's
`data_types.grad_accum_dtype fp32: ...`, Megatron-Bridge's `DDP bucket N parameters (...)`, the
Megatron-DeepSpeed reader's lines labelled with its ds_config inline, torchtitan 0.3's shell lines).
tests/test_trainer_notes.py holds every record of the test corpus to what the grammar reads from its text.
"""

from __future__ import annotations

import json
import re
from typing import Optional

_NAME = r"(?:--)?[A-Za-z_][\w.\-]*"
_ASSIGNS = re.compile(rf"^((?:{_NAME}=)+)(.*)$", re.S)
_NEXT_ASSIGN = re.compile(rf", (?={_NAME}=)")
_INT = re.compile(r"^-?\d{1,3}(?:,\d{3})+$|^-?\d+$")


class Note(str):
    """A reader's line as the stderr note prints it (the str itself: `head`, then ' (message)' where there is one)
    with its record: `kind` (ignored or not_modelled), `entries` ((setting, value) pairs, the value as the JSON gives
    it), `message` (the reason; None where the line has none), `head` (the settings as printed) and `source` (the file
    it was read from where not the config's: a Megatron-DeepSpeed script's ds_config; None: the config's).
    config_report and the stderr note (cli/core.py) take the record, never the text."""

    __slots__ = ("kind", "entries", "message", "head", "source")

    def __new__(cls, head: str, kind: str, entries: tuple, message: Optional[str], source: Optional[str] = None):
        self = super().__new__(cls, head + (f" ({message})" if message else ""))
        self.kind, self.entries, self.message, self.head, self.source = kind, tuple(entries), message, head, source
        return self

    def __reduce__(self):  # copy / pickle: rebuilt from its record
        return Note, (self.head, self.kind, self.entries, self.message, self.source)

    def labeled(self, label: str) -> "Note":
        """The same record read from the file `label` names, the line prefixed 'LABEL: ' as the note prints it."""
        return Note(f"{label}: {self.head}", self.kind, self.entries, self.message, label)


def shown_value(value) -> str:
    """A setting's value as a line prints it: true / false, JSON for a list or mapping, else str()."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return f"{value}"


def json_value(value):
    """A setting's value as the JSON gives it: a file's typed value (bool, a finite number, list, mapping) as it is;
    a word (a flag's or an override's text, or anything else) read as read_value reads one."""
    if isinstance(value, (bool, int, list, dict)) or (isinstance(value, float) and value == value
                                                       and abs(value) != float("inf")):
        return value
    return read_value(shown_value(value))


def listed(kind: str, key: str, value, reason: Optional[str], show=None, source: Optional[str] = None) -> Note:
    """The line `key=value (reason)` of the config's `kind` list (ignored: no effect on memory or time;
    not_modelled: it changes them, not priced), as a Note. show: how the trainer spells the value where not as
    shown_value does (Megatron-Bridge's Hydra overrides: spelling.hydra_value), the value then that word read
    (read_value), as the JSON gave it. source: the file the setting was read from where not the config (the line
    prefixed 'SOURCE: '; Megatron-Bridge's YAML of overrides); None or empty: the config's."""
    note = (Note(f"{key}={show(value)}", kind, ((key, read_value(show(value))),), reason or None) if show is not None
            else listed_all(kind, [(key, value)], reason))
    return note.labeled(source) if source else note


def noted(kind: str, setting: str, reason: Optional[str]) -> Note:
    """The line `setting (reason)`: a setting read with no value of its own (a flag of no argument, a stray word),
    its value null."""
    assert kind in ("ignored", "not_modelled"), kind
    return Note(setting, kind, ((setting, None),), reason or None)


def listed_all(kind: str, pairs: list, reason: Optional[str]) -> Note:
    """The line `key=value, key=value (reason)`: settings (key, value) read and not priced for one reason."""
    assert kind in ("ignored", "not_modelled"), kind
    head = ", ".join(f"{k}={shown_value(v)}" for k, v in pairs)
    return Note(head, kind, tuple((k, json_value(v)) for k, v in pairs), reason or None)


def split_reason(entry: str) -> tuple[str, str]:
    """'name=value (why)' -> ('name=value', 'why'); ('entry', '') without a trailing reason.
    The reason is the balanced parenthesis that ends the entry."""
    if not entry.endswith(")"):
        return entry, ""
    depth = 0
    for i in range(len(entry) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(entry[i], 0)
        if depth == 0:
            return (entry[:i].rstrip(), entry[i + 1:-1]) if i > 0 and entry[i - 1] == " " else (entry, "")
    return entry, ""


def split_head(line: str) -> tuple[Optional[str], str]:
    """(HEAD, RULE) of a reader's line: HEAD what precedes the first ': ' outside parentheses,
    brackets, braces and quotes (None where there is none: the line is all rule)."""
    depth, quote = 0, None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"" and (i == 0 or not line[i - 1].isalnum()):  # an apostrophe in a word is no quote
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == ":" and depth == 0 and line[i + 1:i + 2] == " " and i > 0:
            return line[:i], line[i + 2:]
    return None, line


def _job_fields() -> frozenset:
    from ..schema import Job

    return frozenset(Job.model_fields)


def _shown(v) -> set[str]:
    """The ways a reader prints a job value in a line (true/false, 4096 / 4,096, 6 significant figures)."""
    if isinstance(v, bool):
        return {str(v).lower()}
    if isinstance(v, int):
        return {str(v), f"{v:,}", f"{v:.6g}"}
    if isinstance(v, float):
        return {str(v), f"{v:g}", f"{v:.6g}", f"{v:,}"} | ({f"{int(v):,}", str(int(v))} if v.is_integer() else set())
    if isinstance(v, (str, int)):
        return {str(v)}
    return set()


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


def _value(name: str, text: Optional[str], job: dict):
    """The job's value of `name` where the line shows it, else the line's text read (read_value)."""
    if name in job and (text is None or text.strip() in _shown(job[name])):
        return job[name]
    return None if text is None else read_value(text)


def _entries(head: Optional[str], job: dict) -> list[tuple[str, Optional[str], object]]:
    """[(setting, field, value)] of a line's HEAD (module docstring)."""
    if head is None:
        return [(None, None, None)]
    fields = _job_fields()
    head = head.strip()
    if _ASSIGNS.match(head):
        out = []
        for part in _NEXT_ASSIGN.split(head):
            m = _ASSIGNS.match(part)
            names = m.group(1).rstrip("=").split("=")
            out += [(n, n if n in fields else None, _value(n, m.group(2), job)) for n in names]
        return out
    name, _, rest = head.partition(" ")
    if rest and " " not in rest and (name in fields or name.startswith("--")):
        return [(name, name if name in fields else None, _value(name, rest, job) if name in fields else read_value(rest))]
    if head in fields:
        return [(head, head, job.get(head))]
    return [(head, None, None)]


def _source_of(line: str, cfg) -> tuple[str, str]:
    """(source, the line without its source prefix): the config's own path, or the file
    TrainerConfig.line_sources names for the line (its 'SOURCE: ' prefix taken off)."""
    if isinstance(line, Note):
        return line.source or cfg.source, line
    src = cfg.line_sources.get(line)
    if src is not None and line.startswith(src + ": "):
        return src, line[len(src) + 2:]
    return cfg.source, line


def assumed_entries(cfg, job: Optional[dict] = None) -> list[dict]:
    """The config's assumed lines as structured entries: setting, field, value, rule, source, line
    (module docstring). job: the reader's job fields the values are taken from (cfg.job by default)."""
    job = cfg.job if job is None else job
    out = []
    for line in cfg.assumed:
        src, text = _source_of(line, cfg)
        head, rule = split_head(text)
        for setting, fld, value in _entries(head, job):
            out.append({"setting": setting, "field": fld, "value": value, "rule": rule, "source": src, "line": line})
    return out


def _listed(cfg, lines: list[str]) -> list[dict]:
    """ignored / not_modelled lines as entries: setting, value, reason, source, line (module docstring)."""
    out = []
    for line in lines:
        src, text = _source_of(line, cfg)
        if isinstance(line, Note):
            out += [{"setting": k, "value": v, "reason": line.message, "source": src, "line": str(line)}
                    for k, v in line.entries]  # the line a plain str: YAML's safe dumper takes no str subclass
            continue
        what, why = split_reason(text)
        for part in _NEXT_ASSIGN.split(what):
            name, eq, val = part.partition("=")
            setting, value = (name, read_value(val)) if eq and re.fullmatch(_NAME, name) else (part, None)
            out.append({"setting": setting, "value": value, "reason": why or None, "source": src, "line": line})
    return out


def _unmodelled(cfg) -> list[dict]:
    out = []
    for line in cfg.unmodelled:
        src, text = _source_of(line, cfg)
        head, rule = split_head(text)
        out.append({"setting": head, "reason": rule, "source": src, "line": line})
    return out


def config_report(cfg, job: Optional[dict] = None) -> dict:
    """The `trainer_config` block of a job read from a trainer config: its path and format, the
    assumed entries, and what it read and did not price (ignored: no effect on memory or time;
    not_modelled: changes them, left out of the price; unmodelled: priced as something else)."""
    return {"source": cfg.source, "format": cfg.fmt, "assumed": assumed_entries(cfg, job),
            "ignored": _listed(cfg, cfg.ignored), "not_modelled": _listed(cfg, cfg.not_modelled),
            "unmodelled": _unmodelled(cfg)}


def with_config(res: dict, cfg, job: Optional[dict] = None) -> dict:
    """explain's (or a check result's) JSON with the trainer config's block, and its assumed lines
    after the job's own in `assumed` (the lines the stderr note prints, in its order). In place; returns res."""
    if cfg is None:
        return res
    block = config_report(cfg, job)
    if cfg.assumed:
        res["assumed"] = list(res.get("assumed", ())) + list(cfg.assumed)
    res["trainer_config"] = block
    return res
