"""Bash arithmetic `$(( ... ))` of integers, for the launch scripts megatron.py reads: never
Python's eval, bounded work, bash's rules for what it reads.

Read: decimal, octal (a leading 0) and hex (0x) integer constants; unary + and -; ** (right
to left); * / % ; + - (left to right); parentheses. Precedence as the bash manual's
ARITHMETIC EVALUATION table [1] (highest first): unary - +, **, * / %, + -. So `-2**2` is 4,
as bash has it (Python's eval gives -4). `/` truncates toward zero and `%` takes the
dividend's sign (C's rules, which bash's expr.c uses [2]).

Answers:
  an int       the value (within a signed 64-bit integer, bash's intmax_t);
  None         the text holds what this reader does not evaluate (a name, a comparison, a
               shift, `?:`, `base#n`): the caller leaves the `$(( ... ))` unexpanded;
  ShellArithError  what bash itself refuses (`08`: "value too great for base", division by
               0, a negative exponent, a non-ASCII character such as a fullwidth digit)
               or a result beyond 64 bits, which bash would silently wrap around: an error,
               not a guess.

Bounded work: at most MAX_CHARS characters and MAX_DEPTH nested parentheses; every
intermediate value stays within 64 bits and an exponent is checked before it is applied,
so `9**9**9` is refused at once rather than computed.

[1] GNU Bash Reference Manual, 6.5 Shell Arithmetic (bash 5.2).
[2] bash-5.2 expr.c: exp2() `/` and `%` on intmax_t; strlong(): "value too great for base".
"""

from __future__ import annotations

import re
from typing import Optional

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # bash's intmax_t on the 64-bit hosts that launch training
MAX_CHARS = 1000  # a bound on work, not a bash limit: a launch script's arithmetic is a few products
MAX_DEPTH = 64  # nested parentheses (a bound on the recursion)

_TOKEN = re.compile(r"\s*(?:(0[xX][0-9A-Fa-f]+|[0-9]+)|(\*\*|[-+*/%()]))")


class ShellArithError(ValueError):
    """Arithmetic bash refuses, or whose value bash would wrap around."""


class _Unsupported(Exception):
    """What this reader leaves unexpanded."""


def _number(tok: str) -> int:
    if tok[:2] in ("0x", "0X"):
        return int(tok[2:], 16)
    if len(tok) > 1 and tok[0] == "0":
        if re.search(r"[89]", tok):
            raise ShellArithError(f"{tok}: value too great for base (a leading 0 is octal in bash; 8 and 9 are no "
                                  "octal digits)")
        return int(tok, 8)
    return int(tok)


def _checked(v: int, expr: str) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise ShellArithError(f"{expr} is beyond a 64-bit integer (bash would wrap it around)")
    return v


class _Parser:
    def __init__(self, tokens: list[str]):
        self.toks, self.i = tokens, 0

    def peek(self) -> Optional[str]:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        t = self.toks[self.i]
        self.i += 1
        return t

    def additive(self, depth: int) -> int:
        v = self.multiplicative(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            w = self.multiplicative(depth)
            v = _checked(v + w if op == "+" else v - w, f"{v} {op} {w}")
        return v

    def multiplicative(self, depth: int) -> int:
        v = self.power(depth)
        while self.peek() in ("*", "/", "%"):
            op = self.take()
            w = self.power(depth)
            if op == "*":
                v = _checked(v * w, f"{v} * {w}")
                continue
            if w == 0:
                raise ShellArithError("division by 0")
            q = abs(v) // abs(w) * (1 if (v < 0) == (w < 0) else -1)  # C: toward zero
            v = _checked(q if op == "/" else v - q * w, f"{v} {op} {w}")
        return v

    def power(self, depth: int) -> int:
        base = self.unary(depth)
        if self.peek() != "**":
            return base
        self.take()
        exp = self.power(depth)  # right to left: 2**3**2 = 2**9
        if exp < 0:
            raise ShellArithError("exponent less than 0")
        if abs(base) >= 2 and exp > 63:  # |base|**64 > 2**63 - 1: refused before it is computed
            raise ShellArithError(f"{base} ** {exp} is beyond a 64-bit integer (bash would wrap it around)")
        return _checked(base**exp, f"{base} ** {exp}")

    def unary(self, depth: int) -> int:
        t = self.peek()
        if t in ("+", "-"):
            self.take()
            if depth >= MAX_DEPTH:
                raise ShellArithError(f"over {MAX_DEPTH} nested signs")
            v = self.unary(depth + 1)
            return _checked(-v if t == "-" else v, f"-({v})")
        return self.primary(depth)

    def primary(self, depth: int) -> int:
        t = self.peek()
        if t is None:
            raise _Unsupported
        self.take()
        if t == "(":
            if depth >= MAX_DEPTH:
                raise ShellArithError(f"over {MAX_DEPTH} nested parentheses")
            v = self.additive(depth + 1)
            if self.peek() != ")":
                raise _Unsupported
            self.take()
            return v
        if t[0].isdigit():
            return _checked(_number(t), t)
        raise _Unsupported


def evaluate(expr: str) -> Optional[int]:
    """The value of bash arithmetic `expr` (the text inside `$(( ))`, variables already
    substituted), None where it holds what this reader leaves unexpanded; ShellArithError
    where bash refuses it or its value passes 64 bits."""
    if len(expr) > MAX_CHARS:
        raise ShellArithError(f"arithmetic of {len(expr)} characters (more than {MAX_CHARS} are not read)")
    if not expr.isascii():
        bad = next(c for c in expr if not c.isascii())
        raise ShellArithError(f"{bad!r} is not bash arithmetic (bash reads ASCII digits and operators only)")
    tokens: list[str] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            if not expr[pos:].strip():
                break
            return None  # a name, a comparison, a shift, `?:` ...: left as written
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    if not tokens:
        return None
    p = _Parser(tokens)
    try:
        v = p.additive(0)
    except _Unsupported:
        return None
    if p.i != len(tokens):
        return None
    return v
