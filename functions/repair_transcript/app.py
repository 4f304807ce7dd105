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
from convo_memory.observability import job_handler, logger
from convo_memory.workers.batches import count_metric, fail_malformed_repair_job
from convo_memory.workers.worker import Backoff, Delivery, Worker

if TYPE_CHECKING:
    from convo_memory.domain.jobs import RepairJob

# A failed repair comes back after 2, 4, 8 ... up to 60 seconds.
worker: Worker[RepairJob] = Worker(
    "repair",
    fail_malformed_repair_job(count_metric),
    backoff=Backoff(first_seconds=2, most_seconds=60),
    retried_metric="TranscriptRepairRetried",
)


def repair(job: RepairJob, delivery: Delivery) -> None:
    """Land one turn whose transcript write failed (once, wherever it came from)."""
    outcome = delivery.container.recorder.repair(job)
    logger.info(
        "transcript repair",
        extra={"outcome": outcome, "messageId": delivery.message_id, "sessionId": job.session_id},
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
        return worker.handle(event, repair, context)
    return repair_event(event, context)
