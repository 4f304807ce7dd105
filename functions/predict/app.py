"""Turn routes: predict (stateless or with a session) and the session's message door.
Both call the same serving path (``TurnService``)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import (
    body_as,
    container,
    install_error_handlers,
    json_response,
    workspace_id,
)

logger = Logger(service="convo-memory")
app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.post("/v1/capabilities/<capability_id>/predict")
def predict(capability_id: str) -> Response:
    workspace = workspace_id(app)
    body = body_as(app, "TurnInput")
    prediction = container().turns.predict(workspace, capability_id, body.input, body.session_id)
    return json_response(200, prediction.to_json_dict())


@app.post("/v1/sessions/<session_id>/messages")
def session_message(session_id: str) -> Response:
    workspace = workspace_id(app)
    body = body_as(app, "MessageInput")
    prediction = container().turns.session_message(workspace, session_id, body.input)
    return json_response(200, prediction.to_json_dict())


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
