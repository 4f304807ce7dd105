"""When the rolling summary is folded, and how far, and which stored version a turn
shows: the rules the serving path's trigger, the summary worker and the turns share (pure).

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
cache"), whenever the summary jobs run. Folds end on a step (the target is rounded down
to a multiple of K, never below the projection), and each stored version says in which
window it was made (``SummaryVersion.made_at_window``: how many messages the window
omitted then). A turn shows only versions made in an earlier window than its own
(``summary_for_window``): the oldest of them that covers everything its window omits,
else (the summarizer lagged) the newest of them. So the versions a window can show were
all stored before its first turn read, and every turn of the window shows the same one,
however late a job lands: a version made while a window is current waits for the next
step. The store keeps the version the current window shows beside a new one, and stores
a version only while no turn has landed since its window was read (``FoldWindow``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from convo_memory.domain.models import Message, ReplayPolicy, Summary
from convo_memory.domain.replay_window import select_replay_window

DEFAULT_BATCH_TURNS = 5
MESSAGES_PER_TURN = 2


@dataclass(frozen=True)
class SummaryVersion:
    """A stored version of a session's rolling summary, and how many messages the replay
    window omitted when the fold that made it stored it (``made_at_window``; 0 for a
    version stored before this was kept): only windows that omit more show it."""

    summary: Summary
    made_at_window: int = 0


@dataclass(frozen=True)
class FoldWindow:
    """The window a fold stores its version in: how many messages it omits (the new
    version's ``made_at_window``) and the length of the history it was read from. A
    store writes the version only while the history is still that long, so that no turn
    of a later window has read the versions before it."""

    omitted: int
    message_count: int


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


def shown_version(
    versions: Sequence[SummaryVersion], omitted: int, alignment: int
) -> SummaryVersion | None:
    """The stored version a turn shows, given every version kept (``versions``, in any
    order) and how many messages the turn's window omits.

    With alignment 1, the newest version. Otherwise only versions made in an earlier
    window (``made_at_window < omitted``) count: the oldest of them that covers every
    omitted message (a fold made ahead of a step is shown from the step on), else the
    newest of them (the summarizer lags; a later window shows its catch-up), else none.
    """
    real = [v for v in versions if v.summary.through_seq > 0]
    if alignment <= 1:
        return max(real, key=_through, default=None)
    eligible = [v for v in real if v.made_at_window < omitted]
    covering = [v for v in eligible if v.summary.through_seq >= omitted]
    if covering:
        return min(covering, key=_through)
    return max(eligible, key=_through, default=None)


def summary_for_window(
    versions: Sequence[SummaryVersion], omitted: int, alignment: int
) -> Summary | None:
    """The summary a turn shows (``shown_version``), or None."""
    shown = shown_version(versions, omitted, alignment)
    return shown.summary if shown is not None else None


def _through(version: SummaryVersion) -> int:
    return version.summary.through_seq
