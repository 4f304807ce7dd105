"""Provider connections over real HTTP: `make run` configured with
CONVO_PROVIDER_CONNECTIONS, an OpenAI-compatible fake model on 127.0.0.1, and a second
listener that a workspace would like the service to call."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.runtime_process import DEV_TOKEN, REPO, RuntimeProcess, free_port, launch_runtime

pytestmark = pytest.mark.e2e
MODEL_KEY = "sk-e2e-operator-key-0123456789"


@dataclass
class Stack:
    runtime: RuntimeProcess
    model: FakeOpenAIServer
    listener: FakeOpenAIServer


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with FakeOpenAIServer() as model, FakeOpenAIServer() as listener:
        connections = {
            "local": {
                "type": "openai",
                "baseUrl": model.base_url,
                "models": ["llama3.*"],
                "apiKey": {"env": "E2E_LLM_KEY"},
                "timeoutSeconds": 20,
            }
        }
        runtime = launch_runtime(
            {
                "CONVO_PROVIDER_CONNECTIONS": json.dumps(connections),
                "E2E_LLM_KEY": MODEL_KEY,
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        try:
            yield Stack(runtime, model, listener)
        finally:
            runtime.assert_stopped_cleanly()


@pytest.fixture
def fresh(stack: Stack) -> Stack:
    for fake in (stack.model, stack.listener):
        fake.requests.clear()
        fake.gate = None
    return stack


def create(stack: Stack, provider: dict[str, Any]) -> tuple[int, Any]:
    status, _, body = stack.runtime.call(
        "POST",
        "/v1/capabilities",
        token=DEV_TOKEN,
        json={"name": "assistant", "kind": "generative", "provider": provider},
    )
    return status, body


@pytest.mark.parametrize(
    "provider",
    [
        {"type": "openai", "baseUrl": "{url}", "modelId": "m", "apiKeyEnv": "CONVO_DEV_TOKEN"},
        {"connection": "local", "modelId": "llama3.1", "baseUrl": "{url}"},
        {"connection": "local", "modelId": "llama3.1", "apiKeyEnv": "E2E_LLM_KEY"},
        {"connection": "local", "modelId": "llama3.1", "apiKey": "sk-mine"},
        {"connection": "local", "modelId": "llama3.1", "headers": {"Host": "{url}"}},
    ],
)
def test_a_capability_naming_an_endpoint_or_credential_is_422_and_nobody_is_called(
    fresh: Stack, provider: dict[str, Any]
) -> None:
    provider = json.loads(json.dumps(provider).replace("{url}", fresh.listener.base_url))

    status, body = create(fresh, provider)

    assert status == 422, body
    assert body["error"]["code"] == "validation_error"
    status, _, listed = fresh.runtime.call("GET", "/v1/capabilities", token=DEV_TOKEN)
    assert {c["id"] for c in listed["capabilities"]} == {
        "cap-generative",
        "cap-agent",
        "cap-classic",
    }
    assert fresh.listener.requests == [] and fresh.model.requests == []


def test_unknown_connections_and_models_outside_the_globs_are_422(fresh: Stack) -> None:
    for provider, fragment in [
        ({"connection": "openai", "modelId": "gpt-4o"}, "unknown connection"),
        ({"connection": "local", "modelId": "mistral"}, "does not allow"),
    ]:
        status, body = create(fresh, provider)
        assert status == 422 and fragment in body["error"]["message"]
    status, body = create(fresh, {"type": "embedded"})
    assert status == 201 and body["provider"] == {"connection": "embedded", "modelId": None}


def test_providers_are_listed_without_urls_or_keys(fresh: Stack) -> None:
    status, _, body = fresh.runtime.call("GET", "/v1/providers", token=DEV_TOKEN)

    assert status == 200
    assert body == {
        "providers": [
            {"connection": "embedded", "type": "embedded", "models": []},
            {"connection": "local", "type": "openai", "models": ["llama3.*"]},
        ]
    }
    banner = fresh.runtime.stdout
    assert "Providers    embedded, local" in banner
    assert fresh.model.base_url not in banner


def test_the_operators_key_reaches_the_model_and_no_response_or_log(fresh: Stack) -> None:
    status, created = create(fresh, {"connection": "local", "modelId": "llama3.1"})
    assert status == 201, created

    status, _, answer = fresh.runtime.call(
        "POST",
        f"/v1/capabilities/{created['id']}/predict",
        token=DEV_TOKEN,
        json={"input": "hello"},
    )

    assert status == 200 and answer["output"] == "Hello from the fake model."
    [request] = fresh.model.requests
    assert request.headers["Authorization"] == f"Bearer {MODEL_KEY}"
    _, _, stored = fresh.runtime.call("GET", f"/v1/capabilities/{created['id']}", token=DEV_TOKEN)
    _, _, providers = fresh.runtime.call("GET", "/v1/providers", token=DEV_TOKEN)
    for text in (
        json.dumps([created, answer, stored, providers]),
        fresh.runtime.stdout,
        fresh.runtime.stderr,
    ):
        assert MODEL_KEY not in text


def test_first_delta_arrives_before_the_provider_produced_its_last_token(fresh: Stack) -> None:
    gate = threading.Event()
    fresh.model.stream_chunks = ["first ", "middle ", "last"]
    fresh.model.gate, fresh.model.gate_timeout = gate, 20
    status, cap = create(fresh, {"connection": "local", "modelId": "llama3.1"})
    assert status == 201, cap
    url = urlparse(fresh.runtime.base_url)
    connection = http.client.HTTPConnection(str(url.hostname), url.port, timeout=30)
    connection.request(
        "POST",
        f"/v1/capabilities/{cap['id']}/predict/stream",
        body=json.dumps({"input": "hello"}),
        headers={"Authorization": f"Bearer {DEV_TOKEN}", "content-type": "application/json"},
    )
    response = connection.getresponse()
    assert response.status == 200
    first_event = response.readline() + response.readline()
    # The provider is still holding back everything after its first token.
    assert not gate.is_set() and not fresh.model.gate_timed_out
    assert b"event: delta" in first_event
    gate.set()
    rest = response.read().decode()
    connection.close()
    assert "event: done" in rest and '"output":"first middle last"' in rest
    assert fresh.model.requests[0].headers["Authorization"] == f"Bearer {MODEL_KEY}"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("{not json", "not valid JSON"),
        (
            '{"x": {"type": "openai", "baseUrl": "http://u:p@127.0.0.1/v1", "models": ["*"]}}',
            "userinfo",
        ),
    ],
)
def test_a_bad_connections_variable_stops_the_runtime_naming_it(value: str, fragment: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env.update(
        {
            "PORT": str(free_port()),
            "LAMBDA_PORT": str(free_port()),
            "CONVO_PROVIDER_CONNECTIONS": value,
        }
    )
    result = subprocess.run(
        [sys.executable, "-m", "local_runtime"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2, result.stderr
    assert "CONVO_PROVIDER_CONNECTIONS" in result.stderr and fragment in result.stderr
    assert "Ready." not in result.stdout
