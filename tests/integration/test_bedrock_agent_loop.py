"""The tool loop on Bedrock Converse, against botocore with its Stubber (exact request
shapes) and real event-stream bodies for ConverseStream: a tool_use round then an
answer, a tool error, the step bound, streamed tool input, and per-call timeouts."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from convo_memory.adapters.aws_clients import AwsClients, Patience
from convo_memory.adapters.providers.bedrock import FINAL_ANSWER_REQUEST, BedrockConverseProvider
from convo_memory.adapters.providers.factory import build_provider
from convo_memory.domain.connections import parse_connections
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.tools import ToolCallContext, ToolDefinition, ToolOutcome
from convo_memory.services.agent_loop import AgentLoop, AgentRun
from tests.fakes.adapters import FakeToolbox
from tests.support.bedrock_events import (
    bedrock_client,
    serve_streams,
    stop,
    text_delta,
    tool_input_delta,
    tool_use_start,
)

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
CONTEXT = ToolCallContext("ws_1", "cap_1", "ses_1", "run_1", PRINCIPAL)
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOL_CONFIG = {
    "tools": [
        {
            "toolSpec": {
                "name": "track",
                "description": "Where a parcel is",
                "inputSchema": {"json": SCHEMA},
            }
        }
    ]
}
PROMPT = Prompt(
    system="Be brief.",
    messages=(ChatMessage("user", "Where is order 12345?"),),
    user_input="Where is order 12345?",
)
USER = {"role": "user", "content": [{"text": "Where is order 12345?"}]}


class Toolbox(FakeToolbox):
    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        return (ToolDefinition("track", "Where a parcel is", SCHEMA),)


def tool_use_reply(*uses: tuple[str, dict[str, Any]], text: str = "") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"text": text}] if text else []
    content += [{"toolUse": {"toolUseId": i, "name": "track", "input": x}} for i, x in uses]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 12},
    }


def answer_reply(text: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 12},
    }


def request(*messages: dict[str, Any], tools: bool = True) -> dict[str, Any]:
    params: dict[str, Any] = {
        "modelId": MODEL_ID,
        "messages": [USER, *messages],
        "system": [{"text": "Be brief."}],
    }
    if tools:
        params["toolConfig"] = TOOL_CONFIG
    return params


def assistant_uses(*uses: tuple[str, dict[str, Any]], text: str = "") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"text": text}] if text else []
    content += [{"toolUse": {"toolUseId": i, "name": "track", "input": x}} for i, x in uses]
    return {"role": "assistant", "content": content}


def results(*replies: tuple[str, str, str], extra: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"toolResult": {"toolUseId": i, "content": [{"text": text}], "status": status}}
        for i, text, status in replies
    ]
    if extra is not None:
        content.append({"text": extra})
    return {"role": "user", "content": content}


def run_loop(provider: BedrockConverseProvider, toolbox: FakeToolbox, **kwargs: Any) -> AgentRun:
    loop = AgentLoop(monotonic=lambda: 0.0)
    return loop.run(
        provider,
        toolbox,
        PROMPT,
        context=CONTEXT,
        max_steps=kwargs.pop("max_steps", 5),
        deadline=25.0,
        **kwargs,
    )


def test_a_tool_use_round_then_an_answer() -> None:
    client = bedrock_client()
    toolbox = Toolbox({"track": "in transit, ETA 2025-06-14"})
    with Stubber(client) as stubber:
        stubber.add_response(
            "converse",
            tool_use_reply(("tu_1", {"query": "12345"}), text="Let me check."),
            request(),
        )
        stubber.add_response(
            "converse",
            answer_reply("It is on its way."),
            request(
                assistant_uses(("tu_1", {"query": "12345"}), text="Let me check."),
                results(("tu_1", "in transit, ETA 2025-06-14", "success")),
            ),
        )
        result = run_loop(BedrockConverseProvider(client, MODEL_ID), toolbox)
        stubber.assert_no_pending_responses()

    assert [(c.name, c.input, c.context.principal) for c in toolbox.calls] == [
        ("track", {"query": "12345"}, PRINCIPAL)
    ]
    assert (result.text, result.model_calls, result.stop_reason) == (
        "Let me check.\n\nIt is on its way.",
        2,
        "answered",
    )


def test_a_tool_error_is_sent_back_as_an_error_result() -> None:
    client = bedrock_client()
    toolbox = Toolbox({"track": ToolOutcome("timeout", "the tool did not answer within 10.0 s")})
    with Stubber(client) as stubber:
        stubber.add_response("converse", tool_use_reply(("tu_1", {"query": "1"})), request())
        stubber.add_response(
            "converse",
            answer_reply("Tracking is slow right now."),
            request(
                assistant_uses(("tu_1", {"query": "1"})),
                results(("tu_1", "[timeout] the tool did not answer within 10.0 s", "error")),
            ),
        )
        result = run_loop(BedrockConverseProvider(client, MODEL_ID), toolbox)
        stubber.assert_no_pending_responses()

    assert result.text == "Tracking is slow right now."
    assert [c.status for c in result.calls] == ["timeout"]


def test_the_step_bound_keeps_the_tools_and_asks_for_the_answer_in_words() -> None:
    client = bedrock_client()
    toolbox = Toolbox({"track": "x"})
    first = ("tu_1", {"query": "a"})
    second = ("tu_2", {"query": "b"})
    with Stubber(client) as stubber:
        stubber.add_response("converse", tool_use_reply(first), request())
        stubber.add_response(
            "converse",
            tool_use_reply(second),
            request(assistant_uses(first), results(("tu_1", "x", "success"))),
        )
        # The final call: Bedrock needs toolConfig with toolUse blocks in the messages,
        # so it stays, and the last user message asks for the answer. A tool request in
        # the reply is ignored.
        stubber.add_response(
            "converse",
            tool_use_reply(("tu_3", {"query": "c"}), text="Both lookups say x."),
            request(
                assistant_uses(first),
                results(("tu_1", "x", "success")),
                assistant_uses(second),
                results(("tu_2", "x", "success"), extra=FINAL_ANSWER_REQUEST),
            ),
        )
        result = run_loop(BedrockConverseProvider(client, MODEL_ID), toolbox, max_steps=2)
        stubber.assert_no_pending_responses()

    assert len(toolbox.calls) == 2
    assert (result.text, result.model_calls, result.stop_reason) == (
        "Both lookups say x.",
        3,
        "step_bound",
    )


def test_converse_stream_streams_the_answer_and_accumulates_tool_input() -> None:
    client = bedrock_client()
    toolbox = Toolbox({"track": "ETA Friday"})
    requests = serve_streams(
        client,
        [
            text_delta("Checking"),
            tool_use_start(1, "tu_1", "track"),
            tool_input_delta(1, '{"que'),
            tool_input_delta(1, 'ry": "12345"}'),
            stop("tool_use"),
        ],
        [text_delta("It arrives "), text_delta("Friday."), stop("end_turn")],
    )
    deltas: list[str] = []

    result = run_loop(BedrockConverseProvider(client, MODEL_ID), toolbox, on_text=deltas.append)

    assert [c.input for c in toolbox.calls] == [{"query": "12345"}]
    assert deltas == ["Checking", "\n\n", "It arrives ", "Friday."]
    assert result.text == "".join(deltas)
    assert requests[0]["toolConfig"] == TOOL_CONFIG
    assert requests[1]["messages"][1:] == [
        assistant_uses(("tu_1", {"query": "12345"}), text="Checking"),
        results(("tu_1", "ETA Friday", "success")),
    ]


def test_unreadable_streamed_tool_input_reaches_the_model_as_an_error() -> None:
    client = bedrock_client()
    toolbox = Toolbox({"track": "x"})
    requests = serve_streams(
        client,
        [tool_use_start(0, "tu_1", "track"), tool_input_delta(0, '{"query": '), stop("tool_use")],
        [text_delta("Sorry."), stop("end_turn")],
    )

    result = run_loop(BedrockConverseProvider(client, MODEL_ID), toolbox, on_text=lambda _: None)

    assert toolbox.calls == [] and result.calls[0].status == "error"
    tool_result = requests[1]["messages"][2]["content"][0]["toolResult"]
    assert tool_result["status"] == "error"
    assert "not valid JSON" in tool_result["content"][0]["text"]


def test_each_step_uses_a_client_whose_timeout_fits_the_time_left() -> None:
    built: list[tuple[str | None, float]] = []

    def build(service: str, region: str | None, patience: Patience) -> Any:
        built.append((region, patience.read_timeout))
        return bedrock_client()

    connections = parse_connections(
        '{"bedrock": {"type": "bedrock", "region": "eu-west-1", "models": ["anthropic.*"]}}'
    )
    provider = build_provider(
        connections.get("bedrock"),  # type: ignore[arg-type]
        MODEL_ID,
        "agent",
        timeout_seconds=20,
        bedrock_clients=AwsClients(build=build).bedrock_runtime,
    )
    assert isinstance(provider, BedrockConverseProvider)
    for left in (3.2, 3.9, 60.0):
        client = provider._client_within(left)
        with Stubber(client) as stubber:
            stubber.add_response("converse", answer_reply("ok"))
            assert provider.step(PROMPT, (), (), timeout=left).text == "ok"
    # Whole seconds (so a container keeps few clients), never above the connection's 20 s.
    assert built == [("eu-west-1", 4.0), ("eu-west-1", 20.0)]


@pytest.mark.parametrize("reason", ["end_turn", "max_tokens"])
def test_tool_use_blocks_without_a_tool_use_stop_are_not_requests(reason: str) -> None:
    client = bedrock_client()
    reply = tool_use_reply(("tu_1", {"query": "1"}), text="partial")
    reply["stopReason"] = reason
    with Stubber(client) as stubber:
        stubber.add_response("converse", reply)
        step = BedrockConverseProvider(client, MODEL_ID).step(PROMPT, (), (), timeout=5)
    assert (step.text, step.requests) == ("partial", ())
