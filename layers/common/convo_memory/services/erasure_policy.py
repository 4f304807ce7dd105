"""An erasure's policy (``ErasureService``), and how its job waits out the turns that
read its sessions before its claim: through the workspace's slow-turn set when it is
kept, else by the claimed heads' newest activity mark."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from convo_memory.domain.erasures import Erasure
from convo_memory.domain.models import parse_iso
from convo_memory.ports import ErasureStore, TurnsInFlight

MAX_QUEUE_DELAY_SECONDS = 900


@dataclass(frozen=True)
class ErasurePolicy:
    # Sessions claimed, erased or removed at the same time.
    concurrency: int = 8
    # The request claims sessions for at most this long; the job claims the rest.
    request_claim_seconds: float = 20.0
    # Sessions erased per chunk (one delayed sweep job per chunk).
    chunk_sessions: int = 50
    # The job's last listing is no earlier than this after the request: the index shows
    # a session created just before the request by then (usually within a second).
    index_settle_seconds: float = 2.0
    # How long after a deletion or an erasure its sweep runs (the template's
    # DeletionGraceSeconds, at least 360 s: longer than any write in flight can take).
    sweep_delay_seconds: int = MAX_QUEUE_DELAY_SECONDS
    # A new chunk is started only while the invocation has at least this much time.
    min_seconds_left: float = 20.0
    # A turn that read a session before its claim and still runs this long after the
    # claim is among the workspace's slow turns (counted after one second).
    in_flight_settle_seconds: float = 1.5
    # How often the slow turns seen at the claim are looked at again, until they end.
    in_flight_poll_seconds: float = 1.0
    # The longest a turn can run and write: waited out when turns in flight are unknown.
    turn_budget_seconds: float = 243.0
    # How often a turn moves a head's activity mark at most (ActivityGranularitySeconds):
    # without the slow-turn set, no turn that read an end user's sessions is still in
    # flight once their newest mark is older than this plus the turn budget.
    activity_granularity_seconds: float = 3600.0
    # Clocks of different containers may differ by this much.
    clock_slack_seconds: float = 5.0


class ErasureIncomplete(RuntimeError):
    """The job ran out of time with sessions left: its next delivery goes on."""


@dataclass(frozen=True)
class InFlightTurns:
    """The turns of a workspace in flight, as an erasure waits them out."""

    store: ErasureStore
    tracker: TurnsInFlight | None
    policy: ErasurePolicy
    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def wait(
        self, erasure: Erasure, sessions: list[str], time_left: Callable[[], float] | None
    ) -> None:
        """Wait until the workspace's slow turns now in flight have ended (or expired):
        among them is every turn that read one of the sessions before its claim. Without
        that set (the cap off), wait as long as a turn that read them can still write
        (``untracked_wait``)."""
        tracker, policy = self.tracker, self.policy
        seen = tracker(erasure.workspace_id) if tracker is not None else None
        if tracker is None or seen is None:
            self.sleep(self.untracked_wait(sessions))
            return
        while seen:
            if time_left is not None and time_left() < policy.min_seconds_left:
                raise ErasureIncomplete(f"erasure {erasure.id}: turns still in flight")
            self.sleep(policy.in_flight_poll_seconds)
            now, current = self.clock(), tracker(erasure.workspace_id) or {}
            seen = {turn: ends for turn, ends in seen.items() if turn in current and ends > now}

    def untracked_wait(self, sessions: list[str]) -> float:
        """How long a turn that read one of ``sessions`` may still write, found without
        the slow-turn set. A turn moves its session's activity mark (conditional on the
        session being active, so after a claim it is refused) whenever the mark is a
        granularity old; so a turn still in flight started less than a granularity after
        the newest mark the claimed heads hold, and ends by then plus the turn budget.
        An end user idle that long is erased at once; one active lately waits at most
        the turn budget."""
        policy = self.policy
        newest = self.store.newest_activity(sessions)
        if newest is None:
            return 0.0  # no head left to read: no turn can be writing to one
        ends = parse_iso(newest) + policy.activity_granularity_seconds + policy.turn_budget_seconds
        left = ends + policy.clock_slack_seconds - self.clock()
        return min(policy.turn_budget_seconds, max(0.0, left))
