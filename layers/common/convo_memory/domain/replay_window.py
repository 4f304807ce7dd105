"""The replay window: which recorded messages a turn sees verbatim.

Implements the contract's rule exactly: consider the newest ``maxMessages``; walk them
newest to oldest, taking each while the running character total stays within
``maxChars`` or while fewer than ``minMessages`` have been taken (the floor beats the
budget); stop at the first message that fits neither. Everything older is omitted and
belongs to the rolling summary.

With ``alignment = K`` (v3, "Prompts a provider can cache") the start then moves only in
steps: the oldest replayed message is the first one at or after the rule's oldest whose
``seq - 1`` is a multiple of K, unless that leaves fewer than ``minMessages`` (the rule's
start is kept). The aligned window is a suffix of the rule's, so it never exceeds the
ceiling or the budget; with K = 1 it is the rule's window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from convo_memory.domain.models import Message, ReplayPolicy


@dataclass(frozen=True)
class ReplayWindow:
    messages: tuple[Message, ...]
    omitted_messages: int
    replayed_chars: int

    @property
    def newest_omitted_seq(self) -> int:
        """Seq of the newest message left out (0 when nothing is omitted).

        Seqs are contiguous from 1, so the omitted messages are exactly 1..this."""
        return self.omitted_messages


def select_replay_window(
    recent: Sequence[Message], policy: ReplayPolicy, total_messages: int | None = None
) -> ReplayWindow:
    """Choose the replayed suffix of a history.

    ``recent`` is the newest part of the history, oldest first; it may be longer or
    shorter than ``maxMessages`` (only the newest ``maxMessages`` are considered).
    ``total_messages`` is the full history's length when ``recent`` is only its tail,
    so that ``omitted_messages`` counts everything older too.
    """
    total = len(recent) if total_messages is None else total_messages
    candidates = list(recent)[-policy.max_messages :] if policy.max_messages else []
    taken: list[Message] = []
    chars = 0
    for message in reversed(candidates):
        size = len(message.content)
        if chars + size <= policy.max_chars or len(taken) < policy.min_messages:
            taken.append(message)
            chars += size
        else:
            break
    taken.reverse()
    taken = _aligned(taken, policy)
    return ReplayWindow(
        messages=tuple(taken),
        omitted_messages=total - len(taken),
        replayed_chars=sum(len(m.content) for m in taken),
    )


def _aligned(taken: list[Message], policy: ReplayPolicy) -> list[Message]:
    """The rule's window with its start moved up to the next step of ``alignment``."""
    step = policy.alignment
    if step <= 1:
        return taken
    for index, message in enumerate(taken):
        if (message.seq - 1) % step == 0:
            # Below the floor, the rule's start is kept (the floor beats the step).
            return taken[index:] if len(taken) - index >= policy.min_messages else taken
    return taken


def keeps_start(
    recent: Sequence[Message],
    policy: ReplayPolicy,
    total: int,
    window: ReplayWindow,
    user_input: str,
) -> bool:
    """Whether the next turn's window is expected to start where ``window`` does, once
    this turn has landed (``user_input`` and an answer as long as the newest one): the
    next prompt then begins with this one's replayed messages, so a provider's cache
    point after them pays for its write. With alignment 1, only until the window fills."""
    if not window.messages:
        return False
    answers = [m for m in recent if m.role == "assistant"]
    landed = [Message(seq=total + 1, role="user", content=user_input, created_at="")]
    if answers:
        landed.append(answers[-1].model_copy(update={"seq": total + 2}))
    after = select_replay_window([*recent, *landed], policy, total + len(landed))
    return bool(after.messages) and after.messages[0].seq == window.messages[0].seq
