"""The transcript repair worker: lands turns whose transcript write failed on the
request path. It takes a ``RepairJob`` two ways:

- from RepairQueue (an SQS batch): one attempt per delivery; a record that fails is
  made visible again after 2, 4, 8 ... up to 60 seconds (by its receive count), so a
  repair retries within seconds rather than after the queue's visibility timeout, and
  moves to RepairDLQ after ``RepairMaxReceiveCount`` deliveries;
- as an asynchronous invocation, when the serving path could not send to the queue:
  retried here with backoff, then handed to the queue; failing both, the invocation
  fails, so Lambda runs it again and finally sends it to the function's on-failure
  destination (RepairQueue).

A body that is no ``RepairJob`` is failed, not dropped (``convo_memory.workers.batches``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convo_memory.domain.time_budget import time_left
from convo_memory.observability import (
    job_handler,
    logger,
    record_correlation_id,
    set_correlation_id,
)
from convo_memory.workers.batches import (
    JobBatch,
    backoff_seconds,
    count_metric,
    fail_malformed_repair_job,
    receive_count,
    redeliver_after,
)

if TYPE_CHECKING:
    from convo_memory.workers.records import RepairJobRecord

REDELIVER_FIRST_SECONDS = 2
REDELIVER_MAX_SECONDS = 60


processor = JobBatch("repair", fail_malformed_repair_job(count_metric))


def redeliver_seconds(deliveries: int) -> int:
    """How long a repair that failed its ``deliveries``-th delivery waits for the next."""
    return backoff_seconds(deliveries, REDELIVER_FIRST_SECONDS, REDELIVER_MAX_SECONDS)


def repair_record(record: RepairJobRecord, lambda_context: Any = None) -> None:
    from convo_memory.execution_environment import get_container

    set_correlation_id(record_correlation_id(record) or record.messageId)
    container = get_container()
    job = record.body
    try:
        outcome = container.recorder.repair(job)
    except Exception:
        wait = redeliver_seconds(receive_count(record))
        logger.warning(
            "transcript repair failed; retried in %d s",
            wait,
            exc_info=True,
            extra={"messageId": record.messageId, "sessionId": job.session_id},
        )
        container.adapters.metrics.count("TranscriptRepairRetried")
        redeliver_after(container.adapters.repair_queue, record, wait)
        raise
    logger.info(
        "transcript repair",
        extra={"outcome": outcome, "messageId": record.messageId, "sessionId": job.session_id},
    )


def repair_event(event: dict[str, Any], context: Any) -> dict[str, str]:
    """An asynchronous invocation's job (the serving path's fallback)."""
    from convo_memory.domain.jobs import RepairJob
    from convo_memory.execution_environment import get_container

    job = RepairJob.model_validate(event)  # malformed: fails, and Lambda keeps it
    outcome = get_container().recorder.repair_async(job, time_left(context, default=60.0))
    logger.info(
        "transcript repair (asynchronous invocation)",
        extra={"outcome": outcome, "sessionId": job.session_id},
    )
    return {"outcome": outcome}


@job_handler
def handler(event: dict[str, Any], context: Any) -> Any:
    if isinstance(event, dict) and "Records" in event:
        return processor.process(event, repair_record, context)
    return repair_event(event, context)
