"""Conversations (v4): sessions the Responses door and ``/v1/conversations`` open, the
first response that binds one, and a turn after a named response.

A conversation is a session. ``POST /v1/conversations`` opens one bound to nothing (no
capability, end user or principal), its items as its first turns; its first response
binds it to its model, end user and principal, for good (``bind``). A response with
neither ``conversation`` nor ``previous_response_id`` opens one bound at once, the
history it brought as its first turns (``open``). A response after an older response of
its conversation opens a fork at that response's answer (``after_response``), so an app
that branches gets a branch, never a mixed history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from convo_memory.domain.errors import ResponseNotFound, ValidationFailed
from convo_memory.domain.imported_history import ImportedTurn, imported_records
from convo_memory.domain.models import Capability, Message, Session, iso_at
from convo_memory.domain.responses import ResponseRef, message_item_seq
from convo_memory.domain.sessions import NewSession, SessionChanges
from convo_memory.domain.turn_records import TurnRecord, TurnState
from convo_memory.domain.turns import NewConversation, SessionOwner
from convo_memory.ports import ResponseStore, TurnStore
from convo_memory.services.forks import ForkService
from convo_memory.services.sessions import SessionService

Order = Literal["asc", "desc"]


@dataclass(frozen=True)
class ImportLimits:
    """What an imported message may be: a user message at most the input limit (413
    beyond), an answer stored as any answer is (cut beyond the stored-answer limit)."""

    max_input_chars: int = 32_000
    max_stored_answer_chars: int = 100_000


@dataclass(frozen=True)
class ItemPage:
    """A page of a conversation's messages, in the order asked, and whether more follow."""

    session_id: str
    messages: tuple[Message, ...]
    has_more: bool


class ConversationService:
    def __init__(
        self,
        sessions: SessionService,
        turns: TurnStore,
        responses: ResponseStore,
        forks: ForkService,
        limits: ImportLimits,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self._turns = turns
        self._responses = responses
        self._forks = forks
        self._limits = limits
        self._clock = clock

    # -- /v1/conversations -------------------------------------------------------------

    def create(
        self, workspace_id: str, metadata: dict[str, Any], history: Sequence[ImportedTurn]
    ) -> Session:
        """A conversation bound to nothing yet, ``history`` its first turns."""
        new = NewSession(None, None, None, metadata)
        return self._sessions.create(workspace_id, new, history=self.records(history))

    def get(self, workspace_id: str, session_id: str) -> Session:
        return self._sessions.get(workspace_id, session_id)

    def update(self, workspace_id: str, session_id: str, metadata: dict[str, Any]) -> Session:
        """Replace its metadata (as ``PATCH /v1/sessions/{id}``)."""
        changes = SessionChanges(metadata=metadata, named=frozenset({"metadata"}))
        return self._sessions.patch(workspace_id, session_id, changes)

    def delete(self, workspace_id: str, session_id: str) -> None:
        self._sessions.delete(workspace_id, session_id)

    def items(
        self, workspace_id: str, session_id: str, limit: int, after: str | None, order: Order
    ) -> ItemPage:
        """Its messages after the item ``after`` (none: from the start of ``order``),
        ``limit`` of them, oldest (``asc``) or newest (``desc``) first."""
        session = self._sessions.get(workspace_id, session_id)
        count = session.message_count
        start = None if after is None else message_item_seq(after, session_id)
        if after is not None and (start is None or start > count):
            raise ValidationFailed(
                "after is not an item of this conversation",
                details=[{"loc": ["query", "after"], "msg": "unknown item id"}],
                param="after",
            )
        if order == "asc":
            first, last = (start or 0) + 1, min(count, (start or 0) + limit)
        else:
            last = (start if start is not None else count + 1) - 1
            first = max(1, last - limit + 1)
        found = self._turns.read_messages(session_id, first, last) if first <= last else []
        page = tuple(found if order == "asc" else reversed(found))
        more = last < count if order == "asc" else first > 1
        return ItemPage(session_id, page, more)

    # -- what a turn of the Responses door needs ----------------------------------------

    def records(self, history: Iterable[ImportedTurn]) -> tuple[TurnRecord, ...]:
        """Imported history as the records of its turns (413 for an input too long)."""
        return imported_records(
            history,
            iso_at(self._clock()),
            max_input_chars=self._limits.max_input_chars,
            max_stored_answer_chars=self._limits.max_stored_answer_chars,
        )

    def open(self, workspace_id: str, capability_id: str, new: NewConversation) -> str:
        """A new conversation for a response that names none, bound to its model and
        owner at once, the history it brought as its first turns: its id."""
        owner = new.owner
        opened = NewSession(capability_id, owner.external_ref, owner.principal)
        records = self.records(new.history)
        return self._sessions.create(workspace_id, opened, history=records).id

    def bind(self, session: Session, capability: Capability, owner: SessionOwner | None) -> Session:
        """Bind a conversation to its first response's model, end user and principal."""
        return self._sessions.bind(session, capability, owner)

    def after_response(
        self, workspace_id: str, state: TurnState, ref: ResponseRef, continues: bool = False
    ) -> str | None:
        """Where a turn after the response ``ref`` goes, ``state`` being its session's:
        None when ``ref`` is the session's newest response, or the pause waiting for the
        app's tools (the turn continues there); else the id of a fork opened at its
        answer. Tool results (``continues``) always stay in the session: only its pause
        can take them (a fork has none), and a client may chain them to the response
        before the pause, as Vercel's AI SDK does; results that answer no pause are 409
        there, before anything is opened. A pause that has ended names its turn (the app's
        calls were answered, or abandoned, there). 404 for a deleted or unknown one."""
        pending = state.pending
        if pending is not None and pending.pause_id == ref.reply_id:
            return None
        if state.newest_turn_id == ref.reply_id and (pending is None or continues):
            if state.newest_response_deleted:
                raise _no_response(ref)
            return None
        found = self._responses.find_response(ref, workspace_id)
        if found is None or found.deleted:
            raise _no_response(ref)
        if continues:
            return None
        if found.pause and pending is None and found.answer.seq == state.session.message_count:
            return None  # the turn that ended the pause is the newest: go on in place
        return self._forks.fork(workspace_id, ref.session_id, found.user_seq + 1).id


def _no_response(ref: ResponseRef) -> ResponseNotFound:
    return ResponseNotFound(f"response {ref.id!r} not found", param="previous_response_id")
