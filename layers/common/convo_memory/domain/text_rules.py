"""Rules about text that both the input gate and the adapters apply (pure)."""

from __future__ import annotations


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` cannot be encoded as UTF-8. JSON decoding joins escaped pairs
    into one code point, so any surrogate left in a decoded string is unpaired."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
