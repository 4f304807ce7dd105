"""(v5) ``item_reference`` items: each names a recorded item of a conversation of the
caller's workspace (404 ``item_not_found`` otherwise), checked against the turn's own
read where it can be; where the model sees the request's history as given, a reference
stands for the message it names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from convo_memory.domain.errors import ItemNotFound, SessionNotFound
from convo_memory.domain.item_ids import ItemPlace, place_of_message
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.turn_records import TurnState
from convo_memory.domain.turns import REFERENCE_ROLE
from convo_memory.ports import TurnStore

if TYPE_CHECKING:
    from convo_memory.services.sessions import SessionService


@dataclass(frozen=True)
class ItemReferences:
    sessions: SessionService
    turns: TurnStore

    def check(
        self, workspace_id: str, references: Sequence[ItemPlace], state: TurnState | None = None
    ) -> None:
        """Each ``item_reference`` names a recorded item of a conversation of this
        workspace (404 ``item_not_found``): checked against the turn's own ``state``
        where it names that conversation (or what a fork inherited), else by reading
        the head of the conversation it names."""
        for place in references:
            if state is not None and _within(state, place):
                continue
            try:
                session = self.sessions.get(workspace_id, place.session_id)
            except SessionNotFound:
                raise _no_item(place) from None
            if place.seq > session.message_count + (2 if place.call else 0):
                raise _no_item(place)

    def read(self, workspace_id: str, said: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
        """An app's history with each reference replaced by the message it names, where
        the model sees the history as given (404 ``item_not_found`` for one that names
        no recorded message of this workspace)."""
        read: list[ChatMessage] = []
        for message in said:
            if message.role != REFERENCE_ROLE:
                read.append(message)
                continue
            place = place_of_message(message.content)
            if place is None:
                raise ItemNotFound(f"item {message.content!r} not found", param="input")
            try:
                self.sessions.get(workspace_id, place.session_id)
            except SessionNotFound:
                raise _no_item(place) from None
            found = self.turns.read_messages(place.session_id, place.seq, place.seq)
            if not found or found[0].removed:
                raise _no_item(place)
            read.append(ChatMessage(found[0].role, found[0].content))
        return tuple(read)


def _within(state: TurnState, place: ItemPlace) -> bool:
    """Whether ``place`` is a recorded item of the conversation ``state`` is of (or one
    it inherited as a fork, or a call of its waiting pause)."""
    session = state.session
    if place.session_id == session.id:
        pending = state.pending
        waiting = pending is not None and place.call and pending.user_seq == place.seq
        return place.seq <= session.message_count or waiting
    fork = session.fork_of
    return fork is not None and place.session_id == fork.session_id and place.seq <= fork.at_seq


def _no_item(place: ItemPlace) -> ItemNotFound:
    kind = "call" if place.call else "message"
    return ItemNotFound(
        f"no {kind} {place.seq} of conversation {place.session_id!r} is recorded here",
        param="input",
    )
