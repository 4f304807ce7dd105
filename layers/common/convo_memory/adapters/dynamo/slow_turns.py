"""Slow turns in flight, capped per workspace, on the turn limiter's items.

A turn that has run for more than ``after_seconds`` (one second) is *slow*: a tool that
stalls, a slow model. One workspace may have at most ``max_turns`` of them in flight, so
that it cannot hold the serving functions' concurrency that other workspaces need.

The set lives on the workspace's items of ``TurnLimitsTable`` (``limiter_layout.py``:
one item for caps under 16, else 8 to 32 entries an item, the shards' caps adding up to
the workspace's), as the String Set ``slow``: one entry ``"<expires, epoch
seconds>.<6 hex>"`` per slow turn.

- **At its first second** a turn still running registers: ``ADD`` its entry under
  ``size(slow) < :slowCap`` (one conditional write), on one shard and then, when that
  one is full, on another. When every shard it tried is full, the turn is given up:
  ``429 rate_limited`` at once, and nothing of it is recorded
  (``slow_turn_watch.py``). So at no moment does a workspace hold more than its cap of
  turns past their first second, however many start together.
- **Admission** reads the set for free while there is one shard: the rate limit's
  conditional ``UpdateItem`` adds ``size(slow) < :slowCap`` to its condition
  (``ADMISSION_CONDITION``), so a workspace at its cap is refused before anything runs.
  Without a rate limit it is one eventually consistent ``GetItem`` (half a read unit).
  An environment that saw the cap reached refuses the workspace for a second without
  asking.
- **At its end** a registered turn removes its entry (``DELETE``: one write). A fast
  turn writes nothing; a slow one two write units (the item stays under 1 KB).
- An entry carries the latest its turn can end (the invocation's time left): an entry
  that Lambda's killing of an environment left behind stops counting then, and the next
  write that finds it removes it (``SlowTurnsExpired``).

Throttling of a set's item is a flood of slow turns: the registration is refused. An
unavailable table lets the turn run uncounted (``TurnLimiterUnavailable``).
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from convo_memory.adapters.dynamo.limiter_layout import LimiterLayout, item_key
from convo_memory.adapters.dynamo.slow_turn_watch import FirstSecond, run_watched, wait_first_second
from convo_memory.adapters.dynamo.table import DynamoTable, Item, number_value
from convo_memory.domain.errors import RateLimited, StoreRejected, StoreThrottled, StoreUnavailable
from convo_memory.ports import MetricsPort

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
# The condition the rate limit's admission adds (``:slowCap`` = the shard's cap).
ADMISSION_CONDITION = "(attribute_not_exists(slow) OR size(slow) < :slowCap)"
REGISTRATION_CONDITION = "attribute_not_exists(slow) OR size(slow) < :slowCap"
# How long a refusal stands: its Retry-After, and how long this environment refuses the
# workspace's turns without asking again (another environment's slow turn may end any
# moment, so no longer).
RETRY_AFTER_SECONDS = 1
# An entry outlives its turn's time left by this much (clocks of environments differ).
EXPIRY_SLACK_SECONDS = 5
MAX_REMEMBERED = 10_000
BATCH_KEYS = 100


@dataclass(frozen=True)
class SlowTurnCap:
    """At most ``max_turns`` turns slower than ``after_seconds`` in flight per
    workspace; a turn whose time left is unknown counts for ``lifetime_seconds`` at
    most (the longest any turn function runs)."""

    max_turns: int
    lifetime_seconds: float
    after_seconds: float = 1.0


@dataclass(frozen=True)
class Registration:
    """A slow turn's place: its ``entry`` on shard ``shard`` (None: not counted, the
    table was unavailable), or ``refused`` (every shard it tried was full)."""

    entry: str
    shard: int | None
    refused: bool = False


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
    """The slow-turn sets of each workspace's limiter items: the admission check, the
    registration at a turn's first second, its removal, and the sets as they are."""

    def __init__(
        self,
        table: DynamoTable,
        cap: SlowTurnCap,
        metrics: MetricsPort,
        clock: Callable[[], float],
        *,
        item_expiry_seconds: float,
        rate: float = 0,
        rng: random.Random | None = None,
        first_second: FirstSecond = wait_first_second,
    ) -> None:
        self._table = table
        self._cap = cap
        self._metrics = metrics
        self._clock = clock
        # ``rate``: the workspace's turn rate (0: none), which sizes the shards.
        self._layout = LimiterLayout(rate, 1, cap.max_turns)
        # The items outlive every turn: a turn's entry never outlasts its item (and the
        # rate limit's writes set the same expiry, so this one never shortens theirs).
        self._item_expiry_seconds = item_expiry_seconds
        self._rng = rng or random.Random()
        # How a turn's first second is waited for (tests decide when it has passed).
        self._first_second = first_second
        self._full_until: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def cap(self) -> int:
        return self._cap.max_turns

    @property
    def after_seconds(self) -> float:
        """How long a turn runs before it counts as slow."""
        return self._cap.after_seconds

    @property
    def shards(self) -> int:
        return self._layout.slow_shards

    def run(self, workspace_id: str, turn: Callable[[], _T], seconds_left: float | None) -> _T:
        """Run ``turn``: past its first second it registers as slow, or is given up."""
        return run_watched(self, workspace_id, turn, seconds_left, self._first_second)

    # -- admission ------------------------------------------------------------------------

    def condition_values(self, shard: int) -> dict[str, dict[str, str]]:
        """The values ``ADMISSION_CONDITION`` needs on ``shard``."""
        return {":slowCap": number_value(self._layout.slow_cap(shard))}

    def refuse_if_known_full(self, workspace_id: str) -> None:
        """Refuse without a request while this environment's last refusal stands."""
        with self._lock:
            until = self._full_until.get(workspace_id)
        if until is not None and self._clock() < until:
            self.refuse(workspace_id, remember=False)

    def settle(self, workspace_id: str, item: Item | None, shard: int = 0) -> None:
        """Given a shard's item as a write saw it: refuse when its set is at its cap;
        remove the entries that expired (a killed turn's)."""
        now = self._clock()
        entries = slow_entries(item)
        expired = [e for e in entries if entry_expiry(e) < now]
        if expired:
            self._sweep(workspace_id, shard, expired)
        if len(entries) - len(expired) >= self._layout.slow_cap(shard):
            self.refuse(workspace_id)

    def admit_alone(self, workspace_id: str) -> None:
        """Admission without a rate limit: one eventually consistent read of the set
        (with several shards, none: the first second decides)."""
        self.refuse_if_known_full(workspace_id)
        if self.shards != 1:
            return
        try:
            item = self._table.get(item_key(workspace_id, 0), consistent=False)
        except (StoreUnavailable, StoreRejected) as exc:
            logger.warning("turn limiter unavailable, admitting the turn: %s", exc)
            self._metrics.count("TurnLimiterUnavailable")
            return
        self.settle(workspace_id, item)

    def refuse(self, workspace_id: str, *, remember: bool = True) -> None:
        """Raise the refusal of a workspace at its cap (and refuse it here for a second)."""
        if remember:
            with self._lock:
                if len(self._full_until) >= MAX_REMEMBERED:
                    self._full_until.clear()
                self._full_until[workspace_id] = self._clock() + RETRY_AFTER_SECONDS
        self._metrics.count("TurnsOverSlowCap")
        cap = self._cap.max_turns
        raise RateLimited(
            f"this workspace has {cap} slow turn{'s' * (cap != 1)} in flight, its cap; "
            f"retry after {RETRY_AFTER_SECONDS} second",
            retry_after=RETRY_AFTER_SECONDS,
        )

    # -- a turn at its first second, and at its end ---------------------------------------

    def new_entry(self, seconds_left: float | None) -> str:
        """A turn's entry: it stops counting when the turn must have ended."""
        lifetime = self._cap.lifetime_seconds if seconds_left is None else seconds_left
        expires = int(self._clock() + lifetime) + EXPIRY_SLACK_SECONDS
        return f"{expires}.{secrets.token_hex(3)}"

    def register(self, workspace_id: str, entry: str) -> Registration:
        """Take a place among the workspace's slow turns, on one of two shards: refused
        when both are full (or throttled: a flood of slow turns); uncounted when the
        table is unavailable."""
        for shard in self._layout.slow_shard_order(self._rng):
            try:
                if self._register_on(workspace_id, shard, entry):
                    self._metrics.count("SlowTurns")
                    return Registration(entry, shard)
            except StoreThrottled as exc:
                logger.warning("slow-turn set throttled, refusing the turn: %s", exc)
                self._metrics.count("TurnLimiterThrottled")
                break
            except (StoreUnavailable, StoreRejected) as exc:
                logger.warning("slow turn not counted: %s", exc)
                self._metrics.count("TurnLimiterUnavailable")
                return Registration(entry, None)
        return Registration(entry, None, refused=True)

    def _register_on(self, workspace_id: str, shard: int, entry: str) -> bool:
        """One shard: a conditional ``ADD``; when the set is full only of expired
        entries, they are removed and the ``ADD`` tried once more."""
        for _ in range(2):
            added, item = self._table.conditional(
                "update_item",
                Key=item_key(workspace_id, shard),
                UpdateExpression="ADD slow :entry SET expiresAt = :itemExpires",
                ConditionExpression=REGISTRATION_CONDITION,
                ExpressionAttributeValues={
                    ":entry": {"SS": [entry]},
                    ":slowCap": number_value(self._layout.slow_cap(shard)),
                    ":itemExpires": number_value(int(self._clock() + self._item_expiry_seconds)),
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            if added:
                return True
            now = self._clock()
            expired = [e for e in slow_entries(item) if entry_expiry(e) < now]
            if not expired:
                return False
            self._sweep(workspace_id, shard, expired)
        return False

    def release(self, workspace_id: str, registration: Registration) -> None:
        """Remove a registered turn's entry at its end (it stops counting at its expiry
        anyway, when this write fails)."""
        if registration.shard is None:
            return
        with self._lock:
            self._full_until.pop(workspace_id, None)  # a place is free again
        try:
            self._table.conditional(
                "update_item",
                Key=item_key(workspace_id, registration.shard),
                UpdateExpression="DELETE slow :entry",
                ConditionExpression="attribute_exists(id)",
                ExpressionAttributeValues={":entry": {"SS": [registration.entry]}},
            )
        except (StoreUnavailable, StoreRejected) as exc:
            logger.warning("slow turn not removed: %s", exc)
            self._metrics.count("TurnLimiterUnavailable")

    def _sweep(self, workspace_id: str, shard: int, expired: list[str]) -> None:
        try:
            self._table.call(
                "update_item",
                Key=item_key(workspace_id, shard),
                UpdateExpression="DELETE slow :expired",
                ExpressionAttributeValues={":expired": {"SS": expired}},
            )
        except (StoreUnavailable, StoreRejected) as exc:
            logger.warning("expired slow turns not removed: %s", exc)
            return
        self._metrics.count("SlowTurnsExpired", len(expired))

    # -- what an erasure waits for ---------------------------------------------------------

    def in_flight(self, workspace_id: str) -> dict[str, float]:
        """The workspace's slow turns now (consistent reads of every shard), each with
        the epoch second it stops counting."""
        keys = [item_key(workspace_id, shard) for shard in range(self.shards)]
        items: list[Item] = []
        for begin in range(0, len(keys), BATCH_KEYS):
            items += self._table.batch_get(keys[begin : begin + BATCH_KEYS])
        now = self._clock()
        return {
            entry: float(entry_expiry(entry))
            for item in items
            for entry in slow_entries(item)
            if entry_expiry(entry) >= now
        }


class SlowTurnLimiter:
    """The turn limiter when the rate limit is off and the slow-turn cap is on."""

    def __init__(self, slow: SlowTurns) -> None:
        self._slow = slow

    def admit(self, workspace_id: str) -> None:
        """Refuse the turn while the workspace has its cap of slow turns in flight."""
        self._slow.admit_alone(workspace_id)

    def run(self, workspace_id: str, turn: Callable[[], _T], seconds_left: float | None) -> _T:
        """Run ``turn``: past its first second it registers as slow, or is given up."""
        return self._slow.run(workspace_id, turn, seconds_left)

    def turns_in_flight(self, workspace_id: str) -> Mapping[str, float] | None:
        """The workspace's slow turns in flight now."""
        return self._slow.in_flight(workspace_id)
