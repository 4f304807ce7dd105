"""The Responses door as the integration tests call it on the in-process stack: through
the HttpApi (PredictFunction, a stream all at once) and through the streaming Function
URL's door (``StreamDoor``, as made), and its ``event:``/``data:`` pairs read back."""

from __future__ import annotations

import json
from typing import Any

from convo_memory.doors.stream import StreamDoor
from tests.support.chat_door import DoorAnswer
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant

RESPONSES = "/v1/responses"


def respond_http(
    api: InProcessApi, tenant: Tenant, body: Any, headers: dict[str, str] | None = None
) -> DoorAnswer:
    """``POST /v1/responses`` through API Gateway (a stream's events parsed into ``body``)."""
    response = api.call("POST", RESPONSES, token=tenant.token, json_body=body, headers=headers)
    answer = response.body
    content_type = {k.lower(): v for k, v in response.headers.items()}.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        answer = parse_events(str(answer))
    return DoorAnswer(response.status, dict(response.headers), answer)


def respond_stream_door(
    api: InProcessApi, tenant: Tenant, body: Any, headers: dict[str, str] | None = None
) -> DoorAnswer:
    """``POST /v1/responses`` through the streaming Function URL's door."""
    door = StreamDoor(lambda: api.container)
    all_headers = {**(headers or {}), "Authorization": f"Bearer {tenant.token}"}
    response = door.handle("POST", RESPONSES, all_headers, json.dumps(body).encode())
    text = b"".join(response.chunks).decode()
    response_headers = dict(response.headers)
    if response_headers["content-type"].startswith("text/event-stream"):
        return DoorAnswer(response.status, response_headers, parse_events(text))
    return DoorAnswer(response.status, response_headers, json.loads(text))


def parse_events(raw: str) -> list[dict[str, Any]]:
    """A Responses stream's events in order: each ``data`` payload, checked to name the
    same type as its ``event:`` line."""
    found: list[dict[str, Any]] = []
    for block in raw.strip().split("\n\n"):
        event_line, data_line = block.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: "), block
        data = json.loads(data_line[len("data: ") :])
        assert data["type"] == event_line[len("event: ") :]
        found.append(data)
    return found


def text_of(response: dict[str, Any]) -> str:
    """The answer's text in a Response."""
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def ask(api: InProcessApi, tenant: Tenant, text: str, **fields: Any) -> dict[str, Any]:
    """One response through the HttpApi (200 asserted): the Response."""
    body = {"model": "cap-generative", "input": text, **fields}
    answer = respond_http(api, tenant, body)
    assert answer.status == 200, answer.body
    response: dict[str, Any] = answer.body
    return response
