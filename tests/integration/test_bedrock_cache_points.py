"""Bedrock prompt caching (contract v3): for a connection whose model caches prompts, a
``cachePoint`` follows the system text and, when the next turn will replay them, the last
replayed message, in Converse and in ConverseStream requests and through a tool loop's
calls; none for another model. The cached-token counts of both provider types are read
from their usage. Botocore's Stubber checks every request against the service model;
nothing leaves the host."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from convo_memory.adapters.aws_clients import AwsClients, Patience
from convo_memory.adapters.providers.bedrock import BedrockConverseProvider
from convo_memory.adapters.providers.factory import build_provider
from convo_memory.adapters.providers.openai_compat import usage_of as openai_usage
from convo_memory.adapters.summarizers import build_summarizer
from convo_memory.domain.connections import parse_connections
from convo_memory.domain.generation import TokenUsage
from convo_memory.domain.models import Message, Summary, ToolDigest
from convo_memory.domain.prompt import Prompt, build_prompt
from convo_memory.domain.tools import ToolReply, ToolRequest, ToolRound
from convo_memory.ports import ModelProvider
from tests.support.bedrock_events import bedrock_client, event, serve_streams, stop, text_delta

CACHING_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
OTHER_MODEL = "meta.llama3-1-70b-instruct-v1:0"
CACHE_POINT = {"cachePoint": {"type": "default"}}
NONCE = "0123456789abcdef"


def provider_for(
    model_id: str, prompt_caching: str = "", ttl: str = ""
) -> tuple[ModelProvider, Any]:
    """The provider the registry builds for ``model_id`` on a bedrock connection (with
    ``"promptCaching": ...`` and ``"promptCacheTtl": ...`` when given), and its client."""
    client = bedrock_client()

    def build(service: str, region: str | None, patience: Patience) -> Any:
        return client

    setting = f', "promptCaching": {prompt_caching}' if prompt_caching else ""
    setting += f', "promptCacheTtl": "{ttl}"' if ttl else ""
    connections = parse_connections(
        '{"bedrock": {"type": "bedrock", "region": "us-east-1", '
        f'"models": ["anthropic.*", "meta.*"]{setting}}}}}'
    )
    connection = connections.get("bedrock")
    assert connection is not None
    provider = build_provider(
        connection,
        model_id,
        "generative",
        timeout_seconds=20,
        bedrock_clients=AwsClients(build=build).bedrock_runtime,
    )
    return provider, client


def message(seq: int, content: str) -> Message:
    role = "user" if seq % 2 else "assistant"
    return Message(seq=seq, role=role, content=content, created_at="2025-01-01T00:00:00.000Z")


def session_prompt(replay_reused: bool = True) -> Prompt:
    """A session's turn: a summary, four replayed messages (the answer at 4 used a tool),
    the input; the next turn replays the same messages (its window keeps its start)."""
    return build_prompt(
        instructions="Be brief.",
        summary=Summary(text="The user is Ada.", through_seq=2),
        digests=[ToolDigest(seq=4, tools=["lookup_order"], text="order 42: shipped")],
        replayed=[
            message(3, "Where is 42?"),
            message(4, "It shipped."),
            message(5, "When?"),
            message(6, "Tuesday."),
        ],
        user_input="Thanks!",
        nonce=NONCE,
        replay_reused=replay_reused,
    )


def reply(text: str = "ok", **usage: int) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15, **usage},
        "metrics": {"latencyMs": 12},
    }


def expected_request(
    prompt: Prompt, model_id: str, caching: bool, messages_too: bool = True
) -> dict[str, Any]:
    system_point = [CACHE_POINT] if caching else []
    point = system_point if messages_too else []
    texts = [m.content for m in prompt.messages]
    return {
        "modelId": model_id,
        "system": [{"text": prompt.system}, *system_point],
        "messages": [
            {"role": "user", "content": [{"text": texts[0]}]},
            {"role": "assistant", "content": [{"text": texts[1]}]},
            {"role": "user", "content": [{"text": texts[2]}]},
            # The end of the replayed messages: the next turn's prompt begins with all this.
            {"role": "assistant", "content": [{"text": texts[3]}, *point]},
            {"role": "user", "content": [{"text": texts[4]}]},
        ],
    }


def test_a_caching_model_gets_a_cache_point_after_the_system_text_and_the_replayed_messages() -> (
    None
):
    provider, client = provider_for(CACHING_MODEL)
    prompt = session_prompt()

    with Stubber(client) as stubber:
        stubber.add_response("converse", reply(), expected_request(prompt, CACHING_MODEL, True))
        assert provider.complete(prompt).text == "ok"
        stubber.assert_no_pending_responses()
    # The system text is the stable part (the digest travels with its turn, not there).
    assert "order 42" not in prompt.system and "order 42" in prompt.messages[2].content


@pytest.mark.parametrize(
    ("model_id", "setting"),
    [(OTHER_MODEL, ""), (CACHING_MODEL, "false"), (f"us.{OTHER_MODEL}", "")],
)
def test_no_cache_point_for_a_model_that_does_not_cache(model_id: str, setting: str) -> None:
    provider, client = provider_for(model_id, setting)
    prompt = session_prompt()

    with Stubber(client) as stubber:
        stubber.add_response("converse", reply(), expected_request(prompt, model_id, False))
        assert provider.complete(prompt).text == "ok"
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("model_id", "setting"), [(OTHER_MODEL, "true"), (f"us.{CACHING_MODEL}", "")]
)
def test_the_connection_setting_or_an_inference_profile_of_a_listed_model_turns_it_on(
    model_id: str, setting: str
) -> None:
    provider, client = provider_for(model_id, setting)
    prompt = session_prompt()

    with Stubber(client) as stubber:
        stubber.add_response("converse", reply(), expected_request(prompt, model_id, True))
        provider.complete(prompt)
        stubber.assert_no_pending_responses()


def test_replayed_messages_the_next_turn_will_not_replay_are_not_marked() -> None:
    # A write costs more than plain input: with a window that moves every turn (or on the
    # last turn before a step) only the system text, stable until the summary changes,
    # is marked.
    provider, client = provider_for(CACHING_MODEL)
    prompt = session_prompt(replay_reused=False)

    with Stubber(client) as stubber:
        expected = expected_request(prompt, CACHING_MODEL, True, messages_too=False)
        stubber.add_response("converse", reply(), expected)
        provider.complete(prompt)
        stubber.assert_no_pending_responses()


def test_a_stream_carries_the_same_cache_points() -> None:
    provider, client = provider_for(CACHING_MODEL)
    prompt = session_prompt()
    requests = serve_streams(client, [text_delta("o"), text_delta("k"), stop("end_turn")])

    assert "".join(provider.stream(prompt)) == "ok"

    [sent] = requests
    expected = expected_request(prompt, CACHING_MODEL, True)
    assert (sent["system"], sent["messages"]) == (expected["system"], expected["messages"])


def test_a_tool_loop_keeps_the_cache_point_at_the_end_of_the_replayed_messages() -> None:
    provider, client = provider_for(CACHING_MODEL)
    assert isinstance(provider, BedrockConverseProvider)
    prompt = session_prompt()
    round_ = ToolRound(
        "",
        (ToolRequest("tu_1", "lookup_order", {"order": "42"}),),
        (ToolReply("tu_1", "lookup_order", "shipped"),),
    )

    request = provider.tool_request(prompt, [round_], [], final=True)

    with Stubber(client) as stubber:  # the shape is one Converse accepts
        stubber.add_response("converse", reply(), request)
        client.converse(**request)
    contents = [m["content"] for m in request["messages"]]
    assert request["system"][-1] == CACHE_POINT
    assert [i for i, c in enumerate(contents) if CACHE_POINT in c] == [3]
    # This turn's rounds come after the input, past the cached prefix.
    assert "toolUse" in contents[5][0] and "toolResult" in contents[6][0]


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_a_connections_cache_ttl_goes_on_every_cache_point(ttl: str) -> None:
    provider, client = provider_for(CACHING_MODEL, ttl=ttl)
    assert isinstance(provider, BedrockConverseProvider)
    prompt = session_prompt()
    expected = expected_request(prompt, CACHING_MODEL, True)
    point = {"cachePoint": {"type": "default", "ttl": ttl}}
    expected["system"][-1] = point
    expected["messages"][3]["content"][-1] = point

    with Stubber(client) as stubber:  # the service model takes the ttl
        stubber.add_response("converse", reply(), expected)
        assert provider.complete(prompt).text == "ok"
        stubber.assert_no_pending_responses()
    # ConverseStream and a tool loop's calls carry the same points.
    streamed = provider.tool_request(prompt, [], [], streaming=True)
    assert streamed["system"][-1] == point and streamed["messages"][3]["content"][-1] == point


def test_a_summarizer_on_a_caching_model_sends_one_system_text_with_its_cache_point() -> None:
    provider, client = provider_for(CACHING_MODEL, ttl="1h")
    summarizer = build_summarizer(provider)
    sent: list[dict[str, Any]] = []

    with Stubber(client) as stubber:
        for _ in range(2):
            stubber.add_response("converse", reply("The user is Ada."))
        client.meta.events.register(
            "provide-client-params.bedrock-runtime.Converse",
            lambda params, **_: sent.append(params),
        )
        summarizer.summarize(None, [("user", "I am Ada")], 500)
        summarizer.summarize("The user is Ada.", [("user", "order 42?")], 500)

    first, second = sent
    assert first["system"] == second["system"]  # a stable prefix, then its cache point
    assert first["system"][-1] == {"cachePoint": {"type": "default", "ttl": "1h"}}
    assert first["messages"] != second["messages"]


def test_a_ttl_is_a_bedrock_setting_of_a_connection_that_caches() -> None:
    base = {"type": "bedrock", "region": "us-east-1", "models": ["anthropic.*"]}
    openai = {"type": "openai", "baseUrl": "http://127.0.0.1:1/v1", "models": ["m"]}
    with pytest.raises(ValueError, match="Input should be '5m' or '1h'"):
        parse_connections({"b": {**base, "promptCacheTtl": "24h"}})
    with pytest.raises(ValueError, match="promptCacheTtl applies to bedrock"):
        parse_connections({"o": {**openai, "promptCacheTtl": "1h"}})
    with pytest.raises(ValueError, match="promptCacheTtl needs prompt caching"):
        parse_connections({"b": {**base, "promptCaching": False, "promptCacheTtl": "1h"}})
    # Without a TTL the points are Bedrock's default (5 minutes), as before.
    provider, _ = provider_for(CACHING_MODEL)
    assert isinstance(provider, BedrockConverseProvider)
    assert provider.request(session_prompt())["system"][-1] == CACHE_POINT


def test_a_replay_that_starts_with_an_answer_still_marks_its_end() -> None:
    provider, _ = provider_for(CACHING_MODEL)
    assert isinstance(provider, BedrockConverseProvider)
    prompt = build_prompt(
        instructions=None,
        summary=None,
        digests=[],
        replayed=[message(2, "an answer"), message(3, "a question"), message(4, "its answer")],
        user_input="next",
        nonce=NONCE,
        replay_reused=True,
    )

    messages = provider.request(prompt)["messages"]

    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[3]["content"] == [{"text": "its answer"}, CACHE_POINT]
    assert messages[4]["content"] == [{"text": "next"}]
    # A stateless prompt (nothing replayed) marks only the system text.
    alone = build_prompt(instructions=None, summary=None, digests=[], replayed=[], user_input="hi")
    assert provider.request(alone)["messages"] == [{"role": "user", "content": [{"text": "hi"}]}]


def test_bedrock_cache_reads_and_writes_are_read_from_its_usage() -> None:
    provider, client = provider_for(CACHING_MODEL)

    with Stubber(client) as stubber:
        stubber.add_response(
            "converse", reply(cacheReadInputTokens=1800, cacheWriteInputTokens=200)
        )
        stubber.add_response("converse", reply())
        cached = provider.complete(session_prompt()).usage
        plain = provider.complete(session_prompt()).usage

    # Bedrock's inputTokens leaves the cached part out: the prompt is all three.
    assert cached == TokenUsage(2010, 5, cached_input_tokens=1800, cache_write_input_tokens=200)
    assert plain == TokenUsage(10, 5)


def test_a_streamed_answer_reports_its_cache_reads_too() -> None:
    provider, client = provider_for(CACHING_MODEL)
    assert isinstance(provider, BedrockConverseProvider)
    usage = {
        "inputTokens": 12,
        "outputTokens": 3,
        "totalTokens": 1515,
        "cacheReadInputTokens": 1500,
    }
    metadata = event("metadata", {"usage": usage, "metrics": {"latencyMs": 9}})
    serve_streams(client, [text_delta("ok"), stop("end_turn"), metadata])

    step = provider.step(session_prompt(), (), (), timeout=5, on_text=lambda _: None)

    assert step.usage == TokenUsage(1512, 3, cached_input_tokens=1500)


def test_openai_cached_tokens_are_read_from_the_prompt_tokens_details() -> None:
    details = {"prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0}}

    assert openai_usage({"prompt_tokens": 1300, "completion_tokens": 7, **details}) == TokenUsage(
        1300, 7, cached_input_tokens=1024
    )
    # Servers that say nothing of a cache (Ollama, llama.cpp) read as none cached.
    assert openai_usage({"prompt_tokens": 9, "completion_tokens": 2}) == TokenUsage(9, 2)
    assert openai_usage(
        {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": None}
    ) == TokenUsage(9, 2)
