"""Typed errors: one class per contract error code, grouped under one class per status.

Every error the service returns is ``{"error": {"code", "message", "details"?}}``; the
client raises the class registered for ``code``. A code this version of the client does
not know still raises a useful class: the one for its HTTP status (``NotFoundError`` for
any 404, ``ConflictError`` for any 409, ``ServerError`` for any 5xx, ...), else the base
``ConversationsError``. So ``except SessionNotFound`` is precise and ``except
NotFoundError`` keeps working when the service adds codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "CapabilityNotConversational",
    "CapabilityNotFound",
    "ConflictError",
    "ConnectionFailed",
    "ConversationsError",
    "ExternalRefImmutable",
    "FileNotFound",
    "IdempotencyInProgress",
    "IdempotencyKeyReused",
    "Internal",
    "InvalidJson",
    "ItemNotFound",
    "NotFoundError",
    "PayloadTooLarge",
    "PrincipalImmutable",
    "ProviderError",
    "RateLimited",
    "ResponseNotFound",
    "RouteNotFound",
    "RunNotFound",
    "ServerError",
    "SessionArchived",
    "SessionCapabilityMismatch",
    "SessionNotFound",
    "ToolCallsMismatch",
    "Unauthorized",
    "Unavailable",
    "UnprocessableError",
    "ValidationError",
    "error_from_response",
]


class ConversationsError(Exception):
    """An error answered by the service (or, for ``ConnectionFailed``, no answer at all).

    ``status`` is the HTTP status, ``code`` the contract's error code, ``message`` the
    service's human text, ``request_id`` the id the service logged a 5xx under (quote it
    when reporting a problem), ``details`` the per-field list of a validation error, and
    ``retry_after`` the seconds the service asked to wait (``Retry-After``), if any.
    """

    status: int = 0
    code: str = ""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        request_id: str | None = None,
        details: list[Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        # Instance attributes shadow the class defaults: an unknown code keeps its own.
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.details = details
        self.retry_after = retry_after

    def __str__(self) -> str:
        text = f"{self.status} {self.code}: {self.message}"
        if self.request_id:
            text += f" (requestId {self.request_id})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"message={self.message!r}, request_id={self.request_id!r})"
        )


class ConnectionFailed(ConversationsError):
    """No usable answer: the connection failed, timed out or was closed mid-response
    (after the client's retries, where retrying was safe). ``status`` is ``0``."""

    status = 0
    code = "connection_failed"


# One class per status family ---------------------------------------------------------


class BadRequestError(ConversationsError):
    """400."""

    status = 400


class AuthenticationError(ConversationsError):
    """401."""

    status = 401


class NotFoundError(ConversationsError):
    """404: an unknown id, another workspace's id, or an unknown route."""

    status = 404


class ConflictError(ConversationsError):
    """409."""

    status = 409


class PayloadTooLarge(ConversationsError):
    """413 ``payload_too_large``: the input is over the deployment's limit."""

    status, code = 413, "payload_too_large"


class UnprocessableError(ConversationsError):
    """422."""

    status = 422


class RateLimited(ConversationsError):
    """429 ``rate_limited``: over a workspace or service limit; ``retry_after`` says when
    to try again."""

    status, code = 429, "rate_limited"


class ServerError(ConversationsError):
    """Any 5xx."""

    status = 500


# One class per contract code -----------------------------------------------------------


class InvalidJson(BadRequestError):
    """400 ``invalid_json``: the body is not a JSON object."""

    code = "invalid_json"


class Unauthorized(AuthenticationError):
    """401 ``unauthorized``: no token, or a token the service does not know."""

    code = "unauthorized"


class CapabilityNotFound(NotFoundError):
    """404 ``capability_not_found``."""

    code = "capability_not_found"


class SessionNotFound(NotFoundError):
    """404 ``session_not_found``."""

    code = "session_not_found"


class RunNotFound(NotFoundError):
    """404 ``run_not_found``."""

    code = "run_not_found"


class ResponseNotFound(NotFoundError):
    """404 ``response_not_found``: a response id of the Responses door that is unknown,
    deleted, ``store: false`` or another workspace's."""

    code = "response_not_found"


class ItemNotFound(NotFoundError):
    """404 ``item_not_found``: an ``item_reference`` or item id of a conversation that
    is unknown, removed, deleted or another workspace's."""

    code = "item_not_found"


class FileNotFound(NotFoundError):
    """404 ``file_not_found``: an unknown, deleted, expired or another workspace's file id."""

    code = "file_not_found"


class RouteNotFound(NotFoundError):
    """404 ``not_found``: no such route."""

    code = "not_found"


class PrincipalImmutable(ConflictError):
    """409 ``principal_immutable``: a session's principal never changes."""

    code = "principal_immutable"


class ExternalRefImmutable(ConflictError):
    """409 ``external_ref_immutable``: a session's externalRef never changes."""

    code = "external_ref_immutable"


class CapabilityNotConversational(ConflictError):
    """409 ``capability_not_conversational``: sessions need a generative or agent
    capability."""

    code = "capability_not_conversational"


class SessionCapabilityMismatch(ConflictError):
    """409 ``session_capability_mismatch``: the session belongs to another capability."""

    code = "session_capability_mismatch"


class SessionArchived(ConflictError):
    """409 ``session_archived``: an archived session stays readable but takes no turns."""

    code = "session_archived"


class IdempotencyInProgress(ConflictError):
    """409 ``idempotency_in_progress``: the first call with this Idempotency-Key still
    runs (the client retries it with backoff before raising this)."""

    code = "idempotency_in_progress"


class ToolCallsMismatch(ConflictError):
    """409 ``tool_calls_mismatch``: tool results that do not answer exactly the calls a
    paused turn waits for (the OpenAI-compatible doors); nothing was changed."""

    code = "tool_calls_mismatch"


class ValidationError(UnprocessableError):
    """422 ``validation_error``: well-formed JSON that breaks the schema, or a malformed or
    foreign ``nextToken``; ``details`` lists the fields."""

    code = "validation_error"


class IdempotencyKeyReused(UnprocessableError):
    """422 ``idempotency_key_reused``: the same Idempotency-Key with a different body."""

    code = "idempotency_key_reused"


class Internal(ServerError):
    """500 ``internal``: an unexpected failure, logged by the service under
    ``request_id``."""

    status, code = 500, "internal"


class ProviderError(ServerError):
    """502 ``provider_error``: the model provider failed, answered badly or did not answer
    in time; the service logged it under ``request_id``."""

    status, code = 502, "provider_error"


class Unavailable(ServerError):
    """503 ``unavailable``: storage briefly unavailable; ``retry_after`` says when to try
    again."""

    status, code = 503, "unavailable"


_BY_CODE: dict[str, type[ConversationsError]] = {
    cls.code: cls
    for cls in (
        InvalidJson,
        Unauthorized,
        CapabilityNotFound,
        SessionNotFound,
        RunNotFound,
        ResponseNotFound,
        ItemNotFound,
        FileNotFound,
        RouteNotFound,
        PrincipalImmutable,
        ExternalRefImmutable,
        CapabilityNotConversational,
        SessionCapabilityMismatch,
        SessionArchived,
        IdempotencyInProgress,
        ToolCallsMismatch,
        PayloadTooLarge,
        ValidationError,
        IdempotencyKeyReused,
        RateLimited,
        Internal,
        ProviderError,
        Unavailable,
    )
}

_BY_STATUS: dict[int, type[ConversationsError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLarge,
    422: UnprocessableError,
    429: RateLimited,
}


def error_class(status: int, code: str) -> type[ConversationsError]:
    """The class for ``code``; for a code this client does not know, the class of its
    status family (any 5xx is ``ServerError``), else ``ConversationsError``."""
    known = _BY_CODE.get(code)
    if known is not None:
        return known
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 500 <= status <= 599:
        return ServerError
    return ConversationsError


def error_from_response(
    status: int,
    body: Any,
    *,
    request_id: str | None = None,
    retry_after: float | None = None,
) -> ConversationsError:
    """Build the typed error for an error answer: ``body`` is the parsed JSON body (or
    anything else, e.g. the text of a proxy's HTML page, which still yields the status
    family's class with code ``unknown``)."""
    error: Mapping[str, Any] = {}
    if isinstance(body, Mapping):
        nested = body.get("error")
        # The documented shape nests the error; an event: error carries it bare.
        error = nested if isinstance(nested, Mapping) else body
    code = error.get("code")
    message = error.get("message")
    details = error.get("details")
    found_request_id = error.get("requestId") or (
        body.get("requestId") if isinstance(body, Mapping) else None
    )
    code = code if isinstance(code, str) and code else "unknown"
    if not isinstance(message, str) or not message:
        message = f"HTTP {status}" if status else "the service reported an error"
    cls = error_class(status, code)
    return cls(
        status or cls.status,
        code,
        message,
        request_id=str(found_request_id) if found_request_id else request_id,
        details=details if isinstance(details, list) else None,
        retry_after=retry_after,
    )
