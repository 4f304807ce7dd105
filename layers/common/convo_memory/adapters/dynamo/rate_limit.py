"""Per-workspace turn rate limit on DynamoDB: a rate with room for bursts (GCRA), spread
over shards so that no item is written by every turn (``limiter_layout.py``).

The generic cell rate algorithm keeps one number per shard, the *theoretical arrival
time* (``tat``): when the shard's bucket will be empty again if nothing more comes. A
turn at ``now`` is admitted when ``tat <= now + (burst - 1) * interval`` and moves it to
``max(tat, now) + interval`` (the shard's ``interval`` = shards / rate). So ``burst``
turns may start at the same moment, then ``rate`` a second; a quiet workspace earns its
burst back at the rate. A turn picks its shard at random; with one shard (the defaults)
this is exactly the workspace's limit.

Cost: one conditional ``UpdateItem`` on the shard's item per admitted turn, at most one
write unit (the item is far below 1 KB). DynamoDB's update expressions have no ``max``,
so the write takes one of two forms:

- busy: ``tat = tat + interval`` under ``tat BETWEEN now - credit AND now + tolerance``;
- idle: ``tat = now + interval`` under ``tat <= now`` (or no ``tat`` yet).

(``credit``, a tenth of a second or one interval, lets a shard that went idle a moment
ago take the busy form: it gives back at most that much unused rate.) The form is
chosen from what this environment last saw of the shard, else from whether it saw the
workspace busy lately. A failed condition returns the item
(``ReturnValuesOnConditionCheckFailure``): over the limit the turn is refused (with the
exact ``Retry-After``), else the other form is written, so every admitted turn is
counted, whichever environment serves it (Lambda runs thousands of them, each seeing a
turn now and then: a limiter that trusted each environment's memory would count almost
nothing). A right guess is one write; a wrong one two (``TurnLimiterSecondWrites``).
A workspace this environment already knows to be over its limit is refused without any
request, so a flood costs little once each environment has seen it.

The counters live in a table of their own (``TurnLimitsTable``), and each item expires
by its TTL a minute after its bucket is full again. Nothing is released after a turn,
so a turn that Lambda kills leaks nothing.

The slow turns in flight (``slow_turns.py``) live on the same items: with one slow set,
the admission's condition also asks for room among them, so a fast turn still costs one
write.

Failures: when DynamoDB is unavailable (5xx, timeouts, no connection) the limiter fails
open, since refusing every tenant's turns for the limiter's sake would be the larger
outage (``TurnLimiterUnavailable``). When it throttles the shard's item, the workspace
sends more than the item can take, which only a flood does: the turn is refused
(``TurnLimiterThrottled``, ``429`` with ``Retry-After: 1``).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from convo_memory.adapters.dynamo.limiter_layout import LimiterLayout, item_id, item_key
from convo_memory.adapters.dynamo.limiter_memory import LimiterMemory
from convo_memory.adapters.dynamo.slow_turns import ADMISSION_CONDITION, SlowTurns
from convo_memory.adapters.dynamo.table import DynamoTable, Item, number_value
from convo_memory.domain.errors import (
    RateLimited,
    StoreRejected,
    StoreThrottled,
    StoreUnavailable,
)
from convo_memory.ports import MetricsPort

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
MICROS = 1_000_000
# The item outlives its bucket's last backlog by this long (then TTL deletes it, free).
COUNTER_TTL_SECONDS = 60
# A shard that went idle less than this share of its tolerance ago may still take the
# busy form: it gives back at most that share of the burst, so a flood that begins then
# gets less than 10% more than an exact limiter would give it.
CREDIT_SHARE = 10
# Conditional writes one admission makes at most (a wrong guess, then a race).
MAX_ATTEMPTS = 3
THROTTLED_RETRY_AFTER_SECONDS = 1


def counter_key(workspace_id: str, shard: int = 0) -> dict[str, dict[str, str]]:
    """The item that holds ``workspace_id``'s counter of ``shard`` (the only one of a
    workspace whose limit needs one shard)."""
    return item_key(workspace_id, shard)


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

    @property
    def credit_us(self) -> int:
        """How long ago a shard may have gone idle for the busy form to count a turn."""
        return max(self.interval_us, self.tolerance_us // CREDIT_SHARE)


@dataclass(frozen=True)
class _Write:
    """One admission attempt: the shard, whether it takes the busy form, and now."""

    shard: int
    busy: bool
    now: int


class WorkspaceRateLimiter:
    """Admits a workspace's turns at ``limit.rate`` a second with bursts of
    ``limit.burst``, counted in the shards of ``limiter_layout``; with ``slow``, only
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
        rng: random.Random | None = None,
    ) -> None:
        self._table = table
        self._layout = LimiterLayout(limit.rate, limit.burst, slow.cap if slow else 0)
        if slow is not None and slow.shards != self._layout.slow_shards:
            raise ValueError("the slow-turn sets were laid out for another rate")
        self._limit = limit
        self._shard = RateLimit(self._layout.shard_rate, self._layout.shard_burst)
        self._metrics = metrics
        self._clock = clock
        self._slow = slow
        # The item lives at least this long after a turn (the longest a turn runs, when
        # it holds slow turns).
        self._min_item_seconds = min_item_seconds
        self._rng = rng or random.Random()
        self._memory = LimiterMemory(self._shard.credit_us)

    @property
    def layout(self) -> LimiterLayout:
        return self._layout

    def run(self, workspace_id: str, turn: Callable[[], _T], seconds_left: float | None) -> _T:
        """Run an admitted turn: past its first second it counts among the workspace's
        slow turns, or is refused there when they are at their cap."""
        if self._slow is None:
            return turn()
        return self._slow.run(workspace_id, turn, seconds_left)

    def turns_in_flight(self, workspace_id: str) -> Mapping[str, float] | None:
        """The workspace's slow turns in flight now (None: not tracked, the cap is off)."""
        return None if self._slow is None else self._slow.in_flight(workspace_id)

    def admit(self, workspace_id: str) -> None:
        """Count the turn, or raise ``RateLimited`` (with ``Retry-After``) when the
        workspace is over its rate and burst (or its shard's item is throttled: a flood).
        Fails open when DynamoDB is unavailable (``TurnLimiterUnavailable``)."""
        now = round(self._clock() * MICROS)
        refused_until = self._memory.refused_until(workspace_id)
        if refused_until > now:
            self._refuse(refused_until, now)  # tat only grows: no need to ask
        if self._slow is not None:
            self._slow.refuse_if_known_full(workspace_id)
        shard = self._layout.rate_shard(self._rng)
        item = item_id(workspace_id, shard)
        seen = self._memory.known_tat(item)
        if seen is not None and seen > now + self._shard.tolerance_us:
            self._note_refusal(workspace_id, seen, now)
        busy = self._memory.guess_busy(workspace_id, item, now)
        self._admit(workspace_id, _Write(shard, busy, now))

    def _admit(self, workspace_id: str, write: _Write) -> None:
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                self._metrics.count("TurnLimiterSecondWrites")
            try:
                admitted, item = self._write(workspace_id, write)
            except StoreThrottled as exc:
                logger.warning("turn limiter throttled, refusing the turn: %s", exc)
                self._metrics.count("TurnLimiterThrottled")
                raise RateLimited(
                    "this workspace is sending more turns than its limit takes; retry after "
                    f"{THROTTLED_RETRY_AFTER_SECONDS} second",
                    retry_after=THROTTLED_RETRY_AFTER_SECONDS,
                ) from None
            except (StoreUnavailable, StoreRejected) as exc:
                logger.warning("turn limiter unavailable, admitting the turn: %s", exc)
                self._metrics.count("TurnLimiterUnavailable")
                return
            tat = _tat_of(item)
            self._remember(workspace_id, write, tat, admitted, first=not attempt)
            if admitted:
                if self._slow is not None and self._checks_slow(write.shard):
                    self._slow.settle(workspace_id, item)  # room was there: only sweeps
                return
            if tat is not None and tat > write.now + self._shard.tolerance_us:
                self._note_refusal(workspace_id, tat, write.now)
            if self._fits(write, tat) and self._slow is not None:
                self._slow.settle(workspace_id, item)  # the slow set refused: 429, or swept
            busy = tat is not None and tat >= write.now - self._shard.credit_us
            write = _Write(write.shard, busy, write.now)
        # Raced more than twice on one shard: the turn is admitted uncounted.
        self._metrics.count("TurnLimiterRaces")

    def _fits(self, write: _Write, tat: int | None) -> bool:
        """Whether the rate's own condition held (so the slow set's failed)."""
        if write.busy:
            return tat is not None and tat >= write.now - self._shard.credit_us
        return tat is None or tat <= write.now

    def _checks_slow(self, shard: int) -> bool:
        return self._layout.admission_checks_slow(shard)

    def _write(self, workspace_id: str, write: _Write) -> tuple[bool, Item | None]:
        limit, now = self._shard, write.now
        drained = math.ceil((limit.tolerance_us + limit.interval_us) / MICROS)
        expires = now // MICROS + max(drained, math.ceil(self._min_item_seconds))
        values = {
            ":expires": number_value(expires + COUNTER_TTL_SECONDS),
            ":step": number_value(limit.interval_us),
            ":allowed": number_value(now + limit.tolerance_us),
        }
        if write.busy:
            update = "SET tat = tat + :step, expiresAt = :expires"
            condition = "tat BETWEEN :floor AND :allowed"
            values[":floor"] = number_value(now - limit.credit_us)
        else:
            update = "SET tat = :next, expiresAt = :expires"
            condition = "attribute_not_exists(tat) OR tat <= :now"
            values[":next"] = number_value(now + limit.interval_us)
            values[":now"] = number_value(now)
            del values[":allowed"], values[":step"]
        if self._slow is not None and self._checks_slow(write.shard):
            condition = f"({condition}) AND {ADMISSION_CONDITION}"
            values.update(self._slow.condition_values(0))
        return self._table.conditional(
            "update_item",
            Key=item_key(workspace_id, write.shard),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    def _remember(
        self, workspace_id: str, write: _Write, tat: int | None, admitted: bool, *, first: bool
    ) -> None:
        """Tell the memory what the write found: a failed one returned the shard as it
        was; an admitted busy one added one interval to it; an admitted idle one found it
        idle (by its condition), how idle unknown. A second write found what the first
        one told: only its ``tat`` is news."""
        item = item_id(workspace_id, write.shard)
        before = tat - self._shard.interval_us if admitted and tat is not None else tat
        known = not (admitted and not write.busy)
        self._memory.observe(
            workspace_id, item, write.now, before, tat, known_before=known, learn=first
        )

    def _note_refusal(self, workspace_id: str, tat_us: int, now_us: int) -> None:
        """Refuse: the shard is over its limit until ``tat - tolerance``; until then this
        environment refuses the workspace without asking (its other shards take the same
        flood)."""
        until = tat_us - self._shard.tolerance_us
        self._memory.note_refusal(workspace_id, until)
        self._refuse(until, now_us)

    def _refuse(self, until_us: int, now_us: int) -> None:
        self._metrics.count("TurnsRateLimited")
        wait = max(1, math.ceil((until_us - now_us) / MICROS))
        raise RateLimited(
            f"this workspace is over its turn rate ({self._limit.rate:g} a second, "
            f"{self._limit.burst} at once); retry after {wait} second{'s' * (wait != 1)}",
            retry_after=wait,
        )


def _tat_of(item: Item | None) -> int | None:
    if not item or "tat" not in item:
        return None
    return int(item["tat"]["N"])
