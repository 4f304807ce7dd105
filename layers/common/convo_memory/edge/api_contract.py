"""What a route declares beyond its signature, for the OpenAPI document
(``convo_memory.edge.openapi``): the answers it gives (its success, and the contract's
errors it can refuse with, from the domain's one table of them,
``convo_memory.domain.errors``), the headers the input gate or the door reads for it,
whether it needs a token, and the events of a stream.

Import-light: handlers declare their routes at import. A schema named here by its
component (``ref("Prediction")``) is one of ``convo_memory.api``' models; the
document holds every one a route names (a misspelt one fails its build).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast

from convo_memory.domain import errors as e
from convo_memory.edge import input_gate
from convo_memory.edge.errors import OPENAI_ERROR_TYPES

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

# Why each status is answered; the codes come from the errors themselves.
ERROR_TEXT = {
    400: "The body is not UTF-8 JSON whose top level is an object (or breaks the input gate).",
    401: "No API token, or an unknown one.",
    404: "No such resource in this workspace (another workspace's is indistinguishable).",
    409: "The request conflicts with the resource's state.",
    413: "The request or its input is too large.",
    422: "Well-formed JSON that breaks the schema, or a malformed or foreign nextToken.",
    429: "Over a workspace or service limit; retry after Retry-After seconds.",
    500: "An unexpected failure, logged with its requestId.",
    502: "The model provider failed or could not be reached.",
    503: "Storage briefly unavailable; retry after Retry-After seconds.",
}
# What any route may answer: the gate's refusals, an unknown id, the HttpApi's throttle,
# a fault.
EVERY_ROUTE: tuple[type[e.ServiceError], ...] = (
    e.InvalidJson,
    e.NotFound,
    e.PayloadTooLarge,
    e.ValidationFailed,
    e.RateLimited,
    e.InternalError,
    e.Unavailable,
)
# What a turn may be refused with, on every turn door.
TURN_REFUSALS: tuple[type[e.ServiceError], ...] = (
    e.CapabilityNotFound,
    e.SessionNotFound,
    e.CapabilityNotConversational,
    e.SessionCapabilityMismatch,
    e.SessionArchived,
    e.IdempotencyInProgress,
    e.IdempotencyKeyReused,
    e.ProviderError,
    e.FileNotFound,  # (v5) an attachment's file id
)
RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}}


def ref(component: str) -> dict[str, str]:
    """A JSON Schema reference to one of the document's components (a model's name)."""
    return {"$ref": f"#/components/schemas/{component}"}


def answers(
    ok: int,
    *refusals: type[e.ServiceError],
    public: bool = False,
    openai: bool = False,
    content: dict[str, Any] | None = None,
    headers: dict[str, Any] | None = None,
) -> dict[int, OpenAPIResponse]:
    """A route's ``responses``: ``ok`` (its content the route's return type, unless
    ``content`` says otherwise), and an error response for each status it can be refused
    with, listing its codes: those of ``refusals`` and of every route (401 unless
    ``public``). ``openai``: the OpenAI-compatible door's bodies, which add ``type``."""
    success: dict[str, Any] = {"description": HTTPStatus(ok).phrase}
    if content is not None:
        success["content"] = content
    if headers:
        success["headers"] = headers
    kinds = [*EVERY_ROUTE, *refusals] + ([] if public else [e.Unauthorized])
    codes: dict[int, list[str]] = {}
    for kind in sorted(kinds, key=lambda kind: (kind.status, kind is e.NotFound)):
        found = codes.setdefault(kind.status, [])
        if kind.code not in found:
            found.append(kind.code)
    refused = {status: _error(status, found, openai) for status, found in sorted(codes.items())}
    return cast("dict[int, OpenAPIResponse]", {ok: success, **refused})


def _error(status: int, codes: list[str], openai: bool) -> dict[str, Any]:
    error: dict[str, Any] = {"type": "object", "properties": {"code": {"enum": codes}}}
    if openai:
        # For OpenAI's SDKs: the kind of error they raise.
        error["properties"]["type"] = {"const": OPENAI_ERROR_TYPES.get(status, "api_error")}
        error["required"] = ["type"]
    schema = {"allOf": [ref("ErrorBody"), {"type": "object", "properties": {"error": error}}]}
    response: dict[str, Any] = {
        "description": f"{ERROR_TEXT[status]} Codes: {', '.join(codes)}.",
        "content": {"application/json": {"schema": schema}},
    }
    if status in (429, 503):
        response["headers"] = RETRY_AFTER
    return response


def header(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    """A request header a route documents (the gate or the door reads it)."""
    return {
        "name": name,
        "in": "header",
        "required": False,
        "schema": schema,
        "description": description,
    }


IDEMPOTENCY_KEY = header(
    "Idempotency-Key",
    {"type": "string", "pattern": f"^{input_gate.IDEMPOTENCY_KEY.pattern}$"},
    "A retry with the same key and body returns the first response and records nothing new.",
)
# A turn route's ``openapi_extensions``: its Idempotency-Key (read by the gate).
TURN_HEADERS: dict[str, Any] = {"parameters": [IDEMPOTENCY_KEY]}
# A route served without a token.
PUBLIC: dict[str, Any] = {"security": []}


def stream_event(name: str, component: str, description: str) -> dict[str, Any]:
    """One Server-Sent Event (``event: name``, ``data:`` the component's JSON)."""
    return {
        "type": "object",
        "description": description,
        "required": ["event", "data"],
        "properties": {
            "event": {"const": name},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": ref(component),
            },
        },
    }


def event_stream(description: str, events: list[dict[str, Any]], example: str) -> dict[str, Any]:
    """A ``text/event-stream`` answer. Before OpenAPI 3.2 (``itemSchema``), its schema
    describes one event, as its fields (``event``, ``data``) with ``data`` a JSON text:
    what Schemathesis and OpenAPI 3.2 tooling check."""
    return {"schema": {"description": description, "oneOf": events}, "example": example}
