"""Records a turn reads and writes, independent of how they are stored.

A turn is one stored record: the user message (seq ``n``, odd) and the answer (seq
``n + 1``) written together, so an answer always directly follows its own user message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the job workers import this module at cold start, not the API models
    from convo_memory.domain.attachments import FileRef
    from convo_memory.domain.models import Message, Session, Summary, ToolDigest
    from convo_memory.domain.paused_turns import PendingTurn
    from convo_memory.domain.prompt_record import PromptRecord
    from convo_memory.domain.summary_plan import SummaryVersion

_SURROGATE = re.compile("[\ud800-\udfff]")

# DynamoDB's item limit is "400 KB" of attribute names and values; counted as 400,000
# bytes (not 409,600) to stay clear of how each implementation rounds it. And what a
# turn item needs besides its two texts (keys, ids, timestamps, flags, names).
MAX_ITEM_BYTES = 400_000
TURN_ITEM_OVERHEAD_BYTES = 2 * 1024
# A turn's input is refused (413) above this many UTF-8 bytes, so an answer always has
# room: a 32,000-character input is at most 128 KiB.
MAX_INPUT_BYTES = 200 * 1024


@dataclass(frozen=True)
class TurnState:
    """Everything a turn reads: the head (with the exact message count and last turn
    time), the summary, the newest messages (oldest first) and the digests stored with
    them, keyed by the seq of the answer they belong to."""

    session: Session
    summary: Summary | None
    recent: tuple[Message, ...]
    digests: dict[int, ToolDigest] = field(default_factory=dict)
    digest_expiry: dict[int, float] = field(default_factory=dict)
    # The head's coarse activity mark (lastActiveAt as last written to the head): it
    # moves at most once per ACTIVITY_GRANULARITY_SECONDS, not on every turn.
    activity_mark: str = ""
    # Every stored version a turn may show (``summary_plan.summary_for_window``): the
    # stored one and, with replay.alignment > 1, the one kept beside it.
    summary_versions: tuple[SummaryVersion, ...] = ()
    # (v4) The turn that waits for the app's tool results, when one does (read with the
    # newest turns; its messages are not in ``recent`` until it ends).
    pending: PendingTurn | None = None
    # (v4) The newest turn's id (its reply id: a response id names it) and whether its
    # response was deleted ("" and False without turns).
    newest_turn_id: str = ""
    newest_response_deleted: bool = False


@dataclass(frozen=True)
class TurnRecord:
    """One turn to append: a user message and the answer, identified by ``turn_id``.

    ``answer`` is what is stored (cut to fit, with ``truncated``); the client of the turn
    received the whole answer."""

    turn_id: str
    user_content: str
    answer: str
    withheld: bool
    created_at: str
    truncated: bool = False
    digest_tools: tuple[str, ...] = ()
    digest_text: str | None = None
    digest_expires_at: float | None = None
    run_id: str | None = None
    # The idempotency record of the request that served this turn (its Idempotency-Key's),
    # kept with the turn so that erasing the session removes the record too.
    idempotency_record: str | None = None
    # Which stored parts the turn's first model call was sent (kept with its item).
    prompt_record: PromptRecord | None = None
    # (v4) A turn that paused for the app's tools and was never continued.
    abandoned: bool = False
    # (v4) The pause (its id) whose position this turn takes: the turn ends a paused turn
    # and is written where the pause was kept, never appended; None: appended.
    resolves: str | None = None
    # (v5) A turn after a named item or response: when the position right after it holds
    # a turn with the same input (a retry's twin, in flight when this began), this one is
    # not written and answers as that turn.
    yields_to_twin: bool = False
    # (v4) What its Responses request set, for its Response (``ResponseSettings.encode``;
    # None: nothing, or another door).
    response: str | None = None
    # (v5) The user message's images and documents, as references (never the bytes).
    attachments: tuple[FileRef, ...] = ()

    @property
    def has_digest(self) -> bool:
        return bool(self.digest_text and self.digest_tools and self.digest_expires_at)


def abandoned_turn(pending: PendingTurn) -> TurnRecord:
    """(v4) The record of a turn left waiting for the app's tools: its user message and,
    as its answer, what the model wrote with the calls, written over the pause. Its id
    is the pause's, so that two requests that abandon it at once agree on one record."""
    return TurnRecord(
        turn_id=pending.pause_id + ".abandoned",
        user_content=pending.user_input,
        answer=pending.text,
        withheld=pending.withheld,
        created_at=pending.created_at,
        run_id=pending.run_id if pending.traced else None,
        prompt_record=pending.prompt_record,
        abandoned=True,
        resolves=pending.pause_id,
        attachments=pending.attachments,
    )


@dataclass(frozen=True)
class Twin:
    """(v5) The turn a retry found at the position it wanted, with its input: the turn it
    repeats (its id, answer and whether that was withheld), recorded by the request the
    client gave up on, or by another retry of it."""

    turn_id: str
    answer: str
    withheld: bool = False


@dataclass(frozen=True)
class AppendResult:
    user_seq: int
    assistant_seq: int
    already_recorded: bool = False
    # (v5) Not written: the position held the turn this one repeats (``yields_to_twin``).
    twin: Twin | None = None


def user_seq_of(seq: int) -> int:
    """The user seq of the turn that holds message ``seq`` (user seqs are odd)."""
    return seq if seq % 2 else seq - 1


def turn_messages(
    user_seq: int,
    user_content: str,
    answer: str,
    created_at: str,
    withheld: bool,
    truncated: bool,
    abandoned: bool = False,
    removed: tuple[bool, bool] = (False, False),
    attachments: Sequence[FileRef] = (),
) -> tuple[Message, Message]:
    """The two messages of a stored turn (``removed``: (v5) whether each was removed)."""
    from convo_memory.domain.models import Message

    return (
        Message(
            seq=user_seq,
            role="user",
            content=user_content,
            created_at=created_at,
            removed=removed[0],
            attachments=list(attachments),
        ),
        Message(
            seq=user_seq + 1,
            role="assistant",
            content=answer,
            created_at=created_at,
            withheld=withheld,
            truncated=truncated,
            abandoned=abandoned,
            removed=removed[1],
        ),
    )


def live_digests(state: TurnState, replayed: tuple[Message, ...], now: float) -> list[ToolDigest]:
    """Digests of replayed turns whose retention window has not passed. DynamoDB TTL
    deletes lazily, so expiry is enforced on read too."""
    seqs = {m.seq for m in replayed}
    return [
        digest
        for seq, digest in sorted(state.digests.items())
        if seq in seqs and state.digest_expiry.get(seq, 0) > now
    ]


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def cut_to_bytes(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits in ``max_bytes``."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[: max(0, max_bytes)].decode("utf-8", errors="ignore")


def fit_answer(answer: str, user_content: str, max_chars: int) -> tuple[str, bool]:
    """The answer as stored, and whether it was cut: at most ``max_chars`` characters,
    and small enough that the turn (both texts) fits in one item."""
    budget = MAX_ITEM_BYTES - TURN_ITEM_OVERHEAD_BYTES - utf8_len(user_content)
    stored = cut_to_bytes(answer[:max_chars], budget)
    return stored, stored != answer


def scrub_text(text: str) -> str:
    """``text`` with any unpaired surrogate replaced by U+FFFD.

    Input passes the gate, but a model's answer or a tool's output is decoded from
    JSON, which can carry a lone ``\\ud800``: such a string cannot be encoded as UTF-8,
    so it could neither be stored nor sent back."""
    return _SURROGATE.sub("\ufffd", text)
