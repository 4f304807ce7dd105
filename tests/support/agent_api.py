"""Shared helpers for agent tests on the in-process stack: a webhook agent capability,
sessions, turns through each door, the retention run, and the stream door."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.inprocess_api import InProcessApi

RETENTION_EVENT = Path(__file__).resolve().parents[2] / "events" / "retention_schedule.json"
TRACK_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What the user asked."}},
    "required": ["query"],
}


def webhook_tool(name: str, url: str, description: str = "Where a parcel is") -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": TRACK_SCHEMA, "url": url}


def create_agent(
    api: InProcessApi, token: str, *tools: dict[str, Any], **extra: Any
) -> tuple[str, str | None, Any]:
    """(capability id, toolSigningSecret, the whole 201 body)."""
    body = {"name": "orders agent", "kind": "agent", "tools": list(tools), **extra}
    response = api.call("POST", "/v1/capabilities", token=token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"]), response.body.get("toolSigningSecret"), response.body


def open_session(api: InProcessApi, token: str, capability: str, **extra: Any) -> str:
    body = {"capabilityId": capability, "externalRef": "customer-4471", **extra}
    response = api.call("POST", "/v1/sessions", token=token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def predict(api: InProcessApi, token: str, capability: str, text: str, **extra: Any) -> Any:
    body = {"input": text, **extra}
    return api.call("POST", f"/v1/capabilities/{capability}/predict", token=token, json_body=body)


def message(api: InProcessApi, token: str, session_id: str, text: str, **extra: Any) -> Any:
    body = {"input": text, **extra}
    return api.call("POST", f"/v1/sessions/{session_id}/messages", token=token, json_body=body)


def stream_url_door(
    api: InProcessApi, token: str, capability: str, body: dict[str, Any]
) -> tuple[int, str]:
    """The Function URL door (functions/stream), served in process."""
    from functions.stream.app import StreamDoor

    door = StreamDoor(lambda: api.container)
    response = door.handle(
        "POST",
        f"/v1/capabilities/{capability}/predict/stream",
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        json.dumps(body).encode(),
    )
    return response.status, b"".join(response.chunks).decode()


def run_retention(api: InProcessApi, now: datetime) -> dict[str, Any]:
    """The scheduled retention run, its "now" given by the event's ``time``."""
    event: dict[str, Any] = json.loads(RETENTION_EVENT.read_text())
    event["time"] = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    report: dict[str, Any] = api.invoke("RetentionFunction", event)
    return report
