"""Capability routes, the provider connections they may name, and agent run traces."""

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

app = APIGatewayHttpResolver()
install_error_handlers(app)


@app.post("/v1/capabilities")
def create_capability() -> Response:
    from convo_memory.api_models import CapabilityCreate, created_capability

    workspace = workspace_id(app)
    definition = body_as(app, CapabilityCreate).definition()
    created = container().catalog.register(workspace, definition)
    return json_response(201, created_capability(created.capability, created.tool_signing_secret))


@app.get("/v1/capabilities")
def list_capabilities() -> Response:
    capabilities = container().catalog.list_all(workspace_id(app))
    return json_response(200, {"capabilities": [c.to_json_dict() for c in capabilities]})


@app.get("/v1/capabilities/<capability_id>")
def get_capability(capability_id: str) -> Response:
    capability = container().catalog.get(workspace_id(app), capability_id)
    return json_response(200, capability.to_json_dict())


@app.get("/v1/providers")
def list_providers() -> Response:
    workspace_id(app)  # a workspace's token is required, as on every /v1 route
    return json_response(200, {"providers": container().catalog.providers()})


@app.get("/v1/runs/<run_id>")
def get_run(run_id: str) -> Response:
    return json_response(200, container().runs.get(workspace_id(app), run_id))


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
