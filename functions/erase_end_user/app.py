"""The erasure worker (ErasureQueue consumer), one job per record:

- an ``ErasureJob`` finishes an end user's erasure (``ErasureService.run``): idempotent
  and resumable, so a delivery cut short anywhere is finished by the next one. A record
  that fails is made visible again after 5, 10, 20 ... up to 120 seconds (by its receive
  count), and on its last delivery (``ERASURE_MAX_RECEIVE_COUNT``, the queue's
  maxReceiveCount) the receipt says ``failed`` before the message moves to ErasureDLQ,
  from which a redrive resumes it;
- a ``SweepJob`` sweeps deleted or erased sessions once no write that was in flight can
  still land (``ErasureService.sweep``);
- a ``ForkCopyJob`` is a fork's copy queued here before forks had their own queue
  (ForkCopyQueue, ``functions/copy_forks``): still copied (``ForkService.copy``), so an
  upgrade loses none.

A body that is neither is failed, not dropped (``convo_memory.workers.batches``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convo_memory.observability import job_handler, logger
from convo_memory.workers.batches import (
    PartialItemFailureResponse,
    count_metric,
    fail_malformed_erasure_job,
)
from convo_memory.workers.worker import Backoff, Delivery, Worker

if TYPE_CHECKING:
    from convo_memory.domain.jobs import ErasureJob, ErasureWork, ForkCopyJob, SweepJob

# A failed job comes back after 5, 10, 20 ... up to 120 seconds.
worker: Worker[ErasureWork] = Worker(
    "erasure",
    fail_malformed_erasure_job(count_metric),
    backoff=Backoff(first_seconds=5, most_seconds=120),
)


def erase(job: ErasureWork, delivery: Delivery) -> None:
    """An erasure, a sweep or a fork's copy, whichever the record holds."""
    from convo_memory.domain.jobs import ErasureJob, ForkCopyJob

    if isinstance(job, ErasureJob):
        finish_erasure(job, delivery)
    elif isinstance(job, ForkCopyJob):
        copy_fork(job, delivery)
    else:
        sweep(job, delivery)


def finish_erasure(job: ErasureJob, delivery: Delivery) -> None:
    container = delivery.container
    last = delivery.deliveries >= container.settings.erasure_max_receive_count
    erasure = container.erasures.run(job, last_delivery=last, time_left=delivery.time_left)
    logger.info(
        "erasure job",
        extra={
            "erasureId": job.erasure_id,
            "status": erasure.status if erasure else None,
            "sessionsErased": erasure.sessions_erased if erasure else None,
        },
    )


def copy_fork(job: ForkCopyJob, delivery: Delivery) -> None:
    outcome = delivery.container.forks.copy(job, time_left=delivery.time_left)
    logger.info("fork copy job", extra={"forkId": job.fork_id, "outcome": outcome})


def sweep(job: SweepJob, delivery: Delivery) -> None:
    removed = delivery.container.erasures.sweep(job, time_left=delivery.time_left)
    logger.info("sweep job", extra={"sessions": len(job.session_ids), "removed": removed})


@job_handler
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return worker.handle(event, erase, context)
