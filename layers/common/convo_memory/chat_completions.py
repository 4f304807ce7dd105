"""The OpenAI-compatible door: how it reads a ``/v1/chat/completions`` request and
writes its answers (``chat.completion``, ``chat.completion.chunk`` lines, ``/v1/models``).

The door reads a request into a ``TurnCommand`` (``read_chat_turn``), the turn edge
serves it (``convo_memory.turn_edge``), and the door writes the ``TurnResult``:
``complete`` does the three for the HttpApi (``functions/predict``). The streaming
Function URL (``stream_door``) reads and writes with the same functions, so a request
gets the same answer through either; the HttpApi delivers a stream's lines all at once.

Which conversation: header ``X-Convo-Session-Id`` (a session by id), else
``X-Convo-Session-Key`` with the end user (the body's ``user`` or ``safety_identifier``,
or header ``X-Convo-User``, for clients that cannot set body fields) and optionally
``X-Convo-Principal``: the session of the app's own key, opened on first use; else
stateless. Who a call says it is must be who the session is for, by id as by key (409).
In a session only the last message (a user message) is the turn's input: the session's
replay window, summary and digests stand in for the history an app resends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convo_memory import input_gate
from convo_memory.domain.errors import ServiceError, ValidationFailed
from convo_memory.domain.generation import GenerationOptions
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.turns import (
    AnswerDelta,
    Conversation,
    SessionById,
    SessionByKey,
    SessionOwner,
    TurnBegun,
    TurnCommand,
    TurnEvent,
    TurnResult,
    UserText,
)
from convo_memory.turn_edge import BufferedEvents, json_text

if TYPE_CHECKING:
    from convo_memory.api_models import ChatCompletionRequest
    from convo_memory.domain.models import Capability
    from convo_memory.turn_edge import GatedRequest, TurnEdge

ROUTE = "POST /v1/chat/completions"
SESSION_ID_HEADER = "x-convo-session-id"
SESSION_KEY_HEADER = "x-convo-session-key"
PRINCIPAL_HEADER = "x-convo-principal"
USER_HEADER = "x-convo-user"
SESSION_KEY = re.compile(r"[\x20-\x7e]{1,128}")
MAX_STOP_SEQUENCES = 4
MAX_STOP_CHARS = 256
DONE_LINE = "data: [DONE]\n\n"
JSON = "application/json"
EVENT_STREAM = "text/event-stream; charset=utf-8"
# Roles a stateless turn passes on; "developer" is OpenAI's newer name for "system".
SYSTEM_ROLES = frozenset({"system", "developer"})
CHAT_ROLES = frozenset({"user", "assistant"})


@dataclass(frozen=True)
class ChatTurn:
    """A chat-completions request: the turn it asks for, and how it wants the answer
    written (``include_usage``: the stream's last chunk carries the usage)."""

    command: TurnCommand
    include_usage: bool

    @property
    def model(self) -> str:
        """The request's ``model``: the capability id, as every answer names it."""
        return str(self.command.capability_id)


@dataclass(frozen=True)
class ChatAnswer:
    """What the HttpApi answers a chat turn with: a ``chat.completion`` (JSON) or the
    whole stream of its chunks, and ``X-Convo-Session-Id`` for a turn in a session."""

    content_type: str
    body: str
    headers: dict[str, str]


def complete(edge: TurnEdge, request: GatedRequest, chat_turn: ChatTurn) -> ChatAnswer:
    """``POST /v1/chat/completions`` behind the HttpApi: the turn ``chat_turn`` asks
    for, as a ``chat.completion``, or with ``stream: true`` its chunk lines all at once."""
    command = chat_turn.command
    events = BufferedEvents()
    door = "chat-stream-buffered" if command.stream else "chat"
    result = edge.serve(door, request, command, events)
    headers = session_headers(result.session_id)
    if not command.stream:
        return ChatAnswer(JSON, json_text(chat_completion(result, chat_turn.model)), headers)
    lines = chunk_frames([*events, result], chat_turn.model, chat_turn.include_usage)
    return ChatAnswer(EVENT_STREAM, "".join(lines), headers)


def read_chat_turn(body: Mapping[str, Any], headers: Mapping[str, str]) -> ChatTurn:
    """The turn a gated chat-completions body and its headers ask for; ``422`` for what
    the door does not take (naming the field), ``404`` for an id none of ours could be."""
    from convo_memory.api_models import ChatCompletionRequest

    return chat_turn(input_gate.parse_model(ChatCompletionRequest, dict(body)), headers)


def chat_turn(request: ChatCompletionRequest, headers: Mapping[str, str]) -> ChatTurn:
    """The turn a chat-completions request (its body validated) and its headers ask for
    (``read_chat_turn``, whose refusals these are)."""
    _refuse_unsupported(request)
    input_gate.check_path_id("capabilityId", request.model)
    conversation = _conversation(request, {name.lower(): v for name, v in headers.items()})
    *earlier, last = request.messages
    if last.role != "user":
        raise _invalid(f"messages.{len(earlier)}.role", "the last message must be the user's")
    user_input = _text(last.content, f"messages.{len(earlier)}.content")
    # Stateless, the model sees the messages as given; in a session, the session's own.
    history = tuple(_history(earlier)) if conversation is None else ()
    options = GenerationOptions(
        max_tokens=request.max_completion_tokens or request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        stop=(request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ()),
    )
    command = TurnCommand(
        capability_id=request.model,
        conversation=conversation,
        input=UserText(user_input),
        options=options,
        history=history,
        stream=request.stream,
        conversational_only=True,
    )
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return ChatTurn(command, include_usage)


def _conversation(request: Any, headers: Mapping[str, str]) -> Conversation:
    """Which conversation: ``X-Convo-Session-Id``, else ``X-Convo-Session-Key`` with the
    end user (and ``X-Convo-Principal``), else none. Stateless, who the end user is
    matters to no session: it is not read."""
    session_id = headers.get(SESSION_ID_HEADER)
    session_key = headers.get(SESSION_KEY_HEADER)
    if session_id is None and session_key is None:
        return None
    if session_id is not None:
        input_gate.check_path_id("sessionId", session_id)
        return SessionById(session_id, _owner(request, headers))
    assert session_key is not None
    if not SESSION_KEY.fullmatch(session_key):
        raise _invalid("X-Convo-Session-Key", "must be 1-128 printable ASCII characters")
    owner = _owner(request, headers)
    if owner.external_ref is None:
        raise _invalid(
            "user",
            "is required with X-Convo-Session-Key: your end user's id, as user, "
            "safety_identifier or the header X-Convo-User",
        )
    return SessionByKey(session_key, owner)


def _owner(request: Any, headers: Mapping[str, str]) -> SessionOwner:
    """Who the call says it is: its end user and its ``X-Convo-Principal`` (checked by
    the rules a session is opened with; 422)."""
    from convo_memory.api_models import SessionPatch

    principal, given = _principal(headers.get(PRINCIPAL_HEADER))
    try:
        input_gate.parse_model(SessionPatch, {"principal": principal})
    except ValidationFailed as refused:
        raise _invalid("X-Convo-Principal", refused.message.removeprefix("principal: ")) from None
    return SessionOwner(_end_user(request, headers), principal, given)


def _end_user(request: Any, headers: Mapping[str, str]) -> str | None:
    """The end user a call names (the session's externalRef): the body's ``user`` or
    ``safety_identifier``, or ``X-Convo-User``; two that differ are ``422``."""
    named = [
        (field, value)
        for field, value in (
            ("user", request.user),
            ("safety_identifier", request.safety_identifier),
            ("X-Convo-User", headers.get(USER_HEADER)),
        )
        if value is not None
    ]
    for field, value in named:
        if not 1 <= len(value) <= input_gate.MAX_EXTERNAL_REF_CHARS:
            raise _invalid(
                field,
                f"must be 1-{input_gate.MAX_EXTERNAL_REF_CHARS} characters (your end user's id)",
            )
    for field, value in named[1:]:
        if value != named[0][1]:
            raise _invalid(field, f"differs from {named[0][0]}: both name the end user")
    return named[0][1] if named else None


# What the door takes of each field it otherwise refuses (422 naming it): the values that
# ask for nothing it does not do. ``openapi.py`` states the same rules.
def _is(expected: Any) -> Any:
    return lambda value: value is expected


def _text_only_modalities(value: Any) -> bool:
    return isinstance(value, list) and all(item == "text" for item in value)


def _one(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 1


TOOL_FIELDS = ("tools", "functions", "function_call", "tool_choice")
REFUSED_UNLESS: tuple[tuple[str, Any], ...] = (
    ("tools", lambda value: value == []),
    ("functions", lambda value: value == []),
    ("function_call", _is(None)),
    ("tool_choice", lambda value: value == "none"),
    ("n", _one),
    ("response_format", lambda value: isinstance(value, dict) and value.get("type") == "text"),
    ("audio", _is(None)),
    ("modalities", _text_only_modalities),
    ("logprobs", _is(False)),
    ("top_logprobs", _is(None)),
)


def _refuse_unsupported(request: Any) -> None:
    fields = request.model_extra or {}
    for name, allowed in REFUSED_UNLESS:
        value = fields.get(name)
        if value is None or allowed(value):
            continue
        why = (
            "tools run server-side: an agent's tools are configured on its capability"
            if name in TOOL_FIELDS
            else "this service answers with one text choice"
        )
        raise _invalid(name, f"is not supported ({why})")


def _invalid(field: str, what: str) -> ValidationFailed:
    return ValidationFailed(
        f"{field} {what}",
        details=[{"loc": field.split("."), "msg": what, "type": "value_error"}],
        param=field,
    )


def _principal(raw: str | None) -> tuple[dict[str, str] | None, bool]:
    """``X-Convo-Principal``: a JSON object of string claims, or absent."""
    if raw is None:
        return None, False
    try:
        value = json.loads(raw)
    except ValueError:
        raise _invalid("X-Convo-Principal", "must be a JSON object of string claims") from None
    if value is not None and not (
        isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    ):
        raise _invalid("X-Convo-Principal", "must be a JSON object of string claims")
    input_gate.inspect_value(value)
    return value, True


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = [
            part.get("text")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        if len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return "\n".join(str(t) for t in texts)
    raise _invalid(where, 'must be text: a string or a list of {"type": "text", "text"} parts')


def _history(earlier: Iterable[Any]) -> Iterable[ChatMessage]:
    for index, message in enumerate(earlier):
        if message.role in SYSTEM_ROLES:
            yield ChatMessage("system", _text(message.content, f"messages.{index}.content"))
        elif message.role in CHAT_ROLES:
            yield ChatMessage(message.role, _text(message.content, f"messages.{index}.content"))
        else:
            raise _invalid(
                f"messages.{index}.role",
                "must be system, developer, user or assistant (tools run server-side)",
            )


# -- answers -------------------------------------------------------------------------------


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
    """``content_filter`` for a withheld answer, else how the model ended."""
    return "content_filter" if result.withheld else result.finish


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


CONVO_FIELDS = ("sessionId", "turn", "recorded", "withheld", "runId")


def convo_extension(result: TurnResult) -> dict[str, Any]:
    """The ``convo`` member: what the service did with the turn."""
    kept = result.to_json()
    return {name: kept[name] for name in CONVO_FIELDS}


def chat_completion(result: TurnResult, model: str) -> dict[str, Any]:
    """The ``chat.completion`` of a turn."""
    stamp = _stamp(result, model)
    body: dict[str, Any] = {
        "id": stamp.id,
        "object": "chat.completion",
        "created": stamp.created,
        "model": stamp.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.output},
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
    from convo_memory.turn_edge import error_body

    return data_line(error_body(error, openai=True)) + DONE_LINE


def whole_stream(result: TurnResult, model: str, include_usage: bool) -> str:
    """A stream written at once from its result (a replayed turn, or one that made no
    delta): role, the answer as one delta, the last chunk."""
    stamp = _stamp(result, model)
    return (
        first_line(stamp)
        + delta_line(stamp, result.output)
        + last_lines(result, model, include_usage)
    )


def chunk_frames(
    items: Iterable[TurnEvent | TurnResult | ServiceError], model: str, include_usage: bool
) -> Iterator[str]:
    """A chat stream's lines from a turn's events: the role chunk before the first
    delta, each delta, then the last chunk and ``[DONE]`` (or, after a failure, one
    error line and ``[DONE]``). Tools the service calls are not the client's: their
    events are not written."""
    begun: TurnBegun | None = None
    stamp: CompletionStamp | None = None
    for item in items:
        if isinstance(item, TurnBegun):
            begun = item
        elif isinstance(item, AnswerDelta):
            if stamp is None:
                assert begun is not None  # a turn begins before its first delta
                stamp = CompletionStamp.of(begun.reply_id, begun.created, model)
                yield first_line(stamp)
            yield delta_line(stamp, item.text)
        elif isinstance(item, TurnResult):
            if stamp is None:
                yield whole_stream(item, model, include_usage)
            else:
                yield last_lines(item, model, include_usage)
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
