"""The OpenAI-compatible door as the integration tests call it on the in-process stack:
through the HttpApi (PredictFunction) and through the streaming Function URL's door
(``StreamDoor``), and its ``data:`` lines read back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from convo_memory.doors.stream import StreamDoor
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant

CHAT = "/v1/chat/completions"
# One of an app's own tools, as OpenAI's SDKs offer it (the embedded models call it when
# its name occurs in the user's message).
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


@dataclass
class DoorAnswer:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def session_id(self) -> str | None:
        found = {k.lower(): v for k, v in self.headers.items()}.get("x-convo-session-id")
        return str(found) if found else None


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def chat_body(model: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": list(messages), **extra}


def keyed(key: str, principal: dict[str, str] | None = None) -> dict[str, str]:
    """The headers of a call by the app's own conversation key."""
    headers = {"X-Convo-Session-Key": key}
    if principal is not None:
        headers["X-Convo-Principal"] = json.dumps(principal)
    return headers


def chat_http(
    api: InProcessApi,
    tenant: Tenant,
    body: Any,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> DoorAnswer:
    """Through API Gateway (buffered; a stream's lines parsed into ``body``)."""
    response = api.call(
        "POST",
        CHAT,
        token=tenant.token,
        json_body=None if raw is not None else body,
        raw_body=raw,
        headers=headers,
    )
    answer = response.body
    content_type = {k.lower(): v for k, v in response.headers.items()}.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        answer = parse_data_lines(str(answer))
    return DoorAnswer(response.status, dict(response.headers), answer)


def chat_stream_door(
    api: InProcessApi,
    tenant: Tenant | None,
    body: Any,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    method: str = "POST",
    path: str = CHAT,
) -> DoorAnswer:
    """Through the streaming Function URL's door (its lines as they were made)."""
    door = StreamDoor(lambda: api.container)
    all_headers = {**(headers or {})}
    if tenant is not None:
        all_headers["Authorization"] = f"Bearer {tenant.token}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    response = door.handle(method, path, all_headers, data)
    text = b"".join(response.chunks).decode()
    response_headers = dict(response.headers)
    if response_headers["content-type"].startswith("text/event-stream"):
        # The predict stream's named events stay text; a chat stream's lines are parsed.
        answer = text if text.startswith("event:") else parse_data_lines(text)
        return DoorAnswer(response.status, response_headers, answer)
    return DoorAnswer(response.status, response_headers, json.loads(text))


def parse_data_lines(raw: str) -> list[Any]:
    """A chat stream's ``data:`` payloads in order (``"[DONE]"`` as the string)."""
    found: list[Any] = []
    for block in raw.strip().split("\n\n"):
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        found.append(payload if payload == "[DONE]" else json.loads(payload))
    return found


def streamed_text(lines: list[Any]) -> str:
    """The answer's text: the stream's ``delta.content`` pieces, joined."""
    return "".join(
        line["choices"][0]["delta"].get("content") or ""
        for line in lines
        if isinstance(line, dict) and line.get("choices")
    )
