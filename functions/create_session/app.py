"""``POST /v1/sessions``: open a session for an end user on a conversational capability;
``POST /v1/sessions/{id}/forks``: open one that branches off another after an answer."""

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


@app.post("/v1/sessions")
def create_session() -> Response:
    from convo_memory.api_models import SessionCreate

    workspace = workspace_id(app)
    session = container().sessions.create(workspace, body_as(app, SessionCreate).new_session())
    return json_response(201, session.to_json_dict())


@app.post("/v1/sessions/<session_id>/forks")
def fork_session(session_id: str) -> Response:
    from convo_memory.api_models import ForkCreate

    workspace = workspace_id(app)
    body = body_as(app, ForkCreate)
    fork = container().forks.fork(workspace, session_id, body.at_seq, body.metadata)
    return json_response(201, fork.to_json_dict())


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
