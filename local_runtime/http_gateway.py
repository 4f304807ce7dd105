"""An API Gateway HTTP API on 127.0.0.1: routes, Lambda REQUEST authorizer, payload 2.0.

The pure part (route matching, event building, result translation) is kept apart from
the server so that it can be tested without sockets.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

from convo_memory.doors.cors import (
    ALLOWED_METHODS,
    actual_response_headers,
    allowed_origins,
    is_cors_header,
    is_preflight,
    preflight,
)
from convo_memory.doors.http_framing import MalformedBody, RequestBodyTooLarge, StrictRequestHandler
from local_runtime.handlers import ACCOUNT_ID, FunctionRegistry, TooManyRequestsError, region

API_ID = "local"
STAGE = "$default"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
# What Lambda takes in a synchronous invocation's event (6 MB): API Gateway takes a larger
# request and Lambda refuses it, so the local gateway refuses it too.
LAMBDA_EVENT_BYTES = 6 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_SECONDS = 30.0

_PARAM = re.compile(r"^\{([A-Za-z0-9_.-]+)(\+?)\}$")


# --------------------------------------------------------------------------- routes


@dataclass(frozen=True)
class Route:
    """One HttpApi event of a function: ``GET /v1/sessions/{sessionId}`` -> function."""

    method: str
    path: str
    function: str
    authorizer: str | None = None  # the HttpApi authorizer's name; None: no authorizer

    @property
    def route_key(self) -> str:
        return "$default" if self.path == "$default" else f"{self.method} {self.path}"

    @property
    def segments(self) -> tuple[tuple[str, str], ...]:
        """The path template as (kind, text) pairs; kind is literal, param or greedy."""
        parsed: list[tuple[str, str]] = []
        for part in self.path.strip("/").split("/") if self.path != "/" else []:
            found = _PARAM.match(part)
            if found is None:
                parsed.append(("literal", part))
            elif found.group(2):
                parsed.append(("greedy", found.group(1)))
            else:
                parsed.append(("param", found.group(1)))
        return tuple(parsed)


@dataclass(frozen=True)
class RouteMatch:
    route: Route
    path_parameters: dict[str, str]


_RANK = {"literal": 3, "param": 2, "greedy": 1}


def match_route(routes: Iterable[Route], method: str, raw_path: str) -> RouteMatch | None:
    """The route API Gateway would pick: the most specific template that matches.

    Literal segments beat ``{param}`` segments, which beat a greedy ``{proxy+}``; an
    exact method beats ``ANY``; ``$default`` catches what nothing else does.
    """
    method = method.upper()
    segments = _split_path(raw_path)
    best: tuple[tuple[Any, ...], RouteMatch] | None = None
    for route in routes:
        if route.method not in (method, "ANY"):
            continue
        if route.path == "$default":
            params: dict[str, str] | None = {}
            rank: tuple[Any, ...] = (0,)
        else:
            params = _match_segments(route.segments, segments)
            rank = (1, tuple(_RANK[kind] for kind, _ in route.segments))
        if params is None:
            continue
        score = (*rank, route.method != "ANY")
        if best is None or score > best[0]:
            best = (score, RouteMatch(route, params))
    return None if best is None else best[1]


def _split_path(raw_path: str) -> list[str]:
    path = raw_path.split("?", 1)[0]
    if path in ("", "/"):
        return []
    # Split before decoding so that an encoded "/" stays inside its segment.
    return [unquote(part) for part in path.lstrip("/").split("/")]


def _match_segments(
    template: Sequence[tuple[str, str]], segments: Sequence[str]
) -> dict[str, str] | None:
    params: dict[str, str] = {}
    for index, (kind, text) in enumerate(template):
        if kind == "greedy":
            rest = segments[index:]
            if not rest or not all(rest):
                return None
            params[text] = "/".join(rest)
            return params
        if index >= len(segments):
            return None
        segment = segments[index]
        if kind == "literal":
            if segment != text:
                return None
        elif not segment:
            return None
        else:
            params[text] = segment
    return params if len(template) == len(segments) else None


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class HttpRequest:
    """A request as it arrived, before any routing."""

    method: str
    raw_path: str
    raw_query: str
    headers: Sequence[tuple[str, str]]
    body: bytes = b""
    source_ip: str = "127.0.0.1"
    protocol: str = "HTTP/1.1"
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    received_at: float = field(default_factory=time.time)

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        return ",".join(values) if values else None


def _merged_headers(request: HttpRequest) -> tuple[dict[str, str], list[str]]:
    """Lower-cased headers (repeats comma-joined) and the cookies, as API Gateway does."""
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in request.headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
            continue
        headers[key] = f"{headers[key]},{value}" if key in headers else value
    return headers, cookies


def query_parameters(raw_query: str) -> dict[str, str]:
    """Decoded query parameters; a repeated name's values are comma-joined."""
    params: dict[str, str] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True):
        params[name] = f"{params[name]},{value}" if name in params else value
    return params


def _apigw_time(epoch: float) -> str:
    return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(epoch))


def request_context(request: HttpRequest, route_key: str) -> dict[str, Any]:
    headers, _ = _merged_headers(request)
    domain = headers.get("host", "localhost")
    return {
        "accountId": ACCOUNT_ID,
        "apiId": API_ID,
        "domainName": domain,
        "domainPrefix": domain.split(".", 1)[0],
        "http": {
            "method": request.method.upper(),
            "path": request.raw_path,
            "protocol": request.protocol,
            "sourceIp": request.source_ip,
            "userAgent": headers.get("user-agent", ""),
        },
        "requestId": request.request_id,
        "routeKey": route_key,
        "stage": STAGE,
        "time": _apigw_time(request.received_at),
        "timeEpoch": int(request.received_at * 1000),
    }


def build_http_event(
    request: HttpRequest,
    route_key: str,
    path_parameters: Mapping[str, str] | None = None,
    authorizer_context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The API Gateway HTTP API payload 2.0 event for ``request``."""
    headers, cookies = _merged_headers(request)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": request.raw_path,
        "rawQueryString": request.raw_query,
    }
    if cookies:
        event["cookies"] = cookies
    event["headers"] = headers
    params = query_parameters(request.raw_query)
    if params:
        event["queryStringParameters"] = params
    context = request_context(request, route_key)
    if authorizer_context is not None:
        context["authorizer"] = {"lambda": dict(authorizer_context)}
    event["requestContext"] = context
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if request.body:
        try:
            event["body"] = request.body.decode("utf-8")
            event["isBase64Encoded"] = False
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(request.body).decode("ascii")
            event["isBase64Encoded"] = True
    else:
        event["isBase64Encoded"] = False
    return event


def route_arn(method: str, raw_path: str) -> str:
    path = raw_path.lstrip("/")
    return f"arn:aws:execute-api:{region()}:{ACCOUNT_ID}:{API_ID}/{STAGE}/{method.upper()}/{path}"


def build_authorizer_event(
    request: HttpRequest,
    match: RouteMatch,
    identity_source: Sequence[str],
) -> dict[str, Any]:
    """The payload 2.0 REQUEST authorizer event API Gateway sends before ``match``."""
    http_event = build_http_event(request, match.route.route_key, match.path_parameters)
    event: dict[str, Any] = {
        "version": "2.0",
        "type": "REQUEST",
        "routeArn": route_arn(request.method, request.raw_path),
        "identitySource": list(identity_source),
        "routeKey": match.route.route_key,
        "rawPath": request.raw_path,
        "rawQueryString": request.raw_query,
    }
    for key in ("cookies", "headers", "queryStringParameters", "requestContext"):
        if key in http_event:
            event[key] = http_event[key]
    if "pathParameters" in http_event:
        event["pathParameters"] = http_event["pathParameters"]
    return event


# --------------------------------------------------------------------------- responses


class InvalidLambdaResponseError(ValueError):
    """The function's result is not something API Gateway can turn into a response."""


@dataclass
class GatewayResponse:
    """What goes back to the client.

    ``body`` is the whole payload. A streaming route would hand the writer an iterator
    of chunks instead; the writer is the one place that would need to learn it.
    """

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


def json_response(
    status: int, payload: Any, headers: Sequence[tuple[str, str]] = ()
) -> GatewayResponse:
    return GatewayResponse(
        status,
        [("content-type", "application/json"), *headers],
        json.dumps(payload).encode("utf-8"),
    )


def gateway_error(
    status: int, code: str, message: str, headers: Sequence[tuple[str, str]] = ()
) -> GatewayResponse:
    """The contract's error body: the gateway's own refusals look like the service's."""
    return json_response(status, {"error": {"code": code, "message": message}}, headers)


def internal_error(request_id: str) -> GatewayResponse:
    """What the gateway answers when the integration fails (API Gateway's 500), in the
    contract's shape, with the request id the failure was reported under."""
    return json_response(
        500,
        {
            "error": {
                "code": "internal",
                "message": "the integration failed; see the runtime's log for this requestId",
                "requestId": request_id,
            }
        },
    )


def missing_identity() -> GatewayResponse:
    """API Gateway's own answer when an identity source of the authorizer is missing or
    empty: it never invokes the authorizer, and an HTTP API cannot shape this body."""
    return json_response(401, {"message": "Unauthorized"})


def rate_limited() -> GatewayResponse:
    """Every environment of the function is busy (Lambda throttled the invocation)."""
    return gateway_error(
        429, "rate_limited", "too many concurrent requests; retry later", [("Retry-After", "1")]
    )


def translate_result(result: Any) -> GatewayResponse:
    """Turn a function's payload 2.0 result into a response, as API Gateway does.

    A dict with ``statusCode`` is a structured response; anything else that is valid
    JSON is a 200 ``application/json`` whose body is the result (a string as itself).
    """
    if isinstance(result, dict) and "statusCode" in result:
        return _structured_response(result)
    if isinstance(result, str):
        body = result
    else:
        try:
            body = json.dumps(result)
        except (TypeError, ValueError) as exc:
            raise InvalidLambdaResponseError(f"result is not JSON: {exc}") from exc
    return GatewayResponse(200, [("content-type", "application/json")], body.encode("utf-8"))


def _structured_response(result: Mapping[str, Any]) -> GatewayResponse:
    try:
        status = int(result["statusCode"])
    except (TypeError, ValueError) as exc:
        raise InvalidLambdaResponseError(f"bad statusCode {result['statusCode']!r}") from exc
    if not 100 <= status <= 599:
        raise InvalidLambdaResponseError(f"bad statusCode {status}")
    headers: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, value in (result.get("headers") or {}).items():
        headers.append((str(name), _header_value(value)))
        seen.add(str(name).lower())
    for name, values in (result.get("multiValueHeaders") or {}).items():
        if str(name).lower() in seen:
            continue
        headers.append((str(name), ",".join(_header_value(value) for value in values)))
    for cookie in result.get("cookies") or []:
        headers.append(("set-cookie", str(cookie)))
    body = result.get("body")
    if body is None:
        payload = b""
    elif not isinstance(body, str):
        raise InvalidLambdaResponseError("body must be a string")
    elif result.get("isBase64Encoded"):
        try:
            payload = base64.b64decode(body, validate=True)
        except ValueError as exc:
            raise InvalidLambdaResponseError("body is not valid base64") from exc
    else:
        payload = body.encode("utf-8")
    return GatewayResponse(status, headers, payload)


def _header_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- authorizer


@dataclass(frozen=True)
class AuthorizerConfig:
    """The HttpApi's Lambda REQUEST authorizer (simple responses, payload 2.0)."""

    function: str
    # Empty: no identity source, the authorizer runs on every request (uncached).
    identity_headers: tuple[str, ...] = ("Authorization",)
    ttl_seconds: float = 300.0
    simple_responses: bool = True


@dataclass(frozen=True)
class AuthDecision:
    authorized: bool
    context: Mapping[str, Any]


class AuthorizerCache:
    """Authorizer results by identity source, kept ``ttl_seconds`` (0 disables it)."""

    def __init__(self, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._entries: dict[tuple[str, ...], tuple[float, AuthDecision]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> AuthDecision | None:
        if self._ttl <= 0:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self._clock():
                del self._entries[key]
                return None
            return entry[1]

    def put(self, key: tuple[str, ...], decision: AuthDecision) -> None:
        if self._ttl <= 0:
            return
        with self._lock:
            self._entries[key] = (self._clock() + self._ttl, decision)


def parse_authorizer_result(result: Any, simple_responses: bool) -> AuthDecision:
    """Read a simple response (``isAuthorized``) or an IAM policy response."""
    if not isinstance(result, dict):
        raise InvalidLambdaResponseError("authorizer result is not an object")
    context = result.get("context")
    if context is None:
        context = {}
    if not isinstance(context, dict):
        raise InvalidLambdaResponseError("authorizer context is not an object")
    if simple_responses and "isAuthorized" in result:
        if not isinstance(result["isAuthorized"], bool):
            raise InvalidLambdaResponseError("isAuthorized is not a boolean")
        return AuthDecision(result["isAuthorized"], context)
    statements = (result.get("policyDocument") or {}).get("Statement")
    if not isinstance(statements, list):
        raise InvalidLambdaResponseError("authorizer result has neither isAuthorized nor policy")
    effects = {str(statement.get("Effect", "")).lower() for statement in statements}
    return AuthDecision("allow" in effects and "deny" not in effects, context)


# --------------------------------------------------------------------------- server


STREAM_PATH = re.compile(r"^/v1/capabilities/[^/]+/predict/stream/?$")
# The OpenAI-compatible turn routes: the Function URL serves them too, streaming as made.
CHAT_PATH = re.compile(r"^/v1/(chat/completions|responses)/?$")


def load_stream_door(function: Any) -> Any:
    """Load ``app.py`` beside the streaming door's ``run.sh`` and build its StreamDoor."""
    import importlib.util

    path = function.code_uri / "app.py"
    spec = importlib.util.spec_from_file_location(f"lambda_{function.name}_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.StreamDoor()


class HttpGateway(ThreadingHTTPServer):
    """Serves the template's HttpApi routes by invoking the functions in-process."""

    daemon_threads = True
    block_on_close = False  # an idle keep-alive client must not hold up shutdown
    request_queue_size = 128  # the default backlog of 5 resets a burst of clients

    def __init__(
        self,
        address: tuple[str, int],
        routes: Sequence[Route],
        registry: FunctionRegistry,
        authorizers: Mapping[str, AuthorizerConfig],
        access_log: bool = False,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self.routes = list(routes)
        # A client that stalls (half a request line, headers or body, or an idle
        # keep-alive connection) is cut off after this long instead of holding a thread.
        self.request_timeout_seconds = request_timeout_seconds
        self.registry = registry
        self.authorizers = dict(authorizers)
        self.auth_caches = {
            name: AuthorizerCache(config.ttl_seconds) for name, config in authorizers.items()
        }
        self.access_log = access_log
        # The Function URL streaming door (functions/stream), when the template has one.
        self.stream_door: Any = None
        super().__init__(address, _GatewayRequestHandler)

    def handle_request_of(self, request: HttpRequest) -> GatewayResponse:
        """Route, authorize, invoke, translate: one request through the API."""
        match = match_route(self.routes, request.method, request.raw_path)
        if match is None:
            return gateway_error(
                404, "not_found", f"No route for {request.method.upper()} {request.raw_path}"
            )
        authorizer_context: Mapping[str, Any] | None = None
        if match.route.authorizer is not None:
            decision_or_response = self._authorize(request, match, match.route.authorizer)
            if isinstance(decision_or_response, GatewayResponse):
                return decision_or_response
            authorizer_context = decision_or_response.context
        event = build_http_event(
            request, match.route.route_key, match.path_parameters, authorizer_context
        )
        if len(json.dumps(event)) > LAMBDA_EVENT_BYTES:
            # The words of every door's refusal (input_gate, the streaming door).
            return gateway_error(
                413,
                "payload_too_large",
                f"the request body is larger than {LAMBDA_EVENT_BYTES} bytes",
            )
        try:
            result = self.registry.invoke(match.route.function, event, request.request_id)
            return translate_result(result)
        except TooManyRequestsError:
            return rate_limited()
        except Exception:
            _report(
                f"{match.route.function} failed on {match.route.route_key}"
                f" (requestId {request.request_id})"
            )
            return internal_error(request.request_id)

    def _authorize(
        self, request: HttpRequest, match: RouteMatch, name: str
    ) -> AuthDecision | GatewayResponse:
        config = self.authorizers[name]
        cache = self.auth_caches[name]
        identity = tuple(request.header(header) or "" for header in config.identity_headers)
        if not all(identity):
            return missing_identity()
        decision = cache.get(identity) if identity else None
        if decision is None:
            event = build_authorizer_event(request, match, identity)
            try:
                result = self.registry.invoke(config.function, event, request.request_id)
                decision = parse_authorizer_result(result, config.simple_responses)
            except TooManyRequestsError:
                return rate_limited()
            except Exception:
                _report(f"authorizer {config.function} failed (requestId {request.request_id})")
                return internal_error(request.request_id)
            if identity:
                cache.put(identity, decision)
        if not decision.authorized:
            return gateway_error(401, "unauthorized", "the authorizer denied this request")
        return decision


def _report(what: str) -> None:
    print(f"[local_runtime] {what}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)


class _GatewayRequestHandler(StrictRequestHandler):
    server: HttpGateway
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Cuts off a stalled client: every read and write on the connection times out.
        self.connection.settimeout(self.server.request_timeout_seconds)

    def __getattr__(self, name: str) -> Any:
        # Every method is routed like API Gateway does (to ANY / $default, hence the
        # contract's 404), instead of the stdlib's HTML "501 Unsupported method".
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals (malformed request line or headers, URI or headers
        too long) in the contract's shape, never its HTML error page."""
        self.close_connection = True
        # A request line too broken to name its version: answer as HTTP/1.1 anyway (the
        # stdlib would assume HTTP/0.9 and send the body without a status line).
        self.request_version = self.protocol_version
        text = message or "the request could not be read"
        # All of them are the client's doing (bad input is never a 5xx): 505 included.
        if code in (413, 414, 431):
            response = gateway_error(413, "payload_too_large", text)
        elif code in (404, 405, 501):
            response = gateway_error(404, "not_found", text)
        else:
            response = gateway_error(400, "invalid_json", text)
        self._write(response)

    def _serve(self) -> None:
        # What the HttpApi's CorsConfiguration and the Function URL's Cors add to every
        # actual response (API Gateway drops the ones a function sets itself).
        cors = actual_response_headers(dict(self.headers), allowed_origins())
        try:
            body = self.read_body(MAX_BODY_BYTES)
        except RequestBodyTooLarge:
            self._write(_too_large(), cors)
            return
        except MalformedBody as exc:
            self._write(_unreadable(str(exc)), cors)
            return
        raw_path, _, raw_query = self.path.partition("?")
        request = HttpRequest(
            method=self.command,
            raw_path=raw_path or "/",
            raw_query=raw_query,
            headers=list(self.headers.items()),
            body=body,
            source_ip=self.client_address[0],
            protocol=self.request_version,
        )
        if is_preflight(request.method, dict(self.headers)):
            # What the HttpApi's CorsConfiguration and the Function URL's Cors answer.
            methods = ("POST",) if STREAM_PATH.match(request.raw_path) else ALLOWED_METHODS
            answer = preflight(dict(self.headers), allowed_origins(), methods)
            self._write(GatewayResponse(answer.status, list(answer.headers)))
            return
        door = self.server.stream_door
        # Locally one port stands for both: the turns that stream go to the Function URL's
        # door, as the Studio and an SDK with stream=True would use it on AWS.
        streams = STREAM_PATH.match(request.raw_path) or (
            CHAT_PATH.match(request.raw_path) and request.method.upper() == "POST"
        )
        if door is not None and streams:
            self._stream(door.handle(request.method, request.raw_path, self.headers, body), cors)
            return
        response = self.server.handle_request_of(request)
        response.headers.append(("apigw-requestid", request.request_id))
        self._write(response, cors)

    def _stream(self, response: Any, cors: Sequence[tuple[str, str]]) -> None:
        """What a Function URL in RESPONSE_STREAM mode does: each chunk as produced."""
        from convo_memory.doors.sse import write_chunked

        headers = [*response.headers, *cors, ("Date", formatdate(usegmt=True))]
        write_chunked(self, response.status, headers, response.chunks)

    def _write(self, response: GatewayResponse, cors: Sequence[tuple[str, str]] = ()) -> None:
        self.send_response(response.status)
        headers = response.headers
        if cors:
            headers = [(n, v) for n, v in headers if not is_cors_header(n)] + list(cors)
        names = {name.lower() for name, _ in headers}
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        if "date" not in names:
            self.send_header("Date", formatdate(usegmt=True))
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD" and response.body:
            self.wfile.write(response.body)

    def send_response(self, code: int, message: str | None = None) -> None:
        # Like send_response, minus the Server/Date defaults we set ourselves.
        self.log_request(code)
        self.send_response_only(code, message)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.access_log:
            super().log_message(format, *args)


def _unreadable(what: str) -> GatewayResponse:
    return gateway_error(400, "invalid_json", f"the request body cannot be read: {what}")


def _too_large() -> GatewayResponse:
    return gateway_error(
        413, "payload_too_large", f"the request body is larger than {MAX_BODY_BYTES} bytes"
    )
