"""Glue between Powertools' HTTP resolver and the services, shared by every handler:
the resolver of an HttpApi function (``ApiResolver``), the input gate and the typed
parameters' validation as its middleware, one error mapping.

Kept import-light on purpose: a handler imports this module at cold start, while the
container (boto3, pydantic models, services) is built on first use. So are a route's
types: its signature names them through ``api`` and ``Body``/``Query``/``Header``/``Path``,
which load pydantic only when the signature is first read (by the first request, or
the OpenAPI document), never at import. How a route is declared:
docs/architecture.md, "Declaring a route".
"""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.domain import request_rules
from convo_memory.domain.errors import ServiceError, Unauthorized
from convo_memory.edge import errors, input_gate
from convo_memory.edge.errors import error_for
from convo_memory.edge.input_gate import METHODS_WITH_BODY, GatedRequest, gate
from convo_memory.edge.turn_edge import TurnEdge

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

    from convo_memory import api
    from convo_memory.bootstrap import Container

logger = logging.getLogger(__name__)
JSON = "application/json"
_GATED_BODY = "gated_json_body"
# The routes of the OpenAI-compatible door, whose error bodies add "type".
OPENAI_ROUTE_KEYS = frozenset(
    {
        "POST /v1/chat/completions",
        "GET /v1/models",
        "POST /v1/responses",
        "GET /v1/responses/{responseId}",
        "DELETE /v1/responses/{responseId}",
        "GET /v1/responses/{responseId}/input_items",
        "POST /v1/conversations",
        "GET /v1/conversations/{conversationId}",
        "POST /v1/conversations/{conversationId}",
        "DELETE /v1/conversations/{conversationId}",
        "GET /v1/conversations/{conversationId}/items",
        # (v5) A conversation's items, added, read and removed one by one.
        "POST /v1/conversations/{conversationId}/items",
        "GET /v1/conversations/{conversationId}/items/{itemId}",
        "DELETE /v1/conversations/{conversationId}/items/{itemId}",
        "POST /v1/files",
        "GET /v1/files",
        "GET /v1/files/{fileId}",
        "DELETE /v1/files/{fileId}",
        "GET /v1/files/{fileId}/content",
    }
)
# (v5) Routes whose body is a form, not JSON: the input gate's one exception.
MULTIPART_ROUTE_KEYS = frozenset({"POST /v1/files"})
Handler = TypeVar("Handler", bound=Callable[..., Any])


# -- a route's types, loaded when its signature is first read ---------------------------


class _Namespace:
    """A module's attributes, the module imported on the first one read."""

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(self._module), name)


if not TYPE_CHECKING:
    # The request bodies and answers a route's signature names: ``api.SessionCreate``.
    api = _Namespace("convo_memory.api")
_params = _Namespace("aws_lambda_powertools.event_handler.openapi.params")


# Powertools' own, by their names, made when a signature is read.
def Body(**options: Any) -> Any:
    """Powertools' ``Body()``: the parameter is the request body, validated."""
    return _params.Body(**options)


def Query(**options: Any) -> Any:
    """Powertools' ``Query()``: the parameter is a query string value, validated."""
    return _params.Query(**options)


def Header(**options: Any) -> Any:
    """Powertools' ``Header()``: the parameter is a request header, validated."""
    return _params.Header(**options)


def Path(**options: Any) -> Any:
    """Powertools' ``Path()``: the parameter is a path segment, validated."""
    return _params.Path(**options)


# -- the resolver of an HttpApi function --------------------------------------------------


@dataclass(frozen=True)
class Declaration:
    """A route as its module declared it: ``route()``'s arguments by name and its
    handler, so that the OpenAPI document can declare it again on a resolver of every
    route."""

    arguments: dict[str, Any]
    handler: Callable[..., Any]


class ApiResolver(APIGatewayHttpResolver):
    """An HttpApi function's resolver: every route behind the input gate, then its typed
    parameters validated (``Body``, ``Query``, ``Header``: a 422 in the gate's words),
    every failure in the contract's error shape; and its routes' declarations, kept for
    the one OpenAPI document of every function (``convo_memory.edge.openapi``)."""

    def __init__(self) -> None:
        super().__init__()
        self.declarations: list[Declaration] = []
        install_error_handlers(self)
        self.use(middlewares=[_typed_parameters])

    def route(self, *args: Any, **kwargs: Any) -> Callable[[Handler], Handler]:
        register = super().route(*args, **kwargs)
        # get(), post() ... pass route()'s arguments by position: keep them by name.
        bound = _ROUTE_SIGNATURE.bind(self, *args, **kwargs).arguments
        arguments = {name: value for name, value in bound.items() if name != "self"}

        def declare(handler: Handler) -> Handler:
            self.declarations.append(Declaration(arguments, handler))
            return register(handler)

        return declare


_ROUTE_SIGNATURE = inspect.signature(APIGatewayHttpResolver.route)


def container() -> Container:
    from convo_memory.execution_environment import get_container

    return get_container()


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[Any]:
    """``body`` as the JSON answer (a route's return type says its shape)."""
    return Response(
        status_code=status,
        content_type=JSON,
        # Sorted keys: an idempotent replay (stored by Powertools, sorted) is byte-identical.
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False, sort_keys=True),
        headers=headers,
    )


def text_response(
    status: int,
    body: str,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response[Any]:
    """An answer already written as text (an event stream, a chat answer, an empty 204):
    the route's return type or declared content says its shape."""
    return Response(status, content_type=content_type, body=body, headers=headers)


def error_response(error: ServiceError, *, openai: bool = False) -> Response:
    """The turn edge's answer to ``error`` as a resolver response."""
    reply = errors.error_reply(error, openai=openai)
    return Response(
        status_code=reply.status,
        content_type=JSON,
        body=reply.body,
        headers=reply.headers or None,
    )


def workspace_id(app: APIGatewayHttpResolver) -> str:
    """The workspace the authorizer resolved from the bearer token."""
    context = app.current_event.request_context.authorizer.get_lambda or {}
    workspace = context.get("workspaceId")
    if not workspace:
        raise Unauthorized("missing or unknown API token")
    return str(workspace)


def json_body(app: APIGatewayHttpResolver) -> dict[str, Any]:
    """The request body, as the input gate accepted it (400/413/422 otherwise)."""
    body = app.context.get(_GATED_BODY)
    if body is None and app.current_event.raw_event.get("routeKey") in MULTIPART_ROUTE_KEYS:
        return {}  # a form: its route reads it (``raw_body``)
    if body is None:
        event = app.current_event
        body = input_gate.read_json_object(event.body, base64_encoded=bool(event.is_base64_encoded))
    return dict(body)


def read_cursor(token: str, *scope: str) -> dict[str, Any] | None:
    """The position a ``nextToken`` carries (none when it is empty: the first page),
    verified against the listing it must belong to (``scope``: listing, workspace, then
    what the listing is of)."""
    position: dict[str, Any] | None = container().infrastructure.cursors.open(token, scope)
    return position


def next_cursor(position: dict[str, Any] | None, *scope: str) -> str | None:
    """The ``nextToken`` of the next page (``None`` on the last one)."""
    if position is None:
        return None
    token: str = container().infrastructure.cursors.issue(position, scope)
    return token


def raw_body(app: APIGatewayHttpResolver) -> bytes:
    """(v5) The request's body as bytes (a form's: an upload), as the gate bounded it."""
    event = app.current_event
    body = event.body or ""
    if event.is_base64_encoded:
        return base64.b64decode(body)
    return body.encode("utf-8", errors="surrogateescape")


def edge(app: APIGatewayHttpResolver) -> TurnEdge:
    """The turn edge of this request: what a turn route does around the service, within
    the HttpApi's turn deadline and the invocation's time."""
    return TurnEdge.behind_http_api(container(), app.lambda_context)


def gated(app: APIGatewayHttpResolver, route: str | None = None) -> GatedRequest:
    """The request as the input gate let it through (its workspace, key and body), its
    Idempotency-Key scoped to ``route`` (default: this request's ``METHOD /path``)."""
    event = app.current_event
    return GatedRequest(
        workspace_id(app),
        input_gate.idempotency_key(event.headers),
        json_body(app) if event.http_method.upper() in METHODS_WITH_BODY else None,
        route or route_of(app),
    )


def route_of(app: APIGatewayHttpResolver) -> str:
    """``METHOD /path`` of this request: what an Idempotency-Key is scoped to."""
    return f"{app.current_event.http_method} {app.current_event.path}"


def request_id(app: APIGatewayHttpResolver) -> str:
    """API Gateway's id of this request (its ``apigw-requestid`` header), else Lambda's."""
    try:
        found = app.current_event.request_context.request_id
    except (AttributeError, KeyError, TypeError):
        found = None
    if not found:
        found = getattr(app.lambda_context, "aws_request_id", None)
    return str(found or uuid.uuid4())


def _input_gate(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response:
    """Every route's request through the input gate, before its handler runs: the token
    first (as the authorizer's 401), then path ids, headers, query and body."""
    event = app.current_event
    if event.raw_event.get("routeKey") == "$default":  # the not-found catch-all
        return next_middleware(app)
    behind_authorizer = (event.raw_event.get("requestContext") or {}).get("authorizer") is not None
    workspace = workspace_id(app) if behind_authorizer else None  # 401 before anything else
    request = gate(
        method=event.http_method,
        route=route_of(app),
        headers=event.headers,
        query=event.query_string_parameters,
        body=event.body,
        base64_encoded=bool(event.is_base64_encoded),
        workspace_id=workspace,
        path_ids=app.context.get("_route_args") or {},
        multipart=event.raw_event.get("routeKey") in MULTIPART_ROUTE_KEYS,
    )
    if request.body is not None:
        app.append_context(**{_GATED_BODY: request.body})
    return next_middleware(app)


def _typed_parameters(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response:
    """The route's typed parameters (its ``Body``, ``Query``, ``Header``, path values)
    validated by Powertools and passed to it, after the gate: the gate's refusals come
    first, as they always have; a value the types refuse is a 422 in the words the gate
    uses for a body (``request_rules.schema_refusal``)."""
    validation, refused = _validation()
    try:
        return validation.handler(app, next_middleware)
    except refused as exc:
        errors = [_in_body_terms(error) for error in exc.errors()]
        raise request_rules.schema_refusal(errors, app.context.get(_GATED_BODY)) from None


def _in_body_terms(error: dict[str, Any]) -> dict[str, Any]:
    # A body's fields are named as the body model names them (no leading "body").
    loc = tuple(error.get("loc") or ())
    return {**error, "loc": loc[1:] if loc[:1] == ("body",) else loc}


@cache
def _validation() -> tuple[Any, type[Any]]:
    """Powertools' request validation (on first use: it imports pydantic) and the error
    it raises. It validates the body the gate read, whatever the Content-Type (the gate
    takes a JSON object under any, as every door does)."""
    from aws_lambda_powertools.event_handler.middlewares.openapi_validation import (
        OpenAPIRequestValidationMiddleware,
    )
    from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

    class GatedBodyValidation(OpenAPIRequestValidationMiddleware):
        def _get_body(self, app: Any) -> dict[str, Any]:
            return json_body(app)

    return GatedBodyValidation(), RequestValidationError


def install_error_handlers(app: APIGatewayHttpResolver) -> None:
    """Put every route behind the input gate and map every failure to the contract's
    error shape, in one place: domain errors to their status and code, anything
    unexpected to ``500 internal`` with the request id it was logged under."""
    app.use(middlewares=[_input_gate])

    @app.exception_handler(Exception)
    def _failure(exc: Exception) -> Response:
        # The OpenAI-compatible routes' bodies add "type", for OpenAI's SDKs.
        openai = app.current_event.raw_event.get("routeKey") in OPENAI_ROUTE_KEYS
        return error_response(error_for(exc, request_id(app)), openai=openai)

    @app.not_found
    def _not_found(exc: Exception) -> Response:
        return json_response(404, {"error": {"code": "not_found", "message": "no such route"}})
