"""Turns through the serving path as the native doors ask them (``TurnService.serve``
with the command ``predict_door`` reads), for tests that drive the service itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from convo_memory.domain.tools import AUTO, AppTools, ToolChoice, ToolDefinition, ToolRound
from convo_memory.domain.turns import (
    AnswerDelta,
    SessionById,
    ToolOutput,
    ToolResults,
    TurnCommand,
    TurnEvent,
    TurnResult,
    UserText,
)
from convo_memory.edge.turn_edge import BufferedEvents


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


def app_tools(*names: str, choice: ToolChoice = AUTO) -> AppTools:
    """The app's own tools ``names`` (each takes a ``query``), offered with ``choice``."""
    schema = {"type": "object", "properties": {"query": {"type": "string"}}}
    return AppTools(tuple(ToolDefinition(n, f"the app's {n}", schema) for n in names), choice)


def app_turn(
    container: Any,
    workspace_id: str,
    capability_id: str,
    given: str | Sequence[tuple[str, str]],
    session_id: str | None = None,
    *,
    tools: AppTools | None = None,
    events: BufferedEvents | None = None,
    rounds: tuple[ToolRound, ...] = (),
) -> TurnResult:
    """A turn that offers the app's ``tools``: the user's text, or (in a session) the
    ``(call id, result)`` pairs that continue its paused turn; ``rounds`` a stateless
    client's own tool exchange after its input."""
    turn_input = (
        UserText(given)
        if isinstance(given, str)
        else ToolResults(tuple(ToolOutput(call_id, output) for call_id, output in given))
    )
    conversation = None if session_id is None else SessionById(session_id)
    command = TurnCommand(
        capability_id,
        conversation,
        turn_input,
        stream=events is not None,
        app_tools=tools,
        rounds=rounds,
    )
    result: TurnResult = container.turns.serve(workspace_id, command, events)
    return result
