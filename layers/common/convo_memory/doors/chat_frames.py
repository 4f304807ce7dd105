"""How the chat door writes a turn's result: a ``chat.completion``, its
``chat.completion.chunk`` lines (``data:`` Server-Sent Events ending in ``[DONE]``),
an error line after a stream has begun, and the ``/v1/models`` list. The HttpApi and
the streaming Function URL write the same lines from the same result and events."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convo_memory.domain.errors import ServiceError
from convo_memory.domain.tools import AppToolCall
from convo_memory.domain.turns import AnswerDelta, TurnBegun, TurnEvent, TurnResult
from convo_memory.doors.openai_common import convo_extension
from convo_memory.edge.errors import json_text

if TYPE_CHECKING:
    from convo_memory.domain.models import Capability

DONE_LINE = "data: [DONE]\n\n"


@dataclass(frozen=True)
class CompletionStamp:
    """What identifies one completion in every line of its answer: the turn's id and
    time (kept with an Idempotency-Key, so a replay shows them again) and the model."""

    id: str
    created: int
    model: str

    @classmethod
    def of(cls, reply_id: str, created: int, model: str) -> CompletionStamp:
        return cls(f"chatcmpl-{reply_id}", created, model)


def _stamp(result: TurnResult, model: str) -> CompletionStamp:
    return CompletionStamp.of(result.reply_id, result.created, model)


def finish_reason(result: TurnResult) -> str:
    """``tool_calls`` for a turn paused for the app's tools, ``content_filter`` for a
    withheld answer, else how the model ended."""
    if result.tool_calls:
        return "tool_calls"
    return "content_filter" if result.withheld else result.finish


def tool_calls_json(calls: Iterable[AppToolCall]) -> list[dict[str, Any]]:
    """The calls of a paused turn, as ``message.tool_calls``."""
    return [
        {
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in calls
    ]


def usage_of(result: TurnResult) -> dict[str, Any] | None:
    """The completion's ``usage`` in OpenAI's names, when known: ``prompt_tokens`` counts
    the whole prompt, ``prompt_tokens_details.cached_tokens`` the part of it the provider
    read from its prompt cache."""
    usage = result.usage
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
    }


def chat_completion(result: TurnResult, model: str) -> dict[str, Any]:
    """The ``chat.completion`` of a turn."""
    stamp = _stamp(result, model)
    message: dict[str, Any] = {"role": "assistant", "content": result.output}
    if result.tool_calls:
        # As OpenAI answers a call that came with no text: content null.
        message["content"] = result.output or None
        message["tool_calls"] = tool_calls_json(result.tool_calls)
    body: dict[str, Any] = {
        "id": stamp.id,
        "object": "chat.completion",
        "created": stamp.created,
        "model": stamp.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(result),
                "logprobs": None,
            }
        ],
        "convo": convo_extension(result),
    }
    usage = usage_of(result)
    if usage is not None:
        body["usage"] = usage
    return body


def _chunk(stamp: CompletionStamp, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": stamp.id,
        "object": "chat.completion.chunk",
        "created": stamp.created,
        "model": stamp.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def data_line(payload: Any) -> str:
    """One server-sent event of the stream: ``data: <JSON on one line>``."""
    return f"data: {json_text(payload)}\n\n"


def first_line(stamp: CompletionStamp) -> str:
    """The stream's first chunk: the assistant's role."""
    return data_line(_chunk(stamp, {"role": "assistant", "content": ""}, None))


def delta_line(stamp: CompletionStamp, text: str) -> str:
    return data_line(_chunk(stamp, {"content": text}, None))


def tool_call_lines(stamp: CompletionStamp, calls: Iterable[AppToolCall]) -> str:
    """The chunks of a paused turn's calls, as OpenAI streams them: per call one chunk
    with its ``index``, ``id``, ``type`` and name, then one with its arguments."""
    lines = []
    for index, call in enumerate(calls):
        head = {
            "index": index,
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        arguments = {"index": index, "function": {"arguments": call.arguments}}
        lines.append(data_line(_chunk(stamp, {"tool_calls": [head]}, None)))
        lines.append(data_line(_chunk(stamp, {"tool_calls": [arguments]}, None)))
    return "".join(lines)


def last_lines(result: TurnResult, model: str, include_usage: bool) -> str:
    """The stream's last chunk (``finish_reason``, ``convo``, and ``usage`` when asked
    for and known), then ``data: [DONE]``."""
    chunk = _chunk(_stamp(result, model), {}, finish_reason(result))
    chunk["convo"] = convo_extension(result)
    usage = usage_of(result)
    if include_usage and usage is not None:
        chunk["usage"] = usage
    return data_line(chunk) + DONE_LINE


def error_lines(error: ServiceError) -> str:
    """A failure after the stream started: one error line, then ``data: [DONE]``."""
    from convo_memory.edge.errors import error_body

    return data_line(error_body(error, openai=True)) + DONE_LINE


def whole_stream(result: TurnResult, model: str, include_usage: bool) -> str:
    """A stream written at once from its result (a replayed turn, or one that made no
    delta): role, the answer as one delta (and a paused turn's calls), the last chunk."""
    stamp = _stamp(result, model)
    text = delta_line(stamp, result.output) if result.output or not result.tool_calls else ""
    return (
        first_line(stamp)
        + text
        + tool_call_lines(stamp, result.tool_calls)
        + last_lines(result, model, include_usage)
    )


def chunk_frames(
    items: Iterable[TurnEvent | TurnResult | ServiceError], model: str, include_usage: bool
) -> Iterator[str]:
    """A chat stream's lines from a turn's events: the role chunk before the first
    delta, each delta, a paused turn's calls (v4), then the last chunk and ``[DONE]``
    (or, after a failure, one error line and ``[DONE]``). Tools the service calls are
    not the client's: their events are not written."""
    begun: TurnBegun | None = None
    stamp: CompletionStamp | None = None
    for item in items:
        if isinstance(item, TurnBegun):
            begun = item
        elif isinstance(item, AnswerDelta):
            if stamp is None:
                assert begun is not None  # a turn begins before its first event
                stamp = CompletionStamp.of(begun.reply_id, begun.created, model)
                yield first_line(stamp)
            yield delta_line(stamp, item.text)
        elif isinstance(item, TurnResult):
            # (v5) A paused turn's calls are written from its result: their ids are the
            # ones the app is shown (minted where the pause was kept), not the model's.
            if stamp is None:
                yield whole_stream(item, model, include_usage)
            else:
                yield tool_call_lines(stamp, item.tool_calls) + last_lines(
                    item, model, include_usage
                )
            return
        elif isinstance(item, ServiceError):
            yield error_lines(item)
            return


def session_headers(session_id: str | None) -> dict[str, str]:
    """``X-Convo-Session-Id`` of a turn in a session."""
    return {"X-Convo-Session-Id": session_id} if session_id else {}


def models_list(workspace_id: str, capabilities: Iterable[Capability]) -> dict[str, Any]:
    """``GET /v1/models``: the workspace's generative and agent capabilities."""
    from convo_memory.domain.models import parse_iso

    return {
        "object": "list",
        "data": [
            {
                "id": capability.id,
                "object": "model",
                "created": int(parse_iso(capability.created_at)),
                "owned_by": workspace_id,
            }
            for capability in capabilities
            if capability.conversational
        ],
    }
