"""When the rolling summary is folded, and how far: the rules the serving path's trigger
and the summary worker share (pure).

The contract ("Replay window") asks that, once the summarizer has caught up, the
summary's ``throughSeq`` is at least the newest omitted message; it may run ahead and
cover messages that are still replayed verbatim. These rules fold ahead, a batch at a
time, so that a steady conversation needs one summary model call per ``batch_turns``
turns and never shows a gap:

- *projected*: the newest message the window would omit after one more turn shaped like
  the newest one (the same two message sizes). A fold is **due** when the summary does
  not cover the projection: it is asked for one turn before the gap would appear, which
  leaves the worker a whole turn's interval to run.
- *target*: a fold runs through the newest omitted message plus ``batch_turns`` turns'
  worth of messages (the messages about to leave the window), capped by the messages
  that exist, and at least through the projection.

With ``replay.alignment = K > 1`` the window's start moves in steps, and the summary a
prompt shows must change only when the start moves (v3, "Prompts a provider can
cache"). Folds then end on a step (the target is rounded down to a multiple of K, never
below the projection), and the summary item keeps the version a fold replaced: a turn
shows the oldest kept version that covers everything its window omits
(``summary_for_window``). So the fold that runs one turn before a step is not shown
until the step, and the prompts between steps keep one summary text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from convo_memory.domain.models import Message, ReplayPolicy, Summary
from convo_memory.domain.replay_window import select_replay_window

DEFAULT_BATCH_TURNS = 5
MESSAGES_PER_TURN = 2


@dataclass(frozen=True)
class FoldPlan:
    """Where a session's summary stands against its replay window."""

    covered: int  # the summary's throughSeq (0: no summary)
    newest_omitted: int  # what the next turn's window leaves out
    projected_omitted: int  # ... and the one after it, if it looks like the newest turn
    message_count: int
    alignment: int = 1

    @property
    def due(self) -> bool:
        """Whether a fold should run now (the turn after next would see a gap)."""
        return self.covered < self.projected_omitted

    @property
    def gap(self) -> bool:
        """Whether the next turn already sees omitted messages the summary lacks."""
        return self.covered < self.newest_omitted

    def target(self, batch_turns: int) -> int:
        """The seq a fold should reach: a batch past the newest omitted message, within
        the messages that exist, and never short of the projection."""
        ahead = self.newest_omitted + MESSAGES_PER_TURN * max(1, batch_turns)
        reach = min(self.message_count, max(self.projected_omitted, ahead))
        if self.alignment > 1:
            # End on a step: the version a later window start will show unchanged.
            reach = max(self.projected_omitted, reach - reach % self.alignment)
        return reach


def plan_fold(
    recent: Sequence[Message], policy: ReplayPolicy, message_count: int, covered: int
) -> FoldPlan:
    """The fold plan of a history whose newest part is ``recent`` (oldest first) and
    whose length is ``message_count``, with a summary through ``covered``."""
    window = select_replay_window(recent, policy, message_count)
    newest = list(recent[-MESSAGES_PER_TURN:])
    # One more turn like the newest: the same sizes, the next seqs.
    projected = [
        message.model_copy(update={"seq": message_count + index + 1})
        for index, message in enumerate(newest)
    ]
    after = select_replay_window([*recent, *projected], policy, message_count + len(projected))
    return FoldPlan(
        covered=covered,
        newest_omitted=window.newest_omitted_seq,
        projected_omitted=max(window.newest_omitted_seq, after.newest_omitted_seq),
        message_count=message_count,
        alignment=policy.alignment,
    )


def plan_after_turn(
    recent: Sequence[Message],
    policy: ReplayPolicy,
    message_count: int,
    covered: int,
    user_input: str,
    answer: str,
) -> FoldPlan:
    """The fold plan once a turn (``user_input``, ``answer``) has landed after a history
    of ``message_count`` messages: what the serving path's trigger decides on."""
    landed = [
        Message(seq=message_count + 1, role="user", content=user_input, created_at=""),
        Message(seq=message_count + 2, role="assistant", content=answer, created_at=""),
    ]
    return plan_fold([*recent, *landed], policy, message_count + len(landed), covered)


def summary_for_window(
    current: Summary | None, earlier: Summary | None, omitted: int, alignment: int
) -> Summary | None:
    """The summary a turn shows, given the stored one (``current``), the version it
    replaced (``earlier``, kept only with alignment; ``throughSeq`` 0 stands for "no
    summary yet") and how many messages the turn's window omits.

    With alignment 1, the stored summary. Otherwise the oldest version that covers every
    omitted message, so that a fold made ahead of a step is shown from the step on; when
    none covers them (the summarizer lags), the newest one.
    """
    if alignment <= 1 or current is None or earlier is None:
        return current
    if omitted <= earlier.through_seq < current.through_seq:
        return earlier if earlier.through_seq > 0 else None
    return current
