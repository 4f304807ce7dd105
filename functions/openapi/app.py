"""``GET /v1/openapi.json`` (no token): the OpenAPI 3.1 document of the HTTP API."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.http import install_error_handlers, json_response
from convo_memory.observability import http_handler

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.get("/v1/openapi.json")
def openapi() -> Response:
    from convo_memory.openapi import openapi_document

    event = app.current_event
    host = event.headers.get("host") or event.request_context.domain_name
    # API Gateway sets X-Forwarded-Proto; the local runtime serves plain http.
    scheme = event.headers.get("x-forwarded-proto") or "http"
    document = openapi_document(f"{scheme}://{host}" if host else None)
    return json_response(200, document, headers={"Cache-Control": "public, max-age=300"})


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
