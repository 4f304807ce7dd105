"""Rolling summaries: fold a session's omitted messages, and a batch of the messages about
to leave its replay window, into its summary, off the request path (the SummaryQueue
consumer).

Watermark rules (the summary's ``throughSeq``):

- a job plans from one consistent read of the session state (``FoldPlan``): it does
  nothing unless a fold is due, and then folds ``(throughSeq, target]``, oldest first,
  at most ``chunk_messages`` per summarizer call, where the target runs a batch of
  ``batch_turns`` turns past the newest omitted message (the contract lets the summary
  run ahead of the window; it must never fall behind it);
- with ``replay.alignment > 1`` folds end on the window's steps and each stored step
  keeps the version it replaced, which turns show until their window reaches the step
  (``summary_plan.summary_for_window``): the summary a prompt shows changes only when
  the window's start moves;
- every step is stored with a compare-and-set on the previous ``throughSeq``; a lost
  race re-reads the stored summary and continues from its watermark, so no message is
  folded twice, none is skipped and the summary never moves backwards;
- a job never sends a message. The serving path delays each trigger at least as long as
  it coalesces them, so every turn has a job that starts after the turn landed and sees
  it. A job that runs short of invocation time stops between chunks (``partial``) and
  its record fails, so SQS redelivers that same message: no chain of new messages for
  Lambda's recursive-loop detection to cut.

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
from convo_memory.domain.summary_plan import DEFAULT_BATCH_TURNS, plan_fold
from convo_memory.domain.turn_records import TurnState
from convo_memory.ports import (
    MetricsPort,
    NullMetrics,
    SessionStore,
    Summarizer,
    SummaryStore,
    TurnStore,
)
from convo_memory.services.catalog import CapabilityCatalog

logger = logging.getLogger(__name__)

# Messages per summarizer call: a backlog (after an outage) is folded in calls of this
# size; a steady conversation's batch always fits in one.
CHUNK_MESSAGES = 40
# A new chunk is started only while the invocation has at least this much time left
# (a model call may take the provider timeout cap, 25 s by default).
MIN_SECONDS_PER_CHUNK = 30.0
MAX_REMEMBERED_SESSIONS = 10_000


class TranscriptGap(RuntimeError):
    """A message the watermark says comes next could not be read: the job fails and is
    retried rather than skip it."""


@dataclass(frozen=True)
class SummaryPolicy:
    batch_turns: int = DEFAULT_BATCH_TURNS
    chunk_messages: int = CHUNK_MESSAGES
    min_seconds_per_chunk: float = MIN_SECONDS_PER_CHUNK


FoldStatus = Literal["skipped", "up_to_date", "caught_up", "partial"]


@dataclass(frozen=True)
class FoldOutcome:
    """What one job did.

    ``skipped``: no such session (deleted, another workspace's) or capability;
    ``up_to_date``: no fold was due; ``caught_up``: folded through the target;
    ``partial``: stopped short of the target for lack of invocation time (the record
    should be redelivered).
    """

    status: FoldStatus
    through_seq: int = 0
    target_seq: int = 0
    folded_messages: int = 0
    summarizer_calls: int = 0
    lost_races: int = 0


class SummaryService:
    def __init__(
        self,
        *,
        sessions: SessionStore,
        turns: TurnStore,
        summaries: SummaryStore,
        catalog: CapabilityCatalog,
        summarizer_for: Callable[[Capability], Summarizer],
        policy: SummaryPolicy | None = None,
        metrics: MetricsPort | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self._turns = turns
        self._summaries = summaries
        self._catalog = catalog
        self._summarizer_for = summarizer_for
        self._policy = policy or SummaryPolicy()
        self._metrics = metrics or NullMetrics()
        self._clock = clock
        # A session's workspace and capability never change: a warm worker skips the head
        # read for the sessions it has seen (the state read still checks both).
        self._session_capability: dict[str, tuple[str, str]] = {}

    def fold(
        self,
        workspace_id: str,
        session_id: str,
        time_left: Callable[[], float] | None = None,
    ) -> FoldOutcome:
        """Fold the session's summary ahead of its replay window, if a fold is due.

        ``time_left`` returns the seconds the invocation has left; no chunk is started
        with less than ``min_seconds_per_chunk`` left. Raises the summarizer's
        ``ProviderError`` (and ``StoreUnavailable``) so that the job is retried.
        """
        capability = self._capability(workspace_id, session_id)
        if capability is None:
            return FoldOutcome("skipped")
        state = self._turns.load_turn_state(
            session_id,
            capability.replay_policy.max_messages,
            # Agent messages may carry a digest item: read enough for maxMessages.
            with_digests=capability.kind == "agent",
        )
        if (
            state is None
            or state.session.workspace_id != workspace_id
            or state.session.status != "active"
        ):
            return FoldOutcome("skipped")
        through = state.summary.through_seq if state.summary else 0
        text = state.summary.text if state.summary else None
        plan = plan_fold(
            state.recent, capability.replay_policy, state.session.message_count, through
        )
        # How far distant memory lags what turns already leave out (alarmed on).
        self._metrics.count("SummaryLagMessages", max(0, plan.newest_omitted - through))
        if not plan.due:
            return FoldOutcome("up_to_date", through, plan.newest_omitted)
        target = plan.target(self._policy.batch_turns)

        max_chars = capability.summary_config.max_chars
        aligned = capability.replay_policy.alignment > 1
        summarizer: Summarizer | None = None
        calls = lost = folded = 0
        while through < target:
            if time_left is not None and time_left() < self._policy.min_seconds_per_chunk:
                self._count_folded(folded)
                return FoldOutcome("partial", through, target, folded, calls, lost)
            last = min(through + max(1, self._policy.chunk_messages), target)
            messages = self._messages(session_id, state, through, last)
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
            # With a window that moves in steps, the replaced version stays shown until
            # the step (``summary_for_window``): keep it beside the new one.
            earlier = Summary(text=text or "", through_seq=through) if aligned else None
            if self._summaries.advance_summary(
                session_id, through, Summary(text=new_text, through_seq=newest), earlier
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
        return FoldOutcome("caught_up", through, target, folded, calls, lost)

    # -- helpers ----------------------------------------------------------------
    def _capability(self, workspace_id: str, session_id: str) -> Capability | None:
        """The session's capability, if the session is this workspace's and the
        capability converses; None otherwise (the job has nothing to do)."""
        known = self._session_capability.get(session_id)
        if known is None:
            session = self._sessions.get_session(session_id)
            if session is None:
                logger.info("summary job for a missing session %s: nothing to do", session_id)
                return None
            known = (session.workspace_id, session.capability_id)
            if len(self._session_capability) >= MAX_REMEMBERED_SESSIONS:
                self._session_capability.clear()
            self._session_capability[session_id] = known
        owner, capability_id = known
        if owner != workspace_id:
            return None
        try:
            capability = self._catalog.get(workspace_id, capability_id)
        except CapabilityNotFound:
            logger.warning("summary job for session %s: its capability is gone", session_id)
            return None
        return capability if capability.conversational else None

    def _count_folded(self, folded: int) -> None:
        if folded:
            self._metrics.count("SummaryMessagesFolded", folded)

    def _messages(
        self, session_id: str, state: TurnState, through: int, last: int
    ) -> list[Message] | None:
        """Messages ``through+1..last``: from the state already read when it holds them
        (a steady conversation's batch is still in the window), else from the store."""
        held = [m for m in state.recent if through < m.seq <= last]
        if held and held[0].seq == through + 1 and held[-1].seq == last:
            return held
        return self._next_messages(session_id, through, last)

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
