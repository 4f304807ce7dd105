"""Glue between Powertools' HTTP resolver and the services, shared by every handler.

Kept import-light on purpose: a handler imports this module at cold start, while the
container (boto3, pydantic models, services) is built on first use.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools.event_handler import Response

from convo_memory import input_gate, turn_edge
from convo_memory.domain.errors import ServiceError, Unauthorized, ValidationFailed
from convo_memory.turn_edge import METHODS_WITH_BODY, GatedRequest, TurnEdge, error_for, gate

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
    from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
    from pydantic import BaseModel

    from convo_memory.bootstrap import Container

logger = logging.getLogger(__name__)
JSON = "application/json"
_GATED_BODY = "gated_json_body"
# The routes of the OpenAI-compatible door, whose error bodies add "type".
OPENAI_ROUTE_KEYS = frozenset({"POST /v1/chat/completions", "GET /v1/models"})
Model = TypeVar("Model", bound="BaseModel")


def container() -> Container:
    from convo_memory.execution_environment import get_container

    return get_container()


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type=JSON,
        # Sorted keys: an idempotent replay (stored by Powertools, sorted) is byte-identical.
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False, sort_keys=True),
        headers=headers,
    )


def error_response(error: ServiceError, *, openai: bool = False) -> Response:
    """The turn edge's answer to ``error`` as a resolver response."""
    reply = turn_edge.error_response(error, openai=openai)
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
    if body is None:
        event = app.current_event
        body = input_gate.read_json_object(event.body, base64_encoded=bool(event.is_base64_encoded))
    return dict(body)


def body_as(app: APIGatewayHttpResolver, model: type[Model]) -> Model:
    """The request body validated as a ``model`` (422 ``validation_error`` otherwise)."""
    return input_gate.parse_model(model, json_body(app))


def query_int(app: APIGatewayHttpResolver, name: str, default: int, low: int, high: int) -> int:
    raw = app.current_event.get_query_string_value(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationFailed(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise ValidationFailed(f"{name} must be between {low} and {high}")
    return value


def query_external_ref(app: APIGatewayHttpResolver) -> str:
    """The required ``externalRef`` query parameter (1-256 characters)."""
    return input_gate.external_ref(app.current_event.get_query_string_value("externalRef"))


def read_cursor(app: APIGatewayHttpResolver, *scope: str) -> dict[str, Any] | None:
    """The position a ``nextToken`` query parameter carries, verified against the listing
    it must belong to (``scope``: listing, workspace, then what the listing is of)."""
    token = app.current_event.get_query_string_value("nextToken")
    position: dict[str, Any] | None = container().adapters.cursors.open(token, scope)
    return position


def next_cursor(position: dict[str, Any] | None, *scope: str) -> str | None:
    """The ``nextToken`` of the next page (``None`` on the last one)."""
    if position is None:
        return None
    token: str = container().adapters.cursors.issue(position, scope)
    return token


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
    )
    if request.body is not None:
        app.append_context(**{_GATED_BODY: request.body})
    return next_middleware(app)


def misconfigured(exc: BaseException) -> bool:
    """Whether ``exc`` is the deployment's invalid configuration (``SettingsError``)."""
    return turn_edge.misconfigured(exc)


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
