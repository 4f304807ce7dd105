"""The OpenAI-compatible door: how it reads a ``/v1/chat/completions`` request and
writes its answers (``chat.completion``, ``chat.completion.chunk`` lines, ``/v1/models``).

The door reads a request into a ``TurnCommand`` (``read_chat_turn``), the turn edge
serves it (``convo_memory.edge.turn_edge``), and the door writes the ``TurnResult``:
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

(v4) The app's own function tools (``tools``, ``tool_choice``, ``parallel_tool_calls``)
are offered to the model; a turn that calls one answers ``finish_reason: "tool_calls"``
with ``message.tool_calls`` (streamed: ``delta.tool_calls`` chunks). In a session the
trailing ``tool`` messages continue that paused turn (``ToolResults``); stateless, the
client's own tool exchange after its last user message is the turn's rounds and its
earlier history passes through as it is. ``response_format`` asks for structured output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from convo_memory.domain.errors import ServiceError, ValidationFailed
from convo_memory.domain.generation import GenerationOptions
from convo_memory.domain.imported_history import imported_turns
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.tools import (
    AppToolCall,
    AppTools,
    ToolChoice,
    ToolDefinition,
    ToolReply,
    ToolRequest,
    ToolRound,
    tool_request,
)
from convo_memory.domain.turns import (
    AnswerDelta,
    AppToolCalls,
    ConversationTarget,
    SessionById,
    SessionByKey,
    SessionOwner,
    ToolOutput,
    ToolResults,
    TurnBegun,
    TurnCommand,
    TurnEvent,
    TurnPayload,
    TurnResult,
    UserText,
)
from convo_memory.edge import input_gate
from convo_memory.edge.errors import json_text
from convo_memory.edge.turn_edge import BufferedEvents

if TYPE_CHECKING:
    from convo_memory.api import ChatCompletionRequest, FunctionSpec
    from convo_memory.domain.models import Capability
    from convo_memory.edge.input_gate import GatedRequest
    from convo_memory.edge.turn_edge import TurnEdge

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
    from convo_memory.api import ChatCompletionRequest

    return chat_turn(input_gate.parse_model(ChatCompletionRequest, dict(body)), headers)


def chat_turn(request: ChatCompletionRequest, headers: Mapping[str, str]) -> ChatTurn:
    """The turn a chat-completions request (its body validated) and its headers ask for
    (``read_chat_turn``, whose refusals these are)."""
    _refuse_unsupported(request)
    input_gate.check_path_id("capabilityId", request.model)
    conversation = _conversation(request, {name.lower(): v for name, v in headers.items()})
    turn_input: TurnPayload
    history: tuple[ChatMessage, ...] = ()
    rounds: tuple[ToolRound, ...] = ()
    if conversation is None:
        # Stateless, the model sees the messages as given.
        text, history, rounds = _stateless_messages(request.messages)
        turn_input = UserText(text)
    else:
        # In a session, the session's own history stands in for the app's copy.
        turn_input = _session_input(request.messages)
        if isinstance(conversation, SessionByKey) and isinstance(turn_input, UserText):
            # (v4) ... except on the call that opens a key's session: its first turns.
            earlier = request.messages[:-1]
            conversation = replace(conversation, history=imported_turns(_said(earlier)))
    response_format = request.response_format.sent() if request.response_format else None
    options = GenerationOptions(
        max_tokens=request.max_completion_tokens or request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        stop=(request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ()),
        response_format=response_format,
    )
    command = TurnCommand(
        capability_id=request.model,
        conversation=conversation,
        input=turn_input,
        options=options,
        history=history,
        stream=request.stream,
        conversational_only=True,
        app_tools=_app_tools(request),
        rounds=rounds,
    )
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return ChatTurn(command, include_usage)


def _conversation(request: Any, headers: Mapping[str, str]) -> ConversationTarget:
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
    from convo_memory.api import SessionPatch

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


LEGACY_TOOL_FIELDS = ("functions", "function_call")
REFUSED_UNLESS: tuple[tuple[str, Any], ...] = (
    ("functions", lambda value: value == []),
    ("function_call", _is(None)),
    ("n", _one),
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
            "the legacy form of function calling: offer them as tools"
            if name in LEGACY_TOOL_FIELDS
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


def _said(earlier: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """The user and assistant messages' text among ``earlier`` (``(role, text)``): what a
    key's session imports when the call opens it. Parts that are not text are left out,
    as this history is otherwise ignored, never refused."""
    for message in earlier:
        if message.role not in ("user", "assistant"):
            continue
        content = message.content
        if isinstance(content, list):
            parts = [p.get("text") for p in content if isinstance(p, dict)]
            content = "\n".join(t for t in parts if isinstance(t, str))
        if isinstance(content, str) and (content or message.role == "user"):
            yield message.role, content


def _history(earlier: Iterable[Any]) -> Iterable[ChatMessage]:
    """A stateless client's messages before its input, as the model is sent them: text,
    and its own tool exchanges (an assistant's ``tool_calls``, then the ``tool``
    messages that answer them)."""
    unanswered: set[str] = set()
    for index, message in enumerate(earlier):
        where = f"messages.{index}"
        if message.role == "tool":
            call_id = _call_id(message, where)
            if call_id not in unanswered:
                raise _invalid(
                    f"{where}.tool_call_id", "answers no call of the assistant message before it"
                )
            unanswered.discard(call_id)
            yield ChatMessage("tool", _text(message.content, f"{where}.content"), (), call_id)
            continue
        unanswered = set()
        if message.role in SYSTEM_ROLES:
            yield ChatMessage("system", _text(message.content, f"{where}.content"))
        elif message.role == "assistant" and message.tool_calls:
            requests = tuple(_request(call) for call in message.tool_calls)
            unanswered = {request.call_id for request in requests}
            yield ChatMessage("assistant", _optional_text(message.content, where), requests)
        elif message.role in CHAT_ROLES:
            yield ChatMessage(message.role, _text(message.content, f"{where}.content"))
        else:
            raise _invalid(f"{where}.role", "must be system, developer, user, assistant or tool")


def _stateless_messages(
    messages: list[Any],
) -> tuple[str, tuple[ChatMessage, ...], tuple[ToolRound, ...]]:
    """A stateless request's input (its last user message), the history before it and
    the tool exchange after it (the rounds of this turn: calls and their results)."""
    users = [index for index, message in enumerate(messages) if message.role == "user"]
    last = len(messages) - 1
    if not users or (messages[last].role != "tool" and users[-1] != last):
        raise _invalid(
            f"messages.{last}.role",
            "the last message must be the user's, or tool messages answering the calls before",
        )
    at = users[-1]
    text = _text(messages[at].content, f"messages.{at}.content")
    return text, tuple(_history(messages[:at])), _rounds(messages, at + 1)


def _rounds(messages: list[Any], start: int) -> tuple[ToolRound, ...]:
    """``messages[start:]`` as rounds: each an assistant message with ``tool_calls``
    followed by the ``tool`` messages that answer every one of its calls."""
    rounds: list[ToolRound] = []
    index = start
    while index < len(messages):
        where = f"messages.{index}"
        calling = messages[index]
        if calling.role != "assistant" or not calling.tool_calls:
            raise _invalid(f"{where}.role", "after the last user message come tool calls only")
        requests = tuple(_request(call) for call in calling.tool_calls)
        outputs: dict[str, str] = {}
        index += 1
        while index < len(messages) and messages[index].role == "tool":
            answer = messages[index]
            call_id = _call_id(answer, f"messages.{index}")
            outputs[call_id] = _text(answer.content, f"messages.{index}.content")
            index += 1
        if set(outputs) != {request.call_id for request in requests}:
            raise _invalid(f"{where}.tool_calls", "every call needs one tool message, and only it")
        replies = tuple(ToolReply(r.call_id, r.name, outputs[r.call_id]) for r in requests)
        rounds.append(ToolRound(_optional_text(calling.content, where), requests, replies))
    return tuple(rounds)


def _session_input(messages: list[Any]) -> TurnPayload:
    """A session's turn input: the last message (the user's), or the trailing ``tool``
    messages that continue its paused turn (everything before them is the app's copy of
    the history, ignored)."""
    last = len(messages) - 1
    if messages[last].role != "tool":
        if messages[last].role != "user":
            raise _invalid(
                f"messages.{last}.role",
                "the last message must be the user's, or tool messages answering a paused turn",
            )
        return UserText(_text(messages[last].content, f"messages.{last}.content"))
    first = last
    while first > 0 and messages[first - 1].role == "tool":
        first -= 1
    return ToolResults(
        tuple(
            ToolOutput(
                _call_id(messages[i], f"messages.{i}"),
                _text(messages[i].content, f"messages.{i}.content"),
            )
            for i in range(first, last + 1)
        )
    )


def _call_id(message: Any, where: str) -> str:
    if not message.tool_call_id:
        raise _invalid(f"{where}.tool_call_id", "is required on a tool message")
    return str(message.tool_call_id)


def _optional_text(content: Any, where: str) -> str:
    """An assistant message's text beside its tool calls (none is common)."""
    return "" if content is None or content == "" else _text(content, f"{where}.content")


def _request(call: Any) -> ToolRequest:
    """A tool call a client sends back as the model made it."""
    return tool_request(call.id, call.function.name, call.function.arguments, "arguments")


def app_tool_definitions(functions: Sequence[FunctionSpec]) -> tuple[ToolDefinition, ...]:
    """The app's functions (validated ``FunctionSpec``: both doors' bounds) as the model
    is offered them; ``422`` for a name used twice."""
    names = [function.name for function in functions]
    if len(set(names)) != len(names):
        raise _invalid("tools", "each tool needs a name of its own")
    return tuple(
        ToolDefinition(
            function.name,
            function.description,
            function.parameters or {"type": "object", "properties": {}},
        )
        for function in functions
    )


def _app_tools(request: Any) -> AppTools | None:
    """The app's own tools and how the model may call them (None: none offered);
    ``422`` for a name used twice, or a ``tool_choice`` that names no offered tool."""
    choice = request.tool_choice
    if not request.tools:
        if choice not in (None, "auto", "none"):
            raise _invalid("tool_choice", "asks for a tool call, but no tools are offered")
        return None
    definitions = app_tool_definitions([tool.function for tool in request.tools])
    names = [definition.name for definition in definitions]
    parallel = request.parallel_tool_calls
    if choice in (None, "auto"):
        return AppTools(definitions, ToolChoice("auto", None, parallel))
    if choice in ("none", "required"):
        return AppTools(definitions, ToolChoice(choice, None, parallel))
    if choice.function.name not in names:
        raise _invalid("tool_choice.function.name", "names no tool of tools")
    return AppTools(definitions, ToolChoice("function", choice.function.name, parallel))


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


CONVO_FIELDS = ("sessionId", "turn", "recorded", "withheld", "runId")


def convo_extension(result: TurnResult) -> dict[str, Any]:
    """The ``convo`` member: what the service did with the turn."""
    kept = result.to_json()
    return {name: kept[name] for name in CONVO_FIELDS}


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
        elif isinstance(item, AnswerDelta | AppToolCalls):
            if stamp is None:
                assert begun is not None  # a turn begins before its first event
                stamp = CompletionStamp.of(begun.reply_id, begun.created, model)
                yield first_line(stamp)
            if isinstance(item, AnswerDelta):
                yield delta_line(stamp, item.text)
            else:
                yield tool_call_lines(stamp, item.calls)
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
