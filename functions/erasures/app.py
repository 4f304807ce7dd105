"""The end-user erasure routes: request one (``202``, effective at once), read its receipt."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import (
    body_as,
    container,
    install_error_handlers,
    json_response,
    workspace_id,
)
from convo_memory.observability import http_handler
from convo_memory.time_budget import time_left

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.post("/v1/erasures")
def request_erasure() -> Response:
    from convo_memory.api_models import ErasureRequest

    workspace = workspace_id(app)
    body = body_as(app, ErasureRequest)
    seconds_left = time_left(app.lambda_context, default=30.0)
    erasure = container().erasures.request(workspace, body.external_ref, body.traces, seconds_left)
    return json_response(202, erasure.to_json_dict())


@app.get("/v1/erasures/<erasure_id>")
def get_erasure(erasure_id: str) -> Response:
    erasure = container().erasures.get(workspace_id(app), erasure_id)
    return json_response(200, erasure.to_json_dict())


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
