"""Domain errors. Each carries the HTTP status and contract code it maps to, so the
mapping to a response lives in one place (``convo_memory.http``)."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, details: list[Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


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


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class PrincipalImmutable(Conflict):
    code = "principal_immutable"


class ExternalRefImmutable(Conflict):
    code = "external_ref_immutable"


class CapabilityNotConversational(Conflict):
    code = "capability_not_conversational"


class SessionCapabilityMismatch(Conflict):
    code = "session_capability_mismatch"


class SessionArchived(Conflict):
    code = "session_archived"


class IdempotencyInProgress(Conflict):
    code = "idempotency_in_progress"


class IdempotencyKeyReused(ServiceError):
    status, code = 422, "idempotency_key_reused"


class PayloadTooLarge(ServiceError):
    status, code = 413, "payload_too_large"


class ValidationFailed(ServiceError):
    status, code = 422, "validation_error"


class StoreUnavailable(Exception):
    """The store could not be reached or refused for capacity (throttling, 5xx, timeout).

    Not a ServiceError: callers decide whether it fails the request (reads) or is
    absorbed (the transcript write, which is repaired durably)."""


class StoreRejected(Exception):
    """The store refused a request that can never succeed as sent (a validation error,
    an item over the size limit, an unknown error code): retrying it is pointless.

    Not a ServiceError: input is checked before it reaches the store, so this is a
    defect; reads answer 500, the transcript write is absorbed and repaired."""


class ProviderError(ServiceError):
    status, code = 502, "provider_error"
