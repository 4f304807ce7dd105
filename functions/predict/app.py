"""Turn routes: predict (stateless or with a session), its buffered SSE twin, the
session's message door, and the OpenAI-compatible door (chat completions and its model
list). All go through the same turn edge (``convo_memory.turn_edge``) to the same
serving path (``TurnService``); they differ only in how they read the request and
write the answer."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import (
    container,
    install_error_handlers,
    json_body,
    json_response,
    serve_turn,
    workspace_id,
)
from convo_memory.input_gate import parse_model
from convo_memory.observability import http_handler
from convo_memory.turn_edge import TurnEdge

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.post("/v1/capabilities/<capability_id>/predict")
def predict(capability_id: str) -> Response:
    from convo_memory.api_models import TurnInput  # pydantic: on first use, not at import

    turn = parse_model(TurnInput, json_body(app))

    def compute(_: TurnEdge, workspace: str, budget: float | None) -> dict[str, Any]:
        prediction = container().turns.predict(
            workspace, capability_id, turn.input, turn.session_id, budget_seconds=budget
        )
        result: dict[str, Any] = prediction.to_json_dict()
        return result

    return json_response(200, serve_turn(app, "predict", compute))


@app.post("/v1/capabilities/<capability_id>/predict/stream")
def predict_stream(capability_id: str) -> Response:
    """The streaming door behind API Gateway, which buffers: the same events, delivered
    at once. The Function URL (``StreamFunction``) streams them as they are produced."""
    from convo_memory.api_models import TurnInput
    from convo_memory.sse import sse_event

    turn = parse_model(TurnInput, json_body(app))
    events: list[str] = []
    streamed: list[bool] = [False]

    def delta(text: str) -> None:
        streamed[0] = True
        events.append(sse_event("delta", {"text": text}))

    def tool(name: str, status: str) -> None:
        events.append(sse_event("tool", {"name": name, "status": status}))

    def compute(_: TurnEdge, workspace: str, budget: float | None) -> dict[str, Any]:
        prediction = container().turns.predict(
            workspace,
            capability_id,
            turn.input,
            turn.session_id,
            sink=delta,
            on_tool=tool,
            budget_seconds=budget,
        )
        result: dict[str, Any] = prediction.to_json_dict()
        return result

    result = serve_turn(app, "stream-buffered", compute)
    if not streamed[0]:  # a replayed response: its answer as one delta
        events.append(sse_event("delta", {"text": result["output"]}))
    events.append(sse_event("done", result))
    return Response(200, content_type="text/event-stream; charset=utf-8", body="".join(events))


@app.post("/v1/sessions/<session_id>/messages")
def session_message(session_id: str) -> Response:
    from convo_memory.api_models import MessageInput

    message = parse_model(MessageInput, json_body(app))

    def compute(_: TurnEdge, workspace: str, budget: float | None) -> dict[str, Any]:
        prediction = container().turns.session_message(
            workspace, session_id, message.input, budget_seconds=budget
        )
        result: dict[str, Any] = prediction.to_json_dict()
        return result

    return json_response(200, serve_turn(app, "messages", compute))


@app.post("/v1/chat/completions")
def chat_completions() -> Response:
    """The OpenAI-compatible door through API Gateway: a ``chat.completion``, or with
    ``stream: true`` its ``chat.completion.chunk`` lines all at once."""
    from convo_memory import chat_completions as chat

    chat_turn = chat.read_chat_turn(json_body(app), app.current_event.headers)
    stamp = chat.CompletionStamp.new(chat_turn.capability_id)
    deltas: list[str] = []

    def compute(turns: TurnEdge, workspace: str, budget: float | None) -> dict[str, Any]:
        outcome = turns.serve_turn(
            workspace,
            chat_turn.capability_id,
            chat_turn.user_input,
            chat_turn.choice,
            chat_turn.client,
            sink=deltas.append if chat_turn.stream else None,
            budget_seconds=budget,
        )
        return chat.turn_result(stamp, outcome)

    door = "chat-stream-buffered" if chat_turn.stream else "chat"
    result = serve_turn(app, door, compute, route=chat.ROUTE)
    headers = chat.session_headers(result)
    if not chat_turn.stream:
        return json_response(200, chat.chat_completion(result), headers=headers or None)
    body = chat.buffered_stream(result, deltas, chat_turn.include_usage)
    return Response(
        200,
        content_type="text/event-stream; charset=utf-8",
        body=body,
        headers=headers or None,
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
