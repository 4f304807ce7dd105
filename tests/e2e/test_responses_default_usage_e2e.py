"""The Responses door as its clients use it by default (v5), end to end with the real
packages and no per-SDK settings: the OpenAI Agents SDK's plain ``Runner.run`` with a
function tool and ``to_input_list()``, its ``OpenAIConversationsSession``, ``output_type``,
a handoff to an agent on another capability and a retried request; LangChain's
``ChatOpenAI(use_responses_api=True)`` resending its messages; ``openai``'s
``responses.parse``. One ``python -m local_runtime`` serves them all; its capabilities'
model is a fake OpenAI-compatible server on 127.0.0.1 that calls the tools it is offered
and answers JSON when asked for structured output."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from convo_memory.domain.responses import ResponseRef
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.docs_recipes import recipe_output
from tests.support.node_scripts import NODE_DIR, node_command
from tests.support.runtime_process import FakeModelStack, shared_runtime_on

pytestmark = pytest.mark.e2e
REPLY = "Noted."
ASK = "What does get_weather say about Oslo?"
AGAIN = "And tomorrow?"
FORECAST = {"city": "Oslo", "temperature": 3}


class Forecast(BaseModel):
    city: str
    temperature: int


SLOW = "Take your time."
slowed = threading.Event()


def answer_for(body: dict[str, Any]) -> str:
    """The fake model's answer: JSON of the forecast under structured output, else a note
    (the first time it is asked to take its time, after a second: past the client's
    timeout, so the client retries while the first request still runs)."""
    if body.get("response_format"):
        return json.dumps(FORECAST)
    if SLOW in str(body["messages"][-1].get("content")) and not slowed.is_set():
        slowed.set()
        time.sleep(1.0)
    return REPLY


@dataclass
class Stack(FakeModelStack):
    model: FakeOpenAIServer
    other: str  # a second capability on the same model (an agent's handoff target)

    def conversation_of(self, response_id: str) -> str:
        return str(self.call("GET", f"/v1/responses/{response_id}")["convo"]["sessionId"])

    def transcript(self, session_id: str) -> list[tuple[str, str]]:
        messages = self.call("GET", f"/v1/sessions/{session_id}/messages")["messages"]
        return [(m["role"], m["content"]) for m in messages]

    def context(self, session_id: str) -> Any:
        return self.call("GET", f"/v1/sessions/{session_id}/context")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    model = FakeOpenAIServer(tool_rule=True, reply=REPLY, respond=answer_for)
    with shared_runtime_on(model, "default A", "default B") as (runtime, token, caps):
        yield Stack(runtime, model, caps[0], token, caps[1])


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(scope="module")
def agents_sdk(stack: Stack) -> Any:
    """The Agents SDK with the runtime's door as its default client, tracing off."""
    import agents

    agents.set_tracing_disabled(True)  # the SDK would export traces to OpenAI
    agents.set_default_openai_client(
        openai.AsyncOpenAI(base_url=stack.base_url, api_key=stack.token)
    )
    return agents


def weather_agent(agents: Any, model: str, **settings: Any) -> Any:
    @agents.function_tool
    def get_weather(query: str) -> str:
        """The weather in a city."""
        return "Snowing in Oslo"

    return agents.Agent(
        name="weather", instructions="Answer.", tools=[get_weather], model=model, **settings
    )


# -- the Agents SDK ------------------------------------------------------------------------


def test_a_plain_run_with_a_tool_then_its_input_list_is_one_conversation(
    stack: Stack, agents_sdk: Any, loop: asyncio.Runner
) -> None:
    agent = weather_agent(agents_sdk, stack.capability)
    first = loop.run(agents_sdk.Runner.run(agent, ASK))
    history = [*first.to_input_list(), {"role": "user", "content": AGAIN}]

    second = loop.run(agents_sdk.Runner.run(agent, history))

    # Every response of both runs (the first one's pause too) names one conversation.
    responses = [r.response_id for r in (*first.raw_responses, *second.raw_responses)]
    named = [ResponseRef.parse(response_id) for response_id in responses]
    [session_id] = {ref.session_id for ref in named if ref is not None}
    assert stack.conversation_of(second.last_response_id) == session_id
    assert stack.transcript(session_id) == [
        ("user", ASK),
        ("assistant", "Tool results: Snowing in Oslo"),
        ("user", AGAIN),  # the fake model calls get_weather again: the digest names it
        ("assistant", "Tool results: Snowing in Oslo"),
    ]
    context = stack.context(session_id)
    assert context["pendingTurn"] is None
    # The first turn's tool result is in its digest (the second turn called it again).
    assert [d["seq"] for d in context["toolDigests"]] == [2, 4]
    assert "Snowing in Oslo" in context["toolDigests"][0]["text"]


def test_a_conversations_session_over_three_runs_holds_each_message_once(
    stack: Stack, agents_sdk: Any, loop: asyncio.Runner
) -> None:
    from agents.memory import OpenAIConversationsSession

    session = OpenAIConversationsSession()
    agent = agents_sdk.Agent(name="plain", instructions="Answer.", model=stack.capability)
    said = ["One.", "Two.", "Three."]

    for text in said:
        loop.run(agents_sdk.Runner.run(agent, text, session=session))

    conversation = loop.run(session._get_session_id())
    expected = [turn for text in said for turn in (("user", text), ("assistant", REPLY))]
    print(
        stack.transcript(conversation),
        [
            (r.method, r.body.get("input") if isinstance(r.body, dict) else None)
            for r in stack.model.requests[-3:]
        ],
    )
    assert stack.transcript(conversation) == expected


def test_an_agent_with_an_output_type_gets_its_parsed_object(
    stack: Stack, agents_sdk: Any, loop: asyncio.Runner
) -> None:
    agent = agents_sdk.Agent(
        name="forecaster", instructions="Forecast.", model=stack.capability, output_type=Forecast
    )

    result = loop.run(agents_sdk.Runner.run(agent, "Forecast for Oslo?"))

    assert result.final_output == Forecast(**FORECAST)
    sent = stack.model.requests[-1].body["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"]["type"] == "object"


def test_a_handoff_to_another_capability_answers_without_a_conflict(
    stack: Stack, agents_sdk: Any, loop: asyncio.Runner
) -> None:
    desk = weather_agent(agents_sdk, stack.other)
    front = agents_sdk.Agent(
        name="front", instructions="Hand over.", model=stack.capability, handoffs=[desk]
    )

    result = loop.run(agents_sdk.Runner.run(front, "Please transfer_to_weather now."))

    assert result.last_agent is desk and result.final_output
    first, last = result.raw_responses[0].response_id, result.last_response_id
    assert stack.conversation_of(first) != stack.conversation_of(last)


# -- a retry, LangChain, responses.parse ---------------------------------------------------


def test_a_retried_request_answers_the_same_turn_again_never_a_fork(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.base_url, api_key=stack.token)
    first = client.responses.create(model=stack.capability, input="Hi, I am Ada.")
    history: list[Any] = [
        {"role": "user", "content": "Hi, I am Ada."},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"role": "user", "content": "Who am I?"},
    ]
    calls = len(stack.model.requests)

    answered = client.responses.create(model=stack.capability, input=history)
    retried = client.responses.create(model=stack.capability, input=history)

    assert retried.id == answered.id and retried.output_text == answered.output_text
    assert len(stack.model.requests) == calls + 1  # the retry asked the model nothing
    session_id = stack.conversation_of(answered.id)
    assert session_id == stack.conversation_of(first.id)
    assert [text for _, text in stack.transcript(session_id)][::2] == ["Hi, I am Ada.", "Who am I?"]


def test_a_request_retried_after_a_timeout_is_one_turn_never_a_fork(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.base_url, api_key=stack.token)
    first = client.responses.create(model=stack.capability, input="Hi.")
    history: list[Any] = [
        {"role": "user", "content": "Hi."},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"role": "user", "content": SLOW},
    ]
    impatient = client.with_options(timeout=0.5, max_retries=3)

    answered = impatient.responses.create(model=stack.capability, input=history)

    assert slowed.is_set()  # the first attempt timed out: the SDK retried it
    session_id = stack.conversation_of(first.id)
    assert stack.conversation_of(answered.id) == session_id
    assert stack.transcript(session_id) == [
        ("user", "Hi."),
        ("assistant", REPLY),
        ("user", SLOW),
        ("assistant", REPLY),
    ]


def test_langchain_resending_its_messages_keeps_one_conversation(stack: Stack) -> None:
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(
        model=stack.capability, base_url=stack.base_url, api_key=stack.token, use_responses_api=True
    )
    messages: list[Any] = [HumanMessage("My name is Ada.")]
    messages.append(chat.invoke(messages))
    messages.append(HumanMessage("What is my name?"))

    last = chat.invoke(messages)

    first_id, last_id = messages[1].response_metadata["id"], last.response_metadata["id"]
    session_id = stack.conversation_of(first_id)
    assert stack.conversation_of(last_id) == session_id
    assert [role for role, _ in stack.transcript(session_id)] == ["user", "assistant"] * 2


def test_responses_parse_gets_its_parsed_object(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.base_url, api_key=stack.token)

    parsed = client.responses.parse(
        model=stack.capability, input="Forecast for Oslo?", text_format=Forecast
    )

    assert parsed.output_parsed == Forecast(**FORECAST)
    assert parsed.text.format.type == "json_schema"  # type: ignore[union-attr]


# -- Vercel's AI SDK under Node -------------------------------------------------------------


def test_the_ai_sdk_with_the_apps_messages_keeps_one_conversation_and_gets_objects(
    stack: Stack,
) -> None:
    env = {"CONVO_BASE_URL": stack.runtime.base_url, "CONVO_TOKEN": stack.token}
    command = [*node_command("responses_default.mjs"), stack.capability, ASK, AGAIN, "Oslo?"]

    [line] = recipe_output(command, env, NODE_DIR)

    out = json.loads(line)
    first, second = out["first"], out["second"]
    assert first["steps"] == ["tool-calls", "stop"]
    assert first["text"] == "Tool results: Foggy in Oslo"
    session_id = stack.conversation_of(first["responseId"])
    assert stack.conversation_of(second["responseId"]) == session_id
    transcript = stack.transcript(session_id)
    assert transcript[:3] == [("user", ASK), ("assistant", first["text"]), ("user", AGAIN)]
    assert len(transcript) == 4 and transcript[3] == ("assistant", second["text"])
    assert stack.context(session_id)["pendingTurn"] is None
    assert out["object"] == FORECAST
