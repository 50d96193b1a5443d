"""Parse human quantities into SI and back.

Decimal prefixes (k, M, G, T, P = 1e3 ...) and binary ones (Ki, Mi, Gi, Ti = 2**10 ...)
follow IEC 80000-13. Inside the code everything is SI: bytes, seconds, FLOPs.
"""

from __future__ import annotations

import math
import re
from typing import Optional

from .errors import PlannerError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0, "d": 86400.0}

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

def finite(value: float, what: str, text=None) -> float:
    """`value` if it is a finite number, else a PlannerError naming `what` (1e400 reads as
    inf, and a size in GiB of 1e308 overflows to inf in bytes: neither is a quantity)."""
    if not math.isfinite(value):
        shown = value if text is None else text
        raise PlannerError(f"{what} {shown!r} is not a finite number", "give a finite value (e.g. 16M, 15e12)")
    return value


def _as_float(x, what: str) -> float:
    try:
        return float(x)
    except OverflowError:  # an int beyond float's range
        raise PlannerError(f"{what} {x!r} is not a finite number", "give a finite value") from None


_THOUSANDS = re.compile(r"[0-9]{1,3}(,[0-9]{3})+")


def refuse_thousands_separator(text: str, option: str) -> Optional[str]:
    """A comma list option (`--gpus 2048,4096`) given one number written with thousands
    separators would run as several counts. `4,096` (a group after a comma with a leading
    zero: no one writes a count as 096) is refused; a list whose groups after the first are all
    three digits without one (`64,128,256`, `16,384`) is read as a list, and the returned
    warning says so, for the caller to print (every count it names then appears in the
    output). None: nothing ambiguous."""
    t = str(text).strip()
    if not _THOUSANDS.fullmatch(t):
        return None
    one = t.replace(",", "")
    parts = t.split(",")
    if any(p.startswith("0") for p in parts[1:]):
        raise PlannerError(f"{option} {t!r} reads as the number {int(one):,} written with a thousands separator",
                           f"write {option} {one} for one value; for a list of several, put a space after each comma "
                           f"({option} '{', '.join(parts)}')")
    return (f"{option} {t!r} is read as the list {', '.join(parts)}; for the single count {int(one):,} "
            f"write {option} {one}")


GB = 1e9
GiB = 2.0**30
TFLOP = 1e12


def parse_count(text: str | int | float, what: str = "value") -> float:
    """'16M' -> 16e6, '15e12' -> 1.5e13, '2,048' -> 2048, '1.5T' -> 1.5e12."""
    if isinstance(text, (int, float)):
        return finite(_as_float(text, what), what)
    s = str(text).strip().replace(",", "").replace("_", "")
    m = re.fullmatch(_NUM + r"\s*([kKMGTPE]?)", s)
    if not m:
        # two misreadings a user makes, named (before the 2026-12-07 audit5 both were "cannot read"): a negative
        # count, and B for billion (Megatron's --step-batch-size-schedule spelling; here G, the SI prefix)
        if re.fullmatch(r"-\s*" + _NUM + r"\s*[kKMGTPEB]?", s):
            raise PlannerError(f"{what} {text!r} is negative", "give a positive number")
        if (b := re.fullmatch(_NUM + r"\s*[bB]", s)) is not None:
            raise PlannerError(f"cannot read {what} {text!r}: B is not a prefix here",
                               f"write billions with G ({b.group(1)}G) or as {b.group(1)}e9; the prefixes are k, M, G, T, P")
        raise PlannerError(f"cannot read {what} {text!r}", "write a number, optionally with k, M, G, T, P (e.g. 16M, 15e12)")
    return finite(float(m.group(1)) * _DEC[m.group(2)], what, text)


def parse_bytes(text: str | int | float, what: str = "size") -> float:
    """'141GB' -> 141e9, '4GiB' -> 4*2**30, '512' -> 512 bytes, '8M' -> 8e6."""
    if isinstance(text, (int, float)):
        return finite(_as_float(text, what), what)
    s = str(text).strip().replace(",", "").replace("_", "")
    m = re.fullmatch(_NUM + r"\s*((?:[kKMGTPE]i?)?)\s*([Bb]?)", s)
    if not m or (m.group(3) == "b"):
        if re.fullmatch(r"-\s*" + _NUM + r"\s*(?:[kKMGTPE]i?)?\s*B?", s):  # named, as parse_count names it (audit5)
            raise PlannerError(f"{what} {text!r} is negative", "give a positive size, such as 141GB or 4GiB")
        raise PlannerError(f"cannot read {what} {text!r}", "write bytes such as 141GB, 4GiB, 512MB or 1024")
    prefix = m.group(2)
    factor = _BIN[prefix[0].upper() + "i"] if prefix.endswith("i") else _DEC[prefix]
    return finite(float(m.group(1)) * factor, what, text)


def parse_seconds(text: str | int | float, what: str = "time") -> float:
    """'10us' -> 1e-5, '30s' -> 30, '12h' -> 43200, '5' -> 5 s."""
    if isinstance(text, (int, float)):
        return finite(_as_float(text, what), what)
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*(s|ms|us|µs|ns|min|h|d)?", s)
    if not m:
        if re.fullmatch(r"-\s*" + _NUM + r"\s*(s|ms|us|µs|ns|min|h|d)?", s):  # named, as parse_count names it (audit5)
            raise PlannerError(f"{what} {text!r} is negative", "give a positive time, such as 30s, 10min or 12h")
        raise PlannerError(f"cannot read {what} {text!r}", "write a time such as 10us, 30s, 10min, 12h")
    return finite(float(m.group(1)) * _TIME[m.group(2) or "s"], what, text)


def refuse_repeat(g, seen, option: str, what: str = "GPU count") -> None:
    """A value already in `seen` is refused, not searched twice: a list of GPU counts (budget's --sweep-gpus, fit's
    --gpus) and every other list option of fit (--tp 4,4, --sharding zero1,zero1: what names the kind of value)."""
    if g in seen:
        raise PlannerError(f"{option}: {g} is listed twice", f"list each {what} once")
