"""The fence nonce in data, found as the contract compares it and broken (v5, "Prompts a
provider can cache"): data is compared with the nonce after Unicode NFKC normalisation
and case folding, with everything but letters and digits removed, so an upper-case,
full-width, mathematical-digit or split copy (``A-B-C``, zero-width spaces between) is
an occurrence too. Every character that spells an occurrence is removed, and a removal
that splices another one together removes that one too, so what is left holds none.

Finding one costs a normalised copy of the text (in C); only text that holds one is
walked character by character, once: a stack of the letters and digits kept so far
meets a spliced occurrence the moment its last character arrives, so an adversarial
nesting of copies is removed in one pass, in time linear in the text.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_NOT_ASCII_ALNUM = re.compile(r"[^0-9a-z]+")


def folded(text: str) -> str:
    """``text`` as the contract compares it: NFKC, case folded, letters and digits only."""
    if text.isascii():
        return _NOT_ASCII_ALNUM.sub("", text.lower())
    return "".join(filter(str.isalnum, unicodedata.normalize("NFKC", text).casefold()))


def holds(text: str, nonce: str) -> bool:
    """Whether ``text`` holds an occurrence of ``nonce`` (as the contract compares)."""
    target = folded(nonce)
    return bool(target) and target in folded(text)


def without_nonce(text: str, nonce: str) -> str:
    """``text`` with every occurrence of ``nonce`` broken: the characters that spell it
    (each character folded on its own, which finds at least what the whole text's
    folding finds) removed, spliced occurrences included."""
    target = folded(nonce)
    while target and target in folded(text):
        kept = _remove(text, list(target))
        if kept == text:
            # Only the whole text's folding spells it (combining characters): every
            # character with a letter or digit goes, which leaves none to spell it.
            kept = "".join(char for char in text if not _fold_char(char))
            if kept == text:
                return ""
        text = kept
    return text


def _remove(text: str, target: list[str]) -> str:
    """One pass: the characters of ``text`` that spell ``target`` (or a splice of it)
    removed; everything else kept as it was."""
    width = len(target)
    letters: list[str] = []  # the folded letters and digits of the characters kept so far
    owners: list[int] = []  # the index in ``text`` of the character each one comes from
    removed: set[int] = set()
    for index, char in enumerate(text):
        for letter in _fold_char(char):
            if index in removed:
                break  # the rest of a character a match took part of
            letters.append(letter)
            owners.append(index)
            if len(letters) >= width and letters[-width:] == target:
                taken = set(owners[-width:])
                removed |= taken
                del letters[-width:], owners[-width:]
                while owners and owners[-1] in taken:
                    letters.pop()
                    owners.pop()
    return "".join(char for index, char in enumerate(text) if index not in removed)


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    return folded(char)
