"""Which conversation a Responses request is a turn of (v4, and v5's implicit binding),
and who it says it is.

- ``conversation``: that conversation (or any session of the workspace);
- ``previous_response_id``: the conversation of that response (a fork at an older one);
- neither, but items the service minted (``domain.item_ids``: a message's or a call's
  id, an ``item_reference``, a ``function_call_output`` whose ``call_id`` it minted):
  the conversation of the newest of them, by position (``SessionByItems``), as if
  ``previous_response_id`` named its response; where that conversation cannot take the
  turn, a new one opened from the history, as when no item is named;
- neither and no such item: a new conversation, the user and assistant messages before
  the input its first turns;
- ``store: false``: nothing recorded; with ``conversation`` or ``previous_response_id``
  the model still sees that conversation.

The end user is header ``X-Convo-User``, else ``user``, else ``safety_identifier``
(they never conflict); the principal is header ``X-Convo-Principal``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convo_memory.domain import request_rules
from convo_memory.domain.errors import ResponseNotFound, ServiceError
from convo_memory.domain.imported_history import imported_turns
from convo_memory.domain.item_ids import ItemPlace
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.responses import ResponseRef
from convo_memory.domain.tools import ToolRound
from convo_memory.domain.turns import (
    REFERENCE_ROLE,
    ConversationTarget,
    NewConversation,
    SessionById,
    SessionByItems,
    SessionByResponse,
    SessionOwner,
    TurnPayload,
)
from convo_memory.doors.attachment_parts import history_attachments
from convo_memory.doors.openai_common import SYSTEM_ROLES, end_user_of, invalid, session_owner

if TYPE_CHECKING:
    from convo_memory.api import ResponseCreate

# The turn's input and the app's tool exchange after it, read as a continuation or not.
InputReader = Callable[[bool], tuple[TurnPayload, tuple[ToolRound, ...]]]


@dataclass(frozen=True)
class InputItem:
    """One item of ``input``: a message (its role and text), a ``function_call`` (its
    ``call_id``, ``name`` and arguments as ``text``), a ``function_call_output`` (its
    ``call_id`` and output as ``text``), an ``item_reference`` (its role when it names a
    message) or another kind of item; ``where`` names it in a refusal (``input.3``).
    ``place``: (v5) where in a conversation its id, ``call_id`` or reference points,
    when the service minted it; ``reference`` an ``item_reference``'s id."""

    kind: str
    where: str
    role: str = ""
    text: str = ""
    call_id: str = ""
    name: str = ""
    place: ItemPlace | None = None
    reference: str = ""
    # (v5) A user message's content as sent: its attachments are read from it when it is
    # the turn's input, or a stateless turn's history (an app's copy of a conversation's
    # history is never decoded).
    content: Any = None


def conversation_of(
    request: ResponseCreate,
    items: Sequence[InputItem],
    at: int | None,
    headers: Mapping[str, str],
    read_input: InputReader,
) -> ConversationTarget:
    """The conversation the request is a turn of (None: stateless). ``at``: where its
    user message is (the input, unless the request continues a pause); ``read_input``
    reads the turn's input as a new conversation would take it (for a fallback)."""
    named, previous = request.conversation, request.previous_response_id
    if named is not None and previous is not None:
        raise invalid("previous_response_id", "cannot be used with conversation: name one")
    owner = owner_of(request, headers)
    if previous is not None:
        ref = ResponseRef.parse(previous)
        if ref is None:
            raise ResponseNotFound(f"response {previous!r} not found", param="previous_response_id")
        return SessionByResponse(ref, owner)
    if named is not None:
        session_id = named if isinstance(named, str) else named.id
        request_rules.check_path_id("sessionId", session_id)
        return SessionById(session_id, owner)
    if request.store is False:
        return None
    earlier = items[:at] if at is not None else items
    opened = new_conversation(owner, earlier)
    place = newest_place(item for index, item in enumerate(items) if index != at)
    if place is None:
        return opened
    try:
        fallback_input, fallback_rounds = read_input(False)
    except ServiceError:  # no user message to open a conversation with
        return SessionByItems(place, owner)
    return SessionByItems(place, owner, opened, fallback_input, fallback_rounds)


def newest_place(items: Iterable[InputItem]) -> ItemPlace | None:
    """The newest place the items name, by position in its conversation (the later
    item in the request wins a tie)."""
    newest: ItemPlace | None = None
    for item in items:
        place = item.place
        if place is not None and (newest is None or place.answer_seq >= newest.answer_seq):
            newest = place
    return newest


def new_conversation(owner: SessionOwner, earlier: Sequence[InputItem]) -> NewConversation:
    """A new conversation whose first turns are the user and assistant messages before
    the input (references among them read by the serving path first)."""
    said = said_before(earlier)
    if any(message.role == REFERENCE_ROLE for message in said):
        return NewConversation(owner, said=tuple(said))
    return NewConversation(owner, imported_turns((m.role, m.content) for m in said))


def said_before(earlier: Sequence[InputItem], with_attachments: bool = False) -> list[ChatMessage]:
    """The user and assistant messages before the input, as given (system and developer
    ones join the instructions); a reference to a message stands for it, to be read;
    ``with_attachments``: (v5) each message's images and files too, sent as given."""
    said = []
    for item in earlier:
        if item.kind == "message" and item.role not in SYSTEM_ROLES:
            attached = history_attachments(item.content, item.where) if with_attachments else ()
            said.append(ChatMessage(item.role, item.text, attachments=attached))
        elif item.kind == "item_reference" and item.role:
            said.append(ChatMessage(REFERENCE_ROLE, item.reference))
    return said


def references_of(items: Sequence[InputItem]) -> tuple[ItemPlace, ...]:
    """The places the request's ``item_reference`` items name, each once."""
    places = [item.place for item in items if item.kind == "item_reference" and item.place]
    return tuple(dict.fromkeys(places))


def owner_of(request: ResponseCreate, headers: Mapping[str, str]) -> SessionOwner:
    """Who the call says it is: header ``X-Convo-User``, else ``user``, else
    ``safety_identifier`` (checked by the rules a session is opened with; 422), and
    ``X-Convo-Principal``."""
    end_user = end_user_of(request.user, request.safety_identifier, headers)
    return session_owner(end_user, headers)
