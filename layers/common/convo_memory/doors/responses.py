"""The Responses door (v4): how it reads a ``POST /v1/responses`` request into a
``TurnCommand`` and writes the answer (a Response, or its stream's events:
``response_frames``).

Which conversation: ``conversation`` (a conversation's or any session's id),
``previous_response_id`` (the conversation of that stored response: a turn after it, in
a fork when it is not the newest), neither (a new conversation whose first turns are the
``user`` and ``assistant`` messages before the input), or ``store: false`` (stateless:
the model sees the items as given, nothing is recorded). Its end user is
``safety_identifier`` (else ``user``) and its principal the header ``X-Convo-Principal``,
bound to a conversation by its first response.

In a conversation only the trailing user message is the turn's input; the items before it
are the app's copy of the history. ``instructions`` and the request's ``system`` and
``developer`` messages are added after the capability's instructions for this response
only. (v5) A user message's ``input_image`` and ``input_file`` parts are its attachments
(``doors.attachment_parts``). Audio parts, built-in tools and ``background: true`` are
refused (422 naming the field): this service answers text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convo_memory.domain.errors import ResponseNotFound
from convo_memory.domain.generation import GenerationOptions
from convo_memory.domain.imported_history import ImportedTurn, imported_turns
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.responses import ResponseRef, ResponseSettings
from convo_memory.domain.tools import (
    AppTools,
    ToolRound,
    tool_request,
)
from convo_memory.domain.turns import (
    ConversationTarget,
    NewConversation,
    SessionById,
    SessionByResponse,
    SessionOwner,
    ToolOutput,
    ToolResults,
    TurnCommand,
    TurnPayload,
    UserText,
)
from convo_memory.doors.attachment_parts import (
    has_attached,
    history_attachments,
    text_only,
    user_content,
)
from convo_memory.doors.openai_common import (
    EVENT_STREAM,
    JSON,
    SYSTEM_ROLES,
    app_tool_definitions,
    check_end_user,
    invalid,
    offered_tools,
    refuse_choice_without_tools,
    session_owner,
    tool_round,
)
from convo_memory.doors.response_frames import ResponseEcho, ResponseEvents, served_response
from convo_memory.edge import input_gate
from convo_memory.edge.errors import json_text
from convo_memory.edge.turn_edge import BufferedEvents

if TYPE_CHECKING:
    from convo_memory.api import ConversationCreate, ResponseCreate
    from convo_memory.domain.turns import DoorId
    from convo_memory.edge.input_gate import GatedRequest
    from convo_memory.edge.turn_edge import TurnEdge

ROUTE = "POST /v1/responses"
MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio"})
# Items an SDK resends that carry no text for the model: skipped.
SKIPPED_ITEMS = frozenset({"reasoning", "item_reference"})


@dataclass(frozen=True)
class InputItem:
    """One item of ``input``: a message (its role and text), a ``function_call`` (its
    ``call_id``, ``name`` and arguments as ``text``), a ``function_call_output`` (its
    ``call_id`` and output as ``text``) or another kind of item; ``where`` names it in a
    refusal (``input.3``)."""

    kind: str
    where: str
    role: str = ""
    text: str = ""
    call_id: str = ""
    name: str = ""
    # (v5) A user message's content as sent: its attachments are read from it when it is
    # the turn's input (an app's copy of its history is never decoded).
    content: Any = None


@dataclass(frozen=True)
class ResponseTurn:
    """A Responses request: the turn it asks for, and what its Response repeats."""

    command: TurnCommand
    echo: ResponseEcho


@dataclass(frozen=True)
class ResponseAnswer:
    """What the HttpApi answers with: a Response (JSON) or its whole event stream."""

    content_type: str
    body: str


def create(edge: TurnEdge, request: GatedRequest, turn: ResponseTurn) -> ResponseAnswer:
    """``POST /v1/responses`` behind the HttpApi: the Response of the turn ``turn`` asks
    for, or with ``stream: true`` its events all at once."""
    command = turn.command
    events = BufferedEvents()
    door: DoorId = "responses-stream-buffered" if command.stream else "responses"
    result = edge.serve(door, request, command, events)
    if not command.stream:
        return ResponseAnswer(JSON, json_text(served_response(result, turn.echo)))
    frames = ResponseEvents(turn.echo).frames([*events, result])
    return ResponseAnswer(EVENT_STREAM, "".join(frames))


def read_response_turn(body: Mapping[str, Any], headers: Mapping[str, str]) -> ResponseTurn:
    """The turn a gated Responses body and its headers ask for (``response_turn``)."""
    from convo_memory.api import ResponseCreate

    return response_turn(input_gate.parse_model(ResponseCreate, dict(body)), headers)


def response_turn(request: ResponseCreate, headers: Mapping[str, str]) -> ResponseTurn:
    """The turn a Responses request (its body validated) and its headers ask for:
    ``422`` naming a field the door does not take, ``404`` for a response or
    conversation id none of ours could be."""
    _refuse_unsupported(request)
    input_gate.check_path_id("capabilityId", request.model)
    items = _items(request.input)
    at = _last_user_message(items)
    extra = [item.text for item in items if item.role in SYSTEM_ROLES]
    instructions = "\n\n".join(t for t in [request.instructions or "", *extra] if t) or None
    settings = ResponseSettings(
        chained=request.previous_response_id is not None,
        instructions=instructions,
        metadata=dict(request.metadata or {}),
        temperature=request.temperature,
        top_p=request.top_p,
        max_output_tokens=request.max_output_tokens,
        tool_choice=request.tool_choice,
        parallel_tool_calls=request.parallel_tool_calls,
    )
    lowered = {name.lower(): value for name, value in headers.items()}
    conversation = _conversation(request, items[:at] if at is not None else items, lowered)
    in_place = isinstance(conversation, SessionById | SessionByResponse)
    turn_input, rounds = _turn_input(items, at, continues=in_place)
    # Stateless alone: a conversation's history is the app's copy, never read (v5: nor
    # are its attachments decoded).
    earlier = items[:at] if at is not None and conversation is None else ()
    history = tuple(_chat_history(earlier))
    command = TurnCommand(
        capability_id=request.model,
        conversation=conversation,
        input=turn_input,
        options=GenerationOptions(
            max_tokens=request.max_output_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
        ),
        history=history,
        stream=bool(request.stream),
        conversational_only=True,
        app_tools=_app_tools(request),
        rounds=rounds,
        response=settings,
    )
    echo = ResponseEcho(
        model=request.model,
        settings=settings,
        tools=tuple(request.tools or ()),
        previous_response_id=request.previous_response_id,
        store=request.store is not False,
    )
    return ResponseTurn(command, echo)


# -- which conversation ---------------------------------------------------------------------


def _conversation(
    request: ResponseCreate, earlier: Sequence[InputItem], headers: Mapping[str, str]
) -> ConversationTarget:
    """``conversation``, ``previous_response_id``, a new conversation (with the messages
    before the input as its history), or none (``store: false``)."""
    named = request.conversation
    previous = request.previous_response_id
    if named is not None and previous is not None:
        raise invalid("previous_response_id", "cannot be used with conversation: name one")
    if request.store is False:
        if named is not None or previous is not None:
            field = "conversation" if named is not None else "previous_response_id"
            raise invalid("store", f"false is stateless: it takes no {field} (nothing is recorded)")
        return None
    owner = _owner(request, headers)
    if previous is not None:
        ref = ResponseRef.parse(previous)
        if ref is None:
            raise ResponseNotFound(f"response {previous!r} not found", param="previous_response_id")
        return SessionByResponse(ref, owner)
    if named is not None:
        session_id = named if isinstance(named, str) else named.id
        input_gate.check_path_id("sessionId", session_id)
        return SessionById(session_id, owner)
    messages = ((item.role, item.text) for item in earlier if item.kind == "message")
    return NewConversation(owner, imported_turns(messages))


def _owner(request: ResponseCreate, headers: Mapping[str, str]) -> SessionOwner:
    """Who the call says it is: ``safety_identifier`` (else ``user``) and
    ``X-Convo-Principal`` (checked by the rules a session is opened with; 422)."""
    end_user, field = request.safety_identifier, "safety_identifier"
    if end_user is None:
        end_user, field = request.user, "user"
    if end_user is not None:
        check_end_user(field, end_user)
    return session_owner(end_user, headers)


def _chat_history(earlier: Sequence[InputItem]) -> list[ChatMessage]:
    """What a stateless turn's model sees before the input: the user and assistant
    messages as given (system and developer ones join the instructions)."""
    return [
        ChatMessage(item.role, item.text, attachments=history_attachments(item.content, item.where))
        for item in earlier
        if item.kind == "message" and item.role not in SYSTEM_ROLES
    ]


def conversation_history(request: ConversationCreate) -> tuple[ImportedTurn, ...]:
    """The items of ``POST /v1/conversations`` as the conversation's first turns (422
    naming a part that is not text)."""
    messages = [
        (item.role, message_text(item.content, f"items.{index}"))
        for index, item in enumerate(request.items or ())
    ]
    return imported_turns(messages)


# -- the turn's input: a user message, or the app's tool results ---------------------------


def _last_user_message(items: Sequence[InputItem]) -> int | None:
    """Where the last user message is (None: there is none)."""
    found = [i for i, item in enumerate(items) if item.kind == "message" and item.role == "user"]
    return found[-1] if found else None


def _turn_input(
    items: Sequence[InputItem], at: int | None, continues: bool
) -> tuple[TurnPayload, tuple[ToolRound, ...]]:
    """The turn's input and the app's own tool exchange after it. In an existing
    conversation trailing ``function_call_output`` items continue its paused turn (the
    ``function_call`` items an SDK resends before them are ignored); otherwise the input is
    the last user message and the calls and outputs after it are this turn's rounds, as
    the app ran them."""
    last = items[-1]
    if continues and last.kind == "function_call_output":
        first = len(items)
        while first > 0 and items[first - 1].kind in ("function_call", "function_call_output"):
            first -= 1
        outputs = tuple(
            ToolOutput(item.call_id, item.text)
            for item in items[first:]
            if item.kind == "function_call_output"
        )
        return ToolResults(outputs), ()
    if at is None or (at != len(items) - 1 and continues):
        raise invalid(
            last.where,
            "must be the user's message (the turn's input), or function_call_output items "
            "answering a paused turn's calls",
        )
    given = items[at]
    text, attached = user_content(given.content, given.where) if given.content else (given.text, ())
    return UserText(text, attached), _rounds(items[at + 1 :])


def _rounds(after: Sequence[InputItem]) -> tuple[ToolRound, ...]:
    """The items after the input as rounds: ``function_call`` items, then one
    ``function_call_output`` for each of them."""
    rounds: list[ToolRound] = []
    index = 0
    while index < len(after):
        calls = []
        while index < len(after) and after[index].kind == "function_call":
            calls.append(after[index])
            index += 1
        outputs: dict[str, str] = {}
        while index < len(after) and after[index].kind == "function_call_output":
            outputs[after[index].call_id] = after[index].text
            index += 1
        requests = tuple(tool_request(c.call_id, c.name, c.text, "arguments") for c in calls)
        exchanged = tool_round("", requests, outputs) if calls else None
        if exchanged is None:
            where = (calls[0] if calls else after[min(index, len(after) - 1)]).where
            raise invalid(
                where,
                "after the user's message come function_call items, each answered by one "
                "function_call_output",
            )
        rounds.append(exchanged)
    return tuple(rounds)


def _app_tools(request: ResponseCreate) -> AppTools | None:
    """The app's function tools (``{type: "function", name, description, parameters}``)
    and how the model may call them: ``422`` naming the field for a tool beyond the chat
    door's bounds (the same checks: count, name, description, parameters), a name used
    twice, or a ``tool_choice`` that names no offered tool or asks for a call with none
    offered."""
    from convo_memory.api import FunctionTools

    choice = request.tool_choice
    tools = request.tools or ()
    if not tools:
        refuse_choice_without_tools(choice)
        return None
    offered = input_gate.parse_model(FunctionTools, {"tools": list(tools)}).tools
    definitions = app_tool_definitions(offered)
    parallel = request.parallel_tool_calls
    if choice is None or isinstance(choice, str):
        return offered_tools(definitions, choice, None, parallel, "tool_choice.name")
    if not isinstance(choice, dict) or choice.get("type") != "function":
        raise invalid("tool_choice", "must be auto, none, required or a function to call")
    named = choice.get("name")
    return offered_tools(
        definitions,
        "function",
        named if isinstance(named, str) else None,
        parallel,
        "tool_choice.name",
    )


# -- reading the items --------------------------------------------------------------------


def _items(raw: str | list[dict[str, Any]]) -> list[InputItem]:
    if isinstance(raw, str):
        return [InputItem("message", "input", "user", raw)]
    if not raw:
        raise invalid("input", "must not be empty: a string or a list of items")
    return [_item(entry, f"input.{index}") for index, entry in enumerate(raw)]


def _item(entry: Mapping[str, Any], where: str) -> InputItem:
    kind = entry.get("type")
    if kind is None and "role" in entry:
        kind = "message"
    if kind == "message":
        role = entry.get("role")
        if role not in MESSAGE_ROLES:
            raise invalid(f"{where}.role", "must be user, assistant, system or developer")
        content = entry.get("content")
        if role == "user" and has_attached(content):  # (v5) read when it is the input
            return InputItem("message", where, "user", text_only(content), content=content)
        return InputItem("message", where, str(role), message_text(content, where))
    if kind == "function_call":
        call_id, name = _call_id(entry, where), entry.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(f"{where}.name", "is required on a function_call item")
        arguments = entry.get("arguments")
        text = arguments if isinstance(arguments, str) else ""
        return InputItem("function_call", where, call_id=call_id, name=name, text=text)
    if kind == "function_call_output":
        output = entry.get("output")
        text = output if isinstance(output, str) else message_text(output, f"{where}.output")
        return InputItem("function_call_output", where, call_id=_call_id(entry, where), text=text)
    if kind in SKIPPED_ITEMS:
        return InputItem(str(kind), where)
    raise invalid(
        f"{where}.type",
        "is not supported: this service takes message, function_call and "
        "function_call_output items",
    )


def _call_id(entry: Mapping[str, Any], where: str) -> str:
    call_id = entry.get("call_id")
    if not isinstance(call_id, str) or not 1 <= len(call_id) <= 256:
        raise invalid(f"{where}.call_id", "is required: the id of the call it answers")
    return call_id


def message_text(content: Any, where: str) -> str:
    """A message's text: a string, or text parts (``input_text``, ``output_text``); 422
    naming the part for an image, a file, audio or anything else."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise invalid(f"{where}.content", "must be a string or a list of text parts")
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in MEDIA_PARTS:
            raise invalid(
                f"{where}.content.{index}",
                f"is not supported ({kind}): this service answers text, from text",
            )
        text = part.get("refusal") if kind == "refusal" else (part or {}).get("text")
        if not (kind in TEXT_PARTS or kind == "refusal") or not isinstance(text, str):
            raise invalid(f"{where}.content.{index}", "must be a text part (input_text)")
        texts.append(text)
    return "\n".join(texts)


# -- what the door does not take --------------------------------------------------------------


def _refuse_unsupported(request: ResponseCreate) -> None:
    """``background: true``, built-in tools and output formats other than text (422
    naming the field)."""
    extra = request.model_extra or {}
    if extra.get("background") not in (None, False):
        raise invalid("background", "is not supported: responses are answered as they are made")
    for index, tool in enumerate(request.tools or ()):
        kind = tool.get("type")
        if kind != "function":
            raise invalid(
                f"tools.{index}.type",
                f"is not supported ({kind}): built-in tools do not run here; offer function "
                "tools, which your app runs",
            )
    text_format = (
        (extra.get("text") or {}).get("format") if isinstance(extra.get("text"), dict) else None
    )
    if isinstance(text_format, dict) and text_format.get("type") not in (None, "text"):
        raise invalid("text.format", "is not supported: answers are text")
