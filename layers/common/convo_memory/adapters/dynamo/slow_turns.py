"""Slow turns in flight, capped per workspace, on the turn limiter's item.

A turn that has run for more than ``after_seconds`` (one second) is *slow*: a tool that
stalls, a slow model. One workspace may have at most ``max_turns`` of them in flight;
while it has that many, its new turns are refused (``429 rate_limited``, ``Retry-After``)
so that it cannot hold the serving functions' concurrency that other workspaces need.

The set lives on the workspace's item of ``TurnLimitsTable`` (``rate_limit.py``), as
the String Set ``slow``: one entry ``"<expires, epoch seconds>.<6 hex>"`` per slow turn.

- Admission reads it for free: the rate limit's one conditional ``UpdateItem`` per turn
  adds ``size(slow) < :slowCap`` to its condition (``ADMISSION_CONDITION``). Without a
  rate limit, admission is one eventually consistent ``GetItem`` (half a read unit).
- A turn still running after a second adds its entry (``ADD``: one write), and removes
  it when it ends (``DELETE``: one write). A fast turn writes nothing. So the cap costs
  two write units per slow turn (the item stays under 1 KB: ``MAX_SLOW_TURNS``) and
  nothing for a fast one.
- An entry carries the latest its turn can end (the invocation's time left): a container
  that Lambda kills mid-turn leaves an entry that stops counting at that time, and the
  next admission that sees it removes it (``SlowTurnsExpired``).

The cap binds from a turn's first second on: turns admitted while the workspace was under
it may all turn slow, so a burst can briefly hold a few more than ``max_turns``.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from convo_memory.adapters.dynamo.table import DynamoTable, Item, number_value, string_value
from convo_memory.domain.errors import RateLimited, StoreRejected, StoreUnavailable
from convo_memory.ports import MetricsPort

logger = logging.getLogger(__name__)

# The stack parameter's ceiling: the item (id, tat, expiresAt and ~18 bytes per entry)
# stays below 1 KB, one write unit, with this many slow turns and a burst beyond them.
MAX_SLOW_TURNS = 32
# The condition the rate limit's admission adds (``:slowCap`` = the cap).
ADMISSION_CONDITION = "(attribute_not_exists(slow) OR size(slow) < :slowCap)"
# How long a refusal stands: its Retry-After, and how long this container refuses the
# workspace's turns without asking again (another container's slow turn may end any
# moment, so no longer).
RETRY_AFTER_SECONDS = 1
# An entry outlives its turn's time left by this much (clocks of containers differ).
EXPIRY_SLACK_SECONDS = 5
MAX_REMEMBERED = 10_000

Cancel = Callable[[], None]
# ``start_timer(delay, callback)`` runs ``callback`` once after ``delay`` seconds, on a
# thread of its own, unless the returned function is called first.
StartTimer = Callable[[float, Callable[[], None]], Cancel]


def thread_timer(delay: float, callback: Callable[[], None]) -> Cancel:
    """``threading.Timer`` as a ``StartTimer``: a daemon thread that waits ``delay``."""
    timer = threading.Timer(delay, callback)
    timer.daemon = True
    timer.start()
    return timer.cancel


@dataclass(frozen=True)
class SlowTurnCap:
    """At most ``max_turns`` turns slower than ``after_seconds`` in flight per
    workspace; a turn whose time left is unknown counts for ``lifetime_seconds`` at
    most (the longest any turn function runs)."""

    max_turns: int
    lifetime_seconds: float
    after_seconds: float = 1.0


def entry_expiry(entry: str) -> int:
    """The epoch second after which ``entry`` no longer counts (0 when unreadable)."""
    head, _, _ = entry.partition(".")
    return int(head) if head.isdigit() else 0


def slow_entries(item: Mapping[str, Any] | None) -> list[str]:
    """The entries of the item's slow-turn set."""
    if not item or "slow" not in item:
        return []
    return list(item["slow"].get("SS", []))


class SlowTurns:
    """The slow-turn set of each workspace's limiter item: the admission check, the
    refusal, and each turn's entry while it is slow."""

    def __init__(
        self,
        table: DynamoTable,
        cap: SlowTurnCap,
        metrics: MetricsPort,
        clock: Callable[[], float],
        start_timer: StartTimer = thread_timer,
        *,
        item_expiry_seconds: float,
        sets_item_expiry: bool,
    ) -> None:
        self._table = table
        self._cap = cap
        self._metrics = metrics
        self._clock = clock
        self._start_timer = start_timer
        # The limiter item outlives every turn: a turn's entry never outlasts its item.
        self._item_expiry_seconds = item_expiry_seconds
        # Without a rate limit nothing else writes the item's expiresAt.
        self._sets_item_expiry = sets_item_expiry
        self._full_until: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def cap(self) -> int:
        return self._cap.max_turns

    # -- admission ------------------------------------------------------------------------

    def condition_values(self) -> dict[str, dict[str, str]]:
        """The values ``ADMISSION_CONDITION`` needs."""
        return {":slowCap": number_value(self._cap.max_turns)}

    def refuse_if_known_full(self, workspace_id: str) -> None:
        """Refuse without a request while this container's last refusal stands."""
        with self._lock:
            until = self._full_until.get(workspace_id)
        if until is not None and self._clock() < until:
            self._refuse()

    def settle(self, workspace_id: str, item: Item | None) -> None:
        """Given the item as admission saw it: refuse when the workspace has its cap of
        slow turns in flight; remove the entries that expired (a killed turn's)."""
        now = self._clock()
        entries = slow_entries(item)
        expired = [e for e in entries if entry_expiry(e) < now]
        if expired:
            self._sweep(workspace_id, expired)
        if len(entries) - len(expired) >= self._cap.max_turns:
            with self._lock:
                if len(self._full_until) >= MAX_REMEMBERED:
                    self._full_until.clear()
                self._full_until[workspace_id] = now + RETRY_AFTER_SECONDS
            self._refuse()

    def admit_alone(self, workspace_id: str) -> None:
        """Admission without a rate limit: one eventually consistent read of the set."""
        self.refuse_if_known_full(workspace_id)
        try:
            item = self._table.get({"id": string_value(workspace_id)}, consistent=False)
        except (StoreUnavailable, StoreRejected) as exc:
            logger.warning("turn limiter unavailable, admitting the turn: %s", exc)
            self._metrics.count("TurnLimiterUnavailable")
            return
        self.settle(workspace_id, item)

    def _refuse(self) -> None:
        self._metrics.count("TurnsOverSlowCap")
        cap = self._cap.max_turns
        raise RateLimited(
            f"this workspace has {cap} slow turn{'s' * (cap != 1)} in flight, its cap; "
            f"retry after {RETRY_AFTER_SECONDS} second",
            retry_after=RETRY_AFTER_SECONDS,
        )

    def _sweep(self, workspace_id: str, expired: list[str]) -> None:
        try:
            self._table.call(
                "update_item",
                Key={"id": string_value(workspace_id)},
                UpdateExpression="DELETE slow :expired",
                ExpressionAttributeValues={":expired": {"SS": expired}},
            )
        except (StoreUnavailable, StoreRejected) as exc:
            logger.warning("expired slow turns not removed: %s", exc)
            return
        self._metrics.count("SlowTurnsExpired", len(expired))

    def in_flight(self, workspace_id: str) -> dict[str, float]:
        """The workspace's slow turns now (a consistent read), each with the epoch
        second it stops counting."""
        item = self._table.get({"id": string_value(workspace_id)})
        now = self._clock()
        return {
            entry: float(entry_expiry(entry))
            for entry in slow_entries(item)
            if entry_expiry(entry) >= now
        }

    # -- a turn ---------------------------------------------------------------------------

    @contextmanager
    def watch(self, workspace_id: str, seconds_left: float | None = None) -> Iterator[None]:
        """Count the turn run inside this block as slow once it has run for a second,
        until it ends (``seconds_left``: the most it may still run)."""
        lifetime = self._cap.lifetime_seconds if seconds_left is None else seconds_left
        expires = int(self._clock() + lifetime) + EXPIRY_SLACK_SECONDS
        entry = f"{expires}.{secrets.token_hex(3)}"
        state = {"ended": False, "registered": False, "failed": False}
        lock = threading.Lock()

        def register() -> None:
            with lock:
                if state["ended"]:
                    return
                try:
                    self._register(workspace_id, entry)
                    state["registered"] = True
                except (StoreUnavailable, StoreRejected) as exc:
                    logger.warning("slow turn not counted: %s", exc)
                    state["failed"] = True

        cancel = self._start_timer(self._cap.after_seconds, register)
        try:
            yield
        finally:
            cancel()
            with lock:
                state["ended"] = True
            self._end(workspace_id, entry, registered=state["registered"], failed=state["failed"])

    def _end(self, workspace_id: str, entry: str, *, registered: bool, failed: bool) -> None:
        # Counted here, on the turn's thread: metrics are kept per invocation thread.
        if failed:
            self._metrics.count("TurnLimiterUnavailable")
        if not registered:
            return
        self._metrics.count("SlowTurns")
        with self._lock:
            self._full_until.pop(workspace_id, None)  # a slot is free again
        try:
            self._table.conditional(
                "update_item",
                Key={"id": string_value(workspace_id)},
                UpdateExpression="DELETE slow :entry",
                ConditionExpression="attribute_exists(id)",
                ExpressionAttributeValues={":entry": {"SS": [entry]}},
            )
        except (StoreUnavailable, StoreRejected) as exc:
            # The entry stops counting at its expiry; the next admission removes it.
            logger.warning("slow turn not removed: %s", exc)
            self._metrics.count("TurnLimiterUnavailable")

    def _register(self, workspace_id: str, entry: str) -> None:
        expiry = "expiresAt = :itemExpires"
        if not self._sets_item_expiry:
            expiry = "expiresAt = if_not_exists(expiresAt, :itemExpires)"
        self._table.call(
            "update_item",
            Key={"id": string_value(workspace_id)},
            UpdateExpression=f"ADD slow :entry SET {expiry}",
            ExpressionAttributeValues={
                ":entry": {"SS": [entry]},
                ":itemExpires": number_value(int(self._clock() + self._item_expiry_seconds)),
            },
        )


class SlowTurnLimiter:
    """The turn limiter when the rate limit is off and the slow-turn cap is on."""

    def __init__(self, slow: SlowTurns) -> None:
        self._slow = slow

    def admit(self, workspace_id: str) -> None:
        """Refuse the turn while the workspace has its cap of slow turns in flight."""
        self._slow.admit_alone(workspace_id)

    def slow_turn(
        self, workspace_id: str, seconds_left: float | None = None
    ) -> AbstractContextManager[None]:
        """The turn run inside this block counts as slow after its first second."""
        return self._slow.watch(workspace_id, seconds_left)

    def turns_in_flight(self, workspace_id: str) -> Mapping[str, float] | None:
        """The workspace's slow turns in flight now."""
        return self._slow.in_flight(workspace_id)
