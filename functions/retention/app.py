"""Scheduled retention run (EventBridge schedule): archives idle sessions, purges
archived ones (``RetentionService``); tool digests expire by DynamoDB TTL.

"Now" is the scheduled event's ``time`` field, never the clock: a late or re-delivered
event does exactly what it would have done on time. An event without a valid ``time``
fails the invocation rather than guess.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from convo_memory.domain.time_budget import time_left
from convo_memory.observability import job_handler, logger


class InvalidScheduleEvent(ValueError):
    """The event carries no usable ``time``: it is not the retention schedule's event."""


def scheduled_time(event: Any) -> datetime:
    """The event's ``time`` (ISO-8601 with an offset, e.g. ``2026-01-01T00:00:00Z``)."""
    raw = event.get("time") if isinstance(event, dict) else None
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidScheduleEvent(
            "the retention run takes 'now' from the scheduled event's `time` field, "
            "and this event has none"
        )
    try:
        now = datetime.fromisoformat(raw.strip())
    except ValueError as exc:
        raise InvalidScheduleEvent(f"event `time` {raw!r} is not an ISO-8601 timestamp") from exc
    if now.tzinfo is None or now.utcoffset() is None:
        raise InvalidScheduleEvent(f"event `time` {raw!r} has no UTC offset")
    return now.astimezone(UTC)


@job_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from convo_memory.execution_environment import get_container

    now = scheduled_time(event)
    report = get_container().retention.run(now, time_left(context)).to_dict()
    logger.info("retention run", extra=report)
    return report
