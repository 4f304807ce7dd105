"""Agents end to end: ``python -m local_runtime`` over HTTP, the embedded agent's tool
loop calling webhook tools on 127.0.0.1 (signed, with the session's principal), both
streaming doors' events, the URL policy, and the agents guide's webhook example run verbatim."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.webhook_server import Reply, WebhookServer
from tests.support.runtime_process import RuntimeProcess, free_port, launch_runtime
from tests.support.sse import parse_sse

pytestmark = pytest.mark.e2e
AGENTS_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}
GUIDE_TOOL_PORT = free_port()


@pytest.fixture(scope="module")
def hook() -> Iterator[WebhookServer]:
    with WebhookServer(default_output="ok") as server:
        yield server


@pytest.fixture(scope="module")
def runtime(hook: WebhookServer) -> Iterator[RuntimeProcess]:
    allowed = f"{hook.host},127.0.0.1:{GUIDE_TOOL_PORT}"
    process = launch_runtime({"CONVO_TOOL_ALLOWED_HOSTS": allowed})
    try:
        yield process
    finally:
        process.assert_stopped_cleanly()


def call(runtime: RuntimeProcess, method: str, path: str, body: Any = None, token: str = "") -> Any:
    status, _, payload = runtime.call(method, path, token=token or runtime.tokens["dev"], json=body)
    return status, payload


@pytest.fixture(scope="module")
def agent(runtime: RuntimeProcess, hook: WebhookServer) -> str:
    """An embedded agent with two webhook tools on the test server and a built-in."""
    body = {
        "name": "order desk",
        "kind": "agent",
        "maxToolSteps": 3,
        "tools": [
            {
                "name": "track_parcel",
                "description": "Tracking",
                "inputSchema": SCHEMA,
                "url": hook.url("/track"),
            },
            {
                "name": "weather",
                "description": "Weather",
                "inputSchema": SCHEMA,
                "url": hook.url("/weather"),
            },
            {"name": "lookup_order"},
        ],
    }
    status, created = call(runtime, "POST", "/v1/capabilities", body)
    assert status == 201, created
    hook.secret = created["toolSigningSecret"]
    hook.answers["/track"] = Reply(200, {"output": "left the depot; ETA 2025-06-14 via ParcelCo"})
    hook.answers["/weather"] = Reply(200, "sunny, 21 C")
    return str(created["id"])


def test_the_embedded_loop_calls_the_named_webhooks_in_order_with_the_principal(
    runtime: RuntimeProcess, hook: WebhookServer, agent: str
) -> None:
    hook.calls.clear()
    status, session = call(
        runtime,
        "POST",
        "/v1/sessions",
        {"capabilityId": agent, "externalRef": "e2e-agent", "principal": PRINCIPAL},
    )
    assert status == 201
    text = "Is the weather fine for delivery? Please track_parcel order 12345 (weather matters)."

    status, turn = call(runtime, "POST", f"/v1/sessions/{session['id']}/messages", {"input": text})

    assert status == 200, turn
    # Each named webhook once, in order of first occurrence, signed, with the principal
    assert [c.path for c in hook.calls] == ["/weather", "/track"]
    for received, tool in zip(hook.calls, ("weather", "track_parcel"), strict=True):
        assert received.signature_valid
        assert received.body == {
            "tool": tool,
            "input": {"query": text},
            "principal": PRINCIPAL,
            "sessionId": session["id"],
            "capabilityId": agent,
            "runId": turn["runId"],
        }
    # The answer quotes what they returned (the built-in ran too)
    assert 'I used weather: "sunny, 21 C".' in turn["output"]
    assert 'I used track_parcel: "left the depot; ETA 2025-06-14 via ParcelCo".' in turn["output"]
    assert "I used lookup_order: order 12345 is shipped" in turn["output"]
    # The trace: each step's principal is what the tool server received
    status, run = call(runtime, "GET", f"/v1/runs/{turn['runId']}")
    assert status == 200
    assert [s["tool"] for s in run["steps"]] == ["weather", "track_parcel", "lookup_order"]
    assert [s["principal"] for s in run["steps"][:2]] == [c.principal for c in hook.calls]
    assert run["steps"][2]["principal"] == PRINCIPAL
    assert (run["stopReason"], run["modelCalls"], run["maxToolSteps"]) == ("answered", 2, 3)
    # The follow-up is answered from the digest of turn 1
    status, follow_up = call(
        runtime, "POST", f"/v1/sessions/{session['id']}/messages", {"input": "When does it come?"}
    )
    assert status == 200 and len(hook.calls) == 2  # no tool named: none called
    assert (
        "2025-06-14" in follow_up["output"]
        and "tool results from 1 earlier turn" in (follow_up["output"])
    )


def test_a_stateless_turn_sends_null_and_a_principal_field_changes_nothing(
    runtime: RuntimeProcess, hook: WebhookServer, agent: str
) -> None:
    hook.calls.clear()
    forged = {"tenant_id": "store-b", "user_id": "admin"}
    status, refused = call(
        runtime,
        "POST",
        f"/v1/capabilities/{agent}/predict",
        {"input": "weather?", "principal": forged},
    )
    assert status == 422 and refused["error"]["code"] == "validation_error"
    assert hook.calls == []

    status, turn = call(runtime, "POST", f"/v1/capabilities/{agent}/predict", {"input": "weather?"})

    assert status == 200 and turn["sessionId"] is None
    assert [(c.path, c.principal) for c in hook.calls] == [("/weather", None)]


def test_the_streaming_door_sends_a_tool_event_per_call_then_the_answer(
    runtime: RuntimeProcess, hook: WebhookServer, agent: str
) -> None:
    hook.answers["/weather"] = Reply(503, "maintenance")
    try:
        status, _, raw = runtime.call(
            "POST",
            f"/v1/capabilities/{agent}/predict/stream",
            token=runtime.tokens["dev"],
            json={"input": "track_parcel and weather, please"},
        )
    finally:
        hook.answers["/weather"] = Reply(200, "sunny, 21 C")

    assert status == 200
    events = parse_sse(raw)
    # (no order number in the input, and search_kb is not declared: no built-in runs)
    assert events[:2] == [
        ("tool", {"name": "track_parcel", "status": "ok"}),
        ("tool", {"name": "weather", "status": "error"}),
    ]
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "done" and set(kinds[2:-1]) == {"delta"} and len(kinds) > 5
    done = events[-1][1]
    assert "".join(d["text"] for k, d in events if k == "delta") == done["output"]
    assert (
        "I tried weather, but it failed: the tool answered HTTP 503: maintenance."
        in (done["output"])
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/iam/",
        "https://127.0.0.1/x",
        "http://127.0.0.1:1/not-the-allowed-port",
        "https://localhost/x",
        "http://example.com/plain-http",
    ],
)
def test_tool_urls_outside_the_policy_are_422(runtime: RuntimeProcess, url: str) -> None:
    body = {
        "name": "x",
        "kind": "agent",
        "tools": [{"name": "t", "description": "t", "inputSchema": SCHEMA, "url": url}],
    }
    status, refused = call(runtime, "POST", "/v1/capabilities", body)
    assert status == 422, refused
    assert refused["error"]["code"] == "validation_error"
    assert refused["error"]["message"].startswith("tools.0.url:")


def test_the_secret_never_shows_again(
    runtime: RuntimeProcess, hook: WebhookServer, agent: str
) -> None:
    status, got = call(runtime, "GET", f"/v1/capabilities/{agent}")
    status_list, listed = call(runtime, "GET", "/v1/capabilities")
    assert status == status_list == 200
    text = json.dumps(got) + json.dumps(listed)
    assert hook.secret not in text and "toolSigningSecret" not in text
    assert "toolSecretCiphertext" not in text


def test_the_agents_guide_webhook_example_works_verbatim(
    runtime: RuntimeProcess, tmp_path: Path
) -> None:
    text = AGENTS_GUIDE.read_text()
    tool = re.search(
        r"<!-- order-tool:start -->\n```python\n(.*?)```\n<!-- order-tool:end -->", text, re.S
    )
    block = re.search(
        r"<!-- agent-example:start -->\n```sh\n(.*?)```\n<!-- agent-example:end -->", text, re.S
    )
    assert tool and block, "docs/agents.md has no webhook example"
    (tmp_path / "order_tool.py").write_text(tool.group(1))
    env = {
        **os.environ,
        "BASE": runtime.base_url,
        "TOKEN": runtime.tokens["dev"],
        "TOOL_PORT": str(GUIDE_TOOL_PORT),
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.group(1)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr + result.stdout
    first, second, context = (json.loads(line) for line in result.stdout.strip().splitlines())
    # Turn 1 called the tool (which saw the principal) and quoted the start of its answer
    assert 'I used order: "Order 12345 left our warehouse on June 10' in first["output"]
    assert "June 14" not in first["output"]
    assert "called for {'tenant_id': 'store-a', 'user_id': 'u_913'}" in result.stderr
    # Turn 2 answered from the replayed digest
    assert "estimated delivery: June 14." in second["output"]
    assert context["toolDigests"][0]["seq"] == first["turn"]["assistantSeq"]
    assert context["toolDigests"][0]["tools"] == ["order"]
    assert "June 14" in context["toolDigests"][0]["text"]


def test_the_agents_guide_example_says_why_when_the_tool_host_is_not_allowed(
    runtime: RuntimeProcess, tmp_path: Path
) -> None:
    text = AGENTS_GUIDE.read_text()
    block = re.search(
        r"<!-- agent-example:start -->\n```sh\n(.*?)```\n<!-- agent-example:end -->", text, re.S
    )
    assert block
    env = {
        **os.environ,
        "BASE": runtime.base_url,
        "TOKEN": runtime.tokens["dev"],
        "TOOL_PORT": str(free_port()),  # not in this runtime's CONVO_TOOL_ALLOWED_HOSTS
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.group(1)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )

    assert result.returncode != 0
    assert "validation_error: tools.0.url" in result.stderr, result.stderr
    assert result.stdout == ""  # it stopped before any session or turn
