"""The manual check of planner/trainers/torchtitan_types.tyro_warns against tyro itself: every key of MAIN_TYPES set
to each of 16 values (strings, numbers, bools, lists, a table, a date) in a one-table TOML, loaded by torchtitan
@e347b1e5e's own ConfigManager.parse_args, and tyro's warning for the key compared with tyro_warns' answer.

Not run by CI (tyro, typeguard and docstring_parser are not the project's dependencies; torchtitan needs torch).
To run it: put on PYTHONPATH the sources of brentyi/tyro v1.0.15 (src/), agronholm/typeguard (src/),
rr-/docstring_parser, a folder holding torchtitan/config/{__init__,job_config,manager}.py at pytorch/torchtitan
@e347b1e5e with empty torchtitan/__init__.py and torchtitan/tools/__init__.py, a torchtitan/tools/logging.py
defining `logger = logging.getLogger()`, and a stub torch package (float16 / float32 / bfloat16 names, a `device`
class, `distributed.is_initialized()` returning False); then `PYTHONPATH=.:... python scripts/tyro_rule_check.py`.
Run on 2026-12-07: 2,303 (key, value) cases, 0 differences (model.hf_assets_path / tokenizer_path left out of the
batches: _validate_config raises on a non-path there, torchtitan_types._assets_path; job.config_file /
custom_config_module: the loader reads them itself; validation.steps: its __post_init__ assert).

Unknown keys (issue readers3; `--unknown`): a key or [section] JobConfig has not, one a file (UNKNOWN_CASES: a made-up
key and a near miss in every section, made-up and misspelt sections, nested tables under a section and under a key,
each key of the earlier layout the reader also reads, torchtitan_types.EARLIER, and [training] batch_size), loaded by
the ConfigManager on PYTHONPATH: "refused" where it raises 'Invalid field names' (@e347b1e5e manager.py l. 160-172,
since eadca4835, 2025-08-28), "taken" where the key is a field of its JobConfig, "dropped" where it is not and the file
loads all the same (@6404b932 manager.py l. 157-170: _dict_to_dataclass keeps the fields it has and drops the rest,
silently). `--unknown --write COMMIT` records that commit's verdicts in tests/data/torchtitan_unknown_keys.json (the
fixture tests/test_reader_types.py checks torchtitan_types.check against); `--unknown` alone compares check's verdict
with the loaded torchtitan's (at @e347b1e5e: every difference is a key of the earlier layouts the reader reads).
Run on 2026-12-07 with the folders of @e347b1e5e and @6404b932 in turn: 107 cases each; @e347b1e5e refuses all 107,
check refuses the 81 that are not the earlier layouts' and takes the 26 that are (torchtitan_types.EARLIER's 25 and
[training] batch_size: read as those layouts read them, listed as assumed, torchtitan_types.earlier_note); @6404b932
refuses none: it takes the 25 EARLIER keys and drops the 82 others, [training] batch_size among them (its name since
8570415c3, 2025-06-05: local_batch_size). Run without --unknown after this change: 2,303 cases, 0 differences.
torchtitan release/0.3 @4f9e9a47d has no case here: it loads no TOML (its ConfigManager.parse_args, config/manager.py
l. 34-46, builds the job from --module / --config, a config_registry function, with tyro laying the command line over
it; no option names a file, configs.py has only save_config_file), so a TOML priced with --stack torchtitan-0.3 is
checked against main's JobConfig as above; 0.3's own unknown command-line options are tyro's error, refused by the
launch-line reader (torchtitan03.py, the frozen option list).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import tempfile
import warnings
from pathlib import Path

from torchtitan.config import job_config
from torchtitan.config.manager import ConfigManager

from planner.errors import PlannerError
from planner.trainers.torchtitan import MODELLED
from planner.trainers.torchtitan_types import EARLIER, MAIN_TYPES, SECTIONS, _is_union, check, tyro_warns

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "torchtitan_unknown_keys.json"

VALUES = ["x", 1, 1.5, True, ["x"], [1], ["x", 1], [1, "x"], [["x"]], {"a": 1}, datetime.date(2020, 1, 1),
          "selective", "bfloat16", "tensorwise", "", []]
LEFT_OUT = {("job", "custom_config_module"), ("job", "config_file"), ("validation", "steps"),
            ("model", "hf_assets_path"), ("model", "tokenizer_path")}


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, datetime.date):
        return v.isoformat()
    return repr(v)


def warned(items: list, folder: Path) -> list[str]:
    """tyro's warnings when torchtitan's ConfigManager loads a TOML holding `items` (section, key, value)."""
    tables: dict[str, list[str]] = {}
    for section, key, v in items:
        tables.setdefault(section, []).append(f"{key} = {toml_value(v)}")
    p = folder / "case.toml"
    p.write_text("\n".join(f"[{s}]\n" + "\n".join(lines) for s, lines in tables.items()) + "\n")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ConfigManager().parse_args(["--job.config_file", str(p)])
    return [str(x.message) for x in w]


def main() -> None:
    keys = [(s, k, t) for s, body in MAIN_TYPES.items() for k, (t, _) in body.items() if (s, k) not in LEFT_OUT]
    plain = [c for c in keys if not _is_union(c[2])]
    unions = [c for c in keys if _is_union(c[2])]  # tyro's union warning names no field: one key a file
    cases = differences = 0
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        for v in VALUES:
            batch = None
            try:
                batch = warned([(s, k, v) for s, k, _ in plain], folder)
            except Exception:  # a __post_init__ raised: one key a file
                pass
            for s, k, t in plain + unions:
                try:
                    ws = batch if batch is not None and (s, k, t) in plain else warned([(s, k, v)], folder)
                except Exception as e:
                    print(f"raises {s}.{k} = {v!r}: {type(e).__name__} {str(e)[:80]}")
                    continue
                field = f"`{s}.{k}`".replace("_", "-")
                got = any(field in m or ((s, k, t) in unions and "Union" in m) for m in ws)
                cases += 1
                if got != tyro_warns(t, v):
                    differences += 1
                    print(f"DIFFERENCE {s}.{k}: {t} = {v!r}: tyro warns {got}, tyro_warns {not got}")
    print(f"{cases} cases, {differences} differences")


def unknown_cases() -> list[tuple[str, str, object]]:
    """(section, key, value): one key a file that torchtitan @e347b1e5e's JobConfig has not ("" section: a top-level
    key, a table value: a [section])."""
    cases: list[tuple[str, str, object]] = []
    for sec in sorted(SECTIONS):
        cases.append((sec, "made_up_key", 1))
        first = next(iter(MAIN_TYPES.get(sec, {})), None)
        if first is not None:
            cases.append((sec, first + "x", 1))  # a near miss
        cases.append((sec, "made_up_table", {"a": 1}))  # [sec.made_up_table]
    cases += [("", "made_up_section", {"a": 1}), ("", "paralelism", {"tensor_parallel_degree": 2}),
              ("", "made_up_key", 1), ("training", "batch_size", 4)]
    # (a table under a key that is no section, [model.name] a = 1, is a dict for a str: a type case, main()'s)
    for sec, body in EARLIER.items():
        for key in body:
            cases.append((sec, key, 1))
        if sec not in SECTIONS:
            cases.append((sec, "made_up_key", 1))
    return cases


def toml_of(sec: str, key: str, v) -> str:
    if not sec:
        return (f"[{key}]\n" + "\n".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "\n" if isinstance(v, dict)
                else f"{key} = {toml_value(v)}\n")
    if isinstance(v, dict):
        return f"[{sec}.{key}]\n" + "\n".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "\n"
    return f"[{sec}]\n{key} = {toml_value(v)}\n"


def is_field(path: str) -> bool:
    """Whether the dotted path is a field of the loaded JobConfig (through its nested dataclasses)."""
    cls = job_config.JobConfig
    for part in path.split("."):
        if cls is None or not dataclasses.is_dataclass(cls):
            return False
        f = {f.name: f for f in dataclasses.fields(cls)}.get(part)
        if f is None:
            return False
        cls = f.type if dataclasses.is_dataclass(f.type) else None
    return True


def trainer_verdict(text: str, path: str, folder: Path) -> str:
    p = folder / "case.toml"
    p.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ConfigManager().parse_args(["--job.config_file", str(p)])
        except ValueError as e:
            if "Invalid field names" in str(e):
                return "refused"
            raise
    return "taken" if is_field(path) else "dropped"


def reader_verdict(text: str) -> str:
    import tomllib
    try:
        check("case: ", tomllib.loads(text), known=lambda path, key: key in MODELLED.get(path, ()))
    except PlannerError:
        return "refused"
    return "taken"


def unknown(write: str | None) -> None:
    rows = json.loads(FIXTURE.read_text())["cases"] if FIXTURE.exists() else []
    by_toml = {r["toml"]: r for r in rows}
    cases = differences = 0
    with tempfile.TemporaryDirectory() as d:
        for sec, key, v in unknown_cases():
            text = toml_of(sec, key, v)
            path = ".".join(x for x in (sec, key) if x)
            theirs = trainer_verdict(text, path, Path(d))
            mine = reader_verdict(text)
            cases += 1
            if write:
                by_toml.setdefault(text, {"toml": text})[write] = theirs
            elif mine != theirs:
                differences += 1
                print(f"DIFFERENCE {text!r}: torchtitan {theirs}, check {mine}")
    if write:
        FIXTURE.write_text(json.dumps({"source": FIXTURE_SOURCE, "cases": list(by_toml.values())}, indent=1) + "\n")
    print(f"{cases} unknown-key cases, {differences} differences")


FIXTURE_SOURCE = (
    "scripts/tyro_rule_check.py --unknown --write COMMIT, run 2026-12-07 on pytorch/torchtitan's ConfigManager at "
    "@e347b1e5e (torchtitan/config/manager.py _dict_to_dataclass l. 160-181: 'Invalid field names', refused) and "
    "@6404b932 (manager.py l. 157-170: keys it has not dropped silently) with tyro v1.0.15: each case one TOML file; "
    "'taken' = a field of that JobConfig, 'dropped' = loaded without it, 'refused' = ValueError at load")


if __name__ == "__main__":
    if "--unknown" in sys.argv:
        at = sys.argv.index("--write") + 1 if "--write" in sys.argv else None
        unknown(sys.argv[at] if at else None)
    else:
        main()
