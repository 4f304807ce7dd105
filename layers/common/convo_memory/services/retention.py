"""Retention: the scheduled run that archives idle sessions and purges archived ones.

Three windows, narrowest first (``Settings`` validates the order at start-up):

1. **Tool digests** expire ``DIGEST_RETENTION_HOURS`` after their turn. That window is
   enforced by DynamoDB TTL (each digest item's ``ttl`` = its ``expiresAt``) and, because
   TTL deletes lazily, by the read path (``services.sessions.live_digests``), which
   ignores an expired digest that is still stored. This run does not look for digests
   and counts nothing for them: finding them would mean reading every partition.
2. **Idle sessions** are archived ``IDLE_ARCHIVE_DAYS`` after their last turn. The run
   reads the ``ACTIVE#NN`` shards of the sparse, keys-only ``byActivity`` index (sort key
   lastActiveAt) below the cutoff, and archives each one with a write conditional on it
   still being active at the lastActiveAt it was found with: a turn that races in keeps
   the session active, and a turn that comes after is refused (``session_archived``).
   An archived session stays readable; it moves to ``ARCHIVED#NN`` (sort key archivedAt).
3. **Archived sessions** are purged ``PURGE_AFTER_DAYS`` after archival: the whole
   session partition (head, summary, messages, digests, turn markers) is deleted, again
   only if the head is still archived at the archivedAt the index showed. Agent run
   traces live in the runs table and are never touched.

"Now" is the caller's (the schedule's event time), so a run is reproducible and a
re-delivered event does the same thing. Every step is conditional, so a re-run, a
concurrent run or a run cut short is harmless: the next one picks up where it stopped.
Each run does bounded work (a cap on archives and on purges, and the invocation's
remaining time); ``more`` in the report says it stopped with work left. Store errors
(throttling, outages) propagate and fail the run; what it did so far stays done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from convo_memory.domain.models import iso

if TYPE_CHECKING:
    from convo_memory.bootstrap import Container

# Per run; an hourly schedule drains a larger backlog over a few runs.
MAX_ARCHIVES_PER_RUN = 1_000
MAX_PURGES_PER_RUN = 200
# A new session is started only while the invocation has at least this much time left.
MIN_SECONDS_LEFT = 20.0


class RetentionStore(Protocol):
    @property
    def activity_shards(self) -> int: ...
    def sessions_by_activity(
        self, status: str, shard: int, before: str, page_size: int = 100
    ) -> Iterator[tuple[str, str]]: ...
    def archive_session(self, session_id: str, last_active_at: str, archived_at: str) -> bool: ...
    def purge_session(self, session_id: str, archived_at: str) -> int | None: ...


class MetricsPort(Protocol):
    def count(self, name: str, value: int = 1) -> None: ...


@dataclass(frozen=True)
class RetentionPolicy:
    idle_archive_days: float = 7
    purge_after_days: float = 30
    max_archives_per_run: int = MAX_ARCHIVES_PER_RUN
    max_purges_per_run: int = MAX_PURGES_PER_RUN
    min_seconds_left: float = MIN_SECONDS_LEFT


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
            "more": self.more,
        }


class _NullMetrics:
    def count(self, name: str, value: int = 1) -> None:
        return None


class RetentionService:
    def __init__(
        self,
        store: RetentionStore,
        policy: RetentionPolicy | None = None,
        metrics: MetricsPort | None = None,
    ) -> None:
        self._store = store
        self._policy = policy or RetentionPolicy()
        self._metrics = metrics or _NullMetrics()

    def run(self, now: datetime, time_left: Callable[[], float] | None = None) -> RetentionReport:
        """Archive the sessions idle since before ``now - IDLE_ARCHIVE_DAYS``, then purge
        those archived before ``now - PURGE_AFTER_DAYS``. ``now`` must be timezone-aware;
        ``time_left`` (seconds) bounds the run by the invocation's remaining time."""
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

        for session_id, last_active_at in self._candidates("active", report.archive_before):
            if at_bound(report.archived + report.archive_skipped, policy.max_archives_per_run):
                break
            if self._store.archive_session(session_id, last_active_at, report.now):
                report.archived += 1
            else:
                report.archive_skipped += 1

        for session_id, archived_at in self._candidates("archived", report.purge_before):
            if at_bound(report.purged + report.purge_skipped, policy.max_purges_per_run):
                break
            deleted = self._store.purge_session(session_id, archived_at)
            if deleted is None:
                report.purge_skipped += 1
            else:
                report.purged += 1
                report.purged_items += deleted

        if report.archived:
            self._metrics.count("SessionsArchived", report.archived)
        if report.purged:
            self._metrics.count("SessionsPurged", report.purged)
        return report

    def _candidates(self, status: str, before: str) -> Iterator[tuple[str, str]]:
        """Every shard's candidates, oldest first within a shard; read lazily, so a run
        that stops at its bound reads no further."""
        for shard in range(self._store.activity_shards):
            yield from self._store.sessions_by_activity(status, shard, before)


def retention_service(container: Container) -> RetentionService:
    """A ``RetentionService`` over the container's store, with the deployment's windows."""
    settings = container.settings
    return RetentionService(
        store=container.store,
        policy=RetentionPolicy(
            idle_archive_days=settings.idle_archive_days,
            purge_after_days=settings.purge_after_days,
        ),
        metrics=container.metrics,
    )
