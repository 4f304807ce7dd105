"""Turn routes: predict (stateless or with a session), its buffered SSE twin, the
session's message door, and the OpenAI-compatible door (chat completions and its model
list). Each reads its request into a turn command, the turn edge serves it
(``convo_memory.turn_edge``), and the door writes the result: they differ only in how
they read the request and write the answer."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import (
    container,
    edge,
    gated,
    install_error_handlers,
    json_body,
    json_response,
    workspace_id,
)
from convo_memory.observability import http_handler

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.post("/v1/capabilities/<capability_id>/predict")
def predict(capability_id: str) -> Response:
    from convo_memory import predict_door

    return json_response(200, predict_door.predict(edge(app), gated(app), capability_id))


@app.post("/v1/capabilities/<capability_id>/predict/stream")
def predict_stream(capability_id: str) -> Response:
    """The streaming door behind API Gateway, which buffers: the same events, delivered
    at once. The Function URL (``StreamFunction``) streams them as they are produced."""
    from convo_memory import predict_door

    events = predict_door.predict_stream(edge(app), gated(app), capability_id)
    return Response(200, content_type="text/event-stream; charset=utf-8", body=events)


@app.post("/v1/sessions/<session_id>/messages")
def session_message(session_id: str) -> Response:
    from convo_memory import predict_door

    return json_response(200, predict_door.session_message(edge(app), gated(app), session_id))


@app.post("/v1/chat/completions")
def chat_completions() -> Response:
    """The OpenAI-compatible door through API Gateway: a ``chat.completion``, or with
    ``stream: true`` its ``chat.completion.chunk`` lines all at once."""
    from convo_memory import chat_completions as chat

    chat_turn = chat.read_chat_turn(json_body(app), app.current_event.headers)
    answer = chat.complete(edge(app), gated(app, chat.ROUTE), chat_turn)
    return Response(
        200, content_type=answer.content_type, body=answer.body, headers=answer.headers or None
    )


@app.get("/v1/models")
def models() -> Response:
    """The OpenAI-compatible door's model list: the workspace's conversational
    capabilities (a model id is a capability id)."""
    from convo_memory.chat_completions import models_list

    workspace = workspace_id(app)
    return json_response(200, models_list(workspace, container().catalog.list_all(workspace)))


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
