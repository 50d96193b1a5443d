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
"""

from __future__ import annotations

import datetime
import json
import tempfile
import warnings
from pathlib import Path

from torchtitan.config.manager import ConfigManager

from planner.trainers.torchtitan_types import MAIN_TYPES, _is_union, tyro_warns

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


if __name__ == "__main__":
    main()
