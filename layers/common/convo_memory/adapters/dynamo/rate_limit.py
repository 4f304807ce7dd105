"""Per-workspace turn rate limit on DynamoDB: a rate with room for bursts (GCRA).

The generic cell rate algorithm keeps one number per workspace, the *theoretical arrival
time* (``tat``): when the workspace's bucket will be empty again if nothing more comes.
A turn at ``now`` is admitted when ``tat <= now + (burst - 1) * interval`` and moves it
to ``max(tat, now) + interval`` (``interval`` = 1 / rate). So ``burst`` turns may start
at the same moment, then ``rate`` a second; a quiet workspace earns its burst back at
the rate.

Cost: one conditional ``UpdateItem`` per turn, at most one write unit (the item is far
below 1 KB), never a read. DynamoDB's update expressions have no ``max``, so the write
takes one of two forms, chosen from what this container last saw of the item (``tat``
only grows, so "busy" is never a wrong guess):

- busy (the last ``tat`` seen is not in the past): ``tat = tat + interval`` under
  ``tat <= now + tolerance``;
- idle (never seen, or in the past): ``tat = now + interval`` under ``tat <= now``.

A failed condition returns the current item (``ReturnValuesOnConditionCheckFailure``),
which settles the turn without a second write: over the limit it is refused (with the
exact ``Retry-After``); under it (another container moved the item since) it is
admitted and its interval is added to this container's next write for that workspace
(``debt``), so the count stays right across containers. A workspace this container
already knows to be over its limit is refused without any request at all, so a flood
costs nothing once each container has seen it.

The counters live in a table of their own (``TurnLimitsTable``), one item per
workspace, and expire by its TTL a minute after the bucket is full again. Nothing is
released after a turn, so a turn that Lambda kills leaks nothing.

The same item holds the workspace's slow turns in flight (``slow_turns.py``): with that
cap on, the admission's condition also asks for room among them, so a fast turn still
costs one write, and the item outlives the longest turn it admitted.

Ceiling: DynamoDB writes one item at most about 1,000 times a second (its per-partition
limit). Above that, its writes are throttled; the limiter then fails open (see
``admit``), and the HttpApi's throttle and the serving functions' reserved concurrency
bound what gets through (docs/architecture.md, "The turn rate limit").
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from convo_memory.adapters.dynamo.slow_turns import ADMISSION_CONDITION, SlowTurns
from convo_memory.adapters.dynamo.table import DynamoTable, Item, number_value, string_value
from convo_memory.domain.errors import RateLimited, StoreRejected, StoreUnavailable
from convo_memory.ports import MetricsPort

logger = logging.getLogger(__name__)

MICROS = 1_000_000
# The item outlives its bucket's last backlog by this long (then TTL deletes it, free).
COUNTER_TTL_SECONDS = 60
# Workspaces whose last counter this container remembers (then it starts over).
MAX_REMEMBERED_WORKSPACES = 10_000


def counter_key(workspace_id: str) -> dict[str, dict[str, str]]:
    """The one item that holds ``workspace_id``'s theoretical arrival time."""
    return {"id": string_value(workspace_id)}


@dataclass(frozen=True)
class RateLimit:
    """``rate`` turns a second, ``burst`` at once (``burst >= 1``)."""

    rate: float
    burst: int

    @property
    def interval_us(self) -> int:
        """Microseconds one turn adds to the backlog."""
        return max(1, round(MICROS / self.rate))

    @property
    def tolerance_us(self) -> int:
        """How far ahead of now ``tat`` may be for a turn to be admitted."""
        return (self.burst - 1) * self.interval_us


@dataclass
class _Seen:
    tat_us: int  # the item's tat as last seen, plus any debt
    debt: int = 0  # admitted turns not yet written (a lost race)


class WorkspaceRateLimiter:
    """Admits a workspace's turns at ``limit.rate`` a second with bursts of
    ``limit.burst``, counted in one DynamoDB item per workspace; with ``slow``, only
    while the workspace has room among its slow turns in flight too."""

    def __init__(
        self,
        table: DynamoTable,
        limit: RateLimit,
        metrics: MetricsPort,
        clock: Callable[[], float],
        slow: SlowTurns | None = None,
        *,
        min_item_seconds: float = 0,
    ) -> None:
        self._table = table
        self._limit = limit
        self._metrics = metrics
        self._clock = clock
        self._slow = slow
        # The item lives at least this long after a turn (the longest a turn runs, when
        # it holds slow turns).
        self._min_item_seconds = min_item_seconds
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def slow_turn(
        self, workspace_id: str, seconds_left: float | None = None
    ) -> AbstractContextManager[None]:
        """The turn run inside this block counts as slow after its first second."""
        if self._slow is None:
            return nullcontext()
        return self._slow.watch(workspace_id, seconds_left)

    def turns_in_flight(self, workspace_id: str) -> Mapping[str, float] | None:
        """The workspace's slow turns in flight now (None: not tracked, the cap is off)."""
        return None if self._slow is None else self._slow.in_flight(workspace_id)

    def admit(self, workspace_id: str) -> None:
        """Count the turn, or raise ``RateLimited`` (with ``Retry-After``) when the
        workspace is over its rate and burst.

        Fails open: when the counter cannot be written (throttling, an outage) the turn
        goes ahead and ``TurnLimiterUnavailable`` is counted, because refusing every
        tenant's turns for the limiter's sake would be the larger outage (and a hot
        partition holds other workspaces' counters too)."""
        limit = self._limit
        now = round(self._clock() * MICROS)
        allowed_until = now + limit.tolerance_us
        with self._lock:
            seen = self._seen.get(workspace_id)
            known_tat, debt = (seen.tat_us, seen.debt) if seen is not None else (None, 0)
        if known_tat is not None and known_tat > allowed_until:
            self._refuse(known_tat, now)  # tat only grows: no need to ask
        if self._slow is not None:
            self._slow.refuse_if_known_full(workspace_id)
        busy = known_tat is not None and known_tat >= now
        if not busy:
            debt = 0  # whatever was owed has drained by now
        try:
            admitted, item = self._write(workspace_id, now, busy, debt)
        except (StoreUnavailable, StoreRejected) as exc:
            logger.warning("turn limiter unavailable, admitting the turn: %s", exc)
            self._metrics.count("TurnLimiterUnavailable")
            return
        tat = _tat_of(item)
        if admitted and tat is not None:
            self._remember(workspace_id, _Seen(tat))
            if self._slow is not None:
                self._slow.settle(workspace_id, item)  # room was there: only sweeps
            return
        if tat is not None and tat > allowed_until:
            self._remember(workspace_id, _Seen(tat, debt))
            self._refuse(tat, now)
        if self._slow is not None:
            self._slow.settle(workspace_id, item)  # refuses at the cap
        # Room, but another container wrote first (or the item expired): admit, and
        # write this turn's interval with this container's next turn of the workspace.
        self._metrics.count("TurnLimiterDeferredWrites")
        owed = debt + 1
        self._remember(workspace_id, _Seen(max(tat or 0, now) + owed * limit.interval_us, owed))

    def _write(
        self, workspace_id: str, now: int, busy: bool, debt: int
    ) -> tuple[bool, Item | None]:
        limit = self._limit
        drained = math.ceil((limit.tolerance_us + (debt + 1) * limit.interval_us) / MICROS)
        expires = now // MICROS + max(drained, math.ceil(self._min_item_seconds))
        values = {":expires": number_value(expires + COUNTER_TTL_SECONDS)}
        if busy:
            update = "SET tat = tat + :step, expiresAt = :expires"
            condition = "tat <= :allowed"
            values[":step"] = number_value((debt + 1) * limit.interval_us)
            values[":allowed"] = number_value(now + limit.tolerance_us)
        else:
            update = "SET tat = :next, expiresAt = :expires"
            condition = "attribute_not_exists(tat) OR tat <= :now"
            values[":next"] = number_value(now + limit.interval_us)
            values[":now"] = number_value(now)
        if self._slow is not None:
            condition = f"({condition}) AND {ADMISSION_CONDITION}"
            values.update(self._slow.condition_values())
        return self._table.conditional(
            "update_item",
            Key=counter_key(workspace_id),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    def _remember(self, workspace_id: str, seen: _Seen) -> None:
        with self._lock:
            if workspace_id not in self._seen and len(self._seen) >= MAX_REMEMBERED_WORKSPACES:
                self._seen.clear()
            self._seen[workspace_id] = seen

    def _refuse(self, tat_us: int, now_us: int) -> None:
        self._metrics.count("TurnsRateLimited")
        wait = max(1, math.ceil((tat_us - self._limit.tolerance_us - now_us) / MICROS))
        raise RateLimited(
            f"this workspace is over its turn rate ({self._limit.rate:g} a second, "
            f"{self._limit.burst} at once); retry after {wait} second{'s' * (wait != 1)}",
            retry_after=wait,
        )


def _tat_of(item: Item | None) -> int | None:
    if not item or "tat" not in item:
        return None
    return int(item["tat"]["N"])
