"""Erasing an end user (``POST /v1/erasures``) and sweeping deleted sessions again.

**The request** writes the receipt (``pending``), queues the job, and then claims every
session of the end user that the byExternalRef index shows, in parallel: from the ``202``
on, each of them answers 404 on every route, is out of every listing and takes no turn.
The index is eventually consistent, so a session created a moment before the request may
not show yet: the job lists again (at least ``index_settle_seconds`` after the request),
and so does a last sweep later on.

**The job** (``ErasureJob``, on the erasure queue) lists and claims again, then erases the
sessions in chunks: per session its run traces (erased and counted, or counted as kept),
its idempotency records, every item of its partition and the items it owns elsewhere,
and finally its head, counted on the receipt in the same transaction. Every step is
idempotent and conditional on the claim, so a job cut short after any write finishes on
its next delivery with the same receipt; it reports ``failed`` only on its last delivery.

**Turns in flight** when the sessions were claimed (they read the session before it) are
waited out before anything is erased, so that ``done`` leaves nothing of them: once a
second and a half has passed since the claims, every such turn still running counts among
the workspace's slow turns (``TurnsInFlight``, the slow-turn cap's set), and the job waits
until those it saw have ended (or expired). Without that set (the cap off) it waits the
longest a turn can run (``turn_budget_seconds``).

**Other writes in flight** (a summary, a repair that read the session before it was
claimed or deleted) can land after the sweep, until the longest of them ends (the
streaming function's 300 s). No route reads them (the session is 404); a ``SweepJob``
queued with a delay (``sweep_delay_seconds``: the deployment's DeletionGraceSeconds, at
most SQS's 900 s) removes them, for erased sessions and for deleted ones alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

from convo_memory.domain.erasures import Erasure, ErasureStatus, SessionOfEndUser, TracePolicy
from convo_memory.domain.errors import ErasureNotFound, StoreUnavailable
from convo_memory.domain.ids import new_id
from convo_memory.domain.jobs import MAX_SWEEP_SESSIONS, ErasureJob, SweepJob
from convo_memory.domain.models import iso_at, parse_iso
from convo_memory.ports import ErasureStore, MetricsPort, NullMetrics, QueuePort, TurnsInFlight
from convo_memory.services.erasure_policy import (
    MAX_QUEUE_DELAY_SECONDS,
    ErasureIncomplete,
    ErasurePolicy,
    InFlightTurns,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")


# SQS delays a message at most this long.
class ErasedFiles(Protocol):
    """(v5) Attachments as an erasure sees them (``AttachmentService``)."""

    def release(self, session_id: str) -> int: ...
    def remove_end_user(self, workspace_id: str, external_ref: str) -> int: ...


class _NoFiles:
    """No attachments (a deployment without a bucket, unit tests)."""

    def release(self, session_id: str) -> int:
        return 0

    def remove_end_user(self, workspace_id: str, external_ref: str) -> int:
        return 0


NO_ERASED_FILES: ErasedFiles = _NoFiles()


class ErasureService:
    def __init__(
        self,
        store: ErasureStore,
        queue: QueuePort | None,
        metrics: MetricsPort | None = None,
        policy: ErasurePolicy | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        turns_in_flight: TurnsInFlight | None = None,
        files: ErasedFiles | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._metrics = metrics or NullMetrics()
        self._policy = policy or ErasurePolicy()
        self._clock = clock
        self._sleep = sleep
        # How the job waits out the turns that read a session before its claim.
        self._in_flight = InFlightTurns(self._store, turns_in_flight, self._policy, clock, sleep)
        self._files = files or NO_ERASED_FILES  # (v5) erased sessions' and end users' files

    # -- the routes -------------------------------------------------------------------

    def request(
        self,
        workspace_id: str,
        external_ref: str,
        traces: TracePolicy = "keep",
        time_left: Callable[[], float] | None = None,
    ) -> Erasure:
        """Erase the end user ``external_ref`` (and with ``traces`` "erase" their agent
        run traces): record the erasure, queue its job and claim their sessions (for at
        most ``request_claim_seconds``, or what ``time_left`` allows). The receipt."""
        erasure = Erasure(
            id=new_id("era"),
            workspace_id=workspace_id,
            external_ref=external_ref,
            traces=traces,
            status="pending",
            created_at=iso_at(self._clock()),
        )
        self._store.put_erasure(erasure)
        try:
            send_job(
                self._queue, ErasureJob(workspace_id=workspace_id, erasure_id=erasure.id).to_body()
            )
        except Exception:
            # Nothing was done yet: no receipt that no job would ever finish.
            self._forget(erasure)
            raise
        self._metrics.count("ErasuresInFlight", 1)
        budget = self._policy.request_claim_seconds
        if time_left is not None:
            budget = min(budget, time_left() - 5.0)
        until = self._clock() + max(0.0, budget)
        sessions = self._store.sessions_of(workspace_id, erasure.external_ref, erasure.created_at)
        claimed = self._claim(erasure, [s for s in sessions if s.live], until)
        logger.info(
            "erasure requested",
            extra={"erasureId": erasure.id, "listed": len(sessions), "claimed": len(claimed)},
        )
        return erasure

    def get(self, workspace_id: str, erasure_id: str) -> Erasure:
        erasure = self._store.get_erasure(workspace_id, erasure_id)
        if erasure is None:
            raise ErasureNotFound(f"erasure {erasure_id!r} not found")
        return erasure

    # -- the job ------------------------------------------------------------------------

    def run(
        self,
        job: ErasureJob,
        *,
        last_delivery: bool = False,
        time_left: Callable[[], float] | None = None,
    ) -> Erasure | None:
        """Finish the erasure (``done``); a failure on its ``last_delivery`` marks it
        ``failed`` before it propagates. Returns the receipt, or None when there is none."""
        before = self._store.start_erasure(job.workspace_id, job.erasure_id)
        if before is None:
            logger.warning("erasure job without a receipt dropped: %s", job.erasure_id)
            return None
        if before.status == "done":
            return before  # a duplicate delivery
        if before.status == "failed":
            self._metrics.count("ErasuresInFlight", 1)  # redriven from the DLQ
        erasure = before.model_copy(update={"status": "running", "finished_at": None})
        try:
            claimed = self._claim_all(erasure)
            if claimed:
                self._in_flight.wait(erasure, claimed, time_left)
            self._erase_all(erasure, time_left)
            # The last sweep lists the end user once more, when writes in flight are over.
            send_job(
                self._queue,
                SweepJob(
                    workspace_id=erasure.workspace_id,
                    session_ids=(),
                    erasure_id=erasure.id,
                    erase_traces=erasure.traces == "erase",
                    recheck=True,
                ).to_body(),
                delay=self._policy.sweep_delay_seconds,
            )
            self._finish(erasure, "done")
        except Exception:
            if last_delivery:
                logger.exception("erasure %s failed on its last delivery", erasure.id)
                self._metrics.count("ErasureFailed")
                self._finish(erasure, "failed")
            raise
        return self._store.get_erasure(erasure.workspace_id, erasure.id)

    def sweep(self, job: SweepJob, time_left: Callable[[], float] | None = None) -> int:
        """Remove what writes in flight left of deleted or erased sessions (with their
        traces for an erasure that erases them, counted on its receipt); on an erasure's
        last sweep, erase any session of the end user the index showed late. How many
        items were removed."""
        removed = 0
        for session_id in job.session_ids:
            count, runs = self._store.sweep_session(session_id, job.erase_traces)
            removed += count
            self._files.release(session_id)  # an attachment a late write stored
            if job.erasure_id is not None:
                for run_id in runs:
                    self._store.erase_run(job.workspace_id, job.erasure_id, run_id)
        if job.recheck and job.erasure_id is not None:
            erasure = self._store.get_erasure(job.workspace_id, job.erasure_id)
            if erasure is not None:
                late = self._erase_all(erasure, time_left)
                if late:
                    logger.warning(
                        "erasure %s: %d sessions shown late by the index, erased now",
                        erasure.id,
                        late,
                    )
        if removed:
            self._metrics.count("SweptItems", removed)
        return removed

    def schedule_sweep(self, workspace_id: str, session_id: str) -> None:
        """After a deletion: sweep the session again once no write in flight can land.
        Best effort: the retention run sweeps it again before removing its head."""
        try:
            send_job(
                self._queue,
                SweepJob(workspace_id=workspace_id, session_ids=(session_id,)).to_body(),
                delay=self._policy.sweep_delay_seconds,
            )
        except Exception:
            logger.warning("no delayed sweep for deleted session %s", session_id, exc_info=True)
            self._metrics.count("SweepNotScheduled")

    # -- the steps ----------------------------------------------------------------------

    def _claim_all(self, erasure: Erasure) -> list[str]:
        """Claim every session of the end user, the ones the index shows late included
        (it has settled by ``index_settle_seconds`` after the request), and let a second
        and a half pass since the last claim: the sessions to erase (none: nothing to
        wait for)."""
        policy = self._policy
        listed = self._listed(erasure)
        claimed_at = self._clock()
        settled = parse_iso(erasure.created_at) + policy.index_settle_seconds
        self._sleep(
            max(0.0, max(settled, claimed_at + policy.in_flight_settle_seconds) - claimed_at)
        )
        late = self._listed(erasure)
        if any(session.live for session in late):
            self._sleep(policy.in_flight_settle_seconds)
        return list(dict.fromkeys(session.session_id for session in [*listed, *late]))

    def _listed(self, erasure: Erasure) -> list[SessionOfEndUser]:
        """The end user's sessions, the live ones among them claimed now."""
        listed = self._store.sessions_of(
            erasure.workspace_id, erasure.external_ref, erasure.created_at
        )
        self._claim(erasure, [s for s in listed if s.live], until=None)
        return listed

    def _erase_all(self, erasure: Erasure, time_left: Callable[[], float] | None) -> int:
        """List and erase until a listing gives nothing more to erase: how many sessions
        were erased. A session another erasure holds is left to it."""
        erased = 0
        while True:
            listed = self._store.sessions_of(
                erasure.workspace_id, erasure.external_ref, erasure.created_at
            )
            this_pass = 0
            for chunk in _chunks(listed, self._policy.chunk_sessions):
                if time_left is not None and time_left() < self._policy.min_seconds_left:
                    raise ErasureIncomplete(f"erasure {erasure.id}: out of time, resumes")
                this_pass += self._erase_chunk(erasure, chunk)
            erased += this_pass
            if not this_pass:  # (v5) and none of the end user's attachments is left
                self._files.remove_end_user(erasure.workspace_id, erasure.external_ref)
                return erased

    def _erase_chunk(self, erasure: Erasure, chunk: Sequence[SessionOfEndUser]) -> int:
        """Claim, empty and remove a chunk of sessions: the sweep job for them is queued
        before their heads go, so a redelivery that finds them gone has queued it."""
        ours = self._claim(erasure, chunk, until=None)
        if not ours:
            return 0
        at_once = self._policy.concurrency
        emptied = in_parallel(lambda sid: self._empty(erasure, sid), ours, at_once)
        kept = dict(zip(ours, emptied, strict=True))
        send_job(
            self._queue,
            SweepJob(
                workspace_id=erasure.workspace_id,
                session_ids=tuple(ours),
                erasure_id=erasure.id,
                erase_traces=erasure.traces == "erase",
            ).to_body(),
            delay=self._policy.sweep_delay_seconds,
        )
        workspace_id = erasure.workspace_id
        removed = in_parallel(
            lambda sid: self._store.remove_session(sid, workspace_id, erasure.id, kept[sid]),
            ours,
            at_once,
        )
        return sum(1 for done in removed if done)

    def _empty(self, erasure: Erasure, session_id: str) -> int:
        """Everything of a claimed session but its head: its traces (erased, or counted
        as kept), idempotency records and items. The traces it keeps."""
        runs = self._store.session_runs(session_id)
        kept = 0
        if erasure.traces == "erase":
            for run_id in runs:
                self._store.erase_run(erasure.workspace_id, erasure.id, run_id)
        else:
            kept = self._store.keep_traces(session_id, erasure.id, len(runs))
        self._store.erase_contents(session_id)
        self._files.release(session_id)
        return kept

    def _claim(
        self, erasure: Erasure, sessions: Iterable[SessionOfEndUser], until: float | None
    ) -> list[str]:
        """Claim the sessions not someone else's (until ``until``, if given): the ids
        this erasure now holds."""
        claims = SessionClaims(self._store, erasure, iso_at(self._clock()), self._clock, until)
        held = in_parallel(claims.claim, list(sessions), self._policy.concurrency)
        return [sid for sid in held if sid is not None]

    def _finish(self, erasure: Erasure, status: ErasureStatus) -> None:
        at = iso_at(self._clock())
        if self._store.finish_erasure(erasure.workspace_id, erasure.id, status, at):
            self._metrics.count("ErasuresInFlight", -1)

    def _forget(self, erasure: Erasure) -> None:
        try:
            self._store.delete_erasure(erasure.workspace_id, erasure.id)
        except Exception:
            logger.warning("receipt of unqueued erasure %s left", erasure.id, exc_info=True)


def _chunks(items: Sequence[SessionOfEndUser], size: int) -> Iterable[list[SessionOfEndUser]]:
    size = max(1, min(size, MAX_SWEEP_SESSIONS))
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


@dataclass(frozen=True)
class SessionClaims:
    """An erasure's claims of its end user's sessions, made at ``at``, none after
    ``until`` (when given)."""

    store: ErasureStore
    erasure: Erasure
    at: str
    clock: Callable[[], float]
    until: float | None

    def claim(self, session: SessionOfEndUser) -> str | None:
        """The session's id when this erasure now holds it, else None."""
        if self.until is not None and self.clock() > self.until:
            return None
        erasure = self.erasure
        held = self.store.claim_session(
            session.session_id, erasure.workspace_id, erasure.external_ref, erasure.id, self.at
        )
        return session.session_id if held else None


def in_parallel(work: Callable[[_T], _R], inputs: Sequence[_T], concurrency: int) -> list[_R]:
    """``work`` over ``inputs``, ``concurrency`` at a time, results in order."""
    if len(inputs) <= 1:
        return [work(item) for item in inputs]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(work, inputs))


def send_job(queue: QueuePort | None, body: dict[str, object], delay: int = 0) -> None:
    """Put a job on the erasure queue (``StoreUnavailable`` when there is none)."""
    if queue is None:
        raise StoreUnavailable("no erasure queue is configured")
    queue.send(dict(body), delay_seconds=min(MAX_QUEUE_DELAY_SECONDS, delay))
