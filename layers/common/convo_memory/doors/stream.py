"""The streaming door: ``POST /v1/capabilities/{id}/predict/stream`` as Server-Sent
Events, and the OpenAI-compatible doors (``POST /v1/chat/completions``, ``GET /v1/models``
and, v4, ``POST /v1/responses``) with their chunks or events as they are made.

An HttpApi cannot stream, so on AWS this runs as a Lambda Function URL in
RESPONSE_STREAM mode behind the AWS Lambda Web Adapter, which starts a small HTTP
server (``run_server``; ``functions/stream/app.py`` is its entry point). The local runtime
calls ``StreamDoor.handle`` directly. Same bearer tokens, same input gate, turn edge and
error bodies as the HttpApi's routes (``convo_memory.edge.turn_edge``), same doors
(``predict_door``, ``chat_completions``, ``responses_door``): the turn runs on a thread of its own
(``TurnOnThread``, its ``TurnSink``), and each of its events is written as it comes.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from convo_memory import observability
from convo_memory.domain import request_rules
from convo_memory.domain.errors import (
    InvalidJson,
    NotFound,
    PayloadTooLarge,
    ServiceError,
    Unauthorized,
)
from convo_memory.doors.http_framing import MalformedBody, RequestBodyTooLarge, StrictRequestHandler
from convo_memory.edge import input_gate
from convo_memory.edge.errors import error_for
from convo_memory.edge.input_gate import GatedRequest, gate
from convo_memory.edge.turn_edge import TurnEdge
from convo_memory.observability import set_correlation_id

if TYPE_CHECKING:
    from convo_memory.bootstrap import Container
    from convo_memory.domain.turns import DoorId, TurnBegun, TurnCommand, TurnEvent, TurnResult

    # What a turn's thread hands the door: its events, then its result or its error.
    Item = TurnEvent | TurnResult | ServiceError

logger = logging.getLogger("convo_memory.stream")
ROUTE = re.compile(r"^/v1/capabilities/(?P<capability_id>[^/]+)/predict/stream/?$")
CHAT_ROUTE = re.compile(r"^/v1/chat/completions/?$")
MODELS_ROUTE = re.compile(r"^/v1/models/?$")
RESPONSES_ROUTE = re.compile(r"^/v1/responses/?$")
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


def stream_error(exc: ServiceError, *, openai: bool = False) -> StreamResponse:
    """A refusal before the stream starts: the same status, body and headers as the
    HttpApi's route (the turn edge's one error mapping)."""
    from convo_memory.edge import errors

    reply = errors.error_reply(exc, openai=openai)
    return StreamResponse(
        reply.status, JSON_HEADERS + tuple(reply.headers.items()), iter([reply.body.encode()])
    )


def json_answer(body: Any, headers: Mapping[str, str] | None = None) -> StreamResponse:
    from convo_memory.edge.errors import json_text

    extra = tuple((headers or {}).items())
    return StreamResponse(200, JSON_HEADERS + extra, iter([json_text(body).encode()]))


def request_id_of(headers: Mapping[str, str]) -> str:
    """The Function URL's request id, which the Web Adapter passes in
    ``x-amzn-request-context``; a fresh one elsewhere."""
    import json

    raw = headers.get("x-amzn-request-context")
    if raw:
        try:
            found = json.loads(raw).get("requestId")
        except (ValueError, AttributeError):
            found = None
        if isinstance(found, str) and found:
            return found
    return str(uuid.uuid4())


def is_openai_route(path: str) -> bool:
    raw_path = path.partition("?")[0]
    return any(route.match(raw_path) for route in (CHAT_ROUTE, MODELS_ROUTE, RESPONSES_ROUTE))


class StreamDoor:
    """Turns one HTTP request into a streamed turn (or the model list)."""

    def __init__(self, container_factory: Callable[[], Container] | None = None) -> None:
        if container_factory is None:
            from convo_memory.execution_environment import get_container

            container_factory = get_container
        self._container = container_factory

    def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> StreamResponse:
        lowered = {k.lower(): v for k, v in headers.items()}
        request_id = set_correlation_id(request_id_of(lowered))
        try:
            return self._handle(method, path, lowered, body, request_id)
        except Exception as exc:
            return stream_error(error_for(exc, request_id), openai=is_openai_route(path))
        finally:
            # What this thread counted (a refusal); the turn's thread writes its own.
            observability.flush_metrics()

    def _handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, request_id: str
    ) -> StreamResponse:
        # The gate, in the HttpApi's order: route, token, path id, headers, query, body.
        raw_path, _, raw_query = path.partition("?")
        verb = method.upper()
        match = ROUTE.match(raw_path)
        path_ids: dict[str, str] = {}
        if match is not None and verb == "POST":
            path_ids = {"capabilityId": match.group("capability_id")}
        elif not (
            (CHAT_ROUTE.match(raw_path) and verb == "POST")
            or (RESPONSES_ROUTE.match(raw_path) and verb == "POST")
            or (MODELS_ROUTE.match(raw_path) and verb == "GET")
        ):
            raise NotFound("no such route")
        workspace = self._workspace(headers.get("authorization", ""))  # 401 first
        request = gate(
            method=verb,
            # As the HttpApi's route names it, whatever trailing slash this one has.
            route=f"{verb} {raw_path.rstrip('/')}",
            headers=headers,
            query=_query(raw_query),
            body=body,
            workspace_id=workspace,
            path_ids=path_ids,
        )
        if match is not None:
            return self._predict(request, path_ids["capabilityId"], request_id)
        if verb == "GET":
            return self._models(request)
        if RESPONSES_ROUTE.match(raw_path):
            return self._responses(request, headers, request_id)
        return self._chat(request, headers, request_id)

    def _workspace(self, authorization: str) -> str:
        scheme, _, token = authorization.partition(" ")
        workspace = None
        if scheme.lower() == "bearer" and token.strip():
            workspace = self._container().tokens.workspace_for(token.strip())
        if not workspace:
            raise Unauthorized("missing or unknown API token")
        return str(workspace)

    # -- predict/stream ----------------------------------------------------------------------

    def _predict(
        self, request: GatedRequest, capability_id: str, request_id: str
    ) -> StreamResponse:
        from convo_memory.api import TurnInput
        from convo_memory.doors import predict as predict_door

        turn_input = request_rules.parse_model(TurnInput, request.body or {})
        command = predict_door.read_predict(capability_id, turn_input, stream=True)
        edge = TurnEdge.on_stream_url(self._container())
        turn = TurnOnThread(edge, "stream", request, command, request_id)
        first = turn.first()
        if isinstance(first, ServiceError):  # refused before the stream started: as predict
            return stream_error(first)
        return StreamResponse(
            200, SSE_HEADERS, _encoded(predict_door.sse_frames(turn.items(first)))
        )

    # -- the OpenAI-compatible door ----------------------------------------------------------

    def _models(self, request: GatedRequest) -> StreamResponse:
        from convo_memory.doors.chat_frames import models_list

        workspace = request.workspace_id or ""
        return json_answer(models_list(workspace, self._container().catalog.list_all(workspace)))

    def _chat(
        self, request: GatedRequest, headers: Mapping[str, str], request_id: str
    ) -> StreamResponse:
        from convo_memory.doors import chat_completions as chat
        from convo_memory.doors import chat_frames

        chat_turn = chat.read_chat_turn(request.body or {}, headers)
        edge = TurnEdge.on_stream_url(self._container())
        if not chat_turn.command.stream:
            answer = chat.complete(edge, request, chat_turn)
            fields = (("content-type", answer.content_type), *answer.headers.items())
            return StreamResponse(200, fields, iter([answer.body.encode()]))
        turn = TurnOnThread(edge, "chat-stream", request, chat_turn.command, request_id)
        first = turn.first()
        if isinstance(first, ServiceError):  # refused before the stream started: as the HttpApi
            return stream_error(first, openai=True)
        from convo_memory.domain.turns import TurnResult

        session_id = first.session_id if isinstance(first, TurnResult) else turn.session_id
        lines = chat_frames.chunk_frames(
            turn.items(first), chat_turn.model, chat_turn.include_usage
        )
        response_headers = SSE_HEADERS + _header_pairs(chat_frames.session_headers(session_id))
        return StreamResponse(200, response_headers, _encoded(lines))

    def _responses(
        self, request: GatedRequest, headers: Mapping[str, str], request_id: str
    ) -> StreamResponse:
        from convo_memory.doors import responses as door
        from convo_memory.doors.response_frames import ResponseEvents

        turn = door.read_response_turn(request.body or {}, headers)
        edge = TurnEdge.on_stream_url(self._container())
        if not turn.command.stream:
            answer = door.create(edge, request, turn)
            return StreamResponse(200, JSON_HEADERS, iter([answer.body.encode()]))
        streamed = TurnOnThread(edge, "responses-stream", request, turn.command, request_id)
        first = streamed.first()
        if isinstance(first, ServiceError):  # refused before the stream started: as the HttpApi
            return stream_error(first, openai=True)
        frames = ResponseEvents(turn.echo).frames(streamed.items(first))
        return StreamResponse(200, SSE_HEADERS, _encoded(frames))


class TurnOnThread:
    """A turn served on a thread of its own (a ``TurnSink``): its events, then its
    result or its error, reach the door through a queue as they happen, so the door can
    answer a refusal with its status and stream the rest."""

    def __init__(
        self,
        edge: TurnEdge,
        door: DoorId,
        request: GatedRequest,
        command: TurnCommand,
        request_id: str,
    ) -> None:
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._begun: TurnBegun | None = None
        self._serve = partial(edge.serve, door, request, command, self)
        self._request_id = request_id
        threading.Thread(target=self._run, name="stream-turn", daemon=True).start()

    def put(self, event: TurnEvent) -> None:
        self._queue.put(event)

    def _run(self) -> None:
        set_correlation_id(self._request_id)  # this thread's logs belong to the request too
        last: Item
        try:
            last = self._serve()
        except Exception as exc:
            last = error_for(exc, self._request_id)
        finally:
            # The turn's one record (a failed turn's too), before the stream ends.
            observability.flush_metrics()
        self._queue.put(last)

    def first(self) -> Item:
        """The first item the answer's status depends on: a delta, a tool event, the
        result or the error (the turn's beginning is kept, not returned)."""
        from convo_memory.domain.turns import TurnBegun

        while True:
            item = self._queue.get()
            if not isinstance(item, TurnBegun):
                return item
            self._begun = item

    @property
    def session_id(self) -> str | None:
        """The turn's session, once it has begun (None: stateless, or not begun)."""
        return self._begun.session_id if self._begun is not None else None

    def items(self, first: Item) -> Iterator[Item]:
        """The turn's beginning, ``first``, and every item after it, up to its result
        or its error."""
        from convo_memory.domain.turns import TurnResult

        if self._begun is not None:
            yield self._begun
        item = first
        while True:
            yield item
            if isinstance(item, TurnResult | ServiceError):
                return
            item = self._queue.get()


def _encoded(texts: Iterator[str]) -> Iterator[bytes]:
    for text in texts:
        yield text.encode()


def _header_pairs(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((name.lower(), value) for name, value in headers.items())


def _query(raw_query: str) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(raw_query, keep_blank_values=True))


def write_response(handler: BaseHTTPRequestHandler, response: StreamResponse) -> None:
    from convo_memory.doors.sse import write_chunked

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
            body = self.read_body(input_gate.MAX_ATTACHMENT_BODY_BYTES)
        except RequestBodyTooLarge as exc:  # the same message as input_gate's, on every door
            write_response(self, stream_error(PayloadTooLarge(str(exc))))
            return
        except MalformedBody as exc:
            write_response(self, stream_error(InvalidJson(str(exc))))
            return
        write_response(self, self.door.handle("POST", self.path, dict(self.headers), body))

    def do_GET(self) -> None:
        write_response(self, self.door.handle("GET", self.path, dict(self.headers), b""))

    def do_OPTIONS(self) -> None:
        # CORS preflight from the Studio page; the Web Adapter forwards it to this server.
        from convo_memory.doors.cors import allowed_origins, preflight

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
        write_response(self, stream_error(_stdlib_error(code, message)))

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


def run_server(port: int, host: str = "127.0.0.1") -> None:
    """The HTTP server the Lambda Web Adapter proxies Function URL requests to."""
    StreamRequestHandler.door = StreamDoor()
    StreamRequestHandler.timeout = request_timeout_seconds()
    server = ThreadingHTTPServer((host, port), StreamRequestHandler)
    server.daemon_threads = True  # a stalled client never holds up the process's exit
    server.serve_forever()
