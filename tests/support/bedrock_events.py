"""Bedrock for tests: a bedrock-runtime client that can never reach AWS, and
ConverseStream bodies as real AWS event-stream messages (binary frames with CRCs) fed to
botocore's own parser, never sent anywhere."""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Iterator
from functools import cache
from typing import Any

import botocore.session
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.config import Config


@cache
def _session() -> botocore.session.Session:
    """One botocore session for these clients: a fresh one reads the endpoint rules and
    Bedrock's model from disk again (a Stubber goes on each client, not the session)."""
    return botocore.session.get_session()


def bedrock_client() -> Any:
    """A bedrock-runtime client for Stubber: its endpoint is a closed local port, so
    even an unstubbed call never leaves the host; one attempt, no retries."""
    return _session().create_client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}),
    )


def _header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(encoded)) + encoded


def _message(headers: dict[str, str], payload: dict[str, Any]) -> bytes:
    header_bytes = b"".join(_header(n, v) for n, v in headers.items())
    body = json.dumps(payload).encode()
    total = 12 + len(header_bytes) + len(body) + 4
    prelude = struct.pack(">II", total, len(header_bytes))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + header_bytes + body
    return message + struct.pack(">I", binascii.crc32(message))


def event(kind: str, payload: dict[str, Any]) -> bytes:
    return _message(
        {":message-type": "event", ":event-type": kind, ":content-type": "application/json"},
        payload,
    )


def exception_event(kind: str, message: str) -> bytes:
    """A modelled exception in mid-stream (``throttlingException``, ...)."""
    return _message(
        {
            ":message-type": "exception",
            ":exception-type": kind,
            ":content-type": "application/json",
        },
        {"message": message},
    )


def text_delta(text: str, index: int = 0) -> bytes:
    return event("contentBlockDelta", {"delta": {"text": text}, "contentBlockIndex": index})


def tool_use_start(index: int, tool_use_id: str, name: str) -> bytes:
    return event(
        "contentBlockStart",
        {
            "start": {"toolUse": {"toolUseId": tool_use_id, "name": name}},
            "contentBlockIndex": index,
        },
    )


def tool_input_delta(index: int, piece: str) -> bytes:
    return event(
        "contentBlockDelta", {"delta": {"toolUse": {"input": piece}}, "contentBlockIndex": index}
    )


def stop(reason: str) -> bytes:
    return event("messageStop", {"stopReason": reason})


class _RawStream:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield from self._chunks

    def close(self) -> None:
        return None


def serve_streams(client: Any, *bodies: list[bytes]) -> list[dict[str, Any]]:
    """Answer successive ConverseStream calls with ``bodies`` (no network); the request
    bodies are recorded in the returned list."""
    requests: list[dict[str, Any]] = []
    pending = list(bodies)

    def respond(request: Any, **_: Any) -> AWSResponse:
        requests.append(json.loads(request.body))
        headers = HTTPHeaders()
        headers["content-type"] = "application/vnd.amazon.eventstream"
        return AWSResponse(request.url, 200, headers, _RawStream(pending.pop(0)))

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", respond)
    return requests
