"""One error mapping for every door: any failure of a request becomes the contract's
status and error body (``{"error": {"code", "message"}}``, with ``type`` and ``param``
added on the OpenAI-compatible doors so that OpenAI's SDKs raise their usual
exceptions). The resolver glue, the streaming door and the local runtime all write
their refusals from ``error_reply``.

Import-light: handlers import it at cold start."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from convo_memory.domain.errors import (
    IdempotencyInProgress,
    InternalError,
    ServiceError,
    StoreUnavailable,
    Unavailable,
)

logger = logging.getLogger(__name__)

# The OpenAI-compatible door's ``type`` by status: what OpenAI's SDKs expect to see.
OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True)
class ErrorReply:
    """A refusal as a door writes it: status, headers and the JSON body's text."""

    status: int
    headers: dict[str, str]
    body: str


def error_for(exc: BaseException, request_id: str) -> ServiceError:
    """The contract's error for any failure of a request: a domain error as it is; a
    store briefly unavailable as ``503 unavailable``; anything else ``500 internal``,
    logged with the request id its body names."""
    if isinstance(exc, ServiceError):
        return exc.in_request(request_id)
    if isinstance(exc, StoreUnavailable):
        logger.warning("store unavailable: %s", exc)
        return Unavailable().in_request(request_id)
    failure = InternalError(request_id)
    if misconfigured(exc):
        # Logged once, naming the variable, when the container failed to build.
        return failure
    logger.error(
        "unexpected %s (requestId %s)",
        type(exc).__name__,
        request_id,
        exc_info=exc,
        extra={"requestId": request_id},
    )
    return failure


def error_body(error: ServiceError, *, openai: bool = False) -> dict[str, Any]:
    """The error body: the contract's, plus on the OpenAI-compatible door ``type`` and,
    when the error names a field of the request, ``param`` (as OpenAI's errors do)."""
    body = error.to_body()
    if openai:
        body["error"]["type"] = OPENAI_ERROR_TYPES.get(error.status, "api_error")
        param = error.param or (named_field(error) if error.status == 422 else None)
        if param:
            body["error"]["param"] = openai_param(param)
    return body


def named_field(error: ServiceError) -> str | None:
    """(v5) The field a refusal without a ``param`` names in its details, if any: every
    422 of the OpenAI-compatible doors names one."""
    for detail in error.details or ():
        loc = detail.get("loc") if isinstance(detail, dict) else None
        steps = [str(step) for step in loc or () if str(step) not in ("body", "query")]
        if steps:
            return ".".join(steps)
    return None


def openai_param(field: str) -> str:
    """A field's path in OpenAI's form: ``input.2.content.0.text`` is
    ``input[2].content[0].text``, ``tools.3.name`` ``tools[3].name`` (a path already in
    that form, or a header's name, is left as it is)."""
    steps = field.split(".")
    path = steps[0]
    for step in steps[1:]:
        path += f"[{step}]" if step.isdigit() else f".{step}"
    return path


def error_reply(error: ServiceError, *, openai: bool = False) -> ErrorReply:
    """How every door answers a refusal or a failure (before a stream has started)."""
    headers = dict(error.headers())
    if openai and not retryable(error):
        # OpenAI's SDKs retry a 409 unless told not to: only a key still in use may be.
        headers["x-should-retry"] = "false"
    return ErrorReply(error.status, headers, json_text(error_body(error, openai=openai)))


def retryable(error: ServiceError) -> bool:
    """Whether the same request may succeed later (rate limits, busy keys, outages)."""
    return error.status == 429 or error.status >= 500 or isinstance(error, IdempotencyInProgress)


def json_text(value: Any) -> str:
    # Sorted keys: an idempotent replay (stored by Powertools, sorted) is byte-identical.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def misconfigured(exc: BaseException) -> bool:
    """Whether ``exc`` is the deployment's invalid configuration (``SettingsError``)."""
    # Imported here: config pulls in pydantic, which a handler's import must not pay for.
    from convo_memory.config import SettingsError

    return isinstance(exc, SettingsError)
