"""The end-user erasure routes: request one (``202``, effective at once), read its receipt."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import ErasureNotFound
from convo_memory.domain.time_budget import time_left
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
    "/v1/erasures",
    summary="Erase an end user: every session of the externalRef is 404 from the 202 on",
    tags=["end users"],
    responses=answers(202),
)
def request_erasure(body: Annotated[api.ErasureRequest, Body()]) -> Response[api.Erasure]:
    seconds_left = time_left(app.lambda_context, default=30.0)
    erasure = container().erasures.request(
        workspace_id(app), body.external_ref, body.traces, seconds_left
    )
    return json_response(202, erasure.to_json_dict())


@app.get(
    "/v1/erasures/<erasure_id>",
    summary="An erasure's receipt (pending, running, done or failed, with its counts)",
    tags=["end users"],
    responses=answers(200, ErasureNotFound),
)
def get_erasure(erasure_id: str) -> Response[api.Erasure]:
    erasure = container().erasures.get(workspace_id(app), erasure_id)
    return json_response(200, erasure.to_json_dict())


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
