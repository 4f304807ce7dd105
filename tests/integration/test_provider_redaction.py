"""An upstream error that quotes the connection's key, anywhere in a long message, never
shows any part of it: not in a 502 on either door, not in a stream's error event, not in
a log line. And every 502 names the requestId it happened in."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory.services.admin import create_workspace
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.agent_api import predict, stream_url_door
from tests.support.inprocess_api import InProcessApi, inprocess_stack
from tests.support.sse import parse_sse

KEY = "sk-proj-Tq7vXw2LmN9pRs4uYz6bHc8dJf0gKe1aQ3iOo5tUy7rEw9Zx"
FRAGMENT = 8
PADDING = "The upstream service could not process this request because of its settings; " * 4
OFFSETS = range(140, 216)  # where the key starts in the error text, around the 200-char cut


def error_text(offset: int) -> str:
    return PADDING[:offset] + KEY + " was not accepted for this model."


def key_fragments_in(text: str) -> list[str]:
    """Every 8-character piece of the key that ``text`` contains."""
    return [
        KEY[i : i + FRAGMENT]
        for i in range(len(KEY) - FRAGMENT + 1)
        if KEY[i : i + FRAGMENT] in text
    ]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def api(fake: FakeOpenAIServer) -> Iterator[InProcessApi]:
    connection = {
        "type": "openai",
        "baseUrl": fake.base_url,
        "models": ["*"],
        "apiKey": {"env": "QUOTED_LLM_KEY"},
    }
    env = {"PROVIDER_CONNECTIONS": json.dumps({"quoting": connection}), "QUOTED_LLM_KEY": KEY}
    with inprocess_stack(env) as stack:
        yield stack


def test_a_key_quoted_at_any_offset_never_shows_and_every_502_has_a_request_id(
    api: InProcessApi,
    fake: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    token = create_workspace(api.container.stores.tokens, "alpha").token
    body = {
        "name": "assistant",
        "kind": "generative",
        "provider": {"connection": "quoting", "modelId": "m"},
    }
    created = api.call("POST", "/v1/capabilities", token=token, json_body=body)
    assert created.status == 201, created.body
    capability = created.body["id"]
    shown: list[str] = []
    request_ids: list[Any] = []

    for offset in OFFSETS:
        text = error_text(offset)
        assert key_fragments_in(text)  # the key is there to leak
        # A refused call (HTTP 401), answered on the predict door and the streaming door.
        fake.error_status, fake.error_body = 401, {"error": {"message": text}}
        answer = predict(api, token, capability, "hello")
        status, raw = stream_url_door(api, token, capability, {"input": "hello"})
        for got, error_body in ((answer.status, answer.body), (status, json.loads(raw))):
            assert got == 502 and error_body["error"]["code"] == "provider_error"
            assert "HTTP 401" in error_body["error"]["message"]
            request_ids.append(error_body["error"].get("requestId"))
            shown.append(json.dumps(error_body))
        # An error event in the middle of a stream that already sent text.
        fake.error_status = None
        fake.stream_raw = (
            'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
            f"data: {json.dumps({'error': {'message': text}})}\n\n"
        )
        status, raw = stream_url_door(api, token, capability, {"input": "hello"})
        kind, error = parse_sse(raw)[-1]
        assert (status, kind, error["code"]) == (200, "error", "provider_error")
        assert "failed mid-stream" in error["message"]
        request_ids.append(error.get("requestId"))
        shown.append(raw)

    logged = caplog.text + "".join(capfd.readouterr())
    assert "returned HTTP 401" in logged  # the logs were captured
    assert [key_fragments_in(text) for text in shown if key_fragments_in(text)] == []
    assert key_fragments_in(logged) == []
    assert len(request_ids) == 3 * len(OFFSETS) and all(request_ids)
    assert "***" in shown[0]  # redacted, not dropped: the message still reads
