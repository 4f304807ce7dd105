"""Forks (v4): branching a conversation after one of its answers (``POST
/v1/sessions/{id}/forks``), and the job that copies a new fork's older inherited
messages in from its parent.

A fork is a session like any other: the parent's workspace, capability, end user,
principal and recall (never taken anew: the parent's own later turns would be in it),
its metadata unless the request gives some, and its own fence nonce; no app key. Its
history is the parent's messages up to ``atSeq``; what a turn on it reads is copied when
it is created (a bounded copy, whatever the parent's own copy state), the rest by a
``ForkCopyJob`` on the fork copy queue, which runs on capacity of its own (and, failing
that, when the parent is deleted, purged or erased: see ``ports.ForkStore``). A fork of
a fork whose copy is still due queues its own copy after its parent's; a chain of more
than ``MAX_COPIES_DUE`` such forks waits for the copies (429).

A fork asked for on its route counts against the workspace's turn limit as a turn does
(``branch``); one opened inside a turn (the Responses door's) is that turn's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from convo_memory.domain.errors import RateLimited, RecallSourceGone, SessionNotFound
from convo_memory.domain.forks import (
    COPIES_DUE_RETRY_SECONDS,
    MAX_COPIES_DUE,
    check_fork_point,
    turns_copied_at_creation,
)
from convo_memory.domain.ids import new_id
from convo_memory.domain.jobs import ForkCopyJob
from convo_memory.domain.models import ForkPoint, Session, iso_at
from convo_memory.domain.prompt import new_fence_nonce
from convo_memory.domain.turn_abandonment import note_opened
from convo_memory.ports import (
    CopyOutcome,
    ForkStore,
    MetricsPort,
    NullMetrics,
    QueuePort,
    SessionStore,
)
from convo_memory.services.catalog import CapabilityCatalog

logger = logging.getLogger(__name__)


class ForkedFiles(Protocol):
    """(v5) Attachments as a fork sees them (``AttachmentService``)."""

    def share(self, parent_id: str, fork_id: str) -> int: ...
    def release(self, session_id: str) -> int: ...


class ForkCopyIncomplete(RuntimeError):
    """The copy ran out of invocation time: its job's next delivery goes on."""


class ForkService:
    def __init__(
        self,
        sessions: SessionStore,
        forks: ForkStore,
        catalog: CapabilityCatalog,
        clock: Callable[[], float] = time.time,
        *,
        copy_queue: QueuePort | None = None,
        summarize: Callable[[str, str], object] | None = None,
        metrics: MetricsPort | None = None,
        admit: Callable[[str], None] | None = None,
        files: ForkedFiles | None = None,
    ) -> None:
        self._sessions = sessions
        self._forks = forks
        self._catalog = catalog
        self._clock = clock
        self._copy_queue = copy_queue
        # Told (workspace, fork): a summary run for the new fork (it decides if one is due).
        self._summarize = summarize
        self._metrics = metrics or NullMetrics()
        # The workspace's turn limit (``TurnLimiter.admit``): RateLimited over it.
        self._admit = admit
        # (v5) A fork refers to its parent's attachments as the parent does.
        self._files = files

    def branch(
        self,
        workspace_id: str,
        session_id: str,
        at_seq: int,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """``POST /v1/sessions/{id}/forks``: a fork (``fork``) that counts against the
        workspace's turn limit as a turn does, refused (429) over it before anything is
        read or written."""
        if self._admit is not None:
            self._admit(workspace_id)
        return self.fork(workspace_id, session_id, at_seq, metadata)

    def fork(
        self,
        workspace_id: str,
        session_id: str,
        at_seq: int,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """A new session whose history is the parent's messages ``1..at_seq``. Raises
        ``SessionNotFound`` (a missing, deleted or another workspace's parent) and
        ``ValidationFailed`` (``at_seq`` not 0 nor a recorded answer's seq)."""
        parent = self._sessions.get_session(session_id)
        if parent is None or parent.workspace_id != workspace_id:
            raise SessionNotFound(f"session {session_id!r} not found")
        check_fork_point(at_seq, parent.message_count)
        policy = self._catalog.replay_policy_of(workspace_id, parent.capability_id)
        if parent.copying_from is not None:
            self._refuse_a_long_chain(parent.id)
        now = iso_at(self._clock())
        # The parent's workspace, capability, end user, principal and recall; its own rest.
        fork = parent.model_copy(
            update={
                "id": new_id("ses"),
                "metadata": parent.metadata if metadata is None else metadata,
                "status": "active",
                "created_at": now,
                "last_active_at": now,
                "message_count": at_seq,
                "session_key": None,
                "fence_nonce": new_fence_nonce(),
                "fork_of": ForkPoint(session_id=parent.id, at_seq=at_seq),
                "copying_from": None,
            }
        )
        copy_turns = turns_copied_at_creation(policy.max_messages)
        if self._files is not None:  # before the fork exists: the parent cannot drop them
            self._files.share(parent.id, fork.id)
        try:
            pending, fork = self._create(fork, copy_turns, policy.alignment > 1)
        except Exception:
            if self._files is not None:
                self._files.release(fork.id)
            raise
        if pending:
            self._queue_copy(
                ForkCopyJob(workspace_id=workspace_id, parent_id=parent.id, fork_id=fork.id)
            )
        if at_seq and self._summarize is not None:
            self._summarize(workspace_id, fork.id)
        self._metrics.count("ForksCreated")
        note_opened(fork.id)  # a turn given up removes the fork it opened
        return fork

    def _create(
        self, fork: Session, copy_turns: int, keep_earlier_summary: bool
    ) -> tuple[bool, Session]:
        """Store the fork: whether a copy is still due, and the fork as stored."""
        try:
            return self._forks.create_fork(fork, copy_turns, keep_earlier_summary), fork
        except RecallSourceGone:
            # A session the parent's recall came from was deleted: none of its text is
            # stored anew, so this fork goes without the recall.
            fork = fork.model_copy(update={"recall": None})
            return self._forks.create_fork(fork, copy_turns, keep_earlier_summary), fork

    def copy(self, job: ForkCopyJob, time_left: Callable[[], float] | None = None) -> CopyOutcome:
        """The ``ForkCopyJob``: copy what the fork still lacks of its parent. Raises
        ``ForkCopyIncomplete`` when out of time (the job is delivered again)."""
        outcome = self._forks.copy_inherited(job.parent_id, job.fork_id, time_left)
        if outcome == "partial":
            raise ForkCopyIncomplete(f"fork {job.fork_id}: out of time, the copy resumes")
        return outcome

    def _refuse_a_long_chain(self, parent_id: str) -> None:
        """A fork of a fork whose copy is due is created from what a read through the
        parent finds, its own copy queued after the parent's. Reads go up a chain of such
        forks, so a long one waits for the copies (a few seconds): 429."""
        if self._forks.copies_due(parent_id, MAX_COPIES_DUE) >= MAX_COPIES_DUE:
            self._metrics.count("ForksRefusedForCopies")
            raise RateLimited(
                "this conversation's earlier forks are still being copied; retry in a moment",
                retry_after=COPIES_DUE_RETRY_SECONDS,
            )

    def _queue_copy(self, job: ForkCopyJob) -> None:
        """Best effort: a copy not queued is finished when the parent is deleted, purged
        or erased, or by the copy job of a fork of this fork; the fork reads through its
        parent till then."""
        if self._copy_queue is None:
            return
        try:
            self._copy_queue.send(job.to_body())
        except Exception:
            logger.warning("no copy job for fork %s", job.fork_id, exc_info=True)
            self._metrics.count("ForkCopyNotQueued")
