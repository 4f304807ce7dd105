"""Every known field of the OpenAI-compatible doors is typed: a value of the wrong JSON
type anywhere is a 422 that names it, never a 5xx (the Responses door's ``text``, its
items' roles, types, parts, ``call_id`` and ``arguments``; a conversation's items)."""

from __future__ import annotations

from typing import Any

import pytest

from convo_memory.api import ConversationCreate
from convo_memory.domain import request_rules
from convo_memory.domain.errors import ValidationFailed
from convo_memory.doors import chat_completions
from convo_memory.doors import responses as responses_door


def refusal(body: dict[str, Any]) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as refused:
        responses_door.read_response_turn({"model": "cap", **body}, {})
    return refused.value


@pytest.mark.parametrize("text", [7, "x", [], True, 1.5])
def test_text_on_the_responses_door_is_an_object(text: Any) -> None:
    assert refusal({"input": "hi", "text": text}).param == "text"


@pytest.mark.parametrize(
    ("text", "param"),
    [({"format": 7}, "text.format"), ({"verbosity": "loud"}, "text.verbosity")],
)
def test_texts_known_members_are_typed(text: dict[str, Any], param: str) -> None:
    assert refusal({"input": "hi", "text": text}).param == param


def test_text_with_its_default_format_is_taken() -> None:
    turn = responses_door.read_response_turn(
        {"model": "cap", "input": "hi", "text": {"format": {"type": "text"}, "verbosity": "low"}},
        {},
    )
    assert turn.command.capability_id == "cap"


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "message", "role": "user", "content": [{"text": "", "type": {}}]}, "input.0"),
        ({"type": "message", "role": "user", "content": ["x"]}, "input.0"),
        ({"type": "message", "role": "user", "content": [7]}, "input.0"),
        ({"type": "message", "role": [], "content": "hi"}, "input.0.role"),
        ({"type": {}, "role": "user"}, "input.0.type"),
        ({"type": [], "content": "hi"}, "input.0.type"),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}, "input.0"),
        ({"type": "function_call_output", "call_id": 7, "output": "o"}, "input.0.call_id"),
    ],
)
def test_any_json_in_an_item_is_refused_naming_where(item: dict[str, Any], param: str) -> None:
    refused = refusal({"input": [item, {"role": "user", "content": "now"}]})
    assert refused.status == 422 and str(refused.param).startswith(param), refused


def test_an_over_long_call_id_says_how_long_it_may_be() -> None:
    item = {"type": "function_call_output", "call_id": "x" * 5000, "output": "o"}

    refused = refusal({"input": [item]})

    assert refused.param == "input.0.call_id"
    assert "5000 characters" in str(refused) and "at most 256" in str(refused)
    assert "required" not in str(refused)


def test_an_over_long_tool_call_id_on_the_chat_door_says_how_long_it_may_be() -> None:
    tool = {"role": "tool", "tool_call_id": "x" * 5000, "content": "r"}
    with pytest.raises(ValidationFailed) as refused:
        chat_completions.read_chat_turn({"model": "cap", "messages": [tool]}, {})
    assert "at most 256 characters" in str(refused.value)


def test_a_conversations_item_part_whose_type_is_an_object_is_refused() -> None:
    body = {"items": [{"content": [{"text": "", "type": {}}], "role": "user", "type": "message"}]}
    request = request_rules.parse_model(ConversationCreate, body)

    with pytest.raises(ValidationFailed) as refused:
        responses_door.conversation_history(request)

    assert refused.value.param == "items.0.content.0"
