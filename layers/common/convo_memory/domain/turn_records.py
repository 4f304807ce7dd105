"""Records a turn reads and writes, independent of how they are stored."""

from __future__ import annotations

from dataclasses import dataclass

from convo_memory.domain.models import Message, Session, Summary, ToolDigest


@dataclass(frozen=True)
class TurnState:
    """Everything a turn reads: the head, the summary, the newest messages (oldest
    first) and the digests stored with them."""

    session: Session
    summary: Summary | None
    recent: tuple[Message, ...]
    digests: dict[int, ToolDigest]
    digest_expiry: dict[int, float]
    summary_requested_at: float


@dataclass(frozen=True)
class TurnRecord:
    """One turn to append: a user message and the answer, identified by ``turn_id``."""

    turn_id: str
    user_content: str
    answer: str
    withheld: bool
    created_at: str
    digest_tools: tuple[str, ...] = ()
    digest_text: str | None = None
    digest_expires_at: float | None = None
    mark_summary_requested_at: float | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class AppendResult:
    user_seq: int
    assistant_seq: int
    message_count: int
    already_recorded: bool = False
