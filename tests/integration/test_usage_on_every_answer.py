"""Every answer of the OpenAI-compatible door carries ``usage`` (some clients, ``llm
--no-stream`` among them, fail without it): the embedded models estimate it at about
four characters a token, stateless and in sessions, generative and agent, streamed (with
``stream_options.include_usage``) and not, through the HttpApi and the streaming door; a
provider that counts tokens is reported as it counted, and one that reports none is
estimated too."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.chat_door import (
    DoorAnswer,
    chat_body,
    chat_http,
    chat_stream_door,
    keyed,
    streamed_text,
    user,
)
from tests.support.inprocess_api import AwsBackend, InProcessApi, new_workspace, serving
from tests.support.tenants import Tenant, connection_capability


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply="Counted by the model.") as server:
        yield server


@pytest.fixture
def api(fake: FakeOpenAIServer, backend: AwsBackend) -> Iterator[InProcessApi]:
    """The module's tables, a container of the test's own on the test's fake model."""
    connection = {"type": "openai", "baseUrl": fake.base_url, "models": ["*"]}
    with serving(backend, {"PROVIDER_CONNECTIONS": json.dumps({"remote": connection})}) as stack:
        yield stack


@pytest.fixture
def tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "alpha"))


def answered(answer: DoorAnswer) -> tuple[str, dict[str, Any]]:
    """The answer's text and its ``usage`` (a stream's: from its last chunk)."""
    assert answer.status == 200, answer.body
    if isinstance(answer.body, list):  # a stream's data lines
        (last,) = [line for line in answer.body if isinstance(line, dict) and "usage" in line]
        return streamed_text(answer.body), last["usage"]
    return answer.body["choices"][0]["message"]["content"], answer.body["usage"]


@pytest.mark.parametrize("capability", ["cap-generative", "cap-agent"])
@pytest.mark.parametrize("door", ["http", "http stream", "url stream"])
@pytest.mark.parametrize("session", [False, True])
def test_an_embedded_answer_carries_its_estimated_usage(
    api: InProcessApi, tenant: Tenant, capability: str, door: str, session: bool
) -> None:
    text_in = "Where is order 12345? " * 5
    stream = door != "http"
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    body = chat_body(capability, user(text_in), stream=stream, **extra)
    headers = keyed(f"conversation-{door}-{capability}") if session else None
    if session:
        body["user"] = "customer-4471"
    call = chat_stream_door if door == "url stream" else chat_http

    text, usage = answered(call(api, tenant, body, headers))

    assert usage["completion_tokens"] == math.ceil(len(text) / 4) > 0
    # The prompt holds at least the input (and the capability's instructions).
    assert usage["prompt_tokens"] >= math.ceil(len(text_in) / 4)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_a_provider_that_counts_is_reported_as_it_counted_and_one_that_does_not_is_estimated(
    api: InProcessApi, tenant: Tenant, fake: FakeOpenAIServer
) -> None:
    model = connection_capability(api, tenant, "remote")

    fake.usage = {"prompt_tokens": 321, "completion_tokens": 7, "total_tokens": 328}
    _, counted = answered(chat_http(api, tenant, chat_body(model, user("hello"))))
    fake.usage = None
    text, estimated = answered(chat_http(api, tenant, chat_body(model, user("hello"))))

    assert (counted["prompt_tokens"], counted["completion_tokens"]) == (321, 7)
    assert text == "Counted by the model."
    assert estimated["completion_tokens"] == math.ceil(len(text) / 4)
    assert 0 < estimated["prompt_tokens"] < 321
