"""A tool or model endpoint that sends its status line and then trickles header lines
(one every half second, for 40 s) cannot hold a turn open: the whole call ends by one
deadline, on the HTTP predict door and on the streaming door (StreamDoor), and the
same holds for name resolution and the TLS handshake. Servers run on 127.0.0.1 and
stop trickling when each test ends."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory.adapters import deadline_http
from convo_memory.adapters.deadline_http import Deadline, DeadlineConnection
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.adapters.providers.openai_http import UNREACHABLE
from convo_memory.adapters.tools import url_policy
from convo_memory.adapters.tools.url_policy import NOT_ALLOWED, UrlPolicy
from convo_memory.adapters.tools.webhook import WebhookClient, webhook_body
from convo_memory.domain.allowed_hosts import parse_allowed_hosts
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.prompt import Prompt
from convo_memory.services.admin import create_workspace
from tests.fakes.trickle_server import HeaderTrickler
from tests.support.agent_api import create_agent, predict, stream_url_door, webhook_tool
from tests.support.inprocess_api import InProcessApi, inprocess_stack
from tests.support.sse import parse_sse

TOOL_TIMEOUT = 1.0
PROVIDER_TIMEOUT = 1.0
# What a call may take beyond its timeout (the bound: "the timeout plus a second").
SLACK = 1.0
# What a whole turn around a tool call may take beyond the tool's timeout on a loaded
# machine (its model calls and writes too): far below the 40 s the trickle would hold it.
TURN_SLACK = 4.0


@pytest.fixture
def trickler() -> Iterator[HeaderTrickler]:
    with HeaderTrickler(interval=0.5, duration=40) as server:
        yield server


def timed(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    began = time.monotonic()
    result = call(*args, **kwargs)
    return result, time.monotonic() - began


# ------------------------------------------------------------------ the tool, both doors


@pytest.fixture
def api(trickler: HeaderTrickler) -> Iterator[InProcessApi]:
    env = {"TOOL_ALLOWED_HOSTS": trickler.host, "TOOL_TIMEOUT_SECONDS": str(TOOL_TIMEOUT)}
    with inprocess_stack(env) as stack:
        yield stack


@pytest.fixture
def token(api: InProcessApi) -> str:
    return create_workspace(api.container.adapters.stores.tokens, "alpha").token


@pytest.fixture
def agent(api: InProcessApi, token: str, trickler: HeaderTrickler) -> str:
    capability, _, _ = create_agent(api, token, webhook_tool("order", trickler.url("/order")))
    return capability


def test_a_tool_trickling_headers_times_out_on_the_predict_door(
    api: InProcessApi, token: str, agent: str, trickler: HeaderTrickler
) -> None:
    answer, took = timed(predict, api, token, agent, "where is my order?")

    assert answer.status == 200
    assert took < TOOL_TIMEOUT + TURN_SLACK
    assert "the tool did not answer within 1.0 s" in answer.body["output"]
    run = api.call("GET", f"/v1/runs/{answer.body['runId']}", token=token).body
    assert [step["status"] for step in run["steps"]] == ["timeout"]
    assert run["steps"][0]["durationMs"] < (TOOL_TIMEOUT + SLACK) * 1000  # the call itself
    assert trickler.connections == 1 and trickler.pieces_sent >= 1  # it did trickle


def test_a_tool_trickling_headers_times_out_on_the_streaming_door(
    api: InProcessApi, token: str, agent: str
) -> None:
    (status, raw), took = timed(stream_url_door, api, token, agent, {"input": "my order?"})

    assert status == 200
    assert took < TOOL_TIMEOUT + TURN_SLACK
    events = parse_sse(raw)
    assert events[0] == ("tool", {"name": "order", "status": "timeout"})
    assert events[-1][0] == "done"
    assert "the tool did not answer within 1.0 s" in events[-1][1]["output"]
    run = api.call("GET", f"/v1/runs/{events[-1][1]['runId']}", token=token).body
    [step] = run["steps"]
    assert step["status"] == "timeout" and step["durationMs"] < (TOOL_TIMEOUT + SLACK) * 1000


# ------------------------------------------------------------------ the provider, both doors


@pytest.fixture
def model_api(trickler: HeaderTrickler) -> Iterator[InProcessApi]:
    connection = {
        "type": "openai",
        "baseUrl": trickler.url("/v1"),
        "models": ["*"],
        "timeoutSeconds": PROVIDER_TIMEOUT,
    }
    env = {"PROVIDER_CONNECTIONS": json.dumps({"trickle": connection})}
    with inprocess_stack(env) as stack:
        yield stack


def generative(api: InProcessApi, token: str) -> str:
    body = {
        "name": "assistant",
        "kind": "generative",
        "provider": {"connection": "trickle", "modelId": "m"},
    }
    created = api.call("POST", "/v1/capabilities", token=token, json_body=body)
    assert created.status == 201, created.body
    return str(created.body["id"])


def test_a_provider_trickling_headers_is_a_502_within_its_timeout_on_both_doors(
    model_api: InProcessApi, trickler: HeaderTrickler
) -> None:
    token = create_workspace(model_api.container.adapters.stores.tokens, "alpha").token
    capability = generative(model_api, token)

    answer, took = timed(predict, model_api, token, capability, "hello")
    (status, raw), streamed_took = timed(
        stream_url_door, model_api, token, capability, {"input": "hello"}
    )

    assert answer.status == 502 and answer.body["error"]["code"] == "provider_error"
    assert answer.body["error"]["message"] == UNREACHABLE.replace(": ", ": connection 'trickle': ")
    assert answer.body["error"]["requestId"]
    assert took < PROVIDER_TIMEOUT + TURN_SLACK  # a whole turn; the call's own bound below
    streamed = json.loads(raw)
    assert status == 502 and streamed["error"]["code"] == "provider_error"
    assert streamed["error"]["requestId"]
    assert streamed_took < PROVIDER_TIMEOUT + TURN_SLACK
    assert trickler.connections == 2 and trickler.pieces_sent >= 2


def test_a_streamed_completion_is_bounded_by_the_turns_time_too(
    trickler: HeaderTrickler,
) -> None:
    # The provider's timeout is long; the turn has 0.8 s left: that is the bound.
    provider = OpenAICompatibleProvider(trickler.url("/v1"), "m", timeout=30)
    prompt = Prompt(system="", messages=())
    began = time.monotonic()
    with pytest.raises(ProviderError, match="could not reach"):
        provider.step(prompt, (), (), timeout=0.8, on_text=lambda text: None)
    assert time.monotonic() - began < 0.8 + SLACK


# ------------------------------------------------------------------ the transport itself


def test_a_trickled_tls_handshake_ends_by_the_deadline() -> None:
    with HeaderTrickler(interval=0.1, duration=40, handshake=True) as tls_trickler:
        client = WebhookClient(UrlPolicy(parse_allowed_hosts([tls_trickler.host])))
        url = f"https://127.0.0.1:{tls_trickler.port}/tool"
        body = webhook_body("t", {}, None, None, "cap", "run")

        outcome, took = timed(client.call, url, body, "secret", 0.8)

    assert outcome.status == "timeout"
    assert took < 0.8 + SLACK
    assert tls_trickler.pieces_sent >= 3  # the handshake was fed, slowly, all along


class SlowResolver:
    """A resolver that answers only when released (at the latest when the test ends)."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.release = threading.Event()

    def __call__(self, host: str, port: int) -> list[str]:
        self.release.wait(30)
        return self.addresses


@pytest.fixture
def slow_resolver() -> Iterator[SlowResolver]:
    resolver = SlowResolver(["93.184.216.34"])
    yield resolver
    resolver.release.set()


def test_name_resolution_is_bounded_by_the_calls_deadline(slow_resolver: SlowResolver) -> None:
    client = WebhookClient(UrlPolicy(resolve=slow_resolver))
    body = webhook_body("t", {}, None, None, "cap", "run")

    outcome, took = timed(client.call, "https://slow.example/tool", body, "secret", 0.5)

    assert outcome.status == "timeout"
    assert took < 0.5 + SLACK


def test_a_slow_resolver_at_creation_reads_as_a_name_that_does_not_resolve(
    slow_resolver: SlowResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(url_policy, "RESOLVE_SECONDS", 0.3)

    problem, took = timed(UrlPolicy(resolve=slow_resolver).problem, "https://slow.example/x")

    assert problem == NOT_ALLOWED
    assert took < 0.3 + SLACK


def test_the_provider_resolves_its_host_within_the_deadline(
    slow_resolver: SlowResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deadline_http, "system_resolve", slow_resolver)
    connection = DeadlineConnection("model.example", 80, Deadline(0.5))

    began = time.monotonic()
    with pytest.raises(TimeoutError):
        connection.connect()
    assert time.monotonic() - began < 0.5 + SLACK


def test_the_deadline_covers_every_read_not_each_one(trickler: HeaderTrickler) -> None:
    # Each header line arrives within 0.5 s, well inside any per-read timeout.
    connection = DeadlineConnection("127.0.0.1", trickler.port, Deadline(1.2))
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        connection.request("GET", "/")
        connection.getresponse()
    connection.close()
    assert 1.2 <= time.monotonic() - began < 1.2 + SLACK
    assert trickler.pieces_sent >= 2
