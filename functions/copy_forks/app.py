"""The fork copy worker (ForkCopyQueue consumer): a ``ForkCopyJob`` copies a new fork's
older inherited messages in from its parent (``ForkService.copy``), after the parent's
own copy when that is still due. Resumable: a delivery cut short goes on from the fork's
copy mark. A record that fails is made visible again after 2, 4, 8 ... up to 60 seconds
(by its receive count) and moves to ForkCopyDLQ after its last delivery; meanwhile the
fork reads what it lacks through its parent, and the parent's deletion finishes the copy.

Forks run on capacity of their own: this queue and this function are not the erasure
queue and worker, so one workspace's storm of forks delays no one's erasures.
A body that is no ``ForkCopyJob`` is failed, not dropped (``convo_memory.workers.batches``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convo_memory.observability import job_handler, logger
from convo_memory.workers.batches import (
    PartialItemFailureResponse,
    count_metric,
    fail_malformed_fork_copy_job,
)
from convo_memory.workers.worker import Backoff, Delivery, Worker

if TYPE_CHECKING:
    from convo_memory.domain.jobs import ForkCopyJob

# A failed copy comes back after 2, 4, 8 ... up to 60 seconds.
worker: Worker[ForkCopyJob] = Worker(
    "fork_copy",
    fail_malformed_fork_copy_job(count_metric),
    backoff=Backoff(first_seconds=2, most_seconds=60),
    retried_metric="ForkCopyRetried",
)


def copy_fork(job: ForkCopyJob, delivery: Delivery) -> None:
    """Copy what one fork still lacks of its parent."""
    outcome = delivery.container.forks.copy(job, time_left=delivery.time_left)
    logger.info("fork copy job", extra={"forkId": job.fork_id, "outcome": outcome})


@job_handler
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return worker.handle(event, copy_fork, context)
