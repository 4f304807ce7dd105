"""Retention: the scheduled run that archives idle sessions, purges archived ones and
finishes deletions.

Three windows, narrowest first (``Settings`` validates the order at start-up):

1. **Tool digests** expire ``DIGEST_RETENTION_HOURS`` after their turn. That window is
   enforced by DynamoDB TTL (each digest item's ``ttl`` = its ``expiresAt``) and, because
   TTL deletes lazily, by the read path (``domain.turn_records.live_digests``), which
   ignores an expired digest that is still stored. This run does not look for digests.
2. **Idle sessions** are archived ``IDLE_ARCHIVE_DAYS`` after their last turn. The run
   reads the ``ACTIVE#NN`` shards of the sparse, keys-only ``byActivity`` index (sort key:
   the head's coarse activity mark) below the cutoff. The mark moves at most once per
   granularity, so the run re-checks the session's real last turn first: a session with
   a recent turn gets its mark refreshed instead. Archiving is conditional on the mark it
   was found with; a turn on an idle session moves the mark before the model is called,
   so it either wins (the session stays active) or is refused (``session_archived``).
   An archived session stays readable; it moves to ``ARCHIVED#NN`` (sort key archivedAt).
3. **Archived sessions** are purged ``PURGE_AFTER_DAYS`` after archival: marked deleted,
   then the whole session partition (head last) is deleted. Agent run traces live in the
   runs table and are never touched.

(v4) It also ends the turns **paused for the app's tools** that waited their
``PENDING_TURN_SECONDS`` out (``PENDING#NN``, by when they stop waiting): each is recorded
as abandoned, its user message with the text that came with the calls, unless a request
ended it first.

It also **finishes deletions** (``DELETING#NN``): a deleted session's contents are swept
again and its head removed once ``DELETION_GRACE_SECONDS`` have passed, longer than any
turn or summary job that was already in flight could take to land a write.

"Now" is the caller's (the schedule's event time), so a run is reproducible and a
re-delivered event does the same thing. Every step is conditional or idempotent, so a
re-run, a concurrent run or a run cut short is harmless: the next one picks up where it
stopped. Each run does bounded work; ``more`` in the report says it stopped with work
left. Store errors (throttling, outages) propagate and fail the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from convo_memory.domain.models import iso
from convo_memory.ports import MetricsPort, NullMetrics, RetentionStore

# Per run; an hourly schedule drains a larger backlog over a few runs.
MAX_ARCHIVES_PER_RUN = 1_000
MAX_PURGES_PER_RUN = 200
# A new session is started only while the invocation has at least this much time left.
MIN_SECONDS_LEFT = 20.0


@dataclass(frozen=True)
class RetentionPolicy:
    idle_archive_days: float = 7
    purge_after_days: float = 30
    deletion_grace_seconds: float = 900
    max_archives_per_run: int = MAX_ARCHIVES_PER_RUN
    max_purges_per_run: int = MAX_PURGES_PER_RUN
    min_seconds_left: float = MIN_SECONDS_LEFT


class RetainedFiles(Protocol):
    """(v5) Attachments and uploads as retention sees them (``AttachmentService``'s
    release of a session, ``FileService``'s expiry of uploads)."""

    def release(self, session_id: str) -> int: ...
    def expire(self, now: float) -> int: ...


class _NoFiles:
    """No attachments and no uploads (a deployment without a bucket, unit tests)."""

    def release(self, session_id: str) -> int:
        return 0

    def expire(self, now: float) -> int:
        return 0


NO_RETAINED_FILES: RetainedFiles = _NoFiles()


@dataclass
class RetentionReport:
    """What one run did.

    ``archived`` / ``purged``: sessions archived / purged; ``purged_items``: items those
    purges deleted; ``archive_skipped`` / ``purge_skipped``: candidates the index showed
    that had moved on (a turn raced in, deleted meanwhile, already handled by another
    run); ``more``: the run stopped at its bound with candidates left."""

    now: str
    archive_before: str
    purge_before: str
    archived: int = 0
    archive_skipped: int = 0
    purged: int = 0
    purged_items: int = 0
    purge_skipped: int = 0
    activity_refreshed: int = 0
    deletions_finished: int = 0
    pauses_abandoned: int = 0
    files_expired: int = 0
    more: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "archiveBefore": self.archive_before,
            "purgeBefore": self.purge_before,
            "archived": self.archived,
            "archiveSkipped": self.archive_skipped,
            "purged": self.purged,
            "purgedItems": self.purged_items,
            "purgeSkipped": self.purge_skipped,
            "activityRefreshed": self.activity_refreshed,
            "deletionsFinished": self.deletions_finished,
            "pausesAbandoned": self.pauses_abandoned,
            "filesExpired": self.files_expired,
            "more": self.more,
        }


class RetentionService:
    def __init__(
        self,
        store: RetentionStore,
        policy: RetentionPolicy | None = None,
        metrics: MetricsPort | None = None,
        *,
        files: RetainedFiles | None = None,
    ) -> None:
        self._store = store
        self._policy = policy or RetentionPolicy()
        self._metrics = metrics or NullMetrics()
        # (v5) What a purged or deleted session's attachments and expired uploads need.
        self._files = files or NO_RETAINED_FILES

    def run(self, now: datetime, time_left: Callable[[], float] | None = None) -> RetentionReport:
        """Archive the sessions idle since before ``now - IDLE_ARCHIVE_DAYS``, purge those
        archived before ``now - PURGE_AFTER_DAYS``, and finish the deletions older than the
        grace period. ``now`` must be timezone-aware; ``time_left`` (seconds) bounds the
        run by the invocation's remaining time."""
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError("retention needs a timezone-aware 'now'")
        policy = self._policy
        report = RetentionReport(
            now=iso(now.astimezone(UTC)),
            archive_before=iso(now - timedelta(days=policy.idle_archive_days)),
            purge_before=iso(now - timedelta(days=policy.purge_after_days)),
        )

        def at_bound(attempts: int, cap: int) -> bool:
            """True (and ``more`` set) when no further session may be started."""
            stop = attempts >= cap or (
                time_left is not None and time_left() < policy.min_seconds_left
            )
            report.more = report.more or stop
            return stop

        for session_id, mark in self._candidates("active", report.archive_before):
            if at_bound(
                report.archived + report.archive_skipped + report.activity_refreshed,
                policy.max_archives_per_run,
            ):
                break
            self._archive_if_idle(session_id, mark, report)

        for session_id, archived_at in self._candidates("archived", report.purge_before):
            if at_bound(report.purged + report.purge_skipped, policy.max_purges_per_run):
                break
            if self._store.begin_purge(session_id, archived_at, report.now):
                report.purged += 1
                report.purged_items += self._finish_deletion(session_id)
            else:
                report.purge_skipped += 1

        deleted_before = iso(now - timedelta(seconds=policy.deletion_grace_seconds))
        for session_id, _ in self._candidates("deleting", deleted_before):
            if at_bound(report.deletions_finished, policy.max_purges_per_run):
                break
            self._finish_deletion(session_id)
            report.deletions_finished += 1

        self._abandon_paused_and_expire(now, report, at_bound)
        if report.archived:
            self._metrics.count("SessionsArchived", report.archived)
        if report.purged:
            self._metrics.count("SessionsPurged", report.purged)
        if report.deletions_finished:
            self._metrics.count("DeletionsFinished", report.deletions_finished)
        return report

    def _archive_if_idle(self, session_id: str, mark: str, report: RetentionReport) -> None:
        """Archive a session whose mark is old, unless its real last turn is recent (the
        mark is coarse): then only refresh the mark."""
        last = self._store.last_turn_at(session_id)
        if last is not None and last[1] >= report.archive_before:
            if self._store.refresh_activity(session_id, mark, last[1]):
                report.activity_refreshed += 1
            else:
                report.archive_skipped += 1
        elif self._store.archive_session(session_id, mark, report.now):
            report.archived += 1
        else:
            report.archive_skipped += 1

    def _finish_deletion(self, session_id: str) -> int:
        """Sweep a session marked deleted and remove its head: the head goes last, so a
        run cut short leaves it in the index and the next run finishes the job."""
        deleted = self._store.delete_contents(session_id)
        self._files.release(session_id)
        return deleted + (1 if self._store.remove_head(session_id) else 0)

    def _abandon_paused_and_expire(
        self, now: datetime, report: RetentionReport, at_bound: Callable[[int, int], bool]
    ) -> None:
        """The paused turns that wait no more, then (v5) the uploads whose time is up."""
        self._abandon_paused(now, report, at_bound)
        report.files_expired = self._files.expire(now.timestamp())

    def _abandon_paused(
        self, now: datetime, report: RetentionReport, at_bound: Callable[[int, int], bool]
    ) -> None:
        """Record every turn paused for the app's tools that waits no more as abandoned
        (every shard, read lazily, oldest first)."""
        before = iso(now)
        for shard in range(self._store.activity_shards):
            for session_id, user_seq in self._store.paused_turns(shard, before):
                if at_bound(report.pauses_abandoned, self._policy.max_archives_per_run):
                    return
                if self._store.abandon_paused(session_id, user_seq, before):
                    report.pauses_abandoned += 1
                    self._metrics.count("PausedTurnsAbandoned")

    def _candidates(self, status: str, before: str) -> Iterator[tuple[str, str]]:
        """Every shard's candidates, oldest first within a shard; read lazily, so a run
        that stops at its bound reads no further."""
        for shard in range(self._store.activity_shards):
            yield from self._store.sessions_by_activity(status, shard, before)
