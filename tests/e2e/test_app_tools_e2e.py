"""Agents that run their own tools, through the OpenAI-compatible door, end to end: the
real ``openai`` package's tool loop, LangChain's ``ChatOpenAI.bind_tools`` and the OpenAI
Agents SDK (``OpenAIChatCompletionsModel``) against ``python -m local_runtime``, whose
capability's model is a fake OpenAI-compatible server on 127.0.0.1 that uses the tools
it is offered (it calls each one whose name occurs in the user's message)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import OpenAI
from openai.types.chat import ChatCompletionChunk, ChatCompletionFunctionToolParam

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.chat_door import WEATHER_TOOL
from tests.support.docs_recipes import docs_block, recipe_output
from tests.support.runtime_process import FakeModelStack, shared_runtime_on

pytestmark = pytest.mark.e2e
ASK = "What does get_weather say about Paris?"
WEATHER = cast("ChatCompletionFunctionToolParam", WEATHER_TOOL)


class Stack(FakeModelStack):
    model: FakeOpenAIServer

    def client(self, key: str | None = None) -> OpenAI:
        headers = {"X-Convo-Session-Key": key} if key else None
        return OpenAI(base_url=self.base_url, api_key=self.token, default_headers=headers)

    def session_of(self, user: str) -> str:
        [session] = self.call("GET", f"/v1/sessions?externalRef={user}")["sessions"]
        return str(session["id"])

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/v1/sessions/{session_id}/messages")["messages"])


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    model = FakeOpenAIServer(tool_rule=True, reply="(no tool needed)")
    capability_name = "assistant with the app's tools"
    with shared_runtime_on(model, capability_name) as (runtime, token, [capability]):
        yield Stack(runtime, model, capability, token)


def test_the_openai_sdks_tool_loop_pauses_continues_and_is_remembered(stack: Stack) -> None:
    client, user = stack.client("e2e-sdk"), "e2e-sdk-user"
    messages: list[Any] = [{"role": "user", "content": ASK}]

    paused = client.chat.completions.create(
        model=stack.capability, messages=messages, tools=[WEATHER], user=user
    )

    choice = paused.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    session_id = stack.session_of(user)
    pending = stack.call("GET", f"/v1/sessions/{session_id}/context")["pendingTurn"]
    assert pending["userSeq"] == 1 and [c["id"] for c in pending["toolCalls"]] == [call.id]

    messages.append(choice.message.model_dump(exclude_none=True))
    wrong = [*messages, {"role": "tool", "tool_call_id": "call_unknown", "content": "x"}]
    with pytest.raises(openai.ConflictError) as refused:
        client.chat.completions.create(
            model=stack.capability, messages=wrong, tools=[WEATHER], user=user
        )
    assert refused.value.code == "tool_calls_mismatch"

    messages.append({"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24C in Paris"})
    answer = client.chat.completions.create(
        model=stack.capability, messages=messages, tools=[WEATHER], user=user
    )

    assert answer.choices[0].message.content == "Tool results: Sunny, 24C in Paris"
    assert [(m["role"], m["content"]) for m in stack.transcript(session_id)] == [
        ("user", ASK),
        ("assistant", "Tool results: Sunny, 24C in Paris"),
    ]
    # A later turn is sent the tool's result, fenced as data, with its turn.
    client.chat.completions.create(
        model=stack.capability,
        messages=[{"role": "user", "content": "What was the temperature?"}],
        user=user,
    )
    sent = json.dumps(stack.model.requests[-1].body["messages"])
    assert 'kind=\\"tool-results\\"' in sent and "Sunny, 24C in Paris" in sent


def test_streamed_calls_arrive_as_chunks(stack: Stack) -> None:
    client, user = stack.client("e2e-stream"), "e2e-stream-user"
    stream: openai.Stream[ChatCompletionChunk] = client.chat.completions.create(
        model=stack.capability,
        messages=[{"role": "user", "content": ASK}],
        tools=[WEATHER],
        user=user,
        stream=True,
    )
    pieces, finish = [], None
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        pieces += list(delta.tool_calls or []) if delta else []
        finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish

    functions = [p.function for p in pieces if p.function is not None]
    assert finish == "tool_calls"
    assert pieces[0].id and functions[0].name == "get_weather"
    arguments = "".join(f.arguments or "" for f in functions)
    assert json.loads(arguments) == {"query": ASK}


def test_an_unanswered_pause_is_recorded_as_abandoned(stack: Stack) -> None:
    client, user = stack.client("e2e-abandon"), "e2e-abandon-user"
    client.chat.completions.create(
        model=stack.capability,
        messages=[{"role": "user", "content": ASK}],
        tools=[WEATHER],
        user=user,
    )
    client.chat.completions.create(
        model=stack.capability,
        messages=[{"role": "user", "content": "Never mind that."}],
        tools=[WEATHER],
        user=user,
    )

    messages = stack.transcript(stack.session_of(user))
    assert [(m["role"], m["abandoned"]) for m in messages] == [
        ("user", False),
        ("assistant", True),
        ("user", False),
        ("assistant", False),
    ]


def test_a_stateless_call_passes_tools_through_and_opens_nothing(stack: Stack) -> None:
    stack.model.requests.clear()
    answer = stack.client().chat.completions.create(
        model=stack.capability,
        messages=[{"role": "user", "content": ASK}],
        tools=[WEATHER],
        user="e2e-stateless-user",
    )

    assert answer.choices[0].finish_reason == "tool_calls"
    assert [t["function"]["name"] for t in stack.model.requests[-1].body["tools"]] == [
        "get_weather"
    ]
    assert stack.call("GET", "/v1/sessions?externalRef=e2e-stateless-user")["sessions"] == []


def test_langchain_bind_tools_runs_the_apps_tool_through_the_door(stack: Stack) -> None:
    @tool
    def get_weather(query: str) -> str:
        """The weather in a city."""
        return "Rainy in Lyon"

    llm = ChatOpenAI(
        base_url=stack.base_url,
        api_key=stack.token,
        model=stack.capability,
        default_headers={"X-Convo-Session-Key": "e2e-langchain-tools"},
        model_kwargs={"user": "e2e-langchain-tools-user"},
    ).bind_tools([get_weather])
    history: list[Any] = [HumanMessage("Ask get_weather about Lyon.")]

    called = llm.invoke(history)
    [call] = called.tool_calls
    history += [called, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    answer = llm.invoke(history)

    assert answer.content == "Tool results: Rainy in Lyon"
    messages = stack.transcript(stack.session_of("e2e-langchain-tools-user"))
    assert [m["content"] for m in messages] == [
        "Ask get_weather about Lyon.",
        "Tool results: Rainy in Lyon",
    ]


def test_the_openai_agents_sdk_runs_its_tools_through_the_door(stack: Stack) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # the SDK would export traces to OpenAI

    @function_tool
    def get_weather(query: str) -> str:
        """The weather in a city."""
        return "Snowing in Oslo"

    client = openai.AsyncOpenAI(
        base_url=stack.base_url,
        api_key=stack.token,
        default_headers={"X-Convo-Session-Key": "e2e-agents-sdk"},
    )
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=OpenAIChatCompletionsModel(model=stack.capability, openai_client=client),
        model_settings=ModelSettings(extra_body={"user": "e2e-agents-sdk-user"}),
    )

    result = Runner.run_sync(agent, "Use get_weather for Oslo.")

    assert result.final_output == "Tool results: Snowing in Oslo"
    messages = stack.transcript(stack.session_of("e2e-agents-sdk-user"))
    assert [m["content"] for m in messages] == [
        "Use get_weather for Oslo.",
        "Tool results: Snowing in Oslo",
    ]


def test_the_docs_tool_loop_runs_as_written_on_the_embedded_model(
    stack: Stack, tmp_path: Path
) -> None:
    (code,) = docs_block("app-tools-example", ("python",))
    (tmp_path / "example.py").write_text(code)
    env = {"CONVO_BASE_URL": stack.runtime.base_url, "CONVO_TOKEN": stack.token}

    answer, turn = recipe_output([sys.executable, "example.py"], env, tmp_path)

    assert answer.startswith('You said: "What does get_weather say about Paris?".')
    assert 'I used get_weather: "Sunny, 24C".' in answer
    assert turn == "turn {'assistantSeq': 2, 'userSeq': 1}"
