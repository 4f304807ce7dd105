"""The Responses door (v4): how it reads a ``POST /v1/responses`` request into a
``TurnCommand`` and writes the answer (a Response, or its stream's events:
``response_frames``).

Which conversation (``response_binding``): ``conversation``, ``previous_response_id``,
(v5) the items the service minted that the request resends, else a new conversation
whose first turns are the ``user`` and ``assistant`` messages before the input; with
``store: false`` nothing is recorded. Its end user is header ``X-Convo-User``, else
``user``, else ``safety_identifier``, and its principal the header ``X-Convo-Principal``,
bound to a conversation by its first response.

In a conversation only the trailing user message is the turn's input; the items before it
are the app's copy of the history. ``instructions`` and the request's ``system`` and
``developer`` messages are added after the capability's instructions for this response
only. (v5) A user message's ``input_image`` and ``input_file`` parts are its attachments
(``doors.attachment_parts``). Audio parts, built-in tools and ``background: true`` are
refused (422 naming the field): this service answers text. (v5) ``text.format`` asks for
structured output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convo_memory.domain import request_rules
from convo_memory.domain.errors import ItemNotFound
from convo_memory.domain.generation import GenerationOptions
from convo_memory.domain.imported_history import ImportedTurn, imported_turns
from convo_memory.domain.item_ids import (
    place_of_call_id,
    place_of_function_call,
    place_of_item_id,
    place_of_message,
)
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.responses import ResponseSettings
from convo_memory.domain.tools import AppTools, ToolRound, tool_request
from convo_memory.domain.turns import (
    SessionById,
    SessionByItems,
    SessionByResponse,
    ToolOutput,
    ToolResults,
    TurnCommand,
    TurnPayload,
    UserText,
)
from convo_memory.doors.attachment_parts import (
    has_attached,
    text_only,
    user_content,
)
from convo_memory.doors.openai_common import (
    EVENT_STREAM,
    JSON,
    SYSTEM_ROLES,
    USER_HEADER,
    app_tool_definitions,
    invalid,
    offered_tools,
    refuse_choice_without_tools,
    tool_round,
)
from convo_memory.doors.response_binding import (
    InputItem,
    conversation_of,
    references_of,
    said_before,
)
from convo_memory.doors.response_frames import ResponseEcho, ResponseEvents, served_response
from convo_memory.edge.errors import json_text
from convo_memory.edge.turn_edge import BufferedEvents

if TYPE_CHECKING:
    from convo_memory.api import ConversationCreate, ConversationItemsAdd, ResponseCreate
    from convo_memory.domain.turns import DoorId
    from convo_memory.edge.input_gate import GatedRequest
    from convo_memory.edge.turn_edge import TurnEdge

ROUTE = "POST /v1/responses"
MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio"})
# Items an SDK resends that carry no text for the model: skipped.
SKIPPED_ITEMS = frozenset({"reasoning"})
# The longest call_id an app may send back (the service mints ones of at most 40).
MAX_CALL_ID_CHARS = 256


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

    return response_turn(request_rules.parse_model(ResponseCreate, dict(body)), headers)


def response_turn(request: ResponseCreate, headers: Mapping[str, str]) -> ResponseTurn:
    """The turn a Responses request (its body validated) and its headers ask for:
    ``422`` naming a field the door does not take, ``404`` for a response, conversation
    or item id none of ours could be."""
    _refuse_unsupported(request)
    request_rules.check_path_id("capabilityId", request.model)
    items = _items(request.input)
    at = _last_user_message(items)
    extra = [item.text for item in items if item.role in SYSTEM_ROLES]
    instructions = "\n\n".join(t for t in [request.instructions or "", *extra] if t) or None
    text_format = request.text.format if request.text is not None else None
    shown_format = text_format.shown() if text_format and text_format.type != "text" else None
    settings = ResponseSettings(
        chained=request.previous_response_id is not None,
        instructions=instructions,
        metadata=dict(request.metadata or {}),
        temperature=request.temperature,
        top_p=request.top_p,
        max_output_tokens=request.max_output_tokens,
        tool_choice=request.tool_choice,
        parallel_tool_calls=request.parallel_tool_calls,
        text_format=shown_format,
    )
    lowered = {name.lower(): value for name, value in headers.items()}

    def read_input(continues: bool) -> tuple[TurnPayload, tuple[ToolRound, ...]]:
        return _turn_input(items, at, continues)

    conversation = conversation_of(request, items, at, lowered, read_input)
    stored = request.store is not False
    in_place = stored and isinstance(conversation, SessionById | SessionByResponse | SessionByItems)
    turn_input, rounds = read_input(in_place)
    earlier = items[:at] if at is not None else ()
    command = TurnCommand(
        capability_id=request.model,
        conversation=conversation,
        input=turn_input,
        options=GenerationOptions(
            max_tokens=request.max_output_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            response_format=text_format.sent() if text_format else None,
            response_format_field="text.format",
        ),
        history=tuple(_chat_history(earlier, with_attachments=conversation is None)),
        stream=bool(request.stream),
        conversational_only=True,
        app_tools=_app_tools(request),
        rounds=rounds,
        response=settings,
        references=references_of(items),
        record=stored,
    )
    return ResponseTurn(command, _echo(request, settings, lowered))


def _echo(
    request: ResponseCreate, settings: ResponseSettings, headers: Mapping[str, str]
) -> ResponseEcho:
    """What the request's Response repeats of it."""
    return ResponseEcho(
        model=request.model,
        settings=settings,
        tools=tuple(request.tools or ()),
        previous_response_id=request.previous_response_id,
        store=request.store is not False,
        user=request.user if request.user is not None else headers.get(USER_HEADER),
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
    )


def _chat_history(earlier: Sequence[InputItem], with_attachments: bool) -> list[ChatMessage]:
    """What a stateless turn's model sees before the input: the user and assistant
    messages as given (system and developer ones join the instructions; a reference
    stands for the message it names, read by the serving path). ``with_attachments``:
    (v5) a stateless turn's history sends its images and files as given; a
    conversation's copy of its history is never decoded."""
    return said_before(earlier, with_attachments)


def conversation_history(request: ConversationCreate) -> tuple[ImportedTurn, ...]:
    """The items of ``POST /v1/conversations`` as the conversation's first turns (422
    naming a part that is not text)."""
    messages = [
        (item.role, message_text(item.content, f"items.{index}"))
        for index, item in enumerate(request.items or ())
    ]
    return imported_turns(messages)


def added_items(request: ConversationItemsAdd) -> list[tuple[str, str, str | None]]:
    """(v5) The items of ``POST /v1/conversations/{id}/items`` that are recorded: each
    user and assistant message's role, text and id (if it carried one); other items
    (calls, their outputs, references, reasoning) are accepted and not recorded. 422
    naming an item the door cannot read."""
    said = []
    for index, entry in enumerate(request.items):
        item = _item(entry, f"items.{index}")
        if item.kind == "message" and item.role in ("user", "assistant"):
            item_id = entry.get("id")
            said.append((item.role, item.text, item_id if isinstance(item_id, str) else None))
    return said


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
    if not text.strip() and not attached:
        where = given.where
        raise invalid(where if where == "input" else f"{where}.content", "must not be empty")
    return UserText(text, attached), _rounds(items[at + 1 :])


def _rounds(after: Sequence[InputItem]) -> tuple[ToolRound, ...]:
    """The items after the input as rounds: ``function_call`` items, then one
    ``function_call_output`` for each of them."""
    rounds: list[ToolRound] = []
    # References an SDK resends among them name what the app already holds: skipped.
    after = [item for item in after if item.kind not in ("item_reference", "reasoning")]
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
    offered = request_rules.parse_model(FunctionTools, {"tools": list(tools)}).tools
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
    if not isinstance(entry, Mapping):
        raise invalid(where, "must be an item (an object)")
    kind = entry.get("type")
    if kind is None and "role" in entry:
        kind = "message"
    if not isinstance(kind, str):
        raise invalid(f"{where}.type", "must be the item's type (a string)")
    if kind == "message":
        role = entry.get("role")
        if not isinstance(role, str) or role not in MESSAGE_ROLES:
            raise invalid(f"{where}.role", "must be user, assistant, system or developer")
        content = entry.get("content")
        place = place_of_message(_item_id(entry, where) or "")
        if role == "user" and has_attached(content):  # (v5) read when it is the input
            return InputItem(
                "message", where, "user", text_only(content), place=place, content=content
            )
        return InputItem("message", where, str(role), message_text(content, where), place=place)
    if kind == "function_call":
        call_id, name = _call_id(entry, where), entry.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(f"{where}.name", "is required on a function_call item")
        arguments = entry.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise invalid(f"{where}.arguments", "must be a string (the arguments as JSON)")
        place = place_of_function_call(_item_id(entry, where) or "") or place_of_call_id(call_id)
        return InputItem(
            "function_call", where, call_id=call_id, name=name, text=arguments or "", place=place
        )
    if kind == "function_call_output":
        output, call_id = entry.get("output"), _call_id(entry, where)
        text = output if isinstance(output, str) else message_text(output, f"{where}.output")
        place = place_of_call_id(call_id)
        return InputItem("function_call_output", where, call_id=call_id, text=text, place=place)
    if kind == "item_reference":
        return _reference(entry, where)
    if isinstance(kind, str) and kind in SKIPPED_ITEMS:
        return InputItem(kind, where)
    raise invalid(
        f"{where}.type",
        "is not supported: this service takes message, function_call, function_call_output "
        "and item_reference items",
    )


def _call_id(entry: Mapping[str, Any], where: str) -> str:
    call_id = entry.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.call_id", "is required: the id of the call, a string")
    if len(call_id) > MAX_CALL_ID_CHARS:
        raise invalid(
            f"{where}.call_id",
            f"is {len(call_id)} characters long; a call id has at most {MAX_CALL_ID_CHARS}",
        )
    return call_id


def _item_id(entry: Mapping[str, Any], where: str) -> str | None:
    item_id = entry.get("id")
    if item_id is not None and (not isinstance(item_id, str) or len(item_id) > 256):
        raise invalid(f"{where}.id", "must be a string of at most 256 characters")
    return item_id


def _reference(entry: Mapping[str, Any], where: str) -> InputItem:
    """An ``item_reference``: the id of an item the service minted (404 ``item_not_found``
    naming it for any other). Its role is its message's (a call's reference is none)."""
    item_id = _item_id(entry, where)
    if not item_id:
        raise invalid(f"{where}.id", "is required: the id of the item it refers to")
    place = place_of_item_id(item_id)
    if place is None:
        raise ItemNotFound(f"item {item_id!r} not found", param=f"{where}.id")
    role = "" if place_of_message(item_id) is None else ("user" if place.seq % 2 else "assistant")
    return InputItem("item_reference", where, role, place=place, reference=item_id)


def message_text(content: Any, where: str) -> str:
    """A message's text: a string, or text parts (``input_text``, ``output_text``); 422
    naming the part for an image, a file, audio or anything else."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise invalid(f"{where}.content", "must be a string or a list of text parts")
    texts = []
    for index, part in enumerate(content):
        # Any JSON may arrive here: only a part that is an object with a string type is one.
        kind = part.get("type") if isinstance(part, dict) else None
        kind = kind if isinstance(kind, str) else None  # typed: no input reaches a 5xx
        if kind in MEDIA_PARTS:
            raise invalid(
                f"{where}.content.{index}",
                f"is not supported ({kind}): this service answers text, from text",
            )
        text = None
        if isinstance(part, dict):
            text = part.get("refusal") if kind == "refusal" else part.get("text")
        if not (kind in TEXT_PARTS or kind == "refusal") or not isinstance(text, str):
            raise invalid(f"{where}.content.{index}", "must be a text part (input_text)")
        texts.append(text)
    return "\n".join(texts)


# -- what the door does not take --------------------------------------------------------------


def _refuse_unsupported(request: ResponseCreate) -> None:
    """``background: true`` and built-in tools (422 naming the field)."""
    if request.background:
        raise invalid("background", "is not supported: responses are answered as they are made")
    for index, tool in enumerate(request.tools or ()):
        kind = tool.get("type")
        if kind != "function":
            raise invalid(
                f"tools.{index}.type",
                f"is not supported ({kind}): built-in tools do not run here; offer function "
                "tools, which your app runs",
            )
