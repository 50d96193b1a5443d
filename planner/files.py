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

Writing: every file the planner writes (export -o, --plot, calibration profiles) goes
through `write_atomic`: the bytes go to a temporary file in the target's folder, are
flushed to disk (fsync), and the temporary file is renamed over the target (os.replace, an
atomic rename on POSIX and Windows). A write that fails part-way (disk full, a file-size
limit, an interrupt) leaves the previous file exactly as it was (issue 24).
`output_path` checks a path before a long computation; `locked` serialises the
read-modify-write of one file between processes (fcntl.flock on a side lock file).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import PlannerError

MAX_FILE_BYTES = 64 * 2**20  # 64 MiB: see the module docstring

# PyYAML's libyaml-based loader when available (yaml.__with_libyaml__), else the pure-Python one
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# lookups held for one run of many resolves of the same files (held_lookups): None outside one
_HELD: contextvars.ContextVar[Optional[dict]] = contextvars.ContextVar("planner_files_held", default=None)


@contextlib.contextmanager
def held_lookups():
    """Within it, what `held` computes is computed once a key: the files a name or path names and their bytes'
    hashes (catalog._source, catalog.model_source, plan.file_sha256), which `fit` asks again for each shown row's
    job (search.rows_warnings: about 0.1 ms a row of file-system calls and hashing for the same few files, whose
    answer cannot change within one command but by the files changing under it). An error is not held (it is
    raised again). Nested: the outermost's."""
    token = _HELD.set({}) if _HELD.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _HELD.reset(token)


def held(key: tuple, compute):
    """compute(), or within held_lookups the value it gave for `key` there."""
    memo = _HELD.get()
    if memo is None:
        return compute()
    try:
        return memo[key]
    except KeyError:
        value = memo[key] = compute()
        return value


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
    """The bytes of a regular file of at most `max_bytes`; PlannerError otherwise, with the caller's hint, else one
    that says what to check (README: every bad input gets `error: ...` and `hint: ...`)."""
    p = Path(path)
    try:
        st = os.stat(p)  # stat, not open: opening a FIFO blocks until a writer comes
    except FileNotFoundError:
        raise PlannerError(f"{p}: cannot read (no such file)", hint or MISSING_HINT) from None
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise name_too_long(p) from None
        raise PlannerError(f"{p}: cannot read ({e.strerror or e})", hint or UNREADABLE_HINT) from None
    except ValueError:  # a NUL byte: no file system takes it
        raise PlannerError(f"{str(p)!r}: not a valid path (it holds a NUL byte)", hint or MISSING_HINT) from None
    if stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"{p}: is a folder, not a file", hint or "give the path of a file in it, not the folder")
    if not stat.S_ISREG(st.st_mode):
        raise PlannerError(f"{p}: not a regular file (a device, FIFO or socket)", hint or "give the path of a saved file")
    if st.st_size > max_bytes:
        raise PlannerError(f"{p}: {st.st_size:,} bytes, more than the {max_bytes:,} a planner input may have",
                           hint or "give the right file; planner inputs are text files of kilobytes to megabytes")
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise PlannerError(f"{p}: cannot read ({e.strerror or e})", hint or UNREADABLE_HINT) from None
    if len(data) > max_bytes:  # grew since the stat
        raise PlannerError(f"{p}: more than the {max_bytes:,} bytes a planner input may have",
                           hint or "give the right file; planner inputs are text files of kilobytes to megabytes")
    return data


# read_bytes' hints where its caller gives none (a job file, a trainer config, a model or hardware file by path)
MISSING_HINT = "check the path: a relative path is read from the folder the command runs in"
UNREADABLE_HINT = "check that the file exists and is readable"


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


# ------------------------------------------------------------------------------ writing
def output_path(path: str | Path, what: str = "--output", hint: Optional[str] = None) -> Path:
    """`path` as a file the planner can write: a name of at most NAME_MAX bytes (a longer
    one would fail only at the write, after the computation), no NUL byte, an existing
    folder, not a folder itself. PlannerError (exit 2) naming `what` otherwise."""
    p = Path(path)
    hint = hint or "give a writable file path"
    if "\x00" in str(p):
        raise PlannerError(f"{what} {str(p)!r}: not a valid path (it holds a NUL byte)", hint)
    check_name(p)  # a name over NAME_MAX bytes (name_too_long)
    if not p.name or is_dir(p):
        raise PlannerError(f"{what} {str(p)!r}: is a folder, not a file", hint)
    folder = p.parent if str(p.parent) else Path(".")
    if not is_dir(folder):
        raise PlannerError(f"{what} {str(p)!r}: folder {str(folder)!r} does not exist", "create it first, or write elsewhere")
    return p


def write_atomic(path: str | Path, content: str | bytes, what: str = "--output", hint: Optional[str] = None,
                 durable: bool = True) -> Path:
    """Write `content` (text as UTF-8, or bytes) to `path` atomically (module docstring): a
    temporary file in the same folder, fsync, os.replace. The file keeps the old one's
    permission bits (a new one gets the umask's); a symbolic link is followed (its target
    is replaced, the link stays). On failure the temporary file is removed, the old file is
    untouched, and PlannerError names the file. `durable=False` skips the fsync (files in a
    private temporary folder that no crash needs to find: still never seen half-written)."""
    p = output_path(path, what, hint)
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    target = Path(os.path.realpath(p)) if os.path.islink(p) else p
    folder = target.parent if str(target.parent) else Path(".")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + target.name[:64] + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        mode = stat.S_IMODE(os.stat(target).st_mode) if is_file(target) else 0o666 & ~_umask()
        os.chmod(tmp, mode)  # mkstemp makes 0600
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        reason = e.strerror or str(e)
        if e.errno == errno.EFBIG:
            reason += ": the file-size limit (ulimit -f)"
        raise PlannerError(f"{what} {str(p)!r}: cannot write the file ({reason})",
                           (hint or "choose a writable path with free space") + "; the previous file, if any, is unchanged") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one existing file (os.path.samefile; False when either is absent)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def locked(path: str | Path, what: str = "--output"):
    """Hold an exclusive lock for a read-modify-write of `path` against other planner
    processes: fcntl.flock on `<path>.lock` beside it (the file itself is replaced by
    write_atomic, so the lock cannot be on it; the lock file stays, empty). Blocks until the
    other process is done. Without fcntl (Windows) it does not lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    p = output_path(path, what)
    lock = p.with_name(p.name[: NAME_MAX - 5] + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise PlannerError(f"{what} {str(p)!r}: cannot create the lock file {str(lock)!r} ({e.strerror or e})",
                           "choose a writable folder") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


__all__ = ["MAX_FILE_BYTES", "NAME_MAX", "YAML_LOADER", "compose_yaml", "exists", "is_dir", "is_file", "parse_json", "parse_yaml",
           "locked", "output_path", "read_bytes", "read_json", "read_text", "read_yaml", "same_file", "write_atomic"]
