"""The Responses door end to end: OpenAI's own Python SDK (``responses.*``,
``conversations.*``) against ``python -m local_runtime``, whose capability's model is a
fake OpenAI-compatible server on 127.0.0.1 (it calls each of the app's tools whose name
occurs in the user's message, and reports token usage with a cached part). One runtime
for the module; each test keeps to its own end user, so they do not see each other."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import openai
import pytest
from openai import OpenAI

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.runtime_process import FakeModelStack, shared_runtime_on

if TYPE_CHECKING:
    from openai.types.responses import FunctionToolParam

pytestmark = pytest.mark.e2e
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 9,
    "total_tokens": 129,
    "prompt_tokens_details": {"cached_tokens": 64},
}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}
WEATHER = cast("FunctionToolParam", WEATHER_TOOL)
ASK = "What does get_weather say about Paris?"


@dataclass
class Stack(FakeModelStack):
    model: FakeOpenAIServer
    other: str
    down: str

    def client(self) -> OpenAI:
        return OpenAI(base_url=self.base_url, api_key=self.token, max_retries=0)

    def transcript(self, session_id: str) -> list[tuple[str, str]]:
        messages = self.call("GET", f"/v1/sessions/{session_id}/messages")["messages"]
        return [(m["role"], m["content"]) for m in messages]

    def sent(self) -> str:
        """What the model was sent last, as text."""
        return json.dumps(self.model.requests[-1].body["messages"])


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # A model that breaks off its stream after its first piece, with a line it cannot read.
    broken_stream = 'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\ndata: {oops\n\n'
    model = FakeOpenAIServer(tool_rule=True, reply="Noted.", usage=USAGE)
    broken = FakeOpenAIServer(stream_raw=broken_stream)
    capabilities = shared_runtime_on(model, "e2e", "another", more=[("down", broken)])
    with capabilities as (runtime, token, [capability, other, down]):
        yield Stack(runtime, model, capability, token, other, down)


def test_a_chain_remembers_and_each_turn_is_recorded_once(stack: Stack) -> None:
    client = stack.client()
    first = client.responses.create(
        model=stack.capability, input="My name is Ada.", safety_identifier="e2e-chain"
    )
    assert first.status == "completed" and first.output_text == "Noted."
    assert first.conversation is not None
    usage = first.usage
    assert usage is not None and usage.input_tokens == 120 and usage.output_tokens == 9
    assert usage.input_tokens_details.cached_tokens == 64

    second = client.responses.create(
        model=stack.capability, input="What is my name?", previous_response_id=first.id
    )

    assert "My name is Ada." in stack.sent()
    assert second.previous_response_id == first.id
    assert second.conversation is not None and second.conversation.id == first.conversation.id
    assert stack.transcript(first.conversation.id) == [
        ("user", "My name is Ada."),
        ("assistant", "Noted."),
        ("user", "What is my name?"),
        ("assistant", "Noted."),
    ]
    again = client.responses.retrieve(second.id)
    assert (again.id, again.output_text, again.previous_response_id) == (
        second.id,
        "Noted.",
        first.id,
    )
    items = client.responses.input_items.list(second.id, order="asc")
    dumped = [item.model_dump() for item in items.data]
    texts = [(item["role"], item["content"][0]["text"]) for item in dumped]
    assert texts == [
        ("user", "My name is Ada."),
        ("assistant", "Noted."),
        ("user", "What is my name?"),
    ]


def test_answering_an_earlier_response_forks_without_mixing_branches(stack: Stack) -> None:
    client = stack.client()
    root = client.responses.create(model=stack.capability, input="Plan a trip to Rome.")
    client.responses.create(
        model=stack.capability, input="Make it about food.", previous_response_id=root.id
    )

    branch = client.responses.create(
        model=stack.capability, input="Make it about museums.", previous_response_id=root.id
    )

    assert "Make it about food." not in stack.sent() and "Plan a trip to Rome." in stack.sent()
    assert root.conversation is not None and branch.conversation is not None
    assert branch.conversation.id != root.conversation.id
    assert stack.transcript(branch.conversation.id) == [
        ("user", "Plan a trip to Rome."),
        ("assistant", "Noted."),
        ("user", "Make it about museums."),
        ("assistant", "Noted."),
    ]
    assert [m for m in stack.transcript(root.conversation.id) if m[0] == "user"] == [
        ("user", "Plan a trip to Rome."),
        ("user", "Make it about food."),
    ]


def test_a_new_conversation_records_the_history_it_was_sent(stack: Stack) -> None:
    response = stack.client().responses.create(
        model=stack.capability,
        input=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "I live in Oslo."},
            {"role": "assistant", "content": "Nice city."},
            {"role": "user", "content": "Where do I live?"},
        ],
    )

    assert "I live in Oslo." in stack.sent() and "Answer briefly." in stack.sent()
    assert response.conversation is not None
    assert stack.transcript(response.conversation.id) == [
        ("user", "I live in Oslo."),
        ("assistant", "Nice city."),
        ("user", "Where do I live?"),
        ("assistant", "Noted."),
    ]


def test_conversations_are_created_read_updated_listed_and_deleted(stack: Stack) -> None:
    client = stack.client()
    conversation = client.conversations.create(
        metadata={"topic": "pets"},
        items=[{"type": "message", "role": "user", "content": "I have a cat."}],
    )
    assert client.conversations.retrieve(conversation.id).metadata == {"topic": "pets"}
    updated = client.conversations.update(conversation.id, metadata={"topic": "cats"})
    assert updated.metadata == {"topic": "cats"}

    client.responses.create(
        model=stack.capability,
        input="What pet do I have?",
        conversation=conversation.id,
        safety_identifier="e2e-conversation",
    )

    assert "I have a cat." in stack.sent()
    newest_first = client.conversations.items.list(conversation.id)
    texts = [item.model_dump()["content"][0]["text"] for item in newest_first.data]
    assert texts == ["Noted.", "What pet do I have?", "", "I have a cat."]
    page = client.conversations.items.list(conversation.id, order="asc", limit=2)
    assert [item.model_dump()["role"] for item in page.data] == ["user", "assistant"]
    assert page.has_more
    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted and deleted.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)


def test_a_conversation_binds_its_model_and_end_user_and_refuses_others(stack: Stack) -> None:
    client = stack.client()
    conversation = client.conversations.create()
    client.responses.create(
        model=stack.capability, input="Hi.", conversation=conversation.id, user="e2e-bound"
    )

    with pytest.raises(openai.ConflictError) as model:
        client.responses.create(model=stack.other, input="Hi.", conversation=conversation.id)
    with pytest.raises(openai.ConflictError) as user:
        client.responses.create(
            model=stack.capability, input="Hi.", conversation=conversation.id, user="someone"
        )

    assert model.value.code == "session_capability_mismatch"
    assert user.value.code == "external_ref_immutable"
    session = stack.call("GET", f"/v1/sessions/{conversation.id}")
    assert (session["capabilityId"], session["externalRef"]) == (stack.capability, "e2e-bound")
    assert len(stack.transcript(conversation.id)) == 2


def test_store_false_keeps_nothing(stack: Stack) -> None:
    client = stack.client()

    response = client.responses.create(
        model=stack.capability, input="Just this once.", store=False, user="e2e-stateless"
    )

    assert response.output_text == "Noted." and response.conversation is None
    assert stack.call("GET", "/v1/sessions?externalRef=e2e-stateless")["sessions"] == []
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(response.id)
    assert missing.value.code == "response_not_found"


def test_a_deleted_response_goes_and_its_turn_stays(stack: Stack) -> None:
    client = stack.client()
    response = client.responses.create(model=stack.capability, input="Remember 42.")

    client.responses.delete(response.id)

    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(
            model=stack.capability, input="And?", previous_response_id=response.id
        )
    assert response.conversation is not None
    assert stack.transcript(response.conversation.id)[0] == ("user", "Remember 42.")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].image_url",
        ),
        ({"input": "Hi.", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "Hi.", "background": True}, "background"),
        ({"input": "Hi.", "conversation": "ses_x", "previous_response_id": "resp_x"}, None),
    ],
)
def test_refusals_raise_the_sdks_own_exceptions_naming_the_field(
    stack: Stack, fields: dict[str, Any], param: str | None
) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        stack.client().responses.create(model=stack.capability, **fields)

    assert refused.value.code == "validation_error"
    assert refused.value.param == (param or "previous_response_id")


def test_unknown_ids_are_not_found(stack: Stack) -> None:
    client = stack.client()
    with pytest.raises(openai.NotFoundError) as response:
        client.responses.create(
            model=stack.capability, input="Hi.", previous_response_id="resp_nothing"
        )
    with pytest.raises(openai.NotFoundError) as model:
        client.responses.create(model="cap-nothing", input="Hi.")

    assert response.value.code == "response_not_found"
    assert model.value.code == "capability_not_found"


def test_a_stream_sends_its_events_in_order(stack: Stack) -> None:
    with stack.client().responses.create(
        model=stack.capability, input="Stream it.", stream=True
    ) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    numbers = [event.sequence_number for event in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    dumped = [event.model_dump() for event in events]
    done = dumped[-1]["response"]
    deltas = "".join(e["delta"] for e in dumped if e["type"] == "response.output_text.delta")
    assert deltas == done["output"][0]["content"][0]["text"] == "Hello there!"
    assert kinds.count("response.output_text.delta") > 1  # as made, piece by piece
    assert done["id"] == dumped[0]["response"]["id"]
    conversation = done["conversation"]["id"]
    assert stack.transcript(conversation) == [("user", "Stream it."), ("assistant", deltas)]


def test_the_apps_function_tool_pauses_the_response_and_its_output_continues_it(
    stack: Stack,
) -> None:
    client = stack.client()
    paused = client.responses.create(
        model=stack.capability,
        input=ASK,
        tools=[WEATHER],
        user="e2e-tools",
    )
    [call] = paused.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"query": ASK}

    answer = client.responses.create(
        model=stack.capability,
        previous_response_id=paused.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"}],
        tools=[WEATHER],
    )

    assert answer.output_text == "Tool results: Sunny"
    assert paused.conversation is not None and answer.conversation is not None
    assert answer.conversation.id == paused.conversation.id
    assert stack.transcript(paused.conversation.id) == [
        ("user", ASK),
        ("assistant", "Tool results: Sunny"),
    ]


def test_a_streamed_pause_sends_the_function_call_events(stack: Stack) -> None:
    with stack.client().responses.create(
        model=stack.capability,
        input=ASK,
        tools=[WEATHER],
        stream=True,
    ) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    [call] = events[-1].model_dump()["response"]["output"]
    assert (call["type"], call["name"]) == ("function_call", "get_weather")


def test_the_apps_own_tool_exchange_without_a_conversation_is_passed_through(
    stack: Stack,
) -> None:
    answer = stack.client().responses.create(
        model=stack.capability,
        store=False,
        input=[
            {"role": "user", "content": ASK},
            {
                "type": "function_call",
                "call_id": "call_a",
                "name": "get_weather",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_a", "output": "Rain"},
        ],
        tools=[WEATHER],
    )

    assert answer.output_text == "Tool results: Rain"


def test_a_failure_after_the_stream_started_is_response_failed(stack: Stack) -> None:
    with stack.client().responses.create(
        model=stack.down, input="Anyone there?", stream=True
    ) as stream:
        events = [event.model_dump() for event in stream]

    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        # (v5) The open item is closed, with what was streamed, before the failure.
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "provider_error"
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert failed["output"] == [events[-2]["item"]]
    assert events[-2]["item"]["status"] == "incomplete"
    assert events[-2]["item"]["content"][0]["text"] == streamed
    assert failed["id"] == events[0]["response"]["id"]
    conversation = events[0]["response"]["conversation"]["id"]
    assert stack.transcript(conversation) == []  # nothing recorded


def test_the_chat_doors_first_call_on_a_new_key_records_the_history_it_brought(
    stack: Stack,
) -> None:
    client = stack.client().with_options(default_headers={"X-Convo-Session-Key": "e2e-adopt"})
    earlier: list[Any] = [
        {"role": "user", "content": "I am allergic to nuts."},
        {"role": "assistant", "content": "Noted, no nuts."},
    ]
    client.chat.completions.create(
        model=stack.capability,
        messages=[*earlier, {"role": "user", "content": "Suggest a snack."}],
        user="e2e-adopter",
    )
    assert "I am allergic to nuts." in stack.sent()

    answer = client.chat.completions.create(
        model=stack.capability,
        messages=[{"role": "user", "content": "Something else, from an older copy"}] * 2,
        user="e2e-adopter",
    )

    session_id = answer.model_dump()["convo"]["sessionId"]
    assert [text for _, text in stack.transcript(session_id)] == [
        "I am allergic to nuts.",
        "Noted, no nuts.",
        "Suggest a snack.",
        "Noted.",
        "Something else, from an older copy",
        "Noted.",
    ]
