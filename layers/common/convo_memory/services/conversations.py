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

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from convo_memory.domain.errors import (
    ItemNotFound,
    ResponseNotFound,
    ValidationFailed,
)
from convo_memory.domain.imported_history import ImportedTurn, imported_records, imported_turns
from convo_memory.domain.item_ids import ItemPlace
from convo_memory.domain.models import Capability, Message, Session, iso_at, parse_iso
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.responses import ResponseRef, StoredResponse, message_item_seq
from convo_memory.domain.sessions import NewSession, SessionChanges
from convo_memory.domain.turn_records import TurnRecord, TurnState
from convo_memory.domain.turns import NewConversation, SessionOwner
from convo_memory.ports import ResponseStore, TurnStore
from convo_memory.services.forks import ForkService
from convo_memory.services.item_references import ItemReferences
from convo_memory.services.sessions import SessionService

logger = logging.getLogger(__name__)

Order = Literal["asc", "desc"]


@dataclass(frozen=True)
class ImportLimits:
    """What an imported message may be: a user message at most the input limit (413
    beyond), an answer stored as any answer is (cut beyond the stored-answer limit)."""

    max_input_chars: int = 32_000
    max_stored_answer_chars: int = 100_000
    # (v5) A request with the same input after the same item, this soon after the turn
    # was recorded, is that turn's retry (the idempotency records' window).
    retry_window_seconds: float = 24 * 3600


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
        self._references = ItemReferences(sessions, turns)

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

    def forget(self, workspace_id: str, opened: Iterable[str]) -> None:
        """Delete the sessions a turn given up at its first second had opened (a key's,
        a new conversation, a fork at an older response); best effort, logged."""
        for session_id in opened:
            try:
                self._sessions.delete(workspace_id, session_id)
            except Exception:
                logger.warning("a refused turn's session %s left", session_id, exc_info=True)

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
        found = [message for message in found if not message.removed]
        page = tuple(found if order == "asc" else reversed(found))
        more = last < count if order == "asc" else first > 1
        return ItemPage(session_id, page, more)

    def add_items(
        self, workspace_id: str, session_id: str, said: Sequence[tuple[str, str, str | None]]
    ) -> tuple[str, tuple[Message, ...]]:
        """(v5) ``POST /v1/conversations/{id}/items``: the user and assistant messages
        ``said`` (role, text, the item's id if it carried one) appended as imported
        history, except those already there: an item with the id of one of its messages,
        and the run of messages that repeats, by role and text in order, its newest
        messages (an SDK that strips ids adds a run's output after the run, whose turn
        was recorded through responses). An answer added after an imported user message
        still without one is that message's answer. Its messages as they now stand for
        those items, in order."""
        session = self._sessions.get(workspace_id, session_id)
        fresh = [(r, t) for r, t, i in said if message_item_seq(i or "", session_id) is None]
        count = session.message_count
        first = max(1, count - 2 * len(fresh) - 1)
        newest = self._turns.read_messages(session_id, first, count) if count and fresh else []
        newest = [message for message in newest if not message.removed]
        tail = [(m.role, m.content) for m in newest]
        repeated = next(
            (k for k in range(len(fresh), 0, -1) if tail[len(tail) - k :] == fresh[:k]), 0
        )
        remaining, after, changed = fresh[repeated:], count, count + 1
        if remaining and remaining[0][0] == "assistant" and count:
            waiting = self._responses.turn_at(session, count - 1)
            if waiting is not None and awaits_its_answer(waiting, count):
                [record] = self.records([ImportedTurn(waiting.user.content, remaining[0][1])])
                fill = replace(record, resolves=waiting.ref.reply_id)
                self._turns.append_turn(session_id, count - 2, fill)
                remaining, changed = remaining[1:], count
        for record in self.records(imported_turns(remaining)):
            after = self._turns.append_turn(session_id, after, record).assistant_seq
        added = self._turns.read_messages(session_id, changed, after) if changed <= after else []
        kept = newest[len(newest) - repeated :] if repeated else []
        return session_id, (*kept, *added)

    def item(self, workspace_id: str, session_id: str, item_id: str) -> Message:
        """(v5) One of a conversation's messages by its item id (404 ``item_not_found``)."""
        self._sessions.get(workspace_id, session_id)
        seq = message_item_seq(item_id, session_id)
        found = self._turns.read_messages(session_id, seq, seq) if seq is not None else []
        if not found or found[0].removed:
            raise ItemNotFound(f"item {item_id!r} not found in conversation {session_id!r}")
        return found[0]

    def remove_item(self, workspace_id: str, session_id: str, item_id: str) -> Session:
        """(v5) ``DELETE /v1/conversations/{id}/items/{item_id}``: the message is left out
        of listings, replay and forks made after (its turn stays; the summary is not
        rewritten). 404 ``item_not_found`` for an id that names none of its recorded
        messages. The conversation, as it stands."""
        session = self._sessions.get(workspace_id, session_id)
        seq = message_item_seq(item_id, session_id)
        if seq is None or seq > session.message_count:
            raise ItemNotFound(f"item {item_id!r} not found in conversation {session_id!r}")
        if not self._turns.remove_message(session_id, seq):
            raise ItemNotFound(f"item {item_id!r} not found in conversation {session_id!r}")
        return session

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
        history = new.history
        if new.said:  # (v5) references among the history: their messages, read first
            said = self.read_references(workspace_id, new.said)
            history = imported_turns((message.role, message.content) for message in said)
        records = self.records(history)
        return self._sessions.create(workspace_id, opened, history=records).id

    def bind(self, session: Session, capability: Capability, owner: SessionOwner | None) -> Session:
        """Bind a conversation to its first response's model, end user and principal."""
        return self._sessions.bind(session, capability, owner)

    def after_response(
        self,
        workspace_id: str,
        state: TurnState,
        ref: ResponseRef,
        continues: bool = False,
        user_input: str = "",
    ) -> Placement:
        """Where a turn after the response ``ref`` goes, ``state`` being its session's:
        in place when ``ref`` is the session's newest response, or the pause waiting for
        the app's tools; else (v5) the same turn answered again when the request is a
        retry of the turn after it; else a fork opened at its answer. Tool results
        (``continues``) always stay in the session: only its pause can take them (a fork
        has none), and a client may chain them to the response before the pause, as
        Vercel's AI SDK does; results that answer no pause are 409 there, before anything
        is opened. A pause that has ended names its turn (the app's calls were answered,
        or abandoned, there). 404 for a deleted or unknown one."""
        pending = state.pending
        if pending is not None and pending.pause_id == ref.reply_id:
            return Placement()
        if state.newest_turn_id == ref.reply_id and (pending is None or continues):
            if state.newest_response_deleted:
                raise _no_response(ref)
            return Placement()
        found = self._responses.find_response(ref, workspace_id)
        if found is None or found.deleted:
            raise _no_response(ref)
        if continues:
            return Placement()
        if found.pause and pending is None and found.answer.seq == state.session.message_count:
            return Placement()  # the turn that ended the pause is the newest: go on in place
        again = self.retried(state, found.answer.seq, user_input)
        if again is not None:
            return Placement(again=again)
        return Placement(fork=self._forks.fork(workspace_id, ref.session_id, found.user_seq + 1).id)

    # -- (v5) turns bound by the items they name -----------------------------------------

    def at_place(
        self,
        workspace_id: str,
        state: TurnState,
        place: ItemPlace,
        continues: bool,
        user_input: str,
    ) -> Placement:
        """Where a turn after the newest item a request named (``place``) goes, as if
        ``previous_response_id`` named that item's response: in place when it is the
        conversation's newest answer or its waiting pause (tool results always stay:
        only the pause can take them), the same turn answered again when the request
        is a retry of the turn after it, else a fork at its answer. ``unrecorded``: the
        place names no recorded position (the caller opens a new conversation)."""
        count, pending = state.session.message_count, state.pending
        if pending is not None and pending.user_seq + 1 == place.answer_seq:
            return Placement()
        if continues and place.call and place.answer_seq <= count:
            # Outputs for calls whose turn has ended: a retried continuation, answered
            # with that turn (never a 409 for a request that named nothing).
            ended = self._responses.turn_at(state.session, place.seq)
            if ended is not None and not ended.deleted:
                return Placement(again=ended)
        if continues or place.answer_seq == count:
            return Placement()
        if place.answer_seq > count:
            return Placement(unrecorded=True)
        again = self.retried(state, place.answer_seq, user_input)
        if again is not None and awaits_its_answer(again, count):
            return Placement(fill=again)
        if again is not None:
            return Placement(again=again)
        return Placement(fork=self._forks.fork(workspace_id, state.session.id, place.answer_seq).id)

    def retried(self, state: TurnState, answer_seq: int, user_input: str) -> StoredResponse | None:
        """The response of the turn after the answer ``answer_seq`` when it has the same
        input and was recorded within the retry window (or is a pause still waiting):
        the request is that turn's retry (SDKs retry timeouts without an
        Idempotency-Key), answered again rather than forked. Reads the turn only when
        the state does not already show that its input differs."""
        after = answer_seq + 1
        shown = {message.seq: message for message in state.recent}
        if after in shown and shown[after].content != user_input:
            return None
        pending = state.pending
        if pending is not None and pending.user_seq == after and pending.user_input != user_input:
            return None
        found = self._responses.turn_at(state.session, after)
        if found is None or found.user.content != user_input or found.deleted:
            return None
        if self._clock() - parse_iso(found.answer.created_at) > self._limits.retry_window_seconds:
            return None
        return found

    def check_references(
        self, workspace_id: str, references: Sequence[ItemPlace], state: TurnState | None = None
    ) -> None:
        """Each ``item_reference`` names a recorded item of this workspace (404)."""
        self._references.check(workspace_id, references, state)

    def read_references(
        self, workspace_id: str, said: Sequence[ChatMessage]
    ) -> tuple[ChatMessage, ...]:
        """An app's history with each reference replaced by the message it names."""
        return self._references.read(workspace_id, said)


@dataclass(frozen=True)
class Placement:
    """Where a turn bound by the items it names goes: in place (the default), in the
    fork ``fork``, nowhere new (``again``: a retry, answered with that turn's response),
    or (``unrecorded``) into a new conversation."""

    fork: str | None = None
    again: StoredResponse | None = None
    unrecorded: bool = False
    # (v5) An imported user message still without its answer (an SDK adds a run's input
    # before the run): the turn is written over it, its answer filled in.
    fill: StoredResponse | None = None


def awaits_its_answer(found: StoredResponse, message_count: int) -> bool:
    """Whether ``found`` is the newest turn, imported with its user message alone (the
    input an SDK added to the conversation before the run that answers it)."""
    return found.imported and not found.answer.content and found.answer.seq == message_count


def _no_response(ref: ResponseRef) -> ResponseNotFound:
    return ResponseNotFound(f"response {ref.id!r} not found", param="previous_response_id")
