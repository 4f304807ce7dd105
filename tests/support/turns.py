"""Turns through the serving path as the native doors ask them (``TurnService.serve``
with the command ``predict_door`` reads), for tests that drive the service itself."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from convo_memory.domain.turns import (
    AnswerDelta,
    SessionById,
    TurnCommand,
    TurnEvent,
    TurnResult,
    UserText,
)
from convo_memory.turn_edge import BufferedEvents


def predict(
    container: Any,
    workspace_id: str,
    capability_id: str,
    text: str,
    session_id: str | None = None,
    *,
    events: BufferedEvents | None = None,
    budget_seconds: float | None = None,
) -> TurnResult:
    """A predict turn: stateless, or of ``session_id``; streamed to ``events`` if given."""
    conversation = None if session_id is None else SessionById(session_id)
    command = TurnCommand(capability_id, conversation, UserText(text), stream=events is not None)
    result: TurnResult = container.turns.serve(
        workspace_id, command, events, budget_seconds=budget_seconds
    )
    return result


def session_message(
    container: Any,
    workspace_id: str,
    session_id: str,
    text: str,
    *,
    events: BufferedEvents | None = None,
) -> TurnResult:
    """A turn of the session's message route, on the session's own capability."""
    command = TurnCommand(None, SessionById(session_id), UserText(text), stream=events is not None)
    result: TurnResult = container.turns.serve(workspace_id, command, events)
    return result


def deltas(events: list[TurnEvent]) -> list[str]:
    """The answer's text as the events carried it."""
    return [event.text for event in events if isinstance(event, AnswerDelta)]


def served(session_id: str | None = "ses_1", **fields: Any) -> TurnResult:
    """A turn's result as the serving path returns it (recorded, in ``session_id``),
    with ``fields`` (``TurnResult``'s) changed."""
    result = TurnResult(
        reply_id="r1",
        created=0,
        output="the answer",
        withheld=False,
        session_id=session_id,
        turn=None,
        recorded=True,
        run_id=None,
        context=None,
    )
    return replace(result, **fields)
