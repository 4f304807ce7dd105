"""The app's own tools on the wire (v4): how the chat door reads tools, tool choices,
structured output and tool messages into a turn, and writes a paused turn's calls
(whole and as chunks); how a paused turn's state is kept (its JSON, its size bound, the
calls it answers); how each provider is sent the tools and their results."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.adapters.providers.bedrock import BedrockConverseProvider
from convo_memory.adapters.providers.converse_messages import normalize_messages
from convo_memory.adapters.providers.embedded import EmbeddedAgentProvider, EmbeddedChatProvider
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.domain.errors import ProviderError, ToolCallsMismatch, ValidationFailed
from convo_memory.domain.generation import GenerationOptions, TokenUsage
from convo_memory.domain.models import Summary
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.tools import (
    AppToolCall,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolReply,
    ToolRequest,
    ToolRound,
)
from convo_memory.domain.turn_records import abandoned_turn
from convo_memory.domain.turns import (
    AppToolCalls,
    SessionById,
    ToolOutput,
    ToolResults,
    TurnBegun,
    TurnEvent,
    TurnResult,
    UserText,
)
from convo_memory.doors import chat_completions as chat
from convo_memory.doors import chat_frames
from tests.support.turns import served

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALLED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
SESSION = {"X-Convo-Session-Id": "ses_1"}


def read(*messages: dict[str, Any], headers: dict[str, str] | None = None, **extra: Any) -> Any:
    body = {"model": "cap-generative", "messages": list(messages), **extra}
    return chat.read_chat_turn(body, headers or {}).command


def refused(field: str, *messages: dict[str, Any], **extra: Any) -> str:
    with pytest.raises(ValidationFailed) as raised:
        read(*messages, **extra)
    assert raised.value.message.startswith(field), raised.value.message
    return raised.value.message


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# -- reading -------------------------------------------------------------------------------


def test_tools_tool_choice_parallel_and_response_format_are_read_into_the_turn() -> None:
    schema = {"name": "Answer", "schema": {"type": "object"}, "strict": True}
    command = read(
        user("hi"),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
        response_format={"type": "json_schema", "json_schema": schema},
    )

    assert command.app_tools is not None
    [tool] = command.app_tools.definitions
    assert (tool.name, tool.description, tool.input_schema["properties"]) == (
        "get_weather",
        "The weather in a city.",
        {"city": {"type": "string"}},
    )
    assert command.app_tools.choice == ToolChoice("function", "get_weather", False)
    assert command.options.response_format == {"type": "json_schema", "json_schema": schema}


def test_a_tool_without_parameters_takes_none_and_a_text_format_asks_for_nothing() -> None:
    bare = {"type": "function", "function": {"name": "ping"}}
    empty = {"type": "function", "function": {"name": "pong", "parameters": {}}}
    command = read(user("hi"), tools=[bare, empty], response_format={"type": "text"})
    assert command.app_tools is not None
    assert [d.input_schema for d in command.app_tools.definitions] == [
        {"type": "object", "properties": {}}
    ] * 2
    assert command.options.response_format is None
    refused(
        "tools",
        user("hi"),
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
    )


@pytest.mark.parametrize(
    ("field", "extra"),
    [
        ("tools", {"tools": [{"type": "web_search"}]}),
        ("tools", {"tools": [{"type": "function", "function": {"name": "1bad"}}]}),
        ("tools", {"tools": [WEATHER_TOOL] * 129}),
        ("tools", {"tools": [WEATHER_TOOL, WEATHER_TOOL]}),
        (
            "tools",
            {"tools": [{"type": "function", "function": {"name": "f", "description": "d" * 4097}}]},
        ),
        (
            "tools",
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "description": "x" * 17_000},
                        },
                    }
                ]
            },
        ),
        ("tool_choice", {"tool_choice": "required"}),
        ("tool_choice", {"tools": [WEATHER_TOOL], "tool_choice": "sometimes"}),
        (
            "tool_choice",
            {
                "tools": [WEATHER_TOOL],
                "tool_choice": {"type": "function", "function": {"name": "x"}},
            },
        ),
        ("response_format", {"response_format": {"type": "json_schema"}}),
        ("response_format", {"response_format": {"type": "xml"}}),
        (
            "response_format",
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "A", "schema": {"description": "y" * 17_000}},
                }
            },
        ),
        ("parallel_tool_calls", {"parallel_tool_calls": "often"}),
        ("functions", {"functions": [{"name": "f"}]}),
    ],
)
def test_tools_and_formats_the_door_cannot_take_are_422_naming_the_field(
    field: str, extra: dict[str, Any]
) -> None:
    refused(field, user("hi"), **extra)


def test_in_a_session_the_trailing_tool_messages_are_the_continuation_and_the_rest_is_ignored() -> (
    None
):
    second = {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": [{"type": "text", "text": "cold"}],
    }
    command = read(user("ignored"), CALLED, RESULT, second, headers=SESSION)

    assert isinstance(command.conversation, SessionById)
    assert command.conversation.session_id == "ses_1"
    assert command.input == ToolResults(
        (ToolOutput("call_1", "sunny"), ToolOutput("call_2", "cold"))
    )
    assert (command.history, command.rounds) == ((), ())


def test_a_tool_message_without_its_call_id_is_422() -> None:
    with pytest.raises(ValidationFailed, match="tool_call_id"):
        read(user("hi"), CALLED, {"role": "tool", "content": "sunny"}, headers=SESSION)


def test_stateless_the_exchange_after_the_last_user_message_is_the_turns_rounds() -> None:
    earlier: list[dict[str, Any]] = [
        user("before"),
        CALLED,
        RESULT,
        {"role": "assistant", "content": "It was sunny."},
    ]
    command = read(*earlier, user("and now?"), CALLED, RESULT)

    assert command.input == UserText("and now?")
    call = ToolRequest("call_1", "get_weather", {"city": "Paris"})
    assert command.rounds == (
        ToolRound("", (call,), (ToolReply("call_1", "get_weather", "sunny"),)),
    )
    assert [m.role for m in command.history] == ["user", "assistant", "tool", "assistant"]
    assert command.history[1].tool_calls == (call,)
    assert command.history[2] == ChatMessage("tool", "sunny", (), "call_1")


@pytest.mark.parametrize(
    ("where", "messages"),
    [
        # A result for another call than the one made.
        ("messages.1.tool_calls", [user("hi"), CALLED, RESULT | {"tool_call_id": "call_9"}]),
        ("messages.1.role", [user("hi"), CALLED]),  # a call with no result: not the user's
        ("messages.1.role", [user("hi"), {"role": "assistant", "content": "x"}, RESULT]),
        ("messages.0.tool_call_id", [RESULT, user("hi")]),  # a result of no call
    ],
)
def test_a_stateless_tool_exchange_that_does_not_add_up_is_422(
    where: str, messages: list[dict[str, Any]]
) -> None:
    with pytest.raises(ValidationFailed) as raised:
        read(*messages)
    assert raised.value.message.startswith(where), raised.value.message


# -- writing ---------------------------------------------------------------------------------

PAUSE = served(
    output="",
    turn=None,
    recorded=False,
    finish="tool_calls",
    tool_calls=(AppToolCall("call_1", "get_weather", '{"city": "Paris"}'),),
)


def test_a_paused_turn_is_a_completion_with_tool_calls_and_no_content() -> None:
    body = chat_frames.chat_completion(PAUSE, "cap")
    [choice] = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert body["convo"]["turn"] is None and body["convo"]["recorded"] is False


def lines_of(text: str) -> list[Any]:
    return [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]


def test_a_streamed_pause_sends_each_call_as_indexed_chunks_then_finish_tool_calls() -> None:
    calls = (*PAUSE.tool_calls, AppToolCall("call_2", "get_time", "{}"))
    result = served(**{**PAUSE.__dict__, "tool_calls": calls})
    items: list[TurnEvent | TurnResult] = [TurnBegun("r1", 5, "ses_1"), AppToolCalls(calls), result]

    chunks = lines_of("".join(chat_frames.chunk_frames(items, "cap", False)))

    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    pieces = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert pieces == [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
        {"index": 0, "function": {"arguments": '{"city": "Paris"}'}},
        {
            "index": 1,
            "id": "call_2",
            "type": "function",
            "function": {"name": "get_time", "arguments": ""},
        },
        {"index": 1, "function": {"arguments": "{}"}},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_replayed_paused_turn_is_written_whole_with_its_calls() -> None:
    kept = TurnResult.from_json(json.loads(json.dumps(PAUSE.to_json())))
    assert kept == PAUSE
    chunks = lines_of(chat_frames.whole_stream(kept, "cap", False))
    assert [c["choices"][0]["delta"].get("tool_calls", [{}])[0].get("id") for c in chunks] == [
        None,
        "call_1",
        None,
        None,
    ]


# -- the kept state --------------------------------------------------------------------------


def pending(**changes: Any) -> PendingTurn:
    request = ToolRequest("c1", "lookup", {"q": "x"})
    app_call = ToolRequest("c2", "get_weather", {"city": "Paris"})
    values: dict[str, Any] = {
        "pause_id": "pause_1",
        "user_seq": 5,
        "created_at": "2026-01-01T00:00:00.000Z",
        "since": "2026-01-01T00:00:01.000Z",
        "expires": "2026-01-01T00:15:01.000Z",
        "user_input": "weather?",
        "prompt_record": PromptRecord(1, 4, 2, (4,), True, ("get_weather",)),
        "summary": Summary(text="earlier", through_seq=2),
        "rounds": (),
        "step": ToolRound(
            "Let me see.", (request, app_call), (ToolReply("c1", "lookup", "found"),)
        ),
        "app_call_ids": ("c2",),
        "calls": (ToolCall("lookup", {"q": "x"}, "found", principal={"u": "1"}),),
        "texts": ("Let me see.",),
        "run_id": "run_1",
        "traced": True,
        "model_calls": 1,
        "usage": TokenUsage(10, 2),
    }
    values.update(changes)
    return PendingTurn(**values)


def test_the_kept_state_reads_back_as_it_was() -> None:
    state = pending()
    assert PendingTurn.from_json(state.to_json(), 5, "weather?") == state


def test_the_results_must_answer_exactly_the_apps_calls_and_complete_the_step_in_order() -> None:
    state = pending()
    round_ = state.answered([ToolOutput("c2", "sunny")])
    assert [(r.call_id, r.output) for r in round_.replies] == [("c1", "found"), ("c2", "sunny")]
    for wrong in ([], [ToolOutput("c1", "x")], [ToolOutput("c2", "a"), ToolOutput("c2", "b")]):
        with pytest.raises(ToolCallsMismatch, match="c2"):
            state.answered(wrong)


def test_an_abandoned_turn_is_its_input_and_the_text_with_the_calls_over_the_pause() -> None:
    record = abandoned_turn(pending())
    assert (record.user_content, record.answer, record.abandoned, record.resolves) == (
        "weather?",
        "Let me see.",
        True,
        "pause_1",
    )
    assert record.run_id == "run_1" and record.turn_id == "pause_1.abandoned"


def test_the_kept_state_is_cut_to_its_bound_results_first_then_the_summary() -> None:
    big = ToolRound(
        "", (ToolRequest("c1", "lookup", {}),), (ToolReply("c1", "lookup", "r" * 100_000),)
    )
    state = pending(rounds=(big,), summary=Summary(text="s" * 30_000, through_seq=2))

    fitted = state.fitted(60_000)

    assert len(fitted.to_json().encode()) <= 60_000
    assert fitted.summary is not None  # the results' cut was enough
    assert len(fitted.rounds[0].replies[0].output) < 100_000
    smaller = state.fitted(20_000)
    assert smaller.summary is None and len(smaller.to_json().encode()) <= 20_000
    with pytest.raises(ProviderError, match="too large"):
        pending(
            step=ToolRound("", (ToolRequest("c2", "get_weather", {"a": "x" * 50_000}),), ())
        ).fitted(20_000)


# -- providers -------------------------------------------------------------------------------

TOOL = ToolDefinition("get_weather", "The weather.", {"type": "object", "properties": {}})
PROMPT = Prompt(
    system="sys",
    messages=(ChatMessage("user", "get_weather for Paris"),),
    user_input="get_weather for Paris",
)


def test_the_openai_compatible_body_carries_the_choice_the_format_and_a_clients_exchange() -> None:
    provider = OpenAICompatibleProvider("http://127.0.0.1:9/v1", "m")
    options = GenerationOptions(response_format={"type": "json_object"})
    history = (
        ChatMessage("assistant", "", (ToolRequest("c0", "get_weather", {"city": "Rome"}),)),
        ChatMessage("tool", "rainy", (), "c0"),
        ChatMessage("user", "and Paris?"),
    )
    prompt = Prompt(system="sys", messages=history, options=options)
    body = provider.tool_payload(prompt, (), [TOOL], choice=ToolChoice("required", None, False))

    assert (body["tool_choice"], body["parallel_tool_calls"]) == ("required", False)
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"][1:3] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "rainy"},
    ]
    named = provider.tool_payload(prompt, (), [TOOL], choice=ToolChoice("function", "get_weather"))
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "tool_choice" not in provider.tool_payload(prompt, (), [TOOL])
    assert provider.takes_response_format is True


def test_bedrock_gets_tool_choice_and_a_clients_exchange_as_tool_blocks_only_with_tools() -> None:
    provider = BedrockConverseProvider(client=object(), model_id="anthropic.claude")
    history = (
        ChatMessage("user", "weather?"),
        ChatMessage("assistant", "", (ToolRequest("c0", "get_weather", {"city": "Rome"}),)),
        ChatMessage("tool", "rainy", (), "c0"),
        ChatMessage("user", "and Paris?"),
    )
    prompt = Prompt(system="sys", messages=history)
    kwargs = provider.tool_request(prompt, (), [TOOL], choice=ToolChoice("function", "get_weather"))

    assert kwargs["toolConfig"]["toolChoice"] == {"tool": {"name": "get_weather"}}
    assert [m["content"] for m in kwargs["messages"]] == [
        [{"text": "weather?"}],
        [{"toolUse": {"toolUseId": "c0", "name": "get_weather", "input": {"city": "Rome"}}}],
        [
            {"toolResult": {"toolUseId": "c0", "content": [{"text": "rainy"}]}},
            {"text": "and Paris?"},
        ],
    ]
    required = provider.tool_request(prompt, (), [TOOL], choice=ToolChoice("required"))
    assert required["toolConfig"]["toolChoice"] == {"any": {}}
    as_text = normalize_messages(history)
    assert "toolUse" not in json.dumps(as_text) and "get_weather" in json.dumps(as_text)
    assert not getattr(provider, "takes_response_format", False)


def test_the_embedded_models_call_each_tool_named_in_the_input_then_quote_the_results() -> None:
    tools = [TOOL, ToolDefinition("get_time", "", {"type": "object"})]
    for model in (EmbeddedChatProvider(), EmbeddedAgentProvider(tools=[])):
        prompt = Prompt(
            system="",
            messages=(ChatMessage("user", "get_time and get_weather please"),),
            user_input="get_time and get_weather please",
        )
        first = model.step(prompt, (), tools, timeout=5)
        assert [(r.name, r.input) for r in first.requests] == [
            ("get_time", {"query": "get_time and get_weather please"}),
            ("get_weather", {"query": "get_time and get_weather please"}),
        ]
        done = ToolRound(
            "",
            first.requests,
            tuple(ToolReply(r.call_id, r.name, f"{r.name} ok") for r in first.requests),
        )
        answer = model.step(prompt, (done,), tools, timeout=5)
        assert not answer.requests
        assert answer.text.startswith('You said: "get_time and get_weather please".')
        assert '"get_time ok"' in answer.text and '"get_weather ok"' in answer.text


def test_the_embedded_models_follow_tool_choice_and_parallel_tool_calls() -> None:
    model = EmbeddedChatProvider()
    tools = [TOOL, ToolDefinition("get_time", "", {"type": "object"})]
    one_at_a_time = ToolChoice("auto", None, False)
    named = model.step(PROMPT, (), tools, timeout=5, choice=ToolChoice("function", "get_time"))
    assert [r.name for r in named.requests] == ["get_time"]
    plain = Prompt(system="", messages=(ChatMessage("user", "hello"),), user_input="hello")
    assert [
        r.name
        for r in model.step(plain, (), tools, timeout=5, choice=ToolChoice("required")).requests
    ] == ["get_weather"]
    assert model.step(plain, (), tools, timeout=5).requests == ()
    both = Prompt(
        system="",
        messages=(ChatMessage("user", "get_weather get_time"),),
        user_input="get_weather get_time",
    )
    first = model.step(both, (), tools, timeout=5, choice=one_at_a_time)
    assert [r.name for r in first.requests] == ["get_weather"]
    done = ToolRound(
        "", first.requests, (ToolReply(first.requests[0].call_id, "get_weather", "ok"),)
    )
    second = model.step(both, (done,), tools, timeout=5, choice=one_at_a_time)
    assert [r.name for r in second.requests] == ["get_time"]
    assert second.requests[0].call_id != first.requests[0].call_id
