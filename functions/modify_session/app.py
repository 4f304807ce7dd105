"""The session routes that change one: replace its metadata, delete it."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.api_contract import answers
from convo_memory.domain.errors import ExternalRefImmutable, PrincipalImmutable, SessionNotFound
from convo_memory.http import (
    ApiResolver,
    Body,
    api,
    container,
    json_response,
    text_response,
    workspace_id,
)
from convo_memory.observability import http_handler

app = ApiResolver()


@app.patch(
    "/v1/sessions/<session_id>",
    summary="Replace a session's metadata",
    tags=["sessions"],
    responses=answers(200, SessionNotFound, PrincipalImmutable, ExternalRefImmutable),
)
def update_session(
    session_id: str, body: Annotated[api.SessionPatch, Body()]
) -> Response[api.Session]:
    session = container().sessions.patch(workspace_id(app), session_id, body.changes())
    return json_response(200, session.to_json_dict())


@app.delete(
    "/v1/sessions/<session_id>",
    summary="Delete the conversation (never its run traces)",
    tags=["sessions"],
    responses=answers(204, SessionNotFound, content={}),
)
def delete_session(session_id: str) -> Response[None]:
    container().sessions.delete(workspace_id(app), session_id)
    return text_response(204, "")


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
