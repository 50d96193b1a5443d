"""What every command's renderer shares: the consoles (`out` for results on stdout, `err`
and `warn` for diagnostics on stderr), the output formats (`Format`: table, json, yaml,
csv) and one formatter per kind of quantity. Inputs are SI (bytes, seconds, B/s,
fractions); the strings carry the human units. A formatter here is used by more than one command, or is
the one way the project writes that quantity; two formatters of one quantity that write
different strings have different names (e.g. `seconds` vs `duration`, `si_bytes` vs
`binary_size`) so that no command's output changes.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from contextlib import contextmanager
from enum import Enum
from typing import Any, Callable, Iterable, Optional

import yaml
from rich.console import Console

GB, GiB = 1e9, 2.0**30



def console(**kwargs) -> Console:
    """A rich Console; one that writes no styles (color_system None: a pipe or a file, fixed
    when the Console is made) is made without highlighting. Highlighting only adds styles
    (rich/console.py render_str; Style.render returns the text as it is without a color
    system), so the text is the same, but rich's ReprHighlighter compiles its regexes on the
    first print and runs them on every string and table cell: `planner fit --model llama3-405b
    --gpus 16384 > file` spent 32 -> 19 ms in its table and notes (issue 24). A terminal, or
    FORCE_COLOR, keeps rich's highlighting.

    No console replaces emoji codes (`:cd:` -> an emoji glyph, rich's default): the planner
    writes none (no text of planner/ or the catalogs has one), and a name or path given with
    one is printed as given. It also spares every `planner` command that prints a table rich's
    emoji table, imported on the first print (rich/_emoji_replace.py: 3-5 ms, issue 24)."""
    kwargs.setdefault("emoji", False)
    c = Console(**kwargs)
    return c if c.color_system is not None else Console(highlight=False, **kwargs)


out = console(soft_wrap=True)  # results: stdout
err = console(stderr=True, soft_wrap=True)  # diagnostics: stderr


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"


def warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")


def mfu_convention(attention_counted: str | None) -> str:
    """What an MFU figure counts (issue 24), printed under every table that shows one:
    step.throughput's `mfu` = model FLOPs per token (6N + attention of the counted kind, the
    PaLM convention, Chowdhery et al. 2022 appendix B) x tokens/s / (GPUs x the dense peak of
    the plan's precision); recompute is not counted (HFU counts it)."""
    att = f"6N + {attention_counted} attention (PaLM)" if attention_counted else "6N (attention not counted)"
    return (f"MFU = model FLOPs ({att}; recompute not counted) per second / (GPUs x dense peak of the precision)")


# --quiet (issue 24): the notes (what was assumed, searched or read) are not printed; warnings
# and errors are. Set for the length of one command by cli.common.cli_errors.
QUIET = {"notes": False}


def note(message: str) -> None:
    """`note: ...` on stderr, unless the command runs with --quiet."""
    if not QUIET["notes"]:
        sys.stderr.write(f"note: {message}\n")


@contextmanager
def progress(description: str, total: int, console: Optional[Console] = None):
    """A rich progress bar on stderr while a sweep runs (over GPU counts), shown only when
    stderr is a terminal and there is more than one step; silent when piped. Yields the
    callback the library calls: tick(done, total, gpus)."""
    console = console or err
    if not console.is_terminal or total < 2:
        yield lambda done, tot, gpus: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def tick(done: int, tot: int, gpus: int) -> None:
            bar.update(task, completed=done, description=f"{description}: {gpus:,} GPUs done")

        yield tick


def print_assumed(res: dict) -> None:
    """The table's line of what the model file and the job left to a stated rule (explain's and budget's JSON
    `assumed`), less a trainer config's own lines, noted on stderr as the file was read (cli/core.py
    report_trainer_config)."""
    noted = {e["line"] for e in (res.get("trainer_config") or {}).get("assumed", ())}
    if own := [a for a in res.get("assumed", ()) if a not in noted]:
        out.print("  assumed (what the model file and the job leave out): " + "; ".join(own))


def param_gather_exposed(p: dict) -> bool:
    """Whether a plan's (explain's JSON `plan`) sharded-optimizer parameter all-gather after the step is priced exposed
    under its DP overlap (step.ddp_traffic [40]): the job's dp_param_gather_overlap false, which plan_dict shows at
    zero1 / zero2 under the DP overlap as it runs, or, at those levels and that overlap, a stack whose ZeRO-1/2 gathers
    synchronously after the step (the stack fact overlap.dp_param_gather_overlap_supported false: the
    megatron-deepspeed stacks, which the plan does not carry as a field); a text only, the figures are step.py's."""
    if p.get("dp_param_gather_overlap") is False:
        return True
    if not (p.get("dp_comm_overlap") and p.get("sharding") in ("zero1", "zero2") and p.get("stack")):
        return False
    from ..catalog import load_stack

    return not load_stack(p["stack"]).overlap.dp_param_gather_overlap_supported


# Labels of explain's memory terms (planner/memory.py MemoryTerms keys), for every table
# and message that names them.
TERM_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "master_weights": "fp32 master weights",
    "adam": "Adam m and v",
    "layer_activations": "layer activations",
    "output_activations": "output layer (logits + loss)",
    "recompute_buffer": "recompute buffer (one layer)",
    "fsdp_gathered_units": "FSDP gathered units (in flight)",
    "fsdp_unit_grads": "FSDP unit gradients (reduce-scatter input)",
    "zero3_working_set": "ZeRO-3 working set (gathered, prefetched)",
    "zero3_unreduced_grads": "ZeRO-3 gradients awaiting reduce-scatter",
    "zero3_bucket_copy": "ZeRO-3 reduce-scatter bucket copy (torch.cat)",
    "zero3_reuse_kept": "ZeRO-3 last layers kept gathered (reuse distance)",
    "zero3_tied_output": "ZeRO-3 tied output layer (weight + held gradient)",
    "zero3_ipg_bucket": "ZeRO-3 IPG gradient bucket",
    "zero3_persistent": "ZeRO-3 persistent parameters",
    "zero3_step_grads": "ZeRO-3 optimizer step fp32 gradients (beyond the peak)",
    "mfsdp_double_buffer": "Megatron-FSDP double-buffer pools (persistent)",
    "fsdp_unsharded_ends": "FSDP end units kept unsharded",
    "fsdp_unsharded_stage": "FSDP stage kept unsharded (PP, no reshard)",
    "fsdp_accumulated_grads": "FSDP accumulated gradients (PP, unsharded)",
    "fsdp_end_of_backward": "FSDP end of backward (beyond the peak)",
    "model_buffers": "model buffers (RoPE tables, router biases)",
    "quantized_weights": "fp8 weight copies (TE cache, transposes)",
    "workspaces": "GEMM library workspaces (cuBLAS, TE)",
    "mpu_buffer": "Megatron global memory buffer (mpu)",
    "dummy_wgrads": "TE dummy weight gradients (cached)",
    "zero2_reduce_input": "ZeRO-2 unit gradient + reduce-scatter input (beyond the peak)",
    "zero12_ipg_bucket": "ZeRO-1/2 IPG gradient buckets",
    "zero12_grad_partition": "ZeRO-1/2 gradient reduction (beyond the peak)",
    "bf16_reduce_copy": "BF16_Optimizer all-reduce copies (beyond the peak)",
    "optimizer_step": "optimizer step (temporaries, beyond the peak)",
    "step_grad_copies": "optimizer step gradient copies (beyond the peak)",
    "offload_norm_fp64": "CPU offload fp64 gradient-norm piece (beyond the peak)",
    "offload_copy_back": "CPU offload fp32 partition copied back (beyond the peak)",
    "stream_pools": "allocator pools (reserved, not allocated)",
    "allocator_slack": "allocator slack (reserved - allocated)",
    "tp_overlap_buffers": "TP overlap buffers (outside the allocator)",
    "ep_buffers": "MoE dispatcher buffers (outside the allocator)",
    "nvls_buffers": "NCCL NVLS buffers (outside the allocator)",
    "reserve": "CUDA context + NCCL reserve",
}


# ---------------------------------------------------------------- machine formats
# the values of a result that hold nothing: read as they are, no call a value (_clean, _finite; a fit row's
# result is some 220 values, most of them these and floats)
_LEAVES = frozenset((str, int, bool, type(None)))


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become null (every dict a dict, every list or tuple a list, each a new one)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            t = type(v)
            out[k] = v if t in _LEAVES else (v if math.isfinite(v) else None) if t is float else _clean(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def flatten(d: dict, prefix: str = "") -> dict:
    rows = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows.update(flatten(v, key + "."))
        else:
            rows[key] = v
    return rows


def csv_columns(flat: list[dict]) -> list[str]:
    """One header for every row, whatever rows a command prints: the columns ordered by what the rows say (a key
    before the key that follows it in some row: a topological order of those pairs), ties by the smallest position
    a key has in any row, then by name. It depends on the set of rows, not on their order, so a key that only some
    rows carry (plan.sharding_label, given where stack_db names the mode) stands in the same place whichever row comes
    first (before 2026-12-07 the header was the keys in first-seen order: such a key came last when the first row
    lacked it and mid-plan when it had it). Keys in an order no two rows agree on (a cycle) follow first-seen."""
    import heapq

    after: dict[str, set] = {}
    pos: dict[str, int] = {}
    seen: dict[str, None] = {}
    for r in flat:
        keys = list(r)
        for i, k in enumerate(keys):
            seen.setdefault(k)
            pos[k] = min(pos.get(k, i), i)
            after.setdefault(k, set())
            if i:
                after[keys[i - 1]].add(k)
    need = dict.fromkeys(seen, 0)
    for k, nxt in after.items():
        for n in nxt:
            need[n] += 1
    ready = [(pos[k], k) for k, c in need.items() if c == 0]
    heapq.heapify(ready)
    cols: list[str] = []
    while len(cols) < len(seen):
        if not ready:  # a cycle: take the first-seen key left
            k = next(k for k in seen if need[k] > 0)
            need[k] = 0
            heapq.heappush(ready, (pos[k], k))
        _, k = heapq.heappop(ready)
        if need[k] < 0:
            continue
        cols.append(k)
        need[k] = -1
        for n in after[k]:
            if need[n] > 0:
                need[n] -= 1
                if need[n] == 0:
                    heapq.heappush(ready, (pos[n], n))
    return cols


def to_csv(records: Iterable[dict]) -> str:
    flat = [flatten(r) for r in records]
    cols = csv_columns(flat)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in flat:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
    return buf.getvalue()


def _nonfinite(obj: Any, path: str = ""):
    """(key path, value) of every NaN or infinite float in a result."""
    if isinstance(obj, float) and not math.isfinite(obj):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nonfinite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _nonfinite(v, f"{path}[{i}]")


def _finite(obj) -> bool:
    """No NaN or infinite float among the values of a dict, list or tuple and of those it holds: _nonfinite finds
    none (as it, a float subclass is a float; a dict's keys are not values). A value walked in the loop, not a
    generator a level: 0.011 ms a row of `fit --top 500 --format json` where next(_nonfinite(...)) took 0.059."""
    isfinite = math.isfinite
    for v in (obj.values() if isinstance(obj, dict) else obj):
        t = type(v)
        if t is float:
            if not isfinite(v):
                return False
        elif t in _LEAVES:
            continue
        elif isinstance(v, (dict, list, tuple)):
            if not _finite(v):
                return False
        elif isinstance(v, float) and not isfinite(v):
            return False
    return True


def check_finite(data: Any) -> None:
    """A result never carries an infinite or NaN figure (issue 12): finite inputs whose
    products overflow (`--tokens 1e300`, `--price-per-gpu-hour 1e308`) are refused, naming the
    figure, instead of printing `inf` (or `null` in JSON)."""
    if _finite((data,)):
        return
    bad = next(_nonfinite(data), None)
    if bad is not None:
        from ..errors import PlannerError

        raise PlannerError(f"the result's {bad[0]} is {bad[1]}: an input is beyond the range the figures can be "
                           "computed in", "check the options and files for extreme values (e.g. --tokens, prices, "
                           "bandwidths, times)")


# libyaml's emitter where PyYAML was built with it (yaml.__with_libyaml__): the same representer (SafeDumper's) and
# the same text as yaml.safe_dump (tests/test_yaml_output.py: byte for byte on fit / explain output, and loaded back
# equal), about 10x faster on `fit --top 2000` (the pure-Python emitter was most of that command's time)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def yaml_text(data: Any) -> str:
    """yaml.safe_dump(data, sort_keys=False)'s text, through libyaml's emitter where PyYAML has it."""
    return yaml.dump(data, Dumper=_YAML_DUMPER, sort_keys=False)


# json.dumps(data, indent=2) runs json's pure-Python encoder (json/encoder.py JSONEncoder.iterencode takes the C one,
# c_make_encoder, only where indent is None, CPython 3.11-3.13): about a third of `fit --model llama3-70b --gpus 512
# --top 2000 --format json`'s CPU (issue 22). json_text writes the same text with the C encoder doing the leaves.
_C_ENCODER = json.encoder.c_make_encoder
_encode_str = json.encoder.encode_basestring_ascii  # (what json.dumps uses with ensure_ascii, its default: C)
_LEAF_TYPES = frozenset((str, int, float, bool, type(None)))
_CONTAINER_TYPES = (dict, list, tuple)
_float_repr = float.__repr__
_int_repr = int.__repr__


class _Unusual(Exception):
    """A value json_text leaves to json.dumps: a type json would pass to `default` (it raises TypeError), a dict key
    that is not a str, a circular reference: json.dumps then writes (or refuses) it as it always has."""


def _no_default(o):
    raise _Unusual


def _json_float(f: float) -> str:
    """json.encoder's floatstr with allow_nan (its default): repr, NaN, Infinity, -Infinity."""
    if -math.inf < f < math.inf:
        return _float_repr(f)
    return "NaN" if f != f else "Infinity" if f > 0 else "-Infinity"


# A leaf of a plain type as json writes it (json/encoder.py _make_iterencode: floatstr, int.__repr__, the constants).
_LEAF_TEXT = {str: _encode_str, float: _json_float, int: _int_repr, bool: {True: "true", False: "false"}.__getitem__,
              type(None): lambda v: "null"}


def _json_leaf(v) -> str:
    """A leaf not of a plain type as json.encoder._make_iterencode writes it: a subclass of str, int or float (an
    enum's member, numpy's float64) as its base type, in json's order (str, int, float); anything else is json's."""
    if isinstance(v, str):
        return _encode_str(v)
    if isinstance(v, int):
        return _int_repr(v)
    if isinstance(v, float):
        return _json_float(v)
    raise _Unusual


class _Indent2:
    """json.dumps(indent=2)'s text: each container opens with a line break and its items one a line, two spaces
    deeper than it, `key: value`, `,` after each but the last, the closing bracket on its own line at the
    container's depth; an empty one is `[]` / `{}` (json/encoder.py _iterencode_list / _iterencode_dict). A
    dict, list or tuple whose values are all leaves of the plain types (str, int, float, bool, None: of a fit row
    at --top 2000, 29 of 45 thousand containers, 334 of 390 thousand leaves) is written by the C encoder in one
    call, made with that depth's item separator (`,` + line break + indent) and json's key separator `: `
    (what json.dumps(indent=2) passes its Python encoder); its brackets get the line breaks. Other containers
    are walked here, a leaf at a time (_LEAF_TEXT)."""

    def __init__(self):
        self.parts: list[str] = []
        self.levels: list = []  # per depth: (C encoder, line break + its items' indent, line break + its own)
        self.on_path: set[int] = set()  # (json's markers: a container inside itself is a circular reference)

    def level(self, level: int):
        while len(self.levels) <= level + 1:
            n = len(self.levels)
            inner = "\n" + "  " * (n + 1)
            self.levels.append((_C_ENCODER(None, _no_default, _encode_str, None, ": ", "," + inner, False, False, True),
                                inner, "\n" + "  " * n))
        return self.levels[level]

    def write(self, o, level: int) -> None:
        parts = self.parts
        if not o:
            parts.append("{}" if isinstance(o, dict) else "[]")
            return
        encode, inner, close = self.level(level)
        t = type(o)
        if t is dict:
            plain = _LEAF_TYPES.issuperset(map(type, o.values())) and _LEAF_TYPES.issuperset(map(type, o))
        else:
            plain = (t is list or t is tuple) and _LEAF_TYPES.issuperset(map(type, o))
        if plain:
            text = "".join(encode(o, 0))
            parts += (text[0], inner, text[1:-1], close, text[-1])
            return
        if id(o) in self.on_path:
            raise _Unusual
        self.on_path.add(id(o))
        sep = "," + inner
        leaf_text = _LEAF_TEXT.get
        is_dict = isinstance(o, dict)
        parts.append("{" if is_dict else "[")
        for i, item in enumerate(o.items() if is_dict else o):
            if is_dict:
                k, v = item
                if type(k) is not str:
                    raise _Unusual
                parts += (sep if i else inner, _encode_str(k), ": ")
            else:
                v = item
                parts.append(sep if i else inner)
            f = leaf_text(type(v))
            if f is not None:
                parts.append(f(v))
            elif isinstance(v, _CONTAINER_TYPES):
                self.write(v, level + 1)
            else:
                parts.append(_json_leaf(v))
        parts += (close, "}" if is_dict else "]")
        self.on_path.discard(id(o))


def json_text(data: Any) -> str:
    """json.dumps(data, indent=2)'s text, byte for byte (tests/test_json_output.py), the leaves through the C encoder
    (_Indent2). Where the C encoder is missing, or for a value json_text leaves to json (_Unusual), json.dumps itself
    (and its TypeError or ValueError where it refuses the value)."""
    if _C_ENCODER is None:
        return json.dumps(data, indent=2)
    if type(data) in _LEAF_TYPES:
        return json.dumps(data, indent=2)
    if not isinstance(data, _CONTAINER_TYPES):
        return json.dumps(data, indent=2)
    w = _Indent2()
    try:
        w.write(data, 0)
    except _Unusual:
        return json.dumps(data, indent=2)
    return "".join(w.parts)


def emit(data: Any, fmt: Format, table: Callable[[], None]) -> None:
    """Print `data` in a machine format, or call `table()` for people (never a non-finite
    figure: check_finite)."""
    check_finite(data)
    if fmt == Format.json:  # (no _clean: no NaN or inf is left to make null, and JSON writes a tuple as a list)
        print(json_text(data))
    elif fmt == Format.yaml:
        print(yaml_text(_clean(data)), end="")
    elif fmt == Format.csv:
        print(to_csv(data if isinstance(data, list) else [data]), end="")
    else:
        table()


def print_wide(renderable, width: int) -> None:
    """Print a wide table: a terminal fits it to its own width; a pipe or a file (CI logs,
    tests) gets `width` columns, room for the table's natural width."""
    (out if out.is_terminal else console(soft_wrap=True, width=width)).print(renderable)


def _plain_cell(x: str) -> bool:
    """A cell rich prints as it is: printable ASCII (one column a character: rich's cell_len is len) without `[`
    (rich parses console markup in a str cell) or a line break."""
    return x.isascii() and x.isprintable() and "[" not in x


def print_rows(headers: list[str], justify: list[str], rows: list[list[str]], width: int) -> None:
    """print_wide of a rich Table(title_justify="left") with these columns (justify "left" / "right", header and
    cells) and str rows, for a table of many rows (`fit --top 100000`: 2,875 rows cost rich about 3 s of CPU, one
    of its Segment / Padding / measure passes a cell). To a pipe or a file without styles (color_system None, no
    FORCE_COLOR) and where every cell is plain (_plain_cell), the same text is written directly: rich's default box
    (box.HEAVY_HEAD), one space of padding each side of a cell, each column as wide as its widest cell or header
    (rich/table.py _calculate_column_widths: a table narrower than the console keeps its natural widths, so only
    where the total fits `width`; no wrapping, soft_wrap). Anything else (a terminal, colours, a cell with markup or
    wide characters, a table wider than `width`) goes through rich as before. tests/test_render_rows.py compares
    the two texts."""
    c = None if out.is_terminal else console(soft_wrap=True, width=width)
    widths = [len(h) for h in headers]
    plain = c is not None and c.color_system is None and all(_plain_cell(h) for h in headers)
    if plain:
        for r in rows:
            if not all(_plain_cell(x) for x in r):
                plain = False
                break
            widths = [max(w, len(x)) for w, x in zip(widths, r)]
    if plain and sum(widths) + 3 * len(widths) + 1 <= width:
        def line(cells):
            return "│" + "│".join(f" {x.rjust(w) if j == 'right' else x.ljust(w)} " for x, w, j in zip(cells, widths, justify)) + "│"
        text = ["┏" + "┳".join("━" * (w + 2) for w in widths) + "┓",
                "┃" + "┃".join(f" {h.rjust(w) if j == 'right' else h.ljust(w)} " for h, w, j in zip(headers, widths, justify)) + "┃",
                "┡" + "╇".join("━" * (w + 2) for w in widths) + "┩"]
        text += [line(r) for r in rows]
        text.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
        c.file.write("\n".join(text) + "\n")
        c.file.flush()
        return
    from rich.table import Table

    tab = Table(title_justify="left")
    for h, j in zip(headers, justify):
        tab.add_column(h, justify=j)
    for r in rows:
        tab.add_row(*r)
    print_wide(tab, width)


# ---------------------------------------------------------------- quantities
def print_skipped(rows: list[dict]) -> None:
    """The rows a validation skipped, one line each with its reason (validate, memory rows)."""
    skipped = [r for r in rows if r["skipped"] is not None]
    if skipped:
        out.print(f"skipped ({len(skipped)}):", highlight=False)
        for r in skipped:
            out.print(f"  {r['id']}: {r['skipped']}", highlight=False, markup=False)


def sharding_text(p: dict) -> str:
    """A plan's (explain's JSON `plan`) sharding in a table cell (fit's sharding column, validate's): its level, or its
    stack's mode where the level's first mode is another (issue 22: torchtitan's fsdp2_no_reshard beside fsdp2), or
    the mode in the stack's own words where its stack_db entry gives them (plan sharding_label: megatron's
    'Megatron-FSDP optim_grads', not 'zero2'); '/N' its HSDP shard group."""
    from ..catalog import load_stack
    from ..plan import named_mode

    mode = p.get("sharding_mode")
    name = p.get("sharding_label") or (
        mode if named_mode(load_stack(p["stack"]) if p.get("stack") else None, mode) else p["sharding"])
    return name + (f"/{p['shard_group']}" if p["shard_group"] else "")


def pct(x: Optional[float], missing: str = "") -> str:
    """A fraction as a percentage with one decimal: 0.4123 -> '41.2%'; None -> `missing`."""
    return missing if x is None else f"{100 * x:.1f}%"


def signed_pct(x: Optional[float]) -> str:
    """A relative error with its sign: -0.05 -> '-5.0%'; None -> ''."""
    return "" if x is None else f"{100 * x:+.1f}%"


def seconds(t: float) -> str:
    """Seconds without a unit, whole from 100 s up, else 3 significant digits: '1,234', '0.123'."""
    return f"{t:,.0f}" if t >= 100 else f"{t:.3g}"


def duration(x: float) -> str:
    """Seconds scaled to s, ms, us or ns with the unit: '1.234 s', '12.50 ms'."""
    if x == 0:
        return "0 s"
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(x) >= f:
            return f"{x / f:,.3f} {unit}" if unit == "s" else f"{x / f:,.2f} {unit}"
    return f"{x / 1e-9:,.1f} ns"


def gb(x: float, digits: int = 2) -> str:
    """Bytes in GB (1e9), without the unit."""
    return f"{x / GB:,.{digits}f}"


def gib(x: float, digits: int = 2) -> str:
    """Bytes in GiB (2^30), without the unit."""
    return f"{x / GiB:,.{digits}f}"


def capacity_text(m: dict) -> str:
    """The HBM a memory verdict is a share of, and which figure it is (memory.capacity_source):
    'measured' -- what the device reports to CUDA (hardware_db hbm_visible_GiB); 'measured on X' -- the
    same, measured on catalog GPU X with the same memory (hbm_visible_measured_on); 'datasheet' --
    the vendor's GB (hbm_GB x 1e9 bytes) where the catalog entry has no measurement."""
    cap = m["capacity_bytes"]
    src = m.get("capacity_source")
    if src == "measured":
        return f"{gib(cap, 1)} GiB HBM (measured, as CUDA reports it)"
    if isinstance(src, str) and src.startswith("measured on "):  # hardware_db hbm_visible_measured_on
        return f"{gib(cap, 1)} GiB HBM (as CUDA reports it, {src}: the same HBM)"
    if src == "datasheet":
        return f"{gib(cap, 1)} GiB HBM (datasheet {gb(cap, 0)} GB)"
    return f"{gib(cap, 1)} GiB HBM"


def si_bytes(x: float) -> str:
    """Bytes scaled to TB, GB, MB or kB (powers of 1000) with the unit; NaN -> '-'."""
    if x != x:  # NaN
        return "-"
    for unit, f in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= f:
            return f"{x / f:,.2f} {unit}"
    return f"{x:,.0f} B"


def binary_size(b: float) -> str:
    """A message size in GiB, MiB or KiB (powers of 1024), whole when exact: '1 MiB', '1.5 GiB'."""
    for unit, f in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if b >= f:
            v = b / f
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{b:.0f} B"


def gbps(x: float, digits: int = 1) -> str:
    """Bytes per second in GB/s (1e9) with the unit."""
    return f"{x / 1e9:,.{digits}f} GB/s"


def money(x: Optional[float]) -> str:
    """A cost in whole currency units with thousands separators; None -> ''."""
    return "" if x is None else f"{x:,.0f}"


def millions(x: Optional[float]) -> str:
    """A count or cost in millions: 1234567 -> '1.23M'; None -> ''."""
    return "" if x is None else f"{x / 1e6:,.2f}M"


def human_count(n: float) -> str:
    """A count in words: 70553706496 -> '70.55 billion'."""
    for unit, f in (("trillion", 1e12), ("billion", 1e9), ("million", 1e6)):
        if abs(n) >= f:
            return f"{n / f:,.2f} {unit}"
    return f"{n:,.0f}"


# ---------------------------------------------------------------- plans
def mesh(p: dict) -> str:
    """A plan's mesh, compact: '8x1x1x512' (TP x CP x PP x DP)."""
    return f"{p['tp']}x{p['cp']}x{p['pp']}x{p['dp']}"


def mesh_words(p: dict) -> str:
    """A plan's mesh, spelled out: 'TP 8 x CP 1 x PP 1 x DP 512'."""
    return f"TP {p['tp']} x CP {p['cp']} x PP {p['pp']} x DP {p['dp']}"
