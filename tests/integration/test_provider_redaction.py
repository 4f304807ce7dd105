"""What a provider says never reaches a client: a 502 (or a stream's error event) is in
the service's own words, the connection's name and the provider's HTTP status at most,
on every door; what the provider said goes to the log, with every part of the key hidden
(whole, cut anywhere, masked the way OpenAI quotes a refused key, upper- or lower-case).
And every 502 names the requestId it happened in."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.agent_api import stream_url_door
from tests.support.chat_door import chat_body, chat_http, chat_stream_door, user
from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace
from tests.support.sse import parse_sse
from tests.support.tenants import Tenant, connection_capability, open_session

KEY = "sk-proj-Tq7vXw2LmN9pRs4uYz6bHc8dJf0gKe1aQ3iOo5tUy7rEw9Zx"
FRAGMENT = 6
PADDING = "The upstream service could not process this request because of its settings; " * 4
OFFSETS = range(140, 216, 3)  # where the key starts in the error text, around a 200-char cut
# How providers quote a key they refused: masked, cut, or in another letter case.
QUOTES = {
    "openai-masked": f"Incorrect API key provided: {KEY[:7]}****...{KEY[-4:]}.",
    "tail-masked": f"Invalid key {KEY[-7:]}*****; check your settings.",
    "partial": f"key fragment {KEY[12:30]} rejected",
    "upper": f"API KEY {KEY.upper()} IS NOT VALID",
    "lower": f"api key {KEY.lower()} is not valid",
}
CONNECTION = "quoting"
OWN_WORDS = f"Model provider error: connection '{CONNECTION}': the provider answered HTTP 401."


def error_text(offset: int) -> str:
    return PADDING[:offset] + KEY + " was not accepted for this model."


def key_fragments_in(text: str) -> list[str]:
    """Every 6-character piece of the key that ``text`` contains, in any letter case."""
    folded, key = text.casefold(), KEY.casefold()
    return [
        key[i : i + FRAGMENT]
        for i in range(len(key) - FRAGMENT + 1)
        if key[i : i + FRAGMENT] in folded
    ]


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
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
    env = {"PROVIDER_CONNECTIONS": json.dumps({CONNECTION: connection}), "QUOTED_LLM_KEY": KEY}
    with inprocess_stack(env) as stack:
        yield stack


@pytest.fixture
def tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "alpha"))


@pytest.fixture
def capability(api: InProcessApi, tenant: Tenant) -> str:
    return connection_capability(api, tenant, CONNECTION)


# A door: (status, headers and body as text) for one turn saying "hello".
Door = Callable[[], tuple[int, str]]


def every_door(api: InProcessApi, tenant: Tenant, capability: str) -> dict[str, Door]:
    session = open_session(api, tenant, capability)
    turn = {"input": "hello"}
    predict_path = f"/v1/capabilities/{capability}/predict"

    def http(path: str, body: dict[str, Any]) -> Door:
        def call() -> tuple[int, str]:
            answer = api.call("POST", path, token=tenant.token, json_body=body)
            return answer.status, json.dumps([answer.headers, answer.body])

        return call

    def chat(stream: bool, via_url: bool) -> Door:
        def call() -> tuple[int, str]:
            body = chat_body(capability, user("hello"), stream=stream)
            answer = (chat_stream_door if via_url else chat_http)(api, tenant, body)
            return answer.status, json.dumps([answer.headers, answer.body])

        return call

    def stream_url() -> tuple[int, str]:
        answer = chat_stream_door(api, tenant, turn, path=f"{predict_path}/stream")
        return answer.status, json.dumps([answer.headers, answer.body])

    return {
        "predict": http(predict_path, turn),
        "predict/stream (HttpApi)": http(f"{predict_path}/stream", turn),
        "messages": http(f"/v1/sessions/{session}/messages", turn),
        "predict/stream (Function URL)": stream_url,
        "chat": chat(stream=False, via_url=False),
        "chat, stream (HttpApi)": chat(stream=True, via_url=False),
        "chat, stream (Function URL)": chat(stream=True, via_url=True),
    }


def test_a_refused_key_quoted_masked_cut_or_recased_reaches_no_body_or_header_on_any_door(
    api: InProcessApi,
    fake: FakeOpenAIServer,
    tenant: Tenant,
    capability: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    doors = every_door(api, tenant, capability)
    shown: dict[str, str] = {}
    for name, quote in QUOTES.items():
        assert key_fragments_in(quote)  # the key is there to leak
        fake.error_status, fake.error_body = 401, {"error": {"message": quote}}
        for door, call in doors.items():
            status, text = call()
            assert status == 502, (door, text)
            shown[f"{name} on {door}"] = text
            assert OWN_WORDS in text and "requestId" in text, (door, text)

    assert {
        where: key_fragments_in(text) for where, text in shown.items() if key_fragments_in(text)
    } == {}
    assert not [where for where, text in shown.items() if "Incorrect" in text or "*" in text]
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Incorrect API key provided: ***" in logged  # what the provider said, logged
    assert key_fragments_in(logged) == []


def test_an_error_event_mid_stream_says_only_that_the_provider_failed(
    api: InProcessApi,
    fake: FakeOpenAIServer,
    tenant: Tenant,
    capability: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for quote in QUOTES.values():
        fake.stream_raw = (
            'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
            f"data: {json.dumps({'error': {'message': quote}})}\n\n"
        )
        status, raw = stream_url_door(api, tenant.token, capability, {"input": "hello"})
        kind, error = parse_sse(raw)[-1]
        assert (status, kind, error["code"]) == (200, "error", "provider_error")
        assert error["message"] == (
            f"Model provider error: connection '{CONNECTION}': the provider failed mid-stream."
        )
        assert error["requestId"]
        chat = chat_stream_door(api, tenant, chat_body(capability, user("hello"), stream=True))
        assert chat.status == 200 and chat.body[-2]["error"]["code"] == "provider_error"
        assert chat.body[-1] == "[DONE]"
        for text in (raw, json.dumps([chat.headers, chat.body])):
            assert key_fragments_in(text) == [] and quote not in text
    assert key_fragments_in(caplog.text) == []


def test_a_key_quoted_at_any_offset_is_hidden_in_the_log(
    api: InProcessApi,
    fake: FakeOpenAIServer,
    tenant: Tenant,
    capability: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    for offset in OFFSETS:
        text = error_text(offset)
        assert key_fragments_in(text)
        fake.error_status, fake.error_body = 401, {"error": {"message": text}}
        answer = api.call(
            "POST",
            f"/v1/capabilities/{capability}/predict",
            token=tenant.token,
            json_body={"input": "hello"},
        )
        assert answer.status == 502 and answer.body["error"]["message"] == OWN_WORDS

    logged = caplog.text + "".join(capfd.readouterr())
    assert "returned HTTP 401: The upstream service" in logged  # the log reads on
    assert key_fragments_in(logged) == []
