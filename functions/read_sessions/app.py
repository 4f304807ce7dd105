"""The read-only session routes: a session, an end user's sessions, the transcript, the
next turn's context and what a past turn was sent. Every ``nextToken`` is a signed
cursor bound to its listing."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import (
    container,
    install_error_handlers,
    json_response,
    next_cursor,
    query_external_ref,
    query_int,
    read_cursor,
    workspace_id,
)
from convo_memory.observability import http_handler

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.get("/v1/sessions")
def list_sessions() -> Response:
    workspace = workspace_id(app)
    external_ref = query_external_ref(app)
    limit = query_int(app, "limit", 20, 1, 100)
    scope = ("sessions", workspace, external_ref)
    sessions, last = container().sessions.find(
        workspace, external_ref, limit, read_cursor(app, *scope)
    )
    return json_response(
        200,
        {"sessions": [s.to_json_dict() for s in sessions], "nextToken": next_cursor(last, *scope)},
    )


@app.get("/v1/sessions/<session_id>")
def get_session(session_id: str) -> Response:
    session = container().sessions.get(workspace_id(app), session_id)
    return json_response(200, session.to_json_dict())


@app.get("/v1/sessions/<session_id>/messages")
def list_messages(session_id: str) -> Response:
    workspace = workspace_id(app)
    limit = query_int(app, "limit", 50, 1, 100)
    scope = ("messages", workspace, session_id)
    messages, last = container().sessions.messages(
        workspace, session_id, limit, read_cursor(app, *scope)
    )
    return json_response(
        200,
        {"messages": [m.to_json_dict() for m in messages], "nextToken": next_cursor(last, *scope)},
    )


@app.get("/v1/sessions/<session_id>/context")
def get_context(session_id: str) -> Response:
    from convo_memory.api_models import ContextView

    preview = container().sessions.context(workspace_id(app), session_id)
    return json_response(200, ContextView.of(preview).to_json_dict())


@app.get("/v1/sessions/<session_id>/messages/<seq>/prompt")
def get_prompt(session_id: str, seq: str) -> Response:
    from convo_memory.api_models import PromptView
    from convo_memory.input_gate import path_seq

    sent = container().sessions.sent_prompt(workspace_id(app), session_id, path_seq(seq))
    return json_response(200, PromptView.of(sent).to_json_dict())


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
