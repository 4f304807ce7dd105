"""A value that conforms to a JSON Schema, made without a validator (v5): what the
embedded models send as an app tool's arguments and answer under structured output, so
an app's tools and its structured output can be exercised on ``make run``.

Deterministic, and the input's words wherever a free string fits: a string is the input
(cut to ``maxLength``, padded to ``minLength``), a number the input's next number when it
is in range, a formatted string the input's own date, email or URL when it holds one.
Followed: ``type`` (a list: its first type other than null), ``const``, ``enum``,
``$ref`` into the same document (``$defs``, ``definitions``, ``#``), ``allOf`` (merged),
``anyOf`` / ``oneOf`` (the first branch that is not null), ``properties``, ``required``,
``additionalProperties``, ``min``/``maxProperties``, ``items``, ``prefixItems``,
``contains``, ``min``/``maxItems``, ``uniqueItems``, ``min``/``maxLength``, ``pattern``
(the input's words when RE2 finds a match in them, else a string built from the
pattern, ``pattern_strings``: a hostile pattern costs nothing), the common ``format``s
(``schema_formats``), ``minimum``, ``maximum``, their exclusive forms and ``multipleOf``.

Bounded, so a hostile schema cannot make it run long or answer big: at most
``MAX_DEPTH`` levels (optional properties down to ``OPTIONAL_DEPTH``), ``MAX_VALUES``
values, ``MAX_ITEMS`` items an array, ``MAX_STRING_CHARS`` characters a string and
``MAX_TOTAL_CHARS`` in all. Past a bound it answers null where the schema allows it, else
the least value of the type (which a schema that asks for more does not accept: such a
schema gets the best effort, never an unbounded one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from convo_memory.domain.pattern_strings import string_matching
from convo_memory.domain.schema_formats import formatted_value

MAX_DEPTH = 12
MAX_VALUES = 400
MAX_ITEMS = 16
MAX_PROPERTIES = 64
MAX_STRING_CHARS = 1_000
# Characters all the strings of one value may hold; past it each string gets a few.
MAX_TOTAL_CHARS = 16_000
MIN_CHARS_LEFT = 8
MAX_REF_HOPS = 16
# How many variants of a repeated item an array with unique items tries.
UNIQUE_TRIES = 8
# How deep optional properties are still given a value (required ones always are).
OPTIONAL_DEPTH = 4
# A number standing alone (not a part of a date, a time, an id or a version).
_NUMBER = re.compile(r"(?<![\w.:/-])-?\d+(?:\.\d+)?(?![\w:/-]|\.\d)")
_ONE_OF_KEYS = ("anyOf", "oneOf")


def schema_instance(schema: Any, text: str) -> Any:
    """A value that conforms to ``schema`` (a JSON Schema, as parsed JSON), made of the
    words of ``text`` where they fit; the best effort, bounded, where it cannot."""
    return _Maker(schema, text).value(schema, 0)


class _Maker:
    def __init__(self, root: Any, text: str) -> None:
        self.root = root
        self.text = " ".join(text.split())
        self.numbers = [float(n) for n in _NUMBER.findall(self.text)]
        self.values_left = MAX_VALUES
        self.resolutions_left = MAX_VALUES
        self.chars_left = MAX_TOTAL_CHARS

    def value(self, schema: Any, depth: int, name: str = "", index: int = 0) -> Any:
        """A value for ``schema``; ``name`` the property it is for, ``index`` its place
        among an array's items (so that unique items differ)."""
        self.values_left -= 1
        schema = self.resolved(schema)
        if schema is False:
            return None
        if not isinstance(schema, dict):
            schema = {}
        if self.values_left < 0 or depth > MAX_DEPTH:
            return None if _allows_null(schema) else _least(_type_of(schema))
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[index % len(enum)]
        for key in _ONE_OF_KEYS:
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                rest = {k: v for k, v in schema.items() if k not in _ONE_OF_KEYS}
                branch = self.resolved(_first_not_null(branches))
                merged = _merged(rest, branch) if isinstance(branch, dict) else rest
                return self.value(merged, depth + 1, name, index)
        kind = _type_of(schema)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, depth, name)
        if kind in ("integer", "number"):
            return self.number(schema, kind == "integer", index)
        if kind == "boolean":
            return index % 2 == 0
        if kind == "null":
            return None
        return self.string(schema, name, index)

    def resolved(self, schema: Any) -> Any:
        """``schema`` with its ``$ref`` (into this document) and ``allOf`` folded in
        (at most ``MAX_VALUES`` foldings a value: references that lead back into
        themselves end as an empty schema)."""
        self.resolutions_left -= 1
        if self.resolutions_left < 0:
            return {}
        for _ in range(MAX_REF_HOPS):
            if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
                break
            target = _pointed(self.root, schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = _merged(target, rest) if isinstance(target, dict) else rest
        if isinstance(schema, dict) and isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"][:MAX_PROPERTIES]:
                part = self.resolved(part)
                if isinstance(part, dict):
                    merged = _merged(merged, part)
            schema = merged
        return schema

    def object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = [n for n in schema.get("required") or () if isinstance(n, str)]
        # Optional properties near the top only, so an optional recursive one ends.
        optional = list(properties) if depth <= OPTIONAL_DEPTH else []
        names = list(dict.fromkeys([*required, *optional]))[:MAX_PROPERTIES]
        most = schema.get("maxProperties")
        if isinstance(most, int) and len(names) > most:
            names = names[: max(most, len(required))]
        extra = schema.get("additionalProperties", True)
        fewest = schema.get("minProperties")
        if isinstance(fewest, int) and extra is not False:
            names += [f"field{n}" for n in range(1, min(fewest, MAX_PROPERTIES) - len(names) + 1)]
        made: dict[str, Any] = {}
        for name in names:
            property_schema = properties.get(name, extra if isinstance(extra, dict) else {})
            made[name] = self.value(property_schema, depth + 1, name)
        return made

    def array(self, schema: Mapping[str, Any], depth: int, name: str) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # the tuple form of drafts before 2020-12
            prefix, items = items, schema.get("additionalItems", {})
        prefix = prefix if isinstance(prefix, list) else []
        fewest, most = _whole(schema.get("minItems"), 0), _whole(schema.get("maxItems"), MAX_ITEMS)
        count = min(max(fewest, len(prefix), 1), most, MAX_ITEMS)
        if items is False:
            count = min(count, len(prefix))
        contains = schema.get("contains")
        unique = schema.get("uniqueItems") is True
        made: list[Any] = []
        seen: set[str] = set()
        for index in range(count):
            if index < len(prefix):
                item_schema = prefix[index]
            elif index == 0 and isinstance(contains, dict | bool):
                item_schema = contains
            else:
                item_schema = items
            # Unique items: a few other variants of an item that repeats an earlier one.
            for variant in range(index, index + (count * UNIQUE_TRIES if unique else 1), count):
                item = self.value(item_schema, depth + 1, name, variant)
                if not unique or _json_key(item) not in seen:
                    break
            if not unique or _json_key(item) not in seen:
                seen.add(_json_key(item))
                made.append(item)
        return made

    def number(self, schema: Mapping[str, Any], integer: bool, index: int) -> int | float:
        bounds = _Bounds(schema, integer)
        while self.numbers:
            candidate = self.numbers.pop(0)
            if bounds.admits(candidate):
                return int(candidate) if integer or candidate.is_integer() else candidate
        return bounds.first_from(1 + index)

    def string(self, schema: Mapping[str, Any], name: str, index: int) -> str:
        fmt = schema.get("format")
        formatted = formatted_value(fmt, self.text, index) if isinstance(fmt, str) else None
        if formatted is not None:
            return formatted
        words = self.text or name or "text"
        if index:  # an array's later items differ from the first, at their start
            words = f"{index + 1} {words}"
        fewest, most = schema.get("minLength"), schema.get("maxLength")
        most = min(most, self.chars_left) if isinstance(most, int) else self.chars_left
        pattern = schema.get("pattern")
        made = _sized(words, fewest, most)
        if isinstance(pattern, str):
            candidates = [made, *words.split(), name]
            made = _matching(pattern, [c for c in candidates if _fits(c, fewest, most)], made)
        self.chars_left = max(self.chars_left - len(made), MIN_CHARS_LEFT)
        return made


class _Bounds:
    """A number's range and step, as the schema states them (drafts 4 to 2020-12)."""

    def __init__(self, schema: Mapping[str, Any], integer: bool) -> None:
        self.integer = integer
        self.low, self.high = (
            _numeric(schema.get("minimum"), -math.inf),
            _numeric(schema.get("maximum")),
        )
        # Draft 4 made them flags on the bounds; later drafts, bounds of their own.
        self.low_open = schema.get("exclusiveMinimum") is True
        self.high_open = schema.get("exclusiveMaximum") is True
        exclusive_low = _numeric(schema.get("exclusiveMinimum"), -math.inf)
        exclusive_high = _numeric(schema.get("exclusiveMaximum"))
        if exclusive_low >= self.low and math.isfinite(exclusive_low):
            self.low, self.low_open = exclusive_low, True
        if exclusive_high <= self.high and math.isfinite(exclusive_high):
            self.high, self.high_open = exclusive_high, True
        step = _numeric(schema.get("multipleOf"), 0.0)
        self.step = step if step > 0 else None

    def admits(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        whole = not self.integer or float(value).is_integer()
        return above and below and whole and self._on_step(value)

    def _on_step(self, value: float) -> bool:
        if self.step is None:
            return True
        quotient = value / self.step
        return math.isfinite(quotient) and float(quotient).is_integer()

    def first_from(self, preferred: int) -> int | float:
        """``preferred`` when admitted, else the first admitted multiple of the step
        (1 for an integer without one) from the low bound, or below the high one; else
        the low bound (the best effort for a range with no such number)."""
        if self.admits(preferred):
            return preferred
        step = self.step or 1.0
        if math.isfinite(self.low):
            start = math.floor(self.low / step)
        elif math.isfinite(self.high):
            start = math.floor(self.high / step) - 2
        else:
            start = math.floor(preferred / step)
        for k in range(start, start + 4):
            candidate = k * step
            if self.admits(candidate):
                return int(candidate) if float(candidate).is_integer() else candidate
        if math.isfinite(self.low):
            return math.ceil(self.low) if self.integer else self.low
        return 0


def _numeric(value: Any, default: float = math.inf) -> float:
    return float(value) if _is_number(value) else default


def _whole(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _type_of(schema: Mapping[str, Any]) -> str:
    """The type to make: the schema's (a list: the first other than null), else the one
    its keywords imply, else a string."""
    declared = schema.get("type")
    if isinstance(declared, list):
        named = [t for t in declared if isinstance(t, str)]
        declared = next((t for t in named if t != "null"), named[0] if named else None)
    if isinstance(declared, str):
        return declared
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        return "object"
    if any(k in schema for k in ("items", "prefixItems", "minItems", "contains")):
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "multipleOf", "exclusiveMinimum")):
        return "number"
    return "string"


def _least(kind: str) -> Any:
    return {"object": {}, "array": [], "integer": 0, "number": 0, "boolean": False}.get(
        kind, None if kind == "null" else ""
    )


def _allows_null(schema: Mapping[str, Any]) -> bool:
    declared = schema.get("type")
    if declared == "null" or (isinstance(declared, list) and "null" in declared):
        return True
    branches = [b for key in _ONE_OF_KEYS for b in _listed(schema.get(key))]
    return any(isinstance(branch, dict) and branch.get("type") == "null" for branch in branches)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _first_not_null(branches: Sequence[Any]) -> Any:
    for branch in branches:
        if not (isinstance(branch, dict) and branch.get("type") == "null"):
            return branch
    return branches[0]


def _merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Two schemas as one: their properties and required names joined, any other
    keyword ``extra``'s."""
    merged = {**base, **extra}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(base.get(key), dict) and isinstance(extra.get(key), dict):
            merged[key] = {**base[key], **extra[key]}
    if isinstance(base.get("required"), list) and isinstance(extra.get("required"), list):
        merged["required"] = list(dict.fromkeys([*base["required"], *extra["required"]]))
    return merged


def _pointed(root: Any, ref: str) -> Any:
    """What a ``$ref`` into the same document points at (``#``, ``#/$defs/Name``...);
    an empty schema for any other reference (never fetched)."""
    if not ref.startswith("#"):
        return {}
    node = root
    for token in [t for t in ref[1:].split("/") if t][:MAX_DEPTH]:
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return {}
    return node


def _sized(words: str, fewest: Any, most: Any) -> str:
    """``words`` within the length bounds (in characters, as JSON Schema counts them):
    cut at a space when one is near the end, padded by repeating them."""
    limit = min(most, MAX_STRING_CHARS) if isinstance(most, int) and most >= 0 else MAX_STRING_CHARS
    if len(words) > limit:
        cut = words[:limit]
        space = cut.rfind(" ")
        words = cut[:space] if space >= limit // 2 and space > 0 else cut
    need = min(fewest, limit) if isinstance(fewest, int) else 0
    if len(words) < need:
        base = words or "x"
        words = " ".join([base] * (need // (len(base) + 1) + 2))[:need]
        if words.endswith(" "):
            words = words[:-1] + "."
    return words


def _fits(text: str, fewest: Any, most: int) -> bool:
    return (not isinstance(fewest, int) or len(text) >= fewest) and len(text) <= most


def _matching(pattern: str, candidates: Sequence[str], fallback: str) -> str:
    """The first candidate that ``pattern`` finds a match in (RE2, linear time; a pattern
    RE2 cannot compile matches none), else a string built from the pattern, else
    ``fallback``."""
    import re2  # lazily: only schemas with a pattern pay for it

    try:
        compiled = re2.compile(pattern)
    except re2.error:
        return fallback
    for candidate in candidates:
        if candidate and compiled.search(candidate):
            return candidate
    return string_matching(pattern) or fallback


def _json_key(item: Any) -> str:
    """``item`` as ``uniqueItems`` compares it (JSON equality)."""
    import json

    return json.dumps(item, sort_keys=True, default=str)
