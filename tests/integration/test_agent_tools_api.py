"""Agent capabilities with a real webhook tool, through the real handlers on the
in-process stack (moto: DynamoDB, SQS, KMS): the signing secret, the principal the tool
receives, the events of both streaming doors, the URL policy at creation, and traces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from convo_memory.services.admin import create_workspace
from tests.fakes.webhook_server import Reply, WebhookServer
from tests.support.agent_api import (
    create_agent,
    message,
    open_session,
    predict,
    run_retention,
    stream_url_door,
    webhook_tool,
)
from tests.support.inprocess_api import AwsBackend, InProcessApi, serving
from tests.support.sse import parse_sse

PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
ETA_RESULT = "Order 12345 left the depot with ParcelCo; estimated delivery 2025-06-14."


@pytest.fixture
def hook() -> Iterator[WebhookServer]:
    with WebhookServer(default_output=ETA_RESULT) as server:
        yield server


@pytest.fixture
def api(backend: AwsBackend, hook: WebhookServer) -> Iterator[InProcessApi]:
    with serving(backend, {"TOOL_ALLOWED_HOSTS": hook.host}) as stack:
        yield stack


@pytest.fixture
def token(api: InProcessApi) -> str:
    return create_workspace(api.container.adapters.stores.tokens, "alpha").token


@pytest.fixture
def agent(api: InProcessApi, token: str, hook: WebhookServer) -> str:
    """An agent whose webhook tool "order" is the test server; its secret is set there."""
    cap_id, secret, _ = create_agent(api, token, webhook_tool("order", hook.url("/order")))
    assert secret is not None
    hook.secret = secret
    return cap_id


def workspace_of(api: InProcessApi, token: str) -> str:
    workspace = api.container.tokens.workspace_for(token)
    assert workspace is not None
    return workspace


def test_the_signing_secret_is_shown_once_and_stored_only_encrypted(
    api: InProcessApi, token: str, hook: WebhookServer
) -> None:
    cap_id, secret, created = create_agent(api, token, webhook_tool("order", hook.url("/order")))
    assert secret is not None and created["tools"][0]["url"] == hook.url("/order")

    # Never again through the API
    got = api.call("GET", f"/v1/capabilities/{cap_id}", token=token)
    listed = api.call("GET", "/v1/capabilities", token=token)
    for shown in (got.body, *listed.body["capabilities"]):
        assert "toolSigningSecret" not in shown and "toolSecretCiphertext" not in shown
    assert secret not in json.dumps(got.body) + json.dumps(listed.body)

    # Not in the table in plaintext: a KMS ciphertext bound to this workspace and capability
    workspace = workspace_of(api, token)
    item = api.container.infrastructure.clients["dynamodb"].get_item(
        TableName=api.container.settings.table_name,
        Key={"pk": {"S": f"WS#{workspace}"}, "sk": {"S": f"CAP#{cap_id}"}},
    )["Item"]
    assert secret not in json.dumps(item)
    ciphertext = json.loads(item["body"]["S"])["toolSecretCiphertext"]
    kms = api.container.infrastructure.clients["kms"]
    import base64

    blob = base64.b64decode(ciphertext)
    context = {"workspaceId": workspace, "capabilityId": cap_id}
    assert kms.decrypt(CiphertextBlob=blob, EncryptionContext=context)["Plaintext"] == (
        secret.encode()
    )
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob, EncryptionContext={**context, "capabilityId": "cap_x"})


def test_the_tool_receives_exactly_the_sessions_principal_signed(
    api: InProcessApi, token: str, hook: WebhookServer, agent: str
) -> None:
    session_id = open_session(api, token, agent, principal=PRINCIPAL)

    turn = message(api, token, session_id, "Where is order 12345?")

    assert turn.status == 200, turn.body
    [call] = hook.calls
    assert call.signature_valid
    assert call.body == {
        "tool": "order",
        "input": {"query": "Where is order 12345?"},
        "principal": PRINCIPAL,
        "sessionId": session_id,
        "capabilityId": agent,
        "runId": turn.body["runId"],
    }
    # The trace says exactly what was sent, and what came back
    run = api.call("GET", f"/v1/runs/{turn.body['runId']}", token=token).body
    [step] = run["steps"]
    assert step["principal"] == call.principal == run["principal"] == PRINCIPAL
    assert (step["tool"], step["input"], step["output"], step["status"]) == (
        "order",
        call.body["input"],
        ETA_RESULT,
        "ok",
    )
    assert step["startedAt"].endswith("Z") and step["durationMs"] >= 0


def test_a_stateless_turn_sends_a_null_principal(
    api: InProcessApi, token: str, hook: WebhookServer, agent: str
) -> None:
    turn = predict(api, token, agent, "order status please")
    assert turn.status == 200, turn.body
    assert [c.principal for c in hook.calls] == [None]
    assert hook.calls[0].body["sessionId"] is None
    run = api.call("GET", f"/v1/runs/{turn.body['runId']}", token=token).body
    assert run["steps"][0]["principal"] is None


def test_a_body_field_named_principal_changes_nothing(
    api: InProcessApi, token: str, hook: WebhookServer, agent: str
) -> None:
    session_id = open_session(api, token, agent, principal=PRINCIPAL)
    forged = {"tenant_id": "store-b", "user_id": "admin"}

    refusals = [
        predict(api, token, agent, "order?", sessionId=session_id, principal=forged),
        predict(api, token, agent, "order?", principal=forged),
        message(api, token, session_id, "order?", principal=forged),
        api.call(
            "POST",
            f"/v1/capabilities/{agent}/predict/stream",
            token=token,
            json_body={"input": "order?", "sessionId": session_id, "principal": forged},
        ),
    ]
    status, raw = stream_url_door(
        api, token, agent, {"input": "order?", "sessionId": session_id, "principal": forged}
    )

    for refused in refusals:
        assert refused.status == 422 and refused.body["error"]["code"] == "validation_error"
    assert status == 422 and json.loads(raw)["error"]["code"] == "validation_error"
    assert hook.calls == []  # no tool was called
    # The session's stamped principal is what the next real turn sends
    assert message(api, token, session_id, "order?").status == 200
    assert [c.principal for c in hook.calls] == [PRINCIPAL]


def test_both_streaming_doors_send_tool_events_then_the_answer(
    api: InProcessApi, token: str, hook: WebhookServer, agent: str
) -> None:
    session_id = open_session(api, token, agent)
    buffered = api.call(
        "POST",
        f"/v1/capabilities/{agent}/predict/stream",
        token=token,
        json_body={"input": "order one", "sessionId": session_id},
    )
    status, raw = stream_url_door(
        api, token, agent, {"input": "order two", "sessionId": session_id}
    )

    assert buffered.status == status == 200
    for events in (parse_sse(buffered.body), parse_sse(raw)):
        kinds = [kind for kind, _ in events]
        assert events[0] == ("tool", {"name": "order", "status": "ok"})
        assert kinds[-1] == "done" and set(kinds[1:-1]) == {"delta"} and len(kinds) > 3
        done = events[-1][1]
        assert "".join(data["text"] for kind, data in events if kind == "delta") == done["output"]
        assert done["recorded"] is True
    assert len(hook.calls) == 2


def test_a_failing_tool_is_an_error_the_turn_survives(
    api: InProcessApi, token: str, hook: WebhookServer, agent: str
) -> None:
    hook.answers["/order"] = Reply(500, "database on fire")
    session_id = open_session(api, token, agent)

    status, raw = stream_url_door(api, token, agent, {"input": "order?", "sessionId": session_id})

    events = parse_sse(raw)
    assert status == 200 and events[0] == ("tool", {"name": "order", "status": "error"})
    done = events[-1][1]
    assert (
        "I tried order, but it failed: the tool answered HTTP 500: database on fire."
        in (done["output"])
    )
    run = api.call("GET", f"/v1/runs/{done['runId']}", token=token).body
    assert run["steps"][0]["status"] == "error"
    context = api.call("GET", f"/v1/sessions/{session_id}/context", token=token).body
    assert context["toolDigests"][0]["text"].startswith('order({"query": "order?"}) -> [error]')


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.7/tool",
        "https://169.254.169.254/latest/meta-data/",
        "https://127.0.0.1/tool",
        "https://localhost/tool",
        "http://[::1]:8080/tool",
    ],
)
def test_private_loopback_and_metadata_urls_are_422_at_creation(
    api: InProcessApi, token: str, url: str
) -> None:
    response = api.call(
        "POST",
        "/v1/capabilities",
        token=token,
        json_body={"name": "x", "kind": "agent", "tools": [webhook_tool("t", url)]},
    )
    assert response.status == 422
    assert response.body["error"]["code"] == "validation_error"
    assert response.body["error"]["message"].startswith("tools.0.url:")
    listed = api.call("GET", "/v1/capabilities", token=token).body["capabilities"]
    assert all(c["tools"] == [] or c["tools"][0]["name"] != "t" for c in listed)


def test_the_secret_is_decrypted_once_per_container(
    api: InProcessApi, token: str, hook: WebhookServer, agent: str
) -> None:
    decrypts: list[Any] = []
    api.container.infrastructure.clients["kms"].meta.events.register(
        "after-call.kms.Decrypt", lambda **kw: decrypts.append(kw)
    )
    session_id = open_session(api, token, agent)
    for text in ("order one", "order two", "order three"):
        assert message(api, token, session_id, text).status == 200
    assert len(hook.calls) == 3 and all(c.signature_valid for c in hook.calls)
    assert len(decrypts) == 1


def test_traces_outlive_deletion_and_retention_and_stay_in_their_workspace(
    api: InProcessApi, token: str, hook: WebhookServer, agent: str
) -> None:
    kept = open_session(api, token, agent, principal=PRINCIPAL)
    deleted = open_session(api, token, agent, principal=PRINCIPAL)
    purged_run = message(api, token, kept, "order 1").body["runId"]
    deleted_run = message(api, token, deleted, "order 2").body["runId"]

    assert api.call("DELETE", f"/v1/sessions/{deleted}", token=token).status == 204
    later = datetime.now(UTC) + timedelta(days=8)
    run_retention(api, later)
    run_retention(api, later + timedelta(days=31))
    assert api.call("GET", f"/v1/sessions/{kept}", token=token).status == 404  # purged

    for run_id, call in ((purged_run, hook.calls[0]), (deleted_run, hook.calls[1])):
        run = api.call("GET", f"/v1/runs/{run_id}", token=token)
        assert run.status == 200
        assert run.body["steps"][0]["principal"] == call.principal == PRINCIPAL
    other = create_workspace(api.container.adapters.stores.tokens, "beta").token
    hidden = api.call("GET", f"/v1/runs/{purged_run}", token=other)
    assert hidden.status == 404 and hidden.body["error"]["code"] == "run_not_found"
