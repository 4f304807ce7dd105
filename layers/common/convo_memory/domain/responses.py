"""The Responses door's names and records (v4), independent of HTTP and storage.

**A response id names its turn.** ``resp_<sessionId>_<userSeq>_<replyId>``: the session,
the position the turn took when it began (the user seq after the newest turn it read)
and the turn's random reply id, which is also the stored turn's id. So a response is
found with one read of its turn (and its session's head), and no item is written for
it: a racing turn may have pushed the turn further on, where the reply id finds it. A
``store: false`` response is ``resp_<replyId>``: no session, nothing to find.

**What a response keeps** beyond its turn (``ResponseSettings``) is only what its
request set and the transcript cannot say: its own instructions and metadata, the
generation settings it changed and whether its answer was cut at
``max_output_tokens``; stored on the turn's item as compact JSON, absent when the
request set none of them. Whether it named a previous response is one letter of the
turn's prompt record (``PromptRecord.chained``), which every turn stores anyway: a
plain chained response stores nothing more.

**A paused response** (the app's function calls) is no stored response: its turn is
recorded when it ends, and its id then names that turn's pause (``pause``), which
cannot be read or answered again; the response that continued it follows it.

"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convo_memory.domain.models import Message, Session
    from convo_memory.domain.tools import AppToolCall

RESPONSE_PREFIX = "resp_"
MESSAGE_ITEM_PREFIX = "msg_"
# A reply id (``secrets.token_hex``) and a user seq (odd, 1 or more) as a response id
# writes them; whatever precedes them is the session id.
_STORED_RESPONSE = re.compile(
    r"resp_(?P<session>[A-Za-z0-9_-]+)_(?P<seq>[1-9][0-9]{0,9})_(?P<reply>[0-9a-f]{8,64})"
)
_MESSAGE_ITEM = re.compile(r"msg_(?P<session>[A-Za-z0-9_-]+)_(?P<seq>[1-9][0-9]{0,9})")


@dataclass(frozen=True)
class ResponseRef:
    """Where a stored response's turn is: its session, the user seq the turn began at
    (it may have landed further on when a racing turn took that place) and its reply id
    (the stored turn's id)."""

    session_id: str
    user_seq: int
    reply_id: str

    @property
    def id(self) -> str:
        """The response id: ``resp_<sessionId>_<userSeq>_<replyId>``."""
        return f"{RESPONSE_PREFIX}{self.session_id}_{self.user_seq}_{self.reply_id}"

    @classmethod
    def parse(cls, response_id: str) -> ResponseRef | None:
        """The turn a response id names; None for an id that names no stored turn (a
        ``store: false`` response's, a mistyped or foreign one)."""
        match = _STORED_RESPONSE.fullmatch(response_id)
        if match is None or int(match["seq"]) % 2 == 0:
            return None
        return cls(match["session"], int(match["seq"]), match["reply"])


def unstored_response_id(reply_id: str) -> str:
    """The id of a ``store: false`` response: it names no session, so it finds nothing."""
    return f"{RESPONSE_PREFIX}{reply_id}"


def message_item_id(session_id: str, seq: int) -> str:
    """The stable id of a conversation's message ``seq`` as an item."""
    return f"{MESSAGE_ITEM_PREFIX}{session_id}_{seq}"


def message_item_seq(item_id: str, session_id: str) -> int | None:
    """The seq an item id of ``session_id`` names (None: not one of its items)."""
    match = _MESSAGE_ITEM.fullmatch(item_id)
    if match is None or match["session"] != session_id:
        return None
    return int(match["seq"])


# -- what a response keeps beside its turn ------------------------------------------------


@dataclass(frozen=True)
class ResponseSettings:
    """What a Responses request set that its Response shows and its turn keeps:
    ``chained`` it named a ``previous_response_id`` (kept in the turn's prompt record,
    not here: ``decode`` is told); ``instructions`` its own (added
    after the capability's for this response only); ``metadata``; the generation
    settings it changed (None: the default); ``cut`` its answer stopped at
    ``max_output_tokens`` (set by the serving path)."""

    chained: bool = False
    instructions: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    cut: bool = False
    # (v5) ``text.format`` when not plain text: kept as its type and name (not its schema).
    text_format: Mapping[str, Any] | None = None

    def encode(self) -> str | None:
        """The stored text (compact JSON, one letter a setting, of what differs from the
        defaults), or None when nothing does: a plain response stores nothing more."""
        values: dict[str, Any] = {}
        if self.instructions:
            values["i"] = self.instructions
        if self.metadata:
            values["m"] = dict(self.metadata)
        for short, value in (
            ("t", self.temperature),
            ("p", self.top_p),
            ("o", self.max_output_tokens),
        ):
            if value is not None:
                values[short] = value
        if self.tool_choice not in (None, "auto"):
            values["c"] = self.tool_choice
        if self.parallel_tool_calls is False:
            values["n"] = 0
        if self.cut:
            values["l"] = 1
        if self.text_format is not None:
            kept = {k: self.text_format[k] for k in ("type", "name") if k in self.text_format}
            values["f"] = kept
        if not values:
            return None
        return json.dumps(values, separators=(",", ":"), ensure_ascii=False, sort_keys=True)

    @classmethod
    def decode(cls, text: str | None, chained: bool = False) -> ResponseSettings:
        """The settings a turn keeps (none stored, or unreadable: the defaults), and
        ``chained`` as its prompt record says."""
        try:
            values = json.loads(text) if text else {}
        except ValueError:
            values = {}
        if not isinstance(values, dict):
            values = {}
        return cls(
            chained=chained,
            instructions=values.get("i"),
            metadata=dict(values.get("m") or {}),
            temperature=values.get("t"),
            top_p=values.get("p"),
            max_output_tokens=values.get("o"),
            tool_choice=values.get("c"),
            parallel_tool_calls=False if "n" in values else None,
            cut=bool(values.get("l")),
            text_format=values.get("f") if isinstance(values.get("f"), dict) else None,
        )


# -- a stored response, as read back -------------------------------------------------------


@dataclass(frozen=True)
class StoredResponse:
    """A stored response as its turn keeps it: the session's head (workspace,
    capability, status, fork point), where the turn is, its two messages, what its
    request set, the app's tools it was offered, whether its response was deleted, and
    the response it follows (``previous``: the turn before it, or the pause it ended;
    None for a conversation's first turn). ``pause``: the id named the turn's pause,
    ended since (its calls answered or abandoned), not a response of its own;
    ``ended_pause``: the pause this turn ended (its id)."""

    session: Session
    ref: ResponseRef
    user_seq: int
    user: Message
    answer: Message
    settings: ResponseSettings
    app_tools: tuple[str, ...] = ()
    run_id: str | None = None
    deleted: bool = False
    previous: ResponseRef | None = None
    pause: bool = False
    ended_pause: str | None = None
    # (v5) A pause that still waits: the calls the app is asked for (ids as shown).
    waiting: tuple[AppToolCall, ...] = ()
    # (v5) Imported history (added as items, not served): it kept no prompt record.
    imported: bool = False


def previous_response(
    session: Session, user_seq: int, ended_pause: str | None, before_turn_id: str | None
) -> ResponseRef | None:
    """The response a stored turn's response follows: the pause it ended (``ended_pause``),
    else the turn before it (``before_turn_id``, in the parent when the turn is a fork's
    first: it follows the parent's answer at the fork point); None for a conversation's
    first turn."""
    if ended_pause is not None:
        return ResponseRef(session.id, user_seq, ended_pause)
    if before_turn_id is None:
        return None
    fork = session.fork_of
    if fork is not None and user_seq == fork.at_seq + 1:
        return ResponseRef(fork.session_id, user_seq - 2, before_turn_id)
    return ResponseRef(session.id, user_seq - 2, before_turn_id)
