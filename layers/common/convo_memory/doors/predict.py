"""The native turn doors: how they read a request into a ``TurnCommand`` and write the
``TurnResult`` back.

- ``POST /v1/capabilities/{id}/predict`` ``{input, sessionId?}``: a Prediction (JSON);
- ``POST /v1/capabilities/{id}/predict/stream``, same body: our Server-Sent Events,
  ``delta`` (and an agent's ``tool``) events as the turn makes them, then ``done``
  carrying the Prediction, or ``error`` (``sse_frames``);
- ``POST /v1/sessions/{id}/messages`` ``{input}``: a turn on the session's own
  capability, answered with a Prediction.

Each door reads its request (its body already validated as ``TurnInput`` or
``MessageInput``: by the HttpApi route's typed body, by the streaming door's
``request_rules.parse_model``) into a ``TurnCommand``, the turn edge serves it
(``convo_memory.edge.turn_edge``), and the door writes the ``TurnResult``: ``predict``,
``predict_stream`` and ``session_message`` do the three for the HttpApi
(``functions/predict``). The streaming Function URL (``stream_door``) reads and writes
with the same functions, so a request gets the same answer through either; the HttpApi
delivers a stream's events all at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from convo_memory.domain.attachments import FileById
from convo_memory.domain.errors import ServiceError
from convo_memory.domain.turns import (
    AnswerDelta,
    SessionById,
    ToolFinished,
    TurnCommand,
    TurnEvent,
    TurnResult,
    UserText,
)
from convo_memory.doors.sse import sse_event
from convo_memory.edge.turn_edge import BufferedEvents

if TYPE_CHECKING:
    from convo_memory.api import AttachmentIn, MessageInput, TurnInput
    from convo_memory.edge.input_gate import GatedRequest
    from convo_memory.edge.turn_edge import TurnEdge


def predict(
    edge: TurnEdge, request: GatedRequest, capability_id: str, turn: TurnInput
) -> dict[str, Any]:
    """``POST /v1/capabilities/{id}/predict``: the Prediction of the turn it asks for."""
    command = read_predict(capability_id, turn, stream=False)
    return prediction(edge.serve("predict", request, command))


def predict_stream(
    edge: TurnEdge, request: GatedRequest, capability_id: str, turn: TurnInput
) -> str:
    """``POST /v1/capabilities/{id}/predict/stream`` behind the HttpApi, which cannot
    stream: the same events the Function URL streams, written at once."""
    command = read_predict(capability_id, turn, stream=True)
    events = BufferedEvents()
    result = edge.serve("stream-buffered", request, command, events)
    return "".join(sse_frames([*events, result]))


def session_message(
    edge: TurnEdge, request: GatedRequest, session_id: str, message: MessageInput
) -> dict[str, Any]:
    """``POST /v1/sessions/{id}/messages``: the Prediction of a turn of that session."""
    command = read_message(session_id, message)
    return prediction(edge.serve("messages", request, command))


def read_predict(capability_id: str, turn: TurnInput, *, stream: bool) -> TurnCommand:
    """A predict body's turn: stateless, or of the session it names."""
    conversation = None if turn.session_id is None else SessionById(turn.session_id)
    given = UserText(turn.input, _attached(turn.attachments))
    return TurnCommand(capability_id, conversation, given, stream=stream)


def read_message(session_id: str, message: MessageInput) -> TurnCommand:
    """A session message's turn, on the session's own capability."""
    given = UserText(message.input, _attached(message.attachments))
    return TurnCommand(None, SessionById(session_id), given)


def _attached(attachments: list[AttachmentIn]) -> tuple[FileById, ...]:
    """(v5) ``attachments: [{fileId}]``: files the workspace has, by id."""
    return tuple(FileById(a.file_id, f"attachments.{i}") for i, a in enumerate(attachments))


def prediction(result: TurnResult) -> dict[str, Any]:
    """The Prediction of a turn (JSON)."""
    from convo_memory.api import Prediction, TurnContext
    from convo_memory.domain.models import TurnSeqs

    position, stats = result.turn, result.context
    answer = Prediction(
        output=result.output,
        withheld=result.withheld,
        session_id=result.session_id,
        turn=None
        if position is None
        else TurnSeqs(user_seq=position.user_seq, assistant_seq=position.assistant_seq),
        recorded=result.recorded,
        run_id=result.run_id,
        context=None
        if stats is None
        else TurnContext(
            replayed_messages=stats.replayed_messages,
            replayed_chars=stats.replayed_chars,
            omitted_messages=stats.omitted_messages,
            summary_included=stats.summary_included,
        ),
    )
    return answer.to_json_dict()


def sse_frames(items: Iterable[TurnEvent | TurnResult | ServiceError]) -> Iterator[str]:
    """Our stream of a turn: its deltas and tool events as they came, then ``done``
    with the Prediction (after the whole answer as one delta, when none came: a replayed
    turn) or ``error`` (a failure after the stream started)."""
    streamed = False
    for item in items:
        if isinstance(item, AnswerDelta):
            streamed = True
            yield sse_event("delta", {"text": item.text})
        elif isinstance(item, ToolFinished):
            yield sse_event("tool", {"name": item.name, "status": item.status})
        elif isinstance(item, TurnResult):
            if not streamed:
                yield sse_event("delta", {"text": item.output})
            yield sse_event("done", prediction(item))
            return
        elif isinstance(item, ServiceError):
            yield sse_event("error", item.to_body()["error"])
            return
