"""Sessions, forks and end users' erasures: what a request may send, and the pages
of sessions and messages."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from convo_memory.api.common import (
    Answer,
    check_metadata,
    object_schema,
)
from convo_memory.domain.erasures import TracePolicy
from convo_memory.domain.models import (
    ApiModel,
    Message,
    Principal,
    Session,
)
from convo_memory.domain.sessions import NewSession, SessionChanges

# -- sessions ------------------------------------------------------------------------

MAX_PRINCIPAL_CLAIMS = 32
MAX_CLAIM_NAME_CHARS = 64
MAX_CLAIM_VALUE_CHARS = 1024

# A principal as a request may send one (``_check_principal``).
BoundedPrincipal = Annotated[
    Principal,
    WithJsonSchema(
        {
            "type": "object",
            "description": "String claims of the end user (for example tenant_id, user_id), "
            "stamped once when the session is opened.",
            "maxProperties": MAX_PRINCIPAL_CLAIMS,
            "propertyNames": {"minLength": 1, "maxLength": MAX_CLAIM_NAME_CHARS},
            "additionalProperties": {"type": "string", "maxLength": MAX_CLAIM_VALUE_CHARS},
        }
    ),
]


class SessionCreate(ApiModel):
    capability_id: str = Field(min_length=1, max_length=128)
    external_ref: str = Field(min_length=1, max_length=256)
    principal: BoundedPrincipal | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _limits(self) -> SessionCreate:
        _check_principal(self.principal)
        check_metadata(self.metadata)
        return self

    def new_session(self) -> NewSession:
        """The session this body asks to open."""
        return NewSession(self.capability_id, self.external_ref, self.principal, self.metadata)


class SessionPatch(ApiModel):
    """A PATCH body. principal/externalRef are accepted only to be compared: naming them
    with a different value is refused (409), never silently dropped. The same limits as
    at creation apply (422 first), so every door checks a field the same way."""

    # Replaced as a whole: null is refused (omit it to change nothing).
    metadata: dict[str, Any] | None = Field(default=None, json_schema_extra=object_schema)
    principal: BoundedPrincipal | None = None
    external_ref: str | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _limits(self) -> SessionPatch:
        _check_principal(self.principal)
        if self.metadata is not None:
            check_metadata(self.metadata)
        return self

    def changes(self) -> SessionChanges:
        """The changes this body asks for (the fields it named, a ``null`` included)."""
        return SessionChanges(
            metadata=self.metadata,
            principal=self.principal,
            external_ref=self.external_ref,
            named=frozenset(self.model_fields_set),
        )


# Seqs are stored as ten digits.
MAX_SEQ = 9_999_999_999


class ForkCreate(ApiModel):
    """``POST /v1/sessions/{id}/forks``: a new session whose history is this one's
    messages up to ``atSeq`` (0, or the seq of a recorded answer: even). ``metadata``
    is the fork's (default: the parent's)."""

    at_seq: int = Field(ge=0, le=MAX_SEQ)
    metadata: dict[str, Any] | None = None

    @field_validator("at_seq", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        # A JSON integer (2.0 is one, as JSON Schema has it); never a string or a boolean.
        if isinstance(value, bool | str):
            raise ValueError("atSeq must be an integer")
        return value

    @model_validator(mode="after")
    def _limits(self) -> ForkCreate:
        if self.metadata is not None:
            check_metadata(self.metadata)
        return self


def _check_principal(principal: Principal | None) -> None:
    if principal is None:
        return
    if len(principal) > MAX_PRINCIPAL_CLAIMS:
        raise ValueError(f"principal has at most {MAX_PRINCIPAL_CLAIMS} claims")
    for key, value in principal.items():
        if not 1 <= len(key) <= MAX_CLAIM_NAME_CHARS or len(value) > MAX_CLAIM_VALUE_CHARS:
            raise ValueError(
                f"principal claim names are 1-{MAX_CLAIM_NAME_CHARS} characters, "
                f"values at most {MAX_CLAIM_VALUE_CHARS}"
            )


# -- end users -----------------------------------------------------------------------


class ErasureRequest(ApiModel):
    """Erase every session of this end user (externalRef); with traces "erase" their
    agent run traces too (kept by default: they are the audit record)."""

    external_ref: str = Field(min_length=1, max_length=256)
    traces: TracePolicy = "keep"


class SessionPage(Answer):
    sessions: list[Session]
    next_token: str | None = Field(description="Pass back (URL-encoded) for the next page.")


class MessagePage(Answer):
    messages: list[Message]
    next_token: str | None = Field(description="Pass back (URL-encoded) for the next page.")
