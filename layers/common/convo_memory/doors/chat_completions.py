"""The OpenAI-compatible door: how it reads a ``/v1/chat/completions`` request and
writes its answers (``chat.completion``, ``chat.completion.chunk`` lines, ``/v1/models``).

The door reads a request into a ``TurnCommand`` (``read_chat_turn``), the turn edge
serves it (``convo_memory.edge.turn_edge``), and the door writes the ``TurnResult``:
``complete`` does the three for the HttpApi (``functions/predict``). The streaming
Function URL (``stream_door``) reads and writes with the same functions, so a request
gets the same answer through either; the HttpApi delivers a stream's lines all at once.

Which conversation: header ``X-Convo-Session-Id`` (a session by id), else
``X-Convo-Session-Key`` with the end user (header ``X-Convo-User``, for clients that
cannot set body fields, else the body's ``user``, else ``safety_identifier``) and optionally
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

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from convo_memory.domain import request_rules
from convo_memory.domain.generation import GenerationOptions
from convo_memory.domain.imported_history import imported_turns
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.tools import (
    AppTools,
    ToolRequest,
    ToolRound,
    tool_request,
)
from convo_memory.domain.turns import (
    ConversationTarget,
    SessionById,
    SessionByKey,
    SessionOwner,
    ToolOutput,
    ToolResults,
    TurnCommand,
    TurnPayload,
    UserText,
)
from convo_memory.doors.attachment_parts import stateless_history, user_content
from convo_memory.doors.chat_frames import chat_completion, chunk_frames, session_headers
from convo_memory.doors.openai_common import (
    EVENT_STREAM,
    JSON,
    SYSTEM_ROLES,
    app_tool_definitions,
    end_user_of,
    invalid,
    offered_tools,
    refuse_choice_without_tools,
    session_owner,
    tool_round,
)
from convo_memory.edge.errors import json_text
from convo_memory.edge.turn_edge import BufferedEvents

if TYPE_CHECKING:
    from convo_memory.api import ChatCompletionRequest
    from convo_memory.domain.turns import DoorId
    from convo_memory.edge.input_gate import GatedRequest
    from convo_memory.edge.turn_edge import TurnEdge

ROUTE = "POST /v1/chat/completions"
SESSION_ID_HEADER = "x-convo-session-id"
SESSION_KEY_HEADER = "x-convo-session-key"
SESSION_KEY = re.compile(r"[\x20-\x7e]{1,128}")
MAX_STOP_SEQUENCES = 4
MAX_STOP_CHARS = 256
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
    door: DoorId = "chat-stream-buffered" if command.stream else "chat"
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

    return chat_turn(request_rules.parse_model(ChatCompletionRequest, dict(body)), headers)


def chat_turn(request: ChatCompletionRequest, headers: Mapping[str, str]) -> ChatTurn:
    """The turn a chat-completions request (its body validated) and its headers ask for
    (``read_chat_turn``, whose refusals these are)."""
    _refuse_unsupported(request)
    request_rules.check_path_id("capabilityId", request.model)
    conversation = _conversation(request, {name.lower(): v for name, v in headers.items()})
    turn_input: TurnPayload
    history: tuple[ChatMessage, ...] = ()
    rounds: tuple[ToolRound, ...] = ()
    if conversation is None:
        # Stateless, the model sees the messages as given.
        turn_input, history, rounds = _stateless_messages(request.messages)
    else:
        # In a session, the session's own history stands in for the app's copy.
        turn_input = _session_input(request.messages)
        if isinstance(conversation, SessionByKey) and isinstance(turn_input, UserText):
            # (v4) ... except on the call that opens a key's session: its first turns.
            earlier = request.messages[:-1]
            conversation = replace(conversation, history=imported_turns(_said(earlier)))
    # An empty message is refused; an image or a file alone is a message (v5).
    if (
        isinstance(turn_input, UserText)
        and not turn_input.text.strip()
        and not turn_input.attachments
    ):
        users = [i for i, m in enumerate(request.messages) if m.role == "user"]
        raise invalid(f"messages.{users[-1] if users else 0}.content", "must not be empty")
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
        request_rules.check_path_id("sessionId", session_id)
        return SessionById(session_id, _owner(request, headers))
    assert session_key is not None
    if not SESSION_KEY.fullmatch(session_key):
        raise invalid("X-Convo-Session-Key", "must be 1-128 printable ASCII characters")
    owner = _owner(request, headers)
    if owner.external_ref is None:
        raise invalid(
            "user",
            "is required with X-Convo-Session-Key: your end user's id, as user, "
            "safety_identifier or the header X-Convo-User",
        )
    return SessionByKey(session_key, owner)


def _owner(request: Any, headers: Mapping[str, str]) -> SessionOwner:
    """Who the call says it is: its end user and its ``X-Convo-Principal``."""
    return session_owner(end_user_of(request.user, request.safety_identifier, headers), headers)


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
        raise invalid(name, f"is not supported ({why})")


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
    raise invalid(where, 'must be text: a string or a list of {"type": "text", "text"} parts')


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
                raise invalid(
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
        elif message.role == "user" and isinstance(message.content, list):
            text, attached = user_content(message.content, where)  # (v5) images, files
            yield ChatMessage("user", text, attachments=stateless_history(attached))
        elif message.role in CHAT_ROLES:
            yield ChatMessage(message.role, _text(message.content, f"{where}.content"))
        else:
            raise invalid(f"{where}.role", "must be system, developer, user, assistant or tool")


def _stateless_messages(
    messages: list[Any],
) -> tuple[UserText, tuple[ChatMessage, ...], tuple[ToolRound, ...]]:
    """A stateless request's input (its last user message), the history before it and
    the tool exchange after it (the rounds of this turn: calls and their results)."""
    users = [index for index, message in enumerate(messages) if message.role == "user"]
    last = len(messages) - 1
    if not users or (messages[last].role != "tool" and users[-1] != last):
        raise invalid(
            f"messages.{last}.role",
            "the last message must be the user's, or tool messages answering the calls before",
        )
    at = users[-1]
    given = UserText(*user_content(messages[at].content, f"messages.{at}"))
    return given, tuple(_history(messages[:at])), _rounds(messages, at + 1)


def _rounds(messages: list[Any], start: int) -> tuple[ToolRound, ...]:
    """``messages[start:]`` as rounds: each an assistant message with ``tool_calls``
    followed by the ``tool`` messages that answer every one of its calls."""
    rounds: list[ToolRound] = []
    index = start
    while index < len(messages):
        where = f"messages.{index}"
        calling = messages[index]
        if calling.role != "assistant" or not calling.tool_calls:
            raise invalid(f"{where}.role", "after the last user message come tool calls only")
        requests = tuple(_request(call) for call in calling.tool_calls)
        outputs: dict[str, str] = {}
        index += 1
        while index < len(messages) and messages[index].role == "tool":
            answer = messages[index]
            call_id = _call_id(answer, f"messages.{index}")
            outputs[call_id] = _text(answer.content, f"messages.{index}.content")
            index += 1
        exchanged = tool_round(_optional_text(calling.content, where), requests, outputs)
        if exchanged is None:
            raise invalid(f"{where}.tool_calls", "every call needs one tool message, and only it")
        rounds.append(exchanged)
    return tuple(rounds)


def _session_input(messages: list[Any]) -> TurnPayload:
    """A session's turn input: the last message (the user's), or the trailing ``tool``
    messages that continue its paused turn (everything before them is the app's copy of
    the history, ignored)."""
    last = len(messages) - 1
    if messages[last].role != "tool":
        if messages[last].role != "user":
            raise invalid(
                f"messages.{last}.role",
                "the last message must be the user's, or tool messages answering a paused turn",
            )
        return UserText(*user_content(messages[last].content, f"messages.{last}"))
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
        raise invalid(f"{where}.tool_call_id", "is required on a tool message")
    return str(message.tool_call_id)


def _optional_text(content: Any, where: str) -> str:
    """An assistant message's text beside its tool calls (none is common)."""
    return "" if content is None or content == "" else _text(content, f"{where}.content")


def _request(call: Any) -> ToolRequest:
    """A tool call a client sends back as the model made it."""
    return tool_request(call.id, call.function.name, call.function.arguments, "arguments")


def _app_tools(request: Any) -> AppTools | None:
    """The app's own tools and how the model may call them (None: none offered);
    ``422`` for a name used twice, or a ``tool_choice`` that names no offered tool."""
    choice = request.tool_choice
    if not request.tools:
        refuse_choice_without_tools(choice)
        return None
    definitions = app_tool_definitions([tool.function for tool in request.tools])
    mode, named = (
        (choice, None) if isinstance(choice, str | None) else ("function", choice.function.name)
    )
    return offered_tools(
        definitions, mode, named, request.parallel_tool_calls, "tool_choice.function.name"
    )


# -- answers -------------------------------------------------------------------------------
