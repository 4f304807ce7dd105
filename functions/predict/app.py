"""Turn routes: predict (stateless or with a session), its buffered SSE twin, and the
session's message door. All call the same serving path (``TurnService``)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import (
    admit_turn,
    container,
    counted_turn,
    idempotent,
    install_error_handlers,
    json_body,
    json_response,
    turn_budget,
    workspace_id,
)
from convo_memory.input_gate import parse_model
from convo_memory.observability import http_handler

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.post("/v1/capabilities/<capability_id>/predict")
def predict(capability_id: str) -> Response:
    from convo_memory.api_models import TurnInput  # pydantic: on first use, not at import

    workspace = workspace_id(app)
    body = json_body(app)
    turn = parse_model(TurnInput, body)
    admit_turn(workspace)

    def compute() -> dict[str, Any]:
        prediction = container().turns.predict(
            workspace,
            capability_id,
            turn.input,
            turn.session_id,
            budget_seconds=turn_budget(app.lambda_context),
        )
        result: dict[str, Any] = prediction.to_json_dict()
        return result

    return json_response(
        200, idempotent(app, workspace, body, lambda: counted_turn("predict", compute))
    )


@app.post("/v1/capabilities/<capability_id>/predict/stream")
def predict_stream(capability_id: str) -> Response:
    """The streaming door behind API Gateway, which buffers: the same events, delivered
    at once. The Function URL (``StreamFunction``) streams them as they are produced."""
    from convo_memory.api_models import TurnInput
    from convo_memory.sse import sse_event

    workspace = workspace_id(app)
    body = json_body(app)
    turn = parse_model(TurnInput, body)
    admit_turn(workspace)
    events: list[str] = []
    streamed: list[bool] = [False]

    def delta(text: str) -> None:
        streamed[0] = True
        events.append(sse_event("delta", {"text": text}))

    def tool(name: str, status: str) -> None:
        events.append(sse_event("tool", {"name": name, "status": status}))

    def compute() -> dict[str, Any]:
        prediction = container().turns.predict(
            workspace,
            capability_id,
            turn.input,
            turn.session_id,
            sink=delta,
            on_tool=tool,
            budget_seconds=turn_budget(app.lambda_context),
        )
        result: dict[str, Any] = prediction.to_json_dict()
        return result

    result = idempotent(app, workspace, body, lambda: counted_turn("stream-buffered", compute))
    if not streamed[0]:  # a replayed response: its answer as one delta
        events.append(sse_event("delta", {"text": result["output"]}))
    events.append(sse_event("done", result))
    return Response(200, content_type="text/event-stream; charset=utf-8", body="".join(events))


@app.post("/v1/sessions/<session_id>/messages")
def session_message(session_id: str) -> Response:
    from convo_memory.api_models import MessageInput

    workspace = workspace_id(app)
    body = json_body(app)
    message = parse_model(MessageInput, body)
    admit_turn(workspace)

    def compute() -> dict[str, Any]:
        prediction = container().turns.session_message(
            workspace, session_id, message.input, budget_seconds=turn_budget(app.lambda_context)
        )
        result: dict[str, Any] = prediction.to_json_dict()
        return result

    return json_response(
        200, idempotent(app, workspace, body, lambda: counted_turn("messages", compute))
    )


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
