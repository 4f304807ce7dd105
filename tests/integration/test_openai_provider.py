"""OpenAI-compatible provider against a fake chat-completions server on 127.0.0.1: the
request it sends, how it reads answers and streams, and what it refuses (redirects,
oversize bodies, slow servers) without telling how the network failed."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from convo_memory.adapters.cache_keys import PromptCacheKeys
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.adapters.providers.openai_http import UNREACHABLE
from convo_memory.adapters.registry import AdapterRegistry
from convo_memory.adapters.secrets import SecretResolver
from convo_memory.domain.connections import parse_connections
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import TokenUsage
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


def test_a_connection_sends_the_key_from_the_variable_the_operator_chose(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-from-env")
    connections = parse_connections(
        {
            "local": {
                "type": "openai",
                "baseUrl": server.base_url,
                "models": ["m*"],
                "apiKey": {"env": "FAKE_LLM_KEY"},
                "maxTokens": 99,
            }
        }
    )
    registry = AdapterRegistry(connections, secrets=SecretResolver(lambda *_: None))
    provider = registry.provider(ProviderConfig(connection="local", model_id="m1"), "generative")
    assert "sk-from-env" not in repr(provider)
    provider.complete(prompt(("user", "hi")))
    assert server.requests[0].headers["Authorization"] == "Bearer sk-from-env"
    assert server.requests[0].body["model"] == "m1"
    assert server.requests[0].body["max_tokens"] == 99


def test_a_key_source_is_read_on_every_call_so_rotation_applies(server: FakeOpenAIServer) -> None:
    keys = iter(["sk-old", "sk-new"])
    provider = OpenAICompatibleProvider(server.base_url, "m", api_key=lambda: next(keys))
    provider.complete(prompt(("user", "hi")))
    provider.complete(prompt(("user", "hi")))
    assert [r.headers["Authorization"] for r in server.requests] == [
        "Bearer sk-old",
        "Bearer sk-new",
    ]


def test_stream_yields_deltas_until_done(server: FakeOpenAIServer) -> None:
    provider = OpenAICompatibleProvider(server.base_url, "llama3")
    assert list(provider.stream(prompt(("user", "hi")))) == ["Hel", "lo", " there", "!"]
    [request] = server.requests
    assert request.body["stream"] is True
    assert request.headers["Accept"] == "text/event-stream"


@pytest.mark.parametrize("stream_usage", [None, False])
def test_a_connections_streamed_turn_reads_its_usage_unless_told_not_to(
    server: FakeOpenAIServer, stream_usage: bool | None
) -> None:
    setting = {} if stream_usage is None else {"streamUsage": stream_usage}
    connections = parse_connections(
        {"c": {"type": "openai", "baseUrl": server.base_url, "models": ["*"], **setting}}
    )
    registry = AdapterRegistry(connections, secrets=SecretResolver(lambda *_: None))
    provider = registry.provider(ProviderConfig(connection="c", model_id="m1"), "generative")
    assert isinstance(provider, OpenAICompatibleProvider)
    server.usage = {
        "prompt_tokens": 1500,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 1280},
    }
    texts: list[str] = []

    step = provider.step(prompt(("user", "hi")), (), (), timeout=5, on_text=texts.append)

    assert "".join(texts) == step.text == "Hello there!"
    [request] = server.requests
    if stream_usage is None:  # asked, and the usage-only last chunk read
        assert request.body["stream_options"] == {"include_usage": True}
        assert step.usage == TokenUsage(1500, 4, cached_input_tokens=1280)
    else:  # for a server that refuses stream_options
        assert "stream_options" not in request.body
        assert step.usage is None


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


def test_an_error_event_mid_stream_is_an_error_logged_not_relayed(
    server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.stream_raw = (
        'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
        'data: {"error":{"message":"model overloaded"}}\n\n'
    )
    provider = OpenAICompatibleProvider(server.base_url, "m")
    with pytest.raises(ProviderError, match="failed mid-stream") as raised:
        list(provider.stream(prompt(("user", "hi"))))
    assert "overloaded" not in str(raised.value)
    assert "model overloaded" in caplog.text


@pytest.mark.parametrize("streaming", [False, True])
def test_http_errors_name_the_status_and_log_what_the_provider_said_redacted(
    server: FakeOpenAIServer, streaming: bool, caplog: pytest.LogCaptureFixture
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
    assert message == "Model provider error: the provider answered HTTP 401."
    assert raised.value.status == 502 and raised.value.upstream_status == 401
    assert "Incorrect API key provided: ***" in caplog.text
    assert "secret" not in caplog.text


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
    with pytest.raises(ProviderError) as raised:
        provider.complete(prompt(("user", "hi")))
    assert raised.value.message == UNREACHABLE


def test_a_server_that_trickles_its_body_is_cut_off_by_the_timeout() -> None:
    # Each byte arrives well within the read timeout; the whole body never would.
    with TricklingServer(byte_interval=0.05) as trickle:
        provider = OpenAICompatibleProvider(trickle.base_url, "m", timeout=0.5)
        with pytest.raises(ProviderError) as raised:
            provider.complete(prompt(("user", "hi")))
    assert raised.value.message == UNREACHABLE
    assert trickle.bytes_sent < trickle.body_size


def test_an_oversize_completion_body_is_refused(server: FakeOpenAIServer) -> None:
    server.error_status = 200
    server.error_body = b'{"choices": [{"message": {"content": "' + b"x" * 2048 + b'"}}]}'
    provider = OpenAICompatibleProvider(server.base_url, "m", max_completion_bytes=1024)
    with pytest.raises(ProviderError, match="larger than 1024 bytes"):
        provider.complete(prompt(("user", "hi")))
    # The same answer within the cap is read.
    roomy = OpenAICompatibleProvider(server.base_url, "m", max_completion_bytes=4096)
    assert roomy.complete(prompt(("user", "hi"))).text == "x" * 2048


def test_the_default_completion_cap_is_four_mebibytes(server: FakeOpenAIServer) -> None:
    server.error_status = 200
    server.error_body = b" " * (4 * 1024 * 1024 + 1)
    provider = OpenAICompatibleProvider(server.base_url, "m")
    with pytest.raises(ProviderError, match="larger than 4194304 bytes"):
        provider.complete(prompt(("user", "hi")))


def test_an_oversize_stream_is_refused(server: FakeOpenAIServer) -> None:
    server.stream_chunks = ["y" * 600] * 5
    provider = OpenAICompatibleProvider(server.base_url, "m", max_stream_bytes=2000)
    stream = provider.stream(prompt(("user", "hi")))
    with pytest.raises(ProviderError, match="size limit"):
        list(stream)


def test_refused_and_timed_out_connections_read_the_same(server: FakeOpenAIServer) -> None:
    # An error must not tell an open (but silent) port from a closed one.
    server.delay = 2.0
    silent = OpenAICompatibleProvider(server.base_url, "m", timeout=0.2)
    closed = OpenAICompatibleProvider(f"http://127.0.0.1:{free_port()}/v1", "m", timeout=0.2)
    messages = []
    for provider in (silent, closed):
        with pytest.raises(ProviderError) as raised:
            provider.complete(prompt(("user", "hi")))
        messages.append(raised.value.message)
    assert messages == [UNREACHABLE, UNREACHABLE]


def free_port() -> int:
    with socket.socket() as sock:  # a free port, closed again: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TricklingServer:
    """Answers 200 with a declared body that it then sends one byte at a time."""

    def __init__(self, byte_interval: float, body_size: int = 10_000) -> None:
        self.byte_interval = byte_interval
        self.body_size = body_size
        self.bytes_sent = 0
        self._stop = threading.Event()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {self.body_size}\r\n\r\n".encode()
            )
            try:
                while not self._stop.wait(self.byte_interval) and self.bytes_sent < self.body_size:
                    connection.sendall(b" ")
                    self.bytes_sent += 1
            except OSError:
                return  # the client gave up, as it should

    def __enter__(self) -> TricklingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()


def test_connection_refused_is_a_provider_error() -> None:
    port = free_port()
    provider = OpenAICompatibleProvider(f"http://127.0.0.1:{port}/v1", "m", timeout=2)
    with pytest.raises(ProviderError, match="could not reach"):
        provider.complete(prompt(("user", "hi")))
    with pytest.raises(ProviderError, match="could not reach"):
        list(provider.stream(prompt(("user", "hi"))))


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/v1", "127.0.0.1:80"])
def test_only_http_urls_are_accepted(url: str) -> None:
    with pytest.raises(ProviderError, match="http"):
        OpenAICompatibleProvider(url, "m")


# -- prompt_cache_key ------------------------------------------------------------------


def keyed_provider(server: FakeOpenAIServer, **setting: object) -> OpenAICompatibleProvider:
    """The registry's provider on an openai connection (with ``setting``), whose
    prompt-cache keys come from a deployment secret."""
    connections = parse_connections(
        {"c": {"type": "openai", "baseUrl": server.base_url, "models": ["*"], **setting}}
    )
    registry = AdapterRegistry(
        connections,
        secrets=SecretResolver(lambda *_: None),
        cache_keys=PromptCacheKeys(lambda: b"the deployment's cursor key, 64 chars" * 2),
    )
    provider = registry.provider(ProviderConfig(connection="c", model_id="m1"), "generative")
    assert isinstance(provider, OpenAICompatibleProvider)
    return provider


def of(lineage: str, *messages: tuple[str, str]) -> Prompt:
    return dataclasses.replace(prompt(*messages), lineage=lineage)


def test_each_conversation_sends_one_prompt_cache_key_that_names_nothing(
    server: FakeOpenAIServer,
) -> None:
    provider = keyed_provider(server)

    provider.complete(of("sess_0001", ("user", "hi")))
    provider.step(of("sess_0001", *HISTORY), (), (), timeout=5, on_text=lambda _: None)
    provider.complete(of("sess_0002", ("user", "hi")))
    provider.complete(prompt(("user", "a stateless call")))

    first, again, other, stateless = server.cache_keys
    assert first == again and first != other  # one per conversation, streamed or not
    assert stateless is None and "prompt_cache_key" not in server.requests[3].body
    assert first is not None and len(first) == 32 and int(first, 16) >= 0
    assert "sess_0001" not in first and "0001" not in first


def test_a_connection_can_turn_the_key_off_for_a_server_that_refuses_it(
    server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.refuse_fields = ("prompt_cache_key",)  # as a strict server answers
    with pytest.raises(ProviderError, match="answered HTTP 400"):
        keyed_provider(server).complete(of("sess_0001", ("user", "hi")))
    # What the server said is the operator's to read, in the log.
    assert "HTTP 400: unexpected field: prompt_cache_key" in caplog.text

    completion = keyed_provider(server, promptCacheKey=False).complete(
        of("sess_0001", ("user", "hi"))
    )

    assert completion.text == "Hello from the fake model."
    refused, accepted = server.cache_keys
    assert refused is not None and accepted is None


def test_a_completion_reads_the_tokens_the_provider_read_from_its_cache(
    server: FakeOpenAIServer,
) -> None:
    server.usage = {
        "prompt_tokens": 2048,
        "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 1920},
    }

    completion = keyed_provider(server).complete(of("sess_0001", ("user", "hi")))

    assert completion.usage == TokenUsage(2048, 9, cached_input_tokens=1920)
