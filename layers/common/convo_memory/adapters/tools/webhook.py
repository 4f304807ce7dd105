"""Calling a webhook tool, exactly as the contract says.

``POST <url>`` with ``Content-Type: application/json`` and the body
``{"tool", "input", "principal", "sessionId", "capabilityId", "runId"}``, signed:
``X-Convo-Timestamp: <unix seconds>`` and
``X-Convo-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>``.

Standard library only. The URL is checked by the policy on every call and the
connection goes to the address that was checked (TLS still verifies the host's name).
No redirect is followed, the response is read up to 1 MiB, and the whole call (connect,
send, every read) is bounded by its timeout. A 2xx response's JSON ``output`` (or its
whole body when it is not JSON) is the result; anything else is an ``error`` or
``timeout`` outcome that says what happened, never an exception.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

from convo_memory.adapters.tools.url_policy import ToolTarget, ToolUrlRefused, UrlPolicy
from convo_memory.ports import ToolOutcome

logger = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024
_ERROR_BODY_CHARS = 500
USER_AGENT = "convo-memory-tools/1"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>``."""
    signed = timestamp.encode("ascii") + b"." + body
    return "v1=" + hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()


def webhook_body(
    tool: str,
    tool_input: Mapping[str, Any],
    principal: Mapping[str, str] | None,
    session_id: str | None,
    capability_id: str,
    run_id: str,
) -> bytes:
    """The raw request body (compact JSON, UTF-8): the bytes the signature covers."""
    payload = {
        "tool": tool,
        "input": dict(tool_input),
        "principal": dict(principal) if principal is not None else None,
        "sessionId": session_id,
        "capabilityId": capability_id,
        "runId": run_id,
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def tool_result(raw: bytes) -> str:
    """A 2xx body as the tool's result: its JSON ``output`` (text as is, anything else
    as JSON), else the whole body."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict) and "output" in data:
        output = data["output"]
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return text


class _Timeout(Exception):
    pass


class WebhookClient:
    """Signs and sends webhook calls under a ``UrlPolicy``."""

    def __init__(
        self,
        policy: UrlPolicy,
        *,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        clock: Callable[[], float] = time.time,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.policy = policy
        self.max_response_bytes = max_response_bytes
        self._clock = clock
        self._tls = tls_context

    def call(self, url: str, body: bytes, secret: str, timeout: float) -> ToolOutcome:
        """POST the signed ``body`` to ``url``; the tool's result or what went wrong."""
        deadline = time.monotonic() + timeout
        try:
            target = self.policy.target(url)
        except ToolUrlRefused as refused:
            return ToolOutcome("error", f"the tool was not called: {refused}")
        timestamp = str(int(self._clock()))
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/plain;q=0.9, */*;q=0.1",
            "User-Agent": USER_AGENT,
            "X-Convo-Timestamp": timestamp,
            "X-Convo-Signature": signature(secret, timestamp, body),
        }
        connection = self._connection(target, timeout)
        try:
            connection.request("POST", target.path, body=body, headers=headers)
            response = connection.getresponse()
            status = response.status
            raw = self._read(connection, response, deadline)
        except (TimeoutError, _Timeout):
            return ToolOutcome("timeout", f"the tool did not answer within {timeout:.1f} s")
        except _TooLarge:
            return ToolOutcome(
                "error", f"the tool's response is larger than {self.max_response_bytes} bytes"
            )
        except (OSError, http.client.HTTPException) as exc:
            logger.info("webhook tool unreachable: %s", type(exc).__name__)
            return ToolOutcome("error", f"could not reach the tool ({type(exc).__name__})")
        finally:
            connection.close()
        if 200 <= status < 300:
            return ToolOutcome("ok", tool_result(raw))
        detail = raw[: _ERROR_BODY_CHARS * 4].decode("utf-8", errors="replace")
        detail = detail[:_ERROR_BODY_CHARS]
        if 300 <= status < 400:
            return ToolOutcome(
                "error", f"the tool answered with a redirect (HTTP {status}); it is not followed"
            )
        message = f"the tool answered HTTP {status}"
        return ToolOutcome("error", f"{message}: {detail}" if detail.strip() else message)

    def _connection(self, target: ToolTarget, timeout: float) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection
        if target.scheme == "https":
            context = self._tls or ssl.create_default_context()
            connection = http.client.HTTPSConnection(
                target.host, target.port, timeout=timeout, context=context
            )
        else:
            connection = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
        address = target.address

        # Connect to the address the policy checked, not to whatever the name resolves
        # to now; TLS (HTTPSConnection) still verifies the certificate for the host.
        def connect(
            _: tuple[str, int], timeout: float | None = None, source: Any = None
        ) -> socket.socket:
            return socket.create_connection((address, target.port), timeout, source)

        connection._create_connection = connect  # type: ignore[attr-defined]
        return connection

    def _read(
        self,
        connection: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        deadline: float,
    ) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout()
            if connection.sock is not None:
                connection.sock.settimeout(left)
            chunk = response.read1(_READ_CHUNK_BYTES)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_response_bytes:
                raise _TooLarge()
            chunks.append(chunk)


class _TooLarge(Exception):
    pass
