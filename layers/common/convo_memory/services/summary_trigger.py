"""Asking for a rolling-summary run after a turn, without writing anything to the session.

The trigger decides from the watermark it read with the turn (the summary's
``throughSeq``): a turn sends one SQS message when the summary does not cover what the
window will omit one turn from now (``FoldPlan.due``), so the worker folds a batch ahead
before any turn sees a gap. Triggers are coalesced per session in this container: after
a send, the session's turns inside the coalescing window send nothing, and the message's
delay is at least that window, so the run they rely on starts after they have landed and
folds them too. A trigger counts as sent only once SQS has taken it: after a queue
outage, the session's next turn sends again, and the run it starts folds everything
omitted meanwhile (the turn never waits for it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from convo_memory.domain.jobs import SummaryJob
from convo_memory.domain.models import ReplayPolicy
from convo_memory.domain.summary_plan import plan_after_turn
from convo_memory.domain.turn_records import TurnState
from convo_memory.ports import MetricsPort, QueuePort

logger = logging.getLogger(__name__)

MAX_TRACKED_SESSIONS = 10_000


def summary_due(state: TurnState, policy: ReplayPolicy, user_input: str, output: str) -> bool:
    """Whether, after this turn, the summary should be folded ahead: it does not cover
    what the window will omit one turn from now."""
    plan = plan_after_turn(
        state.recent,
        policy,
        state.session.message_count,
        state.summary.through_seq if state.summary else 0,
        user_input,
        output,
    )
    return plan.due


class SummaryTrigger:
    def __init__(
        self,
        queue: QueuePort | None,
        coalesce_seconds: float,
        delay_seconds: int,
        metrics: MetricsPort,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self._coalesce = coalesce_seconds
        self._delay = delay_seconds
        self._metrics = metrics
        self._clock = clock
        self._sent_at: dict[str, float] = {}

    def after_turn(
        self,
        workspace_id: str,
        state: TurnState,
        policy: ReplayPolicy,
        user_input: str,
        output: str,
    ) -> bool:
        """Send a summary job if one is due; True when SQS took one."""
        if self._queue is None or not summary_due(state, policy, user_input, output):
            return False
        return self._send(workspace_id, state.session.id)

    def after_repair(self, workspace_id: str, session_id: str) -> bool:
        """Send a summary job after a turn landed late through the repair queue: the
        repair read no window to decide with, and the job itself finds out whether a fold
        is due (one read when none is). True when SQS took one."""
        return self._send(workspace_id, session_id)

    def after_fork(self, workspace_id: str, session_id: str) -> bool:
        """Send a summary job for a new fork: the summary version it starts from may lag
        what its window omits (the job finds out whether a fold is due)."""
        return self._send(workspace_id, session_id)

    def _send(self, workspace_id: str, session_id: str) -> bool:
        if self._queue is None:
            return False
        now = self._clock()
        sent_at = self._sent_at.get(session_id)
        if sent_at is not None and now - sent_at < self._coalesce:
            return False
        try:
            job = SummaryJob(workspace_id=workspace_id, session_id=session_id)
            self._queue.send(job.to_body(), delay_seconds=self._delay)
        except Exception:
            # Distant memory can wait; the conversation must not. Nothing is marked as
            # sent, so the session's next turn sends it.
            logger.exception("could not enqueue summary for session %s", session_id)
            self._metrics.count("SummaryEnqueueFailed")
            return False
        if len(self._sent_at) >= MAX_TRACKED_SESSIONS:
            self._sent_at.clear()
        self._sent_at[session_id] = now
        return True
