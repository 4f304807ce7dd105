"""``POST /v1/sessions``: open a session for an end user on a conversational capability;
(v4) ``POST /v1/conversations``: open a conversation its first response binds. (Forks
have a function of their own: ``functions/fork_session``.)"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import CapabilityNotConversational, CapabilityNotFound
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
