"""The session routes that change one: replace its metadata, delete it."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import (
    body_as,
    container,
    install_error_handlers,
    json_response,
    workspace_id,
)
from convo_memory.observability import http_handler

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.patch("/v1/sessions/<session_id>")
def patch_session(session_id: str) -> Response:
    from convo_memory.api_models import SessionPatch

    workspace = workspace_id(app)
    changes = body_as(app, SessionPatch).changes()
    session = container().sessions.patch(workspace, session_id, changes)
    return json_response(200, session.to_json_dict())


@app.delete("/v1/sessions/<session_id>")
def delete_session(session_id: str) -> Response:
    container().sessions.delete(workspace_id(app), session_id)
    return Response(status_code=204, body="")


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
