"""The streaming door: ``POST /v1/capabilities/{id}/predict/stream`` as Server-Sent Events.

An HttpApi cannot stream, so on AWS this runs as a Lambda Function URL in
RESPONSE_STREAM mode behind the AWS Lambda Web Adapter, which starts this module as a
small HTTP server (``run.sh``). The local runtime calls ``StreamDoor.handle`` directly.
Same bearer tokens, same serving path (``TurnService.predict`` with a delta sink).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from convo_memory.domain.errors import (
    InvalidJson,
    ServiceError,
    StoreUnavailable,
    Unauthorized,
)

logger = logging.getLogger("convo_memory.stream")
ROUTE = re.compile(r"^/v1/capabilities/(?P<capability_id>[^/]+)/predict/stream/?$")
JSON_HEADERS = (("content-type", "application/json"),)
SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
)


@dataclass
class StreamResponse:
    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: Iterator[bytes]


def _json(status: int, body: Any, extra: tuple[tuple[str, str], ...] = ()) -> StreamResponse:
    return StreamResponse(status, JSON_HEADERS + extra, iter([json.dumps(body).encode()]))


def _error(exc: ServiceError) -> StreamResponse:
    return _json(exc.status, exc.to_body())


class StreamDoor:
    """Turns one HTTP request into a streamed turn."""

    def __init__(self, container_factory: Any = None) -> None:
        if container_factory is None:
            from convo_memory.bootstrap import get_container

            container_factory = get_container
        self._container = container_factory

    def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> StreamResponse:
        lowered = {k.lower(): v for k, v in headers.items()}
        match = ROUTE.match(path.split("?", 1)[0])
        if match is None or method.upper() != "POST":
            return _json(404, {"error": {"code": "not_found", "message": "no such route"}})
        try:
            workspace = self._workspace(lowered.get("authorization", ""))
            payload = self._payload(body)
            from convo_memory.http import parse

            turn_input = parse("TurnInput", payload)
        except ServiceError as exc:
            return _error(exc)
        except StoreUnavailable:
            return _json(503, {"error": {"code": "unavailable", "message": "try again"}})
        capability_id = match.group("capability_id")
        key = lowered.get("idempotency-key")
        return self._stream(workspace, capability_id, turn_input, payload, key)

    def _workspace(self, authorization: str) -> str:
        scheme, _, token = authorization.partition(" ")
        workspace = None
        if scheme.lower() == "bearer" and token.strip():
            workspace = self._container().tokens.workspace_for(token.strip())
        if not workspace:
            raise Unauthorized("missing or unknown API token")
        return str(workspace)

    @staticmethod
    def _payload(body: bytes) -> dict[str, Any]:
        try:
            payload = json.loads(body or b"")
        except (ValueError, UnicodeDecodeError):
            raise InvalidJson("the request body is not valid JSON") from None
        if not isinstance(payload, dict):
            raise InvalidJson("the request body must be a JSON object")
        return payload

    def _stream(
        self,
        workspace: str,
        capability_id: str,
        turn_input: Any,
        payload: dict[str, Any],
        key: str | None,
    ) -> StreamResponse:
        from convo_memory.sse import sse_event

        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        container = self._container()
        streamed: list[bool] = [False]

        def sink(text: str) -> None:
            streamed[0] = True
            events.put(("delta", text))

        def compute() -> dict[str, Any]:
            prediction = container.turns.predict(
                workspace, capability_id, turn_input.input, turn_input.session_id, sink=sink
            )
            result: dict[str, Any] = prediction.to_json_dict()
            return result

        def run() -> None:
            try:
                if key:
                    from convo_memory.http import check_idempotency_key

                    check_idempotency_key(key)
                    result = container.idempotency.run(
                        workspace_id=workspace,
                        key=key,
                        route=f"POST /v1/capabilities/{capability_id}/predict/stream",
                        body=payload,
                        compute=compute,
                    )
                    if not streamed[0]:  # a replayed response: its answer as one delta
                        events.put(("delta", result["output"]))
                else:
                    result = compute()
                events.put(("done", result))
            except ServiceError as exc:
                events.put(("error", exc))
            except StoreUnavailable as exc:
                logger.warning("store unavailable: %s", exc)
                events.put(("error", ServiceErrorUnavailable()))
            except Exception:
                logger.exception("stream turn failed")
                events.put(("error", ServiceErrorInternal()))

        threading.Thread(target=run, name="stream-turn", daemon=True).start()
        first_kind, first = events.get()
        if first_kind == "error":  # refused before the stream started: same as predict
            return _error(first)

        def chunks() -> Iterator[bytes]:
            kind, item = first_kind, first
            while True:
                if kind == "delta":
                    yield sse_event("delta", {"text": item}).encode()
                elif kind == "done":
                    yield sse_event("done", item).encode()
                    return
                else:
                    yield sse_event("error", item.to_body()["error"]).encode()
                    return
                kind, item = events.get()

        return StreamResponse(200, SSE_HEADERS, chunks())


class ServiceErrorUnavailable(ServiceError):
    status, code = 503, "unavailable"

    def __init__(self) -> None:
        super().__init__("storage is temporarily unavailable")


class ServiceErrorInternal(ServiceError):
    status, code = 500, "internal_error"

    def __init__(self) -> None:
        super().__init__("the turn failed unexpectedly")


def write_response(handler: BaseHTTPRequestHandler, response: StreamResponse) -> None:
    from convo_memory.sse import write_chunked

    write_chunked(handler, response.status, response.headers, response.chunks)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    door: StreamDoor

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        write_response(self, self.door.handle("POST", self.path, dict(self.headers), body))

    def do_GET(self) -> None:
        write_response(self, self.door.handle("GET", self.path, dict(self.headers), b""))

    def do_OPTIONS(self) -> None:
        # CORS preflight from the Studio page; the Web Adapter forwards it to this server.
        from convo_memory.cors import allowed_origins, preflight

        answer = preflight(dict(self.headers), allowed_origins(), methods=("POST",))
        self.send_response(answer.status)
        for name, value in answer.headers:
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve(port: int) -> None:
    """The HTTP server the Lambda Web Adapter proxies Function URL requests to."""
    _Handler.door = StreamDoor()
    ThreadingHTTPServer(("127.0.0.1", port), _Handler).serve_forever()


if __name__ == "__main__":
    serve(int(os.environ.get("PORT", "8080")))
