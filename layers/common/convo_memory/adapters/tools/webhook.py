"""Calling a webhook tool, exactly as the contract says.

``POST <url>`` with ``Content-Type: application/json`` and the body
``{"tool", "input", "principal", "sessionId", "capabilityId", "runId"}``, signed:
``X-Convo-Timestamp: <unix seconds>`` and
``X-Convo-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>``.

Standard library only. The URL is checked by the policy on every call and the
connection goes to the address that was checked (TLS still verifies the host's name).
No redirect is followed, the response is read up to 1 MiB, and the whole call (name
resolution, connect, TLS, send, every read of the head and the body) ends within its
timeout however slowly the tool answers (``adapters.deadline_http``). A 2xx response's
JSON ``output`` (or its whole body when it is not JSON) is the result; anything else is
an ``error`` or ``timeout`` outcome that says what happened, never an exception.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

from convo_memory.adapters.deadline_http import Deadline, ResponseBodyTooLarge, send
from convo_memory.adapters.tools.url_policy import ToolTarget, ToolUrlRefused, UrlPolicy
from convo_memory.domain.tools import ToolOutcome

logger = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 1024 * 1024
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
        """POST the signed ``body`` to ``url``; the tool's result or what went wrong.

        Everything (resolving the host, connecting, TLS, sending, the status line, the
        headers and the body) happens within ``timeout`` seconds of the call."""
        deadline = Deadline(timeout)
        try:
            target = self.policy.target(url, deadline)
            status, raw = self._post(target, body, secret, deadline)
        except ToolUrlRefused as refused:
            return ToolOutcome("error", f"the tool was not called: {refused}")
        except TimeoutError:
            return ToolOutcome("timeout", f"the tool did not answer within {timeout:.1f} s")
        except ResponseBodyTooLarge:
            return ToolOutcome(
                "error", f"the tool's response is larger than {self.max_response_bytes} bytes"
            )
        except (OSError, http.client.HTTPException) as exc:
            logger.info("webhook tool unreachable: %s", type(exc).__name__)
            return ToolOutcome("error", f"could not reach the tool ({type(exc).__name__})")
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

    def _post(
        self, target: ToolTarget, body: bytes, secret: str, deadline: Deadline
    ) -> tuple[int, bytes]:
        timestamp = str(int(self._clock()))
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/plain;q=0.9, */*;q=0.1",
            "User-Agent": USER_AGENT,
            "X-Convo-Timestamp": timestamp,
            "X-Convo-Signature": signature(secret, timestamp, body),
        }
        tls = None
        if target.scheme == "https":
            tls = self._tls or ssl.create_default_context()
        # Connect to the address the policy checked, not to whatever the name resolves
        # to now; TLS still verifies the certificate for the host.
        with send(
            "POST",
            target.host,
            target.port,
            target.path,
            body,
            headers,
            deadline,
            addresses=[target.address],
            tls=tls,
        ) as exchange:
            return exchange.status, exchange.read_up_to(self.max_response_bytes)
