"""Rolling summaries: fold the messages the replay window omits into the session's
summary, off the request path (the SummaryQueue consumer).

Watermark rules (the summary's ``throughSeq``):

- the target is the newest omitted message under the capability's replay policy; a run
  folds exactly ``(throughSeq, target]``, oldest first, in bounded chunks;
- every step is stored with a compare-and-set on the previous ``throughSeq``; a lost
  race re-reads the stored summary and continues from its watermark, so no message is
  folded twice, none is skipped and the summary never moves backwards;
- a run does bounded work (chunks, and the invocation's remaining time) and re-enqueues
  the session when it stops early;
- the serving path coalesces its triggers (``SummaryTrigger``) with a delay at least as
  long as its coalescing window, so the turns whose trigger was coalesced away have
  landed when the run reads; a run that folded something re-checks when it is done and
  runs again shortly if more became omitted meanwhile. A run that found nothing to do
  ends its chain, so duplicate chains die out.

Summarizer failures (``ProviderError``) propagate: the queue retries the job, and any
later run catches up on everything omitted meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from convo_memory.domain.errors import CapabilityNotFound
from convo_memory.domain.models import Capability, Message, Summary
from convo_memory.domain.replay_window import select_replay_window
from convo_memory.domain.turn_records import TurnState
from convo_memory.ports import (
    MetricsPort,
    NullMetrics,
    QueuePort,
    SessionStore,
    Summarizer,
    SummaryStore,
    TurnStore,
)
from convo_memory.services.catalog import CapabilityCatalog

logger = logging.getLogger(__name__)

# Messages per summarizer call, and calls per job: a job stays well inside the
# function's timeout even with a slow model; a longer backlog continues in a new job.
CHUNK_MESSAGES = 40
MAX_CHUNKS_PER_RUN = 10
# A new chunk is started only while the invocation has at least this much time left.
MIN_SECONDS_PER_CHUNK = 30.0
SQS_MAX_DELAY_SECONDS = 900


class TranscriptGap(RuntimeError):
    """A message the watermark says comes next could not be read: the job fails and is
    retried rather than skip it."""


@dataclass(frozen=True)
class SummaryPolicy:
    chunk_messages: int = CHUNK_MESSAGES
    max_chunks_per_run: int = MAX_CHUNKS_PER_RUN
    min_seconds_per_chunk: float = MIN_SECONDS_PER_CHUNK
    # Delay of a follow-up job when more became omitted while this one ran.
    continue_delay_seconds: int = 1


FoldStatus = Literal["skipped", "up_to_date", "caught_up", "partial"]


@dataclass(frozen=True)
class FoldOutcome:
    """What one job did.

    ``skipped``: no such session (deleted, another workspace's) or capability;
    ``up_to_date``: nothing to fold; ``caught_up``: folded through the target;
    ``partial``: stopped at the work bound, the session was re-enqueued.
    """

    status: FoldStatus
    through_seq: int = 0
    target_seq: int = 0
    folded_messages: int = 0
    summarizer_calls: int = 0
    lost_races: int = 0
    requeue_delay: int | None = None  # seconds, when a follow-up job was enqueued


class SummaryService:
    def __init__(
        self,
        *,
        sessions: SessionStore,
        turns: TurnStore,
        summaries: SummaryStore,
        catalog: CapabilityCatalog,
        summarizer_for: Callable[[Capability], Summarizer],
        queue: QueuePort | None,
        policy: SummaryPolicy | None = None,
        metrics: MetricsPort | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self._turns = turns
        self._summaries = summaries
        self._catalog = catalog
        self._summarizer_for = summarizer_for
        self._queue = queue
        self._policy = policy or SummaryPolicy()
        self._metrics = metrics or NullMetrics()
        self._clock = clock

    def fold(
        self,
        workspace_id: str,
        session_id: str,
        time_left: Callable[[], float] | None = None,
    ) -> FoldOutcome:
        """Fold the session's newly omitted messages into its rolling summary.

        ``time_left`` returns the seconds the invocation has left; no chunk is started
        with less than ``min_seconds_per_chunk`` left. Raises the summarizer's
        ``ProviderError`` (and ``StoreUnavailable``) so that the job is retried.
        """
        session = self._sessions.get_session(session_id)
        if session is None or session.workspace_id != workspace_id:
            logger.info("summary job for a missing session %s: nothing to do", session_id)
            return FoldOutcome("skipped")
        try:
            capability = self._catalog.get(workspace_id, session.capability_id)
        except CapabilityNotFound:
            logger.warning("summary job for session %s: its capability is gone", session_id)
            return FoldOutcome("skipped")
        if not capability.conversational or session.status != "active":
            return FoldOutcome("skipped")
        state = self._load(session_id, capability)
        if state is None:
            return FoldOutcome("skipped")

        target = _newest_omitted(state, capability)
        through = state.summary.through_seq if state.summary else 0
        text = state.summary.text if state.summary else None
        if through >= target:
            # Nothing to fold: this job's chain ends here (whoever folded re-checks).
            return FoldOutcome("up_to_date", through, target)

        max_chars = capability.summary_config.max_chars
        summarizer: Summarizer | None = None
        calls = lost = folded = 0
        while through < target:
            if calls >= self._policy.max_chunks_per_run or (
                time_left is not None and time_left() < self._policy.min_seconds_per_chunk
            ):
                delay = self._enqueue(workspace_id, session_id, 0)
                self._count_folded(folded)
                return FoldOutcome("partial", through, target, folded, calls, lost, delay)
            messages = self._next_messages(
                session_id, through, min(through + self._policy.chunk_messages, target)
            )
            if messages is None:
                return FoldOutcome("skipped", through, target, folded, calls, lost)
            summarizer = summarizer or self._summarizer_for(capability)
            new_text = summarizer.summarize(
                text, [(m.role, m.content) for m in messages], max_chars
            )
            calls += 1
            if len(new_text) > max_chars:
                logger.warning("a summary of %d chars was cut to %d", len(new_text), max_chars)
                new_text = new_text[:max_chars]
            newest = messages[-1].seq
            if self._summaries.advance_summary(
                session_id, through, Summary(text=new_text, through_seq=newest)
            ):
                folded += newest - through
                through, text = newest, new_text
                continue
            # Another job moved the summary first: continue from its watermark.
            lost += 1
            self._metrics.count("SummaryRaceLost")
            current = self._summaries.get_summary(session_id)
            if current is None:
                if self._sessions.get_session(session_id) is None:
                    return FoldOutcome("skipped", through, target, folded, calls, lost)
                through, text = 0, None  # the summary vanished with its text: start over
            else:
                through, text = current.through_seq, current.text

        self._count_folded(folded)
        delay = self._follow_up(workspace_id, session_id, capability, through) if folded else None
        return FoldOutcome("caught_up", through, target, folded, calls, lost, delay)

    # -- helpers ----------------------------------------------------------------
    def _count_folded(self, folded: int) -> None:
        if folded:
            self._metrics.count("SummaryMessagesFolded", folded)

    def _load(self, session_id: str, capability: Capability) -> TurnState | None:
        return self._turns.load_turn_state(
            session_id,
            capability.replay_policy.max_messages,
            # Agent messages may carry a digest item: read enough for maxMessages.
            with_digests=capability.kind == "agent",
        )

    def _next_messages(self, session_id: str, through: int, last: int) -> list[Message] | None:
        """Messages ``through+1..last`` that directly follow the watermark (a contiguous
        prefix, possibly shorter when the newest are not readable yet); None when the
        session was deleted meanwhile."""
        expected = through + 1
        messages: list[Message] = []
        for message in sorted(
            self._turns.read_messages(session_id, through + 1, last), key=lambda m: m.seq
        ):
            if message.seq != expected:
                break
            messages.append(message)
            expected += 1
        if messages:
            return messages
        if self._sessions.get_session(session_id) is None:
            return None
        raise TranscriptGap(f"message {through + 1} of session {session_id} is not readable")

    def _follow_up(
        self, workspace_id: str, session_id: str, capability: Capability, through: int
    ) -> int | None:
        """After catching up: enqueue the next job if the serving path may rely on one."""
        state = self._load(session_id, capability)
        if state is None:
            return None
        covered = max(through, state.summary.through_seq if state.summary else 0)
        if _newest_omitted(state, capability) > covered:
            # Turns landed while this job ran and their triggers may have been coalesced.
            return self._enqueue(workspace_id, session_id, self._policy.continue_delay_seconds)
        return None

    def _enqueue(self, workspace_id: str, session_id: str, delay_seconds: int) -> int | None:
        if self._queue is None:
            logger.warning("no summary queue configured; session %s not re-enqueued", session_id)
            return None
        delay = max(0, min(int(delay_seconds), SQS_MAX_DELAY_SECONDS))
        # Failing here fails the job, so that the queue retries it and nothing is lost.
        self._queue.send({"workspaceId": workspace_id, "sessionId": session_id}, delay)
        return delay


def _newest_omitted(state: TurnState, capability: Capability) -> int:
    """Seq of the newest message the next turn's replay window leaves out (0: none).
    Seqs are contiguous from 1, so the omitted messages are exactly 1..this."""
    window = select_replay_window(
        state.recent, capability.replay_policy, state.session.message_count
    )
    return window.newest_omitted_seq
