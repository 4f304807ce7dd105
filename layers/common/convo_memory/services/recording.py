"""Recording a turn exactly once, and repairing the turns whose write failed.

A failed transcript write never fails the request: the inference was already paid for.
The recorder keeps trying within the turn's time (with backoff); a turn it still cannot
write is answered with ``recorded: false`` and handed, as a ``RepairJob``, to the first
durable path that takes it:

1. the repair queue (SQS), tried a few times;
2. an asynchronous invocation of the repair function (Lambda's own queue, which shares
   nothing with SQS: Lambda retries it, then sends it to its on-failure destination);
3. neither: the turn is lost, logged with its id and counted (``TranscriptLost``, which
   the template alarms on).

A repair lands the turn once: the turn's id is stored with it, so a write that did land
before its timeout, or a second delivery by either path, is found and not written again.

(v4) A turn that ends a pause for the app's tools (``TurnRecord.resolves``) is written
over the paused turn's item, at its position, only while that pause is there: one that
another request ended first (a racing continuation, an abandonment) is *superseded*,
never appended. Its repair follows the same rule. Keeping a pause (``keep_pause``) is
retried the same way, and fails the request when it cannot be kept: a pause the
continuation would not find must not be answered.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from convo_memory.domain.errors import PauseEnded, StoreRejected, StoreUnavailable
from convo_memory.domain.jobs import RepairJob
from convo_memory.domain.models import Session
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.turn_abandonment import before_writing
from convo_memory.domain.turn_records import AppendResult, TurnRecord, Twin
from convo_memory.domain.turns import TurnPosition
from convo_memory.ports import AsyncInvokePort, MetricsPort, QueuePort, SessionStore, TurnStore

logger = logging.getLogger(__name__)

RepairOutcome = Literal[
    "recorded", "already_recorded", "session_gone", "unlandable", "queued", "superseded"
]


@dataclass(frozen=True)
class Recorded:
    """Where the turn was recorded (None: not yet, its repair is on its way; or
    ``superseded``: it ends a pause another request ended first, and is not recorded)."""

    position: TurnPosition | None
    recorded: bool
    superseded: bool = False
    # (v5) Not written: the turn at its position is the one this turn repeats.
    twin: Twin | None = None


@dataclass(frozen=True)
class RecordingPolicy:
    """How hard the serving path tries before it hands a turn over, and how hard the
    repair function tries on an asynchronous event before it hands it to the queue.
    Each delay doubles from ``first_delay`` up to ``max_delay``, with jitter."""

    write_attempts: int = 4
    # The serving path stops retrying the write this long after the first failure (the
    # client is waiting), or earlier when the turn's time runs out.
    write_seconds: float = 2.0
    handoff_attempts: int = 3
    first_delay: float = 0.1
    max_delay: float = 1.0
    # An asynchronous repair's attempts, and the time it keeps for handing over.
    async_attempts: int = 6
    async_reserve_seconds: float = 5.0


class _WriteFailed(Exception):
    """The write did not land; ``cause`` says whether trying again can help."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class TurnRecorder:
    def __init__(
        self,
        turns: TurnStore,
        sessions: SessionStore,
        repair_queue: QueuePort | None,
        metrics: MetricsPort,
        after_repair: Callable[[str, str], object] | None = None,
        repair_fallback: AsyncInvokePort | None = None,
        policy: RecordingPolicy | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._turns = turns
        self._sessions = sessions
        self._repair_queue = repair_queue
        self._metrics = metrics
        # Told (workspace, session) when a repair lands a turn: the summary may be due.
        self._after_repair = after_repair
        self._fallback = repair_fallback
        self._policy = policy or RecordingPolicy()
        self._monotonic = monotonic
        self._sleep = sleep

    # -- the serving path -------------------------------------------------------------

    def record(
        self, workspace_id: str, session: Session, turn: TurnRecord, until: float | None = None
    ) -> Recorded:
        """Append the turn after the session's last message (one conditional put, plus
        the digest on turns that called tools), retrying a capacity or availability
        failure until ``until`` (a ``monotonic`` time: the turn's end) at the latest.
        A turn that ends a pause is written at ``session.message_count + 1``, the pause's
        position. Never raises (but a turn given up is not recorded: ``TurnAbandoned``)."""
        before_writing()
        try:
            result = self._turns.append_turn(session.id, session.message_count, turn)
        except PauseEnded:
            return Recorded(None, False, superseded=True)
        except Exception as exc:
            self._log_write_failure(session.id, exc)
            try:
                retried = self._retry_write(session, turn, exc, until)
            except PauseEnded:
                return Recorded(None, False, superseded=True)
            if retried is None:
                # Answered ``recorded: false`` (TurnsNotRecordedAlarm counts these).
                self._metrics.count("TranscriptWriteFailed")
                self._hand_over(
                    RepairJob.of(workspace_id, session.id, session.message_count + 1, turn)
                )
                return Recorded(None, False)
            self._metrics.count("TranscriptWriteRetried")
            result = retried
        position = TurnPosition(result.user_seq, result.assistant_seq)
        if result.twin is not None:
            self._metrics.count("RetriedTurnsAnsweredAgain")
            return Recorded(position, True, twin=result.twin)
        self._store_digest(session.id, result, turn)
        return Recorded(position, True)

    def _retry_write(
        self, session: Session, turn: TurnRecord, failure: Exception, until: float | None
    ) -> AppendResult | None:
        policy = self._policy
        stop = self._monotonic() + policy.write_seconds
        if until is not None:
            stop = min(stop, until - policy.write_seconds / 2)  # keep time to hand over
        position = session.message_count + 1
        for attempt in range(1, policy.write_attempts):
            if not isinstance(failure, StoreUnavailable):
                return None  # refused for good, or unknown: the repair decides
            delay = self._delay(attempt)
            if self._monotonic() + delay > stop:
                return None
            self._sleep(delay)
            try:
                return self._land(session.id, session.message_count, position, turn)
            except _WriteFailed as exc:
                failure = exc.cause
        return None

    def _land(
        self, session_id: str, after_seq: int, position: int, turn: TurnRecord
    ) -> AppendResult:
        """The turn's place in the transcript: where an earlier attempt put it (a write
        that landed though its answer was lost), else a new append (or, for a turn that
        ends a pause, the pause's position, ``PauseEnded`` when it is gone)."""
        if turn.resolves is not None:
            after_seq = position - 1
        try:
            found = self._turns.find_turn(session_id, turn.turn_id, position)
            if found is not None:
                return AppendResult(found.user_seq, found.assistant_seq, already_recorded=True)
            return self._turns.append_turn(session_id, after_seq, turn)
        except PauseEnded:
            raise
        except Exception as exc:
            raise _WriteFailed(exc) from exc

    def keep_pause(
        self,
        session: Session,
        pending: PendingTurn,
        replaces: str | None = None,
        until: float | None = None,
    ) -> PendingTurn | None:
        """Keep a paused turn (``TurnStore.keep_pending``), retrying a capacity or
        availability failure like a transcript write: the state as kept, or None when the
        pause ``replaces`` was ended meanwhile. Raises the store's error when it cannot
        be kept."""
        before_writing()  # a turn given up keeps no pause
        stop = self._monotonic() + self._policy.write_seconds
        if until is not None:
            stop = min(stop, until)
        for attempt in range(1, self._policy.write_attempts + 1):
            try:
                return self._turns.keep_pending(
                    session.id, session.message_count, pending, replaces
                )
            except StoreUnavailable:
                delay = self._delay(attempt)
                if attempt == self._policy.write_attempts or self._monotonic() + delay > stop:
                    self._metrics.count("PausedTurnWriteFailed")
                    raise
                self._sleep(delay)
        raise AssertionError("unreachable")

    def _hand_over(self, job: RepairJob) -> None:
        """Give the turn to the first durable path that takes it; count it lost if none."""
        message = job.to_message()
        queue, fallback = self._repair_queue, self._fallback
        if queue is not None and self._send(queue.send, message, "repair queue"):
            return
        if fallback is not None and self._send(fallback.invoke, message, "repair function"):
            self._metrics.count("TranscriptRepairInvoked")
            return
        logger.error(
            "turn %s of session %s is lost: no repair path took it",
            job.turn.turn_id,
            job.session_id,
        )
        self._metrics.count("TranscriptRepairEnqueueFailed")
        self._metrics.count("TranscriptLost")

    def _send(
        self, send: Callable[[dict[str, Any]], None], message: dict[str, Any], name: str
    ) -> bool:
        """``send(message)``, tried ``handoff_attempts`` times; whether it was taken."""
        for attempt in range(1, self._policy.handoff_attempts + 1):
            try:
                send(message)
                return True
            except Exception as exc:
                logger.warning("could not hand a transcript repair to the %s: %s", name, exc)
                if attempt < self._policy.handoff_attempts:
                    self._sleep(self._delay(attempt) / 2)
        return False

    # -- the repair function ------------------------------------------------------------

    def repair(self, job: RepairJob | dict[str, Any]) -> RepairOutcome:
        """Land a turn whose transcript write failed on the request path, once (one
        attempt: the repair queue retries it with backoff).

        Appends at the session's current end unless the turn is already stored (a write
        that landed before its timeout). Capacity errors propagate so the queue retries;
        a turn the store refuses for good is counted and dropped instead of cycling
        through the queue into its DLQ."""
        job = job if isinstance(job, RepairJob) else RepairJob.model_validate(job)
        session = self._sessions.get_session(job.session_id)
        if session is None or session.workspace_id != job.workspace_id:
            logger.warning("repair for a deleted session %s dropped", job.session_id)
            return "session_gone"
        turn = job.turn.record()
        try:
            result = self._land(job.session_id, session.message_count, job.position, turn)
        except PauseEnded:
            logger.warning(
                "turn %s of session %s ends a pause another request ended first: dropped",
                turn.turn_id,
                job.session_id,
            )
            self._metrics.count("TranscriptRepairSuperseded")
            return "superseded"
        except _WriteFailed as exc:
            if isinstance(exc.cause, StoreRejected):
                logger.error(
                    "turn %s of session %s cannot be stored: %s",
                    turn.turn_id,
                    job.session_id,
                    exc.cause,
                )
                self._metrics.count("TranscriptRepairFailed")
                return "unlandable"
            raise exc.cause from None
        self._store_digest(job.session_id, result, turn)
        if result.already_recorded:
            return "already_recorded"
        self._metrics.count("TranscriptRepaired")
        if self._after_repair is not None:
            self._after_repair(job.workspace_id, job.session_id)
        return "recorded"

    def repair_async(self, job: RepairJob, time_left: Callable[[], float]) -> RepairOutcome:
        """A repair handed over by an asynchronous invocation: retried here with backoff
        while the invocation has time, then given to the repair queue. Raises when
        neither worked, so that Lambda runs the event again later (and finally sends it
        to the function's on-failure destination)."""
        policy = self._policy
        for attempt in range(1, policy.async_attempts + 1):
            try:
                return self.repair(job)
            except Exception as exc:
                failure = exc
                logger.warning("asynchronous repair attempt %d failed: %s", attempt, exc)
            delay = self._delay(attempt)
            if (
                attempt == policy.async_attempts
                or time_left() - delay < policy.async_reserve_seconds
            ):
                break
            self._sleep(delay)
        queue = self._repair_queue
        if queue is not None and self._send(queue.send, job.to_message(), "repair queue"):
            return "queued"
        raise StoreUnavailable(f"turn {job.turn.turn_id} not landed yet: {failure}")

    # -- shared ----------------------------------------------------------------------------

    def _store_digest(self, session_id: str, result: AppendResult, turn: TurnRecord) -> None:
        if not turn.has_digest:
            return
        try:
            self._turns.put_digest(session_id, result.user_seq, turn)
        except Exception:
            # The transcript is recorded; only the tool digest (derived, short-lived) is lost.
            logger.exception("tool digest write failed for session %s", session_id)
            self._metrics.count("DigestWriteFailed")

    def _delay(self, attempt: int) -> float:
        """The backoff before retry ``attempt`` (1-based), with jitter."""
        base = min(self._policy.max_delay, self._policy.first_delay * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)

    @staticmethod
    def _log_write_failure(session_id: str, exc: Exception) -> None:
        unavailable = isinstance(exc, StoreUnavailable)
        logger.log(
            logging.WARNING if unavailable else logging.ERROR,
            "transcript write failed for session %s (%s); retrying or handing it to repair",
            session_id,
            type(exc).__name__,
            exc_info=not unavailable,
        )
