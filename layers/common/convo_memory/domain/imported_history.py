"""History an app brings to a new conversation (v4): the ``user`` and ``assistant``
messages it sent before the input of the request that opens a conversation (a Responses
request with neither ``conversation`` nor ``previous_response_id``, the chat door's
first call on a new key) or as the items of ``POST /v1/conversations``.

They become the conversation's first turns, paired in order: a user message with the
assistant message after it, a missing partner an empty message. They are written with
the session's head in one transaction, so racing first calls import them once (the one
that opens the session), and there are at most ``MAX_IMPORTED_TURNS`` of them, the
newest, however long the history an app resends.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from convo_memory.domain.errors import PayloadTooLarge
from convo_memory.domain.turn_records import MAX_INPUT_BYTES, TurnRecord, fit_answer
from convo_memory.domain.turns import ImportedTurn

# With the head, an app's key item and a recall's checks, one DynamoDB transaction (at
# most 100 writes).
MAX_IMPORTED_TURNS = 48
# ``POST /v1/conversations`` takes at most this many items (the contract's 20).
MAX_CONVERSATION_ITEMS = 20


def imported_turns(
    messages: Iterable[tuple[str, str]], limit: int = MAX_IMPORTED_TURNS
) -> tuple[ImportedTurn, ...]:
    """The turns ``messages`` (``(role, text)`` in order; roles other than ``user`` and
    ``assistant`` are skipped) make, the newest ``limit`` of them."""
    turns: list[ImportedTurn] = []
    waiting: str | None = None
    for role, text in messages:
        if role == "user":
            if waiting is not None:
                turns.append(ImportedTurn(waiting, ""))
            waiting = text
        elif role == "assistant":
            turns.append(ImportedTurn(waiting or "", text))
            waiting = None
    if waiting is not None:
        turns.append(ImportedTurn(waiting, ""))
    return tuple(turns[-limit:]) if limit > 0 else ()


def imported_records(
    turns: Iterable[ImportedTurn],
    created_at: str,
    *,
    max_input_chars: int,
    max_stored_answer_chars: int,
) -> tuple[TurnRecord, ...]:
    """The records of imported turns, as a served turn's would be stored: a user message
    over the input limit is refused (413), an answer is cut to what is stored of any
    answer (``truncated``)."""
    records = []
    for index, turn in enumerate(turns):
        if len(turn.user) > max_input_chars or len(turn.user.encode()) > MAX_INPUT_BYTES:
            raise PayloadTooLarge(
                f"message {2 * index + 1} of the imported history is over the input limit "
                f"({max_input_chars} characters)"
            )
        stored, truncated = fit_answer(turn.assistant, turn.user, max_stored_answer_chars)
        records.append(
            TurnRecord(
                turn_id=secrets.token_hex(8),
                user_content=turn.user,
                answer=stored,
                withheld=False,
                created_at=created_at,
                truncated=truncated,
            )
        )
    return tuple(records)
