"""Strings of the common JSON Schema ``format``s, for the embedded models' arguments and
structured answers (``schema_instances``): the input's own date, email or URL when it
holds one, else a fixed value (answers repeat), another one for each later item of an
array (unique items differ)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping

_EMAIL = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+")
_URL = re.compile(r"https?://[^\s\"'<>]{1,500}")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
# What a formatted string is when the input lends none (fixed, so answers repeat).
_FORMATS: Mapping[str, str] = {
    "date": "2025-01-31",
    "date-time": "2025-01-31T09:30:00Z",
    "time": "09:30:00Z",
    "duration": "P1D",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/",
    "iri": "https://example.com/",
    "url": "https://example.com/",
    "uri-reference": "https://example.com/",
    "iri-reference": "https://example.com/",
    "uri-template": "https://example.com/{id}",
    "json-pointer": "/0",
    "relative-json-pointer": "0",
    "regex": ".*",
    "byte": "dGV4dA==",
    "binary": "text",
    "password": "password",
}
_NAMESPACE = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")  # RFC 4122's URL namespace
_FOUND_IN_TEXT: Mapping[str, re.Pattern[str]] = {
    "email": _EMAIL,
    "idn-email": _EMAIL,
    "uri": _URL,
    "iri": _URL,
    "url": _URL,
    "date": _DATE,
}


def formatted_value(fmt: str, text: str, index: int = 0) -> str | None:
    """A string of the format ``fmt`` for the input ``text`` (its own date, email or
    URL when it holds one; item ``index`` of an array gets another value than the
    first), or None for a format not known here."""
    if fmt == "uuid":
        return str(uuid.uuid5(_NAMESPACE, f"{text}#{index}"))
    if fmt not in _FORMATS:
        return None
    found = _FOUND_IN_TEXT.get(fmt)
    match = [m for m in (found.findall(text) if found else []) if _well_formed(fmt, m)]
    if match and index < len(match):
        return str(match[index])
    return _FORMATS[fmt] if index == 0 else _nth(fmt, index)


def _nth(fmt: str, index: int) -> str:
    """Another value of ``fmt`` than the default, for an array's item ``index`` (unique
    items differ)."""
    n = index + 1
    others = {
        "date": f"2025-02-{min(n, 28):02d}",
        "date-time": f"2025-02-{min(n, 28):02d}T09:30:00Z",
        "time": f"09:{n % 60:02d}:00Z",
        "duration": f"P{n}D",
        "email": f"user{n}@example.com",
        "idn-email": f"user{n}@example.com",
        "hostname": f"host{n}.example.com",
        "idn-hostname": f"host{n}.example.com",
        "ipv4": f"192.0.2.{n % 256}",
        "ipv6": f"2001:db8::{n:x}",
        "json-pointer": f"/{n}",
        "relative-json-pointer": str(n),
    }
    default = _FORMATS[fmt]
    return others.get(fmt, f"{default}{n}" if default.endswith("/") else default)


def _well_formed(fmt: str, text: str) -> bool:
    """Whether the input's ``text`` is a value of ``fmt`` (a date must exist)."""
    if fmt != "date":
        return True
    from datetime import date

    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True
