"""A short string that a JSON Schema ``pattern`` matches, for the embedded models'
arguments and structured answers (``schema_instances``).

The pattern is parsed (never matched) by the standard library's regular expression
parser, which reads it once in time proportional to its length, and a string is built
from the parse: each literal as written, a class's first member, a repetition its least
count (at least once where the pattern allows it), an alternation its first branch. Only
what RE2 then finds a match in is returned (RE2 runs in linear time), so a pattern
outside this subset costs nothing and gives None.
"""

from __future__ import annotations

import importlib
from typing import Any

MAX_PATTERN_STRING = 256
_MAX_NODES = 2_000
_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": "-",
}


def string_matching(pattern: str) -> str | None:
    """A string RE2 finds a match of ``pattern`` in, or None when none could be built."""
    import re2  # lazily: only schemas with a pattern pay for it

    try:
        compiled = re2.compile(pattern)
        built = _Builder().build(_parsed(pattern))
    except (re2.error, ValueError, TypeError, IndexError, RecursionError, _Unsupported):
        return None
    if built is None or len(built) > MAX_PATTERN_STRING or not compiled.search(built):
        return None
    return built


def _parsed(pattern: str) -> Any:
    # The standard library's own parser (3.11+), imported by name: newer type stubs do
    # not declare the private module, which mypy would refuse.
    sre_parse: Any = importlib.import_module("re._parser")

    try:
        return sre_parse.parse(pattern)
    except Exception as exc:  # re.error, and anything else its parser raises
        raise _Unsupported from exc


class _Unsupported(Exception):
    pass


class _Builder:
    def __init__(self) -> None:
        self.nodes = _MAX_NODES

    def build(self, parsed: Any) -> str | None:
        out: list[str] = []
        for op, arg in parsed:
            self.nodes -= 1
            if self.nodes < 0:
                raise _Unsupported
            piece = self.piece(str(op), arg)
            if piece is None:
                return None
            out.append(piece)
            if sum(map(len, out)) > MAX_PATTERN_STRING:
                raise _Unsupported
        return "".join(out)

    def piece(self, op: str, arg: Any) -> str | None:
        if op == "LITERAL":
            return chr(arg)
        if op == "NOT_LITERAL":
            return "a" if chr(arg) != "a" else "b"
        if op == "ANY":
            return "a"
        if op == "IN":
            return _member(arg)
        if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, body = arg
            one = self.build(body)
            return None if one is None else one * max(int(low), 1 if _high else 0)
        if op == "SUBPATTERN":
            return self.build(arg[-1])
        if op == "BRANCH":
            return self.build(arg[1][0])
        if op in ("AT", "ASSERT", "ASSERT_NOT"):
            return ""  # anchors and look-arounds: RE2 checks the result
        if op == "CATEGORY":
            return _CATEGORY_CHARS.get(str(arg))
        raise _Unsupported


def _member(items: Any) -> str | None:
    """The first character a character class admits (a negated class: one it lacks)."""
    negated = any(str(op) == "NEGATE" for op, _ in items)
    if negated:
        refused = {chr(a) for op, a in items if str(op) == "LITERAL"}
        return next(c for c in "aA0-_ x" if c not in refused)
    for op, arg in items:
        if str(op) == "LITERAL":
            return chr(arg)
        if str(op) == "RANGE":
            return chr(arg[0])
        if str(op) == "CATEGORY":
            return _CATEGORY_CHARS.get(str(arg))
    return None
