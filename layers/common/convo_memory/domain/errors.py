"""Domain errors. Each carries the HTTP status and contract code it maps to, so the
mapping to a response lives in one place (``convo_memory.edge.resolver``)."""

from __future__ import annotations

from typing import Any, Self


class ServiceError(Exception):
    status: int = 500
    code: str = "internal"
    # The id of the request a server error (5xx) happened in; its body names it.
    request_id: str | None = None

    def __init__(
        self, message: str, *, details: list[Any] | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        # The request field the error is about (``messages.0.content``, a header's name),
        # when one is: the OpenAI-compatible door shows it as OpenAI's ``param``.
        self.param = param

    def in_request(self, request_id: str) -> Self:
        """This error, naming ``request_id`` in its body when it is a server error (as
        the contract asks of every 5xx) and names none yet."""
        if self.status >= 500 and self.request_id is None:
            self.request_id = request_id
        return self

    def to_body(self) -> dict[str, Any]:
        """The contract's error body: ``{"error": {"code", "message", ...}}``, with
        ``requestId`` on a server error that knows its request."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        if self.request_id is not None:
            error["requestId"] = self.request_id
        return {"error": error}

    def headers(self) -> dict[str, str]:
        """Response headers that go with this error (``Retry-After`` for 429 and 503)."""
        return {}


class InvalidJson(ServiceError):
    status, code = 400, "invalid_json"


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class NotFound(ServiceError):
    status, code = 404, "not_found"


class CapabilityNotFound(NotFound):
    code = "capability_not_found"


class SessionNotFound(NotFound):
    code = "session_not_found"


class RunNotFound(NotFound):
    code = "run_not_found"


class ResponseNotFound(NotFound):
    """(v4) An unknown, deleted, ``store: false`` or another workspace's response id."""

    code = "response_not_found"


class ItemNotFound(NotFound):
    """(v5) An ``item_reference`` or item id that names no recorded item of a
    conversation of this workspace (unknown, removed, deleted or another workspace's)."""

    code = "item_not_found"


class ErasureNotFound(NotFound):
    """An unknown erasure, or another workspace's (the contract's plain ``not_found``)."""


class FileNotFound(NotFound):
    """(v5) An unknown, deleted, expired or another workspace's file id."""

    code = "file_not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class PrincipalImmutable(Conflict):
    code = "principal_immutable"


class ExternalRefImmutable(Conflict):
    code = "external_ref_immutable"


class CapabilityNotConversational(Conflict):
    code = "capability_not_conversational"

    @classmethod
    def of(cls, capability_id: str) -> CapabilityNotConversational:
        """The refusal of a classic capability where a conversation is asked for."""
        return cls(
            f"capability {capability_id!r} is a classic ML capability: it has no notion of "
            "a previous turn, so it holds no session and no chat (predict it through "
            "POST /v1/capabilities/{id}/predict)"
        )


class SessionCapabilityMismatch(Conflict):
    code = "session_capability_mismatch"


class SessionArchived(Conflict):
    code = "session_archived"


class IdempotencyInProgress(Conflict):
    code = "idempotency_in_progress"


class ToolCallsMismatch(Conflict):
    """(v4) A continuation whose tool results do not answer exactly the calls its
    session's paused turn waits for (or whose session has no paused turn)."""

    code = "tool_calls_mismatch"


class IdempotencyKeyReused(ServiceError):
    status, code = 422, "idempotency_key_reused"


class PayloadTooLarge(ServiceError):
    status, code = 413, "payload_too_large"


class ValidationFailed(ServiceError):
    status, code = 422, "validation_error"


class RateLimited(ServiceError):
    status, code = 429, "rate_limited"

    def __init__(
        self, message: str = "too many requests; retry later", *, retry_after: int = 1
    ) -> None:
        super().__init__(message)
        # Whole seconds until a retry can succeed (at least 1).
        self.retry_after = max(1, retry_after)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class Unavailable(ServiceError):
    """What a client sees when the store is briefly unavailable on a read."""

    status, code = 503, "unavailable"

    def __init__(self, message: str = "storage is temporarily unavailable") -> None:
        super().__init__(message)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class InternalError(ServiceError):
    """An unexpected failure. The body carries the request id it was logged under, so
    that a client report can be matched to the stack trace."""

    status, code = 500, "internal"

    def __init__(self, request_id: str, message: str = "an unexpected error occurred") -> None:
        super().__init__(message)
        self.request_id = request_id


class StoreUnavailable(Exception):
    """The store could not be reached or refused for capacity (throttling, 5xx, timeout).

    Not a ServiceError: callers decide whether it fails the request (reads) or is
    absorbed (the transcript write, which is repaired durably)."""


class StoreThrottled(StoreUnavailable):
    """The store refused for capacity: the item's partition (or the table) took more
    writes or reads than DynamoDB allows it. Callers that treat a throttled item as too
    much traffic (the turn limiter: a flood) tell it apart; to everyone else it is
    ``StoreUnavailable``."""


class SessionKeyTaken(Exception):
    """A session key is already claimed: another session was opened on it first (a race
    on first use). Not a ServiceError: the caller turns to the winner's session."""

    def __init__(self, session_id: str | None) -> None:
        super().__init__(f"the session key belongs to session {session_id!r}")
        self.session_id = session_id


class StoreRejected(Exception):
    """The store refused a request that can never succeed as sent (a validation error,
    an item over the size limit, an unknown error code): retrying it is pointless.

    Not a ServiceError: input is checked before it reaches the store, so this is a
    defect; reads answer 500, the transcript write is absorbed and repaired."""


class PauseEnded(Exception):
    """(v4) A write meant to end or replace a paused turn found it ended already (by
    another continuation, or recorded as abandoned)."""


class RecallSourceGone(Exception):
    """A session a new session's recall was taken from was deleted (or erased) before
    the new session was stored, so the new session was not stored. Not a ServiceError:
    the creation takes the recall again, without that session."""


class ProviderError(ServiceError):
    """The model provider failed or answered badly. Raised deep in an adapter, so its
    request id is added where it becomes a response (``in_request``), and the name of
    the connection where the provider's calls are made (``on_connection``). Its message
    is the service's own words, never text the provider sent (adapters log that,
    redacted): at most the connection's name and the provider's HTTP status."""

    status, code = 502, "provider_error"

    def __init__(self, message: str, *, upstream_status: int | None = None) -> None:
        super().__init__(message)
        self.upstream_status = upstream_status
        self.connection: str | None = None

    def on_connection(self, connection: str) -> Self:
        """This error, its message naming ``connection`` (once)."""
        if self.connection is None:
            self.connection = connection
            prefix = "Model provider error: "
            text = self.message.removeprefix(prefix)
            self.message = f"{prefix}connection '{connection}': {text}"
            self.args = (self.message,)
        return self
