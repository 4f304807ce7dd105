"""``POST /v1/sessions``: open a session for an end user on a conversational capability;
``POST /v1/sessions/{id}/forks``: open one that branches off another after an answer;
(v4) ``POST /v1/conversations``: open a conversation its first response binds."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    CapabilityNotFound,
    SessionNotFound,
)
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
    "/v1/sessions",
    summary="Open a session for an end user",
    tags=["sessions"],
    responses=answers(201, CapabilityNotFound, CapabilityNotConversational),
)
def create_session(body: Annotated[api.SessionCreate, Body()]) -> Response[api.Session]:
    session = container().sessions.create(workspace_id(app), body.new_session())
    return json_response(201, session.to_json_dict())


@app.post(
    "/v1/sessions/<session_id>/forks",
    summary="Branch the conversation after an answer (atSeq): a new session with the same "
    "end user, principal and capability, whose history is the messages up to atSeq",
    tags=["sessions"],
    responses=answers(201, SessionNotFound),
)
def fork_session(session_id: str, body: Annotated[api.ForkCreate, Body()]) -> Response[api.Session]:
    fork = container().forks.fork(workspace_id(app), session_id, body.at_seq, body.metadata)
    return json_response(201, fork.to_json_dict())


@app.post(
    "/v1/conversations",
    summary="OpenAI-compatible: open a conversation (its items, user and assistant messages, "
    "its first turns); its first response binds its model, end user and principal",
    tags=["openai"],
    responses=answers(200, openai=True),
)
def create_conversation(
    body: Annotated[api.ConversationCreate, Body()],
) -> Response[api.Conversation]:
    from convo_memory.doors.response_frames import conversation_json
    from convo_memory.doors.responses import conversation_history

    session = container().conversations.create(
        workspace_id(app), body.metadata or {}, conversation_history(body)
    )
    return json_response(200, conversation_json(session))


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
