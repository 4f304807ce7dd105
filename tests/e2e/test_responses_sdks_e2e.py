"""The Responses door driven by the clients that speak it by default, end to end: Vercel's
AI SDK under Node (``generateText``, then ``streamText`` with ``previousResponseId``) and
the OpenAI Agents SDK on its default model (``OpenAIResponsesModel``) with a function
tool, by ``conversation_id`` and by ``previous_response_id``. One ``python -m
local_runtime`` serves them all; its capability's model is a fake OpenAI-compatible server
on 127.0.0.1 that uses the tools it is offered (it calls each one whose name occurs in the
user's message), and the docs' recipes run on the runtime's embedded model."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.docs_recipes import docs_block, recipe_output
from tests.support.node_scripts import NODE_DIR, node_command
from tests.support.runtime_process import FakeModelStack, shared_runtime_on

pytestmark = pytest.mark.e2e
REPLY = "Nice to meet you, Ada."
STREAMED = ["Your ", "name ", "is ", "Ada."]
STREAMED_TEXT = "".join(STREAMED)
ASK = "What does get_weather say about Oslo?"
DOCS_USER = "customer-4471"  # the docs' end user


class Stack(FakeModelStack):
    model: FakeOpenAIServer

    def transcript(self, session_id: str) -> list[tuple[str, str]]:
        messages = self.call("GET", f"/v1/sessions/{session_id}/messages")["messages"]
        return [(m["role"], m["content"]) for m in messages]

    def conversation_of(self, response_id: str) -> str:
        response = self.call("GET", f"/v1/responses/{response_id}")
        return str(response["convo"]["sessionId"])

    def sessions_of(self, end_user: str) -> dict[str, int]:
        """An end user's sessions: id to message count."""
        sessions = self.call("GET", f"/v1/sessions?externalRef={end_user}")["sessions"]
        return {s["id"]: s["messageCount"] for s in sessions}

    def sent_messages(self, index: int = -1) -> list[tuple[str, str]]:
        """The role and text content of each message the fake model was sent, by request."""
        messages = self.model.requests[index].body["messages"]
        return [(m["role"], str(m.get("content") or "")) for m in messages]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    model = FakeOpenAIServer(tool_rule=True, reply=REPLY, stream_chunks=STREAMED)
    capability_name = "assistant for the Responses SDKs"
    with shared_runtime_on(model, capability_name) as (runtime, token, [capability]):
        yield Stack(runtime, model, capability, token)


# --- Vercel's AI SDK ---------------------------------------------------------------------


def test_the_ai_sdk_chains_generate_stream_and_a_tool_loop_by_previous_response_id(
    stack: Stack,
) -> None:
    user, first, second = "e2e-ai-sdk-user", "Hi, my name is Ada.", "What is my name?"
    env = {"CONVO_BASE_URL": stack.runtime.base_url, "CONVO_TOKEN": stack.token}
    prompts = [first, second, ASK]
    command = [*node_command("responses_chain.mjs"), stack.capability, user, *prompts]

    [line] = recipe_output(command, env, NODE_DIR)

    out = json.loads(line)
    generated, streamed = out["generated"], out["streamed"]
    assert (generated["text"], generated["finishReason"]) == (REPLY, "stop")
    assert (streamed["errors"], streamed["finishReason"]) == ([], "stop")
    assert "".join(streamed["deltas"]) == STREAMED_TEXT
    tool_loop = out["toolLoop"]
    assert tool_loop["steps"] == ["tool-calls", "stop"]
    assert tool_loop["toolResults"] == ["Foggy in Oslo"]
    assert tool_loop["text"] == "Tool results: Foggy in Oslo"
    # The chain remembers: the streamed turn's prompt holds the first exchange, and the
    # tool loop's first step both earlier ones (the model's last calls: stream, loop, loop).
    exchanges = [("user", first), ("assistant", REPLY), ("user", second)]
    assert stack.sent_messages(-3)[-3:] == exchanges
    assert stack.sent_messages(-2)[-5:] == [*exchanges, ("assistant", STREAMED_TEXT), ("user", ASK)]
    # Each turn recorded once, in one conversation, the stream's answer whole.
    session_id = stack.conversation_of(generated["responseId"])
    assert stack.conversation_of(streamed["responseId"]) == session_id
    assert stack.conversation_of(tool_loop["responseId"]) == session_id
    assert stack.transcript(session_id) == [
        ("user", first),
        ("assistant", REPLY),
        ("user", second),
        ("assistant", STREAMED_TEXT),
        ("user", ASK),
        ("assistant", "Tool results: Foggy in Oslo"),
    ]
    continued = stack.call("GET", f"/v1/responses/{streamed['responseId']}")
    assert continued["previous_response_id"] == generated["responseId"]
    # Refusals raise the SDK's APICallError with the service's error, and change nothing.
    refusals = out["refusals"]
    assert refusals["unknownModel"]["statusCode"] == 404
    assert refusals["unknownModel"]["data"]["error"]["code"] == "capability_not_found"
    assert refusals["anotherEndUser"]["statusCode"] == 409
    assert refusals["anotherEndUser"]["data"]["error"]["code"] == "external_ref_immutable"
    assert stack.sessions_of(user) == {session_id: 6}


# --- The OpenAI Agents SDK on its default model (OpenAIResponsesModel) -------------------


@pytest.fixture(scope="module")
def event_loop_runner() -> Iterator[asyncio.Runner]:
    """One event loop for the module's runs: the SDK's default client is bound to it."""
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(scope="module")
def weather_agent(stack: Stack) -> Callable[..., Any]:
    """An Agent with one function tool, ``get_weather``, that answers each call with the
    next of the given weathers, on the SDK's default model, whose default client is the
    local runtime's door."""
    from agents import (
        Agent,
        ModelSettings,
        function_tool,
        set_default_openai_client,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # the SDK would export traces to OpenAI
    set_default_openai_client(openai.AsyncOpenAI(base_url=stack.base_url, api_key=stack.token))

    def agent(*weathers: str) -> Any:
        answers = iter(weathers)

        @function_tool
        def get_weather(query: str) -> str:
            """The weather in a city."""
            return next(answers)

        return Agent(
            name="weather",
            instructions="Answer with the weather.",
            tools=[get_weather],
            model=stack.capability,
            model_settings=ModelSettings(extra_body={"safety_identifier": "e2e-agents-user"}),
        )

    return agent


def run_agent(loop: asyncio.Runner, agent: Any, text: str, **chain: Any) -> Any:
    from agents import Runner

    return loop.run(Runner.run(agent, text, **chain))


def stream_agent(loop: asyncio.Runner, agent: Any, text: str, **chain: Any) -> tuple[str, Any]:
    """A streamed run: the text of its ``response.output_text.delta`` events, and the run."""
    from agents import Runner
    from openai.types.responses import ResponseTextDeltaEvent

    async def streamed() -> tuple[str, Any]:
        run, deltas = Runner.run_streamed(agent, text, **chain), []
        async for event in run.stream_events():
            if event.type == "raw_response_event" and isinstance(
                event.data, ResponseTextDeltaEvent
            ):
                deltas.append(event.data.delta)
        return "".join(deltas), run

    return loop.run(streamed())


AGAIN = "Thanks! Is that still so?"
# The fake model calls get_weather again on AGAIN: the replayed digest of the first turn's
# call, which comes with the new input, names the tool.
TWO_TOOL_TURNS = [
    ("user", ASK),
    ("assistant", "Tool results: Snowing in Oslo"),
    ("user", AGAIN),
    ("assistant", "Tool results: Still snowing in Oslo"),
]


def assert_the_second_turn_remembers_the_first(stack: Stack, first_request: int) -> None:
    """The second turn's first model call was sent the first turn and its tool's result."""
    sent = stack.sent_messages(first_request)
    assert sent[-3:-1] == [("user", ASK), ("assistant", "Tool results: Snowing in Oslo")]
    role, text = sent[-1]
    assert role == "user" and text.endswith(AGAIN)
    assert "-> Snowing in Oslo" in text  # the first turn's tool digest, fenced as data


def test_the_agents_sdk_runs_its_tool_in_a_conversation_and_remembers(
    stack: Stack, weather_agent: Callable[..., Any], event_loop_runner: asyncio.Runner
) -> None:
    agent = weather_agent("Snowing in Oslo", "Still snowing in Oslo")
    conversation = openai.OpenAI(
        base_url=stack.base_url, api_key=stack.token
    ).conversations.create()

    first = run_agent(event_loop_runner, agent, ASK, conversation_id=conversation.id)

    assert first.final_output == "Tool results: Snowing in Oslo"
    assert ("tool", "Snowing in Oslo") in stack.sent_messages()  # the tool's result, sent
    calls_before = len(stack.model.requests)
    text, second = stream_agent(event_loop_runner, agent, AGAIN, conversation_id=conversation.id)

    # Streamed, the call pauses and continues as well; the deltas make the answer.
    assert text == second.final_output == "Tool results: Still snowing in Oslo"
    assert_the_second_turn_remembers_the_first(stack, calls_before)
    assert stack.transcript(conversation.id) == TWO_TOOL_TURNS


def test_the_agents_sdk_chains_runs_by_previous_response_id(
    stack: Stack, weather_agent: Callable[..., Any], event_loop_runner: asyncio.Runner
) -> None:
    agent = weather_agent("Snowing in Oslo", "Still snowing in Oslo")
    before = set(stack.sessions_of("e2e-agents-user"))
    # The first run chains its own calls too (its tool's result continues its pause).
    first = run_agent(event_loop_runner, agent, ASK, auto_previous_response_id=True)
    calls_before = len(stack.model.requests)
    second = run_agent(event_loop_runner, agent, AGAIN, previous_response_id=first.last_response_id)

    assert first.final_output == "Tool results: Snowing in Oslo"
    assert second.final_output == "Tool results: Still snowing in Oslo"
    assert_the_second_turn_remembers_the_first(stack, calls_before)
    session_id = stack.conversation_of(first.last_response_id)
    assert stack.conversation_of(second.last_response_id) == session_id
    assert stack.transcript(session_id) == TWO_TOOL_TURNS
    assert set(stack.sessions_of("e2e-agents-user")) - before == {session_id}  # only it


# --- The docs' recipes, as written, on the embedded model ---------------------------------


def recipe_env(stack: Stack) -> dict[str, str]:
    return {"CONVO_BASE_URL": stack.runtime.base_url, "CONVO_TOKEN": stack.token}


def opened_since(stack: Stack, before: dict[str, int]) -> list[int]:
    """The message counts of the docs' end user's sessions opened since ``before``."""
    return sorted(n for id_, n in stack.sessions_of(DOCS_USER).items() if id_ not in before)


def test_the_docs_agents_sdk_recipe_runs_as_written(stack: Stack, tmp_path: Path) -> None:
    (code,) = docs_block("agents-sdk-example", ("python",))
    (tmp_path / "example.py").write_text(code)
    before = stack.sessions_of(DOCS_USER)

    tool_turn, remembered = recipe_output(
        [sys.executable, "example.py"], recipe_env(stack), tmp_path
    )

    assert tool_turn.startswith('You said: "What does get_weather say about Paris?".')
    assert 'I used get_weather: "Sunny, 24C".' in tool_turn
    # (v5) The second run resent the first's items: the second turn of the same one.
    assert remembered.startswith('You said: "What did it say?". I remember 2 earlier messages.')
    assert opened_since(stack, before) == [4]  # one conversation, each turn once


def test_the_docs_ai_sdk_recipe_runs_as_written(stack: Stack, tmp_path: Path) -> None:
    (code,) = docs_block("ai-sdk-example", ("js",))
    (tmp_path / "example.mjs").write_text(code)
    (tmp_path / "node_modules").symlink_to(NODE_DIR / "node_modules")  # the pinned packages
    before = stack.sessions_of(DOCS_USER)

    lines = recipe_output(node_command("example.mjs"), recipe_env(stack), tmp_path)

    assert lines == [
        'You said: "Hi, my name is Ada.". I remember 0 earlier messages.',
        'You said: "What is my name?". I remember 2 earlier messages.',
    ]
    assert opened_since(stack, before) == [4]
