"""The Responses door's answers (v4): the Response object, its stream's events, and a
conversation's messages as items.

A Response is built from a served turn (``TurnResult``) and what it repeats of its
request (``ResponseEcho``), or from a stored turn (``StoredResponse``) and what its turn
kept. Its id names the turn (``domain.responses.ResponseRef``): the session and the
position the turn began at, known when it begins, so a stream's first event carries the
same id as its last, and a replay (an Idempotency-Key's) the same as the first answer.

A stream (``ResponseEvents``) is ``event: <type>`` / ``data: <json>`` pairs, each with
an increasing ``sequence_number``: ``response.created``, ``response.in_progress``, the
message's ``response.output_item.added`` and ``response.content_part.added``,
``response.output_text.delta`` as the text is made, its ``.done`` events, then
``response.completed`` (``response.incomplete`` for a withheld or length-cut answer, as
OpenAI ends those), or ``response.failed`` carrying the Response with its error. No
``[DONE]`` line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from convo_memory.domain.errors import ServiceError, ValidationFailed
from convo_memory.domain.models import Message, Session, Summary, parse_iso
from convo_memory.domain.prompt_record import SentPrompt
from convo_memory.domain.responses import StoredResponse, message_item_id
from convo_memory.domain.turns import AnswerDelta, TurnBegun, TurnEvent, TurnResult
from convo_memory.doors.attachment_parts import with_input_parts
from convo_memory.doors.openai_common import convo_extension
from convo_memory.doors.response_object import (
    ResponseEcho,
    ResponseState,
    TurnName,
    function_call_item,
    incomplete_reason,
    message_item,
    response_body,
    turn_name,
)
from convo_memory.doors.sse import sse_event

__all__ = ["ResponseEcho", "ResponseEvents", "served_response", "stored_response"]


def transcript_item(session_id: str, message: Message) -> dict[str, Any]:
    """A conversation's message as an item, with its stable id ((v5) its attachments
    as input parts a client can resend)."""
    status = "incomplete" if message.withheld else "completed"
    item = message_item(
        message_item_id(session_id, message.seq), message.role, message.content, status
    )
    return with_input_parts(item, message.attachments)


def served_state(result: TurnResult) -> ResponseState:
    """A served turn's Response fields: one message, its answer; or, for a turn paused
    for the app's tools, its ``function_call`` items (after the text that came with
    them, when there is some)."""
    reason = incomplete_reason(result.withheld, result.finish == "length")
    name = turn_name(result)
    status = "incomplete" if reason else "completed"
    answer = message_item(name.answer_item_id, "assistant", result.output, status)
    output: tuple[dict[str, Any], ...] = (answer,)
    if result.tool_calls:
        calls = tuple(function_call_item(name, i, c) for i, c in enumerate(result.tool_calls))
        output = ((answer,) if result.output else ()) + calls
    return ResponseState(
        name=name,
        created_at=result.created,
        status=status,
        output=output,
        usage=result.usage,
        incomplete=reason,
        convo=convo_extension(result),
        completed_at=result.completed,
    )


def served_response(result: TurnResult, echo: ResponseEcho) -> dict[str, Any]:
    """The Response of a served turn (``POST /v1/responses``, or a replay of it)."""
    return response_body(served_state(result), echo)


# -- the stream -----------------------------------------------------------------------------


class ResponseEvents:
    """A streamed Response's events from its turn's events (``frames``), each with the
    next ``sequence_number``."""

    def __init__(self, echo: ResponseEcho) -> None:
        self._echo = echo
        self._sequence = 0
        self._begun: TurnBegun | None = None
        self._text: list[str] | None = None  # the answer's text so far, once its item is open

    def frames(self, items: Iterable[TurnEvent | TurnResult | ServiceError]) -> Iterator[str]:
        """The stream's events: from the turn's beginning to its result, or to a
        failure after it began (``response.failed``)."""
        for item in items:
            if isinstance(item, TurnBegun):
                yield from self._begin(item)
            elif isinstance(item, AnswerDelta):
                yield from self._delta(item.text)
            elif isinstance(item, TurnResult):
                yield from self._end(item)
                return
            elif isinstance(item, ServiceError):
                yield from self._failed(item)
                return

    def _event(self, kind: str, **data: Any) -> str:
        frame = sse_event(kind, {"type": kind, "sequence_number": self._sequence, **data})
        self._sequence += 1
        return frame

    def _begin(self, begun: TurnBegun) -> Iterator[str]:
        self._begun = begun
        response = response_body(
            ResponseState(turn_name(begun), begun.created, "in_progress"), self._echo
        )
        yield self._event("response.created", response=response)
        yield self._event("response.in_progress", response=response)

    def _item_id(self) -> str:
        assert self._begun is not None  # a turn begins before its first delta
        return turn_name(self._begun).answer_item_id

    def _open(self) -> Iterator[str]:
        item_id = self._item_id()
        self._text = []
        item = {**message_item(item_id, "assistant", "", "in_progress"), "content": []}
        yield self._event("response.output_item.added", output_index=0, item=item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        yield self._event(
            "response.content_part.added",
            item_id=item_id,
            output_index=0,
            content_index=0,
            part=part,
        )

    def _delta(self, text: str) -> Iterator[str]:
        if self._text is None:
            yield from self._open()
        assert self._text is not None
        self._text.append(text)
        yield self._event(
            "response.output_text.delta",
            item_id=self._item_id(),
            output_index=0,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def _end(self, result: TurnResult) -> Iterator[str]:
        if self._begun is None:  # a replayed turn: it begins and ends now
            yield from self._begin(
                TurnBegun(result.reply_id, result.created, result.session_id, result.begun_seq)
            )
        state = served_state(result)
        if result.output or not result.tool_calls:
            yield from self._message_done(result, state.output[0])
        for item in state.output:
            if item["type"] == "function_call":
                yield from self._function_call(state.output.index(item), item)
        kind = "response.incomplete" if state.incomplete else "response.completed"
        yield self._event(kind, response=response_body(state, self._echo))

    def _message_done(self, result: TurnResult, answer: dict[str, Any]) -> Iterator[str]:
        if self._text is None and result.output:
            yield from self._delta(result.output)  # made at once (a filter stood between)
        elif self._text is None:
            yield from self._open()
        item_id, part = answer["id"], answer["content"][0]
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        yield self._event("response.output_text.done", **where, text=result.output, logprobs=[])
        yield self._event("response.content_part.done", **where, part=part)
        yield self._event("response.output_item.done", output_index=0, item=answer)

    def _function_call(self, index: int, item: dict[str, Any]) -> Iterator[str]:
        """A call of the app's tools: its item added, its arguments, its item done."""
        added = {**item, "arguments": "", "status": "in_progress"}
        yield self._event("response.output_item.added", output_index=index, item=added)
        where = {"item_id": item["id"], "output_index": index}
        yield self._event(
            "response.function_call_arguments.delta", **where, delta=item["arguments"]
        )
        yield self._event(
            "response.function_call_arguments.done",
            **where,
            name=item["name"],
            arguments=item["arguments"],
        )
        yield self._event("response.output_item.done", output_index=index, item=item)

    def _failed(self, error: ServiceError) -> Iterator[str]:
        """The end of a stream that failed after it began: the message it had opened is
        closed (``incomplete``, with the text streamed so far), then ``response.failed``
        carries the Response with that output and its error."""
        begun = self._begun
        name = TurnName(None, None, "") if begun is None else turn_name(begun)
        output: tuple[dict[str, Any], ...] = ()
        if self._text is not None:
            text = "".join(self._text)
            item = message_item(self._item_id(), "assistant", text, "incomplete")
            where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            yield self._event("response.output_text.done", **where, text=text, logprobs=[])
            yield self._event("response.content_part.done", **where, part=item["content"][0])
            yield self._event("response.output_item.done", output_index=0, item=item)
            output = (item,)
        created = begun.created if begun else 0
        state = ResponseState(name, created, "failed", output=output, error=error)
        yield self._event("response.failed", response=response_body(state, self._echo))


# -- stored responses, what they were sent, conversations ---------------------------------


def stored_response(found: StoredResponse) -> dict[str, Any]:
    """``GET /v1/responses/{id}``: the Response as its turn keeps it (its ``usage`` is
    not kept: null), or (v5) a pause that still waits: its ``function_call`` items,
    after the text that came with them."""
    session, settings = found.session, found.settings
    reason = incomplete_reason(found.answer.withheld, settings.cut)
    status = "incomplete" if reason else "completed"
    ref = found.ref
    name = TurnName(ref.session_id, found.user_seq, ref.reply_id)
    answer = message_item(
        message_item_id(session.id, found.answer.seq), "assistant", found.answer.content, status
    )
    output: tuple[dict[str, Any], ...] = (answer,)
    if found.waiting:
        calls = tuple(function_call_item(name, i, c) for i, c in enumerate(found.waiting))
        output = ((answer,) if found.answer.content else ()) + calls
    previous = found.previous.id if settings.chained and found.previous else None
    echo = ResponseEcho(
        model=session.capability_id or "",
        settings=settings,
        tools=tuple({"type": "function", "name": name} for name in found.app_tools),
        previous_response_id=previous,
        stored=True,
    )
    waiting = bool(found.waiting)
    turn = None if waiting else {"userSeq": found.user_seq, "assistantSeq": found.answer.seq}
    convo = {
        "sessionId": session.id,
        "turn": turn,
        "recorded": not waiting,
        "withheld": found.answer.withheld,
        "runId": found.run_id,
    }
    created = int(parse_iso(found.answer.created_at))
    state = ResponseState(
        name=TurnName(ref.session_id, ref.user_seq, ref.reply_id),
        created_at=created,
        status=status,
        output=output,
        incomplete=reason,
        convo=convo,
        completed_at=created,
    )
    return response_body(state, echo)


def sent_items(found: StoredResponse, sent: SentPrompt) -> list[dict[str, Any]]:
    """What a response's model was sent, as items in order: the recall and the summary
    (when sent) as ``developer`` messages, the replayed messages, the input."""
    sid = found.session.id
    items: list[dict[str, Any]] = []
    if sent.recall is not None:
        items.append(message_item(f"msg_{sid}_recall", "developer", sent.recall.text))
    summary = sent.summary
    if isinstance(summary, Summary):
        items.append(message_item(f"msg_{sid}_s{summary.through_seq}", "developer", summary.text))
    elif summary is not None:  # a version no longer kept: said so, not made up
        lost = f"(the summary through message {summary.through_seq}, no longer kept)"
        items.append(message_item(f"msg_{sid}_s{summary.through_seq}", "developer", lost))
    items += [transcript_item(sid, message) for message in sent.messages]
    given = message_item(message_item_id(sid, found.user_seq), "user", sent.input)
    items.append(with_input_parts(given, sent.attachments))
    return items


def item_list(items: Sequence[Mapping[str, Any]], has_more: bool) -> dict[str, Any]:
    """A page of items: ``{object: "list", data, first_id, last_id, has_more}``."""
    return {
        "object": "list",
        "data": [dict(item) for item in items],
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }


def page_of(
    items: Sequence[Mapping[str, Any]], limit: int, after: str | None, order: str
) -> dict[str, Any]:
    """A page of a list held whole (a response's input items): ``limit`` items after the
    item ``after``, in ``order`` (``desc``: newest first)."""
    ordered = list(items) if order == "asc" else list(reversed(items))
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise ValidationFailed(
                "after is not an item of this list",
                details=[{"loc": ["query", "after"], "msg": "unknown item id"}],
                param="after",
            )
        start = ids.index(after) + 1
    page = ordered[start : start + limit]
    return item_list(page, start + limit < len(ordered))


def conversation_json(session: Session) -> dict[str, Any]:
    """A conversation (any session): ``{id, object, created_at, metadata}``."""
    return {
        "id": session.id,
        "object": "conversation",
        "created_at": int(parse_iso(session.created_at)),
        "metadata": session.metadata,
    }
