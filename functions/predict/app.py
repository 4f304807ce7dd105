"""Turn routes: predict (stateless or with a session), its buffered SSE twin, the
session's message door, and the OpenAI-compatible doors (chat completions, responses
and the model list). Each reads its request into a turn command, the turn edge serves it
(``convo_memory.edge.turn_edge``), and the door writes the result: they differ only in how
they read the request and write the answer."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import (
    ExternalRefImmutable,
    ItemNotFound,
    PrincipalImmutable,
    ResponseNotFound,
    ToolCallsMismatch,
)
from convo_memory.edge.api_contract import (
    IDEMPOTENCY_KEY,
    TURN_HEADERS,
    TURN_REFUSALS,
    answers,
    event_stream,
    header,
    ref,
    stream_event,
)
from convo_memory.edge.resolver import (
    ApiResolver,
    Body,
    api,
    container,
    edge,
    gated,
    json_response,
    text_response,
    workspace_id,
)
from convo_memory.observability import http_handler

app = ApiResolver()

# What the streaming door writes (predict_door.sse_frames): our Server-Sent Events.
TURN_EVENTS = event_stream(
    "One event of the stream: zero or more `delta` (and `tool` on an agent turn), then one "
    "`done` carrying the Prediction or one `error`.",
    [
        stream_event("delta", "StreamDelta", "The next piece of the answer."),
        stream_event("tool", "StreamTool", "An agent's tool call (before its answer)."),
        stream_event("done", "Prediction", "The turn's Prediction; the last event."),
        stream_event(
            "error",
            "ErrorDetail",
            "The turn failed after the stream began (the error object: code, message, "
            "requestId on 5xx); the last event.",
        ),
    ],
    example='event: delta\ndata: {"text":"Hi"}\n\nevent: done\ndata: {...}\n\n',
)
# With ``stream: true``, the OpenAI-compatible door writes ``data:`` lines
# (chat_completions.chunk_frames): its chunks, then ``[DONE]``.
CHUNK_LINES = {
    "schema": {
        "description": "One `data:` line: a chat.completion.chunk (the first with the "
        "assistant's role, then the text in `delta.content`, the last with `finish_reason`), "
        "an error after the stream began, or `[DONE]` (the last).",
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "type": "string",
                "oneOf": [
                    {"const": "[DONE]"},
                    {
                        "contentMediaType": "application/json",
                        "contentSchema": {"anyOf": [ref("ChatCompletionChunk"), ref("ErrorBody")]},
                    },
                ],
            }
        },
    },
    "example": 'data: {"object":"chat.completion.chunk",...}\n\ndata: [DONE]\n\n',
}
# Which conversation a chat turn is of (chat_completions.read_chat_turn reads them).
CHAT_HEADERS = [
    header(
        "X-Convo-Session-Id",
        {"type": "string", "minLength": 1, "maxLength": 128},
        "A turn of this session.",
    ),
    header(
        "X-Convo-Session-Key",
        {"type": "string", "pattern": "^[\\x20-\\x7e]{1,128}$"},
        "Your own conversation id: its session is found, or opened on first use for the end "
        "user (user, safety_identifier or X-Convo-User: one is required then). Ignored with "
        "X-Convo-Session-Id.",
    ),
    header(
        "X-Convo-User",
        {"type": "string", "minLength": 1, "maxLength": 256},
        "Your end user's id, for clients that cannot set body fields: as the body's user (the "
        "session's externalRef). Differing from user or safety_identifier: 422; from the "
        "session's externalRef: 409.",
    ),
    header(
        "X-Convo-Principal",
        {"type": "string", "contentMediaType": "application/json"},
        "The end user's principal, a JSON object of string claims, stamped when a key's "
        "session is opened; one that differs from the session's is 409 (absent: the stored "
        "one applies).",
    ),
    IDEMPOTENCY_KEY,
]
# The principal a Responses request binds its conversation to (responses_door reads it).
RESPONSE_PRINCIPAL = header(
    "X-Convo-Principal",
    {"type": "string", "contentMediaType": "application/json"},
    "Your end user's principal, a JSON object of string claims, bound to a conversation by "
    "its first response; one that differs from the conversation's is 409.",
)
SESSION_OF_THE_TURN = {
    "X-Convo-Session-Id": {
        "schema": {"type": "string"},
        "description": "The session of the turn (absent when stateless).",
    }
}


@app.post(
    "/v1/capabilities/<capability_id>/predict",
    summary="A turn (stateless, or on a session with sessionId)",
    tags=["turns"],
    responses=answers(200, *TURN_REFUSALS),
    openapi_extensions=TURN_HEADERS,
)
def predict(capability_id: str, body: Annotated[api.TurnInput, Body()]) -> Response[api.Prediction]:
    from convo_memory.doors import predict as predict_door

    prediction = predict_door.predict(edge(app), gated(app), capability_id, body)
    return json_response(200, prediction)


@app.post(
    "/v1/capabilities/<capability_id>/predict/stream",
    summary="The same turn as Server-Sent Events (delta, tool, done, error)",
    tags=["turns"],
    responses=answers(200, *TURN_REFUSALS, content={"text/event-stream": TURN_EVENTS}),
    openapi_extensions=TURN_HEADERS,
)
def predict_stream(capability_id: str, body: Annotated[api.TurnInput, Body()]) -> Response[str]:
    """The streaming door behind API Gateway, which buffers: the same events, delivered
    at once. The Function URL (``StreamFunction``) streams them as they are produced."""
    from convo_memory.doors import predict as predict_door

    events = predict_door.predict_stream(edge(app), gated(app), capability_id, body)
    return text_response(200, events, "text/event-stream; charset=utf-8")


@app.post(
    "/v1/sessions/<session_id>/messages",
    summary="A turn on the session's own capability",
    tags=["turns"],
    responses=answers(200, *TURN_REFUSALS),
    openapi_extensions=TURN_HEADERS,
)
def send_message(
    session_id: str, body: Annotated[api.MessageInput, Body()]
) -> Response[api.Prediction]:
    from convo_memory.doors import predict as predict_door

    prediction = predict_door.session_message(edge(app), gated(app), session_id, body)
    return json_response(200, prediction)


@app.post(
    "/v1/chat/completions",
    summary="OpenAI-compatible: a turn (by X-Convo-Session-Id, by X-Convo-Session-Key and "
    "user, or stateless)",
    tags=["openai"],
    responses=answers(
        200,
        *TURN_REFUSALS,
        PrincipalImmutable,
        ExternalRefImmutable,
        ToolCallsMismatch,
        openai=True,
        content={
            "application/json": {"schema": ref("ChatCompletion")},
            "text/event-stream": CHUNK_LINES,
        },
        headers=SESSION_OF_THE_TURN,
    ),
    openapi_extensions={"parameters": CHAT_HEADERS},
)
def create_chat_completion(
    body: Annotated[api.ChatCompletionRequest, Body()],
) -> Response[api.ChatCompletion]:
    """The OpenAI-compatible door through API Gateway: a ``chat.completion``, or with
    ``stream: true`` its ``chat.completion.chunk`` lines all at once."""
    from convo_memory.doors import chat_completions as chat

    chat_turn = chat.chat_turn(body, app.current_event.headers)
    answer = chat.complete(edge(app), gated(app, chat.ROUTE), chat_turn)
    return text_response(200, answer.body, answer.content_type, answer.headers or None)


# With ``stream: true``, the Responses door writes ``event:``/``data:`` pairs
# (response_frames.ResponseEvents), each ``data`` carrying its type and sequence_number.
RESPONSE_EVENTS = event_stream(
    "One event of a streamed response, in order: response.created, response.in_progress, "
    "response.output_item.added, response.content_part.added, response.output_text.delta "
    "(as made), response.output_text.done, response.content_part.done, "
    "response.output_item.done, then response.completed (response.incomplete for a withheld "
    "or length-cut answer), or response.failed after the stream began. No [DONE].",
    [
        stream_event(kind, "ResponseStreamEvent", description)
        for kind, description in (
            ("response.created", "The response, in progress (its id, model, conversation)."),
            ("response.in_progress", "The same response."),
            ("response.output_item.added", "The answer's message item, empty."),
            ("response.content_part.added", "Its output_text part, empty."),
            ("response.output_text.delta", "The next piece of the answer (delta)."),
            ("response.output_text.done", "The whole text."),
            ("response.content_part.done", "The whole part."),
            ("response.output_item.done", "The whole message item."),
            ("response.completed", "The whole Response; the last event."),
            ("response.incomplete", "The whole Response, incomplete; the last event."),
            ("response.failed", "The Response with its error; the last event."),
        )
    ],
    example='event: response.created\ndata: {"type":"response.created","sequence_number":0,...}'
    "\n\n",
)


@app.post(
    "/v1/responses",
    summary="OpenAI-compatible: a response (in a conversation, after a previous response, "
    "opening a conversation, or stateless with store false)",
    tags=["openai"],
    responses=answers(
        200,
        *TURN_REFUSALS,
        ResponseNotFound,
        ItemNotFound,
        PrincipalImmutable,
        ExternalRefImmutable,
        openai=True,
        content={
            "application/json": {"schema": ref("ResponseObject")},
            "text/event-stream": RESPONSE_EVENTS,
        },
    ),
    openapi_extensions={"parameters": [RESPONSE_PRINCIPAL, IDEMPOTENCY_KEY]},
)
def create_response(
    body: Annotated[api.ResponseCreate, Body()],
) -> Response[api.ResponseObject]:
    """The Responses door through API Gateway: a Response, or with ``stream: true`` its
    events all at once."""
    from convo_memory.doors import responses as door

    turn = door.response_turn(body, app.current_event.headers)
    answer = door.create(edge(app), gated(app, door.ROUTE), turn)
    return text_response(200, answer.body, answer.content_type)


@app.get(
    "/v1/models",
    summary="OpenAI-compatible: the workspace's generative and agent capabilities",
    tags=["openai"],
    responses=answers(200, openai=True),
)
def list_models() -> Response[api.ModelList]:
    """The OpenAI-compatible door's model list: the workspace's conversational
    capabilities (a model id is a capability id)."""
    from convo_memory.doors.chat_frames import models_list

    workspace = workspace_id(app)
    return json_response(200, models_list(workspace, container().catalog.list_all(workspace)))


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
