"""OpenAI-compatible provider against a fake chat-completions server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from convo_memory.adapters.providers.factory import build_provider
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.models import ProviderConfig
from convo_memory.domain.prompt import ChatMessage, Prompt
from tests.fakes.openai_server import FakeOpenAIServer

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # urllib honours proxy variables; the fake server must be reached directly.
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def prompt(*messages: tuple[str, str], system: str = "Be brief.") -> Prompt:
    chat = tuple(ChatMessage(role, content) for role, content in messages)
    return Prompt(system=system, messages=chat, user_input=chat[-1].content)


HISTORY = (("user", "my name is Ada"), ("assistant", "Hello Ada"), ("user", "who am I?"))


def test_complete_posts_the_chat_completions_request(server: FakeOpenAIServer) -> None:
    # Given a provider with a key and limits
    provider = OpenAICompatibleProvider(
        server.base_url, "llama3", api_key="sk-test", max_tokens=128, temperature=0.2
    )
    # When it completes a prompt with history
    completion = provider.complete(prompt(*HISTORY))
    # Then the answer is choices[0].message.content
    assert completion.text == "Hello from the fake model."
    # And the server saw one well-formed request with the key as a bearer token
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.headers["Content-Type"] == "application/json"
    assert request.body == {
        "model": "llama3",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "my name is Ada"},
            {"role": "assistant", "content": "Hello Ada"},
            {"role": "user", "content": "who am I?"},
        ],
        "stream": False,
        "max_tokens": 128,
        "temperature": 0.2,
    }


def test_no_key_means_no_authorization_header(server: FakeOpenAIServer) -> None:
    provider = OpenAICompatibleProvider(server.base_url + "/", "llama3")  # trailing slash
    provider.complete(prompt(("user", "hi")))
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert "Authorization" not in request.headers
    assert set(request.body) == {"model", "messages", "stream"}


def test_the_factory_reads_the_key_from_the_named_environment_variable(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-from-env")
    config = ProviderConfig(
        type="openai", base_url=server.base_url, model_id="m1", api_key_env="FAKE_LLM_KEY"
    )
    provider = build_provider(config, "generative", [])
    assert "sk-from-env" not in repr(provider)
    provider.complete(prompt(("user", "hi")))
    assert server.requests[0].headers["Authorization"] == "Bearer sk-from-env"
    assert server.requests[0].body["model"] == "m1"


def test_stream_yields_deltas_until_done(server: FakeOpenAIServer) -> None:
    provider = OpenAICompatibleProvider(server.base_url, "llama3")
    assert list(provider.stream(prompt(("user", "hi")))) == ["Hel", "lo", " there", "!"]
    [request] = server.requests
    assert request.body["stream"] is True
    assert request.headers["Accept"] == "text/event-stream"


def test_stream_deltas_arrive_before_the_rest_of_the_body(server: FakeOpenAIServer) -> None:
    # Given a server that sends the first delta and then waits for the test
    server.gate = threading.Event()
    provider = OpenAICompatibleProvider(server.base_url, "llama3", timeout=10)
    stream = provider.stream(prompt(("user", "hi")))
    # When the test takes the first delta
    started = time.monotonic()
    first = next(stream)
    waited = time.monotonic() - started
    # Then it arrived while the server was still holding the rest back
    assert first == "Hel"
    assert not server.gate.is_set()
    assert waited < server.gate_timeout / 2
    server.gate.set()
    assert list(stream) == ["lo", " there", "!"]
    assert not server.gate_timed_out


def test_stream_parses_sse_comments_crlf_and_compact_data_lines(
    server: FakeOpenAIServer,
) -> None:
    server.stream_raw = (
        ": keep-alive\r\n\r\n"
        'event: message\r\ndata:{"choices":[{"delta":{"content":"a"}}]}\r\n\r\n'
        'data: {"choices":[]}\n\n'  # usage-only chunk
        'data: {"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}\n\n'
        "data: [DONE]\n\n"
    )
    provider = OpenAICompatibleProvider(server.base_url, "m")
    assert list(provider.stream(prompt(("user", "hi")))) == ["a", "b"]


def test_a_finished_stream_without_done_is_accepted(server: FakeOpenAIServer) -> None:
    server.stream_raw = 'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}\n\n'
    provider = OpenAICompatibleProvider(server.base_url, "m")
    assert list(provider.stream(prompt(("user", "hi")))) == ["x"]


def test_a_truncated_stream_is_an_error(server: FakeOpenAIServer) -> None:
    server.stream_raw = 'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
    provider = OpenAICompatibleProvider(server.base_url, "m")
    stream = provider.stream(prompt(("user", "hi")))
    assert next(stream) == "x"
    with pytest.raises(ProviderError, match="ended before it finished"):
        next(stream)


def test_an_error_event_mid_stream_is_an_error(server: FakeOpenAIServer) -> None:
    server.stream_raw = (
        'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
        'data: {"error":{"message":"model overloaded"}}\n\n'
    )
    provider = OpenAICompatibleProvider(server.base_url, "m")
    with pytest.raises(ProviderError, match="model overloaded"):
        list(provider.stream(prompt(("user", "hi"))))


@pytest.mark.parametrize("streaming", [False, True])
def test_http_errors_name_the_status_and_never_the_key(
    server: FakeOpenAIServer, streaming: bool
) -> None:
    server.error_status = 401
    server.error_body = {"error": {"message": "Incorrect API key provided: sk-secret-123"}}
    provider = OpenAICompatibleProvider(server.base_url, "m", api_key="sk-secret-123")
    with pytest.raises(ProviderError) as raised:
        if streaming:
            list(provider.stream(prompt(("user", "hi"))))
        else:
            provider.complete(prompt(("user", "hi")))
    message = str(raised.value)
    assert "HTTP 401" in message
    assert "Incorrect API key provided" in message
    assert "sk-secret-123" not in message
    assert raised.value.status == 502


def test_a_non_json_error_body_still_names_the_status(server: FakeOpenAIServer) -> None:
    server.error_status = 503
    server.error_body = b"<html>bad gateway</html>"
    provider = OpenAICompatibleProvider(server.base_url, "m")
    with pytest.raises(ProviderError, match="HTTP 503"):
        provider.complete(prompt(("user", "hi")))


def test_redirects_are_not_followed(server: FakeOpenAIServer) -> None:
    # Following would re-send the Authorization header to another host.
    server.error_status = 307
    server.error_headers = {"Location": "http://127.0.0.1:9/v1/chat/completions"}
    provider = OpenAICompatibleProvider(server.base_url, "m", api_key="sk-1")
    with pytest.raises(ProviderError, match="HTTP 307"):
        provider.complete(prompt(("user", "hi")))
    assert len(server.requests) == 1


def test_a_malformed_body_is_an_error(server: FakeOpenAIServer) -> None:
    server.error_status = 200
    server.error_body = {"unexpected": True}
    provider = OpenAICompatibleProvider(server.base_url, "m")
    with pytest.raises(ProviderError, match="unexpected response"):
        provider.complete(prompt(("user", "hi")))


def test_timeouts_are_provider_errors(server: FakeOpenAIServer) -> None:
    server.delay = 1.0
    provider = OpenAICompatibleProvider(server.base_url, "m", timeout=0.2)
    with pytest.raises(ProviderError, match=r"timed out after 0\.2s"):
        provider.complete(prompt(("user", "hi")))


def test_connection_refused_is_a_provider_error() -> None:
    with socket.socket() as sock:  # a free port, closed again: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAICompatibleProvider(f"http://127.0.0.1:{port}/v1", "m", timeout=2)
    with pytest.raises(ProviderError, match="could not reach"):
        provider.complete(prompt(("user", "hi")))
    with pytest.raises(ProviderError, match="could not reach"):
        list(provider.stream(prompt(("user", "hi"))))


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/v1", "127.0.0.1:80"])
def test_only_http_urls_are_accepted(url: str) -> None:
    with pytest.raises(ProviderError, match="http"):
        OpenAICompatibleProvider(url, "m")
