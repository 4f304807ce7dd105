"""Rolling summaries: fold a session's omitted messages, and a batch of the messages about
to leave its replay window, into its summary, off the request path (the SummaryQueue
consumer).

Watermark rules (the summary's ``throughSeq``):

- a job plans from one consistent read of the session state (``FoldPlan``): it does
  nothing unless a fold is due, and then folds ``(throughSeq, target]``, oldest first,
  at most ``chunk_messages`` per summarizer call, where the target runs a batch of
  ``batch_turns`` turns past the newest omitted message (the contract lets the summary
  run ahead of the window; it must never fall behind it);
- with ``replay.alignment > 1`` folds end on the window's steps; each version is stored
  as made in the window current when it is written (checked by the store: no turn has
  landed since that window was read, else the window is read again), beside the version
  that window shows, so that turns show a version only from the next window on
  (``summary_plan.summary_for_window``): the summary a prompt shows changes only when
  the window's start moves, however late the job runs;
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
from dataclasses import dataclass, replace
from typing import Literal

from convo_memory.domain.attachments import with_attachment_notes
from convo_memory.domain.errors import CapabilityNotFound, StoreUnavailable
from convo_memory.domain.models import Capability, Message, Summary
from convo_memory.domain.replay_window import select_replay_window
from convo_memory.domain.summary_plan import (
    DEFAULT_BATCH_TURNS,
    FoldWindow,
    SummaryVersion,
    plan_fold,
    shown_version,
)
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
# Attempts at storing one version while turns keep landing (each re-reads the window).
MAX_WINDOW_ATTEMPTS = 5


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


@dataclass
class _Folding:
    """A fold in progress: where the summary stands, and what the job has done."""

    workspace_id: str
    capability: Capability
    state: TurnState
    target: int
    through: int
    text: str | None
    folded: int = 0
    calls: int = 0
    lost: int = 0

    def outcome(self, status: FoldStatus) -> FoldOutcome:
        return FoldOutcome(status, self.through, self.target, self.folded, self.calls, self.lost)


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
        state = self._state(workspace_id, session_id, capability)
        if state is None:
            return FoldOutcome("skipped")
        through = state.summary.through_seq if state.summary else 0
        plan = plan_fold(
            state.recent, capability.replay_policy, state.session.message_count, through
        )
        # How far distant memory lags what turns already leave out (alarmed on).
        self._metrics.count("SummaryLagMessages", max(0, plan.newest_omitted - through))
        if not plan.due:
            return FoldOutcome("up_to_date", through, plan.newest_omitted)
        text = state.summary.text if state.summary else None
        target = plan.target(self._policy.batch_turns)
        folding = _Folding(workspace_id, capability, state, target, through, text)
        return self._fold_to_target(folding, time_left)

    def _fold_to_target(
        self, folding: _Folding, time_left: Callable[[], float] | None
    ) -> FoldOutcome:
        """Fold chunk after chunk until the target, or the invocation's time, is reached."""
        summarizer: Summarizer | None = None
        while folding.through < folding.target:
            if time_left is not None and time_left() < self._policy.min_seconds_per_chunk:
                self._count_folded(folding.folded)
                return folding.outcome("partial")
            last = min(folding.through + max(1, self._policy.chunk_messages), folding.target)
            state = folding.state
            messages = self._messages(state.session.id, state, folding.through, last)
            if messages is None:
                return folding.outcome("skipped")
            summarizer = summarizer or self._summarizer_for(folding.capability)
            if not self._fold_chunk(folding, summarizer, messages):
                return folding.outcome("skipped")
        self._count_folded(folding.folded)
        return folding.outcome("caught_up")

    def _fold_chunk(
        self, folding: _Folding, summarizer: Summarizer, messages: list[Message]
    ) -> bool:
        """One summarizer call over ``messages``, stored only if the summary has not moved
        meanwhile (else the fold goes on from where another job left it). False: the
        session is gone."""
        max_chars = folding.capability.summary_config.max_chars
        new_text = summarizer.summarize(
            folding.text, [(m.role, with_attachment_notes(m)) for m in messages], max_chars
        )
        folding.calls += 1
        if len(new_text) > max_chars:
            logger.warning("a summary of %d chars was cut to %d", len(new_text), max_chars)
            new_text = new_text[:max_chars]
        through = folding.through
        version = Summary(text=new_text, through_seq=messages[-1].seq)
        stored, latest = self._store(
            folding.workspace_id, folding.capability, folding.state, through, version
        )
        if stored and latest is not None:
            folding.folded += version.through_seq - through
            folding.through, folding.text, folding.state = version.through_seq, new_text, latest
            return True
        # Another job moved the summary first: continue from its watermark.
        folding.lost += 1
        self._metrics.count("SummaryRaceLost")
        if latest is None:
            return False
        folding.state = latest
        current = latest.summary
        # A summary that vanished with its text (no version left): start over.
        folding.through, folding.text = (
            (current.through_seq, current.text) if current else (0, None)
        )
        return True

    def _state(
        self, workspace_id: str, session_id: str, capability: Capability
    ) -> TurnState | None:
        """What a job plans from, in one read; None when there is nothing to do (the
        session is gone, another workspace's, or no longer active)."""
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
            return None
        return state

    def _store(
        self,
        workspace_id: str,
        capability: Capability,
        state: TurnState,
        through: int,
        version: Summary,
    ) -> tuple[bool, TurnState | None]:
        """Store ``version`` over the summary at ``through``: (True, the state with it)
        when stored; (False, the state read again: None when there is nothing to do)
        when another job moved the summary first.

        With a window that moves in steps, the version is made in the window the state
        shows, beside the version that window shows (``summary_plan``); when a turn has
        landed since the state was read, it is stored again in the window now current.
        """
        session_id = state.session.id
        policy = capability.replay_policy
        for _ in range(MAX_WINDOW_ATTEMPTS):
            window, kept = None, None
            if policy.alignment > 1:
                count = state.session.message_count
                omitted = select_replay_window(state.recent, policy, count).omitted_messages
                window = FoldWindow(omitted, count)
                kept = shown_version(state.summary_versions, omitted, policy.alignment)
            if self._summaries.advance_summary(session_id, through, version, kept, window=window):
                made = SummaryVersion(version, window.omitted if window else 0)
                return True, replace(
                    state, summary=version, summary_versions=(made, *([kept] if kept else []))
                )
            latest = self._state(workspace_id, session_id, capability)
            if latest is None or _through(latest) != through or window is None:
                return False, latest
            state = latest  # a turn landed: the version is made in the window now current
        raise StoreUnavailable("turns kept landing while the summary was being stored")

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
            if session.capability_id is None:
                # A conversation no response has bound: nothing to summarize with (yet).
                logger.info("summary job for unbound conversation %s: nothing to do", session_id)
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
            # (v5) A removed message keeps its place, not its text: never folded in.
            messages.append(
                message.model_copy(update={"content": ""}) if message.removed else message
            )
            expected += 1
        if messages:
            return messages
        if self._sessions.get_session(session_id) is None:
            return None
        raise TranscriptGap(f"message {through + 1} of session {session_id} is not readable")


def _through(state: TurnState) -> int:
    return state.summary.through_seq if state.summary else 0
