"""The erasure worker (ErasureQueue consumer), one job per record:

- an ``ErasureJob`` finishes an end user's erasure (``ErasureService.run``): idempotent
  and resumable, so a delivery cut short anywhere is finished by the next one. A record
  that fails is made visible again after 5, 10, 20 ... up to 120 seconds (by its receive
  count), and on its last delivery (``ERASURE_MAX_RECEIVE_COUNT``, the queue's
  maxReceiveCount) the receipt says ``failed`` before the message moves to ErasureDLQ,
  from which a redrive resumes it;
- a ``SweepJob`` sweeps deleted or erased sessions once no write that was in flight can
  still land (``ErasureService.sweep``);
- a ``ForkCopyJob`` copies a new fork's older inherited messages in from its parent
  (``ForkService.copy``): resumable, it goes on from the fork's copy mark.

A body that is neither is failed, not dropped (``convo_memory.workers.batches``).
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
    PartialItemFailureResponse,
    backoff_seconds,
    count_metric,
    fail_malformed_erasure_job,
    receive_count,
    redeliver_after,
)

if TYPE_CHECKING:
    from convo_memory.workers.records import ErasureJobRecord

REDELIVER_FIRST_SECONDS = 5
REDELIVER_MAX_SECONDS = 120


processor = JobBatch("erasure", fail_malformed_erasure_job(count_metric))


def redeliver_seconds(deliveries: int) -> int:
    """How long a job that failed its ``deliveries``-th delivery waits for the next."""
    return backoff_seconds(deliveries, REDELIVER_FIRST_SECONDS, REDELIVER_MAX_SECONDS)


def erase_record(record: ErasureJobRecord, lambda_context: Any = None) -> None:
    from convo_memory.domain.jobs import ErasureJob, ForkCopyJob
    from convo_memory.execution_environment import get_container

    set_correlation_id(record_correlation_id(record) or record.messageId)
    container = get_container()
    job = record.body
    deliveries = receive_count(record)
    seconds_left = time_left(lambda_context, default=900.0)
    try:
        if isinstance(job, ErasureJob):
            last = deliveries >= container.settings.erasure_max_receive_count
            erasure = container.erasures.run(job, last_delivery=last, time_left=seconds_left)
            logger.info(
                "erasure job",
                extra={
                    "erasureId": job.erasure_id,
                    "status": erasure.status if erasure else None,
                    "sessionsErased": erasure.sessions_erased if erasure else None,
                },
            )
        elif isinstance(job, ForkCopyJob):
            outcome = container.forks.copy(job, time_left=seconds_left)
            logger.info("fork copy job", extra={"forkId": job.fork_id, "outcome": outcome})
        else:
            removed = container.erasures.sweep(job, time_left=seconds_left)
            logger.info(
                "sweep job",
                extra={"sessions": len(job.session_ids), "removed": removed},
            )
    except Exception:
        wait = redeliver_seconds(deliveries)
        logger.warning(
            "erasure worker job failed; retried in %d s",
            wait,
            exc_info=True,
            extra={"messageId": record.messageId, "deliveries": deliveries},
        )
        redeliver_after(container.adapters.erasure_queue, record, wait)
        raise


@job_handler
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return processor.process(event, erase_record, context)
