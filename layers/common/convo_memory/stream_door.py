"""The streaming door: ``POST /v1/capabilities/{id}/predict/stream`` as Server-Sent Events.

An HttpApi cannot stream, so on AWS this runs as a Lambda Function URL in
RESPONSE_STREAM mode behind the AWS Lambda Web Adapter, which starts a small HTTP
server (``serve``; ``functions/stream/app.py`` is its entry point). The local runtime
calls ``StreamDoor.handle`` directly. Same bearer tokens, same input gate and error
bodies as the HttpApi's predict, same serving path (``TurnService.predict`` with a
delta sink).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from convo_memory import input_gate, observability
from convo_memory.domain.errors import (
    InternalError,
    InvalidJson,
    NotFound,
    PayloadTooLarge,
    ServiceError,
    StoreUnavailable,
    Unauthorized,
    Unavailable,
)
from convo_memory.http_framing import BodyTooLarge, MalformedBody, StrictRequestHandler
from convo_memory.observability import set_correlation_id
from convo_memory.time_budget import RECORDING_MARGIN_SECONDS, Countdown

if TYPE_CHECKING:
    from convo_memory.api_models import TurnInput
    from convo_memory.bootstrap import Container

logger = logging.getLogger("convo_memory.stream")
ROUTE = re.compile(r"^/v1/capabilities/(?P<capability_id>[^/]+)/predict/stream/?$")
JSON_HEADERS = (("content-type", "application/json"),)
SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
)
DEFAULT_REQUEST_TIMEOUT_SECONDS = 30.0


@dataclass
class StreamResponse:
    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: Iterator[bytes]


def error_response(exc: ServiceError) -> StreamResponse:
    """A refusal before the stream starts: the same status, body and headers as predict."""
    body = json.dumps(exc.to_body(), separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return StreamResponse(
        exc.status, JSON_HEADERS + tuple(exc.headers().items()), iter([body.encode()])
    )


def request_id_of(headers: Mapping[str, str]) -> str:
    """The Function URL's request id, which the Web Adapter passes in
    ``x-amzn-request-context``; a fresh one elsewhere."""
    raw = headers.get("x-amzn-request-context")
    if raw:
        try:
            found = json.loads(raw).get("requestId")
        except (ValueError, AttributeError):
            found = None
        if isinstance(found, str) and found:
            return found
    return str(uuid.uuid4())


class StreamDoor:
    """Turns one HTTP request into a streamed turn."""

    def __init__(self, container_factory: Callable[[], Container] | None = None) -> None:
        if container_factory is None:
            from convo_memory.bootstrap import get_container

            container_factory = get_container
        self._container = container_factory

    def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> StreamResponse:
        lowered = {k.lower(): v for k, v in headers.items()}
        request_id = set_correlation_id(request_id_of(lowered))
        try:
            return self._handle(method, path, lowered, body, request_id)
        except ServiceError as exc:
            return error_response(exc.in_request(request_id))
        except StoreUnavailable as exc:
            logger.warning("store unavailable: %s", exc)
            return error_response(Unavailable().in_request(request_id))
        except Exception as exc:
            if _misconfigured(exc):  # logged once, naming the variable, at the cold start
                return error_response(InternalError(request_id))
            logger.error(
                "unexpected %s (requestId %s)", type(exc).__name__, request_id, exc_info=exc
            )
            return error_response(InternalError(request_id))
        finally:
            # What this thread counted (a refusal); the turn's thread writes its own.
            observability.flush_metrics()

    def _handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, request_id: str
    ) -> StreamResponse:
        from convo_memory.api_models import TurnInput  # pydantic: not at import time

        # The gate, in the HttpApi's order: route, token, path id, headers, query, body.
        raw_path, _, raw_query = path.partition("?")
        match = ROUTE.match(raw_path)
        if match is None or method.upper() != "POST":
            raise NotFound("no such route")
        workspace = self._workspace(headers.get("authorization", ""))
        capability_id = match.group("capability_id")
        input_gate.check_path_id("capabilityId", capability_id)
        key = input_gate.idempotency_key(headers)
        input_gate.check_query(_query(raw_query))
        payload = input_gate.read_json_object(body)
        turn_input = input_gate.parse_model(TurnInput, payload)
        # 429 rate_limited, like the HttpApi's turn doors.
        self._container().turn_limiter.admit(workspace)
        return self._stream(workspace, capability_id, turn_input, payload, key, request_id)

    def _workspace(self, authorization: str) -> str:
        scheme, _, token = authorization.partition(" ")
        workspace = None
        if scheme.lower() == "bearer" and token.strip():
            workspace = self._container().tokens.workspace_for(token.strip())
        if not workspace:
            raise Unauthorized("missing or unknown API token")
        return str(workspace)

    def _stream(
        self,
        workspace: str,
        capability_id: str,
        turn_input: TurnInput,
        payload: dict[str, Any],
        key: str | None,
        request_id: str,
    ) -> StreamResponse:
        from convo_memory.sse import sse_event

        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        container = self._container()
        streamed: list[bool] = [False]

        def sink(text: str) -> None:
            streamed[0] = True
            events.put(("delta", text))

        def on_tool(name: str, status: str) -> None:
            events.put(("tool", {"name": name, "status": status}))

        budget = container.settings.stream_turn_deadline_seconds
        # The key's in-progress lock lasts as long as the turn may run, not 24 hours.
        deadline = Countdown(budget + RECORDING_MARGIN_SECONDS)

        def compute() -> dict[str, Any]:
            prediction = container.turns.predict(
                workspace,
                capability_id,
                turn_input.input,
                turn_input.session_id,
                sink=sink,
                on_tool=on_tool,
                budget_seconds=budget,
            )
            result: dict[str, Any] = prediction.to_json_dict()
            return result

        def counted() -> dict[str, Any]:
            return observability.counted_turn(container.metrics, "stream", compute)

        def run() -> None:
            set_correlation_id(request_id)  # this thread's logs belong to the request too
            last: tuple[str, Any]
            try:
                runner = container.idempotency
                if key is not None and runner is not None:
                    result = runner.run(
                        workspace_id=workspace,
                        key=key,
                        route=f"POST /v1/capabilities/{capability_id}/predict/stream",
                        body=payload,
                        compute=counted,
                        lambda_context=deadline,
                    )
                    if not streamed[0]:  # a replayed response: its answer as one delta
                        events.put(("delta", result["output"]))
                else:
                    result = counted()
                last = ("done", result)
            except ServiceError as exc:
                last = ("error", exc.in_request(request_id))
            except StoreUnavailable as exc:
                logger.warning("store unavailable: %s", exc)
                last = ("error", Unavailable().in_request(request_id))
            except Exception as exc:
                logger.error("stream turn failed (requestId %s)", request_id, exc_info=exc)
                last = ("error", InternalError(request_id))
            finally:
                # The turn's one record (a failed turn's too), before the stream ends.
                observability.flush_metrics()
            events.put(last)

        threading.Thread(target=run, name="stream-turn", daemon=True).start()
        first_kind, first = events.get()
        if first_kind == "error":  # refused before the stream started: same as predict
            return error_response(first)

        def chunks() -> Iterator[bytes]:
            kind, item = first_kind, first
            while True:
                if kind == "delta":
                    yield sse_event("delta", {"text": item}).encode()
                elif kind == "tool":
                    yield sse_event("tool", item).encode()
                elif kind == "done":
                    yield sse_event("done", item).encode()
                    return
                else:
                    yield sse_event("error", item.to_body()["error"]).encode()
                    return
                kind, item = events.get()

        return StreamResponse(200, SSE_HEADERS, chunks())


def _misconfigured(exc: BaseException) -> bool:
    from convo_memory.config import SettingsError  # pydantic: not at import time

    return isinstance(exc, SettingsError)


def _query(raw_query: str) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(raw_query, keep_blank_values=True))


def write_response(handler: BaseHTTPRequestHandler, response: StreamResponse) -> None:
    from convo_memory.sse import write_chunked

    write_chunked(handler, response.status, response.headers, response.chunks)


def request_timeout_seconds(env: Mapping[str, str] | None = None) -> float:
    """How long a client may take to send a request (``REQUEST_TIMEOUT_SECONDS``)."""
    raw = (os.environ if env is None else env).get("REQUEST_TIMEOUT_SECONDS", "")
    try:
        value = float(raw) if raw.strip() else DEFAULT_REQUEST_TIMEOUT_SECONDS
    except ValueError:
        return DEFAULT_REQUEST_TIMEOUT_SECONDS
    return value if value > 0 else DEFAULT_REQUEST_TIMEOUT_SECONDS


class StreamRequestHandler(StrictRequestHandler):
    """The door over HTTP/1.1. A client that stalls mid-request is cut off after
    ``timeout`` seconds (the socket's timeout), so it cannot hold a thread forever.

    Real responses carry no CORS headers: on AWS the Function URL adds them from its
    ``Cors`` settings, and a second ``Access-Control-Allow-Origin`` from the app would make
    the browser refuse the response."""

    door: StreamDoor
    timeout = DEFAULT_REQUEST_TIMEOUT_SECONDS

    def do_POST(self) -> None:
        # A client that stalls mid-body times out here; the stdlib closes the connection.
        try:
            body = self.read_body(input_gate.MAX_BODY_BYTES)
        except BodyTooLarge as exc:  # the same message as input_gate's, on every door
            write_response(self, error_response(PayloadTooLarge(str(exc))))
            return
        except MalformedBody as exc:
            write_response(self, error_response(InvalidJson(str(exc))))
            return
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
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals (bad request line or header lines, unsupported
        method, headers too large) in the contract's shape instead of its HTML page."""
        self.close_connection = True
        self.request_version = self.protocol_version  # never the HTTP/0.9 of a broken line
        write_response(self, error_response(_stdlib_error(code, message)))

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _stdlib_error(code: int, message: str | None) -> ServiceError:
    # All of them are the client's doing (bad input is never a 5xx): 505 included.
    text = message or "the request could not be read"
    if code in (413, 414, 431):
        return PayloadTooLarge(text)
    if code in (404, 405, 501):
        return NotFound("no such route")
    return InvalidJson(text)


def serve(port: int, host: str = "127.0.0.1") -> None:
    """The HTTP server the Lambda Web Adapter proxies Function URL requests to."""
    StreamRequestHandler.door = StreamDoor()
    StreamRequestHandler.timeout = request_timeout_seconds()
    server = ThreadingHTTPServer((host, port), StreamRequestHandler)
    server.daemon_threads = True  # a stalled client never holds up the process's exit
    server.serve_forever()
