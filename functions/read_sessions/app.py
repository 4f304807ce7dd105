"""The read-only session routes: a session, an end user's sessions, the transcript, and
the next turn's context."""

from __future__ import annotations

import base64
import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.domain.errors import ValidationFailed
from convo_memory.http import (
    container,
    install_error_handlers,
    json_response,
    query_int,
    workspace_id,
)

logger = Logger(service="convo-memory")
app = APIGatewayHttpResolver()
install_error_handlers(app)


def _encode_cursor(value: Any) -> str | None:
    if value is None:
        return None
    raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(token: str | None) -> Any:
    if not token:
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except ValueError:
        raise ValidationFailed("nextToken is not a token this API issued") from None


@app.get("/v1/sessions")
def list_sessions() -> Response:
    workspace = workspace_id(app)
    external_ref = app.current_event.get_query_string_value("externalRef")
    if not external_ref:
        raise ValidationFailed("externalRef is required: sessions are listed per end user")
    limit = query_int(app, "limit", 20, 1, 100)
    cursor = _decode_cursor(app.current_event.get_query_string_value("nextToken"))
    if cursor is not None and not (
        isinstance(cursor, dict) and isinstance(cursor.get("after"), str)
    ):
        raise ValidationFailed("nextToken is not a token this API issued")
    after = cursor["after"] if cursor else None
    sessions, last = container().sessions.find(workspace, external_ref, limit, after)
    return json_response(
        200,
        {
            "sessions": [s.to_json_dict() for s in sessions],
            "nextToken": _encode_cursor({"after": last} if last else None),
        },
    )


@app.get("/v1/sessions/<session_id>")
def get_session(session_id: str) -> Response:
    session = container().sessions.get(workspace_id(app), session_id)
    return json_response(200, session.to_json_dict())


@app.get("/v1/sessions/<session_id>/messages")
def list_messages(session_id: str) -> Response:
    workspace = workspace_id(app)
    limit = query_int(app, "limit", 50, 1, 100)
    cursor = _decode_cursor(app.current_event.get_query_string_value("nextToken"))
    if cursor is not None and not (
        isinstance(cursor, dict) and isinstance(cursor.get("after"), int)
    ):
        raise ValidationFailed("nextToken is not a token this API issued")
    after = cursor["after"] if cursor else 0
    messages, next_after = container().sessions.messages(workspace, session_id, limit, after)
    return json_response(
        200,
        {
            "messages": [m.to_json_dict() for m in messages],
            "nextToken": _encode_cursor({"after": next_after} if next_after else None),
        },
    )


@app.get("/v1/sessions/<session_id>/context")
def get_context(session_id: str) -> Response:
    view = container().sessions.context(workspace_id(app), session_id)
    return json_response(200, view.to_json_dict())


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
