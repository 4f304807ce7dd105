"""Recall across an end user's sessions: which earlier sessions a new one may recall,
and the text it keeps of them.

A session created on a capability with ``recall`` carries, from each of the newest
earlier sessions of the same workspace, capability and externalRef whose principal
equals its own, that session's rolling summary if it has one, else its newest messages:
newest session first, ``maxChars`` in all (fair shares per session), cut at a message
boundary where possible.
The text is data: a prompt carries it inside a fence (``domain.prompt.fence``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from convo_memory.domain.models import Message, Principal, Recall

# What marks a text cut to fit the budget.
CUT_MARK = " …[cut]"
# A session is recalled only when its block can hold this much of its text (or all).
MIN_BLOCK_CHARS = 40
BLOCK_SEPARATOR = "\n\n"
# Control characters (Unicode category Cc) but the line feed and the tab.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class RecallSource:
    """What one earlier session offers: its summary (if any) and its newest messages
    (oldest first)."""

    session_id: str
    created_at: str
    summary: str | None
    messages: tuple[Message, ...] = ()

    @property
    def has_text(self) -> bool:
        return bool(self.summary) or bool(self.messages)


def canonical_principal(principal: Principal | None) -> str:
    """The principal as canonical JSON (sorted claims, compact): two principals are the
    same end-user identity when their canonical forms are equal (two nulls too)."""
    return json.dumps(principal, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same_principal(a: Principal | None, b: Principal | None) -> bool:
    return canonical_principal(a) == canonical_principal(b)


def compose_recall(sources: Sequence[RecallSource], max_chars: int) -> Recall | None:
    """The recall of ``sources`` (newest session first) in at most ``max_chars``
    characters, or None when none of them has anything to recall.

    Each session is one block: a header line, then its summary or its newest messages.
    Sessions get fair shares of the budget (one that needs less than an equal share
    leaves the rest to the others; what a block does not use passes to the older ones),
    so a long summary cannot crowd out the other sessions. Sessions are taken newest
    first while each can have its header and some text."""
    frames: list[tuple[RecallSource, str, str]] = []
    least = 0
    for source in (s for s in sources if s.has_text):
        prefix = (BLOCK_SEPARATOR if frames else "") + _header(source)
        whole = _whole_text(source)
        needed = len(prefix) + min(len(whole), MIN_BLOCK_CHARS)
        if least + needed > max_chars:
            break
        frames.append((source, prefix, whole))
        least += needed
    if not frames:
        return None
    shares = _fair_shares([len(prefix) + len(whole) for _, prefix, whole in frames], max_chars)
    blocks: list[str] = []
    carried = 0
    for (source, prefix, whole), share in zip(frames, shares, strict=True):
        room = share + carried - len(prefix)
        body = _cut(whole, room) if source.summary else _newest_lines(source.messages, room)
        blocks.append(prefix + body)
        carried = room - len(body)
    return Recall(
        text="".join(blocks), from_sessions=[source.session_id for source, _, _ in frames]
    )


def _header(source: RecallSource) -> str:
    kind = "summary" if source.summary else "last messages"
    return f"Earlier conversation of {source.created_at[:10]} ({kind}):\n"


def _whole_text(source: RecallSource) -> str:
    if source.summary:
        return _clean(source.summary)
    return "\n".join(_line(m) for m in source.messages)


def _line(message: Message) -> str:
    return f"{message.role}: {_clean(message.content)}"


def _fair_shares(needs: Sequence[int], budget: int) -> list[int]:
    """Max-min fair shares of ``budget``: no share above its need; what the small needs
    leave is split equally among the others, the odd characters to the newest."""
    shares = [0] * len(needs)
    remaining = budget
    pending = list(range(len(needs)))
    while pending:
        equal = remaining // len(pending)
        met = [i for i in pending if needs[i] <= equal]
        if not met:
            extra = remaining - equal * len(pending)
            for rank, i in enumerate(pending):
                shares[i] = equal + (1 if rank < extra else 0)
            break
        for i in met:
            shares[i] = needs[i]
            remaining -= needs[i]
        pending = [i for i in pending if i not in met]
    return shares


def _newest_lines(messages: Sequence[Message], room: int) -> str:
    """The newest messages that fit in ``room`` whole, one per line, oldest first; when
    not even the newest one fits, that one cut to fit."""
    lines = [_line(m) for m in messages]
    taken: list[str] = []
    size = 0
    for line in reversed(lines):
        needed = len(line) + (1 if taken else 0)
        if size + needed > room:
            break
        taken.append(line)
        size += needed
    if not taken and lines:
        return _cut(lines[-1], room)
    return "\n".join(reversed(taken))


def _cut(text: str, room: int) -> str:
    """``text`` within ``room`` characters: cut at the last whitespace of the second
    half of the room when there is one, and marked as cut."""
    if len(text) <= room:
        return text
    if room <= len(CUT_MARK):
        return text[: max(0, room)]
    keep = room - len(CUT_MARK)
    head = text[:keep]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space >= keep // 2:
        head = head[:space]
    return head + CUT_MARK


def _clean(text: str) -> str:
    """``text`` without control characters (line breaks and tabs kept): recalled text
    is replayed to a model, possibly sessions later, and a terminal or a log viewer
    may show it too."""
    return _CONTROL.sub("\ufffd", text.replace("\r\n", "\n"))
