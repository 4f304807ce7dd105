"""The session routes that change one: replace its metadata, delete it; (v4) the same
for a conversation, and deleting a stored response (its turn stays)."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import (
    ExternalRefImmutable,
    ItemNotFound,
    PrincipalImmutable,
    ResponseNotFound,
    SessionNotFound,
)
from convo_memory.edge.api_contract import answers
from convo_memory.edge.resolver import (
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


# -- (v4) the Responses door's stored responses and conversations --------------------------


@app.delete(
    "/v1/responses/<response_id>",
    summary="OpenAI-compatible: delete a stored response (its turn stays in its conversation)",
    tags=["openai"],
    responses=answers(200, ResponseNotFound, openai=True),
)
def delete_response(response_id: str) -> Response[api.ResponseDeleted]:
    container().responses.delete(workspace_id(app), response_id)
    return json_response(200, {"id": response_id, "object": "response", "deleted": True})


@app.post(
    "/v1/conversations/<conversation_id>",
    summary="OpenAI-compatible: replace a conversation's metadata",
    tags=["openai"],
    responses=answers(200, SessionNotFound, openai=True),
)
def update_conversation(
    conversation_id: str, body: Annotated[api.ConversationUpdate, Body()]
) -> Response[api.Conversation]:
    from convo_memory.doors.response_frames import conversation_json

    session = container().conversations.update(workspace_id(app), conversation_id, body.metadata)
    return json_response(200, conversation_json(session))


@app.post(
    "/v1/conversations/<conversation_id>/items",
    summary="OpenAI-compatible: add items to a conversation (imported history, each once)",
    tags=["openai"],
    responses=answers(200, SessionNotFound, openai=True),
)
def add_conversation_items(
    conversation_id: str, body: Annotated[api.ConversationItemsAdd, Body()]
) -> Response[api.ItemList]:
    from convo_memory.doors.response_frames import item_list, transcript_item
    from convo_memory.doors.responses import added_items

    session_id, messages = container().conversations.add_items(
        workspace_id(app), conversation_id, added_items(body)
    )
    return json_response(200, item_list([transcript_item(session_id, m) for m in messages], False))


@app.delete(
    "/v1/conversations/<conversation_id>/items/<item_id>",
    summary="OpenAI-compatible: remove one of a conversation's messages",
    tags=["openai"],
    responses=answers(200, SessionNotFound, ItemNotFound, openai=True),
)
def delete_conversation_item(conversation_id: str, item_id: str) -> Response[api.Conversation]:
    from convo_memory.doors.response_frames import conversation_json

    session = container().conversations.remove_item(workspace_id(app), conversation_id, item_id)
    return json_response(200, conversation_json(session))


@app.delete(
    "/v1/conversations/<conversation_id>",
    summary="OpenAI-compatible: delete a conversation (as DELETE /v1/sessions/{id})",
    tags=["openai"],
    responses=answers(200, SessionNotFound, openai=True),
)
def delete_conversation(conversation_id: str) -> Response[api.ConversationDeleted]:
    container().conversations.delete(workspace_id(app), conversation_id)
    body = {"id": conversation_id, "object": "conversation.deleted", "deleted": True}
    return json_response(200, body)


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
