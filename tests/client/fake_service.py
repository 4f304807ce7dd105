"""A scripted stand-in for the Conversations API on 127.0.0.1, answering as the contract
says, for the client behaviour today's server cannot show (429, 503, event: tool, ...)."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.quiet_server import QuietServer


@dataclass(frozen=True)
class Reply:
    """A JSON answer."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent instead of ``body`` (e.g. a proxy's HTML page)


@dataclass(frozen=True)
class Drop:
    """Read the request, then close the connection without a byte of answer."""


@dataclass(frozen=True)
class Events:
    """A ``text/event-stream`` answer: ``(event, data)`` pairs; ``cut_after`` closes the
    connection after that many events, without finishing the stream."""

    events: list[tuple[str, Any]]
    cut_after: int | None = None


Script = Reply | Drop | Events


@dataclass(frozen=True)
class Received:
    method: str
    target: str
    headers: dict[str, str]
    body: Any

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)


class FakeService:
    """``service.on("GET", "/v1/sessions/s1", Reply(503, ...), Reply(200, ...))``: the
    answers to successive calls of a route; the last one repeats. Unscripted routes get
    the contract's 404 ``not_found``. ``received`` records every request."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._script: dict[tuple[str, str], deque[Script]] = {}
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                received = Received(self.command, self.path, headers, body)
                answer = service._next(received)
                if isinstance(answer, Drop):
                    self.close_connection = True
                elif isinstance(answer, Events):
                    self._events(answer)
                else:
                    self._reply(answer)

            def _reply(self, reply: Reply) -> None:
                payload = reply.raw
                if payload is None:
                    payload = b"" if reply.body is None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                if reply.raw is None and reply.body is not None:
                    self.send_header("Content-Type", "application/json")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _events(self, events: Events) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for index, (name, data) in enumerate(events.events):
                    if events.cut_after is not None and index >= events.cut_after:
                        break
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

            do_GET = do_POST = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def on(self, method: str, path: str, *answers: Script) -> None:
        with self._lock:
            self._script[(method, path)] = deque(answers)

    def _next(self, received: Received) -> Script:
        with self._lock:
            self.received.append(received)
            answers = self._script.get((received.method, received.path))
            if not answers:
                return Reply(404, {"error": {"code": "not_found", "message": "no such route"}})
            return answers.popleft() if len(answers) > 1 else answers[0]

    def calls(self, method: str, path: str) -> list[Received]:
        return [r for r in self.received if r.method == method and r.path == path]

    def __enter__(self) -> FakeService:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def iter_fake() -> Iterator[FakeService]:
    with FakeService() as service:
        yield service
