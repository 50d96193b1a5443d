"""Parse human quantities into SI and back.

Decimal prefixes (k, M, G, T, P = 1e3 ...) and binary ones (Ki, Mi, Gi, Ti = 2**10 ...)
follow IEC 80000-13. Inside the code everything is SI: bytes, seconds, FLOPs.
"""

from __future__ import annotations

import math
import re

from .errors import PlannerError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0, "d": 86400.0}

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

GB = 1e9
GiB = 2.0**30
TFLOP = 1e12


def _finite(x: float, what: str, text) -> float:
    """x, unless the text named a number beyond a double (1e400 reads as infinity)."""
    if not math.isfinite(x):
        raise PlannerError(f"{what} {text!r} is beyond the largest number a double holds (1.8e308)", "give a finite number")
    return x


def parse_count(text: str | int | float, what: str = "value") -> float:
    """'16M' -> 16e6, '15e12' -> 1.5e13, '2,048' -> 2048, '1.5T' -> 1.5e12."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().replace(",", "").replace("_", "")
    m = re.fullmatch(_NUM + r"\s*([kKMGTPE]?)", s)
    if not m:
        raise PlannerError(f"cannot read {what} {text!r}", "write a number, optionally with k, M, G, T, P (e.g. 16M, 15e12)")
    return _finite(float(m.group(1)) * _DEC[m.group(2)], what, text)


def parse_bytes(text: str | int | float, what: str = "size") -> float:
    """'141GB' -> 141e9, '4GiB' -> 4*2**30, '512' -> 512 bytes, '8M' -> 8e6."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().replace(",", "").replace("_", "")
    m = re.fullmatch(_NUM + r"\s*((?:[kKMGTPE]i?)?)\s*([Bb]?)", s)
    if not m or (m.group(3) == "b"):
        raise PlannerError(f"cannot read {what} {text!r}", "write bytes such as 141GB, 4GiB, 512MB or 1024")
    prefix = m.group(2)
    factor = _BIN[prefix[0].upper() + "i"] if prefix.endswith("i") else _DEC[prefix]
    return _finite(float(m.group(1)) * factor, what, text)


def parse_seconds(text: str | int | float, what: str = "time") -> float:
    """'10us' -> 1e-5, '30s' -> 30, '12h' -> 43200, '5' -> 5 s."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*(s|ms|us|µs|ns|min|h|d)?", s)
    if not m:
        raise PlannerError(f"cannot read {what} {text!r}", "write a time such as 10us, 30s, 10min, 12h")
    return _finite(float(m.group(1)) * _TIME[m.group(2) or "s"], what, text)
