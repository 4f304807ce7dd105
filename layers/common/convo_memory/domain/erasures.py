"""Erasing an end user: the receipt a client reads (``Erasure``) and what the erasure job
learns about each of the end user's sessions (``SessionOfEndUser``).

An erasure removes every session of one ``externalRef`` of a workspace that existed when
it was requested (any capability, any door), with its transcript, summary, digests,
recall and the idempotency records of its turns, and, with ``traces: "erase"``, the agent
run traces of its turns. The receipt names the end user and counts what was done; it
holds no session id and no principal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field

from convo_memory.domain.models import ApiModel

ErasureStatus = Literal["pending", "running", "done", "failed"]
TracePolicy = Literal["keep", "erase"]
FINISHED: frozenset[str] = frozenset({"done", "failed"})


class Erasure(ApiModel):
    """The receipt of an erasure: whose (externalRef), whether traces are erased, how
    far it is, and what it erased or kept. It names no session and no principal."""

    model_config = ConfigDict(extra="ignore")

    id: str
    workspace_id: str = Field(exclude=True)
    external_ref: str
    traces: TracePolicy
    status: ErasureStatus
    created_at: str
    finished_at: str | None = None
    sessions_erased: int = 0
    traces_erased: int = 0
    traces_kept: int = 0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


@dataclass(frozen=True)
class SessionOfEndUser:
    """A session of the end user as its listing shows it: ``live`` (active or archived),
    or already claimed by an erasure (this one or another: claiming it again tells)."""

    session_id: str
    created_at: str
    live: bool


def created_before(session_created_at: str, erasure_created_at: str) -> bool:
    """Whether a session belongs to an erasure: created before it was requested (the same
    millisecond counts as before; both times are ``iso`` text, which sorts as time)."""
    return session_created_at <= erasure_created_at


__all__ = [
    "FINISHED",
    "Erasure",
    "ErasureStatus",
    "SessionOfEndUser",
    "TracePolicy",
    "created_before",
]
