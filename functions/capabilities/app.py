"""Capability routes, the provider connections they may name, and agent run traces."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import CapabilityNotFound, RunNotFound
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
    "/v1/capabilities",
    summary="Create a capability",
    tags=["capabilities"],
    responses=answers(201),
)
def create_capability(
    body: Annotated[api.CapabilityCreate, Body()],
) -> Response[api.CreatedCapability]:
    from convo_memory.api import created_capability

    created = container().catalog.register(workspace_id(app), body.definition())
    return json_response(201, created_capability(created.capability, created.tool_signing_secret))


@app.get(
    "/v1/capabilities",
    summary="The workspace's capabilities",
    tags=["capabilities"],
    responses=answers(200),
)
def list_capabilities() -> Response[api.CapabilityList]:
    capabilities = container().catalog.list_all(workspace_id(app))
    return json_response(200, {"capabilities": [c.to_json_dict() for c in capabilities]})


@app.get(
    "/v1/capabilities/<capability_id>",
    summary="A capability",
    tags=["capabilities"],
    responses=answers(200, CapabilityNotFound),
)
def get_capability(capability_id: str) -> Response[api.Capability]:
    capability = container().catalog.get(workspace_id(app), capability_id)
    return json_response(200, capability.to_json_dict())


@app.get(
    "/v1/providers",
    summary="The deployment's provider connections",
    tags=["capabilities"],
    responses=answers(200),
)
def list_providers() -> Response[api.ProviderList]:
    workspace_id(app)  # a workspace's token is required, as on every /v1 route
    return json_response(200, {"providers": container().catalog.providers()})


@app.get(
    "/v1/runs/<run_id>",
    summary="An agent run's trace",
    tags=["runs"],
    responses=answers(200, RunNotFound),
)
def get_run(run_id: str) -> Response[api.RunTrace]:
    return json_response(200, container().runs.get(workspace_id(app), run_id))


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
