"""``POST /v1/sessions/{id}/forks``: open a session that branches off another after an
answer. On a function of its own (its own reserved concurrency), so that one workspace's
storm of forks never holds the copies that open other workspaces' sessions; a fork
counts against the workspace's turn limit as a turn does, and does bounded work."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import SessionNotFound
from convo_memory.edge.api_contract import answers
from convo_memory.edge.resolver import (
    ApiResolver,
    Body,
    api,
    container,
    json_response,
    workspace_id,
)
from convo_memory.observability import http_handler

app = ApiResolver()


@app.post(
    "/v1/sessions/<session_id>/forks",
    summary="Branch the conversation after an answer (atSeq): a new session with the same "
    "end user, principal and capability, whose history is the messages up to atSeq",
    tags=["sessions"],
    responses=answers(201, SessionNotFound),
)
def fork_session(session_id: str, body: Annotated[api.ForkCreate, Body()]) -> Response[api.Session]:
    fork = container().forks.branch(workspace_id(app), session_id, body.at_seq, body.metadata)
    return json_response(201, fork.to_json_dict())


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
