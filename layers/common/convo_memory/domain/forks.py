"""Forks (v4): a session that branches off another after one of its answers, as chat apps
let a user edit an earlier message or ask for another answer. The pure rules: which
``atSeq`` a fork may start at, which of the parent's turns it copies when it is created,
and which summary version it starts from.

A fork inherits the parent's messages ``1..atSeq``. So that a turn on a fork reads its own
partition only (the same one Query as any turn), the fork is created holding the newest
inherited turns a turn's Query reads (the replay ceiling's worth) and the newest summary
version that ends at or before ``atSeq``; the older inherited turns (and the summary
versions behind them) are copied in afterwards, and read from the parent until then.
A summary version folds messages ``1..throughSeq`` only, so one that ends at or before
the fork point holds nothing the parent said after it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from convo_memory.domain.errors import ValidationFailed
from convo_memory.domain.summary_plan import SummaryVersion

# A fork may be made of a fork whose copy is still due, and so on: reads of inherited
# messages go up that chain (one head read and one Query a level), so a chain of this
# many copies due refuses the next fork (429) until the copies, a few seconds' work on
# their own queue, have caught up.
MAX_COPIES_DUE = 4
COPIES_DUE_RETRY_SECONDS = 2


def check_fork_point(at_seq: int, message_count: int) -> None:
    """``atSeq`` must be 0 or the seq of a recorded answer of the parent (even, at most
    its message count): else ``422 validation_error``."""
    if at_seq < 0 or at_seq % 2 or at_seq > message_count:
        raise ValidationFailed(
            f"atSeq must be 0 or the seq of a recorded answer of the session (an even "
            f"number from 2 to {message_count}); got {at_seq}",
            details=[{"loc": ["atSeq"], "msg": "not the seq of a recorded answer"}],
        )


def turns_copied_at_creation(max_messages: int) -> int:
    """How many of the newest inherited turns a fork is created with: as many as a turn's
    one Query reads (a turn is two messages), so its first turn reads nothing else."""
    return max(1, math.ceil(max_messages / 2))


def summary_behind(versions: Iterable[SummaryVersion], at_seq: int) -> SummaryVersion | None:
    """The newest summary version that ends at or before ``at_seq`` (a fork's starting
    summary, with the window it was made in), or None when there is none."""
    behind = [v for v in versions if 0 < v.summary.through_seq <= at_seq]
    return max(behind, key=lambda v: v.summary.through_seq, default=None)


# (v5) A fork at an answer removed as a conversation item (422).
REMOVED_FORK_POINT = "atSeq names an answer that was removed: fork at another answer"
