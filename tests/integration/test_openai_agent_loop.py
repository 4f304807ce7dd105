"""The tool loop on an OpenAI-compatible endpoint: a fake chat-completions server on
127.0.0.1, streamed and not: a tool round then an answer, a tool error, the step bound,
and tool-call arguments that arrive in pieces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory.adapters.providers.openai_compat import (
    FINAL_ANSWER_REQUEST,
    OpenAICompatibleProvider,
)
from convo_memory.domain.generation import TokenUsage
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.tools import ToolCallContext, ToolDefinition, ToolOutcome
from convo_memory.services.agent_loop import AgentLoop, AgentRun
from tests.fakes.adapters import FakeToolbox
from tests.fakes.openai_server import FakeOpenAIServer, Turn

PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
CONTEXT = ToolCallContext("ws_1", "cap_1", None, "run_1", PRINCIPAL)
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
PROMPT = Prompt(
    system="Be brief.",
    messages=(ChatMessage("user", "Where is order 12345?"),),
    user_input="Where is order 12345?",
)
TOOLS = [
    {
        "type": "function",
        "function": {"name": "track", "description": "Where a parcel is", "parameters": SCHEMA},
    }
]
BASE_MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Where is order 12345?"},
]


class Toolbox(FakeToolbox):
    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        return (ToolDefinition("track", "Where a parcel is", SCHEMA),)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def run_loop(
    server: FakeOpenAIServer, toolbox: FakeToolbox, streamed: bool, **kwargs: Any
) -> tuple[AgentRun, list[str]]:
    provider = OpenAICompatibleProvider(server.base_url, "llama3.1", timeout=5)
    deltas: list[str] = []
    result = AgentLoop(monotonic=lambda: 0.0).run(
        provider,
        toolbox,
        PROMPT,
        context=CONTEXT,
        max_steps=kwargs.pop("max_steps", 5),
        deadline=25.0,
        on_text=deltas.append if streamed else None,
        **kwargs,
    )
    return result, deltas


def bodies(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [request.body for request in server.requests]


def call(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "track", "arguments": json.dumps(arguments)},
    }


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_round_then_an_answer(server: FakeOpenAIServer, streamed: bool) -> None:
    server.script = [
        Turn(tool_calls=[("call_a", "track", '{"query": "12345"}')]),
        Turn(content="It is on its way."),
    ]
    toolbox = Toolbox({"track": "in transit, ETA 2025-06-14"})

    result, deltas = run_loop(server, toolbox, streamed)

    assert [(c.name, c.input, c.context.principal) for c in toolbox.calls] == [
        ("track", {"query": "12345"}, PRINCIPAL)
    ]
    assert (result.text, result.model_calls, result.stop_reason) == (
        "It is on its way.",
        2,
        "answered",
    )
    first, second = bodies(server)
    assert first["tools"] == second["tools"] == TOOLS
    assert "tool_choice" not in first and first["stream"] is streamed
    assert second["messages"] == [
        *BASE_MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call("call_a", {"query": "12345"})]},
        {"role": "tool", "tool_call_id": "call_a", "content": "in transit, ETA 2025-06-14"},
    ]
    if streamed:
        assert len(deltas) > 1 and "".join(deltas) == result.text


def test_a_runs_usage_adds_up_what_each_call_reported(server: FakeOpenAIServer) -> None:
    server.script = [
        Turn(tool_calls=[("call_a", "track", '{"query": "12345"}')]),
        Turn(content="It is on its way."),
    ]
    # The second call's prompt is longer by the tool round, and reads the first from cache.
    server.usage_for = lambda body: {
        "prompt_tokens": 1100 * (len(body["messages"]) - 1),
        "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 1024 if len(body["messages"]) > 2 else 0},
    }

    result, _ = run_loop(server, Toolbox({"track": "in transit"}), streamed=False)

    assert result.usage == TokenUsage(1100 + 3300, 18, cached_input_tokens=1024)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_error_is_sent_back_and_the_turn_goes_on(
    server: FakeOpenAIServer, streamed: bool
) -> None:
    server.script = [
        Turn(tool_calls=[("c1", "track", '{"query": "1"}'), ("c2", "track", "not json")]),
        Turn(content="Tracking failed."),
    ]
    toolbox = Toolbox({"track": ToolOutcome("error", "the tool answered HTTP 502")})

    result, _ = run_loop(server, toolbox, streamed)

    assert len(toolbox.calls) == 1  # the call with unreadable arguments was not made
    assert [c.status for c in result.calls] == ["error", "error"]
    tool_messages = [m for m in bodies(server)[1]["messages"] if m["role"] == "tool"]
    assert tool_messages == [
        {"role": "tool", "tool_call_id": "c1", "content": "[error] the tool answered HTTP 502"},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "[error] the tool was not called: the model's tool arguments were not "
            "valid JSON",
        },
    ]
    assert result.text == "Tracking failed."


@pytest.mark.parametrize("streamed", [False, True])
def test_the_step_bound_asks_for_the_answer_without_tools(
    server: FakeOpenAIServer, streamed: bool
) -> None:
    server.script = [
        Turn(tool_calls=[("c1", "track", '{"query": "a"}')]),
        Turn(tool_calls=[("c2", "track", '{"query": "b"}')]),
        Turn(content="Here is what I found."),
    ]
    toolbox = Toolbox({"track": "x"})

    result, _ = run_loop(server, toolbox, streamed, max_steps=2)

    assert len(toolbox.calls) == 2
    assert (result.text, result.model_calls, result.stop_reason) == (
        "Here is what I found.",
        3,
        "step_bound",
    )
    final = bodies(server)[-1]
    assert final["tool_choice"] == "none" and final["tools"] == TOOLS
    assert final["messages"][-1] == {"role": "user", "content": FINAL_ANSWER_REQUEST}
    assert [m["role"] for m in final["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
    ]


def test_streamed_tool_calls_arrive_in_pieces_and_are_put_together(
    server: FakeOpenAIServer,
) -> None:
    server.piece_chars = 3
    arguments = '{"query": "where is my parcel, order 12345?"}'
    server.script = [
        Turn(
            content="One moment.",
            tool_calls=[("c1", "track", arguments), ("c2", "track", '{"query": "weather"}')],
        ),
        Turn(content="Done."),
    ]
    toolbox = Toolbox({"track": "ok"})

    result, deltas = run_loop(server, toolbox, streamed=True)

    assert [c.input for c in toolbox.calls] == [json.loads(arguments), {"query": "weather"}]
    assert result.text == "One moment.\n\nDone." == "".join(deltas)
    assistant = bodies(server)[1]["messages"][2]
    assert assistant["content"] == "One moment."
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
