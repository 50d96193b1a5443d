"""Bash pattern matching for the parameter expansions megatron.py's launch-script reader evaluates: `${X#p}`,
`${X##p}`, `${X%p}`, `${X%%p}` (remove a matching prefix / suffix), `${X/p/r}`, `${X//p/r}`, `${X/#p/r}`,
`${X/%p/r}` (replace a match) and `${X^p}`, `${X^^p}`, `${X,p}`, `${X,,p}` (case modification) [1]. Never
Python's fnmatch (whose `[` and `\\` differ from bash's), bounded work.

Read [2]: `*` (any string, the empty one too), `?` (one character), `[...]` bracket expressions (`!` or `^` first:
negated; `]` first: a literal `]`; ranges `a-z` in ASCII order, as bash >= 5.0 takes them with globasciiranges on
by default [3]; the classes `[:alpha:]`, `[:digit:]`, `[:alnum:]`, `[:upper:]`, `[:lower:]`, `[:space:]`,
`[:blank:]`, `[:punct:]`, `[:xdigit:]`, `[:word:]`), a backslash-escaped character and quoted text (`'*'`, `"*"`)
as literals. `*` matches `/` and a leading `.` alike (no pathname rules in parameter expansion [2]).

Answers None (the caller keeps the expansion unevaluated, an unreadable word) for what this reader does not
evaluate: an extended pattern (`?(`, `*(`, `+(`, `@(`, `!(`: bash reads them only under `shopt -s extglob`, which
a script may set where the reader does not follow it), an unclosed quote, a subject past MAX_SUBJECT characters,
and a replacement holding an unquoted `&` (bash 5.2 replaces it by the matched text, shopt patsub_replacement,
on by default; bash 5.1 and older keep it literal [4]: which one runs the script the reader cannot know).

Matching is leftmost, then longest, as bash's `${X/p/r}`; `#` / `%` take the shortest and `##` / `%%` the longest
matching prefix / suffix; `//` replaces every non-overlapping match left to right; an empty pattern replaces
nothing, except `/#` and `/%`, whose empty pattern matches the empty prefix / suffix (`${X/#/P}` -> `PX`) [1].
Checked by running bash 5.2.15 on each form (tests/test_megatron_script_shell.py carries the outputs).

[1] GNU Bash Reference Manual (bash 5.2), 3.5.3 Shell Parameter Expansion.
[2] Ibid., 3.5.8.1 Pattern Matching.
[3] Ibid., 4.3.2 The Shopt Builtin: globasciiranges ("on by default" since bash 5.0).
[4] Ibid., 4.3.2 The Shopt Builtin: patsub_replacement (new in bash 5.2, on by default).
"""

from __future__ import annotations

import re
import string
from typing import Optional

MAX_SUBJECT = 4096  # characters of a value matched against a pattern: a bound on work, not a bash limit (a launch
# script's values are paths and flag lists of a few hundred characters)

_CLASSES = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
            "space": r" \t\n\r\f\v", "blank": r" \t", "punct": re.escape(string.punctuation),
            "xdigit": "0-9A-Fa-f", "word": r"a-zA-Z0-9_"}


def unquote(word: str) -> Optional[list[tuple[str, bool]]]:
    """The characters of an expanded word with bash's quote removal, each with whether it is literal (quoted or
    backslash-escaped); None for an unclosed quote."""
    out: list[tuple[str, bool]] = []
    k, quote = 0, None
    while k < len(word):
        c = word[k]
        if quote == "'":
            if c == "'":
                quote = None
            else:
                out.append((c, True))
        elif quote == '"':
            if c == '"':
                quote = None
            elif c == "\\" and k + 1 < len(word) and word[k + 1] in '$`"\\':
                k += 1
                out.append((word[k], True))
            else:
                out.append((c, True))
        elif c in "'\"":
            quote = c
        elif c == "\\" and k + 1 < len(word):
            k += 1
            out.append((word[k], True))
        else:
            out.append((c, False))
        k += 1
    return None if quote else out


def _bracket(chars: list[tuple[str, bool]], k: int) -> Optional[tuple[str, int]]:
    """The regex class of the bracket expression opening at chars[k] (an unquoted `[`) and the index after its
    `]`; None where it does not close (the `[` is then a literal)."""
    j = k + 1
    neg = j < len(chars) and chars[j] in (("!", False), ("^", False))
    j += neg
    body = []
    first = True
    while j < len(chars):
        c, lit = chars[j]
        if c == "]" and not lit and not first:
            return "[" + ("^" if neg else "") + "".join(body) + "]", j + 1
        first = False
        if c == "[" and not lit and j + 1 < len(chars) and chars[j + 1] == (":", False):
            end = next((e for e in range(j + 2, len(chars) - 1) if chars[e] == (":", False) and chars[e + 1] == ("]", False)), None)
            name = "".join(ch for ch, _ in chars[j + 2:end]) if end is not None else None
            if name in _CLASSES:
                body.append(_CLASSES[name])
                j = end + 2
                continue
            if end is not None:
                return None  # an unknown class (bash: matches nothing): not read
        if c == "-" and not lit and body and j + 1 < len(chars) and chars[j + 1] != ("]", False):
            body.append("-")
        else:
            body.append(re.escape(c) if c not in "-" else r"\-")
        j += 1
    return None


def compile_pattern(word: str) -> Optional["re.Pattern"]:
    """The regex (DOTALL, to be fullmatched) of a bash pattern written as `word` (already parameter-expanded, its
    quotes still in it); None where it holds what this module does not read (see the module's docstring)."""
    chars = unquote(word)
    if chars is None:
        return None
    rx, k = [], 0
    while k < len(chars):
        c, lit = chars[k]
        if not lit and c in "?*+@!" and k + 1 < len(chars) and chars[k + 1] == ("(", False):
            return None  # an extended pattern (extglob)
        if lit:
            rx.append(re.escape(c))
        elif c == "*":
            if not rx or rx[-1] != ".*":  # `**` is `*`
                rx.append(".*")
        elif c == "?":
            rx.append(".")
        elif c == "[":
            b = _bracket(chars, k)
            if b is None:
                rx.append(re.escape("["))
            else:
                rx.append(b[0])
                k = b[1]
                continue
        else:
            rx.append(re.escape(c))
        k += 1
    return re.compile("".join(rx), re.DOTALL)


def _fits(rx, s: str) -> bool:
    return rx.fullmatch(s) is not None


def remove(value: str, op: str, word: str) -> Optional[str]:
    """`${X#p}` / `##` / `%` / `%%`: `value` without its shortest / longest prefix / suffix matching the pattern;
    None: not read."""
    rx = compile_pattern(word)
    if rx is None or len(value) > MAX_SUBJECT:
        return None
    n = len(value)
    if op in ("#", "##"):
        ends = range(0, n + 1) if op == "#" else range(n, -1, -1)
        for e in ends:
            if _fits(rx, value[:e]):
                return value[e:]
        return value
    starts = range(n, -1, -1) if op == "%" else range(0, n + 1)
    for b in starts:
        if _fits(rx, value[b:]):
            return value[:b]
    return value


def replacement(word: str) -> Optional[str]:
    """The replacement of `${X/p/r}` after quote removal; None where it holds an unquoted `&` (version-dependent:
    the module's docstring) or an unclosed quote."""
    chars = unquote(word)
    if chars is None or any(c == "&" and not lit for c, lit in chars) or ("\\&" in word):
        return None
    return "".join(c for c, _ in chars)


def replace(value: str, op: str, pattern: str, rep: str) -> Optional[str]:
    """`${X/p/r}` (op `/`), `${X//p/r}` (`//`), `${X/#p/r}` (`/#`), `${X/%p/r}` (`/%`); rep already through
    replacement(). None: not read."""
    rx = compile_pattern(pattern)
    if rx is None or len(value) > MAX_SUBJECT:
        return None
    n = len(value)
    if op == "/#":
        for e in range(n, -1, -1):
            if _fits(rx, value[:e]):
                return rep + value[e:]
        return value
    if op == "/%":
        for b in range(0, n + 1):
            if _fits(rx, value[b:]):
                return value[:b] + rep
        return value
    if pattern == "":
        return value
    search = re.compile(rx.pattern, re.DOTALL)
    out, k = [], 0
    while k <= n:
        m = search.search(value, k)
        if m is None:
            break
        b = m.start()
        e = next(e for e in range(n, b - 1, -1) if _fits(rx, value[b:e]))  # the longest match at the leftmost start
        if e == b:  # a match of nothing replaces nothing: move on a character
            out.append(value[k:b + 1])
            k = b + 1
            continue
        out.append(value[k:b] + rep)
        k = e
        if op == "/":
            break
    out.append(value[k:])
    return "".join(out)


def case(value: str, op: str, word: str) -> Optional[str]:
    """`${X^p}` / `^^` (upper case) and `${X,p}` / `,,` (lower case): the first character, or every one, that
    matches the pattern (one character; an empty pattern is `?`). None: not read."""
    rx = compile_pattern(word or "?")
    if rx is None or len(value) > MAX_SUBJECT:
        return None
    conv = str.upper if op[0] == "^" else str.lower
    chars = list(value)
    for k, c in enumerate(chars[:1] if len(op) == 1 else chars):
        if _fits(rx, c):
            chars[k] = conv(c)
    return "".join(chars)
