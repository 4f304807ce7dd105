"""The read-only session routes: a session, an end user's sessions, the transcript, the
next turn's context and what a past turn was sent; (v4) the Responses door's stored
responses (and what they were sent) and conversations (and their items). Every
``nextToken`` is a signed cursor bound to its listing."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain import request_rules
from convo_memory.domain.errors import ItemNotFound, ResponseNotFound, SessionNotFound
from convo_memory.edge import input_gate
from convo_memory.edge.api_contract import answers
from convo_memory.edge.resolver import (
    ApiResolver,
    Path,
    Query,
    api,
    container,
    json_response,
    next_cursor,
    read_cursor,
    workspace_id,
)
from convo_memory.observability import http_handler

app = ApiResolver()
# The query parameters of a page.
PAGE_SIZE = {"ge": 1, "le": 100, "description": "Page size."}
NEXT_TOKEN = {
    "alias": "nextToken",
    "max_length": input_gate.MAX_QUERY_VALUE_CHARS,
    "description": "From the previous page.",
}


@app.get(
    "/v1/sessions",
    summary="An end user's sessions, newest first",
    tags=["sessions"],
    responses=answers(200),
)
def list_sessions(
    external_ref: Annotated[
        str,
        Query(
            alias="externalRef",
            min_length=1,
            max_length=request_rules.MAX_EXTERNAL_REF_CHARS,
            description="Your own id of the end user.",
        ),
    ],
    limit: Annotated[int, Query(**PAGE_SIZE)] = 20,
    next_token: Annotated[str, Query(**NEXT_TOKEN)] = "",
) -> Response[api.SessionPage]:
    workspace = workspace_id(app)
    scope = ("sessions", workspace, external_ref)
    sessions, last = container().sessions.find(
        workspace, external_ref, limit, read_cursor(next_token, *scope)
    )
    return json_response(
        200,
        {"sessions": [s.to_json_dict() for s in sessions], "nextToken": next_cursor(last, *scope)},
    )


@app.get(
    "/v1/sessions/<session_id>",
    summary="A session (archived ones too)",
    tags=["sessions"],
    responses=answers(200, SessionNotFound),
)
def get_session(session_id: str) -> Response[api.Session]:
    session = container().sessions.get(workspace_id(app), session_id)
    return json_response(200, session.to_json_dict())


@app.get(
    "/v1/sessions/<session_id>/messages",
    summary="The transcript, oldest first",
    tags=["sessions"],
    responses=answers(200, SessionNotFound),
)
def list_messages(
    session_id: str,
    limit: Annotated[int, Query(**PAGE_SIZE)] = 50,
    next_token: Annotated[str, Query(**NEXT_TOKEN)] = "",
) -> Response[api.MessagePage]:
    workspace = workspace_id(app)
    scope = ("messages", workspace, session_id)
    messages, last = container().sessions.messages(
        workspace, session_id, limit, read_cursor(next_token, *scope)
    )
    return json_response(
        200,
        {"messages": [m.to_json_dict() for m in messages], "nextToken": next_cursor(last, *scope)},
    )


@app.get(
    "/v1/sessions/<session_id>/context",
    summary="Exactly what the next turn would see",
    tags=["sessions"],
    responses=answers(200, SessionNotFound),
)
def get_context(session_id: str) -> Response[api.ContextView]:
    from convo_memory.api import ContextView

    preview = container().sessions.context(workspace_id(app), session_id)
    return json_response(200, ContextView.of(preview, session_id).to_json_dict())


@app.get(
    "/v1/sessions/<session_id>/messages/<seq>/prompt",
    summary="What the model was sent for the turn of message seq (its first model call)",
    tags=["sessions"],
    responses=answers(200, SessionNotFound),
)
def get_prompt(
    session_id: str,
    # A message's seq (``request_rules.path_seq`` refuses any other value in its own words).
    seq: Annotated[str, Path(json_schema_extra={"pattern": f"^{request_rules.SEQ.pattern}$"})],
) -> Response[api.PromptView]:
    from convo_memory.api import PromptView

    sent = container().sessions.sent_prompt(
        workspace_id(app), session_id, request_rules.path_seq(seq)
    )
    return json_response(200, PromptView.of(sent).to_json_dict())


# -- the Responses door's stored responses and conversations (v4) -------------------------

ITEM_PAGE = {"ge": 1, "le": 100, "description": "Items per page."}
AFTER = {
    "max_length": input_gate.MAX_QUERY_VALUE_CHARS,
    "description": "An item id: the page starts after it.",
}
ORDER = {"description": "asc: oldest first; desc (the default, as OpenAI's): newest first."}


@app.get(
    "/v1/responses/<response_id>",
    summary="OpenAI-compatible: a stored response (its usage is not kept: null)",
    tags=["openai"],
    responses=answers(200, ResponseNotFound, openai=True),
)
def get_response(response_id: str) -> Response[api.ResponseObject]:
    from convo_memory.doors.response_frames import stored_response

    found = container().responses.get(workspace_id(app), response_id)
    return json_response(200, stored_response(found))


@app.get(
    "/v1/responses/<response_id>/input_items",
    summary="OpenAI-compatible: what the model was sent for a response, as items (the "
    "recall and the summary as developer messages, the replayed messages, the input)",
    tags=["openai"],
    responses=answers(200, ResponseNotFound, openai=True),
)
def list_input_items(
    response_id: str,
    limit: Annotated[int, Query(**ITEM_PAGE)] = 20,
    after: Annotated[str | None, Query(**AFTER)] = None,
    order: Annotated[Literal["asc", "desc"], Query(**ORDER)] = "desc",
) -> Response[api.ItemList]:
    from convo_memory.doors.response_frames import page_of, sent_items

    found, sent = container().responses.sent(workspace_id(app), response_id)
    return json_response(200, page_of(sent_items(found, sent), limit, after, order))


@app.get(
    "/v1/conversations/<conversation_id>",
    summary="OpenAI-compatible: a conversation (any session)",
    tags=["openai"],
    responses=answers(200, SessionNotFound, openai=True),
)
def get_conversation(conversation_id: str) -> Response[api.Conversation]:
    from convo_memory.doors.response_frames import conversation_json

    session = container().conversations.get(workspace_id(app), conversation_id)
    return json_response(200, conversation_json(session))


@app.get(
    "/v1/conversations/<conversation_id>/items",
    summary="OpenAI-compatible: a conversation's messages as items",
    tags=["openai"],
    responses=answers(200, SessionNotFound, openai=True),
)
def list_conversation_items(
    conversation_id: str,
    limit: Annotated[int, Query(**ITEM_PAGE)] = 20,
    after: Annotated[str | None, Query(**AFTER)] = None,
    order: Annotated[Literal["asc", "desc"], Query(**ORDER)] = "desc",
) -> Response[api.ItemList]:
    from convo_memory.doors.response_frames import item_list, transcript_item

    page = container().conversations.items(workspace_id(app), conversation_id, limit, after, order)
    items = [transcript_item(page.session_id, message) for message in page.messages]
    return json_response(200, item_list(items, page.has_more))


@app.get(
    "/v1/conversations/<conversation_id>/items/<item_id>",
    summary="OpenAI-compatible: one of a conversation's messages as an item",
    tags=["openai"],
    responses=answers(200, SessionNotFound, ItemNotFound, openai=True),
)
def get_conversation_item(conversation_id: str, item_id: str) -> Response[api.MessageItem]:
    from convo_memory.doors.response_frames import transcript_item

    message = container().conversations.item(workspace_id(app), conversation_id, item_id)
    return json_response(200, transcript_item(conversation_id, message))


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
