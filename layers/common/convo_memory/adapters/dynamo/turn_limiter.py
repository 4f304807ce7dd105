"""Per-workspace turn rate limit on DynamoDB: one atomic counter per workspace per second.

Why a counter per second, not a count of turns in flight: admitting a turn is one
conditional ``UpdateItem`` (``ADD`` under ``turns < limit``) and nothing has to be
released afterwards, so a turn that Lambda kills at its timeout leaks no slot. The
counters live in a table of their own (``TurnLimitsTable``) and expire by its TTL a
minute later. A workspace's concurrency is still bounded: at most ``limit`` turns start
per second and a turn lasts at most its time budget, and the serving functions' reserved
concurrency caps the whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from convo_memory.adapters.dynamo.table import DynamoTable, n, s
from convo_memory.domain.errors import RateLimited, StoreRejected, StoreUnavailable
from convo_memory.ports import MetricsPort

logger = logging.getLogger(__name__)

# Long enough for any clock skew between containers; TTL deletes it (for free) later.
COUNTER_TTL_SECONDS = 60


def counter_key(workspace_id: str, second: int) -> dict[str, dict[str, str]]:
    """The item that counts ``workspace_id``'s turns started in ``second`` (epoch)."""
    return {"id": s(f"{workspace_id}#{second}")}


class DynamoTurnLimiter:
    """At most ``turns_per_second`` turns per workspace and wall-clock second."""

    def __init__(
        self,
        table: DynamoTable,
        turns_per_second: int,
        metrics: MetricsPort,
        clock: Callable[[], float],
    ) -> None:
        self._table = table
        self._limit = turns_per_second
        self._metrics = metrics
        self._clock = clock

    def admit(self, workspace_id: str) -> None:
        """Count the turn, or raise ``RateLimited`` when the workspace's second is full.

        Fails open: when the counter cannot be written (throttling, an outage) the turn
        goes ahead and ``TurnLimiterUnavailable`` is counted, because refusing every
        tenant's turns for the limiter's sake would be the larger outage."""
        second = int(self._clock())
        try:
            admitted, _ = self._table.conditional(
                "update_item",
                Key=counter_key(workspace_id, second),
                UpdateExpression="ADD turns :one SET expiresAt = :expires",
                ConditionExpression="attribute_not_exists(turns) OR turns < :limit",
                ExpressionAttributeValues={
                    ":one": n(1),
                    ":limit": n(self._limit),
                    ":expires": n(second + COUNTER_TTL_SECONDS),
                },
            )
        except (StoreUnavailable, StoreRejected) as exc:
            logger.warning("turn limiter unavailable, admitting the turn: %s", exc)
            self._metrics.count("TurnLimiterUnavailable")
            return
        if not admitted:
            self._metrics.count("TurnsRateLimited")
            raise RateLimited(
                f"this workspace started {self._limit} turns this second, its limit; "
                "retry after 1 second"
            )
