"""Glue between Powertools' HTTP resolver and the services, shared by every handler.

Kept import-light on purpose: a handler imports this module at cold start, while the
container (boto3, pydantic models, services) is built on first use.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools.event_handler import Response

from convo_memory import input_gate, observability
from convo_memory.domain.errors import (
    InternalError,
    ServiceError,
    StoreUnavailable,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)
from convo_memory.time_budget import RECORDING_MARGIN_SECONDS

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
    from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
    from pydantic import BaseModel

    from convo_memory.bootstrap import Container

logger = logging.getLogger(__name__)
JSON = "application/json"
_GATED_BODY = "gated_json_body"
_METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
Model = TypeVar("Model", bound="BaseModel")


def container() -> Container:
    from convo_memory.bootstrap import get_container

    return get_container()


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type=JSON,
        # Sorted keys: an idempotent replay (stored by Powertools, sorted) is byte-identical.
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False, sort_keys=True),
        headers=headers,
    )


def error_response(error: ServiceError) -> Response:
    return json_response(error.status, error.to_body(), headers=error.headers() or None)


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
    position: dict[str, Any] | None = container().cursors.open(token, scope)
    return position


def next_cursor(position: dict[str, Any] | None, *scope: str) -> str | None:
    """The ``nextToken`` of the next page (``None`` on the last one)."""
    if position is None:
        return None
    token: str = container().cursors.issue(position, scope)
    return token


def idempotent(
    app: APIGatewayHttpResolver,
    workspace: str,
    body: Any,
    compute: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """Run a turn at most once per ``Idempotency-Key`` (when the client sent one)."""
    key = input_gate.idempotency_key(app.current_event.headers)
    if key is None:
        return compute()
    runner = container().idempotency
    if runner is None:  # a deployment without the idempotency table (unit tests)
        return compute()
    route = f"{app.current_event.http_method} {app.current_event.path}"
    return runner.run(
        workspace_id=workspace,
        key=key,
        route=route,
        body=body,
        compute=compute,
        lambda_context=app.lambda_context,
    )


def turn_budget(lambda_context: Any) -> float | None:
    """The turn's time: the deployment's turn deadline, or less when the invocation has
    less left (minus the time recording takes), so Lambda never kills a turn unrecorded."""
    remaining = getattr(lambda_context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    left = float(remaining()) / 1000 - RECORDING_MARGIN_SECONDS
    return max(0.0, min(container().settings.turn_deadline_seconds, left))


def counted_turn(door: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute`` (one turn), counted in the ``Turns`` metric by door and outcome."""
    return observability.counted_turn(container().metrics, door, compute)


def admit_turn(workspace: str) -> None:
    """Refuse the workspace's turn over its rate limit (``429 rate_limited`` with
    ``Retry-After``), after the input gate and before the turn or its idempotency key."""
    container().turn_limiter.admit(workspace)


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
    if (event.raw_event.get("requestContext") or {}).get("authorizer") is not None:
        workspace_id(app)  # a route behind the authorizer: an unknown token is 401 first
    for name, value in (app.context.get("_route_args") or {}).items():
        input_gate.check_path_id(name, str(value))
    input_gate.idempotency_key(event.headers)
    input_gate.check_query(event.query_string_parameters)
    if event.http_method.upper() in _METHODS_WITH_BODY:
        body = input_gate.read_json_object(event.body, base64_encoded=bool(event.is_base64_encoded))
        app.append_context(**{_GATED_BODY: body})
    return next_middleware(app)


def misconfigured(exc: BaseException) -> bool:
    """Whether ``exc`` is the deployment's invalid configuration (``SettingsError``)."""
    # Imported here: config pulls in pydantic, which a handler's import must not pay for.
    from convo_memory.config import SettingsError

    return isinstance(exc, SettingsError)


def install_error_handlers(app: APIGatewayHttpResolver) -> None:
    """Put every route behind the input gate and map every failure to the contract's
    error shape, in one place: domain errors to their status and code, anything
    unexpected to ``500 internal`` with the request id it was logged under."""
    app.use(middlewares=[_input_gate])

    @app.exception_handler(ServiceError)
    def _service_error(exc: ServiceError) -> Response:
        return error_response(exc.in_request(request_id(app)))

    @app.exception_handler(StoreUnavailable)
    def _unavailable(exc: StoreUnavailable) -> Response:
        logger.warning("store unavailable: %s", exc)
        return error_response(Unavailable().in_request(request_id(app)))

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response:
        failure = InternalError(request_id(app))
        if misconfigured(exc):
            # Logged once, naming the variable, when the container failed to build.
            return error_response(failure)
        logger.error(
            "unexpected %s (requestId %s)",
            type(exc).__name__,
            failure.request_id,
            exc_info=exc,
            extra={"requestId": failure.request_id},
        )
        return error_response(failure)

    @app.not_found
    def _not_found(exc: Exception) -> Response:
        return json_response(404, {"error": {"code": "not_found", "message": "no such route"}})
