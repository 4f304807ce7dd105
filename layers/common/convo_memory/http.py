"""Glue between Powertools' HTTP resolver and the services, shared by every handler.

Kept import-light on purpose: a handler imports this module at cold start, while the
container (boto3, pydantic models, services) is built on first use.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import (
    InvalidJson,
    ServiceError,
    StoreUnavailable,
    Unauthorized,
    ValidationFailed,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    from convo_memory.bootstrap import Container

logger = logging.getLogger(__name__)
JSON = "application/json"


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
    return json_response(error.status, error.to_body())


def workspace_id(app: APIGatewayHttpResolver) -> str:
    """The workspace the authorizer resolved from the bearer token."""
    context = app.current_event.request_context.authorizer.get_lambda or {}
    workspace = context.get("workspaceId")
    if not workspace:
        raise Unauthorized("missing or unknown API token")
    return str(workspace)


def json_body(app: APIGatewayHttpResolver) -> dict[str, Any]:
    raw = app.current_event.decoded_body
    if raw is None or raw == "":
        raise InvalidJson("the request body must be a JSON object")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidJson(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidJson("the request body must be a JSON object")
    return body


def parse(model_name: str, data: Any) -> Any:
    """Validate ``data`` against ``convo_memory.domain.models.<model_name>``; schema
    violations become 422 ``validation_error`` with per-field details."""
    from pydantic import ValidationError

    from convo_memory.domain import models

    model = getattr(models, model_name)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [
            {"loc": [str(p) for p in err["loc"]], "msg": err["msg"], "type": err["type"]}
            for err in exc.errors(include_url=False, include_context=False, include_input=False)
        ]
        first = details[0] if details else {"loc": [], "msg": "invalid"}
        where = ".".join(first["loc"]) or "body"
        raise ValidationFailed(f"{where}: {first['msg']}", details=details) from None


def body_as(app: APIGatewayHttpResolver, model_name: str) -> Any:
    return parse(model_name, json_body(app))


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


def check_idempotency_key(key: str) -> None:
    if not 1 <= len(key) <= 255 or not key.isprintable():
        raise ValidationFailed("Idempotency-Key must be 1-255 printable characters")


def idempotent(
    app: APIGatewayHttpResolver,
    workspace: str,
    body: Any,
    compute: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """Run a turn at most once per ``Idempotency-Key`` (when the client sent one)."""
    key = app.current_event.headers.get("idempotency-key")
    if key is None:
        return compute()
    check_idempotency_key(key)
    route = f"{app.current_event.http_method} {app.current_event.path}"
    return container().idempotency.run(
        workspace_id=workspace,
        key=key,
        route=route,
        body=body,
        compute=compute,
        lambda_context=app.lambda_context,
    )


def install_error_handlers(app: APIGatewayHttpResolver) -> None:
    """Map domain errors to the contract's error shape, in one place."""

    @app.exception_handler(ServiceError)
    def _service_error(exc: ServiceError) -> Response:
        return error_response(exc)

    @app.exception_handler(StoreUnavailable)
    def _unavailable(exc: StoreUnavailable) -> Response:
        logger.warning("store unavailable: %s", exc)
        return json_response(
            503,
            {"error": {"code": "unavailable", "message": "storage is temporarily unavailable"}},
            headers={"Retry-After": "1"},
        )

    @app.not_found
    def _not_found(exc: Exception) -> Response:
        return json_response(404, {"error": {"code": "not_found", "message": "no such route"}})
