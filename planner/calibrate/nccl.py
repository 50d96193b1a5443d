"""Read nccl-tests output and fit each collective's latency and bus bandwidth.

Units: bytes, seconds and bytes/s inside. The logs print time in microseconds and
bandwidth in GB/s (1e9 bytes/s) [1]; they are converted once, on reading.

What a log line means [1, 2]
    size  (B)      the bytes that algbw counts: the per-rank buffer for all_reduce,
                   broadcast, reduce and sendrecv; the whole gathered/scattered array
                   (per-rank count * n) for all_gather, reduce_scatter, alltoall, gather
                   and scatter. nccl-tests prints it in the first column for every test.
    time  (us)     mean time of one operation.
    algbw (GB/s)   size / time.
    busbw (GB/s)   algbw * factor(n), factor from `BUSBW_FACTORS` [1, 2].

Output formats read (nccl-tests' own history [2][7])
    since 2022     one header for every test: size count type redop root, then time algbw
                   busbw #wrong (a count of wrong elements: a row with #wrong > 0 is
                   dropped) for out-of-place and in-place; Rank lines with a Group field;
                   `cputime` instead of `time` under -C 1.
    before 2022    a header per test: size count type redop (all_reduce, reduce_scatter,
                   alltoall), size count type root (broadcast), size count type
                   (all_gather); `error` = the largest deviation from the expected result
                   (%5.0le: 5e-07 for a float sum is rounding, not a failure; nccl-tests
                   counts failures in its '# Out of bounds values' footer, reported here);
                   Rank lines without Group.
    The units line is read in column order (only size, count, time, algbw and busbw
    print a unit), so either layout is checked against its own header. Rows without a
    header are read by their field count (13, 12, 11 and the out-of-place-only 9, 8, 7).

What the file implies, and what is asked (`resolve_sweep`, `missing_error`)
    collective     the *_perf command line or '# Collective test starting' header; else
                   --collective; else the table: busbw/algbw above 1 exists only for
                   all_reduce (2(n-1)/n); below 1 with a reduction in redop only for
                   reduce_scatter (`collectives_from_table`).
    ranks          a complete set of Rank lines; else busbw/algbw, each printed digit
                   giving an interval (`ranks_from_ratio`), bounded below by the largest
                   Rank line seen; else --ranks.
    nodes, scope   host names of a complete set of Rank lines; else --nodes (servers).
                   The scope is intra-node when the ranks share one NVLink domain: one
                   server, or with --hardware up to the servers of a multi-server domain
                   (GB200 NVL72: 18 trays of 4 GPUs are one 72-GPU domain).
    Every fact that is still unknown, for every table of every file, comes back in one
    error with the options that give it. Contradictions (a Rank line beyond the table's
    rank count, a collective the ratios exclude) and tables with fewer than two sizes in
    range are errors that name the line.

The time model (fitted per collective, scope and rank count)
    Let S_eff = size * factor(n): the bytes a rank must move over its busiest link, so
    that bus bandwidth B is comparable to a link's rate [1]. One regime is Hockney's
    alpha-beta line [4]

        t(S) = alpha + S_eff / B            (so busbw(S) = S_eff / t(S) -> B for large S).

    NCCL does not run one algorithm at every size: for each (algorithm, protocol) pair it
    predicts `latency + size / bandwidth` and runs the cheapest [3], and it raises the
    number of channels with the size. The measured curve is therefore the lower envelope
    of a few such lines:

        t(S) = min_k (alpha_k + S_eff / B_k),   k = 1 or 2.

    One line is the classic model. Two lines describe the common case in the calibration
    range: a regime with fewer channels or a low-latency protocol that wins up to some
    size, and the bulk-transfer regime (Simple protocol, all channels) whose B_k is the
    plateau bus bandwidth. The second line is kept only if the Bayesian information
    criterion [6] prefers it (Laplace likelihood, see below), and only if each line is the
    cheaper one at two or more measured sizes; otherwise one line is fitted. No third line:
    a later switch (NVLS all-reduce on 8 H100 turns on at 4 GiB in the aws-p5 log, busbw
    444 -> 476 GB/s) covers two or three sizes of a sweep, too few to fit a line to; it
    shows up in the maximum error instead.

    The fit uses the rows at or above `min_bytes` (default 1 MiB, `DEFAULT_MIN_BYTES`):
    that is where the messages of LLM training collectives (gradient buckets, tensor-
    parallel activations, parameter shards) lie, and below it nccl-tests measures launch
    and LL-protocol latency that these messages never see. The smallest measured time of
    each sweep is kept in the profile for reference, not fitted.

Fit
    Residuals are relative errors in the time domain, r = (t_model - t_meas) / t_meas, so
    a 20 us row and a 60 ms row weigh the same. Out-of-place and in-place rows are separate
    observations. scipy.optimize.least_squares minimises sum rho(r^2) with the `soft_l1`
    loss [5] and f_scale = `ROBUST_SCALE` (2 %): quadratic for |r| below 2 %, linear
    above, i.e. a least-absolute-deviation fit with a smooth core. Shared-cluster nccl-tests
    logs contain single rows several times slower than their neighbours (the 2-node H100
    log in the tests has 8 KiB taking 296 us between 41 us rows); a squared loss lets such
    a row drag the whole line. The 2 % core is the order of the jitter between repeated
    measurements of one size: the median |in-place / out-of-place - 1| of the time column
    is 0.2-1.6 % in the four single-node or quiet logs of tests/data/nccl_logs and 3.1 % and
    6.9 % in the two noisy 2-node ones. The fitted figures move little with it: for
    f_scale from 0.5 % to 10 % every reference log's median busbw error changes by less
    than 3 percentage points. Under the Laplace error model the log-likelihood is
    -n ln(mean |r|) + const, giving BIC = 2 n ln(mean |r|) + p ln n with p = 2 per line.

    A two-line fit is started from every split of the measured sizes into a lower and an
    upper set (each line first fitted by weighted linear least squares on its side) and the
    best envelope kept, so the result does not depend on a random start. A log with more
    than MAX_CUT_STARTS splits (a dense -i sweep) is split on every k-th size and the best
    envelope refitted on all points, so the fit stays linear in the log's length.

The residuals reported (and asserted by the tests) are those of bus bandwidth at sizes of
at least 1 MiB (`EVAL_MIN_BYTES`): busbw_model / busbw_measured - 1, busbw_measured being
the log's busbw column (or size * factor / time where the log omits it).

What a log allows
    A log can be too noisy for any model. `monotone_bound` gives the least max |busbw
    error| that any model in which more bytes never take less time can reach on a set of
    points. `nccl_form_bound` gives the same for any model of [3]'s form, the fastest of
    several latency + size / bandwidth lines with any figures (this fit and
    planner/comm.py are both of that form). `compare_to_model` reports both beside the
    uncalibrated model's error, and `noisy_sizes` warns, naming the two rows, when a
    table's sizes >= 64 MiB bound every model above 5 %.

References
[1] NVIDIA nccl-tests, doc/PERFORMANCE.md: algbw, busbw and the bus bandwidth factors.
[2] NVIDIA nccl-tests, src/<collective>.cu `<Coll>GetBw()` (busbw factor per test, e.g.
    sendrecv factor 1), src/common.cu (table layout; '# Avg bus bandwidth' = mean busbw of
    all rows), src/util.cu `writeBenchmarkLineBody()` (`N/A` in #wrong when not checking).
[3] NVIDIA NCCL, src/graph/tuning.cc `ncclTopoGetAlgoTime()`: time = latency +
    size / bandwidth per (algorithm, protocol); the enqueue picks the least time.
[4] R. W. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko CS-2",
    Parallel Computing 20(3), 1994: t(n) = t0 + n / r_inf.
[5] SciPy, scipy.optimize.least_squares, loss='soft_l1': rho(z) = 2((1 + z)^0.5 - 1).
[6] G. Schwarz, "Estimating the dimension of a model", Annals of Statistics 6(2), 1978.
[7] NVIDIA nccl-tests format history: src/all_gather.cu at commit ec1b5e22 and src/common.cu
    at commit 0f8c785a (per-test print_header, `error` printed %5.0le, '#   Rank %2d Pid'
    lines, '# nThread ... validation: %d'); the current src/common.cu (root and #wrong
    columns, Rank lines with Group, -C cputime). aws-parallelcluster's EFA integration test
    (tests/integration-tests/tests/efa/test_efa.py, a version in the code index) records
    the expected output of nccl-tests 2.10.0 (error, no root) and 2.13.8 (root, #wrong).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from scipy.optimize import least_squares

from ..errors import PlannerError
from ..files import read_bytes
from ..profile import BUSBW_FACTORS, ROBUST_SCALE, SCOPES, busbw_factor, envelope_time

US = 1e-6  # the time column is in microseconds [1]
# nccl-tests prints the time with %7.2f below 100 us (src/common.cu, the timeStr of the
# result row [1]): the smallest non-zero time it can print is 0.01 us. A smaller one (e.g.
# 1e-308) did not come from nccl-tests and would overflow the fit's 1/time weights.
MIN_PRINTED_TIME_US = 0.01
GBPS = 1e9  # the algbw / busbw columns are in GB/s, GB = 1e9 bytes [1]
MiB = 2**20
EVAL_MIN_BYTES = MiB  # residuals are reported at and above 1 MiB (issue 5)
MODEL_CHECK_MIN_BYTES = 64 * MiB  # the sizes the default model is held to (issue 11)
# A row's size is a buffer every GPU of the test holds (the all-reduce / all-to-all buffer,
# the gathered all-gather output, the reduce-scatter input): 4 TiB is 14x the largest HBM in
# hardware_db (GB300, 288 GB), so a larger size is a typo or a corrupted row, not a measurement.
MAX_ROW_BYTES = 4 * 2**40
DEFAULT_MIN_BYTES = MiB  # calibration range starts here (see the module docstring)
MAX_LINES = 2
# ROBUST_SCALE (soft_l1 f_scale: relative residual below which the loss is quadratic) and
# SCOPES are the profile's (planner/profile.py): the fit settings it records.


# --------------------------------------------------------------------- bus bandwidth factors
# busbw = algbw * factor(n): BUSBW_FACTORS and busbw_factor (planner/profile.py, beside the
# fitted figures they give meaning to [1, 2]); their formulas, for messages:
FACTOR_FORMULA = {
    "all_reduce": "2*(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_gather": "(n-1)/n",
    "alltoall": "(n-1)/n",
    "gather": "(n-1)/n",
    "scatter": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "sendrecv": "1",
}
# Ratios busbw/algbw that do not depend on n cannot tell the rank count.
_RANK_FREE = {"broadcast", "reduce", "sendrecv"}

_ALIASES = {re.sub(r"[^a-z]", "", c): c for c in BUSBW_FACTORS}


def normalize_collective(text: str, what: str = "--collective") -> str:
    """'all_reduce', 'allreduce', 'all-reduce', 'all_reduce_perf' -> 'all_reduce'."""
    key = re.sub(r"[^a-z]", "", re.sub(r"_perf(_mpi)?$", "", str(text).strip().lower()))
    if key not in _ALIASES:
        raise PlannerError(
            f"{what}: unknown collective {text!r}",
            "valid: " + ", ".join(BUSBW_FACTORS) + " (nccl-tests' <name>_perf binaries)",
        )
    return _ALIASES[key]


# --------------------------------------------------------------------------- parsed data
@dataclass(frozen=True)
class LineIssue:
    """A line that was not used, and why (reported as a warning with its line number)."""

    path: str
    line: int
    reason: str
    text: str

    def __str__(self) -> str:
        t = self.text.strip()
        t = t if len(t) <= 80 else t[:77] + "..."
        return f"{self.path}:{self.line}: {self.reason}: {t!r}"


@dataclass
class Point:
    """One measured operation: one placement (out-of-place or in-place) of one row."""

    line: int
    size: int  # bytes, the nccl-tests `size` column (algbw bytes)
    in_place: bool
    time: float  # s
    algbw: Optional[float]  # B/s, None if the log omits it or prints N/A
    busbw: Optional[float]  # B/s
    algbw_tol: float = 0.0  # B/s: half a unit of the last printed digit
    busbw_tol: float = 0.0


@dataclass
class Context:
    """What the log says about the run that a table belongs to."""

    collective: Optional[str] = None
    collective_from: Optional[str] = None
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (host, gpu)
    rank_lines: list[int] = field(default_factory=list)
    rank_line_of: dict[int, int] = field(default_factory=dict)  # rank -> line of its Rank line
    nccl_version: Optional[str] = None
    ngpus: Optional[int] = None
    nthreads: Optional[int] = None
    has_rows: bool = False


@dataclass
class Sweep:
    """One table of rows (sizes increasing), with what the log and the options say about it."""

    path: str
    first_line: int
    ctx: Context
    points: list[Point] = field(default_factory=list)
    dtypes: set = field(default_factory=set)
    redops: set = field(default_factory=set)
    last_size: int = -1
    # resolved by resolve_sweep()
    collective: Optional[str] = None
    collective_from: Optional[str] = None
    ranks: Optional[int] = None
    ranks_from: Optional[str] = None
    nodes: Optional[int] = None
    nodes_from: Optional[str] = None
    scope: Optional[str] = None
    scope_from: Optional[str] = None

    @property
    def hosts(self) -> list[str]:
        return sorted({h for h, _ in self.ctx.ranks.values()})

    @property
    def gpus(self) -> list[str]:
        return sorted({g for _, g in self.ctx.ranks.values() if g})


@dataclass
class ParsedLog:
    path: str
    name: str
    sha256: str
    lines: int
    sweeps: list[Sweep]
    issues: list[LineIssue]
    provenance: list[str]
    ignored_debug_lines: int = 0


# ------------------------------------------------------------------------------- parsing
_PREFIXES = (
    re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:\s?"),  # mpirun --tag-output
    re.compile(r"^\s*\d+:\s"),  # srun --label
)
_TOOL = re.compile(r"(?<![A-Za-z0-9])(all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|reduce|gather|scatter)_perf(?:_mpi)?\b")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_NTHREAD = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_RANK = re.compile(
    r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_VERSION = re.compile(r"NCCL version\s+(\S+)")
_LIBRARY = re.compile(r"nccl-library=(\d+)")  # '# nccl-tests version 2.18.2 nccl-headers=23007 nccl-library=23007'
_CONCLUDED = re.compile(r"Collective test concluded")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_DEBUG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")
_SOURCE = re.compile(r"^#\s*source\s*:", re.IGNORECASE)

_INT = re.compile(r"^-?\d[\d_,]*$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_NA = {"n/a", "na", "nan", "-"}
_DTYPES = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "fp8_e4m3", "fp8_e5m2", "f8e4m3", "f8e5m2", "char", "int", "float16", "float32", "float64", "bf16",
}
_KNOWN_COLS = {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "wrong", "error"}
_HEAD_PREFIX = ["size", "count", "type", "redop", "root"]
_GROUP = ["time", "algbw", "busbw", "wrong"]
_GROUP_OLD = ["time", "algbw", "busbw", "error"]  # before 2022: the max deviation, not a count [2][7]
# Column layouts of nccl-tests tables without a header line [2][7]: 13 fields (since 2022:
# size count type redop root), 12 fields (before: size count type redop, or size count type
# root for broadcast), 11 fields (before: size count type, all_gather), and the same with
# only the out-of-place group.
_HEADERLESS = {
    13: (_HEAD_PREFIX, [_GROUP, _GROUP]),
    9: (_HEAD_PREFIX, [_GROUP]),
    12: (_HEAD_PREFIX[:4], [_GROUP_OLD, _GROUP_OLD]),
    8: (_HEAD_PREFIX[:4], [_GROUP_OLD]),
    11: (_HEAD_PREFIX[:3], [_GROUP_OLD, _GROUP_OLD]),
    7: (_HEAD_PREFIX[:3], [_GROUP_OLD]),
}


@dataclass(frozen=True)
class Layout:
    prefix: list  # column names before the first `time`
    groups: list  # [[time, algbw, busbw, wrong], ...]; first = out-of-place
    line: Optional[int]  # header line, None if inferred

    @property
    def width(self) -> int:
        return len(self.prefix) + sum(len(g) for g in self.groups)

    @property
    def first_group_width(self) -> int:
        return len(self.prefix) + len(self.groups[0])


def _strip_prefix(line: str) -> str:
    for p in _PREFIXES:
        m = p.match(line)
        if m:
            return line[m.end():]
    return line


def _header_layout(text: str, lineno: int) -> Optional[Layout]:
    """A table header such as '#  size  count  type  redop  root  time  algbw  busbw #wrong ...'."""
    toks = [t.strip(".:").lower() for t in text.replace("#", " ").split()]
    toks = ["time" if t == "cputime" else t for t in toks]  # nccl-tests -C 1 (report_cputime) [2]
    if not toks or "size" not in toks or "time" not in toks or "busbw" not in toks:
        return None
    if not set(toks) <= _KNOWN_COLS:
        return None
    first = toks.index("time")
    prefix, groups = toks[:first], []
    for t in toks[first:]:
        if t == "time":
            groups.append([t])
        else:
            groups[-1].append(t)
    if prefix[:1] != ["size"] or len(groups) > 2:
        return None
    return Layout(prefix, groups, lineno)


def _is_units_line(text: str) -> bool:
    toks = text.replace("#", " ").split()
    return bool(toks) and all(re.fullmatch(r"\(.*\)", t) for t in toks)


# The unit nccl-tests prints under each column that has one [2]; blank cells (count's type,
# redop, root, #wrong/error) print nothing, so the units line lists these in column order.
_UNITS = {"size": "(B)", "count": "(elements)", "time": "(us)", "algbw": "(GB/s)", "busbw": "(GB/s)"}


def _check_units(text: str, layout: "Layout", name: str, lineno: int) -> None:
    """The units line under a header, read in column order: every column with a unit
    (size, count, time, algbw, busbw) has its own token, the blank ones have none. A time in
    anything but microseconds or a bandwidth in anything but GB/s is an error naming the line."""
    toks = text.replace("#", " ").split()
    cols = [c for c in layout.prefix + [c for g in layout.groups for c in g] if c in _UNITS]
    for col, tok in zip(cols, toks):
        if tok.lower() != _UNITS[col].lower() and col in ("time", "algbw", "busbw"):
            raise PlannerError(f"{name}:{lineno}: {col} unit {tok} (nccl-tests prints {_UNITS[col]})",
                               "give unmodified nccl-tests output")


def _is_placement_line(text: str) -> bool:
    toks = text.replace("#", " ").split()
    return bool(toks) and set(toks) <= {"out-of-place", "in-place"}


def _num(tok: str) -> tuple[Optional[float], float]:
    """A printed number and half a unit of its last digit; (None, 0) for N/A."""
    if tok.lower() in _NA:
        return None, 0.0
    if not _FLOAT.match(tok):
        raise ValueError(tok)
    value = float(tok)
    if not math.isfinite(value):  # 1e400: beyond a double (nccl-tests prints %f figures)
        raise ValueError(tok)
    mant, _, exp = tok.lower().partition("e")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    tol = float(f"5e{int(exp or 0) - decimals - 1}")  # half a unit of the last digit, without 10.0**int overflow
    return value, tol


def _read_row(toks: list[str], layout: Layout) -> tuple[dict, list[dict]]:
    """Fields of the prefix and one dict per placement; ValueError with a reason."""
    pre = dict(zip(layout.prefix, toks[: len(layout.prefix)]))
    size_tok = pre["size"]
    if not _INT.match(size_tok) or size_tok.startswith("-"):
        raise ValueError(f"size {size_tok!r} is not a byte count")
    row = {"size": int(size_tok.replace("_", "").replace(",", ""))}
    if row["size"] > MAX_ROW_BYTES:
        raise ValueError(f"size {row['size']:,} B is more than a GPU holds (nccl-tests allocates each row's "
                         f"buffer on every GPU; at most {MAX_ROW_BYTES:,} B read)")
    if "count" in pre:
        if not _INT.match(pre["count"]):
            raise ValueError(f"count {pre['count']!r} is not an integer")
    if "type" in pre:
        if pre["type"].lower() not in _DTYPES:
            raise ValueError(f"type {pre['type']!r} is not an nccl-tests data type")
        row["type"] = pre["type"]
    if "redop" in pre:
        if not re.fullmatch(r"[a-z]+", pre["redop"]):
            raise ValueError(f"redop {pre['redop']!r} is not a reduction name")
        row["redop"] = pre["redop"]
    if "root" in pre and not _INT.match(pre["root"]):
        raise ValueError(f"root {pre['root']!r} is not an integer")
    placements = []
    pos = len(layout.prefix)
    for gi, group in enumerate(layout.groups):
        cells = toks[pos : pos + len(group)]
        pos += len(group)
        if len(cells) < len(group):
            break
        vals = {}
        for name, tok in zip(group, cells):
            try:
                vals[name] = _num(tok)
            except ValueError:
                raise ValueError(f"{name} {tok!r} is not a number or N/A") from None
        placements.append({"in_place": gi == 1, **vals})
    return row, placements


def _decode(path: Path) -> tuple[str, str]:
    """The text of a log and the SHA-256 of its bytes (one read)."""
    data = read_bytes(path, "give the path of a saved nccl-tests output (e.g. all_reduce_perf ... > log.txt)")
    if not data.strip():
        raise PlannerError(f"{path}: the file is empty", "give the saved output of an nccl-tests binary such as all_reduce_perf")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise PlannerError(
            f"{path}: not a text file (NUL byte at offset {nul})",
            "give the text output of an nccl-tests binary (all_reduce_perf ... > log.txt), not a binary or archive",
        )
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\f\v")
    if bad > 0.01 * len(text):
        raise PlannerError(
            f"{path}: not a text file ({bad} of {len(text)} characters are not printable text)",
            "give the text output of an nccl-tests binary (all_reduce_perf ... > log.txt)",
        )
    return text, hashlib.sha256(data).hexdigest()


def parse_log(path: str | Path) -> ParsedLog:
    """Read one nccl-tests output file into sweeps of measured points.

    Accepted: the full output or any part of it containing a result table; mpirun
    (`[1,0]<stdout>:`) and srun (`0: `) prefixes; tables with or without header, with or
    without the in-place columns, with only size/time/algbw/busbw columns (if a header
    names them), sizes with `_` or `,` separators, `N/A` cells, several sweeps in one file,
    NCCL_DEBUG lines, and the trailing `# Out of bounds` / `# Avg bus bandwidth` lines.
    Every other line is returned in `issues` with its line number; nothing is guessed.
    Raises PlannerError for empty, binary or unreadable files and for files without any
    result row.
    """
    p = Path(path)
    text, sha = _decode(p)
    name = p.name
    issues: list[LineIssue] = []
    provenance: list[str] = []
    sweeps: list[Sweep] = []
    ctx = Context()
    layout: Optional[Layout] = None
    cur: Optional[Sweep] = None
    debug = 0
    lines = text.splitlines()

    def new_context() -> None:
        nonlocal ctx, cur, layout
        if ctx.has_rows:
            ctx, cur, layout = Context(), None, None

    for lineno, raw in enumerate(lines, start=1):
        line = _strip_prefix(raw)
        s = line.strip()
        if not s:
            continue
        if _SOURCE.match(s):  # a human's provenance note: recorded, never parsed for facts
            provenance.append(s.lstrip("#").strip())
            continue
        if _DEBUG.search(s):
            debug += 1
            continue
        if _CONCLUDED.search(s):
            continue
        m = _LIBRARY.search(s)
        if m and s.startswith("#"):
            new_context()
            code = int(m.group(1))  # NCCL_VERSION_CODE = major*10000 + minor*100 + patch (nccl.h, NCCL >= 2.9)
            ctx.nccl_version = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
            continue
        m = _STARTING.search(s)
        if m and s.startswith("#"):
            new_context()
            try:
                ctx.collective = normalize_collective(m.group(1), "header")
                ctx.collective_from = f"header (line {lineno})"
            except PlannerError:
                issues.append(LineIssue(name, lineno, "a collective this tool does not model", s))
            continue
        m = _TOOL.search(s)
        if m and not _header_layout(s, lineno):
            new_context()
            coll = normalize_collective(m.group(1), "command line")
            if ctx.collective and ctx.collective != coll:
                raise PlannerError(
                    f"{name}:{lineno}: command line runs {coll} but {ctx.collective_from} says {ctx.collective}",
                    "split the log so that each file holds one test",
                )
            ctx.collective, ctx.collective_from = coll, f"command line (line {lineno})"
            continue
        m = _NTHREAD.match(s)
        if m:
            new_context()
            ctx.nthreads, ctx.ngpus = int(m.group(1)), int(m.group(2))
            continue
        m = _RANK.match(s)
        if m:
            new_context()
            rank = int(m.group(1))
            ctx.ranks[rank] = (m.group(2), m.group(5).strip())
            ctx.rank_lines.append(lineno)
            ctx.rank_line_of[rank] = lineno
            continue
        m = _VERSION.search(s)
        if m:
            ctx.nccl_version = m.group(1)
            continue
        hdr = _header_layout(s, lineno)
        if hdr:
            layout, cur = hdr, None
            continue
        if _is_units_line(s):
            if layout:
                _check_units(s, layout, name, lineno)
            continue
        if _is_placement_line(s):
            continue
        m = _OOB.match(s)
        if m and int(m.group(1)) > 0:
            issues.append(LineIssue(name, lineno, f"the run reports {m.group(1)} out-of-bounds value(s): some rows "
                                    "failed nccl-tests' data check (an `error` column does not say which)", s))
            continue
        if _AVG.match(s):
            cur = None  # the sweep ends here; its average is not a measurement [2]
            continue
        if s.startswith("#"):
            continue  # nccl-tests' own comments: '# Using devices', '# Out of bounds values', ...
        toks = s.split()
        if not _INT.match(toks[0]):
            issues.append(LineIssue(name, lineno, "not nccl-tests output", s))
            continue
        lay = layout
        if lay is None:
            if len(toks) not in _HEADERLESS:
                issues.append(LineIssue(name, lineno, f"a row of {len(toks)} fields and no table header to name them", s))
                continue
            pre, groups = _HEADERLESS[len(toks)]
            if len(pre) == 4 and _INT.match(toks[3]):  # a root where a redop would be (broadcast)
                pre = _HEAD_PREFIX[:3] + ["root"]
            lay = Layout(pre, groups, None)
            issues.append(
                LineIssue(name, lineno, f"no table header before this row; read as the {len(toks)}-field nccl-tests layout "
                          f"({' '.join(pre)} + {len(groups)} x {' '.join(groups[0]).replace('wrong', '#wrong')})", s)
            )
            layout = lay
        if len(toks) != lay.width:
            if len(lay.groups) == 2 and len(toks) == lay.first_group_width:
                issues.append(LineIssue(name, lineno, "in-place columns missing; out-of-place kept", s))
            else:
                issues.append(LineIssue(name, lineno, f"{len(toks)} fields where the table header (line {lay.line}) has {lay.width}"
                                        if lay.line else f"{len(toks)} fields where the table has {lay.width}", s))
                continue
        try:
            row, placements = _read_row(toks, lay)
        except ValueError as e:
            issues.append(LineIssue(name, lineno, str(e), s))
            continue
        if cur is None or row["size"] <= cur.last_size:
            cur = Sweep(path=name, first_line=lineno, ctx=ctx)
            sweeps.append(cur)
        cur.last_size = row["size"]
        ctx.has_rows = True
        if "type" in row:
            cur.dtypes.add(row["type"])
        if "redop" in row:
            cur.redops.add(row["redop"])
        for pl in placements:
            t, _ = pl["time"]
            where = "in-place" if pl["in_place"] else "out-of-place"
            if t is None:
                issues.append(LineIssue(name, lineno, f"{where} time is N/A; not used", s))
                continue
            if t <= 0:
                issues.append(LineIssue(name, lineno, f"{where} time {t} is not positive; not used", s))
                continue
            if t < MIN_PRINTED_TIME_US:
                issues.append(LineIssue(name, lineno, f"{where} time {t:g} us is below the {MIN_PRINTED_TIME_US} us "
                                        "nccl-tests prints at the least (%7.2f); not used", s))
                continue
            wrong = pl.get("wrong", (None, 0.0))[0]  # old versions print a max `error`, not a count
            if wrong is not None and wrong != 0:
                issues.append(LineIssue(name, lineno, f"{where} #wrong = {wrong:g} (data errors); not used", s))
                continue
            alg, alg_tol = pl.get("algbw", (None, 0.0))
            bus, bus_tol = pl.get("busbw", (None, 0.0))
            huge = [f"{k} {v:g} GB/s" for k, v, tol in (("algbw", alg, alg_tol), ("busbw", bus, bus_tol))
                    if v is not None and not math.isfinite(v * GBPS + tol * GBPS)]
            if huge:  # beyond a double once in B/s
                issues.append(LineIssue(name, lineno, f"{where} {huge[0]} is out of range; not used", s))
                continue
            cur.points.append(
                Point(
                    line=lineno, size=row["size"], in_place=pl["in_place"], time=t * US,
                    algbw=None if alg is None else alg * GBPS, busbw=None if bus is None else bus * GBPS,
                    algbw_tol=alg_tol * GBPS, busbw_tol=bus_tol * GBPS,
                )
            )
    sweeps = [sw for sw in sweeps if sw.points]
    if not sweeps:
        shown = "; ".join(f"line {i.line}: {i.reason}" for i in issues[:3])
        raise PlannerError(
            f"{p}: no nccl-tests result rows found" + (f" ({len(issues)} unreadable line(s): {shown})" if issues else ""),
            "expected the table an nccl-tests binary prints, e.g. '#  size  count  type  redop  root  time  algbw  busbw "
            "#wrong ...' followed by rows of numbers",
        )
    return ParsedLog(str(p), name, sha, len(lines), sweeps, issues, provenance, debug)


# ------------------------------------------------------------------ ranks, nodes, scope
def ranks_from_ratio(collective: str, points: list[Point], where: str = "") -> Optional[tuple[int, int]]:
    """The integer rank counts n consistent with every row's busbw/algbw = factor(n).

    Each printed value is exact to half a unit of its last digit, so each row gives an
    interval of ratios, hence of n; the answer is (lowest, highest) integer n in all of them
    (highest may be `math.inf`), or None when no row carries both columns. Raises
    PlannerError when no n fits: the rows then do not belong to `collective`.
    """
    if collective in _RANK_FREE:
        return None
    lo, hi, used = 1.0, math.inf, 0
    for p in points:
        if p.algbw is None or p.busbw is None or p.algbw - p.algbw_tol <= 0:
            continue
        r_lo = max(p.busbw - p.busbw_tol, 0.0) / (p.algbw + p.algbw_tol)
        r_hi = (p.busbw + p.busbw_tol) / (p.algbw - p.algbw_tol)
        cap = 2.0 if collective == "all_reduce" else 1.0  # factor(n) -> cap as n -> inf
        # factor(n) = cap*(n-1)/n  =>  n = cap/(cap - r)
        if r_lo >= cap:  # no rank count reaches it: factor(n) < cap for every n
            raise PlannerError(
                f"{where}line {p.line}: busbw/algbw = {r_lo:.6g} is at or above {cap:g}, which {collective} approaches "
                f"but never reaches (factor {FACTOR_FORMULA[collective]})",
                "check the collective (--collective) and that the busbw and algbw columns are unmodified",
            )
        n_lo = cap / (cap - r_lo)
        n_hi = cap / (cap - r_hi) if r_hi < cap else math.inf
        lo, hi = max(lo, n_lo), min(hi, n_hi)
        used += 1
    if not used:
        return None
    a, b = math.ceil(lo - 1e-9), (math.floor(hi + 1e-9) if math.isfinite(hi) else math.inf)
    if a > b:
        raise PlannerError(
            f"{where}busbw/algbw ratios of the rows fit no rank count for {collective} (factor {FACTOR_FORMULA[collective]})",
            "check the collective (--collective) and that the busbw column is unmodified",
        )
    return a, b


# Reductions nccl-tests prints in its redop column [2]; a table of a collective without one
# prints `none` (all_gather, alltoall, broadcast, gather, scatter, sendrecv).
_REDUCTIONS = {"sum", "prod", "min", "max", "avg", "mulsum", "premulsum"}


def collectives_from_table(sw: Sweep) -> list[str]:
    """The collectives a table's own numbers allow, by nccl-tests' factor table [1, 2]:
    busbw/algbw above 1 exists only for all_reduce (2(n-1)/n); below 1 it is (n-1)/n, with a
    reduction in the redop column only reduce_scatter; 1 leaves broadcast, reduce and
    sendrecv (and all_reduce on 2 ranks). Empty when no row has both bandwidths."""
    lo, hi, used = 0.0, math.inf, 0
    for p in sw.points:
        if p.algbw is None or p.busbw is None or p.algbw - p.algbw_tol <= 0:
            continue
        lo = max(lo, max(p.busbw - p.busbw_tol, 0.0) / (p.algbw + p.algbw_tol))
        hi = min(hi, (p.busbw + p.busbw_tol) / (p.algbw - p.algbw_tol))
        used += 1
    if not used or lo > hi:
        return []
    reducing = bool(sw.redops) and sw.redops <= _REDUCTIONS
    plain = bool(sw.redops) and sw.redops == {"none"}
    out = []
    if hi > 1.0:
        out.append("all_reduce")
    if lo < 1.0:
        out += [c for c in ("reduce_scatter", "all_gather", "alltoall", "gather", "scatter")
                if not (reducing and c != "reduce_scatter") and not (plain and c == "reduce_scatter")]
    if lo <= 1.0 <= hi:
        out += [c for c in ("broadcast", "reduce", "sendrecv")
                if not (reducing and c != "reduce") and not (plain and c == "reduce")]
    return sorted(set(out), key=list(BUSBW_FACTORS).index)


@dataclass(frozen=True)
class Missing:
    """A fact a table needs that neither its log nor the options give."""

    where: str  # file:line of the table
    option: str  # the option that gives it
    what: str  # the fact, and what the log does say about it

    def __str__(self) -> str:
        return f"{self.where}: {self.what} -> {self.option}"


def _domains(nodes: int, hardware) -> int:
    """NVLink domains that `nodes` servers fill: one per server, unless the hardware's NVLink
    domain spans several (GB200 NVL72: 18 trays of 4 GPUs in one 72-GPU domain)."""
    if hardware is None or hardware.nvlink_domain <= hardware.gpus_per_node:
        return nodes
    per = max(1, hardware.nvlink_domain // hardware.gpus_per_node)
    return -(-nodes // per)


def resolve_sweep(
    sw: Sweep,
    collective: Optional[str] = None,
    ranks: Optional[int] = None,
    nodes: Optional[int] = None,
    scope: Optional[str] = None,
    warn: Callable[[str], None] = lambda m: None,
    hardware=None,
) -> list[Missing]:
    """Decide the collective, rank count, node count and scope of a sweep; return the facts
    that remain unknown (empty when the sweep is resolved).

    The log comes first, then the options, then what the table's numbers imply; conflicts
    between log and options are reported through `warn`, contradictions raise PlannerError
    naming the line. Collective: the command line or header, else --collective, else the
    one collective busbw/algbw and the redop column allow (`collectives_from_table`).
    Ranks: a complete set of `Rank N` lines (0..N-1), else busbw/algbw (`ranks_from_ratio`)
    bounded below by the largest Rank line seen, else --ranks. Nodes: distinct hosts of a
    complete set of Rank lines, else --nodes (servers; on hardware whose NVLink domain spans
    servers, GB200 NVL72, the scope counts NVLink domains: 18 trays are one domain). Scope:
    intra-node if the ranks share one NVLink domain, else inter-node, unless --scope.
    `hardware`: a schema.Hardware (gpus_per_node, nvlink_domain) or None.
    """
    where = f"{sw.path}:{sw.first_line}"
    ctx = sw.ctx
    missing: list[Missing] = []
    ids = sorted(ctx.ranks)
    complete = bool(ids) and ids == list(range(len(ids)))
    floor = ids[-1] + 1 if ids else 1  # the largest Rank line seen bounds the count below
    floor_txt = f"; Rank line {ctx.rank_line_of[ids[-1]]} names rank {ids[-1]}" if ids else ""
    # collective
    implied = collectives_from_table(sw)
    if ctx.collective:
        sw.collective, sw.collective_from = ctx.collective, ctx.collective_from
        if collective and collective != ctx.collective:
            warn(f"{where}: the log's {ctx.collective_from} says {ctx.collective}; --collective {collective} not used for this table")
    elif collective:
        sw.collective, sw.collective_from = collective, "--collective"
    elif len(implied) == 1:
        sw.collective = implied[0]
        sw.collective_from = "busbw/algbw > 1" if implied[0] == "all_reduce" else "busbw/algbw < 1 and a reduction in redop"
    else:
        allowed = ", ".join(implied) if implied else "no row has both algbw and busbw"
        missing.append(Missing(where, "--collective", f"which collective (no *_perf command line or test header; "
                                                      f"busbw/algbw allows: {allowed})"))
    # ranks
    if sw.collective is None:
        # the count follows from busbw/algbw once the collective is known: ask only if no
        # collective the table allows would give it
        pinned = complete or ranks or (implied and all(_ratio_pins(sw, c, floor) for c in implied))
        if not pinned:
            missing.append(Missing(where, "--ranks", f"the rank count (busbw/algbw does not tell it{floor_txt})"))
    else:
        ratio = ranks_from_ratio(sw.collective, sw.points, f"{where}: {sw.collective} from {sw.collective_from}: ")
        if ratio is None and sw.collective not in _RANK_FREE:
            ratio_txt = "no row has both algbw and busbw"
        elif ratio is None:
            ratio_txt = f"busbw = algbw for {sw.collective} at any rank count"
        else:
            ratio_txt = f"busbw/algbw allows n = {ratio[0]}" + ("" if ratio[0] == ratio[1] else f"..{ratio[1]}")
        bounded = None if ratio is None else (max(ratio[0], floor), ratio[1])
        if bounded is not None and bounded[0] > bounded[1]:
            raise PlannerError(
                f"{sw.path}:{ctx.rank_line_of[ids[-1]]}: this Rank line names rank {ids[-1]} but the table at line "
                f"{sw.first_line} has {ratio_txt.replace('busbw/algbw allows n = ', '')} ranks (busbw/algbw)",
                "check that the Rank lines and the table come from the same run")
        if complete:
            sw.ranks, sw.ranks_from = len(ids), f"Rank lines {ctx.rank_lines[0]}-{ctx.rank_lines[-1]}"
        elif bounded is not None and bounded[0] == bounded[1]:
            sw.ranks = int(bounded[0])
            sw.ranks_from = "busbw/algbw" if ratio[0] == ratio[1] else f"busbw/algbw and Rank line {ctx.rank_line_of[ids[-1]]}"
        elif ranks:
            sw.ranks, sw.ranks_from = ranks, "--ranks"
        else:
            seen = f"; Rank lines show rank(s) {', '.join(map(str, ids))} only" if ids else ""
            missing.append(Missing(where, "--ranks", f"the rank count ({ratio_txt}{seen})"))
        if sw.ranks is not None:
            if ranks and ranks != sw.ranks:
                warn(f"{where}: the log ({sw.ranks_from}) says {sw.ranks} ranks; --ranks {ranks} not used for this table")
            if ratio is not None and not (ratio[0] <= sw.ranks <= ratio[1]):
                raise PlannerError(
                    f"{where}: {sw.ranks} ranks ({sw.ranks_from}) disagree with the table ({ratio_txt}, factor "
                    f"{FACTOR_FORMULA[sw.collective]} for {sw.collective})",
                    "check --collective and --ranks against the command that produced the log",
                )
            if ids and ids[-1] + 1 > sw.ranks:
                raise PlannerError(
                    f"{sw.path}:{ctx.rank_line_of[ids[-1]]}: this Rank line names rank {ids[-1]} but the table at line "
                    f"{sw.first_line} has {sw.ranks} ranks ({sw.ranks_from})",
                    "check that the Rank lines and the table come from the same run")
    # nodes
    if complete:
        sw.nodes, sw.nodes_from = len(sw.hosts), "host names in Rank lines"
        if nodes and nodes != sw.nodes:
            warn(f"{where}: the Rank lines show {sw.nodes} host(s); --nodes {nodes} not used for this table")
    elif nodes:
        sw.nodes, sw.nodes_from = nodes, "--nodes"
        if len(sw.hosts) > nodes:
            raise PlannerError(f"{sw.path}:{ctx.rank_lines[-1]}: --nodes {nodes} but the Rank lines already name "
                               f"{len(sw.hosts)} hosts", f"pass --nodes {len(sw.hosts)} or more")
    elif sw.ranks == 1:
        sw.nodes, sw.nodes_from = 1, "one rank"
    else:
        seen = f" (the Rank lines seen name {', '.join(sw.hosts)}, not all ranks)" if sw.hosts else " (no Rank lines)"
        servers = ""
        if hardware is not None and hardware.nvlink_domain > hardware.gpus_per_node:
            servers = (f"; on {hardware.name} a server is a {hardware.gpus_per_node}-GPU tray, "
                       f"{hardware.nvlink_domain // hardware.gpus_per_node} trays per NVLink domain")
        n_txt = f"the {sw.ranks} ranks" if sw.ranks else "the ranks"
        missing.append(Missing(where, "--nodes", f"how many servers {n_txt} ran on{seen}{servers}"))
    if sw.nodes is not None and sw.ranks is not None and sw.nodes > sw.ranks:
        raise PlannerError(f"{where}: {sw.nodes} nodes ({sw.nodes_from}) for {sw.ranks} ranks ({sw.ranks_from})", "check --nodes")
    # scope
    if scope:
        sw.scope, sw.scope_from = scope, "--scope"
    elif sw.nodes is not None:
        domains = _domains(sw.nodes, hardware)
        sw.scope = "intra-node" if domains == 1 else "inter-node"
        sw.scope_from = f"{sw.nodes} node(s)" if domains == sw.nodes else (
            f"{sw.nodes} {hardware.name} server(s) = {domains} NVLink domain(s)")
    return missing


def _ratio_pins(sw: Sweep, collective: str, floor: int) -> bool:
    """True if busbw/algbw (bounded below by the Rank lines) pins the rank count of `sw`
    were it `collective`."""
    try:
        r = ranks_from_ratio(collective, sw.points)
    except PlannerError:
        return False
    return r is not None and max(r[0], floor) == r[1]


def missing_error(missing: list[Missing]) -> PlannerError:
    """One error for every fact the logs leave open, with every option that would give it."""
    options = {"--collective": "--collective NAME", "--ranks": "--ranks N", "--nodes": "--nodes N"}
    wanted = [options[o] for o in options if any(m.option == o for m in missing)]
    lines = "\n".join(f"  {m}" for m in missing)
    return PlannerError(
        f"{len(missing)} fact(s) the log(s) do not say:\n{lines}",
        "pass " + " ".join(wanted) + " (an option fills in every table whose log does not say it; "
        "collectives: " + ", ".join(BUSBW_FACTORS) + ")",
    )


# ------------------------------------------------------------------------------- fitting
@dataclass(frozen=True)
class Regime:
    """One alpha-beta line of the envelope: t = latency + S_eff / busbw."""

    latency: float  # s
    busbw: float  # B/s
    from_bytes: int  # smallest measured size where this line is the cheaper one
    to_bytes: int  # largest such size


@dataclass(frozen=True)
class Fit:
    collective: str
    ranks: int
    lines: tuple[Regime, ...]  # ascending bus bandwidth; the last is the bulk regime
    min_bytes: int
    max_bytes: int
    points: int
    bic: float
    eval_points: int
    median_abs_err: float  # busbw at >= EVAL_MIN_BYTES
    max_abs_err: float

    def time(self, size):
        return envelope_time(self.lines, busbw_factor(self.collective, self.ranks) * np.asarray(size, dtype=np.float64))


# parameters: alpha in us and beta = 1/B in ns per byte (both O(1..1e4) for real logs)
def _model(x, s):
    """min over the lines of a + s b: one pass per line (not an (n, k) array reduced along
    its short axis, which cost a 40 MB log seconds per evaluation); the same values."""
    lines = [x[j] * US + s * (x[j + 1] * 1e-9) for j in range(0, len(x), 2)]
    return lines[0] if len(lines) == 1 else np.minimum.reduce(lines)


def _wls_line(s, t):
    """Weighted least squares of (a + s b)/t = 1, clipped to a, b >= 0 (a start value)."""
    A = np.stack([1.0 / t, s / t], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if b <= 0:
        b = 1e-3 * np.median(t / s)
    return [max(a, 0.0) / US, b / 1e-9]


def _solve(x0, s, t):
    res = least_squares(
        lambda x: _model(x, s) / t - 1.0, x0, bounds=(0.0, np.inf), loss="soft_l1", f_scale=ROBUST_SCALE, method="trf"
    )
    r = _model(res.x, s) / t - 1.0
    return res.x, r


# A two-line fit is started from every split of the distinct sizes into a lower and an upper
# set when there are at most MAX_CUT_STARTS splits: every factor-2 sweep nccl-tests can print
# here (8 B to MAX_ROW_BYTES = 4 TiB is 40 sizes, 37 splits) is searched exhaustively, as
# before. A denser sweep (an -i step: 18k sizes) is searched on every k-th distinct size
# (k = ceil(splits / MAX_CUT_STARTS), all the points of those sizes), and the best envelope
# found there is refined on every point: one robust solve per split on a 1/k thinned set is
# linear in the log's length, where one per size on all points was quadratic (issue 24:
# 237 s and 12.6 GiB on dense logs).
MAX_CUT_STARTS = 40


def _two_line(s: np.ndarray, t: np.ndarray, us: np.ndarray):
    """The best two-line envelope (parameters, residuals on all points) over the splits."""
    step = max(1, math.ceil((len(us) - 3) / MAX_CUT_STARTS))
    ss, tt, uu = s, t, us
    if step > 1:
        keep = np.isin(s, us[::step])
        ss, tt = s[keep], t[keep]
        uu = np.unique(ss)
    best = None
    for cut in range(2, len(uu) - 1):
        lo, hi = ss < uu[cut], ss >= uu[cut]
        x0 = _wls_line(ss[lo], tt[lo]) + _wls_line(ss[hi], tt[hi])
        x, r = _solve(x0, ss, tt)
        cost = np.sum(2.0 * (np.sqrt(1.0 + (r / ROBUST_SCALE) ** 2) - 1.0))
        if best is None or cost < best[0]:
            best = (cost, x, r)
    if step > 1:
        return _solve(best[1], s, t)
    return best[1], best[2]


def fit_points(collective: str, ranks: int, sizes, times, min_bytes: int = DEFAULT_MIN_BYTES,
               eval_sizes=None, eval_busbw=None) -> Fit:
    """Fit the envelope of one or two alpha-beta lines to (size, time) at size >= min_bytes.

    `eval_sizes`, `eval_busbw` (bytes, B/s) are the measured bus bandwidths the residuals
    are reported against (default: size * factor / time of the same points).
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    f = float(busbw_factor(collective, ranks))
    if f <= 0:
        raise PlannerError(f"{collective} on {ranks} rank(s) moves no data (bus bandwidth factor {f})",
                           "calibrate with logs of two or more ranks")
    m = sizes >= min_bytes
    s, t = sizes[m] * f, times[m]
    us = np.unique(s)
    if len(us) < 2:
        raise PlannerError(
            f"{collective} on {ranks} ranks: {len(us)} distinct size(s) at or above {min_bytes:,} bytes; "
            "a latency and a bandwidth need two or more",
            "measure a wider size range (e.g. all_reduce_perf -b 1M -e 8G -f 2) or lower --min-size",
        )
    n = len(s)
    candidates = []
    x1, r1 = _solve(_wls_line(s, t), s, t)
    candidates.append((x1, r1))
    if len(us) >= 4:
        candidates.append(_two_line(s, t, us))

    def bic(x, r):
        return 2.0 * n * math.log(max(float(np.mean(np.abs(r))), 1e-12)) + len(x) * math.log(n)

    def active(x):
        k = len(x) // 2
        pred = (np.asarray(x[0::2])[None, :] * US + s[:, None] * np.asarray(x[1::2])[None, :] * 1e-9)
        win = np.argmin(pred, axis=1)
        return [np.unique(s[win == j]) for j in range(k)]

    chosen = candidates[0]
    if len(candidates) > 1:
        x2, r2 = candidates[1]
        if bic(x2, r2) < bic(*candidates[0]) and all(len(a) >= 2 for a in active(x2)):
            chosen = candidates[1]
    x, r = chosen
    if np.any(np.asarray(x[1::2]) <= 0):
        raise PlannerError(
            f"{collective} on {ranks} ranks: time does not grow with size from {min_bytes:,} bytes on; no bandwidth to fit",
            "measure up to larger sizes (-e 4G or more)",
        )
    acts = active(x)
    lines = []
    for j in range(len(x) // 2):
        a = acts[j]
        lines.append(Regime(latency=float(x[2 * j]) * US, busbw=1.0 / (float(x[2 * j + 1]) * 1e-9),
                            from_bytes=int(round(a.min() / f)), to_bytes=int(round(a.max() / f))))
    lines.sort(key=lambda ln: ln.busbw)
    # residuals of bus bandwidth at >= EVAL_MIN_BYTES
    if eval_sizes is None:
        eval_sizes, eval_busbw = sizes, sizes * f / times
    es = np.asarray(eval_sizes, dtype=np.float64)
    eb = np.asarray(eval_busbw, dtype=np.float64)
    em = es >= EVAL_MIN_BYTES
    if em.any():
        model_bw = es[em] * f / envelope_time(lines, es[em] * f)
        err = np.abs(model_bw / eb[em] - 1.0)
        med, mx = float(np.median(err)), float(np.max(err))
    else:
        med = mx = float("nan")
    return Fit(
        collective=collective, ranks=ranks, lines=tuple(lines), min_bytes=int(min_bytes),
        max_bytes=int(sizes[m].max()), points=n, bic=float(bic(x, r)), eval_points=int(em.sum()),
        median_abs_err=med, max_abs_err=mx,
    )


def fit_sweeps(collective: str, ranks: int, sweeps: list[Sweep], min_bytes: int = DEFAULT_MIN_BYTES) -> Fit:
    """Pool the points of several sweeps of one (collective, scope, ranks) and fit them."""
    pts = [p for sw in sweeps for p in sw.points]
    size = np.array([p.size for p in pts], dtype=np.float64)
    time = np.array([p.time for p in pts], dtype=np.float64)
    f = float(busbw_factor(collective, ranks))
    bus = np.array([p.busbw if p.busbw is not None else p.size * f / p.time for p in pts], dtype=np.float64)
    try:
        return fit_points(collective, ranks, size, time, min_bytes, eval_sizes=size, eval_busbw=bus)
    except PlannerError as e:
        # say which lines: the rows in the fitted range, else the tables
        rows = sorted({(sw.path, p.line) for sw in sweeps for p in sw.points if p.size >= min_bytes})
        where = [f"{path}:{line}" for path, line in rows] or [f"{sw.path}:{sw.first_line}" for sw in sweeps]
        loc = ", ".join(where[:4]) + (f" (+{len(where) - 4} more)" if len(where) > 4 else "")
        raise PlannerError(f"{loc}: {e.message}", e.hint) from None


@dataclass
class Calibration:
    logs: list[ParsedLog]
    sweeps: list[Sweep]
    fits: dict  # (collective, scope, ranks) -> Fit
    groups: dict  # (collective, scope, ranks) -> [Sweep]
    warnings: list[str]


NOISY_LOG_WARN = 0.05  # warn when no monotone model comes within 5 % of a table's points >= 64 MiB


def noisy_sizes(sw: Sweep, min_bytes: Optional[int] = None) -> Optional[str]:
    """A warning when a table's times at sizes >= min_bytes (default MODEL_CHECK_MIN_BYTES)
    are so far from monotone that no model in which more bytes never take less time comes
    within NOISY_LOG_WARN of all of them (`monotone_bound`): the pair of rows that says so,
    and what the bound is. None when the table is steadier than that."""
    lo = MODEL_CHECK_MIN_BYTES if min_bytes is None else min_bytes
    pts = [p for p in sw.points if p.size >= lo]
    if len(pts) < 2:
        return None
    sizes = np.array([p.size for p in pts], dtype=np.float64)
    eps, pair = monotone_bound(sizes, sizes / np.array([p.time for p in pts]))
    if pair is None or eps <= NOISY_LOG_WARN:
        return None
    a, b = pts[pair[0]], pts[pair[1]]

    def place(p: Point) -> str:
        return "in-place" if p.in_place else "out-of-place"

    what = (f"the two placements of {a.size:,} B take {a.time * 1e6:,.1f} and {b.time * 1e6:,.1f} us"
            if a.size == b.size else
            f"{a.size:,} B takes {a.time * 1e6:,.1f} us ({place(a)}), longer than "
            f"{b.size:,} B at {b.time * 1e6:,.1f} us ({place(b)}, line {b.line})")
    name = Path(sw.path).name
    return (f"{name}:{a.line}: {what}: no model in which more bytes never take less time comes within "
            f"{eps:.1%} of both; the error of any model on this table's sizes >= {lo:,} B is at least that "
            "(more nccl-tests iterations, -n, steady such rows)")


def calibrate_logs(
    paths,
    collective: Optional[str] = None,
    ranks: Optional[int] = None,
    nodes: Optional[int] = None,
    scope: Optional[str] = None,
    min_bytes: int = DEFAULT_MIN_BYTES,
    warn: Optional[Callable[[str], None]] = None,
    hardware=None,
) -> Calibration:
    """Parse every log, resolve each sweep, group by (collective, scope, ranks) and fit.

    Warnings (unreadable lines, options the log overrides, groups that cannot be fitted)
    are collected in `Calibration.warnings` and, if `warn` is given, passed to it as they
    arise, so that a caller sees them even when a later step raises. Raises PlannerError
    if a file is unreadable, if a fact is missing (one error listing every missing fact of
    every table, `missing_error`) or if no group can be fitted. `hardware` (schema.Hardware,
    optional): servers per NVLink domain for the scope (see `resolve_sweep`).
    """
    if collective is not None:
        collective = normalize_collective(collective)
    if scope is not None and scope not in SCOPES:
        raise PlannerError(f"--scope: unknown scope {scope!r}", "valid: " + ", ".join(SCOPES))
    for opt, v in (("--ranks", ranks), ("--nodes", nodes)):
        if v is not None and v < 1:
            raise PlannerError(f"{opt} {v}: must be a positive integer", f"e.g. {opt} 8, or leave it out")
    warnings: list[str] = []

    def note(msg: str) -> None:
        warnings.append(msg)
        if warn is not None:
            warn(msg)

    logs = []
    for path in paths:
        log = parse_log(path)
        logs.append(log)
        for i in log.issues:
            note(str(i))
        if log.ignored_debug_lines:
            note(f"{log.name}: {log.ignored_debug_lines} NCCL debug line(s) (NCCL INFO/WARN) skipped")
    sweeps: list[Sweep] = []
    missing: list[Missing] = []
    for log in logs:
        for sw in log.sweeps:
            missing += resolve_sweep(sw, collective, ranks, nodes, scope, note, hardware)
            sweeps.append(sw)
    if missing:
        raise missing_error(missing)
    for sw in sweeps:
        noisy = noisy_sizes(sw)
        if noisy is not None:
            note(noisy)
    groups: dict = {}
    for sw in sweeps:
        groups.setdefault((sw.collective, sw.scope, sw.ranks), []).append(sw)
    for (coll, sc, n), sws in groups.items():
        names = {tuple(sw.gpus) for sw in sws if sw.gpus}
        if len(names) > 1:
            note(f"{coll} {sc} {n} ranks pools tables of different GPUs ({'; '.join(', '.join(g) for g in sorted(names))}); "
                 "calibrate each system separately")
    fits: dict = {}
    errors: list[PlannerError] = []
    for key, sws in groups.items():
        try:
            fits[key] = fit_sweeps(key[0], key[2], sws, min_bytes)
        except PlannerError as e:
            errors.append(e)
            if len(groups) > 1:
                note(f"{key[0]} {key[1]} {key[2]} ranks not fitted: {e.message}")
    if not fits:
        e = errors[0]
        raise PlannerError(e.message, e.hint)
    return Calibration(logs, sweeps, fits, groups, warnings)


# ------------------------------------------------------------------ what any model could do
# How close a model of a given shape could come to a log at all, whatever its constants:
# the least max |busbw error| over the log's points that any member of the class reaches
# (the class's "attainable" error). busbw error = model / log - 1 = t_log / t_model - 1 at
# the same size (busbw = S factor(n) / t), so |error| <= eps <=> t_model in
# [t / (1 + eps), t / (1 - eps)] for every measured time t at that size.
#
# monotone: every model in which more bytes never take less time. Exact, in closed form:
#   eps* = max(0, max over point pairs with S_i <= S_j of (t_i - t_j) / (t_i + t_j)),
#   because t_i / (1 + eps) <= t_j / (1 - eps) <=> eps >= (t_i - t_j) / (t_i + t_j), and the
#   running maximum of the lower bounds is a monotone model once every such pair holds.
#   Two placements of one size count as a pair (S_i = S_j).
# NCCL's form: the fastest of any number of algorithms, each a latency >= 0 plus size over a
#   bandwidth, t(S) = min_k(alpha_k + S / B_k) (NCCL's tuning model per algorithm and
#   protocol [tuning.cc ncclTopoGetAlgoTime: lat + nBytes / bw], this module's fit, and
#   planner/comm.py's default but for its tree correction). On the measured sizes these are
#   exactly the non-decreasing, concave curves whose chord to the first point extends to
#   t(0) >= 0; the least eps is found by bisection on a linear feasibility problem
#   (scipy.optimize.linprog, HiGHS).
ATTAINABLE_TOL = 1e-6  # bisection tolerance on eps


def _time_like(sizes, busbw) -> np.ndarray:
    """S / busbw: proportional to the measured time at a fixed rank count (the busbw factor
    cancels), so that the bounds use the busbw the errors are reported on."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(sizes, dtype=np.float64) / np.asarray(busbw, dtype=np.float64)


def _usable(t: np.ndarray) -> bool:
    """Every point has a finite positive time (a busbw printed as 0.00 has none): otherwise
    the bounds are undefined (NaN)."""
    return bool(np.all(np.isfinite(t) & (t > 0.0)))


def monotone_bound(sizes, busbw) -> tuple[float, Optional[tuple[int, int]]]:
    """The least max |busbw error| any model in which more bytes never take less time can
    reach on these points, and the indices (i, j) of the pair that sets it (S_i <= S_j,
    t_i > t_j; None when the points are already monotone; of several pairs that reach it,
    the least i, then the least j).

    O(n log n) (issue 24: the all-pairs form took n^2 memory, 2.6 GB at 18k rows): the gap
    (t_i - t_j) / (t_i + t_j) grows with t_i and falls with t_j, so for each i the best
    partner is the least time among the other points of equal or larger size (a suffix
    minimum over the points sorted by size, the point's own size class counted without it)."""
    t = _time_like(sizes, busbw)
    s = np.asarray(sizes, dtype=np.float64)
    if not _usable(t):
        return float("nan"), None
    if t.size < 2:
        return 0.0, None
    order = np.argsort(s, kind="stable")
    ss, ts = s[order], t[order]
    heads, cls = np.unique(ss, return_index=True, return_inverse=True)[1:]  # first position, class of each point
    end = np.append(heads[1:], ts.size)[cls]  # one past each point's size class
    later = np.append(np.minimum.accumulate(ts[::-1])[::-1], np.inf)[end]  # least time at larger sizes
    cls_min = np.minimum.reduceat(ts, heads)
    pos = np.arange(ts.size)
    is_min = ts == cls_min[cls]
    arg = np.minimum.reduceat(np.where(is_min, pos, ts.size), heads)  # each class's first least point
    rest = np.where(pos == arg[cls], np.inf, ts)
    second = np.minimum.reduceat(rest, heads)  # the class's least time without that point
    without_self = np.where(pos == arg[cls], second[cls], cls_min[cls])
    partner = np.minimum(later, without_self)
    gap = np.full(t.size, -np.inf)
    with np.errstate(invalid="ignore"):
        gap[order] = np.where(np.isfinite(partner), (ts - partner) / (ts + partner), -np.inf)
    eps = float(gap.max())
    if eps <= 0.0:
        return 0.0, None
    i = int(np.argmax(gap == eps))  # the least i that reaches it
    others = (s >= s[i]) & (np.arange(t.size) != i)
    with np.errstate(invalid="ignore"):
        j = int(np.argmax(others & ((t[i] - t) / (t[i] + t) == eps)))
    return eps, (i, j)


def _nccl_form_feasible(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Is there a curve t through [lo_k, hi_k] at the distinct sizes x_k (ascending) that is
    non-decreasing, concave and has t(0) >= 0 (see above)?"""
    from scipy.optimize import linprog

    if np.any(lo > hi):
        return False
    k = x.size
    if k == 1:
        return True
    from scipy.sparse import coo_matrix

    # the constraint rows, sparse (issue 24: dense rows took k^2 memory on an 18k-row log)
    i = np.arange(k - 1)  # t_i - t_{i+1} <= 0
    r_mono, c_mono, v_mono = np.repeat(i, 2), np.stack([i, i + 1], 1).ravel(), np.tile([1.0, -1.0], k - 1)
    i = np.arange(1, k - 1)  # slope (i, i+1) <= slope (i-1, i)
    d1, d2 = x[i] - x[i - 1], x[i + 1] - x[i]
    r_conc = np.repeat(k - 1 + i - 1, 3)
    c_conc = np.stack([i + 1, i, i - 1], 1).ravel()
    v_conc = np.stack([1.0 / d2, -1.0 / d2 - 1.0 / d1, 1.0 / d1], 1).ravel()
    d = x[1] - x[0]  # t(0) = t_0 - x_0 (t_1 - t_0) / d >= 0
    n_rows = (k - 1) + (k - 2) + 1
    rows = np.concatenate([r_mono, r_conc, [n_rows - 1, n_rows - 1]])
    cols = np.concatenate([c_mono, c_conc, [0, 1]])
    vals = np.concatenate([v_mono, v_conc, [-(1.0 + x[0] / d), x[0] / d]])
    A = coo_matrix((vals, (rows, cols)), shape=(n_rows, k)).tocsr()
    res = linprog(np.zeros(k), A_ub=A, b_ub=np.zeros(n_rows), bounds=np.stack([lo, hi], 1), method="highs")
    return res.status == 0


def nccl_form_bound(sizes, busbw) -> float:
    """The least max |busbw error| any model t(S) = min_k(alpha_k + S / B_k), alpha_k >= 0,
    can reach on these points (see above)."""
    t = _time_like(sizes, busbw)
    s = np.asarray(sizes, dtype=np.float64)
    if not _usable(t):
        return float("nan")
    if t.size == 0:
        return 0.0
    x = np.unique(s)
    t = t / t.max()  # conditioning: times to <= 1, sizes to <= 1
    xs = x / x.max()
    order = np.argsort(s, kind="stable")
    heads = np.unique(s[order], return_index=True)[1]
    t_max, t_min = np.maximum.reduceat(t[order], heads), np.minimum.reduceat(t[order], heads)  # per distinct size

    def feasible(eps: float) -> bool:
        return _nccl_form_feasible(xs, t_max / (1.0 + eps), t_min / (1.0 - eps))

    low, high = monotone_bound(sizes, busbw)[0], 1.0 - 1e-9  # a concave model is monotone
    if feasible(low):
        return low
    while high - low > ATTAINABLE_TOL:
        mid = 0.5 * (low + high)
        low, high = (low, mid) if feasible(mid) else (mid, high)
    return high


# ------------------------------------------------------------------ the uncalibrated model
@dataclass(frozen=True)
class ModelCheck:
    """The uncalibrated model (planner/comm.py on a Hardware entry) against one fitted
    group's measured bus bandwidth at sizes >= min_bytes. Errors: busbw_model /
    busbw_measured - 1 per measured point (both placements)."""

    collective: str
    scope: str
    ranks: int
    hardware: str
    min_bytes: int
    sizes: tuple[int, ...] = ()
    measured: tuple[float, ...] = ()  # B/s
    predicted: tuple[float, ...] = ()  # B/s
    algorithms: tuple[str, ...] = ()  # what `auto` picks, per point
    skipped: Optional[str] = None  # why the model was not compared

    @property
    def monotone(self) -> tuple[float, Optional[tuple[int, int]]]:
        """What any model in which more bytes never take less time could reach at best on
        these points (max |error|), and the pair of points that sets it (`monotone_bound`)."""
        return monotone_bound(self.sizes, self.measured)

    @property
    def nccl_form(self) -> float:
        """What any model of NCCL's form (the fastest of latency + size / bandwidth
        algorithms) could reach at best on these points (max |error|; `nccl_form_bound`)."""
        return nccl_form_bound(self.sizes, self.measured)

    @property
    def errors(self) -> np.ndarray:
        return np.asarray(self.predicted) / np.asarray(self.measured) - 1.0

    @property
    def median_abs_err(self) -> float:
        return float(np.median(np.abs(self.errors))) if self.sizes else float("nan")

    @property
    def max_abs_err(self) -> float:
        return float(np.max(np.abs(self.errors))) if self.sizes else float("nan")

    @property
    def median_err(self) -> float:
        return float(np.median(self.errors)) if self.sizes else float("nan")


def compare_to_model(cal: Calibration, hardware, min_bytes: int = MODEL_CHECK_MIN_BYTES) -> list[ModelCheck]:
    """For every fitted group, what the uncalibrated model predicts on `hardware` (a
    schema.Hardware: its NVLink, NICs, NVLS, rails and SHARP) for the measured sizes >=
    min_bytes: the group placed as `ranks` consecutive ranks, the algorithm NCCL's tuner
    would pick (comm.group_collective with AUTO). Groups the model cannot place as the log
    ran them (a different number of NVLink domains) or of collectives it does not model
    (broadcast, reduce, gather, scatter) come back with `skipped` set."""
    from .. import comm

    params = comm.comm_params(hardware)
    checks = []
    for (coll, scope, n), sws in cal.groups.items():
        base = dict(collective=coll, scope=scope, ranks=n, hardware=hardware.name, min_bytes=int(min_bytes))
        try:
            op = comm.op_code(coll)
        except PlannerError:
            checks.append(ModelCheck(**base, skipped=f"planner/comm.py has no {coll} model"))
            continue
        link = comm.group_link(n, 1, params, job_gpus=n)
        placed = "intra-node" if int(link.link) == comm.LINK_NVLINK else "inter-node"
        domains = {_domains(sw.nodes, hardware) for sw in sws if sw.nodes}
        if placed != scope or (scope == "inter-node" and domains != {int(link.domains)}):
            checks.append(ModelCheck(**base, skipped=(
                f"the log's {n} ranks span {', '.join(map(str, sorted(domains)))} NVLink domain(s) ({scope}); "
                f"{hardware.name} packs them into {int(link.domains)}")))
            continue
        f = float(busbw_factor(coll, n))
        pts = [p for sw in sws for p in sw.points if p.size >= min_bytes]
        if not pts:
            checks.append(ModelCheck(**base, skipped=f"no measured size at or above {min_bytes:,} bytes"))
            continue
        sizes = np.array([p.size for p in pts], dtype=np.float64)
        measured = np.array([p.busbw if p.busbw is not None else p.size * f / p.time for p in pts])
        cost, _, algo = comm.group_collective(op, sizes, n, 1, params, comm.AUTO, job_gpus=n)
        checks.append(ModelCheck(
            **base, sizes=tuple(int(x) for x in sizes), measured=tuple(float(x) for x in measured),
            predicted=tuple(float(x) for x in np.broadcast_to(cost.busbw, sizes.shape)),
            algorithms=tuple(comm.ALGO_NAMES[int(a)] for a in np.broadcast_to(algo, sizes.shape)),
        ))
    return checks


__all__ = [
    "BUSBW_FACTORS", "Calibration", "DEFAULT_MIN_BYTES", "EVAL_MIN_BYTES", "Fit", "LineIssue", "ParsedLog",
    "MODEL_CHECK_MIN_BYTES", "Missing", "ModelCheck", "Point", "Regime", "SCOPES", "Sweep", "busbw_factor", "calibrate_logs", "collectives_from_table",
    "compare_to_model", "envelope_time", "fit_points", "missing_error", "monotone_bound", "nccl_form_bound",
    "fit_sweeps", "normalize_collective", "parse_log", "ranks_from_ratio", "resolve_sweep",
]
