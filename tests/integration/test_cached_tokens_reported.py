"""What the provider read from its prompt cache reaches the chat door's client as
OpenAI reports it: ``usage.prompt_tokens_details.cached_tokens``, part of
``prompt_tokens``, in a ``chat.completion`` and in a stream's last chunk (asked for with
``stream_options.include_usage``), through the HttpApi and the Function URL's door. An
OpenAI-compatible provider (the fake server on 127.0.0.1) and Bedrock (botocore's Stubber
for Converse, real event-stream frames for ConverseStream) report their counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.bedrock_events import bedrock_client, event, serve_streams, stop, text_delta
from tests.support.chat_door import DoorAnswer, chat_body, chat_http, chat_stream_door, keyed, user
from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace
from tests.support.tenants import Tenant, connection_capability

DOORS = [pytest.param(chat_http, id="HttpApi"), pytest.param(chat_stream_door, id="Function URL")]
CACHING_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply="From the cache, mostly.") as server:
        yield server


@pytest.fixture(scope="module")
def bedrock() -> Any:
    return bedrock_client()


@pytest.fixture(scope="module")
def api(fake: FakeOpenAIServer, bedrock: Any) -> Iterator[InProcessApi]:
    connections = {
        "remote": {"type": "openai", "baseUrl": fake.base_url, "models": ["*"]},
        "bedrock": {"type": "bedrock", "region": "us-east-1", "models": ["anthropic.*"]},
    }
    env = {"PROVIDER_CONNECTIONS": json.dumps(connections)}
    with inprocess_stack(env, **{"bedrock-runtime": bedrock}) as stack:
        yield stack


@pytest.fixture(scope="module")
def tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "cached"))


def usage_of(answer: DoorAnswer) -> dict[str, Any]:
    """The answer's ``usage`` (a stream's: from its one chunk that carries it)."""
    assert answer.status == 200, answer.body
    if isinstance(answer.body, list):
        (usage,) = [
            line["usage"] for line in answer.body if isinstance(line, dict) and "usage" in line
        ]
        return dict(usage)
    return dict(answer.body["usage"])


def turn(model: str, stream: bool, key: str) -> tuple[dict[str, Any], dict[str, str]]:
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
    body = chat_body(model, user("Where is order 42?"), user="customer-7", stream=stream, **extra)
    return body, keyed(key)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("stream", [False, True], ids=["completion", "stream"])
def test_an_openai_compatible_providers_cached_tokens_are_reported(
    api: InProcessApi, tenant: Tenant, fake: FakeOpenAIServer, door: Any, stream: bool
) -> None:
    model = connection_capability(api, tenant, "remote")
    fake.usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "total_tokens": 1230,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }

    usage = usage_of(door(api, tenant, *turn(model, stream, f"openai-{door.__name__}-{stream}")))

    assert usage == {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "total_tokens": 1230,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }


def test_bedrocks_cache_reads_are_cached_tokens_of_the_whole_prompt(
    api: InProcessApi, tenant: Tenant, bedrock: Any
) -> None:
    model = connection_capability(api, tenant, "bedrock", CACHING_MODEL)
    # Converse counts what it read from and wrote to the cache apart from inputTokens.
    counts = {"inputTokens": 100, "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 50}
    reply = {
        "output": {"message": {"role": "assistant", "content": [{"text": "It shipped."}]}},
        "stopReason": "end_turn",
        "usage": {**counts, "outputTokens": 20, "totalTokens": 1170},
        "metrics": {"latencyMs": 12},
    }
    with Stubber(bedrock) as stubber:
        stubber.add_response("converse", reply)
        stubber.add_response("converse", reply)
        answers = [
            door(api, tenant, *turn(model, False, "bedrock-1"))
            for door in (chat_http, chat_stream_door)
        ]
        stubber.assert_no_pending_responses()
    metadata = {
        "usage": {**counts, "outputTokens": 20, "totalTokens": 1170},
        "metrics": {"latencyMs": 9},
    }
    stream = [
        text_delta("It "),
        text_delta("shipped."),
        stop("end_turn"),
        event("metadata", metadata),
    ]
    serve_streams(bedrock, stream, list(stream))
    answers += [
        door(api, tenant, *turn(model, True, "bedrock-2")) for door in (chat_http, chat_stream_door)
    ]

    expected = {
        "prompt_tokens": 1150,
        "completion_tokens": 20,
        "total_tokens": 1170,
        "prompt_tokens_details": {"cached_tokens": 1000},
    }
    assert [usage_of(answer) for answer in answers] == [expected] * 4
