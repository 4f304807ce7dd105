"""A webhook tool server on 127.0.0.1 (free port), for tests and the benchmark.

It verifies every call's signature the way ``docs/api.md`` tells tool authors to (HMAC-
SHA256 of ``"<timestamp>.<raw body>"`` with the capability's ``toolSigningSecret``,
constant-time comparison, a five-minute tolerance), records what it received (the
principal included) and answers per path:

- ``answers[path]`` = ``Reply(status, body, delay, headers)``; ``body`` is bytes, text,
  or anything JSON-able (sent as JSON);
- without one: ``{"output": "<default_output>"}``.

A call whose signature does not verify is answered ``401`` (and recorded as such).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.quiet_server import QuietServer


def verify(
    secret: str, timestamp: str, signature: str, raw_body: bytes, tolerance: int = 300
) -> bool:
    """True when the call comes from the service and is at most `tolerance` seconds old."""
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance:
        return False
    signed = timestamp.encode() + b"." + raw_body
    expected = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ReceivedCall:
    path: str
    headers: dict[str, str]
    raw_body: bytes
    signature_valid: bool

    @property
    def body(self) -> Any:
        return json.loads(self.raw_body)

    @property
    def principal(self) -> Any:
        return self.body["principal"]


@dataclass
class WebhookServer:
    secret: str = ""
    default_output: str = "ok"
    answers: dict[str, Reply] = field(default_factory=dict)
    calls: list[ReceivedCall] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``: what an operator would allow."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/tool") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def calls_to(self, path: str) -> list[ReceivedCall]:
        return [call for call in self.calls if call.path == path]

    def start(self) -> WebhookServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                valid = verify(
                    fake.secret,
                    self.headers.get("X-Convo-Timestamp", ""),
                    self.headers.get("X-Convo-Signature", ""),
                    raw,
                )
                fake.calls.append(ReceivedCall(self.path, dict(self.headers.items()), raw, valid))
                if not valid:
                    self._send(Reply(401, {"error": "bad signature"}))
                    return
                reply = fake.answers.get(self.path) or Reply(body={"output": fake.default_output})
                if reply.delay:
                    time.sleep(reply.delay)
                self._send(reply)

            def _send(self, reply: Reply) -> None:
                body = reply.body
                if isinstance(body, bytes):
                    data, kind = body, "application/octet-stream"
                elif isinstance(body, str):
                    data, kind = body.encode("utf-8"), "text/plain; charset=utf-8"
                else:
                    data, kind = json.dumps(body).encode("utf-8"), "application/json"
                self.send_response(reply.status)
                self.send_header("Content-Type", kind)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> WebhookServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
