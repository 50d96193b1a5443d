"""Reading the files a user or a catalog gives: one function for the bytes, one for YAML,
one for JSON. Every problem is a PlannerError naming the file (exit 2), never a traceback
and never a hang.

- Only regular files are read: a FIFO would block the reader until something writes to it,
  and /dev/zero or /dev/urandom never end. A path that is not a regular file is refused
  before it is opened.
- At most MAX_FILE_BYTES are read. Every planner input is a text file of kilobytes to a few
  megabytes (the largest shipped one, tests/data/published_runs.yaml, is 412 kB; a saved
  `planner fit --top 100 --format json` is 315 kB); the cap bounds what a wrong path can make
  the process hold in memory.
- YAML is parsed with PyYAML's C loader (CSafeLoader, libyaml) when PyYAML was built with
  it: the pure-Python SafeLoader takes seconds on a file of a few megabytes. Both are "safe"
  loaders (no Python object tags), and both give the same data. Any exception the parser or
  its constructors raise (a `!!float "[]"`, a `!!timestamp abc`, nesting deeper than
  Python's recursion limit) is reported as invalid YAML in that file.
- JSON likewise: nesting deeper than the recursion limit is invalid JSON, not a crash.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import PlannerError

MAX_FILE_BYTES = 64 * 2**20  # 64 MiB: see the module docstring

# PyYAML's libyaml-based loader when available (yaml.__with_libyaml__), else the pure-Python one
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _stat_mode(path: str | Path) -> Optional[int]:
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):  # absent, or no valid path at all (a name too long, a NUL byte)
        return None


NAME_MAX = 255  # bytes of one file name on Linux's file systems (limits.h NAME_MAX; ext4, xfs, btrfs)


def name_too_long(path: str | Path) -> PlannerError:
    """The error for a path no file system takes (ENAMETOOLONG): which name is too long, not the
    whole path echoed back."""
    parts = [q for q in str(path).split(os.sep) if len(os.fsencode(q)) > NAME_MAX]
    what = (f"a file name of {len(os.fsencode(parts[0])):,} bytes ({parts[0][:40]}...), over the {NAME_MAX} a file "
            "system takes" if parts else f"a path of {len(os.fsencode(str(path))):,} bytes, longer than the system takes")
    return PlannerError(f"{path}: {what}", f"give a shorter name (at most {NAME_MAX} bytes a name)")


def check_name(path: str | Path) -> None:
    """PlannerError (name_too_long) where a name in `path` is over NAME_MAX bytes: an output
    path is checked before the work whose result it would hold."""
    if any(len(os.fsencode(q)) > NAME_MAX for q in str(path).split(os.sep)):
        raise name_too_long(path)


def exists(path: str | Path) -> bool:
    """Path.exists(), but False for a string no file system accepts as a path (a name longer
    than NAME_MAX raises ENAMETOOLONG from Path.exists() on Python < 3.12)."""
    return _stat_mode(path) is not None


def is_file(path: str | Path) -> bool:
    """Path.is_file() that never raises (see exists)."""
    mode = _stat_mode(path)
    return mode is not None and stat.S_ISREG(mode)


def is_dir(path: str | Path) -> bool:
    """Path.is_dir() that never raises (see exists)."""
    mode = _stat_mode(path)
    return mode is not None and stat.S_ISDIR(mode)


def read_bytes(path: str | Path, hint: Optional[str] = None, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; PlannerError otherwise."""
    p = Path(path)
    try:
        st = os.stat(p)  # stat, not open: opening a FIFO blocks until a writer comes
    except FileNotFoundError:
        raise PlannerError(f"{p}: cannot read (no such file)", hint) from None
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise name_too_long(p) from None
        raise PlannerError(f"{p}: cannot read ({e.strerror or e})", hint) from None
    except ValueError:  # a NUL byte: no file system takes it
        raise PlannerError(f"{str(p)!r}: not a valid path (it holds a NUL byte)", hint) from None
    if stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"{p}: is a folder, not a file", hint)
    if not stat.S_ISREG(st.st_mode):
        raise PlannerError(f"{p}: not a regular file (a device, FIFO or socket)", hint or "give the path of a saved file")
    if st.st_size > max_bytes:
        raise PlannerError(f"{p}: {st.st_size:,} bytes, more than the {max_bytes:,} a planner input may have",
                           hint or "give the right file; planner inputs are text files of kilobytes to megabytes")
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise PlannerError(f"{p}: cannot read ({e.strerror or e})", hint) from None
    if len(data) > max_bytes:  # grew since the stat
        raise PlannerError(f"{p}: more than the {max_bytes:,} bytes a planner input may have", hint)
    return data


def read_text(path: str | Path, hint: Optional[str] = None, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file (read_bytes); PlannerError for a binary file."""
    data = read_bytes(path, hint, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerError(f"{path}: not a text file (not UTF-8)", hint or "give a YAML or JSON text file") from None


def _yaml_error(where: str, e: Exception) -> PlannerError:
    mark = getattr(e, "problem_mark", None)
    at = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
    if isinstance(e, RecursionError):
        problem = "nested too deeply"
    elif not isinstance(e, yaml.YAMLError):  # a constructor's own error: `!!float "[]"`, `!!timestamp abc`
        problem = "a value that does not match its `!!` tag" + (f" ({e})" if isinstance(e, ValueError) else "")
    else:
        problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    return PlannerError(f"{where}:{at} invalid YAML: {problem}", "check indentation and `key: value` syntax")


def parse_yaml(text: str, where: str) -> Any:
    """The data of one YAML document; PlannerError naming `where` for anything the parser
    or its constructors reject (module docstring)."""
    try:
        return yaml.load(text, Loader=YAML_LOADER)
    except Exception as e:  # noqa: BLE001 - only the parser runs here: all of it is bad input
        raise _yaml_error(where, e) from None


def compose_yaml(text: str, where: str) -> Any:
    """The node tree of one YAML document (line numbers of its items)."""
    try:
        return yaml.compose(text, Loader=YAML_LOADER)
    except Exception as e:  # noqa: BLE001 - as parse_yaml
        raise _yaml_error(where, e) from None


def parse_json(text: str, where: str, hint: Optional[str] = None) -> Any:
    """The data of a JSON text; PlannerError naming `where` and the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PlannerError(f"{where}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}",
                           hint or "check the brackets and commas") from None
    except RecursionError:
        raise PlannerError(f"{where}: invalid JSON: nested too deeply", hint or "check the brackets") from None
    except ValueError as e:  # e.g. an integer literal longer than Python's int_max_str_digits
        raise PlannerError(f"{where}: invalid JSON: {e}", hint or "check the numbers") from None


def read_yaml(path: str | Path, hint: Optional[str] = None) -> Any:
    """Read and parse a YAML file (read_text, parse_yaml)."""
    return parse_yaml(read_text(path, hint), str(path))


def read_json(path: str | Path, hint: Optional[str] = None) -> Any:
    """Read and parse a JSON file (read_text, parse_json)."""
    return parse_json(read_text(path, hint), str(path), hint)


__all__ = ["MAX_FILE_BYTES", "YAML_LOADER", "compose_yaml", "exists", "is_dir", "is_file", "parse_json", "parse_yaml",
           "read_bytes", "read_json", "read_text", "read_yaml"]
