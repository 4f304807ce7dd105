"""A workspace as the integration tests use it (its id and token), and the calls they
make as it on the in-process stack: open a session, a turn, the transcript."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from tests.support.inprocess_api import InProcessApi


@dataclass
class Tenant:
    workspace_id: str
    token: str


def connection_capability(
    api: InProcessApi, tenant: Tenant, connection: str, model: str = "m", **extra: Any
) -> str:
    """A generative capability of ``tenant`` on the operator's ``connection``: its id."""
    body = {
        "name": connection,
        "kind": "generative",
        "provider": {"connection": connection, "modelId": model},
        **extra,
    }
    response = api.call("POST", "/v1/capabilities", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def open_session(
    api: InProcessApi, tenant: Tenant, capability: str = "cap-generative", **extra: Any
) -> str:
    body = {"capabilityId": capability, "externalRef": "customer-4471", **extra}
    response = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def predict(
    api: InProcessApi,
    tenant: Tenant,
    session_id: str | None,
    text: str,
    cap: str = "cap-generative",
) -> Any:
    body: dict[str, Any] = {"input": text}
    if session_id:
        body["sessionId"] = session_id
    return api.call("POST", f"/v1/capabilities/{cap}/predict", token=tenant.token, json_body=body)


def transcript(api: InProcessApi, tenant: Tenant, session_id: str) -> list[dict[str, Any]]:
    response = api.call(
        "GET", f"/v1/sessions/{session_id}/messages", token=tenant.token, query={"limit": 100}
    )
    assert response.status == 200
    return list(response.body["messages"])


def unique_ref() -> str:
    """An end user's id no other test uses (tests share one runtime)."""
    return f"customer-{uuid.uuid4().hex[:12]}"
