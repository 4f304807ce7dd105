"""OpenAI-compatible connections go through the operator's proxy (``HTTPS_PROXY``,
``HTTP_PROXY``, ``NO_PROXY``), within the one deadline of the call: an https endpoint
through a ``CONNECT`` tunnel, its certificate verified for the endpoint's name (not the
proxy's), with the proxy's credentials; an http one by the whole URL; a host ``NO_PROXY``
names directly; a proxy that refuses or stalls is the provider's "could not reach", by
the deadline, naming neither the proxy nor its credentials.

The endpoint is called ``model.test``: only the proxy knows it (as 127.0.0.1), so a call
that went around the proxy could not reach it."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from convo_memory.adapters.providers import openai_http
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.adapters.providers.openai_http import UNREACHABLE
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.prompt import ChatMessage, Prompt
from tests.fakes.connect_proxy import ConnectProxy
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.tls import TlsPair, tls_for

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
HOST = "model.test"
TIMEOUT = 1.0
SLACK = 1.0


@pytest.fixture(autouse=True)
def clean_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TlsPair:
    pair = tls_for(tmp_path, HOST)
    monkeypatch.setattr(openai_http, "_tls_context", lambda: pair.client)
    return pair


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    with ConnectProxy(hosts={HOST: "127.0.0.1"}) as running:
        yield running


def ask(base_url: str, timeout: float = 10.0) -> str:
    provider = OpenAICompatibleProvider(base_url, "m", api_key="sk-test-key", timeout=timeout)
    prompt = Prompt(system="", messages=(ChatMessage("user", "hello"),), user_input="hello")
    return provider.complete(prompt).text


def test_an_https_endpoint_is_reached_through_the_proxys_tunnel_with_its_credentials(
    tls: TlsPair, proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url("egress:p%40ss"))
    with FakeOpenAIServer(reply="through the tunnel", tls=tls.server) as server:
        port = server.port
        answer = ask(f"https://{HOST}:{port}/v1")
        (request,) = server.requests

    assert answer == "through the tunnel"
    (tunnel,) = proxy.seen
    assert tunnel.line == f"CONNECT {HOST}:{port} HTTP/1.1"
    assert tunnel.headers["Proxy-Authorization"] == "Basic " + base64.b64encode(
        b"egress:p@ss"
    ).decode("ascii")
    # Inside the tunnel: the endpoint's own request, its key for the endpoint only.
    assert request.headers["Authorization"] == "Bearer sk-test-key"
    assert "Proxy-Authorization" not in request.headers
    assert request.headers["Host"] == f"{HOST}:{port}"


def test_the_certificate_is_verified_for_the_endpoint_through_the_tunnel(
    tmp_path: Path, tls: TlsPair, proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url())
    (tmp_path / "other").mkdir()
    other = tls_for(tmp_path / "other", "someone-else.test")  # a certificate for another name
    with (
        FakeOpenAIServer(tls=other.server) as server,
        pytest.raises(ProviderError, match="could not reach"),
    ):
        ask(f"https://{HOST}:{server.port}/v1")
    assert len(proxy.seen) == 1  # the tunnel opened; the handshake failed


def test_an_http_endpoint_is_asked_through_the_proxy_by_its_whole_url(
    proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url("egress:secret"))
    with FakeOpenAIServer(reply="forwarded") as server:
        port = server.port
        answer = ask(f"http://{HOST}:{port}/v1")

    assert answer == "forwarded"
    (forwarded,) = proxy.seen
    assert forwarded.line == f"POST http://{HOST}:{port}/v1/chat/completions HTTP/1.1"
    assert forwarded.headers["Proxy-Authorization"].startswith("Basic ")


def test_no_proxy_and_loopback_endpoints_are_reached_directly(
    proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    monkeypatch.setenv("NO_PROXY", f"example.org,.{HOST}")
    with FakeOpenAIServer(reply="direct") as server:
        assert ask(server.base_url) == "direct"  # 127.0.0.1: never through a proxy
        with pytest.raises(ProviderError, match="could not reach"):
            # NO_PROXY names it: asked directly, where no resolver knows model.test.
            ask(f"http://api.{HOST}:{server.port}/v1", timeout=2.0)
    assert proxy.seen == []


@pytest.mark.parametrize("behaviour", ["refuses", "stalls"])
def test_a_proxy_that_refuses_or_stalls_is_unreachable_by_the_one_deadline(
    tls: TlsPair,
    proxy: ConnectProxy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    behaviour: str,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url("egress:hunter2-secret"))
    proxy.refuse, proxy.stall = (407, False) if behaviour == "refuses" else (None, True)
    began = time.monotonic()
    with pytest.raises(ProviderError) as raised, caplog.at_level(logging.DEBUG):
        ask(f"https://{HOST}:443/v1", timeout=TIMEOUT)
    took = time.monotonic() - began

    assert raised.value.message == UNREACHABLE
    assert took < TIMEOUT + SLACK
    assert len(proxy.seen) == 1
    assert "hunter2" not in caplog.text and str(proxy.port) not in caplog.text


def test_a_proxy_setting_that_is_not_an_http_url_fails_the_call_not_around_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ProviderError, match="proxy setting is not an http:// URL"):
        ask(f"https://{HOST}/v1")
