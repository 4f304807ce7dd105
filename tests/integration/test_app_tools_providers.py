"""The app's own tools on each remote provider type, through the tool loop: Bedrock
Converse against botocore's Stubber (exact request shapes: toolConfig and toolChoice,
toolUse, toolResult), and an OpenAI-compatible endpoint on 127.0.0.1 (tools,
tool_choice, parallel_tool_calls, tool_calls and tool messages, streamed too). A step
that calls the app's tool pauses the run; the continuation sends the model its calls
and the app's results."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber

from convo_memory.adapters.providers.bedrock import BedrockConverseProvider
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.tools import ToolCallContext, ToolChoice, ToolDefinition
from convo_memory.domain.turns import ToolOutput
from convo_memory.ports import ToolCallingModel
from convo_memory.services.agent_loop import AgentLoop, AgentRun, LoopStart
from tests.fakes.adapters import FakeToolbox
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.bedrock_events import bedrock_client
from tests.support.turns import app_tools

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
CONTEXT = ToolCallContext("ws_1", "cap_1", "ses_1", "run_1", None)
ASK = "Is get_weather good for a picnic in Paris?"
PROMPT = Prompt(system="Be brief.", messages=(ChatMessage("user", ASK),), user_input=ASK)
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}
WEATHER = app_tools("get_weather", choice=ToolChoice("required", None, False))


class TrackToolbox(FakeToolbox):
    """The agent's own tool, beside the app's."""

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        return (ToolDefinition("track", "Where a parcel is", SCHEMA),)


def run(model: ToolCallingModel, start: LoopStart | None = None, stream: bool = False) -> AgentRun:
    texts: list[str] = []
    return AgentLoop(monotonic=lambda: 0.0).run(
        model,
        TrackToolbox({"track": "in transit"}),
        PROMPT,
        context=CONTEXT,
        max_steps=5,
        deadline=25.0,
        app=WEATHER,
        start=start or LoopStart(),
        on_text=texts.append if stream else None,
    )


def continued(paused: AgentRun, *results: ToolOutput) -> LoopStart:
    """Where the continuation starts: the paused step answered with the app's results."""
    assert paused.pause is not None
    state = PendingTurn(
        "pause_1",
        1,
        "t0",
        "t0",
        "t9",
        ASK,
        PromptRecord(),
        None,
        paused.rounds,
        paused.pause.step,
        paused.pause.app_call_ids,
    )
    return LoopStart((*paused.rounds, state.answered(results)), paused.model_calls)


# -- Bedrock Converse ------------------------------------------------------------------------------

TOOL_CONFIG = {
    "tools": [
        {
            "toolSpec": {
                "name": "track",
                "description": "Where a parcel is",
                "inputSchema": {"json": SCHEMA},
            }
        },
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "the app's get_weather",
                "inputSchema": {"json": SCHEMA},
            }
        },
    ]
}
USER = {"role": "user", "content": [{"text": ASK}]}
USES: dict[str, Any] = {
    "role": "assistant",
    "content": [
        {"toolUse": {"toolUseId": "tu_1", "name": "track", "input": {"query": "12345"}}},
        {"toolUse": {"toolUseId": "tu_2", "name": "get_weather", "input": {"query": "Paris"}}},
    ],
}


def converse(*messages: dict[str, Any], choice: dict[str, Any] | None = None) -> dict[str, Any]:
    config = dict(TOOL_CONFIG) | ({"toolChoice": choice} if choice else {})
    return {
        "modelId": MODEL_ID,
        "messages": [USER, *messages],
        "system": [{"text": "Be brief."}],
        "toolConfig": config,
    }


def reply(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 3},
    }


def test_bedrock_pauses_on_the_apps_tool_use_and_continues_with_its_tool_result() -> None:
    client = bedrock_client()
    provider = BedrockConverseProvider(client, MODEL_ID)
    with Stubber(client) as stubber:
        stubber.add_response(
            "converse", reply(USES["content"], "tool_use"), converse(choice={"any": {}})
        )
        paused = run(provider)
        stubber.assert_no_pending_responses()

    assert paused.pause is not None and paused.pause.app_call_ids == ("tu_2",)
    # The agent's own tool ran first, in the same step.
    assert [r.output for r in paused.pause.step.replies] == ["in transit"]

    results = {
        "role": "user",
        "content": [
            {
                "toolResult": {
                    "toolUseId": "tu_1",
                    "content": [{"text": "in transit"}],
                    "status": "success",
                }
            },
            {
                "toolResult": {
                    "toolUseId": "tu_2",
                    "content": [{"text": "sunny"}],
                    "status": "success",
                }
            },
        ],
    }
    with Stubber(client) as stubber:
        stubber.add_response(
            "converse",
            reply([{"text": "Yes, sunny."}], "end_turn"),
            converse(USES, results, choice={"any": {}}),
        )
        done = run(provider, continued(paused, ToolOutput("tu_2", "sunny")))
        stubber.assert_no_pending_responses()

    assert (done.text, done.stop_reason, done.pause) == ("Yes, sunny.", "answered", None)


# -- an OpenAI-compatible endpoint -------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(tool_rule=True, reply="no tools asked for") as fake:
        yield fake


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "streamed"])
def test_an_openai_compatible_model_pauses_on_the_apps_tool_call_and_continues(
    server: FakeOpenAIServer, stream: bool
) -> None:
    server.requests.clear()
    provider = OpenAICompatibleProvider(server.base_url, "m")

    paused = run(provider, stream=stream)

    assert paused.pause is not None
    [request] = paused.pause.step.requests
    assert (request.name, dict(request.input)) == ("get_weather", {"query": ASK})
    first = server.requests[0].body
    assert [t["function"]["name"] for t in first["tools"]] == ["track", "get_weather"]
    assert (first["tool_choice"], first["parallel_tool_calls"]) == ("required", False)

    done = run(provider, continued(paused, ToolOutput(request.call_id, "sunny")), stream=stream)

    assert done.text == "Tool results: sunny" and done.pause is None
    second = server.requests[1].body
    assert second["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": request.call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": f'{{"query": "{ASK}"}}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": request.call_id, "content": "sunny"},
    ]
    # The app's choice applies to each request's first model call.
    assert second["tool_choice"] == "required"
